/* The master connection of a client in master mode (fleet_internal.h):
 * ATTACH and its answers (which workers to read from, whether the job is
 * finished), COMMIT and COMMIT_REPLY, TOKEN, CLIENT_STATS every refresh, and
 * reconnecting with every unanswered commit sent again under its nonce. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/err.h"
#include "rpc/port_hint.h"
#include "trainer/fleet_internal.h"

static sl_err_t send_attach(sl_trainer_t *t, int fd, sl_error_t *err)
{
    tr_fleet_t *f = t->fleet;
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_RPC_VERSION;
    a.job_id = f->job_id;
    a.client_id = f->client_id;
    a.rank = t->rank;
    a.world_size = t->world_size;
    return sl_rpc_send(fd, SL_RPC_ATTACH, &a.base, NULL, 0, err);
}

/* Take the master's view of the job: start a worker connection for each
 * new worker, stop the ones it no longer names, and collect finished
 * connections that hold nothing (joined after mu is released: they are
 * unlinked here). A connection that saw END stays while it is named, so
 * that the worker is not read again; one given up is started again at the
 * next ATTACHED that names its worker. Caller holds mu; *reap gets the
 * unlinked connections. */
static void apply_attached_locked(sl_trainer_t *t, const Sluice__Control__Attached *m,
                                  tr_conn_t **reap) SL_REQUIRES(t->mu)
{
    tr_fleet_t *f = t->fleet;
    if (m->failed) {
        /* The job failed at the master (a split its workers cannot read):
         * end now with the reason, not after waiting for batches that will
         * never come. Batches held are not handed out (as for any failure). */
        sl_error_t e = {0};
        sl_err_t code = m->failure_code < 0 && m->failure_code >= SL_ERR_UNSUPPORTED &&
                                m->failure_code != SL_ERR_CLOSED
                            ? (sl_err_t)m->failure_code
                            : SL_ERR_IO;
        sl_error_set(&e, code, "master %s: job %s failed: %s", f->master, f->job_id,
                     m->failure && m->failure[0] ? m->failure : "no reason given");
        tr_fail_locked(t, &e);
    }
    f->finished = m->finished;
    f->epoch = m->epoch;
    snprintf(f->sharding, sizeof f->sharding, "%s", m->sharding ? m->sharding : "");
    if (m->order_ranks > 0 && t->state != TR_FAILED) {
        /* the deterministic order: before any worker connection starts,
         * so that each asks for its g-window from the first */
        sl_error_t e = {0};
        if (tr_order_setup_locked(t, m->order_ranks, m->epoch, &e) != SL_OK) {
            sl_error_prefix(&e, "master %s: job %s: ", f->master, f->job_id);
            tr_fail_locked(t, &e);
        } else {
            tr_order_advance_locked(t, m->epoch, &f->pending);
        }
    }
    for (tr_conn_t *c = t->conns; c; c = c->next)
        c->listed = false;
    for (size_t i = 0; i < m->n_workers; i++) {
        const Sluice__Control__WorkerInfo *w = m->workers[i];
        if (!w->worker_id || !w->serve_address || !w->serve_address[0]) continue;
        tr_conn_t *c = t->conns;
        while (c && (strcmp(c->worker_id, w->worker_id) != 0 ||
                     strcmp(c->address, w->serve_address) != 0))
            c = c->next;
        if (c) {
            c->listed = true;
            continue;
        }
        if (t->closing || f->finished || t->state == TR_FAILED) continue;
        if (strlen(w->worker_id) >= TR_ID_MAX || strlen(w->serve_address) >= TR_ADDR_MAX) continue;
        /* Out of memory or no thread: the worker is tried again on the
         * next refresh. */
        c = tr_conn_new(t, w->worker_id, w->serve_address);
        if (c && tr_conn_start(c, NULL) != SL_OK) {
            t->conns = c->next; /* linked first by tr_conn_new; no thread to join */
            tr_conn_free(c);
            c = NULL;
        }
        if (c) c->listed = true;
    }
    tr_conn_t **pp = &t->conns;
    while (*pp) {
        tr_conn_t *c = *pp;
        if (!c->listed) tr_conn_stop_locked(t, c, "the master no longer names this worker");
        bool dead = c->finished && c->held == 0 && (!c->listed || !c->got_end);
        if (dead) {
            *pp = c->next;
            c->next = *reap;
            *reap = c;
        } else {
            pp = &c->next;
        }
    }
}

static void free_reaped(tr_conn_t *reap)
{
    while (reap) {
        tr_conn_t *n = reap->next;
        tr_conn_free(reap);
        reap = n;
    }
}

/* Send every unanswered commit again, in nonce order, on a fresh master
 * connection: the master answers a (client_id, nonce) it has seen with its
 * first answer, so a commit that was accepted before the connection (or the
 * master) died is not refused as an overlap with itself. Caller holds
 * msend_mu and mu. */
static sl_err_t resend_pending_locked(sl_trainer_t *t, int fd, sl_error_t *err)
    SL_REQUIRES(t->mu, t->fleet->msend_mu)
{
    for (const tr_item_t *it = t->fleet->pending.head; it; it = it->next) {
        Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
        Sluice__Control__RowRange rows = SLUICE__CONTROL__ROW_RANGE__INIT;
        Sluice__Control__Commit c = SLUICE__CONTROL__COMMIT__INIT;
        ref.job_id = t->fleet->job_id;
        ref.epoch = it->epoch;
        ref.split = it->split;
        ref.generation = it->generation;
        rows.from_row = it->from_row;
        rows.to_row = it->to_row;
        c.client_id = t->fleet->client_id;
        c.nonce = it->nonce;
        c.ref = &ref;
        c.rows = &rows;
        c.num_samples = it->num_samples;
        SL_FORWARD_IF_ERROR(sl_rpc_send(fd, SL_RPC_COMMIT, &c.base, NULL, 0, err));
    }
    return SL_OK;
}

void fl_master_send_commit(sl_trainer_t *t, const tr_item_t *it)
{
    tr_fleet_t *f = t->fleet;
    Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
    Sluice__Control__RowRange rows = SLUICE__CONTROL__ROW_RANGE__INIT;
    Sluice__Control__Commit c = SLUICE__CONTROL__COMMIT__INIT;
    ref.job_id = f->job_id;
    ref.epoch = it->epoch;
    ref.split = it->split;
    ref.generation = it->generation;
    rows.from_row = it->from_row;
    rows.to_row = it->to_row;
    c.client_id = f->client_id;
    c.nonce = it->nonce;
    c.ref = &ref;
    c.rows = &rows;
    c.num_samples = it->num_samples;
    sl_mutex_lock(&f->msend_mu);
    /* Disconnected: the master thread sends it after reconnecting. */
    if (f->mfd >= 0 && sl_rpc_send(f->mfd, SL_RPC_COMMIT, &c.base, NULL, 0, NULL) != SL_OK)
        shutdown(f->mfd, SHUT_RDWR);
    sl_mutex_unlock(&f->msend_mu);
}

static sl_err_t master_error(const sl_trainer_t *t, const Sluice__Dpp__Error *e, sl_error_t *err)
{
    sl_err_t code = sl_rpc_error_code(e);
    return sl_error_set(err, code, "%s: %s", t->fleet->label,
                        e->message && e->message[0] ? e->message : sl_err_str(code));
}

sl_err_t fl_master_open(sl_trainer_t *t, int timeout_ms, bool *refused, sl_error_t *err)
{
    tr_fleet_t *f = t->fleet;
    *refused = false;
    /* One deadline for the whole attempt, as a worker connection's. */
    uint64_t deadline = sl_clock_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    int fd;
    sl_err_t rc = sl_rpc_connect(f->master, timeout_ms, &fd, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "master %s: ", f->master);
        return rc;
    }
    if (t->secret && (rc = sl_rpc_auth_client(fd, t->secret, deadline, err)) != SL_OK)
        sl_error_prefix(err, "master %s: ", f->master);
    if (rc == SL_OK) rc = send_attach(t, fd, err);
    sl_rpc_frame_t fr = {0};
    if (rc == SL_OK) rc = sl_rpc_recv_until(fd, deadline, &t->rpc_limits, t->a, &fr, err);
    if (rc == SL_OK) {
        atomic_fetch_add(&t->bytes, fr.wire_bytes);
        if (fr.type == SL_RPC_ERROR) {
            /* "not now" (its connection cap) is tried again */
            rc = master_error(t, (const Sluice__Dpp__Error *)fr.msg, err);
            *refused = !sl_rpc_error_retriable(rc);
        } else if (fr.type != SL_RPC_ATTACHED) {
            rc = sl_error_set(err, SL_ERR_PROTOCOL, "master %s: expected attached, got %s%s",
                              f->master, sl_rpc_type_name(fr.type), sl_rpc_auth_hint(fr.type));
        }
    } else if (sl_rpc_handshake_reached_http(f->master, rc)) {
        rc =
            sl_error_set(err, SL_ERR_INVALID, "master %s: %s", f->master, SL_RPC_ADMIN_NOT_CONTROL);
        *refused = true;
    } else if (strstr(err->msg, "master ") != err->msg) {
        sl_error_prefix(err, "master %s: attaching to job %s: ", f->master, f->job_id);
    }
    if (rc != SL_OK) {
        sl_rpc_frame_free(&fr);
        close(fd);
        return rc;
    }
    tr_conn_t *reap = NULL;
    sl_mutex_lock(&t->fleet->msend_mu); /* t->fleet, not f: as the lock rules name it */
    sl_mutex_lock(&t->mu);
    if (t->closing) {
        rc = sl_error_set(err, SL_ERR_CLOSED, "client is closing");
    } else {
        apply_attached_locked(t, (const Sluice__Control__Attached *)fr.msg, &reap);
        rc = resend_pending_locked(t, fd, err);
    }
    if (rc == SL_OK) {
        f->mfd = fd;
        f->mgen++;
        pthread_cond_broadcast(&t->cv); /* a token request is asked again */
    }
    sl_mutex_unlock(&t->mu);
    sl_mutex_unlock(&t->fleet->msend_mu);
    sl_rpc_frame_free(&fr);
    free_reaped(reap);
    if (rc != SL_OK) close(fd);
    return rc;
}

/* Close the master socket (master thread only). */
static void master_uninstall(sl_trainer_t *t)
{
    tr_fleet_t *f = t->fleet;
    sl_mutex_lock(&f->msend_mu);
    int fd = f->mfd;
    f->mfd = -1;
    sl_mutex_unlock(&f->msend_mu);
    if (fd >= 0) close(fd);
}

static void on_commit_reply(sl_trainer_t *t, const Sluice__Control__CommitReply *r)
{
    tr_fleet_t *f = t->fleet;
    sl_mutex_lock(&t->mu);
    tr_item_t *it = f->pending.head;
    while (it && it->nonce != r->nonce)
        it = it->next;
    /* Not pending: the answer to a commit sent twice (resent after a
     * reconnect) that was already answered. */
    if (it) {
        /* Answered either way: the worker may let the batch go (once:
         * a held batch is asked about again). */
        if (!it->acked && t->order)
            tr_conn_ack_locked(t, it->conn, it->delivery_id);
        else if (!it->acked)
            tr_conn_later_locked(t, it->conn, it->delivery_id, false);
        it->acked = true;
        bool committed =
            r->result == SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED && t->state != TR_FAILED;
        if (committed && r->equal) {
            /* equal batches per rank: handed out within the quota
             * (fleet_equal.c), held in pending until then */
            fl_equal_reply_locked(t, it, r);
            pthread_cond_broadcast(&t->cv);
            sl_mutex_unlock(&t->mu);
            return;
        }
        tr_list_remove(&f->pending, it);
        if (it->eq_held) f->eq_held--;
        it->eq_held = false;
        if (committed && t->order) {
            /* the deterministic order: out in g order, then perhaps the
             * next epoch (this was its last unanswered commit) */
            atomic_fetch_add(&f->committed, 1);
            tr_order_put_locked(t, it);
            tr_order_advance_locked(t, f->epoch, &f->pending);
        } else if (committed) {
            tr_ready_push_locked(t, it);
            atomic_fetch_add(&f->committed, 1);
        } else {
            /* Another copy won (OVERLAP), the epoch is over (STALE) or the
             * job is gone (UNKNOWN): never delivered. */
            atomic_fetch_add(&t->dropped, 1);
            tr_item_leave_locked(t, it, true);
        }
        pthread_cond_broadcast(&t->cv);
    }
    sl_mutex_unlock(&t->mu);
}

static void on_token(sl_trainer_t *t, const Sluice__Control__Token *m, uint64_t gen)
{
    tr_fleet_t *f = t->fleet;
    sl_mutex_lock(&t->mu);
    if (f->token_wanted && !f->token_ready && f->token_gen == gen) {
        size_t n = m->token.len;
        uint8_t *p = n ? sl_alloc(t->a, n) : NULL;
        /* Out of memory, or an empty token (a master always sends a
         * versioned one): token NULL, which sl_trainer_resume_token reports. */
        if (p) memcpy(p, m->token.data, n);
        f->token = p;
        f->token_len = p ? n : 0;
        f->token_ready = true;
        pthread_cond_broadcast(&t->cv);
    }
    sl_mutex_unlock(&t->mu);
}

/* Report the trainer's wait time to the autoscaler. Master thread. The
 * wait of a sl_trainer_next call still in progress counts (tr_wait_ns): a
 * trainer that waits longer than refresh_ms for each batch (slow workers)
 * would otherwise report no wait while it waits and then more wait than
 * time, which the master cannot use. One thread waits at a time, so the
 * wait is at most the interval. */
static void send_stats(sl_trainer_t *t, int fd)
{
    tr_fleet_t *f = t->fleet;
    uint64_t now = sl_clock_ns();
    uint64_t wait = tr_wait_ns(t, now), b = atomic_load(&t->batches), s = atomic_load(&t->samples);
    if (wait < f->rep_wait_ns) wait = f->rep_wait_ns;
    Sluice__Control__ClientStats cs = SLUICE__CONTROL__CLIENT_STATS__INIT;
    cs.client_id = f->client_id;
    cs.job_id = f->job_id;
    cs.elapsed_ns = now - f->rep_at_ns;
    cs.wait_ns = wait - f->rep_wait_ns;
    if (cs.wait_ns > cs.elapsed_ns) cs.wait_ns = cs.elapsed_ns;
    cs.batches = b - f->rep_batches;
    cs.samples = s - f->rep_samples;
    sl_mutex_lock(&f->msend_mu);
    sl_err_t rc = sl_rpc_send(fd, SL_RPC_CLIENT_STATS, &cs.base, NULL, 0, NULL);
    if (rc == SL_OK) rc = send_attach(t, fd, NULL);
    if (rc != SL_OK) shutdown(fd, SHUT_RDWR);
    sl_mutex_unlock(&f->msend_mu);
    f->rep_wait_ns = wait;
    f->rep_batches = b;
    f->rep_samples = s;
    f->rep_at_ns = now;
}

/* tr_attempt_fn for tr_reconnect. */
static sl_err_t master_attempt(void *ctx, int timeout_ms, bool *refused, sl_error_t *err)
{
    return fl_master_open(ctx, timeout_ms, refused, err);
}

/* The master connection is gone: reconnect under the client's policy
 * (tr_reconnect). Unanswered commits wait (their batches stay held) and
 * are sent again by fl_master_open. @return false when the client failed
 * or closes. */
static bool master_reconnect(sl_trainer_t *t, const sl_error_t *lost)
{
    master_uninstall(t);
    sl_error_t e = {0};
    sl_err_t rc = tr_reconnect(t, NULL, t->fleet->label, lost, master_attempt, t, &e);
    if (rc == SL_OK) return true;
    if (!t->closing) tr_fail(t, &e);
    return false;
}

/* Handle one frame from the master. @return SL_OK to go on; otherwise e
 * says why the connection ends (SL_ERR_CLOSED: GOODBYE, reconnect). */
static sl_err_t on_master_frame(sl_trainer_t *t, sl_rpc_frame_t *fr, uint64_t gen, sl_error_t *e)
{
    switch (fr->type) {
    case SL_RPC_COMMIT_REPLY:
        on_commit_reply(t, (const Sluice__Control__CommitReply *)fr->msg);
        return SL_OK;
    case SL_RPC_ATTACHED: {
        tr_conn_t *reap = NULL;
        sl_mutex_lock(&t->mu);
        apply_attached_locked(t, (const Sluice__Control__Attached *)fr->msg, &reap);
        pthread_cond_broadcast(&t->cv);
        sl_mutex_unlock(&t->mu);
        free_reaped(reap);
        return SL_OK;
    }
    case SL_RPC_TOKEN:
        on_token(t, (const Sluice__Control__Token *)fr->msg, gen);
        return SL_OK;
    case SL_RPC_ERROR:
        return master_error(t, (const Sluice__Dpp__Error *)fr->msg, e);
    case SL_RPC_GOODBYE: {
        const Sluice__Dpp__Goodbye *g = (const Sluice__Dpp__Goodbye *)fr->msg;
        return sl_error_set(e, SL_ERR_CLOSED, "%s said goodbye: %s", t->fleet->label,
                            g->reason && g->reason[0] ? g->reason : "no reason given");
    }
    default:
        return sl_error_set(e, SL_ERR_PROTOCOL, "%s: unexpected %s frame", t->fleet->label,
                            sl_rpc_type_name(fr->type));
    }
}

void *fl_master_main(void *arg)
{
    sl_trainer_t *t = arg;
    tr_fleet_t *f = t->fleet;
    uint64_t next_tick = sl_clock_ns() + (uint64_t)f->refresh_ms * 1000000ull;
    while (!t->closing) {
        sl_mutex_lock(&f->msend_mu);
        int fd = f->mfd;
        uint64_t gen = f->mgen;
        sl_mutex_unlock(&f->msend_mu);
        sl_error_t e = {0};
        if (fd < 0) {
            sl_error_set(&e, SL_ERR_CLOSED, "not connected");
            if (!master_reconnect(t, &e)) break;
            continue;
        }
        uint64_t now = sl_clock_ns();
        if (now >= next_tick) {
            send_stats(t, fd);
            next_tick = now + (uint64_t)f->refresh_ms * 1000000ull;
        }
        int wait_ms = (int)((next_tick - now) / 1000000ull) + 1;
        int ask_ms = fl_equal_tick(t, now); /* batches held for the equal-batches quota */
        tr_order_check_stall(t, now);       /* the deterministic order: a long wait logged */
        if (ask_ms < wait_ms) wait_ms = ask_ms;
        int ack_ms = tr_conns_flush_due(t, now); /* withheld acks and credits */
        if (ack_ms < wait_ms) wait_ms = ack_ms;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, wait_ms);
        if (n == 0 || (n < 0 && errno == EINTR)) continue;
        sl_rpc_frame_t fr;
        sl_err_t rc = sl_rpc_recv(fd, &t->rpc_limits, t->a, &fr, &e);
        if (rc == SL_OK) {
            atomic_fetch_add(&t->bytes, fr.wire_bytes);
            rc = on_master_frame(t, &fr, gen, &e);
            sl_rpc_frame_free(&fr);
            if (rc == SL_OK) continue;
        }
        if (t->closing) break;
        /* An ERROR closes the connection: "not now" (closed idle, the
         * master's cap or failed state) means reconnect, like a loss. */
        bool fatal = rc == SL_ERR_PROTOCOL || rc == SL_ERR_VERSION || rc == SL_ERR_TOO_LARGE ||
                     (!sl_rpc_error_retriable(rc) && rc != SL_ERR_TRUNCATED);
        if (fatal) {
            sl_mutex_lock(&f->msend_mu);
            if (f->mfd >= 0 && rc != SL_ERR_NOMEM && e.msg[0] && strstr(e.msg, "master ") != e.msg)
                sl_rpc_send_error(f->mfd, rc, e.msg);
            sl_mutex_unlock(&f->msend_mu);
            if (strstr(e.msg, "master ") != e.msg) sl_error_prefix(&e, "master %s: ", f->master);
            tr_fail(t, &e);
            master_uninstall(t);
            break;
        }
        if (!master_reconnect(t, &e)) break;
        next_tick = sl_clock_ns() + (uint64_t)f->refresh_ms * 1000000ull;
    }
    /* The client failed or closes: workers are no use any more. */
    sl_mutex_lock(&t->mu);
    for (tr_conn_t *c = t->conns; c; c = c->next)
        tr_conn_stop_locked(t, c, "client closed");
    sl_mutex_unlock(&t->mu);
    return NULL;
}

/* The trainer client in master mode (fleet_internal.h): set-up, the
 * committer that every received batch passes through (COMMIT before it may
 * be handed out), the end of the job, resume tokens and close. The master
 * connection lives in fleet_master.c, the worker connections (the same as
 * direct mode's) in worker_conn.c. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "trainer/fleet_internal.h"
#include "trainer/reorder.h"

/* A client id that no other client process shares: the master keeps commit
 * answers per (client_id, nonce), and nonces restart at 1 in every process. */
static void make_client_id(char *out, size_t cap, const char *name)
{
    uint64_t r = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &r, sizeof r) != (ssize_t)sizeof r) r = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^
         ((uint64_t)getpid() << 32);
    snprintf(out, cap, "%.80s-%016" PRIx64, name, r);
}

sl_err_t tr_fleet_connect(sl_trainer_t *t, const sl_trainer_opts_t *opts, sl_error_t *err)
{
    if (!opts->job_id || !opts->job_id[0])
        return sl_error_set(err, SL_ERR_INVALID, "trainer: master %s given without a job id",
                            opts->master);
    if (strlen(opts->master) >= TR_ADDR_MAX || strlen(opts->job_id) >= TR_ID_MAX ||
        (opts->client_id && strlen(opts->client_id) >= TR_ID_MAX))
        return sl_error_set(err, SL_ERR_INVALID,
                            "trainer: master address, job id or client id too long (limits %d, "
                            "%d, %d bytes)",
                            TR_ADDR_MAX - 1, TR_ID_MAX - 1, TR_ID_MAX - 1);
    tr_fleet_t *f = sl_calloc(t->a, 1, sizeof *f);
    if (!f) return sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
    snprintf(f->master, sizeof f->master, "%s", opts->master);
    snprintf(f->label, sizeof f->label, "master %s", opts->master);
    snprintf(f->job_id, sizeof f->job_id, "%s", opts->job_id);
    if (opts->client_id && opts->client_id[0])
        snprintf(f->client_id, sizeof f->client_id, "%s", opts->client_id);
    else
        make_client_id(f->client_id, sizeof f->client_id, t->client_name);
    f->refresh_ms = opts->refresh_ms > 0 ? opts->refresh_ms : 1000;
    f->mfd = -1;
    f->next_nonce = 1;
    f->rep_at_ns = sl_clock_ns();
    sl_mutex_init(&f->msend_mu);
    t->fleet = f;

    bool refused;
    SL_FORWARD_IF_ERROR(
        fl_master_open(t, t->connect_timeout_ms, &refused, err)); /* the caller's destroy frees f */
    int prc = pthread_create(&f->mthread, NULL, fl_master_main, t);
    if (prc != 0)
        return sl_error_set(err, SL_ERR_IO, "trainer: cannot start the master thread: %s",
                            strerror(prc));
    f->mthread_started = true;
    return SL_OK;
}

sl_err_t tr_fleet_check_batch(const sl_trainer_t *t, const Sluice__Dpp__BatchInfo *bi,
                              sl_error_t *e)
{
    const tr_fleet_t *fl = t->fleet;
    if (!bi->job_id || strcmp(bi->job_id, fl->job_id) != 0)
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "delivery %" PRIu64 ": batch of job '%.100s', this client reads job "
                            "'%s' (a worker under a master names its job in every batch)",
                            bi->delivery_id, bi->job_id ? bi->job_id : "", fl->job_id);
    if (bi->from_row >= bi->to_row)
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "delivery %" PRIu64 ": split %u rows [%" PRIu64 ", %" PRIu64
                            ") is not a range",
                            bi->delivery_id, bi->split, bi->from_row, bi->to_row);
    return SL_OK;
}

void tr_fleet_receive(sl_trainer_t *t, tr_item_t *it, uint32_t rank_plus_one)
{
    tr_fleet_t *fl = t->fleet;
    bool ours = rank_plus_one == 0 || rank_plus_one == t->rank + 1;
    sl_mutex_lock(&t->mu);
    it->conn->held++;
    if (!ours) {
        /* Static sharding: another rank's batch (a worker bug). Not
         * committed, so its rows stay todo and are leased again. */
        tr_conn_ack_locked(t, it->conn, it->delivery_id);
        atomic_fetch_add(&t->dropped, 1);
        tr_item_leave_locked(t, it, true);
        sl_mutex_unlock(&t->mu);
        return;
    }
    it->nonce = fl->next_nonce++;
    tr_list_push(&fl->pending, it);
    /* A copy: once mu is released the answer may come (if a reconnect
     * resent it) and the item leave. */
    tr_item_t copy = *it;
    sl_mutex_unlock(&t->mu);
    fl_master_send_commit(t, &copy);
}

bool tr_fleet_ended_locked(const sl_trainer_t *t, sl_error_t *err)
{
    const tr_fleet_t *f = t->fleet;
    /* Finished: every range is committed; answers still owed to us (group
     * commit) come first, they may be ours. */
    if (!f->finished || f->pending.count > 0) return false;
    sl_error_set(err, SL_ERR_CLOSED, "job %s: every epoch is delivered", f->job_id);
    return true;
}

sl_err_t tr_fleet_timeout_locked(const sl_trainer_t *t, int timeout_ms, sl_error_t *err)
{
    const tr_fleet_t *f = t->fleet;
    /* held: batch.equal_batches_per_rank's quota (fleet_equal.c) */
    char held[64] = "";
    if (f->eq_held > 0)
        snprintf(held, sizeof held, ", %u batches held for the equal-batches quota", f->eq_held);
    char order[128]; /* the deterministic order: the batch it waits for */
    tr_order_describe_locked(t, order, sizeof order);
    return sl_error_set(err, SL_ERR_TIMEOUT,
                        "job %s: no batch within %d ms (%u workers connected, %u commits "
                        "unanswered%s%s%s%.300s)",
                        f->job_id, timeout_ms, atomic_load(&t->workers),
                        f->pending.count - f->eq_held, held, order,
                        t->last_problem[0] ? "; last problem: " : "", t->last_problem);
}

/* Append one item's ref and rows to the token request (caller holds mu). */
static void add_undelivered(const tr_fleet_t *f, const tr_item_t *it,
                            Sluice__Control__SplitRef *refs, Sluice__Control__RowRange *rows,
                            Sluice__Control__SplitRef **rp, Sluice__Control__RowRange **qp,
                            size_t i)
{
    sluice__control__split_ref__init(&refs[i]);
    refs[i].job_id = (char *)f->job_id;
    refs[i].epoch = it->epoch;
    refs[i].split = it->split;
    refs[i].generation = it->generation;
    sluice__control__row_range__init(&rows[i]);
    rows[i].from_row = it->from_row;
    rows[i].to_row = it->to_row;
    rp[i] = &refs[i];
    qp[i] = &rows[i];
}

/* Send TOKEN_REQUEST naming every range committed, or maybe committed, and
 * not handed out. Taken under msend_mu, so every COMMIT already sent on
 * this connection is in the lists (commits join `pending` before they are
 * sent): the master, which reads frames in order, cannot have committed a
 * range for us that the request does not name. */
static sl_err_t send_token_request(sl_trainer_t *t, const int64_t *step, uint64_t *gen,
                                   sl_error_t *err)
{
    tr_fleet_t *f = t->fleet;
    sl_mutex_lock(&f->msend_mu);
    if (f->mfd < 0) {
        sl_mutex_unlock(&f->msend_mu);
        return SL_ERR_AGAIN;
    }
    sl_mutex_lock(&t->mu);
    /* the deterministic order: batches committed and waiting in the reorder
     * buffer for a lower g were not handed out either */
    size_t held = t->order ? tr_reorder_held(t->order) : 0;
    size_t n = (size_t)f->pending.count + t->ready.count + held;
    size_t bytes = n * (sizeof(Sluice__Control__SplitRef) + sizeof(Sluice__Control__RowRange) +
                        sizeof(void *) * 2);
    uint8_t *mem = n ? sl_alloc(t->a, bytes) : NULL;
    if (n && !mem) {
        sl_mutex_unlock(&t->mu);
        sl_mutex_unlock(&f->msend_mu);
        return sl_error_set(err, SL_ERR_NOMEM, "resume token: out of memory");
    }
    /* One block: n refs, n ranges, then the two pointer arrays (NULL when
     * n is 0: nothing to point into). */
    Sluice__Control__SplitRef *refs = (Sluice__Control__SplitRef *)mem;
    Sluice__Control__RowRange *rows = n ? (Sluice__Control__RowRange *)(refs + n) : NULL;
    Sluice__Control__SplitRef **rp = n ? (Sluice__Control__SplitRef **)(rows + n) : NULL;
    Sluice__Control__RowRange **qp = n ? (Sluice__Control__RowRange **)(rp + n) : NULL;
    size_t i = 0;
    for (const tr_item_t *it = t->ready.head; it; it = it->next)
        add_undelivered(f, it, refs, rows, rp, qp, i++);
    for (const tr_item_t *it = f->pending.head; it; it = it->next)
        add_undelivered(f, it, refs, rows, rp, qp, i++);
    for (uint32_t k = 0; held > 0 && k < tr_reorder_cap(t->order); k++) {
        const tr_item_t *it = tr_reorder_slot(t->order, k);
        if (it) add_undelivered(f, it, refs, rows, rp, qp, i++);
    }
    f->token_wanted = true;
    f->token_ready = false;
    f->token_gen = f->mgen;
    *gen = f->mgen;
    sl_mutex_unlock(&t->mu);
    Sluice__Control__TokenRequest req = SLUICE__CONTROL__TOKEN_REQUEST__INIT;
    req.job_id = f->job_id;
    req.client_id = f->client_id;
    req.n_undelivered_refs = n;
    req.undelivered_refs = rp;
    req.n_undelivered_rows = n;
    req.undelivered_rows = qp;
    req.has_step = step != NULL;
    req.step = step != NULL ? (uint64_t)*step : 0;
    sl_err_t rc = sl_rpc_send(f->mfd, SL_RPC_TOKEN_REQUEST, &req.base, NULL, 0, err);
    if (rc != SL_OK) shutdown(f->mfd, SHUT_RDWR); /* the master thread reconnects */
    sl_mutex_unlock(&f->msend_mu);
    if (mem) sl_free(t->a, mem, bytes);
    return rc == SL_OK ? SL_OK : SL_ERR_AGAIN;
}

static sl_err_t resume_token(sl_trainer_t *t, const int64_t *step, int timeout_ms, uint8_t **token,
                             size_t *len, sl_error_t *err);

sl_err_t sl_trainer_resume_token(sl_trainer_t *t, int timeout_ms, uint8_t **token, size_t *len,
                                 sl_error_t *err)
{
    return resume_token(t, NULL, timeout_ms, token, len, err);
}

sl_err_t sl_trainer_resume_token_at(sl_trainer_t *t, int64_t step, int timeout_ms, uint8_t **token,
                                    size_t *len, sl_error_t *err)
{
    if (step < 0) {
        if (token) *token = NULL;
        if (len) *len = 0;
        return sl_error_set(err, SL_ERR_INVALID, "resume token: step %lld (>= 0)", (long long)step);
    }
    return resume_token(t, &step, timeout_ms, token, len, err);
}

static sl_err_t resume_token(sl_trainer_t *t, const int64_t *step, int timeout_ms, uint8_t **token,
                             size_t *len, sl_error_t *err)
{
    if (token) *token = NULL;
    if (len) *len = 0;
    if (!t || !token || !len)
        return sl_error_set(err, SL_ERR_INVALID, "resume token: no client or output");
    if (!t->fleet)
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "resume token: the client reads from worker %s directly; tokens "
                            "come from a master (opts.master)",
                            t->address);
    tr_fleet_t *f = t->fleet;
    uint64_t until = sl_clock_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    sl_err_t rc = SL_ERR_AGAIN;
    uint64_t gen = 0;
    for (;;) {
        if (rc == SL_ERR_AGAIN) {
            rc = send_token_request(t, step, &gen, err);
            if (rc != SL_OK && rc != SL_ERR_AGAIN) return rc;
        }
        sl_mutex_lock(&t->mu);
        /* Wait for the answer, or for a new master connection to ask again
         * on (the old one's answer is lost with it). */
        while (!f->token_ready && t->state != TR_FAILED && !t->closing &&
               (rc != SL_OK || f->mgen == gen) && (timeout_ms < 0 || sl_clock_ns() < until)) {
            uint64_t wake = sl_clock_ns() + 50000000ull;
            if (timeout_ms >= 0 && wake > until) wake = until;
            struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
                                  .tv_nsec = (long)(wake % 1000000000ull)};
            sl_cond_timedwait(&t->cv, &t->mu, &ts);
            /* A send that failed waits for the master thread's reconnect. */
            if (rc != SL_OK && f->mfd >= 0) break;
        }
        if (f->token_ready && !f->token) {
            f->token_ready = f->token_wanted = false;
            sl_mutex_unlock(&t->mu);
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "resume token: master %s sent an empty token (or out of memory)",
                                f->master);
        }
        if (f->token_ready) {
            *token = f->token;
            *len = f->token_len;
            f->token = NULL;
            f->token_len = 0;
            f->token_ready = f->token_wanted = false;
            sl_mutex_unlock(&t->mu);
            return SL_OK;
        }
        sl_err_t out = SL_OK;
        if (t->state == TR_FAILED) {
            out = t->failure.code;
            if (err) *err = t->failure;
        } else if (t->closing) {
            out = sl_error_set(err, SL_ERR_CLOSED, "resume token: the client is closing");
        } else if (timeout_ms >= 0 && sl_clock_ns() >= until) {
            out = sl_error_set(err, SL_ERR_TIMEOUT,
                               "resume token: master %s did not answer within %d ms", f->master,
                               timeout_ms);
        }
        if (out != SL_OK) f->token_wanted = false;
        bool again = rc != SL_OK || f->mgen != gen;
        sl_mutex_unlock(&t->mu);
        if (out != SL_OK) return out;
        if (again) rc = SL_ERR_AGAIN;
    }
}

void sl_trainer_token_free(sl_trainer_t *t, uint8_t *token, size_t len)
{
    if (token) sl_free(t ? t->a : sl_allocator_default(), token, len);
}

void tr_fleet_stop(sl_trainer_t *t)
{
    tr_fleet_t *f = t->fleet;
    if (!f) return;
    sl_mutex_lock(&f->msend_mu);
    if (f->mfd >= 0) {
        sl_rpc_send_goodbye(f->mfd, "client closed");
        shutdown(f->mfd, SHUT_RDWR);
    }
    sl_mutex_unlock(&f->msend_mu);
    if (f->mthread_started) pthread_join(f->mthread, NULL);
    f->mthread_started = false;
    if (f->mfd >= 0) close(f->mfd);
    f->mfd = -1;
}

void tr_fleet_free(sl_trainer_t *t)
{
    tr_fleet_t *f = t->fleet;
    if (!f) return;
    tr_list_free(t, &f->pending);
    if (f->token) sl_free(t->a, f->token, f->token_len);
    sl_mutex_destroy(&f->msend_mu);
    sl_free(t->a, f, sizeof *f);
    t->fleet = NULL;
}

/* The master's control connections (proto/control.proto): one thread polls
 * the listening socket and every worker and client connection, assembles
 * frames from what arrives (a slow peer never blocks the others), applies
 * them to the state under the master's lock, and answers. Answers that
 * exactly-once rests on (COMMIT_REPLY, SPLIT_READ_REPLY, TOKEN) are held
 * until the round's single sync has returned (group commit); the rest
 * leave at once. Sends block (small frames; SO_SNDTIMEO bounds a peer that
 * stops reading, which is then dropped). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dpp/master/master_internal.h"

#define MAX_FRAME (1u << 20)
#define SEND_TIMEOUT_MS 2000

/* ---- connections ------------------------------------------------------------------ */

static void conn_close(sl_master_t *m, uint32_t i) SL_REQUIRES(m->mu)
{
    mp_conn *c = &m->conns[i];
    if (c->fd < 0) return;
    close(c->fd);
    c->fd = -1;
    if (c->kind == MP_WORKER) {
        if (m->workers[c->worker].conn == (int)i) m->workers[c->worker].conn = -1;
        m->nworkers_connected--;
    } else if (c->kind == MP_CLIENT) {
        m->nclients_connected--;
    }
    c->kind = MP_NEW;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

static bool send_now(sl_master_t *m, uint32_t i, sl_rpc_type_t type, const ProtobufCMessage *msg)
    SL_REQUIRES(m->mu)
{
    sl_error_t err = {0};
    if (sl_rpc_send(m->conns[i].fd, type, msg, NULL, 0, &err) != SL_OK) {
        conn_close(m, i);
        return false;
    }
    return true;
}

/* An ERROR always closes the connection it answers (docs/PROTOCOL.md):
 * the peer reconnects if it wants to go on. */
void mp_conn_drop(sl_master_t *m, uint32_t i, sl_err_t code, const char *msg)
{
    if (m->conns[i].fd < 0) return;
    sl_rpc_send_error(m->conns[i].fd, code, msg);
    conn_close(m, i);
}

static void send_error(sl_master_t *m, uint32_t i, sl_err_t code, const char *msg)
    SL_REQUIRES(m->mu)
{
    m->protocol_errors++;
    mp_conn_drop(m, i, code, msg);
}

static bool defer(sl_master_t *m, uint32_t i, mp_deferred d) SL_REQUIRES(m->mu)
{
    if (m->ndeferred == m->cap_deferred) {
        uint32_t cap = m->cap_deferred ? m->cap_deferred * 2 : 64;
        mp_deferred *p = realloc(m->deferred, cap * sizeof *p);
        if (p == NULL) return false;
        m->deferred = p;
        m->cap_deferred = cap;
    }
    d.conn = i;
    d.serial = m->conns[i].serial;
    m->deferred[m->ndeferred++] = d;
    return true;
}

/* ---- workers ---------------------------------------------------------------------- */

static mp_worker *worker_get(sl_master_t *m, const char *id, uint32_t *idx) SL_REQUIRES(m->mu)
{
    for (uint32_t w = 0; w < m->nworkers; w++)
        if (strcmp(m->workers[w].id, id) == 0) {
            *idx = w;
            return &m->workers[w];
        }
    if (m->nworkers >= m->opts.max_workers) return NULL;
    if (m->nworkers == m->cap_workers) {
        uint32_t cap = m->cap_workers ? m->cap_workers * 2 : 16;
        mp_worker *p = realloc(m->workers, cap * sizeof *p);
        if (p == NULL) return NULL;
        m->workers = p;
        m->cap_workers = cap;
    }
    mp_worker *w = &m->workers[m->nworkers];
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    w->conn = -1;
    *idx = m->nworkers++;
    return w;
}

static bool id_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n >= MP_ID_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e) return false;
    return true;
}

/* The leases a worker names (REGISTER, HEARTBEAT) for the state machine,
 * NULL refs skipped. Caller frees *out (NULL when n is 0). @return false
 * when out of memory. */
static bool lease_refs(Sluice__Control__SplitRef *const *refs, size_t n,
                       sl_master_lease_ref_t **out, uint32_t *count)
{
    *out = NULL;
    *count = 0;
    if (n == 0) return true;
    if (n > UINT32_MAX || (*out = malloc(n * sizeof **out)) == NULL) return false;
    for (size_t k = 0; k < n; k++)
        if (refs[k] != NULL)
            (*out)[(*count)++] = (sl_master_lease_ref_t){refs[k]->job_id, refs[k]->epoch,
                                                      refs[k]->split, refs[k]->generation};
    return true;
}

static void peer_name(int fd, char *out, size_t cap)
{
    struct sockaddr_storage sa = {0};
    socklen_t len = sizeof sa;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0 && sa.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
    }
    snprintf(out, cap, "%s:%u", host, port);
}

/* A REGISTER for w on connection i while w is connected on another one:
 * the same process reconnecting (same incarnation), or an old connection
 * closed or silent past the lease timeout, is replaced; a live connection
 * of another process keeps the id and this registration is refused (two
 * processes under one id would renew and revoke each other's leases).
 * @return true when i may take the id. */
static bool may_take_id(sl_master_t *m, uint32_t i, const mp_worker *w, uint64_t incarnation,
                        uint64_t now) SL_REQUIRES(m->mu)
{
    uint64_t ago = now > w->last_seen_ms ? now - w->last_seen_ms : 0;
    if ((incarnation != 0 && incarnation == w->incarnation) || ago >= m->opts.lease_timeout_ms)
        return true;
    char peer[INET6_ADDRSTRLEN + 8], msg[SL_ERROR_MSG_MAX];
    peer_name(m->conns[w->conn].fd, peer, sizeof peer);
    snprintf(msg, sizeof msg,
             "worker id '%s' is in use by another live worker process (connected from "
             "%s, heard from %llu ms ago); stop that process or give this one another "
             "--worker-id",
             w->id, peer, (unsigned long long)ago);
    m->ids_in_use++;
    send_error(m, i, SL_ERR_INVALID, msg);
    conn_close(m, i);
    return false;
}

static void on_register(sl_master_t *m, uint32_t i, const Sluice__Control__Register *r)
    SL_REQUIRES(m->mu)
{
    mp_conn *c = &m->conns[i];
    if (r->protocol_version != SL_MASTER_PROTOCOL_VERSION) {
        send_error(m, i, SL_ERR_VERSION, "register: protocol version not supported");
        return;
    }
    if (!id_ok(r->worker_id) || strlen(r->serve_address) >= MP_ADDR_MAX ||
        strlen(r->admin_address) >= MP_ADDR_MAX || strlen(r->job_id) >= MP_ID_MAX) {
        send_error(m, i, SL_ERR_INVALID, "register: bad worker id, job id or address");
        return;
    }
    uint32_t wi;
    mp_worker *w = worker_get(m, r->worker_id, &wi);
    if (w == NULL) {
        send_error(m, i, SL_ERR_TOO_LARGE, "register: too many workers");
        return;
    }
    uint64_t now = mp_now_ms();
    if (w->conn >= 0 && w->conn != (int)i) {
        if (!may_take_id(m, i, w, r->incarnation, now)) return;
        conn_close(m, (uint32_t)w->conn); /* reconnected, or its process is gone */
    }
    /* The process's own list is authoritative: leases of this id it does
     * not hold (a predecessor's, a grant it never received) go back now. */
    sl_master_lease_ref_t *held;
    uint32_t nheld;
    if (!lease_refs(r->leases, r->n_leases, &held, &nheld)) {
        send_error(m, i, SL_ERR_NOMEM, "register: lease list");
        conn_close(m, i);
        return;
    }
    sl_error_t err = {0};
    if (!m->failed &&
        sl_master_state_register(m->st, w->id, held, nheld, now, NULL, NULL, &err) != SL_OK)
        mp_fail(m, &err);
    free(held);
    w->incarnation = r->incarnation;
    snprintf(w->serve, sizeof w->serve, "%s", r->serve_address);
    snprintf(w->admin, sizeof w->admin, "%s", r->admin_address);
    if (r->job_id[0] != '\0') snprintf(w->job, sizeof w->job, "%s", r->job_id);
    w->conn = (int)i;
    w->last_seen_ms = now;
    c->kind = MP_WORKER;
    c->worker = wi;
    m->nworkers_connected++;
    Sluice__Control__Registered rep = SLUICE__CONTROL__REGISTERED__INIT;
    rep.lease_timeout_ms = m->opts.lease_timeout_ms;
    rep.heartbeat_ms = m->opts.heartbeat_ms;
    send_now(m, i, SL_RPC_REGISTERED, &rep.base);
}

static void no_work(sl_master_t *m, uint32_t i, uint64_t retry, const char *why) SL_REQUIRES(m->mu)
{
    Sluice__Control__NoWork nw = SLUICE__CONTROL__NO_WORK__INIT;
    nw.retry_ms = retry;
    nw.reason = (char *)why;
    send_now(m, i, SL_RPC_NO_WORK, &nw.base);
}

static void on_lease_request(sl_master_t *m, uint32_t i, const Sluice__Control__LeaseRequest *r)
    SL_REQUIRES(m->mu)
{
    mp_worker *w = &m->workers[m->conns[i].worker];
    const char *want = r->job_id[0] != '\0' ? r->job_id : w->job;
    sl_error_t err = {0};
    sl_master_lease_t l;
    sl_err_t rc = SL_ERR_AGAIN;
    const char *job = NULL;
    if (m->failed) {
        no_work(m, i, 1000, "master state failed");
        return;
    }
    if (want[0] != '\0') {
        job = want;
        rc = sl_master_state_lease_next(m->st, job, w->id, mp_now_ms(), &l, &err);
    } else {
        /* Any job: the one with the fewest workers for its demand. */
        for (uint32_t k = 0; k < m->opts.max_jobs && rc == SL_ERR_AGAIN; k++) {
            if (!m->jobs[k].used) continue;
            rc = sl_master_state_lease_next(m->st, m->jobs[k].id, w->id, mp_now_ms(), &l, &err);
            if (rc == SL_OK) job = m->jobs[k].id;
        }
    }
    if (rc == SL_ERR_AGAIN && job != NULL) {
        /* the worker's job failed: it has nothing more to do */
        sl_master_state_job_status_t st;
        if (sl_master_state_job_status(m->st, job, &st, &err) == SL_OK && st.failed) {
            no_work(m, i, 1000, "job failed");
            return;
        }
    }
    if (rc == SL_ERR_AGAIN || rc == SL_ERR_NOT_FOUND) {
        no_work(m, i, rc == SL_ERR_AGAIN ? 200 : 1000,
                rc == SL_ERR_AGAIN ? "no pending split" : "no such job");
        return;
    }
    if (rc != SL_OK) {
        send_error(m, i, rc, err.msg);
        return;
    }
    if (w->job[0] == '\0') snprintf(w->job, sizeof w->job, "%s", job);
    sl_master_state_job_status_t st;
    sl_master_state_job_status(m->st, job, &st, &err);
    Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
    ref.job_id = (char *)job;
    ref.epoch = l.epoch;
    ref.split = l.split;
    ref.generation = l.generation;
    Sluice__Control__RowRange ranges[64], *rp[64];
    Sluice__Control__RowRange **todo = rp;
    Sluice__Control__RowRange *store = ranges;
    if (l.num_todo > 64) {
        todo = malloc(l.num_todo * sizeof *todo);
        store = malloc(l.num_todo * sizeof *store);
        if (todo == NULL || store == NULL) {
            free(todo);
            free(store);
            send_error(m, i, SL_ERR_NOMEM, "lease: todo list");
            return;
        }
    }
    for (uint32_t k = 0; k < l.num_todo; k++) {
        sluice__control__row_range__init(&store[k]);
        store[k].from_row = l.todo[k].from_row;
        store[k].to_row = l.todo[k].to_row;
        todo[k] = &store[k];
    }
    Sluice__Control__Lease le = SLUICE__CONTROL__LEASE__INIT;
    le.ref = &ref;
    le.job_spec_json = (char *)st.spec_json;
    le.path = (char *)l.path;
    le.stripe_begin = l.stripe_begin;
    le.stripe_end = l.stripe_end;
    le.first_row = l.first_row;
    le.num_rows = l.num_rows;
    le.n_todo = l.num_todo;
    le.todo = todo;
    le.rank_plus_one = l.rank_plus_one;
    le.expiry_ms = m->opts.lease_timeout_ms;
    send_now(m, i, SL_RPC_LEASE, &le.base);
    if (todo != rp) {
        free(todo);
        free(store);
    }
}

static void on_heartbeat(sl_master_t *m, uint32_t i, const Sluice__Control__Heartbeat *h)
    SL_REQUIRES(m->mu)
{
    mp_worker *w = &m->workers[m->conns[i].worker];
    uint64_t now = mp_now_ms();
    sl_error_t err = {0};
    /* Only the leases it names: a grant it never received is not renewed. */
    sl_master_lease_ref_t *held;
    uint32_t nheld;
    if (!lease_refs(h->leases, h->n_leases, &held, &nheld)) {
        send_error(m, i, SL_ERR_NOMEM, "heartbeat: lease list");
        return;
    }
    sl_master_state_renew(m->st, w->id, held, nheld, now, NULL, &err);
    free(held);
    w->busy = h->busy_fraction < 0 ? 0 : h->busy_fraction > 1 ? 1 : h->busy_fraction;
    w->queued = h->queued_batches;
    w->memory = h->memory_used;
    w->batches = h->batches_sent;
    w->samples = h->samples_sent;
    w->bytes_encoded = h->bytes_encoded;
    w->bytes_expanded = h->bytes_expanded;
    w->leases = 0;
    Sluice__Control__SplitRef **rev = h->n_leases ? malloc(h->n_leases * sizeof *rev) : NULL;
    size_t nrev = 0;
    for (size_t k = 0; k < h->n_leases; k++) {
        const Sluice__Control__SplitRef *r = h->leases[k];
        if (r == NULL) continue;
        if (sl_master_state_lease_live(m->st, r->job_id, r->epoch, r->split, r->generation, w->id))
            w->leases++;
        else if (rev != NULL)
            rev[nrev++] = (Sluice__Control__SplitRef *)r;
    }
    Sluice__Control__HeartbeatReply rep = SLUICE__CONTROL__HEARTBEAT_REPLY__INIT;
    rep.n_revoked = nrev;
    rep.revoked = rev;
    /* A worker of a removed, finished or failed job is retired. */
    if (w->job[0] != '\0') {
        sl_master_state_job_status_t st;
        rep.stop = sl_master_state_job_status(m->st, w->job, &st, &err) != SL_OK || st.finished ||
                   st.failed;
    }
    send_now(m, i, SL_RPC_HEARTBEAT_REPLY, &rep.base);
    free(rev);
}

static void on_split_read(sl_master_t *m, uint32_t i, const Sluice__Control__SplitRead *r)
    SL_REQUIRES(m->mu)
{
    mp_deferred d = {.type = SL_RPC_SPLIT_READ_REPLY};
    if (r->ref == NULL) {
        send_error(m, i, SL_ERR_PROTOCOL, "split read without ref");
        return;
    }
    sl_dpp_row_range_t one[16], *e = one;
    if (r->n_empty > 16 && (e = malloc(r->n_empty * sizeof *e)) == NULL) {
        send_error(m, i, SL_ERR_NOMEM, "split read: empty ranges");
        return;
    }
    for (size_t k = 0; k < r->n_empty; k++)
        e[k] = (sl_dpp_row_range_t){r->empty[k] ? r->empty[k]->from_row : 0,
                                    r->empty[k] ? r->empty[k]->to_row : 0};
    sl_error_t err = {0};
    sl_master_split_state_t state = SL_MASTER_SPLIT_PENDING;
    sl_err_t rc = m->failed ? SL_ERR_IO
                            : sl_master_state_split_read(m->st, r->ref->job_id, r->ref->epoch,
                                                         r->ref->split, r->ref->generation, e,
                                                         (uint32_t)r->n_empty, &state, &err);
    if (e != one) free(e);
    if (rc == SL_OK) {
        d.result = state == SL_MASTER_SPLIT_DONE ? SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE
                                              : SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__PENDING;
    } else if (rc == SL_MASTER_STALE || rc == SL_ERR_NOT_FOUND) {
        d.result = SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__STALE;
    } else {
        if (rc == SL_ERR_IO || rc == SL_ERR_NOMEM) mp_fail(m, &err);
        send_error(m, i, rc, m->failed ? "master state failed" : err.msg);
        return;
    }
    if (!defer(m, i, d)) send_error(m, i, SL_ERR_NOMEM, "split read answer");
}

/* A worker could not read its lease's split: count it (the split is leased
 * again, skipped, or its job fails: state_failure.c) and answer after the
 * round's sync (the outcome is journaled). */
static void on_split_failed(sl_master_t *m, uint32_t i, const Sluice__Control__SplitFailed *r)
    SL_REQUIRES(m->mu)
{
    mp_deferred d = {.type = SL_RPC_SPLIT_FAILED_REPLY};
    if (r->ref == NULL || r->ref->job_id == NULL) {
        send_error(m, i, SL_ERR_PROTOCOL, "split failed without ref");
        return;
    }
    const mp_worker *w = &m->workers[m->conns[i].worker];
    sl_err_t code = r->code < 0 && r->code >= SL_ERR_UNSUPPORTED && r->code != SL_ERR_CLOSED
                        ? (sl_err_t)r->code
                        : SL_ERR_IO;
    sl_master_split_failure_t f = {.job_id = r->ref->job_id,
                                .epoch = r->ref->epoch,
                                .split = r->ref->split,
                                .generation = r->ref->generation,
                                .file = r->file ? r->file : "",
                                .stripe = r->stripe < -1 ? -1 : r->stripe,
                                .message = r->message ? r->message : "",
                                .code = code};
    char msg[SL_ERROR_MSG_MAX];
    if (strlen(f.file) > 1024 || strlen(f.message) >= sizeof msg) {
        /* bounded, so a failure fits a journal record and an ATTACHED */
        snprintf(msg, sizeof msg, "%.900s", f.message);
        f.message = msg;
        if (strlen(f.file) > 1024) f.file = "(file name too long)";
    }
    sl_error_t err = {0};
    sl_master_split_fail_result_t res = SL_MASTER_FAIL_RETRY;
    /* only the live lease's holder may fail it */
    bool holder =
        sl_master_state_lease_live(m->st, f.job_id, f.epoch, f.split, f.generation, w->id);
    sl_err_t rc = m->failed ? SL_ERR_IO
                  : !holder ? sl_error_set(&err, SL_MASTER_STALE, "split failed: not the holder")
                            : sl_master_state_split_failed(m->st, &f, m->opts.max_split_failures,
                                                           &res, &err);
    if (rc == SL_OK) {
        fprintf(stderr,
                "sluice master: job %.200s split %u (%.300s stripe %d) failed on worker %s: "
                "%.400s%s\n",
                f.job_id, f.split, f.file, f.stripe, w->id, f.message,
                res == SL_MASTER_FAIL_JOB_FAILED ? " -- the job has failed"
                : res == SL_MASTER_FAIL_SKIPPED  ? " -- the split is skipped"
                                              : "");
        d.result = (int)res;
    } else if (rc == SL_MASTER_STALE || rc == SL_ERR_NOT_FOUND) {
        d.result = SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__STALE;
    } else {
        if (rc == SL_ERR_IO || rc == SL_ERR_NOMEM) mp_fail(m, &err);
        send_error(m, i, rc, m->failed ? "master state failed" : err.msg);
        return;
    }
    if (!defer(m, i, d)) send_error(m, i, SL_ERR_NOMEM, "split failed answer");
}

/* ---- clients ---------------------------------------------------------------------- */

/* A client's rank must be below its world size, and its world size the
 * job's number of ranks: a reader of world size 1 on a 2-rank job would
 * otherwise wait forever for batches of a rank nobody reads (static) or
 * deliver what another rank was meant to. Refused with an ERROR that says
 * so; the connection is closed. */
static bool attach_ranks_ok(sl_master_t *m, uint32_t i, const Sluice__Control__Attach *a,
                            const sl_master_state_job_status_t *st) SL_REQUIRES(m->mu)
{
    uint32_t world = a->world_size ? a->world_size : 1; /* 0: a client that did not say */
    char msg[320];
    if (a->rank >= world)
        snprintf(msg, sizeof msg, "attach: rank %u is not below world size %u", a->rank, world);
    else if (world != st->ranks)
        snprintf(msg, sizeof msg,
                 "attach: job '%.100s' has %u trainer rank%s; this client's world size is %u "
                 "(start it with a world size of %u)",
                 a->job_id, st->ranks, st->ranks == 1 ? "" : "s", world, st->ranks);
    else
        return true;
    send_error(m, i, SL_ERR_INVALID, msg);
    conn_close(m, i);
    return false;
}

static void on_attach(sl_master_t *m, uint32_t i, const Sluice__Control__Attach *a)
    SL_REQUIRES(m->mu)
{
    mp_conn *c = &m->conns[i];
    if (a->protocol_version != SL_MASTER_PROTOCOL_VERSION) {
        send_error(m, i, SL_ERR_VERSION, "attach: protocol version not supported");
        return;
    }
    if (!id_ok(a->client_id) || !id_ok(a->job_id)) {
        send_error(m, i, SL_ERR_INVALID, "attach: bad client id or job id");
        return;
    }
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    if (sl_master_state_job_status(m->st, a->job_id, &st, &err) != SL_OK) {
        /* closed like every ERROR: the client may connect and attach
         * again once the job is submitted */
        send_error(m, i, SL_ERR_NOT_FOUND, err.msg);
        return;
    }
    if (!attach_ranks_ok(m, i, a, &st)) return;
    if (c->kind != MP_CLIENT) m->nclients_connected++;
    c->kind = MP_CLIENT;
    snprintf(c->client, sizeof c->client, "%s", a->client_id);
    snprintf(c->job, sizeof c->job, "%s", a->job_id);
    c->rank = a->rank;
    Sluice__Control__WorkerInfo *infos = calloc(m->nworkers + 1, sizeof *infos);
    Sluice__Control__WorkerInfo **ptrs = calloc(m->nworkers + 1, sizeof *ptrs);
    if (infos == NULL || ptrs == NULL) {
        free(infos);
        free(ptrs);
        send_error(m, i, SL_ERR_NOMEM, "attach: worker list");
        return;
    }
    size_t n = 0;
    for (uint32_t w = 0; w < m->nworkers; w++) {
        const mp_worker *wk = &m->workers[w];
        if (wk->conn < 0 || strcmp(wk->job, a->job_id) != 0 || wk->serve[0] == '\0') continue;
        sluice__control__worker_info__init(&infos[n]);
        infos[n].worker_id = (char *)wk->id;
        infos[n].serve_address = (char *)wk->serve;
        ptrs[n] = &infos[n];
        n++;
    }
    Sluice__Control__Attached rep = SLUICE__CONTROL__ATTACHED__INIT;
    rep.n_workers = n;
    rep.workers = ptrs;
    rep.finished = st.finished;
    rep.epoch = st.epoch;
    rep.sharding = st.static_sharding ? "static" : "dynamic";
    /* A failed job ends its clients with the reason (they would otherwise
     * wait for batches that never come). */
    char failure[1100];
    if (st.failed) {
        if (st.failure_stripe >= 0)
            snprintf(failure, sizeof failure, "split %u (file %.300s stripe %d) failed: %.700s",
                     st.failure_split, st.failure_file, st.failure_stripe, st.failure_message);
        else
            snprintf(failure, sizeof failure, "split %u (file %.300s) failed: %.700s",
                     st.failure_split, st.failure_file, st.failure_message);
        rep.failed = true;
        rep.failure = failure;
        rep.failure_code = st.failure_code;
    }
    send_now(m, i, SL_RPC_ATTACHED, &rep.base);
    free(infos);
    free(ptrs);
}

static void on_commit(sl_master_t *m, uint32_t i, const Sluice__Control__Commit *cm)
    SL_REQUIRES(m->mu)
{
    mp_deferred d = {.type = SL_RPC_COMMIT_REPLY, .nonce = cm->nonce};
    if (cm->ref == NULL || cm->rows == NULL) {
        send_error(m, i, SL_ERR_PROTOCOL, "commit without ref or rows");
        return;
    }
    /* Static sharding is enforced here, not only by the client's filter: a
     * batch of a split assigned to another rank is refused as STALE (never
     * journaled; the rows stay uncommitted for the rank they belong to). */
    uint32_t owner = sl_master_state_split_rank(m->st, cm->ref->job_id, cm->ref->split);
    if (owner != 0 && owner - 1 != m->conns[i].rank) {
        d.result = SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE;
        snprintf(d.message, sizeof d.message,
                 "commit: job '%.100s' split %u is assigned to rank %u, not this client's rank %u "
                 "(static sharding)",
                 cm->ref->job_id, cm->ref->split, owner - 1, m->conns[i].rank);
        m->rank_refused++;
        if (!defer(m, i, d)) send_error(m, i, SL_ERR_NOMEM, "commit answer");
        return;
    }
    sl_error_t err = {0};
    sl_master_commit_result_t res = SL_MASTER_UNKNOWN;
    sl_master_commit_t co = {cm->ref->job_id,  cm->ref->epoch, cm->ref->split,
                          cm->ref->generation, cm->rows->from_row, cm->rows->to_row,
                          cm->client_id,    cm->nonce,      cm->num_samples};
    sl_err_t rc = m->failed ? SL_ERR_IO : sl_master_state_commit_batch(m->st, &co, &res, &err);
    if (rc != SL_OK) {
        if (rc == SL_ERR_IO || rc == SL_ERR_NOMEM) mp_fail(m, &err);
        send_error(m, i, rc, m->failed ? "master state failed" : err.msg);
        return;
    }
    d.result = (int)res;
    if (res != SL_MASTER_COMMITTED) snprintf(d.message, sizeof d.message, "%.200s", err.msg);
    if (!defer(m, i, d)) send_error(m, i, SL_ERR_NOMEM, "commit answer");
}

static void on_client_stats(sl_master_t *m, const Sluice__Control__ClientStats *s)
    SL_REQUIRES(m->mu)
{
    mp_job *j = mp_job_find(m, s->job_id);
    if (j == NULL) return;
    /* One client's report; wait is summed over clients as is elapsed, so
     * the ratio is the mean fraction of time trainers waited. */
    if (s->wait_ns <= s->elapsed_ns && s->elapsed_ns < 3600ull * 1000000000ull) {
        j->wait_ns += s->wait_ns;
        j->elapsed_ns += s->elapsed_ns;
    }
}

static void on_token_request(sl_master_t *m, uint32_t i, const Sluice__Control__TokenRequest *t)
    SL_REQUIRES(m->mu)
{
    if (t->n_undelivered_refs != t->n_undelivered_rows) {
        send_error(m, i, SL_ERR_PROTOCOL, "token request: refs and rows differ in length");
        return;
    }
    size_t n = t->n_undelivered_refs;
    sl_master_token_exclude_t *ex = calloc(n + 1, sizeof *ex);
    if (ex == NULL) {
        send_error(m, i, SL_ERR_NOMEM, "token request");
        return;
    }
    size_t k = 0;
    for (size_t q = 0; q < n; q++) {
        const Sluice__Control__SplitRef *r = t->undelivered_refs[q];
        const Sluice__Control__RowRange *rr = t->undelivered_rows[q];
        if (r == NULL || rr == NULL || strcmp(r->job_id, t->job_id) != 0) continue;
        ex[k++] = (sl_master_token_exclude_t){r->epoch, r->split, rr->from_row, rr->to_row};
    }
    mp_deferred d = {.type = SL_RPC_TOKEN};
    sl_error_t err = {0};
    sl_err_t rc = sl_master_state_token_encode(m->st, t->job_id, ex, (uint32_t)k, &d.token,
                                               &d.token_len, &err);
    free(ex);
    if (rc != SL_OK) {
        send_error(m, i, rc, err.msg);
        return;
    }
    if (!defer(m, i, d)) {
        sl_free(m->a, d.token, d.token_len);
        send_error(m, i, SL_ERR_NOMEM, "token answer");
    }
}

/* ---- frames ------------------------------------------------------------------------ */

typedef struct mem_src {
    const uint8_t *p;
    size_t len, at;
} mem_src;

static ssize_t mem_read(void *ctx, void *buf, size_t len)
{
    mem_src *s = ctx;
    size_t n = s->len - s->at < len ? s->len - s->at : len;
    memcpy(buf, s->p + s->at, n);
    s->at += n;
    return (ssize_t)n;
}

static void dispatch(sl_master_t *m, uint32_t i, const sl_rpc_frame_t *f) SL_REQUIRES(m->mu)
{
    mp_conn *c = &m->conns[i];
    m->frames_in++;
    bool worker = c->kind == MP_WORKER, client = c->kind == MP_CLIENT;
    if (worker) m->workers[c->worker].last_seen_ms = mp_now_ms(); /* heard from (may_take_id) */
    switch (f->type) {
    case SL_RPC_REGISTER:
        if (c->kind == MP_NEW) return on_register(m, i, (const void *)f->msg);
        break;
    case SL_RPC_LEASE_REQUEST:
        if (worker) return on_lease_request(m, i, (const void *)f->msg);
        break;
    case SL_RPC_HEARTBEAT:
        if (worker) return on_heartbeat(m, i, (const void *)f->msg);
        break;
    case SL_RPC_SPLIT_READ:
        if (worker) return on_split_read(m, i, (const void *)f->msg);
        break;
    case SL_RPC_SPLIT_FAILED:
        if (worker) return on_split_failed(m, i, (const void *)f->msg);
        break;
    case SL_RPC_ATTACH:
        if (!worker) return on_attach(m, i, (const void *)f->msg);
        break;
    case SL_RPC_COMMIT:
        if (client) return on_commit(m, i, (const void *)f->msg);
        break;
    case SL_RPC_CLIENT_STATS:
        if (client) return on_client_stats(m, (const void *)f->msg);
        break;
    case SL_RPC_TOKEN_REQUEST:
        if (client) return on_token_request(m, i, (const void *)f->msg);
        break;
    case SL_RPC_GOODBYE:
        conn_close(m, i);
        return;
    default:
        break;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "unexpected %s frame on a %s connection", sl_rpc_type_name(f->type),
             worker ? "worker" : client ? "client" : "new");
    send_error(m, i, SL_ERR_PROTOCOL, msg);
}

/* Read what is there; handle every whole frame. */
static void on_readable(sl_master_t *m, uint32_t i)
{
    mp_conn *c = &m->conns[i];
    if (c->cap - c->len < 4096) {
        size_t cap = c->cap ? c->cap * 2 : 8192;
        if (cap > MAX_FRAME + SL_RPC_HEADER_BYTES + 8192) cap = MAX_FRAME + SL_RPC_HEADER_BYTES + 8192;
        uint8_t *p = cap > c->cap ? realloc(c->buf, cap) : c->buf;
        if (p == NULL) {
            sl_mutex_lock(&m->mu);
            conn_close(m, i);
            sl_mutex_unlock(&m->mu);
            return;
        }
        c->buf = p;
        c->cap = cap;
    }
    /* never blocks: a slot may hold a newer socket than the one poll saw */
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
    if (n <= 0) {
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
        sl_mutex_lock(&m->mu);
        conn_close(m, i);
        sl_mutex_unlock(&m->mu);
        return;
    }
    c->len += (size_t)n;
    sl_rpc_limits_t lim = sl_rpc_limits_default();
    lim.max_message_bytes = MAX_FRAME;
    lim.max_payload_bytes = 0;
    size_t at = 0;
    sl_mutex_lock(&m->mu);
    while (m->conns[i].fd >= 0 && c->len - at >= SL_RPC_HEADER_BYTES) {
        sl_rpc_header_t h;
        sl_error_t err = {0};
        if (sl_rpc_header_decode(c->buf + at, &lim, &h, &err) != SL_OK) {
            send_error(m, i, err.code, err.msg);
            break;
        }
        size_t total = SL_RPC_HEADER_BYTES + h.message_len;
        if (c->len - at < total) break;
        mem_src src = {c->buf + at, total, 0};
        sl_rpc_frame_t f;
        if (sl_rpc_recv_from(mem_read, &src, &lim, NULL, &f, &err) != SL_OK) {
            send_error(m, i, err.code, err.msg);
            break;
        }
        at += total;
        if (!mp_guard_frame(m, i, &f, mp_now_ms())) dispatch(m, i, &f);
        sl_rpc_frame_free(&f);
    }
    sl_mutex_unlock(&m->mu);
    if (m->conns[i].fd >= 0 && at > 0) {
        memmove(c->buf, c->buf + at, c->len - at);
        c->len -= at;
    }
}

static void on_accept(sl_master_t *m)
{
    int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        /* Out of descriptors: a connection still in its handshake makes
         * room, or the listener would stay readable and spin. */
        if (errno == EMFILE || errno == ENFILE) {
            sl_mutex_lock(&m->mu);
            mp_guard_evict(m);
            sl_mutex_unlock(&m->mu);
        }
        return;
    }
    sl_mutex_lock(&m->mu);
    uint32_t i = 0;
    while (i < m->opts.max_connections && m->conns[i].fd >= 0)
        i++;
    if (i == m->opts.max_connections) {
        int victim = mp_guard_evict(m);
        if (victim < 0) {
            m->refused++;
            sl_mutex_unlock(&m->mu);
            sl_rpc_send_error(fd, SL_ERR_AGAIN,
                              "master: too many connections (every slot is a registered worker "
                              "or an attached client); try again later");
            close(fd);
            return;
        }
        i = (uint32_t)victim;
    }
    struct timeval tv = {SEND_TIMEOUT_MS / 1000, (SEND_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    m->conns[i] = (mp_conn){.fd = fd, .kind = MP_NEW, .serial = ++m->next_serial};
    m->connections_total++;
    mp_guard_accepted(m, i, mp_now_ms());
    sl_mutex_unlock(&m->mu);
}

/* Group commit: one sync for every answer of the round, then send them. */
static void flush_deferred(sl_master_t *m)
{
    if (m->ndeferred == 0) return;
    sl_error_t err = {0};
    sl_mutex_lock(&m->mu);
    bool ok = !m->failed && sl_master_state_sync(m->st, &err) == SL_OK;
    if (!ok) mp_fail(m, &err);
    for (uint32_t k = 0; k < m->ndeferred; k++) {
        mp_deferred *d = &m->deferred[k];
        bool live = m->conns[d->conn].fd >= 0 && m->conns[d->conn].serial == d->serial;
        if (live && !ok) {
            /* Nothing may be promised: the peers retry with another master run. */
            send_error(m, d->conn, SL_ERR_IO, "master state failed");
            conn_close(m, d->conn);
        } else if (live && d->type == SL_RPC_COMMIT_REPLY) {
            Sluice__Control__CommitReply r = SLUICE__CONTROL__COMMIT_REPLY__INIT;
            r.nonce = d->nonce;
            r.result = (Sluice__Control__CommitReply__Result)d->result;
            r.message = d->message;
            send_now(m, d->conn, d->type, &r.base);
        } else if (live && d->type == SL_RPC_SPLIT_READ_REPLY) {
            Sluice__Control__SplitReadReply r = SLUICE__CONTROL__SPLIT_READ_REPLY__INIT;
            r.state = (Sluice__Control__SplitReadReply__State)d->result;
            send_now(m, d->conn, d->type, &r.base);
        } else if (live && d->type == SL_RPC_SPLIT_FAILED_REPLY) {
            Sluice__Control__SplitFailedReply r = SLUICE__CONTROL__SPLIT_FAILED_REPLY__INIT;
            r.state = (Sluice__Control__SplitFailedReply__State)d->result;
            send_now(m, d->conn, d->type, &r.base);
        } else if (live && d->type == SL_RPC_TOKEN) {
            Sluice__Control__Token r = SLUICE__CONTROL__TOKEN__INIT;
            r.token.data = d->token;
            r.token.len = d->token_len;
            send_now(m, d->conn, d->type, &r.base);
        }
        if (d->token != NULL) sl_free(m->a, d->token, d->token_len);
    }
    m->ndeferred = 0;
    sl_mutex_unlock(&m->mu);
}

static void *loop(void *arg)
{
    sl_master_t *m = arg;
    uint32_t cap = m->opts.max_connections + 2;
    struct pollfd *pf = calloc(cap, sizeof *pf);
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (pf == NULL || idx == NULL) {
        fprintf(stderr, "sluice master: out of memory in the control loop\n");
        free(pf);
        free(idx);
        return NULL;
    }
    while (!atomic_load(&m->stop)) {
        uint32_t n = 0;
        pf[n++] = (struct pollfd){.fd = m->wake[0], .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = m->listen_fd, .events = POLLIN};
        for (uint32_t i = 0; i < m->opts.max_connections; i++)
            if (m->conns[i].fd >= 0) {
                idx[n] = i;
                pf[n++] = (struct pollfd){.fd = m->conns[i].fd, .events = POLLIN};
            }
        int r = poll(pf, n, 50);
        if (r < 0 && errno != EINTR) break;
        if (r > 0) {
            if (pf[1].revents & POLLIN) on_accept(m);
            for (uint32_t k = 2; k < n; k++)
                if (pf[k].revents & (POLLIN | POLLHUP | POLLERR) && m->conns[idx[k]].fd == pf[k].fd)
                    on_readable(m, idx[k]);
        }
        flush_deferred(m);
        sl_mutex_lock(&m->mu);
        uint64_t now = mp_now_ms();
        mp_tick(m, now);
        mp_guard_sweep(m, now);
        sl_mutex_unlock(&m->mu);
    }
    free(pf);
    free(idx);
    return NULL;
}

sl_err_t mp_server_start(sl_master_t *m, sl_error_t *err)
{
    m->conns = calloc(m->opts.max_connections, sizeof *m->conns);
    if (m->conns == NULL) return sl_error_set(err, SL_ERR_NOMEM, "master connections");
    for (uint32_t i = 0; i < m->opts.max_connections; i++)
        m->conns[i].fd = -1;
    const char *addr = m->opts.listen != NULL ? m->opts.listen : "127.0.0.1:0";
    sl_err_t rc = sl_rpc_check_exposure("master --listen", addr, m->secret != NULL, err);
    if (rc != SL_OK) return rc;
    rc = sl_rpc_listen(addr, 128, &m->listen_fd, &m->port, err);
    if (rc != SL_OK) return sl_error_prefix(err, "master --listen %s: ", addr);
    /* The address peers use: the host as given (empty or 0.0.0.0: loopback). */
    char host[MP_ADDR_MAX];
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon != NULL) *colon = '\0';
    if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0) snprintf(host, sizeof host, "127.0.0.1");
    snprintf(m->address, sizeof m->address, "%.200s:%u", host, m->port);
    m->opts.listen = NULL;
    if (pipe2(m->wake, O_CLOEXEC) != 0) return sl_error_set(err, SL_ERR_IO, "master: pipe: %m");
    if (pthread_create(&m->thread, NULL, loop, m) != 0)
        return sl_error_set(err, SL_ERR_IO, "master: cannot start the control thread");
    m->thread_started = true;
    return SL_OK;
}

void mp_server_stop(sl_master_t *m)
{
    if (m->thread_started) {
        atomic_store(&m->stop, true);
        ssize_t w = write(m->wake[1], "x", 1);
        (void)w;
        pthread_join(m->thread, NULL);
        m->thread_started = false;
    }
    flush_deferred(m);
    sl_mutex_lock(&m->mu); /* the control thread has ended: nobody waits for it */
    for (uint32_t i = 0; m->conns != NULL && i < m->opts.max_connections; i++)
        conn_close(m, i);
    sl_mutex_unlock(&m->mu);
    free(m->conns);
    m->conns = NULL;
    free(m->deferred);
    m->deferred = NULL;
    if (m->listen_fd >= 0) close(m->listen_fd);
    if (m->wake[0] >= 0) close(m->wake[0]);
    if (m->wake[1] >= 0) close(m->wake[1]);
    m->listen_fd = m->wake[0] = m->wake[1] = -1;
}

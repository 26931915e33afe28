/* The lease client (lease_client.h): the control connection, the
 * leases a worker holds, and the control thread (heartbeats, SPLIT_READ).
 *
 * A lease lives from LEASE until both the reader is done with it and every
 * batch made from it is retired (acknowledged or dropped); then, unless it
 * was revoked, the control thread reports it with SPLIT_READ and frees it
 * when the master answers. Everything about leases is under ms->mu; the
 * connection is under ms->conn_mu, which is never taken while holding
 * ms->mu (the lease hooks run under the server's lock and take only ms->mu). */
#include "dpp/worker/lease_client.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "rpc/auth.h"
#include "rpc/frame.h"

#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_MAX_TODO 65536
#define MAX_MESSAGE_BYTES (16u << 20) /* a lease carries the job spec */

typedef struct lease {
    struct lease *next;
    uint32_t epoch, split;
    uint64_t generation;
    uint32_t rank_plus_one;
    char *path;
    sl_wh_split_t sp;
    sl_dpp_row_range_t *todo;
    uint32_t num_todo;
    sl_dpp_row_range_t *empty; /* from done */
    uint32_t num_empty;
    uint32_t outstanding; /* batches made, not retired */
    bool handed;          /* returned by next */
    bool read_done;       /* the reader called done */
    bool revoked;
    bool reporting; /* a SPLIT_READ (or SPLIT_FAILED) is on its way */
    /* The split could not be read (src_failed): revoked too, and reported
     * with SPLIT_FAILED before the lease may be forgotten. */
    bool failed, fail_reported;
    sl_err_t fail_code;
    int32_t fail_stripe;
    char *fail_msg;
} lease_t;

struct sl_worker_lease_client {
    sl_worker_lease_client_opts_t o;
    const sl_allocator_t *a;
    char *master, *worker_id, *serve_address, *admin_address;
    uint64_t incarnation;    /* random, this source's (process's) identity in REGISTER */
    char *secret; /* the cluster secret, NULL: none */
    pthread_mutex_t conn_mu; /* the connection: one call at a time */
    int fd;                  /* -1: not connected */
    bool ever_connected;
    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;
    lease_t *leases;
    char job_id[256];
    char *spec_json; /* of the job served, from its first lease */
    bool cancel, stop, finished;
    /* The master refused this worker's registration for good (its id is
     * another live process's): every call fails with this from now on. */
    sl_err_t fatal;
    char fatal_msg[SL_ERROR_MSG_MAX];
    sl_worker_t *worker;
    uint64_t lease_timeout_ms, heartbeat_ms;
    sl_worker_lease_client_stats_t st;
    /* load at the last heartbeat (control thread only) */
    uint64_t hb_at_ns, hb_reader_ns, hb_xform_ns;
    pthread_t thread;
    bool thread_started;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void timed_wait(sl_worker_lease_client_t *ms, uint64_t ms_wait)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (ms_wait % 1000) * 1000000ull;
    ts.tv_sec += (time_t)(ms_wait / 1000 + ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(&ms->cv, &ms->mu, &ts);
}

static char *dup_str(const sl_allocator_t *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = sl_alloc(a, n);
    if (d) memcpy(d, s, n);
    return d;
}

static void free_str(const sl_allocator_t *a, char *s)
{
    if (s) sl_free(a, s, strlen(s) + 1);
}

static void lease_free(sl_worker_lease_client_t *ms, lease_t *l)
{
    if (!l) return;
    free_str(ms->a, l->path);
    if (l->todo) sl_free(ms->a, l->todo, (size_t)l->num_todo * sizeof *l->todo);
    if (l->empty) sl_free(ms->a, l->empty, (size_t)l->num_empty * sizeof *l->empty);
    free_str(ms->a, l->fail_msg);
    sl_free(ms->a, l, sizeof *l);
}

/* Under ms->mu: may a revoked lease be forgotten? Nobody holds it (not
 * handed, or read and every batch retired), no report is on its way, and a
 * failure was reported. */
static bool lease_gone(const lease_t *l)
{
    return l->revoked && !l->reporting && (!l->handed || (l->read_done && l->outstanding == 0)) &&
           (!l->failed || l->fail_reported);
}

/* Under ms->mu: unlink and free l. */
static void lease_remove(sl_worker_lease_client_t *ms, lease_t *l)
{
    for (lease_t **pp = &ms->leases; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    lease_free(ms, l);
    ms->st.leases_held--;
}

/* ---- the leases held, as the master hears of them ---- */

static void fill_ref(Sluice__Control__SplitRef *r, char *job, const lease_t *l)
{
    r->job_id = job;
    r->epoch = l->epoch;
    r->split = l->split;
    r->generation = l->generation;
}

/* The leases this worker holds (not revoked), for REGISTER and HEARTBEAT:
 * the master keeps alive exactly those. */
typedef struct held {
    char job[256];
    Sluice__Control__SplitRef *refs, **ptrs;
    uint32_t n, cap;
} held_t;

/* Under ms->mu. @return false when out of memory (send nothing then: an
 * empty list would give the leases up). */
static bool held_collect(sl_worker_lease_client_t *ms, held_t *h)
{
    snprintf(h->job, sizeof h->job, "%s", ms->job_id);
    h->n = h->cap = 0;
    h->refs = NULL;
    h->ptrs = NULL;
    for (lease_t *l = ms->leases; l; l = l->next)
        h->cap += !l->revoked;
    if (h->cap == 0) return true;
    h->refs = sl_calloc(ms->a, h->cap, sizeof *h->refs);
    h->ptrs = sl_calloc(ms->a, h->cap, sizeof *h->ptrs);
    if (!h->refs || !h->ptrs) return false;
    for (lease_t *l = ms->leases; l; l = l->next) {
        if (l->revoked) continue;
        h->refs[h->n] = (Sluice__Control__SplitRef)SLUICE__CONTROL__SPLIT_REF__INIT;
        fill_ref(&h->refs[h->n], h->job, l);
        h->ptrs[h->n] = &h->refs[h->n];
        h->n++;
    }
    return true;
}

static void held_free(sl_worker_lease_client_t *ms, held_t *h)
{
    if (h->refs) sl_free(ms->a, h->refs, (size_t)h->cap * sizeof *h->refs);
    if (h->ptrs) sl_free(ms->a, h->ptrs, (size_t)h->cap * sizeof *h->ptrs);
    h->refs = NULL;
    h->ptrs = NULL;
}

/* The refusal that ended this worker's registrations, if any. */
static sl_err_t fatal_of(sl_worker_lease_client_t *ms, sl_error_t *err)
{
    pthread_mutex_lock(&ms->mu);
    sl_err_t rc = ms->fatal;
    if (rc) sl_error_set(err, rc, "%s", ms->fatal_msg);
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

/* ---- the connection ---- */

static void disconnect(sl_worker_lease_client_t *ms)
{
    if (ms->fd >= 0) close(ms->fd);
    ms->fd = -1;
}

static sl_err_t recv_reply(sl_worker_lease_client_t *ms, const char *what, sl_rpc_type_t want,
                           sl_rpc_frame_t *f, sl_error_t *err)
{
    sl_rpc_limits_t lim = {.max_message_bytes = MAX_MESSAGE_BYTES, .max_payload_bytes = 0};
    sl_err_t rc = sl_rpc_recv(ms->fd, &lim, ms->a, f, err);
    if (rc) return sl_error_prefix(err, "master %s: %s: ", ms->master, what);
    if (f->type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f->msg;
        /* The master's code is kept: connect_master tells a refusal that
         * will not change (INVALID, VERSION) from a passing one. */
        sl_err_t code = e->code < 0 && e->code >= SL_ERR_UNSUPPORTED ? (sl_err_t)e->code
                                                                      : SL_ERR_PROTOCOL;
        rc = sl_error_set(err, code, "master %s: %s: refused: %s", ms->master, what,
                          e->message ? e->message : "");
        sl_rpc_frame_free(f);
        return rc;
    }
    if (f->type != want) {
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "master %s: %s: expected a %s frame, got %s%s",
                          ms->master, what, sl_rpc_type_name(want), sl_rpc_type_name(f->type),
                          sl_rpc_auth_hint(f->type));
        sl_rpc_frame_free(f);
        return rc;
    }
    return SL_OK;
}

/* Under conn_mu: connect and REGISTER, naming every lease held (the
 * master revokes the others of this worker id). A refusal that will not
 * change (the id is another live process's, another protocol version) is
 * fatal: recorded, and every later call fails with it. */
static sl_err_t connect_master(sl_worker_lease_client_t *ms, sl_error_t *err)
{
    sl_error_t local = {0};
    if (!err) err = &local;
    sl_err_t rc = fatal_of(ms, err);
    if (rc) return rc;
    rc = sl_rpc_connect(ms->master, ms->o.connect_timeout_ms, &ms->fd, err);
    if (rc) {
        ms->fd = -1;
        return sl_error_prefix(err, "master %s: ", ms->master);
    }
    if ((rc = sl_rpc_set_recv_timeout(ms->fd, ms->o.connect_timeout_ms, err))) {
        disconnect(ms);
        return rc;
    }
    if (ms->secret &&
        (rc = sl_rpc_auth_client(ms->fd, ms->secret,
                                 sl_rpc_now_ms() + (uint64_t)ms->o.connect_timeout_ms, err))) {
        disconnect(ms);
        return sl_error_prefix(err, "master %s: ", ms->master);
    }
    Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
    r.protocol_version = SL_RPC_VERSION;
    r.worker_id = ms->worker_id;
    r.serve_address = ms->serve_address;
    r.admin_address = ms->admin_address;
    r.threads = ms->o.threads;
    r.incarnation = ms->incarnation;
    held_t h;
    pthread_mutex_lock(&ms->mu);
    bool ok = held_collect(ms, &h);
    pthread_mutex_unlock(&ms->mu);
    if (!ok) {
        held_free(ms, &h);
        disconnect(ms);
        return sl_error_set(err, SL_ERR_NOMEM, "master %s: register: out of memory", ms->master);
    }
    r.job_id = h.job;
    r.n_leases = h.n;
    r.leases = h.ptrs;
    sl_rpc_frame_t f = {0};
    rc = sl_rpc_send(ms->fd, SL_RPC_REGISTER, &r.base, NULL, 0, err);
    held_free(ms, &h);
    if (rc || (rc = recv_reply(ms, "register", SL_RPC_REGISTERED, &f, err))) {
        if (rc == SL_ERR_CLOSED) sl_error_prefix(err, "register: ");
        if (rc == SL_ERR_INVALID || rc == SL_ERR_VERSION) {
            pthread_mutex_lock(&ms->mu);
            ms->fatal = rc;
            snprintf(ms->fatal_msg, sizeof ms->fatal_msg, "%s", err->msg);
            pthread_cond_broadcast(&ms->cv);
            pthread_mutex_unlock(&ms->mu);
        }
        disconnect(ms);
        return rc;
    }
    const Sluice__Control__Registered *g = (const Sluice__Control__Registered *)f.msg;
    pthread_mutex_lock(&ms->mu);
    ms->lease_timeout_ms = g->lease_timeout_ms;
    ms->heartbeat_ms = g->heartbeat_ms ? g->heartbeat_ms : 1000;
    if (ms->heartbeat_ms > 60000) ms->heartbeat_ms = 60000;
    if (ms->ever_connected) ms->st.reconnects++;
    ms->ever_connected = true;
    pthread_cond_broadcast(&ms->cv);
    pthread_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
    return SL_OK;
}

/* One request and its reply (connecting first when needed). A failure
 * closes the connection: the next call reconnects. */
static sl_err_t call(sl_worker_lease_client_t *ms, sl_rpc_type_t type, const ProtobufCMessage *msg,
                     const char *what, sl_rpc_type_t want, sl_rpc_frame_t *f, sl_error_t *err)
{
    pthread_mutex_lock(&ms->conn_mu);
    sl_err_t rc = SL_OK;
    if (ms->fd < 0) rc = connect_master(ms, err);
    if (!rc && (rc = sl_rpc_send(ms->fd, type, msg, NULL, 0, err)))
        sl_error_prefix(err, "master %s: %s: ", ms->master, what);
    if (!rc) rc = recv_reply(ms, what, want, f, err);
    if (rc) disconnect(ms);
    pthread_mutex_unlock(&ms->conn_mu);
    return rc;
}

/* ---- leases ---- */

/* A LEASE frame to a lease (not linked yet). */
static sl_err_t lease_of(sl_worker_lease_client_t *ms, const Sluice__Control__Lease *m,
                         lease_t **out, sl_error_t *err)
{
    if (!m->ref || !m->path || !m->path[0] || m->stripe_end <= m->stripe_begin)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "master %s: lease without a split reference, path or stripes",
                            ms->master);
    if (m->n_todo == 0 || m->n_todo > ms->o.max_todo)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "master %s: lease of split %u with %zu todo ranges (1 to %u)",
                            ms->master, m->ref->split, m->n_todo, ms->o.max_todo);
    for (size_t i = 0; i < m->n_todo; i++) {
        const Sluice__Control__RowRange *t = m->todo[i];
        if (t->from_row >= t->to_row || t->to_row > m->num_rows ||
            (i && t->from_row < m->todo[i - 1]->to_row))
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "master %s: lease of split %u: todo range %zu [%" PRIu64
                                ", %" PRIu64 ") is empty, out of order or past its %" PRIu64
                                " rows",
                                ms->master, m->ref->split, i, t->from_row, t->to_row, m->num_rows);
    }
    lease_t *l = sl_calloc(ms->a, 1, sizeof *l);
    if (!l) return sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
    l->epoch = m->ref->epoch;
    l->split = m->ref->split;
    l->generation = m->ref->generation;
    l->rank_plus_one = m->rank_plus_one;
    l->path = dup_str(ms->a, m->path);
    l->todo = sl_alloc(ms->a, m->n_todo * sizeof *l->todo);
    if (!l->path || !l->todo) {
        if (l->todo) l->num_todo = (uint32_t)m->n_todo;
        lease_free(ms, l);
        return sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
    }
    l->num_todo = (uint32_t)m->n_todo;
    for (uint32_t i = 0; i < l->num_todo; i++)
        l->todo[i] = (sl_dpp_row_range_t){m->todo[i]->from_row, m->todo[i]->to_row};
    l->sp = (sl_wh_split_t){.path = l->path,
                            .partition = "",
                            .stripe_begin = m->stripe_begin,
                            .stripe_end = m->stripe_end,
                            .first_row = m->first_row,
                            .num_rows = m->num_rows};
    *out = l;
    return SL_OK;
}

/* What one lease request came to. */
typedef enum ask {
    ASK_LEASE,    /* *out: a lease, linked */
    ASK_NO_WORK,  /* try again in *retry_ms */
    ASK_FINISHED, /* the job has no more work */
    ASK_RETRY,    /* connection trouble (err says what): reconnect and try again */
    ASK_FATAL     /* the master's answer makes no sense, or out of memory */
} ask_t;

/* Ask the master for a lease once. */
static ask_t ask_lease(sl_worker_lease_client_t *ms, lease_t **out, uint64_t *retry_ms,
                       sl_error_t *err)
{
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    char job[sizeof ms->job_id];
    pthread_mutex_lock(&ms->mu);
    snprintf(job, sizeof job, "%s", ms->job_id);
    pthread_mutex_unlock(&ms->mu);
    q.worker_id = ms->worker_id;
    q.job_id = job;
    sl_rpc_frame_t f = {0};
    /* LEASE or NO_WORK: ask for LEASE and accept NO_WORK below. The
     * connection stays locked until a lease received is linked, so that a
     * REGISTER (a reconnect by another thread) cannot leave it unnamed. */
    pthread_mutex_lock(&ms->conn_mu);
    ask_t res;
    sl_err_t rc = SL_OK;
    if (ms->fd < 0) rc = connect_master(ms, err);
    if (!rc && (rc = sl_rpc_send(ms->fd, SL_RPC_LEASE_REQUEST, &q.base, NULL, 0, err)))
        sl_error_prefix(err, "master %s: lease request: ", ms->master);
    if (!rc) {
        sl_rpc_limits_t lim = {.max_message_bytes = MAX_MESSAGE_BYTES, .max_payload_bytes = 0};
        if ((rc = sl_rpc_recv(ms->fd, &lim, ms->a, &f, err)))
            sl_error_prefix(err, "master %s: lease request: ", ms->master);
    }
    if (rc) {
        disconnect(ms);
        sl_error_t ignored = {0};
        res = rc == SL_ERR_NOMEM || fatal_of(ms, &ignored) ? ASK_FATAL : ASK_RETRY;
        goto done;
    }
    if (f.type == SL_RPC_NO_WORK) {
        const Sluice__Control__NoWork *nw = (const Sluice__Control__NoWork *)f.msg;
        *retry_ms = nw->retry_ms < 10 ? 10 : nw->retry_ms > 5000 ? 5000 : nw->retry_ms;
        /* a finished job, or one that failed: nothing more to do here */
        bool fin = nw->reason &&
                   (strcmp(nw->reason, "finished") == 0 || strcmp(nw->reason, "job failed") == 0);
        if (fin) {
            pthread_mutex_lock(&ms->mu);
            ms->finished = ms->st.finished = true;
            pthread_mutex_unlock(&ms->mu);
            sl_error_set(err, SL_ERR_CLOSED, "master %s: the job is finished", ms->master);
        }
        res = fin ? ASK_FINISHED : ASK_NO_WORK;
        goto done;
    }
    if (f.type != SL_RPC_LEASE) {
        bool retry = false;
        if (f.type == SL_RPC_ERROR) {
            /* The master closed the connection after it: reconnect and ask
             * again when it says "not now" (its state failed, a cap). */
            const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
            retry = sl_rpc_error_retriable(sl_rpc_error_code(e));
            rc = sl_error_set(err, retry ? sl_rpc_error_code(e) : SL_ERR_PROTOCOL,
                              "master %s: lease request refused: %s", ms->master,
                              e->message ? e->message : "");
        } else {
            rc = sl_error_set(err, SL_ERR_PROTOCOL,
                              "master %s: lease request: expected a lease or no_work frame, got %s",
                              ms->master, sl_rpc_type_name(f.type));
        }
        disconnect(ms);
        res = retry ? ASK_RETRY : ASK_FATAL;
        goto done;
    }
    const Sluice__Control__Lease *m = (const Sluice__Control__Lease *)f.msg;
    lease_t *l = NULL;
    rc = lease_of(ms, m, &l, err);
    const char *lease_job = m->ref && m->ref->job_id ? m->ref->job_id : "";
    pthread_mutex_lock(&ms->mu);
    if (!rc && ms->job_id[0] && strcmp(ms->job_id, lease_job) != 0)
        rc = sl_error_set(err, SL_ERR_PROTOCOL,
                          "master %s: a lease of job '%s' for a worker of job '%s'", ms->master,
                          lease_job, ms->job_id);
    if (!rc && !ms->spec_json) {
        if (strlen(lease_job) == 0 || strlen(lease_job) >= sizeof ms->job_id)
            rc = sl_error_set(err, SL_ERR_PROTOCOL, "master %s: lease with a job id of %zu bytes",
                              ms->master, strlen(lease_job));
        else if (!m->job_spec_json || !m->job_spec_json[0])
            rc = sl_error_set(err, SL_ERR_PROTOCOL, "master %s: first lease without a job spec",
                              ms->master);
        else if (!(ms->spec_json = dup_str(ms->a, m->job_spec_json)))
            rc = sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
        else
            snprintf(ms->job_id, sizeof ms->job_id, "%s", lease_job);
        snprintf(ms->st.job_id, sizeof ms->st.job_id, "%s", ms->job_id);
    }
    if (!rc) {
        l->next = ms->leases;
        ms->leases = l;
        ms->st.leases++;
        ms->st.leases_held++;
        *out = l;
    }
    pthread_mutex_unlock(&ms->mu);
    if (rc) lease_free(ms, l);
    res = rc ? ASK_FATAL : ASK_LEASE;
done:
    pthread_mutex_unlock(&ms->conn_mu);
    sl_rpc_frame_free(&f);
    return res;
}

/* Under ms->mu: a lease granted but not handed to the reader yet. */
static lease_t *unhanded(sl_worker_lease_client_t *ms)
{
    for (lease_t *l = ms->leases; l; l = l->next)
        if (!l->handed && !l->revoked) return l;
    return NULL;
}

/* Get a lease, waiting (NO_WORK, connection trouble) until deadline_ns (0:
 * forever). With hand, it is marked as handed to the reader. */
static sl_err_t get_lease(sl_worker_lease_client_t *ms, uint64_t deadline_ns, bool hand,
                          lease_t **out, sl_error_t *err)
{
    sl_error_t local = {0};
    if (!err) err = &local;
    uint64_t backoff = 100;
    for (;;) {
        pthread_mutex_lock(&ms->mu);
        sl_err_t closed = ms->cancel ? SL_ERR_CLOSED : SL_OK;
        if (ms->stop || ms->finished) closed = SL_ERR_CLOSED;
        sl_err_t fatal = ms->fatal;
        if (fatal) sl_error_set(err, fatal, "%s", ms->fatal_msg);
        lease_t *l = closed || fatal ? NULL : unhanded(ms);
        if (l && hand) l->handed = true;
        pthread_mutex_unlock(&ms->mu);
        if (fatal) return fatal;
        if (closed)
            return sl_error_set(err, SL_ERR_CLOSED, "master %s: no more work for this worker",
                                ms->master);
        if (l) {
            *out = l;
            return SL_OK;
        }
        uint64_t wait_ms = 0;
        ask_t k = ask_lease(ms, &l, &wait_ms, err);
        if (k == ASK_LEASE) {
            backoff = 100;
            continue; /* handed out above */
        }
        if (k == ASK_FINISHED) return SL_ERR_CLOSED;
        if (k == ASK_FATAL) return err->code ? err->code : SL_ERR_PROTOCOL;
        if (k == ASK_RETRY) { /* back off and try again */
            wait_ms = backoff;
            backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
            fprintf(stderr, "sluice worker: %s (retrying in %" PRIu64 " ms)\n", err->msg, wait_ms);
        }
        if (deadline_ns && mono_ns() + wait_ms * 1000000ull > deadline_ns)
            return sl_error_set(err, SL_ERR_TIMEOUT, "master %s: no lease in time", ms->master);
        pthread_mutex_lock(&ms->mu);
        if (!ms->cancel) timed_wait(ms, wait_ms);
        pthread_mutex_unlock(&ms->mu);
    }
}

/* ---- split source callbacks ---- */

static sl_err_t src_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = NULL;
    sl_err_t rc = get_lease(ms, 0, true, &l, err);
    if (rc) return rc;
    *out = (sl_worker_work_t){.split = &l->sp,
                              .epoch = l->epoch,
                              .split_id = l->split,
                              .lease = l,
                              .todo = l->todo,
                              .num_todo = l->num_todo,
                              .generation = l->generation,
                              .rank_plus_one = l->rank_plus_one};
    return SL_OK;
}

static void src_done(void *ctx, const sl_worker_work_t *w, const sl_dpp_row_range_t *empty,
                     uint32_t num_empty)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = w->lease;
    if (!l) return;
    sl_dpp_row_range_t *e = NULL;
    if (num_empty && (e = sl_alloc(ms->a, (size_t)num_empty * sizeof *e)))
        memcpy(e, empty, (size_t)num_empty * sizeof *e);
    pthread_mutex_lock(&ms->mu);
    l->read_done = true;
    if (num_empty && !e) {
        /* Out of memory: without its empty ranges the split cannot be
         * reported; dropping the lease lets it expire and be read again. */
        l->revoked = true;
    } else {
        l->empty = e;
        l->num_empty = num_empty;
    }
    if (lease_gone(l))
        lease_remove(ms, l);
    else
        pthread_cond_broadcast(&ms->cv);
    pthread_mutex_unlock(&ms->mu);
}

static void src_made(void *ctx, void *lease)
{
    sl_worker_lease_client_t *ms = ctx;
    pthread_mutex_lock(&ms->mu);
    ((lease_t *)lease)->outstanding++;
    pthread_mutex_unlock(&ms->mu);
}

static bool src_live(void *ctx, void *lease)
{
    sl_worker_lease_client_t *ms = ctx;
    pthread_mutex_lock(&ms->mu);
    bool live = !((lease_t *)lease)->revoked;
    pthread_mutex_unlock(&ms->mu);
    return live;
}

static void src_retire(void *ctx, void *lease, bool acked)
{
    (void)acked;
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = lease;
    pthread_mutex_lock(&ms->mu);
    if (l->outstanding) l->outstanding--;
    if (l->outstanding == 0 && l->read_done) {
        if (lease_gone(l))
            lease_remove(ms, l);
        else
            pthread_cond_broadcast(&ms->cv); /* the control thread reports it */
    }
    pthread_mutex_unlock(&ms->mu);
}

static void src_failed(void *ctx, void *lease, sl_err_t code, int32_t stripe, const char *msg)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = lease;
    pthread_mutex_lock(&ms->mu);
    if (!l->failed) {
        l->failed = true;
        l->revoked = true; /* not live: its batches still queued are dropped unsent */
        l->fail_code = code;
        l->fail_stripe = stripe;
        l->fail_msg = dup_str(ms->a, msg ? msg : ""); /* NULL: reported as "" */
        ms->st.splits_failed++;
        pthread_cond_broadcast(&ms->cv); /* the control thread reports it */
    }
    pthread_mutex_unlock(&ms->mu);
}

static void src_cancel(void *ctx)
{
    sl_worker_lease_client_t *ms = ctx;
    pthread_mutex_lock(&ms->mu);
    ms->cancel = true;
    ms->worker = NULL;
    pthread_cond_broadcast(&ms->cv);
    pthread_mutex_unlock(&ms->mu);
    if (ms->thread_started) pthread_join(ms->thread, NULL);
    ms->thread_started = false;
}

static void src_destroy(void *ctx)
{
    sl_worker_lease_client_destroy(ctx);
}

sl_worker_source_t sl_worker_lease_client_source(sl_worker_lease_client_t *ms)
{
    return (sl_worker_source_t){.next = src_next,
                                .done = src_done,
                                .destroy = src_destroy,
                                .cancel = src_cancel,
                                .lease_made = src_made,
                                .lease_live = src_live,
                                .lease_retire = src_retire,
                                .lease_failed = src_failed,
                                .ctx = ms};
}

/* ---- the control thread ---- */

/* Report one lease whose rows are all read and batches all retired.
 * Called without ms->mu. @return false on a connection problem (retry). */
static bool report(sl_worker_lease_client_t *ms, lease_t *l)
{
    char job[sizeof ms->job_id];
    pthread_mutex_lock(&ms->mu);
    snprintf(job, sizeof job, "%s", ms->job_id);
    uint32_t ne = l->num_empty;
    pthread_mutex_unlock(&ms->mu);
    Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
    fill_ref(&ref, job, l);
    Sluice__Control__RowRange *rr = ne ? sl_calloc(ms->a, ne, sizeof *rr) : NULL;
    Sluice__Control__RowRange **rp = ne ? sl_calloc(ms->a, ne, sizeof *rp) : NULL;
    if (ne && (!rr || !rp)) {
        if (rr) sl_free(ms->a, rr, (size_t)ne * sizeof *rr);
        if (rp) sl_free(ms->a, rp, (size_t)ne * sizeof *rp);
        return false;
    }
    for (uint32_t i = 0; i < ne; i++) {
        rr[i] = (Sluice__Control__RowRange)SLUICE__CONTROL__ROW_RANGE__INIT;
        rr[i].from_row = l->empty[i].from_row;
        rr[i].to_row = l->empty[i].to_row;
        rp[i] = &rr[i];
    }
    Sluice__Control__SplitRead sr = SLUICE__CONTROL__SPLIT_READ__INIT;
    sr.ref = &ref;
    sr.n_empty = ne;
    sr.empty = rp;
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    sl_err_t rc = call(ms, SL_RPC_SPLIT_READ, &sr.base, "split read", SL_RPC_SPLIT_READ_REPLY, &f,
                       &err);
    if (rr) sl_free(ms->a, rr, (size_t)ne * sizeof *rr);
    if (rp) sl_free(ms->a, rp, (size_t)ne * sizeof *rp);
    if (rc) {
        fprintf(stderr, "sluice worker: %s\n", err.msg);
        return false;
    }
    const Sluice__Control__SplitReadReply *r = (const Sluice__Control__SplitReadReply *)f.msg;
    pthread_mutex_lock(&ms->mu);
    ms->st.split_reads++;
    if (r->state == SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE) ms->st.splits_done++;
    lease_remove(ms, l);
    pthread_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
    return true;
}

/* Report a failed lease with SPLIT_FAILED (called without ms->mu). The
 * master counts it and leases the split again (to anyone), skips it, or
 * fails the job (then this worker has nothing left to do). @return false
 * on a connection problem (retry). */
static bool report_failure(sl_worker_lease_client_t *ms, lease_t *l)
{
    char job[sizeof ms->job_id];
    pthread_mutex_lock(&ms->mu);
    snprintf(job, sizeof job, "%s", ms->job_id);
    pthread_mutex_unlock(&ms->mu);
    Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
    fill_ref(&ref, job, l);
    Sluice__Control__SplitFailed sf = SLUICE__CONTROL__SPLIT_FAILED__INIT;
    sf.ref = &ref;
    sf.file = l->path;
    sf.stripe = l->fail_stripe;
    sf.message = l->fail_msg ? l->fail_msg : "";
    sf.code = l->fail_code;
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    fprintf(stderr, "sluice worker: split %u of %s cannot be read, reported to the master: %s\n",
            l->split, l->path, sf.message);
    sl_err_t rc = call(ms, SL_RPC_SPLIT_FAILED, &sf.base, "split failed",
                       SL_RPC_SPLIT_FAILED_REPLY, &f, &err);
    if (rc) {
        fprintf(stderr, "sluice worker: %s\n", err.msg);
        return false;
    }
    const Sluice__Control__SplitFailedReply *r = (const Sluice__Control__SplitFailedReply *)f.msg;
    pthread_mutex_lock(&ms->mu);
    l->fail_reported = true;
    l->reporting = false;
    if (r->state == SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__JOB_FAILED)
        ms->stop = ms->st.stop = true; /* the job is over: finish what is held and exit */
    if (lease_gone(l)) lease_remove(ms, l);
    pthread_cond_broadcast(&ms->cv);
    pthread_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
    return true;
}

/* Send SPLIT_FAILED for every failed lease not reported yet. @return false
 * when a report failed (the connection is down: try again later). */
static bool report_failures(sl_worker_lease_client_t *ms)
{
    for (;;) {
        pthread_mutex_lock(&ms->mu);
        lease_t *l = ms->leases;
        while (l && !(l->failed && !l->fail_reported && !l->reporting))
            l = l->next;
        if (l) l->reporting = true;
        pthread_mutex_unlock(&ms->mu);
        if (!l) return true;
        if (!report_failure(ms, l)) {
            pthread_mutex_lock(&ms->mu);
            l->reporting = false;
            pthread_mutex_unlock(&ms->mu);
            return false;
        }
    }
}

/* Send SPLIT_READ for every lease ready for it. @return false when a
 * report failed (the connection is down: try again later). */
static bool report_ready(sl_worker_lease_client_t *ms)
{
    for (;;) {
        pthread_mutex_lock(&ms->mu);
        lease_t *l = ms->leases;
        while (l && !(l->read_done && l->outstanding == 0 && !l->revoked && !l->reporting))
            l = l->next;
        if (l) l->reporting = true;
        pthread_mutex_unlock(&ms->mu);
        if (!l) return true;
        bool ok = report(ms, l);
        if (!ok) {
            pthread_mutex_lock(&ms->mu);
            l->reporting = false;
            pthread_mutex_unlock(&ms->mu);
            return false;
        }
    }
}

static void heartbeat(sl_worker_lease_client_t *ms)
{
    held_t h;
    pthread_mutex_lock(&ms->mu);
    bool ok = held_collect(ms, &h);
    sl_worker_t *w = ms->worker;
    pthread_mutex_unlock(&ms->mu);
    if (!ok) { /* the next heartbeat tries again, before the leases expire */
        held_free(ms, &h);
        fprintf(stderr, "sluice worker: heartbeat: out of memory\n");
        return;
    }
    Sluice__Control__Heartbeat hb = SLUICE__CONTROL__HEARTBEAT__INIT;
    hb.worker_id = ms->worker_id;
    hb.n_leases = h.n;
    hb.leases = h.ptrs;
    uint64_t now = mono_ns();
    if (w) {
        /* busy: the busier of the reader (read, filter, batch) and the
         * transform threads (dedup, transform, encode, per thread) */
        sl_worker_stats_t st;
        sl_worker_stats(w, &st);
        uint64_t rd = st.read_ns + st.filter_ns;
        uint64_t xf = st.dedup_ns + st.transform_ns + st.encode_ns;
        if (ms->hb_at_ns && now > ms->hb_at_ns) {
            double dt = (double)(now - ms->hb_at_ns);
            double br = (double)(rd - ms->hb_reader_ns) / dt;
            double bx = (double)(xf - ms->hb_xform_ns) / (dt * (st.threads ? st.threads : 1));
            double b = br > bx ? br : bx;
            hb.busy_fraction = b < 0 ? 0 : b > 1 ? 1 : b;
        }
        ms->hb_reader_ns = rd;
        ms->hb_xform_ns = xf;
        hb.queued_batches = st.server.ready;
        hb.memory_used = st.memory_used;
        hb.batches_sent = st.server.batches_sent;
        hb.samples_sent = st.server.samples_acked;
    }
    ms->hb_at_ns = now;
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    sl_err_t rc =
        call(ms, SL_RPC_HEARTBEAT, &hb.base, "heartbeat", SL_RPC_HEARTBEAT_REPLY, &f, &err);
    held_free(ms, &h);
    if (rc) {
        fprintf(stderr, "sluice worker: %s\n", err.msg);
        return;
    }
    const Sluice__Control__HeartbeatReply *r = (const Sluice__Control__HeartbeatReply *)f.msg;
    pthread_mutex_lock(&ms->mu);
    ms->st.heartbeats++;
    for (size_t i = 0; i < r->n_revoked; i++) {
        const Sluice__Control__SplitRef *v = r->revoked[i];
        lease_t *l = ms->leases;
        while (l) {
            lease_t *next = l->next;
            if (!l->revoked && l->split == v->split && l->epoch == v->epoch &&
                l->generation == v->generation) {
                l->revoked = true;
                ms->st.revoked++;
                /* nobody holds it any more: not handed, or read and retired */
                if (lease_gone(l)) lease_remove(ms, l);
            }
            l = next;
        }
    }
    if (r->stop) ms->stop = ms->st.stop = true;
    pthread_cond_broadcast(&ms->cv);
    pthread_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
}

static void *control_main(void *arg)
{
    sl_worker_lease_client_t *ms = arg;
    pthread_setname_np(pthread_self(), "sl-w-control");
    uint64_t next_hb = 0; /* at once */
    uint64_t retry_at = 0;
    pthread_mutex_lock(&ms->mu);
    while (!ms->cancel) {
        if (ms->fatal) {
            /* Refused for good (another live process has this worker id):
             * the worker fails with the master's message; nothing more is
             * said to the master. w stays valid: sl_worker_stop
             * cancels (joins this thread) before the worker goes. */
            sl_worker_t *w = ms->worker;
            char msg[SL_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", ms->fatal_msg);
            sl_err_t code = ms->fatal;
            pthread_mutex_unlock(&ms->mu);
            if (w) sl_worker_fail(w, code, msg);
            return NULL;
        }
        uint64_t now = mono_ns();
        bool ready = false;
        for (lease_t *l = ms->leases; l && !ready; l = l->next)
            ready = (l->read_done && l->outstanding == 0 && !l->revoked && !l->reporting) ||
                    (l->failed && !l->fail_reported && !l->reporting);
        if (ready && now >= retry_at) {
            pthread_mutex_unlock(&ms->mu);
            /* failures first: the master may lease the split to another worker at once */
            if (!report_failures(ms) || !report_ready(ms)) retry_at = mono_ns() + 200000000ull;
            pthread_mutex_lock(&ms->mu);
            continue;
        }
        if (now >= next_hb) {
            uint64_t period = ms->heartbeat_ms ? ms->heartbeat_ms : 1000;
            pthread_mutex_unlock(&ms->mu);
            heartbeat(ms);
            pthread_mutex_lock(&ms->mu);
            next_hb = mono_ns() + period * 1000000ull;
            continue;
        }
        uint64_t until = next_hb;
        if (ready && retry_at < until) until = retry_at;
        timed_wait(ms, (until - now) / 1000000ull + 1);
    }
    pthread_mutex_unlock(&ms->mu);
    /* last words: failures, and leases whose batches are all acknowledged */
    report_failures(ms);
    report_ready(ms);
    return NULL;
}

/* ---- public ---- */

sl_err_t sl_worker_lease_client_new(const sl_worker_lease_client_opts_t *opts,
                                    sl_worker_lease_client_t **out, sl_error_t *err)
{
    if (!opts || !opts->master || !opts->worker_id || !opts->serve_address)
        return sl_error_set(err, SL_ERR_INVALID,
                            "master source: master, worker_id and serve_address are required");
    if (opts->job_id && strlen(opts->job_id) >= 256)
        return sl_error_set(err, SL_ERR_INVALID, "master source: job id longer than 255 bytes");
    const sl_allocator_t *a = opts->allocator ? opts->allocator : sl_allocator_default();
    sl_worker_lease_client_t *ms = sl_calloc(a, 1, sizeof *ms);
    if (!ms) return sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
    ms->a = a;
    ms->o = *opts;
    if (ms->o.connect_timeout_ms <= 0) ms->o.connect_timeout_ms = DEFAULT_TIMEOUT_MS;
    if (!ms->o.max_todo) ms->o.max_todo = DEFAULT_MAX_TODO;
    ms->fd = -1;
    if (getrandom(&ms->incarnation, sizeof ms->incarnation, 0) != sizeof ms->incarnation)
        ms->incarnation = (uint64_t)mono_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    if (ms->incarnation == 0) ms->incarnation = 1; /* 0: "not told" to the master */
    pthread_mutex_init(&ms->conn_mu, NULL);
    pthread_mutex_init(&ms->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&ms->cv, &attr);
    pthread_condattr_destroy(&attr);
    ms->master = dup_str(a, opts->master);
    ms->worker_id = dup_str(a, opts->worker_id);
    ms->serve_address = dup_str(a, opts->serve_address);
    ms->admin_address = dup_str(a, opts->admin_address ? opts->admin_address : "");
    ms->secret = opts->cluster_secret ? strdup(opts->cluster_secret) : NULL;
    ms->o.cluster_secret = NULL; /* ms->secret is the copy */
    if (opts->job_id) snprintf(ms->job_id, sizeof ms->job_id, "%s", opts->job_id);
    snprintf(ms->st.job_id, sizeof ms->st.job_id, "%s", ms->job_id);
    sl_err_t rc;
    if (!ms->master || !ms->worker_id || !ms->serve_address || !ms->admin_address ||
        (opts->cluster_secret && !ms->secret)) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
        goto fail;
    }
    pthread_mutex_lock(&ms->conn_mu);
    rc = connect_master(ms, err);
    pthread_mutex_unlock(&ms->conn_mu);
    if (rc) goto fail;
    if (pthread_create(&ms->thread, NULL, control_main, ms) != 0) {
        rc = sl_error_set(err, SL_ERR_IO, "master source: cannot start the control thread");
        goto fail;
    }
    ms->thread_started = true;
    *out = ms;
    return SL_OK;
fail:
    sl_worker_lease_client_destroy(ms);
    return rc;
}

sl_err_t sl_worker_lease_client_wait_job(sl_worker_lease_client_t *ms, int timeout_ms,
                                         const char **job_id, const char **spec_json,
                                         sl_error_t *err)
{
    uint64_t deadline = timeout_ms < 0 ? 0 : mono_ns() + (uint64_t)timeout_ms * 1000000ull + 1;
    lease_t *l = NULL;
    pthread_mutex_lock(&ms->mu);
    bool have = ms->spec_json != NULL;
    pthread_mutex_unlock(&ms->mu);
    if (!have) {
        sl_err_t rc = get_lease(ms, deadline, false, &l, err);
        if (rc) return rc;
    }
    *job_id = ms->job_id;
    *spec_json = ms->spec_json;
    return SL_OK;
}

void sl_worker_lease_client_attach(sl_worker_lease_client_t *ms, sl_worker_t *w)
{
    pthread_mutex_lock(&ms->mu);
    if (!ms->cancel) ms->worker = w;
    pthread_mutex_unlock(&ms->mu);
}

void sl_worker_lease_client_stats(sl_worker_lease_client_t *ms, sl_worker_lease_client_stats_t *out)
{
    pthread_mutex_lock(&ms->mu);
    *out = ms->st;
    out->lease_timeout_ms = ms->lease_timeout_ms;
    out->heartbeat_ms = ms->heartbeat_ms;
    pthread_mutex_unlock(&ms->mu);
}

void sl_worker_lease_client_destroy(sl_worker_lease_client_t *ms)
{
    if (!ms) return;
    src_cancel(ms);
    while (ms->leases) {
        lease_t *l = ms->leases;
        ms->leases = l->next;
        lease_free(ms, l);
    }
    disconnect(ms);
    free_str(ms->a, ms->master);
    free_str(ms->a, ms->worker_id);
    free_str(ms->a, ms->serve_address);
    free_str(ms->a, ms->admin_address);
    free_str(ms->a, ms->spec_json);
    sl_rpc_secret_free(ms->secret);
    pthread_mutex_destroy(&ms->conn_mu);
    pthread_mutex_destroy(&ms->mu);
    pthread_cond_destroy(&ms->cv);
    sl_free(ms->a, ms, sizeof *ms);
}

/* The lease client's control connection (lease_client.h): REGISTER on
 * every (re)connection with the leases held, one request and its reply at
 * a time, and asking the master for leases (LEASE_REQUEST, answered by
 * LEASE or NO_WORK). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log_events.h"
#include "dpp/worker/lease/lease_client_internal.h"
#include "rpc/auth.h"
#include "rpc/port_hint.h"

#define MAX_MESSAGE_BYTES (16u << 20) /* a lease carries the job spec */

/* ---- the leases held, as the master hears of them ---- */

void dpp_lease_fill_ref(Sluice__Control__SplitRef *r, char *job, const lease_t *l)
{
    r->job_id = l->job ? l->job : job;
    r->epoch = l->epoch;
    r->split = l->split;
    r->generation = l->generation;
}

bool dpp_lease_held_collect(sl_worker_lease_client_t *ms, held_t *h)
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
        dpp_lease_fill_ref(&h->refs[h->n], h->job, l);
        h->ptrs[h->n] = &h->refs[h->n];
        h->n++;
    }
    return true;
}

void dpp_lease_held_free(sl_worker_lease_client_t *ms, held_t *h)
{
    if (h->refs) sl_free(ms->a, h->refs, (size_t)h->cap * sizeof *h->refs);
    if (h->ptrs) sl_free(ms->a, h->ptrs, (size_t)h->cap * sizeof *h->ptrs);
    h->refs = NULL;
    h->ptrs = NULL;
}

/* The refusal that ended this worker's registrations, if any (takes
 * ms->mu). */
static sl_err_t fatal_of(sl_worker_lease_client_t *ms, sl_error_t *err) SL_EXCLUDES(ms->mu)
{
    sl_mutex_lock(&ms->mu);
    sl_err_t rc = ms->fatal;
    if (rc) sl_error_set(err, rc, "%s", ms->fatal_msg);
    sl_mutex_unlock(&ms->mu);
    return rc;
}

/* ---- the connection ---- */

void dpp_lease_disconnect(sl_worker_lease_client_t *ms)
{
    if (ms->fd >= 0) close(ms->fd);
    ms->fd = -1;
}

static sl_err_t recv_reply(sl_worker_lease_client_t *ms, const char *what, sl_rpc_type_t want,
                           sl_rpc_frame_t *f, sl_error_t *err) SL_REQUIRES(ms->conn_mu)
{
    sl_rpc_limits_t lim = {.max_message_bytes = MAX_MESSAGE_BYTES, .max_payload_bytes = 0};
    sl_err_t rc = sl_rpc_recv(ms->fd, &lim, ms->a, f, err);
    if (rc) return sl_error_prefix(err, "master %s: %s: ", ms->master, what);
    if (f->type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f->msg;
        /* The master's code is kept: connect_master tells a refusal that
         * will not change (INVALID, VERSION) from a passing one. */
        sl_err_t code =
            e->code < 0 && e->code >= SL_ERR_UNSUPPORTED ? (sl_err_t)e->code : SL_ERR_PROTOCOL;
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

/* A handshake that failed on an address that answers HTTP (timed out, or
 * closed unanswered: port_hint.h) is a user who gave the master's admin
 * port: a refusal that will not change. */
static sl_err_t wrong_port(sl_worker_lease_client_t *ms, sl_err_t rc, sl_error_t *err)
{
    if (!sl_rpc_handshake_reached_http(ms->master, rc)) return rc;
    rc = sl_error_set(err, SL_ERR_INVALID, "master %s: %s", ms->master, SL_RPC_ADMIN_NOT_CONTROL);
    sl_mutex_lock(&ms->mu);
    ms->fatal = rc;
    snprintf(ms->fatal_msg, sizeof ms->fatal_msg, "%s", err->msg);
    pthread_cond_broadcast(&ms->cv);
    sl_mutex_unlock(&ms->mu);
    return rc;
}

sl_err_t dpp_lease_connect(sl_worker_lease_client_t *ms, sl_error_t *err)
{
    sl_error_t local = {0};
    if (!err) err = &local;
    SL_FORWARD_IF_ERROR(fatal_of(ms, err));
    sl_err_t rc = sl_rpc_connect(ms->master, ms->o.connect_timeout_ms, &ms->fd, err);
    if (rc) {
        ms->fd = -1;
        return sl_error_prefix(err, "master %s: ", ms->master);
    }
    if ((rc = sl_rpc_set_recv_timeout(ms->fd, ms->o.connect_timeout_ms, err))) {
        dpp_lease_disconnect(ms);
        return rc;
    }
    if (ms->secret &&
        (rc = sl_rpc_auth_client(ms->fd, ms->secret,
                                 sl_clock_ms() + (uint64_t)ms->o.connect_timeout_ms, err))) {
        dpp_lease_disconnect(ms);
        sl_error_prefix(err, "master %s: ", ms->master);
        return wrong_port(ms, rc, err);
    }
    Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
    r.protocol_version = SL_RPC_VERSION;
    r.worker_id = ms->worker_id;
    r.serve_address = ms->serve_address;
    r.admin_address = ms->admin_address;
    r.threads = ms->o.threads;
    r.incarnation = ms->incarnation;
    held_t h;
    sl_mutex_lock(&ms->mu);
    bool ok = dpp_lease_held_collect(ms, &h);
    sl_mutex_unlock(&ms->mu);
    if (!ok) {
        dpp_lease_held_free(ms, &h);
        dpp_lease_disconnect(ms);
        return sl_error_set(err, SL_ERR_NOMEM, "master %s: register: out of memory", ms->master);
    }
    r.job_id = h.job;
    r.shares = !ms->o.no_share;
    r.cache_local = ms->cache != NULL;
    r.n_leases = h.n;
    r.leases = h.ptrs;
    sl_rpc_frame_t f = {0};
    rc = sl_rpc_send(ms->fd, SL_RPC_REGISTER, &r.base, NULL, 0, err);
    dpp_lease_held_free(ms, &h);
    if (rc || (rc = recv_reply(ms, "register", SL_RPC_REGISTERED, &f, err))) {
        if (rc == SL_ERR_CLOSED) sl_error_prefix(err, "register: ");
        rc = wrong_port(ms, rc, err);
        if (rc == SL_ERR_INVALID || rc == SL_ERR_VERSION) {
            sl_mutex_lock(&ms->mu);
            ms->fatal = rc;
            snprintf(ms->fatal_msg, sizeof ms->fatal_msg, "%s", err->msg);
            pthread_cond_broadcast(&ms->cv);
            sl_mutex_unlock(&ms->mu);
        }
        dpp_lease_disconnect(ms);
        return rc;
    }
    const Sluice__Control__Registered *g = (const Sluice__Control__Registered *)f.msg;
    sl_mutex_lock(&ms->mu);
    ms->lease_timeout_ms = g->lease_timeout_ms;
    ms->heartbeat_ms = g->heartbeat_ms ? g->heartbeat_ms : 1000;
    if (ms->heartbeat_ms > 60000) ms->heartbeat_ms = 60000;
    if (ms->ever_connected) ms->st.reconnects++;
    sl_log_kv(SL_LOG_INFO, SL_EV(REGISTERED),
              (SL_KV_STR("worker", ms->worker_id), SL_KV_STR("master", ms->master),
               SL_KV_STR("job", ms->job_id), SL_KV_U64("reconnect", ms->ever_connected),
               SL_KV_U64("lease_timeout_ms", ms->lease_timeout_ms)),
              "worker %s %sregistered with master %s", ms->worker_id,
              ms->ever_connected ? "re" : "", ms->master);
    ms->ever_connected = true;
    pthread_cond_broadcast(&ms->cv);
    sl_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
    return SL_OK;
}

sl_err_t dpp_lease_call_locked(sl_worker_lease_client_t *ms, sl_rpc_type_t type,
                               const ProtobufCMessage *msg, const char *what, sl_rpc_type_t want,
                               sl_rpc_frame_t *f, sl_error_t *err)
{
    sl_err_t rc = SL_OK;
    if (ms->fd < 0) rc = dpp_lease_connect(ms, err);
    if (!rc && (rc = sl_rpc_send(ms->fd, type, msg, NULL, 0, err)))
        sl_error_prefix(err, "master %s: %s: ", ms->master, what);
    if (!rc) rc = recv_reply(ms, what, want, f, err);
    if (rc) dpp_lease_disconnect(ms);
    return rc;
}

sl_err_t dpp_lease_call(sl_worker_lease_client_t *ms, sl_rpc_type_t type,
                        const ProtobufCMessage *msg, const char *what, sl_rpc_type_t want,
                        sl_rpc_frame_t *f, sl_error_t *err)
{
    sl_mutex_lock(&ms->conn_mu);
    sl_err_t rc = dpp_lease_call_locked(ms, type, msg, what, want, f, err);
    sl_mutex_unlock(&ms->conn_mu);
    return rc;
}

/* ---- leases ---- */

/* LEASE order_skip into l (a resumed deterministic job's skip rows,
 * docs/DESIGN.md "A deterministic order", *Resume*): ascending, disjoint,
 * inside the split, only with order_ranks; at most max_todo of them. */
static sl_err_t skip_of(sl_worker_lease_client_t *ms, const Sluice__Control__Lease *m, lease_t *l,
                        sl_error_t *err)
{
    if (m->n_order_skip == 0) return SL_OK;
    if (!m->order_ranks || m->n_order_skip > ms->o.max_todo)
        return sl_error_set(
            err, SL_ERR_PROTOCOL, "master %s: lease of split %u: %zu skip ranges%s (at most %u)",
            ms->master, m->ref->split, m->n_order_skip,
            m->order_ranks ? "" : " outside the deterministic order", ms->o.max_todo);
    for (size_t i = 0; i < m->n_order_skip; i++) {
        const Sluice__Control__RowRange *t = m->order_skip[i];
        if (t->from_row >= t->to_row || t->to_row > m->num_rows ||
            (i && t->from_row < m->order_skip[i - 1]->to_row))
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "master %s: lease of split %u: skip range %zu [%" PRIu64
                                ", %" PRIu64 ") is empty, out of order or past its %" PRIu64
                                " rows",
                                ms->master, m->ref->split, i, t->from_row, t->to_row, m->num_rows);
    }
    l->skip = sl_alloc(ms->a, m->n_order_skip * sizeof *l->skip);
    if (!l->skip) return sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
    l->num_skip = (uint32_t)m->n_order_skip;
    for (uint32_t i = 0; i < l->num_skip; i++)
        l->skip[i] = (sl_dpp_row_range_t){m->order_skip[i]->from_row, m->order_skip[i]->to_row};
    return SL_OK;
}

/* A LEASE frame to a lease (not linked yet). */
static sl_err_t lease_of(sl_worker_lease_client_t *ms, const Sluice__Control__Lease *m,
                         lease_t **out, sl_error_t *err)
{
    /* a Kafka chunk (kafka_topic set) has no stripes: 0..0 */
    bool kafka = m->kafka_topic && m->kafka_topic[0];
    if (!m->ref || !m->path || !m->path[0] ||
        (kafka ? m->stripe_end != 0 || m->stripe_begin != 0 || m->kafka_partition < 0
               : m->stripe_end <= m->stripe_begin))
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "master %s: lease without a split reference, path or stripes",
                            ms->master);
    /* the deterministic order leases a split whose rows are all committed
     * but not counted with no todo range: read only to count it */
    if ((m->n_todo == 0 && !m->order_ranks) || m->n_todo > ms->o.max_todo)
        return sl_error_set(
            err, SL_ERR_PROTOCOL, "master %s: lease of split %u with %zu todo ranges (%u to %u)",
            ms->master, m->ref->split, m->n_todo, m->order_ranks ? 0 : 1, ms->o.max_todo);
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
    /* the deterministic order numbers a fixed split list: never a Kafka
     * chunk, and a base only with the ranks it is dealt to */
    if ((m->order_ranks && kafka) || (m->order_base_plus_one && !m->order_ranks))
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "master %s: lease of split %u: order_ranks %" PRIu32
                            " with order_base_plus_one %" PRIu64
                            "%s (the deterministic order: ranks for a table split, a base only "
                            "with ranks)",
                            ms->master, m->ref->split, m->order_ranks, m->order_base_plus_one,
                            kafka ? " for a Kafka chunk" : "");
    lease_t *l = sl_calloc(ms->a, 1, sizeof *l);
    if (!l) return sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
    l->order_ranks = m->order_ranks;
    l->base_plus_one = m->order_base_plus_one;
    l->epoch = m->ref->epoch;
    l->split = m->ref->split;
    l->generation = m->ref->generation;
    l->rank_plus_one = m->rank_plus_one;
    l->path = sl_strdup(ms->a, m->path);
    l->kafka_topic = kafka ? sl_strdup(ms->a, m->kafka_topic) : NULL;
    l->kafka_partition = m->kafka_partition;
    if (!kafka && m->cache_file && m->cache_file[0] && m->cache_mode != 0 && !m->cache_local) {
        l->cache_file = sl_strdup(ms->a, m->cache_file); /* out of memory: computed */
        l->cache_mode = (uint32_t)m->cache_mode;
    } else if (!kafka && m->cache_file && m->cache_file[0] && m->cache_mode != 0) {
        /* a name under this worker's own directory (none: computed, and
         * SPLIT_READ says nothing is held); a bad name or a folder that
         * cannot be made: computed, and reported as not held */
        l->cache_local = ms->cache != NULL;
        l->cache_name = l->cache_local ? sl_strdup(ms->a, m->cache_file) : NULL;
        l->cache_file = l->cache_name ? dpp_cache_dir_path(ms->cache, m->cache_file) : NULL;
        l->cache_mode = (uint32_t)m->cache_mode;
        if (l->cache_local && l->cache_file == NULL)
            sl_log_kv(SL_LOG_WARN, SL_EV(CACHE_WRITE_FAILED),
                      (SL_KV_STR("file", m->cache_file), SL_KV_STR("error", "bad name or folder")),
                      "cache file %.200s of split %u: not a name this worker's cache directory "
                      "takes, or its folder cannot be made: computing the split",
                      m->cache_file, m->ref->split);
    }
    l->todo = m->n_todo ? sl_alloc(ms->a, m->n_todo * sizeof *l->todo) : NULL;
    if (!l->path || (m->n_todo && !l->todo) || (kafka && !l->kafka_topic)) {
        if (l->todo) l->num_todo = (uint32_t)m->n_todo;
        dpp_lease_free(ms, l);
        return sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
    }
    l->num_todo = (uint32_t)m->n_todo;
    for (uint32_t i = 0; i < l->num_todo; i++)
        l->todo[i] = (sl_dpp_row_range_t){m->todo[i]->from_row, m->todo[i]->to_row};
    sl_err_t rc = skip_of(ms, m, l, err);
    if (rc) {
        dpp_lease_free(ms, l);
        return rc;
    }
    l->sp = (sl_wh_split_t){.path = l->path,
                            .partition = "",
                            .stripe_begin = m->stripe_begin,
                            .stripe_end = m->stripe_end,
                            .first_row = m->first_row,
                            .num_rows = m->num_rows,
                            .footer_checksum = m->footer_checksum};
    *out = l;
    return SL_OK;
}

/* Under ms->mu: the leases of Lease.shared (docs/DESIGN.md, "Shared
 * passes"), each a member of primary l: the same split and todo, another
 * job, its own generation. One that makes no sense (no job, another split
 * or epoch) or finds no memory is left out: not named in heartbeats, it
 * expires on the master and its split is leased again. */
static void link_members(sl_worker_lease_client_t *ms, lease_t *l, const Sluice__Control__Lease *m)
    SL_REQUIRES(ms->mu)
{
    for (size_t k = 0; k < m->n_shared && !ms->o.no_share; k++) {
        const Sluice__Control__SplitRef *r = m->shared[k];
        if (!r || !r->job_id || !r->job_id[0] || strlen(r->job_id) >= sizeof ms->job_id ||
            strcmp(r->job_id, ms->job_id) == 0 || r->split != l->split || r->epoch != l->epoch)
            continue;
        lease_t *e = sl_calloc(ms->a, 1, sizeof *e);
        if (!e) continue;
        *e = (lease_t){.epoch = r->epoch,
                       .split = r->split,
                       .generation = r->generation,
                       .handed = true, /* the primary is what the reader reads */
                       .primary = l,
                       .job = sl_strdup(ms->a, r->job_id),
                       .path = sl_strdup(ms->a, l->path),
                       .todo = sl_alloc(ms->a, (size_t)l->num_todo * sizeof *l->todo)};
        if (!e->job || !e->path || !e->todo) {
            e->num_todo = e->todo ? l->num_todo : 0;
            dpp_lease_free(ms, e);
            continue;
        }
        e->num_todo = l->num_todo;
        memcpy(e->todo, l->todo, (size_t)l->num_todo * sizeof *l->todo);
        e->sp = l->sp;
        e->sp.path = e->path;
        e->member_next = l->members;
        l->members = e;
        e->next = ms->leases;
        ms->leases = e;
        ms->st.leases++;
        ms->st.leases_held++;
        ms->st.shared_leases++;
        sl_log_kv(SL_LOG_DEBUG, SL_EV(LEASE_SHARED),
                  (SL_KV_STR("job", e->job), SL_KV_U64("split", e->split),
                   SL_KV_U64("epoch", e->epoch), SL_KV_U64("generation", e->generation),
                   SL_KV_STR("with", ms->job_id)),
                  "job %s split %u epoch %u: leased with job %s's pass", e->job, e->split, e->epoch,
                  ms->job_id);
    }
}

/* What one lease request came to. */
typedef enum ask {
    ASK_LEASE,    /* *out: a lease, linked */
    ASK_NO_WORK,  /* try again in *retry_ms */
    ASK_FINISHED, /* the job has no more work */
    ASK_RETRY,    /* connection trouble (err says what): reconnect and try again */
    ASK_FATAL     /* the master's answer makes no sense, or out of memory */
} ask_t;

/* Ask the master for a lease once (takes ms->conn_mu, then ms->mu). */
static ask_t ask_lease(sl_worker_lease_client_t *ms, lease_t **out, uint64_t *retry_ms,
                       sl_error_t *err) SL_EXCLUDES(ms->mu, ms->conn_mu)
{
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    char job[sizeof ms->job_id];
    sl_mutex_lock(&ms->mu);
    snprintf(job, sizeof job, "%s", ms->job_id);
    sl_mutex_unlock(&ms->mu);
    q.worker_id = ms->worker_id;
    q.job_id = job;
    sl_rpc_frame_t f = {0};
    /* LEASE or NO_WORK: ask for LEASE and accept NO_WORK below. The
     * connection stays locked until a lease received is linked, so that a
     * REGISTER (a reconnect by another thread) cannot leave it unnamed. */
    sl_mutex_lock(&ms->conn_mu);
    ask_t res;
    sl_err_t rc = SL_OK;
    if (ms->fd < 0) rc = dpp_lease_connect(ms, err);
    if (!rc && (rc = sl_rpc_send(ms->fd, SL_RPC_LEASE_REQUEST, &q.base, NULL, 0, err)))
        sl_error_prefix(err, "master %s: lease request: ", ms->master);
    if (!rc) {
        sl_rpc_limits_t lim = {.max_message_bytes = MAX_MESSAGE_BYTES, .max_payload_bytes = 0};
        if ((rc = sl_rpc_recv(ms->fd, &lim, ms->a, &f, err)))
            sl_error_prefix(err, "master %s: lease request: ", ms->master);
    }
    if (rc) {
        dpp_lease_disconnect(ms);
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
            sl_mutex_lock(&ms->mu);
            ms->finished = ms->st.finished = true;
            sl_mutex_unlock(&ms->mu);
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
        dpp_lease_disconnect(ms);
        res = retry ? ASK_RETRY : ASK_FATAL;
        goto done;
    }
    const Sluice__Control__Lease *m = (const Sluice__Control__Lease *)f.msg;
    lease_t *l = NULL;
    rc = lease_of(ms, m, &l, err);
    const char *lease_job = m->ref && m->ref->job_id ? m->ref->job_id : "";
    sl_mutex_lock(&ms->mu);
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
        else if (!(ms->spec_json = sl_strdup(ms->a, m->job_spec_json)))
            rc = sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
        else
            snprintf(ms->job_id, sizeof ms->job_id, "%s", lease_job);
        snprintf(ms->st.job_id, sizeof ms->st.job_id, "%s", ms->job_id);
    }
    if (!rc) {
        sl_log_kv(SL_LOG_DEBUG, SL_EV(LEASE_RECEIVED),
                  (SL_KV_STR("job", ms->job_id), SL_KV_U64("split", l->split),
                   SL_KV_U64("epoch", l->epoch), SL_KV_U64("generation", l->generation),
                   SL_KV_U64("rows", l->sp.num_rows)),
                  "job %s split %u epoch %u: leased", ms->job_id, l->split, l->epoch);
        l->next = ms->leases;
        ms->leases = l;
        ms->st.leases++;
        ms->st.leases_held++;
        l->progress_ns = sl_clock_ns();
        *out = l;
        link_members(ms, l, m);
    }
    sl_mutex_unlock(&ms->mu);
    if (rc) dpp_lease_free(ms, l);
    res = rc ? ASK_FATAL : ASK_LEASE;
done:
    sl_mutex_unlock(&ms->conn_mu);
    sl_rpc_frame_free(&f);
    return res;
}

/* Under ms->mu: a lease granted but not handed to the reader yet. */
static lease_t *unhanded(sl_worker_lease_client_t *ms) SL_REQUIRES(ms->mu)
{
    for (lease_t *l = ms->leases; l; l = l->next)
        if (!l->handed && !l->revoked) return l;
    return NULL;
}

sl_err_t dpp_lease_get(sl_worker_lease_client_t *ms, uint64_t deadline_ns, bool hand, lease_t **out,
                       sl_error_t *err)
{
    sl_error_t local = {0};
    if (!err) err = &local;
    uint64_t backoff = 100;
    for (;;) {
        sl_mutex_lock(&ms->mu);
        sl_err_t closed = ms->cancel ? SL_ERR_CLOSED : SL_OK;
        if (ms->stop || ms->finished) closed = SL_ERR_CLOSED;
        sl_err_t fatal = ms->fatal;
        if (fatal) sl_error_set(err, fatal, "%s", ms->fatal_msg);
        lease_t *l = closed || fatal ? NULL : unhanded(ms);
        if (l && hand) {
            l->handed = true;
            l->progress_ns = sl_clock_ns(); /* a shared pass's stall counts from here */
        }
        sl_mutex_unlock(&ms->mu);
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
            sl_log_kv(SL_LOG_WARN, SL_EV(MASTER_RETRY),
                      (SL_KV_STR("master", ms->master), SL_KV_U64("retry_ms", wait_ms),
                       SL_KV_STR("error", err->msg)),
                      "%s (retrying in %" PRIu64 " ms)", err->msg, wait_ms);
        }
        /* Past the deadline before the next ask: wait out what is left of
         * it, then time out. Returning at once would have a caller that
         * loops on short deadlines (the CLI, watching for signals) ask the
         * master again at once: a busy loop of LEASE_REQUEST and NO_WORK
         * on both sides while the worker waits for its first lease. */
        uint64_t now = sl_clock_ns();
        bool last = deadline_ns && now + wait_ms * 1000000ull > deadline_ns;
        uint64_t until = last ? deadline_ns : now + wait_ms * 1000000ull;
        sl_mutex_lock(&ms->mu);
        /* the retry wait may end early (a broadcast: ask again sooner); the
         * last one lasts to the deadline unless the source is done */
        while (!ms->cancel && !ms->stop && !ms->finished && !ms->fatal &&
               (now = sl_clock_ns()) < until) {
            sl_clock_cond_wait_ms(&ms->cv, &ms->mu, (until - now) / 1000000ull + 1);
            if (!last) break;
        }
        sl_mutex_unlock(&ms->mu);
        if (last)
            return sl_error_set(err, SL_ERR_TIMEOUT, "master %s: no lease in time", ms->master);
    }
}

bool dpp_lease_more(sl_worker_lease_client_t *ms)
{
    sl_mutex_lock(&ms->mu);
    bool closed = ms->cancel || ms->stop || ms->finished || ms->fatal;
    bool have = !closed && unhanded(ms) != NULL;
    sl_mutex_unlock(&ms->mu);
    if (closed || have) return have;
    lease_t *l = NULL;
    uint64_t retry_ms = 0;
    sl_error_t err = {0};
    ask_t k = ask_lease(ms, &l, &retry_ms, &err);
    if (k == ASK_FATAL) {
        /* what the next get would have failed with (a lease that breaks
         * the rules): the lease is gone from the master's side, so the
         * error must not be: the worker fails with it, as from get */
        sl_mutex_lock(&ms->mu);
        if (!ms->fatal) {
            ms->fatal = err.code ? err.code : SL_ERR_PROTOCOL;
            snprintf(ms->fatal_msg, sizeof ms->fatal_msg, "%s", err.msg);
        }
        pthread_cond_broadcast(&ms->cv);
        sl_mutex_unlock(&ms->mu);
    }
    return k == ASK_LEASE; /* linked: the next get hands it */
}

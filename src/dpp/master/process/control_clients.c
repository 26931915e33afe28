/* A trainer client's frames on the control connection (control.c reads
 * them): ATTACH (rank and world size checked), COMMIT (static sharding
 * enforced), CLIENT_STATS and TOKEN_REQUEST, applied to the state under the
 * master's lock on the control thread. */
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "common/mem.h"
#include "dpp/master/process/master_internal.h"

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
    mp_send_error(m, i, SL_ERR_INVALID, msg);
    mp_conn_close(m, i);
    return false;
}

/* The ATTACHED a client of a job gets now: the workers that serve the job
 * (and those of the jobs it shares passes with, which serve its batches
 * too: docs/DESIGN.md, "Shared passes"), its epoch, whether it finished or
 * failed (a failed job ends its clients with the reason: they would
 * otherwise wait for batches that never come). */
typedef struct attached {
    Sluice__Control__Attached rep;
    Sluice__Control__WorkerInfo *infos, **ptrs;
    size_t cap;
    char failure[1100];
} attached_t;

static void attached_release(sl_master_t *m, struct attached *at);

static bool attached_build(sl_master_t *m, const char *job_id,
                           const sl_master_state_job_status_t *st, attached_t *at)
    SL_REQUIRES(m->mu)
{
    at->cap = (size_t)m->nworkers + 1;
    at->infos = sl_calloc(m->a, at->cap, sizeof *at->infos);
    at->ptrs = sl_calloc(m->a, at->cap, sizeof *at->ptrs);
    if (at->infos == NULL || at->ptrs == NULL) {
        attached_release(m, at);
        return false;
    }
    size_t n = 0;
    uint32_t np = mp_fp_peers_locked(m, job_id);
    for (uint32_t w = 0; w < m->nworkers; w++) {
        const mp_worker *wk = &m->workers[w];
        bool mine = strcmp(wk->job, job_id) == 0;
        for (uint32_t k = 0; !mine && wk->shares && k < np; k++)
            mine = strcmp(wk->job, m->fp_peers[k]) == 0;
        if (wk->conn < 0 || !mine || wk->serve[0] == '\0') continue;
        sluice__control__worker_info__init(&at->infos[n]);
        at->infos[n].worker_id = (char *)wk->id;
        at->infos[n].serve_address = (char *)wk->serve;
        at->ptrs[n] = &at->infos[n];
        n++;
    }
    Sluice__Control__Attached *rep = &at->rep;
    sluice__control__attached__init(rep);
    rep->n_workers = n;
    rep->workers = at->ptrs;
    rep->finished = st->finished;
    rep->epoch = st->epoch;
    rep->sharding = st->static_sharding ? "static" : "dynamic";
    rep->order_ranks = st->deterministic ? st->ranks : 0;
    if (st->failed) {
        if (st->failure_stripe >= 0)
            snprintf(at->failure, sizeof at->failure,
                     "split %u (file %.300s stripe %d) failed: %.700s", st->failure_split,
                     st->failure_file, st->failure_stripe, st->failure_message);
        else
            snprintf(at->failure, sizeof at->failure, "split %u (file %.300s) failed: %.700s",
                     st->failure_split, st->failure_file, st->failure_message);
        rep->failed = true;
        rep->failure = at->failure;
        rep->failure_code = st->failure_code;
    }
    return true;
}

static void attached_release(sl_master_t *m, attached_t *at)
{
    sl_free(m->a, at->infos, at->cap * sizeof *at->infos);
    sl_free(m->a, at->ptrs, at->cap * sizeof *at->ptrs);
    at->infos = NULL;
    at->ptrs = NULL;
}

/* What tells two ATTACHED apart: XXH3 of the packed message (0 when it
 * cannot be packed, which then differs from any sent). */
static uint64_t attached_sig(const Sluice__Control__Attached *rep)
{
    size_t len = protobuf_c_message_get_packed_size(&rep->base);
    uint8_t small[512];
    uint8_t *buf = len <= sizeof small ? small : sl_alloc(NULL, len);
    if (buf == NULL) return 0;
    protobuf_c_message_pack(&rep->base, buf);
    uint64_t h = XXH3_64bits(buf, len) | 1;
    if (buf != small) sl_free(NULL, buf, len);
    return h;
}

void mp_push_attached(sl_master_t *m)
{
    /* Cheap first: the jobs' phases and the fleet's changes since the last
     * look; only a change costs a pass over the clients. */
    uint64_t key = XXH3_64bits(&m->workers_version, sizeof m->workers_version);
    for (uint32_t k = 0; k < m->opts.max_jobs; k++) {
        const mp_job *j = &m->jobs[k];
        sl_master_state_job_phase_t ph;
        if (!j->used || !sl_master_state_job_phase(m->st, j->id, &ph)) continue;
        uint64_t v[4] = {XXH3_64bits(j->id, strlen(j->id)), ph.epoch, ph.finished, ph.failed};
        key = XXH3_64bits_withSeed(v, sizeof v, key);
    }
    if (key == m->attached_key) return;
    /* Paced: at most MP_PUSH_PER_ROUND pushes a round. A change of a
     * fleet of W workers costs a message of W entries to each of C
     * clients; sent all in one round (256 workers, 1,024 clients: 6 MB)
     * they held every commit answer of the next round back by tens of ms
     * (docs/BENCHMARKS.md, "Fleet scale"). The key is kept only when every
     * client has the latest; until then each round sends to the next
     * clients (those whose last ATTACHED differs). */
    uint32_t budget = MP_PUSH_PER_ROUND;
    for (uint32_t k = 0; k < m->opts.max_jobs; k++) {
        const mp_job *j = &m->jobs[k];
        sl_master_state_job_status_t st;
        sl_error_t err = {0};
        attached_t at;
        if (!j->used || sl_master_state_job_status(m->st, j->id, &st, &err) != SL_OK ||
            !attached_build(m, j->id, &st, &at))
            continue;
        uint64_t sig = attached_sig(&at.rep);
        for (uint32_t i = 0; i < m->opts.max_connections; i++) {
            mp_conn *c = &m->conns[i];
            if (c->fd < 0 || c->kind != MP_CLIENT || c->attached_sig == sig ||
                strcmp(c->job, j->id) != 0)
                continue;
            if (budget == 0) break;
            budget--;
            c->attached_sig = sig;
            mp_send(m, i, SL_RPC_ATTACHED, &at.rep.base);
        }
        attached_release(m, &at);
    }
    if (budget > 0) m->attached_key = key;
    m->push_pending = budget == 0;
}

void mp_on_attach(sl_master_t *m, uint32_t i, const Sluice__Control__Attach *a)
{
    mp_conn *c = &m->conns[i];
    if (a->protocol_version != SL_MASTER_PROTOCOL_VERSION) {
        mp_send_error(m, i, SL_ERR_VERSION, "attach: protocol version not supported");
        return;
    }
    if (!mp_id_ok(a->client_id) || !mp_id_ok(a->job_id)) {
        mp_send_error(m, i, SL_ERR_INVALID, "attach: bad client id or job id");
        return;
    }
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    if (sl_master_state_job_status(m->st, a->job_id, &st, &err) != SL_OK) {
        /* closed like every ERROR: the client may connect and attach
         * again once the job is submitted */
        mp_send_error(m, i, SL_ERR_NOT_FOUND, err.msg);
        return;
    }
    if (!attach_ranks_ok(m, i, a, &st)) return;
    if (c->kind != MP_CLIENT) m->nclients_connected++;
    c->kind = MP_CLIENT;
    snprintf(c->client, sizeof c->client, "%s", a->client_id);
    snprintf(c->job, sizeof c->job, "%s", a->job_id);
    c->rank = a->rank;
    c->world = a->world_size ? a->world_size : 1;
    attached_t at;
    if (!attached_build(m, a->job_id, &st, &at)) {
        mp_send_error(m, i, SL_ERR_NOMEM, "attach: worker list");
        return;
    }
    c->attached_sig = attached_sig(&at.rep);
    mp_send(m, i, SL_RPC_ATTACHED, &at.rep.base);
    attached_release(m, &at);
}

void mp_on_commit(sl_master_t *m, uint32_t i, const Sluice__Control__Commit *cm)
{
    mp_deferred d = {.type = SL_RPC_COMMIT_REPLY, .nonce = cm->nonce};
    if (cm->ref == NULL || cm->rows == NULL) {
        mp_send_error(m, i, SL_ERR_PROTOCOL, "commit without ref or rows");
        return;
    }
    /* Static sharding is enforced here, not only by the client's filter: a
     * batch of a split assigned to another rank is refused as STALE (never
     * journaled; the rows stay uncommitted for the rank they belong to). */
    uint32_t owner = sl_master_state_split_rank(m->st, cm->ref->job_id, cm->ref->split);
    if (owner != 0 && owner - 1 != m->conns[i].rank &&
        !sl_master_state_commit_seen(m->st, cm->client_id, cm->nonce)) {
        d.result = SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE;
        snprintf(d.message, sizeof d.message,
                 "commit: job '%.100s' split %u is assigned to rank %u, not this client's rank %u "
                 "(static sharding)",
                 cm->ref->job_id, cm->ref->split, owner - 1, m->conns[i].rank);
        m->rank_refused++;
        if (!mp_defer(m, i, d)) mp_send_error(m, i, SL_ERR_NOMEM, "commit answer");
        return;
    }
    sl_error_t err = {0};
    sl_master_commit_t co = {cm->ref->job_id,     cm->ref->epoch,     cm->ref->split,
                             cm->ref->generation, cm->rows->from_row, cm->rows->to_row,
                             cm->client_id,       cm->nonce,          cm->num_samples};
    sl_master_commit_result_t res =
        m->failed ? SL_MASTER_COMMIT_ERROR
                  : sl_master_state_commit_ranked(m->st, &co, m->conns[i].rank + 1, &err);
    if (res == SL_MASTER_COMMIT_ERROR) {
        sl_err_t rc = m->failed ? SL_ERR_IO : err.code;
        if (rc == SL_ERR_IO || rc == SL_ERR_NOMEM) mp_fail(m, &err);
        mp_send_error(m, i, rc, m->failed ? "master state failed" : err.msg);
        return;
    }
    d.result = (int)res;
    if (res != SL_MASTER_COMMITTED) snprintf(d.message, sizeof d.message, "%.200s", err.msg);
    /* a repeated nonce too: the trainer asks again for a batch it holds */
    if (res == SL_MASTER_COMMITTED)
        d.equal = sl_master_state_equal_quota(m->st, cm->ref->job_id, cm->ref->epoch, &d.quota,
                                              &d.quota_final);
    if (!mp_defer(m, i, d)) mp_send_error(m, i, SL_ERR_NOMEM, "commit answer");
}

void mp_on_client_stats(sl_master_t *m, const Sluice__Control__ClientStats *s)
{
    mp_job *j = mp_job_find(m, s->job_id);
    if (j == NULL) return;
    /* One client's report; wait is summed over clients as is elapsed, so
     * the ratio is the mean fraction of time trainers waited. A client
     * waits at most the whole interval: more (a client that counts a long
     * wait only when it ends) is all of it, not a report to drop. */
    if (s->elapsed_ns > 0 && s->elapsed_ns < 3600ull * 1000000000ull) {
        j->wait_ns += s->wait_ns < s->elapsed_ns ? s->wait_ns : s->elapsed_ns;
        j->elapsed_ns += s->elapsed_ns;
    }
}

void mp_on_token_request(sl_master_t *m, uint32_t i, const Sluice__Control__TokenRequest *t)
{
    if (t->n_undelivered_refs != t->n_undelivered_rows) {
        mp_send_error(m, i, SL_ERR_PROTOCOL, "token request: refs and rows differ in length");
        return;
    }
    size_t n = t->n_undelivered_refs;
    sl_master_token_exclude_t *ex = sl_calloc(m->a, n + 1, sizeof *ex);
    if (ex == NULL) {
        mp_send_error(m, i, SL_ERR_NOMEM, "token request");
        return;
    }
    size_t k = 0;
    for (size_t q = 0; q < n; q++) {
        const Sluice__Control__SplitRef *r = t->undelivered_refs[q];
        const Sluice__Control__RowRange *rr = t->undelivered_rows[q];
        if (r == NULL || rr == NULL || strcmp(r->job_id, t->job_id) != 0) continue;
        ex[k++] = (sl_master_token_exclude_t){r->epoch, r->split, rr->from_row, rr->to_row,
                                              r->generation};
    }
    mp_deferred d = {.type = SL_RPC_TOKEN};
    sl_error_t err = {0};
    /* The taker's rank and world size are its ATTACH's (a client that did
     * not attach has none: rank 0 of 1, its commits its own). */
    const mp_conn *c = &m->conns[i];
    bool attached = c->kind == MP_CLIENT;
    sl_master_token_req_t req = {.job_id = t->job_id,
                                 .client_id = t->client_id,
                                 .rank = attached ? c->rank : 0,
                                 .world_size = attached ? c->world : 1,
                                 .has_step = t->has_step,
                                 .step = t->step,
                                 .undelivered = ex,
                                 .num_undelivered = (uint32_t)k};
    sl_err_t rc = sl_master_state_token_take(m->st, &req, &d.token, &d.token_len, &err);
    sl_free(m->a, ex, (n + 1) * sizeof *ex);
    if (rc != SL_OK) {
        mp_send_error(m, i, rc, err.msg);
        return;
    }
    if (!mp_defer(m, i, d)) {
        sl_free(m->a, d.token, d.token_len);
        mp_send_error(m, i, SL_ERR_NOMEM, "token answer");
    }
}

/* A worker's frames on the control connection (control.c reads them):
 * REGISTER (one live process per worker id), LEASE_REQUEST, HEARTBEAT,
 * SPLIT_READ and SPLIT_FAILED, applied to the state under the master's
 * lock on the control thread. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/master/process/master_internal.h"

/* The state's outcomes are the replies' values (sent as they are). */
_Static_assert((int)SL_MASTER_READ_PENDING == SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__PENDING &&
                   (int)SL_MASTER_READ_DONE == SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE &&
                   (int)SL_MASTER_READ_STALE == SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__STALE,
               "SplitReadReply.State");
_Static_assert((int)SL_MASTER_FAIL_STALE == SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__STALE &&
                   (int)SL_MASTER_FAIL_JOB_FAILED ==
                       SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__JOB_FAILED,
               "SplitFailedReply.State");

/* The record of worker id, added when new. @return NULL with *why set
 * (SL_ERR_TOO_LARGE past max_workers, SL_ERR_NOMEM). */
static mp_worker *worker_get(sl_master_t *m, const char *id, uint32_t *idx, sl_err_t *why)
    SL_REQUIRES(m->mu)
{
    for (uint32_t w = 0; w < m->nworkers; w++)
        if (strcmp(m->workers[w].id, id) == 0) {
            *idx = w;
            return &m->workers[w];
        }
    *why = SL_ERR_TOO_LARGE;
    if (m->nworkers >= m->opts.max_workers) return NULL;
    *why = SL_ERR_NOMEM;
    if (m->nworkers == m->cap_workers &&
        !SL_GROW(m->a, m->workers, m->cap_workers, m->nworkers + 1, 16))
        return NULL;
    mp_worker *w = &m->workers[m->nworkers];
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    w->conn = -1;
    *idx = m->nworkers++;
    return w;
}

bool mp_id_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n >= MP_ID_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e) return false;
    return true;
}

/* The leases a worker names (REGISTER, HEARTBEAT) for the state machine,
 * NULL refs skipped. Caller frees *out, n entries (NULL when n is 0).
 * @return false when out of memory. */
static bool lease_refs(const sl_allocator_t *a, Sluice__Control__SplitRef *const *refs, size_t n,
                       sl_master_lease_ref_t **out, uint32_t *count)
{
    *out = NULL;
    *count = 0;
    if (n == 0) return true;
    if (n > UINT32_MAX || (*out = sl_alloc(a, n * sizeof **out)) == NULL) return false;
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
    mp_send_error(m, i, SL_ERR_INVALID, msg);
    mp_conn_close(m, i);
    return false;
}

void mp_on_register(sl_master_t *m, uint32_t i, const Sluice__Control__Register *r)
{
    mp_conn *c = &m->conns[i];
    if (r->protocol_version != SL_MASTER_PROTOCOL_VERSION) {
        mp_send_error(m, i, SL_ERR_VERSION, "register: protocol version not supported");
        return;
    }
    if (!mp_id_ok(r->worker_id) || strlen(r->serve_address) >= MP_ADDR_MAX ||
        strlen(r->admin_address) >= MP_ADDR_MAX || strlen(r->job_id) >= MP_ID_MAX) {
        mp_send_error(m, i, SL_ERR_INVALID, "register: bad worker id, job id or address");
        return;
    }
    uint32_t wi;
    sl_err_t why = SL_ERR_TOO_LARGE; /* worker_get sets it when it returns NULL */
    mp_worker *w = worker_get(m, r->worker_id, &wi, &why);
    if (w == NULL) {
        mp_send_error(m, i, why,
                      why == SL_ERR_NOMEM ? "register: out of memory"
                                          : "register: too many workers");
        return;
    }
    uint64_t now = sl_clock_ms();
    if (w->conn >= 0 && w->conn != (int)i) {
        if (!may_take_id(m, i, w, r->incarnation, now)) return;
        mp_conn_close(m, (uint32_t)w->conn); /* reconnected, or its process is gone */
    }
    /* The process's own list is authoritative: leases of this id it does
     * not hold (a predecessor's, a grant it never received) go back now. */
    sl_master_lease_ref_t *held;
    uint32_t nheld;
    if (!lease_refs(m->a, r->leases, r->n_leases, &held, &nheld)) {
        mp_send_error(m, i, SL_ERR_NOMEM, "register: lease list");
        mp_conn_close(m, i);
        return;
    }
    sl_error_t err = {0};
    if (!m->failed &&
        sl_master_state_register(m->st, w->id, held, nheld, now, NULL, NULL, &err) != SL_OK)
        mp_fail(m, &err);
    sl_free(m->a, held, r->n_leases * sizeof *held);
    mp_named_set(m, w, r->leases, r->n_leases);
    char inc[17]; /* a random 64-bit number: as hex, not as a (signed) JSON integer */
    snprintf(inc, sizeof inc, "%016" PRIx64, r->incarnation);
    sl_log_kv(SL_LOG_INFO, SL_EV(WORKER_JOINED),
              (SL_KV_STR("worker", w->id), SL_KV_STR("job", r->job_id),
               SL_KV_STR("address", r->serve_address), SL_KV_STR("admin", r->admin_address),
               SL_KV_STR("incarnation", inc), SL_KV_U64("leases_held", nheld)),
              "worker %s joined%s%s, serving on %s (holding %u lease%s)", w->id,
              r->job_id[0] != '\0' ? " for job " : "", r->job_id, r->serve_address, nheld,
              nheld == 1 ? "" : "s");
    w->incarnation = r->incarnation;
    w->shares = r->shares;
    w->cache_local = r->cache_local;
    snprintf(w->serve, sizeof w->serve, "%s", r->serve_address);
    snprintf(w->admin, sizeof w->admin, "%s", r->admin_address);
    if (r->job_id[0] != '\0') snprintf(w->job, sizeof w->job, "%s", r->job_id);
    w->conn = (int)i;
    w->last_seen_ms = now;
    m->workers_version++;
    c->kind = MP_WORKER;
    c->worker = wi;
    m->nworkers_connected++;
    Sluice__Control__Registered rep = SLUICE__CONTROL__REGISTERED__INIT;
    rep.lease_timeout_ms = m->opts.lease_timeout_ms;
    rep.heartbeat_ms = m->opts.heartbeat_ms;
    mp_send(m, i, SL_RPC_REGISTERED, &rep.base);
}

static void no_work(sl_master_t *m, uint32_t i, uint64_t retry, const char *why) SL_REQUIRES(m->mu)
{
    Sluice__Control__NoWork nw = SLUICE__CONTROL__NO_WORK__INIT;
    nw.retry_ms = retry;
    nw.reason = (char *)why;
    mp_send(m, i, SL_RPC_NO_WORK, &nw.base);
}

/* Are the committed ranges of split in jobs a and b's current epochs the
 * same (so a lease of either would have the same todo)? */
static bool same_todo(sl_master_t *m, const char *a, const char *b, uint32_t split)
    SL_REQUIRES(m->mu)
{
    const sl_dpp_row_range_t *ra, *rb;
    uint32_t na, nb;
    sl_error_t err = {0};
    if (sl_master_state_committed(m->st, a, split, &ra, &na, &err) != SL_OK) return false;
    /* ra is borrowed until the next call on the state: compare as we go */
    sl_dpp_row_range_t first[16];
    if (na > 16) return false; /* a split this fragmented is leased on its own */
    if (na > 0) memcpy(first, ra, na * sizeof *ra); /* ra may be NULL when there are none */
    if (sl_master_state_committed(m->st, b, split, &rb, &nb, &err) != SL_OK || nb != na)
        return false;
    return na == 0 || memcmp(first, rb, na * sizeof *rb) == 0;
}

/* A shared pass (docs/DESIGN.md, "Shared passes"): lease l (of job, just
 * granted to w) goes with the same split of every job sharing job's plan
 * fingerprint whose split is PENDING in the same epoch with the same todo,
 * each under its own lease (its own generation and ledger), to w as well.
 * Only a worker that serves shared passes, dynamic sharding, jobs not
 * detached for lagging. Their refs go to refs (at most MP_SHARE_MAX).
 * @return how many. */
static uint32_t share_pass(sl_master_t *m, mp_worker *w, const char *job,
                           const sl_master_lease_t *l, Sluice__Control__SplitRef *refs,
                           Sluice__Control__SplitRef **ptrs) SL_REQUIRES(m->mu)
{
    mp_job *me = mp_job_find(m, job);
    if (!w->shares || me == NULL || me->solo || l->rank_plus_one != 0) return 0;
    uint32_t np = mp_fp_peers_locked(m, job), n = 0;
    uint64_t now = sl_clock_ms();
    for (uint32_t k = 0; k < np && n < MP_SHARE_MAX; k++) {
        const char *peer = m->fp_peers[k];
        mp_job *pj = mp_job_find(m, peer);
        sl_master_state_job_status_t st;
        sl_error_t err = {0};
        if (pj == NULL || pj->solo || sl_master_state_job_status(m->st, peer, &st, &err) != SL_OK ||
            st.static_sharding || st.failed || st.finished || st.epoch != l->epoch ||
            !same_todo(m, job, peer, l->split))
            continue;
        sl_master_lease_t pl;
        if (sl_master_state_lease_split(m->st, peer, l->split, w->id, now, &pl, &err) != SL_OK)
            continue; /* not PENDING (leased, done), or no room: it goes on its own */
        sluice__control__split_ref__init(&refs[n]);
        refs[n].job_id = pj->id;
        refs[n].epoch = pl.epoch;
        refs[n].split = pl.split;
        refs[n].generation = pl.generation;
        ptrs[n] = &refs[n];
        n++;
        sl_log_kv(SL_LOG_INFO, SL_EV(LEASE_SHARED),
                  (SL_KV_STR("job", peer), SL_KV_U64("split", pl.split),
                   SL_KV_U64("epoch", pl.epoch), SL_KV_U64("generation", pl.generation),
                   SL_KV_STR("worker", w->id), SL_KV_STR("with", job)),
                  "job %s split %u epoch %u: leased to worker %s, shared with job %s", peer,
                  pl.split, pl.epoch, w->id, job);
    }
    return n;
}

/* Shared passes keep in step at an epoch's start: job (in its epoch e)
 * waits while a job sharing its passes is still finishing epoch e - 1
 * (nothing of it pending, only leased splits left: a matter of its last
 * acknowledgements), at most MP_SHARE_SYNC_MS from when job's epoch e was
 * first asked for; otherwise its fast worker reads the whole of epoch e
 * alone before the other can join. A peer further behind (splits still
 * pending) is not waited for. @return true to answer NO_WORK for now. */
static bool wait_for_peers(sl_master_t *m, const char *job, uint64_t now) SL_REQUIRES(m->mu)
{
    mp_job *me = mp_job_find(m, job);
    sl_master_state_job_status_t st, ps;
    sl_error_t err = {0};
    if (me == NULL || me->solo || sl_master_state_job_status(m->st, job, &st, &err) != SL_OK ||
        !st.share || st.epoch == 0 || st.finished || st.failed)
        return false;
    if (me->sync_epoch != st.epoch) {
        me->sync_epoch = st.epoch;
        me->sync_since_ms = now;
    }
    if (now - me->sync_since_ms >= MP_SHARE_SYNC_MS) return false;
    uint32_t np = mp_fp_peers_locked(m, job);
    for (uint32_t k = 0; k < np; k++) {
        const mp_job *pj = mp_job_find(m, m->fp_peers[k]);
        if (pj != NULL && !pj->solo &&
            sl_master_state_job_status(m->st, pj->id, &ps, &err) == SL_OK && !ps.finished &&
            !ps.failed && ps.epoch + 1 == st.epoch && ps.pending == 0)
            return true;
    }
    return false;
}

/* A resumed deterministic job's skip rows of l's split (LEASE order_skip,
 * docs/DESIGN.md "A deterministic order", *Resume*): into *out and
 * *store (allocated, [*n]; NULL and 0 when none). @return false when out
 * of memory. */
static bool order_skip(sl_master_t *m, const char *job, const sl_master_lease_t *l,
                       Sluice__Control__RowRange ***out, Sluice__Control__RowRange **store,
                       uint32_t *n) SL_REQUIRES(m->mu)
{
    *out = NULL;
    *store = NULL;
    *n = 0;
    uint32_t count = sl_master_state_order_skip(m->st, job, l->epoch, l->split, NULL, 0);
    if (count == 0) return true;
    sl_dpp_row_range_t *r = sl_alloc(m->a, count * sizeof *r);
    Sluice__Control__RowRange **p = sl_alloc(m->a, count * sizeof *p);
    Sluice__Control__RowRange *v = sl_alloc(m->a, count * sizeof *v);
    if (r == NULL || p == NULL || v == NULL) {
        sl_free(m->a, r, count * sizeof *r);
        sl_free(m->a, p, count * sizeof *p);
        sl_free(m->a, v, count * sizeof *v);
        return false;
    }
    sl_master_state_order_skip(m->st, job, l->epoch, l->split, r, count);
    for (uint32_t k = 0; k < count; k++) {
        sluice__control__row_range__init(&v[k]);
        v[k].from_row = r[k].from_row;
        v[k].to_row = r[k].to_row;
        p[k] = &v[k];
    }
    sl_free(m->a, r, count * sizeof *r);
    *out = p;
    *store = v;
    *n = count;
    return true;
}

void mp_on_lease_request(sl_master_t *m, uint32_t i, const Sluice__Control__LeaseRequest *r)
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
        if (w->shares && wait_for_peers(m, job, sl_clock_ms())) {
            no_work(m, i, 20, "waiting for a job sharing this one's passes to end its epoch");
            return;
        }
        rc = mp_cache_local_lease_next(m, job, m->conns[i].worker, sl_clock_ms(), &l, &err);
    } else {
        /* Any job: the one with the fewest workers for its demand. */
        for (uint32_t k = 0; k < m->opts.max_jobs && rc == SL_ERR_AGAIN; k++) {
            if (!m->jobs[k].used) continue;
            rc = mp_cache_local_lease_next(m, m->jobs[k].id, m->conns[i].worker, sl_clock_ms(), &l,
                                           &err);
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
        mp_send_error(m, i, rc, err.msg);
        return;
    }
    if (w->job[0] == '\0') {
        snprintf(w->job, sizeof w->job, "%s", job);
        m->workers_version++;
    }
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
        todo = sl_alloc(m->a, l.num_todo * sizeof *todo);
        store = sl_alloc(m->a, l.num_todo * sizeof *store);
        if (todo == NULL || store == NULL) {
            sl_free(m->a, todo, l.num_todo * sizeof *todo);
            sl_free(m->a, store, l.num_todo * sizeof *store);
            mp_send_error(m, i, SL_ERR_NOMEM, "lease: todo list");
            return;
        }
    }
    for (uint32_t k = 0; k < l.num_todo; k++) {
        sluice__control__row_range__init(&store[k]);
        store[k].from_row = l.todo[k].from_row;
        store[k].to_row = l.todo[k].to_row;
        todo[k] = &store[k];
    }
    /* before share_pass: l.todo is good until the next call on the state */
    char cache_file[4096];
    bool cache_local = false;
    int cache_mode = mp_cache_lease(m, job, &st, &l, m->conns[i].worker, cache_file,
                                    sizeof cache_file, &cache_local);
    Sluice__Control__SplitRef shared[MP_SHARE_MAX], *shared_p[MP_SHARE_MAX];
    uint32_t nshared = share_pass(m, w, job, &l, shared, shared_p);
    Sluice__Control__Lease le = SLUICE__CONTROL__LEASE__INIT;
    le.n_shared = nshared;
    le.shared = shared_p;
    le.ref = &ref;
    le.job_spec_json = (char *)st.spec_json;
    le.path = (char *)l.path;
    le.stripe_begin = l.stripe_begin;
    le.stripe_end = l.stripe_end;
    le.first_row = l.first_row;
    le.num_rows = l.num_rows;
    le.footer_checksum = l.footer_checksum;
    le.n_todo = l.num_todo;
    le.todo = todo;
    le.rank_plus_one = l.rank_plus_one;
    le.expiry_ms = m->opts.lease_timeout_ms;
    Sluice__Control__RowRange **skip = NULL, *skip_store = NULL;
    uint32_t nskip = 0;
    if (st.deterministic) {
        uint64_t base;
        le.order_ranks = st.ranks;
        if (sl_master_state_order_base(m->st, job, l.epoch, l.split, &base))
            le.order_base_plus_one = base + 1;
        if (!order_skip(m, job, &l, &skip, &skip_store, &nskip)) {
            if (todo != rp) {
                sl_free(m->a, todo, l.num_todo * sizeof *todo);
                sl_free(m->a, store, l.num_todo * sizeof *store);
            }
            mp_send_error(m, i, SL_ERR_NOMEM, "lease: skip rows");
            return;
        }
        le.n_order_skip = nskip;
        le.order_skip = skip;
    }
    if (cache_mode != SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_NONE) {
        le.cache_file = cache_file;
        le.cache_mode = (Sluice__Control__Lease__CacheMode)cache_mode;
        le.cache_local = cache_local;
    }
    char topic[MP_ID_MAX];
    int32_t partition = 0;
    if (mp_kafka_split_ref(l.path, l.stripe_begin, l.stripe_end, topic, sizeof topic, &partition)) {
        le.kafka_topic = topic;
        le.kafka_partition = partition;
    }
    /* one a split and epoch (and again after an expiry): never per batch */
    sl_log_kv(SL_LOG_INFO, SL_EV(LEASE_GRANTED),
              (SL_KV_STR("job", job), SL_KV_U64("split", l.split), SL_KV_U64("epoch", l.epoch),
               SL_KV_U64("generation", l.generation), SL_KV_STR("worker", w->id),
               SL_KV_U64("rows", l.num_rows)),
              "job %s split %u epoch %u: leased to worker %s", job, l.split, l.epoch, w->id);
    if (mp_send(m, i, SL_RPC_LEASE, &le.base)) {
        /* received unless this connection breaks (named.c) */
        Sluice__Control__SplitRef *granted = &ref;
        mp_named_add(m, w, &granted, 1);
        mp_named_add(m, w, shared_p, nshared);
    }
    sl_free(m->a, skip, nskip * sizeof *skip);
    sl_free(m->a, skip_store, nskip * sizeof *skip_store);
    if (todo != rp) {
        sl_free(m->a, todo, l.num_todo * sizeof *todo);
        sl_free(m->a, store, l.num_todo * sizeof *store);
    }
}

/* The deterministic order's counts at cut (Heartbeat.counts, det28h):
 * each of a live lease of this worker journaled as BatchesCounted, as the
 * count of a SPLIT_READ is. The reply that follows is not held until the
 * journal syncs (the round's next group commit syncs the record, at the
 * latest the first COMMIT of a batch numbered from it, journaled after
 * it): a count is a function of the split's rows (the batcher
 * cuts them the same way on every read), so a record lost in a crash is
 * only counted again by the split's next lease (it is not DONE until
 * counted), giving the same bases to everything numbered from them.
 * @return false when the heartbeat was answered with ERROR. */
static bool heartbeat_counts(sl_master_t *m, uint32_t i, const Sluice__Control__Heartbeat *h)
    SL_REQUIRES(m->mu)
{
    const mp_worker *w = &m->workers[m->conns[i].worker];
    for (size_t k = 0; k < h->n_counts && !m->failed; k++) {
        const Sluice__Control__SplitCount *c = h->counts[k];
        if (c == NULL || c->ref == NULL || c->ref->job_id == NULL) continue;
        const Sluice__Control__SplitRef *r = c->ref;
        /* a lease no longer live (revoked, expired): its count is not
         * taken, its SPLIT_READ will be STALE too */
        if (!sl_master_state_lease_live(m->st, r->job_id, r->epoch, r->split, r->generation, w->id))
            continue;
        sl_error_t err = {0};
        sl_err_t rc = sl_master_state_batches_counted(m->st, r->job_id, r->epoch, r->split,
                                                      r->generation, c->batches, &err);
        if (rc == SL_OK || rc == SL_ERR_AGAIN) continue;
        if (rc == SL_ERR_IO || rc == SL_ERR_NOMEM) mp_fail(m, &err);
        mp_send_error(m, i, rc, err.msg);
        return false;
    }
    return true;
}

void mp_on_heartbeat(sl_master_t *m, uint32_t i, const Sluice__Control__Heartbeat *h)
{
    mp_worker *w = &m->workers[m->conns[i].worker];
    uint64_t now = sl_clock_ms();
    sl_error_t err = {0};
    /* Only the leases it names: a grant it never received is not renewed. */
    sl_master_lease_ref_t *held;
    uint32_t nheld;
    if (!lease_refs(m->a, h->leases, h->n_leases, &held, &nheld)) {
        mp_send_error(m, i, SL_ERR_NOMEM, "heartbeat: lease list");
        return;
    }
    sl_master_state_renew(m->st, w->id, held, nheld, now, NULL, &err);
    sl_free(m->a, held, h->n_leases * sizeof *held);
    mp_named_set(m, w, h->leases, h->n_leases);
    w->busy = h->busy_fraction < 0 ? 0 : h->busy_fraction > 1 ? 1 : h->busy_fraction;
    w->queued = h->queued_batches;
    w->memory = h->memory_used;
    w->batches = h->batches_sent;
    w->samples = h->samples_sent;
    w->bytes_encoded = h->bytes_encoded;
    w->bytes_expanded = h->bytes_expanded;
    w->shared_batches = h->shared_batches;
    w->shared_bytes = h->shared_bytes;
    w->shared_cpu_ns = h->shared_cpu_ns;
    mp_cache_figures_in(m, w, h->cache);
    mp_cache_local_evicted(m, m->conns[i].worker, h);
    /* counts at cut first, so that the bases below include what they
     * made known (a disagreement: ERROR naming both, as for SPLIT_READ) */
    if (!heartbeat_counts(m, i, h)) return;
    w->leases = 0;
    /* out of memory: nothing revoked this time (the next heartbeat tells) */
    Sluice__Control__SplitRef **rev =
        h->n_leases ? sl_alloc(m->a, h->n_leases * sizeof *rev) : NULL;
    /* the deterministic order's bases known now, of the live leases named
     * (as many as the leases at most; out of memory: the next heartbeat) */
    Sluice__Control__SplitBase *bs = h->n_leases ? sl_alloc(m->a, h->n_leases * sizeof *bs) : NULL;
    Sluice__Control__SplitBase **bp = h->n_leases ? sl_alloc(m->a, h->n_leases * sizeof *bp) : NULL;
    size_t nrev = 0, nbase = 0;
    for (size_t k = 0; k < h->n_leases; k++) {
        const Sluice__Control__SplitRef *r = h->leases[k];
        if (r == NULL) continue;
        uint64_t base;
        if (sl_master_state_lease_live(m->st, r->job_id, r->epoch, r->split, r->generation,
                                       w->id)) {
            w->leases++;
            if (bs != NULL && bp != NULL &&
                sl_master_state_order_base(m->st, r->job_id, r->epoch, r->split, &base)) {
                sluice__control__split_base__init(&bs[nbase]);
                bs[nbase].ref = (Sluice__Control__SplitRef *)r;
                bs[nbase].first_g = base;
                bp[nbase] = &bs[nbase];
                nbase++;
            }
        } else if (rev != NULL) {
            rev[nrev++] = (Sluice__Control__SplitRef *)r;
        }
    }
    Sluice__Control__HeartbeatReply rep = SLUICE__CONTROL__HEARTBEAT_REPLY__INIT;
    rep.n_revoked = nrev;
    rep.revoked = rev;
    rep.n_bases = nbase;
    rep.bases = bp;
    /* A worker of a removed, finished or failed job is retired. */
    if (w->job[0] != '\0') {
        sl_master_state_job_status_t st;
        rep.stop = sl_master_state_job_status(m->st, w->job, &st, &err) != SL_OK || st.finished ||
                   st.failed;
    }
    mp_send(m, i, SL_RPC_HEARTBEAT_REPLY, &rep.base);
    sl_free(m->a, rev, h->n_leases * sizeof *rev);
    sl_free(m->a, bs, h->n_leases * sizeof *bs);
    sl_free(m->a, bp, h->n_leases * sizeof *bp);
}

void mp_on_split_read(sl_master_t *m, uint32_t i, const Sluice__Control__SplitRead *r)
{
    mp_deferred d = {.type = SL_RPC_SPLIT_READ_REPLY};
    if (r->ref == NULL) {
        mp_send_error(m, i, SL_ERR_PROTOCOL, "split read without ref");
        return;
    }
    if (m->conns[i].kind == MP_WORKER)
        mp_cache_figures_in(m, &m->workers[m->conns[i].worker], r->cache);
    sl_dpp_row_range_t one[16], *e = one;
    if (r->n_empty > 16 && (e = sl_alloc(m->a, r->n_empty * sizeof *e)) == NULL) {
        mp_send_error(m, i, SL_ERR_NOMEM, "split read: empty ranges");
        return;
    }
    for (size_t k = 0; k < r->n_empty; k++)
        e[k] = (sl_dpp_row_range_t){r->empty[k] ? r->empty[k]->from_row : 0,
                                    r->empty[k] ? r->empty[k]->to_row : 0};
    sl_error_t err = {0};
    /* the deterministic order's count first (journaled in the same round,
     * synced before the answer): the split read may end the split, which
     * a deterministic job's does only once counted. A lease no longer
     * live is the split read's STALE below. */
    if (r->counted && !m->failed) {
        sl_err_t crc =
            sl_master_state_batches_counted(m->st, r->ref->job_id, r->ref->epoch, r->ref->split,
                                            r->ref->generation, r->batches, &err);
        if (crc != SL_OK && crc != SL_ERR_AGAIN) {
            if (e != one) sl_free(m->a, e, r->n_empty * sizeof *e);
            if (crc == SL_ERR_IO || crc == SL_ERR_NOMEM) mp_fail(m, &err);
            mp_send_error(m, i, crc, err.msg);
            return;
        }
    }
    sl_master_read_result_t res =
        m->failed ? SL_MASTER_READ_ERROR
                  : sl_master_state_split_read(m->st, r->ref->job_id, r->ref->epoch, r->ref->split,
                                               r->ref->generation, e, (uint32_t)r->n_empty, &err);
    bool ok = res == SL_MASTER_READ_DONE || res == SL_MASTER_READ_PENDING;
    /* what the worker's disk holds, whatever the lease's fate: a split
     * whose rows were all committed ended its lease before this came */
    if (!m->failed && m->conns[i].kind == MP_WORKER) mp_cache_local_read(m, m->conns[i].worker, r);
    if (e != one) sl_free(m->a, e, r->n_empty * sizeof *e);
    mp_job *dj = r->detached && r->ref->job_id ? mp_job_find(m, r->ref->job_id) : NULL;
    if (ok && dj != NULL && !dj->solo) {
        dj->solo = true;
        sl_log_kv(SL_LOG_INFO, SL_EV(SHARE_DETACHED),
                  (SL_KV_STR("job", dj->id), SL_KV_U64("split", r->ref->split),
                   SL_KV_STR("worker", m->workers[m->conns[i].worker].id)),
                  "job %s fell behind its shared pass on worker %s: leased on its own from now",
                  dj->id, m->workers[m->conns[i].worker].id);
    }
    if (res == SL_MASTER_READ_ERROR) {
        sl_err_t rc = m->failed ? SL_ERR_IO : err.code;
        if (rc == SL_ERR_IO || rc == SL_ERR_NOMEM) mp_fail(m, &err);
        mp_send_error(m, i, rc, m->failed ? "master state failed" : err.msg);
        return;
    }
    d.result = (int)res; /* the values of SplitReadReply.State */
    if (!mp_defer(m, i, d)) mp_send_error(m, i, SL_ERR_NOMEM, "split read answer");
}

/* A worker could not read its lease's split: count it (the split is leased
 * again, skipped, or its job fails: state_failure.c) and answer after the
 * round's sync (the outcome is journaled). */
void mp_on_split_failed(sl_master_t *m, uint32_t i, const Sluice__Control__SplitFailed *r)
{
    mp_deferred d = {.type = SL_RPC_SPLIT_FAILED_REPLY};
    if (r->ref == NULL || r->ref->job_id == NULL) {
        mp_send_error(m, i, SL_ERR_PROTOCOL, "split failed without ref");
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
    /* only the live lease's holder may fail it */
    bool holder =
        sl_master_state_lease_live(m->st, f.job_id, f.epoch, f.split, f.generation, w->id);
    sl_master_split_fail_result_t res =
        m->failed ? SL_MASTER_FAIL_ERROR
        : !holder ? SL_MASTER_FAIL_STALE
                  : sl_master_state_split_failed(m->st, &f, m->opts.max_split_failures, &err);
    if (res == SL_MASTER_FAIL_ERROR) {
        sl_err_t rc = m->failed ? SL_ERR_IO : err.code;
        if (rc == SL_ERR_IO || rc == SL_ERR_NOMEM) mp_fail(m, &err);
        mp_send_error(m, i, rc, m->failed ? "master state failed" : err.msg);
        return;
    }
    if (res != SL_MASTER_FAIL_STALE) {
        const char *outcome = res == SL_MASTER_FAIL_JOB_FAILED ? "job_failed"
                              : res == SL_MASTER_FAIL_SKIPPED  ? "skipped"
                                                               : "retry";
        sl_log_kv(SL_LOG_WARN, SL_EV(SPLIT_FAILED),
                  (SL_KV_STR("job", f.job_id), SL_KV_U64("epoch", f.epoch),
                   SL_KV_U64("split", f.split), SL_KV_STR("file", f.file),
                   SL_KV_I64("stripe", f.stripe), SL_KV_STR("worker", w->id),
                   SL_KV_STR("error", f.message), SL_KV_STR("outcome", outcome)),
                  "job %.200s split %u (%.300s stripe %d) failed on worker %s: %.400s%s", f.job_id,
                  f.split, f.file, f.stripe, w->id, f.message,
                  res == SL_MASTER_FAIL_JOB_FAILED ? " -- the job has failed"
                  : res == SL_MASTER_FAIL_SKIPPED  ? " -- the split is skipped"
                                                   : "");
    }
    d.result = (int)res; /* the values of SplitFailedReply.State */
    if (!mp_defer(m, i, d)) mp_send_error(m, i, SL_ERR_NOMEM, "split failed answer");
}

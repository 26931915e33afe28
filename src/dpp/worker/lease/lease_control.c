/* The lease client's control thread (lease_client.h): HEARTBEAT every
 * heartbeat_ms with the leases held and the worker's load, dropping the
 * leases the master revokes; SPLIT_FAILED for a lease whose split cannot
 * be read; SPLIT_READ for a lease read whole whose batches are all
 * acknowledged (or dropped), after which the lease is forgotten. */
#include <stdio.h>
#include <string.h>

#include "common/log_events.h"
#include "dpp/worker/lease/lease_client_internal.h"

/* ---- the control thread ---- */

/* How often a shared pass with members is looked at for a stall. */
#define STALL_CHECK_NS 250000000ull
/* How often a worker awaiting a base (the deterministic order) asks. */
#define ORDER_POLL_NS 5000000ull

/* The autocache's measurements (docs/DESIGN.md "Autocache") of st. */
static void cache_figures(const sl_worker_stats_t *st, Sluice__Control__CacheFigures *cf)
{
    /* a fused batch's transforms are in its encode time: counted, less the
     * copy into the frame a cached batch's encode pays as well */
    cf->compute_ns =
        st->read_ns + st->filter_ns + st->dedup_ns + st->transform_ns + st->fused_transform_ns;
    cf->computed_samples = st->samples - st->cache_samples;
    cf->computed_bytes = st->bytes_encoded - st->cache_bytes_encoded;
    cf->source_ns = st->read_ns + st->filter_ns;
    cf->source_bytes = st->source_bytes;
    cf->read_ns = st->cache_read_ns;
    cf->samples = st->cache_samples;
    cf->fallbacks = st->cache_fallbacks;
    cf->files_written = st->cache_files_written;
    cf->bytes_written = st->cache_bytes_written;
    cf->write_ns = st->cache_write_ns;
}

/* Report one lease whose rows are all read and batches all retired.
 * Called without ms->mu. @return false on a connection problem (retry). */
/* A base or a drop for the worker's server (heartbeat). */
typedef struct order_news {
    lease_t *l; /* pinned */
    uint64_t base;
    bool drop;
} order_news_t;

static bool report(sl_worker_lease_client_t *ms, lease_t *l) SL_EXCLUDES(ms->mu)
{
    char job[sizeof ms->job_id];
    sl_mutex_lock(&ms->mu);
    snprintf(job, sizeof job, "%s", ms->job_id);
    /* a member that stopped getting copies (detached or released) reports
     * no empty range, even one it took from its primary before: every row
     * it did not get stays to do (docs/DESIGN.md, "Shared passes") */
    uint32_t ne = l->detached || l->released ? 0 : l->num_empty;
    sl_mutex_unlock(&ms->mu);
    Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
    dpp_lease_fill_ref(&ref, job, l);
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
    sr.detached = l->detached;
    /* a file on this worker's disk: whether it is there now (written, or
     * read and kept), so the master leases the split here next epoch */
    sr.cache_local = l->cache_local;
    sr.cache_held_bytes = l->cache_local ? dpp_cache_dir_settle(ms->cache, l->cache_name) : 0;
    sl_mutex_lock(&ms->mu);
    sr.counted = l->counted;
    sr.batches = l->order_batches;
    sl_mutex_unlock(&ms->mu);
    Sluice__Control__CacheFigures cf = SLUICE__CONTROL__CACHE_FIGURES__INIT;
    sl_mutex_lock(&ms->mu);
    sl_worker_t *w = ms->worker;
    sl_mutex_unlock(&ms->mu);
    if (w) {
        sl_worker_stats_t st;
        sl_worker_stats(w, &st);
        cache_figures(&st, &cf);
        sr.cache = &cf;
    }
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    sl_err_t rc = dpp_lease_call(ms, SL_RPC_SPLIT_READ, &sr.base, "split read",
                                 SL_RPC_SPLIT_READ_REPLY, &f, &err);
    if (rr) sl_free(ms->a, rr, (size_t)ne * sizeof *rr);
    if (rp) sl_free(ms->a, rp, (size_t)ne * sizeof *rp);
    if (rc) {
        sl_log_kv(SL_LOG_WARN, SL_EV(SPLIT_READ_REPORT_FAILED),
                  (SL_KV_U64("split", l->split), SL_KV_STR("error", err.msg)), "%s", err.msg);
        return false;
    }
    const Sluice__Control__SplitReadReply *r = (const Sluice__Control__SplitReadReply *)f.msg;
    sl_mutex_lock(&ms->mu);
    ms->st.split_reads++;
    if (r->state == SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE) ms->st.splits_done++;
    l->cache_told = true;
    dpp_lease_remove(ms, l);
    sl_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
    return true;
}

/* Report a failed lease with SPLIT_FAILED (called without ms->mu). The
 * master counts it and leases the split again (to anyone), skips it, or
 * fails the job (then this worker has nothing left to do). @return false
 * on a connection problem (retry). */
static bool report_failure(sl_worker_lease_client_t *ms, lease_t *l) SL_EXCLUDES(ms->mu)
{
    char job[sizeof ms->job_id];
    sl_mutex_lock(&ms->mu);
    snprintf(job, sizeof job, "%s", ms->job_id);
    sl_mutex_unlock(&ms->mu);
    Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT;
    dpp_lease_fill_ref(&ref, job, l);
    /* a lease of the deterministic order failed on a transform thread may
     * have batches held for their base: freed, or the server never ends */
    sl_mutex_lock(&ms->mu);
    sl_worker_t *w = l->order_ranks ? ms->worker : NULL;
    sl_mutex_unlock(&ms->mu);
    if (w) sl_worker_order_drop(w, l);
    Sluice__Control__SplitFailed sf = SLUICE__CONTROL__SPLIT_FAILED__INIT;
    sf.ref = &ref;
    sf.file = l->path;
    sf.stripe = l->fail_stripe;
    sf.message = l->fail_msg ? l->fail_msg : "";
    sf.code = l->fail_code;
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    sl_log_kv(SL_LOG_WARN, SL_EV(SPLIT_FAILED),
              (SL_KV_STR("job", job), SL_KV_U64("split", l->split), SL_KV_STR("file", l->path),
               SL_KV_I64("stripe", l->fail_stripe), SL_KV_STR("error", sf.message)),
              "split %u of %s cannot be read, reported to the master: %s", l->split, l->path,
              sf.message);
    sl_err_t rc = dpp_lease_call(ms, SL_RPC_SPLIT_FAILED, &sf.base, "split failed",
                                 SL_RPC_SPLIT_FAILED_REPLY, &f, &err);
    if (rc) {
        sl_log_kv(SL_LOG_WARN, SL_EV(SPLIT_FAILED_REPORT_FAILED),
                  (SL_KV_U64("split", l->split), SL_KV_STR("error", err.msg)), "%s", err.msg);
        return false;
    }
    const Sluice__Control__SplitFailedReply *r = (const Sluice__Control__SplitFailedReply *)f.msg;
    sl_mutex_lock(&ms->mu);
    l->fail_reported = true;
    l->reporting = false;
    if (r->state == SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__JOB_FAILED)
        ms->stop = ms->st.stop = true; /* the job is over: finish what is held and exit */
    if (dpp_lease_gone(l)) dpp_lease_remove(ms, l);
    pthread_cond_broadcast(&ms->cv);
    sl_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
    return true;
}

/* Send SPLIT_FAILED for every failed lease not reported yet. @return false
 * when a report failed (the connection is down: try again later). */
static bool report_failures(sl_worker_lease_client_t *ms) SL_EXCLUDES(ms->mu)
{
    for (;;) {
        sl_mutex_lock(&ms->mu);
        lease_t *l = ms->leases;
        while (l && !(l->failed && !l->fail_reported && !l->reporting))
            l = l->next;
        if (l) l->reporting = true;
        sl_mutex_unlock(&ms->mu);
        if (!l) return true;
        if (!report_failure(ms, l)) {
            sl_mutex_lock(&ms->mu);
            l->reporting = false;
            sl_mutex_unlock(&ms->mu);
            return false;
        }
    }
}

/* A count not sent yet (the deterministic order)? */
static bool count_pending(const lease_t *l)
{
    return l->order_ranks && l->counted && !l->count_sent && !l->revoked && !l->failed;
}

/* Send SPLIT_READ for every lease ready for it; counts_first: not for one
 * whose count has not gone in a heartbeat yet (it goes first, so the
 * master learns it before the split read). @return false when a report
 * failed (the connection is down: try again later). */
static bool report_ready(sl_worker_lease_client_t *ms, bool counts_first) SL_EXCLUDES(ms->mu)
{
    for (;;) {
        sl_mutex_lock(&ms->mu);
        lease_t *l = ms->leases;
        while (l && (!dpp_lease_ready(l) || (counts_first && count_pending(l))))
            l = l->next;
        if (l) l->reporting = true;
        sl_mutex_unlock(&ms->mu);
        if (!l) return true;
        bool ok = report(ms, l);
        if (!ok) {
            sl_mutex_lock(&ms->mu);
            l->reporting = false;
            sl_mutex_unlock(&ms->mu);
            return false;
        }
    }
}

static void counts_free(sl_worker_lease_client_t *ms, Sluice__Control__SplitCount *cnt,
                        Sluice__Control__SplitCount **cntp, size_t cap)
{
    if (cnt) sl_free(ms->a, cnt, cap * sizeof *cnt);
    if (cntp) sl_free(ms->a, cntp, cap * sizeof *cntp);
}

/* Is a count waiting to go in a heartbeat (the deterministic order)? */
static bool count_unsent(sl_worker_lease_client_t *ms) SL_REQUIRES(ms->mu)
{
    for (lease_t *l = ms->leases; l; l = l->next)
        if (count_pending(l)) return true;
    return false;
}

/* Count the cache files of leases forgotten without a SPLIT_READ (their
 * names queued by dpp_lease_remove); the splits among them with no file
 * go in this heartbeat's cache_evicted. Outside ms->mu: a stat each, and
 * the evictions they cause unlink files. */
static void settle_untold(sl_worker_lease_client_t *ms) SL_EXCLUDES(ms->mu)
{
    sl_mutex_lock(&ms->mu);
    char **names = ms->untold;
    uint32_t n = ms->nuntold, cap = ms->untold_cap;
    ms->untold = NULL;
    ms->nuntold = ms->untold_cap = 0;
    sl_mutex_unlock(&ms->mu);
    for (uint32_t i = 0; i < n; i++) {
        (void)dpp_cache_dir_settle_untold(ms->cache, names[i]);
        sl_strfree(ms->a, names[i]);
    }
    if (names) sl_free(ms->a, names, (size_t)cap * sizeof *names);
}

/* last: the worker is leaving; its final figures must reach the master
 * (`jobs show` after a job), and a master that is gone is no warning. */
static void heartbeat(sl_worker_lease_client_t *ms, bool last) SL_EXCLUDES(ms->mu)
{
    settle_untold(ms);
    sl_mutex_lock(&ms->mu);
    sl_worker_t *w = ms->worker;
    bool figures = w != NULL || (last && ms->have_final);
    sl_worker_stats_t st = {0};
    if (w == NULL && figures) st = ms->final_st;
    sl_mutex_unlock(&ms->mu);
    Sluice__Control__Heartbeat hb = SLUICE__CONTROL__HEARTBEAT__INIT;
    Sluice__Control__CacheFigures cf = SLUICE__CONTROL__CACHE_FIGURES__INIT;
    hb.worker_id = ms->worker_id;
    uint64_t now = sl_clock_ns();
    if (figures) {
        /* busy: the busier of the reader (read, filter, batch; per lane
         * when stripe lanes read) and the transform threads (dedup,
         * transform, encode, per thread) */
        if (w) sl_worker_stats(w, &st);
        uint64_t rd = st.read_ns + st.filter_ns;
        uint64_t xf = st.dedup_ns + st.transform_ns + st.encode_ns;
        /* over half a period at least: an early heartbeat (a base
         * awaited) a few ms after the last sends the busy fraction of the
         * last measured interval rather than a noisy one of its own */
        uint64_t period_ns = (ms->heartbeat_ms ? ms->heartbeat_ms : 1000) * 1000000ull;
        bool measure = !ms->hb_at_ns || now >= ms->hb_at_ns + period_ns / 2;
        if (ms->hb_at_ns && measure) {
            double dt = (double)(now - ms->hb_at_ns);
            double br = (double)(rd - ms->hb_reader_ns) / (dt * (st.lanes ? st.lanes : 1));
            double bx = (double)(xf - ms->hb_xform_ns) / (dt * (st.threads ? st.threads : 1));
            double b = br > bx ? br : bx;
            ms->hb_busy = b < 0 ? 0 : b > 1 ? 1 : b;
        }
        hb.busy_fraction = ms->hb_busy;
        if (measure) {
            ms->hb_at_ns = now;
            ms->hb_reader_ns = rd;
            ms->hb_xform_ns = xf;
        }
        hb.queued_batches = st.server.ready;
        hb.memory_used = st.memory_used;
        hb.batches_sent = st.server.batches_sent;
        hb.samples_sent = st.server.samples_acked;
        hb.bytes_encoded = st.bytes_encoded;
        hb.bytes_expanded = st.bytes_expanded;
        /* what shared passes saved: the copies served to other jobs, each
         * worth a batch's pipeline time (read to encode) */
        hb.shared_batches = st.server.shared_batches;
        hb.shared_bytes = st.server.shared_bytes;
        uint64_t pipeline = rd + xf;
        hb.shared_cpu_ns = st.batches ? (uint64_t)((double)pipeline / (double)st.batches *
                                                   (double)st.server.shared_batches)
                                      : 0;
        cache_figures(&st, &cf);
        hb.cache = &cf;
    }
    /* cache files removed for room since the last heartbeat (a bounded
     * number a beat; the rest go with the next) */
    dpp_cache_evicted_t gone[64];
    Sluice__Control__CachedSplit cs[64], *csp[64];
    uint32_t ngone = dpp_cache_dir_evicted(ms->cache, gone, 64);
    for (uint32_t i = 0; i < ngone; i++) {
        sluice__control__cached_split__init(&cs[i]);
        cs[i].prefix_fingerprint = gone[i].fp;
        cs[i].split = gone[i].split;
        csp[i] = &cs[i];
    }
    hb.n_cache_evicted = ngone;
    hb.cache_evicted = csp;
    /* The connection first, then the list: a LEASE_REQUEST holds the
     * connection until its lease is linked, and it may wait as long as the
     * master's journal sync; a list taken before that wait would leave
     * the new lease unnamed by this heartbeat, and the next comes a period
     * later (docs/DESIGN.md, lease liveness). Nothing else is waited for
     * with the connection held. */
    held_t h;
    sl_mutex_lock(&ms->conn_mu);
    sl_mutex_lock(&ms->mu);
    bool ok = dpp_lease_held_collect(ms, &h);
    /* the deterministic order's counts not sent yet, of leases named (in
     * h's order); marked sent now: a count lost with a failed heartbeat
     * still goes in the lease's SPLIT_READ */
    Sluice__Control__SplitCount *cnt = ok && h.cap ? sl_calloc(ms->a, h.cap, sizeof *cnt) : NULL;
    Sluice__Control__SplitCount **cntp = cnt ? sl_calloc(ms->a, h.cap, sizeof *cntp) : NULL;
    size_t ncnt = 0, k = 0;
    for (lease_t *l = ms->leases; l; l = l->next) {
        if (l->revoked) continue;
        if (count_pending(l)) {
            if (cntp && k < h.n) { /* else (out of memory) SPLIT_READ alone tells */
                sluice__control__split_count__init(&cnt[ncnt]);
                cnt[ncnt].ref = &h.refs[k];
                cnt[ncnt].batches = l->order_batches;
                cntp[ncnt] = &cnt[ncnt];
                ncnt++;
            }
            l->count_sent = true;
        }
        k++;
    }
    sl_mutex_unlock(&ms->mu);
    if (!ok) { /* the next heartbeat tries again, before the leases expire */
        sl_mutex_unlock(&ms->conn_mu);
        dpp_lease_held_free(ms, &h);
        counts_free(ms, cnt, cntp, h.cap);
        sl_log(SL_LOG_WARN, SL_EV(HEARTBEAT_FAILED), "heartbeat: out of memory");
        return;
    }
    hb.n_leases = h.n;
    hb.leases = h.ptrs;
    hb.n_counts = ncnt;
    hb.counts = cntp;
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    sl_err_t rc = dpp_lease_call_locked(ms, SL_RPC_HEARTBEAT, &hb.base, "heartbeat",
                                        SL_RPC_HEARTBEAT_REPLY, &f, &err);
    sl_mutex_unlock(&ms->conn_mu);
    dpp_lease_held_free(ms, &h);
    counts_free(ms, cnt, cntp, h.cap);
    if (rc) {
        sl_log_kv(last ? SL_LOG_DEBUG : SL_LOG_WARN, SL_EV(HEARTBEAT_FAILED),
                  (SL_KV_STR("error", err.msg)), "%s", err.msg);
        return;
    }
    const Sluice__Control__HeartbeatReply *r = (const Sluice__Control__HeartbeatReply *)f.msg;
    /* the deterministic order's news for the worker's server, told
     * outside ms->mu (its locks come before ours), each lease pinned */
    size_t ntell = 0, cap_tell = r->n_bases + r->n_revoked;
    order_news_t *tell = cap_tell ? sl_calloc(ms->a, cap_tell, sizeof *tell) : NULL;
    if (cap_tell && !tell) {
        /* out of memory: the reply is not taken at all (a revoked lease's
         * held batches must be dropped); the leases are still named, so
         * the next heartbeat's reply says it all again */
        sl_log_kv(SL_LOG_WARN, SL_EV(HEARTBEAT_FAILED), (SL_KV_STR("error", "out of memory")),
                  "heartbeat reply: out of memory, left for the next one");
        sl_rpc_frame_free(&f);
        return;
    }
    sl_mutex_lock(&ms->mu);
    ms->st.heartbeats++;
    for (size_t i = 0; i < r->n_bases; i++) {
        const Sluice__Control__SplitBase *b = r->bases[i];
        if (!b || !b->ref) continue;
        for (lease_t *l = ms->leases; l && ntell < cap_tell; l = l->next)
            if (!l->revoked && l->order_ranks && l->split == b->ref->split &&
                l->epoch == b->ref->epoch && l->generation == b->ref->generation &&
                (!l->job || (b->ref->job_id && strcmp(l->job, b->ref->job_id) == 0))) {
                l->base_plus_one = b->first_g + 1;
                l->pins++;
                tell[ntell++] = (order_news_t){l, b->first_g, false};
                break;
            }
    }
    for (size_t i = 0; i < r->n_revoked; i++) {
        const Sluice__Control__SplitRef *v = r->revoked[i];
        lease_t *l = ms->leases;
        while (l) {
            lease_t *next = l->next;
            if (!l->revoked && l->split == v->split && l->epoch == v->epoch &&
                l->generation == v->generation) {
                l->revoked = true;
                ms->st.revoked++;
                sl_log_kv(SL_LOG_INFO, SL_EV(LEASE_REVOKED),
                          (SL_KV_STR("job", ms->job_id), SL_KV_U64("split", l->split),
                           SL_KV_U64("epoch", l->epoch), SL_KV_U64("generation", l->generation)),
                          "job %s split %u epoch %u: the master took the lease back; its "
                          "batches not sent yet are dropped",
                          ms->job_id, l->split, l->epoch);
                if (l->order_ranks && ntell < cap_tell) { /* one lease a reference */
                    l->pins++;                            /* its held batches go before it may */
                    tell[ntell++] = (order_news_t){l, 0, true};
                }
                /* nobody holds it any more: not handed, or read and retired */
                if (dpp_lease_gone(l)) dpp_lease_remove(ms, l);
            }
            l = next;
        }
    }
    if (r->stop && !ms->stop)
        sl_log_kv(SL_LOG_INFO, SL_EV(RETIRED), (SL_KV_STR("job", ms->job_id)),
                  "the master retired this worker of job %s: it finishes what it holds and "
                  "exits",
                  ms->job_id);
    if (r->stop) ms->stop = ms->st.stop = true;
    w = ms->worker; /* valid while this thread runs (src_cancel joins it) */
    pthread_cond_broadcast(&ms->cv);
    sl_mutex_unlock(&ms->mu);
    sl_rpc_frame_free(&f);
    for (size_t i = 0; i < ntell && w; i++) {
        sl_error_t e = {0};
        if (tell[i].drop)
            sl_worker_order_drop(w, tell[i].l);
        else if (sl_worker_order_base(w, tell[i].l, tell[i].base, &e))
            sl_worker_fail(w, e.code ? e.code : SL_ERR_INVALID, e.msg); /* two bases: broken */
    }
    if (!tell) return;
    sl_mutex_lock(&ms->mu);
    for (size_t i = 0; i < ntell; i++) {
        lease_t *l = tell[i].l;
        l->pins--;
        if (dpp_lease_gone(l)) dpp_lease_remove(ms, l);
    }
    pthread_cond_broadcast(&ms->cv);
    sl_mutex_unlock(&ms->mu);
    sl_free(ms->a, tell, cap_tell * sizeof *tell);
}

/* A heartbeat now, and the next one a period later (last_hb, next_hb:
 * the control loop's clock of them). */
static void beat_now(sl_worker_lease_client_t *ms, uint64_t *last_hb, uint64_t *next_hb)
    SL_REQUIRES(ms->mu)
{
    uint64_t period = ms->heartbeat_ms ? ms->heartbeat_ms : 1000;
    sl_mutex_unlock(&ms->mu);
    heartbeat(ms, false);
    sl_mutex_lock(&ms->mu);
    *last_hb = sl_clock_ns();
    *next_hb = *last_hb + period * 1000000ull;
}

/* Is a lease of the deterministic order being read with its base not
 * known yet (its batches held for it)? */
static bool awaits_base(sl_worker_lease_client_t *ms) SL_REQUIRES(ms->mu)
{
    for (lease_t *l = ms->leases; l; l = l->next)
        if (l->order_ranks && l->handed && !l->base_plus_one && !l->revoked && !l->failed)
            return true;
    return false;
}

void *dpp_lease_control_main(void *arg)
{
    sl_worker_lease_client_t *ms = arg;
    pthread_setname_np(pthread_self(), "sl-w-control");
    uint64_t next_hb = 0; /* at once */
    uint64_t last_hb = 0; /* when the last heartbeat went (0: an early one may go now) */
    uint64_t retry_at = 0;
    sl_mutex_lock(&ms->mu);
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
            sl_mutex_unlock(&ms->mu);
            if (w) sl_worker_fail(w, code, msg);
            return NULL;
        }
        uint64_t now = sl_clock_ns();
        /* a split cut whole: its count goes at once, before anything else
         * (the next split's base comes back in the reply), not after its
         * batches' commits; heartbeat() marks it sent, so this never spins */
        if (count_unsent(ms)) {
            beat_now(ms, &last_hb, &next_hb);
            continue;
        }
        /* a shared pass stuck behind its own job's trainers must not hold
         * the other jobs' leases: watched a few times a second */
        bool watch = dpp_lease_release_stalled(ms, now);
        bool ready = false;
        for (lease_t *l = ms->leases; l && !ready; l = l->next)
            ready = dpp_lease_ready(l) || (l->failed && !l->fail_reported && !l->reporting);
        if (ready && now >= retry_at) {
            sl_mutex_unlock(&ms->mu);
            /* failures first: the master may lease the split to another worker at once */
            if (!report_failures(ms) || !report_ready(ms, true))
                retry_at = sl_clock_ns() + 200000000ull;
            else
                last_hb = 0; /* a split counted: the next one's base may be known now */
            sl_mutex_lock(&ms->mu);
            continue;
        }
        /* the deterministic order: a split being read whose base is not
         * known yet holds its batches until a heartbeat reply tells it, and
         * the base is known as soon as the split before it is counted (here
         * or on another worker); so ask early, at most every ORDER_POLL_NS,
         * rather than one split per heartbeat period */
        uint64_t due = next_hb;
        if (awaits_base(ms) && last_hb + ORDER_POLL_NS < due) due = last_hb + ORDER_POLL_NS;
        if (now >= due) {
            beat_now(ms, &last_hb, &next_hb);
            continue;
        }
        uint64_t until = due;
        if (ready && retry_at < until) until = retry_at;
        if (watch && now + STALL_CHECK_NS < until) until = now + STALL_CHECK_NS;
        sl_clock_cond_wait_ms(&ms->cv, &ms->mu, (until - now) / 1000000ull + 1);
    }
    sl_mutex_unlock(&ms->mu);
    /* last words: failures, leases whose batches are all acknowledged, and
     * the figures since the last heartbeat (a job shorter than one period
     * would otherwise show none of its work on the master) */
    report_failures(ms);
    report_ready(ms, false);
    sl_mutex_lock(&ms->mu);
    bool refused = ms->fatal != SL_OK;
    sl_mutex_unlock(&ms->mu);
    if (!refused) heartbeat(ms, true);
    return NULL;
}

/* The lease client (lease_client.h): the leases a worker holds, the split
 * source the worker's reader consumes (source.h) with its lease hooks,
 * and the client's start and end. The control connection is in
 * lease_conn.c, the control thread in lease_control.c; the rules for the
 * two locks are in lease_client_internal.h. */
#include "dpp/worker/lease/lease_client.h"

#include <inttypes.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log_events.h"
#include "dpp/worker/lease/lease_client_internal.h"
#include "rpc/auth.h"

#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_MAX_TODO 65536
#define DEFAULT_SHARE_WINDOW 64
#define DEFAULT_SHARE_STALL_MS 5000

void dpp_lease_free(sl_worker_lease_client_t *ms, lease_t *l)
{
    if (!l) return;
    sl_strfree(ms->a, l->path);
    sl_strfree(ms->a, l->kafka_topic);
    sl_strfree(ms->a, l->cache_file);
    sl_strfree(ms->a, l->cache_name);
    if (l->todo) sl_free(ms->a, l->todo, (size_t)l->num_todo * sizeof *l->todo);
    if (l->empty) sl_free(ms->a, l->empty, (size_t)l->num_empty * sizeof *l->empty);
    if (l->skip) sl_free(ms->a, l->skip, (size_t)l->num_skip * sizeof *l->skip);
    sl_strfree(ms->a, l->fail_msg);
    sl_strfree(ms->a, l->job);
    sl_free(ms->a, l, sizeof *l);
}

bool dpp_lease_ready(const lease_t *l)
{
    if (l->outstanding || l->revoked || l->reporting) return false;
    /* no copy can come to it any more (src_members): what it did not get
     * stays to do, whatever its primary still reads */
    if (l->detached || l->released) return true;
    return l->read_done && (!l->primary || l->primary->unpushed == 0);
}

bool dpp_lease_gone(const lease_t *l)
{
    return l->revoked && !l->reporting && l->pins == 0 &&
           (!l->handed || (l->read_done && l->outstanding == 0)) &&
           (!l->failed || l->fail_reported);
}

void dpp_lease_remove(sl_worker_lease_client_t *ms, lease_t *l)
{
    /* a shared pass's links go first: a member outlives its primary when
     * its job's trainers are slower, and the other way round. A member not
     * read yet (its primary was revoked before the reader took it) gets no
     * more copies: released, it reports what it got. */
    for (lease_t *e = l->members; e; e = e->member_next) {
        e->primary = NULL;
        if (!e->read_done && !e->detached) e->released = true;
    }
    if (l->members) pthread_cond_broadcast(&ms->cv);
    if (l->primary)
        for (lease_t **pp = &l->primary->members; *pp; pp = &(*pp)->member_next)
            if (*pp == l) {
                *pp = l->member_next;
                break;
            }
    for (lease_t **pp = &ms->leases; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    /* a cache file this lease may have written (a WRITE lease revoked once
     * its batches were made: the file is whole) counts against the limit
     * too; out of memory: not counted, as before the worker exits */
    if (l->cache_local && l->cache_name && !l->cache_told &&
        SL_GROW(ms->a, ms->untold, ms->untold_cap, ms->nuntold + 1, 8)) {
        ms->untold[ms->nuntold++] = l->cache_name;
        l->cache_name = NULL;
    }
    dpp_lease_free(ms, l);
    ms->st.leases_held--;
}

/* ---- split source callbacks ---- */

static sl_err_t src_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = NULL;
    SL_FORWARD_IF_ERROR(dpp_lease_get(ms, 0, true, &l, err));
    sl_mutex_lock(&ms->mu);
    uint64_t base_plus_one = l->base_plus_one; /* a heartbeat may have told it since */
    sl_mutex_unlock(&ms->mu);
    *out = (sl_worker_work_t){.split = &l->sp,
                              .epoch = l->epoch,
                              .split_id = l->split,
                              .lease = l,
                              .todo = l->todo,
                              .num_todo = l->num_todo,
                              .generation = l->generation,
                              .rank_plus_one = l->rank_plus_one,
                              .kafka_topic = l->kafka_topic,
                              .kafka_partition = l->kafka_partition,
                              .cache_file = l->cache_file,
                              .cache_mode = l->cache_file ? l->cache_mode : SL_WORKER_CACHE_NONE,
                              .order_ranks = l->order_ranks,
                              .order_base_plus_one = base_plus_one,
                              .order_skip = l->skip,
                              .order_skip_count = l->num_skip};
    return SL_OK;
}

static void src_counted(void *ctx, void *lease, uint64_t batches)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = lease;
    sl_mutex_lock(&ms->mu);
    l->counted = true;
    l->order_batches = batches;
    pthread_cond_broadcast(&ms->cv); /* the control thread sends the count at once */
    sl_mutex_unlock(&ms->mu);
}

/* Under ms->mu: primary l is read; so are its members, with its empty
 * ranges (the same plan over the same todo leaves the same rows without a
 * sample: filtered out, a drop_last remainder -- never rows that went
 * into a batch). A detached or released member reports none: what it did
 * not get stays uncommitted, and the master leases it again. */
static void members_read(sl_worker_lease_client_t *ms, lease_t *l) SL_REQUIRES(ms->mu)
{
    lease_t *e = l->members;
    while (e) {
        lease_t *next = e->member_next;
        e->read_done = true;
        if (!e->detached && !e->released && !l->revoked && l->num_empty && !e->revoked) {
            e->empty = sl_alloc(ms->a, (size_t)l->num_empty * sizeof *e->empty);
            if (e->empty) {
                memcpy(e->empty, l->empty, (size_t)l->num_empty * sizeof *e->empty);
                e->num_empty = l->num_empty;
            } else {
                e->revoked = true; /* it expires on the master and is read again */
            }
        }
        if (dpp_lease_gone(e)) dpp_lease_remove(ms, e);
        e = next;
    }
    pthread_cond_broadcast(&ms->cv);
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
    sl_mutex_lock(&ms->mu);
    l->read_done = true;
    l->progress_ns = sl_clock_ns();
    if (num_empty && !e) {
        /* Out of memory: without its empty ranges the split cannot be
         * reported; dropping the lease lets it expire and be read again. */
        l->revoked = true;
    } else {
        l->empty = e;
        l->num_empty = num_empty;
    }
    members_read(ms, l);
    if (dpp_lease_gone(l))
        dpp_lease_remove(ms, l);
    else
        pthread_cond_broadcast(&ms->cv);
    sl_mutex_unlock(&ms->mu);
}

static void src_made(void *ctx, void *lease)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = lease;
    sl_mutex_lock(&ms->mu);
    l->outstanding++;
    if (l->members) l->unpushed++;
    sl_mutex_unlock(&ms->mu);
}

static bool src_live(void *ctx, void *lease)
{
    sl_worker_lease_client_t *ms = ctx;
    sl_mutex_lock(&ms->mu);
    bool live = !((lease_t *)lease)->revoked;
    sl_mutex_unlock(&ms->mu);
    return live;
}

static void src_retire(void *ctx, void *lease, bool acked)
{
    (void)acked;
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = lease;
    sl_mutex_lock(&ms->mu);
    /* a member's copies: their bytes go by the average (all of them with
     * the last) */
    if (l->outstanding) l->copy_bytes -= l->copy_bytes / l->outstanding;
    if (l->outstanding) l->outstanding--;
    if (l->outstanding == 0 && l->read_done) {
        if (dpp_lease_gone(l))
            dpp_lease_remove(ms, l);
        else
            pthread_cond_broadcast(&ms->cv); /* the control thread reports it */
    }
    sl_mutex_unlock(&ms->mu);
}

/* Under ms->mu: a batch of l reached the server, or was dropped before:
 * its pass moved. */
static void pushed(sl_worker_lease_client_t *ms, lease_t *l) SL_REQUIRES(ms->mu)
{
    l->progress_ns = sl_clock_ns();
    if (l->unpushed && --l->unpushed == 0) pthread_cond_broadcast(&ms->cv);
}

/* A batch of lease dropped before it reached the server (source.h). */
static void src_dropped(void *ctx, void *lease)
{
    sl_worker_lease_client_t *ms = ctx;
    sl_mutex_lock(&ms->mu);
    pushed(ms, lease);
    sl_mutex_unlock(&ms->mu);
    src_retire(ctx, lease, false);
}

/* Under ms->mu: the batches of job's shared passes on this worker not
 * retired yet (every member lease of it), and their bytes. */
static uint64_t job_behind(const sl_worker_lease_client_t *ms, const char *job, uint64_t *bytes)
    SL_REQUIRES(ms->mu)
{
    uint64_t n = 0;
    *bytes = 0;
    for (const lease_t *l = ms->leases; l; l = l->next)
        if (l->job && strcmp(l->job, job) == 0) {
            n += l->outstanding;
            *bytes += l->copy_bytes;
        }
    return n;
}

/* The members of a shared pass that get a copy of lease's batch now: those
 * not revoked or detached; one whose job has share_window batches of this
 * worker's shared passes not retired, or copies holding a quarter of the
 * memory limit (large batches: the budget would fill before the window
 * and stall the pass), is detached instead (its job fell behind: it goes
 * on alone). */
static uint32_t src_members(void *ctx, void *lease, uint64_t bytes, sl_worker_lease_member_t *out,
                            uint32_t cap)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = lease;
    uint32_t n = 0;
    uint32_t window = ms->o.share_window ? ms->o.share_window : DEFAULT_SHARE_WINDOW;
    sl_mutex_lock(&ms->mu);
    pushed(ms, l);
    for (lease_t *e = l->members; e && n < cap; e = e->member_next) {
        if (e->revoked || e->detached || e->released) continue;
        uint64_t held, behind = job_behind(ms, e->job, &held);
        if (behind >= window || (ms->share_bytes_max && held + bytes > ms->share_bytes_max)) {
            e->detached = true;
            ms->st.shares_detached++;
            sl_log_kv(SL_LOG_INFO, SL_EV(SHARE_DETACHED),
                      (SL_KV_STR("job", e->job), SL_KV_U64("split", e->split),
                       SL_KV_U64("epoch", e->epoch), SL_KV_U64("batches", behind),
                       SL_KV_U64("bytes", held), SL_KV_U64("window", window)),
                      "job %s split %u epoch %u: %" PRIu64 " batches (%" PRIu64
                      " bytes) of its shared passes not acknowledged, it stops sharing this pass",
                      e->job, e->split, e->epoch, behind, held);
            pthread_cond_broadcast(&ms->cv); /* it may be ready for its report now */
            continue;
        }
        e->outstanding++;
        e->copy_bytes += bytes;
        out[n++] = (sl_worker_lease_member_t){e, e->job, e->generation};
    }
    sl_mutex_unlock(&ms->mu);
    return n;
}

bool dpp_lease_release_stalled(sl_worker_lease_client_t *ms, uint64_t now_ns)
{
    bool watch = false;
    for (lease_t *l = ms->leases; l; l = l->next) {
        bool live = false;
        for (lease_t *e = l->members; e && !live; e = e->member_next)
            live = !e->detached && !e->released && !e->revoked;
        /* read and queued whole: every copy exists, nothing to wait for */
        if (!live || (l->read_done && l->unpushed == 0)) continue;
        if (now_ns - l->progress_ns < ms->share_stall_ns) {
            watch = true;
            continue;
        }
        for (lease_t *e = l->members; e; e = e->member_next) {
            if (e->detached || e->released || e->revoked) continue;
            e->released = true;
            ms->st.shares_released++;
            sl_log_kv(SL_LOG_INFO, SL_EV(SHARE_RELEASED),
                      (SL_KV_STR("job", e->job), SL_KV_U64("split", e->split),
                       SL_KV_U64("epoch", e->epoch), SL_KV_STR("with", ms->job_id),
                       SL_KV_U64("stalled_ms", (now_ns - l->progress_ns) / 1000000u)),
                      "job %s split %u epoch %u: job %s's pass of it has not moved for %" PRIu64
                      " ms (its trainers do not take its batches, or its read is that slow): it "
                      "goes on without this pass",
                      e->job, e->split, e->epoch, ms->job_id, (now_ns - l->progress_ns) / 1000000u);
        }
        pthread_cond_broadcast(&ms->cv);
    }
    return watch;
}

static void src_failed(void *ctx, void *lease, sl_err_t code, int32_t stripe, const char *msg)
{
    sl_worker_lease_client_t *ms = ctx;
    lease_t *l = lease;
    sl_mutex_lock(&ms->mu);
    for (lease_t *e = l->members; e; e = e->member_next)
        e->revoked = true; /* not heartbeated: they expire, and another worker reads them */
    if (!l->failed) {
        l->failed = true;
        l->revoked = true; /* not live: its batches still queued are dropped unsent */
        l->fail_code = code;
        l->fail_stripe = stripe;
        l->fail_msg = sl_strdup(ms->a, msg ? msg : ""); /* NULL: reported as "" */
        ms->st.splits_failed++;
        pthread_cond_broadcast(&ms->cv); /* the control thread reports it */
    }
    sl_mutex_unlock(&ms->mu);
}

/* Asked from the reader at a stream's head (source.h other_work): at most
 * every OTHER_ASK_MS, so that a worker at the heads of idle partitions
 * does not flood the master with lease requests. */
#define OTHER_ASK_MS 200
static bool src_other_work(void *ctx)
{
    sl_worker_lease_client_t *ms = ctx;
    uint64_t now = sl_clock_ns();
    if (now < ms->other_ask_ns) return false;
    ms->other_ask_ns = now + OTHER_ASK_MS * 1000000ull;
    return dpp_lease_more(ms);
}

static void src_cancel(void *ctx)
{
    sl_worker_lease_client_t *ms = ctx;
    /* From sl_worker_stop, which holds none of the worker's locks: its
     * figures now are what the master must get last. */
    sl_mutex_lock(&ms->mu);
    sl_worker_t *w = ms->cancel ? NULL : ms->worker;
    sl_mutex_unlock(&ms->mu);
    sl_worker_stats_t st;
    if (w) sl_worker_stats(w, &st);
    sl_mutex_lock(&ms->mu);
    if (w) {
        ms->final_st = st;
        ms->have_final = true;
    }
    ms->cancel = true;
    ms->worker = NULL;
    pthread_cond_broadcast(&ms->cv);
    sl_mutex_unlock(&ms->mu);
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
                                .lease_members = src_members,
                                .lease_dropped = src_dropped,
                                .lease_counted = src_counted,
                                .other_work = src_other_work,
                                .ctx = ms};
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
    ms->share_stall_ns =
        (uint64_t)(ms->o.share_stall_ms ? ms->o.share_stall_ms : DEFAULT_SHARE_STALL_MS) *
        1000000ull;
    ms->fd = -1;
    if (getrandom(&ms->incarnation, sizeof ms->incarnation, 0) != sizeof ms->incarnation)
        ms->incarnation = (uint64_t)sl_clock_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    if (ms->incarnation == 0) ms->incarnation = 1; /* 0: "not told" to the master */
    sl_mutex_init(&ms->conn_mu);
    sl_mutex_init(&ms->mu);
    sl_clock_cond_init(&ms->cv);
    ms->master = sl_strdup(a, opts->master);
    ms->worker_id = sl_strdup(a, opts->worker_id);
    ms->serve_address = sl_strdup(a, opts->serve_address);
    ms->admin_address = sl_strdup(a, opts->admin_address ? opts->admin_address : "");
    ms->secret = sl_strdup(NULL, opts->cluster_secret);
    ms->o.cluster_secret = NULL; /* ms->secret is the copy */
    if (opts->job_id) snprintf(ms->job_id, sizeof ms->job_id, "%s", opts->job_id);
    snprintf(ms->st.job_id, sizeof ms->st.job_id, "%s", ms->job_id);
    sl_err_t rc;
    if (!ms->master || !ms->worker_id || !ms->serve_address || !ms->admin_address ||
        (opts->cluster_secret && !ms->secret)) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "master source: out of memory");
        goto fail;
    }
    /* before REGISTER, which says whether this worker keeps cache files */
    if (opts->cache_dir != NULL && (rc = dpp_cache_dir_open(opts->cache_dir, opts->cache_max_bytes,
                                                            a, &ms->cache, err)) != SL_OK)
        goto fail;
    ms->o.cache_dir = NULL; /* borrowed for the call: ms->cache has it */
    sl_mutex_lock(&ms->conn_mu);
    rc = dpp_lease_connect(ms, err);
    sl_mutex_unlock(&ms->conn_mu);
    if (rc) goto fail;
    if (pthread_create(&ms->thread, NULL, dpp_lease_control_main, ms) != 0) {
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
    uint64_t deadline = timeout_ms < 0 ? 0 : sl_clock_ns() + (uint64_t)timeout_ms * 1000000ull + 1;
    lease_t *l = NULL;
    sl_mutex_lock(&ms->mu);
    bool have = ms->spec_json != NULL;
    sl_mutex_unlock(&ms->mu);
    if (!have) {
        SL_FORWARD_IF_ERROR(dpp_lease_get(ms, deadline, false, &l, err));
    }
    *job_id = ms->job_id;
    *spec_json = ms->spec_json;
    return SL_OK;
}

void sl_worker_lease_client_attach(sl_worker_lease_client_t *ms, sl_worker_t *w)
{
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    sl_mutex_lock(&ms->mu);
    ms->share_bytes_max = st.memory_limit / 4;
    if (!ms->cancel) ms->worker = w;
    sl_mutex_unlock(&ms->mu);
}

void sl_worker_lease_client_stats(sl_worker_lease_client_t *ms, sl_worker_lease_client_stats_t *out)
{
    sl_mutex_lock(&ms->mu);
    *out = ms->st;
    out->lease_timeout_ms = ms->lease_timeout_ms;
    out->heartbeat_ms = ms->heartbeat_ms;
    sl_mutex_unlock(&ms->mu);
    dpp_cache_dir_stats(ms->cache, &out->cache_files, &out->cache_bytes, &out->cache_evicted);
}

void sl_worker_lease_client_destroy(sl_worker_lease_client_t *ms)
{
    if (!ms) return;
    src_cancel(ms);
    while (ms->leases) {
        lease_t *l = ms->leases;
        ms->leases = l->next;
        dpp_lease_free(ms, l);
    }
    sl_mutex_lock(&ms->conn_mu); /* nobody else is left: the rule, not a wait */
    dpp_lease_disconnect(ms);
    sl_mutex_unlock(&ms->conn_mu);
    sl_strfree(ms->a, ms->master);
    sl_strfree(ms->a, ms->worker_id);
    sl_strfree(ms->a, ms->serve_address);
    sl_strfree(ms->a, ms->admin_address);
    sl_strfree(ms->a, ms->spec_json);
    for (uint32_t i = 0; i < ms->nuntold; i++)
        sl_strfree(ms->a, ms->untold[i]);
    if (ms->untold) sl_free(ms->a, ms->untold, (size_t)ms->untold_cap * sizeof *ms->untold);
    dpp_cache_dir_destroy(ms->cache);
    sl_rpc_secret_free(ms->secret);
    sl_mutex_destroy(&ms->conn_mu);
    sl_mutex_destroy(&ms->mu);
    pthread_cond_destroy(&ms->cv);
    sl_free(ms->a, ms, sizeof *ms);
}

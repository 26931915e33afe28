/* The DPP worker (worker.h): its lifecycle (start: the job's source, plan,
 * budget, server and threads; wait, stop, failure, destroy), the memory
 * budget the stages share, and the warehouse readers' hook into it. The
 * transform threads (dedup, transform, encode) are in xform.c, the
 * statistics in stats.c, the reader thread (read, filter, batch) in
 * reader.c, the split sources behind source.h. */
#include "dpp/worker/runtime/worker.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/log_events.h"
#include "dpp/worker/source/parquet_source.h"
#include "dpp/worker/runtime/worker_internal.h"
#include "sluice/wire.h"
#include "store/store.h"

#define DEFAULT_MEMORY_LIMIT (256ull << 20)
#define MAX_THREADS 256

sl_worker_opts_t sl_worker_opts_default(void)
{
    return (sl_worker_opts_t){.listen = "127.0.0.1:0", .memory_limit = DEFAULT_MEMORY_LIMIT};
}

void dpp_worker_fail(sl_worker_t *w, sl_err_t code, const char *msg)
{
    sl_mutex_lock(&w->mu);
    bool first = w->fail_code == SL_OK;
    if (first) {
        w->fail_code = code;
        snprintf(w->fail_msg, sizeof w->fail_msg, "%s", msg);
    }
    sl_mutex_unlock(&w->mu);
    if (!first) return;
    /* stopping first: a transform thread ending now must not finish the
     * server (END) for a failed job */
    atomic_store(&w->stopping, true);
    sl_worker_server_fail(w->server, code, msg);
    sl_worker_budget_close(w->budget);
    sl_worker_queue_close(w->work);
}

sl_err_t dpp_worker_budget_take(sl_worker_t *w, uint64_t bytes, uint64_t held, const char *what,
                                sl_error_t *err)
{
    sl_err_t rc = sl_worker_budget_acquire(w->budget, bytes, held);
    /* NOMEM, not TOO_LARGE: the worker's limit, not the split, is the
     * problem (a split error would be reported to the master). */
    if (rc == SL_ERR_TOO_LARGE)
        return sl_error_set(
            err, SL_ERR_NOMEM,
            "worker: --memory-limit of %llu bytes cannot hold %s (%llu bytes more) "
            "with the %llu bytes accounted now (%llu of them this stage's), and "
            "nothing else can free memory: raise the limit",
            (unsigned long long)sl_worker_budget_limit(w->budget), what, (unsigned long long)bytes,
            (unsigned long long)sl_worker_budget_used(w->budget), (unsigned long long)held);
    if (rc != SL_OK) return sl_error_set(err, SL_ERR_CLOSED, "worker stopping");
    return SL_OK;
}

/* The budget as the warehouse readers' memory hook (sl_wh_mem_t): an
 * object's read-ahead takes only what fits now (else it is skipped), a
 * Parquet row group's column chunks wait for room like a stripe does.
 * Calls come from the reader thread's readers (the read-ahead's helper
 * thread never takes or gives; the stripe lanes' readers have a hook of
 * their own that counts theirs as the lane's, lanes.c); io_held is their
 * bytes, counted as the reader's own when it waits (reader.c). The
 * chunks' wait counts only those as the reader's; its rows and batch are
 * not known here, so when only they fill the budget the refusal comes from
 * the standstill rule (queue.h). */
static bool mem_try_take(void *ctx, uint64_t bytes)
{
    sl_worker_t *w = ctx;
    if (!sl_worker_budget_try_acquire(w->budget, bytes)) return false;
    atomic_fetch_add(&w->io_held, bytes);
    return true;
}

static sl_err_t mem_take(void *ctx, uint64_t bytes, const char *what, sl_error_t *err)
{
    sl_worker_t *w = ctx;
    sl_err_t rc = dpp_worker_budget_take(w, bytes, atomic_load(&w->io_held), what, err);
    if (rc == SL_OK) atomic_fetch_add(&w->io_held, bytes);
    return rc;
}

static void mem_give(void *ctx, uint64_t bytes)
{
    sl_worker_t *w = ctx;
    atomic_fetch_sub(&w->io_held, bytes);
    sl_worker_budget_release(w->budget, bytes);
}

/* Does every file of the job store exactly the job's dedup groups (storage
 * dedup, RecD)? Then the reader hands them over deduplicated (dedup form):
 * unique rows are decoded, batched and sent once, and never hashed again.
 * Filters read a group's features through the inverse indices, and a batch
 * takes only the unique rows its kept rows refer to. Not with a shuffle
 * window (it moves single rows across stripes). Opens each file's footer
 * once. */
static bool files_store_job_groups(sl_worker_t *w)
{
    const sl_pipeline_job_t *job = w->job;
    if (!job->num_dedup_groups || job->shuffle_window) return false;
    uint32_t nf = 0;
    const char *const *features = sl_pipeline_plan_read_features(w->plan, &nf);
    sl_wh_read_opts_t ro = {
        .features = features, .num_features = nf, .dedup_form = true, .allocator = w->a};
    const char *last = NULL;
    bool ok = w->splits->count > 0;
    for (uint32_t i = 0; ok && i < w->splits->count; i++) {
        const sl_wh_split_t *sp = &w->splits->items[i];
        if (last && strcmp(last, sp->path) == 0) continue;
        last = sp->path;
        sl_wh_reader_t *r;
        sl_error_t err = {0};
        if (sl_wh_reader_open_split(w->table, sp, &ro, &r, &err) != SL_OK) return false;
        uint32_t ng = sl_wh_reader_num_groups(r);
        ok = ng == job->num_dedup_groups;
        for (uint32_t g = 0; ok && g < ng; g++) {
            const sl_dedup_group_spec_t *fg = sl_wh_reader_group(r, g);
            bool match = false;
            for (uint32_t j = 0; !match && j < job->num_dedup_groups; j++) {
                const sl_pipeline_dedup_group_t *jg = &job->dedup_groups[j];
                if (jg->num_features != fg->num_features) continue;
                uint32_t found = 0;
                for (uint32_t a = 0; a < fg->num_features; a++)
                    for (uint32_t b = 0; b < jg->num_features; b++)
                        found += strcmp(fg->features[a], jg->features[b]) == 0;
                match = found == fg->num_features;
            }
            ok = match;
        }
        sl_wh_reader_close(r);
    }
    return ok;
}

/* A table job: its table, partition filter, plan, splits and (without a
 * source given) the table source. */
static sl_err_t open_table(sl_worker_t *w, const sl_pipeline_job_t *job,
                           sl_pipeline_problems_t *problems, sl_error_t *err)
{
    const sl_allocator_t *a = w->a;
    sl_err_t rc;
    sl_store_opts_t so = {.request_timeout_ms = w->o.store_timeout_ms,
                          .max_attempts = w->o.store_max_attempts};
    if ((rc = sl_wh_table_open_with(job->table, &so, a, &w->table, err))) return rc;
    if (job->partitions && (rc = sl_wh_filter_parse(job->partitions, a, &w->filter, err))) {
        if (problems) sl_pipeline_problems_add(problems, "$.source.partitions: %s", err->msg);
        return rc;
    }
    if ((rc = sl_pipeline_plan_new(job, sl_wh_table_schema(w->table), &w->plan, problems, err)))
        return rc;
    if ((rc = sl_wh_table_splits(w->table, w->filter, job->stripes_per_split, &w->splits, err)))
        return rc;
    if (!w->source.next)
        rc = sl_worker_source_table_new(w->splits, job->epochs, job->shuffle_splits, job->seed, a,
                                        &w->source, err);
    return rc;
}

static void add_problem(void *ctx, const char *problem)
{
    if (ctx) sl_pipeline_problems_add(ctx, "%s", problem);
}

/* A Parquet dataset read in place (source.parquet): its mapping gives the
 * schema the plan binds to. Standalone the footers give the splits (row
 * groups the job's range filters rule out by their statistics left out)
 * and the table source hands them out; under a master (w->source set) the
 * leases name the splits the master cut from the same footers. */
static sl_err_t open_parquet(sl_worker_t *w, const sl_pipeline_job_t *job, bool decode_maps,
                             sl_pipeline_problems_t *problems, sl_error_t *err)
{
    const sl_allocator_t *a = w->a;
    sl_wh_pqds_t *ds = NULL;
    sl_wh_splits_t *splits = NULL;
    sl_store_opts_t so = {.request_timeout_ms = w->o.store_timeout_ms,
                          .max_attempts = w->o.store_max_attempts};
    sl_err_t rc = sl_wh_pqds_open_with(job->parquet, &so, job->parquet_columns, job->partitions, a,
                                       add_problem, problems, &ds, err);
    if (rc == SL_OK) {
        sl_wh_pqds_set_mem(ds, &w->wh_mem);
        w->pq_store = sl_wh_pqds_store(ds);
        rc = sl_pipeline_plan_new(job, sl_wh_pqds_mapping(ds)->schema, &w->plan, problems, err);
    }
    /* per-value transforms in the column readers, as the table reader
     * does them (docs/WORKER.md, "Transforms at decode"); not under dedup
     * groups: hashed ids may collide where the ids did not */
    if (rc == SL_OK && decode_maps && !job->num_dedup_groups)
        rc = sl_pipeline_plan_map_at_decode(w->plan, &w->decode_maps, err);
    if (rc == SL_OK && !w->source.next) {
        sl_pipeline_range_t ranges[16];
        uint32_t nr = sl_pipeline_job_ranges(job, ranges, 16);
        nr = nr > 16 ? 16 : nr;
        sl_wh_pqds_plan_stats_t ps = {0};
        rc = sl_wh_pqds_plan(ds, job->split_rows, ranges, nr, &splits, &ps, err);
        w->st.pq_row_groups = ps.row_groups;
        w->st.pq_row_groups_skipped = ps.row_groups_skipped;
        w->st.pq_rows_skipped = ps.rows_skipped;
        if (rc == SL_OK)
            rc = sl_worker_source_table_new(splits, job->epochs, job->shuffle_splits, job->seed, a,
                                            &w->source, err);
    }
    if (rc != SL_OK) {
        w->pq_store = NULL;
        sl_wh_splits_destroy(splits);
        sl_wh_pqds_destroy(ds);
        return rc;
    }
    uint32_t nf = 0;
    const char *const *features = sl_pipeline_plan_read_features(w->plan, &nf);
    rc = sl_worker_source_parquet_new(ds, splits, job->batch_size, w->threads, features, nf,
                                      w->decode_maps, a, &w->source, err);
    if (rc != SL_OK) w->pq_store = NULL; /* ds went with the source */
    return rc;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

sl_err_t sl_worker_start(const sl_pipeline_job_t *job, const sl_worker_opts_t *opts,
                         sl_worker_t **out, sl_pipeline_problems_t *problems, sl_error_t *err)
{
    sl_worker_opts_t o = opts ? *opts : sl_worker_opts_default();
    const sl_allocator_t *a = o.allocator ? o.allocator : sl_allocator_default();
    if (!o.listen) o.listen = "127.0.0.1:0";
    if (!o.memory_limit) o.memory_limit = DEFAULT_MEMORY_LIMIT;
    if (!o.threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = n > 0 ? (uint32_t)n : 1;
    }
    sl_worker_t *w = NULL;
    sl_err_t rc;
    if (o.threads > MAX_THREADS) {
        rc = sl_error_set(err, SL_ERR_INVALID, "worker: %u threads (at most %u)", o.threads,
                          MAX_THREADS);
    } else if (job->num_dedup_groups > SL_WORKER_MAX_GROUPS) {
        rc = sl_error_set(err, SL_ERR_INVALID, "worker: %u dedup groups (at most %u)",
                          job->num_dedup_groups, SL_WORKER_MAX_GROUPS);
    } else if (!(w = sl_calloc(a, 1, sizeof *w))) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    }
    if (!o.max_queued) {
        uint64_t q = (uint64_t)SL_WORKER_DEFAULT_QUEUED_PER_THREAD * o.threads;
        o.max_queued =
            q < SL_WORKER_DEFAULT_QUEUED_MIN ? SL_WORKER_DEFAULT_QUEUED_MIN : (uint32_t)q;
    }
    if (!w) { /* what the worker would own */
        if (o.source.next && o.source.destroy) o.source.destroy(o.source.ctx);
        if (o.has_listen_fd) close(o.listen_fd);
        return rc;
    }
    w->job = job;
    w->a = a;
    w->frame_a = a;
    w->o = o;
    w->source = o.source;
    w->master_mode = o.source.lease_live != NULL;
    w->listen_fd_owned = o.has_listen_fd;
    sl_mutex_init(&w->mu);
    snprintf(w->worker_id, sizeof w->worker_id, "%s", o.worker_id ? o.worker_id : "");
    if (!o.worker_id) snprintf(w->worker_id, sizeof w->worker_id, "worker-%d", (int)getpid());
    w->job_hash = fnv1a(job->id ? job->id : "job");
    w->threads = o.threads;
    w->st.threads = o.threads;
    w->st.memory_limit = o.memory_limit;
    /* before the source: a Kafka source pauses its partition when it is full */
    w->budget = sl_worker_budget_new(a, o.memory_limit);
    w->wh_mem =
        (sl_wh_mem_t){.ctx = w, .try_take = mem_try_take, .take = mem_take, .give = mem_give};
    if (!w->budget) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
        goto fail;
    }
    if (job->is_kafka) {
        /* records of source.kafka's schema: read alone, or the chunks a
         * master leases (the lease client's source given) */
        if ((rc = sl_pipeline_plan_new(job, job->kafka.schema, &w->plan, problems, err))) goto fail;
        uint32_t nf = 0;
        const char *const *features = sl_pipeline_plan_read_features(w->plan, &nf);
        /* librdkafka's prefetch is part of the memory limit: an eighth of
         * it, 4 to 64 MiB (a fetch, half of it, must hold librdkafka's
         * largest message, 1 MB), held in the budget from the start */
        uint64_t pf = o.memory_limit / 8;
        w->kafka_prefetch = pf < (4u << 20) ? (4u << 20) : pf > (64u << 20) ? (64u << 20) : pf;
        if ((rc = w->source.next
                      ? sl_worker_source_kafka_leased_new(job, features, nf, w->kafka_prefetch,
                                                          w->budget, a, &w->source, err)
                      : sl_worker_source_kafka_new(job, features, nf, w->kafka_prefetch, w->budget,
                                                   a, &w->source, err)))
            goto fail;
    } else if (job->parquet) {
        if ((rc = open_parquet(w, job, !o.no_decode_maps, problems, err))) goto fail;
    } else if ((rc = open_table(w, job, problems, err))) {
        goto fail;
    }
    const char *weight = sl_pipeline_plan_weight_label(w->plan);
    if (weight != NULL) /* said before the first batch: one more label column */
        sl_log_kv(SL_LOG_INFO, SL_EV(WEIGHT_LABEL),
                  (SL_KV_STR("job", job->id), SL_KV_STR("label", weight)),
                  "job %s: negative_downsample adds the label column '%s' (each sample's weight) "
                  "after the table's labels: batches carry one label column more than the table",
                  job->id, weight);
    w->dedup_form = w->table && files_store_job_groups(w);
    w->st.dedup_form = w->dedup_form;
    w->num_groups = job->num_dedup_groups;
    if (w->num_groups) {
        w->groups = sl_calloc(a, w->num_groups, sizeof *w->groups);
        if (!w->groups) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
            goto fail;
        }
        for (uint32_t g = 0; g < w->num_groups; g++) {
            const sl_pipeline_dedup_group_t *jg = &job->dedup_groups[g];
            w->groups[g] = (sl_dedup_group_spec_t){.name = jg->name,
                                                   .num_features = jg->num_features,
                                                   .features = (const char *const *)jg->features};
            snprintf(w->st.groups[g].name, sizeof w->st.groups[g].name, "%s", jg->name);
        }
        w->st.num_groups = w->num_groups;
    }
    /* per-value transforms inside the table reader (docs/WORKER.md,
     * "Transforms at decode"); not under dedup groups: hashed ids may
     * collide where the ids did not */
    if (w->table && !w->source.read && !w->num_groups && !o.no_decode_maps &&
        (rc = sl_pipeline_plan_map_at_decode(w->plan, &w->decode_maps, err)))
        goto fail;
    w->work = sl_worker_queue_new(a, 2 * o.threads);
    w->xform = sl_calloc(a, o.threads, sizeof *w->xform);
    if (!w->work || !w->xform) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
        goto fail;
    }
    /* the reader, the transform threads and, with more than one thread,
     * the stripe lanes (reader.c: not for a source that reads its own rows) */
    sl_worker_budget_stages(w->budget,
                            o.threads + 1 + (o.threads > 1 && !w->source.read ? o.threads : 0));
    if (w->kafka_prefetch && sl_worker_budget_acquire(w->budget, w->kafka_prefetch, 0) != SL_OK) {
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "worker: memory limit %" PRIu64 " bytes leaves no room for the Kafka "
                          "consumer's prefetch of %" PRIu64 " bytes",
                          o.memory_limit, w->kafka_prefetch);
        goto fail;
    }
    if (!o.no_shm) {
        uint64_t bytes = o.shm_bytes;
        if (!bytes) {
            bytes = o.memory_limit / 2;
            if (bytes > SL_WORKER_DEFAULT_SHM_MAX) bytes = SL_WORKER_DEFAULT_SHM_MAX;
        }
        sl_error_t e = {0};
        if (sl_shm_heap_new("sluice-frames", bytes, a, &w->shm, &e) == SL_OK) {
            w->frame_a = sl_shm_heap_allocator(w->shm, a);
            w->st.shm_capacity = sl_shm_heap_size(w->shm);
        } else {
            /* not fatal: every frame goes over the socket, as with --no-shm */
            sl_log(SL_LOG_WARN, SL_EV(WORKER_SHM_OFF), "worker %s: no shared-memory frame heap: %s",
                   w->worker_id, e.msg);
        }
    }
    sl_worker_server_opts_t so = {.listen = o.listen,
                                  .shm = w->shm,
                                  .max_credits = o.max_credits,
                                  .worker_id = w->worker_id,
                                  .job_id = o.job_id ? o.job_id : job->id,
                                  .epochs = job->epochs,
                                  .budget = w->budget,
                                  .allocator = a,
                                  .has_listen_fd = o.has_listen_fd,
                                  .listen_fd = o.listen_fd,
                                  .listen_port = o.listen_port,
                                  .lease_live = w->source.lease_live,
                                  .lease_retire = w->source.lease_retire,
                                  .lease_members = w->source.lease_members,
                                  .lease_ctx = w->source.ctx,
                                  .cluster_secret = o.cluster_secret,
                                  .max_clients = o.max_clients,
                                  .idle_timeout_ms = o.client_conn_idle_ms,
                                  .max_queued = o.max_queued,
                                  .discard = o.discard};
    w->listen_fd_owned = false; /* the server owns it now, also when it fails */
    if ((rc = sl_worker_server_start(&so, &w->server, err))) goto fail;
    atomic_store(&w->running, o.threads);
    for (uint32_t i = 0; i < o.threads; i++) {
        if (pthread_create(&w->xform[i], NULL, dpp_worker_xform_main, w) != 0) {
            atomic_fetch_sub(&w->running, o.threads - i);
            rc = sl_error_set(err, SL_ERR_IO, "worker: cannot start transform thread %u", i);
            dpp_worker_fail(w, rc, err->msg);
            w->started_threads = i;
            sl_worker_destroy(w);
            return rc;
        }
        w->started_threads = i + 1;
    }
    if (pthread_create(&w->reader, NULL, dpp_worker_reader_main, w) != 0) {
        rc = sl_error_set(err, SL_ERR_IO, "worker: cannot start the reader thread");
        dpp_worker_fail(w, rc, err->msg);
        sl_worker_destroy(w);
        return rc;
    }
    w->reader_started = true;
    *out = w;
    return SL_OK;
fail:
    sl_worker_destroy(w);
    return rc;
}

uint16_t sl_worker_port(const sl_worker_t *w)
{
    return sl_worker_server_port(w->server);
}

sl_err_t sl_worker_wait(sl_worker_t *w, int timeout_ms, sl_error_t *err)
{
    uint64_t end =
        now_ns(CLOCK_MONOTONIC) + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
    for (bool done = false;;) {
        /* checked after the wait too: a failure may come while waiting, and
         * a pipeline thread that had not seen it yet may finish the server */
        sl_mutex_lock(&w->mu);
        sl_err_t code = w->fail_code;
        if (code) sl_error_set(err, code, "%s", w->fail_msg);
        sl_mutex_unlock(&w->mu);
        if (code) return code;
        if (done) return SL_OK;
        done = sl_worker_server_wait_done(w->server, 100);
        if (!done && timeout_ms >= 0 && now_ns(CLOCK_MONOTONIC) >= end)
            return sl_error_set(err, SL_ERR_TIMEOUT, "worker: job not finished yet");
    }
}

void sl_worker_stop(sl_worker_t *w)
{
    if (!w || w->stopped) return;
    w->stopped = true;
    atomic_store(&w->stopping, true);
    if (w->source.cancel) w->source.cancel(w->source.ctx); /* a reader waiting for work wakes */
    if (w->budget) sl_worker_budget_close(w->budget);
    if (w->work) sl_worker_queue_close(w->work);
    if (w->server) sl_worker_server_end_waits(w->server); /* transform threads waiting for room */
    if (w->reader_started) pthread_join(w->reader, NULL);
    for (uint32_t i = 0; i < w->started_threads; i++)
        pthread_join(w->xform[i], NULL);
    w->reader_started = false;
    w->started_threads = 0;
    if (w->work) {
        sl_worker_msg_t m;
        while (sl_worker_queue_pop(w->work, &m, 0) == SL_OK)
            dpp_worker_drop_msg(w, &m);
    }
    if (w->server) {
        bool done = sl_worker_server_wait_done(w->server, 0);
        sl_worker_server_stop(w->server); /* joins the connection threads */
        sl_mutex_lock(&w->mu);
        w->st.finished = done && w->fail_code == SL_OK;
        sl_mutex_unlock(&w->mu);
    }
}

void sl_worker_fail(sl_worker_t *w, sl_err_t code, const char *msg)
{
    dpp_worker_fail(w, code ? code : SL_ERR_IO, msg ? msg : sl_err_str(code));
}

bool sl_worker_failed(sl_worker_t *w, sl_error_t *err)
{
    sl_mutex_lock(&w->mu);
    sl_err_t code = w->fail_code;
    if (code) sl_error_set(err, code, "%s", w->fail_msg);
    sl_mutex_unlock(&w->mu);
    return code != SL_OK;
}

const char *sl_worker_id(const sl_worker_t *w)
{
    return w->worker_id;
}

const char *sl_worker_job_id(const sl_worker_t *w)
{
    return w->o.job_id ? w->o.job_id : w->job->id ? w->job->id : "job";
}

struct sl_store *sl_worker_store(const sl_worker_t *w)
{
    return w->table ? sl_wh_table_store(w->table) : w->pq_store;
}

void sl_worker_destroy(sl_worker_t *w)
{
    if (!w) return;
    sl_worker_stop(w);
    sl_worker_server_destroy(w->server); /* retires what it holds into the source: first */
    if (w->source.destroy) w->source.destroy(w->source.ctx);
    if (w->listen_fd_owned) close(w->o.listen_fd);
    sl_worker_queue_destroy(w->work);
    sl_worker_budget_destroy(w->budget);
    sl_shm_heap_destroy(w->shm); /* after the server: it held the last frames */
    if (w->xform) sl_free(w->a, w->xform, (size_t)w->threads * sizeof *w->xform);
    if (w->groups) sl_free(w->a, w->groups, (size_t)w->num_groups * sizeof *w->groups);
    sl_wh_splits_destroy(w->splits);
    sl_pipeline_plan_destroy(w->plan);
    sl_wh_filter_destroy(w->filter);
    sl_wh_table_close(w->table);
    sl_mutex_destroy(&w->mu);
    sl_free(w->a, w, sizeof *w);
}

sl_err_t sl_worker_order_base(sl_worker_t *w, void *lease, uint64_t base, sl_error_t *err)
{
    if (!w->server) return SL_OK;
    sl_err_t rc = sl_worker_server_order_base(w->server, lease, base, err);
    /* not begun yet, or ended and sent: harmless (order_hold.h) */
    return rc == SL_ERR_NOT_FOUND ? SL_OK : rc;
}

void sl_worker_order_drop(sl_worker_t *w, void *lease)
{
    if (w->server) sl_worker_server_order_drop(w->server, lease);
}

uint32_t sl_worker_order_figures(sl_worker_t *w, uint64_t *held, uint64_t *queued, uint32_t cap)
{
    *held = 0;
    if (!w->server) return 0;
    uint64_t bytes;
    sl_worker_server_order_held(w->server, &bytes, held);
    return sl_worker_server_order_queued(w->server, queued, cap);
}

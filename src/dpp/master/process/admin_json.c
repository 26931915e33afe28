/* The master's views (master.h) as the admin endpoint's JSON (admin.h,
 * docs/ADMIN.md): a job (its failure, Kafka positions, shared passes,
 * autocache, history), the lists of jobs and workers, and /status. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/mem.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/state/admin_limits.h"

/* ---- the views as JSON ------------------------------------------------------------- */

/* A failed job's failure as JSON, null for the others. */
static json_t *failure_json(const sl_master_state_job_status_t *st)
{
    if (!st->failed) return json_null();
    return json_pack("{s:i, s:i, s:s, s:i, s:s, s:i, s:s}", "split", (json_int_t)st->failure_split,
                     "epoch", (json_int_t)st->failure_epoch, "file", st->failure_file, "stripe",
                     (json_int_t)st->failure_stripe, "message", st->failure_message, "code",
                     (json_int_t)st->failure_code, "error", sl_err_str(st->failure_code));
}

/* The job's state and what split failures did to it. */
static void add_failure_json(json_t *o, const sl_master_state_job_status_t *st)
{
    json_object_set_new(o, "state",
                        json_string(st->failed     ? "failed"
                                    : st->finished ? "finished"
                                                   : "running"));
    json_object_set_new(o, "failure", failure_json(st));
    json_object_set_new(o, "on_bad_split", json_string(st->skip_bad_splits ? "skip" : "fail"));
    json_object_set_new(o, "split_failures", json_integer((json_int_t)st->split_failures));
    json_object_set_new(o, "skipped_splits", json_integer((json_int_t)st->skipped_splits));
    json_object_set_new(o, "skipped_rows", json_integer((json_int_t)st->skipped_rows));
    /* batch.equal_batches_per_rank: what it dropped (docs/ADMIN.md) */
    json_object_set_new(o, "equal_batches_per_rank", json_boolean(st->equal_batches_per_rank));
    json_object_set_new(o, "dropped_batches", json_integer((json_int_t)st->equal_dropped_batches));
    json_object_set_new(o, "dropped_samples", json_integer((json_int_t)st->equal_dropped_samples));
}

/* A stream job's partitions: where each stands (docs/ADMIN.md). */
static json_t *kafka_json(const sl_master_job_view_t *v)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a != NULL && i < v->num_kafka; i++) {
        const sl_master_kafka_view_t *k = &v->kafka[i];
        json_t *o =
            json_pack("{s:s, s:i, s:I, s:I, s:I, s:i, s:i, s:i}", "topic", k->pos.topic,
                      "partition", (json_int_t)k->pos.partition, "start", (json_int_t)k->pos.start,
                      "committed", (json_int_t)k->pos.committed, "high_watermark",
                      (json_int_t)k->high, "chunks", (json_int_t)k->pos.chunks, "pending",
                      (json_int_t)k->pos.pending, "open", (json_int_t)k->pos.open);
        if (o != NULL && k->high >= 0)
            json_object_set_new(o, "lag",
                                json_integer(k->high > k->pos.committed
                                                 ? (json_int_t)(k->high - k->pos.committed)
                                                 : 0));
        json_array_append_new(a, o);
    }
    return a;
}

/* Shared passes: the plan's fingerprint (16 hex digits; "" for a job
 * journaled before fingerprints), its "share", and the jobs sharing it. */
static void add_share_json(json_t *o, const sl_master_job_view_t *v)
{
    char fp[20] = "";
    if (v->status.plan_fingerprint != 0)
        snprintf(fp, sizeof fp, "%016" PRIx64, v->status.plan_fingerprint);
    json_object_set_new(o, "fingerprint", json_string(fp));
    json_object_set_new(o, "share", json_boolean(v->status.share));
    json_t *peers = json_array();
    for (uint32_t i = 0; peers != NULL && i < v->num_shares_with; i++)
        json_array_append_new(peers, json_string(v->shares_with[i]));
    json_object_set_new(o, "shares_with", peers);
    json_object_set_new(o, "shared_batches", json_integer((json_int_t)v->shared_batches));
    json_object_set_new(o, "shared_bytes_saved", json_integer((json_int_t)v->shared_bytes));
    json_object_set_new(o, "shared_cpu_seconds_saved", json_real((double)v->shared_cpu_ns / 1e9));
}

/* The autocache (docs/DESIGN.md "Autocache"; docs/ADMIN.md): its
 * decision for the job's prefix fingerprint and the figures behind it. */
static json_t *autocache_json(const sl_master_job_view_t *v)
{
    const sl_master_autocache_decision_t *d = &v->autocache;
    char fp[20] = "";
    if (v->prefix_fingerprint != 0) snprintf(fp, sizeof fp, "%016" PRIx64, v->prefix_fingerprint);
    const char *why = v->cache_dir == NULL ? "the master has no --cache-dir"
                      : v->prefix_fingerprint == 0
                          ? "not cacheable: a Kafka source, a row shuffle or "
                            "\"autocache\": false (docs/JOBS.md, \"Autocache\")"
                      : d->state == SL_MASTER_AUTOCACHE_MEASURING ? "measuring the first epoch"
                      : d->state == SL_MASTER_AUTOCACHE_CHOSEN    ? "reading the cache wins"
                                                                  : "computing wins";
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:f, s:f, s:I, s:f, s:f, s:I, s:f, s:I, s:I, s:I, s:I, s:f}", "state",
        sl_master_autocache_state_name(d->state), "reason", why, "prefix_fingerprint", fp,
        "compute_us_per_sample", d->compute_us_per_sample, "cache_us_per_sample_estimated",
        d->cache_us_per_sample, "measured_samples", (json_int_t)d->samples, "read_mb_per_s",
        d->read_mb_per_s, "margin", SL_MASTER_AUTOCACHE_MARGIN, "cache_samples",
        (json_int_t)v->cache_samples, "cache_us_per_sample",
        v->cache_samples ? (double)v->cache_read_ns / 1e3 / (double)v->cache_samples : 0.0,
        "cache_fallbacks", (json_int_t)v->cache_fallbacks, "cache_files_written",
        (json_int_t)v->cache_files_written, "cache_bytes_written",
        (json_int_t)v->cache_bytes_written, "computed_samples", (json_int_t)v->computed_samples,
        "computed_us_per_sample",
        v->computed_samples ? (double)v->compute_ns / 1e3 / (double)v->computed_samples : 0.0);
    if (o != NULL) json_object_set_new(o, "source_mb_per_s", json_real(d->source_mb_per_s));
    if (o != NULL && v->cache_dir != NULL) {
        /* where the files are: the master's directory, or the workers' disks */
        json_object_set_new(o, "cache_files_on",
                            json_string(v->cache_on_workers ? "workers" : "master"));
        if (v->cache_on_workers)
            json_object_set_new(o, "cache_worker_files",
                                json_integer((json_int_t)v->cache_worker_files));
        json_object_set_new(o, "cache_dir", json_string(v->cache_dir));
        json_object_set_new(o, "cache_dir_bytes",
                            json_integer((json_int_t)v->cache_dir_stats.bytes));
        json_object_set_new(o, "cache_dir_files",
                            json_integer((json_int_t)v->cache_dir_stats.files));
        json_object_set_new(o, "cache_dir_max_bytes",
                            json_integer((json_int_t)v->cache_dir_stats.max_bytes));
        json_object_set_new(o, "cache_dir_evicted_files",
                            json_integer((json_int_t)v->cache_dir_stats.evicted_files));
    }
    return o;
}

static json_t *job_json(const sl_master_job_view_t *v)
{
    const sl_master_state_job_status_t *st = &v->status;
    json_t *spec = json_loads(st->spec_json, 0, NULL);
    json_t *table = spec != NULL ? json_object_get(json_object_get(spec, "source"), "table") : NULL;
    json_t *o = json_pack(
        "{s:s, s:i, s:i, s:b, s:i, s:i, s:i, s:i, s:I, s:I, s:i, s:s, s:s, s:i, s:i, s:i, "
        "s:i, s:i, s:i, s:f, s:f, s:s, s:I, s:I}",
        "id", v->id, "epoch", (json_int_t)st->epoch, "epochs", (json_int_t)st->epochs, "finished",
        st->finished, "num_splits", (json_int_t)st->num_splits, "pending", (json_int_t)st->pending,
        "leased", (json_int_t)st->leased, "done", (json_int_t)st->done, "committed_rows",
        (json_int_t)st->committed_rows, "total_rows", (json_int_t)st->total_rows, "ranks",
        (json_int_t)st->ranks, "sharding", st->static_sharding ? "static" : "dynamic", "table",
        json_is_string(table) ? json_string_value(table) : "", "min_workers",
        (json_int_t)v->min_workers, "max_workers", (json_int_t)v->max_workers, "desired_workers",
        (json_int_t)v->desired_workers, "granted_workers", (json_int_t)v->granted_workers,
        "workers", (json_int_t)v->workers, "clients", (json_int_t)v->clients, "trainer_wait",
        v->trainer_wait, "worker_busy", v->worker_busy, "autoscale_reason", v->autoscale_reason,
        "batches", (json_int_t)st->batches, "samples", (json_int_t)st->samples);
    /* a Parquet job's dataset (its "table" is then "") and its row groups:
     * in all, and those (and their rows) ruled out by their statistics */
    json_t *pq = spec != NULL ? json_object_get(json_object_get(spec, "source"), "parquet") : NULL;
    if (o != NULL && json_is_string(pq)) {
        json_object_set(o, "parquet", pq);
        json_object_set_new(o, "parquet_row_groups",
                            json_integer((json_int_t)st->parquet_row_groups));
        json_object_set_new(o, "parquet_row_groups_skipped",
                            json_integer((json_int_t)st->parquet_row_groups_skipped));
        json_object_set_new(o, "parquet_rows_skipped",
                            json_integer((json_int_t)st->parquet_rows_skipped));
    }
    json_decref(spec);
    if (o != NULL) {
        add_failure_json(o, st);
        /* bytes without dedup per byte sent: 1 before the first batch */
        json_object_set_new(o, "dedup_factor",
                            json_real(v->bytes_encoded > 0
                                          ? (double)v->bytes_expanded / (double)v->bytes_encoded
                                          : 1.0));
        json_object_set_new(o, "bytes_encoded", json_integer((json_int_t)v->bytes_encoded));
        /* since the master's last look (about a second); the time left at
         * the last minute's rate of rows, null when it cannot be told */
        json_object_set_new(o, "samples_per_s", json_real(v->samples_per_s));
        json_object_set_new(o, "eta_s", v->eta_s >= 0 ? json_real(v->eta_s) : json_null());
        if (v->num_kafka > 0) json_object_set_new(o, "kafka", kafka_json(v));
        add_share_json(o, v);
        json_object_set_new(o, "autocache", autocache_json(v));
        json_object_set_new(o, "bytes_saved",
                            json_integer((json_int_t)(v->bytes_expanded > v->bytes_encoded
                                                          ? v->bytes_expanded - v->bytes_encoded
                                                          : 0)));
    }
    return o;
}

/* The job's last hour (history.h): {interval_s, points: [...], decisions:
 * [...]}, oldest first; times are Unix seconds. */
static json_t *history_json(const sl_master_history_t *h)
{
    json_t *points = json_array(), *decisions = json_array();
    for (uint32_t i = 0; points != NULL && i < h->count; i++) {
        const sl_master_history_point_t *p = sl_master_history_point(h, i);
        json_array_append_new(
            points,
            json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i}", "t", p->wall_ms / 1000.0,
                      "samples_per_s", (double)p->samples_per_s, "rows_per_s",
                      (double)p->rows_per_s, "trainer_wait", (double)p->trainer_wait, "worker_busy",
                      (double)p->worker_busy, "dedup_factor", (double)p->dedup_factor, "workers",
                      (json_int_t)p->workers, "desired_workers", (json_int_t)p->desired));
    }
    for (uint32_t i = 0; decisions != NULL && i < h->dcount; i++) {
        const sl_master_history_decision_t *d = sl_master_history_decision(h, i);
        json_array_append_new(decisions,
                              json_pack("{s:f, s:i, s:i, s:s, s:s}", "t", d->wall_ms / 1000.0,
                                        "from", (json_int_t)d->from, "to", (json_int_t)d->to, "by",
                                        d->by, "reason", d->reason));
    }
    return json_pack("{s:f, s:o*, s:o*}", "interval_s", h->interval_ms / 1000.0, "points", points,
                     "decisions", decisions);
}

static void job_into(void *ctx, const sl_master_job_view_t *v)
{
    json_t *o = job_json(v);
    if (o != NULL && v->history != NULL)
        json_object_set_new(o, "history", history_json(v->history));
    *(json_t **)ctx = o;
}

sl_err_t sl_master_admin_job_json(sl_master_t *m, const char *job_id, json_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_master_visitor_t v = {.job = job_into, .ctx = out};
    sl_err_t rc = sl_master_visit(m, job_id, &v, err);
    if (rc == SL_OK && *out == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "job '%s' as JSON", job_id);
    return rc;
}

static void job_append(void *ctx, const sl_master_job_view_t *v)
{
    json_array_append_new(ctx, job_json(v));
}

/* {key: [what v appends for every job or worker]}, NULL when out of memory. */
static json_t *listed(sl_master_t *m, const char *key, sl_master_visitor_t v)
{
    json_t *arr = json_array();
    if (arr == NULL) return NULL;
    v.ctx = arr;
    sl_error_t err = {0};
    sl_master_visit(m, NULL, &v, &err);
    return json_pack("{s:o}", key, arr);
}

json_t *sl_master_admin_jobs_json(sl_master_t *m)
{
    return listed(m, "jobs", (sl_master_visitor_t){.job = job_append});
}

static void worker_append(void *ctx, const sl_master_worker_view_t *w)
{
    json_array_append_new(
        ctx, json_pack("{s:s, s:s, s:s, s:s, s:b, s:i, s:f, s:i, s:I, s:I, s:I, s:I}", "id", w->id,
                       "job", w->job, "serve_address", w->serve_address, "admin_address",
                       w->admin_address, "connected", w->connected, "leases", (json_int_t)w->leases,
                       "busy", w->busy, "queued_batches", (json_int_t)w->queued_batches,
                       "memory_used", (json_int_t)w->memory_used, "batches_sent",
                       (json_int_t)w->batches_sent, "samples_sent", (json_int_t)w->samples_sent,
                       "last_heartbeat_ms_ago", (json_int_t)w->last_heartbeat_ms_ago));
}

json_t *sl_master_admin_workers_json(sl_master_t *m)
{
    return listed(m, "workers", (sl_master_visitor_t){.worker = worker_append});
}

typedef struct status_json {
    json_t *o, *failed;
    bool has_executor;
    sl_master_executor_stats_t executor;
} status_json;

static void status_into(void *ctx, const sl_master_status_view_t *v)
{
    status_json *s = ctx;
    const sl_master_state_counters_t *c = &v->counters;
    s->o = json_pack(
        "{s:b, s:s, s:I, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I, "
        "s:I}, s:s}",
        "ready", v->ready, "address", v->address, "uptime_s", (json_int_t)v->uptime_s, "jobs",
        (json_int_t)c->jobs, "workers", (json_int_t)v->workers, "clients", (json_int_t)v->clients,
        "leases_granted", (json_int_t)c->leases_granted, "lease_expiries", (json_int_t)c->expiries,
        "lease_revocations", (json_int_t)c->revocations, "commits", (json_int_t)c->commits,
        "overlaps", (json_int_t)c->overlaps, "stale",
        (json_int_t)(c->stale_commits + c->stale_refused + c->unleased_commits), "journal_syncs",
        (json_int_t)v->store.journal_syncs, "compactions", (json_int_t)v->store.compactions,
        "splits", "pending", (json_int_t)c->pending, "leased", (json_int_t)c->leased, "done",
        (json_int_t)c->done, "failure", v->failure);
    s->failed = json_array();
    s->has_executor = v->has_executor;
    s->executor = v->executor;
}

static void status_failed_job(void *ctx, const sl_master_job_view_t *v)
{
    status_json *s = ctx;
    if (s->o == NULL || s->failed == NULL || !v->status.failed) return;
    json_array_append_new(
        s->failed, json_pack("{s:s, s:o}", "id", v->id, "failure", failure_json(&v->status)));
}

/* /status "executor": the figures of its kind (docs/ADMIN.md). */
static json_t *executor_json(const sl_master_executor_stats_t *x)
{
    const char *kind = x->kind ? x->kind : "local";
    if (strcmp(kind, "kubernetes") != 0)
        return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:s}", "kind", kind, "spawns",
                         (json_int_t)x->started, "spawn_errors", (json_int_t)x->spawn_errors,
                         "stopped", (json_int_t)x->exited, "failed", (json_int_t)x->failed,
                         "restarts_delayed", (json_int_t)x->delayed, "backoff_s",
                         x->backoff_ms / 1000.0, "last_failure", x->last_failure);
    json_t *err =
        x->last_error[0] == '\0'
            ? json_null()
            : json_pack("{s:o, s:s}", "http_status",
                        x->last_http_status ? json_integer(x->last_http_status) : json_null(),
                        "message", x->last_error);
    return json_pack(
        "{s:s, s:s, s:I, s:o, s:{s:I, s:I, s:I, s:I}, s:I, s:o, s:o}", "kind", kind, "deployment",
        x->target, "desired", (json_int_t)x->desired, "applied",
        x->applied < 0 ? json_null() : json_integer(x->applied), "requests", "ok",
        (json_int_t)x->requests_ok, "client_error", (json_int_t)x->requests_client_error,
        "server_error", (json_int_t)x->requests_server_error, "transport_error",
        (json_int_t)x->requests_transport_error, "failures", (json_int_t)x->failures, "last_error",
        err, "next_retry_s", x->failures > 0 ? json_real(x->next_retry_ms / 1000.0) : json_null());
}

json_t *sl_master_admin_status_json(sl_master_t *m)
{
    status_json s = {0};
    sl_master_visitor_t v = {.status = status_into, .job = status_failed_job, .ctx = &s};
    sl_error_t err = {0};
    sl_master_visit(m, NULL, &v, &err);
    if (s.o != NULL && s.failed != NULL)
        json_object_set_new(s.o, "failed_jobs", s.failed);
    else
        json_decref(s.failed);
    if (s.o != NULL && s.has_executor)
        json_object_set_new(s.o, "executor", executor_json(&s.executor));
    return s.o;
}

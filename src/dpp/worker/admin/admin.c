/* The worker's admin routes (admin.h). Handlers run on the
 * endpoint's thread and read the worker through sl_worker_stats and
 * sl_worker_lease_client_stats, which take the locks they need. */
#include "dpp/worker/admin/admin.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/lock.h"
#include "common/mem.h"
#include "common/prom.h"
#include "dpp/admin/ui.h"
#include "store/store.h"

typedef struct wadmin {
    sl_mutex_t mu;  /* held while a handler reads through w: set waits for it */
    sl_worker_t *w; /* NULL: waiting for the first lease */
    sl_worker_lease_client_t *ms;
    double started_unix_s; /* when the endpoint started: the process's start, for restarts */
} wadmin_t;

/* Ranks shown per deterministic job, a series each: the server's rank
 * queues (max_ranks, 64 by default) fit. */
#define SL_WORKER_ORDER_METRIC_RANKS 256

struct sl_worker_admin {
    wadmin_t ctx; /* the handlers' */
    sl_admin_t *admin;
};

/* One family of one sample; labels as for sl_prom_sample. */
static void counter(sl_prom_t *p, const char *labels, const sl_metric_def_t *m, double v)
{
    sl_prom_family_def(p, m);
    sl_prom_sample_def(p, m, labels, v);
}

/* The same for a gauge: the type is the entry's (common/metrics.c). */
static void gauge(sl_prom_t *p, const char *labels, const sl_metric_def_t *m, double v)
{
    sl_prom_family_def(p, m);
    sl_prom_sample_def(p, m, labels, v);
}

/* The deterministic order's families (a worker of such a job): a stalled
 * rank shows as its queue growing while the others' stay low. */
static void order_metrics(sl_prom_t *pp, sl_worker_t *w, const char *jl,
                          const sl_worker_server_stats_t *s)
{
    uint64_t held, queued[SL_WORKER_ORDER_METRIC_RANKS];
    uint32_t ranks = sl_worker_order_figures(w, &held, queued, SL_WORKER_ORDER_METRIC_RANKS);
    if (ranks == 0) return;
    gauge(pp, jl, SL_M(WORKER_ORDER_HELD_BATCHES), (double)held);
    counter(pp, jl, SL_M(WORKER_ORDER_WINDOW_WAITS_TOTAL), (double)s->ordered_waits);
    sl_prom_family_def(pp, SL_M(WORKER_ORDER_RANK_QUEUED_BATCHES));
    for (uint32_t r = 0; r < ranks && r < SL_WORKER_ORDER_METRIC_RANKS; r++) {
        char r1[64], rv[16], lab[400];
        snprintf(rv, sizeof rv, "%u", r);
        snprintf(lab, sizeof lab, "%s,%s", jl, sl_prom_label(r1, sizeof r1, "rank", rv));
        sl_prom_sample_def(pp, SL_M(WORKER_ORDER_RANK_QUEUED_BATCHES), lab, (double)queued[r]);
    }
}

/* The worker's families, appended to p. */
static void metrics_into(sl_prom_t *pp, sl_worker_t *w, sl_worker_lease_client_t *ms)
{
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    const sl_worker_server_stats_t *s = &st.server;
    /* Every sample names the worker's job (its first lease's): Prometheus
     * scrapes it with honor_labels, so that per-job queries join the
     * master's series (ops/prometheus/scrape.yml). */
    char jl[300];
    sl_prom_label(jl, sizeof jl, "job", sl_worker_job_id(w));
    counter(pp, jl, SL_M(WORKER_ROWS_READ_TOTAL), (double)st.rows_read);
    if (sl_worker_store(w) != NULL) sl_store_prom(sl_worker_store(w), pp, jl);
    counter(pp, jl, SL_M(WORKER_ROWS_KEPT_TOTAL), (double)st.rows_kept);
    counter(pp, jl, SL_M(WORKER_KAFKA_RECORDS_TOTAL), (double)st.records_read);
    counter(pp, jl, SL_M(WORKER_KAFKA_BAD_RECORDS_TOTAL), (double)st.records_bad);
    counter(pp, jl, SL_M(WORKER_KAFKA_PAUSES_TOTAL), (double)st.kafka_pauses);
    counter(pp, jl, SL_M(WORKER_KAFKA_FETCHER_WAKES_TOTAL), (double)st.kafka_wakes);
    counter(pp, jl, SL_M(WORKER_KAFKA_CHUNKS_HANDED_BACK_TOTAL), (double)st.kafka_handed_back);
    counter(pp, jl, SL_M(WORKER_KAFKA_DEAD_LETTER_RECORDS_TOTAL), (double)st.records_dead_letter);
    counter(pp, jl, SL_M(WORKER_KAFKA_DEAD_LETTER_FAILURES_TOTAL),
            (double)st.records_dead_letter_failed);
    /* a standalone worker's Parquet job: the row groups its plan left out
     * (under a master, the master's sluice_master_parquet_* say it) */
    gauge(pp, jl, SL_M(WORKER_PARQUET_ROW_GROUPS_SKIPPED), (double)st.pq_row_groups_skipped);
    gauge(pp, jl, SL_M(WORKER_PARQUET_ROWS_SKIPPED), (double)st.pq_rows_skipped);
    /* a Prometheus histogram: cumulative buckets, sum and count */
    sl_prom_family_def(pp, SL_M(WORKER_KAFKA_RECORD_AGE_SECONDS));
    uint64_t cum = 0;
    for (uint32_t b = 0; b < SL_WORKER_AGE_BUCKETS; b++) {
        char le[32], le1[64], lab[400];
        cum += st.age_buckets[b];
        if (b + 1 < SL_WORKER_AGE_BUCKETS)
            snprintf(le, sizeof le, "%g", (double)SL_WORKER_AGE_BOUNDS_MS[b] / 1000.0);
        else
            snprintf(le, sizeof le, "+Inf");
        snprintf(lab, sizeof lab, "%s,%s", jl, sl_prom_label(le1, sizeof le1, "le", le));
        sl_prom_sample_part(pp, SL_M(WORKER_KAFKA_RECORD_AGE_SECONDS), "_bucket", lab, (double)cum);
    }
    sl_prom_sample_part(pp, SL_M(WORKER_KAFKA_RECORD_AGE_SECONDS), "_sum", jl,
                        (double)st.age_sum_ms / 1000.0);
    sl_prom_sample_part(pp, SL_M(WORKER_KAFKA_RECORD_AGE_SECONDS), "_count", jl,
                        (double)st.age_count);
    counter(pp, jl, SL_M(WORKER_SPLITS_TOTAL), (double)st.splits);
    counter(pp, jl, SL_M(WORKER_SPLITS_FAILED_TOTAL), (double)st.splits_failed);
    counter(pp, jl, SL_M(WORKER_BATCHES_TOTAL), (double)st.batches);
    counter(pp, jl, SL_M(WORKER_SAMPLES_TOTAL), (double)st.samples);
    counter(pp, jl, SL_M(WORKER_BYTES_ENCODED_TOTAL), (double)st.bytes_encoded);
    counter(pp, jl, SL_M(WORKER_BYTES_EXPANDED_TOTAL), (double)st.bytes_expanded);
    sl_prom_family_def(pp, SL_M(WORKER_DEDUP_FACTOR));
    for (uint32_t g = 0; g < st.num_groups; g++) {
        char g1[128], lab[450];
        snprintf(lab, sizeof lab, "%s,%s", jl,
                 sl_prom_label(g1, sizeof g1, "group", st.groups[g].name));
        sl_prom_sample_def(pp, SL_M(WORKER_DEDUP_FACTOR), lab, st.groups[g].factor);
    }
    sl_prom_family_def(pp, SL_M(WORKER_BUSY_SECONDS_TOTAL));
    const char *stages[] = {"read", "filter", "dedup", "transform", "encode", "send"};
    uint64_t ns[] = {st.read_ns,      st.filter_ns, st.dedup_ns,
                     st.transform_ns, st.encode_ns, s->send_ns};
    for (int i = 0; i < 6; i++) {
        char s1[64], lab[400];
        snprintf(lab, sizeof lab, "%s,%s", jl, sl_prom_label(s1, sizeof s1, "stage", stages[i]));
        sl_prom_sample_def(pp, SL_M(WORKER_BUSY_SECONDS_TOTAL), lab, (double)ns[i] / 1e9);
    }
    counter(pp, jl, SL_M(WORKER_BACKPRESSURE_SECONDS_TOTAL), (double)st.backpressure_ns / 1e9);
    counter(pp, jl, SL_M(WORKER_BATCHES_SENT_TOTAL), (double)s->batches_sent);
    counter(pp, jl, SL_M(WORKER_BATCHES_ACKED_TOTAL), (double)s->batches_acked);
    counter(pp, jl, SL_M(WORKER_SAMPLES_ACKED_TOTAL), (double)s->samples_acked);
    counter(pp, jl, SL_M(WORKER_BYTES_SENT_TOTAL), (double)s->bytes_sent);
    counter(pp, jl, SL_M(WORKER_SHM_BATCHES_TOTAL), (double)s->shm_batches);
    counter(pp, jl, SL_M(WORKER_SHM_BYTES_TOTAL), (double)s->shm_bytes);
    counter(pp, jl, SL_M(WORKER_SHM_FALLBACKS_TOTAL), (double)st.shm_fallbacks);
    counter(pp, jl, SL_M(WORKER_SHM_ATTACHED_TOTAL), (double)s->shm_attached);
    counter(pp, jl, SL_M(WORKER_SHM_REFUSED_TOTAL), (double)s->shm_refused);
    counter(pp, jl, SL_M(WORKER_SHM_HELD_TOTAL), (double)s->shm_held);
    counter(pp, jl, SL_M(WORKER_SHM_RELEASED_TOTAL), (double)s->shm_released);
    counter(pp, jl, SL_M(WORKER_SHM_HELD_FREED_TOTAL), (double)s->shm_held_freed);
    gauge(pp, jl, SL_M(WORKER_SHM_CAPACITY_BYTES), (double)st.shm_capacity);
    gauge(pp, jl, SL_M(WORKER_SHM_USED_BYTES), (double)st.shm_used);
    counter(pp, jl, SL_M(WORKER_REDELIVERIES_TOTAL), (double)s->redeliveries);
    counter(pp, jl, SL_M(WORKER_BATCHES_DROPPED_TOTAL), (double)s->dropped);
    counter(pp, jl, SL_M(WORKER_BAD_FRAMES_TOTAL), (double)s->bad_frames);
    counter(pp, jl, SL_M(WORKER_AUTH_FAILURES_TOTAL), (double)s->auth_failures);
    sl_prom_family_def(pp, SL_M(WORKER_CONNECTIONS_CLOSED_TOTAL));
    const char *why[] = {"handshake_timeout", "idle", "evicted", "refused"};
    uint64_t wv[] = {s->handshake_timeouts, s->idle_closed, s->evicted, s->refused};
    for (int i = 0; i < 4; i++) {
        char r1[64], lab[400];
        snprintf(lab, sizeof lab, "%s,%s", jl, sl_prom_label(r1, sizeof r1, "reason", why[i]));
        sl_prom_sample_def(pp, SL_M(WORKER_CONNECTIONS_CLOSED_TOTAL), lab, (double)wv[i]);
    }
    gauge(pp, jl, SL_M(WORKER_CLIENTS), (double)s->clients_now);
    gauge(pp, jl, SL_M(WORKER_QUEUE_READY_BATCHES), (double)s->ready);
    order_metrics(pp, w, jl, s);
    gauge(pp, jl, SL_M(WORKER_MEMORY_USED_BYTES), (double)st.memory_used);
    gauge(pp, jl, SL_M(WORKER_MEMORY_PEAK_BYTES), (double)st.memory_peak);
    gauge(pp, jl, SL_M(WORKER_MEMORY_LIMIT_BYTES), (double)st.memory_limit);
    gauge(pp, jl, SL_M(WORKER_FINISHED), st.finished ? 1 : 0);
    if (ms) {
        sl_worker_lease_client_stats_t m;
        sl_worker_lease_client_stats(ms, &m);
        counter(pp, jl, SL_M(WORKER_LEASES_TOTAL), (double)m.leases);
        gauge(pp, jl, SL_M(WORKER_LEASES_HELD), (double)m.leases_held);
        counter(pp, jl, SL_M(WORKER_SPLIT_READS_TOTAL), (double)m.split_reads);
        counter(pp, jl, SL_M(WORKER_LEASES_REVOKED_TOTAL), (double)m.revoked);
        counter(pp, jl, SL_M(WORKER_HEARTBEATS_TOTAL), (double)m.heartbeats);
        counter(pp, jl, SL_M(WORKER_MASTER_RECONNECTS_TOTAL), (double)m.reconnects);
    }
}

char *sl_worker_admin_metrics_text(sl_worker_t *w, sl_worker_lease_client_t *ms)
{
    sl_prom_t p;
    sl_prom_init(&p, NULL);
    metrics_into(&p, w, ms);
    return sl_prom_finish(&p);
}

char *sl_worker_admin_status_json(sl_worker_t *w, sl_worker_lease_client_t *ms)
{
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    sl_error_t err = {0};
    bool failed = sl_worker_failed(w, &err);
    json_t *groups = json_array();
    for (uint32_t g = 0; g < st.num_groups; g++)
        json_array_append_new(groups, json_pack("{s:s, s:I, s:I, s:f}", "name", st.groups[g].name,
                                                "rows", (json_int_t)st.groups[g].rows,
                                                "unique_rows", (json_int_t)st.groups[g].unique_rows,
                                                "factor", st.groups[g].factor));
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:b, s:s?, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:{s:I, s:I, s:I, "
        "s:I, s:I, s:I}, s:{s:I, s:I, s:I}}",
        "worker_id", sl_worker_id(w), "job_id", sl_worker_job_id(w), "state",
        failed        ? "failed"
        : st.finished ? "finished"
                      : "serving",
        "finished", st.finished, "error", failed ? err.msg : NULL, "threads",
        (json_int_t)st.threads, "splits", (json_int_t)st.splits, "rows_read",
        (json_int_t)st.rows_read, "rows_kept", (json_int_t)st.rows_kept, "batches",
        (json_int_t)st.batches, "samples", (json_int_t)st.samples, "bytes_encoded",
        (json_int_t)st.bytes_encoded, "dedup_groups", groups, "server", "batches_sent",
        (json_int_t)st.server.batches_sent, "batches_acked", (json_int_t)st.server.batches_acked,
        "samples_acked", (json_int_t)st.server.samples_acked, "ready", (json_int_t)st.server.ready,
        "clients", (json_int_t)st.server.clients_now, "dropped", (json_int_t)st.server.dropped,
        "memory", "limit", (json_int_t)st.memory_limit, "used", (json_int_t)st.memory_used, "peak",
        (json_int_t)st.memory_peak);
    if (o) json_object_set_new(o, "splits_failed", json_integer((json_int_t)st.splits_failed));
    if (o)
        json_object_set_new(
            o, "shm",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "capacity",
                      (json_int_t)st.shm_capacity, "used", (json_int_t)st.shm_used, "high_water",
                      (json_int_t)st.shm_high_water, "held", (json_int_t)st.server.shm_held,
                      "released", (json_int_t)st.server.shm_released, "held_freed",
                      (json_int_t)st.server.shm_held_freed, "batches",
                      (json_int_t)st.server.shm_batches, "bytes", (json_int_t)st.server.shm_bytes,
                      "fallbacks", (json_int_t)st.shm_fallbacks, "attached",
                      (json_int_t)st.server.shm_attached, "refused",
                      (json_int_t)st.server.shm_refused));
    if (o && (st.records_read || st.records_bad))
        json_object_set_new(
            o, "kafka",
            json_pack("{s:I, s:I, s:I, s:I, s:I}", "records", (json_int_t)st.records_read,
                      "bad_records", (json_int_t)st.records_bad, "pauses",
                      (json_int_t)st.kafka_pauses, "wakes", (json_int_t)st.kafka_wakes,
                      "handed_back", (json_int_t)st.kafka_handed_back));
    if (o && st.pq_row_groups)
        json_object_set_new(o, "parquet",
                            json_pack("{s:I, s:I, s:I}", "row_groups", (json_int_t)st.pq_row_groups,
                                      "row_groups_skipped", (json_int_t)st.pq_row_groups_skipped,
                                      "rows_skipped", (json_int_t)st.pq_rows_skipped));
    if (o && ms) {
        sl_worker_lease_client_stats_t m;
        sl_worker_lease_client_stats(ms, &m);
        json_object_set_new(
            o, "master",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:I, s:I}", "leases",
                      (json_int_t)m.leases, "leases_held", (json_int_t)m.leases_held, "split_reads",
                      (json_int_t)m.split_reads, "splits_done", (json_int_t)m.splits_done,
                      "revoked", (json_int_t)m.revoked, "heartbeats", (json_int_t)m.heartbeats,
                      "reconnects", (json_int_t)m.reconnects, "stop", m.stop, "job_finished",
                      m.finished, "lease_timeout_ms", (json_int_t)m.lease_timeout_ms,
                      "heartbeat_ms", (json_int_t)m.heartbeat_ms));
    }
    char *text = sl_admin_json_text(NULL, o, JSON_COMPACT);
    json_decref(o);
    return text;
}

static void h_waiting(sl_admin_response_t *resp, int status)
{
    sl_admin_reply_json(resp, status,
                        json_pack("{s:s, s:s}", "state", "waiting", "error",
                                  "waiting for the master's first lease"));
}

/* /readyz (the endpoint's built-in): serving (not failed), and under a
 * master not retired. */
static bool worker_ready(void *ctx, char *why, size_t cap)
{
    wadmin_t *a = ctx;
    sl_error_t err = {0};
    sl_mutex_lock(&a->mu);
    sl_worker_lease_client_stats_t m = {0};
    if (a->ms) sl_worker_lease_client_stats(a->ms, &m);
    bool ready = false;
    if (!a->w)
        snprintf(why, cap, "waiting for the master's first lease");
    else if (sl_worker_failed(a->w, &err))
        snprintf(why, cap, "failed: %s", err.msg);
    else if (m.stop)
        snprintf(why, cap, "retired by the master: finishing");
    else
        ready = true;
    sl_mutex_unlock(&a->mu);
    return ready;
}

static void h_metrics(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    wadmin_t *a = ctx;
    sl_prom_t p;
    sl_prom_init(&p, NULL);
    /* Changes at every restart: changes() over it counts a crash loop on
     * any orchestrator (docs/OPERATIONS.md, SluiceWorkerCrashLooping). */
    char jl[300] = "";
    sl_mutex_lock(&a->mu);
    if (a->w) sl_prom_label(jl, sizeof jl, "job", sl_worker_job_id(a->w));
    gauge(&p, jl, SL_M(WORKER_START_TIME_SECONDS), a->started_unix_s);
    if (a->w)
        metrics_into(&p, a->w, a->ms);
    else /* nothing counted yet, no job yet */
        gauge(&p, NULL, SL_M(WORKER_WAITING), 1);
    sl_mutex_unlock(&a->mu);
    char *text = sl_prom_finish(&p);
    if (!text) {
        sl_admin_reply_error(resp, 500, "out of memory");
        return;
    }
    sl_admin_reply_text(resp, 200, SL_PROM_CONTENT_TYPE, text);
    sl_strfree(NULL, text);
}

static void h_status(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    wadmin_t *a = ctx;
    sl_mutex_lock(&a->mu);
    char *text = a->w ? sl_worker_admin_status_json(a->w, a->ms) : NULL;
    bool waiting = !a->w;
    sl_mutex_unlock(&a->mu);
    if (waiting) {
        h_waiting(resp, 200);
        return;
    }
    if (!text) {
        sl_admin_reply_error(resp, 500, "out of memory");
        return;
    }
    sl_admin_reply_text(resp, 200, NULL, text);
    sl_strfree(NULL, text);
}

static const sl_admin_route_t routes[] = {
    {"GET", "/", false, sl_admin_ui_page},
    {"GET", "/ui/{}", false, sl_admin_ui_handler},
    {"GET", "/metrics", false, h_metrics},
    {"GET", "/status", false, h_status},
};

sl_err_t sl_worker_admin_start(sl_worker_t *w, sl_worker_lease_client_t *ms, const char *address,
                               sl_worker_admin_t **out, sl_error_t *err)
{
    sl_admin_opts_t o = {.address = address};
    return sl_worker_admin_serve(w, ms, &o, out, err);
}

sl_err_t sl_worker_admin_serve(sl_worker_t *w, sl_worker_lease_client_t *ms,
                               const sl_admin_opts_t *endpoint, sl_worker_admin_t **out,
                               sl_error_t *err)
{
    const sl_allocator_t *al = sl_allocator_default();
    sl_worker_admin_t *a = sl_calloc(al, 1, sizeof *a);
    if (!a) return sl_error_set(err, SL_ERR_NOMEM, "worker admin: out of memory");
    a->ctx.w = w;
    a->ctx.ms = ms;
    /* The wall clock, not sl_clock: a timestamp people and Prometheus read
     * (as process_start_time_seconds), compared only for change. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    a->ctx.started_unix_s = (double)now.tv_sec + (double)(now.tv_nsec / 1000000) / 1e3;
    sl_mutex_init(&a->ctx.mu);
    sl_admin_opts_t o = *endpoint;
    o.token = NULL;
    o.routes = routes;
    o.num_routes = sizeof routes / sizeof routes[0];
    o.ctx = &a->ctx;
    o.ready = worker_ready;
    sl_err_t rc = sl_admin_start(&o, &a->admin, err);
    if (rc) {
        sl_mutex_destroy(&a->ctx.mu);
        sl_free(al, a, sizeof *a);
        return rc;
    }
    *out = a;
    return SL_OK;
}

uint16_t sl_worker_admin_port(const sl_worker_admin_t *a)
{
    return sl_admin_port(a->admin);
}

void sl_worker_admin_set(sl_worker_admin_t *a, sl_worker_t *w, sl_worker_lease_client_t *ms)
{
    sl_mutex_lock(&a->ctx.mu);
    a->ctx.w = w;
    a->ctx.ms = ms;
    sl_mutex_unlock(&a->ctx.mu);
}

void sl_worker_admin_stop(sl_worker_admin_t *a)
{
    if (!a) return;
    sl_admin_stop(a->admin);
    sl_mutex_destroy(&a->ctx.mu);
    sl_free(sl_allocator_default(), a, sizeof *a);
}

/* The master's admin routes (admin.h, docs/ADMIN.md) on the HTTP endpoint
 * of dpp/admin/endpoint.h: thin handlers that validate the request, turn
 * its JSON into the plain calls of master.h and their answers (the views)
 * into JSON, and map error values to HTTP statuses. Handlers run on
 * libmicrohttpd's thread; every sl_master_* call takes the master's lock
 * itself.
 *
 *   GET    /  /ui/{file}        the status page (dpp/admin/ui.h)
 *   GET    /healthz  /readyz  /metrics  /status  /workers
 *   GET    /jobs  /jobs/{id}
 *   POST   /jobs               (token)  submit
 *   DELETE /jobs/{id}          (token)  remove; DELETE /jobs {"id": ...} too
 *   POST   /jobs/{id}/scale    (token)  {"workers": N}
 *   POST   /jobs/{id}/resubmit (token)  {"resume_token(s)": ...}: start it again */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <gnutls/gnutls.h>

#include "common/err.h"
#include "common/mem.h"
#include "common/prom.h"
#include "dpp/admin/ui.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/state/admin_limits.h"

/* ---- POST /jobs: the body as a submission ------------------------------------------ */

static sl_err_t get_u32(const json_t *body, const char *key, uint32_t def, uint32_t min,
                        uint32_t max, uint32_t *out, sl_error_t *err)
{
    const json_t *v = json_object_get(body, key);
    if (v == NULL) {
        *out = def;
        return SL_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return sl_error_set(err, SL_ERR_INVALID, "$.%s: an integer %u..%u", key, min, max);
    *out = (uint32_t)json_integer_value(v);
    return SL_OK;
}

/* A token: a base64 string (RFC 4648). @return false when it is not one;
 * on true, free out->data with gnutls_free (GnuTLS allocated it). */
static bool decode_token(const json_t *t, gnutls_datum_t *out)
{
    const char *s = json_string_value(t);
    if (s == NULL) return false;
    size_t n = strlen(s);
    if (n > UINT32_MAX) return false;
    gnutls_datum_t in = {.data = (unsigned char *)s, .size = (unsigned)n};
    return gnutls_base64_decode2(&in, out) == 0;
}

/* The resume tokens of a body, decoded: "resume_token" (one) or
 * "resume_tokens" (one per trainer rank), never both. */
typedef struct tokens {
    uint32_t n;
    gnutls_datum_t *raw;  /* [n], each freed with gnutls_free */
    const uint8_t **data; /* [n] */
    size_t *len;          /* [n] */
    const char *key;      /* the key they came in, for messages */
} tokens_t;

static void tokens_free(const sl_allocator_t *a, tokens_t *t)
{
    for (uint32_t k = 0; t->raw != NULL && k < t->n; k++)
        gnutls_free(t->raw[k].data);
    sl_free(a, t->raw, (size_t)t->n * sizeof *t->raw);
    sl_free(a, t->data, (size_t)t->n * sizeof *t->data);
    sl_free(a, t->len, (size_t)t->n * sizeof *t->len);
    *t = (tokens_t){0};
}

/* required: at least one token. On error nothing is left to free. */
static sl_err_t tokens_decode(const sl_allocator_t *a, const json_t *body, bool required,
                              tokens_t *t, sl_error_t *err)
{
    *t = (tokens_t){0};
    const json_t *one = json_object_get(body, "resume_token");
    const json_t *many = json_object_get(body, "resume_tokens");
    if (one != NULL && many != NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "body: give \"resume_token\" or \"resume_tokens\", not both");
    if (many != NULL && (!json_is_array(many) || json_array_size(many) == 0 ||
                         json_array_size(many) > SL_MASTER_MAX_RESUME_TOKENS))
        return sl_error_set(err, SL_ERR_INVALID,
                            "body: \"resume_tokens\" is an array of 1..%d base64 strings",
                            SL_MASTER_MAX_RESUME_TOKENS);
    if (required && one == NULL && many == NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "body: give \"resume_token\" (base64) or \"resume_tokens\" (an "
                            "array of 1..%d base64 strings, one per rank)",
                            SL_MASTER_MAX_RESUME_TOKENS);
    uint32_t n = one != NULL ? 1 : many != NULL ? (uint32_t)json_array_size(many) : 0;
    if (n == 0) return SL_OK;
    t->key = one != NULL ? "resume_token" : "resume_tokens";
    t->raw = sl_calloc(a, n, sizeof *t->raw);
    t->data = sl_calloc(a, n, sizeof *t->data);
    t->len = sl_calloc(a, n, sizeof *t->len);
    t->n = n;
    if (t->raw == NULL || t->data == NULL || t->len == NULL) {
        tokens_free(a, t);
        return sl_error_set(err, SL_ERR_NOMEM, "body: %u resume tokens", n);
    }
    for (uint32_t k = 0; k < n; k++) {
        if (!decode_token(one != NULL ? one : json_array_get(many, k), &t->raw[k])) {
            tokens_free(a, t);
            if (one != NULL)
                return sl_error_set(err, SL_ERR_INVALID, "body: \"resume_token\" is not base64");
            return sl_error_set(err, SL_ERR_INVALID,
                                "body: \"resume_tokens\"[%u] is not a base64 string", k);
        }
        t->data[k] = t->raw[k].data;
        t->len[k] = t->raw[k].size;
    }
    return SL_OK;
}

/* A damaged token is the request's fault: 400, named by its key. */
static sl_err_t token_refusal(sl_err_t rc, const tokens_t *t, sl_error_t *err)
{
    if (rc != SL_ERR_CORRUPT && rc != SL_ERR_TRUNCATED && rc != SL_ERR_VERSION) return rc;
    sl_error_prefix(err, "%s: ", t->key != NULL ? t->key : "resume_token");
    return err->code = SL_ERR_INVALID;
}

sl_err_t sl_master_admin_job_submit(sl_master_t *m, const json_t *body, char **job_id,
                                    sl_error_t *err)
{
    return sl_master_admin_job_submit_problems(m, body, job_id, NULL, err);
}

sl_err_t sl_master_admin_job_submit_problems(sl_master_t *m, const json_t *body, char **job_id,
                                             sl_pipeline_problems_t *problems, sl_error_t *err)
{
    if (job_id != NULL) *job_id = NULL;
    if (!json_is_object(body)) return sl_error_set(err, SL_ERR_INVALID, "body: not a JSON object");
    static const char *keys[] = {"spec",        "ranks",   "sharding",     "min_workers",
                                 "max_workers", "workers", "resume_token", "resume_tokens"};
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)body, key, val)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            known = known || strcmp(key, keys[i]) == 0;
        if (!known) return sl_error_set(err, SL_ERR_INVALID, "body: unknown key \"%s\"", key);
    }
    const json_t *specj = json_object_get(body, "spec");
    if (!json_is_object(specj))
        return sl_error_set(err, SL_ERR_INVALID, "body: \"spec\" (a job spec object) is required");
    uint32_t ranks, min_w, max_w, workers;
    /* ranks 0 is refused, not taken for 1: a client must attach with a
     * world size equal to it. */
    sl_err_t rc = get_u32(body, "ranks", 1, 1, 65536, &ranks, err);
    if (rc == SL_OK) rc = get_u32(body, "min_workers", 1, 0, 4096, &min_w, err);
    if (rc == SL_OK) rc = get_u32(body, "max_workers", min_w, 0, 4096, &max_w, err);
    if (rc == SL_OK) rc = get_u32(body, "workers", min_w, 0, 4096, &workers, err);
    if (rc != SL_OK) return rc;
    if (min_w == 0) min_w = 1;
    if (max_w < min_w)
        return sl_error_set(err, SL_ERR_INVALID, "body: max_workers %u < min_workers %u", max_w,
                            min_w);
    const json_t *sh = json_object_get(body, "sharding");
    bool is_static = false;
    if (sh != NULL) {
        const char *s = json_string_value(sh);
        if (s == NULL || (strcmp(s, "static") != 0 && strcmp(s, "dynamic") != 0))
            return sl_error_set(err, SL_ERR_INVALID,
                                "body: \"sharding\" is \"dynamic\" or \"static\"");
        is_static = strcmp(s, "static") == 0;
    }
    /* "resume_token": one token; "resume_tokens": one per trainer rank
     * (the job starts with what every rank delivered). */
    const sl_allocator_t *a = sl_master_allocator(m);
    tokens_t tk;
    SL_FORWARD_IF_ERROR(tokens_decode(a, body, false, &tk, err));
    char *text = NULL;
    sl_pipeline_problems_t pr = {0};
    /* The spec as workers get it in their leases: compact, keys sorted. */
    text = sl_admin_json_text(a, specj, JSON_COMPACT | JSON_SORT_KEYS);
    if (text == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "job spec text");
        goto out;
    }
    sl_master_submit_t req = {.spec_json = text,
                              .ranks = ranks,
                              .static_sharding = is_static,
                              .min_workers = min_w,
                              .max_workers = max_w,
                              .workers = workers,
                              .tokens = tk.data,
                              .token_lens = tk.len,
                              .num_tokens = tk.n};
    rc = token_refusal(sl_master_job_submit(m, &req, job_id, &pr, err), &tk, err);
    /* The spec's problems by their path in the body: "$.transforms[1]..."
     * is "$.spec.transforms[1]..." there. */
    if (rc != SL_OK && pr.count > 0 && problems != NULL) {
        uint32_t first = problems->count;
        for (uint32_t i = 0; rc != SL_ERR_NOMEM && i < pr.count; i++) {
            const char *p = pr.items[i];
            if (!sl_pipeline_problems_add(problems, "$.spec%s", p[0] == '$' ? p + 1 : p))
                rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
        }
        if (rc != SL_ERR_NOMEM) rc = sl_pipeline_problems_error(problems, first, "spec", err);
    }
out:
    sl_pipeline_problems_free(&pr);
    sl_strfree(a, text);
    tokens_free(a, &tk);
    return rc;
}

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

/* ---- routes ----------------------------------------------------------------------- */

/* The HTTP status for a master error value. */
static int status_of(sl_err_t rc)
{
    switch (rc) {
    case SL_ERR_INVALID:
    case SL_ERR_CORRUPT:
    case SL_ERR_TRUNCATED:
    case SL_ERR_VERSION:
        return 400;
    case SL_ERR_NOT_FOUND:
        return 404;
    case SL_ERR_AGAIN:
        return 409;
    case SL_ERR_TOO_LARGE:
        return 429;
    case SL_ERR_UNSUPPORTED:
        return 501;
    case SL_ERR_NOMEM:
        return 503;
    default:
        return 500;
    }
}

static void reply_err(sl_admin_response_t *resp, sl_err_t rc, const sl_error_t *err)
{
    sl_admin_reply_error(resp, status_of(rc), "%s", err->msg[0] ? err->msg : sl_err_str(rc));
}

/* A refusal of a job spec lists every problem, not only the first:
 * {"error": "...", "problems": ["$.spec.source.table: ...", ...]}. */
static void reply_add_problems(sl_admin_response_t *resp, const sl_pipeline_problems_t *problems)
{
    json_t *o = resp->body != NULL ? json_loads(resp->body, 0, NULL) : NULL;
    json_t *arr = json_array();
    for (uint32_t i = 0; o != NULL && arr != NULL && i < problems->count; i++)
        json_array_append_new(arr, json_string(problems->items[i]));
    if (o == NULL || arr == NULL) { /* the error alone then */
        json_decref(o);
        json_decref(arr);
        return;
    }
    json_object_set_new(o, "problems", arr);
    sl_admin_reply_json(resp, resp->status, o);
}

/* A JSON reply built by the master, or 503 when it ran out of memory. */
static void reply_built(sl_admin_response_t *resp, json_t *j)
{
    if (!j) {
        sl_admin_reply_error(resp, 503, "out of memory");
        return;
    }
    sl_admin_reply_json(resp, 200, j);
}

/* /readyz (the endpoint's built-in): the state is open. */
static bool master_ready(void *ctx, char *why, size_t cap)
{
    if (sl_master_ready(ctx)) return true;
    snprintf(why, cap, "not ready: the master's state failed (see its log)");
    return false;
}

static void h_metrics(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    char *text = sl_master_metrics_text(ctx);
    if (!text) {
        sl_admin_reply_error(resp, 503, "out of memory");
        return;
    }
    sl_admin_reply_text(resp, 200, SL_PROM_CONTENT_TYPE, text);
    sl_strfree(sl_master_allocator(ctx), text);
}

static void h_status(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_admin_status_json(ctx));
}

static void h_workers(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_admin_workers_json(ctx));
}

static void h_jobs_list(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    reply_built(resp, sl_master_admin_jobs_json(ctx));
}

static void h_job_get(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *j = NULL;
    sl_error_t err = {0};
    sl_err_t rc = sl_master_admin_job_json(ctx, req->param, &j, &err);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    sl_admin_reply_json(resp, 200, j);
}

/* 201 with the new job's JSON (as GET /jobs/{id}). */
static void h_job_submit(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    if (!json_is_object(json_object_get(body, "spec"))) {
        json_decref(body);
        sl_admin_reply_error(resp, 400, "$.spec: required, a job spec object (docs/JOBS.md)");
        return;
    }
    char *id = NULL;
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_err_t rc = sl_master_admin_job_submit_problems(ctx, body, &id, &problems, &err);
    json_decref(body);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        if (problems.count > 0) reply_add_problems(resp, &problems);
        sl_pipeline_problems_free(&problems);
        return;
    }
    json_t *j = NULL;
    /* The job may be gone again already (a concurrent DELETE): then the id
     * alone. */
    if (sl_master_admin_job_json(ctx, id, &j, &err) != SL_OK) j = json_pack("{s:s}", "id", id);
    sl_strfree(sl_master_allocator(ctx), id);
    sl_admin_reply_json(resp, 201, j);
}

static void remove_job(void *ctx, const char *id, sl_admin_response_t *resp)
{
    sl_error_t err = {0};
    sl_err_t rc = sl_master_job_remove(ctx, id, &err);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    sl_admin_reply_json(resp, 200, json_pack("{s:s, s:b}", "id", id, "removed", 1));
}

static void h_job_delete(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    remove_job(ctx, req->param, resp);
}

/* DELETE /jobs {"id": "..."}: the collection form of DELETE /jobs/{id}. */
static void h_jobs_delete(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    const char *id = json_string_value(json_object_get(body, "id"));
    if (!id || !*id)
        sl_admin_reply_error(resp, 400, "$.id: required, the id of the job to remove");
    else
        remove_job(ctx, id, resp);
    json_decref(body);
}

static void h_job_scale(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    json_t *w = json_object_get(body, "workers");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "workers") != 0) {
            sl_admin_reply_error(resp, 400, "$.%s: unknown key (only \"workers\")", key);
            json_decref(body);
            return;
        }
    }
    if (!json_is_integer(w) || json_integer_value(w) < 0 ||
        json_integer_value(w) > (json_int_t)UINT32_MAX) {
        sl_admin_reply_error(resp, 400, "$.workers: required, an integer in [0, 2^32)");
        json_decref(body);
        return;
    }
    uint32_t want = (uint32_t)json_integer_value(w), set = 0;
    json_decref(body);
    sl_error_t err = {0};
    sl_err_t rc = sl_master_job_scale(ctx, req->param, want, &set, &err);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    sl_admin_reply_json(resp, 200,
                        json_pack("{s:s, s:i, s:i}", "id", req->param, "requested",
                                  (json_int_t)want, "workers", (json_int_t)set));
}

/* POST /jobs/{id}/resubmit {"resume_token": B64} or {"resume_tokens":
 * [B64, ...]}: the job started again from the tokens, in one step (the
 * tokens checked before the job is replaced); 200 with the new job. */
static void h_job_resubmit(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_t *body = sl_admin_parse_json(req, resp);
    if (!body) return;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "resume_token") != 0 && strcmp(key, "resume_tokens") != 0) {
            sl_admin_reply_error(resp, 400,
                                 "$.%s: unknown key (\"resume_token\" or \"resume_tokens\")", key);
            json_decref(body);
            return;
        }
    }
    const sl_allocator_t *a = sl_master_allocator(ctx);
    tokens_t tk;
    sl_error_t err = {0};
    sl_err_t rc = tokens_decode(a, body, true, &tk, &err);
    json_decref(body);
    if (rc == SL_OK)
        rc = token_refusal(sl_master_job_resubmit(ctx, req->param, tk.data, tk.len, tk.n, &err),
                           &tk, &err);
    tokens_free(a, &tk);
    if (rc != SL_OK) {
        reply_err(resp, rc, &err);
        return;
    }
    json_t *j = NULL;
    if (sl_master_admin_job_json(ctx, req->param, &j, &err) != SL_OK)
        j = json_pack("{s:s}", "id", req->param);
    sl_admin_reply_json(resp, 200, j);
}

static void h_page(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    (void)req;
    sl_admin_ui_reply(resp, "status.html");
}

static const sl_admin_route_t routes[] = {
    {"GET", "/", false, h_page},
    {"GET", "/ui/{}", false, sl_admin_ui_handler},
    {"GET", "/metrics", false, h_metrics},
    {"GET", "/status", false, h_status},
    {"GET", "/workers", false, h_workers},
    {"GET", "/jobs", false, h_jobs_list},
    {"POST", "/jobs", true, h_job_submit},
    {"DELETE", "/jobs", true, h_jobs_delete},
    {"GET", "/jobs/{}", false, h_job_get},
    {"DELETE", "/jobs/{}", true, h_job_delete},
    {"POST", "/jobs/{}/scale", true, h_job_scale},
    {"POST", "/jobs/{}/resubmit", true, h_job_resubmit},
};

sl_err_t sl_master_admin_serve(sl_master_t *m, const sl_admin_opts_t *endpoint, sl_admin_t **out,
                               sl_error_t *err)
{
    sl_admin_opts_t o = *endpoint;
    o.max_body_bytes = SL_MASTER_ADMIN_MAX_BODY;
    o.routes = routes;
    o.num_routes = sizeof routes / sizeof routes[0];
    o.ctx = m;
    o.ready = master_ready;
    o.allocator = sl_master_allocator(m);
    return sl_admin_start(&o, out, err);
}

sl_err_t sl_master_admin_start(sl_master_t *m, const char *address, const char *token,
                               sl_admin_t **out, sl_error_t *err)
{
    sl_admin_opts_t o = {.address = address, .token = token};
    return sl_master_admin_serve(m, &o, out, err);
}

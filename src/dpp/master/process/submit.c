/* Jobs in and out of the master (master.h): a submission checked as its
 * workers will use it (the spec parsed, bound to its source's schema and
 * cut into splits) before the state takes it, a resubmission with resume
 * tokens in place of a job of the same id, and a removal. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/master/process/master_internal.h"
#include "dpp/pipeline/lenient.h"
#include "dpp/pipeline/plan.h"
#include "store/store.h"
#include "warehouse/pq_dataset.h"
#include "warehouse/warehouse.h"

/* Everything the workers will do with the spec before reading a row, done
 * here so that a job that cannot run is refused instead of failing in
 * every worker: parse, open the table (its schema), bind the spec to it as
 * a worker's plan does, and check every file the spec names (vocabularies:
 * present, regular, under their cap; not read), then cut the table into
 * splits. A Kafka job (source.kafka) binds to its inline schema and is cut
 * into partition chunks with the brokers' help (kafka_splits.c). Every
 * problem goes to *problems by its path in the spec. */
static void add_problem(void *ctx, const char *problem)
{
    sl_pipeline_problems_add(ctx, "%s", problem);
}

/* A Parquet dataset (source.parquet): its mapping resolved against the
 * first file (the schema the plan binds to), then every footer read and
 * cut into splits of row groups, those the job's timestamp and label
 * ranges rule out by their statistics left out (pq_dataset.h). */
static sl_err_t parquet_splits(sl_pipeline_job_t *job, const sl_store_opts_t *so, sl_wh_pqds_t **ds,
                               sl_wh_splits_t **splits, sl_wh_pqds_plan_stats_t *ps,
                               sl_pipeline_problems_t *pr, sl_error_t *err)
{
    uint32_t before = pr->count;
    sl_err_t rc = sl_wh_pqds_open_with(job->parquet, so, job->parquet_columns, job->partitions,
                                       NULL, add_problem, pr, ds, err);
    if (rc == SL_OK) rc = sl_pipeline_plan_check(job, sl_wh_pqds_mapping(*ds)->schema, pr, err);
    sl_pipeline_range_t ranges[16];
    uint32_t nr = sl_pipeline_job_ranges(job, ranges, 16);
    nr = nr > 16 ? 16 : nr;
    if (rc == SL_OK) rc = sl_wh_pqds_plan(*ds, job->split_rows, ranges, nr, splits, ps, err);
    if (rc == SL_OK && (*splits)->count == 0)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "no data (no splits: %" PRIu64 " row groups, %" PRIu64
                          " ruled out by their statistics)",
                          ps->row_groups, ps->row_groups_skipped);
    if (rc == SL_OK)
        sl_log_kv(SL_LOG_INFO, SL_EV(PARQUET_PLANNED),
                  (SL_KV_STR("job", job->id), SL_KV_U64("splits", (*splits)->count),
                   SL_KV_U64("row_groups", ps->row_groups),
                   SL_KV_U64("row_groups_skipped", ps->row_groups_skipped),
                   SL_KV_U64("rows_skipped", ps->rows_skipped)),
                  "job %s: Parquet dataset %s cut into %u splits; %" PRIu64 " of %" PRIu64
                  " row groups ruled out by their statistics",
                  job->id, job->parquet, (*splits)->count, ps->row_groups_skipped, ps->row_groups);
    if (rc != SL_OK && rc != SL_ERR_NOMEM && pr->count == before &&
        !sl_pipeline_problems_add(pr, "$.source.parquet: '%s': %s", job->parquet, err->msg))
        rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
    return rc;
}

static sl_err_t check_spec(const char *text, bool resumed, const sl_store_opts_t *so,
                           sl_pipeline_job_t **job, sl_wh_table_t **table, sl_wh_filter_t **filter,
                           sl_wh_pqds_t **ds, sl_wh_splits_t **splits, sl_wh_pqds_plan_stats_t *ps,
                           mp_kafka_stream_t *stream, sl_pipeline_problems_t *problems,
                           sl_error_t *err)
{
    sl_pipeline_problems_t pr = {0};
    sl_err_t rc = sl_pipeline_job_parse(text, strlen(text), job, &pr, err);
    if (rc == SL_ERR_INVALID && pr.count > 0)
        sl_pipeline_bind_anyway(text, strlen(text), NULL, so, &pr);
    if (rc == SL_OK && (*job)->parquet) {
        rc = parquet_splits(*job, so, ds, splits, ps, &pr, err);
    } else if (rc == SL_OK && (*job)->is_kafka) {
        /* a bounded replay: its chunks are the splits; a stream: its
         * partitions, the state makes the chunks (kafka_splits.c) */
        rc = sl_pipeline_plan_check(*job, (*job)->kafka.schema, &pr, err);
        if (rc == SL_OK && (*job)->kafka.stop == SL_PIPELINE_KAFKA_NONE)
            rc = mp_kafka_stream(*job, resumed, stream, &pr, err);
        else if (rc == SL_OK)
            rc = mp_kafka_splits(*job, splits, &pr, err);
    } else if (rc == SL_OK) {
        rc = sl_wh_table_open_with((*job)->table, so, NULL, table, err);
        if (rc == SL_OK && (*job)->partitions != NULL)
            rc = sl_wh_filter_parse((*job)->partitions, NULL, filter, err);
        if (rc == SL_OK)
            rc = sl_wh_table_splits(*table, *filter, (*job)->stripes_per_split, splits, err);
        if (rc == SL_OK && (*splits)->count == 0)
            rc = sl_error_set(err, SL_ERR_INVALID, "no data (no splits)");
        if (rc != SL_OK && rc != SL_ERR_NOMEM &&
            !sl_pipeline_problems_add(&pr, "$.source.table: table '%s': %s", (*job)->table,
                                      err->msg))
            rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
        if (rc == SL_OK) rc = sl_pipeline_plan_check(*job, sl_wh_table_schema(*table), &pr, err);
    }
    if (rc != SL_OK && rc != SL_ERR_NOMEM && pr.count > 0) {
        rc = sl_pipeline_problems_error(&pr, 0, "spec", err);
        for (uint32_t i = 0; problems != NULL && i < pr.count; i++)
            if (!sl_pipeline_problems_add(problems, "%s", pr.items[i]))
                rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
    }
    sl_pipeline_problems_free(&pr);
    return rc;
}

/* What this master runs of "order" (docs/DESIGN.md, "A deterministic
 * order"): the deterministic order numbers every batch of an epoch and
 * deals batch g to rank g mod R, which static sharding (a rank's own
 * splits) contradicts. A resume continues the sequence less the batches
 * handed out (state_order_skip.c). */
static sl_err_t check_order(const sl_pipeline_job_t *job, const sl_master_submit_t *req,
                            sl_error_t *err)
{
    if (job->order != SL_PIPELINE_ORDER_DETERMINISTIC) return SL_OK;
    if (req->static_sharding)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': \"order\": \"deterministic\" deals batch g to rank g "
                            "mod ranks; static sharding gives each rank its own splits instead: "
                            "submit with --sharding dynamic",
                            job->id);
    return SL_OK;
}

/* The deterministic order's lease window (docs/DESIGN.md): two splits per
 * worker the job may have, so that each worker has one split to read
 * while another waits for its base. */
static uint32_t order_window(const sl_master_submit_t *req)
{
    uint32_t w = req->max_workers;
    return w > UINT32_MAX / 2 ? UINT32_MAX : w < 1 ? 2 : 2 * w;
}

/* Submit req; replace: in place of the job of that id (resubmit). */
static sl_err_t submit(sl_master_t *m, const sl_master_submit_t *req, bool replace, char **job_id,
                       sl_pipeline_problems_t *problems, sl_error_t *err);

sl_err_t sl_master_job_submit(sl_master_t *m, const sl_master_submit_t *req, char **job_id,
                              sl_pipeline_problems_t *problems, sl_error_t *err)
{
    return submit(m, req, false, job_id, problems, err);
}

sl_err_t sl_master_job_resubmit(sl_master_t *m, const char *job_id, const uint8_t *const *tokens,
                                const size_t *token_lens, uint32_t num_tokens, sl_error_t *err)
{
    if (num_tokens == 0)
        return sl_error_set(err, SL_ERR_INVALID, "resubmit: at least one resume token");
    /* What the job was submitted with, copied: the spec is checked and cut
     * into splits again outside the lock, as a submission is. */
    sl_master_submit_t req = {.tokens = tokens, .token_lens = token_lens, .num_tokens = num_tokens};
    char *spec = NULL;
    sl_master_state_job_status_t st;
    sl_mutex_lock(&m->mu);
    sl_err_t rc = sl_master_state_job_status(m->st, job_id, &st, err);
    if (rc == SL_OK) {
        spec = sl_strdup(m->a, st.spec_json);
        req.ranks = st.ranks;
        req.static_sharding = st.static_sharding;
        req.min_workers = st.min_workers;
        req.max_workers = st.max_workers;
        req.workers = st.min_workers;
    }
    sl_mutex_unlock(&m->mu);
    if (rc != SL_OK) return rc;
    if (spec == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': spec", job_id);
    req.spec_json = spec;
    rc = submit(m, &req, true, NULL, NULL, err);
    sl_strfree(m->a, spec);
    return rc;
}

static sl_err_t submit(sl_master_t *m, const sl_master_submit_t *req, bool replace, char **job_id,
                       sl_pipeline_problems_t *problems, sl_error_t *err)
{
    if (job_id != NULL) *job_id = NULL;
    if (req->spec_json == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "submit: a job spec is required");
    if (req->ranks < 1)
        return sl_error_set(err, SL_ERR_INVALID, "submit: ranks %u, at least 1", req->ranks);
    if (req->min_workers < 1 || req->max_workers < req->min_workers)
        return sl_error_set(err, SL_ERR_INVALID, "submit: workers %u..%u, want 1 <= min <= max",
                            req->min_workers, req->max_workers);
    if (req->num_tokens > SL_MASTER_MAX_RESUME_TOKENS)
        return sl_error_set(err, SL_ERR_INVALID, "submit: %u resume tokens, at most %d",
                            req->num_tokens, SL_MASTER_MAX_RESUME_TOKENS);
    sl_pipeline_job_t *job = NULL;
    sl_wh_table_t *table = NULL;
    sl_wh_filter_t *filter = NULL;
    sl_wh_splits_t *splits = NULL;
    mp_kafka_stream_t stream = {0};
    sl_wh_pqds_t *ds = NULL;
    sl_wh_pqds_plan_stats_t ps = {0}; /* a Parquet job's row groups and statistics skipping */
    /* a hung object of the source fails the submit within the master's
     * --store-timeout-ms x --store-max-attempts (and backoff) */
    sl_store_opts_t so = {.request_timeout_ms = m->opts.store_timeout_ms,
                          .max_attempts = m->opts.store_max_attempts};
    sl_err_t rc = check_spec(req->spec_json, req->num_tokens > 0, &so, &job, &table, &filter, &ds,
                             &splits, &ps, &stream, problems, err);
    if (rc == SL_OK) rc = check_order(job, req, err);
    uint64_t fp = 0;     /* a Kafka job has no fingerprint: its records are not a fixed input */
    uint64_t prefix = 0; /* the autocache's key; 0: not cacheable */
    const sl_wh_schema_t *schema = table ? sl_wh_table_schema(table)
                                   : ds  ? sl_wh_pqds_mapping(ds)->schema
                                         : NULL;
    if (rc == SL_OK && !job->is_kafka) rc = sl_pipeline_fingerprint(job, schema, splits, &fp, err);
    if (rc == SL_OK && !job->is_kafka)
        rc = sl_pipeline_prefix_fingerprint(job, schema, splits, &prefix, err);
    /* one rank always hands out as many batches as itself: nothing to do;
     * a stream's epoch never ends */
    if (rc == SL_OK && job->equal_batches_per_rank && req->ranks > 1 && job->is_kafka)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "job '%s': $.batch.equal_batches_per_rank needs a table (or Parquet) "
                          "source: a Kafka job's epoch has no end to cut its ranks' batches at",
                          job->id);
    if (rc != SL_OK) goto out;
    sl_master_state_job_spec_t spec = {
        .job_id = job->id,
        .splits = splits != NULL ? splits->items : NULL,
        .num_splits = splits != NULL ? splits->count : 0,
        .kafka_partitions = stream.parts,
        .num_kafka_partitions = stream.n,
        .kafka_chunk = stream.parts != NULL ? job->kafka.chunk : 0,
        .epochs = job->epochs,
        .seed = job->seed,
        .shuffle = job->shuffle_splits,
        .spec_json = req->spec_json,
        .ranks = req->ranks,
        .static_sharding = req->static_sharding,
        .min_workers = req->min_workers,
        .max_workers = req->max_workers,
        .skip_bad_splits = job->skip_bad_splits,
        .plan_fingerprint = fp,
        .share = job->share,
        .prefix_fingerprint = prefix,
        .parquet_row_groups = ps.row_groups,
        .parquet_row_groups_skipped = ps.row_groups_skipped,
        .parquet_rows_skipped = ps.rows_skipped,
        .deterministic = job->order == SL_PIPELINE_ORDER_DETERMINISTIC,
        .order_window = order_window(req),
        .equal_batches_per_rank = job->equal_batches_per_rank && req->ranks > 1};
    uint64_t ticket = 0;
    bool began = false;
    sl_mutex_lock(&m->mu);
    if (m->failed) {
        rc = sl_error_set(err, SL_ERR_IO, "master state failed: %s", m->failure);
    } else if (!replace && mp_job_find(m, job->id) != NULL) {
        rc = sl_error_set(err, SL_ERR_AGAIN, "job '%s' exists already", job->id);
    } else if (stream.low != NULL &&
               (rc = mp_kafka_tokens_retained(m, &spec, req, stream.low, err)) != SL_OK) {
        /* refused: offsets the tokens need were deleted by retention */
    } else if (replace) {
        /* its workers keep their registrations and take the new job's
         * leases; the old job's leases and uncommitted rows are gone */
        rc = sl_master_state_job_replace(m->st, &spec, (const void *const *)req->tokens,
                                         req->token_lens, req->num_tokens, err);
        if (rc == SL_OK) began = (rc = mp_sync_begin(m, &ticket, err)) == SL_OK;
        mp_job *old = mp_job_find(m, job->id);
        if (rc == SL_OK && old != NULL) old->used = false;
        if (rc == SL_OK &&
            mp_job_add(m, job->id, req->min_workers, req->max_workers, req->workers) == NULL)
            rc = sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': no room", job->id);
    } else {
        rc = req->num_tokens > 0
                 ? sl_master_state_job_resume_ranks(m->st, &spec, (const void *const *)req->tokens,
                                                    req->token_lens, req->num_tokens, err)
                 : sl_master_state_job_add(m->st, &spec, err);
        if (rc == SL_OK) began = (rc = mp_sync_begin(m, &ticket, err)) == SL_OK;
        mp_job *j = rc == SL_OK
                        ? mp_job_add(m, job->id, req->min_workers, req->max_workers, req->workers)
                        : NULL;
        if (rc == SL_OK && j == NULL)
            rc = sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': no room", job->id);
        if (j != NULL) {
            sl_log_kv(SL_LOG_INFO, SL_EV(JOB_SUBMITTED),
                      (SL_KV_STR("job", job->id), SL_KV_U64("splits", spec.num_splits),
                       SL_KV_U64("epochs", job->epochs), SL_KV_U64("ranks", req->ranks),
                       SL_KV_STR("sharding", req->static_sharding ? "static" : "dynamic"),
                       SL_KV_U64("min_workers", req->min_workers),
                       SL_KV_U64("max_workers", req->max_workers),
                       SL_KV_U64("resume_tokens", req->num_tokens)),
                      "job %s submitted: %u splits, %u epoch%s, %u rank%s, workers %u..%u", job->id,
                      spec.num_splits, job->epochs, job->epochs == 1 ? "" : "s", req->ranks,
                      req->ranks == 1 ? "" : "s", req->min_workers, req->max_workers);
            mp_log_decision(j, "submit");
        }
    }
    sl_mutex_unlock(&m->mu);
    /* The disk outside the lock; the answer after it. Peers may see the
     * job meanwhile: an answer that rests on it (a COMMIT) is sent after
     * a sync of its own, which covers the job's record too. */
    if (began) {
        sl_err_t wrc = mp_sync_wait(m, ticket, rc == SL_OK ? err : NULL);
        if (rc == SL_OK) rc = wrc;
    }
    if (rc == SL_OK && job_id != NULL) {
        *job_id = sl_strdup(m->a, job->id);
        if (*job_id == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "job id");
    }
out:;
    sl_store_t *planned = table != NULL ? sl_wh_table_store(table)
                          : ds != NULL  ? sl_wh_pqds_store(ds)
                                        : NULL;
    if (planned != NULL) {
        sl_store_stats_t ss;
        sl_store_stats(planned, &ss);
        ss.inflight_bytes = 0; /* the store closes here */
        sl_mutex_lock(&m->mu);
        sl_store_stats_add(&m->store, &ss);
        m->has_store = true;
        sl_mutex_unlock(&m->mu);
    }
    mp_kafka_stream_free(&stream);
    sl_wh_splits_destroy(splits);
    sl_wh_filter_destroy(filter);
    sl_wh_table_close(table);
    sl_wh_pqds_destroy(ds);
    sl_pipeline_job_destroy(job);
    return rc;
}

sl_err_t sl_master_job_remove(sl_master_t *m, const char *job_id, sl_error_t *err)
{
    uint64_t ticket = 0;
    sl_mutex_lock(&m->mu);
    sl_err_t rc;
    if (m->failed) {
        rc = sl_error_set(err, SL_ERR_IO, "master state failed: %s", m->failure);
    } else {
        rc = sl_master_state_job_remove(m->st, job_id, err);
        if (rc == SL_OK) rc = mp_sync_begin(m, &ticket, err);
        mp_job *j = mp_job_find(m, job_id);
        if (rc == SL_OK && j != NULL) j->used = false;
        if (rc == SL_OK)
            sl_log_kv(SL_LOG_INFO, SL_EV(JOB_REMOVED), (SL_KV_STR("job", job_id)),
                      "job %s removed: its leases are gone, its workers stop", job_id);
    }
    sl_mutex_unlock(&m->mu);
    return rc == SL_OK ? mp_sync_wait(m, ticket, err) : rc;
}

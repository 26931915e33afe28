/* The Kafka part of a submission (master_internal.h, mp_kafka_splits): a
 * bounded replay's partitions resolved with the brokers and cut into
 * chunks, one split per chunk (docs/DESIGN.md, "Kafka: offsets are rows").
 * A stream's partitions and their start offsets (mp_kafka_stream): the
 * state makes its chunks as they are needed (state_kafka.c). Kept apart
 * from submit.c's check_spec. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/process/master_internal.h"
#include "dpp/pipeline/job.h"
#include "kafka/chunk.h"

_Static_assert((int)SL_PIPELINE_KAFKA_NONE == (int)SL_KAFKA_AT_NONE &&
                   (int)SL_PIPELINE_KAFKA_EARLIEST == (int)SL_KAFKA_AT_EARLIEST &&
                   (int)SL_PIPELINE_KAFKA_LATEST == (int)SL_KAFKA_AT_LATEST &&
                   (int)SL_PIPELINE_KAFKA_TIMESTAMP == (int)SL_KAFKA_AT_TIMESTAMP,
               "the spec's start/stop values are the kafka module's");

/* Each metadata request of a submission: an unreachable broker is refused
 * within a few seconds, never a hang of the submit. */
#define MP_KAFKA_META_TIMEOUT_MS 4000
/* Splits of one job: the state's default bound. */
#define MP_KAFKA_MAX_CHUNKS (16u << 20)

bool mp_kafka_split_ref(const char *path, uint32_t stripe_begin, uint32_t stripe_end, char *topic,
                        size_t cap, int32_t *partition)
{
    if (stripe_begin != 0 || stripe_end != 0 || path == NULL) return false;
    const char *slash = strrchr(path, '/');
    if (slash == NULL || slash == path || (size_t)(slash - path) >= cap || slash[1] == '\0')
        return false;
    char *end = NULL;
    long p = strtol(slash + 1, &end, 10);
    if (*end != '\0' || p < 0 || p > INT32_MAX) return false;
    memcpy(topic, path, (size_t)(slash - path));
    topic[slash - path] = '\0';
    *partition = (int32_t)p;
    return true;
}

/* A problem at path; false when out of memory. */
static sl_err_t problem(sl_pipeline_problems_t *pr, sl_err_t rc, const char *path, uint32_t index,
                        const char *msg, sl_error_t *err)
{
    bool ok = index == UINT32_MAX ? sl_pipeline_problems_add(pr, "%s: %s", path, msg)
                                  : sl_pipeline_problems_add(pr, "%s[%u]: %s", path, index, msg);
    return ok ? rc : sl_error_set(err, SL_ERR_NOMEM, "spec problems");
}

/* The chunks of the planned partitions as splits, in an arena the splits
 * own (paths "topic/partition"). */
static sl_err_t cut(const sl_pipeline_kafka_t *k, const sl_kafka_partition_plan_t *pl, uint32_t n,
                    sl_wh_splits_t **out, sl_pipeline_problems_t *pr, sl_error_t *err)
{
    uint64_t total = 0;
    int64_t from, to;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t span = pl[i].stop > pl[i].start ? (uint64_t)(pl[i].stop - pl[i].start) : 0;
        total += (span + k->chunk - 1) / k->chunk;
    }
    if (total == 0)
        return problem(pr, SL_ERR_INVALID, "$.source.kafka.stop", UINT32_MAX,
                       "no offsets between start and stop in any partition: nothing to read", err);
    if (total > MP_KAFKA_MAX_CHUNKS) {
        char msg[200];
        snprintf(msg, sizeof msg, "%" PRIu64 " chunks, at most %u: a larger chunk", total,
                 MP_KAFKA_MAX_CHUNKS);
        return problem(pr, SL_ERR_TOO_LARGE, "$.source.kafka.chunk", UINT32_MAX, msg, err);
    }
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_wh_splits_t *s = arena ? sl_arena_calloc(arena, 1, sizeof *s) : NULL;
    sl_wh_split_t *items = s ? sl_arena_calloc(arena, (size_t)total, sizeof *items) : NULL;
    if (items == NULL) {
        sl_arena_destroy(arena);
        return sl_error_set(err, SL_ERR_NOMEM, "kafka splits: out of memory");
    }
    s->arena = arena;
    s->items = items;
    for (uint32_t i = 0; i < n; i++) {
        char name[320];
        snprintf(name, sizeof name, "%s/%d", pl[i].topic, (int)pl[i].partition);
        const char *path = sl_arena_strdup(arena, name);
        if (path == NULL) {
            sl_arena_destroy(arena);
            return sl_error_set(err, SL_ERR_NOMEM, "kafka splits: out of memory");
        }
        for (uint64_t c = 0;
             sl_kafka_chunk_bounds(pl[i].start, k->chunk, c, pl[i].stop, &from, &to); c++)
            items[s->count++] = (sl_wh_split_t){.path = path,
                                                .partition = path,
                                                .stripe_begin = 0,
                                                .stripe_end = 0,
                                                .first_row = (uint64_t)from,
                                                .num_rows = (uint64_t)(to - from)};
        s->files++;
    }
    for (uint32_t i = 0; i < s->count; i++)
        s->rows += items[i].num_rows;
    *out = s;
    return SL_OK;
}

/* Every partition of the job's topics with its start and stop offsets
 * (stop -1 for a stream), problems by JSON path; *low (when low is not
 * NULL) gets each partition's low watermark ([*n], sl_free'd by the
 * caller as the plan is). */
static sl_err_t plan(const sl_pipeline_job_t *job, sl_kafka_partition_plan_t **pl, uint32_t *n,
                     int64_t **low, sl_pipeline_problems_t *pr, sl_error_t *err)
{
    const sl_pipeline_kafka_t *k = &job->kafka;
    char group[300];
    snprintf(group, sizeof group, "sluice-%s", job->id ? job->id : "job");
    sl_kafka_consumer_opts_t co = {.brokers = k->brokers,
                                   .group_id = group,
                                   .props = (const char *const *)k->props,
                                   .num_props = k->num_props};
    sl_kafka_consumer_t *c = NULL;
    sl_err_t rc = sl_kafka_consumer_new(&co, &c, err);
    if (rc != SL_OK)
        return rc == SL_ERR_NOMEM
                   ? rc
                   : problem(pr, rc, "$.source.kafka.properties", UINT32_MAX, err->msg, err);
    uint32_t topic = 0;
    rc = sl_kafka_plan_partitions(c, (const char *const *)k->topics, k->num_topics, k->start,
                                  k->start_ms, k->stop, k->stop_ms, MP_KAFKA_META_TIMEOUT_MS, NULL,
                                  pl, n, &topic, err);
    if (rc == SL_OK && low != NULL) {
        /* a resumed stream's tokens are checked against these (retention) */
        *low = sl_calloc(NULL, *n + 1, sizeof **low);
        if (*low == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "kafka: low watermarks");
        int64_t high;
        for (uint32_t i = 0; rc == SL_OK && i < *n; i++) {
            rc = sl_kafka_watermarks(c, (*pl)[i].topic, (*pl)[i].partition,
                                     MP_KAFKA_META_TIMEOUT_MS, &(*low)[i], &high, err);
            topic = 0;
            for (uint32_t t = 0; t < k->num_topics; t++)
                if (strcmp(k->topics[t], (*pl)[i].topic) == 0) topic = t;
        }
        if (rc != SL_OK) {
            sl_free(NULL, *low, (*n + 1) * sizeof **low);
            *low = NULL;
            sl_free(NULL, *pl, (size_t)*n * sizeof **pl);
            *pl = NULL;
        }
    }
    sl_kafka_consumer_destroy(c);
    if (rc == SL_ERR_NOT_FOUND)
        return problem(pr, rc, "$.source.kafka.topics", topic, err->msg, err);
    if (rc == SL_ERR_INVALID)
        return problem(pr, rc, "$.source.kafka.topics", UINT32_MAX, err->msg, err);
    if (rc != SL_OK && rc != SL_ERR_NOMEM) {
        char msg[SL_ERROR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "%s (brokers unreachable or not answering within %d ms)",
                 err->msg, MP_KAFKA_META_TIMEOUT_MS);
        return problem(pr, rc, "$.source.kafka.brokers", UINT32_MAX, msg, err);
    }
    return rc;
}

sl_err_t mp_kafka_splits(const sl_pipeline_job_t *job, sl_wh_splits_t **out,
                         sl_pipeline_problems_t *pr, sl_error_t *err)
{
    *out = NULL;
    sl_kafka_partition_plan_t *pl = NULL;
    uint32_t n = 0;
    sl_err_t rc = plan(job, &pl, &n, NULL, pr, err);
    if (rc != SL_OK) return rc;
    rc = cut(&job->kafka, pl, n, out, pr, err);
    sl_free(NULL, pl, (size_t)n * sizeof *pl);
    return rc;
}

sl_err_t mp_kafka_stream(const sl_pipeline_job_t *job, bool want_low, mp_kafka_stream_t *out,
                         sl_pipeline_problems_t *pr, sl_error_t *err)
{
    memset(out, 0, sizeof *out);
    sl_kafka_partition_plan_t *pl = NULL;
    sl_err_t rc = plan(job, &pl, &out->n, want_low ? &out->low : NULL, pr, err);
    if (rc != SL_OK) return rc;
    out->parts = sl_calloc(NULL, out->n + 1, sizeof *out->parts);
    if (out->parts == NULL) {
        sl_free(NULL, pl, (size_t)out->n * sizeof *pl);
        mp_kafka_stream_free(out);
        return sl_error_set(err, SL_ERR_NOMEM, "kafka: partitions");
    }
    for (uint32_t i = 0; i < out->n; i++)
        out->parts[i] =
            (sl_master_kafka_partition_t){pl[i].topic, pl[i].partition, pl[i].start, -1};
    sl_free(NULL, pl, (size_t)out->n * sizeof *pl);
    return SL_OK;
}

void mp_kafka_stream_free(mp_kafka_stream_t *s)
{
    sl_free(NULL, s->parts, (s->n + 1) * sizeof *s->parts);
    if (s->low != NULL) sl_free(NULL, s->low, (s->n + 1) * sizeof *s->low);
    memset(s, 0, sizeof *s);
}

/* The Kafka split source (source.h): chunks of the partitions of a job's
 * topics (docs/DESIGN.md, "Kafka: offsets are rows"), read on this worker
 * alone (sluice worker --job, sluice read). A unit is one chunk
 * (topic, partition, [from, to)); its rows are its offsets, gaps and bad
 * records included, and the source reads them itself through
 * sl_kafka_read_range, handing the stripe loop stripes of records cut at
 * the batch size or after linger_ms, sorted by session.
 *
 * Order: chunk i of every partition (topics in spec order, partitions
 * ascending) before chunk i + 1 of any, so partitions advance together.
 * With a stop each partition ends at its stop offset and the job runs
 * its epochs over the same chunks; without one the job is a stream and a
 * chunk above a partition's end waits for its records (one chunk is read
 * at a time: under a master, chunks of different partitions go to
 * different readers). */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/source/kafka_dead_letter.h"
#include "dpp/worker/queue/queue.h"
#include "dpp/worker/source/source.h"
#include "kafka/chunk.h"
#include "kafka/record_json.h"

#define META_TIMEOUT_MS 30000

typedef struct kpart {
    const char *topic; /* the job's */
    int32_t partition;
    int64_t start, stop; /* stop < 0: none */
    char name[300];      /* "topic/partition": the split's path in messages */
} kpart_t;

typedef struct kafka_source {
    const sl_pipeline_job_t *job;
    const sl_allocator_t *a;
    sl_kafka_consumer_t *c;
    sl_kafka_rows_t *rows;
    sl_kafka_json_t *json; /* JSON records' decoder; NULL: protobuf records */
    kpart_t *parts;
    uint32_t num_parts;
    bool planned;
    uint32_t epoch;
    uint64_t chunk; /* the chunk index being handed out */
    uint32_t next;  /* the partition whose chunk goes next */
    bool any;       /* some partition had chunk `chunk` (bounded: else the epoch ends) */
    atomic_bool cancel;
    sl_wh_split_t split;      /* the unit handed out last */
    sl_dpp_row_range_t whole; /* its todo */
    int64_t from, to;
    const kpart_t *part;
    _Atomic uint64_t records, bad, pauses, wakes; /* read by the admin thread (records hook) */
    _Atomic uint64_t yields;                      /* head chunks handed back (pass_yield) */
    sl_worker_budget_t *budget;                   /* the worker's: back-pressure (NULL: none) */
    uint64_t prefetch;                            /* librdkafka's share of it, held throughout */
    /* reader thread: the budget's use when it last changed, and when */
    uint64_t hold_used, hold_since_ms;
    uint64_t row_bytes;    /* a decoded row's bytes in the last stripe: what held rows will take */
    uint64_t hold_wait_ns; /* the budget's back-pressure waits when the hold last looked */
    bool hold_stuck; /* resumed because the use did not move: not paused again until it does */
    sl_age_hist_t ages;
    dpp_dead_letter_t
        *dead;           /* the job's dead-letter topic (opened on the first read); NULL: none */
    uint64_t dead_bytes; /* its local queue's bound */
    /* Under a master: the lease client's source, whose units are the
     * leased chunks (next, done and the lease hooks go to it). */
    sl_worker_source_t inner;
    bool leased;
} kafka_source_t;

/* Every partition of every topic with its start and stop offsets. */
static sl_err_t plan(kafka_source_t *s, sl_error_t *err)
{
    const sl_pipeline_kafka_t *k = &s->job->kafka;
    sl_kafka_partition_plan_t *pl = NULL;
    uint32_t n = 0;
    sl_err_t rc = sl_kafka_plan_partitions(s->c, (const char *const *)k->topics, k->num_topics,
                                           k->start, k->start_ms, k->stop, k->stop_ms,
                                           META_TIMEOUT_MS, s->a, &pl, &n, NULL, err);
    if (rc) return rc;
    s->parts = sl_calloc(s->a, n, sizeof *s->parts);
    if (!s->parts) rc = sl_error_set(err, SL_ERR_NOMEM, "kafka source: out of memory");
    for (uint32_t i = 0; rc == SL_OK && i < n; i++) {
        kpart_t *kp = &s->parts[s->num_parts++];
        kp->topic = pl[i].topic;
        kp->partition = pl[i].partition;
        kp->start = pl[i].start;
        kp->stop = pl[i].stop;
        snprintf(kp->name, sizeof kp->name, "%s/%d", kp->topic, (int)kp->partition);
    }
    sl_free(s->a, pl, (size_t)n * sizeof *pl);
    s->planned = rc == SL_OK;
    return rc;
}

static sl_err_t kafka_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    kafka_source_t *s = ctx;
    if (atomic_load(&s->cancel)) return SL_ERR_CLOSED;
    if (!s->planned) {
        sl_err_t rc = plan(s, err);
        if (rc) return rc;
    }
    const sl_pipeline_kafka_t *k = &s->job->kafka;
    for (;;) {
        if (s->epoch >= s->job->epochs) {
            if (s->dead) dpp_dead_letter_flush(s->dead, 5.0); /* the job's end: let them out */
            return SL_ERR_CLOSED;
        }
        if (s->next == s->num_parts) { /* every partition had its chunk `chunk` */
            s->next = 0;
            if (!s->any && k->stop != SL_PIPELINE_KAFKA_NONE) { /* none left: the epoch ends */
                s->epoch++;
                s->chunk = 0;
                continue;
            }
            s->any = false;
            s->chunk++;
        }
        const kpart_t *kp = &s->parts[s->next++];
        int64_t from, to;
        if (!sl_kafka_chunk_bounds(kp->start, k->chunk, s->chunk, kp->stop, &from, &to)) continue;
        s->any = true;
        s->part = kp;
        s->from = from;
        s->to = to;
        s->split = (sl_wh_split_t){.path = kp->name,
                                   .partition = kp->name,
                                   .first_row = (uint64_t)from,
                                   .num_rows = (uint64_t)(to - from)};
        s->whole = (sl_dpp_row_range_t){0, (uint64_t)(to - from)};
        *out = (sl_worker_work_t){.split = &s->split,
                                  .epoch = s->epoch,
                                  /* stable: the partition's place and the chunk's index */
                                  .split_id = ((uint64_t)(kp - s->parts) << 40) | s->chunk,
                                  .todo = &s->whole,
                                  .num_todo = 1};
        return SL_OK;
    }
}

typedef struct pass {
    kafka_source_t *s;
    sl_worker_rows_fn fn;
    void *fn_ctx;
    int64_t from;
    const char *name;
    uint64_t since_ms; /* when the lease's read began */
} pass_t;

/* Each row's age (now minus its record's CreateTime) into the histogram. */
static void count_ages(kafka_source_t *s, const sl_kafka_stripe_t *st)
{
    sl_age_hist_add(&s->ages, st->create_ms, st->rows.batch.batch_size, sl_age_now_ms());
}

/* Back-pressure (sl_kafka_read_opts_t hold), on the part of the budget
 * above librdkafka's prefetch: the partition is paused once 7/8 of it is
 * used (the reader is about to wait for memory, or waits: batches wait
 * for a slow trainer) and resumed below 3/4, the low-water mark, so that
 * librdkafka fetches nothing meanwhile. Memory is bounded by the budget
 * either way; the pause only stops fetching. So that it can never stall
 * the read, a pause also ends when the budget's use has not moved for a
 * second (what holds it is not batches on their way out). */
#define HOLD_STUCK_MS 1000
static bool pass_hold(void *ctx, bool paused)
{
    kafka_source_t *s = ((pass_t *)ctx)->s;
    uint64_t used = sl_worker_budget_used(s->budget), limit = sl_worker_budget_limit(s->budget);
    uint64_t base = s->prefetch < limit ? s->prefetch : limit, room = limit - base;
    bool moved = used != s->hold_used;
    s->hold_used = used;
    if (!paused) { /* not again while it stays stuck at the same use */
        if (moved) s->hold_stuck = false;
        /* the records decoded for the next stripe count too: the budget
         * takes them when the stripe is handed on (the reader is about to
         * wait for memory when they do not fit) */
        uint64_t pending = (uint64_t)sl_kafka_rows_count(s->rows) * s->row_bytes;
        /* ... and a stage that waited for memory since the last look (the
         * reader or a transform thread: the budget is full) pauses too */
        uint64_t waited = sl_worker_budget_wait_ns(s->budget);
        bool full = waited != s->hold_wait_ns;
        s->hold_wait_ns = waited;
        bool pause = !s->hold_stuck && (full || used + pending >= base + room / 8 * 7);
        /* the clock only around a pause: asked after every message */
        if (pause) s->hold_since_ms = sl_clock_ms();
        return pause;
    }
    uint64_t now = sl_clock_ms();
    if (moved) {
        s->hold_since_ms = now;
        s->hold_stuck = false;
    }
    if (used < base + room / 4 * 3) return false;
    s->hold_stuck = now - s->hold_since_ms >= HOLD_STUCK_MS;
    return !s->hold_stuck;
}

/* A bad record, as it came, to the dead-letter topic. */
static void pass_bad(void *ctx, const sl_kafka_bad_record_t *r)
{
    pass_t *p = ctx;
    dpp_dead_letter_send(p->s->dead, r);
}

/* A head chunk is handed back (sl_kafka_read_opts_t yield): a stream's
 * leased chunk whose read reached the partition's end, after it was read
 * for HEAD_MS at least, when other work waits for this worker (the lease
 * client's other_work: a lease of another chunk). The read ends at the
 * partition's end; what it read goes to the trainers and is reported
 * with SPLIT_READ like any lease, and the master leases the rest of the
 * chunk again, to this worker or another. So a partition without new
 * records never holds up the worker's other partitions, and the chunks of
 * one worker take turns at least every HEAD_MS. */
#define HEAD_MS 200
static bool pass_yield(void *ctx)
{
    pass_t *p = ctx;
    kafka_source_t *s = p->s;
    if (sl_clock_ms() - p->since_ms < HEAD_MS) return false;
    return s->inner.other_work && s->inner.other_work(s->inner.ctx);
}

static sl_err_t pass_stripe(void *ctx, const sl_kafka_stripe_t *st, int64_t first, int64_t end,
                            sl_error_t *err)
{
    pass_t *p = ctx;
    count_ages(p->s, st);
    const sl_batch_t *b = &st->rows.batch;
    if (b->batch_size) /* as the reader accounts a stripe (dpp_batch_bytes) */
        p->s->row_bytes = (sl_kjt_bytes(&b->sparse) + ((uint64_t)b->dense.rows * b->dense.cols +
                                                       (uint64_t)b->labels.rows * b->labels.cols) *
                                                          sizeof(float)) /
                              b->batch_size +
                          2 * sizeof(int64_t);        /* sample id, CreateTime */
    if (p->s->dead) dpp_dead_letter_poll(p->s->dead); /* delivery reports, without waiting */
    sl_wh_rows_t rows = st->rows;
    rows.file = p->name;
    return p->fn(p->fn_ctx, &rows, (uint64_t)(first - p->from), (uint64_t)(end - p->from), NULL,
                 err);
}

/* Read w's todo: offsets split->first_row + [from_row, to_row) of each
 * todo range, of the work's partition (a lease's, or the unit this
 * source handed out last). */
static sl_err_t kafka_read(void *ctx, const sl_worker_work_t *w, sl_worker_rows_fn fn, void *fn_ctx,
                           sl_error_t *err)
{
    kafka_source_t *s = ctx;
    const char *topic;
    int32_t partition;
    if (s->leased) {
        if (!w->kafka_topic)
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "kafka source: lease of split %" PRIu64
                                " (%s) is not a Kafka chunk (no kafka_topic)",
                                w->split_id, w->split->path);
        topic = w->kafka_topic;
        partition = w->kafka_partition;
    } else {
        if (w->split != &s->split || w->num_todo != 1)
            return sl_error_set(err, SL_ERR_PROTOCOL, "kafka source: a unit it did not hand out");
        topic = s->part->topic;
        partition = s->part->partition;
    }
    if (s->job->kafka.dead_letter_topic && !s->dead) { /* on the first read, leased or not */
        sl_err_t rc = dpp_dead_letter_new(s->job, s->dead_bytes, META_TIMEOUT_MS / 1000.0, s->a,
                                          &s->dead, err);
        if (rc) return rc;
    }
    int64_t base = (int64_t)w->split->first_row;
    pass_t p = {.s = s,
                .fn = fn,
                .fn_ctx = fn_ctx,
                .from = base,
                .name = w->split->path,
                .since_ms = sl_clock_ms()};
    /* a stream's leased chunk may be handed back at the partition's end */
    bool head = s->leased && s->job->kafka.stop == SL_PIPELINE_KAFKA_NONE;
    sl_err_t rc = SL_OK;
    bool yielded = false;
    for (uint32_t i = 0; i < w->num_todo && rc == SL_OK && !yielded; i++) {
        sl_kafka_read_opts_t o = {.topic = topic,
                                  .partition = partition,
                                  .from = base + (int64_t)w->todo[i].from_row,
                                  .to = base + (int64_t)w->todo[i].to_row,
                                  .batch_rows = s->job->batch_size,
                                  .linger_ms = s->job->kafka.linger_ms,
                                  .rows = s->rows,
                                  .json = s->json,
                                  .stripe = pass_stripe,
                                  .ctx = &p,
                                  .cancel = &s->cancel,
                                  .hold = s->budget ? pass_hold : NULL,
                                  .bad_record = s->dead ? pass_bad : NULL,
                                  .yield = head ? pass_yield : NULL};
        sl_kafka_read_stats_t st = {0};
        rc = sl_kafka_read_range(s->c, &o, &st, err);
        /* handed back: the todo's rest stays uncommitted, leased again */
        yielded = rc == SL_OK && st.end < o.to;
        if (yielded) atomic_fetch_add(&s->yields, 1);
        if (s->dead) dpp_dead_letter_poll(s->dead);
        atomic_fetch_add(&s->records, st.records);
        atomic_fetch_add(&s->bad, st.bad);
        atomic_fetch_add(&s->pauses, st.pauses);
        atomic_fetch_add(&s->wakes, st.wakes);
    }
    return rc;
}

static void kafka_records(void *ctx, sl_worker_records_t *out)
{
    kafka_source_t *s = ctx;
    out->read = atomic_load(&s->records);
    out->bad = atomic_load(&s->bad);
    out->pauses = atomic_load(&s->pauses);
    out->wakes = atomic_load(&s->wakes);
    out->handed_back = atomic_load(&s->yields);
    sl_age_counts_t c;
    sl_age_hist_read(&s->ages, &c);
    memcpy(out->age_buckets, c.buckets, sizeof c.buckets);
    out->age_count = c.count;
    out->age_sum_ms = c.sum_ms;
    dpp_dead_letter_counts(s->dead, &out->dead_letter, &out->dead_letter_failed);
}

static void kafka_cancel(void *ctx)
{
    kafka_source_t *s = ctx;
    atomic_store(&s->cancel, true);
    if (s->inner.cancel) s->inner.cancel(s->inner.ctx);
}

/* ---- under a master: the lease client's units and hooks ---- */

static sl_err_t leased_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    kafka_source_t *s = ctx;
    return s->inner.next(s->inner.ctx, out, err);
}

static void leased_done(void *ctx, const sl_worker_work_t *w, const sl_dpp_row_range_t *empty,
                        uint32_t num_empty)
{
    kafka_source_t *s = ctx;
    if (s->inner.done) s->inner.done(s->inner.ctx, w, empty, num_empty);
}

static void leased_made(void *ctx, void *lease)
{
    kafka_source_t *s = ctx;
    if (s->inner.lease_made) s->inner.lease_made(s->inner.ctx, lease);
}

static bool leased_live(void *ctx, void *lease)
{
    kafka_source_t *s = ctx;
    return s->inner.lease_live(s->inner.ctx, lease);
}

static void leased_retire(void *ctx, void *lease, bool acked)
{
    kafka_source_t *s = ctx;
    if (s->inner.lease_retire) s->inner.lease_retire(s->inner.ctx, lease, acked);
}

static void leased_failed(void *ctx, void *lease, sl_err_t code, int32_t stripe, const char *msg)
{
    kafka_source_t *s = ctx;
    if (s->inner.lease_failed) s->inner.lease_failed(s->inner.ctx, lease, code, stripe, msg);
}

static void kafka_destroy(void *ctx)
{
    kafka_source_t *s = ctx;
    if (!s) return;
    if (s->inner.destroy) s->inner.destroy(s->inner.ctx);
    dpp_dead_letter_destroy(s->dead, 5.0); /* what is queued gets 5 s to go out */
    sl_kafka_rows_destroy(s->rows);
    sl_kafka_json_destroy(s->json);
    sl_kafka_consumer_destroy(s->c);
    if (s->parts) sl_free(s->a, s->parts, (size_t)s->num_parts * sizeof *s->parts);
    sl_free(s->a, s, sizeof *s);
}

/* The job's properties plus the prefetch bounds it does not set itself:
 * one partition is assigned at a time, so librdkafka holds at most its
 * queue (queued.max.messages.kbytes) and one fetch (fetch.max.bytes). */
static const char **consumer_props(const sl_pipeline_job_t *job, uint64_t prefetch,
                                   const sl_allocator_t *a, char vals[3][24], uint32_t *n)
{
    const sl_pipeline_kafka_t *k = &job->kafka;
    const char **p = sl_calloc(a, 2 * (size_t)k->num_props + 6, sizeof(char *));
    if (!p) return NULL;
    *n = 0;
    for (uint32_t i = 0; i < k->num_props; i++, (*n)++) {
        p[2 * *n] = k->props[2 * i];
        p[2 * *n + 1] = k->props[2 * i + 1];
    }
    uint64_t half = prefetch / 2;
    snprintf(vals[0], 24, "%" PRIu64, half / 1024 ? half / 1024 : 1);
    snprintf(vals[1], 24, "%" PRIu64, half);
    snprintf(vals[2], 24, "%" PRIu64, half < 1048576 ? half : 1048576);
    const char *names[3] = {"queued.max.messages.kbytes", "fetch.max.bytes",
                            "max.partition.fetch.bytes"};
    for (int j = 0; j < 3; j++) {
        bool given = false;
        for (uint32_t i = 0; i < k->num_props; i++)
            given |= strcmp(k->props[2 * i], names[j]) == 0;
        if (given) continue;
        p[2 * *n] = names[j];
        p[2 * *n + 1] = vals[j];
        (*n)++;
    }
    return p;
}

/* The source's consumer and decoder; inner (may be NULL) is taken over,
 * also on failure. */
static sl_err_t kafka_new(const sl_pipeline_job_t *job, const char *const *features, uint32_t nf,
                          uint64_t prefetch, sl_worker_budget_t *budget, const sl_allocator_t *a,
                          const sl_worker_source_t *inner, kafka_source_t **out, sl_error_t *err)
{
    *out = NULL;
    if (!job->is_kafka || (inner && !inner->lease_live)) {
        if (inner && inner->destroy) inner->destroy(inner->ctx);
        return sl_error_set(err, SL_ERR_INVALID,
                            !job->is_kafka ? "kafka source: the job has no source.kafka"
                                           : "kafka source: the lease source has no lease hooks");
    }
    kafka_source_t *s = sl_calloc(a, 1, sizeof *s);
    if (!s) {
        if (inner && inner->destroy) inner->destroy(inner->ctx);
        return sl_error_set(err, SL_ERR_NOMEM, "kafka source: out of memory");
    }
    s->job = job;
    s->a = a;
    s->budget = budget;
    if (job->kafka.dead_letter_topic) { /* its queue: an eighth of the prefetch's share */
        s->dead_bytes = prefetch / 8;
        prefetch -= s->dead_bytes;
    }
    s->prefetch = prefetch;
    if (inner) {
        s->inner = *inner;
        s->leased = true;
    }
    atomic_init(&s->cancel, false);
    char group[300];
    snprintf(group, sizeof group, "sluice-%s", job->id ? job->id : "job");
    char vals[3][24];
    uint32_t np = 0;
    const char **props = consumer_props(job, prefetch, a, vals, &np);
    if (!props) {
        kafka_destroy(s);
        return sl_error_set(err, SL_ERR_NOMEM, "kafka source: out of memory");
    }
    sl_kafka_consumer_opts_t co = {.brokers = job->kafka.brokers,
                                   .group_id = group,
                                   .props = props,
                                   .num_props = np,
                                   .allocator = a};
    sl_err_t rc = sl_kafka_consumer_new(&co, &s->c, err);
    sl_free(a, props, (2 * (size_t)job->kafka.num_props + 6) * sizeof(char *));
    if (rc == SL_OK) rc = sl_kafka_rows_new(job->kafka.schema, features, nf, a, &s->rows, err);
    if (rc == SL_OK && job->kafka.format == SL_PIPELINE_KAFKA_JSON)
        rc = job->kafka.columns != NULL
                 ? sl_kafka_json_new(job->kafka.columns, a, &s->json, err)
                 : sl_error_set(err, SL_ERR_INVALID, "kafka source: JSON records need columns");
    if (rc) {
        kafka_destroy(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

sl_err_t sl_worker_source_kafka_new(const sl_pipeline_job_t *job, const char *const *features,
                                    uint32_t nf, uint64_t prefetch, sl_worker_budget_t *budget,
                                    const sl_allocator_t *a, sl_worker_source_t *out,
                                    sl_error_t *err)
{
    kafka_source_t *s;
    sl_err_t rc = kafka_new(job, features, nf, prefetch, budget, a, NULL, &s, err);
    if (rc) return rc;
    *out = (sl_worker_source_t){.next = kafka_next,
                                .destroy = kafka_destroy,
                                .cancel = kafka_cancel,
                                .read = kafka_read,
                                .records = kafka_records,
                                .ctx = s};
    return SL_OK;
}

sl_err_t sl_worker_source_kafka_leased_new(const sl_pipeline_job_t *job,
                                           const char *const *features, uint32_t nf,
                                           uint64_t prefetch, sl_worker_budget_t *budget,
                                           const sl_allocator_t *a, sl_worker_source_t *src,
                                           sl_error_t *err)
{
    kafka_source_t *s;
    sl_worker_source_t inner = *src;
    *src = (sl_worker_source_t){0};
    sl_err_t rc = kafka_new(job, features, nf, prefetch, budget, a, &inner, &s, err);
    if (rc) return rc;
    *src = (sl_worker_source_t){.next = leased_next,
                                .done = leased_done,
                                .destroy = kafka_destroy,
                                .cancel = kafka_cancel,
                                .lease_made = leased_made,
                                .lease_live = leased_live,
                                .lease_retire = leased_retire,
                                .lease_failed = leased_failed,
                                .read = kafka_read,
                                .records = kafka_records,
                                .ctx = s};
    return SL_OK;
}

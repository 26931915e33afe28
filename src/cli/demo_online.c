/* `sluice demo --online`: online training from a Kafka topic on one
 * machine (docs/KAFKA.md, "The online demo"). Given brokers (ops/demo-online
 * starts a local one), it creates the topic, produces the generated
 * sessions stream to it at a steady rate (the producer of `sluice
 * produce`) while an in-process DPP worker reads the topic as a stream
 * (source.kafka from this run's start time on, the user features deduplicated) and a
 * trainer client takes every batch; it checks that every sample id arrived
 * exactly once and prints samples/s, the dedup factor and the freshness of
 * each sample at hand-over (wall clock minus its record's CreateTime):
 * p50, p99, p99.9 and the maximum, exact to the millisecond. */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/age.h"
#include "common/clock.h"
#include "common/mem.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "kafka/producer.h"
#include "produce_input.h"
#include "sluice/trainer.h"
#include "warehouse/import.h"

/* Ages are counted per millisecond up to this, the rest in one counter. */
#define FRESH_MAX_MS 60000

typedef struct fresh {
    uint64_t *counts; /* [FRESH_MAX_MS + 2]: ages 0..FRESH_MAX_MS ms, then longer */
    uint64_t n;
} fresh_t;

static void fresh_add(fresh_t *f, const int64_t *times, uint32_t n, int64_t now)
{
    for (uint32_t i = 0; i < n; i++) {
        if (times[i] < 0) continue;
        int64_t age = now > times[i] ? now - times[i] : 0;
        f->counts[age > FRESH_MAX_MS ? FRESH_MAX_MS + 1 : age]++;
        f->n++;
    }
}

/* The q-quantile (nearest rank) in ms; FRESH_MAX_MS + 1: longer than that. */
static uint64_t fresh_quantile(const fresh_t *f, double q)
{
    uint64_t rank = (uint64_t)(q * (double)f->n + 0.999999), seen = 0;
    if (rank == 0) rank = 1;
    for (uint64_t ms = 0; ms <= FRESH_MAX_MS + 1; ms++)
        if ((seen += f->counts[ms]) >= rank) return ms;
    return FRESH_MAX_MS + 1;
}

/* A delivery report of the producer (on the feeder's thread): the
 * record's age when the broker's acknowledgement was served. */
static void on_acked(void *ctx, int64_t ts_ms, bool append_time)
{
    if (!append_time) fresh_add(ctx, &ts_ms, 1, sl_age_now_ms());
}

/* librdkafka's producer-side latencies, from its statistics once a
 * second (STATISTICS.md: per broker, each a window since the last report,
 * in microseconds): int_latency, a record's time in the producer's queue
 * before its request is built (batching, zstd, waiting for an in-flight
 * slot); outbuf_latency, a request's wait to be written to the socket;
 * rtt, the broker's answer (its append). Per stage: the p50 of the
 * windows' p50s and the largest window p99. */
#define STAT_WINDOWS 256
static const char *const STAGES[3] = {"int_latency", "outbuf_latency", "rtt"};
typedef struct rdstats {
    uint32_t n;
    int64_t p50[3][STAT_WINDOWS], p99max[3];
} rdstats_t;

static void on_rdstats(void *ctx, const char *json)
{
    rdstats_t *st = ctx;
    json_t *root = json_loads(json, 0, NULL), *brokers = json_object_get(root, "brokers"), *b;
    const char *name;
    json_object_foreach(brokers, name, b)
    {
        json_t *il = json_object_get(b, "int_latency");
        if (st->n >= STAT_WINDOWS || json_integer_value(json_object_get(il, "cnt")) <= 0) continue;
        for (int k = 0; k < 3; k++) {
            json_t *w = json_object_get(b, STAGES[k]);
            int64_t p99 = json_integer_value(json_object_get(w, "p99"));
            st->p50[k][st->n] = json_integer_value(json_object_get(w, "p50"));
            if (p99 > st->p99max[k]) st->p99max[k] = p99;
        }
        st->n++;
    }
    json_decref(root);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void print_rdstats(rdstats_t *st)
{
    printf("  producer      ");
    if (!st->n) {
        printf("(no statistics window of librdkafka's with records in it)\n");
        return;
    }
    for (int k = 0; k < 3; k++) {
        qsort(st->p50[k], st->n, sizeof st->p50[k][0], cmp_i64);
        printf("%s%s p50 %.1f ms, p99 <= %.1f ms", k ? "; " : "", STAGES[k],
               (double)st->p50[k][st->n / 2] / 1e3, (double)st->p99max[k] / 1e3);
    }
    printf(" (librdkafka's statistics, %u windows of 1 s)\n", st->n);
}

static void print_ms(const char *name, uint64_t ms)
{
    if (ms > FRESH_MAX_MS)
        printf("%s > %d ms", name, FRESH_MAX_MS);
    else
        printf("%s %" PRIu64 " ms", name, ms);
}

/* The bound of the worker's age bucket that holds quantile q of its
 * record ages (UINT64_MAX: the last, unbounded, bucket). */
static uint64_t age_bound(const sl_worker_stats_t *ws, double q)
{
    uint64_t want = (uint64_t)((double)ws->age_count * q), seen = 0;
    for (int i = 0; i < SL_AGE_BUCKETS - 1; i++)
        if ((seen += ws->age_buckets[i]) >= want && seen > 0) return SL_AGE_BOUNDS_MS[i];
    return UINT64_MAX;
}

/* The producing side, on its own thread. */
typedef struct feeder {
    const sl_cli_demo_online_t *o;
    sl_kafka_producer_t *p;
    produce_input_t *in;
    atomic_bool stop;
    uint64_t rows, sent;
    double seconds; /* from the first record sent to the last acknowledged */
    sl_err_t rc;
    sl_error_t err;
} feeder_t;

static void *feed(void *arg)
{
    feeder_t *f = arg;
    double interval = 1.0 / (double)f->o->rate, t0 = sl_clock_s();
    while (!atomic_load(&f->stop) && f->sent < f->rows) {
        produce_record_t rec;
        bool done = false;
        if ((f->rc = produce_input_next(f->in, &rec, &done, &f->err)) || done) break;
        sl_kafka_producer_pace(f->p, t0 + (double)f->sent * interval);
        f->rc = sl_kafka_producer_send(f->p, rec.session_id, rec.value, rec.len, &f->err);
        if (f->rc) break;
        f->sent++;
    }
    sl_error_t e = {0};
    sl_err_t rc = sl_kafka_producer_flush(f->p, 30, &e);
    if (f->rc == SL_OK && rc != SL_OK) {
        f->rc = rc;
        f->err = e;
    }
    f->seconds = sl_clock_s() - t0;
    return NULL;
}

/* The job: the topic as a stream from time from_ms on (the records this
 * run produces, whenever the worker looks the offsets up), the sessions schema, the
 * user features deduplicated, item ids hashed as `sluice demo` does. */
static sl_pipeline_job_t *online_job(const sl_cli_demo_online_t *o, const sl_wh_schema_t *schema,
                                     uint64_t chunk, int64_t from_ms,
                                     sl_pipeline_problems_t *problems, sl_error_t *err)
{
    json_t *spec = json_pack(
        "{s:s, s:{s:{s:s, s:[s], s:o, s:{s:I}, s:I, s:I}}, s:[{s:s, s:s, s:i}], "
        "s:{s:I, s:{s:[s,s,s]}}}",
        "id", "demo-online", "source", "kafka", "brokers", o->brokers, "topics", o->topic, "schema",
        sl_wh_schema_to_json(schema), "start", "timestamp_ms", (json_int_t)from_ms, "linger_ms",
        (json_int_t)o->linger_ms, "chunk", (json_int_t)chunk, "transforms", "op", "sigrid_hash",
        "feature", "item_id", "table_size", 1000003, "batch", "size", (json_int_t)o->batch_size,
        "dedup_groups", "user", "user_id", "user_hist", "user_cat");
    if (!spec) {
        sl_error_set(err, SL_ERR_NOMEM, "the job spec: out of memory");
        return NULL;
    }
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_job_from_json(spec, &job, problems, err);
    json_decref(spec);
    return job;
}

static void ignore_kafka_log(void *ctx, int level, const char *facility, const char *message)
{
    (void)ctx;
    if (level <= 3) fprintf(stderr, "sluice demo: kafka %s: %s\n", facility, message);
}

int sl_cli_demo_online(const sl_cli_demo_online_t *o)
{
    if (!o->brokers) {
        fprintf(stderr, "sluice demo: --online needs --brokers HOST:PORT (ops/demo-online starts a "
                        "local broker and passes it)\n");
        return 2;
    }
    uint64_t rows = o->rate * o->seconds;
    /* A chunk boundary costs a new fetch: one partition reads in the job's
     * default chunks; with several, a chunk is 50 ms of one partition, as
     * partitions are read in lockstep (docs/KAFKA.md, "The online demo"). */
    uint64_t chunk = o->chunk             ? o->chunk
                     : o->partitions == 1 ? 65536
                                          : o->rate / 20 / o->partitions;
    if (chunk < 64) chunk = 64;
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_wh_gen_spec_t gs;
    sl_wh_schema_t *schema = NULL;
    sl_pipeline_job_t *job = NULL;
    sl_worker_t *w = NULL;
    sl_trainer_t *t = NULL;
    uint8_t *seen = NULL;
    rdstats_t rds = {0};
    /* The demo's producer settings, then the caller's --property: no
     * compression, as producer, broker and worker share this host (no
     * network to save, and zstd over 100k records/s was most of the
     * records' wait in the producer's queue on two shared cores;
     * docs/BENCHMARKS.md, "Kafka, 2026-11-29 (issue 27b)"). */
    static const char *const ours[] = {"statistics.interval.ms=1000", "compression.type=none"};
    const uint32_t nours = sizeof ours / sizeof ours[0], nprops = nours + o->num_properties;
    const char **props = sl_calloc(NULL, nprops, sizeof *props);
    fresh_t fr = {0}, acked = {0}; /* ages at hand-over; at the producer's acknowledgement */
    feeder_t f = {.o = o, .rows = rows};
    atomic_init(&f.stop, false);
    pthread_t th;
    bool started = false;
    int code = 1;
    sl_err_t rc = sl_wh_gen_preset("sessions", rows, o->seed, &gs, &err);
    if (rc == SL_OK) rc = sl_wh_gen_schema(&gs, NULL, &schema, &err);
    produce_input_spec_t ps = {.sessions = true, .rows = rows, .seed = o->seed};
    if (rc == SL_OK) rc = produce_input_open(&ps, &f.in, &err);
    sl_kafka_producer_opts_t po = {.brokers = o->brokers,
                                   .topic = o->topic,
                                   .create_partitions = (uint32_t)o->partitions,
                                   .timeout_s = 30,
                                   .on_log = ignore_kafka_log,
                                   .on_delivered = on_acked,
                                   .delivered_ctx = &acked,
                                   .properties = props,
                                   .num_properties = nprops,
                                   .on_stats = on_rdstats,
                                   .stats_ctx = &rds};
    acked.counts = sl_calloc(NULL, FRESH_MAX_MS + 2, sizeof *acked.counts);
    if (!acked.counts || !props) rc = sl_error_set(&err, SL_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; props && i < nprops; i++)
        props[i] = i < nours ? ours[i] : o->properties[i - nours];
    if (rc == SL_OK) rc = sl_kafka_producer_new(&po, &f.p, &err); /* the topic exists from here */
    if (rc == SL_OK && !(job = online_job(o, schema, chunk, sl_age_now_ms(), &problems, &err)))
        rc = err.code ? err.code : SL_ERR_INVALID;
    sl_worker_opts_t wo = sl_worker_opts_default();
    wo.listen = "127.0.0.1:0";
    wo.threads = (uint32_t)o->threads;
    wo.worker_id = "demo-online-worker";
    if (rc == SL_OK) rc = sl_worker_start(job, &wo, &w, &problems, &err);
    char addr[64];
    sl_trainer_opts_t to = sl_trainer_opts_default();
    if (rc == SL_OK) {
        snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
        to.address = addr;
        to.client_name = "demo-online-trainer";
        to.prefetch = 8;
        rc = sl_trainer_connect(&to, &t, &err);
    }
    seen = rc == SL_OK ? sl_calloc(NULL, rows, 1) : NULL;
    fr.counts = rc == SL_OK ? sl_calloc(NULL, FRESH_MAX_MS + 2, sizeof *fr.counts) : NULL;
    if (rc == SL_OK && (!seen || !fr.counts))
        rc = sl_error_set(&err, SL_ERR_NOMEM, "out of memory for %" PRIu64 " samples", rows);
    if (rc != SL_OK) goto done;
    sl_kafka_producer_stats_t ps0;
    sl_kafka_producer_stats(f.p, &ps0);
    printf("sluice demo --online: %" PRIu64 " samples of the sessions stream at %" PRIu64
           "/s for %" PRIu64 " s to topic %s (%u partition%s%s) on %s\n",
           rows, o->rate, o->seconds, o->topic, ps0.partitions, ps0.partitions == 1 ? "" : "s",
           ps0.created ? ", created" : "", o->brokers);
    printf("  one worker (a stream from now on, linger %" PRIu64 " ms, chunks of %" PRIu64
           " offsets, user features deduplicated), one trainer client\n",
           o->linger_ms, chunk);
    printf("  producer settings: sluice produce's, then");
    for (uint32_t i = 1; i < nprops; i++) /* the first is the statistics' interval */
        printf(" %s", props[i]);
    printf("\n");
    pthread_create(&th, NULL, feed, &f);
    started = true;
    uint64_t got = 0, batches = 0;
    double first = 0, last = 0, deadline = sl_clock_s() + (double)o->seconds + 60;
    while (got < rows && sl_clock_s() < deadline) {
        sl_batch_t *b;
        rc = sl_trainer_next(t, 1000, &b, &err);
        if (rc == SL_ERR_TIMEOUT) {
            if (f.seconds > 0 && f.rc) break; /* the producer failed: nothing more comes */
            continue;
        }
        if (rc != SL_OK) goto done;
        int64_t now = sl_age_now_ms();
        if (b->record_ms) fresh_add(&fr, b->record_ms, b->batch_size, now);
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids ? b->sample_ids[i] : -1;
            if (id < 0 || (uint64_t)id >= rows || seen[id]) {
                fprintf(stderr, "sluice demo: sample id %" PRId64 " %s\n", id,
                        id < 0 || (uint64_t)id >= rows ? "out of range" : "arrived twice");
                sl_trainer_release(t, b);
                goto done;
            }
            seen[id] = 1;
        }
        if (!got) first = sl_clock_s();
        got += b->batch_size;
        last = sl_clock_s();
        batches++;
        sl_trainer_release(t, b);
    }
    rc = SL_OK;
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    started = false;
    if (f.rc != SL_OK) {
        fprintf(stderr, "sluice demo: producing: %s\n", f.err.msg);
        goto done;
    }
    if (got < rows) {
        fprintf(stderr, "sluice demo: missing sample ids:");
        for (uint64_t i = 0, k = 0; i < rows && k < 10; i++)
            if (!seen[i]) fprintf(stderr, " %" PRIu64 "%s", i, ++k == 10 ? " ..." : "");
        fprintf(stderr, "\n");
        fprintf(stderr, "sluice demo: %" PRIu64 " of %" PRIu64 " samples arrived in time%s\n", got,
                rows,
                ps0.partitions > 1 ? " (one worker without a master reads partitions in lockstep: "
                                     "the rest wait behind a chunk of another partition that is "
                                     "not full; docs/KAFKA.md)"
                                   : "");
        goto done;
    }
    sl_worker_stats_t ws;
    sl_worker_stats(w, &ws);
    sl_kafka_producer_stats_t pst;
    sl_kafka_producer_stats(f.p, &pst);
    double loads[3] = {0, 0, 0};
    int nl = getloadavg(loads, 3);
    double span = last - first;
    printf("  produced      %" PRIu64 " samples in %.2f s (%.0f/s), %" PRIu64 " acknowledged\n",
           f.sent, f.seconds, f.seconds > 0 ? (double)f.sent / f.seconds : 0.0, pst.delivered);
    printf("  received      %" PRIu64 " samples in %" PRIu64 " batches, every sample id exactly "
           "once: %.0f samples/s (first to last batch)\n",
           got, batches, span > 0 ? (double)got / span : 0.0);
    for (uint32_t g = 0; g < ws.num_groups; g++)
        printf("  dedup factor  %.2f (%s: %" PRIu64 " rows -> %" PRIu64 " unique); %.1f MB "
               "encoded, %.1f MB had dedup been off\n",
               ws.groups[g].factor, ws.groups[g].name, ws.groups[g].rows, ws.groups[g].unique_rows,
               (double)ws.bytes_encoded / 1e6, (double)ws.bytes_expanded / 1e6);
    printf("  freshness     ");
    print_ms("p50", fresh_quantile(&fr, 0.5));
    print_ms(", p99", fresh_quantile(&fr, 0.99));
    print_ms(", p99.9", fresh_quantile(&fr, 0.999));
    print_ms(", max", fresh_quantile(&fr, 1.0));
    printf(" (record CreateTime to hand-over to the trainer, %" PRIu64 " samples)\n", fr.n);
    /* Where the time goes, stage by stage: the ages when the producer
     * served the broker's acknowledgement (producer batching and zstd,
     * the broker's append; exact),
     * when the worker read the records (its histogram's bucket bounds):
     * that and the fetch; the rest is the worker's batching and sending
     * and the trainer's taking. */
    printf("  acknowledged  ");
    print_ms("p50", fresh_quantile(&acked, 0.5));
    print_ms(", p99", fresh_quantile(&acked, 0.99));
    print_ms(", max", fresh_quantile(&acked, 1.0));
    printf(" (CreateTime to the producer's delivery report, %" PRIu64 " records)\n", acked.n);
    print_rdstats(&rds);
    printf("  at the worker p50 <= %" PRIu64 " ms, p99 <= %" PRIu64
           " ms (CreateTime to the worker's read, its histogram's bucket bounds)\n",
           age_bound(&ws, 0.5), age_bound(&ws, 0.99));
    if (nl == 3)
        printf("  load average  %.2f %.2f %.2f (this machine, while it ran)\n", loads[0], loads[1],
               loads[2]);
    code = 0;
done:
    if (started) {
        atomic_store(&f.stop, true);
        pthread_join(th, NULL);
    }
    if (rc != SL_OK) {
        for (uint32_t i = 0; i < problems.count; i++)
            fprintf(stderr, "sluice demo: %s\n", problems.items[i]);
        fprintf(stderr, "sluice demo: %s\n", err.msg[0] ? err.msg : sl_err_str(rc));
    }
    sl_trainer_close(t);
    if (w) sl_worker_stop(w);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    sl_pipeline_problems_free(&problems);
    sl_kafka_producer_destroy(f.p);
    produce_input_close(f.in);
    sl_wh_schema_destroy(schema);
    if (seen) sl_free(NULL, seen, rows);
    if (fr.counts) sl_free(NULL, fr.counts, (FRESH_MAX_MS + 2) * sizeof *fr.counts);
    if (acked.counts) sl_free(NULL, acked.counts, (FRESH_MAX_MS + 2) * sizeof *acked.counts);
    if (props) sl_free(NULL, props, nprops * sizeof *props);
    return code;
}

/* Partition chunks (src/kafka/chunk.c) on librdkafka's mock cluster, in
 * process: the chunk plan, and reading chunks of partitions to their end
 * (records decoded as kafka_records_test.c holds them to): stripes tile
 * the range exactly, each good record's sample id comes exactly once, bad
 * records are counted and their offsets still read, stripes are cut at the
 * row count and after linger, a read waits for records at the log's end
 * and can be cancelled, and an offset the log does not have is an error
 * (auto.offset.reset=error). */
#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kafka_records.h"
#include "kafka/chunk.h"
#include "kafka/record_decode.h"
#include "testutil.h"

/* ---- the chunk plan ---- */

Test(kafka_records, chunk_plan)
{
    int64_t f = 0, t = 0;
    cr_assert(sl_kafka_chunk_bounds(100, 50, 0, -1, &f, &t));
    cr_assert_eq(f, 100);
    cr_assert_eq(t, 150);
    cr_assert(sl_kafka_chunk_bounds(100, 50, 3, -1, &f, &t));
    cr_assert_eq(f, 250);
    cr_assert_eq(t, 300);
    cr_assert(sl_kafka_chunk_bounds(100, 50, 3, 270, &f, &t)); /* cut at stop */
    cr_assert_eq(f, 250);
    cr_assert_eq(t, 270);
    cr_assert_not(sl_kafka_chunk_bounds(100, 50, 4, 270, &f, &t)); /* past stop */
    cr_assert_not(sl_kafka_chunk_bounds(100, 50, 0, 100, &f, &t)); /* nothing to read */
    cr_assert_not(sl_kafka_chunk_bounds(0, 0, 0, -1, &f, &t));
    cr_assert_not(sl_kafka_chunk_bounds(0, 1u << 30, UINT64_MAX / 2, -1, &f, &t)); /* overflow */
}

/* ---- reading chunks on the mock cluster ---- */

typedef struct mock {
    rd_kafka_t *owner; /* the handle the mock cluster lives in */
    rd_kafka_mock_cluster_t *mc;
    const char *bootstraps;
    rd_kafka_t *producer;
} mock_t;

static void mock_start(mock_t *m, const char *topic, int partitions)
{
    char es[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    cr_assert_eq(rd_kafka_conf_set(conf, "log_level", "0", es, sizeof es), RD_KAFKA_CONF_OK);
    m->owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, es, sizeof es);
    cr_assert_not_null(m->owner, "%s", es);
    m->mc = rd_kafka_mock_cluster_new(m->owner, 1);
    cr_assert_not_null(m->mc);
    m->bootstraps = rd_kafka_mock_cluster_bootstraps(m->mc);
    cr_assert_eq(rd_kafka_mock_topic_create(m->mc, topic, partitions, 1), 0);
    conf = rd_kafka_conf_new();
    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", m->bootstraps, es, sizeof es),
                 RD_KAFKA_CONF_OK);
    cr_assert_eq(rd_kafka_conf_set(conf, "linger.ms", "1", es, sizeof es), RD_KAFKA_CONF_OK);
    cr_assert_eq(rd_kafka_conf_set(conf, "log_level", "0", es, sizeof es), RD_KAFKA_CONF_OK);
    m->producer = kr_producer(conf); /* kr_flush fails the test on a failed delivery */
}

static void mock_stop(mock_t *m)
{
    rd_kafka_destroy(m->producer);
    rd_kafka_mock_cluster_destroy(m->mc);
    rd_kafka_destroy(m->owner);
}

static sl_kafka_consumer_t *consumer(const char *brokers)
{
    const char *props[] = {"log_level", "0", "fetch.wait.max.ms", "20"};
    sl_kafka_consumer_opts_t o = {
        .brokers = brokers, .group_id = "sluice-test", .props = props, .num_props = 2};
    sl_kafka_consumer_t *c = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_consumer_new(&o, &c, &err), SL_OK, "%s", err.msg);
    return c;
}

/* 1200 records over 2 partitions (sample id i to partition i % 2, session
 * i % 37), every 50th without the format header: read every partition in
 * chunks of 170 offsets, 64 rows a stripe. */
Test(kafka_chunks, chunks_tile_partitions_exactly_once)
{
    mock_t m;
    mock_start(&m, "events", 2);
    for (uint64_t id = 0; id < 1200; id++) {
        if (id % 50 == 49)
            kr_produce_raw(m.producer, "events", (int32_t)(id % 2), id, id % 37, NULL, NULL, 0);
        else
            kr_produce(m.producer, "events", (int32_t)(id % 2), id, id % 37);
    }
    kr_flush(m.producer, (int)(tu_timeout(10000 / 1000.0) * 1000));
    sl_kafka_consumer_t *c = consumer(m.bootstraps);
    sl_error_t err = {0};
    int32_t parts = 0;
    cr_assert_eq(
        sl_kafka_partitions(c, "events", (int)(tu_timeout(5000 / 1000.0) * 1000), &parts, &err),
        SL_OK, "%s", err.msg);
    cr_assert_eq(parts, 2);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    static kr_seen_t v;
    memset(&v, 0, sizeof v);
    sl_kafka_read_stats_t total = {0};
    uint32_t chunks = 0;
    for (int32_t p = 0; p < 2; p++) {
        int64_t lo = -1, hi = -1;
        cr_assert_eq(sl_kafka_watermarks(c, "events", p, (int)(tu_timeout(5000 / 1000.0) * 1000),
                                         &lo, &hi, &err),
                     SL_OK, "%s", err.msg);
        cr_assert_eq(lo, 0);
        cr_assert_eq(hi, 600);
        int64_t from, to;
        v.next = 0;
        for (uint64_t i = 0; sl_kafka_chunk_bounds(lo, 170, i, hi, &from, &to); i++) {
            sl_kafka_read_opts_t o = {.topic = "events",
                                      .partition = p,
                                      .from = from,
                                      .to = to,
                                      .batch_rows = 64,
                                      .linger_ms = 60000,
                                      .rows = rows,
                                      .stripe = kr_on_stripe,
                                      .ctx = &v,
                                      .bad = kr_on_bad};
            sl_kafka_read_stats_t st = {0};
            cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
            cr_assert_eq(v.next, to, "chunk [%ld, %ld) read to %ld", (long)from, (long)to,
                         (long)v.next);
            cr_assert_eq(st.records, (uint64_t)(to - from));
            total.records += st.records;
            total.bad += st.bad;
            chunks++;
        }
        cr_assert_eq(v.next, 600);
    }
    cr_assert_eq(chunks, 8); /* 4 per partition: 170, 170, 170, 90 */
    cr_assert_eq(total.records, 1200);
    cr_assert_eq(total.bad, 24);
    cr_assert_eq(v.bad_reasons, 24);
    cr_assert(strstr(v.last_bad, ": no sluice-format header") != NULL, "%s", v.last_bad);
    for (uint64_t id = 0; id < 1200; id++)
        cr_assert_eq(v.seen[id], id % 50 == 49 ? 0u : 1u, "sample %lu delivered %u times",
                     (unsigned long)id, v.seen[id]);
    cr_assert_eq(v.max_rows, 64);
    cr_assert_not(v.unsorted, "a stripe's rows are not stably sorted by session");
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

/* A read that goes on where the last one ended keeps the partition
 * assigned and starts with what the last one took past its end: chunks of
 * odd sizes (so that their ends fall inside librdkafka's batches) read one
 * after the other on one consumer see every record of their own range,
 * exactly; a read of another partition in between, and one back over
 * offsets already read, assign their own and read theirs exactly too. */
Test(kafka_chunks, a_read_goes_on_where_the_last_one_ended)
{
    mock_t m;
    mock_start(&m, "onward", 2);
    for (uint64_t id = 0; id < 1000; id++)
        kr_produce(m.producer, "onward", id < 900 ? 0 : 1, id, id % 11);
    kr_flush(m.producer, (int)(tu_timeout(10) * 1000));
    sl_kafka_consumer_t *c = consumer(m.bootstraps);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    static kr_seen_t v;
    memset(&v, 0, sizeof v);
    sl_error_t err = {0};
    /* partition 0 in chunks of 7, 13, 101, 1, 250, 3 ... to 900; after the
     * 4th chunk, partition 1's 100 records; at the end partition 0's
     * [450, 520) again */
    const int64_t sizes[] = {7, 13, 101, 1, 250, 3, 128, 255, 142};
    typedef struct {
        int32_t p;
        int64_t from, to;
    } read_t;
    read_t reads[16];
    uint32_t nr = 0;
    int64_t at = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        reads[nr++] = (read_t){0, at, at + sizes[i]};
        at += sizes[i];
        if (i == 3) reads[nr++] = (read_t){1, 0, 100};
    }
    cr_assert_eq(at, 900);
    reads[nr++] = (read_t){0, 450, 520};
    for (uint32_t i = 0; i < nr; i++) {
        sl_kafka_read_opts_t o = {.topic = "onward",
                                  .partition = reads[i].p,
                                  .from = reads[i].from,
                                  .to = reads[i].to,
                                  .batch_rows = 50,
                                  .linger_ms = 60000,
                                  .rows = rows,
                                  .stripe = kr_on_stripe,
                                  .ctx = &v,
                                  .bad = kr_on_bad};
        v.next = reads[i].from;
        sl_kafka_read_stats_t st = {0};
        cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(v.next, reads[i].to);
        cr_assert_eq(st.records, (uint64_t)(reads[i].to - reads[i].from),
                     "read %u [%ld, %ld) of partition %d: %lu records", i, (long)reads[i].from,
                     (long)reads[i].to, (int)reads[i].p, (unsigned long)st.records);
    }
    for (uint64_t id = 0; id < 1000; id++)
        cr_assert_eq(v.seen[id], id >= 450 && id < 520 ? 2u : 1u, "sample %lu delivered %u times",
                     (unsigned long)id, v.seen[id]);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

/* Back-pressure: a read whose hold says "pause" for its first 300 ms
 * pauses the partition once, reads nothing meanwhile (every record still
 * queued or unfetched), and after the resume reads the range to its end,
 * every record once, without waiting for librdkafka's timer. */
typedef struct held {
    kr_seen_t v; /* first: the stripe callback's context */
    double until;
    uint32_t asked_paused, stripes_while_paused;
    bool paused;
} held_t;

static bool hold_for_a_while(void *ctx, bool paused)
{
    held_t *h = ctx;
    h->paused = paused;
    if (paused) h->asked_paused++;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 < h->until;
}

static sl_err_t held_stripe(void *ctx, const sl_kafka_stripe_t *s, int64_t first, int64_t end,
                            sl_error_t *err)
{
    held_t *h = ctx;
    if (h->paused && s->rows.batch.batch_size) h->stripes_while_paused++;
    return kr_on_stripe(ctx, s, first, end, err);
}

Test(kafka_chunks, hold_pauses_the_partition_and_resumes_it)
{
    mock_t m;
    mock_start(&m, "held", 1);
    for (uint64_t id = 0; id < 500; id++)
        kr_produce(m.producer, "held", 0, id, id % 7);
    kr_flush(m.producer, (int)(tu_timeout(10) * 1000));
    sl_kafka_consumer_t *c = consumer(m.bootstraps);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    static held_t h;
    memset(&h, 0, sizeof h);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t0 = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    h.until = t0 + 0.3;
    sl_kafka_read_opts_t o = {.topic = "held",
                              .partition = 0,
                              .from = 0,
                              .to = 500,
                              .batch_rows = 64,
                              .linger_ms = 60000,
                              .rows = rows,
                              .stripe = held_stripe,
                              .ctx = &h,
                              .hold = hold_for_a_while};
    sl_kafka_read_stats_t st = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    cr_assert_geq((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - t0, 0.3);
    double took = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - t0;
    cr_log_info("held 0.3 s, read in %.3f s", took);
    /* the resume starts the fetch at once (a seek), not at librdkafka's
     * next one-second timer: 0.30-0.31 s here, 1.002 s without the seek */
    cr_assert_lt(took, 0.3 + tu_timeout(0.6), "%.3f s: the fetch waited for librdkafka's timer",
                 took);
    cr_assert_eq(st.pauses, 1);
    cr_assert_gt(h.asked_paused, 1, "asked again while paused");
    cr_assert_eq(h.stripes_while_paused, 0);
    cr_assert_eq(st.records, 500);
    cr_assert_eq(h.v.next, 500);
    for (uint64_t id = 0; id < 500; id++)
        cr_assert_eq(h.v.seen[id], 1u, "sample %lu delivered %u times", (unsigned long)id,
                     h.v.seen[id]);
    /* the read resumed the partition: a read after it is not held */
    h.until = 0;
    memset(&h.v, 0, sizeof h.v);
    h.v.next = 100;
    o.from = 100;
    o.to = 200;
    o.hold = NULL;
    cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(h.v.next, 200);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

/* librdkafka stops fetching while its queue holds queued.min.messages
 * and fetches again at its broker thread's next timer, up to a second
 * later: a read that drains such a queue wakes it (chunk.c, wake_fetcher).
 * 1500 records in producer batches of 10, fetched a batch at a time into
 * a queue of at most 20 messages: the fetcher stops about every other
 * fetch. Every record is read once; the read wakes the fetcher and takes
 * far less than the 75 timer ticks (of up to 1 s) it would have waited. */
Test(kafka_chunks, a_read_that_drains_a_full_queue_wakes_the_fetcher)
{
    mock_t m;
    mock_start(&m, "full", 1);
    for (uint64_t id = 0; id < 1500; id++) {
        kr_produce(m.producer, "full", 0, id, id % 5);
        if (id % 10 == 9) kr_flush(m.producer, (int)(tu_timeout(10) * 1000));
    }
    const char *props[] = {"log_level",           "0",  "fetch.wait.max.ms",         "20",
                           "queued.min.messages", "20", "max.partition.fetch.bytes", "1"};
    sl_kafka_consumer_opts_t co = {
        .brokers = m.bootstraps, .group_id = "sluice-test", .props = props, .num_props = 4};
    sl_kafka_consumer_t *c = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_consumer_new(&co, &c, &err), SL_OK, "%s", err.msg);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    static kr_seen_t v;
    memset(&v, 0, sizeof v);
    sl_kafka_read_opts_t o = {.topic = "full",
                              .partition = 0,
                              .from = 0,
                              .to = 1500,
                              .batch_rows = 64,
                              .linger_ms = 60000,
                              .rows = rows,
                              .stripe = kr_on_stripe,
                              .ctx = &v};
    sl_kafka_read_stats_t st = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_log_info("1500 records in %.2f s, %llu wakes", took, (unsigned long long)st.wakes);
    cr_assert_eq(st.records, 1500);
    cr_assert_eq(v.next, 1500);
    for (uint64_t id = 0; id < 1500; id++)
        cr_assert_eq(v.seen[id], 1u, "sample %lu delivered %u times", (unsigned long)id,
                     v.seen[id]);
    cr_assert_gt(st.wakes, 0);
    cr_assert_lt(took, tu_timeout(20), "%.2f s: the fetcher waited for its timer", took);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

typedef struct later {
    mock_t *m;
    uint64_t from, count;
    int delay_ms;
} later_t;

static void *produce_later(void *arg)
{
    later_t *l = arg;
    usleep((useconds_t)l->delay_ms * 1000);
    for (uint64_t id = l->from; id < l->from + l->count; id++)
        kr_produce(l->m->producer, "live", 0, id, 1);
    /* acknowledged here; whether all were delivered is checked after the
     * join (kr_flush), on the test's thread, where an assertion may fail */
    rd_kafka_flush(l->m->producer, (int)(tu_timeout(10) * 1000));
    return NULL;
}

typedef struct timed {
    kr_seen_t v;
    double t0;
    double at[16]; /* when each stripe came, seconds after t0 */
    uint32_t rows[16];
    uint32_t calls;
} timed_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sl_err_t on_timed(void *ctx, const sl_kafka_stripe_t *s, int64_t first, int64_t end,
                         sl_error_t *err)
{
    timed_t *t = ctx;
    if (t->calls < 16) {
        t->at[t->calls] = now_s() - t->t0;
        t->rows[t->calls] = s->rows.batch.batch_size;
    }
    t->calls++;
    return kr_on_stripe(&t->v, s, first, end, err);
}

/* A range above the log's end is a stream: the read waits for records, a
 * stripe goes out linger_ms after its first record however few it holds,
 * and the read ends when the position passes the range. */
Test(kafka_chunks, linger_and_waiting_for_records)
{
    mock_t m;
    mock_start(&m, "live", 1);
    for (uint64_t id = 0; id < 3; id++)
        kr_produce(m.producer, "live", 0, id, 1);
    kr_flush(m.producer, (int)(tu_timeout(10000 / 1000.0) * 1000));
    sl_kafka_consumer_t *c = consumer(m.bootstraps);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    sl_error_t err = {0};
    static timed_t t;
    memset(&t, 0, sizeof t);
    /* linger and the pause before the next records scale with the build's
     * timeout scale (the sanitizer build is slower): the 3 later records,
     * produced together, must reach the reader within one linger */
    double gap = tu_timeout(0.6), linger = tu_timeout(0.1);
    later_t l = {.m = &m, .from = 3, .count = 3, .delay_ms = (int)(gap * 1000)};
    pthread_t th;
    t.t0 = now_s();
    pthread_create(&th, NULL, produce_later, &l);
    sl_kafka_read_opts_t o = {.topic = "live",
                              .partition = 0,
                              .from = 0,
                              .to = 6,
                              .batch_rows = 1000,
                              .linger_ms = (uint32_t)(linger * 1000),
                              .rows = rows,
                              .stripe = on_timed,
                              .ctx = &t};
    cr_assert_eq(sl_kafka_read_range(c, &o, NULL, &err), SL_OK, "%s", err.msg);
    double took = now_s() - t.t0;
    pthread_join(th, NULL);
    kr_flush(m.producer, (int)(tu_timeout(10) * 1000));
    cr_assert_eq(t.calls, 2);
    cr_assert_eq(t.rows[0], 3);
    cr_assert_eq(t.rows[1], 3);
    /* the first 3 went out after linger, before the next 3 were produced */
    cr_assert(t.at[0] < gap, "first stripe at %.3f s", t.at[0]);
    cr_assert(t.at[1] >= gap, "second stripe at %.3f s", t.at[1]);
    cr_assert(took < gap + tu_timeout(5.0), "read took %.3f s", took);
    for (uint64_t id = 0; id < 6; id++)
        cr_assert_eq(t.v.seen[id], 1);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

/* yield (a stream's head handed back) is asked only at the partition's
 * end with nothing held: what the read covered, stats.end, is exactly
 * what was consumed, and the stripes tile [from, end). */
typedef struct yielder {
    kr_seen_t v;
    int64_t want_next; /* every record below it consumed when yield is asked */
    uint32_t calls, say_yes_at;
} yielder_t;

static bool yield_at_end(void *ctx)
{
    yielder_t *y = ctx;
    cr_assert_eq(y->v.next, y->want_next, "yield asked at stripe end %ld, the log ends at %ld",
                 (long)y->v.next, (long)y->want_next);
    return ++y->calls >= y->say_yes_at;
}

static sl_err_t yield_stripe(void *ctx, const sl_kafka_stripe_t *s, int64_t first, int64_t end,
                             sl_error_t *err)
{
    return kr_on_stripe(&((yielder_t *)ctx)->v, s, first, end, err);
}

Test(kafka_chunks, yield_ends_a_read_at_the_partitions_end_only)
{
    mock_t m;
    mock_start(&m, "heads", 1);
    for (uint64_t id = 0; id < 40; id++)
        kr_produce(m.producer, "heads", 0, id, id % 5);
    kr_flush(m.producer, (int)(tu_timeout(10000 / 1000.0) * 1000));
    sl_kafka_consumer_t *c = consumer(m.bootstraps);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    sl_error_t err = {0};
    static yielder_t y;
    memset(&y, 0, sizeof y);
    y.want_next = 40;
    y.say_yes_at = 3; /* asked again while it waits at the end */
    sl_kafka_read_opts_t o = {.topic = "heads",
                              .partition = 0,
                              .from = 0,
                              .to = 1000, /* a chunk far above the log's end */
                              .batch_rows = 16,
                              .linger_ms = 5,
                              .rows = rows,
                              .stripe = yield_stripe,
                              .ctx = &y,
                              .yield = yield_at_end};
    sl_kafka_read_stats_t st = {0};
    cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.end, 40, "read to %ld", (long)st.end);
    cr_assert_eq(y.v.next, 40);
    cr_assert_eq(y.calls, 3);
    cr_assert_eq(st.records, 40);
    for (uint64_t id = 0; id < 40; id++)
        cr_assert_eq(y.v.seen[id], 1, "id %llu", (unsigned long long)id);
    /* the rest of the chunk later (a later lease): 10 more records */
    for (uint64_t id = 40; id < 50; id++)
        kr_produce(m.producer, "heads", 0, id, id % 5);
    kr_flush(m.producer, (int)(tu_timeout(10000 / 1000.0) * 1000));
    y.want_next = 50;
    y.calls = 0;
    y.say_yes_at = 1;
    o.from = 40;
    cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.end, 50);
    for (uint64_t id = 0; id < 50; id++)
        cr_assert_eq(y.v.seen[id], 1, "id %llu", (unsigned long long)id);
    /* at the end already: nothing read, nothing handed on */
    y.calls = 0;
    o.from = 50;
    uint32_t stripes = y.v.stripes + y.v.empty;
    cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.end, 50);
    cr_assert_eq(y.v.stripes + y.v.empty, stripes);
    /* a range that ends below the log's end is read to its end: yield is
     * never asked (the end is not reported inside it) */
    y.calls = 0;
    y.v.next = 10;
    o.from = 10;
    o.to = 30;
    cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.end, 30);
    cr_assert_eq(y.v.next, 30);
    cr_assert_eq(y.calls, 0);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

typedef struct canceller {
    atomic_bool flag;
    int delay_ms;
} canceller_t;

static void *cancel_later(void *arg)
{
    canceller_t *k = arg;
    usleep((useconds_t)k->delay_ms * 1000);
    atomic_store(&k->flag, true);
    return NULL;
}

Test(kafka_chunks, cancel_and_offsets_the_log_lacks)
{
    mock_t m;
    mock_start(&m, "live", 1);
    for (uint64_t id = 0; id < 5; id++)
        kr_produce(m.producer, "live", 0, id, 1);
    kr_flush(m.producer, (int)(tu_timeout(10000 / 1000.0) * 1000));
    sl_kafka_consumer_t *c = consumer(m.bootstraps);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    sl_error_t err = {0};
    static kr_seen_t v;
    memset(&v, 0, sizeof v);
    /* a stream nobody writes to: cancelled, nothing handed on past the 5 */
    canceller_t k = {.delay_ms = (int)(tu_timeout(0.3) * 1000)}; /* after the 5 are read */
    atomic_init(&k.flag, false);
    pthread_t th;
    pthread_create(&th, NULL, cancel_later, &k);
    sl_kafka_read_opts_t o = {.topic = "live",
                              .partition = 0,
                              .from = 0,
                              .to = 100,
                              .batch_rows = 2,
                              .linger_ms = (uint32_t)(tu_timeout(0.05) * 1000),
                              .rows = rows,
                              .stripe = kr_on_stripe,
                              .ctx = &v,
                              .cancel = &k.flag};
    double t0 = now_s();
    cr_assert_eq(sl_kafka_read_range(c, &o, NULL, &err), SL_ERR_CLOSED);
    pthread_join(th, NULL);
    cr_assert(now_s() - t0 < tu_timeout(5.0));
    cr_assert_eq(v.next, 5, "read to %ld", (long)v.next); /* 2 + 2 + 1 after linger */
    for (uint64_t id = 0; id < 5; id++)
        cr_assert_eq(v.seen[id], 1);
    /* an offset past the log's end: the broker says out of range, and with
     * auto.offset.reset=error that is an error, not a jump */
    memset(&v, 0, sizeof v);
    v.next = 50;
    o = (sl_kafka_read_opts_t){.topic = "live",
                               .partition = 0,
                               .from = 50,
                               .to = 60,
                               .batch_rows = 2,
                               .linger_ms = 50,
                               .rows = rows,
                               .stripe = kr_on_stripe,
                               .ctx = &v};
    cr_assert_eq(sl_kafka_read_range(c, &o, NULL, &err), SL_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "kafka topic 'live' partition 0: offset 50 is gone") == err.msg, "%s",
              err.msg);
    cr_assert_eq(v.stripes + v.empty, 0);
    /* a bad range */
    o.from = 10;
    o.to = 10;
    cr_assert_eq(sl_kafka_read_range(c, &o, NULL, &err), SL_ERR_INVALID);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

/* A partition whose leader is not known yet (a topic just created) or
 * moving: offsets by time and watermarks are asked again until the
 * timeout, not failed at once (ListOffsets, API key 2, answers
 * NOT_LEADER_FOR_PARTITION twice, then LEADER_NOT_AVAILABLE). */
Test(kafka_chunks, a_moving_leader_is_asked_again)
{
    mock_t m;
    mock_start(&m, "t", 1);
    for (uint64_t id = 0; id < 10; id++)
        kr_produce_at(m.producer, "t", 0, id, id, "1", NULL, 0, 1000000 + (int64_t)id * 10);
    kr_flush(m.producer, (int)(tu_timeout(10) * 1000));
    sl_kafka_consumer_t *c = consumer(m.bootstraps);
    sl_error_t err = {0};
    int64_t off = -1, lo = -1, hi = -1, plain = -2;
    /* the mock cluster answers offsets by time with the end: what it says
     * without errors is what it must say after them */
    cr_assert_eq(
        sl_kafka_offset_for_time(c, "t", 0, 1000045, (int)(tu_timeout(10) * 1000), &plain, &err),
        SL_OK, "%s", err.msg);
    rd_kafka_mock_push_request_errors(m.mc, 2, 3, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                      RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE);
    cr_assert_eq(
        sl_kafka_offset_for_time(c, "t", 0, 1000045, (int)(tu_timeout(10) * 1000), &off, &err),
        SL_OK, "%s", err.msg);
    cr_assert_eq(off, plain, "offset %ld, without errors %ld", (long)off, (long)plain);
    rd_kafka_mock_push_request_errors(m.mc, 2, 2, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                      RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE);
    cr_assert_eq(sl_kafka_watermarks(c, "t", 0, (int)(tu_timeout(10) * 1000), &lo, &hi, &err),
                 SL_OK, "%s", err.msg);
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 10);
    /* a leader that never comes: the error, once the time is up */
    rd_kafka_resp_err_t never[200];
    for (int i = 0; i < 200; i++)
        never[i] = RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION;
    rd_kafka_mock_push_request_errors_array(m.mc, 2, 200, never);
    double t0 = now_s();
    cr_assert_eq(sl_kafka_watermarks(c, "t", 0, 300, &lo, &hi, &err), SL_ERR_IO);
    cr_assert_lt(now_s() - t0, tu_timeout(3));
    cr_assert_str_eq(err.msg, "kafka topic 't' partition 0: watermarks: Broker: Not leader for "
                              "partition");
    sl_kafka_consumer_destroy(c);
    mock_stop(&m);
}

Test(kafka_chunks, consumer_refuses_what_sluice_sets)
{
    const char *props[] = {"auto.offset.reset", "earliest"};
    sl_kafka_consumer_opts_t o = {.brokers = "127.0.0.1:1", .props = props, .num_props = 1};
    sl_kafka_consumer_t *c = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_consumer_new(&o, &c, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "kafka consumer: property auto.offset.reset is set by sluice");
    const char *props2[] = {"fetch.max.bytes", "lots"};
    o.props = props2;
    cr_assert_eq(sl_kafka_consumer_new(&o, &c, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "kafka consumer: property fetch.max.bytes: ") == err.msg, "%s",
              err.msg);
    cr_assert_null(c);
}

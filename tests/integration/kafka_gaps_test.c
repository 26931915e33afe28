/* Partition chunks against the real broker (docs/KAFKA.md): offsets with
 * gaps (transaction markers, aborted transactional records) are covered
 * by the chunks that hold them, each chunk ends when the consumer's
 * position passes it, committed records are delivered exactly once and
 * aborted ones never; offsets that retention deleted (DeleteRecords) are
 * an error, never a silent jump; a topic that does not exist is
 * NOT_FOUND. Bounded: every wait has a timeout. */
#include "kafka_util.h"

#include "../kafka_records.h"
#include "kafka/chunk.h"
#include "kafka/record_decode.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_gaps, .init = suite_setup);

static sl_kafka_consumer_t *consumer(void)
{
    const char *props[] = {"reconnect.backoff.max.ms", "500", "fetch.wait.max.ms", "50"};
    sl_kafka_consumer_opts_t o = {.brokers = ku_broker.bootstrap,
                                  .group_id = "sluice-chunk-test",
                                  .props = props,
                                  .num_props = 2};
    sl_kafka_consumer_t *c = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_consumer_new(&o, &c, &err), SL_OK, "%s", err.msg);
    return c;
}

static void txn_ok(rd_kafka_error_t *e, const char *what)
{
    cr_assert_null(e, "%s: %s", what, e ? rd_kafka_error_string(e) : "");
}

/* Three transactions on one partition: ids 0..9 committed (offsets 0..9,
 * marker 10), ids 100..104 aborted (11..15, marker 16), ids 10..19
 * committed with id 15 lacking its header (17..26, marker 27). Chunks of 7
 * offsets: [0,7) [7,14) [14,21) [21,28); the second ends inside the
 * aborted run and the last on a marker. */
Test(kafka_gaps, gaps_markers_and_aborted_records)
{
    char topic[64], txid[64];
    snprintf(topic, sizeof topic, "chunk-gaps-%d", ku_run());
    snprintf(txid, sizeof txid, "sluice-chunk-test-%d", ku_run());
    rd_kafka_t *p = kr_producer(ku_conf("transactional.id", txid, "linger.ms", "1", NULL));
    ku_create_topic(p, topic, 1, tu_timeout(30));
    int tmo = (int)(tu_timeout(30) * 1000);
    txn_ok(rd_kafka_init_transactions(p, tmo), "init_transactions");
    txn_ok(rd_kafka_begin_transaction(p), "begin");
    for (uint64_t id = 0; id < 10; id++)
        kr_produce(p, topic, 0, id, id % 3);
    txn_ok(rd_kafka_commit_transaction(p, tmo), "commit");
    txn_ok(rd_kafka_begin_transaction(p), "begin");
    for (uint64_t id = 100; id < 105; id++)
        kr_produce(p, topic, 0, id, id % 3);
    kr_flush(p, tmo); /* on the log before the abort: they occupy offsets */
    txn_ok(rd_kafka_abort_transaction(p, tmo), "abort");
    txn_ok(rd_kafka_begin_transaction(p), "begin");
    for (uint64_t id = 10; id < 20; id++) {
        if (id == 15)
            kr_produce_raw(p, topic, 0, id, id % 3, NULL, NULL, 0);
        else
            kr_produce(p, topic, 0, id, id % 3);
    }
    txn_ok(rd_kafka_commit_transaction(p, tmo), "commit");
    kr_flush(p, tmo); /* serves the delivery reports: none may have failed */
    rd_kafka_destroy(p);

    sl_kafka_consumer_t *c = consumer();
    sl_error_t err = {0};
    int64_t lo = -1, hi = -1;
    /* commit_transaction returns once the coordinator logged the commit;
     * it writes the markers after, and a read_committed consumer's end is
     * the last stable offset until then (17 here, seen on a broker just
     * restarted): wait for the marker, bounded */
    for (int tries = (int)(tu_timeout(30) / 0.05); tries > 0; tries--) {
        cr_assert_eq(sl_kafka_watermarks(c, topic, 0, tmo, &lo, &hi, &err), SL_OK, "%s", err.msg);
        if (hi == 28) break;
        usleep(50 * 1000);
    }
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 28, "high watermark %ld: the layout assumed above changed", (long)hi);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    static kr_seen_t v;
    memset(&v, 0, sizeof v);
    const uint64_t want_records[] = {7, 3, 4, 6}; /* visible records per chunk */
    int64_t from, to;
    double t0 = ku_now();
    uint32_t k = 0;
    for (uint64_t i = 0; sl_kafka_chunk_bounds(lo, 7, i, hi, &from, &to); i++, k++) {
        sl_kafka_read_opts_t o = {.topic = topic,
                                  .partition = 0,
                                  .from = from,
                                  .to = to,
                                  .batch_rows = 4,
                                  .linger_ms = 10000,
                                  .rows = rows,
                                  .stripe = kr_on_stripe,
                                  .ctx = &v,
                                  .bad = kr_on_bad};
        sl_kafka_read_stats_t st = {0};
        cr_assert_eq(sl_kafka_read_range(c, &o, &st, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(v.next, to);
        cr_assert_eq(st.records, want_records[i], "chunk %lu: %lu records", (unsigned long)i,
                     (unsigned long)st.records);
    }
    cr_assert_eq(k, 4);
    cr_assert_lt(ku_now() - t0, tu_timeout(20), "4 chunks took %.1f s", ku_now() - t0);
    cr_assert_eq(v.bad_reasons, 1);
    for (uint64_t id = 0; id < 4096; id++)
        cr_assert_eq(v.seen[id], id < 20 && id != 15 ? 1u : 0u, "sample %lu delivered %u times",
                     (unsigned long)id, v.seen[id]);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
}

/* DeleteRecords moves the low watermark to 20, as retention would: a
 * range from 10 is an error naming the offset; from 20 it reads. */
Test(kafka_gaps, deleted_offsets_are_an_error)
{
    char topic[64];
    snprintf(topic, sizeof topic, "chunk-retention-%d", ku_run());
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "1", NULL));
    ku_create_topic(p, topic, 1, tu_timeout(30));
    int tmo = (int)(tu_timeout(30) * 1000);
    for (uint64_t id = 0; id < 50; id++)
        kr_produce(p, topic, 0, id, 1);
    kr_flush(p, tmo);
    ku_delete_records(p, topic, 0, 20, tu_timeout(30));
    rd_kafka_destroy(p);

    sl_kafka_consumer_t *c = consumer();
    sl_error_t err = {0};
    int64_t lo = -1, hi = -1;
    cr_assert_eq(sl_kafka_watermarks(c, topic, 0, tmo, &lo, &hi, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(lo, 20);
    cr_assert_eq(hi, 50);
    sl_wh_schema_t *schema = NULL;
    sl_kafka_rows_t *rows = kr_rows(&schema);
    static kr_seen_t v;
    memset(&v, 0, sizeof v);
    v.next = 10;
    sl_kafka_read_opts_t o = {.topic = topic,
                              .partition = 0,
                              .from = 10,
                              .to = 30,
                              .batch_rows = 100,
                              .linger_ms = 10000,
                              .rows = rows,
                              .stripe = kr_on_stripe,
                              .ctx = &v};
    double t0 = ku_now();
    cr_assert_eq(sl_kafka_read_range(c, &o, NULL, &err), SL_ERR_NOT_FOUND, "%s", err.msg);
    cr_assert_lt(ku_now() - t0, tu_timeout(20));
    char want[160];
    snprintf(want, sizeof want, "kafka topic '%s' partition 0: offset 10 is gone", topic);
    cr_assert(strstr(err.msg, want) == err.msg, "%s", err.msg);
    for (uint64_t id = 0; id < 50; id++)
        cr_assert_eq(v.seen[id], 0);
    v.next = 20;
    o.from = 20;
    o.to = 50;
    cr_assert_eq(sl_kafka_read_range(c, &o, NULL, &err), SL_OK, "%s", err.msg);
    for (uint64_t id = 0; id < 50; id++)
        cr_assert_eq(v.seen[id], id >= 20 ? 1u : 0u);
    int32_t parts = 0;
    cr_assert_eq(sl_kafka_partitions(c, topic, tmo, &parts, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(parts, 1);
    cr_assert_eq(sl_kafka_partitions(c, "no-such-topic", tmo, &parts, &err), SL_ERR_NOT_FOUND, "%s",
                 err.msg);
    sl_kafka_rows_destroy(rows);
    sl_wh_schema_destroy(schema);
    sl_kafka_consumer_destroy(c);
}

KU_TEST_MAIN

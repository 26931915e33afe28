/* The producing side of the Kafka record layout (src/kafka: record.h,
 * producer.h) against librdkafka's in-process mock cluster: the key's
 * bytes, the partitioner against Java's murmur2 vectors, a Sample's exact
 * fields, table rows encoded as the generator's rows are, and a sessions
 * stream produced and consumed back (each sample id once, keyed by its
 * session, with the format header, in the partition Java would choose).
 * Failures: a missing topic, a bad property, failed deliveries and a flush
 * that cannot finish are errors naming what and where, within their
 * bounds. */
#include <criterion/criterion.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "common/log.h"
#include "kafka/producer.h"
#include "kafka/record.h"
#include "sluice.pb-c.h"
#include "testutil.h"
#include "warehouse/import.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

Test(kafka_record, key_is_the_session_big_endian)
{
    uint8_t key[SL_KAFKA_KEY_BYTES];
    sl_kafka_key_put(key, 0x0102030405060708ull);
    const uint8_t want[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cr_assert_arr_eq(key, want, 8);
    cr_assert_eq(sl_kafka_key_get(key), 0x0102030405060708ull);
    sl_kafka_key_put(key, UINT64_MAX - 1);
    cr_assert_eq(key[7], 0xfe);
    cr_assert_eq(sl_kafka_key_get(key), UINT64_MAX - 1);
    cr_assert_str_eq(SL_KAFKA_FORMAT_HEADER, "sluice-format");
    cr_assert_str_eq(SL_KAFKA_FORMAT_VERSION_TEXT, "1");
    cr_assert_eq(SL_KAFKA_FORMAT_VERSION, 1);
}

/* The producer's partitioner, murmur2_random, places a keyed record as
 * Java's default partitioner does: toPositive(murmur2(key)) % partitions.
 * The hashes are the vectors of Kafka's UtilsTest.testMurmur2. */
Test(kafka_record, partitioner_matches_java_murmur2)
{
    static const struct {
        const char *key;
        int32_t java;
    } cases[] = {
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    char why[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", why, sizeof why); /* no brokers: no warning */
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    cr_assert_not_null(rk, "%s", why);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, "murmur2", NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *k = cases[i].key;
        uint32_t positive = (uint32_t)cases[i].java & 0x7fffffffu;
        /* With INT32_MAX partitions the partition is the positive hash. */
        cr_assert_eq(
            rd_kafka_msg_partitioner_murmur2_random(rkt, k, strlen(k), INT32_MAX, NULL, NULL),
            (int32_t)(positive % INT32_MAX), "key %s", k);
        for (int32_t n = 1; n <= 64; n++)
            cr_assert_eq(rd_kafka_msg_partitioner_murmur2_random(rkt, k, strlen(k), n, NULL, NULL),
                         (int32_t)(positive % (uint32_t)n), "key %s over %d partitions", k, n);
    }
    cr_assert_eq(rd_kafka_msg_partitioner_murmur2_random(rkt, "foobar", 6, 50, NULL, NULL), 16);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
}

/* A schema of every kind: two labels, two dense, a sparse and a weighted
 * feature. */
static sl_wh_schema_t *all_kinds_schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_add_label(s, "click", &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_label(s, "like", &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "age", SL_WH_DENSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "items", SL_WH_SPARSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "score", SL_WH_DENSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "tags", SL_WH_WEIGHTED, &err), SL_OK);
    return s;
}

Test(kafka_record, sample_fields_exactly)
{
    sl_wh_schema_t *s = all_kinds_schema();
    sl_kafka_encoder_t *e = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_encoder_new(s, NULL, &e, &err), SL_OK, "%s", err.msg);
    const float labels[2] = {1.0f, 0.0f};
    const float dense[2] = {NAN, 2.5f}; /* age missing */
    const int64_t items[3] = {7, -3, 1LL << 40}, tags[2] = {11, 12};
    const sl_wh_idlist_t lists[2] = {{3, items, NULL}, {2, tags, NULL}}; /* tags weights: 1.0 */
    sl_wh_row_t row = {.sample_id = 42,
                       .session_id = 9000000001LL,
                       .timestamp = 1790000000,
                       .labels = labels,
                       .dense = dense,
                       .sparse = lists};
    const uint8_t *v;
    size_t len;
    cr_assert_eq(sl_kafka_encode_row(e, &row, &v, &len, &err), SL_OK, "%s", err.msg);
    Sluice__Sample *m = sluice__sample__unpack(NULL, len, v);
    cr_assert_not_null(m);
    cr_assert_eq(m->sample_id, 42);
    cr_assert_eq(m->session_id, 9000000001ull);
    cr_assert_eq(m->timestamp, 1790000000);
    cr_assert_eq(m->n_labels, 2);
    cr_assert_str_eq(m->labels[0]->name, "click");
    cr_assert_eq(m->labels[0]->value, 1.0f);
    cr_assert_str_eq(m->labels[1]->name, "like");
    cr_assert_eq(m->labels[1]->value, 0.0f);
    cr_assert_eq(m->n_dense, 1, "the missing dense value is left out");
    cr_assert_str_eq(m->dense[0]->name, "score");
    cr_assert_eq(m->dense[0]->value, 2.5f);
    cr_assert_eq(m->n_sparse, 2);
    cr_assert_str_eq(m->sparse[0]->name, "items");
    cr_assert_eq(m->sparse[0]->n_ids, 3);
    cr_assert_arr_eq(m->sparse[0]->ids, items, sizeof items);
    cr_assert_eq(m->sparse[0]->n_weights, 0, "an unweighted list carries no weights");
    cr_assert_str_eq(m->sparse[1]->name, "tags");
    cr_assert_eq(m->sparse[1]->n_ids, 2);
    cr_assert_arr_eq(m->sparse[1]->ids, tags, sizeof tags);
    cr_assert_eq(m->sparse[1]->n_weights, 2);
    cr_assert_eq(m->sparse[1]->weights[0], 1.0f);
    cr_assert_eq(m->sparse[1]->weights[1], 1.0f);
    sluice__sample__free_unpacked(m, NULL);

    /* No lists, no dense: the features are still named, with empty lists. */
    sl_wh_row_t bare = {.sample_id = 1, .session_id = 2};
    cr_assert_eq(sl_kafka_encode_row(e, &bare, &v, &len, &err), SL_OK, "%s", err.msg);
    m = sluice__sample__unpack(NULL, len, v);
    cr_assert_not_null(m);
    cr_assert_eq(m->n_dense, 0);
    cr_assert_eq(m->n_labels, 2);
    cr_assert_eq(m->labels[0]->value, 0.0f);
    cr_assert_eq(m->n_sparse, 2);
    cr_assert_eq(m->sparse[0]->n_ids, 0);
    cr_assert_eq(m->sparse[1]->n_ids, 0);
    sluice__sample__free_unpacked(m, NULL);
    sl_kafka_encoder_destroy(e);
    sl_wh_schema_destroy(s);
}

/* The rows of a generated table, read back stripe by stripe and encoded
 * through sl_kafka_encoder_row_at, are byte for byte what the generator's
 * own rows encode to. */
Test(kafka_record, table_rows_encode_as_generated_rows)
{
    char *dir = tu_mkdtemp("kafka-table");
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", 3000, 7, &spec, &err), SL_OK);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 700; /* several stripes, the last one short */
    go.writer.no_sync = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(dir, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);

    sl_wh_table_t *t = NULL;
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK, "%s", err.msg);
    const sl_wh_schema_t *schema = sl_wh_table_schema(t);
    sl_wh_splits_t *splits = NULL;
    cr_assert_eq(sl_wh_table_splits(t, NULL, UINT32_MAX, &splits, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(splits->count, 1);
    sl_wh_reader_t *r = NULL;
    sl_wh_read_opts_t ro = {0};
    cr_assert_eq(sl_wh_reader_open_split(t, &splits->items[0], &ro, &r, &err), SL_OK, "%s",
                 err.msg);
    sl_kafka_encoder_t *from_table = NULL, *from_gen = NULL;
    cr_assert_eq(sl_kafka_encoder_new(schema, NULL, &from_table, &err), SL_OK);
    cr_assert_eq(sl_kafka_encoder_new(schema, NULL, &from_gen, &err), SL_OK);
    sl_wh_gen_iter_t *it = NULL;
    cr_assert_eq(sl_wh_gen_iter_new(&spec, 0, 0, NULL, &it, &err), SL_OK, "%s", err.msg);

    uint64_t n = 0;
    uint32_t stripes = 0;
    const sl_wh_rows_t *rows;
    while (sl_wh_reader_next(r, &rows, &err) == SL_OK && rows != NULL) {
        stripes++;
        for (uint32_t i = 0; i < rows->batch.batch_size; i++, n++) {
            sl_wh_row_t tr, gr;
            cr_assert_eq(sl_kafka_encoder_row_at(from_table, rows, i, &tr, &err), SL_OK, "%s",
                         err.msg);
            cr_assert(sl_wh_gen_iter_next(it, &gr));
            const uint8_t *tv, *gv;
            size_t tl, gl;
            cr_assert_eq(sl_kafka_encode_row(from_table, &tr, &tv, &tl, &err), SL_OK);
            cr_assert_eq(sl_kafka_encode_row(from_gen, &gr, &gv, &gl, &err), SL_OK);
            cr_assert_eq(tl, gl, "row %llu: %zu bytes from the table, %zu generated",
                         (unsigned long long)n, tl, gl);
            cr_assert_eq(memcmp(tv, gv, tl), 0, "row %llu differs", (unsigned long long)n);
        }
    }
    cr_assert_eq(err.code, SL_OK, "%s", err.msg);
    cr_assert_eq(n, 3000);
    cr_assert_eq(stripes, 5);

    /* Out of order (row 5 after row 9 of the same stripe) still gives row 5. */
    cr_assert_eq(sl_wh_reader_set_range(r, 0, 1, &err), SL_OK);
    cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK);
    sl_wh_row_t a, b;
    cr_assert_eq(sl_kafka_encoder_row_at(from_table, rows, 5, &a, &err), SL_OK);
    int64_t first_id5 = a.sparse[3].len > 0 ? a.sparse[3].ids[0] : -1;
    uint32_t len5 = a.sparse[3].len;
    cr_assert_eq(sl_kafka_encoder_row_at(from_table, rows, 9, &b, &err), SL_OK);
    cr_assert_eq(sl_kafka_encoder_row_at(from_table, rows, 5, &a, &err), SL_OK);
    cr_assert_eq(a.sample_id, 5);
    cr_assert_eq(a.sparse[3].len, len5);
    cr_assert_eq(len5 > 0 ? a.sparse[3].ids[0] : -1, first_id5);
    cr_assert_eq(sl_kafka_encoder_row_at(from_table, rows, 700, &a, &err), SL_ERR_INVALID);

    /* Rows read with a projection lack features of the schema: named. */
    sl_wh_reader_close(r);
    const char *only[] = {"item_id"};
    sl_wh_read_opts_t proj = {.features = only, .num_features = 1};
    cr_assert_eq(sl_wh_reader_open_split(t, &splits->items[0], &proj, &r, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK);
    cr_assert_eq(sl_kafka_encoder_row_at(from_table, rows, 0, &a, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, " stripe 0: no dense feature '") != NULL, "%s", err.msg);
    sl_wh_read_opts_t no_labels = {.skip_columns = SL_WH_COL_LABELS};
    sl_wh_reader_close(r);
    cr_assert_eq(sl_wh_reader_open_split(t, &splits->items[0], &no_labels, &r, &err), SL_OK);
    cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK);
    cr_assert_eq(sl_kafka_encoder_row_at(from_table, rows, 0, &a, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, " stripe 0: no label 'click'") != NULL, "%s", err.msg);

    sl_wh_gen_iter_destroy(it);
    sl_kafka_encoder_destroy(from_table);
    sl_kafka_encoder_destroy(from_gen);
    sl_wh_reader_close(r);
    sl_wh_splits_destroy(splits);
    sl_wh_table_close(t);
    tu_rm_tree(dir);
    free(dir);
}

/* ---- against the mock cluster ---- */

#define PARTITIONS 4
#define ROWS 5000

typedef struct mock {
    rd_kafka_t *rk; /* the handle the mock cluster lives in */
    rd_kafka_mock_cluster_t *mc;
    const char *bootstraps;
} mock_t;

static mock_t mock_new(int brokers)
{
    mock_t m;
    char why[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", why, sizeof why);
    m.rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
    cr_assert_not_null(m.rk, "%s", why);
    m.mc = rd_kafka_mock_cluster_new(m.rk, brokers);
    cr_assert_not_null(m.mc);
    m.bootstraps = rd_kafka_mock_cluster_bootstraps(m.mc);
    return m;
}

static void mock_destroy(mock_t *m)
{
    rd_kafka_mock_cluster_destroy(m->mc);
    rd_kafka_destroy(m->rk);
}

static sl_kafka_producer_opts_t opts_for(const mock_t *m, const char *topic)
{
    static const char *const quiet[] = {"log_level=0"};
    sl_kafka_producer_opts_t o = {.brokers = m->bootstraps,
                                  .topic = topic,
                                  .timeout_s = tu_timeout(10),
                                  .properties = quiet,
                                  .num_properties = 1};
    return o;
}

/* A producer on a new topic of the mock cluster. */
static sl_kafka_producer_t *producer_on(const mock_t *m, const char *topic, int partitions)
{
    cr_assert_eq(rd_kafka_mock_topic_create(m->mc, topic, partitions, 1),
                 RD_KAFKA_RESP_ERR_NO_ERROR);
    sl_kafka_producer_opts_t o = opts_for(m, topic);
    sl_kafka_producer_t *p = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_producer_new(&o, &p, &err), SL_OK, "%s", err.msg);
    return p;
}

Test(kafka_producer, sessions_stream_consumed_back_exactly)
{
    mock_t m = mock_new(3);
    sl_kafka_producer_t *p = producer_on(&m, "samples", PARTITIONS);
    sl_error_t err = {0};

    sl_wh_gen_spec_t spec;
    sl_wh_schema_t *schema = NULL;
    sl_wh_gen_iter_t *it = NULL;
    sl_kafka_encoder_t *e = NULL;
    cr_assert_eq(sl_wh_gen_preset("sessions", ROWS, 3, &spec, &err), SL_OK);
    cr_assert_eq(sl_wh_gen_schema(&spec, NULL, &schema, &err), SL_OK);
    cr_assert_eq(sl_wh_gen_iter_new(&spec, 0, 0, NULL, &it, &err), SL_OK);
    cr_assert_eq(sl_kafka_encoder_new(schema, NULL, &e, &err), SL_OK);
    static int64_t session_of[ROWS];
    int64_t t_before = wall_ms();
    sl_wh_row_t row;
    uint64_t bytes = 0;
    while (sl_wh_gen_iter_next(it, &row)) {
        const uint8_t *v;
        size_t len;
        cr_assert_eq(sl_kafka_encode_row(e, &row, &v, &len, &err), SL_OK);
        session_of[row.sample_id] = row.session_id;
        cr_assert_eq(sl_kafka_producer_send(p, (uint64_t)row.session_id, v, len, &err), SL_OK, "%s",
                     err.msg);
        bytes += len + 8;
    }
    cr_assert_eq(sl_kafka_producer_flush(p, tu_timeout(30), &err), SL_OK, "%s", err.msg);
    int64_t t_after = wall_ms();
    sl_kafka_producer_stats_t st;
    sl_kafka_producer_stats(p, &st);
    cr_assert_eq(st.sent, ROWS);
    cr_assert_eq(st.delivered, ROWS);
    cr_assert_eq(st.failed, 0);
    cr_assert_eq(st.bytes, bytes);
    cr_assert_eq(st.partitions, PARTITIONS);
    cr_assert_not(st.created);
    cr_assert_eq(sl_kafka_producer_outstanding(p), 0);
    sl_kafka_producer_destroy(p);

    /* Read every partition from its start, without a group. */
    char why[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *props[][2] = {{"bootstrap.servers", m.bootstraps},
                              {"group.id", "reader"},
                              {"enable.auto.commit", "false"},
                              {"enable.partition.eof", "true"},
                              {"log_level", "0"}};
    for (size_t i = 0; i < sizeof props / sizeof props[0]; i++)
        cr_assert_eq(rd_kafka_conf_set(conf, props[i][0], props[i][1], why, sizeof why),
                     RD_KAFKA_CONF_OK, "%s", why);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
    cr_assert_not_null(c, "%s", why);
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(PARTITIONS);
    for (int i = 0; i < PARTITIONS; i++)
        rd_kafka_topic_partition_list_add(parts, "samples", i)->offset = RD_KAFKA_OFFSET_BEGINNING;
    cr_assert_eq(rd_kafka_assign(c, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(c, "samples", NULL);

    static unsigned char seen[ROWS];
    memset(seen, 0, sizeof seen);
    /* The last sample id each session showed in its partition: a session's
     * samples come in the order they were produced. */
    static int64_t last_of_session[ROWS];
    for (int i = 0; i < ROWS; i++)
        last_of_session[i] = -1;
    int ends = 0, got = 0, per_partition[PARTITIONS] = {0};
    bool at_end[PARTITIONS] = {false};
    double deadline = now_s() + tu_timeout(30);
    while (ends < PARTITIONS) {
        cr_assert_lt(now_s(), deadline, "%d of %d records read back in time", got, ROWS);
        rd_kafka_message_t *msg = rd_kafka_consumer_poll(c, 100);
        if (msg == NULL) continue;
        if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (!at_end[msg->partition]) ends++;
            at_end[msg->partition] = true;
            rd_kafka_message_destroy(msg);
            continue;
        }
        cr_assert_eq(msg->err, RD_KAFKA_RESP_ERR_NO_ERROR, "%s", rd_kafka_message_errstr(msg));
        Sluice__Sample *s = sluice__sample__unpack(NULL, msg->len, msg->payload);
        cr_assert_not_null(s, "partition %d offset %lld: not a Sample", msg->partition,
                           (long long)msg->offset);
        uint64_t id = s->sample_id;
        cr_assert_lt(id, ROWS, "sample id %llu was not produced", (unsigned long long)id);
        cr_assert_eq(seen[id], 0, "sample %llu arrived twice", (unsigned long long)id);
        seen[id] = 1;
        got++;
        per_partition[msg->partition]++;
        cr_assert_eq(s->session_id, (uint64_t)session_of[id]);
        cr_assert_eq(msg->key_len, 8);
        cr_assert_eq(sl_kafka_key_get(msg->key), s->session_id, "sample %llu: key",
                     (unsigned long long)id);
        cr_assert_eq(msg->partition,
                     rd_kafka_msg_partitioner_murmur2(rkt, msg->key, 8, PARTITIONS, NULL, NULL),
                     "sample %llu in partition %d", (unsigned long long)id, msg->partition);
        cr_assert_gt((int64_t)id, last_of_session[s->session_id], "session %llu out of order",
                     (unsigned long long)s->session_id);
        last_of_session[s->session_id] = (int64_t)id;
        rd_kafka_headers_t *h = NULL;
        cr_assert_eq(rd_kafka_message_headers(msg, &h), RD_KAFKA_RESP_ERR_NO_ERROR);
        cr_assert_eq(rd_kafka_header_cnt(h), 1);
        const void *hv;
        size_t hlen;
        cr_assert_eq(rd_kafka_header_get_last(h, SL_KAFKA_FORMAT_HEADER, &hv, &hlen),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
        cr_assert(hlen == 1 && memcmp(hv, "1", 1) == 0);
        rd_kafka_timestamp_type_t tt;
        int64_t ts = rd_kafka_message_timestamp(msg, &tt);
        cr_assert_eq(tt, RD_KAFKA_TIMESTAMP_CREATE_TIME);
        cr_assert(ts >= t_before && ts <= t_after, "timestamp %lld outside [%lld, %lld]",
                  (long long)ts, (long long)t_before, (long long)t_after);
        sluice__sample__free_unpacked(s, NULL);
        rd_kafka_message_destroy(msg);
    }
    cr_assert_eq(got, ROWS);
    for (int i = 0; i < PARTITIONS; i++)
        cr_assert_gt(per_partition[i], 0, "partition %d got nothing", i);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    sl_kafka_encoder_destroy(e);
    sl_wh_gen_iter_destroy(it);
    sl_wh_schema_destroy(schema);
    mock_destroy(&m);
}

/* What `sluice demo --online` times the producer's stage by: a delivery
 * callback per acknowledged record with its timestamp, and librdkafka's
 * statistics when statistics.interval.ms is set. */
typedef struct acks {
    uint64_t n, stats, outside; /* reports; CreateTimes outside [t0, t1] */
    int64_t t0;
    bool has_brokers;
} acks_t;

static void count_ack(void *ctx, int64_t ts_ms, bool append_time)
{
    acks_t *a = ctx;
    a->n++;
    /* The mock cluster answers with a LogAppendTime of its own (not a
     * clock's), a topic of a real broker keeps CreateTime. */
    if (!append_time && (ts_ms < a->t0 || ts_ms > wall_ms())) a->outside++;
}

static void count_stats(void *ctx, const char *json)
{
    acks_t *a = ctx;
    a->stats++;
    a->has_brokers |= strstr(json, "\"brokers\"") != NULL;
}

Test(kafka_producer, delivery_and_statistics_callbacks)
{
    mock_t m = mock_new(1);
    cr_assert_eq(rd_kafka_mock_topic_create(m.mc, "acked", 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    static const char *const props[] = {"log_level=0", "statistics.interval.ms=100"};
    acks_t a = {0};
    sl_kafka_producer_opts_t o = opts_for(&m, "acked");
    o.properties = props;
    o.num_properties = 2;
    o.on_delivered = count_ack;
    o.delivered_ctx = &a;
    o.on_stats = count_stats;
    o.stats_ctx = &a;
    sl_kafka_producer_t *p = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_producer_new(&o, &p, &err), SL_OK, "%s", err.msg);
    a.t0 = wall_ms();
    for (uint64_t i = 0; i < 100; i++)
        cr_assert_eq(sl_kafka_producer_send(p, i, "v", 1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_kafka_producer_flush(p, tu_timeout(10), &err), SL_OK, "%s", err.msg);
    cr_assert_eq(a.n, 100);
    cr_assert_eq(a.outside, 0);
    double deadline = now_s() + tu_timeout(5);
    while (a.stats == 0 && now_s() < deadline)
        sl_kafka_producer_poll(p, 50);
    cr_assert_gt(a.stats, 0, "no statistics within %.0f s", tu_timeout(5));
    cr_assert(a.has_brokers);
    sl_kafka_producer_destroy(p);
    mock_destroy(&m);
}

Test(kafka_producer, missing_topic_and_bad_properties)
{
    mock_t m = mock_new(1);
    sl_kafka_producer_opts_t o = opts_for(&m, "nowhere");
    sl_kafka_producer_t *p = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_producer_new(&o, &p, &err), SL_ERR_NOT_FOUND);
    cr_assert_null(p);
    cr_assert(strstr(err.msg, "topic nowhere does not exist on ") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, m.bootstraps) != NULL, "%s", err.msg);

    const char *bad[] = {"log_level=0", "no.such.property=1"};
    o.properties = bad;
    o.num_properties = 2;
    cr_assert_eq(sl_kafka_producer_new(&o, &p, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "property 2 no.such.property=1: ") != NULL, "%s", err.msg);
    const char *noeq[] = {"linger.ms"};
    o.properties = noeq;
    o.num_properties = 1;
    cr_assert_eq(sl_kafka_producer_new(&o, &p, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "property 1 'linger.ms': expected NAME=VALUE");
    o.topic = "";
    cr_assert_eq(sl_kafka_producer_new(&o, &p, &err), SL_ERR_INVALID);
    mock_destroy(&m);
}

/* A delivery the broker refuses for good fails the flush (and every later
 * send) with the topic, the partition and the broker's error. */
Test(kafka_producer, failed_delivery_names_topic_and_partition)
{
    mock_t m = mock_new(1);
    sl_kafka_producer_t *p = producer_on(&m, "refused", 1);
    sl_error_t err = {0};
    /* Produce is ApiKey 0; the error is not retriable. */
    rd_kafka_mock_push_request_errors(m.mc, 0, 4, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                                      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                                      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                                      RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    cr_assert_eq(sl_kafka_producer_send(p, 77, "x", 1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_kafka_producer_flush(p, tu_timeout(10), &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "topic refused") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "uthoriz") != NULL, "%s", err.msg);
    sl_kafka_producer_stats_t st;
    sl_kafka_producer_stats(p, &st);
    cr_assert_eq(st.sent, 1);
    cr_assert_eq(st.failed, 1);
    cr_assert_eq(st.delivered, 0);
    sl_error_t again = {0};
    cr_assert_eq(sl_kafka_producer_send(p, 78, "y", 1, &again), SL_ERR_IO);
    cr_assert_str_eq(again.msg, err.msg);
    sl_kafka_producer_destroy(p);
    mock_destroy(&m);
}

/* With the only broker down, a flush gives up at its bound and says how
 * many records are still out; destroying the producer then does not wait
 * for them. */
Test(kafka_producer, flush_is_bounded)
{
    mock_t m = mock_new(1);
    sl_kafka_producer_t *p = producer_on(&m, "stuck", 2);
    sl_error_t err = {0};
    cr_assert_eq(rd_kafka_mock_broker_set_down(m.mc, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    for (uint64_t s = 0; s < 10; s++)
        cr_assert_eq(sl_kafka_producer_send(p, s, "v", 1, &err), SL_OK, "%s", err.msg);
    double t0 = now_s();
    cr_assert_eq(sl_kafka_producer_flush(p, 0.5, &err), SL_ERR_TIMEOUT);
    double took = now_s() - t0;
    cr_assert(took >= 0.45 && took < tu_timeout(5), "flush took %.2f s", took);
    cr_assert(strstr(err.msg, "topic stuck on ") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "10 of 10 records not acknowledged within 0.5 s") != NULL, "%s",
              err.msg);
    cr_assert_eq(sl_kafka_producer_outstanding(p), 10);
    t0 = now_s();
    sl_kafka_producer_destroy(p);
    cr_assert_lt(now_s() - t0, tu_timeout(5), "destroy waited for the records");
    mock_destroy(&m);
}

/* librdkafka's log lines, without a callback of the caller's, become
 * records "kafka_log" of common/log.h (never stderr). */
static int kafka_records, kafka_errors;
static char kafka_topic_field[64];

static void capture(void *ctx, const sl_log_record_t *rec)
{
    (void)ctx;
    if (strcmp(rec->event, "kafka_log") != 0) return;
    kafka_records++;
    if (rec->level == SL_LOG_ERROR) kafka_errors++;
    for (size_t i = 0; i < rec->num_kv; i++)
        if (strcmp(rec->kv[i].key, "topic") == 0)
            snprintf(kafka_topic_field, sizeof kafka_topic_field, "%s", rec->kv[i].v.s);
}

/* No broker listens: the producer gives up within its timeout naming the
 * brokers, and the connection failures were logged as records. */
Test(kafka_producer, no_broker_is_an_error_and_logs_records)
{
    sl_log_set_handler(capture, NULL);
    sl_kafka_producer_opts_t o = {.brokers = "127.0.0.1:1", .topic = "t", .timeout_s = 1};
    sl_kafka_producer_t *p = NULL;
    sl_error_t err = {0};
    double t0 = now_s();
    sl_err_t rc = sl_kafka_producer_new(&o, &p, &err);
    cr_assert(rc == SL_ERR_IO || rc == SL_ERR_TIMEOUT, "%s", sl_err_str(rc));
    cr_assert_lt(now_s() - t0, tu_timeout(5));
    cr_assert_null(p);
    const char *want = "brokers 127.0.0.1:1: no metadata within 1 s: ";
    cr_assert(strncmp(err.msg, want, strlen(want)) == 0, "%s", err.msg);
    sl_log_set_handler(NULL, NULL);
    cr_assert_gt(kafka_errors, 0, "%d kafka_log records, none an error", kafka_records);
    cr_assert_str_eq(kafka_topic_field, "t");
}

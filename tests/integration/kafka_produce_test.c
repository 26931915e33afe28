/* `sluice produce` against the real Kafka broker (ctest fixture "kafka",
 * kafka_util.h): the built program writes a generated sessions stream, a
 * table and a JSONL file to new topics it creates, and a consumer that
 * joins no group reads each topic back to its end: every sample id
 * arrives exactly once, as the bytes the encoder makes of that row, keyed
 * by its session (8 bytes big-endian) in the partition Java's murmur2
 * gives that key, with the header sluice-format: 1 and a CreateTime from
 * the run. Bad input lines are reported with file and line and skipped
 * (or stop the run with --strict); a missing topic without --partitions is
 * an error. --rate is measured: the run cannot be faster than the rate
 * allows, and the records' timestamps spread over the run instead of
 * coming in a burst (bounds loose enough for a loaded machine). */
#include "kafka_util.h"

#include <stdint.h>
#include <sys/time.h>

#include "kafka/record.h"
#include "sluice.pb-c.h"
#include "warehouse/import.h"

#define MAX_ROWS 4000

/* What the consumer saw of one sample id. */
typedef struct got {
    int count;
    int32_t partition;
    int64_t timestamp;
    uint64_t session;
    uint8_t *value; /* a copy (malloc) */
    size_t len;
} got_t;

static got_t got[MAX_ROWS];
static char *scratch;

static void reset(void)
{
    for (int i = 0; i < MAX_ROWS; i++) {
        free(got[i].value);
        memset(&got[i], 0, sizeof got[i]);
    }
}

static void suite_init(void)
{
    ku_setup();
    scratch = tu_mkdtemp("kafka-produce");
}

static void suite_fini(void)
{
    reset();
    if (scratch != NULL) tu_rm_tree(scratch);
    free(scratch);
    scratch = NULL;
}

TestSuite(kafka_produce, .init = suite_init, .fini = suite_fini);

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void unique_topic(char *buf, size_t cap, const char *what)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, cap, "sluice-produce-%s-%d-%lld%03ld", what, ku_run(), (long long)ts.tv_sec,
             ts.tv_nsec / 1000000);
}

/* Run `sluice produce --brokers B --topic T ARGS... --quiet`; *out and
 * *err get its output (caller frees). @return its exit code. */
static int run_produce(const char *topic, const char *const *args, char **out, char **err)
{
    const char *bin = tu_binary();
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)bin;
    argv[n++] = "produce";
    argv[n++] = "--brokers";
    argv[n++] = ku_broker.bootstrap;
    argv[n++] = "--topic";
    argv[n++] = (char *)topic;
    for (; *args != NULL && n < 37; args++)
        argv[n++] = (char *)*args;
    argv[n++] = "--quiet";
    argv[n] = NULL;
    return tu_run(scratch, argv, 120, out, err);
}

/* Read every partition of topic from its start until each reports its end,
 * filling got[]. Each record must be a Sample keyed by its session with
 * the format header, in the partition murmur2 gives its key. @return the
 * records read. */
static int consume(const char *topic, int partitions)
{
    rd_kafka_t *c = ku_reader(topic, partitions);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(c, topic, NULL);
    int ends = 0, n = 0;
    bool at_end[64] = {false};
    double timeout = tu_timeout(60), deadline = ku_now() + timeout;
    while (ends < partitions) {
        cr_assert_lt(ku_now(), deadline, "%s: %d records, not at the end within %.0f s", topic, n,
                     timeout);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
        if (m == NULL) continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (!at_end[m->partition]) ends++;
            at_end[m->partition] = true;
            rd_kafka_message_destroy(m);
            continue;
        }
        cr_assert_eq(m->err, RD_KAFKA_RESP_ERR_NO_ERROR, "%s: %s", topic,
                     rd_kafka_message_errstr(m));
        Sluice__Sample *s = sluice__sample__unpack(NULL, m->len, m->payload);
        cr_assert_not_null(s, "%s partition %d offset %lld: not a Sample", topic, m->partition,
                           (long long)m->offset);
        uint64_t id = s->sample_id;
        cr_assert_lt(id, MAX_ROWS, "sample id %llu", (unsigned long long)id);
        got_t *g = &got[id];
        g->count++;
        g->partition = m->partition;
        g->session = s->session_id;
        rd_kafka_timestamp_type_t tt;
        g->timestamp = rd_kafka_message_timestamp(m, &tt);
        cr_assert_eq(tt, RD_KAFKA_TIMESTAMP_CREATE_TIME, "sample %llu", (unsigned long long)id);
        free(g->value);
        g->value = malloc(m->len ? m->len : 1);
        memcpy(g->value, m->payload, m->len);
        g->len = m->len;
        cr_assert_eq(m->key_len, SL_KAFKA_KEY_BYTES, "sample %llu: key of %zu bytes",
                     (unsigned long long)id, m->key_len);
        cr_assert_eq(sl_kafka_key_get(m->key), s->session_id, "sample %llu: key",
                     (unsigned long long)id);
        cr_assert_eq(
            m->partition,
            rd_kafka_msg_partitioner_murmur2(rkt, m->key, m->key_len, partitions, NULL, NULL),
            "sample %llu in partition %d", (unsigned long long)id, m->partition);
        rd_kafka_headers_t *h = NULL;
        const void *hv = NULL;
        size_t hlen = 0;
        cr_assert_eq(rd_kafka_message_headers(m, &h), RD_KAFKA_RESP_ERR_NO_ERROR);
        cr_assert_eq(rd_kafka_header_get_last(h, SL_KAFKA_FORMAT_HEADER, &hv, &hlen),
                     RD_KAFKA_RESP_ERR_NO_ERROR, "sample %llu: no format header",
                     (unsigned long long)id);
        cr_assert(hlen == 1 && memcmp(hv, "1", 1) == 0, "sample %llu: header %.*s",
                  (unsigned long long)id, (int)hlen, (const char *)hv);
        sluice__sample__free_unpacked(s, NULL);
        rd_kafka_message_destroy(m);
        n++;
    }
    rd_kafka_topic_destroy(rkt);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return n;
}

/* Each of ids [0, n) arrived once, as the bytes the encoder makes of the
 * row the iterator gives, with a timestamp in [t0, t1]; the partitions all
 * took some. */
static void check_rows(sl_wh_gen_iter_t *it, const sl_wh_schema_t *schema, int n, int partitions,
                       int64_t t0, int64_t t1)
{
    sl_kafka_encoder_t *e = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_encoder_new(schema, NULL, &e, &err), SL_OK);
    int per_partition[64] = {0};
    sl_wh_row_t row;
    int rows = 0;
    while (sl_wh_gen_iter_next(it, &row)) {
        int64_t id = row.sample_id;
        cr_assert(id >= 0 && id < n, "generated id %lld", (long long)id);
        const got_t *g = &got[id];
        cr_assert_eq(g->count, 1, "sample %lld arrived %d times", (long long)id, g->count);
        const uint8_t *v;
        size_t len;
        cr_assert_eq(sl_kafka_encode_row(e, &row, &v, &len, &err), SL_OK);
        cr_assert(g->len == len && memcmp(g->value, v, len) == 0,
                  "sample %lld: %zu bytes on the topic, the row encodes to %zu", (long long)id,
                  g->len, len);
        cr_assert_eq(g->session, (uint64_t)row.session_id);
        cr_assert(g->timestamp >= t0 && g->timestamp <= t1,
                  "sample %lld: CreateTime %lld not in "
                  "the run [%lld, %lld]",
                  (long long)id, (long long)g->timestamp, (long long)t0, (long long)t1);
        per_partition[g->partition]++;
        rows++;
    }
    cr_assert_eq(rows, n);
    for (int p = 0; p < partitions; p++)
        cr_assert_gt(per_partition[p], 0, "partition %d took no session", p);
    sl_kafka_encoder_destroy(e);
}

static sl_wh_gen_iter_t *sessions_iter(uint64_t rows, uint64_t seed, sl_wh_schema_t **schema)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    sl_wh_gen_iter_t *it = NULL;
    cr_assert_eq(sl_wh_gen_preset("sessions", rows, seed, &spec, &err), SL_OK);
    cr_assert_eq(sl_wh_gen_schema(&spec, NULL, schema, &err), SL_OK);
    cr_assert_eq(sl_wh_gen_iter_new(&spec, 0, 0, NULL, &it, &err), SL_OK, "%s", err.msg);
    return it;
}

Test(kafka_produce, sessions_stream_each_id_once)
{
    reset();
    char topic[200];
    unique_topic(topic, sizeof topic, "sessions");
    const char *args[] = {"--sessions", "--rows", "3000", "--seed", "5", "--partitions", "3", NULL};
    char *out, *err;
    int64_t t0 = wall_ms();
    int rc = run_produce(topic, args, &out, &err);
    int64_t t1 = wall_ms();
    cr_assert_eq(rc, 0, "sluice produce: exit %d\n%s%s", rc, out, err);
    cr_assert(strstr(out, "produced: 3000 records, ") != NULL, "%s", out);
    cr_assert(strstr(out, "(3 partitions, created)") != NULL, "%s", out);
    cr_assert(strstr(out, "3000 delivered, 0 failed") != NULL, "%s", out);
    free(out);
    free(err);
    cr_assert_eq(consume(topic, 3), 3000);
    sl_wh_schema_t *schema = NULL;
    sl_wh_gen_iter_t *it = sessions_iter(3000, 5, &schema);
    check_rows(it, schema, 3000, 3, t0, t1);
    sl_wh_gen_iter_destroy(it);
    sl_wh_schema_destroy(schema);

    /* Again into the same topic: it exists, so --partitions is only noted;
     * the topic then holds every id twice. */
    const char *again[] = {"--sessions", "--rows",       "3000", "--seed",
                           "5",          "--partitions", "5",    NULL};
    rc = run_produce(topic, again, &out, &err);
    cr_assert_eq(rc, 0, "%s%s", out, err);
    cr_assert(strstr(out, "(3 partitions)") != NULL, "%s", out);
    cr_assert(strstr(err, "already had 3 partitions") != NULL, "%s", err);
    free(out);
    free(err);
    reset();
    cr_assert_eq(consume(topic, 3), 6000);
    for (int i = 0; i < 3000; i++)
        cr_assert_eq(got[i].count, 2, "sample %d", i);
}

Test(kafka_produce, table_each_row_once)
{
    reset();
    char *dir = tu_path(scratch, "table");
    sl_wh_gen_spec_t spec;
    sl_error_t e = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", 2000, 9, &spec, &e), SL_OK);
    spec.partitions = 2;
    spec.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 300;
    go.writer.no_sync = true;
    cr_assert_eq(sl_wh_gen_table(dir, &spec, &go, NULL, &e), SL_OK, "%s", e.msg);

    char topic[200];
    unique_topic(topic, sizeof topic, "table");
    const char *args[] = {"--table", dir, "--partitions", "2", NULL};
    char *out, *err;
    int64_t t0 = wall_ms();
    int rc = run_produce(topic, args, &out, &err);
    int64_t t1 = wall_ms();
    cr_assert_eq(rc, 0, "sluice produce: exit %d\n%s%s", rc, out, err);
    cr_assert(strstr(out, "produced: 2000 records, ") != NULL, "%s", out);
    free(out);
    free(err);
    cr_assert_eq(consume(topic, 2), 2000);
    /* The table's rows are the generator's, file by file. */
    sl_wh_schema_t *schema = NULL;
    cr_assert_eq(sl_wh_gen_schema(&spec, NULL, &schema, &e), SL_OK);
    sl_kafka_encoder_t *enc = NULL;
    cr_assert_eq(sl_kafka_encoder_new(schema, NULL, &enc, &e), SL_OK);
    int rows = 0;
    for (uint32_t p = 0; p < 2; p++)
        for (uint32_t f = 0; f < 2; f++) {
            sl_wh_gen_iter_t *it = NULL;
            cr_assert_eq(sl_wh_gen_iter_new(&spec, p, f, NULL, &it, &e), SL_OK);
            sl_wh_row_t row;
            while (sl_wh_gen_iter_next(it, &row)) {
                const got_t *g = &got[row.sample_id];
                cr_assert_eq(g->count, 1, "sample %lld arrived %d times", (long long)row.sample_id,
                             g->count);
                const uint8_t *v;
                size_t len;
                cr_assert_eq(sl_kafka_encode_row(enc, &row, &v, &len, &e), SL_OK);
                cr_assert(g->len == len && memcmp(g->value, v, len) == 0, "sample %lld differs",
                          (long long)row.sample_id);
                cr_assert(g->timestamp >= t0 && g->timestamp <= t1);
                rows++;
            }
            sl_wh_gen_iter_destroy(it);
        }
    cr_assert_eq(rows, 2000);
    sl_kafka_encoder_destroy(enc);
    sl_wh_schema_destroy(schema);
    free(dir);
}

Test(kafka_produce, jsonl_bad_lines_named_and_skipped)
{
    reset();
    char *path = tu_path(scratch, "in.jsonl");
    const char *text =
        "{\"sample_id\": 10, \"session_id\": 1, \"ts\": 5, \"labels\": {\"click\": 1},"
        " \"dense\": {\"price\": 2.5}, \"sparse\": {\"items\": [3, 4]}}\n"
        "{\"sample_id\": 11, \"session_id\": 1, \"labels\": {\"click\": \"yes\"}}\n"
        "\n"
        "{\"sample_id\": 12, \"session_id\": 2, \"labels\": {\"click\": 0},"
        " \"sparse\": {\"items\": []}}\n"
        "not json\n"
        "{\"session_id\": 3, \"labels\": {\"click\": 0}}\n";
    tu_write_file(path, text, strlen(text));
    char topic[200];
    unique_topic(topic, sizeof topic, "jsonl");
    const char *args[] = {"--jsonl", path, "--partitions", "1", NULL};
    char *out, *err;
    int rc = run_produce(topic, args, &out, &err);
    cr_assert_eq(rc, 0, "sluice produce: exit %d\n%s%s", rc, out, err);
    char want[600];
    snprintf(want, sizeof want, "sluice produce: %s:2: ", path);
    cr_assert(strstr(err, want) != NULL, "no message for line 2 in:\n%s", err);
    snprintf(want, sizeof want, "sluice produce: %s:5: ", path);
    cr_assert(strstr(err, want) != NULL, "no message for line 5 in:\n%s", err);
    cr_assert(strstr(out, "produced: 3 records, ") != NULL, "%s", out);
    cr_assert(strstr(out, "; 2 bad input lines skipped") != NULL, "%s", out);
    free(out);
    free(err);
    cr_assert_eq(consume(topic, 1), 3);
    /* Ids 10 and 12 as given; the line without one gets its line number. */
    cr_assert_eq(got[10].count, 1);
    cr_assert_eq(got[12].count, 1);
    cr_assert_eq(got[6].count, 1);
    cr_assert_eq(got[11].count, 0);
    Sluice__Sample *s = sluice__sample__unpack(NULL, got[10].len, got[10].value);
    cr_assert_not_null(s);
    cr_assert_eq(s->session_id, 1);
    cr_assert_eq(s->timestamp, 5);
    cr_assert_eq(s->n_labels, 1);
    cr_assert_eq(s->labels[0]->value, 1.0f);
    cr_assert_eq(s->n_dense, 1);
    cr_assert_eq(s->dense[0]->value, 2.5f);
    cr_assert_eq(s->n_sparse, 1);
    cr_assert_eq(s->sparse[0]->n_ids, 2);
    cr_assert_eq(s->sparse[0]->ids[1], 4);
    sluice__sample__free_unpacked(s, NULL);

    /* --strict: the first bad line stops the run, which fails; the line
     * before it was still delivered. */
    unique_topic(topic, sizeof topic, "strict");
    const char *strict[] = {"--jsonl", path, "--partitions", "1", "--strict", NULL};
    rc = run_produce(topic, strict, &out, &err);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    snprintf(want, sizeof want, "sluice produce: %s:2: ", path);
    cr_assert(strstr(err, want) != NULL, "%s", err);
    cr_assert(strstr(out, "produced: 1 record, ") != NULL, "%s", out);
    free(out);
    free(err);
    reset();
    cr_assert_eq(consume(topic, 1), 1);
    cr_assert_eq(got[10].count, 1);
    free(path);
}

Test(kafka_produce, missing_topic_is_an_error)
{
    char topic[200];
    unique_topic(topic, sizeof topic, "missing");
    const char *args[] = {"--sessions", "--rows", "10", NULL};
    char *out, *err;
    int rc = run_produce(topic, args, &out, &err);
    cr_assert_eq(rc, 1, "%s%s", out, err);
    char want[400];
    snprintf(want, sizeof want, "sluice produce: topic %s does not exist on %s", topic,
             ku_broker.bootstrap);
    cr_assert(strstr(err, want) != NULL, "%s", err);
    cr_assert_str_eq(out, "");
    free(out);
    free(err);
}

/* 300 samples at 150/s: sample i is never sent before i/150 s after the
 * pacing started, which is after the test started the program, so its
 * CreateTime is at least i/150 s after that (a lower bound no slow machine
 * breaks), and the run takes at least 299/150 s. A burst would put the
 * CreateTimes together: they spread over at least half the nominal 2 s
 * (only a stall of a second right after the first sample could cut it). */
Test(kafka_produce, rate_is_steady)
{
    reset();
    char topic[200];
    unique_topic(topic, sizeof topic, "rate");
    const char *args[] = {"--sessions", "--rows", "300", "--partitions",
                          "2",          "--rate", "150", NULL};
    char *out, *err;
    int64_t start_ms = wall_ms();
    double t0 = ku_now();
    int rc = run_produce(topic, args, &out, &err);
    double took = ku_now() - t0;
    cr_assert_eq(rc, 0, "%s%s", out, err);
    free(out);
    free(err);
    cr_assert_geq(took, 299.0 / 150.0, "300 samples at 150/s in %.2f s", took);
    cr_assert_lt(took, tu_timeout(60), "300 samples at 150/s in %.2f s", took);
    cr_assert_eq(consume(topic, 2), 300);
    for (int i = 0; i < 300; i++) {
        cr_assert_eq(got[i].count, 1, "sample %d", i);
        /* 2 ms: the clock's millisecond granularity, twice. */
        cr_assert_geq(got[i].timestamp - start_ms, (int64_t)(i * 1000 / 150) - 2,
                      "sample %d sent %lld ms after the start, due at %d ms", i,
                      (long long)(got[i].timestamp - start_ms), i * 1000 / 150);
    }
    cr_assert_geq(got[299].timestamp - got[0].timestamp, 1000,
                  "300 samples at 150/s: CreateTimes span %lld ms",
                  (long long)(got[299].timestamp - got[0].timestamp));
}

KU_TEST_MAIN

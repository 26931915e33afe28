/* Producing sample records (src/kafka): records/s and bytes/record of the
 * sessions stream through sl_kafka_producer (send + the final flush, every
 * record acknowledged), against the encoding alone measured in the same
 * run, with sluice's zstd and with compression.type=none. Then the other
 * end without a broker: the worker's record decoder (record_decode.c, in
 * stripes of 1024 taken as the worker takes them) on the same values, and
 * the packed ids alone, SIMD reader against the portable one. By default
 * against librdkafka's in-process mock cluster (no JVM; 20000 records, as
 * it keeps little data); with --brokers against a real cluster, into a new
 * topic of 8 partitions per run.
 *
 * usage: bench_kafka_produce [--brokers HOST:PORT] [rows] [seed]
 *        (rows default 20000 on the mock cluster, 200000 on brokers) */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "kafka/producer.h"
#include "kafka/record.h"
#include "kafka/record_decode.h"
#include "kafka/varint.h"
#include "warehouse/import.h"

#define PARTITIONS 8

static void die(const char *what, const sl_error_t *err)
{
    fprintf(stderr, "bench_kafka_produce: %s: %s\n", what, err != NULL ? err->msg : "failed");
    exit(1);
}

typedef struct stream {
    sl_wh_gen_spec_t spec;
    sl_wh_schema_t *schema;
} stream_t;

/* Encode the whole stream once; @return seconds, *bytes the values' sum. */
static double encode_only(const stream_t *s, uint64_t *bytes)
{
    sl_error_t err = {0};
    sl_wh_gen_iter_t *it = NULL;
    sl_kafka_encoder_t *e = NULL;
    if (sl_wh_gen_iter_new(&s->spec, 0, 0, NULL, &it, &err) != SL_OK) die("gen", &err);
    if (sl_kafka_encoder_new(s->schema, NULL, &e, &err) != SL_OK) die("encoder", &err);
    double t0 = bench_now();
    sl_wh_row_t row;
    *bytes = 0;
    while (sl_wh_gen_iter_next(it, &row)) {
        const uint8_t *v;
        size_t len;
        if (sl_kafka_encode_row(e, &row, &v, &len, &err) != SL_OK) die("encode", &err);
        bench_consume(v, len);
        *bytes += len;
    }
    double secs = bench_now() - t0;
    sl_kafka_encoder_destroy(e);
    sl_wh_gen_iter_destroy(it);
    return secs;
}

/* The stream's values, encoded once, one after another. */
typedef struct values {
    uint8_t *bytes;
    size_t *ends; /* [rows]: where each value ends */
    uint64_t rows;
} values_t;

static values_t encode_all(const stream_t *s, uint64_t rows)
{
    sl_error_t err = {0};
    sl_wh_gen_iter_t *it = NULL;
    sl_kafka_encoder_t *e = NULL;
    if (sl_wh_gen_iter_new(&s->spec, 0, 0, NULL, &it, &err) != SL_OK) die("gen", &err);
    if (sl_kafka_encoder_new(s->schema, NULL, &e, &err) != SL_OK) die("encoder", &err);
    values_t v = {.ends = malloc(rows * sizeof *v.ends)};
    size_t cap = 0, len = 0;
    sl_wh_row_t row;
    while (v.rows < rows && sl_wh_gen_iter_next(it, &row)) {
        const uint8_t *val;
        size_t n;
        if (sl_kafka_encode_row(e, &row, &val, &n, &err) != SL_OK) die("encode", &err);
        if (len + n > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            while (cap < len + n)
                cap *= 2;
            if (!(v.bytes = realloc(v.bytes, cap))) die("out of memory", NULL);
        }
        memcpy(v.bytes + len, val, n);
        len += n;
        v.ends[v.rows++] = len;
    }
    sl_kafka_encoder_destroy(e);
    sl_wh_gen_iter_destroy(it);
    return v;
}

/* Every value through the worker's decoder; @return seconds. */
static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wall seconds; *cpu: this thread's CPU seconds (on a shared machine the
 * wall time counts the other processes' turns too). */
static double decode_all(const stream_t *s, const values_t *v, double *cpu)
{
    sl_error_t err = {0};
    sl_kafka_rows_t *r = NULL;
    if (sl_kafka_rows_new(s->schema, NULL, 0, NULL, &r, &err) != SL_OK) die("rows", &err);
    double t0 = bench_now(), c0 = thread_cpu();
    for (uint64_t i = 0; i < v->rows; i++) {
        size_t at = i ? v->ends[i - 1] : 0;
        sl_kafka_record_t rec = {.value = v->bytes + at,
                                 .value_len = v->ends[i] - at,
                                 .format = SL_KAFKA_FORMAT_VERSION_TEXT,
                                 .format_len = sizeof SL_KAFKA_FORMAT_VERSION_TEXT - 1,
                                 .format_headers = 1,
                                 .offset = (int64_t)i,
                                 .create_ms = -1};
        if (sl_kafka_rows_add(r, &rec, &err) != SL_OK) die("decode", &err);
        sl_kafka_stripe_t st;
        if ((i + 1) % 1024 == 0 || i + 1 == v->rows) {
            if (sl_kafka_rows_take(r, &st, &err) != SL_OK) die("take", &err);
            bench_consume(st.offsets, 8);
        }
    }
    double secs = bench_now() - t0;
    *cpu = thread_cpu() - c0;
    sl_kafka_rows_destroy(r);
    return secs;
}

/* The packed id runs of the values (sluice.Sample field 6, IdList field
 * 2), found by a plain walk: [start, end) pairs. */
static size_t id_runs(const values_t *v, const uint8_t ***runs)
{
    size_t n = 0, cap = 1024;
    const uint8_t **out = malloc(cap * 2 * sizeof *out);
    for (uint64_t i = 0; i < v->rows; i++) {
        const uint8_t *p = v->bytes + (i ? v->ends[i - 1] : 0), *end = v->bytes + v->ends[i];
        while (p < end) {
            uint64_t tag, len = 0;
            if (!sl_varint_read(&p, end, &tag)) die("id runs", NULL);
            if ((tag & 7) == 0) {
                if (!sl_varint_read(&p, end, &len)) die("id runs", NULL);
                continue;
            }
            if ((tag & 7) == 5) {
                p += 4;
                continue;
            }
            if (!sl_varint_read(&p, end, &len)) die("id runs", NULL);
            if (tag >> 3 == 6) { /* an IdList: its packed ids */
                const uint8_t *q = p, *qe = p + len;
                while (q < qe) {
                    uint64_t t, l;
                    if (!sl_varint_read(&q, qe, &t) || !sl_varint_read(&q, qe, &l))
                        die("id runs", NULL);
                    if (t >> 3 == 2 && (t & 7) == 2) {
                        if (n == cap && !(out = realloc(out, (cap *= 2) * 2 * sizeof *out)))
                            die("out of memory", NULL);
                        out[2 * n] = q;
                        out[2 * n + 1] = q + l;
                        n++;
                    }
                    q += l;
                }
            }
            p += len;
        }
    }
    *runs = out;
    return n;
}

static void decode_lines(const stream_t *s, uint64_t rows)
{
    values_t v = encode_all(s, rows);
    double cpu, secs = decode_all(s, &v, &cpu);
    printf(
        "  decode (worker)  %9.0f records/s  %6.3f us/record, %6.3f us of CPU  (record_decode.c, "
        "stripes of 1024)\n",
        (double)v.rows / secs, secs * 1e6 / (double)v.rows, cpu * 1e6 / (double)v.rows);
    const uint8_t **runs;
    size_t nr = id_runs(&v, &runs);
    /* every run decoded from the start of ids: its values stay in cache,
     * as a record's do in the worker */
    int64_t *ids = malloc((v.ends[v.rows - 1] + SL_VARINT_SCRATCH) * sizeof *ids);
    const uint8_t *readable = v.bytes + v.ends[v.rows - 1];
    uint64_t count = 0, run_bytes = 0;
    for (size_t i = 0; i < nr; i++) {
        uint64_t k = 0;
        if (!sl_varint_read_packed_portable(runs[2 * i], runs[2 * i + 1], ids, &k))
            die("packed ids", NULL);
        count += k;
        run_bytes += (uint64_t)(runs[2 * i + 1] - runs[2 * i]);
    }
    for (int simd = 1; simd >= 0; simd--) {
        double t0 = bench_now();
        for (size_t i = 0; i < nr; i++) {
            uint64_t k = 0;
            bool ok = simd ? sl_varint_read_packed(runs[2 * i], runs[2 * i + 1], readable, ids, &k)
                           : sl_varint_read_packed_portable(runs[2 * i], runs[2 * i + 1], ids, &k);
            if (!ok) die("packed ids", NULL);
        }
        double dt = bench_now() - t0;
        printf("  packed ids, %-8s %6.2f ns/id  (%llu ids in %zu runs, %.1f bytes/id)\n",
               simd ? "simd" : "portable", dt * 1e9 / (double)count, (unsigned long long)count, nr,
               (double)run_bytes / (double)count);
    }
    free(ids);
    free(runs);
    free(v.ends);
    free(v.bytes);
}

/* Produce the stream to topic and flush; prints one line. */
static void produce(const stream_t *s, const char *brokers, const char *topic, bool create,
                    const char *compression)
{
    char prop[64];
    snprintf(prop, sizeof prop, "compression.type=%s", compression);
    const char *props[] = {prop, "log_level=3"};
    sl_kafka_producer_opts_t o = {.brokers = brokers,
                                  .topic = topic,
                                  .properties = props,
                                  .num_properties = 2,
                                  .create_partitions = create ? PARTITIONS : 0,
                                  .timeout_s = 60};
    sl_error_t err = {0};
    sl_kafka_producer_t *p = NULL;
    if (sl_kafka_producer_new(&o, &p, &err) != SL_OK) die("producer", &err);
    sl_wh_gen_iter_t *it = NULL;
    sl_kafka_encoder_t *e = NULL;
    if (sl_wh_gen_iter_new(&s->spec, 0, 0, NULL, &it, &err) != SL_OK) die("gen", &err);
    if (sl_kafka_encoder_new(s->schema, NULL, &e, &err) != SL_OK) die("encoder", &err);
    double c0 = bench_cpu_seconds(), t0 = bench_now();
    sl_wh_row_t row;
    while (sl_wh_gen_iter_next(it, &row)) {
        const uint8_t *v;
        size_t len;
        if (sl_kafka_encode_row(e, &row, &v, &len, &err) != SL_OK) die("encode", &err);
        if (sl_kafka_producer_send(p, (uint64_t)row.session_id, v, len, &err) != SL_OK)
            die("send", &err);
    }
    if (sl_kafka_producer_flush(p, 120, &err) != SL_OK) die("flush", &err);
    double secs = bench_now() - t0, cpu = bench_cpu_seconds() - c0;
    sl_kafka_producer_stats_t st;
    sl_kafka_producer_stats(p, &st);
    printf("  produce, %-4s  %9.0f records/s  %6.1f bytes/record  %5.2f us CPU/record  "
           "(%llu delivered in %.2f s)\n",
           compression, (double)st.delivered / secs, (double)st.bytes / (double)st.sent,
           cpu * 1e6 / (double)st.sent, (unsigned long long)st.delivered, secs);
    sl_kafka_encoder_destroy(e);
    sl_wh_gen_iter_destroy(it);
    sl_kafka_producer_destroy(p);
}

int main(int argc, char **argv)
{
    const char *brokers = NULL;
    int a = 1;
    if (argc > 2 && strcmp(argv[1], "--brokers") == 0) {
        brokers = argv[2];
        a = 3;
    }
    uint64_t rows = argc > a ? strtoull(argv[a], NULL, 10) : brokers ? 200000 : 20000;
    uint64_t seed = argc > a + 1 ? strtoull(argv[a + 1], NULL, 10) : 1;
    stream_t s;
    sl_error_t err = {0};
    if (sl_wh_gen_preset("sessions", rows, seed, &s.spec, &err) != SL_OK) die("preset", &err);
    if (sl_wh_gen_schema(&s.spec, NULL, &s.schema, &err) != SL_OK) die("schema", &err);

    rd_kafka_t *mock_rk = NULL;
    rd_kafka_mock_cluster_t *mc = NULL;
    if (brokers == NULL) {
        char why[256];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_conf_set(conf, "log_level", "0", why, sizeof why);
        mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof why);
        if (mock_rk == NULL || (mc = rd_kafka_mock_cluster_new(mock_rk, 3)) == NULL)
            die("mock cluster", NULL);
        brokers = rd_kafka_mock_cluster_bootstraps(mc);
    }
    printf("bench_kafka_produce: %llu samples of the sessions preset (seed %llu) to %s, %d "
           "partitions\n",
           (unsigned long long)rows, (unsigned long long)seed,
           mc != NULL ? "librdkafka's mock cluster (3 brokers, in process)" : brokers, PARTITIONS);
    uint64_t bytes;
    double secs = encode_only(&s, &bytes);
    printf("  generate+encode %9.0f samples/s  %6.1f bytes/sample value\n", (double)rows / secs,
           (double)bytes / (double)rows);
    decode_lines(&s, rows);
    static const char *const codecs[] = {"zstd", "none"};
    for (int i = 0; i < 2; i++) {
        char topic[128];
        snprintf(topic, sizeof topic, "bench-produce-%s-%d-%lld", codecs[i], (int)getpid(),
                 (long long)time(NULL));
        if (mc != NULL && rd_kafka_mock_topic_create(mc, topic, PARTITIONS, 1) != 0)
            die("mock topic", NULL);
        produce(&s, brokers, topic, mc == NULL, codecs[i]);
    }
    if (mc != NULL) {
        rd_kafka_mock_cluster_destroy(mc);
        rd_kafka_destroy(mock_rk);
    }
    sl_wh_schema_destroy(s.schema);
    return 0;
}

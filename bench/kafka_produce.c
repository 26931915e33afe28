/* Producing sample records (src/kafka): records/s and bytes/record of the
 * sessions stream through sl_kafka_producer (send + the final flush, every
 * record acknowledged), against the encoding alone measured in the same
 * run, with sluice's zstd and with compression.type=none. By default
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

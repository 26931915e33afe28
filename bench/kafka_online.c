/* Kafka to the trainer (src/dpp/worker/source/kafka_source.c), against a real
 * broker: the sessions stream is produced once to a fresh topic, then read
 * three ways in each round (3 rounds by default, the phases in turn):
 *
 *   1. librdkafka alone: a plain consumer (assign, no group) reads every
 *      partition to its end, nothing decoded: the ceiling;
 *   2. a DPP worker (in process, a bounded replay: source.kafka stop "end")
 *      decoding, batching and deduplicating the user features, to a trainer
 *      client that takes every batch;
 *   3. the same without dedup.
 *
 * It prints records (samples) per second of wall time and per second of
 * CPU for each: the process's CPU, every thread (librdkafka's, the
 * worker's); the trainer client runs in a child process forked at the
 * start, so the worker's figure is per worker core. Then the ratio of 2 to
 * 1 per CPU second for each round and its median over the rounds (the
 * figure of docs/BENCHMARKS.md, target >= 0.5), and the bytes the trainer
 * received with dedup on and off. Freshness is measured by `sluice demo
 * --online` (docs/BENCHMARKS.md).
 *
 * usage: bench_kafka_online --brokers HOST:PORT [rows] [partitions] [seed] [rounds]
 *        (rows default 200000, partitions 4, seed 1, rounds 3) */
#include <inttypes.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "kafka/producer.h"
#include "kafka/record.h"
#include "sluice/trainer.h"
#include "warehouse/import.h"

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_kafka_online: %s: %s\n", what, msg ? msg : "failed");
    exit(1);
}

/* The stream to topic (created with `partitions`), every record acknowledged. */
static void produce(const char *brokers, const char *topic, uint32_t partitions,
                    const sl_wh_gen_spec_t *spec, const sl_wh_schema_t *schema)
{
    const char *props[] = {"log_level=3"};
    sl_kafka_producer_opts_t o = {.brokers = brokers,
                                  .topic = topic,
                                  .properties = props,
                                  .num_properties = 1,
                                  .create_partitions = partitions,
                                  .timeout_s = 60};
    sl_error_t err = {0};
    sl_kafka_producer_t *p = NULL;
    sl_wh_gen_iter_t *it = NULL;
    sl_kafka_encoder_t *e = NULL;
    if (sl_kafka_producer_new(&o, &p, &err) != SL_OK) die("producer", err.msg);
    if (sl_wh_gen_iter_new(spec, 0, 0, NULL, &it, &err) != SL_OK) die("gen", err.msg);
    if (sl_kafka_encoder_new(schema, NULL, &e, &err) != SL_OK) die("encoder", err.msg);
    double t0 = bench_now();
    sl_wh_row_t row;
    while (sl_wh_gen_iter_next(it, &row)) {
        const uint8_t *v;
        size_t len;
        if (sl_kafka_encode_row(e, &row, &v, &len, &err) != SL_OK) die("encode", err.msg);
        if (sl_kafka_producer_send(p, (uint64_t)row.session_id, v, len, &err) != SL_OK)
            die("send", err.msg);
    }
    if (sl_kafka_producer_flush(p, 120, &err) != SL_OK) die("flush", err.msg);
    sl_kafka_producer_stats_t st;
    sl_kafka_producer_stats(p, &st);
    printf("  produced          %9" PRIu64 " records in %.2f s (%.1f bytes/record, zstd) to %s, "
           "%u partitions\n",
           st.delivered, bench_now() - t0, (double)st.bytes / (double)st.sent, topic,
           st.partitions);
    sl_kafka_encoder_destroy(e);
    sl_wh_gen_iter_destroy(it);
    sl_kafka_producer_destroy(p);
}

typedef struct phase {
    uint64_t n;                    /* records or samples */
    double wall, cpu;              /* seconds */
    double own_cpu;                /* of cpu, the worker's own threads (not librdkafka's) */
    uint64_t bytes;                /* to the trainer (frames) */
    double factor;                 /* dedup factor of the user group */
    uint64_t batches, shm_batches; /* sent by the worker; of them through shared memory */
    uint64_t fused;                /* made by the fused path (docs/WORKER.md) */
} phase_t;

/* 1: librdkafka alone, every partition from its start to its end. */
static phase_t consume_plain(const char *brokers, const char *topic, uint32_t partitions)
{
    char es[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *kv[][2] = {{"bootstrap.servers", brokers},  {"group.id", "bench-plain"},
                           {"enable.auto.commit", "false"}, {"enable.partition.eof", "true"},
                           {"auto.offset.reset", "error"},  {"log_level", "3"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], es, sizeof es) != RD_KAFKA_CONF_OK)
            die(kv[i][0], es);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
    if (!c) die("consumer", es);
    rd_kafka_poll_set_consumer(c);
    double c0 = bench_cpu_seconds(), t0 = bench_now();
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)partitions);
    for (uint32_t p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(l, topic, (int32_t)p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    if (rd_kafka_assign(c, l)) die("assign", topic);
    rd_kafka_topic_partition_list_destroy(l);
    phase_t r = {0};
    uint64_t bytes = 0;
    uint32_t ends = 0;
    uint8_t *at_end = calloc(partitions, 1);
    double deadline = t0 + 600;
    while (ends < partitions && bench_now() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
        if (!m) continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (!at_end[m->partition]) ends++;
            at_end[m->partition] = 1;
        } else if (m->err) {
            die("consume", rd_kafka_message_errstr(m));
        } else {
            r.n++;
            bytes += m->len + m->key_len;
            bench_consume(m->payload, 1);
        }
        rd_kafka_message_destroy(m);
    }
    r.wall = bench_now() - t0;
    r.cpu = bench_cpu_seconds() - c0;
    r.bytes = bytes;
    free(at_end);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return r;
}

/* The trainer, in a child process: for each worker address read from
 * `in` (a line), take every batch until END and write back what it got. */
typedef struct got {
    uint64_t n, bytes;
    int32_t rc;
    char msg[SL_ERROR_MSG_MAX];
} got_t;

static void trainer_child(int in, int out)
{
    FILE *f = fdopen(in, "r");
    char addr[128];
    while (f && fgets(addr, sizeof addr, f)) {
        addr[strcspn(addr, "\n")] = '\0';
        got_t g = {0};
        sl_error_t err = {0};
        sl_trainer_opts_t to = sl_trainer_opts_default();
        to.address = addr;
        to.prefetch = 8;
        sl_trainer_t *t = NULL;
        sl_err_t rc = sl_trainer_connect(&to, &t, &err);
        sl_batch_t *b;
        while (rc == SL_OK && (rc = sl_trainer_next(t, 60000, &b, &err)) == SL_OK) {
            g.n += b->batch_size;
            sl_trainer_release(t, b);
        }
        g.rc = rc == SL_ERR_CLOSED ? SL_OK : rc;
        snprintf(g.msg, sizeof g.msg, "%s", err.msg);
        sl_trainer_stats_t ts;
        sl_trainer_stats(t, &ts);
        g.bytes = ts.bytes;
        sl_trainer_close(t);
        if (write(out, &g, sizeof g) != (ssize_t)sizeof g) break;
    }
    _exit(0);
}

static int to_child = -1, from_child = -1;

/* 2 and 3: a worker's bounded replay of the topic to the trainer child. */
static phase_t through_worker(const char *brokers, const char *topic, const sl_wh_schema_t *schema,
                              bool dedup, uint64_t rows)
{
    json_t *spec = json_pack("{s:s, s:{s:{s:s, s:[s], s:o, s:s}}, s:{s:i}}", "id",
                             dedup ? "bench-dedup" : "bench-plain", "source", "kafka", "brokers",
                             brokers, "topics", topic, "schema", sl_wh_schema_to_json(schema),
                             "stop", "end", "batch", "size", 1024);
    if (dedup)
        json_object_set_new(json_object_get(spec, "batch"), "dedup_groups",
                            json_pack("{s:[s,s,s]}", "user", "user_id", "user_hist", "user_cat"));
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_pipeline_job_t *job = NULL;
    if (sl_pipeline_job_from_json(spec, &job, &problems, &err) != SL_OK)
        die("job", problems.count ? problems.items[0] : err.msg);
    json_decref(spec);
    sl_worker_opts_t wo = sl_worker_opts_default();
    wo.listen = "127.0.0.1:0";
    wo.threads = 1; /* one transform thread: the per-core figure */
    sl_worker_t *w = NULL;
    double c0 = bench_cpu_seconds(), t0 = bench_now();
    if (sl_worker_start(job, &wo, &w, &problems, &err) != SL_OK) die("worker", err.msg);
    char addr[64];
    int len = snprintf(addr, sizeof addr, "127.0.0.1:%u\n", (unsigned)sl_worker_port(w));
    if (write(to_child, addr, (size_t)len) != len) die("trainer child", "gone");
    got_t g;
    if (read(from_child, &g, sizeof g) != (ssize_t)sizeof g) die("trainer child", "no answer");
    if (g.rc != SL_OK) die("trainer next", g.msg);
    phase_t r = {.n = g.n, .bytes = g.bytes};
    r.wall = bench_now() - t0;
    r.cpu = bench_cpu_seconds() - c0;
    if (r.n != rows) {
        char m[128];
        snprintf(m, sizeof m, "%" PRIu64 " samples of %" PRIu64, r.n, rows);
        die("through the worker", m);
    }
    if (sl_worker_wait(w, 30000, &err) != SL_OK) die("worker wait", err.msg);
    sl_worker_stop(w); /* joins its threads: their CPU is counted once they exit */
    sl_worker_stats_t ws;
    sl_worker_stats(w, &ws);
    r.factor = ws.num_groups ? ws.groups[0].factor : 1.0;
    r.batches = ws.server.batches_sent;
    r.shm_batches = ws.server.shm_batches;
    r.fused = ws.batches_fused;
    r.own_cpu = (double)ws.cpu_ns / 1e9;
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    sl_pipeline_problems_free(&problems);
    return r;
}

static double median(double *v, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) /* insertion sort: a handful */
        for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void show(const char *name, const phase_t *p)
{
    printf("  %-17s %9.0f /s wall  %9.0f /s per CPU second  (%" PRIu64 " in %.2f s, %.2f s "
           "CPU",
           name, (double)p->n / p->wall, (double)p->n / p->cpu, p->n, p->wall, p->cpu);
    /* The worker's split: its reader, transform and server threads (the
     * reader's calls into librdkafka included), and the rest: librdkafka's
     * own threads (fetch, decompression), the worker's start and stop. */
    if (p->own_cpu > 0)
        printf(": %.2f s the worker's threads, %.2f s librdkafka's and the rest", p->own_cpu,
               p->cpu - p->own_cpu);
    printf(")\n");
}

int main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "--brokers") != 0) {
        fprintf(stderr, "usage: bench_kafka_online --brokers HOST:PORT [rows] [partitions] "
                        "[seed] [rounds]\n");
        return 2;
    }
    /* the trainer's process, forked while this one has no threads yet */
    int down[2], up[2];
    if (pipe(down) || pipe(up)) die("pipe", NULL);
    pid_t child = fork();
    if (child < 0) die("fork", NULL);
    if (child == 0) {
        close(down[1]);
        close(up[0]);
        trainer_child(down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    to_child = down[1];
    from_child = up[0];
    const char *brokers = argv[2];
    uint64_t rows = argc > 3 ? strtoull(argv[3], NULL, 10) : 200000;
    uint32_t partitions = argc > 4 ? (uint32_t)strtoul(argv[4], NULL, 10) : 4;
    uint64_t seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
    uint32_t rounds = argc > 6 ? (uint32_t)strtoul(argv[6], NULL, 10) : 3;
    if (rounds < 1 || rounds > 15) {
        fprintf(stderr, "bench_kafka_online: rounds must be 1 to 15\n");
        return 2;
    }
    sl_error_t err = {0};
    sl_wh_gen_spec_t spec;
    sl_wh_schema_t *schema = NULL;
    if (sl_wh_gen_preset("sessions", rows, seed, &spec, &err) != SL_OK) die("preset", err.msg);
    if (sl_wh_gen_schema(&spec, NULL, &schema, &err) != SL_OK) die("schema", err.msg);
    char topic[128];
    snprintf(topic, sizeof topic, "bench-online-%d-%lld", (int)getpid(), (long long)time(NULL));
    double loads[3] = {0};
    printf("bench_kafka_online: %" PRIu64 " samples of the sessions preset (seed %" PRIu64
           ") on %s\n",
           rows, seed, brokers);
    produce(brokers, topic, partitions, &spec, schema);
    printf("  (CPU: this process's, every thread; the trainer client runs in a child process "
           "and is not counted)\n");
    /* Rounds of the three phases in turn: on a shared machine a single
     * run's ratio moves by 20%, the median of a few much less. */
    enum { MAX_ROUNDS = 15 };
    double ratio_with[MAX_ROUNDS], ratio_without[MAX_ROUNDS];
    phase_t plain = {0}, with = {0}, without = {0};
    for (uint32_t r = 0; r < rounds; r++) {
        plain = consume_plain(brokers, topic, partitions);
        with = through_worker(brokers, topic, schema, true, rows);
        without = through_worker(brokers, topic, schema, false, rows);
        if (rounds > 1) printf("  round %u\n", r + 1);
        show("librdkafka alone", &plain);
        show("worker, dedup", &with);
        show("worker, no dedup", &without);
        ratio_with[r] = ((double)with.n / with.cpu) / ((double)plain.n / plain.cpu);
        ratio_without[r] = ((double)without.n / without.cpu) / ((double)plain.n / plain.cpu);
        printf("  worker / librdkafka per CPU second: %.2f with dedup, %.2f without\n",
               ratio_with[r], ratio_without[r]);
    }
    printf("  median of %u round%s, worker / librdkafka per CPU second: %.2f with dedup, %.2f "
           "without (target >= 0.5)\n",
           rounds, rounds == 1 ? "" : "s", median(ratio_with, rounds),
           median(ratio_without, rounds));
    printf("  bytes to the trainer: %.1f MB with dedup (user factor %.2f), %.1f MB without: "
           "%.2fx; the records were %.1f MB (key + value)\n",
           (double)with.bytes / 1e6, with.factor, (double)without.bytes / 1e6,
           (double)without.bytes / (double)with.bytes, (double)plain.bytes / 1e6);
    printf("  batches through shared memory (docs/PROTOCOL.md): %" PRIu64 " of %" PRIu64
           " with dedup, %" PRIu64 " of %" PRIu64 " without\n",
           with.shm_batches, with.batches, without.shm_batches, without.batches);
    printf("  batches made by the fused path (docs/WORKER.md): %" PRIu64 " of %" PRIu64
           " with dedup, %" PRIu64 " of %" PRIu64 " without\n",
           with.fused, with.batches, without.fused, without.batches);
    if (getloadavg(loads, 3) == 3)
        printf("  load average %.2f %.2f %.2f\n", loads[0], loads[1], loads[2]);
    close(to_child); /* the child ends at the end of its input */
    waitpid(child, NULL, 0);
    sl_wh_schema_destroy(schema);
    return 0;
}

/* `sluice produce`: write a table, a JSONL file or a generated sessions
 * stream to a Kafka topic as version 1 sample records (src/kafka/record.h,
 * docs/KAFKA.md "Producing"), at full speed or at a steady rate, with a
 * progress line and a summary. Exit codes: 0 every record acknowledged,
 * 1 failed (bad input in --strict mode, a broker error, records not
 * acknowledged in time), 2 usage error, 130 interrupted (what was sent
 * is flushed first). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "common/clock.h"
#include "kafka/producer.h"
#include "kafka/record_json.h"
#include "produce_input.h"
#include "progress.h"

typedef struct produce_args {
    const char *brokers, *topic, *table, *jsonl, *schema, *format;
    bool sessions, strict, quiet, print_columns;
    uint64_t rows, seed, partitions, replication, rate, timeout_s;
    sl_cli_list_t properties;
} produce_args_t;

#define PA(field) offsetof(produce_args_t, field)

static const sl_cli_opt_t produce_opts[] = {
    {"brokers", SL_CLI_STRING, "HOST:PORT[,...]", NULL, NULL, 0, 0, SL_CLI_REQUIRED, PA(brokers),
     "the Kafka bootstrap servers"},
    {"topic", SL_CLI_STRING, "NAME", NULL, NULL, 0, 0, SL_CLI_REQUIRED, PA(topic),
     "the topic to write to"},
    {"table", SL_CLI_PATH, "DIR", NULL, NULL, 0, 0, 0, PA(table),
     "input: every row of this table, files in table order"},
    {"jsonl", SL_CLI_PATH, "FILE", NULL, NULL, 0, 0, 0, PA(jsonl),
     "input: a JSONL file as `table import --format jsonl` reads it ('-': standard input, with "
     "--schema)"},
    {"sessions", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, PA(sessions),
     "input: the seeded sessions stream of `table gen --preset sessions` (--rows, --seed)"},
    {"schema", SL_CLI_FILE, "FILE", NULL, "inferred from the first 1000 lines", 0, 0, 0, PA(schema),
     "--jsonl only: the schema (its JSON form: `table create`)"},
    {"format", SL_CLI_ENUM, "protobuf|json", "protobuf", NULL, 0, 0, 0, PA(format),
     "the records' values: sluice.Sample protobuf with the sluice-format header, or JSON "
     "objects (no header) that a job reads with source.kafka.format \"json\" (docs/KAFKA.md)"},
    {"print-columns", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, PA(print_columns),
     "--format json: print the column mapping that reads the records back (for "
     "source.kafka.columns) on stdout before producing"},
    {"rows", SL_CLI_UINT, "N", "100000", NULL, 1, UINT64_MAX / 2, 0, PA(rows),
     "--sessions only: samples to generate"},
    {"seed", SL_CLI_UINT, "S", "1", NULL, 0, UINT64_MAX, 0, PA(seed),
     "--sessions only: PRNG seed (the same seed gives the same samples)"},
    {"partitions", SL_CLI_UINT, "P", NULL, "the topic must exist", 1, 100000, 0, PA(partitions),
     "create the topic with P partitions when it does not exist (an existing topic is used as "
     "it is)"},
    {"replication-factor", SL_CLI_UINT, "R", NULL, "the brokers' default", 1, 100, 0,
     PA(replication), "replication factor of a topic --partitions creates"},
    {"rate", SL_CLI_UINT, "N", "0", NULL, 0, 100000000, 0, PA(rate),
     "samples per second, evenly spaced; 0: as fast as the brokers take them"},
    {"property", SL_CLI_STRING, "NAME=VALUE", NULL, NULL, 0, 0, SL_CLI_REPEAT, PA(properties),
     "a librdkafka producer property, applied after sluice's (enable.idempotence=true, "
     "compression.type=zstd, compression.level=1, socket.nagle.disable=true, "
     "partitioner=murmur2_random)"},
    {"timeout", SL_CLI_UINT, "S", "30", NULL, 1, 86400, 0, PA(timeout_s),
     "seconds to wait for the brokers: metadata, topic creation, a full queue, the final flush"},
    {"strict", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, PA(strict),
     "stop at the first bad input line (what was sent before it is still flushed)"},
    {"quiet", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, PA(quiet), "no progress line"},
};

static const sl_cli_group_t produce_group = SL_CLI_OWN_GROUP(produce_opts);

const sl_cli_cmd_t sl_cli_produce_cmd = {
    .name = "produce",
    .summary = "write a table, a JSONL file or a sessions stream to a Kafka topic",
    .synopsis = "sluice produce --brokers HOST:PORT --topic NAME (--table DIR | --jsonl FILE | "
                "--sessions --rows N) [options]",
    .about = "Writes one record per sample (value: a sluice.Sample, key: the session id, header "
             "sluice-format: 1; or with --format json a JSON object and no header; "
             "docs/KAFKA.md) with an idempotent, zstd-compressing producer "
             "whose partitioner places keys as Java's does. Prints progress on stderr and a "
             "summary on stdout.",
    .groups = {{&produce_group, 0}},
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void on_kafka_log(void *ctx, int level, const char *facility, const char *message)
{
    /* Warnings and worse (syslog levels 0-4): a broker that cannot be
     * reached says so here while the send waits. */
    if (level <= 4)
        sl_cli_progress_message(ctx, "sluice produce: kafka %s: %s\n", facility, message);
}

typedef struct run {
    const produce_args_t *a;
    sl_cli_progress_t *progress;
    sl_kafka_producer_t *p;
    produce_input_t *in;
    uint64_t bad; /* bad input lines skipped */
    double t0;
} run_t;

static void show_progress(run_t *r)
{
    sl_kafka_producer_stats_t st;
    sl_kafka_producer_stats(r->p, &st);
    sl_wh_import_progress_t pg = {0};
    pg.rows_written = st.sent;
    pg.rows_skipped = r->bad;
    pg.bytes_out = st.bytes;
    produce_input_bytes(r->in, &pg.bytes_in, &pg.bytes_in_total);
    pg.seconds = sl_clock_s() - r->t0;
    sl_cli_progress_update(r->progress, &pg);
}

/* Send every record of the input. @return the exit code so far. */
static int send_all(run_t *r)
{
    double interval = r->a->rate > 0 ? 1.0 / (double)r->a->rate : 0;
    uint64_t i = 0; /* records sent: record i is due at t0 + i x interval */
    while (!interrupted) {
        produce_record_t rec;
        bool done = false;
        sl_error_t err = {0};
        sl_err_t rc = produce_input_next(r->in, &rec, &done, &err);
        /* a bad JSONL line is skipped; a damaged table is not a line to
         * skip (its reader would fail on the same stripe again) */
        if (rc == SL_ERR_CORRUPT && r->a->jsonl != NULL && !r->a->strict) {
            if (r->bad++ < 100)
                sl_cli_progress_message(r->progress, "sluice produce: %s (skipped)\n", err.msg);
            else if (r->bad == 101)
                sl_cli_progress_message(r->progress, "sluice produce: more bad lines are "
                                                     "counted but not shown\n");
            continue;
        }
        if (rc != SL_OK) {
            sl_cli_progress_message(r->progress, "sluice produce: %s\n", err.msg);
            return 1;
        }
        if (done) return 0;
        /* a wait is at most one interval (--rate >= 1: a second) */
        if (interval > 0) sl_kafka_producer_pace(r->p, r->t0 + (double)i * interval);
        if (interrupted) break;
        rc = sl_kafka_producer_send(r->p, rec.session_id, rec.value, rec.len, &err);
        if (rc != SL_OK) {
            sl_cli_progress_message(r->progress, "sluice produce: sample %" PRIu64 ": %s\n",
                                    rec.sample_id, err.msg);
            return 1;
        }
        if ((i++ & 255) == 0 || interval > 0.001) show_progress(r);
    }
    return 130;
}

static int produce(const produce_args_t *a)
{
    sl_error_t err = {0};
    run_t r = {.a = a};
    produce_input_spec_t spec = {.table = a->table,
                                 .jsonl = a->jsonl,
                                 .sessions = a->sessions,
                                 .schema = a->schema,
                                 .rows = a->rows,
                                 .seed = a->seed,
                                 .json = strcmp(a->format, "json") == 0};
    if (produce_input_open(&spec, &r.in, &err) != SL_OK) {
        fprintf(stderr, "sluice produce: %s\n", err.msg);
        return 1;
    }
    if (a->print_columns) {
        json_t *cols = sl_kafka_json_columns(produce_input_schema(r.in));
        if (cols == NULL || json_dumpf(cols, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0) {
            json_decref(cols);
            produce_input_close(r.in);
            return 1;
        }
        printf("\n");
        fflush(stdout);
        json_decref(cols);
    }
    r.progress = sl_cli_progress_new(stderr, "producing", !a->quiet);
    sl_kafka_producer_opts_t o = {
        .no_format_header = spec.json,
        .brokers = a->brokers,
        .topic = a->topic,
        .properties = a->properties.items,
        .num_properties = a->properties.count,
        .create_partitions = (uint32_t)a->partitions,
        .replication_factor = (uint32_t)a->replication,
        .timeout_s = (double)a->timeout_s,
        .on_log = on_kafka_log,
        .log_ctx = r.progress,
    };
    int rc = 1;
    sl_err_t e = sl_kafka_producer_new(&o, &r.p, &err);
    if (e != SL_OK) {
        sl_cli_progress_message(r.progress, "sluice produce: %s\n", err.msg);
        rc = e == SL_ERR_INVALID ? 2 : 1;
        goto out;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    r.t0 = sl_clock_s();
    rc = send_all(&r);
    /* What was sent is flushed whatever stopped the input. */
    e = sl_kafka_producer_flush(r.p, (double)a->timeout_s, &err);
    double secs = sl_clock_s() - r.t0;
    sl_cli_progress_finish(r.progress);
    if (e != SL_OK) {
        fprintf(stderr, "sluice produce: %s\n", err.msg);
        if (rc == 0) rc = 1;
    }
    if (rc == 130) fprintf(stderr, "sluice produce: interrupted; what was sent is flushed\n");
    sl_kafka_producer_stats_t st;
    sl_kafka_producer_stats(r.p, &st);
    char bytes[32], rate[32];
    printf("produced: %" PRIu64 " record%s, %s (%.1f bytes/record) to %s (%u partition%s%s) in "
           "%.2f s: %s records/s; %" PRIu64 " delivered, %" PRIu64 " failed",
           st.sent, st.sent == 1 ? "" : "s",
           sl_cli_fmt_bytes((double)st.bytes, bytes, sizeof bytes),
           st.sent > 0 ? (double)st.bytes / (double)st.sent : 0.0, a->topic, st.partitions,
           st.partitions == 1 ? "" : "s", st.created ? ", created" : "", secs,
           sl_cli_fmt_count(secs > 0 ? (double)st.sent / secs : 0, rate, sizeof rate), st.delivered,
           st.failed);
    if (r.bad > 0) printf("; %" PRIu64 " bad input line%s skipped", r.bad, r.bad == 1 ? "" : "s");
    printf("\n");
    if (a->partitions > 0 && !st.created && st.partitions != a->partitions)
        fprintf(stderr,
                "sluice produce: topic %s already had %u partitions (--partitions %" PRIu64
                " applies only to a topic it creates)\n",
                a->topic, st.partitions, a->partitions);
out:
    sl_kafka_producer_destroy(r.p);
    sl_cli_progress_destroy(r.progress);
    produce_input_close(r.in);
    return rc;
}

int sl_cli_produce(int argc, char **argv)
{
    const sl_cli_cmd_t *cmd = &sl_cli_produce_cmd;
    produce_args_t a = {0};
    sl_cli_parsed_t parsed;
    int rc;
    int inputs = (int)0;
    if (!sl_cli_parse(cmd, argc, argv, &a, &parsed)) {
        rc = parsed.code;
    } else if ((inputs = (a.table != NULL) + (a.jsonl != NULL) + a.sessions) != 1) {
        rc = sl_cli_usage_error(cmd->name, "%s",
                                inputs == 0 ? "no input: give --table, --jsonl or --sessions"
                                            : "give one input of --table, --jsonl and --sessions");
    } else if (a.print_columns && strcmp(a.format, "json") != 0) {
        rc = sl_cli_usage_error(cmd->name, "%s", "--print-columns is for --format json");
    } else if (a.schema != NULL && a.jsonl == NULL) {
        rc = sl_cli_usage_error(cmd->name, "%s", "--schema is for --jsonl");
    } else if (!a.sessions &&
               (sl_cli_given(cmd, &parsed, "rows") || sl_cli_given(cmd, &parsed, "seed"))) {
        rc = sl_cli_usage_error(cmd->name, "%s", "--rows and --seed are for --sessions");
    } else {
        rc = produce(&a);
    }
    sl_cli_free(cmd, &a);
    return rc;
}

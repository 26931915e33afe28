/* `sluice demo`: the whole path on one machine, nothing external. Generates
 * a `sessions` table (user features constant within a session, item
 * features per sample; rows clustered by session and the user features
 * stored once per unique row of a stripe) in a temporary directory, starts a DPP worker
 * in-process on 127.0.0.1:0 with a job that deduplicates the user features,
 * pulls one epoch through the trainer client, checks that every sample id
 * arrived exactly once, and prints the figures; then runs the same job
 * without dedup for comparison. The temporary directory is removed. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "warehouse/import.h"

typedef struct demo_options {
    uint64_t rows, batch_size, threads, seed;
    /* --online (demo_online.c) */
    bool online;
    const char *brokers, *topic;
    uint64_t partitions, rate, seconds, linger_ms, chunk;
    sl_cli_list_t properties;
} demo_options_t;

typedef struct demo_run {
    uint64_t samples, batches;
    double seconds;
    uint64_t bytes_sent, bytes_expanded;
    uint64_t wait_ns;
    sl_worker_stats_t st;
} demo_run_t;

#define D(field) offsetof(demo_options_t, field)

/* Options are defined once, here (options.h): parsing, --help and the
 * docs' table come from this table. */
static const sl_cli_opt_t dopts[] = {
    {"rows", SL_CLI_UINT, "N", "200000", NULL, 1, 1u << 28, 0, D(rows),
     "rows of the generated table"},
    {"batch-size", SL_CLI_UINT, "B", "4096", NULL, 1, 1u << 20, 0, D(batch_size),
     "samples per batch"},
    {"threads", SL_CLI_UINT, "T", "0", NULL, 0, 256, 0, D(threads),
     "the worker's --threads: cores to use (0: the online cores)"},
    {"seed", SL_CLI_UINT, "X", "1", NULL, 0, UINT64_MAX, 0, D(seed), "seed of the generator"},
    {"online", SL_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, D(online),
     "the online demo instead: produce the sessions stream to a Kafka topic at --rate while a "
     "worker reads it and a trainer takes it; prints samples/s, dedup factor, freshness "
     "(docs/KAFKA.md; ops/demo-online starts a local broker for it)"},
    {"brokers", SL_CLI_STRING, "HOST:PORT[,...]", NULL, "required with --online", 0, 0, 0,
     D(brokers), "--online: the Kafka bootstrap servers"},
    {"topic", SL_CLI_STRING, "NAME", "sessions", NULL, 0, 0, 0, D(topic),
     "--online: the topic (created when absent)"},
    {"partitions", SL_CLI_UINT, "P", "1", NULL, 1, 100000, 0, D(partitions),
     "--online: partitions of a topic it creates (one worker without a master reads partitions "
     "in lockstep: with more, a stream's tail waits for the others' chunks to fill)"},
    {"rate", SL_CLI_UINT, "N", "5000", NULL, 1, 100000000, 0, D(rate),
     "--online: samples per second, evenly spaced"},
    {"seconds", SL_CLI_UINT, "S", "10", NULL, 1, 86400, 0, D(seconds),
     "--online: how long to produce (rate x seconds samples)"},
    {"linger-ms", SL_CLI_UINT, "MS", "5", NULL, 0, 60000, 0, D(linger_ms),
     "--online: the job's source.kafka.linger_ms"},
    {"chunk", SL_CLI_UINT, "N", NULL,
     "65536 with one partition; with more, 50 ms of one at --rate (at least 64)", 1, 1u << 30, 0,
     D(chunk), "--online: the job's source.kafka.chunk"},
    {"property", SL_CLI_STRING, "NAME=VALUE", NULL, NULL, 0, 0, SL_CLI_REPEAT, D(properties),
     "--online: a librdkafka producer property, applied after the demo's: `sluice produce`'s "
     "with compression.type=none (producer, broker and worker share this host: no network to "
     "save, and zstd was the producer's tail; docs/KAFKA.md, \"The online demo\")"},
};

static const sl_cli_group_t demo_group = SL_CLI_OWN_GROUP(dopts);

const sl_cli_cmd_t sl_cli_demo_cmd = {
    .name = "demo",
    .summary = "deduplicate generated session batches and print the figures",
    .synopsis = "sluice demo [--rows N] [--batch-size B] [--threads T] [--seed X]\n"
                "sluice demo --online --brokers HOST:PORT [--topic NAME] [--rate N] [--seconds S] "
                "[options]",
    .about = "Generates a `sessions` table (user features constant within sessions of ~16 "
             "samples) in a temporary directory, serves it from an in-process DPP worker with "
             "the user features deduplicated, reads one epoch through the trainer client, "
             "checks every sample arrived exactly once, then repeats without dedup.",
    .groups = {{&demo_group, 0}},
};

/* One epoch through worker and trainer client; checks every sample id in
 * [0, rows) arrives exactly once. @return 0 or 1 (message printed). */
static int run_job(const char *table, const demo_options_t *o, bool dedup, demo_run_t *out)
{
    json_t *spec = json_pack("{s:s, s:{s:s}, s:[{s:s, s:s, s:i}], s:{s:i, s:i}}", "id",
                             dedup ? "demo-dedup" : "demo-plain", "source", "table", table,
                             "transforms", "op", "sigrid_hash", "feature", "item_id", "table_size",
                             1000003, "batch", "size", (int)o->batch_size, "epochs", 1);
    if (!spec) return 1;
    if (dedup) {
        json_t *groups = json_pack("{s:[s,s,s]}", "user", "user_id", "user_hist", "user_cat");
        json_object_set_new(json_object_get(spec, "batch"), "dedup_groups", groups);
    }
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_pipeline_job_t *job = NULL;
    sl_err_t rc = sl_pipeline_job_from_json(spec, &job, &problems, &err);
    json_decref(spec);
    sl_worker_t *w = NULL;
    sl_trainer_t *t = NULL;
    uint8_t *seen = NULL;
    int code = 1;
    if (rc != SL_OK) goto done;
    sl_worker_opts_t wo = sl_worker_opts_default();
    wo.listen = "127.0.0.1:0";
    wo.threads = (uint32_t)o->threads;
    wo.worker_id = "demo-worker";
    if ((rc = sl_worker_start(job, &wo, &w, &problems, &err))) goto done;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    to.client_name = "demo-trainer";
    to.prefetch = 8;
    seen = sl_calloc(NULL, o->rows, 1);
    if (!seen) goto done;
    double t0 = sl_clock_s();
    if ((rc = sl_trainer_connect(&to, &t, &err))) goto done;
    sl_batch_t *b;
    while ((rc = sl_trainer_next(t, 30000, &b, &err)) == SL_OK) {
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids ? b->sample_ids[i] : -1;
            if (id < 0 || (uint64_t)id >= o->rows || seen[id]) {
                fprintf(stderr, "sluice demo: sample id %" PRId64 " %s\n", id,
                        id < 0 || (uint64_t)id >= o->rows ? "out of range" : "arrived twice");
                sl_trainer_release(t, b);
                goto done;
            }
            seen[id] = 1;
        }
        out->samples += b->batch_size;
        out->batches++;
        sl_trainer_release(t, b);
    }
    out->seconds = sl_clock_s() - t0;
    if (rc != SL_ERR_CLOSED) goto done;
    rc = SL_OK;
    for (uint64_t i = 0; i < o->rows; i++)
        if (!seen[i]) {
            fprintf(stderr, "sluice demo: sample id %" PRIu64 " never arrived\n", i);
            goto done;
        }
    sl_trainer_stats_t ts;
    sl_trainer_stats(t, &ts);
    out->wait_ns = ts.wait_ns;
    if (sl_worker_wait(w, 10000, &err) != SL_OK) {
        rc = err.code;
        goto done;
    }
    sl_worker_stats(w, &out->st);
    out->bytes_sent = out->st.server.bytes_acked;
    out->bytes_expanded = out->st.server.bytes_acked_expanded;
    code = 0;
done:
    if (rc != SL_OK) {
        for (uint32_t i = 0; i < problems.count; i++)
            fprintf(stderr, "sluice demo: %s\n", problems.items[i]);
        fprintf(stderr, "sluice demo: %s\n", err.msg[0] ? err.msg : sl_err_str(rc));
    }
    sl_trainer_close(t);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    sl_pipeline_problems_free(&problems);
    sl_free(NULL, seen, o->rows);
    return code;
}

int sl_cli_demo(int argc, char **argv)
{
    demo_options_t o = {0};
    sl_cli_parsed_t parsed;
    if (!sl_cli_parse(&sl_cli_demo_cmd, argc, argv, &o, &parsed)) return parsed.code;
    if (o.online) {
        sl_cli_demo_online_t on = {.brokers = o.brokers,
                                   .topic = o.topic,
                                   .partitions = o.partitions,
                                   .rate = o.rate,
                                   .seconds = o.seconds,
                                   .linger_ms = o.linger_ms,
                                   .chunk = o.chunk,
                                   .batch_size = o.batch_size,
                                   .threads = o.threads,
                                   .seed = o.seed,
                                   .properties = o.properties.items,
                                   .num_properties = o.properties.count};
        int code = sl_cli_demo_online(&on);
        sl_cli_free(&sl_cli_demo_cmd, &o);
        return code;
    }
    if (o.properties.count) {
        fprintf(stderr, "sluice demo: --property is for the producer of --online\n");
        sl_cli_free(&sl_cli_demo_cmd, &o);
        return 2;
    }
    char dir[] = "/tmp/sluice-demo-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("sluice demo: mkdtemp");
        return 1;
    }
    char table[sizeof dir + 16];
    snprintf(table, sizeof table, "%s/sessions", dir);
    int code = 1;
    sl_error_t err = {0};
    sl_wh_gen_spec_t spec;
    double t0 = sl_clock_s();
    if (sl_wh_gen_preset("sessions", o.rows, o.seed, &spec, &err) != SL_OK) goto fail;
    spec.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.cluster_sessions = true;
    go.writer.no_sync = true;
    /* RecD storage dedup: the user features stored once per unique row of a
     * stripe; the dedup job then serves them as stored */
    static const char *const user[] = {"user_id", "user_hist", "user_cat"};
    sl_dedup_group_spec_t group = {.name = "user", .num_features = 3, .features = user};
    go.writer.num_dedup_groups = 1;
    go.writer.dedup_groups = &group;
    sl_wh_write_stats_t ws;
    if (sl_wh_gen_table(table, &spec, &go, &ws, &err) != SL_OK) goto fail;
    printf("sluice demo: generated a `sessions` table of %" PRIu64 " rows (%.1f MB on disk, "
           "user features stored once per unique row of a stripe) in %.2f s\n",
           ws.rows, (double)ws.file_bytes / 1e6, sl_clock_s() - t0);
    printf("  job: batches of %" PRIu64
           ", sigrid_hash(item_id); one epoch to one trainer client\n\n",
           o.batch_size);
    demo_run_t with = {0}, without = {0};
    if (run_job(table, &o, true, &with) || run_job(table, &o, false, &without)) goto out;
    const demo_run_t *runs[2] = {&with, &without};
    const char *names[2] = {"with dedup of user_id, user_hist, user_cat", "without dedup"};
    for (int i = 0; i < 2; i++) {
        const demo_run_t *r = runs[i];
        printf("%s:\n", names[i]);
        printf("  samples                  %" PRIu64 " in %" PRIu64
               " batches, every sample id exactly once\n",
               r->samples, r->batches);
        printf("  samples/s                %.0f\n", r->seconds > 0 ? r->samples / r->seconds : 0.0);
        printf("  bytes sent               %.1f MB (%.1f MB had dedup been off)\n",
               r->bytes_sent / 1e6, r->bytes_expanded / 1e6);
        for (uint32_t g = 0; g < r->st.num_groups; g++)
            printf("  dedup factor (%s)      %.2f (%" PRIu64 " rows -> %" PRIu64 " unique)\n",
                   r->st.groups[g].name, r->st.groups[g].factor, r->st.groups[g].rows,
                   r->st.groups[g].unique_rows);
        printf("  trainer wait time        %.3f s of %.3f s\n", r->wait_ns / 1e9, r->seconds);
    }
    double sw = with.seconds > 0 ? with.samples / with.seconds : 0;
    double so = without.seconds > 0 ? without.samples / without.seconds : 0;
    printf("\ndedup: %.2fx fewer bytes sent, %.2fx the samples/s\n",
           with.bytes_sent ? (double)without.bytes_sent / (double)with.bytes_sent : 0.0,
           so > 0 ? sw / so : 0.0);
    code = 0;
    goto out;
fail:
    fprintf(stderr, "sluice demo: %s\n", err.msg);
out:
    sl_io_remove_tree(dir);
    return code;
}

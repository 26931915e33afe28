/* End-to-end pipeline throughput in one process: a generated table -> DPP
 * worker (read, filter, batch, dedup, transform, encode) -> loopback TCP ->
 * one trainer client (sl_trainer_next), one epoch.
 *
 *  (1) `criteo` preset (13 dense + 26 single-id sparse): log1p on every
 *      dense feature, sigrid_hash on every sparse one, batches of 4096.
 *      Figures: samples/s (wall) and samples/s per worker core, where the
 *      worker's CPU time is the sum of the per-thread CPU clocks of its
 *      threads (reader, transform, server), read when they exit.
 *      Target: >= 2 M samples/s per worker core.
 *  (2) `sessions` preset (user features constant within sessions of ~16,
 *      rows clustered by session per stripe, user features stored once per
 *      unique row of a stripe) read with the user features deduplicated end
 *      to end (the worker keeps the stored unique rows) and, as the
 *      baseline in the same run, without dedup (rows expanded on read).
 *      Figures: bytes delivered both ways (target: with <= 1/4 of without)
 *      and samples/s both ways (target: with >= 1.8x without).
 *
 * Figures are printed, never checked. Usage:
 *   bench_pipeline [--rows N] [--session-rows N] [--threads T] [--seed S] */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "testutil.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/trainer.h"
#include "warehouse/import.h"

typedef struct run {
    double wall;
    uint64_t samples, batches;
    double worker_cpu;
    uint64_t bytes;          /* delivered (acknowledged) payload bytes */
    uint64_t bytes_expanded; /* the same had dedup been off */
    double trainer_wait;
    sl_worker_stats_t st;
} run_t;

static int gen(const char *dir, const char *preset, uint64_t rows, uint64_t seed)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    if (sl_wh_gen_preset(preset, rows, seed, &spec, &err) != SL_OK) goto fail;
    spec.files = 4;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.no_sync = true;
    /* sessions: clustered by session and stored with the user features
     * deduplicated per stripe (RecD storage dedup) */
    static const char *const user[] = {"user_id", "user_hist", "user_cat"};
    sl_dedup_group_spec_t group = {.name = "user", .num_features = 3, .features = user};
    if (strcmp(preset, "sessions") == 0) {
        go.writer.cluster_sessions = true;
        go.writer.num_dedup_groups = 1;
        go.writer.dedup_groups = &group;
    }
    if (sl_wh_gen_table(dir, &spec, &go, NULL, &err) != SL_OK) goto fail;
    return 0;
fail:
    fprintf(stderr, "bench_pipeline: %s\n", err.msg);
    return 1;
}

/* One epoch of spec through a worker and one trainer client. */
static int run_job(json_t *spec, uint32_t threads, bool no_fused, run_t *r)
{
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_pipeline_job_t *job = NULL;
    sl_worker_t *w = NULL;
    sl_trainer_t *t = NULL;
    int code = 1;
    if (sl_pipeline_job_from_json(spec, &job, &problems, &err) != SL_OK) goto done;
    sl_worker_opts_t wo = sl_worker_opts_default();
    wo.threads = threads;
    wo.memory_limit = 512ull << 20;
    wo.max_credits = 8;
    wo.no_fused = no_fused;
    double t0 = bench_now();
    if (sl_worker_start(job, &wo, &w, &problems, &err) != SL_OK) goto done;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
    sl_trainer_opts_t to = sl_trainer_opts_default();
    to.address = addr;
    to.prefetch = 8;
    if (sl_trainer_connect(&to, &t, &err) != SL_OK) goto done;
    sl_batch_t *b;
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, 60000, &b, &err)) == SL_OK) {
        r->samples += b->batch_size;
        r->batches++;
        sl_trainer_release(t, b);
    }
    r->wall = bench_now() - t0;
    if (rc != SL_ERR_CLOSED) goto done;
    sl_trainer_stats_t ts;
    sl_trainer_stats(t, &ts);
    r->trainer_wait = ts.wait_ns / 1e9;
    sl_trainer_close(t);
    t = NULL;
    sl_worker_stop(w); /* joins the worker's threads: their CPU clocks are summed */
    sl_worker_stats(w, &r->st);
    r->worker_cpu = (r->st.cpu_ns + r->st.server.cpu_ns) / 1e9;
    r->bytes = r->st.server.bytes_acked;
    r->bytes_expanded = r->st.server.bytes_acked_expanded;
    code = 0;
done:
    if (code) {
        for (uint32_t i = 0; i < problems.count; i++)
            fprintf(stderr, "bench_pipeline: %s\n", problems.items[i]);
        fprintf(stderr, "bench_pipeline: %s\n", err.msg);
    }
    sl_trainer_close(t);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    sl_pipeline_problems_free(&problems);
    return code;
}

static void print_run(const char *name, const run_t *r)
{
    printf("  %-22s %9" PRIu64 " samples in %.3f s: %6.2f M samples/s, worker CPU %.3f s -> "
           "%5.2f M samples/s per worker core\n",
           name, r->samples, r->wall, r->samples / r->wall / 1e6, r->worker_cpu,
           r->worker_cpu > 0 ? r->samples / r->worker_cpu / 1e6 : 0.0);
    printf("  %-22s busy: read %.3f, filter+batch %.3f, dedup %.3f, transform %.3f, encode "
           "%.3f, send %.3f s; trainer waited %.3f s\n",
           "", r->st.read_ns / 1e9, r->st.filter_ns / 1e9, r->st.dedup_ns / 1e9,
           r->st.transform_ns / 1e9, r->st.encode_ns / 1e9, r->st.server.send_ns / 1e9,
           r->trainer_wait);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0') return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t rows = 2000000, srows = 1000000, threads = 1, seed = 1, pairs = 3, only = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        uint64_t *dst = strcmp(argv[i], "--rows") == 0           ? &rows
                        : strcmp(argv[i], "--session-rows") == 0 ? &srows
                        : strcmp(argv[i], "--threads") == 0      ? &threads
                        : strcmp(argv[i], "--seed") == 0         ? &seed
                        : strcmp(argv[i], "--pairs") == 0        ? &pairs
                        : strcmp(argv[i], "--only") == 0         ? &only
                                                                 : NULL;
        if (!dst || parse_u64(argv[i + 1], dst)) {
            fprintf(stderr,
                    "usage: bench_pipeline [--rows N] [--session-rows N] [--threads T] "
                    "[--seed S] [--pairs P] [--only 1|2]\n"
                    "  --only 1: the fused path only, 2: the general path only (profiling)\n");
            return 2;
        }
    }
    char dir[] = "/tmp/sluice-bench-pipeline-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char criteo[sizeof dir + 16], sessions[sizeof dir + 16];
    snprintf(criteo, sizeof criteo, "%s/criteo", dir);
    snprintf(sessions, sizeof sessions, "%s/sessions", dir);
    int code = 1;
    printf("bench_pipeline: table -> worker (%" PRIu64 " transform thread%s) -> loopback TCP -> "
           "trainer client, one epoch, batches of 4096\n",
           threads, threads == 1 ? "" : "s");
    if (gen(criteo, "criteo", rows, seed) || gen(sessions, "sessions", srows, seed)) goto out;

    /* (1) criteo: log1p on the dense, sigrid_hash on the sparse features */
    json_t *tr = bench_criteo_transforms();
    json_t *spec = json_pack("{s:s, s:{s:s}, s:o, s:{s:i}}", "id", "bench-criteo", "source",
                             "table", criteo, "transforms", tr, "batch", "size", 4096);
    run_t warm = {0}, c = {0};
    /* the first run warms the page cache and the allocator */
    if (run_job(spec, (uint32_t)threads, false, &warm)) {
        json_decref(spec);
        goto out;
    }
    printf("\n(1) criteo, %" PRIu64 " rows: log1p x13, sigrid_hash x26; %" PRIu64
           " pairs of runs, the fused path (docs/WORKER.md) and the transform threads' path, "
           "alternating\n",
           rows, pairs);
    double fused_ns[64] = {0}, general_ns[64] = {0};
    if (pairs < 1) pairs = 1;
    if (pairs > 64) pairs = 64;
    for (uint64_t p = 0; p < pairs; p++) {
        for (int k = 0; k < 2; k++) {
            bool no_fused = (p + (uint64_t)k) % 2 == 0; /* the order alternates too */
            if ((only == 1 && no_fused) || (only == 2 && !no_fused)) continue;
            run_t r = {0};
            if (run_job(spec, (uint32_t)threads, no_fused, &r)) {
                json_decref(spec);
                goto out;
            }
            print_run(no_fused ? "criteo, general path" : "criteo, fused path", &r);
            printf("  %-22s %" PRIu64 " of %" PRIu64 " batches fused\n", "", r.st.batches_fused,
                   r.st.batches);
            (no_fused ? general_ns : fused_ns)[p] = r.worker_cpu * 1e9 / (double)r.samples;
            if (!no_fused) c = r;
        }
    }
    json_decref(spec);
    qsort(fused_ns, (size_t)pairs, sizeof *fused_ns, cmp_double);
    qsort(general_ns, (size_t)pairs, sizeof *general_ns, cmp_double);
    printf("  worker CPU per sample, median of %" PRIu64 ": fused %.1f ns, general %.1f ns "
           "(%.2fx); best: %.1f vs %.1f ns\n",
           pairs, fused_ns[pairs / 2], general_ns[pairs / 2],
           general_ns[pairs / 2] / fused_ns[pairs / 2], fused_ns[0], general_ns[0]);
    printf("  -> %.2f M samples/s per worker core (target >= 2.00)\n",
           c.worker_cpu > 0 ? c.samples / c.worker_cpu / 1e6 : 0.0);

    /* (2) sessions with and without dedup of the user features */
    run_t with = {0}, without = {0};
    json_t *s1 = json_pack("{s:s, s:{s:s}, s:{s:i, s:{s:[s,s,s]}}}", "id", "bench-dedup", "source",
                           "table", sessions, "batch", "size", 4096, "dedup_groups", "user",
                           "user_id", "user_hist", "user_cat");
    json_t *s2 = json_pack("{s:s, s:{s:s}, s:{s:i}}", "id", "bench-plain", "source", "table",
                           sessions, "batch", "size", 4096);
    int bad = run_job(s2, (uint32_t)threads, false, &warm) ||
              run_job(s1, (uint32_t)threads, false, &with) ||
              run_job(s2, (uint32_t)threads, false, &without);
    json_decref(s1);
    json_decref(s2);
    if (bad) goto out;
    printf("\n(2) sessions, %" PRIu64 " rows, dedup of user_id, user_hist, user_cat\n", srows);
    print_run("with dedup", &with);
    print_run("without dedup (base)", &without);
    for (uint32_t g = 0; g < with.st.num_groups; g++)
        printf("  dedup factor (%s) %.2f\n", with.st.groups[g].name, with.st.groups[g].factor);
    double br = without.bytes ? (double)with.bytes / (double)without.bytes : 0.0;
    printf("  bytes delivered: with %.1f MB, without %.1f MB -> with/without %.3f "
           "(target <= 0.250)\n",
           with.bytes / 1e6, without.bytes / 1e6, br);
    double sr = (with.samples / with.wall) / (without.samples / without.wall);
    printf("  samples/s: with %.2f M, without %.2f M -> %.2fx (target >= 1.80x)\n",
           with.samples / with.wall / 1e6, without.samples / without.wall / 1e6, sr);
    printf("  per worker core: with %.2f M, without %.2f M samples/s -> %.2fx\n",
           with.samples / with.worker_cpu / 1e6, without.samples / without.worker_cpu / 1e6,
           (with.samples / with.worker_cpu) / (without.samples / without.worker_cpu));
    code = 0;
out:
    tu_rm_tree(dir);
    return code;
}

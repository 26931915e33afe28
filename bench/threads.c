/* A worker on every core it is given (docs/WORKER.md "Threads"): the
 * worker's pipeline alone at several --threads, in the same run.
 *
 * A generated `criteo` table (13 dense + 26 single-id sparse features;
 * 4 files, stripes of 65,536 rows, one stripe per split) read for one
 * epoch by a worker whose batches are acknowledged as soon as they are
 * made and sent to nobody (sl_worker_opts_t.discard): decode, filter,
 * batch, the fused transforms (log1p x13, sigrid_hash x26) and encode, no
 * trainer competing for the cores. Rounds are interleaved (each round runs
 * every thread count once, the order turning from round to round) so that
 * other load on a shared machine falls on all of them alike; the load
 * average is printed before and after.
 *
 * Figures per run: samples/s (wall, from the worker's start to its last
 * batch), the worker's CPU seconds (its threads' CPU clocks) and cores
 * used (CPU / wall). Summary: the median samples/s per thread count, and
 * the median over rounds of each run's speed over the same round's
 * one-thread run (target: >= 1.8x at 2 threads on a 2-core machine).
 * Figures are printed, never checked. Usage:
 *   bench_threads [--rows N] [--threads 1,2,4] [--rounds R] [--seed S]
 *                 [--stripe-rows N (65536; 1 stripe a split)] */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_util.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/runtime/worker.h"
#include "warehouse/import.h"

enum { MAX_T = 16, MAX_ROUNDS = 64 };

typedef struct run {
    double wall, cpu;
    uint64_t samples, batches, fused;
    /* the process's minor page faults and context switches (voluntary:
     * a thread waited; involuntary: it was preempted) during the run:
     * figures that do not depend on what else runs on the machine, or
     * less than the wall time does */
    uint64_t faults, vcsw, ivcsw;
} run_t;

static void usage_now(uint64_t *faults, uint64_t *vcsw, uint64_t *ivcsw)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *faults = (uint64_t)ru.ru_minflt;
    *vcsw = (uint64_t)ru.ru_nvcsw;
    *ivcsw = (uint64_t)ru.ru_nivcsw;
}

static int gen(const char *dir, uint64_t rows, uint64_t seed, uint64_t stripe_rows)
{
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    if (sl_wh_gen_preset("criteo", rows, seed, &spec, &err) != SL_OK) goto fail;
    spec.files = 4;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.no_sync = true;
    go.writer.stripe_rows = (uint32_t)stripe_rows;
    if (sl_wh_gen_table(dir, &spec, &go, NULL, &err) != SL_OK) goto fail;
    return 0;
fail:
    fprintf(stderr, "bench_threads: %s\n", err.msg);
    return 1;
}

/* One epoch of spec through a discarding worker of threads threads. */
static int run_job(json_t *spec, uint32_t threads, run_t *r)
{
    sl_error_t err = {0};
    sl_pipeline_problems_t problems = {0};
    sl_pipeline_job_t *job = NULL;
    sl_worker_t *w = NULL;
    int code = 1;
    if (sl_pipeline_job_from_json(spec, &job, &problems, &err) != SL_OK) goto done;
    sl_worker_opts_t wo = sl_worker_opts_default();
    wo.threads = threads;
    wo.memory_limit = 512ull << 20;
    wo.discard = true;
    wo.no_shm = true;
    uint64_t f0, v0, i0;
    usage_now(&f0, &v0, &i0);
    double t0 = bench_now();
    if (sl_worker_start(job, &wo, &w, &problems, &err) != SL_OK) goto done;
    if (sl_worker_wait(w, 600000, &err) != SL_OK) goto done;
    r->wall = bench_now() - t0;
    sl_worker_stop(w); /* joins the worker's threads: their CPU clocks are summed */
    usage_now(&r->faults, &r->vcsw, &r->ivcsw);
    r->faults -= f0;
    r->vcsw -= v0;
    r->ivcsw -= i0;
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    r->cpu = (st.cpu_ns + st.server.cpu_ns) / 1e9;
    r->samples = st.server.samples_acked;
    r->batches = st.batches;
    r->fused = st.batches_fused;
    code = 0;
done:
    if (code) {
        for (uint32_t i = 0; i < problems.count; i++)
            fprintf(stderr, "bench_threads: %s\n", problems.items[i]);
        fprintf(stderr, "bench_threads: %s\n", err.msg);
    }
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    sl_pipeline_problems_free(&problems);
    return code;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void print_load(const char *when)
{
    double l[3] = {0};
    if (getloadavg(l, 3) == 3)
        printf("load average %s: %.2f %.2f %.2f (%ld online cores)\n", when, l[0], l[1], l[2],
               sysconf(_SC_NPROCESSORS_ONLN));
}

int main(int argc, char **argv)
{
    uint64_t rows = 2000000, rounds = 5, seed = 1, stripe_rows = 65536;
    uint32_t ts[MAX_T] = {1, 2}, nt = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        char *end = NULL;
        if (strcmp(argv[i], "--threads") == 0) {
            nt = 0;
            for (char *s = argv[i + 1]; *s && nt < MAX_T; s = *end ? end + 1 : end) {
                unsigned long v = strtoul(s, &end, 10);
                if (end == s || v < 1 || v > 256 || (*end && *end != ',')) goto usage;
                ts[nt++] = (uint32_t)v;
            }
            if (nt == 0) goto usage;
            continue;
        }
        uint64_t *dst = strcmp(argv[i], "--rows") == 0          ? &rows
                        : strcmp(argv[i], "--rounds") == 0      ? &rounds
                        : strcmp(argv[i], "--seed") == 0        ? &seed
                        : strcmp(argv[i], "--stripe-rows") == 0 ? &stripe_rows
                                                                : NULL;
        if (!dst) goto usage;
        unsigned long long v = strtoull(argv[i + 1], &end, 10);
        if (*argv[i + 1] == '\0' || *end != '\0') goto usage;
        *dst = v;
    }
    if (argc % 2 == 0 || stripe_rows < 1 || stripe_rows > (1u << 24)) goto usage;
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    char dir[] = "/tmp/sluice-bench-threads-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char table[sizeof dir + 16];
    snprintf(table, sizeof table, "%s/criteo", dir);
    int code = 1;
    printf("bench_threads: criteo, %" PRIu64 " rows (4 files, stripes of %" PRIu64 "), log1p x13, "
           "sigrid_hash x26, batches of 4096, one epoch; the worker alone (batches discarded "
           "as made), %" PRIu64 " interleaved rounds\n",
           rows, stripe_rows, rounds);
    print_load("before");
    if (gen(table, rows, seed, stripe_rows)) goto out;
    json_t *tr = bench_criteo_transforms();
    json_t *spec = json_pack("{s:s, s:{s:s}, s:o, s:{s:i}}", "id", "bench-threads", "source",
                             "table", table, "transforms", tr, "batch", "size", 4096);
    run_t warm = {0};
    if (run_job(spec, ts[0], &warm)) goto spec_out; /* the page cache and the allocator */
    static double rate[MAX_T][MAX_ROUNDS], ratio[MAX_T][MAX_ROUNDS], nsps[MAX_T][MAX_ROUNDS],
        cores[MAX_T][MAX_ROUNDS], faults[MAX_T][MAX_ROUNDS];
    for (uint64_t r = 0; r < rounds; r++) {
        double one = 0;
        run_t got[MAX_T];
        for (uint32_t k = 0; k < nt; k++) {
            uint32_t i = (uint32_t)((k + r) % nt); /* the order turns */
            if (run_job(spec, ts[i], &got[i])) goto spec_out;
            const run_t *x = &got[i];
            printf("  round %" PRIu64 " threads %3u: %9" PRIu64 " samples in %.3f s: %6.2f M "
                   "samples/s, CPU %.3f s (%.2f cores, %.1f ns a sample), %" PRIu64 " of %" PRIu64
                   " batches fused, %" PRIu64 " page faults, %" PRIu64 "+%" PRIu64
                   " context switches\n",
                   r + 1, ts[i], x->samples, x->wall, x->samples / x->wall / 1e6, x->cpu,
                   x->cpu / x->wall, x->cpu * 1e9 / (double)(x->samples ? x->samples : 1), x->fused,
                   x->batches, x->faults, x->vcsw, x->ivcsw);
        }
        for (uint32_t i = 0; i < nt; i++) {
            rate[i][r] = got[i].samples / got[i].wall;
            nsps[i][r] = got[i].cpu * 1e9 / (double)(got[i].samples ? got[i].samples : 1);
            cores[i][r] = got[i].cpu / got[i].wall;
            faults[i][r] = (double)got[i].faults;
            if (ts[i] == 1) one = rate[i][r];
        }
        for (uint32_t i = 0; i < nt; i++)
            ratio[i][r] = one > 0 ? rate[i][r] / one : 0;
    }
    printf("median of %" PRIu64 " rounds:\n", rounds);
    for (uint32_t i = 0; i < nt; i++) {
        double m = median(rate[i], (uint32_t)rounds), q = median(ratio[i], (uint32_t)rounds);
        printf("  threads %3u: %6.2f M samples/s", ts[i], m / 1e6);
        if (q > 0) printf(", %.2fx the same round's 1 thread", q);
        if (ts[i] == 2) printf(" (target >= 1.80x)");
        printf("; CPU %.1f ns a sample, %.2f cores, %.0f page faults\n",
               median(nsps[i], (uint32_t)rounds), median(cores[i], (uint32_t)rounds),
               median(faults[i], (uint32_t)rounds));
    }
    print_load("after");
    code = 0;
spec_out:
    json_decref(spec);
out : {
    char cmd[sizeof dir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_threads: could not remove %s\n", dir);
}
    return code;
usage:
    fprintf(stderr, "usage: bench_threads [--rows N] [--threads 1,2,4] [--rounds R] [--seed S] "
                    "[--stripe-rows N]\n");
    return 2;
}

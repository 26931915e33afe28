/* Shared passes (docs/DESIGN.md, "Shared passes"; issue 14): four
 * identical jobs on the criteo preset (the transforms of
 * examples/jobs/criteo.json), each with its own `sluice worker --master`
 * process (one transform thread) and its own trainer client (a thread
 * here, taking batches as fast as they come), on a master in this process.
 * Run twice in one process, same table:
 *
 *   shared       the four jobs as submitted: one plan fingerprint, so the
 *                master leases each split of all four to one worker, which
 *                reads and transforms it once and serves every batch to
 *                the four trainers;
 *   independent  the same four jobs with "share": false: each worker
 *                reads and transforms every split of its own job.
 *
 * Figure: worker CPU seconds (user + system of the four worker processes,
 * from wait4 when they exit) per delivered sample, each way, and their
 * ratio (target <= 0.3). Also rows read by the workers (their summaries)
 * and wall time. Every delivered sample is counted; a run that delivers
 * fewer than 4 x rows samples is reported and fails.
 * The sluice program is found through $SLUICE_BINARY, else next to this
 * benchmark. BENCH_SHARE_KEEP=1 keeps the files and prints each worker's
 * user and system CPU and the master's status.
 * Usage: bench_share [--rows N] [--jobs J] [--hash-rounds K]
 * (--hash-rounds K: each sigrid_hash K times with other salts, a pipeline
 * whose transforms cost more per byte served; 1: the criteo job as it is.) */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "dpp/master/process/admin.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"

#define MAX_JOBS 8

static char dir[128], binary[1024], table[300];
static uint32_t hash_rounds = 1; /* --hash-rounds: each sigrid_hash this many times */

/* The criteo job's spec (examples/jobs/criteo.json's transforms). */
static void spec_text(char *out, size_t cap, const char *id, bool share)
{
    size_t n = (size_t)snprintf(out, cap,
                                "{\"id\":\"%s\",\"share\":%s,\"source\":{\"table\":\"%s\"},"
                                "\"transforms\":[",
                                id, share ? "true" : "false", table);
    for (int i = 1; i <= 13; i++)
        n += (size_t)snprintf(out + n, cap - n, "{\"op\":\"log1p\",\"feature\":\"I%d\"},", i);
    for (uint32_t r = 0; r < hash_rounds; r++)
        for (int i = 1; i <= 26; i++)
            n += (size_t)snprintf(
                out + n, cap - n,
                "{\"op\":\"sigrid_hash\",\"feature\":\"C%d\",\"table_size\":1000000,\"salt\":%u}%s",
                i, r, i < 26 || r + 1 < hash_rounds ? "," : "");
    snprintf(out + n, cap - n, "],\"batch\":{\"size\":4096,\"epochs\":1}}");
}

typedef struct run {
    double cpu_s, wall_s;
    uint64_t samples, rows_read, shared_batches, detached;
} run_t;

/* rows read and batches served to other jobs, from a worker's summary */
static void summary(const char *log, run_t *r)
{
    char *text = tu_read_file(log);
    if (!text) return;
    const char *p = strstr(text, "rows read ");
    if (p) r->rows_read += strtoull(p + strlen("rows read "), NULL, 10);
    p = strstr(text, "leases of other jobs, ");
    if (p) r->shared_batches += strtoull(p + strlen("leases of other jobs, "), NULL, 10);
    p = strstr(text, " bytes), ");
    if (p) r->detached += strtoull(p + strlen(" bytes), "), NULL, 10);
    free(text);
}

static int one_run(const char *tag, bool share, uint32_t jobs, uint64_t rows, run_t *out)
{
    memset(out, 0, sizeof *out);
    char state[300];
    snprintf(state, sizeof state, "%s/state-%s", dir, tag);
    sl_master_opts_t mo = {.state_dir = state, .lease_timeout_ms = 5000};
    sl_master_t *m = NULL;
    sl_error_t err = {0};
    if (sl_master_start(&mo, &m, &err) != SL_OK) {
        fprintf(stderr, "bench_share: master: %s\n", err.msg);
        return 1;
    }
    char ids[MAX_JOBS][32], logs[MAX_JOBS][320];
    pid_t pids[MAX_JOBS];
    for (uint32_t k = 0; k < jobs; k++) {
        snprintf(ids[k], sizeof ids[k], "%s-%u", tag, k);
        char spec[65536], body[66000];
        spec_text(spec, sizeof spec, ids[k], share);
        snprintf(body, sizeof body, "{\"spec\":%s,\"min_workers\":1,\"max_workers\":1}", spec);
        json_t *b = json_loads(body, 0, NULL);
        sl_err_t rc = sl_master_admin_job_submit(m, b, NULL, &err);
        json_decref(b);
        if (rc != SL_OK) {
            fprintf(stderr, "bench_share: submit %s: %s\n", ids[k], err.msg);
            return 1;
        }
    }
    double t0 = bench_now();
    for (uint32_t k = 0; k < jobs; k++) {
        snprintf(logs[k], sizeof logs[k], "%.127s/%.31s.log", dir, ids[k]);
        char wid[64];
        snprintf(wid, sizeof wid, "w-%.31s", ids[k]);
        fflush(stdout);
        pids[k] = fork();
        if (pids[k] == 0) {
            FILE *f = freopen(logs[k], "w", stdout);
            (void)f;
            dup2(1, 2);
            execl(binary, binary, "worker", "--master", sl_master_address(m), "--job-id", ids[k],
                  "--worker-id", wid, "--listen", "127.0.0.1:0", "--threads", "1", (char *)NULL);
            _exit(127);
        }
    }
    bench_trainer_t c[MAX_JOBS];
    pthread_t th[MAX_JOBS];
    for (uint32_t k = 0; k < jobs; k++) {
        c[k] = (bench_trainer_t){.master = sl_master_address(m), .job = ids[k]};
        pthread_create(&th[k], NULL, bench_trainer_run, &c[k]);
    }
    int rc = 0;
    for (uint32_t k = 0; k < jobs; k++) {
        pthread_join(th[k], NULL);
        if (c[k].end != SL_ERR_CLOSED) {
            fprintf(stderr, "bench_share: %s: client: %s: %s\n", ids[k], sl_err_str(c[k].end),
                    c[k].msg);
            rc = 1;
        }
        out->samples += c[k].samples;
    }
    for (uint32_t k = 0; k < jobs; k++) {
        int ws;
        struct rusage ru;
        if (wait4(pids[k], &ws, 0, &ru) != pids[k]) continue;
        double u = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
               sy = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
        out->cpu_s += u + sy;
        if (getenv("BENCH_SHARE_KEEP")) printf("  %s: user %.3f s, system %.3f s\n", ids[k], u, sy);
        summary(logs[k], out);
    }
    out->wall_s = bench_now() - t0;
    if (getenv("BENCH_SHARE_KEEP")) {
        json_t *st = sl_master_admin_status_json(m);
        char *txt = json_dumps(st, JSON_COMPACT);
        printf("  master status: %s\n", txt);
        free(txt);
        json_decref(st);
    }
    sl_master_stop(m);
    if (out->samples != (uint64_t)jobs * rows) {
        fprintf(stderr, "bench_share: %s delivered %llu of %llu samples\n", tag,
                (unsigned long long)out->samples, (unsigned long long)jobs * rows);
        rc = 1;
    }
    printf(
        "  %-11s %u jobs: worker CPU %.2f s for %llu samples: %.3f us/sample; rows read %llu "
        "(%.2f x one job's), batches served to other jobs %llu, jobs detached %llu, wall %.2f s\n",
        tag, jobs, out->cpu_s, (unsigned long long)out->samples,
        out->samples ? out->cpu_s * 1e6 / (double)out->samples : 0,
        (unsigned long long)out->rows_read, (double)out->rows_read / (double)rows,
        (unsigned long long)out->shared_batches, (unsigned long long)out->detached, out->wall_s);
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t rows = 500000;
    uint32_t jobs = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0)
            rows = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--jobs") == 0)
            jobs = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--hash-rounds") == 0)
            hash_rounds = (uint32_t)strtoul(argv[i + 1], NULL, 10);
    }
    if (hash_rounds < 1 || hash_rounds > 64) {
        fprintf(stderr, "bench_share: --hash-rounds 1 to 64\n");
        return 2;
    }
    if (jobs < 1 || jobs > MAX_JOBS) {
        fprintf(stderr, "bench_share: --jobs 1 to %d\n", MAX_JOBS);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (bench_sluice_binary(argv[0], "bench_share", binary, sizeof binary) != 0) return 1;
    snprintf(dir, sizeof dir, "/tmp/sluice-bench-share-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(table, sizeof table, "%s/criteo", dir);
    if (bench_gen_criteo(table, rows, 4, 16384, "bench_share") != 0) return 1;
    printf("bench_share: criteo, %llu rows, stripes of 16384 (one split each), batches of 4096, "
           "the criteo job's transforms (sigrid_hash %u time%s per feature), %u jobs each with 1 "
           "worker (1 transform thread) and 1 trainer, %ld cores\n",
           (unsigned long long)rows, hash_rounds, hash_rounds == 1 ? "" : "s", jobs,
           sysconf(_SC_NPROCESSORS_ONLN));
    run_t shared, indep;
    int rc = one_run("shared", true, jobs, rows, &shared);
    rc |= one_run("independent", false, jobs, rows, &indep);
    double a = shared.samples ? shared.cpu_s / (double)shared.samples : 0;
    double z = indep.samples ? indep.cpu_s / (double)indep.samples : 0;
    printf("  worker CPU per delivered sample, shared / independent: %.2f (target <= 0.30)\n",
           z > 0 ? a / z : 0);
    if (getenv("BENCH_SHARE_KEEP"))
        printf("  kept %s\n", dir);
    else
        tu_rm_tree(dir);
    return rc;
}

/* Time a trainer waits on timers rather than on work: from a job's
 * submission to its first batch, between the last batch of an epoch and
 * the first of the next, and from the last batch to the end of the job
 * (sl_trainer_next saying CLOSED). A small job (so the work itself takes
 * milliseconds), three epochs, one worker, one trainer client with the
 * library's default options (refresh_ms 1000), in rounds:
 *
 *  master  a master in this process (journal on), the local executor
 *          starting one `sluice worker --master` process once the job is
 *          submitted; the client in master mode. Submission is the admin
 *          call; the worker's start is part of the work.
 *  direct  `sluice worker --job SPEC --exit-when-done` started by this
 *          program; the client in direct mode from the moment the worker
 *          listens (its start is not counted: there is no submission).
 *
 *  s3      with --s3-dir DIR (the s3proxy of `ops/s3proxy start --dir
 *          DIR`): the same table uploaded to s3://bench-gaps/criteo, and
 *          a master round on it after each local one: submission (the
 *          master plans from the store: listing, footers) to the first
 *          batch of a worker that reads the store, against the same on
 *          disk.
 *
 * Figures are printed (best, median and worst of the rounds), never
 * checked.
 * Usage: bench_idle_gaps [--rows N] [--rounds N] [--s3-dir DIR] */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "testutil.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/executor/executor.h"
#include "sluice/trainer.h"
#include "store/store.h"

#define EPOCHS 3
#define MAX_ROUNDS 32

static char dir[256], binary[1024], table[300];
static const char *s3_table = "s3://bench-gaps/criteo";

typedef struct gaps {
    double first;               /* submission (or worker listening) to the first batch */
    double between[EPOCHS - 1]; /* last batch of epoch e to the first of e + 1 */
    double end;                 /* last batch to CLOSED */
    uint64_t samples;
} gaps_t;

/* Read the job to its end with opts; t0 is when the job was submitted. */
static int read_job(sl_trainer_opts_t *o, double t0, gaps_t *g)
{
    sl_trainer_t *t;
    sl_error_t err = {0};
    if (sl_trainer_connect(o, &t, &err) != SL_OK) {
        fprintf(stderr, "bench_idle_gaps: connect: %s\n", err.msg);
        return -1;
    }
    double first[EPOCHS] = {0}, last[EPOCHS] = {0}, end_batch = 0;
    sl_batch_t *b;
    sl_err_t rc;
    *g = (gaps_t){0};
    while ((rc = sl_trainer_next(t, 60000, &b, &err)) == SL_OK) {
        double now = bench_now();
        uint32_t e = b->origin.epoch < EPOCHS ? b->origin.epoch : EPOCHS - 1;
        if (first[e] == 0) first[e] = now;
        last[e] = now;
        end_batch = now;
        g->samples += b->batch_size;
        sl_trainer_release(t, b);
    }
    double closed = bench_now();
    sl_trainer_close(t);
    if (rc != SL_ERR_CLOSED) {
        fprintf(stderr, "bench_idle_gaps: %s\n", err.msg);
        return -1;
    }
    g->first = first[0] - t0;
    for (int e = 0; e + 1 < EPOCHS; e++)
        g->between[e] = first[e + 1] - last[e];
    g->end = closed - end_batch;
    return 0;
}

static const char *spec(const char *id, const char *tbl, char *buf, size_t cap)
{
    snprintf(
        buf, cap,
        "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":1024,\"epochs\":%d}}", id,
        tbl, EPOCHS);
    return buf;
}

/* A job on tbl submitted to the master, one worker started for it by the
 * executor, read by one client to its end. */
static int master_round(sl_master_t *m, sl_master_executor_t *ex, const char *tbl, int round,
                        gaps_t *g)
{
    char id[32], text[1024], body[1200];
    snprintf(id, sizeof id, "gaps-%s%d", strncmp(tbl, "s3://", 5) == 0 ? "s3-" : "", round);
    snprintf(body, sizeof body, "{\"spec\":%s,\"min_workers\":1,\"max_workers\":1}",
             spec(id, tbl, text, sizeof text));
    json_t *j = json_loads(body, 0, NULL);
    sl_error_t err = {0};
    double t0 = bench_now();
    sl_err_t rc = sl_master_admin_job_submit(m, j, NULL, &err);
    json_decref(j);
    if (rc == SL_OK) rc = sl_master_executor_scale(ex, id, 1, NULL, NULL, &err);
    if (rc != SL_OK) {
        fprintf(stderr, "bench_idle_gaps: submit: %s\n", err.msg);
        return -1;
    }
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = sl_master_address(m);
    o.job_id = id;
    int r = read_job(&o, t0, g);
    sl_master_executor_scale(ex, id, 0, NULL, NULL, &err);
    sl_master_job_remove(m, id, &err);
    return r;
}

static int direct_round(int round, gaps_t *g)
{
    char id[32], text[1024], path[400], log[400], addr[64];
    snprintf(id, sizeof id, "direct-%d", round);
    snprintf(path, sizeof path, "%s/%s.json", dir, id);
    snprintf(log, sizeof log, "%s/%s.log", dir, id);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(spec(id, table, text, sizeof text), f);
    fclose(f);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", 20000 + (unsigned)(getpid() % 20000) + round);
    if ((f = fopen(log, "w")) == NULL) return -1; /* there before the child writes it */
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(log, "a", stdout) || !freopen(log, "a", stderr)) _exit(126);
        execl(binary, binary, "worker", "--job", path, "--listen", addr, "--exit-when-done",
              "--threads", "1", (char *)NULL);
        _exit(127);
    }
    /* the worker listens once its log says so */
    double until = bench_now() + 30;
    for (;;) {
        char *t = tu_read_file(log);
        bool up = t && strstr(t, "listening on") != NULL;
        free(t);
        if (up) break;
        if (bench_now() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fprintf(stderr, "bench_idle_gaps: the worker did not start; see %s\n", log);
            return -1;
        }
        usleep(2000);
    }
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = addr;
    int r = read_job(&o, bench_now(), g);
    waitpid(pid, NULL, 0);
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_row(const char *mode, const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    printf("  %-9s %-24s best %7.1f ms  median %7.1f ms  worst %7.1f ms\n", mode, what, v[0] * 1e3,
           v[n / 2] * 1e3, v[n - 1] * 1e3);
}

/* The server's endpoint and credentials from DIR/env into this process's
 * environment (the executor's workers inherit it), and the table into
 * its bucket bench-gaps. */
static int s3_setup(const char *s3dir)
{
    if (bench_s3_env_load(s3dir, "bench_idle_gaps") != 0) return 1;
    char path[600];
    snprintf(path, sizeof path, "%s/data/bench-gaps", s3dir);
    mkdir(path, 0755); /* a bucket of the filesystem backend */
    sl_error_t e = {0};
    sl_store_t *up = NULL;
    if (sl_store_open_url("s3://bench-gaps", NULL, &up, NULL, &e) != SL_OK) {
        fprintf(stderr, "bench_idle_gaps: %s\n", e.msg);
        return 1;
    }
    int rc = bench_s3_upload_tree(up, table, "criteo", "bench_idle_gaps");
    sl_store_destroy(up);
    return rc != 0;
}

static void report(const char *mode, const gaps_t *g, int n)
{
    double first[MAX_ROUNDS], between[MAX_ROUNDS * (EPOCHS - 1)], end[MAX_ROUNDS];
    int nb = 0;
    for (int i = 0; i < n; i++) {
        first[i] = g[i].first;
        end[i] = g[i].end;
        for (int e = 0; e + 1 < EPOCHS; e++)
            between[nb++] = g[i].between[e];
    }
    print_row(mode, "to the first batch", first, n);
    print_row(mode, "epoch boundary gap", between, nb);
    print_row(mode, "last batch to the end", end, n);
}

int main(int argc, char **argv)
{
    uint64_t rows = 20000;
    int rounds = 5;
    const char *s3dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rows") == 0) rows = strtoull(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--s3-dir") == 0) s3dir = argv[i + 1];
    }
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    signal(SIGPIPE, SIG_IGN);
    if (bench_sluice_binary(argv[0], "bench_idle_gaps", binary, sizeof binary) != 0) return 1;
    snprintf(dir, sizeof dir, "/tmp/sluice-bench-gaps-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(table, sizeof table, "%s/criteo", dir);
    if (bench_gen_criteo(table, rows, 2, 4096, "bench_idle_gaps") != 0) return 1;
    if (s3dir != NULL && s3_setup(s3dir) != 0) return 1;
    char state[300], logs[300];
    snprintf(state, sizeof state, "%s/state", dir);
    snprintf(logs, sizeof logs, "%s/logs", dir);
    mkdir(logs, 0755);
    sl_master_opts_t mo = {.state_dir = state};
    sl_master_t *m = NULL;
    sl_error_t err = {0};
    if (sl_master_start(&mo, &m, &err) != SL_OK) {
        fprintf(stderr, "bench_idle_gaps: master: %s\n", err.msg);
        return 1;
    }
    sl_master_executor_local_opts_t eo = {
        .binary = binary, .master = sl_master_address(m), .log_dir = logs, .worker_threads = 1};
    sl_master_executor_t *ex = NULL;
    if (sl_master_executor_local_new(&eo, &ex, &err) != SL_OK) {
        fprintf(stderr, "bench_idle_gaps: executor: %s\n", err.msg);
        return 1;
    }
    printf("bench_idle_gaps: criteo, %llu rows, batches of 1024, %d epochs, 1 worker, 1 client "
           "(default options), %d rounds each way, alternating%s\n",
           (unsigned long long)rows, EPOCHS, rounds,
           s3dir ? " (master, master on s3, direct)" : "");
    fflush(stdout); /* before the executor and the rounds fork */
    gaps_t gm[MAX_ROUNDS], gs[MAX_ROUNDS], gd[MAX_ROUNDS];
    int rc = 0;
    for (int r = 0; r < rounds && rc == 0; r++) {
        if (master_round(m, ex, table, r, &gm[r]) != 0 ||
            (s3dir && master_round(m, ex, s3_table, r, &gs[r]) != 0) ||
            direct_round(r, &gd[r]) != 0)
            rc = 1;
        else if (s3dir && gs[r].samples != rows * EPOCHS)
            fprintf(stderr, "bench_idle_gaps: round %d: %llu samples from s3, not %llu\n", r,
                    (unsigned long long)gs[r].samples, (unsigned long long)(rows * EPOCHS));
        else if (gm[r].samples != rows * EPOCHS || gd[r].samples != rows * EPOCHS)
            fprintf(stderr, "bench_idle_gaps: round %d: %llu and %llu samples, not %llu\n", r,
                    (unsigned long long)gm[r].samples, (unsigned long long)gd[r].samples,
                    (unsigned long long)(rows * EPOCHS));
    }
    if (rc == 0) {
        report("master", gm, rounds);
        if (s3dir) report("master-s3", gs, rounds);
        report("direct", gd, rounds);
    }
    sl_master_executor_destroy(ex);
    sl_master_stop(m);
    tu_rm_tree(dir);
    return rc;
}

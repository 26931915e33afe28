/* The local executor (src/dpp/master/executor/executor.h) with a stand-in worker program: a
 * shell script that records its arguments and sleeps. Scaling up spawns
 * the right command lines, scaling down stops the newest workers with
 * SIGTERM, a worker killed from outside is reaped and reported as a
 * failure, the bound on workers holds, reserved arguments are refused, and
 * destroy leaves no child behind. */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dpp/master/executor/executor.h"
#include "testutil.h"

static char tmpdir[256], script[300];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-executor-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(script, sizeof script, "%s/fake-sluice", tmpdir);
    FILE *f = fopen(script, "w");
    cr_assert_not_null(f);
    /* Records "$@" in args.<pid> (renamed into place so a reader never sees
     * half a file), says hello on stdout, then sleeps until signalled. */
    fprintf(f,
            "#!/bin/sh\necho \"$@\" > \"%s/tmp.$$\"\nmv \"%s/tmp.$$\" \"%s/args.$$\"\n"
            "echo hello from $$\nexec sleep 60\n",
            tmpdir, tmpdir, tmpdir);
    fclose(f);
    chmod(script, 0755);
}

static void teardown(void)
{
    tu_rm_tree(tmpdir);
}

TestSuite(executor, .init = setup, .fini = teardown);

static sl_master_executor_t *make(uint32_t max_workers, const char *log_dir,
                                  const char *const *extra)
{
    sl_master_executor_local_opts_t o = {.binary = script,
                                         .master = "127.0.0.1:7070",
                                         .log_dir = log_dir,
                                         .worker_threads = 2,
                                         .extra_args = extra,
                                         .max_workers = max_workers,
                                         .stop_grace_ms = 2000};
    sl_master_executor_t *ex = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_OK, "%s", err.msg);
    return ex;
}

/* The recorded arguments of pid, waiting for the script to write them. */
static void read_args(pid_t pid, char *out, size_t cap)
{
    char path[400];
    snprintf(path, sizeof path, "%s/args.%d", tmpdir, (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            cr_assert_not_null(fgets(out, (int)cap, f));
            fclose(f);
            out[strcspn(out, "\n")] = '\0';
            return;
        }
        usleep(10 * 1000);
    }
    cr_assert_fail("worker %d never wrote %s", (int)pid, path);
}

static bool alive(pid_t pid)
{
    return kill(pid, 0) == 0;
}

Test(executor, scale_up_and_down_with_the_right_command_lines)
{
    const char *extra[] = {"--memory-limit", "64M", NULL};
    sl_master_executor_t *ex = make(8, tmpdir, extra);
    uint32_t up = 9, down = 9;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, "clicks", 3, &up, &down, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(up, 3);
    cr_assert_eq(down, 0);
    cr_assert_eq(sl_master_executor_scale(ex, "views", 1, &up, &down, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(up, 1);
    cr_assert_eq(sl_master_executor_count(ex, "clicks"), 3);
    cr_assert_eq(sl_master_executor_count(ex, "views"), 1);
    cr_assert_eq(sl_master_executor_count(ex, NULL), 4);

    sl_master_executor_worker_t w[8];
    cr_assert_eq(sl_master_executor_list(ex, "clicks", w, 8), 3);
    for (int i = 0; i < 3; i++) {
        char want_id[64], args[1024], want[1024];
        snprintf(want_id, sizeof want_id, "clicks-w%d.%d", i + 1, (int)getpid());
        cr_assert_str_eq(w[i].worker_id, want_id);
        cr_assert_str_eq(w[i].job_id, "clicks");
        cr_assert(!w[i].stopping);
        read_args(w[i].pid, args, sizeof args);
        snprintf(want, sizeof want,
                 "worker --master 127.0.0.1:7070 --job-id clicks --worker-id %s --listen "
                 "127.0.0.1:0 --threads 2 --memory-limit 64M",
                 want_id);
        cr_assert_str_eq(args, want);
    }
    /* stdout went to <log_dir>/<worker id>.log */
    char log[600], line[128], want[64];
    snprintf(log, sizeof log, "%s/%s.log", tmpdir, w[0].worker_id);
    snprintf(want, sizeof want, "hello from %d\n", (int)w[0].pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(log, "r");
        line[0] = '\0';
        if (f) {
            if (!fgets(line, sizeof line, f)) line[0] = '\0';
            fclose(f);
        }
        if (strcmp(line, want) == 0) break;
        usleep(10 * 1000);
    }
    cr_assert_str_eq(line, want);

    /* Down to 1: the two newest go, with SIGTERM; the oldest stays. */
    cr_assert_eq(sl_master_executor_scale(ex, "clicks", 1, &up, &down, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(up, 0);
    cr_assert_eq(down, 2);
    cr_assert_eq(sl_master_executor_count(ex, "clicks"), 1);
    for (int i = 0; i < 500 && sl_master_executor_list(ex, "clicks", NULL, 0) > 1; i++)
        usleep(10 * 1000);
    sl_master_executor_worker_t left;
    cr_assert_eq(sl_master_executor_list(ex, "clicks", &left, 1), 1);
    cr_assert_eq(left.pid, w[0].pid);
    cr_assert(!alive(w[1].pid) && !alive(w[2].pid));
    sl_master_executor_stats_t st;
    sl_master_executor_stats(ex, &st);
    cr_assert_eq(st.started, 4);
    cr_assert_eq(st.stopped, 2);
    cr_assert_eq(st.exited, 2, "stopped workers count as clean exits");
    cr_assert_eq(st.failed, 0);
    cr_assert_eq(sl_master_executor_reap(ex), 2);
    cr_assert_eq(sl_master_executor_reap(ex), 0);

    /* Scaling to the current count does nothing. */
    cr_assert_eq(sl_master_executor_scale(ex, "clicks", 1, &up, &down, &err), SL_OK);
    cr_assert_eq(up + down, 0);

    pid_t pids[2] = {w[0].pid, 0};
    cr_assert_eq(sl_master_executor_list(ex, "views", w, 8), 1);
    pids[1] = w[0].pid;
    sl_master_executor_destroy(ex);
    cr_assert(!alive(pids[0]) && !alive(pids[1]), "destroy stops every worker");
    cr_assert_eq(waitpid(pids[0], NULL, WNOHANG), -1, "and reaps it");
}

Test(executor, a_killed_worker_is_reaped_and_reported_then_replaced)
{
    sl_master_executor_t *ex = make(4, NULL, NULL);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, "j", 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_executor_worker_t w[4];
    cr_assert_eq(sl_master_executor_list(ex, "j", w, 4), 2);
    cr_assert_eq(kill(w[1].pid, SIGKILL), 0);
    uint32_t n = 2;
    for (int i = 0; i < 500 && (n = sl_master_executor_count(ex, "j")) == 2; i++)
        usleep(10 * 1000);
    cr_assert_eq(n, 1);
    sl_master_executor_stats_t st;
    sl_master_executor_stats(ex, &st);
    cr_assert_eq(st.failed, 1);
    char want[400];
    snprintf(want, sizeof want, "worker %s (pid %d) killed by signal 9", w[1].worker_id,
             (int)w[1].pid);
    cr_assert_str_eq(st.last_failure, want);
    uint32_t up = 0;
    cr_assert_eq(sl_master_executor_scale(ex, "j", 2, &up, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(up, 1);
    cr_assert_eq(sl_master_executor_list(ex, "j", w, 4), 2);
    char id[64];
    snprintf(id, sizeof id, "j-w3.%d", (int)getpid());
    cr_assert_str_eq(w[1].worker_id, id, "worker ids are never reused");
    sl_master_executor_destroy(ex);
}

Test(executor, bounds_and_bad_options)
{
    sl_master_executor_t *ex = make(3, NULL, NULL);
    sl_error_t err = {0};
    uint32_t up = 0;
    cr_assert_eq(sl_master_executor_scale(ex, "a", 2, &up, NULL, &err), SL_OK);
    cr_assert_eq(sl_master_executor_scale(ex, "b", 5, &up, NULL, &err), SL_ERR_TOO_LARGE);
    cr_assert_eq(up, 1, "as many as fit are started");
    cr_assert(strstr(err.msg, "job b wants 5 workers") && strstr(err.msg, "at most 3"), "%s",
              err.msg);
    cr_assert_eq(sl_master_executor_count(ex, NULL), 3);
    cr_assert_eq(sl_master_executor_scale(ex, "", 1, NULL, NULL, &err), SL_ERR_INVALID);
    /* ids that would put a log file outside its directory */
    cr_assert_eq(sl_master_executor_scale(ex, "../x", 1, NULL, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "executor: job id '../x': a job id is") != NULL, "%s", err.msg);
    cr_assert_eq(sl_master_executor_scale(ex, "a/b", 1, NULL, NULL, &err), SL_ERR_INVALID);
    sl_master_executor_destroy(ex);
    sl_master_executor_destroy(NULL);

    sl_master_executor_local_opts_t o = {.binary = script};
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_ERR_INVALID);
    cr_assert_null(ex);
    const char *bad[] = {"--listen=0.0.0.0:1", NULL};
    o.master = "127.0.0.1:1";
    o.extra_args = bad;
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "--listen=0.0.0.0:1"), "%s", err.msg);

    /* A binary that does not exist: the spawn fails, saying which. */
    o.extra_args = NULL;
    o.binary = "/nonexistent/sluice";
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_executor_scale(ex, "a", 1, NULL, NULL, &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "/nonexistent/sluice"), "%s", err.msg);
    cr_assert_eq(sl_master_executor_count(ex, NULL), 0);
    sl_master_executor_stats_t st;
    sl_master_executor_stats(ex, &st);
    cr_assert_eq(st.spawn_errors, 1);
    sl_master_executor_destroy(ex);
}

Test(executor, apply_scales_listed_jobs_and_stops_unlisted_ones)
{
    sl_master_executor_t *ex = make(8, NULL, NULL);
    sl_error_t err = {0};
    sl_master_executor_target_t t[] = {{"a", 2}, {"b", 1}};
    uint32_t up = 0, down = 0;
    cr_assert_eq(sl_master_executor_apply(ex, t, 2, &up, &down, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(up, 3);
    cr_assert_eq(down, 0);
    cr_assert_eq(sl_master_executor_count(ex, "a"), 2);
    cr_assert_eq(sl_master_executor_count(ex, "b"), 1);
    /* b was removed, a finished (0): everything stops. */
    sl_master_executor_target_t t2[] = {{"a", 0}};
    cr_assert_eq(sl_master_executor_apply(ex, t2, 1, &up, &down, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(up, 0);
    cr_assert_eq(down, 3);
    cr_assert_eq(sl_master_executor_count(ex, NULL), 0);
    /* Repeating it stops nothing more (the stopping ones are not counted). */
    cr_assert_eq(sl_master_executor_apply(ex, t2, 1, &up, &down, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(down, 0);
    sl_master_executor_destroy(ex);
}

/* Workers that keep exiting right after they start: their restarts back
 * off exponentially up to the cap (not a fork loop), the failures and
 * postponed restarts are counted, and a missing or unusable log directory
 * is refused when the executor is made. */
Test(executor, restarts_back_off_when_workers_keep_exiting)
{
    char failing[400];
    snprintf(failing, sizeof failing, "%s/failing-sluice", tmpdir);
    FILE *f = fopen(failing, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\nexit 3\n", f);
    fclose(f);
    chmod(failing, 0755);
    sl_master_executor_local_opts_t o = {.binary = failing,
                                         .master = "127.0.0.1:7070",
                                         .max_workers = 4,
                                         .backoff_ms = 100,
                                         .max_backoff_ms = 400,
                                         .healthy_ms = 5000};
    sl_master_executor_t *ex = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_OK, "%s", err.msg);
    double starts[64];
    uint32_t n = 0, max_backoff = 0;
    /* a fixed 2.5 s of trying (the delays are the executor's, not waits
     * for the machine: not scaled) */
    const double t_end = 2500;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t0 = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6, now = t0;
    while (now - t0 < t_end && n < 64) {
        uint32_t up = 0;
        cr_assert_eq(sl_master_executor_scale(ex, "j", 1, &up, NULL, &err), SL_OK, "%s", err.msg);
        cr_assert_leq(up, 1, "one spawn at a time");
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
        if (up) starts[n++] = now;
        sl_master_executor_stats_t st;
        sl_master_executor_stats(ex, &st);
        if (st.backoff_ms > max_backoff) max_backoff = st.backoff_ms;
        usleep(5 * 1000);
    }
    /* without the back-off: hundreds of spawns; with it: 0, 100, 200, 400,
     * 400, ... ms between them */
    cr_assert_geq(n, 4, "%u spawns", n);
    cr_assert_leq(n, 12, "%u spawns in %.1f s: not backing off", n, t_end / 1000);
    const double want[] = {0, 0, 100, 200, 400}; /* before spawn k (k-1 failures in a row) */
    for (uint32_t k = 2; k < n; k++) {
        double gap = starts[k] - starts[k - 1], floor = want[k < 5 ? k : 4];
        cr_assert_geq(gap, floor - 5, "spawn %u came %.0f ms after the last, want >= %.0f", k, gap,
                      floor);
    }
    cr_assert_gt(max_backoff, 0);
    cr_assert_leq(max_backoff, 400);
    sl_master_executor_stats_t st;
    sl_master_executor_stats(ex, &st);
    cr_assert_eq(st.started, n);
    cr_assert_geq(st.failed, n - 1);
    cr_assert_geq(st.delayed, n - 2);
    cr_assert(strstr(st.last_failure, "exited with status 3") != NULL, "%s", st.last_failure);
    sl_master_executor_destroy(ex);

    /* log directories */
    char file[400], missing[400];
    snprintf(file, sizeof file, "%s/not-a-dir", tmpdir);
    snprintf(missing, sizeof missing, "%s/missing", tmpdir);
    fclose(fopen(file, "w"));
    o = (sl_master_executor_local_opts_t){
        .binary = script, .master = "127.0.0.1:7070", .log_dir = missing};
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_ERR_INVALID);
    cr_assert_null(ex);
    char want_msg[600];
    snprintf(want_msg, sizeof want_msg,
             "executor: --worker-log-dir %s: does not exist (create it first)", missing);
    cr_assert_str_eq(err.msg, want_msg);
    o.log_dir = file;
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_ERR_INVALID);
    snprintf(want_msg, sizeof want_msg, "executor: --worker-log-dir %s: not a directory", file);
    cr_assert_str_eq(err.msg, want_msg);
    o.log_dir = tmpdir;
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_OK, "%s", err.msg);
    sl_master_executor_destroy(ex);
}

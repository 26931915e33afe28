/* Several jobs at once on one master: two jobs over the same table, each
 * with its own workers (the executor starts them with --job-id) and its own
 * trainer client; each job delivers its epoch exactly once, no worker
 * serves the other job (GET /workers), and `sluice submit --wait` follows
 * the second job until it is finished and exits 0. */
#include "fleet_util.h"

TestSuite(fleet_jobs, .init = fu_setup, .fini = fu_teardown);

#define ROWS 12000u

/* GET /workers: every worker listed serves the job its id names (the
 * executor starts "JOB-..." with --job-id JOB). *na, *nb get how many
 * serve job-a and job-b. @return how many are listed. */
static size_t workers_check(const fu_master_t *m, uint32_t *na, uint32_t *nb)
{
    json_t *w = fu_get_json(m->admin, "/workers");
    json_t *arr = json_object_get(w, "workers");
    size_t n = json_array_size(arr), i;
    json_t *x;
    *na = *nb = 0;
    json_array_foreach(arr, i, x)
    {
        const char *id = json_string_value(json_object_get(x, "id"));
        const char *job = json_string_value(json_object_get(x, "job"));
        cr_assert(id && job);
        cr_assert_eq(strncmp(id, job, strlen(job)), 0, "worker %s serves %s", id, job);
        *na += strcmp(job, "job-a") == 0;
        *nb += strcmp(job, "job-b") == 0;
    }
    json_decref(w);
    return n;
}

Test(fleet_jobs, two_jobs_at_once_each_exactly_once)
{
    char table[300], spec_a[1024], spec_b[1024], path_b[400], token_path[400], log[400];
    fu_gen(ROWS, 1000, 1, table, sizeof table);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    snprintf(spec_a, sizeof spec_a,
             "{\"id\":\"job-a\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":500}}", table);
    snprintf(spec_b, sizeof spec_b,
             "{\"id\":\"job-b\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":300,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":3}}}",
             table);
    char *a = fu_submit(&m, spec_a, 1, "dynamic", 1, 1, NULL);

    /* job-b through `sluice submit --wait`, in the background */
    snprintf(path_b, sizeof path_b, "%s/job-b.json", fu_dir);
    snprintf(token_path, sizeof token_path, "%s/token", fu_dir);
    snprintf(log, sizeof log, "%s/submit.log", fu_dir);
    fu_write(path_b, spec_b);
    fu_write(token_path, FU_TOKEN "\n");
    const char *bin = fu_binary(); /* asserts: in the parent, not the child */
    pid_t submit = fork();
    cr_assert_geq(submit, 0);
    if (submit == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(bin, bin, "submit", "--admin", m.admin, "--job", path_b, "--token-file", token_path,
              "--min-workers", "2", "--max-workers", "2", "--wait", "--timeout", "120",
              (char *)NULL);
        _exit(127);
    }
    double deadline = fu_now() + tu_timeout(20);
    for (;;) {
        char *b;
        int st = fu_http(m.admin, "GET", "/jobs/job-b", NULL, NULL, &b);
        free(b);
        if (st == 200) break;
        cr_assert(fu_now() < deadline, "sluice submit did not create job-b; see %s", log);
        usleep(20 * 1000);
    }

    sl_master_executor_t *ex = fu_executor(&m, 1);
    sl_master_executor_target_t t[] = {{"job-a", 1}, {"job-b", 2}};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_apply(ex, t, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);

    /* The three workers registered together, each serving the job it was
     * started for, before any trainer connects: neither job can finish
     * without its trainer, so all three stay up until they are seen. (This
     * was sampled only while job-a's trainer ran, about 0.2 s, and under
     * load job-b's workers could register after job-a had finished.) */
    uint32_t na, nb;
    size_t listed;
    double until = fu_now() + tu_timeout(30);
    while ((listed = workers_check(&m, &na, &nb)) != 3 || na != 1 || nb != 2) {
        cr_assert(fu_now() < until,
                  "never saw the three workers registered together in %.0f s (last: %zu "
                  "listed, %u of job-a, %u of job-b)",
                  tu_timeout(30), listed, na, nb);
        usleep(20 * 1000);
    }

    atomic_uint *seen_a = calloc(ROWS, sizeof *seen_a), *seen_b = calloc(2 * ROWS, sizeof *seen_b);
    fu_client_t ca = {
        .master = m.ctl, .job = "job-a", .rows = ROWS, .seen = seen_a, .delay_us = 5000};
    fu_client_t cb = {.master = m.ctl,
                      .job = "job-b",
                      .rows = ROWS,
                      .epochs = 2,
                      .seen = seen_b,
                      .delay_us = 5000};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, fu_client_run, &ca);
    pthread_create(&tb, NULL, fu_client_run, &cb);

    /* While both run: every registered worker serves the job it was
     * started for. */
    while (!atomic_load(&ca.finished) || !atomic_load(&cb.finished)) {
        workers_check(&m, &na, &nb);
        usleep(20 * 1000);
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    cr_assert_eq(ca.end, SL_ERR_CLOSED, "job-a: %s: %s", sl_err_str(ca.end), ca.msg);
    cr_assert_eq(cb.end, SL_ERR_CLOSED, "job-b: %s: %s", sl_err_str(cb.end), cb.msg);
    fu_assert_once_per_epoch(seen_a, ROWS, 1);
    fu_assert_once_per_epoch(seen_b, ROWS, 2);

    int st;
    cr_assert_eq(waitpid(submit, &st, 0), submit);
    FILE *f = fopen(log, "r");
    char out[4096] = "";
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sluice submit --wait: status %d: %s", st,
              out);
    cr_assert(strstr(out, "\"id\":\"job-b\""), "%s", out);
    cr_assert(strstr(out, "job job-b: epoch 2/2, splits done 12/12, finished"), "%s", out);
    cr_assert(fu_job_finished(&m, "job-a") && fu_job_finished(&m, "job-b"));

    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
    free(seen_a);
    free(seen_b);
    free(a);
}

/* A job shorter than one heartbeat period: the worker's last figures reach
 * the master before it leaves, so GET /jobs/{id} after the job shows what
 * the worker's own summary says (it showed bytes_encoded 0 before). */
Test(fleet_jobs, the_masters_figures_after_a_job_are_the_workers_last)
{
    fu_master_t m = {0};
    char *job = fu_job_up(&m, "short", ROWS, 1, 1, "dynamic", 1);
    char wlog[400], rlog[400];
    snprintf(wlog, sizeof wlog, "%s/worker.log", fu_dir);
    snprintf(rlog, sizeof rlog, "%s/read.log", fu_dir);
    pid_t w = fu_worker_spawn(m.ctl, job, "short-w", wlog);
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_reader_t r;
    fu_reader_start(&r, &m, job, ROWS, 1, seen, rlog);
    cr_assert_eq(fu_reader_join(&r, tu_timeout(60)), 0, "see %s", rlog);
    fu_assert_once_per_epoch(seen, ROWS, 1);
    int ws = fu_wait_exit(w, tu_timeout(30));
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "worker status %d; see %s", ws, wlog);

    char *text = tu_read_file(wlog);
    const char *at = strstr(text, "bytes encoded ");
    cr_assert_not_null(at, "%s", text);
    unsigned long long encoded = strtoull(at + strlen("bytes encoded "), NULL, 10);
    cr_assert_gt(encoded, 0, "%s", text);
    char path[128];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m.admin, path);
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes_encoded")), (json_int_t)encoded,
                 "the master has %lld bytes encoded, the worker's summary %llu",
                 (long long)json_integer_value(json_object_get(j, "bytes_encoded")), encoded);
    json_decref(j);
    free(text);
    free(seen);
    free(job);
}

/* The master tells its clients what changed as it happens (ATTACHED
 * unasked): a client whose own refresh never comes (an hour) learns of the
 * worker that joined after it attached, goes through both epochs and ends
 * when the job finishes. Before, it waited for its next refresh at the
 * start and at the end of the job. */
Test(fleet_jobs, clients_learn_of_workers_and_the_end_without_a_refresh)
{
    fu_master_t m = {0};
    char *job = fu_job_up(&m, "pushed", ROWS, 2, 1, "dynamic", 1);
    atomic_uint *seen = calloc(2 * ROWS, sizeof *seen);
    fu_client_t c = {.master = m.ctl,
                     .job = job,
                     .rows = ROWS,
                     .epochs = 2,
                     .seen = seen,
                     .refresh_ms = 3600 * 1000};
    pthread_t th;
    pthread_create(&th, NULL, fu_client_run, &c);
    usleep(300 * 1000); /* attached, with no worker to read from yet */
    char wlog[400];
    snprintf(wlog, sizeof wlog, "%s/worker.log", fu_dir);
    pid_t w = fu_worker_spawn(m.ctl, job, "pushed-w", wlog);
    double until = fu_now() + tu_timeout(30);
    while (!atomic_load(&c.finished)) {
        cr_assert(fu_now() < until, "the client did not finish; it saw %llu samples",
                  (unsigned long long)c.samples);
        usleep(20 * 1000);
    }
    pthread_join(th, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    fu_assert_once_per_epoch(seen, ROWS, 2);
    cr_assert_neq(fu_wait_exit(w, tu_timeout(30)), -1, "see %s", wlog);
    free(seen);
    free(job);
}

/* The master keeps each job's recent past (history.h): after a job that
 * ran a few seconds, GET /jobs/{id} has points with the job's rate and the
 * submission's decision, and GET /jobs says samples/s and no ETA for a
 * finished job. */
Test(fleet_jobs, history_of_a_job_and_its_rate)
{
    fu_master_t m = {.extra = {"--history-every-ms", "100", NULL}};
    char *job = fu_job_up(&m, "hist", ROWS, 1, 1, "dynamic", 1);
    char wlog[400];
    snprintf(wlog, sizeof wlog, "%s/worker.log", fu_dir);
    pid_t w = fu_worker_spawn(m.ctl, job, "hist-w", wlog);
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    /* 48 batches, 60 ms each: about 3 s, so the master looks a few times */
    fu_client_t c = {.master = m.ctl, .job = job, .rows = ROWS, .seen = seen, .delay_us = 60000};
    fu_client_run(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    fu_assert_once_per_epoch(seen, ROWS, 1);
    cr_assert_neq(fu_wait_exit(w, tu_timeout(30)), -1, "see %s", wlog);

    char path[128];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m.admin, path);
    json_t *h = json_object_get(j, "history");
    json_t *points = json_object_get(h, "points");
    cr_assert_float_eq(json_number_value(json_object_get(h, "interval_s")), 0.1, 1e-9);
    cr_assert_geq(json_array_size(points), 2, "%zu points", json_array_size(points));
    double best = 0, t_prev = 0;
    size_t i;
    json_t *p;
    json_array_foreach(points, i, p)
    {
        double rate = json_number_value(json_object_get(p, "samples_per_s"));
        double t = json_number_value(json_object_get(p, "t"));
        cr_assert_gt(t, t_prev, "points in time order");
        t_prev = t;
        cr_assert_leq(json_integer_value(json_object_get(p, "workers")), 1);
        if (rate > best) best = rate;
    }
    /* 48 batches of 250 over about 3 s: a rate between 1 and 1000 x that */
    cr_assert(best > 100 && best < 4e6, "best rate %.0f samples/s", best);
    json_t *d = json_array_get(json_object_get(h, "decisions"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(d, "by")), "submit");
    cr_assert_eq(json_integer_value(json_object_get(d, "to")), 1);
    cr_assert(json_is_null(json_object_get(j, "eta_s")), "a finished job has no ETA");
    cr_assert(json_is_number(json_object_get(j, "samples_per_s")));
    json_decref(j);
    free(seen);
    free(job);
}

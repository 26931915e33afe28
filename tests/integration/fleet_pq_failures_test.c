/* A Parquet dataset job whose first file breaks after the master planned
 * it (truncated to 100 bytes: its footer no longer reads), end to end: a
 * real `sluice master` and one `sluice worker --master` process. The
 * worker does not exit: it takes the dataset's columns from the next file
 * whose footer reads, reports the broken file's split with SPLIT_FAILED
 * (naming the file) and serves the other split. The master's policy then
 * decides: with on_bad_split "skip" the job finishes with every row of the
 * good file delivered exactly once and the broken split skipped; with
 * "fail" the job fails with the file in its failure. Either way the worker
 * exits 0 when the master has no more work for it. */
#include "fleet_util.h"

TestSuite(fleet_pq_failures, .init = fu_setup, .fini = fu_teardown, .timeout = 120);

#define FILE_ROWS 50                 /* tests/data/parquet/duckdb-zstd.parquet, one row group */
#define FILE_ID_STRIDE 10000000000ll /* pq_dataset.c: a file's sample ids, file index x this */
#define BROKEN "p=1/part-0.parquet"  /* the first file in path order */
#define GOOD "p=2/part-0.parquet"    /* its ids: FILE_ID_STRIDE + 1 .. + FILE_ROWS */

typedef struct counter {
    const char *master, *job;
    uint32_t seen[FILE_ROWS + 1]; /* the good file's rows by line; [0]: any other id */
    sl_err_t end;
    char msg[SL_ERROR_MSG_MAX];
} counter_t;

static void *count_rows(void *arg)
{
    counter_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = c->master;
    o.job_id = c->job;
    o.refresh_ms = 200;
    o.reconnect_ms = (int)(tu_timeout(30) * 1000);
    sl_trainer_t *t;
    sl_error_t err = {0};
    if ((c->end = sl_trainer_connect(&o, &t, &err)) == SL_OK) {
        sl_batch_t *b;
        while ((c->end = sl_trainer_next(t, (int)(tu_timeout(30) * 1000), &b, &err)) == SL_OK) {
            for (uint32_t i = 0; i < b->batch_size; i++) {
                int64_t line = b->sample_ids[i] - FILE_ID_STRIDE;
                c->seen[line >= 1 && line <= FILE_ROWS ? line : 0]++;
            }
            sl_trainer_release(t, b);
        }
        sl_trainer_close(t);
    }
    snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    return NULL;
}

static void copy_file(const char *from, const char *to)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && cp '%s' '%s'", to, from, to);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The dataset (two copies of one file, in Hive folders p=1 and p=2), the
 * master, the job (on_bad_split as given, one epoch), then the first file
 * truncated and one worker started; a trainer reads the job to its end
 * (c). ds gets the dataset's path. @return the job id (malloc'd); *worker
 * the worker's pid, log its log. */
static char *run_broken(fu_master_t *m, const char *on_bad_split, char *ds, counter_t *c,
                        pid_t *worker, char *log)
{
    const char *root = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(root, "SLUICE_SOURCE_DIR is not set (run through ctest)");
    char src[600], dst[700], spec[1200];
    snprintf(src, sizeof src, "%s/tests/data/parquet/duckdb-zstd.parquet", root);
    snprintf(ds, 300, "%s/pq", fu_dir);
    snprintf(dst, sizeof dst, "%s/" BROKEN, ds);
    copy_file(src, dst);
    snprintf(dst, sizeof dst, "%s/" GOOD, ds);
    copy_file(src, dst);
    m->extra[0] = "--max-split-failures";
    m->extra[1] = "2";
    fu_master_start(m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"pq-%s\",\"source\":{\"parquet\":\"%s\"},\"on_bad_split\":\"%s\","
             "\"batch\":{\"size\":10,\"epochs\":1}}",
             on_bad_split, ds, on_bad_split);
    char *job = fu_submit(m, spec, 1, "dynamic", 1, 1, NULL);
    /* planned from both footers; now the first file's footer is gone */
    snprintf(dst, sizeof dst, "%s/" BROKEN, ds);
    cr_assert_eq(truncate(dst, 100), 0);
    snprintf(log, 400, "%s/worker.log", fu_dir);
    *worker = fu_worker_spawn(m->ctl, job, "w-pq", log);
    *c = (counter_t){.master = m->ctl, .job = job};
    pthread_t th;
    pthread_create(&th, NULL, count_rows, c);
    pthread_join(th, NULL);
    return job;
}

/* The worker reported the broken file's split and exited 0 (it did not
 * fail): the master had no more work for it. */
static void assert_worker_went_on(pid_t worker, const char *log, const char *ds)
{
    int ws = fu_wait_exit(worker, 30);
    cr_assert_neq(ws, -1, "the worker did not exit; see %s", log);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "worker status %d; see %s", ws, log);
    FILE *f = fopen(log, "r");
    cr_assert_not_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    char want[800];
    snprintf(want, sizeof want,
             "split 0 of " BROKEN " cannot be read, reported to the master: file %s/" BROKEN
             ": not Parquet",
             ds);
    cr_assert(strstr(text, want) != NULL, "the worker's log lacks '%s':\n%s", want, text);
}

Test(fleet_pq_failures, skip_a_file_broken_after_submit_and_serve_the_others_exactly_once)
{
    fu_master_t m = {0};
    counter_t c;
    pid_t worker;
    char ds[300], log[400], path[300];
    char *job = run_broken(&m, "skip", ds, &c, &worker, log);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    cr_assert_eq(c.seen[0], 0, "%u samples not of the good file", c.seen[0]);
    for (uint32_t line = 1; line <= FILE_ROWS; line++)
        cr_assert_eq(c.seen[line], 1, "row %u of " GOOD ": %u times", line, c.seen[line]);
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m.admin, path);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "finished");
    cr_assert(json_is_null(json_object_get(j, "failure")));
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_splits")), 1);
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_rows")), FILE_ROWS);
    cr_assert_eq(json_integer_value(json_object_get(j, "samples")), FILE_ROWS);
    json_decref(j);
    /* the split failed --max-split-failures times before it was skipped
     * (the job's own count is the epoch's, reset when it finished) */
    char *metrics;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &metrics), 200);
    cr_assert(strstr(metrics, "\nsluice_master_split_failures_total 2\n") != NULL, "%s", metrics);
    free(metrics);
    assert_worker_went_on(worker, log, ds);
    fu_master_stop(&m, SIGTERM);
    free(job);
}

Test(fleet_pq_failures, fail_the_job_naming_a_file_broken_after_submit)
{
    fu_master_t m = {0};
    counter_t c;
    pid_t worker;
    char ds[300], log[400], path[300], want[800];
    char *job = run_broken(&m, "fail", ds, &c, &worker, log);
    cr_assert_eq(c.end, SL_ERR_CORRUPT, "%s: %s", sl_err_str(c.end), c.msg);
    snprintf(want, sizeof want,
             "job pq-fail failed: split 0 (file " BROKEN ") failed: file %s/" BROKEN
             ": not Parquet",
             ds);
    cr_assert(strstr(c.msg, want) != NULL, "'%s' lacks '%s'", c.msg, want);
    cr_assert_eq(c.seen[0], 0, "%u samples not of the good file", c.seen[0]);
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m.admin, path);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    json_t *f = json_object_get(j, "failure");
    cr_assert(json_is_object(f), "no failure object");
    cr_assert_str_eq(json_string_value(json_object_get(f, "file")), BROKEN);
    cr_assert_eq(json_integer_value(json_object_get(f, "split")), 0);
    cr_assert_eq(json_integer_value(json_object_get(f, "stripe")), -1);
    cr_assert_str_eq(json_string_value(json_object_get(f, "error")), sl_err_str(SL_ERR_CORRUPT));
    snprintf(want, sizeof want, "file %s/" BROKEN ": not Parquet (wrong magic", ds);
    const char *msg = json_string_value(json_object_get(f, "message"));
    cr_assert(msg && strncmp(msg, want, strlen(want)) == 0, "message: %s", msg ? msg : "(none)");
    cr_assert_eq(json_integer_value(json_object_get(j, "split_failures")), 2);
    json_decref(j);
    assert_worker_went_on(worker, log, ds);
    fu_master_stop(&m, SIGTERM);
    free(job);
}

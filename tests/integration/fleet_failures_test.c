/* A job that cannot run fails loudly, end to end: a real `sluice master
 * --executor local` whose worker processes meet a table with one corrupted
 * stripe. The worker reports SPLIT_FAILED and goes on; the split failing
 * --max-split-failures times puts the job in `failed` with the file and
 * stripe in GET /jobs/{id}, /status and the metrics (also after a master
 * restart), its trainers end with that reason within a few seconds (not a
 * 30 s timeout) and `sluice read` exits non-zero printing it. With
 * "on_bad_split": "skip" the split is skipped and counted instead, and every
 * sample of the other splits arrives exactly once in each of two epochs.
 * The same with the stripe whole but its reads failing with EIO in the
 * worker processes (libfiu, a storage fault).
 * And the executor: a --worker-log-dir that does not exist is refused at
 * start; spawns are in the metrics. */
#include "fleet_util.h"

TestSuite(fleet_failures, .init = fu_setup, .fini = fu_teardown, .timeout = 180);

#define ROWS 4000
#define STRIPE_ROWS 500 /* 8 stripes, one split each */
#define BAD_STRIPE 3
#define FIU_PRELOAD "/usr/lib/fiu/fiu_run_preload.so" /* fiu-utils: what fiu-run preloads */

/* The sample ids of stripe `stripe` of the table's one data file go to
 * bad[] (STRIPE_ROWS of them); rel gets the file, relative to the table;
 * @return where the stripe lies in the file. */
static sl_wh_stripe_info_t stripe_ids(const char *table, uint32_t stripe, char *rel, size_t cap,
                                      uint8_t *bad)
{
    sl_error_t err = {0};
    sl_wh_table_t *t = NULL;
    sl_wh_splits_t *sp = NULL;
    cr_assert_eq(sl_wh_table_open(table, NULL, &t, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sp->count, ROWS / STRIPE_ROWS);
    const sl_wh_split_t *s = &sp->items[stripe];
    cr_assert_eq(s->stripe_begin, stripe);
    snprintf(rel, cap, "%s", s->path);
    char full[700];
    snprintf(full, sizeof full, "%s/%s", table, s->path);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    sl_wh_read_opts_t ro = {0};
    sl_wh_reader_t *r = NULL;
    cr_assert_eq(sl_wh_reader_open(full, NULL, &ro, &r, &err), SL_OK, "%s", err.msg);
    sl_wh_stripe_info_t info;
    cr_assert_eq(sl_wh_reader_stripe_info(r, stripe, &info), SL_OK);
    const sl_wh_rows_t *rows;
    cr_assert_eq(sl_wh_reader_read_stripe(r, stripe, &rows, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(rows->batch.batch_size, STRIPE_ROWS);
    for (uint32_t i = 0; i < STRIPE_ROWS; i++) {
        int64_t id = rows->batch.sample_ids[i];
        cr_assert(id >= 0 && id < ROWS);
        bad[id] = 1;
    }
    sl_wh_reader_close(r);
    return info;
}

/* Flip bytes all over stripe `stripe` of the table's one data file, so that
 * every stream of it fails its checksum; as stripe_ids otherwise. */
static void corrupt_stripe(const char *table, uint32_t stripe, char *rel, size_t cap, uint8_t *bad)
{
    sl_wh_stripe_info_t info = stripe_ids(table, stripe, rel, cap, bad);
    char full[700];
    snprintf(full, sizeof full, "%s/%s", table, rel);
    int fd = open(full, O_RDWR);
    cr_assert_geq(fd, 0);
    for (uint64_t off = info.offset + 7; off < info.offset + info.bytes; off += 97) {
        uint8_t c;
        cr_assert_eq(pread(fd, &c, 1, (off_t)off), 1);
        c ^= 0x5a;
        cr_assert_eq(pwrite(fd, &c, 1, (off_t)off), 1);
    }
    close(fd);
}

/* A trainer of the job counting each sample per epoch (seen[epoch][id]),
 * until the job ends or fails. */
typedef struct reader {
    const char *master, *job;
    uint8_t *seen; /* [2 * ROWS] */
    uint64_t batches;
    sl_err_t end;
    char msg[SL_ERROR_MSG_MAX];
    double ended_at;
} reader_t;

static void *read_job(void *arg)
{
    reader_t *c = arg;
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
                int64_t id = b->sample_ids[i];
                if (id >= 0 && id < ROWS && b->origin.epoch < 2)
                    c->seen[b->origin.epoch * ROWS + id]++;
            }
            c->batches++;
            sl_trainer_release(t, b);
        }
        sl_trainer_close(t);
    }
    snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    c->ended_at = fu_now();
    return NULL;
}

/* Run a shell command line with its output into a file of fu_dir; the
 * exit status (WEXITSTATUS, or -1 when killed) and the output in text. */
static int run(const char *cmdline, char *text, size_t cap)
{
    char out[400], cmd[2000];
    snprintf(out, sizeof out, "%s/run.out", fu_dir);
    snprintf(cmd, sizeof cmd, "timeout %d %s > %s 2>&1", (int)tu_timeout(30), cmdline, out);
    int st = system(cmd);
    FILE *f = fopen(out, "r");
    cr_assert_not_null(f);
    size_t n = fread(text, 1, cap - 1, f);
    text[n] = '\0';
    fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *job_json(const fu_master_t *m, const char *job)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    return fu_get_json(m->admin, path);
}

static void start_master(fu_master_t *m)
{
    static char logs[300]; /* m keeps pointing at it, for restarts */
    snprintf(logs, sizeof logs, "%s/logs", fu_dir);
    mkdir(logs, 0755);
    m->lease_timeout_ms = 3000;
    m->extra[0] = "--executor";
    m->extra[1] = "local";
    m->extra[2] = "--worker-log-dir";
    m->extra[3] = logs;
    m->extra[4] = "--max-split-failures";
    m->extra[5] = "2";
    fu_master_start(m);
}

/* The failure as GET /jobs/{id} shows it: a checksum failure (SL_ERR_CORRUPT)
 * or an injected EIO (SL_ERR_IO). */
static void assert_failed_with(json_t *j, const char *file, sl_err_t code, const char *what)
{
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    cr_assert(json_is_false(json_object_get(j, "finished")));
    json_t *f = json_object_get(j, "failure");
    cr_assert(json_is_object(f), "no failure object");
    cr_assert_str_eq(json_string_value(json_object_get(f, "file")), file);
    cr_assert_eq(json_integer_value(json_object_get(f, "stripe")), BAD_STRIPE);
    cr_assert_eq(json_integer_value(json_object_get(f, "split")), BAD_STRIPE);
    const char *msg = json_string_value(json_object_get(f, "message"));
    cr_assert(msg && strstr(msg, what) != NULL, "message: %s", msg ? msg : "(none)");
    cr_assert_str_eq(json_string_value(json_object_get(f, "error")), sl_err_str(code));
}

static void assert_failed(json_t *j, const char *file)
{
    assert_failed_with(j, file, SL_ERR_CORRUPT, "checksum");
}

/* The table with its bad stripe (sample ids in bad[], file in file):
 * corrupted, or (eio) whole but every read of it failing with EIO in the
 * worker processes (libfiu point sluice/warehouse/read, armed by fiu-run's
 * preload library and FIU_ENABLE in the master's environment, which its
 * local executor's workers inherit); the master, the job (2 epochs,
 * on_bad_split as given), and a trainer reading it to its end (c, its
 * seen[] allocated here). @return the job id (malloc'd); *t0 when the
 * trainer started. */
static char *run_bad_job(fu_master_t *m, const char *id, const char *on_bad_split, bool eio,
                         char *table, char *file, uint8_t *bad, reader_t *c, double *t0)
{
    char spec[800];
    fu_gen(ROWS, STRIPE_ROWS, 1, table, 300);
    if (eio) {
        stripe_ids(table, BAD_STRIPE, file, 400, bad);
        char enable[128];
        snprintf(enable, sizeof enable, "enable name=sluice/warehouse/read,failinfo=%u",
                 BAD_STRIPE + 1);
        cr_assert_eq(access(FIU_PRELOAD, R_OK), 0, "%s: install fiu-utils (ops/install-deps)",
                     FIU_PRELOAD);
        setenv("FIU_ENABLE", enable, 1);
        setenv("LD_PRELOAD", FIU_PRELOAD, 1);
        /* a sanitizer build's runtime need not come first for this */
        setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1);
    } else {
        corrupt_stripe(table, BAD_STRIPE, file, 400, bad);
    }
    start_master(m);
    unsetenv("FIU_ENABLE");
    unsetenv("LD_PRELOAD");
    unsetenv("ASAN_OPTIONS");
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},\"on_bad_split\":\"%s\","
             "\"batch\":{\"size\":100,\"epochs\":2}}",
             id, table, on_bad_split);
    char *job = fu_submit(m, spec, 1, "dynamic", 1, 1, NULL);
    *c = (reader_t){.master = m->ctl, .job = job, .seen = calloc(2 * ROWS, 1)};
    *t0 = fu_now();
    pthread_t th;
    pthread_create(&th, NULL, read_job, c);
    pthread_join(th, NULL);
    return job;
}

Test(fleet_failures, a_corrupt_stripe_fails_the_job_loudly)
{
    char table[300], file[400], spec[800];
    uint8_t bad[ROWS] = {0};
    fu_master_t m = {0};
    reader_t c;
    double t0;
    char *job = run_bad_job(&m, "corrupt", "fail", false, table, file, bad, &c, &t0);
    uint8_t *seen = c.seen;
    /* the trainer ends with the job's failure, promptly */
    cr_assert(c.end != SL_OK && c.end != SL_ERR_CLOSED && c.end != SL_ERR_TIMEOUT, "%s: %s",
              sl_err_str(c.end), c.msg);
    cr_assert_eq(c.end, SL_ERR_CORRUPT, "%s: %s", sl_err_str(c.end), c.msg);
    char want[600];
    snprintf(want, sizeof want,
             "job corrupt failed: split %u (file %s stripe %u) failed: ", BAD_STRIPE, file,
             BAD_STRIPE);
    cr_assert(strstr(c.msg, want) != NULL, "'%s' lacks '%s'", c.msg, want);
    cr_assert(strstr(c.msg, "checksum") != NULL, "%s", c.msg);
    fprintf(stderr, "the trainer ended with the job's failure %.2f s after it started\n",
            c.ended_at - t0);
    cr_assert_lt(c.ended_at - t0, tu_timeout(20), "took %.1f s", c.ended_at - t0);
    /* nothing of the bad stripe was delivered */
    for (uint32_t id = 0; id < ROWS; id++)
        if (bad[id]) cr_assert_eq(seen[id] + seen[ROWS + id], 0, "sample %u of the bad stripe", id);
    json_t *j = job_json(&m, job);
    assert_failed(j, file);
    cr_assert_eq(json_integer_value(json_object_get(j, "split_failures")), 2);
    json_decref(j);
    j = fu_get_json(m.admin, "/status");
    json_t *fj = json_object_get(j, "failed_jobs");
    cr_assert_eq(json_array_size(fj), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(fj, 0), "id")), "corrupt");
    cr_assert_geq(json_integer_value(json_object_get(json_object_get(j, "executor"), "spawns")), 1);
    json_decref(j);
    char *metrics;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &metrics), 200);
    cr_assert(strstr(metrics, "sluice_master_job_failed{job=\"corrupt\"} 1") != NULL, "%s",
              metrics);
    cr_assert(strstr(metrics, "sluice_master_split_failures_total 2") != NULL, "%s", metrics);
    cr_assert(strstr(metrics, "sluice_master_executor_spawns_total ") != NULL, "%s", metrics);
    free(metrics);
    /* the job's workers are told to stop and exit */
    double deadline = fu_now() + tu_timeout(20);
    for (;;) {
        j = job_json(&m, job);
        json_int_t workers = json_integer_value(json_object_get(j, "workers"));
        json_decref(j);
        if (workers == 0) break;
        cr_assert(fu_now() < deadline, "workers of the failed job still registered");
        usleep(100 * 1000);
    }
    /* `sluice read` exits non-zero with the reason */
    char cmd[1200], text[2048];
    snprintf(cmd, sizeof cmd, "%s read --master %s --job corrupt --quiet", fu_binary(), m.ctl);
    int st = run(cmd, text, sizeof text);
    cr_assert_eq(st, 1, "sluice read: status %d: %s", st, text);
    cr_assert(strstr(text, want) != NULL, "sluice read said: %s", text);
    /* a restarted master still knows (journal) */
    fu_master_stop(&m, SIGKILL);
    fu_master_start(&m);
    j = job_json(&m, job);
    assert_failed(j, file);
    json_decref(j);
    /* `sluice submit --wait` does not wait forever for a job that failed */
    char spec_path[400];
    snprintf(spec_path, sizeof spec_path, "%s/again.json", fu_dir);
    snprintf(spec, sizeof spec, "{\"id\":\"again\",\"source\":{\"table\":\"%s\"}}", table);
    fu_write(spec_path, spec);
    snprintf(cmd, sizeof cmd, "env SLUICE_ADMIN_TOKEN=%s %s submit --admin %s --job %s --wait",
             FU_TOKEN, fu_binary(), m.admin, spec_path);
    st = run(cmd, text, sizeof text);
    cr_assert_eq(st, 1, "sluice submit --wait: status %d: %s", st, text);
    snprintf(want, sizeof want,
             "sluice submit: job again failed: split %u (file %s stripe %u): ", BAD_STRIPE, file,
             BAD_STRIPE);
    cr_assert(strstr(text, want) != NULL, "sluice submit said: %s", text);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

Test(fleet_failures, skip_bad_splits_delivers_the_rest_exactly_once)
{
    char table[300], file[400];
    uint8_t bad[ROWS] = {0};
    fu_master_t m = {0};
    reader_t c;
    double t0;
    char *job = run_bad_job(&m, "skipping", "skip", false, table, file, bad, &c, &t0);
    uint8_t *seen = c.seen;
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    for (uint32_t e = 0; e < 2; e++)
        for (uint32_t id = 0; id < ROWS; id++)
            cr_assert_eq(seen[e * ROWS + id], bad[id] ? 0 : 1, "epoch %u sample %u: %u times", e,
                         id, seen[e * ROWS + id]);
    json_t *j = job_json(&m, job);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "finished");
    cr_assert(json_is_null(json_object_get(j, "failure")));
    cr_assert_str_eq(json_string_value(json_object_get(j, "on_bad_split")), "skip");
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_splits")), 2, "one per epoch");
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_rows")), 2 * STRIPE_ROWS);
    cr_assert_eq(json_integer_value(json_object_get(j, "samples")), 2 * (ROWS - STRIPE_ROWS));
    json_decref(j);
    char *metrics;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &metrics), 200);
    cr_assert(strstr(metrics, "sluice_master_skipped_splits_total{job=\"skipping\"} 2") != NULL,
              "%s", metrics);
    cr_assert(strstr(metrics, "sluice_master_skipped_rows_total{job=\"skipping\"} 1000") != NULL,
              "%s", metrics);
    free(metrics);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

/* A storage fault on table reads (EIO on every read of one stripe, in the
 * worker processes) is a bad split like a corrupt one: with "skip" every
 * sample of the other stripes arrives exactly once in each of two epochs
 * and the stripe is skipped once per epoch; with "fail" (after
 * --max-split-failures reads) the job fails naming file, stripe and the
 * read error, and nothing of the stripe was delivered. */
Test(fleet_failures, eio_on_table_reads_skips_the_split_exactly_once)
{
    char table[300], file[400];
    uint8_t bad[ROWS] = {0};
    fu_master_t m = {0};
    reader_t c;
    double t0;
    char *job = run_bad_job(&m, "eio-skip", "skip", true, table, file, bad, &c, &t0);
    uint8_t *seen = c.seen;
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    for (uint32_t e = 0; e < 2; e++)
        for (uint32_t id = 0; id < ROWS; id++)
            cr_assert_eq(seen[e * ROWS + id], bad[id] ? 0 : 1, "epoch %u sample %u: %u times", e,
                         id, seen[e * ROWS + id]);
    json_t *j = job_json(&m, job);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "finished");
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_splits")), 2, "one per epoch");
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_rows")), 2 * STRIPE_ROWS);
    cr_assert_eq(json_integer_value(json_object_get(j, "samples")), 2 * (ROWS - STRIPE_ROWS));
    json_decref(j);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

Test(fleet_failures, eio_on_table_reads_fails_the_job_naming_the_read)
{
    char table[300], file[400];
    uint8_t bad[ROWS] = {0};
    fu_master_t m = {0};
    reader_t c;
    double t0;
    char *job = run_bad_job(&m, "eio-fail", "fail", true, table, file, bad, &c, &t0);
    uint8_t *seen = c.seen;
    cr_assert_eq(c.end, SL_ERR_IO, "%s: %s", sl_err_str(c.end), c.msg);
    cr_assert(strstr(c.msg, "Input/output error") != NULL, "%s", c.msg);
    for (uint32_t id = 0; id < ROWS; id++)
        if (bad[id]) cr_assert_eq(seen[id] + seen[ROWS + id], 0, "sample %u of the bad stripe", id);
    json_t *j = job_json(&m, job);
    assert_failed_with(j, file, SL_ERR_IO, "Input/output error");
    cr_assert_eq(json_integer_value(json_object_get(j, "split_failures")), 2);
    json_decref(j);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

Test(fleet_failures, a_missing_worker_log_dir_is_refused_at_start)
{
    char cmd[1500], missing[400], text[1024];
    snprintf(missing, sizeof missing, "%s/no-such-dir", fu_dir);
    snprintf(cmd, sizeof cmd,
             "%s master --listen 127.0.0.1:0 --admin 127.0.0.1:0 --state %s/st "
             "--executor local --worker-log-dir %s",
             fu_binary(), fu_dir, missing);
    int st = run(cmd, text, sizeof text);
    cr_assert_eq(st, 2, "status %d: %s", st, text);
    char want[600];
    snprintf(want, sizeof want,
             "sluice master: --worker-log-dir %s: does not exist (create it first)\n", missing);
    cr_assert_str_eq(text, want);
}

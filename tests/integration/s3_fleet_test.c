/* A fleet whose table is only in an S3 store (the s3proxy of the ctest
 * fixture s3, s3_util.h): a `sluice master`, `sluice worker --master`
 * processes of the local executor and two trainer clients in master mode
 * (fleet_util.h), the master and the workers reading s3://BUCKET/tbl with
 * the credentials of their environment. Exactly once per epoch over two
 * epochs while random workers are killed with SIGKILL, and while the
 * master is killed with SIGKILL and restarted on its state. Randomised by
 * the test seed (SLUICE_TEST_SEED replays a run). */
#define _XOPEN_SOURCE 700
#include <ftw.h>

#include "fleet_util.h"
#include "s3_util.h"
#include "store/store.h"

#define ROWS 40000u
#define EPOCHS 2u

/* Upload the table at dir (fu_gen's) to s3://bucket/tbl, over what is
 * there, and delete it from disk: the fleet can only read the store. */
static void upload_table(const char *bucket, const char *dir)
{
    su_upload_tree(dir, bucket, "tbl");
    cr_assert_eq(nftw(dir, fu_rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

typedef struct fleet {
    fu_master_t m;
    sl_master_executor_t *ex;
    char *job;
    atomic_uint *seen;
    fu_client_t c[2];
    pthread_t th[2];
} fleet_t;

/* A table of ROWS rows (40 splits of 1000) generated here, uploaded to a
 * fresh bucket, and a job on s3://BUCKET/tbl run by `workers` workers,
 * sharded `sharding` ("dynamic", "static"), in the deterministic order
 * when ordered. */
static void fleet_up_as(fleet_t *f, const char *id, uint32_t workers, uint32_t delay_us,
                        const char *sharding, bool ordered)
{
    su_env();
    char b[64], table[300], spec[1024];
    su_bucket(id, b, sizeof b);
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    upload_table(b, table);
    sl_error_t err = {0};
    f->m = (fu_master_t){.lease_timeout_ms = 1000};
    fu_master_start(&f->m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"s3://%s/tbl\"},%s"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":11}}}",
             id, b, ordered ? "\"order\":\"deterministic\"," : "", EPOCHS);
    f->job = fu_submit(&f->m, spec, 2, sharding, workers, workers, NULL);
    f->ex = fu_executor(&f->m, 1);
    cr_assert_eq(sl_master_executor_scale(f->ex, f->job, workers, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
    f->seen = calloc(EPOCHS * ROWS, sizeof *f->seen);
    fu_client_t proto = {.master = f->m.ctl,
                         .job = f->job,
                         .world_size = 2,
                         .rows = ROWS,
                         .epochs = EPOCHS,
                         .seen = f->seen,
                         .delay_us = delay_us};
    fu_clients_start(f->c, f->th, 2, &proto);
}

static void fleet_up(fleet_t *f, const char *id, uint32_t workers, uint32_t delay_us)
{
    fleet_up_as(f, id, workers, delay_us, "dynamic", false);
}

static void fleet_join(fleet_t *f)
{
    fu_clients_join(f->c, f->th, 2);
    cr_assert_eq(f->c[0].samples + f->c[1].samples, EPOCHS * ROWS, "delivered %llu + %llu samples",
                 (unsigned long long)f->c[0].samples, (unsigned long long)f->c[1].samples);
    fu_assert_once_per_epoch(f->seen, ROWS, EPOCHS);
    cr_assert(fu_job_finished(&f->m, f->job));
}

static void fleet_down(fleet_t *f)
{
    fu_executor_destroy(f->ex);
    fu_master_stop(&f->m, SIGTERM);
    free(f->seen);
    free(f->job);
}

static bool clients_done(const fleet_t *f)
{
    return atomic_load(&f->c[0].finished) || atomic_load(&f->c[1].finished);
}

static void rescale(fleet_t *f, uint32_t workers)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(f->ex, f->job, workers, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
}

TestSuite(s3_fleet, .init = fu_setup, .fini = fu_teardown);

Test(s3_fleet, kill_9_workers_of_an_s3_job_exactly_once_over_two_epochs)
{
    uint64_t rng = tu_seed("s3_fleet.kill_9_workers");
    fleet_t f;
    fleet_up(&f, "s3kill", 3, 25000);
    uint32_t kills = 0;
    double deadline = fu_now() + tu_timeout(90);
    while (!fu_job_finished(&f.m, f.job) && !clients_done(&f)) {
        cr_assert(fu_now() < deadline, "the job did not finish in time; see %s", fu_dir);
        usleep((useconds_t)(500000 + tu_below(&rng, 700000)));
        if (kills < 3 && !fu_job_finished(&f.m, f.job)) {
            sl_master_executor_worker_t w[8];
            uint32_t n = sl_master_executor_list(f.ex, f.job, w, 8);
            if (n > 0) {
                cr_assert_eq(kill(w[tu_below(&rng, n < 8 ? n : 8)].pid, SIGKILL), 0);
                kills++;
                usleep(50 * 1000);
            }
        }
        rescale(&f, 3);
    }
    fleet_join(&f);
    cr_assert_geq(kills, 2, "only %u workers were killed mid-job: the job was too short", kills);
    fleet_down(&f);
}

/* The other job kinds on a table only in the store: static sharding (each
 * rank its own splits) and the deterministic order (batch g to rank g mod
 * 2), two workers, two epochs: every sample once per epoch. */
Test(s3_fleet, static_sharding_and_the_deterministic_order_exactly_once)
{
    fleet_t f;
    fleet_up_as(&f, "s3static", 2, 0, "static", false);
    fleet_join(&f);
    fleet_down(&f);
    fleet_up_as(&f, "s3order", 2, 0, "dynamic", true);
    fleet_join(&f);
    fleet_down(&f);
}

/* Rows a worker read and leases of another job it took, from its exit
 * summary in log. */
static void worker_rows(const char *log, uint64_t *rows, uint64_t *shared)
{
    char *text = tu_read_file(log);
    cr_assert_not_null(text, "%s", log);
    const char *r = strstr(text, "rows read ");
    const char *p = strstr(text, "shared passes: ");
    cr_assert(r != NULL && p != NULL, "%s has no summary: %s", log, text);
    *rows = strtoull(r + strlen("rows read "), NULL, 10);
    *shared = strtoull(p + strlen("shared passes: "), NULL, 10);
    free(text);
}

/* Shared passes on a table only in the store: two jobs of one plan, a
 * worker and a trainer each: every sample once per epoch for each, and
 * their workers read the table about once between them. */
Test(s3_fleet, identical_jobs_on_an_s3_table_share_their_reads, .timeout = 240)
{
    su_env();
    char b[64], table[300], spec[1024], logs[2][400];
    su_bucket("s3share", b, sizeof b);
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    upload_table(b, table);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    char *job[2];
    pid_t w[2];
    for (int k = 0; k < 2; k++) {
        snprintf(spec, sizeof spec,
                 "{\"id\":\"s3share%d\",\"source\":{\"table\":\"s3://%s/tbl\"},"
                 "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":7}}}",
                 k, b, EPOCHS);
        job[k] = fu_submit(&m, spec, 1, "dynamic", 1, 1, NULL);
    }
    for (int k = 0; k < 2; k++) {
        char wid[32];
        snprintf(logs[k], sizeof logs[k], "%s/worker-share%d.log", fu_dir, k);
        snprintf(wid, sizeof wid, "w-share%d", k);
        w[k] = fu_worker_spawn(m.ctl, job[k], wid, logs[k]);
    }
    atomic_uint *seen[2];
    fu_client_t c[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        seen[k] = calloc(EPOCHS * ROWS, sizeof *seen[k]);
        fu_client_t proto = {
            .master = m.ctl, .job = job[k], .rows = ROWS, .epochs = EPOCHS, .seen = seen[k]};
        fu_clients_start(&c[k], &th[k], 1, &proto);
    }
    uint64_t rows = 0, shared = 0;
    for (int k = 0; k < 2; k++) {
        fu_clients_join(&c[k], &th[k], 1);
        fu_assert_once_per_epoch(seen[k], ROWS, EPOCHS);
        cr_assert(fu_job_finished(&m, job[k]));
    }
    for (int k = 0; k < 2; k++) {
        cr_assert_neq(fu_wait_exit(w[k], 30), -1, "worker did not exit; see %s", logs[k]);
        uint64_t r, s;
        worker_rows(logs[k], &r, &s);
        rows += r;
        shared += s;
        free(seen[k]);
        free(job[k]);
    }
    /* as fleet_share_test allows: a split of an epoch's start read twice
     * when one job ends the epoch well after the other */
    cr_assert_gt(shared, 0, "no pass was shared");
    cr_assert_geq(rows, (uint64_t)ROWS * EPOCHS);
    cr_assert_leq(rows, (uint64_t)ROWS * EPOCHS * 5 / 4, "the workers read %llu rows",
                  (unsigned long long)rows);
    fu_master_stop(&m, SIGTERM);
}

Test(s3_fleet, kill_9_the_master_of_an_s3_job_and_restart_it)
{
    uint64_t rng = tu_seed("s3_fleet.kill_9_the_master");
    fleet_t f;
    fleet_up(&f, "s3master", 2, 20000);
    uint64_t want = ROWS / 8 + tu_below(&rng, ROWS / 4);
    double deadline = fu_now() + tu_timeout(30);
    while (fu_seen_total(f.seen, ROWS) < want) {
        cr_assert(fu_now() < deadline, "no progress: %llu of %llu samples of epoch 0",
                  (unsigned long long)fu_seen_total(f.seen, ROWS), (unsigned long long)want);
        cr_assert(!clients_done(&f), "a client ended early: %s %s", f.c[0].msg, f.c[1].msg);
        usleep(10 * 1000);
    }
    fu_master_stop(&f.m, SIGKILL);
    usleep((useconds_t)(200000 + tu_below(&rng, 600000)));
    fu_master_start(&f.m); /* replans nothing: its splits are in its journal */
    deadline = fu_now() + tu_timeout(90);
    while (!fu_job_finished(&f.m, f.job) && !clients_done(&f)) {
        cr_assert(fu_now() < deadline, "the job did not finish in time; see %s", fu_dir);
        usleep(100 * 1000);
    }
    fleet_join(&f);
    fleet_down(&f);
}

/* The job's failure as GET /jobs/{id} shows it, once it failed (NULL
 * while it has not). Caller decrefs. */
static json_t *job_failure(const fu_master_t *m, const char *job)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m->admin, path);
    const char *state = json_string_value(json_object_get(j, "state"));
    if (state == NULL || strcmp(state, "failed") != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* An object replaced after the master planned the job (its splits and
 * their files' footer checksums in its journal) and before any worker
 * read it: the same rows, stripes and file names, other values (another
 * generator seed), so only the footer tells them apart. The leases carry
 * the planned checksums: the workers refuse the new version with
 * SL_ERR_VERSION naming the file, the job fails after
 * --max-split-failures, and no sample of either version is delivered. */
Test(s3_fleet, an_object_replaced_after_the_plan_is_refused_by_the_workers)
{
    su_env();
    char b[64], table[300], spec[1024];
    su_bucket("s3pin", b, sizeof b);
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    upload_table(b, table);
    fu_master_t m = {.lease_timeout_ms = 1000};
    m.extra[0] = "--max-split-failures";
    m.extra[1] = "2";
    fu_master_start(&m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"pin\",\"source\":{\"table\":\"s3://%s/tbl\"},"
             "\"batch\":{\"size\":250,\"epochs\":1}}",
             b);
    char *job = fu_submit(&m, spec, 1, "dynamic", 1, 1, NULL);
    /* the replacement, before any worker runs */
    sl_wh_gen_spec_t gs;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", ROWS, 18, &gs, &err), SL_OK, "%s", err.msg);
    gs.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 1000;
    go.writer.no_sync = true;
    go.writer.overwrite = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(table, &gs, &go, NULL, &err), SL_OK, "%s", err.msg);
    upload_table(b, table);
    sl_master_executor_t *ex = fu_executor(&m, 1);
    cr_assert_eq(sl_master_executor_scale(ex, job, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_client_t c;
    pthread_t th;
    fu_client_t proto = {.master = m.ctl, .job = job, .world_size = 1, .rows = ROWS, .seen = seen};
    fu_clients_start(&c, &th, 1, &proto);
    json_t *j;
    double deadline = fu_now() + tu_timeout(60);
    while ((j = job_failure(&m, job)) == NULL) {
        cr_assert(!fu_job_finished(&m, job), "the job read the replaced object to its end");
        cr_assert(fu_now() < deadline, "the job did not fail in time; see %s", fu_dir);
        usleep(100 * 1000);
    }
    json_t *fl = json_object_get(j, "failure");
    const char *msg = json_string_value(json_object_get(fl, "message"));
    const char *file = json_string_value(json_object_get(fl, "file"));
    cr_assert(msg && strstr(msg, "the file was replaced after the job planned its splits"),
              "message: %s", msg ? msg : "(none)");
    cr_assert(file && strstr(file, "part-") && strstr(msg, file), "file %s, message %s",
              file ? file : "(none)", msg);
    cr_assert_str_eq(json_string_value(json_object_get(fl, "error")), sl_err_str(SL_ERR_VERSION));
    json_decref(j);
    pthread_join(th, NULL);
    cr_assert_neq(c.end, SL_OK);
    cr_assert_eq(c.samples, 0, "%llu samples delivered", (unsigned long long)c.samples);
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

/* A trainer of a job that counts its samples until the job ends (or
 * fails). */
typedef struct count {
    const char *master, *job;
    uint64_t samples;
    sl_err_t end;
} count_t;

static void *count_samples(void *arg)
{
    count_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = c->master;
    o.job_id = c->job;
    o.refresh_ms = 200;
    o.reconnect_ms = (int)(tu_timeout(30) * 1000);
    sl_trainer_t *t;
    sl_error_t err = {0};
    if ((c->end = sl_trainer_connect(&o, &t, &err)) != SL_OK) return NULL;
    sl_batch_t *b;
    while ((c->end = sl_trainer_next(t, (int)(tu_timeout(30) * 1000), &b, &err)) == SL_OK) {
        c->samples += b->batch_size;
        sl_trainer_release(t, b);
    }
    sl_trainer_close(t);
    return NULL;
}

/* A Parquet dataset's object replaced after the master planned the job:
 * the lease carries the planned footer sum (the object's ETag in it), and
 * the worker refuses the new object with SL_ERR_VERSION before reading a
 * row of it; only the other object's rows (at most its 50) are served. */
Test(s3_fleet, a_parquet_object_replaced_after_the_plan_is_refused_by_the_workers)
{
    su_env();
    char b[64], url[200], spec[1024], src[600], other[600];
    su_bucket("s3pqpin", b, sizeof b);
    const char *root = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(root, "SLUICE_SOURCE_DIR is not set (run through ctest)");
    snprintf(src, sizeof src, "%s/tests/data/parquet/duckdb-zstd.parquet", root);
    snprintf(other, sizeof other, "%s/tests/data/parquet/polars-lz4.parquet", root);
    snprintf(url, sizeof url, "s3://%s", b);
    sl_store_t *st;
    sl_error_t err = {0};
    cr_assert_eq(sl_store_open_url(url, NULL, &st, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_store_put_file(st, "pq/ds=1/part-0.parquet", src, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_store_put_file(st, "pq/ds=2/part-0.parquet", src, &err), SL_OK, "%s", err.msg);
    fu_master_t m = {.lease_timeout_ms = 1000};
    m.extra[0] = "--max-split-failures";
    m.extra[1] = "2";
    fu_master_start(&m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"pqpin\",\"source\":{\"parquet\":\"s3://%s/pq\"},"
             "\"batch\":{\"size\":10,\"epochs\":1}}",
             b);
    char *job = fu_submit(&m, spec, 1, "dynamic", 1, 1, NULL);
    /* the replacement, before any worker runs: another valid Parquet file */
    cr_assert_eq(sl_store_put_file(st, "pq/ds=2/part-0.parquet", other, &err), SL_OK, "%s",
                 err.msg);
    sl_store_destroy(st);
    sl_master_executor_t *ex = fu_executor(&m, 1);
    cr_assert_eq(sl_master_executor_scale(ex, job, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
    count_t c = {.master = m.ctl, .job = job};
    pthread_t th;
    pthread_create(&th, NULL, count_samples, &c);
    json_t *j;
    double deadline = fu_now() + tu_timeout(60);
    while ((j = job_failure(&m, job)) == NULL) {
        cr_assert(!fu_job_finished(&m, job), "the job read the replaced object to its end");
        cr_assert(fu_now() < deadline, "the job did not fail in time; see %s", fu_dir);
        usleep(100 * 1000);
    }
    json_t *fl = json_object_get(j, "failure");
    const char *msg = json_string_value(json_object_get(fl, "message"));
    cr_assert_str_eq(json_string_value(json_object_get(fl, "file")), "ds=2/part-0.parquet");
    cr_assert_str_eq(json_string_value(json_object_get(fl, "error")), sl_err_str(SL_ERR_VERSION));
    char want[300];
    snprintf(want, sizeof want,
             "s3://%s/pq/ds=2/part-0.parquet: the object was replaced after the job planned its "
             "splits",
             b);
    cr_assert(msg && strstr(msg, want), "message: %s", msg ? msg : "(none)");
    json_decref(j);
    pthread_join(th, NULL);
    cr_assert_neq(c.end, SL_OK);
    cr_assert_leq(c.samples, 50, "%llu samples: more than the unchanged object holds",
                  (unsigned long long)c.samples);
    fu_executor_destroy(ex);
    fu_master_stop(&m, SIGTERM);
    free(job);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}

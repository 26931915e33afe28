/* The autocache (docs/DESIGN.md "Autocache") on a real fleet: a master
 * with --cache-dir, workers through the local executor, trainer clients
 * counting every sample id per epoch.
 *
 *  - an expensive pipeline (long n-grams of a 100-id history) is measured
 *    in its first epoch and cached; later epochs are served from the cache
 *    files, exactly once per epoch, a worker killed (-9) in a cached epoch
 *    included;
 *  - the same pipeline with dedup groups is cached too (its files store
 *    the groups deduplicated), exactly once per epoch;
 *  - a cheap one (the criteo table as stored) is declined;
 *  - after a master restart the decision and the files are still there: a
 *    later job of the same prefix reads them at once, a corrupt file falls
 *    back to computing (counted), and a rewritten source file changes the
 *    prefix fingerprint (no stale cache read). */
#include "dpp/master/autocache/autocache.h"
#include "fleet_util.h"

TestSuite(fleet_autocache, .init = fu_setup, .fini = fu_teardown);

#define ROWS 16000u /* 2 files of 8 stripes of 1000 rows: 16 splits */

static char cache_dir[300];

static void master_up(fu_master_t *m)
{
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", fu_dir);
    m->lease_timeout_ms = 1000;
    m->extra[0] = "--cache-dir";
    m->extra[1] = cache_dir;
    fu_master_start(m);
}

/* Long n-grams of user_hist (90..110 ids), each n-gram hashing 672 to 720
 * bytes: ~80 KB hashed a row for ~110 ids out (about 0.9 KB), so that
 * computing costs several times what reading the output back does even on
 * a loaded machine. Only item_id and the n-grams are output. */
static void expensive_spec(char *spec, size_t cap, const char *id, const char *table,
                           uint32_t epochs)
{
    size_t n =
        (size_t)snprintf(spec, cap,
                         "{\"id\":\"%s\",\"source\":{\"table\":\"%s\",\"features\":[\"item_id\"]},"
                         "\"transforms\":[",
                         id, table);
    for (int k = 0; k < 8; k++)
        n += (size_t)snprintf(spec + n, cap - n,
                              "%s{\"op\":\"ngram\",\"feature\":\"user_hist\",\"n\":%d,\"salt\":%d,"
                              "\"table_size\":1000003,\"output\":\"g%d\"}",
                              k ? "," : "", 84 + 2 * (k % 4), k, k);
    snprintf(spec + n, cap - n,
             "],\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,"
             "\"seed\":5}}}",
             epochs);
}

static json_t *job_autocache(const fu_master_t *m, const char *job)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m->admin, path);
    json_t *ac = json_incref(json_object_get(j, "autocache"));
    json_decref(j);
    cr_assert_not_null(ac, "GET /jobs/%s has no autocache", job);
    return ac;
}

static const char *ac_str(json_t *ac, const char *key)
{
    const char *s = json_string_value(json_object_get(ac, key));
    return s ? s : "";
}

static long long ac_int(json_t *ac, const char *key)
{
    return (long long)json_integer_value(json_object_get(ac, key));
}

typedef struct run {
    sl_master_executor_t *ex;
    atomic_uint *seen;
    fu_client_t c[2];
    pthread_t th[2];
    uint32_t epochs;
} run_t;

static void run_start(run_t *r, fu_master_t *m, const char *job, uint32_t epochs, uint32_t workers,
                      uint32_t delay_us)
{
    r->epochs = epochs;
    r->ex = fu_executor(m, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(r->ex, job, workers, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
    r->seen = calloc((size_t)epochs * ROWS, sizeof *r->seen);
    fu_client_t proto = {.master = m->ctl,
                         .job = job,
                         .world_size = 2,
                         .rows = ROWS,
                         .epochs = epochs,
                         .seen = r->seen,
                         .delay_us = delay_us};
    fu_clients_start(r->c, r->th, 2, &proto);
}

/* Wait (bounded: seconds) until the job's figure key (of its workers'
 * heartbeats and SPLIT_READs) is at least min; r (may be NULL): its
 * clients must not end first. */
static void wait_figure_of(const fu_master_t *m, const char *job, const char *key, long long min,
                           const run_t *r, double seconds)
{
    double deadline = fu_now() + tu_timeout(seconds);
    for (;;) {
        json_t *ac = job_autocache(m, job);
        long long got = ac_int(ac, key);
        json_decref(ac);
        if (got >= min) return;
        if (r != NULL)
            cr_assert(!atomic_load(&r->c[0].finished) && !atomic_load(&r->c[1].finished),
                      "the job ended before %s reached %lld: %s %s", key, min, r->c[0].msg,
                      r->c[1].msg);
        cr_assert(fu_now() < deadline, "job %s: %s is %lld, want at least %lld; see %s", job, key,
                  got, min, fu_dir);
        usleep(50 * 1000);
    }
}

static void wait_figure(const fu_master_t *m, const char *job, const char *key, long long min)
{
    wait_figure_of(m, job, key, min, NULL, 10);
}

/* Wait until the job's workers have served samples from the cache. */
static void wait_cached(const fu_master_t *m, const char *job, const run_t *r)
{
    wait_figure_of(m, job, "cache_samples", 1, r, 60);
}

/* The clients' end: every sample of each epoch exactly once; then the
 * workers report their last figures (wanted: key >= min, key NULL: none)
 * before they are stopped. */
static void run_end_when(run_t *r, fu_master_t *m, const char *job, const char *key, long long min);

static void run_end(run_t *r, fu_master_t *m, const char *job)
{
    run_end_when(r, m, job, NULL, 0);
}

static void run_end_when(run_t *r, fu_master_t *m, const char *job, const char *key, long long min)
{
    fu_clients_join(r->c, r->th, 2);
    cr_assert_eq(r->c[0].samples + r->c[1].samples, (uint64_t)r->epochs * ROWS,
                 "delivered %llu + %llu samples (%s %s)", (unsigned long long)r->c[0].samples,
                 (unsigned long long)r->c[1].samples, r->c[0].msg, r->c[1].msg);
    fu_assert_once_per_epoch(r->seen, ROWS, r->epochs);
    cr_assert(fu_job_finished(m, job));
    if (key != NULL) wait_figure(m, job, key, min);
    fu_executor_destroy(r->ex);
    free(r->seen);
}

/* A fresh sessions table, the master up (with --cache-dir), and the
 * expensive job id of epochs epochs (2 ranks, workers workers) submitted;
 * the table's path into table. @return the job id (malloc'd). */
static char *heavy_job_up(fu_master_t *m, const char *id, uint32_t epochs, uint32_t workers,
                          char *table, size_t cap)
{
    char spec[4096];
    fu_gen_preset("sessions", ROWS, 1000, 2, table, cap);
    master_up(m);
    expensive_spec(spec, sizeof spec, id, table, epochs);
    return fu_submit(m, spec, 2, "dynamic", workers, workers, NULL);
}

Test(fleet_autocache, expensive_pipeline_is_cached_exactly_once_with_a_worker_killed)
{
    fu_master_t m = {0};
    char table[300];
    char *job = heavy_job_up(&m, "heavy", 4, 2, table, sizeof table);
    run_t r = {0};
    run_start(&r, &m, job, 4, 2, 3000);
    wait_cached(&m, job, &r);
    /* kill -9 a worker in a cached epoch; the executor replaces it */
    sl_master_executor_worker_t w[8];
    uint32_t n = sl_master_executor_list(r.ex, job, w, 8);
    cr_assert_gt(n, 0);
    cr_assert_eq(kill(w[0].pid, SIGKILL), 0);
    usleep(50 * 1000);
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(r.ex, job, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
    run_end_when(&r, &m, job, "cache_samples", 1);
    json_t *ac = job_autocache(&m, job);
    double compute0 = json_real_value(json_object_get(ac, "compute_us_per_sample"));
    double cache0 = json_real_value(json_object_get(ac, "cache_us_per_sample_estimated"));
    cr_assert_str_eq(ac_str(ac, "state"), "chosen", "compute %.3f us, cache %.3f us a sample",
                     compute0, cache0);
    double compute = json_real_value(json_object_get(ac, "compute_us_per_sample"));
    double cache = json_real_value(json_object_get(ac, "cache_us_per_sample_estimated"));
    cr_assert(cache * SL_MASTER_AUTOCACHE_MARGIN <= compute,
              "chosen with compute %.3f us, cache %.3f us", compute, cache);
    cr_assert_gt(ac_int(ac, "cache_samples"), 0);
    cr_assert_eq(ac_int(ac, "cache_fallbacks"), 0);
    cr_assert_eq(strlen(ac_str(ac, "prefix_fingerprint")), 16);
    json_decref(ac);
    char *metrics = NULL;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &metrics), 200);
    cr_assert_not_null(strstr(metrics, "sluice_master_autocache_state{job=\"heavy\"} 2"),
                       "metrics: no chosen state for the job");
    free(metrics);
    free(job);
    fu_master_stop(&m, SIGTERM);
}

Test(fleet_autocache, cheap_pipeline_is_declined)
{
    fu_master_t m = {0};
    char table[300], spec[1024];
    fu_gen(ROWS, 1000, 2, table, sizeof table);
    master_up(&m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"cheap\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":3}}",
             table);
    char *job = fu_submit(&m, spec, 2, "dynamic", 1, 1, NULL);
    run_t r = {0};
    run_start(&r, &m, job, 3, 1, 0);
    run_end(&r, &m, job);
    json_t *ac = job_autocache(&m, job);
    const char *state = ac_str(ac, "state");
    double compute = json_real_value(json_object_get(ac, "compute_us_per_sample"));
    double cache = json_real_value(json_object_get(ac, "cache_us_per_sample_estimated"));
    cr_assert_str_eq(state, "declined", "%s with compute %.3f us, cache %.3f us a sample", state,
                     compute, cache);
    cr_assert(cache * SL_MASTER_AUTOCACHE_MARGIN > compute);
    cr_assert_eq(ac_int(ac, "cache_samples"), 0);
    json_decref(ac);
    free(job);
    fu_master_stop(&m, SIGTERM);
}

/* Flip a byte in the middle of path. */
static void corrupt(const char *path)
{
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "%s", path);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    off_t at = st.st_size / 2;
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

Test(fleet_autocache, restart_corrupt_file_and_changed_source)
{
    fu_master_t m = {0};
    char table[300], spec[4096];
    char *job = heavy_job_up(&m, "first", 3, 1, table, sizeof table);
    run_t r = {0};
    run_start(&r, &m, job, 3, 1, 0);
    run_end_when(&r, &m, job, "cache_files_written", 1);
    json_t *ac = job_autocache(&m, job);
    cr_assert_str_eq(ac_str(ac, "state"), "chosen");
    char fp[20];
    snprintf(fp, sizeof fp, "%s", ac_str(ac, "prefix_fingerprint"));
    json_decref(ac);
    free(job);

    /* a crash: the decision and the files stay */
    fu_master_stop(&m, SIGKILL);
    fu_master_start(&m);
    char split0[400];
    snprintf(split0, sizeof split0, "%s/%s/split-0.slc", cache_dir, fp);
    cr_assert_eq(access(split0, F_OK), 0, "no cache file %s", split0);
    corrupt(split0);

    expensive_spec(spec, sizeof spec, "second", table, 2);
    job = fu_submit(&m, spec, 2, "dynamic", 1, 1, NULL);
    ac = job_autocache(&m, job);
    cr_assert_str_eq(ac_str(ac, "state"), "chosen", "the stored decision was not taken over");
    cr_assert_str_eq(ac_str(ac, "prefix_fingerprint"), fp);
    json_decref(ac);
    r = (run_t){0};
    run_start(&r, &m, job, 2, 1, 0);
    run_end_when(&r, &m, job, "cache_fallbacks", 1); /* the corrupt file noticed */
    wait_figure(&m, job, "cache_samples", 1);
    free(job);

    /* a rewritten source file: another prefix, measured anew */
    sl_wh_gen_spec_t gs;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", ROWS, 99, &gs, &err), SL_OK, "%s", err.msg);
    gs.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 1000;
    go.writer.no_sync = true;
    go.writer.overwrite = true;
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(table, &gs, &go, NULL, &err), SL_OK, "%s", err.msg);
    expensive_spec(spec, sizeof spec, "third", table, 2);
    job = fu_submit(&m, spec, 2, "dynamic", 1, 1, NULL);
    ac = job_autocache(&m, job);
    cr_assert_str_neq(ac_str(ac, "prefix_fingerprint"), fp);
    cr_assert_str_eq(ac_str(ac, "state"), "measuring");
    json_decref(ac);
    r = (run_t){0};
    run_start(&r, &m, job, 2, 1, 0);
    run_end(&r, &m, job);
    free(job);
    fu_master_stop(&m, SIGTERM);
}

/* kill -9 the master in a cached epoch: after the restart (the same
 * --state and --cache-dir) the decision is still there, the workers go on
 * reading the cache, and every sample of every epoch comes exactly once. */
Test(fleet_autocache, master_killed_in_a_cached_epoch_and_restarted)
{
    fu_master_t m = {0};
    char table[300];
    char *job = heavy_job_up(&m, "restarted", 4, 2, table, sizeof table);
    run_t r = {0};
    run_start(&r, &m, job, 4, 2, 5000);
    /* well into epoch 1, which reads the cache */
    double deadline = fu_now() + tu_timeout(60);
    while (fu_seen_total(r.seen + ROWS, ROWS) < ROWS / 4) {
        cr_assert(fu_now() < deadline, "epoch 1 made no progress; see %s", fu_dir);
        cr_assert(!atomic_load(&r.c[0].finished) && !atomic_load(&r.c[1].finished),
                  "a client ended early: %s %s", r.c[0].msg, r.c[1].msg);
        usleep(10 * 1000);
    }
    wait_cached(&m, job, &r);
    json_t *ac = job_autocache(&m, job);
    cr_assert_str_eq(ac_str(ac, "state"), "chosen");
    long long before = ac_int(ac, "cache_samples");
    json_decref(ac);
    fu_master_stop(&m, SIGKILL);
    cr_assert_lt(fu_seen_total(r.seen + 3 * (size_t)ROWS, ROWS), ROWS, "the job ended first");
    usleep(300 * 1000);
    fu_master_start(&m);
    ac = job_autocache(&m, job);
    cr_assert_str_eq(ac_str(ac, "state"), "chosen", "the decision did not survive the restart");
    json_decref(ac);
    run_end_when(&r, &m, job, "cache_samples", before + 1);
    free(job);
    fu_master_stop(&m, SIGTERM);
}

/* A job with dedup groups (issue 14): the n-grams of user_hist run on the
 * group's unique rows and stay in the group; its cache files store the
 * groups as IKJTs. Cached, and served exactly once per epoch. */
Test(fleet_autocache, a_job_with_dedup_groups_is_cached_exactly_once)
{
    fu_master_t m = {0};
    char table[300], spec[4096];
    fu_gen_preset("sessions", ROWS, 1000, 2, table, sizeof table);
    master_up(&m);
    expensive_spec(spec, sizeof spec, "grouped", table, 3);
    size_t n = strlen(spec);
    /* the group in the batch section (the spec ends with three braces) */
    snprintf(spec + n - 3, sizeof spec - n + 3,
             "},\"dedup_groups\":{\"user\":[\"user_id\",\"user_hist\"]}}}");
    char *job = fu_submit(&m, spec, 2, "dynamic", 2, 2, NULL);
    run_t r = {0};
    run_start(&r, &m, job, 3, 2, 3000);
    wait_cached(&m, job, &r);
    run_end_when(&r, &m, job, "cache_samples", 1);
    json_t *ac = job_autocache(&m, job);
    cr_assert_str_eq(ac_str(ac, "state"), "chosen");
    cr_assert_eq(strlen(ac_str(ac, "prefix_fingerprint")), 16);
    cr_assert_gt(ac_int(ac, "cache_samples"), 0);
    cr_assert_eq(ac_int(ac, "cache_fallbacks"), 0);
    /* the files hold the group */
    char path[700];
    snprintf(path, sizeof path, "%s/%s/split-0.slc", cache_dir, ac_str(ac, "prefix_fingerprint"));
    json_decref(ac);
    sl_wh_reader_t *rd = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &rd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_reader_num_groups(rd), 1);
    cr_assert_str_eq(sl_wh_reader_group(rd, 0)->name, "user");
    sl_wh_reader_close(rd);
    free(job);
    fu_master_stop(&m, SIGTERM);
}

/* Every split of the first epoch is written while the job is measured,
 * those leased before the decision too (their directory used to be made
 * only when the decision was stored: their files were never written and
 * the second epoch computed them again): the second epoch is served whole. */
Test(fleet_autocache, the_second_epoch_is_served_whole)
{
    fu_master_t m = {0};
    char table[300];
    char *job = heavy_job_up(&m, "whole", 2, 1, table, sizeof table);
    run_t r = {0};
    run_start(&r, &m, job, 2, 1, 0);
    run_end_when(&r, &m, job, "cache_samples", ROWS);
    json_t *ac = job_autocache(&m, job);
    cr_assert_str_eq(ac_str(ac, "state"), "chosen");
    cr_assert_eq(ac_int(ac, "cache_samples"), ROWS);
    cr_assert_eq(ac_int(ac, "cache_files_written"), ROWS / 1000);
    cr_assert_eq(ac_int(ac, "cache_fallbacks"), 0);
    json_decref(ac);
    free(job);
    fu_master_stop(&m, SIGTERM);
}

/* The autocache on the workers' own disks (docs/STORAGE.md, "The autocache
 * and object stores"): a `sluice master` with --cache-dir (its decisions
 * only), `sluice worker --master --cache-dir` processes started here (each
 * with its admin endpoint, whose /metrics counts its store's GETs) and two
 * trainer clients, on a table only in the s3proxy of the ctest fixture s3
 * (s3_util.h). An expensive pipeline is measured in epoch 1, chosen, and
 * every split's file written on the disk of the worker that computed it;
 * epoch 2 reads each split from the disk of the worker that holds it:
 * not one GET to the store. A worker killed between the epochs takes its
 * files with it: its splits are read from the store again by the others
 * (GETs again), never from a file nobody has (no fallback), and every
 * sample is delivered exactly once per epoch. */
#define _XOPEN_SOURCE 700
#include <ftw.h>

#include "fleet_util.h"
#include "s3_util.h"
#include "store/store.h"

#define ROWS 16000u /* 2 files of 8 stripes of 1000 rows: 16 splits */
#define EPOCHS 2u
#define WORKERS_MAX 4

/* Upload the table at dir to s3://bucket/tbl and delete it from disk. */
static void upload_table(const char *bucket, const char *dir)
{
    su_upload_tree(dir, bucket, "tbl");
    cr_assert_eq(nftw(dir, fu_rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* Long n-grams of user_hist (as fleet_autocache_test.c): computing costs
 * many times what reading the output back does, so the cache is chosen. */
static void expensive_spec(char *spec, size_t cap, const char *id, const char *table)
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
             EPOCHS);
}

typedef struct wk {
    pid_t pid;
    char admin[64], id[64];
} wk_t;

typedef struct fleet {
    fu_master_t m;
    char *job;
    char cache[300]; /* the workers' --cache-dir (one machine: shared, a folder each) */
    wk_t w[WORKERS_MAX];
    uint32_t nw;
    atomic_uint *seen;
    fu_client_t c[2];
    pthread_t th[2];
} fleet_t;

static void worker_up(fleet_t *f, const char *name)
{
    cr_assert_lt(f->nw, WORKERS_MAX);
    wk_t *w = &f->w[f->nw++];
    snprintf(w->admin, sizeof w->admin, "127.0.0.1:%u", fu_free_port());
    snprintf(w->id, sizeof w->id, "%s", name);
    char log[400];
    snprintf(log, sizeof log, "%s/%s.log", fu_dir, name);
    const char *argv[] = {fu_binary(), "worker",      "--master", f->m.ctl,   "--job-id",
                          f->job,      "--worker-id", w->id,      "--listen", "127.0.0.1:0",
                          "--threads", "1",           "--admin",  w->admin,   "--cache-dir",
                          f->cache,    NULL};
    w->pid = fu_spawn(argv, -1, log);
}

/* The sum of a worker's sluice_store_request_seconds_count{op="get"} and
 * its sluice_store_inflight_bytes (its /metrics; -1: no answer). */
static long long worker_gets(const wk_t *w, long long *inflight)
{
    char *b;
    int st = fu_http(w->admin, "GET", "/metrics", NULL, NULL, &b);
    long long gets = st == 200 ? 0 : -1;
    if (inflight) *inflight = 0;
    for (char *line = strtok(b, "\n"); st == 200 && line != NULL; line = strtok(NULL, "\n")) {
        const char *sp = strrchr(line, ' ');
        if (sp == NULL) continue;
        if (strncmp(line, "sluice_store_request_seconds_count{", 35) == 0 &&
            strstr(line, "op=\"get\"") != NULL)
            gets += atoll(sp + 1);
        else if (inflight && strncmp(line, "sluice_store_inflight_bytes", 27) == 0)
            *inflight += atoll(sp + 1);
    }
    free(b);
    return gets;
}

/* The GETs a worker's summary says its store sent (the worker must have
 * exited: retired by the master once the job finished). */
static long long final_gets(const fleet_t *f, const wk_t *w)
{
    cr_assert_neq(fu_wait_exit(w->pid, 30), -1, "worker %s did not exit after the job", w->id);
    char path[400], line[1024];
    snprintf(path, sizeof path, "%s/%s.log", fu_dir, w->id);
    FILE *fp = fopen(path, "r");
    cr_assert_not_null(fp, "%s", path);
    long long gets = -1;
    while (fgets(line, sizeof line, fp)) {
        const char *p = strstr(line, " requests (");
        if (strncmp(line, "  store s3://", 13) == 0 && p) gets = atoll(p + 11);
    }
    fclose(fp);
    (void)f;
    cr_assert_geq(gets, 0, "no store line in the summary of %s", path);
    return gets;
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

static long long ac_int(const fleet_t *f, const char *key)
{
    json_t *ac = job_autocache(&f->m, f->job);
    long long v = (long long)json_integer_value(json_object_get(ac, key));
    json_decref(ac);
    return v;
}

static long long job_epoch(const fleet_t *f)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", f->job);
    json_t *j = fu_get_json(f->m.admin, path);
    long long e = (long long)json_integer_value(json_object_get(j, "epoch"));
    json_decref(j);
    return e;
}

static void fleet_up(fleet_t *f, const char *id, uint32_t delay_us)
{
    su_env();
    char b[64], table[300], url[200], spec[4096], mcache[300];
    su_bucket(id, b, sizeof b);
    fu_gen_preset("sessions", ROWS, 1000, 2, table, sizeof table);
    upload_table(b, table);
    snprintf(mcache, sizeof mcache, "%s/master-cache", fu_dir);
    snprintf(f->cache, sizeof f->cache, "%s/worker-cache", fu_dir);
    /* a split on another worker's disk waits for it for as long as the
     * test runs: every epoch-2 read is the holder's own */
    f->m = (fu_master_t){.lease_timeout_ms = 4000,
                         .extra = {"--cache-dir", mcache, "--cache-wait-ms", "600000", NULL}};
    fu_master_start(&f->m);
    snprintf(url, sizeof url, "s3://%s/tbl", b);
    expensive_spec(spec, sizeof spec, id, url);
    f->job = fu_submit(&f->m, spec, 2, "dynamic", 2, 2, NULL);
    worker_up(f, "wa");
    worker_up(f, "wb");
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

static void wait_epoch(const fleet_t *f, long long epoch)
{
    double deadline = fu_now() + tu_timeout(90);
    while (job_epoch(f) < epoch) {
        cr_assert(!atomic_load(&f->c[0].finished) && !atomic_load(&f->c[1].finished),
                  "a client ended early: %s %s", f->c[0].msg, f->c[1].msg);
        cr_assert(fu_now() < deadline, "epoch %lld did not start in time; see %s", epoch, fu_dir);
        usleep(5 * 1000);
    }
}

static void fleet_join(fleet_t *f)
{
    fu_clients_join(f->c, f->th, 2);
    cr_assert_eq(f->c[0].samples + f->c[1].samples, EPOCHS * ROWS, "delivered %llu + %llu: %s %s",
                 (unsigned long long)f->c[0].samples, (unsigned long long)f->c[1].samples,
                 f->c[0].msg, f->c[1].msg);
    fu_assert_once_per_epoch(f->seen, ROWS, EPOCHS);
    cr_assert(fu_job_finished(&f->m, f->job));
}

static void fleet_down(fleet_t *f)
{
    for (uint32_t i = 0; i < f->nw; i++)
        if (f->w[i].pid > 0) fu_kill9(f->w[i].pid);
    fu_master_stop(&f->m, SIGTERM);
    free(f->seen);
    free(f->job);
}

/* The GETs of the live workers, once none has a request in flight. */
static long long settled_gets(const fleet_t *f)
{
    double deadline = fu_now() + tu_timeout(20);
    for (;;) {
        long long total = 0, inflight = 0, in;
        for (uint32_t i = 0; i < f->nw; i++) {
            if (f->w[i].pid <= 0) continue;
            long long g = worker_gets(&f->w[i], &in);
            /* a worker just started may not listen yet */
            cr_assert(g >= 0 || fu_now() < deadline, "worker %s: no /metrics", f->w[i].id);
            if (g < 0) in = 1;
            total += g;
            inflight += in;
        }
        if (inflight == 0) return total;
        cr_assert(fu_now() < deadline, "store requests still in flight");
        usleep(10 * 1000);
    }
}

TestSuite(s3_autocache, .init = fu_setup, .fini = fu_teardown);

Test(s3_autocache, epoch_two_reads_the_workers_disks_without_a_get)
{
    fleet_t f = {0};
    fleet_up(&f, "s3ac", 0);
    wait_epoch(&f, 1);
    long long after_epoch1 = settled_gets(&f);
    cr_assert_gt(after_epoch1, 0, "epoch 1 read nothing from the store");
    /* every split's file written in epoch 1, each on one live worker */
    cr_assert_eq(ac_int(&f, "cache_worker_files"), 16);
    fleet_join(&f);
    json_t *ac = job_autocache(&f.m, f.job);
    const char *state = json_string_value(json_object_get(ac, "state"));
    char *dump = json_dumps(ac, JSON_COMPACT);
    cr_assert_str_eq(state ? state : "", "chosen", "%s", dump);
    free(dump);
    cr_assert_str_eq(json_string_value(json_object_get(ac, "cache_files_on")), "workers");
    json_decref(ac);
    /* the figures of the last SPLIT_READs (heartbeats bring them) */
    double deadline = fu_now() + tu_timeout(10);
    while (ac_int(&f, "cache_samples") < ROWS) {
        cr_assert(fu_now() < deadline, "cache_samples %lld, want %u", ac_int(&f, "cache_samples"),
                  ROWS);
        usleep(50 * 1000);
    }
    cr_assert_eq(ac_int(&f, "cache_samples"), ROWS, "epoch 2 served whole from the workers' files");
    cr_assert_eq(ac_int(&f, "cache_fallbacks"), 0);
    cr_assert_eq(ac_int(&f, "cache_files_written"), 16);
    long long end = final_gets(&f, &f.w[0]) + final_gets(&f, &f.w[1]);
    f.w[0].pid = f.w[1].pid = 0;
    cr_assert_eq(end, after_epoch1, "epoch 2 sent %lld GETs to the store", end - after_epoch1);
    fleet_down(&f);
}

Test(s3_autocache, a_worker_killed_between_epochs_takes_its_files_with_it)
{
    fleet_t f = {0};
    /* slow trainers: the kill lands before epoch 2 is read */
    fleet_up(&f, "s3ackill", 60000);
    wait_epoch(&f, 1);
    settled_gets(&f);
    long long before = worker_gets(&f.w[1], NULL);
    fu_kill9(f.w[0].pid);
    f.w[0].pid = 0;
    worker_up(&f, "wc"); /* a new process, an empty disk */
    fleet_join(&f);
    json_t *ac = job_autocache(&f.m, f.job);
    cr_assert_str_eq(json_string_value(json_object_get(ac, "state")), "chosen");
    cr_assert_eq(json_integer_value(json_object_get(ac, "cache_fallbacks")), 0,
                 "a READ lease went to a worker without the file");
    json_decref(ac);
    long long after = final_gets(&f, &f.w[1]) + final_gets(&f, &f.w[2]);
    f.w[1].pid = f.w[2].pid = 0;
    /* wa's splits came from the store again, to wb or wc: their GETs are
     * more than wb's of epoch 1 */
    cr_assert_gt(after, before, "no split was read from the store again (%lld GETs)", after);
    fleet_down(&f);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}

/* A hung object bounds every command that reads an s3:// table or Parquet
 * dataset (docs/STORAGE.md, "Retries and errors"): the s3proxy of the
 * ctest fixture s3 behind the fault-injecting proxy of s3_util.h, which
 * reads every GET of one object and never answers it. With
 * --store-timeout-ms 300 --store-max-attempts 2, `sluice table inspect`,
 * `table verify` and `table cat` exit 1, a `sluice master`'s submit of a
 * table job and of a Parquet job is refused, and a standalone `sluice
 * worker` of a Parquet dataset exits 1, each within seconds (the
 * defaults would hold them five minutes), naming the object and curl's
 * timeout, the object tried exactly twice. The same commands through the
 * same proxy with nothing hung succeed, so what fails is the hang. The
 * worker of an s3:// table under a master is s3_faults_fleet_test's. */
#define _XOPEN_SOURCE 700
#include <ftw.h>

#include "fleet_util.h"
#include "s3_util.h"
#include "store/store.h"

TestSuite(s3_hang, .init = fu_setup, .fini = fu_teardown, .timeout = 120);

#define TIMEOUT_MS "300"
#define ATTEMPTS 2
#define ATTEMPTS_ARG "2"                /* ATTEMPTS, as --store-max-attempts takes it */
#define TIMED_OUT "Timeout was reached" /* curl's message for CURLE_OPERATION_TIMEDOUT */
#define BOUND_S 10.0                    /* two 300 ms attempts, a backoff, a process start */

/* ---- the store's objects ---- */

/* Upload every file under dir to s3://bucket/prefix/, straight to the
 * server (not through the proxy). */
static void upload(const char *bucket, const char *prefix, const char *dir)
{
    setenv("AWS_ENDPOINT_URL", su.endpoint, 1);
    su_upload_tree(dir, bucket, prefix);
}

/* A table of two files, ds=2026-01-01/part-00000.slc and part-00001.slc,
 * at s3://bucket/tbl. */
static void table_up(const char *bucket)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tbl", fu_dir);
    const char *argv[] = {fu_binary(), "table",   "gen", "--preset", "sessions", "--rows",
                          "3000",      "--files", "2",   "--table",  dir,        NULL};
    char *out, *err;
    cr_assert_eq(tu_run(".", (char *const *)argv, 60, &out, &err), 0, "table gen: %s", err);
    free(out);
    free(err);
    upload(bucket, "tbl", dir);
}

/* A Parquet dataset of two files, p=1/part-1.parquet and p=2/part-2.parquet
 * (tests/data/parquet/duckdb-zstd.parquet), at s3://bucket/pq. The names
 * differ below their folders: a request line has '=' escaped. */
static void parquet_up(const char *bucket)
{
    const char *root = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(root, "SLUICE_SOURCE_DIR is not set (run through ctest)");
    char cmd[1600];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/pq/p=1' '%s/pq/p=2' && cp '%s/tests/data/parquet/duckdb-zstd.parquet' "
             "'%s/pq/p=1/part-1.parquet' && cp '%s/pq/p=1/part-1.parquet' "
             "'%s/pq/p=2/part-2.parquet'",
             fu_dir, fu_dir, root, fu_dir, fu_dir, fu_dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/pq", fu_dir);
    upload(bucket, "pq", dir);
}

/* ---- the proxy: every GET naming hang_key hangs ---- */

static const char *hang_key; /* NULL: nothing hangs */

static int hang_plan(su_proxy_t *p, const char *head, size_t len)
{
    (void)p;
    const char *eol = memmem(head, len, "\r\n", 2);
    if (hang_key == NULL || eol == NULL || strncmp(head, "GET ", 4) != 0) return 0;
    return memmem(head, (size_t)(eol - head), hang_key, strlen(hang_key)) != NULL ? 5 : 0;
}

static su_proxy_t proxy;

/* The proxy in front of the server; the commands started from here on
 * (and a master started after) talk to it. */
static void proxy_up(void)
{
    su_proxy_start(&proxy, su.port);
    proxy.plan = hang_plan;
    char ep[64];
    snprintf(ep, sizeof ep, "http://localhost:%u", proxy.port);
    setenv("AWS_ENDPOINT_URL", ep, 1);
}

/* The proxy's hangs since the last call. */
static int hangs_since(void)
{
    static int before;
    pthread_mutex_lock(&proxy.mu);
    int n = proxy.n_hangs - before;
    before = proxy.n_hangs;
    pthread_mutex_unlock(&proxy.mu);
    return n;
}

/* Run `sluice table VERB URL --store-timeout-ms 300 --store-max-attempts 2`:
 * its exit code, stdout and stderr; *took its seconds. */
static int table_cmd(const char *verb, const char *url, char **out, char **err, double *took)
{
    const char *argv[] = {
        fu_binary(),  "table", verb, url, "--store-timeout-ms", TIMEOUT_MS, "--store-max-attempts",
        ATTEMPTS_ARG, NULL};
    double t0 = fu_now();
    int rc = tu_run(".", (char *const *)argv, 60, out, err);
    *took = fu_now() - t0;
    return rc;
}

Test(s3_hang, table_inspect_verify_and_cat_fail_naming_the_hung_object_within_the_timeout)
{
    su_env();
    char b[64], url[200];
    su_bucket("hangtbl", b, sizeof b);
    table_up(b);
    snprintf(url, sizeof url, "s3://%s/tbl", b);
    proxy_up();
    const char *verbs[] = {"inspect", "verify", "cat"};
    for (int i = 0; i < 3; i++) {
        /* nothing hung: each reads the table through the proxy */
        hang_key = NULL;
        char *out, *err;
        double took;
        int rc = table_cmd(verbs[i], url, &out, &err, &took);
        cr_assert_eq(rc, 0, "table %s with nothing hung: exit %d: %s", verbs[i], rc, err);
        cr_assert_eq(hangs_since(), 0);
        free(out);
        free(err);

        hang_key = "part-00001.slc";
        rc = table_cmd(verbs[i], url, &out, &err, &took);
        fprintf(stderr, "s3_hang: table %s with part-00001.slc hung: exit %d in %.2f s\n", verbs[i],
                rc, took);
        cr_assert_eq(rc, 1, "table %s: exit %d, want 1; stdout %s stderr %s", verbs[i], rc, out,
                     err);
        cr_assert_lt(took, tu_timeout(BOUND_S), "table %s took %.1f s", verbs[i], took);
        /* verify reports it as a problem of the file on stdout, the others fail on stderr */
        const char *said = strcmp(verbs[i], "verify") == 0 ? out : err;
        cr_assert(strstr(said, "part-00001.slc") && strstr(said, TIMED_OUT) &&
                      strstr(said, "after 2 attempts"),
                  "table %s does not name the object, the timeout and the attempts:\n%s", verbs[i],
                  said);
        /* the file's opening reads its head and its tail at once: each tried twice */
        int hangs = hangs_since();
        cr_assert_eq(hangs, 2 * ATTEMPTS, "table %s: %d hangs, not two requests tried twice",
                     verbs[i], hangs);
        free(out);
        free(err);
    }
    su_proxy_stop(&proxy);
}

/* POST /jobs spec to m: its status; *body the answer; *took seconds. */
static int submit(const fu_master_t *m, const char *spec, char **body, double *took)
{
    char text[1200];
    snprintf(text, sizeof text,
             "{\"spec\":%s,\"ranks\":1,\"sharding\":\"dynamic\",\"min_workers\":1,"
             "\"max_workers\":1}",
             spec);
    double t0 = fu_now();
    int st = fu_http(m->admin, "POST", "/jobs", FU_TOKEN, text, body);
    *took = fu_now() - t0;
    return st;
}

Test(s3_hang, a_master_refuses_a_job_whose_table_or_parquet_object_hangs_within_the_timeout)
{
    su_env();
    char b[64];
    su_bucket("hangmaster", b, sizeof b);
    table_up(b);
    parquet_up(b);
    proxy_up();
    fu_master_t m = {0};
    m.extra[0] = "--store-timeout-ms";
    m.extra[1] = TIMEOUT_MS;
    m.extra[2] = "--store-max-attempts";
    m.extra[3] = ATTEMPTS_ARG;
    fu_master_start(&m);
    const struct {
        const char *source, *hung, *id;
        int requests; /* the object's reads the planning makes at once */
    } cases[] = {{"\"table\":\"s3://%s/tbl\"", "part-00001.slc", "hang-table", 2},
                 {"\"parquet\":\"s3://%s/pq\"", "part-2.parquet", "hang-parquet", 1}};
    for (int i = 0; i < 2; i++) {
        char source[300], spec[600];
        snprintf(source, sizeof source, cases[i].source, b);
        /* nothing hung: planned and taken */
        hang_key = NULL;
        snprintf(spec, sizeof spec,
                 "{\"id\":\"%s-ok\",\"source\":{%s},\"batch\":{\"size\":10,\"epochs\":1}}",
                 cases[i].id, source);
        char *body = NULL;
        double took;
        int st = submit(&m, spec, &body, &took);
        cr_assert(st == 200 || st == 201, "%s with nothing hung: %d %s", cases[i].id, st, body);
        cr_assert_eq(hangs_since(), 0);
        free(body);
        body = NULL;

        hang_key = cases[i].hung;
        snprintf(spec, sizeof spec,
                 "{\"id\":\"%s\",\"source\":{%s},\"batch\":{\"size\":10,\"epochs\":1}}",
                 cases[i].id, source);
        st = submit(&m, spec, &body, &took);
        fprintf(stderr, "s3_hang: submit of %s with %s hung: HTTP %d in %.2f s\n", cases[i].id,
                cases[i].hung, st, took);
        cr_assert_eq(st, 400, "%s: %d %s", cases[i].id, st, body);
        cr_assert_lt(took, tu_timeout(BOUND_S), "%s: the submit took %.1f s", cases[i].id, took);
        cr_assert(strstr(body, cases[i].hung) && strstr(body, TIMED_OUT) &&
                      strstr(body, "after 2 attempts"),
                  "%s: the answer does not name the object, the timeout and the attempts: %s",
                  cases[i].id, body);
        /* a table file's head and tail, a Parquet file's footer: each tried twice */
        int hangs = hangs_since();
        cr_assert_eq(hangs, cases[i].requests * ATTEMPTS,
                     "%s: %d hangs, not %d requests tried twice", cases[i].id, hangs,
                     cases[i].requests);
        free(body);
    }
    fu_master_stop(&m, SIGTERM);
    su_proxy_stop(&proxy);
}

/* A standalone worker of the Parquet dataset: exit code, its output; *took. */
static int parquet_worker(const char *spec_path, char **out, char **err, double *took)
{
    const char *argv[] = {fu_binary(),
                          "worker",
                          "--job",
                          spec_path,
                          "--listen",
                          "127.0.0.1:0",
                          "--exit-when-done",
                          "--store-timeout-ms",
                          TIMEOUT_MS,
                          "--store-max-attempts",
                          ATTEMPTS_ARG,
                          NULL};
    double t0 = fu_now();
    int rc = tu_run(".", (char *const *)argv, 60, out, err);
    *took = fu_now() - t0;
    return rc;
}

Test(s3_hang, a_worker_of_a_parquet_dataset_whose_objects_hang_fails_within_the_timeout)
{
    su_env();
    char b[64], spec[600], spec_path[400];
    su_bucket("hangworker", b, sizeof b);
    parquet_up(b);
    proxy_up();
    snprintf(spec_path, sizeof spec_path, "%s/job.json", fu_dir);
    snprintf(spec, sizeof spec,
             "{\"id\":\"hang-worker\",\"source\":{\"parquet\":\"s3://%s/pq\"},"
             "\"batch\":{\"size\":10,\"epochs\":1}}",
             b);
    fu_write(spec_path, spec);
    /* every file's footer hangs: no file gives the dataset its columns */
    hang_key = ".parquet";
    char *out, *err;
    double took;
    int rc = parquet_worker(spec_path, &out, &err, &took);
    fprintf(stderr, "s3_hang: worker with every object hung: exit %d in %.2f s\n", rc, took);
    cr_assert_eq(rc, 1, "worker: exit %d, want 1; stdout %s stderr %s", rc, out, err);
    cr_assert_lt(took, tu_timeout(2 * BOUND_S), "the worker took %.1f s", took);
    cr_assert(strstr(err, "p=1/part-1.parquet") && strstr(err, TIMED_OUT) &&
                  strstr(err, "after 2 attempts"),
              "the worker does not name the first object, the timeout and the attempts:\n%s", err);
    /* each file's footer read, tried twice */
    cr_assert_eq(hangs_since(), 2 * ATTEMPTS);
    free(out);
    free(err);
    su_proxy_stop(&proxy);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}

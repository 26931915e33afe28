/* The master's admin endpoint (src/dpp/master/process/admin.c, docs/ADMIN.md) on a
 * master in this process: each route's answer, the bearer token on the
 * mutating ones (401 without or with a wrong one, 403 when none is
 * configured), malformed and oversized bodies, unknown jobs, and `sluice
 * submit` (the real binary) against it. */
#include "fleet_util.h"

#include "dpp/master/process/admin.h"
#include "dpp/worker/admin/admin.h"

TestSuite(fleet_admin, .init = fu_setup, .fini = fu_teardown);

typedef struct env {
    sl_master_t *m;
    sl_admin_t *a;
    char addr[64];
    char table[300];
    char spec[1024];
} env_t;

/* 8 splits of 1000 rows. */
static void env_start(env_t *e, const char *token)
{
    fu_gen(8000, 1000, 1, e->table, sizeof e->table);
    snprintf(e->spec, sizeof e->spec,
             "{\"id\":\"clicks\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":500}}",
             e->table);
    sl_master_opts_t o = {.lease_timeout_ms = 2000};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&o, &e->m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_admin_start(e->m, "127.0.0.1:0", token, &e->a, &err), SL_OK, "%s",
                 err.msg);
    snprintf(e->addr, sizeof e->addr, "127.0.0.1:%u", (unsigned)sl_admin_port(e->a));
}

static void env_stop(env_t *e)
{
    sl_admin_stop(e->a);
    sl_master_stop(e->m);
}

/* The request's status must be want; the body's "error" must contain
 * what (when non-NULL). */
static void expect(const env_t *e, const char *method, const char *path, const char *auth,
                   const char *body, int want, const char *what)
{
    char *b;
    int st = fu_http(e->addr, method, path, auth, body, &b);
    cr_assert_eq(st, want, "%s %s: %d, want %d: %s", method, path, st, want, b);
    if (what) {
        json_t *j = json_loads(b, 0, NULL);
        const char *msg = json_string_value(json_object_get(j, "error"));
        cr_assert(msg && strstr(msg, what), "%s %s: error '%s' lacks '%s'", method, path,
                  msg ? msg : b, what);
        json_decref(j);
    }
    free(b);
}

static char *submit_body(const env_t *e, const char *extra)
{
    char *body = malloc(2048);
    snprintf(body, 2048,
             "{\"spec\":%s,\"ranks\":2,\"sharding\":\"dynamic\",\"min_workers\":1,"
             "\"max_workers\":2%s}",
             e->spec, extra);
    return body;
}

/* The Prometheus text format (0.0.4) wants all lines of a metric family
 * as one group: HELP and TYPE first, then its samples, and no family twice
 * (a histogram's samples are its name with _bucket, _sum or _count).
 * Asserts that of text, and that every family has a TYPE. */
static void assert_prometheus_grouped(const char *text)
{
    char *copy = strdup(text), *save = NULL;
    char current[128] = "", seen[4096] = " ";
    bool histogram = false;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[128];
        char type[32];
        if (sscanf(line, "# TYPE %127s %31s", name, type) == 2) {
            histogram = strcmp(type, "histogram") == 0;
            char key[132];
            snprintf(key, sizeof key, " %s ", name);
            cr_assert_null(strstr(seen, key), "family %s has a second TYPE line", name);
            cr_assert_lt(strlen(seen) + strlen(key), sizeof seen);
            strcat(seen, name);
            strcat(seen, " ");
            snprintf(current, sizeof current, "%s", name);
            continue;
        }
        if (line[0] == '#') continue;
        size_t n = strcspn(line, "{ ");
        cr_assert(n < sizeof name, "%s", line);
        memcpy(name, line, n);
        name[n] = '\0';
        if (histogram) {
            size_t c = strlen(current);
            cr_assert(strncmp(name, current, c) == 0 &&
                          (strcmp(name + c, "_bucket") == 0 || strcmp(name + c, "_sum") == 0 ||
                           strcmp(name + c, "_count") == 0),
                      "sample '%s' is not in its histogram's group (%s)", line, current);
            continue;
        }
        cr_assert_str_eq(name, current, "sample '%s' is not in its family's group (last TYPE: %s)",
                         line, current[0] ? current : "none");
    }
    free(copy);
}

Test(fleet_admin, read_only_routes)
{
    env_t e;
    env_start(&e, FU_TOKEN);
    json_t *j = fu_get_json(e.addr, "/healthz");
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
    j = fu_get_json(e.addr, "/readyz");
    cr_assert_str_eq(json_string_value(json_object_get(j, "status")), "ready");
    json_decref(j);
    j = fu_get_json(e.addr, "/status");
    cr_assert(json_is_true(json_object_get(j, "ready")));
    cr_assert_eq(json_integer_value(json_object_get(j, "jobs")), 0);
    cr_assert_str_eq(json_string_value(json_object_get(j, "address")), sl_master_address(e.m));
    json_decref(j);
    j = fu_get_json(e.addr, "/jobs");
    cr_assert(json_is_array(json_object_get(j, "jobs")));
    cr_assert_eq(json_array_size(json_object_get(j, "jobs")), 0);
    json_decref(j);
    j = fu_get_json(e.addr, "/workers");
    cr_assert_eq(json_array_size(json_object_get(j, "workers")), 0);
    json_decref(j);

    char *b;
    cr_assert_eq(fu_http(e.addr, "GET", "/metrics", NULL, NULL, &b), 200);
    cr_assert(strstr(b, "# TYPE sluice_master_jobs gauge"), "%s", b);
    cr_assert(strstr(b, "sluice_master_jobs 0"), "%s", b);
    free(b);

    expect(&e, "GET", "/jobs/nope", NULL, NULL, 404, "nope");
    expect(&e, "GET", "/nothing", NULL, NULL, 404, NULL);
    expect(&e, "PUT", "/jobs", FU_TOKEN, "{}", 405, NULL);
    env_stop(&e);
}

Test(fleet_admin, submit_get_scale_delete)
{
    env_t e;
    env_start(&e, FU_TOKEN);
    char *body = submit_body(&e, "");
    char *b;
    cr_assert_eq(fu_http(e.addr, "POST", "/jobs", FU_TOKEN, body, &b), 201, "%s", b);
    json_t *j = json_loads(b, 0, NULL);
    free(b);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "clicks");
    cr_assert_eq(json_integer_value(json_object_get(j, "num_splits")), 8);
    cr_assert_eq(json_integer_value(json_object_get(j, "total_rows")), 8000);
    cr_assert_eq(json_integer_value(json_object_get(j, "ranks")), 2);
    cr_assert_str_eq(json_string_value(json_object_get(j, "sharding")), "dynamic");
    cr_assert(json_is_false(json_object_get(j, "finished")));
    json_decref(j);
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 409, "clicks");
    free(body);

    j = fu_get_json(e.addr, "/jobs/clicks");
    cr_assert_eq(json_integer_value(json_object_get(j, "pending")), 8);
    cr_assert_eq(json_integer_value(json_object_get(j, "min_workers")), 1);
    cr_assert_eq(json_integer_value(json_object_get(j, "max_workers")), 2);
    json_decref(j);
    j = fu_get_json(e.addr, "/jobs");
    cr_assert_eq(json_array_size(json_object_get(j, "jobs")), 1);
    json_decref(j);
    j = fu_get_json(e.addr, "/status");
    cr_assert_eq(json_integer_value(json_object_get(j, "jobs")), 1);
    json_decref(j);

    /* scale: clamped to the bounds */
    cr_assert_eq(fu_http(e.addr, "POST", "/jobs/clicks/scale", FU_TOKEN, "{\"workers\":5}", &b),
                 200, "%s", b);
    j = json_loads(b, 0, NULL);
    free(b);
    cr_assert_eq(json_integer_value(json_object_get(j, "workers")), 2);
    cr_assert_eq(json_integer_value(json_object_get(j, "requested")), 5);
    json_decref(j);
    j = fu_get_json(e.addr, "/jobs/clicks");
    cr_assert_eq(json_integer_value(json_object_get(j, "desired_workers")), 2);
    json_decref(j);
    sl_master_desired_t d[4];
    cr_assert_eq(sl_master_desired(e.m, d, 4), 1);
    cr_assert_str_eq(d[0].job_id, "clicks");
    cr_assert_eq(d[0].workers, 2);
    expect(&e, "POST", "/jobs/clicks/scale", FU_TOKEN, "{\"workers\":-1}", 400, "$.workers");
    expect(&e, "POST", "/jobs/clicks/scale", FU_TOKEN, "{\"workers\":\"2\"}", 400, "$.workers");
    expect(&e, "POST", "/jobs/clicks/scale", FU_TOKEN, "{\"workers\":1,\"x\":1}", 400, "$.x");
    expect(&e, "POST", "/jobs/clicks/scale", FU_TOKEN, "[1]", 400, NULL);
    expect(&e, "POST", "/jobs/other/scale", FU_TOKEN, "{\"workers\":1}", 404, "other");
    char *m;
    cr_assert_eq(fu_http(e.addr, "GET", "/metrics", NULL, NULL, &m), 200);
    cr_assert(strstr(m, "sluice_master_desired_workers{job=\"clicks\"} 2"), "%s", m);
    free(m);

    /* delete, both forms */
    expect(&e, "DELETE", "/jobs/clicks", NULL, NULL, 401, NULL);
    expect(&e, "DELETE", "/jobs/other", FU_TOKEN, NULL, 404, "other");
    expect(&e, "DELETE", "/jobs/clicks", FU_TOKEN, NULL, 200, NULL);
    expect(&e, "GET", "/jobs/clicks", NULL, NULL, 404, NULL);
    cr_assert_eq(sl_master_desired(e.m, d, 4), 0);
    body = submit_body(&e, "");
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 201, NULL);
    free(body);
    expect(&e, "DELETE", "/jobs", FU_TOKEN, "{}", 400, "$.id");
    expect(&e, "DELETE", "/jobs", FU_TOKEN, "{\"id\":\"clicks\"}", 200, NULL);
    j = fu_get_json(e.addr, "/jobs");
    cr_assert_eq(json_array_size(json_object_get(j, "jobs")), 0);
    json_decref(j);
    env_stop(&e);
}

/* sluice_master_journal_sync_seconds: buckets cumulative in le order, the
 * +Inf bucket equal to _count, which is want (journal_test.c counts real
 * syncs; the live Prometheus test, ops/prometheus/live-test, sees them). */
static void assert_sync_histogram(const char *m, double want)
{
    static const char *les[] = {"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
                                "0.05",   "0.1",   "0.5",    "2.5",   "+Inf"};
    cr_assert(strstr(m, "# TYPE sluice_master_journal_sync_seconds histogram\n"), "%s", m);
    double prev = 0, v = 0;
    for (size_t i = 0; i < sizeof les / sizeof les[0]; i++) {
        char key[128];
        snprintf(key, sizeof key, "\nsluice_master_journal_sync_seconds_bucket{le=\"%s\"} ",
                 les[i]);
        const char *at = strstr(m, key);
        cr_assert(at, "no %s in %s", key + 1, m);
        v = strtod(at + strlen(key), NULL);
        cr_assert_geq(v, prev, "%s", key + 1);
        prev = v;
    }
    const char *c = strstr(m, "\nsluice_master_journal_sync_seconds_count ");
    cr_assert(c, "%s", m);
    cr_assert_eq(strtod(c + strlen("\nsluice_master_journal_sync_seconds_count "), NULL), v);
    cr_assert_eq(v, want);
    cr_assert(strstr(m, "\nsluice_master_journal_sync_seconds_sum "), "%s", m);
}

Test(fleet_admin, metrics_are_well_formed_with_jobs)
{
    env_t e;
    env_start(&e, FU_TOKEN);
    char *body = submit_body(&e, "");
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 201, NULL);
    free(body);
    char *m;
    cr_assert_eq(fu_http(e.addr, "GET", "/metrics", NULL, NULL, &m), 200);
    cr_assert(strstr(m, "sluice_master_splits{job=\"clicks\",state=\"pending\"} 8"), "%s", m);
    cr_assert(strstr(m, "\nsluice_master_job_finished{job=\"clicks\"} 0\n"), "%s", m);
    cr_assert(strstr(m, "\nsluice_master_job_failed{job=\"clicks\"} 0\n"), "%s", m);
    assert_prometheus_grouped(m);
    assert_sync_histogram(m, 0); /* no state directory here: no journal to sync */
    free(m);
    env_stop(&e);
}

/* A worker's /metrics carries its start time, also while it waits for
 * its first lease: a restart changes it, which is what the crash-loop
 * alert counts (ops/prometheus/rules.yml). */
Test(fleet_admin, worker_metrics_carry_the_start_time)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    sl_worker_admin_t *wa = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_admin_start(NULL, NULL, "127.0.0.1:0", &wa, &err), SL_OK, "%s", err.msg);
    clock_gettime(CLOCK_REALTIME, &t1);
    char addr[64], *m;
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_admin_port(wa));
    cr_assert_eq(fu_http(addr, "GET", "/metrics", NULL, NULL, &m), 200);
    const char *key = "\nsluice_worker_start_time_seconds ";
    const char *at = strstr(m, key);
    cr_assert(at, "%s", m);
    double v = strtod(at + strlen(key), NULL);
    cr_assert_geq(v, (double)t0.tv_sec, "%s", m);
    cr_assert_leq(v, (double)t1.tv_sec + 1, "%s", m);
    cr_assert(strstr(m, "\nsluice_worker_waiting 1\n"), "%s", m);
    cr_assert(strstr(m, "# TYPE sluice_worker_start_time_seconds gauge\n"), "%s", m);
    assert_prometheus_grouped(m);
    free(m);
    sl_worker_admin_stop(wa);
}

Test(fleet_admin, auth_and_malformed_bodies)
{
    env_t e;
    env_start(&e, FU_TOKEN);
    char *body = submit_body(&e, "");
    expect(&e, "POST", "/jobs", NULL, body, 401, NULL);
    expect(&e, "POST", "/jobs", "wrong-token", body, 401, NULL);
    expect(&e, "POST", "/jobs/clicks/scale", NULL, "{\"workers\":1}", 401, NULL);
    expect(&e, "DELETE", "/jobs", NULL, "{\"id\":\"clicks\"}", 401, NULL);
    free(body);
    expect(&e, "POST", "/jobs", FU_TOKEN, "{\"spec\": {", 400, "line 1");
    expect(&e, "POST", "/jobs", FU_TOKEN, "", 400, NULL);
    expect(&e, "POST", "/jobs", FU_TOKEN, "[]", 400, NULL);
    expect(&e, "POST", "/jobs", FU_TOKEN, "{\"ranks\":1}", 400, "spec");
    expect(&e, "POST", "/jobs", FU_TOKEN, "{\"spec\":\"x\"}", 400, "spec");
    char bad[1024];
    snprintf(bad, sizeof bad, "{\"spec\":{\"id\":\"x\",\"source\":{\"table\":\"%s/none\"}}}",
             fu_dir);
    expect(&e, "POST", "/jobs", FU_TOKEN, bad, 400, "none");
    snprintf(bad, sizeof bad,
             "{\"spec\":{\"id\":\"x\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":0}}}",
             e.table);
    expect(&e, "POST", "/jobs", FU_TOKEN, bad, 400, "size");
    body = submit_body(&e, ",\"sharding\":\"sideways\"");
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 400, "sharding");
    free(body);
    body = submit_body(&e, ",\"resume_token\":\"bm90IGEgdG9rZW4=\"");
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 400, NULL);
    free(body);
    /* 9 MiB: over the 8 MiB limit */
    size_t big = 9u << 20;
    char *huge = malloc(big + 1);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    huge[big] = '\0';
    expect(&e, "POST", "/jobs", FU_TOKEN, huge, 413, NULL);
    free(huge);
    /* nothing was created by any of these */
    json_t *j = fu_get_json(e.addr, "/jobs");
    cr_assert_eq(json_array_size(json_object_get(j, "jobs")), 0);
    json_decref(j);
    env_stop(&e);

    /* no token configured: mutating routes are refused outright */
    env_t f;
    env_start(&f, NULL);
    body = submit_body(&f, "");
    expect(&f, "POST", "/jobs", FU_TOKEN, body, 403, NULL);
    free(body);
    j = fu_get_json(f.addr, "/status");
    json_decref(j);
    env_stop(&f);
}

/* A job that cannot run is refused before it is accepted: the spec is
 * bound to the table's schema and every file it names is checked, and the
 * 400 lists every problem by its path in the body (not only the first),
 * quoting no file's content. Ranks 0 and a job id that could name a path
 * outside a directory are refused too. */
Test(fleet_admin, submit_lists_every_problem)
{
    env_t e;
    env_start(&e, FU_TOKEN);
    char vocab[400], big[400], body[4096];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", fu_dir);
    snprintf(big, sizeof big, "%s/big.txt", fu_dir);
    fu_write(vocab, "password-like-content\n");
    FILE *f = fopen(big, "w");
    cr_assert_eq(ftruncate(fileno(f), 1ll << 30), 0);
    fclose(f);
    snprintf(body, sizeof body,
             "{\"spec\":{\"id\":\"bad\",\"source\":{\"table\":\"%s\"},"
             "\"transforms\":["
             "{\"op\":\"sigrid_hash\",\"feature\":\"C99\",\"table_size\":10},"
             "{\"op\":\"map_vocab\",\"feature\":\"C1\",\"file\":\"%s/missing.txt\"},"
             "{\"op\":\"map_vocab\",\"feature\":\"C2\",\"file\":\"%s\"},"
             "{\"op\":\"map_vocab\",\"feature\":\"C3\",\"file\":\"%s\"},"
             "{\"op\":\"log1p\",\"feature\":\"C4\"}]}}",
             e.table, fu_dir, big, fu_dir);
    char *reply;
    int st = fu_http(e.addr, "POST", "/jobs", FU_TOKEN, body, &reply);
    cr_assert_eq(st, 400, "%d %s", st, reply);
    json_t *j = json_loads(reply, 0, NULL);
    json_t *pr = json_object_get(j, "problems");
    cr_assert(json_is_array(pr), "%s", reply);
    char want[5][600];
    snprintf(want[0], sizeof want[0],
             "$.spec.transforms[0].feature: unknown feature 'C99' (did you mean 'C9'?)");
    snprintf(want[1], sizeof want[1],
             "$.spec.transforms[1].file: cannot open vocabulary '%s/missing.txt': No such file "
             "or directory",
             fu_dir);
    snprintf(want[2], sizeof want[2],
             "$.spec.transforms[2].file: vocabulary '%s': 1073741824 bytes, more than the "
             "536870912 a vocabulary may have",
             big);
    snprintf(want[3], sizeof want[3],
             "$.spec.transforms[3].file: vocabulary '%s': not a regular file", fu_dir);
    snprintf(want[4], sizeof want[4],
             "$.spec.transforms[4].feature: 'C4' is a sparse feature; log1p needs a dense feature");
    cr_assert_eq(json_array_size(pr), 5, "%s", reply);
    for (size_t i = 0; i < 5; i++)
        cr_assert_str_eq(json_string_value(json_array_get(pr, i)), want[i]);
    const char *msg = json_string_value(json_object_get(j, "error"));
    cr_assert(msg && strstr(msg, want[0]) && strstr(msg, "(and 4 more problems)"), "%s", reply);
    json_decref(j);
    free(reply);
    /* parse problems and a limit that needs no schema, listed together */
    snprintf(body, sizeof body,
             "{\"spec\":{\"id\":\"bad\",\"source\":{\"table\":\"%s\"},"
             "\"transforms\":[{\"op\":\"ngram\",\"feature\":\"C1\",\"n\":2000,"
             "\"table_size\":10}],\"batch\":{\"size\":0,\"colour\":1}}}",
             e.table);
    st = fu_http(e.addr, "POST", "/jobs", FU_TOKEN, body, &reply);
    cr_assert_eq(st, 400, "%d %s", st, reply);
    j = json_loads(reply, 0, NULL);
    pr = json_object_get(j, "problems");
    cr_assert_eq(json_array_size(pr), 3, "%s", reply);
    cr_assert_str_eq(json_string_value(json_array_get(pr, 0)),
                     "$.spec.transforms[0].n: must be an integer in [1, 1024]");
    cr_assert_str_eq(json_string_value(json_array_get(pr, 1)), "$.spec.batch.colour: unknown key");
    cr_assert_str_eq(json_string_value(json_array_get(pr, 2)),
                     "$.spec.batch.size: must be an integer in [1, 1048576]");
    json_decref(j);
    free(reply);
    /* a table that is not there: a problem at its path */
    snprintf(body, sizeof body, "{\"spec\":{\"id\":\"x\",\"source\":{\"table\":\"%s/none\"}}}",
             fu_dir);
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 400, "$.spec.source.table: table ");
    /* ranks >= 1, and ids that stay inside a directory */
    char *b = submit_body(&e, "");
    char *r0 = strstr(b, "\"ranks\":2");
    cr_assert_not_null(r0);
    r0[8] = '0';
    expect(&e, "POST", "/jobs", FU_TOKEN, b, 400, "$.ranks: an integer 1..65536");
    free(b);
    snprintf(body, sizeof body, "{\"spec\":{\"id\":\"../../x\",\"source\":{\"table\":\"%s\"}}}",
             e.table);
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 400, "$.spec.id: a job id is 1 to 255 letters");
    json_t *jobs = fu_get_json(e.addr, "/jobs");
    cr_assert_eq(json_array_size(json_object_get(jobs, "jobs")), 0);
    json_decref(jobs);
    /* the same spec with good files is accepted */
    fu_write(vocab, "3\n1\n");
    snprintf(body, sizeof body,
             "{\"spec\":{\"id\":\"good\",\"source\":{\"table\":\"%s\"},"
             "\"transforms\":[{\"op\":\"map_vocab\",\"feature\":\"C2\",\"file\":\"%s\"}]}}",
             e.table, vocab);
    expect(&e, "POST", "/jobs", FU_TOKEN, body, 201, NULL);
    env_stop(&e);
}

/* Run `sluice submit ARGS` with SLUICE_ADMIN_TOKEN set to env_token (NULL:
 * unset); returns the exit status, stdout+stderr in *out. */
static int run_submit(const char *const *args, const char *env_token, char **out)
{
    const char *argv[32] = {"submit"};
    int n = 1;
    for (const char *const *a = args; *a && n < 31; a++)
        argv[n++] = *a;
    argv[n] = NULL;
    return fu_run(argv, "SLUICE_ADMIN_TOKEN", env_token, out);
}

Test(fleet_admin, sluice_submit_cli)
{
    env_t e;
    env_start(&e, FU_TOKEN);
    char spec_path[400], token_path[400], bad_path[400];
    snprintf(spec_path, sizeof spec_path, "%s/job.json", fu_dir);
    snprintf(token_path, sizeof token_path, "%s/token", fu_dir);
    snprintf(bad_path, sizeof bad_path, "%s/bad.json", fu_dir);
    fu_write(spec_path, e.spec);
    fu_write(token_path, FU_TOKEN "\n");
    fu_write(bad_path, "{\"id\": \"x\",");
    char *out;

    const char *no_token[] = {"--admin", e.addr, "--job", spec_path, NULL};
    cr_assert_eq(run_submit(no_token, NULL, &out), 1, "%s", out);
    cr_assert(strstr(out, "HTTP 401"), "%s", out);
    free(out);

    const char *bad[] = {"--admin", e.addr, "--job", bad_path, NULL};
    cr_assert_eq(run_submit(bad, FU_TOKEN, &out), 1, "%s", out);
    cr_assert(strstr(out, "bad.json:1:"), "%s", out);
    free(out);

    const char *usage[] = {"--admin", e.addr, "--job", spec_path, "--sharding", "diagonal", NULL};
    cr_assert_eq(run_submit(usage, FU_TOKEN, &out), 2, "%s", out);
    cr_assert(strstr(out, "diagonal"), "%s", out);
    free(out);

    const char *ok[] = {
        "--admin",       e.addr, "--job",      spec_path, "--token-file",  token_path,
        "--ranks",       "2",    "--sharding", "static",  "--min-workers", "1",
        "--max-workers", "3",    NULL};
    cr_assert_eq(run_submit(ok, NULL, &out), 0, "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert_not_null(j, "%s", out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "clicks");
    json_decref(j);
    free(out);
    j = fu_get_json(e.addr, "/jobs/clicks");
    cr_assert_str_eq(json_string_value(json_object_get(j, "sharding")), "static");
    cr_assert_eq(json_integer_value(json_object_get(j, "ranks")), 2);
    cr_assert_eq(json_integer_value(json_object_get(j, "max_workers")), 3);
    json_decref(j);

    /* the same again, token from the environment: the master says 409 */
    cr_assert_eq(run_submit(no_token, FU_TOKEN, &out), 1, "%s", out);
    cr_assert(strstr(out, "HTTP 409"), "%s", out);
    free(out);

    /* nobody listening */
    const char *nobody[] = {"--admin", "127.0.0.1:1", "--job", spec_path, NULL};
    cr_assert_eq(run_submit(nobody, FU_TOKEN, &out), 1, "%s", out);
    cr_assert(strstr(out, "sluice submit: "), "%s", out);
    free(out);
    env_stop(&e);
}

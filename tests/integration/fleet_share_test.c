/* Reuse across jobs (issue 14), on a master in this process: the plan
 * fingerprint of each job in GET /jobs and /jobs/{id} (equal for the same
 * plan written differently, different for another seed), which jobs share
 * it ("share": false opts out), the metrics, and the fingerprint kept
 * across a master restart. */
#include "fleet_util.h"

#include "dpp/master/admin.h"

TestSuite(fleet_share, .init = fu_setup, .fini = fu_teardown);

typedef struct env {
    sl_master_t *m;
    sl_admin_t *a;
    char addr[64];
    char table[300];
    char state[300];
} env_t;

static void env_open(env_t *e)
{
    sl_master_opts_t o = {.lease_timeout_ms = 2000, .state_dir = e->state};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&o, &e->m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_admin_start(e->m, "127.0.0.1:0", FU_TOKEN, &e->a, &err), SL_OK, "%s",
                 err.msg);
    snprintf(e->addr, sizeof e->addr, "127.0.0.1:%u", (unsigned)sl_admin_port(e->a));
}

static void env_close(env_t *e)
{
    sl_admin_stop(e->a);
    sl_master_stop(e->m);
}

static void submit(const env_t *e, const char *spec)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"spec\":%s,\"ranks\":1,\"sharding\":\"dynamic\",\"min_workers\":1,"
             "\"max_workers\":1}",
             spec);
    char *b;
    int st = fu_http(e->addr, "POST", "/jobs", FU_TOKEN, body, &b);
    cr_assert_eq(st, 201, "POST /jobs: %d %s", st, b);
    free(b);
}

/* GET /jobs/{id}: its fingerprint (16 hex digits), share, and the ids it
 * shares with, sorted, comma-separated. */
static void job_share(const env_t *e, const char *id, char *fp, bool *share, char *peers)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", id);
    json_t *j = fu_get_json(e->addr, path);
    const char *f = json_string_value(json_object_get(j, "fingerprint"));
    cr_assert_not_null(f, "%s: no fingerprint", id);
    cr_assert_eq(strlen(f), 16, "%s: fingerprint '%s'", id, f);
    strcpy(fp, f);
    json_t *s = json_object_get(j, "share");
    cr_assert(json_is_boolean(s), "%s: no share", id);
    *share = json_is_true(s);
    json_t *with = json_object_get(j, "shares_with");
    cr_assert(json_is_array(with), "%s: no shares_with", id);
    const char *ids[16];
    size_t n = json_array_size(with);
    cr_assert_leq(n, 16);
    for (size_t i = 0; i < n; i++)
        ids[i] = json_string_value(json_array_get(with, i));
    for (size_t i = 0; i < n; i++) /* sorted: the order of job slots is not the point */
        for (size_t k = i + 1; k < n; k++)
            if (strcmp(ids[k], ids[i]) < 0) {
                const char *t = ids[i];
                ids[i] = ids[k];
                ids[k] = t;
            }
    peers[0] = '\0';
    for (size_t i = 0; i < n; i++)
        sprintf(peers + strlen(peers), "%s%s", i ? "," : "", ids[i]);
    json_decref(j);
}

Test(fleet_share, fingerprints_and_who_shares)
{
    env_t e = {0};
    fu_gen(4000, 1000, 2, e.table, sizeof e.table);
    snprintf(e.state, sizeof e.state, "%s/state", fu_dir);
    env_open(&e);
    char spec[2048];
    /* a: terse */
    snprintf(spec, sizeof spec,
             "{\"id\":\"a\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":7}}}",
             e.table);
    submit(&e, spec);
    /* b: the same plan, keys reordered, defaults spelled out */
    snprintf(spec, sizeof spec,
             "{\"batch\":{\"shuffle\":{\"seed\":7,\"window\":0,\"splits\":true},\"epochs\":2,"
             "\"drop_last\":false,\"size\":250,\"sample_ids\":true},\"filters\":[],"
             "\"source\":{\"stripes_per_split\":1,\"table\":\"%s\"},\"id\":\"b\",\"share\":true}",
             e.table);
    submit(&e, spec);
    /* c: another seed, so other samples in another order: never shared */
    snprintf(spec, sizeof spec,
             "{\"id\":\"c\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":8}}}",
             e.table);
    submit(&e, spec);
    /* d: a's plan, opted out */
    snprintf(spec, sizeof spec,
             "{\"id\":\"d\",\"share\":false,\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":7}}}",
             e.table);
    submit(&e, spec);

    for (int round = 0; round < 2; round++) {
        char fa[20], fb[20], fc[20], fd[20], pa[64], pb[64], pc[64], pd[64];
        bool sa, sb, sc, sd;
        job_share(&e, "a", fa, &sa, pa);
        job_share(&e, "b", fb, &sb, pb);
        job_share(&e, "c", fc, &sc, pc);
        job_share(&e, "d", fd, &sd, pd);
        cr_assert_str_eq(fa, fb);
        cr_assert_str_neq(fa, fc);
        cr_assert_str_eq(fa, fd); /* the same plan: opting out does not change what it is */
        cr_assert(sa && sb && sc && !sd);
        cr_assert_str_eq(pa, "b");
        cr_assert_str_eq(pb, "a");
        cr_assert_str_eq(pc, "");
        cr_assert_str_eq(pd, "");

        /* the list says the same */
        json_t *all = fu_get_json(e.addr, "/jobs");
        json_t *jobs = json_object_get(all, "jobs");
        cr_assert_eq(json_array_size(jobs), 4);
        for (size_t i = 0; i < 4; i++) {
            json_t *j = json_array_get(jobs, i);
            const char *id = json_string_value(json_object_get(j, "id"));
            const char *f = json_string_value(json_object_get(j, "fingerprint"));
            cr_assert_str_eq(f, strcmp(id, "c") == 0 ? fc : fa, "%s", id);
            size_t want = strcmp(id, "a") == 0 || strcmp(id, "b") == 0 ? 1 : 0;
            cr_assert_eq(json_array_size(json_object_get(j, "shares_with")), want, "%s", id);
        }
        json_decref(all);

        char *m;
        cr_assert_eq(fu_http(e.addr, "GET", "/metrics", NULL, NULL, &m), 200);
        cr_assert(strstr(m, "\nsluice_master_job_shares_with{job=\"a\"} 1\n"), "%s", m);
        cr_assert(strstr(m, "\nsluice_master_job_shares_with{job=\"c\"} 0\n"), "%s", m);
        cr_assert(strstr(m, "\nsluice_master_job_shares_with{job=\"d\"} 0\n"), "%s", m);
        char line[200];
        snprintf(line, sizeof line,
                 "\nsluice_master_job_plan_info{job=\"d\",fingerprint=\"%s\",share=\"false\"} 1\n",
                 fa);
        cr_assert(strstr(m, line), "%s lacks %s", m, line);
        free(m);

        /* the fingerprints are journaled: a restarted master shows the same */
        env_close(&e);
        env_open(&e);
    }
    /* a job removed no longer shares */
    char *b;
    cr_assert_eq(fu_http(e.addr, "DELETE", "/jobs/b", FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    char fa[20], pa[64];
    bool sa;
    job_share(&e, "a", fa, &sa, pa);
    cr_assert_str_eq(pa, "");
    env_close(&e);
}

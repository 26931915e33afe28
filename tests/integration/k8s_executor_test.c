/* The Kubernetes executor (src/dpp/master/executor/executor_k8s.c, `sluice master
 * --executor kubernetes`) against a fake API server (k8s_fake_api.h:
 * TLS, the scale subresource of one Deployment, refusing what a real one
 * refuses, keeping every request).
 *
 * The real master (fleet_util.h) scales the Deployment to what its
 * autoscaler grants a job and patches only when that changes; a token
 * the kubelet rotates is read again; a 500 is retried with a doubling
 * back-off and shown in /status and /metrics meanwhile; an API server
 * whose certificate the service account's CA did not sign is never
 * talked to. */
#include "fleet_util.h"
#include "k8s_fake_api.h"

#include <curl/curl.h>

/* ---- the service account and the executor ---- */

typedef struct sa {
    char dir[300], cert[400], key[400];
} sa_t;

/* A service account directory under fu_dir: token, ca.crt (the server
 * certificate made here: its own authority) and namespace; the server's
 * key beside it. */
static void sa_make(sa_t *s, const char *token)
{
    snprintf(s->dir, sizeof s->dir, "%s/serviceaccount", fu_dir);
    cr_assert_eq(mkdir(s->dir, 0700), 0);
    snprintf(s->cert, sizeof s->cert, "%s/ca.crt", s->dir);
    snprintf(s->key, sizeof s->key, "%s/server.key", fu_dir);
    tu_make_cert(s->cert, s->key, "127.0.0.1");
    char p[400];
    snprintf(p, sizeof p, "%s/namespace", s->dir);
    fu_write(p, NS);
    snprintf(p, sizeof p, "%s/token", s->dir);
    fu_write(p, token);
}

/* Replace the token as the kubelet does: a new file renamed over the old. */
static void sa_rotate(const sa_t *s, const char *token)
{
    char tmp[400], p[400];
    snprintf(tmp, sizeof tmp, "%s/.token.new", s->dir);
    snprintf(p, sizeof p, "%s/token", s->dir);
    fu_write(tmp, token);
    cr_assert_eq(rename(tmp, p), 0);
}

/* The service account (token tok-1) and the fake serving it, with the
 * Deployment at replicas. */
static void fake_up(sa_t *s, fake_api_t *f, int64_t replicas)
{
    sa_make(s, "tok-1");
    fake_start(f, s->cert, s->key, "tok-1", replicas);
}

/* m's options: `sluice master --executor kubernetes` against the fake
 * (the namespace: the service account's). api must outlive m. */
static void master_args(fu_master_t *m, const sa_t *s, const fake_api_t *f, char api[64])
{
    snprintf(api, 64, "https://127.0.0.1:%u", (unsigned)f->port);
    const char *extra[] = {"--executor", "kubernetes", "--k8s-deployment",     DEPLOY,
                           "--k8s-api",  api,          "--k8s-serviceaccount", s->dir};
    memcpy(m->extra, extra, sizeof extra);
}

static sl_master_executor_t *k8s_new_opts(const sa_t *s, uint16_t port, const char *deployment,
                                          uint32_t backoff_ms, uint32_t max_replicas,
                                          uint32_t resync_ms)
{
    char api[64];
    snprintf(api, sizeof api, "https://127.0.0.1:%u", (unsigned)port);
    sl_master_executor_k8s_opts_t o = {.deployment = deployment,
                                       .api_url = api,
                                       .serviceaccount_dir = s->dir,
                                       .backoff_ms = backoff_ms,
                                       .max_backoff_ms = 4 * backoff_ms,
                                       .max_replicas = max_replicas,
                                       .resync_ms = resync_ms,
                                       .timeout_ms = (uint32_t)(tu_timeout(5) * 1000)};
    sl_master_executor_t *ex = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_k8s_new(&o, &ex, &err), SL_OK, "%s", err.msg);
    return ex;
}

static sl_master_executor_t *k8s_new(const sa_t *s, uint16_t port, const char *deployment,
                                     uint32_t backoff_ms)
{
    return k8s_new_opts(s, port, deployment, backoff_ms, 0, 0);
}

static void set_target(sl_master_executor_t *ex, uint32_t a, uint32_t b)
{
    sl_master_executor_target_t t[2] = {{"job-a", a}, {"job-b", b}};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_apply(ex, t, 2, NULL, NULL, &err), SL_OK, "%s", err.msg);
}

/* Wait (bounded) until the fake's Deployment has n replicas. */
static void await_replicas(fake_api_t *f, int64_t n, double seconds)
{
    double deadline = fu_now() + tu_timeout(seconds);
    while (fake_replicas(f) != n) {
        cr_assert(fu_now() < deadline, "the Deployment has %lld replicas, not %lld, in time",
                  (long long)fake_replicas(f), (long long)n);
        usleep(10 * 1000);
    }
}

/* Wait (bounded) until the executor's stats satisfy what(). */
static void await_stats(sl_master_executor_t *ex, bool (*what)(const sl_master_executor_stats_t *),
                        sl_master_executor_stats_t *st, const char *desc)
{
    double deadline = fu_now() + tu_timeout(10);
    for (;;) {
        sl_master_executor_stats(ex, st);
        if (what(st)) return;
        cr_assert(fu_now() < deadline, "executor: not in time: %s (last error: %s)", desc,
                  st->last_error);
        usleep(10 * 1000);
    }
}

/* The executor has recorded the answer to its last PATCH (the fake counts
 * the replicas before it answers, so the stats may lag by a moment). */
static bool applied_is_desired(const sl_master_executor_stats_t *s)
{
    return s->applied == (int64_t)s->desired;
}

static bool any_transport_error(const sl_master_executor_stats_t *s)
{
    return s->requests_transport_error > 0;
}

static bool any_client_error(const sl_master_executor_stats_t *s)
{
    return s->requests_client_error > 0;
}

TestSuite(k8s_executor, .init = fu_setup, .fini = fu_teardown, .timeout = 90);

/* The fake refuses what the API server refuses, so that what the other
 * tests see accepted was right. */
Test(k8s_executor, the_fake_refuses_what_an_api_server_refuses)
{
    sa_t s;
    fake_api_t f;
    fake_up(&s, &f, 2);
    static const struct {
        const char *method, *path, *auth, *ct, *body;
        long status;
    } cases[] = {
        {"GET", SCALE_PATH, "Bearer tok-1", NULL, NULL, 200},
        {"GET", SCALE_PATH, "Bearer tok-0", NULL, NULL, 401},
        {"GET", SCALE_PATH, NULL, NULL, NULL, 401},
        {"GET", "/apis/apps/v1/namespaces/" NS "/deployments/other/scale", "Bearer tok-1", NULL,
         NULL, 404},
        {"PUT", SCALE_PATH, "Bearer tok-1", "application/json", "{}", 405},
        {"PATCH", SCALE_PATH, "Bearer tok-1", "application/json", "{\"spec\":{\"replicas\":3}}",
         415},
        {"PATCH", SCALE_PATH, "Bearer tok-1", "application/merge-patch+json",
         "{\"spec\":{\"replicas\":-1}}", 422},
        {"PATCH", SCALE_PATH, "Bearer tok-1", "application/merge-patch+json",
         "{\"spec\":{\"replicas\":\"3\"}}", 422},
        {"PATCH", SCALE_PATH, "Bearer tok-1", "application/merge-patch+json", "[3]", 422},
        {"PATCH", SCALE_PATH, "Bearer tok-1", "application/merge-patch+json",
         "{\"spec\":{\"replicas\":3}}", 200},
    };
    char url[160];
    snprintf(url, sizeof url, "https://127.0.0.1:%u", (unsigned)f.port);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CURL *c = curl_easy_init();
        char full[400], auth[64], ct[96];
        snprintf(full, sizeof full, "%s%s", url, cases[i].path);
        struct curl_slist *h = NULL;
        if (cases[i].auth) {
            snprintf(auth, sizeof auth, "Authorization: %s", cases[i].auth);
            h = curl_slist_append(h, auth);
        }
        if (cases[i].ct) {
            snprintf(ct, sizeof ct, "Content-Type: %s", cases[i].ct);
            h = curl_slist_append(h, ct);
        }
        curl_easy_setopt(c, CURLOPT_URL, full);
        curl_easy_setopt(c, CURLOPT_CAINFO, s.cert);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, cases[i].method);
        if (cases[i].body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, cases[i].body);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(tu_timeout(10) * 1000));
        FILE *sink = fopen("/dev/null", "w");
        curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
        CURLcode rc = curl_easy_perform(c);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        fclose(sink);
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        cr_assert_eq(rc, CURLE_OK, "case %zu: %s", i, curl_easy_strerror(rc));
        cr_assert_eq(status, cases[i].status, "case %zu (%s %s): HTTP %ld, not %ld", i,
                     cases[i].method, cases[i].path, status, cases[i].status);
    }
    cr_assert_eq(fake_replicas(&f), 3, "only the good PATCH changed the scale");
    fake_stop(&f);
}

/* The real master: the job's granted workers become the Deployment's
 * replicas, patched once (not again every loop), in /status and
 * /metrics; the namespace is the service account's. */
Test(k8s_executor, the_master_scales_the_deployment_to_the_granted_workers)
{
    sa_t s;
    fake_api_t f;
    fake_up(&s, &f, 2);
    char api[64];
    fu_master_t m = {0};
    master_args(&m, &s, &f, api);
    char *job = fu_job_up(&m, "k8s-job", 2000, 2, 1, "dynamic", 3);
    await_replicas(&f, 3, 10);
    /* the master loop applies its decision every 200 ms: no more PATCHes */
    usleep((useconds_t)(tu_timeout(1) * 1e6));
    static req_rec_t r[MAX_REQS];
    int n = fake_reqs(&f, r);
    cr_assert_geq(n, 2);
    cr_assert_str_eq(r[0].method, "GET", "the scale is read first");
    cr_assert_str_eq(r[0].path, SCALE_PATH);
    cr_assert_str_eq(r[0].auth, "Bearer tok-1");
    const req_rec_t *last = &r[n - 1];
    cr_assert_str_eq(last->method, "PATCH");
    cr_assert_str_eq(last->path, SCALE_PATH);
    cr_assert_str_eq(last->content_type, "application/merge-patch+json");
    cr_assert_str_eq(last->body, "{\"spec\":{\"replicas\":3}}");
    cr_assert_eq(last->status, 200);
    /* At most one PATCH to 0 (before the job came) and one to 3. */
    cr_assert_leq(count_method(r, n, "PATCH"), 2, "%d PATCHes", count_method(r, n, "PATCH"));
    for (int i = 0; i < n; i++)
        cr_assert_eq(r[i].status, 200, "request %d: %d", i, r[i].status);

    json_t *st = fu_get_json(m.admin, "/status");
    json_t *x = json_object_get(st, "executor");
    cr_assert_str_eq(json_string_value(json_object_get(x, "kind")), "kubernetes");
    cr_assert_str_eq(json_string_value(json_object_get(x, "deployment")), NS "/" DEPLOY);
    cr_assert_eq(json_integer_value(json_object_get(x, "desired")), 3);
    cr_assert_eq(json_integer_value(json_object_get(x, "applied")), 3);
    cr_assert_eq(json_integer_value(json_object_get(x, "failures")), 0);
    cr_assert(json_is_null(json_object_get(x, "last_error")));
    cr_assert(json_is_null(json_object_get(x, "next_retry_s")));
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(x, "requests"), "ok")), n);
    json_decref(st);
    char *b;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &b), 200);
    cr_assert(strstr(b, "sluice_master_executor_replicas{state=\"desired\"} 3\n"), "%s", b);
    cr_assert(strstr(b, "sluice_master_executor_replicas{state=\"applied\"} 3\n"), "%s", b);
    char want[96];
    snprintf(want, sizeof want, "sluice_master_executor_requests_total{result=\"ok\"} %d\n", n);
    cr_assert(strstr(b, want), "%s", b);
    cr_assert(strstr(b, "sluice_master_executor_requests_total{result=\"server_error\"} 0\n"));
    free(b);

    /* The job gone, its workers are not wanted: the Deployment goes to 0
     * (the API server leaves a 0 out of the Scale it answers). */
    char path[128];
    snprintf(path, sizeof path, "/jobs/%s", job);
    cr_assert_eq(fu_http(m.admin, "DELETE", path, FU_TOKEN, NULL, &b), 200, "%s", b);
    free(b);
    await_replicas(&f, 0, 10);
    fu_master_stop(&m, SIGTERM);
    /* the first read is logged as such, not as a scale "from -1" */
    char *log = tu_read_file(m.log);
    cr_assert_not_null(log);
    cr_assert(strstr(log, "sluice master: deployment " NS "/" DEPLOY
                          ": 2 replicas at the first read (the jobs are granted ") != NULL,
              "%s", log);
    cr_assert(strstr(log, "was -1") == NULL, "%s", log);
    free(log);
    free(job);
    fake_stop(&f);
}

/* The kubelet rotates the token: the executor reads it for each request,
 * and a 401 while the file is still the old one is retried. */
Test(k8s_executor, a_rotated_token_is_picked_up)
{
    sa_t s;
    fake_api_t f;
    fake_up(&s, &f, 0);
    sl_master_executor_t *ex = k8s_new(&s, f.port, DEPLOY, 50);
    set_target(ex, 2, 1);
    await_replicas(&f, 3, 10);
    cr_assert_eq(sl_master_executor_count(ex, NULL), 3);
    cr_assert_eq(sl_master_executor_count(ex, "job-a"), 2);

    /* rotated in both places before the next request */
    sa_rotate(&s, "tok-2");
    fake_set(&f, "tok-2", 0);
    set_target(ex, 4, 1);
    await_replicas(&f, 5, 10);

    /* the API server moved on before the file did: 401, then the new one */
    fake_set(&f, "tok-3", 0);
    set_target(ex, 1, 1);
    sl_master_executor_stats_t st;
    await_stats(ex, any_client_error, &st, "a 401");
    cr_assert_eq(st.last_http_status, 401);
    cr_assert(strstr(st.last_error, "PATCH scale: HTTP 401: Unauthorized"), "%s", st.last_error);
    cr_assert_eq(st.applied, 5, "nothing was applied");
    sa_rotate(&s, "tok-3");
    await_replicas(&f, 2, 10);

    static req_rec_t r[MAX_REQS];
    int n = fake_reqs(&f, r);
    /* the answered requests carried tok-1, then tok-2, then tok-3 */
    int prev = 0, used[4] = {0};
    for (int i = 0; i < n; i++) {
        if (r[i].status != 200) continue;
        cr_assert(strncmp(r[i].auth, "Bearer tok-", 11) == 0, "request %d: %s", i, r[i].auth);
        int k = atoi(r[i].auth + 11);
        cr_assert(k >= prev && k <= 3, "request %d: %s after tok-%d", i, r[i].auth, prev);
        prev = k;
        used[k]++;
    }
    cr_assert(used[1] && used[2] && used[3], "tokens used: %d %d %d", used[1], used[2], used[3]);
    await_stats(ex, applied_is_desired, &st, "the PATCH's answer recorded");
    cr_assert_eq(st.failures, 0);
    cr_assert_eq(st.applied, 2);
    cr_assert_eq(st.desired, 2);
    sl_master_executor_destroy(ex);
    fake_stop(&f);
}

/* A 500 is retried after the back-off, doubling; meanwhile the master's
 * /status shows the API server's message and when it tries again. */
Test(k8s_executor, a_server_error_is_retried_with_backoff_and_shown)
{
    sa_t s;
    fake_api_t f;
    fake_up(&s, &f, 2);
    fake_set(&f, NULL, 2);
    char api[64];
    fu_master_t m = {0};
    master_args(&m, &s, &f, api);
    /* No job: the master wants no workers, so the Deployment goes to 0. */
    fu_master_start(&m);
    double deadline = fu_now() + tu_timeout(10);
    bool shown = false;
    while (fake_replicas(&f) != 0) {
        cr_assert(fu_now() < deadline, "the Deployment was not scaled to 0 in time");
        json_t *st = fu_get_json(m.admin, "/status");
        json_t *x = json_object_get(st, "executor");
        json_t *e = json_object_get(x, "last_error");
        if (json_is_object(e) && !shown) {
            shown = true;
            cr_assert_eq(json_integer_value(json_object_get(e, "http_status")), 500);
            cr_assert_str_eq(json_string_value(json_object_get(e, "message")),
                             "PATCH scale: HTTP 500: etcdserver: request timed out");
            cr_assert_geq(json_integer_value(json_object_get(x, "failures")), 1);
            cr_assert(json_is_real(json_object_get(x, "next_retry_s")));
            cr_assert_eq(json_integer_value(json_object_get(x, "applied")), 2);
            cr_assert_eq(json_integer_value(json_object_get(x, "desired")), 0);
        }
        json_decref(st);
        usleep(20 * 1000);
    }
    cr_assert(shown, "the error never showed in /status");
    static req_rec_t r[MAX_REQS];
    int n = fake_reqs(&f, r);
    cr_assert_eq(n, 4, "GET, two failed PATCHes, one that went through: %d", n);
    cr_assert_str_eq(r[0].method, "GET");
    for (int i = 1; i < 4; i++) {
        cr_assert_str_eq(r[i].method, "PATCH");
        cr_assert_str_eq(r[i].body, "{\"spec\":{\"replicas\":0}}");
        cr_assert_eq(r[i].status, i < 3 ? 500 : 200);
    }
    /* the back-off: 500 ms, then 1 s (the master's defaults) */
    cr_assert_geq(r[2].at - r[1].at, 0.45, "%.3f s", r[2].at - r[1].at);
    cr_assert_geq(r[3].at - r[2].at, 0.95, "%.3f s", r[3].at - r[2].at);
    /* the master reports its executor's figures every loop (200 ms) */
    json_t *st, *x;
    deadline = fu_now() + tu_timeout(5);
    for (;;) {
        st = fu_get_json(m.admin, "/status");
        x = json_object_get(st, "executor");
        if (json_integer_value(json_object_get(x, "applied")) == 0) break;
        json_decref(st);
        cr_assert(fu_now() < deadline, "/status does not show the scale applied");
        usleep(20 * 1000);
    }
    cr_assert_eq(json_integer_value(json_object_get(x, "failures")), 0);
    cr_assert(json_is_null(json_object_get(x, "next_retry_s")));
    cr_assert_eq(
        json_integer_value(json_object_get(json_object_get(x, "requests"), "server_error")), 2);
    /* the last error stays for whoever looks later */
    cr_assert_eq(
        json_integer_value(json_object_get(json_object_get(x, "last_error"), "http_status")), 500);
    json_decref(st);
    char *b;
    cr_assert_eq(fu_http(m.admin, "GET", "/metrics", NULL, NULL, &b), 200);
    cr_assert(strstr(b, "sluice_master_executor_requests_total{result=\"server_error\"} 2\n"), "%s",
              b);
    cr_assert(strstr(b, "sluice_master_executor_replicas{state=\"applied\"} 0\n"), "%s", b);
    free(b);
    fu_master_stop(&m, SIGTERM);
    /* and the master's log says so, once per failure */
    char *log = tu_read_file(m.log);
    cr_assert(strstr(log, "deployment " NS "/" DEPLOY ": PATCH scale: HTTP 500: etcdserver: "
                          "request timed out (failure 1 in a row; again in 500 ms)"),
              "%s", log);
    cr_assert(strstr(log, "(failure 2 in a row; again in 1000 ms)"), "%s", log);
    free(log);
    fake_stop(&f);
}

/* The sum is capped at max_replicas (--max-fleet-workers); a scale set by
 * hand is read again after resync_ms and set back. */
Test(k8s_executor, the_replicas_are_capped_and_a_hand_scale_is_set_back)
{
    sa_t s;
    fake_api_t f;
    fake_up(&s, &f, 0);
    sl_master_executor_t *ex = k8s_new_opts(&s, f.port, DEPLOY, 50, 4, 300);
    set_target(ex, 3, 3);
    await_replicas(&f, 4, 10);
    sl_master_executor_stats_t st;
    await_stats(ex, applied_is_desired, &st, "the PATCH's answer recorded");
    cr_assert_eq(st.desired, 4);
    cr_assert_eq(st.applied, 4);
    fake_put_replicas(&f, 9);
    await_replicas(&f, 4, 10);
    static req_rec_t r[MAX_REQS];
    int n = fake_reqs(&f, r);
    cr_assert_geq(n, 4, "GET, PATCH, GET (9), PATCH: %d", n);
    int last = n - 1; /* a resync GET may have come after it */
    while (last > 0 && strcmp(r[last].method, "PATCH") != 0)
        last--;
    cr_assert_str_eq(r[last].method, "PATCH");
    cr_assert_str_eq(r[last].body, "{\"spec\":{\"replicas\":4}}");
    cr_assert_str_eq(r[last - 1].method, "GET", "the PATCH follows the GET that read 9");
    cr_assert_eq(count_method(r, n, "PATCH"), 2);
    sl_master_executor_destroy(ex);
    fake_stop(&f);
}

/* A Deployment that is not there: the API server's 404 and message. */
Test(k8s_executor, a_missing_deployment_is_a_404_with_the_message)
{
    sa_t s;
    fake_api_t f;
    fake_up(&s, &f, 2);
    sl_master_executor_t *ex = k8s_new(&s, f.port, "other", 50);
    sl_master_executor_stats_t st;
    await_stats(ex, any_client_error, &st, "a 404");
    cr_assert_eq(st.last_http_status, 404);
    cr_assert_str_eq(st.last_error,
                     "GET scale: HTTP 404: the server could not find the requested resource");
    cr_assert_str_eq(st.target, NS "/other");
    cr_assert_eq(st.applied, -1);
    sl_master_executor_destroy(ex);
    cr_assert_eq(fake_replicas(&f), 2);
    fake_stop(&f);
}

/* TLS verification is on: an API server whose certificate the service
 * account's CA did not sign gets no request at all. */
Test(k8s_executor, a_server_not_signed_by_the_ca_is_refused)
{
    sa_t s;
    sa_make(&s, "tok-1");
    char other_cert[400], other_key[400];
    snprintf(other_cert, sizeof other_cert, "%s/other.crt", fu_dir);
    snprintf(other_key, sizeof other_key, "%s/other.key", fu_dir);
    tu_make_cert(other_cert, other_key, "127.0.0.1");
    fake_api_t f;
    fake_start(&f, other_cert, other_key, "tok-1", 2);
    sl_master_executor_t *ex = k8s_new(&s, f.port, DEPLOY, 50);
    set_target(ex, 1, 0);
    sl_master_executor_stats_t st;
    await_stats(ex, any_transport_error, &st, "a TLS failure");
    cr_assert_eq(st.last_http_status, 0);
    cr_assert_eq(st.requests_ok, 0);
    cr_assert(strstr(st.last_error, "GET scale: ") == st.last_error, "%s", st.last_error);
    cr_assert(strstr(st.last_error, "certificate") || strstr(st.last_error, "SSL"), "%s",
              st.last_error);
    sl_master_executor_destroy(ex);
    static req_rec_t r[MAX_REQS];
    cr_assert_eq(fake_reqs(&f, r), 0, "a request reached the untrusted server");
    cr_assert_eq(fake_replicas(&f), 2);
    fake_stop(&f);
}

/* What the executor refuses at the start, naming what is wrong. */
Test(k8s_executor, bad_options_are_refused_at_the_start)
{
    sa_t s;
    sa_make(&s, "tok-1");
    static const struct {
        const char *deployment, *ns, *api, *sa_sub;
        sl_err_t code;
        const char *msg;
    } cases[] = {
        {NULL, NULL, "https://127.0.0.1:1", NULL, SL_ERR_INVALID,
         "--k8s-deployment '': required with --executor kubernetes"},
        {"Workers", NULL, "https://127.0.0.1:1", NULL, SL_ERR_INVALID,
         "--k8s-deployment 'Workers': not a"},
        {"w", "a_b", "https://127.0.0.1:1", NULL, SL_ERR_INVALID,
         "namespace 'a_b': not a namespace name"},
        {"w", NULL, "http://127.0.0.1:1", NULL, SL_ERR_INVALID,
         "--k8s-api 'http://127.0.0.1:1': expected https"},
        {"w", NULL, "https://127.0.0.1:1/x", NULL, SL_ERR_INVALID,
         "--k8s-api 'https://127.0.0.1:1/x': expected"},
        {"w", NULL, "https://127.0.0.1:1", "nowhere", SL_ERR_IO,
         "no --k8s-namespace, and the service account's: namespace file "},
        {"w", "ns", "https://127.0.0.1:1", "nowhere", SL_ERR_IO, "service account: token file "},
        {"w", "ns", "https://127.0.0.1:1", "bad", SL_ERR_INVALID, "service account: token file "},
        {"w", "ns", "https://127.0.0.1:1", "empty", SL_ERR_INVALID, "service account: token file "},
    };
    char p[400];
    snprintf(p, sizeof p, "%s/bad", s.dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/bad/token", s.dir);
    fu_write(p, "tok-1\rX-Injected: 1\n"); /* a CR inside the first line */
    snprintf(p, sizeof p, "%s/empty", s.dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/empty/token", s.dir);
    fu_write(p, "\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[400];
        snprintf(dir, sizeof dir, "%s%s%s", s.dir, cases[i].sa_sub ? "/" : "",
                 cases[i].sa_sub ? cases[i].sa_sub : "");
        sl_master_executor_k8s_opts_t o = {.deployment = cases[i].deployment,
                                           .ns = cases[i].ns,
                                           .api_url = cases[i].api,
                                           .serviceaccount_dir = dir};
        sl_master_executor_t *ex = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_master_executor_k8s_new(&o, &ex, &err), cases[i].code, "case %zu: %s", i,
                     err.msg);
        cr_assert_null(ex);
        cr_assert(strstr(err.msg, cases[i].msg) == err.msg, "case %zu: %s", i, err.msg);
    }
    sl_master_executor_k8s_opts_t o = {
        .deployment = "w", .ns = "ns", .api_url = "https://127.0.0.1:1", .serviceaccount_dir = p};
    snprintf(p, sizeof p, "%s/bad", s.dir);
    char want[600];
    snprintf(want, sizeof want,
             "service account: token file %s/token: byte 5 is not a token "
             "character",
             p);
    sl_master_executor_t *ex = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_k8s_new(&o, &ex, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, want);
}

/* Out of memory at each allocation of start and of taking targets: a clear
 * SL_ERR_NOMEM, nothing left behind, and the executor still whole. */
Test(k8s_executor, out_of_memory_is_an_error_and_leaks_nothing)
{
    sa_t s;
    fake_api_t f;
    fake_up(&s, &f, 0);
    char api[64];
    snprintf(api, sizeof api, "https://127.0.0.1:%u", (unsigned)f.port);
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    sl_master_executor_k8s_opts_t o = {
        .deployment = DEPLOY, .api_url = api, .serviceaccount_dir = s.dir, .allocator = &ta.base};
    uint64_t k;
    for (k = 1;; k++) {
        tu_alloc_fail_at(&ta, k, false);
        sl_master_executor_t *ex = NULL;
        sl_error_t err = {0};
        sl_err_t rc = sl_master_executor_k8s_new(&o, &ex, &err);
        if (tu_alloc_failures(&ta) == 0) {
            cr_assert_eq(rc, SL_OK, "%s", err.msg);
            sl_master_executor_destroy(ex);
            break;
        }
        cr_assert_eq(rc, SL_ERR_NOMEM, "allocation %llu: %s", (unsigned long long)k, err.msg);
        cr_assert_null(ex);
        cr_assert(strstr(err.msg, "out of memory"), "%s", err.msg);
        tu_alloc_assert_clean(&ta);
    }
    cr_assert_geq(k, 3, "start allocates the executor and its answer buffer");
    tu_alloc_assert_clean(&ta);

    /* the targets' table: a job that does not fit is refused, the others
     * stay, and the executor goes on */
    tu_alloc_fail_at(&ta, 0, false);
    sl_master_executor_t *ex = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_k8s_new(&o, &ex, &err), SL_OK, "%s", err.msg);
    tu_alloc_fail_at(&ta, 1, true);
    sl_master_executor_target_t t[1] = {{"job-a", 2}};
    cr_assert_eq(sl_master_executor_apply(ex, t, 1, NULL, NULL, &err), SL_ERR_NOMEM);
    cr_assert_str_eq(err.msg, "executor: job job-a: out of memory");
    cr_assert_eq(sl_master_executor_count(ex, NULL), 0);
    tu_alloc_fail_at(&ta, 0, false);
    cr_assert_eq(sl_master_executor_apply(ex, t, 1, NULL, NULL, &err), SL_OK, "%s", err.msg);
    await_replicas(&f, 2, 10);
    sl_master_executor_destroy(ex);
    tu_alloc_assert_clean(&ta);
    fake_stop(&f);
}

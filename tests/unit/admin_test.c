/* The admin HTTP endpoint (src/dpp/admin/endpoint.c) over real sockets: routing,
 * path parameters, 404/405, bearer token (401 without, 403 when none is
 * configured), body limit (413), malformed JSON (400 naming where), garbage
 * requests, HEAD, job ids in the path, paths that are not UTF-8, the token
 * judged before the body is read, TLS with a verifying libcurl client, and
 * the Prometheus text builder. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/mem.h"
#include "dpp/admin/endpoint.h"
#include "common/prom.h"
#include "dpp/admin/ui.h"
#include "testutil.h"

static void h_status(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    int *calls = ctx;
    (*calls)++;
    sl_admin_reply_json(resp, 200, json_pack("{s:s}", "state", "serving"));
}

static void h_job_get(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    sl_admin_reply_json(resp, 200, json_pack("{s:s}", "id", req->param));
}

static void h_job_post(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    json_t *j = sl_admin_parse_json(req, resp);
    if (!j) return;
    json_t *name = json_object_get(j, "name");
    sl_admin_reply_json(
        resp, 201,
        json_pack("{s:s}", "created", json_is_string(name) ? json_string_value(name) : "?"));
    json_decref(j);
}

static void h_scale(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    sl_admin_reply_json(resp, 202, json_pack("{s:s}", "scaled", req->param));
}

static void h_metrics(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    (void)req;
    sl_prom_t p;
    sl_prom_init(&p, resp->a); /* the body is a string of the endpoint's allocator */
    sl_prom_family(&p, "sluice_batches_total", "counter", "Batches sent.");
    char lab[128];
    sl_prom_sample(&p, "sluice_batches_total", sl_prom_label(lab, sizeof lab, "job", "a\"b"), 42);
    resp->body = sl_prom_finish(&p);
    resp->content_type = SL_PROM_CONTENT_TYPE;
}

static const sl_admin_route_t routes[] = {
    {"GET", "/status", false, h_status},       {"GET", "/metrics", false, h_metrics},
    {"GET", "/jobs/{}", false, h_job_get},     {"POST", "/jobs", true, h_job_post},
    {"POST", "/jobs/{}/scale", true, h_scale},
};

static sl_admin_t *start(const char *token, size_t max_body, int *calls)
{
    sl_admin_opts_t o = {.token = token,
                         .max_body_bytes = max_body,
                         .routes = routes,
                         .num_routes = sizeof routes / sizeof routes[0],
                         .ctx = calls};
    sl_admin_t *a = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_OK, "%s", err.msg);
    cr_assert_gt(sl_admin_port(a), 0);
    return a;
}

/* Send raw bytes (then, with half_close, end our side), read the whole
 * reply (malloc'd: status line, headers, body). */
static char *exchange(uint16_t port, const char *raw, size_t raw_len, bool half_close)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    size_t off = 0;
    while (off < raw_len) {
        ssize_t n = send(fd, raw + off, raw_len - off, MSG_NOSIGNAL);
        if (n <= 0) break; /* the server may close early (413) */
        off += (size_t)n;
    }
    if (half_close) shutdown(fd, SHUT_WR);
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    ssize_t n;
    while ((n = recv(fd, buf + len, cap - len - 1, 0)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    close(fd);
    return buf;
}

/* Send raw bytes, read the whole reply; returns the status (0 when none) and
 * the body (malloc'd). */
static int http_raw(uint16_t port, const char *raw, size_t raw_len, char **body)
{
    char *buf = exchange(port, raw, raw_len, true);
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    char *b = strstr(buf, "\r\n\r\n");
    *body = strdup(b ? b + 4 : "");
    free(buf);
    return status;
}

static int http(uint16_t port, const char *method, const char *path, const char *auth,
                const char *body, char **reply)
{
    char req[8192];
    int n = snprintf(
        req, sizeof req,
        "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%sContent-Length: %zu\r\n\r\n%s",
        method, path, auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "",
        body ? strlen(body) : 0, body ? body : "");
    return http_raw(port, req, (size_t)n, reply);
}

Test(admin, routes_params_and_unknowns)
{
    int calls = 0;
    sl_admin_t *a = start("s3cret", 0, &calls);
    char *b;
    cr_assert_eq(http(sl_admin_port(a), "GET", "/status", NULL, NULL, &b), 200);
    cr_assert_str_eq(b, "{\"state\":\"serving\"}");
    free(b);
    cr_assert_eq(calls, 1);
    cr_assert_eq(http(sl_admin_port(a), "GET", "/jobs/j-17", NULL, NULL, &b), 200);
    cr_assert_str_eq(b, "{\"id\":\"j-17\"}");
    free(b);
    cr_assert_eq(http(sl_admin_port(a), "GET", "/nope", NULL, NULL, &b), 404);
    cr_assert(strstr(b, "\"error\"") && strstr(b, "/nope"), "%s", b);
    free(b);
    cr_assert_eq(http(sl_admin_port(a), "DELETE", "/status", NULL, NULL, &b), 405);
    cr_assert(strstr(b, "not allowed"), "%s", b);
    free(b);
    cr_assert_eq(http(sl_admin_port(a), "GET", "/jobs/", NULL, NULL, &b), 404);
    free(b);
    sl_admin_stop(a);
}

Test(admin, bearer_token_on_mutating_routes)
{
    int calls = 0;
    sl_admin_t *a = start("s3cret", 0, &calls);
    uint16_t port = sl_admin_port(a);
    char *b;
    cr_assert_eq(http(port, "POST", "/jobs", NULL, "{\"name\":\"x\"}", &b), 401);
    free(b);
    cr_assert_eq(http(port, "POST", "/jobs", "Bearer wrong", "{\"name\":\"x\"}", &b), 401);
    free(b);
    cr_assert_eq(http(port, "POST", "/jobs", "Bearer s3cre", "{\"name\":\"x\"}", &b), 401);
    free(b);
    cr_assert_eq(http(port, "POST", "/jobs", "Bearer s3cret", "{\"name\":\"x\"}", &b), 201);
    cr_assert_str_eq(b, "{\"created\":\"x\"}");
    free(b);
    cr_assert_eq(http(port, "POST", "/jobs/7/scale", "Bearer s3cret", "{}", &b), 202);
    cr_assert_str_eq(b, "{\"scaled\":\"7\"}");
    free(b);
    sl_admin_stop(a);

    a = start(NULL, 0, &calls);
    cr_assert_eq(http(sl_admin_port(a), "POST", "/jobs", "Bearer s3cret", "{}", &b), 403);
    cr_assert(strstr(b, "no admin token"), "%s", b);
    free(b);
    sl_admin_stop(a);
}

Test(admin, malformed_and_oversized_bodies)
{
    int calls = 0;
    sl_admin_t *a = start("t", 64, &calls);
    uint16_t port = sl_admin_port(a);
    char *b;
    cr_assert_eq(http(port, "POST", "/jobs", "Bearer t", "{\"name\": ", &b), 400);
    cr_assert(strstr(b, "malformed JSON at line 1"), "%s", b);
    free(b);
    cr_assert_eq(http(port, "POST", "/jobs", "Bearer t", "[1,2]", &b), 400);
    cr_assert(strstr(b, "expected a JSON object"), "%s", b);
    free(b);
    char big[200];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_assert_eq(http(port, "POST", "/jobs", "Bearer t", big, &b), 413);
    cr_assert(strstr(b, "over the limit of 64 bytes"), "%s", b);
    free(b);
    /* Garbage instead of HTTP: the server answers 400 or closes; it keeps serving. */
    const char junk[] = "\x01\x02 garbage\r\n\r\n";
    http_raw(port, junk, sizeof junk - 1, &b);
    free(b);
    cr_assert_eq(http(port, "GET", "/status", NULL, NULL, &b), 200);
    free(b);
    sl_admin_stop(a);
}

Test(admin, metrics_text)
{
    int calls = 0;
    sl_admin_t *a = start(NULL, 0, &calls);
    char *b;
    cr_assert_eq(http(sl_admin_port(a), "GET", "/metrics", NULL, NULL, &b), 200);
    cr_assert_str_eq(b, "# HELP sluice_batches_total Batches sent.\n"
                        "# TYPE sluice_batches_total counter\n"
                        "sluice_batches_total{job=\"a\\\"b\"} 42\n");
    free(b);
    sl_admin_stop(a);
}

Test(admin, token_load)
{
    char path[] = "/tmp/sluice-token-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "abc123 \n", 8), 8);
    close(fd);
    char *tok = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_admin_token_load(path, NULL, &tok, &err), SL_OK);
    cr_assert_str_eq(tok, "abc123");
    sl_admin_token_free(tok);
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    cr_assert_eq(sl_admin_token_load(path, NULL, &tok, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "empty"), "%s", err.msg);
    unlink(path);
    setenv("SLUICE_TEST_TOKEN", "envtok", 1);
    cr_assert_eq(sl_admin_token_load(NULL, "SLUICE_TEST_TOKEN", &tok, &err), SL_OK);
    cr_assert_str_eq(tok, "envtok");
    sl_admin_token_free(tok);
    unsetenv("SLUICE_TEST_TOKEN");
    cr_assert_eq(sl_admin_token_load(NULL, "SLUICE_TEST_TOKEN", &tok, &err), SL_OK);
    cr_assert_null(tok);
    cr_assert_eq(sl_admin_token_load("/nonexistent/token", NULL, &tok, &err), SL_ERR_IO);
}

/* The whole reply (status line, headers, body) of raw bytes; our side
 * stays open, as a client's that would send a body next. */
static char *http_whole(uint16_t port, const char *raw)
{
    return exchange(port, raw, strlen(raw), false);
}

static void expect_path_error(uint16_t port, const char *path, int status, const char *needle);

static void h_page(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    (void)req;
    sl_admin_ui_reply(resp, "status.html");
}

Test(admin, status_pages_are_compiled_in_with_their_csp)
{
    static const sl_admin_route_t page_routes[] = {
        {"GET", "/", false, h_page},
        {"GET", "/ui/{}", false, sl_admin_ui_handler},
    };
    sl_admin_opts_t o = {.routes = page_routes, .num_routes = 2};
    sl_admin_t *a = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_OK, "%s", err.msg);
    uint16_t port = sl_admin_port(a);
    const sl_admin_asset_t *page = sl_admin_ui_find("status.html");
    cr_assert_not_null(page);
    cr_assert_eq(page->len, strlen(page->data));
    char *r = http_whole(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    cr_assert(strstr(r, "\r\nContent-Type: text/html; charset=utf-8\r\n"), "%s", r);
    cr_assert(strstr(r, "\r\nContent-Security-Policy: " SL_ADMIN_UI_CSP "\r\n"), "%s", r);
    cr_assert(strstr(r, "\r\nX-Content-Type-Options: nosniff\r\n"), "%s", r);
    char *body = strstr(r, "\r\n\r\n") + 4;
    cr_assert_str_eq(body, page->data);
    cr_assert(strstr(body, "<main id=\"worker\" hidden>"), "%s", body);
    free(r);
    /* every file the pages name is served, with its type */
    const char *files[][2] = {{"status.js", "text/javascript; charset=utf-8"},
                              {"status.css", "text/css; charset=utf-8"}};
    for (int i = 0; i < 2; i++) {
        char req[256], want[128];
        snprintf(req, sizeof req, "GET /ui/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 files[i][0]);
        snprintf(want, sizeof want, "\r\nContent-Type: %s\r\n", files[i][1]);
        r = http_whole(port, req);
        cr_assert(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
        cr_assert(strstr(r, want), "%s", r);
        cr_assert_str_eq(strstr(r, "\r\n\r\n") + 4, sl_admin_ui_find(files[i][0])->data);
        free(r);
    }
    expect_path_error(port, "/ui/nope.js", 404, "/ui/nope.js: no such file");
    expect_path_error(port, "/ui/status.html", 404, "the page is at /");
    expect_path_error(port, "/ui/..", 400, "contains \"..\"");
    sl_admin_stop(a);
}

Test(admin, head_answers_where_get_does)
{
    int calls = 0;
    sl_admin_t *a = start(NULL, 0, &calls);
    uint16_t port = sl_admin_port(a);
    char *r = http_whole(port, "HEAD /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    /* the length GET's body has, and no body */
    cr_assert(strstr(r, "Content-Length: 19\r\n"), "%s", r); /* {"state":"serving"} */
    cr_assert(strstr(r, "application/json"), "%s", r);
    char *end = strstr(r, "\r\n\r\n");
    cr_assert(end && end[4] == '\0', "a body after HEAD: %s", r);
    cr_assert_eq(calls, 1);
    free(r);
    r = http_whole(port, "HEAD /jobs/j-1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert(strncmp(r, "HTTP/1.1 200", 12) == 0, "%s", r);
    free(r);
    r = http_whole(port, "HEAD /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert(strncmp(r, "HTTP/1.1 404", 12) == 0, "%s", r);
    end = strstr(r, "\r\n\r\n");
    cr_assert(end && end[4] == '\0', "a body after HEAD: %s", r);
    free(r);
    /* HEAD is GET's: not a way around a mutating route's token */
    r = http_whole(port, "HEAD /jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert(strncmp(r, "HTTP/1.1 405", 12) == 0, "%s", r);
    free(r);
    sl_admin_stop(a);
}

/* GET path (raw bytes); expect status and an error message (valid JSON)
 * containing needle. */
static void expect_path_error(uint16_t port, const char *path, int status, const char *needle)
{
    char req[512];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    char *b;
    cr_assert_eq(http_raw(port, req, strlen(req), &b), status, "%s: %s", path, b);
    json_error_t je;
    json_t *j = json_loads(b, 0, &je);
    cr_assert_not_null(j, "%s: not JSON (%s): %s", path, je.text, b);
    const char *msg = json_string_value(json_object_get(j, "error"));
    cr_assert(msg && strstr(msg, needle), "%s: '%s' lacks '%s'", path, msg ? msg : "(none)",
              needle);
    json_decref(j);
    free(b);
}

Test(admin, job_ids_in_the_path_and_bytes_that_are_not_utf8)
{
    int calls = 0;
    sl_admin_t *a = start(NULL, 0, &calls);
    uint16_t port = sl_admin_port(a);
    expect_path_error(port, "/jobs/a%00b", 400, "the job id in the path contains a NUL byte");
    expect_path_error(port, "/jobs/..%2Fetc", 400, "contains '/'");
    expect_path_error(port, "/jobs/..", 400, "contains \"..\"");
    expect_path_error(port, "/jobs/a..b", 400, "contains \"..\"");
    expect_path_error(port, "/jobs/.", 400, "is \".\"");
    expect_path_error(port, "/jobs/a%20b", 400, "contains the byte 0x20 (' ')");
    expect_path_error(port, "/jobs/%ff", 400, "contains the byte 0xff");
    char longid[400] = "/jobs/";
    memset(longid + 6, 'x', 300);
    longid[306] = '\0';
    expect_path_error(port, longid, 400, "longer than 255 bytes");
    /* a path that is not UTF-8 keeps its message, its bytes escaped */
    expect_path_error(port, "/\xff\xfe/x", 404, "GET /\\xff\\xfe/x: no such route");
    expect_path_error(port, "/st\xc3\xa9tus", 404, "GET /st\xc3\xa9tus: no such route");
    cr_assert_eq(calls, 0);
    /* good ids pass, percent-decoded */
    char *b;
    cr_assert_eq(http(port, "GET", "/jobs/ok.id_1-2", NULL, NULL, &b), 200);
    cr_assert_str_eq(b, "{\"id\":\"ok.id_1-2\"}");
    free(b);
    cr_assert_eq(http(port, "GET", "/jobs/j%2D1", NULL, NULL, &b), 200);
    cr_assert_str_eq(b, "{\"id\":\"j-1\"}");
    free(b);
    cr_assert_eq(http(port, "GET", "/status?verbose=1", NULL, NULL, &b), 200);
    free(b);
    sl_admin_stop(a);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

Test(admin, the_token_is_checked_before_the_body_is_read)
{
    int calls = 0;
    sl_admin_t *a = start("s3cret", 8u << 20, &calls);
    uint16_t port = sl_admin_port(a);
    /* headers announcing 8 MiB, and not one body byte: the answer comes */
    const char *methods[] = {"POST /jobs", "POST /jobs/7/scale"};
    for (int i = 0; i < 2; i++) {
        char req[256];
        snprintf(req, sizeof req,
                 "%s HTTP/1.1\r\nHost: x\r\nContent-Length: 8388608\r\n"
                 "Authorization: Bearer wrong\r\n\r\n",
                 methods[i]);
        double t0 = now_s();
        char *r = http_whole(port, req);
        cr_assert(strncmp(r, "HTTP/1.1 401", 12) == 0, "%s", r);
        cr_assert(strstr(r, "missing or wrong bearer token"), "%s", r);
        cr_assert_lt(now_s() - t0, tu_timeout(2));
        free(r);
    }
    /* Expect: 100-continue gets the refusal instead of the go-ahead */
    char *r = http_whole(port, "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                               "Expect: 100-continue\r\n\r\n");
    cr_assert(strncmp(r, "HTTP/1.1 401", 12) == 0, "%s", r);
    free(r);
    /* over the limit: 413 from the header, also with the right token */
    r = http_whole(port, "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 8388609\r\n"
                         "Authorization: Bearer s3cret\r\n\r\n");
    cr_assert(strncmp(r, "HTTP/1.1 413", 12) == 0, "%s", r);
    free(r);
    cr_assert_eq(calls, 0);
    sl_admin_stop(a);
}

/* ---- TLS ---- */

typedef struct sink {
    char buf[4096];
    size_t len;
} sink_t;

static size_t sink_write(char *p, size_t size, size_t n, void *ctx)
{
    sink_t *s = ctx;
    size_t k = size * n;
    if (k > sizeof s->buf - 1 - s->len) k = sizeof s->buf - 1 - s->len;
    memcpy(s->buf + s->len, p, k);
    s->len += k;
    s->buf[s->len] = '\0';
    return size * n;
}

/* GET url with libcurl, verifying the peer against ca (NULL: the system's
 * authorities). @return curl's result; *status and body set on success. */
static CURLcode curl_get(const char *url, const char *ca, long *status, sink_t *body)
{
    CURL *c = curl_easy_init();
    cr_assert_not_null(c);
    body->len = 0;
    body->buf[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (ca) curl_easy_setopt(c, CURLOPT_CAINFO, ca);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(tu_timeout(10) * 1000));
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(c);
    return rc;
}

Test(admin, tls_with_a_client_that_verifies_the_certificate)
{
    char *dir = tu_mkdtemp("admin-tls");
    char *cert = tu_path(dir, "cert.pem"), *key = tu_path(dir, "key.pem");
    tu_make_cert(cert, key, "127.0.0.1");
    int calls = 0;
    sl_admin_opts_t o = {.token = "t",
                         .routes = routes,
                         .num_routes = sizeof routes / sizeof routes[0],
                         .ctx = &calls,
                         .tls_cert_file = cert,
                         .tls_key_file = key};
    sl_admin_t *a = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_OK, "%s", err.msg);
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%u/status", (unsigned)sl_admin_port(a));
    long status = 0;
    sink_t body;
    CURLcode rc = curl_get(url, cert, &status, &body);
    cr_assert_eq(rc, CURLE_OK, "%s", curl_easy_strerror(rc));
    cr_assert_eq(status, 200);
    cr_assert_str_eq(body.buf, "{\"state\":\"serving\"}");
    /* a client that does not trust this certificate gives up */
    rc = curl_get(url, NULL, &status, &body);
    cr_assert(rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                  rc == CURLE_SSL_CONNECT_ERROR,
              "%d %s", rc, curl_easy_strerror(rc));
    /* plain HTTP on the TLS port gets no answer */
    char *b;
    cr_assert_eq(http(sl_admin_port(a), "GET", "/status", NULL, NULL, &b), 0, "%s", b);
    free(b);
    cr_assert_eq(calls, 1);
    sl_admin_stop(a);

    /* refused at start, naming the file and why */
    o.tls_key_file = "/nonexistent/key.pem";
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "TLS key /nonexistent/key.pem: No such file"), "%s", err.msg);
    o.tls_key_file = NULL;
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "--tls-key"), "%s", err.msg);
    o.tls_key_file = cert; /* a certificate where the key should be */
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, cert) && strstr(err.msg, "with key"), "%s", err.msg);
    chmod(key, 0);
    if (access(key, R_OK) != 0) { /* root reads anything */
        o.tls_key_file = key;
        cr_assert_eq(sl_admin_start(&o, &a, &err), SL_ERR_IO);
        cr_assert(strstr(err.msg, "Permission denied"), "%s", err.msg);
    }
    unlink(cert);
    unlink(key);
    rmdir(dir);
    free(cert);
    free(key);
    free(dir);
}

Test(prom, values_and_escaping)
{
    sl_prom_t p;
    sl_prom_init(&p, NULL);
    char lab[16];
    sl_prom_sample(&p, "a", NULL, 1.5);
    sl_prom_sample(&p, "b", sl_prom_label(lab, sizeof lab, "k", "x\ny\\"), -3);
    sl_prom_sample(&p, "c", NULL, 0.0 / 0.0);
    sl_prom_sample(&p, "d", sl_prom_label(lab, sizeof lab, "key", "a-very-long-value"), 1);
    char *t = sl_prom_finish(&p);
    cr_assert_not_null(t);
    cr_assert(strstr(t, "a 1.5\n"), "%s", t);
    cr_assert(strstr(t, "b{k=\"x\\ny\\\\\"} -3\n"), "%s", t);
    cr_assert(strstr(t, "c NaN\n"), "%s", t);
    cr_assert(strlen(lab) < sizeof lab);
    sl_strfree(NULL, t);
}

Test(prom, histogram_buckets_are_cumulative)
{
    sl_prom_t p;
    sl_prom_init(&p, NULL);
    const double bounds[] = {0.1, 1, 2.5};
    const uint64_t counts[] = {3, 0, 4}; /* per bucket; 2 more above 2.5 */
    char lab[32];
    sl_prom_family(&p, "x_seconds", "histogram", "X.");
    sl_prom_histogram(&p, "x_seconds", sl_prom_label(lab, sizeof lab, "job", "j"), bounds, counts,
                      3, 12.25, 9);
    sl_prom_histogram(&p, "y", NULL, bounds, counts, 1, 0.5, 3);
    char *t = sl_prom_finish(&p);
    cr_assert_str_eq(t, "# HELP x_seconds X.\n"
                        "# TYPE x_seconds histogram\n"
                        "x_seconds_bucket{job=\"j\",le=\"0.1\"} 3\n"
                        "x_seconds_bucket{job=\"j\",le=\"1\"} 3\n"
                        "x_seconds_bucket{job=\"j\",le=\"2.5\"} 7\n"
                        "x_seconds_bucket{job=\"j\",le=\"+Inf\"} 9\n"
                        "x_seconds_sum{job=\"j\"} 12.25\n"
                        "x_seconds_count{job=\"j\"} 9\n"
                        "y_bucket{le=\"0.1\"} 3\n"
                        "y_bucket{le=\"+Inf\"} 3\n"
                        "y_sum 0.5\n"
                        "y_count 3\n");
    sl_strfree(NULL, t);
}

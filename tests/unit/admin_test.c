/* The admin HTTP endpoint (src/dpp/admin.c) over real sockets: routing,
 * path parameters, 404/405, bearer token (401 without, 403 when none is
 * configured), body limit (413), malformed JSON (400 naming where), garbage
 * requests, and the Prometheus text builder. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include "dpp/admin.h"
#include "dpp/prom.h"

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
    sl_admin_reply_json(resp, 201,
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
    sl_prom_init(&p);
    sl_prom_family(&p, "sluice_batches_total", "counter", "Batches sent.");
    char lab[128];
    sl_prom_sample(&p, "sluice_batches_total", sl_prom_label(lab, sizeof lab, "job", "a\"b"), 42);
    resp->body = sl_prom_finish(&p);
    resp->content_type = SL_PROM_CONTENT_TYPE;
}

static const sl_admin_route_t routes[] = {
    {"GET", "/status", false, h_status},
    {"GET", "/metrics", false, h_metrics},
    {"GET", "/jobs/{}", false, h_job_get},
    {"POST", "/jobs", true, h_job_post},
    {"POST", "/jobs/{}/scale", true, h_scale},
};

static sl_admin_t *start(const char *token, size_t max_body, int *calls)
{
    sl_admin_opts_t o = {.token = token, .max_body_bytes = max_body, .routes = routes,
                         .num_routes = sizeof routes / sizeof routes[0], .ctx = calls};
    sl_admin_t *a = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_OK, "%s", err.msg);
    cr_assert_gt(sl_admin_port(a), 0);
    return a;
}

/* Send raw bytes, read the whole reply; returns the status (0 when none) and
 * the body (malloc'd). */
static int http_raw(uint16_t port, const char *raw, size_t raw_len, char **body)
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
    shutdown(fd, SHUT_WR);
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    ssize_t n;
    while ((n = recv(fd, buf + len, cap - len - 1, 0)) > 0) len += (size_t)n;
    buf[len] = '\0';
    close(fd);
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
    int n = snprintf(req, sizeof req,
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
    free(tok);
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    cr_assert_eq(sl_admin_token_load(path, NULL, &tok, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "empty"), "%s", err.msg);
    unlink(path);
    setenv("SLUICE_TEST_TOKEN", "envtok", 1);
    cr_assert_eq(sl_admin_token_load(NULL, "SLUICE_TEST_TOKEN", &tok, &err), SL_OK);
    cr_assert_str_eq(tok, "envtok");
    free(tok);
    unsetenv("SLUICE_TEST_TOKEN");
    cr_assert_eq(sl_admin_token_load(NULL, "SLUICE_TEST_TOKEN", &tok, &err), SL_OK);
    cr_assert_null(tok);
    cr_assert_eq(sl_admin_token_load("/nonexistent/token", NULL, &tok, &err), SL_ERR_IO);
}

Test(prom, values_and_escaping)
{
    sl_prom_t p;
    sl_prom_init(&p);
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
    free(t);
}

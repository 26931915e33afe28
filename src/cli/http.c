/* The sluice program's HTTP client (http.h): libcurl, one easy handle per
 * command (its connection is reused between the requests of one command,
 * e.g. `sluice submit --wait` polling), replies kept whole up to a bound. */
#include "http.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "dpp/admin/endpoint.h"
#include "netlib/netlib_curl.h"

/* Replies bigger than this are refused: the job list of a busy master fits. */
#define MAX_REPLY (16u << 20)

/* libcurl's functions: loaded by sl_cli_http_new before any call here. */
static const sl_netlib_curl_t *libcurl(void)
{
    return sl_netlib_curl(NULL);
}

#define AC(field) offsetof(sl_cli_admin_client_args_t, field)

static const sl_cli_opt_t client_opts[] = {
    {"admin", SL_CLI_STRING, "HOST:PORT", NULL, NULL, 0, 0, SL_CLI_REQUIRED, AC(admin),
     "the master's admin endpoint: HOST:PORT (http, or https with --tls-ca), or a URL "
     "http://HOST:PORT or https://HOST:PORT"},
    {"token-file", SL_CLI_PATH, "FILE", NULL, "`$SLUICE_ADMIN_TOKEN`", 0, 0, 0, AC(token_file),
     "bearer token for the admin endpoint's mutating routes (the first line of FILE)"},
    {"tls-ca", SL_CLI_FILE, "FILE", NULL, "the system's CAs", 0, 0, 0, AC(tls_ca),
     "verify the endpoint's HTTPS certificate against this PEM CA bundle (or the self-signed "
     "certificate itself); implies https"},
    {"request-timeout-s", SL_CLI_UINT, "S", "30", NULL, 1, 3600, 0, AC(timeout_s),
     "give up on one request (connect, send, answer) after S seconds"},
};

const sl_cli_group_t sl_cli_admin_client_group = {"admin client", "admin client options",
                                                  client_opts,
                                                  sizeof client_opts / sizeof client_opts[0]};

struct sl_cli_http {
    const char *cmd;
    char base[300]; /* "https://host:port", no trailing '/' */
    char *token;    /* from sl_admin_token_load */
    CURL *curl;
    struct curl_slist *headers;
    char noproxy[4096];
};

/* ---- replies ---- */

static bool reply_grow(sl_cli_http_reply_t *r, size_t need)
{
    return need <= r->cap || SL_GROW(NULL, r->body, r->cap, need, 4096);
}

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
    sl_cli_http_reply_t *r = ctx;
    size_t len = size * n;
    /* a short count makes libcurl stop with CURLE_WRITE_ERROR */
    if (r->len + len >= MAX_REPLY) {
        r->too_big = true;
        return 0;
    }
    if (!reply_grow(r, r->len + len + 1)) return 0;
    memcpy(r->body + r->len, p, len);
    r->len += len;
    r->body[r->len] = '\0';
    return len;
}

void sl_cli_http_reply_free(sl_cli_http_reply_t *r)
{
    if (r->body != NULL) sl_free(NULL, r->body, r->cap);
    r->body = NULL;
    r->len = r->cap = 0;
}

/* ---- the client ---- */

int sl_cli_http_new(const char *cmd, const sl_cli_admin_client_args_t *args, sl_cli_http_t **out)
{
    *out = NULL;
    const char *a = args->admin;
    bool has_scheme = strncmp(a, "http://", 7) == 0 || strncmp(a, "https://", 8) == 0;
    if (args->tls_ca != NULL && strncmp(a, "http://", 7) == 0)
        return sl_cli_usage_error(cmd, "--tls-ca with a plain http:// --admin '%s'", a);
    if (!has_scheme && strstr(a, "://") != NULL)
        return sl_cli_usage_error(cmd, "--admin '%s': the scheme is http:// or https://", a);
    if (!has_scheme && strchr(a, ':') == NULL)
        return sl_cli_usage_error(cmd, "--admin '%s': expected HOST:PORT or a URL", a);
    sl_cli_http_t *c = sl_calloc(NULL, 1, sizeof *c);
    if (c == NULL) {
        fprintf(stderr, "sluice %s: out of memory\n", cmd);
        return 1;
    }
    c->cmd = cmd;
    int n = snprintf(c->base, sizeof c->base, "%s%s",
                     has_scheme     ? ""
                     : args->tls_ca ? "https://"
                                    : "http://",
                     a);
    if (n < 0 || (size_t)n >= sizeof c->base) {
        sl_free(NULL, c, sizeof *c);
        return sl_cli_usage_error(cmd, "--admin '%s': too long", a);
    }
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    sl_error_t err = {0};
    if (sl_admin_token_load(args->token_file, "SLUICE_ADMIN_TOKEN", &c->token, &err) != SL_OK) {
        fprintf(stderr, "sluice %s: %s\n", cmd, err.msg);
        sl_cli_http_destroy(c);
        return 1;
    }
    if (sl_netlib_curl(&err) == NULL) {
        fprintf(stderr, "sluice %s: %s\n", cmd, err.msg);
        sl_cli_http_destroy(c);
        return 1;
    }
    c->curl = libcurl()->easy_init();
    char auth[1024];
    c->headers = libcurl()->slist_append(NULL, "Content-Type: application/json");
    if (c->headers != NULL && c->token != NULL) {
        if ((size_t)snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->token) >=
            sizeof auth) {
            fprintf(stderr, "sluice %s: the admin token is over 1000 bytes\n", cmd);
            sl_cli_http_destroy(c);
            return 1;
        }
        struct curl_slist *h = libcurl()->slist_append(c->headers, auth); /* a copy */
        memset(auth, 0, sizeof auth);
        if (h == NULL) {
            libcurl()->slist_free_all(c->headers);
            c->headers = NULL;
        } else {
            c->headers = h;
        }
    }
    if (c->curl == NULL || c->headers == NULL) {
        fprintf(stderr, "sluice %s: out of memory (libcurl)\n", cmd);
        sl_cli_http_destroy(c);
        return 1;
    }
    long timeout_ms = (long)args->timeout_s * 1000;
    libcurl()->easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->headers);
    libcurl()->easy_setopt(c->curl, CURLOPT_USERAGENT, "sluice/" SLUICE_VERSION);
    libcurl()->easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    libcurl()->easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS,
                           timeout_ms < 10000 ? timeout_ms : 10000);
    libcurl()->easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    libcurl()->easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    libcurl()->easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
    if (args->tls_ca != NULL) libcurl()->easy_setopt(c->curl, CURLOPT_CAINFO, args->tls_ca);
    /* $no_proxy as libcurl reads it, plus loopback: no proxy can reach a
     * master's endpoint on this machine's loopback (CURLOPT_NOPROXY
     * replaces the variable, so it is carried over). */
    const char *env = getenv("no_proxy");
    if (env == NULL || *env == '\0') env = getenv("NO_PROXY");
    snprintf(c->noproxy, sizeof c->noproxy, "%s%s127.0.0.1,localhost,::1", env != NULL ? env : "",
             env != NULL && *env != '\0' ? "," : "");
    libcurl()->easy_setopt(c->curl, CURLOPT_NOPROXY, c->noproxy);
    *out = c;
    return 0;
}

void sl_cli_http_destroy(sl_cli_http_t *c)
{
    if (c == NULL) return;
    if (c->headers != NULL) libcurl()->slist_free_all(c->headers);
    if (c->curl != NULL) libcurl()->easy_cleanup(c->curl);
    sl_admin_token_free(c->token);
    sl_free(NULL, c, sizeof *c);
}

int sl_cli_http_request(sl_cli_http_t *c, const char *method, const char *path, const char *body,
                        sl_cli_http_reply_t *r)
{
    *r = (sl_cli_http_reply_t){0};
    char url[2048];
    int k = snprintf(url, sizeof url, "%s%s", c->base, path);
    snprintf(r->url, sizeof r->url, "%.8s %.500s", method, url); /* for messages only */
    if (k < 0 || (size_t)k >= sizeof url) { /* cut short, it would name another resource */
        fprintf(stderr, "sluice %s: %s %.200s...: the URL is over %zu bytes\n", c->cmd, method, url,
                sizeof url - 1);
        return -1;
    }
    char why[CURL_ERROR_SIZE] = "";
    CURL *h = c->curl;
    libcurl()->easy_setopt(h, CURLOPT_URL, url);
    libcurl()->easy_setopt(h, CURLOPT_ERRORBUFFER, why);
    libcurl()->easy_setopt(h, CURLOPT_WRITEDATA, r);
    libcurl()->easy_setopt(h, CURLOPT_HTTPGET, 1L); /* resets a previous POST */
    libcurl()->easy_setopt(h, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") == 0 ? NULL : method);
    if (body != NULL) {
        libcurl()->easy_setopt(h, CURLOPT_POSTFIELDS, body);
        libcurl()->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    CURLcode rc = libcurl()->easy_perform(h);
    libcurl()->easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    if (rc == CURLE_OK && reply_grow(r, 1)) {
        if (r->len == 0) r->body[0] = '\0';
        libcurl()->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
        return 0;
    }
    if (r->too_big)
        fprintf(stderr, "sluice %s: %s: the reply is over %u bytes\n", c->cmd, r->url, MAX_REPLY);
    else
        fprintf(stderr, "sluice %s: %s: %s\n", c->cmd, r->url,
                rc == CURLE_OK   ? "out of memory"
                : why[0] != '\0' ? why
                                 : libcurl()->easy_strerror(rc));
    sl_cli_http_reply_free(r);
    return -1;
}

void sl_cli_http_print_refusal(const sl_cli_http_t *c, const sl_cli_http_reply_t *r)
{
    json_t *j = json_loads(r->body != NULL ? r->body : "", 0, NULL);
    const char *e = json_string_value(json_object_get(j, "error"));
    fprintf(stderr, "sluice %s: %s: HTTP %ld: %s\n", c->cmd, r->url, r->status,
            e != NULL                       ? e
            : r->body != NULL && r->len > 0 ? r->body
                                            : "(no body)");
    /* a refused spec: every problem, one per line */
    json_t *problems = json_object_get(j, "problems");
    for (size_t i = 0; i < json_array_size(problems); i++)
        if (json_is_string(json_array_get(problems, i)))
            fprintf(stderr, "  %s\n", json_string_value(json_array_get(problems, i)));
    json_decref(j);
}

bool sl_cli_http_path(sl_cli_http_t *c, const char *prefix, const char *segment, const char *suffix,
                      char *out, size_t cap)
{
    char *esc = libcurl()->easy_escape(c->curl, segment, 0);
    if (esc == NULL) return false;
    int n = snprintf(out, cap, "%s%s%s", prefix, esc, suffix);
    libcurl()->free_string(esc);
    return n >= 0 && (size_t)n < cap;
}

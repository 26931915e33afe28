/* Admin HTTP endpoint (endpoint.h) on the server of httpd/server.h
 * (libmicrohttpd: address, connection limits and timeouts, TLS): routing,
 * job-id path segments, bearer-token check and body limit from the
 * headers, JSON replies, the TLS files read and checked. */
#include "dpp/admin/endpoint.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "common/err.h"
#include "common/fileio.h"
#include "common/mem.h"
#include "common/parse.h"
#include "dpp/admin/ui.h"
#include "httpd/server.h"
#include "netlib/netlib.h"
#include "netlib/netlib_gnutls.h"

struct sl_admin {
    sl_httpd_t *httpd;
    sl_admin_opts_t opts;
    const sl_allocator_t *a;
    char *token;
    char *tls_cert, *tls_key; /* PEM text (owned strings), kept for the server's life */
};

/* libmicrohttpd's functions: loaded by sl_httpd_start, under which every
 * call here runs. */
static const sl_netlib_mhd_t *libmicrohttpd(void)
{
    return sl_netlib_mhd(NULL);
}

/* Per-request state across libmicrohttpd's calls for one request. */
typedef struct request_state {
    const sl_admin_route_t *route; /* chosen from the headers */
    char param[256];               /* the "{}" segment, decoded */
    bool replied;                  /* refused from the headers: the body is dropped */
    char *body;
    size_t len, cap;
    bool too_large;
} request_state_t;

#define MAX_SEGMENTS 16

static bool token_equal(const char *given, const char *expected)
{
    /* No early exit: the time does not tell how much of a guess was right. */
    size_t lg = strlen(given), le = strlen(expected);
    unsigned char diff = (unsigned char)(lg != le);
    for (size_t i = 0; i < le; i++)
        diff |= (unsigned char)((i < lg ? given[i] : 0) ^ expected[i]);
    return diff == 0;
}

/* Length of the valid UTF-8 sequence at p (n bytes left), 0 when invalid
 * (overlong, surrogate, past U+10FFFF, cut short): the rules JSON strings
 * (jansson) hold. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    if (p[0] < 0x80) return 1;
    size_t len = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc0 ? 2 : 0;
    if (len == 0 || len > n || p[0] > 0xf4) return 0;
    uint32_t cp = p[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* Copy s to out (cap bytes), writing every byte that is not part of valid
 * UTF-8 as the text \xNN, so the message survives as a JSON string. */
static void utf8_clean(const char *s, char *out, size_t cap)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), o = 0;
    while (n > 0 && o + 5 < cap) {
        size_t k = utf8_seq(p, n);
        if (k == 0) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", p[0]);
            k = 1;
        } else {
            if (o + k >= cap) break;
            memcpy(out + o, p, k);
            o += k;
        }
        p += k;
        n -= k;
    }
    out[o] = '\0';
}

char *sl_admin_json_text(const sl_allocator_t *a, const json_t *j, size_t flags)
{
    /* twice through json_dumpb: the size, then the text into our block */
    size_t n = j != NULL ? json_dumpb(j, NULL, 0, flags) : 0;
    if (n == 0) return NULL;
    char *s = sl_alloc(a, n + 1);
    if (s == NULL) return NULL;
    if (json_dumpb(j, s, n, flags) != n) {
        sl_free(a, s, n + 1);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

/* The body goes; a failure to make the next one leaves a bodiless 503. */
static void reply_set(sl_admin_response_t *resp, int status, const char *content_type, char *body)
{
    sl_strfree(resp->a, resp->body);
    resp->body = body;
    resp->status = body != NULL ? status : 503;
    resp->content_type = content_type;
}

void sl_admin_reply_json(sl_admin_response_t *resp, int status, json_t *body)
{
    if (!body) body = json_object();
    reply_set(resp, status, NULL, sl_admin_json_text(resp->a, body, JSON_COMPACT));
    json_decref(body);
}

void sl_admin_reply_text(sl_admin_response_t *resp, int status, const char *content_type,
                         const char *text)
{
    reply_set(resp, status, content_type, sl_strdup(resp->a, text != NULL ? text : ""));
}

void sl_admin_reply_error(sl_admin_response_t *resp, int status, const char *fmt, ...)
{
    char msg[512], clean[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* A message that quotes the request (an invalid-UTF-8 path) must stay a
     * JSON string, not vanish into "{}". */
    utf8_clean(msg, clean, sizeof clean);
    sl_admin_reply_json(resp, status, json_pack("{s:s}", "error", clean));
}

json_t *sl_admin_parse_json(const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        sl_admin_reply_error(resp, 400, "request body: malformed JSON at line %d column %d: %s",
                             jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        sl_admin_reply_error(resp, 400, "request body: expected a JSON object");
        return NULL;
    }
    return j;
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, sl_admin_response_t *r,
                                  bool bearer_challenge)
{
    /* The CSP on every answer, not only the pages: a JSON body opened as a
     * page can run nothing either (ui.h). */
    const char *extra[] = {"Content-Security-Policy", SL_ADMIN_UI_CSP,
                           bearer_challenge ? "WWW-Authenticate" : NULL, "Bearer", NULL};
    /* The server copies the body; ours goes back to ours at once. */
    enum MHD_Result ret = sl_httpd_reply(conn, (unsigned int)r->status,
                                         r->content_type ? r->content_type : "application/json",
                                         r->body, r->body ? strlen(r->body) : 0, extra);
    sl_strfree(r->a, r->body);
    r->body = NULL;
    return ret;
}

static enum MHD_Result reply_error_now(sl_admin_t *admin, struct MHD_Connection *conn, int status,
                                       const char *msg)
{
    sl_admin_response_t r = {.a = admin->a};
    sl_admin_reply_error(&r, status, "%s", msg);
    return send_reply(conn, &r, status == 401);
}

/* The path, percent-decoded segment by segment (libmicrohttpd hands it over
 * undecoded: its own decoding would cut a "%00" short and merge a "%2F"
 * into the path). len[i] counts a decoded NUL too. */
typedef struct path_segs {
    char *seg[MAX_SEGMENTS];
    size_t len[MAX_SEGMENTS];
    int n;
    char buf[1024];
} path_segs_t;

/* @return false when the path is too long or has too many segments. */
static bool split_path(const char *url, path_segs_t *p)
{
    p->n = 0;
    if (url[0] != '/' || strlen(url) >= sizeof p->buf) return false;
    memcpy(p->buf, url + 1, strlen(url));
    char *at = p->buf;
    for (;;) {
        if (p->n == MAX_SEGMENTS) return false;
        char *slash = strchr(at, '/');
        if (slash) *slash = '\0';
        p->seg[p->n] = at;
        p->len[p->n] = libmicrohttpd()->http_unescape(at);
        p->n++;
        if (!slash) return true;
        at = slash + 1;
    }
}

/* Match the segments against pattern; "{}" matches one non-empty segment,
 * whose index goes to *param (-1 when the pattern has none). */
static bool route_match(const char *pattern, const path_segs_t *p, int *param)
{
    *param = -1;
    const char *at = pattern + 1;
    for (int i = 0; i < p->n; i++) {
        if (*at == '\0' && i > 0) return false;
        size_t plen = strcspn(at, "/");
        if (plen == 2 && at[0] == '{' && at[1] == '}') {
            if (p->len[i] == 0) return false;
            *param = i;
        } else if (plen != p->len[i] || memcmp(at, p->seg[i], plen) != 0) {
            return false;
        }
        at += plen;
        if (*at == '/')
            at++;
        else if (i + 1 < p->n)
            return false;
    }
    return *at == '\0';
}

/* A "{}" segment is a job id: letters, digits, '.', '_', '-', no "..",
 * at most 255 bytes. @return NULL when it is one, else what is wrong. */
static const char *id_problem(const char *s, size_t n, char *why, size_t cap)
{
    if (n >= 256) return "longer than 255 bytes";
    if (memchr(s, '\0', n)) return "contains a NUL byte (%00)";
    if (memchr(s, '/', n)) return "contains '/' (%2F)";
    if (n >= 2 && strstr(s, "..")) return "contains \"..\"";
    if (n == 1 && s[0] == '.') return "is \".\"";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-') {
            snprintf(why, cap, "contains the byte 0x%02x ('%c')", c, isprint(c) ? c : '?');
            return why;
        }
    }
    return NULL;
}

static void h_healthz(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    (void)req;
    sl_admin_reply_json(resp, 200, json_pack("{s:s}", "status", "ok"));
}

static void h_readyz(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)req;
    sl_admin_t *admin = ctx;
    char why[256] = "not ready";
    if (!admin->opts.ready || admin->opts.ready(admin->opts.ctx, why, sizeof why))
        sl_admin_reply_json(resp, 200, json_pack("{s:s}", "status", "ready"));
    else
        sl_admin_reply_error(resp, 503, "%s", why);
}

/* The probes every endpoint answers (endpoint.h), matched before the
 * caller's routes; their handlers take the endpoint as ctx. */
static const sl_admin_route_t builtins[] = {
    {"GET", "/healthz", false, h_healthz},
    {"GET", "/readyz", false, h_readyz},
};

static bool is_builtin(const sl_admin_route_t *rt)
{
    return rt >= builtins && rt < builtins + sizeof builtins / sizeof builtins[0];
}

/* Judge a request from its request line and headers: the route, the id
 * segment, the token. @return 0 to go on (st->route set), or the status
 * of the refusal written to r. */
static int admit(sl_admin_t *admin, struct MHD_Connection *conn, const char *url,
                 const char *method, request_state_t *st, sl_admin_response_t *r)
{
    path_segs_t p;
    /* HEAD is GET without the body (libmicrohttpd sends no body for it) */
    const char *as = strcmp(method, "HEAD") == 0 ? "GET" : method;
    bool path_known = false;
    int param = -1;
    if (split_path(url, &p)) {
        uint32_t nb = sizeof builtins / sizeof builtins[0];
        for (uint32_t i = 0; i < nb + admin->opts.num_routes; i++) {
            const sl_admin_route_t *rt = i < nb ? &builtins[i] : &admin->opts.routes[i - nb];
            int at;
            if (!route_match(rt->pattern, &p, &at)) continue;
            path_known = true;
            if (strcmp(rt->method, as) == 0) {
                st->route = rt;
                param = at;
                break;
            }
        }
    }
    if (!st->route) {
        sl_admin_reply_error(r, path_known ? 405 : 404,
                             path_known ? "method %s not allowed on %s" : "%s %s: no such route",
                             method, url);
        return r->status;
    }
    if (param >= 0) {
        char why[64];
        const char *bad = id_problem(p.seg[param], p.len[param], why, sizeof why);
        if (bad) {
            sl_admin_reply_error(r, 400,
                                 "%s: the job id in the path %s; job ids are letters, "
                                 "digits, '.', '_' and '-'",
                                 url, bad);
            return 400;
        }
        memcpy(st->param, p.seg[param], p.len[param] + 1);
    }
    if (st->route->mutating) {
        if (!admin->token) {
            sl_admin_reply_error(r, 403,
                                 "this endpoint has no admin token configured: mutating "
                                 "routes are disabled");
            return 403;
        }
        const char *auth = libmicrohttpd()->lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                    MHD_HTTP_HEADER_AUTHORIZATION);
        if (!auth || strncmp(auth, "Bearer ", 7) != 0 || !token_equal(auth + 7, admin->token)) {
            sl_admin_reply_error(r, 401, "missing or wrong bearer token");
            return 401;
        }
    }
    const char *cl = libmicrohttpd()->lookup_connection_value(conn, MHD_HEADER_KIND,
                                                              MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t declared;
    if (cl && sl_parse_u64(cl, 0, UINT64_MAX, &declared, NULL, NULL) == SL_OK &&
        declared > admin->opts.max_body_bytes) {
        sl_admin_reply_error(r, 413, "request body over the limit of %zu bytes",
                             admin->opts.max_body_bytes);
        return 413;
    }
    return 0;
}

static enum MHD_Result dispatch(sl_admin_t *admin, struct MHD_Connection *conn, const char *url,
                                const char *method, request_state_t *st)
{
    if (st->too_large) return reply_error_now(admin, conn, 413, "request body over the limit");
    sl_admin_request_t req = {.method = method,
                              .path = url,
                              .param = st->param[0] ? st->param : NULL,
                              .body = st->body ? st->body : "",
                              .body_len = st->len};
    sl_admin_response_t resp = {.status = 200, .a = admin->a};
    st->route->handler(is_builtin(st->route) ? (void *)admin : admin->opts.ctx, &req, &resp);
    return send_reply(conn, &resp, false);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    sl_admin_t *admin = cls;
    request_state_t *st = *con_cls;
    if (!st) {
        /* The headers are in, no body byte has been read. */
        st = sl_calloc(admin->a, 1, sizeof *st);
        if (!st) return MHD_NO;
        *con_cls = st;
        sl_admin_response_t r = {.a = admin->a};
        int status = admit(admin, conn, url, method, st, &r);
        if (status == 0) return MHD_YES;
        /* Refused now: libmicrohttpd sends this and closes the connection
         * without reading the body on. */
        st->replied = true;
        return send_reply(conn, &r, status == 401);
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0; /* consumed (or dropped, when too large or refused) */
        if (st->too_large || st->replied) return MHD_YES;
        if (st->len + n > admin->opts.max_body_bytes) {
            st->too_large = true; /* a chunked body that grew past the limit */
            return MHD_YES;
        }
        if (st->len + n + 1 > st->cap &&
            !SL_GROW(admin->a, st->body, st->cap, st->len + n + 1, 1024))
            return MHD_NO;
        memcpy(st->body + st->len, upload_data, n);
        st->len += n;
        st->body[st->len] = '\0';
        return MHD_YES;
    }
    if (st->replied) return MHD_YES;
    return dispatch(admin, conn, url, method, st);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    sl_admin_t *admin = cls;
    request_state_t *st = *con_cls;
    if (st) {
        sl_free(admin->a, st->body, st->cap);
        sl_free(admin->a, st, sizeof *st);
    }
    *con_cls = NULL;
}

/* Read a whole PEM file (at most 1 MiB) into *out (an owned string of
 * a->a). Every failure is one of reading a TLS file: SL_ERR_IO, or
 * SL_ERR_INVALID for an empty or oversized one. */
static sl_err_t read_pem(sl_admin_t *a, const char *path, const char *what, char **out,
                         sl_error_t *err)
{
    size_t len;
    sl_err_t rc = sl_io_read_file(path, what, 1u << 20, a->a, out, &len, err);
    if (rc == SL_OK && (len == 0 || strlen(*out) != len)) {
        sl_free(a->a, *out, len + 1);
        *out = NULL;
        rc = sl_error_set(err, SL_ERR_INVALID, "%s %s: %s", what, path,
                          len == 0 ? "empty file" : "holds a NUL byte");
    }
    if (rc == SL_ERR_NOT_FOUND) rc = err != NULL ? (err->code = SL_ERR_IO) : SL_ERR_IO;
    if (rc == SL_ERR_TOO_LARGE) rc = err != NULL ? (err->code = SL_ERR_INVALID) : SL_ERR_INVALID;
    if (rc != SL_OK) sl_error_prefix(err, "admin endpoint: ");
    return rc;
}

/* Load and check the certificate and key with GnuTLS, so that a bad pair is
 * refused with its reason instead of libmicrohttpd failing to start. */
static sl_err_t load_tls(sl_admin_t *a, sl_error_t *err)
{
    const char *cf = a->opts.tls_cert_file, *kf = a->opts.tls_key_file;
    if (!cf && !kf) return SL_OK;
    if (!cf || !kf)
        return sl_error_set(err, SL_ERR_INVALID,
                            "admin endpoint: TLS needs both a certificate (--tls-cert) and its "
                            "key (--tls-key)");
    sl_err_t rc = read_pem(a, cf, "TLS certificate", &a->tls_cert, err);
    if (rc == SL_OK) rc = read_pem(a, kf, "TLS key", &a->tls_key, err);
    if (rc != SL_OK) return rc;
    const sl_netlib_gnutls_t *gnutls = sl_netlib_gnutls(err);
    if (gnutls == NULL) {
        sl_error_prefix(err, "admin endpoint: TLS: ");
        return SL_ERR_UNSUPPORTED;
    }
    gnutls_certificate_credentials_t cred;
    if (gnutls->certificate_allocate_credentials(&cred) < 0)
        return sl_error_set(err, SL_ERR_NOMEM, "admin endpoint: out of memory");
    gnutls_datum_t c = {(unsigned char *)a->tls_cert, (unsigned int)strlen(a->tls_cert)};
    gnutls_datum_t k = {(unsigned char *)a->tls_key, (unsigned int)strlen(a->tls_key)};
    int g = gnutls->certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
    gnutls->certificate_free_credentials(cred);
    if (g < 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "admin endpoint: TLS certificate %s with key %s: %s", cf, kf,
                            gnutls->strerror(g));
    return SL_OK;
}

/* Secrets are wiped before their memory goes back. */
static void wipe_free(const sl_allocator_t *a, char *s)
{
    if (s) explicit_bzero(s, strlen(s));
    sl_strfree(a, s);
}

static void admin_free(sl_admin_t *a)
{
    wipe_free(a->a, a->token);
    sl_strfree(a->a, a->tls_cert);
    wipe_free(a->a, a->tls_key);
    sl_free(a->a, a, sizeof *a);
}

sl_err_t sl_admin_start(const sl_admin_opts_t *opts, sl_admin_t **out, sl_error_t *err)
{
    const sl_allocator_t *alloc = opts->allocator ? opts->allocator : sl_allocator_default();
    sl_admin_t *a = sl_calloc(alloc, 1, sizeof *a);
    if (!a) return sl_error_set(err, SL_ERR_NOMEM, "admin endpoint: out of memory");
    a->opts = *opts;
    a->a = alloc;
    if (!a->opts.max_body_bytes) a->opts.max_body_bytes = 1u << 20;
    if (opts->token && !(a->token = sl_strdup(alloc, opts->token))) {
        admin_free(a);
        return sl_error_set(err, SL_ERR_NOMEM, "admin endpoint: out of memory");
    }
    sl_err_t rc = load_tls(a, err);
    if (rc == SL_OK) {
        sl_httpd_opts_t h = {.address = opts->address,
                             .what = "admin endpoint",
                             .max_connections = opts->max_connections,
                             .timeout_s = opts->timeout_s,
                             .tls_cert_pem = a->tls_cert,
                             .tls_key_pem = a->tls_key,
                             .on_request = on_request,
                             .request_ctx = a,
                             .on_completed = on_completed,
                             .completed_ctx = a};
        rc = sl_httpd_start(&h, &a->httpd, err);
    }
    if (rc != SL_OK) {
        admin_free(a);
        return rc;
    }
    *out = a;
    return SL_OK;
}

uint16_t sl_admin_port(const sl_admin_t *admin)
{
    return sl_httpd_port(admin->httpd);
}

uint64_t sl_admin_evicted(const sl_admin_t *admin)
{
    return sl_httpd_evicted(admin->httpd);
}

void sl_admin_stop(sl_admin_t *admin)
{
    if (!admin) return;
    sl_httpd_stop(admin->httpd);
    admin_free(admin);
}

sl_err_t sl_admin_token_load(const char *file, const char *env_var, char **out, sl_error_t *err)
{
    *out = NULL;
    char buf[1024];
    if (file) {
        SL_FORWARD_IF_ERROR(sl_io_read_token(file, "admin token", buf, sizeof buf, err));
    } else {
        const char *v = env_var ? getenv(env_var) : NULL;
        if (!v) return SL_OK;
        snprintf(buf, sizeof buf, "%s", v);
        size_t n = strlen(buf);
        while (n > 0 && isspace((unsigned char)buf[n - 1]))
            buf[--n] = '\0';
        if (n == 0)
            return sl_error_set(err, SL_ERR_INVALID,
                                "admin token from environment variable %s is empty", env_var);
    }
    *out = sl_strdup(NULL, buf);
    explicit_bzero(buf, sizeof buf);
    return *out ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "admin token: out of memory");
}

void sl_admin_token_free(char *token)
{
    wipe_free(NULL, token);
}

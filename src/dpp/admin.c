/* Admin HTTP endpoint on libmicrohttpd (admin.h): routing, bearer-token
 * check, body limit, JSON replies. */
#include "dpp/admin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

struct sl_admin {
    struct MHD_Daemon *daemon;
    sl_admin_opts_t opts;
    char *token;
    uint16_t port;
};

/* Per-request state across libmicrohttpd's calls for one request. */
typedef struct request_state {
    char *body;
    size_t len, cap;
    bool too_large;
} request_state_t;

static bool token_equal(const char *given, const char *expected)
{
    /* No early exit: the time does not tell how much of a guess was right. */
    size_t lg = strlen(given), le = strlen(expected);
    unsigned char diff = (unsigned char)(lg != le);
    for (size_t i = 0; i < le; i++)
        diff |= (unsigned char)((i < lg ? given[i] : 0) ^ expected[i]);
    return diff == 0;
}

/* Match path against pattern; "{}" matches one non-empty segment, stored in
 * param (cap bytes). */
static bool route_match(const char *pattern, const char *path, char *param, size_t cap)
{
    while (*pattern && *path) {
        if (pattern[0] == '{' && pattern[1] == '}') {
            size_t n = strcspn(path, "/");
            if (n == 0 || n >= cap) return false;
            memcpy(param, path, n);
            param[n] = '\0';
            path += n;
            pattern += 2;
            continue;
        }
        if (*pattern++ != *path++) return false;
    }
    return *pattern == '\0' && *path == '\0';
}

void sl_admin_reply_json(sl_admin_response_t *resp, int status, json_t *body)
{
    free(resp->body);
    resp->status = status;
    resp->content_type = NULL;
    if (!body) body = json_object();
    resp->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
}

void sl_admin_reply_error(sl_admin_response_t *resp, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_admin_reply_json(resp, status, json_pack("{s:s}", "error", msg));
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
    size_t len = r->body ? strlen(r->body) : 0;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, r->body ? r->body : (char *)"", MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(r->body);
        return MHD_NO;
    }
    r->body = NULL; /* owned by the response now */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
    if (bearer_challenge) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned int)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_error_now(struct MHD_Connection *conn, int status, const char *msg)
{
    sl_admin_response_t r = {0};
    sl_admin_reply_error(&r, status, "%s", msg);
    return send_reply(conn, &r, status == 401);
}

static enum MHD_Result dispatch(sl_admin_t *admin, struct MHD_Connection *conn, const char *url,
                                const char *method, request_state_t *st)
{
    const sl_admin_route_t *found = NULL;
    bool path_known = false;
    char param[256] = "";
    for (uint32_t i = 0; i < admin->opts.num_routes; i++) {
        const sl_admin_route_t *rt = &admin->opts.routes[i];
        if (!route_match(rt->pattern, url, param, sizeof param)) continue;
        path_known = true;
        if (strcmp(rt->method, method) == 0) {
            found = rt;
            break;
        }
    }
    if (!found) {
        char msg[600];
        snprintf(msg, sizeof msg, path_known ? "method %s not allowed on %s" : "%s %s: no such route",
                 method, url);
        return reply_error_now(conn, path_known ? 405 : 404, msg);
    }
    if (st->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body over the limit of %zu bytes",
                 admin->opts.max_body_bytes);
        return reply_error_now(conn, 413, msg);
    }
    if (found->mutating) {
        if (!admin->token)
            return reply_error_now(conn, 403,
                                   "this endpoint has no admin token configured: mutating routes are disabled");
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_AUTHORIZATION);
        if (!auth || strncmp(auth, "Bearer ", 7) != 0 || !token_equal(auth + 7, admin->token))
            return reply_error_now(conn, 401, "missing or wrong bearer token");
    }
    sl_admin_request_t req = {.method = method, .path = url, .param = param[0] ? param : NULL,
                              .body = st->body ? st->body : "", .body_len = st->len};
    sl_admin_response_t resp = {.status = 200};
    found->handler(admin->opts.ctx, &req, &resp);
    return send_reply(conn, &resp, false);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    sl_admin_t *admin = cls;
    request_state_t *st = *con_cls;
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st) return MHD_NO;
        *con_cls = st;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > admin->opts.max_body_bytes) st->too_large = true;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0; /* consumed (or dropped, when too large) */
        if (st->too_large) return MHD_YES;
        if (st->len + n > admin->opts.max_body_bytes) {
            st->too_large = true;
            return MHD_YES;
        }
        if (st->len + n + 1 > st->cap) {
            size_t cap = st->cap ? st->cap : 1024;
            while (cap < st->len + n + 1) cap *= 2;
            char *p = realloc(st->body, cap);
            if (!p) return MHD_NO;
            st->body = p;
            st->cap = cap;
        }
        memcpy(st->body + st->len, upload_data, n);
        st->len += n;
        st->body[st->len] = '\0';
        return MHD_YES;
    }
    return dispatch(admin, conn, url, method, st);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    request_state_t *st = *con_cls;
    if (st) {
        free(st->body);
        free(st);
    }
    *con_cls = NULL;
}

sl_err_t sl_admin_start(const sl_admin_opts_t *opts, sl_admin_t **out, sl_error_t *err)
{
    const char *address = opts->address ? opts->address : "127.0.0.1:0";
    const char *colon = strrchr(address, ':');
    if (!colon || colon[1] == '\0')
        return sl_error_set(err, SL_ERR_INVALID, "admin address '%s': expected host:port", address);
    char host[256];
    size_t hlen = (size_t)(colon - address);
    if (hlen >= sizeof host)
        return sl_error_set(err, SL_ERR_INVALID, "admin address '%s': host too long", address);
    memcpy(host, address, hlen);
    host[hlen] = '\0';
    char *end;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || port > 65535)
        return sl_error_set(err, SL_ERR_INVALID, "admin address '%s': bad port", address);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int gai = getaddrinfo(hlen ? host : "0.0.0.0", NULL, &hints, &res);
    if (gai != 0)
        return sl_error_set(err, SL_ERR_INVALID, "admin address '%s': %s", address,
                            gai_strerror(gai));
    struct sockaddr_in sa;
    memcpy(&sa, res->ai_addr, sizeof sa);
    freeaddrinfo(res);
    sa.sin_port = htons((uint16_t)port);

    sl_admin_t *a = calloc(1, sizeof *a);
    if (!a) return sl_error_set(err, SL_ERR_NOMEM, "admin endpoint: out of memory");
    a->opts = *opts;
    if (!a->opts.max_body_bytes) a->opts.max_body_bytes = 1u << 20;
    if (opts->token && !(a->token = strdup(opts->token))) {
        free(a);
        return sl_error_set(err, SL_ERR_NOMEM, "admin endpoint: out of memory");
    }
    a->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
                                 on_request, a, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)30,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)64, MHD_OPTION_END);
    if (!a->daemon) {
        free(a->token);
        free(a);
        return sl_error_set(err, SL_ERR_IO, "admin endpoint: cannot listen on %s", address);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->daemon, MHD_DAEMON_INFO_BIND_PORT);
    a->port = info ? info->port : (uint16_t)port;
    *out = a;
    return SL_OK;
}

uint16_t sl_admin_port(const sl_admin_t *admin)
{
    return admin->port;
}

void sl_admin_stop(sl_admin_t *admin)
{
    if (!admin) return;
    MHD_stop_daemon(admin->daemon);
    free(admin->token);
    free(admin);
}

sl_err_t sl_admin_token_load(const char *file, const char *env_var, char **out, sl_error_t *err)
{
    *out = NULL;
    char buf[1024];
    if (file) {
        FILE *f = fopen(file, "r");
        if (!f) return sl_error_set(err, SL_ERR_IO, "token file %s: %s", file, strerror(errno));
        bool ok = fgets(buf, sizeof buf, f) != NULL;
        fclose(f);
        if (!ok) buf[0] = '\0';
    } else {
        const char *v = env_var ? getenv(env_var) : NULL;
        if (!v) return SL_OK;
        snprintf(buf, sizeof buf, "%s", v);
    }
    size_t n = strlen(buf);
    while (n > 0 && isspace((unsigned char)buf[n - 1])) buf[--n] = '\0';
    if (n == 0)
        return sl_error_set(err, SL_ERR_INVALID, "admin token from %s%s is empty",
                            file ? "file " : "environment variable ", file ? file : env_var);
    *out = strdup(buf);
    return *out ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "admin token: out of memory");
}

/* The HTTP server on libmicrohttpd (server.h): address, limits, timeouts,
 * TLS from PEM text, and the answer with sluice's common headers. */
#include "httpd/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "common/parse.h"

struct sl_httpd {
    struct MHD_Daemon *daemon;
    uint16_t port;
};

/* Paths are left undecoded (server.h); the callback decodes them. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return strlen(s);
}

/* "host:port" (empty host: every interface) into *sa. */
static sl_err_t parse_address(const char *what, const char *address, struct sockaddr_in *sa,
                              sl_error_t *err)
{
    const char *colon = strrchr(address, ':');
    if (!colon || colon[1] == '\0')
        return sl_error_set(err, SL_ERR_INVALID, "%s address '%s': expected host:port", what,
                            address);
    char host[256];
    size_t hlen = (size_t)(colon - address);
    if (hlen >= sizeof host)
        return sl_error_set(err, SL_ERR_INVALID, "%s address '%s': host too long", what, address);
    memcpy(host, address, hlen);
    host[hlen] = '\0';
    uint64_t port;
    if (sl_parse_u64(colon + 1, 0, 65535, &port, NULL, NULL) != SL_OK)
        return sl_error_set(err, SL_ERR_INVALID, "%s address '%s': bad port", what, address);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int gai = getaddrinfo(hlen ? host : "0.0.0.0", NULL, &hints, &res);
    if (gai != 0)
        return sl_error_set(err, SL_ERR_INVALID, "%s address '%s': cannot resolve host '%s' (%s)",
                            what, address, hlen ? host : "0.0.0.0", gai_strerror(gai));
    memcpy(sa, res->ai_addr, sizeof *sa);
    freeaddrinfo(res);
    sa->sin_port = htons((uint16_t)port);
    return SL_OK;
}

sl_err_t sl_httpd_start(const sl_httpd_opts_t *opts, sl_httpd_t **out, sl_error_t *err)
{
    *out = NULL;
    const char *what = opts->what ? opts->what : "HTTP server";
    const char *address = opts->address ? opts->address : "127.0.0.1:0";
    struct sockaddr_in sa;
    sl_err_t rc = parse_address(what, address, &sa, err);
    if (rc != SL_OK) return rc;
    bool tls = opts->tls_cert_pem != NULL;
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return sl_error_set(err, SL_ERR_UNSUPPORTED, "%s: this libmicrohttpd was built without TLS",
                            what);
    /* The server's own state is tiny and lives as long as the daemon: the
     * default allocator, as libmicrohttpd's own memory does. */
    sl_httpd_t *h = sl_calloc(NULL, 1, sizeof *h);
    if (!h) return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
    /* epoll on one internal thread: idle and slow connections cost a
     * descriptor and a little memory each, never a thread or a turn. */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | (tls ? MHD_USE_TLS : 0);
    struct MHD_OptionItem tls_opts[] = {
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)opts->tls_cert_pem},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)opts->tls_key_pem},
        {MHD_OPTION_END, 0, NULL}};
    unsigned int max_conns = opts->max_connections ? opts->max_connections : 512;
    unsigned int timeout_s = opts->timeout_s ? opts->timeout_s : 10;
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, opts->on_request, opts->request_ctx, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, opts->on_completed,
        opts->completed_ctx, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        max_conns, MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL, MHD_OPTION_ARRAY, tls_opts,
        MHD_OPTION_END);
    if (!h->daemon) {
        sl_free(NULL, h, sizeof *h);
        return sl_error_set(err, SL_ERR_IO, "%s: cannot listen on %s%s", what, address,
                            tls ? " with TLS" : "");
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : ntohs(sa.sin_port);
    *out = h;
    return SL_OK;
}

uint16_t sl_httpd_port(const sl_httpd_t *h)
{
    return h->port;
}

void sl_httpd_stop(sl_httpd_t *h)
{
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    sl_free(NULL, h, sizeof *h);
}

enum MHD_Result sl_httpd_reply(struct MHD_Connection *conn, unsigned int status,
                               const char *content_type, const char *body, size_t len,
                               const char *const *extra)
{
    /* libmicrohttpd copies the body with its own allocator and frees that
     * copy itself. */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2)
        MHD_add_response_header(resp, extra[i], extra[i + 1]);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

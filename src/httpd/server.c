/* The HTTP server on libmicrohttpd (server.h): address, limits, timeouts,
 * TLS from PEM text, the connection cap with idle connections evicted, and
 * the answer with sluice's common headers. */
#include "httpd/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/err.h"
#include "common/mem.h"
#include "common/parse.h"
#include "netlib/netlib.h"

/* Connections past the cap that libmicrohttpd may hold while the ones
 * evicted to make room for them close (they close on the server's next
 * turn): a burst of accepts in one turn, bounded. */
#define SPARE_CONNECTIONS 64

/* libmicrohttpd's functions: loaded by sl_httpd_start before any call here. */
static const sl_netlib_mhd_t *libmicrohttpd(void)
{
    return sl_netlib_mhd(NULL);
}

/* One open connection, in the server's list from the least recently active
 * (head) to the most (tail). Touched only on the server's thread. */
typedef struct conn_slot {
    struct conn_slot *prev, *next;
    int fd;
    bool busy;     /* a request is in progress (its headers are in) */
    bool evicting; /* shut down to make room; closes on the next turn */
} conn_slot_t;

struct sl_httpd {
    struct MHD_Daemon *daemon;
    uint16_t port;
    uint32_t cap;  /* max_connections */
    uint32_t open; /* slots in the list, evicting ones included */
    uint32_t live; /* open and not evicting: what the cap bounds */
    conn_slot_t *head, *tail;
    uint64_t evicted;
    MHD_AccessHandlerCallback on_request;
    void *request_ctx;
    MHD_RequestCompletedCallback on_completed;
    void *completed_ctx;
};

static void slot_unlink(sl_httpd_t *h, conn_slot_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        h->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        h->tail = s->prev;
    s->prev = s->next = NULL;
}

static void slot_append(sl_httpd_t *h, conn_slot_t *s)
{
    s->prev = h->tail;
    s->next = NULL;
    if (h->tail)
        h->tail->next = s;
    else
        h->head = s;
    h->tail = s;
}

/* Shut s down: libmicrohttpd sees the end of the stream on its next turn
 * and closes it (NOTIFY_CLOSED frees the slot). */
static void slot_evict(sl_httpd_t *h, conn_slot_t *s)
{
    s->evicting = true;
    h->live--;
    __atomic_store_n(&h->evicted, h->evicted + 1, __ATOMIC_RELAXED);
    shutdown(s->fd, SHUT_RDWR);
}

/* A connection opened or closed (libmicrohttpd's thread). At the cap, the
 * connection idle longest (no request in progress: never sent one, sent
 * its headers too slowly, or kept alive after its answer) makes room, so
 * idle and slow peers cannot keep a health probe out; when every one is
 * busy, the new one is refused. O(connections) at the cap, at most. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    sl_httpd_t *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_slot_t *s = *socket_context;
        if (!s) return;
        slot_unlink(h, s);
        h->open--;
        if (!s->evicting) h->live--;
        sl_free(NULL, s, sizeof *s);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd =
        libmicrohttpd()->get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn_slot_t *s = sl_calloc(NULL, 1, sizeof *s);
    if (!s) {
        /* no slot to track it by: refuse it rather than lose count */
        if (fd) shutdown(fd->connect_fd, SHUT_RDWR);
        return;
    }
    s->fd = fd ? fd->connect_fd : -1;
    *socket_context = s;
    slot_append(h, s);
    h->open++;
    h->live++;
    if (h->live <= h->cap) return;
    for (conn_slot_t *v = h->head; v; v = v->next) {
        if (v != s && !v->busy && !v->evicting && v->fd >= 0) {
            slot_evict(h, v);
            return;
        }
    }
    if (s->fd >= 0) slot_evict(h, s);
}

static conn_slot_t *slot_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        libmicrohttpd()->get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* The caller's request callback, with the connection marked busy. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    sl_httpd_t *h = cls;
    conn_slot_t *s = slot_of(conn);
    if (s) s->busy = true;
    return h->on_request(h->request_ctx, conn, url, method, version, upload_data, upload_data_size,
                         con_cls);
}

/* A request ended: its connection (kept alive, or about to close) is the
 * most recently active idle one. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    sl_httpd_t *h = cls;
    conn_slot_t *s = slot_of(conn);
    if (s) {
        s->busy = false;
        slot_unlink(h, s);
        slot_append(h, s);
    }
    if (h->on_completed) h->on_completed(h->completed_ctx, conn, con_cls, toe);
}

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
    SL_FORWARD_IF_ERROR(parse_address(what, address, &sa, err));
    if (sl_netlib_mhd(err) == NULL) {
        sl_error_prefix(err, "%s: ", what);
        return SL_ERR_UNSUPPORTED;
    }
    bool tls = opts->tls_cert_pem != NULL;
    if (tls && libmicrohttpd()->is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
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
    h->cap = opts->max_connections ? opts->max_connections : 512;
    h->on_request = opts->on_request;
    h->request_ctx = opts->request_ctx;
    h->on_completed = opts->on_completed;
    h->completed_ctx = opts->completed_ctx;
    unsigned int timeout_s = opts->timeout_s ? opts->timeout_s : 10;
    h->daemon = libmicrohttpd()->start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        h, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        h->cap + SPARE_CONNECTIONS, MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
        MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!h->daemon) {
        sl_free(NULL, h, sizeof *h);
        return sl_error_set(err, SL_ERR_IO, "%s: cannot listen on %s%s", what, address,
                            tls ? " with TLS" : "");
    }
    const union MHD_DaemonInfo *info =
        libmicrohttpd()->get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : ntohs(sa.sin_port);
    *out = h;
    return SL_OK;
}

uint16_t sl_httpd_port(const sl_httpd_t *h)
{
    return h->port;
}

uint64_t sl_httpd_evicted(const sl_httpd_t *h)
{
    return __atomic_load_n(&h->evicted, __ATOMIC_RELAXED);
}

void sl_httpd_stop(sl_httpd_t *h)
{
    if (!h) return;
    libmicrohttpd()->stop_daemon(h->daemon);
    sl_free(NULL, h, sizeof *h);
}

enum MHD_Result sl_httpd_reply(struct MHD_Connection *conn, unsigned int status,
                               const char *content_type, const char *body, size_t len,
                               const char *const *extra)
{
    /* libmicrohttpd copies the body with its own allocator and frees that
     * copy itself. */
    struct MHD_Response *resp = libmicrohttpd()->create_response_from_buffer(
        len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    libmicrohttpd()->add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    libmicrohttpd()->add_response_header(resp, "X-Content-Type-Options", "nosniff");
    libmicrohttpd()->add_response_header(resp, "Referrer-Policy", "no-referrer");
    for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2)
        libmicrohttpd()->add_response_header(resp, extra[i], extra[i + 1]);
    enum MHD_Result ret = libmicrohttpd()->queue_response(conn, status, resp);
    libmicrohttpd()->destroy_response(resp);
    return ret;
}

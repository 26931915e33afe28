/* The HTTP server under every endpoint sluice serves: the admin endpoints
 * of the master and the workers (dpp/admin/endpoint.h, with their routes,
 * token and JSON) and the trainer client's metrics endpoint
 * (src/trainer/metrics.c). libmicrohttpd does the HTTP; this is what both
 * ask of it, written once: the "host:port" address (port 0: the kernel
 * picks, the bound port is reported), one internal polling thread on epoll
 * (idle and slow connections cost a descriptor each, never a thread or a
 * turn), a cap on open connections, a timeout that closes a connection
 * idle or trickling for that long, optional TLS from PEM text, and the
 * headers every answer carries.
 *
 * The cap never keeps a new connection out while an idle one holds a
 * slot: when a connection arrives at the cap, the one idle longest (no
 * request in progress: it never sent one, is still trickling its headers,
 * or is kept alive after its answer) is closed to make room, and the new
 * one is refused only when every other is in the middle of a request. So
 * a health probe is answered at once under any number of idle or slow
 * connections (a flood of new ones can still push it out before it sends
 * its request: cap newer connections must arrive in between).
 *
 * Paths reach the request callback undecoded (percent escapes kept): the
 * caller decodes what it needs (libmicrohttpd's own decoding would cut a
 * "%00" short). The query string is not part of the path. */
#ifndef SLUICE_HTTPD_SERVER_H
#define SLUICE_HTTPD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "sluice/err.h"

typedef struct sl_httpd_opts {
    const char *address; /* "host:port" (port 0: any free one); NULL: "127.0.0.1:0" */
    const char *what;    /* names the server in messages ("admin endpoint"); NULL: "HTTP server" */
    uint32_t max_connections; /* open at once (the idle longest makes room); 0: 512 */
    uint32_t timeout_s;       /* close a connection without traffic this long; 0: 10 */
    const char
        *tls_cert_pem;       /* PEM text, borrowed for the server's life: serve HTTPS; NULL: HTTP */
    const char *tls_key_pem; /* its key, required with the certificate */
    /* Called on the server's thread, as libmicrohttpd's access handler
     * (first with *con_cls NULL once the headers are in, then per piece of
     * body, then with *upload_data_size 0). */
    MHD_AccessHandlerCallback on_request;
    void *request_ctx;
    MHD_RequestCompletedCallback on_completed; /* NULL: none; frees what *con_cls holds */
    void *completed_ctx;
} sl_httpd_opts_t;

typedef struct sl_httpd sl_httpd_t;

/* Bind and start serving. Caller owns *out, free with sl_httpd_stop.
 * @return SL_ERR_INVALID for a malformed address or a host that does not
 * resolve (the message names the address), SL_ERR_IO when it cannot be
 * bound, SL_ERR_UNSUPPORTED for TLS when libmicrohttpd lacks it,
 * SL_ERR_NOMEM. */
sl_err_t sl_httpd_start(const sl_httpd_opts_t *opts, sl_httpd_t **out, sl_error_t *err);

/* The bound port (the real one when port 0 was asked). */
uint16_t sl_httpd_port(const sl_httpd_t *h);

/* Connections closed so far to make room for a new one (read from any
 * thread). */
uint64_t sl_httpd_evicted(const sl_httpd_t *h);

/* Stop serving (closing every connection) and free; h may be NULL. */
void sl_httpd_stop(sl_httpd_t *h);

/* Queue an answer on conn: status, body (len bytes, copied: the caller
 * keeps its own), Content-Type, the headers every sluice answer carries
 * (X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer) and
 * extra, NULL or a NULL-terminated list of name, value pairs. Call from
 * the request callback. @return what the callback returns. */
enum MHD_Result sl_httpd_reply(struct MHD_Connection *conn, unsigned int status,
                               const char *content_type, const char *body, size_t len,
                               const char *const *extra);

#endif

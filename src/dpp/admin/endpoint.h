/* The admin HTTP endpoint (libmicrohttpd) that the master and every worker
 * run: a small router of JSON routes with a bearer token on the mutating
 * ones, a body size limit, and JSON errors for every refusal.
 *
 * Handlers run on libmicrohttpd's polling thread (epoll), one request at a
 * time; they must not block for long and must take the locks of whatever
 * state they read (they never run concurrently with each other).
 *
 * A request is judged on its headers before any body is read: the route,
 * the method, the path segment a route takes as a job id, the bearer token
 * of a mutating route and the declared Content-Length. A refusal is
 * answered at once and the body is never buffered, so unauthenticated
 * bodies cost no memory. HEAD is answered wherever GET is (headers only).
 *
 * Built in, before the caller's routes: GET (and HEAD) /healthz, 200
 * {"status":"ok"} while the server runs (liveness), and /readyz, 200
 * {"status":"ready"} or 503 {"error": why} as opts.ready says
 * (readiness). Both are answered within a turn of the server's thread
 * under any number of idle or slow connections (httpd/server.h evicts the
 * idle longest at the cap).
 *
 * Refusals, all with a JSON body {"error": "..."} (valid UTF-8: bytes of
 * the request that are not are written as \xNN):
 *   400 a "{}" path segment that is not a job id (letters, digits, '.', '_',
 *       '-'; no "..", no NUL, at most 255 bytes), malformed JSON
 *       (sl_admin_parse_json says where)
 *   401 a mutating route without the right "Authorization: Bearer <token>"
 *   403 a mutating route when the endpoint has no token configured
 *   404 no route for the path, 405 a route for the path but not the method
 *   413 a body over max_body_bytes
 *
 * Limits (the server of httpd/server.h): at most max_connections
 * connections at once (at the cap the one idle longest is closed to make
 * room), each closed after timeout_s without traffic; with epoll one
 * thread serves them all, so idle and slow (slowloris) connections do not
 * keep /healthz or /readyz from answering. TLS (GnuTLS through libmicrohttpd) with tls_cert_file
 * and tls_key_file, read and checked here. */
#ifndef SLUICE_DPP_ADMIN_ENDPOINT_H
#define SLUICE_DPP_ADMIN_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct sl_admin_request {
    const char *method; /* "GET", "POST", "DELETE", ... */
    const char *path;   /* without the query string */
    const char *param;  /* the segment matched by "{}" in the route, or NULL */
    const char *body;   /* NUL-terminated; "" when there is none */
    size_t body_len;
} sl_admin_request_t;

typedef struct sl_admin_response {
    int status; /* default 200 */
    /* An owned string of a (common/mem.h: strlen + 1 bytes), freed by the
     * endpoint; NULL: empty. Set by sl_admin_reply_json, sl_admin_reply_text
     * or sl_admin_reply_error, or by hand with a string from a. */
    char *body;
    const char *content_type; /* static; NULL: application/json */
    const sl_allocator_t *a;  /* set by the endpoint (its opts.allocator): body's allocator */
} sl_admin_response_t;

typedef void (*sl_admin_handler_fn)(void *ctx, const sl_admin_request_t *req,
                                    sl_admin_response_t *resp);

typedef struct sl_admin_route {
    const char *method;  /* exact */
    const char *pattern; /* "/jobs", "/jobs/{}", "/jobs/{}/scale": {} is one path segment */
    bool mutating;       /* requires the bearer token */
    sl_admin_handler_fn handler;
} sl_admin_route_t;

typedef struct sl_admin_opts {
    const char *address;   /* "host:port"; NULL: "127.0.0.1:0" (loopback unless told otherwise) */
    const char *token;     /* bearer token for mutating routes; NULL: they answer 403 */
    size_t max_body_bytes; /* 0: 1 MiB */
    const char *tls_cert_file;      /* PEM certificate (chain): serve HTTPS; NULL: plain HTTP */
    const char *tls_key_file;       /* its PEM private key (unencrypted); required with the cert */
    uint32_t max_connections;       /* open at once; 0: 512 */
    uint32_t timeout_s;             /* close a connection idle this long; 0: 10 */
    const sl_admin_route_t *routes; /* borrowed for the endpoint's life */
    uint32_t num_routes;
    void *ctx; /* passed to every handler */
    /* /readyz: whether the process is ready, called with ctx on the
     * server's thread; when not, it writes why (a sentence, NUL-terminated,
     * at most cap bytes) and returns false: 503 {"error": why}. NULL:
     * always ready. */
    bool (*ready)(void *ctx, char *why, size_t cap);
    const sl_allocator_t *allocator; /* request state and bodies; NULL: default */
} sl_admin_opts_t;

typedef struct sl_admin sl_admin_t;

/* Bind and start serving on a thread of libmicrohttpd's. Caller owns *out,
 * free with sl_admin_stop. @return SL_ERR_IO when the address cannot be
 * bound or a TLS file cannot be read, SL_ERR_INVALID for a malformed
 * address, a certificate without its key (or the other way round), or a
 * certificate and key GnuTLS refuses (the message names the file and
 * says why), SL_ERR_UNSUPPORTED when libmicrohttpd lacks TLS. */
sl_err_t sl_admin_start(const sl_admin_opts_t *opts, sl_admin_t **out, sl_error_t *err);

/* The bound port (the real one when port 0 was asked). */
uint16_t sl_admin_port(const sl_admin_t *admin);

/* Connections closed so far to make room for new ones at the cap (the
 * idle longest; httpd/server.h). Any thread. */
uint64_t sl_admin_evicted(const sl_admin_t *admin);

/* Stop serving and free; admin may be NULL. */
void sl_admin_stop(sl_admin_t *admin);

/* Read the bearer token: from file (first line, trailing whitespace
 * trimmed) when file is non-NULL, else from the environment variable env_var
 * (NULL or unset: *out = NULL, SL_OK). An empty token is SL_ERR_INVALID.
 * Caller owns *out, an owned string of the default allocator: free with
 * sl_admin_token_free (which wipes it). */
sl_err_t sl_admin_token_load(const char *file, const char *env_var, char **out, sl_error_t *err);

/* Wipe and free a token of sl_admin_token_load; NULL is fine. */
void sl_admin_token_free(char *token);

/* j as JSON text (json_dumpb with flags) in an owned string of a
 * (common/mem.h; NULL: the default allocator), so that jansson's own
 * allocator never hands out memory sluice frees. NULL when out of memory. */
char *sl_admin_json_text(const sl_allocator_t *a, const json_t *j, size_t flags);

/* Set a JSON response (steals body; NULL body is an empty object). Out of
 * memory makes it a 503 without a body. */
void sl_admin_reply_json(sl_admin_response_t *resp, int status, json_t *body);

/* Set a response with a copy of text (borrowed) and content_type (static;
 * NULL: application/json). Out of memory makes it a 503 without a body. */
void sl_admin_reply_text(sl_admin_response_t *resp, int status, const char *content_type,
                         const char *text);

/* Set {"error": "<message>"} with status. */
void sl_admin_reply_error(sl_admin_response_t *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parse the request body as a JSON object; on failure set a 400 reply that
 * says where (line, column, what) and return NULL. Caller owns the result. */
json_t *sl_admin_parse_json(const sl_admin_request_t *req, sl_admin_response_t *resp);

#endif

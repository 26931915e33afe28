/* The one HTTP client of the sluice program: requests to a DPP master's
 * admin endpoint (docs/ADMIN.md) for `sluice submit` and `sluice jobs`,
 * through libcurl. libcurl brings what a hand-written client lacked:
 * HTTPS (verified against the system's CAs or --tls-ca FILE), the proxy
 * of $http_proxy / $https_proxy / $no_proxy, chunked and keep-alive
 * replies, and bounded connect and transfer times.
 *
 * The shared option group sl_cli_admin_client_group (--admin, --token-file,
 * --tls-ca, --request-timeout-s) is what every such command takes. */
#ifndef SLUICE_CLI_HTTP_H
#define SLUICE_CLI_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "options.h"

/* The values of sl_cli_admin_client_group. */
typedef struct sl_cli_admin_client_args {
    const char *admin;      /* HOST:PORT, http://HOST:PORT or https://HOST:PORT */
    const char *token_file; /* NULL: $SLUICE_ADMIN_TOKEN */
    const char *tls_ca;     /* https: the CA bundle to verify the endpoint with */
    uint64_t timeout_s;     /* one request, connect included */
} sl_cli_admin_client_args_t;

extern const sl_cli_group_t sl_cli_admin_client_group;

typedef struct sl_cli_http sl_cli_http_t;

/* A client of the endpoint args names, its bearer token loaded (from
 * --token-file or $SLUICE_ADMIN_TOKEN; none is fine for GET). cmd names
 * the command in messages ("jobs list"). Caller owns *out, free with
 * sl_cli_http_destroy. @return 0, or 1 with the reason printed on stderr
 * ("sluice jobs: --token-file /x: cannot open: ..."), or 2 for a usage
 * error (--tls-ca with an http:// address). */
int sl_cli_http_new(const char *cmd, const sl_cli_admin_client_args_t *args, sl_cli_http_t **out);
void sl_cli_http_destroy(sl_cli_http_t *c);

/* The reply of one request: the status and the body (NUL-terminated). */
typedef struct sl_cli_http_reply {
    long status;
    char *body;
    size_t len, cap;
    bool too_big;  /* over the bound: the transfer was stopped */
    char url[528]; /* what was asked: "GET https://h:7071/jobs/x" */
} sl_cli_http_reply_t;

/* One request: method ("GET", "POST", "DELETE") to path ("/jobs/x", the
 * segments already escaped) with an optional JSON body. A reply over
 * 16 MiB is refused. @return 0 with r filled whatever the status (free it
 * with sl_cli_http_reply_free), or -1 when no HTTP answer came (connection
 * refused, TLS, timeout): the message, naming the URL and libcurl's reason,
 * is printed on stderr. */
int sl_cli_http_request(sl_cli_http_t *c, const char *method, const char *path, const char *body,
                        sl_cli_http_reply_t *r);
void sl_cli_http_reply_free(sl_cli_http_reply_t *r);

/* A reply that is not 2xx on stderr: "sluice CMD: GET URL: HTTP 404: <the
 * server's "error">", then each of its "problems" (a refused job spec) on
 * a line of its own. */
void sl_cli_http_print_refusal(const sl_cli_http_t *c, const sl_cli_http_reply_t *r);

/* prefix, then segment percent-encoded (libcurl's), then suffix into out
 * ("/jobs/" "a b" "/scale" -> "/jobs/a%20b/scale"). @return false when it
 * does not fit or out of memory. */
bool sl_cli_http_path(sl_cli_http_t *c, const char *prefix, const char *segment, const char *suffix,
                      char *out, size_t cap);

#endif

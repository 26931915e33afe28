/* The worker's admin routes on the HTTP endpoint of dpp/admin/endpoint.h:
 * GET / (its status page, dpp/admin/ui.h), /healthz, /readyz, /metrics
 * (Prometheus text) and /status (JSON) of
 * one worker, and of its lease client when it runs under a master.
 * Read-only: no route mutates, so no token is needed. Documented in
 * docs/WORKER.md ("Admin endpoint"). */
#ifndef SLUICE_DPP_WORKER_ADMIN_H
#define SLUICE_DPP_WORKER_ADMIN_H

#include "dpp/admin/endpoint.h"
#include "dpp/worker/lease/lease_client.h"
#include "dpp/worker/runtime/worker.h"

typedef struct sl_worker_admin sl_worker_admin_t;

/* Serve w (and ms, NULL when standalone) on address ("host:port"; NULL:
 * 127.0.0.1:0). Both are borrowed: stop the endpoint before destroying the
 * worker. w may be NULL until sl_worker_admin_set (a worker waiting for
 * its master's first lease: /readyz answers 503, /status "waiting"). Caller
 * owns *out, free with sl_worker_admin_stop. */
sl_err_t sl_worker_admin_start(sl_worker_t *w, sl_worker_lease_client_t *ms, const char *address,
                               sl_worker_admin_t **out, sl_error_t *err);

/* The same with every endpoint option (address, TLS certificate and key,
 * connection limit and timeout, endpoint.h); routes and context are the
 * worker's own, and no route needs a token. */
sl_err_t sl_worker_admin_serve(sl_worker_t *w, sl_worker_lease_client_t *ms,
                               const sl_admin_opts_t *endpoint, sl_worker_admin_t **out,
                               sl_error_t *err);

uint16_t sl_worker_admin_port(const sl_worker_admin_t *a);

/* Serve w and ms from now on (NULL, NULL: nothing, before destroying them). */
void sl_worker_admin_set(sl_worker_admin_t *a, sl_worker_t *w, sl_worker_lease_client_t *ms);

/* Stop serving and free; a may be NULL. */
void sl_worker_admin_stop(sl_worker_admin_t *a);

/* The bodies of /metrics and /status (caller owns: strings of the default
 * allocator, free with sl_strfree(NULL, text), common/mem.h), for the
 * routes and for tests. NULL when out of memory. */
char *sl_worker_admin_metrics_text(sl_worker_t *w, sl_worker_lease_client_t *ms);
char *sl_worker_admin_status_json(sl_worker_t *w, sl_worker_lease_client_t *ms);

#endif

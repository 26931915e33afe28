/* The master's admin routes (docs/ADMIN.md) on the HTTP endpoint of
 * dpp/admin/endpoint.h: the request bodies and answers as JSON, turned
 * into and out of the plain calls of master.h. The JSON of the views and
 * of a submission is here, so that tests and benchmarks can use it
 * without HTTP. Every call takes the master's lock itself (through
 * master.h) and may be made from any thread. */
#ifndef SLUICE_DPP_MASTER_ADMIN_H
#define SLUICE_DPP_MASTER_ADMIN_H

#include <jansson.h>

#include "dpp/admin/endpoint.h"
#include "dpp/master/process/master.h"
#include "dpp/pipeline/problems.h"
#include "sluice/err.h"

/* Start the master's admin endpoint (GET /healthz /readyz /metrics /status,
 * GET/POST/DELETE /jobs, GET /jobs/{}, GET /workers, POST /jobs/{}/scale)
 * on address (NULL: "127.0.0.1:0") with bearer token (NULL: mutating routes
 * answer 403). m must outlive it. Caller owns *out, free with
 * sl_admin_stop. */
sl_err_t sl_master_admin_start(sl_master_t *m, const char *address, const char *token,
                               sl_admin_t **out, sl_error_t *err);

/* The same with every endpoint option (address, token, TLS certificate and
 * key, connection limit and timeout, endpoint.h); its routes, context and
 * body limit are the master's own. */
sl_err_t sl_master_admin_serve(sl_master_t *m, const sl_admin_opts_t *endpoint, sl_admin_t **out,
                               sl_error_t *err);

/* Submit a job from a POST /jobs body (sl_master_job_submit):
 *   {"spec": {job spec, docs/JOBS.md},          required
 *    "ranks": N,                                 trainer ranks, default 1
 *    "sharding": "dynamic" | "static",           default "dynamic"
 *    "min_workers": N, "max_workers": N,         autoscaler bounds, default 1, 1
 *    "workers": N,                               initial desired count, default min_workers
 *    "resume_token": "<base64>"}                 optional (sl_trainer_resume_token bytes)
 *  or "resume_tokens": ["<base64>", ...]         one per trainer rank, not with resume_token
 * Base64 is RFC 4648's (standard alphabet, padded). *job_id (may be NULL)
 * gets the id; caller frees it with
 * sl_strfree(sl_master_allocator(m), id). @return SL_ERR_INVALID for a
 * bad body, spec, table or token (err says which key / what; answer 400),
 * SL_ERR_AGAIN when a job of that id already exists (answer 409),
 * SL_ERR_TOO_LARGE past max_jobs (answer 429), SL_ERR_IO when the journal
 * fails (500). */
sl_err_t sl_master_admin_job_submit(sl_master_t *m, const json_t *body, char **job_id,
                                    sl_error_t *err);

/* sl_master_admin_job_submit, and every problem of the spec by its JSON
 * path in the body ("$.spec.transforms[2].n: ...") appended to *problems
 * (may be NULL; caller frees); err then names the first and the count. */
sl_err_t sl_master_admin_job_submit_problems(sl_master_t *m, const json_t *body, char **job_id,
                                             sl_pipeline_problems_t *problems, sl_error_t *err);

/* One job as JSON (GET /jobs/{id}): {"id", "state" ("running", "finished"
 * or "failed"), "failure" (null, or {"split", "epoch", "file", "stripe",
 * "message", "code"} of a failed job), "split_failures" (this epoch),
 * "on_bad_split", "skipped_splits", "skipped_rows", "epoch", "epochs", "finished",
 * "num_splits", "pending", "leased", "done", "committed_rows", "total_rows",
 * "ranks", "sharding", "table", "min_workers", "max_workers",
 * "desired_workers", "workers" (registered, live), "clients",
 * "trainer_wait" (0..1), "worker_busy" (0..1), "autoscale_reason"}.
 * Caller owns *out (json_decref). @return SL_ERR_NOT_FOUND (404). */
sl_err_t sl_master_admin_job_json(sl_master_t *m, const char *job_id, json_t **out,
                                  sl_error_t *err);

/* Every job (GET /jobs): {"jobs": [ job objects as above ]}. NULL when out
 * of memory. Caller owns. */
json_t *sl_master_admin_jobs_json(sl_master_t *m);

/* GET /workers: {"workers": [{"id", "job", "serve_address",
 * "admin_address", "connected" (bool), "leases" (count), "busy" (0..1),
 * "queued_batches", "memory_used", "batches_sent", "samples_sent",
 * "last_heartbeat_ms_ago"}]}. NULL when out of memory. Caller owns. */
json_t *sl_master_admin_workers_json(sl_master_t *m);

/* GET /status: {"ready", "address", "uptime_s", "jobs" (count), "workers"
 * (connected), "clients" (connected), "leases_granted", "lease_expiries",
 * "lease_revocations", "commits", "overlaps", "stale", "journal_syncs",
 * "compactions" (this run), "splits": {"pending", "leased", "done"},
 * "failure", "failed_jobs": [{"id", "failure"}], and "executor" after
 * sl_master_report_executor}. NULL when out of memory. Caller owns. */
json_t *sl_master_admin_status_json(sl_master_t *m);

#endif

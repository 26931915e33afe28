/* The DPP master process (`sluice master`): the state machine of
 * master_state.h behind a control socket (proto/control.proto, framed by
 * src/rpc/frame.h) that workers and trainer clients connect to, plus the
 * calls its admin endpoint (master_admin.c) and its executor loop need.
 *
 *   workers  --REGISTER/LEASE_REQUEST/HEARTBEAT/SPLIT_READ-->  +--------+
 *   clients  --ATTACH/COMMIT/CLIENT_STATS/TOKEN_REQUEST----->  | master |
 *   admin    --sl_master_job_submit/remove/scale/..._json--->  +--------+
 *                                                                  |
 *   executor <--sl_master_desired (desired workers per job)--------+
 *
 * One control thread (poll loop) owns every control connection; the state
 * is guarded by one mutex that the admin calls take too. Group commit:
 * answers that exactly-once rests on (COMMITTED, SPLIT_READ_REPLY, a
 * submitted job, TOKEN) are sent only after the state has been synced to
 * disk (fdatasync) following the change; the loop collects every such
 * answer of one poll round and syncs once for all of them.
 *
 * Exactly once (docs/DESIGN.md, "Exactly once per epoch"): a commit is
 * accepted iff its row range overlaps no committed range of its (job, epoch,
 * split) and its lease (split, generation) is live; repeated (client_id,
 * nonce) pairs get their first answer again, also after a master restart.
 * A worker's HEARTBEAT renews only the leases it lists, its REGISTER
 * revokes the others of its id, and one live process holds a worker id
 * (the REGISTER incarnation).
 *
 * Thread safety: every sl_master_* call may be made from any thread
 * (admin handlers run on libmicrohttpd's thread). */
#ifndef SLUICE_DPP_MASTER_MASTER_H
#define SLUICE_DPP_MASTER_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "dpp/admin/endpoint.h"
#include "dpp/master/autoscale.h"
#include "dpp/master/executor.h"
#include "dpp/pipeline/job.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

#define SL_MASTER_PROTOCOL_VERSION 1

typedef struct sl_master_opts {
    const char *listen;          /* control address "host:port"; NULL: "127.0.0.1:0" */
    const char *state_dir;       /* journal + snapshot; NULL: in memory (tests) */
    uint64_t lease_timeout_ms;   /* 0: 10000 */
    uint64_t heartbeat_ms;       /* told to workers; 0: lease_timeout_ms / 4 */
    uint64_t autoscale_every_ms; /* one autoscaler observation per job this often; 0: 1000 */
    uint32_t max_connections;    /* control connections at once; 0: 1024 */
    uint32_t max_jobs;           /* 0: 64 */
    uint32_t max_workers;        /* distinct worker ids; 0: 65536 */
    uint32_t max_clients;        /* client records at once (their commit nonces); 0: 4096 */
    uint64_t client_idle_ms;     /* a client record with no connection and no commit this
                                    long is forgotten (journaled); 0: 600000 (10 min) */
    uint32_t max_answers;        /* remembered commit answers per client (idempotence); 0: 4096 */
    uint32_t max_fleet_workers; /* workers of all jobs together (sl_master_autoscale_fair_share); 0:
                                   no limit */
    uint32_t max_split_failures; /* a split failing this often in one epoch fails its job (or
                                    is skipped: on_bad_split); 0: 3 */
    uint64_t compact_bytes;      /* journal size that triggers a compaction; 0: 64 MiB */
    /* Tuning of every job's autoscaler (thresholds, streaks, cooldown); the
     * bounds come from each job's min_workers/max_workers. NULL: defaults
     * of sl_master_autoscale_opts_default. */
    const sl_master_autoscale_opts_t *autoscale;
    const sl_allocator_t *allocator; /* NULL: default */
    /* Peers (docs/PROTOCOL.md "Authentication", "Timeouts and caps"): */
    const char *cluster_secret;    /* copied; every connection must prove it holds it
                                      (rpc/auth.h) before REGISTER or ATTACH. NULL: no
                                      handshake, and then only a loopback listen address
                                      is accepted */
    uint64_t handshake_timeout_ms; /* authenticate and REGISTER or ATTACH within this; 0: 10000 */
    uint64_t client_conn_idle_ms;  /* a client connection that sends nothing this long is
                                      closed (trainer clients report every refresh_ms);
                                      0: 60000 */
    uint64_t worker_conn_idle_ms;  /* a worker connection that sends nothing this long is
                                      closed (its leases expired long before);
                                      0: 3 x lease_timeout_ms */
} sl_master_opts_t;

typedef struct sl_master sl_master_t;

/* Open the state (replaying state_dir; a torn journal tail is cut and
 * logged to stderr), bind the control socket and start the control thread.
 * Jobs found in the state are resumed: their specs are re-read, their
 * leases expire after the lease timeout unless the workers renew them.
 * Caller owns *out, free with sl_master_stop. @return SL_ERR_IO when the
 * address cannot be bound or the state directory is unusable,
 * SL_ERR_CORRUPT (and friends) for damaged state, SL_ERR_INVALID for bad
 * opts, among them a listen address other than loopback without a
 * cluster_secret. */
sl_err_t sl_master_start(const sl_master_opts_t *opts, sl_master_t **out, sl_error_t *err);

/* Stop the control thread, close every connection, sync and free. m may be
 * NULL. */
void sl_master_stop(sl_master_t *m);

/* The bound control port (the real one when port 0 was asked), and the
 * address "host:port" workers and clients connect to (borrowed, lives as
 * long as m). */
uint16_t sl_master_port(const sl_master_t *m);
const char *sl_master_address(const sl_master_t *m);

/* Ready: the state is open and the control socket listens (always true
 * after a successful start; false after a fatal journal error, which also
 * makes every mutating call fail with SL_ERR_IO). */
bool sl_master_ready(sl_master_t *m);

/* ---- jobs (POST/GET/DELETE /jobs) ------------------------------------------------- */

/* Submit a job. body is the POST /jobs JSON object:
 *   {"spec": {job spec, docs/JOBS.md},          required
 *    "ranks": N,                                 trainer ranks, default 1
 *    "sharding": "dynamic" | "static",           default "dynamic"
 *    "min_workers": N, "max_workers": N,         autoscaler bounds, default 1, 1
 *    "workers": N,                               initial desired count, default min_workers
 *    "resume_token": "<base64>"}                 optional (sl_trainer_resume_token bytes)
 * The spec's table is opened and cut into splits here; the job id is the
 * spec's "id". Synced before returning. *job_id (may be NULL) gets the id;
 * caller frees it with free(). @return SL_ERR_INVALID for a bad body, spec,
 * table or token (err says which key / what; answer 400), SL_ERR_AGAIN when
 * a job of that id already exists (answer 409), SL_ERR_TOO_LARGE past
 * max_jobs (answer 429 or 400), SL_ERR_IO when the journal fails (500). */
sl_err_t sl_master_job_submit(sl_master_t *m, const json_t *body, char **job_id, sl_error_t *err);

/* sl_master_job_submit, and every problem of the spec by its JSON path in
 * the body ("$.spec.transforms[2].n: ...") appended to *problems (may be
 * NULL; caller frees): parse, the table and its schema, the binding of
 * every name as a worker's plan does it, and every file the spec names
 * (vocabularies exist, are regular files, are under their size cap; their
 * content is never read nor quoted). The job is accepted only when a
 * worker could bind it. */
sl_err_t sl_master_job_submit_problems(sl_master_t *m, const json_t *body, char **job_id,
                                       sl_pipeline_problems_t *problems, sl_error_t *err);

/* Remove a job: its leases vanish, its workers are told to stop at their
 * next heartbeat, its desired count becomes 0. Synced before returning.
 * @return SL_ERR_NOT_FOUND (404). */
sl_err_t sl_master_job_remove(sl_master_t *m, const char *job_id, sl_error_t *err);

/* One job as JSON (GET /jobs/{id}): {"id", "state" ("running", "finished"
 * or "failed"), "failure" (null, or {"split", "epoch", "file", "stripe",
 * "message", "code"} of a failed job), "split_failures" (this epoch),
 * "on_bad_split", "skipped_splits", "skipped_rows", "epoch", "epochs", "finished",
 * "num_splits", "pending", "leased", "done", "committed_rows", "total_rows",
 * "ranks", "sharding", "table", "min_workers", "max_workers",
 * "desired_workers", "workers" (registered, live), "clients",
 * "trainer_wait" (0..1), "worker_busy" (0..1), "autoscale_reason"}.
 * Caller owns *out (json_decref). @return SL_ERR_NOT_FOUND (404). */
sl_err_t sl_master_job_json(sl_master_t *m, const char *job_id, json_t **out, sl_error_t *err);

/* Every job (GET /jobs): {"jobs": [ job objects as above ]}. NULL when out
 * of memory. Caller owns. */
json_t *sl_master_jobs_json(sl_master_t *m);

/* Set a job's desired worker count by hand (POST /jobs/{id}/scale, body
 * {"workers": N}), clamped to its bounds; the autoscaler resumes after its
 * cooldown. *set (may be NULL) gets the count set. @return
 * SL_ERR_NOT_FOUND (404). */
sl_err_t sl_master_job_scale(sl_master_t *m, const char *job_id, uint32_t workers, uint32_t *set,
                             sl_error_t *err);

/* ---- workers, status, metrics ------------------------------------------------------ */

/* GET /workers: {"workers": [{"id", "job", "serve_address",
 * "admin_address", "connected" (bool), "leases" (count), "busy" (0..1),
 * "queued_batches", "memory_used", "batches_sent", "samples_sent",
 * "last_heartbeat_ms_ago"}]}. NULL when out of memory. Caller owns. */
json_t *sl_master_workers_json(sl_master_t *m);

/* GET /status: {"ready", "address", "uptime_s", "jobs" (count), "workers"
 * (connected), "clients" (connected), "leases_granted", "lease_expiries",
 * "lease_revocations", "commits", "overlaps", "stale", "journal_syncs",
 * "compactions" (this run), "splits": {"pending", "leased", "done"},
 * "failure", "failed_jobs": [{"id", "failure"}], and "executor" after
 * sl_master_report_executor}. NULL when out of memory. Caller owns. */
json_t *sl_master_status_json(sl_master_t *m);

/* GET /metrics: Prometheus text (prom.h), sluice_master_* families: jobs,
 * workers, clients, splits{job,state}, leases_granted_total,
 * lease_expiries_total, lease_revocations_total, worker_ids_in_use_total,
 * commits_total{result}, committed_rows{job},
 * samples_committed_total{job}, trainer_wait_ratio{job},
 * worker_busy_ratio{job}, worker_queue_batches{job}, desired_workers{job},
 * granted_workers{job}, worker_memory_bytes{job}, job_failed{job},
 * skipped_splits_total{job}, skipped_rows_total{job}, client_records,
 * clients_evicted_total, split_failures_total, journal_syncs_total,
 * journal_compactions_total, memory_bytes, and the executor_* families
 * after an executor report. Caller owns (free()); NULL when out of memory. */
char *sl_master_metrics_text(sl_master_t *m);

/* ---- executor (the local one, or an external orchestrator through /jobs) ---------- */

typedef struct sl_master_desired {
    char job_id[256];
    uint32_t workers;     /* what the autoscaler (or a manual scale) wants now */
    uint32_t granted;     /* its fair share of max_fleet_workers: what to run (0 when finished) */
    uint32_t registered;  /* workers of the job connected to the master now */
    bool finished;        /* every epoch committed: the executor may stop its workers */
    bool failed;          /* the job failed: its workers are to be stopped too */
} sl_master_desired_t;

/* The desired worker count of every job (up to cap entries, in submission
 * order). Removed jobs are not listed (their workers are to be stopped).
 * @return the number of jobs (may exceed cap). */
uint32_t sl_master_desired(sl_master_t *m, sl_master_desired_t *out, uint32_t cap);

/* Fair share of the fleet (implemented in master_admin.c). Each job has
 * desired workers (0: finished) and a min_workers. When max_fleet_workers
 * is 0 or the desired counts sum to at most it, every job is granted its
 * desired count. Otherwise the counts are scaled down in proportion to the
 * desired ones (granted = desired * r for one ratio r < 1), never below a
 * job's min_workers (nor above its desired count), so that they sum to
 * max_fleet_workers; the workers left by rounding down go one each to the
 * largest fractions, ties to the lower job id (strcmp). When the
 * min_workers alone exceed max_fleet_workers, each job gets its minimum
 * (the bound then is the sum of the minimums). Pure: sets jobs[i].granted. */
typedef struct sl_master_autoscale_share {
    const char *job_id; /* borrowed; breaks ties */
    uint32_t desired, min_workers;
    uint32_t granted;   /* out */
} sl_master_autoscale_share_t;
void sl_master_autoscale_fair_share(sl_master_autoscale_share_t *jobs, uint32_t n,
                                    uint32_t max_fleet_workers);

/* The local executor's figures, for GET /metrics (sluice_master_executor_*:
 * workers started, exits by result, spawn errors, restarts postponed, the
 * longest restart delay now) and GET /status ("executor"). The process that
 * drives an executor reports after each pass; without a report the
 * families are absent. */
void sl_master_report_executor(sl_master_t *m, const sl_master_executor_stats_t *st);

/* ---- admin endpoint (implemented in master_admin.c) -------------------------------- */

/* Start the master's admin endpoint (GET /healthz /readyz /metrics /status,
 * GET/POST/DELETE /jobs, GET /jobs/{}, GET /workers, POST /jobs/{}/scale)
 * on address (NULL: "127.0.0.1:0") with bearer token (NULL: mutating routes
 * answer 403). m must outlive it. Caller owns *out, free with
 * sl_admin_stop. */
sl_err_t sl_master_admin_start(sl_master_t *m, const char *address, const char *token,
                               sl_admin_t **out, sl_error_t *err);

/* The same with every endpoint option (address, token, TLS certificate and
 * key, connection limit and timeout, admin.h); its routes, context and
 * body limit are the master's own. */
sl_err_t sl_master_admin_serve(sl_master_t *m, const sl_admin_opts_t *endpoint, sl_admin_t **out,
                               sl_error_t *err);

#endif

/* The DPP master process (`sluice master`): the state machine of state.h
 * behind a control socket (proto/control.proto, framed by src/rpc/frame.h)
 * that workers and trainer clients connect to, plus the calls its admin
 * routes (admin.h: HTTP and JSON live there) and its executor loop need.
 * Everything here takes and returns plain C structs.
 *
 *   workers  --REGISTER/LEASE_REQUEST/HEARTBEAT/SPLIT_READ-->  +--------+
 *   clients  --ATTACH/COMMIT/CLIENT_STATS/TOKEN_REQUEST----->  | master |
 *   admin    --sl_master_job_submit/remove/scale, _visit---->  +--------+
 *                                                                  |
 *   executor <--sl_master_desired (desired workers per job)--------+
 *
 * One control thread (an epoll loop) owns every control connection; the state
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
 * A worker's HEARTBEAT renews only the leases it lists (and an answer to
 * its call renews them again: time waiting on the master does not count),
 * its REGISTER revokes the others of its id, and one live process holds a
 * worker id (the REGISTER incarnation).
 *
 * Thread safety: every sl_master_* call may be made from any thread
 * (admin handlers run on libmicrohttpd's thread). */
#ifndef SLUICE_DPP_MASTER_MASTER_H
#define SLUICE_DPP_MASTER_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dpp/master/autocache/autocache.h"
#include "dpp/master/process/history.h"
#include "dpp/master/autoscale/autoscale.h"
#include "dpp/master/executor/executor.h"
#include "dpp/master/state/state.h"
#include "dpp/master/journal/state_store.h"
#include "dpp/pipeline/problems.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

#define SL_MASTER_PROTOCOL_VERSION 1

typedef struct sl_master_opts {
    const char *listen;          /* control address "host:port"; NULL: "127.0.0.1:0" */
    const char *state_dir;       /* journal + snapshot; NULL: in memory (tests) */
    uint64_t lease_timeout_ms;   /* 0: 10000 */
    uint64_t heartbeat_ms;       /* told to workers; 0: lease_timeout_ms / 4 */
    uint64_t autoscale_every_ms; /* one autoscaler observation per job this often; 0: 1000 */
    uint64_t history_every_ms;   /* a point of each job's history this often; 0: 10000 */
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
    uint64_t kafka_watch_ms;       /* stream jobs: partitions, watermarks (lag) and the
                                      consumer-group mirror this often; 0: 2000 */
    uint32_t kafka_chunks_ahead;   /* chunks a stream partition keeps open (state.h); 0: 4 */
    /* The autocache (docs/DESIGN.md "Autocache"): its directory (created;
     * shared with the workers; NULL: no autocache), the bytes of cache
     * files it may hold (0: 8 GiB), and the size of the file written and
     * read at start to measure its read throughput (0: 16 MiB). */
    const char *cache_dir;
    uint64_t cache_max_bytes;
    uint64_t cache_probe_bytes;
    /* The autocache on workers' disks (a job whose source is in an object
     * store): how long from an epoch's start a split cached on another
     * worker waits for it before an idle worker reads it from the store
     * (0: the default, 2000). */
    uint64_t cache_wait_ms;
    /* The object store requests of a submit that plans from an s3:// table
     * or Parquet dataset (its listing, schema and footers): one attempt's
     * limit and the tries of a retryable failure; 0: the store's defaults
     * (60000 ms, 5). A hung object fails the submit naming it instead of
     * holding the submit for the defaults' minutes. */
    uint32_t store_timeout_ms;
    uint32_t store_max_attempts;
} sl_master_opts_t;

typedef struct sl_master sl_master_t;

/* Open the state (replaying state_dir; a torn journal tail is cut and
 * logged through common/log.h), bind the control socket and start the control thread.
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

/* The allocator m was started with (opts.allocator, or the default): the
 * one that frees the strings m hands out (sl_strfree, common/mem.h). */
const sl_allocator_t *sl_master_allocator(const sl_master_t *m);

/* The bound control port (the real one when port 0 was asked), and the
 * address "host:port" workers and clients connect to (borrowed, lives as
 * long as m). */
uint16_t sl_master_port(const sl_master_t *m);
const char *sl_master_address(const sl_master_t *m);

/* Ready: the state is open and the control socket listens (always true
 * after a successful start; false after a fatal journal error, which also
 * makes every mutating call fail with SL_ERR_IO). */
bool sl_master_ready(sl_master_t *m);

/* ---- jobs ----------------------------------------------------------------------- */

/* A job to submit (POST /jobs, docs/ADMIN.md; borrowed for the call). */
typedef struct sl_master_submit {
    const char *spec_json; /* the job spec (docs/JOBS.md) as JSON text; kept as given and
                              handed to workers in leases; required */
    uint32_t ranks;        /* trainer ranks, >= 1 */
    bool static_sharding;  /* each split served to one rank */
    uint32_t min_workers, max_workers; /* autoscaler bounds, 1 <= min <= max */
    uint32_t workers;                  /* initial desired count (clamped to the bounds) */
    /* Resume tokens (sl_trainer_resume_token bytes): none, one, or one per
     * trainer rank (the job starts with what every rank delivered). */
    const uint8_t *const *tokens; /* [num_tokens] */
    const size_t *token_lens;     /* [num_tokens] */
    uint32_t num_tokens;          /* 0..SL_MASTER_MAX_RESUME_TOKENS */
} sl_master_submit_t;

/* Submit a job. The spec is checked as a worker would use it: parsed, its
 * table opened (schema) and cut into splits, every name bound as a
 * worker's plan does it, and every file the spec names checked
 * (vocabularies exist, are regular files, are under their size cap; their
 * content is never read nor quoted); the job is accepted only when a
 * worker could bind it. The job id is the spec's "id". Synced before
 * returning. *job_id (may be NULL) gets the id, an owned string of
 * sl_master_allocator(m): caller frees it with sl_strfree. Every problem of the spec goes to
 * *problems (may be NULL; caller frees) by its JSON path in the spec ("$.transforms[2].n: ..."),
 * and err names the first and the count. @return SL_ERR_INVALID for a bad request, spec or table
 * (err says what), SL_ERR_CORRUPT, SL_ERR_TRUNCATED or SL_ERR_VERSION for a damaged token (err
 * names it), SL_ERR_AGAIN when a job of that id exists already, SL_ERR_TOO_LARGE past max_jobs,
 * SL_ERR_IO when the journal fails. */
sl_err_t sl_master_job_submit(sl_master_t *m, const sl_master_submit_t *req, char **job_id,
                              sl_pipeline_problems_t *problems, sl_error_t *err);

/* Start job_id again from resume tokens (one, or one per trainer rank, as
 * in sl_master_submit_t), with the spec, ranks, sharding and worker bounds
 * it was submitted with, in one step: the spec is checked and the tokens
 * against it before the job (running, finished or failed) is replaced, so
 * a refused token leaves it as it was. Synced before returning. @return
 * SL_ERR_NOT_FOUND, and the errors of sl_master_job_submit (a token of
 * another job or other splits: SL_ERR_INVALID; damaged: SL_ERR_CORRUPT,
 * SL_ERR_TRUNCATED, SL_ERR_VERSION). */
sl_err_t sl_master_job_resubmit(sl_master_t *m, const char *job_id, const uint8_t *const *tokens,
                                const size_t *token_lens, uint32_t num_tokens, sl_error_t *err);

/* Remove a job: its leases vanish, its workers are told to stop at their
 * next heartbeat, its desired count becomes 0. Synced before returning.
 * @return SL_ERR_NOT_FOUND. */
sl_err_t sl_master_job_remove(sl_master_t *m, const char *job_id, sl_error_t *err);

/* Set a job's desired worker count by hand (POST /jobs/{id}/scale),
 * clamped to its bounds; the autoscaler resumes after its cooldown. *set
 * (may be NULL) gets the count set. @return SL_ERR_NOT_FOUND. */
sl_err_t sl_master_job_scale(sl_master_t *m, const char *job_id, uint32_t workers, uint32_t *set,
                             sl_error_t *err);

/* ---- views: what GET /status, /jobs and /workers show ------------------------------ */

/* A partition of a stream job: where it stands (state.h) and the high
 * watermark the master's Kafka watcher last saw (-1: not yet). */
typedef struct sl_master_kafka_view {
    sl_master_kafka_position_t pos;
    int64_t high;
} sl_master_kafka_view_t;

/* One job. */
typedef struct sl_master_job_view {
    const char *id;
    sl_master_state_job_status_t status; /* epochs, splits, rows, spec, failure (state.h) */
    uint32_t min_workers, max_workers;   /* autoscaler bounds */
    uint32_t desired_workers;            /* the autoscaler's (or a manual scale's) count */
    uint32_t granted_workers;            /* after the fleet's fair share */
    uint32_t workers;                    /* registered workers of the job connected now */
    uint32_t clients;                    /* trainer clients of the job connected now */
    double trainer_wait, worker_busy;    /* of the last autoscaler observation, 0..1 */
    const char *autoscale_reason;
    /* its workers' encoded batch bytes, and what they would take had dedup
     * been off (heartbeats of every worker the master knows for the job) */
    uint64_t bytes_encoded, bytes_expanded;
    /* a stream job's partitions (borrowed for the visit), none for others */
    const sl_master_kafka_view_t *kafka;
    uint32_t num_kafka;
    /* Shared passes: the other jobs of the same plan fingerprint that share
     * with it (status.share on both; borrowed for the callback) */
    const char *const *shares_with;
    uint32_t num_shares_with;
    /* what its workers' shared passes saved (heartbeats): batches served
     * to the other jobs without computing them, their bytes, and the
     * pipeline CPU they would have cost */
    uint64_t shared_batches, shared_bytes, shared_cpu_ns;
    /* The autocache (docs/DESIGN.md "Autocache"): the decision for the
     * job's prefix fingerprint (0: not cacheable) and the figures behind
     * it; what its workers read from cache files (samples, time), the
     * reads that fell back to computing, the files they wrote; the cache
     * directory's state (cache_dir NULL: no autocache). */
    uint64_t prefix_fingerprint;
    sl_master_autocache_decision_t autocache;
    uint64_t cache_samples, cache_read_ns, cache_fallbacks;
    uint64_t cache_files_written, cache_bytes_written;
    uint64_t computed_samples, compute_ns;
    /* a source in an object store: the cache files live on the workers'
     * disks (docs/STORAGE.md), of which live workers hold this many */
    bool cache_on_workers;
    uint64_t cache_worker_files;
    const char *cache_dir;
    sl_master_autocache_stats_t cache_dir_stats;
    /* The last hour (history.h; borrowed for the callback): points and the
     * autoscaler's decisions; the current rates and the time left at
     * them (eta_s < 0: cannot be told, e.g. a stream or no rate yet). */
    const sl_master_history_t *history;
    double samples_per_s, eta_s;
} sl_master_job_view_t;

/* One worker id the master has seen. */
typedef struct sl_master_worker_view {
    const char *id, *job; /* job: "" until its first lease */
    const char *serve_address, *admin_address;
    bool connected;
    uint32_t leases, queued_batches; /* from its last heartbeat */
    double busy;                     /* 0..1 */
    uint64_t memory_used, batches_sent, samples_sent;
    uint64_t last_heartbeat_ms_ago;
} sl_master_worker_view_t;

/* The master as a whole. */
typedef struct sl_master_status_view {
    bool ready;          /* sl_master_ready */
    const char *address; /* control address */
    uint64_t uptime_s;
    uint32_t workers, clients; /* connected now */
    sl_master_state_counters_t counters;
    sl_master_store_counters_t store; /* the journal's syncs and compactions */
    const char *failure;              /* why the state failed; "" when it did not */
    bool has_executor;                /* executor: the last sl_master_report_executor */
    sl_master_executor_stats_t executor;
} sl_master_status_view_t;

/* What to show (a NULL callback: not that part). */
typedef struct sl_master_visitor {
    void (*status)(void *ctx, const sl_master_status_view_t *v);
    void (*job)(void *ctx, const sl_master_job_view_t *v);
    void (*worker)(void *ctx, const sl_master_worker_view_t *v);
    void *ctx;
} sl_master_visitor_t;

/* Show the master to v, all of it at one moment (under the master's
 * lock): the status, then every job in submission order (only job_id when
 * not NULL), then every worker id seen. Views and their strings are
 * borrowed for the callback only; a callback must not call into m.
 * @return SL_ERR_NOT_FOUND when job_id names no job (then nothing is
 * shown). */
sl_err_t sl_master_visit(sl_master_t *m, const char *job_id, const sl_master_visitor_t *v,
                         sl_error_t *err);

/* GET /metrics: Prometheus text (common/prom.h), sluice_master_* families: jobs,
 * workers, clients, splits{job,state}, leases_granted_total,
 * lease_expiries_total, lease_revocations_total, worker_ids_in_use_total,
 * commits_total{result}, committed_rows{job},
 * samples_committed_total{job}, trainer_wait_ratio{job},
 * worker_busy_ratio{job}, worker_queue_batches{job}, desired_workers{job},
 * granted_workers{job}, worker_memory_bytes{job}, job_failed{job},
 * skipped_splits_total{job}, skipped_rows_total{job}, client_records,
 * clients_evicted_total, split_failures_total, journal_syncs_total,
 * journal_compactions_total, memory_bytes, and the executor_* families
 * after an executor report. Caller owns, an owned string of
 * sl_master_allocator(m): free with sl_strfree. NULL when out of memory. */
char *sl_master_metrics_text(sl_master_t *m);

/* ---- executor (the local one, or an external orchestrator through /jobs) ---------- */

typedef struct sl_master_desired {
    char job_id[256];
    uint32_t workers;    /* what the autoscaler (or a manual scale) wants now */
    uint32_t granted;    /* its fair share of max_fleet_workers: what to run (0 when finished) */
    uint32_t registered; /* workers of the job connected to the master now */
    bool finished;       /* every epoch committed: the executor may stop its workers */
    bool failed;         /* the job failed: its workers are to be stopped too */
} sl_master_desired_t;

/* The desired worker count of every job (up to cap entries, in submission
 * order). Removed jobs are not listed (their workers are to be stopped).
 * @return the number of jobs (may exceed cap). */
uint32_t sl_master_desired(sl_master_t *m, sl_master_desired_t *out, uint32_t cap);

/* The executor's figures, for GET /metrics (sluice_master_executor_*; of
 * the local one: workers started, exits by result, spawn errors, restarts
 * postponed, the longest restart delay now; of the Kubernetes one: API
 * requests by result, desired and applied replicas, failures in a row)
 * and GET /status ("executor", by st->kind). The process that
 * drives an executor reports after each pass; without a report the
 * families are absent. */
void sl_master_report_executor(sl_master_t *m, const sl_master_executor_stats_t *st);

#endif

/* Executors: what turns the master's desired worker count per job
 * (sl_master_desired, master.h) into running workers. The master's loop
 * drives one executor through this interface; each kind of executor is one
 * file behind it:
 *
 *   executor_local.c   worker processes on this machine (posix_spawn)
 *   executor_k8s.c     the replicas of one Kubernetes Deployment of workers
 *                      (its scale subresource, through the API server)
 *
 * An executor of another kind adds its constructor below and its own file
 * that fills an sl_master_executor_ops_t.
 *
 * Thread safety: every call takes the executor's own lock; calls may come
 * from any thread. */
#ifndef SLUICE_DPP_MASTER_EXECUTOR_H
#define SLUICE_DPP_MASTER_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/lock.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct sl_master_executor sl_master_executor_t;

/* Stop every worker the executor runs and free it; ex may be NULL. */
void sl_master_executor_destroy(sl_master_executor_t *ex);

/* Start or stop workers of job_id until `workers` of them are running
 * (reaping exited ones first; while the job backs off, none is started
 * before its delay has passed). *started and *stopped (may be NULL) get
 * what was done. @return SL_ERR_TOO_LARGE when max_workers would be passed
 * (as many as fit are started), SL_ERR_IO when a spawn fails (err says
 * which worker and why). */
sl_err_t sl_master_executor_scale(sl_master_executor_t *ex, const char *job_id, uint32_t workers,
                                  uint32_t *started, uint32_t *stopped, sl_error_t *err);

typedef struct sl_master_executor_target {
    const char *job_id;
    uint32_t workers;
} sl_master_executor_target_t;

/* Make the running workers match targets (e.g. from sl_master_desired, with
 * 0 for a finished job): scale every listed job, and stop every worker of
 * a job that is not listed (a removed job). Meant to be called once per
 * master loop iteration or so. *started / *stopped (may be NULL) get the
 * totals. @return the first error of a scale (the other jobs are still
 * scaled). */
sl_err_t sl_master_executor_apply(sl_master_executor_t *ex,
                                  const sl_master_executor_target_t *targets, uint32_t n,
                                  uint32_t *started, uint32_t *stopped, sl_error_t *err);

/* Reap exited workers (non-blocking). @return how many exited since the
 * last call. */
uint32_t sl_master_executor_reap(sl_master_executor_t *ex);

/* Running workers of job_id (NULL: of every job), after reaping. */
uint32_t sl_master_executor_count(sl_master_executor_t *ex, const char *job_id);

typedef struct sl_master_executor_worker {
    char worker_id[240]; /* "<job (first 200 bytes)>-w<n>.<master pid>" */
    char job_id[256];
    pid_t pid;
    bool stopping;       /* SIGTERM sent, not yet reaped */
    uint64_t started_ms; /* CLOCK_MONOTONIC */
} sl_master_executor_worker_t;

/* Copy up to cap running workers (of job_id, NULL: all) into out, oldest
 * first. @return how many there are (may exceed cap). */
uint32_t sl_master_executor_list(sl_master_executor_t *ex, const char *job_id,
                                 sl_master_executor_worker_t *out, uint32_t cap);

typedef struct sl_master_executor_stats {
    const char *kind; /* the ops' kind ("local", "kubernetes"): static, never freed */
    /* ---- the local executor's (zero for the others) ---- */
    uint64_t started; /* workers spawned, ever */
    uint64_t stopped; /* SIGTERMs sent by scale-down or destroy */
    uint64_t exited;  /* reaped with exit status 0 */
    uint64_t failed;  /* reaped with a non-zero status or killed by a signal we did not send */
    uint64_t spawn_errors;
    uint64_t delayed;    /* restarts postponed by the back-off (one per failure that set a delay) */
    uint32_t backoff_ms; /* the longest restart delay of a job now (0: none backs off) */
    char last_failure[320]; /* "worker j-w3 (pid 123) killed by signal 9", "" when none */
    /* ---- the Kubernetes executor's (zero for the others) ---- */
    char target[320];     /* "<namespace>/<deployment>" */
    uint32_t desired;     /* replicas: the jobs' granted workers summed, at most the cap */
    int64_t applied;      /* replicas as last set or read from the API server; -1: not known */
    uint64_t requests_ok; /* API requests by result: answered 2xx */
    uint64_t requests_client_error;    /* 4xx (401, 403, 404, 409, 422, ...) */
    uint64_t requests_server_error;    /* 5xx, or a 2xx without a readable Scale */
    uint64_t requests_transport_error; /* no answer: connect, TLS, timeout */
    uint32_t failures;                 /* requests failed in a row (0: the last one succeeded) */
    int last_http_status;              /* of the last failure; 0: none or no HTTP answer */
    char last_error[400];   /* "PATCH .../scale: HTTP 403: <the API server's message>", "" none */
    uint32_t next_retry_ms; /* until the next attempt after a failure; 0: none waiting */
} sl_master_executor_stats_t;

void sl_master_executor_stats(sl_master_executor_t *ex, sl_master_executor_stats_t *out);

/* ---- implementing an executor ------------------------------------------------------ */

/* One kind of executor: executor.c forwards every call above to these
 * (each required), with the meaning given there. */
typedef struct sl_master_executor_ops {
    const char *kind; /* "local", for messages */
    sl_err_t (*scale)(sl_master_executor_t *ex, const char *job_id, uint32_t workers,
                      uint32_t *started, uint32_t *stopped, sl_error_t *err);
    sl_err_t (*apply)(sl_master_executor_t *ex, const sl_master_executor_target_t *targets,
                      uint32_t n, uint32_t *started, uint32_t *stopped, sl_error_t *err);
    uint32_t (*reap)(sl_master_executor_t *ex);
    uint32_t (*count)(sl_master_executor_t *ex, const char *job_id);
    uint32_t (*list)(sl_master_executor_t *ex, const char *job_id, sl_master_executor_worker_t *out,
                     uint32_t cap);
    /* Bring what in ex->stats depends on the time (now_ms, CLOCK_MONOTONIC)
     * or on reaping up to date; called under ex->mu by
     * sl_master_executor_stats, which then copies ex->stats. May be NULL. */
    void (*refresh)(sl_master_executor_t *ex, uint64_t now_ms);
    void (*destroy)(sl_master_executor_t *ex);
} sl_master_executor_ops_t;

/* Every executor's own struct begins with this header, so that an
 * sl_master_executor_t * points at its ops, its lock and its figures. The
 * kind inits and destroys mu, takes it for every call, and keeps stats
 * (all but kind) under it. */
struct sl_master_executor {
    const sl_master_executor_ops_t *ops;
    sl_mutex_t mu;
    sl_master_executor_stats_t stats;
};

/* ---- the local executor (executor_local.c) ----------------------------------------
 *
 * Runs a job's workers as `sluice worker --master ADDR --job-id ID`
 * processes on this machine, so the autoscaler's decision becomes real
 * processes without an external orchestrator.
 *
 * Workers are started with posix_spawn (no fork of a threaded master),
 * each in its own process group with default signal dispositions and an
 * empty signal mask, stdout/stderr to <log_dir>/<worker_id>.log (or
 * /dev/null). A worker's id is "<job>-w<n>.<pid of the executor's
 * process>", n counting up per executor, so the master can tell which
 * registered worker is which process, and a restarted master's workers
 * never take the id of one still running from before.
 *
 * Scaling down sends SIGTERM to the newest workers first (the worker stops
 * cleanly; its unfinished leases expire or are released, and exactly-once
 * holds whatever a worker does, docs/DESIGN.md). Children are reaped by pid
 * (waitpid on each known pid, never waitpid(-1)), so the executor does not
 * steal exit statuses from the rest of the process.
 *
 * Restarts back off: a worker that exits on its own (not stopped by the
 * executor) within healthy_ms of its start counts as a failure of its job,
 * as does a spawn that fails; after the k-th failure in a row the job's
 * next spawn waits backoff_ms * 2^(k-2) (k >= 2; the first is replaced at
 * once), at most max_backoff_ms. A worker that lived healthy_ms starts the
 * count again. So a job whose workers cannot start (a bad table, a crash)
 * costs a spawn every max_backoff_ms, not a fork loop.
 *
 * If the master process dies, its workers live on (they keep heartbeating
 * and re-register with the restarted master); a new executor does not
 * adopt them, it only counts its own children.
 *
 * Destroy stops every worker (SIGTERM, then SIGKILL after stop_grace_ms)
 * and reaps them. */

typedef struct sl_master_executor_local_opts {
    const char *binary;            /* path of the sluice program; required */
    const char *master;            /* the master's control address "host:port"; required */
    const char *log_dir;           /* NULL: worker output to /dev/null */
    const char *listen_host;       /* host workers serve trainers on; NULL: "127.0.0.1" */
    uint32_t worker_threads;       /* --threads per worker; 0: the worker's default */
    const char *const *extra_args; /* more arguments for every worker (at most 64), NULL-terminated;
                                      may be NULL; not --master, --job-id, --worker-id, --listen */
    uint32_t max_workers;          /* live workers over all jobs; 0: 64 */
    uint32_t stop_grace_ms;        /* destroy: SIGTERM, then SIGKILL after this; 0: 5000 */
    uint32_t backoff_ms;           /* first restart delay after failures in a row; 0: 500 */
    uint32_t max_backoff_ms;       /* cap of the delay; 0: 30000 */
    uint32_t healthy_ms;           /* a worker that lived this long resets the count; 0: 10000 */
    const sl_allocator_t *allocator; /* NULL: default */
} sl_master_executor_local_opts_t;

/* Caller owns *out, free with sl_master_executor_destroy. Copies opts (strings
 * included). @return SL_ERR_INVALID when binary or master is missing, an
 * argument is not allowed (see extra_args) or log_dir is not a writable
 * directory (sl_master_executor_local_check_log_dir), SL_ERR_NOMEM. */
sl_err_t sl_master_executor_local_new(const sl_master_executor_local_opts_t *opts,
                                      sl_master_executor_t **out, sl_error_t *err);

/* Is dir an existing directory the executor may create log files in?
 * @return SL_OK or SL_ERR_INVALID saying what is wrong ("--worker-log-dir
 * /x: does not exist"). */
sl_err_t sl_master_executor_local_check_log_dir(const char *dir, sl_error_t *err);

/* ---- the Kubernetes executor (executor_k8s.c) --------------------------------------
 *
 * Runs the workers as the pods of one Deployment (a fleet shared by every
 * job: a worker takes whichever job the master leases it) and sets that
 * Deployment's replicas to the sum of the jobs' targets (their
 * granted_workers, 0 for a finished job), at most max_replicas, by a JSON
 * merge patch of its scale subresource:
 *
 *   PATCH {api}/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale
 *   Content-Type: application/merge-patch+json
 *   {"spec":{"replicas":N}}
 *
 * with the bearer token of the pod's service account (read again for
 * every request: the kubelet rotates it) and the API server's certificate
 * verified against the service account's ca.crt. The calls run on the
 * executor's own thread: scale and apply only record the targets and
 * wake it, so the master's loop never waits for the API server. The
 * thread first reads the scale (GET), then patches only when the desired
 * count differs from the one last applied or read, and reads it again
 * every resync_ms (someone may have run `kubectl scale`).
 *
 * A failed request (no connection, TLS, a 4xx or 5xx answer) is retried
 * after backoff_ms, doubling with each failure in a row up to
 * max_backoff_ms; the stats say what failed (the HTTP status and the API
 * server's message) and when the next attempt comes.
 *
 * Destroy stops the thread (an unfinished request is abandoned) and leaves
 * the Deployment as it is: a restarted master takes its workers over. */

#define SL_K8S_SERVICEACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct sl_master_executor_k8s_opts {
    const char *deployment;          /* the workers' Deployment; required (a DNS-1123 name) */
    const char *ns;                  /* its namespace; NULL: <serviceaccount_dir>/namespace */
    const char *api_url;             /* "https://host:port"; NULL: https://$KUBERNETES_SERVICE_HOST:
                                        $KUBERNETES_SERVICE_PORT */
    const char *serviceaccount_dir;  /* token, ca.crt, namespace; NULL: SL_K8S_SERVICEACCOUNT_DIR */
    uint32_t max_replicas;           /* the most replicas ever asked for; 0: no cap (2^31 - 1) */
    uint32_t backoff_ms;             /* first retry delay; 0: 500 */
    uint32_t max_backoff_ms;         /* its cap; 0: 30000 */
    uint32_t timeout_ms;             /* one request, connect included; 0: 10000 */
    uint32_t resync_ms;              /* read the scale again this often; 0: 60000 */
    const sl_allocator_t *allocator; /* NULL: default */
} sl_master_executor_k8s_opts_t;

/* Caller owns *out, free with sl_master_executor_destroy. Starts the
 * executor's thread, which reads the scale at once. @return
 * SL_ERR_INVALID when the deployment or namespace is not a valid name, no
 * API server is given or found in the environment, the URL is not https,
 * or the token or the namespace file is empty or holds what is not a
 * token; SL_ERR_IO when the token, ca.crt or namespace file cannot be read
 * (err names the file) or the thread cannot start; SL_ERR_NOMEM. Logs
 * (common/log.h) executor_request_failed (warn), executor_recovered and
 * executor_scaled (info). */
sl_err_t sl_master_executor_k8s_new(const sl_master_executor_k8s_opts_t *opts,
                                    sl_master_executor_t **out, sl_error_t *err);

#endif

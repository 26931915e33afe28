/* The lease client: a worker's side of the control protocol
 * (proto/control.proto, frames 16..24 and SPLIT_FAILED 32..33, after the
 * cluster-secret handshake of rpc/auth.h when there is a secret) with a
 * DPP master. Three files: lease_client.c, lease_conn.c, lease_control.c
 * (lease_client_internal.h says which does what).
 *
 *   new       connect, REGISTER (worker id, serve and admin addresses) and
 *             start the control thread
 *   wait_job  LEASE_REQUEST until the master grants a first lease: its job
 *             spec is the worker's job (a worker serves one job)
 *   next      (the worker's reader) the next lease: LEASE_REQUEST, waiting
 *             NO_WORK's retry_ms between asks, until the job is finished,
 *             the master retires the worker (HEARTBEAT_REPLY stop) or the
 *             source is cancelled
 *   failed    (the reader or a transform thread) the lease's split cannot be
 *             read: the lease is no longer live and the control thread
 *             reports it with SPLIT_FAILED (the master leases the split
 *             again, skips it or fails the job); the worker goes on
 *   control   the control thread: HEARTBEAT every heartbeat_ms with the
 *   thread    leases held and the worker's load, dropping the leases the
 *             master revokes; SPLIT_READ for a lease once the reader has read
 *             all its todo rows AND every batch of it has been acknowledged
 *             by a trainer client (or dropped), with the ranges that made no
 *             batch; the lease is forgotten once the master answers
 *
 * A lost connection (master killed, restarted) is re-established with a
 * back-off and REGISTER again; heartbeats go on listing the leases held, and
 * the master revokes those it no longer knows. SPLIT_READs not answered are
 * sent again.
 *
 * Threads: the control thread, plus whoever calls next (the reader) and the
 * lease hooks (the server's threads). One connection, one request at a time
 * (a call is a request and its reply, under a lock). */
#ifndef SLUICE_DPP_WORKER_LEASE_CLIENT_H
#define SLUICE_DPP_WORKER_LEASE_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "dpp/worker/source/source.h"
#include "dpp/worker/runtime/worker.h"
#include "sluice/err.h"

typedef struct sl_worker_lease_client_opts {
    const char *master;        /* "host:port" of the master's control listener; required */
    const char *worker_id;     /* required */
    const char *job_id;        /* serve only this job; NULL or "": the job of the first lease */
    const char *serve_address; /* "host:port" trainer clients connect to; required */
    const char *admin_address; /* the worker's admin endpoint; NULL: none */
    uint32_t threads;          /* reported in REGISTER */
    int connect_timeout_ms;    /* per connection attempt and per reply; 0: 5000 */
    uint32_t max_todo;         /* most todo ranges in a lease; 0: 65536 */
    const sl_allocator_t *allocator; /* NULL: default */
    const char *cluster_secret;      /* copied; prove it to the master on every connection
                                        (rpc/auth.h); NULL: the master has none */
    /* Shared passes (docs/DESIGN.md): a job sharing this worker's passes
     * that has this many batches not yet acknowledged, or whose copies hold
     * a quarter of the worker's memory limit, stops sharing (the master
     * leases it on its own from then on). 0: 64. */
    uint32_t share_window;
    bool no_share; /* never take shared passes (REGISTER shares false) */
    /* A shared pass that has not moved for this long (its primary's own
     * job does not take its batches, so the worker's queue or memory is
     * full; or its read is that slow) releases its members: they end with
     * what they got and their jobs read the rest on their own. 0: 5000. */
    uint32_t share_stall_ms;
    /* The autocache of jobs whose source is in an object store keeps its
     * files here, on the worker's own disk (docs/STORAGE.md, "The
     * autocache and object stores"; a folder of this process's own is
     * made in it and removed at the end), at most cache_max_bytes of them
     * (0: 8 GiB). NULL: such leases are computed, never cached. */
    const char *cache_dir;
    uint64_t cache_max_bytes;
} sl_worker_lease_client_opts_t;

typedef struct sl_worker_lease_client_stats {
    uint64_t leases;        /* granted */
    uint64_t split_reads;   /* SPLIT_READ answered */
    uint64_t splits_done;   /* ... with DONE */
    uint64_t revoked;       /* leases the master took back */
    uint64_t splits_failed; /* leases whose split could not be read (SPLIT_FAILED) */
    uint64_t heartbeats;    /* answered */
    uint64_t reconnects;    /* connections re-established */
    uint32_t leases_held;   /* now: being read or waiting for acknowledgements */
    bool stop;              /* the master retired this worker */
    bool finished;          /* the master says the job has no more work */
    uint64_t lease_timeout_ms, heartbeat_ms; /* from REGISTERED */
    char job_id[256];                        /* the job served ("" before the first lease) */
    uint64_t shared_leases;                  /* leases of other jobs taken with a shared pass */
    uint64_t shares_detached;                /* ... that fell behind and were detached */
    uint64_t shares_released;                /* ... released by a stalled pass */
    /* the cache files on this worker's disk (opts.cache_dir): held now, their
     * bytes, removed to stay within cache_max_bytes */
    uint64_t cache_files, cache_bytes, cache_evicted;
} sl_worker_lease_client_stats_t;

typedef struct sl_worker_lease_client sl_worker_lease_client_t;

/* Connect and register (a master that cannot be reached or refuses is an
 * error: SL_ERR_IO / SL_ERR_TIMEOUT / SL_ERR_PROTOCOL naming the address),
 * and start the control thread. Caller owns *out until it is handed to a
 * worker (sl_worker_lease_client_source); free with
 * sl_worker_lease_client_destroy. */
sl_err_t sl_worker_lease_client_new(const sl_worker_lease_client_opts_t *opts,
                                    sl_worker_lease_client_t **out, sl_error_t *err);

/* Ask for leases until one comes (timeout_ms < 0: forever) and return its
 * job's id and spec JSON (borrowed: valid until the source is destroyed).
 * That lease is the first one next returns. @return SL_ERR_TIMEOUT,
 * SL_ERR_CLOSED (job finished, worker retired, or cancelled), or an error
 * of the master's. */
sl_err_t sl_worker_lease_client_wait_job(sl_worker_lease_client_t *ms, int timeout_ms,
                                         const char **job_id, const char **spec_json,
                                         sl_error_t *err);

/* The source for sl_worker_opts_t.source: the worker owns ms from then
 * on (destroy frees it). */
sl_worker_source_t sl_worker_lease_client_source(sl_worker_lease_client_t *ms);

/* Heartbeats report this worker's load (busy fraction, queued batches,
 * memory, batches and samples). w must stay alive until the source is
 * cancelled (sl_worker_stop does that first). */
void sl_worker_lease_client_attach(sl_worker_lease_client_t *ms, sl_worker_t *w);

void sl_worker_lease_client_stats(sl_worker_lease_client_t *ms,
                                  sl_worker_lease_client_stats_t *out);

/* A worker under a master, in steps (so that a program can watch for
 * signals while waiting for work):
 *   prepare  listen on listen (the serve address must be registered before
 *            the job is known; mo->serve_address NULL: that address, a
 *            wildcard host replaced by the host name) and register
 *   sl_worker_lease_client_wait_job (the caller's loop)
 *   start    parse the job spec of the first lease (problems by JSON path in
 *            *problems) and start the worker on the lease client
 * On success of start the caller owns *job (free with sl_pipeline_job_destroy
 * after the worker) and *out, and the worker owns the source and socket;
 * on failure of start, nothing is left. Before start, free a prepared
 * worker with sl_worker_lease_prep_free. */
typedef struct sl_worker_lease_prep {
    sl_worker_lease_client_t *ms;
    int fd;
    uint16_t port;
} sl_worker_lease_prep_t;

sl_err_t sl_worker_lease_prep_new(const sl_worker_lease_client_opts_t *mo, const char *listen,
                                  sl_worker_lease_prep_t *prep, sl_error_t *err);
sl_err_t sl_worker_lease_prep_start(sl_worker_lease_prep_t *prep, const sl_worker_opts_t *wo,
                                    sl_pipeline_job_t **job, sl_worker_t **out,
                                    sl_pipeline_problems_t *problems, sl_error_t *err);
void sl_worker_lease_prep_free(sl_worker_lease_prep_t *prep);

/* All three steps in one call, waiting up to wait_ms (< 0: forever) for
 * the first lease. *ms_out (may be NULL) gets the source. */
sl_err_t sl_worker_start_leased(const sl_worker_lease_client_opts_t *mo, const sl_worker_opts_t *wo,
                                int wait_ms, sl_pipeline_job_t **job, sl_worker_t **out,
                                sl_worker_lease_client_t **ms_out, sl_pipeline_problems_t *problems,
                                sl_error_t *err);

/* Cancel, join the control thread, free every lease; ms may be NULL. */
void sl_worker_lease_client_destroy(sl_worker_lease_client_t *ms);

#endif

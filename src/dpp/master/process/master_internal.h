/* Internals of the master process shared by master.c (lifecycle),
 * submit.c (jobs in and out), views.c (what the admin routes read),
 * tick.c (the periodic tick, autoscaling), control.c (control
 * connections), control_workers.c and control_clients.c (what each frame
 * does) and guard.c (who may connect). Not an API. Everything below m->mu
 * is guarded by it; the functions that touch it say so with
 * SL_REQUIRES(m->mu), which clang checks (common/lock.h; it cannot check
 * the fields themselves in C). */
#ifndef SLUICE_DPP_MASTER_MASTER_INTERNAL_H
#define SLUICE_DPP_MASTER_MASTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

#include "common/clock.h"
#include "common/lock.h"
#include "common/mem.h"
#include "dpp/master/autocache/autocache.h"
#include "dpp/master/process/master.h"
#include "dpp/master/state/state.h"
#include "rpc/auth.h"
#include "rpc/frame.h"
#include "dpp/master/autocache/holders.h"
#include "store/store.h"

#define MP_ID_MAX 256
/* Jobs a shared pass leases along with the one asked for (Lease.shared). */
#define MP_SHARE_MAX 15
/* At an epoch's start a job waits at most this long for a sharing job that
 * is finishing the previous epoch, so that they read the new one together. */
#define MP_SHARE_SYNC_MS 1000
#define MP_ADDR_MAX 256

/* A worker's autocache measurements (CacheFigures, proto/control.proto), cumulative. */
typedef struct mp_cache_figures {
    uint64_t compute_ns, computed_samples, computed_bytes, source_ns, source_bytes;
    uint64_t read_ns, samples, fallbacks;
    uint64_t files_written, bytes_written, write_ns;
} mp_cache_figures;

/* Per job: what the state machine does not keep (autoscaler, stats). */
typedef struct mp_job {
    char id[MP_ID_MAX];
    bool used;
    sl_master_autoscaler_t as;
    uint64_t wait_ns, elapsed_ns; /* client reports since the last observation */
    double last_wait, last_busy;  /* of the last observation */
    uint32_t granted;             /* fair share of the fleet (mp_share_locked) */
    /* what the log has told (log_progress, tick.c): the job's epoch, end, and
     * the autoscaler's count */
    uint32_t logged_epoch, logged_desired;
    bool logged_end;
    /* A worker detached it from a shared pass (it fell behind): leased on
     * its own from then on (docs/DESIGN.md, "Shared passes"). */
    bool solo;
    uint32_t sync_epoch; /* the epoch whose start sync_since_ms is (wait_for_peers) */
    uint64_t sync_since_ms;
    /* The autocache (control_cache.c): its decision for the job's prefix
     * fingerprint (state OFF until the job is known cacheable), and when a
     * stored decision was last looked for. */
    sl_master_autocache_decision_t ac;
    uint64_t ac_looked_ms;
    /* figures of the job's worker processes that ended (a worker id taken
     * over by a new process starts its counters again) */
    mp_cache_figures ac_gone;
    /* The autocache on workers' disks (control_cache_local.c): whether the
     * source is in an object store (0: not known yet, 1: no, 2: yes), and
     * the epoch whose start acl_since_ms is (--cache-wait-ms). */
    uint8_t ac_where;
    uint32_t acl_epoch;
    uint64_t acl_since_ms;
    /* the last hour's figures and decisions (history.h; fixed size) */
    sl_master_history_t hist;
} mp_job;

/* A lease as a worker named it, or as it was granted (named.c). */
typedef struct mp_named {
    char job[MP_ID_MAX];
    uint32_t epoch, split;
    uint64_t generation;
} mp_named;

typedef struct mp_worker {
    char id[MP_ID_MAX];
    char job[MP_ID_MAX]; /* "" until its first lease when it registered for any job */
    char serve[MP_ADDR_MAX], admin[MP_ADDR_MAX];
    int conn;              /* index in m->conns, -1 when disconnected */
    uint64_t last_seen_ms; /* last frame from its connection */
    uint64_t incarnation;  /* of the process on conn (REGISTER; 0: not told) */
    double busy;
    uint32_t queued, leases;
    uint64_t memory, batches, samples;
    uint64_t bytes_encoded, bytes_expanded; /* its batches so far; and had dedup been off */
    bool shares;                            /* REGISTER shares: it serves shared passes */
    uint64_t shared_batches, shared_bytes, shared_cpu_ns; /* what its shared passes saved */
    mp_cache_figures cache;                               /* the autocache's (heartbeats) */
    bool cache_local; /* REGISTER cache_local: it keeps cache files on its own disk */
    /* the live leases of its last HEARTBEAT or REGISTER and those granted
     * on its connection since (named.c); owned, at most as many as it
     * holds; emptied when its connection closes */
    mp_named *named;
    uint32_t nnamed, cap_named;
} mp_worker;

typedef enum { MP_NEW = 0, MP_WORKER = 1, MP_CLIENT = 2 } mp_kind;

typedef struct mp_conn {
    int fd; /* -1: free slot */
    mp_kind kind;
    uint64_t serial; /* distinguishes a reused slot from the connection a deferred answer was for */
    uint32_t worker; /* MP_WORKER: index in m->workers */
    char client[MP_ID_MAX], job[MP_ID_MAX]; /* MP_CLIENT */
    uint32_t rank;  /* MP_CLIENT: its ATTACH rank (static sharding checks commits against it) */
    uint32_t world; /* MP_CLIENT: its ATTACH world size (resume tokens carry it) */
    uint64_t attached_sig; /* MP_CLIENT: the last ATTACHED sent (mp_push_attached) */
    uint8_t *buf;          /* bytes received, not yet a whole frame */
    size_t len, cap;
    /* admission (guard.c) */
    uint64_t opened_ms;  /* accepted at */
    uint64_t last_rx_ms; /* last whole frame received */
    bool auth_pending;   /* challenged: only AUTH_RESPONSE is read */
    uint8_t auth_reason; /* mp_auth_reason counted if it closes while auth_pending */
    uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES];
} mp_conn;

/* Why a challenged connection never proved it holds the cluster secret:
 * the reason label of sluice_master_auth_failures_total (guard.c). Every
 * challenged connection that closes before its proof is accepted counts
 * once, under the reason set last. */
typedef enum mp_auth_reason {
    MP_AUTH_CLOSED,  /* the peer closed, or a send to it failed, before it answered */
    MP_AUTH_REFUSED, /* it answered with a wrong proof, another frame, or bytes not a frame */
    MP_AUTH_TIMEOUT, /* no answer within handshake_timeout_ms */
    MP_AUTH_EVICTED, /* closed to make room for a new connection while waiting */
    MP_AUTH_NREASONS
} mp_auth_reason;

/* A partition's high watermark as the Kafka watcher last saw it. */
typedef struct mp_khigh {
    char job[MP_ID_MAX];
    char topic[256];
    int32_t partition;
    int64_t high; /* -1: not known (the broker did not answer) */
} mp_khigh;

#define MP_KAFKA_WATCH_JOBS 64 /* stream jobs the watcher follows at once */

/* An answer that may only leave after the next sync (group commit). */
typedef struct mp_deferred {
    uint32_t conn;
    uint64_t serial;
    sl_rpc_type_t type;
    uint64_t nonce; /* COMMIT_REPLY */
    int result;     /* COMMIT_REPLY result / SPLIT_READ_REPLY state */
    /* COMMIT_REPLY of a job with equal_batches_per_rank: the quota of the
     * batch's epoch when it was committed (it only grows) */
    bool equal, quota_final;
    uint64_t quota;
    char message[256];
    void *token; /* TOKEN: owned, token_len bytes (state allocator) */
    size_t token_len;
} mp_deferred;

struct sl_master {
    sl_master_opts_t opts;
    sl_master_autoscale_opts_t tuning;
    const sl_allocator_t *a;
    sl_mutex_t mu;
    sl_master_state_t *st;
    sl_master_store_t *state_store; /* st's journal (owns st); NULL: st in memory */
    bool failed; /* a journal write or sync failed: not ready, mutations refused */
    char failure[256];
    /* Recovery in the running process (recover.c): the state directory
     * and options the state was opened with (state_dir owned; NULL: in
     * memory), when to try again and the backoff, begin_locked's not yet
     * waited for (m->st and m->state_store are not replaced while any is), the
     * counts. */
    char *state_dir;
    sl_master_state_opts_t state_opts;
    sl_master_store_opts_t store_opts; /* dir NULL: it is state_dir */
    uint64_t recover_at_ms, recover_delay_ms;
    uint32_t st_pins;
    uint64_t recoveries, recovery_failures;
    uint64_t started_ms;
    /* jobs and workers */
    mp_job *jobs;                       /* [opts.max_jobs] */
    sl_master_autoscale_share_t *share; /* [opts.max_jobs], scratch of mp_share_locked */
    const char **fp_peers;              /* [opts.max_jobs], scratch of mp_fp_peers_locked */
    mp_worker *workers;                 /* [nworkers] of [cap_workers] */
    uint32_t nworkers, cap_workers;
    /* control connections (the control thread only, except counts) */
    int listen_fd, wake[2];
    char address[MP_ADDR_MAX];
    uint16_t port;
    mp_conn *conns; /* [opts.max_connections] */
    /* epoll over the listener, the wake pipe and every connection (a
     * connection is added when accepted and leaves the set when closed):
     * a round costs what is ready, not a pass over every connection (poll
     * over 1,280 sockets was half the master's CPU at 1,000 commits/s,
     * docs/BENCHMARKS.md "Fleet scale"). -1 until started. */
    int epfd;
    struct epoll_event *events; /* [opts.max_connections + 2], the control thread's */
    uint64_t next_serial;
    mp_deferred *deferred;
    uint32_t ndeferred, cap_deferred;
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
    uint64_t last_observe_ms, last_expire_ms, last_evict_ms;
    sl_master_autocache_t *cache; /* --cache-dir; NULL: no autocache */
    mp_holders holders;           /* cache files on workers' disks (control_cache_local.c) */
    /* counters */
    uint64_t frames_in, protocol_errors, connections_total;
    uint64_t rank_refused; /* commits refused: split of another rank (static sharding) */
    uint64_t ids_in_use;   /* registrations refused: the worker id has another live process */
    sl_master_executor_stats_t exec; /* the local executor's last report */
    bool has_exec;
    /* requests to object stores, summed over the stores of the jobs the
     * master planned (a store lives as long as one planning) */
    sl_store_stats_t store;
    bool has_store;
    /* admission (guard.c) */
    char *secret; /* the cluster secret (owned), NULL: no handshake */
    uint64_t auth_failures[MP_AUTH_NREASONS], handshake_timeouts, idle_closed, evicted, refused;
    uint64_t last_sweep_ms;
    uint32_t nclients_connected, nworkers_connected;
    /* Bumped when a worker connects, leaves or takes a job: with the jobs'
     * phases, what mp_push_attached watches (attached_key: its last look). */
    uint64_t workers_version, attached_key;
#define MP_PUSH_PER_ROUND 64 /* ATTACHED pushes a poll round, at most (control_clients.c) */
    bool push_pending;       /* clients still to push to: the next round does not wait */
    /* the Kafka watcher (kafka_watch.c): its thread, the high watermarks
     * it saw (under mu), its counters */
    pthread_t kafka_thread;
    bool kafka_thread_started;
    atomic_bool kafka_stop;
    mp_khigh *khigh;
    uint32_t nkhigh, cap_khigh;
    atomic_uint_least64_t kafka_watch_rounds, kafka_watch_errors, kafka_group_commits;
    sl_master_kafka_position_t *kpos; /* scratch of the metrics (under mu) */
    uint32_t cap_kpos;
    sl_master_kafka_view_t *kview; /* scratch of the job views (under mu) */
    uint32_t cap_kview;
};

/* Every function below but mp_server_start, mp_server_stop and mp_id_ok
 * is called with m->mu held, and says so (SL_REQUIRES, common/lock.h). */
mp_job *mp_job_find(sl_master_t *m, const char *id) SL_REQUIRES(m->mu);

/* Send ATTACHED, unasked, to every client whose job's view (its workers,
 * epoch, end) changed since the last ATTACHED it got: a client learns of a
 * new worker, an epoch or the end at once instead of at its next refresh
 * (refresh_ms). Cheap when nothing changed. Control thread, after the
 * round's sync. */
void mp_push_attached(sl_master_t *m) SL_REQUIRES(m->mu);
mp_job *mp_job_add(sl_master_t *m, const char *id, uint32_t min_w, uint32_t max_w, uint32_t initial)
    SL_REQUIRES(m->mu);
/* The other jobs that share passes with job_id (docs/DESIGN.md, "Shared
 * passes"): both have "share" on and the same non-zero plan fingerprint.
 * Their ids (borrowed until a job is removed) go to m->fp_peers.
 * @return how many. */
uint32_t mp_fp_peers_locked(sl_master_t *m, const char *job_id) SL_REQUIRES(m->mu);

/* Every job's granted count (sl_master_autoscale_fair_share over the used jobs;
 * finished jobs desire none). */
void mp_share_locked(sl_master_t *m) SL_REQUIRES(m->mu);
/* A state call failed with err: a journal failure makes the master refuse
 * further mutations; running out of memory only refuses the request (the
 * state is unchanged) and is logged. */
void mp_fail(sl_master_t *m, const sl_error_t *err) SL_REQUIRES(m->mu);
/* Recovery from a failed journal (recover.c): the first try this long
 * after the failure, then twice as long after each failed one, at most
 * MP_RECOVER_MAX_MS. */
#define MP_RECOVER_FIRST_MS 100
#define MP_RECOVER_MAX_MS 5000
/* When the master has failed and a try is due: open the state directory
 * again (replay what is durable, sync an Opened record) and, if that
 * works, put the new state in place of the old and accept changes again.
 * The control thread, between rounds. */
void mp_recover(sl_master_t *m) SL_EXCLUDES(m->mu);
/* Process-side records of the state's jobs not known yet (at start, and
 * after a recovery). */
sl_err_t mp_adopt_jobs(sl_master_t *m, sl_error_t *err) SL_REQUIRES(m->mu);
/* Autoscaler observations and lease expiry; called by the control loop.
 * Leases expire as of heard_ms, the instant up to which the loop has read
 * what peers sent (a heartbeat that came during a journal sync was sent in
 * time); the rest is as of now_ms. */
void mp_tick(sl_master_t *m, uint64_t now_ms, uint64_t heard_ms) SL_REQUIRES(m->mu);
/* tick.c: an autoscaler decision that changed j's desired count, logged
 * and put in its history; by names who decided ("autoscaler", "submit",
 * "operator"). Under m->mu. */
void mp_log_decision(mp_job *j, const char *by);
/* Rows done so far over every epoch, and in all (0: no end, a stream). */
void mp_rows_progress(const sl_master_state_job_status_t *st, uint64_t *done, uint64_t *total);

/* control.c: the control thread and its connections (under m->mu) */
sl_err_t mp_server_start(sl_master_t *m, sl_error_t *err) SL_EXCLUDES(m->mu);
void mp_server_stop(sl_master_t *m) SL_EXCLUDES(m->mu);
/* Answer ERROR(code, msg) on connection i and close it (under m->mu). */
void mp_conn_drop(sl_master_t *m, uint32_t i, sl_err_t code, const char *msg) SL_REQUIRES(m->mu);
/* Close connection i (a worker's record stays, disconnected). */
void mp_conn_close(sl_master_t *m, uint32_t i) SL_REQUIRES(m->mu);
/* Send msg now; a connection that cannot take it is closed. @return false
 * then. */
bool mp_send(sl_master_t *m, uint32_t i, sl_rpc_type_t type, const ProtobufCMessage *msg)
    SL_REQUIRES(m->mu);
/* A refused request: counted, answered with ERROR(code, msg), closed. */
void mp_send_error(sl_master_t *m, uint32_t i, sl_err_t code, const char *msg) SL_REQUIRES(m->mu);
/* Hold the answer d to connection i until the round's sync. @return false
 * when out of memory. */
bool mp_defer(sl_master_t *m, uint32_t i, mp_deferred d) SL_REQUIRES(m->mu);

/* control_workers.c and control_clients.c: one frame of connection i each
 * (control thread, under m->mu) */
bool mp_id_ok(const char *s); /* 1..MP_ID_MAX-1 printable ASCII bytes, no spaces */
void mp_on_register(sl_master_t *m, uint32_t i, const Sluice__Control__Register *r)
    SL_REQUIRES(m->mu);
void mp_on_lease_request(sl_master_t *m, uint32_t i, const Sluice__Control__LeaseRequest *r)
    SL_REQUIRES(m->mu);
/* control_cache.c: the autocache (docs/DESIGN.md "Autocache"). The cache
 * file and mode of lease l of job (st its status) to worker slot wi into
 * path (cap bytes); mode CACHE_NONE when it is not read or written through
 * the cache. *local: path is a name under the worker's own --cache-dir
 * (control_cache_local.c). */
int mp_cache_lease(sl_master_t *m, const char *job, const sl_master_state_job_status_t *st,
                   const sl_master_lease_t *l, uint32_t wi, char *path, size_t cap, bool *local)
    SL_REQUIRES(m->mu);
/* Worker w's figures c (of a HEARTBEAT or SPLIT_READ; NULL: none): kept,
 * a decision for its job once enough is measured, eviction (at most every
 * 2 s). */
void mp_cache_figures_in(sl_master_t *m, mp_worker *w, const Sluice__Control__CacheFigures *c)
    SL_REQUIRES(m->mu);
/* control_cache_local.c: the autocache on workers' disks for a job whose
 * source is in an object store (docs/STORAGE.md). Is job j (st its status)
 * such a job, with its cache measuring or chosen? */
bool mp_cache_local_job(sl_master_t *m, mp_job *j, const sl_master_state_job_status_t *st)
    SL_REQUIRES(m->mu);
/* Is job j's source (in its spec) in an object store? */
bool mp_cache_remote_source(mp_job *j, const char *spec_json);
/* The cache mode of lease l of such a job to worker slot wi, the file's
 * name under the worker's --cache-dir into name (cap bytes). */
int mp_cache_local_mode(sl_master_t *m, mp_job *j, uint64_t fp, uint32_t wi,
                        const sl_master_lease_t *l, char *name, size_t cap) SL_REQUIRES(m->mu);
/* Lease the next split of job to worker slot wi: for such a job, one it
 * holds among the next the epoch order has, else one nobody holds, else
 * (after --cache-wait-ms of the epoch) the next; any other job as
 * sl_master_state_lease_next. */
sl_err_t mp_cache_local_lease_next(sl_master_t *m, const char *job, uint32_t wi, uint64_t now,
                                   sl_master_lease_t *l, sl_error_t *err) SL_REQUIRES(m->mu);
/* What worker slot wi's SPLIT_READ r, or its heartbeat h, says it holds. */
void mp_cache_local_read(sl_master_t *m, uint32_t wi, const Sluice__Control__SplitRead *r)
    SL_REQUIRES(m->mu);
void mp_cache_local_evicted(sl_master_t *m, uint32_t wi, const Sluice__Control__Heartbeat *h)
    SL_REQUIRES(m->mu);
/* The split files of prefix fp that live workers hold. */
uint64_t mp_cache_local_files(const sl_master_t *m, uint64_t fp) SL_REQUIRES(m->mu);
/* The autocache part of job j's view. */
void mp_cache_view(sl_master_t *m, mp_job *j, sl_master_job_view_t *v) SL_REQUIRES(m->mu);
void mp_on_heartbeat(sl_master_t *m, uint32_t i, const Sluice__Control__Heartbeat *h)
    SL_REQUIRES(m->mu);
/* named.c: worker w named the leases refs[0..n) (HEARTBEAT, REGISTER):
 * those that are its live leases are kept, in place of the last list. */
void mp_named_set(sl_master_t *m, mp_worker *w, Sluice__Control__SplitRef *const *refs, size_t n)
    SL_REQUIRES(m->mu);
/* The leases refs[0..n) were just granted to w on its connection (LEASE
 * sent): kept too, those that are its live leases, until its next
 * heartbeat's list takes the place of the list. */
void mp_named_add(sl_master_t *m, mp_worker *w, Sluice__Control__SplitRef *const *refs, size_t n)
    SL_REQUIRES(m->mu);
/* An answer to a worker's call (LEASE_REQUEST, or one held for a sync)
 * was just sent on connection i: when it is still a worker's, its kept
 * leases that are still live expire a lease timeout from now. */
void mp_named_answered(sl_master_t *m, uint32_t i) SL_REQUIRES(m->mu);
void mp_named_free(const sl_allocator_t *a, mp_worker *w);
void mp_on_split_read(sl_master_t *m, uint32_t i, const Sluice__Control__SplitRead *r)
    SL_REQUIRES(m->mu);
void mp_on_split_failed(sl_master_t *m, uint32_t i, const Sluice__Control__SplitFailed *r)
    SL_REQUIRES(m->mu);
void mp_on_attach(sl_master_t *m, uint32_t i, const Sluice__Control__Attach *a) SL_REQUIRES(m->mu);
void mp_on_commit(sl_master_t *m, uint32_t i, const Sluice__Control__Commit *cm) SL_REQUIRES(m->mu);
void mp_on_client_stats(sl_master_t *m, const Sluice__Control__ClientStats *s) SL_REQUIRES(m->mu);
void mp_on_token_request(sl_master_t *m, uint32_t i, const Sluice__Control__TokenRequest *t)
    SL_REQUIRES(m->mu);

/* guard.c: who may use the control port (under m->mu, control thread) */
/* A connection was just accepted into slot i: stamp it and, with a cluster
 * secret, send the challenge. */
void mp_guard_accepted(sl_master_t *m, uint32_t i, uint64_t now_ms) SL_REQUIRES(m->mu);
/* Frame f arrived on connection i: @return true when the guard took it
 * (the handshake step; the connection may be closed), false to dispatch it. */
bool mp_guard_frame(sl_master_t *m, uint32_t i, const sl_rpc_frame_t *f, uint64_t now_ms)
    SL_REQUIRES(m->mu);
/* Close connections past their handshake deadline or idle too long. */
void mp_guard_sweep(sl_master_t *m, uint64_t now_ms) SL_REQUIRES(m->mu);
/* Every slot is taken: close the oldest connection still in its handshake
 * to make room. @return its slot, or -1 when every connection is a
 * registered worker or an attached client. */
int mp_guard_evict(sl_master_t *m) SL_REQUIRES(m->mu);
/* Connection i is closing: a challenge it never answered counts as an
 * authentication failure, by its reason (called by mp_conn_close). */
void mp_guard_closing(sl_master_t *m, uint32_t i) SL_REQUIRES(m->mu);
/* The reason labels of mp_auth_reason, in its order. */
extern const char *const mp_auth_reason_names[MP_AUTH_NREASONS];

/* Make the state's changes durable in two halves, the disk's wait outside
 * mu: mp_sync_begin seals what was appended (*ticket names it), and after
 * it returned SL_OK the caller calls mp_sync_wait once, without mu. A
 * failure of either fails the master. */
sl_err_t mp_sync_begin(sl_master_t *m, uint64_t *ticket, sl_error_t *err) SL_REQUIRES(m->mu);
sl_err_t mp_sync_wait(sl_master_t *m, uint64_t ticket, sl_error_t *err) SL_EXCLUDES(m->mu);

/* kafka_watch.c: the Kafka watcher thread (partitions added to stream
 * jobs, high watermarks, the consumer-group mirror) */
sl_err_t mp_kafka_watch_start(sl_master_t *m, sl_error_t *err) SL_EXCLUDES(m->mu);
void mp_kafka_watch_stop(sl_master_t *m) SL_EXCLUDES(m->mu);
/* The high watermark last seen of a stream job's partition, -1 unknown. */
int64_t mp_kafka_high(const sl_master_t *m, const char *job, const char *topic, int32_t partition)
    SL_REQUIRES(m->mu);
/* A resumed stream's tokens need no offset below its partitions' low
 * watermarks (low[i] for spec's partition i): else SL_ERR_INVALID naming
 * the topic, partition and offsets. */
sl_err_t mp_kafka_tokens_retained(sl_master_t *m, const sl_master_state_job_spec_t *spec,
                                  const sl_master_submit_t *req, const int64_t *low,
                                  sl_error_t *err) SL_REQUIRES(m->mu);

/* The job's Kafka positions into m->kpos (0: a table job, or no memory). */
uint32_t mp_kafka_positions(sl_master_t *m, const char *job, const sl_master_kafka_position_t **out)
    SL_REQUIRES(m->mu);
/* The job's partitions with their high watermarks into m->kview. */
uint32_t mp_kafka_view(sl_master_t *m, const char *job, const sl_master_kafka_view_t **out)
    SL_REQUIRES(m->mu);
/* sluice_master_kafka_lag_records{job,topic,partition} and the watcher's
 * counters. */
struct sl_prom;
void mp_kafka_metrics(sl_master_t *m, struct sl_prom *p) SL_REQUIRES(m->mu);

/* kafka_splits.c: a Kafka job's splits, one per chunk of each partition
 * between the spec's start and stop, resolved with the brokers (each
 * request bounded: a few seconds). Path "topic/partition", stripes 0..0
 * (a Kafka chunk has none), first_row the chunk's first offset, num_rows
 * its offset count: row r is offset first_row + r. A stream (no stop),
 * unreachable brokers, an unknown topic are problems by JSON path in *pr
 * (SL_ERR_INVALID, SL_ERR_NOT_FOUND, SL_ERR_TIMEOUT, SL_ERR_IO). Caller
 * owns *out (sl_wh_splits_destroy). */
struct sl_pipeline_job;
sl_err_t mp_kafka_splits(const struct sl_pipeline_job *job, sl_wh_splits_t **out,
                         sl_pipeline_problems_t *pr, sl_error_t *err);
/* A stream's partitions (source.kafka without stop), each from its start
 * offset (the spec's start) to -1, and with want_low their low watermarks
 * (a resumed job's tokens are checked against them). Topics borrowed from
 * job. Problems as mp_kafka_splits. Free with mp_kafka_stream_free. */
typedef struct mp_kafka_stream {
    sl_master_kafka_partition_t *parts; /* [n] */
    int64_t *low;                       /* [n] with want_low, else NULL */
    uint32_t n;
} mp_kafka_stream_t;
sl_err_t mp_kafka_stream(const struct sl_pipeline_job *job, bool want_low, mp_kafka_stream_t *out,
                         sl_pipeline_problems_t *pr, sl_error_t *err);
void mp_kafka_stream_free(mp_kafka_stream_t *s);
/* Is the split (path, stripes) a Kafka chunk (stripes 0..0, path
 * "topic/partition")? Then topic (cap bytes) and *partition get its
 * partition, for the LEASE frame's kafka_topic / kafka_partition. */
bool mp_kafka_split_ref(const char *path, uint32_t stripe_begin, uint32_t stripe_end, char *topic,
                        size_t cap, int32_t *partition);

#endif

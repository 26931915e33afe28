/* Private to the lease client (lease_client.h), which is three files by
 * role: lease_client.c (the leases a worker holds, the split source's
 * callbacks, start and destroy), lease_conn.c (the control connection:
 * REGISTER, one request and its reply, asking for leases) and
 * lease_control.c (the control thread: HEARTBEAT, SPLIT_READ,
 * SPLIT_FAILED).
 *
 * A lease lives from LEASE until both the reader is done with it and every
 * batch made from it is retired (acknowledged or dropped); then, unless it
 * was revoked, the control thread reports it with SPLIT_READ and frees it
 * when the master answers. Everything about leases is under ms->mu; the
 * connection is under ms->conn_mu, which is never taken while holding
 * ms->mu (the lease hooks run under the server's lock and take only ms->mu). */
#ifndef SLUICE_DPP_WORKER_LEASE_CLIENT_INTERNAL_H
#define SLUICE_DPP_WORKER_LEASE_CLIENT_INTERNAL_H

#include <pthread.h>
#include <time.h>

#include "common/clock.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/mem.h"
#include "dpp/worker/runtime/cache_dir.h"
#include "dpp/worker/lease/lease_client.h"
#include "rpc/frame.h"

typedef struct lease {
    struct lease *next;
    uint32_t epoch, split;
    uint64_t generation;
    uint32_t rank_plus_one;
    char *path;
    char *kafka_topic; /* a Kafka chunk's (NULL: a table split) */
    char *cache_file;  /* the autocache's (Lease.cache_file; NULL: none) */
    uint32_t cache_mode;
    /* Lease.cache_local: cache_file is under ms->cache, the master's name
     * for it cache_name (SPLIT_READ says whether the file is held) */
    bool cache_local;
    char *cache_name;
    bool cache_told; /* a SPLIT_READ told the master what cache_name holds */
    int32_t kafka_partition;
    sl_wh_split_t sp;
    sl_dpp_row_range_t *todo;
    uint32_t num_todo;
    sl_dpp_row_range_t *empty; /* from done */
    uint32_t num_empty;
    uint32_t outstanding; /* batches made, not retired */
    bool handed;          /* returned by next */
    bool read_done;       /* the reader called done */
    bool revoked;
    bool reporting; /* a SPLIT_READ (or SPLIT_FAILED) is on its way */
    /* The split could not be read (src_failed): revoked too, and reported
     * with SPLIT_FAILED before the lease may be forgotten. */
    bool failed, fail_reported;
    sl_err_t fail_code;
    int32_t fail_stripe;
    char *fail_msg;
    /* Shared passes (docs/DESIGN.md): a lease of Lease.shared is a member
     * of the lease it came with (its primary, which the reader reads): job
     * is its job (NULL: the worker's own), it is never handed to the reader,
     * gets a copy of every batch of the primary while it keeps up (at most
     * share_window of its batches not yet retired, else it is detached: no
     * more copies, reported with detached), and is read when the primary is,
     * with the same empty ranges. */
    char *job;
    struct lease *primary; /* of a member; NULL once the primary is gone */
    struct lease *members; /* of a primary: its members, through member_next */
    struct lease *member_next;
    bool detached;
    /* of a member: its pass ended early through no fault of its job's (the
     * primary stalled, or went before it was read): no more copies, and
     * reported read with no empty ranges and not detached, so the rows it
     * did not get stay to do and its job keeps sharing */
    bool released;
    /* of a primary: when its pass last moved (granted, handed to the
     * reader, a batch queued, read whole); its members are released when
     * it does not move for share_stall_ms */
    uint64_t progress_ns;
    /* of a primary: batches made and not yet queued by the server (nor
     * dropped before): its members get their copies only then, so they are
     * not read before */
    uint32_t unpushed;
    uint64_t copy_bytes; /* of a member: frame bytes of its copies not retired yet */
    /* The deterministic order (docs/DESIGN.md "A deterministic order"):
     * LEASE order_ranks (0: the dynamic order) and 1 + the split's base
     * once known (LEASE order_base_plus_one, then HEARTBEAT_REPLY bases; 0:
     * not yet); counted/order_batches: the reader's count for SPLIT_READ.
     * pins: the control thread is telling the worker's server about it
     * outside ms->mu (a base, a drop): not freed until it is done. */
    uint32_t order_ranks;
    uint64_t base_plus_one;
    bool counted;
    uint64_t order_batches;
    uint32_t pins;
    /* the count went in a heartbeat (Heartbeat.counts, det28h): sent once
     * the split is cut whole, before its batches are acknowledged, so the
     * next split's base is known a round trip later; SPLIT_READ repeats it */
    bool count_sent;
    /* A resumed job's skip rows of the split (LEASE order_skip: the rows
     * handed out before the resume, whose batches are neither numbered nor
     * counted); NULL, 0: none. */
    sl_dpp_row_range_t *skip;
    uint32_t num_skip;
} lease_t;

struct sl_worker_lease_client {
    sl_worker_lease_client_opts_t o;
    const sl_allocator_t *a;
    char *master, *worker_id, *serve_address, *admin_address;
    uint64_t incarnation; /* random, this source's (process's) identity in REGISTER */
    char *secret;         /* the cluster secret, NULL: none */
    sl_mutex_t conn_mu;   /* the connection: one call at a time */
    int fd;               /* -1: not connected */
    bool ever_connected;
    sl_mutex_t mu; /* everything below */
    pthread_cond_t cv;
    lease_t *leases;
    char job_id[256];
    char *spec_json; /* of the job served, from its first lease */
    bool cancel, stop, finished;
    /* The master refused this worker's registration for good (its id is
     * another live process's): every call fails with this from now on. */
    sl_err_t fatal;
    char fatal_msg[SL_ERROR_MSG_MAX];
    sl_worker_t *worker;
    /* The worker's figures when it was stopped (src_cancel): the control
     * thread's last heartbeat sends them after worker went NULL. */
    sl_worker_stats_t final_st;
    bool have_final;
    uint64_t lease_timeout_ms, heartbeat_ms;
    /* shared passes: a job whose copies here hold this many bytes (a
     * quarter of the worker's memory limit; 0: no limit) is detached too */
    uint64_t share_bytes_max;
    uint64_t share_stall_ns; /* opts.share_stall_ms */
    sl_worker_lease_client_stats_t st;
    dpp_cache_dir_t *cache; /* opts.cache_dir's (NULL: none) */
    /* cache_name of leases forgotten without a SPLIT_READ (revoked,
     * failed): settled by the control thread outside mu, before its next
     * heartbeat (dpp_cache_dir_settle_untold) */
    char **untold;
    uint32_t nuntold, untold_cap;
    /* load at the last measured heartbeat and the busy fraction it gave
     * (control thread only): measured over half a period at least, since
     * the deterministic order's early heartbeats come a few ms apart */
    uint64_t hb_at_ns, hb_reader_ns, hb_xform_ns;
    double hb_busy;
    pthread_t thread;
    bool thread_started;
    /* reader thread only: when other_work may ask the master again */
    uint64_t other_ask_ns;
};

/* The leases this worker holds (not revoked), for REGISTER and HEARTBEAT:
 * the master keeps alive exactly those. */
typedef struct held {
    char job[256];
    Sluice__Control__SplitRef *refs, **ptrs;
    uint32_t n, cap;
} held_t;

/* lease_client.c */
void dpp_lease_free(sl_worker_lease_client_t *ms, lease_t *l);
/* Under ms->mu: is l ready for its SPLIT_READ? Every batch retired, not
 * revoked, no report on its way, and read whole -- for a member of a
 * shared pass, every batch of its primary queued too (so every copy it
 * gets exists) -- unless it is a member detached or released: no copy can
 * come to it any more, and it reports no empty ranges. */
bool dpp_lease_ready(const lease_t *l);
/* Under ms->mu: may a revoked lease be forgotten? Nobody holds it (not
 * handed, or read and every batch retired), no report is on its way, and a
 * failure was reported. */
bool dpp_lease_gone(const lease_t *l);
/* Under ms->mu: release the members of every primary whose pass has not
 * moved for share_stall_ns (docs/DESIGN.md, "Shared passes"). @return
 * whether some primary still has members to watch. */
bool dpp_lease_release_stalled(sl_worker_lease_client_t *ms, uint64_t now_ns) SL_REQUIRES(ms->mu);
/* Under ms->mu: unlink and free l. */
void dpp_lease_remove(sl_worker_lease_client_t *ms, lease_t *l) SL_REQUIRES(ms->mu);

/* lease_conn.c */
/* job: the worker's own job, used unless l is a member of another job's. */
void dpp_lease_fill_ref(Sluice__Control__SplitRef *r, char *job, const lease_t *l);
/* Under ms->mu. @return false when out of memory (send nothing then: an
 * empty list would give the leases up). */
bool dpp_lease_held_collect(sl_worker_lease_client_t *ms, held_t *h) SL_REQUIRES(ms->mu);
void dpp_lease_held_free(sl_worker_lease_client_t *ms, held_t *h);
/* Under ms->conn_mu: close the connection (the next call reconnects). */
void dpp_lease_disconnect(sl_worker_lease_client_t *ms) SL_REQUIRES(ms->conn_mu);
/* Under ms->conn_mu: connect and REGISTER, naming every lease held (the
 * master revokes the others of this worker id). A refusal that will not
 * change (the id is another live process's, another protocol version) is
 * fatal: recorded, and every later call fails with it. */
sl_err_t dpp_lease_connect(sl_worker_lease_client_t *ms, sl_error_t *err) SL_REQUIRES(ms->conn_mu)
    SL_EXCLUDES(ms->mu);
/* One request and its reply (connecting first when needed; takes
 * ms->conn_mu, so never under ms->mu). A failure closes the connection:
 * the next call reconnects. */
sl_err_t dpp_lease_call(sl_worker_lease_client_t *ms, sl_rpc_type_t type,
                        const ProtobufCMessage *msg, const char *what, sl_rpc_type_t want,
                        sl_rpc_frame_t *f, sl_error_t *err) SL_EXCLUDES(ms->mu, ms->conn_mu);
/* dpp_lease_call with ms->conn_mu already held: for a call whose message
 * must be made after the connection is ours (a heartbeat's list of leases:
 * one granted to a LEASE_REQUEST that held the connection meanwhile is in
 * it). */
sl_err_t dpp_lease_call_locked(sl_worker_lease_client_t *ms, sl_rpc_type_t type,
                               const ProtobufCMessage *msg, const char *what, sl_rpc_type_t want,
                               sl_rpc_frame_t *f, sl_error_t *err) SL_REQUIRES(ms->conn_mu)
    SL_EXCLUDES(ms->mu);
/* Get a lease, waiting (NO_WORK, connection trouble) until deadline_ns (0:
 * forever; takes both locks). With hand, it is marked as handed to the
 * reader. */
sl_err_t dpp_lease_get(sl_worker_lease_client_t *ms, uint64_t deadline_ns, bool hand, lease_t **out,
                       sl_error_t *err) SL_EXCLUDES(ms->mu, ms->conn_mu);
/* A lease not handed to the reader yet, or one the master grants when
 * asked once now (no waiting, no retry): is there one? (takes both locks)
 * An answer get would fail with (a lease that breaks the rules) becomes
 * the client's fatal error: the worker fails with it. */
bool dpp_lease_more(sl_worker_lease_client_t *ms) SL_EXCLUDES(ms->mu, ms->conn_mu);

/* lease_control.c: the control thread (arg: the lease client). */
void *dpp_lease_control_main(void *arg);

#endif

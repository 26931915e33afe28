/* Private state of the trainer client (include/sluice/trainer.h), shared by
 * its files:
 *   client.c        the application-facing calls: connect, next, stats, close
 *   client_state.c  the ready queue and the items' lifecycle, failing, and
 *                   the reconnect policy every connection follows
 *   worker_conn.c   the one worker connection, the same in both modes
 *   fleet*.c        master mode: the master connection, commits, tokens
 *                   (fleet_internal.h)
 *
 * Direct mode is master mode with one fixed worker and no committer. Both
 * modes keep a list of worker connections (tr_conn_t, one thread each) and
 * one ready queue that sl_trainer_next hands out. A received batch becomes
 * an item; in master mode the committer (fleet.c) COMMITs its rows at the
 * master and only a COMMITTED item joins the ready queue, acknowledged to
 * its worker once answered; in direct mode an item is ready on receipt and
 * acknowledged when it is handed out. When a connection breaks, the items
 * it delivered that are neither acknowledged nor waiting for a commit (in
 * practice: direct mode's queue) are dropped: the worker sends them again.
 * When a connection ends for good (END, the worker's ERROR or GOODBYE, a
 * protocol violation, reconnecting given up), direct mode's client ends with
 * it; master mode's goes on with the workers the master names.
 *
 * Threads: the application thread (next, release, resume_token, close), one
 * thread per worker connection, and in master mode the master thread.
 * Locks, always taken in this order, never the other way:
 *   fleet msend_mu  the master socket (fleet_internal.h)
 *   t->mu           the ready queue, the connection list, every connection's
 *                   held / stop / connected flags, the client's state;
 *                   t->cv signals all changes
 *   conn.send_mu    one worker socket slot (fd, send_ready, window, pending
 *                   acks); also makes a whole frame one write
 * They are sl_mutex_t (common/lock.h), and the functions that need one
 * say so in their declarations (SL_REQUIRES / SL_EXCLUDES), which clang's
 * -Wthread-safety checks in every clang build.
 * A socket is closed only by its connection's thread (or by close after
 * that thread ended), after clearing the slot under send_mu, so a
 * shutdown() from another thread never hits a reused descriptor.
 *
 * Memory: a connection keeps held + in flight <= window batches (a credit
 * comes back only when an item leaves the client), so the client holds at
 * most window batches per worker connection. */
#ifndef SLUICE_TRAINER_INTERNAL_H
#define SLUICE_TRAINER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/age.h"
#include "common/clock.h"
#include "common/lock.h"
#include "rpc/auth.h"
#include "rpc/frame.h"
#include "rpc/shm.h"
#include "sluice/trainer.h"

#define TR_ID_MAX 128
/* What sl_rpc_connect accepts: a 255-byte host, brackets, ':', a port. */
#define TR_ADDR_MAX 320
#define TR_LABEL_MAX (TR_ID_MAX + TR_ADDR_MAX + 16)

typedef struct tr_conn tr_conn_t;

/* A worker's heap mapped through one connection (shm_hold.c): the
 * connection holds a reference while it is up, every batch read in place
 * one more; the last unmaps it and closes its hold socket. */
typedef struct tr_shm {
    const sl_allocator_t *a;
    _Atomic uint32_t refs;
    sl_rpc_shm_map_t map; /* map.hold: the worker keeps blocks until released */
    sl_mutex_t mu;
    bool live;     /* its connection is up: releases are collected (under mu) */
    uint64_t *rel; /* delivery ids released by their batches, not sent yet (under mu) */
    uint32_t nrel, cap;
} tr_shm_t;

/* A received batch, from arrival until it leaves the client (handed out, or
 * dropped). */
typedef struct tr_item {
    sl_batch_t *batch;
    tr_conn_t *conn; /* where it came from; lives while conn->held counts it */
    uint64_t delivery_id;
    bool acked; /* its ACK was sent (or waits in conn's pending acks) */
    /* what its COMMIT names (master mode) */
    uint64_t nonce;
    uint32_t epoch, split;
    uint64_t generation, from_row, to_row;
    uint32_t num_samples;
    uint64_t order_g_plus_one; /* BatchInfo's: 1 + its g in the deterministic order; 0: none */
    /* committed, held in pending beyond the equal-batches quota (fleet_equal.c) */
    bool eq_held;
    struct tr_item *prev, *next;
} tr_item_t;

typedef struct tr_list {
    tr_item_t *head, *tail;
    uint32_t count;
} tr_list_t;

typedef enum tr_state {
    TR_RUNNING, /* batches may still arrive */
    TR_ENDED,   /* direct mode's worker said END: hand out the queue, then SL_ERR_CLOSED */
    TR_FAILED   /* failure holds the error; the queue was discarded */
} tr_state_t;

/* One worker and its connection (worker_conn.c). */
struct tr_conn {
    sl_trainer_t *t;
    char address[TR_ADDR_MAX];
    char worker_id[TR_ID_MAX]; /* as the master names it; "" in direct mode */
    char label[TR_LABEL_MAX];  /* "worker ADDR" or "worker ID (ADDR)": starts its messages */
    pthread_t thread;
    bool thread_started;
    /* under t->mu */
    uint32_t held;  /* items from this worker still in the client */
    bool listed;    /* master mode: named in the master's latest ATTACHED */
    bool stop;      /* the master no longer names it, or the client fails or closes */
    bool finished;  /* the thread has ended */
    bool got_end;   /* the worker said END: not read again while it is named */
    bool connected; /* a connection is up (handshake done) */
    /* under send_mu */
    sl_mutex_t send_mu;
    int fd;                   /* -1 while disconnected; installed before the handshake */
    bool send_ready;          /* handshake done: acks and credits may go out */
    uint32_t window;          /* min(prefetch, WELCOME max_credits) */
    _Atomic uint64_t granted; /* credits granted on the current connection */
    /* acks not sent yet: withheld (master mode: tr_conn_ack_later_locked),
     * or that could not be sent; the next connection sends them first */
    uint64_t *pending;
    uint32_t npending, pending_cap;
    uint32_t credits_later;  /* credits withheld on the current connection (master mode) */
    uint64_t later_since_ns; /* when the oldest withheld ack or credit was; 0: none */
    /* Shared-memory hand-over (the connection's thread's, or connect's
     * before it starts): what WELCOME offered, and the worker's heap mapped
     * for the current connection (base NULL: not attached) */
    char shm_socket[64];
    uint8_t shm_nonce[32];
    size_t shm_nonce_len;
    tr_shm_t *shm;   /* NULL: not attached */
    bool shm_logged; /* why it did not attach was logged (once) */
    tr_conn_t *next; /* t->conns, under t->mu */
};

struct tr_fleet; /* master mode (fleet_internal.h); NULL in direct mode */
struct sl_httpd; /* the metrics endpoint (httpd/server.h) */

struct sl_trainer {
    struct tr_fleet *fleet;
    sl_age_hist_t freshness; /* of the samples handed out (Kafka batches); atomics */
    /* configuration, fixed after connect */
    const sl_allocator_t *a;
    char *address; /* direct mode: the worker; master mode: the master */
    char *client_name;
    uint32_t prefetch;
    int connect_timeout_ms;
    int reconnect_ms;
    uint32_t rank, world_size;
    sl_wire_limits_t wire_limits;
    sl_rpc_limits_t rpc_limits;
    char *secret;       /* the cluster secret (rpc/auth.h), NULL: none */
    bool shm;           /* offer the shared-memory hand-over (opts.no_shm, $SLUICE_TRAINER_SHM) */
    bool shm_read_only; /* opts.shm_read_only: map the heap read-only */
    bool shm_hold; /* and read its frames in place (opts.shm_copy, $SLUICE_TRAINER_SHM_COPY=1: copy
                      them) */
    /* Master mode: a worker gets acks and credits ack_every at a time (0:
     * half its window; never more), or once the oldest waited ack_ms
     * (docs/PROTOCOL.md "Acknowledgement and redelivery";
     * $SLUICE_TRAINER_ACK_EVERY, $SLUICE_TRAINER_ACK_MS) */
    uint32_t ack_every, ack_ms;
#define TR_ACK_MS_DEFAULT 5 /* a lease's last acks (its SPLIT_READ waits for them) */

    sl_mutex_t mu;
    pthread_cond_t cv; /* queue grew, state changed, a connection stopped, closing */
    tr_list_t ready;   /* what sl_trainer_next hands out, in arrival order */
    tr_conn_t *conns;
    tr_state_t state;
    _Atomic bool closing; /* written under mu, read anywhere */
    sl_error_t failure;
    uint64_t end_batches;   /* direct mode: from END, for the closing message */
    char last_problem[512]; /* master mode: why a worker connection last failed */

    _Atomic uint64_t batches, samples, bytes, wait_ns, reconnects, dropped;
    /* When the sl_trainer_next call in progress began (0: none), so that a
     * wait is reported while it lasts, not only once the call returns
     * (tr_wait_ns). Written by the one thread that calls next. */
    _Atomic uint64_t wait_since;
    /* The most wait sl_trainer_stats reported (ns; GET /metrics reports
     * through it): the figure's floor, as tr_wait_ns may dip for a moment
     * at a call's end. */
    _Atomic uint64_t stats_wait_ns;
    _Atomic uint64_t batches_shm, batches_socket;
    _Atomic uint32_t queued, workers;

    /* The deterministic order (order.c; master mode, a job whose ATTACHED
     * names order_ranks), under mu: the reorder buffer of prefetch batches
     * (NULL: another order), the epoch it hands out, since when it waits
     * for its next batch (0: not waiting) and whether that wait was logged */
    struct tr_reorder *order;
    uint32_t order_epoch;
    uint64_t order_wait_ns;
    bool order_stall_logged;

    /* The metrics endpoint (metrics.c), NULL when off; fixed while it runs. */
    struct sl_httpd *metrics;
    char *metrics_labels; /* job="…",rank="…",client="…" */
    double start_time_s;  /* Unix time of connect */
};

/* ---- client_state.c ---- */

void tr_list_push(tr_list_t *l, tr_item_t *it);
void tr_list_remove(tr_list_t *l, tr_item_t *it);
/* Free every item of l and its batch, nothing else (close). */
void tr_list_free(sl_trainer_t *t, tr_list_t *l);

/* it may be handed out: append it to the ready queue and wake next. Caller
 * holds mu. */
void tr_ready_push_locked(sl_trainer_t *t, tr_item_t *it) SL_REQUIRES(t->mu);

/* An item leaves the client: free it (and its batch unless handed out) and
 * give its connection the credit back. Caller holds mu (takes send_mu). */
void tr_item_leave_locked(sl_trainer_t *t, tr_item_t *it, bool free_batch) SL_REQUIRES(t->mu);

/* sl_trainer_next hands it out: tr_item_leave_locked without freeing the
 * batch, and the ACK of its delivery unless it was acknowledged (master
 * mode, at its commit); in direct mode the ACK and the credit leave in one
 * sendmsg. Caller holds mu. */
void tr_item_hand_out_locked(sl_trainer_t *t, tr_item_t *it) SL_REQUIRES(t->mu);

/* c's connection broke: drop the ready items it delivered that are not
 * acknowledged (they belong to the worker again). Counted in dropped.
 * Caller holds mu. */
void tr_drop_unacked_locked(sl_trainer_t *t, const tr_conn_t *c) SL_REQUIRES(t->mu);

/* Mark the client failed with e (unless it already ended or failed),
 * discard the ready queue and stop every worker connection. Takes mu / the
 * caller holds it. */
void tr_fail(sl_trainer_t *t, const sl_error_t *e) SL_EXCLUDES(t->mu);
void tr_fail_locked(sl_trainer_t *t, const sl_error_t *e) SL_REQUIRES(t->mu);

/* Time sl_trainer_next has waited for data up to now (sl_clock_ns),
 * counting the call in progress: a trainer stalled in one long call is
 * seen waiting while it waits. Not monotonic across calls by a few
 * microseconds at a call's end (the caller keeps its own floor). Any
 * thread. */
uint64_t tr_wait_ns(const sl_trainer_t *t, uint64_t now);

/* Sleep up to ms (< 0: without limit) unless the client closes or *stop
 * (stop may be NULL; read under mu) becomes true. Takes mu. @return true
 * when closing or stopped. */
bool tr_pause(sl_trainer_t *t, const bool *stop, int ms) SL_EXCLUDES(t->mu);

/* One attempt to open a connection within timeout_ms; *refused when the
 * peer answered and will not change its mind (an ERROR that is not "not
 * now": sl_rpc_error_retriable). */
typedef sl_err_t (*tr_attempt_fn)(void *ctx, int timeout_ms, bool *refused, sl_error_t *err);

/* The reconnect policy of every connection of the client (a worker's, the
 * master's): attempt at once, then after 50 ms doubling to 1 s, for up to
 * reconnect_ms, with a last attempt at the deadline. lost: why the previous
 * connection ended, NULL for a first connection (then reconnect_ms < 0
 * still allows one attempt; after a loss it allows none). A refusal
 * (*refused, or SL_ERR_PROTOCOL / VERSION / TOO_LARGE: the peer does not
 * speak our protocol) ends the attempts. label ("worker ADDR") starts the
 * messages. Any thread but the application's; takes mu. @return SL_OK
 * (counted in reconnects after a loss); SL_ERR_CLOSED when the client
 * closes or *stop; otherwise the code of the connection given up, with
 * err saying why. */
sl_err_t tr_reconnect(sl_trainer_t *t, const bool *stop, const char *label, const sl_error_t *lost,
                      tr_attempt_fn attempt, void *ctx, sl_error_t *err) SL_EXCLUDES(t->mu);

/* A receive that failed with rc broke the stream in a way that is the
 * peer's fault or ours to report (a malformed frame, another version, too
 * large, no memory for it): answer ERROR and give the connection up rather
 * than reconnect. */
bool tr_stream_broken(sl_err_t rc);

/* ---- order.c: the deterministic order (docs/PROTOCOL.md, "The
 * deterministic order") ---- */

/* How long a rank waits for its next batch before the wait is logged. */
#define TR_ORDER_STALL_MS 10000

/* The job is in the deterministic order for ranks ranks, its epoch epoch
 * (an ATTACHED): make the reorder buffer the first time (prefetch batches,
 * from epoch), check the ranks against the world size. @return
 * SL_ERR_INVALID (err says why) for a world size or ranks that disagree;
 * SL_ERR_NOMEM. Caller holds mu. */
sl_err_t tr_order_setup_locked(sl_trainer_t *t, uint32_t ranks, uint32_t epoch, sl_error_t *err)
    SL_REQUIRES(t->mu);

/* The g-window the client asks for now: (epoch, limit), limit the g after
 * the prefetch batches of this rank from the oldest one not handed out.
 * Caller holds mu. */
void tr_order_window_locked(const sl_trainer_t *t, uint32_t *epoch, uint64_t *limit)
    SL_REQUIRES(t->mu);

/* Send the window to every live worker connection (REQUEST with no
 * credit). Caller holds mu (takes each send_mu). */
void tr_order_push_window_locked(sl_trainer_t *t) SL_REQUIRES(t->mu);

/* A committed batch: into the reorder buffer under its g, then every
 * batch whose turn came to the ready queue. A batch without g, of another
 * epoch or refused by the buffer fails the client (a worker that broke
 * the window). Caller holds mu. */
void tr_order_put_locked(sl_trainer_t *t, tr_item_t *it) SL_REQUIRES(t->mu);

/* Move to the job's epoch job_epoch once this rank's batches of the
 * current one are all handed over: the job passed it (every batch of it
 * committed), none is held in the buffer and no commit of it is
 * unanswered (pending). Then the window moves too. Caller holds mu. */
void tr_order_advance_locked(sl_trainer_t *t, uint32_t job_epoch, const tr_list_t *pending)
    SL_REQUIRES(t->mu);

/* A wait for the next batch longer than TR_ORDER_STALL_MS is logged
 * (once a wait), naming the rank, epoch and g. Takes mu. */
void tr_order_check_stall(sl_trainer_t *t, uint64_t now_ns) SL_EXCLUDES(t->mu);

/* What sl_trainer_next's timeout adds: "; waiting for batch g G of epoch
 * E (H later ones held)", or "" under another order. Caller holds mu. */
void tr_order_describe_locked(const sl_trainer_t *t, char *out, size_t cap) SL_REQUIRES(t->mu);

/* ---- shm_hold.c: zero copy ---- */

/* A mapping (taken over from map) with one reference, live. @return NULL
 * when out of memory (map is then the caller's). */
tr_shm_t *tr_shm_new(const sl_allocator_t *a, const sl_rpc_shm_map_t *map);
void tr_shm_keep(tr_shm_t *m);
/* Drop a reference; the last unmaps. m may be NULL. Any thread. */
void tr_shm_drop(tr_shm_t *m);
/* Its connection ended: releases from now on (and those not sent) are
 * dropped; the worker frees those blocks when the hold socket closes. */
void tr_shm_end(tr_shm_t *m);
/* Up to cap released delivery ids, taken out to be sent. m may be NULL. */
uint32_t tr_shm_take(tr_shm_t *m, uint64_t *out, uint32_t cap);
/* b points into m's mapping, the block [off, off + len) of delivery
 * delivery_id: b keeps a reference, and its destroy drops the user's
 * private writes to the block and releases it. @return SL_ERR_NOMEM. */
sl_err_t tr_shm_lend(tr_shm_t *m, uint64_t delivery_id, uint64_t off, uint64_t len, sl_batch_t *b,
                     sl_error_t *e);

/* ---- metrics.c ---- */

/* Serve GET /metrics on address ("host:port"); NULL: $SLUICE_TRAINER_METRICS;
 * NULL or "" there: off, SL_OK. Call once the client is connected (the
 * labels name its job and client id). @return sl_httpd_start's errors. */
sl_err_t tr_metrics_start(sl_trainer_t *t, const char *address, sl_error_t *err);

/* Stop the endpoint (no request runs after this) and free its labels;
 * idempotent. */
void tr_metrics_stop(sl_trainer_t *t);

/* ---- worker_conn.c ---- */

/* A connection to the worker at address (worker_id: as the master names
 * it, NULL in direct mode), linked into t->conns, not connected, no
 * thread. Caller holds mu. @return NULL when out of memory. */
tr_conn_t *tr_conn_new(sl_trainer_t *t, const char *worker_id, const char *address)
    SL_REQUIRES(t->mu);

/* Connect within timeout_ms: the cluster-secret handshake when the client
 * has a secret, HELLO / WELCOME, the pending acks, then window - held
 * credits. Runs on the connection's thread, and on the application thread
 * for direct mode's first connection. Takes mu and send_mu. @return as
 * tr_attempt_fn; messages start with the connection's label. */
sl_err_t tr_conn_open(tr_conn_t *c, int timeout_ms, bool *refused, sl_error_t *err)
    SL_EXCLUDES(c->t->mu, c->send_mu);

/* Start c's thread: it receives if c is connected, else connects first.
 * @return SL_ERR_IO when the thread cannot start. */
sl_err_t tr_conn_start(tr_conn_t *c, sl_error_t *err);

/* Ask c's thread to end: GOODBYE(reason) when the connection is up, then a
 * shutdown that unblocks its receive. Idempotent. Caller holds t->mu (t is
 * c->t, passed so that the lock rule can be checked). */
void tr_conn_stop_locked(sl_trainer_t *t, tr_conn_t *c, const char *reason) SL_REQUIRES(t->mu);

/* Join c's thread and free c (already unlinked; its items are gone or will
 * not touch it). Caller holds no lock, unless c's thread never started;
 * c may be NULL. */
void tr_conn_free(tr_conn_t *c);

/* ACK delivery_id on c's current connection, or keep it for the next one
 * (bounded: beyond pending_cap the ack is lost and the worker delivers that
 * batch once more). Caller holds t->mu (t is c->t). */
void tr_conn_ack_locked(sl_trainer_t *t, tr_conn_t *c, uint64_t delivery_id) SL_REQUIRES(t->mu);

/* Direct mode, a batch handed out: ACK delivery_id (0: none) with the
 * releases that wait, and give one credit back, the two frames in one
 * sendmsg (what tr_conn_ack_locked and a REQUEST of 1 credit send apart).
 * The ACK is kept for the next connection as tr_conn_ack_locked keeps it.
 * Caller holds t->mu (t is c->t). */
void tr_conn_ack_credit_locked(sl_trainer_t *t, tr_conn_t *c, uint64_t delivery_id)
    SL_REQUIRES(t->mu);

/* Master mode: the ACK of delivery_id (its commit was answered) and, with
 * credit, one credit back, withheld until c has k of either (k =
 * t->ack_every, at most half its window, at least 1) or the oldest waited
 * t->ack_ms; then all go out at once, an ACK and a REQUEST back to back
 * (one wake-up of the worker's connection instead of two per batch). An
 * ACK's meaning is unchanged: only when it is sent moves. delivery_id 0: a
 * credit only. Caller holds t->mu. */
void tr_conn_later_locked(sl_trainer_t *t, tr_conn_t *c, uint64_t delivery_id, bool credit)
    SL_REQUIRES(t->mu);

/* Send what every connection withheld for t->ack_ms or longer (the master
 * thread, each time it wakes). @return ms until the next is due, INT32_MAX
 * when nothing is withheld. Takes t->mu. */
int tr_conns_flush_due(sl_trainer_t *t, uint64_t now_ns) SL_EXCLUDES(t->mu);

#endif

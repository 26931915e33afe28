/* The worker's TCP server for the trainer protocol (proto/dpp.proto,
 * src/rpc/frame.h).
 *
 * Encoded batches wait in a ready queue (one for any client, and one per
 * trainer rank under static sharding: below). Each client connection has two
 * threads: a receiver (HELLO, REQUEST, ACK, GOODBYE) and a sender (BATCH,
 * END, ERROR). Credits are spent: REQUEST(n) lets the worker send n more
 * batches, each BATCH spends one (the trainer client grants one back with
 * each ACK), and a client never holds more than max_credits
 * unacknowledged batches whatever it requested. Each
 * batch goes to exactly one client at a time; on ACK it is freed (and its
 * bytes released from the memory budget). When a client disconnects, says
 * GOODBYE or sends a bad frame, its unacknowledged batches go back to the
 * FRONT of the ready queue for the next client. A bad frame gets an ERROR
 * frame naming the problem and closes that connection only.
 *
 * Once the producer has finished (sl_worker_server_finish) and every batch is
 * acknowledged, every client gets END, and so does every client connecting
 * later, right after WELCOME.
 *
 * Limits (docs/PROTOCOL.md "Timeouts and caps"): a connection must finish
 * its handshake (the cluster-secret handshake of rpc/auth.h when the server
 * has a secret, then HELLO) within hello_timeout_ms of being accepted, a
 * deadline however the peer trickles its bytes; one that sends nothing
 * (no REQUEST, ACK) for idle_timeout_ms while it holds no unacknowledged
 * batch is closed without a frame (a real client reconnects); at most
 * max_clients connections (each costs two threads) are open: when full,
 * the oldest connection still in its handshake is closed to make room, else
 * the client idle longest (holding nothing, idle for a second at least),
 * else the newcomer is refused with ERROR(SL_ERR_AGAIN).
 *
 * Under a master (docs/WORKER.md, "Master mode") an item also names its
 * lease: BatchInfo then carries the job, split, generation, row range and
 * rank the trainer client commits. Items for one trainer rank (static
 * sharding, rank_plus_one > 0) wait in that rank's own queue and go only to
 * clients whose HELLO named that rank; items for any rank go to anyone. An
 * item whose lease is no longer live (revoked by the master) is dropped
 * when its turn comes instead of being sent, and every item with a lease is
 * retired through the lease hooks exactly once: when acknowledged, dropped,
 * or freed at destroy. */
#ifndef SLUICE_DPP_WORKER_SERVER_H
#define SLUICE_DPP_WORKER_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/shm_heap.h"
#include "dpp/split.h"
#include "dpp/worker/queue/queue.h"
#include "dpp/worker/source/source.h"
#include "rpc/frame.h"
#include "sluice/err.h"
#include "sluice/tensor.h"

typedef struct sl_worker_server_opts {
    const char *listen;     /* "host:port"; port 0 picks one (sl_worker_server_port) */
    uint32_t max_credits;   /* most unacknowledged batches per client; 0: 16 */
    const char *worker_id;  /* in WELCOME; NULL: "worker" */
    const char *job_id;     /* in WELCOME; NULL: "job" */
    uint32_t epochs;        /* in END */
    int hello_timeout_ms;   /* handshake (auth, HELLO) done this long after accept; 0: 10000 */
    sl_rpc_limits_t limits; /* on frames from clients; zero fields: 64 KiB messages, no payload */
    sl_worker_budget_t *budget;      /* item bytes are released here on ACK; may be NULL */
    const sl_allocator_t *allocator; /* NULL: default */
    uint32_t max_ranks;              /* trainer ranks with their own queue; 0: 64 */
    bool has_listen_fd; /* serve on listen_fd (bound to listen_port; owned by the server, */
    int listen_fd;      /*   closed also when start fails) instead of binding listen */
    uint16_t listen_port;
    /* Lease hooks (master mode; NULL: items have no lease). Called with the
     * server's lock held: they must only take locks of their own and never
     * call back into the server. live: may a batch of this lease still be
     * sent? retire: the batch is gone (acked: a client acknowledged it). */
    bool (*lease_live)(void *ctx, void *lease);
    void (*lease_retire)(void *ctx, void *lease, bool acked);
    /* Shared passes (NULL: none; source.h): each batch of a lease is also
     * queued for each member lease, for the clients whose HELLO named the
     * member's job: a copy with its own BatchInfo sharing the frame's bytes,
     * which are freed (and their budget released) with the last copy. */
    uint32_t (*lease_members)(void *ctx, void *lease, uint64_t bytes, sl_worker_lease_member_t *out,
                              uint32_t cap);
    void *lease_ctx;
    const char *cluster_secret; /* copied; clients must prove they hold it (rpc/auth.h)
                                   before HELLO; NULL: no handshake */
    uint32_t max_clients;       /* connections at once; 0: 256 */
    int idle_timeout_ms;        /* close a client silent this long holding no batch; 0: 60000,
                                   < 0: never */
    uint32_t max_queued;        /* sl_worker_server_wait_room waits while this many batches
                                   wait to be sent; 0: never waits */
    /* The frame heap (NULL: none; not owned, outlives the server). Frames
     * made in it go to clients that mapped it (docs/PROTOCOL.md
     * "Shared-memory hand-over") as descriptors instead of payloads; the
     * server listens on an abstract Unix socket to hand its memfd over. */
    sl_shm_heap_t *shm;
    /* Acknowledge every batch as it is pushed and send it to nobody (the
     * worker's pipeline alone: sl_worker_opts_t.discard). */
    bool discard;
} sl_worker_server_opts_t;

/* One encoded batch (the server owns it once pushed). */
typedef struct sl_worker_server_item {
    void *frame; /* wire frame from sl_wire_encode with the server's allocator, or a block of
                    opts.shm (sl_shm_heap_allocator over it) */
    size_t len;
    sl_batch_origin_t origin;
    uint32_t num_samples;
    uint64_t expanded_bytes; /* len had every dedup group been expanded */
    uint64_t accounted;      /* pinned budget bytes, released when the batch is acknowledged */
    /* The lease part of its origin (handle NULL: none), as the batcher made
     * it: what BatchInfo carries for COMMIT, and the rank it may go to. */
    sl_worker_lease_origin_t lease;
    /* BatchInfo.record_time_ms (Kafka batches): each sample's CreateTime,
     * the first absolute and each later one the difference to the previous
     * (server's allocator; owned with the frame); NULL, 0: none. */
    int64_t *record_ms;
    uint32_t num_record_ms;
    uint32_t share_slot; /* the server's: 0 its own job's; k > 0 the k-th shared job's */
    /* The server's: the frame is a block of opts.shm at shm_offset (freed
     * there; sent as a descriptor to a client that mapped the heap). */
    bool in_shm;
    uint64_t shm_offset;
} sl_worker_server_item_t;

typedef struct sl_worker_server_stats {
    /* BATCH frames sent (redeliveries included), counted as the send
     * starts and taken back if it fails: never below batches_acked */
    uint64_t batches_sent;
    uint64_t bytes_sent;    /* payload bytes of those */
    uint64_t batches_acked; /* distinct batches delivered */
    uint64_t samples_acked;
    uint64_t bytes_acked;          /* payload bytes of the acknowledged batches */
    uint64_t bytes_acked_expanded; /* ... had dedup been off */
    uint64_t redeliveries;         /* batches put back after a client went away */
    uint64_t clients_total;        /* connections accepted */
    uint32_t clients_now;
    uint64_t bad_frames;         /* connections closed with an ERROR */
    uint64_t send_ns;            /* time spent writing BATCH frames */
    uint32_t ready;              /* batches waiting now */
    uint64_t cpu_ns;             /* CPU time of the server threads that have exited */
    uint64_t dropped;            /* batches of revoked leases dropped unsent */
    uint64_t stale_acks;         /* ACKs of batches sent on an earlier connection (ignored) */
    uint64_t auth_failures;      /* connections refused: no proof of the cluster secret */
    uint64_t evicted;            /* closed to make room for a new connection (at max_clients) */
    uint64_t refused;            /* new connections refused: max_clients busy clients */
    uint64_t idle_closed;        /* closed after idle_timeout_ms holding nothing */
    uint64_t handshake_timeouts; /* no handshake within hello_timeout_ms */
    uint64_t shared_batches;     /* copies of batches queued for another job of a shared pass */
    uint64_t shared_bytes;       /* their frame bytes (held once, sent to each job) */
    /* Shared-memory hand-over (opts.shm): of batches_sent / bytes_sent,
     * those that went as a descriptor into the heap (no payload) */
    uint64_t shm_batches;
    uint64_t shm_bytes;
    uint64_t shm_attached; /* connections that mapped the heap */
    uint64_t shm_refused;  /* side-channel requests refused: another uid, an unknown nonce,
                              malformed, too slow */
    /* Zero copy (a client's hold): blocks kept past their ACK, released by
     * the client, and freed because the hold ended (its socket closed) */
    uint64_t shm_held;
    uint64_t shm_released;
    uint64_t shm_held_freed;
    /* The deterministic order's g-window: of batches_sent, those of an
     * ordered job (sent on the window, spending no credit); and the times a
     * sender found its rank's next batch past the client's window and waited */
    uint64_t ordered_sent;
    uint64_t ordered_waits;
} sl_worker_server_stats_t;

typedef struct sl_worker_server sl_worker_server_t;

/* The deterministic order (docs/DESIGN.md "A deterministic order";
 * order_hold.h says how): a lease of such a job is begun here before its
 * first batch; the batcher reports each batch it cuts (_cut, on the
 * reader thread, in order) and encodes only the kept ones; those pushed
 * (sl_worker_server_push) wait until their base is known (_base) and go
 * to the queue of rank g mod ranks in g order, BatchInfo carrying g;
 * _end gives the SPLIT_READ count, _drop frees a revoked lease's held
 * batches (retired unacknowledged). Each takes the server's order lock;
 * none may be called under its lock. @return as order_hold.h's, and
 * SL_ERR_INVALID for ranks 0, past max_ranks, or other than an earlier
 * lease's. */
sl_err_t sl_worker_server_order_begin(sl_worker_server_t *s, void *lease, uint32_t split,
                                      const sl_dpp_row_range_t *todo, uint32_t num_todo,
                                      uint32_t ranks, uint64_t base_plus_one, sl_error_t *err);
sl_err_t sl_worker_server_order_cut(sl_worker_server_t *s, void *lease, uint64_t from_row,
                                    uint64_t to_row, bool *keep, sl_error_t *err);
sl_err_t sl_worker_server_order_base(sl_worker_server_t *s, void *lease, uint64_t base,
                                     sl_error_t *err);
sl_err_t sl_worker_server_order_end(sl_worker_server_t *s, void *lease, uint64_t *batches,
                                    sl_error_t *err);
void sl_worker_server_order_drop(sl_worker_server_t *s, void *lease);
/* A resumed job's lease, after _begin and before its first _cut: the
 * split's skip rows (order_hold.h sl_worker_order_hold_skip). */
sl_err_t sl_worker_server_order_skip(sl_worker_server_t *s, void *lease,
                                     const sl_dpp_row_range_t *skip, uint32_t num_skip,
                                     sl_error_t *err);
/* Bytes and batches the hold keeps now (stats, tests). */
void sl_worker_server_order_held(sl_worker_server_t *s, uint64_t *bytes, uint64_t *batches);
/* The deterministic order's batches queued for each rank and not sent yet
 * (waiting for that rank's g-window): queued[r] for r < min(cap, ranks).
 * @return the job's ranks (0: no deterministic lease seen). */
uint32_t sl_worker_server_order_queued(sl_worker_server_t *s, uint64_t *queued, uint32_t cap);

/* Listen and start accepting. Caller owns *out, free with
 * sl_worker_server_destroy. @return SL_ERR_IO when the address cannot be bound. */
sl_err_t sl_worker_server_start(const sl_worker_server_opts_t *opts, sl_worker_server_t **out,
                                sl_error_t *err);

uint16_t sl_worker_server_port(const sl_worker_server_t *s);

/* Queue *item at the back (the server takes ownership of item->frame and
 * copies the struct). Never blocks: the memory budget bounds the queue.
 * @return SL_ERR_CLOSED after stop (the frame is freed), SL_ERR_NOMEM,
 * SL_ERR_INVALID for a rank_plus_one over max_ranks (freed and retired). */
sl_err_t sl_worker_server_push(sl_worker_server_t *s, const sl_worker_server_item_t *item,
                               sl_error_t *err);

/* Wait while opts.max_queued batches or more wait to be sent in the queue
 * of batches for any client (pushed and not yet sent: batches sent and not
 * yet acknowledged are bounded by the clients' credits instead), until the
 * server stops or fails. A producer calls it before making a batch, so the
 * worker runs only that far ahead of its trainers and reuses memory that
 * is already mapped instead of filling its whole memory budget with fresh
 * pages. A batch for one trainer rank (rank_plus_one > 0, static
 * sharding) never waits. @return SL_OK when there is room, SL_ERR_CLOSED
 * when stopping or failed. */
sl_err_t sl_worker_server_wait_room(sl_worker_server_t *s, uint32_t rank_plus_one);

/* The same for a batch of a deterministic lease (its rank is not known
 * before its base): wait while the rank queues hold opts.max_queued
 * batches or more and none of the batches this worker makes next can be a
 * rank's next one (every rank's queue holds a lower g; server_order.c
 * says why that never deadlocks with the hold), at most a second a call.
 * @return SL_OK, SL_ERR_CLOSED when stopping or failed. */
sl_err_t sl_worker_server_wait_room_ordered(sl_worker_server_t *s);

/* Wake every sl_worker_server_wait_room and make it (now and later)
 * return SL_ERR_CLOSED: the producers are being stopped and joined. */
void sl_worker_server_end_waits(sl_worker_server_t *s);

/* No more items will be pushed: END goes out once all are acknowledged. */
void sl_worker_server_finish(sl_worker_server_t *s);

/* The pipeline failed: every client (now and later) gets ERROR(code, msg). */
void sl_worker_server_fail(sl_worker_server_t *s, sl_err_t code, const char *msg);

/* Wait up to timeout_ms (< 0: forever) until finished and every batch is
 * acknowledged. @return true when that is so. */
bool sl_worker_server_wait_done(sl_worker_server_t *s, int timeout_ms);

void sl_worker_server_stats(sl_worker_server_t *s, sl_worker_server_stats_t *out);

/* Close the listener and every connection and join all threads; statistics
 * stay readable (server threads' CPU time included). Idempotent. When the
 * job is done (finished, every batch acknowledged) every connected client
 * gets END before its connection is shut down (waiting at most 2 s for the
 * senders): a client must not take the end of the job for a lost
 * connection. No connection is accepted once the stop has begun. */
void sl_worker_server_stop(sl_worker_server_t *s);

/* Stop, free what is still queued, free s. s may be NULL. */
void sl_worker_server_destroy(sl_worker_server_t *s);

#endif

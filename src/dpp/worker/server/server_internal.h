/* Private to the trainer-protocol server (server.h): server.c (the
 * accept thread, who may connect, the ready queues, start and stop) and
 * server_conn.c (one client connection: its receiver and sender threads).
 * Shared state (windows, unacknowledged batches, counters) is under one
 * mutex, s->mu; the encoded batches wait in unbounded sl_worker_queues
 * (the memory budget bounds them), so a returned batch can go back to its
 * front: one for batches any client may take, and one per trainer rank
 * with batches of static sharding (created when the first such batch
 * comes). */
#ifndef SLUICE_DPP_WORKER_SERVER_INTERNAL_H
#define SLUICE_DPP_WORKER_SERVER_INTERNAL_H

#include <pthread.h>
#include <time.h>

#include "common/clock.h"
#include "common/lock.h"
#include "common/mem.h"
#include "dpp/worker/server/server.h"
#include "rpc/shm.h"

/* A queued batch. Sender threads read its frame without the lock, so an
 * ACK (or a stop) that comes while one is still writing it only marks it:
 * the last writer frees it. */
/* A frame shared by the copies of a batch of a shared pass: freed, and its
 * budget released, with the last copy (under s->mu). */
typedef struct frame_ref {
    uint32_t copies;
    uint64_t accounted;
} frame_ref_t;

typedef struct sitem {
    sl_worker_server_item_t item; /* first: an sl_worker_server_item_t * is an sitem_t * */
    uint32_t senders;             /* threads writing the frame now (under s->mu) */
    bool acked;
    frame_ref_t *ref; /* NULL: the frame is this item's alone */
    /* held by a client past its ACK (server_shm.c): the delivery it went
     * out as, and the next in its holder's list */
    uint64_t held_id;
    struct sitem *held_next;
} sitem_t;

typedef struct unacked {
    sl_worker_server_item_t *item;
    uint64_t delivery_id;
    bool by_shm; /* went as a descriptor */
} unacked_t;

/* A client's hold on the heap (docs/PROTOCOL.md "Shared-memory hand-over",
 * zero copy): the side channel's socket, kept open by the client while it
 * maps the heap, and the blocks it holds past their ACK. A slot is taken
 * when the side channel grants SL_RPC_SHM_HOLD and free again once the
 * socket ended (every block it held freed then) and its connection is
 * gone. Under s->mu. */
typedef struct holder {
    bool used;
    bool open;     /* granted and its socket not ended: blocks are kept */
    bool conn;     /* its connection (client_t.holder) is still there */
    int fd;        /* the socket once stored (-1 before, and after it ended) */
    sitem_t *held; /* acknowledged, not released */
    uint32_t nheld;
} holder_t;

typedef struct client {
    struct sl_worker_server *s;
    int fd;
    char name[96];
    pthread_t recv_thread, send_thread;
    bool send_started;
    sl_mutex_t wmu; /* one frame at a time on the socket */
    /* under s->mu */
    uint64_t credits; /* granted by REQUEST, one spent per BATCH sent */
    /* The deterministic order's g-window (REQUEST order_epoch,
     * order_g_limit): an ordered batch goes iff its (epoch, g) is below
     * (order_epoch, order_g_limit), spending no credit; only moves forward */
    uint32_t order_epoch;
    uint64_t order_g_limit;
    uint32_t n_unacked;
    unacked_t *unacked; /* [max_credits] */
    bool closed, ended, done;
    bool welcomed;          /* its sender thread runs or ran (or could not start) */
    bool sender_done;       /* its sender thread has ended */
    uint32_t rank_plus_one; /* 1 + the rank of its HELLO, 0 when over max_ranks */
    /* A client whose HELLO named another job (shared passes): that job,
     * and its slot once this worker has one for it (0 until then) */
    char share_job[256];
    uint32_t share_slot;
    bool hello_done; /* past its handshake */
    /* Shared-memory hand-over: its HELLO asked and the server has a heap
     * (nonce in its WELCOME); the side channel took the nonce (granted);
     * its REQUEST said attached after that (on: descriptors from now) */
    bool shm_asked, shm_granted, shm_on;
    uint8_t shm_nonce[SL_RPC_SHM_NONCE_BYTES];
    bool shm_hold_asked; /* its HELLO said shm_hold */
    uint32_t holder;     /* 1 + its slot in s->holders (granted hold); 0: none */
    bool evicting;       /* shut down to make room: its threads are ending */
    /* Fair shares (docs/WORKER.md "Fair shares"): batches for any rank
     * this client took; a client starts at the least of the others'.
     * sending: its sender thread is writing a batch (a client whose socket
     * is full must not hold the others back) */
    uint64_t served;
    bool sending;
    uint64_t opened_ms, last_rx_ms;
    struct client *next;
} client_t;

struct sl_worker_server {
    sl_worker_server_opts_t o;
    const sl_allocator_t *a;
    char worker_id[128], job_id[128];
    int lfd;
    uint16_t port;
    pthread_t accept_thread;
    sl_worker_queue_t **ready; /* [max_ranks + 1]: [0] any rank, [r + 1] rank r (NULL until used) */
    /* Shared passes: the other jobs this worker serves, each with its own
     * queue (slot k + 1 is share_job[k]; created by the first batch or
     * HELLO naming it, kept until destroy) */
    sl_worker_queue_t *share_ready[SL_WORKER_SHARE_MAX];
    char share_job[SL_WORKER_SHARE_MAX][256];
    uint32_t nshare;
    sl_mutex_t mu;
    pthread_cond_t cv;
    /* finished or stopping set: what sl_worker_server_wait_done waits for
     * until the producer finishes, instead of cv, which every batch's
     * hand-over, ACK and credit wakes (several times a batch) */
    pthread_cond_t state_cv;
    bool finished, stopping, stopped;
    bool waits_ended; /* sl_worker_server_wait_room returns at once */
    sl_err_t fail_code;
    char fail_msg[SL_ERROR_MSG_MAX];
    uint64_t outstanding; /* pushed, not yet acknowledged */
    uint64_t next_delivery;
    client_t *clients;
    uint32_t nclients; /* in the list: their threads may still run */
    char *secret;      /* the cluster secret (owned), NULL: no handshake */
    sl_worker_server_stats_t st;
    /* the side channel of the shared-memory hand-over (opts.shm only) */
    int shm_lfd; /* -1: none */
    char shm_name[SL_RPC_SHM_NAME_MAX];
    pthread_t shm_thread;
    bool shm_started;
    holder_t *holders; /* [nholders], under mu: the clients' holds on the heap */
    uint32_t nholders;
    /* The deterministic order (server_order.c): its hold, created by the
     * first lease of such a job; under order_mu, which is taken before mu
     * and held while released batches go to their queues, so that they
     * enter each rank's queue in g order. */
    sl_mutex_t order_mu;
    struct sl_worker_order_hold *order; /* under order_mu */
    uint32_t order_ranks;               /* under order_mu */
};

/* server.c */
/* sl_worker_server_push past the deterministic order's hold: queued now. */
sl_err_t dpp_server_push_now(struct sl_worker_server *s, const sl_worker_server_item_t *item,
                             sl_error_t *err);

/* server_order.c (takes order_mu; never called under mu) */
/* Hold item (of such a lease: lease.ordered) until its turn, then queue
 * it and every other batch whose turn came. Takes the item as push does
 * (freed on failure); a batch of a lease dropped already is freed and
 * retired unacknowledged, as a revoked lease's batch is. */
sl_err_t dpp_server_order_put(struct sl_worker_server *s, const sl_worker_server_item_t *item,
                              sl_error_t *err);
/* Free the hold and every batch in it (retired unacknowledged): destroy. */
void dpp_server_order_free(struct sl_worker_server *s);

/* Under s->mu: it (popped from its queue) is dropped unsent: its lease was
 * taken back. */
void dpp_server_drop_locked(struct sl_worker_server *s, sl_worker_server_item_t *it)
    SL_REQUIRES(s->mu);
/* Free a batch (under s->mu), unless a sender is still writing its frame:
 * then it is only marked, and that sender frees it. */
void dpp_server_item_free(struct sl_worker_server *s, sl_worker_server_item_t *it)
    SL_REQUIRES(s->mu);
/* The queue item waits in (under s->mu), created on first use when create. */
sl_worker_queue_t *dpp_server_item_queue(struct sl_worker_server *s,
                                         const sl_worker_server_item_t *it, bool create)
    SL_REQUIRES(s->mu);
/* The slot (>= 1) of shared job job_id (under s->mu), added when new and
 * add (only a lease of the master's adds one: a client's HELLO never does,
 * so clients cannot use up the slots). @return 0 when there is none, no
 * room (SL_WORKER_SHARE_MAX jobs) or no memory. */
uint32_t dpp_server_share_slot(struct sl_worker_server *s, const char *job_id, bool add)
    SL_REQUIRES(s->mu);
/* A lease's batch is gone (under s->mu). */
void dpp_server_retire(struct sl_worker_server *s, const sl_worker_server_item_t *it, bool acked)
    SL_REQUIRES(s->mu);
/* it was consumed (a client's ACK, or --discard): counted as acknowledged,
 * its pinned memory given back, retired and freed (under s->mu). */
void dpp_server_item_acked(struct sl_worker_server *s, sl_worker_server_item_t *it)
    SL_REQUIRES(s->mu);
/* The queue of batches for rank_plus_one (under s->mu), created on first
 * use when create. @return NULL when out of range or memory (or absent). */
sl_worker_queue_t *dpp_server_rank_queue(struct sl_worker_server *s, uint32_t rank_plus_one,
                                         bool create) SL_REQUIRES(s->mu);

/* Does queued go after m in a rank's queue of the deterministic order
 * ((epoch, g) order; a batch without g never does)? For
 * sl_worker_queue_push_sorted. */
bool dpp_server_g_later(const sl_worker_msg_t *queued, const sl_worker_msg_t *m);
/* m, taken from rank queue q and not sent, back to q: an ordered batch
 * to its g's place (a lower g may have been queued while it was out, by
 * a hold released outside s->mu), any other to the front. */
void dpp_server_put_back(sl_worker_queue_t *q, const sl_worker_msg_t *m);

/* Free a frame of the server's (a heap block or s->a's). */
void dpp_server_frame_free(struct sl_worker_server *s, void *frame, size_t len);

/* server_shm.c: the side channel's thread (arg: the server): accepts on
 * shm_lfd and hands the heap's memfd to connections whose nonce a
 * waiting client was given, until the server stops; watches the holders'
 * sockets and ends a hold when its socket does. */
void *dpp_server_shm_main(void *arg);

/* Under s->mu. May c get one more batch as a descriptor? Not when it holds
 * max_credits blocks already: it then gets payloads (the frame stays in the
 * heap only until its ACK), so one client never holds more than its share. */
bool dpp_server_hold_room(const struct sl_worker_server *s, const client_t *c) SL_REQUIRES(s->mu);
/* Under s->mu. it (consumed: acknowledged and counted) went to c as a
 * descriptor: keep its block for c's holder until released. @return false
 * when c holds nothing (the caller frees it as before). */
bool dpp_server_hold(struct sl_worker_server *s, const client_t *c, sl_worker_server_item_t *it,
                     uint64_t delivery_id) SL_REQUIRES(s->mu);
/* Under s->mu: c's client let these deliveries' blocks go (Ack.released_ids).
 * @return false (msg says why) for an id this worker never sent. */
bool dpp_server_release(struct sl_worker_server *s, const client_t *c, const uint64_t *ids,
                        size_t n, char *msg, size_t cap) SL_REQUIRES(s->mu);
/* Under s->mu: c's connection is gone (its holder stays while its socket
 * is open). */
void dpp_server_hold_conn_end(struct sl_worker_server *s, client_t *c) SL_REQUIRES(s->mu);
/* Under s->mu: end every hold (destroy: the shm thread has ended). */
void dpp_server_holds_free(struct sl_worker_server *s) SL_REQUIRES(s->mu);
/* Under s->mu: a second item sharing it's frame (the frame then lives until
 * both are freed), for a hold on a block whose batch goes back to the
 * queue. @return NULL when out of memory. */
sitem_t *dpp_server_item_twin(struct sl_worker_server *s, sitem_t *si) SL_REQUIRES(s->mu);
/* Under s->mu: it was acknowledged: counted, its pinned memory given back,
 * its lease told; not freed (dpp_server_item_acked is this and the free). */
void dpp_server_item_consumed(struct sl_worker_server *s, sl_worker_server_item_t *it)
    SL_REQUIRES(s->mu);

/* server_conn.c: a connection's receiver thread (arg: its client_t), which
 * starts its sender once the handshake is done. */
void *dpp_server_client_main(void *arg);

#endif

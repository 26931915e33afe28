/* Private state of the trainer client (include/sluice/trainer.h), shared by
 * client.c (the application-facing calls) and conn.c (connection set-up and
 * the receive thread).
 *
 * Two threads touch a client: the application thread (sl_trainer_next,
 * release, close) and the receive thread. Two locks, never held together
 * except in the order mu -> send_mu (no code path does so today):
 *   mu       the queue of decoded batches, the state, the failure
 *   send_mu  the socket slot (fd, conn_gen, send_ready), the per-connection
 *            credit count, pending acks; also makes a whole frame one write
 * The socket is closed only by the thread that opened it, after clearing the
 * slot under send_mu, so a shutdown() from sl_trainer_close never hits a
 * reused descriptor. */
#ifndef SLUICE_TRAINER_INTERNAL_H
#define SLUICE_TRAINER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "rpc/auth.h"
#include "rpc/frame.h"
#include "sluice/trainer.h"

/* A decoded batch waiting for sl_trainer_next. */
typedef struct tq_item {
    sl_batch_t *batch;
    uint64_t delivery_id;
    uint64_t gen; /* connection it arrived on */
    struct tq_item *next;
} tq_item_t;

typedef enum tr_state {
    TR_RUNNING, /* batches may still arrive */
    TR_ENDED,   /* END received: hand out the queue, then SL_ERR_CLOSED */
    TR_FAILED   /* failure holds the error; the queue was discarded */
} tr_state_t;

struct tr_fleet; /* master mode (fleet_internal.h); NULL in direct mode */

struct sl_trainer {
    struct tr_fleet *fleet;
    /* configuration, fixed after connect */
    const sl_allocator_t *a;
    char *address;
    char *client_name;
    uint32_t prefetch;
    int connect_timeout_ms;
    int reconnect_ms;
    uint32_t rank, world_size;
    sl_wire_limits_t wire_limits;
    sl_rpc_limits_t rpc_limits;
    char *secret; /* the cluster secret (rpc/auth.h), NULL: none */

    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* queue grew, state changed, closing */
    tq_item_t *head, *tail;
    tr_state_t state;
    _Atomic bool closing; /* written under mu, read anywhere */
    sl_error_t failure;
    uint64_t end_batches; /* from END, for the closing message */

    pthread_mutex_t send_mu;
    int fd; /* -1 while disconnected */
    uint64_t conn_gen;
    bool send_ready;          /* handshake done: acks and requests may go out */
    uint32_t window;          /* credits granted at connect: min(prefetch, max_credits) */
    _Atomic uint64_t granted; /* credits granted on this connection (read by rx) */
    char worker_id[64];
    uint64_t *pending; /* acks that could not be sent, sent after a reconnect */
    uint32_t npending, pending_cap;

    _Atomic uint64_t batches, samples, bytes, wait_ns, reconnects, dropped;
    _Atomic uint32_t queued;
};

/* Open a connection, say HELLO, check WELCOME, install the socket, flush
 * pending acks and grant the window. Runs on the application thread in
 * sl_trainer_connect and on the receive thread afterwards; takes send_mu.
 * timeout_ms bounds the connect and the handshake. */
sl_err_t tr_open_connection(sl_trainer_t *t, int timeout_ms, sl_error_t *err);

/* With a cluster secret, run the handshake (rpc/auth.h) on a new
 * connection to peer ("worker 1.2.3.4:5") within timeout_ms; without one,
 * nothing. Any thread. */
sl_err_t tr_authenticate(const sl_trainer_t *t, int fd, int timeout_ms, sl_error_t *err);

/* The receive thread (arg: the client). */
void *tr_receive_main(void *arg);

/* Mark the client failed with e (unless it already ended or failed) and
 * discard the queue. Takes mu. */
void tr_fail(sl_trainer_t *t, const sl_error_t *e);
/* The same, caller holds mu. */
void tr_fail_locked(sl_trainer_t *t, const sl_error_t *e);

/* Discard every queued batch (they are unacknowledged: the worker sends them
 * to someone else). Caller holds mu. */
void tr_drop_queue_locked(sl_trainer_t *t);

/* Remember an ack that could not be sent now. Caller holds send_mu. */
void tr_pending_ack_locked(sl_trainer_t *t, uint64_t delivery_id);

/* Sleep up to ms unless the client closes (takes t->mu). @return true when
 * closing. */
bool tr_pause_unless_closing(sl_trainer_t *t, int ms);

/* Decode a BATCH frame's payload in place: on SL_OK the caller owns *out,
 * whose release frees the payload (taken from f). Checks num_samples
 * against the payload. Any thread. */
sl_err_t tr_decode_batch(sl_trainer_t *t, sl_rpc_frame_t *f, sl_batch_t **out, sl_error_t *e);

#endif

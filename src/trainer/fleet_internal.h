/* Private state of the trainer client in master mode (include/sluice/trainer.h,
 * docs/PROTOCOL.md "Control frames"): one connection to the DPP master
 * (fleet_master.c) and one per worker of the job (fleet_worker.c), glued by
 * fleet.c. A received batch becomes an item; its row range is COMMITted at
 * the master; only a COMMITTED item moves to the ready queue that
 * sl_trainer_next hands out; any other answer drops it.
 *
 * Threads: the application thread (next, resume_token, close), the master
 * thread (reads replies, re-ATTACHes and reports stats every refresh_ms,
 * reconnects), one thread per worker slot (connects, decodes batches, sends
 * their COMMITs). Locks, always taken in this order, never the other way:
 *   msend_mu     the master socket slot: one writer at a time; held while
 *                resending pending commits so that no commit is missed
 *   t->mu        every list (pending, ready, slots), every slot's `held`,
 *                the fleet state; t->cv signals all changes
 *   slot.send_mu a worker socket slot (acks, credits)
 * Memory: each slot keeps held + in-flight <= window batches (credits are
 * returned only when an item leaves the client), so the client holds at
 * most window batches per worker connection. */
#ifndef SLUICE_TRAINER_FLEET_INTERNAL_H
#define SLUICE_TRAINER_FLEET_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "trainer/trainer_internal.h"

#define FL_ID_MAX 128
#define FL_ADDR_MAX 256

typedef struct fl_slot fl_slot_t;

/* A batch received in master mode, from arrival until it leaves the client
 * (handed out, or dropped after a refused commit). */
typedef struct fl_item {
    sl_batch_t *batch;
    fl_slot_t *slot;
    uint64_t delivery_id;
    uint64_t nonce;
    uint32_t epoch, split;
    uint64_t generation, from_row, to_row;
    uint32_t num_samples;
    struct fl_item *prev, *next;
} fl_item_t;

typedef struct fl_list {
    fl_item_t *head, *tail;
    uint32_t count;
} fl_list_t;

/* One worker of the job, and its connection. */
struct fl_slot {
    sl_trainer_t *t;
    char worker_id[FL_ID_MAX];
    char address[FL_ADDR_MAX];
    pthread_t thread;
    bool thread_started;
    /* under t->mu */
    uint32_t held;  /* items from this slot still in the client */
    bool listed;    /* named in the master's latest ATTACHED */
    bool stop;      /* the master no longer names it, or the client closes */
    bool finished;  /* the thread has ended (END, refused, given up) */
    bool got_end;   /* the worker said END: not read again while it is named */
    bool connected; /* a connection is up */
    /* under send_mu */
    pthread_mutex_t send_mu;
    int fd;
    bool send_ready;
    uint32_t window;
    _Atomic uint64_t granted; /* credits granted on the current connection */
    fl_slot_t *next;
};

typedef struct tr_fleet {
    char master[FL_ADDR_MAX];
    char job_id[FL_ID_MAX];
    char client_id[FL_ID_MAX];
    int refresh_ms;

    /* the master connection */
    pthread_mutex_t msend_mu;
    int mfd;          /* -1 while disconnected */
    uint64_t mgen;    /* master connections made; under msend_mu and mu */
    pthread_t mthread;
    bool mthread_started;

    /* under t->mu */
    fl_list_t pending; /* commit sent (or to be resent), no answer yet; nonce order */
    fl_list_t ready;   /* committed, waiting for sl_trainer_next; arrival order */
    fl_slot_t *slots;
    uint64_t next_nonce;
    bool finished;     /* ATTACHED said every epoch of the job is committed */
    uint32_t epoch;
    char sharding[16];
    /* the resume token being asked for (one at a time) */
    bool token_wanted, token_ready;
    uint8_t *token;
    size_t token_len;
    uint64_t token_gen; /* master connection it was asked on */
    char last_worker_error[512]; /* for messages: why a worker was given up */

    _Atomic uint64_t committed, dropped;
    _Atomic uint32_t workers;
    /* CLIENT_STATS: what was last reported (master thread only) */
    uint64_t rep_wait_ns, rep_batches, rep_samples, rep_at_ns;
} tr_fleet_t;

/* fleet.c */
sl_err_t tr_fleet_connect(sl_trainer_t *t, const sl_trainer_opts_t *opts, sl_error_t *err);
sl_err_t tr_fleet_next(sl_trainer_t *t, int timeout_ms, sl_batch_t **out, sl_error_t *err);
void tr_fleet_close(sl_trainer_t *t);
void fl_list_push(fl_list_t *l, fl_item_t *it);
void fl_list_remove(fl_list_t *l, fl_item_t *it);
/* An item leaves the client: free it (and its batch unless handed out) and
 * give its slot the credit back. Caller holds t->mu (takes slot.send_mu). */
void fl_item_leave_locked(sl_trainer_t *t, fl_item_t *it, bool free_batch);
/* ACK one delivery on the slot's current connection, if any. Caller holds
 * t->mu (takes slot.send_mu). */
void fl_slot_ack_locked(fl_slot_t *s, uint64_t delivery_id);

/* fleet_master.c */
/* Open the master connection and ATTACH (application thread at connect, the
 * master thread afterwards). Fills the fleet state from ATTACHED. */
sl_err_t fl_master_open(sl_trainer_t *t, int timeout_ms, sl_error_t *err);
void *fl_master_main(void *arg);
/* Send COMMIT for it if the master is connected (else the master thread
 * resends it after reconnecting). Takes msend_mu; caller holds no lock. */
void fl_master_send_commit(sl_trainer_t *t, const fl_item_t *it);

/* fleet_worker.c */
/* Start a slot for this worker (caller holds t->mu). @return NULL when out
 * of memory or the thread cannot start (the worker is tried again on the
 * next refresh). */
fl_slot_t *fl_slot_start(sl_trainer_t *t, const char *worker_id, const char *address);
/* Ask the slot's thread to end (caller holds t->mu). */
void fl_slot_stop_locked(fl_slot_t *s);
/* Join and free a finished slot that holds no items (caller holds no lock;
 * the slot is already unlinked). */
void fl_slot_free(fl_slot_t *s);

#endif

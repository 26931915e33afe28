/* Private state of the trainer client in master mode (include/sluice/trainer.h,
 * docs/PROTOCOL.md "Control frames"): the connection to the DPP master
 * (fleet_master.c) and the committer (fleet.c) that the worker connections
 * (worker_conn.c, one per worker the master names) hand every received
 * batch to. A received batch's row range is COMMITted at the master; a
 * COMMITTED item moves to the client's ready queue, acknowledged to its
 * worker; any other answer drops it (acknowledged too).
 *
 * Threads and locks: trainer_internal.h. The master thread reads replies,
 * re-ATTACHes and reports CLIENT_STATS every refresh_ms, starts and stops
 * worker connections as ATTACHED names them, and reconnects. msend_mu (the
 * master socket slot: one writer at a time) is taken before t->mu, and is
 * held while pending commits are resent so that no commit is missed. */
#ifndef SLUICE_TRAINER_FLEET_INTERNAL_H
#define SLUICE_TRAINER_FLEET_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "trainer/trainer_internal.h"

/* batch.equal_batches_per_rank: an epoch's quota as the master last gave
 * it, and this client's batches of the epoch handed out (fleet_equal.c). */
typedef struct tr_eq_epoch {
    bool used, final;
    uint32_t epoch;
    uint64_t quota, handed;
} tr_eq_epoch_t;
/* epochs a client has held batches of at once: its rank's and the next
 * (a rank is at most one epoch ahead of the job), with room to spare */
#define TR_EQ_EPOCHS 4
/* how often a held batch's quota is asked again */
#define TR_EQ_ASK_MS 20

typedef struct tr_fleet {
    char master[TR_ADDR_MAX];
    char label[TR_ADDR_MAX + 8]; /* "master ADDR": starts its messages */
    char job_id[TR_ID_MAX];
    char client_id[TR_ID_MAX];
    int refresh_ms;

    /* the master connection */
    sl_mutex_t msend_mu;
    int mfd;       /* -1 while disconnected */
    uint64_t mgen; /* master connections made; under msend_mu and mu */
    pthread_t mthread;
    bool mthread_started;

    /* under t->mu */
    tr_list_t pending; /* commit sent (or to be resent), no answer yet; nonce order */
    uint64_t next_nonce;
    bool finished; /* ATTACHED said every epoch of the job is committed */
    uint32_t epoch;
    char sharding[16];
    /* the resume token being asked for (one at a time) */
    bool token_wanted, token_ready;
    uint8_t *token;
    size_t token_len;
    uint64_t token_gen; /* master connection it was asked on */

    /* equal batches per rank (under mu): the epochs' quotas; items of
     * pending held for the quota (answered COMMITTED); when the master
     * thread asks again (its own) */
    tr_eq_epoch_t eq[TR_EQ_EPOCHS];
    uint32_t eq_held;
    uint64_t eq_ask_ns;

    _Atomic uint64_t committed;
    /* CLIENT_STATS: what was last reported (master thread only) */
    uint64_t rep_wait_ns, rep_batches, rep_samples, rep_at_ns;
} tr_fleet_t;

/* ---- fleet.c ---- */

/* ATTACH to the master (its ERROR, e.g. an unknown job, is returned) and
 * start the master thread. On failure the caller's destroy frees what was
 * made. Application thread. */
sl_err_t tr_fleet_connect(sl_trainer_t *t, const sl_trainer_opts_t *opts, sl_error_t *err);

/* A worker connection's check of a batch before it is decoded: a worker
 * under a master names the job and the row range in every batch. @return
 * SL_OK, or SL_ERR_PROTOCOL saying what is wrong. */
sl_err_t tr_fleet_check_batch(const sl_trainer_t *t, const Sluice__Dpp__BatchInfo *bi,
                              sl_error_t *e);

/* The committer: take a received item (its worker connection's thread,
 * no lock held). Another rank's batch (rank_plus_one not 0, not ours) is
 * acknowledged and dropped without a commit; any other joins pending and
 * its COMMIT goes to the master. */
void tr_fleet_receive(sl_trainer_t *t, tr_item_t *it, uint32_t rank_plus_one);

/* Has the job ended for this client (every epoch committed, no answer
 * owed)? Then err says so. Caller holds mu. */
bool tr_fleet_ended_locked(const sl_trainer_t *t, sl_error_t *err) SL_REQUIRES(t->mu);

/* sl_trainer_next's timeout, with what the client is waiting for. Caller
 * holds mu. @return SL_ERR_TIMEOUT. */
sl_err_t tr_fleet_timeout_locked(const sl_trainer_t *t, int timeout_ms, sl_error_t *err)
    SL_REQUIRES(t->mu);

/* Say GOODBYE to the master and join the master thread (the client is
 * closing: no worker connection is started after this). */
void tr_fleet_stop(sl_trainer_t *t);

/* Free the fleet state and its pending items (every thread has ended). */
void tr_fleet_free(sl_trainer_t *t);

/* ---- fleet_master.c ---- */

/* Open the master connection and ATTACH (application thread at connect, the
 * master thread afterwards). Fills the fleet state from ATTACHED. @return as
 * tr_attempt_fn. */
sl_err_t fl_master_open(sl_trainer_t *t, int timeout_ms, bool *refused, sl_error_t *err);
void *fl_master_main(void *arg);
/* Send COMMIT for it if the master is connected (else the master thread
 * resends it after reconnecting). Takes msend_mu; caller holds no lock. */
void fl_master_send_commit(sl_trainer_t *t, const tr_item_t *it)
    SL_EXCLUDES(t->mu, t->fleet->msend_mu);

/* ---- fleet_equal.c ---- */

/* A COMMITTED answer with `equal` set for it (in pending, acknowledged):
 * it stays in pending, held, until the quota of its epoch lets it out (it
 * goes to the ready queue) or is final below it (dropped); the held
 * batches of an epoch leave in nonce order, the order the master counted
 * them in. Caller holds mu. */
void fl_equal_reply_locked(sl_trainer_t *t, tr_item_t *it, const Sluice__Control__CommitReply *r)
    SL_REQUIRES(t->mu);
/* Master thread: when a batch is held, send the COMMIT of the first held
 * batch of each epoch again (its nonce: the master answers with the
 * quota now) every TR_EQ_ASK_MS. @return the ms until the next ask
 * (INT32_MAX: nothing held). Takes mu, then msend_mu. */
int fl_equal_tick(sl_trainer_t *t, uint64_t now_ns) SL_EXCLUDES(t->mu, t->fleet->msend_mu);

#endif

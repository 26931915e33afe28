/* Equal batches per rank in the trainer client (docs/TRAINER.md, "Equal
 * batches per rank"; the master's side: src/dpp/master/state_equal.c).
 * Under a job with batch.equal_batches_per_rank, the master answers every
 * commit with the quota of the batch's epoch: how many batches each rank
 * hands out in it. This client hands out a committed batch only while it
 * has handed out fewer than the quota; it holds the others (they stay in
 * pending, so that a resume token names them as not handed out and a
 * reconnect sends them again) and asks again every TR_EQ_ASK_MS, sending
 * the COMMIT of an epoch's first held batch under its nonce (commits are
 * idempotent per nonce; the quota only grows). Once the quota is final,
 * the batches above it are dropped, never handed out.
 *
 * Held batches leave in nonce order: the master counted this rank's
 * batches in the order their commits arrived, which is nonce order on one
 * connection (and a reconnect sends every unanswered one again in that
 * order), so the batches this client drops are the ones whose samples the
 * master reports as dropped. */
#include <stdint.h>
#include <string.h>

#include "trainer/fleet_internal.h"

/* The entry of epoch (a new one replaces the lowest epoch's: older
 * epochs' quotas were final long since). Caller holds mu. */
static tr_eq_epoch_t *epoch_of(tr_fleet_t *f, uint32_t epoch)
{
    tr_eq_epoch_t *low = &f->eq[0];
    for (int k = 0; k < TR_EQ_EPOCHS; k++) {
        tr_eq_epoch_t *e = &f->eq[k];
        if (e->used && e->epoch == epoch) return e;
        if (!e->used || (low->used && e->epoch < low->epoch)) low = e;
    }
    *low = (tr_eq_epoch_t){.used = true, .epoch = epoch};
    return low;
}

/* Let out, in nonce order, the held batches of epoch that the quota
 * allows; drop those above a final quota. An unanswered commit of the
 * epoch ahead of a held batch stops the walk: its answer comes first. */
static void release_locked(sl_trainer_t *t, tr_eq_epoch_t *e) SL_REQUIRES(t->mu)
{
    tr_fleet_t *f = t->fleet;
    tr_item_t *next;
    for (tr_item_t *it = f->pending.head; it; it = next) {
        next = it->next;
        if (it->epoch != e->epoch) continue;
        if (!it->eq_held) break;
        if (e->handed < e->quota) {
            e->handed++;
            tr_list_remove(&f->pending, it);
            it->eq_held = false;
            f->eq_held--;
            tr_ready_push_locked(t, it);
            atomic_fetch_add(&f->committed, 1);
        } else if (e->final) {
            /* above the epoch's quota: not trained this epoch */
            tr_list_remove(&f->pending, it);
            it->eq_held = false;
            f->eq_held--;
            atomic_fetch_add(&t->dropped, 1);
            tr_item_leave_locked(t, it, true);
        } else {
            break;
        }
    }
}

void fl_equal_reply_locked(sl_trainer_t *t, tr_item_t *it, const Sluice__Control__CommitReply *r)
{
    tr_fleet_t *f = t->fleet;
    tr_eq_epoch_t *e = epoch_of(f, it->epoch);
    if (r->quota > e->quota) e->quota = r->quota;
    e->final = e->final || r->quota_final;
    if (!it->eq_held) {
        it->eq_held = true;
        f->eq_held++;
    }
    release_locked(t, e);
}

int fl_equal_tick(sl_trainer_t *t, uint64_t now_ns)
{
    tr_fleet_t *f = t->fleet;
    tr_item_t ask[TR_EQ_EPOCHS];
    int n = 0;
    sl_mutex_lock(&t->mu);
    if (f->eq_held == 0) {
        sl_mutex_unlock(&t->mu);
        return INT32_MAX;
    }
    if (now_ns < f->eq_ask_ns) {
        int ms = (int)((f->eq_ask_ns - now_ns) / 1000000u) + 1;
        sl_mutex_unlock(&t->mu);
        return ms;
    }
    /* the first held batch of each epoch: its answer's quota serves them all */
    for (const tr_item_t *it = f->pending.head; it && n < TR_EQ_EPOCHS; it = it->next) {
        if (!it->eq_held) continue;
        bool seen = false;
        for (int k = 0; k < n; k++)
            seen = seen || ask[k].epoch == it->epoch;
        if (!seen) ask[n++] = *it; /* a copy: the item may leave once mu is released */
    }
    f->eq_ask_ns = now_ns + (uint64_t)TR_EQ_ASK_MS * 1000000u;
    sl_mutex_unlock(&t->mu);
    for (int k = 0; k < n; k++)
        fl_master_send_commit(t, &ask[k]);
    return TR_EQ_ASK_MS;
}

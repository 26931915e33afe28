/* The trainer client's shared state (trainer_internal.h): the item lists and
 * the ready queue, an item leaving the client (its credit back), failing,
 * and the reconnect policy that every connection of the client - to a
 * worker, to the master - follows. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "trainer/reorder.h"
#include "trainer/trainer_internal.h"

void tr_list_push(tr_list_t *l, tr_item_t *it)
{
    it->next = NULL;
    it->prev = l->tail;
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->count++;
}

void tr_list_remove(tr_list_t *l, tr_item_t *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        l->head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        l->tail = it->prev;
    it->prev = it->next = NULL;
    l->count--;
}

void tr_list_free(sl_trainer_t *t, tr_list_t *l)
{
    while (l->head) {
        tr_item_t *it = l->head;
        tr_list_remove(l, it);
        sl_batch_destroy(it->batch);
        sl_free(t->a, it, sizeof *it);
    }
}

void tr_ready_push_locked(sl_trainer_t *t, tr_item_t *it)
{
    tr_list_push(&t->ready, it);
    atomic_store(&t->queued, t->ready.count);
    pthread_cond_broadcast(&t->cv);
}

/* tr_item_leave_locked, with the ACK of ack_id first when it is not 0. */
static void leave_locked(sl_trainer_t *t, tr_item_t *it, bool free_batch, uint64_t ack_id)
    SL_REQUIRES(t->mu)
{
    tr_conn_t *c = it->conn;
    if (free_batch) sl_batch_destroy(it->batch);
    sl_free(t->a, it, sizeof *it);
    c->held--;
    /* One credit back keeps held + in flight <= window on the current
     * connection; a connection that opens later grants window - held. */
    if (!t->order && !t->fleet) {
        tr_conn_ack_credit_locked(t, c, ack_id);
        return;
    }
    if (ack_id) tr_conn_ack_locked(t, c, ack_id);
    if (t->order) {
        /* the deterministic order: batches go on the g-window, which the
         * hand-out moved (to every worker: any may hold the next one) */
        tr_order_push_window_locked(t);
        return;
    }
    /* master mode withholds the credit with the acks */
    tr_conn_later_locked(t, c, 0, true);
}

void tr_item_leave_locked(sl_trainer_t *t, tr_item_t *it, bool free_batch)
{
    leave_locked(t, it, free_batch, 0);
}

void tr_item_hand_out_locked(sl_trainer_t *t, tr_item_t *it)
{
    leave_locked(t, it, false, it->acked ? 0 : it->delivery_id);
}

void tr_drop_unacked_locked(sl_trainer_t *t, const tr_conn_t *c)
{
    tr_item_t *it = t->ready.head;
    while (it) {
        tr_item_t *next = it->next;
        if (it->conn == c && !it->acked) {
            tr_list_remove(&t->ready, it);
            tr_item_leave_locked(t, it, true);
            atomic_fetch_add(&t->dropped, 1);
        }
        it = next;
    }
    atomic_store(&t->queued, t->ready.count);
}

void tr_fail_locked(sl_trainer_t *t, const sl_error_t *e)
{
    if (t->state == TR_RUNNING) {
        t->state = TR_FAILED;
        t->failure = *e;
        if (t->failure.code == SL_OK) t->failure.code = SL_ERR_IO;
        /* The connections are of no use any more, and nothing more is
         * handed out: unacknowledged batches belong to their workers again
         * (stopped first, so that no credit goes out for the dropped). */
        for (tr_conn_t *c = t->conns; c; c = c->next)
            tr_conn_stop_locked(t, c, "the client failed");
        while (t->ready.head) {
            tr_item_t *it = t->ready.head;
            tr_list_remove(&t->ready, it);
            tr_item_leave_locked(t, it, true);
            atomic_fetch_add(&t->dropped, 1);
        }
        tr_item_t *held;
        while (t->order && (held = tr_reorder_pop_any(t->order)) != NULL) {
            tr_item_leave_locked(t, held, true);
            atomic_fetch_add(&t->dropped, 1);
        }
        atomic_store(&t->queued, 0);
    }
    pthread_cond_broadcast(&t->cv);
}

void tr_fail(sl_trainer_t *t, const sl_error_t *e)
{
    sl_mutex_lock(&t->mu);
    tr_fail_locked(t, e);
    sl_mutex_unlock(&t->mu);
}

bool tr_pause(sl_trainer_t *t, const bool *stop, int ms)
{
    uint64_t until = sl_clock_ns() + (uint64_t)(ms > 0 ? ms : 0) * 1000000ull;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    sl_mutex_lock(&t->mu);
    while (!t->closing && !(stop && *stop) && (ms < 0 || sl_clock_ns() < until)) {
        if (ms < 0)
            sl_cond_wait(&t->cv, &t->mu);
        else
            sl_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    bool stopped = t->closing || (stop && *stop);
    sl_mutex_unlock(&t->mu);
    return stopped;
}

bool tr_stream_broken(sl_err_t rc)
{
    return rc == SL_ERR_PROTOCOL || rc == SL_ERR_VERSION || rc == SL_ERR_TOO_LARGE ||
           rc == SL_ERR_NOMEM;
}

static bool stopped(sl_trainer_t *t, const bool *stop)
{
    sl_mutex_lock(&t->mu);
    bool s = t->closing || (stop && *stop);
    sl_mutex_unlock(&t->mu);
    return s;
}

sl_err_t tr_reconnect(sl_trainer_t *t, const bool *stop, const char *label, const sl_error_t *lost,
                      tr_attempt_fn attempt, void *ctx, sl_error_t *err)
{
    if (lost && t->reconnect_ms < 0)
        return sl_error_set(err, lost->code != SL_OK ? lost->code : SL_ERR_IO,
                            "%s: connection lost (%.300s); reconnecting is off", label, lost->msg);
    uint64_t budget = t->reconnect_ms > 0 ? (uint64_t)t->reconnect_ms : 0;
    uint64_t deadline = sl_clock_ns() + budget * 1000000ull;
    int backoff = 50;
    sl_error_t e = {0};
    for (;;) {
        if (stopped(t, stop)) return sl_error_set(err, SL_ERR_CLOSED, "%s: stopped", label);
        uint64_t now = sl_clock_ns();
        uint64_t left_ms = now < deadline ? (deadline - now) / 1000000ull + 1 : 1;
        int timeout = t->connect_timeout_ms;
        if ((uint64_t)timeout > left_ms) timeout = (int)left_ms;
        sl_error_clear(&e);
        bool refused = false;
        sl_err_t rc = attempt(ctx, timeout, &refused, &e);
        if (rc == SL_OK) {
            if (lost) atomic_fetch_add(&t->reconnects, 1);
            return SL_OK;
        }
        if (stopped(t, stop)) return sl_error_set(err, SL_ERR_CLOSED, "%s: stopped", label);
        /* A peer that answers but refuses us will not change its mind. */
        if (refused || rc == SL_ERR_PROTOCOL || rc == SL_ERR_VERSION || rc == SL_ERR_TOO_LARGE) {
            *err = e;
            return rc;
        }
        now = sl_clock_ns();
        if (now >= deadline) break;
        /* The last pause ends at the deadline, for one last attempt there. */
        uint64_t pause = (uint64_t)backoff;
        if (pause > (deadline - now) / 1000000ull) pause = (deadline - now) / 1000000ull;
        if (tr_pause(t, stop, (int)pause))
            return sl_error_set(err, SL_ERR_CLOSED, "%s: stopped", label);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    if (!lost && t->reconnect_ms < 0) { /* one attempt was all: its own error */
        *err = e;
        return e.code != SL_OK ? e.code : SL_ERR_IO;
    }
    return sl_error_set(err, e.code != SL_OK ? e.code : SL_ERR_TIMEOUT,
                        lost ? "%s: connection lost and not re-established within %d ms (%.300s)"
                             : "%s: not reached within %d ms (%.300s)",
                        label, t->reconnect_ms, e.msg[0] ? e.msg : "no attempt");
}

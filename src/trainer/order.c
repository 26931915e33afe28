/* The trainer client under the deterministic order (trainer_internal.h,
 * docs/PROTOCOL.md "The deterministic order", docs/DESIGN.md "A
 * deterministic order"): a committed batch waits in the reorder buffer
 * (reorder.h) until every lower g of this rank was handed out; the client
 * asks every worker for the batches below its g-window (order_epoch,
 * order_g_limit) instead of spending credits on them, so the buffer never
 * overflows and the worker that holds the next batch can always send it;
 * the window moves to the next epoch only once the master says the job
 * passed the current one and this rank's batches of it are all handed
 * over. */
#include <inttypes.h>
#include <stdio.h>
#include <sys/socket.h>

#include "common/err.h"
#include "common/log.h"
#include "common/log_events.h"
#include "trainer/reorder.h"
#include "trainer/trainer_internal.h"

sl_err_t tr_order_setup_locked(sl_trainer_t *t, uint32_t ranks, uint32_t epoch, sl_error_t *err)
{
    uint32_t world = t->world_size ? t->world_size : 1;
    if (ranks != world)
        return sl_error_set(err, SL_ERR_INVALID,
                            "the job is in the deterministic order for %u ranks; this client's "
                            "world size is %u",
                            ranks, world);
    if (t->order) return SL_OK;
    SL_FORWARD_IF_ERROR(tr_reorder_new(t->rank, ranks, t->prefetch, t->a, &t->order, err));
    t->order_epoch = epoch;
    t->order_wait_ns = sl_clock_ns();
    return SL_OK;
}

void tr_order_window_locked(const sl_trainer_t *t, uint32_t *epoch, uint64_t *limit)
{
    /* The ready queue holds this rank's batches just below next, so the
     * oldest not handed out is next - ready x R: the prefetch batches from
     * there are what the client may hold (ready, buffer and unanswered
     * commits together). */
    uint32_t ranks = t->world_size ? t->world_size : 1;
    uint32_t room = t->prefetch > t->ready.count ? t->prefetch - t->ready.count : 0;
    *epoch = t->order_epoch;
    *limit = tr_reorder_next(t->order) + (uint64_t)room * ranks;
}

void tr_order_push_window_locked(sl_trainer_t *t)
{
    Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
    tr_order_window_locked(t, &req.order_epoch, &req.order_g_limit);
    for (tr_conn_t *c = t->conns; c; c = c->next) {
        sl_mutex_lock(&c->send_mu);
        /* a failed send: the connection's thread sees the shutdown and
         * reconnects, and its handshake sends the window again */
        if (c->fd >= 0 && c->send_ready && !c->stop &&
            sl_rpc_send(c->fd, SL_RPC_REQUEST, &req.base, NULL, 0, NULL) != SL_OK)
            shutdown(c->fd, SHUT_RDWR);
        sl_mutex_unlock(&c->send_mu);
    }
}

void tr_order_put_locked(sl_trainer_t *t, tr_item_t *it)
{
    sl_error_t e = {0};
    if (it->order_g_plus_one == 0 || it->epoch != t->order_epoch) {
        if (it->order_g_plus_one == 0)
            sl_error_set(&e, SL_ERR_PROTOCOL,
                         "%s: a batch (split %u rows [%" PRIu64 ", %" PRIu64
                         ")) of a job in the deterministic order without its g",
                         it->conn->label, it->split, it->from_row, it->to_row);
        else
            sl_error_set(&e, SL_ERR_PROTOCOL,
                         "%s: batch g %" PRIu64 " of epoch %u, this rank hands out epoch %u "
                         "(outside the g-window it asked for)",
                         it->conn->label, it->order_g_plus_one - 1, it->epoch, t->order_epoch);
    } else if (tr_reorder_put(t->order, it->order_g_plus_one - 1, it, &e) != SL_OK) {
        sl_error_prefix(&e, "%s: epoch %u: ", it->conn->label, it->epoch);
        e.code = SL_ERR_PROTOCOL;
    }
    if (e.code != SL_OK) {
        tr_item_leave_locked(t, it, true);
        tr_fail_locked(t, &e);
        return;
    }
    tr_item_t *next;
    while ((next = tr_reorder_take(t->order)) != NULL) {
        tr_ready_push_locked(t, next);
        t->order_wait_ns = sl_clock_ns();
        t->order_stall_logged = false;
    }
}

void tr_order_advance_locked(sl_trainer_t *t, uint32_t job_epoch, const tr_list_t *pending)
{
    if (!t->order || job_epoch <= t->order_epoch || tr_reorder_held(t->order) > 0) return;
    for (const tr_item_t *it = pending->head; it; it = it->next)
        if (it->epoch == t->order_epoch) return;
    /* every batch of the epoch was committed, by this rank for its own:
     * all of them are handed over; epochs between had none of this rank */
    sl_error_t e = {0};
    if (tr_reorder_start(t->order, t->rank, &e) != SL_OK) {
        tr_fail_locked(t, &e);
        return;
    }
    t->order_epoch = job_epoch;
    t->order_wait_ns = sl_clock_ns();
    t->order_stall_logged = false;
    tr_order_push_window_locked(t);
}

void tr_order_check_stall(sl_trainer_t *t, uint64_t now_ns)
{
    sl_mutex_lock(&t->mu);
    if (t->order && t->state == TR_RUNNING && !t->order_stall_logged && t->ready.count == 0 &&
        now_ns - t->order_wait_ns >= (uint64_t)TR_ORDER_STALL_MS * 1000000ull) {
        t->order_stall_logged = true;
        sl_log(SL_LOG_WARN, SL_EV(TRAINER_ORDER_STALLED),
               "rank %u: epoch %u: waited %.1f s for batch g %" PRIu64
               " (%u later ones held): the deterministic order hands out nothing before it",
               t->rank, t->order_epoch, (double)(now_ns - t->order_wait_ns) / 1e9,
               tr_reorder_next(t->order), tr_reorder_held(t->order));
    }
    sl_mutex_unlock(&t->mu);
}

void tr_order_describe_locked(const sl_trainer_t *t, char *out, size_t cap)
{
    if (!t->order) {
        if (cap) out[0] = '\0';
        return;
    }
    snprintf(out, cap, "; rank %u waits for batch g %" PRIu64 " of epoch %u (%u later ones held)",
             t->rank, tr_reorder_next(t->order), t->order_epoch, tr_reorder_held(t->order));
}

/* The worker's server and the deterministic order (server.h
 * sl_worker_server_order_*): the hold of order_hold.h between the push of
 * a deterministic lease's batch and its rank's queue. A held batch counts
 * as outstanding (the server is not done while one waits for its base)
 * and keeps its budget bytes pinned (--memory-limit bounds the hold). */
#include <inttypes.h>

#include "dpp/worker/server/order_hold.h"
#include "dpp/worker/server/server_internal.h"

/* The longest a batch of the deterministic order waits for room in the
 * rank queues: order_full's rule never holds back a rank's next batch
 * that this worker's hold knows of; the bound covers one it does not know
 * yet (a split leased again whose reader is itself held up behind the
 * waiting batches), at the cost of one batch a second per transform
 * thread past max_queued (the memory limit still bounds them). */
#define ORDER_ROOM_WAIT_MS 1000

/* Free a batch that never reached a queue: its bytes released, its lease
 * retired unacknowledged, and no longer outstanding when it was held. */
static void discard(struct sl_worker_server *s, sl_worker_server_item_t *it, bool held)
    SL_EXCLUDES(s->mu)
{
    sl_mutex_lock(&s->mu);
    if (held) s->outstanding--;
    if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
    dpp_server_retire(s, it, false);
    pthread_cond_broadcast(&s->cv);
    sl_mutex_unlock(&s->mu);
    dpp_server_frame_free(s, it->frame, it->len);
    if (it->record_ms) sl_free(s->a, it->record_ms, (size_t)it->num_record_ms * sizeof(int64_t));
}

/* Queue every batch whose turn came, in g order (under order_mu, which
 * keeps two threads' releases from interleaving in a rank's queue).
 * @return the first failure; the batches after it are queued all the same. */
static sl_err_t release(struct sl_worker_server *s, sl_error_t *err) SL_REQUIRES(s->order_mu)
{
    sl_err_t first = SL_OK;
    sl_worker_server_item_t it;
    while (s->order && sl_worker_order_hold_pop(s->order, &it)) {
        sl_error_t e = {0};
        /* push_now counts it outstanding before this drops the hold's count */
        sl_err_t rc = dpp_server_push_now(s, &it, &e);
        sl_mutex_lock(&s->mu);
        s->outstanding--;
        pthread_cond_broadcast(&s->cv);
        sl_mutex_unlock(&s->mu);
        if (rc && !first) {
            first = rc;
            if (err) *err = e;
        }
    }
    return first;
}

sl_err_t dpp_server_order_put(struct sl_worker_server *s, const sl_worker_server_item_t *item,
                              sl_error_t *err)
{
    sl_mutex_lock(&s->order_mu);
    if (!s->order || !sl_worker_order_hold_has(s->order, item->lease.handle)) {
        /* dropped (revoked) while the batch was encoded: gone as its held
         * ones went */
        sl_mutex_unlock(&s->order_mu);
        sl_worker_server_item_t it = *item;
        bool live = s->o.lease_live && s->o.lease_live(s->o.lease_ctx, it.lease.handle);
        discard(s, &it, false);
        /* a live lease never begun here is the caller's bug, not a revocation */
        return live ? sl_error_set(err, SL_ERR_NOT_FOUND,
                                   "server: a batch of split %" PRIu32
                                   " in the deterministic order, whose lease was not begun",
                                   it.lease.split)
                    : SL_OK;
    }
    sl_err_t rc = sl_worker_order_hold_put(s->order, item, err);
    if (rc) {
        sl_mutex_unlock(&s->order_mu);
        sl_worker_server_item_t it = *item;
        discard(s, &it, false);
        return sl_error_prefix(err, "server: ");
    }
    sl_mutex_lock(&s->mu);
    s->outstanding++;
    sl_mutex_unlock(&s->mu);
    rc = release(s, err);
    sl_mutex_unlock(&s->order_mu);
    return rc;
}

void dpp_server_order_free(struct sl_worker_server *s)
{
    sl_mutex_lock(&s->order_mu);
    sl_worker_server_item_t it;
    while (s->order && sl_worker_order_hold_take_any(s->order, &it))
        discard(s, &it, true);
    sl_worker_order_hold_destroy(s->order);
    s->order = NULL;
    sl_mutex_unlock(&s->order_mu);
}

sl_err_t sl_worker_server_order_begin(sl_worker_server_t *s, void *lease, uint32_t split,
                                      const sl_dpp_row_range_t *todo, uint32_t num_todo,
                                      uint32_t ranks, uint64_t base_plus_one, sl_error_t *err)
{
    if (ranks == 0 || ranks > s->o.max_ranks)
        return sl_error_set(err, SL_ERR_INVALID,
                            "server: a deterministic lease of split %" PRIu32 " for %" PRIu32
                            " ranks (1 to %" PRIu32 ")",
                            split, ranks, s->o.max_ranks);
    sl_mutex_lock(&s->order_mu);
    sl_err_t rc = SL_OK;
    if (s->order && ranks != s->order_ranks && sl_worker_order_hold_leases(s->order) == 0) {
        /* the job resumed (or resubmitted) with another world size while
         * this worker stayed: nothing of the old one's is held */
        sl_worker_order_hold_destroy(s->order);
        s->order = NULL;
    }
    if (!s->order) {
        s->order = sl_worker_order_hold_new(s->a, ranks);
        s->order_ranks = ranks;
        if (!s->order) rc = sl_error_set(err, SL_ERR_NOMEM, "server: out of memory");
    } else if (ranks != s->order_ranks) {
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "server: a deterministic lease of split %" PRIu32 " for %" PRIu32
                          " ranks, after leases for %" PRIu32,
                          split, ranks, s->order_ranks);
    }
    if (!rc)
        rc = sl_worker_order_hold_begin(s->order, lease, split, todo, num_todo, base_plus_one, err);
    sl_mutex_unlock(&s->order_mu);
    return rc;
}

sl_err_t sl_worker_server_order_skip(sl_worker_server_t *s, void *lease,
                                     const sl_dpp_row_range_t *skip, uint32_t num_skip,
                                     sl_error_t *err)
{
    sl_mutex_lock(&s->order_mu);
    sl_err_t rc =
        s->order ? sl_worker_order_hold_skip(s->order, lease, skip, num_skip, err)
                 : sl_error_set(err, SL_ERR_NOT_FOUND, "server: skip rows of a lease never begun");
    sl_mutex_unlock(&s->order_mu);
    return rc;
}

sl_err_t sl_worker_server_order_cut(sl_worker_server_t *s, void *lease, uint64_t from_row,
                                    uint64_t to_row, bool *keep, sl_error_t *err)
{
    sl_mutex_lock(&s->order_mu);
    sl_err_t rc = s->order ? sl_worker_order_hold_cut(s->order, lease, from_row, to_row, keep, err)
                           : sl_error_set(err, SL_ERR_NOT_FOUND, "server: no order hold");
    sl_mutex_unlock(&s->order_mu);
    return rc;
}

sl_err_t sl_worker_server_order_base(sl_worker_server_t *s, void *lease, uint64_t base,
                                     sl_error_t *err)
{
    sl_mutex_lock(&s->order_mu);
    sl_err_t rc = s->order ? sl_worker_order_hold_set_base(s->order, lease, base, err)
                           : sl_error_set(err, SL_ERR_NOT_FOUND, "server: no order hold");
    if (!rc) rc = release(s, err);
    sl_mutex_unlock(&s->order_mu);
    return rc;
}

sl_err_t sl_worker_server_order_end(sl_worker_server_t *s, void *lease, uint64_t *batches,
                                    sl_error_t *err)
{
    sl_mutex_lock(&s->order_mu);
    sl_err_t rc = s->order ? sl_worker_order_hold_end(s->order, lease, batches, err)
                           : sl_error_set(err, SL_ERR_NOT_FOUND, "server: no order hold");
    if (!rc) rc = release(s, err);
    sl_mutex_unlock(&s->order_mu);
    return rc;
}

void sl_worker_server_order_drop(sl_worker_server_t *s, void *lease)
{
    sl_mutex_lock(&s->order_mu);
    sl_worker_server_item_t it;
    while (s->order && sl_worker_order_hold_take(s->order, lease, &it))
        discard(s, &it, true);
    /* a dropped lease no longer holds back the batches of later ones */
    release(s, NULL);
    sl_mutex_unlock(&s->order_mu);
}

/* May a batch of a deterministic lease wait for room (under order_mu and
 * mu)? Only when the rank queues hold max_queued batches or more, every
 * rank's queue holds one, and every queued batch has a lower g than any
 * batch still to come here from a lease of known base (those of unknown
 * base come after every counted split, so after every queued batch). Then
 * no batch this worker makes next is any rank's next one: that rank's
 * queue holds a lower g not yet handed out, and a rank's next is at most
 * its lowest unsent g. So waiting never holds back the batch a trainer
 * (and through its window every other rank's queue) waits for, nor a
 * held batch's release: held ones are not counted, and a lower g to come
 * (a split leased again) lifts the wait. */
static bool order_full(struct sl_worker_server *s) SL_REQUIRES(s->order_mu) SL_REQUIRES(s->mu)
{
    uint32_t ranks = s->order ? s->order_ranks : 0;
    uint64_t g0 = 0, total = 0;
    bool any = s->order && sl_worker_order_hold_next_g(s->order, &g0);
    for (uint32_t r = 0; r < ranks; r++) {
        sl_worker_queue_t *q = dpp_server_rank_queue(s, r + 1, false);
        sl_worker_msg_t m;
        /* the tail is the rank's highest g (its queue is in g order) */
        if (!q || !sl_worker_queue_peek_tail(q, &m)) return false;
        const sl_worker_server_item_t *it = m.ptr;
        if (any && it->lease.order_g_plus_one > g0) return false;
        total += sl_worker_queue_len(q);
    }
    return ranks > 0 && total >= s->o.max_queued;
}

sl_err_t sl_worker_server_wait_room_ordered(sl_worker_server_t *s)
{
    if (!s->o.max_queued) return SL_OK;
    uint64_t end = sl_clock_ns() + (uint64_t)ORDER_ROOM_WAIT_MS * 1000000ull;
    for (;;) {
        sl_mutex_lock(&s->order_mu);
        sl_mutex_lock(&s->mu);
        bool closed = s->stopping || s->waits_ended || s->fail_code;
        bool full = !closed && order_full(s);
        /* mu is enough to wait on; a release needs order_mu */
        sl_mutex_unlock(&s->order_mu);
        if (!full || sl_clock_ns() >= end) {
            sl_mutex_unlock(&s->mu);
            return closed ? SL_ERR_CLOSED : SL_OK;
        }
        /* woken when a sender takes a batch (or a stop); the hold's next g
         * moves under order_mu alone, so look again every 20 ms */
        sl_clock_cond_wait_ms(&s->cv, &s->mu, 20);
        sl_mutex_unlock(&s->mu);
    }
}

uint32_t sl_worker_server_order_queued(sl_worker_server_t *s, uint64_t *queued, uint32_t cap)
{
    sl_mutex_lock(&s->order_mu);
    uint32_t ranks = s->order ? s->order_ranks : 0;
    sl_mutex_unlock(&s->order_mu);
    sl_mutex_lock(&s->mu);
    for (uint32_t r = 0; r < ranks && r < cap; r++) {
        sl_worker_queue_t *q = dpp_server_rank_queue(s, r + 1, false);
        queued[r] = q ? sl_worker_queue_len(q) : 0;
    }
    sl_mutex_unlock(&s->mu);
    return ranks;
}

void sl_worker_server_order_held(sl_worker_server_t *s, uint64_t *bytes, uint64_t *batches)
{
    sl_mutex_lock(&s->order_mu);
    *bytes = s->order ? sl_worker_order_hold_bytes(s->order) : 0;
    *batches = s->order ? sl_worker_order_hold_count(s->order) : 0;
    sl_mutex_unlock(&s->order_mu);
}

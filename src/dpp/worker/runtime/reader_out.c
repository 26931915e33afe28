/* The reader thread's batches out (reader_internal.h): the batcher's
 * batches handed to the transform threads, accounted in the memory
 * budget, and the fused path's batches made on the reader thread (or its
 * lane) and handed straight to the server; whether a job takes the fused
 * path is decided here, on its first stripe. */
#include <stdio.h>

#include "common/err.h"
#include "common/mem.h"
#include "dpp/worker/runtime/reader_internal.h"
#include "sluice/wire.h"

/* Batcher output, on the reader thread: account the batch (its arena,
 * taken over from the batcher's share where it was accounted there, plus
 * its encoded size: room for the frame the transform thread will make, so
 * that it rarely needs more) and hand it, with the lease part of its
 * origin, to the transform threads. */
sl_err_t dpp_reader_to_transform(void *ctx, sl_batch_t *batch,
                                 const sl_worker_lease_origin_t *lease, sl_error_t *err)
{
    dpp_reader_t *rd = ctx;
    sl_worker_t *w = rd->w;
    if (lease && lease->ordered) {
        /* the hold numbers it; a batch whose rows were committed under an
         * earlier lease of the split is dropped before it is encoded */
        bool keep = false;
        sl_err_t rc = sl_worker_server_order_cut(w->server, lease->handle, lease->from_row,
                                                 lease->to_row, &keep, err);
        /* revoked, its hold dropped: its batches go nowhere */
        if (rc == SL_ERR_NOT_FOUND && w->source.lease_live &&
            !w->source.lease_live(w->source.ctx, lease->handle))
            rc = SL_OK;
        if (rc || !keep) {
            uint64_t arena = sl_arena_footprint(batch->arena);
            uint64_t moved = arena < rd->batcher_held ? arena : rd->batcher_held;
            rd->batcher_held -= moved;
            sl_worker_budget_release(w->budget, moved);
            sl_batch_destroy(batch);
            return rc;
        }
    }
    dpp_worker_batch_t *wb = sl_alloc(w->a, sizeof *wb);
    if (!wb) {
        sl_batch_destroy(batch);
        return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    }
    *wb = (dpp_worker_batch_t){.batch = batch, .cached = rd->cached, .cw = rd->cw};
    if (rd->cw) dpp_cache_writer_ref(rd->cw);
    if (lease) {
        wb->lease = *lease;
        if (w->source.lease_made) w->source.lease_made(w->source.ctx, lease->handle);
    }
    sl_worker_msg_t m = {.ptr = wb};
    uint64_t arena = sl_arena_footprint(batch->arena);
    uint64_t moved = arena < rd->batcher_held ? arena : rd->batcher_held;
    rd->batcher_held -= moved;
    uint64_t more = arena - moved + (uint64_t)sl_wire_encoded_size(batch);
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    char what[64];
    snprintf(what, sizeof what, "a batch of %u rows", batch->batch_size);
    sl_err_t rc =
        dpp_worker_budget_take(w, more, rd->stripe_held + rd->batcher_held + moved, what, err);
    m.bytes = rc == SL_OK ? moved + more : moved;
    if (rc != SL_OK) {
        dpp_worker_drop_msg(w, &m);
        return rc;
    }
    sl_worker_budget_idle(w->budget, true); /* a full queue: waiting for a transform thread */
    rc = sl_worker_queue_push(w->work, &m, -1);
    sl_worker_budget_idle(w->budget, false);
    rd->handoff_ns += now_ns(CLOCK_MONOTONIC) - t0; /* memory or a full queue: back-pressure */
    if (rc != SL_OK) {
        dpp_worker_drop_msg(w, &m);
        return sl_error_set(err, rc, "worker stopping");
    }
    return SL_OK;
}

/* Direct batches (sl_worker_batcher_set_direct), on the reader thread:
 * made by the fused path and handed straight to the server. */
static sl_err_t to_server(void *ctx, const sl_worker_direct_t *d, sl_error_t *err)
{
    dpp_reader_t *rd = ctx;
    if (rd->lane) { /* made by the lane once the stripe is batched: counted as made now */
        sl_worker_t *w = rd->w;
        if (d->lease && w->source.lease_made) w->source.lease_made(w->source.ctx, d->lease->handle);
        sl_err_t rc = dpp_lane_add_direct(rd->lane, rd->fused, d, err);
        if (rc != SL_OK) dpp_worker_retire(w, d->lease ? d->lease->handle : NULL);
        return rc;
    }
    uint64_t waited = 0, t0 = now_ns(CLOCK_MONOTONIC);
    sl_err_t rc = dpp_worker_fused_batch(rd->w, rd->fused, d, rd->stripe_held + rd->batcher_held,
                                         false, &waited, err);
    rd->handoff_ns += waited; /* room at the server, memory: back-pressure */
    rd->fused_ns += now_ns(CLOCK_MONOTONIC) - t0 - waited; /* counted as encode */
    return rc;
}

/* Names of n columns, all present? */
static bool all_named(const char *const *names, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!names || !names[i]) return false;
    return true;
}

/* Fused batches go straight to the server, past the autocache's writer:
 * while a unit's batches are written to a cache file (rd->cw), every
 * batch is built and transformed on the transform threads. */
void dpp_reader_fused_direct(dpp_reader_t *rd)
{
    bool on = rd->fused && !rd->cw && !rd->ordered;
    sl_worker_batcher_set_direct(rd->b, on ? to_server : NULL, on ? rd : NULL);
}

/* Use the fused path for rows like these? Decided on the first stripe of
 * the job (the batcher keeps every later stripe to its shape): only when
 * the worker deduplicates no groups itself, every column is named, and
 * the plan's transforms fuse (sl_pipeline_fused_new). */
sl_err_t dpp_reader_decide_fused(dpp_reader_t *rd, const sl_batch_t *rows, sl_error_t *err)
{
    if (rd->fused_decided) return SL_OK;
    rd->fused_decided = true;
    sl_worker_t *w = rd->w;
    if (w->num_groups || w->o.no_fused || !all_named(rows->sparse.keys, rows->sparse.num_keys) ||
        !all_named(rows->dense.names, rows->dense.cols) ||
        !all_named(rows->labels.names, rows->labels.cols))
        return SL_OK;
    sl_err_t rc = sl_pipeline_fused_new(w->plan, rows, &rd->fused, err);
    dpp_reader_fused_direct(rd);
    return rc;
}

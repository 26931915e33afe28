/* Where a worker's rows come from (source.h): the table split source, and
 * in master mode the reading of a lease's todo rows into batches that are
 * each one row range of one split. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dpp/worker/worker_internal.h"

/* ---- local split source ---- */

typedef struct local_source {
    const sl_wh_splits_t *splits;
    const sl_allocator_t *a;
    uint32_t epochs, epoch, next;
    bool shuffle;
    uint64_t seed;
    uint32_t *order; /* [splits->count] order of this epoch */
} local_source_t;

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void local_order(local_source_t *s)
{
    uint32_t n = s->splits->count;
    for (uint32_t i = 0; i < n; i++)
        s->order[i] = i;
    if (!s->shuffle) return;
    uint64_t st = mix64(s->seed ^ mix64(0x5eed0000ull + s->epoch));
    for (uint32_t i = n; i > 1; i--) {
        st = mix64(st);
        uint32_t j = (uint32_t)(st % i);
        uint32_t t = s->order[i - 1];
        s->order[i - 1] = s->order[j];
        s->order[j] = t;
    }
}

static sl_err_t local_next(void *ctx, sl_worker_work_t *out, sl_error_t *err)
{
    (void)err;
    local_source_t *s = ctx;
    uint32_t n = s->splits->count;
    if (n == 0) return SL_ERR_CLOSED;
    if (s->next == n) {
        s->epoch++;
        s->next = 0;
        if (s->epoch < s->epochs) local_order(s);
    }
    if (s->epoch >= s->epochs) return SL_ERR_CLOSED;
    uint32_t i = s->order[s->next++];
    *out = (sl_worker_work_t){.split = &s->splits->items[i], .epoch = s->epoch, .split_id = i};
    return SL_OK;
}

static void local_destroy(void *ctx)
{
    local_source_t *s = ctx;
    if (!s) return;
    sl_free(s->a, s->order, (size_t)(s->splits->count ? s->splits->count : 1) * sizeof *s->order);
    sl_free(s->a, s, sizeof *s);
}

sl_err_t sl_worker_source_table_new(const sl_wh_splits_t *splits, uint32_t epochs, bool shuffle,
                                    uint64_t seed, const sl_allocator_t *a, sl_worker_source_t *out,
                                    sl_error_t *err)
{
    local_source_t *s = sl_calloc(a, 1, sizeof *s);
    if (!s) return sl_error_set(err, SL_ERR_NOMEM, "split source: out of memory");
    s->splits = splits;
    s->a = a;
    s->epochs = epochs;
    s->shuffle = shuffle;
    s->seed = seed;
    s->order = sl_calloc(a, splits->count ? splits->count : 1, sizeof *s->order);
    if (!s->order) {
        sl_free(a, s, sizeof *s);
        return sl_error_set(err, SL_ERR_NOMEM, "split source: out of memory");
    }
    local_order(s);
    *out = (sl_worker_source_t){
        .next = local_next, .done = NULL, .destroy = local_destroy, .ctx = s};
    return SL_OK;
}

/* ---- reading a lease (master mode) ---- */

void dpp_worker_scratch_free(sl_worker_t *w, rscratch_t *sc)
{
    if (sc->selected) sl_free(w->a, sc->selected, (size_t)sc->cap * sizeof *sc->selected);
    if (sc->weights) sl_free(w->a, sc->weights, (size_t)sc->cap * sizeof *sc->weights);
    if (sc->empty) sl_free(w->a, sc->empty, (size_t)sc->empty_cap * sizeof *sc->empty);
    *sc = (rscratch_t){0};
}

static bool scratch_rows(sl_worker_t *w, rscratch_t *sc, uint32_t n)
{
    if (n <= sc->cap) return true;
    if (sc->selected) sl_free(w->a, sc->selected, (size_t)sc->cap * sizeof *sc->selected);
    if (sc->weights) sl_free(w->a, sc->weights, (size_t)sc->cap * sizeof *sc->weights);
    sc->selected = sl_alloc(w->a, (size_t)n * sizeof *sc->selected);
    sc->weights = sl_alloc(w->a, (size_t)n * sizeof *sc->weights);
    sc->cap = n;
    return sc->selected && sc->weights;
}

/* Rows [from, to) produced no batch: remember them for SPLIT_READ. */
static sl_err_t add_empty(sl_worker_t *w, rscratch_t *sc, uint64_t from, uint64_t to,
                          sl_error_t *err)
{
    if (from >= to) return SL_OK;
    if (sc->num_empty && sc->empty[sc->num_empty - 1].to_row == from) {
        sc->empty[sc->num_empty - 1].to_row = to;
        return SL_OK;
    }
    if (sc->num_empty == sc->empty_cap) {
        uint32_t cap = sc->empty_cap ? 2 * sc->empty_cap : 8;
        sl_dpp_row_range_t *e = sl_alloc(w->a, (size_t)cap * sizeof *e);
        if (!e) return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
        if (sc->num_empty) memcpy(e, sc->empty, sc->num_empty * sizeof *e);
        if (sc->empty) sl_free(w->a, sc->empty, (size_t)sc->empty_cap * sizeof *sc->empty);
        sc->empty = e;
        sc->empty_cap = cap;
    }
    sc->empty[sc->num_empty++] = (sl_dpp_row_range_t){from, to};
    return SL_OK;
}

/* Rows in the batcher that are in no batch yet. */
static uint64_t batcher_fill(const sl_worker_batcher_t *b)
{
    sl_worker_batcher_stats_t bs;
    sl_worker_batcher_stats(b, &bs);
    return bs.rows_in - bs.rows_out - bs.rows_dropped - bs.rows_discarded;
}

/* The end of a todo range at row to: the batch being built ends there
 * (short; with drop_last dropped, its rows then empty). */
static sl_err_t end_range(sl_worker_t *w, sl_worker_batcher_t *b, rscratch_t *sc,
                            uint64_t *from, uint64_t to, sl_error_t *err)
{
    sl_err_t rc = SL_OK;
    if (batcher_fill(b) > 0) {
        sl_worker_batcher_stats_t before, after;
        sl_worker_batcher_stats(b, &before);
        w->tag.from_row = *from;
        w->tag.to_row = to;
        if ((rc = sl_worker_batcher_end_epoch(b, err))) return rc;
        sl_worker_batcher_stats(b, &after);
        if (after.rows_dropped != before.rows_dropped) rc = add_empty(w, sc, *from, to, err);
    } else {
        rc = add_empty(w, sc, *from, to, err);
    }
    *from = to;
    return rc;
}

/* Read the todo rows of a leased split: only the stripes they touch, and of
 * those only the kept rows inside the ranges, handed to the batcher so that
 * each batch covers one contiguous range (see worker.h). Stops early,
 * without error, when the lease stops being live. */
sl_err_t dpp_worker_read_lease(sl_worker_t *w, sl_worker_batcher_t *b, sl_wh_reader_t *r,
                           const sl_worker_work_t *wk, rscratch_t *sc, bool weigh, sl_error_t *err)
{
    const uint32_t bs = w->job->batch_size;
    const sl_dpp_row_range_t *todo = wk->todo;
    sl_err_t rc = SL_OK;
    sc->num_empty = 0;
    w->tag = (sl_worker_server_item_t){.lease = wk->lease,
                                       .split = (uint32_t)wk->split_id,
                                       .generation = wk->generation,
                                       .rank_plus_one = wk->rank_plus_one};
    for (uint32_t i = 0; i < wk->num_todo; i++)
        if (todo[i].from_row >= todo[i].to_row || todo[i].to_row > wk->split->num_rows ||
            (i && todo[i].from_row < todo[i - 1].to_row))
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "lease of split %" PRIu64 ": todo range %u [%" PRIu64 ", %" PRIu64
                                ") is empty, out of order or past the split's %" PRIu64 " rows",
                                wk->split_id, i, todo[i].from_row, todo[i].to_row,
                                wk->split->num_rows);
    uint32_t ti = 0;
    uint64_t from = wk->num_todo ? todo[0].from_row : 0; /* first row of the batch being built */
    uint64_t row = 0;                                     /* split row of the stripe's row 0 */
    for (uint32_t st = wk->split->stripe_begin; st < wk->split->stripe_end && ti < wk->num_todo;
         st++) {
        if (atomic_load(&w->stopping)) return SL_ERR_CLOSED;
        if (w->source.lease_live && !w->source.lease_live(w->source.ctx, wk->lease)) break;
        sc->stripe = (int32_t)st;
        sl_wh_stripe_info_t info;
        if ((rc = sl_wh_reader_stripe_info(r, st, &info)))
            return sl_error_set(err, rc, "%s: lease of split %" PRIu64 ": no stripe %u",
                                wk->split->path, wk->split_id, st);
        uint64_t end = row + info.rows;
        if (todo[ti].from_row >= end) { /* no todo row here: not even read */
            row = end;
            continue;
        }
        uint64_t t0 = now_ns(CLOCK_MONOTONIC);
        if ((rc = dpp_worker_reader_take(w, sc->est, "the next stripe", err))) return rc;
        uint64_t waited = now_ns(CLOCK_MONOTONIC) - t0;
        const sl_wh_rows_t *rows = NULL;
        if ((rc = sl_wh_reader_set_range(r, st, st + 1, err)) ||
            (rc = sl_wh_reader_next(r, &rows, err)) || !rows) {
            sl_worker_budget_release(w->budget, sc->est);
            if (!rc) rc = sl_error_set(err, SL_ERR_CORRUPT, "%s stripe %u: no rows",
                                       wk->split->path, st);
            return rc;
        }
        uint64_t sb = dpp_worker_rows_bytes(rows);
        if ((rc = dpp_worker_stripe_acct(w, sc->est, sb, rows->file, rows->stripe, err))) {
            sl_worker_budget_release(w->budget, w->stripe_held);
            w->stripe_held = 0;
            return rc;
        }
        sc->est = sb;
        uint64_t t1 = now_ns(CLOCK_MONOTONIC);
        uint32_t n = rows->batch.batch_size, kept = 0;
        uint64_t h0 = w->handoff_ns;
        if (n != info.rows)
            rc = sl_error_set(err, SL_ERR_CORRUPT, "%s stripe %u: %u rows, the footer says %u",
                              rows->file, rows->stripe, n, info.rows);
        else if (!scratch_rows(w, sc, n))
            rc = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
        else
            rc = sl_pipeline_plan_filter(w->plan, rows, sc->selected, sc->weights, &kept, err);
        uint32_t i = 0; /* into selected */
        while (rc == SL_OK && ti < wk->num_todo && todo[ti].from_row < end) {
            const sl_dpp_row_range_t *t = &todo[ti];
            uint64_t hi = t->to_row < end ? t->to_row : end;
            while (i < kept && row + sc->selected[i] < t->from_row)
                i++;
            uint32_t j = i;
            while (j < kept && row + sc->selected[j] < hi)
                j++;
            while (rc == SL_OK && i < j) { /* in chunks that end at batch boundaries */
                uint64_t fill = batcher_fill(b);
                if (fill == 0) /* a new batch: its row order from where it starts */
                    sl_worker_batcher_reseed(b, wk->epoch, (wk->split_id << 40) ^ from);
                uint32_t need = (uint32_t)(bs - fill);
                uint32_t m = j - i < need ? j - i : need;
                if (m == need) {
                    w->tag.from_row = from;
                    w->tag.to_row = row + sc->selected[i + m - 1] + 1;
                }
                sl_worker_rows_origin_t origin = {.epoch = wk->epoch,
                                               .split_id = wk->split_id,
                                               .row = row,
                                               .key_offsets = rows->key_offsets};
                rc = sl_worker_batcher_add(b, &rows->batch, sc->selected + i,
                                           weigh ? sc->weights + i : NULL, m, &origin, err);
                if (m == need) from = w->tag.to_row;
                i += m;
            }
            if (rc || t->to_row > end) break; /* the range goes on in the next stripe */
            rc = end_range(w, b, sc, &from, t->to_row, err);
            if (++ti < wk->num_todo) from = todo[ti].from_row;
        }
        if (rc == SL_OK) rc = dpp_worker_batcher_acct(w, b, err);
        w->stripe_held = 0;
        sl_worker_budget_release(w->budget, sb);
        dpp_worker_account_stripe(w, n, kept, t0, t1, waited, h0);
        if (rc) return rc;
        row = end;
    }
    if (ti < wk->num_todo && (!w->source.lease_live ||
                              w->source.lease_live(w->source.ctx, wk->lease)))
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "lease of split %" PRIu64 ": todo rows up to %" PRIu64
                            " but the split's stripes hold %" PRIu64 " rows",
                            wk->split_id, todo[wk->num_todo - 1].to_row, row);
    /* revoked mid-way: what the batcher holds goes out and is dropped unsent */
    if (batcher_fill(b) > 0) rc = sl_worker_batcher_end_epoch(b, err);
    if (rc == SL_OK) rc = dpp_worker_batcher_acct(w, b, err);
    return rc;
}

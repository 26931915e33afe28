/* The worker's reader thread (worker.h): one stripe loop for every split
 * source (source.h). It takes units of work from the source, opens each
 * split, reads the stripes that hold todo rows, filters them and hands the
 * kept todo rows to the batcher, which hands each batch to the transform
 * threads. Rows of a lease are batched by row range: the lease rides with
 * each batch (the lease part of its origin) from the batcher to the
 * server. The reader also keeps its share of the memory budget: the
 * stripe being read and the batcher's buffers. With --threads > 1 the
 * stripes are read by the stripe lanes instead (reader_lanes.c, lanes.c)
 * and batched here in the same order. Where the batches go (the
 * transform threads, or the server by the fused path) is reader_out.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/mem.h"
#include "dpp/worker/runtime/reader_internal.h"

/* ---- memory accounting ---- */

/* Every acquire is strict (the budget never passes the limit); a refusal
 * fails the worker with a message naming what did not fit. The reader's
 * own bytes include what its file's read-ahead holds (w->io_held); when
 * they are all that fills the budget, the read-ahead is dropped and the
 * acquire tried again: read-ahead never makes a worker fail. */
static sl_err_t reader_take(dpp_reader_t *rd, uint64_t bytes, const char *what, sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    sl_err_t rc = dpp_worker_budget_take(
        w, bytes, rd->stripe_held + rd->batcher_held + atomic_load(&w->io_held), what, err);
    /* with lanes, a free lane's reader may hold a fetch ahead no lane
     * reads now (the lanes count theirs as their own: lanes.c) */
    bool lanes = rc == SL_ERR_NOMEM && dpp_lanes_drop_ahead(rd->lanes);
    if (rc == SL_ERR_NOMEM && ((rd->r != NULL && atomic_load(&w->io_held) > 0) || lanes)) {
        if (rd->r != NULL) sl_wh_reader_drop_ahead(rd->r);
        rc = dpp_worker_budget_take(
            w, bytes, rd->stripe_held + rd->batcher_held + atomic_load(&w->io_held), what, err);
    }
    return rc;
}

/* The stripe read is sb bytes, rd->est of which were taken before reading
 * it: a larger stripe is accounted before any of its rows moves on
 * (waiting for room like anything else). */
static sl_err_t stripe_acct(dpp_reader_t *rd, uint64_t sb, const char *file, uint32_t stripe,
                            sl_error_t *err)
{
    rd->stripe_held = rd->est;
    if (sb > rd->est) {
        char what[320];
        snprintf(what, sizeof what, "%.250s stripe %u decoded", file, stripe);
        SL_FORWARD_IF_ERROR(reader_take(rd, sb - rd->est, what, err));
    } else {
        sl_worker_budget_release(rd->w->budget, rd->est - sb);
    }
    rd->stripe_held = sb;
    return SL_OK;
}

/* Bring batcher_held to the batcher's footprint now. */
static sl_err_t batcher_acct(dpp_reader_t *rd, sl_error_t *err)
{
    uint64_t fp = sl_worker_batcher_footprint(rd->b);
    if (fp > rd->batcher_held) {
        SL_FORWARD_IF_ERROR(reader_take(rd, fp - rd->batcher_held, "the batch being built", err));
    } else {
        sl_worker_budget_release(rd->w->budget, rd->batcher_held - fp);
    }
    rd->batcher_held = fp;
    return SL_OK;
}

/* Add one stripe's rows and stage times to the statistics: read from t0
 * to t1 (less waited, for memory), filter and batch from t1 to now (less
 * the time spent handing batches on since handoff_before). */
static void account_stripe(dpp_reader_t *rd, uint64_t rows, uint64_t kept, uint64_t bytes,
                           uint64_t t0, uint64_t t1, uint64_t waited, uint64_t handoff_before,
                           uint64_t fused_before)
{
    sl_worker_t *w = rd->w;
    uint64_t t2 = now_ns(CLOCK_MONOTONIC);
    sl_mutex_lock(&w->mu);
    w->st.stripes++;
    w->st.rows_read += rows;
    w->st.rows_kept += kept;
    w->st.source_bytes += bytes;
    w->st.read_ns += t1 - t0 - waited;
    /* Time spent handing batches on (blocked on the queue or the budget) is
     * back-pressure, not filtering. */
    uint64_t handoff = rd->handoff_ns - handoff_before;
    /* ... and making fused batches is encoding (dpp_worker_send counted it) */
    uint64_t fused = rd->fused_ns - fused_before;
    w->st.filter_ns += t2 - t1 - handoff - fused;
    w->st.backpressure_ns += waited + handoff;
    sl_mutex_unlock(&w->mu);
}

/* ---- scratch ---- */

static void scratch_free(dpp_reader_t *rd)
{
    const sl_allocator_t *a = rd->w->a;
    if (rd->selected) sl_free(a, rd->selected, (size_t)rd->cap * sizeof *rd->selected);
    if (rd->weights) sl_free(a, rd->weights, (size_t)rd->cap * sizeof *rd->weights);
    if (rd->empty) sl_free(a, rd->empty, (size_t)rd->empty_cap * sizeof *rd->empty);
    rd->selected = NULL;
    rd->weights = NULL;
    rd->empty = NULL;
    rd->cap = rd->num_empty = rd->empty_cap = 0;
}

/* Room for the selection of a stripe of n rows. */
static bool scratch_rows(dpp_reader_t *rd, uint32_t n)
{
    const sl_allocator_t *a = rd->w->a;
    if (n <= rd->cap) return true;
    if (rd->selected) sl_free(a, rd->selected, (size_t)rd->cap * sizeof *rd->selected);
    if (rd->weights) sl_free(a, rd->weights, (size_t)rd->cap * sizeof *rd->weights);
    rd->selected = sl_alloc(a, (size_t)n * sizeof *rd->selected);
    rd->weights = sl_alloc(a, (size_t)n * sizeof *rd->weights);
    rd->cap = n;
    return rd->selected && rd->weights;
}

/* Rows e produced no batch: remember them for done (SPLIT_READ). */
static sl_err_t add_empty(dpp_reader_t *rd, sl_dpp_row_range_t e, sl_error_t *err)
{
    if (e.from_row >= e.to_row) return SL_OK;
    if (rd->num_empty && rd->empty[rd->num_empty - 1].to_row == e.from_row) {
        rd->empty[rd->num_empty - 1].to_row = e.to_row;
        return SL_OK;
    }
    if (rd->num_empty == rd->empty_cap &&
        !SL_GROW(rd->w->a, rd->empty, rd->empty_cap, rd->num_empty + 1, 8))
        return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    rd->empty[rd->num_empty++] = e;
    return SL_OK;
}

/* ---- the stripe loop ---- */

/* The lease part of the origin of wk's batches (from_row, to_row: the
 * batcher's). */
static sl_worker_lease_origin_t lease_origin(const sl_worker_work_t *wk)
{
    return (sl_worker_lease_origin_t){.handle = wk->lease,
                                      .split = (uint32_t)wk->split_id,
                                      .generation = wk->generation,
                                      .rank_plus_one = wk->rank_plus_one,
                                      .ordered = wk->order_ranks > 0};
}

/* Close rd->r (if open), its read-ahead counted in the worker's stats. */
static void close_reader(dpp_reader_t *rd)
{
    dpp_worker_close_table_reader(rd->w, rd->r);
    rd->r = NULL;
}

/* Open the file of split sp on rd->r. Consecutive splits of one file
 * share the open reader: no footer parsing again, and its decode buffers
 * stay warm, unless the split was planned on another footer (the file was
 * replaced): then opening it again refuses it (sl_wh_reader_open_split). */
/* At most this many splits ahead are looked at: a run of longer splits
 * reaches a reader's next stripe sooner. */
#define AHEAD_PEEK_MAX 64

/* Is todo the whole split (one range [0, num_rows))? Only such a read
 * writes a cache file, or reads ahead from its first stripe. */
static bool whole_split(const sl_worker_work_t *wk)
{
    return wk->num_todo == 1 && wk->todo[0].from_row == 0 &&
           wk->todo[0].to_row == wk->split->num_rows;
}

uint32_t dpp_reader_ahead_end(const dpp_reader_t *rd, const sl_worker_work_t *wk, uint32_t want)
{
    const sl_worker_source_t *src = &rd->w->source;
    const sl_wh_split_t *sp = wk->split;
    /* a todo with gaps (a lease read again after a failure) may skip the
     * stripe a first fetch would take: none then */
    if (!whole_split(wk)) return sp->stripe_begin;
    uint32_t end = sp->stripe_end;
    for (uint32_t i = 0; end < want && src->peek && i < AHEAD_PEEK_MAX; i++) {
        const sl_wh_split_t *n = src->peek(src->ctx, i);
        if (n == NULL || n->stripe_begin != end || strcmp(n->path, sp->path) != 0 ||
            n->footer_checksum != sp->footer_checksum)
            break;
        end = n->stripe_end;
    }
    return end;
}

sl_err_t dpp_reader_open_split(dpp_reader_t *rd, const sl_wh_split_t *sp, sl_error_t *err)
{
    sl_err_t rc;
    if (rd->r && strcmp(rd->path, sp->path) == 0 &&
        (sp->footer_checksum == 0 || sp->footer_checksum == sl_wh_reader_footer_checksum(rd->r))) {
        rc = sl_wh_reader_set_range(rd->r, sp->stripe_begin, sp->stripe_end, err);
        if (rc != SL_OK) rd->from_read = true;
    } else {
        close_reader(rd);
        rc = sl_wh_reader_open_split(rd->w->table, sp, &rd->ro, &rd->r, err);
        if (rc != SL_OK) rd->from_read = true;
        if (rc == SL_OK && strlen(sp->path) < sizeof rd->path)
            snprintf(rd->path, sizeof rd->path, "%s", sp->path);
        else
            rd->path[0] = '\0'; /* too long to remember: reopened next time */
    }
    return rc;
}

dpp_unit_pos_t dpp_reader_unit_pos(const sl_worker_work_t *wk)
{
    return (dpp_unit_pos_t){.wk = wk, .lease = lease_origin(wk)};
}

/* Hand the kept todo rows of one stripe (split rows [row, end); kept of
 * its n rows, selected[kept] with weights) to the batcher. Under a lease
 * each todo range is a range of the batcher, so that every batch covers
 * one contiguous row range (see worker.h), and the rows that made no batch
 * gather in rd->empty. */
sl_err_t dpp_reader_batch_stripe(dpp_reader_t *rd, dpp_unit_pos_t *u, const sl_wh_rows_t *rows,
                                 const uint32_t *selected, const float *weights, uint32_t kept,
                                 uint64_t row, uint64_t end, sl_error_t *err)
{
    const sl_worker_work_t *wk = u->wk;
    const sl_dpp_row_range_t *todo = wk->todo;
    uint32_t n = rows->batch.batch_size;
    sl_err_t rc = dpp_reader_decide_fused(rd, &rows->batch, err);
    sl_worker_rows_origin_t origin = {.epoch = wk->epoch,
                                      .split_id = wk->split_id,
                                      .row = row,
                                      .key_offsets = rows->key_offsets,
                                      .block_offsets = rows->block_offsets};
    uint32_t i = 0; /* into selected */
    while (rc == SL_OK && u->ti < wk->num_todo && todo[u->ti].from_row < end) {
        const sl_dpp_row_range_t *t = &todo[u->ti];
        uint64_t hi = t->to_row < end ? t->to_row : end;
        if (wk->lease && !u->in_range) {
            u->lease.from_row = t->from_row;
            if ((rc = sl_worker_batcher_begin_range(rd->b, &u->lease, wk->epoch, err))) break;
            u->in_range = true;
        }
        while (i < kept && row + selected[i] < t->from_row)
            i++;
        uint32_t j = i;
        if (hi == end) /* the range runs to the stripe's end: every kept row from i */
            j = kept;
        while (j < kept && row + selected[j] < hi)
            j++;
        if (j > i) {
            /* every row of the stripe kept: the identity selection gathers in whole runs */
            const uint32_t *sel = i == 0 && j == n ? NULL : selected + i;
            rc = sl_worker_batcher_add(rd->b, &rows->batch, sel, rd->weigh ? weights + i : NULL,
                                       j - i, &origin, err);
        }
        i = j;
        if (rc || t->to_row > end) break; /* the range goes on in the next stripe */
        if (u->in_range) {
            sl_dpp_row_range_t e;
            u->in_range = false;
            if ((rc = sl_worker_batcher_end_range(rd->b, t->to_row, &e, err)) ||
                (rc = add_empty(rd, e, err)))
                break;
        }
        u->ti++;
    }
    if (rc == SL_OK) rc = batcher_acct(rd, err);
    return rc;
}

/* The unit's stripes are through (up to split row row): every todo range
 * must have been reached unless the lease stopped being live, and a range
 * cut short by a revocation goes out (its batches are dropped unsent). */
sl_err_t dpp_reader_unit_end(dpp_reader_t *rd, dpp_unit_pos_t *u, uint64_t row, sl_error_t *err)
{
    const sl_worker_work_t *wk = u->wk;
    sl_err_t rc = SL_OK;
    if (u->ti < wk->num_todo && dpp_reader_work_live(rd->w, wk))
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "%s %" PRIu64 ": todo rows up to %" PRIu64
                            " but the split's stripes hold %" PRIu64 " rows",
                            wk->lease ? "lease of split" : "split", wk->split_id,
                            wk->todo[wk->num_todo - 1].to_row, row);
    if (u->in_range) {
        sl_dpp_row_range_t e;
        u->in_range = false;
        rc = sl_worker_batcher_end_range(rd->b, row, &e, err);
    }
    if (rc == SL_OK) rc = batcher_acct(rd, err);
    return rc;
}

/* Read the todo rows of wk from rd->r (open on its split) on this thread:
 * only the stripes that hold todo rows, and of those only the kept rows
 * inside the ranges, handed to the batcher (batch_stripe); the loop stops
 * early, without error, when the lease stops being live. t0: when work on
 * the split began (opening it counts as reading its first stripe). */
static sl_err_t read_split(dpp_reader_t *rd, const sl_worker_work_t *wk, uint64_t t0,
                           sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    const sl_wh_split_t *sp = wk->split;
    const sl_dpp_row_range_t *todo = wk->todo;
    rd->num_empty = 0;
    sl_err_t rc = dpp_reader_check_todo(wk, err);
    if (rc) return rc;
    dpp_unit_pos_t u = dpp_reader_unit_pos(wk);
    uint64_t row = 0; /* split row of the stripe's row 0 */
    for (uint32_t st = sp->stripe_begin; st < sp->stripe_end && u.ti < wk->num_todo; st++) {
        if (atomic_load(&w->stopping)) return SL_ERR_CLOSED;
        if (!dpp_reader_work_live(w, wk)) break;
        rd->stripe = (int32_t)st;
        sl_wh_stripe_info_t info;
        if ((rc = sl_wh_reader_stripe_info(rd->r, st, &info))) {
            rd->from_read = true;
            return sl_error_set(err, rc, "%s: %s %" PRIu64 ": no stripe %u", sp->path,
                                wk->lease ? "lease of split" : "split", wk->split_id, st);
        }
        uint64_t end = row + info.rows;
        if (todo[u.ti].from_row >= end) { /* no todo row here: not even read */
            row = end;
            continue;
        }
        uint64_t tw = now_ns(CLOCK_MONOTONIC);
        if ((rc = reader_take(rd, rd->est, "the next stripe", err))) return rc;
        uint64_t waited = now_ns(CLOCK_MONOTONIC) - tw;
        const sl_wh_rows_t *rows = NULL;
        if ((rc = sl_wh_reader_read_stripe(rd->r, st, &rows, err))) {
            sl_worker_budget_release(w->budget, rd->est);
            rd->from_read = true;
            return rc;
        }
        uint64_t sb = dpp_batch_bytes(&rows->batch);
        if ((rc = stripe_acct(rd, sb, rows->file, rows->stripe, err))) {
            sl_worker_budget_release(w->budget, rd->stripe_held);
            rd->stripe_held = 0;
            return rc;
        }
        rd->est = sb;
        uint64_t t1 = now_ns(CLOCK_MONOTONIC);
        uint32_t n = rows->batch.batch_size, kept = 0;
        uint64_t h0 = rd->handoff_ns, f0 = rd->fused_ns;
        if (n != info.rows)
            rc = sl_error_set(err, SL_ERR_CORRUPT, "%s stripe %u: %u rows, the footer says %u",
                              rows->file, rows->stripe, n, info.rows);
        else if (!scratch_rows(rd, n))
            rc = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
        else
            rc = sl_pipeline_plan_filter(w->plan, rows, rd->selected, rd->weights, &kept, err);
        if (rc == SL_OK)
            rc = dpp_reader_batch_stripe(rd, &u, rows, rd->selected, rd->weights, kept, row, end,
                                         err);
        rd->stripe_held = 0;
        sl_worker_budget_release(w->budget, sb);
        account_stripe(rd, n, kept, sb, t0, t1, waited, h0, f0);
        if (rc) return rc;
        row = end;
        t0 = now_ns(CLOCK_MONOTONIC);
    }
    return dpp_reader_unit_end(rd, &u, row, err);
}

/* ---- rows a source reads itself (source.h, read) ---- */

typedef struct own_rows {
    dpp_reader_t *rd;
    const sl_worker_work_t *wk;
    uint64_t t0; /* when work on this stripe began */
    bool dead;   /* the lease stopped being live: the read was cut short */
} own_rows_t;

/* One stripe of rows from the source, covering rows [first, end) of the
 * split: accounted in the budget while it is filtered and batched, like a
 * table stripe, then released. The source cut it at the batch size or
 * after its linger time: it is one batch and goes out now, short or not,
 * so that a record waits at most the linger time (a stream has no end to
 * flush at). Under a lease that batch covers exactly [first, end), the
 * gaps between its records included, and a stripe that keeps no row is
 * an empty range for SPLIT_READ. A stripe the source offers (owned) whose
 * rows all pass becomes that batch without a copy when the batcher can
 * take it (sl_worker_batcher_add_owned). */
static sl_err_t own_stripe(void *ctx, const sl_wh_rows_t *rows, uint64_t first, uint64_t end,
                           sl_arena_t **owned, sl_error_t *err)
{
    own_rows_t *o = ctx;
    dpp_reader_t *rd = o->rd;
    sl_worker_t *w = rd->w;
    const sl_worker_work_t *wk = o->wk;
    uint32_t n = rows->batch.batch_size, kept = 0;
    if (atomic_load(&w->stopping)) return SL_ERR_CLOSED;
    if (wk->lease && !dpp_reader_work_live(w, wk)) {
        o->dead = true;
        return SL_ERR_CLOSED;
    }
    if (n == 0) /* gaps and bad records only: nothing to batch */
        return wk->lease ? add_empty(rd, (sl_dpp_row_range_t){first, end}, err) : SL_OK;
    uint64_t sb = dpp_batch_bytes(&rows->batch), tw = now_ns(CLOCK_MONOTONIC);
    SL_FORWARD_IF_ERROR(reader_take(rd, sb, "the records being batched", err));
    rd->stripe_held = sb;
    uint64_t waited = now_ns(CLOCK_MONOTONIC) - tw, t1 = now_ns(CLOCK_MONOTONIC),
             h0 = rd->handoff_ns, f0 = rd->fused_ns;
    /* With one transform thread a whole batch goes the fused path, as a
     * table's: encoded here with its record times (Kafka's), no batch
     * made. With more, it is taken (owned) and transformed and encoded on
     * the transform threads, in parallel with this one's reading. */
    sl_err_t rc = w->threads <= 1 ? dpp_reader_decide_fused(rd, &rows->batch, err) : SL_OK;
    if (rc == SL_OK && !scratch_rows(rd, n))
        rc = sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    else if (rc == SL_OK)
        rc = sl_pipeline_plan_filter(w->plan, rows, rd->selected, rd->weights, &kept, err);
    sl_worker_rows_origin_t origin = {.epoch = wk->epoch,
                                      .split_id = wk->split_id,
                                      .row = first,
                                      .key_offsets = rows->key_offsets,
                                      .end_row = wk->lease ? end : 0};
    sl_worker_lease_origin_t lease = lease_origin(wk);
    lease.from_row = first;
    if (rc == SL_OK && wk->lease) rc = sl_worker_batcher_begin_range(rd->b, &lease, wk->epoch, err);
    if (rc == SL_OK && kept)
        rc = sl_worker_batcher_add_owned(rd->b, &rows->batch, kept == n ? NULL : rd->selected,
                                         rd->weigh ? rd->weights : NULL, kept, &origin, owned, err);
    if (rc == SL_OK && wk->lease) {
        sl_dpp_row_range_t e;
        rc = sl_worker_batcher_end_range(rd->b, end, &e, err);
        if (rc == SL_OK) rc = add_empty(rd, e, err);
    } else if (rc == SL_OK && kept) {
        rc = sl_worker_batcher_end_epoch(rd->b, err);
    }
    if (rc == SL_OK) rc = batcher_acct(rd, err);
    rd->stripe_held = 0;
    sl_worker_budget_release(w->budget, sb);
    account_stripe(rd, n, kept, sb, o->t0, t1, waited, h0, f0);
    o->t0 = now_ns(CLOCK_MONOTONIC);
    return rc;
}

static sl_err_t read_own(dpp_reader_t *rd, const sl_worker_work_t *wk, uint64_t t0, sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    rd->num_empty = 0;
    own_rows_t o = {.rd = rd, .wk = wk, .t0 = t0};
    sl_err_t rc = w->source.read(w->source.ctx, wk, own_stripe, &o, err);
    if (rc == SL_ERR_CLOSED && o.dead && !atomic_load(&w->stopping))
        rc = SL_OK; /* revoked mid-way: done follows, and the lease is forgotten unreported */
    if (rc == SL_OK) rc = batcher_acct(rd, err);
    return rc;
}

/* ---- the autocache (docs/DESIGN.md "Autocache") ---- */

/* Compute wk's todo from its table split; when cache_file is set, its
 * batches also go to that file once transformed (committed only when the
 * whole todo was read with the lease live). */
static sl_err_t compute_split(dpp_reader_t *rd, const sl_worker_work_t *wk, const char *cache_file,
                              uint64_t t0, sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    rd->cw = cache_file ? dpp_cache_writer_new(w, cache_file) : NULL;
    dpp_reader_fused_direct(rd);
    sl_err_t rc = dpp_reader_open_split(rd, wk->split, err);
    /* one thread reads every stripe: s + 1 is read after the first, s */
    if (rc == SL_OK)
        sl_wh_reader_set_ahead_end(rd->r,
                                   dpp_reader_ahead_end(rd, wk, wk->split->stripe_begin + 2));
    if (rc == SL_OK) rc = read_split(rd, wk, t0, err);
    if (rd->cw) {
        if (rc != SL_OK || !dpp_reader_work_live(w, wk))
            dpp_cache_writer_fail(rd->cw, "the read was cut short");
        dpp_cache_writer_unref(rd->cw);
        rd->cw = NULL;
        dpp_reader_fused_direct(rd);
    }
    return rc;
}

/* A table split under the autocache's modes: READ serves what the cache
 * file holds of the todo and computes the rest (the whole todo when the
 * file is missing or corrupt, and then writes the file again when the todo
 * is the whole split); WRITE computes and writes; NONE computes. */
static sl_err_t read_table_unit(dpp_reader_t *rd, const sl_worker_work_t *wk, uint64_t t0,
                                sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    if (wk->cache_file) dpp_cache_copy_probe(w);
    bool write = wk->cache_file && wk->cache_mode == SL_WORKER_CACHE_WRITE && whole_split(wk);
    if (!wk->cache_file || wk->cache_mode != SL_WORKER_CACHE_READ)
        return compute_split(rd, wk, write ? wk->cache_file : NULL, t0, err);
    dpp_cache_rest_t rest;
    uint64_t c0 = now_ns(CLOCK_MONOTONIC), h0 = rd->handoff_ns;
    rd->cached = true;
    sl_err_t rc = dpp_cache_serve(w, wk, dpp_reader_to_transform, rd, &rest, err);
    rd->cached = false;
    uint64_t spent = now_ns(CLOCK_MONOTONIC) - c0, handoff = rd->handoff_ns - h0;
    sl_mutex_lock(&w->mu);
    w->st.cache_read_ns += spent > handoff ? spent - handoff : 0;
    w->st.backpressure_ns += handoff;
    sl_mutex_unlock(&w->mu);
    rd->num_empty = 0;
    if (rc == SL_OK && rest.n > 0 && dpp_reader_work_live(w, wk)) {
        sl_worker_work_t sub = *wk;
        sub.todo = rest.r;
        sub.num_todo = rest.n;
        bool again = whole_split(&sub); /* nothing served: write the file anew */
        rc = compute_split(rd, &sub, again ? wk->cache_file : NULL, now_ns(CLOCK_MONOTONIC), err);
    }
    dpp_cache_rest_free(w, &rest);
    (void)t0;
    return rc;
}

/* A leased split the reader cannot read (rc a split error) is reported
 * through the source instead of failing the worker: what the batcher
 * gathered of it is discarded, the lease is done, the reader goes on with
 * the next one. @return true when handled so. */
bool dpp_reader_lease_failed(dpp_reader_t *rd, const sl_worker_work_t *wk, sl_err_t rc,
                             bool from_read, sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    if (!wk->lease || !w->source.lease_failed || !dpp_worker_split_error(rc, from_read) ||
        atomic_load(&w->stopping))
        return false;
    w->source.lease_failed(w->source.ctx, wk->lease, rc, rd->stripe, err->msg);
    sl_worker_batcher_discard(rd->b);
    sl_error_t e = {0};
    batcher_acct(rd, &e); /* smaller now: releases */
    if (w->source.done) w->source.done(w->source.ctx, wk, NULL, 0);
    sl_mutex_lock(&w->mu);
    w->st.splits_failed++;
    sl_mutex_unlock(&w->mu);
    return true;
}

/* A unit begins: the epoch before it ends first when it is another. */
sl_err_t dpp_reader_begin_unit(dpp_reader_t *rd, const sl_worker_work_t *wk, sl_error_t *err)
{
    sl_err_t rc;
    if (rd->have_epoch && wk->epoch != rd->epoch &&
        ((rc = sl_worker_batcher_end_epoch(rd->b, err)) || (rc = batcher_acct(rd, err))))
        return rc;
    rd->have_epoch = true;
    rd->epoch = wk->epoch;
    return SL_OK;
}

/* The split's reader is in an unknown state after a failure: reopen. */
void dpp_reader_reset(dpp_reader_t *rd)
{
    close_reader(rd);
    rd->path[0] = '\0';
}

/* The unit is through: done, counted. */
void dpp_reader_unit_done(dpp_reader_t *rd, const sl_worker_work_t *wk)
{
    sl_worker_t *w = rd->w;
    if (w->source.done) w->source.done(w->source.ctx, wk, rd->empty, rd->num_empty);
    sl_mutex_lock(&w->mu);
    w->st.splits++;
    sl_mutex_unlock(&w->mu);
}

/* Keep of rd->empty only the rows inside wk's todo (an ordered unit reads
 * the whole split; the rows outside its todo were committed already).
 * @return SL_OK, SL_ERR_NOMEM. */
static sl_err_t empty_in_todo(dpp_reader_t *rd, const sl_worker_work_t *wk, sl_error_t *err)
{
    sl_dpp_row_range_t *out = NULL;
    uint32_t n = 0, cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (uint32_t i = 0, t = 0; i < rd->num_empty; i++) {
            sl_dpp_row_range_t e = rd->empty[i];
            while (t < wk->num_todo && wk->todo[t].to_row <= e.from_row)
                t++;
            for (uint32_t k = t; k < wk->num_todo && wk->todo[k].from_row < e.to_row; k++) {
                uint64_t from =
                    e.from_row > wk->todo[k].from_row ? e.from_row : wk->todo[k].from_row;
                uint64_t to = e.to_row < wk->todo[k].to_row ? e.to_row : wk->todo[k].to_row;
                if (from >= to) continue;
                if (out) out[n] = (sl_dpp_row_range_t){from, to};
                n++;
            }
        }
        if (pass == 0) {
            if (n == 0) break;
            cap = n;
            out = sl_alloc(rd->w->a, (size_t)cap * sizeof *out);
            if (!out) return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
        }
    }
    if (rd->empty) sl_free(rd->w->a, rd->empty, (size_t)rd->empty_cap * sizeof *rd->empty);
    rd->empty = out;
    rd->num_empty = n;
    rd->empty_cap = cap;
    return SL_OK;
}

/* A lease in the deterministic order (docs/DESIGN.md): begun in the
 * server's hold with its todo and read from the split's first row, every
 * batch cut reported to the hold in order (dpp_reader_to_transform), no
 * fused path, no autocache; once read, its count goes to the source for
 * SPLIT_READ. */
static sl_err_t read_ordered_unit(dpp_reader_t *rd, const sl_worker_work_t *wk, uint64_t t0,
                                  sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    if (w->source.read || wk->kafka_topic)
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "split %" PRIu64 ": the deterministic order of a stream", wk->split_id);
    sl_err_t rc =
        sl_worker_server_order_begin(w->server, wk->lease, (uint32_t)wk->split_id, wk->todo,
                                     wk->num_todo, wk->order_ranks, wk->order_base_plus_one, err);
    if (rc == SL_OK && wk->order_skip_count)
        rc = sl_worker_server_order_skip(w->server, wk->lease, wk->order_skip, wk->order_skip_count,
                                         err);
    if (rc) return rc; /* the caller drops what was begun */
    sl_dpp_row_range_t whole = {0, wk->split->num_rows};
    sl_worker_work_t all = *wk;
    all.todo = &whole;
    all.num_todo = wk->split->num_rows ? 1 : 0;
    all.cache_file = NULL;
    all.cache_mode = SL_WORKER_CACHE_NONE;
    rd->ordered = true;
    rc = compute_split(rd, &all, NULL, t0, err);
    rd->ordered = false;
    dpp_reader_fused_direct(rd);
    if (!dpp_reader_work_live(w, wk)) {
        /* revoked, perhaps before it was begun here (the heartbeat's drop
         * found nothing then): no base will come for what it holds */
        sl_worker_server_order_drop(w->server, wk->lease);
        return rc;
    }
    uint64_t batches = 0;
    if (rc == SL_OK) rc = sl_worker_server_order_end(w->server, wk->lease, &batches, err);
    if (rc == SL_OK) rc = empty_in_todo(rd, wk, err);
    if (rc) return rc;
    if (w->source.lease_counted) w->source.lease_counted(w->source.ctx, wk->lease, batches);
    return SL_OK;
}

/* One unit on this thread alone, from its start to done. */
sl_err_t dpp_reader_serial_unit(dpp_reader_t *rd, const sl_worker_work_t *wk, sl_error_t *err)
{
    sl_worker_t *w = rd->w;
    sl_err_t rc = dpp_reader_begin_unit(rd, wk, err);
    if (rc) return rc;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    rd->stripe = -1;
    rd->from_read = false;
    rc = wk->order_ranks && wk->lease ? read_ordered_unit(rd, wk, t0, err)
         : w->source.read             ? read_own(rd, wk, t0, err)
                                      : read_table_unit(rd, wk, t0, err);
    if (rc != SL_OK && wk->order_ranks && wk->lease)
        sl_worker_server_order_drop(w->server, wk->lease); /* its held batches freed */
    if (rc != SL_OK && dpp_reader_lease_failed(rd, wk, rc, rd->from_read, err)) {
        dpp_reader_reset(rd);
        return SL_OK;
    }
    if (rc) return rc;
    dpp_reader_unit_done(rd, wk);
    return SL_OK;
}

void *dpp_worker_reader_main(void *arg)
{
    sl_worker_t *w = arg;
    pthread_setname_np(pthread_self(), "sl-w-reader");
    const sl_pipeline_job_t *job = w->job;
    sl_error_t err = {0};
    sl_err_t rc = SL_OK;
    dpp_reader_t rd = {.w = w, .stripe = -1};
    const char *weight_label = sl_pipeline_plan_weight_label(w->plan);
    rd.weigh = weight_label != NULL;
    uint32_t nf = 0;
    const char *const *features = sl_pipeline_plan_read_features(w->plan, &nf);
    rd.ro = (sl_wh_read_opts_t){.features = features,
                                .num_features = nf,
                                .skip_columns = (SL_WH_COL_SESSION_ID | SL_WH_COL_TIMESTAMP |
                                                 (job->sample_ids ? 0 : SL_WH_COL_SAMPLE_ID)) &
                                                ~sl_pipeline_plan_filter_columns(w->plan),
                                .maps = w->decode_maps,
                                .dedup_form = w->dedup_form,
                                .allocator = w->a,
                                .mem = &w->wh_mem};
    sl_worker_batcher_opts_t bo = {.batch_size = job->batch_size,
                                   .drop_last = job->drop_last,
                                   /* under a master a batch is one row range: shuffle within it */
                                   .shuffle_window = w->master_mode && job->shuffle_window
                                                         ? job->batch_size
                                                         : job->shuffle_window,
                                   .seed = job->seed,
                                   .sample_ids = job->sample_ids,
                                   .weight_label = weight_label,
                                   .job_id = w->job_hash,
                                   .allocator = w->a};
    /* Block offsets (summed by the table reader, on a lane) serve only the
     * batcher's cut of a direct batch, the fused path's: asked for only
     * when the job can take that path, as far as is known before a stripe
     * is read (dpp_reader_decide_fused decides on the first one's shape,
     * the batcher on each batch: dpp_batcher_direct_ok). Otherwise the
     * reader would sum every key's lengths again for nothing. */
    rd.ro.block_offsets = !w->num_groups && !w->o.no_fused && !bo.weight_label &&
                          !bo.shuffle_window && sl_pipeline_plan_may_fuse(w->plan);
    if ((rc = sl_worker_batcher_new(&bo, dpp_reader_to_transform, &rd, &rd.b, &err))) goto out;
    if (w->threads > 1 && !w->source.read &&
        (rc = dpp_lanes_new(w, w->threads, &rd.ro, &rd.lanes, &err)))
        goto out;
    if (rd.lanes) {
        sl_mutex_lock(&w->mu);
        w->st.lanes = w->threads;
        sl_mutex_unlock(&w->mu);
        rc = dpp_reader_run_lanes(&rd, &err);
        if (rc) goto out;
    }
    while (!rd.lanes && !atomic_load(&w->stopping)) {
        sl_worker_work_t wk;
        sl_worker_budget_idle(w->budget, true); /* waiting for a split (a lease) */
        rc = w->source.next(w->source.ctx, &wk, &err);
        sl_worker_budget_idle(w->budget, false);
        if (rc == SL_ERR_CLOSED) {
            rc = SL_OK;
            break;
        }
        if (rc || (rc = dpp_reader_serial_unit(&rd, &wk, &err))) goto out;
    }
    if (rc == SL_OK && rd.have_epoch && !atomic_load(&w->stopping))
        rc = sl_worker_batcher_end_epoch(rd.b, &err);
out:
    /* a failure first: it ends the waits (for room, for memory) of the
     * lanes still making batches, which are joined next */
    if (rc != SL_OK && rc != SL_ERR_CLOSED && !atomic_load(&w->stopping))
        dpp_worker_fail(w, rc, err.msg);
    dpp_lanes_destroy(rd.lanes);
    /* what the batcher held goes with it (the batcher is destroyed below) */
    sl_worker_budget_release(w->budget, rd.batcher_held);
    rd.batcher_held = 0;
    sl_worker_budget_idle(w->budget, true); /* the reader has ended */
    close_reader(&rd);
    if (rd.b) {
        sl_worker_batcher_stats_t bs;
        sl_worker_batcher_stats(rd.b, &bs);
        sl_mutex_lock(&w->mu);
        w->st.rows_dropped = bs.rows_dropped;
        sl_mutex_unlock(&w->mu);
    }
    sl_worker_batcher_destroy(rd.b);
    sl_pipeline_fused_destroy(rd.fused);
    scratch_free(&rd);
    sl_worker_queue_close(w->work);
    sl_mutex_lock(&w->mu);
    w->st.cpu_ns += now_ns(CLOCK_THREAD_CPUTIME_ID);
    sl_mutex_unlock(&w->mu);
    return NULL;
}

/* Handing batches out (batcher_internal.h): each batch numbered in its
 * split and, in a range, given its lease part (stamp); a built batch, a
 * whole batch made straight from the rows (the direct hook) and rows taken
 * with their arena as the batch (add_owned) handed to the emit callback;
 * and the shuffle window dealt, shuffled, into batches. */
#include <string.h>

#include "common/mem.h"
#include "dpp/worker/batcher/batcher_internal.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Start the random sequence of the batch that begins at row from of the
 * range's split: its row order depends on nothing read before it. */
void dpp_batcher_range_reseed(sl_worker_batcher_t *b, uint64_t from)
{
    uint64_t z = ((uint64_t)b->range.split << 40) ^ from;
    b->rng = b->o.seed ^ (0xd1b54a32d192ed03ull * ((uint64_t)b->epoch + 1)) ^ splitmix(&z);
}

/* Number a batch of rows rows whose origin is o, ending (in a range) at
 * to_row: its sequence number in its split, and the lease part of its
 * origin (*lp: lease, or NULL outside a range). */
static void stamp(sl_worker_batcher_t *b, sl_batch_origin_t *o, uint32_t rows, uint64_t to_row,
                  sl_worker_lease_origin_t *lease, sl_worker_lease_origin_t **lp)
{
    *lp = NULL;
    if (b->ranged) {
        *lease = b->range;
        lease->to_row = to_row;
        *lp = lease;
        b->range.from_row = to_row; /* the next batch starts there */
        dpp_batcher_range_reseed(b, to_row);
    }
    if (b->seq_valid && b->seq_split == o->split_id) {
        o->sequence = b->seq_next++;
    } else {
        b->seq_valid = true;
        b->seq_split = o->split_id;
        o->sequence = 0;
        b->seq_next = 1;
    }
    b->stats.batches++;
    b->stats.rows_out += rows;
}

/* Hand out the batch being built; in a range it ends at row to_row. */
sl_err_t dpp_batcher_emit_batch(sl_worker_batcher_t *b, uint64_t to_row, sl_error_t *err)
{
    sl_batch_t *batch;
    sl_err_t rc = dpp_batcher_builder_finish(b, &b->batch, &batch, err);
    if (rc) return rc;
    sl_worker_lease_origin_t lease, *lp;
    stamp(b, &batch->origin, batch->batch_size, to_row, &lease, &lp);
    return b->emit(b->ctx, batch, lp, err);
}

/* May the next batch go to the direct hook, if it fills in one gather? */
bool dpp_batcher_direct_ok(const sl_worker_batcher_t *b)
{
    return b->direct && !b->window.cap && b->batch.n == 0 && !b->G && !b->weight_label;
}

/* Key k's values before row r (P: its block offsets, L: its lengths). */
static uint64_t block_offset(const uint64_t *P, const int32_t *L, uint32_t r)
{
    const uint32_t j = r / SL_WH_BLOCK_ROWS;
    bool neg; /* none: the block offsets come with non-negative lengths */
    return P[j] + sl_lengths_sum(L + (size_t)j * SL_WH_BLOCK_ROWS, r - j * SL_WH_BLOCK_ROWS, &neg);
}

/* A whole batch of the runs[0..nr) (m rows) of rows to the direct hook,
 * numbered as dpp_batcher_emit_batch numbers a built one. */
sl_err_t dpp_batcher_emit_direct(sl_worker_batcher_t *b, const sl_batch_t *rows, uint32_t nr,
                                 uint32_t m, const sl_worker_rows_origin_t *origin, uint64_t to_row,
                                 sl_error_t *err)
{
    /* Each key's values of the batch, found from the block offsets where
     * the rows come with them, else from the per-key cursor (rows ascend
     * within a call), and checked as dpp_batcher_gather_runs checks them. */
    const uint32_t N = rows->batch_size;
    const uint32_t s0 = b->runs[0].row, e = b->runs[nr - 1].row + b->runs[nr - 1].count;
    /* A batch of all the rows (a Parquet stripe at --threads 1) whose key
     * offsets add_rows summed from their lengths: another pass over every
     * length here would find the same spans (0.55 % of such a worker) */
    const bool whole = !b->blk && b->off_summed && s0 == 0 && e == N;
    for (uint32_t k = 0; k < b->F; k++) {
        const int32_t *L = rows->sparse.lengths + (size_t)k * N;
        const uint64_t room = b->key_off[k + 1] - b->key_off[k];
        bool n1 = false, n2 = false;
        uint64_t off, span;
        if (whole && b->cur_row[k] == 0 && b->key_off[k + 1] != UINT64_MAX) {
            /* every row, none read yet: the key's values are the sum just
             * made (and checked non-negative: it did not saturate) */
            off = 0;
            span = room;
        } else if (b->blk) {
            const uint64_t *P = b->blk + (size_t)k * (N / SL_WH_BLOCK_ROWS + 1);
            off = block_offset(P, L, s0);
            span = block_offset(P, L, e) - off;
        } else {
            off = b->cur_off[k] + sl_lengths_sum(L + b->cur_row[k], s0 - b->cur_row[k], &n1);
            span = sl_lengths_sum(L + s0, e - s0, &n2);
        }
        if (n1 || n2 || b->key_off[k + 1] < b->key_off[k] || off > room || span > room - off)
            return sl_error_set(err, SL_ERR_INVALID,
                                "batcher: key '%s' lengths pass its values (rows %u..%u)",
                                b->keys[k], s0, e);
        b->key_at[k] = off;
        b->span[k] = span;
        b->cur_row[k] = e;
        b->cur_off[k] = off + span;
    }
    sl_worker_direct_t d = {.rows = rows,
                            .key_offsets = b->key_off,
                            .start = b->key_at,
                            .span = b->span,
                            .runs = b->runs,
                            .num_runs = nr,
                            .num_rows = m,
                            .sample_ids = b->o.sample_ids};
    d.origin = (sl_batch_origin_t){.job_id = b->o.job_id,
                                   .epoch = origin->epoch,
                                   .split_id = origin->split_id,
                                   .first_row = origin->row + b->runs[0].row};
    sl_worker_lease_origin_t lease, *lp;
    stamp(b, &d.origin, m, to_row, &lease, &lp);
    d.lease = lp;
    return b->direct(b->direct_ctx, &d, err);
}

/* Shuffle the window's rows (seeded Fisher-Yates) and deal them into
 * batches; in a range, a full batch ends at to_row. */
sl_err_t dpp_batcher_flush_window(sl_worker_batcher_t *b, uint64_t to_row, sl_error_t *err)
{
    builder_t *w = &b->window;
    if (w->n == 0) return SL_OK;
    uint64_t *rs = w->row_split, *rp = w->row_pos;
    sl_batch_t *win;
    sl_err_t rc = dpp_batcher_builder_finish(b, w, &win, err);
    if (rc) return rc;
    uint32_t n = win->batch_size;
    for (uint32_t i = 0; i < n; i++)
        b->perm[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(splitmix(&b->rng) % i);
        uint32_t t = b->perm[i - 1];
        b->perm[i - 1] = b->perm[j];
        b->perm[j] = t;
    }
    const sl_kjt_t *kjt = &win->sparse;
    uint64_t at = 0; /* each key's offsets continue where the previous key's ended */
    for (uint32_t k = 0; k < b->F; k++) {
        uint64_t *o = b->offs + (size_t)k * (n + 1);
        o[0] = at;
        for (uint32_t r = 0; r < n; r++)
            o[r + 1] = o[r] + (uint64_t)kjt->lengths[(size_t)k * n + r];
        at = o[n];
    }
    builder_t *bd = &b->batch;
    uint32_t i = 0;
    while (i < n) {
        if (!bd->cur && (rc = dpp_batcher_builder_begin(b, bd, err))) goto out;
        uint32_t m = bd->cap - bd->n;
        if (m > n - i) m = n - i;
        for (uint32_t k = 0; k < b->F; k++) {
            const uint64_t *o = b->offs + (size_t)k * (n + 1);
            int32_t *dl = bd->lengths + (size_t)k * bd->cap + bd->n;
            uint64_t sum = 0;
            for (uint32_t j = 0; j < m; j++) {
                uint32_t s = b->perm[i + j];
                dl[j] = kjt->lengths[(size_t)k * n + s];
                sum += (uint64_t)dl[j];
            }
            if (sum &&
                (!dpp_vec_reserve(b->a, &bd->vals[k], sum * sizeof(int64_t)) ||
                 (b->weighted && !dpp_vec_reserve(b->a, &bd->wts[k], sum * sizeof(float))))) {
                rc = sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
                goto out;
            }
            for (uint32_t j = 0; j < m; j++) {
                uint32_t s = b->perm[i + j];
                size_t len = (size_t)dl[j];
                if (len == 0) continue;
                memcpy(bd->vals[k].p + bd->vals[k].len, kjt->values + o[s], len * sizeof(int64_t));
                bd->vals[k].len += len * sizeof(int64_t);
                if (b->weighted) {
                    memcpy(bd->wts[k].p + bd->wts[k].len, kjt->weights + o[s], len * sizeof(float));
                    bd->wts[k].len += len * sizeof(float);
                }
            }
        }
        for (uint32_t j = 0; j < m; j++) {
            uint32_t s = b->perm[i + j];
            size_t at = (size_t)bd->n + j;
            if (b->D)
                memcpy(bd->dense + at * b->D, win->dense.data + (size_t)s * b->D,
                       b->D * sizeof(float));
            if (b->T_out)
                memcpy(bd->labels + at * b->T_out, win->labels.data + (size_t)s * b->T_out,
                       b->T_out * sizeof(float));
            if (bd->ids) bd->ids[at] = win->sample_ids[s];
            if (bd->times) bd->times[at] = win->record_ms[s]; /* a row's time goes with it */
        }
        if (bd->n == 0) {
            uint32_t s = b->perm[i];
            bd->first = (sl_batch_origin_t){
                .job_id = b->o.job_id, .epoch = b->epoch, .split_id = rs[s], .first_row = rp[s]};
        }
        bd->n += m;
        i += m;
        if (bd->n == bd->cap && (rc = dpp_batcher_emit_batch(b, to_row, err))) goto out;
    }
out:
    sl_batch_destroy(win);
    return rc;
}

/* Names of n columns, all present? */
static bool all_named(const char *const *names, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!names || !names[i]) return false;
    return true;
}

/* May rows (all n of them, unselected) become the next batch as they are
 * (sl_worker_batcher_add_owned)? Only when the batch built from them
 * would hold exactly their buffers: a whole batch, nothing held, no
 * shuffle window or dedup groups, no weight label, every column named,
 * every array of exactly n rows. */
bool dpp_batcher_take_ok(const sl_worker_batcher_t *b, const sl_batch_t *rows, uint32_t n)
{
    return n == b->batch.cap && n == rows->batch_size && !b->window.cap && b->batch.n == 0 &&
           !b->batch.cur && !b->G && !rows->num_groups && !b->weight_label &&
           rows->sparse.stride == n && (!b->D || rows->dense.rows == n) &&
           (!b->T || rows->labels.rows == n) && all_named(rows->sparse.keys, b->F) &&
           all_named(rows->dense.names, b->D) && all_named(rows->labels.names, b->T);
}

/* rows, whose every buffer lies in owned (taken here), as the next batch,
 * numbered as dpp_batcher_emit_batch numbers a built batch. Its lengths
 * are not summed here, key by key against the key offsets the rows came
 * with, as dpp_batcher_gather_runs checks the rows it copies: nothing
 * reads a taken batch's values by those offsets (the transforms find
 * each key's values from its lengths, checking that they stay inside
 * the values; the encoder checks that the lengths are non-negative and
 * sum to the values while it copies them), and the pass over every
 * length was 2-3 % of the worker's CPU on a Parquet job, on its reader
 * thread. */
sl_err_t dpp_batcher_emit_taken(sl_worker_batcher_t *b, const sl_batch_t *rows, sl_arena_t *owned,
                                const sl_worker_rows_origin_t *origin, sl_error_t *err)
{
    const uint32_t n = rows->batch_size;
    sl_batch_t *batch = sl_arena_alloc(owned, sizeof *batch);
    if (!batch) {
        sl_arena_destroy(owned);
        return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory taking a batch");
    }
    *batch = *rows;
    batch->arena = owned;
    batch->release = NULL;
    batch->release_ctx = NULL;
    if (!b->o.sample_ids) batch->sample_ids = NULL;
    if (!b->has_times) batch->record_ms = NULL;
    batch->origin = (sl_batch_origin_t){.job_id = b->o.job_id,
                                        .epoch = origin->epoch,
                                        .split_id = origin->split_id,
                                        .first_row = origin->row};
    sl_worker_lease_origin_t lease, *lp;
    stamp(b, &batch->origin, n, b->range_next, &lease, &lp);
    return b->emit(b->ctx, batch, lp, err);
}

/* The batcher (batcher.h): its lifecycle, the shape fixed by the first
 * rows and checked on every later call, rows added (cut into runs of
 * consecutive selected rows, a batch's worth at a time: gathered, made
 * straight from the rows or taken with their arena), epochs and ranges,
 * discard, footprint and statistics. A batch is built in batcher_build.c
 * and numbered and handed out in batcher_emit.c. */
#include "dpp/worker/batcher/batcher.h"

#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "dpp/worker/batcher/batcher_internal.h"

static void free_strs(const sl_allocator_t *a, char **v, uint32_t n)
{
    if (!v) return;
    for (uint32_t i = 0; i < n; i++)
        sl_strfree(a, v[i]);
    sl_free(a, v, (size_t)n * sizeof *v);
}

sl_err_t sl_worker_batcher_new(const sl_worker_batcher_opts_t *opts, sl_worker_batcher_emit_fn emit,
                               void *ctx, sl_worker_batcher_t **out, sl_error_t *err)
{
    if (!opts || opts->batch_size == 0 || !emit)
        return sl_error_set(err, SL_ERR_INVALID, "batcher: batch_size must be positive");
    const sl_allocator_t *a = opts->allocator ? opts->allocator : sl_allocator_default();
    sl_worker_batcher_t *b = sl_calloc(a, 1, sizeof *b);
    if (!b) return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
    b->o = *opts;
    b->a = a;
    b->emit = emit;
    b->ctx = ctx;
    if (opts->weight_label && !(b->weight_label = sl_strdup(a, opts->weight_label))) {
        sl_free(a, b, sizeof *b);
        return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
    }
    b->o.weight_label = b->weight_label;
    b->batch.cap = opts->batch_size;
    b->window.cap = opts->shuffle_window;
    b->window.track_rows = true;
    *out = b;
    return SL_OK;
}

void sl_worker_batcher_destroy(sl_worker_batcher_t *b)
{
    if (!b) return;
    const sl_allocator_t *a = b->a;
    dpp_batcher_builder_free(a, &b->batch, b->F, b->G, b->gs);
    dpp_batcher_builder_free(a, &b->window, b->F, b->G, b->gs);
    for (uint32_t g = 0; b->gs && g < b->G; g++) {
        gshape_t *q = &b->gs[g];
        sl_strfree(a, q->name);
        free_strs(a, q->keys, q->F);
        if (q->map) sl_free(a, q->map, (size_t)q->map_cap * sizeof *q->map);
        if (q->touched) sl_free(a, q->touched, (size_t)q->map_cap * sizeof *q->touched);
        if (q->uoff) sl_free(a, q->uoff, q->uoff_cap * sizeof *q->uoff);
    }
    if (b->gs) sl_free(a, b->gs, (size_t)(b->G ? b->G : 1) * sizeof *b->gs);
    free_strs(a, b->keys, b->F);
    free_strs(a, b->dense_names, b->D);
    free_strs(a, b->label_names, b->T_out);
    uint32_t rc = b->batch.cap > b->window.cap ? b->batch.cap : b->window.cap;
    if (b->key_off) sl_free(a, b->key_off, (size_t)(b->F + 1) * sizeof *b->key_off);
    if (b->cur_row) sl_free(a, b->cur_row, (size_t)b->F * sizeof *b->cur_row);
    if (b->cur_off) sl_free(a, b->cur_off, (size_t)b->F * sizeof *b->cur_off);
    if (b->key_at) sl_free(a, b->key_at, (size_t)b->F * sizeof *b->key_at);
    if (b->span) sl_free(a, b->span, (size_t)b->F * sizeof *b->span);
    if (b->runs) sl_free(a, b->runs, (size_t)rc * sizeof *b->runs);
    if (b->perm) sl_free(a, b->perm, (size_t)b->window.cap * sizeof *b->perm);
    if (b->offs)
        sl_free(a, b->offs,
                sl_mul_size((size_t)b->F, (size_t)b->window.cap + 1) * sizeof(uint64_t));
    sl_strfree(a, b->weight_label);
    sl_free(a, b, sizeof *b);
}

static char **dup_names(const sl_allocator_t *a, const char *const *names, uint32_t n,
                        const char *extra, const char *fallback)
{
    uint32_t total = n + (extra ? 1 : 0);
    char **v = sl_calloc(a, total ? total : 1, sizeof *v);
    if (!v) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        char tmp[32];
        const char *s = names && names[i] ? names[i] : NULL;
        if (!s) {
            snprintf(tmp, sizeof tmp, "%s%u", fallback, i);
            s = tmp;
        }
        if (!(v[i] = sl_strdup(a, s))) goto fail;
    }
    if (extra && !(v[n] = sl_strdup(a, extra))) goto fail;
    return v;
fail:
    free_strs(a, v, total ? total : 1);
    return NULL;
}

/* Fix the shape from the first rows; later rows must match it. */
static sl_err_t configure(sl_worker_batcher_t *b, const sl_batch_t *rows, sl_error_t *err)
{
    const sl_allocator_t *a = b->a;
    b->F = rows->sparse.num_keys;
    b->D = rows->dense.cols;
    b->T = rows->labels.cols;
    b->T_out = b->T + (b->weight_label ? 1 : 0);
    b->weighted = rows->sparse.weights != NULL;
    b->has_ids = rows->sample_ids != NULL;
    b->has_times = rows->record_ms != NULL;
    if (b->o.sample_ids && !b->has_ids)
        return sl_error_set(err, SL_ERR_INVALID, "batcher: rows carry no sample ids");
    if (rows->num_groups && b->window.cap)
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "batcher: a shuffle window over rows in dedup form");
    if (rows->num_groups) {
        b->gs = sl_calloc(a, rows->num_groups, sizeof *b->gs);
        if (!b->gs) return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
        b->G = rows->num_groups;
        for (uint32_t g = 0; g < b->G; g++) {
            const sl_ikjt_t *ik = &rows->groups[g];
            gshape_t *q = &b->gs[g];
            q->F = ik->unique.num_keys;
            q->weighted = ik->unique.weights != NULL;
            q->name = sl_strdup(a, ik->name ? ik->name : "group");
            q->keys = dup_names(a, ik->unique.keys, q->F, NULL, "key_");
            if (!q->name || !q->keys)
                return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
        }
    }
    b->keys = dup_names(a, rows->sparse.keys, b->F, NULL, "sparse_");
    b->dense_names = dup_names(a, rows->dense.names, b->D, NULL, "dense_");
    b->label_names = dup_names(a, rows->labels.names, b->T, b->weight_label, "label_");
    uint32_t rc = b->batch.cap > b->window.cap ? b->batch.cap : b->window.cap;
    b->key_off = sl_calloc(a, (size_t)b->F + 1, sizeof *b->key_off);
    b->cur_row = sl_calloc(a, b->F ? b->F : 1, sizeof *b->cur_row);
    b->cur_off = sl_calloc(a, b->F ? b->F : 1, sizeof *b->cur_off);
    b->key_at = sl_calloc(a, b->F ? b->F : 1, sizeof *b->key_at);
    b->span = sl_calloc(a, b->F ? b->F : 1, sizeof *b->span);
    b->runs = sl_calloc(a, rc, sizeof *b->runs);
    if (!b->keys || !b->dense_names || !b->label_names || !b->key_off || !b->cur_row ||
        !b->cur_off || !b->key_at || !b->span || !b->runs ||
        dpp_batcher_builder_setup(b, &b->batch) || dpp_batcher_builder_setup(b, &b->window))
        return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
    if (b->window.cap) {
        b->perm = sl_calloc(a, b->window.cap, sizeof *b->perm);
        b->offs = sl_alloc(
            a, sl_mul_size(sl_mul_size(b->F, (size_t)b->window.cap + 1), sizeof(uint64_t)));
        if (!b->perm || (!b->offs && b->F))
            return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory (shuffle window)");
    }
    b->configured = true;
    return SL_OK;
}

static sl_err_t check_shape(const sl_worker_batcher_t *b, const sl_batch_t *rows, uint32_t T,
                            sl_error_t *err)
{
    if (rows->sparse.num_keys != b->F || rows->dense.cols != b->D || rows->labels.cols != T ||
        (rows->sparse.weights != NULL) != b->weighted || (rows->sample_ids != NULL) != b->has_ids ||
        (rows->record_ms != NULL) != b->has_times)
        return sl_error_set(err, SL_ERR_INVALID,
                            "batcher: rows changed shape (%u keys, %u dense, %u labels, "
                            "record times %s; expected %u, %u, %u, %s)",
                            rows->sparse.num_keys, rows->dense.cols, rows->labels.cols,
                            rows->record_ms ? "yes" : "no", b->F, b->D, T,
                            b->has_times ? "yes" : "no");
    for (uint32_t k = 0; k < b->F; k++)
        if (strcmp(rows->sparse.keys[k], b->keys[k]) != 0)
            return sl_error_set(err, SL_ERR_INVALID, "batcher: key %u is '%s', expected '%s'", k,
                                rows->sparse.keys[k], b->keys[k]);
    if (rows->num_groups != b->G)
        return sl_error_set(err, SL_ERR_INVALID, "batcher: rows have %u dedup groups, expected %u",
                            rows->num_groups, b->G);
    for (uint32_t g = 0; g < b->G; g++) {
        const sl_kjt_t *u = &rows->groups[g].unique;
        bool same = u->num_keys == b->gs[g].F && (u->weights != NULL) == b->gs[g].weighted &&
                    rows->groups[g].batch_size == rows->batch_size;
        for (uint32_t k = 0; same && k < u->num_keys; k++)
            same = strcmp(u->keys[k], b->gs[g].keys[k]) == 0;
        if (!same)
            return sl_error_set(err, SL_ERR_INVALID, "batcher: dedup group %u ('%s') changed shape",
                                g, b->gs[g].name);
    }
    return SL_OK;
}

static sl_err_t add_rows(sl_worker_batcher_t *b, const sl_batch_t *rows, const uint32_t *selected,
                         const float *weights, uint32_t n, const sl_worker_rows_origin_t *origin,
                         sl_arena_t **owned, sl_error_t *err)
{
    sl_err_t rc;
    if (!b->configured && (rc = configure(b, rows, err))) return rc;
    if ((rc = check_shape(b, rows, b->T, err))) return rc;
    const uint32_t N = rows->batch_size;
    if (!selected && n > N)
        return sl_error_set(err, SL_ERR_INVALID, "batcher: %u rows selected of %u", n, N);
    if (b->ranged && (origin->split_id != b->range.split || origin->epoch != b->epoch))
        return sl_error_set(err, SL_ERR_INVALID,
                            "batcher: rows of split %llu epoch %u in a range of split %u epoch %u",
                            (unsigned long long)origin->split_id, origin->epoch, b->range.split,
                            b->epoch);
    if (!b->started || origin->epoch != b->epoch) {
        if (b->started && (b->window.n || b->batch.n) && (rc = sl_worker_batcher_end_epoch(b, err)))
            return rc;
        b->started = true;
        b->epoch = origin->epoch;
        b->rng = b->o.seed ^ (0xd1b54a32d192ed03ull * ((uint64_t)origin->epoch + 1));
    }
    if (b->ranged && origin->end_row) {
        /* a unit's rows have no row numbers: no batch may end inside it */
        const builder_t *bd = b->window.cap ? &b->window : &b->batch;
        if (origin->end_row <= origin->row || n > bd->cap - bd->n)
            return sl_error_set(err, SL_ERR_INVALID,
                                "batcher: a unit of %u rows [%llu, %llu) of split %u does not "
                                "fit the %u rows left in the batch",
                                n, (unsigned long long)origin->row,
                                (unsigned long long)origin->end_row, b->range.split,
                                bd->cap - bd->n);
    }
    /* the rows become the batch as they are, with their arena (add_owned):
     * a whole batch of them not made straight from them (direct) */
    const bool take_all = owned && *owned && !selected && !dpp_batcher_direct_ok(b) &&
                          dpp_batcher_take_ok(b, rows, n);
    if (origin->key_offsets != NULL) {
        if (origin->key_offsets[b->F] != rows->sparse.num_values)
            return sl_error_set(err, SL_ERR_INVALID,
                                "batcher: key offsets end at %llu, not at the %llu values",
                                (unsigned long long)origin->key_offsets[b->F],
                                (unsigned long long)rows->sparse.num_values);
        memcpy(b->key_off, origin->key_offsets, ((size_t)b->F + 1) * sizeof *b->key_off);
        b->off_summed = false;
    } else if (!take_all) {
        /* (rows taken whole are never read by key offsets: no pass over
         * all their lengths to find them) */
        sl_kjt_key_offsets(&rows->sparse, b->key_off);
        b->off_summed = true;
    } else {
        b->off_summed = false;
    }
    if (b->G && (rc = dpp_batcher_prepare_groups(b, rows, err))) return rc;
    b->blk = origin->block_offsets;
    for (uint32_t k = 0; k < b->F; k++) {
        b->cur_row[k] = 0;
        b->cur_off[k] = 0;
    }
    b->stats.rows_in += n;
    uint32_t i = 0;
    uint32_t prev = 0;
    while (i < n) {
        builder_t *bd = b->window.cap ? &b->window : &b->batch;
        uint32_t m = bd->cap - bd->n;
        if (m > n - i) m = n - i;
        bool whole = m == bd->cap && dpp_batcher_direct_ok(b);
        bool take = i == 0 && take_all; /* take_ok: n == cap, nothing held, so m == n */
        if (!bd->cur && !whole && !take && (rc = dpp_batcher_builder_begin(b, bd, err))) return rc;
        if (take) {
            /* the rows are the batch: taken with their arena, not copied */
            sl_arena_t *ar = *owned;
            *owned = NULL;
            if (b->ranged) b->range_next = origin->end_row ? origin->end_row : origin->row + n;
            if ((rc = dpp_batcher_emit_taken(b, rows, ar, origin, err))) return rc;
            i += m;
            continue;
        }
        /* runs of consecutive rows among selected[i, i+m); without a
         * selection, the one run [i, i+m) (n <= N, checked above): no
         * loop over the batch's rows on the reader thread */
        uint32_t nr = 0;
        if (!selected) {
            b->runs[nr++] = (run_t){i, m};
            prev = i + m - 1;
        }
        for (uint32_t j = 0; selected && j < m; j++) {
            uint32_t s = selected ? selected[i + j] : i + j;
            if (s >= N || (selected && (i + j) > 0 && s <= prev))
                return sl_error_set(err, SL_ERR_INVALID,
                                    "batcher: selected row %u out of order or range (%u rows)", s,
                                    N);
            prev = s;
            if (nr && b->runs[nr - 1].row + b->runs[nr - 1].count == s)
                b->runs[nr - 1].count++;
            else
                b->runs[nr++] = (run_t){s, 1};
        }
        if (whole) {
            /* a whole batch from these rows: made straight from them */
            if (b->ranged)
                b->range_next = origin->end_row ? origin->end_row : origin->row + prev + 1;
            if ((rc = dpp_batcher_emit_direct(b, rows, nr, m, origin, b->range_next, err)))
                return rc;
            i += m;
            continue;
        }
        if ((rc = dpp_batcher_gather_runs(b, bd, rows, b->runs, nr, m, weights, i, origin, err)))
            return rc;
        i += m;
        if (b->ranged) b->range_next = origin->end_row ? origin->end_row : origin->row + prev + 1;
        if (bd->n == bd->cap) {
            /* in a range, a full batch ends right after its last row */
            rc = b->window.cap ? dpp_batcher_flush_window(b, b->range_next, err)
                               : dpp_batcher_emit_batch(b, b->range_next, err);
            if (rc) return rc;
        }
    }
    return SL_OK;
}

sl_err_t sl_worker_batcher_add(sl_worker_batcher_t *b, const sl_batch_t *rows,
                               const uint32_t *selected, const float *weights, uint32_t n,
                               const sl_worker_rows_origin_t *origin, sl_error_t *err)
{
    return add_rows(b, rows, selected, weights, n, origin, NULL, err);
}

sl_err_t sl_worker_batcher_add_owned(sl_worker_batcher_t *b, const sl_batch_t *rows,
                                     const uint32_t *selected, const float *weights, uint32_t n,
                                     const sl_worker_rows_origin_t *origin, sl_arena_t **owned,
                                     sl_error_t *err)
{
    return add_rows(b, rows, selected, weights, n, origin, owned, err);
}

/* Drain the window and hand out the short batch being built, or drop it
 * with drop_last (in a range, it ends at to_row). @return how many rows
 * were dropped in *dropped. */
static sl_err_t finish_short(sl_worker_batcher_t *b, uint64_t to_row, uint32_t *dropped,
                             sl_error_t *err)
{
    *dropped = 0;
    sl_err_t rc = dpp_batcher_flush_window(b, to_row, err);
    if (rc) return rc;
    if (b->batch.n == 0) return SL_OK;
    if (b->o.drop_last) {
        *dropped = dpp_batcher_builder_clear(b, &b->batch);
        b->stats.rows_dropped += *dropped;
        return SL_OK;
    }
    return dpp_batcher_emit_batch(b, to_row, err);
}

sl_err_t sl_worker_batcher_end_epoch(sl_worker_batcher_t *b, sl_error_t *err)
{
    if (b->ranged)
        return sl_error_set(err, SL_ERR_INVALID, "batcher: end of an epoch inside a range");
    uint32_t dropped;
    return finish_short(b, 0, &dropped, err);
}

sl_err_t sl_worker_batcher_begin_range(sl_worker_batcher_t *b,
                                       const sl_worker_lease_origin_t *lease, uint32_t epoch,
                                       sl_error_t *err)
{
    if (b->ranged || b->window.n || b->batch.n)
        return sl_error_set(err, SL_ERR_INVALID,
                            "batcher: a range of split %u begins with rows held", lease->split);
    if (b->window.cap && b->window.cap != b->batch.cap)
        return sl_error_set(err, SL_ERR_INVALID,
                            "batcher: a shuffle window of %u rows in batches of %u: a batch of "
                            "a range shuffles its own rows only",
                            b->window.cap, b->batch.cap);
    b->ranged = true;
    b->range = *lease;
    b->range_next = lease->from_row;
    b->started = true;
    b->epoch = epoch;
    dpp_batcher_range_reseed(b, lease->from_row);
    return SL_OK;
}

sl_err_t sl_worker_batcher_end_range(sl_worker_batcher_t *b, uint64_t to_row,
                                     sl_dpp_row_range_t *empty, sl_error_t *err)
{
    *empty = (sl_dpp_row_range_t){to_row, to_row};
    if (!b->ranged) return sl_error_set(err, SL_ERR_INVALID, "batcher: end of no range");
    uint64_t from = b->range.from_row;
    bool held = b->window.n || b->batch.n;
    uint32_t dropped = 0;
    sl_err_t rc = finish_short(b, to_row, &dropped, err);
    b->ranged = false;
    if (rc) return rc;
    if ((!held || dropped) && from < to_row) *empty = (sl_dpp_row_range_t){from, to_row};
    return SL_OK;
}

void sl_worker_batcher_discard(sl_worker_batcher_t *b)
{
    b->stats.rows_discarded += dpp_batcher_builder_clear(b, &b->window);
    b->stats.rows_discarded += dpp_batcher_builder_clear(b, &b->batch);
    b->ranged = false;
}

uint64_t sl_worker_batcher_footprint(const sl_worker_batcher_t *b)
{
    uint64_t t = 0;
    const builder_t *bs[2] = {&b->batch, &b->window};
    for (int i = 0; i < 2; i++) {
        const builder_t *bd = bs[i];
        if (bd->cur) t += sl_arena_footprint(bd->cur->arena);
        for (uint32_t k = 0; bd->vals && k < b->F; k++)
            t += bd->vals[k].cap + bd->wts[k].cap;
        for (uint32_t g = 0; bd->groups && g < b->G; g++)
            for (uint32_t k = 0; k < b->gs[g].F; k++)
                t += bd->groups[g].lens[k].cap + bd->groups[g].vals[k].cap +
                     bd->groups[g].wts[k].cap;
    }
    return t;
}

void sl_worker_batcher_set_direct(sl_worker_batcher_t *b, sl_worker_batcher_direct_fn fn, void *ctx)
{
    b->direct = fn;
    b->direct_ctx = ctx;
}

void sl_worker_batcher_stats(const sl_worker_batcher_t *b, sl_worker_batcher_stats_t *out)
{
    *out = b->stats;
}

/* Building one batch (batcher_internal.h). Rows are gathered in runs of
 * consecutive selected rows, so an unfiltered stripe costs a few memcpy per
 * column and batch, not work per row. Dense, labels, ids and lengths go
 * straight into the batch's arena (allocated for a full batch up front);
 * the ids of each key grow in a reusable vector per key and are copied
 * once, contiguous, when the batch is complete (or, when one gather fills
 * the batch, straight to their place in the arena). Here too: a builder's
 * buffers made and freed, and its rows forgotten. */
#include <string.h>

#include "common/mem.h"
#include "dpp/worker/batcher/batcher_internal.h"

static void vecs_free(const sl_allocator_t *a, vec_t *v, uint32_t n)
{
    if (!v) return;
    for (uint32_t k = 0; k < n; k++)
        sl_free(a, v[k].p, v[k].cap);
    sl_free(a, v, (size_t)(n ? n : 1) * sizeof *v);
}

void dpp_batcher_builder_free(const sl_allocator_t *a, builder_t *bd, uint32_t F, uint32_t G,
                              const gshape_t *gs)
{
    sl_batch_destroy(bd->cur);
    bd->cur = NULL;
    for (uint32_t g = 0; bd->groups && g < G; g++) {
        vecs_free(a, bd->groups[g].lens, gs[g].F);
        vecs_free(a, bd->groups[g].vals, gs[g].F);
        vecs_free(a, bd->groups[g].wts, gs[g].F);
    }
    if (bd->groups) sl_free(a, bd->groups, (size_t)(G ? G : 1) * sizeof *bd->groups);
    bd->groups = NULL;
    for (uint32_t k = 0; bd->vals && k < F; k++) {
        sl_free(a, bd->vals[k].p, bd->vals[k].cap);
        sl_free(a, bd->wts[k].p, bd->wts[k].cap);
    }
    if (bd->vals) sl_free(a, bd->vals, (size_t)F * sizeof *bd->vals);
    if (bd->wts) sl_free(a, bd->wts, (size_t)F * sizeof *bd->wts);
    bd->vals = bd->wts = NULL;
}

sl_err_t dpp_batcher_builder_setup(sl_worker_batcher_t *b, builder_t *bd)
{
    if (bd->cap == 0) return SL_OK;
    bd->vals = sl_calloc(b->a, b->F ? b->F : 1, sizeof *bd->vals);
    bd->wts = sl_calloc(b->a, b->F ? b->F : 1, sizeof *bd->wts);
    if (!bd->vals || !bd->wts) return SL_ERR_NOMEM;
    if (b->G == 0) return SL_OK;
    if (!(bd->groups = sl_calloc(b->a, b->G, sizeof *bd->groups))) return SL_ERR_NOMEM;
    for (uint32_t g = 0; g < b->G; g++) {
        uint32_t n = b->gs[g].F ? b->gs[g].F : 1;
        gbuild_t *gb = &bd->groups[g];
        gb->lens = sl_calloc(b->a, n, sizeof(vec_t));
        gb->vals = sl_calloc(b->a, n, sizeof(vec_t));
        gb->wts = sl_calloc(b->a, n, sizeof(vec_t));
        if (!gb->lens || !gb->vals || !gb->wts) return SL_ERR_NOMEM;
    }
    return SL_OK;
}

/* Start a batch in bd: an arena with room for cap rows. */
sl_err_t dpp_batcher_builder_begin(sl_worker_batcher_t *b, builder_t *bd, sl_error_t *err)
{
    sl_batch_t *batch = sl_batch_new(b->a);
    if (!batch) return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
    sl_arena_t *ar = batch->arena;
    size_t cap = bd->cap;
    bd->lengths = sl_arena_alloc(ar, sl_mul_size(sl_mul_size(b->F, cap), sizeof(int32_t)));
    bd->dense = sl_arena_alloc(ar, sl_mul_size(sl_mul_size(b->D, cap), sizeof(float)));
    bd->labels = sl_arena_alloc(ar, sl_mul_size(sl_mul_size(b->T_out, cap), sizeof(float)));
    bd->ids = b->o.sample_ids ? sl_arena_alloc(ar, cap * sizeof(int64_t)) : NULL;
    bd->times = b->has_times ? sl_arena_alloc(ar, cap * sizeof(int64_t)) : NULL;
    if (bd->track_rows) {
        bd->row_split = sl_arena_alloc(ar, cap * sizeof(uint64_t));
        bd->row_pos = sl_arena_alloc(ar, cap * sizeof(uint64_t));
    }
    bool ginv = true;
    for (uint32_t g = 0; g < b->G && bd->groups; g++) {
        bd->groups[g].inverse = sl_arena_alloc(ar, cap * sizeof(int32_t));
        bd->groups[g].U = 0;
        ginv = ginv && bd->groups[g].inverse;
    }
    if (!ginv || !bd->lengths || !bd->dense || !bd->labels || (b->o.sample_ids && !bd->ids) ||
        (b->has_times && !bd->times) || (bd->track_rows && (!bd->row_split || !bd->row_pos))) {
        sl_batch_destroy(batch);
        return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory for a batch of %u rows",
                            bd->cap);
    }
    bd->cur = batch;
    return SL_OK;
}

/* Gather the rows of runs[0..nr) (m rows in all) of src into bd at row
 * bd->n. Rows ascend, so each key's values are found by the per-key cursor
 * (cur_row, cur_off) instead of an offsets table. */
sl_err_t dpp_batcher_gather_runs(sl_worker_batcher_t *b, builder_t *bd, const sl_batch_t *src,
                                 const run_t *runs, uint32_t nr, uint32_t m, const float *weights,
                                 uint32_t wbase, const sl_worker_rows_origin_t *origin,
                                 sl_error_t *err)
{
    const uint32_t N = src->batch_size;
    const sl_kjt_t *kjt = &src->sparse;
    /* This gather fills the whole batch (the usual case: a stripe's rows
     * all kept, batches within it): count each key's values first and copy
     * them straight to their place in the batch, instead of into the
     * per-key vectors and from there into the batch (a second copy of
     * every value). */
    bool direct = bd == &b->batch && bd->n == 0 && m == bd->cap && b->F > 0;
    if (bd->n == 0) { /* nothing of a failed gather's direct values is kept */
        bd->direct_vals = NULL;
        bd->direct_wts = NULL;
        bd->direct_total = 0;
    }
    uint64_t total = 0;
    if (direct) {
        for (uint32_t k = 0; direct && k < b->F; k++) {
            const int32_t *L = kjt->lengths + (size_t)k * N;
            uint64_t ks = 0;
            bool neg = false;
            for (uint32_t q = 0; q < nr && !neg; q++)
                ks += sl_lengths_sum(L + runs[q].row, runs[q].count, &neg);
            b->key_at[k] = total;
            total += ks;
            /* bad lengths: the gather below says what is wrong */
            direct = !neg && ks <= b->key_off[k + 1] - b->key_off[k];
        }
    }
    if (direct) {
        sl_arena_t *ar = bd->cur->arena;
        bd->direct_vals = sl_arena_alloc(ar, sl_mul_size(total ? total : 1, sizeof(int64_t)));
        bd->direct_wts =
            b->weighted ? sl_arena_alloc(ar, sl_mul_size(total ? total : 1, sizeof(float))) : NULL;
        bd->direct_total = total;
        if (!bd->direct_vals || (b->weighted && !bd->direct_wts))
            return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory for a batch's values");
    }
    for (uint32_t k = 0; k < b->F; k++) {
        const int32_t *L = kjt->lengths + (size_t)k * N;
        int32_t *dl = bd->lengths + (size_t)k * bd->cap + bd->n;
        uint32_t r = b->cur_row[k];
        uint64_t off = b->cur_off[k];
        uint32_t i = 0;
        for (uint32_t q = 0; q < nr; q++) {
            uint32_t s = runs[q].row, c = runs[q].count;
            while (r < s)
                off += (uint64_t)L[r++];
            memcpy(dl + i, L + s, (size_t)c * sizeof *L);
            bool neg;
            uint64_t sum = sl_lengths_sum(L + s, c, &neg);
            if (neg || off + sum > b->key_off[k + 1] - b->key_off[k])
                return sl_error_set(err, SL_ERR_INVALID,
                                    "batcher: key '%s' lengths pass its values", b->keys[k]);
            if (direct) {
                /* the counting pass summed these lengths: within total */
                if (sum) {
                    memcpy(bd->direct_vals + b->key_at[k], kjt->values + b->key_off[k] + off,
                           sum * sizeof(int64_t));
                    if (b->weighted)
                        memcpy(bd->direct_wts + b->key_at[k], kjt->weights + b->key_off[k] + off,
                               sum * sizeof(float));
                    b->key_at[k] += sum;
                }
                off += sum;
                r = s + c;
                i += c;
                continue;
            }
            if (sum && (!dpp_vec_reserve(b->a, &bd->vals[k], sum * sizeof(int64_t)) ||
                        (b->weighted && !dpp_vec_reserve(b->a, &bd->wts[k], sum * sizeof(float)))))
                return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory");
            if (sum) {
                memcpy(bd->vals[k].p + bd->vals[k].len, kjt->values + b->key_off[k] + off,
                       sum * sizeof(int64_t));
                bd->vals[k].len += sum * sizeof(int64_t);
            }
            if (sum && b->weighted) {
                memcpy(bd->wts[k].p + bd->wts[k].len, kjt->weights + b->key_off[k] + off,
                       sum * sizeof(float));
                bd->wts[k].len += sum * sizeof(float);
            }
            off += sum;
            r = s + c;
            i += c;
        }
        b->cur_row[k] = r;
        b->cur_off[k] = off;
    }
    if (b->G) {
        sl_err_t rc = dpp_batcher_gather_groups(b, bd, src, runs, nr, err);
        if (rc) return rc;
    }
    uint32_t i = 0;
    for (uint32_t q = 0; q < nr; q++) {
        uint32_t s = runs[q].row, c = runs[q].count;
        size_t at = (size_t)bd->n + i;
        if (b->D)
            memcpy(bd->dense + at * b->D, src->dense.data + (size_t)s * b->D,
                   (size_t)c * b->D * sizeof(float));
        if (b->weight_label) {
            for (uint32_t j = 0; j < c; j++) {
                float *dst = bd->labels + (at + j) * b->T_out;
                if (b->T)
                    memcpy(dst, src->labels.data + (size_t)(s + j) * b->T, b->T * sizeof(float));
                dst[b->T] = weights ? weights[wbase + i + j] : 1.0f;
            }
        } else if (b->T) {
            memcpy(bd->labels + at * b->T, src->labels.data + (size_t)s * b->T,
                   (size_t)c * b->T * sizeof(float));
        }
        if (bd->ids) memcpy(bd->ids + at, src->sample_ids + s, (size_t)c * sizeof(int64_t));
        if (bd->times) memcpy(bd->times + at, src->record_ms + s, (size_t)c * sizeof(int64_t));
        if (bd->track_rows)
            for (uint32_t j = 0; j < c; j++) {
                bd->row_split[at + j] = origin->split_id;
                bd->row_pos[at + j] = origin->row + s + j;
            }
        i += c;
    }
    if (bd->n == 0) {
        bd->first = (sl_batch_origin_t){.job_id = b->o.job_id,
                                        .epoch = origin->epoch,
                                        .split_id = origin->split_id,
                                        .first_row = origin->row + runs[0].row};
    }
    bd->n += m;
    return SL_OK;
}

/* Turn what bd holds into a finished batch (ownership to the caller). */
sl_err_t dpp_batcher_builder_finish(sl_worker_batcher_t *b, builder_t *bd, sl_batch_t **out,
                                    sl_error_t *err)
{
    sl_batch_t *batch = bd->cur;
    sl_arena_t *ar = batch->arena;
    uint32_t n = bd->n, F = b->F;
    if (n < bd->cap)
        for (uint32_t k = 1; k < F; k++)
            memmove(bd->lengths + (size_t)k * n, bd->lengths + (size_t)k * bd->cap,
                    (size_t)n * sizeof(int32_t));
    uint64_t total = bd->direct_total;
    for (uint32_t k = 0; k < F; k++)
        total += bd->vals[k].len / sizeof(int64_t);
    sl_kjt_t *kjt = &batch->sparse;
    kjt->num_keys = F;
    kjt->stride = n;
    kjt->num_values = total;
    kjt->lengths = bd->lengths;
    kjt->keys = sl_arena_alloc(ar, (F ? F : 1) * sizeof(char *));
    if (bd->direct_vals) { /* gathered in place */
        kjt->values = bd->direct_vals;
        kjt->weights = bd->direct_wts;
    } else {
        kjt->values = sl_arena_alloc(ar, sl_mul_size(total, sizeof(int64_t)));
        kjt->weights = b->weighted ? sl_arena_alloc(ar, sl_mul_size(total, sizeof(float))) : NULL;
    }
    bd->direct_vals = NULL;
    bd->direct_wts = NULL;
    bd->direct_total = 0;
    const char **dn = sl_arena_alloc(ar, (b->D ? b->D : 1) * sizeof(char *));
    const char **ln = sl_arena_alloc(ar, (b->T_out ? b->T_out : 1) * sizeof(char *));
    if (!kjt->keys || !kjt->values || (b->weighted && !kjt->weights) || !dn || !ln) goto nomem;
    for (uint32_t k = 0; k < F; k++)
        if (!(kjt->keys[k] = sl_arena_strdup(ar, b->keys[k]))) goto nomem;
    for (uint32_t j = 0; j < b->D; j++)
        if (!(dn[j] = sl_arena_strdup(ar, b->dense_names[j]))) goto nomem;
    for (uint32_t j = 0; j < b->T_out; j++)
        if (!(ln[j] = sl_arena_strdup(ar, b->label_names[j]))) goto nomem;
    uint64_t at = 0;
    for (uint32_t k = 0; k < F; k++) {
        uint64_t c = bd->vals[k].len / sizeof(int64_t);
        if (c) memcpy(kjt->values + at, bd->vals[k].p, c * sizeof(int64_t));
        if (c && b->weighted) memcpy(kjt->weights + at, bd->wts[k].p, c * sizeof(float));
        at += c;
        bd->vals[k].len = bd->wts[k].len = 0;
    }
    if (b->G && !dpp_batcher_finish_groups(b, bd, batch)) goto nomem;
    batch->batch_size = n;
    batch->dense = (sl_dense_t){.rows = n, .cols = b->D, .names = dn, .data = bd->dense};
    batch->labels = (sl_dense_t){.rows = n, .cols = b->T_out, .names = ln, .data = bd->labels};
    batch->sample_ids = bd->ids;
    batch->record_ms = bd->times;
    batch->origin = bd->first;
    bd->cur = NULL;
    bd->n = 0;
    *out = batch;
    return SL_OK;
nomem:
    return sl_error_set(err, SL_ERR_NOMEM, "batcher: out of memory finishing a batch");
}

/* Forget the rows bd holds (its vectors are kept for reuse). @return how
 * many. */
uint32_t dpp_batcher_builder_clear(sl_worker_batcher_t *b, builder_t *bd)
{
    uint32_t n = bd->n;
    for (uint32_t k = 0; bd->vals && k < b->F; k++)
        bd->vals[k].len = bd->wts[k].len = 0;
    for (uint32_t g = 0; bd->groups && g < b->G; g++) {
        gbuild_t *gb = &bd->groups[g];
        for (uint32_t k = 0; k < b->gs[g].F; k++)
            gb->lens[k].len = gb->vals[k].len = gb->wts[k].len = 0;
        gb->U = 0;
    }
    dpp_batcher_reset_maps(b);
    sl_batch_destroy(bd->cur);
    bd->cur = NULL;
    bd->n = 0;
    bd->direct_vals = NULL;
    bd->direct_wts = NULL;
    bd->direct_total = 0;
    return n;
}

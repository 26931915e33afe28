/* The batcher (batcher.h). Rows are gathered in runs of consecutive
 * selected rows, so an unfiltered stripe costs a few memcpy per column and
 * batch, not work per row. Dense, labels, ids and lengths go straight into
 * the batch's arena (allocated for a full batch up front); the ids of each
 * key grow in a reusable vector per key and are copied once, contiguous, when
 * the batch is complete. */
#include "dpp/worker/batcher/batcher.h"

#include <stdio.h>
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

static void free_strs(const sl_allocator_t *a, char **v, uint32_t n)
{
    if (!v) return;
    for (uint32_t i = 0; i < n; i++)
        sl_strfree(a, v[i]);
    sl_free(a, v, (size_t)n * sizeof *v);
}

static void vecs_free(const sl_allocator_t *a, vec_t *v, uint32_t n)
{
    if (!v) return;
    for (uint32_t k = 0; k < n; k++)
        sl_free(a, v[k].p, v[k].cap);
    sl_free(a, v, (size_t)(n ? n : 1) * sizeof *v);
}

static void builder_free(const sl_allocator_t *a, builder_t *bd, uint32_t F, uint32_t G,
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
    builder_free(a, &b->batch, b->F, b->G, b->gs);
    builder_free(a, &b->window, b->F, b->G, b->gs);
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

static sl_err_t builder_setup(sl_worker_batcher_t *b, builder_t *bd)
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
        !b->cur_off || !b->key_at || !b->span || !b->runs || builder_setup(b, &b->batch) ||
        builder_setup(b, &b->window))
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

/* Start a batch in bd: an arena with room for cap rows. */
static sl_err_t builder_begin(sl_worker_batcher_t *b, builder_t *bd, sl_error_t *err)
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
static sl_err_t gather_runs(sl_worker_batcher_t *b, builder_t *bd, const sl_batch_t *src,
                            const run_t *runs, uint32_t nr, uint32_t m, const float *weights,
                            uint32_t wbase, const sl_worker_rows_origin_t *origin, sl_error_t *err)
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
static sl_err_t builder_finish(sl_worker_batcher_t *b, builder_t *bd, sl_batch_t **out,
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

/* Start the random sequence of the batch that begins at row from of the
 * range's split: its row order depends on nothing read before it. */
static void range_reseed(sl_worker_batcher_t *b, uint64_t from)
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
        range_reseed(b, to_row);
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
static sl_err_t emit_batch(sl_worker_batcher_t *b, uint64_t to_row, sl_error_t *err)
{
    sl_batch_t *batch;
    sl_err_t rc = builder_finish(b, &b->batch, &batch, err);
    if (rc) return rc;
    sl_worker_lease_origin_t lease, *lp;
    stamp(b, &batch->origin, batch->batch_size, to_row, &lease, &lp);
    return b->emit(b->ctx, batch, lp, err);
}

/* May the next batch go to the direct hook, if it fills in one gather? */
static bool direct_ok(const sl_worker_batcher_t *b)
{
    return b->direct && !b->window.cap && b->batch.n == 0 && !b->G && !b->has_times &&
           !b->weight_label;
}

/* A whole batch of the runs[0..nr) (m rows) of rows to the direct hook,
 * numbered as emit_batch numbers a built one. */
static sl_err_t emit_direct(sl_worker_batcher_t *b, const sl_batch_t *rows, uint32_t nr, uint32_t m,
                            const sl_worker_rows_origin_t *origin, uint64_t to_row, sl_error_t *err)
{
    /* Each key's values of the batch, found from the per-key cursor (rows
     * ascend within a call) and checked as gather_runs checks them. */
    const uint32_t N = rows->batch_size;
    const uint32_t s0 = b->runs[0].row, e = b->runs[nr - 1].row + b->runs[nr - 1].count;
    for (uint32_t k = 0; k < b->F; k++) {
        const int32_t *L = rows->sparse.lengths + (size_t)k * N;
        const uint64_t room = b->key_off[k + 1] - b->key_off[k];
        bool n1 = false, n2 = false;
        uint64_t off = b->cur_off[k] + sl_lengths_sum(L + b->cur_row[k], s0 - b->cur_row[k], &n1);
        uint64_t span = sl_lengths_sum(L + s0, e - s0, &n2);
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
static sl_err_t flush_window(sl_worker_batcher_t *b, uint64_t to_row, sl_error_t *err)
{
    builder_t *w = &b->window;
    if (w->n == 0) return SL_OK;
    uint64_t *rs = w->row_split, *rp = w->row_pos;
    sl_batch_t *win;
    sl_err_t rc = builder_finish(b, w, &win, err);
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
        if (!bd->cur && (rc = builder_begin(b, bd, err))) goto out;
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
        if (bd->n == bd->cap && (rc = emit_batch(b, to_row, err))) goto out;
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
static bool take_ok(const sl_worker_batcher_t *b, const sl_batch_t *rows, uint32_t n)
{
    return n == b->batch.cap && n == rows->batch_size && !b->window.cap && b->batch.n == 0 &&
           !b->batch.cur && !b->G && !rows->num_groups && !b->weight_label &&
           rows->sparse.stride == n && (!b->D || rows->dense.rows == n) &&
           (!b->T || rows->labels.rows == n) && all_named(rows->sparse.keys, b->F) &&
           all_named(rows->dense.names, b->D) && all_named(rows->labels.names, b->T);
}

/* rows, whose every buffer lies in owned (taken here), as the next batch:
 * each key's lengths checked against its values as gather_runs checks
 * them, then numbered as emit_batch numbers a built batch. */
static sl_err_t emit_taken(sl_worker_batcher_t *b, const sl_batch_t *rows, sl_arena_t *owned,
                           const sl_worker_rows_origin_t *origin, sl_error_t *err)
{
    const uint32_t n = rows->batch_size;
    for (uint32_t k = 0; k < b->F; k++) {
        bool neg = false;
        uint64_t sum = sl_lengths_sum(rows->sparse.lengths + (size_t)k * n, n, &neg);
        if (neg || b->key_off[k + 1] < b->key_off[k] || sum != b->key_off[k + 1] - b->key_off[k]) {
            sl_arena_destroy(owned);
            return sl_error_set(err, SL_ERR_INVALID,
                                "batcher: key '%s' lengths pass its values (rows 0..%u)",
                                b->keys[k], n);
        }
    }
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
    if (origin->key_offsets != NULL) {
        if (origin->key_offsets[b->F] != rows->sparse.num_values)
            return sl_error_set(err, SL_ERR_INVALID,
                                "batcher: key offsets end at %llu, not at the %llu values",
                                (unsigned long long)origin->key_offsets[b->F],
                                (unsigned long long)rows->sparse.num_values);
        memcpy(b->key_off, origin->key_offsets, ((size_t)b->F + 1) * sizeof *b->key_off);
    } else
        sl_kjt_key_offsets(&rows->sparse, b->key_off);
    if (b->G && (rc = dpp_batcher_prepare_groups(b, rows, err))) return rc;
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
        bool whole = m == bd->cap && direct_ok(b);
        bool take = !whole && owned && *owned && !selected && i == 0 && take_ok(b, rows, n);
        if (!bd->cur && !whole && !take && (rc = builder_begin(b, bd, err))) return rc;
        if (take) {
            /* the rows are the batch: taken with their arena, not copied */
            sl_arena_t *ar = *owned;
            *owned = NULL;
            if (b->ranged) b->range_next = origin->end_row ? origin->end_row : origin->row + n;
            if ((rc = emit_taken(b, rows, ar, origin, err))) return rc;
            i += m;
            continue;
        }
        /* runs of consecutive rows among selected[i, i+m) */
        uint32_t nr = 0;
        for (uint32_t j = 0; j < m; j++) {
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
            if ((rc = emit_direct(b, rows, nr, m, origin, b->range_next, err))) return rc;
            i += m;
            continue;
        }
        if ((rc = gather_runs(b, bd, rows, b->runs, nr, m, weights, i, origin, err))) return rc;
        i += m;
        if (b->ranged) b->range_next = origin->end_row ? origin->end_row : origin->row + prev + 1;
        if (bd->n == bd->cap) {
            /* in a range, a full batch ends right after its last row */
            rc = b->window.cap ? flush_window(b, b->range_next, err)
                               : emit_batch(b, b->range_next, err);
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

/* Forget the rows bd holds (its vectors are kept for reuse). @return how
 * many. */
static uint32_t builder_clear(sl_worker_batcher_t *b, builder_t *bd)
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

/* Drain the window and hand out the short batch being built, or drop it
 * with drop_last (in a range, it ends at to_row). @return how many rows
 * were dropped in *dropped. */
static sl_err_t finish_short(sl_worker_batcher_t *b, uint64_t to_row, uint32_t *dropped,
                             sl_error_t *err)
{
    *dropped = 0;
    sl_err_t rc = flush_window(b, to_row, err);
    if (rc) return rc;
    if (b->batch.n == 0) return SL_OK;
    if (b->o.drop_last) {
        *dropped = builder_clear(b, &b->batch);
        b->stats.rows_dropped += *dropped;
        return SL_OK;
    }
    return emit_batch(b, to_row, err);
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
    range_reseed(b, lease->from_row);
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
    b->stats.rows_discarded += builder_clear(b, &b->window);
    b->stats.rows_discarded += builder_clear(b, &b->batch);
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

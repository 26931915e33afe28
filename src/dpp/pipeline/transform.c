/* sl_pipeline_plan_transform: run a plan's transforms over one batch.
 *
 * Every sparse feature of the batch becomes a column view (dpp_col_t) of
 * its rows in the plain KJT or in its dedup group's unique KJT; transforms
 * work on the views (in place where the shape stays, new arena buffers for
 * created features), then the KJTs are reassembled from the views that are
 * outputs. When nothing moved and nothing was created or dropped at a
 * place, its KJT is kept as it is (the common case of per-id transforms
 * such as sigrid_hash: no copy at all).
 *
 * Output order: surviving input keys in input order, then created features
 * in transform order. A created feature goes to the place of its inputs:
 * the plain KJT, or group g's unique KJT when every input is in group g
 * (so it is computed once per unique row). A cross of features from two
 * places is computed per batch row (group rows reached through the inverse
 * indices) and goes to the plain KJT. */
#include "dpp/pipeline/plan_internal.h"

#include <math.h>
#include <string.h>

static bool listed(char *const *names, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

typedef struct state {
    const sl_pipeline_plan_t *plan;
    sl_batch_t *batch;
    dpp_col_t *cols;
    uint32_t num_cols;
    uint32_t num_input_cols;
    bool *dense_keep; /* [D] */
} state_t;

static sl_err_t add_place(state_t *s, const sl_kjt_t *kjt, int loc, sl_error_t *err)
{
    uint64_t at = 0;
    for (uint32_t k = 0; k < kjt->num_keys; k++) {
        dpp_col_t *c = &s->cols[s->num_cols++];
        memset(c, 0, sizeof *c);
        c->name = kjt->keys[k];
        c->loc = loc;
        c->stride = kjt->stride;
        c->lengths = kjt->lengths + (size_t)k * kjt->stride;
        bool negative;
        uint64_t n = sl_lengths_sum(c->lengths, kjt->stride, &negative);
        if (negative || at + n > kjt->num_values)
            return sl_error_set(err, SL_ERR_INVALID, "transform: key '%s' overruns the values",
                                c->name);
        c->values = kjt->values + at;
        c->weights = kjt->weights != NULL ? kjt->weights + at : NULL;
        c->num_values = n;
        c->weighted =
            kjt->weights != NULL && listed(s->plan->weighted, s->plan->num_weighted, c->name);
        c->output = listed(s->plan->keep, s->plan->num_keep, c->name);
        at += n;
    }
    return SL_OK;
}

static dpp_col_t *find(state_t *s, const char *name)
{
    for (uint32_t i = s->num_cols; i-- > 0;)
        if (strcmp(s->cols[i].name, name) == 0) return &s->cols[i];
    return NULL;
}

static const int32_t *inverse_of(const state_t *s, int loc)
{
    return loc < 0 ? NULL : s->batch->groups[loc].inverse;
}

/* fill_missing on a dense feature right before log1p on the same one: both
 * in one pass over the column (a value is loaded and stored once). */
static bool fill_then_log1p(const dpp_transform_t *t, const dpp_transform_t *next)
{
    return t->op == OP_FILL_MISSING && next != NULL && next->op == OP_LOG1P &&
           strcmp(t->in[0], next->in[0]) == 0;
}

/* Transform ti (t; next is the one after it, or NULL); *fused: next was
 * done too. */
static sl_err_t run(state_t *s, const dpp_transform_t *t, const dpp_transform_t *next, uint32_t ti,
                    bool *fused, sl_error_t *err)
{
    sl_batch_t *batch = s->batch;
    sl_dense_t *dense = &batch->dense;
    if (t->op >= OP_FILL_MISSING && t->op <= OP_BUCKETIZE) {
        int c = -1;
        for (uint32_t i = 0; i < dense->cols && c < 0; i++)
            if (dense->names != NULL && strcmp(dense->names[i], t->in[0]) == 0) c = (int)i;
        if (c < 0)
            return sl_error_set(err, SL_ERR_INVALID,
                                "transform %u (%s): dense feature '%s' is not in the batch", ti,
                                t->out != NULL ? "bucketize" : "dense", t->in[0]);
        if (fill_then_log1p(t, next)) {
            dpp_dense_fill_log1p(dense->data, dense->rows, dense->cols, (uint32_t)c, t->value);
            *fused = true;
            return SL_OK;
        }
        if (t->op != OP_BUCKETIZE) {
            dpp_dense_apply(t, dense->data, dense->rows, dense->cols, (uint32_t)c);
            return SL_OK;
        }
        dpp_col_t *out = &s->cols[s->num_cols];
        memset(out, 0, sizeof *out);
        out->name = t->out;
        out->loc = -1;
        out->output = true;
        out->moved = true;
        sl_err_t rc = dpp_bucketize(t, dense->data, batch->batch_size, dense->cols, (uint32_t)c,
                                    batch->arena, out, err);
        if (rc == SL_OK) s->num_cols++;
        return rc;
    }
    dpp_col_t *a = find(s, t->in[0]);
    if (a == NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "transform %u: sparse feature '%s' is not in the batch", ti, t->in[0]);
    switch (t->op) {
    case OP_SIGRID_HASH:
        dpp_sigrid_hash(a->values, a->num_values, t->salt, t->table_size);
        break;
    case OP_MODULO:
        dpp_modulo(a->values, a->num_values, t->divisor);
        break;
    case OP_MAP_VOCAB:
        dpp_map_vocab(a->values, a->num_values, t->vocab, t->vocab_default);
        break;
    case OP_FIRST_X:
        dpp_first_x(a, t->x);
        break;
    case OP_DEDUP_IDS:
        return dpp_dedup_ids(a, batch->arena, err);
    case OP_CLAMP_WEIGHTS:
        if (a->weights != NULL) dpp_clamp_weights(a->weights, a->num_values, t->min, t->max);
        break;
    case OP_CROSS:
    case OP_NGRAM: {
        dpp_col_t *b = NULL;
        if (t->op == OP_CROSS && (b = find(s, t->in[1])) == NULL)
            return sl_error_set(err, SL_ERR_INVALID,
                                "transform %u: sparse feature '%s' is not in the batch", ti,
                                t->in[1]);
        /* find() may return views that later move; out is appended after. */
        dpp_col_t *out = &s->cols[s->num_cols];
        memset(out, 0, sizeof *out);
        out->name = t->out;
        out->output = true;
        sl_err_t rc;
        if (t->op == OP_NGRAM) {
            out->loc = a->loc;
            rc = dpp_ngram(a, t->n, t->salt, t->table_size, batch->arena, out, err);
        } else if (a->loc == b->loc) {
            out->loc = a->loc;
            rc = dpp_cross(a, NULL, b, NULL, a->stride, t->salt, t->table_size, batch->arena, out,
                           err);
        } else {
            out->loc = -1;
            rc = dpp_cross(a, inverse_of(s, a->loc), b, inverse_of(s, b->loc), batch->batch_size,
                           t->salt, t->table_size, batch->arena, out, err);
        }
        if (rc == SL_OK) s->num_cols++;
        return rc;
    }
    default:
        break;
    }
    return SL_OK;
}

/* Rebuild the KJT at loc from its output views, unless nothing changed. */
static sl_err_t assemble(state_t *s, sl_kjt_t *kjt, int loc, uint32_t stride, sl_error_t *err)
{
    uint32_t keys = 0;
    uint64_t values = 0;
    bool weighted = false, same = true;
    for (uint32_t i = 0; i < s->num_cols; i++) {
        const dpp_col_t *c = &s->cols[i];
        if (c->loc != loc) continue;
        if (!c->output || c->moved || i >= s->num_input_cols) same = false;
        if (!c->output) continue;
        keys++;
        values += c->num_values;
        weighted |= c->weighted;
    }
    if (same) {
        /* Weights of a KJT whose weighted features are all gone are 1.0
         * filler: drop them. */
        if (!weighted) kjt->weights = NULL;
        return SL_OK;
    }
    sl_arena_t *arena = s->batch->arena;
    sl_kjt_t out;
    memset(&out, 0, sizeof out);
    out.num_keys = keys;
    out.stride = stride;
    out.num_values = values;
    out.keys = sl_arena_alloc(arena, (size_t)keys * sizeof(char *));
    out.lengths = sl_arena_alloc(arena, sl_mul_size((size_t)keys * stride, sizeof(int32_t)));
    out.values = sl_arena_alloc(arena, sl_mul_size(values, sizeof(int64_t)));
    out.weights = weighted ? sl_arena_alloc(arena, sl_mul_size(values, sizeof(float))) : NULL;
    if ((keys > 0 && out.keys == NULL) || ((size_t)keys * stride > 0 && out.lengths == NULL) ||
        (values > 0 && (out.values == NULL || (weighted && out.weights == NULL))))
        return sl_error_set(err, SL_ERR_NOMEM, "transform: out of memory for %u keys, %llu ids",
                            keys, (unsigned long long)values);
    uint32_t k = 0;
    uint64_t at = 0;
    for (uint32_t i = 0; i < s->num_cols; i++) {
        const dpp_col_t *c = &s->cols[i];
        if (c->loc != loc || !c->output) continue;
        if (i >= s->num_input_cols) {
            out.keys[k] = sl_arena_strdup(arena, c->name);
            if (out.keys[k] == NULL)
                return sl_error_set(err, SL_ERR_NOMEM, "transform: out of memory");
        } else {
            out.keys[k] = c->name;
        }
        if (stride > 0)
            memcpy(out.lengths + (size_t)k * stride, c->lengths, (size_t)stride * sizeof(int32_t));
        if (c->num_values > 0) {
            memcpy(out.values + at, c->values, (size_t)c->num_values * sizeof(int64_t));
            if (weighted) {
                if (c->weighted && c->weights != NULL)
                    memcpy(out.weights + at, c->weights, (size_t)c->num_values * sizeof(float));
                else
                    for (uint64_t j = 0; j < c->num_values; j++)
                        out.weights[at + j] = 1.0f;
            }
        }
        at += c->num_values;
        k++;
    }
    *kjt = out;
    return SL_OK;
}

/* Drop dense columns that are not outputs. */
static sl_err_t assemble_dense(state_t *s, sl_error_t *err)
{
    sl_dense_t *d = &s->batch->dense;
    uint32_t kept = 0;
    for (uint32_t c = 0; c < d->cols; c++) {
        s->dense_keep[c] =
            d->names == NULL || listed(s->plan->keep, s->plan->num_keep, d->names[c]);
        kept += s->dense_keep[c];
    }
    if (kept == d->cols) return SL_OK;
    const char **names = sl_arena_alloc(s->batch->arena, (size_t)kept * sizeof(char *));
    float *data =
        sl_arena_alloc(s->batch->arena, sl_mul_size((size_t)kept * d->rows, sizeof(float)));
    if ((kept > 0 && names == NULL) || ((size_t)kept * d->rows > 0 && data == NULL))
        return sl_error_set(err, SL_ERR_NOMEM, "transform: out of memory for dense");
    uint32_t j = 0;
    for (uint32_t c = 0; c < d->cols; c++)
        if (s->dense_keep[c]) names[j++] = d->names[c];
    for (uint32_t r = 0; r < d->rows; r++) {
        const float *src = d->data + (size_t)r * d->cols;
        float *dst = data + (size_t)r * kept;
        j = 0;
        for (uint32_t c = 0; c < d->cols; c++)
            if (s->dense_keep[c]) dst[j++] = src[c];
    }
    d->cols = kept;
    d->names = names;
    d->data = kept > 0 ? data : NULL;
    return SL_OK;
}

/* Would the passes below leave batch as it is? Yes when no transform is
 * left to run (none, or every one ran in the reader at decode), the batch
 * has no dedup groups and no weights (assemble drops weights no output
 * carries), and every feature and dense column is an output. Placing the
 * columns sums every length (add_place): on a Parquet job at --threads 2
 * that pass was 1.3 % of the worker, the transform thread's largest cost
 * after the encode (docs/BENCHMARKS.md, "Parquet source, sixteenth
 * pass"), for a batch that comes out unchanged. Its check is not lost:
 * the encoder checks that the lengths are non-negative and sum to the
 * values as it copies them, and a cache file's writer validates the
 * batch (sl_batch_validate). */
static bool unchanged(const sl_pipeline_plan_t *plan, const sl_batch_t *batch)
{
    if (batch->num_groups || batch->sparse.weights) return false;
    for (uint32_t i = 0; i < plan->num_transforms; i++)
        if (!plan->transforms[i].at_decode) return false;
    const sl_kjt_t *kjt = &batch->sparse;
    for (uint32_t k = 0; k < kjt->num_keys; k++)
        if (!listed(plan->keep, plan->num_keep, kjt->keys[k])) return false;
    const sl_dense_t *d = &batch->dense;
    for (uint32_t c = 0; d->names && c < d->cols; c++)
        if (!listed(plan->keep, plan->num_keep, d->names[c])) return false;
    return true;
}

sl_err_t dpp_transform_batch(const sl_pipeline_plan_t *plan, sl_batch_t *batch, sl_error_t *err)
{
    if (batch->sparse.stride != batch->batch_size && batch->sparse.num_keys > 0)
        return sl_error_set(err, SL_ERR_INVALID, "transform: plain KJT stride %u != batch size %u",
                            batch->sparse.stride, batch->batch_size);
    if (batch->dense.cols > 0 && batch->dense.rows != batch->batch_size)
        return sl_error_set(err, SL_ERR_INVALID, "transform: dense rows %u != batch size %u",
                            batch->dense.rows, batch->batch_size);
    if (unchanged(plan, batch)) return SL_OK;
    state_t s = {plan, batch, NULL, 0, 0, NULL};
    uint32_t inputs = batch->sparse.num_keys;
    for (uint32_t g = 0; g < batch->num_groups; g++)
        inputs += batch->groups[g].unique.num_keys;
    uint32_t created = 0;
    for (uint32_t i = 0; i < plan->num_transforms; i++)
        created += plan->transforms[i].out != NULL;
    s.cols = sl_arena_alloc(batch->arena, ((size_t)inputs + created + 1) * sizeof(dpp_col_t));
    s.dense_keep = sl_arena_alloc(batch->arena, (size_t)batch->dense.cols + 1);
    if (s.cols == NULL || s.dense_keep == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "transform: out of memory");
    sl_err_t rc = add_place(&s, &batch->sparse, -1, err);
    for (uint32_t g = 0; g < batch->num_groups && rc == SL_OK; g++)
        rc = add_place(&s, &batch->groups[g].unique, (int)g, err);
    if (rc != SL_OK) return rc;
    s.num_input_cols = s.num_cols;
    for (uint32_t i = 0; i < plan->num_transforms && rc == SL_OK; i++) {
        if (plan->transforms[i].at_decode) continue; /* the reader did it */
        bool fused = false;
        const dpp_transform_t *next =
            i + 1 < plan->num_transforms ? &plan->transforms[i + 1] : NULL;
        rc = run(&s, &plan->transforms[i], next, i, &fused, err);
        i += fused;
    }
    if (rc != SL_OK) return rc;
    if ((rc = assemble(&s, &batch->sparse, -1, batch->batch_size, err)) != SL_OK) return rc;
    uint32_t kept = 0;
    for (uint32_t g = 0; g < batch->num_groups; g++) {
        sl_ikjt_t *grp = &batch->groups[g];
        rc = assemble(&s, &grp->unique, (int)g, grp->unique.stride, err);
        if (rc != SL_OK) return rc;
        /* A group whose features were all inputs only is gone. */
        if (grp->unique.num_keys > 0) batch->groups[kept++] = *grp;
    }
    batch->num_groups = kept;
    return assemble_dense(&s, err);
}

/* sl_batch_t: creation, whole-batch validation, expansion and release. */
#include "sluice/tensor.h"
#include "tensor/tensor_internal.h"

#include <string.h>

#include "common/err.h"

/* sl_dense_init and sl_dense_init_unset: zeroed values or not. */
static sl_err_t dense_init(sl_dense_t *d, sl_arena_t *arena, uint32_t rows, uint32_t cols,
                           const char *const *names, bool zero)
{
    memset(d, 0, sizeof *d);
    d->rows = rows;
    d->cols = cols;
    size_t n = sl_mul_size(rows, cols);
    if (n == SIZE_MAX) return SL_ERR_INVALID;
    d->data = zero ? sl_arena_calloc(arena, n, sizeof(float))
                   : sl_arena_alloc(arena, sl_mul_size(n, sizeof(float)));
    if (d->data == NULL) return SL_ERR_NOMEM;
    if (names != NULL && cols > 0) {
        d->names = sl_arena_alloc(arena, (size_t)cols * sizeof(char *));
        if (d->names == NULL) return SL_ERR_NOMEM;
        for (uint32_t c = 0; c < cols; c++) {
            if (names[c] == NULL) return SL_ERR_INVALID;
            d->names[c] = sl_arena_strdup(arena, names[c]);
            if (d->names[c] == NULL) return SL_ERR_NOMEM;
        }
    }
    return SL_OK;
}

sl_err_t sl_dense_init(sl_dense_t *d, sl_arena_t *arena, uint32_t rows, uint32_t cols,
                       const char *const *names)
{
    return dense_init(d, arena, rows, cols, names, true);
}

sl_err_t sl_dense_init_unset(sl_dense_t *d, sl_arena_t *arena, uint32_t rows, uint32_t cols,
                             const char *const *names)
{
    return dense_init(d, arena, rows, cols, names, false);
}

sl_batch_t *sl_batch_new(const sl_allocator_t *a)
{
    sl_arena_t *arena = sl_arena_new(a, 0);
    if (arena == NULL) return NULL;
    sl_batch_t *batch = sl_arena_calloc(arena, 1, sizeof *batch);
    if (batch == NULL) {
        sl_arena_destroy(arena);
        return NULL;
    }
    batch->arena = arena;
    return batch;
}

static sl_err_t check_dense(const sl_dense_t *d, uint32_t B, const char *what, sl_error_t *err)
{
    if (d->cols == 0) return SL_OK;
    if (d->rows != B)
        return sl_error_set(err, SL_ERR_INVALID, "%s has %u rows, batch has %u", what, d->rows, B);
    if (d->data == NULL && B > 0) return sl_error_set(err, SL_ERR_INVALID, "%s data missing", what);
    return SL_OK;
}

/* Group names go into messages through %s, where NULL is undefined. */
static const char *group_name(const sl_ikjt_t *g)
{
    return g->name != NULL ? g->name : "?";
}

/* A key must name one feature of the batch: not two in the plain KJT and the
 * groups. Quadratic in keys, which are tens to hundreds per batch. */
static sl_err_t check_keys_disjoint(const sl_batch_t *batch, sl_error_t *err)
{
    for (uint32_t g = 0; g < batch->num_groups; g++) {
        const sl_kjt_t *gk = &batch->groups[g].unique;
        for (uint32_t k = 0; k < gk->num_keys; k++) {
            if (sl_kjt_find_key(&batch->sparse, gk->keys[k]) >= 0)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "keys unique: '%s' is in the plain KJT and group '%s'",
                                    gk->keys[k], group_name(&batch->groups[g]));
            for (uint32_t h = 0; h < g; h++)
                if (sl_kjt_find_key(&batch->groups[h].unique, gk->keys[k]) >= 0)
                    return sl_error_set(
                        err, SL_ERR_INVALID, "keys unique: '%s' is in groups '%s' and '%s'",
                        gk->keys[k], group_name(&batch->groups[h]), group_name(&batch->groups[g]));
        }
    }
    return SL_OK;
}

static sl_err_t batch_validate(const sl_batch_t *batch, bool scan_lengths, sl_error_t *err)
{
    uint32_t B = batch->batch_size;
    sl_err_t rc;
    if (batch->sparse.num_keys > 0 && batch->sparse.stride != B)
        return sl_error_set(err, SL_ERR_INVALID, "plain KJT stride %u != batch size %u",
                            batch->sparse.stride, B);
    rc = scan_lengths ? sl_kjt_validate(&batch->sparse, err)
                      : sl_kjt_validate_shape(&batch->sparse, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "plain KJT: "); /* returns SL_OK when err is NULL */
        return rc;
    }
    if (batch->num_groups > 0 && batch->groups == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "%u groups declared, none present",
                            batch->num_groups);
    for (uint32_t g = 0; g < batch->num_groups; g++) {
        if (batch->groups[g].batch_size != B)
            return sl_error_set(err, SL_ERR_INVALID, "group %u has %u rows, batch has %u", g,
                                batch->groups[g].batch_size, B);
        SL_FORWARD_IF_ERROR(scan_lengths ? sl_ikjt_validate(&batch->groups[g], err)
                                         : sl_ikjt_validate_shape(&batch->groups[g], err));
    }
    SL_FORWARD_IF_ERROR(check_keys_disjoint(batch, err));
    SL_FORWARD_IF_ERROR(check_dense(&batch->dense, B, "dense", err));
    SL_FORWARD_IF_ERROR(check_dense(&batch->labels, B, "labels", err));
    return SL_OK;
}

sl_err_t sl_batch_validate(const sl_batch_t *batch, sl_error_t *err)
{
    return batch_validate(batch, true, err);
}

sl_err_t sl_batch_validate_shape(const sl_batch_t *batch, sl_error_t *err)
{
    return batch_validate(batch, false, err);
}

/* Append the buffers of src (stride B) after what dst already holds. */
static void append_kjt(sl_kjt_t *dst, uint32_t *key_at, uint64_t *value_at, const sl_kjt_t *src)
{
    size_t rows = (size_t)src->num_keys * src->stride;
    for (uint32_t k = 0; k < src->num_keys; k++)
        dst->keys[*key_at + k] = src->keys[k];
    if (rows > 0)
        memcpy(dst->lengths + (size_t)*key_at * dst->stride, src->lengths, rows * sizeof(int32_t));
    size_t n = (size_t)src->num_values;
    if (n > 0) {
        memcpy(dst->values + *value_at, src->values, n * sizeof(int64_t));
        if (dst->weights != NULL) {
            if (src->weights != NULL)
                memcpy(dst->weights + *value_at, src->weights, n * sizeof(float));
            else
                for (size_t i = 0; i < n; i++)
                    dst->weights[*value_at + i] = 1.0f;
        }
    }
    *key_at += src->num_keys;
    *value_at += n;
}

sl_err_t sl_batch_expand(const sl_batch_t *batch, sl_arena_t *arena, sl_kjt_t *out, sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(sl_batch_validate(batch, err));
    sl_kjt_t *expanded = NULL;
    if (batch->num_groups > 0) {
        expanded = sl_arena_alloc(arena, batch->num_groups * sizeof(sl_kjt_t));
        if (expanded == NULL) return sl_error_set(err, SL_ERR_NOMEM, "expand batch");
    }
    uint32_t keys = batch->sparse.num_keys;
    uint64_t values = batch->sparse.num_values;
    bool weighted = batch->sparse.weights != NULL;
    for (uint32_t g = 0; g < batch->num_groups; g++) {
        SL_FORWARD_IF_ERROR(sl_ikjt_expand(&batch->groups[g], arena, &expanded[g], err));
        keys += expanded[g].num_keys;
        values += expanded[g].num_values;
        weighted |= expanded[g].weights != NULL;
    }
    memset(out, 0, sizeof *out);
    out->num_keys = keys;
    out->stride = batch->batch_size;
    out->num_values = values;
    out->keys = sl_arena_alloc(arena, sl_mul_size(keys, sizeof(char *)));
    out->lengths =
        sl_arena_alloc(arena, sl_mul_size(sl_mul_size(keys, batch->batch_size), sizeof(int32_t)));
    out->values = sl_arena_alloc(arena, (size_t)values * sizeof(int64_t));
    out->weights = weighted ? sl_arena_alloc(arena, (size_t)values * sizeof(float)) : NULL;
    if (out->keys == NULL || out->lengths == NULL || out->values == NULL ||
        (weighted && out->weights == NULL))
        return sl_error_set(err, SL_ERR_NOMEM, "expand batch: %u keys, %llu values", keys,
                            (unsigned long long)values);
    uint32_t key_at = 0;
    uint64_t value_at = 0;
    append_kjt(out, &key_at, &value_at, &batch->sparse);
    for (uint32_t g = 0; g < batch->num_groups; g++)
        append_kjt(out, &key_at, &value_at, &expanded[g]);
    return SL_OK;
}

void sl_batch_destroy(sl_batch_t *batch)
{
    if (batch == NULL) return;
    void (*release)(void *) = batch->release;
    void *ctx = batch->release_ctx;
    sl_arena_destroy(batch->arena); /* the batch struct itself lives there */
    if (release != NULL) release(ctx);
}

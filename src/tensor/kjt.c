/* JaggedTensor and KeyedJaggedTensor: allocation, validation, offsets, views
 * and comparison. */
#include "sluice/tensor.h"
#include "tensor/tensor_internal.h"

#include <inttypes.h>
#include <string.h>

/* sl_kjt_init and sl_kjt_init_unset: zeroed lengths or not. */
static sl_err_t kjt_init(sl_kjt_t *kjt, sl_arena_t *arena, uint32_t num_keys,
                         const char *const *keys, uint32_t stride, uint64_t num_values,
                         bool weighted, bool zero)
{
    memset(kjt, 0, sizeof *kjt);
    size_t rows = sl_mul_size(num_keys, stride);
    if (rows == SIZE_MAX || num_values > SIZE_MAX / sizeof(int64_t)) return SL_ERR_INVALID;
    kjt->num_keys = num_keys;
    kjt->stride = stride;
    kjt->num_values = num_values;
    kjt->keys = sl_arena_alloc(arena, sl_mul_size(num_keys, sizeof(char *)));
    kjt->lengths = zero ? sl_arena_calloc(arena, rows, sizeof(int32_t))
                        : sl_arena_alloc(arena, sl_mul_size(rows, sizeof(int32_t)));
    kjt->values = sl_arena_alloc(arena, (size_t)num_values * sizeof(int64_t));
    if (kjt->keys == NULL || kjt->lengths == NULL || kjt->values == NULL) return SL_ERR_NOMEM;
    if (weighted) {
        kjt->weights = sl_arena_alloc(arena, (size_t)num_values * sizeof(float));
        if (kjt->weights == NULL) return SL_ERR_NOMEM;
    }
    for (uint32_t k = 0; k < num_keys; k++) {
        if (keys == NULL || keys[k] == NULL) return SL_ERR_INVALID;
        kjt->keys[k] = sl_arena_strdup(arena, keys[k]);
        if (kjt->keys[k] == NULL) return SL_ERR_NOMEM;
    }
    return SL_OK;
}

sl_err_t sl_kjt_init(sl_kjt_t *kjt, sl_arena_t *arena, uint32_t num_keys, const char *const *keys,
                     uint32_t stride, uint64_t num_values, bool weighted)
{
    return kjt_init(kjt, arena, num_keys, keys, stride, num_values, weighted, true);
}

sl_err_t sl_kjt_init_unset(sl_kjt_t *kjt, sl_arena_t *arena, uint32_t num_keys,
                           const char *const *keys, uint32_t stride, uint64_t num_values,
                           bool weighted)
{
    return kjt_init(kjt, arena, num_keys, keys, stride, num_values, weighted, false);
}

/* Sum of n lengths, and whether any is negative (the sum is then
 * meaningless). This scan is most of what validating a decoded frame costs,
 * so it is written for the vectoriser at -O2 (gcc's cheap cost model wants a
 * fixed trip count): blocks of 64 summed in uint32 lanes, which cannot wrap
 * while every length of the block is below 2^16 (64 * 0xffff < 2^32); a
 * block with a larger (or negative) length is summed again in 64 bits. It
 * runs at memory speed; a plain int64 loop ran 3-6 times slower.
 * Without negatives the total is at most 2^32 * (2^31 - 1), which fits. */
uint64_t sl_lengths_sum(const int32_t *len, uint64_t n, bool *negative)
{
    enum { BLOCK = 64 };
    uint64_t sum = 0;
    uint32_t any = 0;
    uint64_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        /* Two halves in separate accumulators: two loads in flight. */
        uint32_t b0 = 0, b1 = 0, o0 = 0, o1 = 0;
        for (int j = 0; j < BLOCK / 2; j++) {
            uint32_t v0 = (uint32_t)len[i + j], v1 = (uint32_t)len[i + BLOCK / 2 + j];
            b0 += v0;
            o0 |= v0;
            b1 += v1;
            o1 |= v1;
        }
        uint32_t block = b0 + b1, bits = o0 | o1;
        if (bits >> 16 != 0) {
            uint64_t wide = 0;
            for (int j = 0; j < BLOCK; j++)
                wide += (uint32_t)len[i + j];
            sum += wide;
        } else {
            sum += block;
        }
        any |= bits;
    }
    for (; i < n; i++) {
        uint32_t v = (uint32_t)len[i];
        sum += v;
        any |= v;
    }
    *negative = (any >> 31) != 0;
    return sum;
}

static sl_err_t kjt_validate(const sl_kjt_t *kjt, bool scan_lengths, sl_error_t *err)
{
    uint64_t rows = (uint64_t)kjt->num_keys * kjt->stride;
    if (rows > UINT32_MAX)
        return sl_error_set(err, SL_ERR_INVALID, "num_keys * stride (%" PRIu64 ") exceeds 2^32",
                            rows);
    if (kjt->num_keys > 0 && kjt->keys == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "keys missing for %u keys", kjt->num_keys);
    if (rows > 0 && kjt->lengths == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "lengths missing for %" PRIu64 " rows", rows);
    if (kjt->num_values > 0 && kjt->values == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "values missing for %" PRIu64 " values",
                            kjt->num_values);
    for (uint32_t k = 0; k < kjt->num_keys; k++) {
        if (kjt->keys[k] == NULL) return sl_error_set(err, SL_ERR_INVALID, "key %u has no name", k);
        for (uint32_t j = 0; j < k; j++)
            if (strcmp(kjt->keys[j], kjt->keys[k]) == 0)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "keys unique: key '%s' appears at %u and %u", kjt->keys[k], j,
                                    k);
    }
    if (!scan_lengths) return SL_OK;
    bool negative;
    uint64_t sum = sl_lengths_sum(kjt->lengths, rows, &negative);
    if (negative) {
        for (uint64_t i = 0; i < rows; i++)
            if (kjt->lengths[i] < 0)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "lengths non-negative: key '%s' row %" PRIu64 " has length %d",
                                    kjt->keys[i / kjt->stride], i % kjt->stride, kjt->lengths[i]);
    }
    if (sum != kjt->num_values)
        return sl_error_set(err, SL_ERR_INVALID,
                            "sum(lengths) == len(values): %" PRIu64 " != %" PRIu64, sum,
                            kjt->num_values);
    return SL_OK;
}

sl_err_t sl_kjt_validate(const sl_kjt_t *kjt, sl_error_t *err)
{
    return kjt_validate(kjt, true, err);
}

sl_err_t sl_kjt_validate_shape(const sl_kjt_t *kjt, sl_error_t *err)
{
    return kjt_validate(kjt, false, err);
}

void sl_kjt_offsets(const sl_kjt_t *kjt, int64_t *offsets)
{
    uint64_t rows = (uint64_t)kjt->num_keys * kjt->stride;
    int64_t at = 0;
    for (uint64_t i = 0; i < rows; i++) {
        offsets[i] = at;
        at += kjt->lengths[i];
    }
    offsets[rows] = at;
}

void sl_kjt_key_offsets(const sl_kjt_t *kjt, uint64_t *key_offsets)
{
    uint64_t at = 0;
    for (uint32_t k = 0; k < kjt->num_keys; k++) {
        key_offsets[k] = at;
        /* stride 0 allows lengths == NULL, where even NULL + 0 is undefined. */
        if (kjt->stride == 0) continue;
        bool negative;
        uint64_t n = sl_lengths_sum(kjt->lengths + (size_t)k * kjt->stride, kjt->stride, &negative);
        /* Saturate: past any values buffer, never wrapped back into one. */
        at = negative || n > UINT64_MAX - at ? UINT64_MAX : at + n;
    }
    key_offsets[kjt->num_keys] = at;
}

int sl_kjt_find_key(const sl_kjt_t *kjt, const char *key)
{
    for (uint32_t k = 0; k < kjt->num_keys; k++)
        if (strcmp(kjt->keys[k], key) == 0) return (int)k;
    return -1;
}

sl_jt_t sl_kjt_key_view(const sl_kjt_t *kjt, const uint64_t *key_offsets, uint32_t k)
{
    sl_jt_t jt;
    jt.stride = kjt->stride;
    jt.num_values = key_offsets[k + 1] - key_offsets[k];
    /* Empty KJTs may have NULL buffers, and NULL + 0 is undefined. */
    jt.lengths = kjt->lengths != NULL ? kjt->lengths + (size_t)k * kjt->stride : NULL;
    jt.values = kjt->values != NULL ? kjt->values + key_offsets[k] : NULL;
    jt.weights = kjt->weights != NULL ? kjt->weights + key_offsets[k] : NULL;
    return jt;
}

bool sl_kjt_equal(const sl_kjt_t *a, const sl_kjt_t *b)
{
    if (a->num_keys != b->num_keys || a->stride != b->stride || a->num_values != b->num_values ||
        (a->weights == NULL) != (b->weights == NULL))
        return false;
    for (uint32_t k = 0; k < a->num_keys; k++)
        if (strcmp(a->keys[k], b->keys[k]) != 0) return false;
    size_t rows = (size_t)a->num_keys * a->stride;
    if (rows > 0 && memcmp(a->lengths, b->lengths, rows * sizeof(int32_t)) != 0) return false;
    size_t n = (size_t)a->num_values;
    if (n > 0 && memcmp(a->values, b->values, n * sizeof(int64_t)) != 0) return false;
    if (n > 0 && a->weights != NULL && memcmp(a->weights, b->weights, n * sizeof(float)) != 0)
        return false;
    return true;
}

uint64_t sl_kjt_bytes(const sl_kjt_t *kjt)
{
    uint64_t bytes =
        (uint64_t)kjt->num_keys * kjt->stride * sizeof(int32_t) + kjt->num_values * sizeof(int64_t);
    if (kjt->weights != NULL) bytes += kjt->num_values * sizeof(float);
    return bytes;
}

/* InverseKeyedJaggedTensor: validation and expansion to the KJT it stands
 * for (row b of the expansion is unique row inverse[b]). */
#include "sluice/tensor.h"
#include "tensor/tensor_internal.h"

#include <inttypes.h>
#include <string.h>

#include "common/err.h"

/* Whether any of n indices is outside [0, u): the unsigned compare catches
 * negative ones too. A branch-free scan in fixed blocks of 64, so that gcc's
 * -O2 vectoriser (which wants a known trip count) takes it; decoding a
 * frame spends its time in this scan and the lengths sum. */
static bool any_out_of_range(const int32_t *inv, uint32_t n, uint32_t u)
{
    enum { BLOCK = 64 };
    uint32_t bad = 0;
    /* A size_t index and a block pointer: a uint32_t index, which may wrap,
     * keeps gcc from vectorising. */
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        const int32_t *p = inv + i;
        for (int j = 0; j < BLOCK; j++)
            bad |= (uint32_t)p[j] >= u;
    }
    for (; i < n; i++)
        bad |= (uint32_t)inv[i] >= u;
    return bad != 0;
}

static sl_err_t ikjt_validate(const sl_ikjt_t *ikjt, bool scan_lengths, sl_error_t *err)
{
    const char *name = ikjt->name != NULL ? ikjt->name : "?";
    sl_err_t rc = scan_lengths ? sl_kjt_validate(&ikjt->unique, err)
                               : sl_kjt_validate_shape(&ikjt->unique, err);
    if (rc != SL_OK) {
        /* Not `return sl_error_prefix(...)`: that yields SL_OK when err is NULL. */
        sl_error_prefix(err, "group '%s' unique rows: ", name);
        return rc;
    }
    uint32_t u = ikjt->unique.stride;
    if (u > ikjt->batch_size)
        return sl_error_set(err, SL_ERR_INVALID, "group '%s': unique rows U=%u exceed B=%u", name,
                            u, ikjt->batch_size);
    if (ikjt->batch_size > 0 && ikjt->inverse == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "group '%s': inverse indices missing", name);
    if (any_out_of_range(ikjt->inverse, ikjt->batch_size, u)) {
        for (uint32_t b = 0; b < ikjt->batch_size; b++)
            if ((uint32_t)ikjt->inverse[b] >= u)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "group '%s': inverse indices < U: row %u has %d, U=%u", name, b,
                                    ikjt->inverse[b], u);
    }
    return SL_OK;
}

sl_err_t sl_ikjt_validate(const sl_ikjt_t *ikjt, sl_error_t *err)
{
    return ikjt_validate(ikjt, true, err);
}

sl_err_t sl_ikjt_validate_shape(const sl_ikjt_t *ikjt, sl_error_t *err)
{
    return ikjt_validate(ikjt, false, err);
}

sl_err_t sl_ikjt_expand(const sl_ikjt_t *ikjt, sl_arena_t *arena, sl_kjt_t *out, sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(sl_ikjt_validate(ikjt, err));
    const sl_kjt_t *uq = &ikjt->unique;
    uint32_t B = ikjt->batch_size, U = uq->stride, F = uq->num_keys;

    uint64_t total = 0;
    for (uint32_t k = 0; k < F; k++)
        for (uint32_t b = 0; b < B; b++)
            total += (uint64_t)uq->lengths[(size_t)k * U + (size_t)ikjt->inverse[b]];
    sl_err_t rc = sl_kjt_init(out, arena, F, uq->keys, B, total, uq->weights != NULL);
    if (rc != SL_OK)
        return sl_error_set(err, rc, "group '%s': expand to %u rows: %s",
                            ikjt->name ? ikjt->name : "?", B, sl_err_str(rc));
    /* No rows: nothing to copy, and U == 0 lets lengths be NULL (NULL + 0 is
     * undefined below). */
    if (B == 0) return SL_OK;

    /* Per-key start of each unique row's values, reused for every key. */
    int64_t *row_start = sl_arena_alloc(arena, ((size_t)U + 1) * sizeof(int64_t));
    if (row_start == NULL) return sl_error_set(err, SL_ERR_NOMEM, "expand: scratch");
    uint64_t key_base = 0, at = 0;
    for (uint32_t k = 0; k < F; k++) {
        const int32_t *ulen = uq->lengths + (size_t)k * U;
        int64_t s = (int64_t)key_base;
        for (uint32_t r = 0; r < U; r++) {
            row_start[r] = s;
            s += ulen[r];
        }
        key_base = (uint64_t)s;
        int32_t *olen = out->lengths + (size_t)k * B;
        for (uint32_t b = 0; b < B; b++) {
            uint32_t r = (uint32_t)ikjt->inverse[b];
            int32_t len = ulen[r];
            olen[b] = len;
            /* Empty rows skip the copy: with no values at all, values may be
             * NULL, and NULL + 0 or memcpy from NULL is undefined. */
            if (len == 0) continue;
            memcpy(out->values + at, uq->values + row_start[r], (size_t)len * sizeof(int64_t));
            if (uq->weights != NULL)
                memcpy(out->weights + at, uq->weights + row_start[r], (size_t)len * sizeof(float));
            at += (uint64_t)len;
        }
    }
    return SL_OK;
}

uint64_t sl_ikjt_bytes(const sl_ikjt_t *ikjt)
{
    return sl_kjt_bytes(&ikjt->unique) + (uint64_t)ikjt->batch_size * sizeof(int32_t);
}

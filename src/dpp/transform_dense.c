/* Dense transforms: one column of the row-major [B, D] float32 matrix at a
 * time, in place. NaN means missing and stays NaN through every transform
 * but fill_missing (and boxcox, which maps x <= 0 to NaN). Arithmetic is
 * float32 as written in docs/JOBS.md, so a reference gets the same bits. */
#include "dpp/plan_internal.h"

#include <math.h>

void dpp_dense_apply(const dpp_transform_t *t, float *data, uint32_t rows, uint32_t cols,
                     uint32_t c)
{
    float *p = data + c;
    const size_t step = cols;
    switch (t->op) {
    case OP_FILL_MISSING: {
        const float v = t->value;
        for (uint32_t r = 0; r < rows; r++, p += step)
            if (isnan(*p)) *p = v;
        break;
    }
    case OP_CLAMP: {
        /* Comparisons are false for NaN, which therefore passes unchanged. */
        const float lo = t->has_min ? t->min : -INFINITY, hi = t->has_max ? t->max : INFINITY;
        for (uint32_t r = 0; r < rows; r++, p += step) {
            float x = *p;
            if (x < lo) x = lo;
            if (x > hi) x = hi;
            *p = x;
        }
        break;
    }
    case OP_LOG1P:
        for (uint32_t r = 0; r < rows; r++, p += step) {
            float x = *p;
            *p = log1pf(x < 0.0f ? 0.0f : x);
        }
        break;
    case OP_NORMALIZE: {
        const float mean = t->mean, std = t->std;
        for (uint32_t r = 0; r < rows; r++, p += step) *p = (*p - mean) / std;
        break;
    }
    case OP_BOXCOX: {
        const float lambda = t->lambda;
        for (uint32_t r = 0; r < rows; r++, p += step) {
            float x = *p;
            if (!(x > 0.0f))
                *p = NAN;
            else if (lambda == 0.0f)
                *p = logf(x);
            else
                *p = (powf(x, lambda) - 1.0f) / lambda;
        }
        break;
    }
    default: break;
    }
}

/* Number of borders <= x (numpy.digitize, right=False): a binary search for
 * the first border above x. */
static int64_t bucket(const double *borders, uint32_t n, double x)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (borders[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

sl_err_t dpp_bucketize(const dpp_transform_t *t, const float *data, uint32_t rows, uint32_t cols,
                       uint32_t c, sl_arena_t *arena, dpp_col_t *out, sl_error_t *err)
{
    out->stride = rows;
    out->lengths = sl_arena_alloc(arena, (size_t)rows * sizeof(int32_t));
    out->values = sl_arena_alloc(arena, (size_t)rows * sizeof(int64_t));
    out->weights = NULL;
    if (rows > 0 && (out->lengths == NULL || out->values == NULL))
        return sl_error_set(err, SL_ERR_NOMEM, "bucketize '%s': out of memory", t->in[0]);
    uint64_t n = 0;
    const float *p = data + c;
    for (uint32_t r = 0; r < rows; r++, p += cols) {
        float x = *p;
        bool have = !isnan(x);
        out->lengths[r] = have;
        if (have) out->values[n++] = bucket(t->borders, t->num_borders, x);
    }
    out->num_values = n;
    return SL_OK;
}

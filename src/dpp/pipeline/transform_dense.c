/* Dense transforms: one column of the row-major [B, D] float32 matrix at a
 * time, in place. NaN means missing and stays NaN through every transform
 * but fill_missing (and boxcox, which maps x <= 0 to NaN). Arithmetic is
 * float32 as written in docs/JOBS.md, so a reference gets the same bits;
 * log1p alone is computed in double and promised within 1 ulp (below). */
#include "dpp/pipeline/plan_internal.h"

#include <math.h>

/* log1p(max(x, 0)) of float32 values, four at a time in double precision
 * (GCC/Clang vector extensions: pairs of SSE2 operations on x86-64, or one
 * AVX2 operation each where the CPU has AVX2; the same IEEE operations in
 * the same order either way, so both give the same bits).
 *
 * u = 1 + x = 2^k m with m in [sqrt(2)/2, sqrt(2)), f = m - 1 (or f = x
 * exactly when k = 0, so small x lose nothing to the rounding of 1 + x),
 * s = f / (2 + f), log1p(x) = k ln 2 + 2 atanh(s) with atanh by its series
 * up to s^11: |s| <= 0.1716, so the truncation is below 5e-11 relative and
 * with double rounding the result before the final rounding to float is
 * within about 1e-10 of log1p(x). Rounded to float, that is within 1 ulp of
 * (float)log1p((double)x), the accuracy docs/JOBS.md promises; checked over
 * all 2^32 floats when this was written, and on random and edge values by
 * transform_test. log1pf from libm costs ~55 instructions per value plus a
 * call and does not vectorise; this is ~35 with SSE2, ~18 with AVX2. */
typedef double v4d __attribute__((vector_size(32)));
typedef uint64_t v4u __attribute__((vector_size(32)));
typedef int64_t v4i __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

#define SELECT4(mask, a, b) ((v4d)(((v4i)(a) & (mask)) | ((v4i)(b) & ~(mask))))

/* v4d only inside (never as an argument or result: that would change the
 * ABI between SSE2 and AVX callers). */
static inline __attribute__((always_inline)) v4f log1p_clamped4(v4f xf)
{
    const v4d x = __builtin_convertvector(xf, v4d);
    const v4d u = 1.0 + x;
    /* offset so that the exponent field of t is k + 1023 with m as above */
    const v4u t = (v4u)u + (0x3ff0000000000000ull - 0x3fe6a09e667f3bcdull);
    const v4d k = (v4d)((t >> 52) | 0x4330000000000000ull) - (0x1p52 + 1023.0);
    const v4d m = (v4d)((t & 0x000fffffffffffffull) + 0x3fe6a09e667f3bcdull);
    const v4d f = SELECT4((v4i)(u < 0x1.6a09e667f3bcdp0), x, m - 1.0);
    const v4d s = f / (2.0 + f);
    const v4d z = s * s;
    const v4d p = z * (1.0 / 3 + z * (1.0 / 5 + z * (1.0 / 7 + z * (1.0 / 9 + z * (1.0 / 11)))));
    const v4d r = k * 0x1.62e42fefa39efp-1 + (2.0 * s + 2.0 * s * p);
    /* x > 0 finite takes r; x < 0 becomes log1p(0) = +0; +-0, +inf and
     * NaN are their own log1p */
    const v4i finite_pos = (v4i)(x > 0.0) & (v4i)(x < (double)INFINITY);
    const v4d zero = {0.0, 0.0, 0.0, 0.0};
    const v4d other = SELECT4((v4i)(x < 0.0), zero, x);
    return __builtin_convertvector(SELECT4(finite_pos, r, other), v4f);
}

/* NaN lanes of x replaced by fill (fill_missing fused into log1p). */
static inline __attribute__((always_inline)) v4f fill4(v4f x, v4f fill)
{
    typedef int32_t v4s __attribute__((vector_size(16)));
    const v4s nan = x != x;
    return (v4f)(((v4s)fill & nan) | ((v4s)x & ~nan));
}

/* One column of a row-major matrix (step floats between rows); with fill,
 * missing values (NaN) become fill[0] first: fill_missing and log1p in one
 * pass over the column, the same bits as the two one after the other. */
#define LOG1P_COLUMN_BODY                                                                          \
    const v4f fv = fill ? (v4f){*fill, *fill, *fill, *fill} : (v4f){0, 0, 0, 0};                   \
    uint32_t r = 0;                                                                                \
    for (; r + 4 <= rows; r += 4, p += 4 * step) {                                                 \
        v4f x = {p[0], p[step], p[2 * step], p[3 * step]};                                         \
        v4f y = log1p_clamped4(fill ? fill4(x, fv) : x);                                           \
        p[0] = y[0];                                                                               \
        p[step] = y[1];                                                                            \
        p[2 * step] = y[2];                                                                        \
        p[3 * step] = y[3];                                                                        \
    }                                                                                              \
    for (; r < rows; r++, p += step) {                                                             \
        v4f x = {*p, *p, *p, *p};                                                                  \
        *p = log1p_clamped4(fill ? fill4(x, fv) : x)[0];                                           \
    }

static void log1p_column_base(float *p, size_t step, uint32_t rows, const float *fill)
{
    LOG1P_COLUMN_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void log1p_column_avx2(float *p, size_t step, uint32_t rows,
                                                              const float *fill)
{
    LOG1P_COLUMN_BODY
}

static void log1p_column(float *p, size_t step, uint32_t rows, const float *fill)
{
    if (__builtin_cpu_supports("avx2"))
        log1p_column_avx2(p, step, rows, fill);
    else
        log1p_column_base(p, step, rows, fill);
}
#else
#define log1p_column log1p_column_base
#endif

void dpp_dense_fill_log1p(float *data, uint32_t rows, uint32_t cols, uint32_t c, float fill)
{
    log1p_column(data + c, cols, rows, &fill);
}

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
        const float lo = t->min, hi = t->max;
        for (uint32_t r = 0; r < rows; r++, p += step) {
            float x = *p;
            if (x < lo) x = lo;
            if (x > hi) x = hi;
            *p = x;
        }
        break;
    }
    case OP_LOG1P:
        log1p_column(p, step, rows, NULL);
        break;
    case OP_NORMALIZE: {
        const float mean = t->mean, std = t->std;
        for (uint32_t r = 0; r < rows; r++, p += step)
            *p = (*p - mean) / std;
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
    default:
        break;
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

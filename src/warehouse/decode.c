/* Stream decoders: turn the stored bytes of one stream (checked sizes, see
 * format_check.c) into values, in bulk: memcpy or zstd straight into the output for
 * plain streams, a widening loop for frame-of-reference integers, a
 * branch-free scatter for dense columns with a present bitmap. What only
 * the decoded values reveal (lengths, inverse indices, bitmaps) is checked
 * here before anyone uses it. */
#include "common/err.h"
#include "wh_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

/* ---- helpers ---- */

/* Set bits of every byte value (no popcount instruction is assumed). */
static const uint8_t popcount8[256] = {
#define B2(n) n, n + 1, n + 1, n + 2
#define B4(n) B2(n), B2(n + 1), B2(n + 1), B2(n + 2)
#define B6(n) B4(n), B4(n + 1), B4(n + 1), B4(n + 2)
    B6(0), B6(1), B6(1), B6(2)
#undef B6
#undef B4
#undef B2
};

/* Widening of frame-of-reference deltas, 16 values per step with vector
 * extensions (SSE2 unpacks on x86-64): a criteo stripe has 26 id streams
 * and 26 length streams of N values each, and the scalar loops cost ~6
 * instructions per value. Same results as the scalar tails. */
typedef uint8_t v16u8 __attribute__((vector_size(16)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v4u32 __attribute__((vector_size(16)));
typedef uint64_t v2u64 __attribute__((vector_size(16)));

static inline void put_u64x4(int64_t *dst, v4u32 x, uint64_t base)
{
    const v4u32 z = {0, 0, 0, 0};
    v2u64 lo = (v2u64)__builtin_shufflevector(x, z, 0, 4, 1, 5) + base;
    v2u64 hi = (v2u64)__builtin_shufflevector(x, z, 2, 6, 3, 7) + base;
    memcpy(dst, &lo, 16);
    memcpy(dst + 2, &hi, 16);
}

static inline void u8_to_u32x16(v16u8 x, v4u32 out[4])
{
    const v16u8 z8 = {0};
    const v8u16 z16 = {0};
    v8u16 a = (v8u16)__builtin_shufflevector(x, z8, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22,
                                             7, 23);
    v8u16 b = (v8u16)__builtin_shufflevector(x, z8, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29,
                                             14, 30, 15, 31);
    out[0] = (v4u32)__builtin_shufflevector(a, z16, 0, 8, 1, 9, 2, 10, 3, 11);
    out[1] = (v4u32)__builtin_shufflevector(a, z16, 4, 12, 5, 13, 6, 14, 7, 15);
    out[2] = (v4u32)__builtin_shufflevector(b, z16, 0, 8, 1, 9, 2, 10, 3, 11);
    out[3] = (v4u32)__builtin_shufflevector(b, z16, 4, 12, 5, 13, 6, 14, 7, 15);
}

static inline void u16_to_u32x8(v8u16 x, v4u32 out[2])
{
    const v8u16 z16 = {0};
    out[0] = (v4u32)__builtin_shufflevector(x, z16, 0, 8, 1, 9, 2, 10, 3, 11);
    out[1] = (v4u32)__builtin_shufflevector(x, z16, 4, 12, 5, 13, 6, 14, 7, 15);
}

/* dst[0, n) = v, four at a time (a width-0 stream: every value equal, as
 * the lengths of a single-id feature without missing rows). */
static void fill_u32(int32_t *dst, uint64_t n, uint32_t v)
{
    const v4u32 x = {v, v, v, v};
    uint64_t i = 0;
    for (; i + 4 <= n; i += 4)
        memcpy(dst + i, &x, 16);
    for (; i < n; i++)
        dst[i] = (int32_t)v;
}

/* Values i .. i + 15 of a frame-of-reference stream of width 1, 2 or 4
 * bytes, as 4 x 4 uint32. */
static inline void unpack16(const uint8_t *p, uint64_t i, uint32_t width, v4u32 q[4])
{
    if (width == 4) {
        for (int k = 0; k < 4; k++)
            memcpy(&q[k], p + 4 * (i + 4 * (uint64_t)k), 16);
    } else if (width == 2) {
        v8u16 x[2];
        memcpy(x, p + 2 * i, 32);
        u16_to_u32x8(x[0], q);
        u16_to_u32x8(x[1], q + 2);
    } else {
        v16u8 x;
        memcpy(&x, p + i, 16);
        u8_to_u32x16(x, q);
    }
}

/* base + width-byte deltas p[0, n) into dst as int64; @return values done
 * (a multiple of 16; the caller finishes the rest). */
static uint64_t widen_i64(int64_t *dst, const uint8_t *p, uint64_t n, uint32_t width, uint64_t base)
{
    uint64_t i = 0;
    v4u32 q[4];
    for (; i + 16 <= n; i += 16) {
        unpack16(p, i, width, q);
        for (int k = 0; k < 4; k++)
            put_u64x4(dst + i + 4 * k, q[k], base);
    }
    return i;
}

/* The same into int32 (base + delta, wrapping as the scalar loop does),
 * with the largest delta and the sum of the deltas. */
static uint64_t widen_i32(int32_t *dst, const uint8_t *p, uint64_t n, uint32_t width, uint32_t base,
                          uint32_t *max, uint64_t *sum)
{
    uint64_t i = 0, total = 0;
    v4u32 mx = {0, 0, 0, 0}, q[4];
    v2u64 acc = {0, 0};
    for (; i + 16 <= n; i += 16) {
        unpack16(p, i, width, q);
        for (int k = 0; k < 4; k++) {
            v4u32 gt = (v4u32)(q[k] > mx);
            mx = (q[k] & gt) | (mx & ~gt);
            v4u32 o = q[k] + base;
            memcpy(dst + i + 4 * k, &o, 16);
            v2u64 w = (v2u64)q[k];
            acc += (w & 0xffffffffu) + (w >> 32);
        }
    }
    uint32_t m = 0;
    for (int k = 0; k < 4; k++)
        m = mx[k] > m ? mx[k] : m;
    total = acc[0] + acc[1];
    *max = m;
    *sum = total;
    return i;
}

static inline float ld_f32(const uint8_t *p, uint64_t i)
{
    float v;
    memcpy(&v, p + i * 4, 4);
    return v;
}

#define STREAM_ERR(code, st, ...) wh_dec_err(d, st, err, code, __VA_ARGS__)

sl_err_t wh_dec_err(const wh_dec_t *d, const wh_stream_t *st, sl_error_t *err, sl_err_t code,
                    const char *fmt, ...)
{
    char msg[SL_ERROR_MSG_MAX], lb[SL_WH_NAME_MAX + 40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_error_set(err, code, "%s stripe %u %s: %s", d->f->src.name, d->stripe,
                        wh_stream_label(st, lb, sizeof lb), msg);
}

static const uint8_t *stored_of(const wh_dec_t *d, const wh_stream_t *st)
{
    return d->ptr[(st - d->f->streams) - d->f->stripes[d->stripe].first_stream];
}

/* Decompress st into dst (raw_size bytes, room for them). */
static sl_err_t unzstd(wh_dec_t *d, const wh_stream_t *st, void *dst, sl_error_t *err)
{
    const uint8_t *src = stored_of(d, st);
    unsigned long long fcs = ZSTD_getFrameContentSize(src, (size_t)st->stored_size);
    if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != st->raw_size)
        return STREAM_ERR(SL_ERR_CORRUPT, st, "zstd frame holds %llu bytes, footer says %llu",
                          fcs == ZSTD_CONTENTSIZE_ERROR ? 0ull : fcs,
                          (unsigned long long)st->raw_size);
    size_t n =
        ZSTD_decompressDCtx(d->zctx, dst, (size_t)st->raw_size, src, (size_t)st->stored_size);
    if (ZSTD_isError(n)) return STREAM_ERR(SL_ERR_CORRUPT, st, "zstd: %s", ZSTD_getErrorName(n));
    if (n != st->raw_size)
        return STREAM_ERR(SL_ERR_CORRUPT, st, "decompressed to %zu bytes, expected %llu", n,
                          (unsigned long long)st->raw_size);
    return SL_OK;
}

/* The encoded bytes of st: in the read buffer (codec none) or decompressed
 * into scratch. */
sl_err_t wh_raw_of(wh_dec_t *d, const wh_stream_t *st, wh_buf_t *scratch, const uint8_t **out,
                   sl_error_t *err)
{
    if (st->codec == SLUICE__CODEC__CODEC_NONE) {
        *out = stored_of(d, st);
        return SL_OK;
    }
    if (!wh_buf_reserve(scratch, d->a, (size_t)st->raw_size + 8))
        return STREAM_ERR(SL_ERR_NOMEM, st, "%llu bytes", (unsigned long long)st->raw_size);
    sl_err_t rc = unzstd(d, st, scratch->data, err);
    *out = scratch->data;
    return rc;
}

/* Decode an int64 stream into dst[value_count], unmapped. */
static sl_err_t decode_i64(wh_dec_t *d, const wh_stream_t *st, int64_t *dst, sl_error_t *err)
{
    uint64_t n = st->value_count;
    if (st->encoding == SLUICE__ENCODING__ENCODING_PLAIN) {
        if (st->codec == SLUICE__CODEC__CODEC_ZSTD) return unzstd(d, st, dst, err);
        if (n) memcpy(dst, stored_of(d, st), (size_t)n * 8);
        return SL_OK;
    }
    const uint8_t *p;
    SL_FORWARD_IF_ERROR(wh_raw_of(d, st, &d->z0, &p, err));
    if (st->encoding != SLUICE__ENCODING__ENCODING_FOR)
        return wh_unpack_i64(d, st, p, dst, NULL, err);
    uint64_t base = (uint64_t)st->for_base;
    uint64_t done = st->for_width > 0 ? widen_i64(dst, p, n, st->for_width, base) : 0;
    switch (st->for_width) {
    case 0:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = (int64_t)base;
        break;
    case 1:
        for (uint64_t i = done; i < n; i++)
            dst[i] = (int64_t)(base + p[i]);
        break;
    case 2:
        for (uint64_t i = done; i < n; i++) {
            uint16_t d;
            memcpy(&d, p + 2 * i, 2);
            dst[i] = (int64_t)(base + d);
        }
        break;
    default:
        for (uint64_t i = done; i < n; i++) {
            uint32_t d;
            memcpy(&d, p + 4 * i, 4);
            dst[i] = (int64_t)(base + d);
        }
        break;
    }
    return SL_OK;
}

sl_err_t wh_decode_i64(wh_dec_t *d, const wh_stream_t *st, int64_t *dst,
                       const sl_wh_value_map_t *map, sl_error_t *err)
{
    if (map == NULL || map->ids == NULL) return decode_i64(d, st, dst, err);
    if (st->encoding == SLUICE__ENCODING__ENCODING_DICT) {
        /* one call per distinct value of the stripe, then the gather */
        const uint8_t *p;
        sl_err_t rc = wh_raw_of(d, st, &d->z0, &p, err);
        return rc != SL_OK ? rc : wh_unpack_i64(d, st, p, dst, map, err);
    }
    sl_err_t rc = decode_i64(d, st, dst, err);
    if (rc == SL_OK && st->value_count > 0) map->ids(map->ctx, dst, st->value_count);
    return rc;
}

/* Decode an int32 stream (lengths, inverse) into dst[value_count]; every
 * value must lie in [0, hi]. *sum gets the sum of the values. */
sl_err_t wh_decode_i32(wh_dec_t *d, const wh_stream_t *st, int32_t *dst, int64_t hi, uint64_t *sum,
                       sl_error_t *err)
{
    uint64_t n = st->value_count;
    const uint8_t *p;
    int64_t lo_seen = 0, hi_seen = 0, total = 0;
    if (st->encoding == SLUICE__ENCODING__ENCODING_PLAIN) {
        if (st->codec == SLUICE__CODEC__CODEC_ZSTD) {
            SL_FORWARD_IF_ERROR(unzstd(d, st, dst, err));
        } else if (n) {
            memcpy(dst, stored_of(d, st), (size_t)n * 4);
        }
        int32_t mn = 0, mx = 0;
        for (uint64_t i = 0; i < n; i++) {
            int32_t v = dst[i];
            mn = v < mn ? v : mn;
            mx = v > mx ? v : mx;
            total += v;
        }
        lo_seen = mn;
        hi_seen = mx;
    } else {
        SL_FORWARD_IF_ERROR(wh_raw_of(d, st, &d->z0, &p, err));
        if (st->encoding != SLUICE__ENCODING__ENCODING_FOR)
            return wh_unpack_i32(d, st, p, dst, hi, sum, err);
        int64_t base = st->for_base;
        if (base < 0 || base > hi)
            return STREAM_ERR(SL_ERR_CORRUPT, st, "base %lld outside [0, %lld]", (long long)base,
                              (long long)hi);
        uint32_t mx = 0;
        uint64_t done = 0, vsum = 0;
        if (st->for_width > 0)
            done = widen_i32(dst, p, n, st->for_width, (uint32_t)base, &mx, &vsum);
        total = (int64_t)vsum;
        switch (st->for_width) {
        case 0:
            fill_u32(dst, n, (uint32_t)base);
            total = base * (int64_t)n;
            break;
        case 1:
            for (uint64_t i = done; i < n; i++) {
                uint32_t d = p[i];
                mx = d > mx ? d : mx;
                dst[i] = (int32_t)(base + d);
                total += d;
            }
            break;
        case 2:
            for (uint64_t i = done; i < n; i++) {
                uint16_t d;
                memcpy(&d, p + 2 * i, 2);
                mx = d > mx ? d : mx;
                dst[i] = (int32_t)(base + d);
                total += d;
            }
            break;
        default:
            /* widths were checked at open: 4 is the only one left; an int32
             * stream with a 4-byte delta can still overflow: checked below */
            for (uint64_t i = done; i < n; i++) {
                uint32_t d;
                memcpy(&d, p + 4 * i, 4);
                mx = d > mx ? d : mx;
                dst[i] = (int32_t)(uint32_t)((uint64_t)base + d);
                total += d;
            }
            break;
        }
        if (st->for_width > 0) total += base * (int64_t)n;
        lo_seen = base;
        hi_seen = base + (int64_t)mx;
    }
    if (lo_seen < 0 || hi_seen > hi)
        return STREAM_ERR(SL_ERR_CORRUPT, st, "value %lld outside [0, %lld]",
                          (long long)(lo_seen < 0 ? lo_seen : hi_seen), (long long)hi);
    if (sum) *sum = (uint64_t)total;
    return SL_OK;
}

/* Decode a float stream into dst[value_count]. */
sl_err_t wh_decode_f32(wh_dec_t *d, const wh_stream_t *st, float *dst, sl_error_t *err)
{
    if (st->encoding != SLUICE__ENCODING__ENCODING_PLAIN) {
        const uint8_t *p;
        sl_err_t rc = wh_raw_of(d, st, &d->z0, &p, err);
        return rc != SL_OK ? rc : wh_unpack_f32(d, st, p, dst, NULL, err);
    }
    if (st->codec == SLUICE__CODEC__CODEC_ZSTD) return unzstd(d, st, dst, err);
    if (st->value_count) memcpy(dst, stored_of(d, st), (size_t)st->value_count * 4);
    return SL_OK;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The rows of whole present-bitmap bytes while 8 values remain to load
 * (so the load stays inside the stream), 8 rows per step with AVX2: the
 * byte's present rows take the next values in order (a permutation from a
 * per-byte table), its missing rows NaN. ~3 instructions per row instead
 * of ~10 for the scalar branch-free loop. @return rows done (a multiple of
 * 8); *jp advances past the values used. */
__attribute__((target("avx2"))) static uint32_t scatter_avx2(const uint8_t *v, const uint8_t *bits,
                                                             float *out, uint32_t cols, uint32_t N,
                                                             uint64_t ones, float fill,
                                                             uint64_t *jp)
{
    uint32_t perm[256][8]; /* perm[b][k]: present rows of b before row k */
    for (uint32_t b = 0; b < 256; b++)
        for (uint32_t k = 0, r = 0; k < 8; k++) {
            perm[b][k] = r;
            r += (b >> k) & 1u;
        }
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 nanv = _mm256_set1_ps(fill);
    float tmp[8];
    uint64_t j = *jp;
    uint32_t i = 0;
    for (; i + 8 <= N && j + 8 <= ones; i += 8) {
        uint32_t byte = bits[i >> 3];
        __m256 x = _mm256_loadu_ps((const float *)(const void *)(v + 4 * j));
        __m256i idx = _mm256_loadu_si256((const __m256i *)(const void *)perm[byte]);
        __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)byte), sel), sel);
        __m256 y = _mm256_blendv_ps(nanv, _mm256_permutevar8x32_ps(x, idx), _mm256_castsi256_ps(m));
        float *o = out + (size_t)i * cols;
        if (cols == 1) {
            _mm256_storeu_ps(o, y);
        } else {
            _mm256_storeu_ps(tmp, y);
            for (uint32_t k = 0; k < 8; k++)
                o[(size_t)k * cols] = tmp[k];
        }
        j += popcount8[byte];
    }
    *jp = j;
    return i;
}
#endif

/* A float column into column 0 of the row-major [N, cols] matrix at out,
 * missing rows filled with fill; map (NULL: none) maps the dictionary of
 * a DICT column first. */
static sl_err_t scatter_column(wh_dec_t *d, const wh_stream_t *vals, const wh_stream_t *present,
                               float *out, uint32_t cols, uint32_t N, const sl_wh_value_map_t *map,
                               float fill, sl_error_t *err)
{
    const uint8_t *v, *bits = NULL;
    sl_err_t rc;
    if (vals->encoding == SLUICE__ENCODING__ENCODING_PLAIN) {
        rc = wh_raw_of(d, vals, &d->z0, &v, err);
    } else if (!wh_buf_reserve(&d->z2, d->a, (size_t)vals->value_count * 4 + 8)) {
        rc = STREAM_ERR(SL_ERR_NOMEM, vals, "%llu values", (unsigned long long)vals->value_count);
    } else {
        /* DICT, the only other float encoding (checked at open) */
        rc = wh_raw_of(d, vals, &d->z0, &v, err);
        if (rc == SL_OK) rc = wh_unpack_f32(d, vals, v, (float *)(void *)d->z2.data, map, err);
        v = d->z2.data;
    }
    if (rc != SL_OK) return rc;
    if (present == NULL) {
        for (uint32_t i = 0; i < N; i++)
            out[(size_t)i * cols] = ld_f32(v, i);
        return SL_OK;
    }
    if ((rc = wh_raw_of(d, present, &d->z1, &bits, err)) != SL_OK) return rc;
    uint64_t ones = 0;
    size_t nb = ((size_t)N + 7) / 8;
    for (size_t i = 0; i < nb; i++)
        ones += popcount8[bits[i]];
    if ((N & 7) && (bits[nb - 1] >> (N & 7)) != 0)
        return STREAM_ERR(SL_ERR_CORRUPT, present, "bits set past row %u", N);
    if (ones != vals->value_count)
        return STREAM_ERR(SL_ERR_CORRUPT, present, "%llu rows present, %llu values stored",
                          (unsigned long long)ones, (unsigned long long)vals->value_count);
    /* Branch-free per row (missing values are not predictable); whole bytes
     * of present or missing rows take a straight path. j < ones always holds
     * when a bit is set; the clamp only keeps the unused load in bounds. */
    const float nan = fill;
    uint32_t nanbits;
    memcpy(&nanbits, &nan, 4);
    uint64_t j = 0, last = ones > 0 ? ones - 1 : 0;
    uint32_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) i = scatter_avx2(v, bits, out, cols, N, ones, fill, &j);
#endif
    for (; i + 8 <= N; i += 8) {
        uint32_t byte = bits[i >> 3];
        float *o = out + (size_t)i * cols;
        if (byte == 0xffu) {
            for (uint32_t k = 0; k < 8; k++)
                o[(size_t)k * cols] = ld_f32(v, j + k);
            j += 8;
        } else if (byte == 0) {
            for (uint32_t k = 0; k < 8; k++)
                o[(size_t)k * cols] = nan;
        } else {
            for (uint32_t k = 0; k < 8; k++) {
                uint32_t bit = (byte >> k) & 1u, x, mask = 0u - bit;
                memcpy(&x, v + 4 * (j < last ? j : last), 4);
                x = (x & mask) | (nanbits & ~mask);
                memcpy(&o[(size_t)k * cols], &x, 4);
                j += bit;
            }
        }
    }
    for (; i < N; i++) {
        uint32_t bit = (bits[i >> 3] >> (i & 7)) & 1u;
        out[(size_t)i * cols] = bit ? ld_f32(v, j) : nan;
        j += bit;
    }
    return SL_OK;
}

sl_err_t wh_decode_column(wh_dec_t *d, const wh_stream_t *vals, const wh_stream_t *present,
                          float *out, uint32_t cols, uint32_t N, const sl_wh_value_map_t *map,
                          sl_error_t *err)
{
    if (map == NULL || map->dense == NULL)
        return scatter_column(d, vals, present, out, cols, N, NULL, NAN, err);
    if (vals->encoding != SLUICE__ENCODING__ENCODING_DICT) {
        sl_err_t rc = scatter_column(d, vals, present, out, cols, N, NULL, NAN, err);
        if (rc == SL_OK && N > 0) map->dense(map->ctx, out, N, cols, 0);
        return rc;
    }
    /* the dictionary mapped once, and a missing row's NaN once */
    float fill = NAN;
    map->dense(map->ctx, &fill, 1, 1, 0);
    return scatter_column(d, vals, present, out, cols, N, map, fill, err);
}

/* ---- the dense matrix ---- */

/* Rows [0, n) of the D column-major columns (column c at cols + c * N)
 * into the row-major rows at o, one column at a time: one 4-byte store per
 * value, a stride of D floats apart. */
static void transpose_scalar(float *o, const float *cols, uint32_t N, uint32_t D, uint32_t n)
{
    for (uint32_t c = 0; c < D; c++) {
        const float *col = cols + (size_t)c * N;
        for (uint32_t i = 0; i < n; i++)
            o[(size_t)i * D + c] = col[i];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)

/* The same for D >= 8 with AVX2, 8 rows x 8 columns at a time: eight
 * column loads, an 8x8 transpose in registers, eight row stores (the
 * scalar loop spent ~2.5 cycles per value on its strided stores, 5 % of a
 * criteo reader thread). The column groups start at 0, 8, ... and the last
 * at D - 8, so that it may overlap the one before it: those values are
 * written twice, with the same bits. @return the rows done (a multiple of
 * 8). */
__attribute__((target("avx2"))) static uint32_t transpose_avx2(float *o, const float *cols,
                                                               uint32_t N, uint32_t D, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (uint32_t c0 = 0;; c0 += 8) {
            if (c0 + 8 > D) c0 = D - 8;
            const float *s = cols + (size_t)c0 * N + i;
            __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + N);
            __m256 r2 = _mm256_loadu_ps(s + 2 * (size_t)N), r3 = _mm256_loadu_ps(s + 3 * (size_t)N);
            __m256 r4 = _mm256_loadu_ps(s + 4 * (size_t)N), r5 = _mm256_loadu_ps(s + 5 * (size_t)N);
            __m256 r6 = _mm256_loadu_ps(s + 6 * (size_t)N), r7 = _mm256_loadu_ps(s + 7 * (size_t)N);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *d = o + (size_t)i * D + c0;
            _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(d + D, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(d + 2 * (size_t)D, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(d + 3 * (size_t)D, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(d + 4 * (size_t)D, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(d + 5 * (size_t)D, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(d + 6 * (size_t)D, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(d + 7 * (size_t)D, _mm256_permute2f128_ps(u3, u7, 0x31));
            if (c0 + 8 >= D) break;
        }
    }
    return i;
}
#endif

/* Rows [r0, r0 + n) of the columns into the matrix rows at o. */
void wh_transpose_rows(float *o, const float *cols, uint32_t N, uint32_t D, uint32_t r0, uint32_t n)
{
    uint32_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (D >= 8 && __builtin_cpu_supports("avx2")) i = transpose_avx2(o, cols + r0, N, D, n);
#endif
    transpose_scalar(o + (size_t)i * D, cols + r0 + i, N, D, n - i);
}

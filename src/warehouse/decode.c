/* Stream decoders: turn the stored bytes of one stream (checked sizes, see
 * format.c) into values, in bulk: memcpy or zstd straight into the output for
 * plain streams, a widening loop for frame-of-reference integers, a
 * branch-free scatter for dense columns with a present bitmap. What only
 * the decoded values reveal (lengths, inverse indices, bitmaps) is checked
 * here before anyone uses it. */
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
static sl_err_t raw_of(wh_dec_t *d, const wh_stream_t *st, wh_buf_t *scratch, const uint8_t **out,
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

/* Decode an int64 stream into dst[value_count]. */
sl_err_t wh_decode_i64(wh_dec_t *d, const wh_stream_t *st, int64_t *dst, sl_error_t *err)
{
    uint64_t n = st->value_count;
    if (st->encoding == SLUICE__ENCODING__ENCODING_PLAIN) {
        if (st->codec == SLUICE__CODEC__CODEC_ZSTD) return unzstd(d, st, dst, err);
        if (n) memcpy(dst, stored_of(d, st), (size_t)n * 8);
        return SL_OK;
    }
    const uint8_t *p;
    sl_err_t rc = raw_of(d, st, &d->z0, &p, err);
    if (rc != SL_OK) return rc;
    uint64_t base = (uint64_t)st->for_base;
    switch (st->for_width) {
    case 0:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = (int64_t)base;
        break;
    case 1:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = (int64_t)(base + p[i]);
        break;
    case 2:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t d;
            memcpy(&d, p + 2 * i, 2);
            dst[i] = (int64_t)(base + d);
        }
        break;
    default:
        for (uint64_t i = 0; i < n; i++) {
            uint32_t d;
            memcpy(&d, p + 4 * i, 4);
            dst[i] = (int64_t)(base + d);
        }
        break;
    }
    return SL_OK;
}

/* Decode an int32 stream (lengths, inverse) into dst[value_count]; every
 * value must lie in [0, hi]. *sum gets the sum of the values. */
sl_err_t wh_decode_i32(wh_dec_t *d, const wh_stream_t *st, int32_t *dst, int64_t hi, uint64_t *sum,
                       sl_error_t *err)
{
    uint64_t n = st->value_count;
    const uint8_t *p;
    sl_err_t rc;
    int64_t lo_seen = 0, hi_seen = 0, total = 0;
    if (st->encoding == SLUICE__ENCODING__ENCODING_PLAIN) {
        if (st->codec == SLUICE__CODEC__CODEC_ZSTD) {
            if ((rc = unzstd(d, st, dst, err)) != SL_OK) return rc;
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
        if ((rc = raw_of(d, st, &d->z0, &p, err)) != SL_OK) return rc;
        int64_t base = st->for_base;
        if (base < 0 || base > hi)
            return STREAM_ERR(SL_ERR_CORRUPT, st, "base %lld outside [0, %lld]", (long long)base,
                              (long long)hi);
        uint32_t mx = 0;
        switch (st->for_width) {
        case 0:
            for (uint64_t i = 0; i < n; i++)
                dst[i] = (int32_t)base;
            total = base * (int64_t)n;
            break;
        case 1:
            for (uint64_t i = 0; i < n; i++) {
                uint32_t d = p[i];
                mx = d > mx ? d : mx;
                dst[i] = (int32_t)(base + d);
                total += d;
            }
            break;
        case 2:
            for (uint64_t i = 0; i < n; i++) {
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
            for (uint64_t i = 0; i < n; i++) {
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
    if (st->codec == SLUICE__CODEC__CODEC_ZSTD) return unzstd(d, st, dst, err);
    if (st->value_count) memcpy(dst, stored_of(d, st), (size_t)st->value_count * 4);
    return SL_OK;
}

/* A float column into column c of a row-major [N, cols] matrix. */
sl_err_t wh_decode_column(wh_dec_t *d, const wh_stream_t *vals, const wh_stream_t *present,
                          float *out, uint32_t cols, uint32_t N, sl_error_t *err)
{
    const uint8_t *v, *bits = NULL;
    sl_err_t rc = raw_of(d, vals, &d->z0, &v, err);
    if (rc != SL_OK) return rc;
    if (present == NULL) {
        for (uint32_t i = 0; i < N; i++)
            out[(size_t)i * cols] = ld_f32(v, i);
        return SL_OK;
    }
    if ((rc = raw_of(d, present, &d->z1, &bits, err)) != SL_OK) return rc;
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
    const float nan = NAN;
    uint32_t nanbits;
    memcpy(&nanbits, &nan, 4);
    uint64_t j = 0, last = ones > 0 ? ones - 1 : 0;
    uint32_t i = 0;
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

/* Decoders of the version-2 encodings (docs/FORMAT.md section 3): BITPACK
 * (frame of reference at any bit width), DELTA (bit-packed differences of
 * neighbours) and DICT (a sorted dictionary whose gaps are bit-packed in
 * blocks, then bit-packed indices). They read at memory speed where zstd
 * would spend most of a reader's time on ids that barely compress.
 *
 * Sizes (raw_size against the value count, width and dictionary) were
 * checked at open (format.c). What only the bytes reveal is checked here
 * before it is used: a dictionary's blocks and order, indices inside the
 * dictionary, lengths and inverse indices inside their range. The
 * decoders load 8 bytes at a time: every caller keeps 8 readable bytes
 * past the encoded bytes (wh_raw_of, the reader's buffers and mapping). */
#include "wh_internal.h"

#include <string.h>

#define STREAM_ERR(code, st, ...) wh_dec_err(d, st, err, code, __VA_ARGS__)

/* Whether the kind's dictionary is ordered as signed 64-bit integers
 * (integer kinds) or as unsigned 32-bit patterns (float kinds). */
static bool dict_signed(const wh_stream_t *st)
{
    return wh_kind_is_int(st->kind);
}

/* The dictionary of st (at the start of p) into d->dict as uint64, padded
 * with zeros to 2^bit_width entries so that any index read stays inside it
 * (indices are checked against dict_size after the gather). */
static sl_err_t load_dict(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p,
                          const uint64_t **out, sl_error_t *err)
{
    uint64_t K = st->dict_size, end = st->dict_bytes, cap = 1ull << st->bit_width;
    if (!wh_buf_reserve(&d->dict, d->a, (size_t)cap * 8))
        return STREAM_ERR(SL_ERR_NOMEM, st, "dictionary of %llu values", (unsigned long long)K);
    uint64_t *v = (uint64_t *)d->dict.data;
    bool sgn = dict_signed(st);
    v[0] = (uint64_t)st->for_base;
    uint64_t at = 0;
    for (uint64_t j = 1; j < K; j += WH_DICT_BLOCK) {
        if (at >= end)
            return STREAM_ERR(SL_ERR_CORRUPT, st, "dictionary ends at value %llu of %llu",
                              (unsigned long long)j, (unsigned long long)K);
        uint32_t w = p[at++];
        uint64_t cnt = K - j < WH_DICT_BLOCK ? K - j : WH_DICT_BLOCK;
        uint64_t nb = wh_packed_bytes(cnt, w);
        if (w > 64 || nb > end - at)
            return STREAM_ERR(SL_ERR_CORRUPT, st, "dictionary block at byte %llu: width %u",
                              (unsigned long long)at - 1, w);
        const uint8_t *q = p + at;
        uint64_t prev = v[j - 1];
        for (uint64_t k = 0; k < cnt; k++) {
            uint64_t x = prev + 1 + wh_bits_get(q, k * w, w);
            /* strictly ascending, no wrap-around */
            if (sgn ? (int64_t)x <= (int64_t)prev : x <= prev)
                return STREAM_ERR(SL_ERR_CORRUPT, st, "dictionary value %llu out of order",
                                  (unsigned long long)(j + k));
            v[j + k] = prev = x;
        }
        at += nb;
    }
    if (at != end)
        return STREAM_ERR(SL_ERR_CORRUPT, st, "dictionary of %llu bytes, the footer says %llu",
                          (unsigned long long)at, (unsigned long long)end);
    if (!sgn && v[K - 1] > UINT32_MAX)
        return STREAM_ERR(SL_ERR_CORRUPT, st, "dictionary value beyond 32 bits");
    memset(v + K, 0, (size_t)(cap - K) * 8);
    *out = v;
    return SL_OK;
}

static sl_err_t bad_index(wh_dec_t *d, const wh_stream_t *st, uint64_t mx, sl_error_t *err)
{
    return STREAM_ERR(SL_ERR_CORRUPT, st, "index %llu outside the dictionary of %llu values",
                      (unsigned long long)mx, (unsigned long long)st->dict_size);
}

sl_err_t wh_unpack_i64(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, int64_t *dst,
                       sl_error_t *err)
{
    uint64_t n = st->value_count;
    uint32_t w = st->bit_width;
    if (st->encoding == SLUICE__ENCODING__ENCODING_BITPACK) {
        uint64_t base = (uint64_t)st->for_base;
        for (uint64_t i = 0; i < n; i++)
            dst[i] = (int64_t)(base + (w ? wh_bits_get(p, i * w, w) : 0));
        return SL_OK;
    }
    if (st->encoding == SLUICE__ENCODING__ENCODING_DELTA) {
        uint64_t v = (uint64_t)st->for_base, step = (uint64_t)st->delta_base;
        if (n > 0) dst[0] = (int64_t)v;
        if (w == 0) {
            for (uint64_t i = 1; i < n; i++)
                dst[i] = (int64_t)(v += step);
        } else {
            for (uint64_t i = 1; i < n; i++)
                dst[i] = (int64_t)(v += step + wh_bits_get(p, (i - 1) * w, w));
        }
        return SL_OK;
    }
    /* DICT */
    if (n == 0) return SL_OK;
    const uint64_t *dict;
    sl_err_t rc = load_dict(d, st, p, &dict, err);
    if (rc != SL_OK) return rc;
    const uint8_t *ip = p + st->dict_bytes;
    uint64_t mx = 0;
    if (w == 0) {
        for (uint64_t i = 0; i < n; i++)
            dst[i] = (int64_t)dict[0];
        return SL_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = wh_bits_get(ip, i * w, w);
        mx = k > mx ? k : mx;
        dst[i] = (int64_t)dict[k];
    }
    return mx < st->dict_size ? SL_OK : bad_index(d, st, mx, err);
}

sl_err_t wh_unpack_i32(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, int32_t *dst,
                       int64_t hi, uint64_t *sum, sl_error_t *err)
{
    uint64_t n = st->value_count, total = 0;
    uint32_t w = st->bit_width;
    if (st->encoding == SLUICE__ENCODING__ENCODING_BITPACK) {
        int64_t base = st->for_base;
        uint64_t mx = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t x = w ? wh_bits_get(p, i * w, w) : 0;
            mx = x > mx ? x : mx;
            total += x;
            dst[i] = (int32_t)(uint32_t)((uint64_t)base + x);
        }
        /* w <= 32 (checked at open), so base + mx does not overflow */
        if (n > 0 && (base < 0 || base + (int64_t)mx > hi))
            return STREAM_ERR(SL_ERR_CORRUPT, st, "value %lld outside [0, %lld]",
                              (long long)(base < 0 ? base : base + (int64_t)mx), (long long)hi);
        if (sum) *sum = total + (uint64_t)base * n;
        return SL_OK;
    }
    /* DICT (DELTA is for 64-bit kinds only, checked at open) */
    if (n > 0) {
        const uint64_t *dict;
        sl_err_t rc = load_dict(d, st, p, &dict, err);
        if (rc != SL_OK) return rc;
        /* ascending: the first and last entries bound them all */
        int64_t lo = (int64_t)dict[0], top = (int64_t)dict[st->dict_size - 1];
        if (lo < 0 || top > hi)
            return STREAM_ERR(SL_ERR_CORRUPT, st, "value %lld outside [0, %lld]",
                              (long long)(lo < 0 ? lo : top), (long long)hi);
        const uint8_t *ip = p + st->dict_bytes;
        uint64_t mx = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t k = w ? wh_bits_get(ip, i * w, w) : 0;
            mx = k > mx ? k : mx;
            dst[i] = (int32_t)dict[k];
            total += dict[k];
        }
        if (mx >= st->dict_size) return bad_index(d, st, mx, err);
    }
    if (sum) *sum = total;
    return SL_OK;
}

sl_err_t wh_unpack_f32(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, float *dst,
                       sl_error_t *err)
{
    /* DICT only (checked at open) */
    uint64_t n = st->value_count;
    uint32_t w = st->bit_width;
    if (n == 0) return SL_OK;
    const uint64_t *dict;
    sl_err_t rc = load_dict(d, st, p, &dict, err);
    if (rc != SL_OK) return rc;
    const uint8_t *ip = p + st->dict_bytes;
    uint64_t mx = 0;
    uint32_t *out = (uint32_t *)(void *)dst;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = w ? wh_bits_get(ip, i * w, w) : 0;
        mx = k > mx ? k : mx;
        out[i] = (uint32_t)dict[k];
    }
    return mx < st->dict_size ? SL_OK : bad_index(d, st, mx, err);
}

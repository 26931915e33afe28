/* Decoders of the version-2 encodings (docs/FORMAT.md section 3): BITPACK
 * (frame of reference at any bit width), DELTA (bit-packed differences of
 * neighbours) and DICT (a sorted dictionary whose gaps are bit-packed in
 * blocks, then bit-packed indices). They read at memory speed where zstd
 * would spend most of a reader's time on ids that barely compress.
 *
 * Sizes (raw_size against the value count, width and dictionary) were
 * checked at open (format_check.c). What only the bytes reveal is checked here
 * before it is used: a dictionary's blocks and order, indices inside the
 * dictionary, lengths and inverse indices inside their range. The
 * decoders load 8 bytes at a time: every caller keeps 8 readable bytes
 * past the encoded bytes (wh_raw_of, the reader's buffers and mapping). */
#include "common/err.h"
#include "wh_internal.h"

#include <string.h>

#define STREAM_ERR(code, st, ...) wh_dec_err(d, st, err, code, __VA_ARGS__)

/* Whether the kind's dictionary is ordered as signed 64-bit integers
 * (integer kinds) or as unsigned 32-bit patterns (float kinds). */
/* ---- unpacking at a fixed width ---- */

/* Values of up to 32 bits are unpacked in chunks into a small buffer, then
 * used (offset, gathered from the dictionary, summed) in a second tight
 * loop. Each width has its own unpacker with the shifts and masks as
 * constants, 8 values (W bytes) per step: ~3 instructions per value where
 * the generic wh_bits_get takes ~8. */
#define CHUNK 256

#define UNPACK1(W, j)                                                                              \
    do {                                                                                           \
        uint64_t x_;                                                                               \
        memcpy(&x_, p + ((j) * (W)) / 8, 8);                                                       \
        out[i + (j)] = (uint32_t)((x_ >> (((j) * (W)) % 8)) & ((1ull << (W)) - 1));                \
    } while (0)

#define DEF_UNPACK(W)                                                                              \
    static void unpack_##W(const uint8_t *p, uint64_t n, uint32_t *out)                            \
    {                                                                                              \
        uint64_t i = 0;                                                                            \
        for (; i + 8 <= n; i += 8, p += (W)) {                                                     \
            UNPACK1(W, 0);                                                                         \
            UNPACK1(W, 1);                                                                         \
            UNPACK1(W, 2);                                                                         \
            UNPACK1(W, 3);                                                                         \
            UNPACK1(W, 4);                                                                         \
            UNPACK1(W, 5);                                                                         \
            UNPACK1(W, 6);                                                                         \
            UNPACK1(W, 7);                                                                         \
        }                                                                                          \
        for (uint64_t j = 0; i < n; i++, j++)                                                      \
            out[i] = (uint32_t)wh_bits_get(p, j * (W), (W));                                       \
    }

DEF_UNPACK(1)
DEF_UNPACK(2)
DEF_UNPACK(3)
DEF_UNPACK(4)
DEF_UNPACK(5)
DEF_UNPACK(6)
DEF_UNPACK(7)
DEF_UNPACK(8)
DEF_UNPACK(9)
DEF_UNPACK(10)
DEF_UNPACK(11)
DEF_UNPACK(12)
DEF_UNPACK(13)
DEF_UNPACK(14)
DEF_UNPACK(15)
DEF_UNPACK(16)
DEF_UNPACK(17)
DEF_UNPACK(18)
DEF_UNPACK(19)
DEF_UNPACK(20)
DEF_UNPACK(21)
DEF_UNPACK(22)
DEF_UNPACK(23)
DEF_UNPACK(24)
DEF_UNPACK(25)
DEF_UNPACK(26)
DEF_UNPACK(27)
DEF_UNPACK(28)
DEF_UNPACK(29)
DEF_UNPACK(30)
DEF_UNPACK(31)
DEF_UNPACK(32)

static void unpack_0(const uint8_t *p, uint64_t n, uint32_t *out)
{
    (void)p;
    memset(out, 0, (size_t)n * 4);
}

typedef void (*unpack_fn)(const uint8_t *p, uint64_t n, uint32_t *out);
static const unpack_fn unpackers[33] = {
    unpack_0,  unpack_1,  unpack_2,  unpack_3,  unpack_4,  unpack_5,  unpack_6,
    unpack_7,  unpack_8,  unpack_9,  unpack_10, unpack_11, unpack_12, unpack_13,
    unpack_14, unpack_15, unpack_16, unpack_17, unpack_18, unpack_19, unpack_20,
    unpack_21, unpack_22, unpack_23, unpack_24, unpack_25, unpack_26, unpack_27,
    unpack_28, unpack_29, unpack_30, unpack_31, unpack_32};

/* Values [c, c + m) of width w <= 32 (c a multiple of CHUNK) into buf. */
static inline void unpack_chunk(const uint8_t *p, uint64_t c, uint64_t m, uint32_t w, uint32_t *buf)
{
    unpackers[w](p + c * w / 8, m, buf);
}

static bool dict_signed(const wh_stream_t *st)
{
    return wh_kind_is_int(st->kind);
}

/* The dictionary of st (at the start of p) into d->dict as uint64, padded
 * with zeros to a power of two, 2^bits(K - 1) entries: the gathers mask
 * each index to that (bit_width may be wider), so that any index read
 * stays inside it; the unmasked indices are checked against dict_size
 * after the gather. */
static uint64_t dict_mask(const wh_stream_t *st)
{
    return st->dict_size > 1 ? (1ull << wh_bits_for(st->dict_size - 1)) - 1 : 0;
}

static sl_err_t load_dict(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p,
                          const uint64_t **out, sl_error_t *err)
{
    uint64_t K = st->dict_size, end = st->dict_bytes, cap = dict_mask(st) + 1;
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
        uint32_t g[WH_DICT_BLOCK];
        if (w <= 32) {
            unpackers[w](q, cnt, g);
            for (uint64_t k = 0; k < cnt; k++) {
                uint64_t x = prev + 1 + g[k];
                /* strictly ascending, no wrap-around */
                if (sgn ? (int64_t)x <= (int64_t)prev : x <= prev)
                    return STREAM_ERR(SL_ERR_CORRUPT, st, "dictionary value %llu out of order",
                                      (unsigned long long)(j + k));
                v[j + k] = prev = x;
            }
        } else {
            for (uint64_t k = 0; k < cnt; k++) {
                uint64_t x = prev + 1 + wh_bits_get(q, k * w, w);
                if (sgn ? (int64_t)x <= (int64_t)prev : x <= prev)
                    return STREAM_ERR(SL_ERR_CORRUPT, st, "dictionary value %llu out of order",
                                      (unsigned long long)(j + k));
                v[j + k] = prev = x;
            }
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

/* The K = dict_size entries of a loaded dictionary through map (its
 * order no longer matters: it was checked by load_dict, and the gathers
 * only index it). Float entries (32-bit patterns in 64-bit slots) are
 * packed into the front of the same buffer for the map and spread back
 * from the last down: entry i's float is read before slot i is written,
 * and slot i covers only floats at or before 2i + 1, which are done. */
static void map_dict(const wh_stream_t *st, uint64_t *v, bool wide, const sl_wh_value_map_t *map)
{
    uint64_t K = st->dict_size;
    if (wide) {
        if (map->ids) map->ids(map->ctx, (int64_t *)(void *)v, K);
        return;
    }
    if (map->dense == NULL) return;
    float *f = (float *)(void *)v;
    for (uint64_t i = 0; i < K; i++) {
        uint32_t x = (uint32_t)v[i];
        memcpy(&f[i], &x, 4);
    }
    for (uint64_t i = 0; i < K; i += 1u << 30)
        map->dense(map->ctx, f + i, (uint32_t)(K - i < (1u << 30) ? K - i : 1u << 30), 1, 0);
    for (uint64_t i = K; i-- > 0;) {
        uint32_t x;
        memcpy(&x, &f[i], 4);
        v[i] = x;
    }
}

/* A DICT stream of 64-bit (wide) or 32-bit values into dst: unpack a chunk
 * of indices, gather, and keep their maximum to check against the
 * dictionary's size (the dictionary is padded to 2^bit_width entries, so
 * the gathers stay inside it before the check). */
static sl_err_t dict_gather(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, void *dst,
                            bool wide, const sl_wh_value_map_t *map, sl_error_t *err)
{
    uint64_t n = st->value_count, mx = 0;
    uint32_t w = st->bit_width, buf[CHUNK]; /* w <= 32, checked at open */
    if (n == 0) return SL_OK;
    const uint64_t *dict;
    SL_FORWARD_IF_ERROR(load_dict(d, st, p, &dict, err));
    if (map != NULL) map_dict(st, (uint64_t *)d->dict.data, wide, map);
    const uint8_t *ip = p + st->dict_bytes;
    const uint32_t dm = (uint32_t)dict_mask(st);
    for (uint64_t c = 0; c < n; c += CHUNK) {
        uint64_t m = n - c < CHUNK ? n - c : CHUNK;
        unpack_chunk(ip, c, m, w, buf);
        uint32_t cm = 0;
        if (wide) {
            uint64_t *o = (uint64_t *)dst + c;
            for (uint64_t k = 0; k < m; k++) {
                cm = buf[k] > cm ? buf[k] : cm;
                o[k] = dict[buf[k] & dm];
            }
        } else {
            uint32_t *o = (uint32_t *)dst + c;
            for (uint64_t k = 0; k < m; k++) {
                cm = buf[k] > cm ? buf[k] : cm;
                o[k] = (uint32_t)dict[buf[k] & dm];
            }
        }
        mx = cm > mx ? cm : mx;
    }
    return mx < st->dict_size ? SL_OK : bad_index(d, st, mx, err);
}

sl_err_t wh_unpack_i64(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, int64_t *dst,
                       const sl_wh_value_map_t *map, sl_error_t *err)
{
    uint64_t n = st->value_count;
    uint32_t w = st->bit_width;
    uint32_t buf[CHUNK];
    if (st->encoding == SLUICE__ENCODING__ENCODING_BITPACK) {
        uint64_t base = (uint64_t)st->for_base;
        if (w > 32) {
            for (uint64_t i = 0; i < n; i++)
                dst[i] = (int64_t)(base + wh_bits_get(p, i * w, w));
            return SL_OK;
        }
        for (uint64_t c = 0; c < n; c += CHUNK) {
            uint64_t m = n - c < CHUNK ? n - c : CHUNK;
            unpack_chunk(p, c, m, w, buf);
            for (uint64_t k = 0; k < m; k++)
                dst[c + k] = (int64_t)(base + buf[k]);
        }
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
    return dict_gather(d, st, p, dst, true, map, err);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Width-1 values (p's bits, least significant first) as 0 / 1, 8 per byte
 * with AVX2: the byte broadcast, its bits selected one per lane. @return
 * the values done (a multiple of 8). */
__attribute__((target("avx2"))) static uint64_t bits_avx2(const uint8_t *p, uint64_t n,
                                                          uint32_t *out)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128), one = _mm256_set1_epi32(1);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i b = _mm256_set1_epi32(p[i >> 3]);
        __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(b, sel), sel);
        _mm256_storeu_si256((__m256i *)(void *)(out + i), _mm256_and_si256(m, one));
    }
    return i;
}
#endif

/* A width-1 stream with base 0 (criteo's lengths: an id or none): the
 * values are its bits, their sum the bits set, their maximum 1 if any is
 * set. Unpacked in one pass and summed by popcount of the packed bytes,
 * instead of unpacked in chunks and summed value by value (two passes
 * over 4 bytes per value where this reads an eighth of a byte).
 * @return the sum; *mx the maximum. */
static uint64_t unpack_bits(const uint8_t *p, uint64_t n, uint32_t *out, uint64_t *mx)
{
    uint64_t i = 0, ones = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) i = bits_avx2(p, n, out);
#endif
    if (i < n) unpack_1(p + i / 8, n - i, out + i); /* i is a multiple of 8 */
    uint64_t full = n / 64, x;
    for (uint64_t j = 0; j < full; j++) {
        memcpy(&x, p + 8 * j, 8);
        ones += (uint64_t)__builtin_popcountll(x);
    }
    if (n % 64) { /* the last bits: 8 readable bytes (file comment), those past n masked off */
        memcpy(&x, p + 8 * full, 8);
        ones += (uint64_t)__builtin_popcountll(x & ((1ull << (n % 64)) - 1));
    }
    *mx = ones > 0;
    return ones;
}

sl_err_t wh_unpack_i32(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, int32_t *dst,
                       int64_t hi, uint64_t *sum, sl_error_t *err)
{
    uint64_t n = st->value_count, total = 0;
    uint32_t w = st->bit_width;
    uint32_t buf[CHUNK];
    if (st->encoding == SLUICE__ENCODING__ENCODING_BITPACK) {
        int64_t base = st->for_base;
        uint64_t mx = 0;
        uint32_t ub = (uint32_t)base, *u = (uint32_t *)(void *)dst;
        if (w == 0) {
            for (uint64_t i = 0; i < n; i++)
                u[i] = ub;
        }
        if (w == 1 && ub == 0) {
            total = unpack_bits(p, n, u, &mx);
            w = 0; /* done: skip the chunks */
        }
        /* unpacked in place, then checked, summed and offset */
        for (uint64_t c = 0; w > 0 && c < n; c += CHUNK) {
            uint64_t m = n - c < CHUNK ? n - c : CHUNK;
            unpack_chunk(p, c, m, w, u + c);
            uint32_t cm = 0;
            uint64_t cs = 0;
            if (ub == 0) {
                for (uint64_t k = 0; k < m; k++) {
                    cm = u[c + k] > cm ? u[c + k] : cm;
                    cs += u[c + k];
                }
            } else {
                for (uint64_t k = 0; k < m; k++) {
                    uint32_t x = u[c + k];
                    cm = x > cm ? x : cm;
                    cs += x;
                    u[c + k] = ub + x;
                }
            }
            mx = cm > mx ? cm : mx;
            total += cs;
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
        SL_FORWARD_IF_ERROR(load_dict(d, st, p, &dict, err));
        /* ascending: the first and last entries bound them all */
        int64_t lo = (int64_t)dict[0], top = (int64_t)dict[st->dict_size - 1];
        if (lo < 0 || top > hi)
            return STREAM_ERR(SL_ERR_CORRUPT, st, "value %lld outside [0, %lld]",
                              (long long)(lo < 0 ? lo : top), (long long)hi);
        const uint8_t *ip = p + st->dict_bytes;
        const uint32_t dm = (uint32_t)dict_mask(st);
        uint64_t mx = 0;
        for (uint64_t c = 0; c < n; c += CHUNK) {
            uint64_t m = n - c < CHUNK ? n - c : CHUNK;
            unpack_chunk(ip, c, m, w, buf);
            uint32_t cm = 0;
            for (uint64_t k = 0; k < m; k++) {
                uint32_t x = buf[k];
                cm = x > cm ? x : cm;
                dst[c + k] = (int32_t)dict[x & dm];
                total += dict[x & dm];
            }
            mx = cm > mx ? cm : mx;
        }
        if (mx >= st->dict_size) return bad_index(d, st, mx, err);
    }
    if (sum) *sum = total;
    return SL_OK;
}

sl_err_t wh_unpack_f32(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, float *dst,
                       const sl_wh_value_map_t *map, sl_error_t *err)
{
    return dict_gather(d, st, p, dst, false, map, err); /* DICT only (checked at open) */
}

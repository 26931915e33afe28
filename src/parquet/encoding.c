/* The RLE/bit-packed hybrid decoder (encoding.h; DELTA_BINARY_PACKED and
 * BYTE_STREAM_SPLIT are in delta.c). */
#include "encoding.h"

#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/err.h"
#include "common/fileio.h"
#include "thrift.h"

uint64_t sl_pq_bits(const uint8_t *buf, size_t len, uint64_t bitpos, unsigned w)
{
    if (w == 0) return 0;
    size_t byte = (size_t)(bitpos >> 3);
    unsigned shift = (unsigned)(bitpos & 7);
    if (w <= 56 && byte + 8 <= len) {
        uint64_t v = sl_le_get_u64(buf + byte) >> shift;
        return w == 64 ? v : v & ((UINT64_C(1) << w) - 1);
    }
    /* near the end of the buffer, or wider than one load covers */
    uint64_t v = 0;
    unsigned got = 0;
    while (got < w) {
        uint64_t b = byte < len ? buf[byte] : 0;
        b >>= shift;
        v |= b << got;
        got += 8 - shift;
        shift = 0;
        byte++;
    }
    return w == 64 ? v : v & ((UINT64_C(1) << w) - 1);
}

void sl_pq_rle_init(sl_pq_rle_t *r, const uint8_t *p, size_t len, unsigned width)
{
    memset(r, 0, sizeof *r);
    r->p = p;
    r->end = p + len;
    r->width = width;
}

/* Start the next run. */
static sl_err_t rle_next_run(sl_pq_rle_t *r, sl_error_t *err)
{
    uint64_t h;
    if (r->p >= r->end)
        return sl_error_set(err, SL_ERR_TRUNCATED, "RLE/bit-packed data ends before its values");
    if (!sl_pq_uvarint(&r->p, r->end, &h))
        return sl_error_set(err, SL_ERR_TRUNCATED, "RLE/bit-packed run header runs past the end");
    if (h & 1) {
        uint64_t groups = h >> 1;
        if (groups == 0 || groups > (UINT32_MAX / 8))
            return sl_error_set(err, SL_ERR_CORRUPT, "bit-packed run of %llu groups",
                                (unsigned long long)groups);
        size_t left = (size_t)(r->end - r->p);
        uint64_t bytes = groups * r->width;
        /* a last run may stop short of its padding: only the values asked
         * for must be there (rle_get checks each one) */
        r->run = r->p;
        r->run_len = bytes < left ? (size_t)bytes : left;
        r->p += r->run_len;
        r->packed = true;
        r->run_pos = 0;
        r->left = (uint32_t)(groups * 8);
    } else {
        uint64_t count = h >> 1;
        if (count == 0 || count > UINT32_MAX)
            return sl_error_set(err, SL_ERR_CORRUPT, "RLE run of %llu values",
                                (unsigned long long)count);
        unsigned nb = (r->width + 7) / 8;
        if ((size_t)(r->end - r->p) < nb)
            return sl_error_set(err, SL_ERR_TRUNCATED, "RLE run value runs past the end");
        uint32_t v = 0;
        for (unsigned k = 0; k < nb; k++)
            v |= (uint32_t)r->p[k] << (8 * k);
        r->p += nb;
        if (r->width < 32 && (v >> r->width) != 0)
            return sl_error_set(err, SL_ERR_CORRUPT, "RLE run value %u wider than %u bits", v,
                                r->width);
        r->packed = false;
        r->value = v;
        r->left = (uint32_t)count;
    }
    return SL_OK;
}

/* Start the next run: a header of one byte (a bit-packed run of up to 63
 * groups, a repeated one of up to 63 values) taken here without a call,
 * its repeated value too when it is one byte (width <= 8: levels and
 * small dictionaries); any other run through rle_next_run, which also
 * gives every error. The same runs either way. Levels of lists and
 * optional values alternate between short repeated and bit-packed runs
 * (a run of 3s broken by each empty list), so a page has a run every few
 * dozen levels. */
static inline __attribute__((always_inline)) sl_err_t rle_start(sl_pq_rle_t *r, sl_error_t *err)
{
    const uint8_t *p = r->p;
    if (r->end - p >= 2 && p[0] < 0x80 && p[0] > 1) {
        unsigned h = p[0];
        if (h & 1) {
            size_t left = (size_t)(r->end - p - 1), bytes = (size_t)(h >> 1) * r->width;
            r->run = p + 1;
            r->run_len = bytes < left ? bytes : left;
            r->p = p + 1 + r->run_len;
            r->packed = true;
            r->run_pos = 0;
            r->left = (h >> 1) * 8;
            return SL_OK;
        }
        if (r->width <= 8 && (r->width == 8 || (p[1] >> r->width) == 0)) {
            r->p = p + (r->width ? 2 : 1);
            r->packed = false;
            r->value = r->width ? p[1] : 0;
            r->left = h >> 1;
            return SL_OK;
        }
    }
    return rle_next_run(r, err);
}

/* 8 values of w bits from in: w is a constant in every call of
 * unpack_groups' switch, so that each width gets its own shifts and masks.
 * Every load is inside [in, in + w + 8). */
static inline __attribute__((always_inline)) void unpack8(const uint8_t *in, uint32_t *out,
                                                          unsigned w)
{
    const uint64_t mask = (UINT64_C(1) << w) - 1;
#pragma GCC unroll 8
    for (unsigned j = 0; j < 8; j++) {
        unsigned b = j * w;
        out[j] = (uint32_t)((sl_le_get_u64(in + (b >> 3)) >> (b & 7)) & mask);
    }
}

/* Whole groups of 8 values from bit (a multiple of 8 values) while their
 * loads stay inside room bytes; @return how many values were unpacked. */
static uint32_t unpack_groups(const uint8_t *run, size_t room, uint64_t bit, uint32_t *out,
                              uint32_t k, unsigned w)
{
    uint32_t i = 0;
    size_t at = (size_t)(bit >> 3); /* a group starts on a byte */
#define SL_PQ_UNPACK_W(W)                                                                          \
    case W:                                                                                        \
        for (; i + 8 <= k && at + W + 8 <= room; i += 8, at += W)                                  \
            unpack8(run + at, out + i, W);                                                         \
        break;
    switch (w) {
        SL_PQ_UNPACK_W(1)
        SL_PQ_UNPACK_W(2)
        SL_PQ_UNPACK_W(3)
        SL_PQ_UNPACK_W(4)
        SL_PQ_UNPACK_W(5)
        SL_PQ_UNPACK_W(6)
        SL_PQ_UNPACK_W(7)
        SL_PQ_UNPACK_W(8)
        SL_PQ_UNPACK_W(9)
        SL_PQ_UNPACK_W(10)
        SL_PQ_UNPACK_W(11)
        SL_PQ_UNPACK_W(12)
        SL_PQ_UNPACK_W(13)
        SL_PQ_UNPACK_W(14)
        SL_PQ_UNPACK_W(15)
        SL_PQ_UNPACK_W(16)
        SL_PQ_UNPACK_W(17)
        SL_PQ_UNPACK_W(18)
        SL_PQ_UNPACK_W(19)
        SL_PQ_UNPACK_W(20)
        SL_PQ_UNPACK_W(21)
        SL_PQ_UNPACK_W(22)
        SL_PQ_UNPACK_W(23)
        SL_PQ_UNPACK_W(24)
        SL_PQ_UNPACK_W(25)
        SL_PQ_UNPACK_W(26)
        SL_PQ_UNPACK_W(27)
        SL_PQ_UNPACK_W(28)
        SL_PQ_UNPACK_W(29)
        SL_PQ_UNPACK_W(30)
        SL_PQ_UNPACK_W(31)
        SL_PQ_UNPACK_W(32)
    default:
        break;
    }
#undef SL_PQ_UNPACK_W
    return i;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Whole groups of 8 values of w <= 16 bits from bit (a group's start) with
 * AVX2, while their 16-byte loads stay inside room: a group's w bytes are
 * loaded once into both halves of a register, each value's three bytes
 * (from byte j * w / 8; with its shift of at most 7, w + 7 <= 23 bits) are
 * moved into its 32-bit lane by one shuffle, then shifted by its own count
 * and masked: 5 instructions a group against 8 loads, shifts and masks.
 * @return how many values were unpacked. */
/* For width w (1..16): the shuffle putting value j's bytes j * w / 8 .. + 2
 * into lane j (0x80: a zero byte), and each lane's shift, j * w % 8. */
#define SL_PQ_SH4(w, j)                                                                            \
    (uint8_t)((j) * (w) / 8), (uint8_t)((j) * (w) / 8 + 1), (uint8_t)((j) * (w) / 8 + 2), 0x80
#define SL_PQ_SHUF(w)                                                                              \
    {                                                                                              \
        SL_PQ_SH4(w, 0), SL_PQ_SH4(w, 1), SL_PQ_SH4(w, 2), SL_PQ_SH4(w, 3), SL_PQ_SH4(w, 4),       \
            SL_PQ_SH4(w, 5), SL_PQ_SH4(w, 6), SL_PQ_SH4(w, 7)                                      \
    }
#define SL_PQ_SHIFT(w)                                                                             \
    {                                                                                              \
        0, (w) % 8, 2 * (w) % 8, 3 * (w) % 8, 4 * (w) % 8, 5 * (w) % 8, 6 * (w) % 8, 7 * (w) % 8   \
    }
static const uint8_t unpack_shuf[17][32] = {{0},
                                            SL_PQ_SHUF(1),
                                            SL_PQ_SHUF(2),
                                            SL_PQ_SHUF(3),
                                            SL_PQ_SHUF(4),
                                            SL_PQ_SHUF(5),
                                            SL_PQ_SHUF(6),
                                            SL_PQ_SHUF(7),
                                            SL_PQ_SHUF(8),
                                            SL_PQ_SHUF(9),
                                            SL_PQ_SHUF(10),
                                            SL_PQ_SHUF(11),
                                            SL_PQ_SHUF(12),
                                            SL_PQ_SHUF(13),
                                            SL_PQ_SHUF(14),
                                            SL_PQ_SHUF(15),
                                            SL_PQ_SHUF(16)};
static const uint32_t unpack_shift[17][8] = {{0},
                                             SL_PQ_SHIFT(1),
                                             SL_PQ_SHIFT(2),
                                             SL_PQ_SHIFT(3),
                                             SL_PQ_SHIFT(4),
                                             SL_PQ_SHIFT(5),
                                             SL_PQ_SHIFT(6),
                                             SL_PQ_SHIFT(7),
                                             SL_PQ_SHIFT(8),
                                             SL_PQ_SHIFT(9),
                                             SL_PQ_SHIFT(10),
                                             SL_PQ_SHIFT(11),
                                             SL_PQ_SHIFT(12),
                                             SL_PQ_SHIFT(13),
                                             SL_PQ_SHIFT(14),
                                             SL_PQ_SHIFT(15),
                                             SL_PQ_SHIFT(16)};
#undef SL_PQ_SH4
#undef SL_PQ_SHUF
#undef SL_PQ_SHIFT

__attribute__((target("avx2"))) static uint32_t unpack_groups16_avx2(const uint8_t *run,
                                                                     size_t room, uint64_t bit,
                                                                     uint32_t *out, uint32_t k,
                                                                     unsigned w)
{
    const __m256i vs = _mm256_loadu_si256((const __m256i *)unpack_shuf[w]);
    const __m256i vc = _mm256_loadu_si256((const __m256i *)unpack_shift[w]);
    const __m256i vm = _mm256_set1_epi32((int)((1u << w) - 1));
    uint32_t i = 0;
    size_t at = (size_t)(bit >> 3);
    for (; i + 8 <= k && at + 16 <= room; i += 8, at += w) {
        __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(run + at)));
        x = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(x, vs), vc), vm);
        _mm256_storeu_si256((__m256i *)(out + i), x);
    }
    return i;
}
#endif

/* Whole groups of 8 values as unpack_groups does, by AVX2 where the CPU has
 * it and the width is at most 16 bits. */
static uint32_t unpack_groups_any(const uint8_t *run, size_t room, uint64_t bit, uint32_t *out,
                                  uint32_t k, unsigned w, bool plain)
{
    uint32_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (w >= 1 && w <= 16 && !plain && __builtin_cpu_supports("avx2")) {
        i = unpack_groups16_avx2(run, room, bit, out, k, w);
        bit += (uint64_t)i * w;
    }
#endif
    return i + unpack_groups(run, room, bit, out + i, k - i, w);
}

/* k values of the current bit-packed run into out; the caller has checked
 * that k is within the run. */
static sl_err_t rle_unpack(sl_pq_rle_t *r, uint32_t *out, uint32_t k, sl_error_t *err)
{
    uint64_t need_bits = (r->run_pos + k) * r->width;
    if (need_bits > (uint64_t)r->run_len * 8)
        return sl_error_set(err, SL_ERR_TRUNCATED, "bit-packed run runs past the end of its data");
    const unsigned w = r->width;
    const uint8_t *run = r->run;
    uint64_t bit = r->run_pos * w;
    const uint64_t mask = (UINT64_C(1) << w) - 1;
    uint32_t i = 0;
    /* one unaligned 8-byte load per value while it stays inside the
     * decoder's buffer (width <= 32 plus a shift <= 7 fits in 64 bits;
     * bytes past the run are masked off) */
    const size_t room = (size_t)(r->end - run);
    /* up to the next group of 8 one by one, then whole groups */
    while (i < k && ((r->run_pos + i) & 7) != 0 && (bit >> 3) + 8 <= room) {
        out[i++] = (uint32_t)((sl_le_get_u64(run + (bit >> 3)) >> (bit & 7)) & mask);
        bit += w;
    }
    if (((r->run_pos + i) & 7) == 0 && k - i >= 8 && w > 0) {
        uint32_t g = unpack_groups_any(run, room, bit, out + i, k - i, w, r->plain);
        i += g;
        bit += (uint64_t)g * w;
    }
    while (i < k && (bit >> 3) + 8 <= room) {
        out[i++] = (uint32_t)((sl_le_get_u64(run + (bit >> 3)) >> (bit & 7)) & mask);
        bit += w;
    }
    for (; i < k; i++, bit += w)
        out[i] = (uint32_t)sl_pq_bits(run, r->run_len, bit, w);
    r->run_pos += k;
    return SL_OK;
}

sl_err_t sl_pq_rle_get(sl_pq_rle_t *r, uint32_t *out, uint32_t n, sl_error_t *err)
{
    while (n > 0) {
        if (r->left == 0) {
            SL_FORWARD_IF_ERROR(rle_start(r, err));
        }
        uint32_t k = r->left < n ? r->left : n;
        if (!r->packed) {
            const uint32_t value = r->value; /* a local: out may alias r for the compiler */
            for (uint32_t i = 0; i < k; i++)
                out[i] = value;
        } else {
            SL_FORWARD_IF_ERROR(rle_unpack(r, out, k, err));
        }
        r->left -= k;
        out += k;
        n -= k;
    }
    return SL_OK;
}

/* The 2-bit values of each byte value spread one a byte, lowest first
 * (the bytes of a little-endian uint32). */
#define SL_PQ_S2(b)                                                                                \
    ((uint32_t)((b)&3) | (uint32_t)(((b) >> 2) & 3) << 8 | (uint32_t)(((b) >> 4) & 3) << 16 |      \
     (uint32_t)(((b) >> 6) & 3) << 24)
#define SL_PQ_S2x4(b) SL_PQ_S2(b), SL_PQ_S2((b) + 1), SL_PQ_S2((b) + 2), SL_PQ_S2((b) + 3)
#define SL_PQ_S2x16(b) SL_PQ_S2x4(b), SL_PQ_S2x4((b) + 4), SL_PQ_S2x4((b) + 8), SL_PQ_S2x4((b) + 12)
#define SL_PQ_S2x64(b)                                                                             \
    SL_PQ_S2x16(b), SL_PQ_S2x16((b) + 16), SL_PQ_S2x16((b) + 32), SL_PQ_S2x16((b) + 48)
static const uint32_t spread2[256] = {SL_PQ_S2x64(0), SL_PQ_S2x64(64), SL_PQ_S2x64(128),
                                      SL_PQ_S2x64(192)};
#undef SL_PQ_S2x64
#undef SL_PQ_S2x16
#undef SL_PQ_S2x4
#undef SL_PQ_S2

/* k values of the current bit-packed run into bytes (width <= 8); the
 * caller has checked that k is within the run. Widths 1 and 2 (the levels
 * of optional values and of lists) go a whole byte of the run at a time:
 * 8 values of 1 bit by one multiply, 4 of 2 bits by one table load. */
static sl_err_t rle_unpack_u8(sl_pq_rle_t *r, uint8_t *out, uint32_t k, sl_error_t *err)
{
    const unsigned w = r->width;
    if (w != 1 && w != 2) {
        uint32_t tmp[64];
        while (k > 0) {
            uint32_t m = k < 64 ? k : 64;
            SL_FORWARD_IF_ERROR(rle_unpack(r, tmp, m, err));
            for (uint32_t i = 0; i < m; i++)
                out[i] = (uint8_t)tmp[i];
            out += m;
            k -= m;
        }
        return SL_OK;
    }
    uint64_t need_bits = (r->run_pos + k) * w;
    if (need_bits > (uint64_t)r->run_len * 8)
        return sl_error_set(err, SL_ERR_TRUNCATED, "bit-packed run runs past the end of its data");
    const unsigned per = 8 / w; /* values a byte */
    uint64_t pos = r->run_pos;
    uint32_t i = 0;
    /* up to a byte boundary one by one, whole bytes, then the rest */
    for (; i < k && pos % per != 0; i++, pos++)
        out[i] = (uint8_t)sl_pq_bits(r->run, r->run_len, pos * w, w);
    const uint8_t *in = r->run + pos / per;
    if (w == 1) {
        for (; i + 8 <= k; i += 8, pos += 8) {
            /* byte j of the product is the input byte; keep bit j of it,
             * then carry any set bit to bit 7 and shift it down to bit 0 */
            uint64_t t =
                ((uint64_t)*in++ * UINT64_C(0x0101010101010101)) & UINT64_C(0x8040201008040201);
            t = ((t + UINT64_C(0x7f7f7f7f7f7f7f7f)) >> 7) & UINT64_C(0x0101010101010101);
            sl_le_put_u64(out + i, t);
        }
    } else {
        for (; i + 4 <= k; i += 4, pos += 4)
            sl_le_put_u32(out + i, spread2[*in++]);
    }
    for (; i < k; i++, pos++)
        out[i] = (uint8_t)sl_pq_bits(r->run, r->run_len, pos * w, w);
    r->run_pos = pos;
    return SL_OK;
}

sl_err_t sl_pq_rle_get_u8(sl_pq_rle_t *r, uint8_t *out, uint32_t n, sl_error_t *err)
{
    if (r->width > 8)
        return sl_error_set(err, SL_ERR_INVALID, "%u-bit values decoded into bytes", r->width);
    while (n > 0) {
        if (r->left == 0) {
            SL_FORWARD_IF_ERROR(rle_start(r, err));
        }
        uint32_t k = r->left < n ? r->left : n;
        if (!r->packed)
            memset(out, (int)r->value, k);
        else
            SL_FORWARD_IF_ERROR(rle_unpack_u8(r, out, k, err));
        r->left -= k;
        out += k;
        n -= k;
    }
    return SL_OK;
}

/* The bits [at, at + k) of the plane p set. */
static void fill_bits(uint64_t *p, uint32_t at, uint32_t k)
{
    while (k > 0) {
        unsigned o = at & 63, m = 64 - o < k ? 64 - o : k;
        p[at >> 6] |= (m == 64 ? ~UINT64_C(0) : (UINT64_C(1) << m) - 1) << o;
        at += m;
        k -= m;
    }
}

/* The m <= 64 low bits of x ORed into the plane p from bit at. */
static inline void or_bits(uint64_t *p, uint32_t at, uint64_t x, unsigned m)
{
    unsigned o = at & 63;
    p[at >> 6] |= x << o;
    if (o != 0 && o + m > 64) p[(at >> 6) + 1] |= x >> (64 - o);
}

/* Bits 0, 2, 4, .. 62 of x gathered into bits 0..31 (no BMI2's pext in
 * the baseline x86-64: five shift-and-mask steps). */
static inline uint64_t even_bits(uint64_t x)
{
    x &= UINT64_C(0x5555555555555555);
    x = (x | x >> 1) & UINT64_C(0x3333333333333333);
    x = (x | x >> 2) & UINT64_C(0x0f0f0f0f0f0f0f0f);
    x = (x | x >> 4) & UINT64_C(0x00ff00ff00ff00ff);
    x = (x | x >> 8) & UINT64_C(0x0000ffff0000ffff);
    return (x | x >> 16) & UINT64_C(0x00000000ffffffff);
}

/* The body of sl_pq_rle_get_bits, with the even-bits gather given (even:
 * even_bits, or even_pext where the CPU has BMI2), inlined into each. */
static inline __attribute__((always_inline)) sl_err_t get_bits(sl_pq_rle_t *r, uint64_t *p0,
                                                               uint64_t *p1, uint32_t at,
                                                               uint32_t n, sl_error_t *err,
                                                               uint64_t (*even)(uint64_t))
{
    const unsigned w = r->width;
    if (w != 1 && w != 2)
        return sl_error_set(err, SL_ERR_INVALID, "%u-bit values decoded into bit planes", w);
    /* values a load: 56 bits of the run, whatever its shift (<= 7) */
    const unsigned per = w == 1 ? 56 : 28;
    while (n > 0) {
        if (r->left == 0) {
            SL_FORWARD_IF_ERROR(rle_start(r, err));
        }
        uint32_t k = r->left < n ? r->left : n;
        if (!r->packed) {
            if (r->value & 1) fill_bits(p0, at, k);
            if (r->value & 2) fill_bits(p1, at, k);
        } else {
            if ((r->run_pos + k) * w > (uint64_t)r->run_len * 8)
                return sl_error_set(err, SL_ERR_TRUNCATED,
                                    "bit-packed run runs past the end of its data");
            const uint8_t *run = r->run;
            /* loads stay inside the decoder's buffer; bytes past the run
             * are masked off (as rle_unpack's) */
            const size_t room = (size_t)(r->end - run);
            uint64_t bit = r->run_pos * w;
            uint32_t i = 0;
            /* from a group's start (a byte) on, 64 bits a load: 64 levels
             * of 1 bit, 32 of 2 */
            if ((bit & 7) == 0)
                for (const unsigned m = 64 / w; k - i >= m && (bit >> 3) + 8 <= room;
                     i += m, bit += 64) {
                    uint64_t x = sl_le_get_u64(run + (bit >> 3));
                    if (w == 1) {
                        or_bits(p0, at + i, x, 64);
                    } else {
                        or_bits(p0, at + i, even(x), 32);
                        or_bits(p1, at + i, even(x >> 1), 32);
                    }
                }
            while (i < k) {
                unsigned m = k - i < per ? k - i : per, nb = m * w;
                uint64_t x = (bit >> 3) + 8 <= room ? sl_le_get_u64(run + (bit >> 3)) >> (bit & 7)
                                                    : sl_pq_bits(run, r->run_len, bit, nb);
                x &= (UINT64_C(1) << nb) - 1;
                if (w == 1) {
                    or_bits(p0, at + i, x, m);
                } else {
                    or_bits(p0, at + i, even(x), m);
                    or_bits(p1, at + i, even(x >> 1), m);
                }
                i += m;
                bit += nb;
            }
            r->run_pos += k;
        }
        r->left -= k;
        at += k;
        n -= k;
    }
    return SL_OK;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* Bits 0, 2, .. 62 of x by one BMI2 instruction (fast on Intel since
 * Haswell and on AMD since Zen 3; microcoded, slow, on Zen 1 and 2). */
__attribute__((target("bmi2"))) static inline uint64_t even_pext(uint64_t x)
{
    return __builtin_ia32_pext_di(x, UINT64_C(0x5555555555555555));
}

__attribute__((target("bmi2"))) static sl_err_t
get_bits_pext(sl_pq_rle_t *r, uint64_t *p0, uint64_t *p1, uint32_t at, uint32_t n, sl_error_t *err)
{
    return get_bits(r, p0, p1, at, n, err, even_pext);
}

/* BMI2 with a fast pext: not AMD's Zen 1 and 2 (their pext takes up to
 * hundreds of cycles). */
static bool fast_pext(void)
{
    return __builtin_cpu_supports("bmi2") && !__builtin_cpu_is("znver1") &&
           !__builtin_cpu_is("znver2");
}
#endif

sl_err_t sl_pq_rle_get_bits(sl_pq_rle_t *r, uint64_t *p0, uint64_t *p1, uint32_t at, uint32_t n,
                            sl_error_t *err)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (!r->plain && fast_pext()) return get_bits_pext(r, p0, p1, at, n, err);
#endif
    return get_bits(r, p0, p1, at, n, err, even_bits);
}

sl_err_t sl_pq_rle_repeated(sl_pq_rle_t *r, uint32_t *count, uint32_t *value, sl_error_t *err)
{
    if (r->left == 0) {
        SL_FORWARD_IF_ERROR(rle_start(r, err));
    }
    *count = r->packed ? 0 : r->left;
    *value = r->value;
    return SL_OK;
}

sl_err_t sl_pq_rle_valid(sl_pq_rle_t *r, uint32_t max, uint8_t *valid, uint32_t n, uint32_t *nvalid,
                         sl_error_t *err)
{
    uint32_t idx[64], count = 0;
    while (n > 0) {
        if (r->left == 0) {
            SL_FORWARD_IF_ERROR(rle_start(r, err));
        }
        uint32_t k = r->left < n ? r->left : n;
        if (!r->packed) {
            if (r->value > max)
                return sl_error_set(err, SL_ERR_CORRUPT, "definition level %u of %u", r->value,
                                    max);
            /* a run of one level: one memset, no look at each */
            memset(valid, r->value == max, k);
            count += r->value == max ? k : 0;
        } else {
            k = k < 64 ? k : 64;
            SL_FORWARD_IF_ERROR(rle_unpack(r, idx, k, err));
            uint32_t top = 0;
            for (uint32_t i = 0; i < k; i++) {
                uint8_t v = idx[i] == max;
                valid[i] = v;
                count += v;
                top = idx[i] > top ? idx[i] : top;
            }
            if (top > max)
                return sl_error_set(err, SL_ERR_CORRUPT, "definition level %u of %u", top, max);
        }
        r->left -= k;
        valid += k;
        n -= k;
    }
    *nvalid = count;
    return SL_OK;
}

/* Are all k indices below n? Without a branch or a running maximum per
 * index: the sign of n - 1 - x in 64 bits, ORed (vectorised with SSE2). */
static bool indices_below(const uint32_t *idx, uint32_t k, uint32_t n)
{
    uint32_t i = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    /* 4 at a time (the plain loop is not vectorised at -O2): x >= n as a
     * signed compare of both with the top bit flipped */
    if (n > 0) {
        const __m128i flip = _mm_set1_epi32((int)0x80000000u);
        const __m128i top = _mm_set1_epi32((int)((n - 1) ^ 0x80000000u));
        __m128i bad4 = _mm_setzero_si128();
        for (; i + 4 <= k; i += 4) {
            __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(idx + i)), flip);
            bad4 = _mm_or_si128(bad4, _mm_cmpgt_epi32(x, top));
        }
        if (_mm_movemask_epi8(bad4) != 0) return false;
    }
#endif
    uint64_t bad = 0;
    for (; i < k; i++)
        bad |= (uint64_t)n - 1 - idx[i];
    return (bad >> 63) == 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* indices_below 8 at a time with AVX2 (n >= 1): x > n - 1 where the
 * unsigned max(x, n - 1) is not n - 1. */
__attribute__((target("avx2"))) static bool indices_below_avx2(const uint32_t *idx, uint32_t k,
                                                               uint32_t n)
{
    const __m256i top = _mm256_set1_epi32((int)(n - 1));
    __m256i bad8 = _mm256_setzero_si256();
    uint32_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(idx + i));
        bad8 = _mm256_or_si256(bad8, _mm256_xor_si256(_mm256_max_epu32(x, top), top));
    }
    return _mm256_testz_si256(bad8, bad8) && indices_below(idx + i, k - i, n);
}
#endif

/* indices_below, by AVX2 where the CPU has it (and plain is not asked). */
static bool indices_below_any(const uint32_t *idx, uint32_t k, uint32_t n, bool plain)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (n > 0 && !plain && __builtin_cpu_supports("avx2")) return indices_below_avx2(idx, k, n);
#endif
    return indices_below(idx, k, n);
}

/* The first of k indices at or above n (one is: indices_below said so). */
static uint32_t first_at_or_above(const uint32_t *idx, uint32_t k, uint32_t n)
{
    for (uint32_t i = 0; i < k; i++)
        if (idx[i] >= n) return idx[i];
    return n;
}

/* Are the k 16-bit little-endian indices at q all below n (n >= 1)? 8 at
 * a time with SSE2: x > n - 1 where the saturating x - (n - 1) is not 0. */
static bool u16_below(const uint8_t *q, uint32_t k, uint32_t n)
{
    if (n > 0x10000u) return true;
    const uint16_t top = (uint16_t)(n - 1);
    uint32_t i = 0;
    uint16_t bad = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    const __m128i vt = _mm_set1_epi16((short)top);
    __m128i acc = _mm_setzero_si128();
    for (; i + 8 <= k; i += 8)
        acc = _mm_or_si128(acc, _mm_subs_epu16(_mm_loadu_si128((const __m128i *)(q + 2 * i)), vt));
    bad = (uint16_t)(_mm_movemask_epi8(_mm_cmpeq_epi16(acc, _mm_setzero_si128())) != 0xffff);
#endif
    for (; i < k; i++) {
        uint16_t x = (uint16_t)(q[2 * i] | q[2 * i + 1] << 8);
        bad |= (uint16_t)(x > top);
    }
    return bad == 0;
}

/* The first of the k 16-bit indices at q at or above n (one is). */
static uint32_t u16_first_at_or_above(const uint8_t *q, uint32_t k, uint32_t n)
{
    for (uint32_t i = 0; i < k; i++)
        if ((uint32_t)(q[2 * i] | q[2 * i + 1] << 8) >= n)
            return (uint32_t)(q[2 * i] | q[2 * i + 1] << 8);
    return n;
}

/* Indices a step of the gathers: a writer's bit-packed run is up to 504
 * values (63 groups), so a step of 256 takes most runs in one or two, and
 * the unpack's, the check's and the loop's costs per call are paid a
 * quarter as often as with 64; the scratch (1 KiB on the stack) stays in
 * the L1 cache. */
#define SL_PQ_GATHER_CHUNK 256

/* sl_pq_rle_gather_*: a repeated run is one fill of its entry, a
 * bit-packed run is unpacked SL_PQ_GATHER_CHUNK indices at a time into a
 * scratch on the stack and gathered from there, while it is in cache. */
#define SL_PQ_RLE_GATHER(name, D, T)                                                               \
    sl_err_t name(sl_pq_rle_t *r, const D *dict, uint32_t dict_n, T *out, uint32_t n,              \
                  sl_error_t *err)                                                                 \
    {                                                                                              \
        uint32_t idx[SL_PQ_GATHER_CHUNK];                                                          \
        while (n > 0) {                                                                            \
            if (r->left == 0) {                                                                    \
                sl_err_t rc = rle_start(r, err);                                                   \
                if (rc != SL_OK) return rc;                                                        \
            }                                                                                      \
            uint32_t k = r->left < n ? r->left : n;                                                \
            if (!r->packed) {                                                                      \
                if (r->value >= dict_n)                                                            \
                    return sl_error_set(err, SL_ERR_CORRUPT,                                       \
                                        "dictionary index %u out of range (dictionary of %u)",     \
                                        r->value, dict_n);                                         \
                const T v = (T)dict[r->value];                                                     \
                for (uint32_t i = 0; i < k; i++)                                                   \
                    out[i] = v;                                                                    \
            } else {                                                                               \
                k = k < SL_PQ_GATHER_CHUNK ? k : SL_PQ_GATHER_CHUNK;                               \
                if (r->width == 16 && dict_n > 0 &&                                                \
                    (r->run_pos + k) * 16 <= (uint64_t)r->run_len * 8) {                           \
                    /* 16-bit indices are the run's bytes: gathered from there */                  \
                    const uint8_t *q = r->run + r->run_pos * 2;                                    \
                    if (!u16_below(q, k, dict_n))                                                  \
                        return sl_error_set(err, SL_ERR_CORRUPT,                                   \
                                            "dictionary index %u out of range (dictionary of %u)", \
                                            u16_first_at_or_above(q, k, dict_n), dict_n);          \
                    for (uint32_t i = 0; i < k; i++)                                               \
                        out[i] = (T)dict[q[2 * i] | q[2 * i + 1] << 8];                            \
                    r->run_pos += k;                                                               \
                    r->left -= k;                                                                  \
                    out += k;                                                                      \
                    n -= k;                                                                        \
                    continue;                                                                      \
                }                                                                                  \
                sl_err_t rc = rle_unpack(r, idx, k, err);                                          \
                if (rc != SL_OK) return rc;                                                        \
                if (!indices_below_any(idx, k, dict_n, r->plain))                                  \
                    return sl_error_set(err, SL_ERR_CORRUPT,                                       \
                                        "dictionary index %u out of range (dictionary of %u)",     \
                                        first_at_or_above(idx, k, dict_n), dict_n);                \
                for (uint32_t i = 0; i < k; i++)                                                   \
                    out[i] = (T)dict[idx[i]];                                                      \
            }                                                                                      \
            r->left -= k;                                                                          \
            out += k;                                                                              \
            n -= k;                                                                                \
        }                                                                                          \
        return SL_OK;                                                                              \
    }

SL_PQ_RLE_GATHER(sl_pq_rle_gather_f32, float, float)
SL_PQ_RLE_GATHER(sl_pq_rle_gather_f64, double, double)
SL_PQ_RLE_GATHER(sl_pq_rle_gather_i64, int64_t, int64_t)
SL_PQ_RLE_GATHER(sl_pq_rle_gather_i32_i64, int32_t, int64_t)
#undef SL_PQ_RLE_GATHER

/* Packed varints (varint.h). The portable loop reads 8 bytes as a word
 * and finds a varint's end with one mask, but each varint's start waits
 * for the previous one's end: about 12 cycles an id, most of a record's
 * decoding. Where the CPU has SSSE3 and SSE4.1, the continuation bits of
 * 64 bytes are taken at once (four movemasks), and for each 8 of them a
 * table built once (Plaisance, Kurz and Lemire's "masked VByte", cut down
 * to 8 bytes so that the table is 4.5 KiB and stays in L1) gives the
 * shuffle that puts up to four varints of at most 4 bytes in four 32-bit
 * lanes, where their groups are put together at once. What one step
 * waits for is then a shift and a table entry, not a load of the bytes:
 * 2.0 ns an id of the sessions stream against 3.4 (bench_kafka_produce).
 * Four 3-byte varints in a row (ids of a vocabulary of a million) are
 * taken in one step of 12 bytes, where the 8-byte table gives two. */
#include "kafka/varint.h"

#include <stddef.h>

#define LANES 4

bool sl_varint_read_packed_portable(const uint8_t *p, const uint8_t *end, int64_t *to, uint64_t *n)
{
    const uint8_t *q = p;
    uint64_t k = *n;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (end - q >= 8) {
        uint64_t x;
        memcpy(&x, q, 8);
        uint64_t stop = ~x & 0x8080808080808080ull;
        if (!stop) { /* a varint of 9 or 10 bytes */
            uint64_t v;
            if (!sl_varint_read(&q, end, &v)) return false;
            to[k++] = (int64_t)v;
            continue;
        }
        unsigned bits = (unsigned)__builtin_ctzll(stop) + 1;
        q += bits / 8;
        if (bits <= 32) { /* up to 4 bytes (ids below 2^28): two steps on 32 bits */
            uint32_t y = (uint32_t)x & 0x7f7f7f7fu & (uint32_t)(((uint64_t)1 << bits) - 1);
            y = ((y & 0x7f007f00u) >> 1) | (y & 0x007f007fu);
            to[k++] = (int64_t)(((y & 0x3fff0000u) >> 2) | (y & 0x00003fffu));
            continue;
        }
        if (bits < 64) x &= ((uint64_t)1 << bits) - 1;
        to[k++] = (int64_t)sl_varint_compact(x & 0x7f7f7f7f7f7f7f7full);
    }
#endif
    while (q < end) {
        uint64_t v;
        if (!sl_varint_read(&q, end, &v)) return false;
        to[k++] = (int64_t)v;
    }
    *n = k;
    return true;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* For each pattern of continuation bits in 8 bytes (bit i: byte i has
 * one): the shuffle putting the leading varints of at most 4 bytes in
 * 32-bit lanes (0x80: a zero byte), how many there are (0: the first is
 * longer than 4 bytes, or does not end within the 8), and the bytes they
 * take. */
static struct pattern {
    uint8_t shuffle[16];
    uint8_t count, bytes;
} patterns[256];
static bool have_simd;

/* Four varints of 3 bytes in 12 (ids from 2^14 to 2^21: a vocabulary of
 * a million, the bulk of the sessions stream's ids). The 8-byte patterns
 * take only two of them a step; continuation bits 110 110 110 110 (bit i:
 * byte i) take four. */
#define THREE_BY_FOUR 0x6dbu
static const struct pattern three_by_four = {
    {0, 1, 2, 0x80, 3, 4, 5, 0x80, 6, 7, 8, 0x80, 9, 10, 11, 0x80}, LANES, 12};

__attribute__((constructor)) static void build_patterns(void)
{
    __builtin_cpu_init();
    have_simd = __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1");
    for (unsigned m = 0; m < 256; m++) {
        struct pattern *t = &patterns[m];
        memset(t->shuffle, 0x80, sizeof t->shuffle);
        unsigned at = 0;
        while (t->count < LANES && at < 8) {
            unsigned len = 1;
            while (at + len - 1 < 8 && (m >> (at + len - 1) & 1))
                len++;
            if (at + len > 8 || len > 4) break; /* runs past the 8 bytes, or too long */
            for (unsigned j = 0; j < len; j++)
                t->shuffle[4 * t->count + j] = (uint8_t)(at + j);
            t->count++;
            at += len;
        }
        t->bytes = (uint8_t)at;
    }
}

__attribute__((target("ssse3,sse4.1"))) static bool read_packed_simd(const uint8_t *p,
                                                                     const uint8_t *end,
                                                                     const uint8_t *readable,
                                                                     int64_t *to, uint64_t *n)
{
    const uint8_t *q = p;
    uint64_t k = *n;
    const __m128i low7 = _mm_set1_epi32(0x7f7f7f7f), odd = _mm_set1_epi32(0x7f007f00),
                  even = _mm_set1_epi32(0x007f007f), high = _mm_set1_epi32(0x3fff0000),
                  lowh = _mm_set1_epi32(0x00003fff);
#define DECODE_AT(at, t)                                                                           \
    do {                                                                                           \
        __m128i y =                                                                                \
            _mm_and_si128(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(at)),                 \
                                           _mm_loadu_si128((const __m128i *)(t)->shuffle)),        \
                          low7);                                                                   \
        y = _mm_or_si128(_mm_srli_epi32(_mm_and_si128(y, odd), 1), _mm_and_si128(y, even));        \
        y = _mm_or_si128(_mm_srli_epi32(_mm_and_si128(y, high), 2), _mm_and_si128(y, lowh));       \
        _mm_storeu_si128((__m128i *)(to + k), _mm_cvtepu32_epi64(y));                              \
        _mm_storeu_si128((__m128i *)(to + k + 2), _mm_cvtepu32_epi64(_mm_srli_si128(y, 8)));       \
        k += (t)->count;                                                                           \
    } while (0)
    /* 64 bytes inside the run at a time: their continuation bits first,
     * in one word, so that finding the next varints is a shift of it and
     * a table lookup, with no load of the bytes in between (that wait was
     * the loop's pace). The four lanes are written, counted or not: the
     * scratch. */
    while (end - q >= 64 && readable - q >= 80) {
        uint64_t mask = 0;
        for (int i = 0; i < 4; i++)
            mask |= (uint64_t)(uint16_t)_mm_movemask_epi8(
                        _mm_loadu_si128((const __m128i *)(q + 16 * i)))
                    << (16 * i);
        unsigned off = 0;
        while (off <= 56) {
            /* off <= 52: the 12 bytes' bits all within mask, so the last
             * one's end is seen, not a zero shifted in */
            if (off <= 52 && ((mask >> off) & 0xfff) == THREE_BY_FOUR) {
                DECODE_AT(q + off, &three_by_four);
                off += three_by_four.bytes;
                continue;
            }
            const struct pattern *t = &patterns[(mask >> off) & 0xff];
            if (!t->count) break;
            DECODE_AT(q + off, t);
            off += t->bytes;
        }
        q += off;
        if (off <= 56) { /* a varint of 5 bytes or more */
            uint64_t x;
            if (!sl_varint_read(&q, end, &x)) return false;
            to[k++] = (int64_t)x;
        }
    }
    while (q < end && readable - q >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)q);
        unsigned m = (unsigned)_mm_movemask_epi8(v) & 0xff;
        /* bytes from end on look like continuations: a varint they would
         * end is not counted, and one cut by end goes to sl_varint_read,
         * which refuses it */
        if (end - q < 8) m |= 0xffu << (end - q) & 0xffu;
        const struct pattern *t = &patterns[m];
        if (t->count == 0) { /* a varint of 5 bytes or more first */
            uint64_t x;
            if (!sl_varint_read(&q, end, &x)) return false;
            to[k++] = (int64_t)x;
            continue;
        }
        DECODE_AT(q, t);
        q += t->bytes;
    }
#undef DECODE_AT
    *n = k;
    return sl_varint_read_packed_portable(q, end, to, n);
}

bool sl_varint_read_packed(const uint8_t *p, const uint8_t *end, const uint8_t *readable,
                           int64_t *to, uint64_t *n)
{
    return have_simd ? read_packed_simd(p, end, readable, to, n)
                     : sl_varint_read_packed_portable(p, end, to, n);
}
#else
bool sl_varint_read_packed(const uint8_t *p, const uint8_t *end, const uint8_t *readable,
                           int64_t *to, uint64_t *n)
{
    (void)readable;
    return sl_varint_read_packed_portable(p, end, to, n);
}
#endif

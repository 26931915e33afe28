/* Protobuf varints (base 128, little-endian groups, the high bit of a byte
 * saying another follows) as the Kafka record walker reads them
 * (record_decode.c): one at a time, and a packed run of them, the bulk of
 * a record (the sessions stream has some 125 ids a sample, most of 1 to
 * 3 bytes).
 *
 * Both accept what protobuf-c 1.4 accepts: at most 10 bytes, bits above
 * 64 dropped; a varint that runs past the end is refused. */
#ifndef SLUICE_KAFKA_VARINT_H
#define SLUICE_KAFKA_VARINT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The 7-bit groups of the low bytes of x (high bits already clear) side
 * by side: 8 bytes into 56 bits, in three steps of shifts and masks. */
static inline uint64_t sl_varint_compact(uint64_t x)
{
    x = ((x & 0x7f007f007f007f00ull) >> 1) | (x & 0x007f007f007f007full);
    x = ((x & 0x3fff00003fff0000ull) >> 2) | (x & 0x00003fff00003fffull);
    return ((x & 0x0fffffff00000000ull) >> 4) | (x & 0x000000000fffffffull);
}

/* One varint at *p (before end) into *v; *p moves past it. With 10 bytes
 * left its first 8 are read as one word: the first byte without the
 * continuation bit ends it, and the groups are put together without a
 * loop. */
static inline bool sl_varint_read(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    const uint8_t *q = *p;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (end - q >= 10) {
        uint64_t x;
        memcpy(&x, q, 8);
        uint64_t stop = ~x & 0x8080808080808080ull;
        if (stop) {
            unsigned bits = (unsigned)__builtin_ctzll(stop) + 1; /* 8 x the bytes */
            if (bits < 64) x &= ((uint64_t)1 << bits) - 1;
            *v = sl_varint_compact(x & 0x7f7f7f7f7f7f7f7full);
            *p = q + bits / 8;
            return true;
        }
        x = sl_varint_compact(x & 0x7f7f7f7f7f7f7f7full) | (uint64_t)(q[8] & 0x7f) << 56;
        if (q[8] < 0x80) {
            *v = x;
            *p = q + 9;
            return true;
        }
        if (q[9] >= 0x80) return false; /* 10 bytes, none the last */
        *v = x | (uint64_t)q[9] << 63;  /* bits above 64 dropped, as protobuf-c */
        *p = q + 10;
        return true;
    }
#endif
    uint64_t x = 0;
    for (unsigned i = 0, shift = 0; i < 10 && q < end; i++, shift += 7) {
        uint8_t b = *q++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            *p = q;
            return true;
        }
    }
    return false;
}

/* Values a packed read may write past the last varint, as scratch. */
#define SL_VARINT_SCRATCH 3

/* Every varint of [p, end), appended to to[*n...] as int64 (protobuf's
 * int64: the 64 bits as they are); *n counts them. Bytes up to readable
 * (>= end: the rest of the record the run is part of) may be loaded but
 * are never decoded, so that short runs are read 16 bytes at a time too.
 * to must have room for *n + (end - p) + SL_VARINT_SCRATCH values (at most
 * one a byte, and the scratch). @return false when the bytes are not a run
 * of whole varints (*n then undefined). Uses SSSE3 and SSE4.1 where the
 * CPU has them. */
bool sl_varint_read_packed(const uint8_t *p, const uint8_t *end, const uint8_t *readable,
                           int64_t *to, uint64_t *n);

/* The same without SIMD (what sl_varint_read_packed does elsewhere), one
 * varint at a time; reads nothing past end. For tests to compare. */
bool sl_varint_read_packed_portable(const uint8_t *p, const uint8_t *end, int64_t *to, uint64_t *n);

#endif

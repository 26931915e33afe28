/* Packed varints (src/kafka/varint.c): the SIMD reader and the portable
 * one against a plain byte loop, on random runs of every length (1 to 10
 * bytes, overlong encodings, values with bit 63), cut at every place, with
 * garbage after the run that may be loaded but must never be decoded, and
 * with a canary past the room the caller promised. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kafka/varint.h"

#define MAX_BYTES 4096
#define CANARY INT64_C(0x5a5a5a5a5a5a5a5a)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The reference: protobuf's rule, one byte at a time. */
static bool reference(const uint8_t *p, const uint8_t *end, int64_t *to, uint64_t *n)
{
    uint64_t k = 0;
    while (p < end) {
        uint64_t x = 0;
        unsigned i = 0;
        for (;; i++) {
            if (i == 10 || p == end) return false;
            uint8_t b = *p++;
            x |= (uint64_t)(b & 0x7f) << (7 * i); /* bits above 64 dropped */
            if (!(b & 0x80)) break;
        }
        to[k++] = (int64_t)x;
    }
    *n = k;
    return true;
}

/* One varint of value v into out in `bytes` bytes (>= its canonical
 * length: the rest overlong, continuation bytes of zero groups). */
static size_t put(uint8_t *out, uint64_t v, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i++) {
        uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7;
        out[i] = (uint8_t)(b | (i + 1 < bytes ? 0x80 : 0));
    }
    return bytes;
}

static unsigned canonical(uint64_t v)
{
    unsigned n = 1;
    while (v >>= 7)
        n++;
    return n;
}

/* A value of the kind the sessions stream has (mostly 1 to 3 bytes), or
 * of any length. */
static uint64_t draw_value(void)
{
    switch (next() % 8) {
    case 0:
        return next(); /* up to 10 bytes */
    case 1:
        return next() >> (next() % 64);
    case 2:
        return next() % 128;
    default:
        return next() % (1u << (7 * (1 + next() % 4)));
    }
}

/* Both readers on [buf, buf + len), loadable to buf + readable, against
 * the reference; the room is exactly what varint.h asks for, and the
 * values past it must keep their canary. */
static void check(const uint8_t *buf, size_t len, size_t readable)
{
    static int64_t want[MAX_BYTES], got[MAX_BYTES + 64];
    uint64_t nw = 0;
    bool ok = reference(buf, buf + len, want, &nw);
    for (int simd = 0; simd < 2; simd++) {
        for (size_t i = 0; i < sizeof got / sizeof got[0]; i++)
            got[i] = CANARY;
        uint64_t start = next() % 3, n = start; /* appended after values already there */
        bool r = simd ? sl_varint_read_packed(buf, buf + len, buf + readable, got, &n)
                      : sl_varint_read_packed_portable(buf, buf + len, got, &n);
        cr_assert_eq(r, ok, "%s reader: %s a run of %zu bytes the reference %s",
                     simd ? "simd" : "portable", r ? "accepted" : "refused", len,
                     ok ? "accepts" : "refuses");
        for (size_t i = start + len + SL_VARINT_SCRATCH; i < sizeof got / sizeof got[0]; i++)
            cr_assert_eq(got[i], CANARY, "wrote past the room, at %zu (run of %zu bytes)", i, len);
        if (!ok) continue;
        cr_assert_eq(n - start, nw, "%s reader: %" PRIu64 " values, want %" PRIu64,
                     simd ? "simd" : "portable", n - start, nw);
        for (uint64_t i = 0; i < nw; i++)
            cr_assert_eq(got[start + i], want[i],
                         "%s reader: value %" PRIu64 " is %" PRId64 ", want %" PRId64,
                         simd ? "simd" : "portable", i, got[start + i], want[i]);
    }
}

Test(kafka_varint, random_runs_read_as_protobuf_reads_them)
{
    static uint8_t buf[MAX_BYTES + 32];
    for (int round = 0; round < 3000; round++) {
        size_t len = 0, want = next() % 300;
        while (len + 10 <= want) {
            uint64_t v = draw_value();
            unsigned c = canonical(v), bytes = c;
            if (next() % 16 == 0) bytes = c + (unsigned)(next() % (11 - c)); /* overlong, <= 10 */
            if (bytes > 10) bytes = 10;
            len += put(buf + len, v, bytes);
        }
        size_t slack = next() % 24; /* loadable garbage after the run */
        for (size_t i = len; i < len + slack; i++)
            buf[i] = (uint8_t)next();
        check(buf, len, len + slack);
        /* the same run cut short anywhere: a varint cut in two is refused */
        size_t cut = len ? next() % len : 0;
        check(buf, cut, len + slack);
    }
}

Test(kafka_varint, every_length_at_every_offset)
{
    static uint8_t buf[256];
    for (unsigned bytes = 1; bytes <= 10; bytes++)
        for (size_t lead = 0; lead < 40; lead++) {
            size_t len = 0;
            for (size_t i = 0; i < lead; i++)
                buf[len++] = (uint8_t)(next() % 128); /* one-byte varints */
            uint64_t v = bytes == 10 ? next() | (UINT64_C(1) << 63)
                                     : (UINT64_C(1) << (7 * (bytes - 1))) + next() % 100;
            len += put(buf + len, v, bytes);
            buf[len++] = 5;
            for (size_t slack = 0; slack < 20; slack += 19) {
                memset(buf + len, 0xff, slack); /* continuations: they must not count */
                check(buf, len, len + slack);
            }
        }
}

Test(kafka_varint, malformed_runs_are_refused)
{
    /* 11 bytes: no varint is that long */
    uint8_t eleven[32];
    memset(eleven, 0x80, 10);
    eleven[10] = 1;
    memset(eleven + 11, 0, sizeof eleven - 11);
    check(eleven, 11, sizeof eleven);
    int64_t to[64];
    uint64_t n = 0;
    cr_assert_not(sl_varint_read_packed(eleven, eleven + 11, eleven + sizeof eleven, to, &n));
    /* a run ending inside a varint, with what would end it loadable */
    uint8_t cut[32] = {1, 2, 0x81, 0x81};
    n = 0;
    cr_assert_not(sl_varint_read_packed(cut, cut + 4, cut + sizeof cut, to, &n));
    /* an empty run */
    n = 7;
    cr_assert(sl_varint_read_packed(cut, cut, cut + sizeof cut, to, &n));
    cr_assert_eq(n, 7);
}

/* Runs of 3-byte varints (the SIMD reader takes four of them a step when
 * the 12 bytes are all inside its 64-byte window), at every phase against
 * that window, with one varint of another length at every place in the
 * run and the run cut at every byte of its tail. */
Test(kafka_varint, runs_of_three_byte_varints)
{
    static uint8_t buf[512];
    for (size_t lead = 0; lead < 12; lead++)
        for (unsigned odd = 0; odd <= 10; odd++)
            for (size_t at = 0; at < 40; at += odd ? 1 : 40) {
                size_t len = 0;
                for (size_t i = 0; i < lead; i++)
                    buf[len++] = (uint8_t)(next() % 128);
                for (size_t i = 0; i < 40; i++) {
                    uint64_t v = (UINT64_C(1) << 14) + next() % ((UINT64_C(1) << 21) - (1u << 14));
                    if (odd && i == at) /* another length here, canonical (or 10 bytes) */
                        v = odd == 10 ? next() | (UINT64_C(1) << 63)
                                      : (UINT64_C(1) << (7 * (odd - 1))) + next() % 100;
                    len += put(buf + len, v, canonical(v));
                }
                size_t slack = 24;
                memset(buf + len, 0xff, slack); /* continuations: they must not count */
                check(buf, len, len + slack);
                for (size_t cut = len > 14 ? len - 14 : 0; cut < len; cut++)
                    check(buf, cut, len + slack);
            }
    /* long runs with a varint of another length now and then, at random
     * places against the window (a 4-byte one whose last byte is just
     * past it must not be taken for a 3-byte one) */
    static uint8_t run[2048];
    for (int round = 0; round < 3000; round++) {
        size_t len = 0;
        for (int i = 0; i < 150; i++) {
            uint64_t v = (UINT64_C(1) << 14) + next() % ((UINT64_C(1) << 21) - (1u << 14));
            if (next() % 12 == 0) v = draw_value();
            len += put(run + len, v, canonical(v));
        }
        memset(run + len, 0xff, 24);
        check(run, len, len + 24);
    }
}

/* The gather from an INT64 dictionary kept narrow (32-bit entries,
 * sl_pq_rle_gather_i32_i64, docs/PARQUET.md "Dictionaries kept narrow"):
 * the same values and the same errors as the gather from the 64-bit
 * entries, over repeated and bit-packed runs in random pieces, entries at
 * both ends of the 32-bit range, and an index at the dictionary's limit. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "parquet/encoding.h"
#include "testutil.h"

/* Appends a bit-packed run of the n values v (n a multiple of 8) of w bits
 * at buf + *len. */
static void put_packed(uint8_t *buf, size_t *len, const uint32_t *v, uint32_t n, unsigned w)
{
    buf[(*len)++] = (uint8_t)((n / 8) << 1 | 1); /* n / 8 < 64: one header byte */
    size_t bytes = (size_t)n * w / 8;
    memset(buf + *len, 0, bytes);
    for (uint32_t i = 0; i < n; i++)
        for (unsigned b = 0; b < w; b++)
            if (v[i] >> b & 1)
                buf[*len + ((size_t)i * w + b) / 8] |= (uint8_t)(1u << ((i * w + b) % 8));
    *len += bytes;
}

/* Appends a repeated run of count x value (count < 64: one header byte;
 * w <= 16). */
static void put_repeated(uint8_t *buf, size_t *len, uint32_t count, uint32_t value, unsigned w)
{
    buf[(*len)++] = (uint8_t)(count << 1);
    for (unsigned k = 0; k < (w + 7) / 8; k++)
        buf[(*len)++] = (uint8_t)(value >> (8 * k));
}

/* Random runs of indices of W bits into a dictionary of DICT entries (its
 * last entry often), gathered in random pieces by both gathers. */
static void same_values(unsigned W, uint32_t DICT, uint64_t seed)
{
    uint64_t rng = seed;
    enum { RUNS = 40, MAXV = RUNS * 56 };
    static int64_t wide[1 << 16];
    static int32_t narrow[1 << 16];
    /* the ends of the 32-bit range, 0, -1, and random entries */
    for (uint32_t i = 0; i < DICT; i++) {
        int64_t x = (int64_t)(int32_t)(uint32_t)tu_below(&rng, UINT64_C(1) << 32);
        if (i == 0) x = INT32_MIN;
        if (i == 1) x = INT32_MAX;
        if (i == 2) x = -1;
        if (i == 3) x = 0;
        wide[i] = x;
        narrow[i] = (int32_t)x;
    }
    for (unsigned round = 0; round < 50; round++) {
        static uint8_t buf[MAXV * 4];
        static uint32_t want_idx[MAXV];
        size_t len = 0;
        uint32_t n = 0;
        for (unsigned run = 0; run < RUNS; run++) {
            if (tu_below(&rng, 3) == 0) {
                uint32_t count = 1 + (uint32_t)tu_below(&rng, 50);
                uint32_t v = (uint32_t)tu_below(&rng, DICT);
                if (tu_below(&rng, 4) == 0) v = DICT - 1; /* the last entry */
                put_repeated(buf, &len, count, v, W);
                for (uint32_t i = 0; i < count; i++)
                    want_idx[n++] = v;
            } else {
                uint32_t count = 8 * (1 + (uint32_t)tu_below(&rng, 7));
                uint32_t v[56];
                for (uint32_t i = 0; i < count; i++)
                    v[i] = i % 13 == 5 ? DICT - 1 : (uint32_t)tu_below(&rng, DICT);
                put_packed(buf, &len, v, count, W);
                memcpy(want_idx + n, v, count * sizeof v[0]);
                n += count;
            }
        }
        sl_pq_rle_t a, b;
        sl_pq_rle_init(&a, buf, len, W);
        sl_pq_rle_init(&b, buf, len, W);
        static int64_t oa[MAXV], ob[MAXV];
        /* in random pieces: runs split anywhere, pieces across runs */
        uint32_t at = 0;
        while (at < n) {
            uint32_t k = 1 + (uint32_t)tu_below(&rng, 200);
            k = k < n - at ? k : n - at;
            sl_error_t ea = {0}, eb = {0};
            cr_assert_eq(sl_pq_rle_gather_i64(&a, wide, DICT, oa + at, k, &ea), SL_OK, "%s",
                         ea.msg);
            cr_assert_eq(sl_pq_rle_gather_i32_i64(&b, narrow, DICT, ob + at, k, &eb), SL_OK,
                         "%s (seed %llu)", eb.msg, (unsigned long long)seed);
            at += k;
        }
        for (uint32_t i = 0; i < n; i++) {
            cr_assert_eq(ob[i], wide[want_idx[i]], "round %u value %u: %lld, want %lld (seed %llu)",
                         round, i, (long long)ob[i], (long long)wide[want_idx[i]],
                         (unsigned long long)seed);
            cr_assert_eq(oa[i], ob[i]);
        }
        /* the float gathers take the same paths (16-bit indices straight
         * from the run's bytes) */
        static double dd[1 << 16], od[MAXV];
        for (uint32_t i = 0; i < DICT; i++)
            dd[i] = (double)wide[i] / 4;
        sl_pq_rle_init(&a, buf, len, W);
        sl_error_t ed = {0};
        cr_assert_eq(sl_pq_rle_gather_f64(&a, dd, DICT, od, n, &ed), SL_OK, "%s", ed.msg);
        for (uint32_t i = 0; i < n; i++)
            cr_assert(od[i] == dd[want_idx[i]], "round %u value %u (seed %llu)", round, i,
                      (unsigned long long)seed);
    }
}

Test(parquet_narrow, same_values_as_the_wide_gather)
{
    /* widths of 8, 12 and 16 bits (16: indices read straight from the
     * run's bytes), dictionaries filling their width or not */
    uint64_t seed = tu_seed("parquet_narrow::same_values_as_the_wide_gather");
    same_values(8, 200, seed);
    same_values(12, 3000, seed + 1);
    same_values(16, 40000, seed + 2);
    same_values(16, 1u << 16, seed + 3);
}

Test(parquet_narrow, index_at_the_limit_refused_as_by_the_wide_gather)
{
    /* a dictionary of n entries: index n - 1 is gathered, index n is
     * refused, naming it, in a repeated run and at each place of a
     * bit-packed one; both gathers give the same message */
    static int64_t wide[1 << 16];
    static int32_t narrow[1 << 16];
    for (uint32_t i = 0; i < 1u << 16; i++) {
        wide[i] = (int64_t)i * -30000 + 7; /* down to -1,966,049,993: 32 bits */
        narrow[i] = (int32_t)wide[i];
    }
    for (int wi = 0; wi < 4; wi++)
        for (int bad_at = -1; bad_at < 64; bad_at++) {
            /* 10-bit indices into 1,000 entries; 16-bit ones (straight from the
             * run's bytes) into 40,000, 65,535 and 1 */
            const unsigned W = wi == 0 ? 10 : 16;
            const uint32_t n = wi == 0 ? 1000 : wi == 1 ? 40000 : wi == 2 ? 65535 : 1;
            for (int repeated = 0; repeated < 2; repeated++) {
                if (repeated && bad_at > 0) continue;
                uint8_t buf[1 + 64 * 2];
                size_t len = 0;
                uint32_t v[64];
                for (uint32_t i = 0; i < 64; i++)
                    v[i] = i % 2 ? n - 1 : (i * 37 + 11) % n;
                if (repeated)
                    put_repeated(buf, &len, 60, bad_at == 0 ? n : n - 1, W);
                else {
                    if (bad_at >= 0) v[bad_at] = n;
                    put_packed(buf, &len, v, 64, W);
                }
                sl_pq_rle_t a, b;
                sl_pq_rle_init(&a, buf, len, W);
                sl_pq_rle_init(&b, buf, len, W);
                uint32_t m = repeated ? 60 : 64;
                int64_t oa[64], ob[64];
                sl_error_t ea = {0}, eb = {0};
                sl_err_t ra = sl_pq_rle_gather_i64(&a, wide, n, oa, m, &ea);
                sl_err_t rb = sl_pq_rle_gather_i32_i64(&b, narrow, n, ob, m, &eb);
                cr_assert_eq(ra, rb, "width %u bad at %d, repeated %d", W, bad_at, repeated);
                if (bad_at < 0) {
                    cr_assert_eq(rb, SL_OK, "%s", eb.msg);
                    for (uint32_t i = 0; i < m; i++)
                        cr_assert_eq(ob[i], repeated ? wide[n - 1] : wide[v[i]], "index %u", i);
                } else {
                    char want[128];
                    snprintf(want, sizeof want,
                             "dictionary index %u out of range (dictionary of %u)", n, n);
                    cr_assert_eq(rb, SL_ERR_CORRUPT, "bad at %d", bad_at);
                    cr_assert_str_eq(eb.msg, want);
                    cr_assert_str_eq(ea.msg, eb.msg);
                }
            }
        }
}

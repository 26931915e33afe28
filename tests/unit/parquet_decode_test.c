/* The Parquet reader's decoders (src/parquet) with exact values: the
 * Thrift compact protocol (fields, deltas and long ids, every type, lists,
 * maps, skipping unknown fields, depth, lengths past the buffer), the
 * RLE/bit-packed hybrid (every bit width; dictionary gathers and validity
 * straight from the runs), DELTA_BINARY_PACKED, BYTE_STREAM_SPLIT, and
 * levels turned into validity and list offsets through a whole file built
 * here byte by byte; each with malformed inputs. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/encoding.h"
#include "parquet/parquet.h"
#include "parquet/thrift.h"
#include "parquet_decode_util.h"

/* ---- thrift compact ---- */

Test(parquet_thrift, fields_and_values)
{
    /* struct { 1: i32 -3; 2: binary "ab"; 4: true; 20 (long id): i64 300; 21: list<i32>
     * [1,-1]; 22: double; stop } */
    const uint8_t buf[] = {0x15, 0x05, 0x18, 2, 'a', 'b', 0x21, 0x06, 0x28, 0xd8, 0x04, 0x19, 0x25,
                           0x02, 0x01, 0x17, 0, 0,   0,   0,    0,    0,    0xf0, 0x3f, 0x00};
    sl_error_t err = {0};
    sl_pq_thrift_t t;
    sl_pq_thrift_init(&t, buf, sizeof buf, &err);
    cr_assert_eq(sl_pq_thrift_struct_begin(&t, SL_PQ_T_STRUCT, "T"), SL_OK);
    int16_t last = 0, id;
    uint8_t ft;
    int32_t i32;
    int64_t i64;
    const uint8_t *p;
    uint32_t len, n;
    bool b;
    uint8_t elem;
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_OK);
    cr_assert(id == 1 && ft == SL_PQ_T_I32);
    cr_assert_eq(sl_pq_thrift_i32(&t, ft, id, &i32), SL_OK);
    cr_assert_eq(i32, -3);
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_OK);
    cr_assert(id == 2 && ft == SL_PQ_T_BINARY);
    cr_assert_eq(sl_pq_thrift_binary(&t, ft, id, &p, &len), SL_OK);
    cr_assert(len == 2 && memcmp(p, "ab", 2) == 0);
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_OK);
    cr_assert(id == 4 && ft == SL_PQ_T_TRUE);
    cr_assert_eq(sl_pq_thrift_bool(&t, ft, id, &b), SL_OK);
    cr_assert(b);
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_OK);
    cr_assert(id == 20 && ft == SL_PQ_T_I64, "id %d type %d", id, ft);
    cr_assert_eq(sl_pq_thrift_i64(&t, ft, id, &i64), SL_OK);
    cr_assert_eq(i64, 300);
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_OK);
    cr_assert(id == 21 && ft == SL_PQ_T_LIST);
    cr_assert_eq(sl_pq_thrift_list(&t, ft, id, &elem, &n), SL_OK);
    cr_assert(elem == SL_PQ_T_I32 && n == 2);
    cr_assert_eq(sl_pq_thrift_i32(&t, elem, id, &i32), SL_OK);
    cr_assert_eq(i32, 1);
    cr_assert_eq(sl_pq_thrift_i32(&t, elem, id, &i32), SL_OK);
    cr_assert_eq(i32, -1);
    /* an unknown field is skipped */
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_OK);
    cr_assert(id == 22 && ft == SL_PQ_T_DOUBLE);
    cr_assert_eq(sl_pq_thrift_skip(&t, ft), SL_OK);
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_OK);
    cr_assert_eq(ft, SL_PQ_T_STOP);
    cr_assert_eq(t.p, t.end);
}

Test(parquet_thrift, skip_nested_struct_map_and_list)
{
    /* struct { 1: struct { 1: map<i32,binary>{1:"x"}; 2: list<bool>[t,f] }; stop } */
    const uint8_t buf[] = {0x1c, 0x1b, 0x01, 0x58, 0x02, 0x01, 'x', 0x19, 0x21, 1, 2, 0x00, 0x00};
    sl_error_t err = {0};
    sl_pq_thrift_t t;
    sl_pq_thrift_init(&t, buf, sizeof buf, &err);
    cr_assert_eq(sl_pq_thrift_skip(&t, SL_PQ_T_STRUCT), SL_OK, "%s", err.msg);
    cr_assert_eq(t.p, t.end);
    cr_assert_eq(t.depth, 0);
}

Test(parquet_thrift, malformed)
{
    sl_error_t err = {0};
    sl_pq_thrift_t t;
    const uint8_t *p;
    uint32_t len, n;
    uint8_t elem;
    /* a binary longer than the buffer */
    const uint8_t b1[] = {0x05, 'a', 'b'};
    sl_pq_thrift_init(&t, b1, sizeof b1, &err);
    cr_assert_eq(sl_pq_thrift_binary(&t, SL_PQ_T_BINARY, 4, &p, &len), SL_ERR_TRUNCATED);
    cr_assert_str_eq(err.msg, "thrift struct field 4: binary of 5 bytes, 2 left");
    /* a list claiming more elements than bytes */
    const uint8_t b2[] = {0xf5, 0x80, 0x80, 0x04, 1};
    sl_pq_thrift_init(&t, b2, sizeof b2, &err);
    cr_assert_eq(sl_pq_thrift_list(&t, SL_PQ_T_LIST, 2, &elem, &n), SL_ERR_TRUNCATED);
    cr_assert_str_eq(err.msg, "thrift struct field 2: list of 65536 elements, 1 bytes left");
    /* the wrong type for a field */
    int32_t v;
    sl_pq_thrift_init(&t, b1, sizeof b1, &err);
    cr_assert_eq(sl_pq_thrift_i32(&t, SL_PQ_T_BINARY, 3, &v), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "thrift struct field 3: expected an integer, found binary");
    /* an i64 that does not fit an i32 */
    const uint8_t b3[] = {0x80, 0x80, 0x80, 0x80, 0x10};
    sl_pq_thrift_init(&t, b3, sizeof b3, &err);
    cr_assert_eq(sl_pq_thrift_i32(&t, SL_PQ_T_I64, 9, &v), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "thrift struct field 9: 2147483648 is not an i32");
    /* a varint of more than 10 bytes */
    const uint8_t b4[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    int64_t x;
    sl_pq_thrift_init(&t, b4, sizeof b4, &err);
    cr_assert_eq(sl_pq_thrift_i64(&t, SL_PQ_T_I64, 1, &x), SL_ERR_CORRUPT);
    /* field type 13 does not exist */
    const uint8_t b5[] = {0x1d};
    int16_t last = 0, id;
    uint8_t ft;
    sl_pq_thrift_init(&t, b5, sizeof b5, &err);
    cr_assert_eq(sl_pq_thrift_field(&t, &last, &id, &ft), SL_ERR_CORRUPT);
    /* a struct ending without its stop byte */
    const uint8_t b6[] = {0x15, 0x02};
    sl_pq_thrift_init(&t, b6, sizeof b6, &err);
    cr_assert_eq(sl_pq_thrift_skip(&t, SL_PQ_T_STRUCT), SL_ERR_TRUNCATED);
    /* structs nested deeper than the bound: refused, not a stack overflow */
    uint8_t deep[4096];
    memset(deep, 0x1c, sizeof deep); /* field 1: struct, again and again */
    sl_pq_thrift_init(&t, deep, sizeof deep, &err);
    cr_assert_eq(sl_pq_thrift_skip(&t, SL_PQ_T_STRUCT), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "nested over 32 deep") != NULL, "%s", err.msg);
}

/* ---- RLE / bit-packed hybrid ---- */

Test(parquet_rle, runs_and_bit_packed)
{
    /* RLE run of 5 x 3 (width 2), then a bit-packed run of 8 values 0,1,2,3,0,1,2,3 */
    const uint8_t buf[] = {0x0a, 0x03, 0x03, 0xe4, 0xe4};
    sl_pq_rle_t r;
    sl_error_t err = {0};
    uint32_t out[13];
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_get(&r, out, 3, &err), SL_OK);
    cr_assert_eq(sl_pq_rle_get(&r, out + 3, 10, &err), SL_OK, "%s", err.msg);
    const uint32_t want[13] = {3, 3, 3, 3, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    cr_assert_arr_eq(out, want, sizeof want);
    /* nothing left */
    cr_assert_eq(sl_pq_rle_get(&r, out, 1, &err), SL_ERR_TRUNCATED);
}

Test(parquet_rle, wide_values_and_malformed)
{
    /* width 20: an RLE run of 2 x 0xABCDE (3 value bytes) */
    const uint8_t buf[] = {0x04, 0xde, 0xbc, 0x0a};
    sl_pq_rle_t r;
    sl_error_t err = {0};
    uint32_t out[8];
    sl_pq_rle_init(&r, buf, sizeof buf, 20);
    cr_assert_eq(sl_pq_rle_get(&r, out, 2, &err), SL_OK);
    cr_assert(out[0] == 0xabcde && out[1] == 0xabcde);
    /* a bit-packed run whose bytes end early: only values inside are served */
    const uint8_t short_run[] = {0x03, 0xff}; /* 8 values of 3 bits need 3 bytes */
    sl_pq_rle_init(&r, short_run, sizeof short_run, 3);
    cr_assert_eq(sl_pq_rle_get(&r, out, 2, &err), SL_OK);
    cr_assert(out[0] == 7 && out[1] == 7);
    cr_assert_eq(sl_pq_rle_get(&r, out, 1, &err), SL_ERR_TRUNCATED);
    cr_assert_str_eq(err.msg, "bit-packed run runs past the end of its data");
    /* an RLE value wider than the bit width */
    const uint8_t wide[] = {0x02, 0x05};
    sl_pq_rle_init(&r, wide, sizeof wide, 2);
    cr_assert_eq(sl_pq_rle_get(&r, out, 1, &err), SL_ERR_CORRUPT);
    /* a run of 0 values */
    const uint8_t zero[] = {0x00, 0x01};
    sl_pq_rle_init(&r, zero, sizeof zero, 1);
    cr_assert_eq(sl_pq_rle_get(&r, out, 1, &err), SL_ERR_CORRUPT);
    /* a run value cut short */
    const uint8_t cut[] = {0x02, 0x01};
    sl_pq_rle_init(&r, cut, sizeof cut, 16);
    cr_assert_eq(sl_pq_rle_get(&r, out, 1, &err), SL_ERR_TRUNCATED);
}

/* Pack n values of w bits after a bit-packed run header (n a multiple of
 * 8, n / 8 < 64 groups: a one-byte header). @return the bytes used. */
static size_t pack_run(uint8_t *buf, const uint32_t *v, uint32_t n, unsigned w)
{
    buf[0] = (uint8_t)((n / 8) << 1 | 1);
    size_t bytes = (size_t)n * w / 8;
    memset(buf + 1, 0, bytes);
    for (uint32_t i = 0; i < n; i++)
        for (unsigned b = 0; b < w; b++)
            if (v[i] >> b & 1)
                buf[1 + ((size_t)i * w + b) / 8] |= (uint8_t)(1u << ((i * w + b) % 8));
    return 1 + bytes;
}

Test(parquet_rle, every_bit_width_at_every_offset)
{
    /* 248 values per width from a fixed LCG (seed 12345), read back in
     * pieces of 1, 7, 64 and the rest: group starts, unaligned starts and
     * the last values near the end of the buffer all go their own ways */
    enum { N = 248 };
    uint32_t v[N], out[N];
    uint8_t buf[1 + N * 4];
    uint64_t x = 12345;
    for (unsigned w2 = 2; w2 <= 65; w2++) {
        /* each width twice: the baseline's instructions, then the CPU's */
        const unsigned w = w2 / 2;
        for (uint32_t i = 0; i < N; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            v[i] = (uint32_t)(x >> 32) & (uint32_t)((UINT64_C(1) << w) - 1);
        }
        size_t len = pack_run(buf, v, N, w);
        sl_pq_rle_t r;
        sl_error_t err = {0};
        sl_pq_rle_init(&r, buf, len, w);
        r.plain = w2 % 2 == 0;
        const uint32_t piece[] = {1, 7, 64, N - 72};
        uint32_t at = 0;
        for (unsigned p = 0; p < 4; p++) {
            cr_assert_eq(sl_pq_rle_get(&r, out + at, piece[p], &err), SL_OK, "w %u: %s", w,
                         err.msg);
            at += piece[p];
        }
        for (uint32_t i = 0; i < N; i++)
            cr_assert_eq(out[i], v[i], "width %u value %u: %u, want %u (seed 12345)", w, i, out[i],
                         v[i]);
    }
}

Test(parquet_rle, dictionary_index_checked_at_every_position)
{
    /* a run of 296 indices of 10 bits (more than a gather's step of 256)
     * into a dictionary of 1,000 entries, one of them 1,000 at each
     * position in turn (or none), checked the baseline's way and the
     * CPU's (AVX2 where it has it) */
    enum { N = 296, D = 1000 };
    uint32_t v[N];
    uint8_t buf[1 + N * 4];
    static int64_t dict[D];
    int64_t out[N];
    for (uint32_t i = 0; i < D; i++)
        dict[i] = 7 * (int64_t)i + 1;
    for (unsigned plain = 0; plain < 2; plain++) {
        for (uint32_t bad = 0; bad <= N; bad++) {
            for (uint32_t i = 0; i < N; i++)
                v[i] = i == bad ? D : (i * 37u) % D;
            size_t len = pack_run(buf, v, N, 10);
            sl_pq_rle_t r;
            sl_error_t err = {0};
            sl_pq_rle_init(&r, buf, len, 10);
            r.plain = plain;
            sl_err_t rc = sl_pq_rle_gather_i64(&r, dict, D, out, N, &err);
            if (bad < N) {
                cr_assert_eq(rc, SL_ERR_CORRUPT, "plain %u bad at %u", plain, bad);
                cr_assert_str_eq(err.msg,
                                 "dictionary index 1000 out of range (dictionary of 1000)");
                continue;
            }
            cr_assert_eq(rc, SL_OK, "plain %u: %s", plain, err.msg);
            for (uint32_t i = 0; i < N; i++)
                cr_assert_eq(out[i], dict[v[i]], "plain %u value %u", plain, i);
        }
    }
}

Test(parquet_rle, dictionary_gather_and_validity)
{
    sl_error_t err = {0};
    sl_pq_rle_t r;
    /* an RLE run of 3 x index 2, then a bit-packed run 0,1,2,3,0,1,2,3 (width 2) */
    const uint8_t buf[] = {0x06, 0x02, 0x03, 0xe4, 0xe4};
    const int64_t di[4] = {10, -20, 30, 40};
    int64_t oi[11];
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_gather_i64(&r, di, 4, oi, 5, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_pq_rle_gather_i64(&r, di, 4, oi + 5, 6, &err), SL_OK, "%s", err.msg);
    const int64_t wi[11] = {30, 30, 30, 10, -20, 30, 40, 10, -20, 30, 40};
    cr_assert_arr_eq(oi, wi, sizeof wi);
    const float df[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    float of[11];
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_gather_f32(&r, df, 4, of, 11, &err), SL_OK, "%s", err.msg);
    cr_assert(of[0] == 2.5f && of[3] == 0.5f && of[10] == 3.5f);
    const double dd[4] = {0.25, 1.25, 2.25, 3.25};
    double od[11];
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_gather_f64(&r, dd, 4, od, 11, &err), SL_OK, "%s", err.msg);
    cr_assert(od[2] == 2.25 && od[4] == 1.25 && od[9] == 2.25);
    /* a dictionary of 3: the repeated index 2 is fine, the packed 3 is not */
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_gather_i64(&r, di, 3, oi, 11, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "dictionary index 3 out of range (dictionary of 3)");
    /* a dictionary of 2: the repeated run's index 2 is refused */
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_gather_i64(&r, di, 2, oi, 1, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "dictionary index 2 out of range (dictionary of 2)");

    /* definition levels, maximum 2: a run of 3 x 2 is all valid, the first
     * three of the packed run (0, 1, 2) valid where they are 2 */
    uint8_t valid[11];
    uint32_t nv = 0;
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_valid(&r, 2, valid, 6, &nv, &err), SL_OK, "%s", err.msg);
    const uint8_t wv[6] = {1, 1, 1, 0, 0, 1};
    cr_assert_arr_eq(valid, wv, sizeof wv);
    cr_assert_eq(nv, 4);
    /* with maximum 1 the run's level 2 is refused, and so is a packed 3 */
    sl_pq_rle_init(&r, buf, sizeof buf, 2);
    cr_assert_eq(sl_pq_rle_valid(&r, 1, valid, 3, &nv, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "definition level 2 of 1");
    const uint8_t packed[] = {0x03, 0xe4, 0xe4};
    sl_pq_rle_init(&r, packed, sizeof packed, 2);
    cr_assert_eq(sl_pq_rle_valid(&r, 2, valid, 8, &nv, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "definition level 3 of 2");
}

Test(parquet_bits, unaligned_and_wide)
{
    const uint8_t buf[] = {0xff, 0x00, 0xff, 0x00, 0xff, 0x00, 0xff, 0x00, 0xff, 0x01};
    cr_assert_eq(sl_pq_bits(buf, sizeof buf, 4, 8), 0x0f);
    cr_assert_eq(sl_pq_bits(buf, sizeof buf, 0, 64), UINT64_C(0x00ff00ff00ff00ff));
    cr_assert_eq(sl_pq_bits(buf, sizeof buf, 8, 64), UINT64_C(0xff00ff00ff00ff00));
    cr_assert_eq(sl_pq_bits(buf, sizeof buf, 72, 1), 1);
    cr_assert_eq(sl_pq_bits(buf, sizeof buf, 72, 9), 1); /* past the end reads as 0 */
    cr_assert_eq(sl_pq_bits(buf, sizeof buf, 5, 0), 0);
}

/* ---- DELTA_BINARY_PACKED ---- */

Test(parquet_delta, example_from_the_spec)
{
    /* 1, 2, 3, 4, 5: block 128, 4 miniblocks, 5 values, first 1; min delta 1 and widths 0 */
    const uint8_t buf[] = {0x80, 0x01, 0x04, 0x05, 0x02, 0x02, 0, 0, 0, 0};
    sl_pq_delta_t d;
    sl_error_t err = {0};
    int64_t out[5];
    cr_assert_eq(sl_pq_delta_init(&d, buf, sizeof buf, &err), SL_OK);
    cr_assert_eq(d.total, 5);
    cr_assert_eq(sl_pq_delta_get(&d, out, 2, &err), SL_OK);
    cr_assert_eq(sl_pq_delta_get(&d, out + 2, 3, &err), SL_OK, "%s", err.msg);
    const int64_t want[5] = {1, 2, 3, 4, 5};
    cr_assert_arr_eq(out, want, sizeof want);
    cr_assert_eq(sl_pq_delta_end(&d), buf + sizeof buf);
    cr_assert_eq(sl_pq_delta_get(&d, out, 1, &err), SL_ERR_CORRUPT);
}

Test(parquet_delta, packed_deltas_and_negative)
{
    /* 7, 5, 3, 2: deltas -2,-2,-1; min delta -2; packed deltas 0,0,1 at 1 bit in a
     * miniblock of 32 values (4 bytes); block 128 of 4 miniblocks */
    const uint8_t buf[] = {0x80, 0x01, 0x04, 0x04, 0x0e, 0x03, 1, 0, 0, 0, 0x04, 0, 0, 0};
    sl_pq_delta_t d;
    sl_error_t err = {0};
    int64_t out[4];
    cr_assert_eq(sl_pq_delta_init(&d, buf, sizeof buf, &err), SL_OK);
    cr_assert_eq(sl_pq_delta_get(&d, out, 4, &err), SL_OK, "%s", err.msg);
    const int64_t want[4] = {7, 5, 3, 2};
    cr_assert_arr_eq(out, want, sizeof want);
    cr_assert_eq(sl_pq_delta_end(&d), buf + sizeof buf);
}

Test(parquet_delta, malformed)
{
    sl_pq_delta_t d;
    sl_error_t err = {0};
    int64_t out[4];
    /* block size not a multiple of 128 */
    const uint8_t b1[] = {0x40, 0x04, 0x01, 0x00};
    cr_assert_eq(sl_pq_delta_init(&d, b1, sizeof b1, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "DELTA_BINARY_PACKED block of 64 values in 4 miniblocks");
    /* miniblocks of 16 values */
    const uint8_t b2[] = {0x80, 0x01, 0x08, 0x01, 0x00};
    cr_assert_eq(sl_pq_delta_init(&d, b2, sizeof b2, &err), SL_ERR_CORRUPT);
    /* a miniblock of 8 bits per value with 2 of its 32 bytes present */
    const uint8_t b3[] = {0x80, 0x01, 0x04, 0x03, 0x00, 0x00, 8, 0, 0, 0, 1, 2};
    cr_assert_eq(sl_pq_delta_init(&d, b3, sizeof b3, &err), SL_OK);
    cr_assert_eq(sl_pq_delta_get(&d, out, 2, &err), SL_ERR_TRUNCATED);
    cr_assert_str_eq(err.msg, "DELTA_BINARY_PACKED miniblock of 32 bytes, 2 left");
    /* a width over 64 */
    const uint8_t b4[] = {0x80, 0x01, 0x04, 0x03, 0x00, 0x00, 65, 0, 0, 0};
    cr_assert_eq(sl_pq_delta_init(&d, b4, sizeof b4, &err), SL_OK);
    cr_assert_eq(sl_pq_delta_get(&d, out, 2, &err), SL_ERR_CORRUPT);
    /* the header cut short */
    cr_assert_eq(sl_pq_delta_init(&d, b4, 2, &err), SL_ERR_TRUNCATED);
}

/* ---- BYTE_STREAM_SPLIT ---- */

Test(parquet_bss, float_streams)
{
    float v[3] = {1.5f, -2.25f, 1e10f};
    uint8_t raw[12], split[12], out[12];
    memcpy(raw, v, sizeof raw);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            split[k * 3 + i] = raw[i * 4 + k];
    sl_pq_bss_get(split, 3, 4, 0, 3, out);
    cr_assert_arr_eq(out, raw, sizeof raw);
    sl_pq_bss_get(split, 3, 4, 1, 2, out);
    cr_assert_arr_eq(out, raw + 4, 8);
}

/* ---- a whole file: levels into validity and list offsets ---- */

/* One optional list<optional int64> column "l" (3-level) in one row group,
 * one uncompressed v1 page: rows [1, null], [], null, [5]. */
/* The levels and PLAIN values of list_file's one page. */
typedef struct levels {
    const uint8_t *rep, *def; /* RLE runs, without the length */
    uint32_t rep_len, def_len;
    const int64_t *vals;
    uint32_t nvals, levels, rows;
} levels_t;

/* A file of one list<int64> column "l" (optional list, optional
 * elements: max_def 3) in one v1 page of the given levels. */
static size_t list_file_of(uint8_t *out, bool bad_index_page, const levels_t *lv)
{
    w_t page = {0};
    uint32_t l = lv->rep_len;
    put(&page, &l, 4);
    put(&page, lv->rep, lv->rep_len);
    l = lv->def_len;
    put(&page, &l, 4);
    put(&page, lv->def, lv->def_len);
    put(&page, lv->vals, lv->nvals * sizeof *lv->vals);
    w_t h = {0};
    fint(&h, 1, SL_PQ_T_I32, 0);
    fint(&h, 1, SL_PQ_T_I32, (int64_t)page.n);
    fint(&h, 1, SL_PQ_T_I32, (int64_t)page.n);
    byte(&h, 2 << 4 | SL_PQ_T_STRUCT); /* field 5: DataPageHeader */
    fint(&h, 1, SL_PQ_T_I32, lv->levels);
    fint(&h, 1, SL_PQ_T_I32, bad_index_page ? SL_PQ_ENC_RLE_DICTIONARY : SL_PQ_ENC_PLAIN);
    fint(&h, 1, SL_PQ_T_I32, 3);
    fint(&h, 1, SL_PQ_T_I32, 3);
    byte(&h, 0);
    byte(&h, 0);
    w_t f = {0};
    put(&f, "PAR1", 4);
    put(&f, h.b, h.n);
    put(&f, page.b, page.n);
    size_t chunk = h.n + page.n;
    w_t m = {0};
    fint(&m, 1, SL_PQ_T_I32, 1);
    byte(&m, 1 << 4 | SL_PQ_T_LIST); /* schema: 4 elements */
    byte(&m, 4 << 4 | SL_PQ_T_STRUCT);
    fbin(&m, 4, "schema");
    fint(&m, 1, SL_PQ_T_I32, 1);
    byte(&m, 0);
    fint(&m, 3, SL_PQ_T_I32, 1); /* l: optional group, LIST */
    fbin(&m, 1, "l");
    fint(&m, 1, SL_PQ_T_I32, 1);
    fint(&m, 1, SL_PQ_T_I32, 3);
    byte(&m, 0);
    fint(&m, 3, SL_PQ_T_I32, 2); /* list: repeated group */
    fbin(&m, 1, "list");
    fint(&m, 1, SL_PQ_T_I32, 1);
    byte(&m, 0);
    fint(&m, 1, SL_PQ_T_I32, SL_PQ_INT64); /* element: optional int64 */
    fint(&m, 2, SL_PQ_T_I32, 1);
    fbin(&m, 1, "element");
    byte(&m, 0);
    fint(&m, 1, SL_PQ_T_I64, lv->rows); /* num_rows */
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_STRUCT); /* one row group */
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_STRUCT); /* one column chunk */
    byte(&m, 3 << 4 | SL_PQ_T_STRUCT); /* field 3: ColumnMetaData */
    fint(&m, 1, SL_PQ_T_I32, SL_PQ_INT64);
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_I32);
    varint(&m, 0);
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 3 << 4 | SL_PQ_T_BINARY);
    const char *parts[] = {"l", "list", "element"};
    for (int i = 0; i < 3; i++) {
        varint(&m, strlen(parts[i]));
        put(&m, parts[i], strlen(parts[i]));
    }
    fint(&m, 1, SL_PQ_T_I32, 0);
    fint(&m, 1, SL_PQ_T_I64, lv->levels);
    fint(&m, 1, SL_PQ_T_I64, (int64_t)chunk);
    fint(&m, 1, SL_PQ_T_I64, (int64_t)chunk);
    fint(&m, 2, SL_PQ_T_I64, 4); /* data_page_offset */
    byte(&m, 0);
    byte(&m, 0);
    fint(&m, 1, SL_PQ_T_I64, (int64_t)chunk); /* total_byte_size */
    fint(&m, 1, SL_PQ_T_I64, lv->rows);       /* num_rows */
    byte(&m, 0);
    byte(&m, 0);
    put(&f, m.b, m.n);
    uint32_t ml = (uint32_t)m.n;
    put(&f, &ml, 4);
    put(&f, "PAR1", 4);
    memcpy(out, f.b, f.n);
    return f.n;
}

/* Rows [1, 5], [], [] (an empty list, a null one)... as levels in RLE
 * runs of one: repetition (width 1) 0 1 0 0 0, definition (width 2)
 * 3 2 1 0 3. */
static size_t list_file(uint8_t *out, bool bad_index_page)
{
    static const uint8_t rep[] = {2, 0, 2, 1, 2, 0, 2, 0, 2, 0};
    static const uint8_t def[] = {2, 3, 2, 2, 2, 1, 2, 0, 2, 3};
    static const int64_t vals[2] = {1, 5};
    const levels_t lv = {rep, def, sizeof rep, sizeof def, vals, 2, 5, 4};
    return list_file_of(out, bad_index_page, &lv);
}

Test(parquet_levels, rows_of_one_element_straight_from_runs)
{
    /* repetition: one RLE run of 6 x 0 (a row per level); definition: runs
     * 2 x 3 (valid), 1 x 2 (a null element), 1 x 1 (an empty list), 1 x 0
     * (a null list), 1 x 3: rows [7] [8] [null] [] null [9] */
    static const uint8_t rep[] = {12, 0};
    static const uint8_t def[] = {4, 3, 2, 2, 2, 1, 2, 0, 2, 3};
    static const int64_t vals[3] = {7, 8, 9};
    const levels_t lv = {rep, def, sizeof rep, sizeof def, vals, 3, 6, 6};
    uint8_t buf[4096];
    size_t n = list_file_of(buf, false, &lv);
    sl_pq_memory_t mem;
    sl_pq_source_t src;
    sl_pq_source_memory(&mem, buf, n, &src);
    sl_error_t err = {0};
    sl_pq_file_t *f;
    cr_assert_eq(sl_pq_file_open(&src, "mem", NULL, &f, &err), SL_OK, "%s", err.msg);
    sl_pq_reader_t *r;
    cr_assert_eq(sl_pq_reader_new(f, 0, 0, &r, &err), SL_OK, "%s", err.msg);
    const sl_pq_batch_t *b;
    /* every run ends inside the batches of 5 and 1 rows: no level goes
     * through the level scratch */
    cr_assert_eq(sl_pq_reader_next(r, 5, &b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(b->rows, 5);
    cr_assert_eq(b->slots, 3);
    const uint32_t off1[6] = {0, 1, 2, 3, 3, 3};
    const uint8_t lv1[5] = {1, 1, 1, 1, 0}, valid1[3] = {1, 1, 0};
    const int64_t v1[3] = {7, 8, 0};
    cr_assert_arr_eq(b->list_off, off1, sizeof off1);
    cr_assert_arr_eq(b->list_valid, lv1, sizeof lv1);
    cr_assert_arr_eq(b->valid, valid1, sizeof valid1);
    cr_assert_arr_eq(b->i64, v1, sizeof v1);
    cr_assert_eq(sl_pq_reader_next(r, 5, &b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(b->rows, 1);
    cr_assert_eq(b->slots, 1);
    cr_assert(b->list_off[0] == 0 && b->list_off[1] == 1 && b->list_valid[0] == 1);
    cr_assert(b->valid[0] == 1 && b->i64[0] == 9);
    cr_assert_eq(sl_pq_reader_next(r, 5, &b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(b->rows, 0);
    sl_pq_reader_destroy(r);
    sl_pq_file_destroy(f);
}

Test(parquet_levels, list_offsets_and_validity)
{
    uint8_t buf[4096];
    size_t n = list_file(buf, false);
    sl_pq_memory_t mem;
    sl_pq_source_t src;
    sl_pq_source_memory(&mem, buf, n, &src);
    sl_error_t err = {0};
    sl_pq_file_t *f;
    cr_assert_eq(sl_pq_file_open(&src, "mem", NULL, &f, &err), SL_OK, "%s", err.msg);
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    cr_assert_eq(m->num_columns, 1);
    cr_assert_str_eq(m->columns[0].name, "l");
    cr_assert_str_eq(m->columns[0].path, "l.list.element");
    cr_assert(m->columns[0].is_list && m->columns[0].max_def == 3 && m->columns[0].max_rep == 1 &&
              m->columns[0].elem_def == 2);
    sl_pq_reader_t *r;
    cr_assert_eq(sl_pq_reader_new(f, 0, 0, &r, &err), SL_OK, "%s", err.msg);
    const sl_pq_batch_t *b;
    /* batches of 3 rows then 1: the boundary falls between rows, never inside a list */
    cr_assert_eq(sl_pq_reader_next(r, 3, &b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(b->rows, 3);
    cr_assert_eq(b->slots, 2);
    const uint32_t off[4] = {0, 2, 2, 2};
    cr_assert_arr_eq(b->list_off, off, sizeof off);
    const uint8_t lv[3] = {1, 1, 0}, valid[2] = {1, 0};
    cr_assert_arr_eq(b->list_valid, lv, sizeof lv);
    cr_assert_arr_eq(b->valid, valid, sizeof valid);
    cr_assert(b->i64[0] == 1 && b->i64[1] == 0);
    cr_assert_eq(sl_pq_reader_next(r, 3, &b, &err), SL_OK, "%s", err.msg);
    cr_assert(b->rows == 1 && b->slots == 1 && b->i64[0] == 5 && b->list_valid[0] == 1);
    cr_assert(b->list_off[0] == 0 && b->list_off[1] == 1);
    cr_assert_eq(sl_pq_reader_next(r, 3, &b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(b->rows, 0);
    cr_assert_eq(sl_pq_reader_pages(r), 1);
    sl_pq_reader_destroy(r);
    sl_pq_file_destroy(f);
}

Test(parquet_levels, errors_name_file_row_group_column_and_page)
{
    uint8_t buf[4096];
    size_t n = list_file(buf, true);
    sl_pq_memory_t mem;
    sl_pq_source_t src;
    sl_pq_source_memory(&mem, buf, n, &src);
    sl_error_t err = {0};
    sl_pq_file_t *f;
    cr_assert_eq(sl_pq_file_open(&src, "x.parquet", NULL, &f, &err), SL_OK, "%s", err.msg);
    sl_pq_reader_t *r;
    cr_assert_eq(sl_pq_reader_new(f, 0, 0, &r, &err), SL_OK);
    const sl_pq_batch_t *b;
    cr_assert_eq(sl_pq_reader_next(r, 10, &b, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "file x.parquet row group 0 column l.list.element page 1 (offset "
                              "4): a dictionary-encoded page without a dictionary page");
    sl_pq_reader_destroy(r);
    cr_assert_eq(sl_pq_reader_new(f, 1, 0, &r, &err), SL_ERR_INVALID);
    sl_pq_file_destroy(f);

    /* the footer length points before the start */
    uint8_t bad[4096];
    memcpy(bad, buf, n);
    uint32_t huge = (uint32_t)n;
    memcpy(bad + n - 8, &huge, 4);
    sl_pq_source_memory(&mem, bad, n, &src);
    cr_assert_eq(sl_pq_file_open(&src, "x.parquet", NULL, &f, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "file x.parquet: footer length") != NULL, "%s", err.msg);
    /* wrong magic */
    memcpy(bad, buf, n);
    memcpy(bad, "PAR2", 4);
    cr_assert_eq(sl_pq_file_open(&src, "x.parquet", NULL, &f, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "wrong magic") != NULL, "%s", err.msg);
    /* every truncation of the file is an error, never a crash */
    for (size_t k = 0; k < n; k++) {
        sl_pq_source_memory(&mem, buf, k, &src);
        cr_assert_neq(sl_pq_file_open(&src, "x.parquet", NULL, &f, &err), SL_OK, "%zu", k);
    }
}

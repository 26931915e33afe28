/* Wire decoding (src/tensor/wire_decode.c) rejects every kind of malformed
 * frame: a cut or bad prefix, buffer references, limits and counts, broken
 * tensor invariants, each with its exact code and a message naming the field. */
#include "wire_util.h"

/* ---- prefix rejections ------------------------------------------------------------ */

Test(reject, truncated_at_every_eighth)
{
    frame_t f = encode_fixed();
    for (size_t k = 0; k < 8; k++) {
        frame_t t = {f.p, f.len * k / 8};
        expect_reject(t, NULL, SL_ERR_TRUNCATED, NULL);
    }
    frame_t t = {f.p, f.len - 1};
    expect_reject(t, NULL, SL_ERR_TRUNCATED, "but only");
    frame_free(f);
}

Test(reject, prefix_fields)
{
    frame_t f = encode_fixed();
    f.p[0] = 'X';
    expect_reject(f, NULL, SL_ERR_CORRUPT, "magic");
    f.p[0] = 'S';

    f.p[4] = 2;
    expect_reject(f, NULL, SL_ERR_VERSION, "version 2");
    f.p[4] = 1;

    f.p[6] = 1;
    expect_reject(f, NULL, SL_ERR_CORRUPT, "flags");
    f.p[6] = 0;

    f.p[12] = 1;
    expect_reject(f, NULL, SL_ERR_CORRUPT, "reserved");
    f.p[12] = 0;

    sl_wire_limits_t lim = sl_wire_limits_default();
    lim.max_frame_bytes = f.len - 64;
    expect_reject(f, &lim, SL_ERR_TOO_LARGE, "frame_len");

    uint32_t hl;
    memcpy(&hl, f.p + 8, 4);
    uint32_t past = (uint32_t)f.len - 31;
    memcpy(f.p + 8, &past, 4);
    expect_reject(f, NULL, SL_ERR_CORRUPT, "header_len");
    memcpy(f.p + 8, &hl, 4);

    uint64_t odd = f.len - 8;
    memcpy(f.p + 16, &odd, 8);
    expect_reject(f, NULL, SL_ERR_CORRUPT, "multiple of 64");
    uint64_t fl = f.len;
    memcpy(f.p + 16, &fl, 8);

    /* Trailing bytes after the frame are not silently ignored. */
    frame_t longer = {sl_alloc_aligned(NULL, f.len + 64, 64), f.len + 64};
    memcpy(longer.p, f.p, f.len);
    expect_reject(longer, NULL, SL_ERR_CORRUPT, "trailing");
    frame_free(longer);

    /* A frame must be 64-aligned so that its views are. */
    uint8_t *shifted = sl_alloc_aligned(NULL, f.len + 64, 64);
    memcpy(shifted + 8, f.p, f.len);
    frame_t mis = {shifted + 8, f.len};
    expect_reject(mis, NULL, SL_ERR_INVALID, "aligned");
    sl_free(NULL, shifted, f.len + 64);

    /* Still decodes after every field was put back. */
    sl_batch_t *d;
    cr_assert_eq(sl_wire_decode(f.p, f.len, NULL, NULL, &d, NULL), SL_OK);
    sl_batch_destroy(d);
    frame_free(f);
}

Test(reject, peek_length)
{
    frame_t f = encode_fixed();
    uint64_t n = 0;
    sl_error_t err = {0};
    cr_assert_eq(sl_wire_peek_length(f.p, 32, NULL, &n, &err), SL_OK);
    cr_assert_eq(n, f.len);
    cr_assert_eq(sl_wire_peek_length(f.p, 31, NULL, &n, &err), SL_ERR_TRUNCATED);
    cr_assert_eq(n, 0);
    frame_free(f);
}

Test(reject, header_not_protobuf)
{
    frame_t f = encode_fixed();
    /* 0xff... is a varint that never ends. */
    memset(f.p + 32, 0xff, 16);
    expect_reject(f, NULL, SL_ERR_CORRUPT, "not a valid BatchHeader");
    frame_free(f);
}

/* ---- buffer reference rejections ----------------------------------------------- */

Test(reject, buffer_refs)
{
    reject_mutated(MISALIGN_VALUES, SL_ERR_CORRUPT, "frame: group 0 'user' unique.values: offset");
    reject_mutated(VALUES_PAST_END, SL_ERR_CORRUPT, "sparse.values: offset 1048576 + length 136");
    reject_mutated(VALUES_OVERFLOW, SL_ERR_CORRUPT,
                   "sparse.values: offset 18446744073709551552 + length 128 runs past");
    reject_mutated(VALUES_IN_HEADER, SL_ERR_CORRUPT,
                   "sparse.values: offset 0 is inside the header");
    reject_mutated(VALUES_TOO_SHORT, SL_ERR_CORRUPT,
                   "frame: group 0 'user' unique.values: length 40 != num_values*8 = 48");
    reject_mutated(WEIGHTS_TOO_LONG, SL_ERR_CORRUPT,
                   "group 0 'user' unique.weights: length 28 != num_values*4 = 24");
    reject_mutated(INVERSE_TOO_SHORT, SL_ERR_CORRUPT,
                   "group 0 'user'.inverse_indices: length 28 != batch_size*4 = 32");
    reject_mutated(DENSE_WRONG, SL_ERR_CORRUPT, "dense.names: 2 names for 3 columns");
    reject_mutated(SAMPLE_IDS_SHORT, SL_ERR_CORRUPT,
                   "batch.sample_ids: length 8 != batch_size*8 = 64");
    reject_mutated(LENGTHS_MISSING, SL_ERR_CORRUPT, "sparse.lengths: missing");
    reject_mutated(NUM_VALUES_HUGE, SL_ERR_CORRUPT, "sparse.values: length 136 != num_values*8");
}

/* ---- limits and counts ---------------------------------------------------------- */

Test(reject, limits_and_counts)
{
    reject_mutated(PLAIN_STRIDE_WRONG, SL_ERR_CORRUPT, "sparse.stride: 4 != batch_size 8");
    reject_mutated(HUGE_BATCH, SL_ERR_TOO_LARGE, "batch_size 1048577 exceeds");
    reject_mutated(HUGE_STRIDE, SL_ERR_TOO_LARGE, "group 0 'user' unique.stride");

    frame_t f = encode_fixed();
    sl_wire_limits_t lim = sl_wire_limits_default();
    lim.max_batch_size = 7;
    expect_reject(f, &lim, SL_ERR_TOO_LARGE, "batch_size 8 exceeds the limit of 7");
    lim = sl_wire_limits_default();
    lim.max_keys = 1;
    expect_reject(f, &lim, SL_ERR_TOO_LARGE, "sparse.keys: 2 keys exceed the limit of 1");
    lim = sl_wire_limits_default();
    lim.max_groups = 0;
    expect_reject(f, &lim, SL_ERR_TOO_LARGE, "groups: 1 groups exceed the limit of 0");
    frame_free(f);
}

/* ---- invariants of the decoded tensors ----------------------------------------- */

/* Decode f (valid), let poke change bytes inside one of its buffers through
 * the decoded views, then expect the decoder to reject it. */
static void reject_poked(void (*poke)(sl_batch_t *), const char *want)
{
    frame_t f = encode_fixed();
    sl_batch_t *d;
    cr_assert_eq(sl_wire_decode(f.p, f.len, NULL, NULL, &d, NULL), SL_OK);
    poke(d); /* writes into f through the zero-copy views */
    sl_batch_destroy(d);
    expect_reject(f, NULL, SL_ERR_CORRUPT, want);
    frame_free(f);
}

static void inverse_eq_u(sl_batch_t *d)
{
    d->groups[0].inverse[6] = 3;
}

static void inverse_negative(sl_batch_t *d)
{
    d->groups[0].inverse[1] = -1;
}

static void length_negative(sl_batch_t *d)
{
    d->sparse.lengths[9] = -2;
    d->sparse.lengths[12] = 7; /* keeps the sum */
}

static void length_sum(sl_batch_t *d)
{
    d->groups[0].unique.lengths[4] = 2;
}

Test(reject, invariants)
{
    reject_poked(inverse_eq_u, "frame: group 'user': inverse indices < U: row 6 has 3, U=3");
    reject_poked(inverse_negative, "row 1 has -1, U=3");
    reject_poked(length_negative,
                 "frame: plain KJT: lengths non-negative: key 'b' row 1 has length -2");
    reject_poked(length_sum,
                 "frame: group 'user' unique rows: sum(lengths) == len(values): 7 != 6");
    reject_mutated(RENAME_GROUP_KEY, SL_ERR_CORRUPT,
                   "keys unique: 'b' is in the plain KJT and group 'user'");
}

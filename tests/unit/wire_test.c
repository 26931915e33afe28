/* Wire encoding (src/tensor/wire.c, wire_decode.c): random batches survive
 * encode -> decode bit for bit with zero-copy, 64-aligned views into the
 * frame; every kind of malformed frame is rejected with its exact error code
 * and a message naming the field; allocation failure leaks nothing.
 *
 * With SLUICE_WRITE_CORPUS=<dir> set, the test "corpus.write" also writes the
 * seed corpus of the wire_decode fuzz target into <dir>. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"
#include "sluice/wire.h"
#include "testutil.h"

/* ---- building batches ---------------------------------------------------------- */

/* Fill kjt with num_keys keys named <prefix><n> (n counting on in *next_key)
 * over stride rows, lengths in [0, max_len], random ids and weights. */
static void fill_kjt(uint64_t *rng, sl_kjt_t *kjt, sl_arena_t *arena, uint32_t num_keys,
                     uint32_t stride, uint32_t max_len, bool weighted, uint32_t *next_key)
{
    char names[16][64];
    const char *keys[16];
    cr_assert(num_keys <= 16);
    for (uint32_t k = 0; k < num_keys; k++) {
        /* Now and then a long name, so varint lengths and padding vary. */
        if (tu_below(rng, 8) == 0)
            snprintf(names[k], sizeof names[k], "feature_with_a_rather_long_name_%u",
                     (*next_key)++);
        else
            snprintf(names[k], sizeof names[k], "f%u", (*next_key)++);
        keys[k] = names[k];
    }
    size_t rows = (size_t)num_keys * stride;
    int32_t *lengths = malloc(rows * sizeof(int32_t) + 1);
    uint64_t total = 0;
    for (size_t i = 0; i < rows; i++) {
        lengths[i] = (int32_t)tu_below(rng, max_len + 1);
        total += (uint64_t)lengths[i];
    }
    cr_assert_eq(sl_kjt_init(kjt, arena, num_keys, keys, stride, total, weighted), SL_OK);
    if (rows > 0) memcpy(kjt->lengths, lengths, rows * sizeof(int32_t));
    free(lengths);
    for (uint64_t i = 0; i < total; i++) {
        kjt->values[i] = (int64_t)tu_next(rng);
        if (weighted) kjt->weights[i] = (float)tu_below(rng, 1000) / 7.0f;
    }
}

static void fill_dense(uint64_t *rng, sl_dense_t *d, sl_arena_t *arena, uint32_t rows,
                       uint32_t cols, bool named)
{
    char names[8][16];
    const char *ptrs[8];
    cr_assert(cols <= 8);
    for (uint32_t c = 0; c < cols; c++) {
        snprintf(names[c], sizeof names[c], "d%u", c);
        ptrs[c] = names[c];
    }
    cr_assert_eq(sl_dense_init(d, arena, rows, cols, named ? ptrs : NULL), SL_OK);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        d->data[i] = (float)tu_below(rng, 1 << 20) / 1024.0f;
}

/* A random valid batch of B rows: 0-4 plain keys, 0-3 dedup groups, dense,
 * labels and sample ids each present or not, random origin. */
static sl_batch_t *random_batch(uint64_t *rng, uint32_t B)
{
    sl_batch_t *b = sl_batch_new(NULL);
    cr_assert_not_null(b);
    uint32_t next_key = 0;
    uint32_t max_len = tu_below(rng, 4) == 0 ? 12 : 3;
    b->batch_size = B;
    fill_kjt(rng, &b->sparse, b->arena, (uint32_t)tu_below(rng, 5), B, max_len, tu_below(rng, 2),
             &next_key);
    b->num_groups = (uint32_t)tu_below(rng, 4);
    if (b->num_groups > 0) b->groups = sl_arena_calloc(b->arena, b->num_groups, sizeof(sl_ikjt_t));
    for (uint32_t g = 0; g < b->num_groups; g++) {
        sl_ikjt_t *ik = &b->groups[g];
        char name[32];
        snprintf(name, sizeof name, "group%u", g);
        ik->name = sl_arena_strdup(b->arena, name);
        ik->batch_size = B;
        uint32_t U = B == 0 ? 0 : 1 + (uint32_t)tu_below(rng, B);
        fill_kjt(rng, &ik->unique, b->arena, 1 + (uint32_t)tu_below(rng, 3), U, max_len,
                 tu_below(rng, 2), &next_key);
        ik->inverse = sl_arena_alloc(b->arena, (size_t)B * sizeof(int32_t));
        for (uint32_t r = 0; r < B; r++)
            ik->inverse[r] = (int32_t)tu_below(rng, U);
    }
    if (tu_below(rng, 2))
        fill_dense(rng, &b->dense, b->arena, B, 1 + (uint32_t)tu_below(rng, 8), tu_below(rng, 2));
    if (tu_below(rng, 2))
        fill_dense(rng, &b->labels, b->arena, B, 1 + (uint32_t)tu_below(rng, 2), tu_below(rng, 2));
    if (tu_below(rng, 2)) {
        b->sample_ids = sl_arena_alloc(b->arena, (size_t)B * sizeof(int64_t));
        for (uint32_t r = 0; r < B; r++)
            b->sample_ids[r] = (int64_t)tu_next(rng);
    }
    if (tu_below(rng, 2)) {
        b->origin.job_id = tu_next(rng);
        b->origin.epoch = (uint32_t)tu_next(rng);
        b->origin.split_id = tu_next(rng);
        b->origin.first_row = tu_next(rng);
        b->origin.sequence = tu_next(rng);
    }
    cr_assert_eq(sl_batch_validate(b, NULL), SL_OK);
    return b;
}

/* The batch every rejection test starts from: B=8; plain keys "a", "b";
 * group "user" with weighted keys "u1", "u2" over U=3 unique rows; dense
 * [8,2] named, labels [8,1], sample ids. */
static sl_batch_t *fixed_batch(void)
{
    sl_batch_t *b = sl_batch_new(NULL);
    const char *plain[] = {"a", "b"};
    const int32_t plain_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 2, 0, 1, 3, 0, 1, 2};
    b->batch_size = 8;
    cr_assert_eq(sl_kjt_init(&b->sparse, b->arena, 2, plain, 8, 17, false), SL_OK);
    memcpy(b->sparse.lengths, plain_len, sizeof plain_len);
    for (int i = 0; i < 17; i++)
        b->sparse.values[i] = 100 + i;

    const char *user[] = {"u1", "u2"};
    const int32_t user_len[6] = {2, 0, 1, 1, 1, 1};
    b->num_groups = 1;
    b->groups = sl_arena_calloc(b->arena, 1, sizeof(sl_ikjt_t));
    sl_ikjt_t *g = &b->groups[0];
    g->name = "user";
    g->batch_size = 8;
    cr_assert_eq(sl_kjt_init(&g->unique, b->arena, 2, user, 3, 6, true), SL_OK);
    memcpy(g->unique.lengths, user_len, sizeof user_len);
    for (int i = 0; i < 6; i++) {
        g->unique.values[i] = 7000 + i;
        g->unique.weights[i] = 0.5f * (float)i;
    }
    g->inverse = sl_arena_alloc(b->arena, 8 * sizeof(int32_t));
    const int32_t inv[8] = {0, 0, 1, 1, 1, 2, 2, 0};
    memcpy(g->inverse, inv, sizeof inv);

    const char *dn[] = {"age", "score"};
    cr_assert_eq(sl_dense_init(&b->dense, b->arena, 8, 2, dn), SL_OK);
    for (int i = 0; i < 16; i++)
        b->dense.data[i] = (float)i * 0.25f;
    cr_assert_eq(sl_dense_init(&b->labels, b->arena, 8, 1, NULL), SL_OK);
    for (int i = 0; i < 8; i++)
        b->labels.data[i] = (float)(i & 1);
    b->sample_ids = sl_arena_alloc(b->arena, 8 * sizeof(int64_t));
    for (int i = 0; i < 8; i++)
        b->sample_ids[i] = 5000 + i;
    b->origin = (sl_batch_origin_t){
        .job_id = 42, .epoch = 3, .split_id = 9, .first_row = 640, .sequence = 5};
    cr_assert_eq(sl_batch_validate(b, NULL), SL_OK);
    return b;
}

/* ---- comparing -------------------------------------------------------------- */

static void assert_dense_equal(const sl_dense_t *a, const sl_dense_t *b, const char *what)
{
    cr_assert_eq(a->rows, b->rows, "%s rows", what);
    cr_assert_eq(a->cols, b->cols, "%s cols", what);
    size_t n = (size_t)a->rows * a->cols;
    if (n > 0) cr_assert(memcmp(a->data, b->data, n * sizeof(float)) == 0, "%s data", what);
    if (a->cols > 0) {
        cr_assert_eq(a->names == NULL, b->names == NULL, "%s names presence", what);
        for (uint32_t c = 0; a->names != NULL && c < a->cols; c++)
            cr_assert_str_eq(a->names[c], b->names[c], "%s name %u", what, c);
    }
}

static void assert_batch_equal(const sl_batch_t *a, const sl_batch_t *b)
{
    cr_assert_eq(a->batch_size, b->batch_size);
    cr_assert(sl_kjt_equal(&a->sparse, &b->sparse), "plain KJT differs");
    cr_assert_eq(a->num_groups, b->num_groups);
    for (uint32_t g = 0; g < a->num_groups; g++) {
        const sl_ikjt_t *x = &a->groups[g], *y = &b->groups[g];
        cr_assert_str_eq(x->name, y->name);
        cr_assert_eq(x->batch_size, y->batch_size);
        cr_assert(sl_kjt_equal(&x->unique, &y->unique), "group %u unique KJT differs", g);
        if (x->batch_size > 0)
            cr_assert(memcmp(x->inverse, y->inverse, x->batch_size * sizeof(int32_t)) == 0,
                      "group %u inverse differs", g);
    }
    assert_dense_equal(&a->dense, &b->dense, "dense");
    assert_dense_equal(&a->labels, &b->labels, "labels");
    cr_assert_eq(a->sample_ids == NULL, b->sample_ids == NULL, "sample_ids presence");
    if (a->sample_ids != NULL && a->batch_size > 0)
        cr_assert(memcmp(a->sample_ids, b->sample_ids, a->batch_size * sizeof(int64_t)) == 0);
    cr_assert_eq(a->origin.job_id, b->origin.job_id);
    cr_assert_eq(a->origin.epoch, b->origin.epoch);
    cr_assert_eq(a->origin.split_id, b->origin.split_id);
    cr_assert_eq(a->origin.first_row, b->origin.first_row);
    cr_assert_eq(a->origin.sequence, b->origin.sequence);
}

/* A decoded buffer is a view into the frame at a 64-aligned offset. */
static void assert_in_frame(const void *p, size_t bytes, const uint8_t *frame, size_t len,
                            const char *what)
{
    if (p == NULL) return;
    const uint8_t *q = p;
    cr_assert(q >= frame && q <= frame + len && bytes <= (size_t)(frame + len - q),
              "%s is not inside the frame", what);
    cr_assert_eq((size_t)(q - frame) % 64, 0, "%s at offset %zu is not 64-aligned", what,
                 (size_t)(q - frame));
}

static void assert_kjt_in_frame(const sl_kjt_t *k, const uint8_t *frame, size_t len)
{
    assert_in_frame(k->lengths, (size_t)k->num_keys * k->stride * 4, frame, len, "lengths");
    assert_in_frame(k->values, (size_t)k->num_values * 8, frame, len, "values");
    assert_in_frame(k->weights, (size_t)k->num_values * 4, frame, len, "weights");
    if (k->num_keys > 0) cr_assert_not_null(k->lengths);
}

static void assert_zero_copy(const sl_batch_t *d, const uint8_t *frame, size_t len)
{
    assert_kjt_in_frame(&d->sparse, frame, len);
    for (uint32_t g = 0; g < d->num_groups; g++) {
        assert_kjt_in_frame(&d->groups[g].unique, frame, len);
        assert_in_frame(d->groups[g].inverse, (size_t)d->batch_size * 4, frame, len, "inverse");
    }
    assert_in_frame(d->dense.data, (size_t)d->dense.rows * d->dense.cols * 4, frame, len, "dense");
    assert_in_frame(d->labels.data, (size_t)d->labels.rows * d->labels.cols * 4, frame, len,
                    "labels");
    assert_in_frame(d->sample_ids, (size_t)d->batch_size * 8, frame, len, "sample_ids");
}

/* ---- round trips -------------------------------------------------------------- */

static void round_trip(sl_batch_t *b)
{
    sl_error_t err = {0};
    void *frame;
    size_t len;
    cr_assert_eq(sl_wire_encode(b, NULL, &frame, &len, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(len, sl_wire_encoded_size(b));
    cr_assert_eq(len % 64, 0);
    cr_assert_eq(memcmp(frame, "SLCB", 4), 0);

    sl_batch_t *d = NULL;
    cr_assert_eq(sl_wire_decode(frame, len, NULL, NULL, &d, &err), SL_OK, "%s", err.msg);
    assert_batch_equal(b, d);
    assert_zero_copy(d, frame, len);

    /* Encoding the decoded batch gives the same bytes: the frame is a
     * function of the batch. */
    void *again;
    size_t again_len;
    cr_assert_eq(sl_wire_encode(d, NULL, &again, &again_len, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(again_len, len);
    cr_assert(memcmp(again, frame, len) == 0, "re-encoding changed the frame");
    sl_free(NULL, again, again_len);
    sl_batch_destroy(d);
    sl_free(NULL, frame, len);
}

Test(round_trip, random_batches)
{
    uint64_t rng = tu_seed("round_trip.random_batches");
    for (int i = 0; i < 300; i++) {
        /* B = 0 and 1 first, then mostly small, sometimes large. */
        uint32_t B = i < 10                    ? (uint32_t)(i % 2)
                     : tu_below(&rng, 10) == 0 ? 1000 + (uint32_t)tu_below(&rng, 3000)
                                               : (uint32_t)tu_below(&rng, 64);
        sl_batch_t *b = random_batch(&rng, B);
        round_trip(b);
        sl_batch_destroy(b);
    }
}

Test(round_trip, empty_batch)
{
    sl_batch_t *b = sl_batch_new(NULL);
    round_trip(b);
    size_t len = sl_wire_encoded_size(b);
    cr_assert_eq(len, 64, "an empty batch is one 64-byte block, got %zu", len);
    sl_batch_destroy(b);
}

static size_t offset_in(const void *p, const uint8_t *frame)
{
    return (size_t)((const uint8_t *)p - frame);
}

Test(round_trip, fixed_batch_layout)
{
    sl_batch_t *b = fixed_batch();
    round_trip(b);
    void *frame;
    size_t len;
    cr_assert_eq(sl_wire_encode(b, NULL, &frame, &len, NULL), SL_OK);
    sl_batch_t *d;
    cr_assert_eq(sl_wire_decode(frame, len, NULL, NULL, &d, NULL), SL_OK);
    /* Buffers follow in the documented order, each on the next 64 boundary. */
    const uint8_t *f = frame;
    uint64_t header_len;
    memcpy(&header_len, f + 8, 4);
    header_len &= 0xffffffffu;
    size_t at = (32 + header_len + 63) / 64 * 64;
    cr_assert_eq(offset_in(d->sparse.lengths, f), at);
    cr_assert_eq(offset_in(d->sparse.values, f), at + 64);
    cr_assert_eq(offset_in(d->groups[0].unique.lengths, f), at + 64 + 192);
    cr_assert_eq(offset_in(d->groups[0].unique.values, f), at + 64 + 192 + 64);
    cr_assert_eq(offset_in(d->groups[0].unique.weights, f), at + 64 + 192 + 128);
    cr_assert_eq(offset_in(d->groups[0].inverse, f), at + 64 + 192 + 192);
    cr_assert_eq(offset_in(d->dense.data, f), at + 64 + 192 + 256);
    cr_assert_eq(offset_in(d->labels.data, f), at + 64 + 192 + 320);
    cr_assert_eq(offset_in(d->sample_ids, f), at + 64 + 192 + 384);
    cr_assert_eq(len, at + 64 + 192 + 448);
    /* Padding is zero. */
    for (size_t i = 32 + header_len; i < at; i++)
        cr_assert_eq(f[i], 0);
    for (size_t i = at + 64 + 17 * 8; i < at + 64 + 192; i++)
        cr_assert_eq(f[i], 0);
    cr_assert_str_eq(d->dense.names[1], "score");
    sl_batch_destroy(d);
    sl_free(NULL, frame, len);
    sl_batch_destroy(b);
}

Test(round_trip, many_groups_and_zero_length_weighted)
{
    /* More groups than the encoder keeps on its stack; a weighted group with
     * no values at all keeps its (empty) weights. */
    sl_batch_t *b = sl_batch_new(NULL);
    b->batch_size = 2;
    b->num_groups = 20;
    b->groups = sl_arena_calloc(b->arena, 20, sizeof(sl_ikjt_t));
    for (uint32_t g = 0; g < 20; g++) {
        char key[16], name[16];
        snprintf(key, sizeof key, "k%u", g);
        snprintf(name, sizeof name, "g%u", g);
        const char *keys[] = {key};
        sl_ikjt_t *ik = &b->groups[g];
        ik->name = sl_arena_strdup(b->arena, name);
        ik->batch_size = 2;
        cr_assert_eq(sl_kjt_init(&ik->unique, b->arena, 1, keys, 1, g == 3 ? 0 : 1, true), SL_OK);
        ik->unique.lengths[0] = g == 3 ? 0 : 1;
        if (g != 3) {
            ik->unique.values[0] = g;
            ik->unique.weights[0] = 1.5f;
        }
        ik->inverse = sl_arena_calloc(b->arena, 2, sizeof(int32_t));
    }
    round_trip(b);
    sl_batch_destroy(b);
}

/* ---- encoder errors ------------------------------------------------------------- */

Test(encode, errors)
{
    sl_batch_t *b = fixed_batch();
    size_t need = sl_wire_encoded_size(b);
    uint8_t *buf = sl_alloc_aligned(NULL, need + 64, 64);
    size_t len = 1;
    sl_error_t err = {0};
    cr_assert_eq(sl_wire_encode_into(b, buf, need - 64, &len, &err), SL_ERR_TOO_LARGE);
    cr_assert_eq(len, 0);
    cr_assert(strstr(err.msg, "buffer has") != NULL, "%s", err.msg);
    cr_assert_eq(sl_wire_encode_into(b, buf + 8, need, &len, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wire_encode_into(b, buf, need, &len, &err), SL_OK);
    cr_assert_eq(len, need);

    b->groups[0].inverse[2] = 3; /* == U */
    cr_assert_eq(sl_wire_encode_into(b, buf, need, &len, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "encode: group 'user'") == err.msg, "%s", err.msg);
    void *frame = (void *)1;
    cr_assert_eq(sl_wire_encode(b, NULL, &frame, &len, &err), SL_ERR_INVALID);
    cr_assert_null(frame);
    cr_assert_eq(len, 0);
    b->groups[0].inverse[2] = 1;

    /* The lengths are checked while they are copied; the message is still
     * the one validation gives. */
    b->sparse.lengths[3] = 2;
    cr_assert_eq(sl_wire_encode_into(b, buf, need, &len, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "encode: plain KJT: sum(lengths) == len(values): 18 != 17");
    cr_assert_eq(len, 0);
    b->sparse.lengths[3] = 1;
    b->groups[0].unique.lengths[2] = -1;
    b->groups[0].unique.lengths[3] = 2;
    cr_assert_eq(sl_wire_encode_into(b, buf, need, &len, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "encode: group 'user' unique rows: lengths non-negative: key 'u1' "
                              "row 2 has length -1");
    sl_free(NULL, buf, need + 64);
    sl_batch_destroy(b);
}

Test(round_trip, long_lists)
{
    /* Lengths of 2^16 and more take the 64-bit path of the length check
     * that runs during the copy; blocks of 64 rows and a tail. */
    sl_batch_t *b = sl_batch_new(NULL);
    const char *keys[] = {"long"};
    b->batch_size = 150;
    uint64_t total = 0;
    int32_t len[150];
    for (int r = 0; r < 150; r++)
        total += (uint64_t)(len[r] = r % 50 == 7 ? 70000 : r % 3);
    cr_assert_eq(sl_kjt_init(&b->sparse, b->arena, 1, keys, 150, total, false), SL_OK);
    memcpy(b->sparse.lengths, len, sizeof len);
    for (uint64_t i = 0; i < total; i++)
        b->sparse.values[i] = (int64_t)i;
    round_trip(b);
    b->sparse.num_values--;
    void *frame;
    size_t n;
    sl_error_t err = {0};
    cr_assert_eq(sl_wire_encode(b, NULL, &frame, &n, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "sum(lengths) == len(values)") != NULL, "%s", err.msg);
    sl_batch_destroy(b);
}

/* ---- frames to mutate --------------------------------------------------------- */

typedef struct frame {
    uint8_t *p;
    size_t len;
} frame_t;

static frame_t encode_fixed(void)
{
    sl_batch_t *b = fixed_batch();
    frame_t f;
    cr_assert_eq(sl_wire_encode(b, NULL, (void **)&f.p, &f.len, NULL), SL_OK);
    sl_batch_destroy(b);
    return f;
}

static void frame_free(frame_t f)
{
    sl_free(NULL, f.p, f.len);
}

/* Decode f with limits (NULL: default) and assert the error code, and that
 * the message contains want (when not NULL). */
static void expect_reject(frame_t f, const sl_wire_limits_t *limits, sl_err_t code,
                          const char *want)
{
    sl_error_t err = {0};
    sl_batch_t *d = (sl_batch_t *)1;
    sl_err_t rc = sl_wire_decode(f.p, f.len, limits, NULL, &d, &err);
    cr_assert_eq(rc, code, "got %s (%s), want %s", sl_err_str(rc), err.msg, sl_err_str(code));
    cr_assert_eq(err.code, code);
    cr_assert_null(d);
    if (want != NULL)
        cr_assert(strstr(err.msg, want) != NULL, "message '%s' lacks '%s'", err.msg, want);
}

static void *pb_arena_alloc(void *ctx, size_t size)
{
    return sl_arena_alloc(ctx, size);
}

static void pb_arena_free(void *ctx, void *p)
{
    (void)ctx;
    (void)p;
}

static void shift_ref(Sluice__BufferRef *r, uint64_t by)
{
    if (r != NULL) r->offset += by;
}

static void shift_kjt(Sluice__KjtDesc *k, uint64_t by)
{
    if (k == NULL) return;
    shift_ref(k->lengths, by);
    shift_ref(k->values, by);
    shift_ref(k->weights, by);
}

enum mutation {
    MISALIGN_VALUES,
    VALUES_PAST_END,
    VALUES_OVERFLOW,
    VALUES_IN_HEADER,
    VALUES_TOO_SHORT,
    WEIGHTS_TOO_LONG,
    INVERSE_TOO_SHORT,
    DENSE_WRONG,
    SAMPLE_IDS_SHORT,
    LENGTHS_MISSING,
    NUM_VALUES_HUGE,
    PLAIN_STRIDE_WRONG,
    HUGE_BATCH,
    HUGE_STRIDE,
    RENAME_GROUP_KEY,
};

/* The header edits of the rejection tests, applied to the fixed batch. */
static void mutate(Sluice__BatchHeader *h, sl_arena_t *a, enum mutation m)
{
    Sluice__KjtDesc *s = h->sparse, *u = h->groups[0]->unique;
    switch (m) {
    case MISALIGN_VALUES:
        u->values->offset += 8;
        break;
    case VALUES_PAST_END:
        s->values->offset = 1 << 20;
        break;
    case VALUES_OVERFLOW:
        s->values->offset = UINT64_MAX - 63;
        s->values->length = 128;
        break;
    case VALUES_IN_HEADER:
        s->values->offset = 0;
        break;
    case VALUES_TOO_SHORT:
        u->values->length -= 8;
        break;
    case WEIGHTS_TOO_LONG:
        u->weights->length += 4;
        break;
    case INVERSE_TOO_SHORT:
        h->groups[0]->inverse_indices->length = 28;
        break;
    case DENSE_WRONG:
        h->dense->cols = 3;
        break;
    case SAMPLE_IDS_SHORT:
        h->sample_ids->length = 8;
        break;
    case LENGTHS_MISSING:
        s->lengths = NULL;
        break;
    case NUM_VALUES_HUGE:
        s->num_values = UINT64_MAX / 4;
        break;
    case PLAIN_STRIDE_WRONG:
        s->stride = 4;
        s->lengths->length = 32;
        break;
    case HUGE_BATCH:
        h->batch_size = (1u << 20) + 1;
        break;
    case HUGE_STRIDE:
        u->stride = UINT32_MAX;
        break;
    case RENAME_GROUP_KEY:
        u->keys[1] = sl_arena_strdup(a, "b");
        break;
    }
}

/* A copy of f whose header went through mutation m. The buffers move 128
 * bytes back (offsets adjusted before m applies) so that the header may grow. */
static frame_t reframe(frame_t f, enum mutation m)
{
    const uint64_t shift = 128;
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    ProtobufCAllocator pa = {pb_arena_alloc, pb_arena_free, arena};
    uint32_t header_len;
    memcpy(&header_len, f.p + 8, 4);
    Sluice__BatchHeader *h = sluice__batch_header__unpack(&pa, header_len, f.p + 32);
    cr_assert_not_null(h);
    shift_kjt(h->sparse, shift);
    for (size_t g = 0; g < h->n_groups; g++) {
        shift_kjt(h->groups[g]->unique, shift);
        shift_ref(h->groups[g]->inverse_indices, shift);
    }
    if (h->dense != NULL) shift_ref(h->dense->data, shift);
    if (h->labels != NULL) shift_ref(h->labels->data, shift);
    shift_ref(h->sample_ids, shift);
    mutate(h, arena, m);

    size_t data_start = (32 + header_len + 63) / 64 * 64;
    frame_t out = {sl_alloc_aligned(NULL, f.len + shift, 64), f.len + shift};
    memset(out.p, 0, out.len);
    size_t packed = sluice__batch_header__get_packed_size(h);
    cr_assert(32 + packed <= data_start + shift, "mutated header too large");
    memcpy(out.p, f.p, 32);
    uint32_t new_header_len = (uint32_t)packed;
    memcpy(out.p + 8, &new_header_len, 4);
    uint64_t new_len = out.len;
    memcpy(out.p + 16, &new_len, 8);
    sluice__batch_header__pack(h, out.p + 32);
    memcpy(out.p + data_start + shift, f.p + data_start, f.len - data_start);
    sl_arena_destroy(arena);
    return out;
}

static void reject_mutated(enum mutation m, sl_err_t code, const char *want)
{
    frame_t f = encode_fixed();
    frame_t bad = reframe(f, m);
    expect_reject(bad, NULL, code, want);
    frame_free(bad);
    frame_free(f);
}

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

/* ---- allocation failure ------------------------------------------------------------ */

typedef struct counting {
    long live;    /* allocations not yet freed */
    long calls;   /* allocations attempted */
    long fail_at; /* the call number that fails (1-based); 0: never */
} counting_t;

static void *counting_alloc(void *ctx, size_t size, size_t align)
{
    counting_t *c = ctx;
    if (++c->calls == c->fail_at) return NULL;
    void *p = sl_allocator_default()->alloc(NULL, size, align);
    if (p != NULL) c->live++;
    return p;
}

static void counting_free(void *ctx, void *ptr, size_t size)
{
    counting_t *c = ctx;
    if (ptr == NULL) return;
    c->live--;
    sl_allocator_default()->free(NULL, ptr, size);
}

Test(alloc, decode_and_encode_fail_cleanly)
{
    /* A batch with many keys so the decoder needs several arena chunks. */
    uint64_t rng = 7;
    sl_batch_t *b = random_batch(&rng, 3000);
    void *frame;
    size_t len;
    cr_assert_eq(sl_wire_encode(b, NULL, &frame, &len, NULL), SL_OK);

    counting_t c = {0};
    sl_allocator_t a = {counting_alloc, counting_free, &c};
    sl_batch_t *d;
    cr_assert_eq(sl_wire_decode(frame, len, NULL, &a, &d, NULL), SL_OK);
    long needed = c.calls;
    sl_batch_destroy(d);
    cr_assert_eq(c.live, 0);
    for (long n = 1; n <= needed; n++) {
        c = (counting_t){.fail_at = n};
        sl_error_t err = {0};
        d = (sl_batch_t *)1;
        cr_assert_eq(sl_wire_decode(frame, len, NULL, &a, &d, &err), SL_ERR_NOMEM,
                     "failing allocation %ld of %ld: %s", n, needed, err.msg);
        cr_assert_null(d);
        cr_assert_eq(c.live, 0, "leak after failing allocation %ld", n);
    }

    c = (counting_t){.fail_at = 1};
    void *f2 = (void *)1;
    size_t l2 = 1;
    cr_assert_eq(sl_wire_encode(b, &a, &f2, &l2, NULL), SL_ERR_NOMEM);
    cr_assert_null(f2);
    c = (counting_t){0};
    cr_assert_eq(sl_wire_encode(b, &a, &f2, &l2, NULL), SL_OK);
    cr_assert_eq(c.live, 1);
    sl_free(&a, f2, l2);
    cr_assert_eq(c.live, 0);

    sl_free(NULL, frame, len);
    sl_batch_destroy(b);
}

/* ---- seed corpus of the wire_decode fuzz target ------------------------------------ */

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

Test(corpus, write)
{
    const char *dir = getenv("SLUICE_WRITE_CORPUS");
    if (dir == NULL || *dir == '\0') return;
    uint64_t rng = 20261121;
    int written = 0;
    /* Small valid frames of assorted shapes, each under 4 KB. */
    for (int attempt = 0; written < 7 && attempt < 1000; attempt++) {
        uint32_t B = written < 2 ? (uint32_t)written : 1 + (uint32_t)tu_below(&rng, 12);
        sl_batch_t *b = random_batch(&rng, B);
        void *frame;
        size_t len;
        cr_assert_eq(sl_wire_encode(b, NULL, &frame, &len, NULL), SL_OK);
        if (len < 4096) {
            char name[32];
            snprintf(name, sizeof name, "valid-%d", written++);
            write_file(dir, name, frame, len);
        }
        sl_free(NULL, frame, len);
        sl_batch_destroy(b);
    }
    frame_t f = encode_fixed();
    write_file(dir, "valid-fixed", f.p, f.len);
    write_file(dir, "bad-truncated", f.p, f.len / 2);
    f.p[4] = 2;
    write_file(dir, "bad-version", f.p, f.len);
    f.p[4] = 1;
    frame_free(f);
    f = encode_fixed();
    sl_batch_t *d;
    cr_assert_eq(sl_wire_decode(f.p, f.len, NULL, NULL, &d, NULL), SL_OK);
    d->groups[0].inverse[6] = 3;
    sl_batch_destroy(d);
    write_file(dir, "bad-inverse", f.p, f.len);
    frame_free(f);
    f = encode_fixed();
    frame_t m = reframe(f, VALUES_TOO_SHORT);
    write_file(dir, "bad-length", m.p, m.len);
    frame_free(m);
    frame_free(f);
}

/* sl_wire_encode_layout: random plain batches laid out from their sizes,
 * the buffers then written through the view, give sl_wire_encode's bytes
 * (every byte outside the buffers written by the layout: the frame starts
 * as garbage). */
Test(encode_layout, same_bytes_as_encode)
{
    uint64_t rng = tu_seed("encode_layout");
    for (int i = 0; i < 200; i++) {
        uint32_t B = (uint32_t)tu_below(&rng, 40);
        sl_batch_t *b = random_batch(&rng, B);
        b->num_groups = 0; /* plain batches only */
        b->groups = NULL;
        void *want = NULL;
        size_t want_len = 0, len = 0;
        sl_error_t err = {0};
        cr_assert_eq(sl_wire_encode(b, NULL, &want, &want_len, &err), SL_OK, "%s", err.msg);
        sl_batch_t shape = *b; /* the sizes and names; buffers not read */
        shape.sparse.lengths = NULL;
        shape.sparse.values = NULL;
        if (shape.sparse.weights) shape.sparse.weights = (float *)8;
        shape.dense.data = NULL;
        shape.labels.data = NULL;
        if (shape.sample_ids) shape.sample_ids = (int64_t *)8;
        cr_assert_eq(sl_wire_encoded_size(&shape), want_len);
        uint8_t *buf = sl_alloc_aligned(NULL, want_len, SL_ALIGN);
        memset(buf, 0xa5, want_len);
        sl_batch_t view;
        cr_assert_eq(sl_wire_encode_layout(&shape, buf, want_len, &len, &view, &err), SL_OK, "%s",
                     err.msg);
        cr_assert_eq(len, want_len);
        cr_assert_null(view.arena);
        cr_assert_eq(view.batch_size, B);
        const sl_kjt_t *k = &b->sparse;
        size_t rows = (size_t)k->num_keys * k->stride;
        if (rows) memcpy(view.sparse.lengths, k->lengths, rows * sizeof(int32_t));
        if (k->num_values) memcpy(view.sparse.values, k->values, k->num_values * sizeof(int64_t));
        cr_assert_eq(view.sparse.weights != NULL, k->weights != NULL);
        if (k->weights && k->num_values)
            memcpy(view.sparse.weights, k->weights, k->num_values * sizeof(float));
        size_t dn = (size_t)b->dense.rows * b->dense.cols,
               ln = (size_t)b->labels.rows * b->labels.cols;
        if (dn) memcpy(view.dense.data, b->dense.data, dn * sizeof(float));
        if (ln) memcpy(view.labels.data, b->labels.data, ln * sizeof(float));
        cr_assert_eq(view.sample_ids != NULL, b->sample_ids != NULL);
        if (b->sample_ids && B) memcpy(view.sample_ids, b->sample_ids, B * sizeof(int64_t));
        cr_assert_eq(memcmp(buf, want, want_len), 0, "batch %d (B=%u) differs", i, B);
        sl_free(NULL, buf, want_len);
        sl_free(NULL, want, want_len);
        sl_batch_destroy(b);
    }
}

Test(encode_layout, errors)
{
    sl_batch_t *b = fixed_batch(); /* has a group */
    size_t need = sl_wire_encoded_size(b);
    uint8_t *buf = sl_alloc_aligned(NULL, need + 64, 64);
    size_t len = 1;
    sl_batch_t view;
    sl_error_t err = {0};
    cr_assert_eq(sl_wire_encode_layout(b, buf, need, &len, &view, &err), SL_ERR_UNSUPPORTED);
    cr_assert_str_eq(err.msg, "encode layout: a batch with 1 dedup groups (only plain batches)");
    cr_assert_eq(len, 0);
    b->num_groups = 0;
    size_t plain = sl_wire_encoded_size(b);
    cr_assert_eq(sl_wire_encode_layout(b, buf, plain - 1, &len, &view, &err), SL_ERR_TOO_LARGE);
    cr_assert(strstr(err.msg, "buffer has") != NULL, "%s", err.msg);
    cr_assert_eq(sl_wire_encode_layout(b, buf + 8, plain, &len, &view, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "aligned") != NULL, "%s", err.msg);
    const char *dup[] = {"a", "a"};
    b->sparse.keys = dup;
    cr_assert_eq(sl_wire_encode_layout(b, buf, plain, &len, &view, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "encode layout: plain KJT: keys unique: key 'a' appears at 0 and 1");
    sl_free(NULL, buf, need + 64);
    sl_batch_destroy(b);
}

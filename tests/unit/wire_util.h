/* What wire_test.c and wire_reject_test.c share: random and fixed batches,
 * exact comparisons (zero-copy views into the frame), and frames to mutate
 * (a header field changed, re-encoded, its rejection expected). */
#ifndef SLUICE_TESTS_WIRE_UTIL_H
#define SLUICE_TESTS_WIRE_UTIL_H

/* Every helper here: a test file uses only some. */
#define WT_FN static __attribute__((unused))

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
WT_FN void fill_kjt(uint64_t *rng, sl_kjt_t *kjt, sl_arena_t *arena, uint32_t num_keys,
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

WT_FN void fill_dense(uint64_t *rng, sl_dense_t *d, sl_arena_t *arena, uint32_t rows, uint32_t cols,
                      bool named)
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
WT_FN sl_batch_t *random_batch(uint64_t *rng, uint32_t B)
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
WT_FN sl_batch_t *fixed_batch(void)
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

WT_FN void assert_dense_equal(const sl_dense_t *a, const sl_dense_t *b, const char *what)
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

WT_FN void assert_batch_equal(const sl_batch_t *a, const sl_batch_t *b)
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
WT_FN void assert_in_frame(const void *p, size_t bytes, const uint8_t *frame, size_t len,
                           const char *what)
{
    if (p == NULL) return;
    const uint8_t *q = p;
    cr_assert(q >= frame && q <= frame + len && bytes <= (size_t)(frame + len - q),
              "%s is not inside the frame", what);
    cr_assert_eq((size_t)(q - frame) % 64, 0, "%s at offset %zu is not 64-aligned", what,
                 (size_t)(q - frame));
}

WT_FN void assert_kjt_in_frame(const sl_kjt_t *k, const uint8_t *frame, size_t len)
{
    assert_in_frame(k->lengths, (size_t)k->num_keys * k->stride * 4, frame, len, "lengths");
    assert_in_frame(k->values, (size_t)k->num_values * 8, frame, len, "values");
    assert_in_frame(k->weights, (size_t)k->num_values * 4, frame, len, "weights");
    if (k->num_keys > 0) cr_assert_not_null(k->lengths);
}

WT_FN void assert_zero_copy(const sl_batch_t *d, const uint8_t *frame, size_t len)
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

/* ---- frames to mutate --------------------------------------------------------- */

typedef struct frame {
    uint8_t *p;
    size_t len;
} frame_t;

WT_FN frame_t encode_fixed(void)
{
    sl_batch_t *b = fixed_batch();
    frame_t f;
    cr_assert_eq(sl_wire_encode(b, NULL, (void **)&f.p, &f.len, NULL), SL_OK);
    sl_batch_destroy(b);
    return f;
}

WT_FN void frame_free(frame_t f)
{
    sl_free(NULL, f.p, f.len);
}

/* Decode f with limits (NULL: default) and assert the error code, and that
 * the message contains want (when not NULL). */
WT_FN void expect_reject(frame_t f, const sl_wire_limits_t *limits, sl_err_t code, const char *want)
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

WT_FN void *pb_arena_alloc(void *ctx, size_t size)
{
    return sl_arena_alloc(ctx, size);
}

WT_FN void pb_arena_free(void *ctx, void *p)
{
    (void)ctx;
    (void)p;
}

WT_FN void shift_ref(Sluice__BufferRef *r, uint64_t by)
{
    if (r != NULL) r->offset += by;
}

WT_FN void shift_kjt(Sluice__KjtDesc *k, uint64_t by)
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
WT_FN void mutate(Sluice__BatchHeader *h, sl_arena_t *a, enum mutation m)
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
WT_FN frame_t reframe(frame_t f, enum mutation m)
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

WT_FN void reject_mutated(enum mutation m, sl_err_t code, const char *want)
{
    frame_t f = encode_fixed();
    frame_t bad = reframe(f, m);
    expect_reject(bad, NULL, code, want);
    frame_free(bad);
    frame_free(f);
}

#endif

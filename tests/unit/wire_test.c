/* Wire encoding (src/tensor/wire.c, wire_decode.c): random batches survive
 * encode -> decode bit for bit with zero-copy, 64-aligned views into the
 * frame; encoder errors; allocation failure leaks nothing. Malformed frames:
 * wire_reject_test.c.
 *
 * With SLUICE_WRITE_CORPUS=<dir> set, the test "corpus.write" also writes the
 * seed corpus of the wire_decode fuzz target into <dir>. */
#include "wire_util.h"

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

/* IKJTs (src/tensor/ikjt.c: validation, expansion to the KJT sent without
 * dedup) and batches (batch.c): exact codes, messages and arrays. */
#include "tensor_util.h"

/* ---- IKJT ------------------------------------------------------------------------------- */

/* Group g: keys x, y over U=3 unique rows; x = [[10,11], [], [12]],
 * y = [[20], [21], []]; inverse [2,0,0,1,2] over B=5. */
static int32_t g_len[6];
static int64_t g_val[5];
static float g_w[5];
static int32_t g_inv[5];
static const char *g_keys[] = {"x", "y"};

static sl_ikjt_t group_xy(bool weighted)
{
    const int32_t len[] = {2, 0, 1, 1, 1, 0};
    const int64_t val[] = {10, 11, 12, 20, 21};
    const float w[] = {1, 2, 3, 4, 5};
    const int32_t inv[] = {2, 0, 0, 1, 2};
    memcpy(g_len, len, sizeof len);
    memcpy(g_val, val, sizeof val);
    memcpy(g_w, w, sizeof w);
    memcpy(g_inv, inv, sizeof inv);
    sl_ikjt_t g = {"g", kjt_of(2, g_keys, 3, g_len, 5, g_val, weighted ? g_w : NULL), 5, g_inv};
    return g;
}

Test(ikjt, validate_each_invariant)
{
    sl_error_t err = {0};
    sl_ikjt_t g = group_xy(false);
    cr_assert_eq(sl_ikjt_validate(&g, &err), SL_OK);
    cr_assert_eq(sl_ikjt_bytes(&g), 6 * 4 + 5 * 8 + 5 * 4);

    g_inv[3] = 3;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group 'g': inverse indices < U: row 3 has 3, U=3");
    g_inv[3] = -1;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group 'g': inverse indices < U: row 3 has -1, U=3");
    cr_assert_eq(sl_ikjt_validate(&g, NULL), SL_ERR_INVALID);
    g_inv[3] = 1;

    g.batch_size = 2;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group 'g': unique rows U=3 exceed B=2");
    g.batch_size = 5;
    g.inverse = NULL;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group 'g': inverse indices missing");
    g.inverse = g_inv;

    g_len[0] = 3;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group 'g' unique rows: sum(lengths) == len(values): 6 != 5");
    /* Without an error object the code must still be the error. */
    cr_assert_eq(sl_ikjt_validate(&g, NULL), SL_ERR_INVALID);
    g.name = NULL;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group '?' unique rows: sum(lengths) == len(values): 6 != 5");
}

Test(ikjt, validate_long_inverse)
{
    /* The inverse scan runs in blocks of 64 plus a tail: a bad index in
     * either is found and named. */
    static int32_t inv[200];
    for (int b = 0; b < 200; b++)
        inv[b] = b % 3;
    sl_ikjt_t g = group_xy(false);
    g.inverse = inv;
    g.batch_size = 200;
    sl_error_t err = {0};
    cr_assert_eq(sl_ikjt_validate(&g, &err), SL_OK, "%s", err.msg);
    inv[130] = 3;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group 'g': inverse indices < U: row 130 has 3, U=3");
    inv[130] = 1;
    inv[199] = INT32_MIN;
    expect_err(sl_ikjt_validate(&g, &err), &err, SL_ERR_INVALID,
               "group 'g': inverse indices < U: row 199 has -2147483648, U=3");
}

Test(ikjt, expand_unweighted_and_weighted)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_error_t err = {0};
    sl_kjt_t out;
    sl_ikjt_t g = group_xy(false);
    cr_assert_eq(sl_ikjt_expand(&g, arena, &out, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(out.num_keys, 2);
    cr_assert_eq(out.stride, 5);
    cr_assert_str_eq(out.keys[1], "y");
    ASSERT_INTS(out.lengths, 10, 1, 2, 2, 0, 1, 0, 1, 1, 1, 0);
    ASSERT_INTS(out.values, out.num_values, 12, 10, 11, 10, 11, 12, 20, 20, 21);
    cr_assert_null(out.weights);
    cr_assert_eq(sl_kjt_validate(&out, NULL), SL_OK);

    g = group_xy(true);
    cr_assert_eq(sl_ikjt_expand(&g, arena, &out, &err), SL_OK, "%s", err.msg);
    ASSERT_INTS(out.values, out.num_values, 12, 10, 11, 10, 11, 12, 20, 20, 21);
    ASSERT_FLOATS(out.weights, out.num_values, 3, 1, 2, 1, 2, 3, 4, 4, 5);

    /* Identity inverse over U == B expands to the unique KJT itself. */
    int32_t id[3] = {0, 1, 2};
    g.inverse = id;
    g.batch_size = 3;
    cr_assert_eq(sl_ikjt_expand(&g, arena, &out, &err), SL_OK);
    cr_assert(sl_kjt_equal(&out, &g.unique));

    /* An invalid group is not expanded. */
    id[0] = 5;
    cr_assert_eq(sl_ikjt_expand(&g, arena, &out, &err), SL_ERR_INVALID);
    sl_arena_destroy(arena);
}

Test(ikjt, expand_edge_cases)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_error_t err = {0};
    sl_kjt_t out;
    const char *keys[] = {"x"};

    /* B = 0, U = 0. */
    sl_ikjt_t g = {"e", kjt_of(1, keys, 0, NULL, 0, NULL, NULL), 0, NULL};
    cr_assert_eq(sl_ikjt_expand(&g, arena, &out, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(out.num_keys, 1);
    cr_assert_eq(out.stride, 0);
    cr_assert_eq(out.num_values, 0);

    /* U = 0 with rows to map is impossible. */
    int32_t inv[4] = {0, 0, 0, 0};
    g.batch_size = 4;
    g.inverse = inv;
    expect_err(sl_ikjt_expand(&g, arena, &out, &err), &err, SL_ERR_INVALID,
               "group 'e': inverse indices < U: row 0 has 0, U=0");

    /* Only empty lists, no value buffer at all, weighted. */
    int32_t len[2] = {0, 0};
    float w;
    g.unique = kjt_of(1, keys, 2, len, 0, NULL, &w);
    const int32_t inv2[4] = {1, 0, 0, 1};
    memcpy(inv, inv2, sizeof inv);
    cr_assert_eq(sl_ikjt_expand(&g, arena, &out, &err), SL_OK, "%s", err.msg);
    ASSERT_INTS(out.lengths, 4, 0, 0, 0, 0);
    cr_assert_eq(out.num_values, 0);
    cr_assert_not_null(out.weights);

    /* No keys, B rows. */
    g.unique = kjt_of(0, NULL, 2, NULL, 0, NULL, NULL);
    cr_assert_eq(sl_ikjt_expand(&g, arena, &out, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(out.num_keys, 0);
    cr_assert_eq(out.stride, 4);
    sl_arena_destroy(arena);
}

Test(ikjt, expand_allocation_failure)
{
    sl_ikjt_t g = group_xy(true);
    for (long n = 1;; n++) {
        counting_t c = {0};
        sl_allocator_t a = {counting_alloc, counting_free, &c};
        sl_arena_t *arena = sl_arena_new(&a, 64);
        c.fail_at = c.calls + n;
        sl_error_t err = {0};
        sl_kjt_t out;
        sl_err_t rc = sl_ikjt_expand(&g, arena, &out, &err);
        sl_arena_destroy(arena);
        cr_assert_eq(c.live, 0, "leak when allocation %ld fails", n);
        if (rc == SL_OK) break;
        cr_assert_eq(rc, SL_ERR_NOMEM, "allocation %ld: %s", n, err.msg);
        cr_assert_eq(err.code, SL_ERR_NOMEM);
        cr_assert_lt(n, 100);
    }
}

/* ---- batch -------------------------------------------------------------------------------- */

/* B=3: plain "p" = [[1], [], [2,3]] unweighted; group "g": "q" over U=2 =
 * [[7], [8]] weighted [0.5, 0.25], inverse [1, 0, 1]. */
static sl_batch_t *small_batch(const sl_allocator_t *a)
{
    sl_batch_t *b = sl_batch_new(a);
    if (b == NULL) return NULL;
    const char *p[] = {"p"}, *q[] = {"q"};
    b->batch_size = 3;
    if (sl_kjt_init(&b->sparse, b->arena, 1, p, 3, 3, false) != SL_OK) goto fail;
    const int32_t plen[] = {1, 0, 2};
    memcpy(b->sparse.lengths, plen, sizeof plen);
    for (int i = 0; i < 3; i++)
        b->sparse.values[i] = i + 1;
    b->groups = sl_arena_calloc(b->arena, 1, sizeof(sl_ikjt_t));
    if (b->groups == NULL) goto fail;
    b->num_groups = 1;
    sl_ikjt_t *g = &b->groups[0];
    g->name = "g";
    g->batch_size = 3;
    if (sl_kjt_init(&g->unique, b->arena, 1, q, 2, 2, true) != SL_OK) goto fail;
    g->unique.lengths[0] = g->unique.lengths[1] = 1;
    g->unique.values[0] = 7;
    g->unique.values[1] = 8;
    g->unique.weights[0] = 0.5f;
    g->unique.weights[1] = 0.25f;
    g->inverse = sl_arena_alloc(b->arena, 3 * sizeof(int32_t));
    if (g->inverse == NULL) goto fail;
    g->inverse[0] = 1;
    g->inverse[1] = 0;
    g->inverse[2] = 1;
    const char *dn[] = {"d0", "d1"};
    if (sl_dense_init(&b->dense, b->arena, 3, 2, dn) != SL_OK) goto fail;
    if (sl_dense_init(&b->labels, b->arena, 3, 1, NULL) != SL_OK) goto fail;
    return b;
fail:
    sl_batch_destroy(b);
    return NULL;
}

Test(batch, dense_init)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_dense_t d;
    const char *names[] = {"a", "b"};
    cr_assert_eq(sl_dense_init(&d, arena, 4, 2, names), SL_OK);
    cr_assert_eq(d.rows, 4);
    cr_assert_eq(d.cols, 2);
    cr_assert_str_eq(d.names[1], "b");
    cr_assert_neq(d.names[1], names[1]);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(d.data[i], 0.0f);
    cr_assert_eq((uintptr_t)d.data % 64, 0);
    cr_assert_eq(sl_dense_init(&d, arena, 4, 0, NULL), SL_OK);
    cr_assert_null(d.names);
    const char *nul[] = {"a", NULL};
    cr_assert_eq(sl_dense_init(&d, arena, 1, 2, nul), SL_ERR_INVALID);
    cr_assert_eq(sl_dense_init(&d, arena, UINT32_MAX, UINT32_MAX, NULL), SL_ERR_NOMEM);
    sl_arena_destroy(arena);
}

Test(batch, validate_each_invariant)
{
    sl_batch_t *b = small_batch(NULL);
    sl_error_t err = {0};
    cr_assert_eq(sl_batch_validate(b, &err), SL_OK, "%s", err.msg);

    b->sparse.stride = 2;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID,
               "plain KJT stride 2 != batch size 3");
    b->sparse.stride = 3;
    b->sparse.lengths[2] = 1;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID,
               "plain KJT: sum(lengths) == len(values): 2 != 3");
    cr_assert_eq(sl_batch_validate(b, NULL), SL_ERR_INVALID, "fails without an error object");
    b->sparse.lengths[2] = 2;

    b->groups[0].batch_size = 2;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID, "group 0 has 2 rows, batch has 3");
    b->groups[0].batch_size = 3;
    b->groups[0].inverse[2] = 2;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID,
               "group 'g': inverse indices < U: row 2 has 2, U=2");
    b->groups[0].inverse[2] = 1;

    b->groups[0].unique.keys[0] = "p";
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID,
               "keys unique: 'p' is in the plain KJT and group 'g'");
    b->groups[0].unique.keys[0] = "q";

    sl_ikjt_t two[2] = {b->groups[0], b->groups[0]};
    two[1].name = NULL;
    b->groups = two;
    b->num_groups = 2;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID,
               "keys unique: 'q' is in groups 'g' and '?'");
    b->num_groups = 1;
    b->groups = NULL;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID, "1 groups declared, none present");
    b->groups = two;

    b->dense.rows = 2;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID, "dense has 2 rows, batch has 3");
    b->dense.rows = 3;
    float *data = b->labels.data;
    b->labels.data = NULL;
    expect_err(sl_batch_validate(b, &err), &err, SL_ERR_INVALID, "labels data missing");
    b->labels.data = data;
    /* Columns 0 means "no dense features": rows are not checked. */
    b->dense.cols = 0;
    b->dense.rows = 0;
    cr_assert_eq(sl_batch_validate(b, &err), SL_OK, "%s", err.msg);
    sl_batch_destroy(b);
}

Test(batch, expand)
{
    sl_batch_t *b = small_batch(NULL);
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_error_t err = {0};
    sl_kjt_t out;
    cr_assert_eq(sl_batch_expand(b, arena, &out, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(out.num_keys, 2);
    cr_assert_eq(out.stride, 3);
    cr_assert_str_eq(out.keys[0], "p");
    cr_assert_str_eq(out.keys[1], "q");
    ASSERT_INTS(out.lengths, 6, 1, 0, 2, 1, 1, 1);
    ASSERT_INTS(out.values, out.num_values, 1, 2, 3, 8, 7, 8);
    /* The unweighted plain KJT gets weight 1 next to a weighted group. */
    ASSERT_FLOATS(out.weights, out.num_values, 1, 1, 1, 0.25f, 0.5f, 0.25f);
    cr_assert_eq(sl_kjt_validate(&out, NULL), SL_OK);

    /* Without groups the expansion is the plain KJT. */
    b->num_groups = 0;
    cr_assert_eq(sl_batch_expand(b, arena, &out, &err), SL_OK);
    cr_assert(sl_kjt_equal(&out, &b->sparse));

    b->sparse.lengths[0] = -1;
    cr_assert_eq(sl_batch_expand(b, arena, &out, &err), SL_ERR_INVALID);
    sl_arena_destroy(arena);
    sl_batch_destroy(b);
}

static int released;
static void count_release(void *ctx)
{
    released += *(int *)ctx;
}

Test(batch, destroy_calls_release)
{
    sl_batch_destroy(NULL);
    sl_batch_t *b = sl_batch_new(NULL);
    int by = 3;
    b->release = count_release;
    b->release_ctx = &by;
    sl_batch_destroy(b);
    cr_assert_eq(released, 3);
}

Test(batch, allocation_failure)
{
    /* Building the batch and expanding it, failing each allocation in turn. */
    for (long n = 1;; n++) {
        counting_t c = {.fail_at = n};
        sl_allocator_t a = {counting_alloc, counting_free, &c};
        sl_batch_t *b = small_batch(&a);
        if (b == NULL) {
            cr_assert_eq(c.live, 0, "leak when allocation %ld fails", n);
            continue;
        }
        sl_arena_t *arena = sl_arena_new(&a, 64);
        sl_error_t err = {0};
        sl_kjt_t out;
        sl_err_t rc = arena == NULL ? SL_ERR_NOMEM : sl_batch_expand(b, arena, &out, &err);
        sl_arena_destroy(arena);
        sl_batch_destroy(b);
        cr_assert_eq(c.live, 0, "leak when allocation %ld fails", n);
        if (rc == SL_OK) break;
        cr_assert_eq(rc, SL_ERR_NOMEM, "allocation %ld: %s", n, err.msg);
        cr_assert_lt(n, 200);
    }
}

/* Random round trip of the core identity: expanding an IKJT built from a KJT
 * by picking unique rows gives back the KJT. */
Test(ikjt, expand_matches_reference)
{
    uint64_t rng = tu_seed("ikjt.expand_matches_reference");
    for (int iter = 0; iter < 200; iter++) {
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        uint32_t B = (uint32_t)tu_below(&rng, 40), U = B == 0 ? 0 : 1 + (uint32_t)tu_below(&rng, B);
        uint32_t F = 1 + (uint32_t)tu_below(&rng, 3);
        const char *keys[] = {"k0", "k1", "k2"};
        int32_t *ulen = calloc((size_t)F * U + 1, sizeof(int32_t));
        uint64_t n = 0;
        for (size_t i = 0; i < (size_t)F * U; i++)
            n += (uint64_t)(ulen[i] = (int32_t)tu_below(&rng, 4));
        sl_ikjt_t g = {"r", {0}, B, NULL};
        cr_assert_eq(sl_kjt_init(&g.unique, arena, F, keys, U, n, true), SL_OK);
        memcpy(g.unique.lengths, ulen, (size_t)F * U * sizeof(int32_t));
        for (uint64_t i = 0; i < n; i++) {
            g.unique.values[i] = (int64_t)tu_next(&rng);
            g.unique.weights[i] = (float)i;
        }
        g.inverse = sl_arena_alloc(arena, (size_t)B * 4 + 4);
        for (uint32_t r = 0; r < B; r++)
            g.inverse[r] = (int32_t)tu_below(&rng, U);

        sl_kjt_t out;
        cr_assert_eq(sl_ikjt_expand(&g, arena, &out, NULL), SL_OK);
        /* Reference: row r of key k is unique row inverse[r] of key k. */
        int64_t *uoff = calloc((size_t)F * U + 1, sizeof(int64_t));
        int64_t *ooff = calloc((size_t)F * B + 1, sizeof(int64_t));
        sl_kjt_offsets(&g.unique, uoff);
        sl_kjt_offsets(&out, ooff);
        for (uint32_t k = 0; k < F; k++)
            for (uint32_t r = 0; r < B; r++) {
                size_t ui = (size_t)k * U + (size_t)g.inverse[r], oi = (size_t)k * B + r;
                cr_assert_eq(out.lengths[oi], g.unique.lengths[ui]);
                for (int32_t j = 0; j < out.lengths[oi]; j++) {
                    cr_assert_eq(out.values[ooff[oi] + j], g.unique.values[uoff[ui] + j]);
                    cr_assert_eq(out.weights[ooff[oi] + j], g.unique.weights[uoff[ui] + j]);
                }
            }
        free(ulen);
        free(uoff);
        free(ooff);
        sl_arena_destroy(arena);
    }
}

/* Tests of src/dedup: hand-written batches with exact unique rows and inverse
 * indices, forced hash collisions, errors and allocation failure. The
 * randomised properties and the generator: dedup_property_test.c. */
#include "dedup_util.h"

/* ---- hand-written cases ---- */

Test(dedup, all_distinct)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    /* a: [1] [2] [3]; b: [10,11] [] [12] */
    int32_t len[] = {1, 1, 1, 2, 0, 1};
    int64_t val[] = {1, 2, 3, 10, 11, 12};
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 3, len, val, NULL);
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    int32_t inv[] = {0, 1, 2};
    assert_ikjt(&out, 3, 3, inv, len, val, 6);
    cr_assert_eq(out.unique.weights, NULL);
    cr_assert_str_eq(out.unique.keys[0], "a");
    cr_assert_str_eq(out.unique.keys[1], "b");
    cr_assert_eq(st.unique_rows, 3);
    cr_assert_eq(st.adjacent_hits, 0);
    sl_arena_destroy(arena);
}

Test(dedup, all_equal)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    int32_t len[] = {2, 2, 2, 2, 1, 1, 1, 1};
    int64_t val[] = {5, 6, 5, 6, 5, 6, 5, 6, 9, 9, 9, 9};
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 4, len, val, NULL);
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    int32_t inv[] = {0, 0, 0, 0};
    int32_t ulen[] = {2, 1};
    int64_t uval[] = {5, 6, 9};
    assert_ikjt(&out, 4, 1, inv, ulen, uval, 3);
    cr_assert_eq(st.adjacent_hits, 3);
    cr_assert_float_eq(st.factor, 4.0, 1e-12);
    sl_arena_destroy(arena);
}

Test(dedup, empty_lists)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    /* rows: ([],[]) ([7],[]) ([],[]) ([],[7]) ([7],[]) */
    int32_t len[] = {0, 1, 0, 0, 1, 0, 0, 0, 1, 0};
    int64_t val[] = {7, 7, 7};
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 5, len, val, NULL);
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    int32_t inv[] = {0, 1, 0, 2, 1};
    int32_t ulen[] = {0, 1, 0, 0, 0, 1};
    int64_t uval[] = {7, 7};
    assert_ikjt(&out, 5, 3, inv, ulen, uval, 2);
    cr_assert_eq(st.adjacent_hits, 0);
    sl_arena_destroy(arena);
}

Test(dedup, only_empty_lists)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    int32_t len[] = {0, 0, 0, 0, 0, 0};
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 3, len, NULL, NULL);
    cr_assert_eq(kjt.num_values, 0);
    kjt.values = NULL; /* allowed with no values: nothing may touch it */
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    int32_t inv[] = {0, 0, 0};
    int32_t ulen[] = {0, 0};
    assert_ikjt(&out, 3, 1, inv, ulen, NULL, 0);
    cr_assert_eq(st.adjacent_hits, 2);
    /* Same through sl_dedup_batch, weighted, with a colliding hash. */
    float w[1];
    sl_kjt_t weighted = make_kjt(arena, 2, KEYS2, 3, len, NULL, w);
    weighted.values = NULL;
    weighted.weights = w; /* non-NULL: weighted, with no weights to read */
    sl_dedup_t *c = sl_dedup_new(NULL, const_hash);
    sl_batch_t *batch = sl_batch_new(NULL);
    sl_dedup_group_spec_t g = {"g", 2, KEYS2};
    sl_error_t err = {0};
    cr_assert_eq(sl_dedup_batch(c, &weighted, &g, 1, batch, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(batch->groups[0].unique.stride, 1);
    cr_assert_not_null(batch->groups[0].unique.weights);
    sl_batch_destroy(batch);
    sl_dedup_destroy(c);
    sl_arena_destroy(arena);
}

Test(dedup, rows_differing_only_in_weights)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    /* Same ids everywhere; weights 0.5, 0.5, 0.25, 0.0, -0.0, 0.5: the
     * adjacent pair and row 5 merge, 0.0 and -0.0 do not. */
    int32_t len[] = {1, 1, 1, 1, 1, 1};
    int64_t val[] = {4, 4, 4, 4, 4, 4};
    float w[] = {0.5f, 0.5f, 0.25f, 0.0f, -0.0f, 0.5f};
    static const char *const key[] = {"a"};
    sl_kjt_t kjt = make_kjt(arena, 1, key, 6, len, val, w);
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    int32_t inv[] = {0, 0, 1, 2, 3, 0};
    int32_t ulen[] = {1, 1, 1, 1};
    int64_t uval[] = {4, 4, 4, 4};
    assert_ikjt(&out, 6, 4, inv, ulen, uval, 4);
    cr_assert_not_null(out.unique.weights);
    float uw[] = {0.5f, 0.25f, 0.0f, -0.0f};
    cr_assert_eq(memcmp(out.unique.weights, uw, sizeof uw), 0);
    cr_assert_eq(st.adjacent_hits, 1);
    sl_arena_destroy(arena);
}

Test(dedup, ids_split_differently_across_keys)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    /* row 0: a=[1,2] b=[3]; row 1: a=[1] b=[2,3]; row 2 = row 0; row 3 = row 1.
     * The concatenated ids are equal, the rows are not. */
    int32_t len[] = {2, 1, 2, 1, 1, 2, 1, 2};
    int64_t val[] = {1, 2, 1, 1, 2, 1, 3, 2, 3, 3, 2, 3};
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 4, len, val, NULL);
    sl_ikjt_t out = dedup_all(arena, &kjt, NULL);
    int32_t inv[] = {0, 1, 0, 1};
    int32_t ulen[] = {2, 1, 1, 2};
    int64_t uval[] = {1, 2, 1, 3, 2, 3};
    assert_ikjt(&out, 4, 2, inv, ulen, uval, 6);
    sl_arena_destroy(arena);
}

Test(dedup, empty_list_moves_between_keys)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    /* row 0: a=[] b=[5]; row 1: a=[5] b=[] */
    int32_t len[] = {0, 1, 1, 0};
    int64_t val[] = {5, 5};
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 2, len, val, NULL);
    sl_ikjt_t out = dedup_all(arena, &kjt, NULL);
    int32_t inv[] = {0, 1};
    assert_ikjt(&out, 2, 2, inv, len, val, 2);
    sl_arena_destroy(arena);
}

Test(dedup, zero_rows)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 0, NULL, NULL, NULL);
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    cr_assert_eq(out.batch_size, 0);
    cr_assert_eq(out.unique.stride, 0);
    cr_assert_eq(out.unique.num_keys, 2);
    cr_assert_eq(out.unique.num_values, 0);
    cr_assert_eq(st.batch_size, 0);
    cr_assert_eq(st.unique_rows, 0);
    cr_assert_float_eq(st.factor, 1.0, 0);
    cr_assert_eq(st.bytes_before, 0);
    cr_assert_eq(st.bytes_after, 0);
    cr_assert_eq(st.adjacent_hits, 0);
    sl_arena_destroy(arena);
}

Test(dedup, one_row)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    int32_t len[] = {3, 0};
    int64_t val[] = {-1, 0, 1};
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 1, len, val, NULL);
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    int32_t inv[] = {0};
    assert_ikjt(&out, 1, 1, inv, len, val, 3);
    cr_assert_float_eq(st.factor, 1.0, 0);
    sl_arena_destroy(arena);
}

Test(dedup, stats_exact)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    /* a: [1,2] [1,2] [3] [1,2] [3] [3]; b: [9] [9] [] [9] [] [] -> U = 2 */
    int32_t len[] = {2, 2, 1, 2, 1, 1, 1, 1, 0, 1, 0, 0};
    int64_t val[] = {1, 2, 1, 2, 3, 1, 2, 3, 3, 9, 9, 9};
    float w[12];
    for (int i = 0; i < 12; i++)
        w[i] = 1.0f;
    sl_kjt_t kjt = make_kjt(arena, 2, KEYS2, 6, len, val, w);
    sl_dedup_stats_t st;
    sl_ikjt_t out = dedup_all(arena, &kjt, &st);
    int32_t inv[] = {0, 0, 1, 0, 1, 1};
    int32_t ulen[] = {2, 1, 1, 0};
    int64_t uval[] = {1, 2, 3, 9};
    assert_ikjt(&out, 6, 2, inv, ulen, uval, 4);
    cr_assert_eq(st.batch_size, 6);
    cr_assert_eq(st.unique_rows, 2);
    cr_assert_float_eq(st.factor, 3.0, 1e-12);
    /* 12 lengths * 4 + 12 values * (8 + 4) */
    cr_assert_eq(st.bytes_before, 12 * 4 + 12 * 12);
    cr_assert_eq(st.bytes_before, sl_kjt_bytes(&kjt));
    /* 4 unique lengths * 4 + 4 values * 12 + 6 inverse * 4 */
    cr_assert_eq(st.bytes_after, 4 * 4 + 4 * 12 + 6 * 4);
    cr_assert_eq(st.adjacent_hits, 2); /* rows 1 and 5 */
    sl_arena_destroy(arena);
}

Test(dedup, group_keys_in_given_order_and_subset)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    static const char *const keys[] = {"x", "y", "z"};
    /* x: [1] [2]; y: [5] [5]; z: [7] [7] -> group (z, y) has one unique row */
    int32_t len[] = {1, 1, 1, 1, 1, 1};
    int64_t val[] = {1, 2, 5, 5, 7, 7};
    sl_kjt_t kjt = make_kjt(arena, 3, keys, 2, len, val, NULL);
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    uint32_t idx[] = {2, 1};
    sl_ikjt_t out;
    sl_error_t err = {0};
    cr_assert_eq(sl_dedup_group(d, &kjt, idx, 2, "zy", arena, &out, NULL, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_str_eq(out.unique.keys[0], "z");
    cr_assert_str_eq(out.unique.keys[1], "y");
    int32_t inv[] = {0, 0};
    int32_t ulen[] = {1, 1};
    int64_t uval[] = {7, 5};
    assert_ikjt(&out, 2, 1, inv, ulen, uval, 2);
    sl_dedup_destroy(d);
    sl_arena_destroy(arena);
}

Test(dedup, batch_splits_plain_and_groups)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    static const char *const keys[] = {"p0", "u0", "p1", "u1"};
    /* p0: [1] [2] [3]; u0: [8] [8] [9]; p1: [] [4,5] [6]; u1: [0] [0] [0] */
    int32_t len[] = {1, 1, 1, 1, 1, 1, 0, 2, 1, 1, 1, 1};
    int64_t val[] = {1, 2, 3, 8, 8, 9, 4, 5, 6, 0, 0, 0};
    sl_kjt_t kjt = make_kjt(arena, 4, keys, 3, len, val, NULL);
    static const char *const ufeat[] = {"u1", "u0"};
    sl_dedup_group_spec_t groups[] = {{"user", 2, ufeat}};
    sl_batch_t *batch = sl_batch_new(NULL);
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    sl_dedup_stats_t st[1];
    sl_error_t err = {0};
    cr_assert_eq(sl_dedup_batch(d, &kjt, groups, 1, batch, st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_batch_validate(batch, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(batch->batch_size, 3);
    cr_assert_eq(batch->sparse.num_keys, 2);
    cr_assert_str_eq(batch->sparse.keys[0], "p0");
    cr_assert_str_eq(batch->sparse.keys[1], "p1");
    int32_t plen[] = {1, 1, 1, 0, 2, 1};
    int64_t pval[] = {1, 2, 3, 4, 5, 6};
    assert_ints(batch->sparse.lengths, plen, 6, "plain lengths");
    cr_assert_eq(batch->sparse.num_values, 6);
    assert_ids(batch->sparse.values, pval, 6);
    cr_assert_eq(batch->num_groups, 1);
    cr_assert_str_eq(batch->groups[0].name, "user");
    cr_assert_str_eq(batch->groups[0].unique.keys[0], "u1");
    cr_assert_str_eq(batch->groups[0].unique.keys[1], "u0");
    int32_t inv[] = {0, 0, 1};
    int32_t ulen[] = {1, 1, 1, 1};
    int64_t uval[] = {0, 0, 8, 9};
    assert_ikjt(&batch->groups[0], 3, 2, inv, ulen, uval, 4);
    cr_assert_eq(st[0].unique_rows, 2);
    cr_assert_eq(st[0].adjacent_hits, 1);
    sl_dedup_destroy(d);
    sl_batch_destroy(batch);
    sl_arena_destroy(arena);
}

/* ---- errors ---- */

static void setup_error_batch(sl_arena_t *arena, sl_kjt_t *kjt)
{
    static const char *const keys[] = {"a", "b", "c"};
    int32_t len[] = {1, 1, 1};
    int64_t val[] = {1, 2, 3};
    *kjt = make_kjt(arena, 3, keys, 1, len, val, NULL);
}

static void expect_batch_error(const sl_kjt_t *kjt, const sl_dedup_group_spec_t *groups,
                               uint32_t num_groups, sl_err_t code, const char *const *needles)
{
    sl_batch_t *batch = sl_batch_new(NULL);
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    sl_error_t err = {0};
    sl_err_t rc = sl_dedup_batch(d, kjt, groups, num_groups, batch, NULL, &err);
    cr_assert_eq(rc, code, "got %s (%s), want %s", sl_err_str(rc), err.msg, sl_err_str(code));
    cr_assert_eq(err.code, code);
    for (; *needles != NULL; needles++)
        cr_assert_not_null(strstr(err.msg, *needles), "message '%s' lacks '%s'", err.msg, *needles);
    /* Nothing was emitted. */
    cr_assert_eq(batch->num_groups, 0);
    cr_assert_eq(batch->batch_size, 0);
    /* The same call without err must fail the same way. */
    cr_assert_eq(sl_dedup_batch(d, kjt, groups, num_groups, batch, NULL, NULL), code);
    sl_dedup_destroy(d);
    sl_batch_destroy(batch);
}

Test(dedup, unknown_feature)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_kjt_t kjt;
    setup_error_batch(arena, &kjt);
    static const char *const f[] = {"a", "nope"};
    sl_dedup_group_spec_t g[] = {{"user", 2, f}};
    const char *needles[] = {"nope", "user", NULL};
    expect_batch_error(&kjt, g, 1, SL_ERR_INVALID, needles);
    sl_arena_destroy(arena);
}

Test(dedup, feature_in_two_groups)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_kjt_t kjt;
    setup_error_batch(arena, &kjt);
    static const char *const f1[] = {"a", "b"};
    static const char *const f2[] = {"c", "b"};
    sl_dedup_group_spec_t g[] = {{"user", 2, f1}, {"ctx", 2, f2}};
    const char *needles[] = {"'b'", "user", "ctx", NULL};
    expect_batch_error(&kjt, g, 2, SL_ERR_INVALID, needles);
    sl_arena_destroy(arena);
}

Test(dedup, feature_twice_in_one_group)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_kjt_t kjt;
    setup_error_batch(arena, &kjt);
    static const char *const f[] = {"c", "a", "c"};
    sl_dedup_group_spec_t g[] = {{"user", 3, f}};
    const char *needles[] = {"'c'", "twice", "user", NULL};
    expect_batch_error(&kjt, g, 1, SL_ERR_INVALID, needles);
    sl_arena_destroy(arena);
}

Test(dedup, empty_group_and_unnamed_group)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_kjt_t kjt;
    setup_error_batch(arena, &kjt);
    sl_dedup_group_spec_t g[] = {{"user", 0, NULL}};
    const char *needles[] = {"user", "no features", NULL};
    expect_batch_error(&kjt, g, 1, SL_ERR_INVALID, needles);
    static const char *const f[] = {"a"};
    sl_dedup_group_spec_t g2[] = {{NULL, 1, f}};
    const char *needles2[] = {"group 0", NULL};
    expect_batch_error(&kjt, g2, 1, SL_ERR_INVALID, needles2);
    sl_arena_destroy(arena);
}

Test(dedup, invalid_input_kjt)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_kjt_t kjt;
    setup_error_batch(arena, &kjt);
    static const char *const f[] = {"a"};
    sl_dedup_group_spec_t g[] = {{"user", 1, f}};
    kjt.lengths[1] = -1;
    const char *needles[] = {"'b'", "non-negative", NULL};
    expect_batch_error(&kjt, g, 1, SL_ERR_INVALID, needles);
    kjt.lengths[1] = 2; /* sum(lengths) = 4 != 3 values */
    const char *needles2[] = {"sum(lengths)", NULL};
    expect_batch_error(&kjt, g, 1, SL_ERR_INVALID, needles2);
    kjt.lengths[1] = 1;
    kjt.keys[2] = "a";
    const char *needles3[] = {"'a'", "twice", NULL};
    expect_batch_error(&kjt, g, 1, SL_ERR_INVALID, needles3);
    sl_arena_destroy(arena);
}

Test(dedup, group_key_index_errors)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_kjt_t kjt;
    setup_error_batch(arena, &kjt);
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    sl_ikjt_t out;
    sl_error_t err = {0};
    uint32_t bad[] = {0, 3};
    cr_assert_eq(sl_dedup_group(d, &kjt, bad, 2, "g", arena, &out, NULL, &err), SL_ERR_INVALID);
    cr_assert_not_null(strstr(err.msg, "out of range"), "%s", err.msg);
    uint32_t twice[] = {1, 1};
    cr_assert_eq(sl_dedup_group(d, &kjt, twice, 2, "g", arena, &out, NULL, &err), SL_ERR_INVALID);
    cr_assert_not_null(strstr(err.msg, "'b'"), "%s", err.msg);
    cr_assert_eq(sl_dedup_group(NULL, &kjt, twice, 2, "g", arena, &out, NULL, &err),
                 SL_ERR_INVALID);
    sl_dedup_destroy(d);
    sl_dedup_destroy(NULL);
    sl_arena_destroy(arena);
}

/* ---- allocation failure ---- */

typedef struct counting {
    size_t live_bytes;
    long allocs;
    long fail_at; /* the allocation with this number fails; -1 never */
} counting_t;

static void *count_alloc(void *ctx, size_t size, size_t align)
{
    counting_t *c = ctx;
    if (c->allocs++ == c->fail_at) return NULL;
    void *p = sl_allocator_default()->alloc(NULL, size, align);
    if (p != NULL) c->live_bytes += size;
    return p;
}

static void count_free(void *ctx, void *ptr, size_t size)
{
    counting_t *c = ctx;
    if (ptr != NULL) c->live_bytes -= size;
    sl_allocator_default()->free(NULL, ptr, size);
}

Test(dedup, allocation_failures_are_reported_and_nothing_leaks)
{
    sl_arena_t *src = sl_arena_new(NULL, 0);
    sl_dedup_synth_spec_t spec = {.batch_size = 200,
                                  .group_features = 3,
                                  .plain_features = 2,
                                  .ids_per_list = 3,
                                  .vary_lengths = true,
                                  .dup_factor = 4,
                                  .weighted = true,
                                  .seed = 7};
    sl_kjt_t kjt;
    sl_dedup_group_spec_t group;
    cr_assert_eq(sl_dedup_synth(&spec, src, &kjt, &group), SL_OK);
    bool succeeded = false;
    for (long fail_at = 0; !succeeded && fail_at < 1000; fail_at++) {
        counting_t c = {0, 0, fail_at};
        sl_allocator_t a = {count_alloc, count_free, &c};
        sl_dedup_t *d = sl_dedup_new(&a, NULL);
        sl_batch_t *batch = d != NULL ? sl_batch_new(&a) : NULL;
        if (batch != NULL) {
            sl_error_t err = {0};
            sl_err_t rc = sl_dedup_batch(d, &kjt, &group, 1, batch, NULL, &err);
            cr_assert(rc == SL_OK || rc == SL_ERR_NOMEM, "fail_at %ld: %s", fail_at, err.msg);
            succeeded = rc == SL_OK;
        }
        sl_batch_destroy(batch);
        sl_dedup_destroy(d);
        cr_assert_eq(c.live_bytes, 0, "fail_at %ld leaks %zu bytes", fail_at, c.live_bytes);
    }
    cr_assert(succeeded);
    sl_arena_destroy(src);
}

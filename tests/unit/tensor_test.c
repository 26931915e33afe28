/* Tensors (src/tensor/kjt.c) and the common layer under them (src/common:
 * errors, allocator, arena): every invariant the validators check gives its
 * exact code and a message naming it; offsets, views and expansions match
 * hand-computed arrays; arena blocks are 64-byte aligned; allocation
 * failure anywhere returns SL_ERR_NOMEM without leaking. IKJTs and batches:
 * tensor_ikjt_test.c. */
#include "tensor_util.h"

/* ---- errors ---------------------------------------------------------------------- */

Test(err, strings_and_messages)
{
    cr_assert_str_eq(sl_err_str(SL_OK), "ok");
    cr_assert_str_eq(sl_err_str(SL_ERR_CORRUPT), "corrupt data");
    cr_assert_str_eq(sl_err_str((sl_err_t)-99), "unknown error");
    for (int e = 0; e >= SL_ERR_UNSUPPORTED; e--)
        for (int f = 0; f > e; f--)
            cr_assert_str_neq(sl_err_str((sl_err_t)e), sl_err_str((sl_err_t)f));

    cr_assert_eq(sl_error_set(NULL, SL_ERR_IO, "x %d", 1), SL_ERR_IO);
    cr_assert_eq(sl_error_prefix(NULL, "y"), SL_OK);
    sl_error_t err = {0};
    cr_assert_eq(sl_error_set(&err, SL_ERR_IO, "stripe %d", 7), SL_ERR_IO);
    cr_assert_eq(sl_error_prefix(&err, "file %s: ", "a.slc"), SL_ERR_IO);
    cr_assert_str_eq(err.msg, "file a.slc: stripe 7");

    /* A long prefix keeps what fits and stays NUL-terminated. */
    char big[700];
    memset(big, 'p', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    sl_error_prefix(&err, "%s", big);
    cr_assert_eq(strlen(err.msg), SL_ERROR_MSG_MAX - 1);
    sl_error_set(&err, SL_ERR_IO, "%s", big + 300);
    sl_error_prefix(&err, "%s", big + 500);
    cr_assert_eq(strlen(err.msg), SL_ERROR_MSG_MAX - 1);
    sl_error_set(&err, SL_ERR_IO, "tail");
    sl_error_prefix(&err, "%s", big + 200); /* 499 + 4 = 503 fits */
    cr_assert_eq(strlen(err.msg), 503);
    cr_assert_str_eq(err.msg + 499, "tail");

    sl_error_clear(&err);
    cr_assert_eq(err.code, SL_OK);
    cr_assert_str_eq(err.msg, "");
    sl_error_clear(NULL);
}

/* ---- allocator and arena ----------------------------------------------------------- */

Test(alloc, sizes_and_alignment)
{
    cr_assert_null(sl_alloc(NULL, SIZE_MAX));
    cr_assert_null(sl_calloc(NULL, SIZE_MAX / 2, 4));
    cr_assert_null(sl_alloc_aligned(NULL, 16, 48)); /* not a power of two */
    cr_assert_null(sl_alloc_aligned(NULL, 16, 0));
    cr_assert_eq(sl_mul_size(SIZE_MAX / 2, 3), SIZE_MAX);
    cr_assert_eq(sl_mul_size(7, 0), 0);
    cr_assert_eq(sl_align_up(65), 128);
    cr_assert_eq(sl_align_up(SIZE_MAX - 10), SIZE_MAX);
    for (size_t align = 1; align <= 4096; align *= 2) {
        void *p = sl_alloc_aligned(NULL, 100, align);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % align, 0);
        sl_free(NULL, p, 100);
    }
    uint8_t *z = sl_calloc(NULL, 100, 3);
    for (int i = 0; i < 300; i++)
        cr_assert_eq(z[i], 0);
    sl_free(NULL, z, 300);
    sl_free(NULL, NULL, 0);
}

Test(arena, every_block_aligned_and_disjoint)
{
    uint64_t rng = tu_seed("arena.every_block_aligned_and_disjoint");
    /* A chunk size that is not a multiple of 64 must not matter. */
    sl_arena_t *arena = sl_arena_new(NULL, 1000);
    enum { N = 2000 };
    static uint8_t *blocks[N];
    static size_t sizes[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = tu_below(&rng, 8) == 0 ? tu_below(&rng, 5000) : tu_below(&rng, 200);
        blocks[i] = sl_arena_alloc(arena, sizes[i]);
        cr_assert_not_null(blocks[i]);
        cr_assert_eq((uintptr_t)blocks[i] % SL_ALIGN, 0, "block %d of %zu bytes", i, sizes[i]);
        memset(blocks[i], i & 0xff, sizes[i]);
    }
    for (int i = 0; i < N; i++)
        for (size_t j = 0; j < sizes[i]; j++)
            cr_assert_eq(blocks[i][j], i & 0xff, "block %d overwritten", i);
    sl_arena_destroy(arena);
}

Test(arena, footprint_large_blocks_and_reset)
{
    counting_t c = {0};
    sl_allocator_t a = {counting_alloc, counting_free, &c};
    sl_arena_t *arena = sl_arena_new(&a, 4096);
    cr_assert_eq(sl_arena_footprint(arena), 0);
    uint8_t *p1 = sl_arena_alloc(arena, 1);
    size_t f1 = sl_arena_footprint(arena);
    cr_assert(f1 >= 4096 && f1 < 4096 + 256, "one chunk: %zu", f1);
    size_t overhead = f1 - 4096;

    uint8_t *p2 = sl_arena_alloc(arena, 0);
    cr_assert_eq(p2, p1 + 64, "size 0 still gets its own 64-byte block");
    cr_assert_eq(sl_arena_footprint(arena), f1);

    /* A large block gets a chunk of its own; small blocks keep filling the
     * current chunk. */
    uint8_t *big = sl_arena_alloc(arena, 100000);
    cr_assert_not_null(big);
    cr_assert_eq((uintptr_t)big % 64, 0);
    cr_assert_eq(sl_arena_footprint(arena), f1 + overhead + 100032);
    uint8_t *p3 = sl_arena_alloc(arena, 10);
    cr_assert_eq(p3, p2 + 64);

    /* Fill the rest of the first chunk, then one more block opens a new one. */
    cr_assert_eq(sl_arena_alloc(arena, 4096 - 3 * 64), p3 + 64);
    uint8_t *p4 = sl_arena_alloc(arena, 64);
    cr_assert_eq(sl_arena_footprint(arena), 2 * f1 + overhead + 100032);
    cr_assert_eq(c.live, 4); /* arena + 3 chunks */

    uint8_t *z = sl_arena_calloc(arena, 10, 10);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(z[i], 0);
    cr_assert_null(sl_arena_calloc(arena, SIZE_MAX / 2, 4));
    cr_assert_null(sl_arena_alloc(arena, SIZE_MAX - 8));
    char *s = sl_arena_strdup(arena, "user_id");
    cr_assert_str_eq(s, "user_id");
    cr_assert_eq((uintptr_t)s % 64, 0);
    (void)p4;

    /* Reset keeps one standard chunk and hands out its start again. */
    sl_arena_reset(arena);
    cr_assert_eq(sl_arena_footprint(arena), f1);
    cr_assert_eq(c.live, 2);
    uint8_t *again = sl_arena_alloc(arena, 5);
    cr_assert(again == p1 || again == p4, "reset reuses a kept chunk");
    sl_arena_destroy(arena);
    cr_assert_eq(c.live, 0);

    /* An arena that only ever held a large block keeps nothing on reset. */
    arena = sl_arena_new(&a, 4096);
    cr_assert_not_null(sl_arena_alloc(arena, 10000));
    sl_arena_reset(arena);
    cr_assert_eq(sl_arena_footprint(arena), 0);
    cr_assert_not_null(sl_arena_alloc(arena, 1));
    sl_arena_destroy(arena);
    cr_assert_eq(c.live, 0);

    sl_arena_destroy(NULL);
    sl_arena_reset(NULL);
    cr_assert_eq(sl_arena_footprint(NULL), 0);
}

Test(arena, allocation_failure)
{
    counting_t c = {.fail_at = 1};
    sl_allocator_t a = {counting_alloc, counting_free, &c};
    cr_assert_null(sl_arena_new(&a, 0));
    c = (counting_t){.fail_at = 2};
    sl_arena_t *arena = sl_arena_new(&a, 0);
    cr_assert_not_null(arena);
    cr_assert_null(sl_arena_alloc(arena, 1));
    cr_assert_eq(sl_arena_footprint(arena), 0);
    cr_assert_not_null(sl_arena_alloc(arena, 1));
    sl_arena_destroy(arena);
    cr_assert_eq(c.live, 0);

    c = (counting_t){.fail_at = 1};
    cr_assert_null(sl_batch_new(&a));
    c = (counting_t){.fail_at = 2};
    cr_assert_null(sl_batch_new(&a));
    cr_assert_eq(c.live, 0);
}

/* ---- KJT --------------------------------------------------------------------------- */

Test(kjt, init)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    char name[] = "user_id";
    const char *keys[] = {name, "item_id"};
    sl_kjt_t k;
    cr_assert_eq(sl_kjt_init(&k, arena, 2, keys, 3, 5, true), SL_OK);
    cr_assert_eq(k.num_keys, 2);
    cr_assert_eq(k.stride, 3);
    cr_assert_eq(k.num_values, 5);
    cr_assert_neq(k.keys[0], name, "keys are copied");
    name[0] = 'X';
    cr_assert_str_eq(k.keys[0], "user_id");
    cr_assert_str_eq(k.keys[1], "item_id");
    ASSERT_INTS(k.lengths, 6, 0, 0, 0, 0, 0, 0);
    cr_assert_eq((uintptr_t)k.lengths % 64, 0);
    cr_assert_eq((uintptr_t)k.values % 64, 0);
    cr_assert_eq((uintptr_t)k.weights % 64, 0);
    cr_assert_eq(sl_kjt_bytes(&k), 6 * 4 + 5 * 8 + 5 * 4);

    cr_assert_eq(sl_kjt_init(&k, arena, 2, keys, 3, 5, false), SL_OK);
    cr_assert_null(k.weights);
    cr_assert_eq(sl_kjt_bytes(&k), 6 * 4 + 5 * 8);

    cr_assert_eq(sl_kjt_init(&k, arena, 0, NULL, 4, 0, false), SL_OK);
    cr_assert_eq(sl_kjt_validate(&k, NULL), SL_OK);

    const char *nul[] = {"a", NULL};
    cr_assert_eq(sl_kjt_init(&k, arena, 2, nul, 1, 0, false), SL_ERR_INVALID);
    cr_assert_eq(sl_kjt_init(&k, arena, 2, NULL, 1, 0, false), SL_ERR_INVALID);
    cr_assert_eq(sl_kjt_init(&k, arena, 1, keys, 1, UINT64_MAX / 4, false), SL_ERR_INVALID);
    sl_arena_destroy(arena);
}

/* The same KJT (and dense values) as sl_kjt_init (sl_dense_init), only
 * their lengths (values) left as the arena had them (here a pattern
 * written before a reset: the block is reused). */
Test(kjt, init_unset_leaves_lengths)
{
    sl_arena_t *arena = sl_arena_new(NULL, 4096);
    memset(sl_arena_alloc(arena, 1024), 0xab, 1024);
    sl_arena_reset(arena);
    const char *keys[] = {"user_id", "item_id"};
    sl_kjt_t k;
    cr_assert_eq(sl_kjt_init_unset(&k, arena, 2, keys, 3, 5, true), SL_OK);
    cr_assert_eq(k.num_keys, 2);
    cr_assert_eq(k.stride, 3);
    cr_assert_eq(k.num_values, 5);
    cr_assert_str_eq(k.keys[1], "item_id");
    cr_assert_not_null(k.weights);
    cr_assert_eq((uintptr_t)k.lengths % 64, 0);
    cr_assert_eq(sl_kjt_bytes(&k), 6 * 4 + 5 * 8 + 5 * 4);
    for (int i = 0; i < 6; i++)
        cr_assert_eq((uint32_t)k.lengths[i], 0xababababu, "length %d zeroed", i);
    const char *nul[] = {"a", NULL};
    cr_assert_eq(sl_kjt_init_unset(&k, arena, 2, nul, 1, 0, false), SL_ERR_INVALID);
    cr_assert_eq(sl_kjt_init_unset(&k, arena, 1, keys, 1, UINT64_MAX / 4, false), SL_ERR_INVALID);

    /* dense values likewise */
    sl_arena_reset(arena);
    memset(sl_arena_alloc(arena, 1024), 0xab, 1024);
    sl_arena_reset(arena);
    const char *cols[] = {"a", "b"};
    sl_dense_t d;
    cr_assert_eq(sl_dense_init_unset(&d, arena, 3, 2, cols), SL_OK);
    cr_assert_eq(d.rows, 3);
    cr_assert_eq(d.cols, 2);
    cr_assert_str_eq(d.names[1], "b");
    cr_assert_eq((uintptr_t)d.data % 64, 0);
    uint32_t bits[6];
    memcpy(bits, d.data, sizeof bits);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(bits[i], 0xababababu, "value %d zeroed", i);
    cr_assert_eq(sl_dense_init_unset(&d, arena, 1, 2, nul), SL_ERR_INVALID);
    sl_arena_destroy(arena);
}

Test(kjt, init_allocation_failure)
{
    const char *keys[] = {"a", "b", "c"};
    for (long n = 1;; n++) {
        counting_t c = {0};
        sl_allocator_t a = {counting_alloc, counting_free, &c};
        /* Tiny chunks: every buffer and key name is its own allocation. */
        sl_arena_t *arena = sl_arena_new(&a, 64);
        c.fail_at = c.calls + n;
        sl_kjt_t k;
        sl_err_t rc = sl_kjt_init(&k, arena, 3, keys, 50, 100, true);
        sl_arena_destroy(arena);
        cr_assert_eq(c.live, 0, "leak when allocation %ld fails", n);
        if (rc == SL_OK) {
            cr_assert_gt(n, 6, "all of lengths, values, weights and 3 names allocate");
            break;
        }
        cr_assert_eq(rc, SL_ERR_NOMEM, "allocation %ld", n);
    }
}

Test(kjt, validate_each_invariant)
{
    const char *keys[] = {"a", "b"};
    int32_t len[] = {1, 0, 2, 1, 1, 0};
    int64_t val[] = {1, 2, 3, 4, 5};
    sl_error_t err = {0};
    sl_kjt_t k = kjt_of(2, keys, 3, len, 5, val, NULL);
    cr_assert_eq(sl_kjt_validate(&k, &err), SL_OK);

    len[4] = -1;
    len[5] = 1;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID,
               "lengths non-negative: key 'b' row 1 has length -1");
    cr_assert_eq(sl_kjt_validate(&k, NULL), SL_ERR_INVALID);
    len[4] = 1;
    len[5] = 0;

    k.num_values = 4;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID,
               "sum(lengths) == len(values): 5 != 4");
    k.num_values = 5;

    const char *dup[] = {"a", "a"};
    k.keys = dup;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID,
               "keys unique: key 'a' appears at 0 and 1");
    const char *missing[] = {"a", NULL};
    k.keys = missing;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID, "key 1 has no name");
    k.keys = NULL;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID, "keys missing for 2 keys");
    k.keys = keys;

    k.lengths = NULL;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID, "lengths missing for 6 rows");
    k.lengths = len;
    k.values = NULL;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID, "values missing for 5 values");
    k.values = val;

    sl_kjt_t wide = kjt_of(1u << 16, keys, 1u << 16, len, 0, NULL, NULL);
    expect_err(sl_kjt_validate(&wide, &err), &err, SL_ERR_INVALID,
               "num_keys * stride (4294967296) exceeds 2^32");

    sl_kjt_t empty = kjt_of(0, NULL, 0, NULL, 0, NULL, NULL);
    cr_assert_eq(sl_kjt_validate(&empty, &err), SL_OK);
}

Test(kjt, validate_long_and_wide_lengths)
{
    /* The length scan works in blocks of 64 with 32-bit lane sums; lengths
     * of 2^26 would wrap those lanes, so a block holding them is summed in
     * 64 bits. Values are never read by validation, so a dummy suffices. */
    enum { ROWS = 200 };
    static int32_t len[2 * ROWS];
    int64_t dummy;
    const char *keys[] = {"a", "b"};
    uint64_t rng = tu_seed("kjt.validate_long_and_wide_lengths");
    uint64_t want = 0;
    for (int i = 0; i < 2 * ROWS; i++) {
        len[i] = i < 130 ? 1 << 26 : (int32_t)tu_below(&rng, 70000);
        want += (uint64_t)len[i];
    }
    sl_kjt_t k = kjt_of(2, keys, ROWS, len, want, &dummy, NULL);
    sl_error_t err = {0};
    cr_assert_eq(sl_kjt_validate(&k, &err), SL_OK, "%s", err.msg);
    k.num_values = want - 1;
    char msg[128];
    snprintf(msg, sizeof msg, "sum(lengths) == len(values): %llu != %llu", (unsigned long long)want,
             (unsigned long long)(want - 1));
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID, msg);

    /* A negative length in the middle of a block, and in the tail. */
    k.num_values = want;
    int32_t keep = len[300];
    len[300] = INT32_MIN;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID,
               "lengths non-negative: key 'b' row 100 has length -2147483648");
    len[300] = keep;
    len[2 * ROWS - 1] = -5;
    expect_err(sl_kjt_validate(&k, &err), &err, SL_ERR_INVALID,
               "lengths non-negative: key 'b' row 199 has length -5");
}

Test(kjt, offsets_views_equal)
{
    const char *keys[] = {"a", "b", "c"};
    int32_t len[] = {2, 0, 1, 0, 0, 0, 3, 1, 1};
    int64_t val[] = {10, 11, 12, 30, 31, 32, 33, 34};
    float w[] = {1, 2, 3, 4, 5, 6, 7, 8};
    sl_kjt_t k = kjt_of(3, keys, 3, len, 8, val, w);
    cr_assert_eq(sl_kjt_validate(&k, NULL), SL_OK);

    int64_t off[10];
    sl_kjt_offsets(&k, off);
    ASSERT_INTS(off, 10, 0, 2, 2, 3, 3, 3, 3, 6, 7, 8);
    uint64_t koff[4];
    sl_kjt_key_offsets(&k, koff);
    ASSERT_INTS(koff, 4, 0, 3, 3, 8);

    cr_assert_eq(sl_kjt_find_key(&k, "c"), 2);
    cr_assert_eq(sl_kjt_find_key(&k, "a"), 0);
    cr_assert_eq(sl_kjt_find_key(&k, "z"), -1);

    sl_jt_t a = sl_kjt_key_view(&k, koff, 0);
    cr_assert_eq(a.stride, 3);
    cr_assert_eq(a.num_values, 3);
    cr_assert_eq(a.lengths, len);
    cr_assert_eq(a.values, val);
    cr_assert_eq(a.weights, w);
    sl_jt_t b = sl_kjt_key_view(&k, koff, 1);
    cr_assert_eq(b.num_values, 0);
    cr_assert_eq(b.lengths, len + 3);
    sl_jt_t c = sl_kjt_key_view(&k, koff, 2);
    cr_assert_eq(c.num_values, 5);
    ASSERT_INTS(c.lengths, 3, 3, 1, 1);
    ASSERT_INTS(c.values, 5, 30, 31, 32, 33, 34);
    ASSERT_FLOATS(c.weights, 5, 4, 5, 6, 7, 8);
    k.weights = NULL;
    cr_assert_null(sl_kjt_key_view(&k, koff, 2).weights);
    k.weights = w;

    /* An empty KJT may have no buffers at all. */
    sl_kjt_t e = kjt_of(2, keys, 0, NULL, 0, NULL, NULL);
    uint64_t ekoff[3];
    sl_kjt_key_offsets(&e, ekoff);
    ASSERT_INTS(ekoff, 3, 0, 0, 0);
    sl_jt_t ev = sl_kjt_key_view(&e, ekoff, 1);
    cr_assert_null(ev.lengths);
    cr_assert_null(ev.values);
    cr_assert_eq(ev.num_values, 0);

    /* Equal means same keys, stride, lengths, values and weights. */
    int32_t len2[9];
    int64_t val2[8];
    float w2[8];
    memcpy(len2, len, sizeof len);
    memcpy(val2, val, sizeof val);
    memcpy(w2, w, sizeof w);
    const char *keys2[] = {"a", "b", "c"};
    sl_kjt_t m = kjt_of(3, keys2, 3, len2, 8, val2, w2);
    cr_assert(sl_kjt_equal(&k, &m));
    val2[7] = 99;
    cr_assert_not(sl_kjt_equal(&k, &m));
    val2[7] = 34;
    w2[0] = 1.5f;
    cr_assert_not(sl_kjt_equal(&k, &m));
    w2[0] = 1;
    m.weights = NULL;
    cr_assert_not(sl_kjt_equal(&k, &m));
    m.weights = w2;
    len2[0] = 1;
    len2[1] = 1;
    cr_assert_not(sl_kjt_equal(&k, &m));
    len2[0] = 2;
    len2[1] = 0;
    keys2[1] = "B";
    cr_assert_not(sl_kjt_equal(&k, &m));
    keys2[1] = "b";
    m.stride = 1;
    m.num_keys = 9;
    cr_assert_not(sl_kjt_equal(&k, &m));
    m.stride = 3;
    m.num_keys = 3;
    cr_assert(sl_kjt_equal(&k, &m));
}

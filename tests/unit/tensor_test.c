/* Tensors (src/tensor/kjt.c, ikjt.c, batch.c) and the common layer under
 * them (src/common: errors, allocator, arena): every invariant the
 * validators check gives its exact code and a message naming it; offsets,
 * views and expansions match hand-computed arrays; arena blocks are 64-byte
 * aligned; allocation failure anywhere returns SL_ERR_NOMEM without leaking. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/tensor.h"
#include "testutil.h"

/* ---- a counting allocator that can fail its n-th call -------------------------- */

typedef struct counting {
    long live;    /* allocations not yet freed */
    long calls;   /* allocations attempted */
    long fail_at; /* the call that fails (1-based); 0: none */
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

/* ---- helpers ---------------------------------------------------------------------- */

/* A KJT over caller arrays (not copied). */
static sl_kjt_t kjt_of(uint32_t num_keys, const char **keys, uint32_t stride, int32_t *lengths,
                       uint64_t num_values, int64_t *values, float *weights)
{
    sl_kjt_t k = {num_keys, stride, num_values, keys, lengths, values, weights};
    return k;
}

#define ASSERT_INTS(got, n, ...)                                                                   \
    do {                                                                                           \
        const int64_t want_[] = {__VA_ARGS__};                                                     \
        cr_assert_eq((size_t)(n), sizeof want_ / sizeof want_[0], "count %zu", (size_t)(n));       \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                             \
            cr_assert_eq((int64_t)(got)[i_], want_[i_], "[%zu]: %lld != %lld", i_,                 \
                         (long long)(got)[i_], (long long)want_[i_]);                              \
    } while (0)

#define ASSERT_FLOATS(got, n, ...)                                                                 \
    do {                                                                                           \
        const float want_[] = {__VA_ARGS__};                                                       \
        cr_assert_eq((size_t)(n), sizeof want_ / sizeof want_[0]);                                 \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                             \
            cr_assert_eq((got)[i_], want_[i_], "[%zu]: %g != %g", i_, (double)(got)[i_],           \
                         (double)want_[i_]);                                                       \
    } while (0)

static void expect_err(sl_err_t rc, const sl_error_t *err, sl_err_t code, const char *msg)
{
    cr_assert_eq(rc, code, "got %s (%s)", sl_err_str(rc), err->msg);
    cr_assert_eq(err->code, code);
    cr_assert_str_eq(err->msg, msg);
}

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

/* What dedup_test.c and dedup_property_test.c share: batches built from
 * literal rows and the checks of a dedup result against them. */
#ifndef SLUICE_TESTS_DEDUP_UTIL_H
#define SLUICE_TESTS_DEDUP_UTIL_H

/* Every helper here: a test file uses only some. */
#define DT_FN static __attribute__((unused))

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup/dedup.h"
#include "testutil.h"

/* ---- helpers ---- */

/* A KJT over keys[F] and B rows from key-major lengths and the values (and
 * weights, or NULL) they describe; buffers from arena. */
DT_FN sl_kjt_t make_kjt(sl_arena_t *arena, uint32_t F, const char *const *keys, uint32_t B,
                        const int32_t *lengths, const int64_t *values, const float *weights)
{
    uint64_t total = 0;
    for (size_t i = 0; i < (size_t)F * B; i++)
        total += (uint64_t)lengths[i];
    sl_kjt_t kjt;
    cr_assert_eq(sl_kjt_init(&kjt, arena, F, keys, B, total, weights != NULL), SL_OK);
    if ((size_t)F * B > 0) memcpy(kjt.lengths, lengths, (size_t)F * B * sizeof(int32_t));
    if (total > 0 && values != NULL) {
        memcpy(kjt.values, values, total * sizeof(int64_t));
        if (weights != NULL) memcpy(kjt.weights, weights, total * sizeof(float));
    }
    return kjt;
}

DT_FN void assert_ints(const int32_t *got, const int32_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s[%zu]: got %d, want %d", what, i, got[i], want[i]);
}

DT_FN void assert_ids(const int64_t *got, const int64_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "values[%zu]: got %lld, want %lld", i, (long long)got[i],
                     (long long)want[i]);
}

/* Deduplicate every key of kjt as one group "g" with a fresh deduplicator. */
DT_FN sl_ikjt_t dedup_all(sl_arena_t *arena, const sl_kjt_t *kjt, sl_dedup_stats_t *stats)
{
    uint32_t idx[16];
    cr_assert(kjt->num_keys <= 16);
    for (uint32_t k = 0; k < kjt->num_keys; k++)
        idx[k] = k;
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    cr_assert_not_null(d);
    sl_ikjt_t out;
    sl_error_t err = {0};
    sl_err_t rc = sl_dedup_group(d, kjt, idx, kjt->num_keys, "g", arena, &out, stats, &err);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    cr_assert_eq(sl_ikjt_validate(&out, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(out.name, "g");
    sl_dedup_destroy(d);
    return out;
}

/* Expected IKJT given by hand: U, inverse[B], unique lengths (key-major) and
 * unique values. */
DT_FN void assert_ikjt(const sl_ikjt_t *got, uint32_t B, uint32_t U, const int32_t *inverse,
                       const int32_t *lengths, const int64_t *values, uint64_t num_values)
{
    cr_assert_eq(got->batch_size, B);
    cr_assert_eq(got->unique.stride, U, "U: got %u, want %u", got->unique.stride, U);
    assert_ints(got->inverse, inverse, B, "inverse");
    assert_ints(got->unique.lengths, lengths, (size_t)got->unique.num_keys * U, "lengths");
    cr_assert_eq(got->unique.num_values, num_values);
    assert_ids(got->unique.values, values, num_values);
}

DT_FN const char *const KEYS2[] = {"a", "b"};

/* Field by field: memcmp would see the padding. */
DT_FN void assert_stats_eq(const sl_dedup_stats_t *a, const sl_dedup_stats_t *b)
{
    cr_assert_eq(a->batch_size, b->batch_size);
    cr_assert_eq(a->unique_rows, b->unique_rows);
    cr_assert_eq(a->factor, b->factor);
    cr_assert_eq(a->bytes_before, b->bytes_before);
    cr_assert_eq(a->bytes_after, b->bytes_after);
    cr_assert_eq(a->adjacent_hits, b->adjacent_hits);
}

/* A hash under which every row collides with every other. */
DT_FN uint64_t const_hash(const void *data, size_t len, uint64_t seed)
{
    (void)data;
    (void)len;
    (void)seed;
    return 42;
}

#endif

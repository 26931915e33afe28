/* The deterministic order's reorder buffer (src/trainer/reorder.c): batches
 * put in any order within the buffer come out in g order, rank r of R
 * taking r, r + R, ...; another rank's, a repeated, a handed-out or a
 * too-far batch is refused by name. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer/reorder.h"

static tr_reorder_t *make(uint32_t rank, uint32_t ranks, uint32_t cap)
{
    tr_reorder_t *q = NULL;
    sl_error_t err = {0};
    cr_assert_eq(tr_reorder_new(rank, ranks, cap, NULL, &q, &err), SL_OK, "%s", err.msg);
    return q;
}

static uint64_t items[64]; /* item of g: &items[g] */

static void put_ok(tr_reorder_t *q, uint64_t g)
{
    sl_error_t err = {0};
    cr_assert_eq(tr_reorder_put(q, g, &items[g], &err), SL_OK, "g %" PRIu64 ": %s", g, err.msg);
}

Test(trainer_reorder, hands_out_in_g_order_and_refuses_by_name)
{
    tr_reorder_t *q = make(1, 3, 3); /* g 1, 4, 7, 10, ... */
    sl_error_t err = {0};
    cr_assert_eq(tr_reorder_next(q), 1);
    put_ok(q, 7);
    put_ok(q, 4);
    cr_assert_null(tr_reorder_take(q), "g 1 has not arrived");
    cr_assert_eq(tr_reorder_held(q), 2);
    cr_assert_eq(tr_reorder_put(q, 10, &items[10], &err), SL_ERR_TOO_LARGE);
    cr_assert_str_eq(err.msg,
                     "reorder buffer: batch g 10 is 3 batches past next 1, the buffer holds 3");
    cr_assert_eq(tr_reorder_put(q, 5, &items[5], &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "reorder buffer: batch g 5 is rank 2's of 3, not 1's");
    cr_assert_eq(tr_reorder_put(q, 4, &items[4], &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "reorder buffer: batch g 4 twice");
    put_ok(q, 1);
    cr_assert_eq(tr_reorder_take(q), &items[1]);
    cr_assert_eq(tr_reorder_take(q), &items[4]);
    cr_assert_eq(tr_reorder_next(q), 7);
    put_ok(q, 13); /* the ring wrapped: 7 10 13 */
    cr_assert_eq(tr_reorder_take(q), &items[7]);
    cr_assert_null(tr_reorder_take(q));
    cr_assert_eq(tr_reorder_put(q, 4, &items[4], &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "reorder buffer: batch g 4 was handed out already (next is 10)");
    cr_assert_eq(tr_reorder_start(q, 10, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "reorder buffer: a new sequence from g 10 while 1 batches are held");
    put_ok(q, 10);
    cr_assert_eq(tr_reorder_take(q), &items[10]);
    cr_assert_eq(tr_reorder_take(q), &items[13]);
    cr_assert_eq(tr_reorder_held(q), 0);

    /* a new epoch, or the rest of one after a resume */
    cr_assert_eq(tr_reorder_start(q, 3, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "reorder buffer: g 3 is rank 0's of 3, not 1's");
    cr_assert_eq(tr_reorder_start(q, 22, &err), SL_OK, "%s", err.msg);
    put_ok(q, 25);
    put_ok(q, 22);
    cr_assert_eq(tr_reorder_take(q), &items[22]);
    cr_assert_eq(tr_reorder_take(q), &items[25]);
    cr_assert_eq(tr_reorder_put(q, 28, NULL, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "reorder buffer: batch g 28 is NULL");
    tr_reorder_destroy(q);
    tr_reorder_destroy(NULL);

    cr_assert_eq(tr_reorder_new(2, 2, 4, NULL, &q, &err), SL_ERR_INVALID);
    cr_assert_null(q);
    cr_assert_str_eq(err.msg, "reorder buffer: rank 2 of 2 ranks, 4 batches (rank < ranks, "
                              "batches > 0)");
    cr_assert_eq(tr_reorder_new(0, 1, 0, NULL, &q, &err), SL_ERR_INVALID);
}

/* Every rank of R, its batches arriving in a random order within its
 * buffer, hands out exactly its share of 0..T-1 in g order; merged by g the
 * ranks' sequences are 0..T-1. Seed printed (SLUICE_TEST_SEED repeats it). */
Test(trainer_reorder, random_arrivals_within_the_buffer_come_out_in_order)
{
    const char *s = getenv("SLUICE_TEST_SEED");
    uint64_t seed = s != NULL ? strtoull(s, NULL, 10) : 2811;
    fprintf(stderr, "trainer_reorder random: seed %" PRIu64 "\n", seed);
    enum { T = 61, CAP = 4 };
    uint64_t x = seed;
    for (uint32_t R = 1; R <= 4; R++) {
        uint64_t merged[T], n_merged = 0;
        for (uint64_t i = 0; i < T; i++)
            merged[i] = UINT64_MAX;
        for (uint32_t r = 0; r < R; r++) {
            tr_reorder_t *q = make(r, R, CAP);
            bool put[T] = {false};
            uint64_t want = r;
            while (want < T) {
                /* put one random g not yet put of the buffer's CAP next ones */
                uint64_t choices[CAP], nc = 0;
                for (uint64_t k = 0, g = tr_reorder_next(q); k < CAP && g < T; k++, g += R)
                    if (!put[g]) choices[nc++] = g;
                if (nc > 0) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    uint64_t g = choices[(x >> 33) % nc];
                    put[g] = true;
                    put_ok(q, g);
                }
                for (uint64_t *it; (it = tr_reorder_take(q)) != NULL; want += R) {
                    cr_assert_eq(it, &items[want], "rank %u of %u: g %td, not %" PRIu64, r, R,
                                 it - items, want);
                    merged[want] = want;
                    n_merged++;
                }
            }
            cr_assert_eq(tr_reorder_held(q), 0);
            tr_reorder_destroy(q);
        }
        cr_assert_eq(n_merged, T, "R %u", R);
        for (uint64_t i = 0; i < T; i++)
            cr_assert_eq(merged[i], i, "R %u", R);
    }
}

/* The deterministic order's arithmetic (src/dpp/master/state/order.c): counted
 * prefix, bases, the lease window, locating a batch, gap bases. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "dpp/master/state/order.h"

static sl_master_order_t *make(uint32_t n, uint32_t window)
{
    sl_master_order_t *o = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_order_new(n, window, NULL, &o, &err), SL_OK, "%s", err.msg);
    return o;
}

static void count_ok(sl_master_order_t *o, uint32_t p, uint64_t batches)
{
    sl_error_t err = {0};
    char why[256] = "";
    cr_assert_eq(sl_master_order_count(o, p, batches, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_master_order_valid(o, why, sizeof why), "%s", why);
}

Test(master_order, counts_out_of_order_make_the_prefix_and_bases)
{
    sl_master_order_t *o = make(5, 2);
    uint64_t b = 99;
    cr_assert_eq(sl_master_order_prefix(o), 0);
    cr_assert(sl_master_order_base(o, 0, &b));
    cr_assert_eq(b, 0);
    cr_assert_not(sl_master_order_base(o, 1, &b));
    cr_assert(sl_master_order_may_lease(o, 0));
    cr_assert(sl_master_order_may_lease(o, 1));
    cr_assert_not(sl_master_order_may_lease(o, 2));

    count_ok(o, 1, 4); /* after its predecessor: no base yet */
    cr_assert_eq(sl_master_order_prefix(o), 0);
    cr_assert_not(sl_master_order_base(o, 1, &b));
    cr_assert_not(sl_master_order_may_lease(o, 2));

    count_ok(o, 0, 3); /* both known now */
    cr_assert_eq(sl_master_order_prefix(o), 2);
    cr_assert(sl_master_order_base(o, 1, &b));
    cr_assert_eq(b, 3);
    cr_assert(sl_master_order_base(o, 2, &b));
    cr_assert_eq(b, 7);
    cr_assert(sl_master_order_may_lease(o, 3));
    cr_assert_not(sl_master_order_may_lease(o, 4));

    count_ok(o, 2, 0); /* every row filtered out: no batch */
    count_ok(o, 4, 2);
    cr_assert_eq(sl_master_order_prefix(o), 3);
    cr_assert(sl_master_order_may_lease(o, 4));
    cr_assert_not(sl_master_order_may_lease(o, 5)); /* past the splits */
    count_ok(o, 3, 5);
    cr_assert_eq(sl_master_order_prefix(o), 5);
    uint64_t want[] = {0, 3, 7, 7, 12, 14};
    for (uint32_t p = 0; p <= 5; p++) {
        cr_assert(sl_master_order_base(o, p, &b));
        cr_assert_eq(b, want[p], "base[%u] %" PRIu64, p, b);
    }

    /* a new epoch forgets them */
    sl_master_order_reset(o);
    cr_assert_eq(sl_master_order_prefix(o), 0);
    cr_assert_not(sl_master_order_base(o, 1, &b));
    count_ok(o, 0, 1);
    cr_assert(sl_master_order_base(o, 1, &b));
    cr_assert_eq(b, 1);
    sl_master_order_destroy(o);
    sl_master_order_destroy(NULL);
}

Test(master_order, a_split_counted_again_must_agree)
{
    sl_master_order_t *o = make(2, 1);
    sl_error_t err = {0};
    count_ok(o, 0, 6);
    count_ok(o, 0, 6); /* a repeated SPLIT_READ, a replayed record */
    cr_assert_eq(sl_master_order_count(o, 0, 7, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: split at position 0 counted 6 batches, "
                              "now 7: its batches were cut differently");
    cr_assert_eq(sl_master_order_count(o, 2, 1, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: split at position 2 of 2 splits");
    cr_assert_eq(sl_master_order_count(o, 1, (uint64_t)INT64_MAX, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: split at position 1: 9223372036854775807 "
                              "batches pass 2^63 in the epoch");
    uint64_t b = 0;
    cr_assert_eq(sl_master_order_prefix(o), 1);
    cr_assert(sl_master_order_base(o, 1, &b));
    cr_assert_eq(b, 6);
    sl_master_order_destroy(o);

    cr_assert_eq(sl_master_order_new(0, 1, NULL, &o, &err), SL_ERR_INVALID);
    cr_assert_null(o);
    cr_assert_str_eq(err.msg, "deterministic order: 0 splits, window of 1 (both must be > 0)");
    cr_assert_eq(sl_master_order_new(3, 0, NULL, &o, &err), SL_ERR_INVALID);
    cr_assert_null(o);
}

/* Every g of the counted prefix is found in its split, at its place;
 * splits of no batch hold none; g past the prefix is not found. Counts
 * from a seeded generator (seed printed, SLUICE_TEST_SEED to repeat). */
Test(master_order, locate_finds_every_batch_of_the_prefix)
{
    const char *s = getenv("SLUICE_TEST_SEED");
    uint64_t seed = s != NULL ? strtoull(s, NULL, 10) : 28;
    fprintf(stderr, "master_order locate: seed %" PRIu64 "\n", seed);
    enum { N = 200 };
    uint64_t counts[N], x = seed;
    sl_master_order_t *o = make(N, 8);
    for (uint32_t p = 0; p < N; p++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        counts[p] = (x >> 33) % 5; /* 0..4, zeros included */
    }
    for (uint32_t p = 0; p < N - 10; p++)
        count_ok(o, p, counts[p]);
    cr_assert_eq(sl_master_order_prefix(o), N - 10);
    uint64_t g = 0;
    for (uint32_t p = 0; p < N - 10; p++)
        for (uint64_t k = 0; k < counts[p]; k++, g++) {
            uint32_t at = UINT32_MAX;
            uint64_t kk = UINT64_MAX;
            cr_assert(sl_master_order_locate(o, g, &at, &kk), "g %" PRIu64, g);
            cr_assert_eq(at, p, "g %" PRIu64 ": position %u, not %u", g, at, p);
            cr_assert_eq(kk, k);
        }
    uint32_t at;
    uint64_t kk;
    cr_assert_not(sl_master_order_locate(o, g, &at, &kk));
    sl_master_order_destroy(o);
}

Test(master_order, ranks_deal_g_mod_r)
{
    cr_assert_eq(sl_master_order_rank(0, 3), 0);
    cr_assert_eq(sl_master_order_rank(7, 3), 1);
    cr_assert_eq(sl_master_order_rank(8, 1), 0);
    cr_assert_eq(sl_master_order_rank(9, 2), 1);
}

/* A split of rows [100, 200) at base 40 whose batches were rows [100,
 * 110) g 40, [110, 125) g 41, [125, 140) g 42, [140, 160) g 43, [160, 200)
 * g 44; the lease died with g 41 and 43 committed. */
Test(master_order, a_gap_after_a_killed_lease_keeps_its_gs)
{
    const sl_master_order_batch_t c[] = {{110, 125, 41}, {140, 160, 43}};
    sl_error_t err = {0};
    uint64_t b = 0;
    uint64_t lim = 0;
    cr_assert_eq(sl_master_order_gap_base(40, 100, c, 2, NULL, 0, 100, &b, &lim, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(b, 40);
    cr_assert_eq(lim, 41, "one batch, [100, 110)");
    cr_assert_eq(sl_master_order_gap_base(40, 100, c, 2, NULL, 0, 125, &b, &lim, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(b, 42);
    cr_assert_eq(lim, 43);
    cr_assert_eq(sl_master_order_gap_base(40, 100, c, 2, NULL, 0, 160, &b, &lim, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(b, 44);
    cr_assert_eq(lim, UINT64_MAX, "the tail: its count fixes the split's");
    cr_assert_eq(sl_master_order_gap_base(40, 100, NULL, 0, NULL, 0, 100, &b, NULL, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(b, 40);

    cr_assert_eq(sl_master_order_gap_base(40, 100, c, 2, NULL, 0, 130, &b, NULL, &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: row 130 is neither the split's first row "
                              "(100) nor a committed batch's end: batching from it would cut "
                              "new batches");
    cr_assert_eq(sl_master_order_gap_base(40, 100, c, 2, NULL, 0, 150, &b, NULL, &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: row 150 lies inside the committed batch of "
                              "rows [140, 160)");
    cr_assert_eq(sl_master_order_gap_base(40, 100, c, 2, NULL, 0, 140, &b, NULL, &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: row 140 starts a committed batch, not a gap");
    const sl_master_order_batch_t overlap[] = {{110, 125, 41}, {120, 160, 43}};
    cr_assert_eq(sl_master_order_gap_base(40, 100, overlap, 2, NULL, 0, 160, &b, NULL, &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: committed batch 1 of rows [120, 160) "
                              "overlaps the one before or lies before the split's row 125");
    const sl_master_order_batch_t falling[] = {{110, 125, 41}, {140, 160, 41}};
    cr_assert_eq(sl_master_order_gap_base(40, 100, falling, 2, NULL, 0, 160, &b, NULL, &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: committed batch 1 of rows [140, 160) has g "
                              "41, below 42");
}

/* A resumed job's split: rows handed out before the resume belong to no
 * batch of it (skip). A gap right after them is judged from where they
 * start: after a committed batch, the g after it; after another gap of the
 * lease, it continues that gap's numbering (UINT64_MAX). Split [0, 100) at
 * base 10, rows [20, 30) and [30, 35) handed out before the resume. */
Test(master_order, a_gap_after_rows_of_no_batch)
{
    const sl_dpp_row_range_t skip[] = {{20, 30}, {30, 35}};
    const sl_master_order_batch_t c[] = {{10, 20, 11}, {50, 60, 14}};
    sl_error_t err = {0};
    uint64_t b = 0, lim = 0;
    cr_assert_eq(sl_master_order_gap_base(10, 0, c, 2, skip, 2, 35, &b, &lim, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(b, 12, "after the batch ending at row 20");
    cr_assert_eq(lim, 14);
    cr_assert_eq(sl_master_order_gap_base(10, 0, c, 2, skip, 2, 0, &b, &lim, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(b, 10);
    cr_assert_eq(lim, 11);
    /* nothing committed before the skipped rows: row 19 is in a gap read
     * before, whose numbering this one continues */
    const sl_master_order_batch_t later[] = {{50, 60, 14}};
    cr_assert_eq(sl_master_order_gap_base(10, 0, later, 1, skip, 2, 35, &b, &lim, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(b, UINT64_MAX);
    cr_assert_eq(lim, 14);
    /* skipped rows from the split's first row: its base */
    const sl_dpp_row_range_t head[] = {{0, 5}};
    cr_assert_eq(sl_master_order_gap_base(10, 0, later, 1, head, 1, 5, &b, &lim, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(b, 10);
    /* no skip to pass: mid-gap rows are still refused */
    cr_assert_eq(sl_master_order_gap_base(10, 0, later, 1, skip, 2, 40, &b, &lim, &err),
                 SL_ERR_INVALID);
    const sl_dpp_row_range_t bad[] = {{20, 30}, {25, 35}};
    cr_assert_eq(sl_master_order_gap_base(10, 0, c, 2, bad, 2, 35, &b, &lim, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "deterministic order: rows of no batch 1, [25, 35), empty, out of "
                              "order or overlapping");
}

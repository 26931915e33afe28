/* sl_master_state_pending_window (src/dpp/master/state/state_window.c): the
 * splits lease_next would hand out next, in that order, read-only, across
 * shuffled epochs, splits leased out of order, and splits that became
 * pending again behind the cursor (an expiry). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "testutil.h"

#define N 12

static tu_alloc_t g_ta;
static sl_wh_split_t g_splits[N];

static void init(void)
{
    tu_alloc_init(&g_ta);
    for (uint32_t i = 0; i < N; i++)
        g_splits[i] = (sl_wh_split_t){.path = "part-0.slc",
                                      .partition = "",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = 100 * i,
                                      .num_rows = 100};
}

TestSuite(master_window, .init = init);

static sl_master_state_t *master_with_job(bool shuffle)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 100, .allocator = &g_ta.base};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {.job_id = "j",
                                       .splits = g_splits,
                                       .num_splits = N,
                                       .epochs = 2,
                                       .seed = 7,
                                       .shuffle = shuffle};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    return m;
}

/* The window equals what lease_next hands out, one by one, and looking
 * changes nothing. */
Test(master_window, the_window_is_what_lease_next_hands_out)
{
    sl_master_state_t *m = master_with_job(true);
    sl_error_t err = {0};
    uint32_t order[N], win[N];
    cr_assert_eq(sl_master_state_epoch_order(m, "j", 0, order, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, N), N);
    cr_assert_arr_eq(win, order, sizeof order);
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, 3), 3);
    cr_assert_arr_eq(win, order, 3 * sizeof *win);
    /* the third split out of order: the window skips it, lease_next too */
    sl_master_lease_t l;
    cr_assert_eq(sl_master_state_lease_split(m, "j", order[2], "w", 0, &l, &err), SL_OK);
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, N), N - 1);
    cr_assert_eq(win[0], order[0]);
    cr_assert_eq(win[1], order[1]);
    cr_assert_eq(win[2], order[3]);
    cr_assert_eq(win[N - 2], order[N - 1]);
    for (uint32_t k = 0; k < N - 1; k++) {
        cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(l.split, win[k], "lease %u: split %u, the window said %u", k, l.split, win[k]);
    }
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, N), 0);
    sl_master_state_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* Splits that expire go back behind the cursor: they come first, lowest
 * position first, as lease_next takes them. */
Test(master_window, expired_splits_come_first_in_epoch_order)
{
    sl_master_state_t *m = master_with_job(false);
    sl_error_t err = {0};
    sl_master_lease_t l[4];
    for (int k = 0; k < 4; k++)
        cr_assert_eq(sl_master_state_lease_next(m, "j", k % 2 ? "w1" : "w2", 0, &l[k], &err),
                     SL_OK);
    /* w2's leases (splits 0 and 2) live on; w1's (1 and 3) expire */
    sl_master_lease_ref_t held[2] = {{"j", 0, 0, l[0].generation}, {"j", 0, 2, l[2].generation}};
    cr_assert_eq(sl_master_state_renew(m, "w2", held, 2, 90, NULL, &err), SL_OK);
    uint32_t expired;
    cr_assert_eq(sl_master_state_expire(m, 150, &expired, &err), SL_OK);
    cr_assert_eq(expired, 2);
    uint32_t win[N];
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, 4), 4);
    uint32_t want[4] = {1, 3, 4, 5};
    cr_assert_arr_eq(win, want, sizeof want);
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, 1), 1);
    cr_assert_eq(win[0], 1);
    sl_master_lease_t a;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w3", 150, &a, &err), SL_OK);
    cr_assert_eq(a.split, 1);
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, 2), 2);
    cr_assert_eq(win[0], 3);
    cr_assert_eq(win[1], 4);
    /* an unknown job, a zero cap */
    cr_assert_eq(sl_master_state_pending_window(m, "nope", win, 2), 0);
    cr_assert_eq(sl_master_state_pending_window(m, "j", win, 0), 0);
    sl_master_state_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

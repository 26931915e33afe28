/* sl_master_state_lease_split, which a shared pass uses to lease split s of
 * every job of a plan fingerprint to one worker: a split leased out of its
 * job's epoch order keeps the pending queue right (lease_next skips it,
 * finds it again once it expires, and never hands out a split twice), each
 * lease is the job's own (generation, todo), refusals name what is wrong,
 * and the grants survive a reopen from the journal. On the counting
 * allocator: nothing leaks. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "testutil.h"

#define N 8

static tu_alloc_t g_ta;
static sl_wh_split_t g_splits[N];

static void init(void)
{
    tu_alloc_init(&g_ta);
    uint64_t first = 0;
    for (uint32_t i = 0; i < N; i++) {
        g_splits[i] = (sl_wh_split_t){.path = "part-0.slc",
                                      .partition = "",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = first,
                                      .num_rows = 100};
        first += 100;
    }
}

TestSuite(master_share, .init = init);

static sl_master_state_t *open_master(const char *dir)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 1000, .allocator = &g_ta.base};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

static void add(sl_master_state_t *m, const char *id)
{
    sl_master_state_job_spec_t s = {.job_id = id,
                                    .splits = g_splits,
                                    .num_splits = N,
                                    .epochs = 2,
                                    .seed = 5,
                                    .shuffle = true,
                                    .plan_fingerprint = 42,
                                    .share = true};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_add(m, &s, &err), SL_OK, "%s", err.msg);
}

Test(master_share, a_split_leased_out_of_order_keeps_the_queue_right)
{
    sl_master_state_t *m = open_master(NULL);
    add(m, "a");
    add(m, "b");
    uint32_t order[N];
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_epoch_order(m, "b", 0, order, &err), SL_OK, "%s", err.msg);

    /* a's next split, and the same split of b, to one worker */
    sl_master_lease_t la, lb;
    cr_assert_eq(sl_master_state_lease_next(m, "a", "w", 10, &la, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(la.split, order[0]); /* one plan: one order */
    cr_assert_eq(sl_master_state_lease_split(m, "b", la.split, "w", 10, &lb, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(lb.split, la.split);
    cr_assert_eq(lb.epoch, 0);
    cr_assert_neq(lb.generation, la.generation);
    cr_assert_eq(lb.num_todo, 1);
    cr_assert_eq(lb.todo[0].from_row, 0);
    cr_assert_eq(lb.todo[0].to_row, 100);
    /* it is b's lease now: not pending twice */
    cr_assert_eq(sl_master_state_lease_split(m, "b", la.split, "w2", 10, &lb, &err), SL_ERR_AGAIN);
    cr_assert(strstr(err.msg, "not pending") != NULL, "%s", err.msg);
    cr_assert_eq(sl_master_state_lease_split(m, "b", N, "w", 10, &lb, &err), SL_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "no split 8") != NULL, "%s", err.msg);
    cr_assert_eq(sl_master_state_lease_split(m, "zz", 0, "w", 10, &lb, &err), SL_ERR_NOT_FOUND);
    cr_assert(sl_master_state_lease_live(m, "b", 0, la.split, lb.generation, "w"));

    /* b's split 3rd in its order, out of order: lease_next hands out the
     * others in order and never it */
    sl_master_lease_t x;
    cr_assert_eq(sl_master_state_lease_split(m, "b", order[3], "w", 10, &x, &err), SL_OK, "%s",
                 err.msg);
    uint32_t got[N], n = 0;
    while (sl_master_state_lease_next(m, "b", "w2", 10, &x, &err) == SL_OK)
        got[n++] = x.split;
    cr_assert_eq(n, N - 2);
    uint32_t want[N - 2] = {order[1], order[2], order[4], order[5], order[6], order[7]};
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "lease %u: split %u, want %u", i, got[i], want[i]);

    /* everything expires: every split of b pending again, handed out once
     * each, in epoch order */
    uint32_t expired = 0;
    cr_assert_eq(sl_master_state_expire(m, 5000, &expired, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(expired, N + 1); /* b's eight and a's one */
    n = 0;
    while (sl_master_state_lease_next(m, "b", "w3", 5000, &x, &err) == SL_OK)
        got[n++] = x.split;
    cr_assert_eq(n, N);
    for (uint32_t i = 0; i < N; i++)
        cr_assert_eq(got[i], order[i], "after expiry, lease %u: split %u, want %u", i, got[i],
                     order[i]);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "b", &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.plan_fingerprint, 42);
    cr_assert(st.share);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_share, out_of_order_grants_survive_a_reopen)
{
    char *dir = tu_mkdtemp("master-share");
    sl_master_state_t *m = open_master(dir);
    add(m, "a");
    add(m, "b");
    sl_error_t err = {0};
    sl_master_lease_t x;
    cr_assert_eq(sl_master_state_lease_split(m, "b", 6, "w", 10, &x, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_lease_split(m, "a", 6, "w", 10, &x, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *before = NULL, *after = NULL;
    size_t lb = 0, la = 0;
    cr_assert_eq(sl_master_state_dump(m, &before, &lb, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);
    m = open_master(dir);
    cr_assert_eq(sl_master_state_dump(m, &after, &la, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(after, before);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "a", &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.plan_fingerprint, 42);
    cr_assert(st.share);
    cr_assert_eq(st.leased, 1);
    /* split 6 is not handed out again while its lease lives */
    uint32_t n = 0;
    while (sl_master_state_lease_next(m, "a", "w2", 10, &x, &err) == SL_OK) {
        cr_assert_neq(x.split, 6);
        n++;
    }
    cr_assert_eq(n, N - 1);
    sl_free(&g_ta.base, before, lb + 1);
    sl_free(&g_ta.base, after, la + 1);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
    tu_rm_tree(dir);
    free(dir);
}

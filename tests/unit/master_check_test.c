/* The invariant check of the master's state machine
 * (sl_master_state_check, state_check.c): a state the live calls made
 * passes it, and each invariant broken by hand, one at a time, is found
 * and named. The test reaches into the state's internals (state_internal.h)
 * only to break them. */
#include <criterion/criterion.h>
#include <string.h>

#include "dpp/master/state/state_internal.h"
#include "testutil.h"

#define N 3

static sl_wh_split_t g_splits[N];

/* Job "j" of N splits of 100 rows, split 0 leased to w1 with rows [0, 40)
 * committed, split 1 done, split 2 pending. */
static sl_master_state_t *made(void)
{
    for (uint32_t i = 0; i < N; i++)
        g_splits[i] = (sl_wh_split_t){.path = "ds=1/part-0.slc",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = 100 * i,
                                      .num_rows = 100};
    sl_master_state_opts_t o = {.lease_timeout_ms = 1000};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 2};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    sl_master_lease_t a, b;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 0, &a, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w2", 0, &b, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(a.split, 0);
    cr_assert_eq(b.split, 1);
    cr_assert_eq(sl_master_state_commit(m, "j", 0, 0, a.generation, 0, 40, "c", 1, &err),
                 SL_MASTER_COMMITTED, "%s", err.msg);
    cr_assert_eq(sl_master_state_commit(m, "j", 0, 1, b.generation, 0, 100, "c", 2, &err),
                 SL_MASTER_COMMITTED, "%s", err.msg);
    cr_assert_eq(sl_master_state_check(m, &err), SL_OK, "%s", err.msg);
    return m;
}

static void assert_broken(const sl_master_state_t *m, const char *says)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_check(m, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, says) != NULL, "'%s' does not say '%s'", err.msg, says);
}

Test(master_check, a_live_state_passes_and_each_broken_invariant_is_named)
{
    sl_master_state_t *m = made();
    job *jb = m->jobs[0];
    sl_error_t err = {0};

    jb->st[0].committed++;
    assert_broken(m, "job j split 0: committed 41, its ranges hold 40");
    jb->st[0].committed--;

    jb->st[0].r[0].to_row = 101;
    assert_broken(m, "job j split 0: range 0 [0,101) empty or outside [0,100)");
    jb->st[0].r[0].to_row = 40;

    jb->count[SL_MASTER_SPLIT_PENDING]++;
    assert_broken(m, "job j: 1 splits in state 0, counted 2");
    jb->count[SL_MASTER_SPLIT_PENDING]--;

    jb->committed_rows++;
    assert_broken(m, "job j: 140 rows committed, counted 141");
    jb->committed_rows--;

    /* a done split that is not full; a full split that is not done */
    jb->st[1].state = SL_MASTER_SPLIT_PENDING;
    jb->count[SL_MASTER_SPLIT_PENDING]++;
    jb->count[SL_MASTER_SPLIT_DONE]--;
    assert_broken(m, "job j split 1: 100 of 100 rows committed, state 0");
    jb->st[1].state = SL_MASTER_SPLIT_DONE;
    jb->count[SL_MASTER_SPLIT_PENDING]--;
    jb->count[SL_MASTER_SPLIT_DONE]++;

    /* a lease its worker does not list */
    worker *w = &m->workers[jb->st[0].worker];
    w->nleases--;
    assert_broken(m, "job j split 0: leased to w1, not in its list");
    w->nleases++;

    /* a generation at or past the next one */
    jb->st[0].generation += 1000;
    assert_broken(m, "job j split 0: generation");
    jb->st[0].generation -= 1000;

    /* a pending split naming a worker */
    jb->st[2].worker = 0;
    assert_broken(m, "job j split 2: not leased, yet names worker 0");
    jb->st[2].worker = NO_WORKER;

    cr_assert_eq(sl_master_state_check(m, &err), SL_OK, "%s", err.msg);
    sl_master_state_destroy(m);
}

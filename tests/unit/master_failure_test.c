/* Splits that fail, in the DPP master's state machine
 * (sl_master_state_split_failed): failures are counted per split and epoch
 * whichever worker reports them, only for the live lease, and release the
 * split to be leased again; the max-th failure fails the job (no lease,
 * commits refused, the failure in the status) or, with skip_bad_splits,
 * skips the split (its uncommitted rows committed as empty and counted,
 * the epoch goes on). Every step survives a restart, through the journal
 * and through a snapshot, with the same state as the live master. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "testutil.h"

#define N 4

static sl_wh_split_t g_splits[N];

static void make_splits(void)
{
    for (uint32_t i = 0; i < N; i++)
        g_splits[i] = (sl_wh_split_t){.path = "ds=1/part-0.slc",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = 100 * i,
                                      .num_rows = 100};
}

static sl_master_state_t *open_dir(const char *dir)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 60000};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

static char *dump(const sl_master_state_t *m)
{
    char *d;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_dump(m, &d, &len, &err), SL_OK, "%s", err.msg);
    char *copy = strdup(d);
    sl_free(NULL, d, len + 1);
    return copy;
}

/* Job "j"'s failure count (kept as a running sum: it must come back the
 * same from the journal and from a snapshot). */
static uint32_t failures_of_j(const sl_master_state_t *m)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK, "%s", err.msg);
    return st.split_failures;
}

/* Restart from the state directory, by the journal and then by a snapshot:
 * the same state as m had. @return the restarted master (m is freed). */
static sl_master_state_t *restart_same(sl_master_state_t *m, const char *dir)
{
    sl_error_t err = {0};
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *want = dump(m);
    uint32_t want_failures = failures_of_j(m);
    ms_destroy(m);
    sl_master_state_t *r = NULL;
    for (int round = 0; round < 2; round++) {
        r = open_dir(dir);
        char *got = dump(r);
        cr_assert_str_eq(got, want, "%s restart:\n%s\nwant\n%s", round ? "snapshot" : "journal",
                         got, want);
        free(got);
        cr_assert_eq(failures_of_j(r), want_failures, "%s restart: split failures",
                     round ? "snapshot" : "journal");
        if (round == 0) {
            cr_assert_eq(ms_compact(r, &err), SL_OK, "%s", err.msg);
            ms_destroy(r);
        }
    }
    free(want);
    return r;
}

/* A master on a new state directory (*dir, caller frees) with job "j" of
 * N splits and 2 epochs. */
static sl_master_state_t *with_job(char **dir, bool skip_bad)
{
    make_splits();
    *dir = tu_mkdtemp("mfail");
    sl_master_state_t *m = open_dir(*dir);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = {.job_id = "j",
                                       .splits = g_splits,
                                       .num_splits = N,
                                       .epochs = 2,
                                       .skip_bad_splits = skip_bad};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    return m;
}

static sl_master_lease_t lease(sl_master_state_t *m, const char *worker, uint32_t want_split)
{
    sl_master_lease_t l;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_lease_next(m, "j", worker, 1, &l, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(l.split, want_split);
    return l;
}

static sl_master_split_fail_result_t fail(sl_master_state_t *m, const sl_master_lease_t *l,
                                          uint32_t max, sl_error_t *err)
{
    sl_master_split_failure_t f = {.job_id = "j",
                                   .epoch = l->epoch,
                                   .split = l->split,
                                   .generation = l->generation,
                                   .file = l->path,
                                   .stripe = (int32_t)l->stripe_begin,
                                   .message =
                                       "ds=1/part-0.slc stripe 1 stream ids: checksum mismatch",
                                   .code = SL_ERR_CORRUPT};
    return sl_master_state_split_failed(m, &f, max, err);
}

Test(master_failure, the_max_th_failure_fails_the_job)
{
    char *dir;
    sl_master_state_t *m = with_job(&dir, false);
    sl_error_t err = {0};
    sl_master_lease_t l0 = lease(m, "w1", 0);
    sl_master_lease_t l1 = lease(m, "w1", 1);
    /* failures of splits 0 and 1 on two workers: counted per split */
    cr_assert_eq(fail(m, &l1, 3, &err), SL_MASTER_FAIL_RETRY, "%s", err.msg);
    cr_assert_eq(fail(m, &l1, 3, &err), SL_MASTER_FAIL_STALE, "the lease ended: not counted again");
    cr_assert_eq(fail(m, &l0, 3, &err), SL_MASTER_FAIL_RETRY, "%s", err.msg);
    sl_master_lease_t a = lease(m, "w2", 0); /* pending again, in epoch order */
    cr_assert_eq(fail(m, &a, 3, &err), SL_MASTER_FAIL_RETRY, "%s", err.msg);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert(!st.failed);
    cr_assert_eq(st.split_failures, 3);
    cr_assert_eq(st.pending, N);
    m = restart_same(m, dir);
    /* the third failure of split 0 (on a third worker) fails the job */
    a = lease(m, "w3", 0);
    cr_assert_eq(fail(m, &a, 3, &err), SL_MASTER_FAIL_JOB_FAILED, "%s", err.msg);
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert(st.failed);
    cr_assert(!st.finished);
    cr_assert_eq(st.failure_split, 0);
    cr_assert_eq(st.failure_epoch, 0);
    cr_assert_eq(st.failure_stripe, 0);
    cr_assert_eq(st.failure_code, SL_ERR_CORRUPT);
    cr_assert_str_eq(st.failure_file, "ds=1/part-0.slc");
    cr_assert_str_eq(st.failure_message, "ds=1/part-0.slc stripe 1 stream ids: checksum mismatch");
    cr_assert_eq(st.leased, 0, "a failed job holds no lease");
    /* no more leases, commits refused */
    sl_master_lease_t l;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 2, &l, &err), SL_ERR_AGAIN);
    cr_assert(strstr(err.msg, "failed") != NULL, "%s", err.msg);
    cr_assert_eq(sl_master_state_commit(m, "j", 0, 2, 0, 0, 10, "c", 1, &err),
                 SL_MASTER_STALE_EPOCH, "%s", err.msg);
    cr_assert(strstr(err.msg, "checksum mismatch") != NULL, "%s", err.msg);
    m = restart_same(m, dir);
    ms_destroy(m);
    m = open_dir(dir);
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert(st.failed, "a restarted master knows the job failed");
    cr_assert_str_eq(st.failure_file, "ds=1/part-0.slc");
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}

Test(master_failure, skip_bad_splits_skips_and_counts)
{
    char *dir;
    sl_master_state_t *m = with_job(&dir, true);
    sl_error_t err = {0};
    for (uint32_t epoch = 0; epoch < 2; epoch++) {
        /* split 0: 30 rows committed before it keeps failing (max 2) */
        sl_master_lease_t a = lease(m, "w1", 0);
        cr_assert_eq(sl_master_state_commit(m, "j", epoch, 0, a.generation, 0, 30, "c",
                                            10 * epoch + 1, &err),
                     SL_MASTER_COMMITTED, "%s", err.msg);
        cr_assert_eq(fail(m, &a, 2, &err), SL_MASTER_FAIL_RETRY, "%s", err.msg);
        a = lease(m, "w2", 0);
        cr_assert_eq(a.num_todo, 1);
        cr_assert_eq(a.todo[0].from_row, 30);
        cr_assert_eq(fail(m, &a, 2, &err), SL_MASTER_FAIL_SKIPPED, "%s", err.msg);
        /* the skipped rows can never be delivered */
        cr_assert_eq(sl_master_state_commit(m, "j", epoch, 0, a.generation, 40, 50, "c",
                                            10 * epoch + 2, &err),
                     SL_MASTER_OVERLAP, "%s", err.msg);
        sl_master_state_job_status_t st;
        cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
        cr_assert(!st.failed);
        cr_assert_eq(st.epoch, epoch);
        cr_assert_eq(st.done, 1);
        cr_assert_eq(st.skipped_splits, epoch + 1);
        cr_assert_eq(st.skipped_rows, 70 * (epoch + 1));
        cr_assert_eq(st.split_failures, 2, "both failures of split 0 this epoch");
        m = restart_same(m, dir);
        /* the other splits are read as usual; the epoch ends */
        for (uint32_t s = 1; s < N; s++) {
            sl_master_lease_t b = lease(m, "w1", s);
            cr_assert_eq(sl_master_state_commit(m, "j", epoch, s, b.generation, 0, 100, "c",
                                                10 * epoch + 2 + s, &err),
                         SL_MASTER_COMMITTED, "%s", err.msg);
        }
        cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
        cr_assert_eq(st.epoch, epoch + 1, "the epoch moved on");
        cr_assert_eq(st.split_failures, 0, "counts start again each epoch");
    }
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert(st.finished);
    cr_assert_eq(st.skipped_splits, 2);
    cr_assert_eq(st.skipped_rows, 140);
    m = restart_same(m, dir);
    ms_destroy(m);
    tu_rm_tree(dir);
    free(dir);
}

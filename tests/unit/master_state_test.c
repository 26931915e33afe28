/* Tests of the DPP master's state machine (src/dpp/master/state/state.h): leases
 * with todo ranges, commits (overlap, idempotence, epochs), split reads,
 * stale generations, expiry, epochs and their seeded order, static
 * sharding, resume tokens. Every test runs on the counting allocator of
 * testutil.h (no leak, every free with its size), and one walks every
 * allocation failure of a master's life. The exactly-once property:
 * master_state_property_test.c. */
#include "master_state_util.h"

Test(master_state, commits_ranges_overlap_and_split_read)
{
    uint64_t rows[2] = {100, 50};
    make_splits(2, rows);
    sl_master_state_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = spec_of("j", 2, 2, false, 0);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    sl_master_lease_t l;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 0, &l, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(l.split, 0);
    cr_assert_eq(l.num_todo, 1);
    cr_assert_eq(l.todo[0].from_row, 0);
    cr_assert_eq(l.todo[0].to_row, 100);
    cr_assert_eq(l.rank_plus_one, 0);
    /* two copies of a batch: only the first wins; a retry of the winner
     * (same client and nonce) gets COMMITTED again */
    uint64_t g = l.generation;
    cr_assert_eq(commit(m, 0, 0, g, 0, 10, "a", 1), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 0, g, 0, 10, "b", 1), SL_MASTER_OVERLAP);
    cr_assert_eq(commit(m, 0, 0, g, 5, 15, "b", 2), SL_MASTER_OVERLAP);
    cr_assert_eq(commit(m, 0, 0, g, 0, 10, "a", 1), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 0, g, 20, 30, "b", 3), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 0, g, 10, 20, "a", 2), SL_MASTER_COMMITTED);
    assert_ranges(m, "j", 0, "[0,30)");
    cr_assert_eq(commit(m, 0, 0, g, 50, 60, "a", 3), SL_MASTER_COMMITTED);
    assert_ranges(m, "j", 0, "[0,30)[50,60)");
    /* refusals */
    cr_assert_eq(commit(m, 1, 0, g, 60, 70, "a", 4), SL_MASTER_STALE_EPOCH);
    cr_assert_eq(commit(m, 0, 9, g, 60, 70, "a", 5), SL_MASTER_UNKNOWN);
    cr_assert_eq(commit(m, 0, 0, g, 60, 170, "a", 6), SL_MASTER_UNKNOWN);
    cr_assert_eq(commit(m, 0, 0, g, 60, 60, "a", 7), SL_MASTER_UNKNOWN);
    cr_assert_eq(sl_master_state_commit(m, "nope", 0, 0, g, 0, 1, "a", 8, &err), SL_MASTER_UNKNOWN);
    cr_assert_eq(err.code, SL_OK); /* a refusal, not an error */
    cr_assert(strstr(err.msg, "no job 'nope'") != NULL, "%s", err.msg);
    cr_assert_eq(sl_master_state_commit(m, "j", 0, 0, g, 0, 1, "bad id", 9, &err),
                 SL_MASTER_COMMIT_ERROR);
    cr_assert_eq(err.code, SL_ERR_INVALID);
    /* only rows of a live lease commit: split 1 is not leased, and split 0
     * is not leased under another generation; nothing is recorded */
    char why[SL_ERROR_MSG_MAX];
    cr_assert_eq(commit_why(m, 0, 1, g, 0, 10, "a", 11, why), SL_MASTER_STALE_EPOCH);
    cr_assert(strstr(why, "split 1: generation") != NULL, "%s", why);
    cr_assert(strstr(why, "is not the live lease (no such lease)") != NULL, "%s", why);
    cr_assert_eq(commit_why(m, 0, 0, g + 1, 60, 70, "a", 12, why), SL_MASTER_STALE_EPOCH);
    cr_assert(strstr(why, "leased under another generation") != NULL, "%s", why);
    assert_ranges(m, "j", 0, "[0,30)[50,60)");
    assert_ranges(m, "j", 1, "");
    /* split read: [30,50) produced nothing, the rest is not committed: PENDING */
    sl_dpp_row_range_t empty[1] = {{30, 50}};
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 0, l.generation + 1, empty, 1, &err),
                 SL_MASTER_READ_STALE);
    sl_dpp_row_range_t outside[1] = {{30, 500}};
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 0, l.generation, outside, 1, &err),
                 SL_MASTER_READ_ERROR);
    cr_assert_eq(err.code, SL_ERR_INVALID);
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 0, l.generation, empty, 1, &err),
                 SL_MASTER_READ_PENDING, "%s", err.msg);
    assert_ranges(m, "j", 0, "[0,60)");
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 0, l.generation, empty, 1, &err),
                 SL_MASTER_READ_STALE);
    /* the reported lease has ended: a late copy of its batch is refused */
    cr_assert_eq(commit_why(m, 0, 0, g, 60, 70, "b", 13, why), SL_MASTER_STALE_EPOCH);
    cr_assert(strstr(why, "that lease has ended") != NULL, "%s", why);
    /* leased again: todo is what is left */
    sl_master_lease_t l2;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w2", 0, &l2, &err), SL_OK);
    cr_assert_eq(l2.split, 0);
    cr_assert_eq(l2.num_todo, 1);
    cr_assert_eq(l2.todo[0].from_row, 60);
    cr_assert_eq(l2.todo[0].to_row, 100);
    cr_assert(sl_master_state_lease_live(m, "j", 0, 0, l2.generation, "w2"));
    cr_assert(!sl_master_state_lease_live(m, "j", 0, 0, l2.generation, "w1"));
    cr_assert(!sl_master_state_lease_live(m, "j", 0, 0, l.generation, NULL));
    cr_assert_eq(commit(m, 0, 0, g, 60, 70, "b", 14), SL_MASTER_STALE_EPOCH);
    /* the last rows committed: DONE at once, the lease ends */
    cr_assert_eq(commit(m, 0, 0, l2.generation, 60, 100, "b", 10), SL_MASTER_COMMITTED);
    cr_assert_eq(commit_why(m, 0, 0, l2.generation, 60, 100, "a", 15, why), SL_MASTER_OVERLAP);
    cr_assert(!sl_master_state_lease_live(m, "j", 0, 0, l2.generation, NULL));
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.done, 1);
    cr_assert_eq(st.committed_rows, 100);
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 0, l2.generation, NULL, 0, &err),
                 SL_MASTER_READ_STALE);
    /* split 1 entirely filtered out: the split read commits it; epoch 1 begins */
    sl_master_lease_t l3;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 0, &l3, &err), SL_OK);
    cr_assert_eq(l3.split, 1);
    sl_dpp_row_range_t all[1] = {{0, 50}};
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 1, l3.generation, all, 1, &err),
                 SL_MASTER_READ_DONE, "%s", err.msg);
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 1);
    cr_assert_eq(st.pending, 2);
    cr_assert_eq(st.committed_rows, 0);
    /* epoch 0 commits are stale now, but a committed nonce keeps its answer */
    cr_assert_eq(commit(m, 0, 0, g, 0, 10, "a", 1), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 0, g, 0, 10, "a", 77), SL_MASTER_STALE_EPOCH);
    sl_master_lease_t l4;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 0, &l4, &err), SL_OK);
    cr_assert_eq(l4.split, 0);
    cr_assert_eq(commit(m, 1, 0, l4.generation, 0, 10, "a", 78), SL_MASTER_COMMITTED);
    sl_master_state_counters_t k;
    sl_master_state_counters(m, &k);
    cr_assert_eq(k.commits, 6);
    cr_assert_eq(k.overlaps, 3);
    cr_assert_eq(k.repeated_commits, 2);
    cr_assert_eq(k.stale_commits, 2);
    cr_assert_eq(k.unleased_commits, 4);
    cr_assert_eq(k.clients, 2);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state, expiry_returns_uncommitted_rows)
{
    uint64_t rows[1] = {100};
    make_splits(1, rows);
    sl_master_state_t *m = mem_master(100);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = spec_of("j", 1, 1, false, 0);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK);
    sl_master_lease_t a, b;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 0, &a, &err), SL_OK);
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w2", 0, &b, &err), SL_ERR_AGAIN);
    cr_assert_eq(commit(m, 0, 0, a.generation, 10, 20, "c", 1), SL_MASTER_COMMITTED);
    uint32_t renewed, expired;
    sl_master_lease_ref_t held = {"j", 0, 0, a.generation};
    cr_assert_eq(sl_master_state_renew(m, "w1", &held, 1, 50, &renewed, &err), SL_OK);
    cr_assert_eq(renewed, 1);
    cr_assert_eq(sl_master_state_expire(m, 149, &expired, &err), SL_OK);
    cr_assert_eq(expired, 0);
    cr_assert_eq(sl_master_state_expire(m, 150, &expired, &err), SL_OK);
    cr_assert_eq(expired, 1);
    cr_assert(!sl_master_state_lease_live(m, "j", 0, 0, a.generation, "w1"));
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w2", 150, &b, &err), SL_OK);
    cr_assert_gt(b.generation, a.generation);
    cr_assert_eq(b.num_todo, 2);
    cr_assert_eq(b.todo[0].from_row, 0);
    cr_assert_eq(b.todo[0].to_row, 10);
    cr_assert_eq(b.todo[1].from_row, 20);
    cr_assert_eq(b.todo[1].to_row, 100);
    /* the dead worker's batch is refused now; the new lease's copy wins,
     * once */
    cr_assert_eq(commit(m, 0, 0, a.generation, 0, 10, "c", 2), SL_MASTER_STALE_EPOCH);
    cr_assert_eq(commit(m, 0, 0, b.generation, 0, 10, "d", 1), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 0, b.generation, 0, 10, "c", 3), SL_MASTER_OVERLAP);
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 0, a.generation, NULL, 0, &err),
                 SL_MASTER_READ_STALE);
    sl_master_state_counters_t k;
    sl_master_state_counters(m, &k);
    cr_assert_eq(k.expiries, 1);
    cr_assert_eq(k.stale_refused, 1);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state, only_named_leases_live_and_register_revokes_the_rest)
{
    make_splits(4, NULL);
    char *dir = tmp_state_dir();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = spec_of("j", 4, 1, false, 0);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    sl_master_lease_t a, b, c, d;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 0, &a, &err), SL_OK);
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w1", 0, &b, &err), SL_OK); /* never received */
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w2", 0, &c, &err), SL_OK);
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w2", 0, &d, &err), SL_OK);
    sl_master_lease_ref_t ra = {"j", 0, a.split, a.generation};
    sl_master_lease_ref_t rc_ = {"j", 0, c.split, c.generation},
                          rd = {"j", 0, d.split, d.generation};
    uint32_t renewed = 99, revoked = 99, expired = 99;
    /* w1 names a only; it also names w2's lease c, a stale generation and
     * an unknown job: none of those is renewed */
    sl_master_lease_ref_t w1_held[4] = {
        ra, rc_, {"j", 0, a.split, a.generation + 100}, {"x", 0, 0, 1}};
    for (uint64_t t = 30; t <= 90; t += 30) {
        cr_assert_eq(sl_master_state_renew(m, "w1", w1_held, 4, t, &renewed, &err), SL_OK);
        cr_assert_eq(renewed, 1);
        sl_master_lease_ref_t w2_held[2] = {rc_, rd};
        cr_assert_eq(sl_master_state_renew(m, "w2", w2_held, 2, t, &renewed, &err), SL_OK);
        cr_assert_eq(renewed, 2);
    }
    cr_assert_eq(sl_master_state_renew(m, "nobody", w1_held, 4, 90, &renewed, &err), SL_OK);
    cr_assert_eq(renewed, 0);
    cr_assert_eq(sl_master_state_expire(m, 99, &expired, &err), SL_OK);
    cr_assert_eq(expired, 0);
    cr_assert_eq(sl_master_state_expire(m, 100, &expired, &err), SL_OK);
    cr_assert_eq(expired, 1, "only the lease w1 never named expires");
    cr_assert(!sl_master_state_lease_live(m, "j", 0, b.split, b.generation, NULL));
    cr_assert(sl_master_state_lease_live(m, "j", 0, a.split, a.generation, "w1"));
    cr_assert(sl_master_state_lease_live(m, "j", 0, c.split, c.generation, "w2"));
    /* a new process under w2's id holds nothing: both its leases go back
     * now; w1 reconnects naming a: kept */
    cr_assert_eq(sl_master_state_register(m, "w2", NULL, 0, 120, &renewed, &revoked, &err), SL_OK);
    cr_assert_eq(renewed, 0);
    cr_assert_eq(revoked, 2);
    cr_assert(!sl_master_state_lease_live(m, "j", 0, c.split, c.generation, NULL));
    cr_assert(!sl_master_state_lease_live(m, "j", 0, d.split, d.generation, NULL));
    cr_assert_eq(sl_master_state_register(m, "w1", &ra, 1, 120, &renewed, &revoked, &err), SL_OK);
    cr_assert_eq(renewed, 1);
    cr_assert_eq(revoked, 0);
    cr_assert_eq(sl_master_state_register(m, "w9", &ra, 1, 120, &renewed, &revoked, &err), SL_OK);
    cr_assert_eq(renewed, 0, "another worker's lease is not renewed by naming it");
    cr_assert_eq(revoked, 0);
    cr_assert(sl_master_state_lease_live(m, "j", 0, a.split, a.generation, "w1"));
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.leased, 1);
    cr_assert_eq(st.pending, 3);
    sl_master_state_counters_t k;
    sl_master_state_counters(m, &k);
    cr_assert_eq(k.expiries, 1);
    cr_assert_eq(k.revocations, 2);
    cr_assert_eq(k.renewals, 3 * 3 + 1);
    /* a commit of the revoked lease c is refused; c's split is leased
     * again, with every row to do */
    cr_assert_eq(commit(m, 0, c.split, c.generation, 0, 10, "x", 1), SL_MASTER_STALE_EPOCH);
    sl_master_lease_t e;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w3", 120, &e, &err), SL_OK);
    cr_assert_eq(e.num_todo, 1);
    cr_assert_eq(e.todo[0].to_row, e.num_rows);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *before = dump_of(m);
    ms_destroy(m);

    /* reopened at t = 1000: the same state (revocations were journaled);
     * a lease found lives until 1100 unless its worker names it */
    cr_assert_eq(ms_open(dir, &o, 1000, &m, NULL, &err), SL_OK, "%s", err.msg);
    char *after = dump_of(m);
    cr_assert_str_eq(after, before);
    free(before);
    free(after);
    sl_master_lease_ref_t re = {"j", 0, e.split, e.generation};
    cr_assert_eq(sl_master_state_renew(m, "w3", &re, 1, 1050, &renewed, &err), SL_OK);
    cr_assert_eq(renewed, 1);
    cr_assert_eq(sl_master_state_expire(m, 1100, &expired, &err), SL_OK);
    cr_assert_eq(expired, 1, "w1 did not name a after the restart");
    cr_assert(sl_master_state_lease_live(m, "j", 0, e.split, e.generation, "w3"));
    cr_assert_eq(sl_master_state_expire(m, 1150, &expired, &err), SL_OK);
    cr_assert_eq(expired, 1);
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.leased, 0);
    ms_destroy(m);
    rm_state_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state, static_sharding_ranks_on_leases)
{
    enum { N = 8 };
    make_splits(N, NULL);
    sl_master_state_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = spec_of("j", N, 1, false, 5);
    spec.ranks = 2;
    spec.static_sharding = true;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    uint32_t want[N];
    cr_assert_eq(sl_master_state_assign_static(m, "j", 2, want, NULL, &err), SL_OK);
    for (uint32_t i = 0; i < N; i++) {
        sl_master_lease_t l;
        cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK);
        cr_assert_eq(l.rank_plus_one, want[l.split] + 1);
    }
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.ranks, 2);
    cr_assert(st.static_sharding);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* Lease every split of job j to worker w; each lease must carry the
 * footer checksum its file was planned with: 0xf00 + the file's number
 * (make_splits' part-N.slc), or 0 when want_pinned is false. */
static void lease_all_pinned(sl_master_state_t *m, const char *j, uint32_t n, uint64_t now,
                             bool want_pinned)
{
    sl_error_t err = {0};
    for (uint32_t i = 0; i < n; i++) {
        sl_master_lease_t l;
        cr_assert_eq(sl_master_state_lease_next(m, j, "w", now, &l, &err), SL_OK, "%s", err.msg);
        uint64_t want = want_pinned ? 0xf00u + (uint64_t)(l.split % 4) : 0;
        cr_assert_eq(l.footer_checksum, want, "split %u (%s): footer %llx, want %llx", l.split,
                     l.path, (unsigned long long)l.footer_checksum, (unsigned long long)want);
    }
}

/* The footer checksums of a job's files as the master planned them are in
 * its journal and its snapshot, and every lease carries its file's: the
 * pin that lets a worker refuse a file replaced since the plan. */
Test(master_state, leases_carry_the_planned_footer_checksums_across_restarts)
{
    make_splits(8, NULL);
    for (uint32_t i = 0; i < 8; i++)
        g_splits[i].footer_checksum = 0xf00u + i % 4;
    char *dir = tmp_state_dir();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = spec_of("pinned", 8, 1, true, 5);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    for (uint32_t i = 0; i < 8; i++)
        g_splits[i].footer_checksum = 0; /* a plan without pins (none known) */
    spec = spec_of("unpinned", 8, 1, false, 0);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    lease_all_pinned(m, "pinned", 8, 0, true);
    lease_all_pinned(m, "unpinned", 8, 0, false);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);
    /* from the journal: the leases found expire, and lease again pinned */
    uint32_t expired = 0;
    cr_assert_eq(ms_open(dir, &o, 1000, &m, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_expire(m, 1100, &expired, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(expired, 16);
    lease_all_pinned(m, "pinned", 8, 1100, true);
    lease_all_pinned(m, "unpinned", 8, 1100, false);
    /* from a snapshot */
    cr_assert_eq(ms_compact(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);
    cr_assert_eq(ms_open(dir, &o, 2000, &m, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_expire(m, 2100, &expired, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(expired, 16);
    lease_all_pinned(m, "pinned", 8, 2100, true);
    lease_all_pinned(m, "unpinned", 8, 2100, false);
    ms_destroy(m);
    rm_state_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

static uint64_t g_nonce = 1;

/* Run every split of the current epoch to completion in lease order;
 * returns the order splits were handed out in. */
static void run_epoch(sl_master_state_t *m, const char *job, uint32_t n, uint32_t *order)
{
    sl_error_t err = {0};
    for (uint32_t i = 0; i < n; i++) {
        sl_master_lease_t l;
        cr_assert_eq(sl_master_state_lease_next(m, job, "w", 0, &l, &err), SL_OK, "%s", err.msg);
        order[i] = l.split;
        cr_assert_eq(sl_master_state_commit(m, job, l.epoch, l.split, l.generation, 0, l.num_rows,
                                            "c", g_nonce++, &err),
                     SL_MASTER_COMMITTED, "%s", err.msg);
    }
}

Test(master_state, epochs_and_seeded_order)
{
    enum { N = 20 };
    make_splits(N, NULL);
    sl_master_state_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_master_state_job_spec_t plain = spec_of("plain", N, 2, false, 7);
    sl_master_state_job_spec_t shuf = spec_of("shuf", N, 3, true, 7);
    sl_master_state_job_spec_t shuf2 = spec_of("shuf2", N, 1, true, 8);
    cr_assert_eq(sl_master_state_job_add(m, &plain, &err), SL_OK);
    cr_assert_eq(sl_master_state_job_add(m, &shuf, &err), SL_OK);
    cr_assert_eq(sl_master_state_job_add(m, &shuf2, &err), SL_OK);
    uint32_t got[3][N], want[N];
    run_epoch(m, "plain", N, got[0]);
    for (uint32_t i = 0; i < N; i++)
        cr_assert_eq(got[0][i], i);
    sl_master_state_job_status_t st;
    sl_master_state_job_status(m, "plain", &st, &err);
    cr_assert_eq(st.epoch, 1);
    cr_assert_eq(st.pending, N);
    cr_assert_eq(st.committed_rows, 0);
    for (uint32_t e = 0; e < 3; e++) {
        run_epoch(m, "shuf", N, got[e]);
        cr_assert_eq(sl_master_state_epoch_order(m, "shuf", e, want, &err), SL_OK);
        cr_assert_arr_eq(got[e], want, sizeof want);
        /* a permutation */
        uint32_t seen[N] = {0};
        for (uint32_t i = 0; i < N; i++)
            seen[got[e][i]]++;
        for (uint32_t i = 0; i < N; i++)
            cr_assert_eq(seen[i], 1);
    }
    cr_assert(memcmp(got[0], got[1], sizeof got[0]) != 0, "epochs share one order");
    sl_master_state_job_status(m, "shuf", &st, &err);
    cr_assert(st.finished);
    cr_assert_eq(st.epoch, 3);
    cr_assert_eq(st.done, N);
    cr_assert_eq(st.committed_rows, st.total_rows, "a finished job committed every row");
    sl_master_lease_t l;
    cr_assert_eq(sl_master_state_lease_next(m, "shuf", "w", 0, &l, &err), SL_ERR_AGAIN);
    /* same seed: same order (a fresh master); other seed: another order */
    uint32_t other[N];
    cr_assert_eq(sl_master_state_epoch_order(m, "shuf2", 0, other, &err), SL_OK);
    cr_assert(memcmp(other, got[0], sizeof other) != 0);
    sl_master_state_t *m2 = mem_master(1000);
    cr_assert_eq(sl_master_state_job_add(m2, &shuf, &err), SL_OK);
    uint32_t again[N];
    run_epoch(m2, "shuf", N, again);
    cr_assert_arr_eq(again, got[0], sizeof again);
    ms_destroy(m2);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state, static_assignment_balanced_and_reproducible)
{
    enum { N = 64, R = 5 };
    uint64_t s = tu_seed("master_state::static_assignment");
    uint64_t rows[N];
    uint64_t total = 0, max_rows = 0;
    for (uint32_t i = 0; i < N; i++) {
        rows[i] = 1 + tu_below(&s, 1000);
        total += rows[i];
        if (rows[i] > max_rows) max_rows = rows[i];
    }
    make_splits(N, rows);
    sl_master_state_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_master_state_job_spec_t a = spec_of("a", N, 1, true, 42);
    sl_master_state_job_spec_t b = spec_of("b", N, 1, true, 42);
    cr_assert_eq(sl_master_state_job_add(m, &a, &err), SL_OK);
    cr_assert_eq(sl_master_state_job_add(m, &b, &err), SL_OK);
    uint32_t ra[N], rb[N];
    uint64_t load[R];
    cr_assert_eq(sl_master_state_assign_static(m, "a", R, ra, load, &err), SL_OK);
    cr_assert_eq(sl_master_state_assign_static(m, "b", R, rb, NULL, &err), SL_OK);
    cr_assert_arr_eq(ra, rb, sizeof ra);
    uint64_t sum[R] = {0}, lo = UINT64_MAX, hi = 0;
    for (uint32_t i = 0; i < N; i++) {
        cr_assert_lt(ra[i], R);
        sum[ra[i]] += rows[i];
    }
    uint64_t check = 0;
    for (uint32_t r = 0; r < R; r++) {
        cr_assert_eq(sum[r], load[r]);
        check += sum[r];
        if (sum[r] < lo) lo = sum[r];
        if (sum[r] > hi) hi = sum[r];
    }
    cr_assert_eq(check, total);
    /* Greedy largest-first: the spread is at most the largest split. */
    cr_assert_leq(hi - lo, max_rows, "spread %llu > largest split %llu",
                  (unsigned long long)(hi - lo), (unsigned long long)max_rows);
    /* Exact case: 4 equal splits on 2 ranks: 2 each; ties by split id. */
    uint64_t eq[4] = {10, 10, 10, 10};
    make_splits(4, eq);
    sl_master_state_job_spec_t e = spec_of("eq", 4, 1, false, 1);
    cr_assert_eq(sl_master_state_job_add(m, &e, &err), SL_OK);
    uint32_t re[4];
    uint64_t le[2];
    cr_assert_eq(sl_master_state_assign_static(m, "eq", 2, re, le, &err), SL_OK);
    cr_assert_eq(le[0], 20);
    cr_assert_eq(le[1], 20);
    cr_assert_eq(re[0], re[2]);
    cr_assert_eq(re[1], re[3]);
    cr_assert_neq(re[0], re[1]);
    cr_assert_eq(sl_master_state_assign_static(m, "eq", 0, re, le, &err), SL_ERR_INVALID);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state, resume_token_round_trip_and_refusals)
{
    enum { N = 6 };
    make_splits(N, NULL);
    sl_master_state_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = spec_of("j", N, 2, false, 3);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK);
    uint64_t gen[N];
    lease_all(m, N, gen);
    /* split 0 all committed, split 1 [0,50) and [60,70), split 2 [0,10)
     * committed but not yet handed to the trainer (undelivered) */
    cr_assert_eq(commit(m, 0, 0, gen[0], 0, 100, "c", 1), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 1, gen[1], 0, 50, "c", 2), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 1, gen[1], 60, 70, "c", 3), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 2, gen[2], 0, 10, "c", 4), SL_MASTER_COMMITTED);
    sl_master_token_exclude_t und[3] = {
        {.epoch = 0, .split = 2, .from_row = 0, .to_row = 10},
        {.epoch = 0, .split = 1, .from_row = 40, .to_row = 50},
        {.epoch = 7, .split = 1, .from_row = 0, .to_row = 10}, /* other epoch: ignored */
    };
    void *tok;
    size_t len;
    cr_assert_eq(sl_master_state_token_encode(m, "j", und, 3, &tok, &len, &err), SL_OK, "%s",
                 err.msg);

    sl_master_state_t *r = mem_master(1000);
    cr_assert_eq(sl_master_state_job_resume(r, &spec, tok, len, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_status_t st;
    sl_master_state_job_status(r, "j", &st, &err);
    cr_assert_eq(st.epoch, 0);
    cr_assert_eq(st.done, 1);
    cr_assert_eq(st.pending, N - 1);
    cr_assert_eq(st.committed_rows, 100 + 40 + 10);
    assert_ranges(r, "j", 0, "[0,100)");
    assert_ranges(r, "j", 1, "[0,40)[60,70)");
    assert_ranges(r, "j", 2, "");

    /* wrong job id, other splits, damage, other version */
    sl_master_state_t *q = mem_master(1000);
    sl_master_state_job_spec_t other = spec_of("k", N, 2, false, 3);
    cr_assert_eq(sl_master_state_job_resume(q, &other, tok, len, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "of job 'j', not of job 'k'") != NULL, "%s", err.msg);
    sl_master_state_job_spec_t fewer = spec_of("j", N - 1, 2, false, 3);
    cr_assert_eq(sl_master_state_job_resume(q, &fewer, tok, len, &err), SL_ERR_INVALID);
    g_splits[2].num_rows++;
    cr_assert_eq(sl_master_state_job_resume(q, &spec, tok, len, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "other splits") != NULL, "%s", err.msg);
    g_splits[2].num_rows--;
    uint8_t *bad = malloc(len);
    for (size_t i = 0; i < len; i += 3) {
        memcpy(bad, tok, len);
        bad[i] ^= 0x40;
        sl_err_t rc = sl_master_state_job_resume(q, &spec, bad, len, &err);
        cr_assert(rc == SL_ERR_CORRUPT || rc == SL_ERR_VERSION, "byte %zu: %d", i, rc);
    }
    memcpy(bad, tok, len);
    bad[4] = 9;
    cr_assert_eq(sl_master_state_job_resume(q, &spec, bad, len, &err), SL_ERR_VERSION);
    for (size_t cut = 0; cut < len; cut += 5)
        cr_assert_neq(sl_master_state_job_resume(q, &spec, tok, cut, &err), SL_OK);
    cr_assert_eq(sl_master_state_job_status(q, "j", &st, &err), SL_ERR_NOT_FOUND);
    free(bad);
    sl_free(ALLOC, tok, len);
    ms_destroy(q);
    ms_destroy(r);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* Resubmit (sl_master_state_job_replace): a job replaced in place by one
 * resumed from a token, only once the token is found good; journaled, so
 * a restart finds the new job. */
Test(master_state, replace_in_place_only_with_a_good_token)
{
    enum { N = 4 };
    make_splits(N, NULL);
    char *dir = tmp_state_dir();
    sl_master_state_opts_t o = {.lease_timeout_ms = 1000};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = spec_of("j", N, 2, false, 3);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK);
    uint64_t gen[N];
    lease_all(m, N, gen);
    cr_assert_eq(commit(m, 0, 0, gen[0], 0, 100, "c", 1), SL_MASTER_COMMITTED);
    cr_assert_eq(commit(m, 0, 1, gen[1], 0, 50, "c", 2), SL_MASTER_COMMITTED);
    /* the token: [0,30) of split 1 delivered, [30,50) committed but not yet */
    sl_master_token_exclude_t und = {.epoch = 0, .split = 1, .from_row = 30, .to_row = 50};
    void *tok;
    size_t len;
    cr_assert_eq(sl_master_state_token_encode(m, "j", &und, 1, &tok, &len, &err), SL_OK, "%s",
                 err.msg);
    /* more commits after the checkpoint: the replace forgets them */
    cr_assert_eq(commit(m, 0, 2, gen[2], 0, 120, "c", 3), SL_MASTER_COMMITTED);
    const void *toks[1] = {tok};
    size_t lens[1] = {len};

    /* refused tokens leave the job as it was: damaged, another job's */
    uint8_t *bad = malloc(len);
    memcpy(bad, tok, len);
    bad[len - 1] ^= 1;
    const void *bads[1] = {bad};
    cr_assert_eq(sl_master_state_job_replace(m, &spec, bads, lens, 1, &err), SL_ERR_CORRUPT);
    cr_assert_eq(sl_master_state_job_replace(m, &spec, toks, lens, 0, &err), SL_ERR_INVALID);
    sl_master_state_job_spec_t other = spec_of("k", N, 2, false, 3);
    cr_assert_eq(sl_master_state_job_add(m, &other, &err), SL_OK);
    cr_assert_eq(sl_master_state_job_replace(m, &other, toks, lens, 1, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "of job 'j', not of job 'k'") != NULL, "%s", err.msg);
    sl_master_state_job_spec_t none = spec_of("x", N, 2, false, 3);
    cr_assert_eq(sl_master_state_job_replace(m, &none, toks, lens, 1, &err), SL_ERR_NOT_FOUND);
    cr_assert_str_eq(err.msg, "no job 'x'");
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.committed_rows, 100 + 50 + 120);
    assert_ranges(m, "j", 2, "[0,120)");

    /* a good one replaces it: exactly the token's rows, no lease */
    cr_assert_eq(sl_master_state_job_replace(m, &spec, toks, lens, 1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    for (int pass = 0; pass < 2; pass++) {
        cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
        cr_assert_eq(st.committed_rows, 100 + 30, "pass %d", pass);
        cr_assert_eq(st.done, 1);
        cr_assert_eq(st.leased, 0);
        cr_assert_eq(st.pending, N - 1);
        assert_ranges(m, "j", 0, "[0,100)");
        assert_ranges(m, "j", 1, "[0,30)");
        assert_ranges(m, "j", 2, "");
        /* the other job is untouched */
        cr_assert_eq(sl_master_state_job_status(m, "k", &st, &err), SL_OK);
        /* a restart replays JobRemoved then JobAdded */
        ms_destroy(m);
        m = NULL;
        cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    }
    free(bad);
    sl_free(NULL, tok, len);
    ms_destroy(m);
    rm_state_dir(dir);
}

/* Multi-rank resume: each rank's token is committed minus that rank's
 * undelivered rows; the resumed job starts with the intersection. Checked
 * row by row against a bitmap over random commits and exclusions. */
/* Tokens of several ranks (version 4, combined by union) and their
 * refusals: tests/unit/master_token_test.c. */

/* ---- every allocation failure: a clean error, state unchanged ------------------------ */

/* A master's life in steps: open a state directory, submit, lease,
 * register, renew, commit, read a split, fail a split, encode a token,
 * forget idle clients, expire, sync, compact, remove a job. */
typedef struct life {
    ml_life_t b;
    uint32_t split[2];
    uint64_t gen[2], rows[2];
} life_t;

enum { LIFE_STEPS = 16 };

static sl_err_t life_step(void *life, int step, sl_error_t *err)
{
    life_t *x = life;
    sl_master_lease_t l;
    sl_master_commit_result_t res;
    sl_err_t rc = SL_OK;
    switch (step) {
    case 0:
        return ms_open(x->b.dir, &x->b.o, 0, &x->b.m, NULL, err);
    case 1: {
        sl_master_state_job_spec_t spec = spec_of("j", 4, 2, true, 7);
        spec.spec_json = "{\"id\":\"j\"}";
        return sl_master_state_job_add(x->b.m, &spec, err);
    }
    case 2:
    case 3:
        rc = sl_master_state_lease_next(x->b.m, "j", step == 2 ? "w1" : "w2", 0, &l, err);
        if (rc == SL_OK) {
            x->split[step - 2] = l.split;
            x->gen[step - 2] = l.generation;
            x->rows[step - 2] = l.num_rows;
        }
        return rc;
    case 4: {
        sl_master_lease_ref_t held = {"j", 0, x->split[0], x->gen[0]};
        return sl_master_state_register(x->b.m, "w1", &held, 1, 5, NULL, NULL, err);
    }
    case 5: {
        sl_master_lease_ref_t held = {"j", 0, x->split[1], x->gen[1]};
        return sl_master_state_renew(x->b.m, "w2", &held, 1, 6, NULL, err);
    }
    case 6:
    case 7: {
        int w = step - 6;
        sl_master_commit_t c = {"j", 0, x->split[w], x->gen[w], 0, 10, w ? "c2" : "c1", 1, 10};
        res = sl_master_state_commit_batch(x->b.m, &c, err);
        return res == SL_MASTER_COMMIT_ERROR ? err->code
               : res != SL_MASTER_COMMITTED  ? SL_ERR_INVALID
                                             : SL_OK;
    }
    case 8: {
        sl_dpp_row_range_t empty = {10, x->rows[0]};
        sl_master_read_result_t rr =
            sl_master_state_split_read(x->b.m, "j", 0, x->split[0], x->gen[0], &empty, 1, err);
        return rr == SL_MASTER_READ_ERROR   ? err->code
               : rr == SL_MASTER_READ_STALE ? SL_ERR_INVALID
                                            : SL_OK;
    }
    case 9: {
        sl_master_split_failure_t f = {"j",
                                       0,
                                       x->split[1],
                                       x->gen[1],
                                       "part-1.slc",
                                       3,
                                       "stripe 3: checksum mismatch",
                                       SL_ERR_CORRUPT};
        sl_master_split_fail_result_t fr = sl_master_state_split_failed(x->b.m, &f, 3, err);
        return fr == SL_MASTER_FAIL_ERROR   ? err->code
               : fr == SL_MASTER_FAIL_STALE ? SL_ERR_INVALID
                                            : SL_OK;
    }
    case 10: {
        void *tok;
        size_t len;
        sl_master_token_exclude_t und = {0, x->split[1], 2, 4, 0};
        rc = sl_master_state_token_encode(x->b.m, "j", &und, 1, &tok, &len, err);
        if (rc == SL_OK) sl_free(ALLOC, tok, len);
        return rc;
    }
    case 11:
        return sl_master_state_evict_clients(x->b.m, 100000, 1000, NULL, err);
    case 12: {
        /* a lease that expires */
        rc = sl_master_state_lease_next(x->b.m, "j", "w3", 200000, &l, err);
        return rc != SL_OK ? rc : sl_master_state_expire(x->b.m, 300000, NULL, err);
    }
    case 13:
        return ms_sync(x->b.m, err);
    case 14:
        return ms_compact(x->b.m, err);
    case 15: {
        sl_master_state_job_spec_t spec = spec_of("k", 2, 1, false, 0);
        rc = sl_master_state_job_add(x->b.m, &spec, err);
        return rc != SL_OK ? rc : sl_master_state_job_remove(x->b.m, "k", err);
    }
    }
    return sl_error_set(err, SL_ERR_INVALID, "no step %d", step);
}

Test(master_state, every_allocation_failure_is_a_clean_error)
{
    make_splits(4, NULL);
    ml_ops_t ops = {.steps = LIFE_STEPS,
                    .size = sizeof(life_t),
                    .opts = {.lease_timeout_ms = 1000},
                    .step = life_step};
    uint64_t walked = ml_walk(&ops, &g_ta, NULL);
    cr_assert_gt(walked, LIFE_STEPS);
    tu_alloc_assert_clean(&g_ta);
}

/* The deterministic order in the master's state (state_order.c): a
 * deterministic job's leases stay below the counted prefix + its window;
 * BatchesCounted records number the splits (a count out of order, the
 * same count again, another count refused, a lease of another epoch
 * refused); the counts survive a reopen from the journal and from a
 * snapshot, the epoch's advance starts them again, and the spec checks
 * refuse what the order cannot run (a damaged resume token too); every allocation failure of a
 * deterministic job's life is a clean error. Every test runs on the
 * counting allocator (no leak, every free with its size). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/master/state/state.h"
#include "master_life.h"
#include "testutil.h"

static tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_state_order, .init = init_alloc);

/* Six splits of one file, rows as given (split 1 has none). */
static const uint64_t g_rows[6] = {100, 0, 50, 80, 30, 60};
static sl_wh_split_t g_splits[6];

static void make_splits(void)
{
    uint64_t first = 0;
    for (uint32_t i = 0; i < 6; i++) {
        g_splits[i] = (sl_wh_split_t){.path = "part-0.slc",
                                      .partition = "",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = first,
                                      .num_rows = g_rows[i]};
        first += g_rows[i];
    }
}

static sl_master_state_job_spec_t det_spec(const char *id, uint32_t epochs, uint32_t window)
{
    return (sl_master_state_job_spec_t){.job_id = id,
                                        .splits = g_splits,
                                        .num_splits = 6,
                                        .epochs = epochs,
                                        .ranks = 2,
                                        .deterministic = true,
                                        .order_window = window};
}

static char *tmp_state_dir(void)
{
    char *d = strdup("/tmp/sluice-order-XXXXXX");
    cr_assert(mkdtemp(d) != NULL);
    return d;
}

static void rm_state_dir(char *d)
{
    const char *names[] = {"journal", "snapshot", "tmp", "journal.next"};
    char p[256];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", d, names[i]);
        unlink(p);
    }
    rmdir(d);
    free(d);
}

static uint32_t lease(sl_master_state_t *m, uint64_t *gen)
{
    sl_master_lease_t l;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK, "%s", err.msg);
    *gen = l.generation;
    return l.split;
}

static void no_lease(sl_master_state_t *m, const char *want)
{
    sl_master_lease_t l;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_ERR_AGAIN);
    cr_assert_str_eq(err.msg, want);
}

static void count(sl_master_state_t *m, uint32_t epoch, uint32_t split, uint64_t gen, uint64_t n)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_batches_counted(m, "j", epoch, split, gen, n, &err), SL_OK, "%s",
                 err.msg);
}

static uint64_t base_of(sl_master_state_t *m, uint32_t epoch, uint32_t split)
{
    uint64_t b = 0;
    cr_assert(sl_master_state_order_base(m, "j", epoch, split, &b), "split %u", split);
    return b;
}

/* Commit every row of the split and report it read: DONE. */
static void read_whole(sl_master_state_t *m, uint32_t epoch, uint32_t split, uint64_t gen,
                       uint64_t *nonce)
{
    sl_error_t err = {0};
    cr_assert_eq(
        sl_master_state_commit(m, "j", epoch, split, gen, 0, g_rows[split], "c", ++*nonce, &err),
        SL_MASTER_COMMITTED, "%s", err.msg);
    cr_assert_eq(sl_master_state_split_read(m, "j", epoch, split, gen, NULL, 0, &err),
                 SL_MASTER_READ_STALE, "the commits made it DONE already: %s", err.msg);
}

static void check(sl_master_state_t *m)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_check(m, &err), SL_OK, "%s", err.msg);
}

/* The line of the dump that holds the order. */
static void assert_order_line(const sl_master_state_t *m, const char *want)
{
    char *d = ml_dump(m, ALLOC);
    const char *at = strstr(d, " order ");
    cr_assert_not_null(at, "%s", d);
    const char *end = strchr(at, '\n');
    char *line = strndup(at, (size_t)(end - at));
    cr_assert_str_eq(line, want, "%s", d);
    free(line);
    free(d);
}

Test(master_state_order, window_counts_reopen_snapshot_and_next_epoch)
{
    make_splits();
    char *dir = tmp_state_dir();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100000, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = det_spec("j", 2, 2);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    /* the split of no rows is counted at once; nothing else is */
    assert_order_line(m, " order window 2 prefix 0 counts 1:0");
    uint64_t g0, g2, g3, g4, g5, nonce = 0;
    /* window 2 over prefix 0: positions 0 and 1 (1 is done: no rows) */
    cr_assert_eq(lease(m, &g0), 0);
    no_lease(m, "job 'j': split 2 waits for the deterministic order's counts (position 2, "
                "prefix 0, window 2)");
    cr_assert_eq(base_of(m, 0, 0), 0);
    uint64_t b;
    cr_assert_not(sl_master_state_order_base(m, "j", 0, 2, &b));
    count(m, 0, 0, g0, 3);
    cr_assert_eq(base_of(m, 0, 1), 3);
    cr_assert_eq(base_of(m, 0, 2), 3);
    /* prefix 2: positions 2 and 3 */
    cr_assert_eq(lease(m, &g2), 2);
    cr_assert_eq(lease(m, &g3), 3);
    no_lease(m, "job 'j': split 4 waits for the deterministic order's counts (position 4, "
                "prefix 2, window 2)");
    /* a count out of order moves nothing; the one before it moves both */
    count(m, 0, 3, g3, 4);
    cr_assert_not(sl_master_state_order_base(m, "j", 0, 3, &b));
    count(m, 0, 2, g2, 2);
    cr_assert_eq(base_of(m, 0, 3), 5);
    cr_assert_eq(base_of(m, 0, 4), 9);
    /* the same count again is a no-op; another one is refused */
    count(m, 0, 2, g2, 2);
    cr_assert_eq(sl_master_state_batches_counted(m, "j", 0, 2, g2, 3, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "batches counted: job 'j' split 2: deterministic order: split at "
                              "position 2 counted 2 batches, now 3: its batches were cut "
                              "differently");
    /* not a lease of this epoch; not a split; not a deterministic job */
    cr_assert_eq(sl_master_state_batches_counted(m, "j", 1, 4, g3, 1, &err), SL_ERR_AGAIN);
    cr_assert_eq(sl_master_state_batches_counted(m, "j", 0, 4, 0, 1, &err), SL_ERR_AGAIN);
    cr_assert_eq(sl_master_state_batches_counted(m, "j", 0, 4, g3 + 100, 1, &err), SL_ERR_AGAIN);
    cr_assert_eq(sl_master_state_batches_counted(m, "j", 0, 6, g3, 1, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "batches counted: job 'j' has no split 6");
    cr_assert_eq(sl_master_state_batches_counted(m, "x", 0, 0, g0, 1, &err), SL_ERR_NOT_FOUND);
    /* a count that comes after the split went DONE through its commits */
    read_whole(m, 0, 0, g0, &nonce);
    count(m, 0, 0, g0, 3);
    check(m);
    assert_order_line(m, " order window 2 prefix 4 counts 0:3 1:0 2:2 3:4");

    /* reopened from the journal, then from a snapshot: the same */
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *before = ml_dump(m, ALLOC);
    ms_destroy(m);
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    char *after = ml_dump(m, ALLOC);
    cr_assert_str_eq(after, before);
    free(after);
    check(m);
    cr_assert_eq(ms_compact(m, &err), SL_OK, "%s", err.msg);
    sl_master_store_compact_wait(ms_store(m));
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    ms_destroy(m);
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    after = ml_dump(m, ALLOC);
    cr_assert_str_eq(after, before);
    free(after);
    free(before);
    check(m);

    /* the rest of the epoch: 4 and 5 now fit the window */
    cr_assert_eq(lease(m, &g4), 4);
    cr_assert_eq(lease(m, &g5), 5);
    count(m, 0, 4, g4, 1);
    /* split 5's rows all committed, its lease ends before its count came
     * (a worker killed between its last batch and its SPLIT_READ): not
     * done, leased again with nothing to do, done once counted */
    cr_assert_eq(sl_master_state_commit(m, "j", 0, 5, g5, 0, 60, "c", ++nonce, &err),
                 SL_MASTER_COMMITTED, "%s", err.msg);
    check(m);
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 5, g5, NULL, 0, &err),
                 SL_MASTER_READ_PENDING, "%s", err.msg);
    check(m);
    sl_master_lease_t again;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &again, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(again.split, 5);
    cr_assert_eq(again.num_todo, 0);
    cr_assert_eq(sl_master_state_batches_counted(m, "j", 0, 5, g5, 2, &err), SL_OK,
                 "the earlier lease of this epoch counts as well: %s", err.msg);
    check(m);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.done, 3, "0, the empty 1 and the counted 5");
    cr_assert_eq(sl_master_state_split_read(m, "j", 0, 5, again.generation, NULL, 0, &err),
                 SL_MASTER_READ_STALE, "%s", err.msg);
    cr_assert_eq(base_of(m, 0, 5), 10);
    assert_order_line(m, " order window 2 prefix 6 counts 0:3 1:0 2:2 3:4 4:1 5:2");
    read_whole(m, 0, 2, g2, &nonce);
    read_whole(m, 0, 3, g3, &nonce);
    read_whole(m, 0, 4, g4, &nonce);
    /* epoch 1: counted again from nothing (the empty split aside) */
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 1);
    assert_order_line(m, " order window 2 prefix 0 counts 1:0");
    cr_assert_not(sl_master_state_order_base(m, "j", 1, 2, &b));
    cr_assert_not(sl_master_state_order_base(m, "j", 0, 0, &b), "epoch 0 is over");
    cr_assert_eq(lease(m, &g0), 0);
    no_lease(m, "job 'j': split 2 waits for the deterministic order's counts (position 2, "
                "prefix 0, window 2)");
    check(m);
    ms_destroy(m);
    rm_state_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state_order, what_the_state_refuses)
{
    make_splits();
    sl_master_state_opts_t o = {.lease_timeout_ms = 1000, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = det_spec("j", 1, 0);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "job 'j': deterministic order: 6 splits, window of 0 (both must "
                              "be > 0)");
    spec = det_spec("j", 1, 2);
    spec.static_sharding = true;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "job 'j': the deterministic order deals batch g to rank g mod "
                              "ranks, static sharding a rank's own splits");
    spec = det_spec("j", 1, 2);
    spec.share = true;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "job 'j': the deterministic order is never shared (share false)");
    /* a damaged token is refused before anything (the resume itself:
     * master_state_order_resume_test) */
    spec = det_spec("j", 1, 2);
    const void *tok = "SLRT";
    size_t tok_len = 4;
    cr_assert_eq(sl_master_state_job_resume(m, &spec, tok, tok_len, &err), SL_ERR_TRUNCATED);
    cr_assert_str_eq(err.msg, "resume token: 4 bytes");
    /* a dynamic job counts nothing and leases without a window */
    spec = det_spec("j", 1, 0);
    spec.deterministic = false;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_batches_counted(m, "j", 0, 0, 1, 3, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "batches counted: job 'j' is not in the deterministic order");
    uint64_t g, b;
    for (uint32_t i = 0; i < 5; i++)
        lease(m, &g);
    cr_assert_not(sl_master_state_order_base(m, "j", 0, 0, &b));
    char *d = ml_dump(m, ALLOC);
    cr_assert_null(strstr(d, " order "), "%s", d);
    free(d);
    check(m);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* A deterministic job's life for the allocation failure walk
 * (master_life.h): leases in the window, counts, a split whose rows are
 * all committed before its count (leased again, counted, done), a
 * compaction, a lease the moved window allows. */
typedef struct life {
    ml_life_t b;
    uint64_t gen[6];
} life_t;

enum { LIFE_STEPS = 16 };

static sl_err_t life_lease(life_t *x, const char *w, uint32_t want, sl_error_t *err)
{
    sl_master_lease_t l;
    sl_err_t rc = sl_master_state_lease_next(x->b.m, "j", w, 0, &l, err);
    if (rc != SL_OK) return rc;
    cr_assert_eq(l.split, want);
    x->gen[want] = l.generation;
    return SL_OK;
}

static sl_err_t life_commit(life_t *x, uint32_t split, uint64_t nonce, sl_error_t *err)
{
    sl_master_commit_t c = {"j", 0, split, x->gen[split], 0, g_rows[split], "c", nonce, 10};
    sl_master_commit_result_t res = sl_master_state_commit_batch(x->b.m, &c, err);
    return res == SL_MASTER_COMMIT_ERROR ? err->code
           : res != SL_MASTER_COMMITTED  ? SL_ERR_INVALID
                                         : SL_OK;
}

static sl_err_t life_step(void *life, int step, sl_error_t *err)
{
    life_t *x = life;
    switch (step) {
    case 0:
        return ms_open(x->b.dir, &x->b.o, 0, &x->b.m, NULL, err);
    case 1: {
        sl_master_state_job_spec_t spec = det_spec("j", 2, 2);
        spec.spec_json = "{\"id\":\"j\"}";
        return sl_master_state_job_add(x->b.m, &spec, err);
    }
    case 2:
        return life_lease(x, "w1", 0, err);
    case 3:
        return sl_master_state_batches_counted(x->b.m, "j", 0, 0, x->gen[0], 3, err);
    case 4:
        return life_lease(x, "w2", 2, err);
    case 5:
        return life_commit(x, 0, 1, err);
    case 6:
        return life_lease(x, "w1", 3, err);
    case 7:
        return life_commit(x, 3, 2, err);
    case 8: {
        sl_master_read_result_t rr =
            sl_master_state_split_read(x->b.m, "j", 0, 3, x->gen[3], NULL, 0, err);
        return rr == SL_MASTER_READ_ERROR     ? err->code
               : rr != SL_MASTER_READ_PENDING ? SL_ERR_INVALID
                                              : SL_OK;
    }
    case 9:
        return sl_master_state_batches_counted(x->b.m, "j", 0, 2, x->gen[2], 2, err);
    case 10:
        return life_lease(x, "w3", 3, err);
    case 11:
        return sl_master_state_batches_counted(x->b.m, "j", 0, 3, x->gen[3], 4, err);
    case 12:
        return ms_sync(x->b.m, err);
    case 13:
        return ms_compact(x->b.m, err);
    case 14:
        return life_lease(x, "w2", 4, err);
    case 15:
        return ms_sync(x->b.m, err);
    }
    return SL_ERR_INVALID;
}

Test(master_state_order, every_allocation_failure_is_a_clean_error)
{
    make_splits();
    ml_ops_t ops = {.steps = LIFE_STEPS,
                    .size = sizeof(life_t),
                    .opts = {.lease_timeout_ms = 100000},
                    .step = life_step};
    char *end = NULL;
    uint64_t walked = ml_walk(&ops, &g_ta, &end);
    cr_assert_gt(walked, LIFE_STEPS);
    /* the life did what it says: 0, 1 (empty) and 3 done, 2 and 4 leased */
    cr_assert(strstr(end, " order window 2 prefix 4 counts 0:3 1:0 2:2 3:4\n") != NULL, "%s", end);
    cr_assert(strstr(end, "pending 1 leased 2 done 3") != NULL, "%s", end);
    free(end);
    tu_alloc_assert_clean(&g_ta);
}

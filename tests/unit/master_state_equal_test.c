/* Equal batches per rank (src/dpp/master/state/state_equal.c): the master counts
 * the batches each rank of a static-sharding job committed in an epoch,
 * answers with the epoch's quota (the lowest count so far, final once a
 * rank whose share is done holds it), counts what the ranks above it drop,
 * and the state replayed from the journal, or restored from a snapshot,
 * equals the live one at every step. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "testutil.h"

static tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_state_equal, .init = init_alloc);

enum { N = 6, EPOCHS = 3 };
/* rank a holds split 5 (600 rows: 6 batches of 100), rank b the five
 * splits of 100 rows (5 batches): b has one batch fewer every epoch */
static const uint64_t ROWS[N] = {100, 100, 100, 100, 100, 600};
static sl_wh_split_t g_splits[N];

static void make_splits(void)
{
    uint64_t first = 0;
    for (uint32_t i = 0; i < N; i++) {
        g_splits[i] = (sl_wh_split_t){.path = "ds=2026-01-01/part-0.slc",
                                      .partition = "ds=2026-01-01",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = first,
                                      .num_rows = ROWS[i]};
        first += ROWS[i];
    }
}

static char *dump_of(const sl_master_state_t *m)
{
    char *d;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_dump(m, &d, &len, &err), SL_OK, "%s", err.msg);
    char *copy = strdup(d);
    sl_free(ALLOC, d, len + 1);
    return copy;
}

typedef struct life {
    const char *dir;
    sl_master_state_opts_t o;
    sl_master_state_t *m;
    uint32_t rank[N];
    uint64_t gen[N];
    uint32_t epoch[N];
    uint64_t at[N]; /* rows of the split committed in its epoch */
    uint64_t nonce;
} life;

/* Reopen from the journal (compact first: from a snapshot): the dump, the
 * batch counts and quotas with it, must equal the live one. */
static void reopen(life *x, bool compact)
{
    sl_error_t err = {0};
    cr_assert_eq(ms_sync(x->m, &err), SL_OK, "%s", err.msg);
    if (compact) cr_assert_eq(ms_compact(x->m, &err), SL_OK, "%s", err.msg);
    char *live = dump_of(x->m);
    cr_assert_not_null(strstr(live, " equal batches dropped "), "%s", live);
    ms_destroy(x->m);
    cr_assert_eq(ms_open(x->dir, &x->o, 0, &x->m, NULL, &err), SL_OK, "%s", err.msg);
    char *replayed = dump_of(x->m);
    cr_assert_str_eq(replayed, live, "%s differs from the live state",
                     compact ? "the snapshot" : "replay");
    free(live);
    free(replayed);
    sl_master_lease_ref_t held[N];
    uint32_t nh = 0;
    for (uint32_t i = 0; i < N; i++)
        if (x->gen[i] != 0) held[nh++] = (sl_master_lease_ref_t){"j", x->epoch[i], i, x->gen[i]};
    cr_assert_eq(sl_master_state_register(x->m, "w", held, nh, 0, NULL, NULL, &err), SL_OK, "%s",
                 err.msg);
}

static void lease_pending(life *x)
{
    sl_error_t err = {0};
    sl_master_lease_t l;
    while (sl_master_state_lease_next(x->m, "j", "w", 0, &l, &err) == SL_OK) {
        x->gen[l.split] = l.generation;
        x->epoch[l.split] = l.epoch;
        x->at[l.split] = 0;
    }
}

/* Commit the next `batches` batches of 100 rows of split i. */
static void commit(life *x, uint32_t i, uint32_t batches)
{
    sl_error_t err = {0};
    char client[8];
    snprintf(client, sizeof client, "c%u", x->rank[i]);
    cr_assert_neq(x->gen[i], 0, "split %u is leased", i);
    for (uint32_t k = 0; k < batches; k++) {
        uint64_t at = x->at[i];
        /* samples: the rows the filters kept, of the batch's place */
        sl_master_commit_t c = {
            "j",       x->epoch[i], i,
            x->gen[i], at,          at + 100,
            client,    ++x->nonce,  (uint32_t)(90 + at / 100 + 3 * x->epoch[i])};
        sl_master_commit_result_t res = sl_master_state_commit_batch(x->m, &c, &err);
        cr_assert_eq(res, SL_MASTER_COMMITTED, "split %u rows %llu: %d %s", i,
                     (unsigned long long)at, res, err.msg);
        x->at[i] = at + 100;
    }
    if (x->at[i] == ROWS[i]) x->gen[i] = 0;
}

static void want_quota(life *x, uint32_t epoch, uint64_t quota, bool final)
{
    uint64_t q;
    bool f;
    cr_assert(sl_master_state_equal_quota(x->m, "j", epoch, &q, &f));
    cr_assert_eq(q, quota, "epoch %u: quota %llu, want %llu", epoch, (unsigned long long)q,
                 (unsigned long long)quota);
    cr_assert_eq(f, final, "epoch %u: final %d, want %d", epoch, f, final);
}

static void want_status(life *x, uint32_t epoch, uint64_t dropped, uint64_t samples)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_status(x->m, "j", &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.epoch, epoch); /* epochs once finished */
    cr_assert(st.equal_batches_per_rank);
    cr_assert_eq(st.equal_dropped_batches, dropped, "dropped %llu, want %llu",
                 (unsigned long long)st.equal_dropped_batches, (unsigned long long)dropped);
    cr_assert_eq(st.equal_dropped_samples, samples, "dropped %llu samples, want %llu",
                 (unsigned long long)st.equal_dropped_samples, (unsigned long long)samples);
}

Test(master_state_equal, every_rank_gets_the_lowest_count_and_replay_agrees)
{
    make_splits();
    char *dir = tu_mkdtemp("master-equal");
    life x = {.dir = dir, .o = {.lease_timeout_ms = 60000, .allocator = ALLOC}};
    sl_error_t err = {0};
    cr_assert_eq(ms_open(x.dir, &x.o, 0, &x.m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {.job_id = "j",
                                       .splits = g_splits,
                                       .num_splits = N,
                                       .epochs = EPOCHS,
                                       .seed = 3,
                                       .shuffle = true,
                                       .ranks = 2,
                                       .static_sharding = true,
                                       .equal_batches_per_rank = true};
    cr_assert_eq(sl_master_state_job_add(x.m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_assign_static(x.m, "j", 2, x.rank, NULL, &err), SL_OK);
    uint32_t a = x.rank[5];
    for (uint32_t i = 0; i < 5; i++)
        cr_assert_eq(x.rank[i], 1 - a, "split %u", i);
    lease_pending(&x);
    want_quota(&x, 0, 0, false);

    /* a commits 2 batches: b has none, the quota stays 0 */
    commit(&x, 5, 2);
    want_quota(&x, 0, 0, false);
    reopen(&x, false);
    /* b reads its whole share (5 batches) and begins epoch 1; a, which
     * still reads, has the lowest count */
    for (uint32_t i = 0; i < 5; i++)
        commit(&x, i, 1);
    want_quota(&x, 0, 2, false);
    want_quota(&x, 1, 0, false);
    want_status(&x, 0, 0, 0);
    reopen(&x, true);
    /* a reaches b's 5: b's count is final and the lowest: the quota is
     * final, whatever a commits after it */
    commit(&x, 5, 3);
    want_quota(&x, 0, 5, true);
    reopen(&x, false);
    /* a's sixth batch ends the job's epoch 0: one batch dropped, rows
     * [500, 600) of 90 + 5 samples */
    commit(&x, 5, 1);
    want_quota(&x, 0, 5, true);
    want_status(&x, 1, 1, 95);
    reopen(&x, true);
    want_quota(&x, 0, 5, true);

    /* epoch 1 the other way round: a first. b, at 3 batches, is lowest
     * but not done; at 5 it is done and lowest */
    lease_pending(&x);
    commit(&x, 5, 6);
    for (uint32_t i = 0; i < 3; i++)
        commit(&x, i, 1);
    want_quota(&x, 1, 3, false);
    reopen(&x, false);
    commit(&x, 3, 1);
    commit(&x, 4, 1);
    want_quota(&x, 1, 5, true);
    want_status(&x, 2, 2, 95 + 98);
    reopen(&x, true);

    /* epoch 2 (the last) */
    lease_pending(&x);
    for (uint32_t i = 0; i < 5; i++)
        commit(&x, i, 1);
    want_quota(&x, 2, 0, false);
    commit(&x, 5, 6);
    want_status(&x, EPOCHS, 3, 95 + 98 + 101);
    want_quota(&x, 2, 5, true);
    want_quota(&x, 1, 5, true);
    reopen(&x, true);
    want_quota(&x, 2, 5, true);
    want_status(&x, EPOCHS, 3, 95 + 98 + 101);
    cr_assert_eq(sl_master_state_check(x.m, &err), SL_OK, "%s", err.msg);
    ms_destroy(x.m);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* Dynamic sharding: a batch is the committing client's rank's; no count
 * is final before the epoch ends, when every rank's count is. */
Test(master_state_equal, dynamic_sharding_counts_by_the_clients_rank)
{
    make_splits();
    char *dir = tu_mkdtemp("master-equal-dyn");
    life x = {.dir = dir, .o = {.lease_timeout_ms = 60000, .allocator = ALLOC}};
    sl_error_t err = {0};
    cr_assert_eq(ms_open(x.dir, &x.o, 0, &x.m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {.job_id = "j",
                                       .splits = g_splits,
                                       .num_splits = N,
                                       .epochs = 2,
                                       .ranks = 2,
                                       .equal_batches_per_rank = true};
    cr_assert_eq(sl_master_state_job_add(x.m, &spec, &err), SL_OK, "%s", err.msg);
    for (uint32_t e = 0; e < 2; e++) {
        lease_pending(&x);
        /* rank 0 commits splits 0..3 and 200 rows of split 5 (6 batches),
         * rank 1 split 4 and the rest of split 5 (5 batches) */
        for (uint32_t i = 0; i < N; i++) {
            for (uint64_t at = 0; at < ROWS[i]; at += 100) {
                uint32_t rank = i < 4 || (i == 5 && at < 200) ? 0 : 1;
                char client[8];
                snprintf(client, sizeof client, "c%u", rank);
                sl_master_commit_t c = {"j",      x.epoch[i], i,
                                        x.gen[i], at,         at + 100,
                                        client,   ++x.nonce,  (uint32_t)(10 + at / 100 + e)};
                cr_assert_eq(sl_master_state_commit_ranked(x.m, &c, rank + 1, &err),
                             SL_MASTER_COMMITTED, "%s", err.msg);
            }
            x.gen[i] = 0;
            if (i == 4) {
                /* rank 1 has 1 batch, rank 0 four: not final before the end */
                want_quota(&x, e, 1, false);
                reopen(&x, e == 0);
            }
        }
        want_quota(&x, e, 5, true);
    }
    /* each epoch rank 0's sixth batch (split 5 rows [100, 200): 11 + e
     * samples) was above the quota */
    want_status(&x, 2, 2, 11 + 12);
    reopen(&x, true);
    want_status(&x, 2, 2, 11 + 12);
    ms_destroy(x.m);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state_equal, refused_for_one_rank)
{
    make_splits();
    sl_master_state_opts_t o = {.allocator = ALLOC};
    sl_master_state_t *m;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {.job_id = "j",
                                       .splits = g_splits,
                                       .num_splits = N,
                                       .epochs = 1,
                                       .ranks = 1,
                                       .equal_batches_per_rank = true};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "job 'j': equal_batches_per_rank needs a table job of 2 or more "
                              "ranks (a Kafka job's epoch does not end)");
    uint64_t q;
    bool f;
    cr_assert_not(sl_master_state_equal_quota(m, "j", 0, &q, &f));
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

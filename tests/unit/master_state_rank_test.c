/* Per-rank epochs of a static-sharding job (src/dpp/master/state/state_rank.c):
 * a rank whose share of its epoch is done begins its next epoch on its own
 * while another rank still reads, at most one epoch ahead of the job; the
 * job's epoch is the lowest of its ranks'; commits name their split's
 * epoch; a rank's resume token is of its own epoch; and the state
 * replayed from the journal, or restored from a snapshot, equals the live
 * one at every step. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "master.pb-c.h"
#include "testutil.h"

static tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_state_rank, .init = init_alloc);

enum { N = 6, EPOCHS = 3 };
/* rank a (the one with split 5's 600 rows) holds split 5 alone; rank b
 * holds the five splits of 100 rows: b's share is 500 rows, a's 600 */
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

/* The dump of m, allocated off the counted path. */
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
    uint32_t rank[N]; /* of each split */
    uint64_t gen[N];  /* the live lease's generation, 0: none */
    uint32_t epoch[N];
    uint64_t nonce;
} life;

/* Reopen from the journal (compact first: from a snapshot): the dump must
 * equal the live one; the leases found are named by worker w's
 * registration, so that they stay live. */
static void reopen(life *x, bool compact)
{
    sl_error_t err = {0};
    cr_assert_eq(ms_sync(x->m, &err), SL_OK, "%s", err.msg);
    if (compact) cr_assert_eq(ms_compact(x->m, &err), SL_OK, "%s", err.msg);
    char *live = dump_of(x->m);
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

/* Lease every pending split; each lease is of its rank's epoch. */
static uint32_t lease_pending(life *x, const uint32_t *want_epoch_of_rank)
{
    sl_error_t err = {0};
    sl_master_lease_t l;
    uint32_t n = 0;
    while (sl_master_state_lease_next(x->m, "j", "w", 0, &l, &err) == SL_OK) {
        cr_assert_eq(l.rank_plus_one, x->rank[l.split] + 1);
        cr_assert_eq(l.epoch, want_epoch_of_rank[x->rank[l.split]], "split %u: epoch %u", l.split,
                     l.epoch);
        x->gen[l.split] = l.generation;
        x->epoch[l.split] = l.epoch;
        n++;
    }
    return n;
}

/* Commit split i whole, in batches of 100 rows, by rank r's client. */
static void read_split(life *x, uint32_t i)
{
    sl_error_t err = {0};
    char client[8];
    snprintf(client, sizeof client, "c%u", x->rank[i]);
    for (uint64_t at = 0; at < ROWS[i]; at += 100) {
        sl_master_commit_result_t res = sl_master_state_commit(
            x->m, "j", x->epoch[i], i, x->gen[i], at, at + 100, client, ++x->nonce, &err);
        cr_assert_eq(res, SL_MASTER_COMMITTED, "split %u rows %llu: %d %s", i,
                     (unsigned long long)at, res, err.msg);
    }
    x->gen[i] = 0;
}

static uint32_t job_epoch(life *x)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_status(x->m, "j", &st, &err), SL_OK, "%s", err.msg);
    return st.finished ? EPOCHS : st.epoch;
}

/* Rank's token (its client's): its epoch, and how many rows it lists as
 * handed out in that epoch (docs/PROTOCOL.md "Resume tokens": a 16-byte
 * header, then ResumeTokenV4). */
static void token_of(life *x, uint32_t rank, uint32_t *epoch, uint64_t *handed)
{
    char client[8];
    snprintf(client, sizeof client, "c%u", rank);
    sl_master_token_req_t req = {.job_id = "j", .client_id = client, .rank = rank, .world_size = 2};
    void *buf;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_token_take(x->m, &req, &buf, &len, &err), SL_OK, "%s", err.msg);
    Sluice__Master__ResumeTokenV4 *t =
        sluice__master__resume_token_v4__unpack(NULL, len - 16, (const uint8_t *)buf + 16);
    cr_assert_not_null(t);
    *epoch = t->epoch;
    *handed = 0;
    for (size_t k = 0; t->handed != NULL && k < t->handed->n_from; k++)
        *handed += t->handed->to[k] - t->handed->from[k];
    sluice__master__resume_token_v4__free_unpacked(t, NULL);
    sl_free(ALLOC, buf, len);
}

Test(master_state_rank, a_rank_that_read_its_share_goes_on_and_replay_agrees)
{
    make_splits();
    char *dir = tu_mkdtemp("master-rank");
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
                                       .static_sharding = true};
    cr_assert_eq(sl_master_state_job_add(x.m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_assign_static(x.m, "j", 2, x.rank, NULL, &err), SL_OK);
    uint32_t a = x.rank[5], b = 1 - a;
    for (uint32_t i = 0; i < 5; i++)
        cr_assert_eq(x.rank[i], b, "split %u", i);
    uint32_t ep[2] = {0, 0};
    cr_assert_eq(lease_pending(&x, ep), N);

    /* b reads its share of epoch 0 while a still reads: b begins epoch 1
     * on its own, the job stays in 0 */
    for (uint32_t i = 0; i < 5; i++)
        read_split(&x, i);
    cr_assert_eq(job_epoch(&x), 0);
    ep[b] = 1;
    reopen(&x, false);
    cr_assert_eq(lease_pending(&x, ep), 5, "b's five splits of epoch 1");
    /* a commit naming the job's epoch on a split of b's: stale */
    char why[SL_ERROR_MSG_MAX];
    sl_master_commit_result_t res =
        sl_master_state_commit(x.m, "j", 0, 0, x.gen[0], 0, 100, "c9", 999, &err);
    snprintf(why, sizeof why, "%s", err.msg);
    cr_assert_eq(res, SL_MASTER_STALE_EPOCH, "%d", res);
    cr_assert_str_eq(why, "commit: job 'j' split 0 is in epoch 1, not 0");
    read_split(&x, 0);
    read_split(&x, 1);
    /* b's token is of its epoch (1: the 200 rows of its two splits read
     * there), a's of the job's (0: nothing read) */
    uint32_t eb, ea;
    uint64_t hb, ha;
    token_of(&x, b, &eb, &hb);
    token_of(&x, a, &ea, &ha);
    cr_assert_eq(eb, 1);
    cr_assert_eq(hb, 200);
    cr_assert_eq(ea, 0);
    cr_assert_eq(ha, 0);
    reopen(&x, true);
    /* b finishes epoch 1 but goes no further than one epoch ahead */
    for (uint32_t i = 2; i < 5; i++)
        read_split(&x, i);
    cr_assert_eq(lease_pending(&x, ep), 0, "b waits: one epoch ahead at most");
    cr_assert_eq(job_epoch(&x), 0);
    reopen(&x, false);

    /* a ends epoch 0: the job is in 1, where b's share is done: b begins
     * epoch 2 (the last), a epoch 1 */
    read_split(&x, 5);
    cr_assert_eq(job_epoch(&x), 1);
    ep[a] = 1;
    ep[b] = 2;
    reopen(&x, true);
    cr_assert_eq(lease_pending(&x, ep), N);
    for (uint32_t i = 0; i < 5; i++)
        read_split(&x, i);
    /* b finished; the job has not */
    cr_assert_eq(job_epoch(&x), 1);
    reopen(&x, false);
    read_split(&x, 5);
    cr_assert_eq(job_epoch(&x), 2);
    ep[a] = 2;
    cr_assert_eq(lease_pending(&x, ep), 1, "a's split of the last epoch");
    reopen(&x, true);
    read_split(&x, 5);
    cr_assert_eq(job_epoch(&x), EPOCHS, "finished");
    reopen(&x, false);
    cr_assert_eq(sl_master_state_check(x.m, &err), SL_OK, "%s", err.msg);
    ms_destroy(x.m);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

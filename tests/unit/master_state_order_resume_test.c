/* A deterministic job resumed (state_order_skip.c, docs/DESIGN.md "A
 * deterministic order", *Resume*): the union of a checkpoint's tokens
 * becomes the resumed epoch's skip rows, which a LEASE names; a split
 * wholly skipped is counted (0 batches) and DONE at once, so the bases
 * count only the batches left; rows committed in the resumed run are not
 * skip rows; the skip rows survive a reopen from the journal and from a
 * snapshot and end with their epoch; the next epoch's (JobAdded later)
 * come with it, in replay too; a resume of a resume adds the new
 * run's handed-out rows; a token of the dynamic order cannot resume a
 * deterministic job (the other way is allowed). Every test runs on the
 * counting allocator. */
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

TestSuite(master_state_order_resume, .init = init_alloc);

/* Six splits of one file, rows as given (split 1 has none). Batches of 10
 * rows in the comments below. */
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

static sl_master_state_job_spec_t det_spec(uint32_t ranks, bool deterministic)
{
    return (sl_master_state_job_spec_t){.job_id = "j",
                                        .splits = g_splits,
                                        .num_splits = 6,
                                        .epochs = 2,
                                        .ranks = ranks,
                                        .deterministic = deterministic,
                                        .order_window = deterministic ? 6 : 0};
}

static char *tmp_state_dir(void)
{
    char *d = strdup("/tmp/sluice-order-resume-XXXXXX");
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

static void check(sl_master_state_t *m)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_check(m, &err), SL_OK, "%s", err.msg);
}

/* The next lease (split, generation). */
static uint32_t lease(sl_master_state_t *m, uint64_t *gen)
{
    sl_master_lease_t l;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK, "%s", err.msg);
    *gen = l.generation;
    return l.split;
}

static void commit(sl_master_state_t *m, uint32_t epoch, uint32_t split, uint64_t gen,
                   uint64_t from, uint64_t to, const char *client, uint64_t *nonce)
{
    sl_error_t err = {0};
    cr_assert_eq(
        sl_master_state_commit(m, "j", epoch, split, gen, from, to, client, ++*nonce, &err),
        SL_MASTER_COMMITTED, "%s", err.msg);
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

/* The skip rows of split as "[a,b) [c,d)" ("" when none). */
static void assert_skip(sl_master_state_t *m, uint32_t epoch, uint32_t split, const char *want)
{
    sl_dpp_row_range_t r[8];
    uint32_t n = sl_master_state_order_skip(m, "j", epoch, split, r, 8);
    cr_assert_leq(n, 8);
    char got[256] = "";
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++)
        at += (size_t)snprintf(got + at, sizeof got - at, "%s[%llu,%llu)", i ? " " : "",
                               (unsigned long long)r[i].from_row, (unsigned long long)r[i].to_row);
    cr_assert_str_eq(got, want, "epoch %u split %u", epoch, split);
}

/* Rank rank's token (client "c<rank>" of world), naming undelivered. */
static void *token_of(sl_master_state_t *m, uint32_t rank, uint32_t world,
                      const sl_master_token_exclude_t *undelivered, uint32_t nu, size_t *len)
{
    char name[32];
    snprintf(name, sizeof name, "c%u", rank);
    sl_master_token_req_t req = {.job_id = "j",
                                 .client_id = name,
                                 .rank = rank,
                                 .world_size = world,
                                 .undelivered = undelivered,
                                 .num_undelivered = nu};
    void *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_token_take(m, &req, &t, len, &err), SL_OK, "%s", err.msg);
    return t;
}

static void free_tokens(void **t, size_t *len, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        sl_free(ALLOC, t[i], len[i]);
}

/* The dump's line of the skip rows ("" when none). */
static char *skip_line(const sl_master_state_t *m)
{
    char *d = ml_dump(m, ALLOC);
    const char *at = strstr(d, " order skip");
    char *line = strdup("");
    if (at != NULL) {
        free(line);
        line = strndup(at, strcspn(at, "\n"));
    }
    free(d);
    return line;
}

/* The first run, two ranks: rank 0 handed out split 0 rows [0,10) and
 * [20,30), rank 1 [10,20) and split 2 whole (two batches of 25, counted);
 * rank 1 committed split 3 [40,50) but still holds it (undelivered). */
static void first_run(sl_master_state_t *m, void **t, size_t *len)
{
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = det_spec(2, true);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    uint64_t g0, g2, g3, nonce = 0;
    cr_assert_eq(lease(m, &g0), 0);
    cr_assert_eq(lease(m, &g2), 2);
    cr_assert_eq(lease(m, &g3), 3);
    commit(m, 0, 0, g0, 0, 10, "c0", &nonce);
    commit(m, 0, 0, g0, 10, 20, "c1", &nonce);
    commit(m, 0, 0, g0, 20, 30, "c0", &nonce);
    commit(m, 0, 2, g2, 0, 25, "c0", &nonce);
    commit(m, 0, 2, g2, 25, 50, "c1", &nonce);
    count(m, 0, 2, g2, 2);
    commit(m, 0, 3, g3, 40, 50, "c1", &nonce);
    check(m);
    sl_master_token_exclude_t held = {.epoch = 0, .split = 3, .from_row = 40, .to_row = 50};
    t[0] = token_of(m, 0, 2, NULL, 0, &len[0]);
    t[1] = token_of(m, 1, 2, &held, 1, &len[1]);
}

Test(master_state_order_resume, skip_rows_counts_reopen_and_the_next_epoch)
{
    make_splits();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100000, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    void *t[2];
    size_t len[2];
    first_run(m, t, len);
    ms_destroy(m);

    /* resumed with three ranks on a master of its own (journaled) */
    char *dir = tmp_state_dir();
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = det_spec(3, true);
    cr_assert_eq(sl_master_state_job_resume_ranks(m, &spec, (const void *const *)t, len, 2, &err),
                 SL_OK, "%s", err.msg);
    free_tokens(t, len, 2);
    check(m);
    assert_skip(m, 0, 0, "[0,30)");
    assert_skip(m, 0, 1, "");
    assert_skip(m, 0, 2, "[0,50)");
    assert_skip(m, 0, 3, ""); /* rank 1's held batch is read again */
    assert_skip(m, 1, 0, ""); /* another epoch */
    /* split 2 was handed out whole: 0 batches, DONE; the sequence goes on
     * from split 0's batches left */
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.done, 2, "the empty split 1 and the skipped split 2");
    cr_assert_eq(base_of(m, 0, 0), 0);
    uint64_t g0, g3, nonce = 0;
    cr_assert_eq(lease(m, &g0), 0);
    cr_assert_eq(lease(m, &g3), 3);
    /* a batch of the resumed run committed: committed, not a skip row */
    commit(m, 0, 0, g0, 30, 40, "d0", &nonce);
    assert_skip(m, 0, 0, "[0,30)");
    /* split 0 has 7 batches left; split 2 none */
    count(m, 0, 0, g0, 7);
    cr_assert_eq(base_of(m, 0, 2), 7);
    cr_assert_eq(base_of(m, 0, 3), 7);
    check(m);
    char *skip = skip_line(m);
    cr_assert_str_eq(skip, " order skip 0:[0,30) 2:[0,50)");

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
    cr_assert_str_eq(after, before, "a snapshot mixes skip and committed rows: it keeps both");
    free(after);
    free(before);
    free(skip);
    check(m);
    assert_skip(m, 0, 0, "[0,30)");

    /* the rest of epoch 0; epoch 1 starts with no skip rows */
    commit(m, 0, 0, g0, 40, 100, "d0", &nonce);
    commit(m, 0, 3, g3, 0, 80, "d1", &nonce);
    count(m, 0, 3, g3, 8);
    for (uint32_t s = 4; s < 6; s++) {
        uint64_t g;
        cr_assert_eq(lease(m, &g), s);
        commit(m, 0, s, g, 0, g_rows[s], "d0", &nonce);
        count(m, 0, s, g, g_rows[s] / 10);
    }
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 1);
    assert_skip(m, 1, 0, "");
    skip = skip_line(m);
    cr_assert_str_eq(skip, "");
    free(skip);
    check(m);
    ms_destroy(m);
    rm_state_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* A checkpoint of a resumed run resumed again: the skip rows are the
 * first resume's plus what the second run handed out. */
Test(master_state_order_resume, a_resume_of_a_resume)
{
    make_splits();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100000, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    void *t[2];
    size_t len[2];
    first_run(m, t, len);
    ms_destroy(m);
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = det_spec(1, true);
    cr_assert_eq(sl_master_state_job_resume_ranks(m, &spec, (const void *const *)t, len, 2, &err),
                 SL_OK, "%s", err.msg);
    free_tokens(t, len, 2);
    /* one rank hands out split 0 [30,50) and split 3 [0,10) */
    uint64_t g0, g3, nonce = 0;
    cr_assert_eq(lease(m, &g0), 0);
    cr_assert_eq(lease(m, &g3), 3);
    commit(m, 0, 0, g0, 30, 50, "c0", &nonce);
    commit(m, 0, 3, g3, 0, 10, "c0", &nonce);
    size_t l1;
    void *t1 = token_of(m, 0, 1, NULL, 0, &l1);
    ms_destroy(m);
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    spec = det_spec(4, true);
    cr_assert_eq(sl_master_state_job_resume_ranks(m, &spec, (const void *const *)&t1, &l1, 1, &err),
                 SL_OK, "%s", err.msg);
    sl_free(ALLOC, t1, l1);
    assert_skip(m, 0, 0, "[0,50)");
    assert_skip(m, 0, 2, "[0,50)");
    assert_skip(m, 0, 3, "[0,10)");
    check(m);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* Tokens of the next epoch: rank 0 still holds a batch of epoch 0 when
 * both take their tokens in epoch 1. The resumed job starts in epoch 0
 * (that batch left), and epoch 1 begins with the rows handed out in it
 * (JobAdded `later`) as its skip rows: in replay too. */
Test(master_state_order_resume, the_next_epochs_skip_rows_come_with_it)
{
    make_splits();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100000, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = det_spec(2, true);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    uint64_t g[6], nonce = 0;
    for (uint32_t s = 0; s < 6; s++) {
        if (g_rows[s] == 0) continue;
        cr_assert_eq(lease(m, &g[s]), s);
    }
    for (uint32_t s = 0; s < 6; s++) {
        if (g_rows[s] == 0) continue;
        commit(m, 0, s, g[s], 0, g_rows[s] - 10, s % 2 ? "c1" : "c0", &nonce);
        commit(m, 0, s, g[s], g_rows[s] - 10, g_rows[s], "c0", &nonce);
        count(m, 0, s, g[s], g_rows[s] / 10);
    }
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 1);
    uint64_t h;
    cr_assert_eq(lease(m, &h), 0);
    commit(m, 1, 0, h, 0, 10, "c1", &nonce);
    commit(m, 1, 0, h, 10, 20, "c0", &nonce);
    /* rank 0 has not handed out split 5's last batch of epoch 0 */
    sl_master_token_exclude_t held = {.epoch = 0, .split = 5, .from_row = 50, .to_row = 60};
    void *t[2];
    size_t len[2];
    t[0] = token_of(m, 0, 2, &held, 1, &len[0]);
    t[1] = token_of(m, 1, 2, NULL, 0, &len[1]);
    ms_destroy(m);

    char *dir = tmp_state_dir();
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    spec = det_spec(3, true);
    cr_assert_eq(sl_master_state_job_resume_ranks(m, &spec, (const void *const *)t, len, 2, &err),
                 SL_OK, "%s", err.msg);
    free_tokens(t, len, 2);
    check(m);
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 0);
    cr_assert_eq(st.done, 5, "every split but 5 handed out whole (or empty)");
    assert_skip(m, 0, 5, "[0,50)");
    cr_assert_eq(base_of(m, 0, 5), 0, "the epoch's sequence is split 5's last batch");
    uint64_t g5;
    cr_assert_eq(lease(m, &g5), 5);
    commit(m, 0, 5, g5, 50, 60, "d0", &nonce);
    count(m, 0, 5, g5, 1);
    /* epoch 1 began with its later rows as skip rows */
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 1);
    assert_skip(m, 1, 0, "[0,20)");
    assert_skip(m, 1, 5, "");
    char *skip = skip_line(m);
    cr_assert_str_eq(skip, " order skip 0:[0,20)");
    free(skip);
    check(m);
    uint64_t g0;
    cr_assert_eq(lease(m, &g0), 0);
    count(m, 1, 0, g0, 8);
    cr_assert_eq(base_of(m, 1, 2), 8);
    /* reopened from the journal: EpochAdvanced makes them again */
    cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
    char *before = ml_dump(m, ALLOC);
    ms_destroy(m);
    cr_assert_eq(ms_open(dir, &o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    char *after = ml_dump(m, ALLOC);
    cr_assert_str_eq(after, before);
    free(after);
    free(before);
    check(m);
    ms_destroy(m);
    rm_state_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* A token of the dynamic order cannot resume a deterministic job (its
 * batches were cut otherwise), named, nor one of another plan; one of the
 * deterministic order resumes a dynamic job (any rows resume it exactly). */
Test(master_state_order_resume, tokens_of_the_other_order)
{
    make_splits();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100000, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = det_spec(1, false);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    uint64_t g, nonce = 0;
    cr_assert_eq(lease(m, &g), 0);
    commit(m, 0, 0, g, 0, 10, "c0", &nonce);
    size_t ld;
    void *dyn = token_of(m, 0, 1, NULL, 0, &ld);
    ms_destroy(m);
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    spec = det_spec(2, true);
    cr_assert_eq(
        sl_master_state_job_resume_ranks(m, &spec, (const void *const *)&dyn, &ld, 1, &err),
        SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "resume token of job 'j' taken in \"order\": \"dynamic\" (or by a "
                              "master before deterministic resumes); the job is in \"order\": "
                              "\"deterministic\", whose sequence cannot continue from it: resume "
                              "it in the dynamic order, or start it again");
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_ERR_NOT_FOUND, "nothing added");
    sl_free(ALLOC, dyn, ld);
    ms_destroy(m);

    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    void *t[2];
    size_t len[2];
    first_run(m, t, len);
    ms_destroy(m);
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    /* another plan (its batches cut otherwise): refused, nothing added */
    spec = det_spec(3, true);
    spec.plan_fingerprint = 0x1234;
    cr_assert_eq(sl_master_state_job_resume_ranks(m, &spec, (const void *const *)t, len, 2, &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "token 1 of 2: resume token of job 'j' taken with another plan "
                              "(fingerprint 0000000000000000, the job's 0000000000001234: its "
                              "batch size, filters, transforms, seed or source differ): the "
                              "deterministic sequence cannot continue from it");
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_ERR_NOT_FOUND);
    spec = det_spec(3, false);
    spec.plan_fingerprint = 0x1234; /* the dynamic order continues from any rows */
    cr_assert_eq(sl_master_state_job_resume_ranks(m, &spec, (const void *const *)t, len, 2, &err),
                 SL_OK, "%s", err.msg);
    free_tokens(t, len, 2);
    assert_skip(m, 0, 0, ""); /* a dynamic job has none */
    cr_assert_eq(sl_master_state_job_status(m, "j", &st, &err), SL_OK);
    cr_assert_eq(st.done, 2);
    check(m);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* A resumed deterministic job's life for the allocation failure walk
 * (master_life.h): the resume from first_run's tokens, leases, a commit,
 * counts, a compaction (the snapshot keeps the skip rows), a reopen. */
typedef struct life {
    ml_life_t b;
    uint64_t gen[6];
} life_t;

enum { LIFE_STEPS = 9 };
static void *g_tok[2];
static size_t g_tok_len[2];

static sl_err_t life_lease(life_t *x, uint32_t want, sl_error_t *err)
{
    sl_master_lease_t l;
    sl_err_t rc = sl_master_state_lease_next(x->b.m, "j", "w", 0, &l, err);
    if (rc != SL_OK) return rc;
    cr_assert_eq(l.split, want);
    x->gen[want] = l.generation;
    return SL_OK;
}

static sl_err_t life_step(void *life, int step, sl_error_t *err)
{
    life_t *x = life;
    switch (step) {
    case 0:
        return ms_open(x->b.dir, &x->b.o, 0, &x->b.m, NULL, err);
    case 1: {
        sl_master_state_job_spec_t spec = det_spec(3, true);
        spec.spec_json = "{\"id\":\"j\"}";
        return sl_master_state_job_resume_ranks(x->b.m, &spec, (const void *const *)g_tok,
                                                g_tok_len, 2, err);
    }
    case 2:
        return life_lease(x, 0, err);
    case 3: {
        sl_master_commit_t c = {"j", 0, 0, x->gen[0], 30, 40, "d0", 1, 10};
        sl_master_commit_result_t res = sl_master_state_commit_batch(x->b.m, &c, err);
        return res == SL_MASTER_COMMIT_ERROR ? err->code
               : res != SL_MASTER_COMMITTED  ? SL_ERR_INVALID
                                             : SL_OK;
    }
    case 4:
        return sl_master_state_batches_counted(x->b.m, "j", 0, 0, x->gen[0], 7, err);
    case 5:
        return ms_sync(x->b.m, err);
    case 6:
        return ms_compact(x->b.m, err);
    case 7:
        return life_lease(x, 3, err);
    case 8:
        return ms_sync(x->b.m, err);
    }
    return SL_ERR_INVALID;
}

Test(master_state_order_resume, every_allocation_failure_is_a_clean_error)
{
    make_splits();
    sl_master_state_opts_t o = {.lease_timeout_ms = 100000, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    void *t[2];
    size_t len[2];
    first_run(m, t, len);
    ms_destroy(m);
    /* off the counted path: the walk checks it is clean between lives */
    for (int i = 0; i < 2; i++) {
        g_tok[i] = malloc(len[i]);
        memcpy(g_tok[i], t[i], len[i]);
        g_tok_len[i] = len[i];
    }
    free_tokens(t, len, 2);
    tu_alloc_assert_clean(&g_ta);
    ml_ops_t ops = {.steps = LIFE_STEPS,
                    .size = sizeof(life_t),
                    .opts = {.lease_timeout_ms = 100000},
                    .step = life_step};
    char *end = NULL;
    uint64_t walked = ml_walk(&ops, &g_ta, &end);
    cr_assert_gt(walked, LIFE_STEPS);
    cr_assert(strstr(end, " order skip 0:[0,30) 2:[0,50)\n") != NULL, "%s", end);
    free(end);
    for (int i = 0; i < 2; i++)
        free(g_tok[i]);
    tu_alloc_assert_clean(&g_ta);
}

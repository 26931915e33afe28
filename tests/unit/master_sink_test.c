/* The master's state with no directory (dpp/master/state/state.h, issue 26):
 * its records go to a record sink, here one that keeps them in memory.
 * Applied to a fresh state through the replay entry point
 * (sl_master_state_apply_record) they give the live state's dump, after
 * every operation of a random run; a sink that fails fails the transition
 * and changes nothing; a state with no sink journals nothing. No file is
 * opened. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "testutil.h"

#define N 12

static tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_sink, .init = init_alloc);

static sl_wh_split_t g_splits[N];

static void make_splits(void)
{
    for (uint32_t i = 0; i < N; i++)
        g_splits[i] = (sl_wh_split_t){.path = "ds=1/part-0.slc",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = 40 * i,
                                      .num_rows = 40};
}

/* The sink of these tests: every record kept (each its own malloc'd
 * copy, off the counted allocator), or a failure while fail is set. */
typedef struct kept {
    uint8_t *rec[4096];
    size_t len[4096];
    uint32_t n;
    bool fail;
} kept;

static sl_err_t keep(void *ctx, const void *record, size_t len, sl_error_t *err)
{
    kept *k = ctx;
    if (k->fail) return sl_error_set(err, SL_ERR_IO, "test sink: injected failure");
    cr_assert_lt(k->n, 4096, "more records than the test keeps");
    k->rec[k->n] = malloc(len + 1);
    memcpy(k->rec[k->n], record, len);
    k->len[k->n++] = len;
    return SL_OK;
}

static void kept_free(kept *k)
{
    for (uint32_t i = 0; i < k->n; i++)
        free(k->rec[i]);
    k->n = 0;
}

static sl_master_state_t *fresh(void)
{
    sl_master_state_opts_t o = {.lease_timeout_ms = 100, .allocator = ALLOC};
    sl_master_state_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK, "%s", err.msg);
    return m;
}

static char *dump(const sl_master_state_t *m)
{
    char *d;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_dump(m, &d, &len, &err), SL_OK, "%s", err.msg);
    char *copy = strdup(d);
    sl_free(ALLOC, d, len + 1);
    return copy;
}

/* A fresh state with every kept record applied (as a restart replays the
 * journal). */
static char *replayed_dump(const kept *k)
{
    sl_master_state_t *r = fresh();
    sl_error_t err = {0};
    for (uint32_t i = 0; i < k->n; i++)
        cr_assert_eq(sl_master_state_apply_record(r, k->rec[i], k->len[i], i, &err), SL_OK,
                     "record %u: %s", i, err.msg);
    char *d = dump(r);
    sl_master_state_destroy(r);
    return d;
}

Test(master_sink, records_replayed_give_the_live_state_after_every_operation)
{
    make_splits();
    uint64_t seed = tu_seed("master_sink.records_replayed");
    uint64_t s = seed;
    kept *k = calloc(1, sizeof *k);
    sl_master_state_t *m = fresh();
    sl_error_t err = {0};
    sl_master_record_sink_t sink = {keep, k};
    cr_assert_eq(sl_master_state_set_sink(m, &sink, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 1000, .shuffle = true};
    spec.seed = seed; /* 1000 epochs: the job outlives the run */
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(k->n, 1, "one JobAdded record");
    sl_master_lease_t held[3];
    uint64_t tfrom[3], tto[3]; /* the lease's first todo range (todo is borrowed) */
    bool has[3] = {false, false, false};
    uint64_t now = 0, nonce = 0;
    for (int op = 0; op < 400; op++) {
        uint32_t w = (uint32_t)tu_below(&s, 3);
        char name[8];
        snprintf(name, sizeof name, "w%u", w);
        now += tu_below(&s, 30);
        if (!has[w]) {
            sl_err_t rc = sl_master_state_lease_next(m, "j", name, now, &held[w], &err);
            cr_assert(rc == SL_OK || rc == SL_ERR_AGAIN, "seed %llu op %d: %s",
                      (unsigned long long)seed, op, err.msg);
            has[w] = rc == SL_OK;
            if (has[w]) {
                cr_assert_gt(held[w].num_todo, 0);
                tfrom[w] = held[w].todo[0].from_row;
                tto[w] = held[w].todo[0].to_row;
            }
        } else if (tu_below(&s, 3) > 0) {
            /* a batch of the lease's first rows not committed yet */
            const sl_master_lease_t *l = &held[w];
            uint64_t from = tfrom[w], to = tto[w];
            uint64_t end = from + 1 + tu_below(&s, to - from);
            sl_master_state_commit(m, "j", l->epoch, l->split, l->generation, from, end, "c",
                                   ++nonce, &err);
            has[w] = false; /* the worker moves on; the rest expires or is read */
            if (tu_below(&s, 2) == 0) {
                sl_dpp_row_range_t empty = {end, to};
                sl_master_state_split_read(m, "j", l->epoch, l->split, l->generation, &empty,
                                           end < to ? 1 : 0, &err);
            }
        } else {
            cr_assert_eq(sl_master_state_expire(m, now + 200, NULL, &err), SL_OK, "%s", err.msg);
            has[0] = has[1] = has[2] = false;
        }
        char *live = dump(m), *back = replayed_dump(k);
        cr_assert_str_eq(back, live, "seed %llu op %d: replay differs", (unsigned long long)seed,
                         op);
        free(live);
        free(back);
    }
    sl_master_state_counters_t c;
    sl_master_state_counters(m, &c);
    cr_assert_eq(k->n, c.journal_records, "every record went to the sink");
    cr_assert(c.commits > 0 && c.expiries + c.completions > 0, "seed %llu: a run without commits",
              (unsigned long long)seed);
    sl_master_state_destroy(m);
    kept_free(k);
    free(k);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_sink, a_failing_sink_fails_the_transition_and_changes_nothing)
{
    make_splits();
    kept *k = calloc(1, sizeof *k);
    sl_master_state_t *m = fresh();
    sl_error_t err = {0};
    sl_master_record_sink_t sink = {keep, k};
    cr_assert_eq(sl_master_state_set_sink(m, &sink, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 1};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    sl_master_lease_t l;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK, "%s", err.msg);
    char *before = dump(m);
    uint32_t records = k->n;
    k->fail = true;
    sl_master_commit_result_t res =
        sl_master_state_commit(m, "j", l.epoch, l.split, l.generation, 0, 10, "c", 1, &err);
    cr_assert_eq(res, SL_MASTER_COMMIT_ERROR);
    cr_assert_eq(err.code, SL_ERR_IO);
    cr_assert_str_eq(err.msg, "test sink: injected failure");
    sl_master_lease_t l2;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l2, &err), SL_ERR_IO);
    spec.job_id = "k";
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_ERR_IO);
    char *after = dump(m);
    cr_assert_str_eq(after, before);
    cr_assert_eq(k->n, records);
    /* the sink back: the same commit goes through, once */
    k->fail = false;
    res = sl_master_state_commit(m, "j", l.epoch, l.split, l.generation, 0, 10, "c", 1, &err);
    cr_assert_eq(res, SL_MASTER_COMMITTED, "%s", err.msg);
    cr_assert_eq(k->n, records + 1);
    char *back = replayed_dump(k), *live = dump(m);
    cr_assert_str_eq(back, live);
    free(before);
    free(after);
    free(back);
    free(live);
    sl_master_state_destroy(m);
    kept_free(k);
    free(k);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_sink, a_state_without_a_sink_journals_nothing)
{
    make_splits();
    sl_master_state_t *m = fresh();
    sl_error_t err = {0};
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = N, .epochs = 1};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    sl_master_lease_t l;
    cr_assert_eq(sl_master_state_lease_next(m, "j", "w", 0, &l, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(
        sl_master_state_commit(m, "j", l.epoch, l.split, l.generation, 0, 10, "c", 1, &err),
        SL_MASTER_COMMITTED, "%s", err.msg);
    sl_master_state_counters_t c;
    sl_master_state_counters(m, &c);
    cr_assert_eq(c.journal_records, 0);
    cr_assert_eq(c.commits, 1);
    sl_master_state_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

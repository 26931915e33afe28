/* Tests of the DPP master's state machine (src/dpp/master_state.h): every
 * transition, stale generations, expiry and resume after the last
 * acknowledged batch, epochs and their seeded order, static sharding,
 * resume tokens, and a property test of exactly-once acknowledged progress
 * across random interleavings and restarts from the journal. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/master_state.h"
#include "testutil.h"

#define MAX_SPLITS 64

static sl_wh_split_t g_splits[MAX_SPLITS];
static char g_paths[4][32];

/* n splits over 4 files; split i has rows[i] rows (or 100 + 10 i). */
static void make_splits(uint32_t n, const uint64_t *rows)
{
    for (int f = 0; f < 4; f++)
        snprintf(g_paths[f], sizeof g_paths[f], "ds=2026-01-01/part-%d.slc", f);
    uint64_t first[4] = {0};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t f = i % 4;
        uint64_t r = rows != NULL ? rows[i] : 100 + 10 * i;
        g_splits[i] = (sl_wh_split_t){.path = g_paths[f],
                                      .partition = "ds=2026-01-01",
                                      .stripe_begin = i / 4,
                                      .stripe_end = i / 4 + 1,
                                      .first_row = first[f],
                                      .num_rows = r};
        first[f] += r;
    }
}

static sl_dpp_master_job_spec_t spec_of(const char *id, uint32_t n, uint32_t epochs, bool shuffle,
                                        uint64_t seed)
{
    return (sl_dpp_master_job_spec_t){.job_id = id,
                                      .splits = g_splits,
                                      .num_splits = n,
                                      .epochs = epochs,
                                      .seed = seed,
                                      .shuffle = shuffle};
}

static sl_dpp_master_t *mem_master(uint64_t timeout)
{
    sl_dpp_master_opts_t o = {.lease_timeout_ms = timeout};
    sl_dpp_master_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_dpp_master_open(&o, 0, &m, NULL, &err), SL_OK, "%s", err.msg);
    return m;
}

Test(master_state, lease_progress_complete)
{
    make_splits(3, NULL);
    sl_dpp_master_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_dpp_master_job_spec_t spec = spec_of("j", 3, 1, false, 0);
    cr_assert_eq(sl_dpp_master_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_dpp_master_job_add(m, &spec, &err), SL_ERR_INVALID);
    sl_dpp_lease_t l;
    cr_assert_eq(sl_dpp_master_lease_next(m, "j", "w1", 10, &l, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(l.split, 0);
    cr_assert_eq(l.epoch, 0);
    cr_assert_eq(l.expiry_ms, 1010);
    cr_assert_eq(l.start_rows, 0);
    cr_assert_str_eq(l.path, "ds=2026-01-01/part-0.slc");
    cr_assert_eq(l.num_rows, 100);
    sl_dpp_master_job_status_t st;
    sl_dpp_master_job_status(m, "j", &st, &err);
    cr_assert_eq(st.pending, 2);
    cr_assert_eq(st.leased, 1);
    cr_assert_eq(st.done, 0);
    /* complete before all rows are acknowledged is refused */
    cr_assert_eq(sl_dpp_master_complete(m, "j", 0, l.generation, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "0 of 100 rows") != NULL, "%s", err.msg);
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, l.generation, 2, 60, &err), SL_OK, "%s",
                 err.msg);
    /* same position again: no-op; going back: refused; past the end: refused */
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, l.generation, 2, 60, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, l.generation, 1, 50, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, l.generation, 5, 101, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_dpp_master_progress(m, "j", 9, l.generation, 5, 1, &err), SL_ERR_NOT_FOUND);
    cr_assert_eq(sl_dpp_master_progress(m, "x", 0, l.generation, 5, 1, &err), SL_ERR_NOT_FOUND);
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, l.generation, 4, 100, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_complete(m, "j", 0, l.generation, &err), SL_OK, "%s", err.msg);
    sl_dpp_master_job_status(m, "j", &st, &err);
    cr_assert_eq(st.done, 1);
    cr_assert_eq(st.leased, 0);
    cr_assert_eq(st.acked_rows, 100);
    /* completing twice is a stale report */
    cr_assert_eq(sl_dpp_master_complete(m, "j", 0, l.generation, &err), SL_DPP_STALE);
    sl_dpp_master_counters_t c;
    sl_dpp_master_counters(m, &c);
    cr_assert_eq(c.leases_granted, 1);
    cr_assert_eq(c.completions, 1);
    cr_assert_eq(c.stale_refused, 1);
    cr_assert_eq(c.pending, 2);
    cr_assert_eq(c.done, 1);
    cr_assert_eq(sl_dpp_master_job_remove(m, "j", &err), SL_OK);
    cr_assert_eq(sl_dpp_master_job_remove(m, "j", &err), SL_ERR_NOT_FOUND);
    sl_dpp_master_destroy(m);
}

Test(master_state, expiry_resumes_after_last_ack_and_refuses_stale)
{
    make_splits(2, NULL);
    sl_dpp_master_t *m = mem_master(100);
    sl_error_t err = {0};
    sl_dpp_master_job_spec_t spec = spec_of("j", 2, 1, false, 0);
    cr_assert_eq(sl_dpp_master_job_add(m, &spec, &err), SL_OK);
    sl_dpp_lease_t a, b, c;
    cr_assert_eq(sl_dpp_master_lease_next(m, "j", "wa", 0, &a, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_lease_next(m, "j", "wb", 0, &b, &err), SL_OK);
    cr_assert_eq(b.split, 1);
    cr_assert_eq(sl_dpp_master_lease_next(m, "j", "wc", 0, &c, &err), SL_ERR_AGAIN);
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, a.generation, 3, 30, &err), SL_OK);
    /* wb heartbeats, wa does not */
    uint32_t renewed = 0;
    cr_assert_eq(sl_dpp_master_renew(m, "wb", 80, &renewed, &err), SL_OK);
    cr_assert_eq(renewed, 1);
    uint32_t expired = 0;
    cr_assert_eq(sl_dpp_master_expire(m, 99, &expired, &err), SL_OK);
    cr_assert_eq(expired, 0);
    cr_assert_eq(sl_dpp_master_expire(m, 100, &expired, &err), SL_OK);
    cr_assert_eq(expired, 1);
    /* wa comes back: refused, distinctly */
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, a.generation, 4, 40, &err), SL_DPP_STALE);
    cr_assert(strstr(err.msg, "expired") != NULL, "%s", err.msg);
    /* re-leased to wc from the last acknowledged position */
    cr_assert_eq(sl_dpp_master_lease_next(m, "j", "wc", 150, &c, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(c.split, 0);
    cr_assert_eq(c.start_rows, 30);
    cr_assert_eq(c.start_batches, 3);
    cr_assert_neq(c.generation, a.generation);
    cr_assert_eq(sl_dpp_master_complete(m, "j", 0, a.generation, &err), SL_DPP_STALE);
    cr_assert(strstr(err.msg, "leased again") != NULL, "%s", err.msg);
    cr_assert_eq(sl_dpp_master_progress(m, "j", 0, c.generation, 10, 100, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_complete(m, "j", 0, c.generation, &err), SL_OK);
    /* wb's lease was renewed until 180 */
    cr_assert_eq(sl_dpp_master_expire(m, 179, &expired, &err), SL_OK);
    cr_assert_eq(expired, 0);
    cr_assert_eq(sl_dpp_master_expire(m, 180, &expired, &err), SL_OK);
    cr_assert_eq(expired, 1);
    sl_dpp_master_counters_t k;
    sl_dpp_master_counters(m, &k);
    cr_assert_eq(k.expiries, 2);
    cr_assert_eq(k.stale_refused, 2);
    cr_assert_eq(k.renewals, 1);
    sl_dpp_master_destroy(m);
}

/* Run every split of the current epoch to completion in lease order;
 * returns the order splits were handed out in. */
static void run_epoch(sl_dpp_master_t *m, const char *job, uint32_t n, uint32_t *order)
{
    sl_error_t err = {0};
    for (uint32_t i = 0; i < n; i++) {
        sl_dpp_lease_t l;
        cr_assert_eq(sl_dpp_master_lease_next(m, job, "w", 0, &l, &err), SL_OK, "%s", err.msg);
        order[i] = l.split;
        cr_assert_eq(sl_dpp_master_progress(m, job, l.split, l.generation, 1, l.num_rows, &err),
                     SL_OK);
        cr_assert_eq(sl_dpp_master_complete(m, job, l.split, l.generation, &err), SL_OK, "%s",
                     err.msg);
    }
}

Test(master_state, epochs_and_seeded_order)
{
    enum { N = 20 };
    make_splits(N, NULL);
    sl_dpp_master_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_dpp_master_job_spec_t plain = spec_of("plain", N, 2, false, 7);
    sl_dpp_master_job_spec_t shuf = spec_of("shuf", N, 3, true, 7);
    sl_dpp_master_job_spec_t shuf2 = spec_of("shuf2", N, 1, true, 8);
    cr_assert_eq(sl_dpp_master_job_add(m, &plain, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_job_add(m, &shuf, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_job_add(m, &shuf2, &err), SL_OK);
    uint32_t got[3][N], want[N];
    run_epoch(m, "plain", N, got[0]);
    for (uint32_t i = 0; i < N; i++)
        cr_assert_eq(got[0][i], i);
    sl_dpp_master_job_status_t st;
    sl_dpp_master_job_status(m, "plain", &st, &err);
    cr_assert_eq(st.epoch, 1);
    cr_assert_eq(st.pending, N);
    cr_assert_eq(st.acked_rows, 0);
    for (uint32_t e = 0; e < 3; e++) {
        run_epoch(m, "shuf", N, got[e]);
        cr_assert_eq(sl_dpp_master_epoch_order(m, "shuf", e, want, &err), SL_OK);
        cr_assert_arr_eq(got[e], want, sizeof want);
        /* a permutation */
        uint32_t seen[N] = {0};
        for (uint32_t i = 0; i < N; i++)
            seen[got[e][i]]++;
        for (uint32_t i = 0; i < N; i++)
            cr_assert_eq(seen[i], 1);
    }
    cr_assert(memcmp(got[0], got[1], sizeof got[0]) != 0, "epochs share one order");
    sl_dpp_master_job_status(m, "shuf", &st, &err);
    cr_assert(st.finished);
    cr_assert_eq(st.epoch, 3);
    cr_assert_eq(st.done, N);
    sl_dpp_lease_t l;
    cr_assert_eq(sl_dpp_master_lease_next(m, "shuf", "w", 0, &l, &err), SL_ERR_AGAIN);
    /* same seed: same order (a fresh master); other seed: another order */
    uint32_t other[N];
    cr_assert_eq(sl_dpp_master_epoch_order(m, "shuf2", 0, other, &err), SL_OK);
    cr_assert(memcmp(other, got[0], sizeof other) != 0);
    sl_dpp_master_t *m2 = mem_master(1000);
    cr_assert_eq(sl_dpp_master_job_add(m2, &shuf, &err), SL_OK);
    uint32_t again[N];
    run_epoch(m2, "shuf", N, again);
    cr_assert_arr_eq(again, got[0], sizeof again);
    sl_dpp_master_destroy(m2);
    sl_dpp_master_destroy(m);
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
    sl_dpp_master_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_dpp_master_job_spec_t a = spec_of("a", N, 1, true, 42);
    sl_dpp_master_job_spec_t b = spec_of("b", N, 1, true, 42);
    cr_assert_eq(sl_dpp_master_job_add(m, &a, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_job_add(m, &b, &err), SL_OK);
    uint32_t ra[N], rb[N];
    uint64_t load[R];
    cr_assert_eq(sl_dpp_master_assign_static(m, "a", R, ra, load, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_assign_static(m, "b", R, rb, NULL, &err), SL_OK);
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
    sl_dpp_master_job_spec_t e = spec_of("eq", 4, 1, false, 1);
    cr_assert_eq(sl_dpp_master_job_add(m, &e, &err), SL_OK);
    uint32_t re[4];
    uint64_t le[2];
    cr_assert_eq(sl_dpp_master_assign_static(m, "eq", 2, re, le, &err), SL_OK);
    cr_assert_eq(le[0], 20);
    cr_assert_eq(le[1], 20);
    cr_assert_eq(re[0], re[2]);
    cr_assert_eq(re[1], re[3]);
    cr_assert_neq(re[0], re[1]);
    cr_assert_eq(sl_dpp_master_assign_static(m, "eq", 0, re, le, &err), SL_ERR_INVALID);
    sl_dpp_master_destroy(m);
}

Test(master_state, resume_token_round_trip_and_refusals)
{
    enum { N = 6 };
    make_splits(N, NULL);
    sl_dpp_master_t *m = mem_master(1000);
    sl_error_t err = {0};
    sl_dpp_master_job_spec_t spec = spec_of("j", N, 2, true, 3);
    cr_assert_eq(sl_dpp_master_job_add(m, &spec, &err), SL_OK);
    /* epoch 0: finish one split, half of another, lease a third */
    sl_dpp_lease_t l[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sl_dpp_master_lease_next(m, "j", "w", 0, &l[i], &err), SL_OK);
    sl_dpp_master_progress(m, "j", l[0].split, l[0].generation, 9, l[0].num_rows, &err);
    cr_assert_eq(sl_dpp_master_complete(m, "j", l[0].split, l[0].generation, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_progress(m, "j", l[1].split, l[1].generation, 2, 50, &err), SL_OK);
    void *tok;
    size_t len;
    cr_assert_eq(sl_dpp_master_token_encode(m, "j", &tok, &len, &err), SL_OK, "%s", err.msg);

    sl_dpp_master_t *r = mem_master(1000);
    cr_assert_eq(sl_dpp_master_job_resume(r, &spec, tok, len, &err), SL_OK, "%s", err.msg);
    sl_dpp_master_job_status_t st;
    sl_dpp_master_job_status(r, "j", &st, &err);
    cr_assert_eq(st.epoch, 0);
    cr_assert_eq(st.done, 1);
    cr_assert_eq(st.pending, N - 1);
    cr_assert_eq(st.acked_rows, l[0].num_rows + 50);
    /* what remains is exactly what was not acknowledged */
    uint64_t remaining = 0;
    for (int i = 0; i < N - 1; i++) {
        sl_dpp_lease_t x;
        cr_assert_eq(sl_dpp_master_lease_next(r, "j", "w", 0, &x, &err), SL_OK);
        cr_assert_neq(x.split, l[0].split);
        if (x.split == l[1].split) {
            cr_assert_eq(x.start_rows, 50);
            cr_assert_eq(x.start_batches, 2);
        } else {
            cr_assert_eq(x.start_rows, 0);
        }
        remaining += x.num_rows - x.start_rows;
    }
    cr_assert_eq(remaining + l[0].num_rows + 50, st.total_rows);

    /* wrong job id, other splits, damage, other version */
    sl_dpp_master_t *q = mem_master(1000);
    sl_dpp_master_job_spec_t other = spec_of("k", N, 2, true, 3);
    cr_assert_eq(sl_dpp_master_job_resume(q, &other, tok, len, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "of job 'j', not of job 'k'") != NULL, "%s", err.msg);
    sl_dpp_master_job_spec_t fewer = spec_of("j", N - 1, 2, true, 3);
    cr_assert_eq(sl_dpp_master_job_resume(q, &fewer, tok, len, &err), SL_ERR_INVALID);
    g_splits[2].num_rows++;
    cr_assert_eq(sl_dpp_master_job_resume(q, &spec, tok, len, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "other splits") != NULL, "%s", err.msg);
    g_splits[2].num_rows--;
    uint8_t *bad = malloc(len);
    for (size_t i = 0; i < len; i += 3) {
        memcpy(bad, tok, len);
        bad[i] ^= 0x40;
        sl_err_t rc = sl_dpp_master_job_resume(q, &spec, bad, len, &err);
        cr_assert(rc == SL_ERR_CORRUPT || rc == SL_ERR_VERSION, "byte %zu: %d", i, rc);
    }
    memcpy(bad, tok, len);
    bad[4] = 9;
    cr_assert_eq(sl_dpp_master_job_resume(q, &spec, bad, len, &err), SL_ERR_VERSION);
    for (size_t cut = 0; cut < len; cut += 5)
        cr_assert_neq(sl_dpp_master_job_resume(q, &spec, tok, cut, &err), SL_OK);
    cr_assert_eq(sl_dpp_master_job_status(q, "j", &st, &err), SL_ERR_NOT_FOUND);
    free(bad);
    sl_free(NULL, tok, len);
    sl_dpp_master_destroy(q);
    sl_dpp_master_destroy(r);
    sl_dpp_master_destroy(m);
}

/* ---- property: exactly-once acknowledged progress ---------------------------------- */

static char *tmp_state_dir(void)
{
    char *d = strdup("/tmp/sluice-master-XXXXXX");
    cr_assert(mkdtemp(d) != NULL);
    return d;
}

static void rm_state_dir(char *d)
{
    const char *names[] = {"journal", "snapshot", "tmp"};
    char p[256];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", d, names[i]);
        unlink(p);
    }
    rmdir(d);
    free(d);
}

/* A simulated worker: at most one lease; it "delivers" rows in batches and
 * the trainers acknowledge them; it reports acknowledged positions only. */
typedef struct sim_worker {
    bool has;
    sl_dpp_lease_t l;
    uint64_t pos_rows, pos_batches; /* acknowledged */
    char name[16];
} sim_worker;

Test(master_state, property_exactly_once_across_failures_and_restarts)
{
    enum { N = 24, W = 5, EPOCHS = 3 };
    uint64_t s = tu_seed("master_state::property_exactly_once");
    uint64_t rows[N];
    for (uint32_t i = 0; i < N; i++)
        rows[i] = tu_below(&s, 60); /* empty splits too */
    make_splits(N, rows);
    char *dir = tmp_state_dir();
    sl_dpp_master_opts_t o = {
        .state_dir = dir, .lease_timeout_ms = 50, .compact_bytes = 2048 + tu_below(&s, 4096)};
    sl_error_t err = {0};
    sl_dpp_master_t *m = NULL;
    uint64_t now = 0;
    cr_assert_eq(sl_dpp_master_open(&o, now, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_dpp_master_job_spec_t spec = spec_of("p", N, EPOCHS, true, s);
    cr_assert_eq(sl_dpp_master_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_dpp_master_sync(m, &err), SL_OK);
    /* counted[e][i]: rows of split i acknowledged in epoch e, summed from
     * the increments the master accepted (and made durable by sync). */
    uint64_t counted[EPOCHS][N] = {{0}};
    sim_worker w[W] = {0};
    for (int i = 0; i < W; i++)
        snprintf(w[i].name, sizeof w[i].name, "w%d", i);
    sl_dpp_master_job_status_t st;
    int steps = 0, restarts = 0;
    for (;;) {
        cr_assert_eq(sl_dpp_master_job_status(m, "p", &st, &err), SL_OK);
        if (st.finished) break;
        cr_assert_lt(++steps, 200000, "no progress");
        now += tu_below(&s, 10);
        sim_worker *x = &w[tu_below(&s, W)];
        uint64_t op = tu_below(&s, 100);
        if (op < 3) {
            /* master restart from its state directory: unsynced changes
             * are lost, along with the workers' in-flight reports */
            sl_dpp_master_destroy(m);
            cr_assert_eq(sl_dpp_master_open(&o, now, &m, NULL, &err), SL_OK, "%s", err.msg);
            restarts++;
            continue;
        }
        if (op < 6) {
            /* the worker dies (kill -9): it forgets its lease */
            x->has = false;
            continue;
        }
        if (op < 12) {
            uint32_t n;
            cr_assert_eq(sl_dpp_master_expire(m, now, &n, &err), SL_OK);
            continue;
        }
        if (!x->has) {
            sl_err_t rc = sl_dpp_master_lease_next(m, "p", x->name, now, &x->l, &err);
            cr_assert(rc == SL_OK || rc == SL_ERR_AGAIN, "%s", err.msg);
            if (rc == SL_OK) {
                x->has = true;
                x->pos_rows = x->l.start_rows;
                x->pos_batches = x->l.start_batches;
            }
            continue;
        }
        if (op < 30) {
            sl_dpp_master_renew(m, x->name, now, NULL, &err);
            continue;
        }
        uint64_t left = x->l.num_rows - x->pos_rows;
        sl_err_t rc;
        if (left > 0) {
            uint64_t batch = 1 + tu_below(&s, left < 8 ? left : 8);
            rc = sl_dpp_master_progress(m, "p", x->l.split, x->l.generation, x->pos_batches + 1,
                                        x->pos_rows + batch, &err);
            cr_assert(rc == SL_OK || rc == SL_DPP_STALE, "%d %s", rc, err.msg);
            if (rc == SL_OK) rc = sl_dpp_master_sync(m, &err);
            if (rc == SL_OK) {
                counted[x->l.epoch][x->l.split] += batch;
                x->pos_rows += batch;
                x->pos_batches++;
            }
        } else {
            rc = sl_dpp_master_complete(m, "p", x->l.split, x->l.generation, &err);
            cr_assert(rc == SL_OK || rc == SL_DPP_STALE, "%d %s", rc, err.msg);
            if (rc == SL_OK) cr_assert_eq(sl_dpp_master_sync(m, &err), SL_OK);
        }
        if (rc == SL_DPP_STALE || left == 0) x->has = false;
    }
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t i = 0; i < N; i++)
            cr_assert_eq(counted[e][i], rows[i], "epoch %u split %u: %llu of %llu rows", e, i,
                         (unsigned long long)counted[e][i], (unsigned long long)rows[i]);
    cr_assert_gt(restarts, 0);
    sl_dpp_master_destroy(m);
    rm_state_dir(dir);
}

/* A model of the deterministic order (docs/DESIGN.md, "A deterministic
 * order") over the pieces built so far, before the service is wired: the
 * real batcher cuts the batches (range batching, in-batch shuffle), the
 * real sl_master_order_* numbers them and holds the lease window, the real
 * reorder buffer hands them out per rank; the model plays the master's
 * leasing, workers reading, committing into the ranks' buffers in random
 * order and being killed, and a resume from the batches the ranks handed
 * out with another number of ranks. Checked: the sequence of batches
 * (sample ids, shuffled order included) merged by g is the reference one,
 * for any number of workers, window and kills, over two epochs; a run
 * stopped at a step and resumed with R' ranks continues it exactly.
 *
 * Not the service: leases, commits and kills here are function calls, so
 * this checks the design's arithmetic, not the wire or the journal. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/order.h"
#include "dpp/worker/batcher/batcher.h"
#include "testutil.h"
#include "trainer/reorder.h"

enum { SPLITS = 9, MAX_ROWS = 40, B = 5, MAX_B = MAX_ROWS + 1, CAP = 3, MAX_SEQ = 128 };

static const char *const KEYS[] = {"a"};
static const char *const DENSE[] = {"d"};
static const char *const LABELS[] = {"y"};
static uint32_t rows_of[SPLITS];
/* leases after a kill that left committed batches; kills; gaps continuing
 * another across rows handed out before a resume; the most batches two
 * ranks handed out apart at a checkpoint */
static uint32_t releases, kills, continued, apart;

static bool kept(int64_t id)
{
    return ((uint64_t)id * 2654435761u >> 7) % 4 != 0;
}

typedef struct mbatch {
    uint64_t from, to, g;
    uint32_t n;
    int64_t ids[B];
} mbatch_t;

typedef struct cut_sink {
    mbatch_t *out;
    uint32_t n;
} cut_sink_t;

static sl_err_t collect(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                        sl_error_t *err)
{
    (void)err;
    cut_sink_t *s = ctx;
    cr_assert_lt(s->n, MAX_B);
    mbatch_t *m = &s->out[s->n++];
    m->from = lease->from_row;
    m->to = lease->to_row;
    m->n = b->batch_size;
    memcpy(m->ids, b->sample_ids, b->batch_size * sizeof(int64_t));
    sl_batch_destroy(b);
    return SL_OK;
}

/* The batches of rows [from, to) of split s in epoch e, cut from from (the
 * real batcher); appended to out. @return how many. */
static uint32_t cut(uint32_t s, uint32_t e, uint64_t from, uint64_t to, mbatch_t *out)
{
    uint32_t n = rows_of[s];
    if (n == 0) return 0;
    sl_batch_t *st = sl_batch_new(NULL);
    cr_assert_eq(sl_kjt_init(&st->sparse, st->arena, 1, KEYS, n, n, false), SL_OK);
    cr_assert_eq(sl_dense_init(&st->dense, st->arena, n, 1, DENSE), SL_OK);
    cr_assert_eq(sl_dense_init(&st->labels, st->arena, n, 1, LABELS), SL_OK);
    st->sample_ids = sl_arena_alloc(st->arena, (n > 0 ? n : 1) * sizeof(int64_t));
    uint32_t sel[MAX_ROWS], k = 0;
    for (uint32_t r = 0; r < n; r++) {
        int64_t id = (int64_t)s * 1000 + r;
        st->sparse.lengths[r] = 1;
        st->sparse.values[r] = id;
        st->dense.data[r] = (float)r;
        st->labels.data[r] = 0;
        st->sample_ids[r] = id;
        if (r >= from && r < to && kept(id)) sel[k++] = r;
    }
    st->batch_size = n;
    cut_sink_t sink = {out, 0};
    sl_worker_batcher_opts_t o = {
        .batch_size = B, .sample_ids = true, .shuffle_window = B, .seed = 28};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect, &sink, &bt, &err), SL_OK, "%s", err.msg);
    sl_worker_lease_origin_t lo = {.handle = &sink, .split = s, .from_row = from};
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, e, &err), SL_OK, "%s", err.msg);
    sl_worker_rows_origin_t ro = {.epoch = e, .split_id = s, .row = 0};
    if (k > 0)
        cr_assert_eq(sl_worker_batcher_add(bt, st, sel, NULL, k, &ro, &err), SL_OK, "%s", err.msg);
    sl_dpp_row_range_t empty;
    cr_assert_eq(sl_worker_batcher_end_range(bt, to, &empty, &err), SL_OK, "%s", err.msg);
    sl_worker_batcher_destroy(bt);
    sl_batch_destroy(st);
    return sink.n;
}

/* The epoch's split order: a seeded Fisher-Yates, as the master's. */
static void epoch_order(uint64_t seed, uint32_t e, uint32_t *order)
{
    uint64_t x = seed ^ (0x9e3779b97f4a7c15ull * (e + 1));
    for (uint32_t i = 0; i < SPLITS; i++)
        order[i] = i;
    for (uint32_t i = SPLITS - 1; i > 0; i--) {
        uint32_t j = (uint32_t)tu_below(&x, i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

typedef struct run {
    uint32_t ranks, workers, window, kill_pct;
    uint32_t stop_at; /* the model's steps before everything stops (a checkpoint); UINT32_MAX:
                         to the end */
    uint32_t steps;   /* out: steps the run took */
    /* rows of no batch of this run (handed out before a resume): per split */
    mbatch_t excluded[SPLITS][MAX_B];
    uint32_t n_excluded[SPLITS];
    /* out: the batches handed out, by g */
    mbatch_t seq[MAX_SEQ];
    uint32_t n_seq;
    bool have[MAX_SEQ]; /* seq[g] was handed out */
} run_t;

typedef struct worker {
    int32_t pos; /* -1: free */
    mbatch_t b[MAX_B];
    bool committed[MAX_B];
    uint32_t n;
    bool relative; /* its batches' g are relative to the split's base */
} worker_t;

/* Rows [from, to) of split s minus the excluded and the committed batches,
 * as gaps. */
static uint32_t gaps(const mbatch_t *skip, uint32_t n_skip, const mbatch_t *com, uint32_t n_com,
                     uint64_t n_rows, uint64_t *gf, uint64_t *gt)
{
    bool busy[MAX_ROWS] = {false};
    for (uint32_t i = 0; i < n_skip; i++)
        for (uint64_t r = skip[i].from; r < skip[i].to; r++)
            busy[r] = true;
    for (uint32_t i = 0; i < n_com; i++)
        for (uint64_t r = com[i].from; r < com[i].to; r++)
            busy[r] = true;
    uint32_t n = 0;
    for (uint64_t r = 0; r < n_rows;) {
        if (busy[r]) {
            r++;
            continue;
        }
        gf[n] = r;
        while (r < n_rows && !busy[r])
            r++;
        gt[n++] = r;
    }
    return n;
}

static int by_from(const void *a, const void *b)
{
    const sl_master_order_batch_t *x = a, *y = b;
    return x->from_row < y->from_row ? -1 : x->from_row > y->from_row;
}

static int by_from_range(const void *a, const void *b)
{
    const sl_dpp_row_range_t *x = a, *y = b;
    return x->from_row < y->from_row ? -1 : x->from_row > y->from_row;
}

/* One epoch of run r: leases in order within the window, workers reading
 * (cutting) a lease's gaps at once and committing their batches into the
 * ranks' buffers in random order once the base is known, kills, ranks
 * taking in g order. */
static void play(run_t *r, uint32_t e, const uint32_t *order, uint64_t *rng)
{
    sl_error_t err = {0};
    sl_master_order_t *o;
    cr_assert_eq(sl_master_order_new(SPLITS, r->window, NULL, &o, &err), SL_OK, "%s", err.msg);
    tr_reorder_t *q[4];
    uint32_t taken[4] = {0};
    for (uint32_t k = 0; k < r->ranks; k++)
        cr_assert_eq(tr_reorder_new(k, r->ranks, CAP, NULL, &q[k], &err), SL_OK, "%s", err.msg);
    static mbatch_t com[SPLITS][MAX_B];
    uint32_t n_com[SPLITS] = {0};
    bool leased[SPLITS] = {false}, done[SPLITS] = {false};
    worker_t w[4];
    for (uint32_t k = 0; k < r->workers; k++)
        w[k].pos = -1;
    r->n_seq = 0;
    for (uint32_t step = 0;; step++) {
        cr_assert_lt(step, 200000, "the model does not finish: a deadlock");
        /* finished: every rank at its stop, or past the epoch's end */
        uint64_t total = 0;
        bool all_counted = sl_master_order_base(o, SPLITS, &total);
        bool finished = true;
        for (uint32_t k = 0; k < r->ranks; k++)
            finished &= step >= r->stop_at || (all_counted && tr_reorder_next(q[k]) >= total);
        if (finished) {
            r->steps = step;
            break;
        }
        uint32_t act = (uint32_t)tu_below(rng, 100);
        uint32_t k = (uint32_t)tu_below(rng, r->workers);
        worker_t *wk = &w[k];
        if (act < r->kill_pct && wk->pos >= 0) { /* kill: its uncommitted batches are lost */
            leased[wk->pos] = false;
            wk->pos = -1;
            kills++;
        } else if (act < 40 && wk->pos < 0) { /* lease the first split it may */
            for (uint32_t p = 0; p < SPLITS; p++) {
                if (done[p] || leased[p]) continue;
                if (!sl_master_order_may_lease(o, p)) break;
                uint32_t s = order[p];
                uint64_t gf[MAX_ROWS], gt[MAX_ROWS];
                uint32_t ng =
                    gaps(r->excluded[s], r->n_excluded[s], com[p], n_com[p], rows_of[s], gf, gt);
                /* nothing committed: the lease numbers its batches from 0,
                 * relative to the split's base, across gaps that only
                 * excluded rows separate, and its read counts the split;
                 * else each gap starts at a committed batch's end (or the
                 * split's first row) and takes its g's from there */
                bool relative = n_com[p] == 0;
                releases += !relative;
                uint64_t base = 0, end_base = 0, next = 0;
                sl_master_order_batch_t c[MAX_B];
                for (uint32_t j = 0; j < n_com[p]; j++)
                    c[j] = (sl_master_order_batch_t){com[p][j].from, com[p][j].to, com[p][j].g};
                /* sorted by row: a copy, the buffers point into com */
                qsort(c, n_com[p], sizeof c[0], by_from);
                sl_dpp_row_range_t skip[MAX_B];
                uint32_t n_skip = r->n_excluded[s];
                for (uint32_t j = 0; j < n_skip; j++)
                    skip[j] = (sl_dpp_row_range_t){r->excluded[s][j].from, r->excluded[s][j].to};
                qsort(skip, n_skip, sizeof skip[0], by_from_range);
                cr_assert(relative || sl_master_order_base(o, p, &base));
                wk->n = 0;
                /* a run of gaps (one, and those continuing it across rows
                 * of no batch) ends at a committed batch or the split's end:
                 * it yields exactly the g's up to there */
                uint64_t run_limit = UINT64_MAX;
                for (uint32_t i = 0; i < ng; i++) {
                    uint32_t got = cut(s, e, gf[i], gt[i], &wk->b[wk->n]);
                    uint64_t g0 = next, limit = UINT64_MAX;
                    if (!relative) {
                        cr_assert_eq(sl_master_order_gap_base(base, 0, c, n_com[p], skip, n_skip,
                                                              gf[i], &g0, &limit, &err),
                                     SL_OK, "%s", err.msg);
                        if (g0 == UINT64_MAX) { /* continues the gap before */
                            g0 = next;
                            continued++;
                        } else {
                            if (i > 0)
                                cr_assert_eq(next, run_limit, "gap before row %" PRIu64, gf[i]);
                            if (limit == UINT64_MAX && sl_master_order_base(o, p + 1, &end_base))
                                limit = end_base;
                            run_limit = limit;
                        }
                    }
                    for (uint32_t j = 0; j < got; j++) {
                        wk->b[wk->n + j].g = g0 + j;
                        wk->committed[wk->n + j] = false;
                    }
                    next = g0 + got;
                    wk->n += got;
                }
                if (!relative && ng > 0) cr_assert_eq(next, run_limit, "the split's last gap");
                wk->relative = relative;
                if (relative)
                    cr_assert_eq(sl_master_order_count(o, p, wk->n, &err), SL_OK, "%s", err.msg);
                if (wk->n == 0) {
                    done[p] = true;
                    break;
                }
                leased[p] = true;
                wk->pos = (int32_t)p;
                break;
            }
        } else if (act < 80 && wk->pos >= 0) { /* commit a random batch into its rank's buffer */
            uint32_t p = (uint32_t)wk->pos, j = (uint32_t)tu_below(rng, wk->n);
            uint64_t base;
            if (wk->committed[j] || !sl_master_order_base(o, p, &base)) continue;
            /* the buffer holds the committed copy: the worker's own is
             * reused by its next lease */
            mbatch_t *m = &com[p][n_com[p]];
            *m = wk->b[j];
            m->g = wk->relative ? base + m->g : m->g;
            if (tr_reorder_put(q[m->g % r->ranks], m->g, m, &err) != SL_OK) {
                cr_assert_eq(err.code, SL_ERR_TOO_LARGE, "%s", err.msg);
                continue; /* back-pressure: the worker waits */
            }
            n_com[p]++;
            wk->committed[j] = true;
            bool all = true;
            for (uint32_t i = 0; i < wk->n; i++)
                all &= wk->committed[i];
            if (all) {
                done[p] = true;
                leased[p] = false;
                wk->pos = -1;
            }
        } else { /* a rank takes its next batch */
            uint32_t rk = (uint32_t)tu_below(rng, r->ranks);
            const mbatch_t *m = tr_reorder_take(q[rk]);
            if (m == NULL) continue;
            cr_assert_lt(m->g, MAX_SEQ);
            r->seq[m->g] = *m;
            r->have[m->g] = true;
            r->n_seq = m->g + 1 > r->n_seq ? (uint32_t)m->g + 1 : r->n_seq;
            taken[rk]++;
        }
    }
    for (uint32_t k = 0; k < r->ranks; k++)
        tr_reorder_destroy(q[k]);
    sl_master_order_destroy(o);
}

static void same_batch(const mbatch_t *a, const mbatch_t *b, const char *what, uint32_t i)
{
    cr_assert_eq(a->n, b->n, "%s batch %u", what, i);
    cr_assert_eq(memcmp(a->ids, b->ids, a->n * sizeof(int64_t)), 0, "%s batch %u", what, i);
}

Test(order_model, one_global_sequence_whatever_the_workers_kills_and_resumes)
{
    uint64_t seed = tu_seed("order_model");
    uint64_t rng = seed;
    static run_t run, resumed;
    for (uint32_t s = 0; s < SPLITS; s++)
        rows_of[s] = (uint32_t)tu_below(&rng, MAX_ROWS + 1);
    for (uint32_t e = 0; e < 2; e++) {
        uint32_t order[SPLITS];
        epoch_order(seed, e, order);
        /* the reference: each split whole, in the epoch's order */
        static mbatch_t ref[MAX_SEQ];
        uint32_t n_ref = 0;
        for (uint32_t p = 0; p < SPLITS; p++)
            n_ref += cut(order[p], e, 0, rows_of[order[p]], &ref[n_ref]);
        cr_assert_leq(n_ref, MAX_SEQ);
        for (uint32_t trial = 0; trial < 40; trial++) {
            memset(&run, 0, sizeof run);
            run.ranks = 1 + (uint32_t)tu_below(&rng, 4);
            run.workers = 1 + (uint32_t)tu_below(&rng, 4);
            run.window = 1 + (uint32_t)tu_below(&rng, 4);
            run.kill_pct = 1 + (uint32_t)tu_below(&rng, 5);
            run.stop_at = UINT32_MAX;
            play(&run, e, order, &rng);
            cr_assert_eq(run.n_seq, n_ref, "epoch %u trial %u", e, trial);
            for (uint32_t i = 0; i < n_ref; i++)
                same_batch(&run.seq[i], &ref[i], "uninterrupted", i);

            /* interrupted: everything stops at a random moment, the ranks
             * as far apart as the buffers let them be (a rank's token
             * names the batches it handed out), then R' ranks resume
             * without those batches */
            uint32_t steps = run.steps;
            memset(&run, 0, sizeof run);
            run.ranks = 1 + (uint32_t)tu_below(&rng, 4);
            run.workers = 1 + (uint32_t)tu_below(&rng, 4);
            run.window = 1 + (uint32_t)tu_below(&rng, 4);
            run.kill_pct = (uint32_t)tu_below(&rng, 6);
            run.stop_at = (uint32_t)tu_below(&rng, steps + 1);
            play(&run, e, order, &rng);
            memset(&resumed, 0, sizeof resumed);
            uint32_t rest[MAX_SEQ], n_rest = 0, handed[4] = {0};
            for (uint32_t g = 0; g < n_ref; g++) {
                /* each rank handed out a prefix of its share */
                uint32_t k = g % run.ranks;
                cr_assert(!run.have[g] || handed[k] == g / run.ranks,
                          "epoch %u trial %u: g %u after a gap of rank %u", e, trial, g, k);
                if (!run.have[g]) {
                    rest[n_rest++] = g;
                    continue;
                }
                handed[k]++;
                same_batch(&run.seq[g], &ref[g], "before the resume", g);
                uint32_t s = (uint32_t)(run.seq[g].ids[0] / 1000);
                resumed.excluded[s][resumed.n_excluded[s]++] = run.seq[g];
            }
            for (uint32_t k = 1; k < run.ranks; k++)
                apart = handed[k] > handed[0] + apart   ? handed[k] - handed[0]
                        : handed[0] > handed[k] + apart ? handed[0] - handed[k]
                                                        : apart;
            resumed.ranks = 1 + (uint32_t)tu_below(&rng, 4);
            resumed.workers = 1 + (uint32_t)tu_below(&rng, 4);
            resumed.window = 1 + (uint32_t)tu_below(&rng, 4);
            resumed.kill_pct = 2 + (uint32_t)tu_below(&rng, 6);
            resumed.stop_at = UINT32_MAX;
            play(&resumed, e, order, &rng);
            /* the original sequence less what was handed out, in order */
            cr_assert_eq(resumed.n_seq, n_rest, "epoch %u trial %u: %u ranks, then %u", e, trial,
                         run.ranks, resumed.ranks);
            for (uint32_t i = 0; i < n_rest; i++)
                same_batch(&resumed.seq[i], &ref[rest[i]], "after the resume", rest[i]);
        }
    }
    fprintf(stderr,
            "order_model: %u kills, %u leases of gaps after one, %u gaps continuing one across "
            "rows handed out before a resume; ranks up to %u batches apart at a checkpoint\n",
            kills, releases, continued, apart);
    cr_assert_gt(releases, 0, "no kill left a split partly committed: the gap path went untested");
}

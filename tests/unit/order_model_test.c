/* A model of the deterministic order (docs/DESIGN.md, "A deterministic
 * order") over the pieces built so far, before the service is wired: the
 * real batcher cuts the batches (range batching, in-batch shuffle), the
 * real sl_master_order_* numbers them and holds the lease window, the real
 * reorder buffer hands them out per rank; the model plays the master's
 * leasing, workers reading, committing into the ranks' buffers in random
 * order and being killed, and a resume from the batches the ranks handed
 * out with another number of ranks. Each lease cuts its split from the
 * first row and numbers its batches as the wiring does (order_hold.c): a
 * batch handed out before a resume neither numbered nor counted, one
 * committed under an earlier lease dropped but counted (the gap bases of
 * sl_master_order_gap_base, an earlier design, are not used by the
 * service). Checked: the sequence of batches
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
/* leases after a kill that dropped committed batches (counted); kills;
 * batches inside rows handed out before a resume (neither numbered nor
 * counted); the most batches two ranks handed out apart at a checkpoint */
static uint32_t releases, kills, skipped, apart;

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
} worker_t;

/* Are rows [from, to) inside one of batches b [n] (1), outside every one
 * (0), or across a boundary (-1)? */
static int inside(const mbatch_t *b, uint32_t n, uint64_t from, uint64_t to)
{
    for (uint32_t i = 0; i < n; i++) {
        if (to <= b[i].from || from >= b[i].to) continue;
        return from >= b[i].from && to <= b[i].to ? 1 : -1;
    }
    return 0;
}

/* One epoch of run r: leases in order within the window, workers reading
 * (cutting) a lease's split at once and committing their batches into the
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
                /* As the wiring does (state_order_skip.c, order_hold.c):
                 * every lease cuts the split from its first row; a batch
                 * wholly inside rows handed out before a resume is neither
                 * numbered nor counted, one committed under an earlier
                 * lease of this run is dropped but counted, the rest are
                 * numbered k = 0, 1, ... (g = base + k); a batch across
                 * either's boundary would mean the cuts disagree. */
                mbatch_t all[MAX_B];
                uint32_t got = cut(s, e, 0, rows_of[s], all);
                uint64_t k_next = 0;
                bool dropped = false;
                wk->n = 0;
                for (uint32_t j = 0; j < got; j++) {
                    int sk = inside(r->excluded[s], r->n_excluded[s], all[j].from, all[j].to);
                    int cm = inside(com[p], n_com[p], all[j].from, all[j].to);
                    cr_assert(sk >= 0 && cm >= 0,
                              "split %u batch [%" PRIu64 ", %" PRIu64 ") across a boundary", s,
                              all[j].from, all[j].to);
                    if (sk > 0) {
                        skipped++;
                        continue;
                    }
                    if (cm == 0) {
                        wk->b[wk->n] = all[j];
                        wk->b[wk->n].g = k_next;
                        wk->committed[wk->n++] = false;
                    }
                    dropped |= cm > 0;
                    k_next++;
                }
                releases += dropped;
                uint64_t had;
                if (sl_master_order_counted(o, p, &had))
                    cr_assert_eq(had, k_next, "split %u counted %" PRIu64 ", then %" PRIu64, s, had,
                                 k_next);
                else
                    cr_assert_eq(sl_master_order_count(o, p, k_next, &err), SL_OK, "%s", err.msg);
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
            m->g = base + m->g;
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
            "order_model: %u kills, %u leases dropping batches committed before them, %u "
            "batches handed out before a resume skipped; ranks up to %u batches apart at a "
            "checkpoint\n",
            kills, releases, skipped, apart);
    cr_assert_gt(releases, 0, "no kill left a split partly committed: that path went untested");
    cr_assert_gt(skipped, 0, "no resume skipped a batch: that path went untested");
}

/* The batcher (src/dpp/worker/batcher/batcher.h): rows of random stripes with random
 * selections come out in batches of exactly batch_size (the last one short,
 * or dropped with drop_last), every selected row once and in order, every
 * value equal to its source row, origins (split, row, sequence) right, the
 * weight label appended; the shuffle window permutes rows deterministically
 * per seed; dedup of a batch expands back to it. Rows are made from a
 * formula of their sample id, so each output row is checked on its own. */
#include <criterion/criterion.h>

#include <string.h>

#include "dpp/master/state/order.h"
#include "dpp/worker/batcher/batcher.h"
#include "sluice/wire.h"
#include "testutil.h"

static const char *const KEYS[] = {"a", "b", "u"};
static const char *const DENSE[] = {"d0", "d1"};
static const char *const LABELS[] = {"click"};

/* row r: key a has r % 3 ids, b has 1 + r % 2, u (session-like) 2 ids
 * constant over runs of 4 rows */
static int32_t len_of(int64_t r, uint32_t k)
{
    return k == 0 ? (int32_t)(r % 3) : k == 1 ? (int32_t)(1 + r % 2) : 2;
}

static int64_t val_of(int64_t r, uint32_t k, int32_t j)
{
    return k == 2 ? (r / 4) * 10 + j : r * 1000 + k * 100 + j;
}

/* A stripe of n rows whose sample ids start at first (all of it in arena). */
static void make_stripe(sl_batch_t *s, int64_t first, uint32_t n, bool weighted)
{
    sl_arena_t *ar = s->arena;
    uint64_t total = 0;
    for (uint32_t k = 0; k < 3; k++)
        for (uint32_t r = 0; r < n; r++)
            total += (uint64_t)len_of(first + r, k);
    cr_assert_eq(sl_kjt_init(&s->sparse, ar, 3, KEYS, n, total, weighted), SL_OK);
    uint64_t at = 0;
    for (uint32_t k = 0; k < 3; k++)
        for (uint32_t r = 0; r < n; r++) {
            int32_t len = len_of(first + r, k);
            s->sparse.lengths[k * n + r] = len;
            for (int32_t j = 0; j < len; j++, at++) {
                s->sparse.values[at] = val_of(first + r, k, j);
                if (weighted) s->sparse.weights[at] = (float)(j + 1) * 0.5f;
            }
        }
    cr_assert_eq(sl_dense_init(&s->dense, ar, n, 2, DENSE), SL_OK);
    cr_assert_eq(sl_dense_init(&s->labels, ar, n, 1, LABELS), SL_OK);
    s->sample_ids = sl_arena_alloc(ar, n * sizeof(int64_t));
    for (uint32_t r = 0; r < n; r++) {
        s->dense.data[r * 2] = (float)(first + r);
        s->dense.data[r * 2 + 1] = -(float)(first + r) * 0.25f;
        s->labels.data[r] = (float)((first + r) % 2);
        s->sample_ids[r] = first + r;
    }
    s->batch_size = n;
}

typedef struct sink {
    uint32_t batch_size;
    bool weighted, weight_label;
    uint64_t batches, rows;
    int64_t *order; /* sample ids in output order */
    uint64_t cap;
    sl_batch_origin_t origins[4096];
    uint32_t sizes[4096];
    uint32_t unique[4096]; /* a dedup-form batch's unique rows (collect_grouped) */
} sink_t;

/* Check every row of b against the formula; record the order. */
static sl_err_t collect(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                        sl_error_t *err)
{
    cr_assert_null(lease, "a batch of no range has no lease part");
    (void)err;
    sink_t *s = ctx;
    cr_assert_eq(sl_batch_validate(b, NULL), SL_OK);
    uint32_t n = b->batch_size;
    cr_assert_eq(b->sparse.num_keys, 3);
    cr_assert_eq(b->sparse.stride, n);
    cr_assert_eq(b->dense.cols, 2);
    cr_assert_eq(b->labels.cols, s->weight_label ? 2u : 1u);
    uint64_t koff[4];
    sl_kjt_key_offsets(&b->sparse, koff);
    for (uint32_t k = 0; k < 3; k++) {
        cr_assert_str_eq(b->sparse.keys[k], KEYS[k]);
        uint64_t off = koff[k];
        for (uint32_t i = 0; i < n; i++) {
            int64_t r = b->sample_ids[i];
            int32_t len = b->sparse.lengths[k * n + i];
            cr_assert_eq(len, len_of(r, k), "row %ld key %u", (long)r, k);
            for (int32_t j = 0; j < len; j++) {
                cr_assert_eq(b->sparse.values[off + j], val_of(r, k, j));
                if (s->weighted) cr_assert_eq(b->sparse.weights[off + j], (float)(j + 1) * 0.5f);
            }
            off += len;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        int64_t r = b->sample_ids[i];
        cr_assert_eq(b->dense.data[i * 2], (float)r);
        cr_assert_eq(b->dense.data[i * 2 + 1], -(float)r * 0.25f);
        uint32_t T = b->labels.cols;
        cr_assert_eq(b->labels.data[i * T], (float)(r % 2));
        if (s->weight_label) {
            cr_assert_str_eq(b->labels.names[1], "weight");
            cr_assert_eq(b->labels.data[i * T + 1], (float)(r % 7) + 1.0f);
        }
        cr_assert_lt(s->rows, s->cap);
        s->order[s->rows++] = r;
    }
    s->origins[s->batches] = b->origin;
    s->sizes[s->batches] = n;
    s->batches++;
    sl_batch_destroy(b);
    return SL_OK;
}

typedef struct fed {
    uint64_t n;            /* selected rows */
    int64_t *ids;          /* in order */
    uint64_t *split, *pos; /* per selected row */
} fed_t;

/* Feed `splits` splits of random stripes with random selections. */
static void feed(sl_worker_batcher_t *bt, uint64_t *seed, uint32_t splits, uint32_t epoch,
                 bool weighted, int64_t *next_id, fed_t *f)
{
    for (uint32_t sp = 0; sp < splits; sp++) {
        uint32_t stripes = 1 + (uint32_t)tu_below(seed, 4);
        uint64_t row = 0;
        for (uint32_t st = 0; st < stripes; st++) {
            uint32_t n = 1 + (uint32_t)tu_below(seed, 500);
            sl_batch_t *s = sl_batch_new(NULL);
            make_stripe(s, *next_id, n, weighted);
            uint32_t *sel = malloc(n * sizeof *sel);
            float *w = malloc(n * sizeof *w);
            uint32_t k = 0;
            uint32_t mode = (uint32_t)tu_below(seed, 3); /* all, most, few */
            for (uint32_t r = 0; r < n; r++) {
                bool keep = mode == 0 || tu_below(seed, 100) < (mode == 1 ? 80u : 10u);
                if (!keep) continue;
                sel[k] = r;
                w[k] = (float)((*next_id + r) % 7) + 1.0f;
                f->ids[f->n] = *next_id + r;
                f->split[f->n] = sp;
                f->pos[f->n] = row + r;
                f->n++;
                k++;
            }
            sl_worker_rows_origin_t o = {.epoch = epoch, .split_id = sp, .row = row};
            sl_error_t err = {0};
            cr_assert_eq(sl_worker_batcher_add(bt, s, mode == 0 ? NULL : sel, w, k, &o, &err),
                         SL_OK, "%s", err.msg);
            free(sel);
            free(w);
            sl_batch_destroy(s);
            *next_id += n;
            row += n;
        }
    }
}

static void run_in_order(bool drop_last, bool weighted)
{
    uint64_t seed = tu_seed(drop_last ? "batcher.in_order_drop_last" : "batcher.in_order");
    uint32_t B = 1 + (uint32_t)tu_below(&seed, 300);
    sink_t *sk = calloc(1, sizeof *sk);
    sk->cap = 20000;
    sk->order = calloc(sk->cap, sizeof(int64_t));
    sk->weighted = weighted;
    sk->weight_label = true;
    fed_t f = {0, calloc(20000, 8), calloc(20000, 8), calloc(20000, 8)};
    sl_worker_batcher_opts_t o = {.batch_size = B,
                                  .drop_last = drop_last,
                                  .sample_ids = true,
                                  .weight_label = "weight",
                                  .job_id = 77};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect, sk, &bt, &err), SL_OK);
    int64_t next = 0;
    feed(bt, &seed, 3, 0, weighted, &next, &f);
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK);
    uint64_t want_rows = drop_last ? f.n / B * B : f.n;
    cr_assert_eq(sk->rows, want_rows, "B %u: %lu rows out, %lu selected", B,
                 (unsigned long)sk->rows, (unsigned long)f.n);
    for (uint64_t i = 0; i < want_rows; i++)
        cr_assert_eq(sk->order[i], f.ids[i], "row %lu", (unsigned long)i);
    uint64_t at = 0, seq = 0, last_split = UINT64_MAX;
    for (uint64_t b = 0; b < sk->batches; b++) {
        cr_assert(sk->sizes[b] == B || (!drop_last && b + 1 == sk->batches && sk->sizes[b] < B));
        sl_batch_origin_t *og = &sk->origins[b];
        cr_assert_eq(og->job_id, 77);
        cr_assert_eq(og->epoch, 0);
        cr_assert_eq(og->split_id, f.split[at]);
        cr_assert_eq(og->first_row, f.pos[at]);
        seq = f.split[at] == last_split ? seq + 1 : 0;
        last_split = f.split[at];
        cr_assert_eq(og->sequence, seq);
        at += sk->sizes[b];
    }
    sl_worker_batcher_stats_t st;
    sl_worker_batcher_stats(bt, &st);
    cr_assert_eq(st.rows_in, f.n);
    cr_assert_eq(st.rows_out, want_rows);
    cr_assert_eq(st.rows_dropped, f.n - want_rows);
    cr_assert_eq(st.batches, sk->batches);
    sl_worker_batcher_destroy(bt);
    free(f.ids);
    free(f.split);
    free(f.pos);
    free(sk->order);
    free(sk);
}

Test(batcher, rows_in_order_across_stripes_and_splits)
{
    run_in_order(false, false);
}

Test(batcher, drop_last_and_weighted)
{
    run_in_order(true, true);
}

/* Batches filled by one stripe's rows take their values straight into the
 * batch (no per-key vectors), with all rows kept and with every third row
 * dropped (several runs); batches straddling two stripes go through the
 * vectors. Both must give the same rows, in order, weights included. */
Test(batcher, whole_batches_from_one_stripe_and_straddling_ones)
{
    const uint32_t B = 100, n = 250;
    sink_t *sk = calloc(1, sizeof *sk);
    sk->cap = 4 * n;
    sk->order = calloc(sk->cap, sizeof(int64_t));
    sk->weighted = true;
    sl_worker_batcher_opts_t o = {.batch_size = B, .sample_ids = true, .job_id = 5};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect, sk, &bt, &err), SL_OK);
    int64_t want[1000];
    uint64_t nwant = 0;
    uint32_t sel[250];
    for (uint32_t st = 0; st < 4; st++) {
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, (int64_t)st * n, n, true);
        uint32_t k = 0;
        for (uint32_t r = 0; r < n; r++)
            if (st < 2 || r % 3 != 0) {
                sel[k++] = r;
                want[nwant++] = (int64_t)st * n + r;
            }
        sl_worker_rows_origin_t og = {.epoch = 0, .split_id = 0, .row = (uint64_t)st * n};
        cr_assert_eq(sl_worker_batcher_add(bt, s, st < 2 ? NULL : sel, NULL, k, &og, &err), SL_OK,
                     "%s", err.msg);
        sl_batch_destroy(s);
    }
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK, "%s", err.msg);
    /* 500 rows kept whole, then 2 x 166 with every third dropped */
    cr_assert_eq(nwant, 832);
    cr_assert_eq(sk->rows, nwant);
    for (uint64_t i = 0; i < nwant; i++)
        cr_assert_eq(sk->order[i], want[i], "row %llu", (unsigned long long)i);
    cr_assert_eq(sk->batches, 9);
    for (uint64_t b = 0; b < 8; b++)
        cr_assert_eq(sk->sizes[b], B);
    cr_assert_eq(sk->sizes[8], 32);
    sl_worker_batcher_destroy(bt);
    free(sk->order);
    free(sk);
}

Test(batcher, epochs_never_share_a_batch)
{
    sink_t *sk = calloc(1, sizeof *sk);
    sk->cap = 100;
    sk->order = calloc(sk->cap, sizeof(int64_t));
    sl_worker_batcher_opts_t o = {.batch_size = 8, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect, sk, &bt, &err), SL_OK);
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, 0, 10, false);
    sl_worker_rows_origin_t e0 = {.epoch = 0, .split_id = 0, .row = 0};
    sl_worker_rows_origin_t e1 = {.epoch = 1, .split_id = 0, .row = 0};
    cr_assert_eq(sl_worker_batcher_add(bt, s, NULL, NULL, 10, &e0, &err), SL_OK);
    cr_assert_eq(sk->batches, 1);
    cr_assert_eq(sl_worker_batcher_add(bt, s, NULL, NULL, 10, &e1, &err), SL_OK);
    /* epoch 0's last 2 rows went out alone before epoch 1 began */
    cr_assert_eq(sk->batches, 3);
    cr_assert_eq(sk->sizes[1], 2);
    cr_assert_eq(sk->origins[1].epoch, 0);
    cr_assert_eq(sk->origins[2].epoch, 1);
    cr_assert_eq(sk->origins[2].first_row, 0);
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK);
    cr_assert_eq(sk->batches, 4);
    cr_assert_eq(sk->rows, 20);
    /* a stripe of another shape is refused, naming what changed */
    sl_batch_t *other = sl_batch_new(NULL);
    make_stripe(other, 0, 4, false);
    other->dense.cols = 1;
    cr_assert_eq(sl_worker_batcher_add(bt, other, NULL, NULL, 4, &e1, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "shape") != NULL, "%s", err.msg);
    /* selected rows out of order are refused */
    uint32_t bad[] = {3, 1};
    cr_assert_eq(sl_worker_batcher_add(bt, s, bad, NULL, 2, &e1, &err), SL_ERR_INVALID);
    sl_batch_destroy(other);
    sl_batch_destroy(s);
    sl_worker_batcher_destroy(bt);
    sl_worker_batcher_destroy(NULL);
    free(sk->order);
    free(sk);
}

static void shuffled_order(uint64_t shuffle_seed, uint32_t window, uint32_t B, uint64_t data_seed,
                           sink_t *sk, fed_t *f)
{
    sl_worker_batcher_opts_t o = {.batch_size = B,
                                  .sample_ids = true,
                                  .shuffle_window = window,
                                  .seed = shuffle_seed,
                                  .weight_label = "weight"};
    sk->weight_label = true;
    sk->weighted = true;
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect, sk, &bt, &err), SL_OK);
    int64_t next = 0;
    feed(bt, &data_seed, 3, 0, true, &next, f);
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK);
    sl_worker_batcher_destroy(bt);
}

Test(batcher, shuffle_window_permutes_deterministically)
{
    uint64_t seed = tu_seed("batcher.shuffle_window_permutes_deterministically");
    uint64_t data_seed = tu_next(&seed);
    uint32_t W = 16 + (uint32_t)tu_below(&seed, 400), B = 1 + (uint32_t)tu_below(&seed, 100);
    sink_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b), *c = calloc(1, sizeof *c);
    fed_t fa = {0, calloc(20000, 8), calloc(20000, 8), calloc(20000, 8)};
    fed_t fb = {0, calloc(20000, 8), calloc(20000, 8), calloc(20000, 8)};
    fed_t fc = {0, calloc(20000, 8), calloc(20000, 8), calloc(20000, 8)};
    sink_t *sinks[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        sinks[i]->cap = 20000;
        sinks[i]->order = calloc(20000, sizeof(int64_t));
    }
    shuffled_order(5, W, B, data_seed, a, &fa);
    shuffled_order(5, W, B, data_seed, b, &fb);
    shuffled_order(6, W, B, data_seed, c, &fc);
    cr_assert_eq(a->rows, fa.n);
    /* every selected row exactly once */
    uint8_t *seen = calloc(20000, 1);
    for (uint64_t i = 0; i < a->rows; i++) {
        cr_assert_eq(seen[a->order[i]], 0);
        seen[a->order[i]] = 1;
    }
    for (uint64_t i = 0; i < fa.n; i++)
        cr_assert_eq(seen[fa.ids[i]], 1);
    /* same seed, same order; another seed, another order; not the input order */
    cr_assert_eq(memcmp(a->order, b->order, a->rows * 8), 0);
    cr_assert_neq(memcmp(a->order, c->order, a->rows * 8), 0);
    cr_assert_neq(memcmp(a->order, fa.ids, a->rows * 8), 0);
    /* rows never leave their window: row i of the output came from window i / W */
    for (uint64_t i = 0; i < a->rows; i++) {
        uint64_t src = 0;
        while (fa.ids[src] != a->order[i])
            src++;
        cr_assert_eq(src / W, i / W);
    }
    for (int i = 0; i < 3; i++) {
        free(sinks[i]->order);
        free(sinks[i]);
    }
    fed_t *fs[3] = {&fa, &fb, &fc};
    for (int i = 0; i < 3; i++) {
        free(fs[i]->ids);
        free(fs[i]->split);
        free(fs[i]->pos);
    }
    free(seen);
}

static sl_batch_t *kept;
static sl_err_t keep(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                     sl_error_t *err)
{
    cr_assert_null(lease, "a batch of no range has no lease part");
    (void)ctx;
    (void)err;
    kept = b;
    return SL_OK;
}

Test(batcher, dedup_expands_back_and_expanded_bytes)
{
    sl_worker_batcher_opts_t o = {.batch_size = 64, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, keep, NULL, &bt, &err), SL_OK);
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, 100, 64, false);
    sl_worker_rows_origin_t og = {0};
    cr_assert_eq(sl_worker_batcher_add(bt, s, NULL, NULL, 64, &og, &err), SL_OK);
    cr_assert_not_null(kept);
    sl_kjt_t orig = kept->sparse;
    size_t plain_size = sl_wire_encoded_size(kept);
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    const char *gf[] = {"u"};
    sl_dedup_group_spec_t g = {.name = "user", .num_features = 1, .features = gf};
    sl_dedup_stats_t ds;
    cr_assert_eq(sl_worker_batcher_dedup(d, kept, &g, 1, &ds, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(kept->num_groups, 1);
    cr_assert_eq(ds.batch_size, 64);
    cr_assert_eq(ds.unique_rows, 16, "runs of 4 rows share u");
    sl_kjt_t ex;
    cr_assert_eq(sl_batch_expand(kept, kept->arena, &ex, &err), SL_OK);
    cr_assert(sl_kjt_equal(&ex, &orig));
    size_t dedup_size = sl_wire_encoded_size(kept);
    cr_assert_lt(dedup_size, plain_size);
    uint64_t est = sl_worker_batcher_expanded_bytes(kept, dedup_size);
    /* the estimate leaves out alignment padding and header bytes only */
    cr_assert(est + 1024 >= plain_size && est <= plain_size + 1024, "est %lu plain %zu",
              (unsigned long)est, plain_size);
    sl_dedup_destroy(d);
    sl_batch_destroy(kept);
    sl_batch_destroy(s);
    sl_worker_batcher_destroy(bt);
}

/* Key offsets handed in by the source (the reader sums them while decoding)
 * give the batch that summing them here gives; offsets that do not end at
 * the rows' values are refused. */
Test(batcher, key_offsets_from_the_source)
{
    sl_worker_batcher_opts_t o = {.batch_size = 48, .sample_ids = true};
    sl_error_t err = {0};
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, 7, 48, false);
    uint64_t koff[8];
    cr_assert_leq(s->sparse.num_keys, 7);
    sl_kjt_key_offsets(&s->sparse, koff);
    sl_batch_t *got[2];
    for (int with = 0; with < 2; with++) {
        sl_worker_batcher_t *bt;
        cr_assert_eq(sl_worker_batcher_new(&o, keep, NULL, &bt, &err), SL_OK);
        sl_worker_rows_origin_t og = {.key_offsets = with ? koff : NULL};
        kept = NULL;
        cr_assert_eq(sl_worker_batcher_add(bt, s, NULL, NULL, 48, &og, &err), SL_OK, "%s", err.msg);
        cr_assert_not_null(kept);
        got[with] = kept;
        sl_worker_batcher_destroy(bt);
    }
    cr_assert(sl_kjt_equal(&got[0]->sparse, &got[1]->sparse));
    sl_batch_destroy(got[0]);
    sl_batch_destroy(got[1]);

    sl_worker_batcher_t *bt;
    cr_assert_eq(sl_worker_batcher_new(&o, keep, NULL, &bt, &err), SL_OK);
    koff[s->sparse.num_keys] += 1;
    sl_worker_rows_origin_t bad = {.key_offsets = koff};
    cr_assert_eq(sl_worker_batcher_add(bt, s, NULL, NULL, 48, &bad, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "key offsets") != NULL, "%s", err.msg);
    sl_worker_batcher_destroy(bt);
    sl_batch_destroy(s);
}

/* Rows in dedup form (storage dedup read as IKJTs): the batcher keeps each
 * stripe's unique rows once per batch and remaps the inverse indices;
 * expanding a batch gives exactly the rows of the formula, and
 * sl_worker_batcher_dedup keeps the stored group (renamed for the job). */
static sl_err_t collect_grouped(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                                sl_error_t *err)
{
    cr_assert_null(lease, "a batch of no range has no lease part");
    sink_t *s = ctx;
    cr_assert_eq(sl_batch_validate(b, NULL), SL_OK);
    cr_assert_eq(b->num_groups, 1);
    cr_assert_eq(b->sparse.num_keys, 2);
    const sl_ikjt_t *ik = &b->groups[0];
    cr_assert_eq(ik->batch_size, b->batch_size);
    /* rows come in runs of 4 sharing u: a batch holds at most one unique
     * row per run it touches per stripe */
    cr_assert_leq(ik->unique.stride, b->batch_size);
    cr_assert_lt(s->batches, 4096);
    s->unique[s->batches] = ik->unique.stride;
    sl_kjt_t ex;
    cr_assert_eq(sl_batch_expand(b, b->arena, &ex, err), SL_OK, "%s", err->msg);
    b->sparse = ex;
    b->num_groups = 0;
    b->groups = NULL;
    return collect(ctx, b, lease, err);
}

Test(batcher, rows_in_dedup_form_keep_their_unique_rows)
{
    uint64_t seed = tu_seed("batcher.rows_in_dedup_form_keep_their_unique_rows");
    uint32_t B = 1 + (uint32_t)tu_below(&seed, 200);
    sink_t *sk = calloc(1, sizeof *sk);
    sk->cap = 20000;
    sk->order = calloc(sk->cap, sizeof(int64_t));
    sl_worker_batcher_opts_t o = {.batch_size = B, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_grouped, sk, &bt, &err), SL_OK);
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    const char *gf[] = {"u"};
    sl_dedup_group_spec_t g = {.name = "stored", .num_features = 1, .features = gf};
    int64_t next = 0;
    uint64_t want = 0;
    int64_t *expect = calloc(20000, sizeof *expect);
    for (uint32_t st = 0; st < 6; st++) {
        uint32_t n = 1 + (uint32_t)tu_below(&seed, 700);
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, next, n, false);
        cr_assert_eq(sl_worker_batcher_dedup(d, s, &g, 1, NULL, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(s->num_groups, 1);
        uint32_t *sel = malloc(n * sizeof *sel), k = 0;
        for (uint32_t r = 0; r < n; r++)
            if (tu_below(&seed, 100) < 70) {
                sel[k++] = r;
                expect[want++] = next + r;
            }
        sl_worker_rows_origin_t og = {.epoch = 0, .split_id = st, .row = 0};
        cr_assert_eq(sl_worker_batcher_add(bt, s, sel, NULL, k, &og, &err), SL_OK, "%s", err.msg);
        free(sel);
        sl_batch_destroy(s);
        next += n;
    }
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK);
    cr_assert_eq(sk->rows, want);
    for (uint64_t i = 0; i < want; i++)
        cr_assert_eq(sk->order[i], expect[i]);
    /* rows come in runs of 4 sharing u and 70 % are kept: a batch of B >= 8
     * rows all from distinct runs is rare enough that every batch being so
     * does not happen, so the batches in dedup form must share rows. (An
     * earlier form of this check read the counts from the origins, which
     * collect overwrote: it summed split ids and failed for some seeds.) */
    uint64_t unique = 0;
    for (uint64_t b = 0; b < sk->batches; b++) {
        cr_assert_leq(sk->unique[b], sk->sizes[b], "batch %lu: %u unique of %u rows",
                      (unsigned long)b, sk->unique[b], sk->sizes[b]);
        unique += sk->unique[b];
    }
    cr_assert_leq(unique, want);
    if (B >= 8)
        cr_assert_lt(unique, want, "dedup form kept duplicates apart: %lu unique of %lu (B %u)",
                     (unsigned long)unique, (unsigned long)want, B);

    /* sl_worker_batcher_dedup keeps a matching stored group, under the job's name */
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, 0, 32, false);
    cr_assert_eq(sl_worker_batcher_dedup(d, s, &g, 1, NULL, &err), SL_OK);
    int32_t *inv_before = s->groups[0].inverse;
    sl_dedup_group_spec_t job_g = {.name = "user", .num_features = 1, .features = gf};
    sl_dedup_stats_t ds;
    cr_assert_eq(sl_worker_batcher_dedup(d, s, &job_g, 1, &ds, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(s->groups[0].name, "user");
    cr_assert_eq(s->groups[0].inverse, inv_before, "kept, not recomputed");
    cr_assert_eq(ds.unique_rows, 8);
    cr_assert_eq(ds.batch_size, 32);
    /* ... and a job without that group gets the rows expanded */
    cr_assert_eq(sl_worker_batcher_dedup(d, s, NULL, 0, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(s->num_groups, 0);
    cr_assert_eq(s->sparse.num_keys, 3);
    cr_assert_str_eq(s->sparse.keys[2], "u");
    sl_batch_destroy(s);
    free(expect);
    sl_dedup_destroy(d);
    sl_worker_batcher_destroy(bt);
    free(sk->order);
    free(sk);
}

/* ---- ranges (rows of a lease) ---- */

typedef struct rsink {
    uint32_t batches;
    sl_worker_lease_origin_t lease[16];
    sl_batch_origin_t origin[16];
    int64_t ids[16][8]; /* sample ids (= split rows here) in batch order */
    uint32_t n[16];
} rsink_t;

static sl_err_t collect_ranged(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                               sl_error_t *err)
{
    (void)err;
    rsink_t *s = ctx;
    cr_assert_not_null(lease, "a batch of a range carries its lease part");
    cr_assert_lt(s->batches, 16);
    cr_assert_leq(b->batch_size, 8);
    s->lease[s->batches] = *lease;
    s->origin[s->batches] = b->origin;
    s->n[s->batches] = b->batch_size;
    memcpy(s->ids[s->batches], b->sample_ids, b->batch_size * sizeof(int64_t));
    s->batches++;
    sl_batch_destroy(b);
    return SL_OK;
}

/* Add the rows of [from, to) that are not multiples of 5 (the "filter")
 * from a split of 30 rows in two stripes of 15, as the reader does. */
static void add_kept(sl_worker_batcher_t *bt, sl_batch_t *const st[2], uint32_t split,
                     uint64_t from, uint64_t to)
{
    for (uint32_t k = 0; k < 2; k++) {
        uint32_t sel[15], n = 0;
        for (uint32_t r = 0; r < 15; r++) {
            uint64_t row = k * 15 + r;
            if (row >= from && row < to && row % 5 != 0) sel[n++] = r;
        }
        if (n == 0) continue;
        sl_worker_rows_origin_t o = {.epoch = 1, .split_id = split, .row = k * 15};
        sl_error_t err = {0};
        cr_assert_eq(sl_worker_batcher_add(bt, st[k], sel, NULL, n, &o, &err), SL_OK, "%s",
                     err.msg);
    }
}

static void run_ranges(bool drop_last)
{
    sl_batch_t *st[2];
    for (int k = 0; k < 2; k++) {
        st[k] = sl_batch_new(NULL);
        make_stripe(st[k], k * 15, 15, false);
    }
    rsink_t sk = {0};
    sl_worker_batcher_opts_t o = {.batch_size = 8, .drop_last = drop_last, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk, &bt, &err), SL_OK);
    int lease_handle;
    sl_worker_lease_origin_t lo = {
        .handle = &lease_handle, .split = 4, .generation = 9, .rank_plus_one = 2, .from_row = 2};
    sl_dpp_row_range_t e;
    /* range [2, 24): kept 2 3 4 6 7 8 9 11 | 12 13 14 16 17 18 19 21 | 22 23 */
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    add_kept(bt, st, 4, 2, 24);
    cr_assert_eq(sk.batches, 2);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 24, &e, &err), SL_OK, "%s", err.msg);
    /* range [25, 26): row 25 filtered, no batch */
    lo.from_row = 25;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    add_kept(bt, st, 4, 25, 26);
    sl_dpp_row_range_t e2;
    cr_assert_eq(sl_worker_batcher_end_range(bt, 26, &e2, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(e2.from_row, 25);
    cr_assert_eq(e2.to_row, 26);

    static const int64_t want[3][8] = {
        {2, 3, 4, 6, 7, 8, 9, 11}, {12, 13, 14, 16, 17, 18, 19, 21}, {22, 23}};
    static const uint64_t from[3] = {2, 12, 22}, to[3] = {12, 22, 24};
    uint32_t nb = drop_last ? 2 : 3;
    cr_assert_eq(sk.batches, nb);
    for (uint32_t b = 0; b < nb; b++) {
        cr_assert_eq(sk.n[b], b < 2 ? 8u : 2u);
        cr_assert_eq(memcmp(sk.ids[b], want[b], sk.n[b] * sizeof(int64_t)), 0, "batch %u", b);
        cr_assert_eq(sk.lease[b].handle, &lease_handle);
        cr_assert_eq(sk.lease[b].split, 4);
        cr_assert_eq(sk.lease[b].generation, 9);
        cr_assert_eq(sk.lease[b].rank_plus_one, 2);
        cr_assert_eq(sk.lease[b].from_row, from[b], "batch %u", b);
        cr_assert_eq(sk.lease[b].to_row, to[b], "batch %u", b);
        cr_assert_eq(sk.origin[b].split_id, 4);
        cr_assert_eq(sk.origin[b].epoch, 1);
        cr_assert_eq(sk.origin[b].first_row, (uint64_t)want[b][0]);
        cr_assert_eq(sk.origin[b].sequence, b);
    }
    /* the short batch's rows are empty when dropped */
    cr_assert_eq(e.from_row, drop_last ? 22 : 24);
    cr_assert_eq(e.to_row, 24);
    sl_worker_batcher_stats_t bs;
    sl_worker_batcher_stats(bt, &bs);
    cr_assert_eq(bs.rows_in, 18);
    cr_assert_eq(bs.rows_out, drop_last ? 16 : 18);
    cr_assert_eq(bs.rows_dropped, drop_last ? 2 : 0);

    /* out of turn: an end of no range, rows of another split, an end of
     * the epoch inside a range, a range begun with rows held */
    cr_assert_eq(sl_worker_batcher_end_range(bt, 30, &e, &err), SL_ERR_INVALID);
    lo.from_row = 26;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    uint32_t one = 1;
    sl_worker_rows_origin_t other = {.epoch = 1, .split_id = 5, .row = 15};
    cr_assert_eq(sl_worker_batcher_add(bt, st[1], &one, NULL, 1, &other, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "split 5") != NULL, "%s", err.msg);
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_ERR_INVALID);
    add_kept(bt, st, 4, 26, 28);
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_ERR_INVALID);
    /* discard leaves the range: nothing held, a new range may begin */
    sl_worker_batcher_discard(bt);
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    sl_worker_batcher_destroy(bt);
    for (int k = 0; k < 2; k++)
        sl_batch_destroy(st[k]);
}

Test(batcher, ranges_tile_rows_and_carry_the_lease)
{
    run_ranges(false);
}

Test(batcher, ranges_with_drop_last_report_the_dropped_rows_empty)
{
    run_ranges(true);
}

/* A Kafka stripe under a lease: its records, sorted by session, are
 * not numbered by their place, and its offsets have gaps (markers,
 * aborted and bad records). Added as one unit [row, end_row), the batch
 * it fills covers exactly its offsets and the gaps up to end_row: a batch
 * that claimed [row, row + n) (the rows' count) would leave records past
 * it "committed as empty" in SPLIT_READ, lost if the batch is lost. */
Test(batcher, a_unit_of_rows_fills_a_batch_up_to_its_end_row)
{
    sl_batch_t *st = sl_batch_new(NULL);
    make_stripe(st, 100, 8, false);
    rsink_t sk = {0};
    sl_worker_batcher_opts_t o = {.batch_size = 8, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk, &bt, &err), SL_OK);
    int lease_handle;
    sl_worker_lease_origin_t lo = {.handle = &lease_handle, .split = 3, .generation = 5};
    sl_dpp_row_range_t e;
    /* 8 records at offsets [2, 20) of the chunk: a full batch, to 20 */
    lo.from_row = 2;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    sl_worker_rows_origin_t ro = {.epoch = 0, .split_id = 3, .row = 2, .end_row = 20};
    cr_assert_eq(sl_worker_batcher_add(bt, st, NULL, NULL, 8, &ro, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sk.batches, 1);
    cr_assert_eq(sk.lease[0].from_row, 2);
    cr_assert_eq(sk.lease[0].to_row, 20);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 20, &e, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(e.from_row, e.to_row, "nothing of [2, 20) is empty");
    /* 3 of them kept, in [20, 31): a short batch [20, 31) */
    uint32_t sel[3] = {1, 4, 6};
    lo.from_row = 20;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    ro = (sl_worker_rows_origin_t){.epoch = 0, .split_id = 3, .row = 20, .end_row = 31};
    cr_assert_eq(sl_worker_batcher_add(bt, st, sel, NULL, 3, &ro, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 31, &e, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sk.batches, 2);
    cr_assert_eq(sk.n[1], 3);
    static const int64_t want[3] = {101, 104, 106};
    cr_assert_eq(memcmp(sk.ids[1], want, sizeof want), 0);
    cr_assert_eq(sk.lease[1].from_row, 20);
    cr_assert_eq(sk.lease[1].to_row, 31);
    cr_assert_eq(e.from_row, e.to_row);
    /* none kept of [31, 40): all of it empty */
    lo.from_row = 31;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 40, &e, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(e.from_row, 31);
    cr_assert_eq(e.to_row, 40);
    /* a unit that does not fit the batch being built is refused, not split */
    lo.from_row = 40;
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 0, &err), SL_OK, "%s", err.msg);
    ro = (sl_worker_rows_origin_t){.epoch = 0, .split_id = 3, .row = 40, .end_row = 45};
    cr_assert_eq(sl_worker_batcher_add(bt, st, sel, NULL, 3, &ro, &err), SL_OK, "%s", err.msg);
    ro = (sl_worker_rows_origin_t){.epoch = 0, .split_id = 3, .row = 45, .end_row = 60};
    cr_assert_eq(sl_worker_batcher_add(bt, st, NULL, NULL, 8, &ro, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "does not fit the 5 rows left") != NULL, "%s", err.msg);
    cr_assert_eq(sk.batches, 2);
    sl_worker_batcher_destroy(bt);
    sl_batch_destroy(st);
}

/* With a shuffle window (of the batch size, the only one a range takes) a
 * batch of a range shuffles its own rows, in an order drawn from its split
 * and first row: the same whatever ranges came before it. */
Test(batcher, ranges_shuffle_within_a_batch_whatever_came_before)
{
    sl_batch_t *st[2];
    for (int k = 0; k < 2; k++) {
        st[k] = sl_batch_new(NULL);
        make_stripe(st[k], k * 15, 15, false);
    }
    sl_worker_batcher_opts_t o = {
        .batch_size = 8, .sample_ids = true, .shuffle_window = 8, .seed = 11};
    sl_error_t err = {0};
    sl_dpp_row_range_t e;
    rsink_t sk[2] = {{0}};
    for (int run = 0; run < 2; run++) {
        sl_worker_batcher_t *bt;
        cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk[run], &bt, &err), SL_OK);
        sl_worker_lease_origin_t lo = {.handle = &sk[run], .split = 3, .from_row = 0};
        if (run == 1) { /* another lease first */
            cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
            add_kept(bt, st, 3, 0, 30);
            cr_assert_eq(sl_worker_batcher_end_range(bt, 30, &e, &err), SL_OK, "%s", err.msg);
        }
        lo.split = 4;
        lo.from_row = 2;
        cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
        add_kept(bt, st, 4, 2, 24);
        cr_assert_eq(sl_worker_batcher_end_range(bt, 24, &e, &err), SL_OK, "%s", err.msg);
        sl_worker_batcher_destroy(bt);
    }
    /* run 1: 3 batches of split 3 (24 kept rows), then split 4's */
    cr_assert_eq(sk[0].batches, 3);
    cr_assert_eq(sk[1].batches, 6);
    bool moved = false;
    static const int64_t want[3][8] = {
        {2, 3, 4, 6, 7, 8, 9, 11}, {12, 13, 14, 16, 17, 18, 19, 21}, {22, 23}};
    for (uint32_t b = 0; b < 3; b++) {
        const rsink_t *a = &sk[0], *c = &sk[1];
        cr_assert_eq(c->lease[b + 3].split, 4);
        cr_assert_eq(a->lease[b].from_row, c->lease[b + 3].from_row);
        cr_assert_eq(a->lease[b].to_row, c->lease[b + 3].to_row);
        cr_assert_eq(a->n[b], c->n[b + 3]);
        cr_assert_eq(memcmp(a->ids[b], c->ids[b + 3], a->n[b] * sizeof(int64_t)), 0,
                     "batch %u's order depends on what came before", b);
        /* a permutation of the batch's rows */
        for (uint32_t i = 0; i < a->n[b]; i++) {
            uint32_t found = 0;
            for (uint32_t j = 0; j < a->n[b]; j++)
                found += a->ids[b][j] == want[b][i];
            cr_assert_eq(found, 1, "batch %u row %ld", b, (long)want[b][i]);
        }
        moved |= memcmp(a->ids[b], want[b], a->n[b] * sizeof(int64_t)) != 0;
    }
    cr_assert(moved, "rows were shuffled");
    /* a window other than the batch size is refused for a range */
    o.shuffle_window = 16;
    sl_worker_batcher_t *bt;
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &sk[0], &bt, &err), SL_OK);
    sl_worker_lease_origin_t lo = {.split = 4};
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_ERR_INVALID);
    sl_worker_batcher_destroy(bt);
    for (int k = 0; k < 2; k++)
        sl_batch_destroy(st[k]);
}

/* Record CreateTimes (Kafka rows, sl_batch_t.record_ms) go with their rows:
 * through a selection and a shuffle window each output row has its own
 * row's time (time = 1700000000000 + 7 * sample id, some unknown: -1); rows
 * of a later stripe without times are a change of shape. */
static int64_t time_of(int64_t id)
{
    return id % 11 == 10 ? -1 : 1700000000000 + 7 * id;
}

typedef struct times_sink {
    uint64_t rows, batches;
    uint8_t seen[4096];
} times_sink_t;

static sl_err_t check_times(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                            sl_error_t *err)
{
    (void)lease;
    (void)err;
    times_sink_t *s = ctx;
    cr_assert_not_null(b->record_ms, "a batch of rows with times has times");
    for (uint32_t i = 0; i < b->batch_size; i++) {
        int64_t id = b->sample_ids[i];
        cr_assert_eq(b->record_ms[i], time_of(id), "row %u (sample %ld)", i, (long)id);
        cr_assert_eq(s->seen[id]++, 0);
    }
    s->rows += b->batch_size;
    s->batches++;
    sl_batch_destroy(b);
    return SL_OK;
}

Test(batcher, record_times_travel_with_their_rows)
{
    times_sink_t *sk = calloc(1, sizeof *sk);
    sl_worker_batcher_opts_t o = {
        .batch_size = 37, .shuffle_window = 100, .seed = 9, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, check_times, sk, &bt, &err), SL_OK);
    uint32_t sel[300], k = 0;
    int64_t first = 0;
    uint64_t want = 0;
    for (int st = 0; st < 4; st++) {
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, first, 300, false);
        s->record_ms = sl_arena_alloc(s->arena, 300 * sizeof(int64_t));
        for (uint32_t r = 0; r < 300; r++)
            s->record_ms[r] = time_of(first + r);
        k = 0;
        for (uint32_t r = 0; r < 300; r++)
            if (r % 3 != 1) sel[k++] = r;
        sl_worker_rows_origin_t og = {.epoch = 0, .split_id = (uint64_t)st};
        cr_assert_eq(sl_worker_batcher_add(bt, s, sel, NULL, k, &og, &err), SL_OK, "%s", err.msg);
        want += k;
        first += 300;
        sl_batch_destroy(s);
    }
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sk->rows, want);
    cr_assert_eq(sk->rows, 800);
    cr_assert_eq(sk->batches, 22); /* 800 rows in batches of 37: 21 full, one of 23 */
    for (int64_t id = 0; id < 1200; id++)
        cr_assert_eq(sk->seen[id], id % 3 != 1 ? 1 : 0, "sample %ld", (long)id);
    /* the same rows without times: refused, not batched with a hole */
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, first, 10, false);
    sl_worker_rows_origin_t og = {.epoch = 1, .split_id = 9};
    cr_assert_eq(sl_worker_batcher_add(bt, s, NULL, NULL, 10, &og, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "batcher: rows changed shape (3 keys, 2 dense, 1 labels, record "
                              "times no; expected 3, 2, 1, yes)");
    sl_batch_destroy(s);
    sl_worker_batcher_destroy(bt);
    free(sk);
}

/* The deterministic order's premise (docs/DESIGN.md, "A deterministic
 * order", Failures): a lease killed after committing some batches of a
 * split leaves gaps that start at the split's first row or at a committed
 * batch's end; batching each gap from its start cuts the original batches
 * again, rows and in-batch shuffle alike, and sl_master_order_gap_base
 * gives them their original global indices. Split 4 at base 10, batches
 * of 5 of the rows not multiples of 5: [0, 7) [7, 13) [13, 19) [19, 25)
 * [25, 30); the lease died with g 11 and 13 committed. */
Test(batcher, a_gap_after_a_killed_lease_cuts_the_original_batches_again)
{
    sl_batch_t *st[2];
    for (int k = 0; k < 2; k++) {
        st[k] = sl_batch_new(NULL);
        make_stripe(st[k], k * 15, 15, false);
    }
    sl_worker_batcher_opts_t o = {
        .batch_size = 5, .sample_ids = true, .shuffle_window = 5, .seed = 28};
    sl_error_t err = {0};
    sl_dpp_row_range_t e;
    rsink_t whole = {0}, again = {0};
    sl_worker_batcher_t *bt;
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &whole, &bt, &err), SL_OK);
    sl_worker_lease_origin_t lo = {.handle = &whole, .split = 4, .from_row = 0};
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
    add_kept(bt, st, 4, 0, 30);
    cr_assert_eq(sl_worker_batcher_end_range(bt, 30, &e, &err), SL_OK, "%s", err.msg);
    sl_worker_batcher_destroy(bt);
    static const uint64_t from[5] = {0, 7, 13, 19, 25}, to[5] = {7, 13, 19, 25, 30};
    cr_assert_eq(whole.batches, 5);
    for (uint32_t b = 0; b < 5; b++) {
        cr_assert_eq(whole.lease[b].from_row, from[b], "batch %u", b);
        cr_assert_eq(whole.lease[b].to_row, to[b], "batch %u", b);
    }

    const sl_master_order_batch_t committed[] = {{7, 13, 11}, {19, 25, 13}};
    static const uint64_t gap_from[3] = {0, 13, 25}, gap_to[3] = {7, 19, 30};
    static const uint32_t original[3] = {0, 2, 4};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, &again, &bt, &err), SL_OK);
    for (uint32_t k = 0; k < 3; k++) {
        uint64_t g = 0, limit = 0;
        cr_assert_eq(
            sl_master_order_gap_base(10, 0, committed, 2, NULL, 0, gap_from[k], &g, &limit, &err),
            SL_OK, "%s", err.msg);
        cr_assert_eq(g, 10 + original[k], "gap %u", k);
        lo.from_row = gap_from[k];
        cr_assert_eq(sl_worker_batcher_begin_range(bt, &lo, 1, &err), SL_OK, "%s", err.msg);
        add_kept(bt, st, 4, gap_from[k], gap_to[k]);
        cr_assert_eq(sl_worker_batcher_end_range(bt, gap_to[k], &e, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(again.batches, k + 1, "gap %u is one original batch", k);
        cr_assert_eq(limit, k < 2 ? g + 1 : UINT64_MAX, "gap %u: the next committed g", k);
        uint32_t b = original[k];
        cr_assert_eq(again.lease[k].from_row, whole.lease[b].from_row, "gap %u", k);
        cr_assert_eq(again.lease[k].to_row, whole.lease[b].to_row, "gap %u", k);
        cr_assert_eq(again.n[k], whole.n[b], "gap %u", k);
        cr_assert_eq(memcmp(again.ids[k], whole.ids[b], whole.n[b] * sizeof(int64_t)), 0,
                     "gap %u: the rows or their shuffled order differ from batch %u", k, b);
    }
    sl_worker_batcher_destroy(bt);
    for (int k = 0; k < 2; k++)
        sl_batch_destroy(st[k]);
}

/* An owned stripe (sl_worker_batcher_add_owned) that is a whole batch on
 * its own becomes that batch: its arena taken, its buffers the batch's,
 * numbered as a built batch; any other (a different size, rows held
 * before it, a selection) is copied and the arena stays the caller's.
 * Either way every row comes out once, in order, with its values. */
static const int64_t *taken_ids[8]; /* the stripes' sample ids, by batch */
static uint32_t taken_n;
static sl_err_t collect_taken(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                              sl_error_t *err)
{
    cr_assert_lt(taken_n, 8);
    taken_ids[taken_n++] = b->sample_ids;
    return collect(ctx, b, lease, err);
}

Test(batcher, an_owned_stripe_of_a_whole_batch_is_taken_not_copied)
{
    const uint32_t B = 100;
    sink_t *sk = calloc(1, sizeof *sk);
    sk->cap = 1000;
    sk->order = calloc(sk->cap, sizeof(int64_t));
    sk->weighted = true;
    sl_worker_batcher_opts_t o = {.batch_size = B, .sample_ids = true, .job_id = 5};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_taken, sk, &bt, &err), SL_OK);
    /* stripes of 100 (taken), 250 (copied: 2 batches, 50 held), 100 (copied:
     * rows held), 100 with every row selected (taken), 100 with a selection
     * (copied) */
    const uint32_t sizes[] = {100, 250, 100, 100, 100};
    const bool taken[] = {true, false, false, true, false};
    const int64_t *ids[5];
    int64_t first = 0;
    uint32_t sel[100];
    for (uint32_t i = 0; i < 90; i++)
        sel[i] = i + (i >= 45 ? 10 : 0); /* rows 45..54 left out */
    for (uint32_t st = 0; st < 5; st++) {
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, first, sizes[st], true);
        ids[st] = s->sample_ids;
        sl_arena_t *owned = s->arena;
        uint32_t n = st == 4 ? 90 : sizes[st];
        sl_worker_rows_origin_t og = {.epoch = 0, .split_id = 2, .row = (uint64_t)first};
        if (st == 3) /* the 50 rows held go out first, as the short batch of their epoch */
            cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(
            sl_worker_batcher_add_owned(bt, s, st == 4 ? sel : NULL, NULL, n, &og, &owned, &err),
            SL_OK, "stripe %u: %s", st, err.msg);
        cr_assert_eq(owned == NULL, taken[st], "stripe %u", st);
        if (owned) sl_arena_destroy(owned); /* s lies in it */
        first += sizes[st];
    }
    cr_assert_eq(sl_worker_batcher_end_epoch(bt, &err), SL_OK, "%s", err.msg);
    /* batches: [0,100) taken, [100,200) [200,300) copied, [300,400) copied,
     * [400,450) short, [450,550) taken, then 90 of [550,650) */
    const uint32_t want_sizes[] = {100, 100, 100, 100, 50, 100, 90};
    const uint64_t want_first[] = {0, 100, 200, 300, 400, 450, 550};
    cr_assert_eq(sk->batches, 7);
    cr_assert_eq(taken_n, 7);
    for (uint32_t b = 0; b < 7; b++) {
        cr_assert_eq(sk->sizes[b], want_sizes[b], "batch %u", b);
        cr_assert_eq(sk->origins[b].first_row, want_first[b], "batch %u", b);
        cr_assert_eq(sk->origins[b].sequence, b, "batch %u", b);
        cr_assert_eq(sk->origins[b].job_id, 5);
        cr_assert_eq(sk->origins[b].split_id, 2);
    }
    /* the taken batches' ids are the stripes' own buffers, no other's */
    cr_assert_eq(taken_ids[0], ids[0]);
    cr_assert_eq(taken_ids[5], ids[3]);
    for (uint32_t b = 1; b < 5; b++)
        for (uint32_t st = 0; st < 5; st++)
            cr_assert_neq(taken_ids[b], ids[st], "batch %u", b);
    cr_assert_eq(sk->rows, 640);
    for (uint64_t i = 0; i < 640; i++) {
        int64_t want = i < 595 ? (int64_t)i : (int64_t)i + 10;
        cr_assert_eq(sk->order[i], want, "row %llu", (unsigned long long)i);
    }
    sl_worker_batcher_destroy(bt);
    free(sk->order);
    free(sk);
}

/* In a range, a taken stripe is a batch of the range as a built one is:
 * the lease part covers its rows, up to a unit's end row. */
Test(batcher, an_owned_stripe_in_a_range_carries_its_rows)
{
    rsink_t *sk = calloc(1, sizeof *sk);
    sl_worker_batcher_opts_t o = {.batch_size = 8, .sample_ids = true};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, collect_ranged, sk, &bt, &err), SL_OK);
    sl_worker_lease_origin_t lease = {.handle = sk, .split = 3, .generation = 2, .from_row = 16};
    cr_assert_eq(sl_worker_batcher_begin_range(bt, &lease, 1, &err), SL_OK, "%s", err.msg);
    for (int u = 0; u < 2; u++) {
        sl_batch_t *s = sl_batch_new(NULL);
        make_stripe(s, 16 + 8 * u, 8, false);
        sl_arena_t *owned = s->arena;
        /* the second: a unit of records with gaps, rows [24, 40) */
        sl_worker_rows_origin_t og = {
            .epoch = 1, .split_id = 3, .row = 16 + 8 * (uint64_t)u, .end_row = u ? 40 : 0};
        cr_assert_eq(sl_worker_batcher_add_owned(bt, s, NULL, NULL, 8, &og, &owned, &err), SL_OK,
                     "%s", err.msg);
        cr_assert_null(owned);
    }
    sl_dpp_row_range_t empty;
    cr_assert_eq(sl_worker_batcher_end_range(bt, 40, &empty, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(empty.from_row, 40);
    cr_assert_eq(empty.to_row, 40);
    cr_assert_eq(sk->batches, 2);
    const uint64_t from[] = {16, 24}, to[] = {24, 40};
    for (uint32_t b = 0; b < 2; b++) {
        cr_assert_eq(sk->lease[b].split, 3);
        cr_assert_eq(sk->lease[b].generation, 2);
        cr_assert_eq(sk->lease[b].from_row, from[b], "batch %u", b);
        cr_assert_eq(sk->lease[b].to_row, to[b], "batch %u", b);
        cr_assert_eq(sk->origin[b].first_row, from[b]);
        cr_assert_eq(sk->origin[b].sequence, b);
        cr_assert_eq(sk->n[b], 8);
        for (uint32_t i = 0; i < 8; i++)
            cr_assert_eq(sk->ids[b][i], 16 + 8 * (int64_t)b + i);
    }
    sl_worker_batcher_destroy(bt);
    free(sk);
}

/* A batcher asked for no sample ids hands a taken stripe out without. */
static sl_err_t no_ids(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
                       sl_error_t *err)
{
    (void)lease;
    (void)err;
    cr_assert_null(b->sample_ids);
    cr_assert_eq(b->batch_size, 8);
    cr_assert_eq(b->dense.data[2], 1.0f); /* row 1's first dense value */
    (*(int *)ctx)++;
    sl_batch_destroy(b);
    return SL_OK;
}

Test(batcher, an_owned_stripe_taken_without_sample_ids)
{
    int got = 0;
    sl_worker_batcher_opts_t o = {.batch_size = 8};
    sl_worker_batcher_t *bt;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_batcher_new(&o, no_ids, &got, &bt, &err), SL_OK);
    sl_batch_t *s = sl_batch_new(NULL);
    make_stripe(s, 0, 8, false);
    sl_arena_t *owned = s->arena;
    sl_worker_rows_origin_t og = {0};
    cr_assert_eq(sl_worker_batcher_add_owned(bt, s, NULL, NULL, 8, &og, &owned, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_null(owned);
    cr_assert_eq(got, 1);
    sl_worker_batcher_destroy(bt);
}

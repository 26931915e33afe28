/* What batcher_test.c and batcher_rows_test.c share: stripes whose rows are a
 * formula of their sample id (so each output row is checked on its own),
 * sinks that collect and check batches, and feeding random splits. */
#ifndef SLUICE_TESTS_BATCHER_UTIL_H
#define SLUICE_TESTS_BATCHER_UTIL_H

/* Every helper here: a test file uses only some. */
#define BT_FN static __attribute__((unused))

#include <criterion/criterion.h>

#include <string.h>

#include "dpp/master/state/order.h"
#include "dpp/worker/batcher/batcher.h"
#include "sluice/wire.h"
#include "testutil.h"

BT_FN const char *const KEYS[] = {"a", "b", "u"};
BT_FN const char *const DENSE[] = {"d0", "d1"};
BT_FN const char *const LABELS[] = {"click"};

/* row r: key a has r % 3 ids, b has 1 + r % 2, u (session-like) 2 ids
 * constant over runs of 4 rows */
BT_FN int32_t len_of(int64_t r, uint32_t k)
{
    return k == 0 ? (int32_t)(r % 3) : k == 1 ? (int32_t)(1 + r % 2) : 2;
}

BT_FN int64_t val_of(int64_t r, uint32_t k, int32_t j)
{
    return k == 2 ? (r / 4) * 10 + j : r * 1000 + k * 100 + j;
}

/* A stripe of n rows whose sample ids start at first (all of it in arena). */
BT_FN void make_stripe(sl_batch_t *s, int64_t first, uint32_t n, bool weighted)
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
BT_FN sl_err_t collect(void *ctx, sl_batch_t *b, const sl_worker_lease_origin_t *lease,
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
BT_FN void feed(sl_worker_batcher_t *bt, uint64_t *seed, uint32_t splits, uint32_t epoch,
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

BT_FN void run_in_order(bool drop_last, bool weighted)
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

#endif

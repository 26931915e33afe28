/* The batcher (src/dpp/worker/batcher/batcher.h): rows of random stripes with random
 * selections come out in batches of exactly batch_size (the last one short,
 * or dropped with drop_last), every selected row once and in order, every
 * value equal to its source row, origins (split, row, sequence) right, the
 * weight label appended; the shuffle window permutes rows deterministically
 * per seed; dedup of a batch expands back to it. Ranges of a lease:
 * batcher_test.c. */
#include "batcher_util.h"

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

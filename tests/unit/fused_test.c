/* The worker's fused path (src/dpp/worker/runtime/fused.c, docs/WORKER.md "The fused
 * path") against the general path on the same input: the same stripes go
 * through two batchers, one building every batch (then
 * sl_pipeline_plan_transform and sl_wire_encode, as a transform thread
 * does) and one handing whole-stripe batches to the direct hook, which
 * makes the frame straight from the stripe (dpp_worker_fused_plan / fill).
 * Every frame must be byte for byte the same, in the same order, with the
 * same lease ranges. Edge cases: empty stripes and selections, empty lists,
 * missing dense values (NaN), filtered rows (runs with gaps), batches
 * straddling stripes, ranges, no sparse or no dense features, rows with
 * record times (Kafka's: both paths' BatchInfo.record_time_ms the same, and
 * each row's own time). Plans that do not fuse are refused
 * (sl_pipeline_fused_new gives NULL). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/pipeline/plan.h"
#include "dpp/worker/batcher/batcher.h"
#include "dpp/worker/runtime/worker_internal.h"
#include "sluice/wire.h"
#include "testutil.h"

static const char *const KEYS[] = {"s0", "s1", "s2"};
static const char *const DENSE[] = {"d0", "d1", "d2", "d3"};
static const char *const LABELS[] = {"click", "like"};

static sl_wh_schema_t *make_schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sl_wh_schema_add_feature(s, DENSE[i], SL_WH_DENSE, &err), SL_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sl_wh_schema_add_feature(s, KEYS[i], SL_WH_SPARSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "w0", SL_WH_WEIGHTED, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_label(s, LABELS[0], &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_label(s, LABELS[1], &err), SL_OK);
    return s;
}

/* Every fusable op, chained on one key and one dense column. */
static const char *FUSABLE =
    "{\"source\": {\"table\": \"t\", \"features\": [\"s0\", \"s1\", \"s2\", \"d0\", \"d1\", "
    "\"d2\", \"d3\"]},"
    " \"transforms\": ["
    "  {\"op\": \"first_x\", \"feature\": \"s0\", \"x\": 5},"
    "  {\"op\": \"sigrid_hash\", \"feature\": \"s0\", \"table_size\": 1000, \"salt\": 3},"
    "  {\"op\": \"fill_missing\", \"feature\": \"d0\", \"value\": 2.5},"
    "  {\"op\": \"log1p\", \"feature\": \"d0\"},"
    "  {\"op\": \"modulo\", \"feature\": \"s1\", \"divisor\": 7},"
    "  {\"op\": \"first_x\", \"feature\": \"s1\", \"x\": 2},"
    "  {\"op\": \"first_x\", \"feature\": \"s1\", \"x\": 3},"
    "  {\"op\": \"sigrid_hash\", \"feature\": \"s2\", \"table_size\": 12345, \"salt\": 9},"
    "  {\"op\": \"modulo\", \"feature\": \"s2\", \"divisor\": 100},"
    "  {\"op\": \"clamp\", \"feature\": \"d1\", \"min\": -1, \"max\": 3},"
    "  {\"op\": \"log1p\", \"feature\": \"d1\"},"
    "  {\"op\": \"normalize\", \"feature\": \"d2\", \"mean\": 0.5, \"std\": 2},"
    "  {\"op\": \"boxcox\", \"feature\": \"d3\", \"lambda\": 0.5}]}";

typedef struct fx {
    sl_wh_schema_t *schema;
    sl_pipeline_job_t *job;
    sl_pipeline_plan_t *plan;
} fx_t;

static void fx_open(fx_t *f, const char *spec)
{
    sl_error_t err = {0};
    f->schema = make_schema();
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &f->job, NULL, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_pipeline_plan_new(f->job, f->schema, &f->plan, NULL, &err), SL_OK, "%s",
                 err.msg);
}

static void fx_close(fx_t *f)
{
    sl_pipeline_plan_destroy(f->plan);
    sl_pipeline_job_destroy(f->job);
    sl_wh_schema_destroy(f->schema);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The record time of the row with sample id id: out of order row to row,
 * and now and then absurd (the deltas wrap and unwrap). */
static int64_t time_of(int64_t id)
{
    if (id % 97 == 0) return id % 2 ? INT64_MIN + id : INT64_MAX - id;
    return 1764400000000 + id * 3 + (id * 7919) % 61 - 30;
}

/* A stripe of n random rows as the reader hands them out: F keys (lists of
 * 0..max_len ids, negative ones among them), D dense columns with ~1 in 5
 * missing, 2 labels, sample ids from first, record times (time_of) when
 * times; key offsets in *koff. */
static void make_stripe(sl_batch_t *s, uint64_t *rng, int64_t first, uint32_t n, uint32_t F,
                        uint32_t D, uint32_t max_len, bool times, uint64_t *koff)
{
    sl_arena_t *ar = s->arena;
    int32_t *len = sl_arena_alloc(ar, ((size_t)F * n + 1) * sizeof *len);
    uint64_t total = 0;
    for (uint32_t k = 0; k < F; k++) {
        koff[k] = total;
        for (uint32_t r = 0; r < n; r++) {
            len[k * n + r] = (int32_t)(rng_next(rng) % (max_len + 1));
            total += (uint64_t)len[k * n + r];
        }
    }
    koff[F] = total;
    cr_assert_eq(sl_kjt_init(&s->sparse, ar, F, KEYS, n, total, false), SL_OK);
    if (F > 0 && n > 0) memcpy(s->sparse.lengths, len, (size_t)F * n * sizeof *len);
    for (uint64_t i = 0; i < total; i++)
        s->sparse.values[i] = (int64_t)(rng_next(rng) % 200000) - 50000;
    cr_assert_eq(sl_dense_init(&s->dense, ar, n, D, DENSE), SL_OK);
    cr_assert_eq(sl_dense_init(&s->labels, ar, n, 2, LABELS), SL_OK);
    s->sample_ids = sl_arena_alloc(ar, (n ? n : 1) * sizeof(int64_t));
    for (uint32_t r = 0; r < n; r++) {
        for (uint32_t c = 0; c < D; c++) {
            uint64_t x = rng_next(rng);
            s->dense.data[r * D + c] =
                x % 5 == 0 ? NAN : (float)((double)(x % 100000) / 997.0 - 20.0);
        }
        s->labels.data[r * 2] = (float)(r % 2);
        s->labels.data[r * 2 + 1] = (float)(rng_next(rng) % 7) * 0.5f;
        s->sample_ids[r] = first + r;
    }
    if (times) {
        s->record_ms = sl_arena_alloc(ar, (n ? n : 1) * sizeof(int64_t));
        for (uint32_t r = 0; r < n; r++)
            s->record_ms[r] = time_of(first + r);
    }
    s->batch_size = n;
}

/* The block offsets of the stripe's n rows (sl_wh_rows_t.block_offsets),
 * summed row by row. Caller frees. */
static uint64_t *block_offsets_of(const sl_batch_t *s, uint32_t F, uint32_t n)
{
    const uint32_t nb = n / SL_WH_BLOCK_ROWS + 1;
    uint64_t *blk = malloc(((size_t)F * nb + 1) * sizeof *blk);
    for (uint32_t k = 0; k < F; k++) {
        uint64_t at = 0;
        for (uint32_t r = 0; r < n; r++) {
            if (r % SL_WH_BLOCK_ROWS == 0) blk[k * nb + r / SL_WH_BLOCK_ROWS] = at;
            at += (uint64_t)s->sparse.lengths[(size_t)k * n + r];
        }
        if (n % SL_WH_BLOCK_ROWS == 0) blk[k * nb + nb - 1] = at;
    }
    return blk;
}

/* The frames one batcher produced, in order, with their lease ranges. */
typedef struct frames {
    void *frame[256];
    size_t len[256];
    int64_t *times[256]; /* record times as BatchInfo carries them, or NULL */
    uint32_t num_times[256];
    uint64_t from[256], to[256];
    uint32_t n, direct;
    const sl_pipeline_plan_t *plan;
    const sl_pipeline_fused_t *fused;
} frames_t;

/* The batch's record times (ms over runs of its rows), as the worker hands
 * them to the server: a transform thread's (xform.c) or the fused path's. */
static void add_times(frames_t *fr, const int64_t *ms, const sl_worker_row_run_t *runs, uint32_t nr,
                      uint32_t n)
{
    if (!ms) return;
    fr->times[fr->n] = malloc((n ? n : 1) * sizeof(int64_t));
    dpp_worker_record_deltas(ms, runs, nr, fr->times[fr->n]);
    fr->num_times[fr->n] = n;
}

static void add_frame(frames_t *fr, void *frame, size_t len, const sl_worker_lease_origin_t *lease)
{
    cr_assert_lt(fr->n, 256);
    fr->frame[fr->n] = frame;
    fr->len[fr->n] = len;
    fr->from[fr->n] = lease ? lease->from_row : UINT64_MAX;
    fr->to[fr->n] = lease ? lease->to_row : UINT64_MAX;
    fr->n++;
}

/* The transform threads' path: transform the built batch, encode it. */
static sl_err_t general(void *ctx, sl_batch_t *batch, const sl_worker_lease_origin_t *lease,
                        sl_error_t *err)
{
    frames_t *fr = ctx;
    sl_err_t rc = sl_pipeline_plan_transform(fr->plan, batch, err);
    void *frame = NULL;
    size_t len = 0;
    if (rc == SL_OK) rc = sl_wire_encode(batch, NULL, &frame, &len, err);
    if (rc == SL_OK) {
        cr_assert_lt(fr->n, 256);
        add_times(fr, batch->record_ms, &(sl_worker_row_run_t){0, batch->batch_size}, 1,
                  batch->batch_size);
        add_frame(fr, frame, len, lease);
    }
    sl_batch_destroy(batch);
    return rc;
}

/* The fused path: the frame straight from the stripe. */
static sl_err_t direct(void *ctx, const sl_worker_direct_t *d, sl_error_t *err)
{
    frames_t *fr = ctx;
    uint32_t F = d->rows->sparse.num_keys;
    uint64_t *totals = calloc(F + 1, sizeof *totals);
    sl_batch_t shape;
    size_t size = 0, len = 0;
    sl_err_t rc = dpp_worker_fused_plan(fr->fused, d, totals, &shape, &size, err);
    cr_assert_eq(rc, SL_OK, "%s", err->msg);
    void *frame = sl_alloc_aligned(NULL, size, SL_ALIGN);
    /* garbage first: every byte of the frame must be written */
    memset(frame, 0xa5, size);
    rc = dpp_worker_fused_fill(fr->fused, d, totals, &shape, frame, size, &len, err);
    cr_assert_eq(rc, SL_OK, "%s", err->msg);
    cr_assert_eq(len, size);
    free(totals);
    cr_assert_lt(fr->n, 256);
    add_times(fr, d->rows->record_ms, d->runs, d->num_runs, d->num_rows);
    add_frame(fr, frame, len, d->lease);
    fr->direct++;
    return SL_OK;
}

static void frames_free(frames_t *fr)
{
    for (uint32_t i = 0; i < fr->n; i++) {
        sl_free(NULL, fr->frame[i], fr->len[i]);
        free(fr->times[i]);
    }
}

/* One input stripe and the rows of it to add. */
typedef struct input {
    uint32_t rows;
    uint32_t keep_mod; /* 0: every row (selected NULL); m: drop rows r % m == 1; UINT32_MAX: none */
} input_t;

/* Run inputs through both batchers (batch size bs; ranged: one range per
 * input, from its first row to its end; times: rows with record times)
 * and compare every frame and its record times. The direct batcher gets
 * the block offsets of every other input (the table reader's), so that
 * its cuts from them and from its cursor both meet the built frames. */
static void compare_as(fx_t *f, const input_t *in, uint32_t nin, uint32_t bs, uint32_t F,
                       uint32_t D, uint32_t max_len, bool ranged, bool times,
                       uint32_t expect_direct_min)
{
    uint64_t seed = 0x5eed0000u + nin * 131u + bs + F * 7u + D;
    frames_t *fr[2];
    sl_worker_batcher_t *b[2];
    sl_error_t err = {0};
    sl_pipeline_fused_t *fused = NULL;
    for (int v = 0; v < 2; v++) {
        fr[v] = calloc(1, sizeof *fr[v]);
        fr[v]->plan = f->plan;
        sl_worker_batcher_opts_t o = {.batch_size = bs, .sample_ids = true, .job_id = 42};
        cr_assert_eq(sl_worker_batcher_new(&o, general, fr[v], &b[v], &err), SL_OK);
    }
    int64_t first = 1000;
    uint64_t split_row = 0;
    for (uint32_t i = 0; i < nin; i++) {
        uint64_t rng = seed + i; /* the same rows for both */
        sl_batch_t *s = sl_batch_new(NULL);
        uint64_t koff[4];
        make_stripe(s, &rng, first, in[i].rows, F, D, max_len, times, koff);
        if (!fused && i == 0) {
            cr_assert_eq(sl_pipeline_fused_new(f->plan, s, &fused, &err), SL_OK, "%s", err.msg);
            cr_assert_not_null(fused, "the plan fuses");
            fr[1]->fused = fused;
            sl_worker_batcher_set_direct(b[1], direct, fr[1]);
        }
        uint32_t *sel = malloc((in[i].rows + 1) * sizeof *sel), n = 0;
        for (uint32_t r = 0; r < in[i].rows; r++)
            if (in[i].keep_mod == 0 || (in[i].keep_mod != UINT32_MAX && r % in[i].keep_mod != 1))
                sel[n++] = r;
        uint64_t *blk = block_offsets_of(s, F, in[i].rows);
        for (int v = 0; v < 2; v++) {
            sl_worker_lease_origin_t lease = {.split = 5, .from_row = split_row};
            if (ranged)
                cr_assert_eq(sl_worker_batcher_begin_range(b[v], &lease, 0, &err), SL_OK, "%s",
                             err.msg);
            sl_worker_rows_origin_t origin = {.epoch = 0,
                                              .split_id = 5,
                                              .row = split_row,
                                              /* none: the batcher sums them itself */
                                              .key_offsets = i % 4 == 1 ? NULL : koff,
                                              .block_offsets = v == 1 && i % 2 == 0 ? blk : NULL};
            if (n)
                cr_assert_eq(sl_worker_batcher_add(b[v], s, in[i].keep_mod ? sel : NULL, NULL, n,
                                                   &origin, &err),
                             SL_OK, "input %u: %s", i, err.msg);
            if (ranged) {
                sl_dpp_row_range_t e;
                cr_assert_eq(sl_worker_batcher_end_range(b[v], split_row + in[i].rows, &e, &err),
                             SL_OK, "%s", err.msg);
            }
        }
        free(sel);
        free(blk);
        sl_batch_destroy(s);
        first += in[i].rows;
        split_row += in[i].rows;
    }
    for (int v = 0; v < 2; v++)
        cr_assert_eq(sl_worker_batcher_end_epoch(b[v], &err), SL_OK, "%s", err.msg);
    cr_assert_eq(fr[0]->direct, 0);
    cr_assert_geq(fr[1]->direct, expect_direct_min, "%u direct batches", fr[1]->direct);
    cr_assert_eq(fr[0]->n, fr[1]->n, "%u frames vs %u", fr[0]->n, fr[1]->n);
    cr_assert_gt(fr[0]->n, 0);
    for (uint32_t i = 0; i < fr[0]->n; i++) {
        cr_assert_eq(fr[0]->len[i], fr[1]->len[i], "frame %u: %zu vs %zu bytes", i, fr[0]->len[i],
                     fr[1]->len[i]);
        cr_assert_eq(memcmp(fr[0]->frame[i], fr[1]->frame[i], fr[0]->len[i]), 0, "frame %u differs",
                     i);
        cr_assert_eq(fr[0]->from[i], fr[1]->from[i]);
        cr_assert_eq(fr[0]->to[i], fr[1]->to[i]);
        /* and it decodes */
        sl_batch_t *dec = NULL;
        cr_assert_eq(sl_wire_decode(fr[1]->frame[i], fr[1]->len[i], NULL, NULL, &dec, &err), SL_OK,
                     "frame %u: %s", i, err.msg);
        /* the same record times, and each row's own */
        cr_assert_eq(fr[0]->times[i] != NULL, times, "frame %u", i);
        cr_assert_eq(fr[1]->times[i] != NULL, times, "frame %u", i);
        if (times) {
            cr_assert_eq(fr[0]->num_times[i], dec->batch_size);
            cr_assert_eq(fr[1]->num_times[i], dec->batch_size);
            cr_assert_eq(
                memcmp(fr[0]->times[i], fr[1]->times[i], dec->batch_size * sizeof(int64_t)), 0,
                "frame %u: record times differ", i);
            uint64_t t = 0;
            for (uint32_t r = 0; r < dec->batch_size; r++) {
                t += (uint64_t)fr[1]->times[i][r];
                cr_assert_eq((int64_t)t, time_of(dec->sample_ids[r]), "frame %u row %u", i, r);
            }
        }
        sl_batch_destroy(dec);
    }
    for (int v = 0; v < 2; v++) {
        sl_worker_batcher_destroy(b[v]);
        frames_free(fr[v]);
        free(fr[v]);
    }
    sl_pipeline_fused_destroy(fused);
}

static void compare(fx_t *f, const input_t *in, uint32_t nin, uint32_t bs, uint32_t F, uint32_t D,
                    uint32_t max_len, bool ranged, uint32_t expect_direct_min)
{
    compare_as(f, in, nin, bs, F, D, max_len, ranged, false, expect_direct_min);
}

Test(fused, whole_stripes_same_frames)
{
    fx_t f;
    fx_open(&f, FUSABLE);
    /* stripes of 4 batches each: every batch is direct */
    input_t in[] = {{1024, 0}, {1024, 0}, {512, 0}};
    compare(&f, in, 3, 256, 3, 4, 4, false, 10);
    fx_close(&f);
}

Test(fused, straddling_filtered_and_empty)
{
    fx_t f;
    fx_open(&f, FUSABLE);
    /* 700 rows: 2 direct batches, a tail that the next stripe completes;
     * a stripe of none selected; filtered stripes (runs with gaps); an
     * empty stripe; the short last batch */
    input_t in[] = {{700, 0}, {300, UINT32_MAX}, {0, 0},  {900, 3}, {37, 0}, {2048, 4},
                    {1, 0},   {513, 0},          {100, 2}};
    compare(&f, in, 9, 256, 3, 4, 6, false, 8);
    fx_close(&f);
}

Test(fused, ranges_same_frames)
{
    fx_t f;
    fx_open(&f, FUSABLE);
    input_t in[] = {{600, 0}, {256, 0}, {1000, 5}, {10, 0}};
    compare(&f, in, 4, 128, 3, 4, 3, true, 8);
    fx_close(&f);
}

Test(fused, long_lists_in_pieces)
{
    fx_t f;
    fx_open(&f, FUSABLE);
    /* lists up to 40 ids: a key's values of one batch span several
     * 2048-id pieces; dense rows span several 512-row pieces */
    input_t in[] = {{3000, 0}, {1500, 7}};
    compare(&f, in, 2, 1024, 3, 4, 40, false, 3);
    fx_close(&f);
}

Test(fused, no_dense_or_no_sparse)
{
    fx_t f;
    fx_open(&f, "{\"source\": {\"table\": \"t\", \"features\": [\"s0\", \"s1\", \"s2\"]},"
                " \"transforms\": [{\"op\": \"sigrid_hash\", \"feature\": \"s1\", "
                "\"table_size\": 64}]}");
    input_t in[] = {{512, 0}, {300, 0}};
    compare(&f, in, 2, 128, 3, 0, 3, false, 5);
    fx_close(&f);
    fx_open(&f, "{\"source\": {\"table\": \"t\", \"features\": [\"d0\", \"d1\", \"d2\", "
                "\"d3\"]}, \"transforms\": [{\"op\": \"log1p\", \"feature\": \"d3\"}]}");
    compare(&f, in, 2, 128, 0, 4, 3, false, 5);
    fx_close(&f);
}

/* Kafka's rows carry record times: a direct batch carries its rows' times
 * (the runs' of the stripe, filtered rows skipped) as a built batch does,
 * whole stripes and ranges (a Kafka stripe is one range), straddling and
 * filtered ones built. */
Test(fused, record_times_go_with_the_rows)
{
    fx_t f;
    fx_open(&f, FUSABLE);
    input_t whole[] = {{1024, 0}, {1024, 0}, {512, 0}};
    compare_as(&f, whole, 3, 256, 3, 4, 4, false, true, 10);
    input_t mixed[] = {{700, 0}, {300, UINT32_MAX}, {0, 0},  {900, 3}, {37, 0}, {2048, 4},
                       {1, 0},   {513, 0},          {100, 2}};
    compare_as(&f, mixed, 9, 256, 3, 4, 6, false, true, 8);
    input_t ranged[] = {{128, 0}, {128, 0}, {100, 0}, {600, 0}, {1000, 5}, {128, 0}};
    compare_as(&f, ranged, 6, 128, 3, 4, 3, true, true, 8);
    fx_close(&f);
}

/* What the general path reshapes is not fused. */
Test(fused, refuses_what_reshapes)
{
    const char *specs[] = {
        /* clamp_weights */
        ("{\"source\": {\"table\": \"t\", \"features\": [\"s0\", \"s1\", \"s2\", \"w0\"]}, "
         "\"transforms\": [{\"op\": \"clamp_weights\", \"feature\": \"w0\", \"min\": 0, "
         "\"max\": 1}]}"),
        /* a created feature */
        ("{\"source\": {\"table\": \"t\", \"features\": [\"s0\", \"s1\", \"s2\"]}, \"transforms\": "
         "[{\"op\": \"cross\", \"features\": [\"s0\", \"s1\"], \"table_size\": 9, \"output\": "
         "\"x\"}]}"),
        /* bucketize creates one too */
        ("{\"source\": {\"table\": \"t\", \"features\": [\"s0\", \"s1\", \"s2\", \"d0\"]}, "
         "\"transforms\": [{\"op\": \"bucketize\", \"feature\": \"d0\", \"borders\": [1], "
         "\"output\": \"b\"}]}"),
        /* dedup_ids */
        ("{\"source\": {\"table\": \"t\", \"features\": [\"s0\", \"s1\", \"s2\"]}, \"transforms\": "
         "[{\"op\": \"dedup_ids\", \"feature\": \"s2\"}]}"),
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        fx_t f;
        fx_open(&f, specs[i]);
        sl_batch_t *s = sl_batch_new(NULL);
        uint64_t rng = 1, koff[4];
        make_stripe(s, &rng, 0, 16, 3, i == 2 ? 1 : 0, 2, false, koff);
        sl_pipeline_fused_t *fused = (void *)1;
        sl_error_t err = {0};
        cr_assert_eq(sl_pipeline_fused_new(f.plan, s, &fused, &err), SL_OK);
        cr_assert_null(fused, "spec %zu must not fuse", i);
        /* known from the plan alone: the worker's reader sums no block offsets */
        cr_assert(!sl_pipeline_plan_may_fuse(f.plan), "spec %zu: no shape fuses it", i);
        sl_batch_destroy(s);
        fx_close(&f);
    }
    /* a feature read but not kept (a filter's), weights, groups */
    fx_t f;
    fx_open(&f, FUSABLE);
    /* the plan may fuse: what refuses it below is the rows' shape */
    cr_assert(sl_pipeline_plan_may_fuse(f.plan));
    sl_batch_t *s = sl_batch_new(NULL);
    uint64_t rng = 2, koff[4];
    make_stripe(s, &rng, 0, 16, 3, 4, 2, false, koff);
    sl_pipeline_fused_t *fused = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_fused_new(f.plan, s, &fused, &err), SL_OK);
    cr_assert_not_null(fused);
    sl_pipeline_fused_destroy(fused);
    const char *extra[] = {"s0", "s1", "w0"}; /* w0 is not in the job's features */
    s->sparse.keys = extra;
    cr_assert_eq(sl_pipeline_fused_new(f.plan, s, &fused, &err), SL_OK);
    cr_assert_null(fused, "a key that is no output");
    s->sparse.keys = (const char **)KEYS;
    s->sparse.weights = sl_arena_alloc(s->arena, (s->sparse.num_values + 1) * sizeof(float));
    cr_assert_eq(sl_pipeline_fused_new(f.plan, s, &fused, &err), SL_OK);
    cr_assert_null(fused, "weights");
    s->sparse.weights = NULL;
    sl_ikjt_t g = {0};
    s->num_groups = 1;
    s->groups = &g;
    cr_assert_eq(sl_pipeline_fused_new(f.plan, s, &fused, &err), SL_OK);
    cr_assert_null(fused, "dedup groups");
    s->num_groups = 0;
    s->groups = NULL;
    sl_batch_destroy(s);
    fx_close(&f);
}

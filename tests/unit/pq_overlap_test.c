/* A stripe handed on while the next batch is decoded (docs/PARQUET.md
 * "Decoding on several threads", imp_pqc_read_t.on_take/on_hand): over
 * the fixture pyarrow-overlap-zstd.parquet (10,000 rows in row groups of
 * 9,000 and 1,000, so stripes of 4,096 rows end mid row group; nulls, a
 * list whose lengths grow fourfold in the second batch, a negative id at
 * row 6001), the worker's stripes (sl_wh_pqds_read_stripes) on 2 and 3
 * threads are those of one thread bit for bit, with each stripe's arena
 * taken over or left by turns; a hand-on that fails stops the read with
 * its own error after the same stripes; a refused row after a stripe
 * handed on beside its batch's decode is the same error. pq_columns_test.c
 * holds the rest of the threads' tests (its fixture's row groups are one
 * batch each, so nothing there is handed on beside a decode). */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/import_internal.h"
#include "warehouse/pq_dataset.h"

#define ROWS 10000u

static char fixture[4096];

static void setup(void)
{
    const char *root = getenv("SLUICE_SOURCE_DIR");
    snprintf(fixture, sizeof fixture, "%s/tests/data/parquet/pyarrow-overlap-zstd.parquet",
             root ? root : "..");
}

TestSuite(pq_overlap, .init = setup);

/* every kind of column the criteo jobs use, a list key and a hashed one */
static const char *PLAIN =
    "{\"sample_id\": \"sid\", \"labels\": [\"label\"], \"dense\": [\"f32\", \"f64\"],"
    " \"sparse\": [\"C1\", \"item_ids\", {\"column\": \"country\", \"hash\": {\"seed\": 7}}],"
    " \"infer\": false}";
/* and the negative id of row 6001 */
static const char *NEG = "{\"sample_id\": \"sid\", \"labels\": [\"label\"], \"dense\": [\"f32\"],"
                         " \"sparse\": [\"C1\", \"neg\"], \"infer\": false}";

static sl_wh_pqds_t *open_mapped(const char *text, sl_wh_colmap_t **m, sl_wh_splits_t **sp)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    cr_assert_not_null(j, "%s", jerr.text);
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_parse(j, NULL, NULL, NULL, NULL, m, &err), SL_OK, "%s", err.msg);
    json_decref(j);
    sl_wh_pqds_t *ds = NULL;
    cr_assert_eq(sl_wh_pqds_open(fixture, *m, NULL, NULL, NULL, NULL, &ds, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_wh_pqds_plan(ds, ROWS, NULL, 0, sp, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq((*sp)->count, 1);
    cr_assert_eq((*sp)->items[0].num_rows, ROWS);
    return ds;
}

/* ---- the stripes a read hands out, each as one string of bytes ---- */

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes_t;

static void put(bytes_t *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

typedef struct got {
    bytes_t s[16]; /* stripe i: its range, rows, ids, values (bit for bit) */
    uint32_t n;
    uint32_t fail_at; /* the hand-on of this stripe fails (UINT32_MAX: none) */
    sl_arena_t *kept[16];
} got_t;

static sl_err_t on_stripe(void *ctx, const sl_wh_rows_t *rows, uint64_t first, uint64_t end,
                          sl_arena_t **owned, sl_error_t *err)
{
    got_t *g = ctx;
    if (g->n == g->fail_at)
        return sl_error_set(err, SL_ERR_CLOSED, "stripe %u refused by the test", g->n);
    cr_assert_lt(g->n, 16);
    cr_assert(owned != NULL && *owned != NULL);
    const sl_batch_t *b = &rows->batch;
    uint32_t n = b->batch_size;
    cr_assert_eq(end - first, n, "stripe %u: rows [%llu, %llu) but %u rows", g->n,
                 (unsigned long long)first, (unsigned long long)end, n);
    for (uint32_t r = 0; r < n; r++) /* the file's sample ids: 7000 + its row */
        cr_assert_eq(b->sample_ids[r], 7000 + (int64_t)(first + r), "stripe %u row %u", g->n, r);
    bytes_t *o = &g->s[g->n];
    put(o, &first, 8);
    put(o, &end, 8);
    put(o, b->sample_ids, (size_t)n * 8);
    put(o, rows->session_ids, (size_t)n * 8);
    put(o, rows->timestamps, (size_t)n * 8);
    put(o, b->labels.data, (size_t)n * b->labels.cols * 4);
    put(o, b->dense.data, (size_t)n * b->dense.cols * 4);
    put(o, b->sparse.lengths, (size_t)n * b->sparse.num_keys * 4);
    put(o, &b->sparse.num_values, sizeof b->sparse.num_values);
    put(o, b->sparse.values, (size_t)b->sparse.num_values * 8);
    if (g->n % 2) { /* taken over: the next stripe must not be built in it */
        g->kept[g->n] = *owned;
        *owned = NULL;
    }
    g->n++;
    return SL_OK;
}

static void got_free(got_t *g)
{
    for (uint32_t i = 0; i < 16; i++) {
        free(g->s[i].p);
        sl_arena_destroy(g->kept[i]);
    }
    memset(g, 0, sizeof *g);
}

/* Rows [from, to) by stripes of `batch` rows on one thread and on
 * `threads`: the same stripes, or the same error after the same stripes. */
static void same(sl_wh_pqds_t *ds, const sl_wh_split_t *sp, uint64_t from, uint64_t to,
                 uint32_t batch, uint32_t threads, uint32_t fail_at, uint32_t want_n,
                 sl_err_t want_rc)
{
    sl_wh_pqds_reader_t *r1 = NULL, *rn = NULL;
    sl_error_t e1 = {0}, en = {0};
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r1, &e1), SL_OK, "%s", e1.msg);
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &rn, &e1), SL_OK, "%s", e1.msg);
    cr_assert_eq(sl_wh_pqds_reader_set_threads(rn, threads, &e1), SL_OK, "%s", e1.msg);
    /* twice: the second read reuses the readers and the arena given back */
    for (int pass = 0; pass < 2; pass++) {
        got_t a = {.fail_at = fail_at}, b = {.fail_at = fail_at};
        sl_err_t rc1 = sl_wh_pqds_read_stripes(r1, sp, from, to, batch, on_stripe, &a, &e1);
        sl_err_t rcn = sl_wh_pqds_read_stripes(rn, sp, from, to, batch, on_stripe, &b, &en);
        cr_assert_eq(rc1, want_rc, "[%llu, %llu) by %u: %s", (unsigned long long)from,
                     (unsigned long long)to, batch, e1.msg);
        cr_assert_eq(rcn, rc1, "[%llu, %llu) by %u on %u threads: %s", (unsigned long long)from,
                     (unsigned long long)to, batch, threads, en.msg);
        if (rc1 != SL_OK) cr_assert_str_eq(en.msg, e1.msg);
        cr_assert_eq(a.n, want_n, "[%llu, %llu) by %u: stripes", (unsigned long long)from,
                     (unsigned long long)to, batch);
        cr_assert_eq(b.n, a.n, "[%llu, %llu) by %u on %u threads: stripes",
                     (unsigned long long)from, (unsigned long long)to, batch, threads);
        for (uint32_t i = 0; i < a.n; i++) {
            cr_assert_eq(b.s[i].n, a.s[i].n, "stripe %u: bytes", i);
            cr_assert(memcmp(b.s[i].p, a.s[i].p, a.s[i].n) == 0,
                      "[%llu, %llu) by %u on %u threads: stripe %u differs",
                      (unsigned long long)from, (unsigned long long)to, batch, threads, i);
        }
        got_free(&a);
        got_free(&b);
    }
    sl_wh_pqds_reader_destroy(r1);
    sl_wh_pqds_reader_destroy(rn);
}

static uint32_t stripes_of(uint64_t from, uint64_t to, uint32_t batch)
{
    return (uint32_t)((to - from + batch - 1) / batch);
}

Test(pq_overlap, handed_on_beside_the_decode_same_stripes)
{
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    sl_wh_pqds_t *ds = open_mapped(PLAIN, &m, &sp);
    const sl_wh_split_t *s = &sp->items[0];
    /* 4096: stripes 0 and 1 handed on beside the decode of batches 1 and
     * 2; 2048: every second one; 1000 and 8192: stripes across batches;
     * from 100: runs that start inside a batch */
    static const uint64_t ranges[][2] = {{0, ROWS}, {100, 9500}, {4096, ROWS}, {0, 8192}};
    static const uint32_t batches[] = {4096, 2048, 1000, 8192};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            for (uint32_t t = 2; t <= 3; t++) {
                uint64_t from = ranges[i][0], to = ranges[i][1];
                if (stripes_of(from, to, batches[b]) > 16) continue;
                same(ds, s, from, to, batches[b], t, UINT32_MAX, stripes_of(from, to, batches[b]),
                     SL_OK);
            }
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

Test(pq_overlap, hand_on_error_stops_the_read)
{
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    sl_wh_pqds_t *ds = open_mapped(PLAIN, &m, &sp);
    /* stripe 0 and 1 are handed on beside a decode on 2 threads, 2 is the
     * end of the row group's rows and is not */
    for (uint32_t fail = 0; fail < 3; fail++)
        for (uint32_t t = 2; t <= 3; t++)
            same(ds, &sp->items[0], 0, ROWS, 4096, t, fail, fail, SL_ERR_CLOSED);
    /* the message is the hand-on's */
    sl_wh_pqds_reader_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_pqds_reader_set_threads(r, 2, &err), SL_OK, "%s", err.msg);
    got_t g = {.fail_at = 1};
    cr_assert_eq(sl_wh_pqds_read_stripes(r, &sp->items[0], 0, ROWS, 4096, on_stripe, &g, &err),
                 SL_ERR_CLOSED);
    cr_assert_str_eq(err.msg, "stripe 1 refused by the test");
    cr_assert_eq(g.n, 1);
    got_free(&g);
    sl_wh_pqds_reader_destroy(r);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

Test(pq_overlap, refused_row_after_a_stripe_handed_on)
{
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    sl_wh_pqds_t *ds = open_mapped(NEG, &m, &sp);
    /* row 6001 is in batch 1, decoded while stripe 0 is handed on */
    for (uint32_t t = 2; t <= 3; t++) {
        same(ds, &sp->items[0], 0, ROWS, 4096, t, UINT32_MAX, 1, SL_ERR_CORRUPT);
        same(ds, &sp->items[0], 0, ROWS, 2048, t, UINT32_MAX, 2, SL_ERR_CORRUPT);
        same(ds, &sp->items[0], 6001, ROWS, 4096, t, UINT32_MAX, 1, SL_OK);
    }
    sl_wh_pqds_reader_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_pqds_reader_set_threads(r, 2, &err), SL_OK, "%s", err.msg);
    got_t g = {.fail_at = UINT32_MAX};
    cr_assert_eq(sl_wh_pqds_read_stripes(r, &sp->items[0], 0, ROWS, 4096, on_stripe, &g, &err),
                 SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "pyarrow-overlap-zstd.parquet row 6001: column 'neg': an id must be "
                              "an integer >= 0, got -3");
    cr_assert_eq(g.n, 1, "the stripe of rows [0, 4096) went out before row 6001");
    got_free(&g);
    sl_wh_pqds_reader_destroy(r);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

/* The columnar conversion of Parquet rows (warehouse/pq_internal.h,
 * docs/PARQUET.md "Columnar conversion") held to the row path it
 * replaced, value by value and bit for bit, over the fixture
 * pyarrow-mapped-zstd.parquet (300 rows in row groups of 128, 128, 44;
 * every conversion of the mapping, nulls, sessions out of order, a row
 * whose weights do not match its ids at index 77, a negative id at 130):
 *  - the worker's stripes (sl_wh_pqds_read_stripes) against the rows of
 *    sl_wh_pqds_read gathered by the Kafka row builder, as the Parquet
 *    source did before, for todo ranges across row groups, stripe sizes
 *    and projections; a refused row fails both with the same message;
 *  - every allocation of the worker's read failing in turn: an error, no
 *    leak, or (no allocation failed) every row.
 * The import against the row path: pq_columns_import_test.c. */
#include "pq_columns_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kafka/record_decode.h"
#include "parquet/parquet.h"
#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/import_internal.h"
#include "warehouse/pq_dataset.h"

/* ---- a stripe, copied ---- */

typedef struct stripe {
    uint64_t first, end;
    uint32_t n, D, T, K;
    int64_t *sid, *ses, *ts, *cms;
    float *dense, *labels;
    char **dnames, **lnames, **keys;
    int32_t *lens;
    uint64_t nv;
    int64_t *values;
    float *weights; /* NULL: unweighted */
} stripe_t;

typedef struct stripes {
    stripe_t s[512];
    uint32_t n;
    uint32_t at; /* the next one to compare */
    /* stripes whose arena was taken (every other one): the rows as handed
     * out, still pointing into that arena, compared again after the read */
    sl_wh_rows_t taken[512];
    sl_arena_t *arena[512];
} stripes_t;

static void *dup_mem(const void *p, size_t len)
{
    void *d = malloc(len + 1);
    cr_assert_not_null(d);
    if (len) memcpy(d, p, len);
    return d;
}

static char **dup_names(const char *const *names, uint32_t n)
{
    char **d = calloc(n + 1, sizeof *d);
    for (uint32_t i = 0; names != NULL && i < n; i++)
        d[i] = strdup(names[i]);
    return d;
}

static void copy_stripe(stripe_t *s, const sl_wh_rows_t *r, uint64_t first, uint64_t end)
{
    const sl_batch_t *b = &r->batch;
    uint32_t n = b->batch_size;
    s->first = first;
    s->end = end;
    s->n = n;
    s->D = b->dense.cols;
    s->T = b->labels.cols;
    s->K = b->sparse.num_keys;
    s->sid = dup_mem(b->sample_ids, (size_t)n * 8);
    s->ses = dup_mem(r->session_ids, (size_t)n * 8);
    s->ts = dup_mem(r->timestamps, (size_t)n * 8);
    s->cms = b->record_ms ? dup_mem(b->record_ms, (size_t)n * 8) : NULL;
    s->dense = dup_mem(b->dense.data, (size_t)n * s->D * 4);
    s->labels = dup_mem(b->labels.data, (size_t)n * s->T * 4);
    s->dnames = dup_names(b->dense.names, s->D);
    s->lnames = dup_names(b->labels.names, s->T);
    s->keys = dup_names(b->sparse.keys, s->K);
    s->lens = dup_mem(b->sparse.lengths, (size_t)n * s->K * 4);
    s->nv = b->sparse.num_values;
    s->values = dup_mem(b->sparse.values, (size_t)s->nv * 8);
    s->weights = b->sparse.weights ? dup_mem(b->sparse.weights, (size_t)s->nv * 4) : NULL;
}

static void free_names(char **names, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void free_stripe(stripe_t *s)
{
    free(s->sid);
    free(s->ses);
    free(s->ts);
    free(s->cms);
    free(s->dense);
    free(s->labels);
    free_names(s->dnames, s->D);
    free_names(s->lnames, s->T);
    free_names(s->keys, s->K);
    free(s->lens);
    free(s->values);
    free(s->weights);
}

static void free_stripes(stripes_t *st)
{
    for (uint32_t i = 0; i < st->n; i++) {
        free_stripe(&st->s[i]);
        sl_arena_destroy(st->arena[i]);
        st->arena[i] = NULL;
    }
    st->n = st->at = 0;
}

/* Bit for bit: a NaN is the same NaN, -0 is not 0. */
static void same_bits(const void *a, const void *b, size_t len, const char *what, uint32_t stripe)
{
    cr_assert(len == 0 || memcmp(a, b, len) == 0, "stripe %u: %s differ", stripe, what);
}

static void compare(const stripe_t *w, const stripe_t *g, uint32_t i)
{
    cr_assert_eq(g->first, w->first, "stripe %u first", i);
    cr_assert_eq(g->end, w->end, "stripe %u end", i);
    cr_assert_eq(g->n, w->n, "stripe %u rows", i);
    cr_assert_eq(g->D, w->D);
    cr_assert_eq(g->T, w->T);
    cr_assert_eq(g->K, w->K);
    for (uint32_t d = 0; d < w->D; d++)
        cr_assert_str_eq(g->dnames[d], w->dnames[d]);
    for (uint32_t t = 0; t < w->T; t++)
        cr_assert_str_eq(g->lnames[t], w->lnames[t]);
    for (uint32_t k = 0; k < w->K; k++)
        cr_assert_str_eq(g->keys[k], w->keys[k]);
    for (uint32_t r = 0; r < w->n; r++) {
        cr_assert_eq(g->sid[r], w->sid[r], "stripe %u row %u sample id", i, r);
        cr_assert_eq(g->ses[r], w->ses[r], "stripe %u row %u session", i, r);
        cr_assert_eq(g->ts[r], w->ts[r], "stripe %u row %u timestamp", i, r);
        /* no record times: every one unknown (-1), as the row path's */
        cr_assert_eq(g->cms ? g->cms[r] : -1, w->cms ? w->cms[r] : -1,
                     "stripe %u row %u record time", i, r);
    }
    same_bits(g->dense, w->dense, (size_t)w->n * w->D * 4, "dense values", i);
    same_bits(g->labels, w->labels, (size_t)w->n * w->T * 4, "labels", i);
    same_bits(g->lens, w->lens, (size_t)w->n * w->K * 4, "lengths", i);
    cr_assert_eq(g->nv, w->nv, "stripe %u values", i);
    same_bits(g->values, w->values, (size_t)w->nv * 8, "ids", i);
    cr_assert_eq(g->weights == NULL, w->weights == NULL, "stripe %u weights", i);
    if (w->weights) same_bits(g->weights, w->weights, (size_t)w->nv * 4, "weights", i);
}

/* ---- the row path, gathered as the Parquet source did before ---- */

typedef struct old_pass {
    sl_kafka_rows_t *rows;
    stripes_t *out;
    uint32_t batch;
    uint64_t first;
} old_pass_t;

static sl_err_t old_flush(old_pass_t *p, uint64_t end, sl_error_t *err)
{
    sl_kafka_stripe_t st;
    sl_err_t rc = sl_kafka_rows_take(p->rows, &st, err);
    if (rc != SL_OK) return rc;
    cr_assert_lt(p->out->n, 512);
    copy_stripe(&p->out->s[p->out->n++], &st.rows, p->first, end);
    p->first = end;
    return SL_OK;
}

static sl_err_t old_row(void *ctx, uint64_t row, const sl_wh_row_t *r, sl_error_t *err)
{
    old_pass_t *p = ctx;
    sl_err_t rc = sl_kafka_rows_add_row(p->rows, r, (int64_t)row, -1, err);
    if (rc == SL_OK && sl_kafka_rows_count(p->rows) >= p->batch) rc = old_flush(p, row + 1, err);
    return rc;
}

static sl_err_t new_stripe(void *ctx, const sl_wh_rows_t *rows, uint64_t first, uint64_t end,
                           sl_arena_t **owned, sl_error_t *err)
{
    (void)err;
    stripes_t *st = ctx;
    cr_assert_lt(st->n, 512);
    cr_assert(owned != NULL && *owned != NULL);
    cr_assert_null(rows->batch.record_ms, "a file's rows have no record times");
    if (st->n % 2) { /* taken over: the reader must build the next one elsewhere */
        st->taken[st->n] = *rows;
        st->arena[st->n] = *owned;
        *owned = NULL;
    }
    copy_stripe(&st->s[st->n++], rows, first, end);
    return SL_OK;
}

/* The stripes taken over still hold what they held when handed out. */
static void check_taken(stripes_t *st)
{
    for (uint32_t i = 0; i < st->n; i++) {
        if (st->arena[i] == NULL) continue;
        stripe_t s = {0};
        copy_stripe(&s, &st->taken[i], st->s[i].first, st->s[i].end);
        compare(&st->s[i], &s, i);
        free_stripe(&s);
        sl_arena_destroy(st->arena[i]);
        st->arena[i] = NULL;
    }
}

/* One todo range [from, to) of the whole-file split with stripes of
 * batch rows, both ways: the same stripes, or the same error. */
static void both_ways(sl_wh_pqds_t *ds, const sl_wh_split_t *sp, const char *const *features,
                      uint32_t nf, uint64_t from, uint64_t to, uint32_t batch)
{
    sl_wh_pqds_reader_t *r = NULL;
    sl_error_t err = {0}, err2 = {0};
    cr_assert_eq(sl_wh_pqds_reader_new(ds, features, nf, &r, &err), SL_OK, "%s", err.msg);
    static stripes_t want, got;
    old_pass_t p = {.out = &want, .batch = batch, .first = from};
    cr_assert_eq(
        sl_kafka_rows_new(sl_wh_pqds_mapping(ds)->schema, features, nf, NULL, &p.rows, &err), SL_OK,
        "%s", err.msg);
    sl_err_t rc1 = sl_wh_pqds_read(r, sp, from, to, old_row, &p, &err);
    if (rc1 == SL_OK && p.first < to) rc1 = old_flush(&p, to, &err);
    sl_err_t rc2 = sl_wh_pqds_read_stripes(r, sp, from, to, batch, new_stripe, &got, &err2);
    check_taken(&got);
    cr_assert_eq(rc2, rc1, "[%llu, %llu) by %u: %s / %s", (unsigned long long)from,
                 (unsigned long long)to, batch, err.msg, err2.msg);
    if (rc1 != SL_OK) {
        cr_assert_str_eq(err2.msg, err.msg);
    } else {
        cr_assert_eq(got.n, want.n, "[%llu, %llu) by %u: stripes", (unsigned long long)from,
                     (unsigned long long)to, batch);
        for (uint32_t i = 0; i < want.n; i++)
            compare(&want.s[i], &got.s[i], i);
    }
    free_stripes(&want);
    free_stripes(&got);
    sl_kafka_rows_destroy(p.rows);
    sl_wh_pqds_reader_destroy(r);
}

/* The file path of rows mapped by text, as one split. The dataset
 * borrows names from the mapping: *m lives as long as it. */
static sl_wh_pqds_t *open_file(const char *path, uint64_t rows, const char *text,
                               sl_wh_colmap_t **m, sl_wh_splits_t **sp)
{
    *m = mapping(text);
    sl_wh_pqds_t *ds = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_open(path, *m, NULL, NULL, NULL, NULL, &ds, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_wh_pqds_plan(ds, rows, NULL, 0, sp, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq((*sp)->count, 1);
    cr_assert_eq((*sp)->items[0].num_rows, rows);
    return ds;
}

static sl_wh_pqds_t *open_mapped(const char *text, sl_wh_colmap_t **m, sl_wh_splits_t **sp)
{
    return open_file(fixture, 300, text, m, sp);
}

Test(pq_columns, worker_stripes_equal_row_path)
{
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    sl_wh_pqds_t *ds = open_mapped(FULL, &m, &sp);
    const sl_wh_split_t *s = &sp->items[0];
    static const uint64_t ranges[][2] = {{0, 77},    {78, 300},  {5, 20},  {100, 200},
                                         {127, 129}, {256, 300}, {0, 300}, {77, 78}};
    static const uint32_t batches[] = {1, 7, 64, 128, 4096};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            both_ways(ds, s, NULL, 0, ranges[i][0], ranges[i][1], batches[b]);
    /* a projection in another order than the schema's */
    const char *const feats[] = {"cats", "f64", "item_ids", "country_h"};
    both_ways(ds, s, feats, 4, 78, 300, 50);
    both_ways(ds, s, feats, 4, 0, 300, 4096); /* row 77 refused: the same message */
    /* the message itself */
    sl_wh_pqds_reader_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    stripes_t *got = calloc(1, sizeof *got);
    cr_assert_eq(sl_wh_pqds_read_stripes(r, s, 0, 300, 64, new_stripe, got, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "pyarrow-mapped-zstd.parquet row 78: column 'cat_ids': 2 ids but 3 "
                              "weights in 'cat_w'");
    cr_assert_eq(got->n, 1, "the stripe of rows [0, 64) went out before row 78");
    free_stripes(got);
    free(got);
    sl_wh_pqds_reader_destroy(r);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
    /* numbered rows in file order, a negative id */
    ds = open_mapped(NEG, &m, &sp);
    s = &sp->items[0];
    both_ways(ds, s, NULL, 0, 0, 130, 33);
    both_ways(ds, s, NULL, 0, 131, 300, 4096);
    both_ways(ds, s, NULL, 0, 100, 300, 10);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

Test(pq_columns, stripes_built_in_place_equal_row_path)
{
    /* Without a weighted key, a run that fills a whole stripe is converted
     * straight into the stripe (imp_pqc_direct): null ids leave room that
     * the take closes, sessions out of order send the stripe through the
     * vectors to be sorted, a refused row sends its run through them; runs
     * shorter than a stripe (batch 4096) never go in place. */
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    sl_wh_pqds_t *ds = open_mapped(FULL, &m, &sp);
    const sl_wh_split_t *s = &sp->items[0];
    const char *const feats[] = {"item_ids", "f32", "one_id", "country_h",
                                 "words_h",  "f64", "i64",    "flag"};
    const char *const ids_only[] = {"one_id", "item_ids"};
    static const uint64_t ranges[][2] = {{0, 300}, {3, 250}, {127, 129}, {128, 256}};
    static const uint32_t batches[] = {1, 8, 64, 100, 128, 4096};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            both_ways(ds, s, feats, 8, ranges[i][0], ranges[i][1], batches[b]);
            both_ways(ds, s, ids_only, 2, ranges[i][0], ranges[i][1], batches[b]);
        }
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

/* ---- scalar columns in dense batches ---- */

/* pyarrow-scalar-nulls-zstd.parquet (tests/parquet/make_fixtures.py,
 * scalar_nulls): 2,000 rows in row groups of 1,200 and 800, pages of 100
 * rows with no null, only nulls, nulls at the start, at the end or here
 * and there; sa a dictionary, sb a dictionary that falls back to plain
 * pages, neg a negative id at row 1235 (from 1). Each column read by one
 * slot comes in dense batches (set_reader_dense); SCALAR_TWICE reads sa
 * twice, which keeps its batches spread over the slots. */
static const char *SCALAR =
    "{\"sample_id\": \"sid\", \"labels\": [\"lab\"], \"dense\": [\"da\", \"db\", \"dc\"],"
    " \"sparse\": [\"sa\", \"sb\"], \"infer\": false}";
static const char *SCALAR_TWICE =
    "{\"labels\": [\"lab\"], \"dense\": [\"da\"],"
    " \"sparse\": [\"sa\", {\"column\": \"sa\", \"name\": \"sa2\"}, \"sb\"],"
    " \"infer\": false}";
static const char *SCALAR_NEG = "{\"labels\": [\"lab\"], \"dense\": [\"db\"],"
                                " \"sparse\": [\"sa\", \"neg\", \"sb\"], \"infer\": false}";

static void threads_same(sl_wh_pqds_t *ds, const sl_wh_split_t *sp, const char *const *feats,
                         uint32_t nf, uint64_t from, uint64_t to, uint32_t batch, uint32_t threads,
                         bool mapped);

static sl_wh_pqds_t *open_scalar(const char *text, sl_wh_colmap_t **m, sl_wh_splits_t **sp)
{
    char path[4096];
    const char *root = getenv("SLUICE_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/data/parquet/pyarrow-scalar-nulls-zstd.parquet",
             root ? root : "..");
    return open_file(path, 2000, text, m, sp);
}

static void close_ds(sl_wh_pqds_t *ds, sl_wh_colmap_t *m, sl_wh_splits_t *sp)
{
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

Test(pq_columns, scalar_columns_dense_equal_row_path)
{
    /* runs starting and ending inside pages of each kind, across the row
     * groups, a whole stripe in place and runs shorter than a stripe */
    static const uint64_t ranges[][2] = {{0, 2000},    {0, 1200},  {1150, 1250}, {37, 163},
                                         {1199, 1201}, {100, 200}, {1900, 2000}, {341, 1777}};
    static const uint32_t batches[] = {7, 100, 333, 1000, 4096};
    const char *const maps[] = {SCALAR, SCALAR_TWICE};
    for (size_t k = 0; k < 2; k++) {
        sl_wh_splits_t *sp = NULL;
        sl_wh_colmap_t *m = NULL;
        sl_wh_pqds_t *ds = open_scalar(maps[k], &m, &sp);
        const sl_wh_split_t *s = &sp->items[0];
        for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
            for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
                both_ways(ds, s, NULL, 0, ranges[i][0], ranges[i][1], batches[b]);
        for (size_t i = 2; i < 6; i++) /* a row at a time (at most 512 stripes) */
            both_ways(ds, s, NULL, 0, ranges[i][0], ranges[i][1], 1);
        const char *const feats[] = {"sb", "da", "sa"};
        both_ways(ds, s, feats, 3, 0, 2000, 512);
        threads_same(ds, s, NULL, 0, 0, 2000, 500, 3, false);
        threads_same(ds, s, NULL, 0, 150, 1950, 4096, 2, true);
        close_ds(ds, m, sp);
    }
}

Test(pq_columns, scalar_negative_id_same_message)
{
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    sl_wh_pqds_t *ds = open_scalar(SCALAR_NEG, &m, &sp);
    const sl_wh_split_t *s = &sp->items[0];
    static const uint32_t batches[] = {3, 10, 100, 1234, 4096};
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        both_ways(ds, s, NULL, 0, 1200, 2000, batches[b]);
        both_ways(ds, s, NULL, 0, 0, 1234, batches[b]); /* up to the row before it */
        both_ways(ds, s, NULL, 0, 1235, 2000, batches[b]);
    }
    threads_same(ds, s, NULL, 0, 0, 2000, 256, 3, true);
    sl_wh_pqds_reader_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    stripes_t *got = calloc(1, sizeof *got);
    cr_assert_eq(sl_wh_pqds_read_stripes(r, s, 0, 2000, 1000, new_stripe, got, &err),
                 SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "pyarrow-scalar-nulls-zstd.parquet row 1235: column 'neg': an id "
                              "must be an integer >= 0, got -3");
    cr_assert_eq(got->n, 1, "the stripe of rows [0, 1000) went out before row 1235");
    free_stripes(got);
    free(got);
    sl_wh_pqds_reader_destroy(r);
    close_ds(ds, m, sp);
}

/* ---- transforms at decode (sl_wh_pqds_reader_set_maps) ---- */

typedef struct map_count {
    uint64_t calls, values;
} map_count_t;

/* never negative for an id >= 0 (ids_nonneg) */
static int64_t id_f(int64_t x)
{
    return (int64_t)(((uint64_t)x * 0x9E3779B97F4A7C15ull + 7) >> 1);
}

static float dense_f(float x)
{
    return isnan(x) ? -5.0f : x * 2.0f + 1.0f;
}

static void map_ids(const void *ctx, int64_t *v, uint64_t n)
{
    map_count_t *c = (map_count_t *)(uintptr_t)ctx;
    c->calls++;
    c->values += n;
    for (uint64_t i = 0; i < n; i++)
        v[i] = id_f(v[i]);
}

static void map_dense(const void *ctx, float *data, uint32_t rows, uint32_t cols, uint32_t col)
{
    (void)ctx;
    for (uint32_t r = 0; r < rows; r++)
        data[(size_t)r * cols + col] = dense_f(data[(size_t)r * cols + col]);
}

/* Stripes of [from, to) by batch rows with every feature mapped (one map
 * for all ids, one for all dense values) equal the unmapped stripes with
 * the maps applied to their ids and dense values; or the same error. */
static void mapped_equals_unmapped(sl_wh_pqds_t *ds, const sl_wh_split_t *sp, uint64_t from,
                                   uint64_t to, uint32_t batch, map_count_t *cnt)
{
    const sl_wh_schema_t *sch = sl_wh_pqds_mapping(ds)->schema;
    uint32_t nf = sl_wh_schema_num_features(sch);
    sl_wh_value_map_t maps[16];
    cr_assert_leq(nf, 16);
    for (uint32_t i = 0; i < nf; i++) {
        bool dense = sl_wh_schema_feature(sch, i)->kind == SL_WH_DENSE;
        maps[i] = (sl_wh_value_map_t){.ids = dense ? NULL : map_ids,
                                      .dense = dense ? map_dense : NULL,
                                      .ctx = cnt,
                                      .ids_nonneg = true};
    }
    static stripes_t want, got;
    sl_error_t err = {0}, err2 = {0};
    sl_wh_pqds_reader_t *r = NULL, *rm = NULL;
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &r, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_pqds_reader_new(ds, NULL, 0, &rm, &err), SL_OK, "%s", err.msg);
    sl_wh_pqds_reader_set_maps(rm, maps);
    sl_err_t rc1 = sl_wh_pqds_read_stripes(r, sp, from, to, batch, new_stripe, &want, &err);
    sl_err_t rc2 = sl_wh_pqds_read_stripes(rm, sp, from, to, batch, new_stripe, &got, &err2);
    check_taken(&want);
    check_taken(&got);
    cr_assert_eq(rc2, rc1, "[%llu, %llu) by %u: %s / %s", (unsigned long long)from,
                 (unsigned long long)to, batch, err.msg, err2.msg);
    if (rc1 != SL_OK) {
        cr_assert_str_eq(err2.msg, err.msg);
    } else {
        cr_assert_eq(got.n, want.n);
        for (uint32_t i = 0; i < want.n; i++) {
            stripe_t *w = &want.s[i];
            for (uint64_t v = 0; v < w->nv; v++)
                w->values[v] = id_f(w->values[v]);
            for (uint64_t d = 0; d < (uint64_t)w->n * w->D; d++)
                w->dense[d] = dense_f(w->dense[d]);
            compare(w, &got.s[i], i);
        }
    }
    free_stripes(&want);
    free_stripes(&got);
    sl_wh_pqds_reader_destroy(r);
    sl_wh_pqds_reader_destroy(rm);
}

Test(pq_columns, maps_at_decode_same_stripes_as_mapping_after)
{
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    /* every conversion of the mapping: INT64 ids (mapped by the column
     * readers: item_ids, one_id, tags' and cats' ids) and hashed strings
     * (mapped after the conversion), dense values of each type with nulls */
    sl_wh_pqds_t *ds = open_mapped(FULL, &m, &sp);
    map_count_t cnt = {0};
    mapped_equals_unmapped(ds, &sp->items[0], 78, 300, 64, &cnt);
    mapped_equals_unmapped(ds, &sp->items[0], 0, 300, 4096, &cnt); /* row 78 refused */
    cr_assert_gt(cnt.values, 0);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
    /* a negative raw id: refused with the same message, mapped or not */
    ds = open_mapped(NEG, &m, &sp);
    mapped_equals_unmapped(ds, &sp->items[0], 0, 300, 33, &cnt);
    mapped_equals_unmapped(ds, &sp->items[0], 131, 300, 4096, &cnt);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

/* ---- decoding on several threads (sl_wh_pqds_reader_set_threads) ---- */

/* a pure map (no counter: the column readers call it from their threads) */
static void map_ids_pure(const void *ctx, int64_t *v, uint64_t n)
{
    (void)ctx;
    for (uint64_t i = 0; i < n; i++)
        v[i] = id_f(v[i]);
}

/* Stripes of [from, to) by batch rows of the features feats[nf] (NULL:
 * all), decoded and converted on one thread and on `threads` (each thread
 * converting the columns it decoded), maps at decode or not: the same
 * stripes bit for bit, or the same error and message. */
static void threads_same(sl_wh_pqds_t *ds, const sl_wh_split_t *sp, const char *const *feats,
                         uint32_t nf, uint64_t from, uint64_t to, uint32_t batch, uint32_t threads,
                         bool mapped)
{
    const sl_wh_schema_t *sch = sl_wh_pqds_mapping(ds)->schema;
    uint32_t n = feats ? nf : sl_wh_schema_num_features(sch);
    sl_wh_value_map_t maps[16];
    cr_assert_leq(n, 16);
    for (uint32_t i = 0; i < n; i++) {
        const sl_wh_feature_t *f =
            feats ? sl_wh_schema_find(sch, feats[i]) : sl_wh_schema_feature(sch, i);
        bool dense = f->kind == SL_WH_DENSE;
        maps[i] = (sl_wh_value_map_t){.ids = dense ? NULL : map_ids_pure,
                                      .dense = dense ? map_dense : NULL,
                                      .ids_nonneg = true};
    }
    static stripes_t want, got;
    sl_error_t err = {0}, err2 = {0};
    sl_wh_pqds_reader_t *r1 = NULL, *rn = NULL;
    cr_assert_eq(sl_wh_pqds_reader_new(ds, feats, nf, &r1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_pqds_reader_new(ds, feats, nf, &rn, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_pqds_reader_set_threads(rn, threads, &err), SL_OK, "%s", err.msg);
    if (mapped) {
        sl_wh_pqds_reader_set_maps(r1, maps);
        sl_wh_pqds_reader_set_maps(rn, maps);
    }
    /* twice: the second read reuses the readers (and their scratch) */
    for (int pass = 0; pass < 2; pass++) {
        sl_err_t rc1 = sl_wh_pqds_read_stripes(r1, sp, from, to, batch, new_stripe, &want, &err);
        sl_err_t rc2 = sl_wh_pqds_read_stripes(rn, sp, from, to, batch, new_stripe, &got, &err2);
        check_taken(&want);
        check_taken(&got);
        cr_assert_eq(rc2, rc1, "[%llu, %llu) by %u on %u threads: %s / %s",
                     (unsigned long long)from, (unsigned long long)to, batch, threads, err.msg,
                     err2.msg);
        if (rc1 != SL_OK) {
            cr_assert_str_eq(err2.msg, err.msg);
        } else {
            cr_assert_eq(got.n, want.n, "[%llu, %llu) by %u on %u threads: stripes",
                         (unsigned long long)from, (unsigned long long)to, batch, threads);
            for (uint32_t i = 0; i < want.n; i++)
                compare(&want.s[i], &got.s[i], i);
        }
        free_stripes(&want);
        free_stripes(&got);
    }
    sl_wh_pqds_reader_destroy(r1);
    sl_wh_pqds_reader_destroy(rn);
}

Test(pq_columns, threads_decode_same_stripes)
{
    sl_wh_splits_t *sp = NULL;
    sl_wh_colmap_t *m = NULL;
    sl_wh_pqds_t *ds = open_mapped(FULL, &m, &sp);
    const sl_wh_split_t *s = &sp->items[0];
    const char *const feats[] = {"item_ids", "f32", "one_id", "country_h",
                                 "words_h",  "f64", "i64",    "flag"};
    const char *const one[] = {"f64"};
    static const uint64_t ranges[][2] = {{0, 77}, {78, 300}, {127, 129}, {0, 300}};
    static const uint32_t batches[] = {1, 64, 128, 4096};
    static const uint32_t threads[] = {2, 3, 16};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
                /* every column (row 78's weights refused), in place, mapped */
                threads_same(ds, s, NULL, 0, ranges[i][0], ranges[i][1], batches[b], threads[t],
                             false);
                threads_same(ds, s, feats, 8, ranges[i][0], ranges[i][1], batches[b], threads[t],
                             b % 2 == 0);
            }
    /* one feature (besides ids and labels), more threads than readers */
    threads_same(ds, s, one, 1, 0, 300, 100, 16, true);
    /* 0 and 1: no helpers */
    threads_same(ds, s, feats, 8, 0, 300, 64, 0, false);
    threads_same(ds, s, feats, 8, 0, 300, 64, 1, false);
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
    /* a negative id (refused) in the second row group, after the first
     * was converted on the threads (in place, by an estimate), numbered
     * rows */
    ds = open_mapped(NEG, &m, &sp);
    for (uint32_t t = 2; t <= 3; t++) {
        threads_same(ds, &sp->items[0], NULL, 0, 0, 300, 33, t, false);
        threads_same(ds, &sp->items[0], NULL, 0, 0, 300, 128, t, false);
        threads_same(ds, &sp->items[0], NULL, 0, 131, 300, 4096, t, true);
    }
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
}

/* A copy of the fixture with bytes [at, at + 6) of the first data page
 * of each named column in row group 1 overwritten: the same error, and the
 * same message (file, row group, column, page: the first column's in
 * reader order), on one thread and on several. */
static void corrupt_same_error(const char *const *cols, uint32_t ncols, uint32_t at)
{
    FILE *in = fopen(fixture, "rb");
    cr_assert_not_null(in);
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, in);
    fclose(in);
    cr_assert_lt(len, sizeof buf);
    sl_pq_source_t src;
    sl_pq_memory_t mem;
    sl_pq_file_t *pf = NULL;
    sl_error_t err = {0};
    sl_pq_source_memory(&mem, buf, len, &src);
    cr_assert_eq(sl_pq_file_open(&src, "copy", NULL, &pf, &err), SL_OK, "%s", err.msg);
    const sl_pq_meta_t *pm = sl_pq_file_meta(pf);
    for (uint32_t i = 0; i < ncols; i++) {
        int64_t c = sl_pq_find_column(pm, cols[i]);
        cr_assert_geq(c, 0, "%s", cols[i]);
        int64_t off = pm->row_groups[1].chunks[c].data_page_offset + at;
        cr_assert_lt((size_t)off + 6, len);
        memset(buf + off, 0xff, 6);
    }
    sl_pq_file_destroy(pf);
    char *path = tu_path(dir, "corrupt.parquet");
    tu_write_file(path, buf, len);
    sl_wh_colmap_t *m = mapping(FULL);
    sl_wh_pqds_t *ds = NULL;
    sl_wh_splits_t *sp = NULL;
    cr_assert_eq(sl_wh_pqds_open(path, m, NULL, NULL, NULL, NULL, &ds, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_pqds_plan(ds, 1000, NULL, 0, &sp, NULL, &err), SL_OK, "%s", err.msg);
    const char *const feats[] = {"item_ids", "f32", "one_id", "f64", "i64", "flag"};
    sl_wh_pqds_reader_t *r[2] = {NULL, NULL};
    sl_error_t e[2] = {{0}, {0}};
    sl_err_t rc[2];
    static stripes_t got[2];
    for (int t = 0; t < 2; t++) {
        cr_assert_eq(sl_wh_pqds_reader_new(ds, feats, 6, &r[t], &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_wh_pqds_reader_set_threads(r[t], t ? 2 : 1, &err), SL_OK, "%s", err.msg);
        rc[t] =
            sl_wh_pqds_read_stripes(r[t], &sp->items[0], 0, 300, 64, new_stripe, &got[t], &e[t]);
        check_taken(&got[t]);
    }
    cr_assert_neq(rc[0], SL_OK, "the corrupt page is read");
    cr_assert_eq(rc[1], rc[0], "%s / %s", e[0].msg, e[1].msg);
    cr_assert_str_eq(e[1].msg, e[0].msg);
    cr_assert(strstr(e[0].msg, "row group 1") != NULL, "%s", e[0].msg);
    cr_assert_eq(got[1].n, got[0].n, "stripes before the error");
    for (uint32_t i = 0; i < got[0].n; i++)
        compare(&got[0].s[i], &got[1].s[i], i);
    for (int t = 0; t < 2; t++) {
        free_stripes(&got[t]);
        sl_wh_pqds_reader_destroy(r[t]);
    }
    sl_wh_splits_destroy(sp);
    sl_wh_pqds_destroy(ds);
    sl_wh_colmap_destroy(m);
    free(path);
}

Test(pq_columns, threads_decode_same_errors)
{
    /* one column's page header; its compressed values */
    const char *const f64[] = {"f64"};
    corrupt_same_error(f64, 1, 0);
    corrupt_same_error(f64, 1, 20);
    /* two columns, whichever thread decodes each: the first's error */
    const char *const two[] = {"f32", "i64"};
    corrupt_same_error(two, 2, 0);
    const char *const two_r[] = {"i64", "f32"};
    corrupt_same_error(two_r, 2, 20);
}
/* ---- every allocation failing ---- */

static sl_err_t count_rows(void *ctx, const sl_wh_rows_t *rows, uint64_t first, uint64_t end,
                           sl_arena_t **owned, sl_error_t *err)
{
    (void)err;
    uint64_t *n = ctx;
    sl_arena_destroy(*owned); /* taken over: every stripe in a new arena */
    *owned = NULL;
    cr_assert_eq(end - first, rows->batch.batch_size);
    *n += rows->batch.batch_size;
    return SL_OK;
}

Test(pq_columns, every_allocation_failure)
{
    sl_wh_colmap_t *m = mapping(FULL);
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    uint64_t k = 1;
    for (;; k++) {
        tu_alloc_fail_at(&ta, k, false);
        sl_wh_pqds_t *ds = NULL;
        sl_wh_splits_t *sp = NULL;
        sl_wh_pqds_reader_t *r = NULL;
        sl_error_t err = {0};
        uint64_t rows = 0;
        sl_err_t rc = sl_wh_pqds_open(fixture, m, NULL, &ta.base, NULL, NULL, &ds, &err);
        if (rc == SL_OK) rc = sl_wh_pqds_plan(ds, 1000, NULL, 0, &sp, NULL, &err);
        const char *const feats[] = {"cats", "f64", "item_ids", "country_h", "tags"};
        if (rc == SL_OK) rc = sl_wh_pqds_reader_new(ds, feats, 5, &r, &err);
        /* sessions out of order: the sort's scratch too */
        if (rc == SL_OK)
            rc = sl_wh_pqds_read_stripes(r, &sp->items[0], 78, 300, 64, count_rows, &rows, &err);
        bool failed = tu_alloc_failures(&ta) > 0;
        sl_wh_pqds_reader_destroy(r);
        sl_wh_splits_destroy(sp);
        sl_wh_pqds_destroy(ds);
        if (!failed) {
            cr_assert_eq(rc, SL_OK, "%s", err.msg);
            cr_assert_eq(rows, 222);
            break;
        }
        cr_assert(rc != SL_OK || rows == 222, "allocation %llu failed: rc %d with %llu rows",
                  (unsigned long long)k, rc, (unsigned long long)rows);
        cr_assert(rc == SL_OK || err.msg[0] != '\0', "allocation %llu: an error without a message",
                  (unsigned long long)k);
        char why[256];
        cr_assert(tu_alloc_clean(&ta, why, sizeof why), "allocation %llu failed: %s",
                  (unsigned long long)k, why);
    }
    cr_assert_gt(k, 20, "the walk covered %llu allocations", (unsigned long long)k);
    tu_alloc_assert_clean(&ta);
    sl_wh_colmap_destroy(m);
}

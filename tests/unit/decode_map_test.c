/* Transforms at decode (sl_wh_value_map_t, sl_pipeline_plan_map_at_decode;
 * docs/WORKER.md "Transforms at decode"): the reader maps a dictionary
 * column once per distinct value and any other column value by value,
 * with the same bits as mapping what it decoded; and a plan whose
 * per-value transforms run in the reader makes, from the mapped rows,
 * frames byte for byte those of the plan that runs them on the batch. */
#include "warehouse_testdata.h"

#include <math.h>

#include "common/mem.h"
#include "dpp/pipeline/plan.h"
#include "sluice/wire.h"
#include "warehouse/wh_internal.h"

static char *dir;

static void setup(void)
{
    dir = td_tmpdir();
}

static void teardown(void)
{
    td_rmrf(dir);
    free(dir);
}

TestSuite(decode_map, .init = setup, .fini = teardown);

/* ---- the reader's maps, with test functions ---- */

typedef struct counter {
    uint64_t calls, values;
} counter_t;

static int64_t id_f(int64_t x)
{
    return (int64_t)((uint64_t)x * 0x9E3779B97F4A7C15ull + 7);
}

/* NaN (missing) becomes -5 as fill_missing would make it */
static float dense_f(float x)
{
    return isnan(x) ? -5.0f : x * 2.0f + 1.0f;
}

static void map_ids(const void *ctx, int64_t *ids, uint64_t n)
{
    counter_t *c = (counter_t *)(uintptr_t)ctx;
    c->calls++;
    c->values += n;
    for (uint64_t i = 0; i < n; i++)
        ids[i] = id_f(ids[i]);
}

static void map_dense(const void *ctx, float *data, uint32_t rows, uint32_t cols, uint32_t col)
{
    counter_t *c = (counter_t *)(uintptr_t)ctx;
    c->calls++;
    c->values += rows;
    for (uint32_t r = 0; r < rows; r++)
        data[(size_t)r * cols + col] = dense_f(data[(size_t)r * cols + col]);
}

static bool same_bits(float a, float b)
{
    return memcmp(&a, &b, 4) == 0;
}

/* The features read, in an order unlike the schema's; maps on all but
 * w_cat and d1. */
static const char *const feats[] = {"u_hist", "d2", "item", "d0", "w_cat", "d1", "u_geo"};
enum { NFEAT = 7 };

/* Read path whole, plain and mapped, in the given form; compare every
 * value: mapped == f(plain) bit for bit. */
static void compare_reads(const char *path, bool dedup_form, counter_t *cnt)
{
    sl_wh_value_map_t maps[NFEAT] = {{.ids = map_ids, .ctx = &cnt[0]},
                                     {.dense = map_dense, .ctx = &cnt[1]},
                                     {.ids = map_ids, .ctx = &cnt[2]},
                                     {.dense = map_dense, .ctx = &cnt[3]},
                                     {0},
                                     {.ids = map_ids, .dense = NULL, .ctx = &cnt[5]},
                                     {.ids = map_ids, .ctx = &cnt[6]}};
    /* d1 gets an ids map only: a dense feature, so nothing is mapped */
    sl_wh_read_opts_t po = {.features = feats, .num_features = NFEAT, .dedup_form = dedup_form};
    sl_wh_read_opts_t mo = po;
    mo.maps = maps;
    sl_wh_reader_t *pr, *mr;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_reader_open(path, NULL, &po, &pr, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_reader_open(path, NULL, &mo, &mr, &err), SL_OK, "%s", err.msg);
    for (;;) {
        const sl_wh_rows_t *p, *m;
        cr_assert_eq(sl_wh_reader_next(pr, &p, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_wh_reader_next(mr, &m, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(p == NULL, m == NULL);
        if (p == NULL) break;
        const sl_batch_t *a = &p->batch, *b = &m->batch;
        cr_assert_eq(a->dense.cols, 3);
        for (uint32_t c = 0; c < a->dense.cols; c++) {
            bool mapped = strcmp(a->dense.names[c], "d1") != 0;
            for (uint32_t r = 0; r < a->batch_size; r++) {
                float x = a->dense.data[(size_t)r * 3 + c], y = b->dense.data[(size_t)r * 3 + c];
                cr_assert(same_bits(y, mapped ? dense_f(x) : x), "%s row %u: %g -> %g",
                          a->dense.names[c], r, x, y);
            }
        }
        cr_assert_eq(a->sparse.num_keys, b->sparse.num_keys);
        cr_assert_eq(a->sparse.num_values, b->sparse.num_values);
        for (uint32_t k = 0; k < a->sparse.num_keys; k++) {
            bool mapped = strcmp(a->sparse.keys[k], "w_cat") != 0;
            for (uint64_t i = p->key_offsets[k]; i < p->key_offsets[k + 1]; i++)
                cr_assert_eq(b->sparse.values[i],
                             mapped ? id_f(a->sparse.values[i]) : a->sparse.values[i],
                             "%s value %llu", a->sparse.keys[k], (unsigned long long)i);
            if (a->sparse.weights)
                cr_assert_eq(memcmp(a->sparse.weights + p->key_offsets[k],
                                    b->sparse.weights + p->key_offsets[k],
                                    (p->key_offsets[k + 1] - p->key_offsets[k]) * 4),
                             0);
        }
        cr_assert_eq(a->num_groups, b->num_groups);
        for (uint32_t g = 0; g < a->num_groups; g++) {
            const sl_kjt_t *ua = &a->groups[g].unique, *ub = &b->groups[g].unique;
            cr_assert_eq(ua->num_values, ub->num_values);
            for (uint64_t i = 0; i < ua->num_values; i++)
                cr_assert_eq(ub->values[i], id_f(ua->values[i])); /* u_hist, u_geo: mapped */
        }
    }
    sl_wh_reader_close(pr);
    sl_wh_reader_close(mr);
}

Test(decode_map, dictionaries_mapped_once_per_distinct_value_same_bits)
{
    uint32_t n = 3000;
    td_spec_t spec = {n, 8, 20, true, 0.2, tu_seed("decode_map_dictionaries")};
    td_rows_t m;
    td_generate(&spec, &m);
    /* d2 drawn from 5 values: a dictionary of floats (as in
     * warehouse_encoding_test), with missing rows left missing */
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(m.dense[(size_t)i * TD_D + 2]))
            m.dense[(size_t)i * TD_D + 2] = (float)(i % 5) * 0.5f - 1.0f;
    /* d0 random bit patterns (finite, of either sign): no dictionary */
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(m.dense[(size_t)i * TD_D])) {
            uint32_t bits =
                (uint32_t)(((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull >> 32) & 0xbfffffffu;
            memcpy(&m.dense[(size_t)i * TD_D], &bits, 4);
        }
    char path[4096];
    snprintf(path, sizeof path, "%s/a.slc", dir);
    sl_wh_writer_opts_t o = td_opts(1000);
    td_write(path, &m, &o);
    /* the layout the counts below rest on */
    size_t len;
    uint8_t *data = td_read_all(path, &len);
    wh_file_t *f;
    sl_error_t err = {0};
    cr_assert_eq(wh_file_open(NULL, data, len, "a.slc", NULL, NULL, &f, &err), SL_OK, "%s",
                 err.msg);
    uint64_t hist_values = 0, hist_dict = 0, d0_values = 0;
    for (uint32_t i = 0; i < f->num_streams; i++) {
        const wh_stream_t *st = &f->streams[i];
        if (strcmp(st->name, "d2") == 0 && st->kind == SL_WH_STREAM_DENSE_VALUES) {
            cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
            cr_assert_eq(st->dict_size, 5);
        }
        if (strcmp(st->name, "d0") == 0 && st->kind == SL_WH_STREAM_DENSE_VALUES) {
            cr_assert_neq(st->encoding, SLUICE__ENCODING__ENCODING_DICT); /* random floats */
            d0_values += st->value_count;
        }
        if (strcmp(st->name, "u_hist") == 0 && st->kind == SL_WH_STREAM_IDS) {
            cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
            hist_values += st->value_count;
            hist_dict += st->dict_size;
        }
    }
    cr_assert_lt(hist_dict, hist_values);
    cr_assert_gt(d0_values, 0);
    wh_file_close(f);
    free(data);

    counter_t cnt[NFEAT];
    memset(cnt, 0, sizeof cnt);
    compare_reads(path, false, cnt);
    /* d2: per stripe its 5 entries and one NaN (the missing rows) */
    cr_assert_eq(cnt[1].values, 3 * (5 + 1));
    cr_assert_eq(cnt[1].calls, 3 * 2);
    /* u_hist: its dictionaries' entries, not its rows */
    cr_assert_eq(cnt[0].values, hist_dict);
    cr_assert_eq(cnt[0].calls, 3);
    /* d0: every row, once per stripe, missing rows included */
    cr_assert_eq(cnt[3].values, n);
    cr_assert_eq(cnt[3].calls, 3);
    /* d1 (dense, an ids map only) and w_cat (no map): nothing */
    cr_assert_eq(cnt[5].calls, 0);
    memset(cnt, 0, sizeof cnt);
    compare_reads(path, true, cnt); /* the stored groups' unique rows mapped */
    cr_assert_eq(cnt[0].values, hist_dict);
    td_free(&m);
}

/* ---- the plan's maps against its batch transforms ---- */

/* A batch holding a copy of rows' tensors, with its own arena. */
static sl_batch_t *copy_rows(const sl_wh_rows_t *rows)
{
    const sl_batch_t *in = &rows->batch;
    sl_batch_t *b = sl_batch_new(NULL);
    cr_assert_not_null(b);
    uint32_t N = in->batch_size;
    b->batch_size = N;
    cr_assert_eq(sl_dense_init(&b->dense, b->arena, N, in->dense.cols, in->dense.names), SL_OK);
    memcpy(b->dense.data, in->dense.data, (size_t)N * in->dense.cols * 4);
    cr_assert_eq(sl_dense_init(&b->labels, b->arena, N, in->labels.cols, in->labels.names), SL_OK);
    memcpy(b->labels.data, in->labels.data, (size_t)N * in->labels.cols * 4);
    const sl_kjt_t *k = &in->sparse;
    cr_assert_eq(sl_kjt_init(&b->sparse, b->arena, k->num_keys, k->keys, N, k->num_values,
                             k->weights != NULL),
                 SL_OK);
    memcpy(b->sparse.lengths, k->lengths, (size_t)k->num_keys * N * 4);
    memcpy(b->sparse.values, k->values, k->num_values * 8);
    if (k->weights) memcpy(b->sparse.weights, k->weights, k->num_values * 4);
    return b;
}

/* Every stripe of path read with ro, transformed by plan, encoded. */
static void frames_of(const char *path, const sl_pipeline_plan_t *plan, const sl_wh_read_opts_t *ro,
                      void **frames, size_t *lens, uint32_t max)
{
    sl_wh_reader_t *r;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_reader_open(path, NULL, ro, &r, &err), SL_OK, "%s", err.msg);
    for (uint32_t s = 0;; s++) {
        const sl_wh_rows_t *rows;
        cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK, "%s", err.msg);
        if (rows == NULL) break;
        cr_assert_lt(s, max);
        sl_batch_t *b = copy_rows(rows);
        cr_assert_eq(sl_pipeline_plan_transform(plan, b, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_wire_encode(b, NULL, &frames[s], &lens[s], &err), SL_OK, "%s", err.msg);
        sl_batch_destroy(b);
    }
    sl_wh_reader_close(r);
}

Test(decode_map, plan_at_decode_makes_the_same_frames)
{
    uint32_t n = 3000;
    td_spec_t spec = {n, 8, 20, true, 0.2, tu_seed("decode_map_plan")};
    td_rows_t m;
    td_generate(&spec, &m);
    for (uint32_t i = 0; i < n; i++) /* d2: a dictionary, with some values below -1 */
        if (!isnan(m.dense[(size_t)i * TD_D + 2]))
            m.dense[(size_t)i * TD_D + 2] = (float)(i % 7) * 0.75f - 2.0f;
    char path[4096];
    snprintf(path, sizeof path, "%s/p.slc", dir);
    sl_wh_writer_opts_t o = td_opts(1000);
    td_write(path, &m, &o);
    const char *spec_json =
        "{\"source\": {\"table\": \"t\"},"
        " \"filters\": [{\"op\": \"has_feature\", \"feature\": \"d1\"}],"
        " \"transforms\": ["
        "  {\"op\": \"fill_missing\", \"feature\": \"d2\", \"value\": 3},"
        "  {\"op\": \"log1p\", \"feature\": \"d2\"},"
        "  {\"op\": \"clamp\", \"feature\": \"d0\", \"min\": 0.25},"
        "  {\"op\": \"log1p\", \"feature\": \"d1\"},"
        "  {\"op\": \"sigrid_hash\", \"feature\": \"u_hist\", \"table_size\": 1000, \"salt\": 3},"
        "  {\"op\": \"first_x\", \"feature\": \"u_hist\", \"x\": 3},"
        "  {\"op\": \"modulo\", \"feature\": \"u_hist\", \"divisor\": 97},"
        "  {\"op\": \"sigrid_hash\", \"feature\": \"w_cat\", \"table_size\": 4096},"
        "  {\"op\": \"sigrid_hash\", \"feature\": \"item\", \"table_size\": 100},"
        "  {\"op\": \"cross\", \"features\": [\"item\", \"u_geo\"], \"table_size\": 64}]}";
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec_json, strlen(spec_json), &job, NULL, &err), SL_OK, "%s",
                 err.msg);
    sl_wh_schema_t *schema = td_schema();
    sl_pipeline_plan_t *plain = NULL, *at = NULL;
    cr_assert_eq(sl_pipeline_plan_new(job, schema, &plain, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_pipeline_plan_new(job, schema, &at, NULL, &err), SL_OK, "%s", err.msg);
    const sl_wh_value_map_t *maps = NULL;
    cr_assert_eq(sl_pipeline_plan_map_at_decode(at, &maps, &err), SL_OK, "%s", err.msg);
    cr_assert_not_null(maps);
    uint32_t nf = 0;
    const char *const *features = sl_pipeline_plan_read_features(at, &nf);
    /* which features the reader maps: d2, d0, u_hist and w_cat; not d1
     * (a filter reads it), item (cross reads it), u_geo (no transform) */
    for (uint32_t i = 0; i < nf; i++) {
        const char *f = features[i];
        bool want_dense = strcmp(f, "d2") == 0 || strcmp(f, "d0") == 0;
        bool want_ids = strcmp(f, "u_hist") == 0 || strcmp(f, "w_cat") == 0;
        cr_assert_eq(maps[i].dense != NULL, want_dense, "%s", f);
        cr_assert_eq(maps[i].ids != NULL, want_ids, "%s", f);
    }
    sl_wh_read_opts_t po = {.features = features, .num_features = nf};
    sl_wh_read_opts_t mo = po;
    mo.maps = maps;
    void *fa[4] = {0}, *fb[4] = {0};
    size_t la[4] = {0}, lb[4] = {0};
    frames_of(path, plain, &po, fa, la, 4);
    frames_of(path, at, &mo, fb, lb, 4);
    for (uint32_t s = 0; s < 3; s++) {
        cr_assert_not_null(fa[s]);
        cr_assert_eq(la[s], lb[s], "stripe %u", s);
        cr_assert_eq(memcmp(fa[s], fb[s], la[s]), 0, "stripe %u: frames differ", s);
        sl_free(sl_allocator_default(), fa[s], la[s]);
        sl_free(sl_allocator_default(), fb[s], lb[s]);
    }
    cr_assert_null(fa[3]);
    /* asked again: the same maps, the plan unchanged */
    const sl_wh_value_map_t *again = NULL;
    cr_assert_eq(sl_pipeline_plan_map_at_decode(at, &again, &err), SL_OK);
    cr_assert_eq(again, maps);
    sl_pipeline_plan_destroy(plain);
    sl_pipeline_plan_destroy(at);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(schema);
    td_free(&m);
}

/* A job with nothing to map leaves the plan as it is. */
Test(decode_map, nothing_to_map_gives_no_maps)
{
    const char *spec_json =
        "{\"source\": {\"table\": \"t\"},"
        " \"transforms\": [{\"op\": \"first_x\", \"feature\": \"item\", \"x\": 2},"
        "  {\"op\": \"ngram\", \"feature\": \"u_hist\", \"n\": 2, \"table_size\": 9}]}";
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec_json, strlen(spec_json), &job, NULL, &err), SL_OK, "%s",
                 err.msg);
    sl_wh_schema_t *schema = td_schema();
    sl_pipeline_plan_t *plan = NULL;
    cr_assert_eq(sl_pipeline_plan_new(job, schema, &plan, NULL, &err), SL_OK, "%s", err.msg);
    const sl_wh_value_map_t *maps = (const sl_wh_value_map_t *)1;
    cr_assert_eq(sl_pipeline_plan_map_at_decode(plan, &maps, &err), SL_OK, "%s", err.msg);
    cr_assert_null(maps);
    sl_pipeline_plan_destroy(plan);
    sl_pipeline_job_destroy(job);
    sl_wh_schema_destroy(schema);
}

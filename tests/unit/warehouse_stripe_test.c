/* sl_wh_writer_append_stripe: rows written as one stripe of their own, each
 * storage-dedup group stored as the rows' IKJT holds it (the autocache's
 * writer, docs/FORMAT.md "Cache files"): read back in dedup form, the very
 * unique rows (repeats included) and inverse indices; expanded, the rows. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "warehouse/warehouse.h"

static char *dir;
static char path[512];

static void setup(void)
{
    dir = tu_mkdtemp("warehouse-stripe");
    snprintf(path, sizeof path, "%s/f.slc", dir);
}

static void teardown(void)
{
    tu_rm_tree(dir);
    free(dir);
}

TestSuite(warehouse_stripe, .init = setup, .fini = teardown);

/* item (sparse), group g = {a, b} (weighted), d (dense), label click. */
static const char *const g_keys[2] = {"a", "b"};
static const char *const item_key[1] = {"item"};
static const sl_dedup_group_spec_t g_spec = {"g", 2, g_keys};

static sl_wh_schema_t *schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_add_feature(s, "item", SL_WH_SPARSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "a", SL_WH_WEIGHTED, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "b", SL_WH_WEIGHTED, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "d", SL_WH_DENSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_label(s, "click", &err), SL_OK);
    return s;
}

/* 4 rows; group g over U = 3 unique rows of which 0 and 2 are equal (a
 * deduplicator would merge them), row r -> inverse[r]. */
static int32_t item_len[4] = {1, 0, 2, 1};
static int64_t item_ids[4] = {10, 11, 12, 13};
static int32_t g_len[6] = {/* a */ 1, 2, 1, /* b */ 0, 1, 0};
static int64_t g_ids[5] = {7, 8, 9, 7, 5};
static float g_wts[5] = {0.5f, 1.0f, 2.0f, 0.5f, 3.0f};
static int32_t g_inv[4] = {0, 1, 2, 1};
static float dense[4] = {1, 2, 3, 4};
static float click[4] = {0, 1, 0, 1};
static const char *const d_name[1] = {"d"}, *const l_name[1] = {"click"};

static sl_ikjt_t group(void)
{
    return (sl_ikjt_t){.name = "g",
                       .unique = {2, 3, 5, (const char **)g_keys, g_len, g_ids, g_wts},
                       .batch_size = 4,
                       .inverse = g_inv};
}

static sl_wh_rows_t rows_of(sl_ikjt_t *g, uint32_t num_groups)
{
    sl_wh_rows_t r = {0};
    r.batch.batch_size = 4;
    r.batch.sparse = (sl_kjt_t){1, 4, 4, (const char **)item_key, item_len, item_ids, NULL};
    r.batch.num_groups = num_groups;
    r.batch.groups = g;
    r.batch.dense = (sl_dense_t){4, 1, (const char **)d_name, dense};
    r.batch.labels = (sl_dense_t){4, 1, (const char **)l_name, click};
    return r;
}

static sl_wh_writer_t *open_writer(uint32_t stripe_rows, const sl_wh_schema_t *s)
{
    sl_wh_writer_opts_t o = sl_wh_writer_opts_default();
    o.stripe_rows = stripe_rows;
    o.no_sync = true;
    o.overwrite = true;
    o.num_dedup_groups = 1;
    o.dedup_groups = &g_spec;
    sl_wh_writer_t *w = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_writer_open(path, s, &o, &w, &err), SL_OK, "%s", err.msg);
    return w;
}

Test(warehouse_stripe, groups_are_stored_as_given_one_stripe_per_call)
{
    sl_wh_schema_t *s = schema();
    sl_wh_writer_t *w = open_writer(16, s);
    sl_error_t err = {0};
    sl_ikjt_t g = group();
    sl_wh_rows_t rows = rows_of(&g, 1);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_OK, "%s", err.msg);
    sl_wh_write_stats_t ws = {0};
    cr_assert_eq(sl_wh_writer_close(w, &ws, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ws.stripes, 2, "one stripe per call, not one of 8 rows");
    cr_assert_eq(ws.dedup_rows, 8);
    cr_assert_eq(ws.dedup_unique, 6, "the repeated unique row is kept");

    sl_wh_read_opts_t ro = {.dedup_form = true};
    sl_wh_reader_t *r = NULL;
    cr_assert_eq(sl_wh_reader_open(path, NULL, &ro, &r, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_reader_num_stripes(r), 2);
    for (uint32_t st = 0; st < 2; st++) {
        const sl_wh_rows_t *out = NULL;
        cr_assert_eq(sl_wh_reader_read_stripe(r, st, &out, &err), SL_OK, "%s", err.msg);
        const sl_batch_t *b = &out->batch;
        cr_assert_eq(b->batch_size, 4);
        cr_assert_eq(b->sparse.num_keys, 1);
        cr_assert_str_eq(b->sparse.keys[0], "item");
        cr_assert_arr_eq(b->sparse.lengths, item_len, sizeof item_len);
        cr_assert_arr_eq(b->sparse.values, item_ids, sizeof item_ids);
        cr_assert_null(b->sparse.weights);
        cr_assert_eq(b->num_groups, 1);
        const sl_ikjt_t *ik = &b->groups[0];
        cr_assert_str_eq(ik->name, "g");
        cr_assert_eq(ik->batch_size, 4);
        cr_assert_arr_eq(ik->inverse, g_inv, sizeof g_inv);
        cr_assert_eq(ik->unique.num_keys, 2);
        cr_assert_str_eq(ik->unique.keys[0], "a");
        cr_assert_str_eq(ik->unique.keys[1], "b");
        cr_assert_eq(ik->unique.stride, 3);
        cr_assert_eq(ik->unique.num_values, 5);
        cr_assert_arr_eq(ik->unique.lengths, g_len, sizeof g_len);
        cr_assert_arr_eq(ik->unique.values, g_ids, sizeof g_ids);
        cr_assert_not_null(ik->unique.weights);
        cr_assert_arr_eq(ik->unique.weights, g_wts, sizeof g_wts);
        cr_assert_arr_eq(b->dense.data, dense, sizeof dense);
        cr_assert_arr_eq(b->labels.data, click, sizeof click);
    }
    sl_wh_reader_close(r);

    /* expanded: the rows (row 3 is unique row 1: a [8, 9], b [5]) */
    sl_wh_read_opts_t eo = {0};
    cr_assert_eq(sl_wh_reader_open(path, NULL, &eo, &r, &err), SL_OK, "%s", err.msg);
    const sl_wh_rows_t *out = NULL;
    cr_assert_eq(sl_wh_reader_read_stripe(r, 1, &out, &err), SL_OK, "%s", err.msg);
    const sl_kjt_t *k = &out->batch.sparse;
    cr_assert_eq(out->batch.num_groups, 0);
    cr_assert_eq(k->num_keys, 3);
    int32_t want_len[12] = {1, 0, 2, 1, /* a */ 1, 2, 1, 2, /* b */ 0, 1, 0, 1};
    int64_t want_ids[12] = {10, 11, 12, 13, /* a */ 7, 8, 9, 7, 8, 9, /* b */ 5, 5};
    cr_assert_eq(k->num_values, 12);
    cr_assert_arr_eq(k->lengths, want_len, sizeof want_len);
    cr_assert_arr_eq(k->values, want_ids, sizeof want_ids);
    sl_wh_reader_close(r);
    sl_wh_schema_destroy(s);
}

Test(warehouse_stripe, rows_that_cannot_be_stored_as_given_are_refused)
{
    sl_wh_schema_t *s = schema();
    sl_error_t err = {0};
    sl_ikjt_t g = group();
    /* more rows than a stripe holds */
    sl_wh_writer_t *w = open_writer(3, s);
    sl_wh_rows_t rows = rows_of(&g, 1);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "do not fit a stripe of 3") != NULL, "%s", err.msg);
    sl_wh_writer_abort(w);
    w = open_writer(16, s);
    /* the file's group missing from the rows, or under another name */
    rows = rows_of(NULL, 0);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "0 dedup groups in the rows, the file has 1") != NULL, "%s", err.msg);
    sl_ikjt_t bad = group();
    bad.name = "h";
    rows = rows_of(&bad, 1);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "no group 'g'") != NULL, "%s", err.msg);
    /* the group's features in another order */
    static const char *const swapped[2] = {"b", "a"};
    bad = group();
    bad.unique.keys = (const char **)swapped;
    rows = rows_of(&bad, 1);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "group 'g' of the rows") != NULL, "%s", err.msg);
    /* unweighted where the schema says weighted */
    bad = group();
    bad.unique.weights = NULL;
    rows = rows_of(&bad, 1);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_ERR_INVALID);
    /* nothing was written by the refused calls; a good one still is */
    rows = rows_of(&g, 1);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_OK, "%s", err.msg);
    sl_wh_write_stats_t ws = {0};
    cr_assert_eq(sl_wh_writer_close(w, &ws, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ws.stripes, 1);
    cr_assert_eq(ws.rows, 4);
    sl_wh_schema_destroy(s);
}

/* A twin reader (sl_wh_reader_open_twin: what a worker's stripe lanes
 * open) of a local file and of memory: the base's stripe range, its own
 * options (here the expanded form, the base's the dedup form), and
 * still reading once the base is closed. */
Test(warehouse_stripe, a_twin_reads_the_base_file_with_its_own_options_after_the_base_closes)
{
    sl_wh_schema_t *s = schema();
    sl_wh_writer_t *w = open_writer(16, s);
    sl_error_t err = {0};
    sl_ikjt_t g = group();
    sl_wh_rows_t rows = rows_of(&g, 1);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_append_stripe(w, &rows, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp);
    static uint8_t mem[1 << 16];
    size_t len = fread(mem, 1, sizeof mem, fp);
    fclose(fp);
    cr_assert(len > 0 && len < sizeof mem);
    int32_t want_len[12] = {1, 0, 2, 1, /* a */ 1, 2, 1, 2, /* b */ 0, 1, 0, 1};
    int64_t want_ids[12] = {10, 11, 12, 13, /* a */ 7, 8, 9, 7, 8, 9, /* b */ 5, 5};
    for (int in_mem = 0; in_mem < 2; in_mem++) {
        sl_wh_read_opts_t ro = {.dedup_form = true}, eo = {0};
        sl_wh_reader_t *base = NULL, *twin = NULL;
        if (in_mem)
            cr_assert_eq(sl_wh_reader_open_mem(mem, len, "m.slc", &ro, &base, &err), SL_OK, "%s",
                         err.msg);
        else
            cr_assert_eq(sl_wh_reader_open(path, NULL, &ro, &base, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_wh_reader_set_range(base, 1, 2, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_wh_reader_open_twin(base, &eo, &twin, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_wh_reader_footer_checksum(twin), sl_wh_reader_footer_checksum(base));
        sl_wh_reader_close(base);
        const sl_wh_rows_t *out = NULL;
        cr_assert_eq(sl_wh_reader_next(twin, &out, &err), SL_OK, "%s", err.msg);
        cr_assert_not_null(out);
        cr_assert_eq(out->stripe, 1, "the base's range: stripe 1 first");
        const sl_kjt_t *k = &out->batch.sparse;
        cr_assert_eq(out->batch.num_groups, 0, "the twin's own options: expanded");
        cr_assert_eq(k->num_keys, 3);
        cr_assert_eq(k->num_values, 12);
        cr_assert_arr_eq(k->lengths, want_len, sizeof want_len);
        cr_assert_arr_eq(k->values, want_ids, sizeof want_ids);
        cr_assert_eq(sl_wh_reader_next(twin, &out, &err), SL_OK, "%s", err.msg);
        cr_assert_null(out, "the range ends after stripe 1");
        sl_wh_reader_close(twin);
    }
    sl_wh_schema_destroy(s);
}

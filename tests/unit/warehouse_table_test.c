/* Warehouse tables: create/open, Hive partitions and their listing, pruning
 * with filters, splits (every stripe exactly once) and split readers, cat,
 * inspect and verify of a clean table. */
#include "warehouse_testdata.h"

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

TestSuite(warehouse_table, .init = setup, .fini = teardown);

static sl_wh_schema_t *partitioned_schema(void)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "ds", &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "region", &err), SL_OK);
    return s;
}

static const struct {
    const char *partition, *file;
    uint32_t from, to; /* model rows */
} layout[] = {
    {"ds=2026-01-01/region=eu", "part-0.slc", 0, 700},
    {"ds=2026-01-01/region=eu", "part-1.slc", 700, 1000},
    {"ds=2026-01-01/region=us", "part-0.slc", 1000, 1450},
    {"ds=2026-01-02/region=eu", "part-0.slc", 1450, 2400},
    {"ds=2026-02-01/region=eu", "part-0.slc", 2400, 2500},
};
#define NLAYOUT (sizeof layout / sizeof *layout)

/* A table of 2500 model rows spread over four partitions, 200-row stripes. */
static void make_table(td_rows_t *m, const char *seed_name)
{
    td_spec_t spec = {2500, 8, 10, false, 0.25, tu_seed(seed_name)};
    td_generate(&spec, m);
    sl_wh_schema_t *s = partitioned_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_create(dir, s, &err), SL_OK, "%s", err.msg);
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_num_partitions(t), 0);
    sl_wh_writer_opts_t o = td_opts(200);
    for (size_t i = 0; i < NLAYOUT; i++) {
        sl_wh_writer_t *w;
        cr_assert_eq(sl_wh_table_writer_open(t, layout[i].partition, layout[i].file, &o, &w, &err),
                     SL_OK, "%s", err.msg);
        td_append_rows(w, m, layout[i].from, layout[i].to);
        cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    }
    sl_wh_table_close(t);
    sl_wh_schema_destroy(s);
}

Test(warehouse_table, create_open_list)
{
    td_rows_t m;
    make_table(&m, "create_open_list");
    sl_error_t err = {0};
    sl_wh_table_t *t;
    /* markers and temporary files are not data */
    char p[4200];
    snprintf(p, sizeof p, "%s/_SUCCESS", dir);
    td_write_all(p, "", 0);
    snprintf(p, sizeof p, "%s/ds=2026-01-01/region=eu/.part-9.slc.tmp", dir);
    td_write_all(p, "junk", 4);
    snprintf(p, sizeof p, "%s/ds=2026-01-01/region=eu/notes.txt", dir);
    td_write_all(p, "junk", 4);
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(sl_wh_table_dir(t), dir);
    cr_assert_eq(sl_wh_schema_num_partition_keys(sl_wh_table_schema(t)), 2);
    cr_assert_eq(sl_wh_table_num_partitions(t), 4);
    const char *names[] = {"ds=2026-01-01/region=eu", "ds=2026-01-01/region=us",
                           "ds=2026-01-02/region=eu", "ds=2026-02-01/region=eu"};
    uint32_t files[] = {2, 1, 1, 1};
    for (uint32_t i = 0; i < 4; i++) {
        const sl_wh_partition_t *pt = sl_wh_table_partition(t, i);
        cr_assert_str_eq(pt->name, names[i]);
        cr_assert_eq(pt->num_keys, 2);
        cr_assert_str_eq(pt->keys[0], "ds");
        cr_assert_str_eq(pt->keys[1], "region");
        cr_assert_eq(pt->num_files, files[i]);
    }
    const sl_wh_partition_t *p0 = sl_wh_table_partition(t, 0);
    cr_assert_str_eq(p0->values[0], "2026-01-01");
    cr_assert_str_eq(p0->values[1], "eu");
    cr_assert_str_eq(p0->files[0], "ds=2026-01-01/region=eu/part-0.slc");
    cr_assert_str_eq(p0->files[1], "ds=2026-01-01/region=eu/part-1.slc");
    cr_assert_null(sl_wh_table_partition(t, 4));

    /* writers refuse names outside the rules */
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(0);
    cr_assert_eq(sl_wh_table_writer_open(t, "ds=2026-01-01", "x.slc", &o, &w, &err),
                 SL_ERR_INVALID);
    cr_assert_eq(sl_wh_table_writer_open(t, "ds=2026-01-01/region=eu", "x.parquet", &o, &w, &err),
                 SL_ERR_INVALID);
    cr_assert_eq(sl_wh_table_writer_open(t, "ds=2026-01-01/region=eu", "a/x.slc", &o, &w, &err),
                 SL_ERR_INVALID);
    cr_assert_eq(sl_wh_table_writer_open(t, "ds=2026-01-01/region=eu", ".x.slc", &o, &w, &err),
                 SL_ERR_INVALID);
    /* the same file again is refused; another schema is refused */
    cr_assert_eq(sl_wh_table_writer_open(t, "ds=2026-01-01/region=eu", "part-0.slc", &o, &w, &err),
                 SL_ERR_INVALID);
    sl_wh_table_close(t);
    sl_wh_schema_t *s = partitioned_schema(), *other = td_schema();
    cr_assert_eq(sl_wh_table_create(dir, s, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_create(dir, other, &err), SL_ERR_INVALID);
    sl_wh_schema_destroy(s);
    sl_wh_schema_destroy(other);

    /* a directory that is no partition, or at the wrong place, stops open */
    snprintf(p, sizeof p, "%s/ds=2026-03-01", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/ds=2026-03-01/stray.slc", dir);
    td_write_all(p, "x", 1);
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "data file 'ds=2026-03-01/stray.slc' is outside a partition") != NULL,
              "%s", err.msg);
    unlink(p);
    snprintf(p, sizeof p, "%s/ds=2026-03-01/junk", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "directory 'ds=2026-03-01/junk' is not a KEY=VALUE partition") !=
                  NULL,
              "%s", err.msg);
    snprintf(p, sizeof p, "%s/nope", dir);
    cr_assert_eq(sl_wh_table_open(p, NULL, &t, &err), SL_ERR_NOT_FOUND);
    td_free(&m);
}

/* Read every split; each model row must come back exactly once. */
static uint64_t read_splits(const sl_wh_table_t *t, const sl_wh_splits_t *sp, const td_rows_t *m,
                            char *seen)
{
    sl_error_t err = {0};
    uint64_t rows = 0;
    for (uint32_t i = 0; i < sp->count; i++) {
        const sl_wh_split_t *s = &sp->items[i];
        sl_wh_reader_t *r;
        cr_assert_eq(sl_wh_reader_open_split(t, s, NULL, &r, &err), SL_OK, "%s", err.msg);
        const sl_wh_rows_t *x;
        uint64_t n = 0, expect_first = s->first_row;
        for (;;) {
            cr_assert_eq(sl_wh_reader_next(r, &x, &err), SL_OK, "%s", err.msg);
            if (x == NULL) break;
            cr_assert_str_eq(x->file, s->path);
            cr_assert_eq(x->first_row, expect_first);
            expect_first += x->batch.batch_size;
            td_check_rows(x, m);
            for (uint32_t k = 0; k < x->batch.batch_size; k++) {
                int64_t id = x->batch.sample_ids[k] - 1000;
                cr_assert_eq(seen[id], 0, "row %lld read twice", (long long)id);
                seen[id] = 1;
            }
            n += x->batch.batch_size;
        }
        cr_assert_eq(n, s->num_rows);
        rows += n;
        sl_wh_reader_close(r);
    }
    return rows;
}

Test(warehouse_table, splits_cover_every_stripe_once)
{
    td_rows_t m;
    make_table(&m, "splits_cover_every_stripe_once");
    sl_error_t err = {0};
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK, "%s", err.msg);
    for (uint32_t per = 1; per <= 4; per++) {
        sl_wh_splits_t *sp;
        cr_assert_eq(sl_wh_table_splits(t, NULL, per, &sp, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sp->files, NLAYOUT);
        cr_assert_eq(sp->rows, 2500);
        /* per file: stripes [0, n) cut into consecutive ranges of `per` */
        uint32_t want = 0;
        for (size_t i = 0; i < NLAYOUT; i++) {
            uint32_t stripes = (layout[i].to - layout[i].from + 199) / 200;
            want += (stripes + per - 1) / per;
        }
        cr_assert_eq(sp->count, want, "per %u", per);
        for (uint32_t i = 0; i < sp->count; i++) {
            const sl_wh_split_t *s = &sp->items[i];
            bool first_of_file = i == 0 || strcmp(sp->items[i - 1].path, s->path) != 0;
            if (first_of_file)
                cr_assert_eq(s->stripe_begin, 0);
            else
                cr_assert_eq(s->stripe_begin, sp->items[i - 1].stripe_end);
            cr_assert(s->stripe_end > s->stripe_begin && s->stripe_end - s->stripe_begin <= per);
            cr_assert_eq(s->first_row, (uint64_t)s->stripe_begin * 200);
            cr_assert(s->bytes > 0);
        }
        char *seen = calloc(m.n, 1);
        cr_assert_eq(read_splits(t, sp, &m, seen), 2500);
        for (uint32_t i = 0; i < m.n; i++)
            cr_assert_eq(seen[i], 1);
        free(seen);
        /* splits outlive the table they were cut from */
        if (per == 4) {
            sl_wh_table_close(t);
            cr_assert_str_eq(sp->items[0].path, "ds=2026-01-01/region=eu/part-0.slc");
            cr_assert_str_eq(sp->items[0].partition, "ds=2026-01-01/region=eu");
            t = NULL;
        }
        sl_wh_splits_destroy(sp);
    }
    td_free(&m);
}

Test(warehouse_table, pruning)
{
    td_rows_t m;
    make_table(&m, "pruning");
    sl_error_t err = {0};
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK, "%s", err.msg);
    struct {
        const char *filter;
        uint64_t rows;
        uint32_t files;
    } cases[] = {
        {"ds>=2026-01-02", 1050, 2}, {"ds<2026-02-01,region=eu", 1950, 3},
        {"region=us", 450, 1},       {"ds=2026-01-01", 1450, 3},
        {"ds>2026-02-01", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sl_wh_filter_t *f;
        cr_assert_eq(sl_wh_filter_parse(cases[i].filter, NULL, &f, &err), SL_OK);
        sl_wh_splits_t *sp;
        cr_assert_eq(sl_wh_table_splits(t, f, 2, &sp, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sp->rows, cases[i].rows, "%s", cases[i].filter);
        cr_assert_eq(sp->files, cases[i].files, "%s", cases[i].filter);
        char *seen = calloc(m.n, 1);
        cr_assert_eq(read_splits(t, sp, &m, seen), cases[i].rows);
        /* exactly the rows of the matching partitions */
        for (size_t l = 0; l < NLAYOUT; l++) {
            const sl_wh_partition_t *pt = NULL;
            for (uint32_t p = 0; p < sl_wh_table_num_partitions(t); p++)
                if (strcmp(sl_wh_table_partition(t, p)->name, layout[l].partition) == 0)
                    pt = sl_wh_table_partition(t, p);
            bool in = sl_wh_filter_match(f, pt);
            for (uint32_t r = layout[l].from; r < layout[l].to; r++)
                cr_assert_eq(seen[r], in);
        }
        free(seen);
        sl_wh_splits_destroy(sp);
        sl_wh_filter_destroy(f);
    }
    sl_wh_table_close(t);
    td_free(&m);
}

Test(warehouse_table, unpartitioned_table_and_split_mismatch)
{
    td_spec_t spec = {900, 8, 10, false, 0.25, tu_seed("unpartitioned_table_and_split_mismatch")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_create(dir, s, &err), SL_OK);
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK);
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(300);
    cr_assert_eq(sl_wh_table_writer_open(t, NULL, "only.slc", &o, &w, &err), SL_OK, "%s", err.msg);
    td_append_rows(w, &m, 0, m.n);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK);
    sl_wh_table_close(t);
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK);
    cr_assert_eq(sl_wh_table_num_partitions(t), 1);
    cr_assert_str_eq(sl_wh_table_partition(t, 0)->name, "");
    cr_assert_str_eq(sl_wh_table_partition(t, 0)->files[0], "only.slc");
    sl_wh_splits_t *sp;
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK);
    cr_assert_eq(sp->count, 3);
    /* a split that no longer matches its file is refused */
    sl_wh_split_t bad = sp->items[1];
    bad.first_row = 5;
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open_split(t, &bad, NULL, &r, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "only.slc: split stripes [1, 2) from row 5 do not match") != NULL,
              "%s", err.msg);
    bad = sp->items[2];
    bad.stripe_end = 4;
    cr_assert_eq(sl_wh_reader_open_split(t, &bad, NULL, &r, &err), SL_ERR_INVALID);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    sl_wh_schema_destroy(s);
    td_free(&m);
}

Test(warehouse_table, cat_inspect_verify)
{
    td_rows_t m;
    make_table(&m, "cat_inspect_verify");
    sl_error_t err = {0};
    /* cat: JSON lines in table order, as many as asked */
    char *out = NULL;
    size_t cap = 0;
    FILE *f = open_memstream(&out, &cap);
    sl_wh_filter_t *flt;
    cr_assert_eq(sl_wh_filter_parse("region=us", NULL, &flt, &err), SL_OK);
    const char *feats[] = {"u_geo", "d2", "w_cat"};
    sl_wh_cat_opts_t co = {feats, 3, flt, 3, NULL, NULL};
    uint64_t n;
    cr_assert_eq(sl_wh_cat_table(dir, &co, f, &n, &err), SL_OK, "%s", err.msg);
    fclose(f);
    cr_assert_eq(n, 3);
    /* each line parsed back equals the model row, float for float */
    char *line = out;
    for (uint32_t i = 1000; i < 1003; i++) {
        char *nl = strchr(line, '\n');
        cr_assert_not_null(nl);
        *nl = '\0';
        cr_assert_null(strchr(line, ' '), "not compact: %s", line);
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        cr_assert_not_null(j, "%s: %s", line, je.text);
        cr_assert_eq(json_integer_value(json_object_get(j, "sample_id")), m.sid[i]);
        cr_assert_eq(json_integer_value(json_object_get(j, "session_id")), m.sess[i]);
        cr_assert_eq(json_integer_value(json_object_get(j, "ts")), m.ts[i]);
        for (int t = 0; t < TD_T; t++)
            cr_assert_eq((float)json_number_value(
                             json_object_get(json_object_get(j, "labels"), td_labels[t])),
                         m.labels[i * TD_T + t]);
        json_t *dense = json_object_get(j, "dense");
        float d2 = m.dense[i * TD_D + 2];
        cr_assert_eq(json_object_size(dense), d2 == d2 ? 1 : 0);
        if (d2 == d2) cr_assert_eq((float)json_number_value(json_object_get(dense, "d2")), d2);
        json_t *geo = json_object_get(json_object_get(j, "sparse"), "u_geo");
        cr_assert_eq(json_array_size(geo), m.len[3][i]);
        for (uint32_t k = 0; k < m.len[3][i]; k++)
            cr_assert_eq(json_integer_value(json_array_get(geo, k)), m.ids[3][m.off[3][i] + k]);
        json_t *wc = json_object_get(json_object_get(j, "weighted"), "w_cat");
        cr_assert_eq(json_array_size(json_object_get(wc, "ids")), m.len[2][i]);
        for (uint32_t k = 0; k < m.len[2][i]; k++) {
            cr_assert_eq(json_integer_value(json_array_get(json_object_get(wc, "ids"), k)),
                         m.ids[2][m.off[2][i] + k]);
            cr_assert_eq((float)json_real_value(json_array_get(json_object_get(wc, "weights"), k)),
                         m.w[2][m.off[2][i] + k]);
        }
        cr_assert_eq(json_object_size(j), 7);
        json_decref(j);
        line = nl + 1;
    }
    cr_assert_str_eq(line, "");
    free(out);
    sl_wh_filter_destroy(flt);
    /* all rows, counted */
    f = fopen("/dev/null", "w");
    cr_assert_eq(sl_wh_cat_table(dir, NULL, f, &n, &err), SL_OK, "%s", err.msg);
    fclose(f);
    cr_assert_eq(n, 2500);

    /* inspect */
    sl_wh_inspect_t *ins;
    cr_assert_eq(sl_wh_inspect_table(dir, NULL, NULL, &ins, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ins->rows, 2500);
    cr_assert_eq(ins->num_files, 5);
    cr_assert_eq(ins->num_partitions, 4);
    cr_assert_eq(ins->partitions[0].rows, 1000);
    cr_assert_eq(ins->partitions[0].files, 2);
    cr_assert_eq(ins->stripes, 4 + 2 + 3 + 5 + 1);
    cr_assert_eq(ins->files[3].stripe_rows[4], 150);
    cr_assert_eq(ins->num_columns, 3 + TD_T + TD_F);
    cr_assert_str_eq(ins->columns[0].name, "sample_id");
    cr_assert_str_eq(ins->columns[3].name, "click");
    cr_assert_str_eq(ins->columns[5].name, "d0");
    cr_assert_str_eq(ins->columns[5].kind, "dense");
    cr_assert_eq(ins->columns[0].values, 2500);
    cr_assert_eq(ins->columns[0].raw_bytes, 2500 * 8);
    uint64_t ids = 0, raw = 0, stored = 0;
    for (uint32_t i = 0; i < 2500; i++)
        ids += m.len[0][i];
    cr_assert_eq(ins->columns[6].values, ids); /* item */
    cr_assert_eq(ins->columns[6].raw_bytes, ids * 8 + 2500 * 4);
    for (uint32_t i = 0; i < ins->num_columns; i++) {
        raw += ins->columns[i].raw_bytes;
        stored += ins->columns[i].stored_bytes;
    }
    cr_assert_eq(raw, ins->raw_bytes);
    cr_assert_eq(stored, ins->stored_bytes);
    cr_assert(ins->file_bytes > ins->stored_bytes);
    cr_assert(ins->compression_ratio > 1.0);
    cr_assert_eq(ins->dedup_ratio, 1.0);
    json_t *j = sl_wh_inspect_to_json(ins, true);
    cr_assert_not_null(j);
    cr_assert_eq(json_integer_value(json_object_get(j, "rows")), 2500);
    cr_assert_eq(json_array_size(json_object_get(j, "files")), 5);
    cr_assert_eq(json_array_size(json_object_get(json_array_get(json_object_get(j, "files"), 0),
                                                 "stripe_rows")),
                 4);
    cr_assert_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(j, "partitions"), 1), "name")),
                     "ds=2026-01-01/region=us");
    json_decref(j);
    sl_wh_inspect_destroy(ins);
    sl_wh_filter_t *f2;
    cr_assert_eq(sl_wh_filter_parse("ds=2026-01-02", NULL, &f2, &err), SL_OK);
    cr_assert_eq(sl_wh_inspect_table(dir, f2, NULL, &ins, &err), SL_OK);
    cr_assert_eq(ins->rows, 950);
    cr_assert_eq(ins->num_partitions, 1);
    sl_wh_inspect_destroy(ins);
    sl_wh_filter_destroy(f2);

    /* verify: clean */
    sl_wh_verify_stats_t st;
    cr_assert_eq(sl_wh_verify_table(dir, NULL, NULL, NULL, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.files, 5);
    cr_assert_eq(st.bad_files, 0);
    cr_assert_eq(st.stripes, 15);
    cr_assert_eq(st.rows, 2500);
    cr_assert_eq(st.problems, 0);
    cr_assert(st.streams >= 15 * (3 + TD_T + TD_D + 2 * TD_S + 1));
    td_free(&m);
}

Test(warehouse_table, inspect_dedup_ratio)
{
    td_spec_t spec = {4000, 16, 20, false, 0.25, tu_seed("inspect_dedup_ratio")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_create(dir, s, &err), SL_OK);
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK);
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(1000);
    sl_dedup_group_spec_t g = {"user", 2, td_user};
    o.num_dedup_groups = 1;
    o.dedup_groups = &g;
    cr_assert_eq(sl_wh_table_writer_open(t, "", "d.slc", &o, &w, &err), SL_OK, "%s", err.msg);
    td_append_rows(w, &m, 0, m.n);
    sl_wh_write_stats_t ws;
    cr_assert_eq(sl_wh_writer_close(w, &ws, &err), SL_OK);
    sl_wh_table_close(t);
    sl_wh_inspect_t *ins;
    cr_assert_eq(sl_wh_inspect_table(dir, NULL, NULL, &ins, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ins->num_groups, 1);
    cr_assert_str_eq(ins->groups[0].name, "user");
    cr_assert_eq(ins->groups[0].rows, 4000);
    cr_assert_eq(ins->groups[0].unique_rows, ws.dedup_unique);
    cr_assert(ins->dedup_ratio > 4.0, "dedup ratio %g", ins->dedup_ratio);
    cr_assert_eq(ins->dedup_ratio, 4000.0 / (double)ws.dedup_unique);
    cr_assert_eq(ins->num_columns, 3 + TD_T + TD_F + 1);
    cr_assert_str_eq(ins->columns[ins->num_columns - 1].kind, "inverse");
    cr_assert_eq(ins->columns[ins->num_columns - 1].values, 4000);
    sl_wh_verify_stats_t st;
    cr_assert_eq(sl_wh_verify_table(dir, NULL, NULL, NULL, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.rows, 4000);
    sl_wh_inspect_destroy(ins);
    sl_wh_schema_destroy(s);
    td_free(&m);
}

/* Warehouse writer -> reader: round trips of every column kind (missing
 * dense values, empty and weighted id lists, several stripes, both input
 * APIs, both codecs), projection (only the requested streams are read),
 * session clustering, storage dedup (expanded and IKJT forms, smaller
 * files), atomic writes. Randomised tests print their seed; replay with
 * SLUICE_TEST_SEED. */
#include "warehouse_testdata.h"

#include <dirent.h>

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

TestSuite(warehouse_rw, .init = setup, .fini = teardown);

static char *path_in(const char *name)
{
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 4096, "%s/%s", dir, name);
    return p;
}

Test(warehouse_rw, tiny_file_exact_values)
{
    /* two rows by hand: every value checked literally */
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(0);
    cr_assert_eq(sl_wh_writer_open(path_in("t.slc"), s, &o, &w, &err), SL_OK, "%s", err.msg);
    int64_t item0[] = {5, 6}, wcat0[] = {-3}, geo0[] = {77};
    float wcat0w[] = {0.5f};
    int64_t hist1[] = {1, 2, 3}, wcat1[] = {9, 10};
    const int64_t *hist0 = NULL, *item1 = NULL, *geo1 = NULL;
    float labels0[] = {1.0f, 0.25f}, labels1[] = {0.0f, -2.0f};
    float dense0[] = {1.5f, NAN, -7.0f}, dense1[] = {NAN, NAN, 3.0f};
    sl_wh_idlist_t l0[] = {{2, item0, NULL}, {0, hist0, NULL}, {1, wcat0, wcat0w}, {1, geo0, NULL}};
    sl_wh_idlist_t l1[] = {{0, item1, NULL}, {3, hist1, NULL}, {2, wcat1, NULL}, {0, geo1, NULL}};
    sl_wh_row_t r0 = {11, 100, 5000, labels0, dense0, l0};
    sl_wh_row_t r1 = {12, 101, 4000, labels1, dense1, l1};
    cr_assert_eq(sl_wh_writer_append_row(w, &r0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_append_row(w, &r1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_rows(w), 2);
    sl_wh_write_stats_t st;
    cr_assert_eq(sl_wh_writer_close(w, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(st.rows, 2);
    cr_assert_eq(st.stripes, 1);
    struct stat sb;
    cr_assert_eq(stat(path_in("t.slc"), &sb), 0);
    cr_assert_eq((uint64_t)sb.st_size, st.file_bytes);

    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path_in("t.slc"), "t.slc", NULL, &r, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_wh_reader_num_stripes(r), 1);
    const sl_wh_rows_t *rows;
    cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK, "%s", err.msg);
    cr_assert_not_null(rows);
    const sl_batch_t *b = &rows->batch;
    cr_assert_str_eq(rows->file, "t.slc");
    cr_assert_eq(b->batch_size, 2);
    cr_assert_eq(b->sample_ids[0], 11);
    cr_assert_eq(b->sample_ids[1], 12);
    cr_assert_eq(rows->session_ids[1], 101);
    cr_assert_eq(rows->timestamps[0], 5000);
    float want_labels[] = {1.0f, 0.25f, 0.0f, -2.0f};
    cr_assert_arr_eq(b->labels.data, want_labels, sizeof want_labels);
    cr_assert_eq(b->dense.data[0], 1.5f);
    cr_assert(isnan(b->dense.data[1]));
    cr_assert_eq(b->dense.data[2], -7.0f);
    cr_assert(isnan(b->dense.data[3]) && isnan(b->dense.data[4]));
    cr_assert_eq(b->dense.data[5], 3.0f);
    int32_t want_len[] = {2, 0, 0, 3, 1, 2, 1, 0};
    cr_assert_arr_eq(b->sparse.lengths, want_len, sizeof want_len);
    int64_t want_vals[] = {5, 6, 1, 2, 3, -3, 9, 10, 77};
    cr_assert_eq(b->sparse.num_values, 9);
    cr_assert_arr_eq(b->sparse.values, want_vals, sizeof want_vals);
    float want_w[] = {1, 1, 1, 1, 1, 0.5f, 1, 1, 1};
    cr_assert_arr_eq(b->sparse.weights, want_w, sizeof want_w);
    cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK);
    cr_assert_null(rows);

    /* the same rows as JSON lines */
    json_t *j = sl_wh_row_to_json(rows == NULL ? &(sl_wh_rows_t){0} : rows, 0);
    cr_assert_null(j); /* no rows */
    cr_assert_eq(sl_wh_reader_read_stripe(r, 0, &rows, &err), SL_OK);
    char *line = NULL;
    size_t cap = 0;
    FILE *mem = open_memstream(&line, &cap);
    for (uint32_t k = 0; k < 2; k++) {
        j = sl_wh_row_to_json(rows, k);
        cr_assert_not_null(j);
        cr_assert_eq(sl_wh_json_dump(j, mem), 0);
        json_decref(j);
    }
    fclose(mem);
    cr_assert_str_eq(line,
                     "{\"sample_id\":11,\"session_id\":100,\"ts\":5000,"
                     "\"labels\":{\"click\":1.0,\"like\":0.25},\"dense\":{\"d0\":1.5,\"d2\":-7.0},"
                     "\"sparse\":{\"item\":[5,6],\"u_hist\":[],\"u_geo\":[77]},"
                     "\"weighted\":{\"w_cat\":{\"ids\":[-3],\"weights\":[0.5]}}}\n"
                     "{\"sample_id\":12,\"session_id\":101,\"ts\":4000,"
                     "\"labels\":{\"click\":0.0,\"like\":-2.0},\"dense\":{\"d2\":3.0},"
                     "\"sparse\":{\"item\":[],\"u_hist\":[1,2,3],\"u_geo\":[]},"
                     "\"weighted\":{\"w_cat\":{\"ids\":[9,10],\"weights\":[1.0,1.0]}}}\n");
    free(line);
    sl_wh_reader_close(r);
    sl_wh_schema_destroy(s);
}

static void round_trip(uint32_t rows, uint32_t stripe_rows, sl_wh_codec_t codec, bool batch_api,
                       const char *name)
{
    td_spec_t spec = {rows, 8, 20, true, 0.3, tu_seed(name)};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(stripe_rows);
    o.codec = codec;
    sl_error_t err = {0};
    if (!batch_api) {
        sl_wh_write_stats_t st = td_write(path_in("a.slc"), &m, &o);
        cr_assert_eq(st.rows, rows);
        cr_assert_eq(st.stripes, (rows + stripe_rows - 1) / stripe_rows);
    } else {
        sl_wh_schema_t *s = td_schema();
        sl_wh_writer_t *w;
        cr_assert_eq(sl_wh_writer_open(path_in("a.slc"), s, &o, &w, &err), SL_OK, "%s", err.msg);
        /* uneven batches that straddle stripe boundaries, mixed with single rows */
        uint32_t at = 0;
        uint64_t st = spec.seed;
        while (at < rows) {
            uint32_t n = 1 + (uint32_t)tu_below(&st, 2 * stripe_rows);
            if (n > rows - at) n = rows - at;
            if (tu_below(&st, 4) == 0)
                td_append_rows(w, &m, at, at + n);
            else
                td_append_batch(w, &m, at, at + n);
            at += n;
        }
        cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
        sl_wh_schema_destroy(s);
    }
    cr_assert_eq(td_check_file(path_in("a.slc"), &m), rows);
    /* stripes are the writer's size, in order, and rows keep their order */
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path_in("a.slc"), NULL, NULL, &r, &err), SL_OK);
    for (uint32_t s = 0; s < sl_wh_reader_num_stripes(r); s++) {
        sl_wh_stripe_info_t info;
        cr_assert_eq(sl_wh_reader_stripe_info(r, s, &info), SL_OK);
        cr_assert_eq(info.first_row, (uint64_t)s * stripe_rows);
        cr_assert_eq(info.rows,
                     s + 1 < sl_wh_reader_num_stripes(r) ? stripe_rows : rows - s * stripe_rows);
        const sl_wh_rows_t *x;
        cr_assert_eq(sl_wh_reader_read_stripe(r, s, &x, &err), SL_OK, "%s", err.msg);
        for (uint32_t k = 0; k < x->batch.batch_size; k++)
            cr_assert_eq(x->batch.sample_ids[k], 1000 + (int64_t)(info.first_row + k));
        /* the footer's estimate is what a read of every column holds: the
         * batch's tensors, and the session ids and timestamps it does not
         * carry (8 bytes a row each) */
        const sl_batch_t *b = &x->batch;
        uint64_t B = b->batch_size, V = b->sparse.num_values;
        uint64_t want = 8 * V + (b->sparse.weights ? 4 * V : 0) + 4 * B * b->sparse.num_keys +
                        4 * B * (b->dense.cols + b->labels.cols) + 8 * B + 16 * B;
        cr_assert_eq(info.decoded_bytes, want, "stripe %u: %llu, expected %llu", s,
                     (unsigned long long)info.decoded_bytes, (unsigned long long)want);
    }
    sl_wh_reader_close(r);
    td_free(&m);
}

Test(warehouse_rw, round_trip_rows_zstd_many_stripes)
{
    round_trip(5000, 777, SL_WH_CODEC_ZSTD, false, "round_trip_rows_zstd_many_stripes");
}

Test(warehouse_rw, round_trip_rows_codec_none)
{
    round_trip(3000, 1024, SL_WH_CODEC_NONE, false, "round_trip_rows_codec_none");
}

Test(warehouse_rw, round_trip_batches)
{
    round_trip(6000, 1000, SL_WH_CODEC_ZSTD, true, "round_trip_batches");
}

Test(warehouse_rw, round_trip_one_stripe_of_one_row)
{
    round_trip(1, 65536, SL_WH_CODEC_ZSTD, false, "round_trip_one_stripe_of_one_row");
}

Test(warehouse_rw, dense_missing_patterns)
{
    /* none, few, half, most and all dense values missing; a row count that
     * is no multiple of 8 so the bitmap has a partial last byte */
    const double missing[] = {0.0, 0.02, 0.5, 0.9, 1.0};
    uint64_t seed = tu_seed("dense_missing_patterns");
    for (size_t k = 0; k < sizeof missing / sizeof *missing; k++) {
        td_spec_t spec = {1003, 8, 5, true, missing[k], seed + k};
        td_rows_t m;
        td_generate(&spec, &m);
        for (int codec = 0; codec < 2; codec++) {
            sl_wh_writer_opts_t o = td_opts(501);
            o.codec = codec ? SL_WH_CODEC_ZSTD : SL_WH_CODEC_NONE;
            char name[32];
            snprintf(name, sizeof name, "m%zu_%d.slc", k, codec);
            td_write(path_in(name), &m, &o);
            td_check_file(path_in(name), &m);
        }
        td_free(&m);
    }
}

Test(warehouse_rw, batch_defaults)
{
    /* a batch with one sparse key and nothing else: the other features are
     * missing / empty, labels 0, sample ids count the file's rows, session
     * ids and timestamps 0 */
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(2);
    cr_assert_eq(sl_wh_writer_open(path_in("b.slc"), s, &o, &w, &err), SL_OK);
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_wh_rows_t in;
    memset(&in, 0, sizeof in);
    in.batch.batch_size = 3;
    const char *keys[] = {"u_geo"};
    cr_assert_eq(sl_kjt_init(&in.batch.sparse, arena, 1, keys, 3, 2, false), SL_OK);
    int32_t len[] = {1, 0, 1};
    int64_t vals[] = {42, 43};
    memcpy(in.batch.sparse.lengths, len, sizeof len);
    memcpy(in.batch.sparse.values, vals, sizeof vals);
    cr_assert_eq(sl_wh_writer_append(w, &in, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_append(w, &in, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_rows(w), 6);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    sl_arena_destroy(arena);
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path_in("b.slc"), NULL, NULL, &r, &err), SL_OK);
    cr_assert_eq(sl_wh_reader_num_stripes(r), 3);
    const sl_wh_rows_t *x;
    for (uint32_t st = 0; st < 3; st++) {
        cr_assert_eq(sl_wh_reader_next(r, &x, &err), SL_OK, "%s", err.msg);
        const sl_batch_t *b = &x->batch;
        for (uint32_t k = 0; k < 2; k++) {
            uint32_t row = st * 2 + k;
            cr_assert_eq(b->sample_ids[k], (int64_t)row);
            cr_assert_eq(x->session_ids[k], 0);
            cr_assert_eq(x->timestamps[k], 0);
            cr_assert_eq(b->labels.data[k * TD_T], 0.0f);
            for (int c = 0; c < TD_D; c++)
                cr_assert(isnan(b->dense.data[k * TD_D + c]));
            for (int f = 0; f < TD_S; f++)
                cr_assert_eq(b->sparse.lengths[f * 2 + k], f == 3 ? len[row % 3] : 0);
        }
        uint64_t want = (uint64_t)(len[(st * 2) % 3] + len[(st * 2 + 1) % 3]);
        cr_assert_eq(b->sparse.num_values, want);
    }
    sl_wh_reader_close(r);
    sl_wh_schema_destroy(s);
}

Test(warehouse_rw, empty_file)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(0);
    cr_assert_eq(sl_wh_writer_open(path_in("e.slc"), s, &o, &w, &err), SL_OK);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path_in("e.slc"), NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_reader_num_stripes(r), 0);
    cr_assert_eq(sl_wh_reader_num_rows(r), 0);
    const sl_wh_rows_t *rows = (void *)1;
    cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK);
    cr_assert_null(rows);
    cr_assert(sl_wh_schema_equal(sl_wh_reader_schema(r), s));
    sl_wh_reader_close(r);
    sl_wh_schema_destroy(s);
}

Test(warehouse_rw, encodings_and_codecs_chosen_per_stream)
{
    /* all-equal lengths need no bytes; incompressible ids are stored; a forced
     * store_kinds bit stores ids even when zstd would help */
    uint32_t n = 4096;
    td_spec_t spec = {n, 4, 10, false, 0.0, tu_seed("encodings_and_codecs_chosen_per_stream")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(n);
    td_write(path_in("z.slc"), &m, &o);
    o.store_kinds = 1u << SL_WH_STREAM_IDS;
    td_write(path_in("s.slc"), &m, &o);
    td_check_file(path_in("z.slc"), &m);
    td_check_file(path_in("s.slc"), &m);
    sl_error_t err = {0};
    sl_wh_table_t *t;
    sl_wh_schema_t *s = td_schema();
    cr_assert_eq(sl_wh_table_create(dir, s, &err), SL_OK, "%s", err.msg);
    sl_wh_schema_destroy(s);
    sl_wh_inspect_t *z, *st;
    unlink(path_in("s.slc"));
    cr_assert_eq(sl_wh_inspect_table(dir, NULL, NULL, &z, &err), SL_OK, "%s", err.msg);
    (void)t;
    sl_wh_column_bytes_t *geo = NULL, *hist = NULL;
    for (uint32_t i = 0; i < z->num_columns; i++) {
        if (strcmp(z->columns[i].name, "u_geo") == 0) geo = &z->columns[i];
        if (strcmp(z->columns[i].name, "u_hist") == 0) hist = &z->columns[i];
    }
    cr_assert_not_null(geo);
    /* u_geo: lengths all 1 (0 bytes), ids < 300 (2 bytes each before zstd) */
    cr_assert_eq(geo->values, n);
    cr_assert_eq(geo->raw_bytes, (uint64_t)n * 4 + (uint64_t)n * 8);
    cr_assert(geo->stored_bytes <= (uint64_t)n * 2, "u_geo stored %llu",
              (unsigned long long)geo->stored_bytes);
    cr_assert_not_null(hist);
    uint64_t hist_z = hist->stored_bytes;
    sl_wh_inspect_destroy(z);
    /* the same file with ids stored: u_hist's 63-bit ids are stored as they
     * are; zstd had found the lists repeated within sessions */
    unlink(path_in("z.slc"));
    td_write(path_in("s.slc"), &m, &o);
    cr_assert_eq(sl_wh_inspect_table(dir, NULL, NULL, &st, &err), SL_OK, "%s", err.msg);
    bool found = false;
    for (uint32_t i = 0; i < st->num_columns; i++)
        if (strcmp(st->columns[i].name, "u_hist") == 0) {
            uint64_t ids = m.off[1][n] * 8;
            cr_assert_geq(st->columns[i].stored_bytes, ids);
            cr_assert_lt(hist_z, ids, "u_hist zstd %llu, ids %llu", (unsigned long long)hist_z,
                         (unsigned long long)ids);
            found = true;
        }
    cr_assert(found);
    sl_wh_inspect_destroy(st);
    td_free(&m);
}

/* Projection: only the requested features' streams are read. */
Test(warehouse_rw, projection_reads_only_requested_streams)
{
    td_spec_t spec = {3000, 8, 20, true, 0.3, tu_seed("projection_reads_only_requested_streams")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(1000);
    td_write(path_in("p.slc"), &m, &o);
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_create(dir, s, &err), SL_OK);
    sl_wh_schema_destroy(s);
    sl_wh_inspect_t *ins;
    cr_assert_eq(sl_wh_inspect_table(dir, NULL, NULL, &ins, &err), SL_OK, "%s", err.msg);
    uint64_t want = 0;
    for (uint32_t i = 0; i < ins->num_columns; i++)
        if (strcmp(ins->columns[i].name, "d0") == 0 || strcmp(ins->columns[i].name, "w_cat") == 0)
            want += ins->columns[i].stored_bytes;
    cr_assert(want > 0);

    const char *feats[] = {"w_cat", "d0"};
    sl_wh_read_opts_t ro = {0};
    ro.features = feats;
    ro.num_features = 2;
    ro.skip_columns =
        SL_WH_COL_SAMPLE_ID | SL_WH_COL_SESSION_ID | SL_WH_COL_TIMESTAMP | SL_WH_COL_LABELS;
    ro.coalesce_gap = SL_WH_GAP_NONE;
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path_in("p.slc"), NULL, &ro, &r, &err), SL_OK, "%s", err.msg);
    const sl_wh_rows_t *rows;
    uint64_t seen = 0;
    for (;;) {
        cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK, "%s", err.msg);
        if (rows == NULL) break;
        const sl_batch_t *b = &rows->batch;
        cr_assert_null(b->sample_ids);
        cr_assert_null(rows->session_ids);
        cr_assert_eq(b->labels.cols, 0);
        cr_assert_eq(b->dense.cols, 1);
        cr_assert_str_eq(b->dense.names[0], "d0");
        cr_assert_eq(b->sparse.num_keys, 1);
        cr_assert_str_eq(b->sparse.keys[0], "w_cat");
        uint64_t at = 0;
        for (uint32_t k = 0; k < b->batch_size; k++) {
            uint64_t i = seen + k; /* not shuffled by the writer: file order */
            cr_assert(td_same_float(b->dense.data[k], m.dense[i * TD_D + 0]));
            cr_assert_eq((uint32_t)b->sparse.lengths[k], m.len[2][i]);
            cr_assert_arr_eq(b->sparse.values + at, m.ids[2] + m.off[2][i], m.len[2][i] * 8);
            cr_assert_arr_eq(b->sparse.weights + at, m.w[2] + m.off[2][i], m.len[2][i] * 4);
            at += m.len[2][i];
        }
        seen += b->batch_size;
    }
    cr_assert_eq(seen, 3000);
    sl_wh_read_stats_t st;
    sl_wh_reader_stats(r, &st);
    cr_assert_eq(st.data_bytes_read, want, "read %llu stripe bytes, the projection holds %llu",
                 (unsigned long long)st.data_bytes_read, (unsigned long long)want);
    cr_assert_eq(st.stripes, 3);
    cr_assert_eq(st.rows, 3000);
    /* w_cat: lengths, ids, weights adjacent -> one read; d0: present + values -> one */
    cr_assert_eq(st.read_calls, 3 /* header, trailer, footer */ + 3 * 2);
    sl_wh_reader_close(r);

    /* a wide gap: everything between the projected streams is read too, in
     * one pread per stripe */
    ro.coalesce_gap = 16u << 20;
    cr_assert_eq(sl_wh_reader_open(path_in("p.slc"), NULL, &ro, &r, &err), SL_OK);
    while (sl_wh_reader_next(r, &rows, &err) == SL_OK && rows != NULL)
        continue;
    sl_wh_reader_stats(r, &st);
    cr_assert_eq(st.read_calls, 3 + 3);
    cr_assert(st.data_bytes_read > want);
    sl_wh_reader_close(r);

    /* an unknown feature is an error naming it */
    const char *bad[] = {"nope"};
    ro.features = bad;
    ro.num_features = 1;
    cr_assert_eq(sl_wh_reader_open(path_in("p.slc"), "p.slc", &ro, &r, &err), SL_ERR_NOT_FOUND);
    cr_assert_str_eq(err.msg, "p.slc: feature 'nope' is not in the schema");
    sl_wh_inspect_destroy(ins);
    td_free(&m);
}

Test(warehouse_rw, clustering_puts_sessions_together)
{
    uint32_t n = 4000, stripe = 1000;
    td_spec_t spec = {n, 10, 20, true, 0.1, tu_seed("clustering_puts_sessions_together")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(stripe);
    o.cluster_sessions = true;
    td_write(path_in("c.slc"), &m, &o);
    td_check_file(path_in("c.slc"), &m); /* every row, exactly once */
    sl_error_t err = {0};
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path_in("c.slc"), NULL, NULL, &r, &err), SL_OK);
    cr_assert(sl_wh_reader_session_clustered(r));
    const sl_wh_rows_t *rows;
    for (uint32_t s = 0; s < 4; s++) {
        cr_assert_eq(sl_wh_reader_read_stripe(r, s, &rows, &err), SL_OK);
        /* within the stripe: (session, ts, arrival) ascending, and a stripe
         * holds exactly the rows that arrived in its window */
        for (uint32_t k = 0; k < rows->batch.batch_size; k++) {
            int64_t i = rows->batch.sample_ids[k] - 1000;
            cr_assert(i >= (int64_t)s * stripe && i < (int64_t)(s + 1) * stripe);
            if (k == 0) continue;
            int64_t a = rows->session_ids[k - 1], b = rows->session_ids[k];
            cr_assert(a < b ||
                          (a == b && (rows->timestamps[k - 1] < rows->timestamps[k] ||
                                      (rows->timestamps[k - 1] == rows->timestamps[k] &&
                                       rows->batch.sample_ids[k - 1] < rows->batch.sample_ids[k]))),
                      "stripe %u row %u out of order", s, k);
        }
        /* so each session of the window is one run of adjacent rows */
        uint32_t runs = 0, sessions = 0;
        for (uint32_t k = 0; k < rows->batch.batch_size; k++)
            runs += k == 0 || rows->session_ids[k] != rows->session_ids[k - 1];
        for (uint32_t i = s * stripe; i < (s + 1) * stripe; i++) {
            bool first = true;
            for (uint32_t j = s * stripe; j < i && first; j++)
                first = m.sess[j] != m.sess[i];
            sessions += first;
        }
        cr_assert_eq(runs, sessions);
    }
    sl_wh_reader_close(r);
    td_free(&m);
}

/* Storage dedup: group "user" = {u_hist, u_geo}. */
static const sl_dedup_group_spec_t td_group = {"user", 2, td_user};

Test(warehouse_rw, storage_dedup_round_trip_and_smaller)
{
    uint32_t n = 6000, stripe = 2048;
    td_spec_t spec = {n, 16, 100, true, 0.2, tu_seed("storage_dedup_round_trip_and_smaller")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(stripe);
    sl_wh_write_stats_t raw = td_write(path_in("raw.slc"), &m, &o);
    o.cluster_sessions = true;
    sl_wh_write_stats_t plain = td_write(path_in("plain.slc"), &m, &o);
    o.num_dedup_groups = 1;
    o.dedup_groups = &td_group;
    sl_wh_write_stats_t dd = td_write(path_in("dedup.slc"), &m, &o);
    /* expanded: exactly the rows written */
    td_check_file(path_in("dedup.slc"), &m);
    cr_assert_eq(dd.dedup_rows, n);
    cr_assert(dd.dedup_unique > 0 && dd.dedup_unique < n / 4, "unique %llu",
              (unsigned long long)dd.dedup_unique);
    /* smaller than the same clustered rows without dedup (where zstd already
     * finds the repeats inside its window), and smaller than unclustered rows */
    cr_assert_lt(dd.file_bytes, plain.file_bytes);
    cr_assert_lt(dd.file_bytes, raw.file_bytes);
    /* without compression the saving is the dedup factor on the group's bytes */
    o.codec = SL_WH_CODEC_NONE;
    sl_wh_write_stats_t dd_none = td_write(path_in("dedup_none.slc"), &m, &o);
    o.num_dedup_groups = 0;
    sl_wh_write_stats_t plain_none = td_write(path_in("plain_none.slc"), &m, &o);
    cr_assert(dd_none.file_bytes * 3 < plain_none.file_bytes, "dedup %llu bytes, plain %llu",
              (unsigned long long)dd_none.file_bytes, (unsigned long long)plain_none.file_bytes);
    td_check_file(path_in("dedup_none.slc"), &m);

    /* dedup form: the group comes back as an IKJT whose expansion is the
     * expanded form, and whose inverse indices point at equal rows */
    sl_error_t err = {0};
    sl_wh_reader_t *rx, *rd;
    sl_wh_read_opts_t ro = {0};
    cr_assert_eq(sl_wh_reader_open(path_in("dedup.slc"), NULL, &ro, &rx, &err), SL_OK);
    ro.dedup_form = true;
    cr_assert_eq(sl_wh_reader_open(path_in("dedup.slc"), NULL, &ro, &rd, &err), SL_OK);
    cr_assert_eq(sl_wh_reader_num_groups(rd), 1);
    cr_assert_str_eq(sl_wh_reader_group(rd, 0)->name, "user");
    cr_assert_eq(sl_wh_reader_group(rd, 0)->num_features, 2);
    uint64_t unique = 0;
    for (uint32_t s = 0; s < sl_wh_reader_num_stripes(rd); s++) {
        const sl_wh_rows_t *x, *d;
        cr_assert_eq(sl_wh_reader_read_stripe(rx, s, &x, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_wh_reader_read_stripe(rd, s, &d, &err), SL_OK, "%s", err.msg);
        const sl_batch_t *b = &d->batch;
        cr_assert_eq(sl_batch_validate(b, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(b->num_groups, 1);
        cr_assert_eq(b->sparse.num_keys, 2);
        cr_assert_str_eq(b->sparse.keys[0], "item");
        cr_assert_str_eq(b->sparse.keys[1], "w_cat");
        const sl_ikjt_t *ik = &b->groups[0];
        cr_assert_str_eq(ik->name, "user");
        cr_assert_str_eq(ik->unique.keys[0], "u_hist");
        cr_assert_str_eq(ik->unique.keys[1], "u_geo");
        unique += ik->unique.stride;
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        sl_kjt_t all;
        cr_assert_eq(sl_batch_expand(b, arena, &all, &err), SL_OK, "%s", err.msg);
        /* reorder the expected keys like sl_batch_expand: plain then group */
        const sl_kjt_t *e = &x->batch.sparse;
        uint64_t eo[TD_S + 1], ao[TD_S + 1];
        sl_kjt_key_offsets(e, eo);
        sl_kjt_key_offsets(&all, ao);
        const int map[TD_S] = {0, 2, 1, 3}; /* all's key k is expected key map[k] */
        for (int k = 0; k < TD_S; k++) {
            cr_assert_str_eq(all.keys[k], e->keys[map[k]]);
            cr_assert_arr_eq(all.lengths + (size_t)k * all.stride,
                             e->lengths + (size_t)map[k] * e->stride, e->stride * 4);
            cr_assert_arr_eq(all.values + ao[k], e->values + eo[map[k]], (ao[k + 1] - ao[k]) * 8);
            cr_assert_arr_eq(all.weights + ao[k], e->weights + eo[map[k]], (ao[k + 1] - ao[k]) * 4);
        }
        /* unique rows are pairwise distinct (over both keys) */
        uint32_t U = ik->unique.stride;
        uint64_t *start = calloc(2 * (size_t)U + 2, 8);
        uint64_t at = 0;
        for (uint32_t kk = 0; kk < 2; kk++)
            for (uint32_t u = 0; u < U; u++) {
                start[kk * U + u] = at;
                at += (uint64_t)ik->unique.lengths[kk * U + u];
            }
        for (uint32_t u = 0; u < U; u++)
            for (uint32_t v = u + 1; v < U; v++) {
                bool same = true;
                for (uint32_t kk = 0; kk < 2 && same; kk++) {
                    int32_t lu = ik->unique.lengths[kk * U + u],
                            lv = ik->unique.lengths[kk * U + v];
                    same = lu == lv &&
                           memcmp(ik->unique.values + start[kk * U + u],
                                  ik->unique.values + start[kk * U + v], (size_t)lu * 8) == 0;
                }
                cr_assert(!same, "stripe %u: unique rows %u and %u are equal", s, u, v);
            }
        free(start);
        for (uint32_t k = 0; k < b->batch_size; k++) {
            int64_t i = x->batch.sample_ids[k] - 1000;
            uint32_t u = (uint32_t)ik->inverse[k];
            cr_assert_eq((uint32_t)ik->unique.lengths[u], m.len[1][i]);
            cr_assert_eq((uint32_t)ik->unique.lengths[ik->unique.stride + u], m.len[3][i]);
        }
        sl_arena_destroy(arena);
    }
    cr_assert_eq(unique, dd.dedup_unique);
    sl_wh_reader_close(rx);
    sl_wh_reader_close(rd);
    td_free(&m);
}

/* Block offsets (read opts block_offsets): each key's values before every
 * SL_WH_BLOCK_ROWS rows of the stripe, the expanded keys of a dedup group
 * included; not given unless asked for. Stripes of 2048 rows (whole
 * blocks) and a last one of 1904 (a part block). */
Test(warehouse_rw, block_offsets_sum_each_block_of_each_key)
{
    uint32_t n = 6000, stripe = 2048;
    td_spec_t spec = {n, 16, 100, true, 0.2, tu_seed("block_offsets_sum_each_block_of_each_key")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(stripe);
    o.num_dedup_groups = 1;
    o.dedup_groups = &td_group;
    td_write(path_in("blocks.slc"), &m, &o);
    sl_error_t err = {0};
    sl_wh_reader_t *plain, *rb;
    sl_wh_read_opts_t ro = {0};
    cr_assert_eq(sl_wh_reader_open(path_in("blocks.slc"), NULL, &ro, &plain, &err), SL_OK);
    ro.block_offsets = true;
    cr_assert_eq(sl_wh_reader_open(path_in("blocks.slc"), NULL, &ro, &rb, &err), SL_OK);
    cr_assert_eq(sl_wh_reader_num_stripes(rb), 3);
    for (uint32_t s = 0; s < 3; s++) {
        const sl_wh_rows_t *x, *y;
        cr_assert_eq(sl_wh_reader_read_stripe(plain, s, &x, &err), SL_OK, "%s", err.msg);
        cr_assert_null(x->block_offsets);
        cr_assert_eq(sl_wh_reader_read_stripe(rb, s, &y, &err), SL_OK, "%s", err.msg);
        const sl_kjt_t *kjt = &y->batch.sparse;
        const uint32_t N = y->batch.batch_size, nb = N / SL_WH_BLOCK_ROWS + 1;
        cr_assert_eq(N, s < 2 ? 2048 : 1904);
        cr_assert_eq(kjt->num_keys, TD_S);
        cr_assert_not_null(y->block_offsets);
        for (uint32_t k = 0; k < kjt->num_keys; k++) {
            uint64_t at = 0;
            for (uint32_t r = 0; r <= N; r++) {
                if (r % SL_WH_BLOCK_ROWS == 0)
                    cr_assert_eq(y->block_offsets[(size_t)k * nb + r / SL_WH_BLOCK_ROWS], at,
                                 "stripe %u key %u row %u", s, k, r);
                if (r < N) at += (uint64_t)kjt->lengths[(size_t)k * N + r];
            }
            cr_assert_eq(at, y->key_offsets[k + 1] - y->key_offsets[k]);
        }
    }
    sl_wh_reader_close(plain);
    sl_wh_reader_close(rb);
    td_free(&m);
}

Test(warehouse_rw, storage_dedup_projection_of_part_of_a_group)
{
    uint32_t n = 3000;
    td_spec_t spec = {n,     16,  30,
                      false, 0.2, tu_seed("storage_dedup_projection_of_part_of_a_group")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(1000);
    o.num_dedup_groups = 1;
    o.dedup_groups = &td_group;
    td_write(path_in("d.slc"), &m, &o);
    const char *feats[] = {"u_geo", "d2"};
    for (int form = 0; form < 2; form++) {
        sl_wh_read_opts_t ro = {0};
        ro.features = feats;
        ro.num_features = 2;
        ro.dedup_form = form;
        sl_error_t err = {0};
        sl_wh_reader_t *r;
        cr_assert_eq(sl_wh_reader_open(path_in("d.slc"), NULL, &ro, &r, &err), SL_OK, "%s",
                     err.msg);
        const sl_wh_rows_t *x;
        uint64_t seen = 0;
        while (sl_wh_reader_next(r, &x, &err) == SL_OK && x != NULL) {
            const sl_batch_t *b = &x->batch;
            cr_assert_eq(sl_batch_validate(b, &err), SL_OK, "%s", err.msg);
            const sl_kjt_t *k = form ? &b->groups[0].unique : &b->sparse;
            cr_assert_eq(form ? b->num_groups : b->sparse.num_keys, 1);
            cr_assert_eq(k->num_keys, 1);
            cr_assert_str_eq(k->keys[0], "u_geo");
            for (uint32_t r2 = 0; r2 < b->batch_size; r2++) {
                uint64_t i = seen + r2;
                uint32_t row = form ? (uint32_t)b->groups[0].inverse[r2] : r2;
                cr_assert_eq((uint32_t)k->lengths[row], m.len[3][i]);
                uint64_t off = 0;
                for (uint32_t q = 0; q < row; q++)
                    off += (uint64_t)k->lengths[q];
                if (m.len[3][i]) cr_assert_eq(k->values[off], m.ids[3][m.off[3][i]]);
                cr_assert(td_same_float(b->dense.data[r2], m.dense[i * TD_D + 2]));
            }
            seen += b->batch_size;
        }
        cr_assert_eq(seen, n, "%s", err.msg);
        sl_wh_reader_close(r);
    }
    td_free(&m);
}

Test(warehouse_rw, reader_output_writes_back)
{
    /* a dedup-form read written with the batch API gives the same rows */
    uint32_t n = 2500;
    td_spec_t spec = {n, 8, 10, true, 0.3, tu_seed("reader_output_writes_back")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(700);
    o.num_dedup_groups = 1;
    o.dedup_groups = &td_group;
    td_write(path_in("in.slc"), &m, &o);
    sl_error_t err = {0};
    sl_wh_read_opts_t ro = {0};
    ro.dedup_form = true;
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path_in("in.slc"), NULL, &ro, &r, &err), SL_OK);
    sl_wh_schema_t *s = td_schema();
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o2 = td_opts(1000);
    cr_assert_eq(sl_wh_writer_open(path_in("out.slc"), s, &o2, &w, &err), SL_OK);
    const sl_wh_rows_t *x;
    while (sl_wh_reader_next(r, &x, &err) == SL_OK && x != NULL)
        cr_assert_eq(sl_wh_writer_append(w, x, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    sl_wh_reader_close(r);
    td_check_file(path_in("out.slc"), &m);
    sl_wh_schema_destroy(s);
    td_free(&m);
}

static int count_entries(const char *d)
{
    DIR *h = opendir(d);
    cr_assert_not_null(h);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(h)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(h);
    return n;
}

Test(warehouse_rw, atomic_write_and_abort)
{
    td_spec_t spec = {3000, 8, 10, false, 0.1, tu_seed("atomic_write_and_abort")};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(500);
    cr_assert_eq(sl_wh_writer_open(path_in("x.slc"), s, &o, &w, &err), SL_OK);
    td_append_rows(w, &m, 0, 2000); /* four stripes on disk already */
    struct stat sb;
    cr_assert_neq(stat(path_in("x.slc"), &sb), 0, "final name visible before close");
    cr_assert_eq(stat(path_in(".x.slc.tmp"), &sb), 0);
    sl_wh_writer_abort(w);
    cr_assert_neq(stat(path_in("x.slc"), &sb), 0);
    cr_assert_neq(stat(path_in(".x.slc.tmp"), &sb), 0);
    cr_assert_eq(count_entries(dir), 0);

    /* a failed append poisons the writer: close fails, nothing appears */
    cr_assert_eq(sl_wh_writer_open(path_in("y.slc"), s, &o, &w, &err), SL_OK);
    td_append_rows(w, &m, 0, 10);
    int64_t ids[1] = {1};
    sl_wh_idlist_t lists[TD_S] = {
        {0, NULL, NULL}, {0, NULL, NULL}, {0, NULL, NULL}, {0, NULL, NULL}};
    lists[0].len = 1; /* ok */
    lists[0].ids = ids;
    lists[1].len = 2; /* ids NULL: invalid */
    sl_wh_row_t row = {1, 1, 1, NULL, NULL, lists};
    cr_assert_eq(sl_wh_writer_append_row(w, &row, &err), SL_ERR_INVALID);
    /* an invalid row is refused without poisoning; a bad batch neither */
    sl_wh_rows_t bad;
    memset(&bad, 0, sizeof bad);
    bad.batch.batch_size = 2;
    const char *unknown[] = {"zzz"};
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    cr_assert_eq(sl_dense_init(&bad.batch.dense, arena, 2, 1, unknown), SL_OK);
    cr_assert_eq(sl_wh_writer_append(w, &bad, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "dense column 'zzz' is not in the schema") != NULL, "%s", err.msg);
    sl_arena_destroy(arena);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(stat(path_in("y.slc"), &sb), 0);

    /* an existing file is not replaced unless asked */
    cr_assert_eq(sl_wh_writer_open(path_in("y.slc"), s, &o, &w, &err), SL_ERR_INVALID);
    o.overwrite = true;
    cr_assert_eq(sl_wh_writer_open(path_in("y.slc"), s, &o, &w, &err), SL_OK);
    td_append_rows(w, &m, 0, m.n);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK);
    td_check_file(path_in("y.slc"), &m);
    cr_assert_eq(count_entries(dir), 1);
    sl_wh_schema_destroy(s);
    td_free(&m);
}

Test(warehouse_rw, writer_rejects_bad_options)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(0);
    const char *bad_feats[] = {"d0"};
    sl_dedup_group_spec_t g = {"g", 1, bad_feats};
    o.num_dedup_groups = 1;
    o.dedup_groups = &g;
    cr_assert_eq(sl_wh_writer_open(path_in("b.slc"), s, &o, &w, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "dedup group 'g': 'd0' is not a sparse feature") != NULL, "%s",
              err.msg);
    const char *two[] = {"item", "item"};
    sl_dedup_group_spec_t g2 = {"g", 2, two};
    o.dedup_groups = &g2;
    cr_assert_eq(sl_wh_writer_open(path_in("b.slc"), s, &o, &w, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "feature 'item' is in two dedup groups") != NULL, "%s", err.msg);
    o = td_opts(0);
    o.zstd_level = 1000;
    cr_assert_eq(sl_wh_writer_open(path_in("b.slc"), s, &o, &w, &err), SL_ERR_INVALID);
    o = td_opts(1u << 30);
    cr_assert_eq(sl_wh_writer_open(path_in("b.slc"), s, &o, &w, &err), SL_ERR_INVALID);
    cr_assert_eq(count_entries(dir), 0);
    sl_wh_schema_destroy(s);
}

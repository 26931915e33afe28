/* The reader's fast paths, value for value against what was written:
 * - the dense matrix: each dense column is decoded on its own and the
 *   columns are transposed into the row-major [rows, D] matrix 512 rows at
 *   a time (reader.c decode_dense), with AVX2 8 x 8 blocks where D >= 8
 *   (the last column group overlapping the one before it) and a scalar
 *   loop for the rest: column counts on both sides of 8 and of its
 *   multiples, stripes whose rows are no multiple of 8 or of 512, missing
 *   values (NaN);
 * - lengths stored at bit width 1 (criteo's: an id or none), unpacked with
 *   AVX2 and summed by popcount (decode_packed.c unpack_bits): row counts
 *   around 8 and 64, all lists empty, all full, mixed.
 * Randomised: the seed is printed; replay with SLUICE_TEST_SEED. White-box:
 * the stream layout through wh_internal.h (that the lengths are width 1). */
#include "warehouse_testdata.h"

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

TestSuite(warehouse_fastpath, .init = setup, .fini = teardown);

/* Write rows of D dense columns (about a fifth missing, every value's bits
 * distinct) in stripes of stripe_rows, read every stripe back and compare
 * every value. */
static void dense_round_trip(uint32_t D, uint32_t rows, uint32_t stripe_rows, uint64_t seed)
{
    sl_error_t err = {0};
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    cr_assert_not_null(s);
    char name[32];
    for (uint32_t c = 0; c < D; c++) {
        snprintf(name, sizeof name, "x%u", c);
        cr_assert_eq(sl_wh_schema_add_feature(s, name, SL_WH_DENSE, &err), SL_OK, "%s", err.msg);
    }
    cr_assert_eq(sl_wh_schema_add_feature(s, "id", SL_WH_SPARSE, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_schema_add_label(s, "label", &err), SL_OK, "%s", err.msg);
    float *dense = malloc((size_t)rows * D * sizeof *dense);
    cr_assert_not_null(dense);
    uint64_t st = seed;
    for (size_t i = 0; i < (size_t)rows * D; i++)
        dense[i] = tu_below(&st, 5) == 0 ? NAN : (float)i + (float)tu_below(&st, 1000) / 1024.0f;
    char path[4200];
    snprintf(path, sizeof path, "%s/d%u.slc", dir, D);
    sl_wh_writer_opts_t o = td_opts(stripe_rows);
    sl_wh_writer_t *w;
    cr_assert_eq(sl_wh_writer_open(path, s, &o, &w, &err), SL_OK, "%s", err.msg);
    for (uint32_t i = 0; i < rows; i++) {
        int64_t id = (int64_t)(i % 7);
        float label = (float)(i & 1);
        sl_wh_idlist_t list = {.len = 1, .ids = &id, .weights = NULL};
        sl_wh_row_t row = {1000 + i, i / 4, i, &label, dense + (size_t)i * D, &list};
        cr_assert_eq(sl_wh_writer_append_row(w, &row, &err), SL_OK, "%s", err.msg);
    }
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
    uint32_t seen = 0;
    for (uint32_t k = 0; k < sl_wh_reader_num_stripes(r); k++) {
        const sl_wh_rows_t *x;
        cr_assert_eq(sl_wh_reader_read_stripe(r, k, &x, &err), SL_OK, "%s", err.msg);
        const sl_batch_t *b = &x->batch;
        cr_assert_eq(b->dense.cols, D);
        for (uint32_t j = 0; j < b->batch_size; j++) {
            int64_t i = b->sample_ids[j] - 1000;
            cr_assert(i >= 0 && i < (int64_t)rows);
            for (uint32_t c = 0; c < D; c++) {
                float got = b->dense.data[(size_t)j * D + c], want = dense[(size_t)i * D + c];
                cr_assert(td_same_float(got, want),
                          "D %u stripe %u row %u column %u: got %a want %a (seed %llu)", D, k, j, c,
                          (double)got, (double)want, (unsigned long long)seed);
            }
        }
        seen += b->batch_size;
    }
    cr_assert_eq(seen, rows);
    sl_wh_reader_close(r);
    sl_wh_schema_destroy(s);
    free(dense);
}

Test(warehouse_fastpath, every_value_of_the_matrix_for_column_counts_around_8)
{
    uint64_t seed = tu_seed("every_value_of_the_matrix_for_column_counts_around_8");
    const uint32_t counts[] = {1, 2, 7, 8, 9, 13, 15, 16, 17, 24, 29};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        dense_round_trip(counts[i], 2503, 1029, seed + i);
}

Test(warehouse_fastpath, stripes_shorter_than_a_block_of_8_rows)
{
    uint64_t seed = tu_seed("stripes_shorter_than_a_block_of_8_rows");
    dense_round_trip(13, 23, 5, seed);
    dense_round_trip(8, 7, 7, seed + 1);
}

/* Rows with 0 or 1 id each (one_in: the chance of 1 is 1 / one_in; 0: never,
 * 1: always) in one stripe; the lengths and ids read back, and whether the
 * lengths stream is width-1 BITPACK where it holds both 0 and 1. */
static void lengths_round_trip(uint32_t rows, uint32_t one_in, uint64_t seed)
{
    sl_error_t err = {0};
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    cr_assert_not_null(s);
    cr_assert_eq(sl_wh_schema_add_feature(s, "c", SL_WH_SPARSE, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_schema_add_label(s, "label", &err), SL_OK, "%s", err.msg);
    uint8_t *has = malloc(rows + 1);
    cr_assert_not_null(has);
    uint64_t st = seed, ones = 0;
    for (uint32_t i = 0; i < rows; i++) {
        has[i] = one_in != 0 && tu_below(&st, one_in) == 0;
        ones += has[i];
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/l%u_%u.slc", dir, rows, one_in);
    sl_wh_writer_opts_t o = td_opts(65536);
    sl_wh_writer_t *w;
    cr_assert_eq(sl_wh_writer_open(path, s, &o, &w, &err), SL_OK, "%s", err.msg);
    for (uint32_t i = 0; i < rows; i++) {
        int64_t id = 5 + (int64_t)i * 3;
        float label = 0;
        sl_wh_idlist_t list = {.len = has[i], .ids = &id, .weights = NULL};
        sl_wh_row_t row = {1000 + i, i, i, &label, NULL, &list};
        cr_assert_eq(sl_wh_writer_append_row(w, &row, &err), SL_OK, "%s", err.msg);
    }
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK, "%s", err.msg);
    if (ones > 0 && ones < rows) { /* the stream this is about */
        size_t len;
        uint8_t *data = td_read_all(path, &len);
        wh_file_t *f;
        cr_assert_eq(wh_file_open(NULL, data, len, "x.slc", NULL, NULL, &f, &err), SL_OK, "%s",
                     err.msg);
        const wh_stripe_t *sp = &f->stripes[0];
        bool found = false;
        for (uint32_t k = 0; k < sp->num_streams; k++) {
            const wh_stream_t *x = &f->streams[sp->first_stream + k];
            if (x->kind != SL_WH_STREAM_LENGTHS || strcmp(x->name, "c") != 0) continue;
            cr_assert_eq(x->encoding, SLUICE__ENCODING__ENCODING_BITPACK);
            cr_assert_eq(x->bit_width, 1);
            cr_assert_eq(x->for_base, 0);
            found = true;
        }
        cr_assert(found);
        wh_file_close(f);
        free(data);
    }
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
    const sl_wh_rows_t *x;
    cr_assert_eq(sl_wh_reader_read_stripe(r, 0, &x, &err), SL_OK, "%s", err.msg);
    const sl_batch_t *b = &x->batch;
    cr_assert_eq(b->batch_size, rows);
    cr_assert_eq(b->sparse.num_values, ones, "rows %u: %llu ids, want %llu", rows,
                 (unsigned long long)b->sparse.num_values, (unsigned long long)ones);
    uint64_t at = 0;
    for (uint32_t j = 0; j < rows; j++) {
        uint32_t i = (uint32_t)(b->sample_ids[j] - 1000);
        cr_assert_eq(b->sparse.lengths[j], has[i], "rows %u row %u (seed %llu)", rows, j,
                     (unsigned long long)seed);
        if (has[i]) cr_assert_eq(b->sparse.values[at++], 5 + (int64_t)i * 3);
    }
    sl_wh_reader_close(r);
    sl_wh_schema_destroy(s);
    free(has);
}

Test(warehouse_fastpath, width_1_lengths_exact_around_8_and_64_rows)
{
    uint64_t seed = tu_seed("width_1_lengths_exact_around_8_and_64_rows");
    const uint32_t rows[] = {1, 2, 7, 8, 9, 63, 64, 65, 127, 129, 1000, 4099};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        lengths_round_trip(rows[i], 2, seed + i);
        lengths_round_trip(rows[i], 0, seed + i);
        lengths_round_trip(rows[i], 1, seed + i);
        lengths_round_trip(rows[i], 9, seed + i);
    }
}

/* The CSV importer (src/warehouse/import_csv*.c) and the import refusals:
 * RFC 4180 quoting (delimiters, quotes and newlines inside fields), BOM,
 * CRLF, empty fields as missing, ragged rows as bad rows with a reason,
 * declared string hashing, lists in cells, the mapping's errors; byte
 * ranges parsed by several threads give the same table as one thread;
 * imports that write no row or skip too many are refused and leave no
 * table; a Parquet file given to a text importer is refused naming
 * --format parquet. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "testutil.h"
#include "warehouse/column_map.h"
#include "warehouse/import.h"
#include "warehouse/table_tools.h"

static tu_alloc_t g_ta;

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

/* The paths a test makes (tu_mkdtemp, tu_path), freed when it ends. */
static char *g_paths[64];
static int g_npaths;

static char *keep(char *p)
{
    cr_assert_lt(g_npaths, 64);
    g_paths[g_npaths++] = p;
    return p;
}

static void free_paths(void)
{
    while (g_npaths > 0)
        free(g_paths[--g_npaths]);
}

TestSuite(import_csv, .init = init_alloc, .fini = free_paths);

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static sl_wh_import_opts_t csv_opts(const char *table, const char *const *inputs, uint32_t n)
{
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.allocator = &g_ta.base;
    o.format = SL_WH_IMPORT_CSV;
    o.table_dir = table;
    o.inputs = inputs;
    o.num_inputs = n;
    o.threads = 1;
    o.writer.no_sync = true;
    o.writer.stripe_rows = 1000;
    return o;
}

static sl_wh_colmap_t *mapping(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    cr_assert_not_null(j);
    sl_wh_colmap_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_parse(j, NULL, NULL, NULL, NULL, &m, &err), SL_OK, "%s", err.msg);
    json_decref(j);
    return m;
}

/* The table as JSON lines (sl_wh_cat_table). Caller frees. */
static char *cat(const char *table)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sl_wh_cat_opts_t co = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_cat_table(table, &co, f, NULL, &err), SL_OK, "%s", err.msg);
    fclose(f);
    return buf;
}

Test(import_csv, quoting_newlines_bom_crlf_hashing_lists)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "a.csv")), *table = keep(tu_path(dir, "t"));
    const char text[] = "\xef\xbb\xbf"
                        "id,click,price,country,items,note\r\n"
                        "7,1,2.5,DE,\"[1,2]\",\"hello, world\"\r\n"
                        "8,0,,\"F\"\"R\",[],\"two\nlines\"\r\n"
                        "\r\n"
                        "9,1,3,DE,5,plain\r\n";
    tu_write_file(in, text, sizeof text - 1);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
    sl_wh_colmap_t *m =
        mapping("{\"sample_id\": \"id\", \"labels\": [\"click\"],"
                " \"sparse\": [{\"column\": \"country\", \"hash\": {\"seed\": 7}}]}");
    o.mapping = m;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_read, 3);
    cr_assert_eq(sum.rows_written, 3);
    cr_assert_eq(sum.rows_skipped, 0);
    sl_wh_import_summary_free(&sum);
    char *got = cat(table);
    char want[2048];
    long long de = (long long)sl_wh_colmap_hash("DE", 2, 7), fr = sl_wh_colmap_hash("F\"R", 3, 7);
    /* note (a string without a hash) is ignored; items is list<int> (9's 5 is a list of one). */
    snprintf(want, sizeof want,
             "{\"sample_id\":7,\"session_id\":0,\"ts\":0,\"labels\":{\"click\":1.0},"
             "\"dense\":{\"price\":2.5},\"sparse\":{\"country\":[%lld],\"items\":[1,2]}}\n"
             "{\"sample_id\":8,\"session_id\":0,\"ts\":0,\"labels\":{\"click\":0.0},"
             "\"dense\":{},\"sparse\":{\"country\":[%lld],\"items\":[]}}\n"
             "{\"sample_id\":9,\"session_id\":0,\"ts\":0,\"labels\":{\"click\":1.0},"
             "\"dense\":{\"price\":3.0},\"sparse\":{\"country\":[%lld],\"items\":[5]}}\n",
             de, fr, de);
    cr_assert_str_eq(got, want);
    free(got);
    sl_wh_colmap_destroy(m);
    tu_rm_tree(dir);
}

Test(import_csv, ragged_rows_are_bad_rows_with_a_reason)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "r.csv")), *table = keep(tu_path(dir, "t"));
    const char text[] = "a;b;c\n1;2;3\n1;2\n1;2;3;4\n4;5;6\n1;\"x\"y;3\n1;a\"b;3\n1;\"open;3\n";
    tu_write_file(in, text, sizeof text - 1);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
    o.delimiter = ';';
    o.max_skipped_fraction = 1;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_read, 7);
    cr_assert_eq(sum.rows_written, 2);
    cr_assert_eq(sum.num_first_bad, 5);
    const char *want[] = {
        "%s:3: 2 fields, the header has 3",
        "%s:4: 4 fields, the header has 3",
        "%s:6: field 2: text after the closing quote",
        "%s:7: field 2: a quote inside an unquoted field (quote the field and double the quote)",
        "%s:8: field 2: a quote is not closed",
    };
    for (int i = 0; i < 5; i++) {
        char w[512];
        snprintf(w, sizeof w, want[i], in);
        cr_assert_str_eq(sum.first_bad[i], w);
    }
    sl_wh_import_summary_free(&sum);
    tu_rm_tree(dir);
}

Test(import_csv, bad_values_name_field_and_column)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "v.csv")), *table = keep(tu_path(dir, "t"));
    const char text[] = "sample_id,x,ids\n1,2,3\nq,2,3\n2,abc,3\n3,1,-4\n4,1,[1,\n";
    tu_write_file(in, text, sizeof text - 1);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
    o.max_skipped_fraction = 1;
    o.infer_lines = 1; /* the types from the first row: the bad values come after */
    sl_wh_colmap_t *m = mapping("{\"dense\": [\"x\"], \"sparse\": [\"ids\"]}");
    o.mapping = m;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_written, 1);
    cr_assert_eq(sum.num_first_bad, 4);
    const char *want[] = {
        "%s:3: field 1 (sample_id): expected an integer, got 'q'",
        "%s:4: field 2 (x): expected a number, got 'abc'",
        "%s:5: field 3 (ids): expected an id (an integer >= 0) or a list, got '-4'",
        "%s:6: 4 fields, the header has 3",
    };
    for (int i = 0; i < 4; i++) {
        char w[512];
        snprintf(w, sizeof w, want[i], in);
        cr_assert_str_eq(sum.first_bad[i], w);
    }
    sl_wh_import_summary_free(&sum);
    sl_wh_colmap_destroy(m);
    tu_rm_tree(dir);
}

Test(import_csv, mapping_errors_refuse_before_anything_is_made)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "m.csv")), *table = keep(tu_path(dir, "t"));
    const char text[] = "id,name,x\n1,ann,2\n";
    tu_write_file(in, text, sizeof text - 1);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
    sl_wh_colmap_t *m = mapping("{\"sparse\": [\"name\"], \"dense\": [\"nope\", \"x\"]}");
    o.mapping = m;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_import(&o, NULL, &err), SL_ERR_INVALID);
    char want[1024];
    snprintf(want, sizeof want,
             "%s: column mapping: $.dense[0]: no column 'nope' in the input; $.sparse[0]: column "
             "'name' is string; strings become ids only by a declared hash: {\"column\": "
             "\"name\", \"hash\": {\"seed\": N}}",
             in);
    cr_assert_str_eq(err.msg, want);
    cr_assert(!exists(table));
    sl_wh_colmap_destroy(m);
    tu_rm_tree(dir);
}

Test(import_csv, zero_rows_and_too_many_skipped_are_refused)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "z.csv")), *table = keep(tu_path(dir, "t"));
    const char *inputs[] = {in};
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;

    /* Only a header: no row. */
    tu_write_file(in, "a,b\n", 4);
    sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "refused: the input holds no row");
    sl_wh_import_summary_free(&sum);
    cr_assert(!exists(table));

    /* One bad row in 10: above the default 1 %. */
    char text[256];
    size_t at = (size_t)sprintf(text, "a,b\n");
    for (int i = 0; i < 9; i++)
        at += (size_t)sprintf(text + at, "%d,%d\n", i, i);
    at += (size_t)sprintf(text + at, "1,2,3\n");
    tu_write_file(in, text, at);
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "refused: 1 of 10 rows (10.00 %) were skipped as bad, more than the "
                              "allowed fraction 0.01 (--max-skipped-fraction)");
    cr_assert_eq(sum.num_first_bad, 1);
    cr_assert_eq(sum.rows_written, 0);
    sl_wh_import_summary_free(&sum);
    cr_assert(!exists(table));
    /* Allowed at 10 %: the good rows go in. */
    o.max_skipped_fraction = 0.1;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_written, 9);
    sl_wh_import_summary_free(&sum);
    tu_rm_tree(dir);
}

/* Today's trap: a CSV given to --format criteo read 50001 rows, wrote 0
 * and exited 0 leaving an empty table. */
Test(import_csv, criteo_format_on_a_csv_is_refused)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "clicks.csv")), *table = keep(tu_path(dir, "t"));
    FILE *f = fopen(in, "w");
    fprintf(f, "label,i1,c1\n");
    for (int i = 0; i < 500; i++)
        fprintf(f, "%d,%d,%x\n", i % 2, i, i * 7919);
    fclose(f);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
    o.format = SL_WH_IMPORT_CRITEO;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "refused: no row was written (501 read, all skipped as bad); is the "
                              "input Criteo TSV?");
    cr_assert_eq(sum.rows_read, 501);
    cr_assert_eq(sum.rows_written, 0);
    cr_assert_eq(sum.num_first_bad, 5);
    char want[512];
    snprintf(want, sizeof want, "%s:1: field 1 (label): unparsable number 'label,i1,c1'", in);
    cr_assert_str_eq(sum.first_bad[0], want);
    sl_wh_import_summary_free(&sum);
    cr_assert(!exists(table), "the refused import left a table behind");
    /* The same file as csv goes in. */
    o.format = SL_WH_IMPORT_CSV;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_written, 500);
    sl_wh_import_summary_free(&sum);
    tu_rm_tree(dir);
}

Test(import_csv, parquet_given_to_a_text_importer_names_format_parquet)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "data.parquet")), *table = keep(tu_path(dir, "t"));
    tu_write_file(in, "PAR1\x15\x04\x15\x10\x00\x00PAR1", 14);
    const char *inputs[] = {in};
    sl_wh_import_format_t fmts[] = {SL_WH_IMPORT_CSV, SL_WH_IMPORT_CRITEO, SL_WH_IMPORT_JSONL};
    for (int i = 0; i < 3; i++) {
        sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
        o.format = fmts[i];
        sl_error_t err = {0};
        cr_assert_eq(sl_wh_import(&o, NULL, &err), SL_ERR_INVALID);
        cr_assert_not_null(strstr(err.msg, "it looks like a Parquet file (import it with --format "
                                           "parquet)"),
                           "%s", err.msg);
        cr_assert(!exists(table));
    }
    tu_rm_tree(dir);
}

/* A CSV of n rows with quoted fields holding delimiters, quotes and
 * newlines at seeded places. */
static void write_tricky(const char *path, uint32_t n, uint64_t seed)
{
    FILE *f = fopen(path, "w");
    fprintf(f, "sample_id,label,x,ids,tag,note\n");
    uint64_t rng = seed;
    for (uint32_t i = 0; i < n; i++) {
        fprintf(f, "%u,%d,%.3f,", i, (int)tu_below(&rng, 2), (double)tu_below(&rng, 100000) / 7);
        uint32_t k = (uint32_t)tu_below(&rng, 4);
        fprintf(f, "\"[");
        for (uint32_t j = 0; j < k; j++)
            fprintf(f, "%s%llu", j ? "," : "", (unsigned long long)tu_below(&rng, 1000));
        fprintf(f, "]\",t%llu,", (unsigned long long)tu_below(&rng, 50));
        switch (tu_below(&rng, 4)) {
        case 0:
            fprintf(f, "plain");
            break;
        case 1:
            fprintf(f, "\"a,b\"\"c\"");
            break;
        case 2:
            fprintf(f, "\"line\nbreak\n,\"\"x\"\"\"");
            break;
        default:
            break; /* empty */
        }
        fprintf(f, tu_below(&rng, 5) == 0 ? "\r\n" : "\n");
    }
    fclose(f);
}

Test(import_csv, threads_split_one_file_into_ranges_with_the_same_rows)
{
    uint64_t seed = tu_seed("import_csv::threads");
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "big.csv")), *t1 = keep(tu_path(dir, "t1")),
         *t4 = keep(tu_path(dir, "t4"));
    write_tricky(in, 20000, seed);
    const char *inputs[] = {in};
    sl_wh_colmap_t *m = mapping("{\"sparse\": [{\"column\": \"tag\", \"hash\": {\"seed\": 1}}]}");
    sl_wh_import_opts_t o = csv_opts(t1, inputs, 1);
    o.mapping = m;
    sl_error_t err = {0};
    sl_wh_import_summary_t s1, s4;
    cr_assert_eq(sl_wh_import(&o, &s1, &err), SL_OK, "%s", err.msg);
    o.table_dir = t4;
    o.threads = 4;
    o.range_min_bytes = 4096;
    cr_assert_eq(sl_wh_import(&o, &s4, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(s1.files_written, 1);
    cr_assert_eq(s4.files_written, 4, "seed %llu", (unsigned long long)seed);
    cr_assert_eq(s1.rows_written, 20000);
    cr_assert_eq(s4.rows_written, 20000);
    cr_assert_eq(s4.rows_skipped, 0);
    char *a = cat(t1), *b = cat(t4);
    /* The sample ids come from the data, so the rows must match exactly and in order. */
    cr_assert_str_eq(a, b, "seed %llu", (unsigned long long)seed);
    free(a);
    free(b);
    sl_wh_import_summary_free(&s1);
    sl_wh_import_summary_free(&s4);

    /* Without sample ids in the data, the line-numbered ids agree too. */
    sl_wh_colmap_destroy(m);
    m = mapping("{\"labels\": [\"label\"], \"dense\": [\"x\"], \"sparse\": [\"ids\"], \"infer\": "
                "false}");
    char *u1 = keep(tu_path(dir, "u1")), *u4 = keep(tu_path(dir, "u4"));
    o.mapping = m;
    o.table_dir = u1;
    o.threads = 1;
    cr_assert_eq(sl_wh_import(&o, NULL, &err), SL_OK, "%s", err.msg);
    o.table_dir = u4;
    o.threads = 3;
    cr_assert_eq(sl_wh_import(&o, NULL, &err), SL_OK, "%s", err.msg);
    a = cat(u1);
    b = cat(u4);
    cr_assert_str_eq(a, b, "seed %llu", (unsigned long long)seed);
    free(a);
    free(b);
    sl_wh_colmap_destroy(m);
    tu_rm_tree(dir);
}

Test(import_csv, zstd_input_is_read_whole_with_the_same_rows)
{
    uint64_t seed = tu_seed("import_csv::zstd");
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "p.csv")), *zin = keep(tu_path(dir, "p.csv.anything"));
    char *t1 = keep(tu_path(dir, "t1")), *t2 = keep(tu_path(dir, "t2"));
    write_tricky(in, 3000, seed);
    size_t len;
    char *text = tu_read_file(in);
    len = strlen(text);
    size_t cap = ZSTD_compressBound(len);
    char *z = malloc(cap);
    size_t n = ZSTD_compress(z, cap, text, len, 3);
    cr_assert(!ZSTD_isError(n));
    tu_write_file(zin, z, n);
    free(z);
    free(text);
    sl_wh_colmap_t *m = mapping("{\"sparse\": [{\"column\": \"tag\", \"hash\": {\"seed\": 1}}]}");
    const char *plain[] = {in}, *packed[] = {zin};
    sl_wh_import_opts_t o = csv_opts(t1, plain, 1);
    o.mapping = m;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_import(&o, NULL, &err), SL_OK, "%s", err.msg);
    o = csv_opts(t2, packed, 1);
    o.mapping = m;
    o.threads = 4; /* a compressed file cannot be cut: one reader, one file */
    o.range_min_bytes = 1024;
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.files_written, 1);
    cr_assert_eq(sum.rows_written, 3000);
    sl_wh_import_summary_free(&sum);
    char *a = cat(t1), *b = cat(t2);
    cr_assert_str_eq(a, b, "seed %llu", (unsigned long long)seed);
    free(a);
    free(b);
    sl_wh_colmap_destroy(m);
    tu_rm_tree(dir);
}

/* More fields than the parser's first field buffer (64) in the header and
 * the rows: every name and value kept. */
Test(import_csv, wide_records_keep_every_field)
{
    char *dir = keep(tu_mkdtemp("import_csv"));
    char *in = keep(tu_path(dir, "wide.csv")), *table = keep(tu_path(dir, "t"));
    FILE *f = fopen(in, "w");
    for (int c = 1; c <= 150; c++)
        fprintf(f, "%sc%d", c > 1 ? "," : "", c);
    fputc('\n', f);
    for (int r = 0; r < 3; r++) {
        for (int c = 1; c <= 150; c++)
            fprintf(f, "%s%d", c > 1 ? "," : "", r * 1000 + c);
        fputc('\n', f);
    }
    fclose(f);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = csv_opts(table, inputs, 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_import(&o, NULL, &err), SL_OK, "%s", err.msg);
    sl_wh_table_t *t = NULL;
    cr_assert_eq(sl_wh_table_open(table, NULL, &t, &err), SL_OK, "%s", err.msg);
    const sl_wh_schema_t *s = sl_wh_table_schema(t);
    cr_assert_eq(sl_wh_schema_num_dense(s), 150);
    cr_assert_str_eq(sl_wh_schema_dense(s, 0)->name, "c1");
    cr_assert_str_eq(sl_wh_schema_dense(s, 64)->name, "c65");
    cr_assert_str_eq(sl_wh_schema_dense(s, 149)->name, "c150");
    sl_wh_table_close(t);
    char *got = cat(table);
    cr_assert_not_null(strstr(got, "\"c65\":2065.0,"), "%.300s", got);
    cr_assert_not_null(strstr(got, "\"c150\":2150.0}"), "%.300s", got);
    free(got);
    tu_rm_tree(dir);
}

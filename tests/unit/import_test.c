/* Importers and generator (src/warehouse/import*.c, gen.c): Criteo TSV read
 * back value for value (missing dense values, empty categoricals, short
 * lines, CRLF, no final newline), bad rows counted and named by file and
 * line, strict mode importing nothing; jsonl import -> cat reproducing the
 * input objects (json_equal); schema inference; the generator's determinism
 * and session structure. Random inputs are seeded (tu_seed). Imports run on
 * the counting allocator of testutil.h (nothing leaks, every free has its
 * size), and one test per format fails each of an import's allocations in
 * turn. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/table_tools.h"

/* Every import of these tests allocates here. */
static tu_alloc_t g_ta;

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(import, .init = init_alloc);

/* ---- helpers ---- */

/* Bad rows seen through the callback. */
typedef struct bad_log {
    uint32_t n;
    char text[16][SL_ERROR_MSG_MAX + 64];
} bad_log_t;

static void log_bad(void *ctx, const char *input, uint64_t line, const char *message)
{
    bad_log_t *b = ctx;
    const char *base = strrchr(input, '/');
    if (b->n < 16)
        snprintf(b->text[b->n], sizeof b->text[0], "%s:%llu: %s", base ? base + 1 : input,
                 (unsigned long long)line, message);
    b->n++;
}

static sl_wh_import_opts_t opts_for(sl_wh_import_format_t fmt, const char *table,
                                    const char *const *inputs, uint32_t n)
{
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.allocator = &g_ta.base;
    o.format = fmt;
    o.table_dir = table;
    o.partition = "ds=2026-03-01";
    o.inputs = inputs;
    o.num_inputs = n;
    o.writer.no_sync = true;
    o.writer.stripe_rows = 1000; /* several stripes even for small inputs */
    return o;
}

/* Every row of the table as a JSON line, via sl_wh_cat_table. Caller frees. */
static char *cat_table(const char *dir, size_t *len, uint64_t *rows)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    cr_assert_not_null(f);
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_cat_table(dir, NULL, f, rows, &err), SL_OK, "%s", err.msg);
    fclose(f);
    return buf;
}

/* Count data files under dir/partition: the visible ones, or with hidden
 * every entry (staging files too). */
static uint32_t count_files(const char *dir, const char *partition, bool hidden)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, partition);
    DIR *d = opendir(path);
    if (d == NULL) return 0;
    uint32_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += hidden ? strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0
                    : e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- Criteo ---- */

/* What one Criteo line should read back as. */
typedef struct crow {
    float label;
    float dense[13]; /* NaN = missing */
    int64_t ids[26]; /* -1 = empty list */
    uint64_t line;
} crow_t;

/* A random Criteo line for r: fields cut short at random (the missing tail
 * is missing / empty), hex in mixed case with leading zeros sometimes,
 * CRLF sometimes. */
static size_t random_line(uint64_t *rng, crow_t *r, char *out)
{
    size_t n = 0;
    uint32_t keep = 1 + (uint32_t)tu_below(rng, 40); /* fields written */
    if (tu_below(rng, 2)) keep = 40;
    r->label = (float)tu_below(rng, 2);
    n += (size_t)sprintf(out + n, "%d", (int)r->label);
    for (int i = 0; i < 13; i++) {
        r->dense[i] = NAN;
        if ((uint32_t)(1 + i) >= keep) continue;
        out[n++] = '\t';
        if (tu_below(rng, 4) == 0) continue; /* empty: missing */
        int64_t v = (int64_t)tu_below(rng, 1u << 24) - (int64_t)tu_below(rng, 1000);
        r->dense[i] = (float)v;
        n += (size_t)sprintf(out + n, "%lld", (long long)v);
    }
    for (int i = 0; i < 26; i++) {
        r->ids[i] = -1;
        if ((uint32_t)(14 + i) >= keep) continue;
        out[n++] = '\t';
        if (tu_below(rng, 4) == 0) continue;                  /* empty list */
        uint64_t v = tu_next(rng) >> (1 + tu_below(rng, 63)); /* < 2^63, any width */
        r->ids[i] = (int64_t)v;
        const char *fmt = tu_below(rng, 2) ? "%llx" : "%llX";
        if (tu_below(rng, 8) == 0) n += (size_t)sprintf(out + n, "00");
        n += (size_t)sprintf(out + n, fmt, (unsigned long long)v);
    }
    if (tu_below(rng, 10) == 0) out[n++] = '\r';
    return n;
}

/* Read every row of a Criteo table and compare with want[] in order. */
static void check_criteo_table(const char *dir, const crow_t *want, uint64_t nwant,
                               int64_t sample_base)
{
    sl_wh_table_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_open(dir, NULL, &t, &err), SL_OK, "%s", err.msg);
    uint64_t at = 0;
    for (uint32_t p = 0; p < sl_wh_table_num_partitions(t); p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        for (uint32_t f = 0; f < part->num_files; f++) {
            char *path = tu_path(dir, part->files[f]);
            sl_wh_reader_t *r;
            cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
            const sl_wh_rows_t *rows;
            for (;;) {
                cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK, "%s", err.msg);
                if (rows == NULL) break;
                const sl_batch_t *b = &rows->batch;
                cr_assert_eq(b->dense.cols, 13);
                cr_assert_eq(b->sparse.num_keys, 26);
                uint64_t koff[27];
                sl_kjt_key_offsets(&b->sparse, koff);
                for (uint32_t i = 0; i < b->batch_size; i++, at++) {
                    cr_assert_lt(at, nwant, "more rows than lines");
                    const crow_t *w = &want[at];
                    cr_assert_eq(b->sample_ids[i], sample_base + (int64_t)w->line,
                                 "row %llu sample id", (unsigned long long)at);
                    cr_assert_eq(b->labels.data[i], w->label);
                    for (int d = 0; d < 13; d++) {
                        float got = b->dense.data[(size_t)i * 13 + d];
                        if (isnan(w->dense[d]))
                            cr_assert(isnan(got), "line %llu I%d: want missing, got %g",
                                      (unsigned long long)w->line, d + 1, (double)got);
                        else
                            cr_assert_eq(got, w->dense[d], "line %llu I%d: %g != %g",
                                         (unsigned long long)w->line, d + 1, (double)got,
                                         (double)w->dense[d]);
                    }
                    for (int s = 0; s < 26; s++) {
                        int32_t len = b->sparse.lengths[(size_t)s * b->sparse.stride + i];
                        cr_assert_eq(len, w->ids[s] < 0 ? 0 : 1, "line %llu C%d length",
                                     (unsigned long long)w->line, s + 1);
                        if (len == 1) cr_assert_eq(b->sparse.values[koff[s]], w->ids[s]);
                        koff[s] += (uint64_t)len;
                    }
                }
            }
            sl_wh_reader_close(r);
            free(path);
        }
    }
    cr_assert_eq(at, nwant, "rows read back %llu, want %llu", (unsigned long long)at,
                 (unsigned long long)nwant);
    sl_wh_table_close(t);
}

Test(import, criteo_round_trip_exact)
{
    uint64_t rng = tu_seed("import::criteo_round_trip_exact");
    char *dir = tu_mkdtemp("import");
    char *in = tu_path(dir, "day0.tsv"), *table = tu_path(dir, "t");
    enum { N = 3000 };
    crow_t *want = calloc(N, sizeof *want);
    char *text = malloc((size_t)N * 512);
    size_t len = 0;
    uint64_t line = 0, rows = 0;
    for (int i = 0; i < N; i++) {
        line++;
        if (tu_below(&rng, 50) == 0) { /* a blank line: not a row */
            text[len++] = '\n';
            continue;
        }
        want[rows].line = line;
        len += random_line(&rng, &want[rows], text + len);
        rows++;
        if (i < N - 1) text[len++] = '\n'; /* the last line has no newline */
    }
    tu_write_file(in, text, len);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, table, inputs, 1);
    sl_wh_import_summary_t sum;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_read, rows);
    cr_assert_eq(sum.rows_written, rows);
    cr_assert_eq(sum.rows_skipped, 0);
    cr_assert_eq(sum.bytes_in, len);
    cr_assert_eq(sum.files_written, 1);
    cr_assert_str_eq(sum.files[0].output, "ds=2026-03-01/part-00000.slc");
    cr_assert_gt(sum.bytes_out, 0);
    sl_wh_import_summary_free(&sum);
    check_criteo_table(table, want, rows, 0);
    free(want);
    free(text);
    free(in);
    free(table);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import, criteo_handmade_lines)
{
    char *dir = tu_mkdtemp("import");
    char *in = tu_path(dir, "a.tsv"), *table = tu_path(dir, "t");
    /* label only; dense then stop; all 40 fields with empties; CRLF; no final newline */
    const char text[] = "1\n"
                        "0\t5\t\t-3\n"
                        "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t16777216\t68fd1e64\t\t0\t"
                        "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\tDEADbeef\r\n"
                        "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t7fffffffffffffff";
    tu_write_file(in, text, sizeof text - 1);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, table, inputs, 1);
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_written, 4);
    sl_wh_import_summary_free(&sum);
    crow_t want[4];
    for (int r = 0; r < 4; r++) {
        want[r].line = (uint64_t)r + 1;
        for (int d = 0; d < 13; d++)
            want[r].dense[d] = NAN;
        for (int s = 0; s < 26; s++)
            want[r].ids[s] = -1;
    }
    want[0].label = 1;
    want[1].label = 0;
    want[1].dense[0] = 5;
    want[1].dense[2] = -3;
    want[2].label = 1;
    for (int d = 0; d < 12; d++)
        want[2].dense[d] = (float)(d + 1);
    want[2].dense[12] = 16777216.0f;
    want[2].ids[0] = 0x68fd1e64;
    want[2].ids[2] = 0;
    want[2].ids[25] = 0xdeadbeef;
    want[3].label = 0;
    want[3].ids[0] = INT64_MAX;
    check_criteo_table(table, want, 4, 0);
    free(in);
    free(table);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

static const char bad_text[] = "1\t2\n"                            /* line 1: good */
                               "x\t1\n"                            /* 2: bad label */
                               "0\t1.5\n"                          /* 3: I1 not an integer */
                               "0\t\t\t\t\t\t\t\t\t\t\t\t\t\tzz\n" /* 4: C1 not hex */
                               "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t8000000000000000\n" /* 5: > 2^63-1 */
                               "1\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"
                               "\t\t\t\t\t\t\t\t\t\t\t\n"  /* 6: 41 fields */
                               "\t3\n"                     /* 7: missing label */
                               "0\t99999999999999999999\n" /* 8: out of int64 */
                               "1\t7";                     /* 9: good */

static const char *const bad_msgs[] = {
    "bad.tsv:2: field 1 (label): unparsable number 'x'",
    "bad.tsv:3: field 2 (I1): unparsable number '1.5'",
    "bad.tsv:4: field 15 (C1): not a hexadecimal id 'zz'",
    "bad.tsv:5: field 15 (C1): id out of range (max 2^63-1) '8000000000000000'",
    "bad.tsv:6: wrong field count: more than 40 tab-separated fields",
    "bad.tsv:7: field 1 (label): missing",
    "bad.tsv:8: field 2 (I1): unparsable number '99999999999999999999'",
};

Test(import, criteo_bad_rows_skipped_with_file_and_line)
{
    char *dir = tu_mkdtemp("import");
    char *in = tu_path(dir, "bad.tsv"), *table = tu_path(dir, "t");
    tu_write_file(in, bad_text, sizeof bad_text - 1);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, table, inputs, 1);
    o.max_skipped_fraction = 1; /* the bad rows are the point here */
    bad_log_t log = {0};
    o.on_bad_row = log_bad;
    o.bad_row_ctx = &log;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_read, 9);
    cr_assert_eq(sum.rows_written, 2);
    cr_assert_eq(sum.rows_skipped, 7);
    cr_assert_eq(sum.files[0].first_error_line, 2);
    cr_assert_eq(log.n, 7);
    for (uint32_t i = 0; i < 7; i++)
        cr_assert_str_eq(log.text[i], bad_msgs[i]);
    sl_wh_import_summary_free(&sum);
    crow_t want[2];
    want[0] = (crow_t){.label = 1, .line = 1};
    want[1] = (crow_t){.label = 1, .line = 9};
    for (int r = 0; r < 2; r++) {
        for (int d = 0; d < 13; d++)
            want[r].dense[d] = NAN;
        for (int s = 0; s < 26; s++)
            want[r].ids[s] = -1;
    }
    want[0].dense[0] = 2;
    want[1].dense[0] = 7;
    check_criteo_table(table, want, 2, 0);
    free(in);
    free(table);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import, criteo_strict_stops_and_imports_nothing)
{
    char *dir = tu_mkdtemp("import");
    char *good = tu_path(dir, "good.tsv"), *in = tu_path(dir, "bad.tsv");
    char *table = tu_path(dir, "t");
    tu_write_file(good, "1\t2\n0\t3\n", 8);
    tu_write_file(in, bad_text, sizeof bad_text - 1);
    const char *inputs[] = {good, in};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, table, inputs, 2);
    o.strict = true;
    o.threads = 1; /* good.tsv is committed to its staging name first */
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_CORRUPT);
    char want[600];
    snprintf(want, sizeof want, "%s:2: field 1 (label): unparsable number 'x'", in);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(sum.files[1].rows_skipped, 1);
    cr_assert_eq(sum.rows_written, 0);
    sl_wh_import_summary_free(&sum);
    /* Neither file appears, not even the good one, no staging file is left,
     * and the table directory the import created is gone with them. */
    struct stat st;
    cr_assert_eq(stat(table, &st), -1, "%s was left behind", table);
    cr_assert_eq(errno, ENOENT);
    free(good);
    free(in);
    free(table);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import, criteo_parallel_inputs_deterministic)
{
    uint64_t rng = tu_seed("import::criteo_parallel_inputs_deterministic");
    char *dir = tu_mkdtemp("import");
    enum { FILES = 5, ROWS = 700 };
    char *inputs[FILES];
    crow_t *want = calloc(FILES * ROWS, sizeof *want);
    char *text = malloc((size_t)ROWS * 512);
    for (int f = 0; f < FILES; f++) {
        char name[32];
        snprintf(name, sizeof name, "in%d.tsv", f);
        inputs[f] = tu_path(dir, name);
        size_t len = 0;
        for (int i = 0; i < ROWS; i++) {
            want[f * ROWS + i].line = (uint64_t)i + 1;
            len += random_line(&rng, &want[f * ROWS + i], text + len);
            text[len++] = '\n';
        }
        tu_write_file(inputs[f], text, len);
    }
    char *out[2];
    size_t out_len[2];
    for (int run = 0; run < 2; run++) {
        char tname[8];
        snprintf(tname, sizeof tname, "t%d", run);
        char *table = tu_path(dir, tname);
        sl_wh_import_opts_t o =
            opts_for(SL_WH_IMPORT_CRITEO, table, (const char *const *)inputs, FILES);
        o.threads = run == 0 ? 1 : 3;
        sl_error_t err = {0};
        sl_wh_import_summary_t sum;
        cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sum.rows_written, FILES * ROWS);
        cr_assert_eq(sum.files_written, FILES);
        for (int f = 0; f < FILES; f++) {
            char name[64];
            snprintf(name, sizeof name, "ds=2026-03-01/part-%05d.slc", f);
            cr_assert_str_eq(sum.files[f].output, name);
        }
        sl_wh_import_summary_free(&sum);
        uint64_t rows;
        out[run] = cat_table(table, &out_len[run], &rows);
        cr_assert_eq(rows, FILES * ROWS);
        free(table);
    }
    cr_assert_eq(out_len[0], out_len[1]);
    cr_assert(memcmp(out[0], out[1], out_len[0]) == 0, "thread count changed the table");
    /* Every file's rows, with sample ids part * 1e10 + line. */
    char *table = tu_path(dir, "t0");
    for (int f = 0; f < FILES; f++)
        for (int i = 0; i < ROWS; i++)
            want[f * ROWS + i].line += (uint64_t)f * 10000000000ull;
    check_criteo_table(table, want, FILES * ROWS, 0);
    /* A second import into the same partition continues the part numbers. */
    const char *one[] = {inputs[0]};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, table, one, 1);
    sl_wh_import_summary_t sum;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(sum.files[0].output, "ds=2026-03-01/part-00005.slc");
    sl_wh_import_summary_free(&sum);
    free(table);
    for (int f = 0; f < FILES; f++)
        free(inputs[f]);
    free(out[0]);
    free(out[1]);
    free(want);
    free(text);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import, criteo_parser_rejects_garbage_without_crashing)
{
    uint64_t rng = tu_seed("import::criteo_parser_rejects_garbage_without_crashing");
    sl_wh_schema_t *s = sl_wh_criteo_schema(NULL);
    sl_wh_row_buf_t *b = sl_wh_row_buf_new(s, NULL);
    cr_assert_not_null(b);
    static const char alphabet[] = "0123456789abcdefABCDEFxyz-+\t\t\t\r .";
    char line[300];
    uint32_t ok = 0;
    for (int i = 0; i < 20000; i++) {
        size_t len = tu_below(&rng, sizeof line);
        for (size_t k = 0; k < len; k++)
            line[k] = alphabet[tu_below(&rng, sizeof alphabet - 1)];
        sl_wh_row_t row;
        sl_error_t err = {0};
        sl_err_t rc = sl_wh_criteo_parse_line(b, line, len, &row, &err);
        cr_assert(rc == SL_OK || rc == SL_ERR_CORRUPT);
        cr_assert(rc == SL_OK || err.msg[0] != '\0');
        ok += rc == SL_OK;
    }
    cr_assert_gt(ok, 0); /* some random lines are valid (e.g. "1") */
    sl_wh_row_buf_destroy(b);
    sl_wh_schema_destroy(s);
    tu_alloc_assert_clean(&g_ta);
}

/* ---- every allocation failure: a clean error, nothing added ------------------------- */

/* Import o (its table_dir is replaced) with its k-th allocation failing,
 * for every k: SL_ERR_NOMEM saying what, or every row imported anyway (a
 * failure absorbed); never a row counted bad for lack of memory, never a
 * file added by an import that failed, nothing leaked. @return the number
 * of allocation failures walked. */
static uint64_t import_walk(const char *dir, sl_wh_import_opts_t o, uint64_t rows, uint32_t files)
{
    char table[400];
    uint64_t k = 1;
    for (;; k++) {
        snprintf(table, sizeof table, "%s/walk-%llu", dir, (unsigned long long)k);
        o.table_dir = table;
        sl_wh_import_summary_t sum;
        sl_error_t err = {0};
        tu_alloc_fail_at(&g_ta, k, false);
        sl_err_t rc = sl_wh_import(&o, &sum, &err);
        bool failed = tu_alloc_failures(&g_ta) > 0;
        tu_alloc_fail_at(&g_ta, 0, false);
        if (rc == SL_OK) {
            cr_assert_eq(sum.rows_written, rows, "allocation %llu: %llu rows of %llu",
                         (unsigned long long)k, (unsigned long long)sum.rows_written,
                         (unsigned long long)rows);
            cr_assert_eq(sum.rows_skipped, 0, "allocation %llu: rows skipped: %s",
                         (unsigned long long)k, sum.files[0].first_error);
            cr_assert_eq(count_files(table, o.partition, false), files);
        } else {
            cr_assert(failed, "allocation %llu: %s without a failed allocation: %s",
                      (unsigned long long)k, sl_err_str(rc), err.msg);
            cr_assert_eq(rc, SL_ERR_NOMEM, "allocation %llu: %s: %s", (unsigned long long)k,
                         sl_err_str(rc), err.msg);
            cr_assert_neq(err.msg[0], '\0', "allocation %llu: no message", (unsigned long long)k);
            cr_assert_eq(count_files(table, o.partition, true), 0,
                         "allocation %llu: a failed import left files", (unsigned long long)k);
        }
        sl_wh_import_summary_free(&sum);
        char why[256];
        cr_assert(tu_alloc_clean(&g_ta, why, sizeof why), "allocation %llu: %s",
                  (unsigned long long)k, why);
        tu_rm_tree(table);
        if (!failed) break;
    }
    return k - 1;
}

Test(import, criteo_under_every_allocation_failure)
{
    uint64_t rng = tu_seed("import::criteo_under_every_allocation_failure");
    char *dir = tu_mkdtemp("import-nomem");
    char *in[2] = {tu_path(dir, "a.tsv"), tu_path(dir, "b.tsv")};
    enum { LINES = 120 };
    char *text = malloc((size_t)LINES * 512);
    for (int f = 0; f < 2; f++) {
        size_t len = 0;
        for (int i = 0; i < LINES; i++) {
            crow_t r;
            len += random_line(&rng, &r, text + len);
            text[len++] = '\n';
        }
        tu_write_file(in[f], text, len);
    }
    const char *inputs[] = {in[0], in[1]};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, NULL, inputs, 2);
    o.threads = 1; /* one order of allocations, so that k walks all of them */
    o.writer.stripe_rows = 50;
    uint64_t walked = import_walk(dir, o, 2 * LINES, 2);
    cr_log_info("criteo import: %llu allocation failures walked", (unsigned long long)walked);
    cr_assert_gt(walked, 20);
    free(text);
    free(in[0]);
    free(in[1]);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import, jsonl_with_inference_under_every_allocation_failure)
{
    char *dir = tu_mkdtemp("import-nomem");
    char *in = tu_path(dir, "rows.jsonl");
    enum { LINES = 200 };
    char *text = malloc((size_t)LINES * 256);
    size_t len = 0;
    for (int i = 0; i < LINES; i++)
        len += (size_t)sprintf(text + len,
                               "{\"labels\":{\"click\":%d},\"dense\":{\"price\":%d.5},"
                               "\"sparse\":{\"item\":[%d,%d],\"hist\":[]},"
                               "\"weighted\":{\"tags\":{\"ids\":[%d],\"weights\":[0.25]}}}\n",
                               i % 2, i, i, 2 * i, i % 7);
    tu_write_file(in, text, len);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_JSONL, NULL, inputs, 1);
    o.threads = 1;
    o.writer.stripe_rows = 64;
    uint64_t walked = import_walk(dir, o, LINES, 1);
    cr_log_info("jsonl import: %llu allocation failures walked", (unsigned long long)walked);
    cr_assert_gt(walked, 20);
    free(text);
    free(in);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* What `sluice table import` reads (src/warehouse/import_source.c) and
 * what a failed import leaves (import.c): gzip (two members) and zstd input,
 * told by magic bytes under any name, import the same rows as the plain
 * file, also from standard input and with jsonl schema inference; input
 * that is not text (bzip2, NUL bytes, invalid UTF-8, binary inside gzip) and
 * corrupt or truncated compressed input fail with one error naming the file
 * and what it looks like, before any bad-row message; and a failed import
 * (bad input, strict mode, a write failing as on a full disk) leaves no
 * table directory behind, while a directory that existed is kept. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/table_tools.h"

static tu_alloc_t g_ta;

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(import_input, .init = init_alloc);

typedef struct bad_count {
    uint32_t n;
} bad_count_t;

static void count_bad(void *ctx, const char *input, uint64_t line, const char *message)
{
    (void)input, (void)line, (void)message;
    ((bad_count_t *)ctx)->n++;
}

static sl_wh_import_opts_t opts_for(sl_wh_import_format_t fmt, const char *table,
                                    const char *const *inputs, uint32_t n, bad_count_t *bad)
{
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.allocator = &g_ta.base;
    o.format = fmt;
    o.table_dir = table;
    o.partition = "ds=2026-03-01";
    o.inputs = inputs;
    o.num_inputs = n;
    o.writer.no_sync = true;
    o.writer.stripe_rows = 1000;
    o.on_bad_row = count_bad;
    o.bad_row_ctx = bad;
    return o;
}

/* N Criteo lines (well over the 64 KiB checked for being text, so the
 * decoders stream past it). */
static char *criteo_text(uint32_t n, size_t *len)
{
    uint64_t rng = tu_seed("import_input::criteo_text");
    char *t = malloc((size_t)n * 400);
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        at += (size_t)sprintf(t + at, "%d", (int)tu_below(&rng, 2));
        for (int d = 0; d < 13; d++)
            at += (size_t)sprintf(t + at, "\t%d", (int)tu_below(&rng, 999));
        for (int s = 0; s < 26; s++)
            at += (size_t)sprintf(t + at, "\t%08llx", (unsigned long long)(tu_next(&rng) >> 32));
        t[at++] = '\n';
    }
    *len = at;
    return t;
}

static void write_gzip(const char *path, const char *text, size_t len, int members)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    size_t per = len / (size_t)members;
    for (int m = 0; m < members; m++) {
        size_t off = per * (size_t)m, n = m == members - 1 ? len - off : per;
        z_stream z = {0};
        cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
        size_t cap = deflateBound(&z, (uLong)n);
        unsigned char *out = malloc(cap);
        z.next_in = (Bytef *)(text + off);
        z.avail_in = (uInt)n;
        z.next_out = out;
        z.avail_out = (uInt)cap;
        cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
        cr_assert_eq(fwrite(out, 1, cap - z.avail_out, f), cap - z.avail_out);
        deflateEnd(&z);
        free(out);
    }
    fclose(f);
}

static size_t write_zstd(const char *path, const char *text, size_t len)
{
    size_t cap = ZSTD_compressBound(len);
    char *out = malloc(cap);
    size_t n = ZSTD_compress(out, cap, text, len, 3);
    cr_assert(!ZSTD_isError(n));
    tu_write_file(path, out, n);
    free(out);
    return n;
}

static char *cat_table(const char *dir)
{
    char *buf = NULL;
    size_t len;
    FILE *f = open_memstream(&buf, &len);
    uint64_t rows;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_cat_table(dir, NULL, f, &rows, &err), SL_OK, "%s", err.msg);
    fclose(f);
    return buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Import one input; @return the import's code, with err's message. */
static sl_err_t import1(sl_wh_import_format_t fmt, const char *table, const char *input,
                        bool strict, bad_count_t *bad, uint64_t *rows, sl_error_t *err)
{
    const char *inputs[] = {input};
    sl_wh_import_opts_t o = opts_for(fmt, table, inputs, 1, bad);
    o.strict = strict;
    sl_wh_import_summary_t sum;
    sl_err_t rc = sl_wh_import(&o, &sum, err);
    if (rows != NULL) *rows = sum.rows_written;
    sl_wh_import_summary_free(&sum);
    return rc;
}

Test(import_input, gzip_and_zstd_import_the_plain_rows)
{
    char *dir = tu_mkdtemp("import_input");
    size_t len;
    char *text = criteo_text(2000, &len);
    cr_assert_gt(len, (size_t)3 << 16);
    char *plain = tu_path(dir, "day_0"), *gz = tu_path(dir, "day_0.gz");
    char *zst = tu_path(dir, "day_0.data"); /* zstd under a name that does not say so */
    tu_write_file(plain, text, len);
    write_gzip(gz, text, len, 2);
    write_zstd(zst, text, len);
    const char *names[] = {plain, gz, zst};
    char *want = NULL;
    for (int i = 0; i < 3; i++) {
        char tname[32];
        snprintf(tname, sizeof tname, "t%d", i);
        char *table = tu_path(dir, tname);
        bad_count_t bad = {0};
        uint64_t rows = 0;
        sl_error_t err = {0};
        cr_assert_eq(import1(SL_WH_IMPORT_CRITEO, table, names[i], false, &bad, &rows, &err), SL_OK,
                     "%s: %s", names[i], err.msg);
        cr_assert_eq(rows, 2000, "%s: %llu rows", names[i], (unsigned long long)rows);
        cr_assert_eq(bad.n, 0);
        char *got = cat_table(table);
        if (want == NULL)
            want = got;
        else {
            cr_assert_str_eq(got, want, "%s: rows differ from the plain file's", names[i]);
            free(got);
        }
        free(table);
    }

    /* Standard input compressed, two inputs in parallel. */
    int saved = dup(STDIN_FILENO), fd = open(zst, O_RDONLY);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, STDIN_FILENO);
    close(fd);
    char *table = tu_path(dir, "t_stdin");
    const char *inputs[] = {gz, "-"};
    bad_count_t bad = {0};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, table, inputs, 2, &bad);
    o.threads = 2;
    sl_wh_import_summary_t sum;
    sl_error_t err = {0};
    sl_err_t rc = sl_wh_import(&o, &sum, &err);
    dup2(saved, STDIN_FILENO);
    close(saved);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_written, 4000);
    cr_assert_eq(sum.files_written, 2);
    sl_wh_import_summary_free(&sum);
    free(table);

    free(want);
    free(text);
    free(plain), free(gz), free(zst);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import_input, jsonl_schema_inferred_through_gzip)
{
    char *dir = tu_mkdtemp("import_input");
    char text[8192];
    size_t len = 0;
    for (int i = 0; i < 50; i++)
        len +=
            (size_t)snprintf(text + len, sizeof text - len,
                             "{\"sample_id\":%d,\"labels\":{\"click\":%d},\"dense\":{\"age\":%d},"
                             "\"sparse\":{\"item\":[%d,%d]}}\n",
                             i, i % 2, 20 + i, i, i * 7);
    char *plain = tu_path(dir, "rows.jsonl"), *gz = tu_path(dir, "rows.jsonl.gz");
    tu_write_file(plain, text, len);
    write_gzip(gz, text, len, 1);
    char *tp = tu_path(dir, "tp"), *tg = tu_path(dir, "tg");
    bad_count_t bad = {0};
    uint64_t rows;
    sl_error_t err = {0};
    cr_assert_eq(import1(SL_WH_IMPORT_JSONL, tp, plain, true, &bad, &rows, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(rows, 50);
    cr_assert_eq(import1(SL_WH_IMPORT_JSONL, tg, gz, true, &bad, &rows, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(rows, 50);
    char *a = cat_table(tp), *b = cat_table(tg);
    cr_assert_str_eq(b, a);
    free(a), free(b), free(plain), free(gz), free(tp), free(tg);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* Import path into dir/t: it must fail with code and exactly message
 * (path substituted for %s), call no bad-row callback, leave no dir/t. */
static void expect_refused(const char *dir, sl_wh_import_format_t fmt, const char *path,
                           sl_err_t code, const char *fmt_msg)
{
    char *table = tu_path(dir, "t");
    bad_count_t bad = {0};
    sl_error_t err = {0};
    cr_assert_eq(import1(fmt, table, path, false, &bad, NULL, &err), code, "%s: %s", path, err.msg);
    char want[1024];
    snprintf(want, sizeof want, fmt_msg, path);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(bad.n, 0, "%s: %u bad-row messages", path, bad.n);
    cr_assert(!exists(table), "%s: the table directory was left behind", path);
    free(table);
}

#define TAIL "; sluice table import reads text (Criteo TSV, jsonl or CSV), plain, gzip or zstd"

Test(import_input, not_text_refused_with_one_error)
{
    char *dir = tu_mkdtemp("import_input");
    char *p = tu_path(dir, "day_0.tsv"); /* names never decide */

    tu_write_file(p, "BZh91AY&SY\x01\x02\x03", 13);
    expect_refused(dir, SL_WH_IMPORT_CRITEO, p, SL_ERR_INVALID,
                   "%s: not text: it looks like bzip2-compressed data (decompress it first: "
                   "bunzip2 -k)" TAIL);
    expect_refused(dir, SL_WH_IMPORT_JSONL, p, SL_ERR_INVALID,
                   "%s: not text: it looks like bzip2-compressed data (decompress it first: "
                   "bunzip2 -k)" TAIL);
    tu_write_file(p,
                  "\xfd"
                  "7zXZ\0\0\x04",
                  8);
    expect_refused(dir, SL_WH_IMPORT_CRITEO, p, SL_ERR_INVALID,
                   "%s: not text: it looks like xz-compressed data (decompress it first: "
                   "unxz -k)" TAIL);
    tu_write_file(p, "1\t2\t3\nabc\0def\n", 14);
    expect_refused(dir, SL_WH_IMPORT_CRITEO, p, SL_ERR_INVALID,
                   "%s: not text: a NUL byte at byte 9 of its content" TAIL);
    tu_write_file(p, "1\t2\t\xc3\x28\n", 7);
    expect_refused(dir, SL_WH_IMPORT_CRITEO, p, SL_ERR_INVALID,
                   "%s: not text: invalid UTF-8 (byte 0xc3) at byte 4 of its content" TAIL);
    /* Text that is UTF-8 passes the check (and is then parsed as rows). */
    tu_write_file(p, "1\t2\t\xc3\xa9t\xc3\xa9\n", 10);
    char *table = tu_path(dir, "t");
    bad_count_t bad = {0};
    sl_error_t err = {0};
    /* C1 'été' is no hex id: a bad row, not a refused file; the import
     * then writes no row, which is refused too, naming what it read. */
    cr_assert_eq(import1(SL_WH_IMPORT_CRITEO, table, p, false, &bad, NULL, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "refused: no row was written (1 read, all skipped as bad); is the "
                              "input Criteo TSV?");
    cr_assert_eq(bad.n, 1);
    cr_assert(!exists(table), "the refused import left its table directory");
    tu_rm_tree(table);

    /* Binary content inside gzip. */
    char *gz = tu_path(dir, "blob.gz");
    char bin[256];
    for (int i = 0; i < 256; i++)
        bin[i] = (char)(255 - i);
    write_gzip(gz, bin, sizeof bin, 1);
    expect_refused(dir, SL_WH_IMPORT_CRITEO, gz, SL_ERR_INVALID,
                   "%s: not text: invalid UTF-8 (byte 0xff) at byte 0 of its content "
                   "(gzip-decompressed)" TAIL);

    /* Truncated and corrupt compressed input. */
    size_t len;
    char *text = criteo_text(2000, &len);
    write_gzip(gz, text, len, 1);
    char *whole = tu_read_file(gz);
    struct stat st;
    cr_assert_eq(stat(gz, &st), 0);
    tu_write_file(gz, whole, 100000);
    expect_refused(dir, SL_WH_IMPORT_CRITEO, gz, SL_ERR_CORRUPT,
                   "%s: truncated gzip data (the file ends inside a member after 100000 bytes)");
    whole[50000] ^= 0x55;
    whole[50001] ^= 0x55;
    tu_write_file(gz, whole, (size_t)st.st_size);
    char *table2 = tu_path(dir, "t");
    cr_assert_eq(import1(SL_WH_IMPORT_CRITEO, table2, gz, false, &bad, NULL, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, ": corrupt gzip data near compressed byte ") != NULL, "%s", err.msg);
    cr_assert(!exists(table2));
    free(whole);
    char *zst = tu_path(dir, "day.zst");
    size_t zn = write_zstd(zst, text, len);
    char *zwhole = tu_read_file(zst);
    tu_write_file(zst, zwhole, zn - 10);
    char want[256];
    snprintf(want, sizeof want,
             "%%s: truncated zstd data (the file ends inside a frame after %zu bytes)", zn - 10);
    expect_refused(dir, SL_WH_IMPORT_CRITEO, zst, SL_ERR_CORRUPT, want);
    free(zwhole), free(zst), free(text), free(table2), free(gz), free(table), free(p);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import_input, failed_import_leaves_no_directory)
{
    char *dir = tu_mkdtemp("import_input");
    char *bad_in = tu_path(dir, "bad.tsv");
    tu_write_file(bad_in, "1\t2\n0\tx\n", 8);
    char *table = tu_path(dir, "t");
    bad_count_t bad = {0};
    sl_error_t err = {0};

    /* Strict mode: the bad row fails the import; nothing stays. */
    cr_assert_eq(import1(SL_WH_IMPORT_CRITEO, table, bad_in, true, &bad, NULL, &err),
                 SL_ERR_CORRUPT);
    cr_assert(!exists(table));
    /* A missing input. */
    char *missing = tu_path(dir, "nope.tsv");
    cr_assert_eq(import1(SL_WH_IMPORT_CRITEO, table, missing, false, &bad, NULL, &err), SL_ERR_IO);
    cr_assert(!exists(table));

    /* A directory that existed (empty) is kept, without the schema put in it. */
    cr_assert_eq(mkdir(table, 0755), 0);
    cr_assert_eq(import1(SL_WH_IMPORT_CRITEO, table, bad_in, true, &bad, NULL, &err),
                 SL_ERR_CORRUPT);
    cr_assert(exists(table));
    char *schema = tu_path(table, "_schema");
    cr_assert(!exists(schema));

    /* A table with a partition: a failed import into a new partition takes
     * back only that partition's directory. */
    char *good = tu_path(dir, "good.tsv");
    tu_write_file(good, "1\t2\n0\t3\n", 8);
    cr_assert_eq(import1(SL_WH_IMPORT_CRITEO, table, good, true, &bad, NULL, &err), SL_OK, "%s",
                 err.msg);
    const char *inputs[] = {bad_in};
    sl_wh_import_opts_t o = opts_for(SL_WH_IMPORT_CRITEO, table, inputs, 1, &bad);
    o.partition = "ds=2026-03-02/hour=07";
    o.strict = true;
    cr_assert_eq(sl_wh_import(&o, NULL, &err), SL_ERR_CORRUPT);
    char *p1 = tu_path(table, "ds=2026-03-02"), *p0 = tu_path(table, "ds=2026-03-01");
    cr_assert(!exists(p1));
    cr_assert(exists(p0));
    cr_assert(exists(schema));
    char *rows = cat_table(table);
    /* Only good.tsv's two rows (C1..C26 empty). */
    cr_assert(strncmp(rows,
                      "{\"sample_id\":1,\"session_id\":0,\"ts\":0,\"labels\":{\"label\":1.0},"
                      "\"dense\":{\"I1\":2.0},",
                      79) == 0,
              "%s", rows);
    const char *second = strchr(rows, '\n') + 1;
    cr_assert(strncmp(second,
                      "{\"sample_id\":2,\"session_id\":0,\"ts\":0,\"labels\":{\"label\":0.0},"
                      "\"dense\":{\"I1\":3.0},",
                      79) == 0,
              "%s", second);
    cr_assert_eq(strchr(second, '\n')[1], '\0', "more than 2 rows: %s", rows);
    free(rows), free(p0), free(p1), free(good), free(schema), free(missing), free(table),
        free(bad_in);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

/* A write that fails as on a full disk (RLIMIT_FSIZE: write fails with
 * EFBIG once the file would pass the limit). Criterion runs each test in a
 * process of its own, so the limit ends with the test. */
Test(import_input, write_failure_leaves_no_directory)
{
    char *dir = tu_mkdtemp("import_input");
    size_t len;
    char *text = criteo_text(4000, &len);
    char *in = tu_path(dir, "day.tsv"), *table = tu_path(dir, "t");
    tu_write_file(in, text, len);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {64 << 10, 64 << 10};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    bad_count_t bad = {0};
    sl_error_t err = {0};
    sl_err_t rc = import1(SL_WH_IMPORT_CRITEO, table, in, false, &bad, NULL, &err);
    cr_assert_eq(rc, SL_ERR_IO, "rc %d: %s", (int)rc, err.msg);
    cr_assert(strstr(err.msg, strerror(EFBIG)) != NULL, "%s", err.msg);
    cr_assert(!exists(table), "the table directory was left behind after: %s", err.msg);
    free(text), free(in), free(table);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

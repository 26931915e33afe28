/* `sluice table ...` end to end: runs the real binary (SLUICE_BINARY) in a
 * temporary directory. gen -> inspect -> verify -> cat; a flipped byte makes
 * verify exit 1 naming file, stripe and stream; jsonl and Criteo imports
 * through the command line; usage errors exit 2; and the MovieLens pipeline
 * (examples/movielens_sessions.py -> import with storage dedup -> verify ->
 * cat) when python3 and the shared ratings are there. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "testutil.h"
#include "warehouse/warehouse.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-table-cli-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    tu_rm_tree(tmpdir);
}

/* Run `sluice ARGS` in tmpdir with stdout to out.txt and stderr to err.txt.
 * @return the exit code. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s > out.txt 2> err.txt < /dev/null", tmpdir,
             tu_binary(), args);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit", cmd);
    return WEXITSTATUS(st);
}

/* The same with standard input from the file in (in tmpdir). */
static int run_stdin(const char *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_stdin(const char *in, const char *fmt, ...)
{
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s > out.txt 2> err.txt < '%s'", tmpdir, tu_binary(),
             args, in);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit", cmd);
    return WEXITSTATUS(st);
}

/* Contents of a file in tmpdir (caller frees). */
static char *slurp(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

static void write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static uint64_t count_lines(const char *s)
{
    uint64_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

#define EXPECT_OUT(needle)                                                                         \
    do {                                                                                           \
        char *o_ = slurp("out.txt", NULL);                                                         \
        cr_assert_not_null(strstr(o_, needle), "stdout lacks '%s':\n%s", needle, o_);              \
        free(o_);                                                                                  \
    } while (0)
#define EXPECT_ERR(needle)                                                                         \
    do {                                                                                           \
        char *e_ = slurp("err.txt", NULL);                                                         \
        cr_assert_not_null(strstr(e_, needle), "stderr lacks '%s':\n%s", needle, e_);              \
        free(e_);                                                                                  \
    } while (0)

TestSuite(table_cli, .init = setup, .fini = teardown);

Test(table_cli, gen_inspect_verify_cat)
{
    cr_assert_eq(run("table gen --preset sessions --rows 5000 --table t --partitions 2 --files 2 "
                     "--seed 7 --active-sessions 64 --cluster "
                     "--dedup-group user=user_id,user_hist,user_cat --stripe-rows 1000 --no-sync"),
                 0);
    EXPECT_OUT("generated: 5000 rows");
    cr_assert_eq(run("table inspect t"), 0);
    EXPECT_OUT("partitions: 2, files: 4, stripes: 8, rows: 5000");
    EXPECT_OUT("ds=2026-01-02");
    EXPECT_OUT("dedup group user: 5000 rows stored as");

    cr_assert_eq(run("table inspect t --json"), 0);
    char *js = slurp("out.txt", NULL);
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    cr_assert_not_null(j, "inspect --json: %s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(j, "rows")), 5000);
    json_decref(j);
    free(js);

    cr_assert_eq(run("table verify t"), 0);
    EXPECT_OUT("ok: 4 files (0 bad), 8 stripes");

    cr_assert_eq(run("table cat t --limit 7"), 0);
    char *out = slurp("out.txt", NULL);
    cr_assert_eq(count_lines(out), 7);
    char *line = out;
    for (int i = 0; i < 7; i++) {
        char *nl = strchr(line, '\n');
        json_t *row = json_loadb(line, (size_t)(nl - line), 0, &je);
        cr_assert_not_null(row, "cat line %d: %s", i, je.text);
        cr_assert_eq(json_array_size(json_object_get(json_object_get(row, "sparse"), "user_cat")),
                     20);
        json_decref(row);
        line = nl + 1;
    }
    free(out);

    cr_assert_eq(run("table cat t --features item_id,position --partition-filter ds=2026-01-02"),
                 0);
    out = slurp("out.txt", NULL);
    cr_assert_eq(count_lines(out), 2500);
    j = json_loadb(out, (size_t)(strchr(out, '\n') - out), 0, &je);
    cr_assert_eq(json_object_size(json_object_get(j, "sparse")), 1);
    cr_assert_not_null(json_object_get(json_object_get(j, "dense"), "position"));
    cr_assert_geq(json_integer_value(json_object_get(j, "sample_id")), 2500);
    json_decref(j);
    free(out);

    cr_assert_eq(run("table cat t --limit 0"), 0);
    out = slurp("out.txt", NULL);
    cr_assert_str_eq(out, "");
    free(out);
}

Test(table_cli, verify_names_file_stripe_and_stream)
{
    cr_assert_eq(run("table gen --preset criteo --rows 3000 --table t --stripe-rows 1000 "
                     "--no-sync --quiet"),
                 0);
    cr_assert_eq(run("table verify t"), 0);
    /* Flip one byte in the middle of stripe 1's data. */
    char path[512];
    snprintf(path, sizeof path, "%s/t/ds=2026-01-01/part-00000.slc", tmpdir);
    sl_wh_reader_t *r;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
    sl_wh_stripe_info_t info;
    cr_assert_eq(sl_wh_reader_stripe_info(r, 1, &info), SL_OK);
    sl_wh_reader_close(r);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    off_t at = (off_t)(info.offset + info.bytes / 2);
    unsigned char b;
    cr_assert_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);

    cr_assert_eq(run("table verify t"), 1);
    EXPECT_OUT("problem: ds=2026-01-01/part-00000.slc stripe 1 stream '");
    EXPECT_OUT("checksum mismatch");
    EXPECT_OUT("FAILED: 1 files (1 bad)");
    /* cat stops with the same kind of message instead of printing bad data. */
    cr_assert_eq(run("table cat t"), 1);
    EXPECT_ERR("ds=2026-01-01/part-00000.slc stripe 1");
}

Test(table_cli, import_jsonl_round_trip)
{
    const char *rows[] = {
        "{\"sample_id\":1,\"session_id\":10,\"ts\":100,\"labels\":{\"click\":1.0},"
        "\"dense\":{\"price\":2.5},\"sparse\":{\"item\":[7,8],\"hist\":[]},"
        "\"weighted\":{\"tags\":{\"ids\":[3],\"weights\":[0.25]}}}",
        "{\"sample_id\":2,\"session_id\":10,\"ts\":101,\"labels\":{\"click\":0.0},"
        "\"dense\":{},\"sparse\":{\"item\":[9],\"hist\":[1,2,3]},"
        "\"weighted\":{\"tags\":{\"ids\":[],\"weights\":[]}}}",
        "{\"sample_id\":3,\"session_id\":11,\"ts\":102,\"labels\":{\"click\":null},"
        "\"dense\":{\"price\":-1e+20},\"sparse\":{\"item\":[],\"hist\":[9223372036854775807]},"
        "\"weighted\":{\"tags\":{\"ids\":[4,5],\"weights\":[1.5,null]}}}",
    };
    char text[2048] = "";
    for (int i = 0; i < 3; i++) {
        strcat(text, rows[i]);
        strcat(text, "\n");
    }
    strcat(text, "{\"sparse\":{\"item\":\"oops\"}}"); /* line 4: bad, no final newline */
    write_file("in.jsonl", text);
    cr_assert_eq(run("table import --format jsonl --input in.jsonl --table t "
                     "--partition ds=2026-05-01 --infer-lines 3 --no-sync "
                     "--max-skipped-fraction 0.25"),
                 0);
    EXPECT_OUT("imported: 4 rows read, 3 written, 1 skipped");
    EXPECT_ERR("in.jsonl:4: sparse 'item': expected an array of ids, got a string");
    cr_assert_eq(run("table cat t"), 0);
    char *out = slurp("out.txt", NULL);
    cr_assert_eq(count_lines(out), 3);
    char *line = out;
    for (int i = 0; i < 3; i++) {
        char *nl = strchr(line, '\n');
        json_error_t je;
        json_t *got = json_loadb(line, (size_t)(nl - line), 0, &je);
        json_t *want = json_loads(rows[i], 0, &je);
        cr_assert(got && want && json_equal(got, want), "row %d:\n got  %.*s\n want %s", i,
                  (int)(nl - line), line, rows[i]);
        json_decref(got);
        json_decref(want);
        line = nl + 1;
    }
    free(out);
    /* --strict fails on line 4 and adds nothing. */
    cr_assert_eq(run("table import --format jsonl --input in.jsonl --table t "
                     "--partition ds=2026-05-02 --strict --no-sync"),
                 1);
    EXPECT_ERR("in.jsonl:4: sparse 'item'");
    EXPECT_ERR("nothing was added");
    cr_assert_eq(run("table inspect t"), 0);
    EXPECT_OUT("rows: 3\n");
}

Test(table_cli, import_criteo_and_usage_errors)
{
    write_file("a.tsv", "1\t5\t\t-3\t\t\t\t\t\t\t\t\t\t7\t68fd1e64\t\tDEADBEEF\n"
                        "0\tnope\n"
                        "0");
    write_file("b.tsv", "1\t1\t2\n");
    cr_assert_eq(run("table import --format criteo --input a.tsv b.tsv --table t "
                     "--partition ds=2026-01-01 --threads 2 --no-sync "
                     "--max-skipped-fraction 0.25"),
                 0);
    EXPECT_OUT("imported: 4 rows read, 3 written, 1 skipped");
    EXPECT_OUT("a.tsv: 1 bad row, first: a.tsv:2: field 2 (I1): unparsable number 'nope'");
    EXPECT_ERR("a.tsv:2: field 2 (I1): unparsable number 'nope'");
    cr_assert_eq(run("table cat t --features I1,I3,C1,C3 --limit 1"), 0);
    char *out = slurp("out.txt", NULL);
    json_t *got = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *want = json_loads("{\"sample_id\":1,\"session_id\":0,\"ts\":0,"
                              "\"labels\":{\"label\":1.0},\"dense\":{\"I1\":5.0,\"I3\":-3.0},"
                              "\"sparse\":{\"C1\":[1761418852],\"C3\":[3735928559]}}",
                              0, NULL);
    cr_assert(got && json_equal(got, want), "got %s", out);
    json_decref(got);
    json_decref(want);
    free(out);
    cr_assert_eq(run("table verify t"), 0);
    EXPECT_OUT("ok: 2 files");

    cr_assert_eq(run("table import --input a.tsv --table t"), 2);
    EXPECT_ERR("--format criteo|jsonl|csv|parquet is required");
    cr_assert_eq(run("table import --format xml --input a.tsv --table t"), 2);
    cr_assert_eq(run("table import --format criteo --table t"), 2);
    cr_assert_eq(run("table import --format criteo --input a.tsv"), 2);
    cr_assert_eq(run("table import --format criteo --input a.tsv --table t --schema s.json"), 2);
    cr_assert_eq(run("table gen --preset criteo --rows x --table g"), 2);
    cr_assert_eq(run("table gen --preset nope --rows 5 --table g"), 2);
    EXPECT_ERR("unknown preset 'nope'");
    cr_assert_eq(run("table gen --preset criteo --rows 5 --table g --dedup-group x"), 2);
    cr_assert_eq(run("table gen --rows 5 --table g"), 2);
    cr_assert_eq(run("table verify"), 2);
    cr_assert_eq(run("table cat t --limit -1"), 2);
    cr_assert_eq(run("table frobnicate"), 2);
    cr_assert_eq(run("table --bogus-option"), 2);
    cr_assert_eq(run("table"), 2);
    cr_assert_eq(run("table verify does-not-exist"), 1);
    cr_assert_eq(run("table --help"), 0);
    EXPECT_OUT("usage: sluice table");
    cr_assert_eq(run("table import --help"), 0);
    EXPECT_OUT("--dedup-group");
}

Test(table_cli, movielens_sessions_pipeline, .timeout = 120)
{
    const char *src = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(src, "SLUICE_SOURCE_DIR is not set (run through ctest)");
    char ratings[1024], script[1024];
    snprintf(ratings, sizeof ratings, "%s/../shared/data/movielens-latest-small/ratings.csv", src);
    snprintf(script, sizeof script, "%s/examples/movielens_sessions.py", src);
    if (access(ratings, R_OK) != 0) {
        cr_skip_test("MovieLens ratings not found at %s: pipeline not run", ratings);
        return;
    }
    if (system("python3 -c 'import sys; sys.exit(sys.version_info < (3, 6))' >/dev/null 2>&1") !=
        0) {
        cr_skip_test("python3 not available: MovieLens pipeline not run");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && python3 '%s' --ratings '%s' --output ml.jsonl 2>py.txt",
             tmpdir, script, ratings);
    cr_assert_eq(system(cmd), 0, "movielens_sessions.py failed");
    char *py = slurp("py.txt", NULL);
    cr_assert_not_null(strstr(py, "100004 samples"), "%s", py);
    free(py);

    cr_assert_eq(run("table import --format jsonl --input ml.jsonl --table ml "
                     "--partition ds=2016-10-16 --cluster --dedup-group history=user_history "
                     "--no-sync"),
                 0);
    EXPECT_OUT("imported: 100004 rows read, 100004 written, 0 skipped");
    cr_assert_eq(run("table verify ml"), 0);
    EXPECT_OUT("100004 rows; 0 problems");
    cr_assert_eq(run("table inspect ml"), 0);
    EXPECT_OUT("dedup group history: 100004 rows stored as");

    /* The script writes sessions in order and clustering keeps that order, so
     * cat gives back the input line for line. */
    cr_assert_eq(run("table cat ml"), 0);
    size_t len_out, len_in;
    char *out = slurp("out.txt", &len_out), *in = slurp("ml.jsonl", &len_in);
    cr_assert_eq(count_lines(out), 100004);
    char *a = out, *b = in;
    for (uint64_t i = 0; i < 100004; i++) {
        char *na = strchr(a, '\n'), *nb = strchr(b, '\n');
        cr_assert(na && nb);
        json_t *ja = json_loadb(a, (size_t)(na - a), 0, NULL);
        json_t *jb = json_loadb(b, (size_t)(nb - b), 0, NULL);
        cr_assert(ja && jb && json_equal(ja, jb), "line %llu:\n cat %.*s\n in  %.*s",
                  (unsigned long long)i + 1, (int)(na - a), a, (int)(nb - b), b);
        json_decref(ja);
        json_decref(jb);
        a = na + 1;
        b = nb + 1;
    }
    free(out);
    free(in);
}

/* The CLI's side of compressed and non-text input: a gzip file (made by the
 * gzip program, under a name that does not say so) imports the plain
 * file's rows; a bzip2 file (its magic bytes) is refused with exactly one error line (and the
 * "nothing was added" line), no bad-row messages, and no table directory. */
Test(table_cli, import_gzip_and_refuse_bzip2)
{
    write_file("day.tsv", "1\t5\t\t-3\t\t\t\t\t\t\t\t\t\t7\t68fd1e64\n0\t2\t1\n");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && gzip -c day.tsv > day_0", tmpdir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    write_file("x.bz2", "BZh91AY&SY\x8f\x1e\x01\x02"); /* bzip2's magic, a block header */
    cr_assert_eq(run("table import --format criteo --input day.tsv --table plain --no-sync"), 0);
    cr_assert_eq(run("table import --format criteo --input day_0 --table gz --no-sync"), 0);
    EXPECT_OUT("imported: 2 rows read, 2 written, 0 skipped");
    cr_assert_eq(run("table cat plain"), 0);
    char *a = slurp("out.txt", NULL);
    cr_assert_eq(run("table cat gz"), 0);
    char *b = slurp("out.txt", NULL);
    cr_assert_str_eq(b, a);
    free(a);
    free(b);

    cr_assert_eq(run("table import --format criteo --input x.bz2 --table bz --no-sync --quiet"), 1);
    char *err = slurp("err.txt", NULL);
    cr_assert_str_eq(err, "sluice table import: x.bz2: not text: it looks like bzip2-compressed "
                          "data (decompress it first: bunzip2 -k); sluice table import reads "
                          "text (Criteo TSV, jsonl or CSV), plain, gzip or zstd\n"
                          "sluice table import: nothing was added to bz\n");
    free(err);
    char bz[600];
    snprintf(bz, sizeof bz, "%s/bz", tmpdir);
    cr_assert_neq(access(bz, F_OK), 0, "the table directory bz was left behind");
}

Test(table_cli, import_csv_print_mapping_stdin_and_refusals)
{
    write_file("in.csv", "id,label,price,country,ids\n"
                         "1,1,2.5,DE,\"[4,5]\"\n"
                         "2,0,,FR,[]\n"
                         "3,1,7,DE,6\n");
    /* --print-mapping: the mapping as JSON, the columns on stderr, no table. */
    cr_assert_eq(run("table import --format csv --input in.csv --table x --print-mapping"), 0);
    char *out = slurp("out.txt", NULL);
    cr_assert_str_eq(out, "{\n  \"labels\": [\n    \"label\"\n  ],\n  \"dense\": [\n    \"id\",\n"
                          "    \"price\"\n  ],\n  \"sparse\": [\n    \"ids\"\n  ],\n"
                          "  \"weighted\": [],\n  \"infer\": false\n}\n");
    free(out);
    EXPECT_ERR("column 4 country: string (ignored)\n");
    EXPECT_ERR("ignored: country (string: no hash declared)\n");
    struct stat st;
    char path[512];
    snprintf(path, sizeof path, "%s/x", tmpdir);
    cr_assert_neq(stat(path, &st), 0, "--print-mapping made a table");

    /* An edited mapping, and the CSV from standard input. */
    write_file("m.json",
               "{\"sample_id\": \"id\", \"labels\": [\"label\"], \"dense\": [\"price\"],"
               " \"sparse\": [\"ids\", {\"column\": \"country\", \"hash\": {\"seed\": 3}}],"
               " \"infer\": false}");
    cr_assert_eq(run_stdin("in.csv",
                           "table import --format csv --mapping m.json --input - --table s "
                           "--no-sync"),
                 0);
    EXPECT_OUT("imported: 3 rows read, 3 written, 0 skipped");
    cr_assert_eq(run("table cat s --features ids --limit 1"), 0);
    EXPECT_OUT("{\"sample_id\":1,\"session_id\":0,\"ts\":0,\"labels\":{\"label\":1.0},"
               "\"sparse\":{\"ids\":[4,5]}}\n");

    /* Standard input past the 64 KiB its types are inferred from. */
    char big[512];
    snprintf(big, sizeof big, "%s/big.csv", tmpdir);
    FILE *f = fopen(big, "w");
    cr_assert_not_null(f);
    fprintf(f, "id,label,price,note\n");
    for (int i = 0; i < 5000; i++)
        fprintf(f, "%d,%d,%d.25,\"row %d, with a comma and\na newline\"\n", i, i % 2, i, i);
    fclose(f);
    cr_assert_eq(run_stdin("big.csv", "table import --format csv --input - --table big --no-sync"),
                 0);
    EXPECT_OUT("imported: 5000 rows read, 5000 written, 0 skipped");
    cr_assert_eq(run("table cat big --limit 5000"), 0);
    out = slurp("out.txt", NULL);
    cr_assert_eq(count_lines(out), 5000);
    cr_assert_not_null(strstr(out, "\"dense\":{\"id\":4999.0,\"price\":4999.25}}\n"), "%s",
                       out + strlen(out) - 200);
    free(out);

    /* A mapping's problems, every one with its path. */
    write_file("bad.json", "{\"dense\": [\"country\"], \"sparse\": [{\"column\": \"ids\", "
                           "\"hash\": {}}]}");
    cr_assert_eq(run("table import --format csv --mapping bad.json --input in.csv --table b"), 1);
    EXPECT_ERR("sluice table import: $.sparse[0].hash.seed: missing (the seed of the string hash, "
               "an integer >= 0)\n");

    /* The CSV given as Criteo: every row bad, refused, exit 1, no table. */
    cr_assert_eq(run("table import --format criteo --input in.csv --table c --no-sync"), 1);
    EXPECT_ERR("sluice table import: refused: no row was written (4 read, all skipped as bad); "
               "is the input Criteo TSV?\n"
               "sluice table import: 4 bad rows of 4 read; the first:\n"
               "  in.csv:1: field 1 (label): unparsable number 'id,label,price,country,ids'\n");
    EXPECT_ERR("sluice table import: nothing was added to c\n");
    snprintf(path, sizeof path, "%s/c", tmpdir);
    cr_assert_neq(stat(path, &st), 0, "the refused import left its table");
}

/* The jsonl importer: import -> cat gives back the input objects exactly
 * (compared parsed, with json_equal), with the schema given as an object, as
 * a JSON file, or inferred; bad rows (bad JSON, wrong types, unknown
 * features, ids out of range) are skipped and named by file and line. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/table_tools.h"

/* Every import of these tests allocates here. */
static tu_alloc_t g_ta;

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(import_jsonl, .init = init_alloc);

/* The schema the generated rows follow, in first-seen order. */
static sl_wh_schema_t *test_schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    const char *labels[] = {"click", "rating"};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(sl_wh_schema_add_label(s, labels[i], &err), SL_OK);
    const char *dense[] = {"price", "age", "score"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sl_wh_schema_add_feature(s, dense[i], SL_WH_DENSE, &err), SL_OK);
    const char *sparse[] = {"item", "hist", "rare"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(sl_wh_schema_add_feature(s, sparse[i], SL_WH_SPARSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "tags", SL_WH_WEIGHTED, &err), SL_OK);
    return s;
}

/* A JSON real holding the shortest decimal that reads back as float32 f,
 * which is what cat prints for f. */
static json_t *float_json(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f) return json_real(strtod(buf, NULL));
    }
    return json_real((double)f);
}

static float random_float(uint64_t *rng)
{
    /* Any finite float32 magnitude from 1e-6 to 1e9, either sign. */
    double m = (double)(tu_next(rng) >> 11) * 0x1.0p-53;
    double v = pow(10.0, -6.0 + 15.0 * m) * (tu_below(rng, 2) ? 1 : -1);
    return (float)v;
}

static json_t *random_ids(uint64_t *rng, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < n; i++)
        json_array_append_new(a,
                              json_integer((json_int_t)(tu_next(rng) >> (1 + tu_below(rng, 63)))));
    return a;
}

/* One row in the form cat prints: every label, the present dense values,
 * every sparse and weighted list (possibly empty). */
static json_t *random_row(uint64_t *rng, bool all_dense)
{
    json_t *o = json_object();
    json_object_set_new(o, "sample_id", json_integer((json_int_t)tu_next(rng)));
    json_object_set_new(o, "session_id", json_integer((json_int_t)tu_below(rng, 1000)));
    json_object_set_new(o, "ts", json_integer(1700000000 + (json_int_t)tu_below(rng, 86400)));
    json_t *labels = json_object();
    json_object_set_new(labels, "click", json_real((double)tu_below(rng, 2)));
    json_object_set_new(labels, "rating",
                        tu_below(rng, 10) == 0 ? json_null()
                                               : float_json((float)tu_below(rng, 11) * 0.5f));
    json_object_set_new(o, "labels", labels);
    json_t *dense = json_object();
    const char *dn[] = {"price", "age", "score"};
    for (int i = 0; i < 3; i++)
        if (all_dense || tu_below(rng, 3) != 0)
            json_object_set_new(dense, dn[i], float_json(random_float(rng)));
    json_object_set_new(o, "dense", dense);
    json_t *sparse = json_object();
    json_object_set_new(sparse, "item", random_ids(rng, 1));
    json_object_set_new(sparse, "hist", random_ids(rng, (uint32_t)tu_below(rng, 30)));
    json_object_set_new(sparse, "rare",
                        random_ids(rng, tu_below(rng, 5) == 0 ? (uint32_t)tu_below(rng, 3) : 0));
    json_object_set_new(o, "sparse", sparse);
    json_t *tags = json_object();
    uint32_t n = (uint32_t)tu_below(rng, 5);
    json_object_set_new(tags, "ids", random_ids(rng, n));
    json_t *w = json_array();
    for (uint32_t i = 0; i < n; i++)
        json_array_append_new(w,
                              tu_below(rng, 20) == 0 ? json_null() : float_json(random_float(rng)));
    json_object_set_new(tags, "weights", w);
    json_t *weighted = json_object();
    json_object_set_new(weighted, "tags", tags);
    json_object_set_new(o, "weighted", weighted);
    return o;
}

/* Write n random rows to path (one per line, the last without '\n'); the
 * parsed objects go to rows[]. */
static void write_rows(uint64_t *rng, const char *path, json_t **rows, int n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++) {
        rows[i] = random_row(rng, i == 0);
        char *text = json_dumps(rows[i], JSON_COMPACT);
        fputs(text, f);
        if (i < n - 1) fputc('\n', f);
        free(text);
    }
    fclose(f);
}

/* cat the table and compare line i with rows[i]. */
static void check_cat(const char *table, json_t **rows, int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    uint64_t printed = 0;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_cat_table(table, NULL, f, &printed, &err), SL_OK, "%s", err.msg);
    fclose(f);
    cr_assert_eq(printed, (uint64_t)n);
    char *line = buf;
    for (int i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        cr_assert_not_null(nl);
        json_error_t je;
        json_t *got = json_loadb(line, (size_t)(nl - line), 0, &je);
        cr_assert_not_null(got, "cat line %d: %s", i, je.text);
        if (!json_equal(got, rows[i])) {
            char *a = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
            char *b = json_dumps(rows[i], JSON_COMPACT | JSON_SORT_KEYS);
            cr_assert_fail("row %d differs:\n got  %s\n want %s", i, a, b);
        }
        json_decref(got);
        line = nl + 1;
    }
    cr_assert_eq(*line, '\0');
    free(buf);
}

static sl_wh_import_opts_t jsonl_opts(const char *table, const char *const *inputs)
{
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    o.allocator = &g_ta.base;
    o.format = SL_WH_IMPORT_JSONL;
    o.table_dir = table;
    o.inputs = inputs;
    o.num_inputs = 1;
    o.writer.no_sync = true;
    o.writer.stripe_rows = 300;
    return o;
}

Test(import_jsonl, round_trip_with_schema_object_file_and_inference)
{
    uint64_t rng = tu_seed("import_jsonl::round_trip_with_schema_object_file_and_inference");
    char *dir = tu_mkdtemp("jsonl");
    char *in = tu_path(dir, "rows.jsonl");
    enum { N = 1500 };
    json_t **rows = calloc(N, sizeof *rows);
    write_rows(&rng, in, rows, N);
    sl_wh_schema_t *schema = test_schema();
    const char *inputs[] = {in};

    /* 1: the schema as an object. */
    char *t1 = tu_path(dir, "t1");
    sl_wh_import_opts_t o = jsonl_opts(t1, inputs);
    o.schema = schema;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_written, N);
    cr_assert_eq(sum.rows_skipped, 0);
    sl_wh_import_summary_free(&sum);
    check_cat(t1, rows, N);

    /* 2: the schema as a JSON file (sl_wh_schema_to_json's form). */
    char *sf = tu_path(dir, "schema.json"), *t2 = tu_path(dir, "t2");
    json_t *sj = sl_wh_schema_to_json(schema);
    cr_assert_eq(json_dump_file(sj, sf, 0), 0);
    json_decref(sj);
    o = jsonl_opts(t2, inputs);
    o.schema_path = sf;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    sl_wh_import_summary_free(&sum);
    check_cat(t2, rows, N);

    /* 3: inferred from the first 10 lines (line 1 has every feature). */
    char *t3 = tu_path(dir, "t3");
    o = jsonl_opts(t3, inputs);
    o.infer_lines = 10;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    sl_wh_import_summary_free(&sum);
    sl_wh_table_t *t;
    cr_assert_eq(sl_wh_table_open(t3, NULL, &t, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_wh_schema_equal(sl_wh_table_schema(t), schema), "inferred schema differs");
    sl_wh_table_close(t);
    check_cat(t3, rows, N);

    /* 4: into the existing table, no schema given: the table's is used. */
    o = jsonl_opts(t3, inputs);
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_written, N);
    sl_wh_import_summary_free(&sum);

    for (int i = 0; i < N; i++)
        json_decref(rows[i]);
    free(rows);
    sl_wh_schema_destroy(schema);
    free(in);
    free(t1);
    free(t2);
    free(t3);
    free(sf);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import_jsonl, inference_order_and_kinds)
{
    char *dir = tu_mkdtemp("jsonl");
    char *in = tu_path(dir, "a.jsonl");
    const char text[] = "not json\n"
                        "\n"
                        "{\"labels\":{\"y\":1},\"sparse\":{\"b\":[1]},\"dense\":{\"a\":2}}\n"
                        "{\"weighted\":{\"c\":{\"ids\":[],\"weights\":[]}},\"dense\":{\"d\":1}}\n"
                        "{\"labels\":{\"z\":0},\"sparse\":{\"e\":[]}}\n";
    tu_write_file(in, text, sizeof text - 1);
    const char *inputs[] = {in};
    sl_wh_schema_t *s;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_jsonl_infer_schema(inputs, 1, 4, NULL, &s, &err), SL_OK, "%s", err.msg);
    /* 4 lines: "e" and "z" (line 5) are not seen. */
    cr_assert_eq(sl_wh_schema_num_labels(s), 1);
    cr_assert_str_eq(sl_wh_schema_label(s, 0), "y");
    cr_assert_eq(sl_wh_schema_num_features(s), 4);
    const char *names[] = {"a", "b", "d", "c"};
    sl_wh_kind_t kinds[] = {SL_WH_DENSE, SL_WH_SPARSE, SL_WH_DENSE, SL_WH_WEIGHTED};
    for (uint32_t i = 0; i < 4; i++) {
        cr_assert_str_eq(sl_wh_schema_feature(s, i)->name, names[i]);
        cr_assert_eq(sl_wh_schema_feature(s, i)->kind, kinds[i]);
    }
    sl_wh_schema_destroy(s);
    const char empty[] = "\n[1]\n";
    tu_write_file(in, empty, sizeof empty - 1);
    cr_assert_eq(sl_wh_jsonl_infer_schema(inputs, 1, 0, NULL, &s, &err), SL_ERR_INVALID);
    cr_assert_null(s);
    free(in);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

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

Test(import_jsonl, bad_rows_named_by_line)
{
    char *dir = tu_mkdtemp("jsonl");
    char *in = tu_path(dir, "bad.jsonl"), *table = tu_path(dir, "t");
    const char text[] = "{\"sample_id\":5,\"sparse\":{\"item\":[3]}}\n"                 /* 1 good */
                        "{\"dense\":{\"price\":\"x\"}}\n"                               /* 2 */
                        "{\"sparse\":{\"item\":[-1]}}\n"                                /* 3 */
                        "{\"sparse\":{\"nope\":[1]}}\n"                                 /* 4 */
                        "[1,2]\n"                                                       /* 5 */
                        "{\"weighted\":{\"tags\":{\"ids\":[1,2],\"weights\":[0.5]}}}\n" /* 6 */
                        "{\"dense\":{\"price\":1e300}}\n"                               /* 7 */
                        "{\"labels\":{\"click\":1.0},\"extra\":1}\n"                    /* 8 */
                        "{\"sparse\":{\"item\":[1.5]}}\n"                               /* 9 */
                        "{\"dense\":{\"item\":1.0}}\n"                                  /* 10 */
                        "{\"labels\":{\"nolabel\":1}}\n"                                /* 11 */
                        "{\"sample_id\":\"7\"}\n"                                       /* 12 */
                        "{\"sparse\":{\"item\":[1],\"item\":[2]}}\n"                    /* 13 */
                        "{}\n"           /* 14 good */
                        "{\"bad json\n"; /* 15 */
    tu_write_file(in, text, sizeof text - 1);
    const char *inputs[] = {in};
    sl_wh_import_opts_t o = jsonl_opts(table, inputs);
    sl_wh_schema_t *schema = test_schema();
    o.schema = schema;
    o.max_skipped_fraction = 1; /* the bad rows are the point here */
    bad_log_t log = {0};
    o.on_bad_row = log_bad;
    o.bad_row_ctx = &log;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_read, 15);
    cr_assert_eq(sum.rows_written, 2);
    cr_assert_eq(sum.rows_skipped, 13);
    sl_wh_import_summary_free(&sum);
    static const char *const want[] = {
        "bad.jsonl:2: dense 'price': expected a number, got a string",
        "bad.jsonl:3: sparse 'item' id 0: id out of range (-1 < 0)",
        "bad.jsonl:4: sparse 'nope': no such feature in the schema",
        "bad.jsonl:5: expected a JSON object, got an array",
        "bad.jsonl:6: weighted 'tags': \"weights\" must be an array of 2 numbers",
        "bad.jsonl:7: dense 'price': 1e+300 is out of the float32 range",
        "bad.jsonl:8: unknown key \"extra\"",
        "bad.jsonl:9: sparse 'item' id 0: expected an integer, got a number",
        "bad.jsonl:10: dense 'item': the schema says this feature is sparse",
        "bad.jsonl:11: label 'nolabel': no such label in the schema",
        "bad.jsonl:12: \"sample_id\": expected an integer, got a string",
    };
    cr_assert_eq(log.n, 13);
    for (uint32_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_str_eq(log.text[i], want[i]);
    cr_assert(strncmp(log.text[11], "bad.jsonl:13: bad JSON at column", 32) == 0, "%s",
              log.text[11]);
    cr_assert(strncmp(log.text[12], "bad.jsonl:15: bad JSON at column", 32) == 0, "%s",
              log.text[12]);

    /* The good rows: line 1 keeps its sample id, line 14 gets part 0 * 1e10 + 14. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    uint64_t printed;
    cr_assert_eq(sl_wh_cat_table(table, NULL, f, &printed, &err), SL_OK, "%s", err.msg);
    fclose(f);
    cr_assert_eq(printed, 2);
    cr_assert(strstr(buf, "{\"sample_id\":5,") == buf, "%s", buf);
    cr_assert_not_null(strstr(buf, "\n{\"sample_id\":14,"), "%s", buf);
    free(buf);

    /* Strict: the first bad row fails the import and nothing is added. */
    char *t2 = tu_path(dir, "t2");
    o = jsonl_opts(t2, inputs);
    o.schema = schema;
    o.strict = true;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_CORRUPT);
    char msg[600];
    snprintf(msg, sizeof msg, "%s:2: dense 'price': expected a number, got a string", in);
    cr_assert_str_eq(err.msg, msg);
    sl_wh_import_summary_free(&sum);
    /* Not even the table directory the import created stays. */
    struct stat st;
    cr_assert_eq(stat(t2, &st), -1, "%s was left behind", t2);
    cr_assert_eq(errno, ENOENT);

    sl_wh_schema_destroy(schema);
    free(in);
    free(table);
    free(t2);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(import_jsonl, missing_input_and_bad_options)
{
    char *dir = tu_mkdtemp("jsonl");
    char *table = tu_path(dir, "t"), *missing = tu_path(dir, "missing.jsonl");
    const char *inputs[] = {missing};
    sl_wh_import_opts_t o = jsonl_opts(table, inputs);
    sl_wh_schema_t *schema = test_schema();
    o.schema = schema;
    sl_error_t err = {0};
    sl_wh_import_summary_t sum;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "missing.jsonl"), "%s", err.msg);
    sl_wh_import_summary_free(&sum);
    o.partition = "bad partition";
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_INVALID);
    sl_wh_import_summary_free(&sum);
    o = jsonl_opts(table, inputs);
    o.num_inputs = 0;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_INVALID);
    o = jsonl_opts(table, inputs);
    o.format = SL_WH_IMPORT_CRITEO;
    o.schema = schema;
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_ERR_INVALID);
    cr_assert_not_null(strstr(err.msg, "fixed schema"), "%s", err.msg);
    sl_wh_schema_destroy(schema);
    free(table);
    free(missing);
    tu_rm_tree(dir);
    free(dir);
    tu_alloc_assert_clean(&g_ta);
}

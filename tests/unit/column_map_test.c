/* The column mapping (src/warehouse/column_map.h): parsing with every
 * problem named by its JSON path, resolving against typed input columns
 * into a schema and slots (named and inferred), string columns only
 * through a declared hash, and filling rows from JSON objects. */
#include <criterion/criterion.h>

#include <math.h>
#include <string.h>
#include <xxhash.h>

#include "warehouse/column_map.h"

typedef struct collected {
    int n;
    char items[16][SL_ERROR_MSG_MAX];
} collected_t;

static void collect(void *ctx, const char *problem)
{
    collected_t *c = ctx;
    if (c->n < 16) snprintf(c->items[c->n], sizeof c->items[0], "%s", problem);
    c->n++;
}

static sl_wh_colmap_t *parse_ok(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    cr_assert_not_null(j, "test JSON: %s", jerr.text);
    sl_wh_colmap_t *m = NULL;
    sl_error_t err = {0};
    sl_err_t rc = sl_wh_colmap_parse(j, NULL, NULL, NULL, NULL, &m, &err);
    json_decref(j);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    return m;
}

static sl_err_t parse_bad(const char *text, const char *path, collected_t *c, sl_error_t *err)
{
    json_t *j = json_loads(text, 0, NULL);
    cr_assert_not_null(j);
    sl_wh_colmap_t *m = NULL;
    sl_err_t rc = sl_wh_colmap_parse(j, path, NULL, collect, c, &m, err);
    json_decref(j);
    cr_assert_null(m);
    return rc;
}

static const sl_wh_input_column_t COLS[] = {
    {"id", SL_WH_COLTYPE_INT},
    {"sid", SL_WH_COLTYPE_INT},
    {"ts", SL_WH_COLTYPE_INT},
    {"click", SL_WH_COLTYPE_BOOL},
    {"age", SL_WH_COLTYPE_INT},
    {"price", SL_WH_COLTYPE_FLOAT},
    {"country", SL_WH_COLTYPE_STRING},
    {"item_ids", SL_WH_COLTYPE_LIST_INT},
    {"tags", SL_WH_COLTYPE_LIST_WEIGHTED},
    {"cat_ids", SL_WH_COLTYPE_LIST_INT},
    {"cat_w", SL_WH_COLTYPE_LIST_FLOAT},
    {"note", SL_WH_COLTYPE_STRING},
    {"extra", SL_WH_COLTYPE_FLOAT},
    {"hist", SL_WH_COLTYPE_LIST_INT},
};
#define NCOLS (sizeof COLS / sizeof COLS[0])

Test(column_map, parse_and_resolve_the_design_example)
{
    sl_wh_colmap_t *m = parse_ok(
        "{\"sample_id\": \"id\", \"session_id\": \"sid\", \"timestamp\": \"ts\","
        " \"labels\": [\"click\"], \"dense\": [\"age\", \"price\"],"
        " \"sparse\": [\"item_ids\", {\"column\": \"country\", \"name\": \"country_id\","
        "   \"hash\": {\"seed\": 7}}],"
        " \"weighted\": [{\"column\": \"tags\"}, {\"name\": \"cats\", \"ids\": \"cat_ids\","
        "   \"weights\": \"cat_w\"}], \"infer\": false}");
    cr_assert_not(sl_wh_colmap_infers(m));
    cr_assert_eq(sl_wh_colmap_num_named(m), 11);
    cr_assert_str_eq(sl_wh_colmap_named(m, 0), "id");
    cr_assert_str_eq(sl_wh_colmap_named(m, 10), "cat_w");
    sl_wh_colmap_resolved_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_resolve(m, COLS, NCOLS, NULL, NULL, NULL, &r, &err), SL_OK, "%s",
                 err.msg);
    const sl_wh_schema_t *s = r->schema;
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_SAMPLE_ID), "id");
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_SESSION_ID), "sid");
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_TIMESTAMP), "ts");
    cr_assert_eq(sl_wh_schema_num_labels(s), 1);
    cr_assert_str_eq(sl_wh_schema_label(s, 0), "click");
    cr_assert_eq(sl_wh_schema_num_features(s), 6);
    const char *names[] = {"age", "price", "item_ids", "country_id", "tags", "cats"};
    sl_wh_kind_t kinds[] = {SL_WH_DENSE,  SL_WH_DENSE,    SL_WH_SPARSE,
                            SL_WH_SPARSE, SL_WH_WEIGHTED, SL_WH_WEIGHTED};
    for (uint32_t i = 0; i < 6; i++) {
        cr_assert_str_eq(sl_wh_schema_feature(s, i)->name, names[i]);
        cr_assert_eq(sl_wh_schema_feature(s, i)->kind, kinds[i]);
    }
    cr_assert_eq(r->num_slots, 3 + 1 + 6);
    cr_assert_eq(r->slots[0].target, SL_WH_MAP_SAMPLE_ID);
    cr_assert_eq(r->slots[0].column, 0);
    cr_assert_eq(r->slots[3].target, SL_WH_MAP_LABEL);
    cr_assert_eq(r->slots[3].column, 3);
    const sl_wh_colmap_slot_t *country = &r->slots[7];
    cr_assert_eq(country->target, SL_WH_MAP_SPARSE);
    cr_assert_eq(country->index, 1);
    cr_assert_str_eq(country->name, "country_id");
    cr_assert_eq(country->column, 6);
    cr_assert(country->hash);
    cr_assert_eq(country->seed, 7);
    cr_assert_str_eq(country->path, "$.sparse[1]");
    const sl_wh_colmap_slot_t *cats = &r->slots[9];
    cr_assert_eq(cats->target, SL_WH_MAP_WEIGHTED);
    cr_assert_eq(cats->index, 3);
    cr_assert_eq(cats->column, 9);
    cr_assert_eq(cats->weights_column, 10);
    /* infer false: note, extra, hist are unread and listed */
    cr_assert_eq(r->num_ignored, 3);
    cr_assert_str_eq(r->ignored[0], "note (string: not named, infer is false)");
    cr_assert_str_eq(r->ignored[1], "extra (float: not named, infer is false)");
    cr_assert_eq(r->column_uses[6], 1);
    cr_assert_eq(r->column_uses[11], 0);
    sl_wh_colmap_resolved_destroy(r);
    sl_wh_colmap_destroy(m);
}

Test(column_map, inferred_by_type_with_default_names)
{
    const sl_wh_input_column_t cols[] = {
        {"sample_id", SL_WH_COLTYPE_INT},   {"label", SL_WH_COLTYPE_INT},
        {"ts", SL_WH_COLTYPE_INT},          {"x", SL_WH_COLTYPE_FLOAT},
        {"name", SL_WH_COLTYPE_STRING},     {"ids", SL_WH_COLTYPE_LIST_INT},
        {"w", SL_WH_COLTYPE_LIST_WEIGHTED}, {"fl", SL_WH_COLTYPE_LIST_FLOAT},
        {"flag", SL_WH_COLTYPE_BOOL},
    };
    sl_wh_colmap_t *m = sl_wh_colmap_new_default(NULL);
    cr_assert(sl_wh_colmap_infers(m));
    sl_wh_colmap_resolved_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_resolve(m, cols, 9, NULL, NULL, NULL, &r, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(r->id_column[0], 0);
    cr_assert_eq(r->id_column[1], SL_WH_COLMAP_NONE);
    cr_assert_eq(r->id_column[2], 2);
    cr_assert_str_eq(sl_wh_schema_column(r->schema, SL_WH_COL_TIMESTAMP), "ts");
    cr_assert_eq(sl_wh_schema_num_labels(r->schema), 1);
    cr_assert_str_eq(sl_wh_schema_label(r->schema, 0), "label");
    cr_assert_eq(sl_wh_schema_num_features(r->schema), 4);
    cr_assert_str_eq(sl_wh_schema_feature(r->schema, 0)->name, "x");
    cr_assert_eq(sl_wh_schema_feature(r->schema, 1)->kind, SL_WH_SPARSE);
    cr_assert_eq(sl_wh_schema_feature(r->schema, 2)->kind, SL_WH_WEIGHTED);
    cr_assert_str_eq(sl_wh_schema_feature(r->schema, 3)->name, "flag");
    cr_assert_eq(r->num_ignored, 2);
    cr_assert_str_eq(r->ignored[0], "name (string: no hash declared)");
    cr_assert_str_eq(r->ignored[1], "fl (list<float>: no feature kind takes it)");

    /* The printed mapping, given back, resolves to the same schema. */
    json_t *printed = sl_wh_colmap_resolved_to_json(r);
    char *text = json_dumps(printed, JSON_SORT_KEYS | JSON_COMPACT);
    cr_assert_str_eq(text, "{\"dense\":[\"x\",\"flag\"],\"infer\":false,\"labels\":[\"label\"],"
                           "\"sample_id\":\"sample_id\",\"sparse\":[\"ids\"],\"timestamp\":\"ts\","
                           "\"weighted\":[{\"column\":\"w\",\"name\":\"w\"}]}");
    free(text);
    sl_wh_colmap_t *m2 = NULL;
    cr_assert_eq(sl_wh_colmap_parse(printed, NULL, NULL, NULL, NULL, &m2, &err), SL_OK);
    sl_wh_colmap_resolved_t *r2 = NULL;
    cr_assert_eq(sl_wh_colmap_resolve(m2, cols, 9, NULL, NULL, NULL, &r2, &err), SL_OK, "%s",
                 err.msg);
    /* Feature order differs (dense first), so compare by name and kind. */
    cr_assert_eq(sl_wh_schema_num_features(r2->schema), 4);
    for (uint32_t i = 0; i < 4; i++) {
        const sl_wh_feature_t *f = sl_wh_schema_feature(r->schema, i);
        const sl_wh_feature_t *g = sl_wh_schema_find(r2->schema, f->name);
        cr_assert_not_null(g, "%s", f->name);
        cr_assert_eq(g->kind, f->kind);
    }
    json_decref(printed);
    sl_wh_colmap_resolved_destroy(r2);
    sl_wh_colmap_destroy(m2);
    sl_wh_colmap_resolved_destroy(r);
    sl_wh_colmap_destroy(m);
}

Test(column_map, parse_reports_every_problem_with_its_path)
{
    collected_t c = {0};
    sl_error_t err = {0};
    sl_err_t rc = parse_bad("{\"labels\": \"click\", \"dense\": [\"a\", 3],"
                            " \"sparse\": [{\"column\": \"c\", \"hash\": {\"seed\": -1}},"
                            "   {\"name\": \"n\"}, 5],"
                            " \"weighted\": [{\"column\": \"t\", \"ids\": \"i\"}],"
                            " \"infer\": 1, \"colour\": 2}",
                            "$.source.kafka.columns", &c, &err);
    cr_assert_eq(rc, SL_ERR_INVALID);
    cr_assert_eq(c.n, 8, "%d problems", c.n);
    const char *want[] = {
        "$.source.kafka.columns.colour: unknown key (keys: sample_id, session_id, timestamp, "
        "labels, dense, sparse, weighted, infer)",
        "$.source.kafka.columns.labels: must be an array of column names, got a string",
        "$.source.kafka.columns.dense[1]: must be a column name (a non-empty string), got a number",
        "$.source.kafka.columns.sparse[0].hash.seed: must be a non-negative integer",
        "$.source.kafka.columns.sparse[1].column: missing (the input column)",
        "$.source.kafka.columns.sparse[2]: must be a column name or {\"column\", \"name\", "
        "\"hash\"}, got a number",
        "$.source.kafka.columns.weighted[0]: give either \"column\" or \"ids\" and \"weights\", "
        "not both",
        "$.source.kafka.columns.infer: must be true or false, got a number",
    };
    for (int i = 0; i < 8; i++)
        cr_assert_str_eq(c.items[i], want[i], "problem %d: %s", i, c.items[i]);
    /* The error says the first problems, and how many did not fit. */
    cr_assert(strncmp(err.msg, "column mapping: $.source.kafka.columns.colour: unknown key", 58) ==
                  0,
              "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "more problems)"), "%s", err.msg);
}

Test(column_map, infer_must_be_boolean_and_root_an_object)
{
    collected_t c = {0};
    sl_error_t err = {0};
    cr_assert_eq(parse_bad("[1]", NULL, &c, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "column mapping: $: must be an object, got an array");
    c.n = 0;
    cr_assert_eq(parse_bad("{\"infer\": \"yes\"}", NULL, &c, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "column mapping: $.infer: must be true or false, got a string");
}

Test(column_map, resolve_problems_name_columns_and_paths)
{
    sl_wh_colmap_t *m =
        parse_ok("{\"sample_id\": \"price\", \"labels\": [\"nope\"], \"dense\": [\"country\"],"
                 " \"sparse\": [\"note\", {\"column\": \"age\", \"hash\": {\"seed\": 1}}],"
                 " \"weighted\": [{\"column\": \"item_ids\"}, {\"ids\": \"cat_w\", \"weights\": "
                 "\"country\"}]}");
    collected_t c = {0};
    sl_wh_colmap_resolved_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_resolve(m, COLS, NCOLS, NULL, collect, &c, &r, &err), SL_ERR_INVALID);
    cr_assert_null(r);
    const char *want[] = {
        "$.sample_id: column 'price' is float; the sample id must be an int column",
        "$.labels[0]: no column 'nope' in the input",
        "$.dense[0]: column 'country' is string; dense features take a number (int, float or "
        "bool)",
        "$.sparse[0]: column 'note' is string; strings become ids only by a declared hash: "
        "{\"column\": \"note\", \"hash\": {\"seed\": N}}",
        "$.sparse[1].hash: column 'age' is int; a hash applies to string columns",
        "$.weighted[0]: column 'item_ids' is list<int>; \"column\" takes list<struct{id,weight}>",
        "$.weighted[1].ids: column 'cat_w' is list<float>; ids take list<int>",
        "$.weighted[1].weights: column 'country' is string; weights take list<float>",
    };
    cr_assert_eq(c.n, 8, "%d problems: %s", c.n, err.msg);
    for (int i = 0; i < 8; i++)
        cr_assert_str_eq(c.items[i], want[i], "problem %d: %s", i, c.items[i]);
    sl_wh_colmap_destroy(m);
}

Test(column_map, duplicate_names_are_problems)
{
    const sl_wh_input_column_t cols[] = {{"a", SL_WH_COLTYPE_INT}, {"a", SL_WH_COLTYPE_INT}};
    sl_wh_colmap_t *m = sl_wh_colmap_new_default(NULL);
    sl_wh_colmap_resolved_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_resolve(m, cols, 2, NULL, NULL, NULL, &r, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "column mapping: input: column 'a' appears twice (columns 1 and 2)");
    /* Two features of one name: the schema's refusal, at the entry's path. */
    sl_wh_colmap_destroy(m);
    m = parse_ok(
        "{\"dense\": [\"age\"], \"sparse\": [{\"column\": \"item_ids\", \"name\": \"age\"}]}");
    cr_assert_eq(sl_wh_colmap_resolve(m, COLS, NCOLS, NULL, NULL, NULL, &r, &err), SL_ERR_INVALID);
    cr_assert(strncmp(err.msg, "column mapping: $.sparse[0]: ", 29) == 0, "%s", err.msg);
    sl_wh_colmap_destroy(m);
}

Test(column_map, hash_is_xxh3_masked)
{
    uint64_t h = XXH3_64bits_withSeed("DE", 2, 7);
    cr_assert_eq(sl_wh_colmap_hash("DE", 2, 7), (int64_t)(h & 0x7fffffffffffffffull));
    cr_assert_neq(sl_wh_colmap_hash("DE", 2, 7), sl_wh_colmap_hash("DE", 2, 8));
    cr_assert_geq(sl_wh_colmap_hash("", 0, 0), 0);
}

Test(column_map, rows_from_json_objects)
{
    const sl_wh_input_column_t cols[] = {
        {"id", SL_WH_COLTYPE_ANY},    {"click", SL_WH_COLTYPE_ANY},   {"price", SL_WH_COLTYPE_ANY},
        {"items", SL_WH_COLTYPE_ANY}, {"country", SL_WH_COLTYPE_ANY}, {"tags", SL_WH_COLTYPE_ANY},
        {"ci", SL_WH_COLTYPE_ANY},    {"cw", SL_WH_COLTYPE_ANY}};
    sl_wh_colmap_t *m =
        parse_ok("{\"sample_id\": \"id\", \"labels\": [\"click\"], \"dense\": [\"price\"],"
                 " \"sparse\": [\"items\", {\"column\": \"country\", \"hash\": {\"seed\": 7}}],"
                 " \"weighted\": [{\"column\": \"tags\"}, {\"name\": \"c\", \"ids\": \"ci\", "
                 "\"weights\": \"cw\"}],"
                 " \"infer\": false}");
    sl_wh_colmap_resolved_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_resolve(m, cols, 8, NULL, NULL, NULL, &r, &err), SL_OK, "%s",
                 err.msg);
    sl_wh_row_buf_t *b = sl_wh_row_buf_new(r->schema, NULL);
    json_t *o = json_loads(
        "{\"id\": 42, \"click\": true, \"price\": 2.5, \"items\": 9,"
        " \"country\": [\"DE\", \"FR\"], \"tags\": [{\"id\": 3, \"weight\": 0.5}, [4, 2]],"
        " \"ci\": [1, 2], \"cw\": [0.25, 4], \"other\": \"ignored\"}",
        0, NULL);
    sl_wh_row_t row;
    bool has[3];
    cr_assert_eq(sl_wh_colmap_row_from_json(r, b, o, &row, has, &err), SL_OK, "%s", err.msg);
    cr_assert(has[0]);
    cr_assert_not(has[1]);
    cr_assert_eq(row.sample_id, 42);
    cr_assert_float_eq(row.labels[0], 1.0f, 0);
    cr_assert_float_eq(row.dense[0], 2.5f, 0);
    cr_assert_eq(row.sparse[0].len, 1);
    cr_assert_eq(row.sparse[0].ids[0], 9);
    cr_assert_eq(row.sparse[1].len, 2);
    cr_assert_eq(row.sparse[1].ids[0], sl_wh_colmap_hash("DE", 2, 7));
    cr_assert_eq(row.sparse[1].ids[1], sl_wh_colmap_hash("FR", 2, 7));
    cr_assert_eq(row.sparse[2].len, 2);
    cr_assert_eq(row.sparse[2].ids[1], 4);
    cr_assert_float_eq(row.sparse[2].weights[0], 0.5f, 0);
    cr_assert_float_eq(row.sparse[2].weights[1], 2.0f, 0);
    cr_assert_eq(row.sparse[3].ids[1], 2);
    cr_assert_float_eq(row.sparse[3].weights[1], 4.0f, 0);
    json_decref(o);

    /* Missing keys: label 0, dense NaN, lists empty. */
    o = json_loads("{\"price\": null}", 0, NULL);
    cr_assert_eq(sl_wh_colmap_row_from_json(r, b, o, &row, has, &err), SL_OK, "%s", err.msg);
    cr_assert_not(has[0]);
    cr_assert_float_eq(row.labels[0], 0.0f, 0);
    cr_assert(isnan(row.dense[0]));
    cr_assert_eq(row.sparse[0].len, 0);
    cr_assert_eq(row.sparse[3].len, 0);
    json_decref(o);

    const char *bads[][2] = {
        {"{\"price\": \"cheap\"}", "column 'price': expected a number, got a string"},
        {"{\"items\": [1, \"x\"]}",
         "column 'items' id 1: a string; strings become ids only by a declared hash"},
        {"{\"items\": [-3]}", "column 'items' id 0: -3 is negative"},
        {"{\"country\": 5}", "column 'country' id 0: expected a string to hash, got an integer"},
        {"{\"ci\": [1], \"cw\": [1, 2]}", "columns 'ci' and 'cw': 1 ids but 2 weights"},
        {"{\"tags\": [{\"id\": 1}]}", "column 'tags' item 0: needs \"id\" and \"weight\""},
        {"{\"id\": 1.5}", "column 'id': expected an integer, got a number"},
        {"{\"ci\": [1]}", "column 'cw' is missing while 'ci' is given"},
        {"{\"cw\": [1], \"ci\": null}", "column 'ci' is missing while 'cw' is given"},
        {"{\"ci\": 3, \"cw\": [1]}", "column 'ci': expected a list of ids, got an integer"},
        {"[1]", "expected a JSON object, got an array"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        o = json_loads(bads[i][0], 0, NULL);
        cr_assert_eq(sl_wh_colmap_row_from_json(r, b, o, &row, has, &err), SL_ERR_CORRUPT, "%s",
                     bads[i][0]);
        cr_assert_str_eq(err.msg, bads[i][1]);
        json_decref(o);
    }
    sl_wh_row_buf_destroy(b);
    sl_wh_colmap_resolved_destroy(r);
    sl_wh_colmap_destroy(m);
}

/* What pq_columns_test.c and pq_columns_import_test.c share: the suite
 * (its fixture and temporary folder) and the mappings over the fixture. */
#ifndef SLUICE_TESTS_PQ_COLUMNS_UTIL_H
#define SLUICE_TESTS_PQ_COLUMNS_UTIL_H

/* A mapping here: a test file uses only some. */
#define PC_UNUSED __attribute__((unused))

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"
#include "warehouse/pq_dataset.h"

/* the fixture pyarrow-mapped-zstd.parquet; a temporary folder per test */
static char fixture[4096];
static char *dir;

static void setup(void)
{
    const char *root = getenv("SLUICE_SOURCE_DIR");
    snprintf(fixture, sizeof fixture, "%s/tests/data/parquet/pyarrow-mapped-zstd.parquet",
             root ? root : "..");
    dir = tu_mkdtemp("pq_columns");
}

static void teardown(void)
{
    tu_rm_tree(dir);
    free(dir);
}

TestSuite(pq_columns, .init = setup, .fini = teardown);

/* Every conversion: ids, two labels, dense of each numeric type, sparse
 * from a list, a scalar, hashed strings and lists of strings, weighted
 * from a list of structs and from two parallel lists. */
PC_UNUSED static const char *FULL =
    "{\"sample_id\": \"sample_id\", \"session_id\": \"session_id\", \"timestamp\": \"ts\","
    " \"labels\": [\"label\", \"like\"], \"dense\": [\"f32\", \"f64\", \"i64\", \"flag\"],"
    " \"sparse\": [\"item_ids\", \"one_id\","
    "   {\"column\": \"country\", \"name\": \"country_h\", \"hash\": {\"seed\": 7}},"
    "   {\"column\": \"words\", \"name\": \"words_h\", \"hash\": {\"seed\": 3}}],"
    " \"weighted\": [{\"column\": \"tags\"},"
    "   {\"name\": \"cats\", \"ids\": \"cat_ids\", \"weights\": \"cat_w\"}],"
    " \"infer\": false}";
/* No sample or session id (numbered rows, file order), a negative id. */
PC_UNUSED static const char *NEG = "{\"labels\": [\"label\"], \"dense\": [\"f64\"],"
                                   " \"sparse\": [\"neg_ids\"], \"infer\": false}";

static sl_wh_colmap_t *mapping(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    cr_assert_not_null(j, "%s", jerr.text);
    sl_wh_colmap_t *m = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_colmap_parse(j, NULL, NULL, NULL, NULL, &m, &err), SL_OK, "%s", err.msg);
    json_decref(j);
    return m;
}

#endif

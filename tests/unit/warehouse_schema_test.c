/* Warehouse schema: building and validation, slots and lookups, the _schema
 * bytes (round trip, every corruption rejected), the JSON form, and partition
 * names and filters. */
#include "warehouse_testdata.h"

Test(warehouse_schema, accessors)
{
    sl_wh_schema_t *s = td_schema();
    cr_assert_eq(sl_wh_schema_num_features(s), TD_F);
    cr_assert_eq(sl_wh_schema_num_dense(s), 3);
    cr_assert_eq(sl_wh_schema_num_sparse(s), 4);
    cr_assert_eq(sl_wh_schema_num_labels(s), 2);
    for (uint32_t i = 0; i < TD_D; i++)
        cr_assert_str_eq(sl_wh_schema_dense(s, i)->name, td_dense[i]);
    for (uint32_t i = 0; i < TD_S; i++)
        cr_assert_str_eq(sl_wh_schema_sparse(s, i)->name, td_sparse[i]);
    cr_assert_null(sl_wh_schema_dense(s, 3));
    cr_assert_null(sl_wh_schema_sparse(s, 4));
    cr_assert_null(sl_wh_schema_feature(s, TD_F));
    const sl_wh_feature_t *f = sl_wh_schema_find(s, "w_cat");
    cr_assert_not_null(f);
    cr_assert_eq(f->kind, SL_WH_WEIGHTED);
    cr_assert_eq(f->slot, 2);
    cr_assert_eq(sl_wh_schema_find(s, "d2")->slot, 2);
    cr_assert_eq(sl_wh_schema_index(s, "u_geo"), 5);
    cr_assert_eq(sl_wh_schema_index(s, "nope"), -1);
    cr_assert_null(sl_wh_schema_find(s, "click"));
    cr_assert_eq(sl_wh_schema_find_label(s, "like"), 1);
    cr_assert_eq(sl_wh_schema_find_label(s, "d0"), -1);
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_SAMPLE_ID), "sample_id");
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_SESSION_ID), "session_id");
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_TIMESTAMP), "ts");
    cr_assert_str_eq(sl_wh_kind_name(SL_WH_WEIGHTED), "weighted");
    cr_assert_str_eq(sl_wh_stream_kind_name(SL_WH_STREAM_INVERSE), "inverse");
    sl_wh_schema_t *c = sl_wh_schema_clone(s, NULL);
    cr_assert(sl_wh_schema_equal(s, c));
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_add_label(c, "extra", &err), SL_OK);
    cr_assert(!sl_wh_schema_equal(s, c));
    sl_wh_schema_destroy(c);
    sl_wh_schema_destroy(s);
    sl_wh_schema_destroy(NULL);
}

Test(warehouse_schema, many_features)
{
    /* the name index survives growth */
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    sl_error_t err = {0};
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "f%d", i);
        cr_assert_eq(sl_wh_schema_add_feature(s, name, (sl_wh_kind_t)(1 + i % 3), &err), SL_OK);
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "f%d", i);
        cr_assert_eq(sl_wh_schema_index(s, name), i);
        cr_assert_eq(sl_wh_schema_find(s, name)->slot,
                     i % 3 == 0 ? (uint32_t)(i / 3) : (uint32_t)(i / 3 * 2 + (i % 3 - 1)));
    }
    sl_wh_schema_destroy(s);
}

Test(warehouse_schema, invalid_names)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_add_feature(s, "", SL_WH_DENSE, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "feature name is empty");
    cr_assert_eq(sl_wh_schema_add_feature(s, "a/b", SL_WH_DENSE, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "feature name 'a/b' holds a control character or '/' at byte 1");
    cr_assert_eq(sl_wh_schema_add_feature(s, "a\nb", SL_WH_DENSE, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_schema_add_feature(s, "d0", SL_WH_SPARSE, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "feature 'd0' appears twice");
    cr_assert_eq(sl_wh_schema_add_feature(s, "click", SL_WH_SPARSE, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "feature 'click' is also a label");
    cr_assert_eq(sl_wh_schema_add_label(s, "item", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "label 'item' is also a feature");
    cr_assert_eq(sl_wh_schema_add_feature(s, "x", (sl_wh_kind_t)9, &err), SL_ERR_INVALID);
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    cr_assert_eq(sl_wh_schema_add_feature(s, longname, SL_WH_DENSE, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_schema_set_columns(s, "ts", NULL, NULL, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "columns 'ts', 'session_id', 'ts' are not distinct");
    cr_assert_eq(sl_wh_schema_set_columns(s, "sid", NULL, "time", &err), SL_OK);
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_SAMPLE_ID), "sid");
    cr_assert_str_eq(sl_wh_schema_column(s, SL_WH_COL_TIMESTAMP), "time");
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "9ds", &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "ds", &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "ds", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "partition key 'ds' appears twice");
    cr_assert_eq(sl_wh_schema_num_features(s), TD_F);
    sl_wh_schema_destroy(s);
}

Test(warehouse_schema, bytes_round_trip_and_every_flip_rejected)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "ds", &err), SL_OK);
    void *buf;
    size_t len;
    cr_assert_eq(sl_wh_schema_encode(s, NULL, &buf, &len, &err), SL_OK);
    cr_assert_arr_eq(buf, "SLSC\x01\x00\x00\x00", 8);
    uint32_t payload;
    memcpy(&payload, (uint8_t *)buf + 8, 4);
    cr_assert_eq(payload + 20, len);
    sl_wh_schema_t *d;
    cr_assert_eq(sl_wh_schema_decode(buf, len, NULL, &d, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_wh_schema_equal(s, d));
    sl_wh_schema_destroy(d);
    uint8_t *copy = malloc(len);
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, buf, len);
            copy[i] ^= (uint8_t)(1u << bit);
            sl_err_t rc = sl_wh_schema_decode(copy, len, NULL, &d, &err);
            cr_assert_neq(rc, SL_OK, "flip of byte %zu bit %d accepted", i, bit);
            cr_assert_null(d);
        }
    for (size_t n = 0; n < len; n++) {
        cr_assert_neq(sl_wh_schema_decode(buf, n, NULL, &d, &err), SL_OK, "%zu bytes", n);
        cr_assert_eq(err.code, n >= 4 ? SL_ERR_TRUNCATED : SL_ERR_TRUNCATED);
    }
    memcpy(copy, buf, len);
    copy[0] = 'X';
    cr_assert_eq(sl_wh_schema_decode(copy, len, NULL, &d, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "not a sluice schema (magic is not \"SLSC\")");
    memcpy(copy, buf, len);
    copy[4] = 2;
    cr_assert_eq(sl_wh_schema_decode(copy, len, NULL, &d, &err), SL_ERR_VERSION);
    cr_assert_str_eq(err.msg, "schema version 2 (this build reads 1)");
    free(copy);
    sl_free(NULL, buf, len);
    sl_wh_schema_destroy(s);
}

Test(warehouse_schema, save_and_load)
{
    char *dir = td_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/_schema", dir);
    sl_wh_schema_t *s = td_schema(), *l;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_save(s, path, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_schema_load(path, NULL, &l, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_wh_schema_equal(s, l));
    sl_wh_schema_destroy(l);
    snprintf(path, sizeof path, "%s/none", dir);
    cr_assert_eq(sl_wh_schema_load(path, NULL, &l, &err), SL_ERR_NOT_FOUND);
    sl_wh_schema_destroy(s);
    td_rmrf(dir);
    free(dir);
}

Test(warehouse_schema, json)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "ds", &err), SL_OK);
    json_t *j = sl_wh_schema_to_json(s);
    char *text = json_dumps(j, JSON_COMPACT);
    cr_assert_str_eq(
        text, "{\"features\":[{\"name\":\"d0\",\"kind\":\"dense\"},{\"name\":\"item\",\"kind\":"
              "\"sparse\"},{\"name\":\"u_hist\",\"kind\":\"sparse\"},{\"name\":\"d1\",\"kind\":"
              "\"dense\"},{\"name\":\"w_cat\",\"kind\":\"weighted\"},{\"name\":\"u_geo\","
              "\"kind\":\"sparse\"},{\"name\":\"d2\",\"kind\":\"dense\"}],\"labels\":[\"click\","
              "\"like\"],\"columns\":{\"sample_id\":\"sample_id\",\"session_id\":\"session_id\","
              "\"timestamp\":\"ts\"},\"partition_keys\":[\"ds\"]}");
    free(text);
    sl_wh_schema_t *back;
    cr_assert_eq(sl_wh_schema_from_json(j, NULL, &back, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_wh_schema_equal(s, back));
    sl_wh_schema_destroy(back);
    json_decref(j);
    json_error_t je;
    j = json_loads("{\"features\":[{\"name\":\"a\",\"kind\":\"fuzzy\"}]}", 0, &je);
    cr_assert_eq(sl_wh_schema_from_json(j, NULL, &back, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg,
                     "schema JSON: feature 'a': kind 'fuzzy' is not dense, sparse or weighted");
    json_decref(j);
    j = json_loads("{\"labels\":[]}", 0, &je);
    cr_assert_eq(sl_wh_schema_from_json(j, NULL, &back, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "schema JSON: \"features\" array missing");
    json_decref(j);
    j = json_loads("{\"features\":[{\"name\":\"x\",\"kind\":\"sparse\"}],\"labels\":[3]}", 0, &je);
    cr_assert_eq(sl_wh_schema_from_json(j, NULL, &back, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "schema JSON: labels[0] is not a string");
    json_decref(j);
    sl_wh_schema_destroy(s);
}

Test(warehouse_schema, partition_names)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_partition_check(s, "", &err), SL_OK);
    cr_assert_eq(sl_wh_partition_check(s, "ds=2026-01-01/region=eu", &err), SL_OK);
    cr_assert_eq(sl_wh_partition_check(s, "ds=", &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_partition_check(s, "ds=..", &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_partition_check(s, "ds=a/", &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_partition_check(s, "/ds=a", &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_partition_check(s, "ds", &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "ds", &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_partition_key(s, "region", &err), SL_OK);
    cr_assert_eq(sl_wh_partition_check(s, "ds=2026-01-01/region=eu", &err), SL_OK);
    cr_assert_eq(sl_wh_partition_check(s, "ds=2026-01-01", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "partition 'ds=2026-01-01' has 1 keys, the schema has 2");
    cr_assert_eq(sl_wh_partition_check(s, "region=eu/ds=2026-01-01", &err), SL_ERR_INVALID);
    cr_assert_eq(sl_wh_partition_check(s, "", &err), SL_ERR_INVALID);
    sl_wh_schema_destroy(s);
}

static sl_wh_partition_t part(const char *const *k, const char *const *v, uint32_t n)
{
    sl_wh_partition_t p = {"", n, k, v, 0, NULL};
    return p;
}

Test(warehouse_schema, filters)
{
    const char *k[] = {"ds", "region", "n"};
    const char *v1[] = {"2026-01-15", "eu", "10"};
    const char *v2[] = {"2026-02-01", "us", "9"};
    sl_wh_partition_t p1 = part(k, v1, 3), p2 = part(k, v2, 3), none = part(k, v1, 0);
    struct {
        const char *text;
        bool m1, m2, mnone;
    } cases[] = {
        {"", true, true, true},
        {"ds>=2026-01-01", true, true, false},
        {"ds >= 2026-02-01", false, true, false},
        {"ds>=2026-01-01,ds<2026-02-01", true, false, false},
        {"region=eu", true, false, false},
        {"region==us", false, true, false},
        {"region!=eu", false, true, false},
        {"n>9", true, false, false}, /* numeric: 10 > 9 */
        {"n<=9", false, true, false},
        {"ds>2026-01-15, region = eu", false, false, false},
        {"ds<=2026-01-15 , region=eu", true, false, false},
        {"other=1", false, false, false},
    };
    sl_error_t err = {0};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sl_wh_filter_t *f;
        cr_assert_eq(sl_wh_filter_parse(cases[i].text, NULL, &f, &err), SL_OK, "%s: %s",
                     cases[i].text, err.msg);
        cr_assert_eq(sl_wh_filter_match(f, &p1), cases[i].m1, "'%s' on p1", cases[i].text);
        cr_assert_eq(sl_wh_filter_match(f, &p2), cases[i].m2, "'%s' on p2", cases[i].text);
        cr_assert_eq(sl_wh_filter_match(f, &none), cases[i].mnone, "'%s' on none", cases[i].text);
        sl_wh_filter_destroy(f);
    }
    cr_assert(sl_wh_filter_match(NULL, &p1));
    const char *bad[] = {"ds", "ds~x", ",", "=x", "ds=", "ds>=2026,", "9a=1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sl_wh_filter_t *f = (void *)1;
        cr_assert_eq(sl_wh_filter_parse(bad[i], NULL, &f, &err), SL_ERR_INVALID, "'%s'", bad[i]);
        cr_assert_null(f);
    }
    sl_wh_filter_t *f;
    cr_assert_eq(sl_wh_filter_parse("ds~x", NULL, &f, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg,
                     "filter 'ds~x': 'ds~x' is not KEY OP VALUE (OP one of = != < <= > >=)");
}

/* JSON records on Kafka into rows (record_json.h): jansson parses the
 * value, the column mapping fills a row, the builder of record_decode.c
 * takes it as it takes a decoded Sample. */
#include "kafka/record_json.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "common/mem.h"

struct sl_kafka_json {
    const sl_allocator_t *a;
    const sl_wh_colmap_resolved_t *map;
    sl_wh_row_buf_t *buf;
};

sl_err_t sl_kafka_json_new(const sl_wh_colmap_resolved_t *map, const sl_allocator_t *a,
                           sl_kafka_json_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_kafka_json_t *j = sl_calloc(a, 1, sizeof *j);
    if (j == NULL) return sl_error_set(err, SL_ERR_NOMEM, "kafka json records: out of memory");
    j->a = a;
    j->map = map;
    j->buf = sl_wh_row_buf_new(map->schema, a);
    if (j->buf == NULL) {
        sl_free(a, j, sizeof *j);
        return sl_error_set(err, SL_ERR_NOMEM, "kafka json records: out of memory");
    }
    *out = j;
    return SL_OK;
}

void sl_kafka_json_destroy(sl_kafka_json_t *j)
{
    if (j == NULL) return;
    sl_wh_row_buf_destroy(j->buf);
    sl_free(j->a, j, sizeof *j);
}

sl_err_t sl_kafka_rows_add_json(sl_kafka_rows_t *r, sl_kafka_json_t *j,
                                const sl_kafka_record_t *rec, sl_error_t *err)
{
    if (rec->value == NULL || rec->value_len == 0)
        return sl_error_set(err, SL_ERR_CORRUPT, "offset %" PRId64 ": no value (a JSON object)",
                            rec->offset);
    json_error_t jerr;
    json_t *obj = json_loadb(rec->value, rec->value_len, JSON_REJECT_DUPLICATES, &jerr);
    if (obj == NULL)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "offset %" PRId64 ": the value is not JSON (at byte %d: %s)",
                            rec->offset, jerr.position, jerr.text);
    sl_wh_row_t row;
    bool has[3];
    sl_error_t rerr = {0};
    sl_err_t rc = sl_wh_colmap_row_from_json(j->map, j->buf, obj, &row, has, &rerr);
    json_decref(obj);
    if (rc == SL_ERR_CORRUPT)
        return sl_error_set(err, SL_ERR_CORRUPT, "offset %" PRId64 ": %s", rec->offset, rerr.msg);
    if (rc != SL_OK) return sl_error_set(err, rc, "%s", rerr.msg);
    return sl_kafka_rows_add_row(r, &row, rec->offset, rec->create_ms, err);
}

/* A float as JSON: null when not finite (JSON has no NaN). */
static json_t *jfloat(float f)
{
    return isfinite(f) ? json_real((double)f) : json_null();
}

sl_err_t sl_kafka_json_encode(const sl_wh_schema_t *schema, const sl_wh_row_t *row,
                              const sl_allocator_t *a, char **buf, size_t *cap, size_t *len,
                              sl_error_t *err)
{
    json_t *o = json_object();
    bool ok = o != NULL;
    ok = ok && json_object_set_new(o, "sample_id", json_integer(row->sample_id)) == 0;
    ok = ok && json_object_set_new(o, "session_id", json_integer(row->session_id)) == 0;
    ok = ok && json_object_set_new(o, "timestamp", json_integer(row->timestamp)) == 0;
    for (uint32_t t = 0; ok && t < sl_wh_schema_num_labels(schema); t++)
        ok = json_object_set_new(o, sl_wh_schema_label(schema, t),
                                 jfloat(row->labels ? row->labels[t] : 0.0f)) == 0;
    for (uint32_t i = 0; ok && i < sl_wh_schema_num_features(schema); i++) {
        const sl_wh_feature_t *f = sl_wh_schema_feature(schema, i);
        if (f->kind == SL_WH_DENSE) {
            float v = row->dense ? row->dense[f->slot] : NAN;
            if (!isnan(v)) ok = json_object_set_new(o, f->name, jfloat(v)) == 0;
            continue;
        }
        const sl_wh_idlist_t *l = row->sparse ? &row->sparse[f->slot] : NULL;
        json_t *arr = json_array();
        ok = arr != NULL;
        for (uint32_t k = 0; ok && l != NULL && k < l->len; k++) {
            json_t *id = json_integer(l->ids[k]);
            if (f->kind == SL_WH_WEIGHTED)
                ok = json_array_append_new(
                         arr, json_pack("[o, o]", id, jfloat(l->weights ? l->weights[k] : 1.0f))) ==
                     0;
            else
                ok = json_array_append_new(arr, id) == 0;
        }
        ok = ok && json_object_set_new(o, f->name, arr) == 0;
    }
    size_t n = ok ? json_dumpb(o, NULL, 0, JSON_COMPACT) : 0;
    if (ok && n > *cap) {
        size_t c = sl_grow_cap(*cap, n, 256, SIZE_MAX);
        char *nb = sl_alloc(a, c);
        if (nb == NULL)
            ok = false;
        else {
            sl_free(a, *buf, *cap);
            *buf = nb;
            *cap = c;
        }
    }
    if (ok) *len = json_dumpb(o, *buf, *cap, JSON_COMPACT);
    json_decref(o);
    return ok ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "kafka json records: out of memory");
}

json_t *sl_kafka_json_columns(const sl_wh_schema_t *schema)
{
    json_t *labels = json_array(), *dense = json_array(), *sparse = json_array(),
           *weighted = json_array();
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:b}", "sample_id", "sample_id",
                          "session_id", "session_id", "timestamp", "timestamp", "labels", labels,
                          "dense", dense, "sparse", sparse, "weighted", weighted, "infer", 0);
    if (o == NULL) return NULL;
    bool ok = true;
    for (uint32_t t = 0; ok && t < sl_wh_schema_num_labels(schema); t++)
        ok = json_array_append_new(labels, json_string(sl_wh_schema_label(schema, t))) == 0;
    for (uint32_t i = 0; ok && i < sl_wh_schema_num_features(schema); i++) {
        const sl_wh_feature_t *f = sl_wh_schema_feature(schema, i);
        if (f->kind == SL_WH_DENSE)
            ok = json_array_append_new(dense, json_string(f->name)) == 0;
        else if (f->kind == SL_WH_SPARSE)
            ok = json_array_append_new(sparse, json_string(f->name)) == 0;
        else
            ok = json_array_append_new(weighted, json_pack("{s:s}", "column", f->name)) == 0;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

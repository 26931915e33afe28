/* The jsonl importer's line parser and schema inference.
 *
 * A line is one JSON object, the form sl_wh_row_to_json prints:
 *   {"sample_id":1, "session_id":7, "ts":1700000000,
 *    "labels":{"click":1}, "dense":{"price":2.5},
 *    "sparse":{"item":[12,40]}, "weighted":{"tags":{"ids":[3],"weights":[0.5]}}}
 * (the id column keys are the schema's column names). Every key is optional;
 * a missing dense value is missing, a missing list is empty, a missing label
 * is 0, null labels and weights are NaN. Anything else that does not fit the
 * schema - an unknown key or feature, a wrong type, an id outside [0, 2^63),
 * a number a float32 cannot hold - makes the row bad, with a message saying
 * which key. */
#include "import_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/fileio.h"

#define LINE_MAX_BYTES ((size_t)1 << 26)

/* A float32 from a JSON number; null gives NaN when null_ok. */
static bool to_float(const json_t *v, bool null_ok, float *out)
{
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v))
        d = json_real_value(v);
    else if (json_is_null(v) && null_ok) {
        *out = NAN;
        return true;
    } else
        return false;
    float f = (float)d;
    if (isinf(f)) return false; /* a double beyond float32's range */
    *out = f;
    return true;
}

/* The message for a value to_float refused. */
static sl_err_t bad_float(sl_error_t *err, const char *what, const char *name, const json_t *v)
{
    if (json_is_number(v))
        return imp_bad(err, "%s '%s': %g is out of the float32 range", what, name,
                       json_number_value(v));
    return imp_bad(err, "%s '%s': expected a number, got %s", what, name, imp_json_type(v));
}

static sl_err_t parse_ids(sl_wh_row_buf_t *b, uint32_t s, const char *section, const char *name,
                          const json_t *arr, sl_error_t *err)
{
    if (!json_is_array(arr))
        return imp_bad(err, "%s '%s': expected an array of ids, got %s", section, name,
                       imp_json_type(arr));
    size_t n = json_array_size(arr);
    if (n > INT32_MAX || !imp_reserve(b, s, n))
        return sl_error_set(err, SL_ERR_NOMEM, "%s '%s': no memory for %zu ids", section, name, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v))
            return imp_bad(err, "%s '%s' id %zu: expected an integer, got %s", section, name, i,
                           imp_json_type(v));
        json_int_t id = json_integer_value(v);
        if (id < 0)
            return imp_bad(err, "%s '%s' id %zu: id out of range (%lld < 0)", section, name, i,
                           (long long)id);
        b->ids[s][i] = (int64_t)id;
    }
    b->lists[s].len = (uint32_t)n;
    b->lists[s].ids = b->ids[s];
    return SL_OK;
}

static sl_err_t parse_weighted(sl_wh_row_buf_t *b, uint32_t s, const char *name, const json_t *v,
                               sl_error_t *err)
{
    if (!json_is_object(v))
        return imp_bad(err, "weighted '%s': expected {\"ids\":[...],\"weights\":[...]}, got %s",
                       name, imp_json_type(v));
    const json_t *ids = json_object_get(v, "ids"), *ws = json_object_get(v, "weights");
    if (ids == NULL || ws == NULL || json_object_size(v) != 2)
        return imp_bad(err, "weighted '%s': expected exactly the keys \"ids\" and \"weights\"",
                       name);
    SL_FORWARD_IF_ERROR(parse_ids(b, s, "weighted", name, ids, err));
    if (!json_is_array(ws) || json_array_size(ws) != b->lists[s].len)
        return imp_bad(err, "weighted '%s': \"weights\" must be an array of %u numbers", name,
                       b->lists[s].len);
    for (uint32_t i = 0; i < b->lists[s].len; i++)
        if (!to_float(json_array_get(ws, i), true, &b->weights[s][i]))
            return bad_float(err, "weighted weight of", name, json_array_get(ws, i));
    b->lists[s].weights = b->weights[s];
    return SL_OK;
}

static sl_err_t parse_section(sl_wh_row_buf_t *b, const char *section, sl_wh_kind_t kind,
                              const json_t *obj, sl_error_t *err)
{
    if (json_is_null(obj)) return SL_OK;
    if (!json_is_object(obj))
        return imp_bad(err, "\"%s\": expected an object, got %s", section, imp_json_type(obj));
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)obj, name, v)
    {
        const sl_wh_feature_t *f = sl_wh_schema_find(b->schema, name);
        if (f == NULL) return imp_bad(err, "%s '%s': no such feature in the schema", section, name);
        if (f->kind != kind)
            return imp_bad(err, "%s '%s': the schema says this feature is %s", section, name,
                           sl_wh_kind_name(f->kind));
        sl_err_t rc = SL_OK;
        if (kind == SL_WH_DENSE) {
            if (!to_float(v, true, &b->dense[f->slot])) return bad_float(err, "dense", name, v);
        } else if (kind == SL_WH_SPARSE)
            rc = parse_ids(b, f->slot, "sparse", name, v, err);
        else
            rc = parse_weighted(b, f->slot, name, v, err);
        if (rc != SL_OK) return rc;
    }
    return SL_OK;
}

static sl_err_t parse_column(const json_t *v, const char *key, int64_t *out, sl_error_t *err)
{
    if (json_is_null(v)) return SL_OK;
    if (!json_is_integer(v))
        return imp_bad(err, "\"%s\": expected an integer, got %s", key, imp_json_type(v));
    *out = (int64_t)json_integer_value(v);
    return SL_OK;
}

static sl_err_t parse_object(sl_wh_row_buf_t *b, const json_t *root, sl_wh_row_t *row,
                             bool *has_sample_id, sl_error_t *err)
{
    const char *sid = sl_wh_schema_column(b->schema, SL_WH_COL_SAMPLE_ID);
    const char *sess = sl_wh_schema_column(b->schema, SL_WH_COL_SESSION_ID);
    const char *ts = sl_wh_schema_column(b->schema, SL_WH_COL_TIMESTAMP);
    const char *key;
    const json_t *v;
    sl_err_t rc = SL_OK;
    json_object_foreach((json_t *)root, key, v)
    {
        /* The id columns go by the schema's names, and by the default
         * names too, which is what cat prints. */
        if (strcmp(key, sid) == 0 || strcmp(key, "sample_id") == 0) {
            rc = parse_column(v, key, &row->sample_id, err);
            *has_sample_id = !json_is_null(v);
        } else if (strcmp(key, sess) == 0 || strcmp(key, "session_id") == 0)
            rc = parse_column(v, key, &row->session_id, err);
        else if (strcmp(key, ts) == 0 || strcmp(key, "ts") == 0)
            rc = parse_column(v, key, &row->timestamp, err);
        else if (strcmp(key, "dense") == 0)
            rc = parse_section(b, "dense", SL_WH_DENSE, v, err);
        else if (strcmp(key, "sparse") == 0)
            rc = parse_section(b, "sparse", SL_WH_SPARSE, v, err);
        else if (strcmp(key, "weighted") == 0)
            rc = parse_section(b, "weighted", SL_WH_WEIGHTED, v, err);
        else if (strcmp(key, "labels") == 0) {
            if (json_is_null(v)) continue;
            if (!json_is_object(v))
                return imp_bad(err, "\"labels\": expected an object, got %s", imp_json_type(v));
            const char *name;
            const json_t *l;
            json_object_foreach((json_t *)v, name, l)
            {
                int t = sl_wh_schema_find_label(b->schema, name);
                if (t < 0) return imp_bad(err, "label '%s': no such label in the schema", name);
                if (!to_float(l, true, &b->labels[t])) return bad_float(err, "label", name, l);
            }
        } else {
            char ex[48];
            return imp_bad(err, "unknown key \"%s\"", imp_excerpt(key, strlen(key), ex, sizeof ex));
        }
        if (rc != SL_OK) return rc;
    }
    return SL_OK;
}

sl_err_t sl_wh_jsonl_parse_line(sl_wh_row_buf_t *b, const char *line, size_t len, sl_wh_row_t *row,
                                bool *has_sample_id, sl_error_t *err)
{
    imp_row_reset(b);
    *row = (sl_wh_row_t){0};
    *has_sample_id = false;
    if (len > LINE_MAX_BYTES) return imp_bad(err, "line longer than %zu bytes", LINE_MAX_BYTES);

    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) return imp_bad(err, "bad JSON at column %d: %s", jerr.column, jerr.text);
    sl_err_t rc;
    if (!json_is_object(root))
        rc = imp_bad(err, "expected a JSON object, got %s", imp_json_type(root));
    else
        rc = parse_object(b, root, row, has_sample_id, err);
    json_decref(root);
    if (rc != SL_OK) return rc;
    row->labels = b->labels;
    row->dense = b->dense;
    row->sparse = b->lists;
    return SL_OK;
}

/* ---- schema inference ---- */

/* Add the keys of section (an object) as features of kind, first seen first;
 * a name already known keeps its first kind (a later row using it under
 * another kind is then a bad row). */
static sl_err_t infer_section(sl_wh_schema_t *s, const json_t *obj, sl_wh_kind_t kind,
                              sl_error_t *err)
{
    if (!json_is_object(obj)) return SL_OK;
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)obj, name, v)
    {
        (void)v;
        if (sl_wh_schema_find(s, name) != NULL || sl_wh_schema_find_label(s, name) >= 0) continue;
        sl_err_t rc = sl_wh_schema_add_feature(s, name, kind, err);
        if (rc != SL_OK) return sl_error_prefix(err, "inferring the schema: ");
    }
    return SL_OK;
}

static sl_err_t infer_line(sl_wh_schema_t *s, const json_t *root, sl_error_t *err)
{
    const json_t *labels = json_object_get(root, "labels");
    if (json_is_object(labels)) {
        const char *name;
        const json_t *v;
        json_object_foreach((json_t *)labels, name, v)
        {
            (void)v;
            if (sl_wh_schema_find_label(s, name) >= 0 || sl_wh_schema_find(s, name) != NULL)
                continue;
            if (sl_wh_schema_add_label(s, name, err) != SL_OK)
                return sl_error_prefix(err, "inferring the schema: ");
        }
    }
    sl_err_t rc = infer_section(s, json_object_get(root, "dense"), SL_WH_DENSE, err);
    if (rc == SL_OK) rc = infer_section(s, json_object_get(root, "sparse"), SL_WH_SPARSE, err);
    if (rc == SL_OK) rc = infer_section(s, json_object_get(root, "weighted"), SL_WH_WEIGHTED, err);
    return rc;
}

typedef struct infer {
    sl_wh_schema_t *s;
    uint32_t seen, objects, max_lines;
    sl_error_t *err;
} infer_t;

static sl_err_t infer_one(void *ctx, const char *line, size_t len)
{
    infer_t *in = ctx;
    if (in->seen >= in->max_lines) return SL_ERR_CLOSED;
    in->seen++;
    if (len > IMP_LINE_LIMIT) return SL_OK; /* a line that long holds no object to infer from */
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
    sl_err_t rc = SL_OK;
    if (json_is_object(root)) {
        in->objects++;
        rc = infer_line(in->s, root, in->err);
    }
    json_decref(root);
    return rc;
}

sl_err_t sl_wh_jsonl_infer_schema(const char *const *inputs, uint32_t num_inputs,
                                  uint32_t max_lines, const sl_allocator_t *a, sl_wh_schema_t **out,
                                  sl_error_t *err)
{
    *out = NULL;
    infer_t in = {.max_lines = max_lines ? max_lines : 1000, .err = err};
    in.s = sl_wh_schema_new(a);
    if (in.s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for a schema");
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; i < num_inputs && in.seen < in.max_lines && rc == SL_OK; i++) {
        /* Standard input cannot be read twice; its lines are not inferred from. */
        if (strcmp(inputs[i], "-") == 0) continue;
        imp_source_t *src;
        if ((rc = imp_source_open(inputs[i], a, &src, err)) != SL_OK) break;
        rc = imp_read_lines(src, a, infer_one, NULL, &in, err);
        imp_source_close(src);
    }
    sl_wh_schema_t *s = in.s;
    uint32_t objects = in.objects;
    max_lines = in.max_lines;
    uint32_t files = 0;
    for (uint32_t i = 0; i < num_inputs; i++)
        files += strcmp(inputs[i], "-") != 0;
    if (rc == SL_OK && files == 0)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "cannot infer a schema from standard input "
                          "(give one with --schema)");
    else if (rc == SL_OK && objects == 0)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "cannot infer a schema: no JSON object in the first %u lines of the "
                          "input (give one with --schema)",
                          max_lines);
    if (rc != SL_OK) {
        sl_wh_schema_destroy(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

/* The column mapping, row side: the string hash, filling a row's slots
 * from JSON values (Kafka JSON records, CSV cells holding JSON lists), and
 * printing a resolved mapping back as an explicit mapping object, and
 * resolving against the named columns alone (JSON records). */
#include "warehouse/column_map.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "common/err.h"
#include "import_internal.h"

int64_t sl_wh_colmap_hash(const void *bytes, size_t len, uint64_t seed)
{
    /* Masked as every sluice id is kept in [0, 2^63). */
    return (int64_t)(XXH3_64bits_withSeed(bytes, len, seed) & (uint64_t)INT64_MAX);
}

void imp_row_reset(sl_wh_row_buf_t *b)
{
    for (uint32_t t = 0; t < b->T; t++)
        b->labels[t] = 0.0f;
    for (uint32_t d = 0; d < b->D; d++)
        b->dense[d] = NAN;
    for (uint32_t s = 0; s < b->S; s++) {
        b->lists[s].len = 0;
        b->lists[s].ids = b->ids[s];
        b->lists[s].weights = NULL;
    }
}

/* A float32 from a JSON number or boolean. */
static bool json_float(const json_t *v, float *out)
{
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v))
        d = json_real_value(v);
    else if (json_is_boolean(v))
        d = json_is_true(v) ? 1.0 : 0.0;
    else
        return false;
    float f = (float)d;
    if (isinf(f) && !isinf(d)) return false; /* beyond float32's range */
    *out = f;
    return true;
}

static sl_err_t one_id(const sl_wh_colmap_slot_t *s, const char *col, const json_t *v, size_t i,
                       int64_t *out, sl_error_t *err)
{
    if (s->hash) {
        if (!json_is_string(v))
            return imp_bad(err, "column '%s' id %zu: expected a string to hash, got %s", col, i,
                           imp_json_type(v));
        *out = sl_wh_colmap_hash(json_string_value(v), json_string_length(v), s->seed);
        return SL_OK;
    }
    if (json_is_string(v))
        return imp_bad(err,
                       "column '%s' id %zu: a string; strings become ids only by a declared hash",
                       col, i);
    if (!json_is_integer(v))
        return imp_bad(err, "column '%s' id %zu: expected an integer, got %s", col, i,
                       imp_json_type(v));
    json_int_t id = json_integer_value(v);
    if (id < 0) return imp_bad(err, "column '%s' id %zu: %lld is negative", col, i, (long long)id);
    *out = (int64_t)id;
    return SL_OK;
}

static sl_err_t fill_sparse(sl_wh_row_buf_t *b, const sl_wh_colmap_slot_t *s, const char *col,
                            const json_t *v, sl_error_t *err)
{
    uint32_t k = s->index;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n > INT32_MAX || !imp_reserve(b, k, n))
        return sl_error_set(err, SL_ERR_NOMEM, "column '%s': no memory for %zu ids", col, n);
    if (!json_is_array(v)) {
        SL_FORWARD_IF_ERROR(one_id(s, col, v, 0, &b->ids[k][0], err));
    } else
        for (size_t i = 0; i < n; i++) {
            SL_FORWARD_IF_ERROR(one_id(s, col, json_array_get(v, i), i, &b->ids[k][i], err));
        }
    b->lists[k].len = (uint32_t)n;
    b->lists[k].ids = b->ids[k];
    return SL_OK;
}

/* list<struct{id, weight}>: [{"id": 3, "weight": 0.5}, ...] or [[3, 0.5], ...]. */
static sl_err_t fill_structs(sl_wh_row_buf_t *b, const sl_wh_colmap_slot_t *s, const char *col,
                             const json_t *v, sl_error_t *err)
{
    uint32_t k = s->index;
    if (!json_is_array(v))
        return imp_bad(err, "column '%s': expected a list of {\"id\", \"weight\"}, got %s", col,
                       imp_json_type(v));
    size_t n = json_array_size(v);
    if (n > INT32_MAX || !imp_reserve(b, k, n))
        return sl_error_set(err, SL_ERR_NOMEM, "column '%s': no memory for %zu ids", col, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i), *id, *w;
        if (json_is_object(e)) {
            id = json_object_get(e, "id");
            w = json_object_get(e, "weight");
        } else if (json_is_array(e) && json_array_size(e) == 2) {
            id = json_array_get(e, 0);
            w = json_array_get(e, 1);
        } else
            return imp_bad(err, "column '%s' item %zu: expected {\"id\", \"weight\"}, got %s", col,
                           i, imp_json_type(e));
        if (id == NULL || w == NULL)
            return imp_bad(err, "column '%s' item %zu: needs \"id\" and \"weight\"", col, i);
        sl_wh_colmap_slot_t plain = *s;
        plain.hash = false;
        SL_FORWARD_IF_ERROR(one_id(&plain, col, id, i, &b->ids[k][i], err));
        if (!json_float(w, &b->weights[k][i]))
            return imp_bad(err, "column '%s' item %zu: weight: expected a number, got %s", col, i,
                           imp_json_type(w));
    }
    b->lists[k].len = (uint32_t)n;
    b->lists[k].ids = b->ids[k];
    b->lists[k].weights = b->weights[k];
    return SL_OK;
}

/* Two parallel lists: ids (v) and weights (w). */
static sl_err_t fill_pair(sl_wh_row_buf_t *b, const sl_wh_colmap_slot_t *s, const char *col,
                          const char *wcol, const json_t *v, const json_t *w, sl_error_t *err)
{
    uint32_t k = s->index;
    /* One of the two missing (the caller took both missing as an empty list). */
    if (v == NULL || json_is_null(v))
        return imp_bad(err, "column '%s' is missing while '%s' is given", col, wcol);
    if (w == NULL || json_is_null(w))
        return imp_bad(err, "column '%s' is missing while '%s' is given", wcol, col);
    if (!json_is_array(v))
        return imp_bad(err, "column '%s': expected a list of ids, got %s", col, imp_json_type(v));
    if (!json_is_array(w))
        return imp_bad(err, "column '%s': expected a list of weights, got %s", wcol,
                       imp_json_type(w));
    size_t n = json_array_size(v);
    if (json_array_size(w) != n)
        return imp_bad(err, "columns '%s' and '%s': %zu ids but %zu weights", col, wcol, n,
                       json_array_size(w));
    SL_FORWARD_IF_ERROR(fill_sparse(b, s, col, v, err));
    for (size_t i = 0; i < n; i++)
        if (!json_float(json_array_get(w, i), &b->weights[k][i]))
            return imp_bad(err, "column '%s' weight %zu: expected a number, got %s", wcol, i,
                           imp_json_type(json_array_get(w, i)));
    b->lists[k].weights = b->weights[k];
    return SL_OK;
}

sl_err_t imp_colmap_fill(sl_wh_row_buf_t *b, const sl_wh_colmap_resolved_t *r,
                         const sl_wh_colmap_slot_t *s, const json_t *v, const json_t *w,
                         sl_wh_row_t *row, sl_error_t *err)
{
    const char *col = r->columns[s->column].name;
    bool missing = v == NULL || json_is_null(v);
    float f;
    switch (s->target) {
    case SL_WH_MAP_SAMPLE_ID:
    case SL_WH_MAP_SESSION_ID:
    case SL_WH_MAP_TIMESTAMP:
        if (missing) return SL_OK;
        if (!json_is_integer(v))
            return imp_bad(err, "column '%s': expected an integer, got %s", col, imp_json_type(v));
        if (s->target == SL_WH_MAP_SAMPLE_ID)
            row->sample_id = json_integer_value(v);
        else if (s->target == SL_WH_MAP_SESSION_ID)
            row->session_id = json_integer_value(v);
        else
            row->timestamp = json_integer_value(v);
        return SL_OK;
    case SL_WH_MAP_LABEL:
    case SL_WH_MAP_DENSE:
        if (missing) return SL_OK; /* reset left 0 (label) or NaN (dense) */
        if (!json_float(v, &f))
            return imp_bad(err, "column '%s': expected a number, got %s", col, imp_json_type(v));
        if (s->target == SL_WH_MAP_LABEL)
            b->labels[s->index] = f;
        else
            b->dense[s->index] = f;
        return SL_OK;
    case SL_WH_MAP_SPARSE:
        return missing ? SL_OK : fill_sparse(b, s, col, v, err);
    case SL_WH_MAP_WEIGHTED:
        if (s->weights_column == SL_WH_COLMAP_NONE)
            return missing ? SL_OK : fill_structs(b, s, col, v, err);
        if (missing && (w == NULL || json_is_null(w))) return SL_OK;
        return fill_pair(b, s, col, r->columns[s->weights_column].name, v, w, err);
    }
    return imp_bad(err, "column '%s': unknown slot target %d", col, (int)s->target);
}

sl_err_t sl_wh_colmap_row_from_json(const sl_wh_colmap_resolved_t *r, sl_wh_row_buf_t *b,
                                    const json_t *obj, sl_wh_row_t *row, bool has[3],
                                    sl_error_t *err)
{
    imp_row_reset(b);
    *row = (sl_wh_row_t){0};
    has[0] = has[1] = has[2] = false;
    if (!json_is_object(obj))
        return imp_bad(err, "expected a JSON object, got %s", imp_json_type(obj));
    for (uint32_t i = 0; i < r->num_slots; i++) {
        const sl_wh_colmap_slot_t *s = &r->slots[i];
        const json_t *v = json_object_get(obj, r->columns[s->column].name);
        const json_t *w = s->weights_column != SL_WH_COLMAP_NONE
                              ? json_object_get(obj, r->columns[s->weights_column].name)
                              : NULL;
        SL_FORWARD_IF_ERROR(imp_colmap_fill(b, r, s, v, w, row, err));
        if (s->target <= SL_WH_MAP_TIMESTAMP && v != NULL && !json_is_null(v))
            has[s->target - SL_WH_MAP_SAMPLE_ID] = true;
    }
    row->labels = b->labels;
    row->dense = b->dense;
    row->sparse = b->lists;
    return SL_OK;
}

static const char *const ID_KEYS[3] = {"sample_id", "session_id", "timestamp"};

/* ---- printing ---- */

json_t *sl_wh_colmap_resolved_to_json(const sl_wh_colmap_resolved_t *r)
{
    json_t *o = json_object(), *labels = json_array(), *dense = json_array(),
           *sparse = json_array(), *weighted = json_array();
    if (o == NULL || labels == NULL || dense == NULL || sparse == NULL || weighted == NULL) {
        json_decref(o);
        json_decref(labels);
        json_decref(dense);
        json_decref(sparse);
        json_decref(weighted);
        return NULL;
    }
    bool ok = true;
    for (uint32_t i = 0; i < r->num_slots && ok; i++) {
        const sl_wh_colmap_slot_t *s = &r->slots[i];
        const char *col = r->columns[s->column].name;
        switch (s->target) {
        case SL_WH_MAP_SAMPLE_ID:
        case SL_WH_MAP_SESSION_ID:
        case SL_WH_MAP_TIMESTAMP:
            ok = json_object_set_new(o, ID_KEYS[s->target - SL_WH_MAP_SAMPLE_ID],
                                     json_string(col)) == 0;
            break;
        case SL_WH_MAP_LABEL:
            ok = json_array_append_new(labels, json_string(col)) == 0;
            break;
        case SL_WH_MAP_DENSE:
            ok = json_array_append_new(dense, json_string(col)) == 0;
            break;
        case SL_WH_MAP_SPARSE:
            if (!s->hash && strcmp(s->name, col) == 0)
                ok = json_array_append_new(sparse, json_string(col)) == 0;
            else if (s->hash)
                ok = json_array_append_new(sparse, json_pack("{s:s, s:s, s:{s:I}}", "column", col,
                                                             "name", s->name, "hash", "seed",
                                                             (json_int_t)s->seed)) == 0;
            else
                ok = json_array_append_new(
                         sparse, json_pack("{s:s, s:s}", "column", col, "name", s->name)) == 0;
            break;
        case SL_WH_MAP_WEIGHTED:
            if (s->weights_column == SL_WH_COLMAP_NONE)
                ok = json_array_append_new(
                         weighted, json_pack("{s:s, s:s}", "column", col, "name", s->name)) == 0;
            else
                ok = json_array_append_new(
                         weighted, json_pack("{s:s, s:s, s:s}", "name", s->name, "ids", col,
                                             "weights", r->columns[s->weights_column].name)) == 0;
            break;
        }
    }
    ok = ok && json_object_set_new(o, "labels", labels) == 0;
    ok = ok && json_object_set_new(o, "dense", dense) == 0;
    ok = ok && json_object_set_new(o, "sparse", sparse) == 0;
    ok = ok && json_object_set_new(o, "weighted", weighted) == 0;
    ok = ok && json_object_set_new(o, "infer", json_false()) == 0;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

sl_err_t sl_wh_colmap_resolve_named(const sl_wh_colmap_t *m, const sl_allocator_t *a,
                                    sl_wh_colmap_problem_fn fn, void *ctx,
                                    sl_wh_colmap_resolved_t **out, sl_error_t *err)
{
    uint32_t n = sl_wh_colmap_num_named(m);
    sl_wh_input_column_t *cols = sl_calloc(a, n + 1, sizeof *cols);
    if (cols == NULL) return sl_error_set(err, SL_ERR_NOMEM, "column mapping: out of memory");
    for (uint32_t i = 0; i < n; i++)
        cols[i] = (sl_wh_input_column_t){sl_wh_colmap_named(m, i), SL_WH_COLTYPE_ANY};
    sl_err_t rc = sl_wh_colmap_resolve(m, cols, n, a, fn, ctx, out, err);
    sl_free(a, cols, (size_t)(n + 1) * sizeof *cols);
    return rc;
}

/* Rows as JSON lines (the jsonl import format read backwards): one row of an
 * sl_wh_rows_t to a jansson object, and `cat` over a whole table. Floats are
 * printed in the shortest decimal form that reads back to the same float32. */
#include "table_tools.h"
#include "wh_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The double nearest to the shortest decimal that reads back as f, so that
 * printing it with 9 significant digits yields that decimal. */
static json_t *float_json(float f)
{
    if (!isfinite(f)) return json_null();
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f) return json_real(strtod(buf, NULL));
    }
    return json_real((double)f);
}

int sl_wh_json_dump(const json_t *json, FILE *out)
{
    if (json_dumpf(json, out, JSON_COMPACT | JSON_REAL_PRECISION(9)) != 0) return -1;
    return fputc('\n', out) == EOF ? -1 : 0;
}

static bool key_weighted(const sl_wh_schema_t *s, const char *key)
{
    const sl_wh_feature_t *fe = s ? sl_wh_schema_find(s, key) : NULL;
    return fe != NULL && fe->kind == SL_WH_WEIGHTED;
}

/* Add key's list (n values at vals/wts) to the "sparse" or "weighted" object. */
static int add_list(json_t *sparse, json_t *weighted, const char *key, bool is_weighted,
                    const int64_t *vals, const float *wts, uint64_t n)
{
    json_t *ids = json_array();
    if (ids == NULL) return -1;
    int bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad |= json_array_append_new(ids, json_integer(vals[i]));
    if (!is_weighted) return bad | json_object_set_new(sparse, key, ids);
    json_t *ws = json_array();
    for (uint64_t i = 0; ws != NULL && i < n; i++)
        bad |= json_array_append_new(ws, float_json(wts ? wts[i] : 1.0f));
    json_t *o = json_object();
    bad |= json_object_set_new(o, "ids", ids);
    bad |= json_object_set_new(o, "weights", ws);
    return bad | json_object_set_new(weighted, key, o);
}

/* Row r; kstart[k] is where row r's values of plain key k start, gstart
 * (one per key of every group, group after group) where its unique row's
 * values start. */
static json_t *row_json(const sl_wh_rows_t *rows, uint32_t r, const uint64_t *kstart,
                        const uint64_t *gstart)
{
    const sl_batch_t *b = &rows->batch;
    json_t *o = json_object();
    if (o == NULL) return NULL;
    int bad = 0;
    if (b->sample_ids) bad |= json_object_set_new(o, "sample_id", json_integer(b->sample_ids[r]));
    if (rows->session_ids)
        bad |= json_object_set_new(o, "session_id", json_integer(rows->session_ids[r]));
    if (rows->timestamps) bad |= json_object_set_new(o, "ts", json_integer(rows->timestamps[r]));
    if (b->labels.cols > 0) {
        json_t *l = json_object();
        for (uint32_t t = 0; l != NULL && t < b->labels.cols; t++)
            bad |= json_object_set_new(l, b->labels.names ? b->labels.names[t] : "?",
                                       float_json(b->labels.data[(size_t)r * b->labels.cols + t]));
        bad |= json_object_set_new(o, "labels", l);
    }
    if (b->dense.cols > 0) {
        json_t *d = json_object();
        for (uint32_t c = 0; d != NULL && c < b->dense.cols; c++) {
            float v = b->dense.data[(size_t)r * b->dense.cols + c];
            if (v != v) continue; /* missing */
            bad |= json_object_set_new(d, b->dense.names ? b->dense.names[c] : "?", float_json(v));
        }
        bad |= json_object_set_new(o, "dense", d);
    }
    json_t *sparse = json_object(), *weighted = json_object();
    if (sparse == NULL || weighted == NULL) bad = -1;
    bool any_s = false, any_w = false;
    const sl_kjt_t *k = &b->sparse;
    for (uint32_t i = 0; !bad && i < k->num_keys; i++) {
        bool w = key_weighted(rows->schema, k->keys[i]);
        any_w |= w;
        any_s |= !w;
        bad |= add_list(sparse, weighted, k->keys[i], w, k->values + kstart[i],
                        k->weights ? k->weights + kstart[i] : NULL,
                        (uint64_t)k->lengths[(size_t)i * k->stride + r]);
    }
    uint32_t at = 0;
    for (uint32_t g = 0; !bad && g < b->num_groups; g++) {
        const sl_ikjt_t *ik = &b->groups[g];
        uint32_t u = (uint32_t)ik->inverse[r];
        for (uint32_t i = 0; !bad && i < ik->unique.num_keys; i++, at++) {
            bool w = key_weighted(rows->schema, ik->unique.keys[i]);
            any_w |= w;
            any_s |= !w;
            bad |= add_list(sparse, weighted, ik->unique.keys[i], w, ik->unique.values + gstart[at],
                            ik->unique.weights ? ik->unique.weights + gstart[at] : NULL,
                            (uint64_t)ik->unique.lengths[(size_t)i * ik->unique.stride + u]);
        }
    }
    if (!bad && any_s) bad |= json_object_set(o, "sparse", sparse);
    if (!bad && any_w) bad |= json_object_set(o, "weighted", weighted);
    json_decref(sparse);
    json_decref(weighted);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *sl_wh_row_to_json(const sl_wh_rows_t *rows, uint32_t row)
{
    const sl_batch_t *b = &rows->batch;
    if (row >= b->batch_size) return NULL;
    const sl_kjt_t *k = &b->sparse;
    uint32_t gkeys = 0;
    for (uint32_t g = 0; g < b->num_groups; g++)
        gkeys += b->groups[g].unique.num_keys;
    size_t nstart = (size_t)k->num_keys + gkeys + 1;
    uint64_t *kstart = sl_calloc(NULL, nstart, sizeof(uint64_t));
    if (kstart == NULL) return NULL;
    /* O(keys * rows): fine for one row; cat keeps running offsets instead */
    uint64_t at = 0;
    for (uint32_t i = 0; i < k->num_keys; i++) {
        const int32_t *len = k->lengths + (size_t)i * k->stride;
        for (uint32_t r = 0; r < k->stride; r++) {
            if (r == row) kstart[i] = at;
            at += (uint64_t)len[r];
        }
    }
    uint64_t *gstart = kstart + k->num_keys;
    uint32_t gi = 0;
    for (uint32_t g = 0; g < b->num_groups; g++) {
        const sl_ikjt_t *ik = &b->groups[g];
        uint32_t u = (uint32_t)ik->inverse[row];
        uint64_t gat = 0;
        for (uint32_t i = 0; i < ik->unique.num_keys; i++, gi++) {
            const int32_t *len = ik->unique.lengths + (size_t)i * ik->unique.stride;
            for (uint32_t x = 0; x < ik->unique.stride; x++) {
                if (x == u) gstart[gi] = gat;
                gat += (uint64_t)len[x];
            }
        }
    }
    json_t *o = row_json(rows, row, kstart, gstart);
    sl_free(NULL, kstart, nstart * sizeof(uint64_t));
    return o;
}

sl_err_t sl_wh_cat_table(const char *dir, const sl_wh_cat_opts_t *opts, FILE *out,
                         uint64_t *rows_out, sl_error_t *err)
{
    sl_wh_cat_opts_t o;
    if (opts)
        o = *opts;
    else
        memset(&o, 0, sizeof o);
    if (rows_out) *rows_out = 0;
    sl_wh_table_t *t;
    sl_err_t rc = sl_wh_table_open_with(dir, o.store, o.allocator, &t, err);
    if (rc != SL_OK) return rc;
    sl_wh_read_opts_t ro;
    memset(&ro, 0, sizeof ro);
    ro.features = o.features;
    ro.num_features = o.num_features;
    ro.allocator = o.allocator;
    uint64_t printed = 0;
    uint64_t *kstart = NULL;
    size_t kcap = 0;
    for (uint32_t p = 0; rc == SL_OK && p < sl_wh_table_num_partitions(t); p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        if (!sl_wh_filter_match(o.filter, part)) continue;
        for (uint32_t i = 0; rc == SL_OK && i < part->num_files; i++) {
            if (o.limit && printed >= o.limit) break;
            char path[4096];
            if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, part->files[i]) >= sizeof path) {
                rc = sl_error_set(err, SL_ERR_INVALID, "path too long: %s", part->files[i]);
                break;
            }
            sl_wh_reader_t *r;
            if (t->store != NULL) {
                /* through the table's store: its options and the listing's pins */
                rc = wh_table_open_reader(t, part->files[i], &ro, &r, err);
            } else {
                rc = sl_wh_reader_open(path, part->files[i], &ro, &r, err);
            }
            if (rc != SL_OK) break;
            const sl_wh_rows_t *rows;
            while (rc == SL_OK && (!o.limit || printed < o.limit)) {
                if ((rc = sl_wh_reader_next(r, &rows, err)) != SL_OK || rows == NULL) break;
                const sl_kjt_t *k = &rows->batch.sparse;
                if (kcap < (size_t)k->num_keys + 1) {
                    sl_free(o.allocator, kstart, kcap * sizeof *kstart);
                    kcap = (size_t)k->num_keys + 1;
                    kstart = sl_calloc(o.allocator, kcap, sizeof *kstart);
                    if (kstart == NULL) {
                        kcap = 0;
                        rc = sl_error_set(err, SL_ERR_NOMEM, "cat");
                        break;
                    }
                }
                /* running value offsets: row r's values of key i start at kstart[i] */
                uint64_t at = 0;
                for (uint32_t key = 0; key < k->num_keys; key++) {
                    kstart[key] = at;
                    const int32_t *len = k->lengths + (size_t)key * k->stride;
                    for (uint32_t x = 0; x < k->stride; x++)
                        at += (uint64_t)len[x];
                }
                for (uint32_t row = 0; row < rows->batch.batch_size; row++) {
                    if (o.limit && printed >= o.limit) break;
                    json_t *j = row_json(rows, row, kstart, NULL);
                    if (j == NULL) {
                        rc = sl_error_set(err, SL_ERR_NOMEM, "cat: row to JSON");
                        break;
                    }
                    int w = sl_wh_json_dump(j, out);
                    json_decref(j);
                    if (w != 0) {
                        rc = sl_error_set(err, SL_ERR_IO, "cat: write failed");
                        break;
                    }
                    printed++;
                    for (uint32_t key = 0; key < k->num_keys; key++)
                        kstart[key] += (uint64_t)k->lengths[(size_t)key * k->stride + row];
                }
            }
            sl_wh_reader_close(r);
        }
    }
    sl_free(o.allocator, kstart, kcap * sizeof *kstart);
    sl_wh_table_close(t);
    if (rows_out) *rows_out = printed;
    return rc;
}

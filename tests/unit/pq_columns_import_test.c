/* `table import --format parquet` (sl_wh_import) held to the row path
 * (imp_pq_read_slots) over the fixture pyarrow-mapped-zstd.parquet (see
 * pq_columns_test.c): the same rows written, the same bad row skipped with
 * the same message; every allocation of the import failing in turn: an
 * error and no leak, or (no allocation failed) every row. */
#include "pq_columns_util.h"

#include <math.h>
#include <string.h>

#include "warehouse/import.h"
#include "warehouse/import_internal.h"

/* ---- the import ---- */

/* One row of the row path, copied (schema order). */
typedef struct prow {
    int64_t sid, ses, ts;
    float labels[2], dense[4];
    uint32_t len[6];
    int64_t ids[6][64];
    float w[6][64];
    bool weighted[6];
} prow_t;

typedef struct prows {
    prow_t *r;
    uint32_t n;
    uint64_t bad_line;
    char bad[SL_ERROR_MSG_MAX];
} prows_t;

static sl_err_t row_path_row(void *ctx, uint64_t line, sl_err_t rc, const sl_error_t *perr,
                             sl_wh_row_t *row, bool has_sid)
{
    prows_t *c = ctx;
    if (rc != SL_OK) {
        cr_assert_eq(c->bad_line, 0, "one bad row only, another at %llu", (unsigned long long)line);
        c->bad_line = line;
        snprintf(c->bad, sizeof c->bad, "%s", perr->msg);
        return SL_OK;
    }
    cr_assert_lt(c->n, 300);
    prow_t *p = &c->r[c->n++];
    p->sid = has_sid ? row->sample_id : (int64_t)line; /* a first import: id base 0 */
    p->ses = row->session_id;
    p->ts = row->timestamp;
    memcpy(p->labels, row->labels, sizeof p->labels);
    memcpy(p->dense, row->dense, sizeof p->dense);
    for (int s = 0; s < 6; s++) {
        cr_assert_leq(row->sparse[s].len, 64);
        p->len[s] = row->sparse[s].len;
        memcpy(p->ids[s], row->sparse[s].ids, p->len[s] * 8);
        p->weighted[s] = row->sparse[s].weights != NULL;
        if (p->weighted[s]) memcpy(p->w[s], row->sparse[s].weights, p->len[s] * 4);
    }
    return SL_OK;
}

static bool same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0;
}

Test(pq_columns, import_equals_row_path)
{
    sl_wh_colmap_t *m = mapping(FULL);
    sl_error_t err = {0};
    /* the row path */
    imp_pq_t *p = NULL;
    cr_assert_eq(imp_pq_open(fixture, m, NULL, &p, &err), SL_OK, "%s", err.msg);
    const sl_wh_schema_t *schema = imp_pq_mapping(p)->schema;
    cr_assert_eq(sl_wh_schema_num_labels(schema), 2);
    cr_assert_eq(sl_wh_schema_num_dense(schema), 4);
    cr_assert_eq(sl_wh_schema_num_sparse(schema), 6);
    sl_wh_row_buf_t *buf = sl_wh_row_buf_new(schema, NULL);
    prows_t want = {.r = calloc(300, sizeof(prow_t))};
    cr_assert_eq(imp_pq_read_slots(p, NULL, fixture, NULL, 0, UINT32_MAX, 0, 0, buf, row_path_row,
                                   &want, &err),
                 SL_OK, "%s", err.msg);
    cr_assert_eq(want.n, 299);
    cr_assert_eq(want.bad_line, 78);
    /* the import, columnar */
    char *table = tu_path(dir, "t");
    sl_wh_import_opts_t o = sl_wh_import_opts_default();
    const char *inputs[] = {fixture};
    o.format = SL_WH_IMPORT_PARQUET;
    o.inputs = inputs;
    o.num_inputs = 1;
    o.table_dir = table;
    o.mapping = m;
    o.threads = 1;
    o.writer.stripe_rows = 100; /* stripes across the columnar path's runs */
    sl_wh_import_summary_t sum = {0};
    cr_assert_eq(sl_wh_import(&o, &sum, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sum.rows_read, 300);
    cr_assert_eq(sum.rows_written, 299);
    cr_assert_eq(sum.rows_skipped, 1);
    cr_assert_eq(sum.num_first_bad, 1);
    size_t fl = strlen(fixture);
    cr_assert(strncmp(sum.first_bad[0], fixture, fl) == 0, "%s", sum.first_bad[0]);
    cr_assert_str_eq(sum.first_bad[0] + fl,
                     ":78: column 'cat_ids': 2 ids but 3 weights in 'cat_w'");
    cr_assert_str_eq(want.bad, "column 'cat_ids': 2 ids but 3 weights in 'cat_w'");
    sl_wh_import_summary_free(&sum);
    /* the table's rows, in order, against the row path's */
    sl_wh_table_t *t = NULL;
    cr_assert_eq(sl_wh_table_open(table, NULL, &t, &err), SL_OK, "%s", err.msg);
    uint32_t at = 0;
    for (uint32_t pi = 0; pi < sl_wh_table_num_partitions(t); pi++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, pi);
        for (uint32_t f = 0; f < part->num_files; f++) {
            char *path = tu_path(table, part->files[f]);
            sl_wh_reader_t *r = NULL;
            cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
            const sl_wh_rows_t *rows;
            for (;;) {
                cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK, "%s", err.msg);
                if (rows == NULL) break;
                const sl_batch_t *b = &rows->batch;
                uint32_t K = b->sparse.num_keys;
                cr_assert_eq(K, 6);
                uint64_t koff[7];
                sl_kjt_key_offsets(&b->sparse, koff);
                for (uint32_t i = 0; i < b->batch_size; i++, at++) {
                    cr_assert_lt(at, want.n);
                    const prow_t *w = &want.r[at];
                    cr_assert_eq(b->sample_ids[i], w->sid, "row %u sample id", at);
                    cr_assert_eq(rows->session_ids[i], w->ses, "row %u session", at);
                    cr_assert_eq(rows->timestamps[i], w->ts, "row %u timestamp", at);
                    for (uint32_t l = 0; l < b->labels.cols; l++) {
                        int li = sl_wh_schema_find_label(schema, b->labels.names[l]);
                        cr_assert(same_float(b->labels.data[(size_t)i * b->labels.cols + l],
                                             w->labels[li]),
                                  "row %u label %s", at, b->labels.names[l]);
                    }
                    for (uint32_t d = 0; d < b->dense.cols; d++) {
                        const sl_wh_feature_t *fe = sl_wh_schema_find(schema, b->dense.names[d]);
                        cr_assert(same_float(b->dense.data[(size_t)i * b->dense.cols + d],
                                             w->dense[fe->slot]),
                                  "row %u dense %s", at, b->dense.names[d]);
                    }
                    for (uint32_t k = 0; k < K; k++) {
                        const sl_wh_feature_t *fe = sl_wh_schema_find(schema, b->sparse.keys[k]);
                        uint32_t s = fe->slot;
                        int32_t len = b->sparse.lengths[(size_t)k * b->sparse.stride + i];
                        cr_assert_eq((uint32_t)len, w->len[s], "row %u %s length", at,
                                     b->sparse.keys[k]);
                        for (int32_t e = 0; e < len; e++) {
                            cr_assert_eq(b->sparse.values[koff[k] + (uint64_t)e], w->ids[s][e],
                                         "row %u %s id %d", at, b->sparse.keys[k], e);
                            if (w->weighted[s])
                                cr_assert(same_float(b->sparse.weights[koff[k] + (uint64_t)e],
                                                     w->w[s][e]),
                                          "row %u %s weight %d", at, b->sparse.keys[k], e);
                        }
                        koff[k] += (uint64_t)len;
                    }
                }
            }
            sl_wh_reader_close(r);
            free(path);
        }
    }
    cr_assert_eq(at, 299);
    sl_wh_table_close(t);
    free(table);
    free(want.r);
    sl_wh_row_buf_destroy(buf);
    imp_pq_destroy(p);
    sl_wh_colmap_destroy(m);
}

/* ---- every allocation failing ---- */

Test(pq_columns, import_every_allocation_failure)
{
    sl_wh_colmap_t *m = mapping(FULL);
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    uint64_t k = 1;
    for (;; k++) {
        char name[64];
        snprintf(name, sizeof name, "t%llu", (unsigned long long)k);
        char *table = tu_path(dir, name);
        sl_wh_import_opts_t o = sl_wh_import_opts_default();
        const char *inputs[] = {fixture};
        o.format = SL_WH_IMPORT_PARQUET;
        o.inputs = inputs;
        o.num_inputs = 1;
        o.table_dir = table;
        o.mapping = m;
        o.threads = 1;
        o.allocator = &ta.base;
        o.writer.no_sync = true;
        sl_wh_import_summary_t sum = {0};
        sl_error_t err = {0};
        tu_alloc_fail_at(&ta, k, false);
        sl_err_t rc = sl_wh_import(&o, &sum, &err);
        bool failed = tu_alloc_failures(&ta) > 0;
        uint64_t written = sum.rows_written;
        sl_wh_import_summary_free(&sum);
        free(table);
        if (!failed) {
            cr_assert_eq(rc, SL_OK, "%s", err.msg);
            cr_assert_eq(written, 299);
            break;
        }
        cr_assert(rc != SL_OK || written == 299, "allocation %llu failed: rc %d, %llu rows",
                  (unsigned long long)k, rc, (unsigned long long)written);
        char why[256];
        cr_assert(tu_alloc_clean(&ta, why, sizeof why), "allocation %llu failed: %s",
                  (unsigned long long)k, why);
    }
    cr_assert_gt(k, 20);
    sl_wh_colmap_destroy(m);
}

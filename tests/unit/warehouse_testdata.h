/* Shared by the warehouse tests: a test schema with every column kind, a
 * seeded generator of session-like rows held as plain arrays (the model), a
 * writer of the model (row API or column batches), and an exact comparison
 * of what the reader hands back against the model. Static functions only:
 * every test executable includes it. */
#ifndef SLUICE_WAREHOUSE_TESTDATA_H
#define SLUICE_WAREHOUSE_TESTDATA_H

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "warehouse/table_tools.h"
#include "warehouse/warehouse.h"

#define TD_UNUSED __attribute__((unused))

/* Features in schema order (dense slots 0,1,2; sparse slots 0..3). */
#define TD_F 7
static const char *const td_names[TD_F] = {"d0", "item", "u_hist", "d1", "w_cat", "u_geo", "d2"};
static const sl_wh_kind_t td_kinds[TD_F] = {SL_WH_DENSE,    SL_WH_SPARSE, SL_WH_SPARSE, SL_WH_DENSE,
                                            SL_WH_WEIGHTED, SL_WH_SPARSE, SL_WH_DENSE};
#define TD_T 2
static const char *const td_labels[TD_T] = {"click", "like"};
#define TD_D 3
#define TD_S 4
static const char *const td_dense[TD_D] = {"d0", "d1", "d2"};
static const char *const td_sparse[TD_S] = {"item", "u_hist", "w_cat", "u_geo"};
static const char *const td_user[2] = {"u_hist", "u_geo"};

TD_UNUSED static sl_wh_schema_t *td_schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    cr_assert_not_null(s);
    sl_error_t err = {0};
    for (int i = 0; i < TD_F; i++)
        cr_assert_eq(sl_wh_schema_add_feature(s, td_names[i], td_kinds[i], &err), SL_OK, "%s",
                     err.msg);
    for (int i = 0; i < TD_T; i++)
        cr_assert_eq(sl_wh_schema_add_label(s, td_labels[i], &err), SL_OK, "%s", err.msg);
    return s;
}

/* The rows: plain arrays, row-major for labels / dense, one list per
 * (sparse slot, row). */
typedef struct td_rows {
    uint32_t n;
    int64_t *sid, *sess, *ts;
    float *labels; /* [n * TD_T] */
    float *dense;  /* [n * TD_D], NaN = missing */
    uint32_t *len[TD_S];
    uint64_t *off[TD_S]; /* [n + 1] */
    int64_t *ids[TD_S];
    float *w[TD_S]; /* weights (weighted slot only) */
} td_rows_t;

typedef struct td_spec {
    uint32_t rows;
    uint32_t session_len; /* mean rows per session; user features constant within one */
    uint32_t hist_len;    /* mean u_hist length */
    bool shuffle;         /* rows of sessions interleaved (arrival order) */
    double missing;       /* fraction of missing dense values */
    uint64_t seed;
} td_spec_t;

TD_UNUSED static void td_free(td_rows_t *m)
{
    free(m->sid);
    free(m->sess);
    free(m->ts);
    free(m->labels);
    free(m->dense);
    for (int s = 0; s < TD_S; s++) {
        free(m->len[s]);
        free(m->off[s]);
        free(m->ids[s]);
        free(m->w[s]);
    }
    memset(m, 0, sizeof *m);
}

TD_UNUSED static double td_unit(uint64_t *st)
{
    return (double)(tu_next(st) >> 11) / 9007199254740992.0;
}

/* Generate spec->rows rows: sessions of random length around session_len,
 * timestamps rising within a session, user features (u_hist, u_geo)
 * constant within a session, item and w_cat per row, empty lists, missing
 * dense values, sample ids 1000 + row. */
TD_UNUSED static void td_generate(const td_spec_t *spec, td_rows_t *m)
{
    uint64_t st = spec->seed;
    uint32_t n = spec->rows;
    memset(m, 0, sizeof *m);
    m->n = n;
    m->sid = calloc(n + 1, 8);
    m->sess = calloc(n + 1, 8);
    m->ts = calloc(n + 1, 8);
    m->labels = calloc((size_t)n * TD_T + 1, 4);
    m->dense = calloc((size_t)n * TD_D + 1, 4);
    uint64_t cap[TD_S];
    for (int s = 0; s < TD_S; s++) {
        m->len[s] = calloc(n + 1, 4);
        m->off[s] = calloc(n + 1, 8);
        cap[s] = 1024;
        m->ids[s] = malloc(cap[s] * 8);
        m->w[s] = malloc(cap[s] * 4);
    }
    /* sessions: assign rows, then optionally interleave */
    uint32_t *order = malloc((n + 1) * sizeof *order);
    int64_t session = 0, ts = 1700000000;
    uint32_t left = 0;
    int64_t *row_sess = malloc((n + 1) * 8), *row_ts = malloc((n + 1) * 8);
    for (uint32_t r = 0; r < n; r++) {
        if (left == 0) {
            session = (int64_t)(tu_next(&st) >> 20);
            left = 1 + (uint32_t)tu_below(&st, 2 * (uint64_t)spec->session_len);
            ts += 1000;
        }
        left--;
        ts += 1 + (int64_t)tu_below(&st, 30);
        row_sess[r] = session;
        row_ts[r] = ts;
        order[r] = r;
    }
    if (spec->shuffle)
        for (uint32_t r = n; r > 1; r--) {
            uint32_t j = (uint32_t)tu_below(&st, r), t = order[r - 1];
            order[r - 1] = order[j];
            order[j] = t;
        }
    /* user features per session, from a per-session seed */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = order[i]; /* the generated row placed at position i */
        m->sid[i] = 1000 + (int64_t)i;
        m->sess[i] = row_sess[r];
        m->ts[i] = row_ts[r];
        m->labels[(size_t)i * TD_T] = (float)tu_below(&st, 2);
        m->labels[(size_t)i * TD_T + 1] = (float)tu_below(&st, 1000) / 7.0f;
        for (int d = 0; d < TD_D; d++) {
            float v = (float)((double)(int64_t)tu_below(&st, 200000) / 64.0 - 1000.0);
            m->dense[(size_t)i * TD_D + d] = td_unit(&st) < spec->missing ? NAN : v;
        }
        uint64_t us = (uint64_t)row_sess[r] * 0x9e3779b97f4a7c15ull;
        for (int s = 0; s < TD_S; s++) {
            bool user = s == 1 || s == 3;
            uint64_t *rs = user ? &us : &st;
            uint32_t len;
            if (s == 1)
                len = (uint32_t)tu_below(rs, 2 * (uint64_t)spec->hist_len + 1);
            else if (s == 3)
                len = 1;
            else
                len = (uint32_t)tu_below(rs, 4); /* 0..3: empty lists included */
            if (m->off[s][i] + len > cap[s]) {
                cap[s] *= 2;
                m->ids[s] = realloc(m->ids[s], cap[s] * 8);
                m->w[s] = realloc(m->w[s], cap[s] * 4);
            }
            for (uint32_t k = 0; k < len; k++) {
                int64_t id = s == 0   ? (int64_t)tu_below(rs, 1000000)
                             : s == 2 ? (int64_t)tu_below(rs, 50) - 10
                             : s == 3 ? (int64_t)tu_below(rs, 300)
                                      : (int64_t)(tu_next(rs) >> 1); /* large ids */
                m->ids[s][m->off[s][i] + k] = id;
                m->w[s][m->off[s][i] + k] = (float)tu_below(rs, 100) / 8.0f;
            }
            m->len[s][i] = len;
            m->off[s][i + 1] = m->off[s][i] + len;
        }
    }
    free(order);
    free(row_sess);
    free(row_ts);
}

TD_UNUSED static char *td_tmpdir(void)
{
    char tmpl[] = "/tmp/sluice_wh_XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d);
    return strdup(d);
}

TD_UNUSED static void td_rmrf(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Append rows [from, to) with the row API. */
TD_UNUSED static void td_append_rows(sl_wh_writer_t *w, const td_rows_t *m, uint32_t from,
                                     uint32_t to)
{
    sl_error_t err = {0};
    for (uint32_t i = from; i < to; i++) {
        sl_wh_idlist_t lists[TD_S];
        for (int s = 0; s < TD_S; s++) {
            lists[s].len = m->len[s][i];
            lists[s].ids = m->ids[s] + m->off[s][i];
            lists[s].weights = s == 2 ? m->w[s] + m->off[s][i] : NULL;
        }
        sl_wh_row_t row = {m->sid[i],
                           m->sess[i],
                           m->ts[i],
                           m->labels + (size_t)i * TD_T,
                           m->dense + (size_t)i * TD_D,
                           lists};
        cr_assert_eq(sl_wh_writer_append_row(w, &row, &err), SL_OK, "%s", err.msg);
    }
}

/* Append rows [from, to) as one column batch (keys and columns in an order
 * different from the schema's, to exercise the name mapping). */
TD_UNUSED static void td_append_batch(sl_wh_writer_t *w, const td_rows_t *m, uint32_t from,
                                      uint32_t to)
{
    sl_error_t err = {0};
    uint32_t B = to - from;
    sl_wh_rows_t rows;
    memset(&rows, 0, sizeof rows);
    sl_batch_t *b = &rows.batch;
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    b->batch_size = B;
    b->sample_ids = m->sid + from;
    rows.session_ids = m->sess + from;
    rows.timestamps = m->ts + from;
    /* dense in reverse order */
    const char *dn[TD_D] = {"d2", "d1", "d0"};
    cr_assert_eq(sl_dense_init(&b->dense, arena, B, TD_D, dn), SL_OK);
    for (uint32_t i = 0; i < B; i++)
        for (int c = 0; c < TD_D; c++)
            b->dense.data[(size_t)i * TD_D + c] =
                m->dense[(size_t)(from + i) * TD_D + (TD_D - 1 - c)];
    cr_assert_eq(sl_dense_init(&b->labels, arena, B, TD_T, td_labels), SL_OK);
    memcpy(b->labels.data, m->labels + (size_t)from * TD_T, (size_t)B * TD_T * 4);
    /* keys: u_geo, w_cat, item, u_hist */
    const int perm[TD_S] = {3, 2, 0, 1};
    const char *keys[TD_S];
    uint64_t total = 0;
    for (int k = 0; k < TD_S; k++) {
        keys[k] = td_sparse[perm[k]];
        total += m->off[perm[k]][to] - m->off[perm[k]][from];
    }
    cr_assert_eq(sl_kjt_init(&b->sparse, arena, TD_S, keys, B, total, true), SL_OK);
    uint64_t at = 0;
    for (int k = 0; k < TD_S; k++) {
        int s = perm[k];
        for (uint32_t i = 0; i < B; i++)
            b->sparse.lengths[(size_t)k * B + i] = (int32_t)m->len[s][from + i];
        uint64_t n = m->off[s][to] - m->off[s][from];
        memcpy(b->sparse.values + at, m->ids[s] + m->off[s][from], n * 8);
        for (uint64_t j = 0; j < n; j++)
            b->sparse.weights[at + j] = s == 2 ? m->w[s][m->off[s][from] + j] : 7.0f /* ignored */;
        at += n;
    }
    cr_assert_eq(sl_wh_writer_append(w, &rows, &err), SL_OK, "%s", err.msg);
    sl_arena_destroy(arena);
}

TD_UNUSED static bool td_same_float(float a, float b)
{
    return (a != a && b != b) || memcmp(&a, &b, 4) == 0;
}

/* Check the rows of one stripe (expanded, every feature, every column)
 * against the model; model row = sample id - 1000. */
TD_UNUSED static void td_check_rows(const sl_wh_rows_t *rows, const td_rows_t *m)
{
    const sl_batch_t *b = &rows->batch;
    sl_error_t err = {0};
    cr_assert_eq(sl_batch_validate(b, &err), SL_OK, "%s", err.msg);
    uint32_t N = b->batch_size;
    cr_assert_not_null(b->sample_ids);
    cr_assert_eq(b->dense.cols, TD_D);
    cr_assert_eq(b->labels.cols, TD_T);
    for (int c = 0; c < TD_D; c++)
        cr_assert_str_eq(b->dense.names[c], td_dense[c]);
    for (int t = 0; t < TD_T; t++)
        cr_assert_str_eq(b->labels.names[t], td_labels[t]);
    cr_assert_eq(b->sparse.num_keys, TD_S);
    uint64_t koff[TD_S + 1];
    sl_kjt_key_offsets(&b->sparse, koff);
    uint64_t at[TD_S];
    for (int k = 0; k < TD_S; k++) {
        cr_assert_str_eq(b->sparse.keys[k], td_sparse[k]);
        at[k] = koff[k];
    }
    cr_assert_not_null(b->sparse.weights);
    for (uint32_t r = 0; r < N; r++) {
        int64_t i = b->sample_ids[r] - 1000;
        cr_assert(i >= 0 && i < (int64_t)m->n, "sample id %lld", (long long)b->sample_ids[r]);
        cr_assert_eq(rows->session_ids[r], m->sess[i]);
        cr_assert_eq(rows->timestamps[r], m->ts[i]);
        for (int t = 0; t < TD_T; t++)
            cr_assert(td_same_float(b->labels.data[(size_t)r * TD_T + t], m->labels[i * TD_T + t]));
        for (int c = 0; c < TD_D; c++)
            cr_assert(td_same_float(b->dense.data[(size_t)r * TD_D + c], m->dense[i * TD_D + c]),
                      "row %u dense %d: got %g want %g", r, c, b->dense.data[(size_t)r * TD_D + c],
                      m->dense[i * TD_D + c]);
        for (int s = 0; s < TD_S; s++) {
            uint32_t len = (uint32_t)b->sparse.lengths[(size_t)s * N + r];
            cr_assert_eq(len, m->len[s][i], "row %u key %s length", r, td_sparse[s]);
            cr_assert(len == 0 || memcmp(b->sparse.values + at[s], m->ids[s] + m->off[s][i],
                                         (size_t)len * 8) == 0,
                      "row %u key %s ids", r, td_sparse[s]);
            for (uint32_t j = 0; j < len; j++) {
                float want = s == 2 ? m->w[s][m->off[s][i] + j] : 1.0f;
                cr_assert(td_same_float(b->sparse.weights[at[s] + j], want),
                          "row %u key %s weight %u", r, td_sparse[s], j);
            }
            at[s] += len;
        }
    }
}

/* Read every stripe of path (all features, expanded); check every row and
 * that each model row appears exactly once. @return rows read. */
TD_UNUSED static uint64_t td_check_file(const char *path, const td_rows_t *m)
{
    sl_error_t err = {0};
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(path, NULL, NULL, &r, &err), SL_OK, "%s", err.msg);
    char *seen = calloc(m->n + 1, 1);
    uint64_t total = 0;
    const sl_wh_rows_t *rows;
    for (;;) {
        cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK, "%s", err.msg);
        if (rows == NULL) break;
        td_check_rows(rows, m);
        for (uint32_t k = 0; k < rows->batch.batch_size; k++) {
            int64_t i = rows->batch.sample_ids[k] - 1000;
            cr_assert_eq(seen[i], 0, "row %lld twice", (long long)i);
            seen[i] = 1;
        }
        total += rows->batch.batch_size;
    }
    cr_assert_eq(total, m->n);
    cr_assert_eq(sl_wh_reader_num_rows(r), m->n);
    free(seen);
    sl_wh_reader_close(r);
    return total;
}

TD_UNUSED static sl_wh_writer_opts_t td_opts(uint32_t stripe_rows)
{
    sl_wh_writer_opts_t o = sl_wh_writer_opts_default();
    o.stripe_rows = stripe_rows;
    o.no_sync = true;
    return o;
}

/* Write the model to path with the row API. */
TD_UNUSED static sl_wh_write_stats_t td_write(const char *path, const td_rows_t *m,
                                              const sl_wh_writer_opts_t *o)
{
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    sl_wh_writer_t *w;
    cr_assert_eq(sl_wh_writer_open(path, s, o, &w, &err), SL_OK, "%s", err.msg);
    td_append_rows(w, m, 0, m->n);
    sl_wh_write_stats_t st;
    cr_assert_eq(sl_wh_writer_close(w, &st, &err), SL_OK, "%s", err.msg);
    sl_wh_schema_destroy(s);
    return st;
}

TD_UNUSED static void *td_read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

TD_UNUSED static void td_write_all(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

#endif

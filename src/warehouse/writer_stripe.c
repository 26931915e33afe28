/* One stripe of the writer: the rows held are ordered by session (when
 * clustering), deduplicated per group with src/dedup (storage dedup), then
 * every column is encoded (writer_encode.c: the encoding chosen by size,
 * zstd kept where it pays), checksummed and appended; the stream's footer
 * entry is recorded for close. */
#include "common/err.h"
#include "writer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- streams (encoded by writer_encode.c) ---- */

static sl_err_t emit_dense(sl_wh_writer_t *w, const char *name, const float *col, uint32_t n,
                           sl_error_t *err)
{
    uint32_t present = 0;
    for (uint32_t r = 0; r < n; r++)
        present += col[r] == col[r];
    if (present == n) return wh_writer_emit_floats(w, SL_WH_STREAM_DENSE_VALUES, name, col, n, err);
    size_t bitmap = ((size_t)n + 7) / 8;
    float *vals = sl_arena_alloc(w->arena, (size_t)present * sizeof(float));
    uint8_t *bits = sl_arena_calloc(w->arena, bitmap, 1);
    if (vals == NULL || bits == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "present bitmap");
    uint32_t j = 0;
    for (uint32_t r = 0; r < n; r++)
        if (col[r] == col[r]) {
            bits[r >> 3] |= (uint8_t)(1u << (r & 7));
            vals[j++] = col[r];
        }
    SL_FORWARD_IF_ERROR(wh_writer_emit_bytes(w, SL_WH_STREAM_PRESENT, name, bits, bitmap, n, err));
    return wh_writer_emit_floats(w, SL_WH_STREAM_DENSE_VALUES, name, vals, present, err);
}

static sl_err_t emit_sparse(sl_wh_writer_t *w, const char *name, bool weighted, const int32_t *len,
                            uint32_t rows, const int64_t *ids, const float *wts, uint64_t nids,
                            sl_error_t *err)
{
    sl_err_t rc = wh_writer_emit_ints(w, SL_WH_STREAM_LENGTHS, name, len, rows, false, err);
    if (rc == SL_OK) rc = wh_writer_emit_ints(w, SL_WH_STREAM_IDS, name, ids, nids, true, err);
    if (rc == SL_OK && weighted)
        rc = wh_writer_emit_floats(w, SL_WH_STREAM_WEIGHTS, name, wts, nids, err);
    return rc;
}

/* ---- stripe ---- */

typedef struct skey {
    int64_t sess, ts;
    uint32_t idx;
} skey_t;

static int skey_cmp(const void *pa, const void *pb)
{
    const skey_t *a = pa, *b = pb;
    if (a->sess != b->sess) return a->sess < b->sess ? -1 : 1;
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* The stripe's rows, ordered by (session, timestamp, arrival) when
 * clustering; the copies live in w->arena. */
static sl_err_t make_view(sl_wh_writer_t *w, sview_t *v, sl_error_t *err)
{
    uint32_t n = w->n, S = w->S;
    v->n = n;
    v->sid = w->sid;
    v->sess = w->sess;
    v->ts = w->ts;
    v->labels = w->labels;
    v->dense = w->dense;
    v->stride = w->cap;
    v->len = sl_arena_alloc(w->arena, (S + 1) * sizeof(int32_t *));
    v->ids = sl_arena_alloc(w->arena, (S + 1) * sizeof(int64_t *));
    v->w = sl_arena_alloc(w->arena, (S + 1) * sizeof(float *));
    v->nids = sl_arena_alloc(w->arena, (S + 1) * sizeof(uint64_t));
    if (v->len == NULL || v->ids == NULL || v->w == NULL || v->nids == NULL)
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "stripe view");
    for (uint32_t s = 0; s < S; s++) {
        v->len[s] = w->cols[s].len;
        v->ids[s] = (const int64_t *)w->cols[s].ids.data;
        v->w[s] = (const float *)w->cols[s].w.data;
        v->nids[s] = w->cols[s].nids;
    }
    if (!w->opts.cluster_sessions) return SL_OK;
    bool sorted = true;
    for (uint32_t r = 1; r < n && sorted; r++)
        sorted = w->sess[r - 1] < w->sess[r] ||
                 (w->sess[r - 1] == w->sess[r] && w->ts[r - 1] <= w->ts[r]);
    if (sorted) return SL_OK;
    skey_t *keys = sl_arena_alloc(w->arena, (size_t)n * sizeof *keys);
    if (keys == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "cluster %u rows", n);
    for (uint32_t r = 0; r < n; r++)
        keys[r] = (skey_t){w->sess[r], w->ts[r], r};
    qsort(keys, n, sizeof *keys, skey_cmp);

    int64_t *sid = sl_arena_alloc(w->arena, (size_t)n * 8);
    int64_t *sess = sl_arena_alloc(w->arena, (size_t)n * 8);
    int64_t *ts = sl_arena_alloc(w->arena, (size_t)n * 8);
    float *labels = sl_arena_alloc(w->arena, (size_t)n * w->T * 4 + 4);
    float *dense = sl_arena_alloc(w->arena, (size_t)n * w->D * 4 + 4);
    if (sid == NULL || sess == NULL || ts == NULL || labels == NULL || dense == NULL)
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "cluster %u rows", n);
    for (uint32_t r = 0; r < n; r++) {
        uint32_t i = keys[r].idx;
        sid[r] = w->sid[i];
        sess[r] = w->sess[i];
        ts[r] = w->ts[i];
    }
    for (uint32_t t = 0; t < w->T; t++)
        for (uint32_t r = 0; r < n; r++)
            labels[(size_t)t * n + r] = w->labels[(size_t)t * w->cap + keys[r].idx];
    for (uint32_t d = 0; d < w->D; d++)
        for (uint32_t r = 0; r < n; r++)
            dense[(size_t)d * n + r] = w->dense[(size_t)d * w->cap + keys[r].idx];
    v->sid = sid;
    v->sess = sess;
    v->ts = ts;
    v->labels = labels;
    v->dense = dense;
    v->stride = n;
    uint64_t *off = sl_arena_alloc(w->arena, ((size_t)n + 1) * 8);
    if (off == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "cluster %u rows", n);
    for (uint32_t s = 0; s < S; s++) {
        const wcol_t *c = &w->cols[s];
        off[0] = 0;
        for (uint32_t r = 0; r < n; r++)
            off[r + 1] = off[r] + (uint64_t)c->len[r];
        int32_t *len = sl_arena_alloc(w->arena, (size_t)n * 4);
        int64_t *ids = sl_arena_alloc(w->arena, (size_t)c->nids * 8);
        float *wts = c->weighted ? sl_arena_alloc(w->arena, (size_t)c->nids * 4) : NULL;
        if (len == NULL || ids == NULL || (c->weighted && wts == NULL))
            return wh_writer_fail(w, err, SL_ERR_NOMEM, "cluster %u rows", n);
        const int64_t *cids = (const int64_t *)c->ids.data;
        const float *cw = (const float *)c->w.data;
        uint64_t at = 0;
        for (uint32_t r = 0; r < n; r++) {
            uint32_t i = keys[r].idx;
            int32_t l = c->len[i];
            len[r] = l;
            if (l > 0) {
                memcpy(ids + at, cids + off[i], (size_t)l * 8);
                if (wts) memcpy(wts + at, cw + off[i], (size_t)l * 4);
            }
            at += (uint64_t)l;
        }
        v->len[s] = len;
        v->ids[s] = ids;
        v->w[s] = wts;
    }
    return SL_OK;
}

/* Deduplicate group g of the view with src/dedup. */
static sl_err_t dedup_view(sl_wh_writer_t *w, const sview_t *v, uint32_t g, sl_ikjt_t *out,
                           sl_error_t *err)
{
    const wgroup_t *gr = &w->groups[g];
    uint64_t total = 0;
    bool weighted = false;
    for (uint32_t k = 0; k < gr->num; k++) {
        total += v->nids[gr->slots[k]];
        weighted |= w->cols[gr->slots[k]].weighted;
    }
    sl_kjt_t all;
    memset(&all, 0, sizeof all);
    all.num_keys = gr->num;
    all.stride = v->n;
    all.num_values = total;
    all.keys = gr->names;
    all.lengths = sl_arena_alloc(w->arena, (size_t)gr->num * v->n * 4);
    all.values = sl_arena_alloc(w->arena, (size_t)total * 8 + 8);
    all.weights = weighted ? sl_arena_alloc(w->arena, (size_t)total * 4 + 4) : NULL;
    uint32_t *idx = sl_arena_alloc(w->arena, (size_t)gr->num * 4);
    if (all.lengths == NULL || all.values == NULL || (weighted && all.weights == NULL) ||
        idx == NULL)
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "dedup group '%s'", gr->name);
    uint64_t at = 0;
    for (uint32_t k = 0; k < gr->num; k++) {
        uint32_t s = gr->slots[k];
        idx[k] = k;
        memcpy(all.lengths + (size_t)k * v->n, v->len[s], (size_t)v->n * 4);
        if (v->nids[s] > 0) memcpy(all.values + at, v->ids[s], v->nids[s] * 8);
        if (weighted) {
            if (w->cols[s].weighted) {
                if (v->nids[s] > 0) memcpy(all.weights + at, v->w[s], v->nids[s] * 4);
            } else {
                for (uint64_t i = 0; i < v->nids[s]; i++)
                    all.weights[at + i] = 1.0f;
            }
        }
        at += v->nids[s];
    }
    sl_dedup_stats_t st;
    sl_error_t e;
    sl_error_clear(&e);
    sl_err_t rc = sl_dedup_group(w->dedup, &all, idx, gr->num, gr->name, w->arena, out, &st, &e);
    if (rc != SL_OK) return wh_writer_fail(w, err, rc, "dedup group '%s': %s", gr->name, e.msg);
    if (out->batch_size != v->n || out->unique.stride == 0 || out->unique.stride > v->n ||
        out->unique.num_keys != gr->num)
        return wh_writer_fail(w, err, SL_ERR_INVALID, "dedup group '%s': unexpected output shape",
                              gr->name);
    return SL_OK;
}

sl_err_t wh_writer_flush_stripe(sl_wh_writer_t *w, sl_error_t *err)
{
    if (w->n == 0) return SL_OK;
    if (w->nstripes == w->cap_stripes) {
        uint32_t cap = w->cap_stripes ? w->cap_stripes * 2 : 16;
        wstripe_t *s = sl_alloc(w->a, sl_mul_size(cap, sizeof *s));
        uint32_t *u = sl_alloc(w->a, sl_mul_size((size_t)cap * w->G + 1, 4));
        if (s == NULL || u == NULL) {
            sl_free(w->a, s, (size_t)cap * sizeof *s);
            sl_free(w->a, u, ((size_t)cap * w->G + 1) * 4);
            return wh_writer_fail(w, err, SL_ERR_NOMEM, "stripe index");
        }
        if (w->nstripes) {
            memcpy(s, w->stripes, (size_t)w->nstripes * sizeof *s);
            memcpy(u, w->unique, (size_t)w->nstripes * w->G * 4);
        }
        sl_free(w->a, w->stripes, (size_t)w->cap_stripes * sizeof *s);
        sl_free(w->a, w->unique, ((size_t)w->cap_stripes * w->G + 1) * 4);
        w->stripes = s;
        w->unique = u;
        w->cap_stripes = cap;
    }
    sview_t v;
    sl_err_t rc = make_view(w, &v, err);
    if (rc != SL_OK) return rc;
    sl_ikjt_t *ik = NULL;
    uint64_t **gko = NULL; /* per group: where each key's unique values start */
    if (w->G > 0) {
        ik = sl_arena_calloc(w->arena, w->G, sizeof *ik);
        gko = sl_arena_calloc(w->arena, w->G, sizeof *gko);
        if (ik == NULL || gko == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "dedup");
        for (uint32_t g = 0; g < w->G; g++) {
            if (w->given != NULL)
                ik[g] = w->given[g]; /* kept as given (sl_wh_writer_append_stripe) */
            else if ((rc = dedup_view(w, &v, g, &ik[g], err)) != SL_OK)
                return rc;
            gko[g] = sl_arena_alloc(w->arena, ((size_t)w->groups[g].num + 1) * 8);
            if (gko[g] == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "dedup");
            sl_kjt_key_offsets(&ik[g].unique, gko[g]);
        }
    }
    wstripe_t *sp = &w->stripes[w->nstripes];
    sp->first_row = w->rows_total;
    sp->rows = v.n;
    sp->offset = w->file_off;
    sp->first_meta = w->nmeta;
    const sl_wh_schema_t *sc = w->schema;
    rc = wh_writer_emit_ints(w, SL_WH_STREAM_SAMPLE_ID,
                             sl_wh_schema_column(sc, SL_WH_COL_SAMPLE_ID), v.sid, v.n, true, err);
    if (rc == SL_OK)
        rc = wh_writer_emit_ints(w, SL_WH_STREAM_SESSION_ID,
                                 sl_wh_schema_column(sc, SL_WH_COL_SESSION_ID), v.sess, v.n, true,
                                 err);
    if (rc == SL_OK)
        rc =
            wh_writer_emit_ints(w, SL_WH_STREAM_TIMESTAMP,
                                sl_wh_schema_column(sc, SL_WH_COL_TIMESTAMP), v.ts, v.n, true, err);
    for (uint32_t t = 0; rc == SL_OK && t < w->T; t++)
        rc = wh_writer_emit_floats(w, SL_WH_STREAM_LABEL, sl_wh_schema_label(sc, t),
                                   v.labels + (size_t)t * v.stride, v.n, err);
    uint32_t F = sl_wh_schema_num_features(sc);
    for (uint32_t fi = 0; rc == SL_OK && fi < F; fi++) {
        const sl_wh_feature_t *fe = sl_wh_schema_feature(sc, fi);
        if (fe->kind == SL_WH_DENSE) {
            rc = emit_dense(w, fe->name, v.dense + (size_t)fe->slot * v.stride, v.n, err);
            continue;
        }
        uint32_t s = fe->slot;
        int32_t g = w->slot_group[s];
        if (g < 0) {
            rc = emit_sparse(w, fe->name, fe->kind == SL_WH_WEIGHTED, v.len[s], v.n, v.ids[s],
                             v.w[s], v.nids[s], err);
            continue;
        }
        /* the feature's unique rows, from the group's IKJT */
        const sl_kjt_t *u = &ik[g].unique;
        uint32_t k = 0;
        while (k < w->groups[g].num && w->groups[g].slots[k] != s)
            k++;
        uint64_t start = gko[g][k], cnt = gko[g][k + 1] - gko[g][k];
        rc = emit_sparse(w, fe->name, fe->kind == SL_WH_WEIGHTED,
                         u->lengths + (size_t)k * u->stride, u->stride, u->values + start,
                         u->weights ? u->weights + start : NULL, cnt, err);
    }
    for (uint32_t g = 0; rc == SL_OK && g < w->G; g++) {
        rc = wh_writer_emit_ints(w, SL_WH_STREAM_INVERSE, w->groups[g].name, ik[g].inverse, v.n,
                                 false, err);
        w->unique[(size_t)w->nstripes * w->G + g] = ik[g].unique.stride;
        w->group_unique_total[g] += ik[g].unique.stride;
        w->stats.dedup_rows += v.n;
        w->stats.dedup_unique += ik[g].unique.stride;
    }
    if (rc != SL_OK) return rc;
    sp->length = w->file_off - sp->offset;
    sp->num_meta = w->nmeta - sp->first_meta;
    w->nstripes++;
    w->rows_total += v.n;
    w->n = 0;
    for (uint32_t s = 0; s < w->S; s++)
        w->cols[s].nids = 0;
    sl_arena_reset(w->arena);
    return SL_OK;
}

/* Taking a stripe from the columnar builder (pq_internal.h, imp_pqc_take):
 * the rows built so far copied once per column into the stripe's arena,
 * sorted stably by session id for the worker. Moved from
 * import_parquet_cols.c, which builds the rows. */
#include <string.h>

#include "common/err.h"
#include "common/mem.h"
#include "pq_cols_internal.h"

/* ---- taking a stripe ---- */

sl_arena_t *imp_pqc_arena(const imp_pqc_t *c)
{
    return c->out;
}

void imp_pqc_disown(imp_pqc_t *c)
{
    c->out = NULL;
}

/* Rows by session, stably: a bottom-up merge sort of the row numbers o[n]
 * by ses[] with the scratch tmp[n]. @return where the order is, o or tmp. */
static uint32_t *sort_by_session(const int64_t *ses, uint32_t *o, uint32_t *tmp, uint32_t n)
{
    for (uint32_t w = 1; w < n; w *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * w) {
            uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint32_t i = lo, j = mid, k = lo;
            if (mid == hi || ses[o[mid - 1]] <= ses[o[mid]]) {
                memcpy(tmp + lo, o + lo, (size_t)(hi - lo) * sizeof *o);
                continue;
            }
            while (i < mid && j < hi)
                tmp[k++] = ses[o[j]] < ses[o[i]] ? o[j++] : o[i++]; /* ties: left first */
            while (i < mid)
                tmp[k++] = o[i++];
            while (j < hi)
                tmp[k++] = o[j++];
        }
        uint32_t *t = o;
        o = tmp;
        tmp = t;
    }
    return o;
}

sl_err_t imp_pqc_take(imp_pqc_t *c, bool by_session, sl_wh_rows_t *out, sl_error_t *err)
{
    memset(out, 0, sizeof *out);
    uint32_t n = c->n;
    if (c->out == NULL || c->out_want > c->out_chunk) {
        /* a chunk that holds a whole stripe, kept by reset (a fresh large
         * chunk each stripe costs a page fault every 4 KiB); after a
         * disown, a new arena of that size */
        size_t want = c->out_want > c->out_chunk ? c->out_want : c->out_chunk;
        sl_arena_t *bigger = sl_arena_new(c->a, want);
        if (bigger == NULL) goto nomem;
        sl_arena_destroy(c->out);
        c->out = bigger;
        c->out_chunk = want;
    }
    sl_arena_reset(c->out);
    /* the order: file order unless sessions are out of order */
    const uint32_t *order = NULL;
    if (by_session)
        for (uint32_t i = 1; i < n && order == NULL; i++)
            if (c->ses[i] < c->ses[i - 1]) {
                if (n > c->order_cap) {
                    sl_free(c->a, c->order, 2 * (size_t)c->order_cap * sizeof *c->order);
                    c->order_cap = 0;
                    if ((c->order = sl_alloc(c->a, 2 * (size_t)n * sizeof *c->order)) == NULL)
                        goto nomem;
                    c->order_cap = n;
                }
                for (uint32_t j = 0; j < n; j++)
                    c->order[j] = j;
                order = sort_by_session(c->ses, c->order, c->order + n, n);
            }
    sl_arena_t *ar = c->out;
    sl_batch_t *b = &out->batch;
    b->batch_size = n;
    int64_t *sid = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *ses = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *ts = sl_arena_alloc(ar, (size_t)n * 8 + 8);
    if (sid == NULL || ses == NULL || ts == NULL) goto nomem;
    if (sl_dense_init(&b->dense, ar, n, c->D, c->dense_names) != SL_OK ||
        sl_dense_init(&b->labels, ar, n, c->T, c->label_names) != SL_OK)
        goto nomem;
    uint64_t total = 0;
    for (uint32_t k = 0; k < c->S; k++)
        total += c->keys[k].nids;
    if (c->S && sl_kjt_init(&b->sparse, ar, c->S, c->key_names, n, total, c->any_weighted) != SL_OK)
        goto nomem;
    if (order == NULL) { /* runs */
        memcpy(sid, c->sid, (size_t)n * 8);
        memcpy(ses, c->ses, (size_t)n * 8);
        memcpy(ts, c->ts, (size_t)n * 8);
        if (c->D) memcpy(b->dense.data, c->dense, (size_t)n * c->D * 4);
        if (c->T) memcpy(b->labels.data, c->labels, (size_t)n * c->T * 4);
        uint64_t v = 0;
        for (uint32_t k = 0; k < c->S; k++) {
            const outkey_t *kk = &c->keys[k];
            memcpy(b->sparse.lengths + (size_t)k * n, kk->len, (size_t)n * 4);
            if (kk->nids) memcpy(b->sparse.values + v, kk->ids, (size_t)kk->nids * 8);
            if (c->any_weighted)
                for (uint64_t i = 0; i < kk->nids; i++)
                    b->sparse.weights[v + i] = kk->weighted ? kk->w[i] : 1.0f;
            v += kk->nids;
        }
    } else { /* gathered by the order */
        for (uint32_t j = 0; j < n; j++) {
            uint32_t i = order[j];
            sid[j] = c->sid[i];
            ses[j] = c->ses[i];
            ts[j] = c->ts[i];
            if (c->D)
                memcpy(b->dense.data + (size_t)j * c->D, c->dense + (size_t)i * c->D, c->D * 4);
            if (c->T)
                memcpy(b->labels.data + (size_t)j * c->T, c->labels + (size_t)i * c->T, c->T * 4);
        }
        uint64_t *start = sl_arena_alloc(ar, (size_t)n * 8 + 8);
        if (start == NULL) goto nomem;
        uint64_t v = 0;
        for (uint32_t k = 0; k < c->S; k++) {
            const outkey_t *kk = &c->keys[k];
            uint64_t at = 0;
            for (uint32_t i = 0; i < n; i++) { /* where row i's ids start */
                start[i] = at;
                at += (uint64_t)kk->len[i];
            }
            for (uint32_t j = 0; j < n; j++) {
                uint32_t i = order[j];
                int32_t len = kk->len[i];
                b->sparse.lengths[(size_t)k * n + j] = len;
                if (len) memcpy(b->sparse.values + v, kk->ids + start[i], (size_t)len * 8);
                for (int32_t e = 0; c->any_weighted && e < len; e++)
                    b->sparse.weights[v + (uint64_t)e] =
                        kk->weighted ? kk->w[start[i] + (uint64_t)e] : 1.0f;
                v += (uint64_t)len;
            }
        }
    }
    b->sample_ids = sid;
    b->record_ms = NULL; /* a file's rows have no record time: batched as a table's */
    out->schema = c->schema;
    out->session_ids = ses;
    out->timestamps = ts;
    c->n = 0;
    for (uint32_t k = 0; k < c->S; k++)
        c->keys[k].nids = 0;
    size_t fp = sl_arena_footprint(ar);
    if (fp > c->out_chunk + 4096) c->out_want = fp + fp / 4; /* chunk headers, a larger stripe */
    return SL_OK;
nomem:
    memset(out, 0, sizeof *out);
    return sl_error_set(err, SL_ERR_NOMEM, "Parquet rows: out of memory taking %u rows", n);
}

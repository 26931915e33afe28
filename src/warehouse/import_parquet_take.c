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

void imp_pqc_give_back(imp_pqc_t *c, sl_arena_t *arena)
{
    if (arena == NULL) return;
    sl_arena_destroy(c->spare);
    c->spare = arena;
    c->spare_chunk = c->out_chunk;
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

/* The stripe's arena, emptied. @return false when out of memory. */
static bool stripe_arena(imp_pqc_t *c)
{
    if (c->out == NULL && c->spare != NULL && c->spare_chunk >= c->out_chunk) {
        c->out = c->spare; /* given back: its chunk's pages already touched */
        c->spare = NULL;
    }
    if (c->out == NULL || c->out_want > c->out_chunk) {
        /* a chunk that holds a whole stripe, kept by reset (a fresh large
         * chunk each stripe costs a page fault every 4 KiB); after a
         * disown, a new arena of that size */
        size_t want = c->out_want > c->out_chunk ? c->out_want : c->out_chunk;
        sl_arena_t *bigger = sl_arena_new(c->a, want);
        if (bigger == NULL) return false;
        sl_arena_destroy(c->out);
        c->out = bigger;
        c->out_chunk = want;
    }
    sl_arena_reset(c->out);
    return true;
}

/* The arena's footprint after a stripe: a larger chunk next time when the
 * stripe took more than one. */
static void stripe_sized(imp_pqc_t *c)
{
    size_t fp = sl_arena_footprint(c->out);
    if (fp > c->out_chunk + 4096) c->out_want = fp + fp / 4; /* chunk headers, a larger stripe */
}

/* The stripe's arrays for n rows and total ids in c->out (emptied):
 * ids, labels, dense values, the KJT. */
static bool stripe_arrays(imp_pqc_t *c, uint32_t n, uint64_t total, sl_batch_t *b, int64_t **ses,
                          int64_t **ts)
{
    sl_arena_t *ar = c->out;
    memset(b, 0, sizeof *b);
    b->batch_size = n;
    b->sample_ids = sl_arena_alloc(ar, (size_t)n * 8 + 8);
    *ses = sl_arena_alloc(ar, (size_t)n * 8 + 8);
    *ts = sl_arena_alloc(ar, (size_t)n * 8 + 8);
    if (b->sample_ids == NULL || *ses == NULL || *ts == NULL) return false;
    /* every value and length is written by the run that fills the
     * stripe: each slot's kernel writes one for each row (a null as
     * missing: 0, NaN, a length of 0), and imp_pqc_run_begin those of
     * outputs no slot fills */
    if (sl_dense_init_unset(&b->dense, ar, n, c->D, c->dense_names) != SL_OK ||
        sl_dense_init_unset(&b->labels, ar, n, c->T, c->label_names) != SL_OK)
        return false;
    return c->S == 0 || sl_kjt_init_unset(&b->sparse, ar, c->S, c->key_names, n, total,
                                          c->any_weighted) == SL_OK;
}

/* imp_pqc_direct for rows [r0, r1), a list key's room from its batch's
 * offsets, or (est) from its estimate. */
static bool direct_rooms(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1, bool est)
{
    const sl_wh_colmap_resolved_t *m = c->p->map;
    if (c->n != 0 || c->any_weighted) return false;
    c->direct = false;
    /* each key's room: the slots of its column's rows, every id of the run
     * (fewer when some are null); a key no slot fills has none */
    uint64_t total = 0;
    for (uint32_t k = 0; k < c->S; k++)
        c->keys[k].at_room = 0;
    c->at_est = false;
    for (uint32_t s = 0; s < m->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        if (!c->slot_read[s] || sl->target != SL_WH_MAP_SPARSE || c->slot_out[s] < 0) continue;
        int32_t li = g->leaf_of[sl->column * 2];
        outkey_t *kk = &c->keys[c->slot_out[s]];
        uint64_t room = r1 - r0;
        if (g->col[li]->is_list && est) {
            /* a run past it is converted again, exactly (imp_pqc_conv_t) */
            if (kk->est_q8 == 0) return false;
            c->at_est = true;
            room = (((uint64_t)(r1 - r0) * kk->est_q8 * 9 / 8) >> 8) + 16;
        } else if (g->col[li]->is_list) {
            const sl_pq_batch_t *v = g->bat[li];
            room = (uint64_t)v->list_off[r1] - v->list_off[r0];
        }
        kk->at_room += room;
        total += room;
    }
    if (!stripe_arena(c) || !stripe_arrays(c, r1 - r0, total, &c->st, &c->st_ses, &c->st_ts))
        return false;
    c->at_cap = total;
    uint64_t at = 0;
    for (uint32_t k = 0; k < c->S; k++) {
        outkey_t *kk = &c->keys[k];
        kk->at_len = c->st.sparse.lengths + (size_t)k * (r1 - r0);
        kk->at_ids = c->st.sparse.values + at;
        at += kk->at_room;
    }
    c->direct = true;
    return true;
}

bool imp_pqc_direct(imp_pqc_t *c, const group_read_t *g, uint32_t r0, uint32_t r1)
{
    return direct_rooms(c, g, r0, r1, false);
}

bool imp_pqc_direct_est(imp_pqc_t *c, const group_read_t *g, uint32_t rows)
{
    return direct_rooms(c, g, 0, rows, true);
}

bool imp_pqc_spill(imp_pqc_t *c)
{
    if (!c->direct) return true;
    uint32_t n = c->n;
    c->direct = false;
    /* nothing kept yet (the stripe's first run refused a row): nothing to
     * copy, and the vectors may not be there (memcpy from NULL) */
    if (n == 0) return true;
    if (!imp_pqc_reserve_rows(c, n)) return false;
    memcpy(c->sid, c->st.sample_ids, (size_t)n * 8);
    memcpy(c->ses, c->st_ses, (size_t)n * 8);
    memcpy(c->ts, c->st_ts, (size_t)n * 8);
    if (c->D) memcpy(c->dense, c->st.dense.data, (size_t)n * c->D * 4);
    if (c->T) memcpy(c->labels, c->st.labels.data, (size_t)n * c->T * 4);
    for (uint32_t k = 0; k < c->S; k++) {
        outkey_t *kk = &c->keys[k];
        uint64_t nids = kk->nids;
        kk->nids = 0;
        if (!imp_pqc_reserve_ids(c, kk, nids)) return false;
        memcpy(kk->len, kk->at_len, (size_t)n * 4);
        if (nids) memcpy(kk->ids, kk->at_ids, (size_t)nids * 8);
        kk->nids = nids;
    }
    return true;
}

/* The stripe built in place, handed out: each key's ids moved down to
 * follow the last key's where some of its room was not used (null ids). */
static void take_direct(imp_pqc_t *c, sl_wh_rows_t *out)
{
    sl_batch_t *b = &out->batch;
    *b = c->st;
    uint64_t v = 0;
    for (uint32_t k = 0; k < c->S; k++) {
        const outkey_t *kk = &c->keys[k];
        if (kk->at_ids != b->sparse.values + v && kk->nids)
            memmove(b->sparse.values + v, kk->at_ids, (size_t)kk->nids * 8);
        v += kk->nids;
    }
    if (c->S) b->sparse.num_values = v;
    b->record_ms = NULL;
    out->schema = c->schema;
    out->session_ids = c->st_ses;
    out->timestamps = c->st_ts;
    c->direct = false;
    c->n = 0;
    for (uint32_t k = 0; k < c->S; k++)
        c->keys[k].nids = 0;
    stripe_sized(c);
}

sl_err_t imp_pqc_take(imp_pqc_t *c, bool by_session, sl_wh_rows_t *out, sl_error_t *err)
{
    memset(out, 0, sizeof *out);
    uint32_t n = c->n;
    if (c->direct) {
        bool sorted = true;
        for (uint32_t i = 1; by_session && i < n && sorted; i++)
            sorted = c->st_ses[i] >= c->st_ses[i - 1];
        if (sorted && n == c->st.batch_size) {
            take_direct(c, out);
            return SL_OK;
        }
        /* rows to sort by session (or fewer than the stripe was made
         * for): through the vectors, as any other stripe */
        if (!imp_pqc_spill(c)) goto nomem;
    }
    if (!stripe_arena(c)) goto nomem;
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
    stripe_sized(c);
    return SL_OK;
nomem:
    memset(out, 0, sizeof *out);
    return sl_error_set(err, SL_ERR_NOMEM, "Parquet rows: out of memory taking %u rows", n);
}

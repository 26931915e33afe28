/* The rows collected by record_decode.c taken as one stripe
 * (sl_kafka_rows_take, record_decode.h): sorted by session, key-major. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/mem.h"
#include "kafka/record_decode.h"
#include "kafka/record_decode_internal.h"

/* Rows by session, stably: a bottom-up merge sort over o[n] with the
 * scratch tmp[n] (glibc's qsort allocated its own for every stripe).
 * Runs already in order, a session's rows as they came, cost one compare
 * each. @return where the sorted order is, o or tmp. */
static struct order *sort_by_session(struct order *o, struct order *tmp, uint32_t n)
{
    for (uint32_t w = 1; w < n; w *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * w) {
            uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint32_t i = lo, j = mid, k = lo;
            if (mid == hi || o[mid - 1].session <= o[mid].session) { /* in order already */
                memcpy(tmp + lo, o + lo, (size_t)(hi - lo) * sizeof *o);
                continue;
            }
            /* Without a branch on the compare: sessions in a stripe come in
             * no order, so that branch was mispredicted about half the
             * time (most of this function's own time in a profile). */
            while (i < mid && j < hi) {
                bool right = o[j].session < o[i].session; /* ties: left first */
                const struct order *from = right ? &o[j] : &o[i];
                tmp[k++] = *from;
                j += right;
                i += !right;
            }
            while (i < mid)
                tmp[k++] = o[i++];
            while (j < hi)
                tmp[k++] = o[j++];
        }
        struct order *t = o;
        o = tmp;
        tmp = t;
    }
    return o;
}

sl_err_t sl_kafka_rows_take(sl_kafka_rows_t *r, sl_kafka_stripe_t *out, sl_error_t *err)
{
    memset(out, 0, sizeof *out);
    uint32_t n = r->n;
    if (r->out_want > r->out_chunk) {
        /* The last stripe outgrew the arena's chunk: a chunk that holds a
         * whole stripe, so that reset keeps it and a stripe is written to
         * memory already mapped (a fresh large chunk each time cost a page
         * fault every 4 KiB, more than the copy itself). */
        sl_arena_t *bigger = sl_arena_new(r->a, r->out_want);
        if (!bigger) goto nomem;
        sl_arena_destroy(r->out);
        r->out = bigger;
        r->out_chunk = r->out_want;
    }
    sl_arena_reset(r->out);
    if (n > r->order_cap) {
        if (r->order) sl_free(r->a, r->order, 2 * (size_t)r->order_cap * sizeof *r->order);
        r->order_cap = 0;
        if (!(r->order = sl_alloc(r->a, 2 * (size_t)n * sizeof *r->order))) goto nomem;
        r->order_cap = n;
    }
    for (uint32_t i = 0; i < n; i++)
        r->order[i] = (struct order){r->session_ids[i], i};
    const struct order *order = n ? sort_by_session(r->order, r->order + n, n) : r->order;
    sl_arena_t *ar = r->out;
    sl_batch_t *b = &out->rows.batch;
    b->batch_size = n;
    int64_t *sid = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *ses = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *ts = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *offs = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *cms = sl_arena_alloc(ar, (size_t)n * 8 + 8);
    if (!sid || !ses || !ts || !offs || !cms) goto nomem;
    if (sl_dense_init(&b->dense, ar, n, r->D, r->dense_names) != SL_OK ||
        sl_dense_init(&b->labels, ar, n, r->T, r->label_names) != SL_OK)
        goto nomem;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < r->S; k++)
            total += r->lens[(size_t)i * r->S + k];
    if (r->S &&
        sl_kjt_init(&b->sparse, ar, r->S, r->sparse_names, n, total, r->any_weighted) != SL_OK)
        goto nomem;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = order[j].row;
        sid[j] = r->sample_ids[i];
        ses[j] = r->session_ids[i];
        ts[j] = r->timestamps[i];
        offs[j] = r->offsets[i];
        cms[j] = r->create_ms[i];
        /* a few values a row: loops, not a call to memcpy each */
        for (uint32_t d = 0; d < r->D; d++)
            b->dense.data[(size_t)j * r->D + d] = r->dense[(size_t)i * r->D + d];
        for (uint32_t t = 0; t < r->T; t++)
            b->labels.data[(size_t)j * r->T + t] = r->labels[(size_t)i * r->T + t];
    }
    uint64_t v = 0; /* key-major: every row of key 0, then key 1 ... */
    for (uint32_t k = 0; k < r->S; k++)
        for (uint32_t j = 0; j < n; j++) {
            size_t at = (size_t)order[j].row * r->S + k;
            uint32_t len = r->lens[at];
            b->sparse.lengths[(size_t)k * n + j] = (int32_t)len;
            if (len) {
                /* most lists are a few ids (the sessions preset: four of six
                 * keys 1 to 5), where a call to memcpy costs more than the
                 * copy */
                const int64_t *from = r->ids + r->starts[at];
                if (len <= 4)
                    for (uint32_t x = 0; x < len; x++)
                        b->sparse.values[v + x] = from[x];
                else
                    memcpy(b->sparse.values + v, from, (size_t)len * 8);
                if (r->any_weighted)
                    memcpy(b->sparse.weights + v, r->weights + r->starts[at], (size_t)len * 4);
            }
            v += len;
        }
    b->sample_ids = sid;
    b->record_ms = cms; /* travels with its row to the trainer (freshness) */
    out->rows.schema = r->schema;
    out->rows.session_ids = ses;
    out->rows.timestamps = ts;
    out->offsets = offs;
    out->create_ms = cms;
    r->n = 0;
    r->nids = 0;
    size_t fp = sl_arena_footprint(ar);
    if (fp > r->out_chunk + 4096) r->out_want = fp + fp / 4; /* chunk headers, a larger stripe */
    return SL_OK;
nomem:
    memset(out, 0, sizeof *out);
    return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory taking %u rows", n);
}

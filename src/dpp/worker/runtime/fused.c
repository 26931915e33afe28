/* The worker's fused path (docs/WORKER.md, "The fused path"), on the reader
 * thread: a batch whose rows all lie in one decoded stripe, for a plan whose
 * transforms work value by value (sl_pipeline_fused_t), is not built as a
 * batch, transformed in place and copied into a frame (three passes over
 * its bytes, on two threads). Its frame is laid out from the sizes alone
 * (sl_wire_encode_layout) and every tensor is copied from the stripe
 * straight to its place in the frame, in pieces small enough to stay in
 * the core's cache while the piece's transforms run over it: each value is
 * read from the stripe once and written once. The frame (and the rows'
 * record times, Kafka's) then goes to the server like a transform
 * thread's. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dpp/worker/runtime/worker_internal.h"
#include "sluice/wire.h"

/* Pieces: 2048 ids (16 KiB) or 512 dense rows (26 KiB for criteo's 13
 * columns) fit in L1/L2 next to what the kernels read. */
enum { IDS_PIECE = 2048, ROWS_PIECE = 512 };

/* Key k's values in the runs, each list cut to cap ids (INT32_MAX: the
 * batcher's span, checked there, less the rows between runs). */
static uint64_t key_total(const sl_worker_direct_t *d, uint32_t k, int32_t cap)
{
    if (d->num_runs == 1 && cap == INT32_MAX) return d->span[k];
    const int32_t *L = d->rows->sparse.lengths + (size_t)k * d->rows->batch_size;
    uint64_t sum = 0;
    for (uint32_t q = 0; q < d->num_runs; q++) {
        const int32_t *l = L + d->runs[q].row;
        if (cap == INT32_MAX) {
            bool neg;
            sum += sl_lengths_sum(l, d->runs[q].count, &neg);
            continue;
        }
        for (uint32_t r = 0; r < d->runs[q].count; r++) /* non-negative: the batcher checked */
            sum += (uint64_t)(l[r] < cap ? l[r] : cap);
    }
    return sum;
}

/* Key k's lists of one run, each cut to cap ids, copied to dl and dv; the
 * transforms run over every IDS_PIECE values written. @return the values
 * written. */
static uint64_t copy_capped(const sl_pipeline_fused_t *f, uint32_t k, int32_t cap, const int32_t *l,
                            uint32_t rows, const int64_t *src, int32_t *dl, int64_t *dv)
{
    uint64_t at = 0, done = 0;
    for (uint32_t r = 0; r < rows; r++) {
        int32_t keep = l[r] < cap ? l[r] : cap;
        dl[r] = keep;
        memcpy(dv + at, src, (size_t)keep * sizeof *dv);
        src += l[r];
        at += (uint64_t)keep;
        if (at - done >= IDS_PIECE) {
            sl_pipeline_fused_key(f, k, dv + done, at - done);
            done = at;
        }
    }
    sl_pipeline_fused_key(f, k, dv + done, at - done);
    return at;
}

/* Copy key k's lengths and values of the runs into the frame (view, from
 * value at) and run its transforms over each piece just copied. */
static void fill_key(const sl_pipeline_fused_t *f, const sl_worker_direct_t *d, uint32_t k,
                     const sl_batch_t *view, uint64_t at)
{
    const sl_batch_t *rows = d->rows;
    const int32_t *L = rows->sparse.lengths + (size_t)k * rows->batch_size;
    const int64_t *src = rows->sparse.values + d->key_offsets[k] + d->start[k];
    int32_t *dl = view->sparse.lengths + (size_t)k * d->num_rows;
    int64_t *dv = view->sparse.values + at;
    const int32_t cap = sl_pipeline_fused_key_cap(f, k);
    uint32_t r = d->runs[0].row, i = 0;
    for (uint32_t q = 0; q < d->num_runs; q++) {
        const sl_worker_row_run_t *run = &d->runs[q];
        bool neg;
        if (run->row > r) src += sl_lengths_sum(L + r, run->row - r, &neg); /* a gap */
        uint64_t n = d->num_runs == 1 ? d->span[k] : sl_lengths_sum(L + run->row, run->count, &neg);
        if (cap != INT32_MAX) {
            dv += copy_capped(f, k, cap, L + run->row, run->count, src, dl + i, dv);
        } else {
            memcpy(dl + i, L + run->row, (size_t)run->count * sizeof *L);
            for (uint64_t j = 0; j < n; j += IDS_PIECE) {
                uint64_t p = n - j < IDS_PIECE ? n - j : IDS_PIECE;
                sl_pipeline_fused_key_from(f, k, dv + j, src + j, p);
            }
            dv += n;
        }
        src += n;
        i += run->count;
        r = run->row + run->count;
    }
}

/* Dense rows (transformed piece by piece), labels and sample ids of the
 * runs into the frame. */
static void fill_rows(const sl_pipeline_fused_t *f, const sl_worker_direct_t *d,
                      const sl_batch_t *view)
{
    const sl_batch_t *rows = d->rows;
    const uint32_t D = rows->dense.cols, T = rows->labels.cols;
    uint32_t at = 0;
    for (uint32_t q = 0; q < d->num_runs; q++) {
        const sl_worker_row_run_t *run = &d->runs[q];
        for (uint32_t j = 0; D && j < run->count; j += ROWS_PIECE) {
            uint32_t p = run->count - j < ROWS_PIECE ? run->count - j : ROWS_PIECE;
            float *dst = view->dense.data + (size_t)(at + j) * D;
            memcpy(dst, rows->dense.data + (size_t)(run->row + j) * D, (size_t)p * D * sizeof *dst);
            sl_pipeline_fused_dense(f, dst, p);
        }
        if (T)
            memcpy(view->labels.data + (size_t)at * T, rows->labels.data + (size_t)run->row * T,
                   (size_t)run->count * T * sizeof(float));
        if (view->sample_ids)
            memcpy(view->sample_ids + at, rows->sample_ids + run->row,
                   (size_t)run->count * sizeof(int64_t));
        at += run->count;
    }
}

void dpp_worker_record_deltas(const int64_t *ms, const sl_worker_row_run_t *runs, uint32_t nr,
                              int64_t *out)
{
    uint64_t prev = 0; /* the first goes out absolute */
    for (uint32_t q = 0; q < nr; q++)
        for (uint32_t r = runs[q].row; r < runs[q].row + runs[q].count; r++) {
            *out++ = (int64_t)((uint64_t)ms[r] - prev);
            prev = (uint64_t)ms[r];
        }
}

sl_err_t dpp_worker_fused_plan(const sl_pipeline_fused_t *f, const sl_worker_direct_t *d,
                               uint64_t *totals, sl_batch_t *shape, size_t *size, sl_error_t *err)
{
    const sl_batch_t *rows = d->rows;
    const uint32_t F = rows->sparse.num_keys;
    uint64_t total = 0;
    for (uint32_t k = 0; k < F; k++) {
        totals[k] = key_total(d, k, sl_pipeline_fused_key_cap(f, k));
        total += totals[k];
    }
    *shape = (sl_batch_t){.batch_size = d->num_rows, .origin = d->origin};
    shape->sparse = (sl_kjt_t){
        .num_keys = F, .stride = d->num_rows, .num_values = total, .keys = rows->sparse.keys};
    shape->dense =
        (sl_dense_t){.rows = d->num_rows, .cols = rows->dense.cols, .names = rows->dense.names};
    shape->labels =
        (sl_dense_t){.rows = d->num_rows, .cols = rows->labels.cols, .names = rows->labels.names};
    /* any non-NULL pointer asks for the buffer; its bytes come from the runs */
    if (d->sample_ids) shape->sample_ids = rows->sample_ids;
    *size = sl_wire_encoded_size(shape);
    if (*size == 0)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "encode: batch of %u rows: sizes overflow",
                            d->num_rows);
    return SL_OK;
}

sl_err_t dpp_worker_fused_fill(const sl_pipeline_fused_t *f, const sl_worker_direct_t *d,
                               const uint64_t *totals, const sl_batch_t *shape, void *buf,
                               size_t cap, size_t *len, sl_error_t *err)
{
    sl_batch_t view;
    sl_err_t rc = sl_wire_encode_layout(shape, buf, cap, len, &view, err);
    if (rc != SL_OK) return rc;
    uint64_t at = 0;
    for (uint32_t k = 0; k < shape->sparse.num_keys; k++) {
        fill_key(f, d, k, &view, at);
        at += totals[k];
    }
    fill_rows(f, d, &view);
    return SL_OK;
}

sl_err_t dpp_worker_fused_batch(sl_worker_t *w, const sl_pipeline_fused_t *f,
                                const sl_worker_direct_t *d, uint64_t held, bool made,
                                uint64_t *waited, sl_error_t *err)
{
    const sl_worker_lease_origin_t *lease = d->lease;
    const uint32_t F = d->rows->sparse.num_keys;
    uint64_t q0 = now_ns(CLOCK_MONOTONIC);
    *waited = 0;
    /* Bounded read-ahead, as a transform thread waits before making a
     * batch (xform.c, process): waiting for trainers, not for memory. */
    sl_worker_budget_idle(w->budget, true);
    sl_err_t rc = sl_worker_server_wait_room(w->server, lease ? lease->rank_plus_one : 0);
    sl_worker_budget_idle(w->budget, false);
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    *waited = t0 - q0;
    if (rc != SL_OK) return sl_error_set(err, SL_ERR_CLOSED, "worker stopping");
    uint64_t *totals = sl_alloc(w->a, (F ? F : 1) * sizeof *totals);
    if (totals == NULL) return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory");
    sl_batch_t shape;
    size_t size = 0, len = 0;
    void *frame = NULL;
    uint64_t tw = 0;
    /* Kafka's rows carry their record times: they go with the frame as a
     * built batch's do (xform.c record_times), pinned with it */
    const uint32_t nt = d->rows->record_ms ? d->num_rows : 0;
    const size_t tbytes = (size_t)nt * sizeof(int64_t);
    int64_t *times = NULL;
    rc = dpp_worker_fused_plan(f, d, totals, &shape, &size, err);
    if (rc == SL_OK) {
        char what[64];
        snprintf(what, sizeof what, "a batch of %u rows", d->num_rows);
        uint64_t a0 = now_ns(CLOCK_MONOTONIC);
        rc = dpp_worker_budget_take(w, size + tbytes, held, what, err);
        tw = now_ns(CLOCK_MONOTONIC) - a0;
        if (rc == SL_OK && ((frame = sl_alloc_aligned(w->frame_a, size, SL_ALIGN)) == NULL ||
                            (nt && (times = sl_alloc(w->a, tbytes)) == NULL))) {
            sl_worker_budget_release(w->budget, size + tbytes);
            rc = frame ? sl_error_set(err, SL_ERR_NOMEM, "encode: record times of %u rows", nt)
                       : sl_error_set(err, SL_ERR_NOMEM, "encode: frame of %zu bytes", size);
            if (frame) sl_free(w->frame_a, frame, size);
        }
    }
    if (rc == SL_OK &&
        (rc = dpp_worker_fused_fill(f, d, totals, &shape, frame, size, &len, err)) != SL_OK) {
        sl_free(w->frame_a, frame, size);
        if (times) sl_free(w->a, times, tbytes);
        sl_worker_budget_release(w->budget, size + tbytes);
    }
    sl_free(w->a, totals, (F ? F : 1) * sizeof *totals);
    if (rc != SL_OK) {
        sl_error_prefix(err, "batch of split %" PRIu64 " row %" PRIu64 ": ", d->origin.split_id,
                        d->origin.first_row);
        return rc;
    }
    uint64_t t1 = now_ns(CLOCK_MONOTONIC);
    *waited += tw;
    sl_worker_server_item_t it = {.frame = frame,
                                  .len = len,
                                  .origin = d->origin,
                                  .num_samples = d->num_rows,
                                  .expanded_bytes = len,
                                  .accounted = len + tbytes};
    if (nt) {
        dpp_worker_record_deltas(d->rows->record_ms, d->runs, d->num_runs, times);
        it.record_ms = times;
        it.num_record_ms = nt;
    }
    if (lease) {
        it.lease = *lease;
        if (!made && w->source.lease_made) w->source.lease_made(w->source.ctx, lease->handle);
    }
    dpp_worker_times_t tm = {.encode_ns = t1 - t0 - tw, .backpressure_ns = *waited, .fused = true};
    return dpp_worker_send(w, &it, size + tbytes, &tm, NULL, err);
}

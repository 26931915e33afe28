/* The worker's transform threads (worker_internal.h): each takes batches
 * off the work queue, deduplicates, transforms and encodes them, and hands
 * them to the server, accounting their memory in the budget and their
 * times in the statistics; and the batch helpers every stage uses (a
 * batch's bytes, a batch dropped or retired, a table reader closed). */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dpp/worker/runtime/worker_internal.h"
#include "sluice/wire.h"

uint64_t dpp_batch_bytes(const sl_batch_t *b)
{
    uint64_t groups = 0;
    for (uint32_t g = 0; g < b->num_groups; g++)
        groups += sl_ikjt_bytes(&b->groups[g]);
    return groups + sl_kjt_bytes(&b->sparse) +
           ((uint64_t)b->dense.rows * b->dense.cols + (uint64_t)b->labels.rows * b->labels.cols) *
               sizeof(float) +
           (b->sample_ids ? (uint64_t)b->batch_size * sizeof(int64_t) : 0) +
           (b->record_ms ? (uint64_t)b->batch_size * sizeof(int64_t) : 0);
}

void dpp_worker_close_table_reader(sl_worker_t *w, sl_wh_reader_t *r)
{
    if (r == NULL) return;
    sl_wh_read_stats_t rs;
    sl_wh_reader_stats(r, &rs);
    sl_mutex_lock(&w->mu);
    w->st.read_ahead += rs.read_ahead;
    w->st.read_ahead_skipped += rs.read_ahead_skipped;
    w->st.read_ahead_dropped += rs.read_ahead_dropped;
    sl_mutex_unlock(&w->mu);
    sl_wh_reader_close(r);
}

/* A batch dropped before the server had it. */
void dpp_worker_retire(sl_worker_t *w, void *lease)
{
    if (lease && w->source.lease_dropped)
        w->source.lease_dropped(w->source.ctx, lease);
    else if (lease && w->source.lease_retire)
        w->source.lease_retire(w->source.ctx, lease, false);
}

void dpp_worker_drop_msg(sl_worker_t *w, const sl_worker_msg_t *m)
{
    dpp_worker_batch_t *wb = m->ptr;
    sl_worker_budget_release(w->budget, m->bytes);
    sl_batch_destroy(wb->batch);
    if (wb->cw) {
        dpp_cache_writer_fail(wb->cw, "a batch was dropped");
        dpp_cache_writer_unref(wb->cw);
    }
    dpp_worker_retire(w, wb->lease.handle);
    sl_free(w->a, wb, sizeof *wb);
}

/* A batch that could not be made (rc): its memory goes; a leased batch
 * whose rows fail (a split error) fails its lease, reported through the
 * source, and the worker goes on (@return SL_OK); anything else is the
 * worker's failure (@return rc). */
static sl_err_t batch_failed(sl_worker_t *w, sl_batch_t *batch, uint64_t held,
                             const sl_worker_lease_origin_t *lease, sl_err_t rc, sl_error_t *err)
{
    sl_worker_budget_release(w->budget, held);
    sl_batch_destroy(batch);
    bool split = lease->handle && w->source.lease_failed && dpp_worker_split_error(rc, false) &&
                 !atomic_load(&w->stopping);
    /* before the retire: that may be the lease's last batch */
    if (split) w->source.lease_failed(w->source.ctx, lease->handle, rc, -1, err->msg);
    dpp_worker_retire(w, lease->handle);
    if (!split) return rc;
    sl_mutex_lock(&w->mu);
    w->st.splits_failed++;
    sl_mutex_unlock(&w->mu);
    return SL_OK;
}

/* The batch's record CreateTimes as BatchInfo carries them
 * (dpp_worker_record_deltas). They stay pinned with the frame until the
 * batch is acknowledged. */
static sl_err_t record_times(sl_worker_t *w, const sl_batch_t *batch, sl_worker_server_item_t *it,
                             sl_error_t *err)
{
    uint32_t n = batch->batch_size;
    if (n == 0) return SL_OK;
    int64_t *d = sl_alloc(w->a, (size_t)n * sizeof *d);
    if (!d) return sl_error_set(err, SL_ERR_NOMEM, "worker: out of memory for record times");
    dpp_worker_record_deltas(batch->record_ms, &(sl_worker_row_run_t){0, n}, 1, d);
    it->record_ms = d;
    it->num_record_ms = n;
    it->accounted += (uint64_t)n * sizeof *d;
    return SL_OK;
}

/* Dedup, transform and encode one batch; hand it to the server with the
 * lease part of its origin. Takes the batch and its reference to a cache
 * writer (wb->cw), also on failure. */
static sl_err_t process(sl_worker_t *w, sl_dedup_t *d, const dpp_worker_batch_t *wb, uint64_t held,
                        sl_dedup_stats_t *ds, sl_error_t *err)
{
    sl_batch_t *batch = wb->batch;
    const sl_worker_lease_origin_t *lease = &wb->lease;
    /* Make the batch only when few enough wait to be sent: the read-ahead
     * is bounded in batches, not only by the memory budget, so frames and
     * batches reuse memory that is already mapped (and likely cached)
     * instead of faulting in fresh pages up to the budget. Waiting for
     * trainers, not for memory: idle for the budget's stuck test. */
    uint64_t q0 = now_ns(CLOCK_MONOTONIC);
    sl_worker_budget_idle(w->budget, true);
    sl_err_t rc = lease->ordered ? sl_worker_server_wait_room_ordered(w->server)
                                 : sl_worker_server_wait_room(w->server, lease->rank_plus_one);
    sl_worker_budget_idle(w->budget, false);
    if (rc != SL_OK) {
        sl_error_set(err, SL_ERR_CLOSED, "worker stopping");
        if (wb->cw) {
            dpp_cache_writer_fail(wb->cw, err->msg);
            dpp_cache_writer_unref(wb->cw);
        }
        return batch_failed(w, batch, held, lease, rc, err);
    }
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    /* a cached batch was deduplicated and transformed before it was cached */
    if (!wb->cached) rc = sl_worker_batcher_dedup(d, batch, w->groups, w->num_groups, ds, err);
    uint64_t t1 = now_ns(CLOCK_MONOTONIC);
    if (rc == SL_OK && !wb->cached) rc = sl_pipeline_plan_transform(w->plan, batch, err);
    /* a served batch's groups count in the dedup figures too (docs/WORKER.md) */
    if (rc == SL_OK && wb->cached) dpp_cache_group_stats(w, batch, ds);
    uint64_t t2 = now_ns(CLOCK_MONOTONIC);
    /* writing the cache file: its time is the cache's (cache_write_ns), not a
     * stage's. The batch's reference goes before the batch goes out: the
     * split's last one commits the file first, so the split's SPLIT_READ,
     * which may begin the next epoch, never comes before the file exists
     * (a lease of the next epoch would find none and compute the split again). */
    if (wb->cw) {
        if (rc == SL_OK)
            dpp_cache_writer_add(wb->cw, batch, lease->from_row, lease->to_row);
        else
            dpp_cache_writer_fail(wb->cw, err->msg);
        dpp_cache_writer_unref(wb->cw);
    }
    uint64_t t2w = now_ns(CLOCK_MONOTONIC);
    if (rc) {
        sl_error_prefix(err, "batch of split %" PRIu64 " row %" PRIu64 ": ", batch->origin.split_id,
                        batch->origin.first_row);
        return batch_failed(w, batch, held, lease, rc, err);
    }
    size_t need_enc = sl_wire_encoded_size(batch);
    uint64_t need = (uint64_t)sl_arena_footprint(batch->arena) + need_enc;
    uint64_t tw = 0;
    if (need > held) {
        uint64_t a0 = now_ns(CLOCK_MONOTONIC);
        char what[96];
        snprintf(what, sizeof what, "the encoding of a batch of %u rows", batch->batch_size);
        rc = dpp_worker_budget_take(w, need - held, held, what, err);
        tw = now_ns(CLOCK_MONOTONIC) - a0;
        if (rc != SL_OK) return batch_failed(w, batch, held, lease, rc, err); /* memory, stop */
        held = need;
    }
    /* the size just found: sl_wire_encode would lay the batch out once
     * more to find it, a third time with the encode's */
    void *frame;
    size_t len;
    rc = sl_wire_encode_sized(batch, need_enc, w->frame_a, &frame, &len, err);
    uint64_t t3 = now_ns(CLOCK_MONOTONIC);
    if (rc) {
        sl_error_prefix(err, "encode: ");
        return batch_failed(w, batch, held, lease, rc, err);
    }
    sl_worker_server_item_t it = {.frame = frame,
                                  .len = len,
                                  .origin = batch->origin,
                                  .num_samples = batch->batch_size,
                                  .expanded_bytes = sl_worker_batcher_expanded_bytes(batch, len),
                                  .accounted = len,
                                  .lease = *lease};
    if (batch->record_ms && (rc = record_times(w, batch, &it, err))) {
        sl_free(w->frame_a, frame, len);
        return batch_failed(w, batch, held, lease, rc, err);
    }
    sl_batch_destroy(batch);
    /* held covers the batch's arena, which held the times: room for both */
    dpp_worker_times_t tm = {.dedup_ns = t1 - t0,
                             .transform_ns = t2 - t1,
                             .encode_ns = t3 - t2w - tw,
                             .backpressure_ns = tw + (t0 - q0),
                             .cached = wb->cached};
    return dpp_worker_send(w, &it, held, &tm, ds, err);
}

sl_err_t dpp_worker_send(sl_worker_t *w, const sl_worker_server_item_t *it, uint64_t held,
                         const dpp_worker_times_t *tm, const sl_dedup_stats_t *ds, sl_error_t *err)
{
    sl_worker_budget_release(w->budget, held > it->accounted ? held - it->accounted : 0);
    sl_worker_budget_pin(w->budget, it->accounted);
    sl_mutex_lock(&w->mu);
    w->st.batches++;
    w->st.batches_fused += tm->fused;
    w->st.samples += it->num_samples;
    w->st.bytes_encoded += it->len;
    w->st.bytes_expanded += it->expanded_bytes;
    if (tm->cached) {
        w->st.cache_batches++;
        w->st.cache_samples += it->num_samples;
        w->st.cache_bytes_encoded += it->len;
    }
    w->st.dedup_ns += tm->dedup_ns;
    w->st.transform_ns += tm->transform_ns;
    w->st.encode_ns += tm->encode_ns;
    /* a job without transforms: a fused batch's time is all copy, which a
     * cached batch's encode pays too (the probe's hot copy would leave
     * part of it standing as compute: a cheap job chosen) */
    if (tm->fused && w->job->num_transforms) {
        uint64_t copy = it->len * atomic_load(&w->copy_ps_per_byte) / 1000;
        w->st.fused_transform_ns += tm->encode_ns > copy ? tm->encode_ns - copy : 0;
    }
    w->st.backpressure_ns += tm->backpressure_ns;
    for (uint32_t g = 0; ds && g < w->num_groups && g < SL_WORKER_MAX_GROUPS; g++) {
        w->st.groups[g].rows += ds[g].batch_size;
        w->st.groups[g].unique_rows += ds[g].unique_rows;
    }
    sl_mutex_unlock(&w->mu);
    return sl_worker_server_push(w->server, it, err);
}

void *dpp_worker_xform_main(void *arg)
{
    sl_worker_t *w = arg;
    pthread_setname_np(pthread_self(), "sl-w-xform");
    sl_error_t err = {0};
    sl_err_t rc = SL_OK;
    sl_dedup_t *d = sl_dedup_new(w->a, NULL);
    sl_dedup_stats_t *ds = sl_calloc(w->a, w->num_groups ? w->num_groups : 1, sizeof *ds);
    if (!d || !ds) {
        rc = sl_error_set(&err, SL_ERR_NOMEM, "worker: out of memory for a transform thread");
        dpp_worker_fail(w, rc, err.msg);
    }
    sl_worker_msg_t m;
    for (;;) {
        sl_worker_budget_idle(w->budget, true); /* waiting for a batch */
        sl_err_t popped = sl_worker_queue_pop(w->work, &m, -1);
        if (popped != SL_OK) break; /* stays idle: this thread has ended */
        sl_worker_budget_idle(w->budget, false);
        if (rc != SL_OK || atomic_load(&w->stopping)) {
            dpp_worker_drop_msg(w, &m);
            continue;
        }
        dpp_worker_batch_t wb = *(dpp_worker_batch_t *)m.ptr;
        sl_free(w->a, m.ptr, sizeof wb);
        rc = process(w, d, &wb, m.bytes, ds, &err); /* drops wb.cw's reference */
        if (rc != SL_OK && !atomic_load(&w->stopping)) dpp_worker_fail(w, rc, err.msg);
    }
    sl_dedup_destroy(d);
    if (ds) sl_free(w->a, ds, (size_t)(w->num_groups ? w->num_groups : 1) * sizeof *ds);
    sl_mutex_lock(&w->mu);
    w->st.cpu_ns += now_ns(CLOCK_THREAD_CPUTIME_ID);
    sl_mutex_unlock(&w->mu);
    /* the last transform thread out tells the server that nothing more comes */
    if (atomic_fetch_sub(&w->running, 1) == 1 && !atomic_load(&w->stopping))
        sl_worker_server_finish(w->server);
    return NULL;
}

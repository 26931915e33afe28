/* The worker's statistics (worker.h, sl_worker_stats_t): a snapshot of
 * its counters with the server's, the source's, the shared-memory heap's
 * and the budget's figures, and the summary the command prints at its
 * end. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dpp/worker/runtime/worker_internal.h"

void sl_worker_stats(sl_worker_t *w, sl_worker_stats_t *out)
{
    sl_worker_server_stats_t ss = {0};
    if (w->server) sl_worker_server_stats(w->server, &ss);
    bool done = w->server && sl_worker_server_wait_done(w->server, 0);
    sl_mutex_lock(&w->mu);
    w->st.server = ss;
    if (!w->stopped) w->st.finished = done && w->fail_code == SL_OK;
    *out = w->st;
    sl_mutex_unlock(&w->mu);
    if (w->source.records) {
        sl_worker_records_t r = {0};
        w->source.records(w->source.ctx, &r);
        out->records_read = r.read;
        out->records_bad = r.bad;
        out->kafka_pauses = r.pauses;
        out->kafka_wakes = r.wakes;
        out->kafka_handed_back = r.handed_back;
        _Static_assert(sizeof out->age_buckets == sizeof r.age_buckets, "age buckets");
        memcpy(out->age_buckets, r.age_buckets, sizeof r.age_buckets);
        out->age_count = r.age_count;
        out->age_sum_ms = r.age_sum_ms;
        out->records_dead_letter = r.dead_letter;
        out->records_dead_letter_failed = r.dead_letter_failed;
    }
    if (w->shm) {
        sl_shm_heap_stats_t hs;
        sl_shm_heap_stats(w->shm, &hs);
        out->shm_used = hs.used;
        out->shm_high_water = hs.high_water;
        out->shm_peak = hs.peak;
        out->shm_fallbacks = hs.fallbacks;
    }
    if (w->budget) {
        out->memory_used = sl_worker_budget_used(w->budget);
        out->memory_peak = sl_worker_budget_peak(w->budget);
    }
    for (uint32_t g = 0; g < out->num_groups; g++)
        out->groups[g].factor = out->groups[g].unique_rows ? (double)out->groups[g].rows /
                                                                 (double)out->groups[g].unique_rows
                                                           : 1.0;
}

void sl_worker_print_stats(const sl_worker_stats_t *st, double seconds, FILE *out)
{
    const sl_worker_server_stats_t *s = &st->server;
    fprintf(out, "worker summary%s\n", st->finished ? " (job finished)" : "");
    fprintf(out,
            "  splits %" PRIu64 ", stripes %" PRIu64 ", rows read %" PRIu64 ", kept %" PRIu64
            ", dropped by drop_last %" PRIu64 "\n",
            st->splits, st->stripes, st->rows_read, st->rows_kept, st->rows_dropped);
    fprintf(out, "  batches %" PRIu64 ", samples %" PRIu64 " (%.0f samples/s over %.2f s)\n",
            st->batches, st->samples, seconds > 0 ? (double)st->samples / seconds : 0.0, seconds);
    if (st->batches_fused)
        fprintf(out,
                "  fused path: %" PRIu64 " batches made straight from the stripe into frames "
                "(their transforms and copy count as encode)\n",
                st->batches_fused);
    fprintf(out, "  bytes encoded %" PRIu64 ", without dedup %" PRIu64 " (%.2fx smaller)\n",
            st->bytes_encoded, st->bytes_expanded,
            st->bytes_encoded ? (double)st->bytes_expanded / (double)st->bytes_encoded : 1.0);
    if (st->dedup_form)
        fprintf(out, "  dedup groups read as stored in the table (storage dedup)\n");
    for (uint32_t g = 0; g < st->num_groups; g++)
        fprintf(out, "  dedup group %s: %" PRIu64 " rows, %" PRIu64 " unique, factor %.2f\n",
                st->groups[g].name, st->groups[g].rows, st->groups[g].unique_rows,
                st->groups[g].factor);
    fprintf(out,
            "  busy: read %.3f s, filter+batch %.3f s, dedup %.3f s, transform %.3f s, "
            "encode %.3f s, send %.3f s; back-pressure waits %.3f s\n",
            st->read_ns / 1e9, st->filter_ns / 1e9, st->dedup_ns / 1e9, st->transform_ns / 1e9,
            st->encode_ns / 1e9, s->send_ns / 1e9, st->backpressure_ns / 1e9);
    if (st->cache_batches || st->cache_fallbacks || st->cache_files_written)
        fprintf(out,
                "  autocache: %" PRIu64 " batches (%" PRIu64 " samples) read from cache files in "
                "%.3f s, %" PRIu64 " fallbacks to computing, %" PRIu64 " files written (%" PRIu64
                " bytes) in %.3f s\n",
                st->cache_batches, st->cache_samples, st->cache_read_ns / 1e9, st->cache_fallbacks,
                st->cache_files_written, st->cache_bytes_written, st->cache_write_ns / 1e9);
    fprintf(out,
            "  sent %" PRIu64 " batches (%" PRIu64 " bytes), acknowledged %" PRIu64 " (%" PRIu64
            " samples), redelivered %" PRIu64 "\n",
            s->batches_sent, s->bytes_sent, s->batches_acked, s->samples_acked, s->redeliveries);
    fprintf(out, "  clients %" PRIu64 " (now %u), closed for bad frames %" PRIu64 "\n",
            s->clients_total, s->clients_now, s->bad_frames);
    if (s->auth_failures || s->evicted || s->refused || s->idle_closed || s->handshake_timeouts)
        fprintf(out,
                "  connections refused without the cluster secret %" PRIu64
                ", evicted at the cap %" PRIu64 ", refused at the cap %" PRIu64
                ", closed idle %" PRIu64 ", handshake timeouts %" PRIu64 "\n",
                s->auth_failures, s->evicted, s->refused, s->idle_closed, s->handshake_timeouts);
    if (st->shm_capacity)
        fprintf(out,
                "  shared memory: %" PRIu64 " of the batches sent (%" PRIu64
                " bytes) handed over in the heap of %" PRIu64 " bytes (%" PRIu64
                " of them ever used, at most %" PRIu64 " at once), %" PRIu64
                " connections attached, %" PRIu64 " frames made outside it (it was full)\n",
                s->shm_batches, s->shm_bytes, st->shm_capacity, st->shm_high_water, st->shm_peak,
                s->shm_attached, st->shm_fallbacks);
    if (st->records_read || st->records_bad)
        fprintf(out,
                "  kafka records %" PRIu64 ", bad %" PRIu64
                " (skipped, their offsets read); partition paused %" PRIu64
                " times (memory limit reached); fetcher woken %" PRIu64
                " times (a drained full queue)\n",
                st->records_read, st->records_bad, st->kafka_pauses, st->kafka_wakes);
    if (st->pq_row_groups)
        fprintf(out,
                "  parquet row groups %" PRIu64 ", skipped by statistics %" PRIu64 " (%" PRIu64
                " rows never read)\n",
                st->pq_row_groups, st->pq_row_groups_skipped, st->pq_rows_skipped);
    fprintf(out, "  memory limit %" PRIu64 " bytes, peak accounted %" PRIu64 "\n", st->memory_limit,
            st->memory_peak);
}

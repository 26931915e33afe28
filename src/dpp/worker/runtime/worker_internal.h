/* Private to the worker runtime: worker.c (lifecycle, the budget the
 * stages share), xform.c (the transform threads), stats.c (statistics),
 * reader.c (the reader thread) and the files beside them (lanes, fused
 * path, autocache). */
#ifndef SLUICE_DPP_WORKER_WORKER_INTERNAL_H
#define SLUICE_DPP_WORKER_WORKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "common/clock.h"
#include "common/lock.h"
#include "dpp/pipeline/plan.h"
#include "dpp/worker/batcher/batcher.h"
#include "dpp/worker/queue/queue.h"
#include "dpp/worker/runtime/worker.h"

/* A work queue message (sl_worker_msg_t.ptr): a batch on its way from the
 * batcher to the server, with the lease part of its origin. */
typedef struct dpp_cache_writer dpp_cache_writer_t;

typedef struct dpp_worker_batch {
    sl_batch_t *batch;
    sl_worker_lease_origin_t lease; /* handle NULL: a batch of no lease */
    /* The autocache (cache.c): the batch came from a cache file (dedup and
     * transforms are done already), or goes to cw once transformed (a
     * reference of it; NULL: none). */
    bool cached;
    dpp_cache_writer_t *cw;
} dpp_worker_batch_t;

struct sl_worker {
    const sl_pipeline_job_t *job;
    const sl_allocator_t *a;
    /* Frames are made with frame_a: in the shared-memory heap (shm, NULL:
     * none) while it has room, else with a (common/shm_heap.h) */
    sl_shm_heap_t *shm;
    const sl_allocator_t *frame_a;
    sl_worker_opts_t o;
    char worker_id[64];
    sl_wh_table_t *table;
    struct sl_store *pq_store; /* a Parquet dataset's in a store (its source owns it), or NULL */
    sl_wh_filter_t *filter;
    sl_wh_splits_t *splits;
    sl_pipeline_plan_t *plan;
    sl_worker_source_t source;
    sl_dedup_group_spec_t *groups;
    uint32_t num_groups;
    uint64_t job_hash;
    bool dedup_form; /* read storage-dedup groups as IKJTs: they are the job's groups */
    /* the table readers' maps (sl_pipeline_plan_map_at_decode; borrowed
     * from plan), or NULL */
    const sl_wh_value_map_t *decode_maps;
    /* a Kafka job: bytes librdkafka may prefetch, held in the budget */
    uint64_t kafka_prefetch;
    sl_worker_budget_t *budget;
    sl_wh_mem_t wh_mem; /* the budget as the readers' memory hook (read-ahead, column chunks) */
    /* what the hook holds now, the table readers' own bytes: the reader
     * thread's and the stripe lanes' (lanes.c) together */
    _Atomic uint64_t io_held;
    sl_worker_queue_t *work; /* reader -> transform threads: dpp_worker_batch_t * */
    sl_worker_server_t *server;
    pthread_t reader;
    pthread_t *xform;
    uint32_t threads, started_threads;
    bool reader_started;
    atomic_bool stopping;
    atomic_uint running;  /* transform threads still running */
    bool master_mode;     /* the source leases splits (it has lease hooks) */
    bool listen_fd_owned; /* opts.listen_fd not yet handed to the server */
    /* a plain copy's cost here (fused_transform_ns), measured by the
     * reader thread before the first unit with a cache file (the autocache
     * is the only reader of the figure: a worker without it never spends
     * the probe's 8 MiB of fresh pages); 0 until then */
    _Atomic uint64_t copy_ps_per_byte;
    bool copy_probed; /* the reader thread's alone */
    sl_mutex_t mu;    /* guards st and failure */
    sl_worker_stats_t st;
    sl_err_t fail_code;
    char fail_msg[SL_ERROR_MSG_MAX];
    bool stopped;
};

/* The monotonic clock, or this thread's CPU time (common/clock.h). */
static inline uint64_t now_ns(clockid_t clk)
{
    return clk == CLOCK_THREAD_CPUTIME_ID ? sl_clock_thread_cpu_ns() : sl_clock_ns();
}

/* Is rc, a failure of the work on a leased split, the split's (reported to
 * the master; the worker goes on) rather than the worker's (it fails)? By
 * where it came from, not by its code alone: from_read, reading the
 * split's bytes through the table reader (its store), makes every failure
 * the split's (a timeout after the store's retries, a server that ignored
 * a Range, a bad answer, as much as a corrupt stripe) but want of memory
 * and the worker's stop. Elsewhere (the data transformed, the worker's own
 * links: the master, its server) a timeout, a broken protocol or "again"
 * are the worker's as well. */
static inline bool dpp_worker_split_error(sl_err_t rc, bool from_read)
{
    if (rc == SL_OK || rc == SL_ERR_NOMEM || rc == SL_ERR_CLOSED) return false;
    return from_read || (rc != SL_ERR_PROTOCOL && rc != SL_ERR_TIMEOUT && rc != SL_ERR_AGAIN);
}

/* Stage times of one batch, for the statistics. */
typedef struct dpp_worker_times {
    uint64_t dedup_ns, transform_ns, encode_ns, backpressure_ns;
    bool fused;  /* made by the fused path */
    bool cached; /* read from an autocache file */
} dpp_worker_times_t;

/* worker.c */
/* Record the first failure, tell clients, and stop the pipeline (takes
 * w->mu, and after it the server's lock). */
void dpp_worker_fail(sl_worker_t *w, sl_err_t code, const char *msg) SL_EXCLUDES(w->mu);
/* A strict acquire of the budget for what (a stage holding held bytes);
 * its refusal as the worker's error, naming what did not fit. */
sl_err_t dpp_worker_budget_take(sl_worker_t *w, uint64_t bytes, uint64_t held, const char *what,
                                sl_error_t *err);
/* xform.c */
/* Free a work queue message that will not be processed (its bytes, its
 * batch, and its lease's share: the batch is retired). */
void dpp_worker_drop_msg(sl_worker_t *w, const sl_worker_msg_t *m);

/* cache.c: the autocache's files (docs/DESIGN.md "Autocache").
 * A writer of the cache file path for one unit of work: one reference
 * (the reader's) to begin with, one more per batch; the last unref
 * commits the file (atomically: written beside it, renamed) unless
 * something failed, and counts it in the worker's statistics. NULL when
 * out of memory (the split is then not cached). */
dpp_cache_writer_t *dpp_cache_writer_new(sl_worker_t *w, const char *path);
void dpp_cache_writer_ref(dpp_cache_writer_t *cw);
/* The batch (transformed, covering rows [from_row, to_row) of the split)
 * as the file's next stripe; a failure marks the writer failed. */
void dpp_cache_writer_add(dpp_cache_writer_t *cw, const sl_batch_t *batch, uint64_t from_row,
                          uint64_t to_row);
/* The file will not hold the whole todo (revoked, dropped, failed). */
void dpp_cache_writer_fail(dpp_cache_writer_t *cw, const char *why);
void dpp_cache_writer_unref(dpp_cache_writer_t *cw); /* NULL is fine */

/* Todo rows a cache file did not serve. */
typedef struct dpp_cache_rest {
    sl_dpp_row_range_t *r;
    uint32_t n, cap;
} dpp_cache_rest_t;
void dpp_cache_rest_free(sl_worker_t *w, dpp_cache_rest_t *rest);
/* Takes a batch (transformed) of the unit with the lease part of its
 * origin (NULL without a lease). */
typedef sl_err_t (*dpp_cache_emit_fn)(void *ctx, sl_batch_t *batch,
                                      const sl_worker_lease_origin_t *lease, sl_error_t *err);
/* Serve wk's todo from wk->cache_file: every stripe whose row range lies
 * inside a todo range goes to emit as a batch, in row order; *rest gets the
 * todo rows left to compute (all of them when the file is missing or
 * corrupt: a fallback, logged and counted, never an error). @return SL_OK,
 * or emit's error, SL_ERR_CLOSED (stopping), SL_ERR_NOMEM. */
sl_err_t dpp_cache_serve(sl_worker_t *w, const sl_worker_work_t *wk, dpp_cache_emit_fn emit,
                         void *ctx, dpp_cache_rest_t *rest, sl_error_t *err);
/* Before the first unit with a cache file (the reader thread's, once):
 * measure what a plain copy costs here into w->copy_ps_per_byte, which
 * the fused batches' share of the autocache's compute time leaves out
 * (dpp_worker_send). Only for a fused job with transforms; a worker whose
 * leases never carry a cache file never runs it. */
void dpp_cache_copy_probe(sl_worker_t *w);
/* The dedup figures of a batch served from a cache file, per job group
 * (ds[w->num_groups]): rows and unique rows of the batch's group of that
 * name, zero for a group the transforms consumed. */
void dpp_cache_group_stats(const sl_worker_t *w, const sl_batch_t *batch, sl_dedup_stats_t *ds);

/* xform.c */
/* A batch of lease (a handle; NULL: none) dropped before the server had
 * it: the lease's source forgets it. */
void dpp_worker_retire(sl_worker_t *w, void *lease);
/* Bytes of a decoded stripe's (or batch's) tensors, what the budget
 * holds for it: the reader thread, the stripe lanes and cache reads
 * measure alike. */
uint64_t dpp_batch_bytes(const sl_batch_t *b);
/* Close a table reader (NULL: nothing), its read-ahead figures added to
 * the worker's stats; any reader thread or lane. */
void dpp_worker_close_table_reader(sl_worker_t *w, sl_wh_reader_t *r);
/* Hand an encoded batch (it: frame, origin, lease...) to the server: of
 * the held budget bytes the caller accounted for it, it->accounted are
 * pinned until the batch is acknowledged and the rest released; the
 * statistics get it and its stage times tm (ds: its dedup groups' stats,
 * or NULL). @return the server's push error. */
sl_err_t dpp_worker_send(sl_worker_t *w, const sl_worker_server_item_t *it, uint64_t held,
                         const dpp_worker_times_t *tm, const sl_dedup_stats_t *ds, sl_error_t *err);

/* fused.c: the fused path (docs/WORKER.md, "The fused path"), on the
 * reader thread or a stripe lane. dpp_worker_fused_batch: make the frame
 * of direct batch d (sl_worker_batcher_set_direct) straight from the
 * stripe's rows with the plan's fused transforms f, and hand it to the
 * server (lease_made unless made says the caller called it already, then
 * dpp_worker_send). held: the budget bytes the caller holds (for a refused
 * acquire); *waited: time spent waiting for room or memory (the lengths
 * were checked against the values by the batcher: sl_worker_direct_t). On
 * an error before the send the batch is not retired (the caller's). */
sl_err_t dpp_worker_fused_batch(sl_worker_t *w, const sl_pipeline_fused_t *f,
                                const sl_worker_direct_t *d, uint64_t held, bool made,
                                uint64_t *waited, sl_error_t *err);
/* Its two steps: size d's frame (totals [F]: each
 * key's values; shape: the batch's sizes and names, borrowed from d), then
 * write the frame into buf (cap >= *size bytes, SL_ALIGN-aligned) with the
 * transforms f applied; *len gets the frame's length. */
sl_err_t dpp_worker_fused_plan(const sl_pipeline_fused_t *f, const sl_worker_direct_t *d,
                               uint64_t *totals, sl_batch_t *shape, size_t *size, sl_error_t *err);
sl_err_t dpp_worker_fused_fill(const sl_pipeline_fused_t *f, const sl_worker_direct_t *d,
                               const uint64_t *totals, const sl_batch_t *shape, void *buf,
                               size_t cap, size_t *len, sl_error_t *err);

/* The record CreateTimes of rows runs[0..nr) of ms, in the runs' order, as
 * BatchInfo.record_time_ms carries them (docs/PROTOCOL.md): the first
 * absolute, each later one the difference to the previous, so that times
 * close together cost a byte or two each as sint64 (wrapping for absurd
 * times, and unwrapping the same way). out: the runs' rows. Both paths
 * use it: a built batch's times are one run, a direct batch's its runs
 * of the stripe. */
void dpp_worker_record_deltas(const int64_t *ms, const sl_worker_row_run_t *runs, uint32_t nr,
                              int64_t *out);

/* lanes.c: the stripe lanes (docs/WORKER.md, "Threads"): n threads, each
 * reading and filtering one stripe at a time in its own table reader
 * (options ro), and making that stripe's fused batches once the reader
 * thread has batched it. All of it is driven from the reader thread. */
typedef struct dpp_lanes dpp_lanes_t;
typedef struct dpp_lane dpp_lane_t;
/* What a lane read: the stripe's rows (in the lane's decode buffers,
 * valid until dpp_lane_finish), the rows the filter kept (selected,
 * weights [kept]), its decoded bytes (held in the budget by the lane),
 * and the times spent reading, filtering and waiting for memory. */
typedef struct dpp_lane_stripe {
    const sl_wh_rows_t *rows;
    const uint32_t *selected;
    const float *weights;
    uint32_t kept;
    uint64_t bytes, read_ns, filter_ns, waited_ns;
    /* set also when the read failed: the failure came from the table
     * reader (the split's bytes; dpp_worker_split_error) */
    bool from_read;
} dpp_lane_stripe_t;
sl_err_t dpp_lanes_new(sl_worker_t *w, uint32_t n, const sl_wh_read_opts_t *ro, dpp_lanes_t **out,
                       sl_error_t *err);
/* Waits for the lanes at work, then joins them; stripes the reader never
 * finished are let go and their direct batches retired. p may be NULL. */
void dpp_lanes_destroy(dpp_lanes_t *p);
/* A free lane (of a table in a store: the next lane in turn, when it is
 * free); with wait, waits for it (NULL: stopping). */
dpp_lane_t *dpp_lanes_get(dpp_lanes_t *p, bool wait);
/* Drop the read-ahead of the free lanes' readers (a stripe fetched ahead
 * that no lane reads while the reader thread waits for room): on the
 * reader thread. p may be NULL. @return whether any held bytes. */
bool dpp_lanes_drop_ahead(dpp_lanes_t *p);
/* Lanes not free: reading, holding a stripe read, or making its batches. */
uint32_t dpp_lanes_busy(dpp_lanes_t *p);
/* Wait until fewer than busy lanes are busy (or the worker stops). */
void dpp_lanes_wait_fewer(dpp_lanes_t *p, uint32_t busy);
/* The largest stripe a lane has read (what the next one may take). */
uint64_t dpp_lanes_est(dpp_lanes_t *p);
/* Lane l (free) reads and filters stripe of split sp (borrowed until
 * dpp_lane_finish). base: the reader thread's reader, open on sp; a lane
 * not yet on sp's file opens a twin of it here (the footer is not fetched
 * again); a failure to is the stripe's, reported by dpp_lane_wait.
 * ahead_end: where the stripes of sp's file this worker reads on end
 * (dpp_reader_ahead_end), for the lane's read-ahead. */
void dpp_lane_read(dpp_lane_t *l, const sl_wh_split_t *sp, uint32_t stripe,
                   const sl_wh_reader_t *base, uint32_t ahead_end);
/* Wait until l has read its stripe or, with or_free, until a lane is free
 * (to be given the next stripe first). @return true when l has read it
 * (or the worker is stopping). */
bool dpp_lanes_wait(dpp_lanes_t *p, dpp_lane_t *l, bool or_free);
/* Wait for l's stripe. @return SL_OK (*out), the read's error, or
 * SL_ERR_CLOSED (stopping). */
sl_err_t dpp_lane_wait(dpp_lane_t *l, dpp_lane_stripe_t *out, sl_error_t *err);
/* Budget bytes l holds (its stripe). */
uint64_t dpp_lane_held(const dpp_lane_t *l);
/* The reader batches l's stripe now (l has read it): the lane makes each
 * direct batch as dpp_lane_add_direct hands it over, while the reader
 * cuts the next, until dpp_lane_finish. */
void dpp_lane_begin_fill(dpp_lane_t *l);
/* A direct batch of l's stripe (lease_made already called for it), made
 * by the lane with f (after dpp_lane_begin_fill). */
sl_err_t dpp_lane_add_direct(dpp_lane_t *l, const sl_pipeline_fused_t *f,
                             const sl_worker_direct_t *d, sl_error_t *err);
/* The reader is through with l's stripe: the lane makes the direct
 * batches left (drop: retires those not yet made instead), lets the
 * stripe go and is free again. */
void dpp_lane_finish(dpp_lane_t *l, bool drop);

/* reader.c: the reader thread (arg: the worker). */
void *dpp_worker_reader_main(void *arg);
/* xform.c: a transform thread (arg: the worker); the last one out
 * finishes the server unless the worker is stopping. */
void *dpp_worker_xform_main(void *arg);

#endif

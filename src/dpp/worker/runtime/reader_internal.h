/* Private to the reader thread (worker.h): reader.c (the reader's state,
 * its stripe loop on one thread, the units a source reads itself, the
 * autocache), reader_out.c (its batches out: to the transform threads, or
 * by the fused path to the server) and reader_lanes.c (the same loop over
 * the stripe lanes, lanes.c, with --threads > 1). */
#ifndef SLUICE_DPP_WORKER_READER_INTERNAL_H
#define SLUICE_DPP_WORKER_READER_INTERNAL_H

#include "dpp/worker/runtime/worker_internal.h"

/* The reader thread's state, reused from split to split (reader thread
 * only). */
typedef struct dpp_reader {
    sl_worker_t *w;
    sl_worker_batcher_t *b;
    sl_wh_reader_t *r; /* open on path */
    char path[1024];   /* "": reopen for the next split (a lease's split is freed after done) */
    sl_wh_read_opts_t ro;
    bool weigh;         /* a filter weighs rows: its weights go to the batcher */
    uint32_t *selected; /* [cap] the kept rows of the stripe */
    float *weights;     /* [cap] their weights */
    uint32_t cap;
    sl_dpp_row_range_t *empty; /* [num_empty] rows of the lease that went into no batch */
    uint32_t num_empty, empty_cap;
    int32_t stripe; /* being read (-1: none yet), for a failure report */
    /* the unit's failure came from the table reader, reading its split's
     * bytes (dpp_worker_split_error); cleared as a unit begins */
    bool from_read;
    /* Budget bytes held: the decoded stripe being batched, and the batcher
     * (the batch being filled, its reusable value vectors, a shuffle
     * window). est: what the next stripe is expected to take, the last
     * one's size. */
    uint64_t est, stripe_held, batcher_held;
    uint64_t handoff_ns; /* time spent waiting to hand batches over */
    /* The autocache (cache.c): the batches handed on now come from a cache
     * file, or go to cw once transformed (NULL: none). */
    bool cached;
    dpp_cache_writer_t *cw;
    /* The unit is a lease in the deterministic order: its batches are
     * cut from the split's first row, each told to the server's hold
     * (dpp_reader_to_transform), never made by the fused path or the
     * autocache. */
    bool ordered;
    uint64_t fused_ns; /* time spent making fused batches (their encode time) */
    /* The fused path (fused.c): the plan's transforms fused into the copy
     * from the stripe into the frame, decided once from the first stripe's
     * shape; NULL: every batch goes through the transform threads. */
    sl_pipeline_fused_t *fused;
    bool fused_decided;
    /* --threads N > 1: the stripe lanes (lanes.c) read and filter the
     * stripes and make their fused batches; lane is the one whose stripe
     * is being batched (NULL: the stripe is this thread's own). */
    dpp_lanes_t *lanes;
    dpp_lane_t *lane;
    bool have_epoch; /* a unit was begun: epoch is the batcher's epoch */
    uint32_t epoch;
} dpp_reader_t;

/* Where the batching of a unit's todo stands between its stripes. */
typedef struct dpp_unit_pos {
    const sl_worker_work_t *wk;
    sl_worker_lease_origin_t lease;
    bool in_range; /* a range of the batcher is open (under a lease) */
    uint32_t ti;   /* the todo range being read */
} dpp_unit_pos_t;

/* reader.c */
/* May the rows of wk still be read (a lease not revoked, or no lease)? */
bool dpp_reader_work_live(const sl_worker_t *w, const sl_worker_work_t *wk);
/* Open the file of split sp on rd->r (kept from split to split of a file). */
sl_err_t dpp_reader_open_split(dpp_reader_t *rd, const sl_wh_split_t *sp, sl_error_t *err);
/* Where the run of the stripes of wk's split's file this worker reads from
 * the split on ends, as far as the source knows the splits it hands out
 * next (peek), looked at until the run reaches want: what a reader may
 * fetch ahead from its first stripe of the split on
 * (sl_wh_reader_set_ahead_end). The split's first stripe when wk's todo
 * is not the whole split (it may skip stripes). */
uint32_t dpp_reader_ahead_end(const dpp_reader_t *rd, const sl_worker_work_t *wk, uint32_t want);
/* The split's reader is in an unknown state after a failure: reopen. */
void dpp_reader_reset(dpp_reader_t *rd);
/* Are wk's todo ranges ascending, disjoint, non-empty and inside its
 * split (source.h)? SL_ERR_PROTOCOL naming the range if not. */
sl_err_t dpp_reader_check_todo(const sl_worker_work_t *wk, sl_error_t *err);
/* The batching position at the start of wk (borrowed until its end). */
dpp_unit_pos_t dpp_reader_unit_pos(const sl_worker_work_t *wk);
/* Hand the kept todo rows of one stripe (split rows [row, end);
 * selected[kept] of its rows, with weights) to the batcher, in stripe
 * order: rows of a lease by todo range, the rows that made no batch into
 * rd->empty. */
sl_err_t dpp_reader_batch_stripe(dpp_reader_t *rd, dpp_unit_pos_t *u, const sl_wh_rows_t *rows,
                                 const uint32_t *selected, const float *weights, uint32_t kept,
                                 uint64_t row, uint64_t end, sl_error_t *err);
/* The unit's stripes are through, up to split row row. */
sl_err_t dpp_reader_unit_end(dpp_reader_t *rd, dpp_unit_pos_t *u, uint64_t row, sl_error_t *err);
/* A unit begins: the epoch before it ends first when it is another. */
sl_err_t dpp_reader_begin_unit(dpp_reader_t *rd, const sl_worker_work_t *wk, sl_error_t *err);
/* The unit is through: the source's done, counted. */
void dpp_reader_unit_done(dpp_reader_t *rd, const sl_worker_work_t *wk);
/* One unit on this thread alone, from its start to done. */
sl_err_t dpp_reader_serial_unit(dpp_reader_t *rd, const sl_worker_work_t *wk, sl_error_t *err);
/* A leased split that cannot be read (rc a split error; from_read: rc came
 * from the table reader, dpp_worker_split_error) is reported to the source
 * (done follows) instead of failing the worker. @return true when handled
 * so. */
bool dpp_reader_lease_failed(dpp_reader_t *rd, const sl_worker_work_t *wk, sl_err_t rc,
                             bool from_read, sl_error_t *err);

/* reader_out.c */
/* The batcher's output (sl_worker_batcher_new's emit, ctx rd; also the
 * autocache's served batches): the batch accounted in the budget (its
 * arena taken over from rd->batcher_held) and queued, with the lease part
 * of its origin, for the transform threads. Reader thread only. */
sl_err_t dpp_reader_to_transform(void *ctx, sl_batch_t *batch,
                                 const sl_worker_lease_origin_t *lease, sl_error_t *err);
/* Point the batcher's direct hook at the server when the fused path is on
 * and the unit neither writes a cache file nor is ordered; off otherwise. */
void dpp_reader_fused_direct(dpp_reader_t *rd);
/* Decide, once per job from the first stripe's rows, whether its batches
 * take the fused path (rd->fused). @return SL_ERR_NOMEM. */
sl_err_t dpp_reader_decide_fused(dpp_reader_t *rd, const sl_batch_t *rows, sl_error_t *err);

/* reader_lanes.c: the reader's loop over rd->lanes, to the source's end
 * (or a stop, or a failure: @return it). */
sl_err_t dpp_reader_run_lanes(dpp_reader_t *rd, sl_error_t *err);

#endif

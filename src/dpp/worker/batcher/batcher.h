/* The batcher: gathers the rows a filter kept from successive stripes into
 * batches of the job's batch size, across stripe and split boundaries (not
 * across epochs), optionally through a seeded row-shuffle window. The
 * worker's transform threads then deduplicate each batch handed out
 * (sl_worker_batcher_dedup, over src/dedup), not the batcher itself.
 *
 * Input rows are what the reader hands out (sl_wh_rows_t.batch): a plain KJT
 * of stride N, dense [N, D], labels [N, T], sample ids, and, when a table
 * stores dedup groups and is read in dedup form, one IKJT per group; the
 * shape (keys, groups, dense and label columns, weightedness) must stay the
 * same from stripe to stripe. A batch handed out holds the plain sparse
 * features in batch->sparse, the input's groups as IKJTs (each stripe's
 * unique rows copied once per batch, inverse indices remapped; none for
 * expanded input), dense, labels (plus the weight label column when asked
 * for) and sample ids (when asked for), all in the batch's own arena, and
 * its origin: the epoch, split, row of the split and per-split sequence
 * number of its first row. A shuffle window needs expanded input.
 *
 * Rows of a lease are batched by row range instead (begin_range,
 * end_range): each batch then covers one contiguous range of rows of one
 * split, the rows the filter dropped included, and is handed out with the
 * lease part of its origin (sl_worker_lease_origin_t, source.h).
 *
 * Memory: one batch being built (and with shuffle_window W, W rows plus
 * their per-key offsets); reused from batch to batch. Not thread-safe: one
 * batcher per pipeline. */
#ifndef SLUICE_DPP_WORKER_BATCHER_H
#define SLUICE_DPP_WORKER_BATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup/dedup.h"
#include "dpp/split.h"
#include "dpp/worker/source/source.h"
#include "sluice/err.h"
#include "sluice/tensor.h"

typedef struct sl_worker_batcher_opts {
    uint32_t batch_size;             /* rows per batch, > 0 */
    bool drop_last;                  /* drop an epoch's last, short batch */
    uint32_t shuffle_window;         /* 0: rows keep their order */
    uint64_t seed;                   /* shuffle seed (mixed with the epoch) */
    bool sample_ids;                 /* copy sample ids into batches */
    const char *weight_label;        /* append a label column of row weights; NULL: none (copied) */
    uint64_t job_id;                 /* copied into every batch's origin */
    const sl_allocator_t *allocator; /* NULL: default */
} sl_worker_batcher_opts_t;

/* Where the rows handed to sl_worker_batcher_add come from. */
typedef struct sl_worker_rows_origin {
    uint32_t epoch;
    uint64_t split_id;
    uint64_t row; /* row of the split where input row 0 lies */
    /* [rows->sparse.num_keys + 1]: where each key's values start, when the
     * source knows it (sl_wh_rows_t.key_offsets); NULL: summed here */
    const uint64_t *key_offsets;
    /* [num_keys][rows / SL_WH_BLOCK_ROWS + 1]: each key's values before
     * every block of rows (sl_wh_rows_t.block_offsets, lengths
     * non-negative), from key_offsets[k]; NULL: summed here. With them a
     * direct batch's values are found by summing fewer than
     * SL_WH_BLOCK_ROWS lengths a key at each end, not the batch's. */
    const uint64_t *block_offsets;
    /* 0: input row i is split row row + i. Else the input is one unit
     * covering split rows [row, end_row) whose rows are not numbered by
     * their place (a Kafka stripe: records sorted by session, offsets
     * with gaps): in a range, the unit must fit in the batch being built,
     * and a batch that fills with it ends at end_row, never inside it. */
    uint64_t end_row;
} sl_worker_rows_origin_t;

/* Receives each complete batch and always takes ownership of it (free with
 * sl_batch_destroy), also when it fails; a failure stops the batcher's call
 * with that error. lease: the lease part of the batch's origin, for a
 * batch of a range (borrowed for the call); NULL otherwise. */
typedef sl_err_t (*sl_worker_batcher_emit_fn)(void *ctx, sl_batch_t *batch,
                                              const sl_worker_lease_origin_t *lease,
                                              sl_error_t *err);

typedef struct sl_worker_batcher sl_worker_batcher_t;

/* Consecutive input rows [row, row + count). */
typedef struct sl_worker_row_run {
    uint32_t row, count;
} sl_worker_row_run_t;

/* A batch the batcher numbers but does not build (sl_worker_batcher_set_direct):
 * its num_rows rows are the runs of one sl_worker_batcher_add call's rows,
 * in order, with their record times where the rows carry them
 * (rows->record_ms, indexed by the runs as every other column). Everything
 * is borrowed for the call. */
typedef struct sl_worker_direct {
    const sl_batch_t *rows;      /* the input rows */
    const uint64_t *key_offsets; /* [rows->sparse.num_keys + 1] each key's values in rows */
    /* [num_keys]: where key k's values of row runs[0].row start, counted
     * from key_offsets[k], and how many values rows runs[0].row up to the
     * end of the last run hold (rows between runs included): the lengths
     * there are non-negative and within the key's values (checked) */
    const uint64_t *start, *span;
    const sl_worker_row_run_t *runs;
    uint32_t num_runs;
    uint32_t num_rows;                     /* sum of the runs' counts: the batch size */
    bool sample_ids;                       /* the batch carries sample ids (opts.sample_ids) */
    sl_batch_origin_t origin;              /* sequence number included */
    const sl_worker_lease_origin_t *lease; /* the lease part of the origin, or NULL */
} sl_worker_direct_t;

/* Makes and hands on a direct batch; its error stops the batcher's call,
 * as emit's does. */
typedef sl_err_t (*sl_worker_batcher_direct_fn)(void *ctx, const sl_worker_direct_t *d,
                                                sl_error_t *err);

typedef struct sl_worker_batcher_stats {
    uint64_t rows_in;        /* rows added */
    uint64_t rows_out;       /* rows in batches handed out */
    uint64_t rows_dropped;   /* by drop_last */
    uint64_t rows_discarded; /* by sl_worker_batcher_discard */
    uint64_t batches;
} sl_worker_batcher_stats_t;

/* Caller owns, free with sl_worker_batcher_destroy. @return SL_ERR_INVALID for
 * batch_size 0, SL_ERR_NOMEM. */
sl_err_t sl_worker_batcher_new(const sl_worker_batcher_opts_t *opts, sl_worker_batcher_emit_fn emit,
                               void *ctx, sl_worker_batcher_t **out, sl_error_t *err);
/* b may be NULL; rows not yet handed out are dropped. */
void sl_worker_batcher_destroy(sl_worker_batcher_t *b);

/* Add rows selected[0..n) of rows (indices ascending, as the filter gives
 * them; selected NULL: rows 0..n-1), with their weights (NULL: 1.0; only
 * used with a weight label). rows is borrowed for the call: everything
 * needed is copied. Complete batches go to emit before the call returns.
 * @return SL_ERR_INVALID when the shape differs from earlier rows or an index
 * is out of range; emit's error. */
sl_err_t sl_worker_batcher_add(sl_worker_batcher_t *b, const sl_batch_t *rows,
                               const uint32_t *selected, const float *weights, uint32_t n,
                               const sl_worker_rows_origin_t *origin, sl_error_t *err);

/* As sl_worker_batcher_add, for rows that a source built for the loop and
 * offers whole: *owned (non-NULL) is an arena holding every buffer of
 * rows, its names included. When the rows make the next batch on their
 * own - all of them (selected NULL, n = rows->batch_size = the batch
 * size), nothing held, no shuffle window, no dedup groups, no weight
 * label, every column named, and no direct hook to take them
 * (sl_worker_batcher_set_direct) - the batcher takes *owned (sets it to
 * NULL) and hands rows out as that batch without copying them: the
 * batch's buffers are the rows' (sample ids and record times dropped
 * where a built batch would have none), numbered as a built one. Else
 * the rows are copied as by sl_worker_batcher_add and *owned stays the
 * caller's. owned may be NULL. */
sl_err_t sl_worker_batcher_add_owned(sl_worker_batcher_t *b, const sl_batch_t *rows,
                                     const uint32_t *selected, const float *weights, uint32_t n,
                                     const sl_worker_rows_origin_t *origin, sl_arena_t **owned,
                                     sl_error_t *err);

/* End of an epoch: drain the shuffle window and hand out the short last
 * batch (or drop it with drop_last). Not inside a range. */
sl_err_t sl_worker_batcher_end_epoch(sl_worker_batcher_t *b, sl_error_t *err);

/* Rows of a lease, batched by row range (docs/WORKER.md, "Batches are row
 * ranges"). begin_range: the rows added from now on are rows of
 * lease->split, of epoch, from lease->from_row on (lease is copied;
 * to_row is ignored). No row may be held (end the previous range first),
 * and the shuffle window must be 0 or the batch size: a batch's rows are
 * shuffled among themselves, in an order drawn from (seed, epoch, split,
 * the batch's first row), so that it does not depend on which leases the
 * worker happened to read before. A full batch covers [from_row, its last row +
 * 1); the next one starts there. end_range: the range ends at to_row; the
 * batch being built covers [from_row, to_row) and goes out short, or is
 * dropped with drop_last. *empty gets the range's rows that went into no
 * batch (from_row == to_row: none): the tail after the last batch when
 * nothing was held, or the dropped batch's rows. @return SL_ERR_INVALID
 * when called out of turn; emit's error. */
sl_err_t sl_worker_batcher_begin_range(sl_worker_batcher_t *b,
                                       const sl_worker_lease_origin_t *lease, uint32_t epoch,
                                       sl_error_t *err);
sl_err_t sl_worker_batcher_end_range(sl_worker_batcher_t *b, uint64_t to_row,
                                     sl_dpp_row_range_t *empty, sl_error_t *err);

/* Drop every row held and not yet in a batch handed out (the batch being
 * built, the shuffle window), as if never added, and leave the range if
 * in one: a worker whose lease failed mid-way discards what it gathered
 * of it. The batcher stays usable for rows of the same shape. */
void sl_worker_batcher_discard(sl_worker_batcher_t *b);

/* Bytes the batcher holds now (for the worker's memory accounting). */
uint64_t sl_worker_batcher_footprint(const sl_worker_batcher_t *b);

/* From now on (fn NULL: no longer), a full batch whose rows all come from
 * one sl_worker_batcher_add call goes to fn instead of being built and
 * emitted - when nothing else is held (no partial batch, no shuffle
 * window) and the rows have no dedup groups or weight label (record times,
 * Kafka's, go with the rows: fn carries them with the batch):
 * the worker's fused path copies such rows from the stripe straight into
 * a frame. Batches straddling two calls (stripes), and the short last
 * batch, are built as before. The numbering (origin, sequence, range) is
 * the same either way. */
void sl_worker_batcher_set_direct(sl_worker_batcher_t *b, sl_worker_batcher_direct_fn fn,
                                  void *ctx);

void sl_worker_batcher_stats(const sl_worker_batcher_t *b, sl_worker_batcher_stats_t *out);

/* Deduplicate a batch the batcher handed out: its plain KJT (all sparse
 * features) is split into batch->sparse and one IKJT per group
 * (sl_dedup_batch), buffers in batch->arena. A batch that already holds
 * groups (dedup-form input) keeps them when they are exactly the given
 * groups' feature sets (renamed and ordered as groups), else is expanded
 * first. num_groups 0: expanded, no groups. stats (may be NULL) gets
 * num_groups entries. */
sl_err_t sl_worker_batcher_dedup(sl_dedup_t *d, sl_batch_t *batch,
                                 const sl_dedup_group_spec_t *groups, uint32_t num_groups,
                                 sl_dedup_stats_t *stats, sl_error_t *err);

/* The bytes of batch's wire encoding if every group were expanded to a
 * plain KJT (what the batch would cost without dedup), computed from the
 * encoded size and the groups without expanding them. */
uint64_t sl_worker_batcher_expanded_bytes(const sl_batch_t *batch, uint64_t encoded_bytes);

#endif

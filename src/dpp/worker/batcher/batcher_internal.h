/* Private to the batcher (batcher.c: its lifecycle, the shape of the rows,
 * rows added, epochs and ranges; batcher_build.c: one batch built from rows
 * in the expanded form; batcher_emit.c: batches numbered and handed out,
 * the shuffle window; batcher_groups.c: rows in dedup form, batch dedup).
 * Everything here runs on the thread that owns the batcher. */
#ifndef SLUICE_DPP_WORKER_BATCHER_INTERNAL_H
#define SLUICE_DPP_WORKER_BATCHER_INTERNAL_H

#include "dpp/worker/batcher/batcher.h"

typedef struct vec {
    uint8_t *p;
    size_t len, cap;
} vec_t;

/* One input dedup group's part of a batch being built: the unique rows met
 * so far (per key: lengths, ids, weights) and every row's inverse index. */
typedef struct gbuild {
    vec_t *lens, *vals, *wts; /* [F_g] */
    uint32_t U;
    int32_t *inverse; /* [cap] in the batch's arena */
} gbuild_t;

/* The shape of an input group (storage dedup, reader's dedup form). */
typedef struct gshape {
    char *name;
    uint32_t F;
    char **keys;
    bool weighted;
    int32_t *map; /* [map_cap]: stripe unique row -> batch unique row, or -1 */
    uint32_t map_cap;
    uint32_t *touched; /* map entries set since the last reset */
    uint32_t ntouched;
    uint64_t *uoff; /* [F * (U + 1)]: offsets of the stripe's unique rows per key */
    size_t uoff_cap;
} gshape_t;

typedef struct builder {
    uint32_t cap;                  /* rows */
    uint32_t n;                    /* rows gathered */
    bool track_rows;               /* per-row origins (the shuffle window) */
    sl_batch_t *cur;               /* being built; NULL when n == 0 */
    int32_t *lengths;              /* [F * cap] in cur's arena */
    float *dense;                  /* [cap * D] */
    float *labels;                 /* [cap * T_out] */
    int64_t *ids;                  /* [cap] or NULL */
    int64_t *times;                /* [cap] record CreateTimes (has_times) or NULL */
    uint64_t *row_split, *row_pos; /* [cap] when track_rows */
    vec_t *vals, *wts;             /* [F] */
    /* A batch filled by one gather (whole from one stripe's rows): its
     * values and weights go straight to their place in cur's arena (NULL:
     * gathered in vals / wts and concatenated at the end). */
    int64_t *direct_vals;
    float *direct_wts;
    uint64_t direct_total;
    gbuild_t *groups; /* [G] */
    sl_batch_origin_t first;
} builder_t;

typedef sl_worker_row_run_t run_t;

struct sl_worker_batcher {
    sl_worker_batcher_opts_t o;
    const sl_allocator_t *a;
    char *weight_label;
    sl_worker_batcher_emit_fn emit;
    void *ctx;
    sl_worker_batcher_direct_fn direct; /* NULL: every batch is built */
    void *direct_ctx;
    /* shape, fixed by the first rows */
    bool configured;
    uint32_t F, D, T, T_out;
    bool weighted, has_ids;
    bool has_times; /* rows carry record CreateTimes (sl_batch_t.record_ms: Kafka) */
    char **keys, **dense_names, **label_names;
    uint32_t G; /* input dedup groups (storage dedup read in dedup form) */
    gshape_t *gs;
    builder_t batch, window;
    /* per add / flush scratch */
    uint64_t *key_off; /* [F + 1] */
    /* key_off was summed from the add's lengths (sl_kjt_key_offsets, not
     * the origin's): a key's span over all the rows is the difference */
    bool off_summed;
    uint32_t *cur_row;   /* [F] */
    uint64_t *cur_off;   /* [F] */
    const uint64_t *blk; /* the add's origin->block_offsets, or NULL */
    uint64_t *key_at;    /* [F] a direct gather: where each key's values go */
    uint64_t *span;      /* [F] a direct batch's values per key (sl_worker_direct_t) */
    run_t *runs;         /* [max(batch, window) cap] */
    uint32_t *perm;      /* [window cap] */
    uint64_t *offs;      /* [F * (window cap + 1)] */
    /* epoch and sequence numbers */
    bool started;
    uint32_t epoch;
    uint64_t rng;
    bool seq_valid;
    uint64_t seq_split, seq_next;
    /* in a range (sl_worker_batcher_begin_range): range.from_row is the
     * first row of the batch being built, range_next one past the last
     * row added */
    bool ranged;
    sl_worker_lease_origin_t range;
    uint64_t range_next;
    sl_worker_batcher_stats_t stats;
};

/* Grow v to hold more bytes more (doubling). @return false when out of memory. */
bool dpp_vec_reserve(const sl_allocator_t *a, vec_t *v, size_t more);

/* batcher_build.c */
/* Free bd's batch and buffers (the vectors of F keys and G groups of shapes gs). */
void dpp_batcher_builder_free(const sl_allocator_t *a, builder_t *bd, uint32_t F, uint32_t G,
                              const gshape_t *gs);
/* bd's per-key and per-group vectors, once the shape is known. */
sl_err_t dpp_batcher_builder_setup(sl_worker_batcher_t *b, builder_t *bd);
sl_err_t dpp_batcher_builder_begin(sl_worker_batcher_t *b, builder_t *bd, sl_error_t *err);
sl_err_t dpp_batcher_gather_runs(sl_worker_batcher_t *b, builder_t *bd, const sl_batch_t *src,
                                 const run_t *runs, uint32_t nr, uint32_t m, const float *weights,
                                 uint32_t wbase, const sl_worker_rows_origin_t *origin,
                                 sl_error_t *err);
sl_err_t dpp_batcher_builder_finish(sl_worker_batcher_t *b, builder_t *bd, sl_batch_t **out,
                                    sl_error_t *err);
uint32_t dpp_batcher_builder_clear(sl_worker_batcher_t *b, builder_t *bd);

/* batcher_emit.c */
void dpp_batcher_range_reseed(sl_worker_batcher_t *b, uint64_t from);
sl_err_t dpp_batcher_emit_batch(sl_worker_batcher_t *b, uint64_t to_row, sl_error_t *err);
bool dpp_batcher_direct_ok(const sl_worker_batcher_t *b);
sl_err_t dpp_batcher_emit_direct(sl_worker_batcher_t *b, const sl_batch_t *rows, uint32_t nr,
                                 uint32_t m, const sl_worker_rows_origin_t *origin, uint64_t to_row,
                                 sl_error_t *err);
sl_err_t dpp_batcher_flush_window(sl_worker_batcher_t *b, uint64_t to_row, sl_error_t *err);
bool dpp_batcher_take_ok(const sl_worker_batcher_t *b, const sl_batch_t *rows, uint32_t n);
sl_err_t dpp_batcher_emit_taken(sl_worker_batcher_t *b, const sl_batch_t *rows, sl_arena_t *owned,
                                const sl_worker_rows_origin_t *origin, sl_error_t *err);

/* batcher_groups.c */
void dpp_batcher_reset_maps(sl_worker_batcher_t *b);
sl_err_t dpp_batcher_prepare_groups(sl_worker_batcher_t *b, const sl_batch_t *rows,
                                    sl_error_t *err);
sl_err_t dpp_batcher_gather_groups(sl_worker_batcher_t *b, builder_t *bd, const sl_batch_t *src,
                                   const run_t *runs, uint32_t nr, sl_error_t *err);
/* Set batch->groups from what bd gathered (buffers in batch's arena) and
 * forget the stripe's unique rows. @return false when out of memory. */
bool dpp_batcher_finish_groups(sl_worker_batcher_t *b, builder_t *bd, sl_batch_t *batch);

#endif

/* sluice tensors, in TorchRec's layout (see DESIGN.md "The tensors").
 *
 *  - sl_jt_t   JaggedTensor: one feature over `stride` rows.
 *  - sl_kjt_t  KeyedJaggedTensor: F keys over B rows; lengths are key-major
 *              (all of key 0's rows, then key 1's ...), values are int64 ids,
 *              weights optional float32 of the same length as values.
 *  - sl_ikjt_t InverseKeyedJaggedTensor: the features of one dedup group
 *              stored once per unique row (a KJT of stride U) plus inverse
 *              indices [B] mapping every batch row to its unique row.
 *  - sl_dense_t float32 matrix [rows, cols] (dense features, labels).
 *  - sl_batch_t one batch: a plain KJT, one IKJT per dedup group, dense
 *              features, labels and sample ids, all owned by one arena.
 *
 * Every buffer is SL_ALIGN-aligned and little-endian. No I/O, no threads. */
#ifndef SLUICE_TENSOR_H
#define SLUICE_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_jt {
    uint32_t stride;     /* rows */
    uint64_t num_values; /* sum(lengths) */
    int32_t *lengths;    /* [stride] */
    int64_t *values;     /* [num_values] */
    float *weights;      /* [num_values], or NULL */
} sl_jt_t;

typedef struct sl_kjt {
    uint32_t num_keys;   /* F */
    uint32_t stride;     /* B (U for the unique rows of an IKJT) */
    uint64_t num_values; /* sum(lengths) */
    const char **keys;   /* [F] distinct names */
    int32_t *lengths;    /* [F * stride], key-major */
    int64_t *values;     /* [num_values] */
    float *weights;      /* [num_values], or NULL when unweighted */
} sl_kjt_t;

typedef struct sl_ikjt {
    const char *name;    /* the dedup group's name */
    sl_kjt_t unique;     /* the group's features over U unique rows */
    uint32_t batch_size; /* B */
    int32_t *inverse;    /* [B], each in [0, U) */
} sl_ikjt_t;

typedef struct sl_dense {
    uint32_t rows;      /* B */
    uint32_t cols;      /* D (or T for labels) */
    const char **names; /* [cols] column names, or NULL */
    float *data;        /* [rows * cols], row-major */
} sl_dense_t;

/* Where a batch came from, so that delivery can be traced back. */
typedef struct sl_batch_origin {
    uint64_t job_id;
    uint32_t epoch;
    uint64_t split_id;
    uint64_t first_row; /* row of the split where this batch starts */
    uint64_t sequence;  /* batch number within the split */
} sl_batch_origin_t;

typedef struct sl_batch {
    sl_arena_t *arena;   /* owns every buffer below (and the names) */
    uint32_t batch_size; /* B */
    sl_kjt_t sparse;     /* features in no dedup group, stride B */
    uint32_t num_groups;
    sl_ikjt_t *groups;   /* [num_groups] */
    sl_dense_t dense;    /* [B, D]; D may be 0 */
    sl_dense_t labels;   /* [B, T]; T may be 0 */
    int64_t *sample_ids; /* [B], or NULL */
    sl_batch_origin_t origin;
    /* Called once by sl_batch_destroy, for buffers the arena does not own
     * (a decoded batch borrows the received frame). May be NULL. */
    void (*release)(void *ctx);
    void *release_ctx;
    /* Kafka batches: each sample's record CreateTime in ms since the Unix
     * epoch (-1: unknown), in sample order, owned by the arena (NULL for
     * table batches). Not in the wire encoding: BatchInfo.record_time_ms
     * carries it to the trainer client, which sets it on the batches it
     * hands out (docs/PROTOCOL.md). */
    int64_t *record_ms;
    /* A batch of a job in the deterministic order: 1 + its index g in the
     * epoch's global sequence (rank r of R gets g = r, r + R, ...), or 0
     * (the dynamic order, or a batch not received from a worker). After a
     * resume g counts the resumed job's sequence, the original one less the
     * batches handed out before the checkpoint (docs/DESIGN.md, "A
     * deterministic order", *Resume*). Not in the wire encoding:
     * BatchInfo.order_g_plus_one carries it to the trainer client, which
     * sets it on the batches it hands out (docs/PROTOCOL.md). */
    uint64_t order_g_plus_one;
} sl_batch_t;

/* ---- JaggedTensor / KJT ---- */

/* Allocate a KJT's buffers from arena: keys copied, lengths [num_keys *
 * stride] zeroed, values [num_values], weights when weighted. Sizes are
 * checked for overflow. @return SL_OK, SL_ERR_NOMEM or SL_ERR_INVALID. */
sl_err_t sl_kjt_init(sl_kjt_t *kjt, sl_arena_t *arena, uint32_t num_keys, const char *const *keys,
                     uint32_t stride, uint64_t num_values, bool weighted);
/* sl_kjt_init with the lengths left unset, for a caller that writes every
 * one of them before the KJT is read (the Parquet conversion writes a
 * stripe's lengths row by row: zeroing them first was a memset of 4 bytes
 * a key and row for nothing). */
sl_err_t sl_kjt_init_unset(sl_kjt_t *kjt, sl_arena_t *arena, uint32_t num_keys,
                           const char *const *keys, uint32_t stride, uint64_t num_values,
                           bool weighted);

/* Check every KJT invariant: stride*num_keys fits, lengths >= 0,
 * sum(lengths) == num_values, keys non-NULL and distinct, buffers present
 * where sizes are non-zero. The message names the violated invariant, the key
 * and the row. */
sl_err_t sl_kjt_validate(const sl_kjt_t *kjt, sl_error_t *err);

/* Fill offsets[num_keys*stride + 1] (exclusive prefix sum of lengths). */
void sl_kjt_offsets(const sl_kjt_t *kjt, int64_t *offsets);

/* Fill key_offsets[num_keys + 1]: where each key's values start. Lengths
 * must be non-negative (sl_kjt_validate); a negative one gives offsets that
 * a later bounds check rejects, never a wrapped small one. */
void sl_kjt_key_offsets(const sl_kjt_t *kjt, uint64_t *key_offsets);

/* Sum of n lengths, at memory speed (the per-key and per-batch sums of the
 * hot path); *negative tells whether any was negative, in which case the
 * sum is meaningless. */
uint64_t sl_lengths_sum(const int32_t *lengths, uint64_t n, bool *negative);

/* @return the index of key in kjt, or -1. */
int sl_kjt_find_key(const sl_kjt_t *kjt, const char *key);

/* A view of key k as a JaggedTensor (borrowed from kjt). key_offsets as
 * filled by sl_kjt_key_offsets. */
sl_jt_t sl_kjt_key_view(const sl_kjt_t *kjt, const uint64_t *key_offsets, uint32_t k);

/* @return true when a and b have the same keys, stride, lengths, values and
 * weights (bit for bit). */
bool sl_kjt_equal(const sl_kjt_t *a, const sl_kjt_t *b);

/* Bytes of the buffers (lengths + values + weights). */
uint64_t sl_kjt_bytes(const sl_kjt_t *kjt);

/* ---- IKJT ---- */

/* Check the unique KJT and that every inverse index is in [0, U) and that
 * U <= B. */
sl_err_t sl_ikjt_validate(const sl_ikjt_t *ikjt, sl_error_t *err);

/* Expand ikjt into the KJT of stride B it stands for: row b of the output is
 * unique row inverse[b]. Buffers come from arena. */
sl_err_t sl_ikjt_expand(const sl_ikjt_t *ikjt, sl_arena_t *arena, sl_kjt_t *out, sl_error_t *err);

/* Bytes of the IKJT (unique KJT + inverse indices). */
uint64_t sl_ikjt_bytes(const sl_ikjt_t *ikjt);

/* ---- dense ---- */

sl_err_t sl_dense_init(sl_dense_t *d, sl_arena_t *arena, uint32_t rows, uint32_t cols,
                       const char *const *names);
/* sl_dense_init with the values left unset, for a caller that writes
 * every one before they are read (the Parquet conversion, as
 * sl_kjt_init_unset). */
sl_err_t sl_dense_init_unset(sl_dense_t *d, sl_arena_t *arena, uint32_t rows, uint32_t cols,
                             const char *const *names);

/* ---- batch ---- */

/* An empty batch with its own arena from a (NULL: default). Caller owns, free
 * with sl_batch_destroy. @return NULL when out of memory. */
sl_batch_t *sl_batch_new(const sl_allocator_t *a);

/* Validate every tensor of the batch and that they all have B rows, and that
 * no key appears twice across the KJT and the groups. */
sl_err_t sl_batch_validate(const sl_batch_t *batch, sl_error_t *err);

/* Expand every group into one KJT of stride B holding the plain KJT's keys
 * followed by each group's keys, in group order; the identity
 * expand(dedup(x)) == x is checked against this. Buffers from arena. */
sl_err_t sl_batch_expand(const sl_batch_t *batch, sl_arena_t *arena, sl_kjt_t *out,
                         sl_error_t *err);

/* Frees the arena and calls release; batch may be NULL. */
void sl_batch_destroy(sl_batch_t *batch);

#ifdef __cplusplus
}
#endif
#endif

/* Wire encoding of a whole sl_batch_t: a fixed 32-byte prefix, a protobuf
 * BatchHeader (proto/sluice.proto) describing every tensor, then the raw
 * buffers, each at a 64-byte aligned offset from the start of the frame, so a
 * receiver can hand them to numpy/PyTorch without copying element by element.
 * The layout is specified, versioned, in docs/WIRE.md.
 *
 * Decoding is defensive: every size and offset from the frame is checked
 * before use, and the decoded tensors are validated, so a malformed frame is
 * rejected with a message naming the field, never read out of bounds. */
#ifndef SLUICE_WIRE_H
#define SLUICE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SL_WIRE_MAGIC "SLCB"
#define SL_WIRE_VERSION 1
#define SL_WIRE_PREFIX_BYTES 32

/* Limits a decoder enforces on frames from outside. */
typedef struct sl_wire_limits {
    uint64_t max_frame_bytes; /* default 1 GiB */
    uint32_t max_batch_size;  /* default 1 << 20 rows */
    uint32_t max_keys;        /* default 65536 keys per KJT */
    uint32_t max_groups;      /* default 4096 */
} sl_wire_limits_t;

/* The defaults above. */
sl_wire_limits_t sl_wire_limits_default(void);

/* @return the exact frame size sl_wire_encode_into needs for batch, or 0 when
 * the batch cannot be encoded (sizes overflow). */
size_t sl_wire_encoded_size(const sl_batch_t *batch);

/* Encode batch into buf (SL_ALIGN-aligned, cap bytes). *len gets the frame
 * size. @return SL_ERR_TOO_LARGE when cap is too small, SL_ERR_INVALID when
 * the batch breaks an invariant. */
sl_err_t sl_wire_encode_into(const sl_batch_t *batch, void *buf, size_t cap, size_t *len,
                             sl_error_t *err);

/* Encode batch into a frame allocated from a (NULL: default). Caller owns
 * *frame, free with sl_free(a, *frame, *len). */
sl_err_t sl_wire_encode(const sl_batch_t *batch, const sl_allocator_t *a, void **frame, size_t *len,
                        sl_error_t *err);

/* sl_wire_encode for a caller that already has size = sl_wire_encoded_size(batch)
 * (to account the frame before it is made): the batch is not laid out once
 * more to find it. */
sl_err_t sl_wire_encode_sized(const sl_batch_t *batch, size_t size, const sl_allocator_t *a,
                              void **frame, size_t *len, sl_error_t *err);

/* Lay out a frame for a plain batch (no dedup groups) without its data:
 * shape gives the sizes, names and origin (its buffer pointers are not
 * read; sparse.weights non-NULL asks for a weights buffer); buf (SL_ALIGN-aligned, cap >=
 * sl_wire_encoded_size(shape) bytes) gets the prefix and the header, every byte outside the
 * tensors' buffers zeroed, and *view a batch whose tensors point at their places in buf (names
 * borrowed from shape, no arena: never sl_batch_destroy it). The caller then writes the tensors
 * straight into the frame through view - lengths, values, dense, labels, sample ids - instead of
 * building a batch and copying it (the worker's fused path); the frame is what sl_wire_encode makes
 * of a batch holding the same tensors, and is only valid once lengths sum to shape's num_values.
 * *len gets the frame size.
 * @return SL_ERR_TOO_LARGE when cap is too small, SL_ERR_UNSUPPORTED for
 * groups, SL_ERR_INVALID for a shape that breaks an invariant. */
sl_err_t sl_wire_encode_layout(const sl_batch_t *shape, void *buf, size_t cap, size_t *len,
                               sl_batch_t *view, sl_error_t *err);

/* Read the frame length from the first SL_WIRE_PREFIX_BYTES of a frame (for
 * framing a stream). @return SL_ERR_CORRUPT / SL_ERR_VERSION /
 * SL_ERR_TOO_LARGE for a bad prefix. */
sl_err_t sl_wire_peek_length(const void *prefix, size_t len, const sl_wire_limits_t *limits,
                             uint64_t *frame_len, sl_error_t *err);

/* Decode frame (len bytes, must be SL_ALIGN-aligned) into a new batch whose
 * tensors point into frame: the frame is borrowed and must outlive the batch
 * (set batch->release to free it with the batch). limits may be NULL for the
 * defaults. Caller owns *out, free with sl_batch_destroy. */
sl_err_t sl_wire_decode(const void *frame, size_t len, const sl_wire_limits_t *limits,
                        const sl_allocator_t *a, sl_batch_t **out, sl_error_t *err);

#ifdef __cplusplus
}
#endif
#endif

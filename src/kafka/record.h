/* The Kafka record layout of sluice samples, version 1 (docs/KAFKA.md,
 * "Record layout, version 1"): what `sluice produce` writes and the
 * worker's Kafka source reads (record_decode.h decodes it).
 *
 *   value      one sluice.Sample (proto/sluice.proto) as protobuf bytes
 *   header     SL_KAFKA_FORMAT_HEADER = "sluice-format", whose value is
 *              the ASCII text of the version ("1"), no terminator
 *   key        the session id, 8 bytes big-endian (so the producer's
 *              partitioner keeps a session in one partition, in order)
 *   timestamp  CreateTime, set by the producer when it produces the record
 *
 * A change of meaning takes a new version: the header says which layout a
 * record follows, so a reader can refuse one it does not know.
 *
 * This header holds the layout's constants and the encoder: a warehouse
 * row (sl_wh_row_t, what the importers and the generator hand out, or one
 * row of a table stripe) into a Sample's bytes. */
#ifndef SLUICE_KAFKA_RECORD_H
#define SLUICE_KAFKA_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/warehouse.h"

#define SL_KAFKA_FORMAT_HEADER "sluice-format" /* the record header naming the layout */
#define SL_KAFKA_FORMAT_VERSION 1
#define SL_KAFKA_FORMAT_VERSION_TEXT "1" /* the header's value: the version in ASCII */
#define SL_KAFKA_KEY_BYTES 8             /* the key: the session id, big-endian */

/* The record key of session_id: 8 bytes, most significant first (the same
 * bytes a Java producer's LongSerializer writes). */
static inline void sl_kafka_key_put(uint8_t key[SL_KAFKA_KEY_BYTES], uint64_t session_id)
{
    for (int i = SL_KAFKA_KEY_BYTES - 1; i >= 0; i--) {
        key[i] = (uint8_t)(session_id & 0xff);
        session_id >>= 8;
    }
}

/* The session id of an 8-byte key. */
static inline uint64_t sl_kafka_key_get(const uint8_t key[SL_KAFKA_KEY_BYTES])
{
    uint64_t v = 0;
    for (int i = 0; i < SL_KAFKA_KEY_BYTES; i++)
        v = v << 8 | key[i];
    return v;
}

/* Encodes rows of one schema as Samples: labels by their schema names (all
 * of them, a label is never absent), dense features by name (a missing
 * value, NaN, is left out), sparse and weighted features as id lists by
 * name (weights only for weighted features; an empty list is kept, so a
 * reader sees the feature), sample id, session id and timestamp (seconds).
 * Holds reusable scratch: encoding allocates only while a row is larger
 * than every row before it. One thread at a time. */
typedef struct sl_kafka_encoder sl_kafka_encoder_t;

/* An encoder for rows of schema (borrowed: it must outlive the encoder;
 * its names are borrowed too). a NULL: the default allocator. Caller owns
 * *out, free with sl_kafka_encoder_destroy. @return SL_ERR_NOMEM. */
sl_err_t sl_kafka_encoder_new(const sl_wh_schema_t *schema, const sl_allocator_t *a,
                              sl_kafka_encoder_t **out, sl_error_t *err);

/* e may be NULL. */
void sl_kafka_encoder_destroy(sl_kafka_encoder_t *e);

/* Encode row (arrays indexed as sl_wh_row_t says, by the encoder's schema)
 * as a Sample. *value is borrowed from e until the next encode or destroy.
 * @return SL_ERR_INVALID for a negative list length; SL_ERR_NOMEM. */
sl_err_t sl_kafka_encode_row(sl_kafka_encoder_t *e, const sl_wh_row_t *row, const uint8_t **value,
                             size_t *len, sl_error_t *err);

/* Row i of column-form rows (a table stripe read with every feature, not
 * in dedup form) as an sl_wh_row_t of the encoder's schema, matching
 * columns by name; its arrays are borrowed from e and rows until the next
 * call. Rows of one stripe are cheapest in order (i, i + 1, ...): each
 * then costs its own values only. @return SL_ERR_INVALID when rows lacks a
 * feature or label of the schema, or i is out of range; SL_ERR_NOMEM. */
sl_err_t sl_kafka_encoder_row_at(sl_kafka_encoder_t *e, const sl_wh_rows_t *rows, uint32_t i,
                                 sl_wh_row_t *row, sl_error_t *err);

#endif

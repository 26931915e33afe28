/* Decoding Kafka records of sluice's record layout, version 1
 * (docs/KAFKA.md, "Record layout, version 1") into rows in column form:
 * what the worker's reader takes from a table stripe (sl_wh_rows_t), so
 * that filters, the batcher, dedup and transforms treat records exactly
 * as table rows. The encoder (record.h, record_encode.c) writes the
 * layout; this file only reads it.
 *
 * A builder collects decoded records one at a time (sl_kafka_rows_add); a
 * record that is bad (no or a repeated sluice-format header, another
 * version, a value that is not a sluice.Sample, features that do not fit
 * the schema) is refused with SL_ERR_CORRUPT and a message saying why,
 * and leaves the builder as it was. sl_kafka_rows_take hands the rows
 * collected so far out as columns, stably sorted by session id (so that
 * dedup finds a session's rows as a run, as in a session-clustered table
 * stripe), and starts over. Memory: the rows collected plus one taken
 * stripe, both reused. One thread at a time. */
#ifndef SLUICE_KAFKA_RECORD_DECODE_H
#define SLUICE_KAFKA_RECORD_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "kafka/record.h" /* the layout's constants, shared with the encoder */
#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/warehouse.h"

/* One record as the consumer saw it (every pointer borrowed for the call). */
typedef struct sl_kafka_record {
    const void *value; /* the record's value; NULL with value_len 0: none */
    size_t value_len;
    const void *format; /* the value of the sluice-format header; NULL: none */
    size_t format_len;
    uint32_t format_headers; /* how many sluice-format headers the record has */
    int64_t offset;
    int64_t create_ms; /* the record's CreateTime (ms since the epoch); -1: unknown */
} sl_kafka_record_t;

/* A taken stripe: rows in column form plus, per row (in the rows' order),
 * its offset and CreateTime. Borrowed from the builder until the next take
 * or its destruction; rows.batch.arena is NULL (never sl_batch_destroy it),
 * rows.file is NULL (the caller names the partition). */
typedef struct sl_kafka_stripe {
    sl_wh_rows_t rows;
    const int64_t *offsets;   /* [rows.batch.batch_size] */
    const int64_t *create_ms; /* [rows.batch.batch_size] */
} sl_kafka_stripe_t;

typedef struct sl_kafka_rows sl_kafka_rows_t;

/* A builder for records of schema (copied). features[num_features]: the
 * projection, in output order as sl_wh_read_opts_t.features (dense ones
 * fill batch.dense, the others batch.sparse); NULL: every feature in
 * schema order. A record is checked against the whole schema either way.
 * Caller owns *out, free with sl_kafka_rows_destroy. @return
 * SL_ERR_NOT_FOUND / SL_ERR_INVALID for a feature the schema lacks or
 * named twice, SL_ERR_NOMEM. */
sl_err_t sl_kafka_rows_new(const sl_wh_schema_t *schema, const char *const *features,
                           uint32_t num_features, const sl_allocator_t *a, sl_kafka_rows_t **out,
                           sl_error_t *err);

/* Decode rec and append its row. @return SL_ERR_CORRUPT for a bad record
 * (err: why, naming the offset; nothing appended) or SL_ERR_NOMEM. */
sl_err_t sl_kafka_rows_add(sl_kafka_rows_t *r, const sl_kafka_record_t *rec, sl_error_t *err);

/* Append row, already decoded (a JSON record: record_json.h), whose
 * arrays are indexed by the builder's schema (sl_wh_row_t's rules); only
 * the projected features are kept. @return SL_ERR_NOMEM. */
sl_err_t sl_kafka_rows_add_row(sl_kafka_rows_t *r, const sl_wh_row_t *row, int64_t offset,
                               int64_t create_ms, sl_error_t *err);

/* Rows collected since the last take. */
uint32_t sl_kafka_rows_count(const sl_kafka_rows_t *r);

/* The rows collected, as columns stably sorted by session id, into *out;
 * the builder then holds none. @return SL_ERR_NOMEM. */
sl_err_t sl_kafka_rows_take(sl_kafka_rows_t *r, sl_kafka_stripe_t *out, sl_error_t *err);

/* r may be NULL. */
void sl_kafka_rows_destroy(sl_kafka_rows_t *r);

#endif

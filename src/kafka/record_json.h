/* Kafka records whose value is a JSON object (`source.kafka.format:
 * "json"`, docs/KAFKA.md "JSON records"): the object's keys are columns of
 * the column mapping (`source.kafka.columns`, warehouse/column_map.h),
 * which also gives the job's schema. No header is needed and the key is
 * ignored. A value that is not a JSON object, or a value the mapping's
 * slot cannot take, makes the record bad (SL_ERR_CORRUPT with why, naming
 * the offset), exactly as a protobuf record that does not fit. One thread
 * at a time. */
#ifndef SLUICE_KAFKA_RECORD_JSON_H
#define SLUICE_KAFKA_RECORD_JSON_H

#include "kafka/record_decode.h"
#include "warehouse/column_map.h"

typedef struct sl_kafka_json sl_kafka_json_t;

/* A decoder for the mapping map (borrowed: it must outlive the decoder).
 * Caller owns *out, free with sl_kafka_json_destroy. @return SL_ERR_NOMEM. */
sl_err_t sl_kafka_json_new(const sl_wh_colmap_resolved_t *map, const sl_allocator_t *a,
                           sl_kafka_json_t **out, sl_error_t *err);

/* j may be NULL. */
void sl_kafka_json_destroy(sl_kafka_json_t *j);

/* Decode rec's value and append its row to r (built for map->schema).
 * A missing sample id, session id or timestamp is 0 (as in a Sample).
 * @return SL_ERR_CORRUPT for a bad record (nothing appended), SL_ERR_NOMEM. */
sl_err_t sl_kafka_rows_add_json(sl_kafka_rows_t *r, sl_kafka_json_t *j,
                                const sl_kafka_record_t *rec, sl_error_t *err);

/* The JSON object of row (arrays indexed by schema, sl_wh_row_t's rules):
 * what `sluice produce --format json` writes. Keys: "sample_id",
 * "session_id", "timestamp" (integers), each label and dense feature by
 * name (a number; a missing dense value is left out, a NaN label is null),
 * each sparse feature by name (an array of ids), each weighted feature by
 * name (an array of [id, weight] pairs). The mapping that reads it back is
 * sl_kafka_json_columns(schema). *buf (capacity *cap, grown with a) is
 * reused from call to call; *len gets the bytes. @return SL_ERR_NOMEM. */
sl_err_t sl_kafka_json_encode(const sl_wh_schema_t *schema, const sl_wh_row_t *row,
                              const sl_allocator_t *a, char **buf, size_t *cap, size_t *len,
                              sl_error_t *err);

/* The column mapping of sl_kafka_json_encode's objects for schema ("infer":
 * false). Caller owns (json_decref); NULL when out of memory. */
json_t *sl_kafka_json_columns(const sl_wh_schema_t *schema);

#endif

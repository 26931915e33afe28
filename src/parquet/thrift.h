/* A reader of the Thrift compact protocol, the encoding of Parquet's
 * footer (FileMetaData) and page headers (parquet.thrift). A cursor over a
 * buffer: the struct decoders in meta.c and column.c ask it for field
 * headers and values and skip the fields they do not know. It never reads
 * past the buffer: every length and count is checked against the bytes
 * left before it is used, and nesting is bounded (SL_PQ_THRIFT_MAX_DEPTH),
 * so malformed input is an error (truncated, bad type, too deep), never a
 * crash. Errors name the struct and field being read. */
#ifndef SLUICE_PARQUET_THRIFT_H
#define SLUICE_PARQUET_THRIFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/err.h"

/* Compact protocol type codes (field headers and collection headers). */
enum {
    SL_PQ_T_STOP = 0,
    SL_PQ_T_TRUE = 1, /* a bool field whose value is in its header; in a list: a bool byte */
    SL_PQ_T_FALSE = 2,
    SL_PQ_T_BYTE = 3,
    SL_PQ_T_I16 = 4,
    SL_PQ_T_I32 = 5,
    SL_PQ_T_I64 = 6,
    SL_PQ_T_DOUBLE = 7,
    SL_PQ_T_BINARY = 8,
    SL_PQ_T_LIST = 9,
    SL_PQ_T_SET = 10,
    SL_PQ_T_MAP = 11,
    SL_PQ_T_STRUCT = 12
};

/* Structs nested deeper than this are refused (parquet.thrift needs 6). */
#define SL_PQ_THRIFT_MAX_DEPTH 32

typedef struct sl_pq_thrift {
    const uint8_t *p, *end;
    int depth;
    const char *where; /* the struct being read, for messages ("PageHeader") */
    sl_error_t *err;
} sl_pq_thrift_t;

void sl_pq_thrift_init(sl_pq_thrift_t *t, const void *buf, size_t len, sl_error_t *err);

/* Enter a struct (depth checked; type must be SL_PQ_T_STRUCT when the
 * struct is a field or element, pass SL_PQ_T_STRUCT for the outermost).
 * @return SL_OK or SL_ERR_CORRUPT. */
sl_err_t sl_pq_thrift_struct_begin(sl_pq_thrift_t *t, uint8_t type, const char *name);
void sl_pq_thrift_struct_end(sl_pq_thrift_t *t, const char *outer);

/* The next field header of the current struct: *id and *type; *type is
 * SL_PQ_T_STOP at its end. *last is the previous field id (0 at the
 * start), updated. */
sl_err_t sl_pq_thrift_field(sl_pq_thrift_t *t, int16_t *last, int16_t *id, uint8_t *type);

/* Values of a field (or element) of the given type; an integer of a
 * narrower wire type is accepted and widened; another type is an error
 * naming field id. */
sl_err_t sl_pq_thrift_i64(sl_pq_thrift_t *t, uint8_t type, int16_t id, int64_t *v);
sl_err_t sl_pq_thrift_i32(sl_pq_thrift_t *t, uint8_t type, int16_t id, int32_t *v);
sl_err_t sl_pq_thrift_bool(sl_pq_thrift_t *t, uint8_t type, int16_t id, bool *v);
/* *p points into the buffer, *len bytes (checked to be there). */
sl_err_t sl_pq_thrift_binary(sl_pq_thrift_t *t, uint8_t type, int16_t id, const uint8_t **p,
                             uint32_t *len);
/* A list (or set) header: element type and count; the count is checked
 * against the bytes left (every element takes at least one byte, or is a
 * struct which takes at least its stop byte). */
sl_err_t sl_pq_thrift_list(sl_pq_thrift_t *t, uint8_t type, int16_t id, uint8_t *elem, uint32_t *n);
/* Skip a value of the given type (bounded depth). */
sl_err_t sl_pq_thrift_skip(sl_pq_thrift_t *t, uint8_t type);

/* Varint and zigzag helpers, also used by DELTA_BINARY_PACKED. @return
 * false when the buffer ends first or the varint is longer than 10 bytes. */
bool sl_pq_uvarint(const uint8_t **p, const uint8_t *end, uint64_t *v);
static inline int64_t sl_pq_unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

#endif

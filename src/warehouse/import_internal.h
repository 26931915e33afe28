/* Private to the importers (import*.c) and the generator (gen.c): the row
 * scratch the line parsers fill, and small parsing helpers. */
#ifndef SLUICE_WH_IMPORT_INTERNAL_H
#define SLUICE_WH_IMPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "warehouse/column_map.h"
#include "warehouse/import.h"

#define CRITEO_DENSE 13
#define CRITEO_SPARSE 26
#define CRITEO_FIELDS (1 + CRITEO_DENSE + CRITEO_SPARSE)

/* One row's worth of arrays, reused from row to row: what sl_wh_row_t
 * points into after a parse. */
struct sl_wh_row_buf {
    const sl_allocator_t *a;
    sl_wh_schema_t *schema; /* a copy, so the buffer outlives the caller's */
    uint32_t T, D, S;       /* labels, dense, sparse slots */
    float *labels;          /* [T] */
    float *dense;           /* [D] */
    sl_wh_idlist_t *lists;  /* [S] */
    int64_t **ids;          /* [S] growable id arrays */
    float **weights;        /* [S] growable weight arrays (weighted slots) */
    uint32_t *cap;          /* [S] capacity of ids[s] / weights[s] */
    bool *weighted;         /* [S] */
};

/* Make room for n ids (and weights when the slot is weighted) in slot s.
 * @return false when out of memory or n is absurd. */
bool imp_reserve(sl_wh_row_buf_t *b, uint32_t s, uint64_t n);

/* Longer input lines are bad rows, not allocations. */
#define IMP_LINE_LIMIT ((size_t)1 << 26)

/* Copy at most cap-1 bytes of text into buf for a message, replacing
 * control and non-ASCII bytes by '?' and marking a cut with "...". */
const char *imp_excerpt(const char *text, size_t len, char *buf, size_t cap);

/* Decimal int64 (optional sign, digits only). @return false when not one
 * or out of range. */
bool imp_parse_i64(const char *s, size_t len, int64_t *out);

/* Online cores (at least 1). */
uint32_t imp_cores(void);

/* ---- input (import_source.c) ---- */

/* One input being read: plain text, or gzip or zstd decompressed on the
 * fly (told by magic bytes, not by name). */
typedef struct imp_source imp_source_t;

/* Open path ("-": standard input, which is then not closed) and check that
 * its first decoded block is text. @return SL_ERR_IO when it cannot be
 * opened or read, SL_ERR_INVALID (naming path and what it looks like) when
 * it is not text: a NUL byte or invalid UTF-8 in the first 64 KiB, or a
 * compressed or binary format we do not read (bzip2, xz, zip, ...). */
sl_err_t imp_source_open(const char *path, const sl_allocator_t *a, imp_source_t **out,
                         sl_error_t *err);
/* Up to cap decoded bytes into buf; *n = 0 only at the end. @return
 * SL_ERR_IO, or SL_ERR_CORRUPT for corrupt or truncated compressed data. */
sl_err_t imp_source_read(imp_source_t *s, char *buf, size_t cap, size_t *n, sl_error_t *err);
/* Bytes read from the file so far (compressed bytes for compressed input). */
uint64_t imp_source_consumed(const imp_source_t *s);
void imp_source_close(imp_source_t *s);

/* One line without its '\n'. A line longer than IMP_LINE_LIMIT comes with
 * its full length but only part of its bytes: check len first. @return
 * SL_OK to go on, SL_ERR_CLOSED to stop reading (not an error), or an
 * error that imp_read_lines returns. */
typedef sl_err_t (*imp_line_fn)(void *ctx, const char *line, size_t len);
/* After each read: new_bytes of the file consumed. @return false to stop. */
typedef bool (*imp_chunk_fn)(void *ctx, uint64_t new_bytes);

/* Read src to its end in large chunks, calling on_line for every line (the
 * last one may lack its '\n'); on_chunk may be NULL. Memory: one buffer
 * that grows to the longest line, at most IMP_LINE_LIMIT + 1 bytes. */
sl_err_t imp_read_lines(imp_source_t *src, const sl_allocator_t *a, imp_line_fn on_line,
                        imp_chunk_fn on_chunk, void *ctx, sl_error_t *err);

/* ---- column mapping rows (column_map_row.c) ---- */

/* Every label 0, every dense value missing (NaN), every list empty. */
void imp_row_reset(sl_wh_row_buf_t *b);

/* Fill slot s of a row from the JSON value v (NULL or null: missing) and,
 * for a weighted slot of two lists, w (the weights; else ignored).
 * @return SL_ERR_CORRUPT naming the column, SL_ERR_NOMEM. */
sl_err_t imp_colmap_fill(sl_wh_row_buf_t *b, const sl_wh_colmap_resolved_t *r,
                         const sl_wh_colmap_slot_t *s, const json_t *v, const json_t *w,
                         sl_wh_row_t *row, sl_error_t *err);

/* mkdir -p of dir/partition (partition may be ""). */
sl_err_t imp_make_dirs(const char *dir, const char *partition, sl_error_t *err);

#endif

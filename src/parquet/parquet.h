/* sluice's own Parquet reader (docs/PARQUET.md): a format reader over an
 * abstract byte-range source, so that a local file (pread) and an object
 * store (ranged GETs) fit the same code (docs/DESIGN.md, "Where the bytes
 * come from").
 *
 *   sl_pq_source_t src;                       a local file: sl_pq_source_file
 *   sl_pq_file_open(&src, "x.parquet", NULL, &f, &err);      the footer
 *   const sl_pq_meta_t *m = sl_pq_file_meta(f);    schema, row groups, stats
 *   sl_pq_reader_new(f, row_group, column, &r, &err);
 *   while (sl_pq_reader_next(r, 4096, &b, &err) == SL_OK && b->rows > 0) ...
 *
 * A column chunk is streamed page by page: a reader holds at most one
 * page's compressed and decompressed bytes, the chunk's decoded dictionary,
 * 8 bytes per value of the current page for the DELTA_LENGTH_BYTE_ARRAY and
 * DELTA_BYTE_ARRAY lengths, and one batch of output (docs/PARQUET.md, "Memory").
 * Every size from the file is checked before it is used to allocate or to
 * index; a malformed file is an error naming file, row group, column and
 * page, never a crash. */
#ifndef SLUICE_PARQUET_H
#define SLUICE_PARQUET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

/* ---- where the bytes come from ---- */

/* A byte-range source: size and read_at are called from the thread using
 * the file (a source is not shared between threads unless its callbacks
 * allow it). */
typedef struct sl_pq_source {
    void *ctx;
    /* @return SL_OK with *size the object's length in bytes. */
    sl_err_t (*size)(void *ctx, uint64_t *size, sl_error_t *err);
    /* Read exactly len bytes at offset into buf; fewer is an error. */
    sl_err_t (*read_at)(void *ctx, uint64_t offset, size_t len, void *buf, sl_error_t *err);
} sl_pq_source_t;

/* A local file read with pread. Caller owns src->ctx: close with
 * sl_pq_source_file_close. */
sl_err_t sl_pq_source_file(const char *path, sl_pq_source_t *src, sl_error_t *err);
void sl_pq_source_file_close(sl_pq_source_t *src);

/* Bytes in memory (tests, fuzzing): src borrows data, which must outlive it;
 * mem is the caller's storage for the context. */
typedef struct sl_pq_memory {
    const uint8_t *data;
    size_t len;
} sl_pq_memory_t;
void sl_pq_source_memory(sl_pq_memory_t *mem, const void *data, size_t len, sl_pq_source_t *src);

/* ---- parquet.thrift enums (the values stored in files) ---- */

enum {
    SL_PQ_BOOLEAN = 0,
    SL_PQ_INT32 = 1,
    SL_PQ_INT64 = 2,
    SL_PQ_INT96 = 3,
    SL_PQ_FLOAT = 4,
    SL_PQ_DOUBLE = 5,
    SL_PQ_BYTE_ARRAY = 6,
    SL_PQ_FIXED_LEN_BYTE_ARRAY = 7
};
enum { SL_PQ_REQUIRED = 0, SL_PQ_OPTIONAL = 1, SL_PQ_REPEATED = 2 };
enum {
    SL_PQ_ENC_PLAIN = 0,
    SL_PQ_ENC_PLAIN_DICTIONARY = 2,
    SL_PQ_ENC_RLE = 3,
    SL_PQ_ENC_BIT_PACKED = 4,
    SL_PQ_ENC_DELTA_BINARY_PACKED = 5,
    SL_PQ_ENC_DELTA_LENGTH_BYTE_ARRAY = 6,
    SL_PQ_ENC_DELTA_BYTE_ARRAY = 7,
    SL_PQ_ENC_RLE_DICTIONARY = 8,
    SL_PQ_ENC_BYTE_STREAM_SPLIT = 9
};
enum {
    SL_PQ_UNCOMPRESSED = 0,
    SL_PQ_SNAPPY = 1,
    SL_PQ_GZIP = 2,
    SL_PQ_LZO = 3,
    SL_PQ_BROTLI = 4,
    SL_PQ_LZ4 = 5,
    SL_PQ_ZSTD = 6,
    SL_PQ_LZ4_RAW = 7
};
/* ConvertedType values sluice reads (others are kept as numbers). */
enum {
    SL_PQ_CT_NONE = -1,
    SL_PQ_CT_UTF8 = 0,
    SL_PQ_CT_MAP = 1,
    SL_PQ_CT_MAP_KEY_VALUE = 2,
    SL_PQ_CT_LIST = 3,
    SL_PQ_CT_TIMESTAMP_MILLIS = 9,
    SL_PQ_CT_TIMESTAMP_MICROS = 10,
    SL_PQ_CT_UINT_8 = 11,
    SL_PQ_CT_UINT_16 = 12,
    SL_PQ_CT_UINT_32 = 13,
    SL_PQ_CT_UINT_64 = 14
};
/* LogicalType (a union in parquet.thrift): which member is set. */
enum {
    SL_PQ_LT_NONE = 0,
    SL_PQ_LT_STRING = 1,
    SL_PQ_LT_MAP = 2,
    SL_PQ_LT_LIST = 3,
    SL_PQ_LT_ENUM = 4,
    SL_PQ_LT_DECIMAL = 5,
    SL_PQ_LT_DATE = 6,
    SL_PQ_LT_TIME = 7,
    SL_PQ_LT_TIMESTAMP = 8,
    SL_PQ_LT_INTEGER = 10,
    SL_PQ_LT_UNKNOWN = 11,
    SL_PQ_LT_JSON = 12,
    SL_PQ_LT_BSON = 13,
    SL_PQ_LT_UUID = 14,
    SL_PQ_LT_FLOAT16 = 15
};
enum { SL_PQ_UNIT_NONE = 0, SL_PQ_UNIT_MILLIS = 1, SL_PQ_UNIT_MICROS = 2, SL_PQ_UNIT_NANOS = 3 };

/* Names for messages and `sluice parquet inspect`; never NULL. */
const char *sl_pq_type_name(int type);
const char *sl_pq_encoding_name(int encoding);
const char *sl_pq_codec_name(int codec);

/* ---- the footer ---- */

typedef struct sl_pq_schema_elem {
    const char *name;
    int32_t type; /* -1: a group */
    int32_t type_length, repetition, num_children, converted_type;
    int32_t logical;   /* SL_PQ_LT_*, SL_PQ_LT_NONE when absent */
    int32_t time_unit; /* SL_PQ_UNIT_* of a TIMESTAMP or TIME */
    bool utc;          /* TIMESTAMP isAdjustedToUTC */
    int32_t int_bits;  /* INTEGER bitWidth */
    bool int_signed;   /* INTEGER isSigned */
    uint32_t parent;   /* index of the parent element (0: the root) */
} sl_pq_schema_elem_t;

typedef struct sl_pq_stats {
    bool has_min, has_max, has_null_count;
    bool exact_order;         /* min/max come from min_value/max_value (not the legacy min/max) */
    const uint8_t *min, *max; /* plain-encoded values */
    uint32_t min_len, max_len;
    int64_t null_count;
} sl_pq_stats_t;

typedef struct sl_pq_chunk {
    const char *path; /* path_in_schema joined with '.' */
    int32_t type, codec;
    uint32_t encodings; /* bit k: encoding k appears */
    int64_t num_values, total_uncompressed, total_compressed;
    int64_t data_page_offset, dictionary_page_offset; /* -1: none */
    bool has_stats;
    sl_pq_stats_t stats;
} sl_pq_chunk_t;

typedef struct sl_pq_row_group {
    int64_t num_rows, total_byte_size;
    uint32_t num_chunks;   /* == the number of leaf columns (checked) */
    sl_pq_chunk_t *chunks; /* one per leaf column, in column order */
} sl_pq_row_group_t;

/* What the output of a column holds (sl_pq_batch_t). */
typedef enum sl_pq_kind {
    SL_PQ_KIND_I64,  /* BOOLEAN (0/1), INT32, INT64, INT96 (nanoseconds since the epoch) */
    SL_PQ_KIND_F32,  /* FLOAT */
    SL_PQ_KIND_F64,  /* DOUBLE */
    SL_PQ_KIND_BYTES /* BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY */
} sl_pq_kind_t;

/* A leaf column, as readers and mappings see it. */
typedef struct sl_pq_column {
    const char *path; /* every schema name from the root's child to the leaf, '.'-joined */
    /* The name a user gives it: the path with a list's inner levels left
     * out ("tags" for tags.list.element, "tags.id" for the id field of a
     * list of structs tags.list.element.id). */
    const char *name;
    uint32_t elem; /* its schema element */
    int32_t type, type_length;
    sl_pq_kind_t kind;
    int16_t max_def, max_rep;
    /* A list column (max_rep 1): the definition level at which a list
     * element exists; a level one below it is an empty list, lower a null
     * list. */
    int16_t elem_def;
    bool is_list;
    bool in_struct_list;     /* a field of a list of structs (name is "list.field") */
    bool is_string;          /* UTF8 / STRING / ENUM / JSON */
    bool is_unsigned;        /* INTEGER unsigned, UINT_* */
    const char *unsupported; /* why it cannot be read (nesting too deep), else NULL */
} sl_pq_column_t;

typedef struct sl_pq_kv {
    const char *key, *value; /* value NULL when absent */
} sl_pq_kv_t;

typedef struct sl_pq_meta {
    int32_t version;
    int64_t num_rows;
    const char *created_by; /* NULL when absent */
    uint32_t num_elems;
    sl_pq_schema_elem_t *elems; /* elems[0] is the root */
    uint32_t num_columns;
    sl_pq_column_t *columns;
    uint32_t num_row_groups;
    sl_pq_row_group_t *row_groups;
    uint32_t num_kv;
    sl_pq_kv_t *kv;
    uint32_t footer_len;
} sl_pq_meta_t;

typedef struct sl_pq_file sl_pq_file_t;

/* Largest footer sluice reads (a size from the file checked before it
 * allocates). */
#define SL_PQ_MAX_FOOTER (64u << 20)

/* Read and decode the footer of src (which must outlive the file): the
 * magic at both ends, the footer length, FileMetaData, the schema tree.
 * name is used in messages. a: NULL for the default allocator. Caller owns
 * *out, free with sl_pq_file_destroy. */
sl_err_t sl_pq_file_open(const sl_pq_source_t *src, const char *name, const sl_allocator_t *a,
                         sl_pq_file_t **out, sl_error_t *err);
void sl_pq_file_destroy(sl_pq_file_t *f);
/* Borrowed until sl_pq_file_destroy. */
const sl_pq_meta_t *sl_pq_file_meta(const sl_pq_file_t *f);
const char *sl_pq_file_name(const sl_pq_file_t *f);
/* @return the index of the column whose name or path is name, or -1. */
int64_t sl_pq_find_column(const sl_pq_meta_t *m, const char *name);

/* Decode FileMetaData from buf (no magic, no length): for tests and the
 * fuzzer; sl_pq_file_open uses it. The metadata lives in memory owned by
 * the returned handle; free with sl_pq_meta_free. */
typedef struct sl_pq_meta_mem sl_pq_meta_mem_t;
sl_err_t sl_pq_meta_decode(const uint8_t *buf, size_t len, const sl_allocator_t *a,
                           sl_pq_meta_mem_t **mem, const sl_pq_meta_t **meta, sl_error_t *err);
void sl_pq_meta_free(sl_pq_meta_mem_t *mem);

/* ---- statistics (stats.c) ---- */

/* The range [*min, *max] of a column chunk's min/max statistics, as
 * doubles widened outward by one step (so no integer beyond 2^53 rounds
 * inward). @return false when there is no usable range: statistics absent,
 * not numeric (byte arrays, INT96), NaN, or the legacy signed order of an
 * unsigned column. */
bool sl_pq_stats_range(const sl_pq_column_t *c, const sl_pq_chunk_t *ch, double *min, double *max);

/* Do the chunk's statistics prove that none of its values lies in [lo, hi]
 * (a row group a job's range filter on this column can skip without
 * reading it)? True when the range misses [min, max] or every value is
 * null; false whenever unsure (no statistics, a list column). */
bool sl_pq_chunk_excludes(const sl_pq_column_t *c, const sl_pq_chunk_t *ch, double lo, double hi);

/* ---- reading a column chunk ---- */

/* One batch of a column: `rows` rows. For a scalar column there is one
 * slot per row; for a list column one slot per element, and row r's
 * elements are slots [list_off[r], list_off[r + 1]). Null slots hold 0
 * (or an empty byte string). Everything is borrowed until the next
 * sl_pq_reader_next or sl_pq_reader_destroy. */
typedef struct sl_pq_batch {
    uint32_t rows, slots;
    sl_pq_kind_t kind;
    int64_t *i64; /* SL_PQ_KIND_I64 */
    float *f32;   /* SL_PQ_KIND_F32 */
    double *f64;  /* SL_PQ_KIND_F64 */
    uint8_t *bytes;
    uint64_t *bytes_off; /* SL_PQ_KIND_BYTES: slot s is bytes[bytes_off[s], bytes_off[s + 1]) */
    uint8_t *valid;      /* per slot: 1 a value, 0 null */
    uint32_t *list_off;  /* list columns: rows + 1 offsets into the slots */
    uint8_t *list_valid; /* list columns: per row, 0 for a null list */
    /* A dense batch (sl_pq_reader_set_dense): the values of the valid
     * slots in slot order from index 0, vals of them, and nothing for a
     * null slot (the values past vals are not defined). The value of slot
     * s is at the number of valid slots before s. */
    bool dense;
    uint32_t vals;
} sl_pq_batch_t;

typedef struct sl_pq_reader sl_pq_reader_t;

/* Pages larger than this (compressed or not) are refused. */
#define SL_PQ_MAX_PAGE (1u << 30)
/* Values in one data page beyond this are refused (bounds the lengths
 * arrays of the delta byte-array encodings: 8 bytes each). */
#define SL_PQ_MAX_PAGE_VALUES (1u << 26)

/* A reader of column col of row group rg. The file must outlive it.
 * Refuses (SL_ERR_UNSUPPORTED, naming it) a column nested too deep. Caller
 * owns *out, free with sl_pq_reader_destroy. */
sl_err_t sl_pq_reader_new(sl_pq_file_t *f, uint32_t rg, uint32_t col, sl_pq_reader_t **out,
                          sl_error_t *err);
/* Point *r at column col of row group rg of f (any file of the same
 * allocator), keeping the buffers it grew (pages, dictionary, batch): a
 * reader reused from row group to row group touches no fresh memory. A
 * reader whose output differs in kind or list shape, or *r NULL, is
 * replaced by a new one. The file *r read before may be gone. On failure
 * *r is still a reader to destroy (or NULL). */
sl_err_t sl_pq_reader_renew(sl_pq_file_t *f, uint32_t rg, uint32_t col, sl_pq_reader_t **r,
                            sl_error_t *err);
/* Scratch that the readers of one thread share (sl_pq_reader_set_scratch):
 * the stored bytes of a page that are not needed once it is decompressed
 * (a dictionary page, a data page v1 of a compressed chunk) and the ZSTD
 * context. One buffer and one context for all the columns a thread reads
 * instead of one per column: fewer fresh pages to fault in, and both stay
 * in cache from column to column. Caller owns, free with
 * sl_pq_scratch_destroy (NULL accepted) after the readers that use it
 * stopped using it. @return NULL when out of memory. */
typedef struct sl_pq_scratch sl_pq_scratch_t;
sl_pq_scratch_t *sl_pq_scratch_new(const sl_allocator_t *a);
void sl_pq_scratch_destroy(sl_pq_scratch_t *s);
/* r uses s (NULL: its own buffers) from its next page on; renew keeps
 * it. s must have r's allocator, and one thread uses r and s at a time. */
void sl_pq_reader_set_scratch(sl_pq_reader_t *r, sl_pq_scratch_t *s);
/* A map of the INT64 values of an I64-kind column, in place: it must map
 * every value alone (the same value to the same bits however many values
 * a call gets) and not fail. */
typedef void (*sl_pq_i64_map_fn)(const void *ctx, int64_t *v, uint64_t n);
/* r's values pass through fn (NULL: none) before they reach a batch: a
 * dictionary's entries once, when its page is loaded (its indices then
 * gather mapped values), the values of other pages as they are decoded
 * (valid ones only). Only for an I64-kind column; cleared by renew. Set it
 * before the chunk's first batch. */
void sl_pq_reader_set_map(sl_pq_reader_t *r, sl_pq_i64_map_fn fn, const void *ctx);
/* The same for the FLOAT values of an F32-kind column (a dense feature's
 * log1p: a count column's dictionary holds a few hundred entries for a
 * million rows); it replaces any map set before. */
typedef void (*sl_pq_f32_map_fn)(const void *ctx, float *v, uint64_t n);
void sl_pq_reader_set_map_f32(sl_pq_reader_t *r, sl_pq_f32_map_fn fn, const void *ctx);
/* r's batches dense (sl_pq_batch_t.dense) or not (the default; cleared
 * by renew): a reader whose consumer reads the valid values in order
 * skips spreading them over the slots. Only for a scalar column of
 * numbers (kind I64, F32, F64); ignored for others. Set it before the
 * chunk's first batch. */
void sl_pq_reader_set_dense(sl_pq_reader_t *r, bool dense);
/* The next batch of at most max_rows rows (max_rows > 0); b->rows == 0 at
 * the end of the chunk. Errors name file, row group, column and page. */
sl_err_t sl_pq_reader_next(sl_pq_reader_t *r, uint32_t max_rows, const sl_pq_batch_t **b,
                           sl_error_t *err);
/* Pages read so far (dictionary pages included). */
uint64_t sl_pq_reader_pages(const sl_pq_reader_t *r);
void sl_pq_reader_destroy(sl_pq_reader_t *r);

#endif

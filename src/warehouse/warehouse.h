/* sluice warehouse: feature tables on disk (docs/FORMAT.md is the byte-level
 * specification; this header is the API the rest of sluice builds on).
 *
 * A table is a directory:
 *
 *     TABLE/_schema                          the table schema (sl_wh_schema_t)
 *     TABLE/ds=2026-01-01/part-0.slc         data files in Hive partitions
 *     TABLE/ds=2026-01-01/region=eu/x.slc    (more keys nest)
 *
 * A data file holds rows in stripes (65536 rows by default); inside a stripe
 * every column is its own stream (lengths, ids, weights and dense values of a
 * feature apart), zstd-compressed or stored, XXH3-checksummed, indexed by a
 * protobuf footer found from a fixed trailer at the end of the file.
 *
 * The pieces, in the order a user meets them:
 *
 *  - schema   features (dense / sparse id list / weighted id list), labels,
 *             the names of the sample id, session id and timestamp columns
 *             (always present, int64), optional partition keys.
 *  - rows     sl_wh_rows_t: rows in column form (an sl_batch_t plus session ids
 *             and timestamps). The reader hands them out; the writer takes them.
 *  - writer   one data file, written atomically (temporary name, fsync,
 *             rename, fsync of the directory); rows come one at a time
 *             (sl_wh_row_t, for importers) or in column batches; optional
 *             session clustering and storage dedup (RecD) per stripe.
 *  - table    create/open a table directory, list partitions and files, prune
 *             partitions with a filter ("ds>=2026-01-01,region=eu"), cut the
 *             files into splits (file, stripe range): the unit a worker leases.
 *  - reader   one data file (or one split of a table): projection (only the
 *             streams of the requested features are read, adjacent ones in one
 *             pread), checksums, decompression into reusable buffers; memory is
 *             bounded by one stripe.
 *  - verify, inspect, cat: whole-table checks, summary and JSON-lines dump
 *             (table_tools.h).
 *
 * Errors: every function returns sl_err_t and, given an sl_error_t, says what
 * and where, e.g. "ds=2026-11-21/part-3.slc stripe 7 stream 'user_hist' ids:
 * checksum mismatch". Bytes read from a file are never trusted: every size and
 * offset is checked before use, so a truncated, corrupted, foreign or
 * re-arranged file is an error (SL_ERR_CORRUPT, SL_ERR_TRUNCATED or
 * SL_ERR_VERSION), never a crash.
 *
 * Threads: no global state. A handle (schema, table, reader, writer) may be
 * used by one thread at a time; a schema or an opened table may be read by
 * many threads at once. Host byte order must be little-endian (checked at
 * compile time). */
#ifndef SLUICE_WAREHOUSE_H
#define SLUICE_WAREHOUSE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "dedup/dedup.h"
#include "sluice/alloc.h"
#include "sluice/err.h"
#include "sluice/tensor.h"

/* Data files: version 2 adds the BITPACK, DELTA and DICT encodings (docs/FORMAT.md
 * section 3); readers read versions SL_WH_FORMAT_VERSION_MIN .. SL_WH_FORMAT_VERSION.
 * The schema (the _schema file and the footer's TableSchema) is still version 1. */
#define SL_WH_FORMAT_VERSION 2
#define SL_WH_FORMAT_VERSION_MIN 1
#define SL_WH_SCHEMA_VERSION 1
#define SL_WH_FILE_MAGIC "SLCT"   /* first and last 4 bytes of a data file */
#define SL_WH_SCHEMA_MAGIC "SLSC" /* first 4 bytes of a _schema file */
#define SL_WH_FILE_EXT ".slc"
#define SL_WH_SCHEMA_FILE "_schema"
#define SL_WH_DEFAULT_STRIPE_ROWS 65536u
#define SL_WH_NAME_MAX 255 /* bytes of a feature, label, column or group name */

/* ==== schema ===================================================================== */

/* Values match FeatureKind in proto/warehouse.proto. */
typedef enum sl_wh_kind {
    SL_WH_DENSE = 1,   /* one float32 per row; NaN means missing */
    SL_WH_SPARSE = 2,  /* an int64 id list per row (may be empty) */
    SL_WH_WEIGHTED = 3 /* an int64 id list with one float32 weight per id */
} sl_wh_kind_t;

/* @return "dense", "sparse" or "weighted" (static). */
const char *sl_wh_kind_name(sl_wh_kind_t kind);

typedef struct sl_wh_feature {
    const char *name;
    sl_wh_kind_t kind;
    /* Position among the schema's dense features (DENSE) or among its sparse
     * and weighted features together (SPARSE, WEIGHTED), in schema order: the
     * index of this feature in sl_wh_row_t's dense / sparse arrays. */
    uint32_t slot;
} sl_wh_feature_t;

/* The three int64 columns every row has. */
typedef enum sl_wh_column {
    SL_WH_COL_SAMPLE_ID = 1,
    SL_WH_COL_SESSION_ID = 2,
    SL_WH_COL_TIMESTAMP = 4,
    SL_WH_COL_LABELS = 8 /* (for sl_wh_read_opts_t.skip_columns) */
} sl_wh_column_t;

typedef struct sl_wh_schema sl_wh_schema_t;

/* An empty schema (columns named "sample_id", "session_id", "ts"). Caller
 * owns, free with sl_wh_schema_destroy. @return NULL when out of memory. */
sl_wh_schema_t *sl_wh_schema_new(const sl_allocator_t *a);

/* s may be NULL. */
void sl_wh_schema_destroy(sl_wh_schema_t *s);

/* A deep copy. Caller owns. @return NULL when out of memory. */
sl_wh_schema_t *sl_wh_schema_clone(const sl_wh_schema_t *s, const sl_allocator_t *a);

/* Append a feature. Names are 1..SL_WH_NAME_MAX bytes without control
 * characters or '/', unique among features and labels. @return SL_ERR_INVALID
 * (message says why) or SL_ERR_NOMEM. */
sl_err_t sl_wh_schema_add_feature(sl_wh_schema_t *s, const char *name, sl_wh_kind_t kind,
                                  sl_error_t *err);

/* Append a float32 label column (same naming rules). */
sl_err_t sl_wh_schema_add_label(sl_wh_schema_t *s, const char *name, sl_error_t *err);

/* Rename the sample id / session id / timestamp columns (NULL keeps one). */
sl_err_t sl_wh_schema_set_columns(sl_wh_schema_t *s, const char *sample_id, const char *session_id,
                                  const char *timestamp, sl_error_t *err);

/* Append a partition key (e.g. "ds", then "region"): partitions of the table
 * must then be exactly these keys, nested in this order. Keys match
 * [A-Za-z_][A-Za-z0-9_]*. Without partition keys any key=value nesting is
 * accepted. */
sl_err_t sl_wh_schema_add_partition_key(sl_wh_schema_t *s, const char *key, sl_error_t *err);

uint32_t sl_wh_schema_num_features(const sl_wh_schema_t *s);
/* Feature i (schema order), borrowed from s; NULL when i is out of range. */
const sl_wh_feature_t *sl_wh_schema_feature(const sl_wh_schema_t *s, uint32_t i);
/* @return the feature named name (borrowed), or NULL. */
const sl_wh_feature_t *sl_wh_schema_find(const sl_wh_schema_t *s, const char *name);
/* @return the schema index of the feature named name, or -1. */
int sl_wh_schema_index(const sl_wh_schema_t *s, const char *name);
uint32_t sl_wh_schema_num_dense(const sl_wh_schema_t *s);
uint32_t sl_wh_schema_num_sparse(const sl_wh_schema_t *s); /* sparse + weighted */
/* The dense / sparse feature at slot (see sl_wh_feature_t.slot), or NULL. */
const sl_wh_feature_t *sl_wh_schema_dense(const sl_wh_schema_t *s, uint32_t slot);
const sl_wh_feature_t *sl_wh_schema_sparse(const sl_wh_schema_t *s, uint32_t slot);
uint32_t sl_wh_schema_num_labels(const sl_wh_schema_t *s);
const char *sl_wh_schema_label(const sl_wh_schema_t *s, uint32_t i);
int sl_wh_schema_find_label(const sl_wh_schema_t *s, const char *name);
/* Name of SL_WH_COL_SAMPLE_ID, _SESSION_ID or _TIMESTAMP (borrowed). */
const char *sl_wh_schema_column(const sl_wh_schema_t *s, sl_wh_column_t column);
uint32_t sl_wh_schema_num_partition_keys(const sl_wh_schema_t *s);
const char *sl_wh_schema_partition_key(const sl_wh_schema_t *s, uint32_t i);

/* @return true when a and b describe the same features, labels, columns and
 * partition keys, in the same order. */
bool sl_wh_schema_equal(const sl_wh_schema_t *a, const sl_wh_schema_t *b);

/* The bytes of a _schema file: 20-byte prefix (magic, version, length,
 * XXH3-64) then a packed TableSchema. Caller owns *buf, free with
 * sl_free(a, *buf, *len). */
sl_err_t sl_wh_schema_encode(const sl_wh_schema_t *s, const sl_allocator_t *a, void **buf,
                             size_t *len, sl_error_t *err);

/* Parse and validate the bytes of a _schema file. Caller owns *out. */
sl_err_t sl_wh_schema_decode(const void *buf, size_t len, const sl_allocator_t *a,
                             sl_wh_schema_t **out, sl_error_t *err);

/* Read / atomically write a _schema file. */
sl_err_t sl_wh_schema_load(const char *path, const sl_allocator_t *a, sl_wh_schema_t **out,
                           sl_error_t *err);
sl_err_t sl_wh_schema_save(const sl_wh_schema_t *s, const char *path, sl_error_t *err);

/* JSON form (for --schema files and inspect):
 *   {"features": [{"name": "f", "kind": "dense|sparse|weighted"}, ...],
 *    "labels": ["click", ...],
 *    "columns": {"sample_id": "sample_id", "session_id": "session_id", "timestamp": "ts"},
 *    "partition_keys": ["ds"]}
 * Only "features" is required. Caller owns the result (json_decref). */
json_t *sl_wh_schema_to_json(const sl_wh_schema_t *s);
sl_err_t sl_wh_schema_from_json(const json_t *json, const sl_allocator_t *a, sl_wh_schema_t **out,
                                sl_error_t *err);

/* ==== rows ======================================================================== */

/* Rows in column form: what the reader hands out and the writer takes.
 *
 *  batch.batch_size  N rows
 *  batch.sparse      a KJT of stride N: sparse and weighted features; when
 *                    any key is weighted, weights covers every value (1.0 for
 *                    the values of unweighted keys)
 *  batch.groups      (reader, dedup form) one IKJT per storage-dedup group
 *  batch.dense       float32 [N, D] row-major, names set; NaN = missing
 *  batch.labels      float32 [N, T] row-major, names set
 *  batch.sample_ids  int64 [N]
 *  session_ids, timestamps  int64 [N]
 *
 * batch.arena is NULL in rows the reader hands out: they are borrowed (see
 * sl_wh_reader_next); never pass them to sl_batch_destroy. */
typedef struct sl_wh_rows {
    const sl_wh_schema_t *schema; /* the file's schema (reader); may be NULL for writer input */
    const char *file;             /* display name of the file (reader) */
    uint32_t stripe;              /* stripe index in the file (reader) */
    uint64_t first_row;           /* file row number of row 0 (reader) */
    sl_batch_t batch;
    int64_t *session_ids; /* [N], NULL when not read */
    int64_t *timestamps;  /* [N], NULL when not read */
    /* [batch.sparse.num_keys + 1]: where each key's values start in
     * batch.sparse (reader; summed while decoding, so nobody sums the
     * lengths again), or NULL */
    const uint64_t *key_offsets;
    /* [num_keys][N / SL_WH_BLOCK_ROWS + 1] (read opts block_offsets):
     * entry [k][j] is how many of key k's values rows [0, j *
     * SL_WH_BLOCK_ROWS) hold, counted from key_offsets[k], so that where a
     * batch's values start is found by summing fewer than
     * SL_WH_BLOCK_ROWS lengths, not every length before it. Summed by the
     * thread that decodes the stripe (a worker's lane), right after each
     * key's lengths; NULL when not asked for or a length is negative. */
    const uint64_t *block_offsets;
} sl_wh_rows_t;

/* Rows a block of sl_wh_rows_t.block_offsets: sl_lengths_sum's block, so
 * each block is one of its vectorised steps. */
#define SL_WH_BLOCK_ROWS 64u

/* One id list of a row: len ids, and len weights (weighted features; NULL
 * means every weight is 1.0, and is ignored for unweighted features). */
typedef struct sl_wh_idlist {
    uint32_t len;
    const int64_t *ids;
    const float *weights;
} sl_wh_idlist_t;

/* One row, for sl_wh_writer_append_row. Arrays are indexed by schema order:
 * labels by label index, dense by dense slot, sparse by sparse slot (see
 * sl_wh_feature_t.slot). NULL labels: every label 0; NULL dense: every dense
 * value missing; NULL sparse: every list empty. Borrowed for the call only. */
typedef struct sl_wh_row {
    int64_t sample_id;
    int64_t session_id;
    int64_t timestamp;
    const float *labels;          /* [num_labels] */
    const float *dense;           /* [num_dense]; NaN = missing */
    const sl_wh_idlist_t *sparse; /* [num_sparse] */
} sl_wh_row_t;

/* One row as the JSON object of the jsonl format:
 *   {"sample_id":…, "session_id":…, "ts":…, "labels":{…}, "dense":{…},
 *    "sparse":{"name":[ids…]}, "weighted":{"name":{"ids":[…],"weights":[…]}}}
 * Missing dense values are omitted; id columns that were not read are
 * omitted; non-finite labels and weights become null. Floats are printed (with
 * sl_wh_json_dump) in the shortest form that reads back to the same float32.
 * rows->schema must be set (to tell weighted from unweighted keys).
 * Caller owns the result; NULL when out of memory or row >= N. */
json_t *sl_wh_row_to_json(const sl_wh_rows_t *rows, uint32_t row);

/* Print json compactly on one line (with '\n') with the float precision
 * sl_wh_row_to_json relies on. @return 0, or -1 on a write error. */
int sl_wh_json_dump(const json_t *json, FILE *out);

/* ==== writer ====================================================================== */

/* Values match Codec in proto/warehouse.proto. */
typedef enum sl_wh_codec { SL_WH_CODEC_NONE = 0, SL_WH_CODEC_ZSTD = 1 } sl_wh_codec_t;

/* Values match StreamKind in proto/warehouse.proto. */
typedef enum sl_wh_stream_kind {
    SL_WH_STREAM_LENGTHS = 1,
    SL_WH_STREAM_IDS = 2,
    SL_WH_STREAM_WEIGHTS = 3,
    SL_WH_STREAM_DENSE_VALUES = 4,
    SL_WH_STREAM_PRESENT = 5,
    SL_WH_STREAM_INVERSE = 6,
    SL_WH_STREAM_SAMPLE_ID = 7,
    SL_WH_STREAM_SESSION_ID = 8,
    SL_WH_STREAM_TIMESTAMP = 9,
    SL_WH_STREAM_LABEL = 10
} sl_wh_stream_kind_t;
#define SL_WH_STREAM_KINDS 11

/* @return "lengths", "ids", ... (static). */
const char *sl_wh_stream_kind_name(sl_wh_stream_kind_t kind);

typedef struct sl_wh_writer_opts {
    uint32_t stripe_rows; /* rows per stripe; 0: SL_WH_DEFAULT_STRIPE_ROWS */
    sl_wh_codec_t codec;  /* codec of every stream (default ZSTD; 0 is NONE) */
    /* 0: 1, which reads fastest; from 3 up files shrink ~20 % but decompress
     * ~25 % slower (docs/FORMAT.md, section 10) */
    int zstd_level;
    /* A zstd stream is kept only when it saves at least this fraction of
     * the encoded bytes; otherwise the stream is stored (CODEC_NONE), which
     * reads faster. Default 0.05. */
    double zstd_min_saving;
    /* Stream kinds always stored uncompressed: bit (1u << kind). */
    uint32_t store_kinds;
    /* Order the rows of each stripe by (session id, timestamp, arrival):
     * the window of the ordering is one stripe, so memory stays bounded. */
    bool cluster_sessions;
    /* Storage dedup (RecD): store each group's features once per unique row
     * of a stripe plus an INVERSE stream. Features must be sparse or
     * weighted, each in one group at most. Borrowed for the open call. */
    uint32_t num_dedup_groups;
    const sl_dedup_group_spec_t *dedup_groups;
    bool overwrite; /* replace an existing file (default: SL_ERR_INVALID) */
    /* Skip fsync of the file and directory (tests, scratch tables). Readers
     * still never see a partial file; a power loss may lose the file. */
    bool no_sync;
    const sl_allocator_t *allocator; /* NULL: default */
    /* Data file format version to write: 0 (default) SL_WH_FORMAT_VERSION,
     * whose writer picks each stream's encoding (bit-packed frame of
     * reference, delta, dictionary) by size; 1 writes what version-1
     * writers wrote (byte-wide frame of reference, then zstd): kept for
     * fixtures that old tables stay readable, and for comparisons. */
    uint32_t format_version;
} sl_wh_writer_opts_t;

/* The defaults described above. */
sl_wh_writer_opts_t sl_wh_writer_opts_default(void);

typedef struct sl_wh_write_stats {
    uint64_t rows;
    uint32_t stripes;
    uint64_t file_bytes;   /* size of the committed file */
    uint64_t raw_bytes;    /* decoded size of every stream written */
    uint64_t stored_bytes; /* bytes of every stream in the file */
    uint64_t dedup_rows;   /* sum over groups and stripes of rows */
    uint64_t dedup_unique; /* ... and of unique rows */
} sl_wh_write_stats_t;

typedef struct sl_wh_writer sl_wh_writer_t;

/* Start writing the data file path: bytes go to ".NAME.tmp" beside it (the
 * directory must exist) until sl_wh_writer_close commits; two writers must
 * not write the same path at once. schema is copied. opts NULL: defaults
 * (start from sl_wh_writer_opts_default(): a zeroed struct means codec
 * NONE). Caller owns *out: end it with sl_wh_writer_close (commit) or
 * sl_wh_writer_abort (discard). Memory: one stripe of rows (stripe_rows). */
sl_err_t sl_wh_writer_open(const char *path, const sl_wh_schema_t *schema,
                           const sl_wh_writer_opts_t *opts, sl_wh_writer_t **out, sl_error_t *err);

/* Append one row (copied). A stripe is encoded and written when full. */
sl_err_t sl_wh_writer_append_row(sl_wh_writer_t *w, const sl_wh_row_t *row, sl_error_t *err);

/* Append rows in column form (copied). Columns are matched by name:
 * batch.dense.names / batch.labels.names (NULL names: schema order, and the
 * column count must match; no columns: all dense missing, labels 0), batch.sparse keys and the keys
 * of batch.groups (expanded). A schema feature absent from the input is missing (dense) or empty
 * (sparse); a name the schema lacks is SL_ERR_INVALID. NULL sample_ids number the rows from the
 * file's row count; NULL session_ids / timestamps are 0. rows->schema is not consulted, so any
 * reader output can be written. */
sl_err_t sl_wh_writer_append(sl_wh_writer_t *w, const sl_wh_rows_t *rows, sl_error_t *err);

/* Rows appended so far. */
uint64_t sl_wh_writer_rows(const sl_wh_writer_t *w);

/* End the stripe being filled now, short or not (nothing when it is
 * empty): the next row starts a new stripe. The autocache writes one
 * batch a stripe this way (docs/DESIGN.md "Autocache"). */
sl_err_t sl_wh_writer_end_stripe(sl_wh_writer_t *w, sl_error_t *err);

/* Write rows as one stripe of their own (the stripe being filled is ended
 * first), storing every dedup group of the file as the rows' IKJT of that
 * name (rows->batch.groups) holds it: its unique rows and inverse indices,
 * not deduplicated again, so that a reader in dedup form hands back exactly
 * those IKJTs (a group whose unique rows repeat stays so). The rows' groups
 * must be the file's: each file group in the rows, with the group's
 * features in the file's order, weighted exactly when the schema's
 * features are (they are not expanded: no copy of their rows is made);
 * rows of more than stripe_rows rows, or with cluster_sessions (it
 * reorders rows), are SL_ERR_INVALID. The autocache writes a batch a stripe this way
 * (docs/FORMAT.md "Cache files"). */
sl_err_t sl_wh_writer_append_stripe(sl_wh_writer_t *w, const sl_wh_rows_t *rows, sl_error_t *err);

/* Write the last stripe, the footer and the trailer, fsync, rename to the
 * final name, fsync the directory. Frees w whatever happens; on error nothing
 * appears under the final name (the temporary file is removed). After an
 * append failed, close fails with that error. stats may be NULL. */
sl_err_t sl_wh_writer_close(sl_wh_writer_t *w, sl_wh_write_stats_t *stats, sl_error_t *err);

/* Discard: remove the temporary file and free w (NULL is fine). */
void sl_wh_writer_abort(sl_wh_writer_t *w);

/* ==== reading limits ================================================================== */

/* Bounds on what a file may make the reader allocate (zero fields: default). */
typedef struct sl_wh_limits {
    uint64_t max_footer_bytes; /* default 64 MiB */
    uint32_t max_stripe_rows;  /* default 1 << 24 */
    uint32_t max_stripes;      /* default 1 << 20 */
    uint32_t max_streams;      /* per stripe, default 1 << 20 */
    uint64_t max_stripe_bytes; /* decoded bytes of one stripe's read, default 8 GiB */
} sl_wh_limits_t;

sl_wh_limits_t sl_wh_limits_default(void);

/* ==== table ========================================================================= */

typedef struct sl_wh_partition {
    const char *name; /* "ds=2026-01-01/region=eu" ("" for the table root) */
    uint32_t num_keys;
    const char *const *keys; /* [num_keys] */
    const char *const *values;
    uint32_t num_files;
    const char *const *files; /* [num_files] paths relative to the table dir, sorted */
} sl_wh_partition_t;

typedef struct sl_wh_table sl_wh_table_t;

/* Create the table directory dir (its parent must exist; dir may exist
 * empty) and write its _schema atomically. Creating over an existing table
 * with an equal schema succeeds; with another schema it is SL_ERR_INVALID. */
sl_err_t sl_wh_table_create(const char *dir, const sl_wh_schema_t *schema, sl_error_t *err);

/* Open a table: read its schema, list its partitions and data files (a
 * snapshot: files written later need another open). Names starting with '.'
 * or '_' are ignored (temporary files, markers). Caller owns *out, free with
 * sl_wh_table_close. */
sl_err_t sl_wh_table_open(const char *dir, const sl_allocator_t *a, sl_wh_table_t **out,
                          sl_error_t *err);
/* sl_wh_table_open with the options of the store a table at an s3:// URL
 * is read through (store/store.h; NULL: the defaults; its alloc is a):
 * a worker's request timeout. Ignored for a table directory. */
struct sl_store_opts;
sl_err_t sl_wh_table_open_with(const char *dir, const struct sl_store_opts *store,
                               const sl_allocator_t *a, sl_wh_table_t **out, sl_error_t *err);

void sl_wh_table_close(sl_wh_table_t *t);

const char *sl_wh_table_dir(const sl_wh_table_t *t);
/* The object store a table at an s3:// URL is read through (its counters:
 * sl_store_stats, sl_store_prom), NULL for a table directory; borrowed
 * until sl_wh_table_close. */
struct sl_store;
struct sl_store *sl_wh_table_store(const sl_wh_table_t *t);
const sl_wh_schema_t *sl_wh_table_schema(const sl_wh_table_t *t);
/* Partitions in name order (borrowed from t). */
uint32_t sl_wh_table_num_partitions(const sl_wh_table_t *t);
const sl_wh_partition_t *sl_wh_table_partition(const sl_wh_table_t *t, uint32_t i);

/* Check a partition name ("ds=2026-01-01/region=eu", or "" for none)
 * against the naming rules and the schema's partition keys. */
sl_err_t sl_wh_partition_check(const sl_wh_schema_t *s, const char *partition, sl_error_t *err);

/* Open a writer for TABLE/partition/file_name with the table's schema,
 * creating the partition directories. file_name must end in ".slc" and hold
 * no '/'. Otherwise as sl_wh_writer_open. */
sl_err_t sl_wh_table_writer_open(const sl_wh_table_t *t, const char *partition,
                                 const char *file_name, const sl_wh_writer_opts_t *opts,
                                 sl_wh_writer_t **out, sl_error_t *err);

/* A partition filter: a comma-separated conjunction of KEY OP VALUE with OP
 * one of = != < <= > >=, e.g. "ds>=2026-01-01,ds<2026-02-01,region=eu".
 * Values compare as integers when both sides are integers, else as strings
 * (ISO dates order correctly). A partition lacking KEY does not match. */
typedef struct sl_wh_filter sl_wh_filter_t;

/* Caller owns *out, free with sl_wh_filter_destroy. "" matches everything. */
sl_err_t sl_wh_filter_parse(const char *text, const sl_allocator_t *a, sl_wh_filter_t **out,
                            sl_error_t *err);
void sl_wh_filter_destroy(sl_wh_filter_t *f);
/* @return whether p passes f; a NULL filter passes everything. */
bool sl_wh_filter_match(const sl_wh_filter_t *f, const sl_wh_partition_t *p);

/* Memory a reader of an object holds beyond the rows it hands out, counted
 * by its caller (a worker's --memory-limit, docs/STORAGE.md "Memory"): a
 * table reader's read-ahead of the next stripe and its read buffer (the
 * fetched bytes of the stripe it decodes, taken with take; a file that is
 * mapped has none), a Parquet reader's column chunks of the row group it
 * reads. Called on the reader's threads
 * (the read-ahead's give from its helper's owner, the reader).
 *  - try_take: take bytes if they fit now, never waiting; false: the
 *    read-ahead is skipped (the stripe is fetched when it is read).
 *  - take: take bytes, waiting for room (back-pressure); an error (set in
 *    err, naming what) fails the read.
 *  - give: give back bytes taken. */
typedef struct sl_wh_mem {
    void *ctx;
    bool (*try_take)(void *ctx, uint64_t bytes);
    sl_err_t (*take)(void *ctx, uint64_t bytes, const char *what, sl_error_t *err);
    void (*give)(void *ctx, uint64_t bytes);
} sl_wh_mem_t;

/* A split: the unit of work a worker leases. */
typedef struct sl_wh_split {
    const char *path;      /* data file, relative to the table dir */
    const char *partition; /* its partition name */
    uint32_t stripe_begin; /* stripes [stripe_begin, stripe_end) */
    uint32_t stripe_end;
    uint64_t first_row; /* file row number of the first row */
    uint64_t num_rows;
    uint64_t bytes;           /* stored bytes of the stripes */
    uint64_t footer_checksum; /* XXH3-64 of its file's footer (the trailer's): names the
                                 file's content (a plan's fingerprint) */
} sl_wh_split_t;

typedef struct sl_wh_splits {
    uint32_t count;
    sl_wh_split_t *items; /* [count]: files in table order, stripes in file order */
    uint64_t rows;        /* sum of num_rows */
    uint32_t files;       /* files listed */
    sl_arena_t *arena;    /* owns items and strings */
} sl_wh_splits_t;

/* Cut the files of the partitions passing filter (NULL: all) into splits of
 * stripes_per_split consecutive stripes (0: 1); every stripe of every file is
 * in exactly one split. Opens each file's footer (checked, not the data).
 * Caller owns *out, free with sl_wh_splits_destroy. */
sl_err_t sl_wh_table_splits(const sl_wh_table_t *t, const sl_wh_filter_t *filter,
                            uint32_t stripes_per_split, sl_wh_splits_t **out, sl_error_t *err);
void sl_wh_splits_destroy(sl_wh_splits_t *s);

/* ==== reader ========================================================================= */

/* A per-value map the reader applies to one feature's values while it
 * decodes them (sl_wh_read_opts_t.maps): to each entry of a
 * dictionary-encoded stream's dictionary, once per stripe, before its
 * indices gather them, and to every value of a stream stored any other
 * way. So a function of each value alone (a hash, a log) costs one call
 * per distinct value of a stripe instead of one per row. Both functions
 * must map every value alone, the same value to the same bits wherever it
 * lies and however many values one call gets; they must not fail. */
typedef struct sl_wh_value_map {
    /* ids of a sparse or weighted feature, n of them, in place (weights
     * are not mapped) */
    void (*ids)(const void *ctx, int64_t *ids, uint64_t n);
    /* column col of the row-major [rows, cols] matrix data, in place; a
     * missing value is NaN before the map (so a missing row of a
     * dictionary-encoded column gets the map of NaN) */
    void (*dense)(const void *ctx, float *data, uint32_t rows, uint32_t cols, uint32_t col);
    const void *ctx;
    /* ids maps every id in [0, 2^63) into [0, 2^63): a reader that refuses
     * negative ids (the Parquet source's) may then map before it checks,
     * leaving the negative ones as they are */
    bool ids_nonneg;
} sl_wh_value_map_t;

typedef struct sl_wh_read_opts {
    /* Features to read, in output order (dense ones fill batch.dense, sparse
     * and weighted ones batch.sparse or the groups); NULL: every feature in
     * schema order. A name the file's schema lacks is SL_ERR_NOT_FOUND. */
    const char *const *features;
    uint32_t num_features;
    /* [num_features] (NULL features: [schema features], schema order):
     * the map of each feature's values, an entry whose function for the
     * feature's kind is NULL maps nothing; NULL: none. Borrowed, must
     * outlive the reader. Features of a storage-dedup group are mapped
     * too (their unique rows, before any expansion). */
    const sl_wh_value_map_t *maps;
    uint32_t skip_columns; /* SL_WH_COL_* bits of columns not to read */
    /* Hand back storage-dedup groups as IKJTs in batch.groups (only the
     * projected features of each group) instead of expanding them into
     * batch.sparse. */
    bool dedup_form;
    bool skip_checksums; /* default: verify every stream read */
    /* Requested streams closer than this many bytes are read in one pread
     * (the bytes between them too). 0: 64 KiB; SL_WH_GAP_NONE: read only
     * requested bytes (adjacent requested streams are still one pread). */
    uint32_t coalesce_gap;
    sl_wh_limits_t limits; /* zero fields: defaults */
    const sl_allocator_t *allocator;
    /* Counts the read-ahead of an object's next stripe and the read
     * buffer of the stripe being read (sl_wh_mem_t; NULL: not counted):
     * borrowed, must outlive the reader. */
    const struct sl_wh_mem *mem;
    /* An object's read-ahead fetches stripe s + ahead_stride after the
     * reader read s - ahead_stride and s: for a reader that reads every
     * n-th stripe of a file (a worker's n stripe lanes take a file's
     * stripes in turn). 0 or 1: the next stripe. */
    uint32_t ahead_stride;
    /* Fill sl_wh_rows_t.block_offsets: 8 bytes a key for every
     * SL_WH_BLOCK_ROWS rows (1/32 of the lengths), outside the decoded
     * size limit as key_offsets are. */
    bool block_offsets;
} sl_wh_read_opts_t;

#define SL_WH_GAP_NONE UINT32_MAX

typedef struct sl_wh_read_stats {
    uint64_t read_calls; /* preads, memory copies, or ranges taken in place from a mapped file */
    uint64_t bytes_read; /* bytes they returned, header, footer and trailer included */
    uint64_t data_bytes_read; /* of which stripe data */
    uint64_t stripes;
    uint64_t rows;
    uint64_t streams;        /* streams decoded */
    uint64_t decoded_bytes;  /* bytes of the output tensors filled */
    uint64_t mapping_faults; /* SIGBUS caught reading the mapped file (then read with pread) */
    uint64_t read_ahead;     /* stripes of an object fetched ahead, while the one before was read */
    uint64_t read_ahead_skipped; /* not fetched ahead: no room under the memory hook (or no
                                    memory) */
    /* fetched ahead and never taken: dropped for room (sl_wh_reader_drop_ahead),
     * failed, or still in flight (the reader closes before it reads that stripe) */
    uint64_t read_ahead_dropped;
} sl_wh_read_stats_t;

typedef struct sl_wh_stripe_info {
    uint64_t first_row;
    uint32_t rows;
    uint64_t offset, bytes;
    uint32_t num_streams;
    /* An estimate, from the footer alone, of the bytes the stripe decodes
     * to: every stream's values at their natural width (a per-row column
     * at least one value a row, every id a weight when a feature is
     * weighted), whatever the projection: a read of every column holds
     * exactly this much (warehouse_rw_test). For a memory budget
     * before the first read; storage-dedup groups hold more once their
     * rows are expanded. */
    uint64_t decoded_bytes;
} sl_wh_stripe_info_t;

typedef struct sl_wh_reader sl_wh_reader_t;

/* Open the data file path (display_name NULL: path is used in messages):
 * checks the header, trailer, footer checksum and every footer field, and
 * resolves the projection. Caller owns *out, free with sl_wh_reader_close. */
sl_err_t sl_wh_reader_open(const char *path, const char *display_name,
                           const sl_wh_read_opts_t *opts, sl_wh_reader_t **out, sl_error_t *err);

/* Same over len bytes of memory (borrowed until sl_wh_reader_close). */
sl_err_t sl_wh_reader_open_mem(const void *data, size_t len, const char *display_name,
                               const sl_wh_read_opts_t *opts, sl_wh_reader_t **out,
                               sl_error_t *err);

/* Open the file of a split of t, positioned on its stripe range (messages
 * name the file relative to the table). */
sl_err_t sl_wh_reader_open_split(const sl_wh_table_t *t, const sl_wh_split_t *split,
                                 const sl_wh_read_opts_t *opts, sl_wh_reader_t **out,
                                 sl_error_t *err);

/* A reader of base's file (on base's stripe range) with opts of its own,
 * opened from what base's open fetched: an object's footer is not fetched
 * again (no request, unless it is larger than the 256 KiB tail an open
 * fetches), a local file's is read again (wh_file_open_twin).
 * The two readers may be used on two threads at once; base may be closed
 * first (a memory reader's bytes must outlive both). A worker's stripe
 * lanes open theirs this way, once per split (docs/WORKER.md). */
sl_err_t sl_wh_reader_open_twin(const sl_wh_reader_t *base, const sl_wh_read_opts_t *opts,
                                sl_wh_reader_t **out, sl_error_t *err);

/* r may be NULL. */
void sl_wh_reader_close(sl_wh_reader_t *r);

const sl_wh_schema_t *sl_wh_reader_schema(const sl_wh_reader_t *r);
uint32_t sl_wh_reader_num_stripes(const sl_wh_reader_t *r);
uint64_t sl_wh_reader_num_rows(const sl_wh_reader_t *r);
/* Drop a read-ahead of the next stripe (waiting for a fetch in flight to
 * end), giving its bytes back to the memory hook: for a caller that needs
 * the room, so that read-ahead never makes it fail. */
void sl_wh_reader_drop_ahead(sl_wh_reader_t *r);
/* XXH3-64 of the file's footer, as its trailer gives it (checked at open):
 * what a split's footer_checksum pins. */
uint64_t sl_wh_reader_footer_checksum(const sl_wh_reader_t *r);
bool sl_wh_reader_session_clustered(const sl_wh_reader_t *r);
/* @return SL_ERR_INVALID when stripe is out of range. */
sl_err_t sl_wh_reader_stripe_info(const sl_wh_reader_t *r, uint32_t stripe,
                                  sl_wh_stripe_info_t *info);
/* Storage-dedup groups of the file (borrowed from r). */
uint32_t sl_wh_reader_num_groups(const sl_wh_reader_t *r);
const sl_dedup_group_spec_t *sl_wh_reader_group(const sl_wh_reader_t *r, uint32_t g);

/* Restrict sl_wh_reader_next to stripes [begin, end) and rewind to begin. */
sl_err_t sl_wh_reader_set_range(sl_wh_reader_t *r, uint32_t begin, uint32_t end, sl_error_t *err);

/* The caller reads this file's stripes on from the range's begin up to
 * end (> the range's end when the splits it reads next continue the
 * range; every ahead_stride-th of them for a reader of a worker's stripe
 * lanes): an object's read-ahead may then start at the range's first
 * stripe (s + ahead_stride fetched while s is read) instead of waiting
 * for a second stripe in order, without fetching a stripe nobody reads
 * (an end at the range's begin: not before a second stripe in order).
 * Reset to the range's end by set_range; an end past the file is the
 * file's end. */
void sl_wh_reader_set_ahead_end(sl_wh_reader_t *r, uint32_t end);

/* Read the next stripe of the range: *rows is borrowed from r until the
 * next read or close, NULL at the end of the range. */
sl_err_t sl_wh_reader_next(sl_wh_reader_t *r, const sl_wh_rows_t **rows, sl_error_t *err);

/* Read one stripe (any index), same ownership as sl_wh_reader_next. */
sl_err_t sl_wh_reader_read_stripe(sl_wh_reader_t *r, uint32_t stripe, const sl_wh_rows_t **rows,
                                  sl_error_t *err);

void sl_wh_reader_stats(const sl_wh_reader_t *r, sl_wh_read_stats_t *out);

#endif

/* Private to the importers (import*.c) and the generator (gen.c): the row
 * scratch the line parsers fill, and small parsing helpers. */
#ifndef SLUICE_WH_IMPORT_INTERNAL_H
#define SLUICE_WH_IMPORT_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
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
    /* CSV: a record's fields, unquoted and NUL-terminated (import_csv.c) */
    char *text;
    size_t text_cap;
    uint32_t *foff, *flen; /* [fcap] offset and length in text of each field */
    uint32_t fcap;
};

/* Make room for n ids (and weights when the slot is weighted) in slot s.
 * @return false when out of memory or n is absurd. */
/* A bad input row or record: SL_ERR_CORRUPT with the message (printf
 * style), the one form every importer's line and record parsers use. */
/* sl_wh_import into a directory, numbering new files from first_part at
 * least (past those of the partition in a store the import uploads to). */
sl_err_t wh_import_into(const sl_wh_import_opts_t *o, uint32_t first_part,
                        sl_wh_import_summary_t *summary, sl_error_t *err);
/* sl_wh_import into a table in an object store (import_store.c): import
 * into a local staging directory, then upload the new files and, for a
 * new table, its _schema last. */
sl_err_t wh_import_store(const sl_wh_import_opts_t *o, sl_wh_import_summary_t *summary,
                         sl_error_t *err);

sl_err_t imp_bad(sl_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What a JSON value is, for messages ("an array", "null"). */
const char *imp_json_type(const json_t *v);

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
/* Bytes [begin, end) of the plain file path, without the checks of
 * imp_source_open (the caller made them on the whole file). */
sl_err_t imp_source_open_range(const char *path, uint64_t begin, uint64_t end,
                               const sl_allocator_t *a, imp_source_t **out, sl_error_t *err);
/* Whether s reads its file as it is (neither gzip nor zstd). */
bool imp_source_plain(const imp_source_t *s);
/* peek_only: reads end after the first decoded 64 KiB (for inference
 * from standard input); turning it off rewinds to the start. */
void imp_source_set_peek_only(imp_source_t *s, bool peek_only);
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

/* One record without the '\n' that ends it (a trailing '\r' is left on);
 * inner: the newlines inside it that did not end it (a CSV record's, in
 * quoted fields); ended: whether a '\n' ended it (the file's last record
 * may lack one). A record longer than IMP_LINE_LIMIT comes with its full
 * length but only part of its bytes. @return as imp_line_fn's. */
typedef sl_err_t (*imp_record_fn)(void *ctx, const char *rec, size_t len, uint32_t inner,
                                  bool ended);
/* Where the record going on at p[from] ends: the index of the '\n' that
 * ends it in p[from..end), or end when it goes on past end; newlines
 * passed that do not end it are added to *inner. state: the cutter's own
 * (a lexer's), kept across calls, across a record too long to keep too. */
typedef size_t (*imp_cut_fn)(void *state, const char *p, size_t from, size_t end, uint32_t *inner);

/* Read src to its end in large chunks, cut into records by cut, calling
 * on_record for each; strip_bom: drop a UTF-8 byte order mark at the
 * start; noun names a record in messages; on_chunk may be NULL. Memory:
 * one buffer that grows to the longest record, at most IMP_LINE_LIMIT + 1
 * bytes (a longer one is counted, not kept). The one read loop of the
 * line and CSV record readers. */
sl_err_t imp_read_cut(imp_source_t *src, const sl_allocator_t *a, const char *noun, bool strip_bom,
                      imp_cut_fn cut, void *cut_state, imp_record_fn on_record,
                      imp_chunk_fn on_chunk, void *ctx, sl_error_t *err);

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

/* ---- CSV records (import_csv_read.c) ---- */

/* Read src to its end cutting records by RFC 4180 quoting (quoted fields
 * may hold delim and newlines); strip_bom: drop a UTF-8 byte order mark
 * at the start. Memory: one buffer that grows to the longest record. */
sl_err_t imp_read_records(imp_source_t *src, const sl_allocator_t *a, char delim, bool strip_bom,
                          imp_record_fn on_record, imp_chunk_fn on_chunk, void *ctx,
                          sl_error_t *err);

/* The CSV import's context (import_csv.c): its delimiter; standard input
 * as sl_wh_csv_open left it (NULL when it did not read it; the caller
 * then owns it); check that a record is the same header. */
char imp_csv_delim(const sl_wh_csv_t *c);
imp_source_t *imp_csv_take_stdin(sl_wh_csv_t *c);
sl_err_t imp_csv_check_header(const sl_wh_csv_t *c, sl_wh_row_buf_t *b, const char *rec, size_t len,
                              sl_error_t *err);

#define IMP_MAX_RANGES 1024

/* A byte range of a file that starts on a record boundary. */
typedef struct imp_range {
    uint64_t begin, end;
    uint64_t first_line; /* physical line number (from 1) of its first record */
} imp_range_t;

/* Cut the plain CSV file path into up to want ranges of about equal size
 * after its header, each starting where a sequential read would start a
 * record (one pass over the file with the same lexer). *count = 0: read
 * the file whole (it is compressed, or empty). ranges: [IMP_MAX_RANGES]. */
sl_err_t imp_csv_plan_ranges(const char *path, char delim, uint32_t want, const sl_allocator_t *a,
                             imp_range_t *ranges, uint32_t *count, sl_error_t *err);

/* ---- Parquet (import_parquet.c) ---- */

/* The first input's columns and the mapping resolved against them. */
typedef struct imp_pq imp_pq_t;

/* Open input's footer, list its columns (name and type: scalars, lists, a
 * list of struct{id, weight} as one column) and resolve mapping (NULL: the
 * default) against them. Caller owns *out, free with imp_pq_destroy. */
sl_err_t imp_pq_open(const char *input, const sl_wh_colmap_t *mapping, const sl_allocator_t *a,
                     imp_pq_t **out, sl_error_t *err);
/* The same, mapping problems each to problem (may be NULL). */
sl_err_t imp_pq_open_mapped(const char *input, const sl_wh_colmap_t *mapping,
                            const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                            imp_pq_t **out, sl_error_t *err);
/* The same reading input (an s3:// URL) through st (borrowed: it must
 * outlive p; NULL: a store of its own for a URL, as imp_pq_open_mapped). */
struct sl_store;
sl_err_t imp_pq_open_store(struct sl_store *st, const char *input, const sl_wh_colmap_t *mapping,
                           const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                           imp_pq_t **out, sl_error_t *err);
void imp_pq_destroy(imp_pq_t *p);
/* Borrowed from p; its schema is the table's. */
const sl_wh_colmap_resolved_t *imp_pq_mapping(const imp_pq_t *p);

/* The Parquet path of the leaf input column `column` (of the mapping's
 * columns) is read from; NULL for a list of struct{id, weight} (two leaves). */
const char *imp_pq_leaf_path(const imp_pq_t *p, uint32_t column);

/* The row groups of input and the rows before each (*rows_before:
 * groups + 1 entries, caller frees with sl_free(a, .., (groups + 1) * 8)). */
sl_err_t imp_pq_row_groups(const char *input, const sl_allocator_t *a, uint32_t *groups,
                           uint64_t **rows_before, sl_error_t *err);

/* One row of imp_pq_read_slots: line counts rows of the file from 1; rc is
 * SL_ERR_CORRUPT (perr says why) for a row the mapping cannot take. The
 * callback's return stops the read when not SL_OK. */
typedef sl_err_t (*imp_pq_row_fn)(void *ctx, uint64_t line, sl_err_t rc, const sl_error_t *perr,
                                  sl_wh_row_t *row, bool has_sid);

/* Read row groups [begin, end) of input (whose rows before begin are
 * first_row) through p's mapping a row at a time, each row to on_row; b
 * is a row buffer of the mapping's schema. Filling only the slots s with
 * slot_read[s] (NULL: every slot): the Parquet leaves no such slot reads
 * are never opened (projection). Row groups whose rows all come before
 * file row skip_to (0-based) are not read at all (a todo range that
 * starts mid-split). Errors name the file (and row group, column and
 * page, from the reader). The row path: sl_wh_pqds_read and the tests
 * that hold the columnar path (pq_internal.h) to it.
 * input may be an s3:// URL of the bucket p's first input is in; its
 * projected column chunks are then fetched a row group at a time, in
 * parallel. if_etag: the ETag the object must have (a dataset's listing
 * found), else SL_ERR_VERSION naming it; NULL or "": any. */
sl_err_t imp_pq_read_slots(const imp_pq_t *p, const uint8_t *slot_read, const char *input,
                           const char *if_etag, uint32_t begin, uint32_t end, uint64_t first_row,
                           uint64_t skip_to, sl_wh_row_buf_t *b, imp_pq_row_fn on_row, void *ctx,
                           sl_error_t *err);

/* ---- the import driver's jobs (import.c plans them, import_run.c runs them) ---- */

/* One unit of an import: an input file whole, or a byte range of one;
 * each writes its own data file. */
typedef struct imp_job {
    uint32_t input; /* index in opts.inputs */
    uint32_t part;  /* part number of the output */
    /* Sample ids the input does not give: id_base + line, where id_base is
     * (first part number + input index) x 10^10, the same however many
     * ranges (so threads) the input is read in. */
    int64_t id_base;
    bool ranged; /* [begin, end) of a plain file; begin 0 holds the header */
    uint64_t begin, end, first_line;
    char stage[96];
    sl_wh_import_file_t res; /* this job's counts; summed per input at the end */
    uint32_t num_first_bad;
    char first_bad[SL_WH_IMPORT_FIRST_BAD][SL_ERROR_MSG_MAX]; /* "input:line: why" */
    bool written;                                             /* a staged file exists */
    sl_err_t rc;
    sl_error_t err;
} imp_job_t;

typedef struct imp_shared {
    const sl_wh_import_opts_t *o;
    const sl_wh_schema_t *schema;
    sl_wh_csv_t *csv;        /* csv: the header and mapping */
    imp_pq_t *pq;            /* parquet: the first input's columns and the mapping */
    imp_source_t *stdin_src; /* csv: standard input, already opened for inference */
    char part_dir[4096];
    imp_job_t *jobs;
    uint32_t njobs;
    atomic_uint next;
    atomic_bool stop;
    atomic_uint_fast64_t rows_read, rows_written, rows_skipped, bytes_in, bytes_out;
    atomic_uint files_done;
    atomic_uint running;
    pthread_mutex_t lock; /* bad-row callback; the done condition */
    pthread_cond_t done;
    bool linked; /* commit put a file under its final name: undo_create must not run */
} imp_shared_t;

/* Read job's input (or range) into its staged data file: sets job->rc,
 * job->err, job->written, job->res. Runs on a worker thread. */
void imp_run_job(imp_shared_t *sh, imp_job_t *job);

/* mkdir -p of dir/partition (partition may be ""). */
sl_err_t imp_make_dirs(const char *dir, const char *partition, sl_error_t *err);

#endif

/* Importers and the synthetic table generator (private to sluice: the CLI,
 * tests and benchmarks use it; docs/TABLES.md is the user's description).
 *
 *  - import   Criteo click-log TSV or jsonl files into a table partition.
 *             Input files are read in parallel, one thread per file (up to
 *             opts.threads); every input becomes its own data file, so the
 *             output depends only on the inputs and their order, never on
 *             thread timing. Files are written under hidden staging names
 *             and renamed to their final names only once every input has
 *             been read without a fatal error: an import adds all of its
 *             files or none, and a failed import removes the directories
 *             it made. Inputs may be gzip or zstd (decompressed on the fly,
 *             told by magic bytes); input that is not text is refused with
 *             one error (import_source.c).
 *  - gen      seeded synthetic tables with a known structure (sessions whose
 *             user features stay constant, per-sample item features), as a
 *             table or as a row iterator (benchmarks compare the same rows
 *             written as TSV).
 *
 * Thread rules: the progress callback runs on the calling thread; the
 * bad-row callback runs on the worker threads, one call at a time (it is
 * called under a lock). */
#ifndef SLUICE_WAREHOUSE_IMPORT_H
#define SLUICE_WAREHOUSE_IMPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "warehouse/warehouse.h"

typedef struct sl_wh_colmap sl_wh_colmap_t;
typedef struct sl_wh_colmap_resolved sl_wh_colmap_resolved_t;
typedef struct sl_wh_row_buf sl_wh_row_buf_t;
typedef void (*sl_wh_colmap_problem_fn)(void *ctx, const char *problem);

/* ==== import ====================================================================== */

typedef enum sl_wh_import_format {
    SL_WH_IMPORT_CRITEO = 1, /* label, I1..I13, C1..C26, tab separated */
    SL_WH_IMPORT_JSONL = 2,  /* one JSON object per line (sl_wh_row_to_json's form) */
    SL_WH_IMPORT_CSV = 3,    /* RFC 4180 CSV with a header row, through a column mapping */
    SL_WH_IMPORT_PARQUET = 4 /* Parquet files, through a column mapping (import_parquet.c) */
} sl_wh_import_format_t;

/* @return the format named "criteo", "jsonl", "csv" or "parquet", or 0. */
sl_wh_import_format_t sl_wh_import_format_parse(const char *name);

/* Counters handed to the progress callback (a consistent-enough snapshot:
 * each field is read atomically, not all together). */
typedef struct sl_wh_import_progress {
    uint64_t rows_read; /* lines holding a row (blank lines are not rows) */
    uint64_t rows_written;
    uint64_t rows_skipped;   /* bad rows */
    uint64_t bytes_in;       /* input bytes consumed */
    uint64_t bytes_in_total; /* sum of the input sizes; 0 when one is unknown (a pipe) */
    uint64_t bytes_out;      /* bytes of the data files completed so far */
    uint32_t files_done;
    uint32_t files_total;
    double seconds; /* since the import started */
} sl_wh_import_progress_t;

typedef void (*sl_wh_import_progress_fn)(void *ctx, const sl_wh_import_progress_t *progress);

/* A bad row: input is the name given in opts.inputs, line counts from 1,
 * message says what is wrong ("field 5 (I4): unparsable number 'x1'"). */
typedef void (*sl_wh_import_bad_row_fn)(void *ctx, const char *input, uint64_t line,
                                        const char *message);

typedef struct sl_wh_import_opts {
    sl_wh_import_format_t format;
    const char *const *inputs; /* [num_inputs] paths; "-" is standard input */
    uint32_t num_inputs;
    const char *table_dir; /* created (with the schema) when absent */
    const char *partition; /* "ds=2026-01-01" (nesting with '/'); NULL or "": the root */
    /* jsonl: the schema, as a JSON schema file (sl_wh_schema_from_json's
     * form) or as an object; both NULL: the existing table's schema, or one
     * inferred from the first infer_lines lines of the inputs. Criteo has a
     * fixed schema (sl_wh_criteo_schema). */
    const char *schema_path;
    const sl_wh_schema_t *schema; /* borrowed for the call */
    uint32_t infer_lines;         /* 0: 1000 (csv: records read to infer column types) */
    /* csv: the field delimiter (0: ','), and the column mapping (NULL: the
     * default, every column inferred; borrowed for the call). */
    char delimiter;
    const sl_wh_colmap_t *mapping;
    /* csv: each problem of the mapping against the input's columns, as
     * found (may be NULL; the error then lists as many as fit). */
    sl_wh_colmap_problem_fn on_mapping_problem;
    void *mapping_problem_ctx;
    /* csv: a plain (uncompressed) input file is cut into byte ranges of at
     * least this many bytes, parsed by threads in parallel, when there are
     * more threads than inputs (0: 4 MiB). */
    uint64_t range_min_bytes;
    /* The import is refused (and adds nothing) when it would write no row,
     * or when more than this fraction of the rows read are skipped as bad
     * (0: 0.01; 1 or more: any fraction but all). */
    double max_skipped_fraction;
    bool strict;      /* stop at the first bad row (the import then fails) */
    uint32_t threads; /* 0: min(inputs, online cores) */
    /* Clustering, storage dedup groups, stripe rows, zstd level, no_sync: as
     * given (overwrite is ignored: an import never replaces a file). */
    sl_wh_writer_opts_t writer;
    sl_wh_import_bad_row_fn on_bad_row; /* may be NULL */
    void *bad_row_ctx;
    uint32_t max_bad_row_messages;        /* per input file; 0: 100 */
    sl_wh_import_progress_fn on_progress; /* may be NULL */
    void *progress_ctx;
    double progress_interval; /* seconds between progress calls; 0: 0.2 */
    /* Every allocation of the import (the writers' too, unless
     * writer.allocator says otherwise); NULL: default. */
    const sl_allocator_t *allocator;
} sl_wh_import_opts_t;

/* Defaults: criteo, writer defaults, everything else zero. */
sl_wh_import_opts_t sl_wh_import_opts_default(void);

/* The first bad rows of an import, kept for a refusal's message. */
#define SL_WH_IMPORT_FIRST_BAD 5

typedef struct sl_wh_import_file {
    const char *input; /* borrowed from opts.inputs */
    char output[300];  /* data file relative to the table ("" when no row was good) */
    uint64_t rows_read, rows_written, rows_skipped;
    uint64_t bytes_in, bytes_out;
    uint64_t first_error_line;          /* 0: no bad row */
    char first_error[SL_ERROR_MSG_MAX]; /* "input:line: message" of the first bad row */
} sl_wh_import_file_t;

typedef struct sl_wh_import_summary {
    uint64_t rows_read, rows_written, rows_skipped;
    uint64_t bytes_in, bytes_out; /* input bytes; bytes of the data files written */
    uint32_t files_written;
    double seconds;
    uint32_t num_files;
    sl_wh_import_file_t *files; /* [num_files], one per input, in input order */
    const sl_allocator_t *allocator;
    /* The first bad rows, in input order: "input:line: why" */
    uint32_t num_first_bad;
    char first_bad[SL_WH_IMPORT_FIRST_BAD][SL_ERROR_MSG_MAX];
} sl_wh_import_summary_t;

/* Import opts->inputs into opts->table_dir/opts->partition. summary (may be
 * NULL) is filled even on failure, as far as the import got; free it with
 * sl_wh_import_summary_free. @return SL_OK (bad rows skipped are not an
 * error), SL_ERR_CORRUPT for the first bad row in strict mode (message
 * "input:line: ..."), SL_ERR_INVALID when the import is refused (no row
 * written, or more than opts.max_skipped_fraction skipped: the message
 * gives the counts and the first bad rows, "input:line: reason"), or the
 * error of a file, the schema or the table. On error no data file of this
 * import appears in the table, and what it created is removed. */
sl_err_t sl_wh_import(const sl_wh_import_opts_t *opts, sl_wh_import_summary_t *summary,
                      sl_error_t *err);

/* Free what sl_wh_import put in s (s itself is the caller's); NULL is fine. */
void sl_wh_import_summary_free(sl_wh_import_summary_t *s);

/* The Criteo schema: label "label", dense I1..I13, sparse C1..C26. Caller
 * owns, free with sl_wh_schema_destroy. */
sl_wh_schema_t *sl_wh_criteo_schema(const sl_allocator_t *a);

/* Infer a jsonl schema from the first max_lines lines of inputs (in order,
 * blank and unparsable lines skipped): labels, then features in the order
 * first seen, kind by the section they appear in. Caller owns *out.
 * @return SL_ERR_INVALID when no line holds a JSON object. */
sl_err_t sl_wh_jsonl_infer_schema(const char *const *inputs, uint32_t num_inputs,
                                  uint32_t max_lines, const sl_allocator_t *a, sl_wh_schema_t **out,
                                  sl_error_t *err);

/* ---- CSV (import_csv.c) ---- */

/* The header, column types and mapping of a CSV import. */
typedef struct sl_wh_csv sl_wh_csv_t;

/* Read the header of input ("-": standard input, whose first 64 KiB are
 * then kept for the import) and infer its columns' types from the next
 * infer_lines records (0: 1000); resolve mapping (NULL: the default, all
 * inferred) against them. Mapping problems go to problem (may be NULL).
 * Caller owns *out, free with sl_wh_csv_destroy. */
sl_err_t sl_wh_csv_open(const char *input, char delim, uint32_t infer_lines,
                        const sl_wh_colmap_t *mapping, const sl_allocator_t *a,
                        sl_wh_colmap_problem_fn problem, void *ctx, sl_wh_csv_t **out,
                        sl_error_t *err);
void sl_wh_csv_destroy(sl_wh_csv_t *c);
/* The resolved mapping (its schema is the table's), borrowed from c. */
const sl_wh_colmap_resolved_t *sl_wh_csv_mapping(const sl_wh_csv_t *c);
uint32_t sl_wh_csv_num_columns(const sl_wh_csv_t *c);

/* Parse one record (without its '\n'; a trailing '\r' is ignored) into
 * *row (arrays borrowed from b, a buffer of the mapping's schema). has[i]:
 * whether the record gave the sample id, session id, timestamp. @return
 * SL_ERR_CORRUPT naming the field ("field 3 (price): expected a number,
 * got 'x'", "5 fields, the header has 7"). */
sl_err_t sl_wh_csv_parse_record(const sl_wh_csv_t *c, sl_wh_row_buf_t *b, const char *rec,
                                size_t len, sl_wh_row_t *row, bool has[3], sl_error_t *err);

/* ---- Parquet (import_parquet.c) ---- */

/* The column mapping a Parquet import of input would use: its columns
 * (scalars, lists, a list of struct{id, weight} as one column) and mapping
 * (NULL: the default, all inferred) resolved against them; problems go to
 * problem (may be NULL). For `--print-mapping`. Caller owns *out, free
 * with sl_wh_colmap_resolved_destroy. */
sl_err_t sl_wh_parquet_mapping(const char *input, const sl_wh_colmap_t *mapping,
                               const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                               sl_wh_colmap_resolved_t **out, sl_error_t *err);

/* ---- line parsers (the import's inner loops; exposed for tests and fuzzing) ---- */

/* Parsed-row scratch sized for a schema: pass the same one to every call. */
typedef struct sl_wh_row_buf sl_wh_row_buf_t;

sl_wh_row_buf_t *sl_wh_row_buf_new(const sl_wh_schema_t *schema, const sl_allocator_t *a);
void sl_wh_row_buf_destroy(sl_wh_row_buf_t *b);

/* Parse one Criteo line (no '\n'; a trailing '\r' is ignored) into *row,
 * whose arrays are borrowed from b until the next call. The schema of b must
 * be sl_wh_criteo_schema's. sample_id, session_id and timestamp are left 0.
 * @return SL_ERR_CORRUPT with a message naming the field ("field 3 (I2):
 * unparsable number 'abc'"). */
sl_err_t sl_wh_criteo_parse_line(sl_wh_row_buf_t *b, const char *line, size_t len, sl_wh_row_t *row,
                                 sl_error_t *err);

/* Parse one jsonl line into *row (arrays borrowed from b). *has_sample_id
 * says whether the line named its sample id. */
sl_err_t sl_wh_jsonl_parse_line(sl_wh_row_buf_t *b, const char *line, size_t len, sl_wh_row_t *row,
                                bool *has_sample_id, sl_error_t *err);

/* ==== synthetic tables ================================================================== */

/* One generated feature. Per-session features keep their value for every
 * row of a session (user features); the others change per row (item
 * features). Ids follow a Zipf-like law over [0, vocab): low ranks are
 * common, scrambled so that frequent ids are not small numbers. */
typedef struct sl_wh_gen_feature {
    const char *name;
    sl_wh_kind_t kind;
    bool per_session;
    uint32_t min_len, max_len; /* list length uniform in [min_len, max_len]; dense: ignored */
    uint64_t vocab;            /* ids in [0, vocab); dense: the value scale */
    float missing;             /* dense: probability of a missing value; sparse: of an empty list */
    /* Ids are 32-bit hashes of their rank (Criteo's categorical values are)
     * instead of numbers below vocab; vocab still bounds the distinct ids. */
    bool hashed;
} sl_wh_gen_feature_t;

#define SL_WH_GEN_MAX_FEATURES 64

typedef struct sl_wh_gen_spec {
    const char *preset; /* "criteo", "sessions", or NULL for a custom spec */
    uint64_t rows;      /* in the whole table */
    uint64_t seed;
    uint32_t session_length;  /* mean samples per session (lengths uniform in [1, 2L-1]); 1: none */
    uint32_t active_sessions; /* sessions interleaved in arrival order (as logged) */
    uint32_t partitions;      /* ds=2026-01-01, ds=2026-01-02, ... (0: 1) */
    uint32_t files;           /* data files per partition (0: 1) */
    float positive_rate;      /* probability that the label is 1 */
    uint32_t num_features;
    sl_wh_gen_feature_t features[SL_WH_GEN_MAX_FEATURES];
} sl_wh_gen_spec_t;

/* Fill *spec with a preset ("criteo": 13 Criteo-like dense + 26 single-id
 * sparse features, no sessions; "sessions": user_id (1 id), user_hist (100
 * ids), user_cat (20 ids) constant within sessions of 16 samples, item_id,
 * item_cat, item_tags per sample, 4 dense, label "click"), with rows and
 * seed. @return SL_ERR_NOT_FOUND for another name. */
sl_err_t sl_wh_gen_preset(const char *name, uint64_t rows, uint64_t seed, sl_wh_gen_spec_t *spec,
                          sl_error_t *err);

/* The schema of spec's tables (partition key "ds"). Caller owns *out. */
sl_err_t sl_wh_gen_schema(const sl_wh_gen_spec_t *spec, const sl_allocator_t *a,
                          sl_wh_schema_t **out, sl_error_t *err);

/* Rows of file f of partition p, in arrival order: a pure function of
 * (spec, p, f). */
typedef struct sl_wh_gen_iter sl_wh_gen_iter_t;

sl_err_t sl_wh_gen_iter_new(const sl_wh_gen_spec_t *spec, uint32_t partition, uint32_t file,
                            const sl_allocator_t *a, sl_wh_gen_iter_t **out, sl_error_t *err);
/* The next row (borrowed until the next call); false at the end. */
bool sl_wh_gen_iter_next(sl_wh_gen_iter_t *it, sl_wh_row_t *row);
/* Rows this iterator yields in all. */
uint64_t sl_wh_gen_iter_rows(const sl_wh_gen_iter_t *it);
void sl_wh_gen_iter_destroy(sl_wh_gen_iter_t *it);

/* "ds=2026-01-01" + p days into buf. */
void sl_wh_gen_partition_name(uint32_t p, char *buf, size_t cap);

typedef struct sl_wh_gen_opts {
    sl_wh_writer_opts_t writer; /* overwrite replaces existing part files */
    uint32_t threads;           /* 0: online cores */
    /* Progress (rows_written, bytes_out, files_*; rows_read = rows_written). */
    sl_wh_import_progress_fn on_progress;
    void *progress_ctx;
    double progress_interval;
    const sl_allocator_t *allocator;
} sl_wh_gen_opts_t;

sl_wh_gen_opts_t sl_wh_gen_opts_default(void);

/* Write spec's table into dir (created with the schema; an existing table
 * must have the same schema): partitions x files data files named
 * part-NNNNN.slc, generated in parallel. stats (may be NULL) gets rows,
 * file_bytes and dedup counts summed. */
sl_err_t sl_wh_gen_table(const char *dir, const sl_wh_gen_spec_t *spec,
                         const sl_wh_gen_opts_t *opts, sl_wh_write_stats_t *stats, sl_error_t *err);

#endif

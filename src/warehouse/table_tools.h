/* The warehouse's tools over a whole table or file (warehouse.h is the
 * API they build on): verify (every checksum, then a full decode of every
 * stripe whose checksums passed; each problem reported with file, stripe
 * and stream) and inspect (a summary from the footers) in verify.c, cat
 * (rows as JSON lines) in cat.c. */
#ifndef SLUICE_WAREHOUSE_TABLE_TOOLS_H
#define SLUICE_WAREHOUSE_TABLE_TOOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "warehouse/warehouse.h"

/* One problem found by verify. Strings are borrowed for the callback. */
typedef struct sl_wh_problem {
    const char *file;   /* relative to the table dir (or the given name) */
    int64_t stripe;     /* -1: the file as a whole (header, footer, trailer) */
    const char *stream; /* "'name' kind", or NULL */
    sl_err_t code;
    const char *message; /* the whole message, file, stripe and stream included */
} sl_wh_problem_t;

typedef void (*sl_wh_problem_fn)(void *ctx, const sl_wh_problem_t *problem);

typedef struct sl_wh_verify_stats {
    uint32_t files;
    uint32_t bad_files;
    uint64_t stripes;
    uint64_t streams;
    uint64_t bytes; /* bytes checksummed */
    uint64_t rows;
    uint64_t problems;
} sl_wh_verify_stats_t;

/* Check the _schema and every data file of table dir: header, trailer,
 * footer, every stream's checksum (each mismatch is its own problem), then
 * decode every stripe whose checksums passed. problem (may be NULL) is
 * called for each problem. @return SL_OK when nothing is wrong; otherwise
 * the code of the first problem, whose message is in err. An unreadable
 * directory is an error without a problem report. */
sl_err_t sl_wh_verify_table(const char *dir, const sl_allocator_t *a, sl_wh_problem_fn problem,
                            void *ctx, sl_wh_verify_stats_t *stats, sl_error_t *err);
/* The same with the options of the store a table at an s3:// URL is read
 * through (as sl_wh_table_open_with; NULL: the defaults): every file is
 * read through the table's store. */
sl_err_t sl_wh_verify_table_with(const char *dir, const struct sl_store_opts *store,
                                 const sl_allocator_t *a, sl_wh_problem_fn problem, void *ctx,
                                 sl_wh_verify_stats_t *stats, sl_error_t *err);

/* The same for one data file (display_name NULL: path) or memory. */
sl_err_t sl_wh_verify_file(const char *path, const char *display_name, const sl_allocator_t *a,
                           sl_wh_problem_fn problem, void *ctx, sl_wh_verify_stats_t *stats,
                           sl_error_t *err);
sl_err_t sl_wh_verify_mem(const void *data, size_t len, const char *display_name,
                          const sl_wh_limits_t *limits, const sl_allocator_t *a,
                          sl_wh_problem_fn problem, void *ctx, sl_wh_verify_stats_t *stats,
                          sl_error_t *err);

/* Bytes of one feature (or id column / label) over the inspected files. */
typedef struct sl_wh_column_bytes {
    const char *name;
    const char *kind;      /* "dense", "sparse", "weighted", "label", "sample_id", ... */
    uint64_t values;       /* values stored (unique rows' under storage dedup) */
    uint64_t raw_bytes;    /* decoded size of its streams */
    uint64_t stored_bytes; /* bytes in the files */
} sl_wh_column_bytes_t;

typedef struct sl_wh_file_summary {
    const char *path; /* relative to the table dir */
    const char *partition;
    uint64_t rows;
    uint32_t stripes;
    uint64_t file_bytes;
    uint64_t footer_bytes;
    bool session_clustered;
    uint32_t *stripe_rows; /* [stripes] */
} sl_wh_file_summary_t;

typedef struct sl_wh_group_summary {
    const char *name;
    uint64_t rows;         /* rows of the files storing the group */
    uint64_t unique_rows;  /* unique rows stored */
    uint64_t stored_bytes; /* bytes of the group's streams, INVERSE included */
} sl_wh_group_summary_t;

typedef struct sl_wh_partition_summary {
    const sl_wh_partition_t *partition; /* borrowed from the table kept open */
    uint32_t files;
    uint64_t rows;
    uint64_t bytes;
} sl_wh_partition_summary_t;

typedef struct sl_wh_inspect {
    const char *dir;
    const sl_wh_schema_t *schema; /* borrowed from the table kept open */
    uint32_t num_partitions;      /* those passing the filter */
    sl_wh_partition_summary_t *partitions;
    uint32_t num_files;
    sl_wh_file_summary_t *files;
    uint32_t num_columns;
    sl_wh_column_bytes_t *columns; /* id columns, labels, features, inverse streams */
    uint32_t num_groups;
    sl_wh_group_summary_t *groups;
    uint64_t rows, stripes, file_bytes, raw_bytes, stored_bytes;
    double compression_ratio; /* raw_bytes / stored_bytes (1 when empty) */
    double dedup_ratio;       /* sum rows / sum unique rows over groups (1 without) */
    sl_wh_table_t *table;     /* kept open */
    sl_arena_t *arena;        /* owns the rest */
} sl_wh_inspect_t;

/* Summarise the table (partitions passing filter; NULL: all) from the
 * footers (no data is read). Caller owns *out, free with
 * sl_wh_inspect_destroy. */
sl_err_t sl_wh_inspect_table(const char *dir, const sl_wh_filter_t *filter, const sl_allocator_t *a,
                             sl_wh_inspect_t **out, sl_error_t *err);
/* The same with the options of the store a table at an s3:// URL is read
 * through (as sl_wh_table_open_with; NULL: the defaults). */
sl_err_t sl_wh_inspect_table_with(const char *dir, const struct sl_store_opts *store,
                                  const sl_wh_filter_t *filter, const sl_allocator_t *a,
                                  sl_wh_inspect_t **out, sl_error_t *err);
void sl_wh_inspect_destroy(sl_wh_inspect_t *ins);
/* As JSON (with every file's stripes when detail). Caller owns the result. */
json_t *sl_wh_inspect_to_json(const sl_wh_inspect_t *ins, bool detail);

typedef struct sl_wh_cat_opts {
    const char *const *features; /* NULL: all (as sl_wh_read_opts_t) */
    uint32_t num_features;
    const sl_wh_filter_t *filter; /* NULL: every partition */
    uint64_t limit;               /* rows to print; 0: all */
    const sl_allocator_t *allocator;
    const struct sl_store_opts *store; /* a table at an s3:// URL: its store's options (as
                                          sl_wh_table_open_with); NULL: the defaults */
} sl_wh_cat_opts_t;

/* Print the table's rows as JSON lines (sl_wh_row_to_json) to out, files in
 * table order. *rows_out (may be NULL) gets the rows printed. */
sl_err_t sl_wh_cat_table(const char *dir, const sl_wh_cat_opts_t *opts, FILE *out,
                         uint64_t *rows_out, sl_error_t *err);

#endif

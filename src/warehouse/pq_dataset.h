/* A Parquet dataset read in place as a job's source (docs/PARQUET.md, "As
 * a job source"): one `.parquet` file, or a directory of them whose folders
 * may be Hive partitions (`ds=2026-11-01/region=eu/part-0.parquet`).
 *
 *   sl_wh_pqds_open      list the files (sorted by path), keep those whose
 *                        Hive keys pass the partition filter, read the
 *                        first footer that reads (an unreadable file's
 *                        splits fail when read) and resolve the column
 *                        mapping against its columns: the job's schema
 *   sl_wh_pqds_plan      read every footer and cut splits: a split is a
 *                        row group, or consecutive row groups of one file
 *                        up to split_rows rows; row groups whose min/max
 *                        statistics prove that no row passes the job's
 *                        timestamp or label ranges are left out, counted
 *   sl_wh_pqds_reader_*  read rows [from, to) of a split: only the
 *                        projected columns' chunks, page by page, as
 *                        stripes converted a column at a time
 *                        (sl_wh_pqds_read_stripes, the worker's) or as
 *                        rows converted one at a time (sl_wh_pqds_read)
 *
 * A split (sl_wh_split_t) names its file relative to the dataset (path),
 * its Hive partition, the row groups [stripe_begin, stripe_end) and the
 * file row number of its first row; rows of a split are numbered in file
 * order. Sample ids a file does not give are (file index x 10^10) + the
 * row's number in its file from 1, as `sluice table import --format
 * parquet` numbers them for a table's first import.
 *
 * Bytes come through the parquet module's byte-range source
 * (sl_pq_source_t: a local file today). The dataset is read-only once
 * opened and planned; a reader is one thread's. */
#ifndef SLUICE_WH_PQ_DATASET_H
#define SLUICE_WH_PQ_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/column_map.h"
#include "warehouse/warehouse.h"

typedef struct sl_wh_pqds sl_wh_pqds_t;

/* Open the dataset at path. mapping: NULL infers every column.
 * partitions: a filter on the Hive keys (sl_wh_filter_parse syntax; NULL:
 * every file). Mapping problems go to problem (their JSON paths as the
 * mapping was parsed) and the return is SL_ERR_INVALID; a dataset with no
 * file is SL_ERR_NOT_FOUND; the columns come from the first file whose
 * footer reads, and when none does the first file's error is returned
 * (a bad footer SL_ERR_CORRUPT naming the file).
 * Caller owns *out, free with sl_wh_pqds_destroy. */
sl_err_t sl_wh_pqds_open(const char *path, const sl_wh_colmap_t *mapping, const char *partitions,
                         const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                         sl_wh_pqds_t **out, sl_error_t *err);
/* sl_wh_pqds_open with the options of the store a dataset at an s3://
 * URL is read through, its listing, footers and every later read alike
 * (store/store.h; NULL: the defaults; its alloc is a): a worker's or
 * master's request timeout and attempts. Ignored for a local path. */
struct sl_store_opts;
sl_err_t sl_wh_pqds_open_with(const char *path, const struct sl_store_opts *store,
                              const sl_wh_colmap_t *mapping, const char *partitions,
                              const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                              sl_wh_pqds_t **out, sl_error_t *err);
void sl_wh_pqds_destroy(sl_wh_pqds_t *ds);

/* The resolved mapping (its schema is the job's): borrowed until destroy. */
const sl_wh_colmap_resolved_t *sl_wh_pqds_mapping(const sl_wh_pqds_t *ds);
/* Files that passed the partition filter. */
uint32_t sl_wh_pqds_num_files(const sl_wh_pqds_t *ds);
/* Count the column chunks its readers fetch from a store in mem (NULL:
 * not counted; borrowed: must outlive ds). Call before any read. */
void sl_wh_pqds_set_mem(sl_wh_pqds_t *ds, const sl_wh_mem_t *mem);

/* The store a dataset at an s3:// URL was listed and planned through (its
 * counters), NULL for a path; borrowed until destroy. */
struct sl_store;
struct sl_store *sl_wh_pqds_store(const sl_wh_pqds_t *ds);

/* A range filter statistics can rule out: rows kept have lo <= value <= hi
 * with value the timestamp (label NULL) or the named label. */
typedef struct sl_wh_pqds_range {
    const char *label;
    double lo, hi;
} sl_wh_pqds_range_t;

typedef struct sl_wh_pqds_plan_stats {
    uint64_t row_groups;         /* of the files read */
    uint64_t row_groups_skipped; /* ruled out by statistics: never read */
    uint64_t rows_skipped;       /* their rows */
} sl_wh_pqds_plan_stats_t;

/* Cut the dataset into splits (split_rows >= 1), every file's footer read,
 * ranges[num_ranges] applied to the row groups' statistics (at most 16;
 * more filter rows but skip nothing). Caller owns *out, free with
 * sl_wh_splits_destroy; its paths are relative to the dataset, files is
 * the dataset's file count. @return SL_ERR_CORRUPT for a bad file (naming it), or a
 * file whose columns differ from the first's (SL_ERR_INVALID). */
sl_err_t sl_wh_pqds_plan(sl_wh_pqds_t *ds, uint64_t split_rows, const sl_wh_pqds_range_t *ranges,
                         uint32_t num_ranges, sl_wh_splits_t **out, sl_wh_pqds_plan_stats_t *stats,
                         sl_error_t *err);

/* A row of a split: its number in the split and its values (schema order,
 * sl_wh_row_t's rules; features not projected are empty or missing),
 * borrowed for the call. A non-OK return stops the read with it. */
typedef sl_err_t (*sl_wh_pqds_row_fn)(void *ctx, uint64_t row, const sl_wh_row_t *r,
                                      sl_error_t *err);

typedef struct sl_wh_pqds_reader sl_wh_pqds_reader_t;

/* A reader of ds's rows that reads only the columns of features[nf] (NULL:
 * every feature) and of the labels and id columns. Memory: per projected
 * leaf column one page (compressed and decompressed), its dictionary and
 * a batch of 4096 rows' values, plus one row. Caller owns *out, free with
 * sl_wh_pqds_reader_destroy. */
sl_err_t sl_wh_pqds_reader_new(const sl_wh_pqds_t *ds, const char *const *features, uint32_t nf,
                               sl_wh_pqds_reader_t **out, sl_error_t *err);
void sl_wh_pqds_reader_destroy(sl_wh_pqds_reader_t *r);
/* Transforms at decode (docs/WORKER.md): maps[i] maps the values of
 * feature i of the reader's projection (features[nf] of
 * sl_wh_pqds_reader_new; every feature in schema order when NULL), as
 * sl_wh_read_opts_t.maps does for a table: ids coming straight from an
 * INT64 column through the column's dictionary, once per column chunk
 * (raw ids still checked), other values one by one after their
 * conversion. Borrowed, must outlive r; NULL: none. */
void sl_wh_pqds_reader_set_maps(sl_wh_pqds_reader_t *r, const sl_wh_value_map_t *maps);
/* Decode and convert the columns of sl_wh_pqds_read_stripes on `threads`
 * threads: the caller's and threads - 1 helpers started here, each
 * decoding the projected column readers of a group of about the same cost
 * and converting their slots into the stripe, joined once a batch of rows
 * (docs/PARQUET.md "Decoding on several threads"); the same stripes and
 * errors as one thread. 0 or 1: the caller's thread alone (the default).
 * Between reads only. */
sl_err_t sl_wh_pqds_reader_set_threads(sl_wh_pqds_reader_t *r, uint32_t threads, sl_error_t *err);

/* Hand rows [from, to) of split sp (one of ds's plan) to fn, in order.
 * Errors name the file, row group, column and page. */
sl_err_t sl_wh_pqds_read(sl_wh_pqds_reader_t *r, const sl_wh_split_t *sp, uint64_t from,
                         uint64_t to, sl_wh_pqds_row_fn fn, void *ctx, sl_error_t *err);

/* Stripes of rows [from, to) of split sp in column form: rows [first,
 * end) of the split (stripe_rows each, the last one shorter), projected
 * as the reader's features in their order (dense ones in batch.dense,
 * the others in batch.sparse), sorted stably by session id within the
 * stripe, sample, session and timestamp columns set, no record times
 * (batch.record_ms NULL: rows of a file, batched as a table's).
 * The same values as sl_wh_pqds_read's rows, converted a column at a
 * time (docs/PARQUET.md, "Columnar conversion"). rows is borrowed for the
 * call, and *owned is the arena that holds all of it (names included):
 * fn may take it over (set *owned to NULL and free it later with
 * sl_arena_destroy, on any thread), and the next stripe then goes into a
 * new arena; left, it is reused. A non-OK return stops the read with
 * it. */
typedef sl_err_t (*sl_wh_pqds_stripe_fn)(void *ctx, const sl_wh_rows_t *rows, uint64_t first,
                                         uint64_t end, sl_arena_t **owned, sl_error_t *err);
sl_err_t sl_wh_pqds_read_stripes(sl_wh_pqds_reader_t *r, const sl_wh_split_t *sp, uint64_t from,
                                 uint64_t to, uint32_t stripe_rows, sl_wh_pqds_stripe_fn fn,
                                 void *ctx, sl_error_t *err);

#endif

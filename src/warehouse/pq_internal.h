/* Private to the Parquet importer (import_parquet.c) and its columnar
 * conversion (import_parquet_cols.c): the first input's columns, the
 * readers of one row group, and the conversion of their batches into rows
 * in column form (docs/PARQUET.md, "Columnar conversion"). */
#ifndef SLUICE_WH_PQ_INTERNAL_H
#define SLUICE_WH_PQ_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "import_internal.h"
#include "parquet/parquet.h"
#include "store/store.h"

/* Rows decoded per batch of each column. */
#define PQ_BATCH_ROWS 4096u

/* An input column: one Parquet leaf, or two (a list of struct{id, weight}). */
typedef struct pq_col {
    const char *name; /* borrowed from the first input's metadata */
    sl_wh_coltype_t type;
    int32_t physical, weight_physical;
} pq_col_t;

struct imp_pq {
    const sl_allocator_t *a;
    sl_arena_t *arena; /* the column lists */
    sl_pq_source_t src;
    sl_store_t *store;      /* the bucket of an s3:// input, else NULL */
    const sl_wh_mem_t *mem; /* counts an object's column chunks fetched (NULL: not counted) */
    bool own_store;         /* store was opened here (else a dataset's, borrowed) */
    sl_pq_file_t *first;
    uint32_t num_cols;
    pq_col_t *cols;
    sl_wh_input_column_t *input; /* [num_cols] for the mapping */
    sl_wh_colmap_resolved_t *map;
};

/* The readers of one row group: one per Parquet leaf the mapping uses. */
typedef struct group_read {
    uint32_t n;
    int32_t *leaf_of;          /* [num input cols x 2]: index into rd, or -1 */
    sl_pq_reader_t **rd;       /* [n] */
    const sl_pq_batch_t **bat; /* [n] */
    const sl_pq_column_t **col;
    /* close keeps the readers (rd[n..] past a close are readers to renew,
     * or NULL), so that the next group's reuse their buffers; the owner
     * of rd destroys them with imp_pq_free_readers */
    bool keep;
} group_read_t;

/* Open the readers of row group gi of f for the columns the slots with
 * slot_read[s] (NULL: every slot) read, checking that f has them with the
 * first input's types. g's arrays hold 2 x p->num_cols + 2 entries (rd's
 * zeroed before the first open). */
sl_err_t imp_pq_open_group(const imp_pq_t *p, const uint8_t *slot_read, sl_pq_file_t *f,
                           uint32_t gi, group_read_t *g, sl_error_t *err);
void imp_pq_close_group(group_read_t *g);
/* The next batch (at most PQ_BATCH_ROWS rows) of every reader of g, in
 * step: *rows is their count (0 at the row group's end); columns that
 * disagree are SL_ERR_CORRUPT naming input and row group gi. */
sl_err_t imp_pq_group_next(group_read_t *g, const char *input, uint32_t gi, uint32_t *rows,
                           sl_error_t *err);
/* Open input's byte source (pq_store.h: a file, or an object of p's
 * store), refusing an object whose ETag is not if_etag (NULL or "": any)
 * with SL_ERR_VERSION naming it. Close with wh_pq_source_close, also after
 * a failure. */
sl_err_t imp_pq_source_open(const imp_pq_t *p, const char *input, const char *if_etag,
                            sl_pq_source_t *src, sl_error_t *err);
/* Fetch the column chunks group g's readers will read, in parallel (an
 * object's source, pq_store.h; nothing for a file). */
sl_err_t imp_pq_prefetch_group(const imp_pq_t *p, sl_pq_source_t *src, const sl_pq_file_t *f,
                               uint32_t gi, const group_read_t *g, sl_error_t *err);
/* Destroy the n readers of rd kept by closes with keep (NULL entries
 * skipped). */
void imp_pq_free_readers(sl_pq_reader_t **rd, uint32_t n);

/* Slot s of b as a double (what a label, a dense value or a weight is
 * rounded from, so that every path rounds the same way). */
static inline double imp_pq_num_at(const sl_pq_batch_t *b, uint32_t s)
{
    return b->kind == SL_PQ_KIND_I64   ? (double)b->i64[s]
           : b->kind == SL_PQ_KIND_F32 ? (double)b->f32[s]
                                       : b->f64[s];
}

/* An id from slot s of b: an integer >= 0, or a string hashed with the
 * slot's seed. @return SL_ERR_CORRUPT naming col otherwise. */
sl_err_t imp_pq_id_at(const sl_wh_colmap_slot_t *sl, const char *col, const sl_pq_batch_t *b,
                      uint32_t s, int64_t *id, sl_error_t *err);

/* ---- rows in column form (import_parquet_cols.c) ---- */

/* A builder of rows in column form from row-group batches: per output
 * column one vector (ids, labels, dense values row-major as a batch holds
 * them, per sparse key its lengths and its ids), appended a run of rows
 * of a batch at a time, one slot at a time; no per-row lookup or
 * allocation. Memory: the rows since the last take (at most the caller's
 * flush size) plus one taken stripe, both reused. One thread's. */
typedef struct imp_pqc imp_pqc_t;

/* A builder of p's mapped rows: slots with slot_read[s] (NULL: every
 * slot) are converted; features[nf] is the projection in output order as
 * sl_kafka_rows_new takes it (NULL: every feature in schema order).
 * Caller owns *out, free with imp_pqc_destroy. */
sl_err_t imp_pqc_new(const imp_pq_t *p, const uint8_t *slot_read, const char *const *features,
                     uint32_t nf, imp_pqc_t **out, sl_error_t *err);
void imp_pqc_destroy(imp_pqc_t *c);
/* Transforms at decode (docs/WORKER.md): maps[i] (borrowed, must outlive
 * c; NULL: none) maps the values of the projection's feature i: ids as
 * their column's reader decodes them (a dictionary once per column chunk)
 * when they come straight from an INT64 column, else after the
 * conversion; dense values after the conversion (a missing one as NaN). */
void imp_pqc_set_maps(imp_pqc_t *c, const sl_wh_value_map_t *maps);
/* Decode each row group's readers on `threads` threads (this one and
 * threads - 1 helpers, import_parquet_par.c); 0 or 1: this thread alone
 * (the default). Between reads only. */
sl_err_t imp_pqc_set_threads(imp_pqc_t *c, uint32_t threads, sl_error_t *err);
/* Rows built since the last take. */
uint32_t imp_pqc_count(const imp_pqc_t *c);
/* The rows built so far as a stripe: by_session sorts them stably by
 * session id (as the Kafka row builder does for a worker), else they stay
 * in file order. Borrowed until the next take or destroy, and by a read's
 * on_full only until it returns (the read may build the next stripe in
 * place in the same arena, pq_cols_internal.h); the builder then holds no
 * rows. */
sl_err_t imp_pqc_take(imp_pqc_t *c, bool by_session, sl_wh_rows_t *out, sl_error_t *err);
/* The arena of the stripe the last take made: every buffer of it, names
 * included, lies there. A caller that takes it over (frees it with
 * sl_arena_destroy, maybe on another thread) says so with imp_pqc_disown
 * before the next take, which then builds its stripe in a new arena. */
sl_arena_t *imp_pqc_arena(const imp_pqc_t *c);
void imp_pqc_disown(imp_pqc_t *c);
/* An arena disowned and not taken over after all (NULL: none) handed back:
 * kept for the next stripe, whose builder may then reuse its chunk (one
 * kept, the rest freed). Takes ownership; may be called while the helper
 * threads work on c (it touches only the kept arena). */
void imp_pqc_give_back(imp_pqc_t *c, sl_arena_t *arena);

/* How to read: file rows [lo, hi) (0-based) of row groups [begin, end),
 * whose rows before begin are first_row; sample ids the file does not
 * give are id_base + the row's number from 1. Each time the builder holds
 * flush_rows rows on_full is called (next: the file row after the last
 * row built); a row the mapping cannot take goes to on_bad (line: its
 * number from 1) and is not built. A non-OK return of either stops the
 * read with it. */
typedef struct imp_pqc_read {
    const char *input;
    const char *if_etag; /* the ETag an object must have (NULL or "": any) */
    uint32_t begin, end;
    uint64_t first_row, lo, hi;
    int64_t id_base;
    uint32_t flush_rows;
    sl_err_t (*on_full)(void *ctx, uint64_t next, sl_error_t *err);
    sl_err_t (*on_bad)(void *ctx, uint64_t line, const sl_error_t *why, sl_error_t *err);
    /* Optional (both or neither), with threads (imp_pqc_set_threads): a
     * stripe full at the end of a batch whose row group has a next batch
     * is not given to on_full but taken (on_take: the caller takes the
     * rows and disowns their arena, so the next stripe is built in
     * another), then handed on (on_hand) on this thread while the helper
     * threads decode the next batch and convert it into the next stripe.
     * on_hand must touch nothing of c. */
    sl_err_t (*on_take)(void *ctx, uint64_t next, sl_error_t *err);
    sl_err_t (*on_hand)(void *ctx, sl_error_t *err);
    void *ctx;
    uint64_t reached; /* out: file rows the read went through (stops at the batch past hi) */
} imp_pqc_read_t;

/* Read as rd says into c (imp_pqc_new of p). Errors name the file, row
 * group, column and page (the reader's). */
sl_err_t imp_pqc_read(const imp_pq_t *p, imp_pqc_t *c, imp_pqc_read_t *rd, sl_error_t *err);

#endif

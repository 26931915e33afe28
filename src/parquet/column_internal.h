/* The column chunk reader's state, shared by column.c (pages, levels,
 * batches) and values.c (the value decoders). */
#ifndef SLUICE_PARQUET_COLUMN_INTERNAL_H
#define SLUICE_PARQUET_COLUMN_INTERNAL_H

#include "encoding.h"
#include "parquet.h"
#include "parquet_internal.h"

/* An I64 dictionary of more bytes than this (entries x 8) is kept narrow
 * where its entries allow (values.c): one that fits the L1 cache gains
 * nothing from it. */
#define SL_PQ_NARROW_DICT_MIN (16u << 10)

/* A dictionary of at most this many bytes is prefetched whole before a
 * batch's gathers from it (values.c, warm_dict): half the L2 cache. */
#define SL_PQ_WARM_DICT_MAX (256u << 10)

/* Levels decoded at a time (the reader's level scratch). */
#define SL_PQ_LEVEL_CHUNK 4096u

/* A buffer of the reader's allocator that only grows. */
typedef struct sl_pq_buf {
    void *p;
    size_t cap; /* bytes */
} sl_pq_buf_t;

struct sl_pq_scratch {
    const sl_allocator_t *a;
    sl_pq_buf_t page;       /* stored bytes of a page decompressed at once */
    struct ZSTD_DCtx_s *zd; /* made on the first ZSTD page */
};

struct sl_pq_reader {
    sl_pq_file_t *f;
    sl_pq_scratch_t *scratch; /* shared with other readers, or NULL */
    const sl_allocator_t *a;
    uint32_t rg, col;
    const sl_pq_column_t *c;
    const sl_pq_chunk_t *ch;
    bool is_list;         /* the shape of the output buffers (with b.kind), for renew */
    uint64_t pos, end;    /* the chunk's bytes not yet read */
    int64_t chunk_values; /* num_values not yet seen in a page header */
    int64_t rows_read;
    uint64_t pages, page_offset;
    sl_pq_buf_t hdr, cbuf, ubuf;
    struct ZSTD_DCtx_s *zd; /* ZSTD pages' context, made on the first one */

    /* the dictionary, decoded */
    bool has_dict;
    uint32_t dict_n;
    sl_pq_buf_t dict_vals; /* int64 / float / double per entry, or the bytes */
    sl_pq_buf_t dict_off;  /* BYTES: dict_n + 1 offsets */
    /* An I64 dictionary larger than the L1 cache whose entries (mapped)
     * all fit in 32 bits is gathered from a copy of 32-bit entries
     * (values.c, dict_done): the indices of a batch hit random entries,
     * and half the bytes is about half the cache misses. */
    bool dict_narrow;
    sl_pq_buf_t dict_i32;
    bool dict_warm; /* the dictionary was prefetched in this batch (values.c) */
    /* sl_pq_reader_set_map: I64 values mapped before they reach a batch */
    sl_pq_i64_map_fn map;
    sl_pq_f32_map_fn map_f32; /* sl_pq_reader_set_map_f32: F32 values */
    const void *map_ctx;
    bool dense; /* sl_pq_reader_set_dense */

    /* the current data page */
    bool in_page;
    uint32_t page_left; /* levels not yet decoded */
    int encoding;
    sl_pq_rle_t def, rep;
    const uint8_t *vp, *vend; /* its values section */
    uint64_t bit;             /* PLAIN BOOLEAN: next bit of vp */
    sl_pq_rle_t vrle;         /* dictionary indices, RLE booleans */
    sl_pq_delta_t delta;
    sl_pq_buf_t lens, prefix; /* int64 per value: DELTA_LENGTH / DELTA_BYTE_ARRAY */
    uint32_t lens_n, lens_pos;
    const uint8_t *data; /* their bytes */
    sl_pq_buf_t prev;    /* DELTA_BYTE_ARRAY: the previous value */
    size_t prev_len;
    uint64_t bss_count, bss_pos;

    /* level scratch */
    uint8_t lv_def[SL_PQ_LEVEL_CHUNK], lv_rep[SL_PQ_LEVEL_CHUNK]; /* levels fit: depth <= 64 */
    uint32_t idx[SL_PQ_LEVEL_CHUNK];
    uint32_t lv_len, lv_pos;
    /* A list column whose definition levels take at most 2 bits (every
     * list layout but a list nested in optional structs) and whose
     * repetition levels take 1 keeps its levels as bit masks instead
     * (levels.c): bit i of pl_s says level i starts a row, of pl_e that it
     * is an element, of pl_v a valid one, of pl_l that its row's list is
     * not null. One word more than the levels need, so that 64 bits from
     * any level are two loads. */
    bool planes;
    uint64_t pl_s[SL_PQ_LEVEL_CHUNK / 64 + 1], pl_e[SL_PQ_LEVEL_CHUNK / 64 + 1],
        pl_v[SL_PQ_LEVEL_CHUNK / 64 + 1], pl_l[SL_PQ_LEVEL_CHUNK / 64 + 1];
    /* Tests only: the list pass goes one level at a time, never 64 at once
     * (the two must give the same batches). */
    bool level_by_level;
    /* Tests only: the list pass from level masks without popcnt. */
    bool no_popcnt;

    /* output */
    sl_pq_batch_t b;
    size_t slots_cap, rows_cap, bytes_cap, bytes_len;
};

/* Grow buf to at least n bytes (contents kept). @return false when out of
 * memory. */
bool sl_pq_buf_reserve(const sl_allocator_t *a, sl_pq_buf_t *buf, size_t n);
/* The same for a buffer about to be overwritten: its contents are not
 * copied (a page's bytes, a dictionary), only its room grown. */
bool sl_pq_buf_fit(const sl_allocator_t *a, sl_pq_buf_t *buf, size_t n);

/* values.c: set up the value decoder of the page whose values section is
 * [p, p + len) and whose header said num_values levels. */
sl_err_t sl_pq_values_begin(sl_pq_reader_t *r, const uint8_t *p, size_t len, uint32_t num_values,
                            sl_error_t *err);
/* Decode n values densely into output slots [at, at + n) (BYTES: appended
 * to the bytes, b.bytes_off[at + 1 ..] set). */
sl_err_t sl_pq_values_get(sl_pq_reader_t *r, uint32_t at, uint32_t n, sl_error_t *err);
/* Decode a PLAIN dictionary page of n entries from [p, p + len). */
sl_err_t sl_pq_dict_load(sl_pq_reader_t *r, const uint8_t *p, size_t len, uint32_t n,
                         sl_error_t *err);
/* Whether c's PLAIN dictionary bytes are its decoded entries (INT64,
 * FLOAT, DOUBLE on a little-endian machine): decompressed straight into
 * r->dict_vals, then taken by sl_pq_dict_set. */
bool sl_pq_dict_in_place(const sl_pq_column_t *c);
/* The n entries of a PLAIN dictionary page of len bytes already in
 * r->dict_vals (sl_pq_dict_in_place). */
sl_err_t sl_pq_dict_set(sl_pq_reader_t *r, size_t len, uint32_t n, sl_error_t *err);
/* Room for n more bytes of output. */
sl_err_t sl_pq_bytes_reserve(sl_pq_reader_t *r, size_t n, sl_error_t *err);

/* column.c: room for n slots in the batch (contents kept). */
sl_err_t sl_pq_reserve_slots(sl_pq_reader_t *r, size_t n, sl_error_t *err);

/* The bits needed to hold v (0 for 0). */
static inline unsigned sl_pq_bit_width(unsigned v)
{
    unsigned w = 0;
    while (v >> w)
        w++;
    return w;
}

/* column.c: prefixes err's message with where r is: file, row group,
 * column, page and its offset. @return err's code. */
sl_err_t sl_pq_where(sl_pq_reader_t *r, sl_error_t *err);
/* page.c: read pages until a data page is set up (dictionary pages loaded
 * on the way). *done: the chunk has no more pages. */
sl_err_t sl_pq_page_load(sl_pq_reader_t *r, bool *done, sl_error_t *err);
/* levels.c: decode the next SL_PQ_LEVEL_CHUNK levels of the page into
 * r->lv_def and r->lv_rep (checked against the maxima). */
sl_err_t sl_pq_levels_refill(sl_pq_reader_t *r, sl_error_t *err);
/* levels.c: while the repetition levels are a repeated run of 0 and the
 * definition levels a repeated run of one level, *k rows (0: not such
 * runs) go into the batch at once, straight from the runs (see there). */
sl_err_t sl_pq_whole_rows(sl_pq_reader_t *r, uint32_t max_rows, uint32_t *k, uint32_t *nvals,
                          sl_error_t *err);
/* levels.c: whether the list pass of r's column goes over level planes
 * (r->planes; never for a reader taking one level at a time). */
bool sl_pq_levels_planar(const sl_pq_reader_t *r);
/* levels.c: the list pass over the level planes from r->lv_pos into r's
 * batch (room reserved for every level left), stopping before the row
 * that would make it over max_rows (*full then set); *nvals: the valid
 * elements added. */
void sl_pq_list_planes(sl_pq_reader_t *r, uint32_t max_rows, uint32_t *nvals, bool *full);
/* levels.c: the list pass over 64 levels D, R at once (see there). */
void sl_pq_list_block64(const uint8_t *D, const uint8_t *R, uint8_t ed, uint8_t md,
                        uint32_t *rows_p, uint32_t *slots_p, uint32_t *nvals_p, uint32_t *loff,
                        uint8_t *lvalid, uint8_t *valid);

#endif

/* Parquet's value and level encodings that need state (docs/PARQUET.md):
 * the RLE/bit-packed hybrid (levels, booleans, dictionary indices),
 * DELTA_BINARY_PACKED (integers; the lengths of the delta byte-array
 * encodings) and BYTE_STREAM_SPLIT. Each decoder is a cursor over one
 * page's bytes that hands out values on demand, so a page is never
 * expanded whole; none reads past its buffer: a run or block that would is
 * an error saying so. column.c puts file, row group, column and page in
 * front of their messages. */
#ifndef SLUICE_PARQUET_ENCODING_H
#define SLUICE_PARQUET_ENCODING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/err.h"

/* The bits [bitpos, bitpos + w) of buf (little-endian bit order, as
 * Parquet packs), w in [0, 64]; the caller has checked they are inside
 * len bytes. */
uint64_t sl_pq_bits(const uint8_t *buf, size_t len, uint64_t bitpos, unsigned w);

/* ---- RLE / bit-packed hybrid ---- */

typedef struct sl_pq_rle {
    const uint8_t *p, *end;
    unsigned width;     /* bits per value, 0..32 */
    uint32_t left;      /* values left in the current run */
    bool packed;        /* the current run is bit-packed (else repeated) */
    uint32_t value;     /* a repeated run's value */
    const uint8_t *run; /* a bit-packed run's bytes */
    size_t run_len;
    uint64_t run_pos; /* next value's index in the bit-packed run */
    /* only the baseline x86-64's instructions (no pext, no AVX2), whatever
     * the CPU has: for tests, which compare both ways */
    bool plain;
} sl_pq_rle_t;

/* A decoder over len bytes (no length prefix: the caller strips the
 * 4-byte one of v1 levels and RLE booleans). */
void sl_pq_rle_init(sl_pq_rle_t *r, const uint8_t *p, size_t len, unsigned width);
/* Decode exactly n values into out. @return SL_OK, or SL_ERR_TRUNCATED /
 * SL_ERR_CORRUPT when the runs end first or are malformed. */
sl_err_t sl_pq_rle_get(sl_pq_rle_t *r, uint32_t *out, uint32_t n, sl_error_t *err);
/* The same values into bytes, for a width of at most 8 bits (levels:
 * a schema is at most 64 deep); SL_ERR_INVALID for a wider one. */
sl_err_t sl_pq_rle_get_u8(sl_pq_rle_t *r, uint8_t *out, uint32_t n, sl_error_t *err);
/* Levels of width 1 or 2 as bit planes: bit at + i of p0 is bit 0 of
 * value i of the next n, of p1 its bit 1 (p1 unused at width 1). ORed in:
 * the caller zeroes the planes (room for bits at..at + n). A repeated run
 * is a fill of a bit range, a bit-packed run is its packed bits moved
 * (width 1) or split into their even and odd bits (width 2), up to 56
 * bits of the run a load. SL_ERR_INVALID for another width; the errors of
 * sl_pq_rle_get otherwise. */
sl_err_t sl_pq_rle_get_bits(sl_pq_rle_t *r, uint64_t *p0, uint64_t *p1, uint32_t at, uint32_t n,
                            sl_error_t *err);
/* *count: the values left in the current run when it is a repeated one
 * (the next run is started when the current one is used up), *value its
 * value; *count 0 when the run is bit-packed. @return SL_OK, or the next
 * run's error (as sl_pq_rle_get would give it). */
sl_err_t sl_pq_rle_repeated(sl_pq_rle_t *r, uint32_t *count, uint32_t *value, sl_error_t *err);
/* Pass over n values of the current repeated run (n <= its count). */
static inline void sl_pq_rle_skip(sl_pq_rle_t *r, uint32_t n)
{
    r->left -= n;
}
/* Decode n definition levels (each at most max) straight into validity
 * bytes (level == max); *nvalid counts the valid ones. A repeated run is
 * one memset. SL_ERR_CORRUPT names a level above max. */
sl_err_t sl_pq_rle_valid(sl_pq_rle_t *r, uint32_t max, uint8_t *valid, uint32_t n, uint32_t *nvalid,
                         sl_error_t *err);
/* Decode n dictionary indices and store dict[index] into out, in one
 * pass (one function per entry type). SL_ERR_CORRUPT names an index >=
 * dict_n. */
sl_err_t sl_pq_rle_gather_f32(sl_pq_rle_t *r, const float *dict, uint32_t dict_n, float *out,
                              uint32_t n, sl_error_t *err);
sl_err_t sl_pq_rle_gather_f64(sl_pq_rle_t *r, const double *dict, uint32_t dict_n, double *out,
                              uint32_t n, sl_error_t *err);
sl_err_t sl_pq_rle_gather_i64(sl_pq_rle_t *r, const int64_t *dict, uint32_t dict_n, int64_t *out,
                              uint32_t n, sl_error_t *err);
/* The same for an INT64 dictionary kept narrow (every entry fits in 32
 * bits): dict[index] widened to 64 bits. Half the cache lines of the
 * 64-bit entries for the same gather. */
sl_err_t sl_pq_rle_gather_i32_i64(sl_pq_rle_t *r, const int32_t *dict, uint32_t dict_n,
                                  int64_t *out, uint32_t n, sl_error_t *err);

/* ---- DELTA_BINARY_PACKED ---- */

typedef struct sl_pq_delta {
    const uint8_t *p, *end;
    uint64_t block_size, miniblocks, mb_values;
    uint64_t total, left; /* values in the stream; not yet handed out */
    uint64_t last;        /* previous value (wrapping arithmetic) */
    bool first_out;       /* the header's first value has been handed out */
    uint64_t min_delta;
    const uint8_t *widths; /* the current block's miniblock bit widths */
    uint64_t mb_index;     /* the current miniblock in its block */
    uint64_t mb_left;      /* values left in the current miniblock */
    const uint8_t *mb;     /* its bytes */
    size_t mb_bytes;
    unsigned mb_width;
    uint64_t mb_pos;
    uint64_t block_left; /* values left in the current block */
} sl_pq_delta_t;

/* Read the stream header (block size, miniblocks, count, first value). */
sl_err_t sl_pq_delta_init(sl_pq_delta_t *d, const uint8_t *p, size_t len, sl_error_t *err);
/* Decode exactly n values (n <= d->left) into out. */
sl_err_t sl_pq_delta_get(sl_pq_delta_t *d, int64_t *out, uint64_t n, sl_error_t *err);
/* Where the stream ends, once every value has been handed out (the bytes
 * that follow: DELTA_LENGTH_BYTE_ARRAY's data). */
const uint8_t *sl_pq_delta_end(const sl_pq_delta_t *d);

/* ---- BYTE_STREAM_SPLIT ---- */

/* Values [first, first + n) of a stream of count values of width bytes
 * (data is count * width bytes): byte k of value i is data[k * count + i].
 * out gets n * width bytes, each value's bytes in order. */
void sl_pq_bss_get(const uint8_t *data, uint64_t count, unsigned width, uint64_t first, uint64_t n,
                   uint8_t *out);

#endif

/* Private to the data file reader (reader.c), its stripe decode
 * (reader_stripe.c) and its read-ahead (reader_ahead.c): the reader's
 * state. */
#ifndef SLUICE_WH_READER_INTERNAL_H
#define SLUICE_WH_READER_INTERNAL_H

#include "wh_internal.h"

typedef struct ogroup {
    uint32_t g;        /* file group index */
    uint32_t nk;       /* projected features of the group */
    uint32_t *feat;    /* [nk] schema feature indices */
    const char **keys; /* [nk] */
    bool weighted;
    wh_buf_t len, vals, w, inv;
    sl_ikjt_t ikjt;
} ogroup_t;

struct sl_wh_reader {
    const sl_allocator_t *a;
    wh_file_t *f;
    uint32_t skip;
    bool verify, dedup_form;
    bool blk; /* opts.block_offsets */
    uint64_t gap;
    /* projection */
    uint32_t nd, nk, ng, T;
    uint32_t *dense_feat;
    const char **dense_names;
    uint32_t *key_feat;
    const char **keys;
    int32_t *key_og, *key_kk;       /* plain key -> (group, its key) when expanded */
    const sl_wh_value_map_t **fmap; /* [schema features]: the map of its values, or NULL */
    bool kweighted;
    ogroup_t *og;
    const char **label_names;
    /* buffers, reused across stripes */
    wh_buf_t rbuf, ustart;
    wh_buf_t dcols; /* dense columns one after the other, before the transpose */
    wh_buf_t sid, sess, ts, labels, dense, klen, kvals, kw, ksum, koff;
    wh_buf_t kblk;          /* rows.block_offsets */
    wh_dec_t dec;           /* decoder state: scratch, zstd context, stream pointers */
    wh_buf_t sptr;          /* const uint8_t *[streams of the stripe] + need flags */
    wh_buf_t ranges;        /* sl_store_range_t[streams of the stripe]: an object's reads */
    wh_ahead_t *ahead;      /* an object's read-ahead, made at the first sequential stripe */
    const sl_wh_mem_t *mem; /* counts the read-ahead's bytes and rbuf's (NULL: not counted) */
    uint64_t read_held;     /* rbuf's bytes taken from mem for the stripe being read */
    uint32_t last_stripe;   /* fetched last (UINT32_MAX: none) */
    uint32_t stride;        /* the read-ahead's step (opts.ahead_stride, at least 1) */
    uint64_t stripe_bytes;
    sl_wh_rows_t rows;
    sl_ikjt_t *ikjts;
    uint32_t begin, end, next;
    uint32_t ahead_end; /* sl_wh_reader_set_ahead_end's (end by default) */
    sl_wh_read_stats_t stats;
    uint64_t data_bytes;
};

/* reader_stripe.c: fetch stripe s's projected streams (charging the read
 * buffer to r->mem, given back by the caller) and decode them into the
 * reader's output tensors; *rows borrowed until the next stripe. */
sl_err_t wh_reader_decode_stripe(sl_wh_reader_t *r, uint32_t s, const sl_wh_rows_t **rows,
                                 sl_error_t *err);

/* The need flags (need[streams of stripe s]) of the projection. */
void wh_reader_stripe_need(const sl_wh_reader_t *r, uint32_t s, uint8_t *need);

/* After an object's stripe s was fetched: when the reader goes through
 * the file in order (s follows the stripe fetched before it, or s is the
 * first of its range and ahead_end says s + stride is read too), queue the
 * fetch of stripe s + 1, coalesced as the reader's fetch lays it out,
 * into the read-ahead (made then). Uses r->ranges (stripe s's are read by
 * now). */
void wh_reader_read_ahead(sl_wh_reader_t *r, uint32_t s);

#endif

/* Private to the writer (writer.c: open, append, footer, commit;
 * writer_stripe.c: ordering, dedup and encoding of one stripe): the writer's
 * state and the helpers both halves use. */
#ifndef SLUICE_WRITER_INTERNAL_H
#define SLUICE_WRITER_INTERNAL_H

#include "wh_internal.h"

#include <zstd.h>

#define WBUF_BYTES (1u << 20)

typedef struct wmeta {
    const char *name;
    uint8_t kind, codec, encoding, width, bits;
    int64_t base, delta_base;
    uint64_t dict_size, dict_bytes;
    uint64_t offset, stored, raw, count, checksum;
    bool has_int, has_float;
    int64_t imin, imax;
    float fmin, fmax;
} wmeta_t;

typedef struct wstripe {
    uint64_t first_row, offset, length;
    uint32_t rows, first_meta, num_meta;
} wstripe_t;

typedef struct wcol {
    int32_t *len; /* [cap] */
    wh_buf_t ids; /* int64 */
    wh_buf_t w;   /* float, weighted features only */
    uint64_t nids;
    bool weighted;
} wcol_t;

typedef struct wgroup {
    const char *name; /* copied into the writer's arena */
    uint32_t num;
    uint32_t *slots;    /* sparse slots */
    const char **names; /* feature names */
} wgroup_t;

/* The rows of the stripe being written, after ordering. */
typedef struct sview {
    uint32_t n;
    const int64_t *sid, *sess, *ts;
    const float *labels, *dense; /* column c at + c * stride */
    size_t stride;
    const int32_t **len;
    const int64_t **ids;
    const float **w;
    uint64_t *nids;
} sview_t;

struct sl_wh_writer {
    const sl_allocator_t *a;
    sl_wh_schema_t *schema;
    sl_wh_writer_opts_t opts;
    char *path, *tmp;
    int fd;
    sl_err_t failed;
    sl_error_t fail_err;
    uint64_t file_off;
    wh_buf_t wbuf;
    size_t wlen;

    uint32_t T, D, S, cap, n;
    uint64_t rows_total;
    int64_t *sid, *sess, *ts;
    float *labels, *dense;
    wcol_t *cols;

    uint32_t G;
    wgroup_t *groups;
    int32_t *slot_group; /* [S] */
    uint32_t *unique;    /* [stripes * G], grown with stripes */
    uint64_t *group_unique_total;
    sl_dedup_t *dedup;
    /* [G] while sl_wh_writer_append_stripe writes its stripe: each group's
     * IKJT as the caller gave it, stored instead of deduplicated (borrowed) */
    const sl_ikjt_t *given;
    sl_arena_t *arena; /* per-stripe scratch, reset after every stripe */
    sl_arena_t *keep;  /* names that live as long as the writer */

    wh_buf_t enc, comp;
    wh_buf_t scratch[6]; /* choosing an encoding (writer_encode.c) */
    ZSTD_CCtx *cctx;

    wmeta_t *meta;
    uint32_t nmeta, cap_meta;
    wstripe_t *stripes;
    uint32_t nstripes, cap_stripes;
    sl_wh_write_stats_t stats;
};

/* Record the first failure in w (later calls return it) and in err.
 * @return code. */
sl_err_t wh_writer_fail(sl_wh_writer_t *w, sl_error_t *err, sl_err_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Append bytes to the file (buffered). */
sl_err_t wh_writer_put(sl_wh_writer_t *w, const void *data, size_t len, sl_error_t *err);

/* Encode (choosing the encoding for format version 2, docs/FORMAT.md
 * section 10), compress when that pays, checksum and append one stream of
 * count values: integers (is64: int64, else int32) or floats. */
sl_err_t wh_writer_emit_ints(sl_wh_writer_t *w, uint8_t kind, const char *name, const void *vals,
                             uint64_t count, bool is64, sl_error_t *err);
sl_err_t wh_writer_emit_floats(sl_wh_writer_t *w, uint8_t kind, const char *name, const float *vals,
                               uint64_t count, sl_error_t *err);
/* Append a stream's stored bytes as they are (a bitmap). */
sl_err_t wh_writer_emit_bytes(sl_wh_writer_t *w, uint8_t kind, const char *name, const void *raw,
                              size_t raw_size, uint64_t count, sl_error_t *err);

/* Order, deduplicate, encode and write the rows held (if any) as one stripe,
 * then empty the stripe builder. */
sl_err_t wh_writer_flush_stripe(sl_wh_writer_t *w, sl_error_t *err);

#endif

/* The value decoders of a data page (column_internal.h): PLAIN, the
 * dictionary encodings, RLE booleans, DELTA_BINARY_PACKED,
 * DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY and BYTE_STREAM_SPLIT, into
 * the typed output arrays of sl_pq_batch_t. Every read is checked against
 * the page's values section; running past it is an error saying which. */
#include <string.h>

#include "column_internal.h"
#include "common/fileio.h"
#include "common/mem.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        sl_err_t rc_ = (x);                                                                        \
        if (rc_ != SL_OK) return rc_;                                                              \
    } while (0)

/* Julian day of 1970-01-01: INT96 timestamps count days from the Julian epoch. */
#define JULIAN_EPOCH 2440588

bool sl_pq_buf_reserve(const sl_allocator_t *a, sl_pq_buf_t *buf, size_t n)
{
    if (n <= buf->cap) return true;
    size_t cap = buf->cap ? buf->cap : 256;
    while (cap < n)
        cap = cap > SIZE_MAX / 2 ? n : cap * 2;
    void *p = sl_realloc(a, buf->p, buf->cap, cap);
    if (p == NULL) return false;
    buf->p = p;
    buf->cap = cap;
    return true;
}

bool sl_pq_buf_fit(const sl_allocator_t *a, sl_pq_buf_t *buf, size_t n)
{
    if (n <= buf->cap) return true;
    size_t cap = buf->cap ? buf->cap : 256;
    while (cap < n)
        cap = cap > SIZE_MAX / 2 ? n : cap * 2;
    /* freed first: the allocator may hand the same pages back */
    sl_free(a, buf->p, buf->cap);
    buf->p = sl_alloc(a, cap);
    buf->cap = buf->p != NULL ? cap : 0;
    return buf->p != NULL;
}

sl_err_t sl_pq_bytes_reserve(sl_pq_reader_t *r, size_t n, sl_error_t *err)
{
    if (n > SIZE_MAX - r->bytes_len)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "batch bytes overflow");
    if (r->bytes_len + n <= r->bytes_cap) return SL_OK;
    sl_pq_buf_t b = {r->b.bytes, r->bytes_cap};
    if (!sl_pq_buf_reserve(r->a, &b, r->bytes_len + n))
        return sl_error_set(err, SL_ERR_NOMEM, "out of memory for %zu bytes of values",
                            r->bytes_len + n);
    r->b.bytes = b.p;
    r->bytes_cap = b.cap;
    return SL_OK;
}

static unsigned plain_width(const sl_pq_column_t *c)
{
    switch (c->type) {
    case SL_PQ_INT32:
    case SL_PQ_FLOAT:
        return 4;
    case SL_PQ_INT64:
    case SL_PQ_DOUBLE:
        return 8;
    case SL_PQ_INT96:
        return 12;
    case SL_PQ_FIXED_LEN_BYTE_ARRAY:
        return (unsigned)c->type_length;
    default:
        return 0;
    }
}

/* An int64 output value from the fixed-width bytes of one value. */
static int64_t int_of(const sl_pq_column_t *c, const uint8_t *p)
{
    switch (c->type) {
    case SL_PQ_INT32: {
        uint32_t u = sl_le_get_u32(p);
        return c->is_unsigned ? (int64_t)u : (int64_t)(int32_t)u;
    }
    case SL_PQ_INT64:
        return (int64_t)sl_le_get_u64(p);
    case SL_PQ_INT96: {
        /* nanoseconds of the day, then the Julian day */
        int64_t nanos = (int64_t)sl_le_get_u64(p);
        int64_t day = (int64_t)(int32_t)sl_le_get_u32(p + 8);
        return (int64_t)((uint64_t)(day - JULIAN_EPOCH) * UINT64_C(86400000000000) +
                         (uint64_t)nanos);
    }
    default:
        return 0;
    }
}

/* Store one fixed-width value (PLAIN bytes) at output slot s. */
static void put_fixed(sl_pq_reader_t *r, uint32_t s, const uint8_t *p)
{
    switch (r->c->kind) {
    case SL_PQ_KIND_F32:
        memcpy(&r->b.f32[s], p, 4);
        break;
    case SL_PQ_KIND_F64:
        memcpy(&r->b.f64[s], p, 8);
        break;
    default:
        r->b.i64[s] = int_of(r->c, p);
    }
}

/* Append len bytes as the value of slot s (dense order). */
static sl_err_t put_bytes(sl_pq_reader_t *r, uint32_t s, const uint8_t *p, size_t len,
                          sl_error_t *err)
{
    TRY(sl_pq_bytes_reserve(r, len, err));
    if (len) memcpy(r->b.bytes + r->bytes_len, p, len);
    r->bytes_len += len;
    r->b.bytes_off[s + 1] = r->bytes_len;
    return SL_OK;
}

/* Whether the n I64 entries of r->dict_vals all fit in 32 bits; then they
 * are copied into r->dict_i32 (no memory for it: kept wide). One pass
 * over the dictionary, once a chunk. */
static bool narrow_dict(sl_pq_reader_t *r, uint32_t n)
{
    const int64_t *d = r->dict_vals.p;
    int64_t bad = 0;
    /* x fits when x + 2^31, taken unsigned, is below 2^32 */
    for (uint32_t i = 0; i < n; i++)
        bad |= (int64_t)(((uint64_t)d[i] + (UINT64_C(1) << 31)) >> 32);
    if (bad != 0 || !sl_pq_buf_fit(r->a, &r->dict_i32, (size_t)n * 4)) return false;
    int32_t *o = r->dict_i32.p;
    for (uint32_t i = 0; i < n; i++)
        o[i] = (int32_t)d[i];
    return true;
}

/* The n entries in r->dict_vals are the chunk's dictionary. */
static sl_err_t dict_done(sl_pq_reader_t *r, uint32_t n)
{
    /* mapped once here instead of at every index that gathers an entry */
    if (r->map != NULL && r->c->kind == SL_PQ_KIND_I64 && n > 0)
        r->map(r->map_ctx, (int64_t *)r->dict_vals.p, n);
    if (r->map_f32 != NULL && r->c->kind == SL_PQ_KIND_F32 && n > 0)
        r->map_f32(r->map_ctx, (float *)r->dict_vals.p, n);
    r->dict_narrow = false;
    if (r->c->kind == SL_PQ_KIND_I64 && (size_t)n * 8 > SL_PQ_NARROW_DICT_MIN)
        r->dict_narrow = narrow_dict(r, n);
    r->dict_n = n;
    r->has_dict = true;
    return SL_OK;
}

sl_err_t sl_pq_dict_load(sl_pq_reader_t *r, const uint8_t *p, size_t len, uint32_t n,
                         sl_error_t *err)
{
    const sl_pq_column_t *c = r->c;
    const uint8_t *end = p + len;
    if (c->type == SL_PQ_BOOLEAN)
        return sl_error_set(err, SL_ERR_CORRUPT, "a dictionary page for a BOOLEAN column");
    if (c->kind == SL_PQ_KIND_BYTES) {
        if (!sl_pq_buf_fit(r->a, &r->dict_off, sl_mul_size((size_t)n + 1, 8)) ||
            !sl_pq_buf_fit(r->a, &r->dict_vals, len ? len : 1))
            return sl_error_set(err, SL_ERR_NOMEM, "out of memory for a dictionary of %u", n);
        uint64_t *off = r->dict_off.p;
        uint8_t *out = r->dict_vals.p;
        size_t at = 0;
        off[0] = 0;
        for (uint32_t i = 0; i < n; i++) {
            size_t l;
            if (c->type == SL_PQ_BYTE_ARRAY) {
                if (end - p < 4)
                    return sl_error_set(err, SL_ERR_TRUNCATED,
                                        "dictionary entry %u of %u runs past the page", i, n);
                l = sl_le_get_u32(p);
                p += 4;
            } else {
                l = (size_t)c->type_length;
            }
            if ((size_t)(end - p) < l)
                return sl_error_set(err, SL_ERR_TRUNCATED,
                                    "dictionary entry %u of %u (%zu bytes) runs past the page", i,
                                    n, l);
            memcpy(out + at, p, l);
            p += l;
            at += l;
            off[i + 1] = at;
        }
    } else {
        unsigned w = plain_width(c);
        if ((uint64_t)n * w > len)
            return sl_error_set(err, SL_ERR_TRUNCATED,
                                "dictionary of %u %s values needs %llu bytes, the page has %zu", n,
                                sl_pq_type_name(c->type), (unsigned long long)n * w, len);
        if (!sl_pq_buf_fit(r->a, &r->dict_vals, sl_mul_size(n ? n : 1, 8)))
            return sl_error_set(err, SL_ERR_NOMEM, "out of memory for a dictionary of %u", n);
        for (uint32_t i = 0; i < n; i++, p += w) {
            if (c->kind == SL_PQ_KIND_F32)
                memcpy((float *)r->dict_vals.p + i, p, 4);
            else if (c->kind == SL_PQ_KIND_F64)
                memcpy((double *)r->dict_vals.p + i, p, 8);
            else
                ((int64_t *)r->dict_vals.p)[i] = int_of(c, p);
        }
    }
    return dict_done(r, n);
}

bool sl_pq_dict_in_place(const sl_pq_column_t *c)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (c->type == SL_PQ_INT64 && c->kind == SL_PQ_KIND_I64) ||
           (c->type == SL_PQ_FLOAT && c->kind == SL_PQ_KIND_F32) ||
           (c->type == SL_PQ_DOUBLE && c->kind == SL_PQ_KIND_F64);
#else
    (void)c;
    return false;
#endif
}

sl_err_t sl_pq_dict_set(sl_pq_reader_t *r, size_t len, uint32_t n, sl_error_t *err)
{
    const sl_pq_column_t *c = r->c;
    unsigned w = plain_width(c);
    if ((uint64_t)n * w > len)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "dictionary of %u %s values needs %llu bytes, the page has %zu", n,
                            sl_pq_type_name(c->type), (unsigned long long)n * w, len);
    return dict_done(r, n);
}

/* Lengths of the DELTA_LENGTH_BYTE_ARRAY stream at p: into buf, their
 * count in *n; *data_at is where the bytes begin. */
static sl_err_t read_lengths(sl_pq_reader_t *r, sl_pq_buf_t *buf, const uint8_t *p,
                             const uint8_t *end, uint32_t max, uint32_t *n, const uint8_t **data_at,
                             sl_error_t *err)
{
    sl_pq_delta_t d;
    TRY(sl_pq_delta_init(&d, p, (size_t)(end - p), err));
    if (d.total > max)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "delta stream of %llu values in a page of %u values",
                            (unsigned long long)d.total, max);
    if (!sl_pq_buf_fit(r->a, buf, sl_mul_size(d.total ? d.total : 1, 8)))
        return sl_error_set(err, SL_ERR_NOMEM, "out of memory for %llu lengths",
                            (unsigned long long)d.total);
    TRY(sl_pq_delta_get(&d, buf->p, d.total, err));
    int64_t *v = buf->p;
    for (uint64_t i = 0; i < d.total; i++)
        if (v[i] < 0 || v[i] > INT32_MAX)
            return sl_error_set(err, SL_ERR_CORRUPT, "delta length %lld of value %llu",
                                (long long)v[i], (unsigned long long)i);
    *n = (uint32_t)d.total;
    *data_at = sl_pq_delta_end(&d);
    return SL_OK;
}

sl_err_t sl_pq_values_begin(sl_pq_reader_t *r, const uint8_t *p, size_t len, uint32_t num_values,
                            sl_error_t *err)
{
    const sl_pq_column_t *c = r->c;
    const uint8_t *end = p + len;
    r->vp = p;
    r->vend = end;
    r->bit = 0;
    r->lens_n = r->lens_pos = 0;
    r->prev_len = 0;
    switch (r->encoding) {
    case SL_PQ_ENC_PLAIN:
        return SL_OK;
    case SL_PQ_ENC_PLAIN_DICTIONARY:
    case SL_PQ_ENC_RLE_DICTIONARY:
        if (!r->has_dict)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "a dictionary-encoded page without a dictionary page");
        if (len < 1 && num_values > 0)
            return sl_error_set(err, SL_ERR_TRUNCATED, "dictionary indices without a bit width");
        if (len >= 1 && p[0] > 32)
            return sl_error_set(err, SL_ERR_CORRUPT, "dictionary indices of %u bits", p[0]);
        sl_pq_rle_init(&r->vrle, p + (len ? 1 : 0), len ? len - 1 : 0, len ? p[0] : 0);
        return SL_OK;
    case SL_PQ_ENC_RLE:
        if (c->type != SL_PQ_BOOLEAN) break;
        if (len < 4 || sl_le_get_u32(p) > len - 4)
            return sl_error_set(err, SL_ERR_TRUNCATED, "RLE booleans' length runs past the page");
        sl_pq_rle_init(&r->vrle, p + 4, sl_le_get_u32(p), 1);
        return SL_OK;
    case SL_PQ_ENC_DELTA_BINARY_PACKED:
        if (c->type != SL_PQ_INT32 && c->type != SL_PQ_INT64) break;
        TRY(sl_pq_delta_init(&r->delta, p, len, err));
        if (r->delta.total > num_values)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "delta stream of %llu values in a page of %u values",
                                (unsigned long long)r->delta.total, num_values);
        return SL_OK;
    case SL_PQ_ENC_DELTA_LENGTH_BYTE_ARRAY:
        if (c->type != SL_PQ_BYTE_ARRAY) break;
        return read_lengths(r, &r->lens, p, end, num_values, &r->lens_n, &r->data, err);
    case SL_PQ_ENC_DELTA_BYTE_ARRAY: {
        if (c->kind != SL_PQ_KIND_BYTES) break;
        uint32_t np, ns;
        const uint8_t *q;
        TRY(read_lengths(r, &r->prefix, p, end, num_values, &np, &q, err));
        TRY(read_lengths(r, &r->lens, q, end, num_values, &ns, &r->data, err));
        if (np != ns)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "DELTA_BYTE_ARRAY with %u prefix lengths and %u suffixes", np, ns);
        r->lens_n = ns;
        return SL_OK;
    }
    case SL_PQ_ENC_BYTE_STREAM_SPLIT: {
        unsigned w = plain_width(c);
        if (w == 0 || c->type == SL_PQ_INT96) break;
        if (len % w != 0)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "BYTE_STREAM_SPLIT of %zu bytes is no whole number of %u-byte "
                                "values",
                                len, w);
        r->bss_count = len / w;
        r->bss_pos = 0;
        return SL_OK;
    }
    default:
        return sl_error_set(err, SL_ERR_UNSUPPORTED, "encoding %s (%d) is not supported",
                            sl_pq_encoding_name(r->encoding), r->encoding);
    }
    return sl_error_set(err, SL_ERR_UNSUPPORTED, "encoding %s for a %s column is not supported",
                        sl_pq_encoding_name(r->encoding), sl_pq_type_name(c->type));
}

static sl_err_t get_plain(sl_pq_reader_t *r, uint32_t at, uint32_t n, sl_error_t *err)
{
    const sl_pq_column_t *c = r->c;
    size_t left = (size_t)(r->vend - r->vp);
    if (c->type == SL_PQ_BOOLEAN) {
        if (r->bit + n > (uint64_t)left * 8)
            return sl_error_set(err, SL_ERR_TRUNCATED,
                                "PLAIN booleans run past the page: %u more asked", n);
        for (uint32_t i = 0; i < n; i++, r->bit++)
            r->b.i64[at + i] = (r->vp[r->bit >> 3] >> (r->bit & 7)) & 1;
        return SL_OK;
    }
    if (c->type == SL_PQ_BYTE_ARRAY) {
        for (uint32_t i = 0; i < n; i++) {
            if (r->vend - r->vp < 4)
                return sl_error_set(err, SL_ERR_TRUNCATED,
                                    "PLAIN byte array length runs past the page");
            uint32_t l = sl_le_get_u32(r->vp);
            if ((size_t)(r->vend - r->vp - 4) < l)
                return sl_error_set(err, SL_ERR_TRUNCATED,
                                    "PLAIN byte array of %u bytes runs past the page", l);
            TRY(put_bytes(r, at + i, r->vp + 4, l, err));
            r->vp += 4 + (size_t)l;
        }
        return SL_OK;
    }
    unsigned w = plain_width(c);
    if ((uint64_t)n * w > left)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "PLAIN values run past the page: %u values of %u bytes, %zu bytes "
                            "left",
                            n, w, left);
    if (c->kind == SL_PQ_KIND_BYTES) {
        for (uint32_t i = 0; i < n; i++, r->vp += w)
            TRY(put_bytes(r, at + i, r->vp, w, err));
        return SL_OK;
    }
    if (c->kind == SL_PQ_KIND_F64 || (c->type == SL_PQ_INT64 && c->kind == SL_PQ_KIND_I64)) {
        memcpy(c->kind == SL_PQ_KIND_F64 ? (void *)&r->b.f64[at] : (void *)&r->b.i64[at], r->vp,
               (size_t)n * 8);
        r->vp += (size_t)n * 8;
        return SL_OK;
    }
    if (c->kind == SL_PQ_KIND_F32) {
        memcpy(&r->b.f32[at], r->vp, (size_t)n * 4);
        r->vp += (size_t)n * 4;
        return SL_OK;
    }
    for (uint32_t i = 0; i < n; i++, r->vp += w)
        r->b.i64[at + i] = int_of(c, r->vp);
    return SL_OK;
}

/* The dictionary's cache lines prefetched in order, once a batch, when
 * the batch gathers at least half as many entries as the dictionary has
 * lines and it fits the L2 cache: nearly every line is then touched
 * anyway, and lines fetched in order come in parallel where the gather's
 * random ones wait on each other's misses. */
static void warm_dict(sl_pq_reader_t *r, uint32_t n)
{
    if (r->dict_warm) return;
    const sl_pq_column_t *c = r->c;
    const char *p;
    size_t bytes;
    if (c->kind == SL_PQ_KIND_I64 && r->dict_narrow) {
        p = r->dict_i32.p;
        bytes = (size_t)r->dict_n * 4;
    } else {
        p = r->dict_vals.p;
        bytes = (size_t)r->dict_n * (c->kind == SL_PQ_KIND_F32 ? 4 : 8);
    }
    if (bytes > SL_PQ_WARM_DICT_MAX || bytes <= SL_PQ_NARROW_DICT_MIN || (size_t)n * 128 < bytes)
        return;
    r->dict_warm = true;
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o, 0, 3);
}

static sl_err_t get_dict(sl_pq_reader_t *r, uint32_t at, uint32_t n, sl_error_t *err)
{
    const sl_pq_column_t *c = r->c;
    if (c->kind != SL_PQ_KIND_BYTES) warm_dict(r, n);
    /* numbers: indices unpacked and gathered in one pass */
    if (c->kind == SL_PQ_KIND_F32)
        return sl_pq_rle_gather_f32(&r->vrle, r->dict_vals.p, r->dict_n, r->b.f32 + at, n, err);
    if (c->kind == SL_PQ_KIND_F64)
        return sl_pq_rle_gather_f64(&r->vrle, r->dict_vals.p, r->dict_n, r->b.f64 + at, n, err);
    if (c->kind != SL_PQ_KIND_BYTES && r->dict_narrow)
        return sl_pq_rle_gather_i32_i64(&r->vrle, r->dict_i32.p, r->dict_n, r->b.i64 + at, n, err);
    if (c->kind != SL_PQ_KIND_BYTES)
        return sl_pq_rle_gather_i64(&r->vrle, r->dict_vals.p, r->dict_n, r->b.i64 + at, n, err);
    while (n > 0) {
        uint32_t k = n < SL_PQ_LEVEL_CHUNK ? n : SL_PQ_LEVEL_CHUNK;
        TRY(sl_pq_rle_get(&r->vrle, r->idx, k, err));
        uint32_t top = 0;
        for (uint32_t i = 0; i < k; i++)
            top = r->idx[i] > top ? r->idx[i] : top;
        if (top >= r->dict_n)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "dictionary index %u out of range (dictionary of %u)", top,
                                r->dict_n);
        const uint64_t *off = r->dict_off.p;
        const uint8_t *vals = r->dict_vals.p;
        for (uint32_t i = 0; i < k; i++)
            TRY(put_bytes(r, at + i, vals + off[r->idx[i]],
                          (size_t)(off[r->idx[i] + 1] - off[r->idx[i]]), err));
        at += k;
        n -= k;
    }
    return SL_OK;
}

/* DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY values. */
static sl_err_t get_delta_bytes(sl_pq_reader_t *r, uint32_t at, uint32_t n, sl_error_t *err)
{
    if (n > r->lens_n - r->lens_pos)
        return sl_error_set(err, SL_ERR_CORRUPT, "%s stream of %u values asked for %u more",
                            sl_pq_encoding_name(r->encoding), r->lens_n - r->lens_pos, n);
    const int64_t *lens = r->lens.p, *prefix = r->prefix.p;
    bool dba = r->encoding == SL_PQ_ENC_DELTA_BYTE_ARRAY;
    for (uint32_t i = 0; i < n; i++, r->lens_pos++) {
        size_t l = (size_t)lens[r->lens_pos];
        if ((size_t)(r->vend - r->data) < l)
            return sl_error_set(err, SL_ERR_TRUNCATED, "%s value of %zu bytes runs past the page",
                                sl_pq_encoding_name(r->encoding), l);
        if (!dba) {
            TRY(put_bytes(r, at + i, r->data, l, err));
        } else {
            size_t pl = (size_t)prefix[r->lens_pos];
            if (pl > r->prev_len)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "DELTA_BYTE_ARRAY prefix of %zu bytes, the previous value has "
                                    "%zu",
                                    pl, r->prev_len);
            if (r->c->type == SL_PQ_FIXED_LEN_BYTE_ARRAY && pl + l != (size_t)r->c->type_length)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "DELTA_BYTE_ARRAY value of %zu bytes in a column of %d", pl + l,
                                    r->c->type_length);
            if (!sl_pq_buf_reserve(r->a, &r->prev, pl + l + 1))
                return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
            memcpy((uint8_t *)r->prev.p + pl, r->data, l);
            r->prev_len = pl + l;
            TRY(put_bytes(r, at + i, r->prev.p, r->prev_len, err));
        }
        r->data += l;
    }
    return SL_OK;
}

static sl_err_t values_decode(sl_pq_reader_t *r, uint32_t at, uint32_t n, sl_error_t *err)
{
    const sl_pq_column_t *c = r->c;
    if (n == 0) return SL_OK;
    switch (r->encoding) {
    case SL_PQ_ENC_PLAIN:
        return get_plain(r, at, n, err);
    case SL_PQ_ENC_PLAIN_DICTIONARY:
    case SL_PQ_ENC_RLE_DICTIONARY:
        return get_dict(r, at, n, err);
    case SL_PQ_ENC_RLE:
        while (n > 0) {
            uint32_t k = n < SL_PQ_LEVEL_CHUNK ? n : SL_PQ_LEVEL_CHUNK;
            TRY(sl_pq_rle_get(&r->vrle, r->idx, k, err));
            for (uint32_t i = 0; i < k; i++)
                r->b.i64[at + i] = r->idx[i];
            at += k;
            n -= k;
        }
        return SL_OK;
    case SL_PQ_ENC_DELTA_BINARY_PACKED:
        TRY(sl_pq_delta_get(&r->delta, &r->b.i64[at], n, err));
        if (c->type == SL_PQ_INT32)
            for (uint32_t i = 0; i < n; i++)
                r->b.i64[at + i] = c->is_unsigned ? (int64_t)(uint32_t)r->b.i64[at + i]
                                                  : (int64_t)(int32_t)r->b.i64[at + i];
        return SL_OK;
    case SL_PQ_ENC_DELTA_LENGTH_BYTE_ARRAY:
    case SL_PQ_ENC_DELTA_BYTE_ARRAY:
        return get_delta_bytes(r, at, n, err);
    case SL_PQ_ENC_BYTE_STREAM_SPLIT: {
        unsigned w = plain_width(c);
        if (n > r->bss_count - r->bss_pos)
            return sl_error_set(err, SL_ERR_TRUNCATED,
                                "BYTE_STREAM_SPLIT of %llu values asked for %u more",
                                (unsigned long long)(r->bss_count - r->bss_pos), n);
        if (c->kind == SL_PQ_KIND_BYTES) {
            /* n * w <= the page's values section: bss_count * w bytes */
            TRY(sl_pq_bytes_reserve(r, (size_t)n * w, err));
            for (uint32_t i = 0; i < n; i++) {
                sl_pq_bss_get(r->vp, r->bss_count, w, r->bss_pos++, 1, r->b.bytes + r->bytes_len);
                r->bytes_len += w;
                r->b.bytes_off[at + i + 1] = r->bytes_len;
            }
        } else {
            uint8_t tmp[12] = {0}; /* w <= 8 for numbers (INT96 never comes here) */
            for (uint32_t i = 0; i < n; i++) {
                sl_pq_bss_get(r->vp, r->bss_count, w, r->bss_pos++, 1, tmp);
                put_fixed(r, at + i, tmp);
            }
        }
        return SL_OK;
    }
    default:
        return sl_error_set(err, SL_ERR_UNSUPPORTED, "encoding %s is not supported",
                            sl_pq_encoding_name(r->encoding));
    }
}

sl_err_t sl_pq_values_get(sl_pq_reader_t *r, uint32_t at, uint32_t n, sl_error_t *err)
{
    TRY(values_decode(r, at, n, err));
    /* a dictionary's values were mapped when it was loaded */
    bool dict =
        r->encoding == SL_PQ_ENC_PLAIN_DICTIONARY || r->encoding == SL_PQ_ENC_RLE_DICTIONARY;
    if (r->map != NULL && !dict && n > 0) r->map(r->map_ctx, r->b.i64 + at, n);
    if (r->map_f32 != NULL && !dict && n > 0) r->map_f32(r->map_ctx, r->b.f32 + at, n);
    return SL_OK;
}

/* Encoding one stream of the writer. Format version 2 picks, per stream and
 * stripe, the smallest of: plain values, BITPACK (frame of reference at the
 * bit width of the range), DELTA (bit-packed differences of neighbours:
 * sample ids, timestamps) and DICT (sorted distinct values, their gaps
 * bit-packed in blocks, then bit-packed indices: hashed ids and counts
 * drawn from a vocabulary); then zstd over the encoded bytes is kept only
 * when it saves zstd_min_saving of them. All of these but zstd decode at
 * memory speed, and most id streams keep none of zstd (docs/FORMAT.md
 * section 10 has the measured ratios). Format version 1 (byte-wide frame
 * of reference, then zstd) is kept for fixtures and comparisons. */
#include "writer_internal.h"

#include <math.h>
#include <string.h>
#include <xxhash.h>

static wmeta_t *new_meta(sl_wh_writer_t *w)
{
    if (w->nmeta == w->cap_meta) {
        uint32_t cap = w->cap_meta ? w->cap_meta * 2 : 256;
        wmeta_t *m = sl_alloc(w->a, sl_mul_size(cap, sizeof *m));
        if (m == NULL) return NULL;
        if (w->nmeta) memcpy(m, w->meta, (size_t)w->nmeta * sizeof *m);
        sl_free(w->a, w->meta, (size_t)w->cap_meta * sizeof *m);
        w->meta = m;
        w->cap_meta = cap;
    }
    wmeta_t *m = &w->meta[w->nmeta++];
    memset(m, 0, sizeof *m);
    return m;
}

/* zstd of raw into buf (reserved here). @return the compressed size when it
 * saves zstd_min_saving of raw_size, else 0; -1 (failed, err set). */
static int64_t try_zstd(sl_wh_writer_t *w, const wmeta_t *m, const void *raw, size_t raw_size,
                        wh_buf_t *buf, sl_error_t *err)
{
    if (w->opts.codec != SL_WH_CODEC_ZSTD || raw_size == 0 ||
        (w->opts.store_kinds & (1u << m->kind)))
        return 0;
    size_t bound = ZSTD_compressBound(raw_size);
    if (!wh_buf_reserve(buf, w->a, bound)) {
        wh_writer_fail(w, err, SL_ERR_NOMEM, "compress %zu bytes", raw_size);
        return -1;
    }
    size_t c = ZSTD_compressCCtx(w->cctx, buf->data, buf->cap, raw, raw_size, w->opts.zstd_level);
    if (ZSTD_isError(c)) {
        wh_writer_fail(w, err, SL_ERR_INVALID, "stream '%s': zstd: %s", m->name,
                       ZSTD_getErrorName(c));
        return -1;
    }
    return (double)c <= (double)raw_size * (1.0 - w->opts.zstd_min_saving) ? (int64_t)c : 0;
}

/* Checksum and append the stored bytes of a stream; m has kind, name,
 * encoding, count and stats filled. */
static sl_err_t put_stored(sl_wh_writer_t *w, wmeta_t *m, const void *stored, size_t stored_size,
                           size_t raw_size, bool zstd, sl_error_t *err)
{
    m->codec = zstd ? SLUICE__CODEC__CODEC_ZSTD : SLUICE__CODEC__CODEC_NONE;
    m->offset = w->file_off;
    m->stored = stored_size;
    m->raw = raw_size;
    m->checksum = XXH3_64bits(stored, stored_size);
    w->stats.raw_bytes +=
        m->kind == SL_WH_STREAM_PRESENT ? raw_size : m->count * wh_kind_width(m->kind);
    w->stats.stored_bytes += stored_size;
    return wh_writer_put(w, stored, stored_size, err);
}

/* Compress (or not) raw bytes, checksum, append. */
static sl_err_t put_stream(sl_wh_writer_t *w, wmeta_t *m, const void *raw, size_t raw_size,
                           sl_error_t *err)
{
    int64_t c = try_zstd(w, m, raw, raw_size, &w->comp, err);
    if (c < 0) return w->failed;
    if (c > 0) return put_stored(w, m, w->comp.data, (size_t)c, raw_size, true, err);
    return put_stored(w, m, raw, raw_size, raw_size, false, err);
}

static wmeta_t *meta_for(sl_wh_writer_t *w, uint8_t kind, const char *name, uint64_t count)
{
    wmeta_t *m = new_meta(w);
    if (m == NULL) return NULL;
    m->name = name;
    m->kind = kind;
    m->count = count;
    return m;
}

sl_err_t wh_writer_emit_bytes(sl_wh_writer_t *w, uint8_t kind, const char *name, const void *raw,
                              size_t raw_size, uint64_t count, sl_error_t *err)
{
    wmeta_t *m = meta_for(w, kind, name, count);
    if (m == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "stream index");
    return put_stream(w, m, raw, raw_size, err);
}

/* ---- bit packing ---- */

typedef struct bitw {
    uint8_t *out;
    size_t at;
    uint64_t acc;
    uint32_t fill; /* bits in acc, < 64 */
} bitw_t;

static inline void bit_put(bitw_t *b, uint64_t x, uint32_t w)
{
    if (w == 0) return;
    if (w < 64) x &= (1ull << w) - 1;
    b->acc |= x << b->fill;
    if (b->fill + w < 64) {
        b->fill += w;
        return;
    }
    memcpy(b->out + b->at, &b->acc, 8);
    b->at += 8;
    uint32_t used = 64 - b->fill;
    b->acc = used < 64 ? x >> used : 0;
    b->fill = b->fill + w - 64;
}

/* Flush to a byte boundary (writes 8 bytes: the buffer has slack). */
static inline void bit_flush(bitw_t *b)
{
    memcpy(b->out + b->at, &b->acc, 8);
    b->at += (b->fill + 7) / 8;
    b->acc = 0;
    b->fill = 0;
}

/* ---- the dictionary ---- */

/* Sorted distinct keys of k[0, n) (each <= range) into dict[0, K) and the
 * index of every value into idx: an LSD radix sort of (key, position) on
 * 11-bit digits, as many passes as the range needs. */
static uint64_t build_dict(const uint64_t *k, uint64_t n, uint64_t range, uint64_t *ka,
                           uint64_t *kb, uint32_t *pa, uint32_t *pb, uint32_t *idx, uint64_t *dict)
{
    enum { DIGIT = 11, BUCKETS = 1 << DIGIT };
    uint32_t passes = (wh_bits_for(range) + DIGIT - 1) / DIGIT;
    memcpy(ka, k, (size_t)n * 8);
    for (uint64_t i = 0; i < n; i++)
        pa[i] = (uint32_t)i;
    uint32_t count[BUCKETS];
    for (uint32_t p = 0; p < passes; p++) {
        uint32_t sh = p * DIGIT;
        memset(count, 0, sizeof count);
        for (uint64_t i = 0; i < n; i++)
            count[(ka[i] >> sh) & (BUCKETS - 1)]++;
        uint32_t sum = 0;
        for (uint32_t b = 0; b < BUCKETS; b++) {
            uint32_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (uint64_t i = 0; i < n; i++) {
            uint32_t at = count[(ka[i] >> sh) & (BUCKETS - 1)]++;
            kb[at] = ka[i];
            pb[at] = pa[i];
        }
        uint64_t *tk = ka;
        ka = kb;
        kb = tk;
        uint32_t *tp = pa;
        pa = pb;
        pb = tp;
    }
    uint64_t K = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (K == 0 || dict[K - 1] != ka[i]) dict[K++] = ka[i];
        idx[pa[i]] = (uint32_t)(K - 1);
    }
    return K;
}

/* Bytes of the dictionary section (gaps - 1 bit-packed in blocks). */
static uint64_t dict_section_bytes(const uint64_t *dict, uint64_t K)
{
    uint64_t bytes = 0;
    for (uint64_t j = 1; j < K; j += WH_DICT_BLOCK) {
        uint64_t e = K - j < WH_DICT_BLOCK ? K : j + WH_DICT_BLOCK, mx = 0;
        for (uint64_t i = j; i < e; i++) {
            uint64_t g = dict[i] - dict[i - 1] - 1;
            mx = g > mx ? g : mx;
        }
        bytes += 1 + wh_packed_bytes(e - j, wh_bits_for(mx));
    }
    return bytes;
}

static void dict_section_write(bitw_t *b, const uint64_t *dict, uint64_t K)
{
    for (uint64_t j = 1; j < K; j += WH_DICT_BLOCK) {
        uint64_t e = K - j < WH_DICT_BLOCK ? K : j + WH_DICT_BLOCK, mx = 0;
        for (uint64_t i = j; i < e; i++) {
            uint64_t g = dict[i] - dict[i - 1] - 1;
            mx = g > mx ? g : mx;
        }
        uint32_t w = wh_bits_for(mx);
        b->out[b->at++] = (uint8_t)w;
        for (uint64_t i = j; i < e; i++)
            bit_put(b, dict[i] - dict[i - 1] - 1, w);
        bit_flush(b);
    }
}

/* The DICT encoding into out (room for its bytes + 16): the dictionary,
 * then n indices at ib bits. @return bytes written. */
static size_t encode_dict(uint8_t *out, const uint64_t *dict, uint64_t K, const uint32_t *idx,
                          uint64_t n, uint32_t ib)
{
    bitw_t b = {out, 0, 0, 0};
    dict_section_write(&b, dict, K);
    for (uint64_t i = 0; i < n; i++)
        bit_put(&b, idx[i], ib);
    bit_flush(&b);
    return b.at;
}

/* A DICT stream encoded (in w->enc, `bytes` long) at ib bits that are not
 * whole bytes: zstd's matches cannot find repeated runs of indices there
 * (a session's history repeated on clustered rows starts at any bit), so
 * the same indices in whole bytes, whose repeats zstd does find, are
 * compressed too, and the smaller of the three kept. */
static sl_err_t put_dict_aligned(sl_wh_writer_t *w, wmeta_t *m, const uint64_t *dict, uint64_t K,
                                 const uint32_t *idx, uint64_t n, uint32_t ib, size_t bytes,
                                 sl_error_t *err)
{
    int64_t c1 = try_zstd(w, m, w->enc.data, bytes, &w->comp, err);
    if (c1 < 0) return w->failed;
    if (c1 == 0) return put_stored(w, m, w->enc.data, bytes, bytes, false, err);
    uint32_t wide = (ib + 7) / 8 * 8;
    size_t wbytes = (size_t)(m->dict_bytes + wh_packed_bytes(n, wide));
    wh_buf_t *wb = &w->scratch[1], *wc = &w->scratch[2]; /* free after the choice */
    if (!wh_buf_reserve(wb, w->a, wbytes + 16))
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "encode %zu bytes", wbytes);
    encode_dict(wb->data, dict, K, idx, n, wide);
    int64_t c2 = try_zstd(w, m, wb->data, wbytes, wc, err);
    if (c2 < 0) return w->failed;
    if (c2 > 0 && c2 < c1) {
        m->bits = (uint8_t)wide;
        return put_stored(w, m, wc->data, (size_t)c2, wbytes, true, err);
    }
    return put_stored(w, m, w->comp.data, (size_t)c1, bytes, true, err);
}

/* ---- version 2: choose and encode ---- */

/* u[0, n): the values as 64-bit patterns (integers, or float bits zero-
 * extended); sgn: ordered as signed integers (else unsigned); plain: the
 * natural-width bytes (nat each). */
static sl_err_t emit_v2(sl_wh_writer_t *w, wmeta_t *m, const uint64_t *u, uint64_t n, bool sgn,
                        bool is_int, uint32_t nat, const void *plain, sl_error_t *err)
{
    uint64_t plain_size = n * nat;
    if (n == 0) return put_stream(w, m, plain, 0, err);
    /* frame of reference: the range in the kind's order */
    uint64_t lo = u[0], hi = u[0];
    for (uint64_t i = 1; i < n; i++) {
        uint64_t x = u[i];
        if (sgn ? (int64_t)x < (int64_t)lo : x < lo) lo = x;
        if (sgn ? (int64_t)x > (int64_t)hi : x > hi) hi = x;
    }
    uint64_t range = hi - lo;
    uint64_t best = plain_size;
    uint8_t enc = SLUICE__ENCODING__ENCODING_PLAIN;
    uint32_t bp_bits = wh_bits_for(range), dl_bits = 0;
    if (is_int && wh_packed_bytes(n, bp_bits) < best) {
        best = wh_packed_bytes(n, bp_bits);
        enc = SLUICE__ENCODING__ENCODING_BITPACK;
    }
    int64_t dmin = 0;
    if (is_int && nat == 8 && n > 1) {
        int64_t dmax = (int64_t)(u[1] - u[0]);
        dmin = dmax;
        for (uint64_t i = 2; i < n; i++) {
            int64_t dlt = (int64_t)(u[i] - u[i - 1]);
            dmin = dlt < dmin ? dlt : dmin;
            dmax = dlt > dmax ? dlt : dmax;
        }
        dl_bits = wh_bits_for((uint64_t)dmax - (uint64_t)dmin);
        if (wh_packed_bytes(n - 1, dl_bits) < best) {
            best = wh_packed_bytes(n - 1, dl_bits);
            enc = SLUICE__ENCODING__ENCODING_DELTA;
        }
    }
    /* the dictionary: keys are offsets from lo, so that the sort takes as
     * few passes as the range needs and the order is the kind's */
    size_t n8 = (size_t)n * 8 + 16, n4 = (size_t)n * 4 + 16;
    wh_buf_t *sc = w->scratch;
    if (!wh_buf_reserve(&sc[0], w->a, n8) || !wh_buf_reserve(&sc[1], w->a, n8) ||
        !wh_buf_reserve(&sc[2], w->a, n8) || !wh_buf_reserve(&sc[3], w->a, n4) ||
        !wh_buf_reserve(&sc[4], w->a, n4) || !wh_buf_reserve(&sc[5], w->a, n4))
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "stream '%s': %llu values", m->name,
                              (unsigned long long)n);
    uint64_t *keys = (uint64_t *)sc[0].data, *dict = (uint64_t *)sc[0].data;
    uint64_t *ka = (uint64_t *)sc[1].data, *kb = (uint64_t *)sc[2].data;
    uint32_t *pa = (uint32_t *)sc[3].data, *pb = (uint32_t *)sc[4].data;
    uint32_t *idx = (uint32_t *)sc[5].data;
    for (uint64_t i = 0; i < n; i++)
        keys[i] = u[i] - lo;
    /* dict may overwrite keys: build_dict copies them first */
    uint64_t K = build_dict(keys, n, range, ka, kb, pa, pb, idx, dict);
    uint32_t ib = K > 1 ? wh_bits_for(K - 1) : 0;
    uint64_t dict_bytes = dict_section_bytes(dict, K);
    if (dict_bytes + wh_packed_bytes(n, ib) < best) {
        best = dict_bytes + wh_packed_bytes(n, ib);
        enc = SLUICE__ENCODING__ENCODING_DICT;
    }
    if (enc == SLUICE__ENCODING__ENCODING_PLAIN) return put_stream(w, m, plain, plain_size, err);
    if (!wh_buf_reserve(&w->enc, w->a, (size_t)best + 16))
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "encode %llu bytes", (unsigned long long)best);
    bitw_t b = {w->enc.data, 0, 0, 0};
    m->encoding = enc;
    m->base = (int64_t)lo;
    if (enc == SLUICE__ENCODING__ENCODING_BITPACK) {
        m->bits = (uint8_t)bp_bits;
        for (uint64_t i = 0; i < n; i++)
            bit_put(&b, u[i] - lo, bp_bits);
    } else if (enc == SLUICE__ENCODING__ENCODING_DELTA) {
        m->bits = (uint8_t)dl_bits;
        m->base = (int64_t)u[0];
        m->delta_base = dmin;
        for (uint64_t i = 1; i < n; i++)
            bit_put(&b, (u[i] - u[i - 1]) - (uint64_t)dmin, dl_bits);
    } else {
        m->bits = (uint8_t)ib;
        m->dict_size = K;
        m->dict_bytes = dict_bytes;
        /* dict holds offsets from lo: the gaps are the same */
        b.at = encode_dict(w->enc.data, dict, K, idx, n, ib);
        if (b.at == best && ib % 8 != 0)
            return put_dict_aligned(w, m, dict, K, idx, n, ib, (size_t)best, err);
    }
    if (enc != SLUICE__ENCODING__ENCODING_DICT) bit_flush(&b);
    if (b.at != best)
        return wh_writer_fail(w, err, SL_ERR_INVALID, "stream '%s': encoded %zu bytes, not %llu",
                              m->name, b.at, (unsigned long long)best);
    return put_stream(w, m, w->enc.data, (size_t)best, err);
}

/* ---- integers and floats ---- */

/* Whether the encoding of a stream of this kind is chosen by size (format
 * version 2). Streams that are stored (codec NONE, or their kind in
 * store_kinds) keep the fixed-width forms of version 1 (plain, or frame of
 * reference in whole bytes), which decode with copies and widening loops. */
static bool choose(const sl_wh_writer_t *w, uint8_t kind)
{
    return w->opts.format_version >= 2 && w->opts.codec != SL_WH_CODEC_NONE &&
           !(w->opts.store_kinds & (1u << kind));
}

sl_err_t wh_writer_emit_ints(sl_wh_writer_t *w, uint8_t kind, const char *name, const void *vals,
                             uint64_t count, bool is64, sl_error_t *err)
{
    wmeta_t *m = meta_for(w, kind, name, count);
    if (m == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "stream index");
    const int64_t *v64 = vals;
    const int32_t *v32 = vals;
    uint32_t nat = is64 ? 8 : 4;
    if (count == 0) return put_stream(w, m, vals, 0, err);
    int64_t lo = is64 ? v64[0] : v32[0], hi = lo;
    if (is64) {
        for (uint64_t i = 1; i < count; i++) {
            lo = v64[i] < lo ? v64[i] : lo;
            hi = v64[i] > hi ? v64[i] : hi;
        }
    } else {
        int32_t l = v32[0], h = v32[0];
        for (uint64_t i = 1; i < count; i++) {
            l = v32[i] < l ? v32[i] : l;
            h = v32[i] > h ? v32[i] : h;
        }
        lo = l;
        hi = h;
    }
    m->has_int = true;
    m->imin = lo;
    m->imax = hi;
    if (choose(w, kind)) {
        const uint64_t *u = vals;
        if (!is64) {
            /* widened into the compression buffer, which put_stream uses
             * only after emit_v2 has encoded them */
            if (!wh_buf_reserve(&w->comp, w->a, (size_t)count * 8 + 16))
                return wh_writer_fail(w, err, SL_ERR_NOMEM, "encode %llu values",
                                      (unsigned long long)count);
            uint64_t *t = (uint64_t *)w->comp.data;
            for (uint64_t i = 0; i < count; i++)
                t[i] = (uint64_t)(int64_t)v32[i];
            u = t;
        }
        return emit_v2(w, m, u, count, true, true, nat, vals, err);
    }
    /* version 1: frame of reference in whole bytes */
    uint64_t range = (uint64_t)hi - (uint64_t)lo;
    uint32_t width = range == 0             ? 0
                     : range <= 0xff        ? 1
                     : range <= 0xffff      ? 2
                     : range <= 0xffffffffu ? 4
                                            : 8;
    if (width >= nat) return put_stream(w, m, vals, (size_t)count * nat, err);
    m->encoding = SLUICE__ENCODING__ENCODING_FOR;
    m->width = (uint8_t)width;
    m->base = lo;
    size_t bytes = (size_t)count * width;
    if (width > 0 && !wh_buf_reserve(&w->enc, w->a, bytes))
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "encode %zu bytes", bytes);
    uint8_t *e8 = w->enc.data;
    uint16_t *e16 = (uint16_t *)w->enc.data;
    uint32_t *e32 = (uint32_t *)w->enc.data;
    uint64_t ub = (uint64_t)lo;
    for (uint64_t i = 0; i < count && width > 0; i++) {
        uint64_t d = (uint64_t)(is64 ? v64[i] : v32[i]) - ub;
        if (width == 1)
            e8[i] = (uint8_t)d;
        else if (width == 2)
            e16[i] = (uint16_t)d;
        else
            e32[i] = (uint32_t)d;
    }
    return put_stream(w, m, w->enc.data, bytes, err);
}

sl_err_t wh_writer_emit_floats(sl_wh_writer_t *w, uint8_t kind, const char *name, const float *vals,
                               uint64_t count, sl_error_t *err)
{
    wmeta_t *m = meta_for(w, kind, name, count);
    if (m == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "stream index");
    float lo = INFINITY, hi = -INFINITY;
    bool any = false;
    for (uint64_t i = 0; i < count; i++) {
        float v = vals[i];
        if (v != v) continue;
        any = true;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    if (any) {
        m->has_float = true;
        m->fmin = lo;
        m->fmax = hi;
    }
    if (!choose(w, kind) || count == 0)
        return put_stream(w, m, vals, (size_t)count * sizeof(float), err);
    if (!wh_buf_reserve(&w->comp, w->a, (size_t)count * 8 + 16))
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "encode %llu values",
                              (unsigned long long)count);
    uint64_t *u = (uint64_t *)w->comp.data;
    const uint32_t *bits = (const uint32_t *)(const void *)vals;
    for (uint64_t i = 0; i < count; i++)
        u[i] = bits[i];
    return emit_v2(w, m, u, count, false, false, 4, vals, err);
}

/* Pages of a column chunk (column_internal.h): page headers read from the
 * source in a growing window, decompressed with the chunk's codec and
 * checked against their CRC, dictionary pages loaded, and a data page's
 * levels and values set up for the batches of column.c to take. */
#include <lz4.h>
#include <snappy-c.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "column_internal.h"
#include "thrift.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        sl_err_t rc_ = (x);                                                                        \
        if (rc_ != SL_OK) return rc_;                                                              \
    } while (0)

/* Page headers are read in a window that grows to this (their statistics
 * may hold long min/max values). */
#define MAX_PAGE_HEADER (16u << 20)

enum { DATA_PAGE = 0, INDEX_PAGE = 1, DICTIONARY_PAGE = 2, DATA_PAGE_V2 = 3 };

typedef struct page_header {
    int32_t type, usize, csize, crc;
    bool has_crc;
    int32_t num_values, encoding, def_enc, rep_enc; /* data page v1, dictionary page */
    int32_t def_len, rep_len;                       /* v2 */
    bool compressed;                                /* v2 is_compressed, default true */
    bool has_body;
} page_header_t;

/* ---- page headers ---- */

static sl_err_t dec_page_header(sl_pq_thrift_t *t, page_header_t *h)
{
    memset(h, 0, sizeof *h);
    h->type = -1;
    h->compressed = true;
    TRY(sl_pq_thrift_struct_begin(t, SL_PQ_T_STRUCT, "PageHeader"));
    int16_t last = 0, id;
    uint8_t ft;
    for (;;) {
        TRY(sl_pq_thrift_field(t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        if (id == 1) {
            TRY(sl_pq_thrift_i32(t, ft, id, &h->type));
        } else if (id == 2) {
            TRY(sl_pq_thrift_i32(t, ft, id, &h->usize));
        } else if (id == 3) {
            TRY(sl_pq_thrift_i32(t, ft, id, &h->csize));
        } else if (id == 4) {
            TRY(sl_pq_thrift_i32(t, ft, id, &h->crc));
            h->has_crc = true;
        } else if (id == 5 || id == 7 || id == 8) {
            /* DataPageHeader, DictionaryPageHeader, DataPageHeaderV2 */
            const char *name = id == 5   ? "DataPageHeader"
                               : id == 7 ? "DictionaryPageHeader"
                                         : "DataPageHeaderV2";
            TRY(sl_pq_thrift_struct_begin(t, ft, name));
            h->has_body = true;
            int16_t l2 = 0, id2;
            uint8_t t2;
            for (;;) {
                TRY(sl_pq_thrift_field(t, &l2, &id2, &t2));
                if (t2 == SL_PQ_T_STOP) break;
                int32_t *dst = NULL;
                if (id2 == 1) dst = &h->num_values;
                if (id == 5 && id2 == 2) dst = &h->encoding;
                if (id == 5 && id2 == 3) dst = &h->def_enc;
                if (id == 5 && id2 == 4) dst = &h->rep_enc;
                if (id == 7 && id2 == 2) dst = &h->encoding;
                if (id == 8 && id2 == 4) dst = &h->encoding;
                if (id == 8 && id2 == 5) dst = &h->def_len;
                if (id == 8 && id2 == 6) dst = &h->rep_len;
                if (dst != NULL)
                    TRY(sl_pq_thrift_i32(t, t2, id2, dst));
                else if (id == 8 && id2 == 7)
                    TRY(sl_pq_thrift_bool(t, t2, id2, &h->compressed));
                else
                    TRY(sl_pq_thrift_skip(t, t2));
            }
            sl_pq_thrift_struct_end(t, "PageHeader");
        } else {
            TRY(sl_pq_thrift_skip(t, ft));
        }
    }
    sl_pq_thrift_struct_end(t, "PageHeader");
    return SL_OK;
}

/* Read and decode the header at r->pos; *hlen its size in bytes. */
static sl_err_t read_page_header(sl_pq_reader_t *r, page_header_t *h, size_t *hlen, sl_error_t *err)
{
    uint64_t avail = r->end - r->pos;
    size_t win = avail < 256 ? (size_t)avail : 256;
    for (;;) {
        if (!sl_pq_buf_fit(r->a, &r->hdr, win))
            return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
        TRY(r->f->src.read_at(r->f->src.ctx, r->pos, win, r->hdr.p, err));
        sl_pq_thrift_t t;
        sl_error_t e = {0};
        sl_pq_thrift_init(&t, r->hdr.p, win, &e);
        sl_err_t rc = dec_page_header(&t, h);
        if (rc == SL_OK) {
            *hlen = (size_t)(t.p - (const uint8_t *)r->hdr.p);
            return SL_OK;
        }
        if (rc == SL_ERR_TRUNCATED && win < avail && win < MAX_PAGE_HEADER) {
            win = avail < (uint64_t)win * 8 ? (size_t)avail : win * 8;
            continue;
        }
        if (err != NULL) *err = e;
        return rc;
    }
}

/* The ulen bytes of a page stored as [src, src + slen), decompressed into
 * the buffer into (grown, its contents not kept); *out: where they are
 * (src itself when the chunk is not compressed). */
static sl_err_t decompress(sl_pq_reader_t *r, const uint8_t *src, size_t slen, size_t ulen,
                           sl_pq_buf_t *into, const uint8_t **out, sl_error_t *err)
{
    int codec = r->ch->codec;
    if (codec == SL_PQ_UNCOMPRESSED) {
        if (slen != ulen)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "uncompressed page of %zu bytes says it holds %zu", slen, ulen);
        *out = src;
        return SL_OK;
    }
    if (!sl_pq_buf_fit(r->a, into, ulen ? ulen : 1))
        return sl_error_set(err, SL_ERR_NOMEM, "out of memory for a page of %zu bytes", ulen);
    uint8_t *dst = into->p;
    *out = dst;
    const char *name = sl_pq_codec_name(codec);
    switch (codec) {
    case SL_PQ_SNAPPY: {
        size_t n;
        if (snappy_uncompressed_length((const char *)src, slen, &n) != SNAPPY_OK || n != ulen)
            return sl_error_set(err, SL_ERR_CORRUPT, "SNAPPY page does not hold %zu bytes", ulen);
        n = ulen;
        if (snappy_uncompress((const char *)src, slen, (char *)dst, &n) != SNAPPY_OK || n != ulen)
            return sl_error_set(err, SL_ERR_CORRUPT, "SNAPPY page does not decompress");
        return SL_OK;
    }
    case SL_PQ_GZIP: {
        z_stream z;
        memset(&z, 0, sizeof z);
        if (inflateInit2(&z, 15 + 32) != Z_OK)
            return sl_error_set(err, SL_ERR_NOMEM, "zlib inflateInit2 failed");
        z.next_in = (Bytef *)src;
        z.avail_in = (uInt)slen;
        z.next_out = dst;
        z.avail_out = (uInt)ulen;
        int zr = inflate(&z, Z_FINISH);
        size_t got = z.total_out;
        inflateEnd(&z);
        if (zr != Z_STREAM_END || got != ulen)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "GZIP page does not decompress to %zu bytes (zlib %d, %zu bytes)",
                                ulen, zr, got);
        return SL_OK;
    }
    case SL_PQ_ZSTD: {
        /* one context per reader, or the scratch's for all of a thread's
         * readers, kept across pages and chunks (a fresh one per page is
         * an allocation of its tables every time) */
        struct ZSTD_DCtx_s **zd = r->scratch ? &r->scratch->zd : &r->zd;
        if (*zd == NULL && (*zd = ZSTD_createDCtx()) == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "out of memory for a ZSTD context");
        size_t n = ZSTD_decompressDCtx(*zd, dst, ulen, src, slen);
        if (ZSTD_isError(n) || n != ulen)
            return sl_error_set(
                err, SL_ERR_CORRUPT, "ZSTD page does not decompress to %zu bytes%s%s", ulen,
                ZSTD_isError(n) ? ": " : "", ZSTD_isError(n) ? ZSTD_getErrorName(n) : "");
        return SL_OK;
    }
    case SL_PQ_LZ4_RAW: {
        if (slen > INT32_MAX || ulen > INT32_MAX)
            return sl_error_set(err, SL_ERR_TOO_LARGE, "LZ4_RAW page too large");
        int n = LZ4_decompress_safe((const char *)src, (char *)dst, (int)slen, (int)ulen);
        if (n < 0 || (size_t)n != ulen)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "LZ4_RAW page does not decompress to %zu "
                                "bytes",
                                ulen);
        return SL_OK;
    }
    default:
        return sl_error_set(err, SL_ERR_UNSUPPORTED, "codec %s is not supported", name);
    }
}

/* Levels of width w: v1's 4-byte length then RLE; *p advances past them. */
static sl_err_t levels_v1(sl_pq_rle_t *rle, int enc, unsigned w, const uint8_t **p,
                          const uint8_t *end, const char *what, sl_error_t *err)
{
    if (enc != SL_PQ_ENC_RLE)
        return sl_error_set(err, SL_ERR_UNSUPPORTED, "%s levels in encoding %s are not supported",
                            what, sl_pq_encoding_name(enc));
    if (end - *p < 4)
        return sl_error_set(err, SL_ERR_TRUNCATED, "%s levels' length runs past the page", what);
    uint32_t len = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 |
                   (uint32_t)(*p)[3] << 24;
    if (len > (size_t)(end - *p - 4))
        return sl_error_set(err, SL_ERR_TRUNCATED, "%s levels of %u bytes run past the page", what,
                            len);
    sl_pq_rle_init(rle, *p + 4, len, w);
    *p += 4 + (size_t)len;
    return SL_OK;
}

/* Read pages until a data page is set up (dictionary pages loaded on the
 * way). *done: the chunk has no more pages. */
sl_err_t sl_pq_page_load(sl_pq_reader_t *r, bool *done, sl_error_t *err)
{
    *done = false;
    for (;;) {
        if (r->pos >= r->end) {
            if (r->chunk_values > 0)
                return sl_error_set(err, SL_ERR_TRUNCATED,
                                    "file %s row group %u column %s: the chunk ends with %lld of "
                                    "its values missing",
                                    r->f->name, r->rg, r->c->path, (long long)r->chunk_values);
            *done = true;
            return SL_OK;
        }
        r->page_offset = r->pos;
        page_header_t h;
        size_t hlen = 0;
        if (read_page_header(r, &h, &hlen, err) != SL_OK) return sl_pq_where(r, err);
        r->pos += hlen;
        uint64_t left = r->end - r->pos;
        if (h.csize < 0 || h.usize < 0 || (uint32_t)h.csize > SL_PQ_MAX_PAGE ||
            (uint32_t)h.usize > SL_PQ_MAX_PAGE) {
            sl_error_set(err, SL_ERR_CORRUPT, "page sizes %d compressed, %d uncompressed", h.csize,
                         h.usize);
            return sl_pq_where(r, err);
        }
        if ((uint64_t)h.csize > left) {
            sl_error_set(err, SL_ERR_CORRUPT,
                         "page of %d bytes is larger than what is left of its chunk (%llu bytes)",
                         h.csize, (unsigned long long)left);
            return sl_pq_where(r, err);
        }
        /* Bytes used only while the page is decompressed go to the shared
         * scratch; a page read later (levels of a v2 page, the values of
         * an uncompressed one) keeps them in the reader's own buffer. */
        bool once =
            r->scratch != NULL && (h.type == DICTIONARY_PAGE ||
                                   (h.type == DATA_PAGE && r->ch->codec != SL_PQ_UNCOMPRESSED));
        sl_pq_buf_t *into = once ? &r->scratch->page : &r->cbuf;
        if (!sl_pq_buf_fit(once ? r->scratch->a : r->a, into, h.csize ? (size_t)h.csize : 1)) {
            sl_error_set(err, SL_ERR_NOMEM, "out of memory for a page of %d bytes", h.csize);
            return sl_pq_where(r, err);
        }
        if (r->f->src.read_at(r->f->src.ctx, r->pos, (size_t)h.csize, into->p, err) != SL_OK)
            return sl_pq_where(r, err);
        r->pos += (uint64_t)h.csize;
        r->pages++;
        const uint8_t *page = into->p;
        if (h.has_crc && (uint32_t)h.crc != (uint32_t)crc32(0, page, (uInt)h.csize)) {
            sl_error_set(err, SL_ERR_CORRUPT, "page CRC %08x, the bytes have %08x", (uint32_t)h.crc,
                         (uint32_t)crc32(0, page, (uInt)h.csize));
            return sl_pq_where(r, err);
        }
        if (h.type != DATA_PAGE && h.type != DATA_PAGE_V2 && h.type != DICTIONARY_PAGE)
            continue; /* index pages and unknown kinds carry no values */
        if (!h.has_body || h.num_values < 0 || (uint32_t)h.num_values > SL_PQ_MAX_PAGE_VALUES) {
            sl_error_set(err, SL_ERR_CORRUPT, "%s without its header or with %d values",
                         h.type == DICTIONARY_PAGE ? "dictionary page" : "data page", h.num_values);
            return sl_pq_where(r, err);
        }
        const uint8_t *data;
        if (h.type == DICTIONARY_PAGE) {
            if (r->has_dict) {
                sl_error_set(err, SL_ERR_CORRUPT, "a second dictionary page in one chunk");
                return sl_pq_where(r, err);
            }
            if (h.encoding != SL_PQ_ENC_PLAIN && h.encoding != SL_PQ_ENC_PLAIN_DICTIONARY) {
                sl_error_set(err, SL_ERR_UNSUPPORTED, "dictionary page in encoding %s",
                             sl_pq_encoding_name(h.encoding));
                return sl_pq_where(r, err);
            }
            /* A dictionary whose PLAIN bytes are its decoded entries
             * (INT64, FLOAT, DOUBLE) is decompressed straight into the
             * dictionary's buffer and read there: no copy, and no second
             * buffer of its size first touched. */
            if (r->ch->codec != SL_PQ_UNCOMPRESSED && sl_pq_dict_in_place(r->c)) {
                if (decompress(r, page, (size_t)h.csize, (size_t)h.usize, &r->dict_vals, &data,
                               err) != SL_OK ||
                    sl_pq_dict_set(r, (size_t)h.usize, (uint32_t)h.num_values, err) != SL_OK)
                    return sl_pq_where(r, err);
                continue;
            }
            if (decompress(r, page, (size_t)h.csize, (size_t)h.usize, &r->ubuf, &data, err) !=
                    SL_OK ||
                sl_pq_dict_load(r, data, (size_t)h.usize, (uint32_t)h.num_values, err) != SL_OK)
                return sl_pq_where(r, err);
            continue;
        }
        unsigned dw = sl_pq_bit_width((unsigned)r->c->max_def),
                 rw = sl_pq_bit_width((unsigned)r->c->max_rep);
        const uint8_t *p, *end;
        if (h.type == DATA_PAGE) {
            if (decompress(r, page, (size_t)h.csize, (size_t)h.usize, &r->ubuf, &data, err) !=
                SL_OK)
                return sl_pq_where(r, err);
            p = data;
            end = data + h.usize;
            if ((r->c->max_rep > 0 &&
                 levels_v1(&r->rep, h.rep_enc, rw, &p, end, "repetition", err) != SL_OK) ||
                (r->c->max_def > 0 &&
                 levels_v1(&r->def, h.def_enc, dw, &p, end, "definition", err) != SL_OK))
                return sl_pq_where(r, err);
        } else {
            if (h.def_len < 0 || h.rep_len < 0 ||
                (int64_t)h.def_len + h.rep_len > (int64_t)h.csize ||
                (int64_t)h.def_len + h.rep_len > (int64_t)h.usize) {
                sl_error_set(err, SL_ERR_CORRUPT,
                             "levels of %d + %d bytes in a page of %d bytes (%d uncompressed)",
                             h.rep_len, h.def_len, h.csize, h.usize);
                return sl_pq_where(r, err);
            }
            size_t lv = (size_t)h.def_len + (size_t)h.rep_len;
            sl_pq_rle_init(&r->rep, page, (size_t)h.rep_len, rw);
            sl_pq_rle_init(&r->def, page + h.rep_len, (size_t)h.def_len, dw);
            size_t ulen = (size_t)h.usize - lv;
            if (h.compressed) {
                if (decompress(r, page + lv, (size_t)h.csize - lv, ulen, &r->ubuf, &data, err) !=
                    SL_OK)
                    return sl_pq_where(r, err);
            } else {
                if ((size_t)h.csize - lv != ulen) {
                    sl_error_set(err, SL_ERR_CORRUPT,
                                 "uncompressed v2 page of %d bytes says it holds %d", h.csize,
                                 h.usize);
                    return sl_pq_where(r, err);
                }
                data = page + lv;
            }
            p = data;
            end = data + ulen;
        }
        r->encoding = h.encoding;
        if (sl_pq_values_begin(r, p, (size_t)(end - p), (uint32_t)h.num_values, err) != SL_OK)
            return sl_pq_where(r, err);
        r->page_left = (uint32_t)h.num_values;
        r->chunk_values -= h.num_values;
        r->in_page = true;
        r->lv_len = r->lv_pos = 0;
        return SL_OK;
    }
}

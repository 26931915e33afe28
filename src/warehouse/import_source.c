/* Import input: a file (or standard input) read as plain text, or
 * decompressed on the fly when it is gzip or zstd, and cut into lines or
 * records (the one read loop; CSV's record cutter is import_csv_read.c).
 *
 * Why magic bytes, not the name: Criteo ships day_N.gz, users rename files,
 * and standard input has no name; the first bytes say what a file is.
 * Why one decompressing reader per input: a compressed stream can only be
 * decoded from its start, so an input is never split among threads; the
 * importer already gives every input a thread of its own (import.c), and
 * memory stays one compressed read buffer, one decoder window (zlib's 32
 * KiB; zstd's bounded by its default window limit, 128 MiB) and the line
 * buffer.
 * Why check the first block: a binary file (a table file, an archive, a
 * compressed format we do not read) parsed as lines yields nothing but
 * bad rows; one error naming the file and what it looks like is what the
 * user needs instead. */
#include "common/err.h"
#include "common/mem.h"
#include "import_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define IN_BYTES ((size_t)1 << 18)   /* compressed read buffer */
#define PEEK_BYTES ((size_t)1 << 16) /* decoded bytes checked for being text */
#define CHUNK_BYTES ((size_t)1 << 20)

typedef enum kind { K_PLAIN, K_GZIP, K_ZSTD } kind_t;

struct imp_source {
    const sl_allocator_t *a;
    const char *name;
    int fd;
    kind_t kind;
    uint8_t *in; /* [IN_BYTES] bytes read from fd, not yet decoded */
    size_t in_pos, in_len;
    bool in_eof;
    uint64_t consumed; /* bytes read from fd */
    z_stream z;
    bool z_ready, in_member; /* in_member: a gzip member begun and not ended */
    ZSTD_DCtx *zd;
    size_t zret; /* ZSTD_decompressStream's last hint; 0: a frame ended */
    char *peek;  /* [PEEK_BYTES] the first decoded bytes */
    size_t peek_pos, peek_len;
    bool peek_only;     /* reads end with the peek (imp_source_set_peek_only) */
    bool ranged;        /* a byte range of a plain file (imp_source_open_range) */
    uint64_t remaining; /* ranged: bytes of the range not yet read */
};

/* Formats that are not text and that we do not decode, by magic. */
static const struct {
    const char *magic;
    size_t len;
    const char *what;
} others[] = {
    {"BZh", 3, "bzip2-compressed data (decompress it first: bunzip2 -k)"},
    {"\xfd"
     "7zXZ\0",
     6, "xz-compressed data (decompress it first: unxz -k)"},
    {"\x5d\0\0", 3, "lzma-compressed data (decompress it first: unlzma -k)"},
    {"\x04\x22\x4d\x18", 4, "lz4-compressed data (decompress it first: lz4 -d)"},
    {"\x1f\x9d", 2, "compress (.Z) data (decompress it first: uncompress)"},
    {"LZIP", 4, "lzip-compressed data (decompress it first: lzip -dk)"},
    {"PK\x03\x04", 4, "a zip archive (extract it first: unzip)"},
    {"7z\xbc\xaf\x27\x1c", 6, "a 7z archive (extract it first: 7z x)"},
    {"PAR1", 4, "a Parquet file (import it with --format parquet)"},
    {SL_WH_FILE_MAGIC, 4, "a sluice table data file (read it with sluice table cat)"},
    {SL_WH_SCHEMA_MAGIC, 4, "a sluice table schema file"},
};

static sl_err_t fill(imp_source_t *s, sl_error_t *err)
{
    size_t want = IN_BYTES;
    if (s->ranged && s->remaining < want) want = (size_t)s->remaining;
    if (want == 0) {
        s->in_pos = s->in_len = 0;
        s->in_eof = true;
        return SL_OK;
    }
    for (;;) {
        ssize_t n = read(s->fd, s->in, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sl_error_set(err, SL_ERR_IO, "read %s: %s", s->name, strerror(errno));
        s->in_pos = 0;
        s->in_len = (size_t)n;
        s->in_eof = n == 0;
        s->consumed += (uint64_t)n;
        if (s->ranged) s->remaining -= (uint64_t)n;
        return SL_OK;
    }
}

/* Decode up to cap bytes into buf; *n = 0 only at the end of the input. */
static sl_err_t decode(imp_source_t *s, char *buf, size_t cap, size_t *n, sl_error_t *err)
{
    *n = 0;
    for (;;) {
        if (s->in_pos == s->in_len && !s->in_eof) {
            SL_FORWARD_IF_ERROR(fill(s, err));
        }
        bool at_end = s->in_pos == s->in_len && s->in_eof;
        size_t avail = s->in_len - s->in_pos, got = 0;
        if (s->kind == K_PLAIN) {
            got = avail < cap ? avail : cap;
            memcpy(buf, s->in + s->in_pos, got);
            s->in_pos += got;
        } else if (s->kind == K_GZIP) {
            s->z.next_in = s->in + s->in_pos;
            s->z.avail_in = (uInt)avail;
            s->z.next_out = (Bytef *)buf;
            s->z.avail_out = (uInt)(cap < UINT32_MAX ? cap : UINT32_MAX);
            if (avail > 0) s->in_member = true;
            int zr = inflate(&s->z, Z_NO_FLUSH);
            s->in_pos = s->in_len - s->z.avail_in;
            got = (size_t)((char *)s->z.next_out - buf);
            if (zr == Z_STREAM_END) {
                s->in_member = false; /* another member may follow (gzip's concatenation) */
                inflateReset(&s->z);
            } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s: corrupt gzip data near compressed byte %llu: %s", s->name,
                                    (unsigned long long)(s->consumed - s->in_len + s->in_pos),
                                    s->z.msg ? s->z.msg : zError(zr));
            }
            if (got == 0 && at_end && s->in_member)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s: truncated gzip data (the file ends inside a member "
                                    "after %llu bytes)",
                                    s->name, (unsigned long long)s->consumed);
        } else if (at_end && s->zret == 0) {
            got = 0; /* the last frame ended with the file */
        } else {
            ZSTD_inBuffer zi = {s->in + s->in_pos, avail, 0};
            ZSTD_outBuffer zo = {buf, cap, 0};
            size_t zr = ZSTD_decompressStream(s->zd, &zo, &zi);
            if (ZSTD_isError(zr))
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s: corrupt zstd data near compressed byte %llu: %s", s->name,
                                    (unsigned long long)(s->consumed - s->in_len + s->in_pos),
                                    ZSTD_getErrorName(zr));
            s->zret = zr;
            s->in_pos += zi.pos;
            got = zo.pos;
            if (got == 0 && at_end && s->zret != 0)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s: truncated zstd data (the file ends inside a frame "
                                    "after %llu bytes)",
                                    s->name, (unsigned long long)s->consumed);
        }
        if (got > 0 || at_end) {
            *n = got;
            return SL_OK;
        }
    }
}

/* Length of the valid UTF-8 sequence at p (end: one past the block), 0
 * when invalid; a sequence cut by the block's end counts as valid when
 * cut is true. */
static size_t utf8_len(const uint8_t *p, const uint8_t *end, bool cut)
{
    uint8_t c = p[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f; /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else
        return 0;
    for (size_t i = 1; i < len; i++) {
        if (p + i >= end) return cut ? (size_t)(end - p) : 0;
        uint8_t b = p[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return 0;
    }
    return len;
}

/* Refuse a first block that is not text: a NUL byte, or invalid UTF-8. */
static sl_err_t check_text(const imp_source_t *s, bool more, sl_error_t *err)
{
    const uint8_t *p = (const uint8_t *)s->peek, *end = p + s->peek_len;
    const char *how = s->kind == K_GZIP   ? " (gzip-decompressed)"
                      : s->kind == K_ZSTD ? " (zstd-decompressed)"
                                          : "";
    for (const uint8_t *q = p; q < end;) {
        if (*q == 0)
            return sl_error_set(err, SL_ERR_INVALID,
                                "%s: not text: a NUL byte at byte %zu of its content%s; "
                                "sluice table import reads text (Criteo TSV, jsonl or CSV), "
                                "plain, gzip or zstd",
                                s->name, (size_t)(q - p), how);
        size_t len = utf8_len(q, end, more);
        if (len == 0)
            return sl_error_set(err, SL_ERR_INVALID,
                                "%s: not text: invalid UTF-8 (byte 0x%02x) at byte %zu of its "
                                "content%s; sluice table import reads text (Criteo TSV, "
                                "jsonl or CSV), plain, gzip or zstd",
                                s->name, *q, (size_t)(q - p), how);
        q += len;
    }
    return SL_OK;
}

/* What the first bytes say; opens the decoder. */
static sl_err_t detect(imp_source_t *s, sl_error_t *err)
{
    /* The magic may straddle short reads of a pipe. */
    while (s->in_len < 8 && !s->in_eof) {
        ssize_t n = read(s->fd, s->in + s->in_len, IN_BYTES - s->in_len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sl_error_set(err, SL_ERR_IO, "read %s: %s", s->name, strerror(errno));
        s->in_eof = n == 0;
        s->in_len += (size_t)n;
        s->consumed += (uint64_t)n;
    }
    const uint8_t *m = s->in;
    size_t len = s->in_len;
    if (len >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
        s->kind = K_GZIP;
        memset(&s->z, 0, sizeof s->z);
        if (inflateInit2(&s->z, 15 + 16) != Z_OK)
            return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a gzip decoder", s->name);
        s->z_ready = true;
        return SL_OK;
    }
    if (len >= 4 && memcmp(m, "\x28\xb5\x2f\xfd", 4) == 0) {
        s->kind = K_ZSTD;
        s->zret = 1;
        if ((s->zd = ZSTD_createDCtx()) == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a zstd decoder", s->name);
        return SL_OK;
    }
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (len >= others[i].len && memcmp(m, others[i].magic, others[i].len) == 0)
            return sl_error_set(err, SL_ERR_INVALID,
                                "%s: not text: it looks like %s; sluice table import reads text "
                                "(Criteo TSV, jsonl or CSV), plain, gzip or zstd",
                                s->name, others[i].what);
    s->kind = K_PLAIN;
    return SL_OK;
}

sl_err_t imp_source_open(const char *path, const sl_allocator_t *a, imp_source_t **out,
                         sl_error_t *err)
{
    *out = NULL;
    imp_source_t *s = sl_calloc(a, 1, sizeof *s);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a reader", path);
    s->a = a;
    s->name = path;
    s->fd = -1;
    s->in = sl_alloc(a, IN_BYTES);
    s->peek = sl_alloc(a, PEEK_BYTES);
    sl_err_t rc = SL_OK;
    if (s->in == NULL || s->peek == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a read buffer", path);
        goto fail;
    }
    s->fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        rc = sl_error_set(err, SL_ERR_IO, "open %s: %s", path, strerror(errno));
        goto fail;
    }
    if ((rc = detect(s, err)) != SL_OK) goto fail;
    size_t n = 1;
    while (s->peek_len < PEEK_BYTES && n > 0)
        if ((rc = decode(s, s->peek + s->peek_len, PEEK_BYTES - s->peek_len, &n, err)) != SL_OK)
            goto fail;
        else
            s->peek_len += n;
    if ((rc = check_text(s, n > 0, err)) != SL_OK) goto fail;
    *out = s;
    return SL_OK;
fail:
    imp_source_close(s);
    return rc;
}

sl_err_t imp_source_open_range(const char *path, uint64_t begin, uint64_t end,
                               const sl_allocator_t *a, imp_source_t **out, sl_error_t *err)
{
    *out = NULL;
    imp_source_t *s = sl_calloc(a, 1, sizeof *s);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a reader", path);
    s->a = a;
    s->name = path;
    s->kind = K_PLAIN;
    s->ranged = true;
    s->remaining = end > begin ? end - begin : 0;
    s->in = sl_alloc(a, IN_BYTES);
    s->peek = sl_alloc(a, PEEK_BYTES);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    sl_err_t rc = SL_OK;
    if (s->in == NULL || s->peek == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a read buffer", path);
    else if (s->fd < 0)
        rc = sl_error_set(err, SL_ERR_IO, "open %s: %s", path, strerror(errno));
    else if (lseek(s->fd, (off_t)begin, SEEK_SET) != (off_t)begin)
        rc = sl_error_set(err, SL_ERR_IO, "seek %s to byte %llu: %s", path,
                          (unsigned long long)begin, strerror(errno));
    if (rc != SL_OK) {
        imp_source_close(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

bool imp_source_plain(const imp_source_t *s)
{
    return s->kind == K_PLAIN;
}

void imp_source_set_peek_only(imp_source_t *s, bool peek_only)
{
    s->peek_only = peek_only;
    s->peek_pos = 0;
}

sl_err_t imp_source_read(imp_source_t *s, char *buf, size_t cap, size_t *n, sl_error_t *err)
{
    if (s->peek_pos < s->peek_len) {
        size_t k = s->peek_len - s->peek_pos;
        if (k > cap) k = cap;
        memcpy(buf, s->peek + s->peek_pos, k);
        s->peek_pos += k;
        *n = k;
        return SL_OK;
    }
    if (s->peek_only) {
        *n = 0;
        return SL_OK;
    }
    return decode(s, buf, cap, n, err);
}

uint64_t imp_source_consumed(const imp_source_t *s)
{
    return s->consumed;
}

void imp_source_close(imp_source_t *s)
{
    if (s == NULL) return;
    if (s->fd >= 0 && s->fd != STDIN_FILENO) close(s->fd);
    if (s->z_ready) inflateEnd(&s->z);
    ZSTD_freeDCtx(s->zd);
    sl_free(s->a, s->in, IN_BYTES);
    sl_free(s->a, s->peek, PEEK_BYTES);
    sl_free(s->a, s, sizeof *s);
}

sl_err_t imp_read_cut(imp_source_t *src, const sl_allocator_t *a, const char *noun, bool strip_bom,
                      imp_cut_fn cut, void *cut_state, imp_record_fn on_record,
                      imp_chunk_fn on_chunk, void *ctx, sl_error_t *err)
{
    size_t cap = CHUNK_BYTES, have = 0, scanned = 0, skipped_len = 0;
    bool skipping = false, first = strip_bom; /* skipping: inside an over-long record */
    uint32_t inner = 0;                       /* of the record being cut */
    char *buf = sl_alloc(a, cap);
    if (buf == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a read buffer", src->name);
    sl_err_t rc = SL_OK;
    uint64_t seen = imp_source_consumed(src);
    if (on_chunk != NULL && !on_chunk(ctx, seen)) goto done;
    for (;;) {
        if (have == cap) {
            if (cap < IMP_LINE_LIMIT + 1) {
                char *nb = sl_realloc(a, buf, cap, cap * 2);
                if (nb == NULL) {
                    rc = sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for a %s", src->name, noun);
                    break;
                }
                buf = nb;
                cap *= 2;
            } else {
                /* Keep the cutter's state and the length, not the bytes. */
                skipping = true;
                skipped_len += have;
                have = scanned = 0;
            }
        }
        size_t n;
        if ((rc = imp_source_read(src, buf + have, cap - have, &n, err)) != SL_OK) break;
        uint64_t now = imp_source_consumed(src);
        if (on_chunk != NULL && !on_chunk(ctx, now - seen)) break;
        seen = now;
        if (n == 0) {
            if (skipping || have > 0) rc = on_record(ctx, buf, skipped_len + have, inner, false);
            break;
        }
        size_t end = have + n, start = 0;
        if (first) {
            if (end < 3) {
                have = end; /* too short to tell: read more */
                continue;
            }
            if (memcmp(buf, "\xef\xbb\xbf", 3) == 0) start = scanned = 3;
            first = false;
        }
        for (;;) {
            size_t nl = cut(cut_state, buf, scanned, end, &inner);
            if (nl == end) {
                scanned = end;
                break;
            }
            size_t len = nl - start + skipped_len;
            skipping = false;
            skipped_len = 0;
            rc = on_record(ctx, buf + start, len, inner, true);
            inner = 0;
            if (rc != SL_OK) break;
            start = scanned = nl + 1;
        }
        if (rc != SL_OK) break;
        memmove(buf, buf + start, end - start);
        have = end - start;
        scanned -= start;
    }
done:
    sl_free(a, buf, cap);
    return rc == SL_ERR_CLOSED ? SL_OK : rc;
}

/* A line ends at every '\n'. */
static size_t cut_line(void *state, const char *p, size_t from, size_t end, uint32_t *inner)
{
    (void)state;
    (void)inner;
    const char *nl = memchr(p + from, '\n', end - from);
    return nl != NULL ? (size_t)(nl - p) : end;
}

/* imp_read_lines's callbacks and their context, behind imp_read_cut's. */
typedef struct lines {
    imp_line_fn on_line;
    imp_chunk_fn on_chunk;
    void *ctx;
} lines_t;

static sl_err_t line_record(void *ctx, const char *rec, size_t len, uint32_t inner, bool ended)
{
    (void)inner;
    (void)ended;
    const lines_t *l = ctx;
    return l->on_line(l->ctx, rec, len);
}

static bool line_chunk(void *ctx, uint64_t new_bytes)
{
    const lines_t *l = ctx;
    return l->on_chunk(l->ctx, new_bytes);
}

sl_err_t imp_read_lines(imp_source_t *src, const sl_allocator_t *a, imp_line_fn on_line,
                        imp_chunk_fn on_chunk, void *ctx, sl_error_t *err)
{
    lines_t l = {on_line, on_chunk, ctx};
    return imp_read_cut(src, a, "line", false, cut_line, NULL, line_record,
                        on_chunk != NULL ? line_chunk : NULL, &l, err);
}

/* The column chunk reader (parquet.h): definition and repetition levels
 * into validity and list offsets, in batches of at most N rows. A chunk is
 * read page by page from the source (page.c: page headers, decompression,
 * CRC): the reader holds one page's compressed and decompressed bytes at a
 * time. */
#include <string.h>
#include <zstd.h>

#include "column_internal.h"
#include "common/fileio.h"
#include "common/mem.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        sl_err_t rc_ = (x);                                                                        \
        if (rc_ != SL_OK) return rc_;                                                              \
    } while (0)

sl_err_t sl_pq_where(sl_pq_reader_t *r, sl_error_t *err)
{
    return sl_error_prefix(
        err, "file %s row group %u column %s page %llu (offset %llu): ", r->f->name, r->rg,
        r->c->path, (unsigned long long)r->pages, (unsigned long long)r->page_offset);
}

static bool codec_supported(int codec)
{
    return codec == SL_PQ_UNCOMPRESSED || codec == SL_PQ_SNAPPY || codec == SL_PQ_GZIP ||
           codec == SL_PQ_ZSTD || codec == SL_PQ_LZ4_RAW;
}

/* Check that column col of row group rg can be read; *start: where its
 * chunk's first page is. */
static sl_err_t check_chunk(sl_pq_file_t *f, uint32_t rg, uint32_t col, int64_t *start,
                            sl_error_t *err)
{
    const sl_pq_meta_t *m = f->meta;
    if (rg >= m->num_row_groups || col >= m->num_columns)
        return sl_error_set(err, SL_ERR_INVALID,
                            "file %s: no row group %u column %u (%u row groups, %u columns)",
                            f->name, rg, col, m->num_row_groups, m->num_columns);
    const sl_pq_column_t *c = &m->columns[col];
    const sl_pq_chunk_t *ch = &m->row_groups[rg].chunks[col];
    if (c->unsupported)
        return sl_error_set(err, SL_ERR_UNSUPPORTED, "file %s column %s: %s are not supported",
                            f->name, c->path, c->unsupported);
    if (!codec_supported(ch->codec))
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "file %s row group %u column %s: codec %s (%d) is not supported "
                            "(UNCOMPRESSED, SNAPPY, GZIP, ZSTD and LZ4_RAW are)",
                            f->name, rg, c->path, sl_pq_codec_name(ch->codec), ch->codec);
    *start = ch->data_page_offset;
    /* a dictionary page comes first; some writers store 0 for "none" */
    if (ch->dictionary_page_offset > 0 && ch->dictionary_page_offset < *start)
        *start = ch->dictionary_page_offset;
    uint64_t data_end = f->size - 8 - f->meta->footer_len;
    if (*start < 4 || ch->total_compressed < 0 || (uint64_t)*start > data_end ||
        (uint64_t)ch->total_compressed > data_end - (uint64_t)*start)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "file %s row group %u column %s: chunk of %lld bytes at %lld lies "
                            "outside the file's data (4..%llu)",
                            f->name, rg, c->path, (long long)ch->total_compressed,
                            (long long)*start, (unsigned long long)data_end);
    if (ch->num_values < 0)
        return sl_error_set(err, SL_ERR_CORRUPT, "file %s row group %u column %s: %lld values",
                            f->name, rg, c->path, (long long)ch->num_values);
    return SL_OK;
}

/* Point r (its buffers kept, everything else cleared) at a checked chunk. */
static void reader_init(sl_pq_reader_t *r, sl_pq_file_t *f, uint32_t rg, uint32_t col,
                        int64_t start)
{
    const sl_pq_column_t *c = &f->meta->columns[col];
    const sl_pq_chunk_t *ch = &f->meta->row_groups[rg].chunks[col];
    /* the fields below the level scratch are cleared by hand: the scratch
     * itself (48 KiB) needs no clearing, its lengths say what is in it */
    r->f = f;
    r->a = f->a;
    r->rg = rg;
    r->col = col;
    r->c = c;
    r->ch = ch;
    r->pos = (uint64_t)start;
    r->end = (uint64_t)start + (uint64_t)ch->total_compressed;
    r->chunk_values = ch->num_values;
    r->rows_read = 0;
    r->pages = r->page_offset = 0;
    r->has_dict = false;
    r->dict_narrow = false;
    r->dict_n = 0;
    r->map = NULL;
    r->map_f32 = NULL;
    r->map_ctx = NULL;
    r->dense = false;
    r->in_page = false;
    r->page_left = 0;
    r->encoding = 0;
    memset(&r->def, 0, sizeof r->def);
    memset(&r->rep, 0, sizeof r->rep);
    memset(&r->vrle, 0, sizeof r->vrle);
    memset(&r->delta, 0, sizeof r->delta);
    r->vp = r->vend = r->data = NULL;
    r->bit = 0;
    r->lens_n = r->lens_pos = 0;
    r->prev_len = 0;
    r->bss_count = r->bss_pos = 0;
    r->lv_len = r->lv_pos = 0;
    r->planes = false;
    r->b.kind = c->kind;
    r->b.rows = r->b.slots = 0;
    r->bytes_len = 0;
}

sl_err_t sl_pq_reader_new(sl_pq_file_t *f, uint32_t rg, uint32_t col, sl_pq_reader_t **out,
                          sl_error_t *err)
{
    *out = NULL;
    int64_t start;
    TRY(check_chunk(f, rg, col, &start, err));
    sl_pq_reader_t *r = sl_calloc(f->a, 1, sizeof *r);
    if (r == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    r->is_list = f->meta->columns[col].is_list;
    reader_init(r, f, rg, col, start);
    *out = r;
    return SL_OK;
}

sl_err_t sl_pq_reader_renew(sl_pq_file_t *f, uint32_t rg, uint32_t col, sl_pq_reader_t **r,
                            sl_error_t *err)
{
    sl_pq_reader_t *old = *r;
    const sl_pq_column_t *c = col < f->meta->num_columns ? &f->meta->columns[col] : NULL;
    if (old == NULL || c == NULL || old->a != f->a || old->b.kind != c->kind ||
        old->is_list != c->is_list) {
        /* buffers of another shape: a fresh reader */
        sl_pq_reader_destroy(old);
        *r = NULL;
        return sl_pq_reader_new(f, rg, col, r, err);
    }
    int64_t start;
    TRY(check_chunk(f, rg, col, &start, err));
    reader_init(old, f, rg, col, start);
    return SL_OK;
}

static void buf_free(const sl_allocator_t *a, sl_pq_buf_t *b)
{
    sl_free(a, b->p, b->cap);
    b->p = NULL;
    b->cap = 0;
}

sl_pq_scratch_t *sl_pq_scratch_new(const sl_allocator_t *a)
{
    sl_pq_scratch_t *s = sl_calloc(a, 1, sizeof *s);
    if (s != NULL) s->a = a ? a : sl_allocator_default();
    return s;
}

void sl_pq_scratch_destroy(sl_pq_scratch_t *s)
{
    if (s == NULL) return;
    buf_free(s->a, &s->page);
    ZSTD_freeDCtx(s->zd);
    sl_free(s->a, s, sizeof *s);
}

void sl_pq_reader_set_scratch(sl_pq_reader_t *r, sl_pq_scratch_t *s)
{
    r->scratch = s;
}

void sl_pq_reader_set_map(sl_pq_reader_t *r, sl_pq_i64_map_fn fn, const void *ctx)
{
    r->map = r->c->kind == SL_PQ_KIND_I64 ? fn : NULL;
    r->map_f32 = NULL;
    r->map_ctx = ctx;
}

void sl_pq_reader_set_map_f32(sl_pq_reader_t *r, sl_pq_f32_map_fn fn, const void *ctx)
{
    r->map = NULL;
    r->map_f32 = r->c->kind == SL_PQ_KIND_F32 ? fn : NULL;
    r->map_ctx = ctx;
}

void sl_pq_reader_set_dense(sl_pq_reader_t *r, bool dense)
{
    r->dense = dense && r->c->max_rep == 0 && r->c->kind != SL_PQ_KIND_BYTES;
}

void sl_pq_reader_destroy(sl_pq_reader_t *r)
{
    if (r == NULL) return;
    const sl_allocator_t *a = r->a;
    sl_pq_buf_t *bufs[] = {&r->hdr,  &r->cbuf,   &r->ubuf, &r->dict_vals, &r->dict_off,
                           &r->lens, &r->prefix, &r->prev, &r->dict_i32};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        buf_free(a, bufs[i]);
    ZSTD_freeDCtx(r->zd);
    /* the batch's kind, not r->c's: the file may be gone (renew) */
    int kind = r->b.kind;
    size_t vw = kind == SL_PQ_KIND_F32 ? 4 : 8;
    sl_free(a,
            kind == SL_PQ_KIND_F32   ? (void *)r->b.f32
            : kind == SL_PQ_KIND_F64 ? (void *)r->b.f64
                                     : (void *)r->b.i64,
            kind == SL_PQ_KIND_BYTES ? 0 : r->slots_cap * vw);
    sl_free(a, r->b.bytes_off, kind == SL_PQ_KIND_BYTES ? (r->slots_cap + 1) * 8 : 0);
    sl_free(a, r->b.bytes, r->bytes_cap);
    sl_free(a, r->b.valid, r->slots_cap);
    sl_free(a, r->b.list_off, r->rows_cap ? (r->rows_cap + 1) * 4 : 0);
    sl_free(a, r->b.list_valid, r->rows_cap ? r->rows_cap + 1 : 0);
    sl_free(a, r, sizeof *r);
}

uint64_t sl_pq_reader_pages(const sl_pq_reader_t *r)
{
    return r->pages;
}
/* ---- batches ---- */

/* Two arrays of the batch grown together to new sizes n0 and n1 bytes
 * (old sizes o0 and o1, contents kept): both new blocks are allocated
 * before either old one is freed, so that a failure leaves both with the
 * sizes the reader's capacities say (which destroy frees them with). */
static bool grow_pair(const sl_allocator_t *a, void **p0, size_t o0, size_t n0, void **p1,
                      size_t o1, size_t n1)
{
    void *b0 = sl_alloc(a, n0), *b1 = b0 ? sl_alloc(a, n1) : NULL;
    if (b1 == NULL) {
        sl_free(a, b0, n0);
        return false;
    }
    if (o0) memcpy(b0, *p0, o0);
    if (o1) memcpy(b1, *p1, o1);
    sl_free(a, *p0, o0);
    sl_free(a, *p1, o1);
    *p0 = b0;
    *p1 = b1;
    return true;
}

sl_err_t sl_pq_reserve_slots(sl_pq_reader_t *r, size_t n, sl_error_t *err)
{
    if (n <= r->slots_cap) return SL_OK;
    size_t cap = r->slots_cap ? r->slots_cap : 1024;
    while (cap < n)
        cap *= 2;
    if (cap > UINT32_MAX) return sl_error_set(err, SL_ERR_TOO_LARGE, "over 2^32 values in a batch");
    void **vals = r->c->kind == SL_PQ_KIND_F32   ? (void **)&r->b.f32
                  : r->c->kind == SL_PQ_KIND_F64 ? (void **)&r->b.f64
                  : r->c->kind == SL_PQ_KIND_I64 ? (void **)&r->b.i64
                                                 : (void **)&r->b.bytes_off;
    size_t w = r->c->kind == SL_PQ_KIND_F32 ? 4 : 8;
    size_t extra = r->c->kind == SL_PQ_KIND_BYTES ? 1 : 0; /* offsets: one more */
    if (!grow_pair(r->a, (void **)&r->b.valid, r->slots_cap, cap, vals,
                   r->slots_cap ? (r->slots_cap + extra) * w : 0, (cap + extra) * w))
        return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    r->slots_cap = cap;
    return SL_OK;
}

static sl_err_t reserve_rows(sl_pq_reader_t *r, size_t n, sl_error_t *err)
{
    if (!r->c->is_list || n <= r->rows_cap) return SL_OK;
    if (!grow_pair(r->a, (void **)&r->b.list_off, r->rows_cap ? (r->rows_cap + 1) * 4 : 0,
                   (n + 1) * 4, (void **)&r->b.list_valid, r->rows_cap ? r->rows_cap + 1 : 0,
                   n + 1))
        return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    r->rows_cap = n;
    return SL_OK;
}

/* Spread the n values decoded densely from slot at over the slots
 * [at, r->b.slots) whose valid byte is set; null slots get 0 or "". */
static void scatter(sl_pq_reader_t *r, uint32_t at, uint32_t n)
{
    sl_pq_batch_t *b = &r->b;
    /* no nulls: the dense values (and byte offsets) are already in place */
    if (n == b->slots - at) return;
    const uint8_t *valid = b->valid;
    const int64_t last = (int64_t)b->slots - 1, first = (int64_t)at;
    /* one loop per kind (no switch per slot), from the last slot down so
     * that no dense value is overwritten before it is moved */
#define SL_PQ_SCATTER(arr)                                                                         \
    do {                                                                                           \
        int64_t j = (int64_t)n - 1;                                                                \
        for (int64_t s = last; s >= first; s--) {                                                  \
            bool v = valid[s];                                                                     \
            (arr)[s] = v ? (arr)[at + j] : 0;                                                      \
            j -= v;                                                                                \
        }                                                                                          \
    } while (0)
    switch (b->kind) {
    case SL_PQ_KIND_I64:
        SL_PQ_SCATTER(b->i64);
        break;
    case SL_PQ_KIND_F32:
        SL_PQ_SCATTER(b->f32);
        break;
    case SL_PQ_KIND_F64:
        SL_PQ_SCATTER(b->f64);
        break;
    case SL_PQ_KIND_BYTES: {
        /* a slot ends where the last value at or before it ends */
        int64_t j = (int64_t)n - 1;
        for (int64_t s = last; s >= first; s--) {
            b->bytes_off[s + 1] = j >= 0 ? b->bytes_off[at + 1 + j] : b->bytes_off[at];
            j -= valid[s];
        }
        break;
    }
    }
#undef SL_PQ_SCATTER
}

sl_err_t sl_pq_reader_next(sl_pq_reader_t *r, uint32_t max_rows, const sl_pq_batch_t **out,
                           sl_error_t *err)
{
    sl_pq_batch_t *b = &r->b;
    const sl_pq_column_t *c = r->c;
    *out = b;
    b->rows = b->slots = b->vals = 0;
    r->dict_warm = false;
    b->dense = r->dense;
    r->bytes_len = 0;
    if (max_rows == 0) return sl_error_set(err, SL_ERR_INVALID, "a batch of 0 rows");
    TRY(sl_pq_reserve_slots(r, c->is_list ? 1024 : max_rows, err));
    TRY(reserve_rows(r, max_rows, err));
    if (c->kind == SL_PQ_KIND_BYTES) {
        b->bytes_off[0] = 0;
        TRY(sl_pq_bytes_reserve(r, 1, err)); /* b->bytes is never NULL */
    }
    if (c->is_list) b->list_off[0] = 0;
    bool full = false;
    while (!full) {
        if (!r->in_page || (r->lv_pos == r->lv_len && r->page_left == 0)) {
            r->in_page = false;
            bool done;
            TRY(sl_pq_page_load(r, &done, err));
            if (done) break;
            continue;
        }
        uint32_t at = b->slots, nvals = 0, i;
        if (c->max_rep == 0) {
            /* a scalar column: one level, one row, one slot. The levels go
             * straight into validity bytes (a run of one level is one
             * memset); without a definition level every slot is valid. */
            uint32_t n = r->page_left < SL_PQ_LEVEL_CHUNK ? r->page_left : SL_PQ_LEVEL_CHUNK;
            if (n > max_rows - b->rows) n = max_rows - b->rows;
            TRY(sl_pq_reserve_slots(r, (size_t)at + n, err));
            if (c->max_def == 0) {
                memset(b->valid + at, 1, n);
                nvals = n;
            } else {
                /* its own variable: nvals, whose address is never taken,
                 * stays in a register in the list loop below */
                uint32_t nv = 0;
                if (sl_pq_rle_valid(&r->def, (uint32_t)c->max_def, b->valid + at, n, &nv, err) !=
                    SL_OK)
                    return sl_pq_where(r, err);
                nvals = nv;
            }
            b->slots += n;
            b->rows += n;
            r->page_left -= n;
            full = b->rows == max_rows;
            if (c->kind == SL_PQ_KIND_BYTES) b->bytes_off[at] = r->bytes_len;
            /* dense: after the batch's values so far (b->vals <= at) */
            if (sl_pq_values_get(r, r->dense ? b->vals : at, nvals, err) != SL_OK)
                return sl_pq_where(r, err);
            b->vals += nvals;
            if (!r->dense) scatter(r, at, nvals);
            continue;
        }
        if (r->lv_pos == r->lv_len) {
            uint32_t k = 0;
            if (sl_pq_whole_rows(r, max_rows, &k, &nvals, err) != SL_OK) return sl_pq_where(r, err);
            if (k > 0) {
                if (c->kind == SL_PQ_KIND_BYTES) b->bytes_off[at] = r->bytes_len;
                if (sl_pq_values_get(r, at, nvals, err) != SL_OK) return sl_pq_where(r, err);
                scatter(r, at, nvals);
                continue;
            }
        }
        if (r->lv_pos == r->lv_len && sl_pq_levels_refill(r, err) != SL_OK)
            return sl_pq_where(r, err);
        /* 64 more: a block of the list pass stores 64 validity bytes */
        TRY(sl_pq_reserve_slots(r, (size_t)b->slots + (r->lv_len - r->lv_pos) + 64, err));
        if (r->planes) {
            if (b->rows == 0 && r->rows_read == 0 && r->lv_pos < r->lv_len &&
                ((r->pl_s[r->lv_pos >> 6] >> (r->lv_pos & 63)) & 1) == 0) {
                sl_error_set(err, SL_ERR_CORRUPT,
                             "the chunk starts inside a list (repetition level 1)");
                return sl_pq_where(r, err);
            }
            sl_pq_list_planes(r, max_rows, &nvals, &full);
            if (c->kind == SL_PQ_KIND_BYTES) b->bytes_off[at] = r->bytes_len;
            if (sl_pq_values_get(r, at, nvals, err) != SL_OK) return sl_pq_where(r, err);
            scatter(r, at, nvals);
            continue;
        }
        /* a list column: a level with repetition 0 starts a row; one at or
         * above elem_def is an element, valid at max_def */
        const uint8_t *D = r->lv_def, *R = r->lv_rep;
        const uint32_t ed = (uint32_t)c->elem_def, md = (uint32_t)c->max_def;
        uint32_t rows = b->rows, slots = b->slots;
        uint32_t *loff = b->list_off;
        uint8_t *lvalid = b->list_valid, *valid = b->valid;
        if (rows == 0 && r->rows_read == 0 && r->lv_pos < r->lv_len && R[r->lv_pos] != 0) {
            sl_error_set(err, SL_ERR_CORRUPT,
                         "the chunk starts inside a list (repetition level %u)", R[r->lv_pos]);
            return sl_pq_where(r, err);
        }
        /* Branch-free: the row slots are written for every level (the next
         * row's entries are overwritten when it starts; room is reserved).
         * The batch stops before the row that would make it over max_rows:
         * a block of levels no longer than the rows still allowed cannot
         * pass it (a level starts at most one row), so only the last
         * blocks of a batch look at each level's start. */
#define SL_PQ_LIST_LEVEL(i)                                                                        \
    do {                                                                                           \
        uint32_t d = D[i];                                                                         \
        loff[rows] = slots;                                                                        \
        lvalid[rows] = d + 1 >= ed;                                                                \
        rows += R[i] == 0;                                                                         \
        uint8_t v = d == md;                                                                       \
        valid[slots] = v;                                                                          \
        nvals += v;                                                                                \
        slots += d >= ed;                                                                          \
    } while (0)
        i = r->lv_pos;
        while (i < r->lv_len && !full) {
            uint32_t blk = r->lv_len - i < 64 ? r->lv_len - i : 64;
            if (blk == 64 && 64 <= max_rows - rows && !r->level_by_level) {
                sl_pq_list_block64(D + i, R + i, (uint8_t)ed, (uint8_t)md, &rows, &slots, &nvals,
                                   loff, lvalid, valid);
                i += 64;
                continue;
            }
            if (blk <= max_rows - rows) {
                for (uint32_t e = i + blk; i < e; i++)
                    SL_PQ_LIST_LEVEL(i);
                continue;
            }
            for (uint32_t e = i + blk; i < e; i++) {
                if (R[i] == 0 && rows == max_rows) {
                    full = true;
                    break;
                }
                SL_PQ_LIST_LEVEL(i);
            }
        }
#undef SL_PQ_LIST_LEVEL
        b->rows = rows;
        b->slots = slots;
        r->lv_pos = i;
        if (c->kind == SL_PQ_KIND_BYTES) b->bytes_off[at] = r->bytes_len;
        if (sl_pq_values_get(r, at, nvals, err) != SL_OK) return sl_pq_where(r, err);
        scatter(r, at, nvals);
    }
    if (c->is_list) b->list_off[b->rows] = b->slots;
    r->rows_read += b->rows;
    if (b->rows == 0 && r->rows_read != r->f->meta->row_groups[r->rg].num_rows)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "file %s row group %u column %s: %lld rows, the row group has %lld",
                            r->f->name, r->rg, c->path, (long long)r->rows_read,
                            (long long)r->f->meta->row_groups[r->rg].num_rows);
    return SL_OK;
}

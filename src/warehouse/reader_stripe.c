/* One stripe of a data file (reader_internal.h, wh_reader_decode_stripe):
 * read only the streams of the projected columns (neighbours coalesced
 * into one pread, or an object's ranged GETs), verify their checksums,
 * decompress into the reader's reusable buffers and decode each stream in
 * bulk into the output tensors. Nothing is allocated per row; buffers grow
 * to the largest stripe seen. Every count read from the file has been
 * checked by format.c against the stripe, and what only decoding reveals
 * (lengths vs. id counts, inverse indices, bitmaps) is checked here before
 * it is used. */
#include "common/err.h"
#include "reader_internal.h"

#include <errno.h>
#include <fiu-local.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ---- */

/* Reserve an output buffer, charging it to the stripe's decoded-size limit. */
static sl_err_t out_reserve(sl_wh_reader_t *r, uint32_t s, wh_buf_t *b, uint64_t bytes,
                            sl_error_t *err)
{
    r->stripe_bytes += bytes;
    if (r->stripe_bytes > r->f->limits.max_stripe_bytes)
        return sl_error_set(err, SL_ERR_TOO_LARGE,
                            "%s stripe %u: decoded size exceeds the limit of %llu bytes",
                            r->f->src.name, s, (unsigned long long)r->f->limits.max_stripe_bytes);
    if (!wh_buf_reserve(b, r->a, (size_t)bytes + 8))
        return sl_error_set(err, SL_ERR_NOMEM, "%s stripe %u: %llu bytes", r->f->src.name, s,
                            (unsigned long long)bytes);
    return SL_OK;
}

/* ---- stripe ---- */

/* A storage fault injected on a stripe's read (libfiu point
 * sluice/warehouse/read, enabled by tests, in a worker process through
 * fiu-run's preload: tests/integration/fleet_failures_test.c): its
 * failinfo is the stripe to fail plus one, 0 every stripe. */
static bool read_injected(uint32_t s)
{
    if (!fiu_fail("sluice/warehouse/read")) return false;
    uintptr_t only = (uintptr_t)fiu_failinfo();
    return only == 0 || only == (uintptr_t)s + 1;
}

/* Read the projected streams of stripe s into rbuf (coalesced preads) and
 * point sptr at each; verify checksums. */
static sl_err_t fetch(sl_wh_reader_t *r, uint32_t s, sl_error_t *err)
{
    const wh_file_t *f = r->f;
    if (read_injected(s))
        return sl_error_set(err, SL_ERR_IO, "%s stripe %u: read: %s (injected fault)", f->src.name,
                            s, strerror(EIO));
    const wh_stripe_t *sp = &f->stripes[s];
    uint32_t ns = sp->num_streams;
    if (!wh_buf_reserve(&r->sptr, r->a, (size_t)ns * (sizeof(void *) + 1)))
        return sl_error_set(err, SL_ERR_NOMEM, "%s stripe %u", f->src.name, s);
    const uint8_t **ptr = (const uint8_t **)r->sptr.data;
    uint8_t *need = r->sptr.data + (size_t)ns * sizeof(void *);
    r->dec.ptr = ptr;
    r->dec.stripe = s;
    wh_reader_stripe_need(r, s, need);
    /* Pass 1: the size of the coalesced ranges. Streams of a stripe are
     * contiguous and in file order (checked at open). */
    const wh_stream_t *st = f->streams + sp->first_stream;
    uint64_t total = 0, rstart = 0, rend = 0;
    bool open_range = false;
    for (uint32_t j = 0; j < ns; j++) {
        if (!need[j]) continue;
        if (open_range && st[j].offset - rend <= r->gap) {
            rend = st[j].offset + st[j].stored_size;
            continue;
        }
        if (open_range) total += rend - rstart;
        rstart = st[j].offset;
        rend = rstart + st[j].stored_size;
        open_range = true;
    }
    if (open_range) total += rend - rstart;
    /* An object's ranges are gathered and fetched together, in parallel,
     * after pass 2, unless the read-ahead fetched them already (then rbuf
     * becomes its buffer, laid out as pass 2 lays it out, and the
     * read-ahead gives back what it took for them). */
    wh_source_t *src = &r->f->src;
    sl_store_range_t *rng = NULL;
    size_t nrng = 0, ahead_reads = 0;
    uint64_t ahead_bytes = 0;
    bool taken = false;
    if (src->obj != NULL) {
        if (!wh_buf_reserve(&r->ranges, r->a, (size_t)ns * sizeof *rng))
            return sl_error_set(err, SL_ERR_NOMEM, "%s stripe %u", f->src.name, s);
        rng = (sl_store_range_t *)r->ranges.data;
        taken = wh_ahead_take(r->ahead, s, &r->rbuf, &ahead_bytes, &ahead_reads) == 1;
        r->stats.read_ahead += taken;
    }
    /* The stripe's bytes in rbuf count in the caller's memory (a worker's
     * --memory-limit) while it is read, as the read-ahead's do before: a
     * file not mapped (an object, a pread) waits for room here, after the
     * read-ahead gave back its own count of the same bytes (never both
     * held for one stripe: the wait could only end by this thread's give);
     * given back once the stripe is decoded (read_stripe). */
    if (r->mem != NULL && f->src.mem == NULL && total > 0) {
        char what[400];
        snprintf(what, sizeof what, "the read buffer of %.300s stripe %u", f->src.name, s);
        sl_err_t rc = r->mem->take(r->mem->ctx, total, what, err);
        if (rc != SL_OK) return rc;
        r->read_held = total;
    }
    if (!wh_buf_reserve(&r->rbuf, r->a, (size_t)total + 8))
        return sl_error_set(err, SL_ERR_NOMEM, "%s stripe %u: read buffer of %llu bytes",
                            f->src.name, s, (unsigned long long)total);
    /* Pass 2: read each range, point at each stream. */
    uint64_t at = 0;
    uint32_t j = 0;
    while (j < ns) {
        if (!need[j]) {
            ptr[j++] = NULL;
            continue;
        }
        uint32_t first = j;
        rstart = st[j].offset;
        rend = rstart + st[j].stored_size;
        for (j++; j < ns; j++) {
            if (!need[j]) {
                ptr[j] = NULL;
                continue;
            }
            if (st[j].offset - rend > r->gap) break;
            rend = st[j].offset + st[j].stored_size;
        }
        const uint8_t *range = NULL;
        /* In place from memory (a mapped file) when the 8 bytes past the
         * range, which decoders may load, are inside the source too: a
         * stripe's streams are followed at least by the file's trailer. */
        if (f->src.mem != NULL && rend <= f->src.size && f->src.size - rend >= 8) {
            range = f->src.mem + rstart;
            r->f->src.read_calls++;
            r->f->src.bytes_read += rend - rstart;
        } else if (rng != NULL) {
            rng[nrng++] = (sl_store_range_t){
                .offset = rstart, .len = (size_t)(rend - rstart), .buf = r->rbuf.data + at};
            range = r->rbuf.data + at;
            at += rend - rstart;
        } else {
            sl_err_t rc =
                wh_source_read(&r->f->src, r->rbuf.data + at, (size_t)(rend - rstart), rstart, err);
            if (rc != SL_OK) return sl_error_prefix(err, "stripe %u: ", s);
            range = r->rbuf.data + at;
            at += rend - rstart;
        }
        r->data_bytes += rend - rstart;
        for (uint32_t k = first; k < j; k++)
            if (need[k]) ptr[k] = range + (st[k].offset - rstart);
    }
    if (nrng > 0 && !taken) {
        sl_err_t rc = sl_store_object_read_many(src->obj, rng, nrng, err);
        if (rc != SL_OK) {
            sl_error_prefix(err, "stripe %u: ", s);
            return rc;
        }
    }
    if (nrng > 0) {
        src->read_calls += nrng;
        src->bytes_read += at;
        wh_reader_read_ahead(r, s);
    }
    if (r->verify)
        for (uint32_t k = 0; k < ns; k++)
            if (need[k] && !wh_stream_checksum_ok(&st[k], ptr[k]))
                return wh_dec_err(&r->dec, &st[k], err, SL_ERR_CORRUPT, "checksum mismatch");
    for (uint32_t k = 0; k < ns; k++)
        r->stats.streams += need[k];
    return SL_OK;
}

/* Lengths + ids (+ weights) of feature fi into len[rows], vals, wts at
 * value offset; *count gets the values. */
static sl_err_t decode_lengths(sl_wh_reader_t *r, uint32_t s, uint32_t fi, int32_t *len,
                               uint64_t *count, sl_error_t *err)
{
    const wh_stream_t *ls = wh_slot_stream(r->f, s, wh_slot_feature(r->f, fi, WH_ROLE_LENGTHS));
    const wh_stream_t *is = wh_slot_stream(r->f, s, wh_slot_feature(r->f, fi, WH_ROLE_IDS));
    uint64_t sum;
    SL_FORWARD_IF_ERROR(wh_decode_i32(&r->dec, ls, len, INT32_MAX, &sum, err));
    if (sum != is->value_count)
        return wh_dec_err(&r->dec, is, err, SL_ERR_CORRUPT, "%llu ids, the lengths sum to %llu",
                          (unsigned long long)is->value_count, (unsigned long long)sum);
    *count = sum;
    return SL_OK;
}

static sl_err_t decode_values(sl_wh_reader_t *r, uint32_t s, uint32_t fi, int64_t *vals, float *wts,
                              sl_error_t *err)
{
    const wh_stream_t *is = wh_slot_stream(r->f, s, wh_slot_feature(r->f, fi, WH_ROLE_IDS));
    sl_err_t rc = wh_decode_i64(&r->dec, is, vals, r->fmap[fi], err);
    if (rc != SL_OK || wts == NULL) return rc;
    const wh_stream_t *ws = wh_slot_stream(r->f, s, wh_slot_feature(r->f, fi, WH_ROLE_WEIGHTS));
    if (ws != NULL) return wh_decode_f32(&r->dec, ws, wts, err);
    for (uint64_t i = 0; i < is->value_count; i++)
        wts[i] = 1.0f;
    return SL_OK;
}

static sl_err_t decode_group(sl_wh_reader_t *r, uint32_t s, ogroup_t *o, uint32_t N,
                             sl_error_t *err)
{
    const wh_file_t *f = r->f;
    uint32_t U = f->stripes[s].unique_rows[o->g];
    sl_err_t rc;
    if ((rc = out_reserve(r, s, &o->inv, (uint64_t)N * 4, err)) != SL_OK ||
        (rc = out_reserve(r, s, &o->len, (uint64_t)o->nk * U * 4, err)) != SL_OK)
        return rc;
    const wh_stream_t *is = wh_slot_stream(f, s, wh_slot_inverse(f, o->g));
    if ((rc = wh_decode_i32(&r->dec, is, (int32_t *)o->inv.data, (int64_t)U - 1, NULL, err)) !=
        SL_OK)
        return rc;
    uint64_t total = 0;
    uint64_t *cnt = (uint64_t *)r->ksum.data; /* nk <= features, reserved at open */
    for (uint32_t kk = 0; kk < o->nk; kk++) {
        rc = decode_lengths(r, s, o->feat[kk], (int32_t *)o->len.data + (size_t)kk * U, &cnt[kk],
                            err);
        if (rc != SL_OK) return rc;
        total += cnt[kk];
    }
    if ((rc = out_reserve(r, s, &o->vals, total * 8, err)) != SL_OK) return rc;
    if (o->weighted && (rc = out_reserve(r, s, &o->w, total * 4, err)) != SL_OK) return rc;
    uint64_t at = 0;
    for (uint32_t kk = 0; kk < o->nk; kk++) {
        rc = decode_values(r, s, o->feat[kk], (int64_t *)o->vals.data + at,
                           o->weighted ? (float *)o->w.data + at : NULL, err);
        if (rc != SL_OK) return rc;
        at += cnt[kk];
    }
    sl_ikjt_t *ik = &o->ikjt;
    ik->name = f->groups[o->g].spec.name;
    ik->batch_size = N;
    ik->inverse = (int32_t *)o->inv.data;
    ik->unique.num_keys = o->nk;
    ik->unique.stride = U;
    ik->unique.num_values = total;
    ik->unique.keys = o->keys;
    ik->unique.lengths = (int32_t *)o->len.data;
    ik->unique.values = (int64_t *)o->vals.data;
    ik->unique.weights = o->weighted ? (float *)o->w.data : NULL;
    return SL_OK;
}

/* Key k's block offsets (sl_wh_rows_t.block_offsets) from its n lengths
 * into blk[n / SL_WH_BLOCK_ROWS + 1]: a pass over lengths just decoded,
 * still in cache. @return false if a length is negative. */
static bool block_offsets(const int32_t *len, uint32_t n, uint64_t *blk)
{
    bool neg = false, any = false;
    uint64_t at = 0;
    blk[0] = 0;
    for (uint32_t j = 0; j < n / SL_WH_BLOCK_ROWS; j++) {
        at += sl_lengths_sum(len + (size_t)j * SL_WH_BLOCK_ROWS, SL_WH_BLOCK_ROWS, &neg);
        any |= neg;
        blk[j + 1] = at;
    }
    return !any;
}

/* Expand key kk of group o into len[N] and (second call) vals/wts. */
static uint64_t expand_lengths(const ogroup_t *o, uint32_t kk, int32_t *len)
{
    const sl_ikjt_t *ik = &o->ikjt;
    const int32_t *ul = ik->unique.lengths + (size_t)kk * ik->unique.stride;
    uint64_t sum = 0;
    for (uint32_t b = 0; b < ik->batch_size; b++) {
        len[b] = ul[ik->inverse[b]];
        sum += (uint64_t)len[b];
    }
    return sum;
}

static void expand_values(const ogroup_t *o, uint32_t kk, uint64_t *ustart, int64_t *vals,
                          float *wts)
{
    const sl_ikjt_t *ik = &o->ikjt;
    uint32_t U = ik->unique.stride;
    uint64_t at = 0;
    for (uint32_t k = 0; k < kk; k++)
        for (uint32_t u = 0; u < U; u++)
            at += (uint64_t)ik->unique.lengths[(size_t)k * U + u];
    const int32_t *ul = ik->unique.lengths + (size_t)kk * U;
    for (uint32_t u = 0; u < U; u++) {
        ustart[u] = at;
        at += (uint64_t)ul[u];
    }
    uint64_t out = 0;
    for (uint32_t b = 0; b < ik->batch_size; b++) {
        uint32_t u = (uint32_t)ik->inverse[b];
        size_t n = (size_t)ul[u];
        memcpy(vals + out, ik->unique.values + ustart[u], n * 8);
        if (wts != NULL) {
            if (ik->unique.weights != NULL)
                memcpy(wts + out, ik->unique.weights + ustart[u], n * 4);
            else
                for (size_t i = 0; i < n; i++)
                    wts[out + i] = 1.0f;
        }
        out += n;
    }
}

/* Rows per block of the transpose: 512 rows of criteo's 13 columns (26
 * KiB) stay in L1 while every column writes its part. */
enum { TRANSPOSE_ROWS = 512 };

/* The dense columns into the row-major [N, nd] matrix r->dense. Decoded
 * straight into it, each column would write 4 bytes of every row's cache
 * line, and a stripe's matrix (3.4 MB for 65,536 criteo rows) is larger
 * than the core's cache: every column would read and write the whole
 * matrix again. So each column is decoded on its own, contiguous (the
 * scatter's and the maps' fast path), and the columns are then
 * transposed into the matrix a block of rows at a time. */
static sl_err_t decode_dense(sl_wh_reader_t *r, uint32_t s, uint32_t N, sl_error_t *err)
{
    const wh_file_t *f = r->f;
    const uint32_t D = r->nd;
    float *out = (float *)r->dense.data;
    bool direct = D <= 1;
    if (!direct && !wh_buf_reserve(&r->dcols, r->a, (size_t)N * D * 4 + 8))
        return sl_error_set(err, SL_ERR_NOMEM, "%s stripe %u: %llu bytes", f->src.name, s,
                            (unsigned long long)N * D * 4);
    float *cols = direct ? out : (float *)r->dcols.data;
    for (uint32_t c = 0; c < D; c++) {
        uint32_t fi = r->dense_feat[c];
        sl_err_t rc =
            wh_decode_column(&r->dec, wh_slot_stream(f, s, wh_slot_feature(f, fi, WH_ROLE_VALUES)),
                             wh_slot_stream(f, s, wh_slot_feature(f, fi, WH_ROLE_PRESENT)),
                             cols + (size_t)c * N, 1, N, r->fmap[fi], err);
        if (rc != SL_OK) return rc;
    }
    if (direct) return SL_OK;
    for (uint32_t r0 = 0; r0 < N; r0 += TRANSPOSE_ROWS) {
        uint32_t n = N - r0 < TRANSPOSE_ROWS ? N - r0 : TRANSPOSE_ROWS;
        wh_transpose_rows(out + (size_t)r0 * D, cols, N, D, r0, n);
    }
    return SL_OK;
}

sl_err_t wh_reader_decode_stripe(sl_wh_reader_t *r, uint32_t s, const sl_wh_rows_t **rows,
                                 sl_error_t *err)
{
    wh_file_t *f = r->f;
    const wh_stripe_t *sp = &f->stripes[s];
    uint32_t N = sp->rows;
    r->stripe_bytes = 0;
    sl_err_t rc = fetch(r, s, err);
    if (rc != SL_OK) return rc;
    sl_wh_rows_t *out = &r->rows;
    sl_batch_t *b = &out->batch;
    memset(out, 0, sizeof *out);
    out->schema = f->schema;
    out->file = f->src.name;
    out->stripe = s;
    out->first_row = sp->first_row;
    b->batch_size = N;

    /* id columns */
    wh_buf_t *colbuf[3] = {&r->sid, &r->sess, &r->ts};
    int64_t *cols[3] = {NULL, NULL, NULL};
    for (uint32_t c = 0; c < 3; c++) {
        if (r->skip & (1u << c)) continue;
        if ((rc = out_reserve(r, s, colbuf[c], (uint64_t)N * 8, err)) != SL_OK) return rc;
        cols[c] = (int64_t *)colbuf[c]->data;
        if ((rc = wh_decode_i64(&r->dec, wh_slot_stream(f, s, c), cols[c], NULL, err)) != SL_OK)
            return rc;
    }
    b->sample_ids = cols[0];
    out->session_ids = cols[1];
    out->timestamps = cols[2];

    /* labels and dense, row-major */
    if ((rc = out_reserve(r, s, &r->labels, (uint64_t)N * r->T * 4, err)) != SL_OK) return rc;
    for (uint32_t t = 0; t < r->T; t++) {
        rc = wh_decode_column(&r->dec, wh_slot_stream(f, s, wh_slot_label(f, t)), NULL,
                              (float *)r->labels.data + t, r->T, N, NULL, err);
        if (rc != SL_OK) return rc;
    }
    b->labels = (sl_dense_t){N, r->T, r->label_names, (float *)r->labels.data};
    if ((rc = out_reserve(r, s, &r->dense, (uint64_t)N * r->nd * 4, err)) != SL_OK) return rc;
    if ((rc = decode_dense(r, s, N, err)) != SL_OK) return rc;
    b->dense = (sl_dense_t){N, r->nd, r->dense_names, (float *)r->dense.data};

    /* storage-dedup groups: decoded as IKJTs */
    for (uint32_t o = 0; o < r->ng; o++)
        if ((rc = decode_group(r, s, &r->og[o], N, err)) != SL_OK) return rc;

    /* plain KJT: lengths first (sizes), then values */
    if ((rc = out_reserve(r, s, &r->klen, (uint64_t)r->nk * N * 4, err)) != SL_OK) return rc;
    uint64_t *ksum = (uint64_t *)r->ksum.data, total = 0;
    const size_t nb = N / SL_WH_BLOCK_ROWS + 1;
    bool blk = r->blk && r->nk > 0;
    if (blk && !wh_buf_reserve(&r->kblk, r->a, r->nk * nb * 8))
        return sl_error_set(err, SL_ERR_NOMEM, "%s stripe %u: block offsets of %u keys",
                            f->src.name, s, r->nk);
    for (uint32_t k = 0; k < r->nk; k++) {
        int32_t *len = (int32_t *)r->klen.data + (size_t)k * N;
        if (r->key_og[k] >= 0) {
            ksum[k] = expand_lengths(&r->og[r->key_og[k]], (uint32_t)r->key_kk[k], len);
        } else if ((rc = decode_lengths(r, s, r->key_feat[k], len, &ksum[k], err)) != SL_OK) {
            return rc;
        }
        if (blk) blk = block_offsets(len, N, (uint64_t *)r->kblk.data + k * nb);
        total += ksum[k];
    }
    if ((rc = out_reserve(r, s, &r->kvals, total * 8, err)) != SL_OK) return rc;
    if (r->kweighted && (rc = out_reserve(r, s, &r->kw, total * 4, err)) != SL_OK) return rc;
    uint64_t at = 0, *koff = (uint64_t *)r->koff.data;
    for (uint32_t k = 0; k < r->nk; k++) {
        koff[k] = at;
        int64_t *vals = (int64_t *)r->kvals.data + at;
        float *wts = r->kweighted ? (float *)r->kw.data + at : NULL;
        if (r->key_og[k] >= 0) {
            const ogroup_t *o = &r->og[r->key_og[k]];
            if (!wh_buf_reserve(&r->ustart, r->a, ((size_t)o->ikjt.unique.stride + 1) * 8))
                return sl_error_set(err, SL_ERR_NOMEM, "%s stripe %u", f->src.name, s);
            expand_values(o, (uint32_t)r->key_kk[k], (uint64_t *)r->ustart.data, vals, wts);
        } else if ((rc = decode_values(r, s, r->key_feat[k], vals, wts, err)) != SL_OK) {
            return rc;
        }
        at += ksum[k];
    }
    koff[r->nk] = at;
    out->key_offsets = koff;
    out->block_offsets = blk ? (const uint64_t *)r->kblk.data : NULL;
    b->sparse.num_keys = r->nk;
    b->sparse.stride = N;
    b->sparse.num_values = total;
    b->sparse.keys = r->keys;
    b->sparse.lengths = (int32_t *)r->klen.data;
    b->sparse.values = (int64_t *)r->kvals.data;
    b->sparse.weights = r->kweighted ? (float *)r->kw.data : NULL;
    if (r->dedup_form && r->ng > 0) {
        for (uint32_t o = 0; o < r->ng; o++)
            r->ikjts[o] = r->og[o].ikjt;
        b->num_groups = r->ng;
        b->groups = r->ikjts;
    }
    r->stats.stripes++;
    r->stats.rows += N;
    r->stats.decoded_bytes += r->stripe_bytes;
    *rows = out;
    return SL_OK;
}

/* The data file reader: for one stripe, read only the streams of the
 * projected columns (neighbours coalesced into one pread), verify their
 * checksums, decompress into reusable buffers and decode each stream in bulk
 * into the output tensors. Nothing is allocated per row; buffers grow to the
 * largest stripe seen and are reused, so memory is bounded by one stripe.
 * Every count read from the file has been checked by format.c against the
 * stripe, and what only decoding reveals (lengths vs. id counts, inverse
 * indices, bitmaps) is checked here before it is used. */
#include "common/err.h"
#include "reader_internal.h"

#include <errno.h>
#include <fiu-local.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#define DEFAULT_GAP (64u * 1024)

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

static sl_err_t decode_stripe(sl_wh_reader_t *r, uint32_t s, const sl_wh_rows_t **rows,
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
    for (uint32_t k = 0; k < r->nk; k++) {
        int32_t *len = (int32_t *)r->klen.data + (size_t)k * N;
        if (r->key_og[k] >= 0) {
            ksum[k] = expand_lengths(&r->og[r->key_og[k]], (uint32_t)r->key_kk[k], len);
        } else if ((rc = decode_lengths(r, s, r->key_feat[k], len, &ksum[k], err)) != SL_OK) {
            return rc;
        }
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

/* ---- buffers kept for the next reader of the thread ---- */

/* A worker opens a reader for every split it leases (sl_wh_reader_open_split)
 * and closes it at the end of the split. Freshly allocated output buffers
 * (tens of MB for a criteo stripe) come back as fresh pages that the kernel
 * faults in and zeroes at the first touch, on every split: that was ~8 % of
 * the worker's reader thread. So a closed reader leaves its buffers and
 * zstd context to the next reader opened on the same thread: one set per
 * thread (memory stays bounded by one stripe's buffers per reading thread),
 * freed when the thread ends. */
enum { PARK_BUFS = 16 };

typedef struct parked {
    const sl_allocator_t *a;
    wh_buf_t bufs[PARK_BUFS];
    void *zctx;
} parked_t;

static pthread_key_t park_key;
static pthread_once_t park_once = PTHREAD_ONCE_INIT;
static bool park_ok;

static void parked_free(void *arg)
{
    parked_t *p = arg;
    if (p == NULL) return;
    for (int i = 0; i < PARK_BUFS; i++)
        wh_buf_free(&p->bufs[i], p->a);
    ZSTD_freeDCtx(p->zctx);
    sl_free(p->a, p, sizeof *p);
}

static void park_init(void)
{
    park_ok = pthread_key_create(&park_key, parked_free) == 0;
}

/* The reader's reusable buffers, in a fixed order. */
static void reader_bufs(sl_wh_reader_t *r, wh_buf_t *b[PARK_BUFS])
{
    wh_buf_t *list[PARK_BUFS] = {&r->rbuf,     &r->dec.z0, &r->dec.z1, &r->dec.z2,
                                 &r->dec.dict, &r->ustart, &r->sid,    &r->sess,
                                 &r->ts,       &r->labels, &r->dense,  &r->klen,
                                 &r->kvals,    &r->kw,     &r->sptr,   &r->dcols};
    memcpy(b, list, sizeof list);
}

/* Take the thread's parked buffers (if any, and from the same allocator). */
static void unpark(sl_wh_reader_t *r)
{
    pthread_once(&park_once, park_init);
    if (!park_ok) return;
    parked_t *p = pthread_getspecific(park_key);
    if (p == NULL || p->a != r->a) return;
    (void)pthread_setspecific(park_key, NULL);
    wh_buf_t *b[PARK_BUFS];
    reader_bufs(r, b);
    for (int i = 0; i < PARK_BUFS; i++)
        *b[i] = p->bufs[i];
    r->dec.zctx = p->zctx;
    sl_free(p->a, p, sizeof *p);
}

/* Leave r's buffers to the thread when it has none parked. @return
 * whether they were taken (r no longer owns them). */
static bool park(sl_wh_reader_t *r)
{
    pthread_once(&park_once, park_init);
    if (!park_ok || r->dec.zctx == NULL || pthread_getspecific(park_key) != NULL) return false;
    parked_t *p = sl_calloc(r->a, 1, sizeof *p);
    if (p == NULL) return false;
    p->a = r->a;
    wh_buf_t *b[PARK_BUFS];
    reader_bufs(r, b);
    for (int i = 0; i < PARK_BUFS; i++) {
        p->bufs[i] = *b[i];
        memset(b[i], 0, sizeof *b[i]);
    }
    p->zctx = r->dec.zctx;
    ZSTD_DCtx_reset(p->zctx, ZSTD_reset_session_only);
    if (pthread_setspecific(park_key, p) != 0) {
        for (int i = 0; i < PARK_BUFS; i++)
            *b[i] = p->bufs[i];
        sl_free(r->a, p, sizeof *p);
        return false;
    }
    r->dec.zctx = NULL;
    return true;
}

/* ---- open / close ---- */

void sl_wh_reader_close(sl_wh_reader_t *r)
{
    if (r == NULL) return;
    const sl_allocator_t *a = r->a;
    uint32_t F = r->f ? sl_wh_schema_num_features(r->f->schema) : 0;
    park(r);
    wh_buf_t *bufs[PARK_BUFS];
    reader_bufs(r, bufs);
    for (size_t i = 0; i < PARK_BUFS; i++)
        wh_buf_free(bufs[i], a);
    wh_buf_free(&r->ksum, a);
    wh_buf_free(&r->koff, a);
    wh_ahead_destroy(r->ahead); /* before the file: its fetch reads the object */
    wh_buf_free(&r->ranges, a);
    for (uint32_t o = 0; r->og != NULL && o < r->ng; o++) {
        wh_buf_free(&r->og[o].len, a);
        wh_buf_free(&r->og[o].vals, a);
        wh_buf_free(&r->og[o].w, a);
        wh_buf_free(&r->og[o].inv, a);
    }
    size_t P = (size_t)F + 1;
    sl_free(a, r->dense_feat, P * 4);
    sl_free(a, r->dense_names, P * sizeof(char *));
    sl_free(a, r->key_feat, P * 4);
    sl_free(a, r->keys, P * sizeof(char *));
    sl_free(a, r->key_og, P * 4);
    sl_free(a, r->key_kk, P * 4);
    sl_free(a, r->fmap, P * sizeof *r->fmap);
    for (uint32_t o = 0; r->og != NULL && o < r->ng; o++) {
        sl_free(a, r->og[o].feat, P * 4);
        sl_free(a, r->og[o].keys, P * sizeof(char *));
    }
    sl_free(a, r->og, (size_t)(r->f ? r->f->num_groups : 0) * sizeof *r->og + sizeof *r->og);
    sl_free(a, r->ikjts,
            (size_t)(r->f ? r->f->num_groups : 0) * sizeof *r->ikjts + sizeof *r->ikjts);
    sl_free(a, r->label_names, ((size_t)r->T + 1) * sizeof(char *));
    ZSTD_freeDCtx(r->dec.zctx);
    wh_file_close(r->f);
    sl_free(a, r, sizeof *r);
}

typedef struct stripe_call {
    sl_wh_reader_t *r;
    uint32_t s;
    const sl_wh_rows_t **rows;
} stripe_call_t;

static sl_err_t stripe_call(void *arg, sl_error_t *err)
{
    stripe_call_t *c = arg;
    return decode_stripe(c->r, c->s, c->rows, err);
}

/* A stripe of a mapped file is decoded in place, guarded against SIGBUS. A
 * file that shrank since it was mapped, or a SIGBUS (the file shrank while
 * being read, or its storage failed), drops the mapping: the stripe is read
 * again with pread, which reports what is wrong as an ordinary error. */
/* Give back the stripe's read buffer (fetch) once it is decoded. */
static void give_read(sl_wh_reader_t *r)
{
    if (r->read_held > 0) r->mem->give(r->mem->ctx, r->read_held);
    r->read_held = 0;
}

static sl_err_t read_stripe_once(sl_wh_reader_t *r, uint32_t s, const sl_wh_rows_t **rows,
                                 sl_error_t *err);

static sl_err_t read_stripe(sl_wh_reader_t *r, uint32_t s, const sl_wh_rows_t **rows,
                            sl_error_t *err)
{
    sl_err_t rc = read_stripe_once(r, s, rows, err);
    give_read(r);
    return rc;
}

static sl_err_t read_stripe_once(sl_wh_reader_t *r, uint32_t s, const sl_wh_rows_t **rows,
                                 sl_error_t *err)
{
    wh_source_t *src = &r->f->src;
    if (src->map_len == 0) return decode_stripe(r, s, rows, err);
    struct stat st;
    if (fstat(src->fd, &st) != 0 || (uint64_t)st.st_size < src->map_len) {
        wh_source_unmap(src);
        return decode_stripe(r, s, rows, err);
    }
    stripe_call_t call = {r, s, rows};
    bool faulted;
    sl_err_t rc = wh_mapguard_run(src->mem, src->map_len, stripe_call, &call, &faulted, err);
    if (!faulted) return rc;
    r->stats.mapping_faults++;
    ZSTD_DCtx_reset(r->dec.zctx, ZSTD_reset_session_only);
    wh_source_unmap(src);
    return decode_stripe(r, s, rows, err);
}

static sl_err_t setup_projection(sl_wh_reader_t *r, const sl_wh_read_opts_t *o, sl_error_t *err)
{
    const wh_file_t *f = r->f;
    const sl_wh_schema_t *sc = f->schema;
    const sl_allocator_t *a = r->a;
    uint32_t F = sl_wh_schema_num_features(sc), G = f->num_groups;
    size_t P = (size_t)F + 1;
    r->dense_feat = sl_alloc(a, P * 4);
    r->dense_names = sl_alloc(a, P * sizeof(char *));
    r->key_feat = sl_alloc(a, P * 4);
    r->keys = sl_alloc(a, P * sizeof(char *));
    r->key_og = sl_alloc(a, P * 4);
    r->key_kk = sl_alloc(a, P * 4);
    r->fmap = sl_calloc(a, P, sizeof *r->fmap);
    r->og = sl_calloc(a, (size_t)G + 1, sizeof *r->og);
    r->ikjts = sl_calloc(a, (size_t)G + 1, sizeof *r->ikjts);
    r->T = (r->skip & SL_WH_COL_LABELS) ? 0 : sl_wh_schema_num_labels(sc);
    r->label_names = sl_alloc(a, ((size_t)r->T + 1) * sizeof(char *));
    if (r->dense_feat == NULL || r->dense_names == NULL || r->key_feat == NULL || r->keys == NULL ||
        r->key_og == NULL || r->key_kk == NULL || r->fmap == NULL || r->og == NULL ||
        r->ikjts == NULL || r->label_names == NULL || !wh_buf_reserve(&r->ksum, a, P * 8) ||
        !wh_buf_reserve(&r->koff, a, ((size_t)P + 1) * 8))
        return sl_error_set(err, SL_ERR_NOMEM, "%s: reader", f->src.name);
    for (uint32_t t = 0; t < r->T; t++)
        r->label_names[t] = sl_wh_schema_label(sc, t);
    /* which features, in output order */
    uint32_t n = o->features ? o->num_features : F;
    if (n > F)
        return sl_error_set(err, SL_ERR_INVALID, "%s: %u features requested, the schema has %u",
                            f->src.name, n, F);
    int32_t *seen = (int32_t *)r->ksum.data; /* scratch: feature -> og index */
    for (uint32_t i = 0; i < F; i++)
        seen[i] = -2;
    for (uint32_t i = 0; i < n; i++) {
        int fi = (int)i;
        if (o->features) {
            fi = sl_wh_schema_index(sc, o->features[i]);
            if (fi < 0)
                return sl_error_set(err, SL_ERR_NOT_FOUND, "%s: feature '%s' is not in the schema",
                                    f->src.name, o->features[i] ? o->features[i] : "(null)");
            if (seen[fi] != -2)
                return sl_error_set(err, SL_ERR_INVALID, "%s: feature '%s' requested twice",
                                    f->src.name, o->features[i]);
        }
        seen[fi] = -1;
        const sl_wh_feature_t *fe = sl_wh_schema_feature(sc, (uint32_t)fi);
        if (o->maps != NULL && (o->maps[i].ids != NULL || o->maps[i].dense != NULL))
            r->fmap[fi] = &o->maps[i];
        if (fe->kind == SL_WH_DENSE) {
            r->dense_feat[r->nd] = (uint32_t)fi;
            r->dense_names[r->nd++] = fe->name;
            continue;
        }
        int32_t g = f->feature_group[fi], oi = -1;
        if (g >= 0) {
            for (uint32_t k = 0; k < r->ng; k++)
                if (r->og[k].g == (uint32_t)g) oi = (int32_t)k;
            if (oi < 0) {
                oi = (int32_t)r->ng++;
                r->og[oi].g = (uint32_t)g;
                r->og[oi].feat = sl_alloc(a, P * 4);
                r->og[oi].keys = sl_alloc(a, P * sizeof(char *));
                if (r->og[oi].feat == NULL || r->og[oi].keys == NULL)
                    return sl_error_set(err, SL_ERR_NOMEM, "%s: reader", f->src.name);
            }
            ogroup_t *og = &r->og[oi];
            og->weighted |= fe->kind == SL_WH_WEIGHTED;
            og->feat[og->nk] = (uint32_t)fi;
            og->keys[og->nk++] = fe->name;
            if (r->dedup_form) continue;
        }
        r->key_feat[r->nk] = (uint32_t)fi;
        r->keys[r->nk] = fe->name;
        r->key_og[r->nk] = oi;
        r->key_kk[r->nk] = oi >= 0 ? (int32_t)r->og[oi].nk - 1 : -1;
        r->kweighted |= fe->kind == SL_WH_WEIGHTED;
        r->nk++;
    }
    return SL_OK;
}

/* Open a reader on an object of store, a path, memory, or (twin != NULL)
 * a twin of another reader's file (wh_file_open_twin). */
static sl_err_t reader_open(sl_store_t *store, const sl_store_info_t *known, const char *path,
                            const void *mem, size_t len, const char *display, const wh_file_t *twin,
                            const sl_wh_read_opts_t *opts, sl_wh_reader_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_wh_read_opts_t o;
    if (opts != NULL)
        o = *opts;
    else
        memset(&o, 0, sizeof o);
    const sl_allocator_t *a = o.allocator ? o.allocator : sl_allocator_default();
    sl_wh_reader_t *r = sl_calloc(a, 1, sizeof *r);
    if (r == NULL) return sl_error_set(err, SL_ERR_NOMEM, "reader");
    r->a = a;
    r->last_stripe = UINT32_MAX;
    r->stride = o.ahead_stride > 1 ? o.ahead_stride : 1;
    r->skip = o.skip_columns;
    r->verify = !o.skip_checksums;
    r->mem = o.mem;
    r->dedup_form = o.dedup_form;
    r->gap = o.coalesce_gap == 0                ? DEFAULT_GAP
             : o.coalesce_gap == SL_WH_GAP_NONE ? 0
                                                : o.coalesce_gap;
    sl_err_t rc = twin ? wh_file_open_twin(twin, &r->f, err)
                  : store
                      ? wh_file_open_store(store, path, display, known, &o.limits, a, &r->f, err)
                      : wh_file_open(path, mem, len, display, &o.limits, a, &r->f, err);
    if (rc == SL_OK) rc = setup_projection(r, &o, err);
    r->dec.f = r->f;
    r->dec.a = a;
    if (rc == SL_OK) unpark(r);
    if (rc == SL_OK && r->dec.zctx == NULL && (r->dec.zctx = ZSTD_createDCtx()) == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "reader: zstd context");
    if (rc != SL_OK) {
        sl_wh_reader_close(r);
        return rc;
    }
    r->begin = r->next = 0;
    r->end = r->ahead_end = r->f->num_stripes;
    *out = r;
    return SL_OK;
}

sl_err_t sl_wh_reader_open(const char *path, const char *display_name,
                           const sl_wh_read_opts_t *opts, sl_wh_reader_t **out, sl_error_t *err)
{
    if (path == NULL) return sl_error_set(err, SL_ERR_INVALID, "reader: no path");
    return reader_open(NULL, NULL, path, NULL, 0, display_name, NULL, opts, out, err);
}

sl_err_t sl_wh_reader_open_mem(const void *data, size_t len, const char *display_name,
                               const sl_wh_read_opts_t *opts, sl_wh_reader_t **out, sl_error_t *err)
{
    if (data == NULL && len > 0) return sl_error_set(err, SL_ERR_INVALID, "reader: no data");
    return reader_open(NULL, NULL, NULL, data ? data : "", len, display_name, NULL, opts, out, err);
}

sl_err_t wh_reader_open_store(sl_store_t *st, const char *key, const char *display_name,
                              const sl_store_info_t *known, const sl_wh_read_opts_t *opts,
                              sl_wh_reader_t **out, sl_error_t *err)
{
    return reader_open(st, known, key, NULL, 0, display_name, NULL, opts, out, err);
}

sl_err_t sl_wh_reader_open_twin(const sl_wh_reader_t *base, const sl_wh_read_opts_t *opts,
                                sl_wh_reader_t **out, sl_error_t *err)
{
    sl_err_t rc = reader_open(NULL, NULL, NULL, NULL, 0, NULL, base->f, opts, out, err);
    if (rc == SL_OK) rc = sl_wh_reader_set_range(*out, base->begin, base->end, err);
    if (rc != SL_OK) {
        sl_wh_reader_close(*out);
        *out = NULL;
    }
    return rc;
}

const sl_wh_schema_t *sl_wh_reader_schema(const sl_wh_reader_t *r)
{
    return r->f->schema;
}
uint32_t sl_wh_reader_num_stripes(const sl_wh_reader_t *r)
{
    return r->f->num_stripes;
}
uint64_t sl_wh_reader_num_rows(const sl_wh_reader_t *r)
{
    return r->f->rows;
}
uint64_t sl_wh_reader_footer_checksum(const sl_wh_reader_t *r)
{
    return r->f->footer_checksum;
}
bool sl_wh_reader_session_clustered(const sl_wh_reader_t *r)
{
    return r->f->session_clustered;
}
uint32_t sl_wh_reader_num_groups(const sl_wh_reader_t *r)
{
    return r->f->num_groups;
}
const sl_dedup_group_spec_t *sl_wh_reader_group(const sl_wh_reader_t *r, uint32_t g)
{
    return g < r->f->num_groups ? &r->f->groups[g].spec : NULL;
}

sl_err_t sl_wh_reader_stripe_info(const sl_wh_reader_t *r, uint32_t stripe,
                                  sl_wh_stripe_info_t *info)
{
    if (stripe >= r->f->num_stripes) return SL_ERR_INVALID;
    const wh_stripe_t *sp = &r->f->stripes[stripe];
    info->first_row = sp->first_row;
    info->rows = sp->rows;
    info->offset = sp->offset;
    info->bytes = sp->length;
    info->num_streams = sp->num_streams;
    uint64_t est = 0, ids = 0;
    bool weighted = false;
    const wh_stream_t *st = r->f->streams + sp->first_stream;
    for (uint32_t j = 0; j < sp->num_streams; j++) {
        uint64_t n = st[j].value_count > sp->rows ? st[j].value_count : sp->rows;
        switch (st[j].kind) {
        case SL_WH_STREAM_IDS:
            ids += st[j].value_count;
            break;
        case SL_WH_STREAM_WEIGHTS:
            weighted = true;
            break;
        case SL_WH_STREAM_LENGTHS:
        case SL_WH_STREAM_DENSE_VALUES:
        case SL_WH_STREAM_INVERSE:
        case SL_WH_STREAM_LABEL:
            est += 4 * n;
            break;
        case SL_WH_STREAM_SAMPLE_ID:
        case SL_WH_STREAM_SESSION_ID:
        case SL_WH_STREAM_TIMESTAMP:
            est += 8 * n;
            break;
        default:
            break; /* PRESENT: a bitmap, folded into its column */
        }
    }
    /* value_count <= 2^40 and the streams few: checked at open. One
     * weighted feature gives every id a weight in the decoded KJT. */
    est += ids * (weighted ? 12 : 8);
    info->decoded_bytes = est;
    return SL_OK;
}

sl_err_t sl_wh_reader_set_range(sl_wh_reader_t *r, uint32_t begin, uint32_t end, sl_error_t *err)
{
    if (begin > end || end > r->f->num_stripes)
        return sl_error_set(err, SL_ERR_INVALID, "%s: stripe range [%u, %u) outside [0, %u)",
                            r->f->src.name, begin, end, r->f->num_stripes);
    r->begin = r->next = begin;
    r->end = r->ahead_end = end;
    return SL_OK;
}

void sl_wh_reader_set_ahead_end(sl_wh_reader_t *r, uint32_t end)
{
    r->ahead_end = end > r->f->num_stripes ? r->f->num_stripes : end;
}

sl_err_t sl_wh_reader_next(sl_wh_reader_t *r, const sl_wh_rows_t **rows, sl_error_t *err)
{
    *rows = NULL;
    if (r->next >= r->end) return SL_OK;
    sl_err_t rc = read_stripe(r, r->next, rows, err);
    if (rc != SL_OK) {
        *rows = NULL;
        return rc;
    }
    r->next++;
    return SL_OK;
}

sl_err_t sl_wh_reader_read_stripe(sl_wh_reader_t *r, uint32_t stripe, const sl_wh_rows_t **rows,
                                  sl_error_t *err)
{
    *rows = NULL;
    if (stripe >= r->f->num_stripes)
        return sl_error_set(err, SL_ERR_INVALID, "%s: stripe %u of %u", r->f->src.name, stripe,
                            r->f->num_stripes);
    sl_err_t rc = read_stripe(r, stripe, rows, err);
    if (rc != SL_OK) *rows = NULL;
    return rc;
}

void sl_wh_reader_stats(const sl_wh_reader_t *r, sl_wh_read_stats_t *out)
{
    *out = r->stats;
    uint64_t made = wh_ahead_made(r->ahead);
    out->read_ahead_dropped = made > r->stats.read_ahead ? made - r->stats.read_ahead : 0;
    out->read_calls = r->f->src.read_calls;
    out->bytes_read = r->f->src.bytes_read;
    out->data_bytes_read = r->data_bytes;
}

wh_file_t *wh_reader_file(const sl_wh_reader_t *r)
{
    return r->f;
}

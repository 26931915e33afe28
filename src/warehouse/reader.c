/* The data file reader (warehouse.h, sl_wh_reader_*): opening a file, an
 * object or a buffer with a projection, the stripe range it walks, the
 * buffers and zstd context a closed reader leaves to the next reader of
 * its thread, a mapped file's stripe read under the SIGBUS guard, and the
 * file's figures. A stripe's fetch and decode are reader_stripe.c's, so
 * memory stays bounded by one stripe there. */
#include "common/err.h"
#include "reader_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#define DEFAULT_GAP (64u * 1024)

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
    wh_buf_free(&r->kblk, a);
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
    return wh_reader_decode_stripe(c->r, c->s, c->rows, err);
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
    if (src->map_len == 0) return wh_reader_decode_stripe(r, s, rows, err);
    struct stat st;
    if (fstat(src->fd, &st) != 0 || (uint64_t)st.st_size < src->map_len) {
        wh_source_unmap(src);
        return wh_reader_decode_stripe(r, s, rows, err);
    }
    stripe_call_t call = {r, s, rows};
    bool faulted;
    sl_err_t rc = wh_mapguard_run(src->mem, src->map_len, stripe_call, &call, &faulted, err);
    if (!faulted) return rc;
    r->stats.mapping_faults++;
    ZSTD_DCtx_reset(r->dec.zctx, ZSTD_reset_session_only);
    wh_source_unmap(src);
    return wh_reader_decode_stripe(r, s, rows, err);
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
    r->blk = o.block_offsets;
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

/* The data file writer: rows accumulate column by column in a stripe
 * builder (one stripe of memory); a full stripe is optionally ordered by
 * session, optionally deduplicated per group (RecD), then every column is
 * encoded (frame of reference for integers), compressed (zstd, or stored
 * when that does not pay), checksummed and appended to ".NAME.tmp". Close
 * writes the footer and trailer, fsyncs and renames (docs/FORMAT.md). */
#include "common/err.h"
#include "writer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

sl_wh_writer_opts_t sl_wh_writer_opts_default(void)
{
    sl_wh_writer_opts_t o;
    memset(&o, 0, sizeof o);
    o.stripe_rows = SL_WH_DEFAULT_STRIPE_ROWS;
    o.codec = SL_WH_CODEC_ZSTD;
    o.zstd_level = 1;
    o.zstd_min_saving = 0.05;
    return o;
}

/* Record the first failure; later calls return it. */
sl_err_t wh_writer_fail(sl_wh_writer_t *w, sl_error_t *err, sl_err_t code, const char *fmt, ...)
{
    char msg[SL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w->failed == SL_OK) {
        w->failed = code;
        sl_error_set(&w->fail_err, code, "%s: %s", w->path, msg);
    }
    return sl_error_set(err, code, "%s: %s", w->path, msg);
}

static sl_err_t sticky(sl_wh_writer_t *w, sl_error_t *err)
{
    return sl_error_set(err, w->failed, "%s", w->fail_err.msg);
}

/* ---- output ---- */

static sl_err_t flush_wbuf(sl_wh_writer_t *w, sl_error_t *err)
{
    size_t done = 0;
    while (done < w->wlen) {
        ssize_t k = write(w->fd, w->wbuf.data + done, w->wlen - done);
        if (k < 0) {
            if (errno == EINTR) continue;
            return wh_writer_fail(w, err, SL_ERR_IO, "write %s: %s", w->tmp, strerror(errno));
        }
        done += (size_t)k;
    }
    w->wlen = 0;
    return SL_OK;
}

sl_err_t wh_writer_put(sl_wh_writer_t *w, const void *data, size_t len, sl_error_t *err)
{
    const uint8_t *p = data;
    while (len > 0) {
        if (w->wlen == w->wbuf.cap) {
            SL_FORWARD_IF_ERROR(flush_wbuf(w, err));
        }
        size_t k = w->wbuf.cap - w->wlen;
        if (k > len) k = len;
        memcpy(w->wbuf.data + w->wlen, p, k);
        w->wlen += k;
        p += k;
        len -= k;
        w->file_off += k;
    }
    return SL_OK;
}

/* ---- open / append ---- */

static void writer_free(sl_wh_writer_t *w)
{
    const sl_allocator_t *a = w->a;
    size_t cap = w->cap;
    sl_free(a, w->sid, cap * 8);
    sl_free(a, w->sess, cap * 8);
    sl_free(a, w->ts, cap * 8);
    sl_free(a, w->labels, cap * w->T * 4 + 4);
    sl_free(a, w->dense, cap * w->D * 4 + 4);
    for (uint32_t s = 0; w->cols != NULL && s < w->S; s++) {
        sl_free(a, w->cols[s].len, cap * 4);
        wh_buf_free(&w->cols[s].ids, a);
        wh_buf_free(&w->cols[s].w, a);
    }
    sl_free(a, w->cols, ((size_t)w->S + 1) * sizeof *w->cols);
    sl_free(a, w->slot_group, (size_t)w->S * 4 + 4);
    sl_free(a, w->groups, (size_t)w->G * sizeof *w->groups);
    sl_free(a, w->group_unique_total, (size_t)w->G * 8 + 8);
    sl_free(a, w->unique, ((size_t)w->cap_stripes * w->G + 1) * 4);
    sl_free(a, w->stripes, (size_t)w->cap_stripes * sizeof *w->stripes);
    sl_free(a, w->meta, (size_t)w->cap_meta * sizeof *w->meta);
    sl_dedup_destroy(w->dedup);
    sl_arena_destroy(w->arena);
    sl_arena_destroy(w->keep);
    wh_buf_free(&w->enc, a);
    for (size_t i = 0; i < sizeof w->scratch / sizeof w->scratch[0]; i++)
        wh_buf_free(&w->scratch[i], a);
    wh_buf_free(&w->comp, a);
    wh_buf_free(&w->wbuf, a);
    ZSTD_freeCCtx(w->cctx);
    sl_wh_schema_destroy(w->schema);
    if (w->fd >= 0) close(w->fd);
    sl_strfree(a, w->path);
    sl_strfree(a, w->tmp);
    sl_free(a, w, sizeof *w);
}

static sl_err_t setup_groups(sl_wh_writer_t *w, const sl_wh_writer_opts_t *o, sl_error_t *err)
{
    w->G = o->num_dedup_groups;
    w->slot_group = sl_alloc(w->a, (size_t)w->S * 4 + 4);
    w->group_unique_total = sl_calloc(w->a, (size_t)w->G + 1, 8);
    if (w->slot_group == NULL || w->group_unique_total == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "writer");
    for (uint32_t s = 0; s < w->S; s++)
        w->slot_group[s] = -1;
    if (w->G == 0) return SL_OK;
    if (o->dedup_groups == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "%u dedup groups, none given", w->G);
    w->groups = sl_calloc(w->a, w->G, sizeof *w->groups);
    w->dedup = sl_dedup_new(w->a, NULL);
    if (w->groups == NULL || w->dedup == NULL) return sl_error_set(err, SL_ERR_NOMEM, "writer");
    for (uint32_t g = 0; g < w->G; g++) {
        const sl_dedup_group_spec_t *spec = &o->dedup_groups[g];
        SL_FORWARD_IF_ERROR(wh_check_name("dedup group", spec->name, err));
        for (uint32_t h = 0; h < g; h++)
            if (strcmp(w->groups[h].name, spec->name) == 0)
                return sl_error_set(err, SL_ERR_INVALID, "dedup group '%s' given twice",
                                    spec->name);
        if (spec->num_features == 0 || spec->features == NULL)
            return sl_error_set(err, SL_ERR_INVALID, "dedup group '%s' has no features",
                                spec->name);
        wgroup_t *gr = &w->groups[g];
        gr->name = sl_arena_strdup(w->keep, spec->name);
        gr->num = spec->num_features;
        gr->slots = sl_arena_alloc(w->keep, (size_t)gr->num * 4);
        gr->names = sl_arena_alloc(w->keep, (size_t)gr->num * sizeof(char *));
        if (gr->name == NULL || gr->slots == NULL || gr->names == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "writer");
        for (uint32_t k = 0; k < gr->num; k++) {
            const sl_wh_feature_t *fe = sl_wh_schema_find(w->schema, spec->features[k]);
            if (fe == NULL || fe->kind == SL_WH_DENSE)
                return sl_error_set(err, SL_ERR_INVALID,
                                    "dedup group '%s': '%s' is not a sparse feature of the schema",
                                    spec->name, spec->features[k] ? spec->features[k] : "(null)");
            if (w->slot_group[fe->slot] >= 0)
                return sl_error_set(err, SL_ERR_INVALID, "feature '%s' is in two dedup groups",
                                    fe->name);
            w->slot_group[fe->slot] = (int32_t)g;
            gr->slots[k] = fe->slot;
            gr->names[k] = fe->name;
        }
    }
    return SL_OK;
}

sl_err_t sl_wh_writer_open(const char *path, const sl_wh_schema_t *schema,
                           const sl_wh_writer_opts_t *opts, sl_wh_writer_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_wh_writer_opts_t o = opts ? *opts : sl_wh_writer_opts_default();
    const sl_allocator_t *a = o.allocator ? o.allocator : sl_allocator_default();
    if (path == NULL || schema == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "writer: path and schema are required");
    if (o.stripe_rows == 0) o.stripe_rows = SL_WH_DEFAULT_STRIPE_ROWS;
    if (o.stripe_rows > sl_wh_limits_default().max_stripe_rows)
        return sl_error_set(err, SL_ERR_INVALID, "%s: %u rows per stripe exceed the limit %u", path,
                            o.stripe_rows, sl_wh_limits_default().max_stripe_rows);
    if (o.codec != SL_WH_CODEC_NONE && o.codec != SL_WH_CODEC_ZSTD)
        return sl_error_set(err, SL_ERR_INVALID, "%s: unknown codec %d", path, (int)o.codec);
    if (o.format_version == 0) o.format_version = SL_WH_FORMAT_VERSION;
    if (o.format_version < SL_WH_FORMAT_VERSION_MIN || o.format_version > SL_WH_FORMAT_VERSION)
        return sl_error_set(err, SL_ERR_INVALID,
                            "%s: format version %u (this build writes %d to %d)", path,
                            o.format_version, SL_WH_FORMAT_VERSION_MIN, SL_WH_FORMAT_VERSION);
    if (o.zstd_level == 0) o.zstd_level = 1;
    if (o.zstd_level < ZSTD_minCLevel() || o.zstd_level > ZSTD_maxCLevel())
        return sl_error_set(err, SL_ERR_INVALID, "%s: zstd level %d outside [%d, %d]", path,
                            o.zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    if (!(o.zstd_min_saving >= 0.0 && o.zstd_min_saving < 1.0))
        return sl_error_set(err, SL_ERR_INVALID, "%s: zstd_min_saving %g outside [0, 1)", path,
                            o.zstd_min_saving);
    struct stat st;
    if (!o.overwrite && stat(path, &st) == 0)
        return sl_error_set(err, SL_ERR_INVALID, "%s: exists (set overwrite to replace it)", path);

    sl_wh_writer_t *w = sl_calloc(a, 1, sizeof *w);
    if (w == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: writer", path);
    w->a = a;
    w->fd = -1;
    w->opts = o;
    w->opts.dedup_groups = NULL; /* borrowed for open only */
    sl_err_t rc = SL_OK;
    w->path = sl_strdup(a, path);
    w->tmp = wh_tmp_path(path, a);
    w->schema = sl_wh_schema_clone(schema, a);
    w->arena = sl_arena_new(a, 1u << 20);
    w->keep = sl_arena_new(a, 4096);
    w->cctx = ZSTD_createCCtx();
    if (w->path == NULL || w->tmp == NULL || w->schema == NULL || w->arena == NULL ||
        w->keep == NULL || w->cctx == NULL || !wh_buf_reserve(&w->wbuf, a, WBUF_BYTES)) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: writer", path);
        goto fail;
    }
    w->T = sl_wh_schema_num_labels(w->schema);
    w->D = sl_wh_schema_num_dense(w->schema);
    w->S = sl_wh_schema_num_sparse(w->schema);
    w->cap = o.stripe_rows;
    size_t cap = w->cap;
    w->sid = sl_alloc(a, cap * 8);
    w->sess = sl_alloc(a, cap * 8);
    w->ts = sl_alloc(a, cap * 8);
    w->labels = sl_alloc(a, cap * w->T * 4 + 4);
    w->dense = sl_alloc(a, cap * w->D * 4 + 4);
    w->cols = sl_calloc(a, (size_t)w->S + 1, sizeof *w->cols);
    if (w->sid == NULL || w->sess == NULL || w->ts == NULL || w->labels == NULL ||
        w->dense == NULL || w->cols == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: writer of %u-row stripes", path, w->cap);
        goto fail;
    }
    for (uint32_t s = 0; s < w->S; s++) {
        w->cols[s].weighted = sl_wh_schema_sparse(w->schema, s)->kind == SL_WH_WEIGHTED;
        w->cols[s].len = sl_alloc(a, cap * 4);
        if (w->cols[s].len == NULL) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "%s: writer", path);
            goto fail;
        }
    }
    if ((rc = setup_groups(w, &o, err)) != SL_OK) {
        sl_error_prefix(err, "%s: ", path);
        goto fail;
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = sl_error_set(err, SL_ERR_IO, "create %s: %s", w->tmp, strerror(errno));
        goto fail;
    }
    uint8_t head[WH_HEADER_BYTES];
    uint32_t version = w->opts.format_version;
    memcpy(head, SL_WH_FILE_MAGIC, 4);
    memcpy(head + 4, &version, 4);
    if ((rc = wh_writer_put(w, head, sizeof head, err)) != SL_OK) goto fail;
    *out = w;
    return SL_OK;
fail:
    if (w->fd >= 0) unlink(w->tmp);
    writer_free(w);
    return rc;
}

uint64_t sl_wh_writer_rows(const sl_wh_writer_t *w)
{
    return w->rows_total + w->n;
}

static sl_err_t push_ids(sl_wh_writer_t *w, uint32_t s, uint32_t len, const int64_t *ids,
                         const float *wts, sl_error_t *err)
{
    wcol_t *c = &w->cols[s];
    if (len == 0) return SL_OK;
    uint64_t need = c->nids + len;
    if (need > (1ull << 40) || !wh_buf_grow(&c->ids, w->a, need * 8, c->nids * 8) ||
        (c->weighted && !wh_buf_grow(&c->w, w->a, need * 4, c->nids * 4)))
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "feature '%s': %llu ids in one stripe",
                              sl_wh_schema_sparse(w->schema, s)->name, (unsigned long long)need);
    memcpy((int64_t *)c->ids.data + c->nids, ids, (size_t)len * 8);
    if (c->weighted) {
        float *dst = (float *)c->w.data + c->nids;
        if (wts != NULL)
            memcpy(dst, wts, (size_t)len * 4);
        else
            for (uint32_t i = 0; i < len; i++)
                dst[i] = 1.0f;
    }
    c->nids = need;
    return SL_OK;
}

sl_err_t sl_wh_writer_append_row(sl_wh_writer_t *w, const sl_wh_row_t *row, sl_error_t *err)
{
    if (w->failed != SL_OK) return sticky(w, err);
    for (uint32_t s = 0; row->sparse != NULL && s < w->S; s++) {
        const sl_wh_idlist_t *l = &row->sparse[s];
        if (l->len > INT32_MAX || (l->len > 0 && l->ids == NULL))
            return sl_error_set(err, SL_ERR_INVALID, "%s: row %llu feature '%s': %u ids at %p",
                                w->path, (unsigned long long)sl_wh_writer_rows(w),
                                sl_wh_schema_sparse(w->schema, s)->name, l->len,
                                (const void *)l->ids);
    }
    uint32_t n = w->n;
    w->sid[n] = row->sample_id;
    w->sess[n] = row->session_id;
    w->ts[n] = row->timestamp;
    for (uint32_t t = 0; t < w->T; t++)
        w->labels[(size_t)t * w->cap + n] = row->labels ? row->labels[t] : 0.0f;
    for (uint32_t d = 0; d < w->D; d++)
        w->dense[(size_t)d * w->cap + n] = row->dense ? row->dense[d] : NAN;
    for (uint32_t s = 0; s < w->S; s++) {
        const sl_wh_idlist_t *l = row->sparse ? &row->sparse[s] : NULL;
        uint32_t len = l ? l->len : 0;
        w->cols[s].len[n] = (int32_t)len;
        if (len > 0) {
            SL_FORWARD_IF_ERROR(push_ids(w, s, len, l->ids, l->weights, err));
        }
    }
    if (++w->n == w->cap) return wh_writer_flush_stripe(w, err);
    return SL_OK;
}

/* Map the names of a dense matrix's columns to schema positions: map[c] =
 * dense slot / label index. */
static sl_err_t map_dense(sl_wh_writer_t *w, const sl_dense_t *d, bool labels, int32_t *map,
                          sl_error_t *err)
{
    uint32_t want = labels ? w->T : w->D;
    const char *what = labels ? "label" : "dense";
    if (d->cols == 0) return SL_OK; /* none given: all missing (dense) or 0 (labels) */
    if (d->names == NULL) {
        if (d->cols != want)
            return sl_error_set(err, SL_ERR_INVALID, "%s: %u unnamed %s columns, the schema has %u",
                                w->path, d->cols, what, want);
        for (uint32_t c = 0; c < d->cols; c++)
            map[c] = (int32_t)c;
        return SL_OK;
    }
    for (uint32_t c = 0; c < d->cols; c++) {
        const char *name = d->names[c];
        int32_t at = -1;
        if (name != NULL && labels) {
            at = sl_wh_schema_find_label(w->schema, name);
        } else if (name != NULL) {
            const sl_wh_feature_t *fe = sl_wh_schema_find(w->schema, name);
            if (fe != NULL && fe->kind == SL_WH_DENSE) at = (int32_t)fe->slot;
        }
        if (at < 0)
            return sl_error_set(err, SL_ERR_INVALID, "%s: %s column '%s' is not in the schema",
                                w->path, what, name ? name : "(null)");
        map[c] = at;
    }
    return SL_OK;
}

sl_err_t sl_wh_writer_append(sl_wh_writer_t *w, const sl_wh_rows_t *rows, sl_error_t *err)
{
    if (w->failed != SL_OK) return sticky(w, err);
    const sl_batch_t *b = &rows->batch;
    uint32_t B = b->batch_size;
    if (B == 0) return SL_OK;
    sl_err_t rc = sl_batch_validate(b, err);
    if (rc != SL_OK) return sl_error_prefix(err, "%s: append: ", w->path);
    sl_arena_t *tmp = sl_arena_new(w->a, 0);
    if (tmp == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: append", w->path);
    sl_kjt_t all = b->sparse;
    /* groups kept as given (sl_wh_writer_append_stripe) are written from
     * their IKJTs: their slots stay empty here */
    if (b->num_groups > 0 && w->given == NULL &&
        (rc = sl_batch_expand(b, tmp, &all, err)) != SL_OK) {
        sl_arena_destroy(tmp);
        return sl_error_prefix(err, "%s: append: ", w->path);
    }
    uint32_t Dc = b->dense.cols, Tc = b->labels.cols, K = all.num_keys;
    int32_t *dmap = sl_arena_alloc(tmp, ((size_t)Dc + 1) * 4);
    int32_t *lmap = sl_arena_alloc(tmp, ((size_t)Tc + 1) * 4);
    int32_t *dsrc = sl_arena_alloc(tmp, ((size_t)w->D + 1) * 4); /* slot -> column */
    int32_t *lsrc = sl_arena_alloc(tmp, ((size_t)w->T + 1) * 4);
    int32_t *ksrc = sl_arena_alloc(tmp, ((size_t)w->S + 1) * 4); /* slot -> key */
    uint64_t *koff = sl_arena_alloc(tmp, ((size_t)K + 1) * 8);
    if (dmap == NULL || lmap == NULL || dsrc == NULL || lsrc == NULL || ksrc == NULL ||
        koff == NULL) {
        sl_arena_destroy(tmp);
        return sl_error_set(err, SL_ERR_NOMEM, "%s: append", w->path);
    }
    if ((rc = map_dense(w, &b->dense, false, dmap, err)) != SL_OK ||
        (rc = map_dense(w, &b->labels, true, lmap, err)) != SL_OK) {
        sl_arena_destroy(tmp);
        return rc;
    }
    for (uint32_t i = 0; i < w->D; i++)
        dsrc[i] = -1;
    for (uint32_t i = 0; i < w->T; i++)
        lsrc[i] = -1;
    for (uint32_t i = 0; i < w->S; i++)
        ksrc[i] = -1;
    for (uint32_t c = 0; c < Dc; c++)
        dsrc[dmap[c]] = (int32_t)c;
    for (uint32_t c = 0; c < Tc; c++)
        lsrc[lmap[c]] = (int32_t)c;
    for (uint32_t k = 0; k < K; k++) {
        const sl_wh_feature_t *fe = sl_wh_schema_find(w->schema, all.keys[k]);
        if (fe == NULL || fe->kind == SL_WH_DENSE) {
            rc = sl_error_set(err, SL_ERR_INVALID, "%s: sparse key '%s' is not in the schema",
                              w->path, all.keys[k]);
            sl_arena_destroy(tmp);
            return rc;
        }
        ksrc[fe->slot] = (int32_t)k;
    }
    sl_kjt_key_offsets(&all, koff);

    uint32_t r0 = 0;
    while (r0 < B) {
        uint32_t m = w->cap - w->n;
        if (m > B - r0) m = B - r0;
        uint32_t n = w->n;
        for (uint32_t i = 0; i < m; i++) {
            w->sid[n + i] =
                b->sample_ids ? b->sample_ids[r0 + i] : (int64_t)(w->rows_total + n + i);
            w->sess[n + i] = rows->session_ids ? rows->session_ids[r0 + i] : 0;
            w->ts[n + i] = rows->timestamps ? rows->timestamps[r0 + i] : 0;
        }
        for (uint32_t t = 0; t < w->T; t++) {
            float *dst = w->labels + (size_t)t * w->cap + n;
            int32_t c = lsrc[t];
            for (uint32_t i = 0; i < m; i++)
                dst[i] = c < 0 ? 0.0f : b->labels.data[(size_t)(r0 + i) * Tc + (uint32_t)c];
        }
        for (uint32_t d = 0; d < w->D; d++) {
            float *dst = w->dense + (size_t)d * w->cap + n;
            int32_t c = dsrc[d];
            for (uint32_t i = 0; i < m; i++)
                dst[i] = c < 0 ? NAN : b->dense.data[(size_t)(r0 + i) * Dc + (uint32_t)c];
        }
        for (uint32_t s = 0; s < w->S; s++) {
            int32_t k = ksrc[s];
            if (k < 0) {
                memset(w->cols[s].len + n, 0, (size_t)m * 4);
                continue;
            }
            const int32_t *len = all.lengths + (size_t)k * B + r0;
            uint64_t cnt = 0;
            for (uint32_t i = 0; i < m; i++)
                cnt += (uint64_t)len[i];
            memcpy(w->cols[s].len + n, len, (size_t)m * 4);
            if (cnt > UINT32_MAX) {
                sl_arena_destroy(tmp);
                return wh_writer_fail(w, err, SL_ERR_TOO_LARGE,
                                      "feature '%s': %llu ids in one stripe", all.keys[k],
                                      (unsigned long long)cnt);
            }
            rc = push_ids(w, s, (uint32_t)cnt, all.values + koff[k],
                          all.weights ? all.weights + koff[k] : NULL, err);
            if (rc != SL_OK) {
                sl_arena_destroy(tmp);
                return rc;
            }
            koff[k] += cnt;
        }
        w->n += m;
        r0 += m;
        if (w->n == w->cap && (rc = wh_writer_flush_stripe(w, err)) != SL_OK) {
            sl_arena_destroy(tmp);
            return rc;
        }
    }
    sl_arena_destroy(tmp);
    return SL_OK;
}

sl_err_t sl_wh_writer_end_stripe(sl_wh_writer_t *w, sl_error_t *err)
{
    if (w->failed != SL_OK) return sticky(w, err);
    return wh_writer_flush_stripe(w, err);
}

/* The IKJT of rows standing for file group g, checked to be storable as
 * it is: its name, the group's features in the file's order, weights when
 * (and only when) they are weighted in the schema. */
static sl_err_t given_group(sl_wh_writer_t *w, const sl_batch_t *b, uint32_t g,
                            const sl_ikjt_t **out, sl_error_t *err)
{
    const wgroup_t *gr = &w->groups[g];
    const sl_ikjt_t *ik = NULL;
    for (uint32_t i = 0; i < b->num_groups && ik == NULL; i++)
        if (b->groups[i].name != NULL && strcmp(b->groups[i].name, gr->name) == 0)
            ik = &b->groups[i];
    if (ik == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "%s: append_stripe: no group '%s' in the rows",
                            w->path, gr->name);
    bool same = ik->unique.num_keys == gr->num;
    for (uint32_t k = 0; same && k < gr->num; k++) {
        uint32_t s = gr->slots[k];
        same = strcmp(ik->unique.keys[k], gr->names[k]) == 0 &&
               w->cols[s].weighted == (ik->unique.weights != NULL);
    }
    if (!same)
        return sl_error_set(err, SL_ERR_INVALID,
                            "%s: append_stripe: group '%s' of the rows does not hold the file "
                            "group's features in its order, weighted as the schema says",
                            w->path, gr->name);
    *out = ik;
    return SL_OK;
}

sl_err_t sl_wh_writer_append_stripe(sl_wh_writer_t *w, const sl_wh_rows_t *rows, sl_error_t *err)
{
    if (w->failed != SL_OK) return sticky(w, err);
    const sl_batch_t *b = &rows->batch;
    if (b->batch_size > w->cap)
        return sl_error_set(err, SL_ERR_INVALID,
                            "%s: append_stripe: %u rows do not fit a stripe of %u", w->path,
                            b->batch_size, w->cap);
    if (w->opts.cluster_sessions && w->G > 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "%s: append_stripe: groups kept as given with clustered sessions",
                            w->path);
    if (b->num_groups != w->G)
        return sl_error_set(err, SL_ERR_INVALID,
                            "%s: append_stripe: %u dedup groups in the rows, the file has %u",
                            w->path, b->num_groups, w->G);
    sl_err_t rc = wh_writer_flush_stripe(w, err);
    if (rc != SL_OK || b->batch_size == 0) return rc;
    size_t gbytes = ((size_t)w->G + 1) * sizeof(sl_ikjt_t);
    sl_ikjt_t *given = sl_alloc(w->a, gbytes);
    if (given == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: append_stripe", w->path);
    for (uint32_t g = 0; rc == SL_OK && g < w->G; g++) {
        const sl_ikjt_t *ik = NULL;
        if ((rc = given_group(w, b, g, &ik, err)) == SL_OK) given[g] = *ik;
    }
    if (rc == SL_OK) {
        /* the rows' groups are validated by append (sl_batch_validate) */
        w->given = w->G > 0 ? given : NULL;
        rc = sl_wh_writer_append(w, rows, err);
        if (rc == SL_OK) rc = wh_writer_flush_stripe(w, err);
        w->given = NULL;
    }
    sl_free(w->a, given, gbytes);
    return rc;
}

/* ---- close ---- */

static sl_err_t write_footer(sl_wh_writer_t *w, sl_error_t *err)
{
    sl_arena_t *ar = w->arena;
    sl_arena_reset(ar);
    Sluice__FileFooter ft;
    sluice__file_footer__init(&ft);
    ft.format_version = w->opts.format_version;
    ft.row_count = w->rows_total;
    ft.session_clustered = w->opts.cluster_sessions;
    ft.writer = (char *)"sluice";
    Sluice__TableSchema schema;
    if (wh_schema_to_pb(w->schema, ar, &schema) != SL_OK)
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "footer");
    ft.schema = &schema;
    ft.n_stripes = w->nstripes;
    ft.stripes = sl_arena_alloc(ar, ((size_t)w->nstripes + 1) * sizeof(void *));
    Sluice__StripeInfo *si = sl_arena_alloc(ar, ((size_t)w->nstripes + 1) * sizeof *si);
    Sluice__StreamInfo *sm = sl_arena_alloc(ar, ((size_t)w->nmeta + 1) * sizeof *sm);
    Sluice__StreamInfo **smp = sl_arena_alloc(ar, ((size_t)w->nmeta + 1) * sizeof(void *));
    Sluice__StreamStats *ss = sl_arena_alloc(ar, ((size_t)w->nmeta + 1) * sizeof *ss);
    ft.n_dedup_groups = w->G;
    ft.dedup_groups = sl_arena_alloc(ar, ((size_t)w->G + 1) * sizeof(void *));
    Sluice__DedupGroupInfo *gi = sl_arena_alloc(ar, ((size_t)w->G + 1) * sizeof *gi);
    if (ft.stripes == NULL || si == NULL || sm == NULL || smp == NULL || ss == NULL ||
        ft.dedup_groups == NULL || gi == NULL)
        return wh_writer_fail(w, err, SL_ERR_NOMEM, "footer of %u streams", w->nmeta);
    for (uint32_t g = 0; g < w->G; g++) {
        sluice__dedup_group_info__init(&gi[g]);
        gi[g].name = (char *)w->groups[g].name;
        gi[g].n_features = w->groups[g].num;
        gi[g].features = (char **)w->groups[g].names;
        gi[g].unique_rows = w->group_unique_total[g];
        ft.dedup_groups[g] = &gi[g];
    }
    for (uint32_t i = 0; i < w->nmeta; i++) {
        const wmeta_t *m = &w->meta[i];
        Sluice__StreamInfo *o = &sm[i];
        sluice__stream_info__init(o);
        o->name = (char *)m->name;
        o->kind = (Sluice__StreamKind)m->kind;
        o->codec = (Sluice__Codec)m->codec;
        o->encoding = (Sluice__Encoding)m->encoding;
        o->for_width = m->width;
        o->for_base = m->base;
        o->bit_width = m->bits;
        o->dict_size = m->dict_size;
        o->dict_bytes = m->dict_bytes;
        o->delta_base = m->delta_base;
        o->offset = m->offset;
        o->stored_size = m->stored;
        o->raw_size = m->raw;
        o->value_count = m->count;
        o->checksum = m->checksum;
        if (m->has_int || m->has_float) {
            sluice__stream_stats__init(&ss[i]);
            ss[i].has_int = m->has_int;
            ss[i].min_int = m->imin;
            ss[i].max_int = m->imax;
            ss[i].has_float = m->has_float;
            ss[i].min_float = m->fmin;
            ss[i].max_float = m->fmax;
            o->stats = &ss[i];
        }
        smp[i] = o;
    }
    for (uint32_t s = 0; s < w->nstripes; s++) {
        const wstripe_t *p = &w->stripes[s];
        sluice__stripe_info__init(&si[s]);
        si[s].first_row = p->first_row;
        si[s].row_count = p->rows;
        si[s].offset = p->offset;
        si[s].length = p->length;
        si[s].n_streams = p->num_meta;
        si[s].streams = smp + p->first_meta;
        si[s].n_group_unique_rows = w->G;
        si[s].group_unique_rows = w->unique + (size_t)s * w->G;
        ft.stripes[s] = &si[s];
    }
    size_t len = sluice__file_footer__get_packed_size(&ft);
    if (len > UINT32_MAX)
        return wh_writer_fail(w, err, SL_ERR_TOO_LARGE, "footer of %zu bytes", len);
    uint8_t *buf = sl_arena_alloc(ar, len + WH_TRAILER_BYTES);
    if (buf == NULL) return wh_writer_fail(w, err, SL_ERR_NOMEM, "footer of %zu bytes", len);
    sluice__file_footer__pack(&ft, buf);
    uint32_t len32 = (uint32_t)len;
    uint64_t sum = XXH3_64bits(buf, len);
    memcpy(buf + len, &len32, 4);
    memcpy(buf + len + 4, &sum, 8);
    memcpy(buf + len + 12, SL_WH_FILE_MAGIC, 4);
    return wh_writer_put(w, buf, len + WH_TRAILER_BYTES, err);
}

sl_err_t sl_wh_writer_close(sl_wh_writer_t *w, sl_wh_write_stats_t *stats, sl_error_t *err)
{
    if (w == NULL) return sl_error_set(err, SL_ERR_INVALID, "close: no writer");
    sl_err_t rc = w->failed != SL_OK ? sticky(w, err) : SL_OK;
    if (rc == SL_OK) rc = wh_writer_flush_stripe(w, err);
    if (rc == SL_OK) rc = write_footer(w, err);
    if (rc == SL_OK) rc = flush_wbuf(w, err);
    if (rc == SL_OK && !w->opts.no_sync && fsync(w->fd) != 0)
        rc = wh_writer_fail(w, err, SL_ERR_IO, "fsync %s: %s", w->tmp, strerror(errno));
    if (rc == SL_OK) {
        int fd = w->fd;
        w->fd = -1;
        if (close(fd) != 0)
            rc = wh_writer_fail(w, err, SL_ERR_IO, "close %s: %s", w->tmp, strerror(errno));
    }
    if (rc == SL_OK && rename(w->tmp, w->path) != 0)
        rc = wh_writer_fail(w, err, SL_ERR_IO, "rename %s: %s", w->tmp, strerror(errno));
    if (rc != SL_OK) {
        unlink(w->tmp);
        writer_free(w);
        return rc;
    }
    if (!w->opts.no_sync) rc = wh_sync_parent_dir(w->path, err);
    w->stats.rows = w->rows_total;
    w->stats.stripes = w->nstripes;
    w->stats.file_bytes = w->file_off;
    if (stats != NULL) *stats = w->stats;
    writer_free(w);
    return rc;
}

void sl_wh_writer_abort(sl_wh_writer_t *w)
{
    if (w == NULL) return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    unlink(w->tmp);
    writer_free(w);
}

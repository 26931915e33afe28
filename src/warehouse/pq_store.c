/* The byte source of a Parquet file wherever it lives (pq_store.h): a
 * local file (the parquet module's pread source), or an object of a store
 * pinned at its ETag. An object is read in few requests: its open fetches
 * the first bytes and the last 64 KiB (magic, footer length and, mostly,
 * the footer) in one parallel request, and a reader about to read a row
 * group fetches the projected column chunks whole, in parallel
 * (wh_pq_source_prefetch); the Parquet reader's page-sized reads are then
 * served from memory. */
#include <string.h>

#include "pq_store.h"

#define TAIL_BYTES (64u * 1024)
#define HEAD_BYTES 4u

typedef struct window {
    uint64_t off;
    size_t len;
    uint8_t *buf;
} window_t;

typedef struct obj_src {
    const sl_allocator_t *a;
    sl_store_object_t *obj;
    window_t head, tail;
    window_t *win; /* the last prefetch's ranges */
    uint32_t n, cap;
    const sl_wh_mem_t *mem; /* what the windows' bytes were taken from */
    uint64_t held;          /* taken from mem for the windows */
} obj_src_t;

static sl_err_t obj_size(void *ctx, uint64_t *size, sl_error_t *err)
{
    return sl_store_object_size(((obj_src_t *)ctx)->obj, size, err);
}

static bool serve(const window_t *w, uint64_t off, size_t len, void *buf)
{
    if (w->buf == NULL || off < w->off || off - w->off > w->len || len > w->len - (off - w->off))
        return false;
    if (len > 0) memcpy(buf, w->buf + (off - w->off), len);
    return true;
}

static sl_err_t obj_read_at(void *ctx, uint64_t off, size_t len, void *buf, sl_error_t *err)
{
    obj_src_t *s = ctx;
    if (serve(&s->tail, off, len, buf) || serve(&s->head, off, len, buf)) return SL_OK;
    for (uint32_t i = 0; i < s->n; i++)
        if (serve(&s->win[i], off, len, buf)) return SL_OK;
    return sl_store_object_read_at(s->obj, off, len, buf, err);
}

static void drop_windows(obj_src_t *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        sl_free(s->a, s->win[i].buf, s->win[i].len + 1);
    s->n = 0;
    if (s->held > 0) s->mem->give(s->mem->ctx, s->held);
    s->held = 0;
}

static bool is_object(const sl_pq_source_t *src)
{
    return src->read_at == obj_read_at;
}

sl_err_t wh_pq_source_open(sl_store_t *st, const char *path, const sl_allocator_t *a,
                           sl_pq_source_t *src, sl_error_t *err)
{
    memset(src, 0, sizeof *src);
    if (!sl_store_is_remote(path)) return sl_pq_source_file(path, src, err);
    if (a == NULL) a = sl_allocator_default();
    const char *root = st ? sl_store_root(st) : "";
    size_t nr = strlen(root);
    if (st == NULL || strncmp(path, root, nr) != 0 || path[nr] != '/')
        return sl_error_set(err, SL_ERR_INVALID, "%s: not an object of the store %s", path,
                            st ? root : "(none)");
    obj_src_t *s = sl_calloc(a, 1, sizeof *s);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", path);
    s->a = a;
    sl_err_t rc = sl_store_object_open(st, path + nr + 1, &s->obj, err);
    uint64_t size = rc == SL_OK ? sl_store_object_info(s->obj)->size : 0;
    if (rc == SL_OK && size > 0) {
        s->tail.len = (size_t)(size < TAIL_BYTES ? size : TAIL_BYTES);
        s->tail.off = size - s->tail.len;
        s->head.len = s->tail.off >= HEAD_BYTES ? HEAD_BYTES : 0;
        s->tail.buf = sl_alloc(a, s->tail.len);
        s->head.buf = s->head.len ? sl_alloc(a, s->head.len) : NULL;
        if (s->tail.buf == NULL || (s->head.len && s->head.buf == NULL)) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", path);
        } else {
            sl_store_range_t r[2] = {
                {.offset = s->tail.off, .len = s->tail.len, .buf = s->tail.buf},
                {.offset = 0, .len = s->head.len, .buf = s->head.buf}};
            rc = sl_store_object_read_many(s->obj, r, s->head.len ? 2 : 1, err);
        }
    }
    src->ctx = s;
    src->size = obj_size;
    src->read_at = obj_read_at;
    if (rc != SL_OK) wh_pq_source_close(src);
    return rc;
}

void wh_pq_source_close(sl_pq_source_t *src)
{
    if (src->ctx == NULL) return;
    if (!is_object(src)) {
        sl_pq_source_file_close(src);
        return;
    }
    obj_src_t *s = src->ctx;
    drop_windows(s);
    sl_free(s->a, s->win, s->cap * sizeof *s->win);
    sl_free(s->a, s->head.buf, s->head.len);
    sl_free(s->a, s->tail.buf, s->tail.len);
    sl_store_object_destroy(s->obj);
    sl_free(s->a, s, sizeof *s);
    memset(src, 0, sizeof *src);
}

const char *wh_pq_source_etag(const sl_pq_source_t *src)
{
    return is_object(src) ? sl_store_object_info(((obj_src_t *)src->ctx)->obj)->etag : "";
}

sl_err_t wh_pq_source_prefetch(sl_pq_source_t *src, const uint64_t *off, const uint64_t *len,
                               uint32_t n, const sl_wh_mem_t *mem, const char *what,
                               sl_error_t *err)
{
    if (!is_object(src)) return SL_OK;
    obj_src_t *s = src->ctx;
    drop_windows(s);
    if (n == 0) return SL_OK;
    /* The bytes are counted before any is allocated (back-pressure: the
     * caller's limit holds them, or the read waits), by the same clipping
     * as the windows below. */
    uint64_t size = sl_store_object_info(s->obj)->size, total = 0;
    for (uint32_t i = 0; i < n; i++)
        if (off[i] < size && len[i] > 0) total += len[i] < size - off[i] ? len[i] : size - off[i];
    if (mem != NULL && total > 0) {
        sl_err_t mrc = mem->take(mem->ctx, total, what ? what : "column chunks", err);
        if (mrc != SL_OK) return mrc;
        s->mem = mem;
        s->held = total;
    }
    if (n > s->cap) {
        window_t *w = sl_alloc(s->a, (size_t)n * sizeof *w);
        if (w == NULL) return sl_error_set(err, SL_ERR_NOMEM, "prefetch of %u ranges", n);
        sl_free(s->a, s->win, s->cap * sizeof *s->win);
        s->win = w;
        s->cap = n;
    }
    sl_store_range_t *r = sl_calloc(s->a, n, sizeof *r);
    if (r == NULL) return sl_error_set(err, SL_ERR_NOMEM, "prefetch of %u ranges", n);
    /* Ranges are the file's claims: those outside the object are not
     * fetched (the reader then names what is wrong as for a local file). */
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; i < n && rc == SL_OK; i++) {
        if (off[i] >= size || len[i] == 0) continue;
        uint64_t l = len[i] < size - off[i] ? len[i] : size - off[i];
        if (l > SIZE_MAX - 1) continue;
        window_t *w = &s->win[s->n];
        *w = (window_t){.off = off[i], .len = (size_t)l, .buf = sl_alloc(s->a, (size_t)l + 1)};
        if (w->buf == NULL) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "prefetch of %llu bytes", (unsigned long long)l);
            break;
        }
        r[s->n] = (sl_store_range_t){.offset = w->off, .len = w->len, .buf = w->buf};
        s->n++;
    }
    if (rc == SL_OK && s->n > 0) rc = sl_store_object_read_many(s->obj, r, s->n, err);
    sl_free(s->a, r, (size_t)n * sizeof *r);
    if (rc != SL_OK) drop_windows(s);
    return rc;
}

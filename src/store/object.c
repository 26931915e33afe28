/* One object pinned at its ETag (store.h, sl_store_object_t): the byte
 * source a format reader holds, with the callbacks' shape of the Parquet
 * reader's sl_pq_source_t. */
#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "store_internal.h"

struct sl_store_object {
    sl_store_t *st;
    char *key;
    sl_store_info_t info;
};

sl_err_t sl_store_object_open(sl_store_t *st, const char *key, sl_store_object_t **out,
                              sl_error_t *err)
{
    *out = NULL;
    sl_store_object_t *o = sl_calloc(st->a, 1, sizeof *o);
    if (o == NULL || (o->key = sl_strdup(st->a, key)) == NULL) {
        sl_free(st->a, o, sizeof *o);
        return sl_error_set(err, SL_ERR_NOMEM, "%s/%s: out of memory", st->root, key);
    }
    o->st = st;
    sl_err_t rc = sl_store_stat(st, key, &o->info, err);
    if (rc != SL_OK) {
        sl_store_object_destroy(o);
        return rc;
    }
    *out = o;
    return SL_OK;
}

sl_err_t sl_store_object_pin(sl_store_t *st, const char *key, const sl_store_info_t *info,
                             sl_store_object_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_store_object_t *o = sl_calloc(st->a, 1, sizeof *o);
    if (o == NULL || (o->key = sl_strdup(st->a, key)) == NULL) {
        sl_free(st->a, o, sizeof *o);
        return sl_error_set(err, SL_ERR_NOMEM, "%s/%s: out of memory", st->root, key);
    }
    o->st = st;
    o->info = *info;
    *out = o;
    return SL_OK;
}

void sl_store_object_destroy(sl_store_object_t *obj)
{
    if (obj == NULL) return;
    sl_strfree(obj->st->a, obj->key);
    sl_free(obj->st->a, obj, sizeof *obj);
}

const sl_store_info_t *sl_store_object_info(const sl_store_object_t *obj)
{
    return &obj->info;
}

sl_err_t sl_store_object_size(void *ctx, uint64_t *size, sl_error_t *err)
{
    (void)err;
    *size = ((const sl_store_object_t *)ctx)->info.size;
    return SL_OK;
}

sl_err_t sl_store_object_read_at(void *ctx, uint64_t offset, size_t len, void *buf, sl_error_t *err)
{
    sl_store_object_t *o = ctx;
    /* Past the size pinned at open: refused here, without a request. */
    if (offset > o->info.size || len > o->info.size - offset)
        return sl_error_set(err, SL_ERR_TRUNCATED, "%s/%s: bytes [%llu, %llu) past its end at %llu",
                            o->st->root, o->key, (unsigned long long)offset,
                            (unsigned long long)(offset + len), (unsigned long long)o->info.size);
    sl_store_range_t r = {.key = o->key,
                          .offset = offset,
                          .len = len,
                          .buf = buf,
                          .if_match = o->info.etag[0] ? o->info.etag : NULL};
    return sl_store_read_many(o->st, &r, 1, err);
}

sl_err_t sl_store_object_read_many(sl_store_object_t *obj, sl_store_range_t *ranges, size_t n,
                                   sl_error_t *err)
{
    for (size_t i = 0; i < n; i++) {
        sl_store_range_t *r = &ranges[i];
        if (r->offset > obj->info.size || r->len > obj->info.size - r->offset)
            return sl_error_set(
                err, SL_ERR_TRUNCATED, "%s/%s: bytes [%llu, %llu) past its end at %llu",
                obj->st->root, obj->key, (unsigned long long)r->offset,
                (unsigned long long)(r->offset + r->len), (unsigned long long)obj->info.size);
        r->key = obj->key;
        r->if_match = obj->info.etag[0] ? obj->info.etag : NULL;
    }
    return sl_store_read_many(obj->st, ranges, n, err);
}

const char *sl_store_object_key(const sl_store_object_t *obj)
{
    return obj->key;
}

sl_store_t *sl_store_object_store(const sl_store_object_t *obj)
{
    return obj->st;
}

/* Warehouse plumbing: reusable buffers, the byte source (pread or memory),
 * atomic small-file writes, directory fsync, and the protobuf-c allocator
 * bridge. */
#include "common/err.h"
#include "common/fileio.h"
#include "wh_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bool wh_buf_reserve(wh_buf_t *b, const sl_allocator_t *a, size_t size)
{
    if (size <= b->cap && b->data != NULL) return true;
    return wh_buf_grow(b, a, size, 0);
}

bool wh_buf_grow(wh_buf_t *b, const sl_allocator_t *a, size_t size, size_t keep)
{
    if (size <= b->cap && b->data != NULL) return true;
    /* Geometric growth so that a buffer reused across stripes settles after a
     * few stripes; sizes are bounded by the caller's limits. */
    size_t cap = b->cap < 4096 ? 4096 : b->cap;
    while (cap < size) {
        if (cap > SIZE_MAX / 2) {
            cap = size;
            break;
        }
        cap *= 2;
    }
    uint8_t *p = sl_alloc_aligned(a, cap, SL_ALIGN);
    if (p == NULL) return false;
    if (keep > 0 && b->data != NULL) memcpy(p, b->data, keep < b->cap ? keep : b->cap);
    sl_free(a, b->data, b->cap);
    b->data = p;
    b->cap = cap;
    return true;
}

void wh_buf_free(wh_buf_t *b, const sl_allocator_t *a)
{
    if (b->data != NULL) sl_free(a, b->data, b->cap);
    b->data = NULL;
    b->cap = 0;
}

void wh_source_map(wh_source_t *src)
{
    const char *off = getenv("SLUICE_NO_MMAP");
    if ((off != NULL && strcmp(off, "0") != 0) || src->fd < 0 || src->size == 0 ||
        src->size > SIZE_MAX || !wh_mapguard_init())
        return;
    void *m = mmap(NULL, (size_t)src->size, PROT_READ, MAP_SHARED, src->fd, 0);
    if (m == MAP_FAILED) return; /* pread it is */
    src->mem = m;
    src->map_len = (size_t)src->size;
}

void wh_source_unmap(wh_source_t *src)
{
    if (src->map_len == 0) return;
    munmap((void *)src->mem, src->map_len);
    src->mem = NULL;
    src->map_len = 0;
}

sl_err_t wh_source_read(wh_source_t *src, void *buf, size_t len, uint64_t off, sl_error_t *err)
{
    if (off > src->size || len > src->size - off)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "%s: read of %zu bytes at %llu past the end (%llu bytes)", src->name,
                            len, (unsigned long long)off, (unsigned long long)src->size);
    src->read_calls++;
    if (src->obj != NULL) {
        if (off >= src->tail_off && src->tail != NULL) {
            if (len > 0) memcpy(buf, src->tail + (off - src->tail_off), len);
        } else if (src->head != NULL && off + len <= src->head_len) {
            if (len > 0) memcpy(buf, src->head + off, len);
        } else {
            SL_FORWARD_IF_ERROR(sl_store_object_read_at(src->obj, off, len, buf, err));
        }
        src->bytes_read += len;
        return SL_OK;
    }
    if (src->fd < 0) {
        if (len > 0) memcpy(buf, src->mem + off, len);
        src->bytes_read += len;
        return SL_OK;
    }
    uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(src->fd, p + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return sl_error_set(err, SL_ERR_IO, "%s: pread %zu bytes at %llu: %s", src->name,
                                len - done, (unsigned long long)(off + done), strerror(errno));
        }
        if (n == 0)
            return sl_error_set(err, SL_ERR_TRUNCATED, "%s: file ends at %llu, expected %llu bytes",
                                src->name, (unsigned long long)(off + done),
                                (unsigned long long)(off + len));
        done += (size_t)n;
    }
    src->bytes_read += len;
    return SL_OK;
}

char *wh_tmp_path(const char *path, const sl_allocator_t *a)
{
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash != NULL ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    size_t n = dir_len + 1 + strlen(base) + 4 + 1;
    char *tmp = sl_alloc(a, n);
    if (tmp == NULL) return NULL;
    memcpy(tmp, path, dir_len);
    tmp[dir_len] = '.';
    strcpy(tmp + dir_len + 1, base);
    strcat(tmp, ".tmp");
    return tmp;
}

sl_err_t wh_sync_parent_dir(const char *path, sl_error_t *err)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (slash == NULL) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return sl_error_set(err, SL_ERR_INVALID, "path too long: %s", path);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return sl_io_sync_dir(dir, err);
}

sl_err_t wh_write_file_atomic(const char *path, const void *data, size_t len, bool sync,
                              sl_error_t *err)
{
    const sl_allocator_t *a = sl_allocator_default();
    char *tmp = wh_tmp_path(path, a);
    if (tmp == NULL) return sl_error_set(err, SL_ERR_NOMEM, "write %s", path);
    sl_err_t rc = sl_io_replace_file(path, tmp, NULL, 0, data, len, sync, err);
    if (rc == SL_OK && sync) rc = wh_sync_parent_dir(path, err);
    sl_strfree(a, tmp);
    return rc;
}

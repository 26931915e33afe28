/* Byte-range sources (parquet.h): a local file read with pread, and bytes
 * in memory. An object store's ranged GETs are a third implementation of
 * the same two callbacks. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mem.h"
#include "parquet.h"

typedef struct file_src {
    int fd;
    char *path;
} file_src_t;

static sl_err_t file_size(void *ctx, uint64_t *size, sl_error_t *err)
{
    file_src_t *f = ctx;
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return sl_error_set(err, SL_ERR_IO, "%s: stat: %s", f->path, strerror(errno));
    *size = (uint64_t)st.st_size;
    return SL_OK;
}

static sl_err_t file_read_at(void *ctx, uint64_t offset, size_t len, void *buf, sl_error_t *err)
{
    file_src_t *f = ctx;
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pread(f->fd, p, len, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return sl_error_set(err, SL_ERR_IO, "%s: read at %llu: %s", f->path,
                                (unsigned long long)offset, strerror(errno));
        if (n == 0)
            return sl_error_set(err, SL_ERR_TRUNCATED, "%s: ends before offset %llu", f->path,
                                (unsigned long long)offset);
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return SL_OK;
}

sl_err_t sl_pq_source_file(const char *path, sl_pq_source_t *src, sl_error_t *err)
{
    memset(src, 0, sizeof *src);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sl_error_set(err, SL_ERR_IO, "%s: %s", path, strerror(errno));
    file_src_t *f = sl_alloc(NULL, sizeof *f);
    char *copy = sl_strdup(NULL, path);
    if (f == NULL || copy == NULL) {
        close(fd);
        sl_free(NULL, f, sizeof *f);
        sl_strfree(NULL, copy);
        return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = fd;
    f->path = copy;
    src->ctx = f;
    src->size = file_size;
    src->read_at = file_read_at;
    return SL_OK;
}

void sl_pq_source_file_close(sl_pq_source_t *src)
{
    if (src == NULL || src->ctx == NULL) return;
    file_src_t *f = src->ctx;
    close(f->fd);
    sl_strfree(NULL, f->path);
    sl_free(NULL, f, sizeof *f);
    src->ctx = NULL;
}

static sl_err_t mem_size(void *ctx, uint64_t *size, sl_error_t *err)
{
    (void)err;
    *size = ((sl_pq_memory_t *)ctx)->len;
    return SL_OK;
}

static sl_err_t mem_read_at(void *ctx, uint64_t offset, size_t len, void *buf, sl_error_t *err)
{
    sl_pq_memory_t *m = ctx;
    if (offset > m->len || len > m->len - offset)
        return sl_error_set(err, SL_ERR_TRUNCATED, "read of %zu bytes at %llu past the end (%zu)",
                            len, (unsigned long long)offset, m->len);
    memcpy(buf, m->data + offset, len);
    return SL_OK;
}

void sl_pq_source_memory(sl_pq_memory_t *mem, const void *data, size_t len, sl_pq_source_t *src)
{
    mem->data = data;
    mem->len = len;
    src->ctx = mem;
    src->size = mem_size;
    src->read_at = mem_read_at;
}

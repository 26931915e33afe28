/* Whole-file reads and maps, whole writes, atomic replacement and
 * directory fsync (fileio.h). */
#include "common/fileio.h"
#include "common/mem.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static sl_err_t open_error(const char *what, const char *path, int e, sl_error_t *err)
{
    return sl_error_set(err, e == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO, "%s %s: %s",
                        what != NULL ? what : "file", path, strerror(e));
}

sl_err_t sl_io_read_file(const char *path, const char *what, size_t max, const sl_allocator_t *a,
                         char **data, size_t *len, sl_error_t *err)
{
    *data = NULL;
    *len = 0;
    if (what == NULL) what = "file";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return open_error(what, path, errno, err);
    /* The size from fstat is a first guess (a pipe or /proc says 0, a file
     * may grow): read on until the end, growing the buffer, up to max. */
    struct stat st;
    size_t cap =
        fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size <= max
            ? (size_t)st.st_size + 1
            : 4096;
    if (max < SIZE_MAX - 1 && cap > max + 1) cap = max + 1;
    char *buf = sl_alloc(a, cap);
    size_t n = 0;
    sl_err_t rc =
        buf == NULL ? sl_error_set(err, SL_ERR_NOMEM, "%s %s: out of memory", what, path) : SL_OK;
    while (rc == SL_OK) {
        if (n == cap) {
            /* full: grow, unless it already holds one byte past max */
            if (n > max) {
                rc = sl_error_set(err, SL_ERR_TOO_LARGE, "%s %s: over %zu bytes", what, path, max);
                break;
            }
            /* at most one byte past max: enough to tell the file is over it */
            char *nb = sl_grow(a, buf, &cap, n + 1, 1, 4096, max < SIZE_MAX ? max + 1 : max);
            if (nb == NULL) {
                rc = sl_error_set(err, SL_ERR_NOMEM, "%s %s: out of memory", what, path);
                break;
            }
            buf = nb;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) rc = sl_error_set(err, SL_ERR_IO, "%s %s: %s", what, path, strerror(errno));
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (rc == SL_OK && n > max)
        rc = sl_error_set(err, SL_ERR_TOO_LARGE, "%s %s: over %zu bytes", what, path, max);
    if (rc != SL_OK) {
        sl_free(a, buf, cap);
        return rc;
    }
    /* exactly n + 1 bytes, so the caller frees what it knows the size of */
    char *out = n + 1 == cap ? buf : sl_alloc(a, n + 1);
    if (out == NULL) {
        sl_free(a, buf, cap);
        return sl_error_set(err, SL_ERR_NOMEM, "%s %s: out of memory", what, path);
    }
    if (out != buf) {
        memcpy(out, buf, n);
        sl_free(a, buf, cap);
    }
    out[n] = '\0';
    *data = out;
    *len = n;
    return SL_OK;
}

sl_err_t sl_io_read_line(FILE *f, const char *name, size_t max, const sl_allocator_t *a,
                         char **line, size_t *cap, size_t *len, sl_error_t *err)
{
    size_t n = 0;
    bool any = false, over = false;
    int c;
    while ((c = getc(f)) != EOF) {
        any = true;
        if (c == '\n') break;
        if (n >= max) {
            over = true; /* consume the rest of the line */
            continue;
        }
        if (n + 1 >= *cap && !SL_GROW(a, *line, *cap, n + 2, 256))
            return sl_error_set(err, SL_ERR_NOMEM, "%s: a line: out of memory", name);
        (*line)[n++] = (char)c;
    }
    if (ferror(f)) return sl_error_set(err, SL_ERR_IO, "read %s: %s", name, strerror(errno));
    if (!any) return SL_ERR_CLOSED;
    if (over) return sl_error_set(err, SL_ERR_TOO_LARGE, "%s: a line over %zu bytes", name, max);
    if (*cap == 0) {
        *line = sl_alloc(a, 1);
        if (*line == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "%s: a line: out of memory", name);
        *cap = 1;
    }
    (*line)[n] = '\0';
    *len = n;
    return SL_OK;
}

sl_err_t sl_io_map_file(const char *path, const char *what, sl_io_map_t *map, sl_error_t *err)
{
    *map = (sl_io_map_t){NULL, 0};
    if (what == NULL) what = "file";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return open_error(what, path, errno, err);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sl_error_set(err, SL_ERR_IO, "stat %s %s: %s", what, path, strerror(e));
    }
    if (st.st_size == 0) {
        close(fd);
        map->data = (const uint8_t *)"";
        return SL_OK;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s %s: too large to map", what, path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return sl_error_set(err, SL_ERR_IO, "mmap %s %s: %s", what, path, strerror(e));
    map->data = m;
    map->len = (size_t)st.st_size;
    return SL_OK;
}

void sl_io_unmap(sl_io_map_t *map)
{
    if (map->data != NULL && map->len > 0) munmap((void *)map->data, map->len);
    *map = (sl_io_map_t){NULL, 0};
}

sl_err_t sl_io_write_all(int fd, const void *data, size_t len, const char *path, sl_error_t *err)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return sl_error_set(err, SL_ERR_IO, "write %s: %s", path, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return SL_OK;
}

sl_err_t sl_io_replace_file(const char *path, const char *tmp, const void *head, size_t head_len,
                            const void *body, size_t body_len, bool sync, sl_error_t *err)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return sl_error_set(err, SL_ERR_IO, "create %s: %s", tmp, strerror(errno));
    sl_err_t rc = head_len > 0 ? sl_io_write_all(fd, head, head_len, tmp, err) : SL_OK;
    if (rc == SL_OK && body_len > 0) rc = sl_io_write_all(fd, body, body_len, tmp, err);
    if (rc == SL_OK && sync && fsync(fd) != 0)
        rc = sl_error_set(err, SL_ERR_IO, "fsync %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == SL_OK)
        rc = sl_error_set(err, SL_ERR_IO, "close %s: %s", tmp, strerror(errno));
    if (rc == SL_OK && rename(tmp, path) != 0)
        rc = sl_error_set(err, SL_ERR_IO, "rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != SL_OK) unlink(tmp);
    return rc;
}

sl_err_t sl_io_sync_dir(const char *dir, sl_error_t *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return sl_error_set(err, SL_ERR_IO, "open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return sl_error_set(err, SL_ERR_IO, "fsync directory %s: %s", dir, strerror(e));
    return SL_OK;
}

sl_err_t sl_io_read_token(const char *path, const char *what, char *buf, size_t cap,
                          sl_error_t *err)
{
    FILE *f = fopen(path, "r");
    if (!f) return sl_error_set(err, SL_ERR_IO, "%s file %s: %s", what, path, strerror(errno));
    bool ok = fgets(buf, (int)cap, f) != NULL;
    bool io = ferror(f) != 0;
    int saved = errno;
    /* a line that filled buf without its newline goes on: too long */
    size_t n = ok ? strlen(buf) : 0;
    bool longer = ok && n == cap - 1 && buf[n - 1] != '\n' && fgetc(f) != EOF;
    fclose(f);
    if (io) return sl_error_set(err, SL_ERR_IO, "%s file %s: %s", what, path, strerror(saved));
    if (!ok) buf[0] = '\0';
    if (longer) {
        explicit_bzero(buf, cap);
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s file %s: its first line is over %zu bytes",
                            what, path, cap - 2);
    }
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    if (n == 0) return sl_error_set(err, SL_ERR_INVALID, "%s file %s is empty", what, path);
    return SL_OK;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void sl_io_remove_tree(const char *dir)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Whole writes, atomic replacement and directory fsync (fileio.h). */
#include "common/fileio.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

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

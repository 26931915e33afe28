/* Whole writes and directory fsync (fileio.h). */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
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

/* Small file helpers every module that writes durable files needs: whole
 * writes that survive EINTR and short writes, directory fsync (a rename is
 * durable only once its directory is), and little-endian fixed-width fields
 * of on-disk headers. */
#ifndef SLUICE_COMMON_FILEIO_H
#define SLUICE_COMMON_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sluice/err.h"

/* Write all len bytes to fd; path names the file in the error message. */
sl_err_t sl_io_write_all(int fd, const void *data, size_t len, const char *path, sl_error_t *err);

/* Replace path atomically: write head then body to tmp (created or
 * truncated), fsync it when sync, close it and rename it over path; on any
 * failure tmp is removed and path is left as it was. The rename is durable
 * only once the caller has fsynced the directory. */
sl_err_t sl_io_replace_file(const char *path, const char *tmp, const void *head, size_t head_len,
                            const void *body, size_t body_len, bool sync, sl_error_t *err);

/* fsync the directory dir. */
sl_err_t sl_io_sync_dir(const char *dir, sl_error_t *err);

/* Fixed-width fields of our on-disk headers are little-endian; every
 * supported target is, so these are plain copies (no alignment needed). */
static inline void sl_le_put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}
static inline void sl_le_put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}
static inline uint32_t sl_le_get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t sl_le_get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

#endif

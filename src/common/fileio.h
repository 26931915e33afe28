/* Small file helpers every module needs: whole-file reads and maps, whole
 * writes that survive EINTR and short writes, directory fsync (a rename is
 * durable only once its directory is), and little-endian fixed-width fields
 * of on-disk headers. */
#ifndef SLUICE_COMMON_FILEIO_H
#define SLUICE_COMMON_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

/* Read the whole file path into *data from a (NULL: the default
 * allocator): *len bytes plus a NUL after them, so text can be used as a
 * string; caller owns it, free with sl_free(a, *data, *len + 1). what names
 * the file in messages ("job spec", "TLS key"). @return SL_ERR_NOT_FOUND
 * when it does not exist, SL_ERR_IO when it cannot be read (why),
 * SL_ERR_TOO_LARGE when it holds more than max bytes (it is not read on),
 * SL_ERR_NOMEM. */
sl_err_t sl_io_read_file(const char *path, const char *what, size_t max, const sl_allocator_t *a,
                         char **data, size_t *len, sl_error_t *err);

/* Read the next line of f, without its '\n', into *line: a buffer of *cap
 * bytes from a that grows as needed (start with NULL and 0; free it with
 * sl_free(a, *line, *cap)), NUL-terminated, *len bytes long (getline
 * through the allocator). A line over max bytes is consumed and refused.
 * name names f in messages. @return SL_OK, SL_ERR_CLOSED at the end of the
 * file (nothing read), SL_ERR_TOO_LARGE, SL_ERR_IO, SL_ERR_NOMEM. */
sl_err_t sl_io_read_line(FILE *f, const char *name, size_t max, const sl_allocator_t *a,
                         char **line, size_t *cap, size_t *len, sl_error_t *err);

/* A whole file mapped read-only (MAP_PRIVATE). */
typedef struct sl_io_map {
    const uint8_t *data; /* "" (not mapped) for an empty file */
    size_t len;
} sl_io_map_t;

/* Map path whole. @return SL_ERR_NOT_FOUND when it does not exist (then
 * *map is {NULL, 0}), SL_ERR_IO when it cannot be opened or mapped. */
sl_err_t sl_io_map_file(const char *path, const char *what, sl_io_map_t *map, sl_error_t *err);

/* Unmap what sl_io_map_file mapped; a zeroed map is fine. */
void sl_io_unmap(sl_io_map_t *map);

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

/* Remove dir and everything below it, best effort (scratch and cache
 * folders: what cannot be removed is left, never followed through a
 * symbolic link). */
void sl_io_remove_tree(const char *dir);

/* Read a secret from a token file (the admin token, the cluster secret):
 * its first line, trailing whitespace trimmed, into buf (cap bytes, NUL
 * terminated). what names it in messages ("admin token"); the content
 * never appears in one. @return SL_ERR_IO when the file cannot be read
 * (naming it and why), SL_ERR_INVALID when the line is empty,
 * SL_ERR_TOO_LARGE when it does not fit in cap - 1 bytes. */
sl_err_t sl_io_read_token(const char *path, const char *what, char *buf, size_t cap,
                          sl_error_t *err);

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

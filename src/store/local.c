/* The local-file store: a directory read with pread, listed by walking
 * it, written by a temporary file renamed into place (so a reader never
 * sees half an object). The ETag of a file is its size and modification
 * time, which changes when the file is replaced. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/mem.h"
#include "store_internal.h"

/* A listing's keys, sorted before the callback sees them. */
typedef struct keys {
    const sl_allocator_t *a;
    char **v;
    size_t n, cap;
} keys_t;

static char *path_of(sl_store_t *st, const char *key)
{
    return sl_strfmt(st->a, "%s/%s", st->root, key);
}

static void info_of(const struct stat *sb, sl_store_info_t *info)
{
    info->size = (uint64_t)sb->st_size;
    info->mtime_s = (int64_t)sb->st_mtim.tv_sec;
    snprintf(info->etag, sizeof info->etag, "\"%llx-%llx\"", (unsigned long long)sb->st_size,
             (unsigned long long)sb->st_mtim.tv_sec * 1000000000ull +
                 (unsigned long long)sb->st_mtim.tv_nsec);
    info->version[0] = '\0';
}

static sl_err_t keys_add(keys_t *k, const char *key)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 64;
        char **v = sl_realloc(k->a, k->v, k->cap * sizeof *v, sl_mul_size(cap, sizeof *v));
        if (v == NULL) return SL_ERR_NOMEM;
        k->v = v;
        k->cap = cap;
    }
    if ((k->v[k->n] = sl_strdup(k->a, key)) == NULL) return SL_ERR_NOMEM;
    k->n++;
    return SL_OK;
}

/* Walk dir (rel: its key prefix, "" or "a/b/") collecting the files whose
 * key starts with prefix. Depth is bounded so a link loop ends. */
static sl_err_t walk(sl_store_t *st, const char *rel, const char *prefix, keys_t *k, int depth,
                     sl_error_t *err)
{
    if (depth > 64)
        return sl_error_set(err, SL_ERR_INVALID, "%s/%s: directories nested over 64 deep", st->root,
                            rel);
    char *dir = sl_strfmt(st->a, "%s/%s", st->root, rel);
    if (dir == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
    DIR *d = opendir(dir);
    if (d == NULL) {
        int e = errno;
        sl_strfree(st->a, dir);
        if (e == ENOENT && depth == 0) return SL_OK;
        return sl_error_set(err, SL_ERR_IO, "%s/%s: cannot list: %s", st->root, rel, strerror(e));
    }
    sl_err_t rc = SL_OK;
    struct dirent *de;
    while (rc == SL_OK && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        char *key = sl_strfmt(st->a, "%s%s", rel, de->d_name);
        if (key == NULL) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
            break;
        }
        struct stat sb;
        char *path = path_of(st, key);
        if (path == NULL) {
            sl_strfree(st->a, key);
            rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
            break;
        }
        if (stat(path, &sb) == 0) {
            size_t kl = strlen(key), pl = strlen(prefix);
            if (S_ISDIR(sb.st_mode)) {
                /* Only directories that can hold a key with the prefix. */
                if (strncmp(key, prefix, kl < pl ? kl : pl) == 0) {
                    char *sub = sl_strfmt(st->a, "%s/", key);
                    rc = sub ? walk(st, sub, prefix, k, depth + 1, err)
                             : sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
                    sl_strfree(st->a, sub);
                }
            } else if (S_ISREG(sb.st_mode) && strncmp(key, prefix, pl) == 0) {
                if (keys_add(k, key) != SL_OK)
                    rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
            }
        }
        sl_strfree(st->a, path);
        sl_strfree(st->a, key);
    }
    closedir(d);
    sl_strfree(st->a, dir);
    return rc;
}

static int cmp_keys(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static sl_err_t local_list(sl_store_t *st, const char *prefix, sl_store_list_fn fn, void *ctx,
                           sl_error_t *err)
{
    keys_t k = {.a = st->a};
    sl_err_t rc = walk(st, "", prefix, &k, 0, err);
    if (rc == SL_OK && k.n > 1) qsort(k.v, k.n, sizeof *k.v, cmp_keys);
    atomic_fetch_add(&st->list_pages, 1);
    for (size_t i = 0; rc == SL_OK && i < k.n; i++) {
        sl_store_info_t info;
        rc = sl_store_stat(st, k.v[i], &info, err);
        if (rc == SL_ERR_NOT_FOUND) {
            if (err) sl_error_clear(err);
            rc = SL_OK;
            continue; /* removed since the walk */
        }
        if (rc == SL_OK) rc = fn(ctx, k.v[i], &info);
    }
    for (size_t i = 0; i < k.n; i++)
        sl_strfree(st->a, k.v[i]);
    sl_free(st->a, k.v, k.cap * sizeof *k.v);
    return rc;
}

static sl_err_t local_stat(sl_store_t *st, const char *key, sl_store_info_t *info, sl_error_t *err)
{
    char *path = path_of(st, key);
    if (path == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
    struct stat sb;
    sl_err_t rc = SL_OK;
    if (stat(path, &sb) != 0)
        rc = sl_error_set(err, errno == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO, "%s: %s", path,
                          strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = sl_error_set(err, SL_ERR_NOT_FOUND, "%s: not a file", path);
    else
        info_of(&sb, info);
    sl_strfree(st->a, path);
    return rc;
}

static sl_err_t read_one(sl_store_t *st, sl_store_range_t *r, sl_error_t *err)
{
    char *path = path_of(st, r->key);
    if (path == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
    sl_err_t rc = SL_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = sl_error_set(err, errno == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO, "%s: %s", path,
                          strerror(errno));
        goto out;
    }
    if (r->if_match) {
        struct stat sb;
        sl_store_info_t info;
        if (fstat(fd, &sb) != 0) {
            rc = sl_error_set(err, SL_ERR_IO, "%s: %s", path, strerror(errno));
            goto out;
        }
        info_of(&sb, &info);
        if (strcmp(info.etag, r->if_match) != 0) {
            rc = sl_error_set(err, SL_ERR_VERSION, "%s: replaced (ETag %s, expected %s)", path,
                              info.etag, r->if_match);
            goto out;
        }
    }
    atomic_fetch_add(&st->requests, 1);
    for (size_t done = 0; done < r->len;) {
        ssize_t got = pread(fd, (char *)r->buf + done, r->len - done, (off_t)(r->offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            rc = sl_error_set(err, SL_ERR_IO, "%s: read at %llu: %s", path,
                              (unsigned long long)(r->offset + done), strerror(errno));
            goto out;
        }
        if (got == 0) {
            rc = sl_error_set(err, SL_ERR_TRUNCATED,
                              "%s: ends at %llu, inside the range [%llu, %llu)", path,
                              (unsigned long long)(r->offset + done), (unsigned long long)r->offset,
                              (unsigned long long)(r->offset + r->len));
            goto out;
        }
        done += (size_t)got;
        atomic_fetch_add(&st->bytes_read, (uint64_t)got);
    }
out:
    if (fd >= 0) close(fd);
    sl_strfree(st->a, path);
    return rc;
}

/* Local reads are page-cache copies: one after another is as fast as the
 * disk allows, and keeps the interface's bound on memory trivially. */
static sl_err_t local_read_many(sl_store_t *st, sl_store_range_t *ranges, size_t n, sl_error_t *err)
{
    sl_err_t first = SL_OK;
    for (size_t i = 0; i < n; i++) {
        sl_error_t e = {0};
        ranges[i].result = read_one(st, &ranges[i], &e);
        if (ranges[i].result != SL_OK && first == SL_OK) {
            first = ranges[i].result;
            if (err) *err = e;
        }
    }
    return first;
}

static sl_err_t mkdirs(sl_store_t *st, char *path, sl_error_t *err)
{
    for (char *s = path + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        int rc = mkdir(path, 0777);
        int e = errno;
        *s = '/';
        if (rc != 0 && e != EEXIST)
            return sl_error_set(err, SL_ERR_IO, "%s: mkdir: %s", st->root, strerror(e));
    }
    return SL_OK;
}

static sl_err_t local_put(sl_store_t *st, const char *key, const void *data, size_t len,
                          const char *src, sl_error_t *err)
{
    char *path = path_of(st, key),
         *tmp = path ? sl_strfmt(st->a, "%s.tmp.%d", path, getpid()) : NULL;
    char *body = NULL;
    size_t body_len = 0;
    sl_err_t rc;
    if (tmp == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", st->root);
        goto out;
    }
    if (src) {
        rc = sl_io_read_file(src, "object source", SIZE_MAX / 2, st->a, &body, &body_len, err);
        if (rc != SL_OK) goto out;
        data = body;
        len = body_len;
    }
    if ((rc = mkdirs(st, path, err)) != SL_OK) goto out;
    rc = sl_io_replace_file(path, tmp, NULL, 0, data, len, false, err);
    if (rc == SL_OK) {
        atomic_fetch_add(&st->requests, 1);
        atomic_fetch_add(&st->bytes_written, len);
    }
out:
    if (body) sl_free(st->a, body, body_len + 1);
    sl_strfree(st->a, tmp);
    sl_strfree(st->a, path);
    return rc;
}

static void local_destroy(sl_store_t *st)
{
    const sl_allocator_t *a = st->a;
    sl_strfree(a, st->root);
    sl_free(a, st, sizeof *st);
}

static const sl_store_ops_t local_ops = {local_list, local_stat, local_read_many, local_put,
                                         local_destroy};

sl_err_t sl_store_local_open(const char *dir, const sl_store_opts_t *opts, sl_store_t **out,
                             sl_error_t *err)
{
    const sl_allocator_t *a = opts && opts->alloc ? opts->alloc : sl_allocator_default();
    sl_store_t *st = sl_calloc(a, 1, sizeof *st);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--; /* "dir/" and "dir" are one root */
    if (st == NULL || (st->root = sl_strndup(a, dir, n)) == NULL) {
        sl_free(a, st, sizeof *st);
        return sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", dir);
    }
    st->ops = &local_ops;
    st->a = a;
    sl_store_opts_fill(opts, &st->opts);
    *out = st;
    return SL_OK;
}

/* A worker's own autocache directory (cache_dir.h). */
#define _XOPEN_SOURCE 700
#include "dpp/worker/runtime/cache_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fileio.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/mem.h"

typedef struct entry {
    uint64_t fp, bytes, used; /* used: the settle count when it was last used */
    uint32_t split;
} entry_t;

struct dpp_cache_dir {
    const sl_allocator_t *a;
    sl_mutex_t mu;
    char *dir; /* root/w-<pid>-<random> */
    int lock_fd;
    uint64_t max_bytes, bytes, clock, evicted_total;
    entry_t *e; /* [n] of [cap] */
    uint32_t n, cap;
    dpp_cache_evicted_t *gone; /* [ngone] of [gone_cap]: not yet reported */
    uint32_t ngone, gone_cap;
};

/* Remove root's w-* folders whose lock nobody holds. */
static void clear_ended(const char *root)
{
    DIR *d = opendir(root);
    if (d == NULL) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "w-", 2) != 0) continue;
        char path[4096], lock[4200];
        snprintf(path, sizeof path, "%s/%s", root, de->d_name);
        snprintf(lock, sizeof lock, "%s/.lock", path);
        int fd = open(lock, O_RDWR | O_CLOEXEC);
        if (fd < 0) continue; /* not one of ours, or being made */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) sl_io_remove_tree(path);
        close(fd);
    }
    closedir(d);
}

sl_err_t dpp_cache_dir_open(const char *root, uint64_t max_bytes, const sl_allocator_t *a,
                            dpp_cache_dir_t **out, sl_error_t *err)
{
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        return sl_error_set(err, SL_ERR_IO, "cache directory %s: %s", root, strerror(errno));
    clear_ended(root);
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r) r = (uint32_t)time(NULL);
    char dir[4096], lock[4200];
    int n = snprintf(dir, sizeof dir, "%s/w-%ld-%08" PRIx32, root, (long)getpid(), r);
    if (n < 0 || (size_t)n >= sizeof dir)
        return sl_error_set(err, SL_ERR_INVALID, "cache directory %.200s...: name too long", root);
    if (mkdir(dir, 0755) != 0)
        return sl_error_set(err, SL_ERR_IO, "cache directory %s: %s", dir, strerror(errno));
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        rmdir(dir);
        return sl_error_set(err, SL_ERR_IO, "cache directory lock %s: %s", lock, strerror(e));
    }
    dpp_cache_dir_t *d = sl_calloc(a, 1, sizeof *d);
    if (d == NULL || (d->dir = sl_strdup(a, dir)) == NULL) {
        sl_free(a, d, sizeof *d);
        close(fd);
        sl_io_remove_tree(dir);
        return sl_error_set(err, SL_ERR_NOMEM, "cache directory");
    }
    d->a = a;
    d->lock_fd = fd;
    d->max_bytes = max_bytes ? max_bytes : 8ull << 30;
    sl_mutex_init(&d->mu);
    *out = d;
    return SL_OK;
}

void dpp_cache_dir_destroy(dpp_cache_dir_t *d)
{
    if (d == NULL) return;
    sl_io_remove_tree(d->dir);
    close(d->lock_fd);
    sl_strfree(d->a, d->dir);
    sl_free(d->a, d->e, (size_t)d->cap * sizeof *d->e);
    sl_free(d->a, d->gone, (size_t)d->gone_cap * sizeof *d->gone);
    sl_mutex_destroy(&d->mu);
    sl_free(d->a, d, sizeof *d);
}

/* "<16 hex>/split-<N>.slc" -> fp, split. */
static bool parse_name(const char *name, uint64_t *fp, uint32_t *split)
{
    for (int i = 0; i < 16; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    if (strncmp(name + 16, "/split-", 7) != 0) return false;
    const char *s = name + 23;
    if (*s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || v > UINT32_MAX || strcmp(end, ".slc") != 0) return false;
    *fp = strtoull(name, NULL, 16);
    *split = (uint32_t)v;
    return true;
}

char *dpp_cache_dir_path(dpp_cache_dir_t *d, const char *name)
{
    uint64_t fp;
    uint32_t split;
    if (name == NULL || !parse_name(name, &fp, &split)) return NULL;
    char path[4400];
    snprintf(path, sizeof path, "%s/%.16s", d->dir, name);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return NULL;
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    return sl_strdup(d->a, path);
}

/* Queue (fp, split) for the next heartbeat's cache_evicted. Out of
 * memory: not reported, so the master may lease it as held: the worker
 * finds no file and computes the split (a fallback). */
static void tell_gone(dpp_cache_dir_t *d, uint64_t fp, uint32_t split) SL_REQUIRES(d->mu)
{
    for (uint32_t k = 0; k < d->ngone; k++)
        if (d->gone[k].fp == fp && d->gone[k].split == split) return;
    if (SL_GROW(d->a, d->gone, d->gone_cap, d->ngone + 1, 16))
        d->gone[d->ngone++] = (dpp_cache_evicted_t){fp, split};
}

/* A file held again is no longer gone: a heartbeat saying so after the
 * SPLIT_READ that said it is held would make the master forget it. */
static void untell_gone(dpp_cache_dir_t *d, uint64_t fp, uint32_t split) SL_REQUIRES(d->mu)
{
    for (uint32_t k = 0; k < d->ngone; k++)
        if (d->gone[k].fp == fp && d->gone[k].split == split) {
            d->gone[k] = d->gone[--d->ngone];
            return;
        }
}

static void remove_entry(dpp_cache_dir_t *d, uint32_t i, bool report) SL_REQUIRES(d->mu)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%016" PRIx64 "/split-%" PRIu32 ".slc", d->dir, d->e[i].fp,
             d->e[i].split);
    unlink(path);
    d->bytes -= d->e[i].bytes;
    if (report) {
        d->evicted_total++;
        tell_gone(d, d->e[i].fp, d->e[i].split);
    }
    d->e[i] = d->e[--d->n];
}

/* settle and settle_untold: told, whether the result reaches the master
 * by a SPLIT_READ (else by cache_evicted when nothing is held). */
static uint64_t settle(dpp_cache_dir_t *d, const char *name, bool told)
{
    uint64_t fp;
    uint32_t split;
    if (d == NULL || name == NULL || !parse_name(name, &fp, &split)) return 0;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    struct stat sb;
    uint64_t bytes = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
    sl_mutex_lock(&d->mu);
    uint32_t i = 0;
    while (i < d->n && !(d->e[i].fp == fp && d->e[i].split == split))
        i++;
    if (i < d->n) {
        d->bytes -= d->e[i].bytes;
        if (bytes == 0) d->e[i] = d->e[--d->n];
    }
    if (bytes > 0 && i == d->n && !SL_GROW(d->a, d->e, d->cap, d->n + 1, 64)) {
        unlink(path); /* out of memory: not kept, so never over the limit */
        bytes = 0;
    }
    if (bytes > 0) {
        if (i == d->n) d->n++;
        d->e[i] = (entry_t){.fp = fp, .split = split, .bytes = bytes, .used = ++d->clock};
        d->bytes += bytes;
        untell_gone(d, fp, split);
    }
    /* least recently used first; this one (used last) goes only when it
     * alone is over the limit, reported by the caller's SPLIT_READ when
     * there is one */
    while (d->bytes > d->max_bytes && d->n > 0) {
        uint32_t old = 0;
        for (uint32_t k = 1; k < d->n; k++)
            if (d->e[k].used < d->e[old].used) old = k;
        bool self = d->e[old].fp == fp && d->e[old].split == split;
        remove_entry(d, old, !self || !told);
        if (self) bytes = 0;
    }
    if (bytes == 0 && !told) tell_gone(d, fp, split);
    sl_mutex_unlock(&d->mu);
    return bytes;
}

uint64_t dpp_cache_dir_settle(dpp_cache_dir_t *d, const char *name)
{
    return settle(d, name, true);
}

uint64_t dpp_cache_dir_settle_untold(dpp_cache_dir_t *d, const char *name)
{
    return settle(d, name, false);
}

uint32_t dpp_cache_dir_evicted(dpp_cache_dir_t *d, dpp_cache_evicted_t *out, uint32_t cap)
{
    if (d == NULL) return 0;
    sl_mutex_lock(&d->mu);
    uint32_t n = d->ngone < cap ? d->ngone : cap;
    if (n > 0) {
        memcpy(out, d->gone, (size_t)n * sizeof *out);
        memmove(d->gone, d->gone + n, (size_t)(d->ngone - n) * sizeof *d->gone);
        d->ngone -= n;
    }
    sl_mutex_unlock(&d->mu);
    return n;
}

void dpp_cache_dir_stats(dpp_cache_dir_t *d, uint64_t *files, uint64_t *bytes, uint64_t *evicted)
{
    *files = *bytes = *evicted = 0;
    if (d == NULL) return;
    sl_mutex_lock(&d->mu);
    *files = d->n;
    *bytes = d->bytes;
    *evicted = d->evicted_total;
    sl_mutex_unlock(&d->mu);
}

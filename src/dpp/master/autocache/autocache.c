/* The master's half of the autocache: autocache.h says what and why. */
#include "dpp/master/autocache/autocache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "warehouse/warehouse.h"

#define DEFAULT_MAX_BYTES (8ull << 30)
#define DEFAULT_PROBE_BYTES (16ull << 20)
#define DECISION_MAX_BYTES 4096

struct sl_master_autocache {
    const sl_allocator_t *a;
    char *dir;
    uint64_t max_bytes;
    double read_bps;
    uint64_t bytes, files, evicted_files, evicted_bytes;
    uint64_t scanned_ms;
    bool scanned;
};

const char *sl_master_autocache_state_name(sl_master_autocache_state_t s)
{
    switch (s) {
    case SL_MASTER_AUTOCACHE_MEASURING:
        return "measuring";
    case SL_MASTER_AUTOCACHE_CHOSEN:
        return "chosen";
    case SL_MASTER_AUTOCACHE_DECLINED:
        return "declined";
    case SL_MASTER_AUTOCACHE_OFF:
        break;
    }
    return "off";
}

sl_master_autocache_decision_t sl_master_autocache_decide(const sl_master_autocache_figures_t *f)
{
    sl_master_autocache_decision_t d = {.state = SL_MASTER_AUTOCACHE_MEASURING,
                                        .samples = f->computed_samples,
                                        .read_mb_per_s = f->read_bytes_per_s / 1e6};
    if (f->computed_samples == 0) return d;
    d.compute_us_per_sample = (double)f->compute_ns / 1e3 / (double)f->computed_samples;
    double bps = f->read_bytes_per_s;
    if (f->source_ns > 0 && f->source_bytes > 0) {
        double src = (double)f->source_bytes / ((double)f->source_ns / 1e9);
        d.source_mb_per_s = src / 1e6;
        if (bps <= 0 || src < bps) bps = src;
    }
    if (f->read_bytes_per_s > 0 && bps > 0)
        d.cache_us_per_sample = (double)f->computed_bytes / (double)f->computed_samples / bps * 1e6;
    uint64_t min = f->min_samples > 0 ? f->min_samples : 1;
    if (f->computed_samples < min || f->read_bytes_per_s <= 0) return d;
    d.state = d.cache_us_per_sample * SL_MASTER_AUTOCACHE_MARGIN <= d.compute_us_per_sample
                  ? SL_MASTER_AUTOCACHE_CHOSEN
                  : SL_MASTER_AUTOCACHE_DECLINED;
    return d;
}

/* ---- the throughput probe ---- */

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Write a table file of about bytes decoded bytes to path: rows shaped
 * like a recommendation sample (8 id lists of 1..32 ids, 8 dense values, a
 * label), ids random (they compress like hashed ids do: hardly). */
static sl_err_t probe_write(const char *path, uint64_t bytes, const sl_allocator_t *a,
                            sl_error_t *err)
{
    enum { NS = 8, ND = 8 };
    sl_wh_schema_t *s = sl_wh_schema_new(a);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "cache probe");
    sl_err_t rc = SL_OK;
    char name[16];
    for (int i = 0; rc == SL_OK && i < NS; i++) {
        snprintf(name, sizeof name, "s%d", i);
        rc = sl_wh_schema_add_feature(s, name, SL_WH_SPARSE, err);
    }
    for (int i = 0; rc == SL_OK && i < ND; i++) {
        snprintf(name, sizeof name, "d%d", i);
        rc = sl_wh_schema_add_feature(s, name, SL_WH_DENSE, err);
    }
    if (rc == SL_OK) rc = sl_wh_schema_add_label(s, "y", err);
    sl_wh_writer_t *w = NULL;
    sl_wh_writer_opts_t o = sl_wh_writer_opts_default();
    o.allocator = a;
    o.overwrite = true;
    o.stripe_rows = 1024; /* stripes the size of batches, as in a cache file */
    if (rc == SL_OK) rc = sl_wh_writer_open(path, s, &o, &w, err);
    uint64_t seed = 0x9e3779b97f4a7c15ull, done = 0;
    int64_t ids[NS][32];
    sl_wh_idlist_t lists[NS];
    float dense[ND], label = 1;
    for (uint64_t r = 0; rc == SL_OK && done < bytes; r++) {
        for (int i = 0; i < NS; i++) {
            uint32_t n = 1 + (uint32_t)(xorshift(&seed) % 32);
            for (uint32_t k = 0; k < n; k++)
                ids[i][k] = (int64_t)(xorshift(&seed) >> 1);
            lists[i] = (sl_wh_idlist_t){.len = n, .ids = ids[i]};
            done += 8ull * n + 4;
        }
        for (int i = 0; i < ND; i++)
            dense[i] = (float)(xorshift(&seed) % 1000) / 10.0f;
        done += 4 * ND + 4 + 8;
        sl_wh_row_t row = {
            .sample_id = (int64_t)r, .labels = &label, .dense = dense, .sparse = lists};
        rc = sl_wh_writer_append_row(w, &row, err);
    }
    if (rc == SL_OK)
        rc = sl_wh_writer_close(w, NULL, err);
    else
        sl_wh_writer_abort(w);
    sl_wh_schema_destroy(s);
    return rc;
}

/* Decoded bytes per second reading path, its pages dropped from the page
 * cache first (a cache file is read long after it was written). */
static sl_err_t probe_read(const char *path, const sl_allocator_t *a, double *bps, sl_error_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    uint64_t t0 = sl_clock_ns();
    sl_wh_read_opts_t ro = {.allocator = a};
    sl_wh_reader_t *r = NULL;
    sl_err_t rc = sl_wh_reader_open(path, NULL, &ro, &r, err);
    const sl_wh_rows_t *rows = NULL;
    while (rc == SL_OK && (rc = sl_wh_reader_next(r, &rows, err)) == SL_OK && rows != NULL) {
    }
    sl_wh_read_stats_t st = {0};
    if (r != NULL) sl_wh_reader_stats(r, &st);
    sl_wh_reader_close(r);
    double s = (double)(sl_clock_ns() - t0) / 1e9;
    if (rc == SL_OK) *bps = s > 0 ? (double)st.decoded_bytes / s : 0;
    return rc;
}

sl_err_t sl_master_autocache_open(const char *dir, uint64_t max_bytes, uint64_t probe_bytes,
                                  const sl_allocator_t *a, sl_master_autocache_t **out,
                                  sl_error_t *err)
{
    *out = NULL;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return sl_error_set(err, SL_ERR_IO, "--cache-dir %s: cannot create: %s", dir,
                            strerror(errno));
    sl_master_autocache_t *c = sl_calloc(a, 1, sizeof *c);
    if (c == NULL) return sl_error_set(err, SL_ERR_NOMEM, "autocache");
    c->a = a;
    c->dir = sl_strdup(a, dir);
    c->max_bytes = max_bytes ? max_bytes : DEFAULT_MAX_BYTES;
    if (c->dir == NULL) {
        sl_master_autocache_destroy(c);
        return sl_error_set(err, SL_ERR_NOMEM, "autocache");
    }
    char probe[PATH_MAX];
    if ((size_t)snprintf(probe, sizeof probe, "%s/.probe-%ld.slc", dir, (long)getpid()) >=
        sizeof probe) {
        sl_master_autocache_destroy(c);
        return sl_error_set(err, SL_ERR_INVALID, "--cache-dir %s: path too long", dir);
    }
    sl_err_t rc = probe_write(probe, probe_bytes ? probe_bytes : DEFAULT_PROBE_BYTES, a, err);
    if (rc == SL_OK) rc = probe_read(probe, a, &c->read_bps, err);
    unlink(probe);
    if (rc != SL_OK) {
        sl_master_autocache_destroy(c);
        return sl_error_prefix(err, "--cache-dir %s: measuring its read throughput: ", dir);
    }
    sl_log_kv(SL_LOG_INFO, SL_EV(AUTOCACHE_DIR),
              (SL_KV_STR("dir", dir), SL_KV_U64("read_mb_per_s", (uint64_t)(c->read_bps / 1e6)),
               SL_KV_U64("max_bytes", c->max_bytes)),
              "cache directory %s: reads %.0f MB/s decoded, holds at most %" PRIu64 " bytes", dir,
              c->read_bps / 1e6, c->max_bytes);
    sl_master_autocache_evict(c, sl_clock_ms(), 0);
    *out = c;
    return SL_OK;
}

void sl_master_autocache_destroy(sl_master_autocache_t *c)
{
    if (c == NULL) return;
    sl_strfree(c->a, c->dir);
    sl_free(c->a, c, sizeof *c);
}

const char *sl_master_autocache_dir(const sl_master_autocache_t *c)
{
    return c->dir;
}

void sl_master_autocache_stats(const sl_master_autocache_t *c, sl_master_autocache_stats_t *out)
{
    *out = (sl_master_autocache_stats_t){.bytes = c->bytes,
                                         .files = c->files,
                                         .evicted_files = c->evicted_files,
                                         .evicted_bytes = c->evicted_bytes,
                                         .read_bytes_per_s = c->read_bps,
                                         .max_bytes = c->max_bytes};
}

bool sl_master_autocache_path(const sl_master_autocache_t *c, uint64_t fp, uint32_t split,
                              char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s/%016" PRIx64 "/split-%u%s", c->dir, fp, split, SL_WH_FILE_EXT);
    return n > 0 && (size_t)n < cap;
}

bool sl_master_autocache_use(sl_master_autocache_t *c, uint64_t fp, uint32_t split)
{
    char path[PATH_MAX];
    if (!sl_master_autocache_path(c, fp, split, path, sizeof path)) return false;
    return utimensat(AT_FDCWD, path, NULL, 0) == 0; /* exists, and used now */
}

static bool decision_path(const sl_master_autocache_t *c, uint64_t fp, char *buf, size_t cap,
                          bool dir_only)
{
    int n = dir_only ? snprintf(buf, cap, "%s/%016" PRIx64, c->dir, fp)
                     : snprintf(buf, cap, "%s/%016" PRIx64 "/decision", c->dir, fp);
    return n > 0 && (size_t)n < cap;
}

bool sl_master_autocache_prefix_dir(const sl_master_autocache_t *c, uint64_t fp)
{
    char dir[PATH_MAX];
    return decision_path(c, fp, dir, sizeof dir, true) &&
           (mkdir(dir, 0755) == 0 || errno == EEXIST);
}

bool sl_master_autocache_load(const sl_master_autocache_t *c, uint64_t fp,
                              sl_master_autocache_decision_t *out)
{
    char path[PATH_MAX];
    if (!decision_path(c, fp, path, sizeof path, false)) return false;
    char *data = NULL;
    size_t len = 0;
    sl_error_t err = {0};
    if (sl_io_read_file(path, "autocache decision", DECISION_MAX_BYTES, c->a, &data, &len, &err) !=
        SL_OK)
        return false;
    json_t *j = json_loadb(data, len, 0, NULL);
    sl_free(c->a, data, len + 1);
    if (j == NULL) return false;
    const char *st = json_string_value(json_object_get(j, "state"));
    sl_master_autocache_decision_t d = {0};
    d.state = st == NULL                    ? SL_MASTER_AUTOCACHE_OFF
              : strcmp(st, "chosen") == 0   ? SL_MASTER_AUTOCACHE_CHOSEN
              : strcmp(st, "declined") == 0 ? SL_MASTER_AUTOCACHE_DECLINED
                                            : SL_MASTER_AUTOCACHE_OFF;
    d.compute_us_per_sample = json_number_value(json_object_get(j, "compute_us_per_sample"));
    d.cache_us_per_sample = json_number_value(json_object_get(j, "cache_us_per_sample"));
    d.read_mb_per_s = json_number_value(json_object_get(j, "read_mb_per_s"));
    d.source_mb_per_s = json_number_value(json_object_get(j, "source_mb_per_s"));
    json_int_t n = json_integer_value(json_object_get(j, "samples"));
    d.samples = n > 0 ? (uint64_t)n : 0;
    json_decref(j);
    if (d.state == SL_MASTER_AUTOCACHE_OFF) return false; /* not a decision of ours */
    *out = d;
    return true;
}

sl_err_t sl_master_autocache_store(sl_master_autocache_t *c, uint64_t fp,
                                   const sl_master_autocache_decision_t *d, sl_error_t *err)
{
    char dir[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX];
    if (!decision_path(c, fp, dir, sizeof dir, true) ||
        !decision_path(c, fp, path, sizeof path, false) ||
        (size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return sl_error_set(err, SL_ERR_INVALID, "--cache-dir %s: path too long", c->dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return sl_error_set(err, SL_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    json_t *j =
        json_pack("{s:s, s:f, s:f, s:I, s:f, s:f, s:f}", "state",
                  sl_master_autocache_state_name(d->state), "compute_us_per_sample",
                  d->compute_us_per_sample, "cache_us_per_sample", d->cache_us_per_sample,
                  "samples", (json_int_t)d->samples, "read_mb_per_s", d->read_mb_per_s,
                  "source_mb_per_s", d->source_mb_per_s, "margin", SL_MASTER_AUTOCACHE_MARGIN);
    char text[1024];
    size_t len = j != NULL ? json_dumpb(j, text, sizeof text, JSON_COMPACT) : 0;
    json_decref(j);
    if (len == 0 || len > sizeof text) return sl_error_set(err, SL_ERR_NOMEM, "autocache decision");
    sl_err_t rc = sl_io_replace_file(path, tmp, text, len, "\n", 1, true, err);
    if (rc == SL_OK) rc = sl_io_sync_dir(dir, err);
    return rc;
}

static bool is_cache_file(const char *name)
{
    size_t n = strlen(name), e = strlen(SL_WH_FILE_EXT);
    return strncmp(name, "split-", 6) == 0 && n > e && strcmp(name + n - e, SL_WH_FILE_EXT) == 0;
}

void sl_master_autocache_drop(sl_master_autocache_t *c, uint64_t fp)
{
    char sub[PATH_MAX], path[PATH_MAX];
    if (!decision_path(c, fp, sub, sizeof sub, true)) return;
    DIR *d = opendir(sub);
    if (d == NULL) return;
    struct dirent *f;
    uint64_t n = 0;
    while ((f = readdir(d)) != NULL)
        if (is_cache_file(f->d_name) &&
            (size_t)snprintf(path, sizeof path, "%s/%s", sub, f->d_name) < sizeof path &&
            unlink(path) == 0)
            n++;
    closedir(d);
    sl_log_kv(SL_LOG_INFO, SL_EV(CACHE_DROPPED), (SL_KV_STR("dir", sub), SL_KV_U64("files", n)),
              "%s: %" PRIu64 " cache files removed (declined)", sub, n);
}

/* ---- eviction ---- */

typedef struct cfile {
    char *path;
    uint64_t bytes;
    int64_t mtime_ns;
} cfile_t;

static int by_age(const void *x, const void *y)
{
    const cfile_t *a = x, *b = y;
    return a->mtime_ns < b->mtime_ns ? -1 : a->mtime_ns > b->mtime_ns;
}

void sl_master_autocache_evict(sl_master_autocache_t *c, uint64_t now_ms, uint64_t min_interval_ms)
{
    if (min_interval_ms && c->scanned && now_ms - c->scanned_ms < min_interval_ms) return;
    c->scanned = true;
    c->scanned_ms = now_ms;
    DIR *top = opendir(c->dir);
    if (top == NULL) return;
    cfile_t *files = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    struct dirent *e;
    char sub[PATH_MAX], path[PATH_MAX];
    while ((e = readdir(top)) != NULL) {
        if (strlen(e->d_name) != 16 || strspn(e->d_name, "0123456789abcdef") != 16) continue;
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", c->dir, e->d_name) >= sizeof sub) continue;
        DIR *d = opendir(sub);
        if (d == NULL) continue;
        struct dirent *f;
        while ((f = readdir(d)) != NULL) {
            struct stat st;
            if (!is_cache_file(f->d_name) ||
                (size_t)snprintf(path, sizeof path, "%s/%s", sub, f->d_name) >= sizeof path ||
                stat(path, &st) != 0)
                continue;
            if (n == cap && !SL_GROW(c->a, files, cap, n + 1, 64)) break;
            char *p = sl_strdup(c->a, path);
            if (p == NULL) break;
            files[n++] = (cfile_t){p, (uint64_t)st.st_size,
                                   (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
            total += (uint64_t)st.st_size;
        }
        closedir(d);
    }
    closedir(top);
    if (total > c->max_bytes && n > 0) qsort(files, n, sizeof *files, by_age);
    uint64_t left = n;
    for (size_t i = 0; i < n && total > c->max_bytes; i++) {
        if (unlink(files[i].path) != 0) continue;
        total -= files[i].bytes;
        left--;
        c->evicted_files++;
        c->evicted_bytes += files[i].bytes;
        sl_log_kv(SL_LOG_INFO, SL_EV(CACHE_EVICTED),
                  (SL_KV_STR("file", files[i].path), SL_KV_U64("bytes", files[i].bytes)),
                  "cache file %s evicted (least recently used)", files[i].path);
    }
    for (size_t i = 0; i < n; i++)
        sl_strfree(c->a, files[i].path);
    if (files) sl_free(c->a, files, cap * sizeof *files);
    c->bytes = total;
    c->files = left;
}

/* The master's journal and snapshot files: byte layout, torn-tail recovery,
 * buffered appends with group-commit fdatasync, and compaction by atomic
 * replacement. See journal.h for the format and the recovery rules. */
#include "common/clock.h"
#include "common/err.h"
#include "common/fileio.h"
#include "common/lock.h"
#include "common/mem.h"
#include "dpp/master/journal/journal_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <fiu-local.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

/* From a fast local SSD (well under 1 ms) to a disk in trouble (seconds):
 * group commit makes every trainer commit wait for one of these. */
const double SL_MASTER_JOURNAL_SYNC_BOUNDS[SL_MASTER_JOURNAL_SYNC_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5};

static uint64_t record_sum(const uint8_t *payload, uint32_t len)
{
    return XXH3_64bits_withSeed(payload, len, len);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0) return false;
    return true;
}

sl_err_t sl_master_journal_scan(const void *buf, size_t len, const char *name, size_t max_record,
                                sl_master_journal_record_fn fn, void *ctx,
                                sl_master_journal_scan_t *out, sl_error_t *err)
{
    const uint8_t *p = buf;
    memset(out, 0, sizeof *out);
    if (max_record == 0) max_record = SL_MASTER_JOURNAL_MAX_RECORD;
    if (len < 4 || memcmp(p, SL_MASTER_JOURNAL_MAGIC, 4) != 0)
        return sl_error_set(
            err, len < 4 ? SL_ERR_TRUNCATED : SL_ERR_CORRUPT,
            "%s: not a master journal (magic is not \"" SL_MASTER_JOURNAL_MAGIC "\")", name);
    if (len < SL_MASTER_JOURNAL_HEADER_BYTES)
        return sl_error_set(err, SL_ERR_TRUNCATED, "%s: header truncated (%zu bytes)", name, len);
    uint32_t version = sl_le_get_u32(p + 4);
    if (version != SL_MASTER_JOURNAL_VERSION)
        return sl_error_set(err, SL_ERR_VERSION, "%s: journal version %u (this build reads %d)",
                            name, version, SL_MASTER_JOURNAL_VERSION);
    out->generation = sl_le_get_u64(p + 8);
    size_t off = SL_MASTER_JOURNAL_HEADER_BYTES;
    while (off < len) {
        size_t rem = len - off;
        const char *why;
        if (rem < SL_MASTER_JOURNAL_RECORD_HEADER_BYTES) {
            why = "record header cut short"; /* reaches the end: torn */
            goto bad;
        }
        uint32_t rlen = sl_le_get_u32(p + off), check = sl_le_get_u32(p + off + 4);
        if (check != ~rlen) {
            why = "length check mismatch";
            goto bad;
        }
        if (rlen > max_record) {
            why = "length exceeds the record bound";
            goto bad;
        }
        if (rlen > rem - SL_MASTER_JOURNAL_RECORD_HEADER_BYTES) {
            why = "record runs past the end of the file"; /* torn */
            goto bad;
        }
        const uint8_t *payload = p + off + SL_MASTER_JOURNAL_RECORD_HEADER_BYTES;
        if (record_sum(payload, rlen) != sl_le_get_u64(p + off + 8)) {
            why = "checksum mismatch";
            goto bad;
        }
        if (fn != NULL) {
            SL_FORWARD_IF_ERROR(fn(ctx, payload, rlen, off, err));
        }
        out->records++;
        off += SL_MASTER_JOURNAL_RECORD_HEADER_BYTES + (size_t)rlen;
        continue;
    bad:;
        /* Torn: the bad record reaches the end of the file, or only zero
         * bytes follow its start (space the crash allocated but never
         * filled). Anything else is damage to data that was once written
         * whole, and guessing past it could resurrect a state that never
         * existed. */
        uint64_t end = off + (uint64_t)SL_MASTER_JOURNAL_RECORD_HEADER_BYTES;
        if (rem >= SL_MASTER_JOURNAL_RECORD_HEADER_BYTES) end += sl_le_get_u32(p + off);
        bool torn = all_zero(p + off, rem) ||
                    (end >= len && rem >= SL_MASTER_JOURNAL_RECORD_HEADER_BYTES &&
                     sl_le_get_u32(p + off + 4) == ~sl_le_get_u32(p + off) &&
                     sl_le_get_u32(p + off) <= max_record) ||
                    rem < SL_MASTER_JOURNAL_RECORD_HEADER_BYTES;
        if (!torn)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "%s: record at offset %zu: %s (%zu bytes follow; refusing to "
                                "guess past damage in the middle of the journal)",
                                name, off, why, rem);
        out->valid_bytes = off;
        out->torn = true;
        return SL_OK;
    }
    out->valid_bytes = len;
    return SL_OK;
}

void mj_journal_header(uint8_t head[SL_MASTER_JOURNAL_HEADER_BYTES], uint64_t gen)
{
    memcpy(head, SL_MASTER_JOURNAL_MAGIC, 4);
    sl_le_put_u32(head + 4, SL_MASTER_JOURNAL_VERSION);
    sl_le_put_u64(head + 8, gen);
}

void mj_snapshot_header(uint8_t head[SL_MASTER_SNAPSHOT_HEADER_BYTES], uint64_t gen,
                        const void *payload, size_t len)
{
    memcpy(head, SL_MASTER_SNAPSHOT_MAGIC, 4);
    sl_le_put_u32(head + 4, SL_MASTER_JOURNAL_VERSION);
    sl_le_put_u64(head + 8, gen);
    sl_le_put_u64(head + 16, len);
    sl_le_put_u64(head + 24, XXH3_64bits(payload, len));
}

sl_err_t sl_master_journal_snapshot_parse(const void *buf, size_t len, const char *name,
                                          size_t max_bytes, uint64_t *generation,
                                          const uint8_t **payload, size_t *payload_len,
                                          sl_error_t *err)
{
    const uint8_t *p = buf;
    if (len < 4 || memcmp(p, SL_MASTER_SNAPSHOT_MAGIC, 4) != 0)
        return sl_error_set(
            err, len < 4 ? SL_ERR_TRUNCATED : SL_ERR_CORRUPT,
            "%s: not a master snapshot (magic is not \"" SL_MASTER_SNAPSHOT_MAGIC "\")", name);
    if (len < SL_MASTER_SNAPSHOT_HEADER_BYTES)
        return sl_error_set(err, SL_ERR_TRUNCATED, "%s: header truncated (%zu bytes)", name, len);
    uint32_t version = sl_le_get_u32(p + 4);
    if (version != SL_MASTER_JOURNAL_VERSION)
        return sl_error_set(err, SL_ERR_VERSION, "%s: snapshot version %u (this build reads %d)",
                            name, version, SL_MASTER_JOURNAL_VERSION);
    uint64_t n = sl_le_get_u64(p + 16);
    if (max_bytes != 0 && n > max_bytes)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s: payload of %llu bytes exceeds %zu", name,
                            (unsigned long long)n, max_bytes);
    if (n != len - SL_MASTER_SNAPSHOT_HEADER_BYTES)
        return sl_error_set(
            err, n > len - SL_MASTER_SNAPSHOT_HEADER_BYTES ? SL_ERR_TRUNCATED : SL_ERR_CORRUPT,
            "%s: header says %llu payload bytes, file has %zu", name, (unsigned long long)n,
            len - SL_MASTER_SNAPSHOT_HEADER_BYTES);
    if (XXH3_64bits(p + SL_MASTER_SNAPSHOT_HEADER_BYTES, (size_t)n) != sl_le_get_u64(p + 24))
        return sl_error_set(err, SL_ERR_CORRUPT, "%s: checksum mismatch", name);
    *generation = sl_le_get_u64(p + 8);
    *payload = p + SL_MASTER_SNAPSHOT_HEADER_BYTES;
    *payload_len = (size_t)n;
    return SL_OK;
}

/* ---- files ---------------------------------------------------------------------- */

/* A storage fault injected at point name (libfiu, enabled by tests with
 * fiu_enable; the failinfo is the errno to fail with, EIO when NULL): the
 * points are sluice/journal/write, sluice/journal/fdatasync,
 * sluice/journal/rename (a snapshot or a fresh journal put in place) and
 * sluice/journal/rename_next (a background compaction's journal.next put
 * in place, after its snapshot). */
bool mj_injected(const char *name)
{
    if (!fiu_fail(name)) return false;
    void *info = fiu_failinfo();
    errno = info != NULL ? (int)(intptr_t)info : EIO;
    return true;
}

/* Write header + payload to path.tmp, fsync, rename over path, fsync dir. */
sl_err_t mj_write_atomic(const sl_master_journal_t *j, const char *path, const uint8_t *head,
                         size_t head_len, const void *payload, size_t len, sl_error_t *err)
{
    if (mj_injected("sluice/journal/rename"))
        return sl_error_set(err, SL_ERR_IO, "rename %s: %s", path, strerror(errno));
    char *tmp = sl_strfmt(j->a, "%s/tmp", j->dir);
    if (tmp == NULL) return sl_error_set(err, SL_ERR_NOMEM, "write %s", path);
    sl_err_t rc = sl_io_replace_file(path, tmp, head, head_len, payload, len, true, err);
    if (rc == SL_OK) rc = sl_io_sync_dir(j->dir, err);
    sl_strfree(j->a, tmp);
    return rc;
}

/* A fresh, empty journal of generation gen, opened for appending. */
static sl_err_t journal_create(sl_master_journal_t *j, uint64_t gen, sl_error_t *err)
{
    uint8_t head[SL_MASTER_JOURNAL_HEADER_BYTES];
    mj_journal_header(head, gen);
    SL_FORWARD_IF_ERROR(mj_write_atomic(j, j->path, head, sizeof head, NULL, 0, err));
    int fd = open(j->path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return sl_error_set(err, SL_ERR_IO, "open %s: %s", j->path, strerror(errno));
    if (j->fd >= 0) close(j->fd);
    j->fd = fd;
    j->generation = gen;
    j->file_bytes = SL_MASTER_JOURNAL_HEADER_BYTES;
    return SL_OK;
}

void sl_master_journal_close(sl_master_journal_t *j)
{
    if (j == NULL) return;
    sl_master_journal_compact_wait(j);
    mj_free_kept(j);
    sl_free(j->a, j->kept, j->kept_cap * sizeof *j->kept);
    if (j->fd >= 0) close(j->fd);
    sl_strfree(j->a, j->dir);
    sl_strfree(j->a, j->path);
    sl_strfree(j->a, j->snap_path);
    sl_free(j->a, j->buf, j->cap);
    sl_free(j->a, j->spare, j->spare_cap);
    for (size_t k = 0; k < j->nsealed; k++)
        sl_free(j->a, j->sealed[k].p, j->sealed[k].cap);
    sl_free(j->a, j->sealed, j->sealed_cap * sizeof *j->sealed);
    sl_mutex_destroy(&j->io_mu);
    sl_mutex_destroy(&j->q_mu);
    sl_free(j->a, j, sizeof *j);
}

sl_err_t sl_master_journal_open(const char *dir, const sl_allocator_t *a, size_t max_record,
                                sl_err_t (*snapshot_fn)(void *ctx, const uint8_t *payload,
                                                        size_t len, sl_error_t *err),
                                sl_master_journal_record_fn record_fn, void *ctx,
                                sl_master_journal_t **out, sl_master_journal_open_info_t *info,
                                sl_error_t *err)
{
    *out = NULL;
    sl_master_journal_open_info_t scratch;
    if (info == NULL) info = &scratch;
    memset(info, 0, sizeof *info);
    if (a == NULL) a = sl_allocator_default();
    if (max_record == 0) max_record = SL_MASTER_JOURNAL_MAX_RECORD;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return sl_error_set(err, SL_ERR_IO, "create state directory %s: %s", dir, strerror(errno));
    sl_master_journal_t *j = sl_calloc(a, 1, sizeof *j);
    if (j == NULL) return sl_error_set(err, SL_ERR_NOMEM, "open journal in %s", dir);
    j->a = a;
    j->fd = -1;
    j->max_record = max_record;
    sl_mutex_init(&j->io_mu);
    sl_mutex_init(&j->q_mu);
    const char *delay = getenv("SLUICE_JOURNAL_SYNC_DELAY_US");
    if (delay != NULL) j->sync_delay_us = strtoull(delay, NULL, 10);
    j->dir = sl_strdup(a, dir);
    j->path = sl_strfmt(a, "%s/%s", dir, SL_MASTER_JOURNAL_FILE);
    j->snap_path = sl_strfmt(a, "%s/%s", dir, SL_MASTER_SNAPSHOT_FILE);
    /* The first buffer and room for sealed ones now: the first records
     * and sync after open (the state's Opened record) allocate nothing. */
    j->buf = sl_alloc(a, SL_MASTER_JOURNAL_BUFFER);
    j->cap = j->buf != NULL ? SL_MASTER_JOURNAL_BUFFER : 0;
    j->sealed = sl_alloc(a, 8 * sizeof *j->sealed);
    j->sealed_cap = j->sealed != NULL ? 8 : 0;
    if (j->dir == NULL || j->path == NULL || j->snap_path == NULL || j->buf == NULL ||
        j->sealed == NULL) {
        sl_master_journal_close(j);
        return sl_error_set(err, SL_ERR_NOMEM, "open journal in %s", dir);
    }

    /* The snapshot first: the journal's records apply on top of it. */
    sl_io_map_t map;
    uint64_t snap_gen = 0;
    sl_err_t rc = sl_io_map_file(j->snap_path, "snapshot", &map, err);
    if (rc == SL_OK) {
        const uint8_t *payload;
        size_t plen;
        rc = sl_master_journal_snapshot_parse(map.data, map.len, j->snap_path, 0, &snap_gen,
                                              &payload, &plen, err);
        if (rc == SL_OK && snapshot_fn != NULL) {
            rc = snapshot_fn(ctx, payload, plen, err);
            if (rc != SL_OK) sl_error_prefix(err, "%s: ", j->snap_path);
        }
        sl_io_unmap(&map);
        if (rc != SL_OK) goto fail;
        info->had_snapshot = true;
    } else if (rc != SL_ERR_NOT_FOUND) {
        goto fail;
    }

    rc = mj_adopt_next(j, info->had_snapshot, snap_gen, err);
    if (rc != SL_OK) goto fail;
    rc = sl_io_map_file(j->path, "journal", &map, err);
    if (rc == SL_ERR_NOT_FOUND) {
        if (info->had_snapshot) {
            /* Compaction crashed after the snapshot's rename, before the new
             * journal's: the snapshot holds everything. */
            info->discarded_old = true;
        }
        rc = journal_create(j, snap_gen, err);
        if (rc != SL_OK) goto fail;
        info->generation = snap_gen;
        *out = j;
        return SL_OK;
    }
    if (rc != SL_OK) goto fail;
    sl_master_journal_scan_t scan;
    /* Header first, without callbacks, to compare generations. */
    rc = sl_master_journal_scan(
        map.data,
        map.len < SL_MASTER_JOURNAL_HEADER_BYTES ? map.len : SL_MASTER_JOURNAL_HEADER_BYTES,
        j->path, max_record, NULL, NULL, &scan, err);
    if (rc != SL_OK) {
        sl_io_unmap(&map);
        goto fail;
    }
    if (scan.generation < snap_gen) {
        sl_io_unmap(&map);
        info->discarded_old = true;
        rc = journal_create(j, snap_gen, err);
        if (rc != SL_OK) goto fail;
        info->generation = snap_gen;
        *out = j;
        return SL_OK;
    }
    if (scan.generation > snap_gen) {
        sl_io_unmap(&map);
        rc = sl_error_set(err, SL_ERR_CORRUPT,
                          "%s: journal generation %llu is newer than the snapshot's (%llu%s): "
                          "the snapshot it continues is missing",
                          j->path, (unsigned long long)scan.generation,
                          (unsigned long long)snap_gen, info->had_snapshot ? "" : ", none found");
        goto fail;
    }
    size_t len = map.len;
    rc = sl_master_journal_scan(map.data, len, j->path, max_record, record_fn, ctx, &scan, err);
    sl_io_unmap(&map);
    if (rc != SL_OK) goto fail;
    info->generation = scan.generation;
    info->records = scan.records;
    j->generation = scan.generation;
    if (scan.torn) {
        info->truncated = true;
        info->truncated_at = scan.valid_bytes;
        info->truncated_bytes = len - scan.valid_bytes;
        snprintf(info->warning, sizeof info->warning,
                 "%s: cut a torn last record at offset %llu (%llu bytes): a write the last "
                 "crash interrupted",
                 j->path, (unsigned long long)scan.valid_bytes,
                 (unsigned long long)(len - scan.valid_bytes));
        if (truncate(j->path, (off_t)scan.valid_bytes) != 0) {
            rc = sl_error_set(err, SL_ERR_IO, "truncate %s: %s", j->path, strerror(errno));
            goto fail;
        }
    }
    j->fd = open(j->path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (j->fd < 0) {
        rc = sl_error_set(err, SL_ERR_IO, "open %s: %s", j->path, strerror(errno));
        goto fail;
    }
    if (scan.torn && fdatasync(j->fd) != 0) {
        rc = sl_error_set(err, SL_ERR_IO, "fdatasync %s: %s", j->path, strerror(errno));
        goto fail;
    }
    j->file_bytes = scan.valid_bytes;
    *out = j;
    return SL_OK;
fail:
    sl_master_journal_close(j);
    return rc;
}

/* Room for more bytes in buf (the spare first, then a bigger one). */
static bool reserve(sl_master_journal_t *j, size_t more)
{
    if (j->buffered + more <= j->cap) return true;
    size_t cap = j->cap ? j->cap : SL_MASTER_JOURNAL_BUFFER;
    while (cap < j->buffered + more)
        cap *= 2;
    uint8_t *p = NULL;
    if (j->buffered == 0) {
        sl_mutex_lock(&j->q_mu);
        if (j->spare != NULL && j->spare_cap >= cap) {
            p = j->spare, cap = j->spare_cap;
            j->spare = NULL, j->spare_cap = 0;
        }
        sl_mutex_unlock(&j->q_mu);
    }
    if (p == NULL) p = sl_alloc(j->a, cap);
    if (p == NULL) return false;
    if (j->buffered > 0) memcpy(p, j->buf, j->buffered);
    sl_free(j->a, j->buf, j->cap);
    j->buf = p;
    j->cap = cap;
    return true;
}

sl_err_t sl_master_journal_append(sl_master_journal_t *j, const void *payload, size_t len,
                                  sl_error_t *err)
{
    if (len > j->max_record)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s: record of %zu bytes exceeds %zu", j->path,
                            len, j->max_record);
    size_t total = SL_MASTER_JOURNAL_RECORD_HEADER_BYTES + len;
    if (!reserve(j, total))
        return sl_error_set(err, SL_ERR_NOMEM, "%s: record of %zu bytes", j->path, len);
    uint8_t *head = j->buf + j->buffered;
    sl_le_put_u32(head, (uint32_t)len);
    sl_le_put_u32(head + 4, ~(uint32_t)len);
    sl_le_put_u64(head + 8, record_sum(payload, (uint32_t)len));
    if (len > 0) memcpy(head + SL_MASTER_JOURNAL_RECORD_HEADER_BYTES, payload, len);
    j->buffered += total;
    sl_mutex_lock(&j->q_mu);
    j->appended += total;
    sl_mutex_unlock(&j->q_mu);
    return SL_OK;
}

/* Move buf to the sealed chunks (under the owner's lock). */
sl_err_t mj_seal(sl_master_journal_t *j, sl_error_t *err)
{
    if (j->buffered == 0) return SL_OK;
    sl_mutex_lock(&j->q_mu);
    if (j->nsealed == j->sealed_cap) {
        size_t cap = j->sealed_cap ? 2 * j->sealed_cap : 8;
        struct chunk *c = sl_alloc(j->a, cap * sizeof *c);
        if (c == NULL) {
            sl_mutex_unlock(&j->q_mu);
            return sl_error_set(err, SL_ERR_NOMEM, "%s: sync", j->path);
        }
        if (j->nsealed > 0) memcpy(c, j->sealed, j->nsealed * sizeof *c);
        sl_free(j->a, j->sealed, j->sealed_cap * sizeof *c);
        j->sealed = c;
        j->sealed_cap = cap;
    }
    j->sealed[j->nsealed++] = (struct chunk){j->buf, j->buffered, j->cap, j->sealed_end};
    j->sealed_bytes += j->buffered;
    j->sealed_end += j->buffered;
    sl_mutex_unlock(&j->q_mu);
    j->buf = NULL;
    j->buffered = j->cap = 0;
    return SL_OK;
}

sl_err_t sl_master_journal_sync_begin(sl_master_journal_t *j, uint64_t *ticket, sl_error_t *err)
{
    sl_err_t rc = mj_seal(j, err);
    sl_mutex_lock(&j->q_mu);
    *ticket = j->sealed_end;
    sl_mutex_unlock(&j->q_mu);
    return rc;
}

static void wait_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Write every sealed chunk to the file, in order (io_mu held). A failure
 * breaks the journal: what the chunks held may be half written. */
sl_err_t mj_write_sealed(sl_master_journal_t *j, uint64_t *end, sl_error_t *err)
    SL_REQUIRES(j->io_mu)
{
    for (;;) {
        sl_mutex_lock(&j->q_mu);
        if (j->broken) {
            sl_mutex_unlock(&j->q_mu);
            return sl_error_set(err, SL_ERR_IO, "%s", j->broken_msg);
        }
        if (j->nsealed == 0) {
            *end = j->sealed_end;
            sl_mutex_unlock(&j->q_mu);
            return SL_OK;
        }
        struct chunk c = j->sealed[0];
        memmove(j->sealed, j->sealed + 1, (j->nsealed - 1) * sizeof *j->sealed);
        j->nsealed--;
        sl_mutex_unlock(&j->q_mu);
        sl_err_t rc = mj_injected("sluice/journal/write")
                          ? sl_error_set(err, SL_ERR_IO, "write %s: %s", j->path, strerror(errno))
                          : sl_io_write_all(j->fd, c.p, c.len, j->path, err);
        sl_mutex_lock(&j->q_mu);
        if (rc == SL_OK) {
            j->file_bytes += c.len;
            j->sealed_bytes -= c.len;
            if (j->compacting && c.start >= j->boundary && mj_keep(j, &c)) c.p = NULL;
        } else {
            j->broken = true;
            snprintf(j->broken_msg, sizeof j->broken_msg, "%s", err != NULL ? err->msg : "write");
        }
        /* keep one buffer of the usual size for the next appends */
        if (rc == SL_OK && j->spare == NULL && c.cap <= 4 * SL_MASTER_JOURNAL_BUFFER) {
            j->spare = c.p, j->spare_cap = c.cap;
            c.p = NULL;
        }
        sl_mutex_unlock(&j->q_mu);
        if (c.p != NULL) sl_free(j->a, c.p, c.cap);
        if (rc != SL_OK) return rc;
    }
}

sl_err_t sl_master_journal_sync_wait(sl_master_journal_t *j, uint64_t ticket, sl_error_t *err)
{
    sl_mutex_lock(&j->io_mu);
    sl_mutex_lock(&j->q_mu);
    bool done = j->durable >= ticket && !j->broken;
    sl_mutex_unlock(&j->q_mu);
    if (done) { /* another sync made it durable meanwhile */
        sl_mutex_unlock(&j->io_mu);
        return SL_OK;
    }
    double t0 = sl_clock_s();
    uint64_t end = 0;
    sl_err_t rc = mj_write_sealed(j, &end, err);
    if (rc == SL_OK && j->sync_delay_us > 0) wait_us(j->sync_delay_us);
    if (rc == SL_OK && (mj_injected("sluice/journal/fdatasync") || fdatasync(j->fd) != 0)) {
        rc = sl_error_set(err, SL_ERR_IO, "fdatasync %s: %s", j->path, strerror(errno));
        sl_mutex_lock(&j->q_mu);
        j->broken = true;
        snprintf(j->broken_msg, sizeof j->broken_msg, "%s", err != NULL ? err->msg : "fdatasync");
        sl_mutex_unlock(&j->q_mu);
    }
    if (rc == SL_OK) {
        double took = sl_clock_s() - t0;
        int b = 0;
        while (b < SL_MASTER_JOURNAL_SYNC_BUCKETS && took > SL_MASTER_JOURNAL_SYNC_BOUNDS[b])
            b++;
        sl_mutex_lock(&j->q_mu);
        if (end > j->durable) j->durable = end;
        j->syncs++;
        j->sync_hist.count[b]++;
        j->sync_hist.sum_s += took;
        sl_mutex_unlock(&j->q_mu);
    }
    sl_mutex_unlock(&j->io_mu);
    return rc;
}

sl_err_t sl_master_journal_sync(sl_master_journal_t *j, sl_error_t *err)
{
    uint64_t ticket;
    sl_err_t rc = sl_master_journal_sync_begin(j, &ticket, err);
    return rc == SL_OK ? sl_master_journal_sync_wait(j, ticket, err) : rc;
}

uint64_t sl_master_journal_size(sl_master_journal_t *j)
{
    sl_mutex_lock(&j->q_mu);
    uint64_t n = j->file_bytes + j->sealed_bytes;
    sl_mutex_unlock(&j->q_mu);
    return n + j->buffered;
}

uint64_t sl_master_journal_syncs(sl_master_journal_t *j)
{
    sl_mutex_lock(&j->q_mu);
    uint64_t n = j->syncs;
    sl_mutex_unlock(&j->q_mu);
    return n;
}

void sl_master_journal_sync_hist(sl_master_journal_t *j, sl_master_journal_sync_hist_t *out)
{
    if (j == NULL) {
        memset(out, 0, sizeof *out);
        return;
    }
    sl_mutex_lock(&j->q_mu);
    *out = j->sync_hist;
    sl_mutex_unlock(&j->q_mu);
}

sl_err_t sl_master_journal_compact(sl_master_journal_t *j, const void *payload, size_t len,
                                   sl_error_t *err)
{
    sl_master_journal_compact_wait(j); /* one compaction at a time */
    /* Everything appended goes to the old journal first: should the
     * snapshot fail, the journal alone still holds everything. */
    sl_err_t rc = mj_seal(j, err);
    if (rc != SL_OK) return rc;
    sl_mutex_lock(&j->io_mu);
    uint64_t end = 0;
    rc = mj_write_sealed(j, &end, err);
    uint64_t gen = j->generation + 1;
    uint8_t head[SL_MASTER_SNAPSHOT_HEADER_BYTES];
    mj_snapshot_header(head, gen, payload, len);
    if (rc == SL_OK) rc = mj_write_atomic(j, j->snap_path, head, sizeof head, payload, len, err);
    if (rc == SL_OK) rc = journal_create(j, gen, err);
    if (rc == SL_OK) {
        /* the snapshot holds every record appended: all of it is durable */
        sl_mutex_lock(&j->q_mu);
        j->durable = end;
        j->syncs++;
        sl_mutex_unlock(&j->q_mu);
    }
    sl_mutex_unlock(&j->io_mu);
    return rc;
}

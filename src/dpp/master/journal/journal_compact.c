/* The master's journal compacted in the background (journal.h,
 * sl_master_journal_compact_start): a thread writes the snapshot with no
 * lock held, then puts it and the next generation's journal in place; and
 * the open-time rule for a journal.next left between the two renames. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/mem.h"
#include "dpp/master/journal/journal_internal.h"

/* Keep chunk c for the journal a background compaction will start
 * (q_mu and io_mu held). @return false without room: the compaction is
 * then abandoned (kept_lost), never finished without the chunk. */
bool mj_keep(sl_master_journal_t *j, const struct chunk *c)
{
    if (j->nkept == j->kept_cap) {
        size_t cap = j->kept_cap ? 2 * j->kept_cap : 8;
        struct chunk *k = sl_alloc(j->a, cap * sizeof *k);
        if (k == NULL) {
            j->kept_lost = true;
            return false;
        }
        if (j->nkept > 0) memcpy(k, j->kept, j->nkept * sizeof *k);
        sl_free(j->a, j->kept, j->kept_cap * sizeof *k);
        j->kept = k;
        j->kept_cap = cap;
    }
    j->kept[j->nkept++] = *c;
    return true;
}

/* ---- compaction in the background -------------------------------------------------- */

#define NEXT_FILE "journal.next"
#define SNAP_TMP_FILE "snapshot.tmp"

static char *dir_file(const sl_master_journal_t *j, const char *name)
{
    return sl_strfmt(j->a, "%s/%s", j->dir, name);
}

void mj_free_kept(sl_master_journal_t *j)
{
    for (size_t k = 0; k < j->nkept; k++)
        sl_free(j->a, j->kept[k].p, j->kept[k].cap);
    j->nkept = 0;
    j->kept_lost = false;
}

/* Put the new generation in place (io_mu held): every sealed chunk to the
 * old journal first (the ones below the boundary are the snapshot's,
 * those past it are kept), then journal.next of generation gen with the
 * kept chunks, fdatasynced; then snapshot.tmp renamed over the snapshot
 * and journal.next over the journal, each followed by an fsync of the
 * directory. A crash between the two renames leaves a snapshot of gen
 * beside journal.next of gen, which open puts in place (so every record
 * past the boundary, durable in the old journal, is in the new one). */
static sl_err_t compaction_switch(sl_master_journal_t *j, uint64_t gen, sl_error_t *err)
    SL_REQUIRES(j->io_mu)
{
    uint64_t end = 0;
    sl_err_t rc = mj_write_sealed(j, &end, err);
    sl_mutex_lock(&j->q_mu);
    bool lost = j->kept_lost;
    sl_mutex_unlock(&j->q_mu);
    if (rc == SL_OK && lost) rc = sl_error_set(err, SL_ERR_NOMEM, "%s: compaction", j->path);
    char *next = dir_file(j, NEXT_FILE), *snap_tmp = dir_file(j, SNAP_TMP_FILE);
    if (rc == SL_OK && (next == NULL || snap_tmp == NULL))
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: compaction", j->path);
    uint8_t head[SL_MASTER_JOURNAL_HEADER_BYTES];
    mj_journal_header(head, gen);
    int nfd = -1;
    uint64_t bytes = sizeof head;
    if (rc == SL_OK) rc = mj_write_atomic(j, next, head, sizeof head, NULL, 0, err);
    /* only a journal.next made here may be removed here: one left by an
     * earlier compaction that broke between its renames is the journal */
    bool made_next = rc == SL_OK;
    if (rc == SL_OK && (nfd = open(next, O_WRONLY | O_APPEND | O_CLOEXEC)) < 0)
        rc = sl_error_set(err, SL_ERR_IO, "open %s: %s", next, strerror(errno));
    for (size_t k = 0; rc == SL_OK && k < j->nkept; k++) {
        rc = sl_io_write_all(nfd, j->kept[k].p, j->kept[k].len, next, err);
        bytes += j->kept[k].len;
    }
    if (rc == SL_OK && fdatasync(nfd) != 0)
        rc = sl_error_set(err, SL_ERR_IO, "fdatasync %s: %s", next, strerror(errno));
    bool snapped = false;
    if (rc == SL_OK && mj_injected("sluice/journal/rename"))
        rc = sl_error_set(err, SL_ERR_IO, "rename %s: %s", snap_tmp, strerror(errno));
    if (rc == SL_OK && rename(snap_tmp, j->snap_path) != 0)
        rc = sl_error_set(err, SL_ERR_IO, "rename %s: %s", snap_tmp, strerror(errno));
    if (rc == SL_OK) rc = sl_io_sync_dir(j->dir, err);
    snapped = rc == SL_OK;
    if (rc == SL_OK && mj_injected("sluice/journal/rename_next"))
        rc = sl_error_set(err, SL_ERR_IO, "rename %s: %s", next, strerror(errno));
    if (rc == SL_OK && rename(next, j->path) != 0)
        rc = sl_error_set(err, SL_ERR_IO, "rename %s: %s", next, strerror(errno));
    if (rc == SL_OK) rc = sl_io_sync_dir(j->dir, err);
    if (rc == SL_OK) {
        close(j->fd);
        j->fd = nfd;
        nfd = -1;
        sl_mutex_lock(&j->q_mu);
        j->generation = gen;
        j->file_bytes = bytes;
        if (end > j->durable) j->durable = end; /* in the snapshot or the new journal */
        sl_mutex_unlock(&j->q_mu);
    } else if (snapped) {
        /* the snapshot of gen is in place, the journal not: open finds
         * journal.next beside it; this run can promise nothing more */
        sl_mutex_lock(&j->q_mu);
        j->broken = true;
        snprintf(j->broken_msg, sizeof j->broken_msg, "%s", err != NULL ? err->msg : "compaction");
        sl_mutex_unlock(&j->q_mu);
    } else {
        /* nothing changed: the old journal holds everything */
        if (made_next) unlink(next);
        if (snap_tmp != NULL) unlink(snap_tmp);
    }
    if (nfd >= 0) close(nfd);
    sl_strfree(j->a, next);
    sl_strfree(j->a, snap_tmp);
    return rc;
}

static void *compactor(void *arg)
{
    sl_master_journal_t *j = arg;
    sl_error_t err = {0};
    sl_mutex_lock(&j->q_mu);
    uint64_t gen = j->generation + 1;
    sl_master_journal_snapshot_src_t src = j->src;
    sl_mutex_unlock(&j->q_mu);
    /* The snapshot of generation gen, encoded, written and fsynced beside
     * the files in use (the long part: no lock held). */
    uint8_t *payload = NULL;
    size_t len = 0;
    sl_err_t rc = src.encode(src.ctx, &payload, &len, &err);
    src.release(src.ctx);
    uint8_t head[SL_MASTER_SNAPSHOT_HEADER_BYTES];
    mj_snapshot_header(head, gen, payload, len);
    char *snap_tmp = dir_file(j, SNAP_TMP_FILE), *part = dir_file(j, SNAP_TMP_FILE ".part");
    if (rc == SL_OK)
        rc = snap_tmp == NULL || part == NULL
                 ? sl_error_set(&err, SL_ERR_NOMEM, "%s: compaction", j->path)
                 : sl_io_replace_file(snap_tmp, part, head, sizeof head, payload, len, true, &err);
    sl_strfree(j->a, snap_tmp);
    sl_strfree(j->a, part);
    sl_free(j->a, payload, len);
    sl_mutex_lock(&j->io_mu);
    if (rc == SL_OK) rc = compaction_switch(j, gen, &err);
    mj_free_kept(j);
    sl_mutex_lock(&j->q_mu);
    j->compacting = false;
    j->src = (sl_master_journal_snapshot_src_t){0};
    if (rc == SL_OK) {
        j->compactions_done++;
        j->syncs++;
    } else {
        j->compactions_failed++;
        snprintf(j->compact_msg, sizeof j->compact_msg, "%s", err.msg);
    }
    sl_mutex_unlock(&j->q_mu);
    sl_mutex_unlock(&j->io_mu);
    return NULL;
}

void sl_master_journal_compact_wait(sl_master_journal_t *j)
{
    if (j->compactor_started) pthread_join(j->compactor, NULL);
    j->compactor_started = false;
}

bool sl_master_journal_compacting(sl_master_journal_t *j)
{
    sl_mutex_lock(&j->q_mu);
    bool c = j->compacting;
    sl_mutex_unlock(&j->q_mu);
    return c;
}

sl_err_t sl_master_journal_compact_start(sl_master_journal_t *j,
                                         const sl_master_journal_snapshot_src_t *src,
                                         sl_error_t *err)
{
    if (sl_master_journal_compacting(j)) {
        src->release(src->ctx);
        return SL_OK;
    }
    sl_master_journal_compact_wait(j); /* the last one has ended: reap it */
    sl_mutex_lock(&j->q_mu);
    bool broken = j->broken;
    if (broken) sl_error_set(err, SL_ERR_IO, "%s", j->broken_msg);
    sl_mutex_unlock(&j->q_mu);
    if (broken) {
        /* a broken journal may have a journal.next that is the journal: no
         * compaction may touch the files any more */
        src->release(src->ctx);
        return SL_ERR_IO;
    }
    sl_err_t rc = mj_seal(j, err);
    if (rc != SL_OK) {
        src->release(src->ctx);
        return rc;
    }
    sl_mutex_lock(&j->q_mu);
    j->boundary = j->sealed_end;
    j->compacting = true;
    j->src = *src;
    sl_mutex_unlock(&j->q_mu);
    if (pthread_create(&j->compactor, NULL, compactor, j) != 0) {
        sl_mutex_lock(&j->q_mu);
        j->compacting = false;
        j->src = (sl_master_journal_snapshot_src_t){0};
        sl_mutex_unlock(&j->q_mu);
        src->release(src->ctx);
        return sl_error_set(err, SL_ERR_IO, "%s: cannot start the compaction thread", j->path);
    }
    j->compactor_started = true;
    return SL_OK;
}

void sl_master_journal_compact_counts(sl_master_journal_t *j, uint64_t *done, uint64_t *failed,
                                      char *msg, size_t cap)
{
    sl_mutex_lock(&j->q_mu);
    *done = j->compactions_done;
    *failed = j->compactions_failed;
    if (msg != NULL && cap > 0) snprintf(msg, cap, "%s", j->compact_msg);
    sl_mutex_unlock(&j->q_mu);
}

/* At open, after the snapshot of generation snap_gen (had: there is one)
 * was read: a journal.next of that generation is the journal (a crash
 * came between a background compaction's two renames); any other, and a
 * snapshot.tmp, are leftovers of one that did not finish. */
sl_err_t mj_adopt_next(sl_master_journal_t *j, bool had, uint64_t snap_gen, sl_error_t *err)
{
    char *next = dir_file(j, NEXT_FILE), *snap_tmp = dir_file(j, SNAP_TMP_FILE);
    sl_err_t rc = next == NULL || snap_tmp == NULL
                      ? sl_error_set(err, SL_ERR_NOMEM, "open journal in %s", j->dir)
                      : SL_OK;
    if (rc == SL_OK) unlink(snap_tmp);
    uint8_t head[SL_MASTER_JOURNAL_HEADER_BYTES];
    int fd = rc == SL_OK ? open(next, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        bool ours = read(fd, head, sizeof head) == (ssize_t)sizeof head &&
                    memcmp(head, SL_MASTER_JOURNAL_MAGIC, 4) == 0 && had &&
                    sl_le_get_u64(head + 8) == snap_gen;
        close(fd);
        if (!ours)
            unlink(next);
        else if (rename(next, j->path) != 0)
            rc = sl_error_set(err, SL_ERR_IO, "rename %s: %s", next, strerror(errno));
        else
            rc = sl_io_sync_dir(j->dir, err);
    }
    sl_strfree(j->a, next);
    sl_strfree(j->a, snap_tmp);
    return rc;
}

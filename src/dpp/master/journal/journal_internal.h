/* Internals of the master's journal (journal.h), shared by journal.c
 * (files, appends, syncs, open) and journal_compact.c (compaction in the
 * background). Not an API. */
#ifndef SLUICE_DPP_MASTER_JOURNAL_INTERNAL_H
#define SLUICE_DPP_MASTER_JOURNAL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/lock.h"
#include "dpp/master/journal/journal.h"

struct sl_master_journal {
    const sl_allocator_t *a;
    char *dir;
    char *path;      /* DIR/journal */
    char *snap_path; /* DIR/snapshot */
    int fd;          /* journal, O_APPEND */
    uint64_t generation;
    size_t max_record;
    /* Appends (under the owner's lock) go to buf, [buffered] of [cap],
     * which grows: an append never writes. A sync seals it (moves it to
     * sealed, in order) under the owner's lock, and writes and fdatasyncs
     * the sealed chunks under io_mu only, so the owner's lock is not held
     * across the disk (sl_master_journal_sync_begin / _wait). */
    uint8_t *buf;
    size_t buffered, cap;
    /* q_mu guards the fields below it; io_mu the file (fd, its writes,
     * fdatasync, compaction). Order: the owner's lock, io_mu, q_mu. */
    sl_mutex_t io_mu, q_mu;
    struct chunk {
        uint8_t *p;
        size_t len, cap;
        uint64_t start; /* the appended offset of its first byte */
    } * sealed;         /* [nsealed] of [sealed_cap], oldest first */
    size_t nsealed, sealed_cap;
    uint8_t *spare; /* a written chunk's buffer, for the next buf */
    size_t spare_cap;
    uint64_t file_bytes;   /* written to the file */
    uint64_t sealed_bytes; /* in sealed, not written yet */
    uint64_t appended;     /* bytes ever appended (every generation): tickets */
    uint64_t sealed_end;   /* appended bytes sealed (the rest are in buf) */
    uint64_t durable;      /* appended bytes made durable */
    bool broken;           /* a write or fdatasync failed: nothing more is durable */
    char broken_msg[SL_ERROR_MSG_MAX];
    uint64_t syncs;
    sl_master_journal_sync_hist_t sync_hist; /* latency of the syncs counted in syncs */
    /* A disk made slow on purpose (benchmarks, fault tests): every
     * fdatasync waits this long first. From SLUICE_JOURNAL_SYNC_DELAY_US
     * at open; 0: none. */
    uint64_t sync_delay_us;
    /* A compaction in the background (sl_master_journal_compact_start):
     * the snapshot of everything appended below `boundary`, written by
     * the compactor thread; the chunks at or past it that syncs write to
     * this journal meanwhile are kept (kept, [nkept] of [kept_cap]) for
     * the next one. compacting, boundary, src and the counts under q_mu;
     * kept under io_mu. */
    bool compacting, compactor_started;
    pthread_t compactor;
    uint64_t boundary;
    sl_master_journal_snapshot_src_t src; /* the snapshot's source while compacting */
    struct chunk *kept;
    size_t nkept, kept_cap;
    bool kept_lost; /* a chunk could not be kept: the compaction is abandoned */
    uint64_t compactions_done, compactions_failed;
    char compact_msg[SL_ERROR_MSG_MAX];
};

/* A storage fault injected at point name (libfiu; errno set). */
bool mj_injected(const char *name);
/* The headers of journal generation gen, and of snapshot generation gen
 * holding payload (journal.h's layouts, which sl_master_journal_scan and
 * sl_master_journal_snapshot_parse read). */
void mj_journal_header(uint8_t head[SL_MASTER_JOURNAL_HEADER_BYTES], uint64_t gen);
void mj_snapshot_header(uint8_t head[SL_MASTER_SNAPSHOT_HEADER_BYTES], uint64_t gen,
                        const void *payload, size_t len);
/* Write header + payload to path through DIR/tmp, fsync, rename, fsync dir. */
sl_err_t mj_write_atomic(const sl_master_journal_t *j, const char *path, const uint8_t *head,
                         size_t head_len, const void *payload, size_t len, sl_error_t *err);
/* Move the append buffer to the sealed chunks (under the owner's lock). */
sl_err_t mj_seal(sl_master_journal_t *j, sl_error_t *err);
/* Write every sealed chunk, in order; *end: the appended offset they reach. */
sl_err_t mj_write_sealed(sl_master_journal_t *j, uint64_t *end, sl_error_t *err)
    SL_REQUIRES(j->io_mu);
/* journal_compact.c: keep a written chunk for the next generation (q_mu and
 * io_mu held); free the kept ones; put a journal.next in place at open. */
bool mj_keep(sl_master_journal_t *j, const struct chunk *c);
void mj_free_kept(sl_master_journal_t *j);
sl_err_t mj_adopt_next(sl_master_journal_t *j, bool had, uint64_t snap_gen, sl_error_t *err);

#endif

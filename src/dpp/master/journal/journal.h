/* The DPP master's journal: an append-only file of checksummed records plus
 * a snapshot, in a state directory. This layer knows bytes, files and fsync;
 * what the records mean (protobuf messages of proto/master.proto) is
 * state.c's business.
 *
 *   DIR/journal   16-byte header: magic "SLMJ" | u32 version | u64 generation
 *                 then records:   u32 len | u32 ~len | u64 XXH3-64(payload,
 *                                 seed = len) | len payload bytes
 *   DIR/snapshot  32-byte header: magic "SLMS" | u32 version | u64 generation |
 *                                 u64 len | u64 XXH3-64(payload)
 *                 then len payload bytes
 *
 * All integers little-endian. The journal's generation ties it to the
 * snapshot: compaction writes a snapshot of generation G+1 (temporary file,
 * fsync, rename, fsync of the directory), then a fresh journal of generation
 * G+1 the same way. A crash between the two leaves a journal of generation G
 * beside a snapshot of G+1; its records are already in the snapshot, so it
 * is discarded, never replayed twice.
 *
 * Reading never trusts the bytes. The length is stored twice (plain and
 * inverted) so that a flipped length bit is seen as corruption instead of
 * "a record running past the end of the file". A bad record (length past
 * the end of the file, checksum mismatch) that reaches the end of the file,
 * or is followed
 * only by zero bytes (a file extended by the crash but never written), is a
 * torn tail: a write the crash interrupted. It is cut away (ftruncate) and
 * reported as a warning. A bad record with real data after it is corruption
 * in the middle: the open fails naming file and offset, because dropping it
 * would silently forget state that later records depend on.
 *
 * Writes: appends go to a memory buffer (it grows; an append never
 * writes). A sync is two steps: sl_master_journal_sync_begin, under the
 * owner's lock, seals what was appended so far and returns a ticket;
 * sl_master_journal_sync_wait(ticket), without it, writes every sealed
 * buffer in order and fdatasyncs, so the owner's lock is never held across
 * the disk. Nothing appended is durable before a wait for a ticket taken
 * after it returns. A failed write or fdatasync breaks the journal: every
 * later wait fails (the file's tail is unknown; reopening replays what
 * reached it).
 *
 * Threads: none of its own. Appends, sync_begin and compact are called
 * under the owner's lock; sync_wait from any thread, with or without it
 * (its own mutexes order the writes); size, syncs and sync_hist any time. */
#ifndef SLUICE_DPP_MASTER_JOURNAL_H
#define SLUICE_DPP_MASTER_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

#define SL_MASTER_JOURNAL_MAGIC "SLMJ"
#define SL_MASTER_SNAPSHOT_MAGIC "SLMS"
#define SL_MASTER_JOURNAL_VERSION 1
#define SL_MASTER_JOURNAL_HEADER_BYTES 16
#define SL_MASTER_JOURNAL_RECORD_HEADER_BYTES 16
#define SL_MASTER_SNAPSHOT_HEADER_BYTES 32
#define SL_MASTER_JOURNAL_FILE "journal"
#define SL_MASTER_SNAPSHOT_FILE "snapshot"
#define SL_MASTER_JOURNAL_BUFFER (256u << 10)
/* Default bound of one record and of a snapshot: a JobAdded record of a
 * million splits is about 30 MB. */
#define SL_MASTER_JOURNAL_MAX_RECORD (256u << 20)

/* Called for every intact record in file order; offset is the record's
 * offset in the file (for messages). A non-OK return stops the scan with
 * that error. */
typedef sl_err_t (*sl_master_journal_record_fn)(void *ctx, const uint8_t *payload, size_t len,
                                                uint64_t offset, sl_error_t *err);

/* What a scan found. */
typedef struct sl_master_journal_scan {
    uint64_t generation;  /* from the header */
    uint64_t records;     /* intact records passed to the callback */
    uint64_t valid_bytes; /* header + intact records: where a torn tail starts */
    bool torn;            /* bytes after valid_bytes were a torn tail */
} sl_master_journal_scan_t;

/* Parse journal bytes (buf, len) named name in messages: check the header,
 * hand every record to fn. A torn tail is not an error (out->torn). Bad
 * header: SL_ERR_CORRUPT / SL_ERR_TRUNCATED / SL_ERR_VERSION; a bad record
 * with data after it: SL_ERR_CORRUPT "NAME: record at offset N: ...".
 * max_record 0 means SL_MASTER_JOURNAL_MAX_RECORD. */
sl_err_t sl_master_journal_scan(const void *buf, size_t len, const char *name, size_t max_record,
                                sl_master_journal_record_fn fn, void *ctx,
                                sl_master_journal_scan_t *out, sl_error_t *err);

/* Check snapshot bytes and point *payload, *payload_len into buf at the
 * protobuf payload; *generation gets the header's generation. */
sl_err_t sl_master_journal_snapshot_parse(const void *buf, size_t len, const char *name,
                                          size_t max_bytes, uint64_t *generation,
                                          const uint8_t **payload, size_t *payload_len,
                                          sl_error_t *err);

typedef struct sl_master_journal sl_master_journal_t;

typedef struct sl_master_journal_open_info {
    bool had_snapshot;
    uint64_t generation;   /* of the journal now open */
    uint64_t records;      /* journal records replayed */
    bool discarded_old;    /* an older-generation journal was discarded */
    bool truncated;        /* a torn tail was cut away */
    uint64_t truncated_at; /* file offset it was cut at */
    uint64_t truncated_bytes;
    char warning[SL_ERROR_MSG_MAX]; /* "" or what a log should say */
} sl_master_journal_open_info_t;

/* Open (creating when absent) the state directory dir: replay the snapshot
 * (snapshot_fn once, when there is one) and the journal's records
 * (record_fn), cut a torn tail, and leave the journal open for appending.
 * Either callback may be NULL. Caller owns *out, free with
 * sl_master_journal_close. */
sl_err_t sl_master_journal_open(const char *dir, const sl_allocator_t *a, size_t max_record,
                                sl_err_t (*snapshot_fn)(void *ctx, const uint8_t *payload,
                                                        size_t len, sl_error_t *err),
                                sl_master_journal_record_fn record_fn, void *ctx,
                                sl_master_journal_t **out, sl_master_journal_open_info_t *info,
                                sl_error_t *err);

/* Flushes nothing: call sl_master_journal_sync first for durability. j may be
 * NULL. */
void sl_master_journal_close(sl_master_journal_t *j);

/* Append one record (buffered; durable after the next sync).
 * @return SL_ERR_TOO_LARGE above the record bound, SL_ERR_IO. */
sl_err_t sl_master_journal_append(sl_master_journal_t *j, const void *payload, size_t len,
                                  sl_error_t *err);

/* Seal what was appended so far (under the owner's lock): *ticket names
 * it for sl_master_journal_sync_wait. SL_ERR_NOMEM: nothing sealed. */
sl_err_t sl_master_journal_sync_begin(sl_master_journal_t *j, uint64_t *ticket, sl_error_t *err);

/* Make everything up to ticket durable: write the sealed buffers and
 * fdatasync (nothing when another wait did it already). Without the
 * owner's lock is the point; with it works too. SL_ERR_IO breaks the
 * journal. */
sl_err_t sl_master_journal_sync_wait(sl_master_journal_t *j, uint64_t ticket, sl_error_t *err);

/* sync_begin then sync_wait: everything appended so far durable. */
sl_err_t sl_master_journal_sync(sl_master_journal_t *j, sl_error_t *err);

/* Bytes of the journal file including appends not written yet. */
uint64_t sl_master_journal_size(sl_master_journal_t *j);

/* Number of fdatasync calls made so far (for benchmarks and metrics). */
uint64_t sl_master_journal_syncs(sl_master_journal_t *j);

/* How long sl_master_journal_sync took (write-out plus fdatasync), as a
 * Prometheus histogram: count[i] syncs took at most
 * SL_MASTER_JOURNAL_SYNC_BOUNDS[i] seconds (not cumulative; the last slot
 * counts those above every bound), sum_s their total. Syncs with nothing
 * to write are not counted; compactions are not syncs here. */
#define SL_MASTER_JOURNAL_SYNC_BUCKETS 10
extern const double SL_MASTER_JOURNAL_SYNC_BOUNDS[SL_MASTER_JOURNAL_SYNC_BUCKETS];
typedef struct sl_master_journal_sync_hist {
    uint64_t count[SL_MASTER_JOURNAL_SYNC_BUCKETS + 1];
    double sum_s;
} sl_master_journal_sync_hist_t;

/* The histogram so far; zeroes for j NULL. */
void sl_master_journal_sync_hist(sl_master_journal_t *j, sl_master_journal_sync_hist_t *out);

/* Replace journal and snapshot by a snapshot with payload (the whole state,
 * which must include everything appended so far) and an empty journal, both
 * of the next generation; durable when it returns. */
sl_err_t sl_master_journal_compact(sl_master_journal_t *j, const void *payload, size_t len,
                                   sl_error_t *err);

/* Where a background compaction's snapshot comes from: encode(ctx) gives
 * the snapshot's bytes (*buf of *len, from the journal's allocator, freed
 * by the journal), called on the compaction thread with no lock held;
 * release(ctx) is called once, always, when the journal is done with ctx
 * (after encode, or instead of it when the compaction does not start). */
typedef struct sl_master_journal_snapshot_src {
    sl_err_t (*encode)(void *ctx, uint8_t **buf, size_t *len, sl_error_t *err);
    void (*release)(void *ctx);
    void *ctx;
} sl_master_journal_snapshot_src_t;

/* Compact in the background (as redis rewrites its AOF): src gives the
 * snapshot of everything appended so far (a copy taken under the owner's
 * lock: this call seals what was appended, so the snapshot's records end
 * at a seal), owned by the journal from now on. A thread encodes it and
 * writes it as snapshot.tmp (fsync) with no lock held; then, under the
 * journal's io lock, the records appended since are written to
 * journal.next of the next generation, and snapshot.tmp and journal.next
 * are renamed over snapshot and journal. Syncs go on meanwhile (into the
 * old journal, their records kept for the new one); a failure before the
 * snapshot's rename changes nothing (the old journal holds everything,
 * counted as failed); one between the renames breaks the journal (open
 * puts journal.next in place). Nothing when one is running already. */
sl_err_t sl_master_journal_compact_start(sl_master_journal_t *j,
                                         const sl_master_journal_snapshot_src_t *src,
                                         sl_error_t *err);

/* Is a background compaction running? */
bool sl_master_journal_compacting(sl_master_journal_t *j);

/* Wait for the background compaction to end (owner's thread only). */
void sl_master_journal_compact_wait(sl_master_journal_t *j);

/* Background compactions finished and failed so far; the last failure's
 * message into msg (may be NULL). */
void sl_master_journal_compact_counts(sl_master_journal_t *j, uint64_t *done, uint64_t *failed,
                                      char *msg, size_t cap);

#endif

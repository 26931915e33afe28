/* The DPP master's state machine: jobs, their splits, leases to workers,
 * epochs, acknowledged progress, resume tokens, static sharding, and the
 * journal that makes it all survive a crash (journal.h). No sockets, no
 * threads: the master process wraps it, and calls every function under one
 * lock of its own (a master handle is not thread-safe).
 *
 * A split, per epoch:  PENDING --lease_next--> LEASED(worker, expiry, gen)
 *                        ^                        |        |
 *                        +------ expire ----------+        +--complete--> DONE
 *
 * Positions are acknowledged positions: (acked_batches, acked_rows) of the
 * split that the trainers have acknowledged, reported by the lease holder.
 * They only grow, never past the split's rows; a lease hands out the split
 * with the position to resume from, so a split taken back by expiry is
 * re-leased after its last acknowledged batch. complete needs
 * acked_rows == num_rows. When every split of an epoch is DONE the next
 * epoch starts, in its own split order (identity, or a permutation from
 * (seed, epoch) when shuffle is on); after the last epoch the job is
 * finished.
 *
 * Every lease gets a generation, unique in the master's whole history
 * (across restarts, see proto/master.proto Opened). A report carrying a
 * generation that is not the split's live lease is refused with
 * SL_DPP_STALE: that is what makes a worker that comes back after its lease
 * expired harmless.
 *
 * Durability (opts.state_dir set): every change is one journal record.
 * Records are buffered; sl_dpp_master_sync writes and fdatasyncs them (group
 * commit; the master calls it once per loop iteration). A peer must not be
 * told "OK" for progress, complete, job add/resume/remove, or get a resume
 * token, before a sync has returned after the call: those are what
 * exactly-once rests on. Lease grants and expiries may go unsynced: a lost
 * grant leaves the split PENDING after a restart, its generation can never
 * be handed out again, so the worker's reports under it are refused as
 * stale, and the split is served again from its last synced position.
 *
 * Times are caller-supplied milliseconds of a monotonic clock. */
#ifndef SLUICE_DPP_MASTER_STATE_H
#define SLUICE_DPP_MASTER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dpp/journal.h"
#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/warehouse.h"

/* A report (progress, complete) under a generation that is not the split's
 * live lease: the lease expired, was re-granted, or the epoch moved on. The
 * worker must drop the split. (sl_err_t has no dedicated value; CLOSED says
 * "your lease has ended" and no other master call returns it.) */
#define SL_DPP_STALE SL_ERR_CLOSED

#define SL_DPP_RESUME_TOKEN_MAGIC "SLRT"
#define SL_DPP_RESUME_TOKEN_VERSION 1

typedef enum sl_dpp_split_state {
    SL_DPP_SPLIT_PENDING = 0,
    SL_DPP_SPLIT_LEASED = 1,
    SL_DPP_SPLIT_DONE = 2
} sl_dpp_split_state_t;

typedef struct sl_dpp_master_opts {
    const char *state_dir;           /* NULL: in memory only, nothing journaled */
    uint64_t lease_timeout_ms;       /* 0: 10000 */
    uint64_t compact_bytes;          /* journal size that triggers compaction; 0: 64 MiB */
    uint32_t max_jobs;               /* 0: 64 */
    uint32_t max_workers;            /* distinct worker ids ever seen; 0: 65536 */
    uint32_t max_splits;             /* per job; 0: 16M */
    uint32_t max_name;               /* bytes of a job or worker id; 0: 255 */
    const sl_allocator_t *allocator; /* NULL: default; every byte of state comes from it */
} sl_dpp_master_opts_t;

typedef struct sl_dpp_master sl_dpp_master_t;

/* Open a master: with a state directory, replay its snapshot and journal
 * (a torn last record is cut away and reported in info->warning; damage in
 * the middle is an error naming file and offset), then treat every lease
 * found as expiring at now_ms + lease timeout (its worker may still be
 * alive and renew it). info may be NULL. Caller owns *out, free with
 * sl_dpp_master_destroy. */
sl_err_t sl_dpp_master_open(const sl_dpp_master_opts_t *opts, uint64_t now_ms,
                            sl_dpp_master_t **out, sl_dpp_journal_open_info_t *info,
                            sl_error_t *err);

/* Does not sync: call sl_dpp_master_sync first. m may be NULL. */
void sl_dpp_master_destroy(sl_dpp_master_t *m);

/* ---- jobs ------------------------------------------------------------------------ */

typedef struct sl_dpp_master_job_spec {
    const char *job_id;          /* 1..max_name printable ASCII bytes, no spaces (worker ids too) */
    const sl_wh_split_t *splits; /* [num_splits]; path, stripes, first_row, num_rows used */
    uint32_t num_splits;
    uint32_t epochs; /* >= 1 */
    uint64_t seed;
    bool shuffle; /* per-epoch split order from (seed, epoch) */
} sl_dpp_master_job_spec_t;

/* Add a job (copied; spec is borrowed for the call). @return SL_ERR_INVALID
 * for a duplicate id or a bad spec, SL_ERR_TOO_LARGE past a bound. Sync
 * before acknowledging. */
sl_err_t sl_dpp_master_job_add(sl_dpp_master_t *m, const sl_dpp_master_job_spec_t *spec,
                               sl_error_t *err);

/* Add a job that starts where a resume token (sl_dpp_master_token_encode)
 * left off: in the token's epoch, every split from its acknowledged
 * position, so exactly the samples not acknowledged before remain. A token
 * of another job id or other splits: SL_ERR_INVALID; damaged: SL_ERR_CORRUPT
 * or SL_ERR_TRUNCATED; another version: SL_ERR_VERSION. */
sl_err_t sl_dpp_master_job_resume(sl_dpp_master_t *m, const sl_dpp_master_job_spec_t *spec,
                                  const void *token, size_t len, sl_error_t *err);

/* Remove a job; its leases vanish. SL_ERR_NOT_FOUND when unknown. */
sl_err_t sl_dpp_master_job_remove(sl_dpp_master_t *m, const char *job_id, sl_error_t *err);

typedef struct sl_dpp_master_job_status {
    uint32_t epoch; /* current epoch (== epochs when finished) */
    uint32_t epochs;
    bool finished;
    uint32_t num_splits;
    uint32_t pending, leased, done; /* splits of the current epoch per state */
    uint64_t acked_rows;            /* of the current epoch */
    uint64_t total_rows;            /* of one epoch */
} sl_dpp_master_job_status_t;

sl_err_t sl_dpp_master_job_status(const sl_dpp_master_t *m, const char *job_id,
                                  sl_dpp_master_job_status_t *out, sl_error_t *err);

/* ---- leases ---------------------------------------------------------------------- */

typedef struct sl_dpp_lease {
    uint32_t split; /* index in the job's split list */
    uint32_t epoch;
    uint64_t generation;
    uint64_t expiry_ms;
    uint64_t start_batches; /* resume here: batches of the split already acknowledged */
    uint64_t start_rows;    /* rows of the split already acknowledged */
    /* The split (borrowed until the job is removed). */
    const char *path;
    uint32_t stripe_begin, stripe_end;
    uint64_t first_row, num_rows;
} sl_dpp_lease_t;

/* Lease the next PENDING split of the job, in epoch order, to worker.
 * @return SL_ERR_AGAIN when nothing is pending (every split leased or done,
 * or the job finished: see job_status), SL_ERR_NOT_FOUND for an unknown job,
 * SL_ERR_TOO_LARGE when worker would exceed max_workers. */
sl_err_t sl_dpp_master_lease_next(sl_dpp_master_t *m, const char *job_id, const char *worker,
                                  uint64_t now_ms, sl_dpp_lease_t *out, sl_error_t *err);

/* Heartbeat: every lease of worker now expires at now + timeout. *renewed
 * (may be NULL) gets their number. An unknown worker renews nothing. */
sl_err_t sl_dpp_master_renew(sl_dpp_master_t *m, const char *worker, uint64_t now_ms,
                             uint32_t *renewed, sl_error_t *err);

/* Record the acknowledged position of a leased split. Repeating the current
 * position is a no-op. @return SL_DPP_STALE (generation not the live
 * lease), SL_ERR_INVALID (position going back or past the split's rows),
 * SL_ERR_NOT_FOUND. Sync before acknowledging. */
sl_err_t sl_dpp_master_progress(sl_dpp_master_t *m, const char *job_id, uint32_t split,
                                uint64_t generation, uint64_t acked_batches, uint64_t acked_rows,
                                sl_error_t *err);

/* The split is done: valid only when its acknowledged rows are all its rows
 * (else SL_ERR_INVALID). May start the next epoch. Same errors as progress.
 * Sync before acknowledging. */
sl_err_t sl_dpp_master_complete(sl_dpp_master_t *m, const char *job_id, uint32_t split,
                                uint64_t generation, sl_error_t *err);

/* Take back every lease whose expiry is <= now: the split is PENDING again,
 * keeping its acknowledged position. *expired (may be NULL) gets their
 * number. Cost: the number of workers plus the leases of workers whose
 * earliest expiry has passed. */
sl_err_t sl_dpp_master_expire(sl_dpp_master_t *m, uint64_t now_ms, uint32_t *expired,
                              sl_error_t *err);

/* Make every change so far durable (group commit), compacting the journal
 * first when it has outgrown opts.compact_bytes. No-op in memory. */
sl_err_t sl_dpp_master_sync(sl_dpp_master_t *m, sl_error_t *err);

/* Write a snapshot and start an empty journal now. */
sl_err_t sl_dpp_master_compact(sl_dpp_master_t *m, sl_error_t *err);

/* ---- tokens, sharding, metrics ---------------------------------------------------- */

/* The acknowledged position of every split of the job's current epoch, as
 * an opaque token (magic, version, XXH3, protobuf ResumeToken). Caller owns
 * *buf, free with sl_free(allocator, *buf, *len) (allocator as in opts). */
sl_err_t sl_dpp_master_token_encode(const sl_dpp_master_t *m, const char *job_id, void **buf,
                                    size_t *len, sl_error_t *err);

/* Static sharding: assign every split of the job to one of ranks trainer
 * ranks, balancing rows: splits by rows descending (ties: lower split id
 * first) each go to the least-loaded rank; ties between equally loaded
 * ranks go by a rank order drawn from the job's seed. rank_of_split has
 * num_splits entries; rows_per_rank (may be NULL) ranks entries.
 * Reproducible: same splits, seed and ranks give the same assignment. */
sl_err_t sl_dpp_master_assign_static(const sl_dpp_master_t *m, const char *job_id, uint32_t ranks,
                                     uint32_t *rank_of_split, uint64_t *rows_per_rank,
                                     sl_error_t *err);

/* The split order of an epoch: order[i] is the i-th split handed out. */
sl_err_t sl_dpp_master_epoch_order(const sl_dpp_master_t *m, const char *job_id, uint32_t epoch,
                                   uint32_t *order, sl_error_t *err);

typedef struct sl_dpp_master_counters {
    uint64_t leases_granted;
    uint64_t renewals; /* leases renewed */
    uint64_t expiries;
    uint64_t completions;
    uint64_t stale_refused; /* progress or complete under a dead generation */
    uint64_t epochs_advanced;
    uint64_t journal_records;
    uint64_t journal_syncs;
    uint64_t compactions;
    uint32_t jobs, workers;
    uint64_t pending, leased, done; /* splits per state, every job */
} sl_dpp_master_counters_t;

void sl_dpp_master_counters(const sl_dpp_master_t *m, sl_dpp_master_counters_t *out);

/* A canonical text dump of the durable state (jobs, epochs, per split:
 * state, holder, generation, position; not expiries, not counters), equal
 * for two masters in the same state however they got there. Caller owns
 * *out, free with sl_free(allocator, *out, *len + 1). */
sl_err_t sl_dpp_master_dump(const sl_dpp_master_t *m, char **out, size_t *len, sl_error_t *err);

/* Apply journal bytes (a whole journal file's contents) to m, as open does:
 * for tests and the fuzz target. *torn (may be NULL) says a torn tail was
 * ignored. Only for a master without a state directory. */
sl_err_t sl_dpp_master_replay(sl_dpp_master_t *m, const void *journal, size_t len, bool *torn,
                              sl_error_t *err);

#endif

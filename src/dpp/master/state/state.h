/* The DPP master's state machine: jobs, their splits, leases to workers,
 * epochs, committed row ranges, per-client commit answers, resume tokens,
 * static sharding. No sockets, no threads, no files: every change is one
 * record handed to a record sink (below); the process's store (state_store.h)
 * owns the journal that makes it all survive a crash (journal.h): it
 * opens it, replays it into a state, syncs and compacts it. The master
 * process (master.h) wraps both and calls every function under one lock
 * of its own (a master handle is not thread-safe). A state made by
 * sl_master_state_new lives in memory only: tests need no directory.
 *
 * A split, per epoch:  PENDING --lease_next--> LEASED(worker, expiry, gen)
 *                        ^                        |        |
 *                        +-- expire / split_read -+        +-- rows all committed --> DONE
 *
 * Progress is a set of committed row ranges per split (rows 0..num_rows,
 * split-relative, filtered rows included). A trainer client commits the
 * range of each batch before handing it to its trainer (sl_master_state_commit):
 * accepted iff it overlaps no committed range of that (job, epoch, split)
 * and the lease (generation) that produced it is the split's live lease,
 * so of two copies of a batch at most one is ever delivered, and a lease
 * that ended adds no rows. A lease hands out the split's `todo`: the
 * rows not committed yet. SPLIT_READ from the live lease commits the ranges
 * that produced no sample and releases the split: DONE if covered, else
 * PENDING to be leased again with what is left. A split whose rows are all
 * committed is DONE at once (its lease ends). When every split of an epoch
 * is DONE the next epoch starts, in its own split order (identity, or a
 * permutation from (seed, epoch) when shuffle is on); after the last epoch
 * the job is finished.
 *
 * Commits are idempotent per (client_id, nonce): the nonces of a client's
 * last max_answers accepted commits are remembered (journaled with the
 * commit), and a repeat gets COMMITTED again even after a restart or an
 * epoch change. Refused commits are not remembered: asked again they are
 * refused again (the ranges they overlap only grow within an epoch, and an
 * old epoch stays old).
 *
 * Every lease gets a generation, unique in the master's whole history
 * (across restarts, see proto/master.proto Opened). SPLIT_READ under a
 * generation that is not the split's live lease is refused (outcome
 * SL_MASTER_READ_STALE): a worker that comes back after its lease expired cannot end
 * someone else's lease.
 *
 * Liveness: a lease lives lease_timeout_ms from its grant, and longer only
 * while its worker names it (sl_master_state_renew on HEARTBEAT,
 * sl_master_state_register on REGISTER, which also revokes every lease of
 * that worker id it does not name; the master process also renews a
 * worker's named leases when it answers the worker's calls, named.c). So
 * a grant whose LEASE frame never reached the worker, or the leases of a
 * process replaced under the same worker id, never outlive one lease
 * timeout.
 *
 * Durability (in a store): every change is one journal record, handed
 * to the sink, which buffers it; sl_master_store_sync (state_store.h) writes
 * and fdatasyncs them (group commit; the master calls it once per loop
 * iteration). A peer must not be
 * told the answer to a commit (any answer: an OVERLAP may rest on another
 * client's unsynced commit), a split_read, a job add/resume/remove, or get
 * a resume token, before a sync has returned after the call: those are what
 * exactly-once rests on. Lease grants and expiries may go unsynced: a lost
 * grant leaves the split PENDING after a restart, its generation can never
 * be handed out again, and the worker's batches still commit or overlap by
 * their rows alone.
 *
 * Memory: a call that fails with SL_ERR_NOMEM has changed nothing, in
 * memory or in the journal. A transition allocates (or reserves room for)
 * everything it needs before its record goes out, so that applying a
 * journaled record cannot fail; tests/unit/master_state_test.c fails every
 * allocation of a master's life in turn and checks it. The master process
 * therefore refuses one request when memory runs short, not every later
 * one.
 *
 * Times are caller-supplied milliseconds of a monotonic clock. */
#ifndef SLUICE_DPP_MASTER_STATE_H
#define SLUICE_DPP_MASTER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dpp/master/state/admin_limits.h"
#include "dpp/split.h"
#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/warehouse.h"

/* Outcomes are not errors: COMMIT, SPLIT_READ and SPLIT_FAILED return
 * their outcome as an enum of their own (the values of their replies in
 * proto/control.proto), with *_ERROR (-1) when the master itself could not
 * decide (journal, memory, a bound): err->code and err->msg say why. For a
 * refusal err->msg says why and err->code is SL_OK. */

#define SL_MASTER_RESUME_TOKEN_MAGIC "SLRT"
#define SL_MASTER_RESUME_TOKEN_VERSION 2
/* A Kafka job's tokens: per partition, the delivered prefix and the ranges
 * above it (proto/master.proto KafkaResumeToken). Same header. */
#define SL_MASTER_KAFKA_TOKEN_VERSION 3
/* A table job's token of one trainer rank: what that rank handed out in
 * the job's current and previous epoch (proto/master.proto ResumeTokenV4);
 * the tokens of a checkpoint's ranks combine by union. Same header. */
#define SL_MASTER_RANK_TOKEN_VERSION 4
/* A Kafka job's token of one trainer rank: per partition what that rank
 * handed out above a prefix every rank counts as delivered (the same
 * KafkaResumeToken record); combined by union as version 4. Same header. */
#define SL_MASTER_KAFKA_RANK_TOKEN_VERSION 5

typedef enum sl_master_split_state {
    SL_MASTER_SPLIT_PENDING = 0,
    SL_MASTER_SPLIT_LEASED = 1,
    SL_MASTER_SPLIT_DONE = 2
} sl_master_split_state_t;

typedef struct sl_master_state_opts {
    uint64_t lease_timeout_ms; /* 0: 10000 */
    uint32_t max_jobs;         /* 0: 64 */
    uint32_t max_workers;      /* distinct worker ids ever seen; 0: 65536 */
    uint32_t max_splits;       /* per job; 0: 16M */
    uint32_t max_name;         /* bytes of a job, worker or client id; 0: 255 */
    uint32_t max_clients;      /* distinct client ids remembered; 0: 4096 */
    uint32_t max_answers;      /* accepted nonces remembered per client; 0: 1024 */
    uint32_t max_ranges;       /* committed ranges per split at once; 0: 65536 */
    /* Kafka jobs: a partition gets a new chunk when it has no PENDING chunk
     * and fewer than this many chunks not DONE; 0: 4 (docs/KAFKA.md) */
    uint32_t kafka_chunks_ahead;
    const sl_allocator_t *allocator; /* NULL: default; every byte of state comes from it */
} sl_master_state_opts_t;

typedef struct sl_master_state sl_master_state_t;

/* An empty state in memory (no sink: nothing journaled). opts may be
 * NULL (every default). Caller owns *out, free with
 * sl_master_state_destroy. A state with a journal behind it comes from
 * sl_master_store_open (state_store.h), which owns it. */
sl_err_t sl_master_state_new(const sl_master_state_opts_t *opts, sl_master_state_t **out,
                             sl_error_t *err);

/* m may be NULL. A state of a store is destroyed by the store. */
void sl_master_state_destroy(sl_master_state_t *m);

/* ---- the record sink and replay (the store's side, state_store.c) ------------------- */

/* Where the state's records go: append takes one packed Record
 * (proto/master.proto) of len bytes, buffered (durable after the
 * owner's next sync); a failure (SL_ERR_IO of a broken journal,
 * SL_ERR_TOO_LARGE, SL_ERR_NOMEM) fails the transition, which then
 * changed nothing. Called under the caller's lock, from the transition. */
typedef struct sl_master_record_sink {
    sl_err_t (*append)(void *ctx, const void *record, size_t len, sl_error_t *err);
    void *ctx;
} sl_master_record_sink_t;

/* Send every later record to sink (copied; NULL: none, nothing journaled).
 * Takes the room of the record buffer now, so that the first record
 * after a replay (Opened) cannot fail for memory: SL_ERR_NOMEM sets
 * nothing. */
sl_err_t sl_master_state_set_sink(sl_master_state_t *m, const sl_master_record_sink_t *sink,
                                  sl_error_t *err);

/* Replay, by the one Apply that live transitions use: one packed Record
 * read back at offset (for messages), or a whole packed Snapshot (once,
 * into an empty state, before any record). A record a live master could
 * not have written is SL_ERR_CORRUPT naming offset. */
sl_err_t sl_master_state_apply_record(sl_master_state_t *m, const uint8_t *record, size_t len,
                                      uint64_t offset, sl_error_t *err);
sl_err_t sl_master_state_load_snapshot(sl_master_state_t *m, const uint8_t *snapshot, size_t len,
                                       sl_error_t *err);

/* The whole state as a packed Snapshot (what compaction writes; callable
 * in a forked copy of the process). Caller owns *buf, free with
 * sl_free(allocator, *buf, *len). */
sl_err_t sl_master_state_snapshot_encode(const sl_master_state_t *m, uint8_t **buf, size_t *len,
                                         sl_error_t *err);

/* After a replay: the pending queues rebuilt, every lease found expiring
 * at now_ms + lease timeout (its worker may still be alive and renew it),
 * clients idle from now_ms, counters of this run only; with a sink (a
 * restart, not a test's replay) an Opened record moves generations past
 * any the last run may have handed out unsynced; then every job whose
 * splits are all DONE advances. Sync before granting a lease. */
sl_err_t sl_master_state_replayed(sl_master_state_t *m, uint64_t now_ms, sl_error_t *err);

/* ---- jobs ------------------------------------------------------------------------ */

/* A partition of a Kafka job: offsets from start (>= 0) up to stop (> start;
 * -1: a stream, no end). */
typedef struct sl_master_kafka_partition {
    const char *topic; /* 1..249 bytes of [a-zA-Z0-9._-] */
    int32_t partition; /* >= 0 */
    int64_t start, stop;
} sl_master_kafka_partition_t;

#define SL_MASTER_MAX_KAFKA_PARTITIONS 65536 /* per job */

typedef struct sl_master_state_job_spec {
    const char *job_id;          /* 1..max_name printable ASCII bytes, no spaces (worker ids too) */
    const sl_wh_split_t *splits; /* [num_splits]; path, stripes, first_row, num_rows used */
    uint32_t num_splits;
    uint32_t epochs; /* >= 1 */
    uint64_t seed;
    bool shuffle; /* per-epoch split order from (seed, epoch) */
    /* Carried for the master process (NULL / 0: none, one rank, dynamic). */
    const char *spec_json; /* the job spec text, handed to workers in leases */
    uint32_t ranks;        /* trainer ranks */
    bool static_sharding;  /* each split served to one rank (assign_static) */
    uint32_t min_workers, max_workers;
    bool skip_bad_splits; /* on_bad_split "skip" (sl_master_state_split_failed) */
    /* A Kafka job (kafka_chunk > 0): no splits; its splits are chunks of
     * these partitions, chunk k of a partition being
     * sl_kafka_chunk_bounds(start, kafka_chunk, k, stop), made as they are
     * needed: lease_next makes a partition's next chunk when it has no
     * PENDING chunk, fewer than opts.kafka_chunks_ahead chunks not DONE and
     * (a stream's) a record at the chunk's start
     * (sl_master_state_kafka_high) — one KafkaChunksAdded record. A chunk's split has path
     * "<topic>/<partition>", stripes [0, 0), first_row its first offset,
     * num_rows its offset count (row r is offset first_row + r). One epoch,
     * no shuffle, no static sharding (a chunk list that grows has no order
     * to shuffle nor a fixed share per rank). A job with a stream partition
     * (stop -1) never finishes; one of bounded partitions finishes when
     * every chunk up to each stop is done. */
    const sl_master_kafka_partition_t *kafka_partitions;
    uint32_t num_kafka_partitions;
    uint32_t kafka_chunk; /* offsets per chunk, 1..2^31 */
    /* Shared passes (docs/DESIGN.md): the plan's fingerprint
     * (sl_pipeline_fingerprint; 0: none, never shares) and the spec's "share". */
    uint64_t plan_fingerprint;
    bool share;
    /* The autocache (docs/DESIGN.md "Autocache"): the key of the job's
     * cache files (sl_pipeline_prefix_fingerprint; 0: not cacheable). */
    uint64_t prefix_fingerprint;
    /* A Parquet job: its dataset's row groups, and those (and their rows)
     * ruled out by their statistics when it was cut (never read). */
    uint64_t parquet_row_groups, parquet_row_groups_skipped, parquet_rows_skipped;
    /* The deterministic order (docs/DESIGN.md, "A deterministic order";
     * state_order.c): every batch of an epoch numbered, splits leased only
     * at positions below the counted prefix + order_window (> 0). Not with
     * Kafka partitions, static sharding, shared passes or resume tokens. */
    bool deterministic;
    uint32_t order_window;
    /* batch.equal_batches_per_rank: static sharding over 2 or more ranks
     * only (else SL_ERR_INVALID); see sl_master_state_equal_quota. */
    bool equal_batches_per_rank;
} sl_master_state_job_spec_t;

/* Add a job (copied; spec is borrowed for the call). @return SL_ERR_INVALID
 * for a duplicate id or a bad spec, SL_ERR_TOO_LARGE past a bound. Sync
 * before acknowledging. */
sl_err_t sl_master_state_job_add(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                                 sl_error_t *err);

/* Add a job that starts where a resume token (sl_master_state_token_encode)
 * left off: in the token's epoch, with the token's ranges committed, so
 * exactly the samples not delivered before remain. A token
 * of another job id or other splits: SL_ERR_INVALID; damaged: SL_ERR_CORRUPT
 * or SL_ERR_TRUNCATED; another version: SL_ERR_VERSION. */
sl_err_t sl_master_state_job_resume(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                                    const void *token, size_t len, sl_error_t *err);

/* Resume from a checkpoint: tokens (count of them, at most
 * SL_MASTER_MAX_RESUME_TOKENS of dpp/master/admin_limits.h, each checked as
 * above; with several, the error names "token K of N").
 *
 * Version 4 (sl_master_state_token_take): one token per rank of the
 * checkpoint's world, each saying what its rank handed out. The set must
 * be of one run of the job, one world size, every rank 0..W-1 exactly once
 * ("token 2 of 3: rank 1 of 3 appears twice; rank 2 missing"), the same
 * step where every token carries one, and epochs at most one apart; else
 * SL_ERR_INVALID naming the token and why. The job (spec->ranks: any number
 * of ranks) starts in the earliest epoch whose rows were not all handed
 * out, with the union of what the ranks handed out committed, and the
 * union for the following epoch committed when that one begins.
 *
 * Version 2 (sl_master_state_token_encode): one token only (exact for one
 * rank); several are refused, as they cannot be combined exactly. */
sl_err_t sl_master_state_job_resume_ranks(sl_master_state_t *m,
                                          const sl_master_state_job_spec_t *spec,
                                          const void *const *tokens, const size_t *lens,
                                          uint32_t count, sl_error_t *err);

/* Replace the job spec->job_id by one resumed from tokens (as
 * sl_master_state_job_resume_ranks): the tokens are checked against spec
 * first, and only when every one is good is the job removed (as
 * sl_master_state_job_remove) and the new one added, so a refused token
 * leaves the job as it was. @return SL_ERR_NOT_FOUND when there is no such
 * job, the errors of sl_master_state_job_resume_ranks. */
sl_err_t sl_master_state_job_replace(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                                     const void *const *tokens, const size_t *lens, uint32_t count,
                                     sl_error_t *err);

/* Remove a job; its leases vanish. SL_ERR_NOT_FOUND when unknown. */
sl_err_t sl_master_state_job_remove(sl_master_state_t *m, const char *job_id, sl_error_t *err);

typedef struct sl_master_state_job_status {
    uint32_t epoch; /* current epoch (== epochs when finished) */
    uint32_t epochs;
    bool finished;
    uint32_t num_splits;
    uint32_t pending, leased, done; /* splits of the current epoch per state */
    uint64_t committed_rows;        /* of the current epoch */
    uint64_t total_rows;            /* of one epoch */
    /* As in the spec (borrowed until the job is removed). */
    const char *spec_json; /* "" when none */
    uint32_t ranks;        /* >= 1 */
    bool static_sharding;
    uint32_t min_workers, max_workers;
    uint64_t batches, samples; /* committed by clients, every epoch (journaled: survive restarts) */
    bool skip_bad_splits;
    /* A failed job (sl_master_state_split_failed): why; strings borrowed until
     * the job is removed. */
    bool failed;
    uint32_t failure_split, failure_epoch;
    int32_t failure_stripe; /* -1: the file as a whole */
    sl_err_t failure_code;
    const char *failure_file, *failure_message; /* "" when not failed */
    uint32_t split_failures;                    /* failures counted this epoch, every split */
    bool equal_batches_per_rank;                /* batch.equal_batches_per_rank */
    uint64_t equal_dropped_batches; /* its batches beyond an epoch's quota, every epoch ended */
    uint64_t equal_dropped_samples; /* and their samples */
    uint64_t skipped_splits, skipped_rows; /* on_bad_split "skip", every epoch */
    uint64_t plan_fingerprint;             /* as in the spec */
    bool share;
    uint64_t prefix_fingerprint; /* as in the spec */
    /* as in the spec (0 but for a Parquet job) */
    uint64_t parquet_row_groups, parquet_row_groups_skipped, parquet_rows_skipped;
    /* The deterministic order: its window, and the counted prefix of the
     * current epoch (splits before it numbered); false / 0 otherwise. */
    bool deterministic;
    uint32_t order_window, order_prefix;
} sl_master_state_job_status_t;

sl_err_t sl_master_state_job_status(const sl_master_state_t *m, const char *job_id,
                                    sl_master_state_job_status_t *out, sl_error_t *err);

/* The part of a job's status that changes at its phases only (epochs, its
 * end), in O(1): what a caller polls often looks at. @return false for no
 * such job. */
typedef struct sl_master_state_job_phase {
    uint32_t epoch; /* as in sl_master_state_job_status_t */
    bool finished, failed;
} sl_master_state_job_phase_t;

bool sl_master_state_job_phase(const sl_master_state_t *m, const char *job_id,
                               sl_master_state_job_phase_t *out);

/* The ids of the jobs (borrowed until the job is removed), up to cap, in
 * slot order. @return how many jobs there are. */
uint32_t sl_master_state_job_ids(const sl_master_state_t *m, const char **ids, uint32_t cap);

/* ---- Kafka jobs ----------------------------------------------------------------- */

/* A topic of a Kafka job grew: partition p joins it, read from p->start
 * (its earliest offset) to p->stop (-1 for a stream job). Journaled; its
 * first chunk is made by the next lease_next. @return SL_ERR_INVALID for a
 * table job, a bad or known partition, SL_ERR_NOT_FOUND for no job,
 * SL_ERR_TOO_LARGE past SL_MASTER_MAX_KAFKA_PARTITIONS. Sync before
 * acknowledging. */
sl_err_t sl_master_state_kafka_partition_add(sl_master_state_t *m, const char *job_id,
                                             const sl_master_kafka_partition_t *p, sl_error_t *err);

/* The partition's high watermark as the broker said (a hint, not
 * journaled: unknown after open). A stream partition gets a chunk only
 * when the chunk starts below the last one told (a record is there): no
 * read starts at or past the log's end (past it a fetch is an error under
 * auto.offset.reset=error), and a stream at its head keeps one chunk
 * waiting there rather than kafka_chunks_ahead. Unknown job or partition: nothing. index: where
 * sl_master_state_kafka_positions listed it (looked at first). */
void sl_master_state_kafka_high(sl_master_state_t *m, const char *job_id, const char *topic,
                                int32_t partition, int64_t high, uint32_t index);

/* Where a partition of a Kafka job stands. */
typedef struct sl_master_kafka_position {
    const char *topic; /* borrowed until the job is removed */
    int32_t partition;
    int64_t start, stop;
    /* Every offset below it is committed (delivered or empty): the
     * consumer-group mirror and the lag metric use it. */
    int64_t committed;
    uint32_t chunks, pending, open; /* chunks made, PENDING, not DONE */
} sl_master_kafka_position_t;

/* The job's partitions, up to cap of them into out (in the order they
 * joined). @return how many it has (0: a table job or no such job). */
uint32_t sl_master_state_kafka_positions(const sl_master_state_t *m, const char *job_id,
                                         sl_master_kafka_position_t *out, uint32_t cap);

/* What a Kafka job resumed from tokens (sl_master_state_job_resume_ranks
 * with spec->kafka_chunk > 0) needs: for each of spec's partitions
 * (needed[i] for spec->kafka_partitions[i]), the lowest offset it will
 * read, i.e. the intersection's delivered prefix for a partition the
 * tokens name, spec's start for one they do not. The master compares it
 * with the partition's low watermark and refuses the tokens when
 * retention deleted it. The tokens are checked as resume checks them. */
sl_err_t sl_master_state_kafka_token_needs(sl_master_state_t *m,
                                           const sl_master_state_job_spec_t *spec,
                                           const void *const *tokens, const size_t *lens,
                                           uint32_t count, int64_t *needed, sl_error_t *err);

/* ---- leases ---------------------------------------------------------------------- */

typedef struct sl_master_lease {
    uint32_t split; /* index in the job's split list */
    uint32_t epoch;
    uint64_t generation;
    uint64_t expiry_ms;
    uint32_t rank_plus_one; /* static sharding: 1 + the rank to serve; 0: any */
    /* The rows not committed yet (borrowed: valid until the next call on m). */
    const sl_dpp_row_range_t *todo;
    uint32_t num_todo;
    /* The split (borrowed until the job is removed). */
    const char *path;
    uint32_t stripe_begin, stripe_end;
    uint64_t first_row, num_rows;
    uint64_t footer_checksum; /* of the file as planned (0: not pinned) */
} sl_master_lease_t;

/* Lease the next PENDING split of the job, in epoch order, to worker.
 * @return SL_ERR_AGAIN when nothing is pending (every split leased or done,
 * or the job finished: see job_status), SL_ERR_NOT_FOUND for an unknown job,
 * SL_ERR_TOO_LARGE when worker would exceed max_workers. */
sl_err_t sl_master_state_lease_next(sl_master_state_t *m, const char *job_id, const char *worker,
                                    uint64_t now_ms, sl_master_lease_t *out, sl_error_t *err);

/* Lease split (an index in the job's split list) of the job's current
 * epoch to worker, whatever its place in the epoch order, as lease_next
 * does otherwise (todo, generation, journal): for a shared pass, which
 * leases the same split of every job of a plan fingerprint to one worker
 * (docs/DESIGN.md, "Shared passes"). split UINT32_MAX: the next in epoch
 * order (sl_master_state_lease_next). @return SL_ERR_AGAIN when the split
 * is not PENDING (or the job finished or failed), SL_ERR_NOT_FOUND for an
 * unknown job or split. */
sl_err_t sl_master_state_lease_split(sl_master_state_t *m, const char *job_id, uint32_t split,
                                     const char *worker_id, uint64_t now_ms, sl_master_lease_t *out,
                                     sl_error_t *err);

/* The splits lease_next would hand out next, in that order: at most cap
 * PENDING splits of the job's current epoch (split indices) into out, for
 * a caller that prefers one of them (sl_master_state_lease_split) without
 * reordering the epoch. Read-only; looks at most 8 * cap positions past
 * the ones handed out. @return how many (0: none, an unknown, finished,
 * failed or Kafka job). */
uint32_t sl_master_state_pending_window(const sl_master_state_t *m, const char *job_id,
                                        uint32_t *out, uint32_t cap);

/* A lease as its worker names it (HEARTBEAT, REGISTER). */
typedef struct sl_master_lease_ref {
    const char *job_id;
    uint32_t epoch, split;
    uint64_t generation;
} sl_master_lease_ref_t;

/* Heartbeat: the worker's own list of leases is authoritative. Each of
 * held[0..num_held) that is a live lease of worker now expires at now +
 * timeout; a named lease that is not (expired, another worker's, unknown)
 * is skipped, and a lease of worker it does not name is NOT renewed: it
 * expires at its expiry (a LEASE the worker never received lives at most
 * one lease timeout). *renewed (may be NULL) gets the number renewed. An
 * unknown worker renews nothing. Never fails (err unused). */
sl_err_t sl_master_state_renew(sl_master_state_t *m, const char *worker,
                               const sl_master_lease_ref_t *held, uint32_t num_held,
                               uint64_t now_ms, uint32_t *renewed, sl_error_t *err);

/* A worker (re)registers listing the leases its process holds: those are
 * renewed as by sl_master_state_renew, and every other lease recorded under
 * worker is revoked at once (journaled as an expiry; the split is PENDING
 * again with its uncommitted rows). A worker process that starts afresh
 * lists none, so the leases of a killed process whose replacement took its
 * id are handed out again without waiting for them to expire. *renewed
 * and *revoked may be NULL. @return a journal failure. */
sl_err_t sl_master_state_register(sl_master_state_t *m, const char *worker,
                                  const sl_master_lease_ref_t *held, uint32_t num_held,
                                  uint64_t now_ms, uint32_t *renewed, uint32_t *revoked,
                                  sl_error_t *err);

/* The answer to a commit (values as proto/control.proto CommitReply). */
typedef enum sl_master_commit_result {
    SL_MASTER_COMMIT_ERROR = -1, /* no answer: err says what failed */
    SL_MASTER_COMMITTED = 0,     /* deliver the batch */
    SL_MASTER_OVERLAP = 1,       /* a range overlapping it was committed: drop */
    /* not the job's current epoch (or finished), or the batch's lease
     * (split, generation) is not live any more: drop */
    SL_MASTER_STALE_EPOCH = 2,
    SL_MASTER_UNKNOWN = 3 /* no such job, split, or a range outside the split: drop */
} sl_master_commit_result_t;

/* Commit rows [from_row, to_row) of split of epoch, read under the lease
 * of that generation, for client_id under nonce (see the top of this
 * file). In this order: a (client_id, nonce) already accepted is
 * COMMITTED again; an unknown job or split or a bad range is UNKNOWN;
 * another epoch is STALE_EPOCH; rows overlapping committed rows are
 * OVERLAP; rows whose split is not leased under generation right now
 * (the lease expired, was revoked or re-granted, the split is done) are
 * STALE_EPOCH too: only a live lease's batches commit, so a lease that
 * ended can no longer add rows behind the back of its successor. Why a
 * commit was refused is in err->msg. SL_MASTER_COMMIT_ERROR is a failure
 * of the master itself (journal, memory) or, in err->code, SL_ERR_INVALID
 * for a bad client id, SL_ERR_TOO_LARGE past max_clients or max_ranges. A
 * commit that covers the split's last rows
 * makes it DONE and may start the next epoch. Journal replay applies a
 * Committed record whatever the lease state: the check is here only. Sync
 * before answering. */
sl_master_commit_result_t sl_master_state_commit(sl_master_state_t *m, const char *job_id,
                                                 uint32_t epoch, uint32_t split,
                                                 uint64_t generation, uint64_t from_row,
                                                 uint64_t to_row, const char *client_id,
                                                 uint64_t nonce, sl_error_t *err);

/* A commit, with what the job's counters need. */
typedef struct sl_master_commit {
    const char *job_id;
    uint32_t epoch, split;
    uint64_t generation; /* of the lease the batch was read under */
    uint64_t from_row, to_row;
    const char *client_id;
    uint64_t nonce;
    uint32_t num_samples; /* the batch's samples: job status "samples" (journaled) */
} sl_master_commit_t;

/* sl_master_state_commit of c, counting an accepted one as a batch of
 * c->num_samples samples in the job's status. */
sl_master_commit_result_t
sl_master_state_commit_batch(sl_master_state_t *m, const sl_master_commit_t *c, sl_error_t *err);
/* The same from a client of rank rank_plus_one - 1 (its ATTACH; 0: not
 * known): whose batch it is under dynamic sharding with
 * equal_batches_per_rank (journaled then). */
sl_master_commit_result_t sl_master_state_commit_ranked(sl_master_state_t *m,
                                                        const sl_master_commit_t *c,
                                                        uint32_t rank_plus_one, sl_error_t *err);

/* A job with batch.equal_batches_per_rank (state_equal.c): the quota of
 * epoch, the number of batches every rank hands out in it, for the answer
 * to a commit of that epoch. Not *final: the lowest count any rank has
 * committed so far (it only grows); *final: the epoch's quota (a rank
 * whose share is done has the lowest count). @return false for an unknown
 * job or one without the option (*quota 0, *final true). */
bool sl_master_state_equal_quota(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                 uint64_t *quota, bool *final);
/* Was (client_id, nonce) accepted (and is it still remembered)? A commit
 * sent again (a held batch asking for its quota) is answered as it was,
 * even where its split has another rank since (a resumed job's static
 * assignment is redone when its next epoch begins). */
bool sl_master_state_commit_seen(const sl_master_state_t *m, const char *client_id, uint64_t nonce);

/* The answer to a split read (values as proto/control.proto SplitReadReply). */
typedef enum sl_master_read_result {
    SL_MASTER_READ_ERROR = -1,  /* no answer: err says what failed */
    SL_MASTER_READ_PENDING = 0, /* rows are left: the split is leased again */
    SL_MASTER_READ_DONE = 1,    /* every row of the split is committed */
    /* (epoch, split, generation) is not the live lease (expired, re-leased,
     * epoch over), or no such job or split: the worker drops the split */
    SL_MASTER_READ_STALE = 2
} sl_master_read_result_t;

/* The live lease's holder has read every todo row; empty are the ranges
 * that produced no sample (committed here, minus what is committed
 * already). The split becomes DONE if its rows are all committed, else
 * PENDING; the outcome says which. SL_MASTER_READ_ERROR: SL_ERR_INVALID
 * for a range outside the split, a bound, the journal, memory. May start
 * the next epoch. Sync before answering. */
/* A deterministic job's live lease (epoch, split, generation) read its
 * split from the first row and cut `batches` batches: journaled as a
 * BatchesCounted record (the same count again is a no-op), before the
 * SPLIT_READ of that lease. SL_ERR_INVALID: not a deterministic job, no
 * such split, another count for the split (its batches were cut
 * differently); SL_ERR_AGAIN: not the live lease (the worker drops it);
 * the journal, memory. */
sl_err_t sl_master_state_batches_counted(sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                         uint32_t split, uint64_t generation, uint64_t batches,
                                         sl_error_t *err);

/* A deterministic job's global index of the first batch of split in
 * epoch (base), known once every split before it in the epoch's order is
 * counted. @return false when not known yet, not a deterministic job, or
 * no such job, split or epoch. */
bool sl_master_state_order_base(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                uint32_t split, uint64_t *base);

/* A resumed deterministic job's skip rows of split in epoch (the rows
 * handed out before the resume, whose batches the epoch's sequence leaves
 * out: LEASE order_skip), ascending and disjoint: the first cap into out.
 * @return how many there are (0: none, not such a job, another epoch). */
uint32_t sl_master_state_order_skip(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                    uint32_t split, sl_dpp_row_range_t *out, uint32_t cap);

sl_master_read_result_t sl_master_state_split_read(sl_master_state_t *m, const char *job_id,
                                                   uint32_t epoch, uint32_t split,
                                                   uint64_t generation,
                                                   const sl_dpp_row_range_t *empty,
                                                   uint32_t num_empty, sl_error_t *err);

/* A worker could not read the live lease (epoch, split, generation) of
 * job: a corrupt or truncated stripe, an I/O error, a transform failing on
 * its rows. The failure is counted against the split (this epoch, whatever
 * worker reported it) and the split is PENDING again, to be leased to any
 * worker. On its max_failures-th failure (>= 1) the job skips the split
 * when it was submitted with skip_bad_splits (its uncommitted rows are
 * committed as empty and counted as skipped: never delivered, exactly once
 * holds for every other row), else the job fails: no more leases, commits
 * refused (STALE), status failed with the failure. Each step is one
 * journal record (SplitFailed, SplitSkipped, JobFailed). Sync before
 * answering. SL_MASTER_FAIL_STALE when it is not the live lease (not
 * counted) or no such job or split; SL_MASTER_FAIL_ERROR: the journal,
 * memory (err says). */
typedef enum sl_master_split_fail_result {
    SL_MASTER_FAIL_ERROR = -1, /* no answer: err says what failed */
    SL_MASTER_FAIL_RETRY = 0,  /* values as proto/control.proto SplitFailedReply */
    SL_MASTER_FAIL_SKIPPED = 1,
    SL_MASTER_FAIL_JOB_FAILED = 2,
    SL_MASTER_FAIL_STALE = 3
} sl_master_split_fail_result_t;

typedef struct sl_master_split_failure {
    const char *job_id;
    uint32_t epoch, split;
    uint64_t generation;
    const char *file;    /* the data file */
    int32_t stripe;      /* -1: the file as a whole */
    const char *message; /* what failed (no file content) */
    sl_err_t code;
} sl_master_split_failure_t;

sl_master_split_fail_result_t sl_master_state_split_failed(sl_master_state_t *m,
                                                           const sl_master_split_failure_t *f,
                                                           uint32_t max_failures, sl_error_t *err);

/* Static sharding: 1 + the trainer rank split is assigned to (only that
 * rank may commit its rows), 0 when any rank may (dynamic sharding, or an
 * unknown job or split: the commit itself reports those). */
uint32_t sl_master_state_split_rank(const sl_master_state_t *m, const char *job_id, uint32_t split);

/* Is (epoch, split, generation) the split's live lease held by worker? */
bool sl_master_state_lease_live(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                uint32_t split, uint64_t generation, const char *worker);

/* The committed ranges of a split in the job's current epoch (sorted,
 * merged; borrowed: valid until the next call on m). */
sl_err_t sl_master_state_committed(const sl_master_state_t *m, const char *job_id, uint32_t split,
                                   const sl_dpp_row_range_t **ranges, uint32_t *count,
                                   sl_error_t *err);

/* Take back every lease whose expiry is <= now: the split is PENDING again,
 * keeping its acknowledged position. *expired (may be NULL) gets their
 * number. Cost: the number of workers plus the leases of workers whose
 * earliest expiry has passed. */
sl_err_t sl_master_state_expire(sl_master_state_t *m, uint64_t now_ms, uint32_t *expired,
                                sl_error_t *err);

/* ---- client records ------------------------------------------------------------- */

/* A client's record (its remembered commit nonces, bounded by max_clients)
 * lives while the client is active: client_touch says it is connected now;
 * an accepted commit counts too. evict_clients forgets every client not
 * touched and not committing for idle_ms (each one journaled as a
 * ClientEvicted record, so replay forgets it too; the time since a client
 * was last seen is not journaled and restarts at open). *evicted (may be
 * NULL) gets their number. After that a retry of one of its nonces is a new
 * commit: refused as an overlap when the rows were committed (the batch is
 * then dropped), which is why idle_ms must exceed a client's reconnect
 * window (docs/DESIGN.md). */
void sl_master_state_client_touch(sl_master_state_t *m, const char *client_id, uint64_t now_ms);
sl_err_t sl_master_state_evict_clients(sl_master_state_t *m, uint64_t now_ms, uint64_t idle_ms,
                                       uint32_t *evicted, sl_error_t *err);

/* ---- tokens, sharding, metrics ---------------------------------------------------- */

/* A range a client committed but has not handed to its trainer yet. */
typedef struct sl_master_token_exclude {
    uint32_t epoch, split;
    uint64_t from_row, to_row;
    /* of the lease the batch was read under (a Kafka chunk's split may
     * hold another chunk since: state_kafka_token.c); 0: the split's
     * current one */
    uint64_t generation;
} sl_master_token_exclude_t;

/* A version-2 token: the committed ranges of the job's current epoch minus
 * `undelivered` (ranges of other epochs are ignored), as an opaque token
 * (magic, version, XXH3, protobuf ResumeToken). Exact for a job of one
 * rank only; a Kafka job's is version 3. Caller owns *buf, free with
 * sl_free(allocator, *buf, *len) (allocator as in opts). */
sl_err_t sl_master_state_token_encode(const sl_master_state_t *m, const char *job_id,
                                      const sl_master_token_exclude_t *undelivered,
                                      uint32_t num_undelivered, void **buf, size_t *len,
                                      sl_error_t *err);

/* Who asks for a version-4 token: the client, its rank and world size
 * (from its ATTACH), the trainer's checkpoint step when it gave one, and
 * the ranges the client committed but has not handed out. */
typedef struct sl_master_token_req {
    const char *job_id, *client_id;
    uint32_t rank, world_size; /* world_size 0: 1 */
    bool has_step;
    uint64_t step;
    const sl_master_token_exclude_t *undelivered;
    uint32_t num_undelivered;
} sl_master_token_req_t;

/* A version-4 token of a table job (a Kafka job's: version 5, the same
 * per partition in offsets, SL_ERR_AGAIN while the client holds a batch
 * below the partition's kept owners, state_attr.c): the job's epoch, and for it and the
 * previous one the rows this client handed out (its commits minus its
 * undelivered ranges) plus the rows the master committed itself; for the
 * previous epoch also its undelivered ranges. SL_ERR_INVALID when the
 * client holds an undelivered batch of an older epoch. Caller owns *buf as
 * above. */
sl_err_t sl_master_state_token_take(const sl_master_state_t *m, const sl_master_token_req_t *req,
                                    void **buf, size_t *len, sl_error_t *err);

/* Static sharding: assign every split of the job to one of ranks trainer
 * ranks, balancing rows: splits by rows descending (ties: lower split id
 * first) each go to the least-loaded rank; ties between equally loaded
 * ranks go by a rank order drawn from the job's seed. rank_of_split has
 * num_splits entries; rows_per_rank (may be NULL) ranks entries.
 * Reproducible: same splits, seed and ranks give the same assignment. */
sl_err_t sl_master_state_assign_static(const sl_master_state_t *m, const char *job_id,
                                       uint32_t ranks, uint32_t *rank_of_split,
                                       uint64_t *rows_per_rank, sl_error_t *err);

/* The split order of an epoch: order[i] is the i-th split handed out. */
sl_err_t sl_master_state_epoch_order(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                     uint32_t *order, sl_error_t *err);

typedef struct sl_master_state_counters {
    uint64_t leases_granted;
    uint64_t renewals; /* leases renewed */
    uint64_t expiries;
    uint64_t revocations; /* leases revoked by a worker's registration (not counted in expiries) */
    uint64_t completions; /* splits DONE */
    uint64_t releases;    /* split_read leaving the split PENDING */
    uint64_t commits, overlaps, stale_commits, unknown_commits, repeated_commits;
    uint64_t unleased_commits; /* refused: the batch's lease is not live (STALE_EPOCH) */
    uint64_t committed_rows;   /* rows accepted by commits and split_read, every job */
    uint64_t stale_refused;    /* split_read under a dead generation */
    uint64_t epochs_advanced;
    uint64_t journal_records; /* handed to the sink (syncs, compactions: the store's) */
    uint64_t clients_evicted;
    uint64_t split_failures, splits_skipped, jobs_failed;
    uint32_t jobs, workers, clients; /* clients: records remembered now */
    uint64_t pending, leased, done;  /* splits per state, every job */
} sl_master_state_counters_t;

void sl_master_state_counters(const sl_master_state_t *m, sl_master_state_counters_t *out);

/* Check the state machine's invariants (state_check.c lists them): O(the
 * whole state). @return SL_ERR_CORRUPT naming the first one broken. Builds
 * with asserts (common/assert.h) check them as the state changes. */
sl_err_t sl_master_state_check(const sl_master_state_t *m, sl_error_t *err);

/* A canonical text dump of the durable state (jobs, epochs, per split:
 * state, holder, generation, committed ranges; clients and their
 * remembered nonces; not expiries, not counters), equal
 * for two masters in the same state however they got there. Caller owns
 * *out, free with sl_free(allocator, *out, *len + 1). */
sl_err_t sl_master_state_dump(const sl_master_state_t *m, char **out, size_t *len, sl_error_t *err);

#endif

/* Internals of the master's state machine (state.h), shared by its files:
 * state_apply.c (m_apply: the one function that changes the journaled
 * state from a record, live and in replay), state.c (jobs, epochs, the
 * views), state_leases.c (workers, the pending queue, leases),
 * state_commit.c, state_clients.c, state_failure.c, state_persist.c
 * (journal records, tokens) and state_replay.c (snapshots, dump, the
 * replay entry points of state.h that the store, state_store.c, calls).
 * Not an API.
 *
 * A transition (a live call of state.h) checks its request, reserves
 * what applying will need (room for ranges, an owner or client entry, a
 * worker's lease slot: capacity, visible in no view), builds its record
 * and hands it to m_record; the m_do_* and m_apply_* helpers below are
 * m_apply's parts, called from nowhere else (and from the snapshot
 * loader, which restores a whole state). */
#ifndef SLUICE_DPP_MASTER_STATE_INTERNAL_H
#define SLUICE_DPP_MASTER_STATE_INTERNAL_H

#include <protobuf-c/protobuf-c.h>

#include "common/mem.h"
#include "dpp/master/state/order.h"
#include "dpp/master/state/state.h"
#include "master.pb-c.h"

#define NO_WORKER UINT32_MAX

/* The static description of a split (40 bytes). */
typedef struct split_def {
    uint32_t path; /* index in job->paths */
    uint32_t stripe_begin, stripe_end;
    uint64_t first_row, num_rows;
    /* A Kafka chunk: m->next_generation when it was made. Every lease of
     * it has a generation at or above this, every lease of the chunk that
     * held the split before (folded, state_kafka.c) one below. 0: none. */
    uint64_t made_gen;
} split_def;

/* The per-epoch state of a split (48 bytes). */
typedef struct split_st {
    uint64_t generation;   /* of the live lease (LEASED), else of the last one */
    uint64_t expiry;       /* LEASED */
    uint64_t committed;    /* rows in r */
    sl_dpp_row_range_t *r; /* committed ranges: sorted, disjoint, not adjacent; [nr] of [cap] */
    uint32_t nr, cap;
    uint32_t worker;   /* LEASED: index in m->workers */
    uint8_t state;     /* sl_master_split_state_t */
    uint8_t in_heap;   /* its position is in job->heap */
    uint8_t named;     /* scratch of register: named by the worker (0 between calls) */
    uint16_t failures; /* SPLIT_FAILED reports this epoch (saturating) */
} split_st;

/* A partition of a Kafka job (state_kafka.c): its chunks are splits of
 * the job, made in offset order as they are needed. A stream partition's
 * DONE prefix is folded: chunks [0, folded) are done, held by no split
 * (their splits are free for new chunks), every offset below start +
 * folded * chunk delivered or empty. */
typedef struct kpart {
    char *topic;
    int32_t partition;
    int64_t start, stop; /* stop -1: a stream */
    uint32_t *chunks;    /* [nchunks - folded] of [cap]: split index of chunk folded + k */
    uint32_t nchunks, cap;
    uint32_t folded;        /* chunks folded (a stream's only) */
    uint32_t pending, open; /* chunks PENDING, chunks not DONE */
    uint32_t low;           /* chunks [0, low) are DONE */
    int64_t high;           /* the high watermark last told (-1: not known); not journaled */
} kpart;

/* A chunk folded whose split holds another chunk since (state_kafka.c):
 * kept a while, so that a trainer's undelivered batch of it still places
 * in its partition (a token). */
typedef struct kfolded {
    uint32_t split, path;
    uint64_t made_gen, first_row;
} kfolded;
#define M_KAFKA_FOLDED_RING 256
/* A Kafka stream partition's folded chunks below which a version-5 token
 * counts every offset as delivered (its prefix, the claim floor): a
 * trainer may hold a committed batch of one of the last M_KAFKA_ATTR_CHUNKS
 * not handed out yet and still take a token; one older than that is
 * refused a token until it hands the batch out. The owners are kept
 * M_KAFKA_ATTR_CHUNKS further down (the list floor), and a token lists its
 * rank's offsets from there: the tokens of one checkpoint combine exactly
 * while the partition folds at most M_KAFKA_ATTR_CHUNKS chunks between the
 * first and the last of them (state_kafka_token.c refuses the set
 * otherwise). */
#define M_KAFKA_ATTR_CHUNKS 8

/* Who committed a range of an epoch (state_attr.c): owner 0 is the master
 * itself, k >= 1 the client job->owners[k - 1]. Entries of one epoch are
 * disjoint (each is a piece the commit added); sorted and merged only
 * when the list is compacted. */
typedef struct m_attr {
    uint32_t owner, split;
    uint64_t from, to;
} m_attr;
typedef struct m_attr_list {
    m_attr *v;
    uint32_t n, cap;
} m_attr_list;
#define M_OWNER_MASTER 0u
/* Row ranges of epochs, column-wise and sorted by (epoch, split, from)
 * (EpochRanges of proto/master.proto). */
typedef struct m_rset_cols {
    uint32_t *epoch, *split;
    uint64_t *from, *to;
    size_t n;
} m_rset_cols;

typedef struct job {
    char *id;
    uint32_t n, epochs;
    uint32_t cap;   /* room in defs, st, order, pos, heap (>= n; Kafka jobs grow) */
    uint32_t chunk; /* Kafka job: offsets per chunk (> 0); 0: a table job */
    kpart *kp;      /* Kafka job: [nkp] of [kp_cap]; paths[p] is "<topic>/<partition>" of kp[p] */
    uint32_t nkp, kp_cap;
    /* Kafka job: the free splits (of folded chunks), ascending, [nfree] of
     * [cap]; the lowest is reused first. ring: the folded chunks whose
     * split was reused last, [M_KAFKA_FOLDED_RING] (NULL: none yet). */
    uint32_t *free;
    uint32_t nfree;
    kfolded *ring;
    uint32_t ring_next, ring_len;
    uint64_t seed;
    bool shuffle;
    char *spec_json; /* "" when none */
    uint32_t ranks, min_workers, max_workers;
    bool static_sharding;
    uint32_t *rank_of_split; /* [n] when static_sharding, else NULL */
    uint64_t fingerprint;    /* XXH3 of the split list (resume tokens) */
    char **paths;
    uint32_t num_paths;
    uint64_t *path_footer; /* [num_paths]: footer checksums as planned (leases pin them); NULL:
                              none (a Kafka job, an older journal) */
    split_def *defs;       /* [n] */
    split_st *st;          /* [n] */
    uint32_t *order;       /* [n] position -> split, this epoch */
    uint32_t *pos;         /* [n] split -> position */
    uint32_t *heap;        /* [n] min-heap of positions of PENDING splits behind cursor */
    uint32_t heap_len;
    uint32_t cursor; /* positions before it were handed out once this epoch */
    uint32_t epoch;
    uint32_t count[3]; /* splits per state */
    uint64_t committed_rows, total_rows;
    uint64_t batches, samples; /* accepted commits and their samples, every epoch */
    bool skip_bad;             /* on_bad_split "skip" */
    uint64_t plan_fp;          /* the plan's fingerprint (shared passes); 0: none */
    bool share;                /* the spec's "share" */
    uint64_t prefix_fp;        /* the autocache's key; 0: not cacheable */
    bool failed;               /* JobFailed: terminal, see state_failure.c */
    uint32_t fail_split, fail_epoch;
    int32_t fail_stripe, fail_code;
    char *fail_file, *fail_message; /* when failed */
    uint64_t skipped_splits, skipped_rows;
    /* a Parquet job: its row groups, and those (and their rows) statistics ruled out */
    uint64_t pq_row_groups, pq_groups_skipped, pq_rows_skipped;
    /* The sum of st[i].failures over every split, kept as they change
     * (job_status is called per ATTACH and per round: a sum over 1M
     * splits there was a hot spot); replay and snapshots rebuild it. */
    uint64_t split_failures;
    /* Resume tokens (state_attr.c, state_token.c, state_kafka_token.c). */
    uint64_t run_id; /* JobAdded.run_id */
    char **owners;   /* clients that committed in attr[], [nowners] of [cap_owners] */
    uint32_t nowners, cap_owners;
    uint32_t *ohash;     /* open addressing over owners: owner number, 0 empty */
    uint32_t ohash_cap;  /* 2 * cap_owners (a power of two), or 0 */
    m_attr_list attr[2]; /* [0]: epoch - 1, [1]: this epoch */
    uint32_t *attr_last; /* [n]: per split, 1 + its latest entry in attr[1] (0: none) */
    m_rset_cols *later;  /* a resumed job's start ranges of later epochs; NULL: none */
    bool restatic;       /* static sharding over the resumed epoch's rows: redo at next epoch */
    /* Static sharding (state_rank.c): per rank, its epoch ([ranks]; the
     * job's epoch is the lowest) and its splits not DONE; NULL otherwise. */
    uint32_t *rank_epoch, *rank_left;
    /* The deterministic order: this epoch's counts, prefix and bases by
     * position (order.h, state_order.c); NULL: the dynamic order. */
    sl_master_order_t *ord;
    uint32_t order_window; /* positions past the counted prefix a lease may take */
    /* A resumed deterministic job: this epoch's rows handed out before the
     * resume (state_order_skip.c); NULL: none. */
    struct m_order_skip *order_skip;
    /* batch.equal_batches_per_rank (state_equal.c): per rank its batches
     * committed in the epochs of slot epoch % 2 ([2 * ranks]), the quota
     * of each epoch the job finished ([epochs]) and the batches dropped;
     * NULL, NULL, 0 without the option. */
    uint64_t *eq_count, *eq_quota;
    uint64_t eq_dropped, eq_dropped_samples;
    /* per slot-rank: the samples of its batches so far, cumulative, in
     * commit order ([eq_count[k]] of [cap]): what the batches above the
     * quota held (8 bytes a batch, as the attribution's 24) */
    struct m_eq_cum {
        uint64_t *v;
        uint32_t cap;
    } * eq_cum;
} job;

typedef struct lease_ref {
    uint32_t job, split;
} lease_ref;

typedef struct worker {
    char *name;
    uint64_t earliest; /* <= the expiry of each of its leases */
    lease_ref *leases;
    uint32_t nleases, cap;
} worker;

/* A trainer client: the nonces of its last accepted commits, a FIFO ring
 * with an open-addressing index (linear probing, backward-shift delete). */
typedef struct client {
    char *name;
    uint64_t last_ms; /* last seen connected or committing (not journaled: reset at open) */
    uint64_t *ring;   /* [max_answers] */
    uint32_t head, len;
    uint32_t *index; /* [2 * max_answers rounded to a power of two]: ring slot + 1, 0 empty */
    uint32_t index_cap;
} client;

struct sl_master_state {
    const sl_allocator_t *a;
    sl_master_state_opts_t opts;
    job **jobs; /* [max_jobs], NULL slots free */
    worker *workers;
    uint32_t num_workers, cap_workers;
    uint32_t *whash; /* open addressing, [whash_cap] worker index + 1, 0 empty */
    uint32_t whash_cap;
    client *clients;
    uint32_t num_clients, cap_clients;
    uint32_t *chash; /* like whash, over clients */
    uint32_t chash_cap;
    sl_dpp_row_range_t *todo; /* lease_next's todo list, [todo_cap] */
    uint32_t todo_cap;
    uint64_t next_generation;
    uint64_t now_ms; /* the latest time a caller gave (new clients start idle from it) */
    uint64_t runs;   /* jobs added by this process (run ids) */
    sl_master_record_sink_t sink; /* append NULL: none (in memory) */
    uint8_t *scratch;             /* record packing */
    size_t scratch_cap;
    sl_master_state_counters_t c;
};

/* ---- the one Apply (state_apply.c) ---- */

/* What a live transition hands to m_apply beside its record: what the
 * record does not carry (the time of the call) and what the transition
 * made before the record went out, so that applying it cannot fail
 * (m_apply takes ownership of what it uses and clears the field). Replay
 * passes none. */
typedef struct m_live {
    uint64_t now_ms;                /* LeaseGranted: expires at now_ms + lease timeout */
    job *built;                     /* JobAdded: the job, checked and built */
    char *fail_file, *fail_message; /* JobFailed: the job's copies of the failure */
    char *kp_topic, *kp_path;       /* KafkaPartitionAdded: the partition's strings */
} m_live;
#define M_LIVE UINT64_MAX /* the offset m_apply is given for a live record */

/* The only function that changes the journaled state: applies one record,
 * live (after m_record appended it; live may be NULL) or in replay (live
 * NULL, off its offset in the file). Checks the record against the state
 * first: one a live master could not have written is SL_ERR_CORRUPT naming
 * off. A live transition reserved room for everything it needs, so the
 * only failure live is SL_ERR_NOMEM of EpochAdvanced's later ranges
 * (state.c, m_maybe_advance). */
sl_err_t m_apply(sl_master_state_t *m, const Sluice__Master__Record *r, m_live *live, uint64_t off,
                 sl_error_t *err);
/* The live side of every transition: journal rec, then m_apply it. A
 * journal failure changes nothing. live NULL: nothing prepared, now_ms
 * the latest time a caller gave. */
sl_err_t m_record(sl_master_state_t *m, const Sluice__Master__Record *rec, m_live *live,
                  sl_error_t *err);

/* The invariants of one split (state_check.c). */
sl_err_t m_check_split(const sl_master_state_t *m, const job *jb, uint32_t i, sl_error_t *err);

/* state.c and state_leases.c */
job *m_find_job(const sl_master_state_t *m, const char *id, uint32_t *slot);
sl_err_t m_worker_get(sl_master_state_t *m, const char *name, uint32_t *out, sl_error_t *err);
bool m_worker_reserve(sl_master_state_t *m, uint32_t w);
/* Forget worker w's lease of (slot, split). */
void m_worker_drop_lease(worker *w, uint32_t slot, uint32_t split);
/* SL_ERR_NOT_FOUND "no job 'id'". */
sl_err_t m_no_job(const char *id, sl_error_t *err);
sl_err_t m_advance_all(sl_master_state_t *m, sl_error_t *err);
/* Journal and apply an epoch advance when every split of jb is DONE. */
sl_err_t m_maybe_advance(sl_master_state_t *m, job *jb, sl_error_t *err);
/* remaining: balance the rows not committed yet (a resumed job), else
 * whole splits. */
sl_err_t m_static_assign(const sl_master_state_t *m, const job *jb, uint32_t ranks,
                         uint32_t *rank_of_split, uint64_t *rows_per_rank, bool remaining,
                         sl_error_t *err);
/* A job is built from a JobAdded that m_check_job accepted (everything
 * allocated: SL_ERR_NOMEM leaves nothing behind), then linked into a free
 * slot, which cannot fail: so the live call builds, journals, then links,
 * and a journaled job is always one the state holds. replacing: the job
 * of that id is removed after the build, so its id and slot do not count. */
sl_err_t m_check_job(const sl_master_state_t *m, const Sluice__Master__JobAdded *ja, bool replacing,
                     sl_error_t *err);
sl_err_t m_job_build(sl_master_state_t *m, const Sluice__Master__JobAdded *rec, job **out,
                     sl_error_t *err);
void m_job_link(sl_master_state_t *m, job *jb);
void m_job_free(sl_master_state_t *m, job *jb);
void m_job_remove(sl_master_state_t *m, uint32_t slot);
void m_do_lease(sl_master_state_t *m, uint32_t slot, uint32_t split, uint32_t w, uint64_t gen,
                uint64_t expiry);
/* Room for more ranges in the split (a live transition takes it before
 * its record goes to the journal, so that applying the record cannot
 * fail). SL_ERR_NOMEM leaves the ranges as they were. */
sl_err_t m_reserve_ranges(sl_master_state_t *m, job *jb, uint32_t split, uint32_t more,
                          sl_error_t *err);
/* Add [from, to) minus what is committed to the split's ranges (rows
 * counted); SL_ERR_NOMEM / SL_ERR_TOO_LARGE leave them unchanged, and
 * neither happens with room reserved. */
sl_err_t m_add_range(sl_master_state_t *m, job *jb, uint32_t split, uint64_t from, uint64_t to,
                     uint32_t owner, sl_error_t *err);
/* Index of the split's first committed range whose to_row > row (nr
 * when none): a binary search, the ranges being sorted and disjoint. */
uint32_t m_first_after(const split_st *s, uint64_t row);
/* Does [from, to) overlap a committed range of the split? */
bool m_overlaps(const job *jb, uint32_t split, uint64_t from, uint64_t to);
/* A split whose rows are all committed and is not DONE becomes DONE. */
void m_maybe_done(sl_master_state_t *m, uint32_t slot, uint32_t split);
/* Client bookkeeping: find or add (by name); remember an accepted nonce;
 * forget one (state_clients.c; the last client moves into its index). */
sl_err_t m_client_get(sl_master_state_t *m, const char *name, uint32_t *out, sl_error_t *err);
bool m_client_find(const sl_master_state_t *m, const char *name, uint32_t *out);
void m_client_remove(sl_master_state_t *m, uint32_t c);
bool m_client_has(const sl_master_state_t *m, uint32_t c, uint64_t nonce);
void m_client_remember(sl_master_state_t *m, uint32_t c, uint64_t nonce);
void m_free_ranges(const sl_allocator_t *a, split_st *s);
/* Commit the empty ranges [from[i], to[i]) of a split read, then DONE or
 * PENDING. */
sl_err_t m_apply_split_read(sl_master_state_t *m, uint32_t slot, uint32_t split,
                            const uint64_t *from, const uint64_t *to, uint32_t num_empty,
                            sl_error_t *err);
void m_do_release(sl_master_state_t *m, uint32_t slot, uint32_t split, uint8_t new_state);
/* A split being leased leaves the pending queue when it is the next one
 * there (one leased out of order, for a shared pass, stays: peek_pending
 * drops it once it is not PENDING). */
void m_take_pending(job *jb, uint32_t split);
void m_do_advance(sl_master_state_t *m, job *jb);
void m_reset_queue(job *jb);
/* XXH3 of a split list (resume tokens name the splits they were taken over). */
uint64_t m_fingerprint(const Sluice__Master__SplitList *l);

/* state_rank.c: per-rank epochs of a static-sharding job */
/* The epoch a split's state is of: its rank's under static sharding. */
uint32_t m_split_epoch(const job *jb, uint32_t split);
/* A built static job's rank epochs (all the job's) and counts. */
sl_err_t m_rank_init(sl_master_state_t *m, job *jb, sl_error_t *err);
void m_rank_free(const sl_allocator_t *a, job *jb);
/* Recount each rank's splits not DONE (after a bulk change of states or
 * of the assignment). */
void m_rank_recount(job *jb);
/* Do jb's ranks advance on their own now (static, nothing held back for
 * the next epoch)? */
bool m_rank_mode(const job *jb);
/* Is every rank in the job's epoch (a whole-job advance may follow, as a
 * master before per-rank epochs journaled)? */
bool m_rank_level(const job *jb);
/* A rank whose share of its epoch is done and that may begin its next
 * one (not ahead of the job), or UINT32_MAX. */
uint32_t m_rank_ready(const job *jb);
/* Journal and apply the advance of every rank that is ready. */
sl_err_t m_rank_maybe_advance(sl_master_state_t *m, job *jb, sl_error_t *err);
/* The transition of EpochAdvanced{rank_plus_one = r + 1} (m_apply):
 * SL_ERR_CORRUPT (no prefix) for a record that does not fit the state,
 * SL_ERR_NOMEM leaving it unchanged (replay only: a live advance took
 * the room before its record went out). */
sl_err_t m_rank_apply_advance(sl_master_state_t *m, uint32_t slot, uint32_t r, uint32_t epoch,
                              sl_error_t *err);
/* SnapshotJob.rank_epoch (n 0: every rank in the job's epoch). */
sl_err_t m_rank_restore(sl_master_state_t *m, job *jb, const uint32_t *epochs, size_t n,
                        sl_error_t *err);
sl_err_t m_rank_check(const sl_allocator_t *a, const job *jb, sl_error_t *err);
/* m_set_order: the job's split order of its epoch (state.c). */
void m_set_order(job *jb);

/* state_equal.c: equal batches per rank (batch.equal_batches_per_rank) */
/* The counts of a built table job of 2 or more ranks with the option on
 * (SL_ERR_INVALID for another). */
sl_err_t m_equal_init(sl_master_state_t *m, job *jb, bool on, sl_error_t *err);
void m_equal_free(const sl_allocator_t *a, job *jb);
/* Room for one more batch of split's rank in epoch (a live commit takes
 * it before its record goes out; replay when applying). SL_ERR_NOMEM,
 * SL_ERR_TOO_LARGE change nothing. */
sl_err_t m_equal_reserve(sl_master_state_t *m, job *jb, uint32_t split, uint32_t epoch,
                         uint32_t rank_plus_one, sl_error_t *err);
/* Committed.rank_plus_one for a commit from a client of rank
 * rank_plus_one - 1: itself under dynamic sharding with the option (0,
 * not a rank of the job, counts as rank 0), 0 for every other job. */
uint32_t m_equal_rank_plus_one(const job *jb, uint32_t rank_plus_one);
/* m_apply's parts: a batch of samples committed of split in epoch (room
 * reserved); rank r began epoch; the job's epoch `epoch` is over (every
 * rank's count final). */
void m_equal_commit(job *jb, uint32_t split, uint32_t epoch, uint32_t rank_plus_one,
                    uint32_t samples);
void m_equal_rank_began(job *jb, uint32_t r, uint32_t epoch);
void m_equal_job_began(job *jb, uint32_t epoch); /* every rank */
void m_equal_epoch_done(job *jb, uint32_t epoch);
/* The quota of epoch for a commit answer: false when the job has no
 * such option. */
bool m_equal_quota(const job *jb, uint32_t epoch, uint64_t *quota, bool *final);
/* Snapshot fields (borrowed from jb until the snapshot is written), and
 * back (after the ranks' epochs are restored). */
sl_err_t m_equal_pb(const sl_allocator_t *a, const job *jb, Sluice__Master__SnapshotJob *sj,
                    sl_error_t *err);
sl_err_t m_equal_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                         sl_error_t *err);
/* Frees what m_equal_pb allocated in sj. */
void m_equal_pb_free(const sl_allocator_t *a, Sluice__Master__SnapshotJob *sj);

/* state_failure.c: the transitions of a split failure (live and replay) */
void m_apply_split_failed(sl_master_state_t *m, uint32_t slot, uint32_t split);
sl_err_t m_apply_job_failed(sl_master_state_t *m, uint32_t slot,
                            const Sluice__Master__JobFailure *f, sl_error_t *err);
/* Commit the split's uncommitted rows as empty and make it DONE; *rows
 * (may be NULL) gets how many. */
sl_err_t m_apply_split_skipped(sl_master_state_t *m, uint32_t slot, uint32_t split, uint64_t *rows,
                               sl_error_t *err);
void m_free_failure(const sl_allocator_t *a, job *jb);
/* The job fails with f, keeping file and msg (owned from now on). */
void m_set_job_failed(sl_master_state_t *m, uint32_t slot, const Sluice__Master__JobFailure *f,
                      char *file, char *msg);

/* Set a split's state, keeping the counts (the job's, a Kafka partition's). */
void m_split_state(job *jb, uint32_t split, uint8_t state);

/* state_kafka.c: Kafka jobs (partitions, chunks made on demand, tokens v3) */
sl_err_t m_kafka_check_spec(const sl_master_state_t *m, const Sluice__Master__JobSpec *spec,
                            sl_error_t *err);
/* The Kafka part of a job being built: partitions, chunks of the split
 * list checked against their bounds, extra chunks, the ranges. */
sl_err_t m_kafka_build(sl_master_state_t *m, job *jb, const Sluice__Master__JobAdded *rec,
                       sl_error_t *err);
void m_kafka_free(const sl_allocator_t *a, job *jb);
/* Recount every partition's pending / open / low (after a bulk change). */
void m_kafka_recount(job *jb);
/* Every chunk that can exist is made (a stream never is). */
bool m_kafka_exhausted(const job *jb);
/* Fold partition p's DONE prefix (a stream partition's; after a split of
 * it became DONE): cannot fail (room reserved with the splits). */
void m_kafka_fold(job *jb, uint32_t p);
/* The q-th oldest chunk of jb's ring of folded chunks (q < ring_len). */
const kfolded *m_kafka_folded_at(const job *jb, uint32_t q);
/* Every offset of partition p below it is in a DONE chunk. */
int64_t m_kafka_done_below(const job *jb, uint32_t p);
/* A PENDING split whose position may lie behind the cursor (a reused
 * split): queue it (state_leases.c). */
void m_queue_pending(job *jb, uint32_t split);
/* Make the chunks lease_next needs (journaled as one KafkaChunksAdded);
 * the caller made room for a lease first. */
sl_err_t m_kafka_grow(sl_master_state_t *m, uint32_t slot, sl_error_t *err);
sl_err_t m_kafka_apply_chunks(sl_master_state_t *m, const Sluice__Master__KafkaChunksAdded *r,
                              uint64_t off, sl_error_t *err);
sl_err_t m_kafka_apply_partition(sl_master_state_t *m, const Sluice__Master__KafkaPartitionAdded *r,
                                 m_live *live, uint64_t off, sl_error_t *err);
/* Fill spec's kafka fields from jb (borrowed); parts has room for nkp. */
void m_kafka_spec(const job *jb, Sluice__Master__JobSpec *spec,
                  Sluice__Master__KafkaPartition *parts, Sluice__Master__KafkaPartition **ptrs);
/* Who took a token (versions 4 and 5), and the check of a checkpoint's
 * set (state_token.c): one run, one world size, one step where all carry
 * one, every rank exactly once; the message names the token and why. */
typedef struct m_token_who {
    uint64_t run_id;
    uint32_t world_size, rank;
    bool has_step;
    uint64_t step;
} m_token_who;
sl_err_t m_token_who_check(const sl_allocator_t *a, const m_token_who *t, uint32_t count,
                           const char *job_id, sl_error_t *err);
/* req NULL: version 3 (the job's commits minus undelivered), else version
 * 5 (what req's client handed out, req's rank and step). */
sl_err_t m_kafka_token_encode(const sl_master_state_t *m, const job *jb,
                              const sl_master_token_req_t *req,
                              const sl_master_token_exclude_t *undelivered,
                              uint32_t num_undelivered, void **buf, size_t *len, sl_error_t *err);

/* state_attr.c: who committed what (version-4 resume tokens) */
/* The owner of client `name` in jb (added when new). */
sl_err_t m_attr_owner(sl_master_state_t *m, job *jb, const char *name, uint32_t *owner,
                      sl_error_t *err);
/* Room for `more` entries in this epoch's list (a live transition takes it
 * before its record goes out, so that applying the record cannot fail). */
sl_err_t m_attr_reserve(sl_master_state_t *m, job *jb, uint32_t more, sl_error_t *err);
/* Record the rows of [from, to) not committed in the split yet as owner's
 * (called by m_add_range before it adds them). Room: m_attr_reserve or
 * allocated here (replay). */
sl_err_t m_attr_gaps(sl_master_state_t *m, job *jb, uint32_t split, uint64_t from, uint64_t to,
                     uint32_t owner, sl_error_t *err);
/* The pieces of [from, to) not committed in the split. */
uint32_t m_attr_count_gaps(const job *jb, uint32_t split, uint64_t from, uint64_t to);
/* The epoch moved on: this epoch's list becomes the previous one. */
void m_attr_rotate(sl_master_state_t *m, job *jb);
/* A Kafka job's partition p: its owners are kept at and above the list
 * floor (2 x M_KAFKA_ATTR_CHUNKS folded chunks down), and a version-5
 * token counts every offset below the claim floor (M_KAFKA_ATTR_CHUNKS
 * down) as delivered. */
uint64_t m_kafka_attr_floor(const job *jb, uint32_t p);
uint64_t m_kafka_claim_floor(const job *jb, uint32_t p);
/* Forget the owners of partition p's offsets below its floor (a fold
 * raised it); cannot fail. */
void m_attr_kafka_prune(job *jb, uint32_t p);
void m_attr_free(const sl_allocator_t *a, job *jb);
/* After an epoch began: commit its `later` ranges (the master's), redo a
 * resumed job's static assignment over whole splits. */
sl_err_t m_attr_epoch_began(sl_master_state_t *m, uint32_t slot, sl_error_t *err);
void m_cols_free(const sl_allocator_t *a, m_rset_cols *c);
/* A copy of EpochRanges (NULL or empty: *out NULL); checked against jb. */
sl_err_t m_cols_from_pb(sl_master_state_t *m, const job *jb, const Sluice__Master__EpochRanges *e,
                        m_rset_cols **out, sl_error_t *err);
/* Snapshot fields of jb's attribution (borrowed from jb, arrays allocated:
 * free with m_attr_pb_free). */
typedef struct m_attr_pb {
    Sluice__Master__AttributedRanges prev, cur;
    Sluice__Master__EpochRanges later;
    uint32_t *rank_of_split;
} m_attr_pb;
sl_err_t m_attr_pb_build(const sl_master_state_t *m, const job *jb, Sluice__Master__SnapshotJob *sj,
                         m_attr_pb *p, sl_error_t *err);
void m_attr_pb_free(const sl_allocator_t *a, m_attr_pb *p);
/* Restore jb's attribution from its snapshot record. */
sl_err_t m_attr_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                        sl_error_t *err);
/* Lines of the dump. */
typedef void (*m_printf_fn)(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void m_attr_dump(const sl_allocator_t *a, const job *jb, m_printf_fn pf, void *ctx);
void m_rank_dump(const job *jb, m_printf_fn pf, void *ctx);
void m_equal_dump(const job *jb, m_printf_fn pf, void *ctx);
/* A run id for a job added now. */
uint64_t m_new_run_id(sl_master_state_t *m, const char *job_id);
/* Resume from version-4 tokens (state_token.c): the set checked, the job
 * built and journaled (count >= 1, every token of version 4). */
sl_err_t m_token_resume_v4(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                           const void *const *tokens, const size_t *lens, uint32_t count,
                           bool replace, sl_error_t *err);

/* state_order.c: the deterministic order (order.h) in a job */
/* The order of a job being built from spec (NULL for the dynamic order);
 * splits of no rows counted at once (0 batches). */
sl_err_t m_order_build(sl_master_state_t *m, job *jb, const Sluice__Master__JobSpec *spec,
                       sl_error_t *err);
void m_order_free(job *jb);
/* The epoch moved on (set_order ran): nothing counted but empty splits. */
void m_order_advance(job *jb);
/* Whether split is counted this epoch (always, in the dynamic order): a
 * deterministic job's split is DONE only once every row is committed and
 * it is counted. */
bool m_order_split_counted(const job *jb, uint32_t split);
/* Whether split may be leased now (always, in the dynamic order). */
bool m_order_may_lease(const job *jb, uint32_t split);
sl_err_t m_order_apply_counted(sl_master_state_t *m, const Sluice__Master__BatchesCounted *r,
                               uint64_t off, sl_error_t *err);
/* The invariants: order.h's, every LEASED split inside the window. */
sl_err_t m_order_check(const job *jb, sl_error_t *err);
/* Lines of the dump: the window, the prefix and every count. */
void m_order_dump(const job *jb, m_printf_fn pf, void *ctx);
/* Snapshot: per split 1 + its count, 0 uncounted ([n], allocated: free
 * with m_order_pb_free); restore from it. */
sl_err_t m_order_pb_build(const sl_master_state_t *m, const job *jb,
                          Sluice__Master__SnapshotJob *sj, sl_error_t *err);
void m_order_pb_free(const sl_allocator_t *a, Sluice__Master__SnapshotJob *sj);
sl_err_t m_order_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                         sl_error_t *err);

/* state_order_skip.c: a resumed deterministic job's skip rows (this
 * epoch's rows handed out before the resume, LEASE order_skip). */
/* Set them (any order; replacing the epoch's, none when n is 0 or the job
 * is not deterministic); count: splits wholly skipped counted 0 batches
 * (not when a snapshot's counts follow). SL_ERR_NOMEM, SL_ERR_CORRUPT (a
 * range outside the splits, or a count that disagrees). */
sl_err_t m_order_skip_set(sl_master_state_t *m, job *jb, const uint32_t *split,
                          const uint64_t *from, const uint64_t *to, size_t n, bool count,
                          sl_error_t *err);
/* An epoch began with c's ranges [i0, i1) (its `later`) as its skip rows. */
sl_err_t m_order_skip_epoch(sl_master_state_t *m, job *jb, const m_rset_cols *c, size_t i0,
                            size_t i1, sl_error_t *err);
void m_order_skip_free(job *jb);
/* The invariant: every skip row committed. */
sl_err_t m_order_skip_check(const job *jb, sl_error_t *err);
sl_err_t m_order_skip_pb_build(const sl_master_state_t *m, const job *jb,
                               Sluice__Master__SnapshotJob *sj, sl_error_t *err);
void m_order_skip_pb_free(const sl_allocator_t *a, Sluice__Master__SnapshotJob *sj);
sl_err_t m_order_skip_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                              sl_error_t *err);
void m_order_skip_dump(const job *jb, m_printf_fn pf, void *ctx);

/* state_persist.c, state_replay.c */
#define M_TOKEN_HEADER_BYTES 16 /* magic | u32 version | u64 XXH3(payload) */
/* Write a token's header in front of its payload bytes. */
void m_token_seal(uint8_t *out, uint32_t version, size_t payload);
/* Check a token's magic, length and checksum; *version gets its version. */
sl_err_t m_token_check(const void *token, size_t len, uint32_t *version, sl_error_t *err);
/* r (sorted, disjoint) minus ex (sorted by from) into out (room for
 * nr + ne pieces). @return the pieces. */
size_t m_ranges_minus(const sl_dpp_row_range_t *r, size_t nr, const sl_dpp_row_range_t *ex,
                      size_t ne, sl_dpp_row_range_t *out);
int m_by_from(const void *x, const void *y); /* sl_dpp_row_range_t by from_row */
/* A set of row ranges of splits (or partitions), sorted by (split, from)
 * and disjoint. */
typedef struct m_rset {
    uint32_t *split;
    uint64_t *from, *to;
    size_t n, cap;
} m_rset;
bool m_rset_init(const sl_allocator_t *a, m_rset *r, size_t cap);
void m_rset_free(const sl_allocator_t *a, m_rset *r);
/* The ranges (any order) sorted, overlapping or touching ones merged. */
bool m_rset_of(const sl_allocator_t *a, const uint32_t *split, const uint64_t *from,
               const uint64_t *to, size_t n, m_rset *r);
/* out = x intersected with y. */
bool m_rset_intersect(const sl_allocator_t *a, const m_rset *x, const m_rset *y, m_rset *out);
/* A job spec as its JobSpec record (borrowing from the spec). */
typedef struct m_spec_pb {
    Sluice__Master__JobSpec spec;
    Sluice__Master__SplitList list;
    Sluice__Master__KafkaPartition *kparts, **kptrs;
    const sl_allocator_t *a;
    size_t n, cap_paths, nk;
} m_spec_pb;
sl_err_t m_spec_pb_build(const sl_master_state_t *m, const sl_master_state_job_spec_t *in,
                         m_spec_pb *p, sl_error_t *err);
void m_spec_pb_free(m_spec_pb *p);
/* Check, build, journal and link a job (replacing: in place of the job of
 * its id, removed once the new one is built). */
sl_err_t m_journal_and_add(sl_master_state_t *m, Sluice__Master__JobAdded *ja, bool replacing,
                           sl_error_t *err);
/* Resume a Kafka job from tokens (state_kafka.c). */
sl_err_t m_kafka_resume(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                        const void *const *tokens, const size_t *lens, uint32_t count, bool replace,
                        sl_error_t *err);
/* Hand rec to the sink (when there is one); changes no state. */
sl_err_t m_journal(sl_master_state_t *m, const Sluice__Master__Record *rec, sl_error_t *err);
/* The journal's bytes of one record: unpacked and applied (m_apply). */
sl_err_t m_apply_record(void *ctx, const uint8_t *payload, size_t len, uint64_t offset,
                        sl_error_t *err);
sl_err_t m_apply_snapshot(void *ctx, const uint8_t *payload, size_t len, sl_error_t *err);
/* The whole state as a packed Snapshot (state_replay.c). Caller frees
 * *buf (*len bytes). */
sl_err_t m_snapshot_encode(const sl_master_state_t *m, uint8_t **buf, size_t *len, sl_error_t *err);
bool m_name_ok(const sl_master_state_t *m, const char *s);
/* Check a JobAdded (from the API or from disk) and insert the job. */
sl_err_t m_add_job(sl_master_state_t *m, const Sluice__Master__JobAdded *ja, sl_error_t *err);
sl_err_t m_check_spec(const sl_master_state_t *m, const Sluice__Master__JobSpec *spec,
                      sl_error_t *err);

#endif

/* Split sources: where a worker's splits come from. The worker's reader
 * thread consumes one interface, sl_worker_source_t; each source is one
 * file behind it:
 *
 *   table_source.c   a table's splits, epoch after epoch, on this worker
 *                    alone (sluice read, sluice worker --job)
 *   lease_client.c   leases of a DPP master (sluice worker --master),
 *                    through sl_worker_lease_client_source
 *   kafka_source.c   chunks of Kafka partitions (a job with source.kafka):
 *                    on this worker alone, or the chunks a master leases
 *                    (wrapping the lease client's source); it reads its
 *                    own rows (read)
 *   parquet_source.c a Parquet dataset read in place (a job with
 *                    source.parquet): wraps the table source over the
 *                    dataset's splits, or the lease client's source, and
 *                    reads its own rows (read; parquet_source.h)
 *
 * The contract between a source and the reader's one stripe loop
 * (reader.c), which is all a new source (the Kafka stream) has to keep:
 *
 *  - Every unit of work is a split of an epoch with its todo: the rows of
 *    the split to read, as ascending, disjoint, non-empty row ranges inside
 *    the split's rows. A split read whole has one todo range [0, num_rows)
 *    (none when it has no rows).
 *    The loop reads only the stripes that hold todo rows and, of those,
 *    only the todo rows; todo ranges that break these rules fail the worker
 *    (SL_ERR_PROTOCOL, naming the split and the range).
 *  - A unit either has no lease (lease NULL: the rows are this worker's
 *    alone, batches run on across split boundaries; sluice worker --job)
 *    or carries the source's lease handle. A lease's rows are batched by
 *    row range: each batch covers one contiguous range [from_row, to_row)
 *    of the split inside one todo range, and the batch carries the lease
 *    (sl_worker_lease_origin_t) from the batcher through the transform
 *    threads to the server, which hands it to the lease hooks and puts it
 *    in BatchInfo. The batches and the empty ranges given to done tile the
 *    todo exactly (docs/WORKER.md, "Batches are row ranges").
 *  - next runs on the reader thread and may block until there is work;
 *    done follows every unit next returned once the loop is through with
 *    it: its todo rows read, its split failed (after lease_failed), or its
 *    lease no longer live. A worker that stops or fails mid-unit does not
 *    call done; destroy then frees what the source handed out. The lease
 *    hooks run on the reader, transform and server threads, some under
 *    the server's lock: they take only the source's own lock and never
 *    call into the worker.
 *  - A source with leases sets at least lease_live (the worker then
 *    shuffles a batch's rows only among themselves); one without leases
 *    leaves every lease hook NULL. cancel is for a source whose next can
 *    block or that runs threads of its own.
 *
 * Adding a source: its file (sl_worker_source_<name>_new filling an
 * sl_worker_source_t), its constructor declared here or in its own header,
 * and the command that picks it (src/cli/worker.c). Nothing in the reader,
 * batcher or server changes. */
#ifndef SLUICE_DPP_WORKER_SOURCE_H
#define SLUICE_DPP_WORKER_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/age.h"
#include "dpp/split.h"
#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/warehouse.h"

/* One unit of work: the todo rows of a split of an epoch. */
typedef struct sl_worker_work {
    const sl_wh_split_t *split; /* borrowed until done is called (or the source destroyed) */
    uint32_t epoch;
    uint64_t split_id; /* stable id of the split within the job */
    /* [num_todo] ascending, disjoint, non-empty, inside the split's rows:
     * read only these (borrowed until done). The whole split: one range
     * [0, split->num_rows), none when it has no rows. */
    const sl_dpp_row_range_t *todo;
    uint32_t num_todo;
    /* Under a lease (NULL / 0 otherwise): */
    void *lease; /* the source's handle, given back to the lease hooks */
    uint64_t generation;
    uint32_t rank_plus_one; /* static sharding: 1 + the trainer rank to serve; 0: any */
    /* A leased Kafka chunk (proto/control.proto Lease kafka_topic): its
     * topic (borrowed like split) and partition; row r of the split is
     * offset split->first_row + r. NULL: a table split. */
    const char *kafka_topic;
    int32_t kafka_partition;
    /* The autocache (docs/DESIGN.md "Autocache"): the split's cache file
     * (borrowed like split; NULL: none) and what to do with it. */
    const char *cache_file;
    uint32_t cache_mode; /* SL_WORKER_CACHE_* */
    /* The deterministic order (docs/DESIGN.md "A deterministic order";
     * under a lease): order_ranks > 0 says the lease is in it, batch g
     * going to rank g mod order_ranks; the reader reads the whole split,
     * todo naming the rows still to send (the server's hold drops the
     * others' batches). order_base_plus_one: 1 + the split's base when
     * known (0: not yet, sl_worker_order_base tells it later). */
    uint32_t order_ranks;
    uint64_t order_base_plus_one;
    /* A resumed job's skip rows of the split ([order_skip_count],
     * ascending, disjoint; borrowed like todo; NULL: none): batches wholly
     * inside them were handed out before the resume, neither numbered nor
     * counted (sl_worker_server_order_skip). */
    const sl_dpp_row_range_t *order_skip;
    uint32_t order_skip_count;
} sl_worker_work_t;

/* Values match Lease.CacheMode in proto/control.proto. */
enum { SL_WORKER_CACHE_NONE = 0, SL_WORKER_CACHE_WRITE = 1, SL_WORKER_CACHE_READ = 2 };

/* The lease part of a batch's origin (the rest is the batch's
 * sl_batch_origin_t): the lease its rows were read under and the rows of
 * the split it covers, which BatchInfo carries for the trainer client's
 * COMMIT. The batcher fills it (sl_worker_batcher_begin_range), and it
 * travels with the batch to the server. handle NULL: a batch of no lease. */
typedef struct sl_worker_lease_origin {
    void *handle;              /* the work's lease: given to the lease hooks */
    uint32_t split;            /* the work's split_id */
    uint64_t generation;       /* of the lease */
    uint64_t from_row, to_row; /* rows [from_row, to_row) of the split, filtered ones included */
    uint32_t rank_plus_one;    /* 1 + the only trainer rank it may go to; 0: any */
    /* The deterministic order: its lease is one (sl_worker_server_order_begin),
     * so the server holds the batch until its turn; then 1 + its global
     * index g, set by the server (0: not yet, or no such order). */
    bool ordered;
    uint64_t order_g_plus_one;
} sl_worker_lease_origin_t;

/* What a source that reads its own rows (read, below) hands the stripe
 * loop: rows in column form (borrowed for the call) covering rows
 * [first, end) of the unit's split; end - first may exceed the row count
 * (rows that come as no row: a Kafka partition's gaps and bad records).
 * Consecutive calls of one unit tile its todo. owned: NULL, or where the
 * source offers the arena that holds every buffer of rows (names
 * included): the loop may take it (setting *owned to NULL, and then owns
 * it: the rows become a batch without a copy, sl_worker_batcher_add_owned)
 * or leave it to the source, which then reuses it. */
typedef sl_err_t (*sl_worker_rows_fn)(void *fn_ctx, const sl_wh_rows_t *rows, uint64_t first,
                                      uint64_t end, sl_arena_t **owned, sl_error_t *err);

/* A record source's counts (the records hook). Ages: now minus each
 * record's CreateTime when the source handed its row on, in buckets of
 * at most SL_WORKER_AGE_BOUNDS_MS[i] ms (the last: any). */
#define SL_WORKER_AGE_BUCKETS SL_AGE_BUCKETS /* common/age.h: the trainer's too */
#define SL_WORKER_AGE_BOUNDS_MS SL_AGE_BOUNDS_MS
typedef struct sl_worker_records {
    uint64_t read, bad;
    uint64_t pauses;      /* partitions paused for back-pressure (the budget full) */
    uint64_t wakes;       /* fetcher wakes after a drained queue (sl_kafka_read_stats_t.wakes) */
    uint64_t handed_back; /* stream chunks handed back at the partition's end (other work waited) */
    uint64_t age_buckets[SL_WORKER_AGE_BUCKETS]; /* not cumulative */
    uint64_t age_count, age_sum_ms;
    /* bad records the dead-letter topic acknowledged, and those it did not
     * take (could not be produced, or not delivered) */
    uint64_t dead_letter, dead_letter_failed;
} sl_worker_records_t;

/* A shared pass (docs/DESIGN.md, "Shared passes"): a lease of the same
 * split, with the same todo, of another job of the same plan fingerprint,
 * whose trainers get every batch of the lease read too. */
#define SL_WORKER_SHARE_MAX 16
typedef struct sl_worker_lease_member {
    void *handle;        /* the member lease: given to lease_live and lease_retire */
    const char *job_id;  /* its job (borrowed for the call) */
    uint64_t generation; /* its lease's */
} sl_worker_lease_member_t;

typedef struct sl_worker_source {
    /* The next split to read (called from the reader thread only; may
     * block until there is work). @return SL_OK, SL_ERR_CLOSED when there
     * are no more, or an error. */
    sl_err_t (*next)(void *ctx, sl_worker_work_t *out, sl_error_t *err);
    /* Every todo row of w has been read and handed to the batcher (may be
     * NULL). empty[0..num_empty): the rows of w's todo that went into no
     * batch (all filtered out, or a short batch dropped by drop_last); w
     * without a lease: none. Also called, with nothing read, for a lease
     * that stopped being live mid-way or whose split failed. */
    void (*done)(void *ctx, const sl_worker_work_t *w, const sl_dpp_row_range_t *empty,
                 uint32_t num_empty);
    /* The split of the unit next hands out i + 1 calls from now (i = 0:
     * the very next one), when the source knows it now; NULL when not
     * (may be NULL itself: never known). From the reader thread only, as
     * next: for the read-ahead of a file's stripes across splits
     * (sl_wh_reader_set_ahead_end). */
    const sl_wh_split_t *(*peek)(void *ctx, uint32_t i);
    /* Frees ctx (may be NULL). */
    void (*destroy)(void *ctx);
    /* Wake and stop: next returns SL_ERR_CLOSED from now on and the
     * source's threads end (may be NULL). Called by sl_worker_stop. */
    void (*cancel)(void *ctx);
    /* Lease hooks (may be NULL). made: a batch of the lease was produced.
     * live: may its batches still be read and sent (false: revoked)?
     * retire: a batch of the lease is gone (acknowledged when acked, else
     * dropped). live and retire run with the server's lock held: they take
     * only the source's own lock. */
    void (*lease_made)(void *ctx, void *lease);
    bool (*lease_live)(void *ctx, void *lease);
    void (*lease_retire)(void *ctx, void *lease, bool acked);
    /* The lease's split cannot be read (may be NULL: the worker fails
     * instead): a corrupt or truncated stripe, an I/O error, a transform
     * failing on its rows. code and msg say what (msg names file and
     * stripe, never quotes file content), stripe which one (-1: not one
     * stripe). The source stops treating the lease as live (its batches not
     * yet sent are dropped) and reports it; the worker goes on with other
     * leases. From the reader (done follows) or a transform thread (before
     * the failing batch is retired); takes only the source's own lock. */
    void (*lease_failed)(void *ctx, void *lease, sl_err_t code, int32_t stripe, const char *msg);
    /* Shared passes (may be NULL: none): the other jobs' leases a batch of
     * lease (bytes: its frame's) also goes to, at most cap of them, each
     * counted as made (as lease_made) for the batch's copy it gets. Runs
     * with the server's lock held; takes only the source's own lock.
     * @return how many. */
    uint32_t (*lease_members)(void *ctx, void *lease, uint64_t bytes, sl_worker_lease_member_t *out,
                              uint32_t cap);
    /* A batch of the lease dropped before the server had it (may be NULL:
     * lease_retire then): retire it, and know that it will get no copies
     * (the members of a shared pass are read once every batch of their
     * primary was queued or dropped). */
    void (*lease_dropped)(void *ctx, void *lease);
    /* A lease in the deterministic order was read whole: it cut batches
     * batches from the split's first row (dropped ones too), its SPLIT_READ
     * count. From the reader, before done; takes only the source's own
     * lock (may be NULL). */
    void (*lease_counted)(void *ctx, void *lease, uint64_t batches);
    /* A source whose rows are not table stripes (the Kafka source,
     * kafka_source.c) reads w's todo itself and hands each stripe of rows
     * to fn; the loop filters and batches them as a table stripe's rows.
     * NULL: the loop reads the split's table stripes. Each stripe is one
     * batch: under a lease it covers exactly the stripe's rows [first,
     * end) (its rows are sorted by session, not numbered by place; the
     * batcher takes them as one unit, sl_worker_rows_origin_t.end_row),
     * and a stripe with no kept row is an empty range of SPLIT_READ.
     * The stripes of one todo range tile it. @return SL_ERR_CLOSED when
     * cancelled or when fn stopped it (the lease stopped being live),
     * fn's error, or the source's (SL_ERR_NOT_FOUND: offsets retention
     * deleted, a split failure). */
    sl_err_t (*read)(void *ctx, const sl_worker_work_t *w, sl_worker_rows_fn fn, void *fn_ctx,
                     sl_error_t *err);
    /* Is other work waiting for the reader (may be NULL: no)? A lease not
     * handed to it yet, or one the master grants when asked now (asked at
     * most every few hundred ms). From the reader thread, while read waits
     * at a stream's head: yes lets it hand the rest of that chunk back
     * (docs/KAFKA.md, "A head chunk is handed back"). */
    bool (*other_work)(void *ctx);
    /* Records consumed so far, how many were bad (skipped, their rows
     * read), and the age of the good ones when read: a source of records
     * (Kafka) says; may be NULL. Any thread. */
    void (*records)(void *ctx, sl_worker_records_t *out);
    void *ctx;
} sl_worker_source_t;

/* The Kafka source (kafka_source.c) of job (borrowed; its source.kafka
 * block, batch size and epochs), decoding the features features[nf] (the
 * plan's read features; borrowed) of each record, with librdkafka's
 * prefetch bounded by prefetch bytes (its queue and one fetch, unless the
 * job's properties size them): every partition of the
 * job's topics from its start offset, in chunks of kafka.chunk offsets,
 * chunk i of every partition before chunk i + 1 of any; with a stop, up to
 * it, epoch after epoch; without, for ever. No leases. Partitions and
 * offsets are looked up on the first next. budget (the worker's; may be
 * NULL): the partition being read is paused while it is at or above 7/8
 * of its limit and resumed below 3/4 (the low-water mark). @return
 * SL_ERR_INVALID (a consumer property), SL_ERR_NOMEM. */
struct sl_pipeline_job;
struct sl_worker_budget;
sl_err_t sl_worker_source_kafka_new(const struct sl_pipeline_job *job, const char *const *features,
                                    uint32_t nf, uint64_t prefetch, struct sl_worker_budget *budget,
                                    const sl_allocator_t *a, sl_worker_source_t *out,
                                    sl_error_t *err);

/* The Kafka source of a job under a master: *src (the lease client's
 * source, taken over, also on failure) gives the units, each a leased
 * chunk (sl_worker_work_t kafka_topic, kafka_partition), and keeps the
 * lease hooks; this source reads each unit's todo offsets from the
 * brokers (assign, seek to each todo range, no consumer group). *src
 * becomes the combined source. @return as sl_worker_source_kafka_new. */
sl_err_t sl_worker_source_kafka_leased_new(const struct sl_pipeline_job *job,
                                           const char *const *features, uint32_t nf,
                                           uint64_t prefetch, struct sl_worker_budget *budget,
                                           const sl_allocator_t *a, sl_worker_source_t *src,
                                           sl_error_t *err);

/* The table source (table_source.c) over splits (borrowed; must outlive
 * the source): for each epoch 0..epochs-1 every split once, whole and
 * without a lease, in order, or in a permutation drawn from (seed, epoch)
 * when shuffle. split_id is the split's index in splits. @return
 * SL_ERR_NOMEM. */
sl_err_t sl_worker_source_table_new(const sl_wh_splits_t *splits, uint32_t epochs, bool shuffle,
                                    uint64_t seed, const sl_allocator_t *a, sl_worker_source_t *out,
                                    sl_error_t *err);

#endif

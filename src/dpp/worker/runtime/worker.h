/* The DPP worker: runs one job's pipeline over the splits a split source
 * hands it and serves the encoded batches to trainer clients.
 *
 *   split source ──► reader thread: open split, read stripes (projection =
 *   the plan's read features), filter, batch (batcher.h)
 *        ──► bounded queue ──► N transform threads: dedup, transform, encode
 *        ──► ready queue ──► server (server.h) ──► trainer clients
 *
 * When every file of the table stores exactly the job's dedup groups
 * (storage dedup, RecD) and the job has no shuffle window, the reader
 * hands the groups over deduplicated and they travel as stored: unique
 * rows are decoded, batched, transformed and sent once, never expanded
 * and hashed again (filters read a group's features through its inverse
 * indices).
 *
 * With threads N > 1 the reader thread hands each stripe to one of N
 * stripe lanes (lanes.c), which reads and filters it and, once the reader
 * has batched it, makes its fused batches: N stripes are decoded,
 * transformed and encoded at once (docs/WORKER.md "Threads").
 *
 * Batching happens on the one reader thread, in stripe order, so the
 * batches of a job (their rows, order of rows and origins) do not depend
 * on the number of threads or on timing; lanes and transform threads only
 * change the order in which finished batches become ready. Batches cross
 * stripe and split boundaries, never epochs.
 *
 * Memory: a budget of memory_limit bytes covers the stripe being read, every
 * batch between the batcher and the encoder (its arena) and every encoded
 * batch until a client acknowledges it. A stage that would pass the limit
 * waits (back-pressure) instead of growing. The limit must hold a stripe,
 * the batch being built and a batch with its frame: a wait that could
 * never end is refused, and the worker fails naming what did not fit.
 *
 * Splits come from a split source (source.h): the table source enumerates
 * a table's splits epoch after epoch, in table order or shuffled with the
 * job seed (shuffle_splits); the lease client (lease_client.h) leases them
 * from a DPP master.
 *
 * Every unit of work names its todo rows (a whole split: one range), and
 * the reader (reader.c, one stripe loop for every source) reads only the
 * stripes that hold them, and of those only those rows. Under a master (a
 * unit with a lease) each batch covers one contiguous row range
 * [from_row, to_row) of one split, the rows its filters dropped included:
 * a batch ends at its last row, or at the end of a todo range (a short
 * batch; dropped with drop_last, its rows then reported as empty), so the
 * batches and the empty ranges of a lease tile its todo exactly. A shuffle
 * window shuffles rows within a batch only (window = batch size) there.
 * Batches carry the lease (split, generation, range, rank) in the lease
 * part of their origin from the batcher to the server; the source is told
 * when each is made and retired (lease hooks). */
#ifndef SLUICE_DPP_WORKER_WORKER_H
#define SLUICE_DPP_WORKER_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "dpp/pipeline/job.h"
#include "dpp/worker/server/server.h"
#include "dpp/worker/source/source.h"
#include "sluice/err.h"
#include "warehouse/warehouse.h"

typedef struct sl_worker_opts {
    const char *listen; /* "host:port"; NULL: "127.0.0.1:0" */
    /* Cores to use; 0: the online cores. N > 1: N stripe lanes read,
     * filter and make the fused batches of N stripes at once (reader.c,
     * lanes.c), and N transform threads take the batches the fused path
     * does not make; 1: one reader thread and one transform thread. */
    uint32_t threads;
    uint64_t memory_limit; /* bytes; 0: 256 MiB */
    uint32_t max_credits;  /* unacknowledged batches per client; 0: 16 */
    const char *worker_id; /* NULL: "worker-<pid>" */
    /* NULL next: the local source over the job's table (job epochs, shuffle
     * and seed). Otherwise the worker takes ownership (destroy is called). */
    sl_worker_source_t source;
    const sl_allocator_t *allocator; /* NULL: default */
    /* has_listen_fd: serve on listen_fd, a listening socket bound to
     * listen_port (the worker owns it, also when start fails), instead of
     * binding listen: a master mode worker tells its serve address before
     * it knows its job. */
    bool has_listen_fd;
    int listen_fd;
    uint16_t listen_port;
    const char
        *job_id; /* in WELCOME and BatchInfo; NULL: the job's id (a master's id may differ) */
    /* Trainer port limits and peers (server.h): */
    const char *cluster_secret; /* clients must prove they hold it; NULL: none (then only a
                                   loopback listen address is accepted) */
    uint32_t max_clients;       /* client connections at once; 0: 256 */
    int client_conn_idle_ms;    /* close a client silent this long holding no batch; 0: 60000 */
    /* Encoded batches waiting to be sent to a client before the transform
     * threads wait (the read-ahead, bounded in batches as well as by
     * memory_limit); 0: SL_WORKER_DEFAULT_QUEUED_PER_THREAD per transform
     * thread, at least SL_WORKER_DEFAULT_QUEUED_MIN. */
    uint32_t max_queued;
    /* Make every batch through the transform threads, never by the fused
     * path (docs/WORKER.md, "The fused path"): for tests and benchmarks
     * that compare the two. */
    bool no_fused;
    /* Run every transform on the batches, none inside the table reader
     * (docs/WORKER.md, "Transforms at decode"): for tests and benchmarks
     * that compare the two. */
    bool no_decode_maps;
    /* The frame heap of the shared-memory hand-over (docs/WORKER.md
     * "Shared memory"): trainers on this host map it and are sent
     * descriptors instead of frames. Its size in bytes; 0: half of
     * memory_limit, at most SL_WORKER_DEFAULT_SHM_MAX. Frames in it count
     * in memory_limit as any other. no_shm: none (every frame goes over the
     * socket). */
    uint64_t shm_bytes;
    bool no_shm;
    /* Acknowledge every batch as soon as it is made and send it to no
     * client: the worker's pipeline alone, with no trainer competing for
     * the cores (bench/threads.c). The job ends when its batches are made. */
    bool discard;
    /* One attempt of an object store request of the table's reads (S3
     * tables; transfer included), before the store's retries; 0: the
     * store's default (60 s). */
    uint32_t store_timeout_ms;
    uint32_t store_max_attempts; /* tries of one such request; 0: the store's default (5) */
} sl_worker_opts_t;

#define SL_WORKER_DEFAULT_SHM_MAX (1ull << 30)

#define SL_WORKER_DEFAULT_QUEUED_PER_THREAD 2
#define SL_WORKER_DEFAULT_QUEUED_MIN 4

sl_worker_opts_t sl_worker_opts_default(void);

#define SL_WORKER_MAX_GROUPS 16

typedef struct sl_worker_group_stats {
    char name[64];
    uint64_t rows, unique_rows; /* summed over batches */
    double factor;              /* rows / unique_rows */
} sl_worker_group_stats_t;

typedef struct sl_worker_stats {
    uint32_t threads;
    uint32_t lanes;  /* stripe lanes reading (docs/WORKER.md "Threads"); 0: the reader reads */
    bool dedup_form; /* the table stores the job's dedup groups: read and sent as stored */
    uint64_t splits, stripes, rows_read, rows_kept, rows_dropped;
    uint64_t splits_failed; /* leases whose split could not be read (reported, not fatal) */
    /* A Kafka job: records consumed, and of them bad ones (no or another
     * format header, a value that does not decode, features that do not
     * fit the schema: skipped, their offsets read). 0 for a table. */
    uint64_t records_read, records_bad;
    /* ... times the partition being read was paused: the budget reached
     * 7/8 of the limit (resumed below 3/4) */
    uint64_t kafka_pauses;
    /* ... times the fetcher was woken after a read drained a queue that had
     * reached librdkafka's thresholds (kafka/chunk.c, wake_fetcher) */
    uint64_t kafka_wakes;
    /* ... stream chunks handed back at their partition's end, the rest
     * left for a later lease, because other work waited (kafka_source.c) */
    uint64_t kafka_handed_back;
    /* ... and their ages when read (source.h, sl_worker_records_t) */
    uint64_t age_buckets[14], age_count, age_sum_ms;
    /* ... bad ones the dead-letter topic acknowledged, and those it did not
     * take (source.kafka.dead_letter_topic; 0 without one) */
    uint64_t records_dead_letter, records_dead_letter_failed;
    uint64_t batches, samples;              /* encoded */
    uint64_t batches_fused;                 /* of them, made by the fused path (docs/WORKER.md) */
    uint64_t bytes_encoded, bytes_expanded; /* encoded; and had dedup been off */
    uint32_t num_groups;
    sl_worker_group_stats_t groups[SL_WORKER_MAX_GROUPS];
    /* busy time per stage (summed over threads) */
    uint64_t read_ns;   /* open, read, decode stripes */
    uint64_t filter_ns; /* filter and batch (gather) */
    uint64_t dedup_ns, transform_ns, encode_ns;
    /* of encode_ns, the fused batches' time less a plain copy of their
     * frames at this machine's memcpy rate: their transforms (the
     * autocache's compute time counts transforms, not the copy a cached
     * batch's encode pays too) */
    uint64_t fused_transform_ns;
    uint64_t backpressure_ns; /* stages waiting for memory */
    uint64_t cpu_ns;          /* CPU time of the pipeline and server threads that have exited */
    /* The autocache (docs/DESIGN.md "Autocache"): batches served from
     * cache files (their samples, encoded bytes, and the reader's time
     * reading them, waits for memory or the queue excluded), cache reads
     * that fell back to computing, cache files written (bytes, time). The
     * stage times above are of computed batches only (encode: of both). */
    uint64_t cache_batches, cache_samples, cache_bytes_encoded, cache_read_ns;
    uint64_t cache_fallbacks;
    uint64_t cache_files_written, cache_bytes_written, cache_write_ns;
    uint64_t source_bytes; /* decoded bytes of the stripes read from the source */
    /* A table in a store: stripes fetched ahead while the one before was
     * decoded, and those not, as --memory-limit had no room for them then
     * (docs/STORAGE.md, "Memory"); counted when a file's reader closes. */
    uint64_t read_ahead, read_ahead_skipped;
    uint64_t read_ahead_dropped; /* fetched ahead, then dropped for room (or never read) */
    /* A Parquet job (source.parquet): the row groups of the dataset's
     * files, and those (and their rows) its statistics ruled out for the
     * job's timestamp_range and label_range filters: never read. */
    uint64_t pq_row_groups, pq_row_groups_skipped, pq_rows_skipped;
    uint64_t memory_limit, memory_used, memory_peak;
    /* the frame heap (all 0 without one): its size, bytes in use, the
     * part of it ever handed out (touched: a page fault a page), the
     * most bytes in use at once, and frames made on the ordinary heap
     * because it was full */
    uint64_t shm_capacity, shm_used, shm_high_water, shm_peak, shm_fallbacks;
    sl_worker_server_stats_t server;
    bool finished; /* every batch produced and acknowledged */
} sl_worker_stats_t;

typedef struct sl_worker sl_worker_t;

/* Bind job to its table (every problem of the plan goes to *problems, by
 * JSON path; return SL_ERR_INVALID), cut the table into splits, listen, and
 * start the threads. job is borrowed until sl_worker_destroy. Caller
 * owns *out, free with sl_worker_destroy. */
sl_err_t sl_worker_start(const sl_pipeline_job_t *job, const sl_worker_opts_t *opts,
                         sl_worker_t **out, sl_pipeline_problems_t *problems, sl_error_t *err);

/* The port listened on (the real one when 0 was asked). */
uint16_t sl_worker_port(const sl_worker_t *w);

/* Wait up to timeout_ms (< 0: forever) for the job to finish: every batch
 * produced and acknowledged, or the pipeline failed. @return SL_OK when
 * finished, SL_ERR_TIMEOUT, or the pipeline's error (err says what and
 * where, e.g. a corrupt stripe). */
sl_err_t sl_worker_wait(sl_worker_t *w, int timeout_ms, sl_error_t *err);

/* Stop everything: close connections, join every thread. Statistics stay
 * readable. Idempotent; may be called from any thread but a worker's own. */
void sl_worker_stop(sl_worker_t *w);

void sl_worker_stats(sl_worker_t *w, sl_worker_stats_t *out);

/* Print the statistics as a human summary. */
void sl_worker_print_stats(const sl_worker_stats_t *st, double seconds, FILE *out);

/* Has the pipeline failed? Then err (may be NULL) gets its error. Never blocks. */
bool sl_worker_failed(sl_worker_t *w, sl_error_t *err);

/* Fail the worker from outside its pipeline (a split source that can no
 * longer serve, e.g. the master refused its worker id): the first failure
 * is kept, clients get ERROR(code, msg), sl_worker_wait returns it.
 * Any thread but the worker's own pipeline threads; takes the worker's and
 * the server's locks (never call it holding a lock the lease hooks take). */
void sl_worker_fail(sl_worker_t *w, sl_err_t code, const char *msg);

/* The deterministic order: the base of lease (a source's handle) is known
 * now (HEARTBEAT_REPLY bases); its held batches whose turn came leave for
 * their ranks' queues. A lease the reader has not begun yet (it takes the
 * base from its work item) or has finished with is ignored. @return
 * SL_OK, SL_ERR_INVALID (another base than the one known: err says). Takes
 * the server's locks: never call it holding a lock the lease hooks take. */
sl_err_t sl_worker_order_base(sl_worker_t *w, void *lease, uint64_t base, sl_error_t *err);
/* The deterministic order: lease was revoked; its held batches are freed
 * and retired unacknowledged, and those it pushes later too. Locks as
 * sl_worker_order_base. */
void sl_worker_order_drop(sl_worker_t *w, void *lease);
/* The deterministic order's figures for /metrics: *held, batches held for
 * their base (or behind a lower g still being made); queued[r], rank r's
 * batches waiting for its g-window, for r < min(cap, the job's ranks).
 * @return the job's ranks, 0 when no deterministic lease came (nothing
 * set but *held = 0). */
uint32_t sl_worker_order_figures(sl_worker_t *w, uint64_t *held, uint64_t *queued, uint32_t cap);

/* The worker's id and the job id it serves (borrowed, valid until destroy). */
const char *sl_worker_id(const sl_worker_t *w);
const char *sl_worker_job_id(const sl_worker_t *w);

/* The object store the worker's table or Parquet dataset is read through
 * (its counters for /metrics), NULL for a path or a Kafka job.
 * Borrowed until destroy; its counters may be read from any thread. */
struct sl_store *sl_worker_store(const sl_worker_t *w);

/* Stops (if needed) and frees; w may be NULL. */
void sl_worker_destroy(sl_worker_t *w);

#endif

/* Private to the worker (worker.c: threads, budget, server; table_source.c:
 * the local split source and reading a lease in master mode). */
#ifndef SLUICE_DPP_WORKER_WORKER_INTERNAL_H
#define SLUICE_DPP_WORKER_WORKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "dpp/pipeline/plan.h"
#include "dpp/worker/batcher.h"
#include "dpp/worker/queue.h"
#include "dpp/worker/worker.h"

/* Work queue message types: a plain batch, or (master mode) a leased one. */
enum { MSG_BATCH = 1, MSG_LEASED = 2 };

/* A batch of a lease on its way to the server, with what BatchInfo says. */
typedef struct leased {
    sl_batch_t *batch;
    sl_worker_server_item_t tag; /* lease, split, generation, from_row, to_row, rank_plus_one */
} leased_t;

struct sl_worker {
    const sl_pipeline_job_t *job;
    const sl_allocator_t *a;
    sl_worker_opts_t o;
    char worker_id[64];
    sl_wh_table_t *table;
    sl_wh_filter_t *filter;
    sl_wh_splits_t *splits;
    sl_pipeline_plan_t *plan;
    sl_worker_source_t source;
    sl_dedup_group_spec_t *groups;
    uint32_t num_groups;
    uint64_t job_hash;
    bool dedup_form; /* read storage-dedup groups as IKJTs: they are the job's groups */
    sl_worker_budget_t *budget;
    sl_worker_queue_t *work; /* reader -> transform threads: sl_batch_t * */
    sl_worker_server_t *server;
    pthread_t reader;
    pthread_t *xform;
    uint32_t threads, started_threads;
    bool reader_started;
    atomic_bool stopping;
    atomic_uint running;  /* transform threads still running */
    /* Budget bytes the reader thread holds (reader thread only): the
     * decoded stripe being batched, and the batcher (the batch being
     * filled, its reusable value vectors, a shuffle window). */
    uint64_t stripe_held, batcher_held;
    uint64_t handoff_ns;  /* reader thread only: time waiting to hand batches over */
    bool master_mode;     /* the source leases splits (it has lease hooks) */
    sl_worker_server_item_t tag; /* reader thread only: the lease part of the next batch emitted */
    bool listen_fd_owned; /* opts.listen_fd not yet handed to the server */
    pthread_mutex_t mu;   /* guards st and failure */
    sl_worker_stats_t st;
    sl_err_t fail_code;
    char fail_msg[SL_ERROR_MSG_MAX];
    bool stopped;
};

static inline uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The reader's scratch, reused from stripe to stripe. */
typedef struct rscratch {
    uint32_t *selected;
    float *weights;
    uint32_t cap;                /* rows of selected and weights */
    uint64_t est;                /* expected bytes of the next stripe: the last one's */
    sl_dpp_row_range_t *empty;   /* rows of the lease that went into no batch */
    uint32_t num_empty, empty_cap;
    int32_t stripe;              /* being read (-1: none yet), for a failure report */
} rscratch_t;

/* Is rc an error of the data being read or transformed (a split that cannot
 * be read: reported to the master) rather than of the worker (memory,
 * stopping, a broken protocol: the worker fails)? */
static inline bool dpp_worker_split_error(sl_err_t rc)
{
    return rc != SL_OK && rc != SL_ERR_NOMEM && rc != SL_ERR_CLOSED && rc != SL_ERR_PROTOCOL &&
           rc != SL_ERR_TIMEOUT && rc != SL_ERR_AGAIN;
}

/* The reader's memory accounting (reader thread only; worker.c). Every
 * acquire is strict (the budget never passes the limit); a refusal fails
 * the worker with a message naming what did not fit. reader_take: bytes
 * more for the reader (est, before reading a stripe). stripe_acct: the
 * stripe read is sb bytes, est of which were taken before. batcher_acct:
 * bring batcher_held to the batcher's footprint now. */
sl_err_t dpp_worker_reader_take(sl_worker_t *w, uint64_t bytes, const char *what,
                                sl_error_t *err);
sl_err_t dpp_worker_stripe_acct(sl_worker_t *w, uint64_t est, uint64_t sb, const char *file,
                                uint32_t stripe, sl_error_t *err);
sl_err_t dpp_worker_batcher_acct(sl_worker_t *w, const sl_worker_batcher_t *b, sl_error_t *err);

/* Bytes of a stripe's decoded rows (for the memory budget). */
/* Add one stripe's rows and stage times to the statistics (reader thread;
 * takes w->mu). */
void dpp_worker_account_stripe(sl_worker_t *w, uint64_t rows, uint64_t kept, uint64_t t0,
                               uint64_t t1, uint64_t waited, uint64_t handoff_before);
uint64_t dpp_worker_rows_bytes(const sl_wh_rows_t *rows);

/* Read the todo rows of the leased split wk from r (open on its file) into
 * the batcher b: see table_source.c. */
sl_err_t dpp_worker_read_lease(sl_worker_t *w, sl_worker_batcher_t *b, sl_wh_reader_t *r,
                               const sl_worker_work_t *wk, rscratch_t *sc, bool weigh,
                               sl_error_t *err);
void dpp_worker_scratch_free(sl_worker_t *w, rscratch_t *sc);

#endif

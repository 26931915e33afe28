/* Split sources: where a worker's splits come from. The worker's reader
 * thread consumes one interface, sl_worker_source_t; each source is one
 * file behind it:
 *
 *   table_source.c   a table's splits, epoch after epoch, on this worker
 *                    alone (sluice read, sluice worker --job)
 *   lease_client.c   leases of a DPP master (sluice worker --master),
 *                    through sl_worker_lease_client_source
 *
 * A new source (the Kafka stream) adds its constructor here and its own
 * file. Under a master a work unit carries a lease: the rows still to read
 * (todo) and the hooks by which the worker tells the source what became
 * of the lease's batches. */
#ifndef SLUICE_DPP_WORKER_SOURCE_H
#define SLUICE_DPP_WORKER_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "dpp/split.h"
#include "sluice/alloc.h"
#include "sluice/err.h"
#include "warehouse/warehouse.h"

/* One unit of work: a split of an epoch. */
typedef struct sl_worker_work {
    const sl_wh_split_t *split; /* borrowed until done is called (or the source destroyed) */
    uint32_t epoch;
    uint64_t split_id; /* stable id of the split within the job */
    /* Under a master (NULL / 0 otherwise): */
    void *lease;                    /* the source's handle, given back to the lease hooks */
    const sl_dpp_row_range_t *todo; /* [num_todo] ascending, disjoint: read only these */
    uint32_t num_todo;
    uint64_t generation;
    uint32_t rank_plus_one; /* static sharding: 1 + the trainer rank to serve; 0: any */
} sl_worker_work_t;

typedef struct sl_worker_source {
    /* The next split to read (called from the reader thread only; may
     * block until there is work). @return SL_OK, SL_ERR_CLOSED when there
     * are no more, or an error. */
    sl_err_t (*next)(void *ctx, sl_worker_work_t *out, sl_error_t *err);
    /* Every row of w has been read and handed to the batcher (may be NULL).
     * empty[0..num_empty): the rows of w's todo that went into no batch
     * (all filtered out, or a short batch dropped by drop_last); w->lease
     * NULL: none. Also called, with nothing read, for a lease that stopped
     * being live mid-way. */
    void (*done)(void *ctx, const sl_worker_work_t *w, const sl_dpp_row_range_t *empty,
                 uint32_t num_empty);
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
    void *ctx;
} sl_worker_source_t;

/* A source over splits (borrowed; must outlive the source): for each epoch
 * 0..epochs-1 every split once, in order, or in a permutation drawn from
 * (seed, epoch) when shuffle. split_id is the split's index in splits.
 * @return SL_ERR_NOMEM. */
sl_err_t sl_worker_source_table_new(const sl_wh_splits_t *splits, uint32_t epochs, bool shuffle,
                                    uint64_t seed, const sl_allocator_t *a, sl_worker_source_t *out,
                                    sl_error_t *err);

#endif

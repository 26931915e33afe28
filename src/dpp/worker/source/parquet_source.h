/* The Parquet split source (parquet_source.c, source.h): a job's Parquet
 * dataset read in place. */
#ifndef SLUICE_DPP_WORKER_PARQUET_SOURCE_H
#define SLUICE_DPP_WORKER_PARQUET_SOURCE_H

#include "dpp/worker/source/source.h"
#include "warehouse/pq_dataset.h"

/* Wrap *src (the units: the table source over splits, or a master's
 * leases of ds's splits; taken over, also on failure) into a source that
 * reads each unit's todo rows from ds itself (ds and splits, which may be
 * NULL, taken over, also on failure, and freed after *src):
 * only the features features[nf] (the plan's read features, borrowed;
 * NULL: every one) besides the labels and id columns, in stripes of at
 * most batch_rows rows, rows numbered in file order. *src becomes the
 * combined source; its lease hooks are the inner source's. maps[nf]
 * (NULL: none; borrowed, must outlive the source): the transforms at
 * decode of each feature (sl_wh_pqds_reader_set_maps). threads (the
 * worker's --threads): the columns of a split are decoded and converted
 * on that many threads (sl_wh_pqds_reader_set_threads; 0 or 1: the reader thread
 * alone). @return SL_ERR_NOMEM, SL_ERR_IO (a thread not started). */
sl_err_t sl_worker_source_parquet_new(sl_wh_pqds_t *ds, sl_wh_splits_t *splits, uint32_t batch_rows,
                                      uint32_t threads, const char *const *features, uint32_t nf,
                                      const sl_wh_value_map_t *maps, const sl_allocator_t *a,
                                      sl_worker_source_t *src, sl_error_t *err);

#endif

/* The byte source of a Parquet file of a dataset or an import, wherever
 * it lives (pq_store.c): a local path, or an s3:// URL read through a
 * store, pinned at the ETag its open found. Private to src/warehouse. */
#ifndef SLUICE_WH_PQ_STORE_H
#define SLUICE_WH_PQ_STORE_H

#include "parquet/parquet.h"
#include "store/store.h"
#include "warehouse/warehouse.h"

/* Open path: a local file, or an s3:// URL of an object of st (borrowed:
 * st must outlive the source; the URL must be under sl_store_root(st)).
 * Close with wh_pq_source_close (also after a failed open). */
sl_err_t wh_pq_source_open(sl_store_t *st, const char *path, const sl_allocator_t *a,
                           sl_pq_source_t *src, sl_error_t *err);
void wh_pq_source_close(sl_pq_source_t *src);

/* The ETag the object was pinned at; "" for a local file. Borrowed until
 * close. */
const char *wh_pq_source_etag(const sl_pq_source_t *src);

/* An object's source: fetch the byte ranges [off[i], off[i] + len[i]) in
 * parallel (one sl_store_read_many) and serve later reads inside them from
 * memory, in place of what the last call fetched. A local file: nothing
 * to do. Ranges past the object's end are not fetched. */
/* mem (NULL: not counted; borrowed until close): the fetched bytes are
 * taken from it first, waiting for room (what names them in its error),
 * and given back when the next prefetch or close drops them. */
sl_err_t wh_pq_source_prefetch(sl_pq_source_t *src, const uint64_t *off, const uint64_t *len,
                               uint32_t n, const sl_wh_mem_t *mem, const char *what,
                               sl_error_t *err);

#endif

/* A worker's own autocache directory (`sluice worker --cache-dir`;
 * docs/STORAGE.md, "The autocache and object stores"): the cache files of
 * leases whose job reads an object store live on the worker's disk, named
 * by the master "<prefix fingerprint, 16 hex>/split-<N>.slc" under a
 * folder of this process's own (several workers may share DIR on one
 * machine), kept under a size limit by removing the least recently used.
 *
 * DIR/w-<pid>-<random>/ holds a lock (flock) for as long as the process
 * lives; opening removes every DIR/w-* folder whose lock nobody holds
 * (a process that ended: the master forgets what it held when its
 * connection goes, so its files would never be read again), and destroy
 * removes the process's own. Thread-safe (its own lock). */
#ifndef SLUICE_DPP_WORKER_CACHE_DIR_H
#define SLUICE_DPP_WORKER_CACHE_DIR_H

#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct dpp_cache_dir dpp_cache_dir_t;

/* A split's file the directory removed to stay within its size. */
typedef struct dpp_cache_evicted {
    uint64_t fp;
    uint32_t split;
} dpp_cache_evicted_t;

/* Create (or use) root, clear what ended processes left there, and make
 * this process's folder; files beyond max_bytes (0: 8 GiB) are evicted.
 * Caller owns *out (free with dpp_cache_dir_destroy). @return SL_ERR_IO
 * naming the folder that cannot be made or locked. */
sl_err_t dpp_cache_dir_open(const char *root, uint64_t max_bytes, const sl_allocator_t *a,
                            dpp_cache_dir_t **out, sl_error_t *err);
/* Remove the process's folder and free d (NULL is fine). */
void dpp_cache_dir_destroy(dpp_cache_dir_t *d);

/* The path of the master's name (checked: "<16 hex>/split-<N>.slc"), its
 * folder made. Caller owns it (sl_strfree with d's allocator). @return NULL
 * for a name of another shape, or when the folder cannot be made. */
char *dpp_cache_dir_path(dpp_cache_dir_t *d, const char *name);

/* After a lease of name was read: the bytes of its file now (0: none),
 * marked as just used; then the least recently used others are removed
 * while the files exceed the limit (this one too when it alone does).
 * The lease's SPLIT_READ tells the master the result. */
uint64_t dpp_cache_dir_settle(dpp_cache_dir_t *d, const char *name);

/* The same for a lease no SPLIT_READ will tell of (the master took it
 * back, or it failed): a file its WRITE left is counted against the limit
 * from now on, and when it holds no file (none written, or this one alone
 * over the limit) the next heartbeat's cache_evicted says so, as the
 * master counts a split held from the moment it grants its WRITE lease. */
uint64_t dpp_cache_dir_settle_untold(dpp_cache_dir_t *d, const char *name);

/* Move up to cap files removed since the last call into out (and the
 * splits settle_untold found without a file). @return how many. */
uint32_t dpp_cache_dir_evicted(dpp_cache_dir_t *d, dpp_cache_evicted_t *out, uint32_t cap);

/* Files and bytes held now, files removed so far. */
void dpp_cache_dir_stats(dpp_cache_dir_t *d, uint64_t *files, uint64_t *bytes, uint64_t *evicted);

#endif

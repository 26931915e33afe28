/* The master's half of the autocache (docs/DESIGN.md "Autocache"):
 * Cachew's rule as a pure function of measured figures, and the cache
 * directory (--cache-dir): its measured read throughput, the decision
 * files, the cache files' names, LRU eviction under a size limit.
 *
 * The directory is its own index, so it survives a master restart:
 *
 *     DIR/<prefix fingerprint, 16 hex>/decision      the decision (JSON)
 *     DIR/<prefix fingerprint>/split-<N>.slc         split N's cache file
 *
 * A file's modification time is its last use (set when a READ lease names
 * it); eviction removes the least recently used files first. The master
 * and the workers must see the same directory (one machine, or a shared
 * file system). Not thread-safe: the master calls it under its lock. */
#ifndef SLUICE_DPP_MASTER_AUTOCACHE_H
#define SLUICE_DPP_MASTER_AUTOCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

typedef enum sl_master_autocache_state {
    SL_MASTER_AUTOCACHE_OFF = 0,   /* no cache directory, or the job is not cacheable */
    SL_MASTER_AUTOCACHE_MEASURING, /* too few samples computed yet */
    SL_MASTER_AUTOCACHE_CHOSEN,    /* reading the cache wins: later epochs and jobs read it */
    SL_MASTER_AUTOCACHE_DECLINED   /* computing wins: never cached */
} sl_master_autocache_state_t;

/* "off", "measuring", "chosen", "declined" (static). */
const char *sl_master_autocache_state_name(sl_master_autocache_state_t s);

/* What the decision is made of: a job's computed batches (summed over its
 * workers' heartbeats) and the cache directory's read throughput. */
typedef struct sl_master_autocache_figures {
    uint64_t compute_ns;       /* busy time reading, decoding, filtering, batching, transforming */
    uint64_t computed_samples; /* ... the samples of those batches */
    uint64_t computed_bytes;   /* ... their encoded bytes (what a cache file decodes to) */
    /* what reading, decoding and batching the source took (part of
     * compute_ns) and the decoded bytes it read: a cache file is read by
     * the same reader, so a byte of it costs about as much */
    uint64_t source_ns, source_bytes;
    double read_bytes_per_s; /* decoded bytes per second reading the cache directory's files */
    uint64_t min_samples;    /* decide only once this many samples are measured (>= 1) */
} sl_master_autocache_figures_t;

typedef struct sl_master_autocache_decision {
    sl_master_autocache_state_t state;
    double compute_us_per_sample; /* measured */
    double cache_us_per_sample;   /* estimated: bytes per sample at the slower rate below */
    uint64_t samples;             /* measured over */
    double read_mb_per_s;         /* the cache directory's (probe) */
    double source_mb_per_s;       /* the job's source, read, decoded and batched */
} sl_master_autocache_decision_t;

/* Reading must beat computing by this factor: the estimate errs (by up to
 * a fourth between runs on a loaded machine, for a job whose cache would
 * hold the source's own bytes), and a cached batch is still copied and
 * encoded. */
#define SL_MASTER_AUTOCACHE_MARGIN 1.5

/* Cachew's rule, at most one cache point (the end of the deterministic
 * prefix). Reading a sample back costs its output bytes at the slower of
 * the cache directory's read throughput and the job's own source rate
 * (source_bytes per source_ns: the same reader decodes the same format;
 * not known: the directory's): cache_us_per_sample. CHOSEN when
 * cache_us_per_sample * SL_MASTER_AUTOCACHE_MARGIN <= compute_us_per_sample,
 * DECLINED otherwise, MEASURING while fewer than min_samples samples were
 * computed or the directory's throughput is unknown (<= 0). Pure. */
sl_master_autocache_decision_t sl_master_autocache_decide(const sl_master_autocache_figures_t *f);

typedef struct sl_master_autocache sl_master_autocache_t;

typedef struct sl_master_autocache_stats {
    uint64_t bytes, files; /* cache files in the directory (last scan) */
    uint64_t evicted_files, evicted_bytes;
    double read_bytes_per_s; /* measured at open */
    uint64_t max_bytes;
} sl_master_autocache_stats_t;

/* Open (create) dir with a limit of max_bytes of cache files (0: 8 GiB)
 * and measure its read throughput: a table file of probe_bytes (0: 16 MiB)
 * of rows is written (fsync), dropped from the page cache, read back and
 * removed. Caller owns *out. */
sl_err_t sl_master_autocache_open(const char *dir, uint64_t max_bytes, uint64_t probe_bytes,
                                  const sl_allocator_t *a, sl_master_autocache_t **out,
                                  sl_error_t *err);
void sl_master_autocache_destroy(sl_master_autocache_t *c); /* NULL is fine */

const char *sl_master_autocache_dir(const sl_master_autocache_t *c);
void sl_master_autocache_stats(const sl_master_autocache_t *c, sl_master_autocache_stats_t *out);

/* The path of split's cache file of fingerprint fp in buf. @return false
 * when it does not fit. */
bool sl_master_autocache_path(const sl_master_autocache_t *c, uint64_t fp, uint32_t split,
                              char *buf, size_t cap);

/* Create fingerprint fp's directory (it may exist) before a worker writes
 * a file in it: the decision, stored there too, may come later. @return
 * false when it cannot be made. */
bool sl_master_autocache_prefix_dir(const sl_master_autocache_t *c, uint64_t fp);

/* Does split's file exist? Then it is marked used now (LRU). */
bool sl_master_autocache_use(sl_master_autocache_t *c, uint64_t fp, uint32_t split);

/* The decision stored for fp: false when none (or unreadable). */
bool sl_master_autocache_load(const sl_master_autocache_t *c, uint64_t fp,
                              sl_master_autocache_decision_t *out);

/* Store d for fp (atomically; creates DIR/<fp>/). */
sl_err_t sl_master_autocache_store(sl_master_autocache_t *c, uint64_t fp,
                                   const sl_master_autocache_decision_t *d, sl_error_t *err);

/* Remove the cache files of fp (a declined prefix's, written while it was
 * measured). */
void sl_master_autocache_drop(sl_master_autocache_t *c, uint64_t fp);

/* Scan the directory (at most once per min_interval_ms unless 0) and
 * remove least recently used cache files until their bytes are within the
 * limit. */
void sl_master_autocache_evict(sl_master_autocache_t *c, uint64_t now_ms, uint64_t min_interval_ms);

#endif

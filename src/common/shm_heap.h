/* A frame heap in shared memory: one allocator over one memfd mapping, so
 * that a worker writes an encoded frame once and every trainer on its host
 * maps it (docs/PROTOCOL.md "Shared-memory hand-over", docs/DESIGN.md).
 *
 * The memfd (MFD_CLOEXEC | MFD_ALLOW_SEALING) is sized once and sealed
 * against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL):
 * a reader's mapping of it can never SIGBUS. A memfd, not a /dev/shm file:
 * nothing is left behind when the process is killed.
 *
 * Blocks are whole granules (SL_SHM_HEAP_GRANULE bytes, page aligned), first
 * fit over a sorted list of free extents, coalesced on free. The allocator's
 * own books (the extents, each live block's size) are private memory, never
 * in the shared mapping: a reader sees frames and nothing else. Thread safe
 * (one mutex). */
#ifndef SLUICE_COMMON_SHM_HEAP_H
#define SLUICE_COMMON_SHM_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

#define SL_SHM_HEAP_GRANULE 4096u

typedef struct sl_shm_heap sl_shm_heap_t;

typedef struct sl_shm_heap_stats {
    uint64_t capacity;   /* bytes of the mapping */
    uint64_t used;       /* bytes in live blocks (whole granules) */
    uint64_t blocks;     /* live blocks */
    uint64_t allocs;     /* blocks handed out, ever */
    uint64_t high_water; /* bytes from the start to the end of the highest block
                            ever handed out: the part of the mapping touched */
    uint64_t peak;       /* the most bytes in live blocks at once */
    uint64_t fallbacks;  /* frame allocator: allocations the heap could not take
                            (full, or too large) that went to the fallback */
} sl_shm_heap_stats_t;

/* A heap of bytes (rounded up to whole granules; at least one). name names
 * the memfd (/proc/PID/fd, for people). a: the private books' allocator
 * (NULL: default). Caller owns *out: sl_shm_heap_destroy. @return
 * SL_ERR_INVALID for 0 bytes or more than 1 TiB, SL_ERR_IO when the memfd
 * cannot be made, sized, sealed or mapped (the message names the call and
 * errno), SL_ERR_NOMEM. */
sl_err_t sl_shm_heap_new(const char *name, uint64_t bytes, const sl_allocator_t *a,
                         sl_shm_heap_t **out, sl_error_t *err);

/* Unmap and close; every block must be freed (or no longer used). h may be
 * NULL. */
void sl_shm_heap_destroy(sl_shm_heap_t *h);

/* size bytes (> 0) in the heap, page aligned. @return NULL when no free
 * extent holds them (the heap is full or fragmented) or the books cannot
 * grow. */
void *sl_shm_heap_alloc(sl_shm_heap_t *h, size_t size);

/* Return a block. A pointer that is not a live block's start (NULL
 * included) is ignored. */
void sl_shm_heap_free(sl_shm_heap_t *h, void *p);

/* Is p inside the heap's mapping? Then *offset is its offset from the
 * start. h may be NULL (then false). */
bool sl_shm_heap_offset(const sl_shm_heap_t *h, const void *p, uint64_t *offset);

/* The memfd (owned by the heap: dup it to keep it) and its size. */
int sl_shm_heap_fd(const sl_shm_heap_t *h);
uint64_t sl_shm_heap_size(const sl_shm_heap_t *h);

void sl_shm_heap_stats(sl_shm_heap_t *h, sl_shm_heap_stats_t *out);

/* An allocator that takes blocks from h and, when h cannot (full, or an
 * alignment over a page), from fallback (counted in fallbacks); its free
 * gives each pointer back where it came from. Lives as long as h. */
const sl_allocator_t *sl_shm_heap_allocator(sl_shm_heap_t *h, const sl_allocator_t *fallback);

#endif

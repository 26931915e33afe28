/* Which worker process holds a split's cache file on its own disk (the
 * autocache on workers' disks, control_cache_local.c): an open-addressing
 * table keyed by (prefix fingerprint, split), linear probing, deletion by
 * shifting back (no tombstones), in the master's memory only. Not
 * thread-safe: the master calls it under its lock. */
#ifndef SLUICE_DPP_MASTER_HOLDERS_H
#define SLUICE_DPP_MASTER_HOLDERS_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/alloc.h"

typedef struct mp_holder {
    bool used;
    uint32_t split, worker; /* worker: a slot of the master's workers */
    uint64_t fp, incarnation;
} mp_holder;

typedef struct mp_holders {
    mp_holder *e; /* [cap], cap a power of two (0: none yet) */
    uint32_t n, cap;
} mp_holders;

/* Which entries a table that grows keeps (the others' processes are gone). */
typedef bool (*mp_holders_keep_fn)(void *ctx, const mp_holder *h);

/* The entry of (fp, split), or NULL (borrowed until the next put or remove). */
mp_holder *mp_holders_find(const mp_holders *t, uint64_t fp, uint32_t split);

/* Set (fp, split) to (worker, incarnation). When the table must grow it
 * doubles, keeping only the entries keep (NULL: all) accepts. @return
 * false when out of memory (nothing changed). */
bool mp_holders_put(mp_holders *t, const sl_allocator_t *a, uint64_t fp, uint32_t split,
                    uint32_t worker, uint64_t incarnation, mp_holders_keep_fn keep, void *ctx);

/* Remove entry h (of mp_holders_find). */
void mp_holders_remove(mp_holders *t, mp_holder *h);

void mp_holders_free(const sl_allocator_t *a, mp_holders *t);

#endif

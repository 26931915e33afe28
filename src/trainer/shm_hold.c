/* Zero-copy hand-over, the client's side (docs/PROTOCOL.md "Shared-memory
 * hand-over"): a worker's heap mapped through one connection, shared by
 * the connection and every batch that points into it, and the releases
 * those batches leave for the connection to send.
 *
 * A batch read in place holds a reference to the mapping, so the mapping
 * (and the hold socket that keeps the worker from reusing the blocks)
 * outlives the connection, the client and the worker's process: such a
 * batch stays valid until it is destroyed, whatever happens to them. Its
 * destroy adds its delivery id to the releases while the connection that
 * mapped the heap is up; once that connection has ended the id is dropped,
 * and the worker frees the block when the last reference unmaps the heap
 * and closes the hold socket. */
#include "trainer/trainer_internal.h"

#include <string.h>

tr_shm_t *tr_shm_new(const sl_allocator_t *a, const sl_rpc_shm_map_t *map)
{
    tr_shm_t *m = sl_calloc(a, 1, sizeof *m);
    if (!m) return NULL;
    m->a = a;
    m->map = *map;
    atomic_store(&m->refs, 1);
    m->live = true;
    sl_mutex_init(&m->mu);
    return m;
}

void tr_shm_keep(tr_shm_t *m)
{
    atomic_fetch_add(&m->refs, 1);
}

void tr_shm_drop(tr_shm_t *m)
{
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    sl_rpc_shm_detach(&m->map); /* unmap, then close the hold: the worker frees the rest */
    sl_free(m->a, m->rel, (size_t)m->cap * sizeof *m->rel);
    sl_mutex_destroy(&m->mu);
    sl_free(m->a, m, sizeof *m);
}

void tr_shm_end(tr_shm_t *m)
{
    sl_mutex_lock(&m->mu);
    m->live = false;
    m->nrel = 0;
    sl_mutex_unlock(&m->mu);
}

/* Any thread (a batch's destroy). */
static void released(tr_shm_t *m, uint64_t delivery_id)
{
    sl_mutex_lock(&m->mu);
    if (m->live && m->nrel == m->cap) {
        /* at most the blocks this client holds (the worker's cap) wait here */
        uint32_t cap = m->cap ? 2 * m->cap : 16;
        uint64_t *rel = sl_alloc(m->a, (size_t)cap * sizeof *rel);
        if (rel) {
            if (m->nrel) memcpy(rel, m->rel, (size_t)m->nrel * sizeof *rel);
            sl_free(m->a, m->rel, (size_t)m->cap * sizeof *m->rel);
            m->rel = rel;
            m->cap = cap;
        }
    }
    /* without room the id is dropped: the block goes when the hold ends */
    if (m->live && m->nrel < m->cap) m->rel[m->nrel++] = delivery_id;
    sl_mutex_unlock(&m->mu);
}

uint32_t tr_shm_take(tr_shm_t *m, uint64_t *out, uint32_t cap)
{
    if (!m) return 0;
    sl_mutex_lock(&m->mu);
    uint32_t n = m->nrel < cap ? m->nrel : cap;
    if (n == 0) { /* rel may be NULL: nothing released yet */
        sl_mutex_unlock(&m->mu);
        return 0;
    }
    memcpy(out, m->rel, (size_t)n * sizeof *out);
    memmove(m->rel, m->rel + n, (size_t)(m->nrel - n) * sizeof *m->rel);
    m->nrel -= n;
    sl_mutex_unlock(&m->mu);
    return n;
}

typedef struct held_ref {
    tr_shm_t *m;
    uint64_t delivery_id;
    uint64_t off, len; /* the block in m's mapping */
} held_ref_t;

static void release_held(void *ctx)
{
    held_ref_t *r = ctx;
    tr_shm_t *m = r->m;
    sl_error_t e = {0};
    /* the user's writes into the batch are private pages: dropped before
     * the worker may put another frame there. If they cannot be, the block
     * is kept (not released) until the hold ends, never read stale. */
    if (sl_rpc_shm_forget(&m->map, r->off, r->len, NULL, &e) == SL_OK) released(m, r->delivery_id);
    sl_free(m->a, r, sizeof *r);
    tr_shm_drop(m);
}

sl_err_t tr_shm_lend(tr_shm_t *m, uint64_t delivery_id, uint64_t off, uint64_t len, sl_batch_t *b,
                     sl_error_t *e)
{
    held_ref_t *r = sl_alloc(m->a, sizeof *r);
    if (!r) return sl_error_set(e, SL_ERR_NOMEM, "out of memory");
    tr_shm_keep(m);
    *r = (held_ref_t){m, delivery_id, off, len};
    b->release = release_held;
    b->release_ctx = r;
    return SL_OK;
}

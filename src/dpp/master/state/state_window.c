/* The splits a job would lease next, read-only: the first PENDING splits
 * of its current epoch in epoch order (the pending queue of
 * state_leases.c: re-pending positions behind the cursor, then the cursor
 * onwards), for a caller that prefers some of them (the autocache of
 * workers' local disks, control_cache_local.c) without reordering the
 * epoch. Callers hold the master's lock. */
#include "dpp/master/state/state_internal.h"

/* Positions past the cursor looked at, per split wanted: those leased out
 * of order (shared passes, preferred splits) are skipped, at a bound. */
#define SCAN_PER_WANTED 8

uint32_t sl_master_state_pending_window(const sl_master_state_t *m, const char *job_id,
                                        uint32_t *out, uint32_t cap)
{
    job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL || cap == 0 || jb->chunk != 0 || jb->failed || jb->epoch >= jb->epochs) return 0;
    /* the heap's PENDING positions (all behind the cursor), the cap lowest,
     * by insertion: the heap holds only splits that became PENDING again */
    uint32_t n = 0;
    for (uint32_t i = 0; i < jb->heap_len; i++) {
        uint32_t p = jb->heap[i];
        if (jb->st[jb->order[p]].state != SL_MASTER_SPLIT_PENDING) continue;
        if (n == cap && p >= out[n - 1]) continue;
        uint32_t k = n < cap ? n++ : n - 1;
        while (k > 0 && out[k - 1] > p) {
            out[k] = out[k - 1];
            k--;
        }
        out[k] = p;
    }
    for (uint32_t i = 0; i < n; i++)
        out[i] = jb->order[out[i]];
    uint64_t budget = (uint64_t)cap * SCAN_PER_WANTED;
    for (uint32_t p = jb->cursor; p < jb->n && n < cap && budget > 0; p++, budget--)
        if (jb->st[jb->order[p]].state == SL_MASTER_SPLIT_PENDING) out[n++] = jb->order[p];
    return n;
}

/* The leases each worker named in its last HEARTBEAT (or REGISTER), and
 * those granted to it on its connection since, kept so that time a worker
 * spends waiting on the master does not count against them (docs/DESIGN.md,
 * "Master state and exactly once per epoch", lease liveness).
 *
 * A worker makes its calls one at a time on its one connection, its
 * heartbeats among them: while it waits for an answer the master holds
 * until the round's journal sync (SPLIT_READ_REPLY, SPLIT_FAILED_REPLY),
 * or for the answer to a LEASE_REQUEST that came while the master was in
 * a sync (read only after it), it sends no heartbeat. A sync slower than
 * the lease timeout (a loaded disk) would otherwise expire the leases of a
 * live worker that did all it was asked. So every answer to a worker's
 * call renews, as of its sending, the kept leases that are still its live
 * leases.
 *
 * Only these: a lease the worker never received is never renewed. A LEASE
 * is lost only with its connection (TCP delivers in order or breaks), and
 * then no answer follows on that connection: a grant kept here is renewed
 * only by answers on the connection it went out on while that connection
 * lives (the worker's next REGISTER revokes it when it does not name it).
 * The next heartbeat's list replaces the kept one: a lease the worker
 * dropped is no longer renewed. Renewals are not journaled (nor are
 * heartbeats'): replay is unchanged. Control thread, under m->mu. */
#include <string.h>

#include "common/mem.h"
#include "dpp/master/process/master_internal.h"

/* Leases renewed per call of the state (a stack array): any number of
 * named leases is renewed in chunks of this many. */
#define RENEW_CHUNK 32

void mp_named_add(sl_master_t *m, mp_worker *w, Sluice__Control__SplitRef *const *refs, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        const Sluice__Control__SplitRef *r = refs[k];
        /* only its live leases, each once: the list stays bounded by what
         * it holds, whatever a heartbeat names */
        if (r == NULL || r->job_id == NULL || strlen(r->job_id) >= MP_ID_MAX ||
            !sl_master_state_lease_live(m->st, r->job_id, r->epoch, r->split, r->generation, w->id))
            continue;
        bool have = false;
        for (uint32_t j = 0; j < w->nnamed && !have; j++)
            have = w->named[j].split == r->split && w->named[j].epoch == r->epoch &&
                   w->named[j].generation == r->generation &&
                   strcmp(w->named[j].job, r->job_id) == 0;
        if (have) continue;
        /* out of memory: the leases not kept are not renewed by an answer
         * (the next heartbeat renews them, and tries again) */
        if (w->nnamed == w->cap_named && !SL_GROW(m->a, w->named, w->cap_named, w->nnamed + 1, 4))
            return;
        mp_named *d = &w->named[w->nnamed++];
        memcpy(d->job, r->job_id, strlen(r->job_id) + 1);
        d->epoch = r->epoch;
        d->split = r->split;
        d->generation = r->generation;
    }
}

void mp_named_set(sl_master_t *m, mp_worker *w, Sluice__Control__SplitRef *const *refs, size_t n)
{
    w->nnamed = 0;
    mp_named_add(m, w, refs, n);
}

void mp_named_answered(sl_master_t *m, uint32_t i)
{
    if (m->conns[i].fd < 0 || m->conns[i].kind != MP_WORKER) return; /* closed: an ERROR */
    const mp_worker *w = &m->workers[m->conns[i].worker];
    uint64_t now = sl_clock_ms();
    sl_master_lease_ref_t refs[RENEW_CHUNK];
    for (uint32_t k = 0; k < w->nnamed;) {
        uint32_t n = 0;
        for (; n < RENEW_CHUNK && k < w->nnamed; n++, k++)
            refs[n] = (sl_master_lease_ref_t){w->named[k].job, w->named[k].epoch, w->named[k].split,
                                              w->named[k].generation};
        /* a lease no longer live (ended, expired, revoked) is skipped */
        sl_master_state_renew(m->st, w->id, refs, n, now, NULL, NULL);
    }
}

void mp_named_free(const sl_allocator_t *a, mp_worker *w)
{
    sl_free(a, w->named, (size_t)w->cap_named * sizeof *w->named);
    w->named = NULL;
    w->nnamed = w->cap_named = 0;
}

/* The invariants of the master's state machine, checked
 * (sl_master_state_check; SL_ASSERT after every record applied in builds
 * with asserts, common/assert.h). What they are:
 *   - a split's committed ranges are sorted, non-empty, disjoint and not
 *     adjacent, inside the split, and `committed` is their sum;
 *   - a job's count[] is the number of its splits in each state, its
 *     committed_rows and split_failures the sums over its splits;
 *   - of a running table job, a split is DONE iff its rows are all
 *     committed (and, in the deterministic order, it is counted);
 *   - a LEASED split names a worker whose lease list holds it, a split in
 *     another state names none, every lease in a worker's list is a LEASED
 *     split of that worker, and no generation reaches next_generation;
 *   - a deterministic job's order keeps order.h's invariants, its
 *     splits of no rows are counted and its LEASED splits lie below the
 *     counted prefix + the window (state_order.c);
 *   - a client remembers at most max_answers nonces, each found by its
 *     index.
 * Callers hold the master's lock. */
#include <stdio.h>

#include "common/err.h"
#include "dpp/master/state/state_internal.h"

#define FAIL(...) return sl_error_set(err, SL_ERR_CORRUPT, __VA_ARGS__)

sl_err_t m_check_split(const sl_master_state_t *m, const job *jb, uint32_t i, sl_error_t *err)
{
    const split_st *s = &jb->st[i];
    uint64_t sum = 0;
    if (s->nr > s->cap) FAIL("job %s split %u: %u ranges in room for %u", jb->id, i, s->nr, s->cap);
    for (uint32_t q = 0; q < s->nr; q++) {
        const sl_dpp_row_range_t *r = &s->r[q];
        if (r->from_row >= r->to_row || r->to_row > jb->defs[i].num_rows)
            FAIL("job %s split %u: range %u [%llu,%llu) empty or outside [0,%llu)", jb->id, i, q,
                 (unsigned long long)r->from_row, (unsigned long long)r->to_row,
                 (unsigned long long)jb->defs[i].num_rows);
        if (q > 0 && s->r[q - 1].to_row >= r->from_row)
            FAIL("job %s split %u: ranges %u and %u overlap or touch", jb->id, i, q - 1, q);
        sum += r->to_row - r->from_row;
    }
    if (sum != s->committed)
        FAIL("job %s split %u: committed %llu, its ranges hold %llu", jb->id, i,
             (unsigned long long)s->committed, (unsigned long long)sum);
    if (s->state > SL_MASTER_SPLIT_DONE) FAIL("job %s split %u: state %u", jb->id, i, s->state);
    if (s->state == SL_MASTER_SPLIT_LEASED) {
        if (s->worker >= m->num_workers)
            FAIL("job %s split %u: leased to worker %u of %u", jb->id, i, s->worker,
                 m->num_workers);
        if (s->generation >= m->next_generation)
            FAIL("job %s split %u: generation %llu not below the next, %llu", jb->id, i,
                 (unsigned long long)s->generation, (unsigned long long)m->next_generation);
    } else if (s->worker != NO_WORKER) {
        FAIL("job %s split %u: not leased, yet names worker %u", jb->id, i, s->worker);
    }
    bool running = m_split_epoch(jb, i) < jb->epochs && jb->chunk == 0;
    bool full = s->committed == jb->defs[i].num_rows;
    if (running && (full && m_order_split_counted(jb, i)) != (s->state == SL_MASTER_SPLIT_DONE))
        FAIL("job %s split %u: %llu of %llu rows committed, state %u", jb->id, i,
             (unsigned long long)s->committed, (unsigned long long)jb->defs[i].num_rows, s->state);
    return SL_OK;
}

static sl_err_t check_job(const sl_master_state_t *m, uint32_t slot, const job *jb,
                          uint32_t *leased, sl_error_t *err)
{
    uint32_t count[3] = {0, 0, 0};
    uint64_t rows = 0, failures = 0;
    for (uint32_t i = 0; i < jb->n; i++) {
        SL_FORWARD_IF_ERROR(m_check_split(m, jb, i, err));
        const split_st *s = &jb->st[i];
        count[s->state]++;
        rows += s->committed;
        failures += s->failures;
        if (s->state != SL_MASTER_SPLIT_LEASED) continue;
        (*leased)++;
        const worker *w = &m->workers[s->worker];
        bool listed = false;
        for (uint32_t k = 0; k < w->nleases && !listed; k++)
            listed = w->leases[k].job == slot && w->leases[k].split == i;
        if (!listed) FAIL("job %s split %u: leased to %s, not in its list", jb->id, i, w->name);
    }
    for (int k = 0; k < 3; k++)
        if (count[k] != jb->count[k])
            FAIL("job %s: %u splits in state %d, counted %u", jb->id, count[k], k, jb->count[k]);
    if (jb->chunk == 0 && rows != jb->committed_rows)
        FAIL("job %s: %llu rows committed, counted %llu", jb->id, (unsigned long long)rows,
             (unsigned long long)jb->committed_rows);
    sl_err_t rc = m_rank_check(m->a, jb, err);
    if (rc != SL_OK) return rc;
    if (failures != jb->split_failures)
        FAIL("job %s: %llu split failures, counted %llu", jb->id, (unsigned long long)failures,
             (unsigned long long)jb->split_failures);
    return m_order_check(jb, err);
}

sl_err_t sl_master_state_check(const sl_master_state_t *m, sl_error_t *err)
{
    uint32_t leased = 0, listed = 0;
    for (uint32_t slot = 0; slot < m->opts.max_jobs; slot++) {
        if (m->jobs[slot] == NULL) continue;
        SL_FORWARD_IF_ERROR(check_job(m, slot, m->jobs[slot], &leased, err));
    }
    for (uint32_t w = 0; w < m->num_workers; w++) {
        const worker *wk = &m->workers[w];
        if (wk->nleases > wk->cap)
            FAIL("worker %s: %u leases in room for %u", wk->name, wk->nleases, wk->cap);
        for (uint32_t k = 0; k < wk->nleases; k++) {
            const lease_ref *l = &wk->leases[k];
            const job *jb = l->job < m->opts.max_jobs ? m->jobs[l->job] : NULL;
            if (jb == NULL || l->split >= jb->n ||
                jb->st[l->split].state != SL_MASTER_SPLIT_LEASED || jb->st[l->split].worker != w)
                FAIL("worker %s: lease %u (slot %u split %u) is not a lease of it", wk->name, k,
                     l->job, l->split);
        }
        listed += wk->nleases;
    }
    if (listed != leased) FAIL("%u splits leased, %u leases in the workers' lists", leased, listed);
    for (uint32_t c = 0; c < m->num_clients; c++) {
        const client *cl = &m->clients[c];
        if (cl->len > m->opts.max_answers || cl->head >= m->opts.max_answers)
            FAIL("client %s: %u nonces from %u (max_answers %u)", cl->name, cl->len, cl->head,
                 m->opts.max_answers);
        for (uint32_t q = 0; q < cl->len; q++)
            if (!m_client_has(m, c, cl->ring[(cl->head + q) % m->opts.max_answers]))
                FAIL("client %s: nonce %u of %u not in its index", cl->name, q, cl->len);
    }
    return SL_OK;
}

/* The deterministic order resumed (docs/DESIGN.md "A deterministic order",
 * *Resume*): a resumed job's epoch continues the original sequence less
 * the batches handed out before the checkpoint. Those batches' rows (the
 * "skip" rows: JobAdded's start ranges for the epoch it starts in,
 * `later`'s when a later epoch begins) are committed by the master from
 * the epoch's start; a LEASE names them (order_skip) so that the worker
 * neither numbers nor counts their batches, while a batch committed in the
 * resumed run by a lease that was then killed is dropped but still
 * counted. So the master keeps the skip rows of the current epoch apart
 * from the committed ranges: rebuilt by the same transitions in replay
 * (JobAdded, EpochAdvanced) and kept by the snapshot (SnapshotJob
 * order_skip_*), since a snapshot's committed ranges mix the two.
 *
 * A split whose rows are all skip rows has no batch left in the epoch: it
 * is counted (0 batches) when the skip rows are set, as a split of no rows
 * is, a function of journaled ranges. Callers hold the master's lock. */
#include <inttypes.h>
#include <string.h>

#include "dpp/master/state/state_internal.h"

struct m_order_skip {
    const sl_allocator_t *a;
    m_rset r; /* sorted by (split, from), touching ranges merged */
};

void m_order_skip_free(job *jb)
{
    if (jb->order_skip == NULL) return;
    const sl_allocator_t *a = jb->order_skip->a;
    m_rset_free(a, &jb->order_skip->r);
    sl_free(a, jb->order_skip, sizeof *jb->order_skip);
    jb->order_skip = NULL;
}

/* The index of split's first range in r (r->n: none). */
static size_t first_of(const m_rset *r, uint32_t split)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->split[mid] < split)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

sl_err_t m_order_skip_set(sl_master_state_t *m, job *jb, const uint32_t *split,
                          const uint64_t *from, const uint64_t *to, size_t n, bool count,
                          sl_error_t *err)
{
    m_order_skip_free(jb);
    if (jb->ord == NULL || n == 0) return SL_OK;
    struct m_order_skip *s = sl_calloc(m->a, 1, sizeof *s);
    if (s == NULL || !m_rset_of(m->a, split, from, to, n, &s->r)) {
        sl_free(m->a, s, sizeof *s);
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': %zu skip ranges", jb->id, n);
    }
    s->a = m->a;
    jb->order_skip = s;
    for (size_t i = 0; i < s->r.n; i++)
        if (s->r.split[i] >= jb->n || s->r.from[i] >= s->r.to[i] ||
            s->r.to[i] > jb->defs[s->r.split[i]].num_rows)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "job '%s': skip range [%" PRIu64 ", %" PRIu64
                                ") of split %u outside the splits",
                                jb->id, s->r.from[i], s->r.to[i], s->r.split[i]);
    if (!count) return SL_OK;
    /* merged: a split wholly skipped is one range [0, num_rows) */
    for (size_t i = 0; i < s->r.n; i++) {
        uint32_t sp = s->r.split[i];
        uint64_t c;
        if (s->r.from[i] != 0 || s->r.to[i] != jb->defs[sp].num_rows ||
            sl_master_order_counted(jb->ord, jb->pos[sp], &c))
            continue;
        sl_error_t e = {0};
        if (sl_master_order_count(jb->ord, jb->pos[sp], 0, &e) != SL_OK)
            return sl_error_set(err, SL_ERR_CORRUPT, "job '%s' split %u: %s", jb->id, sp, e.msg);
    }
    return SL_OK;
}

sl_err_t m_order_skip_epoch(sl_master_state_t *m, job *jb, const m_rset_cols *c, size_t i0,
                            size_t i1, sl_error_t *err)
{
    if (jb->ord == NULL) return SL_OK;
    return m_order_skip_set(m, jb, c->split + i0, c->from + i0, c->to + i0, i1 - i0, true, err);
}

uint32_t sl_master_state_order_skip(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                    uint32_t split, sl_dpp_row_range_t *out, uint32_t cap)
{
    const job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    if (jb == NULL || jb->order_skip == NULL || epoch != jb->epoch) return 0;
    const m_rset *r = &jb->order_skip->r;
    uint32_t n = 0;
    for (size_t i = first_of(r, split); i < r->n && r->split[i] == split; i++, n++)
        if (n < cap) out[n] = (sl_dpp_row_range_t){r->from[i], r->to[i]};
    return n;
}

/* Are rows [from, to) inside one committed range of s (sorted, disjoint,
 * not adjacent)? */
static bool committed_covers(const split_st *s, uint64_t from, uint64_t to)
{
    for (uint32_t i = 0; i < s->nr; i++)
        if (s->r[i].from_row <= from && to <= s->r[i].to_row) return true;
    return false;
}

sl_err_t m_order_skip_check(const job *jb, sl_error_t *err)
{
    if (jb->order_skip == NULL) return SL_OK;
    const m_rset *r = &jb->order_skip->r;
    for (size_t i = 0; i < r->n; i++) {
        /* skip rows are committed from the epoch's start, by the master */
        if (r->split[i] >= jb->n || !committed_covers(&jb->st[r->split[i]], r->from[i], r->to[i]))
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "job %s split %u: skip rows [%" PRIu64 ", %" PRIu64
                                ") not committed",
                                jb->id, r->split[i], r->from[i], r->to[i]);
    }
    return SL_OK;
}

sl_err_t m_order_skip_pb_build(const sl_master_state_t *m, const job *jb,
                               Sluice__Master__SnapshotJob *sj, sl_error_t *err)
{
    sj->n_order_skip_split = sj->n_order_skip_from = sj->n_order_skip_to = 0;
    sj->order_skip_split = NULL;
    sj->order_skip_from = sj->order_skip_to = NULL;
    if (jb->order_skip == NULL || jb->order_skip->r.n == 0) return SL_OK;
    const m_rset *r = &jb->order_skip->r;
    sj->order_skip_split = sl_alloc(m->a, r->n * sizeof *sj->order_skip_split);
    sj->order_skip_from = sl_alloc(m->a, r->n * sizeof *sj->order_skip_from);
    sj->order_skip_to = sl_alloc(m->a, r->n * sizeof *sj->order_skip_to);
    sj->n_order_skip_split = sj->n_order_skip_from = sj->n_order_skip_to = r->n;
    if (!sj->order_skip_split || !sj->order_skip_from || !sj->order_skip_to)
        return sl_error_set(err, SL_ERR_NOMEM, "snapshot of job '%s': skip rows", jb->id);
    memcpy(sj->order_skip_split, r->split, r->n * sizeof *r->split);
    memcpy(sj->order_skip_from, r->from, r->n * sizeof *r->from);
    memcpy(sj->order_skip_to, r->to, r->n * sizeof *r->to);
    return SL_OK;
}

void m_order_skip_pb_free(const sl_allocator_t *a, Sluice__Master__SnapshotJob *sj)
{
    size_t n = sj->n_order_skip_split;
    sl_free(a, sj->order_skip_split, n * sizeof *sj->order_skip_split);
    sl_free(a, sj->order_skip_from, n * sizeof *sj->order_skip_from);
    sl_free(a, sj->order_skip_to, n * sizeof *sj->order_skip_to);
    sj->order_skip_split = NULL;
    sj->order_skip_from = sj->order_skip_to = NULL;
    sj->n_order_skip_split = sj->n_order_skip_from = sj->n_order_skip_to = 0;
}

sl_err_t m_order_skip_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                              sl_error_t *err)
{
    size_t n = sj->n_order_skip_split;
    if (sj->n_order_skip_from != n || sj->n_order_skip_to != n || (n > 0 && jb->ord == NULL))
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "snapshot job '%s': skip rows of unequal columns or of a job not in "
                            "the deterministic order",
                            jb->id);
    /* the counts are the snapshot's: none made here */
    return m_order_skip_set(m, jb, sj->order_skip_split, sj->order_skip_from, sj->order_skip_to, n,
                            false, err);
}

void m_order_skip_dump(const job *jb, m_printf_fn pf, void *ctx)
{
    if (jb->order_skip == NULL) return;
    const m_rset *r = &jb->order_skip->r;
    pf(ctx, " order skip");
    for (size_t i = 0; i < r->n; i++)
        pf(ctx, " %u:[%" PRIu64 ",%" PRIu64 ")", r->split[i], r->from[i], r->to[i]);
    pf(ctx, "\n");
}

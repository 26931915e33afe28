/* The deterministic order in the master's state (docs/DESIGN.md, "A
 * deterministic order"): a deterministic job keeps, per epoch, the count
 * of batches of each split read from its first row (order.h, by position
 * in the epoch's order), the counted prefix and its bases. A count enters
 * through one record, BatchesCounted, applied here live and in replay
 * (m_apply); a snapshot keeps the counts of the current epoch. Leases of
 * such a job stay below the counted prefix + the job's window
 * (m_order_may_lease, used by lease_next), so no worker runs further
 * ahead of what can be numbered.
 *
 * Splits of no rows are counted (0 batches) when an epoch begins: a
 * function of the split list, so it is not journaled. Callers hold the
 * master's lock. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "common/err.h"
#include "dpp/master/state/state_internal.h"

static void count_empty(job *jb)
{
    for (uint32_t i = 0; i < jb->n; i++)
        if (jb->defs[i].num_rows == 0) {
            sl_error_t e = {0};
            /* a fresh count of 0 batches cannot fail */
            sl_err_t rc = sl_master_order_count(jb->ord, jb->pos[i], 0, &e);
            SL_ASSERT(rc == SL_OK, "job %s split %u: %s", jb->id, i, e.msg);
            (void)rc;
        }
}

sl_err_t m_order_build(sl_master_state_t *m, job *jb, const Sluice__Master__JobSpec *spec,
                       sl_error_t *err)
{
    jb->ord = NULL;
    if (spec->order == 0) return SL_OK;
    if (spec->order != 1)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': order %u (0 dynamic, 1 deterministic)",
                            jb->id, spec->order);
    if (jb->chunk != 0 || spec->kafka_chunk != 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': the deterministic order numbers a fixed split list; a "
                            "Kafka job has none",
                            jb->id);
    if (jb->static_sharding)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': the deterministic order deals batch g to rank g mod "
                            "ranks, static sharding a rank's own splits",
                            jb->id);
    if (jb->share)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': the deterministic order is never shared (share false)",
                            jb->id);
    if (jb->skip_bad)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': the deterministic order numbers every batch of a split; "
                            "a skipped split (on_bad_split \"skip\") has none to number",
                            jb->id);
    jb->order_window = spec->order_window;
    sl_err_t rc = sl_master_order_new(jb->n, spec->order_window, m->a, &jb->ord, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "job '%s': ", jb->id);
        return rc;
    }
    count_empty(jb);
    return SL_OK;
}

void m_order_free(job *jb)
{
    sl_master_order_destroy(jb->ord);
    jb->ord = NULL;
    m_order_skip_free(jb);
}

void m_order_advance(job *jb)
{
    if (jb->ord == NULL) return;
    sl_master_order_reset(jb->ord);
    count_empty(jb);
    m_order_skip_free(
        jb); /* a resumed job's next epoch: its `later`, if any (m_attr_epoch_began) */
}

bool m_order_split_counted(const job *jb, uint32_t split)
{
    uint64_t c;
    return jb->ord == NULL || sl_master_order_counted(jb->ord, jb->pos[split], &c);
}

bool m_order_may_lease(const job *jb, uint32_t split)
{
    return jb->ord == NULL || sl_master_order_may_lease(jb->ord, jb->pos[split]);
}

sl_err_t m_order_apply_counted(sl_master_state_t *m, const Sluice__Master__BatchesCounted *r,
                               uint64_t off, sl_error_t *err)
{
    char at[48];
    if (off == M_LIVE)
        snprintf(at, sizeof at, "live record");
    else
        snprintf(at, sizeof at, "record at offset %" PRIu64, off);
    uint32_t slot = 0;
    job *jb = r->job_id != NULL ? m_find_job(m, r->job_id, &slot) : NULL;
    if (jb == NULL || jb->ord == NULL || r->split >= jb->n || r->epoch != jb->epoch)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "%s: batches counted of job '%s' epoch %u split %u: no such "
                            "deterministic job, split or current epoch",
                            at, r->job_id ? r->job_id : "", r->epoch, r->split);
    sl_error_t e = {0};
    if (sl_master_order_count(jb->ord, jb->pos[r->split], r->batches, &e) != SL_OK)
        return sl_error_set(err, SL_ERR_CORRUPT, "%s: job '%s' split %u: %s", at, jb->id, r->split,
                            e.msg);
    /* its rows may all be committed already (the count came last) */
    m_maybe_done(m, slot, r->split);
    return SL_OK;
}

sl_err_t sl_master_state_batches_counted(sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                         uint32_t split, uint64_t generation, uint64_t batches,
                                         sl_error_t *err)
{
    job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    if (jb == NULL) return m_no_job(job_id ? job_id : "", err);
    if (jb->ord == NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "batches counted: job '%s' is not in the deterministic order", job_id);
    if (split >= jb->n)
        return sl_error_set(err, SL_ERR_INVALID, "batches counted: job '%s' has no split %u",
                            job_id, split);
    /* A count is a function of the split's rows: any lease of this epoch
     * that read the split from its first row gives it, also one whose
     * split went DONE through its commits before its SPLIT_READ came. A
     * lease of an older epoch, or one never granted, does not count. */
    const split_st *s = &jb->st[split];
    if (epoch != jb->epoch || generation == 0 || generation > s->generation)
        return sl_error_set(err, SL_ERR_AGAIN,
                            "batches counted: job '%s' epoch %u split %u generation %" PRIu64
                            ": not a lease of this epoch (epoch %u, generation %" PRIu64 ")",
                            job_id, epoch, split, generation, jb->epoch, s->generation);
    bool again;
    sl_err_t rc = sl_master_order_count_check(jb->ord, jb->pos[split], batches, &again, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "batches counted: job '%s' split %u: ", job_id, split);
        return rc;
    }
    if (again) return SL_OK;
    Sluice__Master__BatchesCounted bc = SLUICE__MASTER__BATCHES_COUNTED__INIT;
    bc.job_id = jb->id;
    bc.epoch = epoch;
    bc.split = split;
    bc.batches = batches;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_BATCHES_COUNTED;
    rec.batches_counted = &bc;
    rc = m_record(m, &rec, NULL, err);
    if (rc == SL_OK) rc = m_maybe_advance(m, jb, err);
    return rc;
}

bool sl_master_state_order_base(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                uint32_t split, uint64_t *base)
{
    const job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    if (jb == NULL || jb->ord == NULL || split >= jb->n || epoch != jb->epoch) return false;
    return sl_master_order_base(jb->ord, jb->pos[split], base);
}

sl_err_t m_order_check(const job *jb, sl_error_t *err)
{
    if (jb->ord == NULL) return SL_OK;
    char why[160];
    if (!sl_master_order_valid(jb->ord, why, sizeof why))
        return sl_error_set(err, SL_ERR_CORRUPT, "job %s: %s", jb->id, why);
    if (jb->epoch >= jb->epochs) return SL_OK;
    SL_FORWARD_IF_ERROR(m_order_skip_check(jb, err));
    for (uint32_t i = 0; i < jb->n; i++) {
        uint64_t c;
        if (jb->defs[i].num_rows == 0 && !sl_master_order_counted(jb->ord, jb->pos[i], &c))
            return sl_error_set(err, SL_ERR_CORRUPT, "job %s split %u: no rows, not counted",
                                jb->id, i);
        if (jb->st[i].state == SL_MASTER_SPLIT_LEASED && !m_order_may_lease(jb, i))
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "job %s split %u: leased at position %u, past the counted "
                                "prefix %u + the window",
                                jb->id, i, jb->pos[i], sl_master_order_prefix(jb->ord));
    }
    return SL_OK;
}

sl_err_t m_order_pb_build(const sl_master_state_t *m, const job *jb,
                          Sluice__Master__SnapshotJob *sj, sl_error_t *err)
{
    sj->n_order_counts = 0;
    sj->order_counts = NULL;
    if (jb->ord == NULL) return SL_OK;
    uint64_t *v = sl_alloc(m->a, (size_t)jb->n * sizeof *v);
    if (v == NULL) return sl_error_set(err, SL_ERR_NOMEM, "snapshot of job '%s'", jb->id);
    for (uint32_t i = 0; i < jb->n; i++) {
        uint64_t c;
        v[i] = sl_master_order_counted(jb->ord, jb->pos[i], &c) ? c + 1 : 0;
    }
    sj->order_counts = v;
    sj->n_order_counts = jb->n;
    return m_order_skip_pb_build(m, jb, sj, err);
}

void m_order_pb_free(const sl_allocator_t *a, Sluice__Master__SnapshotJob *sj)
{
    if (sj->order_counts != NULL) sl_free(a, sj->order_counts, sj->n_order_counts * 8);
    sj->order_counts = NULL;
    sj->n_order_counts = 0;
    m_order_skip_pb_free(a, sj);
}

sl_err_t m_order_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                         sl_error_t *err)
{
    /* The job was built with the snapshot's committed ranges as start
     * ranges, taken for skip rows: the snapshot's own skip rows and counts
     * instead. */
    if (jb->ord != NULL) {
        sl_master_order_reset(jb->ord);
        count_empty(jb);
    }
    SL_FORWARD_IF_ERROR(m_order_skip_restore(m, jb, sj, err));
    if (sj->n_order_counts == 0) return SL_OK;
    if (jb->ord == NULL || sj->n_order_counts != jb->n)
        return sl_error_set(
            err, SL_ERR_CORRUPT, "snapshot job '%s': order counts of %zu splits, the job has %u%s",
            jb->id, sj->n_order_counts, jb->n, jb->ord == NULL ? " and is not deterministic" : "");
    for (uint32_t i = 0; i < jb->n; i++) {
        if (sj->order_counts[i] == 0) continue;
        sl_error_t e = {0};
        if (sl_master_order_count(jb->ord, jb->pos[i], sj->order_counts[i] - 1, &e) != SL_OK)
            return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s' split %u: %s", jb->id, i,
                                e.msg);
    }
    return SL_OK;
}

void m_order_dump(const job *jb, m_printf_fn pf, void *ctx)
{
    if (jb->ord == NULL) return;
    pf(ctx, " order window %u prefix %u counts", jb->order_window, sl_master_order_prefix(jb->ord));
    for (uint32_t p = 0; p < jb->n; p++) {
        uint64_t c;
        if (sl_master_order_counted(jb->ord, p, &c)) pf(ctx, " %u:%" PRIu64, p, c);
    }
    pf(ctx, "\n");
    m_order_skip_dump(jb, pf, ctx);
}

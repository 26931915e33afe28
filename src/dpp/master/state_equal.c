/* Equal batches per rank (the job spec's batch.equal_batches_per_rank;
 * docs/DESIGN.md, "Equal batches per rank"). Under DDP the ranks meet in
 * an all-reduce at every step, so a rank that has one batch more than the
 * others in an epoch waits there for ever: torch's
 * DistributedSampler(drop_last=True) gives every rank the same count. The
 * ranks of a static-sharding job read shares that differ by up to a
 * split's rows, so the master counts the batches each rank committed in
 * an epoch (every split belongs to one rank: the Committed records say
 * it, no field of their own) and answers every commit with the epoch's
 * quota: the lowest count of any rank. A trainer hands out a batch only
 * while it has handed out fewer than the quota; it holds the others and
 * asks again, and once the quota is final it drops them.
 *
 * Final: counts only grow, so once the lowest count belongs to a rank
 * whose share of the epoch is done (its count cannot change), the lowest
 * final count is that count, whatever the other ranks still commit.
 * Waiting for every rank's share instead would deadlock: a rank holding
 * batches past the quota stops receiving (its window is full) and its
 * share never ends.
 *
 * State: per rank the counts of the two epochs it may be in (slot
 * epoch % 2: a rank is at most one epoch ahead of the job), the quota of
 * every epoch the job finished (a trainer may ask about a held batch after
 * its epoch ended) and the batches dropped. All of it changes in m_apply
 * only (m_equal_commit, m_equal_rank_began, m_equal_epoch_done), so replay
 * rebuilds it from the same records. Callers hold the master's lock. */
#include <string.h>

#include "dpp/master/state_internal.h"

sl_err_t m_equal_init(sl_master_state_t *m, job *jb, bool on, sl_error_t *err)
{
    if (!on) return SL_OK;
    if (jb->rank_of_split == NULL || jb->rank_epoch == NULL)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': equal_batches_per_rank needs static sharding over 2 or "
                            "more ranks",
                            jb->id);
    jb->eq_count = sl_calloc(m->a, 2 * (size_t)jb->ranks, sizeof *jb->eq_count);
    jb->eq_quota = sl_calloc(m->a, jb->epochs, sizeof *jb->eq_quota);
    if (jb->eq_count == NULL || jb->eq_quota == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': batches of %u ranks", jb->id, jb->ranks);
    return SL_OK;
}

void m_equal_free(const sl_allocator_t *a, job *jb)
{
    sl_free(a, jb->eq_count, 2 * (size_t)jb->ranks * sizeof *jb->eq_count);
    sl_free(a, jb->eq_quota, (size_t)jb->epochs * sizeof *jb->eq_quota);
    jb->eq_count = jb->eq_quota = NULL;
}

static uint64_t *slot_of(const job *jb, uint32_t epoch)
{
    return jb->eq_count + (size_t)(epoch & 1) * jb->ranks;
}

void m_equal_commit(job *jb, uint32_t split, uint32_t epoch)
{
    if (jb->eq_count == NULL) return;
    slot_of(jb, epoch)[jb->rank_of_split[split]]++;
}

void m_equal_rank_began(job *jb, uint32_t r, uint32_t epoch)
{
    /* the slot held epoch - 2, which the job finished */
    if (jb->eq_count != NULL) slot_of(jb, epoch)[r] = 0;
}

void m_equal_epoch_done(job *jb, uint32_t epoch)
{
    if (jb->eq_count == NULL || epoch >= jb->epochs) return;
    const uint64_t *c = slot_of(jb, epoch);
    uint64_t low = UINT64_MAX;
    for (uint32_t r = 0; r < jb->ranks; r++)
        if (c[r] < low) low = c[r];
    for (uint32_t r = 0; r < jb->ranks; r++)
        jb->eq_dropped += c[r] - low;
    jb->eq_quota[epoch] = low;
}

bool m_equal_quota(const job *jb, uint32_t epoch, uint64_t *quota, bool *final)
{
    *quota = 0;
    *final = true;
    if (jb->eq_count == NULL) return false;
    if (epoch >= jb->epochs) return true; /* no such epoch: nothing to hand out */
    if (epoch < jb->epoch) {
        *quota = jb->eq_quota[epoch];
        return true;
    }
    /* epoch is the job's or the next: each rank is in it, one behind it
     * (count 0 so far) or one ahead (its count of it is final) */
    const uint64_t *c = slot_of(jb, epoch);
    uint64_t low = UINT64_MAX;
    bool low_final = false;
    for (uint32_t r = 0; r < jb->ranks; r++) {
        uint32_t re = jb->rank_epoch[r];
        uint64_t n = re < epoch ? 0 : c[r];
        bool done = re > epoch || (re == epoch && jb->rank_left[r] == 0);
        if (n < low || (n == low && done)) {
            low_final = n < low ? done : low_final || done;
            low = n;
        }
    }
    *quota = low;
    *final = low_final;
    return true;
}

void m_equal_pb(const job *jb, Sluice__Master__SnapshotJob *sj)
{
    if (jb->eq_count == NULL) return;
    sj->n_equal_count = 2 * (size_t)jb->ranks;
    sj->equal_count = jb->eq_count;
    sj->n_equal_quota = jb->epoch < jb->epochs ? jb->epoch : jb->epochs;
    sj->equal_quota = jb->eq_quota;
    sj->equal_dropped_batches = jb->eq_dropped;
}

bool sl_master_state_equal_quota(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                 uint64_t *quota, bool *final)
{
    const job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    *quota = 0;
    *final = true;
    return jb != NULL && m_equal_quota(jb, epoch, quota, final);
}

sl_err_t m_equal_restore(job *jb, const Sluice__Master__SnapshotJob *sj, sl_error_t *err)
{
    if (jb->eq_count == NULL) {
        if (sj->n_equal_count == 0 && sj->n_equal_quota == 0) return SL_OK;
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "snapshot job '%s': batch counts of a job without "
                            "equal_batches_per_rank",
                            jb->id);
    }
    uint32_t done = jb->epoch < jb->epochs ? jb->epoch : jb->epochs;
    /* a snapshot of a job that began with this option always has both */
    if (sj->n_equal_count != 2 * (size_t)jb->ranks || sj->n_equal_quota > done)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "snapshot job '%s': batch counts of %zu ranks, quotas of %zu epochs "
                            "(%u ranks, %u epochs done)",
                            jb->id, sj->n_equal_count / 2, sj->n_equal_quota, jb->ranks, done);
    memcpy(jb->eq_count, sj->equal_count, sj->n_equal_count * sizeof *jb->eq_count);
    memset(jb->eq_quota, 0, (size_t)jb->epochs * sizeof *jb->eq_quota);
    if (sj->n_equal_quota > 0)
        memcpy(jb->eq_quota, sj->equal_quota, sj->n_equal_quota * sizeof *jb->eq_quota);
    jb->eq_dropped = sj->equal_dropped_batches;
    return SL_OK;
}

void m_equal_dump(const job *jb, m_printf_fn pf, void *ctx)
{
    if (jb->eq_count == NULL) return;
    pf(ctx, " equal batches dropped %llu counts", (unsigned long long)jb->eq_dropped);
    for (size_t k = 0; k < 2 * (size_t)jb->ranks; k++)
        pf(ctx, " %llu", (unsigned long long)jb->eq_count[k]);
    pf(ctx, " quotas");
    for (uint32_t e = 0; e < jb->epoch && e < jb->epochs; e++)
        pf(ctx, " %llu", (unsigned long long)jb->eq_quota[e]);
    pf(ctx, "\n");
}

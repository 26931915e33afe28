/* Equal batches per rank (the job spec's batch.equal_batches_per_rank;
 * docs/DESIGN.md, "Equal batches per rank"). Under DDP the ranks meet in
 * an all-reduce at every step, so a rank that has one batch more than the
 * others in an epoch waits there for ever: torch's
 * DistributedSampler(drop_last=True) gives every rank the same count. The
 * ranks of a static-sharding job read shares that differ by up to a
 * split's rows, those of a dynamic one whatever they read first, so the
 * master counts the batches each rank committed in an epoch (static: every
 * split belongs to one rank, the Committed record says whose without a
 * field of its own; dynamic: Committed.rank_plus_one, the client's rank)
 * and answers every commit with the epoch's quota: the lowest count of
 * any rank. A trainer hands out a batch only
 * while it has handed out fewer than the quota; it holds the others and
 * asks again, and once the quota is final it drops them.
 *
 * Final (static): counts only grow, so once the lowest count belongs to a
 * rank whose share of the epoch is done (its count cannot change), the
 * lowest final count is that count, whatever the other ranks still
 * commit. Dynamic: at the epoch's end (any rank may read any split).
 * Waiting for every rank's share instead would deadlock: a rank holding
 * batches past the quota stops receiving (its window is full) and its
 * share never ends.
 *
 * State: per rank the counts of the two epochs it may be in (slot
 * epoch % 2: a static rank is at most one epoch ahead of the job), their
 * batches' samples (cumulative), the quota of
 * every epoch the job finished (a trainer may ask about a held batch after
 * its epoch ended) and the batches dropped. All of it changes in m_apply
 * only (m_equal_commit, m_equal_rank_began, m_equal_epoch_done), so replay
 * rebuilds it from the same records. Callers hold the master's lock. */
#include <string.h>

#include "dpp/master/state/state_internal.h"

sl_err_t m_equal_init(sl_master_state_t *m, job *jb, bool on, sl_error_t *err)
{
    if (!on) return SL_OK;
    if (jb->ranks < 2 || jb->chunk != 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': equal_batches_per_rank needs a table job of 2 or more "
                            "ranks (a Kafka job's epoch does not end)",
                            jb->id);
    jb->eq_count = sl_calloc(m->a, 2 * (size_t)jb->ranks, sizeof *jb->eq_count);
    jb->eq_cum = sl_calloc(m->a, 2 * (size_t)jb->ranks, sizeof *jb->eq_cum);
    jb->eq_quota = sl_calloc(m->a, jb->epochs, sizeof *jb->eq_quota);
    if (jb->eq_count == NULL || jb->eq_cum == NULL || jb->eq_quota == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': batches of %u ranks", jb->id, jb->ranks);
    return SL_OK;
}

void m_equal_free(const sl_allocator_t *a, job *jb)
{
    size_t n = 2 * (size_t)jb->ranks;
    for (size_t k = 0; jb->eq_cum != NULL && k < n; k++)
        sl_free(a, jb->eq_cum[k].v, (size_t)jb->eq_cum[k].cap * sizeof *jb->eq_cum[k].v);
    sl_free(a, jb->eq_cum, n * sizeof *jb->eq_cum);
    sl_free(a, jb->eq_count, n * sizeof *jb->eq_count);
    sl_free(a, jb->eq_quota, (size_t)jb->epochs * sizeof *jb->eq_quota);
    jb->eq_count = jb->eq_quota = NULL;
    jb->eq_cum = NULL;
}

/* The index of rank r's count of epoch (slot epoch % 2). */
static size_t at(const job *jb, uint32_t r, uint32_t epoch)
{
    return (size_t)(epoch & 1) * jb->ranks + r;
}

/* Room for one more batch at index k. */
static sl_err_t reserve_at(sl_master_state_t *m, job *jb, size_t k, sl_error_t *err)
{
    struct m_eq_cum *c = &jb->eq_cum[k];
    if (jb->eq_count[k] < c->cap) return SL_OK;
    if (c->cap >= UINT32_MAX / 2)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s' rank %u: %u batches in an epoch",
                            jb->id, (uint32_t)(k % jb->ranks), c->cap);
    uint32_t cap = c->cap < 64 ? 64 : 2 * c->cap;
    uint64_t *v = sl_alloc(m->a, (size_t)cap * sizeof *v);
    if (v == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': samples of %u batches", jb->id, cap);
    if (jb->eq_count[k] > 0) memcpy(v, c->v, (size_t)jb->eq_count[k] * sizeof *v);
    sl_free(m->a, c->v, (size_t)c->cap * sizeof *v);
    c->v = v;
    c->cap = cap;
    return SL_OK;
}

uint32_t m_equal_rank_plus_one(const job *jb, uint32_t rank_plus_one)
{
    if (jb->eq_count == NULL || jb->rank_of_split != NULL) return 0;
    return rank_plus_one == 0 || rank_plus_one > jb->ranks ? 1 : rank_plus_one;
}

/* Whose batch: the split's rank (static sharding), else the client's. */
static uint32_t rank_of(const job *jb, uint32_t split, uint32_t rank_plus_one)
{
    return jb->rank_of_split != NULL ? jb->rank_of_split[split] : rank_plus_one - 1;
}

sl_err_t m_equal_reserve(sl_master_state_t *m, job *jb, uint32_t split, uint32_t epoch,
                         uint32_t rank_plus_one, sl_error_t *err)
{
    if (jb->eq_count == NULL) return SL_OK;
    return reserve_at(m, jb, at(jb, rank_of(jb, split, rank_plus_one), epoch), err);
}

void m_equal_commit(job *jb, uint32_t split, uint32_t epoch, uint32_t rank_plus_one,
                    uint32_t samples)
{
    if (jb->eq_count == NULL) return;
    size_t k = at(jb, rank_of(jb, split, rank_plus_one), epoch);
    uint64_t n = jb->eq_count[k]++;
    jb->eq_cum[k].v[n] = (n > 0 ? jb->eq_cum[k].v[n - 1] : 0) + samples;
}

void m_equal_rank_began(job *jb, uint32_t r, uint32_t epoch)
{
    /* the slot held epoch - 2, which the job finished (its room is kept) */
    if (jb->eq_count != NULL) jb->eq_count[at(jb, r, epoch)] = 0;
}

void m_equal_job_began(job *jb, uint32_t epoch)
{
    for (uint32_t r = 0; jb->eq_count != NULL && r < jb->ranks; r++)
        m_equal_rank_began(jb, r, epoch);
}

void m_equal_epoch_done(job *jb, uint32_t epoch)
{
    if (jb->eq_count == NULL || epoch >= jb->epochs) return;
    uint64_t low = UINT64_MAX;
    for (uint32_t r = 0; r < jb->ranks; r++)
        if (jb->eq_count[at(jb, r, epoch)] < low) low = jb->eq_count[at(jb, r, epoch)];
    for (uint32_t r = 0; r < jb->ranks; r++) {
        size_t k = at(jb, r, epoch);
        uint64_t n = jb->eq_count[k];
        if (n == low) continue;
        const uint64_t *cum = jb->eq_cum[k].v;
        jb->eq_dropped += n - low;
        jb->eq_dropped_samples += cum[n - 1] - (low > 0 ? cum[low - 1] : 0);
    }
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
    if (jb->rank_epoch == NULL) {
        /* dynamic sharding: any rank may still read any split, so no
         * count is final before the epoch ends */
        uint64_t low = UINT64_MAX;
        for (uint32_t r = 0; r < jb->ranks; r++) {
            uint64_t n = epoch == jb->epoch ? jb->eq_count[at(jb, r, epoch)] : 0;
            if (n < low) low = n;
        }
        *quota = low;
        *final = false;
        return true;
    }
    /* static: epoch is the job's or the next: each rank is in it, one
     * behind it (count 0 so far) or one ahead (its count of it is final) */
    uint64_t low = UINT64_MAX;
    bool low_final = false;
    for (uint32_t r = 0; r < jb->ranks; r++) {
        uint32_t re = jb->rank_epoch[r];
        uint64_t n = re < epoch ? 0 : jb->eq_count[at(jb, r, epoch)];
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

sl_err_t m_equal_pb(const sl_allocator_t *a, const job *jb, Sluice__Master__SnapshotJob *sj,
                    sl_error_t *err)
{
    if (jb->eq_count == NULL) return SL_OK;
    size_t n = 2 * (size_t)jb->ranks, total = 0;
    for (size_t k = 0; k < n; k++)
        total += jb->eq_count[k];
    uint64_t *v = sl_alloc(a, (total + 1) * sizeof *v);
    if (v == NULL) return sl_error_set(err, SL_ERR_NOMEM, "snapshot of job '%s': batches", jb->id);
    size_t w = 0;
    for (size_t k = 0; k < n; k++)
        for (uint64_t q = 0; q < jb->eq_count[k]; q++)
            v[w++] = jb->eq_cum[k].v[q];
    sj->n_equal_samples = total;
    sj->equal_samples = v;
    sj->n_equal_count = n;
    sj->equal_count = jb->eq_count;
    sj->n_equal_quota = jb->epoch < jb->epochs ? jb->epoch : jb->epochs;
    sj->equal_quota = jb->eq_quota;
    sj->equal_dropped_batches = jb->eq_dropped;
    sj->equal_dropped_samples = jb->eq_dropped_samples;
    return SL_OK;
}

void m_equal_pb_free(const sl_allocator_t *a, Sluice__Master__SnapshotJob *sj)
{
    if (sj->equal_samples != NULL)
        sl_free(a, sj->equal_samples, (sj->n_equal_samples + 1) * sizeof *sj->equal_samples);
    sj->equal_samples = NULL;
    sj->n_equal_samples = 0;
}

bool sl_master_state_commit_seen(const sl_master_state_t *m, const char *client_id, uint64_t nonce)
{
    uint32_t ci;
    return client_id != NULL && m_client_find(m, client_id, &ci) && m_client_has(m, ci, nonce);
}

bool sl_master_state_equal_quota(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                 uint64_t *quota, bool *final)
{
    const job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    *quota = 0;
    *final = true;
    return jb != NULL && m_equal_quota(jb, epoch, quota, final);
}

sl_err_t m_equal_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                         sl_error_t *err)
{
    if (jb->eq_count == NULL) {
        if (sj->n_equal_count == 0 && sj->n_equal_quota == 0 && sj->n_equal_samples == 0)
            return SL_OK;
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "snapshot job '%s': batch counts of a job without "
                            "equal_batches_per_rank",
                            jb->id);
    }
    uint32_t done = jb->epoch < jb->epochs ? jb->epoch : jb->epochs;
    size_t n = 2 * (size_t)jb->ranks, total = 0;
    /* a snapshot of a job that began with this option always has them */
    bool ok = sj->n_equal_count == n && sj->n_equal_quota <= done;
    for (size_t k = 0; ok && k < n; k++) {
        ok = sj->equal_count[k] < UINT32_MAX / 2 &&
             total + sj->equal_count[k] <= sj->n_equal_samples;
        if (ok) total += sj->equal_count[k];
    }
    if (!ok || total != sj->n_equal_samples)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "snapshot job '%s': batch counts of %zu ranks, quotas of %zu epochs, "
                            "%zu batches' samples (%u ranks, %u epochs done)",
                            jb->id, sj->n_equal_count / 2, sj->n_equal_quota, sj->n_equal_samples,
                            jb->ranks, done);
    size_t from = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t r = (uint32_t)(k % jb->ranks);
        jb->eq_count[k] = 0;
        for (uint64_t q = 0; q < sj->equal_count[k]; q++) {
            /* the samples are cumulative: each at least the one before */
            uint64_t prev = q > 0 ? sj->equal_samples[from + q - 1] : 0;
            if (sj->equal_samples[from + q] < prev)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "snapshot job '%s' rank %u: samples of batch %llu go down",
                                    jb->id, r, (unsigned long long)q);
            sl_err_t rc = reserve_at(m, jb, k, err);
            if (rc != SL_OK) return rc;
            jb->eq_cum[k].v[jb->eq_count[k]++] = sj->equal_samples[from + q];
        }
        from += sj->equal_count[k];
    }
    memset(jb->eq_quota, 0, (size_t)jb->epochs * sizeof *jb->eq_quota);
    if (sj->n_equal_quota > 0)
        memcpy(jb->eq_quota, sj->equal_quota, sj->n_equal_quota * sizeof *jb->eq_quota);
    jb->eq_dropped = sj->equal_dropped_batches;
    jb->eq_dropped_samples = sj->equal_dropped_samples;
    return SL_OK;
}

void m_equal_dump(const job *jb, m_printf_fn pf, void *ctx)
{
    if (jb->eq_count == NULL) return;
    pf(ctx, " equal batches dropped %llu (%llu samples) counts", (unsigned long long)jb->eq_dropped,
       (unsigned long long)jb->eq_dropped_samples);
    for (size_t k = 0; k < 2 * (size_t)jb->ranks; k++)
        pf(ctx, " %llu/%llu", (unsigned long long)jb->eq_count[k],
           (unsigned long long)(jb->eq_count[k] > 0 ? jb->eq_cum[k].v[jb->eq_count[k] - 1] : 0));
    pf(ctx, " quotas");
    for (uint32_t e = 0; e < jb->epoch && e < jb->epochs; e++)
        pf(ctx, " %llu", (unsigned long long)jb->eq_quota[e]);
    pf(ctx, "\n");
}

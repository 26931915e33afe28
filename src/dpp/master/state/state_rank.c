/* Per-rank epochs of a static-sharding job (docs/DESIGN.md, "Static
 * sharding"). Each split is served to one rank only, and the ranks' shares
 * differ by up to a split's rows, so one epoch for the whole job would hold
 * a rank that has read its share until the slowest rank read its own (and
 * a DDP trainer whose ranks meet in an all-reduce every step would wait
 * for ever: the rank that finished first waits for the next epoch's
 * batches while the others wait for it). Here each rank's share of epoch e
 * is leased, committed and finished on its own: when every split of rank
 * r is DONE, r begins its next epoch (an EpochAdvanced record with
 * rank_plus_one = r + 1, applied by m_rank_apply_advance from m_apply,
 * live and in replay), and the job's epoch is the lowest of its ranks'.
 *
 * Invariant: a rank is at most one epoch ahead of the job (rank_epoch[r]
 * is jb->epoch or jb->epoch + 1, or jb->epochs once r is finished), so
 * that the attribution of two epochs per split is enough for a rank's
 * resume token and the tokens of one checkpoint are at most one epoch
 * apart (state_token.c). A split's state, committed ranges and
 * attribution entries are of its rank's epoch (m_split_epoch).
 *
 * A resumed job whose next epoch holds ranges back (`later`) or whose
 * assignment is redone then (`restatic`) advances as a whole, as before,
 * until that epoch began. Callers hold the master's lock. */
#include <stdio.h>
#include <string.h>

#include "dpp/master/state/state_internal.h"

uint32_t m_split_epoch(const job *jb, uint32_t split)
{
    return jb->rank_epoch != NULL ? jb->rank_epoch[jb->rank_of_split[split]] : jb->epoch;
}

sl_err_t m_rank_init(sl_master_state_t *m, job *jb, sl_error_t *err)
{
    if (!jb->static_sharding || jb->chunk != 0) return SL_OK;
    jb->rank_epoch = sl_alloc(m->a, sl_mul_size(jb->ranks, sizeof *jb->rank_epoch));
    jb->rank_left = sl_alloc(m->a, sl_mul_size(jb->ranks, sizeof *jb->rank_left));
    if (jb->rank_epoch == NULL || jb->rank_left == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': epochs of %u ranks", jb->id, jb->ranks);
    for (uint32_t r = 0; r < jb->ranks; r++)
        jb->rank_epoch[r] = jb->epoch;
    m_rank_recount(jb);
    return SL_OK;
}

void m_rank_free(const sl_allocator_t *a, job *jb)
{
    sl_free(a, jb->rank_epoch, (size_t)jb->ranks * sizeof *jb->rank_epoch);
    sl_free(a, jb->rank_left, (size_t)jb->ranks * sizeof *jb->rank_left);
    jb->rank_epoch = jb->rank_left = NULL;
}

void m_rank_recount(job *jb)
{
    if (jb->rank_left == NULL) return;
    memset(jb->rank_left, 0, (size_t)jb->ranks * sizeof *jb->rank_left);
    for (uint32_t i = 0; i < jb->n; i++)
        if (jb->st[i].state != SL_MASTER_SPLIT_DONE) jb->rank_left[jb->rank_of_split[i]]++;
}

bool m_rank_level(const job *jb)
{
    for (uint32_t r = 0; jb->rank_epoch != NULL && r < jb->ranks; r++)
        if (jb->rank_epoch[r] != jb->epoch) return false;
    return true;
}

bool m_rank_mode(const job *jb)
{
    return jb->rank_epoch != NULL && jb->later == NULL && !jb->restatic;
}

uint32_t m_rank_ready(const job *jb)
{
    if (!m_rank_mode(jb) || jb->epoch >= jb->epochs || jb->failed) return UINT32_MAX;
    /* O(ranks) per call (a split became DONE): ranks are trainer ranks,
     * hundreds at most */
    for (uint32_t r = 0; r < jb->ranks; r++)
        if (jb->rank_left[r] == 0 && jb->rank_epoch[r] <= jb->epoch) return r;
    return UINT32_MAX;
}

/* Room in the previous list for rank r's advance: its entries kept there
 * (the other ranks') plus its current ones. A live advance takes it
 * before its record goes out, so that applying the record cannot fail;
 * replay takes it when applying. SL_ERR_NOMEM leaves the lists as they
 * were. */
static sl_err_t reserve_rotate(sl_master_state_t *m, job *jb, uint32_t r, sl_error_t *err)
{
    m_attr_list *prev = &jb->attr[0], *cur = &jb->attr[1];
    uint64_t need = 0;
    for (uint32_t q = 0; q < prev->n; q++)
        need += jb->rank_of_split[prev->v[q].split] != r;
    for (uint32_t q = 0; q < cur->n; q++)
        need += jb->rank_of_split[cur->v[q].split] == r;
    if (need <= prev->cap) return SL_OK;
    /* prev->n + cur->n entries at most: below UINT32_MAX, as each list is */
    m_attr *v = sl_alloc(m->a, (size_t)need * sizeof *v);
    if (v == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': who committed what", jb->id);
    if (prev->n > 0) memcpy(v, prev->v, (size_t)prev->n * sizeof *v);
    sl_free(m->a, prev->v, (size_t)prev->cap * sizeof *v);
    prev->v = v;
    prev->cap = (uint32_t)need;
    return SL_OK;
}

/* Rank r's entries of the current list become its previous ones (its
 * older previous ones go): the per-split half of m_attr_rotate. Room:
 * reserve_rotate. */
static void rotate_rank(job *jb, uint32_t r)
{
    m_attr_list *prev = &jb->attr[0], *cur = &jb->attr[1];
    uint32_t w = 0;
    for (uint32_t q = 0; q < prev->n; q++)
        if (jb->rank_of_split[prev->v[q].split] != r) prev->v[w++] = prev->v[q];
    prev->n = w;
    w = 0;
    for (uint32_t q = 0; q < cur->n; q++) {
        if (jb->rank_of_split[cur->v[q].split] == r)
            prev->v[prev->n++] = cur->v[q];
        else
            cur->v[w++] = cur->v[q];
    }
    cur->n = w;
    /* the entries left moved down: each split's latest is found again */
    if (jb->attr_last != NULL) {
        memset(jb->attr_last, 0, (size_t)jb->n * sizeof *jb->attr_last);
        for (uint32_t q = 0; q < cur->n; q++)
            jb->attr_last[cur->v[q].split] = q + 1;
    }
}

sl_err_t m_rank_apply_advance(sl_master_state_t *m, uint32_t slot, uint32_t r, uint32_t epoch,
                              sl_error_t *err)
{
    job *jb = m->jobs[slot];
    if (!m_rank_mode(jb) || r >= jb->ranks || jb->epoch >= jb->epochs || jb->failed ||
        jb->rank_left[r] != 0 || jb->rank_epoch[r] > jb->epoch || epoch != jb->rank_epoch[r] + 1)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "job '%s' rank %u advancing to epoch %u: its share of its epoch is "
                            "not done, or it is ahead of the job",
                            jb->id, r, epoch);
    sl_err_t rc = reserve_rotate(m, jb, r, err);
    if (rc != SL_OK) return rc;
    rotate_rank(jb, r);
    jb->rank_epoch[r] = epoch;
    m_equal_rank_began(jb, r, epoch);
    bool finished = epoch >= jb->epochs;
    for (uint32_t i = 0; i < jb->n; i++) {
        if (jb->rank_of_split[i] != r) continue;
        split_st *s = &jb->st[i];
        jb->committed_rows -= s->committed;
        jb->split_failures -= s->failures;
        m_free_ranges(m->a, s);
        *s = (split_st){
            .generation = s->generation, .worker = NO_WORKER, .state = SL_MASTER_SPLIT_DONE};
        /* a finished rank's splits stay DONE, holding nothing; splits of
         * no rows are done at once */
        if (!finished && jb->defs[i].num_rows > 0) {
            m_split_state(jb, i, SL_MASTER_SPLIT_PENDING);
            m_queue_pending(jb, i); /* behind the cursor: the heap, else the cursor finds it */
        }
    }
    uint32_t low = jb->epochs;
    for (uint32_t k = 0; k < jb->ranks; k++)
        if (jb->rank_epoch[k] < low) low = jb->rank_epoch[k];
    if (low > jb->epoch) {
        /* every rank's share of the job's epoch is done: the job's epoch
         * moves on (its split order is the new epoch's) */
        m_equal_epoch_done(jb, jb->epoch);
        jb->epoch = low;
        m->c.epochs_advanced++;
        if (jb->epoch < jb->epochs) {
            m_set_order(jb);
            m_reset_queue(jb);
        }
    }
    return SL_OK;
}

sl_err_t m_rank_maybe_advance(sl_master_state_t *m, job *jb, sl_error_t *err)
{
    uint32_t r;
    while ((r = m_rank_ready(jb)) != UINT32_MAX) {
        Sluice__Master__EpochAdvanced ea = SLUICE__MASTER__EPOCH_ADVANCED__INIT;
        ea.job_id = jb->id;
        ea.epoch = jb->rank_epoch[r] + 1;
        ea.rank_plus_one = r + 1;
        Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
        rec.kind_case = SLUICE__MASTER__RECORD__KIND_EPOCH_ADVANCED;
        rec.epoch_advanced = &ea;
        sl_err_t rc = reserve_rotate(m, jb, r, err);
        if (rc == SL_OK) rc = m_record(m, &rec, NULL, err);
        if (rc != SL_OK) return rc;
    }
    return SL_OK;
}

sl_err_t m_rank_restore(sl_master_state_t *m, job *jb, const uint32_t *epochs, size_t n,
                        sl_error_t *err)
{
    if (n == 0) return SL_OK;
    if (jb->rank_epoch == NULL || n != jb->ranks)
        return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': epochs of %zu ranks", jb->id,
                            n);
    (void)m;
    for (uint32_t r = 0; r < jb->ranks; r++) {
        /* the job's epoch is the lowest; a rank at most one ahead, or
         * finished */
        bool ok = epochs[r] == jb->epoch || epochs[r] == jb->epochs ||
                  (epochs[r] == jb->epoch + 1 && epochs[r] < jb->epochs);
        if (!ok)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "snapshot job '%s': rank %u in epoch %u, the job in %u", jb->id, r,
                                epochs[r], jb->epoch);
        jb->rank_epoch[r] = epochs[r];
    }
    return SL_OK;
}

sl_err_t m_rank_check(const sl_allocator_t *a, const job *jb, sl_error_t *err)
{
    if (jb->rank_epoch == NULL) return SL_OK;
    uint32_t low = jb->epochs;
    for (uint32_t r = 0; r < jb->ranks; r++) {
        uint32_t e = jb->rank_epoch[r];
        if (e < low) low = e;
        if (e != jb->epoch && e != jb->epochs && e != jb->epoch + 1)
            return sl_error_set(err, SL_ERR_CORRUPT, "job %s: rank %u in epoch %u, the job in %u",
                                jb->id, r, e, jb->epoch);
        if (e != jb->epoch && !m_rank_mode(jb))
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "job %s: rank %u in epoch %u while the job advances as a whole",
                                jb->id, r, e);
    }
    if (jb->epoch < jb->epochs && low != jb->epoch)
        return sl_error_set(err, SL_ERR_CORRUPT, "job %s: in epoch %u, its lowest rank in %u",
                            jb->id, jb->epoch, low);
    uint32_t *left = sl_calloc(a, jb->ranks, sizeof *left);
    if (left == NULL) return SL_OK; /* a check that cannot run finds nothing */
    for (uint32_t i = 0; i < jb->n; i++)
        left[jb->rank_of_split[i]] += jb->st[i].state != SL_MASTER_SPLIT_DONE;
    sl_err_t rc = SL_OK;
    for (uint32_t r = 0; rc == SL_OK && r < jb->ranks; r++)
        if (left[r] != jb->rank_left[r])
            rc = sl_error_set(err, SL_ERR_CORRUPT, "job %s: rank %u has %u splits left, counted %u",
                              jb->id, r, left[r], jb->rank_left[r]);
    sl_free(a, left, (size_t)jb->ranks * sizeof *left);
    return rc;
}

void m_rank_dump(const job *jb, m_printf_fn pf, void *ctx)
{
    if (jb->rank_epoch == NULL) return;
    pf(ctx, " rank epochs");
    for (uint32_t r = 0; r < jb->ranks; r++)
        pf(ctx, " %u", jb->rank_epoch[r]);
    pf(ctx, "\n");
}

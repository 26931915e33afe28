/* Splits that cannot be read, and jobs that fail because of them
 * (state.h, sl_master_state_split_failed; docs/DESIGN.md, "Failed
 * jobs"). A worker's SPLIT_FAILED is counted against the split for the
 * epoch, whichever worker sent it, and releases the lease; the split's
 * max_failures-th failure either skips the split (on_bad_split "skip": its
 * uncommitted rows are committed as empty, so none of them is ever
 * delivered, and counted) or fails the job (terminal: no lease, no commit,
 * workers told to stop, trainers told why). The limit is the master
 * process's option and may change between runs, so the consequence is
 * journaled as a record of its own (SplitSkipped, JobFailed), never
 * recomputed in replay. Callers hold the master's lock. */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "dpp/master/state/state_internal.h"

void m_free_failure(const sl_allocator_t *a, job *jb)
{
    sl_strfree(a, jb->fail_file);
    sl_strfree(a, jb->fail_message);
    jb->fail_file = jb->fail_message = NULL;
}

void m_apply_split_failed(sl_master_state_t *m, uint32_t slot, uint32_t split)
{
    job *jb = m->jobs[slot];
    split_st *s = &jb->st[split];
    if (s->failures < UINT16_MAX) {
        s->failures++;
        jb->split_failures++;
    }
    m_do_release(m, slot, split, SL_MASTER_SPLIT_PENDING);
    m->c.split_failures++;
}

/* Copies of the failure's file and message (what the job keeps of it). */
static sl_err_t failure_strings(sl_master_state_t *m, const job *jb,
                                const Sluice__Master__JobFailure *f, char **file, char **msg,
                                sl_error_t *err)
{
    *file = sl_strdup(m->a, f->file != NULL ? f->file : "");
    *msg = sl_strdup(m->a, f->message != NULL ? f->message : "");
    if (*file != NULL && *msg != NULL) return SL_OK;
    sl_strfree(m->a, *file);
    sl_strfree(m->a, *msg);
    return sl_error_set(err, SL_ERR_NOMEM, "job '%s': failure", jb->id);
}

void m_set_job_failed(sl_master_state_t *m, uint32_t slot, const Sluice__Master__JobFailure *f,
                      char *file, char *msg)
{
    job *jb = m->jobs[slot];
    m_free_failure(m->a, jb);
    jb->failed = true;
    jb->fail_split = f->split;
    jb->fail_epoch = f->epoch;
    jb->fail_stripe = f->stripe;
    jb->fail_code = f->code;
    jb->fail_file = file;
    jb->fail_message = msg;
    /* Every lease ends: nothing of a failed job is read any more. */
    for (uint32_t i = 0; i < jb->n; i++)
        if (jb->st[i].state == SL_MASTER_SPLIT_LEASED)
            m_do_release(m, slot, i, SL_MASTER_SPLIT_PENDING);
    m->c.jobs_failed++;
}

sl_err_t m_apply_job_failed(sl_master_state_t *m, uint32_t slot,
                            const Sluice__Master__JobFailure *f, sl_error_t *err)
{
    char *file, *msg;
    sl_err_t rc = failure_strings(m, m->jobs[slot], f, &file, &msg, err);
    if (rc == SL_OK) m_set_job_failed(m, slot, f, file, msg);
    return rc;
}

sl_err_t m_apply_split_skipped(sl_master_state_t *m, uint32_t slot, uint32_t split, uint64_t *rows,
                               sl_error_t *err)
{
    job *jb = m->jobs[slot];
    split_st *s = &jb->st[split];
    uint64_t n = jb->defs[split].num_rows;
    /* The gaps between the committed ranges are committed as empty: the
     * split is one range [0, n) (room for it: m_reserve_ranges). */
    sl_err_t rc = m_reserve_ranges(m, jb, split, s->nr == 0 ? 1 : 0, err);
    if (rc == SL_OK) rc = m_attr_gaps(m, jb, split, 0, n, M_OWNER_MASTER, err);
    if (rc != SL_OK) return rc;
    uint64_t skipped = n - s->committed;
    if (n > 0) {
        s->r[0] = (sl_dpp_row_range_t){0, n};
        s->nr = 1;
    }
    s->committed = n;
    jb->committed_rows += skipped;
    m->c.committed_rows += skipped;
    jb->skipped_splits++;
    jb->skipped_rows += skipped;
    m->c.splits_skipped++;
    m_maybe_done(m, slot, split);
    if (rows != NULL) *rows = skipped;
    return SL_OK;
}

static sl_err_t journal_split_failed(sl_master_state_t *m, const job *jb, uint32_t split,
                                     uint64_t generation, sl_error_t *err)
{
    Sluice__Master__SplitFailed sf = SLUICE__MASTER__SPLIT_FAILED__INIT;
    sf.job_id = jb->id;
    sf.split = split;
    sf.generation = generation;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_SPLIT_FAILED;
    rec.split_failed = &sf;
    return m_record(m, &rec, NULL, err);
}

/* Skip the split (journaled with the rows it skips, as a check). */
static sl_err_t skip_split(sl_master_state_t *m, uint32_t slot, uint32_t split, sl_error_t *err)
{
    job *jb = m->jobs[slot];
    const split_st *s = &jb->st[split];
    Sluice__Master__SplitSkipped sk = SLUICE__MASTER__SPLIT_SKIPPED__INIT;
    sk.job_id = jb->id;
    sk.split = split;
    sk.rows = jb->defs[split].num_rows - s->committed;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_SPLIT_SKIPPED;
    rec.split_skipped = &sk;
    /* Room first: once the record is out, applying it must not fail. */
    sl_err_t rc = m_reserve_ranges(m, jb, split, 1, err);
    if (rc == SL_OK) rc = m_attr_reserve(m, jb, s->nr + 1, err);
    if (rc == SL_OK) rc = m_record(m, &rec, NULL, err);
    if (rc == SL_OK) rc = m_maybe_advance(m, jb, err);
    return rc;
}

static sl_err_t fail_job(sl_master_state_t *m, uint32_t slot, const sl_master_split_failure_t *f,
                         sl_error_t *err)
{
    job *jb = m->jobs[slot];
    Sluice__Master__JobFailure jf = SLUICE__MASTER__JOB_FAILURE__INIT;
    jf.split = f->split;
    jf.epoch = f->epoch;
    jf.file = (char *)(f->file != NULL ? f->file : "");
    jf.stripe = f->stripe;
    jf.message = (char *)(f->message != NULL ? f->message : "");
    jf.code = f->code;
    Sluice__Master__JobFailed jd = SLUICE__MASTER__JOB_FAILED__INIT;
    jd.job_id = jb->id;
    jd.failure = &jf;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_JOB_FAILED;
    rec.job_failed = &jd;
    m_live live = {.now_ms = m->now_ms};
    sl_err_t rc = failure_strings(m, jb, &jf, &live.fail_file, &live.fail_message, err);
    if (rc == SL_OK) rc = m_record(m, &rec, &live, err);
    /* not applied (the journal failed): the copies are still ours */
    sl_strfree(m->a, live.fail_file);
    sl_strfree(m->a, live.fail_message);
    return rc;
}

/* *result gets the outcome; a non-OK return is a failure of the master. */
static sl_err_t split_failed(sl_master_state_t *m, const sl_master_split_failure_t *f,
                             uint32_t max_failures, sl_master_split_fail_result_t *result,
                             sl_error_t *err)
{
    uint32_t slot;
    *result = SL_MASTER_FAIL_STALE;
    job *jb = f->job_id != NULL ? m_find_job(m, f->job_id, &slot) : NULL;
    if (jb == NULL)
        return sl_error_set(err, SL_OK, "split failed: no job '%s'", f->job_id ? f->job_id : "");
    if (f->split >= jb->n)
        return sl_error_set(err, SL_OK, "split failed: job '%s' has no split %u", f->job_id,
                            f->split);
    const split_st *s = &jb->st[f->split];
    if (jb->failed || f->epoch != m_split_epoch(jb, f->split) ||
        s->state != SL_MASTER_SPLIT_LEASED || s->generation != f->generation) {
        m->c.stale_refused++;
        return sl_error_set(err, SL_OK,
                            "split failed: job '%s' epoch %u split %u: generation %llu is not the "
                            "live lease",
                            f->job_id, f->epoch, f->split, (unsigned long long)f->generation);
    }
    SL_FORWARD_IF_ERROR(journal_split_failed(m, jb, f->split, f->generation, err));
    *result = SL_MASTER_FAIL_RETRY;
    if (jb->st[f->split].failures < (max_failures ? max_failures : 1)) return SL_OK;
    if (jb->skip_bad) {
        *result = SL_MASTER_FAIL_SKIPPED;
        return skip_split(m, slot, f->split, err);
    }
    *result = SL_MASTER_FAIL_JOB_FAILED;
    return fail_job(m, slot, f, err);
}

sl_master_split_fail_result_t sl_master_state_split_failed(sl_master_state_t *m,
                                                           const sl_master_split_failure_t *f,
                                                           uint32_t max_failures, sl_error_t *err)
{
    sl_master_split_fail_result_t result;
    sl_err_t rc = split_failed(m, f, max_failures, &result, err);
    return rc == SL_OK ? result : SL_MASTER_FAIL_ERROR;
}

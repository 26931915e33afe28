/* The one Apply of the DPP master's state machine (as tf.data service's
 * DispatcherState::Apply): m_apply changes the journaled state from one
 * record, and nothing else does. A live transition checks its request,
 * reserves what applying will need, builds its record and hands it to
 * m_record, which appends it to the journal and applies it; replay hands
 * every record read back to m_apply. So replay equals the live run by
 * construction.
 *
 * Records read back are bytes from disk: every field is checked against
 * the state it applies to, and anything a live master could not have
 * written is SL_ERR_CORRUPT naming its offset. The same checks run on the
 * live records (a failure there is a bug: SL_ASSERT in test builds).
 * Callers hold the master's lock. */
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "dpp/master/state/state_internal.h"

/* "record at offset N" or, for a live record, "live record". */
static const char *where(char *buf, size_t cap, uint64_t off)
{
    if (off == M_LIVE)
        snprintf(buf, cap, "live record");
    else
        snprintf(buf, cap, "record at offset %llu", (unsigned long long)off);
    return buf;
}

static sl_err_t bad(sl_error_t *err, uint64_t off, const char *fmt, const char *job, uint32_t split,
                    const char *why)
{
    char what[256], at[48];
    snprintf(what, sizeof what, fmt, job, split);
    return sl_error_set(err, SL_ERR_CORRUPT, "%s: %s: %s", where(at, sizeof at, off), what, why);
}

static sl_err_t at_prefix(sl_error_t *err, uint64_t off)
{
    char at[48];
    return sl_error_prefix(err, "%s: ", where(at, sizeof at, off));
}

/* The live lease a record names, or a corruption error. */
static sl_err_t find_lease(sl_master_state_t *m, const char *job_id, uint32_t split, uint64_t gen,
                           uint64_t off, const char *what, uint32_t *slot, sl_error_t *err)
{
    job *jb = job_id != NULL ? m_find_job(m, job_id, slot) : NULL;
    if (jb == NULL) return bad(err, off, what, job_id ? job_id : "", split, "unknown job");
    if (split >= jb->n) return bad(err, off, what, job_id, split, "no such split");
    const split_st *s = &jb->st[split];
    if (s->state != SL_MASTER_SPLIT_LEASED || s->generation != gen)
        return bad(err, off, what, job_id, split, "not leased under that generation");
    return SL_OK;
}

static sl_err_t apply_job_added(sl_master_state_t *m, const Sluice__Master__JobAdded *ja,
                                m_live *live, uint64_t off, sl_error_t *err)
{
    if (live != NULL && live->built != NULL) {
        /* checked and built by the transition before its record went out */
        m_job_link(m, live->built);
        live->built = NULL;
        return SL_OK;
    }
    sl_err_t rc = m_add_job(m, ja, err);
    if (rc == SL_OK || rc == SL_ERR_NOMEM) return rc;
    /* A record a live master could not have written. */
    at_prefix(err, off);
    sl_error_prefix(err, "job added: ");
    if (err != NULL) err->code = SL_ERR_CORRUPT;
    return SL_ERR_CORRUPT;
}

static sl_err_t apply_lease(sl_master_state_t *m, const Sluice__Master__LeaseGranted *lg,
                            const m_live *live, uint64_t off, sl_error_t *err)
{
    uint32_t slot, w;
    const char *what = "lease of job '%s' split %u";
    job *jb = lg->job_id != NULL ? m_find_job(m, lg->job_id, &slot) : NULL;
    if (jb == NULL)
        return bad(err, off, what, lg->job_id ? lg->job_id : "", lg->split, "unknown job");
    if (lg->split >= jb->n || m_split_epoch(jb, lg->split) >= jb->epochs ||
        jb->st[lg->split].state != SL_MASTER_SPLIT_PENDING)
        return bad(err, off, what, lg->job_id, lg->split, "split not pending");
    if (lg->generation < m->next_generation)
        return bad(err, off, what, lg->job_id, lg->split, "generation not increasing");
    if (!m_name_ok(m, lg->worker))
        return bad(err, off, what, lg->job_id, lg->split, "bad worker id");
    /* live: the worker and room for its lease were made before the record */
    sl_err_t rc = m_worker_get(m, lg->worker, &w, err);
    if (rc == SL_OK && !m_worker_reserve(m, w)) rc = sl_error_set(err, SL_ERR_NOMEM, "lease");
    if (rc != SL_OK) return at_prefix(err, off);
    m_take_pending(jb, lg->split);
    /* The expiry is not journaled: replay's leases all expire at restart
     * + timeout (after_replay). */
    uint64_t expiry = live != NULL ? live->now_ms + m->opts.lease_timeout_ms : 0;
    m_do_lease(m, slot, lg->split, w, lg->generation, expiry);
    return SL_OK;
}

static sl_err_t apply_commit(sl_master_state_t *m, const Sluice__Master__Committed *c, uint64_t off,
                             sl_error_t *err)
{
    uint32_t slot, ci;
    const char *what = "commit of job '%s' split %u";
    job *jb = c->job_id != NULL ? m_find_job(m, c->job_id, &slot) : NULL;
    if (jb == NULL) return bad(err, off, what, c->job_id ? c->job_id : "", c->split, "unknown job");
    if (c->split >= jb->n || c->epoch != m_split_epoch(jb, c->split) || c->epoch >= jb->epochs ||
        c->from_row >= c->to_row || c->to_row > jb->defs[c->split].num_rows ||
        m_overlaps(jb, c->split, c->from_row, c->to_row))
        return bad(err, off, what, c->job_id, c->split,
                   "not the current epoch, outside the split or overlapping");
    /* live: the client, its owner entry and room for the range were made
     * before the record (m_reserve_ranges, m_attr_reserve): nothing below
     * allocates then */
    sl_err_t rc = m_client_get(m, c->client_id != NULL ? c->client_id : "", &ci, err);
    if (rc == SL_OK && m_client_has(m, ci, c->nonce))
        return bad(err, off, what, c->job_id, c->split, "nonce committed twice");
    uint32_t owner = M_OWNER_MASTER;
    if (rc == SL_OK) rc = m_attr_owner(m, jb, c->client_id, &owner, err);
    if (rc == SL_OK && c->rank_plus_one != m_equal_rank_plus_one(jb, c->rank_plus_one))
        return bad(err, off, what, c->job_id, c->split, "rank not of the job");
    if (rc == SL_OK) rc = m_equal_reserve(m, jb, c->split, c->epoch, c->rank_plus_one, err);
    if (rc == SL_OK) rc = m_add_range(m, jb, c->split, c->from_row, c->to_row, owner, err);
    if (rc != SL_OK) return at_prefix(err, off);
    m_client_remember(m, ci, c->nonce);
    m->clients[ci].last_ms = m->now_ms;
    m->c.commits++;
    jb->batches++;
    jb->samples += c->num_samples;
    m_equal_commit(jb, c->split, c->epoch, c->rank_plus_one, c->num_samples);
    m_maybe_done(m, slot, c->split);
    return SL_OK;
}

static sl_err_t apply_split_read(sl_master_state_t *m, const Sluice__Master__SplitRead *sr,
                                 uint64_t off, sl_error_t *err)
{
    uint32_t slot;
    const char *what = "split read of job '%s' split %u";
    sl_err_t rc = find_lease(m, sr->job_id, sr->split, sr->generation, off, what, &slot, err);
    if (rc != SL_OK) return rc;
    job *jb = m->jobs[slot];
    if (sr->n_empty_from != sr->n_empty_to || sr->n_empty_from > m->opts.max_ranges)
        return bad(err, off, what, sr->job_id, sr->split, "bad empty range columns");
    for (size_t i = 0; i < sr->n_empty_from; i++)
        if (sr->empty_from[i] > sr->empty_to[i] || sr->empty_to[i] > jb->defs[sr->split].num_rows)
            return bad(err, off, what, sr->job_id, sr->split, "empty range outside the split");
    rc = m_apply_split_read(m, slot, sr->split, sr->empty_from, sr->empty_to,
                            (uint32_t)sr->n_empty_from, err);
    return rc == SL_OK ? SL_OK : at_prefix(err, off);
}

static sl_err_t apply_advance(sl_master_state_t *m, const Sluice__Master__EpochAdvanced *ea,
                              uint64_t off, sl_error_t *err)
{
    uint32_t slot;
    const char *what = "job '%s' advancing to epoch %u";
    job *jb = ea->job_id != NULL ? m_find_job(m, ea->job_id, &slot) : NULL;
    if (jb == NULL)
        return bad(err, off, what, ea->job_id ? ea->job_id : "", ea->epoch, "unknown job");
    if (ea->rank_plus_one != 0) {
        /* one rank of a static-sharding job (state_rank.c) */
        sl_err_t rc = m_rank_apply_advance(m, slot, ea->rank_plus_one - 1, ea->epoch, err);
        return rc == SL_OK ? SL_OK : at_prefix(err, off);
    }
    if (jb->epoch >= jb->epochs || ea->epoch != jb->epoch + 1 || !m_rank_level(jb) ||
        jb->count[SL_MASTER_SPLIT_DONE] != jb->n || (jb->chunk != 0 && !m_kafka_exhausted(jb)))
        return bad(err, off, what, ea->job_id, ea->epoch, "epoch not complete or not next");
    m_do_advance(m, jb);
    /* A resumed job's later ranges (and its static assignment over whole
     * splits) come with the epoch. They allocate after the record went
     * out: out of memory here fails the master (the control loop's answer
     * to SL_ERR_NOMEM), and replay, which applies this same record, makes
     * the state whole again. */
    sl_err_t rc = m_attr_epoch_began(m, slot, err);
    return rc == SL_OK ? SL_OK : at_prefix(err, off);
}

static sl_err_t apply_job_failed(sl_master_state_t *m, const Sluice__Master__JobFailed *jf,
                                 m_live *live, uint64_t off, sl_error_t *err)
{
    uint32_t slot;
    const char *what = "failure of job '%s' (split %u)";
    job *jb = jf->job_id != NULL ? m_find_job(m, jf->job_id, &slot) : NULL;
    uint32_t split = jf->failure != NULL ? jf->failure->split : 0;
    if (jb == NULL) return bad(err, off, what, jf->job_id ? jf->job_id : "", split, "unknown job");
    if (jf->failure == NULL || jb->failed || jb->epoch >= jb->epochs || split >= jb->n)
        return bad(err, off, what, jf->job_id, split, "no failure, or the job ended before");
    if (live != NULL && live->fail_file != NULL) { /* copied before the record went out */
        m_set_job_failed(m, slot, jf->failure, live->fail_file, live->fail_message);
        live->fail_file = live->fail_message = NULL;
        return SL_OK;
    }
    sl_err_t rc = m_apply_job_failed(m, slot, jf->failure, err);
    return rc == SL_OK ? SL_OK : at_prefix(err, off);
}

static sl_err_t apply_skip(sl_master_state_t *m, const Sluice__Master__SplitSkipped *sk,
                           uint64_t off, sl_error_t *err)
{
    uint32_t slot;
    const char *what = "skip of job '%s' split %u";
    job *jb = sk->job_id != NULL ? m_find_job(m, sk->job_id, &slot) : NULL;
    if (jb == NULL)
        return bad(err, off, what, sk->job_id ? sk->job_id : "", sk->split, "unknown job");
    if (sk->split >= jb->n || jb->failed || jb->epoch >= jb->epochs ||
        jb->st[sk->split].state != SL_MASTER_SPLIT_PENDING ||
        jb->defs[sk->split].num_rows - jb->st[sk->split].committed != sk->rows)
        return bad(err, off, what, sk->job_id, sk->split,
                   "split not pending or other rows left to skip");
    sl_err_t rc = m_apply_split_skipped(m, slot, sk->split, NULL, err);
    return rc == SL_OK ? SL_OK : at_prefix(err, off);
}

sl_err_t m_apply(sl_master_state_t *m, const Sluice__Master__Record *r, m_live *live, uint64_t off,
                 sl_error_t *err)
{
    uint32_t slot;
    sl_err_t rc;
    switch (r->kind_case) {
    case SLUICE__MASTER__RECORD__KIND_JOB_ADDED:
        return apply_job_added(m, r->job_added, live, off, err);
    case SLUICE__MASTER__RECORD__KIND_JOB_REMOVED: {
        const char *id = r->job_removed->job_id;
        if (id == NULL || m_find_job(m, id, &slot) == NULL) {
            char at[48];
            return sl_error_set(err, SL_ERR_CORRUPT, "%s: removal of unknown job '%s'",
                                where(at, sizeof at, off), id ? id : "");
        }
        m_job_remove(m, slot);
        return SL_OK;
    }
    case SLUICE__MASTER__RECORD__KIND_OPENED:
        if (r->opened->generation_base > m->next_generation)
            m->next_generation = r->opened->generation_base;
        return SL_OK;
    case SLUICE__MASTER__RECORD__KIND_LEASE_GRANTED:
        return apply_lease(m, r->lease_granted, live, off, err);
    case SLUICE__MASTER__RECORD__KIND_COMMITTED:
        return apply_commit(m, r->committed, off, err);
    case SLUICE__MASTER__RECORD__KIND_SPLIT_READ:
        return apply_split_read(m, r->split_read, off, err);
    case SLUICE__MASTER__RECORD__KIND_EXPIRED: {
        const Sluice__Master__Expired *e = r->expired;
        rc = find_lease(m, e->job_id, e->split, e->generation, off, "expiry of job '%s' split %u",
                        &slot, err);
        if (rc != SL_OK) return rc;
        m_do_release(m, slot, e->split, SL_MASTER_SPLIT_PENDING);
        return SL_OK;
    }
    case SLUICE__MASTER__RECORD__KIND_EPOCH_ADVANCED:
        return apply_advance(m, r->epoch_advanced, off, err);
    case SLUICE__MASTER__RECORD__KIND_SPLIT_FAILED: {
        const Sluice__Master__SplitFailed *sf = r->split_failed;
        const char *what = "failure of job '%s' split %u";
        rc = find_lease(m, sf->job_id, sf->split, sf->generation, off, what, &slot, err);
        if (rc != SL_OK) return rc;
        if (m->jobs[slot]->failed)
            return bad(err, off, what, sf->job_id, sf->split, "the job failed before");
        m_apply_split_failed(m, slot, sf->split);
        return SL_OK;
    }
    case SLUICE__MASTER__RECORD__KIND_JOB_FAILED:
        return apply_job_failed(m, r->job_failed, live, off, err);
    case SLUICE__MASTER__RECORD__KIND_SPLIT_SKIPPED:
        return apply_skip(m, r->split_skipped, off, err);
    case SLUICE__MASTER__RECORD__KIND_KAFKA_PARTITION_ADDED:
        return m_kafka_apply_partition(m, r->kafka_partition_added, live, off, err);
    case SLUICE__MASTER__RECORD__KIND_KAFKA_CHUNKS_ADDED:
        return m_kafka_apply_chunks(m, r->kafka_chunks_added, off, err);
    case SLUICE__MASTER__RECORD__KIND_BATCHES_COUNTED:
        return m_order_apply_counted(m, r->batches_counted, off, err);
    case SLUICE__MASTER__RECORD__KIND_CLIENT_EVICTED: {
        uint32_t ci;
        const char *id = r->client_evicted->client_id;
        /* A client this run did not journal (one whose only commit was
         * lost with a failed write) leaves nothing to forget. */
        if (id != NULL && m_client_find(m, id, &ci)) {
            m_client_remove(m, ci);
            m->c.clients_evicted++;
        }
        return SL_OK;
    }
    default: {
        char at[48];
        return sl_error_set(err, SL_ERR_CORRUPT, "%s: unknown record kind %d",
                            where(at, sizeof at, off), (int)r->kind_case);
    }
    }
}

/* The split a record is about, if one (for the checks after it). */
static bool record_split(const Sluice__Master__Record *r, const char **job_id, uint32_t *split)
{
    switch (r->kind_case) {
    case SLUICE__MASTER__RECORD__KIND_LEASE_GRANTED:
        *job_id = r->lease_granted->job_id, *split = r->lease_granted->split;
        return true;
    case SLUICE__MASTER__RECORD__KIND_COMMITTED:
        *job_id = r->committed->job_id, *split = r->committed->split;
        return true;
    case SLUICE__MASTER__RECORD__KIND_SPLIT_READ:
        *job_id = r->split_read->job_id, *split = r->split_read->split;
        return true;
    case SLUICE__MASTER__RECORD__KIND_EXPIRED:
        *job_id = r->expired->job_id, *split = r->expired->split;
        return true;
    case SLUICE__MASTER__RECORD__KIND_SPLIT_FAILED:
        *job_id = r->split_failed->job_id, *split = r->split_failed->split;
        return true;
    case SLUICE__MASTER__RECORD__KIND_SPLIT_SKIPPED:
        *job_id = r->split_skipped->job_id, *split = r->split_skipped->split;
        return true;
    case SLUICE__MASTER__RECORD__KIND_BATCHES_COUNTED:
        *job_id = r->batches_counted->job_id, *split = r->batches_counted->split;
        return true;
    default:
        return false;
    }
}

/* Builds with asserts: the split a record touched keeps its invariants
 * (O(its ranges)), and a record that changes a whole job leaves the whole
 * state consistent (O(the state), of the order of the record's own work;
 * Kafka chunks and client evictions, which are frequent or cheap, are not
 * followed by it). */
static void assert_invariants(const sl_master_state_t *m, const Sluice__Master__Record *r)
{
    sl_error_t e = {0};
    const char *id;
    uint32_t split;
    if (record_split(r, &id, &split)) {
        const job *jb = id != NULL ? m_find_job(m, id, NULL) : NULL;
        SL_ASSERT(jb == NULL || split >= jb->n || m_check_split(m, jb, split, &e) == SL_OK,
                  "after a record of kind %d: %s", (int)r->kind_case, e.msg);
    } else if (r->kind_case == SLUICE__MASTER__RECORD__KIND_JOB_ADDED ||
               r->kind_case == SLUICE__MASTER__RECORD__KIND_JOB_REMOVED ||
               r->kind_case == SLUICE__MASTER__RECORD__KIND_EPOCH_ADVANCED ||
               r->kind_case == SLUICE__MASTER__RECORD__KIND_JOB_FAILED) {
        SL_ASSERT(sl_master_state_check(m, &e) == SL_OK, "after a record of kind %d: %s",
                  (int)r->kind_case, e.msg);
    }
}

sl_err_t m_record(sl_master_state_t *m, const Sluice__Master__Record *rec, m_live *live,
                  sl_error_t *err)
{
    sl_err_t rc = m_journal(m, rec, err);
    if (rc != SL_OK) return rc;
    m_live none = {.now_ms = m->now_ms};
    rc = m_apply(m, rec, live != NULL ? live : &none, M_LIVE, err);
    /* The transition checked and reserved everything: only the later
     * ranges of an epoch that began may fail, for memory (m_apply). */
    SL_ASSERT(rc == SL_OK || (rc == SL_ERR_NOMEM &&
                              rec->kind_case == SLUICE__MASTER__RECORD__KIND_EPOCH_ADVANCED),
              "a live record of kind %d not applied: %s", (int)rec->kind_case,
              err != NULL ? err->msg : "");
    if (SL_ASSERTS_ON && rc == SL_OK) assert_invariants(m, rec);
    return rc;
}

sl_err_t m_apply_record(void *ctx, const uint8_t *payload, size_t len, uint64_t offset,
                        sl_error_t *err)
{
    sl_master_state_t *m = ctx;
    sl_unsized_t u = {.a = m->a};
    ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
    Sluice__Master__Record *r = sluice__master__record__unpack(&pa, len, payload);
    if (r == NULL)
        return sl_error_set(err, u.failed ? SL_ERR_NOMEM : SL_ERR_CORRUPT,
                            "record at offset %llu: %s", (unsigned long long)offset,
                            u.failed ? "out of memory" : "malformed protobuf");
    sl_err_t rc = m_apply(m, r, NULL, offset, err);
    if (SL_ASSERTS_ON && rc == SL_OK) assert_invariants(m, r);
    sluice__master__record__free_unpacked(r, &pa);
    return rc;
}

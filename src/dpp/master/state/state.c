/* The DPP master's state: jobs and their per-epoch split order, epoch
 * advance, the job views, static sharding, counters. Leases (the worker
 * table, the pending queue, grants, renewals, registration, expiry) are in
 * state_leases.c; commits, split reads and client records in
 * state_commit.c and state_clients.c, split failures in state_failure.c;
 * journal records and tokens in state_persist.c, replay, snapshots and the
 * dump in state_replay.c. Callers hold the master's lock (state.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "dpp/master/state/state_internal.h"

/* ---- small helpers -------------------------------------------------------------- */

static uint64_t mix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* order[0..n) = the split order of epoch: identity, or a Fisher-Yates
 * permutation driven by splitmix64 from (seed, epoch). */
static void make_order(uint32_t *order, uint32_t n, bool shuffle, uint64_t seed, uint32_t epoch)
{
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle) return;
    uint64_t s = seed ^ (0xd1b54a32d192ed03ull * ((uint64_t)epoch + 1));
    for (uint32_t i = n; i > 1; i--) {
        uint32_t k = (uint32_t)(((unsigned __int128)mix64(&s) * i) >> 64);
        uint32_t t = order[i - 1];
        order[i - 1] = order[k];
        order[k] = t;
    }
}

/* ---- jobs ------------------------------------------------------------------------ */

job *m_find_job(const sl_master_state_t *m, const char *id, uint32_t *slot)
{
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        if (m->jobs[i] != NULL && strcmp(m->jobs[i]->id, id) == 0) {
            if (slot != NULL) *slot = i;
            return m->jobs[i];
        }
    return NULL;
}

static void job_free(const sl_allocator_t *a, job *jb)
{
    if (jb == NULL) return;
    sl_strfree(a, jb->id);
    sl_strfree(a, jb->spec_json);
    m_free_failure(a, jb);
    m_kafka_free(a, jb);
    m_attr_free(a, jb);
    m_rank_free(a, jb);
    m_order_free(jb);
    m_equal_free(a, jb);
    if (jb->rank_of_split != NULL) sl_free(a, jb->rank_of_split, (size_t)jb->n * sizeof(uint32_t));
    for (uint32_t i = 0; jb->st != NULL && i < jb->n; i++)
        m_free_ranges(a, &jb->st[i]);
    for (uint32_t i = 0; jb->paths != NULL && i < jb->num_paths; i++)
        sl_strfree(a, jb->paths[i]);
    if (jb->path_footer != NULL)
        sl_free(a, jb->path_footer, (size_t)jb->num_paths * sizeof *jb->path_footer);
    /* A Kafka job's paths have room for its partitions (kp_cap). */
    sl_free(a, jb->paths, (size_t)(jb->chunk ? jb->kp_cap : jb->num_paths) * sizeof *jb->paths);
    sl_free(a, jb->defs, (size_t)jb->cap * sizeof *jb->defs);
    sl_free(a, jb->st, (size_t)jb->cap * sizeof *jb->st);
    sl_free(a, jb->order, (size_t)jb->cap * sizeof *jb->order);
    sl_free(a, jb->pos, (size_t)jb->cap * sizeof *jb->pos);
    sl_free(a, jb->heap, (size_t)jb->cap * sizeof *jb->heap);
    sl_free(a, jb, sizeof *jb);
}

void m_split_state(job *jb, uint32_t split, uint8_t state)
{
    split_st *s = &jb->st[split];
    if (jb->chunk != 0) {
        kpart *p = &jb->kp[jb->defs[split].path];
        p->pending += (state == SL_MASTER_SPLIT_PENDING) - (s->state == SL_MASTER_SPLIT_PENDING);
        p->open += (s->state == SL_MASTER_SPLIT_DONE) - (state == SL_MASTER_SPLIT_DONE);
    }
    jb->count[s->state]--;
    if (jb->rank_left != NULL)
        jb->rank_left[jb->rank_of_split[split]] +=
            (s->state == SL_MASTER_SPLIT_DONE) - (state == SL_MASTER_SPLIT_DONE);
    s->state = state;
    jb->count[state]++;
    if (jb->chunk != 0 && state == SL_MASTER_SPLIT_DONE) {
        kpart *p = &jb->kp[jb->defs[split].path];
        while (p->low < p->nchunks &&
               jb->st[p->chunks[p->low - p->folded]].state == SL_MASTER_SPLIT_DONE)
            p->low++;
        m_kafka_fold(jb, jb->defs[split].path);
    }
}

void m_set_order(job *jb)
{
    make_order(jb->order, jb->n, jb->shuffle, jb->seed, jb->epoch);
    for (uint32_t i = 0; i < jb->n; i++)
        jb->pos[jb->order[i]] = i;
}

void m_reset_queue(job *jb)
{
    jb->cursor = 0;
    jb->heap_len = 0;
    for (uint32_t i = 0; i < jb->n; i++)
        jb->st[i].in_heap = 0;
}

uint64_t m_fingerprint(const Sluice__Master__SplitList *l)
{
    XXH3_state_t s;
    XXH3_64bits_reset(&s);
    uint64_t n = l->n_path_index;
    XXH3_64bits_update(&s, &n, sizeof n);
    for (size_t i = 0; i < l->n_path_index; i++) {
        const char *p = l->paths[l->path_index[i]];
        XXH3_64bits_update(&s, p, strlen(p) + 1);
        uint64_t v[4] = {l->stripe_begin[i], l->stripe_end[i], l->first_row[i], l->num_rows[i]};
        XXH3_64bits_update(&s, v, sizeof v);
    }
    return XXH3_64bits_digest(&s);
}

void m_job_free(sl_master_state_t *m, job *jb)
{
    job_free(m->a, jb);
}

sl_err_t m_job_build(sl_master_state_t *m, const Sluice__Master__JobAdded *rec, job **out,
                     sl_error_t *err)
{
    const Sluice__Master__JobSpec *spec = rec->spec;
    const Sluice__Master__SplitList *l = spec->splits;
    *out = NULL;
    const sl_allocator_t *a = m->a;
    job *jb = sl_calloc(a, 1, sizeof *jb);
    if (jb == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s'", spec->job_id);
    uint32_t n = (uint32_t)l->n_path_index;
    uint32_t cap = n;
    if (spec->kafka_chunk > 0 && cap < 8) cap = 8; /* grows as chunks are made */
    jb->n = n;
    jb->cap = cap;
    jb->num_paths = (uint32_t)l->n_paths;
    jb->id = sl_strdup(a, spec->job_id);
    jb->spec_json = sl_strdup(a, spec->spec_json != NULL ? spec->spec_json : "");
    /* A Kafka job's paths are its partitions' (m_kafka_build). */
    jb->paths = spec->kafka_chunk > 0 ? NULL : sl_calloc(a, jb->num_paths, sizeof *jb->paths);
    jb->defs = sl_alloc(a, sl_mul_size(cap, sizeof *jb->defs));
    jb->st = sl_calloc(a, cap, sizeof *jb->st);
    jb->order = sl_alloc(a, sl_mul_size(cap, sizeof *jb->order));
    jb->pos = sl_alloc(a, sl_mul_size(cap, sizeof *jb->pos));
    jb->heap = sl_alloc(a, sl_mul_size(cap, sizeof *jb->heap));
    bool ok = jb->id && jb->spec_json && (jb->paths || spec->kafka_chunk > 0) && jb->defs &&
              jb->st && jb->order && jb->pos && jb->heap;
    for (uint32_t i = 0; ok && i < jb->num_paths; i++)
        ok = (jb->paths[i] = sl_strdup(a, l->paths[i])) != NULL;
    if (ok && spec->kafka_chunk == 0 && jb->num_paths > 0 && l->n_path_footer == jb->num_paths) {
        jb->path_footer = sl_alloc(a, (size_t)jb->num_paths * sizeof *jb->path_footer);
        if ((ok = jb->path_footer != NULL))
            memcpy(jb->path_footer, l->path_footer,
                   (size_t)jb->num_paths * sizeof *jb->path_footer);
    }
    if (!ok) {
        job_free(a, jb);
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s' of %u splits", spec->job_id, n);
    }
    jb->epochs = spec->epochs;
    jb->seed = spec->seed;
    jb->shuffle = spec->shuffle;
    jb->ranks = spec->ranks > 0 ? spec->ranks : 1;
    jb->static_sharding = spec->static_sharding && jb->ranks > 1;
    jb->min_workers = spec->min_workers;
    jb->max_workers = spec->max_workers;
    jb->skip_bad = spec->skip_bad_splits;
    jb->plan_fp = spec->plan_fingerprint;
    jb->share = spec->share;
    jb->prefix_fp = spec->prefix_fingerprint;
    jb->pq_row_groups = spec->parquet_row_groups;
    jb->pq_groups_skipped = spec->parquet_row_groups_skipped;
    jb->pq_rows_skipped = spec->parquet_rows_skipped;
    jb->fingerprint = spec->kafka_chunk > 0 ? 0 : m_fingerprint(l);
    jb->epoch = rec->start_epoch;
    bool finished = jb->epoch >= jb->epochs;
    for (uint32_t i = 0; i < n; i++) {
        jb->defs[i] = (split_def){l->path_index[i], l->stripe_begin[i], l->stripe_end[i],
                                  l->first_row[i],  l->num_rows[i],     0};
        jb->total_rows += l->num_rows[i];
        jb->st[i].worker = NO_WORKER;
        jb->st[i].state = SL_MASTER_SPLIT_PENDING;
    }
    jb->count[SL_MASTER_SPLIT_PENDING] = n;
    sl_err_t rc = SL_OK;
    if (spec->kafka_chunk > 0) rc = m_kafka_build(m, jb, rec, err); /* may add chunks: jb->n */
    jb->run_id = rec->run_id;
    /* A finished job keeps nothing per split; a resumed one starts with the
     * token's ranges (the caller checked them against the splits), which
     * the master itself committed (state_attr.c). */
    for (size_t k = 0; rc == SL_OK && !finished && k < rec->n_start_split; k++)
        rc = m_add_range(m, jb, rec->start_split[k], rec->start_from[k], rec->start_to[k],
                         M_OWNER_MASTER, err);
    if (rc == SL_OK && !finished && spec->kafka_chunk == 0)
        rc = m_cols_from_pb(m, jb, rec->later, &jb->later, err);
    /* Static sharding balances the rows left to read: a resumed job's
     * ranks share what remains of its first epoch equally, and the
     * assignment is redone over whole splits when the next one begins. */
    if (rc == SL_OK && jb->static_sharding) {
        jb->rank_of_split = sl_alloc(a, sl_mul_size(n, sizeof(uint32_t)));
        rc = jb->rank_of_split == NULL
                 ? sl_error_set(err, SL_ERR_NOMEM, "job '%s' of %u splits", spec->job_id, n)
                 : m_static_assign(m, jb, jb->ranks, jb->rank_of_split, NULL, true, err);
        jb->restatic = jb->committed_rows > 0 && !finished;
    }
    if (rc == SL_OK) rc = m_rank_init(m, jb, err);
    if (rc == SL_OK) rc = m_equal_init(m, jb, spec->equal_batches_per_rank, err);
    if (rc != SL_OK) {
        job_free(a, jb);
        return rc;
    }
    n = jb->n;
    for (uint32_t i = 0; i < n; i++) {
        split_st *s = &jb->st[i];
        if (finished || s->committed == jb->defs[i].num_rows) {
            jb->count[SL_MASTER_SPLIT_PENDING]--;
            s->state = SL_MASTER_SPLIT_DONE;
            jb->count[SL_MASTER_SPLIT_DONE]++;
        }
    }
    if (jb->chunk != 0) m_kafka_recount(jb);
    m_rank_recount(jb);
    m_set_order(jb);
    m_reset_queue(jb);
    /* a resumed deterministic job: its start ranges are the epoch's skip
     * rows (a snapshot's loader puts its own in their place) */
    if ((rc = m_order_build(m, jb, spec, err)) != SL_OK ||
        (!finished &&
         (rc = m_order_skip_set(m, jb, rec->start_split, rec->start_from, rec->start_to,
                                rec->n_start_split, true, err)) != SL_OK)) {
        job_free(a, jb);
        return rc;
    }
    *out = jb;
    return SL_OK;
}

void m_job_link(sl_master_state_t *m, job *jb)
{
    uint32_t slot = 0;
    while (m->jobs[slot] != NULL) /* a free slot: m_check_job */
        slot++;
    m->jobs[slot] = jb;
    m->c.jobs++;
    m->runs++;
}

void m_job_remove(sl_master_state_t *m, uint32_t slot)
{
    job *jb = m->jobs[slot];
    for (uint32_t s = 0; s < jb->n; s++)
        if (jb->st[s].state == SL_MASTER_SPLIT_LEASED)
            m_worker_drop_lease(&m->workers[jb->st[s].worker], slot, s);
    job_free(m->a, jb);
    m->jobs[slot] = NULL;
    m->c.jobs--;
}

/* ---- transitions (shared by the live calls and replay) ------------------------------ */

void m_do_advance(sl_master_state_t *m, job *jb)
{
    m_equal_epoch_done(jb, jb->epoch);
    jb->epoch++;
    m->c.epochs_advanced++;
    /* the whole job: every rank with it (state_rank.c) */
    for (uint32_t r = 0; jb->rank_epoch != NULL && r < jb->ranks; r++)
        jb->rank_epoch[r] = jb->epoch;
    m_equal_job_began(jb, jb->epoch);
    if (jb->chunk == 0) m_attr_rotate(m, jb);
    if (jb->epoch >= jb->epochs) {
        /* finished: every split stays DONE, no ranges kept (as a finished
         * job restored from a snapshot) */
        for (uint32_t i = 0; i < jb->n; i++) {
            m_free_ranges(m->a, &jb->st[i]);
            jb->st[i].failures = 0;
        }
        jb->split_failures = 0;
        jb->committed_rows = 0;
        if (jb->chunk != 0) m_kafka_recount(jb);
        m_rank_recount(jb);
        return;
    }
    for (uint32_t i = 0; i < jb->n; i++) {
        m_free_ranges(m->a, &jb->st[i]);
        jb->st[i] = (split_st){.generation = jb->st[i].generation, .worker = NO_WORKER};
    }
    jb->split_failures = 0;
    jb->count[SL_MASTER_SPLIT_PENDING] = jb->n;
    jb->count[SL_MASTER_SPLIT_DONE] = 0;
    jb->count[SL_MASTER_SPLIT_LEASED] = 0;
    jb->committed_rows = 0;
    /* Splits of no rows are done at once. */
    for (uint32_t i = 0; i < jb->n; i++)
        if (jb->defs[i].num_rows == 0) {
            jb->st[i].state = SL_MASTER_SPLIT_DONE;
            jb->count[SL_MASTER_SPLIT_PENDING]--;
            jb->count[SL_MASTER_SPLIT_DONE]++;
        }
    m_rank_recount(jb);
    m_set_order(jb);
    m_reset_queue(jb);
    m_order_advance(jb);
}

/* Journal and apply an epoch advance when every split is DONE. */
sl_err_t m_maybe_advance(sl_master_state_t *m, job *jb, sl_error_t *err)
{
    if (m_rank_mode(jb)) return m_rank_maybe_advance(m, jb, err);
    if (jb->epoch >= jb->epochs || jb->count[SL_MASTER_SPLIT_DONE] != jb->n) return SL_OK;
    if (jb->chunk != 0 && !m_kafka_exhausted(jb)) return SL_OK; /* more chunks to come */
    Sluice__Master__EpochAdvanced ea = SLUICE__MASTER__EPOCH_ADVANCED__INIT;
    ea.job_id = jb->id;
    ea.epoch = jb->epoch + 1;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_EPOCH_ADVANCED;
    rec.epoch_advanced = &ea;
    /* A resumed job's later ranges come with the epoch (m_apply) and may
     * complete it at once. */
    bool later = jb->later != NULL || jb->restatic;
    sl_err_t rc = m_record(m, &rec, NULL, err);
    return rc == SL_OK && later ? m_maybe_advance(m, jb, err) : rc;
}

/* Every job whose epoch is complete moves on (after replay: a crash may
 * fall between a split's Completed record and the EpochAdvanced one). */
sl_err_t m_advance_all(sl_master_state_t *m, sl_error_t *err)
{
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        if (m->jobs[i] == NULL) continue;
        sl_err_t rc = m_maybe_advance(m, m->jobs[i], err);
        if (rc != SL_OK) return rc;
    }
    return SL_OK;
}

/* ---- the live API --------------------------------------------------------------- */

sl_err_t m_no_job(const char *id, sl_error_t *err)
{
    return sl_error_set(err, SL_ERR_NOT_FOUND, "no job '%s'", id);
}

sl_err_t sl_master_state_job_remove(sl_master_state_t *m, const char *job_id, sl_error_t *err)
{
    uint32_t slot;
    if (m_find_job(m, job_id, &slot) == NULL) return m_no_job(job_id, err);
    Sluice__Master__JobRemoved jr = SLUICE__MASTER__JOB_REMOVED__INIT;
    jr.job_id = (char *)job_id;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_JOB_REMOVED;
    rec.job_removed = &jr;
    return m_record(m, &rec, NULL, err);
}

bool sl_master_state_job_phase(const sl_master_state_t *m, const char *job_id,
                               sl_master_state_job_phase_t *out)
{
    const job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return false;
    *out = (sl_master_state_job_phase_t){.epoch = jb->epoch < jb->epochs ? jb->epoch : jb->epochs,
                                         .finished = jb->epoch >= jb->epochs,
                                         .failed = jb->failed};
    return true;
}

sl_err_t sl_master_state_job_status(const sl_master_state_t *m, const char *job_id,
                                    sl_master_state_job_status_t *out, sl_error_t *err)
{
    const job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return m_no_job(job_id, err);
    *out = (sl_master_state_job_status_t){
        .epoch = jb->epoch < jb->epochs ? jb->epoch : jb->epochs,
        .epochs = jb->epochs,
        .finished = jb->epoch >= jb->epochs,
        .num_splits = jb->n,
        .pending = jb->count[SL_MASTER_SPLIT_PENDING],
        .leased = jb->count[SL_MASTER_SPLIT_LEASED],
        .done = jb->count[SL_MASTER_SPLIT_DONE],
        /* a finished job has committed every row of its last epoch */
        .committed_rows = jb->epoch >= jb->epochs ? jb->total_rows : jb->committed_rows,
        .total_rows = jb->total_rows,
        .spec_json = jb->spec_json,
        .ranks = jb->ranks,
        .static_sharding = jb->static_sharding,
        .min_workers = jb->min_workers,
        .max_workers = jb->max_workers,
        .batches = jb->batches,
        .samples = jb->samples,
        .skip_bad_splits = jb->skip_bad,
        .plan_fingerprint = jb->plan_fp,
        .share = jb->share,
        .prefix_fingerprint = jb->prefix_fp,
        .parquet_row_groups = jb->pq_row_groups,
        .parquet_row_groups_skipped = jb->pq_groups_skipped,
        .parquet_rows_skipped = jb->pq_rows_skipped,
        .deterministic = jb->ord != NULL,
        .order_window = jb->ord != NULL ? jb->order_window : 0,
        .order_prefix = jb->ord != NULL ? sl_master_order_prefix(jb->ord) : 0,
        .failed = jb->failed,
        .failure_split = jb->fail_split,
        .failure_epoch = jb->fail_epoch,
        .failure_stripe = jb->fail_stripe,
        .failure_code = (sl_err_t)jb->fail_code,
        .failure_file = jb->fail_file != NULL ? jb->fail_file : "",
        .failure_message = jb->fail_message != NULL ? jb->fail_message : "",
        .skipped_splits = jb->skipped_splits,
        .skipped_rows = jb->skipped_rows,
        .split_failures = (uint32_t)jb->split_failures,
        .equal_batches_per_rank = jb->eq_count != NULL,
        .equal_dropped_batches = jb->eq_dropped,
        .equal_dropped_samples = jb->eq_dropped_samples,
    };
    return SL_OK;
}

uint32_t sl_master_state_job_ids(const sl_master_state_t *m, const char **ids, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        if (m->jobs[i] != NULL) {
            if (n < cap) ids[n] = m->jobs[i]->id;
            n++;
        }
    return n;
}

/* ---- sharding and order ------------------------------------------------------------ */

typedef struct by_rows {
    uint64_t rows;
    uint32_t split;
} by_rows;

/* Rows descending, then split id ascending: a total order, so the result
 * does not depend on the sort algorithm. */
static int by_rows_desc(const void *x, const void *y)
{
    const by_rows *a = x, *b = y;
    if (a->rows != b->rows) return a->rows > b->rows ? -1 : 1;
    return a->split < b->split ? -1 : a->split > b->split;
}

sl_err_t sl_master_state_assign_static(const sl_master_state_t *m, const char *job_id,
                                       uint32_t ranks, uint32_t *rank_of_split,
                                       uint64_t *rows_per_rank, sl_error_t *err)
{
    const job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return m_no_job(job_id, err);
    return m_static_assign(m, jb, ranks, rank_of_split, rows_per_rank, false, err);
}

sl_err_t m_static_assign(const sl_master_state_t *m, const job *jb, uint32_t ranks,
                         uint32_t *rank_of_split, uint64_t *rows_per_rank, bool remaining,
                         sl_error_t *err)
{
    const char *job_id = jb->id;
    if (ranks == 0 || ranks > 65536)
        return sl_error_set(err, SL_ERR_INVALID, "static sharding over %u ranks (1..65536)", ranks);
    by_rows *idx = sl_alloc(m->a, sl_mul_size(jb->n, sizeof *idx));
    uint32_t *rank_order = sl_alloc(m->a, sl_mul_size(ranks, sizeof *rank_order));
    uint64_t *load = sl_calloc(m->a, ranks, sizeof *load);
    sl_err_t rc = SL_OK;
    if ((idx == NULL && jb->n > 0) || rank_order == NULL || load == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "static sharding of job '%s'", job_id);
        goto out;
    }
    for (uint32_t i = 0; i < jb->n; i++)
        idx[i] = (by_rows){jb->defs[i].num_rows - (remaining ? jb->st[i].committed : 0), i};
    if (jb->n > 1) qsort(idx, jb->n, sizeof *idx, by_rows_desc);
    make_order(rank_order, ranks, true, jb->seed ^ 0x5a4d0u, 0);
    for (uint32_t i = 0; i < jb->n; i++) {
        /* Least-loaded rank; ties go to the earlier rank in the seeded order.
         * O(ranks) per split: ranks are trainer ranks, hundreds at most. */
        uint32_t best = rank_order[0];
        for (uint32_t k = 1; k < ranks; k++)
            if (load[rank_order[k]] < load[best]) best = rank_order[k];
        rank_of_split[idx[i].split] = best;
        load[best] += idx[i].rows;
    }
    if (rows_per_rank != NULL) memcpy(rows_per_rank, load, ranks * sizeof *load);
out:
    sl_free(m->a, idx, (size_t)jb->n * sizeof *idx);
    sl_free(m->a, rank_order, (size_t)ranks * sizeof *rank_order);
    sl_free(m->a, load, (size_t)ranks * sizeof *load);
    return rc;
}

sl_err_t sl_master_state_epoch_order(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                     uint32_t *order, sl_error_t *err)
{
    const job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return m_no_job(job_id, err);
    make_order(order, jb->n, jb->shuffle, jb->seed, epoch);
    return SL_OK;
}

void sl_master_state_counters(const sl_master_state_t *m, sl_master_state_counters_t *out)
{
    *out = m->c;
    out->pending = out->leased = out->done = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        const job *jb = m->jobs[i];
        if (jb == NULL) continue;
        out->pending += jb->count[SL_MASTER_SPLIT_PENDING];
        out->leased += jb->count[SL_MASTER_SPLIT_LEASED];
        out->done += jb->count[SL_MASTER_SPLIT_DONE];
    }
}

void sl_master_state_destroy(sl_master_state_t *m)
{
    if (m == NULL) return;
    for (uint32_t i = 0; m->jobs != NULL && i < m->opts.max_jobs; i++)
        job_free(m->a, m->jobs[i]);
    sl_free(m->a, m->jobs, (size_t)m->opts.max_jobs * sizeof *m->jobs);
    for (uint32_t w = 0; w < m->num_workers; w++) {
        sl_strfree(m->a, m->workers[w].name);
        sl_free(m->a, m->workers[w].leases, (size_t)m->workers[w].cap * sizeof(lease_ref));
    }
    sl_free(m->a, m->workers, (size_t)m->cap_workers * sizeof *m->workers);
    sl_free(m->a, m->whash, (size_t)m->whash_cap * sizeof *m->whash);
    sl_free(m->a, m->scratch, m->scratch_cap);
    for (uint32_t c = 0; c < m->num_clients; c++) {
        client *cl = &m->clients[c];
        sl_strfree(m->a, cl->name);
        sl_free(m->a, cl->ring, (size_t)m->opts.max_answers * sizeof *cl->ring);
        sl_free(m->a, cl->index, (size_t)cl->index_cap * sizeof *cl->index);
    }
    sl_free(m->a, m->clients, (size_t)m->cap_clients * sizeof *m->clients);
    sl_free(m->a, m->chash, (size_t)m->chash_cap * sizeof *m->chash);
    sl_free(m->a, m->todo, (size_t)m->todo_cap * sizeof *m->todo);
    sl_free(m->a, m, sizeof *m);
}

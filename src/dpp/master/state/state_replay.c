/* The DPP master's recovery side: snapshots (restored, encoded), the
 * canonical dump, a new state and the entry points the store (state_store.c)
 * replays a journal through; the state itself opens, syncs and compacts
 * no file. Journal records are applied by m_apply (state_apply.c), live
 * and in replay alike. Callers hold the master's lock. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "dpp/master/state/state_internal.h"

/* Generations an earlier run may have handed out without a durable record
 * lie below the last journaled one + this gap (no run grants 2^32 leases
 * between two syncs). */
#define GENERATION_GAP (1ull << 32)

/* ---- snapshots ---------------------------------------------------------------------- */

static void set_state(job *jb, uint32_t i, uint8_t state)
{
    m_split_state(jb, i, state);
}

static sl_err_t restore_job(sl_master_state_t *m, const Sluice__Master__SnapshotJob *sj,
                            sl_error_t *err)
{
    if (sj->spec == NULL || sj->spec->splits == NULL)
        return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job without spec");
    size_t n = sj->spec->splits->n_path_index;
    if (sj->n_state != n || sj->n_worker != n || sj->n_generation != n ||
        sj->n_range_from != sj->n_range_split || sj->n_range_to != sj->n_range_split)
        return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': columns of unequal length",
                            sj->spec->job_id ? sj->spec->job_id : "");
    Sluice__Master__JobAdded ja = SLUICE__MASTER__JOB_ADDED__INIT;
    ja.spec = sj->spec;
    ja.start_epoch = sj->epoch;
    ja.n_start_split = ja.n_start_from = ja.n_start_to = sj->n_range_split;
    ja.start_split = sj->range_split;
    ja.start_from = sj->range_from;
    ja.start_to = sj->range_to;
    ja.run_id = sj->run_id;
    SL_FORWARD_IF_ERROR(m_add_job(m, &ja, err));
    uint32_t slot;
    job *jb = m_find_job(m, sj->spec->job_id, &slot);
    /* the committed ranges came in as start ranges: their owners and the
     * rest of the attribution are the snapshot's */
    SL_FORWARD_IF_ERROR(m_attr_restore(m, jb, sj, err));
    SL_FORWARD_IF_ERROR(m_order_restore(m, jb, sj, err));
    SL_FORWARD_IF_ERROR(m_equal_restore(m, jb, sj, err));
    jb->batches = sj->batches;
    jb->samples = sj->samples;
    jb->skipped_splits = sj->skipped_splits;
    jb->skipped_rows = sj->skipped_rows;
    if (sj->n_failures != 0 && sj->n_failures != n)
        return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': failures of %zu splits",
                            jb->id, sj->n_failures);
    if (sj->n_kafka_made_generation != 0 && (sj->n_kafka_made_generation != n || jb->chunk == 0))
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "snapshot job '%s': chunk generations of %zu splits", jb->id,
                            sj->n_kafka_made_generation);
    for (size_t i = 0; i < sj->n_kafka_made_generation; i++)
        jb->defs[i].made_gen = sj->kafka_made_generation[i];
    size_t nf = sj->n_kafka_folded_split;
    if (nf > 0 &&
        (jb->ring == NULL || nf > M_KAFKA_FOLDED_RING || sj->n_kafka_folded_partition != nf ||
         sj->n_kafka_folded_made_generation != nf || sj->n_kafka_folded_first != nf))
        return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': folded chunks", jb->id);
    for (size_t q = 0; q < nf; q++) {
        if (sj->kafka_folded_split[q] >= jb->n || sj->kafka_folded_partition[q] >= jb->nkp)
            return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': folded chunk %zu", jb->id,
                                q);
        jb->ring[q] = (kfolded){sj->kafka_folded_split[q], sj->kafka_folded_partition[q],
                                sj->kafka_folded_made_generation[q], sj->kafka_folded_first[q]};
    }
    jb->ring_len = (uint32_t)nf;
    jb->ring_next = (uint32_t)(nf % M_KAFKA_FOLDED_RING);
    /* a free split (of a folded chunk) is DONE */
    for (uint32_t i = 0; i < jb->nfree; i++)
        if (sj->state[jb->free[i]] != SL_MASTER_SPLIT_DONE)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "snapshot job '%s' split %u: a folded chunk's, not done", jb->id,
                                jb->free[i]);
    bool finished = jb->epoch >= jb->epochs;
    if (sj->failure != NULL) {
        if (finished || sj->failure->split >= jb->n)
            return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': bad failure", jb->id);
        sl_err_t frc = m_apply_job_failed(m, slot, sj->failure, err);
        if (frc != SL_OK) return frc;
    }
    for (uint32_t i = 0; i < jb->n; i++) {
        uint32_t st = sj->state[i];
        /* a finished rank's splits (state_rank.c) hold nothing, DONE */
        bool sfin = finished || m_split_epoch(jb, i) >= jb->epochs;
        bool full =
            (jb->st[i].committed == jb->defs[i].num_rows && m_order_split_counted(jb, i)) || sfin;
        if (st > SL_MASTER_SPLIT_DONE || (st == SL_MASTER_SPLIT_DONE && !full) ||
            (sfin && st != SL_MASTER_SPLIT_DONE) ||
            (st == SL_MASTER_SPLIT_LEASED && sj->worker[i] >= m->num_workers))
            return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s' split %u: bad state",
                                jb->id, i);
        jb->st[i].generation = sj->generation[i];
        if (sj->n_failures == n) {
            jb->split_failures -= jb->st[i].failures;
            jb->st[i].failures =
                sj->failures[i] > UINT16_MAX ? UINT16_MAX : (uint16_t)sj->failures[i];
            jb->split_failures += jb->st[i].failures;
        }
        if (st == SL_MASTER_SPLIT_LEASED && jb->failed)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "snapshot job '%s' split %u: leased, job failed", jb->id, i);
        if (st == SL_MASTER_SPLIT_DONE || (full && st != SL_MASTER_SPLIT_DONE)) {
            if (st != SL_MASTER_SPLIT_DONE)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "snapshot job '%s' split %u: all rows committed, not done",
                                    jb->id, i);
            if (jb->st[i].state != SL_MASTER_SPLIT_DONE) set_state(jb, i, SL_MASTER_SPLIT_DONE);
            continue;
        }
        set_state(jb, i, SL_MASTER_SPLIT_PENDING);
        if (st == SL_MASTER_SPLIT_LEASED) {
            if (!m_worker_reserve(m, sj->worker[i]))
                return sl_error_set(err, SL_ERR_NOMEM, "snapshot lease");
            m_do_lease(m, slot, i, sj->worker[i], sj->generation[i], 0);
        }
    }
    return SL_OK;
}

sl_err_t m_apply_snapshot(void *ctx, const uint8_t *payload, size_t len, sl_error_t *err)
{
    sl_master_state_t *m = ctx;
    sl_unsized_t u = {.a = m->a};
    ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
    Sluice__Master__Snapshot *s = sluice__master__snapshot__unpack(&pa, len, payload);
    if (s == NULL)
        return u.failed ? sl_error_set(err, SL_ERR_NOMEM, "out of memory")
                        : sl_error_set(err, SL_ERR_CORRUPT, "malformed protobuf");
    sl_err_t rc = SL_OK;
    for (size_t i = 0; rc == SL_OK && i < s->n_workers; i++) {
        uint32_t w;
        rc = m_worker_get(m, s->workers[i] ? s->workers[i] : "", &w, err);
        if (rc == SL_OK && w != i)
            rc = sl_error_set(err, SL_ERR_CORRUPT, "worker '%s' listed twice", s->workers[i]);
    }
    for (size_t i = 0; rc == SL_OK && i < s->n_jobs; i++)
        rc = restore_job(m, s->jobs[i], err);
    for (size_t i = 0; rc == SL_OK && i < s->n_clients; i++) {
        const Sluice__Master__SnapshotClient *sc = s->clients[i];
        uint32_t c;
        rc = m_client_get(m, sc->client_id ? sc->client_id : "", &c, err);
        if (rc == SL_OK && (c != i || sc->n_nonces > m->opts.max_answers))
            rc = sl_error_set(err, SL_ERR_CORRUPT, "client '%s' listed twice or too many nonces",
                              sc->client_id);
        for (size_t k = 0; rc == SL_OK && k < sc->n_nonces; k++) {
            if (m_client_has(m, c, sc->nonces[k]))
                rc = sl_error_set(err, SL_ERR_CORRUPT, "client '%s': nonce listed twice",
                                  sc->client_id);
            else
                m_client_remember(m, c, sc->nonces[k]);
        }
    }
    if (rc == SL_OK && s->next_generation > m->next_generation)
        m->next_generation = s->next_generation;
    sluice__master__snapshot__free_unpacked(s, &pa);
    if (rc != SL_OK && rc != SL_ERR_NOMEM) {
        if (err != NULL) err->code = SL_ERR_CORRUPT;
        rc = SL_ERR_CORRUPT;
    }
    return rc;
}

/* The whole state as a packed Snapshot. Caller frees *buf (*len bytes). */
sl_err_t m_snapshot_encode(const sl_master_state_t *m, uint8_t **buf, size_t *len, sl_error_t *err)
{
    const sl_allocator_t *a = m->a;
    uint32_t nj = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        nj += m->jobs[i] != NULL;
    Sluice__Master__Snapshot s = SLUICE__MASTER__SNAPSHOT__INIT;
    s.next_generation = m->next_generation;
    s.n_workers = m->num_workers;
    s.workers = sl_alloc(a, (size_t)m->num_workers * sizeof(char *) + 1);
    Sluice__Master__SnapshotJob *sj = sl_calloc(a, nj + 1, sizeof *sj);
    Sluice__Master__SnapshotClient *sc = NULL;
    uint64_t *nonces = NULL;
    Sluice__Master__JobSpec *spec = sl_calloc(a, nj + 1, sizeof *spec);
    Sluice__Master__SplitList *sl = sl_calloc(a, nj + 1, sizeof *sl);
    Sluice__Master__JobFailure *jf = sl_calloc(a, nj + 1, sizeof *jf);
    Sluice__Master__KafkaPartition **kpp = sl_calloc(a, nj + 1, sizeof *kpp);
    Sluice__Master__KafkaPartition ***kptr = sl_calloc(a, nj + 1, sizeof *kptr);
    uint32_t *nkp = sl_calloc(a, nj + 1, sizeof *nkp);
    m_attr_pb *ap = sl_calloc(a, nj + 1, sizeof *ap);
    s.jobs = sl_calloc(a, nj + 1, sizeof *s.jobs);
    sl_err_t rc = SL_OK;
    if (s.workers == NULL || sj == NULL || spec == NULL || sl == NULL || jf == NULL ||
        kpp == NULL || kptr == NULL || nkp == NULL || ap == NULL || s.jobs == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "snapshot");
        goto out;
    }
    for (uint32_t w = 0; w < m->num_workers; w++)
        s.workers[w] = m->workers[w].name;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        const job *jb = m->jobs[i];
        if (jb == NULL) continue;
        size_t k = s.n_jobs++, n = jb->n;
        s.jobs[k] = &sj[k];
        sluice__master__snapshot_job__init(&sj[k]);
        sluice__master__job_spec__init(&spec[k]);
        sluice__master__split_list__init(&sl[k]);
        sj[k].spec = &spec[k];
        spec[k] = (Sluice__Master__JobSpec)SLUICE__MASTER__JOB_SPEC__INIT;
        spec[k].job_id = jb->id;
        spec[k].splits = &sl[k];
        spec[k].epochs = jb->epochs;
        spec[k].seed = jb->seed;
        spec[k].shuffle = jb->shuffle;
        sl[k].n_paths = jb->num_paths;
        sl[k].paths = jb->paths;
        sl[k].n_path_footer = jb->path_footer != NULL ? jb->num_paths : 0;
        sl[k].path_footer = jb->path_footer;
        sl[k].n_path_index = sl[k].n_stripe_begin = sl[k].n_stripe_end = n;
        sl[k].n_first_row = sl[k].n_num_rows = n;
        sj[k].epoch = jb->epoch;
        sj[k].batches = jb->batches;
        sj[k].samples = jb->samples;
        sj[k].n_state = sj[k].n_worker = sj[k].n_generation = n;
        size_t nr = 0;
        for (size_t j = 0; j < n; j++)
            nr += jb->st[j].nr;
        sj[k].n_range_split = sj[k].n_range_from = sj[k].n_range_to = nr;
        spec[k].spec_json = jb->spec_json;
        spec[k].ranks = jb->ranks;
        spec[k].static_sharding = jb->static_sharding;
        spec[k].equal_batches_per_rank = jb->eq_count != NULL;
        spec[k].min_workers = jb->min_workers;
        spec[k].max_workers = jb->max_workers;
        spec[k].skip_bad_splits = jb->skip_bad;
        spec[k].plan_fingerprint = jb->plan_fp;
        spec[k].share = jb->share;
        spec[k].prefix_fingerprint = jb->prefix_fp;
        spec[k].parquet_row_groups = jb->pq_row_groups;
        spec[k].parquet_row_groups_skipped = jb->pq_groups_skipped;
        spec[k].parquet_rows_skipped = jb->pq_rows_skipped;
        spec[k].order = jb->ord != NULL ? 1 : 0;
        spec[k].order_window = jb->ord != NULL ? jb->order_window : 0;
        if ((rc = m_order_pb_build(m, jb, &sj[k], err)) != SL_OK) goto out;
        sj[k].skipped_splits = jb->skipped_splits;
        sj[k].skipped_rows = jb->skipped_rows;
        if ((rc = m_attr_pb_build(m, jb, &sj[k], &ap[k], err)) != SL_OK) goto out;
        if ((rc = m_equal_pb(a, jb, &sj[k], err)) != SL_OK) goto out;
        if (jb->chunk != 0) {
            kpp[k] = sl_calloc(a, jb->nkp + 1, sizeof *kpp[k]);
            kptr[k] = sl_calloc(a, jb->nkp + 1, sizeof *kptr[k]);
            nkp[k] = jb->nkp;
            if (kpp[k] == NULL || kptr[k] == NULL) {
                rc = sl_error_set(err, SL_ERR_NOMEM, "snapshot of job '%s'", jb->id);
                goto out;
            }
            m_kafka_spec(jb, &spec[k], kpp[k], kptr[k]);
        }
        if (jb->failed) {
            sluice__master__job_failure__init(&jf[k]);
            jf[k] = (Sluice__Master__JobFailure){.base = jf[k].base,
                                                 .split = jb->fail_split,
                                                 .file = jb->fail_file,
                                                 .stripe = jb->fail_stripe,
                                                 .message = jb->fail_message,
                                                 .code = jb->fail_code,
                                                 .epoch = jb->fail_epoch};
            sj[k].failure = &jf[k];
        }
        bool any_failures = false;
        for (size_t j = 0; j < n && !any_failures; j++)
            any_failures = jb->st[j].failures > 0;
        sj[k].n_failures = any_failures ? n : 0;
        sl[k].path_index = sl_alloc(a, n * 4);
        sl[k].stripe_begin = sl_alloc(a, n * 4);
        sl[k].stripe_end = sl_alloc(a, n * 4);
        sl[k].first_row = sl_alloc(a, n * 8);
        sl[k].num_rows = sl_alloc(a, n * 8);
        sj[k].state = sl_alloc(a, n * 4);
        sj[k].worker = sl_alloc(a, n * 4);
        sj[k].generation = sl_alloc(a, n * 8);
        sj[k].n_kafka_made_generation = jb->chunk != 0 ? n : 0;
        sj[k].kafka_made_generation = sl_alloc(a, sj[k].n_kafka_made_generation * 8 + 1);
        size_t nf = jb->ring_len;
        sj[k].n_kafka_folded_split = sj[k].n_kafka_folded_partition = nf;
        sj[k].n_kafka_folded_made_generation = sj[k].n_kafka_folded_first = nf;
        sj[k].kafka_folded_split = sl_alloc(a, nf * 4 + 1);
        sj[k].kafka_folded_partition = sl_alloc(a, nf * 4 + 1);
        sj[k].kafka_folded_made_generation = sl_alloc(a, nf * 8 + 1);
        sj[k].kafka_folded_first = sl_alloc(a, nf * 8 + 1);
        for (size_t q = 0; sj[k].kafka_folded_split != NULL && sj[k].kafka_folded_partition &&
                           sj[k].kafka_folded_made_generation && sj[k].kafka_folded_first && q < nf;
             q++) {
            const kfolded *f = m_kafka_folded_at(jb, (uint32_t)q);
            sj[k].kafka_folded_split[q] = f->split;
            sj[k].kafka_folded_partition[q] = f->path;
            sj[k].kafka_folded_made_generation[q] = f->made_gen;
            sj[k].kafka_folded_first[q] = f->first_row;
        }
        sj[k].failures = sl_alloc(a, sj[k].n_failures * 4 + 1);
        sj[k].range_split = sl_alloc(a, nr * 4 + 1);
        sj[k].range_from = sl_alloc(a, nr * 8 + 1);
        sj[k].range_to = sl_alloc(a, nr * 8 + 1);
        if (!sl[k].path_index || !sl[k].stripe_begin || !sl[k].stripe_end || !sl[k].first_row ||
            !sl[k].num_rows || !sj[k].state || !sj[k].worker || !sj[k].generation ||
            !sj[k].failures || !sj[k].range_split || !sj[k].range_from || !sj[k].range_to ||
            !sj[k].kafka_made_generation || !sj[k].kafka_folded_split ||
            !sj[k].kafka_folded_partition || !sj[k].kafka_folded_made_generation ||
            !sj[k].kafka_folded_first) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "snapshot of job '%s'", jb->id);
            goto out;
        }
        size_t nr2 = 0;
        for (size_t j = 0; j < n; j++) {
            const split_def *d = &jb->defs[j];
            const split_st *st = &jb->st[j];
            sl[k].path_index[j] = d->path;
            sl[k].stripe_begin[j] = d->stripe_begin;
            sl[k].stripe_end[j] = d->stripe_end;
            sl[k].first_row[j] = d->first_row;
            sl[k].num_rows[j] = d->num_rows;
            sj[k].state[j] = st->state;
            sj[k].worker[j] = st->state == SL_MASTER_SPLIT_LEASED ? st->worker : 0;
            sj[k].generation[j] = st->generation;
            if (sj[k].n_kafka_made_generation) sj[k].kafka_made_generation[j] = d->made_gen;
            if (sj[k].n_failures) sj[k].failures[j] = st->failures;
            for (uint32_t q = 0; q < st->nr; q++) {
                sj[k].range_split[nr2] = (uint32_t)j;
                sj[k].range_from[nr2] = st->r[q].from_row;
                sj[k].range_to[nr2] = st->r[q].to_row;
                nr2++;
            }
        }
    }
    s.n_clients = m->num_clients;
    s.clients = sl_alloc(a, ((size_t)m->num_clients + 1) * sizeof *s.clients);
    sc = sl_alloc(a, ((size_t)m->num_clients + 1) * sizeof *sc);
    nonces = sl_alloc(a, ((size_t)m->num_clients * m->opts.max_answers + 1) * sizeof *nonces);
    if (s.clients == NULL || sc == NULL || nonces == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "snapshot of %u clients", m->num_clients);
        goto out;
    }
    for (uint32_t c = 0; c < m->num_clients; c++) {
        const client *cl = &m->clients[c];
        sluice__master__snapshot_client__init(&sc[c]);
        s.clients[c] = &sc[c];
        sc[c].client_id = cl->name;
        sc[c].n_nonces = cl->len;
        sc[c].nonces = nonces + (size_t)c * m->opts.max_answers;
        for (uint32_t q = 0; q < cl->len; q++)
            sc[c].nonces[q] = cl->ring[(cl->head + q) % m->opts.max_answers];
    }
    *len = sluice__master__snapshot__get_packed_size(&s);
    *buf = sl_alloc(a, *len);
    if (*buf == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "snapshot of %zu bytes", *len);
        goto out;
    }
    sluice__master__snapshot__pack(&s, *buf);
out:
    for (size_t k = 0; sl != NULL && sj != NULL && k < s.n_jobs; k++) {
        size_t n = sj[k].n_state;
        sl_free(a, sl[k].path_index, n * 4);
        sl_free(a, sl[k].stripe_begin, n * 4);
        sl_free(a, sl[k].stripe_end, n * 4);
        sl_free(a, sl[k].first_row, n * 8);
        sl_free(a, sl[k].num_rows, n * 8);
        sl_free(a, sj[k].state, n * 4);
        sl_free(a, sj[k].worker, n * 4);
        sl_free(a, sj[k].generation, n * 8);
        sl_free(a, sj[k].kafka_made_generation, sj[k].n_kafka_made_generation * 8 + 1);
        size_t nf = sj[k].n_kafka_folded_split;
        sl_free(a, sj[k].kafka_folded_split, nf * 4 + 1);
        sl_free(a, sj[k].kafka_folded_partition, nf * 4 + 1);
        sl_free(a, sj[k].kafka_folded_made_generation, nf * 8 + 1);
        sl_free(a, sj[k].kafka_folded_first, nf * 8 + 1);
        sl_free(a, sj[k].failures, sj[k].n_failures * 4 + 1);
        m_equal_pb_free(a, &sj[k]);
        size_t nr = sj[k].n_range_split;
        sl_free(a, sj[k].range_split, nr * 4 + 1);
        sl_free(a, sj[k].range_from, nr * 8 + 1);
        sl_free(a, sj[k].range_to, nr * 8 + 1);
        m_order_pb_free(a, &sj[k]);
    }
    for (size_t k = 0; ap != NULL && k < s.n_jobs; k++)
        m_attr_pb_free(a, &ap[k]);
    sl_free(a, ap, (nj + 1) * sizeof *ap);
    sl_free(a, s.workers, (size_t)m->num_workers * sizeof(char *) + 1);
    sl_free(a, s.clients, ((size_t)m->num_clients + 1) * sizeof *s.clients);
    sl_free(a, sc, ((size_t)m->num_clients + 1) * sizeof *sc);
    sl_free(a, nonces, ((size_t)m->num_clients * m->opts.max_answers + 1) * sizeof *nonces);
    sl_free(a, s.jobs, (nj + 1) * sizeof *s.jobs);
    sl_free(a, sj, (nj + 1) * sizeof *sj);
    sl_free(a, spec, (nj + 1) * sizeof *spec);
    sl_free(a, sl, (nj + 1) * sizeof *sl);
    sl_free(a, jf, (nj + 1) * sizeof *jf);
    for (size_t k = 0; kpp != NULL && kptr != NULL && nkp != NULL && k < nj; k++) {
        sl_free(a, kpp[k], (nkp[k] + 1) * sizeof *kpp[k]);
        sl_free(a, kptr[k], (nkp[k] + 1) * sizeof *kptr[k]);
    }
    sl_free(a, kpp, (nj + 1) * sizeof *kpp);
    sl_free(a, kptr, (nj + 1) * sizeof *kptr);
    sl_free(a, nkp, (nj + 1) * sizeof *nkp);
    return rc;
}

sl_err_t sl_master_state_snapshot_encode(const sl_master_state_t *m, uint8_t **buf, size_t *len,
                                         sl_error_t *err)
{
    return m_snapshot_encode(m, buf, len, err);
}

sl_err_t sl_master_state_load_snapshot(sl_master_state_t *m, const uint8_t *snapshot, size_t len,
                                       sl_error_t *err)
{
    return m_apply_snapshot(m, snapshot, len, err);
}

sl_err_t sl_master_state_apply_record(sl_master_state_t *m, const uint8_t *record, size_t len,
                                      uint64_t offset, sl_error_t *err)
{
    return m_apply_record(m, record, len, offset, err);
}

/* ---- dump --------------------------------------------------------------------------- */

typedef struct sbuf {
    const sl_allocator_t *a;
    char *p;
    size_t len, cap;
    bool failed;
} sbuf;

static void sb_vprintf(sbuf *b, const char *fmt, va_list ap)
{
    if (b->failed) return;
    char line[768];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = sl_alloc(b->a, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        if (b->len > 0) memcpy(p, b->p, b->len);
        sl_free(b->a, b->p, b->cap);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, line, (size_t)n);
    b->len += (size_t)n;
    b->p[b->len] = '\0';
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

static void sb_pf(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_pf(void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(ctx, fmt, ap);
    va_end(ap);
}

static int client_by_name(const void *x, const void *y)
{
    return strcmp((*(const client *const *)x)->name, (*(const client *const *)y)->name);
}

static int by_id(const void *x, const void *y)
{
    return strcmp((*(const job *const *)x)->id, (*(const job *const *)y)->id);
}

sl_err_t sl_master_state_dump(const sl_master_state_t *m, char **out, size_t *len, sl_error_t *err)
{
    *out = NULL;
    *len = 0;
    sbuf b = {.a = m->a};
    const job **jobs = sl_calloc(m->a, m->opts.max_jobs, sizeof *jobs);
    if (jobs == NULL) return sl_error_set(err, SL_ERR_NOMEM, "dump");
    uint32_t nj = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        if (m->jobs[i] != NULL) jobs[nj++] = m->jobs[i];
    qsort(jobs, nj, sizeof *jobs, by_id);
    static const char state_char[] = "PLD";
    for (uint32_t i = 0; i < nj; i++) {
        const job *jb = jobs[i];
        sb_printf(&b,
                  "job %s epoch %u/%u splits %u pending %u leased %u done %u committed %llu "
                  "ranks %u%s batches %llu samples %llu%s skipped %llu/%llu\n",
                  jb->id, jb->epoch, jb->epochs, jb->n, jb->count[0], jb->count[1], jb->count[2],
                  (unsigned long long)jb->committed_rows, jb->ranks,
                  jb->static_sharding ? " static" : "", (unsigned long long)jb->batches,
                  (unsigned long long)jb->samples, jb->skip_bad ? " skip-bad" : "",
                  (unsigned long long)jb->skipped_splits, (unsigned long long)jb->skipped_rows);
        for (uint32_t p = 0; p < jb->nkp; p++)
            sb_printf(&b, " kafka %s start %lld stop %lld chunks %u folded %u\n", jb->paths[p],
                      (long long)jb->kp[p].start, (long long)jb->kp[p].stop, jb->kp[p].nchunks,
                      jb->kp[p].folded);
        if (jb->ring_len > 0) {
            sb_printf(&b, " folded-ring");
            for (uint32_t q = 0; q < jb->ring_len; q++) {
                const kfolded *f = m_kafka_folded_at(jb, q);
                sb_printf(&b, " %u:%u@%llu", f->split, f->path, (unsigned long long)f->first_row);
            }
            sb_printf(&b, "\n");
        }
        if (jb->nfree > 0) {
            sb_printf(&b, " free");
            for (uint32_t i = 0; i < jb->nfree; i++)
                sb_printf(&b, " %u", jb->free[i]);
            sb_printf(&b, "\n");
        }
        m_attr_dump(m->a, jb, sb_pf, &b);
        m_rank_dump(jb, sb_pf, &b);
        m_order_dump(jb, sb_pf, &b);
        m_equal_dump(jb, sb_pf, &b);
        if (jb->failed)
            sb_printf(&b, " failed split %u epoch %u file %s stripe %d code %d: %s\n",
                      jb->fail_split, jb->fail_epoch, jb->fail_file, jb->fail_stripe, jb->fail_code,
                      jb->fail_message);
        for (uint32_t s = 0; s < jb->n; s++) {
            const split_st *st = &jb->st[s];
            sb_printf(&b, " %u %c gen %llu committed %llu %s", s, state_char[st->state],
                      (unsigned long long)st->generation, (unsigned long long)st->committed,
                      st->state == SL_MASTER_SPLIT_LEASED ? m->workers[st->worker].name : "-");
            if (st->failures) sb_printf(&b, " failures %u", st->failures);
            if (jb->chunk != 0)
                sb_printf(&b, " %s@%llu+%llu", jb->paths[jb->defs[s].path],
                          (unsigned long long)jb->defs[s].first_row,
                          (unsigned long long)jb->defs[s].num_rows);
            for (uint32_t q = 0; q < st->nr; q++)
                sb_printf(&b, " [%llu,%llu)", (unsigned long long)st->r[q].from_row,
                          (unsigned long long)st->r[q].to_row);
            sb_printf(&b, "\n");
        }
    }
    sl_free(m->a, jobs, (size_t)m->opts.max_jobs * sizeof *jobs);
    /* Clients with remembered nonces, by name (a client whose commits were
     * all refused exists only in the run that saw it). */
    const client **cls = sl_calloc(m->a, (size_t)m->num_clients + 1, sizeof *cls);
    if (cls == NULL) b.failed = true;
    uint32_t nc = 0;
    for (uint32_t c = 0; cls != NULL && c < m->num_clients; c++)
        if (m->clients[c].len > 0) cls[nc++] = &m->clients[c];
    if (nc > 1) qsort(cls, nc, sizeof *cls, client_by_name);
    for (uint32_t c = 0; c < nc; c++) {
        sb_printf(&b, "client %s", cls[c]->name);
        for (uint32_t q = 0; q < cls[c]->len; q++)
            sb_printf(&b, " %llu",
                      (unsigned long long)cls[c]->ring[(cls[c]->head + q) % m->opts.max_answers]);
        sb_printf(&b, "\n");
    }
    if (cls != NULL) sl_free(m->a, cls, ((size_t)m->num_clients + 1) * sizeof *cls);
    if (b.len == 0) sb_printf(&b, "empty\n");
    if (b.failed) {
        sl_free(m->a, b.p, b.cap);
        return sl_error_set(err, SL_ERR_NOMEM, "dump");
    }
    /* Hand back exactly len + 1 bytes, as the header promises. */
    char *p = sl_alloc(m->a, b.len + 1);
    if (p == NULL) {
        sl_free(m->a, b.p, b.cap);
        return sl_error_set(err, SL_ERR_NOMEM, "dump");
    }
    memcpy(p, b.p, b.len + 1);
    sl_free(m->a, b.p, b.cap);
    *out = p;
    *len = b.len;
    return SL_OK;
}

/* ---- a new state, and after a replay ------------------------------------------- */

/* After replay: queues from scratch, every lease expiring at now + timeout,
 * counters of this run only. */
static void after_replay(sl_master_state_t *m, uint64_t now_ms)
{
    uint64_t expiry = now_ms + m->opts.lease_timeout_ms;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        job *jb = m->jobs[i];
        if (jb == NULL) continue;
        m_reset_queue(jb);
        for (uint32_t s = 0; s < jb->n; s++)
            if (jb->st[s].state == SL_MASTER_SPLIT_LEASED) jb->st[s].expiry = expiry;
    }
    for (uint32_t w = 0; w < m->num_workers; w++)
        m->workers[w].earliest = expiry;
    /* a client's idle time restarts too (it may be reconnecting) */
    m->now_ms = now_ms;
    for (uint32_t c = 0; c < m->num_clients; c++)
        m->clients[c].last_ms = now_ms;
    memset(&m->c, 0, sizeof m->c);
    m->c.workers = m->num_workers;
    m->c.clients = m->num_clients;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        m->c.jobs += m->jobs[i] != NULL;
}

sl_err_t sl_master_state_new(const sl_master_state_opts_t *opts, sl_master_state_t **out,
                             sl_error_t *err)
{
    *out = NULL;
    sl_master_state_opts_t o = opts != NULL ? *opts : (sl_master_state_opts_t){0};
    if (o.allocator == NULL) o.allocator = sl_allocator_default();
    if (o.lease_timeout_ms == 0) o.lease_timeout_ms = 10000;
    if (o.max_jobs == 0) o.max_jobs = 64;
    if (o.max_workers == 0) o.max_workers = 65536;
    if (o.max_splits == 0) o.max_splits = 16u << 20;
    if (o.max_name == 0 || o.max_name > 255) o.max_name = 255;
    if (o.max_clients == 0) o.max_clients = 4096;
    if (o.max_answers == 0) o.max_answers = 1024;
    if (o.max_ranges == 0) o.max_ranges = 65536;
    sl_master_state_t *m = sl_calloc(o.allocator, 1, sizeof *m);
    if (m == NULL) return sl_error_set(err, SL_ERR_NOMEM, "master");
    m->a = o.allocator;
    m->opts = o;
    m->next_generation = 1;
    m->jobs = sl_calloc(m->a, o.max_jobs, sizeof *m->jobs);
    if (m->jobs == NULL) {
        sl_master_state_destroy(m);
        return sl_error_set(err, SL_ERR_NOMEM, "master");
    }
    *out = m;
    return SL_OK;
}

sl_err_t sl_master_state_set_sink(sl_master_state_t *m, const sl_master_record_sink_t *sink,
                                  sl_error_t *err)
{
    if (sink != NULL && sink->append != NULL && m->scratch_cap < 4096) {
        uint8_t *p = sl_alloc(m->a, 4096);
        if (p == NULL) return sl_error_set(err, SL_ERR_NOMEM, "master: journal record buffer");
        sl_free(m->a, m->scratch, m->scratch_cap);
        m->scratch = p;
        m->scratch_cap = 4096;
    }
    m->sink = sink != NULL ? *sink : (sl_master_record_sink_t){0};
    return SL_OK;
}

sl_err_t sl_master_state_replayed(sl_master_state_t *m, uint64_t now_ms, sl_error_t *err)
{
    after_replay(m, now_ms);
    if (m->sink.append != NULL) {
        /* Generations handed out by the last run but lost with an unsynced
         * tail must never come back: jump past them, durably (the caller
         * syncs), before granting any. */
        Sluice__Master__Opened op = SLUICE__MASTER__OPENED__INIT;
        op.generation_base = m->next_generation + GENERATION_GAP;
        Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
        rec.kind_case = SLUICE__MASTER__RECORD__KIND_OPENED;
        rec.opened = &op;
        SL_FORWARD_IF_ERROR(m_record(m, &rec, NULL, err));
    }
    return m_advance_all(m, err);
}

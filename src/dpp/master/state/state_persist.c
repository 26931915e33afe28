/* The DPP master's writing side: journal records (m_journal encodes every
 * change's record and hands it to the sink; m_record in state_apply.c then applies it), the check
 * of a job's spec record (live and on replay), adding a job, and resume tokens (encode, and resume
 * from one or one per rank). Reading the journal back (records, snapshots), the dump and the replay
 * entry points are in state_replay.c; the transitions themselves in state.c, state_leases.c and
 * their neighbours. Callers hold the master's lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/err.h"
#include "dpp/master/state/state_internal.h"

sl_err_t m_journal(sl_master_state_t *m, const Sluice__Master__Record *rec, sl_error_t *err)
{
    if (m->sink.append == NULL) return SL_OK;
    size_t n = sluice__master__record__get_packed_size(rec);
    if (n > m->scratch_cap) {
        size_t cap = n < 4096 ? 4096 : n;
        uint8_t *p = sl_alloc(m->a, cap);
        if (p == NULL) return sl_error_set(err, SL_ERR_NOMEM, "journal record of %zu bytes", n);
        sl_free(m->a, m->scratch, m->scratch_cap);
        m->scratch = p;
        m->scratch_cap = cap;
    }
    sluice__master__record__pack(rec, m->scratch);
    sl_err_t rc = m->sink.append(m->sink.ctx, m->scratch, n, err);
    if (n > (1u << 20)) { /* a job's split list: do not keep that much around */
        sl_free(m->a, m->scratch, m->scratch_cap);
        m->scratch = NULL;
        m->scratch_cap = 0;
    }
    if (rc == SL_OK) m->c.journal_records++;
    return rc;
}

/* Ids go into messages, dumps and metrics labels: printable ASCII without
 * spaces. */
bool m_name_ok(const sl_master_state_t *m, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > m->opts.max_name) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e) return false;
    return true;
}

sl_err_t m_check_spec(const sl_master_state_t *m, const Sluice__Master__JobSpec *spec,
                      sl_error_t *err)
{
    if (spec == NULL || spec->splits == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "job spec without splits");
    if (!m_name_ok(m, spec->job_id))
        return sl_error_set(err, SL_ERR_INVALID,
                            "job id of %zu bytes: 1..%u printable ASCII bytes, no spaces",
                            spec->job_id ? strlen(spec->job_id) : 0, m->opts.max_name);
    if (spec->kafka_chunk > 0) return m_kafka_check_spec(m, spec, err);
    if (spec->n_kafka_partitions > 0)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': Kafka partitions without a chunk size",
                            spec->job_id);
    const Sluice__Master__SplitList *l = spec->splits;
    size_t n = l->n_path_index;
    if (n == 0) return sl_error_set(err, SL_ERR_INVALID, "job '%s': no splits", spec->job_id);
    if (n > m->opts.max_splits)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': %zu splits (max_splits %u)",
                            spec->job_id, n, m->opts.max_splits);
    if (l->n_stripe_begin != n || l->n_stripe_end != n || l->n_first_row != n ||
        l->n_num_rows != n || l->n_paths > n ||
        (l->n_path_footer && l->n_path_footer != l->n_paths))
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': split columns of unequal length",
                            spec->job_id);
    if (spec->epochs == 0)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': epochs must be >= 1", spec->job_id);
    for (size_t i = 0; i < l->n_paths; i++)
        if (l->paths[i] == NULL || l->paths[i][0] == '\0')
            return sl_error_set(err, SL_ERR_INVALID, "job '%s': empty split path", spec->job_id);
    for (size_t i = 0; i < n; i++) {
        if (l->path_index[i] >= l->n_paths || l->stripe_begin[i] > l->stripe_end[i] ||
            l->num_rows[i] > UINT64_MAX / 4 || l->first_row[i] > UINT64_MAX - l->num_rows[i])
            return sl_error_set(err, SL_ERR_INVALID,
                                "job '%s' split %zu: bad path index, stripe range or rows",
                                spec->job_id, i);
    }
    return SL_OK;
}

sl_err_t m_check_job(const sl_master_state_t *m, const Sluice__Master__JobAdded *ja, bool replacing,
                     sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(m_check_spec(m, ja->spec, err));
    const Sluice__Master__SplitList *l = ja->spec->splits;
    if (!replacing && m_find_job(m, ja->spec->job_id, NULL) != NULL)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s' exists already", ja->spec->job_id);
    uint32_t used = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        used += m->jobs[i] != NULL;
    if (!replacing && used == m->opts.max_jobs)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': already %u jobs (max_jobs)",
                            ja->spec->job_id, used);
    if (ja->start_epoch > ja->spec->epochs)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': start epoch %u of %u", ja->spec->job_id,
                            ja->start_epoch, ja->spec->epochs);
    if (ja->spec->kafka_chunk == 0 && ja->n_kafka_range_partition > 0)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': Kafka ranges for a table job",
                            ja->spec->job_id);
    if (ja->n_start_from != ja->n_start_split || ja->n_start_to != ja->n_start_split)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': start range columns of unequal length",
                            ja->spec->job_id);
    if (ja->spec->ranks > 65536)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': %u ranks (1..65536)", ja->spec->job_id,
                            ja->spec->ranks);
    for (size_t k = 0; k < ja->n_start_split; k++) {
        uint32_t i = ja->start_split[k];
        if (i >= l->n_path_index || ja->start_from[k] >= ja->start_to[k] ||
            ja->start_to[k] > l->num_rows[i])
            return sl_error_set(err, SL_ERR_INVALID,
                                "job '%s': start range %zu (split %u rows [%llu, %llu)) outside "
                                "the splits",
                                ja->spec->job_id, k, i, (unsigned long long)ja->start_from[k],
                                (unsigned long long)ja->start_to[k]);
    }
    return SL_OK;
}

/* Check a JobAdded from disk and insert the job. */
sl_err_t m_add_job(sl_master_state_t *m, const Sluice__Master__JobAdded *ja, sl_error_t *err)
{
    job *jb;
    sl_err_t rc = m_check_job(m, ja, false, err);
    if (rc == SL_OK) rc = m_job_build(m, ja, &jb, err);
    if (rc != SL_OK) return rc;
    m_job_link(m, jb);
    return SL_OK;
}

void m_spec_pb_free(m_spec_pb *p)
{
    const sl_allocator_t *a = p->a;
    sl_free(a, p->kparts, (p->nk + 1) * sizeof *p->kparts);
    sl_free(a, p->kptrs, (p->nk + 1) * sizeof *p->kptrs);
    sl_free(a, p->list.paths, p->cap_paths * sizeof(char *));
    sl_free(a, p->list.path_footer, p->cap_paths * sizeof(uint64_t));
    sl_free(a, p->list.path_index, p->n * sizeof(uint32_t));
    sl_free(a, p->list.stripe_begin, p->n * sizeof(uint32_t));
    sl_free(a, p->list.stripe_end, p->n * sizeof(uint32_t));
    sl_free(a, p->list.first_row, p->n * sizeof(uint64_t));
    sl_free(a, p->list.num_rows, p->n * sizeof(uint64_t));
}

sl_err_t m_spec_pb_build(const sl_master_state_t *m, const sl_master_state_job_spec_t *in,
                         m_spec_pb *p, sl_error_t *err)
{
    memset(p, 0, sizeof *p);
    p->a = m->a;
    sluice__master__job_spec__init(&p->spec);
    sluice__master__split_list__init(&p->list);
    p->spec.job_id = (char *)in->job_id;
    p->spec.splits = &p->list;
    p->spec.epochs = in->epochs;
    p->spec.seed = in->seed;
    p->spec.shuffle = in->shuffle;
    p->spec.spec_json = (char *)(in->spec_json != NULL ? in->spec_json : "");
    p->spec.ranks = in->ranks;
    p->spec.static_sharding = in->static_sharding;
    p->spec.equal_batches_per_rank = in->equal_batches_per_rank;
    p->spec.min_workers = in->min_workers;
    p->spec.max_workers = in->max_workers;
    p->spec.skip_bad_splits = in->skip_bad_splits;
    p->spec.kafka_chunk = in->kafka_chunk;
    if (in->num_kafka_partitions > SL_MASTER_MAX_KAFKA_PARTITIONS)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': %u Kafka partitions (at most %d)",
                            in->job_id ? in->job_id : "", in->num_kafka_partitions,
                            SL_MASTER_MAX_KAFKA_PARTITIONS);
    if (in->num_kafka_partitions > 0) {
        if (in->kafka_partitions == NULL)
            return sl_error_set(err, SL_ERR_INVALID, "job spec without its Kafka partitions");
        size_t nk = p->nk = in->num_kafka_partitions;
        p->kparts = sl_calloc(m->a, nk + 1, sizeof *p->kparts);
        p->kptrs = sl_calloc(m->a, nk + 1, sizeof *p->kptrs);
        if (p->kparts == NULL || p->kptrs == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "job '%s' of %zu Kafka partitions",
                                in->job_id ? in->job_id : "", nk);
        for (size_t i = 0; i < nk; i++) {
            const sl_master_kafka_partition_t *k = &in->kafka_partitions[i];
            sluice__master__kafka_partition__init(&p->kparts[i]);
            p->kparts[i].topic = (char *)(k->topic != NULL ? k->topic : "");
            p->kparts[i].partition = k->partition;
            p->kparts[i].start = k->start;
            p->kparts[i].stop = k->stop;
            p->kptrs[i] = &p->kparts[i];
        }
        p->spec.n_kafka_partitions = nk;
        p->spec.kafka_partitions = p->kptrs;
    }
    p->spec.plan_fingerprint = in->plan_fingerprint;
    p->spec.share = in->share;
    p->spec.prefix_fingerprint = in->prefix_fingerprint;
    p->spec.parquet_row_groups = in->parquet_row_groups;
    p->spec.parquet_row_groups_skipped = in->parquet_row_groups_skipped;
    p->spec.parquet_rows_skipped = in->parquet_rows_skipped;
    p->spec.order = in->deterministic ? 1 : 0;
    p->spec.order_window = in->deterministic ? in->order_window : 0;
    if (in->job_id == NULL || (in->splits == NULL && in->num_splits > 0))
        return sl_error_set(err, SL_ERR_INVALID, "job spec without id or splits");
    if (in->num_splits > m->opts.max_splits)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': %u splits (max_splits %u)",
                            in->job_id, in->num_splits, m->opts.max_splits);
    size_t n = p->n = in->num_splits;
    const sl_allocator_t *a = m->a;
    Sluice__Master__SplitList *l = &p->list;
    l->path_index = sl_alloc(a, n * sizeof(uint32_t));
    l->stripe_begin = sl_alloc(a, n * sizeof(uint32_t));
    l->stripe_end = sl_alloc(a, n * sizeof(uint32_t));
    l->first_row = sl_alloc(a, n * sizeof(uint64_t));
    l->num_rows = sl_alloc(a, n * sizeof(uint64_t));
    size_t hcap = 16;
    while (hcap < 2 * n)
        hcap *= 2;
    uint32_t *hash = sl_calloc(a, hcap, sizeof *hash); /* path index + 1 */
    p->cap_paths = n;
    l->paths = sl_alloc(a, n * sizeof(char *));
    l->path_footer = sl_alloc(a, n * sizeof(uint64_t));
    sl_err_t rc = SL_OK;
    if (n > 0 && (!l->path_index || !l->stripe_begin || !l->stripe_end || !l->first_row ||
                  !l->num_rows || !hash || !l->paths || !l->path_footer)) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "job '%s' of %zu splits", in->job_id, n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const sl_wh_split_t *s = &in->splits[i];
        if (s->path == NULL) {
            rc = sl_error_set(err, SL_ERR_INVALID, "job '%s' split %zu: no path", in->job_id, i);
            goto out;
        }
        /* Intern the path: a table's splits share few files. */
        size_t h = (size_t)XXH3_64bits(s->path, strlen(s->path)) & (hcap - 1);
        while (hash[h] != 0 && strcmp(l->paths[hash[h] - 1], s->path) != 0)
            h = (h + 1) & (hcap - 1);
        if (hash[h] == 0) {
            l->path_footer[l->n_paths] = s->footer_checksum; /* the same for every split */
            l->paths[l->n_paths++] = (char *)s->path;
            hash[h] = (uint32_t)l->n_paths;
        }
        l->path_index[i] = hash[h] - 1;
        l->stripe_begin[i] = s->stripe_begin;
        l->stripe_end[i] = s->stripe_end;
        l->first_row[i] = s->first_row;
        l->num_rows[i] = s->num_rows;
    }
    l->n_path_index = l->n_stripe_begin = l->n_stripe_end = l->n_first_row = l->n_num_rows = n;
    l->n_path_footer = l->n_paths;
out:
    sl_free(a, hash, hcap * sizeof *hash);
    return rc;
}

/* Add the job (replacing: in place of the job of its id, removed only once
 * the new one is checked and built, so that a refusal or running out of
 * memory leaves the old job as it was). */
sl_err_t m_journal_and_add(sl_master_state_t *m, Sluice__Master__JobAdded *ja, bool replacing,
                           sl_error_t *err)
{
    /* Check and build first: a record that replay would refuse, or that
     * this run could not apply, must not be written. */
    job *jb;
    sl_err_t rc = m_check_job(m, ja, replacing, err);
    if (rc == SL_OK) rc = m_job_build(m, ja, &jb, err);
    if (rc != SL_OK) return rc;
    if (replacing && (rc = sl_master_state_job_remove(m, ja->spec->job_id, err)) != SL_OK) {
        m_job_free(m, jb);
        return rc;
    }
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_JOB_ADDED;
    rec.job_added = ja;
    m_live live = {.now_ms = m->now_ms, .built = jb};
    rc = m_record(m, &rec, &live, err);
    if (live.built != NULL) m_job_free(m, live.built); /* not applied: the journal failed */
    if (rc != SL_OK) return rc;
    return m_advance_all(m, err);
}

sl_err_t sl_master_state_job_add(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                                 sl_error_t *err)
{
    m_spec_pb p;
    sl_err_t rc = m_spec_pb_build(m, spec, &p, err);
    if (rc == SL_OK) {
        Sluice__Master__JobAdded ja = SLUICE__MASTER__JOB_ADDED__INIT;
        ja.spec = &p.spec;
        ja.run_id = m_new_run_id(m, spec->job_id);
        rc = m_journal_and_add(m, &ja, false, err);
    }
    m_spec_pb_free(&p);
    return rc;
}

/* ---- resume tokens ---------------------------------------------------------------- */

void m_token_seal(uint8_t *out, uint32_t version, size_t payload)
{
    memcpy(out, SL_MASTER_RESUME_TOKEN_MAGIC, 4);
    memcpy(out + 4, &version, 4);
    uint64_t h = XXH3_64bits(out + M_TOKEN_HEADER_BYTES, payload);
    memcpy(out + 8, &h, 8);
}

sl_err_t m_token_check(const void *token, size_t len, uint32_t *version, sl_error_t *err)
{
    const uint8_t *p = token;
    if (p == NULL || len < 4 || memcmp(p, SL_MASTER_RESUME_TOKEN_MAGIC, 4) != 0)
        return sl_error_set(err, len < 4 ? SL_ERR_TRUNCATED : SL_ERR_CORRUPT,
                            "resume token: not a sluice resume token (magic)");
    if (len < M_TOKEN_HEADER_BYTES)
        return sl_error_set(err, SL_ERR_TRUNCATED, "resume token: %zu bytes", len);
    memcpy(version, p + 4, 4);
    uint64_t h;
    memcpy(&h, p + 8, 8);
    if (XXH3_64bits(p + M_TOKEN_HEADER_BYTES, len - M_TOKEN_HEADER_BYTES) != h)
        return sl_error_set(err, SL_ERR_CORRUPT, "resume token: checksum mismatch");
    return SL_OK;
}

size_t m_ranges_minus(const sl_dpp_row_range_t *r, size_t nr, const sl_dpp_row_range_t *ex,
                      size_t ne, sl_dpp_row_range_t *out)
{
    size_t n = 0, e = 0;
    for (size_t q = 0; q < nr; q++) {
        uint64_t at = r[q].from_row, end = r[q].to_row;
        while (at < end) {
            while (e < ne && ex[e].to_row <= at)
                e++;
            uint64_t stop = end;
            if (e < ne && ex[e].from_row < end) stop = ex[e].from_row > at ? ex[e].from_row : at;
            if (stop > at) out[n++] = (sl_dpp_row_range_t){at, stop};
            if (e < ne && ex[e].from_row < end)
                at = ex[e].to_row > at ? ex[e].to_row : at;
            else
                at = end;
        }
    }
    return n;
}

int m_by_from(const void *x, const void *y)
{
    const sl_dpp_row_range_t *a = x, *b = y;
    return a->from_row < b->from_row ? -1 : a->from_row > b->from_row;
}

sl_err_t sl_master_state_token_encode(const sl_master_state_t *m, const char *job_id,
                                      const sl_master_token_exclude_t *undelivered,
                                      uint32_t num_undelivered, void **buf, size_t *len,
                                      sl_error_t *err)
{
    *buf = NULL;
    *len = 0;
    const job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return sl_error_set(err, SL_ERR_NOT_FOUND, "no job '%s'", job_id);
    if (jb->chunk != 0)
        return m_kafka_token_encode(m, jb, NULL, undelivered, num_undelivered, buf, len, err);
    Sluice__Master__ResumeToken t = SLUICE__MASTER__RESUME_TOKEN__INIT;
    t.version = SL_MASTER_RESUME_TOKEN_VERSION;
    t.job_id = jb->id;
    t.fingerprint = jb->fingerprint;
    t.epoch = jb->epoch;
    /* Committed minus undelivered: every excluded range can split one
     * committed range in two, so at most ranges + excluded pieces. */
    size_t cap = num_undelivered, most = 0;
    for (uint32_t i = 0; i < jb->n; i++) {
        cap += jb->st[i].nr;
        if (jb->st[i].nr > most) most = jb->st[i].nr;
    }
    most += (size_t)num_undelivered + 1; /* the pieces of one split */
    const sl_allocator_t *a = m->a;
    t.range_split = sl_alloc(a, (cap + 1) * sizeof(uint32_t));
    t.range_from = sl_alloc(a, (cap + 1) * sizeof(uint64_t));
    t.range_to = sl_alloc(a, (cap + 1) * sizeof(uint64_t));
    sl_dpp_row_range_t *ex = sl_alloc(a, ((size_t)num_undelivered + 1) * sizeof *ex);
    sl_dpp_row_range_t *piece = sl_alloc(a, most * sizeof *piece);
    sl_err_t rc = SL_OK;
    if (t.range_split == NULL || t.range_from == NULL || t.range_to == NULL || ex == NULL ||
        piece == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "resume token of job '%s'", job_id);
        goto out;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < jb->n; i++) {
        const split_st *s = &jb->st[i];
        if (s->nr == 0) continue;
        /* This split's excluded ranges, sorted (a client has few). */
        uint32_t ne = 0;
        for (uint32_t k = 0; k < num_undelivered; k++)
            if (undelivered[k].split == i && undelivered[k].epoch == jb->epoch &&
                undelivered[k].from_row < undelivered[k].to_row)
                ex[ne++] = (sl_dpp_row_range_t){undelivered[k].from_row, undelivered[k].to_row};
        if (ne > 1) qsort(ex, ne, sizeof *ex, m_by_from);
        size_t got = m_ranges_minus(s->r, s->nr, ex, ne, piece);
        for (size_t q = 0; q < got; q++) {
            t.range_split[n] = i;
            t.range_from[n] = piece[q].from_row;
            t.range_to[n] = piece[q].to_row;
            n++;
        }
    }
    t.n_range_split = t.n_range_from = t.n_range_to = n;
    size_t pn = sluice__master__resume_token__get_packed_size(&t);
    uint8_t *out = sl_alloc(a, M_TOKEN_HEADER_BYTES + pn);
    if (out == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "resume token of job '%s'", job_id);
        goto out;
    }
    sluice__master__resume_token__pack(&t, out + M_TOKEN_HEADER_BYTES);
    m_token_seal(out, SL_MASTER_RESUME_TOKEN_VERSION, pn);
    *buf = out;
    *len = M_TOKEN_HEADER_BYTES + pn;
out:
    sl_free(a, t.range_split, (cap + 1) * sizeof(uint32_t));
    sl_free(a, t.range_from, (cap + 1) * sizeof(uint64_t));
    sl_free(a, t.range_to, (cap + 1) * sizeof(uint64_t));
    sl_free(a, ex, ((size_t)num_undelivered + 1) * sizeof *ex);
    sl_free(a, piece, most * sizeof *piece);
    return rc;
}

/* Check one token against the job (sp built from spec) and unpack it into
 * *out (free with sluice__master__resume_token__free_unpacked(*out, pa)). */
static sl_err_t token_open(const sl_master_state_job_spec_t *spec, const m_spec_pb *sp,
                           const void *token, size_t len, ProtobufCAllocator *pa,
                           Sluice__Master__ResumeToken **out, sl_error_t *err)
{
    *out = NULL;
    uint32_t version;
    sl_err_t hrc = m_token_check(token, len, &version, err);
    if (hrc != SL_OK) return hrc;
    if (version == SL_MASTER_KAFKA_TOKEN_VERSION || version == SL_MASTER_KAFKA_RANK_TOKEN_VERSION)
        return sl_error_set(err, SL_ERR_INVALID,
                            "resume token of a Kafka job (version %u); job '%s' reads a table",
                            version, spec->job_id);
    if (version != SL_MASTER_RESUME_TOKEN_VERSION)
        return sl_error_set(err, SL_ERR_VERSION, "resume token version %u (this build reads %d)",
                            version, SL_MASTER_RESUME_TOKEN_VERSION);
    const uint8_t *p = token;
    Sluice__Master__ResumeToken *t = sluice__master__resume_token__unpack(
        pa, len - M_TOKEN_HEADER_BYTES, p + M_TOKEN_HEADER_BYTES);
    if (t == NULL)
        return ((sl_unsized_t *)pa->allocator_data)->failed
                   ? sl_error_set(err, SL_ERR_NOMEM, "resume token: out of memory")
                   : sl_error_set(err, SL_ERR_CORRUPT, "resume token: malformed protobuf");
    sl_err_t rc = SL_OK;
    if (t->version != SL_MASTER_RESUME_TOKEN_VERSION) {
        rc = sl_error_set(err, SL_ERR_VERSION, "resume token version %u", t->version);
    } else if (t->job_id == NULL || strcmp(t->job_id, spec->job_id) != 0) {
        rc = sl_error_set(err, SL_ERR_INVALID, "resume token of job '%s', not of job '%s'",
                          t->job_id ? t->job_id : "", spec->job_id);
    } else if (t->n_range_from != t->n_range_split || t->n_range_to != t->n_range_split) {
        rc = sl_error_set(err, SL_ERR_CORRUPT, "resume token of job '%s': range columns differ",
                          spec->job_id);
    } else if (m_fingerprint(&sp->list) != t->fingerprint) {
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "resume token of job '%s' was taken over other splits", spec->job_id);
    } else if (t->epoch > spec->epochs) {
        rc = sl_error_set(err, SL_ERR_INVALID, "resume token at epoch %u of a %u-epoch job",
                          t->epoch, spec->epochs);
    }
    for (size_t i = 0; rc == SL_OK && i < t->n_range_split; i++)
        if (t->range_split[i] >= sp->n || t->range_from[i] >= t->range_to[i] ||
            t->range_to[i] > sp->list.num_rows[t->range_split[i]])
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "resume token: range %zu (split %u rows [%llu, %llu)) outside the "
                              "splits",
                              i, t->range_split[i], (unsigned long long)t->range_from[i],
                              (unsigned long long)t->range_to[i]);
    if (rc != SL_OK) {
        sluice__master__resume_token__free_unpacked(t, pa);
        return rc;
    }
    *out = t;
    return SL_OK;
}

void m_rset_free(const sl_allocator_t *a, m_rset *r)
{
    sl_free(a, r->split, (r->cap + 1) * sizeof(uint32_t));
    sl_free(a, r->from, (r->cap + 1) * sizeof(uint64_t));
    sl_free(a, r->to, (r->cap + 1) * sizeof(uint64_t));
    *r = (m_rset){0};
}

bool m_rset_init(const sl_allocator_t *a, m_rset *r, size_t cap)
{
    *r = (m_rset){.cap = cap};
    r->split = sl_alloc(a, (cap + 1) * sizeof(uint32_t));
    r->from = sl_alloc(a, (cap + 1) * sizeof(uint64_t));
    r->to = sl_alloc(a, (cap + 1) * sizeof(uint64_t));
    if (r->split != NULL && r->from != NULL && r->to != NULL) return true;
    m_rset_free(a, r);
    return false;
}

typedef struct tr_range {
    uint32_t split;
    uint64_t from, to;
} tr_range;

static int by_split_from(const void *x, const void *y)
{
    const tr_range *a = x, *b = y;
    if (a->split != b->split) return a->split < b->split ? -1 : 1;
    return a->from < b->from ? -1 : a->from > b->from;
}

/* Ranges as an rset: sorted, overlapping or touching ones merged (a token
 * from outside need not be in order). */
bool m_rset_of(const sl_allocator_t *a, const uint32_t *split, const uint64_t *from,
               const uint64_t *to, size_t n, m_rset *r)
{
    tr_range *v = sl_alloc(a, (n + 1) * sizeof *v);
    if (v == NULL || !m_rset_init(a, r, n)) {
        sl_free(a, v, (n + 1) * sizeof *v);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (tr_range){split[i], from[i], to[i]};
    if (n > 1) qsort(v, n, sizeof *v, by_split_from);
    for (size_t i = 0; i < n; i++) {
        if (r->n > 0 && r->split[r->n - 1] == v[i].split && v[i].from <= r->to[r->n - 1]) {
            if (v[i].to > r->to[r->n - 1]) r->to[r->n - 1] = v[i].to;
            continue;
        }
        r->split[r->n] = v[i].split;
        r->from[r->n] = v[i].from;
        r->to[r->n] = v[i].to;
        r->n++;
    }
    sl_free(a, v, (n + 1) * sizeof *v);
    return true;
}

/* out = x intersected with y (both sorted and disjoint): at most
 * x.n + y.n pieces, every piece ends one range of x or of y. */
bool m_rset_intersect(const sl_allocator_t *a, const m_rset *x, const m_rset *y, m_rset *out)
{
    if (!m_rset_init(a, out, x->n + y->n)) return false;
    size_t i = 0, j = 0;
    while (i < x->n && j < y->n) {
        if (x->split[i] != y->split[j]) {
            if (x->split[i] < y->split[j])
                i++;
            else
                j++;
            continue;
        }
        uint64_t lo = x->from[i] > y->from[j] ? x->from[i] : y->from[j];
        uint64_t hi = x->to[i] < y->to[j] ? x->to[i] : y->to[j];
        if (lo < hi) {
            out->split[out->n] = x->split[i];
            out->from[out->n] = lo;
            out->to[out->n] = hi;
            out->n++;
        }
        if (x->to[i] < y->to[j])
            i++;
        else
            j++;
    }
    return true;
}

static sl_err_t resume_ranks(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                             const void *const *tokens, const size_t *lens, uint32_t count,
                             bool replace, sl_error_t *err);

sl_err_t sl_master_state_job_resume(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                                    const void *token, size_t len, sl_error_t *err)
{
    return sl_master_state_job_resume_ranks(m, spec, &token, &len, 1, err);
}

sl_err_t sl_master_state_job_resume_ranks(sl_master_state_t *m,
                                          const sl_master_state_job_spec_t *spec,
                                          const void *const *tokens, const size_t *lens,
                                          uint32_t count, sl_error_t *err)
{
    return resume_ranks(m, spec, tokens, lens, count, false, err);
}

sl_err_t sl_master_state_job_replace(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                                     const void *const *tokens, const size_t *lens, uint32_t count,
                                     sl_error_t *err)
{
    if (m_find_job(m, spec->job_id, NULL) == NULL)
        return sl_error_set(err, SL_ERR_NOT_FOUND, "no job '%s'", spec->job_id);
    return resume_ranks(m, spec, tokens, lens, count, true, err);
}

/* Resume (replace: in place of the job of that id, removed only once every
 * token is found good, so a refused token leaves it as it was). */
static sl_err_t resume_ranks(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                             const void *const *tokens, const size_t *lens, uint32_t count,
                             bool replace, sl_error_t *err)
{
    if (count == 0 || count > SL_MASTER_MAX_RESUME_TOKENS)
        return sl_error_set(err, SL_ERR_INVALID, "resume: %u tokens (1..%d)", count,
                            SL_MASTER_MAX_RESUME_TOKENS);
    if (spec->kafka_chunk > 0) return m_kafka_resume(m, spec, tokens, lens, count, replace, err);
    /* A resumed deterministic job continues the sequence less what was
     * handed out, renumbered for its ranks (docs/DESIGN.md): from
     * version-4 tokens only, whose union is whole batches of its cuts. */
    if (spec->deterministic && count == 1) {
        uint32_t version;
        sl_err_t hrc = m_token_check(tokens[0], lens[0], &version, err);
        if (hrc != SL_OK) return hrc;
        if (version != SL_MASTER_RANK_TOKEN_VERSION)
            return sl_error_set(err, SL_ERR_INVALID,
                                "resume of job '%s' in \"order\": \"deterministic\" from a "
                                "token of version %u: only version %d (one per rank) says which "
                                "batches were handed out",
                                spec->job_id ? spec->job_id : "", version,
                                SL_MASTER_RANK_TOKEN_VERSION);
    }
    /* Version 4 (one per rank, combined by union) or one version-2 token. */
    uint32_t v4 = 0;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t version;
        sl_err_t hrc = m_token_check(tokens[k], lens[k], &version, err);
        if (hrc != SL_OK) {
            if (count > 1) sl_error_prefix(err, "token %u of %u: ", k + 1, count);
            return hrc;
        }
        v4 += version == SL_MASTER_RANK_TOKEN_VERSION;
        if (version == SL_MASTER_KAFKA_TOKEN_VERSION ||
            version == SL_MASTER_KAFKA_RANK_TOKEN_VERSION) {
            sl_error_set(err, SL_ERR_INVALID,
                         "resume token of a Kafka job (version %u); job '%s' reads a table",
                         version, spec->job_id);
            if (count > 1) sl_error_prefix(err, "token %u of %u: ", k + 1, count);
            return SL_ERR_INVALID;
        }
    }
    if (v4 == count) return m_token_resume_v4(m, spec, tokens, lens, count, replace, err);
    if (v4 > 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "resume: %u of %u tokens are of version %d, the others older: take "
                            "every rank's token again",
                            v4, count, SL_MASTER_RANK_TOKEN_VERSION);
    if (count > 1)
        return sl_error_set(err, SL_ERR_INVALID,
                            "resume: %u version-2 tokens: tokens of that version cannot be "
                            "combined exactly across ranks (one rank's batches may be trained "
                            "twice); take new tokens (version %d, one per rank) or resume from "
                            "one",
                            count, SL_MASTER_RANK_TOKEN_VERSION);
    const sl_allocator_t *a = m->a;
    sl_unsized_t u = {.a = m->a};
    ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
    m_spec_pb sp;
    sl_err_t rc = m_spec_pb_build(m, spec, &sp, err);
    if (rc == SL_OK) rc = m_check_spec(m, &sp.spec, err);
    /* The intersection of what every rank handed out. A token of a later
     * epoch than the earliest says its rank had every row of the earlier
     * epoch (token_encode ignores undelivered rows of other epochs), so it
     * leaves the earliest tokens' ranges as they are. */
    uint32_t epoch = UINT32_MAX;
    m_rset acc = {0};
    bool have = false;
    for (uint32_t pass = 0; rc == SL_OK && pass < 2; pass++) {
        for (uint32_t k = 0; rc == SL_OK && k < count; k++) {
            Sluice__Master__ResumeToken *t = NULL;
            rc = token_open(spec, &sp, tokens[k], lens[k], &pa, &t, err);
            if (rc != SL_OK) {
                if (count > 1) sl_error_prefix(err, "token %u of %u: ", k + 1, count);
                break;
            }
            if (pass == 0) {
                if (t->epoch < epoch) epoch = t->epoch;
            } else if (t->epoch == epoch) {
                m_rset one, both;
                if (!m_rset_of(a, t->range_split, t->range_from, t->range_to, t->n_range_split,
                               &one)) {
                    rc = sl_error_set(err, SL_ERR_NOMEM, "resume token %u of %u", k + 1, count);
                } else if (!have) {
                    acc = one;
                    have = true;
                } else if (!m_rset_intersect(a, &acc, &one, &both)) {
                    m_rset_free(a, &one);
                    rc = sl_error_set(err, SL_ERR_NOMEM, "resume token %u of %u", k + 1, count);
                } else {
                    m_rset_free(a, &one);
                    m_rset_free(a, &acc);
                    acc = both;
                }
            }
            sluice__master__resume_token__free_unpacked(t, &pa);
        }
    }
    /* Two records, JobRemoved then JobAdded (journal_and_add), made durable
     * by the caller's one sync. */
    if (rc == SL_OK) {
        Sluice__Master__JobAdded ja = SLUICE__MASTER__JOB_ADDED__INIT;
        ja.spec = &sp.spec;
        ja.start_epoch = epoch;
        ja.n_start_split = ja.n_start_from = ja.n_start_to = acc.n;
        ja.start_split = acc.split;
        ja.start_from = acc.from;
        ja.start_to = acc.to;
        ja.run_id = m_new_run_id(m, spec->job_id);
        rc = m_journal_and_add(m, &ja, replace, err);
    }
    if (have) m_rset_free(a, &acc);
    m_spec_pb_free(&sp);
    return rc;
}

/* Resume tokens of Kafka jobs (versions 3 and 5; docs/PROTOCOL.md "Resume
 * tokens"): per (topic, partition), the delivered prefix and the delivered
 * ranges above it, in offsets. Version 5 says what ONE trainer rank handed
 * out (who committed what, state_attr.c) and the tokens of a checkpoint's
 * ranks combine by union, as version 4 does for tables; version 3 (the job's
 * commits minus one client's undelivered) is still written by
 * sl_master_state_token_encode and read alone. A job resumed from them
 * starts each partition at the prefix of what they say is delivered and
 * has the ranges above it committed from the start. Callers hold the
 * master's lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "dpp/master/state/state_internal.h"

/* ---- encode ------------------------------------------------------------------------- */

/* The partition and first offset of the chunk an undelivered ref names:
 * the split's chunk, or, when the ref's lease is older than that chunk
 * (generation below its made_gen), the chunk the split held before, from
 * the ring of folded chunks. @return false when the ring no longer has it. */
static bool ref_chunk(const job *jb, const sl_master_token_exclude_t *u, uint32_t *path,
                      uint64_t *first)
{
    const split_def *d = &jb->defs[u->split];
    if (u->generation == 0 || u->generation >= d->made_gen) {
        *path = d->path;
        *first = d->first_row;
        return true;
    }
    /* the newest folded occupant of that split made at or below the generation */
    const kfolded *best = NULL;
    for (uint32_t i = 0; jb->ring != NULL && i < jb->ring_len; i++) {
        const kfolded *f = &jb->ring[i];
        if (f->split == u->split && f->made_gen <= u->generation &&
            (best == NULL || f->made_gen > best->made_gen))
            best = f;
    }
    if (best == NULL) return false;
    *path = best->path;
    *first = best->first_row;
    return true;
}

/* pc[0..n), partition p's sorted pieces, minus the undelivered ranges
 * of p (gathered into ex, room for num_und), into out. @return the pieces. */
static size_t minus_undelivered(const job *jb, uint32_t p, const sl_master_token_exclude_t *und,
                                uint32_t num_und, const sl_dpp_row_range_t *pc, size_t n,
                                sl_dpp_row_range_t *ex, sl_dpp_row_range_t *out)
{
    size_t ne = 0;
    for (uint32_t i = 0; i < num_und; i++) {
        const sl_master_token_exclude_t *u = &und[i];
        uint32_t path;
        uint64_t first;
        if (u->epoch != jb->epoch || u->split >= jb->n || u->from_row >= u->to_row ||
            !ref_chunk(jb, u, &path, &first) || path != p)
            continue; /* unplaceable refs: refused before (m_kafka_token_encode) */
        ex[ne++] = (sl_dpp_row_range_t){first + u->from_row, first + u->to_row};
    }
    if (ne > 1) qsort(ex, ne, sizeof *ex, m_by_from);
    return m_ranges_minus(pc, n, ex, ne, out);
}

/* Partition p's delivered offsets, [0, prefix) included, minus the
 * undelivered ranges, into out (room for the chunks' ranges + 1 + num_und
 * pieces; pc has the same room). @return the pieces. */
static size_t delivered(const job *jb, uint32_t p, const sl_master_token_exclude_t *und,
                        uint32_t num_und, sl_dpp_row_range_t *pc, sl_dpp_row_range_t *ex,
                        sl_dpp_row_range_t *out)
{
    const kpart *k = &jb->kp[p];
    size_t n = 0;
    uint64_t base = (uint64_t)m_kafka_done_below(jb, p); /* below the first open chunk */
    if (base > 0) pc[n++] = (sl_dpp_row_range_t){0, base};
    for (uint32_t c = k->low; c < k->nchunks; c++) {
        const split_st *s = &jb->st[k->chunks[c - k->folded]];
        uint64_t first = jb->defs[k->chunks[c - k->folded]].first_row;
        for (uint32_t q = 0; q < s->nr; q++) {
            uint64_t f = first + s->r[q].from_row, t = first + s->r[q].to_row;
            if (n > 0 && pc[n - 1].to_row == f)
                pc[n - 1].to_row = t;
            else
                pc[n++] = (sl_dpp_row_range_t){f, t};
        }
    }
    return minus_undelivered(jb, p, und, num_und, pc, n, ex, out);
}

static int by_split_from(const void *x, const void *y)
{
    const m_attr *a = x, *b = y;
    if (a->split != b->split) return a->split < b->split ? -1 : 1;
    return a->from < b->from ? -1 : a->from > b->from;
}

/* Version 5: partition p's offsets the token's rank handed out from the
 * list floor up: its entries (the master's and the owner's, sorted by
 * from: [nsel]) minus the undelivered ones, into out (room for nsel + 1 +
 * num_und pieces; pc has the same room). @return the pieces. */
static size_t handed(const job *jb, uint32_t p, const m_attr *sel, size_t nsel,
                     const sl_master_token_exclude_t *und, uint32_t num_und, sl_dpp_row_range_t *pc,
                     sl_dpp_row_range_t *ex, sl_dpp_row_range_t *out)
{
    size_t n = 0;
    for (size_t q = 0; q < nsel; q++)
        pc[n++] = (sl_dpp_row_range_t){sel[q].from, sel[q].to};
    size_t w = 0; /* merged: the pieces are disjoint, some touch */
    for (size_t i = 1; i < n; i++) {
        if (pc[i].from_row <= pc[w].to_row) {
            if (pc[i].to_row > pc[w].to_row) pc[w].to_row = pc[i].to_row;
        } else {
            pc[++w] = pc[i];
        }
    }
    if (n > 0) n = w + 1;
    return minus_undelivered(jb, p, und, num_und, pc, n, ex, out);
}

sl_err_t m_kafka_token_encode(const sl_master_state_t *m, const job *jb,
                              const sl_master_token_req_t *req,
                              const sl_master_token_exclude_t *undelivered,
                              uint32_t num_undelivered, void **buf, size_t *len, sl_error_t *err)
{
    const sl_allocator_t *a = m->a;
    uint32_t version =
        req != NULL ? SL_MASTER_KAFKA_RANK_TOKEN_VERSION : SL_MASTER_KAFKA_TOKEN_VERSION;
    uint32_t world = req != NULL && req->world_size ? req->world_size : 1;
    if (req != NULL && (req->rank >= world || world > 65536))
        return sl_error_set(err, SL_ERR_INVALID, "resume token: rank %u of world size %u",
                            req->rank, world);
    /* A ref of a chunk folded and no longer in the ring cannot be placed:
     * counting its offsets as delivered would lose them on resume. */
    for (uint32_t i = 0; i < num_undelivered; i++) {
        const sl_master_token_exclude_t *u = &undelivered[i];
        uint32_t path = 0;
        uint64_t first = 0;
        if (u->epoch == jb->epoch && u->split < jb->n && u->from_row < u->to_row &&
            !ref_chunk(jb, u, &path, &first))
            return sl_error_set(err, SL_ERR_AGAIN,
                                "resume token of job '%s': an undelivered batch (split %u, "
                                "generation %llu) is of a chunk done and folded %u chunks ago or "
                                "more; take the token again once that batch was handed out",
                                jb->id, u->split, (unsigned long long)u->generation,
                                M_KAFKA_FOLDED_RING);
        /* Version 5: every token counts the offsets below the floor as
         * delivered, so a batch there that this rank has not handed out
         * would be lost by the union. */
        if (req != NULL && u->epoch == jb->epoch && u->split < jb->n && u->from_row < u->to_row &&
            first + u->from_row < m_kafka_claim_floor(jb, path))
            return sl_error_set(err, SL_ERR_AGAIN,
                                "resume token of job '%s': an undelivered batch (%s, offsets "
                                "[%llu, %llu)) is of a chunk done more than %d chunks ago; take "
                                "the token again once that batch was handed out",
                                jb->id, jb->paths[path], (unsigned long long)(first + u->from_row),
                                (unsigned long long)(first + u->to_row), M_KAFKA_ATTR_CHUNKS);
    }
    uint32_t owner = M_OWNER_MASTER;
    for (uint32_t k = 0; req != NULL && req->client_id != NULL && k < jb->nowners; k++)
        if (strcmp(jb->owners[k], req->client_id) == 0) owner = k + 1;
    /* Version 5: the master's and the taker's entries, by partition and
     * offset (one sort, not a pass over every entry per partition). */
    const m_attr_list *l = &jb->attr[1];
    size_t nsel = 0, cap_sel = req != NULL ? (size_t)l->n + 1 : 1;
    m_attr *sel = sl_alloc(a, cap_sel * sizeof *sel);
    if (sel == NULL) return sl_error_set(err, SL_ERR_NOMEM, "resume token of job '%s'", jb->id);
    for (uint32_t q = 0; req != NULL && q < l->n; q++)
        if (l->v[q].owner == M_OWNER_MASTER || (owner != M_OWNER_MASTER && l->v[q].owner == owner))
            sel[nsel++] = l->v[q];
    if (nsel > 1) qsort(sel, nsel, sizeof *sel, by_split_from);
    /* Room: per partition its open chunks' ranges, the prefix piece, and
     * one more piece per undelivered range. */
    size_t total = 0, most = 0, at = 0;
    for (uint32_t p = 0; p < jb->nkp; p++) {
        size_t r = 1;
        if (req != NULL) {
            while (at < nsel && sel[at].split == p) {
                at++;
                r++;
            }
        } else {
            for (uint32_t c = jb->kp[p].low; c < jb->kp[p].nchunks; c++)
                r += jb->st[jb->kp[p].chunks[c - jb->kp[p].folded]].nr;
        }
        total += r + num_undelivered;
        if (r > most) most = r;
    }
    most += num_undelivered;
    Sluice__Master__KafkaResumeToken t = SLUICE__MASTER__KAFKA_RESUME_TOKEN__INIT;
    t.version = version;
    t.job_id = jb->id;
    t.n_partitions = jb->nkp;
    if (req != NULL) {
        t.run_id = jb->run_id;
        t.rank = req->rank;
        t.world_size = world;
        t.has_step = req->has_step;
        t.step = req->has_step ? req->step : 0;
    }
    Sluice__Master__KafkaTokenPartition *parts = sl_calloc(a, jb->nkp + 1, sizeof *parts);
    t.partitions = sl_calloc(a, jb->nkp + 1, sizeof *t.partitions);
    int64_t *from = sl_alloc(a, (total + 1) * sizeof *from);
    int64_t *to = sl_alloc(a, (total + 1) * sizeof *to);
    sl_dpp_row_range_t *pc = sl_alloc(a, (most + 1) * sizeof *pc);
    sl_dpp_row_range_t *out = sl_alloc(a, (most + 1) * sizeof *out);
    sl_dpp_row_range_t *ex = sl_alloc(a, ((size_t)num_undelivered + 1) * sizeof *ex);
    uint8_t *tok = NULL;
    sl_err_t rc = SL_OK;
    if (parts == NULL || t.partitions == NULL || from == NULL || to == NULL || pc == NULL ||
        out == NULL || ex == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "resume token of job '%s'", jb->id);
        goto done;
    }
    size_t used = 0, next = 0;
    for (uint32_t p = 0; p < jb->nkp; p++) {
        size_t first = next;
        while (next < nsel && sel[next].split == p)
            next++;
        size_t got = req != NULL ? handed(jb, p, sel + first, next - first, undelivered,
                                          num_undelivered, pc, ex, out)
                                 : delivered(jb, p, undelivered, num_undelivered, pc, ex, out);
        Sluice__Master__KafkaTokenPartition *tp = &parts[p];
        sluice__master__kafka_token_partition__init(tp);
        t.partitions[p] = tp;
        tp->topic = jb->kp[p].topic;
        tp->partition = jb->kp[p].partition;
        size_t q = 0;
        if (req != NULL) {
            /* the claim, and the rank's offsets listed from further down */
            tp->prefix = (int64_t)m_kafka_claim_floor(jb, p);
            tp->listed_from = (int64_t)m_kafka_attr_floor(jb, p);
        } else if (got > 0 && out[0].from_row == 0) {
            tp->prefix = (int64_t)out[q++].to_row;
        }
        tp->range_from = from + used;
        tp->range_to = to + used;
        for (; q < got; q++) {
            from[used] = (int64_t)out[q].from_row;
            to[used] = (int64_t)out[q].to_row;
            used++;
        }
        tp->n_range_from = tp->n_range_to = (size_t)(from + used - tp->range_from);
    }
    size_t pn = sluice__master__kafka_resume_token__get_packed_size(&t);
    tok = sl_alloc(a, M_TOKEN_HEADER_BYTES + pn);
    if (tok == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "resume token of job '%s'", jb->id);
        goto done;
    }
    sluice__master__kafka_resume_token__pack(&t, tok + M_TOKEN_HEADER_BYTES);
    m_token_seal(tok, version, pn);
    *buf = tok;
    *len = M_TOKEN_HEADER_BYTES + pn;
done:
    sl_free(a, parts, (jb->nkp + 1) * sizeof *parts);
    sl_free(a, t.partitions, (jb->nkp + 1) * sizeof *t.partitions);
    sl_free(a, from, (total + 1) * sizeof *from);
    sl_free(a, to, (total + 1) * sizeof *to);
    sl_free(a, pc, (most + 1) * sizeof *pc);
    sl_free(a, out, (most + 1) * sizeof *out);
    sl_free(a, ex, ((size_t)num_undelivered + 1) * sizeof *ex);
    sl_free(a, sel, cap_sel * sizeof *sel);
    return rc;
}

/* ---- resume --------------------------------------------------------------------------- */

/* What the tokens say, against a spec: the spec as a record whose
 * partitions start where the tokens leave them, and the delivered ranges
 * above those starts (index in the spec's partitions). */
typedef struct kplan {
    m_spec_pb sp;
    m_rset acc; /* union over the tokens (one if version 3), split = partition index */
    bool have;
    m_token_who *who; /* [count]: version 5 tokens' takers */
    uint32_t nwho;
    /* version 5, per spec partition [nk]: the lowest prefix (claim) and the
     * highest list floor of the tokens that name it, which tokens, and how
     * many name it */
    int64_t *claim, *listed;
    uint32_t *claim_k, *listed_k, *named;
    size_t nk;
    uint32_t *rpart;
    int64_t *rfrom, *rto;
    size_t nr;
} kplan;

/* out = x union y. */
static bool rset_union(const sl_allocator_t *a, const m_rset *x, const m_rset *y, m_rset *out)
{
    size_t n = x->n + y->n;
    uint32_t *sp = sl_alloc(a, (n + 1) * sizeof *sp);
    uint64_t *f = sl_alloc(a, (n + 1) * sizeof *f), *t = sl_alloc(a, (n + 1) * sizeof *t);
    bool ok = sp != NULL && f != NULL && t != NULL;
    if (ok) {
        if (x->n > 0) {
            memcpy(sp, x->split, x->n * sizeof *sp);
            memcpy(f, x->from, x->n * sizeof *f);
            memcpy(t, x->to, x->n * sizeof *t);
        }
        if (y->n > 0) {
            memcpy(sp + x->n, y->split, y->n * sizeof *sp);
            memcpy(f + x->n, y->from, y->n * sizeof *f);
            memcpy(t + x->n, y->to, y->n * sizeof *t);
        }
        ok = m_rset_of(a, sp, f, t, n, out);
    }
    sl_free(a, sp, (n + 1) * sizeof *sp);
    sl_free(a, f, (n + 1) * sizeof *f);
    sl_free(a, t, (n + 1) * sizeof *t);
    return ok;
}

static void plan_free(const sl_allocator_t *a, kplan *pl)
{
    size_t cap = pl->acc.n + 1; /* as plan_build sized them */
    sl_free(a, pl->who, (size_t)pl->nwho * sizeof *pl->who);
    sl_free(a, pl->claim, (pl->nk + 1) * sizeof *pl->claim);
    sl_free(a, pl->listed, (pl->nk + 1) * sizeof *pl->listed);
    sl_free(a, pl->claim_k, (pl->nk + 1) * sizeof *pl->claim_k);
    sl_free(a, pl->listed_k, (pl->nk + 1) * sizeof *pl->listed_k);
    sl_free(a, pl->named, (pl->nk + 1) * sizeof *pl->named);
    m_spec_pb_free(&pl->sp);
    if (pl->have) m_rset_free(a, &pl->acc);
    sl_free(a, pl->rpart, cap * sizeof *pl->rpart);
    sl_free(a, pl->rfrom, cap * sizeof *pl->rfrom);
    sl_free(a, pl->rto, cap * sizeof *pl->rto);
}

/* Index of (topic, partition) among spec's partitions, or -1. An open
 * addressing table of hcap slots (partition index + 1). */
static uint64_t part_hash(const char *topic, int32_t partition)
{
    return XXH3_64bits_withSeed(topic, strlen(topic), (uint64_t)(uint32_t)partition);
}

static int64_t part_find(const Sluice__Master__JobSpec *spec, const uint32_t *h, size_t hcap,
                         const char *topic, int32_t partition)
{
    for (size_t i = part_hash(topic, partition) & (hcap - 1); h[i] != 0; i = (i + 1) & (hcap - 1)) {
        const Sluice__Master__KafkaPartition *p = spec->kafka_partitions[h[i] - 1];
        if (p->partition == partition && strcmp(p->topic, topic) == 0) return h[i] - 1;
    }
    return -1;
}

/* One token's delivered offsets as an rset (split = spec partition):
 * version 3, its prefix and ranges; version 5 (pl->claim set), its ranges
 * only, its prefix and list floor noted in pl for plan_build (token k). */
static sl_err_t token_set(const sl_allocator_t *a, const Sluice__Master__KafkaResumeToken *t,
                          const Sluice__Master__JobSpec *spec, const uint32_t *h, size_t hcap,
                          kplan *pl, uint32_t tk, m_rset *one, sl_error_t *err)
{
    size_t n = 0;
    bool v5 = pl->claim != NULL;
    for (size_t i = 0; i < t->n_partitions; i++) {
        const Sluice__Master__KafkaTokenPartition *tp = t->partitions[i];
        if (tp->topic == NULL || tp->prefix < 0 || tp->n_range_from != tp->n_range_to ||
            (v5 && (tp->listed_from < 0 || tp->listed_from > tp->prefix)))
            return sl_error_set(err, SL_ERR_CORRUPT, "resume token: partition %zu malformed", i);
        n += 1 + tp->n_range_from;
    }
    uint32_t *sp = sl_alloc(a, (n + 1) * sizeof *sp);
    uint64_t *f = sl_alloc(a, (n + 1) * sizeof *f), *to = sl_alloc(a, (n + 1) * sizeof *to);
    sl_err_t rc = SL_OK;
    if (sp == NULL || f == NULL || to == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "resume token");
    size_t k = 0;
    for (size_t i = 0; rc == SL_OK && i < t->n_partitions; i++) {
        const Sluice__Master__KafkaTokenPartition *tp = t->partitions[i];
        int64_t q = part_find(spec, h, hcap, tp->topic, tp->partition);
        if (q < 0) {
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "resume token names %.249s/%d, which job '%s' does not read",
                              tp->topic, tp->partition, spec->job_id);
            break;
        }
        if (v5) {
            pl->named[q]++;
            if (tp->prefix < pl->claim[q]) {
                pl->claim[q] = tp->prefix;
                pl->claim_k[q] = tk;
            }
            if (tp->listed_from > pl->listed[q]) {
                pl->listed[q] = tp->listed_from;
                pl->listed_k[q] = tk;
            }
        } else if (tp->prefix > 0) {
            sp[k] = (uint32_t)q;
            f[k] = 0;
            to[k++] = (uint64_t)tp->prefix;
        }
        for (size_t r = 0; r < tp->n_range_from; r++) {
            if (tp->range_from[r] < 0 || tp->range_from[r] >= tp->range_to[r]) {
                rc = sl_error_set(err, SL_ERR_CORRUPT, "resume token: %s/%d range %zu is empty",
                                  tp->topic, tp->partition, r);
                break;
            }
            sp[k] = (uint32_t)q;
            f[k] = (uint64_t)tp->range_from[r];
            to[k++] = (uint64_t)tp->range_to[r];
        }
    }
    if (rc == SL_OK && !m_rset_of(a, sp, f, to, k, one))
        rc = sl_error_set(err, SL_ERR_NOMEM, "resume token");
    sl_free(a, sp, (n + 1) * sizeof *sp);
    sl_free(a, f, (n + 1) * sizeof *f);
    sl_free(a, to, (n + 1) * sizeof *to);
    return rc;
}

/* Open token k (checked against spec) and add it to pl->acc. */
static sl_err_t plan_token(const sl_master_state_t *m, kplan *pl, uint32_t k, const void *token,
                           size_t len, const uint32_t *h, size_t hcap, sl_error_t *err)
{
    const Sluice__Master__JobSpec *spec = &pl->sp.spec;
    uint32_t version;
    sl_err_t rc = m_token_check(token, len, &version, err);
    if (rc != SL_OK) return rc;
    if (version == SL_MASTER_RESUME_TOKEN_VERSION || version == SL_MASTER_RANK_TOKEN_VERSION)
        return sl_error_set(err, SL_ERR_INVALID,
                            "resume token of a table job (version %u); job '%s' reads Kafka",
                            version, spec->job_id);
    if (version != SL_MASTER_KAFKA_TOKEN_VERSION && version != SL_MASTER_KAFKA_RANK_TOKEN_VERSION)
        return sl_error_set(err, SL_ERR_VERSION,
                            "resume token version %u (this build reads %d, %d, %d, %d)", version,
                            SL_MASTER_RESUME_TOKEN_VERSION, SL_MASTER_KAFKA_TOKEN_VERSION,
                            SL_MASTER_RANK_TOKEN_VERSION, SL_MASTER_KAFKA_RANK_TOKEN_VERSION);
    sl_unsized_t u = {.a = m->a};
    ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
    Sluice__Master__KafkaResumeToken *t = sluice__master__kafka_resume_token__unpack(
        &pa, len - M_TOKEN_HEADER_BYTES, (const uint8_t *)token + M_TOKEN_HEADER_BYTES);
    if (t == NULL)
        return u.failed ? sl_error_set(err, SL_ERR_NOMEM, "resume token: out of memory")
                        : sl_error_set(err, SL_ERR_CORRUPT, "resume token: malformed protobuf");
    if (t->version != version)
        rc = sl_error_set(err, SL_ERR_VERSION, "resume token version %u", t->version);
    else if (t->job_id == NULL || strcmp(t->job_id, spec->job_id) != 0)
        rc = sl_error_set(err, SL_ERR_INVALID, "resume token of job '%s', not of job '%s'",
                          t->job_id ? t->job_id : "", spec->job_id);
    else if (version == SL_MASTER_KAFKA_RANK_TOKEN_VERSION &&
             (t->world_size == 0 || t->world_size > 65536 || t->rank >= t->world_size))
        rc = sl_error_set(err, SL_ERR_CORRUPT, "resume token: rank %u of world size %u", t->rank,
                          t->world_size);
    if (rc == SL_OK && version == SL_MASTER_KAFKA_RANK_TOKEN_VERSION && k < pl->nwho)
        pl->who[k] = (m_token_who){t->run_id, t->world_size, t->rank, t->has_step, t->step};
    m_rset one = {0}, both;
    if (rc == SL_OK) rc = token_set(m->a, t, spec, h, hcap, pl, k, &one, err);
    sluice__master__kafka_resume_token__free_unpacked(t, &pa);
    if (rc != SL_OK) return rc;
    if (!pl->have) {
        pl->acc = one;
        pl->have = true;
        return SL_OK;
    }
    /* Version 5: each token is what its rank handed out (plus the master's
     * offsets), so what the checkpoint delivered is their union. */
    bool ok = rset_union(m->a, &pl->acc, &one, &both);
    m_rset_free(m->a, &one);
    if (!ok) return sl_error_set(err, SL_ERR_NOMEM, "resume tokens");
    m_rset_free(m->a, &pl->acc);
    pl->acc = both;
    return SL_OK;
}

/* Version 5: per partition, every offset below the lowest prefix of the
 * tokens counts as delivered (each rank's own batches there were handed
 * out, or its token was refused), and above it what some token lists
 * (its rank's and the master's). That is exact only if every token lists
 * its offsets from that prefix down: a token whose list floor is above
 * another's prefix (the partition folded more than M_KAFKA_ATTR_CHUNKS
 * chunks between the two) is refused. A token that does not name a
 * partition (added after it was taken) claims nothing of it. */
static sl_err_t claims(const sl_allocator_t *a, kplan *pl, uint32_t count, sl_error_t *err)
{
    const Sluice__Master__JobSpec *s = &pl->sp.spec;
    uint32_t *sp = sl_alloc(a, (pl->nk + 1) * sizeof *sp);
    uint64_t *f = sl_alloc(a, (pl->nk + 1) * sizeof *f), *t = sl_alloc(a, (pl->nk + 1) * sizeof *t);
    sl_err_t rc = SL_OK;
    if (sp == NULL || f == NULL || t == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "resume tokens");
    size_t n = 0;
    for (size_t q = 0; rc == SL_OK && q < pl->nk; q++) {
        const Sluice__Master__KafkaPartition *kp = s->kafka_partitions[q];
        if (pl->named[q] == 0) continue;
        bool all = pl->named[q] == count;
        int64_t claim = pl->claim[q];
        if (!all && kp->start < claim) claim = kp->start;
        if (pl->listed[q] > claim) {
            char who[64];
            if (all || pl->claim[q] <= kp->start)
                snprintf(who, sizeof who, "token %u's prefix %lld", pl->claim_k[q] + 1,
                         (long long)claim);
            else
                snprintf(who, sizeof who, "the start %lld of a token that does not name it",
                         (long long)claim);
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "token %u of %u lists %s/%d from offset %lld, above %s: the "
                              "partition moved more than %d chunks between the checkpoint's "
                              "tokens; take them closer together",
                              pl->listed_k[q] + 1, count, kp->topic, kp->partition,
                              (long long)pl->listed[q], who, M_KAFKA_ATTR_CHUNKS);
            break;
        }
        if (claim > 0) {
            sp[n] = (uint32_t)q;
            f[n] = 0;
            t[n++] = (uint64_t)claim;
        }
    }
    m_rset below = {0}, both;
    if (rc == SL_OK && !m_rset_of(a, sp, f, t, n, &below))
        rc = sl_error_set(err, SL_ERR_NOMEM, "resume tokens");
    if (rc == SL_OK && pl->have) {
        if (!rset_union(a, &pl->acc, &below, &both)) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "resume tokens");
        } else {
            m_rset_free(a, &pl->acc);
            pl->acc = both;
        }
        m_rset_free(a, &below);
    } else if (rc == SL_OK) {
        pl->acc = below;
        pl->have = true;
    }
    sl_free(a, sp, (pl->nk + 1) * sizeof *sp);
    sl_free(a, f, (pl->nk + 1) * sizeof *f);
    sl_free(a, t, (pl->nk + 1) * sizeof *t);
    return rc;
}

/* Build the plan: every token checked and met, each partition's start and
 * the delivered ranges above it. */
static sl_err_t plan_build(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                           const void *const *tokens, const size_t *lens, uint32_t count, kplan *pl,
                           sl_error_t *err)
{
    memset(pl, 0, sizeof *pl);
    if (count == 0 || count > SL_MASTER_MAX_RESUME_TOKENS)
        return sl_error_set(err, SL_ERR_INVALID, "resume: %u tokens (1..%d)", count,
                            SL_MASTER_MAX_RESUME_TOKENS);
    sl_err_t rc = m_spec_pb_build(m, spec, &pl->sp, err);
    if (rc == SL_OK) rc = m_check_spec(m, &pl->sp.spec, err);
    if (rc != SL_OK) return rc;
    const Sluice__Master__JobSpec *s = &pl->sp.spec;
    size_t hcap = 16;
    while (hcap < 2 * s->n_kafka_partitions)
        hcap *= 2;
    uint32_t *h = sl_calloc(m->a, hcap, sizeof *h);
    if (h == NULL) return sl_error_set(err, SL_ERR_NOMEM, "resume: partitions");
    for (size_t q = 0; q < s->n_kafka_partitions; q++) {
        const Sluice__Master__KafkaPartition *p = s->kafka_partitions[q];
        size_t i = part_hash(p->topic, p->partition) & (hcap - 1);
        while (h[i] != 0)
            i = (i + 1) & (hcap - 1);
        h[i] = (uint32_t)q + 1;
    }
    /* Version 5 (one per rank, combined by union) or one version-3 token:
     * several version-3 tokens were intersected, exact only when every
     * offset a rank trained was committed before every other rank's token. */
    uint32_t v5 = 0;
    for (uint32_t k = 0; rc == SL_OK && k < count; k++) {
        uint32_t version;
        rc = m_token_check(tokens[k], lens[k], &version, err);
        if (rc != SL_OK && count > 1) sl_error_prefix(err, "token %u of %u: ", k + 1, count);
        v5 += version == SL_MASTER_KAFKA_RANK_TOKEN_VERSION;
    }
    if (rc == SL_OK && v5 > 0 && v5 < count)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "resume: %u of %u tokens are of version %d, the others older: take "
                          "every rank's token again",
                          v5, count, SL_MASTER_KAFKA_RANK_TOKEN_VERSION);
    else if (rc == SL_OK && v5 == 0 && count > 1)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "resume: %u version-3 tokens: tokens of that version cannot be "
                          "combined exactly across ranks (one rank's records may be trained "
                          "twice); take new tokens (version %d, one per rank) or resume from one",
                          count, SL_MASTER_KAFKA_RANK_TOKEN_VERSION);
    if (rc == SL_OK && v5 > 0) {
        pl->who = sl_calloc(m->a, count, sizeof *pl->who);
        pl->nwho = pl->who != NULL ? count : 0;
        pl->nk = s->n_kafka_partitions;
        pl->claim = sl_alloc(m->a, (pl->nk + 1) * sizeof *pl->claim);
        pl->listed = sl_calloc(m->a, pl->nk + 1, sizeof *pl->listed);
        pl->claim_k = sl_calloc(m->a, pl->nk + 1, sizeof *pl->claim_k);
        pl->listed_k = sl_calloc(m->a, pl->nk + 1, sizeof *pl->listed_k);
        pl->named = sl_calloc(m->a, pl->nk + 1, sizeof *pl->named);
        if (pl->who == NULL || pl->claim == NULL || pl->listed == NULL || pl->claim_k == NULL ||
            pl->listed_k == NULL || pl->named == NULL)
            rc = sl_error_set(err, SL_ERR_NOMEM, "resume: %u tokens", count);
        for (size_t q = 0; rc == SL_OK && q < pl->nk; q++)
            pl->claim[q] = INT64_MAX;
    }
    for (uint32_t k = 0; rc == SL_OK && k < count; k++) {
        rc = plan_token(m, pl, k, tokens[k], lens[k], h, hcap, err);
        if (rc != SL_OK && count > 1) sl_error_prefix(err, "token %u of %u: ", k + 1, count);
    }
    if (rc == SL_OK && v5 > 0) rc = m_token_who_check(m->a, pl->who, count, s->job_id, err);
    if (rc == SL_OK && v5 > 0) rc = claims(m->a, pl, count, err);
    sl_free(m->a, h, hcap * sizeof *h);
    if (rc != SL_OK) return rc;
    size_t cap = pl->acc.n + 1;
    pl->rpart = sl_alloc(m->a, cap * sizeof *pl->rpart);
    pl->rfrom = sl_alloc(m->a, cap * sizeof *pl->rfrom);
    pl->rto = sl_alloc(m->a, cap * sizeof *pl->rto);
    if (pl->rpart == NULL || pl->rfrom == NULL || pl->rto == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "resume: ranges");
    /* A partition starts at the end of the delivered offsets' first range
     * (from 0); one the tokens do not name where the spec says. Ranges
     * above the start only. */
    const m_rset *r = &pl->acc;
    size_t i = 0;
    for (uint32_t q = 0; q < s->n_kafka_partitions; q++) {
        Sluice__Master__KafkaPartition *p = &pl->sp.kparts[q];
        while (i < r->n && r->split[i] < q)
            i++;
        if (i < r->n && r->split[i] == q && r->from[i] == 0) p->start = (int64_t)r->to[i++];
        if (p->stop >= 0 && p->start > p->stop) p->start = p->stop;
        for (; i < r->n && r->split[i] == q; i++) {
            int64_t f = (int64_t)r->from[i], t = (int64_t)r->to[i];
            if (f < p->start) f = p->start;
            if (p->stop >= 0 && t > p->stop) t = p->stop;
            if (f >= t) continue;
            pl->rpart[pl->nr] = q;
            pl->rfrom[pl->nr] = f;
            pl->rto[pl->nr] = t;
            pl->nr++;
        }
    }
    return SL_OK;
}

sl_err_t sl_master_state_kafka_token_needs(sl_master_state_t *m,
                                           const sl_master_state_job_spec_t *spec,
                                           const void *const *tokens, const size_t *lens,
                                           uint32_t count, int64_t *needed, sl_error_t *err)
{
    if (spec->kafka_chunk == 0)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s' reads a table, not Kafka",
                            spec->job_id ? spec->job_id : "");
    kplan pl;
    sl_err_t rc = plan_build(m, spec, tokens, lens, count, &pl, err);
    for (size_t q = 0; rc == SL_OK && q < pl.sp.nk; q++)
        needed[q] = pl.sp.kparts[q].start;
    plan_free(m->a, &pl);
    return rc;
}

sl_err_t m_kafka_resume(sl_master_state_t *m, const sl_master_state_job_spec_t *spec,
                        const void *const *tokens, const size_t *lens, uint32_t count, bool replace,
                        sl_error_t *err)
{
    kplan pl;
    sl_err_t rc = plan_build(m, spec, tokens, lens, count, &pl, err);
    if (rc == SL_OK) {
        Sluice__Master__JobAdded ja = SLUICE__MASTER__JOB_ADDED__INIT;
        ja.spec = &pl.sp.spec;
        ja.run_id = m_new_run_id(m, spec->job_id);
        ja.n_kafka_range_partition = ja.n_kafka_range_from = ja.n_kafka_range_to = pl.nr;
        ja.kafka_range_partition = pl.rpart;
        ja.kafka_range_from = pl.rfrom;
        ja.kafka_range_to = pl.rto;
        rc = m_journal_and_add(m, &ja, replace, err);
    }
    plan_free(m->a, &pl);
    return rc;
}

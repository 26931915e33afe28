/* Kafka jobs in the master's state (state.h, "Kafka jobs"; docs/DESIGN.md
 * "Kafka: offsets are rows"): a job described by partitions instead of a
 * split list, whose splits are chunks of those partitions made as they are
 * needed (KafkaChunksAdded), partitions that join while it runs
 * (KafkaPartitionAdded), the per-partition positions, and resume tokens
 * over partitions (version 3). Everything else about a chunk — leases,
 * commits, split reads, expiry, the journal — is the table machinery: a
 * chunk is a split whose row r is offset first_row + r. Callers hold the
 * master's lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/err.h"
#include "dpp/master/state/state_internal.h"
#include "kafka/chunk_bounds.h"

#define CHUNK_MAX (1u << 31)

/* Kafka's legal topic names: 1..249 of [a-zA-Z0-9._-]. */
static bool topic_ok(const char *t)
{
    size_t n = t != NULL ? strlen(t) : 0;
    if (n == 0 || n > 249) return false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

static sl_err_t partition_check(const char *job_id, const char *topic, int32_t partition,
                                int64_t start, int64_t stop, sl_error_t *err)
{
    if (!topic_ok(topic))
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': Kafka topic '%.64s': 1..249 bytes of [a-zA-Z0-9._-]", job_id,
                            topic ? topic : "");
    if (partition < 0 || start < 0 || (stop != -1 && stop < start))
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': %s/%d: partition >= 0, start >= 0, stop -1 (a stream) or "
                            ">= start (start %lld, stop %lld)",
                            job_id, topic, partition, (long long)start, (long long)stop);
    return SL_OK;
}

sl_err_t m_kafka_check_spec(const sl_master_state_t *m, const Sluice__Master__JobSpec *spec,
                            sl_error_t *err)
{
    const char *id = spec->job_id;
    const Sluice__Master__SplitList *l = spec->splits;
    size_t n = l->n_path_index, np = spec->n_kafka_partitions;
    if (spec->kafka_chunk > CHUNK_MAX)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': chunk of %u offsets (1..2^31)", id,
                            spec->kafka_chunk);
    if (spec->epochs != 1)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': a Kafka job read chunk by chunk has one epoch (%u asked; a "
                            "bounded replay of several epochs is a fixed split list)",
                            id, spec->epochs);
    if (spec->shuffle)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': shuffle is refused for a Kafka job: its chunks are made as "
                            "the partitions grow, there is no split list to permute",
                            id);
    if (spec->static_sharding && spec->ranks > 1)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': static sharding is refused for a Kafka job: a split list "
                            "that grows has no fixed share per rank",
                            id);
    if (np == 0)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': a Kafka job without partitions", id);
    if (np > SL_MASTER_MAX_KAFKA_PARTITIONS)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': %zu Kafka partitions (at most %d)",
                            id, np, SL_MASTER_MAX_KAFKA_PARTITIONS);
    if (n > m->opts.max_splits)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': %zu chunks (max_splits %u)", id, n,
                            m->opts.max_splits);
    if (l->n_stripe_begin != n || l->n_stripe_end != n || l->n_first_row != n ||
        l->n_num_rows != n || l->n_paths != 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': chunk columns of unequal length, or paths", id);
    for (size_t i = 0; i < np; i++) {
        const Sluice__Master__KafkaPartition *p = spec->kafka_partitions[i];
        SL_FORWARD_IF_ERROR(partition_check(id, p->topic, p->partition, p->start, p->stop, err));
    }
    for (size_t i = 0; i < n; i++)
        if (l->path_index[i] >= np)
            return sl_error_set(err, SL_ERR_INVALID, "job '%s' chunk %zu: no partition %u", id, i,
                                l->path_index[i]);
    return SL_OK;
}

/* ---- room ---------------------------------------------------------------------------- */

/* Room for `more` splits: SL_ERR_NOMEM changes nothing but the capacity.
 * Free splits (of folded chunks) are taken first: only the rest is new. */
static sl_err_t reserve_splits(sl_master_state_t *m, job *jb, uint64_t more, sl_error_t *err)
{
    more = more > jb->nfree ? more - jb->nfree : 0;
    if (jb->n + more > m->opts.max_splits)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': %llu chunks (max_splits %u)", jb->id,
                            (unsigned long long)(jb->n + more), m->opts.max_splits);
    if (jb->n + more <= jb->cap) return SL_OK;
    uint64_t cap = (uint64_t)jb->cap * 2;
    if (cap < jb->n + more) cap = jb->n + more;
    if (cap > m->opts.max_splits) cap = m->opts.max_splits;
    const sl_allocator_t *a = m->a;
    size_t c = (size_t)cap;
    split_def *defs = sl_alloc(a, sl_mul_size(c, sizeof *defs));
    split_st *st = sl_calloc(a, c, sizeof *st);
    uint32_t *order = sl_alloc(a, sl_mul_size(c, sizeof *order));
    uint32_t *pos = sl_alloc(a, sl_mul_size(c, sizeof *pos));
    uint32_t *heap = sl_alloc(a, sl_mul_size(c, sizeof *heap));
    uint32_t *fr = sl_alloc(a, sl_mul_size(c, sizeof *fr));
    if (defs == NULL || st == NULL || order == NULL || pos == NULL || heap == NULL || fr == NULL) {
        sl_free(a, defs, c * sizeof *defs);
        sl_free(a, st, c * sizeof *st);
        sl_free(a, order, c * sizeof *order);
        sl_free(a, pos, c * sizeof *pos);
        sl_free(a, heap, c * sizeof *heap);
        sl_free(a, fr, c * sizeof *fr);
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': room for %zu chunks", jb->id, c);
    }
    if (jb->nfree > 0) memcpy(fr, jb->free, (size_t)jb->nfree * sizeof *fr);
    sl_free(a, jb->free, (size_t)jb->cap * sizeof *fr);
    jb->free = fr;
    memcpy(defs, jb->defs, (size_t)jb->n * sizeof *defs);
    memcpy(st, jb->st, (size_t)jb->n * sizeof *st);
    memcpy(order, jb->order, (size_t)jb->n * sizeof *order);
    memcpy(pos, jb->pos, (size_t)jb->n * sizeof *pos);
    memcpy(heap, jb->heap, (size_t)jb->heap_len * sizeof *heap);
    sl_free(a, jb->defs, (size_t)jb->cap * sizeof *defs);
    sl_free(a, jb->st, (size_t)jb->cap * sizeof *st);
    sl_free(a, jb->order, (size_t)jb->cap * sizeof *order);
    sl_free(a, jb->pos, (size_t)jb->cap * sizeof *pos);
    sl_free(a, jb->heap, (size_t)jb->cap * sizeof *heap);
    jb->defs = defs;
    jb->st = st;
    jb->order = order;
    jb->pos = pos;
    jb->heap = heap;
    jb->cap = (uint32_t)c;
    return SL_OK;
}

/* Room for `more` chunks in partition p's chunk list. */
static sl_err_t reserve_chunks(sl_master_state_t *m, job *jb, uint32_t p, uint64_t more,
                               sl_error_t *err)
{
    kpart *k = &jb->kp[p];
    uint64_t have = k->nchunks - k->folded; /* chunks held (not folded) */
    if (have + more <= k->cap) return SL_OK;
    uint64_t cap = k->cap ? (uint64_t)k->cap * 2 : 4;
    if (cap < have + more) cap = have + more;
    if (cap > UINT32_MAX)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s' %s: chunks", jb->id, jb->paths[p]);
    uint32_t *c = sl_realloc(m->a, k->chunks, (size_t)k->cap * sizeof *c, (size_t)cap * sizeof *c);
    if (c == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s' %s: chunks", jb->id, jb->paths[p]);
    k->chunks = c;
    k->cap = (uint32_t)cap;
    return SL_OK;
}

/* Room for `more` partitions (kp and paths). */
static sl_err_t reserve_parts(sl_master_state_t *m, job *jb, uint32_t more, sl_error_t *err)
{
    if ((uint64_t)jb->nkp + more <= jb->kp_cap) return SL_OK;
    uint32_t cap = jb->kp_cap ? jb->kp_cap * 2 : 4;
    if (cap < jb->nkp + more) cap = jb->nkp + more;
    kpart *kp = sl_calloc(m->a, cap, sizeof *kp);
    char **paths = sl_calloc(m->a, cap, sizeof *paths);
    if (kp == NULL || paths == NULL) {
        sl_free(m->a, kp, (size_t)cap * sizeof *kp);
        sl_free(m->a, paths, (size_t)cap * sizeof *paths);
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': %u partitions", jb->id, cap);
    }
    if (jb->nkp > 0) {
        memcpy(kp, jb->kp, (size_t)jb->nkp * sizeof *kp);
        memcpy(paths, jb->paths, (size_t)jb->nkp * sizeof *paths);
    }
    sl_free(m->a, jb->kp, (size_t)jb->kp_cap * sizeof *kp);
    sl_free(m->a, jb->paths, (size_t)jb->kp_cap * sizeof *paths);
    jb->kp = kp;
    jb->paths = paths;
    jb->kp_cap = cap;
    return SL_OK;
}

/* ---- partitions and chunks ---------------------------------------------------------- */

static bool next_chunk(const job *jb, uint32_t p, int64_t *from, int64_t *to)
{
    const kpart *k = &jb->kp[p];
    return sl_kafka_chunk_bounds(k->start, jb->chunk, k->nchunks, k->stop, from, to);
}

/* Make partition p's next chunk (room reserved, the chunk exists: cannot
 * fail), PENDING: in the lowest free split (of a folded chunk, which goes
 * to the ring), else as split n, last in the (identity) order. */
static void add_chunk(sl_master_state_t *m, job *jb, uint32_t p)
{
    int64_t f = 0, t = 0;
    next_chunk(jb, p, &f, &t);
    kpart *k = &jb->kp[p];
    uint32_t i;
    split_def d = {p, 0, 0, (uint64_t)f, (uint64_t)(t - f), m->next_generation};
    if (jb->nfree > 0) {
        i = jb->free[0];
        memmove(jb->free, jb->free + 1, (size_t)(--jb->nfree) * sizeof *jb->free);
        if (jb->ring != NULL) {
            const split_def *old = &jb->defs[i];
            jb->ring[jb->ring_next] = (kfolded){i, old->path, old->made_gen, old->first_row};
            jb->ring_next = (jb->ring_next + 1) % M_KAFKA_FOLDED_RING;
            if (jb->ring_len < M_KAFKA_FOLDED_RING) jb->ring_len++;
        }
        uint8_t in_heap = jb->st[i].in_heap; /* a stale entry may still be there */
        /* the job's rows count the chunks its splits hold (as a snapshot's) */
        jb->committed_rows -= jb->st[i].committed;
        jb->total_rows -= jb->defs[i].num_rows;
        jb->split_failures -= jb->st[i].failures;
        m_free_ranges(m->a, &jb->st[i]);
        jb->defs[i] = d;
        jb->st[i] =
            (split_st){.worker = NO_WORKER, .state = SL_MASTER_SPLIT_PENDING, .in_heap = in_heap};
        jb->count[SL_MASTER_SPLIT_DONE]--; /* a free split counts as DONE */
        jb->count[SL_MASTER_SPLIT_PENDING]++;
        m_queue_pending(jb, i); /* behind the cursor: queued like an expired lease */
    } else {
        i = jb->n++;
        jb->defs[i] = d;
        jb->st[i] = (split_st){.worker = NO_WORKER, .state = SL_MASTER_SPLIT_PENDING};
        jb->order[i] = i;
        jb->pos[i] = i;
        jb->count[SL_MASTER_SPLIT_PENDING]++;
    }
    jb->total_rows += (uint64_t)(t - f);
    k->chunks[k->nchunks++ - k->folded] = i;
    k->pending++;
    k->open++;
}

const kfolded *m_kafka_folded_at(const job *jb, uint32_t q)
{
    uint32_t oldest = jb->ring_len < M_KAFKA_FOLDED_RING ? 0 : jb->ring_next;
    return &jb->ring[(oldest + q) % M_KAFKA_FOLDED_RING];
}

void m_kafka_fold(job *jb, uint32_t p)
{
    kpart *k = &jb->kp[p];
    if (k->stop >= 0 || k->low <= k->folded) return; /* a bounded partition keeps its chunks */
    uint32_t n = k->low - k->folded;
    for (uint32_t c = 0; c < n; c++) {
        /* into the ascending free list (room: it has the splits' capacity) */
        uint32_t s = k->chunks[c], at = jb->nfree;
        while (at > 0 && jb->free[at - 1] > s)
            at--;
        memmove(jb->free + at + 1, jb->free + at, (size_t)(jb->nfree - at) * sizeof *jb->free);
        jb->free[at] = s;
        jb->nfree++;
    }
    memmove(k->chunks, k->chunks + n, (size_t)(k->nchunks - k->low) * sizeof *k->chunks);
    k->folded = k->low;
    m_attr_kafka_prune(jb, p);
}

/* Partition (topic, partition) joins jb: copies made first, so that only
 * SL_ERR_NOMEM with nothing changed or success. */
/* Add partition (topic, partition) to jb. t and path: its copies made
 * beforehand (owned from now on), or NULL to make them here. */
static sl_err_t link_partition(sl_master_state_t *m, job *jb, const char *topic, int32_t partition,
                               int64_t start, int64_t stop, char *t, char *path, sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(reserve_parts(m, jb, 1, err));
    if (t == NULL) t = sl_strdup(m->a, topic);
    if (path == NULL) path = sl_strfmt(m->a, "%s/%d", topic, partition);
    if (t == NULL || path == NULL) {
        sl_strfree(m->a, t);
        sl_strfree(m->a, path);
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': partition %s/%d", jb->id, topic,
                            partition);
    }
    jb->kp[jb->nkp] =
        (kpart){.topic = t, .partition = partition, .start = start, .stop = stop, .high = -1};
    jb->paths[jb->nkp] = path;
    jb->nkp++;
    jb->num_paths = jb->nkp;
    return SL_OK;
}

static int kp_cmp(const void *x, const void *y)
{
    const kpart *a = *(const kpart *const *)x, *b = *(const kpart *const *)y;
    int c = strcmp(a->topic, b->topic);
    return c != 0 ? c : (a->partition > b->partition) - (a->partition < b->partition);
}

/* A partition named twice: SL_ERR_INVALID. */
static sl_err_t unique_partitions(sl_master_state_t *m, const job *jb, sl_error_t *err)
{
    if (jb->nkp < 2) return SL_OK;
    const kpart **v = sl_alloc(m->a, (size_t)jb->nkp * sizeof *v);
    if (v == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': partitions", jb->id);
    for (uint32_t i = 0; i < jb->nkp; i++)
        v[i] = &jb->kp[i];
    qsort(v, jb->nkp, sizeof *v, kp_cmp);
    sl_err_t rc = SL_OK;
    for (uint32_t i = 1; rc == SL_OK && i < jb->nkp; i++)
        if (kp_cmp(&v[i - 1], &v[i]) == 0)
            rc = sl_error_set(err, SL_ERR_INVALID, "job '%s': partition %s/%d named twice", jb->id,
                              v[i]->topic, v[i]->partition);
    sl_free(m->a, v, (size_t)jb->nkp * sizeof *v);
    return rc;
}

sl_err_t m_kafka_build(sl_master_state_t *m, job *jb, const Sluice__Master__JobAdded *rec,
                       sl_error_t *err)
{
    const Sluice__Master__JobSpec *spec = rec->spec;
    jb->chunk = spec->kafka_chunk;
    sl_err_t rc = reserve_parts(m, jb, (uint32_t)spec->n_kafka_partitions, err);
    for (size_t i = 0; rc == SL_OK && i < spec->n_kafka_partitions; i++) {
        const Sluice__Master__KafkaPartition *p = spec->kafka_partitions[i];
        rc = link_partition(m, jb, p->topic, p->partition, p->start, p->stop, NULL, NULL, err);
    }
    if (rc == SL_OK) rc = unique_partitions(m, jb, err);
    if (rc == SL_OK && (jb->ring = sl_calloc(m->a, M_KAFKA_FOLDED_RING, sizeof *jb->ring)) == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "job '%s': folded chunks", jb->id);
    if (rc == SL_OK && jb->cap > 0 &&
        (jb->free = sl_alloc(m->a, sl_mul_size(jb->cap, sizeof *jb->free))) == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "job '%s': free splits", jb->id);
    /* The chunks of the split list (a snapshot's: in any order, a folded
     * partition's free splits holding a chunk below its folded count),
     * each checked against its bounds. */
    for (size_t i = 0; rc == SL_OK && i < spec->n_kafka_partitions; i++) {
        kpart *k = &jb->kp[i];
        k->folded = k->nchunks = spec->kafka_partitions[i]->folded;
        if (k->folded > 0 && k->stop >= 0)
            rc = sl_error_set(err, SL_ERR_INVALID, "job '%s' %s: a bounded partition folded",
                              jb->id, jb->paths[i]);
    }
    for (uint32_t i = 0; rc == SL_OK && i < jb->n; i++) {
        const split_def *d = &jb->defs[i];
        kpart *k = &jb->kp[d->path];
        uint64_t c = d->first_row >= (uint64_t)k->start
                         ? (d->first_row - (uint64_t)k->start) / jb->chunk
                         : UINT64_MAX;
        int64_t f, t;
        if (c >= UINT32_MAX || !sl_kafka_chunk_bounds(k->start, jb->chunk, c, k->stop, &f, &t) ||
            (uint64_t)f != d->first_row || (uint64_t)(t - f) != d->num_rows ||
            d->stripe_begin != 0 || d->stripe_end != 0)
            return sl_error_set(err, SL_ERR_INVALID, "job '%s' split %u is no chunk of %s", jb->id,
                                i, jb->paths[d->path]);
        if (c < k->folded)
            jb->free[jb->nfree++] = i; /* ascending: i ascends */
        else if (c + 1 > k->nchunks)
            k->nchunks = (uint32_t)c + 1; /* counted, then room for them */
    }
    for (uint32_t p = 0; rc == SL_OK && p < jb->nkp; p++) {
        uint32_t nc = jb->kp[p].nchunks;
        jb->kp[p].nchunks = jb->kp[p].folded;
        rc = reserve_chunks(m, jb, p, nc - jb->kp[p].folded, err);
        jb->kp[p].nchunks = nc;
        for (uint32_t c = 0; rc == SL_OK && c < nc - jb->kp[p].folded; c++)
            jb->kp[p].chunks[c] = UINT32_MAX;
    }
    for (uint32_t i = 0; rc == SL_OK && i < jb->n; i++) {
        const split_def *d = &jb->defs[i];
        kpart *k = &jb->kp[d->path];
        uint64_t c = (d->first_row - (uint64_t)k->start) / jb->chunk;
        if (c < k->folded) continue;
        if (k->chunks[c - k->folded] != UINT32_MAX)
            return sl_error_set(err, SL_ERR_INVALID, "job '%s': chunk %llu of %s twice", jb->id,
                                (unsigned long long)c, jb->paths[d->path]);
        k->chunks[c - k->folded] = i;
    }
    for (uint32_t p = 0; rc == SL_OK && p < jb->nkp; p++)
        for (uint32_t c = 0; c < jb->kp[p].nchunks - jb->kp[p].folded; c++)
            if (jb->kp[p].chunks[c] == UINT32_MAX)
                return sl_error_set(err, SL_ERR_INVALID, "job '%s': no chunk %u of %s", jb->id,
                                    jb->kp[p].folded + c, jb->paths[p]);
    if (rc != SL_OK) return rc;
    /* Delivered ranges of a resumed job: make the chunks that hold them. */
    size_t nr = rec->n_kafka_range_partition;
    if (rec->n_kafka_range_from != nr || rec->n_kafka_range_to != nr)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': Kafka range columns differ", jb->id);
    for (size_t r = 0; r < nr; r++) {
        uint32_t p = rec->kafka_range_partition[r];
        int64_t f = rec->kafka_range_from[r], t = rec->kafka_range_to[r];
        if (p >= jb->nkp || f < jb->kp[p].start || f >= t ||
            (jb->kp[p].stop >= 0 && t > jb->kp[p].stop))
            return sl_error_set(
                err, SL_ERR_INVALID,
                "job '%s': delivered range %zu (partition %u, [%lld, %lld)) outside "
                "the partitions",
                jb->id, r, p, (long long)f, (long long)t);
        uint64_t want = (uint64_t)(t - 1 - jb->kp[p].start) / jb->chunk + 1;
        if (want > jb->kp[p].nchunks) {
            uint64_t more = want - jb->kp[p].nchunks;
            rc = reserve_splits(m, jb, more, err);
            if (rc == SL_OK) rc = reserve_chunks(m, jb, p, more, err);
            if (rc != SL_OK) return rc;
            while (jb->kp[p].nchunks < want)
                add_chunk(m, jb, p);
        }
        /* [f, t) over the chunks it spans, chunk-relative */
        for (uint64_t k = (uint64_t)(f - jb->kp[p].start) / jb->chunk; rc == SL_OK && k < want;
             k++) {
            uint32_t s = jb->kp[p].chunks[k - jb->kp[p].folded]; /* a new job: none folded */
            uint64_t a = jb->defs[s].first_row, b = a + jb->defs[s].num_rows;
            uint64_t lo = (uint64_t)f > a ? (uint64_t)f : a, hi = (uint64_t)t < b ? (uint64_t)t : b;
            if (lo < hi) rc = m_add_range(m, jb, s, lo - a, hi - a, M_OWNER_MASTER, err);
        }
        if (rc != SL_OK) return rc;
    }
    return SL_OK;
}

void m_kafka_free(const sl_allocator_t *a, job *jb)
{
    sl_free(a, jb->free, (size_t)jb->cap * sizeof *jb->free);
    sl_free(a, jb->ring, M_KAFKA_FOLDED_RING * sizeof *jb->ring);
    jb->free = NULL;
    jb->ring = NULL;
    for (uint32_t p = 0; jb->kp != NULL && p < jb->nkp; p++) {
        sl_strfree(a, jb->kp[p].topic);
        sl_free(a, jb->kp[p].chunks, (size_t)jb->kp[p].cap * sizeof(uint32_t));
    }
    sl_free(a, jb->kp, (size_t)jb->kp_cap * sizeof *jb->kp);
    jb->kp = NULL;
}

void m_kafka_recount(job *jb)
{
    for (uint32_t p = 0; p < jb->nkp; p++) {
        kpart *k = &jb->kp[p];
        k->pending = k->open = 0;
        k->low = k->nchunks;
        for (uint32_t c = k->folded; c < k->nchunks; c++) {
            uint8_t st = jb->st[k->chunks[c - k->folded]].state;
            k->pending += st == SL_MASTER_SPLIT_PENDING;
            k->open += st != SL_MASTER_SPLIT_DONE;
            if (st != SL_MASTER_SPLIT_DONE && c < k->low) k->low = c;
        }
        m_kafka_fold(jb, p);
    }
}

bool m_kafka_exhausted(const job *jb)
{
    int64_t f, t;
    for (uint32_t p = 0; p < jb->nkp; p++)
        if (next_chunk(jb, p, &f, &t)) return false;
    return true;
}

static uint32_t ahead(const sl_master_state_t *m)
{
    return m->opts.kafka_chunks_ahead ? m->opts.kafka_chunks_ahead : 4;
}

/* Partition p wants its next chunk now: none pending, fewer than ahead
 * open, and, for a stream partition, a record at the chunk's start as far
 * as the high watermark last told says (the master's Kafka watcher, every
 * few seconds; unknown: no chunk yet). So no read starts at or past the
 * log's end: a fetch past it is OFFSET_OUT_OF_RANGE, which
 * auto.offset.reset=error makes a read error, and a stream at its head
 * wants one chunk waiting there, not `ahead` of them. */
static bool wants_chunk(const sl_master_state_t *m, const job *jb, uint32_t p)
{
    int64_t f, t;
    const kpart *k = &jb->kp[p];
    return k->pending == 0 && k->open < ahead(m) && next_chunk(jb, p, &f, &t) &&
           (k->stop >= 0 || (k->high >= 0 && f < k->high));
}

void sl_master_state_kafka_high(sl_master_state_t *m, const char *job_id, const char *topic,
                                int32_t partition, int64_t high, uint32_t index)
{
    job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return;
    /* index: where the positions listed it (partitions are only appended) */
    if (index < jb->nkp && jb->kp[index].partition == partition &&
        strcmp(jb->kp[index].topic, topic) == 0) {
        jb->kp[index].high = high;
        return;
    }
    for (uint32_t p = 0; p < jb->nkp; p++)
        if (jb->kp[p].partition == partition && strcmp(jb->kp[p].topic, topic) == 0)
            jb->kp[p].high = high;
}

sl_err_t m_kafka_grow(sl_master_state_t *m, uint32_t slot, sl_error_t *err)
{
    job *jb = m->jobs[slot];
    if (jb->chunk == 0 || jb->failed || jb->epoch >= jb->epochs) return SL_OK;
    uint32_t want = 0;
    for (uint32_t p = 0; p < jb->nkp; p++)
        want += wants_chunk(m, jb, p);
    /* free splits (of folded chunks) are taken before new ones */
    if (jb->n + (uint64_t)want > (uint64_t)m->opts.max_splits + jb->nfree)
        want = m->opts.max_splits + jb->nfree - jb->n;
    if (want == 0) return SL_OK; /* at max_splits the partitions wait: docs/KAFKA.md */
    uint32_t *parts = sl_alloc(m->a, (size_t)want * sizeof *parts);
    if (parts == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': chunks", jb->id);
    uint32_t k = 0;
    sl_err_t rc = reserve_splits(m, jb, want, err);
    for (uint32_t p = 0; rc == SL_OK && p < jb->nkp && k < want; p++)
        if (wants_chunk(m, jb, p)) {
            parts[k++] = p;
            rc = reserve_chunks(m, jb, p, 1, err);
        }
    if (rc == SL_OK) {
        Sluice__Master__KafkaChunksAdded ca = SLUICE__MASTER__KAFKA_CHUNKS_ADDED__INIT;
        ca.job_id = jb->id;
        ca.n_partition = k;
        ca.partition = parts;
        Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
        rec.kind_case = SLUICE__MASTER__RECORD__KIND_KAFKA_CHUNKS_ADDED;
        rec.kafka_chunks_added = &ca;
        rc = m_record(m, &rec, NULL, err); /* m_kafka_apply_chunks: room reserved above */
    }
    sl_free(m->a, parts, (size_t)want * sizeof *parts);
    return rc;
}

sl_err_t m_kafka_apply_chunks(sl_master_state_t *m, const Sluice__Master__KafkaChunksAdded *r,
                              uint64_t off, sl_error_t *err)
{
    uint32_t slot;
    job *jb = r->job_id != NULL ? m_find_job(m, r->job_id, &slot) : NULL;
    if (jb == NULL || jb->chunk == 0 || jb->failed || jb->epoch >= jb->epochs)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "record at offset %llu: chunks of job '%s': no running Kafka job",
                            (unsigned long long)off, r->job_id ? r->job_id : "");
    sl_err_t rc = r->n_partition > (uint64_t)m->opts.max_splits + jb->nfree - jb->n
                      ? sl_error_set(err, SL_ERR_CORRUPT, "past max_splits")
                      : reserve_splits(m, jb, r->n_partition, err);
    for (size_t i = 0; rc == SL_OK && i < r->n_partition; i++) {
        int64_t f, t;
        uint32_t p = r->partition[i];
        if (p >= jb->nkp || !next_chunk(jb, p, &f, &t))
            rc = sl_error_set(err, SL_ERR_CORRUPT, "partition %u has no next chunk", p);
        else if ((rc = reserve_chunks(m, jb, p, 1, err)) == SL_OK)
            add_chunk(m, jb, p);
    }
    if (rc != SL_OK)
        return sl_error_prefix(
            err, "record at offset %llu: chunks of job '%s': ", (unsigned long long)off, jb->id);
    return SL_OK;
}

/* ---- partitions added ------------------------------------------------------------------ */

/* Can partition (topic, partition) join jb? */
static sl_err_t partition_check_join(const job *jb, const char *topic, int32_t partition,
                                     int64_t start, int64_t stop, sl_error_t *err)
{
    if (jb->chunk == 0)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s' reads a table, not Kafka", jb->id);
    if (jb->epoch >= jb->epochs || jb->failed)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s' has ended: no partition joins it",
                            jb->id);
    SL_FORWARD_IF_ERROR(partition_check(jb->id, topic, partition, start, stop, err));
    for (uint32_t p = 0; p < jb->nkp; p++)
        if (jb->kp[p].partition == partition && strcmp(jb->kp[p].topic, topic) == 0)
            return sl_error_set(err, SL_ERR_INVALID, "job '%s' reads %s/%d already", jb->id, topic,
                                partition);
    if (jb->nkp >= SL_MASTER_MAX_KAFKA_PARTITIONS)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': %u partitions already (at most %d)",
                            jb->id, jb->nkp, SL_MASTER_MAX_KAFKA_PARTITIONS);
    return SL_OK;
}

sl_err_t sl_master_state_kafka_partition_add(sl_master_state_t *m, const char *job_id,
                                             const sl_master_kafka_partition_t *p, sl_error_t *err)
{
    job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL) return m_no_job(job_id, err);
    sl_err_t rc = partition_check_join(jb, p->topic, p->partition, p->start, p->stop, err);
    if (rc != SL_OK) return rc;
    Sluice__Master__KafkaPartition kp = SLUICE__MASTER__KAFKA_PARTITION__INIT;
    kp.topic = (char *)p->topic;
    kp.partition = p->partition;
    kp.start = p->start;
    kp.stop = p->stop;
    Sluice__Master__KafkaPartitionAdded pa = SLUICE__MASTER__KAFKA_PARTITION_ADDED__INIT;
    pa.job_id = jb->id;
    pa.partition = &kp;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_KAFKA_PARTITION_ADDED;
    rec.kafka_partition_added = &pa;
    /* Room for the partition and its strings first: applying the record
     * cannot fail then. */
    m_live live = {.now_ms = m->now_ms};
    live.kp_topic = sl_strdup(m->a, p->topic);
    live.kp_path = sl_strfmt(m->a, "%s/%d", p->topic, p->partition);
    rc = live.kp_topic == NULL || live.kp_path == NULL
             ? sl_error_set(err, SL_ERR_NOMEM, "job '%s': partition %s/%d", jb->id, p->topic,
                            p->partition)
             : reserve_parts(m, jb, 1, err);
    if (rc == SL_OK) rc = m_record(m, &rec, &live, err);
    sl_strfree(m->a, live.kp_topic); /* not applied: still ours */
    sl_strfree(m->a, live.kp_path);
    return rc;
}

sl_err_t m_kafka_apply_partition(sl_master_state_t *m, const Sluice__Master__KafkaPartitionAdded *r,
                                 m_live *live, uint64_t off, sl_error_t *err)
{
    job *jb = r->job_id != NULL ? m_find_job(m, r->job_id, NULL) : NULL;
    const Sluice__Master__KafkaPartition *p = r->partition;
    sl_err_t rc = jb == NULL || p == NULL
                      ? sl_error_set(err, SL_ERR_INVALID, "no such job or no partition")
                      : partition_check_join(jb, p->topic, p->partition, p->start, p->stop, err);
    if (rc == SL_OK) {
        char *t = live != NULL ? live->kp_topic : NULL, *path = live != NULL ? live->kp_path : NULL;
        rc = link_partition(m, jb, p->topic, p->partition, p->start, p->stop, t, path, err);
        if (live != NULL) live->kp_topic = live->kp_path = NULL; /* link_partition's either way */
    }
    if (rc == SL_OK || rc == SL_ERR_NOMEM) return rc;
    sl_error_prefix(err,
                    "record at offset %llu: partition added to job '%s': ", (unsigned long long)off,
                    r->job_id ? r->job_id : "");
    if (err != NULL) err->code = SL_ERR_CORRUPT;
    return SL_ERR_CORRUPT;
}

/* ---- positions --------------------------------------------------------------------------- */

/* Every offset of partition p below it is committed. */
int64_t m_kafka_done_below(const job *jb, uint32_t p)
{
    const kpart *k = &jb->kp[p];
    int64_t f, t;
    if (k->low == 0 || !sl_kafka_chunk_bounds(k->start, jb->chunk, k->low - 1, k->stop, &f, &t))
        return k->start;
    return t;
}

static int64_t committed_prefix(const job *jb, uint32_t p)
{
    const kpart *k = &jb->kp[p];
    if (k->low == k->nchunks) return m_kafka_done_below(jb, p);
    uint32_t s = k->chunks[k->low - k->folded];
    const split_st *st = &jb->st[s];
    uint64_t at = st->nr > 0 && st->r[0].from_row == 0 ? st->r[0].to_row : 0;
    return (int64_t)(jb->defs[s].first_row + at);
}

uint32_t sl_master_state_kafka_positions(const sl_master_state_t *m, const char *job_id,
                                         sl_master_kafka_position_t *out, uint32_t cap)
{
    const job *jb = m_find_job(m, job_id, NULL);
    if (jb == NULL || jb->chunk == 0) return 0;
    for (uint32_t p = 0; p < jb->nkp && p < cap; p++) {
        const kpart *k = &jb->kp[p];
        /* A finished job kept no ranges: each partition is read to its stop. */
        int64_t c = jb->epoch >= jb->epochs && k->stop >= 0 ? k->stop : committed_prefix(jb, p);
        out[p] = (sl_master_kafka_position_t){.topic = k->topic,
                                              .partition = k->partition,
                                              .start = k->start,
                                              .stop = k->stop,
                                              .committed = c,
                                              .chunks = k->nchunks,
                                              .pending = k->pending,
                                              .open = k->open};
    }
    return jb->nkp;
}

void m_kafka_spec(const job *jb, Sluice__Master__JobSpec *spec,
                  Sluice__Master__KafkaPartition *parts, Sluice__Master__KafkaPartition **ptrs)
{
    spec->kafka_chunk = jb->chunk;
    spec->n_kafka_partitions = jb->nkp;
    spec->kafka_partitions = ptrs;
    spec->splits->n_paths = 0; /* a chunk's path is its partition's */
    spec->splits->paths = NULL;
    for (uint32_t p = 0; p < jb->nkp; p++) {
        sluice__master__kafka_partition__init(&parts[p]);
        parts[p].topic = jb->kp[p].topic;
        parts[p].partition = jb->kp[p].partition;
        parts[p].start = jb->kp[p].start;
        parts[p].stop = jb->kp[p].stop;
        parts[p].folded = jb->kp[p].folded;
        ptrs[p] = &parts[p];
    }
}

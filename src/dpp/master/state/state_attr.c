/* Who committed what (docs/DESIGN.md "Resume tokens"): for a table job, every
 * row range committed in its current and previous epoch is attributed to
 * the client that committed it or to the master itself (empty ranges of a
 * split read, skipped rows, a resumed job's start ranges), so that a
 * version-4 token can say what ONE rank handed out and the tokens of a
 * checkpoint combine by union. The same functions run live and in replay
 * (m_add_range and m_apply_split_skipped call them); the snapshot keeps
 * the lists. Also a resumed job's later epochs' start ranges, applied when
 * their epoch begins. Callers hold the master's lock.
 *
 * Bound: one entry (24 bytes) per piece a commit added, at most one per
 * committed batch plus one per empty range, for two epochs; a client's
 * batches that follow each other in a split (the next batch of the split
 * it committed last) grow one entry, so a split read by one client costs
 * one. Entries are in no order; tokens and the dump sort what they take.
 *
 * A Kafka stream job's chunks come and go (a folded chunk's split holds
 * another chunk later), so its entries name the partition (split = the
 * partition index, job->kp) and absolute offsets, and are kept above the
 * partition's list floor only (m_kafka_attr_floor: the last
 * 2 x M_KAFKA_ATTR_CHUNKS folded chunks and the open ones); a token counts
 * every offset below the claim floor (M_KAFKA_ATTR_CHUNKS chunks down) as
 * delivered, refuses a client that still holds a batch there, and lists
 * its rank's offsets from the list floor (state_kafka_token.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "dpp/master/state/state_internal.h"

uint64_t m_new_run_id(sl_master_state_t *m, const char *job_id)
{
    /* Unique per state directory: next_generation only grows, and moves
     * 2^32 past the last run's at every open; runs (jobs linked by this
     * process) separates two adds between leases. The wall clock and the
     * state's address separate masters (two fresh ones agree on the
     * rest). Journaled, so replay never draws one; not in the dump. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t v[5] = {m->next_generation, m->runs, m->now_ms,
                     (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                     (uint64_t)(uintptr_t)m};
    uint64_t id = XXH3_64bits_withSeed(v, sizeof v, XXH3_64bits(job_id, strlen(job_id)));
    return id != 0 ? id : 1;
}

/* The slot of name in jb's owner hash: its owner's, or the empty one to
 * put it in. */
static uint32_t owner_slot(const job *jb, const uint32_t *h, uint32_t cap, const char *name)
{
    uint32_t mask = cap - 1, i = (uint32_t)XXH3_64bits(name, strlen(name)) & mask;
    while (h[i] != 0 && strcmp(jb->owners[h[i] - 1], name) != 0)
        i = (i + 1) & mask;
    return i;
}

static void owner_rehash(job *jb)
{
    memset(jb->ohash, 0, (size_t)jb->ohash_cap * sizeof *jb->ohash);
    for (uint32_t k = 0; k < jb->nowners; k++)
        jb->ohash[owner_slot(jb, jb->ohash, jb->ohash_cap, jb->owners[k])] = k + 1;
}

static void forget_owners(sl_master_state_t *m, job *jb, m_attr_list *l);

/* prune: a stream's owners without entries go first (not while a
 * snapshot's owners are restored: their entries come after them). */
static sl_err_t owner_of(sl_master_state_t *m, job *jb, const char *name, bool prune,
                         uint32_t *owner, sl_error_t *err)
{
    /* Hashed: a job's committing clients in two epochs are its ranks and
     * their reconnections, up to thousands, looked up at every commit. */
    if (jb->ohash_cap > 0) {
        uint32_t i = owner_slot(jb, jb->ohash, jb->ohash_cap, name);
        if (jb->ohash[i] != 0) {
            *owner = jb->ohash[i];
            return SL_OK;
        }
    }
    /* A stream has one epoch: its owners are forgotten when a new one
     * comes and the folds left them no entry (once per new client; the
     * others keep their order, so live and replay number them alike where
     * it shows: in the order of entries sorted by owner). */
    if (prune && jb->chunk != 0) forget_owners(m, jb, &jb->attr[1]);
    if (jb->nowners == jb->cap_owners) {
        uint32_t cap = jb->cap_owners ? jb->cap_owners * 2 : 8, hcap = 2 * cap;
        char **p = sl_alloc(m->a, (size_t)cap * sizeof *p);
        uint32_t *h = sl_calloc(m->a, hcap, sizeof *h);
        if (p == NULL || h == NULL) {
            sl_free(m->a, p, (size_t)cap * sizeof *p);
            sl_free(m->a, h, (size_t)hcap * sizeof *h);
            return sl_error_set(err, SL_ERR_NOMEM, "job '%s': client '%s'", jb->id, name);
        }
        if (jb->nowners > 0) memcpy(p, jb->owners, (size_t)jb->nowners * sizeof *p);
        sl_free(m->a, jb->owners, (size_t)jb->cap_owners * sizeof *p);
        sl_free(m->a, jb->ohash, (size_t)jb->ohash_cap * sizeof *h);
        jb->owners = p;
        jb->cap_owners = cap;
        jb->ohash = h;
        jb->ohash_cap = hcap;
        owner_rehash(jb);
    }
    char *c = sl_strdup(m->a, name);
    if (c == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': client '%s'", jb->id, name);
    jb->owners[jb->nowners++] = c;
    jb->ohash[owner_slot(jb, jb->ohash, jb->ohash_cap, c)] = jb->nowners;
    *owner = jb->nowners;
    return SL_OK;
}

sl_err_t m_attr_owner(sl_master_state_t *m, job *jb, const char *name, uint32_t *owner,
                      sl_error_t *err)
{
    return owner_of(m, jb, name, true, owner, err);
}

static int by_owner_split_from(const void *x, const void *y)
{
    const m_attr *a = x, *b = y;
    if (a->owner != b->owner) return a->owner < b->owner ? -1 : 1;
    if (a->split != b->split) return a->split < b->split ? -1 : 1;
    return a->from < b->from ? -1 : a->from > b->from;
}

/* Sort and merge touching entries of one owner and split. */
static void compact(m_attr_list *l)
{
    if (l->n < 2) return;
    qsort(l->v, l->n, sizeof *l->v, by_owner_split_from);
    uint32_t w = 0;
    for (uint32_t i = 1; i < l->n; i++) {
        m_attr *last = &l->v[w];
        if (l->v[i].owner == last->owner && l->v[i].split == last->split &&
            l->v[i].from == last->to)
            last->to = l->v[i].to;
        else
            l->v[++w] = l->v[i];
    }
    l->n = w + 1;
}

sl_err_t m_attr_reserve(sl_master_state_t *m, job *jb, uint32_t more, sl_error_t *err)
{
    m_attr_list *l = &jb->attr[1];
    if (jb->chunk == 0 && jb->attr_last == NULL) {
        jb->attr_last = sl_calloc(m->a, (size_t)jb->n + 1, sizeof *jb->attr_last);
        if (jb->attr_last == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "job '%s': who committed what", jb->id);
    }
    if ((uint64_t)l->n + more <= l->cap) return SL_OK;
    uint64_t cap = l->cap ? l->cap : 16;
    while (cap < (uint64_t)l->n + more)
        cap *= 2;
    if (cap > UINT32_MAX)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': committed ranges of an epoch",
                            jb->id);
    m_attr *v = sl_alloc(m->a, (size_t)cap * sizeof *v);
    if (v == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': who committed what", jb->id);
    if (l->n > 0) memcpy(v, l->v, (size_t)l->n * sizeof *v);
    sl_free(m->a, l->v, (size_t)l->cap * sizeof *v);
    l->v = v;
    l->cap = (uint32_t)cap;
    return SL_OK;
}

/* The pieces of [from, to) not committed in the split: counted, and
 * appended to out as owner's when out is not NULL (room made). */
static uint32_t each_gap(const job *jb, uint32_t split, uint64_t from, uint64_t to,
                         m_attr_list *out, uint32_t owner)
{
    const split_st *s = &jb->st[split];
    uint32_t i = m_first_after(s, from), n = 0;
    uint64_t at = from;
    while (at < to) {
        if (i < s->nr && s->r[i].from_row <= at) {
            at = s->r[i].to_row;
            i++;
            continue;
        }
        uint64_t end = i < s->nr && s->r[i].from_row < to ? s->r[i].from_row : to;
        if (out != NULL && jb->chunk != 0) {
            /* a Kafka chunk: the partition's absolute offsets; the same
             * client's next batch of the partition grows the last entry */
            uint64_t base = jb->defs[split].first_row;
            uint32_t p = jb->defs[split].path;
            m_attr *last = out->n > 0 ? &out->v[out->n - 1] : NULL;
            if (last != NULL && last->owner == owner && last->split == p && last->to == base + at)
                last->to = base + end;
            else
                out->v[out->n++] = (m_attr){owner, p, base + at, base + end};
        } else if (out != NULL) {
            /* The common case: the same client's next batch of the split
             * (a worker reads a split in order): one entry grows. */
            uint32_t li = jb->attr_last[split];
            m_attr *last = li > 0 ? &out->v[li - 1] : NULL;
            if (last != NULL && last->owner == owner && last->to == at) {
                last->to = end;
            } else {
                out->v[out->n++] = (m_attr){owner, split, at, end};
                jb->attr_last[split] = out->n;
            }
        }
        n++;
        at = end;
    }
    return n;
}

uint32_t m_attr_count_gaps(const job *jb, uint32_t split, uint64_t from, uint64_t to)
{
    return each_gap(jb, split, from, to, NULL, 0);
}

sl_err_t m_attr_gaps(sl_master_state_t *m, job *jb, uint32_t split, uint64_t from, uint64_t to,
                     uint32_t owner, sl_error_t *err)
{
    if (from >= to) return SL_OK;
    uint32_t n = m_attr_count_gaps(jb, split, from, to);
    sl_err_t rc = m_attr_reserve(m, jb, n, err);
    if (rc == SL_OK) each_gap(jb, split, from, to, &jb->attr[1], owner);
    return rc;
}

static uint64_t folded_less(const job *jb, uint32_t p, uint32_t chunks)
{
    const kpart *k = &jb->kp[p];
    uint64_t fc = k->folded > chunks ? k->folded - chunks : 0;
    return (uint64_t)k->start + fc * jb->chunk;
}

uint64_t m_kafka_attr_floor(const job *jb, uint32_t p)
{
    return folded_less(jb, p, 2 * M_KAFKA_ATTR_CHUNKS);
}

uint64_t m_kafka_claim_floor(const job *jb, uint32_t p)
{
    return folded_less(jb, p, M_KAFKA_ATTR_CHUNKS);
}

void m_attr_kafka_prune(job *jb, uint32_t p)
{
    /* In place (a fold runs live and in replay and must not fail): O(entries)
     * once per fold, and the entries are those of a few chunks per partition. */
    uint64_t floor = m_kafka_attr_floor(jb, p);
    m_attr_list *l = &jb->attr[1];
    uint32_t w = 0;
    for (uint32_t q = 0; q < l->n; q++) {
        m_attr e = l->v[q];
        if (e.split == p && e.to <= floor) continue;
        if (e.split == p && e.from < floor) e.from = floor;
        l->v[w++] = e;
    }
    l->n = w;
}

/* Forget the owners that no entry of l names (clients that came and went),
 * keeping the others' order, so that a list sorted by owner stays sorted:
 * O(entries + owners). The owners' hash table (at least 2 x nowners
 * slots, rebuilt below) is the scratch map, so this allocates nothing and
 * cannot fail, live or in replay. */
static void forget_owners(sl_master_state_t *m, job *jb, m_attr_list *l)
{
    if (jb->nowners == 0 || jb->ohash_cap < jb->nowners) return;
    uint32_t *map = jb->ohash;
    memset(map, 0, (size_t)jb->nowners * sizeof *map);
    for (uint32_t q = 0; q < l->n; q++)
        if (l->v[q].owner != M_OWNER_MASTER) map[l->v[q].owner - 1] = 1;
    uint32_t keep = 0;
    for (uint32_t k = 0; k < jb->nowners; k++) {
        if (map[k] == 0) {
            sl_strfree(m->a, jb->owners[k]);
            continue;
        }
        jb->owners[keep] = jb->owners[k];
        map[k] = ++keep;
    }
    for (uint32_t q = 0; q < l->n; q++)
        if (l->v[q].owner != M_OWNER_MASTER) l->v[q].owner = map[l->v[q].owner - 1];
    jb->nowners = keep;
    owner_rehash(jb);
}

void m_attr_rotate(sl_master_state_t *m, job *jb)
{
    m_attr_list *p = &jb->attr[0];
    sl_free(m->a, p->v, (size_t)p->cap * sizeof *p->v);
    *p = jb->attr[1];
    jb->attr[1] = (m_attr_list){0};
    if (jb->attr_last != NULL) memset(jb->attr_last, 0, (size_t)jb->n * sizeof *jb->attr_last);
    /* once per epoch: the kept epoch's owners only */
    forget_owners(m, jb, p);
}

void m_cols_free(const sl_allocator_t *a, m_rset_cols *c)
{
    if (c == NULL) return;
    sl_free(a, c->epoch, (c->n + 1) * sizeof *c->epoch);
    sl_free(a, c->split, (c->n + 1) * sizeof *c->split);
    sl_free(a, c->from, (c->n + 1) * sizeof *c->from);
    sl_free(a, c->to, (c->n + 1) * sizeof *c->to);
    sl_free(a, c, sizeof *c);
}

void m_attr_free(const sl_allocator_t *a, job *jb)
{
    for (int e = 0; e < 2; e++)
        sl_free(a, jb->attr[e].v, (size_t)jb->attr[e].cap * sizeof *jb->attr[e].v);
    for (uint32_t k = 0; k < jb->nowners; k++)
        sl_strfree(a, jb->owners[k]);
    sl_free(a, jb->owners, (size_t)jb->cap_owners * sizeof *jb->owners);
    sl_free(a, jb->ohash, (size_t)jb->ohash_cap * sizeof *jb->ohash);
    sl_free(a, jb->attr_last, ((size_t)jb->n + 1) * sizeof *jb->attr_last);
    m_cols_free(a, jb->later);
    jb->later = NULL;
}

sl_err_t m_cols_from_pb(sl_master_state_t *m, const job *jb, const Sluice__Master__EpochRanges *e,
                        m_rset_cols **out, sl_error_t *err)
{
    *out = NULL;
    if (e == NULL || e->n_epoch == 0) return SL_OK;
    size_t n = e->n_epoch;
    if (e->n_split != n || e->n_from != n || e->n_to != n)
        return sl_error_set(err, SL_ERR_INVALID, "job '%s': later ranges of unequal columns",
                            jb->id);
    for (size_t i = 0; i < n; i++)
        if (e->epoch[i] <= jb->epoch || e->epoch[i] >= jb->epochs || e->split[i] >= jb->n ||
            e->from[i] >= e->to[i] || e->to[i] > jb->defs[e->split[i]].num_rows ||
            (i > 0 && (e->epoch[i] < e->epoch[i - 1] ||
                       (e->epoch[i] == e->epoch[i - 1] &&
                        (e->split[i] < e->split[i - 1] ||
                         (e->split[i] == e->split[i - 1] && e->from[i] < e->to[i - 1]))))))
            return sl_error_set(err, SL_ERR_INVALID,
                                "job '%s': later range %zu (epoch %u split %u) out of order or "
                                "outside the job",
                                jb->id, i, e->epoch[i], e->split[i]);
    const sl_allocator_t *a = m->a;
    m_rset_cols *c = sl_calloc(a, 1, sizeof *c);
    if (c == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': later ranges", jb->id);
    c->n = n;
    c->epoch = sl_alloc(a, (n + 1) * sizeof *c->epoch);
    c->split = sl_alloc(a, (n + 1) * sizeof *c->split);
    c->from = sl_alloc(a, (n + 1) * sizeof *c->from);
    c->to = sl_alloc(a, (n + 1) * sizeof *c->to);
    if (!c->epoch || !c->split || !c->from || !c->to) {
        m_cols_free(a, c);
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s': later ranges", jb->id);
    }
    memcpy(c->epoch, e->epoch, n * sizeof *c->epoch);
    memcpy(c->split, e->split, n * sizeof *c->split);
    memcpy(c->from, e->from, n * sizeof *c->from);
    memcpy(c->to, e->to, n * sizeof *c->to);
    *out = c;
    return SL_OK;
}

sl_err_t m_attr_epoch_began(sl_master_state_t *m, uint32_t slot, sl_error_t *err)
{
    job *jb = m->jobs[slot];
    if (jb->chunk != 0 || jb->epoch >= jb->epochs) return SL_OK;
    sl_err_t rc = SL_OK;
    if (jb->restatic) {
        rc = m_static_assign(m, jb, jb->ranks, jb->rank_of_split, NULL, false, err);
        if (rc != SL_OK) return rc;
        jb->restatic = false;
        m_rank_recount(jb);
    }
    m_rset_cols *c = jb->later;
    if (c == NULL) return SL_OK;
    size_t i = 0;
    while (i < c->n && c->epoch[i] < jb->epoch)
        i++;
    size_t i0 = i;
    for (; rc == SL_OK && i < c->n && c->epoch[i] == jb->epoch; i++)
        rc = m_add_range(m, jb, c->split[i], c->from[i], c->to[i], M_OWNER_MASTER, err);
    /* the deterministic order: they are the epoch's skip rows (before the
     * DONE checks below, which need wholly skipped splits counted) */
    if (rc == SL_OK) rc = m_order_skip_epoch(m, jb, c, i0, i, err);
    if (rc != SL_OK) return rc;
    for (uint32_t s = 0; s < jb->n; s++)
        m_maybe_done(m, slot, s);
    if (i >= c->n) {
        m_cols_free(m->a, c);
        jb->later = NULL;
    }
    return SL_OK;
}

/* ---- snapshot and dump ------------------------------------------------------------ */

static sl_err_t list_pb(const sl_allocator_t *a, const m_attr_list *l,
                        Sluice__Master__AttributedRanges *p)
{
    sluice__master__attributed_ranges__init(p);
    size_t n = l->n;
    p->n_owner = p->n_split = p->n_from = p->n_to = n; /* before: list_pb_free's sizes */
    p->owner = sl_alloc(a, (n + 1) * sizeof *p->owner);
    p->split = sl_alloc(a, (n + 1) * sizeof *p->split);
    p->from = sl_alloc(a, (n + 1) * sizeof *p->from);
    p->to = sl_alloc(a, (n + 1) * sizeof *p->to);
    if (!p->owner || !p->split || !p->from || !p->to) return SL_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        p->owner[i] = l->v[i].owner;
        p->split[i] = l->v[i].split;
        p->from[i] = l->v[i].from;
        p->to[i] = l->v[i].to;
    }
    return SL_OK;
}

static void list_pb_free(const sl_allocator_t *a, Sluice__Master__AttributedRanges *p)
{
    size_t n = p->n_owner;
    sl_free(a, p->owner, (n + 1) * sizeof *p->owner);
    sl_free(a, p->split, (n + 1) * sizeof *p->split);
    sl_free(a, p->from, (n + 1) * sizeof *p->from);
    sl_free(a, p->to, (n + 1) * sizeof *p->to);
}

sl_err_t m_attr_pb_build(const sl_master_state_t *m, const job *jb, Sluice__Master__SnapshotJob *sj,
                         m_attr_pb *p, sl_error_t *err)
{
    memset(p, 0, sizeof *p);
    sluice__master__attributed_ranges__init(&p->prev);
    sluice__master__attributed_ranges__init(&p->cur);
    sluice__master__epoch_ranges__init(&p->later);
    sj->run_id = jb->run_id;
    sj->n_attr_owners = jb->nowners;
    sj->attr_owners = jb->owners;
    if (list_pb(m->a, &jb->attr[0], &p->prev) != SL_OK ||
        list_pb(m->a, &jb->attr[1], &p->cur) != SL_OK)
        return sl_error_set(err, SL_ERR_NOMEM, "snapshot of job '%s': who committed what", jb->id);
    sj->attr_prev = &p->prev;
    sj->attr_cur = &p->cur;
    if (jb->later != NULL) {
        const m_rset_cols *c = jb->later;
        p->later.n_epoch = p->later.n_split = p->later.n_from = p->later.n_to = c->n;
        p->later.epoch = c->epoch;
        p->later.split = c->split;
        p->later.from = c->from;
        p->later.to = c->to;
        sj->later = &p->later;
    }
    if (jb->rank_of_split != NULL) {
        sj->n_rank_of_split = jb->n;
        sj->rank_of_split = jb->rank_of_split;
    }
    sj->restatic = jb->restatic;
    if (jb->rank_epoch != NULL) {
        sj->n_rank_epoch = jb->ranks;
        sj->rank_epoch = jb->rank_epoch;
    }
    return SL_OK;
}

void m_attr_pb_free(const sl_allocator_t *a, m_attr_pb *p)
{
    list_pb_free(a, &p->prev);
    list_pb_free(a, &p->cur);
}

static sl_err_t list_restore(sl_master_state_t *m, job *jb,
                             const Sluice__Master__AttributedRanges *p, m_attr_list *l,
                             sl_error_t *err)
{
    sl_free(m->a, l->v, (size_t)l->cap * sizeof *l->v);
    *l = (m_attr_list){0};
    if (p == NULL || p->n_owner == 0) return SL_OK;
    size_t n = p->n_owner;
    if (p->n_split != n || p->n_from != n || p->n_to != n || n > UINT32_MAX / 2)
        return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': attribution columns", jb->id);
    l->v = sl_alloc(m->a, n * sizeof *l->v);
    if (l->v == NULL) return sl_error_set(err, SL_ERR_NOMEM, "snapshot job '%s'", jb->id);
    l->cap = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        /* a Kafka job's: a partition's offsets at or above its floor */
        bool outside = jb->chunk != 0 ? p->split[i] >= jb->nkp || p->from[i] >= p->to[i] ||
                                            p->from[i] < m_kafka_attr_floor(jb, p->split[i])
                                      : p->split[i] >= jb->n || p->from[i] >= p->to[i] ||
                                            p->to[i] > jb->defs[p->split[i]].num_rows;
        if (p->owner[i] > jb->nowners || outside)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "snapshot job '%s': attributed range %zu outside the job", jb->id,
                                i);
        l->v[l->n++] = (m_attr){p->owner[i], p->split[i], p->from[i], p->to[i]};
    }
    return SL_OK;
}

sl_err_t m_attr_restore(sl_master_state_t *m, job *jb, const Sluice__Master__SnapshotJob *sj,
                        sl_error_t *err)
{
    jb->run_id = sj->run_id;
    for (size_t k = 0; k < sj->n_attr_owners; k++) {
        uint32_t o;
        const char *name = sj->attr_owners[k];
        if (name == NULL || !m_name_ok(m, name))
            return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': bad client %zu", jb->id,
                                k);
        sl_err_t rc = owner_of(m, jb, name, false, &o, err);
        if (rc != SL_OK) return rc;
        if (o != k + 1)
            return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': client '%s' twice", jb->id,
                                name);
    }
    /* the build's entries (its start ranges) are replaced: none is the
     * latest of its split any more */
    if (jb->attr_last != NULL) memset(jb->attr_last, 0, (size_t)jb->n * sizeof *jb->attr_last);
    sl_err_t rc = list_restore(m, jb, sj->attr_prev, &jb->attr[0], err);
    if (rc == SL_OK) rc = list_restore(m, jb, sj->attr_cur, &jb->attr[1], err);
    if (rc != SL_OK) return rc;
    m_cols_free(m->a, jb->later);
    jb->later = NULL;
    rc = m_cols_from_pb(m, jb, sj->later, &jb->later, err);
    if (rc != SL_OK) {
        if (err != NULL) err->code = SL_ERR_CORRUPT;
        return SL_ERR_CORRUPT;
    }
    if (sj->n_rank_of_split == 0 && jb->rank_of_split != NULL) {
        /* a snapshot of an older master: its assignment was over whole
         * splits (the build balanced the rows left) */
        sl_err_t arc = m_static_assign(m, jb, jb->ranks, jb->rank_of_split, NULL, false, err);
        if (arc != SL_OK) return arc;
    }
    if (sj->n_rank_of_split > 0) {
        if (jb->rank_of_split == NULL || sj->n_rank_of_split != jb->n)
            return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s': rank of %zu splits",
                                jb->id, sj->n_rank_of_split);
        for (uint32_t i = 0; i < jb->n; i++) {
            if (sj->rank_of_split[i] >= jb->ranks)
                return sl_error_set(err, SL_ERR_CORRUPT, "snapshot job '%s' split %u: rank %u",
                                    jb->id, i, sj->rank_of_split[i]);
            jb->rank_of_split[i] = sj->rank_of_split[i];
        }
    }
    jb->restatic = sj->restatic && jb->rank_of_split != NULL;
    m_rank_recount(jb);
    return m_rank_restore(m, jb, sj->rank_epoch, sj->n_rank_epoch, err);
}

void m_attr_dump(const sl_allocator_t *a, const job *jb, m_printf_fn pf, void *ctx)
{
    /* the run id is drawn at random: a dump says only that there is one */
    pf(ctx, " run %s%s\n", jb->run_id != 0 ? "set" : "none", jb->restatic ? " restatic" : "");
    for (int e = 0; e < 2; e++) {
        /* canonical: sorted and merged, as replay and live may have
         * compacted at other moments */
        const m_attr_list *l = &jb->attr[e];
        if (l->n == 0) continue;
        m_attr *v = sl_alloc(a, l->n * sizeof *v);
        if (v == NULL) continue;
        memcpy(v, l->v, l->n * sizeof *v);
        m_attr_list c = {v, l->n, l->n};
        compact(&c);
        pf(ctx, " attr %s", e == 0 ? "prev" : "cur");
        for (uint32_t q = 0; q < c.n; q++)
            pf(ctx, " %s:%u[%llu,%llu)", v[q].owner ? jb->owners[v[q].owner - 1] : "master",
               v[q].split, (unsigned long long)v[q].from, (unsigned long long)v[q].to);
        pf(ctx, "\n");
        sl_free(a, v, l->n * sizeof *v);
    }
    for (size_t i = 0; jb->later != NULL && i < jb->later->n; i++)
        pf(ctx, " later %u:%u[%llu,%llu)\n", jb->later->epoch[i], jb->later->split[i],
           (unsigned long long)jb->later->from[i], (unsigned long long)jb->later->to[i]);
}

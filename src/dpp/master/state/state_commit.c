/* The DPP master's exactly-once core: committed row ranges per split,
 * trainer clients and their remembered commit nonces, COMMIT and
 * SPLIT_READ (state.h). Callers hold the master's lock. */
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "dpp/master/state/state_internal.h"

/* ---- committed ranges ----------------------------------------------------------- */

void m_free_ranges(const sl_allocator_t *a, split_st *s)
{
    if (s->r != NULL) sl_free(a, s->r, (size_t)s->cap * sizeof *s->r);
    s->r = NULL;
    s->nr = s->cap = 0;
    s->committed = 0;
}

uint32_t m_first_after(const split_st *s, uint64_t row)
{
    uint32_t lo = 0, hi = s->nr;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->r[mid].to_row > row)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

bool m_overlaps(const job *jb, uint32_t split, uint64_t from, uint64_t to)
{
    const split_st *s = &jb->st[split];
    uint32_t i = m_first_after(s, from);
    return i < s->nr && s->r[i].from_row < to;
}

sl_err_t m_reserve_ranges(sl_master_state_t *m, job *jb, uint32_t split, uint32_t more,
                          sl_error_t *err)
{
    split_st *s = &jb->st[split];
    if ((uint64_t)s->nr + more <= s->cap) return SL_OK;
    uint64_t want = (uint64_t)s->nr + more, cap = s->cap ? s->cap : 2;
    while (cap < want)
        cap *= 2;
    if (cap > UINT32_MAX)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s' split %u: ranges", jb->id, split);
    sl_dpp_row_range_t *r = sl_alloc(m->a, (size_t)cap * sizeof *r);
    if (r == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "job '%s' split %u: ranges", jb->id, split);
    if (s->nr > 0) memcpy(r, s->r, (size_t)s->nr * sizeof *r);
    if (s->r != NULL) sl_free(m->a, s->r, (size_t)s->cap * sizeof *r);
    s->r = r;
    s->cap = (uint32_t)cap;
    return SL_OK;
}

sl_err_t m_add_range(sl_master_state_t *m, job *jb, uint32_t split, uint64_t from, uint64_t to,
                     uint32_t owner, sl_error_t *err)
{
    split_st *s = &jb->st[split];
    if (from >= to) return SL_OK;
    /* Ranges [i, k) touch or overlap [from, to): they merge into one. */
    uint32_t i = from > 0 ? m_first_after(s, from - 1) : 0;
    uint32_t k = i;
    uint64_t covered = 0;
    uint64_t nf = from, nt = to;
    while (k < s->nr && s->r[k].from_row <= to) {
        uint64_t a = s->r[k].from_row > from ? s->r[k].from_row : from;
        uint64_t b = s->r[k].to_row < to ? s->r[k].to_row : to;
        if (b > a) covered += b - a;
        if (s->r[k].from_row < nf) nf = s->r[k].from_row;
        if (s->r[k].to_row > nt) nt = s->r[k].to_row;
        k++;
    }
    if (k == i) { /* no neighbour: insert at i */
        if (s->nr >= m->opts.max_ranges)
            return sl_error_set(err, SL_ERR_TOO_LARGE,
                                "job '%s' split %u: %u committed ranges (max_ranges)", jb->id,
                                split, s->nr);
        sl_err_t rc = m_reserve_ranges(m, jb, split, 1, err);
        if (rc != SL_OK) return rc;
    }
    /* Who added which rows, while the ranges still say what was there. */
    sl_err_t arc = m_attr_gaps(m, jb, split, from, to, owner, err);
    if (arc != SL_OK) return arc;
    if (k == i) {
        memmove(&s->r[i + 1], &s->r[i], (size_t)(s->nr - i) * sizeof *s->r);
        s->nr++;
    } else if (k > i + 1) {
        memmove(&s->r[i + 1], &s->r[k], (size_t)(s->nr - k) * sizeof *s->r);
        s->nr -= k - i - 1;
    }
    s->r[i] = (sl_dpp_row_range_t){nf, nt};
    uint64_t added = (to - from) - covered;
    s->committed += added;
    jb->committed_rows += added;
    m->c.committed_rows += added;
    return SL_OK;
}

void m_maybe_done(sl_master_state_t *m, uint32_t slot, uint32_t split)
{
    job *jb = m->jobs[slot];
    split_st *s = &jb->st[split];
    if (s->state == SL_MASTER_SPLIT_DONE || s->committed != jb->defs[split].num_rows) return;
    /* a deterministic job's split is done once counted too: until then it
     * is leased again (with nothing to do) to be counted (state_order.c) */
    if (!m_order_split_counted(jb, split)) return;
    if (s->state == SL_MASTER_SPLIT_LEASED) {
        m_do_release(m, slot, split, SL_MASTER_SPLIT_DONE);
    } else {
        m_split_state(jb, split, SL_MASTER_SPLIT_DONE);
    }
    m->c.completions++;
}

/* ---- clients -------------------------------------------------------------------- */

static uint32_t hash_slot(uint32_t *tab, uint32_t cap, const client *cls, const char *name,
                          bool *found)
{
    uint32_t mask = cap - 1;
    uint32_t i = (uint32_t)XXH3_64bits(name, strlen(name)) & mask;
    for (;; i = (i + 1) & mask) {
        if (tab[i] == 0) {
            *found = false;
            return i;
        }
        if (strcmp(cls[tab[i] - 1].name, name) == 0) {
            *found = true;
            return i;
        }
    }
}

bool m_client_find(const sl_master_state_t *m, const char *name, uint32_t *out)
{
    bool found = false;
    if (m->chash_cap == 0) return false;
    uint32_t i = hash_slot(m->chash, m->chash_cap, m->clients, name, &found);
    if (found) *out = m->chash[i] - 1;
    return found;
}

sl_err_t m_client_get(sl_master_state_t *m, const char *name, uint32_t *out, sl_error_t *err)
{
    bool found = false;
    if (m_client_find(m, name, out)) return SL_OK;
    if (!m_name_ok(m, name))
        return sl_error_set(err, SL_ERR_INVALID,
                            "client id of %zu bytes: 1..%u printable ASCII bytes, no spaces",
                            strlen(name), m->opts.max_name);
    if (m->num_clients >= m->opts.max_clients)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "client '%s': already %u clients (max_clients)",
                            name, m->opts.max_clients);
    const sl_allocator_t *a = m->a;
    if (m->num_clients == m->cap_clients) {
        uint32_t cap = m->cap_clients ? m->cap_clients * 2 : 16;
        client *c = sl_calloc(a, cap, sizeof *c);
        if (c == NULL) return sl_error_set(err, SL_ERR_NOMEM, "client '%s'", name);
        if (m->num_clients > 0) memcpy(c, m->clients, m->num_clients * sizeof *c);
        sl_free(a, m->clients, (size_t)m->cap_clients * sizeof *c);
        m->clients = c;
        m->cap_clients = cap;
    }
    if ((m->num_clients + 1) * 2 > m->chash_cap) {
        uint32_t cap = m->chash_cap ? m->chash_cap * 2 : 64;
        uint32_t *h = sl_calloc(a, cap, sizeof *h);
        if (h == NULL) return sl_error_set(err, SL_ERR_NOMEM, "client '%s'", name);
        sl_free(a, m->chash, (size_t)m->chash_cap * sizeof *h);
        m->chash = h;
        m->chash_cap = cap;
        for (uint32_t c = 0; c < m->num_clients; c++)
            h[hash_slot(h, cap, m->clients, m->clients[c].name, &found)] = c + 1;
    }
    client *c = &m->clients[m->num_clients];
    memset(c, 0, sizeof *c);
    c->index_cap = 16;
    while (c->index_cap < 2 * m->opts.max_answers)
        c->index_cap *= 2;
    c->name = sl_strdup(a, name);
    c->ring = sl_alloc(a, (size_t)m->opts.max_answers * sizeof *c->ring);
    c->index = sl_calloc(a, c->index_cap, sizeof *c->index);
    if (c->name == NULL || c->ring == NULL || c->index == NULL) {
        sl_strfree(a, c->name);
        if (c->ring != NULL) sl_free(a, c->ring, (size_t)m->opts.max_answers * sizeof *c->ring);
        if (c->index != NULL) sl_free(a, c->index, (size_t)c->index_cap * sizeof *c->index);
        return sl_error_set(err, SL_ERR_NOMEM, "client '%s'", name);
    }
    c->last_ms = m->now_ms;
    m->chash[hash_slot(m->chash, m->chash_cap, m->clients, name, &found)] = m->num_clients + 1;
    *out = m->num_clients++;
    m->c.clients = m->num_clients;
    return SL_OK;
}

void m_client_remove(sl_master_state_t *m, uint32_t ci)
{
    const sl_allocator_t *a = m->a;
    client *c = &m->clients[ci];
    sl_strfree(a, c->name);
    sl_free(a, c->ring, (size_t)m->opts.max_answers * sizeof *c->ring);
    sl_free(a, c->index, (size_t)c->index_cap * sizeof *c->index);
    m->clients[ci] = m->clients[--m->num_clients];
    m->c.clients = m->num_clients;
    /* Rebuild the name index (open addressing cannot just drop a slot):
     * O(clients) per eviction, and a client is evicted once per idle
     * period at most. */
    memset(m->chash, 0, (size_t)m->chash_cap * sizeof *m->chash);
    bool found;
    for (uint32_t i = 0; i < m->num_clients; i++)
        m->chash[hash_slot(m->chash, m->chash_cap, m->clients, m->clients[i].name, &found)] = i + 1;
}

static uint32_t nonce_home(const client *c, uint64_t nonce)
{
    return (uint32_t)XXH3_64bits(&nonce, sizeof nonce) & (c->index_cap - 1);
}

bool m_client_has(const sl_master_state_t *m, uint32_t ci, uint64_t nonce)
{
    (void)m;
    const client *c = &m->clients[ci];
    uint32_t mask = c->index_cap - 1;
    for (uint32_t i = nonce_home(c, nonce); c->index[i] != 0; i = (i + 1) & mask)
        if (c->ring[c->index[i] - 1] == nonce) return true;
    return false;
}

/* Remove ring slot `slot` from the index (backward-shift delete). */
static void index_delete(client *c, uint32_t slot)
{
    uint32_t mask = c->index_cap - 1;
    uint32_t i = nonce_home(c, c->ring[slot]);
    while (c->index[i] != slot + 1)
        i = (i + 1) & mask;
    for (uint32_t j = (i + 1) & mask; c->index[j] != 0; j = (j + 1) & mask) {
        uint32_t home = nonce_home(c, c->ring[c->index[j] - 1]);
        /* Move j into the hole i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            c->index[i] = c->index[j];
            i = j;
        }
    }
    c->index[i] = 0;
}

void m_client_remember(sl_master_state_t *m, uint32_t ci, uint64_t nonce)
{
    client *c = &m->clients[ci];
    uint32_t cap = m->opts.max_answers;
    uint32_t slot;
    if (c->len == cap) { /* forget the oldest */
        slot = c->head;
        index_delete(c, slot);
        c->head = (c->head + 1) % cap;
    } else {
        slot = (c->head + c->len) % cap;
        c->len++;
    }
    c->ring[slot] = nonce;
    uint32_t mask = c->index_cap - 1, i = nonce_home(c, nonce);
    while (c->index[i] != 0)
        i = (i + 1) & mask;
    c->index[i] = slot + 1;
}

/* ---- commit and split read ------------------------------------------------------- */

/* Why a commit under generation is refused because its lease is not the
 * split's live one (the live API only: replay applies commits as written). */
static const char *lease_gone(const split_st *s, uint64_t generation)
{
    if (s->state == SL_MASTER_SPLIT_DONE) return "the split is done";
    if (s->state == SL_MASTER_SPLIT_LEASED && s->generation != generation)
        return "the split is leased under another generation";
    if (s->state == SL_MASTER_SPLIT_LEASED) return NULL;
    return s->generation == generation ? "that lease has ended (expired, revoked or reported)"
                                       : "no such lease";
}

sl_master_commit_result_t sl_master_state_commit(sl_master_state_t *m, const char *job_id,
                                                 uint32_t epoch, uint32_t split,
                                                 uint64_t generation, uint64_t from_row,
                                                 uint64_t to_row, const char *client_id,
                                                 uint64_t nonce, sl_error_t *err)
{
    sl_master_commit_t c = {job_id, epoch,     split, generation, from_row,
                            to_row, client_id, nonce, 0};
    return sl_master_state_commit_batch(m, &c, err);
}

/* *result gets the outcome; a non-OK return is a failure of the master. */
static sl_err_t commit_one(sl_master_state_t *m, const sl_master_commit_t *c,
                           uint32_t rank_plus_one, sl_master_commit_result_t *result,
                           sl_error_t *err)
{
    const char *job_id = c->job_id, *client_id = c->client_id;
    uint32_t epoch = c->epoch, split = c->split;
    uint64_t generation = c->generation, from_row = c->from_row, to_row = c->to_row;
    uint64_t nonce = c->nonce;
    uint32_t ci, slot;
    sl_err_t rc;
    if (client_id == NULL || !m_name_ok(m, client_id))
        return sl_error_set(err, SL_ERR_INVALID,
                            "client id of %zu bytes: 1..%u printable ASCII bytes, no spaces",
                            client_id ? strlen(client_id) : 0, m->opts.max_name);
    /* A client's record is made by its first accepted commit (journaled
     * with it): refused commits leave no trace. */
    bool known = m_client_find(m, client_id, &ci);
    if (known && m_client_has(m, ci, nonce)) {
        m->c.repeated_commits++;
        m->clients[ci].last_ms = m->now_ms;
        *result = SL_MASTER_COMMITTED;
        return SL_OK;
    }
    job *jb = job_id != NULL ? m_find_job(m, job_id, &slot) : NULL;
    if (jb == NULL || split >= jb->n || from_row >= to_row || to_row > jb->defs[split].num_rows) {
        m->c.unknown_commits++;
        *result = SL_MASTER_UNKNOWN;
        if (jb == NULL)
            sl_error_set(err, SL_OK, "commit: no job '%s'", job_id ? job_id : "");
        else if (split >= jb->n)
            sl_error_set(err, SL_OK, "commit: job '%s' has no split %u (%u splits)", job_id, split,
                         jb->n);
        else
            sl_error_set(err, SL_OK,
                         "commit: job '%s' split %u: rows [%llu, %llu) outside [0, %llu)", job_id,
                         split, (unsigned long long)from_row, (unsigned long long)to_row,
                         (unsigned long long)jb->defs[split].num_rows);
        return SL_OK;
    }
    if (jb->failed) {
        m->c.stale_commits++;
        *result = SL_MASTER_STALE_EPOCH;
        sl_error_set(err, SL_OK, "commit: job '%s' failed: %s", job_id, jb->fail_message);
        return SL_OK;
    }
    /* a split is in its rank's epoch under static sharding (state_rank.c) */
    uint32_t se = m_split_epoch(jb, split);
    if (epoch != se || se >= jb->epochs) {
        m->c.stale_commits++;
        *result = SL_MASTER_STALE_EPOCH;
        sl_error_set(err, SL_OK, "commit: job '%s' split %u is in epoch %u, not %u%s", job_id,
                     split, se, epoch, se >= jb->epochs ? " (finished)" : "");
        return SL_OK;
    }
    if (m_overlaps(jb, split, from_row, to_row)) {
        m->c.overlaps++;
        *result = SL_MASTER_OVERLAP;
        sl_error_set(err, SL_OK,
                     "commit: job '%s' epoch %u split %u: rows [%llu, %llu) overlap committed "
                     "rows",
                     job_id, epoch, split, (unsigned long long)from_row,
                     (unsigned long long)to_row);
        return SL_OK;
    }
    /* Only the live lease's batches commit: rows of a split nobody holds
     * (a confused or rogue client) or of a lease that ended are never
     * marked delivered; the split's next lease reads them. */
    const char *gone = lease_gone(&jb->st[split], generation);
    if (gone != NULL) {
        m->c.unleased_commits++;
        *result = SL_MASTER_STALE_EPOCH;
        sl_error_set(err, SL_OK,
                     "commit: job '%s' epoch %u split %u: generation %llu is not the live lease "
                     "(%s)",
                     job_id, epoch, split, (unsigned long long)generation, gone);
        return SL_OK;
    }
    if (jb->st[split].nr >= m->opts.max_ranges)
        return sl_error_set(err, SL_ERR_TOO_LARGE,
                            "job '%s' split %u: %u committed ranges (max_ranges)", job_id, split,
                            jb->st[split].nr);
    /* Room first: once the record is out, applying it must not fail. */
    if ((rc = m_reserve_ranges(m, jb, split, 1, err)) != SL_OK) return rc;
    uint32_t owner = M_OWNER_MASTER;
    if ((rc = m_attr_owner(m, jb, client_id, &owner, err)) != SL_OK ||
        (rc = m_attr_reserve(m, jb, 1, err)) != SL_OK ||
        (rc = m_equal_reserve(m, jb, split, epoch, m_equal_rank_plus_one(jb, rank_plus_one),
                              err)) != SL_OK)
        return rc;
    if (!known && (rc = m_client_get(m, client_id, &ci, err)) != SL_OK) return rc;
    Sluice__Master__Committed co = SLUICE__MASTER__COMMITTED__INIT;
    co.job_id = jb->id;
    co.epoch = epoch;
    co.split = split;
    co.from_row = from_row;
    co.to_row = to_row;
    co.client_id = m->clients[ci].name;
    co.nonce = nonce;
    co.num_samples = c->num_samples;
    co.rank_plus_one = m_equal_rank_plus_one(jb, rank_plus_one);
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_COMMITTED;
    rec.committed = &co;
    /* The record applied cannot fail: max_ranges was checked and the room
     * reserved above. */
    if ((rc = m_record(m, &rec, NULL, err)) != SL_OK) return rc;
    *result = SL_MASTER_COMMITTED;
    return m_maybe_advance(m, jb, err);
}

sl_master_commit_result_t sl_master_state_commit_batch(sl_master_state_t *m,
                                                       const sl_master_commit_t *c, sl_error_t *err)
{
    return sl_master_state_commit_ranked(m, c, 0, err);
}

sl_master_commit_result_t sl_master_state_commit_ranked(sl_master_state_t *m,
                                                        const sl_master_commit_t *c,
                                                        uint32_t rank_plus_one, sl_error_t *err)
{
    sl_master_commit_result_t result = SL_MASTER_UNKNOWN;
    return commit_one(m, c, rank_plus_one, &result, err) == SL_OK ? result : SL_MASTER_COMMIT_ERROR;
}

/* *out gets the outcome; a non-OK return is a failure of the master. */
static sl_err_t split_read(sl_master_state_t *m, const char *job_id, uint32_t epoch, uint32_t split,
                           uint64_t generation, const sl_dpp_row_range_t *empty, uint32_t num_empty,
                           sl_master_read_result_t *out, sl_error_t *err)
{
    uint32_t slot;
    *out = SL_MASTER_READ_STALE;
    job *jb = job_id != NULL ? m_find_job(m, job_id, &slot) : NULL;
    if (jb == NULL)
        return sl_error_set(err, SL_OK, "split read: no job '%s'", job_id ? job_id : "");
    if (split >= jb->n)
        return sl_error_set(err, SL_OK, "split read: job '%s' has no split %u", job_id, split);
    const split_st *s = &jb->st[split];
    if (epoch != m_split_epoch(jb, split) || s->state != SL_MASTER_SPLIT_LEASED ||
        s->generation != generation) {
        m->c.stale_refused++;
        return sl_error_set(err, SL_OK,
                            "split read: job '%s' epoch %u split %u: generation %llu is not the "
                            "live lease (%s)",
                            job_id, epoch, split, (unsigned long long)generation,
                            epoch != m_split_epoch(jb, split)    ? "another epoch"
                            : s->state == SL_MASTER_SPLIT_LEASED ? "leased again since"
                            : s->state == SL_MASTER_SPLIT_DONE   ? "split done"
                                                                 : "lease expired");
    }
    for (uint32_t i = 0; i < num_empty; i++)
        if (empty[i].from_row > empty[i].to_row || empty[i].to_row > jb->defs[split].num_rows)
            return sl_error_set(err, SL_ERR_INVALID,
                                "split read: job '%s' split %u: empty range [%llu, %llu) outside "
                                "[0, %llu)",
                                job_id, split, (unsigned long long)empty[i].from_row,
                                (unsigned long long)empty[i].to_row,
                                (unsigned long long)jb->defs[split].num_rows);
    if (s->nr + num_empty > m->opts.max_ranges)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "split read: job '%s' split %u: %u ranges",
                            job_id, split, s->nr + num_empty);
    Sluice__Master__SplitRead sr = SLUICE__MASTER__SPLIT_READ__INIT;
    sr.job_id = jb->id;
    sr.split = split;
    sr.generation = generation;
    sr.n_empty_from = sr.n_empty_to = num_empty;
    sr.empty_from = num_empty ? sl_alloc(m->a, (size_t)num_empty * 8) : NULL;
    sr.empty_to = num_empty ? sl_alloc(m->a, (size_t)num_empty * 8) : NULL;
    sl_err_t rc = SL_OK;
    if (num_empty > 0 && (sr.empty_from == NULL || sr.empty_to == NULL)) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "split read of %u ranges", num_empty);
        goto out;
    }
    /* Room first: once the record is out, applying it must not fail. */
    if ((rc = m_reserve_ranges(m, jb, split, num_empty, err)) != SL_OK) goto out;
    /* each empty range adds at most one piece per gap between what is
     * committed, and what the earlier ones added */
    if ((rc = m_attr_reserve(m, jb, 2 * num_empty + s->nr + 1, err)) != SL_OK) goto out;
    for (uint32_t i = 0; i < num_empty; i++) {
        sr.empty_from[i] = empty[i].from_row;
        sr.empty_to[i] = empty[i].to_row;
    }
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_SPLIT_READ;
    rec.split_read = &sr;
    rc = m_record(m, &rec, NULL, err);
    if (rc == SL_OK)
        *out = jb->st[split].state == SL_MASTER_SPLIT_DONE ? SL_MASTER_READ_DONE
                                                           : SL_MASTER_READ_PENDING;
    if (rc == SL_OK) rc = m_maybe_advance(m, jb, err);
out:
    if (sr.empty_from != NULL) sl_free(m->a, sr.empty_from, (size_t)num_empty * 8);
    if (sr.empty_to != NULL) sl_free(m->a, sr.empty_to, (size_t)num_empty * 8);
    return rc;
}

sl_master_read_result_t sl_master_state_split_read(sl_master_state_t *m, const char *job_id,
                                                   uint32_t epoch, uint32_t split,
                                                   uint64_t generation,
                                                   const sl_dpp_row_range_t *empty,
                                                   uint32_t num_empty, sl_error_t *err)
{
    sl_master_read_result_t out;
    sl_err_t rc = split_read(m, job_id, epoch, split, generation, empty, num_empty, &out, err);
    return rc == SL_OK ? out : SL_MASTER_READ_ERROR;
}

sl_err_t m_apply_split_read(sl_master_state_t *m, uint32_t slot, uint32_t split,
                            const uint64_t *from, const uint64_t *to, uint32_t num_empty,
                            sl_error_t *err)
{
    job *jb = m->jobs[slot];
    for (uint32_t i = 0; i < num_empty; i++) {
        sl_err_t rc = m_add_range(m, jb, split, from[i], to[i], M_OWNER_MASTER, err);
        if (rc != SL_OK) return rc;
    }
    if (jb->st[split].committed == jb->defs[split].num_rows) m_maybe_done(m, slot, split);
    /* rows left, or (a deterministic job) every row committed, not counted */
    if (jb->st[split].state == SL_MASTER_SPLIT_LEASED) {
        m_do_release(m, slot, split, SL_MASTER_SPLIT_PENDING);
        m->c.releases++;
    }
    return SL_OK;
}

uint32_t sl_master_state_split_rank(const sl_master_state_t *m, const char *job_id, uint32_t split)
{
    const job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    if (jb == NULL || split >= jb->n || jb->rank_of_split == NULL) return 0;
    return jb->rank_of_split[split] + 1;
}

bool sl_master_state_lease_live(const sl_master_state_t *m, const char *job_id, uint32_t epoch,
                                uint32_t split, uint64_t generation, const char *worker)
{
    const job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    if (jb == NULL || split >= jb->n || epoch != m_split_epoch(jb, split)) return false;
    const split_st *s = &jb->st[split];
    return s->state == SL_MASTER_SPLIT_LEASED && s->generation == generation &&
           (worker == NULL || strcmp(m->workers[s->worker].name, worker) == 0);
}

sl_err_t sl_master_state_committed(const sl_master_state_t *m, const char *job_id, uint32_t split,
                                   const sl_dpp_row_range_t **ranges, uint32_t *count,
                                   sl_error_t *err)
{
    const job *jb = job_id != NULL ? m_find_job(m, job_id, NULL) : NULL;
    if (jb == NULL) return sl_error_set(err, SL_ERR_NOT_FOUND, "no job '%s'", job_id ? job_id : "");
    if (split >= jb->n)
        return sl_error_set(err, SL_ERR_NOT_FOUND, "job '%s' has no split %u", job_id, split);
    *ranges = jb->st[split].r;
    *count = jb->st[split].nr;
    return SL_OK;
}

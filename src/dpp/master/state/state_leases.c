/* The DPP master's leases: the worker table, the pending queue (which
 * split is handed out next), grants, renewals by heartbeat, registration
 * (revoking what a worker's process does not hold) and expiry, live and in
 * replay (state.h). Callers hold the master's lock. */
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "common/log.h"
#include "common/log_events.h"
#include "dpp/master/state/state_internal.h"

/* ---- workers ------------------------------------------------------------------ */

static uint32_t whash_slot(const sl_master_state_t *m, const char *name, bool *found)
{
    uint32_t mask = m->whash_cap - 1;
    uint32_t i = (uint32_t)XXH3_64bits(name, strlen(name)) & mask;
    for (;;) {
        uint32_t v = m->whash[i];
        if (v == 0) {
            *found = false;
            return i;
        }
        if (strcmp(m->workers[v - 1].name, name) == 0) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
}

static bool worker_find(const sl_master_state_t *m, const char *name, uint32_t *out)
{
    if (m->whash_cap == 0) return false;
    bool found;
    uint32_t i = whash_slot(m, name, &found);
    if (found) *out = m->whash[i] - 1;
    return found;
}

sl_err_t m_worker_get(sl_master_state_t *m, const char *name, uint32_t *out, sl_error_t *err)
{
    if (worker_find(m, name, out)) return SL_OK;
    if (!m_name_ok(m, name))
        return sl_error_set(err, SL_ERR_INVALID,
                            "worker id of %zu bytes: 1..%u printable ASCII bytes, no spaces",
                            strlen(name), m->opts.max_name);
    if (m->num_workers >= m->opts.max_workers)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "worker '%s': already %u workers (max_workers)",
                            name, m->opts.max_workers);
    if (m->num_workers == m->cap_workers) {
        uint32_t cap = m->cap_workers ? m->cap_workers * 2 : 64;
        worker *w = sl_calloc(m->a, cap, sizeof *w);
        if (w == NULL) return sl_error_set(err, SL_ERR_NOMEM, "worker '%s'", name);
        if (m->num_workers > 0) memcpy(w, m->workers, m->num_workers * sizeof *w);
        sl_free(m->a, m->workers, m->cap_workers * sizeof *w);
        m->workers = w;
        m->cap_workers = cap;
    }
    if ((m->num_workers + 1) * 2 > m->whash_cap) {
        uint32_t cap = m->whash_cap ? m->whash_cap * 2 : 128;
        uint32_t *h = sl_calloc(m->a, cap, sizeof *h);
        if (h == NULL) return sl_error_set(err, SL_ERR_NOMEM, "worker '%s'", name);
        sl_free(m->a, m->whash, m->whash_cap * sizeof *h);
        m->whash = h;
        m->whash_cap = cap;
        for (uint32_t w = 0; w < m->num_workers; w++) {
            bool found;
            m->whash[whash_slot(m, m->workers[w].name, &found)] = w + 1;
        }
    }
    worker *w = &m->workers[m->num_workers];
    memset(w, 0, sizeof *w);
    w->name = sl_strdup(m->a, name);
    if (w->name == NULL) return sl_error_set(err, SL_ERR_NOMEM, "worker '%s'", name);
    bool found;
    m->whash[whash_slot(m, name, &found)] = m->num_workers + 1;
    *out = m->num_workers++;
    m->c.workers = m->num_workers;
    return SL_OK;
}

/* Room for one more lease in w's list, so that m_do_lease cannot fail. */
bool m_worker_reserve(sl_master_state_t *m, uint32_t wi)
{
    worker *w = &m->workers[wi];
    if (w->nleases == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 8;
        lease_ref *l = sl_alloc(m->a, (size_t)cap * sizeof *l);
        if (l == NULL) return false;
        if (w->nleases > 0) memcpy(l, w->leases, w->nleases * sizeof *l);
        sl_free(m->a, w->leases, (size_t)w->cap * sizeof *l);
        w->leases = l;
        w->cap = cap;
    }
    return true;
}

void m_worker_drop_lease(worker *w, uint32_t slot, uint32_t split)
{
    for (uint32_t i = 0; i < w->nleases; i++)
        if (w->leases[i].job == slot && w->leases[i].split == split) {
            w->leases[i] = w->leases[--w->nleases];
            return;
        }
}

/* ---- the pending queue: cursor over the epoch order, plus a min-heap of
 * positions behind the cursor that became PENDING again (expiry), so that
 * lease_next always hands out the earliest pending split in epoch order. */

static void heap_push(job *jb, uint32_t split)
{
    if (jb->st[split].in_heap || jb->pos[split] >= jb->cursor) return;
    jb->st[split].in_heap = 1;
    uint32_t i = jb->heap_len++, v = jb->pos[split];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (jb->heap[parent] <= v) break;
        jb->heap[i] = jb->heap[parent];
        i = parent;
    }
    jb->heap[i] = v;
}

void m_queue_pending(job *jb, uint32_t split)
{
    heap_push(jb, split);
}

static void heap_pop(job *jb)
{
    uint32_t v = jb->heap[--jb->heap_len], i = 0, n = jb->heap_len;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && jb->heap[c + 1] < jb->heap[c]) c++;
        if (jb->heap[c] >= v) break;
        jb->heap[i] = jb->heap[c];
        i = c;
    }
    if (n > 0) jb->heap[i] = v;
}

/* The next PENDING split in epoch order, or UINT32_MAX; drops heap entries
 * and cursor positions that are no longer PENDING. Does not take it. */
static uint32_t peek_pending(job *jb)
{
    while (jb->heap_len > 0) {
        uint32_t s = jb->order[jb->heap[0]];
        if (jb->st[s].state == SL_MASTER_SPLIT_PENDING) return s;
        jb->st[s].in_heap = 0;
        heap_pop(jb);
    }
    while (jb->cursor < jb->n && jb->st[jb->order[jb->cursor]].state != SL_MASTER_SPLIT_PENDING)
        jb->cursor++;
    return jb->cursor < jb->n ? jb->order[jb->cursor] : UINT32_MAX;
}

static void take_pending(job *jb, uint32_t split)
{
    if (jb->heap_len > 0 && jb->order[jb->heap[0]] == split) {
        jb->st[split].in_heap = 0;
        heap_pop(jb);
    } else {
        jb->cursor++;
    }
}

void m_take_pending(job *jb, uint32_t split)
{
    if (peek_pending(jb) == split) take_pending(jb, split);
}

/* Room for n ranges in lease_next's todo list. */
static sl_err_t reserve_todo(sl_master_state_t *m, uint32_t n, sl_error_t *err)
{
    if (n <= m->todo_cap) return SL_OK;
    uint32_t cap = n < 64 ? 64 : n;
    sl_dpp_row_range_t *t = sl_alloc(m->a, (size_t)cap * sizeof *t);
    if (t == NULL) return sl_error_set(err, SL_ERR_NOMEM, "todo of %u ranges", cap);
    sl_free(m->a, m->todo, (size_t)m->todo_cap * sizeof *t);
    m->todo = t;
    m->todo_cap = cap;
    return SL_OK;
}

/* ---- transitions (shared by the live calls and replay) ------------------------------ */

void m_do_lease(sl_master_state_t *m, uint32_t slot, uint32_t split, uint32_t w, uint64_t gen,
                uint64_t expiry)
{
    job *jb = m->jobs[slot];
    split_st *s = &jb->st[split];
    m_split_state(jb, split, SL_MASTER_SPLIT_LEASED);
    s->generation = gen;
    s->expiry = expiry;
    s->worker = w;
    worker *wk = &m->workers[w];
    if (wk->nleases == 0 || expiry < wk->earliest) wk->earliest = expiry;
    wk->leases[wk->nleases++] = (lease_ref){slot, split}; /* room: m_worker_reserve */
    if (gen >= m->next_generation) m->next_generation = gen + 1;
    m->c.leases_granted++;
}

void m_do_release(sl_master_state_t *m, uint32_t slot, uint32_t split, uint8_t new_state)
{
    job *jb = m->jobs[slot];
    split_st *s = &jb->st[split];
    m_worker_drop_lease(&m->workers[s->worker], slot, split);
    m_split_state(jb, split, new_state);
    s->worker = NO_WORKER;
    if (new_state == SL_MASTER_SPLIT_PENDING) heap_push(jb, split);
}

/* Lease split (PENDING) of job jb in slot to worker_id. */
static sl_err_t lease_at(sl_master_state_t *m, job *jb, uint32_t split, const char *worker_id,
                         uint64_t now_ms, sl_master_lease_t *out, sl_error_t *err);

sl_err_t sl_master_state_lease_next(sl_master_state_t *m, const char *job_id, const char *worker_id,
                                    uint64_t now_ms, sl_master_lease_t *out, sl_error_t *err)
{
    return sl_master_state_lease_split(m, job_id, UINT32_MAX, worker_id, now_ms, out, err);
}

sl_err_t sl_master_state_lease_split(sl_master_state_t *m, const char *job_id, uint32_t split,
                                     const char *worker_id, uint64_t now_ms, sl_master_lease_t *out,
                                     sl_error_t *err)
{
    uint32_t slot;
    if (now_ms > m->now_ms) m->now_ms = now_ms;
    job *jb = m_find_job(m, job_id, &slot);
    if (jb == NULL) return m_no_job(job_id, err);
    if (jb->epoch >= jb->epochs)
        return sl_error_set(err, SL_ERR_AGAIN, "job '%s' finished", job_id);
    if (jb->failed) return sl_error_set(err, SL_ERR_AGAIN, "job '%s' failed", job_id);
    if (split == UINT32_MAX) {
        split = peek_pending(jb);
        if (jb->chunk != 0) {
            /* A Kafka job makes the chunks it needs now (state_kafka.c). Room
             * for the lease first, so that the lease cannot fail for memory
             * once the chunks' record is out: a new chunk has one todo range,
             * and an older pending split stays first in the order. */
            uint32_t w;
            sl_err_t rc = m_worker_get(m, worker_id, &w, err);
            if (rc == SL_OK && !m_worker_reserve(m, w))
                rc = sl_error_set(err, SL_ERR_NOMEM, "lease for worker '%s'", worker_id);
            if (rc == SL_OK)
                rc = reserve_todo(m, split != UINT32_MAX ? jb->st[split].nr + 1 : 1, err);
            if (rc == SL_OK) rc = m_kafka_grow(m, slot, err);
            if (rc != SL_OK) return rc;
            split = peek_pending(jb);
        }
        if (split == UINT32_MAX)
            return sl_error_set(err, SL_ERR_AGAIN, "job '%s': no pending split", job_id);
    } else if (split < jb->n && !m_order_may_lease(jb, split)) {
        return sl_error_set(err, SL_ERR_AGAIN,
                            "job '%s' split %u: past the deterministic order's window", job_id,
                            split);
    } else if (split >= jb->n) {
        return sl_error_set(err, SL_ERR_NOT_FOUND, "job '%s' has no split %u", job_id, split);
    } else if (jb->st[split].state != SL_MASTER_SPLIT_PENDING) {
        return sl_error_set(err, SL_ERR_AGAIN, "job '%s' split %u is not pending", job_id, split);
    }
    /* The deterministic order: the earliest pending split is the only
     * candidate (leases go in epoch order), and it waits while it lies
     * past the counted prefix + the window (back-pressure). */
    if (!m_order_may_lease(jb, split))
        return sl_error_set(err, SL_ERR_AGAIN,
                            "job '%s': split %u waits for the deterministic order's counts "
                            "(position %u, prefix %u, window %u)",
                            job_id, split, jb->pos[split], sl_master_order_prefix(jb->ord),
                            jb->order_window);
    return lease_at(m, jb, split, worker_id, now_ms, out, err);
}

static sl_err_t lease_at(sl_master_state_t *m, job *jb, uint32_t split, const char *worker_id,
                         uint64_t now_ms, sl_master_lease_t *out, sl_error_t *err)
{
    uint32_t w;
    sl_err_t rc = m_worker_get(m, worker_id, &w, err);
    if (rc != SL_OK) return rc;
    worker *wk = &m->workers[w];
    uint64_t gen = m->next_generation;
    Sluice__Master__LeaseGranted lg = SLUICE__MASTER__LEASE_GRANTED__INIT;
    lg.job_id = jb->id;
    lg.split = split;
    lg.worker = wk->name;
    lg.generation = gen;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_LEASE_GRANTED;
    rec.lease_granted = &lg;
    if (!m_worker_reserve(m, w))
        return sl_error_set(err, SL_ERR_NOMEM, "lease for worker '%s'", worker_id);
    /* todo: the complement of the committed ranges, at most nr + 1 ranges. */
    const split_st *s = &jb->st[split];
    rc = reserve_todo(m, s->nr + 1, err);
    if (rc != SL_OK) return rc;
    uint32_t nt = 0;
    uint64_t at = 0;
    for (uint32_t i = 0; i < s->nr; i++) {
        if (s->r[i].from_row > at) m->todo[nt++] = (sl_dpp_row_range_t){at, s->r[i].from_row};
        at = s->r[i].to_row;
    }
    if (at < jb->defs[split].num_rows)
        m->todo[nt++] = (sl_dpp_row_range_t){at, jb->defs[split].num_rows};
    /* A split leased out of epoch order (a shared pass: state.h) stays where
     * the pending queue has it; peek_pending drops it there once it is not
     * PENDING, and finds it again if it becomes PENDING first. */
    m_live live = {.now_ms = now_ms};
    rc = m_record(m, &rec, &live, err);
    if (rc != SL_OK) return rc;
    uint64_t expiry = jb->st[split].expiry;
    const split_def *d = &jb->defs[split];
    *out = (sl_master_lease_t){
        .split = split,
        .epoch = m_split_epoch(jb, split),
        .generation = gen,
        .expiry_ms = expiry,
        .rank_plus_one = jb->rank_of_split != NULL ? jb->rank_of_split[split] + 1 : 0,
        .todo = m->todo,
        .num_todo = nt,
        .path = jb->paths[d->path],
        .stripe_begin = d->stripe_begin,
        .stripe_end = d->stripe_end,
        .first_row = d->first_row,
        .num_rows = d->num_rows,
        .footer_checksum = jb->path_footer != NULL ? jb->path_footer[d->path] : 0};
    return SL_OK;
}

/* The live lease of worker w that ref names, or NULL. */
static split_st *named_lease(sl_master_state_t *m, uint32_t w, const sl_master_lease_ref_t *ref)
{
    job *jb = ref->job_id != NULL ? m_find_job(m, ref->job_id, NULL) : NULL;
    if (jb == NULL || ref->split >= jb->n || ref->epoch != m_split_epoch(jb, ref->split))
        return NULL;
    split_st *s = &jb->st[ref->split];
    bool live =
        s->state == SL_MASTER_SPLIT_LEASED && s->generation == ref->generation && s->worker == w;
    return live ? s : NULL;
}

/* Renew the leases of w that held names (marking them `named` when mark);
 * w's earliest becomes exact again (leases it does not name keep their
 * expiry). @return how many were named. */
static uint32_t renew_named(sl_master_state_t *m, uint32_t w, const sl_master_lease_ref_t *held,
                            uint32_t num_held, uint64_t now_ms, bool mark)
{
    worker *wk = &m->workers[w];
    uint64_t expiry = now_ms + m->opts.lease_timeout_ms;
    uint32_t n = 0;
    for (uint32_t i = 0; i < num_held && wk->nleases > 0; i++) {
        split_st *s = named_lease(m, w, &held[i]);
        if (s == NULL) continue;
        if (expiry > s->expiry) s->expiry = expiry; /* never shortens */
        if (mark) s->named = 1;
        n++;
    }
    uint64_t earliest = UINT64_MAX;
    for (uint32_t i = 0; i < wk->nleases; i++) {
        const split_st *s = &m->jobs[wk->leases[i].job]->st[wk->leases[i].split];
        if (s->expiry < earliest) earliest = s->expiry;
    }
    wk->earliest = earliest;
    m->c.renewals += n;
    return n;
}

sl_err_t sl_master_state_renew(sl_master_state_t *m, const char *worker_id,
                               const sl_master_lease_ref_t *held, uint32_t num_held,
                               uint64_t now_ms, uint32_t *renewed, sl_error_t *err)
{
    (void)err;
    uint32_t w, n = 0;
    if (worker_find(m, worker_id, &w)) n = renew_named(m, w, held, num_held, now_ms, false);
    if (renewed != NULL) *renewed = n;
    return SL_OK;
}

/* Journal and apply the end of lease l: its split is PENDING again
 * (expiry and revocation alike: replay applies one Expired record). */
static sl_err_t end_lease(sl_master_state_t *m, const lease_ref *l, sl_error_t *err)
{
    job *jb = m->jobs[l->job];
    Sluice__Master__Expired ex = SLUICE__MASTER__EXPIRED__INIT;
    ex.job_id = jb->id;
    ex.split = l->split;
    ex.generation = jb->st[l->split].generation;
    Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
    rec.kind_case = SLUICE__MASTER__RECORD__KIND_EXPIRED;
    rec.expired = &ex;
    return m_record(m, &rec, NULL, err);
}

sl_err_t sl_master_state_register(sl_master_state_t *m, const char *worker_id,
                                  const sl_master_lease_ref_t *held, uint32_t num_held,
                                  uint64_t now_ms, uint32_t *renewed, uint32_t *revoked,
                                  sl_error_t *err)
{
    uint32_t w, n = 0, gone = 0;
    sl_err_t rc = SL_OK;
    if (worker_find(m, worker_id, &w)) {
        n = renew_named(m, w, held, num_held, now_ms, true);
        worker *wk = &m->workers[w];
        for (uint32_t i = 0; i < wk->nleases;) {
            lease_ref l = wk->leases[i];
            split_st *s = &m->jobs[l.job]->st[l.split];
            if (s->named || rc != SL_OK) { /* after a failure: only clear the marks */
                s->named = 0;
                i++;
                continue;
            }
            rc = end_lease(m, &l, err); /* swaps the last lease into i: look at i again */
            if (rc == SL_OK)
                gone++;
            else
                i++;
        }
        m->c.revocations += gone;
    }
    if (renewed != NULL) *renewed = n;
    if (revoked != NULL) *revoked = gone;
    return rc;
}

sl_err_t sl_master_state_expire(sl_master_state_t *m, uint64_t now_ms, uint32_t *expired,
                                sl_error_t *err)
{
    uint32_t count = 0;
    sl_err_t rc = SL_OK;
    if (now_ms > m->now_ms) m->now_ms = now_ms;
    for (uint32_t w = 0; w < m->num_workers && rc == SL_OK; w++) {
        worker *wk = &m->workers[w];
        if (wk->nleases == 0 || wk->earliest > now_ms) continue;
        uint64_t earliest = UINT64_MAX;
        for (uint32_t i = 0; i < wk->nleases;) {
            lease_ref l = wk->leases[i];
            split_st *s = &m->jobs[l.job]->st[l.split];
            if (s->expiry > now_ms) {
                if (s->expiry < earliest) earliest = s->expiry;
                i++;
                continue;
            }
            const job *jb = m->jobs[l.job];
            sl_log_kv(SL_LOG_WARN, SL_EV(LEASE_EXPIRED),
                      (SL_KV_STR("job", jb->id), SL_KV_U64("split", l.split),
                       SL_KV_U64("epoch", m_split_epoch(jb, l.split)),
                       SL_KV_U64("generation", s->generation), SL_KV_STR("worker", wk->name)),
                      "job %s split %u: the lease of worker %s expired (no heartbeat naming it "
                      "for the lease timeout); the split is pending again",
                      jb->id, l.split, wk->name);
            rc = end_lease(m, &l, err);
            if (rc != SL_OK) {
                earliest = 0; /* rescan next time */
                break;
            }
            /* Swaps the last lease into i: look at i again. */
            m->c.expiries++;
            count++;
        }
        wk->earliest = earliest;
    }
    if (expired != NULL) *expired = count;
    return rc;
}

/* The autocache on the workers' own disks (docs/STORAGE.md, "The autocache
 * and object stores"): for a job whose source is in an object store, the
 * master keeps only the decision (its --cache-dir); each split's cache
 * file is written on the disk of the worker that computed it (`sluice
 * worker --cache-dir`), and the master remembers, per prefix fingerprint
 * and split, which worker process holds it (holders.h; from the WRITE
 * lease on, then SplitRead.cache_held_bytes and Heartbeat.cache_evicted).
 * Leasing prefers, among the splits the epoch order would hand out next,
 * one the asking worker holds (a READ lease);
 * a split held by another live worker waits for it at most
 * --cache-wait-ms from the epoch's start, then it is computed (read from
 * the store again) by whoever asks.
 *
 * The table is in memory only: an entry names a worker slot and the
 * incarnation of its process, and counts only while that process is
 * connected, so a worker that dies (or restarts with an empty disk)
 * holds nothing from that moment and its splits are read from the store
 * again: a lost entry costs a recomputation, never a wrong or a second
 * batch (exactly once rests on commits, not on the cache). The file's
 * name holds the prefix fingerprint, which holds every split's footer
 * checksum and, for an object in a store, its ETag: a replaced source
 * has another fingerprint and never finds an old file. Under m->mu. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "dpp/master/process/master_internal.h"

/* How many splits of the epoch order a preference looks at: a worker takes
 * one of its own files among the next this many, not one further on. */
#define WINDOW 256

/* Entries of live processes survive a table's growth. */
static bool live(void *ctx, const mp_holder *h)
{
    const sl_master_t *m = ctx;
    if (h->worker >= m->nworkers) return false;
    const mp_worker *w = &m->workers[h->worker];
    return w->conn >= 0 && w->incarnation == h->incarnation;
}

/* The live holder of (fp, split): its worker slot, or UINT32_MAX when
 * nobody holds it or its process is gone or disconnected. */
static uint32_t holder_of(const sl_master_t *m, uint64_t fp, uint32_t split)
{
    const mp_holder *h = mp_holders_find(&m->holders, fp, split);
    return h != NULL && live((void *)m, h) ? h->worker : UINT32_MAX;
}

/* out of memory: not remembered, so computed again next epoch */
static void hold(sl_master_t *m, uint64_t fp, uint32_t split, uint32_t wi)
{
    (void)mp_holders_put(&m->holders, m->a, fp, split, wi, m->workers[wi].incarnation, live, m);
}

/* Worker wi no longer holds (fp, split) (a file it lost or removed). */
static void unhold(sl_master_t *m, uint64_t fp, uint32_t split, uint32_t wi)
{
    mp_holder *h = mp_holders_find(&m->holders, fp, split);
    if (h != NULL && h->worker == wi) mp_holders_remove(&m->holders, h);
}

/* ---- which jobs ---- */

/* Is job j's source in an object store (its spec's source.table or
 * source.parquet a remote URL)? Worked out once per job. */
bool mp_cache_remote_source(mp_job *j, const char *spec_json)
{
    if (j->ac_where == 0) {
        json_t *spec = json_loads(spec_json != NULL ? spec_json : "", 0, NULL);
        json_t *src = json_object_get(spec, "source");
        const char *t = json_string_value(json_object_get(src, "table"));
        const char *p = json_string_value(json_object_get(src, "parquet"));
        bool remote = (t != NULL && sl_store_is_remote(t)) || (p != NULL && sl_store_is_remote(p));
        j->ac_where = remote ? 2 : 1;
        json_decref(spec);
    }
    return j->ac_where == 2;
}

bool mp_cache_local_job(sl_master_t *m, mp_job *j, const sl_master_state_job_status_t *st)
{
    return m->cache != NULL && st->prefix_fingerprint != 0 &&
           (j->ac.state == SL_MASTER_AUTOCACHE_CHOSEN ||
            j->ac.state == SL_MASTER_AUTOCACHE_MEASURING) &&
           mp_cache_remote_source(j, st->spec_json);
}

int mp_cache_local_mode(sl_master_t *m, mp_job *j, uint64_t fp, uint32_t wi,
                        const sl_master_lease_t *l, char *name, size_t cap)
{
    const int none = SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_NONE;
    if (wi >= m->nworkers || !m->workers[wi].cache_local) return none; /* no disk of its own */
    int n = snprintf(name, cap, "%016" PRIx64 "/split-%u.slc", fp, l->split);
    if (n < 0 || (size_t)n >= cap) return none;
    uint32_t h = holder_of(m, fp, l->split);
    if (h == wi)
        return j->ac.state == SL_MASTER_AUTOCACHE_CHOSEN
                   ? SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_READ
                   : none;            /* measuring: written already */
    if (h != UINT32_MAX) return none; /* another worker's: one copy is enough */
    bool whole = l->num_todo == 1 && l->todo[0].from_row == 0 && l->todo[0].to_row == l->num_rows;
    if (!whole) return none;
    /* held from now on: the worker commits the file before the split's
     * last batch goes out, so the epoch can end (its last commit) before
     * this worker's SPLIT_READ says so, and the next epoch's leases must
     * already know. A write that fails is told by that SPLIT_READ (the
     * entry goes); one never told (a lease taken back) costs one READ
     * lease that falls back to computing, and writes the file anew. */
    hold(m, fp, l->split, wi);
    return SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_WRITE;
}

sl_err_t mp_cache_local_lease_next(sl_master_t *m, const char *job, uint32_t wi, uint64_t now,
                                   sl_master_lease_t *l, sl_error_t *err)
{
    const char *wid = m->workers[wi].id;
    mp_job *j = mp_job_find(m, job);
    sl_master_state_job_status_t st;
    if (j == NULL || sl_master_state_job_status(m->st, job, &st, err) != SL_OK ||
        !mp_cache_local_job(m, j, &st))
        return sl_master_state_lease_next(m->st, job, wid, now, l, err);
    if (j->acl_epoch != st.epoch || j->acl_since_ms == 0) {
        j->acl_epoch = st.epoch;
        j->acl_since_ms = now;
    }
    uint64_t fp = st.prefix_fingerprint;
    uint32_t win[WINDOW];
    uint32_t n = sl_master_state_pending_window(m->st, job, win, WINDOW);
    uint32_t mine = UINT32_MAX, free_one = UINT32_MAX;
    for (uint32_t k = 0; k < n && mine == UINT32_MAX; k++) {
        uint32_t h = holder_of(m, fp, win[k]);
        if (h == wi)
            mine = win[k];
        else if (h == UINT32_MAX && free_one == UINT32_MAX)
            free_one = win[k];
    }
    uint32_t pick = mine != UINT32_MAX ? mine : free_one;
    if (pick != UINT32_MAX) return sl_master_state_lease_split(m->st, job, pick, wid, now, l, err);
    /* every split in view is on another worker's disk: wait for them a
     * while, then read from the store rather than wait on a busy worker */
    if (n > 0 && now - j->acl_since_ms < m->opts.cache_wait_ms)
        return sl_error_set(err, SL_ERR_AGAIN,
                            "job '%s': the next splits are cached on other "
                            "workers",
                            job);
    return sl_master_state_lease_next(m->st, job, wid, now, l, err);
}

void mp_cache_local_read(sl_master_t *m, uint32_t wi, const Sluice__Control__SplitRead *r)
{
    if (!r->cache_local || r->ref == NULL || r->ref->job_id == NULL) return;
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    if (sl_master_state_job_status(m->st, r->ref->job_id, &st, &err) != SL_OK ||
        st.prefix_fingerprint == 0)
        return;
    if (r->cache_held_bytes > 0)
        hold(m, st.prefix_fingerprint, r->ref->split, wi);
    else
        unhold(m, st.prefix_fingerprint, r->ref->split, wi);
}

void mp_cache_local_evicted(sl_master_t *m, uint32_t wi, const Sluice__Control__Heartbeat *h)
{
    for (size_t k = 0; k < h->n_cache_evicted; k++)
        if (h->cache_evicted[k] != NULL)
            unhold(m, h->cache_evicted[k]->prefix_fingerprint, h->cache_evicted[k]->split, wi);
}

uint64_t mp_cache_local_files(const sl_master_t *m, uint64_t fp)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < m->holders.cap; i++) {
        const mp_holder *h = &m->holders.e[i];
        if (h->used && h->fp == fp && holder_of(m, fp, h->split) != UINT32_MAX) n++;
    }
    return n;
}

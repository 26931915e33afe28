/* The master's autocache glue (docs/DESIGN.md "Autocache"): the figures
 * workers report in heartbeats, the decision per prefix fingerprint once a
 * job's first epoch has measured enough (Cachew's rule, autocache.c), the
 * cache mode of each lease, and the job view. Under m->mu throughout. */
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/log_events.h"
#include "dpp/master/process/master_internal.h"

/* A stored decision is looked for at most this often while measuring:
 * another job of the same prefix may have decided. */
#define LOOK_EVERY_MS 1000
/* A decision needs at least this fraction of an epoch's rows computed (at
 * most MIN_SAMPLES_MAX samples): enough batches that startup costs (vocab
 * loading, first stripes) weigh little. */
#define MIN_FRACTION 16
#define MIN_SAMPLES_MAX 20000
#define MIN_SAMPLES_MIN 4096

/* The job's autocache state as far as known without measuring: OFF without
 * a cache directory or for a job that is not cacheable; a decision stored
 * by an earlier job (or before a restart) is taken over. */
static void settle(sl_master_t *m, mp_job *j, uint64_t fp, uint64_t now)
{
    if (m->cache == NULL || fp == 0) {
        j->ac.state = SL_MASTER_AUTOCACHE_OFF;
        return;
    }
    if (j->ac.state == SL_MASTER_AUTOCACHE_OFF) j->ac.state = SL_MASTER_AUTOCACHE_MEASURING;
    if (j->ac.state != SL_MASTER_AUTOCACHE_MEASURING) return;
    if (j->ac_looked_ms != 0 && now - j->ac_looked_ms < LOOK_EVERY_MS) return;
    j->ac_looked_ms = now;
    sl_master_autocache_decision_t d;
    if (sl_master_autocache_load(m->cache, fp, &d)) j->ac = d;
}

static void figures_add(mp_cache_figures *f, const mp_cache_figures *c)
{
    f->compute_ns += c->compute_ns;
    f->computed_samples += c->computed_samples;
    f->computed_bytes += c->computed_bytes;
    f->source_ns += c->source_ns;
    f->source_bytes += c->source_bytes;
    f->read_ns += c->read_ns;
    f->samples += c->samples;
    f->fallbacks += c->fallbacks;
    f->files_written += c->files_written;
    f->bytes_written += c->bytes_written;
    f->write_ns += c->write_ns;
}

/* The job's figures: its workers' and those of its ended processes. */
static void figures_of(sl_master_t *m, const mp_job *j, mp_cache_figures *f)
{
    *f = j->ac_gone;
    for (uint32_t w = 0; w < m->nworkers; w++)
        if (strcmp(m->workers[w].job, j->id) == 0) figures_add(f, &m->workers[w].cache);
}

static void decide(sl_master_t *m, mp_job *j, const sl_master_state_job_status_t *st)
{
    mp_cache_figures f;
    figures_of(m, j, &f);
    /* 1/16 of an epoch, but no fewer than MIN_SAMPLES_MIN (half an epoch
     * at most): over a small table's first split a worker's start (cold
     * pages and caches) outweighs the pipeline and decides by noise */
    uint64_t min = st->total_rows / MIN_FRACTION, floor = st->total_rows / 2;
    if (floor > MIN_SAMPLES_MIN) floor = MIN_SAMPLES_MIN;
    if (min < floor) min = floor;
    sl_master_autocache_stats_t cs;
    sl_master_autocache_stats(m->cache, &cs);
    /* a source in an object store: its rate is the network's, which a
     * cache file on a worker's own disk does not pay; the directory's rate
     * (its probe reads a table file back, decoding included) stands for
     * the workers' disks (docs/STORAGE.md, "The autocache and object stores") */
    if (mp_cache_remote_source(j, st->spec_json)) f.source_ns = f.source_bytes = 0;
    sl_master_autocache_figures_t in = {.compute_ns = f.compute_ns,
                                        .computed_samples = f.computed_samples,
                                        .computed_bytes = f.computed_bytes,
                                        .source_ns = f.source_ns,
                                        .source_bytes = f.source_bytes,
                                        .read_bytes_per_s = cs.read_bytes_per_s,
                                        .min_samples = min < 1                 ? 1
                                                       : min > MIN_SAMPLES_MAX ? MIN_SAMPLES_MAX
                                                                               : min};
    sl_master_autocache_decision_t d = sl_master_autocache_decide(&in);
    j->ac = d;
    if (d.state == SL_MASTER_AUTOCACHE_MEASURING) return;
    /* what was written while measuring is not wanted */
    if (d.state == SL_MASTER_AUTOCACHE_DECLINED)
        sl_master_autocache_drop(m->cache, st->prefix_fingerprint);
    sl_error_t err = {0};
    if (sl_master_autocache_store(m->cache, st->prefix_fingerprint, &d, &err) != SL_OK)
        sl_log_kv(SL_LOG_WARN, SL_EV(AUTOCACHE_STORE_FAILED), (SL_KV_STR("error", err.msg)),
                  "autocache decision not stored (a restart measures again): %s", err.msg);
    sl_log_kv(SL_LOG_INFO, SL_EV(AUTOCACHE_DECIDED),
              (SL_KV_STR("job", j->id),
               SL_KV_STR("decision", sl_master_autocache_state_name(d.state)),
               SL_KV_U64("samples", d.samples)),
              "job %s: autocache %s: computing costs %.2f us a sample, reading the cache %.2f us "
              "(estimated from %.0f MB/s) over %" PRIu64 " samples",
              j->id, sl_master_autocache_state_name(d.state), d.compute_us_per_sample,
              d.cache_us_per_sample, d.read_mb_per_s, d.samples);
}

int mp_cache_lease(sl_master_t *m, const char *job, const sl_master_state_job_status_t *st,
                   const sl_master_lease_t *l, uint32_t wi, char *path, size_t cap, bool *local)
{
    *local = false;
    mp_job *j = mp_job_find(m, job);
    if (j == NULL) return SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_NONE;
    uint64_t fp = st->prefix_fingerprint;
    settle(m, j, fp, sl_clock_ms());
    /* a source in an object store: the files live on the workers' disks */
    if (mp_cache_local_job(m, j, st)) {
        *local = true;
        return mp_cache_local_mode(m, j, fp, wi, l, path, cap);
    }
    /* while measuring, splits are written too (as Cachew does), so that the
     * second epoch can read them all if the cache is chosen */
    if ((j->ac.state != SL_MASTER_AUTOCACHE_CHOSEN &&
         j->ac.state != SL_MASTER_AUTOCACHE_MEASURING) ||
        !sl_master_autocache_path(m->cache, fp, l->split, path, cap))
        return SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_NONE;
    if (j->ac.state == SL_MASTER_AUTOCACHE_CHOSEN &&
        sl_master_autocache_use(m->cache, fp, l->split))
        return SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_READ;
    if (j->ac.state == SL_MASTER_AUTOCACHE_MEASURING &&
        sl_master_autocache_use(m->cache, fp, l->split))
        return SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_NONE; /* written already */
    /* only a whole split makes a whole cache file */
    bool whole = l->num_todo == 1 && l->todo[0].from_row == 0 && l->todo[0].to_row == l->num_rows;
    /* the prefix's directory is made when the decision is stored: splits
     * leased while measuring would have none to be written in */
    return whole && sl_master_autocache_prefix_dir(m->cache, fp)
               ? SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_WRITE
               : SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_NONE;
}

void mp_cache_figures_in(sl_master_t *m, mp_worker *w, const Sluice__Control__CacheFigures *c)
{
    if (c == NULL) return; /* a worker without the autocache */
    mp_job *wj = w->job[0] != '\0' ? mp_job_find(m, w->job) : NULL;
    /* counters that went back: another process under this worker id */
    if (wj != NULL &&
        (c->computed_samples < w->cache.computed_samples || c->samples < w->cache.samples))
        figures_add(&wj->ac_gone, &w->cache);
    w->cache = (mp_cache_figures){.compute_ns = c->compute_ns,
                                  .computed_samples = c->computed_samples,
                                  .computed_bytes = c->computed_bytes,
                                  .source_ns = c->source_ns,
                                  .source_bytes = c->source_bytes,
                                  .read_ns = c->read_ns,
                                  .samples = c->samples,
                                  .fallbacks = c->fallbacks,
                                  .files_written = c->files_written,
                                  .bytes_written = c->bytes_written,
                                  .write_ns = c->write_ns};
    if (m->cache == NULL) return;
    uint64_t now = sl_clock_ms();
    sl_master_autocache_evict(m->cache, now, 2000);
    mp_job *j = w->job[0] != '\0' ? mp_job_find(m, w->job) : NULL;
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    if (j == NULL || sl_master_state_job_status(m->st, j->id, &st, &err) != SL_OK) return;
    settle(m, j, st.prefix_fingerprint, now);
    if (j->ac.state == SL_MASTER_AUTOCACHE_MEASURING) decide(m, j, &st);
}

void mp_cache_view(sl_master_t *m, mp_job *j, sl_master_job_view_t *v)
{
    mp_cache_figures f;
    figures_of(m, j, &f);
    v->prefix_fingerprint = v->status.prefix_fingerprint;
    settle(m, j, v->prefix_fingerprint, sl_clock_ms());
    v->autocache = j->ac;
    if (j->ac.state == SL_MASTER_AUTOCACHE_MEASURING) { /* the figures so far */
        v->autocache.compute_us_per_sample =
            f.computed_samples ? (double)f.compute_ns / 1e3 / (double)f.computed_samples : 0;
        v->autocache.samples = f.computed_samples;
        v->autocache.source_mb_per_s =
            f.source_ns ? (double)f.source_bytes / ((double)f.source_ns / 1e9) / 1e6 : 0;
    }
    v->cache_samples = f.samples;
    v->cache_read_ns = f.read_ns;
    v->cache_fallbacks = f.fallbacks;
    v->cache_files_written = f.files_written;
    v->cache_bytes_written = f.bytes_written;
    v->computed_samples = f.computed_samples;
    v->compute_ns = f.compute_ns;
    v->cache_on_workers = m->cache != NULL && v->prefix_fingerprint != 0 &&
                          mp_cache_remote_source(j, v->status.spec_json);
    v->cache_worker_files =
        v->cache_on_workers ? mp_cache_local_files(m, v->prefix_fingerprint) : 0;
    v->cache_dir = m->cache != NULL ? sl_master_autocache_dir(m->cache) : NULL;
    if (m->cache != NULL) sl_master_autocache_stats(m->cache, &v->cache_dir_stats);
}

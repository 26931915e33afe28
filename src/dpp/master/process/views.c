/* What the admin routes read of the master (master.h), each under m->mu:
 * one visit over its status, each job's view (its state, autoscaler,
 * workers, clients, shared passes, Kafka partitions, autocache) and each
 * worker's, and the desired worker counts an executor acts on. */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "dpp/master/process/master_internal.h"

/* Needs m->mu. @return false when the state no longer knows the job. */
static bool job_view_locked(sl_master_t *m, const mp_job *j, sl_master_job_view_t *v)
    SL_REQUIRES(m->mu)
{
    sl_error_t err = {0};
    if (sl_master_state_job_status(m->st, j->id, &v->status, &err) != SL_OK) return false;
    v->id = j->id;
    v->min_workers = j->as.opts.min_workers;
    v->max_workers = j->as.opts.max_workers;
    v->desired_workers = j->as.desired;
    v->granted_workers = j->granted;
    v->workers = v->clients = 0;
    v->bytes_encoded = v->bytes_expanded = 0;
    v->shared_batches = v->shared_bytes = v->shared_cpu_ns = 0;
    for (uint32_t w = 0; w < m->nworkers; w++) {
        const mp_worker *mw = &m->workers[w];
        if (strcmp(mw->job, j->id) != 0) continue;
        v->workers += mw->conn >= 0;
        v->bytes_encoded += mw->bytes_encoded;
        v->bytes_expanded += mw->bytes_expanded;
        v->shared_batches += mw->shared_batches;
        v->shared_bytes += mw->shared_bytes;
        v->shared_cpu_ns += mw->shared_cpu_ns;
    }
    for (uint32_t c = 0; c < m->opts.max_connections; c++)
        v->clients += m->conns[c].fd >= 0 && m->conns[c].kind == MP_CLIENT &&
                      strcmp(m->conns[c].job, j->id) == 0;
    v->trainer_wait = j->last_wait;
    v->worker_busy = j->last_busy;
    v->autoscale_reason = j->as.reason;
    v->history = &j->hist;
    v->samples_per_s = j->hist.samples_per_s;
    uint64_t done, total;
    mp_rows_progress(&v->status, &done, &total);
    v->eta_s = v->status.finished || v->status.failed
                   ? -1
                   : sl_master_history_eta_s(&j->hist, done, total);
    v->num_kafka = mp_kafka_view(m, j->id, &v->kafka);
    v->num_shares_with = mp_fp_peers_locked(m, j->id);
    v->shares_with = m->fp_peers;
    mp_cache_view(m, (mp_job *)j, v);
    return true;
}

sl_err_t sl_master_visit(sl_master_t *m, const char *job_id, const sl_master_visitor_t *v,
                         sl_error_t *err)
{
    sl_mutex_lock(&m->mu);
    mp_job *only = job_id != NULL ? mp_job_find(m, job_id) : NULL;
    if (job_id != NULL && only == NULL) {
        sl_mutex_unlock(&m->mu);
        return sl_error_set(err, SL_ERR_NOT_FOUND, "no job '%s'", job_id);
    }
    if (v->status != NULL) {
        sl_master_status_view_t st = {.ready = !m->failed,
                                      .address = m->address,
                                      .uptime_s = (sl_clock_ms() - m->started_ms) / 1000,
                                      .workers = m->nworkers_connected,
                                      .clients = m->nclients_connected,
                                      .failure = m->failure,
                                      .has_executor = m->has_exec,
                                      .executor = m->exec};
        sl_master_state_counters(m->st, &st.counters);
        sl_master_store_counters(m->state_store, &st.store);
        v->status(v->ctx, &st);
    }
    if (v->job != NULL) {
        mp_share_locked(m);
        sl_master_job_view_t jv;
        for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
            const mp_job *j = &m->jobs[i];
            if (j->used && (only == NULL || j == only) && job_view_locked(m, j, &jv))
                v->job(v->ctx, &jv);
        }
    }
    uint64_t now = sl_clock_ms();
    for (uint32_t i = 0; v->worker != NULL && i < m->nworkers; i++) {
        const mp_worker *w = &m->workers[i];
        sl_master_worker_view_t wv = {.id = w->id,
                                      .job = w->job,
                                      .serve_address = w->serve,
                                      .admin_address = w->admin,
                                      .connected = w->conn >= 0,
                                      .leases = w->leases,
                                      .queued_batches = w->queued,
                                      .busy = w->busy,
                                      .memory_used = w->memory,
                                      .batches_sent = w->batches,
                                      .samples_sent = w->samples,
                                      .last_heartbeat_ms_ago = now - w->last_seen_ms};
        v->worker(v->ctx, &wv);
    }
    sl_mutex_unlock(&m->mu);
    return SL_OK;
}

uint32_t sl_master_desired(sl_master_t *m, sl_master_desired_t *out, uint32_t cap)
{
    uint32_t n = 0;
    sl_mutex_lock(&m->mu);
    mp_share_locked(m);
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        mp_job *j = &m->jobs[i];
        if (!j->used) continue;
        if (n < cap) {
            sl_master_desired_t *d = &out[n];
            memset(d, 0, sizeof *d);
            snprintf(d->job_id, sizeof d->job_id, "%s", j->id);
            d->workers = j->as.desired;
            d->granted = j->granted;
            for (uint32_t w = 0; w < m->nworkers; w++)
                d->registered += m->workers[w].conn >= 0 && strcmp(m->workers[w].job, j->id) == 0;
            sl_master_state_job_status_t st;
            sl_error_t err = {0};
            bool known = sl_master_state_job_status(m->st, j->id, &st, &err) == SL_OK;
            d->finished = known && st.finished;
            d->failed = known && st.failed;
        }
        n++;
    }
    sl_mutex_unlock(&m->mu);
    return n;
}

/* The master's periodic look at its jobs (mp_tick, from the control loop,
 * under m->mu): expired leases reclaimed, idle client records evicted and,
 * once an autoscaler period, each job's figures observed by its
 * autoscaler, and its decisions, progress and history recorded. Also the
 * fleet's fair share among the jobs' desired counts (mp_share_locked) and
 * an operator's override of a job's count (sl_master_job_scale). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/log_events.h"
#include "dpp/master/process/master_internal.h"

void mp_share_locked(sl_master_t *m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        mp_job *j = &m->jobs[i];
        if (!j->used) continue;
        sl_master_state_job_status_t st;
        sl_error_t err = {0};
        bool finished = sl_master_state_job_status(m->st, j->id, &st, &err) == SL_OK &&
                        (st.finished || st.failed);
        m->share[n++] = (sl_master_autoscale_share_t){.job_id = j->id,
                                                      .desired = finished ? 0 : j->as.desired,
                                                      .min_workers = j->as.opts.min_workers};
    }
    sl_master_autoscale_fair_share(m->share, n, m->opts.max_fleet_workers);
    n = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        if (m->jobs[i].used) m->jobs[i].granted = m->share[n++].granted;
}

/* Idle clients are looked for ten times per idle period (at most once a
 * second): a record lives at most 1.1 idle periods past its last use. */
static uint64_t evict_every(const sl_master_t *m)
{
    uint64_t every = m->opts.client_idle_ms / 10;
    return every < 1000 ? every : 1000;
}

/* Client records of connected clients are in use; the others go once idle
 * for client_idle_ms (journaled: a restarted master forgets them too). */
static void evict_idle_clients(sl_master_t *m, uint64_t now) SL_REQUIRES(m->mu)
{
    if (m->failed) return;
    for (uint32_t c = 0; c < m->opts.max_connections; c++)
        if (m->conns[c].fd >= 0 && m->conns[c].kind == MP_CLIENT)
            sl_master_state_client_touch(m->st, m->conns[c].client, now);
    sl_error_t err = {0};
    if (sl_master_state_evict_clients(m->st, now, m->opts.client_idle_ms, NULL, &err) != SL_OK)
        mp_fail(m, &err);
}

/* Log what changed in a job since the last look: epochs done, the job
 * finished or failed. Looked at once an autoscaler period, so these
 * records come up to a second late and are never written twice, nor
 * again after a restart (adopt_jobs starts from the journal's state). */
static void log_progress(sl_master_t *m, mp_job *j) SL_REQUIRES(m->mu)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    if (j->logged_end || sl_master_state_job_status(m->st, j->id, &st, &err) != SL_OK) return;
    for (; j->logged_epoch < st.epoch; j->logged_epoch++)
        sl_log_kv(SL_LOG_INFO, SL_EV(EPOCH_DONE),
                  (SL_KV_STR("job", j->id), SL_KV_U64("epoch", j->logged_epoch),
                   SL_KV_U64("epochs", st.epochs), SL_KV_U64("rows", st.total_rows)),
                  "job %s: epoch %u of %u done (%" PRIu64 " rows)", j->id, j->logged_epoch + 1,
                  st.epochs, st.total_rows);
    if (st.finished) {
        j->logged_end = true;
        sl_log_kv(SL_LOG_INFO, SL_EV(JOB_FINISHED),
                  (SL_KV_STR("job", j->id), SL_KV_U64("epochs", st.epochs),
                   SL_KV_U64("batches", st.batches), SL_KV_U64("samples", st.samples)),
                  "job %s finished: %u epoch%s, %" PRIu64 " samples", j->id, st.epochs,
                  st.epochs == 1 ? "" : "s", st.samples);
    } else if (st.failed) {
        j->logged_end = true;
        sl_log_kv(SL_LOG_ERROR, SL_EV(JOB_FAILED),
                  (SL_KV_STR("job", j->id), SL_KV_U64("split", st.failure_split),
                   SL_KV_U64("epoch", st.failure_epoch), SL_KV_STR("file", st.failure_file),
                   SL_KV_I64("stripe", st.failure_stripe),
                   SL_KV_STR("error", sl_err_str(st.failure_code)),
                   SL_KV_STR("reason", st.failure_message)),
                  "job %s failed: split %u (epoch %u) could not be read: %s", j->id,
                  st.failure_split, st.failure_epoch, st.failure_message);
    }
}

/* The wall clock, for what a person reads (history points' times). */
static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The job's figures bytes: what its workers encoded and would have without
 * dedup (heartbeats), for the dedup factor. */
static double dedup_factor(const sl_master_t *m, const char *job) SL_REQUIRES(m->mu)
{
    uint64_t enc = 0, exp = 0;
    for (uint32_t w = 0; w < m->nworkers; w++)
        if (strcmp(m->workers[w].job, job) == 0) {
            enc += m->workers[w].bytes_encoded;
            exp += m->workers[w].bytes_expanded;
        }
    return enc > 0 ? (double)exp / (double)enc : 1.0;
}

/* Rows done so far over every epoch, and in all (0: no end, a stream). */
void mp_rows_progress(const sl_master_state_job_status_t *st, uint64_t *done, uint64_t *total)
{
    *total = st->total_rows * st->epochs;
    *done = st->finished ? *total : (uint64_t)st->epoch * st->total_rows + st->committed_rows;
}

/* Is a trainer client of the job connected? O(connections). */
static bool has_clients(const sl_master_t *m, const char *job) SL_REQUIRES(m->mu)
{
    for (uint32_t c = 0; c < m->opts.max_connections; c++)
        if (m->conns[c].fd >= 0 && m->conns[c].kind == MP_CLIENT &&
            strcmp(m->conns[c].job, job) == 0)
            return true;
    return false;
}

/* One look at the job for its history (history.h). */
static void history_tick(sl_master_t *m, mp_job *j, uint64_t now, uint32_t live) SL_REQUIRES(m->mu)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    if (sl_master_state_job_status(m->st, j->id, &st, &err) != SL_OK) return;
    uint64_t done, total;
    mp_rows_progress(&st, &done, &total);
    sl_master_history_input_t in = {.mono_ms = now,
                                    .wall_ms = wall_ms(),
                                    .samples = st.samples,
                                    .rows = done,
                                    .trainer_wait = (float)j->last_wait,
                                    .worker_busy = (float)j->last_busy,
                                    .dedup_factor = (float)dedup_factor(m, j->id),
                                    .workers = (uint16_t)(live > UINT16_MAX ? UINT16_MAX : live),
                                    .desired = (uint16_t)j->as.desired};
    sl_master_history_tick(&j->hist, &in);
}

/* An autoscaler decision that changed the job's desired count. */
void mp_log_decision(mp_job *j, const char *by)
{
    if (j->as.desired == j->logged_desired) return;
    sl_master_history_decide(&j->hist, wall_ms(), j->logged_desired, j->as.desired, by,
                             j->as.reason);
    sl_log_kv(SL_LOG_INFO, SL_EV(AUTOSCALE),
              (SL_KV_STR("job", j->id), SL_KV_U64("from", j->logged_desired),
               SL_KV_U64("to", j->as.desired), SL_KV_STR("by", by),
               SL_KV_F64("trainer_wait", j->last_wait), SL_KV_F64("worker_busy", j->last_busy),
               SL_KV_STR("reason", j->as.reason)),
              "job %s: desired workers %u -> %u (%s)", j->id, j->logged_desired, j->as.desired,
              j->as.reason);
    j->logged_desired = j->as.desired;
}

void mp_tick(sl_master_t *m, uint64_t now, uint64_t heard)
{
    sl_error_t err = {0};
    /* as of heard, not now: the round's journal sync came in between, and
     * a heartbeat sent during it is read only next round (expire compares
     * expiry > heard; a lease renewed since, by a frame of this round or
     * a held answer, counts from that later time) */
    if (heard - m->last_expire_ms >= 50) {
        m->last_expire_ms = heard;
        if (!m->failed && sl_master_state_expire(m->st, heard, NULL, &err) != SL_OK)
            mp_fail(m, &err);
    }
    if (now - m->last_evict_ms >= evict_every(m)) {
        m->last_evict_ms = now;
        evict_idle_clients(m, now);
    }
    if (now - m->last_observe_ms < m->opts.autoscale_every_ms) return;
    m->last_observe_ms = now;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        mp_job *j = &m->jobs[i];
        if (!j->used) continue;
        double busy = 0;
        uint32_t live = 0;
        for (uint32_t w = 0; w < m->nworkers; w++) {
            const mp_worker *wk = &m->workers[w];
            if (wk->conn < 0 || strcmp(wk->job, j->id) != 0) continue;
            busy += wk->busy;
            live++;
        }
        j->last_busy = live > 0 ? busy / live : 0;
        /* No report in this interval (a client reports every refresh_ms,
         * 1 s by default like this interval, so some intervals catch none;
         * under load a report comes late): "no news" is not "no wait", the
         * last measure stands while the job has clients. */
        if (j->elapsed_ns > 0)
            j->last_wait = (double)j->wait_ns / (double)j->elapsed_ns;
        else if (!has_clients(m, j->id))
            j->last_wait = 0;
        if (j->last_wait > 1) j->last_wait = 1;
        j->wait_ns = j->elapsed_ns = 0;
        sl_master_autoscale_observation_t obs = {.now_ns = now * 1000000ull,
                                                 .trainer_wait = j->last_wait,
                                                 .worker_busy = j->last_busy,
                                                 .workers = live};
        sl_master_autoscale_observe(&j->as, &obs);
        mp_log_decision(j, "autoscaler");
        log_progress(m, j);
        history_tick(m, j, now, live);
    }
}

sl_err_t sl_master_job_scale(sl_master_t *m, const char *job_id, uint32_t workers, uint32_t *set,
                             sl_error_t *err)
{
    sl_mutex_lock(&m->mu);
    mp_job *j = mp_job_find(m, job_id);
    sl_err_t rc = SL_OK;
    if (j == NULL)
        rc = sl_error_set(err, SL_ERR_NOT_FOUND, "no job '%s'", job_id);
    else {
        uint32_t got = sl_master_autoscale_override(&j->as, workers, sl_clock_ms() * 1000000ull);
        mp_log_decision(j, "operator");
        if (set != NULL) *set = got;
    }
    sl_mutex_unlock(&m->mu);
    return rc;
}

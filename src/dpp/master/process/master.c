/* The DPP master process (master.h): lifecycle, the calls its admin routes
 * make (submit, remove, scale, the views), and the per-job autoscaler. Its
 * Prometheus text is in metrics.c, the control connections in control.c
 * (a worker's frames in control_workers.c, a client's in
 * control_clients.c), who may connect in guard.c, the HTTP routes in
 * admin.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/master/process/master_internal.h"
#include "dpp/pipeline/lenient.h"
#include "dpp/pipeline/plan.h"
#include "warehouse/pq_dataset.h"
#include "warehouse/warehouse.h"

mp_job *mp_job_find(sl_master_t *m, const char *id)
{
    for (uint32_t i = 0; i < m->opts.max_jobs; i++)
        if (m->jobs[i].used && strcmp(m->jobs[i].id, id) == 0) return &m->jobs[i];
    return NULL;
}

uint32_t mp_fp_peers_locked(sl_master_t *m, const char *job_id)
{
    sl_master_state_job_status_t me, st;
    sl_error_t err = {0};
    if (sl_master_state_job_status(m->st, job_id, &me, &err) != SL_OK || !me.share ||
        me.plan_fingerprint == 0)
        return 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        const mp_job *j = &m->jobs[i];
        if (!j->used || strcmp(j->id, job_id) == 0 ||
            sl_master_state_job_status(m->st, j->id, &st, &err) != SL_OK)
            continue;
        if (st.share && st.plan_fingerprint == me.plan_fingerprint) m->fp_peers[n++] = j->id;
    }
    return n;
}

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

mp_job *mp_job_add(sl_master_t *m, const char *id, uint32_t min_w, uint32_t max_w, uint32_t initial)
{
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        mp_job *j = &m->jobs[i];
        if (j->used) continue;
        memset(j, 0, sizeof *j);
        j->used = true;
        snprintf(j->id, sizeof j->id, "%s", id);
        sl_master_autoscale_opts_t o = m->tuning;
        o.min_workers = min_w > 0 ? min_w : 1;
        o.max_workers = max_w >= o.min_workers ? max_w : o.min_workers;
        sl_master_autoscale_init(&j->as, &o, initial);
        sl_master_history_init(&j->hist, m->opts.history_every_ms);
        return j;
    }
    return NULL;
}

void mp_fail(sl_master_t *m, const sl_error_t *err)
{
    if (err != NULL && err->code == SL_ERR_NOMEM) {
        /* One request refused, nothing changed: a state transition that
         * runs out of memory leaves the state and its journal as they were
         * (tests/unit/master_state_test.c walks every allocation failure),
         * and its peer retries. */
        sl_log_kv(SL_LOG_WARN, SL_EV(OUT_OF_MEMORY), (SL_KV_STR("error", err->msg)),
                  "out of memory, request refused: %s", err->msg);
        return;
    }
    if (m->failed) return;
    m->failed = true;
    snprintf(m->failure, sizeof m->failure, "%.200s", err != NULL ? err->msg : "journal failure");
    /* recover.c tries the disk again from now on, with backoff */
    m->recover_delay_ms = MP_RECOVER_FIRST_MS;
    m->recover_at_ms = sl_clock_ms() + m->recover_delay_ms;
    sl_log_kv(SL_LOG_ERROR, SL_EV(STATE_FAILED), (SL_KV_STR("reason", m->failure)),
              "state failure, refusing changes: %s", m->failure);
}

/* The first half of a sync whose wait is done outside m->mu
 * (wait_unlocked): what was appended so far is sealed, *ticket names it. */
static sl_err_t begin_locked(sl_master_t *m, uint64_t *ticket, sl_error_t *err) SL_REQUIRES(m->mu)
{
    sl_err_t rc = sl_master_store_sync_begin(m->state_store, ticket, err);
    if (rc != SL_OK) mp_fail(m, err);
    /* m->state_store is used without the lock until wait_unlocked: recover.c
     * does not replace it meanwhile */
    if (rc == SL_OK) m->st_pins++;
    return rc;
}

/* The second half, without m->mu, after every begin_locked that returned
 * SL_OK: the caller answers only once it returned SL_OK (a failure fails
 * the master). */
static sl_err_t wait_unlocked(sl_master_t *m, uint64_t ticket, sl_error_t *err) SL_EXCLUDES(m->mu)
{
    sl_err_t rc = sl_master_store_sync_wait(m->state_store, ticket, err);
    sl_mutex_lock(&m->mu);
    m->st_pins--;
    if (rc != SL_OK) mp_fail(m, err);
    sl_mutex_unlock(&m->mu);
    return rc;
}

sl_err_t mp_sync_begin(sl_master_t *m, uint64_t *ticket, sl_error_t *err)
{
    return begin_locked(m, ticket, err);
}

sl_err_t mp_sync_wait(sl_master_t *m, uint64_t ticket, sl_error_t *err)
{
    return wait_unlocked(m, ticket, err);
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
static void rows_progress(const sl_master_state_job_status_t *st, uint64_t *done, uint64_t *total)
{
    *total = st->total_rows * st->epochs;
    *done = st->finished ? *total : (uint64_t)st->epoch * st->total_rows + st->committed_rows;
}

/* One look at the job for its history (history.h). */
static void history_tick(sl_master_t *m, mp_job *j, uint64_t now, uint32_t live) SL_REQUIRES(m->mu)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    if (sl_master_state_job_status(m->st, j->id, &st, &err) != SL_OK) return;
    uint64_t done, total;
    rows_progress(&st, &done, &total);
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
static void log_decision(mp_job *j, const char *by)
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

void mp_tick(sl_master_t *m, uint64_t now)
{
    sl_error_t err = {0};
    if (now - m->last_expire_ms >= 50) {
        m->last_expire_ms = now;
        if (!m->failed && sl_master_state_expire(m->st, now, NULL, &err) != SL_OK) mp_fail(m, &err);
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
        j->last_wait = j->elapsed_ns > 0 ? (double)j->wait_ns / (double)j->elapsed_ns : 0;
        if (j->last_wait > 1) j->last_wait = 1;
        j->wait_ns = j->elapsed_ns = 0;
        sl_master_autoscale_observation_t obs = {.now_ns = now * 1000000ull,
                                                 .trainer_wait = j->last_wait,
                                                 .worker_busy = j->last_busy,
                                                 .workers = live};
        sl_master_autoscale_observe(&j->as, &obs);
        log_decision(j, "autoscaler");
        log_progress(m, j);
        history_tick(m, j, now, live);
    }
}

/* ---- lifecycle -------------------------------------------------------------------- */

static void destroy(sl_master_t *m)
{
    if (m == NULL) return;
    mp_kafka_watch_stop(m); /* idempotent */
    mp_server_stop(m);      /* idempotent, and frees what a failed start got */
    if (m->state_store != NULL)
        sl_master_store_destroy(m->state_store); /* and m->st, which it owns */
    else
        sl_master_state_destroy(m->st);
    sl_strfree(m->a, m->state_dir);
    sl_master_autocache_destroy(m->cache);
    mp_holders_free(m->a, &m->holders);
    sl_free(m->a, m->kpos, (size_t)m->cap_kpos * sizeof *m->kpos);
    sl_free(m->a, m->kview, (size_t)m->cap_kview * sizeof *m->kview);
    sl_free(m->a, m->jobs, sl_mul_size(m->opts.max_jobs, sizeof *m->jobs));
    sl_free(m->a, m->share, sl_mul_size(m->opts.max_jobs, sizeof *m->share));
    sl_free(m->a, m->fp_peers, sl_mul_size(m->opts.max_jobs, sizeof *m->fp_peers));
    sl_free(m->a, m->workers, (size_t)m->cap_workers * sizeof *m->workers);
    sl_rpc_secret_free(m->secret);
    sl_mutex_destroy(&m->mu);
    sl_free(m->a, m, sizeof *m);
}

/* Jobs found in the state directory get their process-side records back
 * (under m->mu: at start, though no other thread runs yet, the rule has
 * no exceptions; and after a recovery, recover.c, where jobs known
 * already keep theirs). */
sl_err_t mp_adopt_jobs(sl_master_t *m, sl_error_t *err)
{
    const char *ids[1024];
    uint32_t n = sl_master_state_job_ids(m->st, ids, 1024);
    for (uint32_t i = 0; i < n && i < 1024; i++) {
        if (mp_job_find(m, ids[i]) != NULL) continue; /* a recovered state's, known already */
        sl_master_state_job_status_t st;
        if (sl_master_state_job_status(m->st, ids[i], &st, err) != SL_OK) return err->code;
        mp_job *j = mp_job_add(m, ids[i], st.min_workers, st.max_workers, st.min_workers);
        if (j == NULL) return sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': no room", ids[i]);
        /* the log told of what the journal holds before the restart */
        j->logged_epoch = st.epoch;
        j->logged_end = st.finished || st.failed;
        j->logged_desired = j->as.desired;
    }
    return SL_OK;
}

sl_err_t sl_master_start(const sl_master_opts_t *opts, sl_master_t **out, sl_error_t *err)
{
    *out = NULL;
    const sl_allocator_t *a =
        opts != NULL && opts->allocator != NULL ? opts->allocator : sl_allocator_default();
    sl_master_t *m = sl_calloc(a, 1, sizeof *m);
    if (m == NULL) return sl_error_set(err, SL_ERR_NOMEM, "master");
    m->opts = opts != NULL ? *opts : (sl_master_opts_t){0};
    sl_master_opts_t *o = &m->opts;
    if (o->lease_timeout_ms == 0) o->lease_timeout_ms = 10000;
    if (o->heartbeat_ms == 0)
        o->heartbeat_ms = o->lease_timeout_ms / 4 ? o->lease_timeout_ms / 4 : 1;
    if (o->autoscale_every_ms == 0) o->autoscale_every_ms = 1000;
    if (o->history_every_ms == 0) o->history_every_ms = 10000;
    if (o->max_connections == 0) o->max_connections = 1024;
    if (o->max_jobs == 0) o->max_jobs = 64;
    if (o->max_workers == 0) o->max_workers = 65536;
    if (o->max_clients == 0) o->max_clients = 4096;
    if (o->client_idle_ms == 0) o->client_idle_ms = 600000;
    if (o->max_split_failures == 0) o->max_split_failures = 3;
    if (o->max_answers == 0) o->max_answers = 4096;
    if (o->handshake_timeout_ms == 0) o->handshake_timeout_ms = 10000;
    if (o->client_conn_idle_ms == 0) o->client_conn_idle_ms = 60000;
    if (o->worker_conn_idle_ms == 0) o->worker_conn_idle_ms = 3 * o->lease_timeout_ms;
    if (o->kafka_watch_ms == 0) o->kafka_watch_ms = 2000;
    if (o->cache_wait_ms == 0) o->cache_wait_ms = 2000;
    m->tuning = o->autoscale != NULL ? *o->autoscale : sl_master_autoscale_opts_default(1, 1);
    o->autoscale = NULL;
    m->a = a;
    m->listen_fd = m->wake[0] = m->wake[1] = m->epfd = -1;
    sl_mutex_init(&m->mu);
    m->jobs = sl_calloc(a, o->max_jobs, sizeof *m->jobs);
    m->share = sl_calloc(a, o->max_jobs, sizeof *m->share);
    m->fp_peers = sl_calloc(a, o->max_jobs, sizeof *m->fp_peers);
    const char *secret = o->cluster_secret;
    o->cluster_secret = NULL;            /* borrowed for the call only: m->secret is the copy */
    m->secret = sl_strdup(NULL, secret); /* freed by sl_rpc_secret_free */
    if (m->jobs == NULL || m->share == NULL || m->fp_peers == NULL ||
        (secret != NULL && m->secret == NULL)) {
        destroy(m);
        return sl_error_set(err, SL_ERR_NOMEM, "master");
    }
    m->started_ms = sl_clock_ms();
    sl_master_state_opts_t so = {.lease_timeout_ms = o->lease_timeout_ms,
                                 .max_jobs = o->max_jobs,
                                 .max_workers = o->max_workers,
                                 .max_clients = o->max_clients,
                                 .max_answers = o->max_answers,
                                 .kafka_chunks_ahead = o->kafka_chunks_ahead,
                                 .allocator = m->a};
    /* kept for recover.c, which opens the directory again */
    m->state_opts = so;
    m->store_opts =
        (sl_master_store_opts_t){.compact_bytes = o->compact_bytes, .compact_in_background = true};
    m->state_dir = o->state_dir != NULL ? sl_strdup(m->a, o->state_dir) : NULL;
    if (o->state_dir != NULL && m->state_dir == NULL) {
        destroy(m);
        return sl_error_set(err, SL_ERR_NOMEM, "master");
    }
    sl_master_journal_open_info_t info = {0};
    sl_err_t rc;
    if (m->state_dir != NULL) {
        sl_master_store_opts_t sto = m->store_opts;
        sto.dir = m->state_dir;
        rc = sl_master_store_open(&sto, &so, m->started_ms, &m->state_store, &info, err);
        if (rc == SL_OK) m->st = sl_master_store_state(m->state_store);
    } else {
        rc = sl_master_state_new(&so, &m->st, err);
    }
    if (rc != SL_OK) {
        sl_error_prefix(err, "state %s: ", o->state_dir ? o->state_dir : "(memory)");
        destroy(m);
        return rc;
    }
    if (info.warning[0] != '\0')
        sl_log_kv(
            SL_LOG_WARN, SL_EV(JOURNAL_TAIL_CUT),
            (SL_KV_U64("offset", info.truncated_at), SL_KV_U64("bytes", info.truncated_bytes)),
            "%s", info.warning);
    o->state_dir = NULL; /* borrowed for the call only */
    if (o->cache_dir != NULL &&
        (rc = sl_master_autocache_open(o->cache_dir, o->cache_max_bytes, o->cache_probe_bytes, m->a,
                                       &m->cache, err)) != SL_OK) {
        destroy(m);
        return rc;
    }
    o->cache_dir = NULL; /* borrowed for the call only: sl_master_autocache_dir has it */
    sl_mutex_lock(&m->mu);
    rc = mp_adopt_jobs(m, err);
    sl_mutex_unlock(&m->mu);
    if (rc == SL_OK) rc = mp_server_start(m, err);
    if (rc == SL_OK) rc = mp_kafka_watch_start(m, err);
    if (rc != SL_OK) {
        mp_kafka_watch_stop(m);
        destroy(m);
        return rc;
    }
    *out = m;
    return SL_OK;
}

void sl_master_stop(sl_master_t *m)
{
    if (m == NULL) return;
    mp_kafka_watch_stop(m);
    mp_server_stop(m); /* idempotent, and frees what a failed start got */
    sl_error_t err = {0};
    sl_mutex_lock(&m->mu);
    if (!m->failed && sl_master_store_sync(m->state_store, &err) != SL_OK)
        sl_log_kv(SL_LOG_ERROR, SL_EV(FINAL_SYNC_FAILED), (SL_KV_STR("reason", err.msg)),
                  "final sync: %s", err.msg);
    sl_mutex_unlock(&m->mu);
    destroy(m);
}

const sl_allocator_t *sl_master_allocator(const sl_master_t *m)
{
    return m->a;
}

uint16_t sl_master_port(const sl_master_t *m)
{
    return m->port;
}

const char *sl_master_address(const sl_master_t *m)
{
    return m->address;
}

bool sl_master_ready(sl_master_t *m)
{
    sl_mutex_lock(&m->mu);
    bool ok = !m->failed;
    sl_mutex_unlock(&m->mu);
    return ok;
}

/* ---- submit ----------------------------------------------------------------------- */

/* Everything the workers will do with the spec before reading a row, done
 * here so that a job that cannot run is refused instead of failing in
 * every worker: parse, open the table (its schema), bind the spec to it as
 * a worker's plan does, and check every file the spec names (vocabularies:
 * present, regular, under their cap; not read), then cut the table into
 * splits. A Kafka job (source.kafka) binds to its inline schema and is cut
 * into partition chunks with the brokers' help (kafka_splits.c). Every
 * problem goes to *problems by its path in the spec. */
static void add_problem(void *ctx, const char *problem)
{
    sl_pipeline_problems_add(ctx, "%s", problem);
}

/* A Parquet dataset (source.parquet): its mapping resolved against the
 * first file (the schema the plan binds to), then every footer read and
 * cut into splits of row groups, those the job's timestamp and label
 * ranges rule out by their statistics left out (pq_dataset.h). */
static sl_err_t parquet_splits(sl_pipeline_job_t *job, sl_wh_pqds_t **ds, sl_wh_splits_t **splits,
                               sl_wh_pqds_plan_stats_t *ps, sl_pipeline_problems_t *pr,
                               sl_error_t *err)
{
    uint32_t before = pr->count;
    sl_err_t rc = sl_wh_pqds_open(job->parquet, job->parquet_columns, job->partitions, NULL,
                                  add_problem, pr, ds, err);
    if (rc == SL_OK) rc = sl_pipeline_plan_check(job, sl_wh_pqds_mapping(*ds)->schema, pr, err);
    sl_pipeline_range_t jr[16];
    sl_wh_pqds_range_t ranges[16];
    uint32_t nr = sl_pipeline_job_ranges(job, jr, 16);
    nr = nr > 16 ? 16 : nr;
    for (uint32_t i = 0; i < nr; i++)
        ranges[i] = (sl_wh_pqds_range_t){jr[i].label, jr[i].lo, jr[i].hi};
    if (rc == SL_OK) rc = sl_wh_pqds_plan(*ds, job->split_rows, ranges, nr, splits, ps, err);
    if (rc == SL_OK && (*splits)->count == 0)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "no data (no splits: %" PRIu64 " row groups, %" PRIu64
                          " ruled out by their statistics)",
                          ps->row_groups, ps->row_groups_skipped);
    if (rc == SL_OK)
        sl_log_kv(SL_LOG_INFO, SL_EV(PARQUET_PLANNED),
                  (SL_KV_STR("job", job->id), SL_KV_U64("splits", (*splits)->count),
                   SL_KV_U64("row_groups", ps->row_groups),
                   SL_KV_U64("row_groups_skipped", ps->row_groups_skipped),
                   SL_KV_U64("rows_skipped", ps->rows_skipped)),
                  "job %s: Parquet dataset %s cut into %u splits; %" PRIu64 " of %" PRIu64
                  " row groups ruled out by their statistics",
                  job->id, job->parquet, (*splits)->count, ps->row_groups_skipped, ps->row_groups);
    if (rc != SL_OK && rc != SL_ERR_NOMEM && pr->count == before &&
        !sl_pipeline_problems_add(pr, "$.source.parquet: '%s': %s", job->parquet, err->msg))
        rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
    return rc;
}

static sl_err_t check_spec(const char *text, bool resumed, sl_pipeline_job_t **job,
                           sl_wh_table_t **table, sl_wh_filter_t **filter, sl_wh_pqds_t **ds,
                           sl_wh_splits_t **splits, sl_wh_pqds_plan_stats_t *ps,
                           mp_kafka_stream_t *stream, sl_pipeline_problems_t *problems,
                           sl_error_t *err)
{
    sl_pipeline_problems_t pr = {0};
    sl_err_t rc = sl_pipeline_job_parse(text, strlen(text), job, &pr, err);
    if (rc == SL_ERR_INVALID && pr.count > 0)
        sl_pipeline_bind_anyway(text, strlen(text), NULL, &pr);
    if (rc == SL_OK && (*job)->parquet) {
        rc = parquet_splits(*job, ds, splits, ps, &pr, err);
    } else if (rc == SL_OK && (*job)->is_kafka) {
        /* a bounded replay: its chunks are the splits; a stream: its
         * partitions, the state makes the chunks (kafka_splits.c) */
        rc = sl_pipeline_plan_check(*job, (*job)->kafka.schema, &pr, err);
        if (rc == SL_OK && (*job)->kafka.stop == SL_PIPELINE_KAFKA_NONE)
            rc = mp_kafka_stream(*job, resumed, stream, &pr, err);
        else if (rc == SL_OK)
            rc = mp_kafka_splits(*job, splits, &pr, err);
    } else if (rc == SL_OK) {
        rc = sl_wh_table_open((*job)->table, NULL, table, err);
        if (rc == SL_OK && (*job)->partitions != NULL)
            rc = sl_wh_filter_parse((*job)->partitions, NULL, filter, err);
        if (rc == SL_OK)
            rc = sl_wh_table_splits(*table, *filter, (*job)->stripes_per_split, splits, err);
        if (rc == SL_OK && (*splits)->count == 0)
            rc = sl_error_set(err, SL_ERR_INVALID, "no data (no splits)");
        if (rc != SL_OK && rc != SL_ERR_NOMEM &&
            !sl_pipeline_problems_add(&pr, "$.source.table: table '%s': %s", (*job)->table,
                                      err->msg))
            rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
        if (rc == SL_OK) rc = sl_pipeline_plan_check(*job, sl_wh_table_schema(*table), &pr, err);
    }
    if (rc != SL_OK && rc != SL_ERR_NOMEM && pr.count > 0) {
        rc = sl_pipeline_problems_error(&pr, 0, "spec", err);
        for (uint32_t i = 0; problems != NULL && i < pr.count; i++)
            if (!sl_pipeline_problems_add(problems, "%s", pr.items[i]))
                rc = sl_error_set(err, SL_ERR_NOMEM, "spec problems");
    }
    sl_pipeline_problems_free(&pr);
    return rc;
}

/* What this master runs of "order" (docs/DESIGN.md, "A deterministic
 * order"): the deterministic order numbers every batch of an epoch and
 * deals batch g to rank g mod R, which static sharding (a rank's own
 * splits) contradicts. A resume continues the sequence less the batches
 * handed out (state_order_skip.c). */
static sl_err_t check_order(const sl_pipeline_job_t *job, const sl_master_submit_t *req,
                            sl_error_t *err)
{
    if (job->order != SL_PIPELINE_ORDER_DETERMINISTIC) return SL_OK;
    if (req->static_sharding)
        return sl_error_set(err, SL_ERR_INVALID,
                            "job '%s': \"order\": \"deterministic\" deals batch g to rank g "
                            "mod ranks; static sharding gives each rank its own splits instead: "
                            "submit with --sharding dynamic",
                            job->id);
    return SL_OK;
}

/* The deterministic order's lease window (docs/DESIGN.md): two splits per
 * worker the job may have, so that each worker has one split to read
 * while another waits for its base. */
static uint32_t order_window(const sl_master_submit_t *req)
{
    uint32_t w = req->max_workers;
    return w > UINT32_MAX / 2 ? UINT32_MAX : w < 1 ? 2 : 2 * w;
}

/* Submit req; replace: in place of the job of that id (resubmit). */
static sl_err_t submit(sl_master_t *m, const sl_master_submit_t *req, bool replace, char **job_id,
                       sl_pipeline_problems_t *problems, sl_error_t *err);

sl_err_t sl_master_job_submit(sl_master_t *m, const sl_master_submit_t *req, char **job_id,
                              sl_pipeline_problems_t *problems, sl_error_t *err)
{
    return submit(m, req, false, job_id, problems, err);
}

sl_err_t sl_master_job_resubmit(sl_master_t *m, const char *job_id, const uint8_t *const *tokens,
                                const size_t *token_lens, uint32_t num_tokens, sl_error_t *err)
{
    if (num_tokens == 0)
        return sl_error_set(err, SL_ERR_INVALID, "resubmit: at least one resume token");
    /* What the job was submitted with, copied: the spec is checked and cut
     * into splits again outside the lock, as a submission is. */
    sl_master_submit_t req = {.tokens = tokens, .token_lens = token_lens, .num_tokens = num_tokens};
    char *spec = NULL;
    sl_master_state_job_status_t st;
    sl_mutex_lock(&m->mu);
    sl_err_t rc = sl_master_state_job_status(m->st, job_id, &st, err);
    if (rc == SL_OK) {
        spec = sl_strdup(m->a, st.spec_json);
        req.ranks = st.ranks;
        req.static_sharding = st.static_sharding;
        req.min_workers = st.min_workers;
        req.max_workers = st.max_workers;
        req.workers = st.min_workers;
    }
    sl_mutex_unlock(&m->mu);
    if (rc != SL_OK) return rc;
    if (spec == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job '%s': spec", job_id);
    req.spec_json = spec;
    rc = submit(m, &req, true, NULL, NULL, err);
    sl_strfree(m->a, spec);
    return rc;
}

static sl_err_t submit(sl_master_t *m, const sl_master_submit_t *req, bool replace, char **job_id,
                       sl_pipeline_problems_t *problems, sl_error_t *err)
{
    if (job_id != NULL) *job_id = NULL;
    if (req->spec_json == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "submit: a job spec is required");
    if (req->ranks < 1)
        return sl_error_set(err, SL_ERR_INVALID, "submit: ranks %u, at least 1", req->ranks);
    if (req->min_workers < 1 || req->max_workers < req->min_workers)
        return sl_error_set(err, SL_ERR_INVALID, "submit: workers %u..%u, want 1 <= min <= max",
                            req->min_workers, req->max_workers);
    if (req->num_tokens > SL_MASTER_MAX_RESUME_TOKENS)
        return sl_error_set(err, SL_ERR_INVALID, "submit: %u resume tokens, at most %d",
                            req->num_tokens, SL_MASTER_MAX_RESUME_TOKENS);
    sl_pipeline_job_t *job = NULL;
    sl_wh_table_t *table = NULL;
    sl_wh_filter_t *filter = NULL;
    sl_wh_splits_t *splits = NULL;
    mp_kafka_stream_t stream = {0};
    sl_wh_pqds_t *ds = NULL;
    sl_wh_pqds_plan_stats_t ps = {0}; /* a Parquet job's row groups and statistics skipping */
    sl_err_t rc = check_spec(req->spec_json, req->num_tokens > 0, &job, &table, &filter, &ds,
                             &splits, &ps, &stream, problems, err);
    if (rc == SL_OK) rc = check_order(job, req, err);
    uint64_t fp = 0;     /* a Kafka job has no fingerprint: its records are not a fixed input */
    uint64_t prefix = 0; /* the autocache's key; 0: not cacheable */
    const sl_wh_schema_t *schema = table ? sl_wh_table_schema(table)
                                   : ds  ? sl_wh_pqds_mapping(ds)->schema
                                         : NULL;
    if (rc == SL_OK && !job->is_kafka) rc = sl_pipeline_fingerprint(job, schema, splits, &fp, err);
    if (rc == SL_OK && !job->is_kafka)
        rc = sl_pipeline_prefix_fingerprint(job, schema, splits, &prefix, err);
    /* one rank always hands out as many batches as itself: nothing to do;
     * a stream's epoch never ends */
    if (rc == SL_OK && job->equal_batches_per_rank && req->ranks > 1 && job->is_kafka)
        rc = sl_error_set(err, SL_ERR_INVALID,
                          "job '%s': $.batch.equal_batches_per_rank needs a table (or Parquet) "
                          "source: a Kafka job's epoch has no end to cut its ranks' batches at",
                          job->id);
    if (rc != SL_OK) goto out;
    sl_master_state_job_spec_t spec = {
        .job_id = job->id,
        .splits = splits != NULL ? splits->items : NULL,
        .num_splits = splits != NULL ? splits->count : 0,
        .kafka_partitions = stream.parts,
        .num_kafka_partitions = stream.n,
        .kafka_chunk = stream.parts != NULL ? job->kafka.chunk : 0,
        .epochs = job->epochs,
        .seed = job->seed,
        .shuffle = job->shuffle_splits,
        .spec_json = req->spec_json,
        .ranks = req->ranks,
        .static_sharding = req->static_sharding,
        .min_workers = req->min_workers,
        .max_workers = req->max_workers,
        .skip_bad_splits = job->skip_bad_splits,
        .plan_fingerprint = fp,
        .share = job->share,
        .prefix_fingerprint = prefix,
        .parquet_row_groups = ps.row_groups,
        .parquet_row_groups_skipped = ps.row_groups_skipped,
        .parquet_rows_skipped = ps.rows_skipped,
        .deterministic = job->order == SL_PIPELINE_ORDER_DETERMINISTIC,
        .order_window = order_window(req),
        .equal_batches_per_rank = job->equal_batches_per_rank && req->ranks > 1};
    uint64_t ticket = 0;
    bool began = false;
    sl_mutex_lock(&m->mu);
    if (m->failed) {
        rc = sl_error_set(err, SL_ERR_IO, "master state failed: %s", m->failure);
    } else if (!replace && mp_job_find(m, job->id) != NULL) {
        rc = sl_error_set(err, SL_ERR_AGAIN, "job '%s' exists already", job->id);
    } else if (stream.low != NULL &&
               (rc = mp_kafka_tokens_retained(m, &spec, req, stream.low, err)) != SL_OK) {
        /* refused: offsets the tokens need were deleted by retention */
    } else if (replace) {
        /* its workers keep their registrations and take the new job's
         * leases; the old job's leases and uncommitted rows are gone */
        rc = sl_master_state_job_replace(m->st, &spec, (const void *const *)req->tokens,
                                         req->token_lens, req->num_tokens, err);
        if (rc == SL_OK) began = (rc = begin_locked(m, &ticket, err)) == SL_OK;
        mp_job *old = mp_job_find(m, job->id);
        if (rc == SL_OK && old != NULL) old->used = false;
        if (rc == SL_OK &&
            mp_job_add(m, job->id, req->min_workers, req->max_workers, req->workers) == NULL)
            rc = sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': no room", job->id);
    } else {
        rc = req->num_tokens > 0
                 ? sl_master_state_job_resume_ranks(m->st, &spec, (const void *const *)req->tokens,
                                                    req->token_lens, req->num_tokens, err)
                 : sl_master_state_job_add(m->st, &spec, err);
        if (rc == SL_OK) began = (rc = begin_locked(m, &ticket, err)) == SL_OK;
        mp_job *j = rc == SL_OK
                        ? mp_job_add(m, job->id, req->min_workers, req->max_workers, req->workers)
                        : NULL;
        if (rc == SL_OK && j == NULL)
            rc = sl_error_set(err, SL_ERR_TOO_LARGE, "job '%s': no room", job->id);
        if (j != NULL) {
            sl_log_kv(SL_LOG_INFO, SL_EV(JOB_SUBMITTED),
                      (SL_KV_STR("job", job->id), SL_KV_U64("splits", spec.num_splits),
                       SL_KV_U64("epochs", job->epochs), SL_KV_U64("ranks", req->ranks),
                       SL_KV_STR("sharding", req->static_sharding ? "static" : "dynamic"),
                       SL_KV_U64("min_workers", req->min_workers),
                       SL_KV_U64("max_workers", req->max_workers),
                       SL_KV_U64("resume_tokens", req->num_tokens)),
                      "job %s submitted: %u splits, %u epoch%s, %u rank%s, workers %u..%u", job->id,
                      spec.num_splits, job->epochs, job->epochs == 1 ? "" : "s", req->ranks,
                      req->ranks == 1 ? "" : "s", req->min_workers, req->max_workers);
            log_decision(j, "submit");
        }
    }
    sl_mutex_unlock(&m->mu);
    /* The disk outside the lock; the answer after it. Peers may see the
     * job meanwhile: an answer that rests on it (a COMMIT) is sent after
     * a sync of its own, which covers the job's record too. */
    if (began) {
        sl_err_t wrc = wait_unlocked(m, ticket, rc == SL_OK ? err : NULL);
        if (rc == SL_OK) rc = wrc;
    }
    if (rc == SL_OK && job_id != NULL) {
        *job_id = sl_strdup(m->a, job->id);
        if (*job_id == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "job id");
    }
out:;
    sl_store_t *planned = table != NULL ? sl_wh_table_store(table)
                          : ds != NULL  ? sl_wh_pqds_store(ds)
                                        : NULL;
    if (planned != NULL) {
        sl_store_stats_t ss;
        sl_store_stats(planned, &ss);
        ss.inflight_bytes = 0; /* the store closes here */
        sl_mutex_lock(&m->mu);
        sl_store_stats_add(&m->store, &ss);
        m->has_store = true;
        sl_mutex_unlock(&m->mu);
    }
    mp_kafka_stream_free(&stream);
    sl_wh_splits_destroy(splits);
    sl_wh_filter_destroy(filter);
    sl_wh_table_close(table);
    sl_wh_pqds_destroy(ds);
    sl_pipeline_job_destroy(job);
    return rc;
}

sl_err_t sl_master_job_remove(sl_master_t *m, const char *job_id, sl_error_t *err)
{
    uint64_t ticket = 0;
    sl_mutex_lock(&m->mu);
    sl_err_t rc;
    if (m->failed) {
        rc = sl_error_set(err, SL_ERR_IO, "master state failed: %s", m->failure);
    } else {
        rc = sl_master_state_job_remove(m->st, job_id, err);
        if (rc == SL_OK) rc = begin_locked(m, &ticket, err);
        mp_job *j = mp_job_find(m, job_id);
        if (rc == SL_OK && j != NULL) j->used = false;
        if (rc == SL_OK)
            sl_log_kv(SL_LOG_INFO, SL_EV(JOB_REMOVED), (SL_KV_STR("job", job_id)),
                      "job %s removed: its leases are gone, its workers stop", job_id);
    }
    sl_mutex_unlock(&m->mu);
    return rc == SL_OK ? wait_unlocked(m, ticket, err) : rc;
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
        log_decision(j, "operator");
        if (set != NULL) *set = got;
    }
    sl_mutex_unlock(&m->mu);
    return rc;
}

/* ---- views ------------------------------------------------------------------------ */

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
    rows_progress(&v->status, &done, &total);
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

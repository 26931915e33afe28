/* The DPP master process (master.h): its lifecycle (start, stop, the
 * process-side records of the state's jobs adopted at start), the records
 * of its jobs, a state failure, and the journal's sync in two halves. The
 * calls its admin routes make are elsewhere: jobs in and out in submit.c,
 * the views in views.c; so are the periodic tick (lease expiry, the
 * per-job autoscaler, history) in tick.c, the Prometheus text in
 * metrics.c, the control connections in control.c (a worker's frames in
 * control_workers.c, a client's in control_clients.c), who may connect in
 * guard.c and the HTTP routes in admin.c. */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/master/process/master_internal.h"

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
    for (uint32_t w = 0; w < m->nworkers; w++)
        mp_named_free(m->a, &m->workers[w]);
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

/* The master's Prometheus text (master.h, sl_master_metrics_text: docs/ADMIN.md
 * lists every family) and the executor's figures it includes
 * (sl_master_report_executor). Taken under m->mu, like the views of
 * views.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "common/prom.h"
#include "dpp/master/process/master_internal.h"

void sl_master_report_executor(sl_master_t *m, const sl_master_executor_stats_t *st)
{
    sl_mutex_lock(&m->mu);
    m->exec = *st;
    m->has_exec = true;
    sl_mutex_unlock(&m->mu);
}

/* The executor's families (needs m->mu). */
static void executor_metrics(sl_master_t *m, sl_prom_t *p) SL_REQUIRES(m->mu)
{
    if (!m->has_exec) return;
    char lab[64];
    const sl_master_executor_stats_t *x = &m->exec;
    if (x->kind != NULL && strcmp(x->kind, "kubernetes") == 0) {
        sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_REQUESTS_TOTAL));
        static const char *res[] = {"ok", "client_error", "server_error", "transport_error"};
        uint64_t v[] = {x->requests_ok, x->requests_client_error, x->requests_server_error,
                        x->requests_transport_error};
        for (int i = 0; i < 4; i++)
            sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_REQUESTS_TOTAL),
                               sl_prom_label(lab, sizeof lab, "result", res[i]), (double)v[i]);
        sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_REPLICAS));
        sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_REPLICAS),
                           sl_prom_label(lab, sizeof lab, "state", "desired"), x->desired);
        sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_REPLICAS),
                           sl_prom_label(lab, sizeof lab, "state", "applied"), (double)x->applied);
        sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_FAILURES));
        sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_FAILURES), NULL, x->failures);
        return;
    }
    sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_SPAWNS_TOTAL));
    sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_SPAWNS_TOTAL), NULL, (double)x->started);
    sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_SPAWN_ERRORS_TOTAL));
    sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_SPAWN_ERRORS_TOTAL), NULL, (double)x->spawn_errors);
    sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_EXITS_TOTAL));
    sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_EXITS_TOTAL),
                       sl_prom_label(lab, sizeof lab, "result", "stopped"), (double)x->exited);
    sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_EXITS_TOTAL),
                       sl_prom_label(lab, sizeof lab, "result", "failed"), (double)x->failed);
    sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_RESTARTS_DELAYED_TOTAL));
    sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_RESTARTS_DELAYED_TOTAL), NULL, (double)x->delayed);
    sl_prom_family_def(p, SL_M(MASTER_EXECUTOR_BACKOFF_SECONDS));
    sl_prom_sample_def(p, SL_M(MASTER_EXECUTOR_BACKOFF_SECONDS), NULL, x->backoff_ms / 1000.0);
}

/* sluice_master_journal_sync_seconds: a histogram (cumulative buckets, le
 * labels, _sum, _count) of the journal's group-commit syncs, which every
 * trainer commit waits for. */
static void journal_sync_metrics(sl_prom_t *p, const sl_master_journal_sync_hist_t *h)
{
    sl_prom_family_def(p, SL_M(MASTER_JOURNAL_SYNC_SECONDS));
    char lab[64], le[32];
    uint64_t cum = 0;
    for (int b = 0; b <= SL_MASTER_JOURNAL_SYNC_BUCKETS; b++) {
        cum += h->count[b];
        if (b < SL_MASTER_JOURNAL_SYNC_BUCKETS)
            snprintf(le, sizeof le, "%g", SL_MASTER_JOURNAL_SYNC_BOUNDS[b]);
        else
            snprintf(le, sizeof le, "+Inf");
        sl_prom_sample_part(p, SL_M(MASTER_JOURNAL_SYNC_SECONDS), "_bucket",
                            sl_prom_label(lab, sizeof lab, "le", le), (double)cum);
    }
    sl_prom_sample_part(p, SL_M(MASTER_JOURNAL_SYNC_SECONDS), "_sum", NULL, h->sum_s);
    sl_prom_sample_part(p, SL_M(MASTER_JOURNAL_SYNC_SECONDS), "_count", NULL, (double)cum);
}

/* Resident set size from /proc (0 when unavailable). */
static uint64_t resident_bytes(void)
{
    unsigned long long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    int n = fscanf(f, "%llu %llu", &pages_total, &pages_resident);
    fclose(f);
    return n == 2 ? (uint64_t)pages_resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

char *sl_master_metrics_text(sl_master_t *m)
{
    sl_prom_t p;
    sl_prom_init(&p, m->a);
    char lab[600], l2[300];
    sl_mutex_lock(&m->mu);
    sl_master_state_counters_t c;
    sl_master_state_counters(m->st, &c);
    sl_master_store_counters_t sc;
    sl_master_store_counters(m->state_store, &sc);
    sl_prom_family_def(&p, SL_M(MASTER_JOBS));
    sl_prom_sample_def(&p, SL_M(MASTER_JOBS), NULL, c.jobs);
    sl_prom_family_def(&p, SL_M(MASTER_WORKERS));
    sl_prom_sample_def(&p, SL_M(MASTER_WORKERS), NULL, m->nworkers_connected);
    sl_prom_family_def(&p, SL_M(MASTER_CLIENTS));
    sl_prom_sample_def(&p, SL_M(MASTER_CLIENTS), NULL, m->nclients_connected);
    sl_prom_family_def(&p, SL_M(MASTER_CLIENT_RECORDS));
    sl_prom_sample_def(&p, SL_M(MASTER_CLIENT_RECORDS), NULL, c.clients);
    sl_prom_family_def(&p, SL_M(MASTER_CLIENTS_EVICTED_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_CLIENTS_EVICTED_TOTAL), NULL, (double)c.clients_evicted);
    sl_prom_family_def(&p, SL_M(MASTER_LEASES_GRANTED_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_LEASES_GRANTED_TOTAL), NULL, (double)c.leases_granted);
    sl_prom_family_def(&p, SL_M(MASTER_LEASE_EXPIRIES_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_LEASE_EXPIRIES_TOTAL), NULL, (double)c.expiries);
    sl_prom_family_def(&p, SL_M(MASTER_COMMITS_TOTAL));
    static const char *res[] = {"committed", "overlap",    "stale",     "unknown",
                                "repeated",  "wrong_rank", "not_leased"};
    uint64_t rv[] = {c.commits,          c.overlaps,      c.stale_commits,   c.unknown_commits,
                     c.repeated_commits, m->rank_refused, c.unleased_commits};
    for (int i = 0; i < 7; i++)
        sl_prom_sample_def(&p, SL_M(MASTER_COMMITS_TOTAL),
                           sl_prom_label(lab, sizeof lab, "result", res[i]), (double)rv[i]);
    sl_prom_family_def(&p, SL_M(MASTER_SPLIT_FAILURES_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_SPLIT_FAILURES_TOTAL), NULL, (double)c.split_failures);
    sl_prom_family_def(&p, SL_M(MASTER_LEASE_REVOCATIONS_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_LEASE_REVOCATIONS_TOTAL), NULL, (double)c.revocations);
    sl_prom_family_def(&p, SL_M(MASTER_WORKER_IDS_IN_USE_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_WORKER_IDS_IN_USE_TOTAL), NULL, (double)m->ids_in_use);
    sl_prom_family_def(&p, SL_M(MASTER_AUTH_FAILURES_TOTAL));
    for (int i = 0; i < MP_AUTH_NREASONS; i++)
        sl_prom_sample_def(&p, SL_M(MASTER_AUTH_FAILURES_TOTAL),
                           sl_prom_label(lab, sizeof lab, "reason", mp_auth_reason_names[i]),
                           (double)m->auth_failures[i]);
    sl_prom_family_def(&p, SL_M(MASTER_CONNECTIONS_CLOSED_TOTAL));
    static const char *why[] = {"handshake_timeout", "idle", "evicted", "refused"};
    uint64_t wv[] = {m->handshake_timeouts, m->idle_closed, m->evicted, m->refused};
    for (int i = 0; i < 4; i++)
        sl_prom_sample_def(&p, SL_M(MASTER_CONNECTIONS_CLOSED_TOTAL),
                           sl_prom_label(lab, sizeof lab, "reason", why[i]), (double)wv[i]);
    sl_prom_family_def(&p, SL_M(MASTER_CONNECTIONS));
    uint32_t open = 0;
    for (uint32_t i = 0; m->conns != NULL && i < m->opts.max_connections; i++)
        open += m->conns[i].fd >= 0;
    sl_prom_sample_def(&p, SL_M(MASTER_CONNECTIONS), NULL, open);
    sl_prom_family_def(&p, SL_M(MASTER_JOURNAL_SYNCS_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_JOURNAL_SYNCS_TOTAL), NULL, (double)sc.journal_syncs);
    journal_sync_metrics(&p, &sc.journal_sync);
    sl_prom_family_def(&p, SL_M(MASTER_JOURNAL_COMPACTIONS_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_JOURNAL_COMPACTIONS_TOTAL), NULL, (double)sc.compactions);
    sl_prom_family_def(&p, SL_M(MASTER_STATE_RECOVERIES_TOTAL));
    sl_prom_sample_def(&p, SL_M(MASTER_STATE_RECOVERIES_TOTAL),
                       sl_prom_label(lab, sizeof lab, "result", "ok"), (double)m->recoveries);
    sl_prom_sample_def(&p, SL_M(MASTER_STATE_RECOVERIES_TOTAL),
                       sl_prom_label(lab, sizeof lab, "result", "failed"),
                       (double)m->recovery_failures);
    sl_prom_family_def(&p, SL_M(MASTER_MEMORY_BYTES));
    sl_prom_sample_def(&p, SL_M(MASTER_MEMORY_BYTES), NULL, (double)resident_bytes());
    executor_metrics(m, &p);
    if (m->has_store) sl_store_prom_stats(&m->store, &p, NULL);
    /* Per-job families: Prometheus wants each family's samples right after
     * its TYPE line, so gather the jobs' figures first, then emit by family. */
    enum {
        SPLITS_PENDING,
        SPLITS_LEASED,
        SPLITS_DONE,
        COMMITTED_ROWS,
        SAMPLES,
        WAIT,
        BUSY,
        QUEUED,
        WORKER_MEMORY,
        DESIRED,
        GRANTED,
        FAILED,
        FINISHED,
        SKIPPED,
        SKIPPED_ROWS,
        EQ_DROPPED,
        EQ_DROPPED_SAMPLES,
        PQ_SKIPPED,
        PQ_ROWS,
        SHARES_WITH,
        SHARED_BATCHES,
        SHARED_BYTES,
        SHARED_CPU,
        AC_STATE,
        AC_SAMPLES,
        AC_FALLBACKS,
        AC_WRITTEN,
        NFIG
    };
    static const sl_metric_t fam[] = {
        SL_M_MASTER_SPLITS,
        SL_M_MASTER_COMMITTED_ROWS,
        SL_M_MASTER_SAMPLES_COMMITTED_TOTAL,
        SL_M_MASTER_TRAINER_WAIT_RATIO,
        SL_M_MASTER_WORKER_BUSY_RATIO,
        SL_M_MASTER_WORKER_QUEUE_BATCHES,
        SL_M_MASTER_WORKER_MEMORY_BYTES,
        SL_M_MASTER_DESIRED_WORKERS,
        SL_M_MASTER_GRANTED_WORKERS,
        SL_M_MASTER_JOB_FAILED,
        SL_M_MASTER_JOB_FINISHED,
        SL_M_MASTER_SKIPPED_SPLITS_TOTAL,
        SL_M_MASTER_SKIPPED_ROWS_TOTAL,
        SL_M_MASTER_EQUAL_DROPPED_BATCHES_TOTAL,
        SL_M_MASTER_EQUAL_DROPPED_SAMPLES_TOTAL,
        SL_M_MASTER_PARQUET_ROW_GROUPS_SKIPPED,
        SL_M_MASTER_PARQUET_ROWS_SKIPPED,
        SL_M_MASTER_JOB_SHARES_WITH,
        SL_M_MASTER_SHARED_BATCHES,
        SL_M_MASTER_SHARED_BYTES_SAVED,
        SL_M_MASTER_SHARED_CPU_SECONDS_SAVED,
        SL_M_MASTER_AUTOCACHE_STATE,
        SL_M_MASTER_AUTOCACHE_SAMPLES,
        SL_M_MASTER_AUTOCACHE_FALLBACKS,
        SL_M_MASTER_AUTOCACHE_FILES_WRITTEN,
    };
    static const int fam_first[] = {
        SPLITS_PENDING, COMMITTED_ROWS, SAMPLES,      WAIT,           BUSY,
        QUEUED,         WORKER_MEMORY,  DESIRED,      GRANTED,        FAILED,
        FINISHED,       SKIPPED,        SKIPPED_ROWS, EQ_DROPPED,     EQ_DROPPED_SAMPLES,
        PQ_SKIPPED,     PQ_ROWS,        SHARES_WITH,  SHARED_BATCHES, SHARED_BYTES,
        SHARED_CPU,     AC_STATE,       AC_SAMPLES,   AC_FALLBACKS,   AC_WRITTEN};
    static const char *states[] = {"pending", "leased", "done"};
    uint32_t njobs = 0;
    size_t nfig = sl_mul_size(m->opts.max_jobs, NFIG);
    double *fig = sl_calloc(m->a, nfig, sizeof *fig);
    const char **ids = sl_calloc(m->a, m->opts.max_jobs, sizeof *ids);
    if (fig == NULL || ids == NULL) sl_prom_fail(&p); /* not without the jobs' figures */
    for (uint32_t i = 0; fig && ids && i < m->opts.max_jobs; i++) {
        mp_job *j = &m->jobs[i];
        sl_master_state_job_status_t st;
        sl_error_t err = {0};
        if (!j->used || sl_master_state_job_status(m->st, j->id, &st, &err) != SL_OK) continue;
        double *f = fig + (size_t)njobs * NFIG;
        ids[njobs++] = j->id;
        f[SPLITS_PENDING] = st.pending;
        f[SPLITS_LEASED] = st.leased;
        f[SPLITS_DONE] = st.done;
        f[COMMITTED_ROWS] = (double)st.committed_rows;
        f[SAMPLES] = (double)st.samples;
        f[WAIT] = j->last_wait;
        f[BUSY] = j->last_busy;
        f[DESIRED] = j->as.desired;
        f[GRANTED] = j->granted;
        f[FAILED] = st.failed ? 1 : 0;
        f[FINISHED] = st.finished ? 1 : 0;
        f[SKIPPED] = (double)st.skipped_splits;
        f[SKIPPED_ROWS] = (double)st.skipped_rows;
        f[EQ_DROPPED] = (double)st.equal_dropped_batches;
        f[EQ_DROPPED_SAMPLES] = (double)st.equal_dropped_samples;
        f[PQ_SKIPPED] = (double)st.parquet_row_groups_skipped;
        f[PQ_ROWS] = (double)st.parquet_rows_skipped;
        f[SHARES_WITH] = mp_fp_peers_locked(m, j->id);
        for (uint32_t w = 0; w < m->nworkers; w++)
            if (m->workers[w].conn >= 0 && strcmp(m->workers[w].job, j->id) == 0) {
                f[QUEUED] += m->workers[w].queued;
                f[WORKER_MEMORY] += (double)m->workers[w].memory;
            }
        for (uint32_t w = 0; w < m->nworkers; w++)
            if (strcmp(m->workers[w].job, j->id) == 0) {
                f[SHARED_BATCHES] += (double)m->workers[w].shared_batches;
                f[SHARED_BYTES] += (double)m->workers[w].shared_bytes;
                f[SHARED_CPU] += (double)m->workers[w].shared_cpu_ns / 1e9;
                f[AC_SAMPLES] += (double)m->workers[w].cache.samples;
                f[AC_FALLBACKS] += (double)m->workers[w].cache.fallbacks;
                f[AC_WRITTEN] += (double)m->workers[w].cache.files_written;
            }
        f[AC_STATE] = j->ac.state;
    }
    for (size_t k = 0; k < sizeof fam / sizeof fam[0]; k++) {
        const sl_metric_def_t *def = &sl_metric_defs[fam[k]];
        sl_prom_family_def(&p, def);
        for (uint32_t i = 0; i < njobs; i++) {
            const double *f = fig + (size_t)i * NFIG;
            sl_prom_label(l2, sizeof l2, "job", ids[i]);
            if (fam_first[k] != SPLITS_PENDING) {
                sl_prom_sample_def(&p, def, l2, f[fam_first[k]]);
                continue;
            }
            for (int st = 0; st < 3; st++) {
                char sl[64];
                snprintf(lab, sizeof lab, "%s,%s", l2,
                         sl_prom_label(sl, sizeof sl, "state", states[st]));
                sl_prom_sample_def(&p, def, lab, f[SPLITS_PENDING + st]);
            }
        }
    }
    /* the plan's fingerprint as a label, to group jobs by it in a query */
    sl_prom_family_def(&p, SL_M(MASTER_JOB_PLAN_INFO));
    for (uint32_t i = 0; i < njobs; i++) {
        sl_master_state_job_status_t st;
        sl_error_t err = {0};
        if (sl_master_state_job_status(m->st, ids[i], &st, &err) != SL_OK) continue;
        char fp[20], l3[64], l4[32];
        snprintf(fp, sizeof fp, "%016" PRIx64, st.plan_fingerprint);
        snprintf(lab, sizeof lab, "%s,%s,%s", sl_prom_label(l2, sizeof l2, "job", ids[i]),
                 sl_prom_label(l3, sizeof l3, "fingerprint", fp),
                 sl_prom_label(l4, sizeof l4, "share", st.share ? "true" : "false"));
        sl_prom_sample_def(&p, SL_M(MASTER_JOB_PLAN_INFO), lab, 1);
    }
    sl_free(m->a, fig, sl_mul_size(nfig, sizeof *fig));
    sl_free(m->a, ids, sl_mul_size(m->opts.max_jobs, sizeof *ids));
    mp_kafka_metrics(m, &p);
    sl_mutex_unlock(&m->mu);
    return sl_prom_finish(&p);
}

/* The master back on its feet in the running process when its journal's
 * disk comes back (docs/OPERATIONS.md, "Storage faults"). A failed write
 * or fdatasync fails the master (mp_fail): it refuses every change and
 * /readyz fails, because the journal's tail is unknown and nothing more
 * may be promised. From then on the control thread tries, with bounded
 * backoff, what a restart would do: open the state directory again (the
 * snapshot and the journal replayed, a torn tail cut, an Opened record
 * appended and fdatasynced: the disk is tried for real) and, when that
 * works, put the new state in place of the old. The new state is exactly
 * what is durable: every answer the master gave rests on a durable record
 * (the exactly-once argument, docs/DESIGN.md); records that never reached
 * the disk were never answered, and their peers retry them. */
#include <stdio.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/master/process/master_internal.h"

/* Process-side jobs the recovered state does not have (a job whose
 * record never reached the disk) are dropped; the state's jobs the
 * process does not know are adopted. */
static sl_err_t reconcile_jobs(sl_master_t *m, sl_error_t *err) SL_REQUIRES(m->mu)
{
    for (uint32_t i = 0; i < m->opts.max_jobs; i++) {
        mp_job *j = &m->jobs[i];
        sl_master_state_job_status_t st;
        sl_error_t e = {0};
        if (j->used && sl_master_state_job_status(m->st, j->id, &st, &e) == SL_ERR_NOT_FOUND)
            j->used = false;
    }
    return mp_adopt_jobs(m, err);
}

void mp_recover(sl_master_t *m)
{
    sl_mutex_lock(&m->mu);
    uint64_t now = sl_clock_ms();
    bool due = m->failed && m->state_dir != NULL && m->st_pins == 0 && now >= m->recover_at_ms;
    /* The failed journal's compaction, if one runs, ends before its
     * directory is opened again (no one starts another: m->failed). */
    if (due) sl_master_store_compact_wait(m->state_store);
    sl_mutex_unlock(&m->mu);
    if (!due) return;
    /* Replay outside the lock: admin requests and scrapes go on (every
     * change is refused meanwhile). */
    sl_master_store_opts_t sto = m->store_opts;
    sto.dir = m->state_dir;
    sl_master_store_t *store = NULL;
    sl_master_journal_open_info_t info;
    sl_error_t err = {0};
    sl_err_t rc = sl_master_store_open(&sto, &m->state_opts, now, &store, &info, &err);
    sl_mutex_lock(&m->mu);
    if (rc != SL_OK) {
        m->recovery_failures++;
        m->recover_delay_ms = m->recover_delay_ms * 2 < MP_RECOVER_MAX_MS ? m->recover_delay_ms * 2
                                                                          : MP_RECOVER_MAX_MS;
        m->recover_at_ms = sl_clock_ms() + m->recover_delay_ms;
        sl_log_kv(SL_LOG_WARN, SL_EV(STATE_RECOVERY_FAILED),
                  (SL_KV_STR("error", err.msg), SL_KV_U64("retry_ms", m->recover_delay_ms)),
                  "state still failed, trying again in %llu ms: %s",
                  (unsigned long long)m->recover_delay_ms, err.msg);
        sl_mutex_unlock(&m->mu);
        return;
    }
    sl_master_store_t *old = m->state_store;
    m->state_store = store;
    m->st = sl_master_store_state(store);
    m->failed = false;
    m->recoveries++;
    char was[sizeof m->failure];
    snprintf(was, sizeof was, "%s", m->failure);
    m->failure[0] = '\0';
    sl_err_t jrc = reconcile_jobs(m, &err);
    if (info.warning[0] != '\0')
        sl_log_kv(
            SL_LOG_WARN, SL_EV(JOURNAL_TAIL_CUT),
            (SL_KV_U64("offset", info.truncated_at), SL_KV_U64("bytes", info.truncated_bytes)),
            "%s", info.warning);
    sl_log_kv(SL_LOG_INFO, SL_EV(STATE_RECOVERED),
              (SL_KV_STR("reason", was), SL_KV_U64("records", info.records)),
              "state recovered from its directory (%llu journal records replayed), accepting "
              "changes again; it had failed: %s",
              (unsigned long long)info.records, was);
    if (jrc != SL_OK) mp_fail(m, &err); /* no room for a job: as at start, refuse */
    sl_mutex_unlock(&m->mu);
    /* Nothing uses the old state now (no pins, the control thread is
     * here); what it appended after the failure was never durable. */
    sl_master_store_destroy(old);
}

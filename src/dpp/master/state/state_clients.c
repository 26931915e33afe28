/* The DPP master's trainer client records (state.h, "client
 * records"): touching the connected ones, and forgetting those idle for
 * the master's idle period, so that max_clients bounds the clients active
 * at once rather than every client ever seen. An eviction is one journal
 * record (ClientEvicted), applied by m_apply live and in replay.
 * Callers hold the master's lock. */
#include <string.h>

#include "dpp/master/state/state_internal.h"

void sl_master_state_client_touch(sl_master_state_t *m, const char *client_id, uint64_t now_ms)
{
    uint32_t ci;
    if (now_ms > m->now_ms) m->now_ms = now_ms;
    if (client_id != NULL && m_client_find(m, client_id, &ci)) m->clients[ci].last_ms = now_ms;
}

sl_err_t sl_master_state_evict_clients(sl_master_state_t *m, uint64_t now_ms, uint64_t idle_ms,
                                       uint32_t *evicted, sl_error_t *err)
{
    uint32_t n = 0;
    sl_err_t rc = SL_OK;
    if (now_ms > m->now_ms) m->now_ms = now_ms;
    for (uint32_t ci = 0; ci < m->num_clients;) {
        const client *c = &m->clients[ci];
        if (c->last_ms > now_ms || now_ms - c->last_ms < idle_ms) {
            ci++;
            continue;
        }
        Sluice__Master__ClientEvicted ce = SLUICE__MASTER__CLIENT_EVICTED__INIT;
        ce.client_id = c->name;
        Sluice__Master__Record rec = SLUICE__MASTER__RECORD__INIT;
        rec.kind_case = SLUICE__MASTER__RECORD__KIND_CLIENT_EVICTED;
        rec.client_evicted = &ce;
        /* m_apply removes it: the last client moves into ci, look at ci again */
        if ((rc = m_record(m, &rec, NULL, err)) != SL_OK) break;
        n++;
    }
    if (evicted != NULL) *evicted = n;
    return rc;
}

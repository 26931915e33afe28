/* Who may use the master's control port, and for how long
 * (docs/PROTOCOL.md "Authentication", "Timeouts and caps"):
 *   - with a cluster secret, a new connection is challenged at once and
 *     nothing but AUTH_RESPONSE is read from it until it has proved it holds
 *     the secret (rpc/auth.h); a wrong proof is answered ERROR and closed;
 *   - a connection must finish its handshake (auth, then REGISTER or
 *     ATTACH) within handshake_timeout_ms of being accepted;
 *   - a registered worker silent for worker_conn_idle_ms, or an attached client
 *     silent for client_conn_idle_ms, is closed (a live worker heartbeats every
 *     heartbeat_ms, a trainer client reports every refresh_ms);
 *   - when every slot is taken, the oldest connection still in its
 *     handshake makes room for the new one, so silent sockets cannot lock
 *     workers and trainers out.
 * Everything here runs on the control thread under m->mu. */
#include <inttypes.h>
#include <stdio.h>

#include "dpp/master/process/master_internal.h"

void mp_guard_accepted(sl_master_t *m, uint32_t i, uint64_t now_ms)
{
    mp_conn *c = &m->conns[i];
    c->opened_ms = c->last_rx_ms = now_ms;
    c->auth_pending = false;
    if (m->secret == NULL) return;
    /* pending from here: a challenge that cannot be sent counts as closed */
    c->auth_pending = true;
    c->auth_reason = MP_AUTH_CLOSED;
    sl_error_t err = {0};
    if (sl_rpc_auth_challenge(c->fd, c->nonce, &err) != SL_OK) {
        mp_conn_drop(m, i, err.code, err.msg);
        return;
    }
}

bool mp_guard_frame(sl_master_t *m, uint32_t i, const sl_rpc_frame_t *f, uint64_t now_ms)
{
    mp_conn *c = &m->conns[i];
    c->last_rx_ms = now_ms;
    if (!c->auth_pending) return false;
    sl_error_t err = {0};
    if (sl_rpc_auth_answer(c->fd, m->secret, c->nonce, f, &err) != SL_OK) {
        c->auth_reason = MP_AUTH_REFUSED;
        mp_conn_drop(m, i, err.code, err.msg);
        return true;
    }
    c->auth_pending = false;
    return true;
}

void mp_guard_sweep(sl_master_t *m, uint64_t now_ms)
{
    /* O(connections) per sweep, ten sweeps a second at most */
    if (now_ms - m->last_sweep_ms < 100) return;
    m->last_sweep_ms = now_ms;
    char msg[160];
    for (uint32_t i = 0; i < m->opts.max_connections; i++) {
        mp_conn *c = &m->conns[i];
        if (c->fd < 0) continue;
        if (c->kind == MP_NEW && now_ms - c->opened_ms > m->opts.handshake_timeout_ms) {
            snprintf(msg, sizeof msg, "no %s within %" PRIu64 " ms of connecting: closed",
                     c->auth_pending ? "authentication" : "REGISTER or ATTACH",
                     m->opts.handshake_timeout_ms);
            m->handshake_timeouts++;
            c->auth_reason = MP_AUTH_TIMEOUT;
            mp_conn_drop(m, i, SL_ERR_TIMEOUT, msg);
            continue;
        }
        uint64_t idle = c->kind == MP_WORKER   ? m->opts.worker_conn_idle_ms
                        : c->kind == MP_CLIENT ? m->opts.client_conn_idle_ms
                                               : UINT64_MAX;
        if (now_ms - c->last_rx_ms > idle) {
            snprintf(msg, sizeof msg, "%s silent for more than %" PRIu64 " ms: closed",
                     c->kind == MP_WORKER ? "worker" : "client", idle);
            m->idle_closed++;
            mp_conn_drop(m, i, SL_ERR_TIMEOUT, msg);
        }
    }
}

int mp_guard_evict(sl_master_t *m)
{
    int oldest = -1;
    for (uint32_t i = 0; i < m->opts.max_connections; i++) {
        const mp_conn *c = &m->conns[i];
        if (c->fd >= 0 && c->kind == MP_NEW &&
            (oldest < 0 || c->opened_ms < m->conns[oldest].opened_ms ||
             (c->opened_ms == m->conns[oldest].opened_ms && c->serial < m->conns[oldest].serial)))
            oldest = (int)i;
    }
    if (oldest < 0) return -1;
    m->evicted++;
    m->conns[oldest].auth_reason = MP_AUTH_EVICTED;
    mp_conn_drop(m, (uint32_t)oldest, SL_ERR_AGAIN,
                 "master: every connection slot is taken; the oldest one still in its "
                 "handshake is closed to make room");
    return oldest;
}

const char *const mp_auth_reason_names[MP_AUTH_NREASONS] = {
    [MP_AUTH_CLOSED] = "closed",
    [MP_AUTH_REFUSED] = "refused",
    [MP_AUTH_TIMEOUT] = "timeout",
    [MP_AUTH_EVICTED] = "evicted",
};

void mp_guard_closing(sl_master_t *m, uint32_t i)
{
    mp_conn *c = &m->conns[i];
    if (!c->auth_pending) return;
    m->auth_failures[c->auth_reason < MP_AUTH_NREASONS ? c->auth_reason : MP_AUTH_CLOSED]++;
    c->auth_pending = false;
}

/* The master's control connections (proto/control.proto): one thread waits
 * (epoll) on the listening socket and every worker and client connection, assembles
 * frames from what arrives (a slow peer never blocks the others), applies
 * them to the state under the master's lock, and answers. Answers that
 * exactly-once rests on (COMMIT_REPLY, SPLIT_READ_REPLY, TOKEN) are held
 * until the round's single sync has returned (group commit); the rest
 * leave at once. Sends block (small frames; SO_SNDTIMEO bounds a peer that
 * stops reading, which is then dropped). What each frame does is in
 * control_workers.c (a worker's) and control_clients.c (a trainer
 * client's); who may connect in guard.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/log_events.h"
#include "common/mem.h"
#include "dpp/master/process/master_internal.h"
#include "rpc/port_hint.h"

#define MAX_FRAME (1u << 20)
#define SEND_TIMEOUT_MS 2000

/* ---- connections ------------------------------------------------------------------ */

void mp_conn_close(sl_master_t *m, uint32_t i)
{
    mp_conn *c = &m->conns[i];
    if (c->fd < 0) return;
    mp_guard_closing(m, i);
    close(c->fd);
    c->fd = -1;
    if (c->kind == MP_WORKER) {
        mp_worker *w = &m->workers[c->worker];
        /* its leases stay its own until they expire or it registers again */
        sl_log_kv(
            SL_LOG_INFO, SL_EV(WORKER_LEFT),
            (SL_KV_STR("worker", w->id), SL_KV_STR("job", w->job), SL_KV_U64("leases", w->leases)),
            "worker %s left (connection closed; %u lease%s kept until they expire)", w->id,
            w->leases, w->leases == 1 ? "" : "s");
        if (w->conn == (int)i) {
            w->conn = -1;
            w->nnamed = 0; /* its next connection's REGISTER names them again */
        }
        m->nworkers_connected--;
        m->workers_version++;
    } else if (c->kind == MP_CLIENT) {
        m->nclients_connected--;
    }
    c->kind = MP_NEW;
    sl_free(m->a, c->buf, c->cap);
    c->buf = NULL;
    c->len = c->cap = 0;
}

bool mp_send(sl_master_t *m, uint32_t i, sl_rpc_type_t type, const ProtobufCMessage *msg)
{
    sl_error_t err = {0};
    if (sl_rpc_send(m->conns[i].fd, type, msg, NULL, 0, &err) != SL_OK) {
        mp_conn_close(m, i);
        return false;
    }
    return true;
}

/* An ERROR always closes the connection it answers (docs/PROTOCOL.md):
 * the peer reconnects if it wants to go on. */
void mp_conn_drop(sl_master_t *m, uint32_t i, sl_err_t code, const char *msg)
{
    if (m->conns[i].fd < 0) return;
    sl_rpc_send_error(m->conns[i].fd, code, msg);
    mp_conn_close(m, i);
}

void mp_send_error(sl_master_t *m, uint32_t i, sl_err_t code, const char *msg)
{
    m->protocol_errors++;
    if (m->conns[i].auth_pending) m->conns[i].auth_reason = MP_AUTH_REFUSED;
    mp_conn_drop(m, i, code, msg);
}

bool mp_defer(sl_master_t *m, uint32_t i, mp_deferred d)
{
    if (m->ndeferred == m->cap_deferred &&
        !SL_GROW(m->a, m->deferred, m->cap_deferred, m->ndeferred + 1, 64))
        return false;
    d.conn = i;
    d.serial = m->conns[i].serial;
    m->deferred[m->ndeferred++] = d;
    return true;
}

/* ---- frames ------------------------------------------------------------------------ */

typedef struct mem_src {
    const uint8_t *p;
    size_t len, at;
} mem_src;

static ssize_t mem_read(void *ctx, void *buf, size_t len)
{
    mem_src *s = ctx;
    size_t n = s->len - s->at < len ? s->len - s->at : len;
    memcpy(buf, s->p + s->at, n);
    s->at += n;
    return (ssize_t)n;
}

static void dispatch(sl_master_t *m, uint32_t i, const sl_rpc_frame_t *f) SL_REQUIRES(m->mu)
{
    mp_conn *c = &m->conns[i];
    m->frames_in++;
    bool worker = c->kind == MP_WORKER, client = c->kind == MP_CLIENT;
    if (worker) m->workers[c->worker].last_seen_ms = sl_clock_ms(); /* heard from (may_take_id) */
    switch (f->type) {
    case SL_RPC_REGISTER:
        if (c->kind == MP_NEW) return mp_on_register(m, i, (const void *)f->msg);
        break;
    case SL_RPC_LEASE_REQUEST:
        if (!worker) break;
        mp_on_lease_request(m, i, (const void *)f->msg);
        mp_named_answered(m, i); /* LEASE or NO_WORK (none after an ERROR) */
        return;
    case SL_RPC_HEARTBEAT:
        if (worker) return mp_on_heartbeat(m, i, (const void *)f->msg);
        break;
    case SL_RPC_SPLIT_READ:
        if (worker) return mp_on_split_read(m, i, (const void *)f->msg);
        break;
    case SL_RPC_SPLIT_FAILED:
        if (worker) return mp_on_split_failed(m, i, (const void *)f->msg);
        break;
    case SL_RPC_ATTACH:
        if (!worker) return mp_on_attach(m, i, (const void *)f->msg);
        break;
    case SL_RPC_COMMIT:
        if (client) return mp_on_commit(m, i, (const void *)f->msg);
        break;
    case SL_RPC_CLIENT_STATS:
        if (client) return mp_on_client_stats(m, (const void *)f->msg);
        break;
    case SL_RPC_TOKEN_REQUEST:
        if (client) return mp_on_token_request(m, i, (const void *)f->msg);
        break;
    case SL_RPC_GOODBYE:
        mp_conn_close(m, i);
        return;
    default:
        break;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "unexpected %s frame on a %s connection", sl_rpc_type_name(f->type),
             worker   ? "worker"
             : client ? "client"
                      : "new");
    mp_send_error(m, i, SL_ERR_PROTOCOL, msg);
}

/* Read what is there; handle every whole frame. */
static void on_readable(sl_master_t *m, uint32_t i)
{
    mp_conn *c = &m->conns[i];
    if (c->cap - c->len < 4096) {
        /* bounded: a whole frame of the largest size and a read's room */
        const size_t most = MAX_FRAME + SL_RPC_HEADER_BYTES + 8192;
        size_t cap = c->cap;
        uint8_t *p =
            sl_grow(m->a, c->buf, &cap, c->len + 4096 < most ? c->len + 4096 : most, 1, 8192, most);
        if (p == NULL) {
            sl_mutex_lock(&m->mu);
            mp_conn_close(m, i);
            sl_mutex_unlock(&m->mu);
            return;
        }
        c->buf = p;
        c->cap = cap;
    }
    /* never blocks: a slot may hold a newer socket than the one poll saw */
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
    if (n <= 0) {
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
        sl_mutex_lock(&m->mu);
        mp_conn_close(m, i);
        sl_mutex_unlock(&m->mu);
        return;
    }
    c->len += (size_t)n;
    sl_rpc_limits_t lim = sl_rpc_limits_default();
    lim.max_message_bytes = MAX_FRAME;
    lim.max_payload_bytes = 0;
    size_t at = 0;
    sl_mutex_lock(&m->mu);
    while (m->conns[i].fd >= 0 && c->len - at >= SL_RPC_HEADER_BYTES) {
        sl_rpc_header_t h;
        sl_error_t err = {0};
        if (sl_rpc_header_decode(c->buf + at, &lim, &h, &err) != SL_OK) {
            if (at == 0 && c->kind == MP_NEW && strcmp(err.msg, SL_RPC_HTTP_REQUEST_MSG) == 0) {
                /* `sluice submit` or curl at the wrong port: say so in HTTP */
                m->protocol_errors++;
                sl_rpc_send_http_refusal(
                    c->fd, "this is a sluice master's control port (the binary protocol of "
                           "workers and trainer clients), not its admin endpoint: HTTP clients "
                           "(sluice submit, jobs, curl, Prometheus) use the address given to "
                           "sluice master --admin");
                mp_conn_close(m, i);
                break;
            }
            mp_send_error(m, i, err.code, err.msg);
            break;
        }
        size_t total = SL_RPC_HEADER_BYTES + h.message_len;
        if (c->len - at < total) break;
        mem_src src = {c->buf + at, total, 0};
        sl_rpc_frame_t f;
        if (sl_rpc_recv_from(mem_read, &src, &lim, NULL, &f, &err) != SL_OK) {
            mp_send_error(m, i, err.code, err.msg);
            break;
        }
        at += total;
        if (!mp_guard_frame(m, i, &f, sl_clock_ms())) dispatch(m, i, &f);
        sl_rpc_frame_free(&f);
    }
    sl_mutex_unlock(&m->mu);
    if (m->conns[i].fd >= 0 && at > 0) {
        memmove(c->buf, c->buf + at, c->len - at);
        c->len -= at;
    }
}

static void on_accept(sl_master_t *m)
{
    int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        /* Out of descriptors: a connection still in its handshake makes
         * room, or the listener would stay readable and spin. */
        if (errno == EMFILE || errno == ENFILE) {
            sl_mutex_lock(&m->mu);
            mp_guard_evict(m);
            sl_mutex_unlock(&m->mu);
        }
        return;
    }
    sl_mutex_lock(&m->mu);
    uint32_t i = 0;
    while (i < m->opts.max_connections && m->conns[i].fd >= 0)
        i++;
    if (i == m->opts.max_connections) {
        int victim = mp_guard_evict(m);
        if (victim < 0) {
            m->refused++;
            sl_mutex_unlock(&m->mu);
            sl_rpc_send_error(fd, SL_ERR_AGAIN,
                              "master: too many connections (every slot is a registered worker "
                              "or an attached client); try again later");
            close(fd);
            return;
        }
        i = (uint32_t)victim;
    }
    struct timeval tv = {SEND_TIMEOUT_MS / 1000, (SEND_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    m->conns[i] = (mp_conn){.fd = fd, .kind = MP_NEW, .serial = ++m->next_serial};
    /* slot and serial: an event of a closed connection is known when its
     * slot holds a newer one (closing the fd also takes it out of the set) */
    struct epoll_event ev = {.events = EPOLLIN,
                             .data.u64 = (uint64_t)(uint32_t)m->conns[i].serial << 32 | i};
    if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        m->refused++;
        close(fd);
        m->conns[i].fd = -1;
        sl_mutex_unlock(&m->mu);
        return;
    }
    m->connections_total++;
    mp_guard_accepted(m, i, sl_clock_ms());
    sl_mutex_unlock(&m->mu);
}

/* Group commit: one sync for every answer of the round, then send them.
 * The disk is waited for outside m->mu (docs/DESIGN.md, "Disk work
 * outside the lock"): the records of every deferred answer were appended
 * before the ticket, and only this thread makes and sends deferred
 * answers, so none leaves before its records are durable. */
static void flush_deferred(sl_master_t *m)
{
    if (m->ndeferred == 0) return;
    sl_error_t err = {0};
    uint64_t ticket = 0;
    sl_mutex_lock(&m->mu);
    bool ok = !m->failed && sl_master_store_sync_begin(m->state_store, &ticket, &err) == SL_OK;
    sl_mutex_unlock(&m->mu);
    if (ok) ok = sl_master_store_sync_wait(m->state_store, ticket, &err) == SL_OK;
    sl_mutex_lock(&m->mu);
    if (!ok) mp_fail(m, &err);
    for (uint32_t k = 0; k < m->ndeferred; k++) {
        mp_deferred *d = &m->deferred[k];
        bool live = m->conns[d->conn].fd >= 0 && m->conns[d->conn].serial == d->serial;
        if (live && !ok) {
            /* Nothing may be promised: the peers retry (with another master
             * run when the journal failed). */
            mp_send_error(m, d->conn, m->failed ? SL_ERR_IO : err.code,
                          m->failed ? "master state failed" : err.msg);
            mp_conn_close(m, d->conn);
        } else if (live && d->type == SL_RPC_COMMIT_REPLY) {
            Sluice__Control__CommitReply r = SLUICE__CONTROL__COMMIT_REPLY__INIT;
            r.nonce = d->nonce;
            r.result = (Sluice__Control__CommitReply__Result)d->result;
            r.message = d->message;
            r.equal = d->equal;
            r.quota = d->quota;
            r.quota_final = d->quota_final;
            mp_send(m, d->conn, d->type, &r.base);
        } else if (live && d->type == SL_RPC_SPLIT_READ_REPLY) {
            Sluice__Control__SplitReadReply r = SLUICE__CONTROL__SPLIT_READ_REPLY__INIT;
            r.state = (Sluice__Control__SplitReadReply__State)d->result;
            if (mp_send(m, d->conn, d->type, &r.base)) mp_named_answered(m, d->conn);
        } else if (live && d->type == SL_RPC_SPLIT_FAILED_REPLY) {
            Sluice__Control__SplitFailedReply r = SLUICE__CONTROL__SPLIT_FAILED_REPLY__INIT;
            r.state = (Sluice__Control__SplitFailedReply__State)d->result;
            if (mp_send(m, d->conn, d->type, &r.base)) mp_named_answered(m, d->conn);
        } else if (live && d->type == SL_RPC_TOKEN) {
            Sluice__Control__Token r = SLUICE__CONTROL__TOKEN__INIT;
            r.token.data = d->token;
            r.token.len = d->token_len;
            mp_send(m, d->conn, d->type, &r.base);
        }
        if (d->token != NULL) sl_free(m->a, d->token, d->token_len);
    }
    m->ndeferred = 0;
    sl_mutex_unlock(&m->mu);
}

#define EV_WAKE UINT64_MAX
#define EV_LISTEN (UINT64_MAX - 1)

static void *loop(void *arg)
{
    sl_master_t *m = arg;
    struct epoll_event *ev = m->events;
    int cap = (int)m->opts.max_connections + 2;
    while (!atomic_load(&m->stop)) {
        /* push_pending: written by this thread only (mp_push_attached) */
        int r = epoll_wait(m->epfd, ev, cap, m->push_pending ? 0 : 50);
        if (r < 0 && errno != EINTR) break;
        /* what peers sent up to now is read below: leases are judged as
         * of this instant, not after the sync (mp_tick) */
        uint64_t heard = sl_clock_ms();
        for (int k = 0; k < r; k++) {
            uint64_t d = ev[k].data.u64;
            if (d == EV_WAKE) continue;
            if (d == EV_LISTEN) {
                on_accept(m);
                continue;
            }
            uint32_t i = (uint32_t)d;
            const mp_conn *c = &m->conns[i];
            if (c->fd >= 0 && (uint32_t)c->serial == (uint32_t)(d >> 32) &&
                (ev[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                on_readable(m, i);
        }
        flush_deferred(m);
        mp_recover(m); /* nothing unless the journal failed */
        sl_mutex_lock(&m->mu);
        uint64_t now = sl_clock_ms();
        mp_tick(m, now, heard);
        mp_push_attached(m);
        mp_guard_sweep(m, now);
        sl_mutex_unlock(&m->mu);
    }
    return NULL;
}

sl_err_t mp_server_start(sl_master_t *m, sl_error_t *err)
{
    /* Everything the control thread needs, before it starts: it has no
     * one to report a failure to. */
    size_t nev = (size_t)m->opts.max_connections + 2;
    m->conns = sl_calloc(m->a, m->opts.max_connections, sizeof *m->conns);
    m->events = sl_calloc(m->a, nev, sizeof *m->events);
    if (m->conns == NULL || m->events == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "master connections");
    for (uint32_t i = 0; i < m->opts.max_connections; i++)
        m->conns[i].fd = -1;
    const char *addr = m->opts.listen != NULL ? m->opts.listen : "127.0.0.1:0";
    SL_FORWARD_IF_ERROR(sl_rpc_check_exposure("master --listen", addr, m->secret != NULL, err));
    sl_err_t rc = sl_rpc_listen(addr, 128, &m->listen_fd, &m->port, err);
    if (rc != SL_OK) return sl_error_prefix(err, "master --listen %s: ", addr);
    /* The address peers use: the host as given (empty or 0.0.0.0: loopback). */
    char host[MP_ADDR_MAX];
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    if (colon != NULL) *colon = '\0';
    if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0) snprintf(host, sizeof host, "127.0.0.1");
    snprintf(m->address, sizeof m->address, "%.200s:%u", host, m->port);
    m->opts.listen = NULL;
    if (pipe2(m->wake, O_CLOEXEC) != 0) return sl_error_set(err, SL_ERR_IO, "master: pipe: %m");
    m->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (m->epfd < 0) return sl_error_set(err, SL_ERR_IO, "master: epoll: %m");
    struct epoll_event wake = {.events = EPOLLIN, .data.u64 = EV_WAKE};
    struct epoll_event lis = {.events = EPOLLIN, .data.u64 = EV_LISTEN};
    if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->wake[0], &wake) != 0 ||
        epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->listen_fd, &lis) != 0)
        return sl_error_set(err, SL_ERR_IO, "master: epoll: %m");
    if (pthread_create(&m->thread, NULL, loop, m) != 0)
        return sl_error_set(err, SL_ERR_IO, "master: cannot start the control thread");
    m->thread_started = true;
    return SL_OK;
}

void mp_server_stop(sl_master_t *m)
{
    if (m->thread_started) {
        atomic_store(&m->stop, true);
        ssize_t w = write(m->wake[1], "x", 1);
        (void)w;
        pthread_join(m->thread, NULL);
        m->thread_started = false;
    }
    flush_deferred(m);
    sl_mutex_lock(&m->mu); /* the control thread has ended: nobody waits for it */
    for (uint32_t i = 0; m->conns != NULL && i < m->opts.max_connections; i++)
        mp_conn_close(m, i);
    sl_mutex_unlock(&m->mu);
    sl_free(m->a, m->conns, (size_t)m->opts.max_connections * sizeof *m->conns);
    m->conns = NULL;
    sl_free(m->a, m->events, ((size_t)m->opts.max_connections + 2) * sizeof *m->events);
    m->events = NULL;
    sl_free(m->a, m->deferred, (size_t)m->cap_deferred * sizeof *m->deferred);
    m->deferred = NULL;
    m->cap_deferred = m->ndeferred = 0;
    if (m->listen_fd >= 0) close(m->listen_fd);
    if (m->wake[0] >= 0) close(m->wake[0]);
    if (m->wake[1] >= 0) close(m->wake[1]);
    if (m->epfd >= 0) close(m->epfd);
    m->listen_fd = m->wake[0] = m->wake[1] = m->epfd = -1;
}

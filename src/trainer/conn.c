/* The trainer client's side of a connection: handshake, the receive thread
 * that decodes BATCH frames into the queue, and reconnecting after a lost
 * worker (trainer_internal.h explains the threads and locks). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "trainer/trainer_internal.h"

void tr_drop_queue_locked(sl_trainer_t *t)
{
    while (t->head) {
        tq_item_t *it = t->head;
        t->head = it->next;
        sl_batch_destroy(it->batch);
        sl_free(t->a, it, sizeof *it);
        atomic_fetch_add(&t->dropped, 1);
    }
    t->tail = NULL;
    atomic_store(&t->queued, 0);
}

void tr_fail_locked(sl_trainer_t *t, const sl_error_t *e)
{
    if (t->state == TR_RUNNING) {
        t->state = TR_FAILED;
        t->failure = *e;
        if (t->failure.code == SL_OK) t->failure.code = SL_ERR_IO;
        tr_drop_queue_locked(t);
    }
    pthread_cond_broadcast(&t->cv);
}

void tr_fail(sl_trainer_t *t, const sl_error_t *e)
{
    pthread_mutex_lock(&t->mu);
    tr_fail_locked(t, e);
    pthread_mutex_unlock(&t->mu);
}

void tr_pending_ack_locked(sl_trainer_t *t, uint64_t delivery_id)
{
    /* Bounded: only batches handed out while their connection was dying
     * land here, at most one window per connection; beyond the cap the ack
     * is lost and the worker delivers that batch once more. */
    if (t->npending < t->pending_cap) t->pending[t->npending++] = delivery_id;
}

/* Close the installed socket (receive thread or connect only). */
static void uninstall(sl_trainer_t *t)
{
    pthread_mutex_lock(&t->send_mu);
    int fd = t->fd;
    t->fd = -1;
    t->send_ready = false;
    pthread_mutex_unlock(&t->send_mu);
    if (fd >= 0) close(fd);
}

sl_err_t tr_authenticate(const sl_trainer_t *t, int fd, int timeout_ms, sl_error_t *err)
{
    if (!t->secret) return SL_OK;
    return sl_rpc_auth_client(fd, t->secret, sl_clock_ms() + (uint64_t)timeout_ms, err);
}

static sl_err_t handshake(sl_trainer_t *t, int fd, int timeout_ms, sl_error_t *err)
{
    sl_err_t rc = sl_rpc_set_recv_timeout(fd, timeout_ms, err);
    if (rc == SL_OK) rc = tr_authenticate(t, fd, timeout_ms, err);
    if (rc != SL_OK) return rc;
    Sluice__Dpp__Hello hello = SLUICE__DPP__HELLO__INIT;
    hello.protocol_version = SL_RPC_VERSION;
    hello.client_name = t->client_name;
    hello.rank = t->rank;
    hello.world_size = t->world_size;
    rc = sl_rpc_send(fd, SL_RPC_HELLO, &hello.base, NULL, 0, err);
    if (rc != SL_OK) return rc;
    sl_rpc_frame_t f;
    rc = sl_rpc_recv(fd, &t->rpc_limits, t->a, &f, err);
    if (rc != SL_OK) {
        if (rc == SL_ERR_TIMEOUT) sl_error_prefix(err, "waiting for welcome: ");
        return rc;
    }
    atomic_fetch_add(&t->bytes, f.wire_bytes);
    if (f.type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
        sl_err_t code =
            e->code < 0 && e->code >= SL_ERR_UNSUPPORTED ? (sl_err_t)e->code : SL_ERR_PROTOCOL;
        rc = sl_error_set(err, code, "worker refused the connection: %s", e->message);
    } else if (f.type != SL_RPC_WELCOME) {
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "expected a welcome frame, got %s%s",
                          sl_rpc_type_name(f.type), sl_rpc_auth_hint(f.type));
    } else {
        const Sluice__Dpp__Welcome *w = (const Sluice__Dpp__Welcome *)f.msg;
        if (w->protocol_version != SL_RPC_VERSION) {
            rc = sl_error_set(err, SL_ERR_VERSION,
                              "worker speaks trainer protocol version %u, this client %u",
                              w->protocol_version, SL_RPC_VERSION);
        } else {
            pthread_mutex_lock(&t->send_mu);
            t->window = t->prefetch;
            if (w->max_credits > 0 && w->max_credits < t->window) t->window = w->max_credits;
            snprintf(t->worker_id, sizeof t->worker_id, "%s",
                     w->worker_id && w->worker_id[0] ? w->worker_id : "?");
            pthread_mutex_unlock(&t->send_mu);
        }
    }
    sl_rpc_frame_free(&f);
    if (rc == SL_OK) rc = sl_rpc_set_recv_timeout(fd, 0, err);
    return rc;
}

sl_err_t tr_open_connection(sl_trainer_t *t, int timeout_ms, sl_error_t *err)
{
    int fd;
    sl_err_t rc = sl_rpc_connect(t->address, timeout_ms, &fd, err);
    if (rc != SL_OK) return rc;
    /* Installed before the handshake so that sl_trainer_close can shut it
     * down and unblock us; send_ready stays false until WELCOME. */
    pthread_mutex_lock(&t->send_mu);
    bool closing = t->closing;
    if (!closing) {
        t->fd = fd;
        t->conn_gen++;
        t->send_ready = false;
    }
    pthread_mutex_unlock(&t->send_mu);
    if (closing) {
        close(fd);
        return sl_error_set(err, SL_ERR_CLOSED, "client is closing");
    }
    rc = handshake(t, fd, timeout_ms, err);
    if (rc == SL_OK) {
        pthread_mutex_lock(&t->send_mu);
        if (t->npending > 0) {
            Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
            ack.n_delivery_ids = t->npending;
            ack.delivery_ids = t->pending;
            rc = sl_rpc_send(fd, SL_RPC_ACK, &ack.base, NULL, 0, err);
            if (rc == SL_OK) t->npending = 0;
        }
        if (rc == SL_OK) {
            atomic_store(&t->granted, t->window);
            Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
            req.credits = t->window;
            rc = sl_rpc_send(fd, SL_RPC_REQUEST, &req.base, NULL, 0, err);
        }
        if (rc == SL_OK) t->send_ready = true;
        pthread_mutex_unlock(&t->send_mu);
    }
    if (rc != SL_OK) {
        uninstall(t);
        if (t->closing) return sl_error_set(err, SL_ERR_CLOSED, "client is closing");
        sl_error_prefix(err, "worker %s: ", t->address);
    }
    return rc;
}

typedef struct payload_ref {
    const sl_allocator_t *a;
    void *p;
    size_t len;
} payload_ref_t;

static void release_payload(void *ctx)
{
    payload_ref_t *r = ctx;
    const sl_allocator_t *a = r->a;
    sl_free(a, r->p, r->len);
    sl_free(a, r, sizeof *r);
}

/* What the receive loop does after a frame. */
typedef enum rx_next {
    RX_CONTINUE,
    RX_STOP,     /* END, ERROR or GOODBYE from the worker: state already set */
    RX_VIOLATION /* the worker broke the protocol: e says how */
} rx_next_t;

sl_err_t tr_decode_batch(sl_trainer_t *t, sl_rpc_frame_t *f, sl_batch_t **out, sl_error_t *e)
{
    const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)f->msg;
    *out = NULL;
    if (f->payload == NULL)
        return sl_error_set(e, SL_ERR_PROTOCOL, "batch frame without payload");
    payload_ref_t *ref = sl_alloc(t->a, sizeof *ref);
    sl_batch_t *b = NULL;
    sl_err_t rc = SL_ERR_NOMEM;
    if (ref)
        rc = sl_wire_decode(f->payload, f->payload_len, &t->wire_limits, t->a, &b, e);
    else
        sl_error_set(e, rc, "out of memory");
    if (rc == SL_OK && bi->num_samples != b->batch_size)
        rc = sl_error_set(e, SL_ERR_PROTOCOL, "batch info says %u samples, payload holds %u",
                          bi->num_samples, b->batch_size);
    if (rc != SL_OK) {
        sl_batch_destroy(b);
        sl_free(t->a, ref, sizeof *ref);
        return rc;
    }
    /* The batch's tensors point into the payload: it now lives as long as
     * the batch (freed by sl_batch_destroy through release). */
    *ref = (payload_ref_t){t->a, f->payload, f->payload_len};
    f->payload = NULL;
    f->payload_len = 0;
    b->release = release_payload;
    b->release_ctx = ref;
    *out = b;
    return SL_OK;
}

static rx_next_t on_batch(sl_trainer_t *t, sl_rpc_frame_t *f, uint64_t gen, uint64_t *received,
                          sl_error_t *e)
{
    const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)f->msg;
    uint64_t id = bi->delivery_id;
    if (++*received > atomic_load(&t->granted)) {
        sl_error_set(e, SL_ERR_PROTOCOL,
                     "delivery %" PRIu64 ": batch %" PRIu64 " sent with only %" PRIu64
                     " credits granted",
                     id, *received, atomic_load(&t->granted));
        return RX_VIOLATION;
    }
    tq_item_t *it = sl_alloc(t->a, sizeof *it);
    sl_batch_t *b = NULL;
    sl_err_t rc = it ? tr_decode_batch(t, f, &b, e) : sl_error_set(e, SL_ERR_NOMEM, "out of memory");
    if (rc != SL_OK) {
        sl_free(t->a, it, sizeof *it);
        sl_error_prefix(e, "delivery %" PRIu64 " (split %" PRIu64 " batch %" PRIu64 "): ", id,
                        bi->split_id, bi->sequence);
        return rc == SL_ERR_NOMEM ? RX_STOP : RX_VIOLATION;
    }
    *it = (tq_item_t){.batch = b, .delivery_id = id, .gen = gen};
    pthread_mutex_lock(&t->mu);
    if (t->tail)
        t->tail->next = it;
    else
        t->head = it;
    t->tail = it;
    atomic_fetch_add(&t->queued, 1);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return RX_CONTINUE;
}

static rx_next_t on_frame(sl_trainer_t *t, sl_rpc_frame_t *f, uint64_t gen, uint64_t *received,
                          sl_error_t *e)
{
    switch (f->type) {
    case SL_RPC_BATCH:
        return on_batch(t, f, gen, received, e);
    case SL_RPC_END: {
        const Sluice__Dpp__End *end = (const Sluice__Dpp__End *)f->msg;
        pthread_mutex_lock(&t->mu);
        if (t->state == TR_RUNNING) {
            t->state = TR_ENDED;
            t->end_batches = end->batches;
        }
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        return RX_STOP;
    }
    case SL_RPC_ERROR: {
        const Sluice__Dpp__Error *m = (const Sluice__Dpp__Error *)f->msg;
        /* Codes outside our enum (a newer worker) still mean failure. */
        sl_err_t code =
            m->code < 0 && m->code >= SL_ERR_UNSUPPORTED ? (sl_err_t)m->code : SL_ERR_PROTOCOL;
        sl_error_set(e, code, "worker %s: %s", t->address,
                     m->message && m->message[0] ? m->message : sl_err_str(code));
        tr_fail(t, e);
        return RX_STOP;
    }
    case SL_RPC_GOODBYE: {
        const Sluice__Dpp__Goodbye *g = (const Sluice__Dpp__Goodbye *)f->msg;
        sl_error_set(e, SL_ERR_CLOSED, "worker %s said goodbye: %s", t->address,
                     g->reason && g->reason[0] ? g->reason : "no reason given");
        tr_fail(t, e);
        return RX_STOP;
    }
    default:
        sl_error_set(e, SL_ERR_PROTOCOL, "unexpected %s frame from the worker",
                     sl_rpc_type_name(f->type));
        return RX_VIOLATION;
    }
}

bool tr_pause_unless_closing(sl_trainer_t *t, int ms)
{
    uint64_t until = sl_clock_ns() + (uint64_t)ms * 1000000ull;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    pthread_mutex_lock(&t->mu);
    while (!t->closing && sl_clock_ns() < until)
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    bool closing = t->closing;
    pthread_mutex_unlock(&t->mu);
    return closing;
}

/* The connection was lost (lost says how). Drop what it queued, then retry
 * for reconnect_ms with backoff 50 ms doubling to 1 s. @return SL_OK when a
 * new connection is installed; otherwise the client has failed. */
static sl_err_t reconnect(sl_trainer_t *t, const sl_error_t *lost)
{
    /* Exactly once: batches of the dead connection that were not handed out
     * are unacknowledged, and the worker gives them to another client. */
    pthread_mutex_lock(&t->mu);
    tr_drop_queue_locked(t);
    pthread_mutex_unlock(&t->mu);
    uninstall(t);
    sl_error_t e = {0};
    if (t->reconnect_ms < 0) {
        sl_error_set(&e, lost->code, "worker %s: connection lost (%s); reconnecting is off",
                     t->address, lost->msg);
        tr_fail(t, &e);
        return e.code;
    }
    uint64_t deadline = sl_clock_ns() + (uint64_t)t->reconnect_ms * 1000000ull;
    int backoff = 50;
    for (;;) {
        uint64_t now = sl_clock_ns();
        uint64_t left_ms = now < deadline ? (deadline - now) / 1000000ull + 1 : 1;
        int timeout = t->connect_timeout_ms;
        if ((uint64_t)timeout > left_ms) timeout = (int)left_ms;
        sl_error_clear(&e);
        sl_err_t rc = tr_open_connection(t, timeout, &e);
        if (rc == SL_OK) {
            atomic_fetch_add(&t->reconnects, 1);
            return SL_OK;
        }
        if (rc == SL_ERR_CLOSED && t->closing) return rc;
        /* A worker that answers but refuses us will not change its mind. */
        if (rc == SL_ERR_VERSION || rc == SL_ERR_PROTOCOL) {
            tr_fail(t, &e);
            return rc;
        }
        now = sl_clock_ns();
        if (now >= deadline) break;
        /* The last pause ends at the deadline, for one last attempt there. */
        uint64_t pause = (uint64_t)backoff;
        if (pause > (deadline - now) / 1000000ull) pause = (deadline - now) / 1000000ull;
        if (tr_pause_unless_closing(t, (int)pause)) return SL_ERR_CLOSED;
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    sl_error_t f = {0};
    sl_error_set(&f, e.code != SL_OK ? e.code : SL_ERR_TIMEOUT,
                 "worker %s: connection lost and not re-established within %d ms (%.300s)",
                 t->address, t->reconnect_ms, e.msg[0] ? e.msg : "no attempt");
    tr_fail(t, &f);
    return f.code;
}

void *tr_receive_main(void *arg)
{
    sl_trainer_t *t = arg;
    pthread_mutex_lock(&t->send_mu);
    int fd = t->fd;
    uint64_t gen = t->conn_gen;
    pthread_mutex_unlock(&t->send_mu);
    uint64_t received = 0;
    for (;;) {
        sl_rpc_frame_t f;
        sl_error_t e = {0};
        sl_err_t rc = sl_rpc_recv(fd, &t->rpc_limits, t->a, &f, &e);
        rx_next_t next = RX_CONTINUE;
        if (rc == SL_OK) {
            atomic_fetch_add(&t->bytes, f.wire_bytes);
            next = on_frame(t, &f, gen, &received, &e);
            sl_rpc_frame_free(&f);
            if (next == RX_STOP && e.code != SL_OK) tr_fail(t, &e); /* out of memory */
            if (next == RX_CONTINUE) continue;
        }
        if (t->closing) break;
        if (rc == SL_OK && next == RX_STOP) {
            /* END: keep the socket for acks of the batches still queued. */
            if (e.code != SL_OK) uninstall(t);
            break;
        }
        if (next == RX_VIOLATION || rc == SL_ERR_PROTOCOL || rc == SL_ERR_VERSION ||
            rc == SL_ERR_TOO_LARGE || rc == SL_ERR_NOMEM) {
            /* Tell the worker why we hang up; its unacked batches go elsewhere. */
            pthread_mutex_lock(&t->send_mu);
            if (t->fd >= 0) sl_rpc_send_error(t->fd, e.code, e.msg);
            pthread_mutex_unlock(&t->send_mu);
            sl_error_prefix(&e, "worker %s: ", t->address);
            tr_fail(t, &e);
            uninstall(t);
            break;
        }
        /* Closed, truncated, reset, I/O error: the connection is gone. */
        if (reconnect(t, &e) != SL_OK) break;
        pthread_mutex_lock(&t->send_mu);
        fd = t->fd;
        gen = t->conn_gen;
        pthread_mutex_unlock(&t->send_mu);
        received = 0;
    }
    return NULL;
}

/* The trainer client's one worker connection (trainer_internal.h), the same
 * in direct and master mode: a thread that connects (the cluster-secret
 * handshake when the client has a secret, HELLO / WELCOME, credits),
 * receives BATCH / END / ERROR / GOODBYE, and after a lost connection
 * reconnects under the client's policy (tr_reconnect) while it is not
 * stopped. A received batch goes to the committer in master mode (fleet.c:
 * COMMIT first), to the ready queue in direct mode. Acks and credits are
 * sent from the threads that take items out (client_state.c, fleet).
 *
 * A worker's ERROR answering HELLO keeps its code; "not now" (a connection
 * cap: sl_rpc_error_retriable) is retried like a lost connection, any
 * other is a refusal that ends the connection. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/log_events.h"
#include "trainer/fleet_internal.h"

tr_conn_t *tr_conn_new(sl_trainer_t *t, const char *worker_id, const char *address)
{
    tr_conn_t *c = sl_calloc(t->a, 1, sizeof *c);
    /* At most one window is handed out unacked while a connection dies;
     * twice that plus slack. */
    uint32_t cap = t->prefetch > UINT32_MAX / 4 ? UINT32_MAX / 2 : 2 * t->prefetch + 16;
    uint64_t *pending = c ? sl_calloc(t->a, cap, sizeof *pending) : NULL;
    if (!pending) {
        if (c) sl_free(t->a, c, sizeof *c);
        return NULL;
    }
    c->t = t;
    c->fd = -1;
    c->pending = pending;
    c->pending_cap = cap;
    snprintf(c->address, sizeof c->address, "%s", address);
    snprintf(c->worker_id, sizeof c->worker_id, "%s", worker_id ? worker_id : "");
    if (worker_id)
        snprintf(c->label, sizeof c->label, "worker %s (%s)", c->worker_id, c->address);
    else
        snprintf(c->label, sizeof c->label, "worker %s", c->address);
    sl_mutex_init(&c->send_mu);
    c->next = t->conns;
    t->conns = c;
    return c;
}

void tr_conn_free(tr_conn_t *c)
{
    if (!c) return;
    const sl_allocator_t *a = c->t->a;
    if (c->thread_started) pthread_join(c->thread, NULL);
    if (c->fd >= 0) close(c->fd);
    if (c->shm) tr_shm_end(c->shm);
    tr_shm_drop(c->shm); /* batches read in place keep the mapping */
    sl_mutex_destroy(&c->send_mu);
    sl_free(a, c->pending, (size_t)c->pending_cap * sizeof *c->pending);
    sl_free(a, c, sizeof *c);
}

/* Under send_mu: an ACK of ids[n] with the releases that wait (no ACK
 * when there are neither) and a REQUEST of credits (0: none), in one
 * sendmsg: the worker reads both at once and wakes its sender once; the
 * bytes are those of the frames sent apart. Releases that do not get
 * through are freed when the hold ends. */
static sl_err_t send_ack_locked(tr_conn_t *c, uint64_t *ids, size_t n, uint32_t credits)
    SL_REQUIRES(c->send_mu)
{
    uint64_t rel[256];
    uint32_t nrel = tr_shm_take(c->shm, rel, 256);
    Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
    ack.n_delivery_ids = n;
    ack.delivery_ids = ids;
    ack.n_released_ids = nrel;
    ack.released_ids = rel;
    Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
    req.credits = credits;
    sl_rpc_type_t types[2];
    const ProtobufCMessage *msgs[2];
    size_t k = 0;
    if (n > 0 || nrel > 0) {
        types[k] = SL_RPC_ACK;
        msgs[k++] = &ack.base;
    }
    if (credits > 0) {
        types[k] = SL_RPC_REQUEST;
        msgs[k++] = &req.base;
        atomic_fetch_add(&c->granted, credits);
    }
    return sl_rpc_send_frames(c->fd, k, types, msgs, NULL);
}

/* Under send_mu: send c's withheld acks (as one ACK) and credits (as one
 * REQUEST) now, back to back. An ACK that cannot be sent stays pending for
 * the next connection; withheld credits die with the connection (the next
 * one grants window - held, which counts them). */
static void flush_locked(tr_conn_t *c, bool credits) SL_REQUIRES(c->send_mu)
{
    c->later_since_ns = 0;
    if (c->fd < 0 || !c->send_ready) {
        c->credits_later = 0;
        return;
    }
    sl_err_t rc = send_ack_locked(c, c->pending, c->npending, credits ? c->credits_later : 0);
    if (rc == SL_OK) c->npending = 0;
    c->credits_later = 0;
    /* a failed send leaves the stream out of step: the connection's thread
     * sees the shutdown and reconnects */
    if (rc != SL_OK) shutdown(c->fd, SHUT_RDWR);
}

/* How many acks or credits c withholds at most. Under send_mu. */
static uint32_t later_every(const sl_trainer_t *t, const tr_conn_t *c) SL_REQUIRES(c->send_mu)
{
    /* never more than half the window: the worker keeps at least the other
     * half to send ahead */
    uint32_t half = c->window / 2 > 0 ? c->window / 2 : 1;
    uint32_t k = t->ack_every > 0 && t->ack_every < half ? t->ack_every : half;
    return k;
}

void tr_conn_later_locked(sl_trainer_t *t, tr_conn_t *c, uint64_t delivery_id, bool credit)
{
    sl_mutex_lock(&c->send_mu);
    /* bounded like any pending ack: past pending_cap it is lost and the
     * worker delivers that batch once more (its commit then answers
     * OVERLAP); while connected fewer than window / 2 wait here */
    if (delivery_id && c->npending < c->pending_cap) c->pending[c->npending++] = delivery_id;
    if (credit && c->fd >= 0 && c->send_ready && !c->stop) c->credits_later++;
    uint64_t now = sl_clock_ns();
    if (c->later_since_ns == 0) c->later_since_ns = now;
    uint32_t k = later_every(t, c);
    if (c->npending >= k || c->credits_later >= k ||
        now - c->later_since_ns >= (uint64_t)t->ack_ms * 1000000u) {
        if (!c->stop) flush_locked(c, true);
    }
    sl_mutex_unlock(&c->send_mu);
}

int tr_conns_flush_due(sl_trainer_t *t, uint64_t now_ns)
{
    uint64_t wait_ns = UINT64_MAX, bound = (uint64_t)t->ack_ms * 1000000u;
    sl_mutex_lock(&t->mu);
    for (tr_conn_t *c = t->conns; c; c = c->next) {
        sl_mutex_lock(&c->send_mu);
        if (c->later_since_ns && (c->npending > 0 || c->credits_later > 0)) {
            uint64_t age = now_ns - c->later_since_ns;
            if (age >= bound) {
                if (!c->stop) flush_locked(c, true);
            } else if (bound - age < wait_ns) {
                wait_ns = bound - age;
            }
        }
        sl_mutex_unlock(&c->send_mu);
    }
    sl_mutex_unlock(&t->mu);
    if (wait_ns == UINT64_MAX) return INT32_MAX;
    return (int)((wait_ns + 999999u) / 1000000u);
}

void tr_conn_stop_locked(sl_trainer_t *t, tr_conn_t *c, const char *reason)
{
    if (c->stop) return;
    c->stop = true;
    sl_mutex_lock(&c->send_mu);
    if (c->fd >= 0) {
        /* withheld acks first: the worker may let those batches go (credits
         * are no use any more) */
        if (c->send_ready) flush_locked(c, false);
        if (c->send_ready) sl_rpc_send_goodbye(c->fd, reason);
        shutdown(c->fd, SHUT_RDWR); /* unblocks its receive or handshake */
    }
    sl_mutex_unlock(&c->send_mu);
    pthread_cond_broadcast(&t->cv);
}

/* The ACK of delivery_id (0: none, the releases that wait only) and
 * credits; an ACK that cannot be sent is kept for the next connection. */
static void ack_locked(tr_conn_t *c, uint64_t delivery_id, uint32_t credits)
{
    sl_mutex_lock(&c->send_mu);
    sl_err_t rc = SL_ERR_CLOSED;
    if (c->fd >= 0 && c->send_ready) {
        /* Delivery ids are unique per worker, so an ack on a newer
         * connection than the batch's is understood (the worker ignores an
         * id it no longer holds: docs/PROTOCOL.md). */
        uint64_t id = delivery_id;
        rc = send_ack_locked(c, &id, delivery_id ? 1 : 0, credits);
        if (rc != SL_OK) shutdown(c->fd, SHUT_RDWR); /* its thread reconnects */
    }
    if (rc != SL_OK && delivery_id && c->npending < c->pending_cap)
        c->pending[c->npending++] = delivery_id;
    sl_mutex_unlock(&c->send_mu);
}

void tr_conn_ack_locked(sl_trainer_t *t, tr_conn_t *c, uint64_t delivery_id)
{
    (void)t; /* the lock the caller holds (c->t's) */
    ack_locked(c, delivery_id, 0);
}

void tr_conn_ack_credit_locked(sl_trainer_t *t, tr_conn_t *c, uint64_t delivery_id)
{
    (void)t;
    ack_locked(c, delivery_id, c->stop ? 0 : 1);
}

static bool stopping(tr_conn_t *c)
{
    sl_trainer_t *t = c->t;
    sl_mutex_lock(&t->mu);
    bool s = c->stop || t->closing;
    sl_mutex_unlock(&t->mu);
    return s;
}

/* Take the socket out of the slot (caller holds mu); the caller closes it. */
static int detach_locked(tr_conn_t *c)
{
    c->connected = false;
    sl_mutex_lock(&c->send_mu);
    int fd = c->fd;
    c->fd = -1;
    c->send_ready = false;
    c->credits_later = 0; /* the next connection grants window - held */
    /* the mapping is the connection's: a reconnect may find another
     * process behind the address (batches read in place keep this one) */
    tr_shm_t *m = c->shm;
    c->shm = NULL;
    sl_mutex_unlock(&c->send_mu);
    if (m) tr_shm_end(m);
    tr_shm_drop(m);
    return fd;
}

/* Close the installed socket (c's thread, or connect before it starts). */
static void uninstall(tr_conn_t *c)
{
    sl_mutex_lock(&c->t->mu);
    int fd = detach_locked(c);
    sl_mutex_unlock(&c->t->mu);
    if (fd >= 0) close(fd);
}

/* The socket is installed before the handshake so that a stop can shut it
 * down; send_ready stays false until WELCOME. */
static sl_err_t install(tr_conn_t *c, int fd, sl_error_t *err)
{
    sl_trainer_t *t = c->t;
    sl_mutex_lock(&t->mu);
    bool stop = c->stop || t->closing;
    if (!stop) {
        sl_mutex_lock(&c->send_mu);
        c->fd = fd;
        c->send_ready = false;
        sl_mutex_unlock(&c->send_mu);
    }
    sl_mutex_unlock(&t->mu);
    if (!stop) return SL_OK;
    close(fd);
    return sl_error_set(err, SL_ERR_CLOSED, "stopped");
}

/* HELLO and its answer before deadline_ms; *window from WELCOME. */
static sl_err_t hello(tr_conn_t *c, int fd, uint64_t deadline_ms, uint32_t *window, bool *refused,
                      sl_error_t *err)
{
    sl_trainer_t *t = c->t;
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.client_name = t->client_name;
    h.rank = t->rank;
    h.world_size = t->world_size;
    /* master mode: the job, so that a worker of a shared pass (one that
     * serves several jobs, docs/DESIGN.md) sends this job's batches */
    if (t->fleet) h.job_id = t->fleet->job_id;
    h.shm = t->shm;
    h.shm_hold = t->shm && t->shm_hold;
    c->shm_socket[0] = 0;
    c->shm_nonce_len = 0;
    SL_FORWARD_IF_ERROR(sl_rpc_send(fd, SL_RPC_HELLO, &h.base, NULL, 0, err));
    sl_rpc_frame_t f;
    sl_err_t rc = sl_rpc_recv_until(fd, deadline_ms, &t->rpc_limits, t->a, &f, err);
    if (rc != SL_OK) {
        if (rc == SL_ERR_TIMEOUT) sl_error_prefix(err, "waiting for welcome: ");
        return rc;
    }
    atomic_fetch_add(&t->bytes, f.wire_bytes);
    if (f.type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
        rc = sl_error_set(err, sl_rpc_error_code(e), "refused the connection: %s",
                          e->message && e->message[0] ? e->message : "no reason given");
        *refused = !sl_rpc_error_retriable(rc);
    } else if (f.type != SL_RPC_WELCOME) {
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "expected a welcome frame, got %s%s",
                          sl_rpc_type_name(f.type), sl_rpc_auth_hint(f.type));
    } else {
        const Sluice__Dpp__Welcome *w = (const Sluice__Dpp__Welcome *)f.msg;
        if (w->protocol_version != SL_RPC_VERSION)
            rc = sl_error_set(err, SL_ERR_VERSION,
                              "worker speaks trainer protocol version %u, this client %u",
                              w->protocol_version, SL_RPC_VERSION);
        *window = t->prefetch;
        if (w->max_credits > 0 && w->max_credits < *window) *window = w->max_credits;
        /* offered only to a HELLO that asked; a bad offer fails the attach */
        if (t->shm && w->shm_socket && w->shm_socket[0]) {
            snprintf(c->shm_socket, sizeof c->shm_socket, "%s", w->shm_socket);
            c->shm_nonce_len = w->shm_nonce.len;
            if (c->shm_nonce_len == sizeof c->shm_nonce)
                memcpy(c->shm_nonce, w->shm_nonce.data, sizeof c->shm_nonce);
        }
    }
    sl_rpc_frame_free(&f);
    return rc;
}

/* Map the heap WELCOME offered (the side channel, before deadline_ms).
 * Failing is not an error: the connection stays on socket payloads, and
 * why is logged once per worker at debug level. @return attached. */
static bool attach_shm(tr_conn_t *c, uint64_t deadline_ms)
{
    if (!c->shm_socket[0]) return false;
    sl_error_t e = {0};
    sl_rpc_shm_map_t map;
    sl_err_t rc = sl_rpc_shm_attach_read(c->shm_socket, c->shm_nonce, c->shm_nonce_len, deadline_ms,
                                         c->t->shm_read_only, &map, &e);
    tr_shm_t *m = rc == SL_OK ? tr_shm_new(c->t->a, &map) : NULL;
    if (rc == SL_OK && !m) {
        sl_rpc_shm_detach(&map);
        rc = sl_error_set(&e, SL_ERR_NOMEM, "out of memory");
    }
    if (m) {
        sl_mutex_lock(&c->send_mu);
        tr_shm_t *old = c->shm;
        c->shm = m;
        sl_mutex_unlock(&c->send_mu);
        if (old) tr_shm_end(old);
        tr_shm_drop(old);
        return true;
    }
    if (!c->shm_logged)
        sl_log(SL_LOG_DEBUG, SL_EV(TRAINER_SHM_OFF), "%s: batches over the socket: %s", c->label,
               e.msg);
    c->shm_logged = true;
    return false;
}

/* The handshake is done: send the acks that could not go out before, grant
 * window - held credits, and let acks and credits flow. */
static sl_err_t go_live(tr_conn_t *c, int fd, uint32_t window, bool shm, sl_error_t *err)
{
    sl_trainer_t *t = c->t;
    sl_mutex_lock(&t->mu);
    sl_mutex_lock(&c->send_mu);
    sl_err_t rc = SL_OK;
    if (c->npending > 0) {
        Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
        ack.n_delivery_ids = c->npending;
        ack.delivery_ids = c->pending;
        rc = sl_rpc_send(fd, SL_RPC_ACK, &ack.base, NULL, 0, err);
        if (rc == SL_OK) c->npending = 0;
    }
    c->window = window;
    uint32_t grant = window > c->held ? window - c->held : 0;
    atomic_store(&c->granted, grant);
    if (rc == SL_OK && (grant > 0 || shm || t->order)) {
        /* the connection's first request: it says attached before any
         * credit, so every batch of the connection may be a descriptor;
         * under the deterministic order it names the g-window */
        Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
        req.credits = grant;
        req.shm_attached = shm;
        if (t->order) tr_order_window_locked(t, &req.order_epoch, &req.order_g_limit);
        rc = sl_rpc_send(fd, SL_RPC_REQUEST, &req.base, NULL, 0, err);
    }
    if (rc == SL_OK) {
        c->send_ready = true;
        c->connected = true;
    }
    sl_mutex_unlock(&c->send_mu);
    sl_mutex_unlock(&t->mu);
    return rc;
}

sl_err_t tr_conn_open(tr_conn_t *c, int timeout_ms, bool *refused, sl_error_t *err)
{
    sl_trainer_t *t = c->t;
    *refused = false;
    /* One deadline for the whole attempt (connect_timeout_ms per attempt,
     * the authentication included), however a peer trickles its bytes. */
    uint64_t deadline = sl_clock_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    int fd = -1;
    sl_err_t rc = sl_rpc_connect(c->address, timeout_ms, &fd, err);
    bool installed = false;
    if (rc == SL_OK) {
        /* Acks and credits go out under the client's lock: a worker that
         * stopped reading must not hold it for long. */
        struct timeval tv = {2, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        rc = install(c, fd, err);
        installed = rc == SL_OK;
    }
    if (rc == SL_OK && t->secret) rc = sl_rpc_auth_client(fd, t->secret, deadline, err);
    uint32_t window = 0;
    if (rc == SL_OK) rc = hello(c, fd, deadline, &window, refused, err);
    if (rc == SL_OK) rc = go_live(c, fd, window, attach_shm(c, deadline), err);
    if (rc == SL_OK) return SL_OK;
    if (installed) uninstall(c);
    if (stopping(c)) return sl_error_set(err, SL_ERR_CLOSED, "%s: stopped", c->label);
    return sl_error_prefix(err, "%s: ", c->label);
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

/* BatchInfo.record_time_ms (Kafka batches: the first CreateTime absolute,
 * each later one the difference to the previous) as absolute times on the
 * batch (b->record_ms, in its arena). None: a table batch. */
static sl_err_t record_times(const Sluice__Dpp__BatchInfo *bi, sl_batch_t *b, sl_error_t *e)
{
    if (bi->n_record_time_ms == 0) return SL_OK;
    if (bi->n_record_time_ms != b->batch_size)
        return sl_error_set(e, SL_ERR_PROTOCOL, "batch info has %zu record times for %u samples",
                            bi->n_record_time_ms, b->batch_size);
    int64_t *t = sl_arena_alloc(b->arena, (size_t)b->batch_size * sizeof *t);
    if (!t)
        return sl_error_set(e, SL_ERR_NOMEM, "out of memory for %u record times", b->batch_size);
    uint64_t at = 0; /* modular, as the worker's differences are */
    for (uint32_t i = 0; i < b->batch_size; i++) {
        at = i ? at + (uint64_t)bi->record_time_ms[i] : (uint64_t)bi->record_time_ms[0];
        t[i] = (int64_t)at;
    }
    b->record_ms = t;
    return SL_OK;
}

/* Decode frame (len bytes) in place into *out, checking num_samples
 * against it and putting the record times on it. The caller attaches what
 * keeps frame alive (release). */
static sl_err_t decode_frame(sl_trainer_t *t, const Sluice__Dpp__BatchInfo *bi, const void *frame,
                             size_t len, sl_batch_t **out, sl_error_t *e)
{
    sl_batch_t *b = NULL;
    sl_err_t rc = sl_wire_decode(frame, len, &t->wire_limits, t->a, &b, e);
    if (rc == SL_OK && bi->num_samples != b->batch_size)
        rc = sl_error_set(e, SL_ERR_PROTOCOL, "batch info says %u samples, payload holds %u",
                          bi->num_samples, b->batch_size);
    if (rc == SL_OK) rc = record_times(bi, b, e);
    if (rc != SL_OK) {
        sl_batch_destroy(b);
        return rc;
    }
    *out = b;
    return SL_OK;
}

/* Decode a BATCH frame's payload in place: on SL_OK the caller owns *out,
 * whose release frees the payload (taken from f). */
static sl_err_t decode_batch(sl_trainer_t *t, sl_rpc_frame_t *f, sl_batch_t **out, sl_error_t *e)
{
    const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)f->msg;
    *out = NULL;
    if (f->payload == NULL) return sl_error_set(e, SL_ERR_PROTOCOL, "batch frame without payload");
    payload_ref_t *ref = sl_alloc(t->a, sizeof *ref);
    if (!ref) return sl_error_set(e, SL_ERR_NOMEM, "out of memory");
    sl_batch_t *b = NULL;
    sl_err_t rc = decode_frame(t, bi, f->payload, f->payload_len, &b, e);
    if (rc != SL_OK) {
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

/* A BATCH frame whose BatchInfo is a shared-memory descriptor
 * (shm_length > 0), checked against the mapping. Held (the worker granted
 * a hold): the batch is decoded in place in the mapping into *held, which
 * keeps the mapping and whose destroy releases the block (zero copy).
 * Otherwise the frame is copied out of the heap into a payload of its own,
 * so that the batch lives, and is acknowledged, exactly as one read from
 * the socket (the worker frees the block on ACK). Any other frame is left
 * alone. @return SL_ERR_PROTOCOL for a descriptor this connection cannot
 * take (never attached, outside the heap, with a payload too),
 * SL_ERR_TOO_LARGE, SL_ERR_NOMEM, a decoding error. */
static sl_err_t shm_payload(tr_conn_t *c, sl_rpc_frame_t *f, sl_batch_t **held, sl_error_t *e)
{
    sl_trainer_t *t = c->t;
    const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)f->msg;
    uint64_t off = bi->shm_offset, len = bi->shm_length;
    *held = NULL;
    if (len == 0) {
        atomic_fetch_add(&t->batches_socket, 1);
        return SL_OK;
    }
    if (f->payload)
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "batch frame with both a payload and a shared-memory descriptor");
    tr_shm_t *m = c->shm;
    if (!m)
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "shared-memory descriptor on a connection that did not attach");
    if (off > m->map.size || len > m->map.size - off)
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "shared-memory descriptor [%" PRIu64 ", +%" PRIu64
                            ") outside the %" PRIu64 "-byte heap",
                            off, len, m->map.size);
    if (len > t->rpc_limits.max_payload_bytes)
        return sl_error_set(e, SL_ERR_TOO_LARGE,
                            "shared-memory frame of %" PRIu64 " bytes (limit %" PRIu64 ")", len,
                            t->rpc_limits.max_payload_bytes);
    if (m->map.hold) {
        /* a lent block starts a page of its own (SL_RPC_SHM_BLOCK_ALIGN):
         * its release drops this process's copies of its pages alone, and
         * the frame is SL_ALIGN-aligned as decode needs */
        _Static_assert(SL_RPC_SHM_BLOCK_ALIGN % SL_ALIGN == 0, "a block start is SL_ALIGN-aligned");
        if (off % SL_RPC_SHM_BLOCK_ALIGN != 0)
            return sl_error_set(e, SL_ERR_PROTOCOL,
                                "shared-memory descriptor at offset %" PRIu64
                                ", not %u-byte aligned",
                                off, SL_RPC_SHM_BLOCK_ALIGN);
        sl_batch_t *b = NULL;
        sl_err_t rc = decode_frame(t, bi, m->map.base + off, (size_t)len, &b, e);
        if (rc == SL_OK && (rc = tr_shm_lend(m, bi->delivery_id, off, len, b, e)) != SL_OK)
            sl_batch_destroy(b);
        if (rc != SL_OK) return rc;
        *held = b;
    } else {
        void *p = sl_alloc_aligned(t->a, (size_t)len, SL_ALIGN);
        if (!p)
            return sl_error_set(e, SL_ERR_NOMEM, "out of memory for a %" PRIu64 "-byte frame", len);
        memcpy(p, m->map.base + off, (size_t)len);
        f->payload = p; /* the frame's allocator is t->a: freed with it, or taken by the batch */
        f->payload_len = (size_t)len;
    }
    atomic_fetch_add(&t->bytes, len);
    atomic_fetch_add(&t->batches_shm, 1);
    return SL_OK;
}

/* One BATCH frame: checked, decoded, handed to the committer (master mode)
 * or queued ready (direct mode). @return SL_OK, or the violation that ends
 * the connection. */
static sl_err_t on_batch(tr_conn_t *c, sl_rpc_frame_t *f, uint64_t *received, sl_error_t *e)
{
    sl_trainer_t *t = c->t;
    const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)f->msg;
    uint64_t id = bi->delivery_id;
    /* a batch of the deterministic order goes on the g-window, not on a
     * credit: the reorder buffer refuses one past the window */
    if ((!t->order || bi->order_g_plus_one == 0) && ++*received > atomic_load(&c->granted))
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "delivery %" PRIu64 ": batch %" PRIu64 " sent with only %" PRIu64
                            " credits granted",
                            id, *received, atomic_load(&c->granted));
    sl_err_t rc = t->fleet ? tr_fleet_check_batch(t, bi, e) : SL_OK;
    if (rc != SL_OK) return rc;
    sl_batch_t *b = NULL;
    if ((rc = shm_payload(c, f, &b, e)) != SL_OK)
        return sl_error_prefix(e,
                               "delivery %" PRIu64 " (split %" PRIu64 " batch %" PRIu64 "): ", id,
                               bi->split_id, bi->sequence);
    tr_item_t *it = sl_calloc(t->a, 1, sizeof *it);
    rc = !it  ? sl_error_set(e, SL_ERR_NOMEM, "out of memory")
         : !b ? decode_batch(t, f, &b, e)
              : SL_OK;
    if (rc != SL_OK) {
        if (it) sl_free(t->a, it, sizeof *it);
        sl_batch_destroy(b);
        return sl_error_prefix(e,
                               "delivery %" PRIu64 " (split %" PRIu64 " batch %" PRIu64 "): ", id,
                               bi->split_id, bi->sequence);
    }
    b->order_g_plus_one = bi->order_g_plus_one; /* handed out with the batch */
    *it = (tr_item_t){.batch = b,
                      .conn = c,
                      .delivery_id = id,
                      .epoch = bi->epoch,
                      .split = bi->split,
                      .generation = bi->generation,
                      .from_row = bi->from_row,
                      .to_row = bi->to_row,
                      .num_samples = bi->num_samples,
                      .order_g_plus_one = bi->order_g_plus_one};
    if (t->fleet) {
        tr_fleet_receive(t, it, bi->rank_plus_one); /* the committer: COMMIT first */
        return SL_OK;
    }
    sl_mutex_lock(&t->mu);
    c->held++;
    tr_ready_push_locked(t, it); /* no committer: ready on receipt */
    sl_mutex_unlock(&t->mu);
    return SL_OK;
}

/* How a connection's receiving ended. */
typedef enum conn_end {
    CONN_LOST,   /* the connection broke: reconnect */
    CONN_END,    /* END: the worker has nothing more for anyone */
    CONN_REFUSED /* the worker's ERROR or GOODBYE, a protocol violation: e says why */
} conn_end_t;

/* We hang up on a worker that broke the protocol: tell it why (its
 * unacknowledged batches go to someone else). */
static conn_end_t violation(tr_conn_t *c, int fd, const sl_error_t *e)
{
    sl_mutex_lock(&c->send_mu);
    if (c->fd == fd) sl_rpc_send_error(fd, e->code, e->msg);
    sl_mutex_unlock(&c->send_mu);
    return CONN_REFUSED;
}

/* Receive until the connection ends. c's thread. */
static conn_end_t receive(tr_conn_t *c, sl_error_t *e)
{
    sl_trainer_t *t = c->t;
    sl_mutex_lock(&c->send_mu);
    int fd = c->fd;
    sl_mutex_unlock(&c->send_mu);
    uint64_t received = 0;
    /* buffered: a descriptor's header and message (zero copy), or a
     * batch's header, message and first bytes, in one read */
    sl_rpc_inbuf_t in;
    sl_rpc_inbuf_init(&in, fd);
    for (;;) {
        sl_rpc_frame_t f;
        sl_err_t rc = sl_rpc_recv_from(sl_rpc_inbuf_read, &in, &t->rpc_limits, t->a, &f, e);
        if (rc != SL_OK) return tr_stream_broken(rc) ? violation(c, fd, e) : CONN_LOST;
        atomic_fetch_add(&t->bytes, f.wire_bytes);
        conn_end_t end = CONN_REFUSED;
        bool go_on = false;
        switch (f.type) {
        case SL_RPC_BATCH:
            go_on = on_batch(c, &f, &received, e) == SL_OK;
            if (!go_on) end = violation(c, fd, e);
            break;
        case SL_RPC_END: {
            const Sluice__Dpp__End *m = (const Sluice__Dpp__End *)f.msg;
            sl_mutex_lock(&t->mu);
            c->got_end = true;
            /* Direct mode: the job is over for this client too. */
            if (!t->fleet && t->state == TR_RUNNING) {
                t->state = TR_ENDED;
                t->end_batches = m->batches;
            }
            pthread_cond_broadcast(&t->cv);
            sl_mutex_unlock(&t->mu);
            end = CONN_END;
            break;
        }
        case SL_RPC_ERROR: {
            const Sluice__Dpp__Error *m = (const Sluice__Dpp__Error *)f.msg;
            sl_err_t code = sl_rpc_error_code(m);
            sl_error_set(e, code, "%s",
                         m->message && m->message[0] ? m->message : sl_err_str(code));
            break;
        }
        case SL_RPC_GOODBYE: {
            const Sluice__Dpp__Goodbye *g = (const Sluice__Dpp__Goodbye *)f.msg;
            sl_error_set(e, SL_ERR_CLOSED, "said goodbye: %s",
                         g->reason && g->reason[0] ? g->reason : "no reason given");
            break;
        }
        default:
            sl_error_set(e, SL_ERR_PROTOCOL, "unexpected %s frame from the worker",
                         sl_rpc_type_name(f.type));
            end = violation(c, fd, e);
        }
        sl_rpc_frame_free(&f);
        if (!go_on) return end;
    }
}

/* The connection ended for good (e says why, starting with the label).
 * Direct mode: the client ends with its only worker. Master mode: kept for
 * messages; the master's next ATTACHED decides whether the worker is tried
 * again. */
static void give_up(tr_conn_t *c, const sl_error_t *e)
{
    sl_trainer_t *t = c->t;
    if (!t->fleet) {
        tr_fail(t, e);
        return;
    }
    sl_mutex_lock(&t->mu);
    snprintf(t->last_problem, sizeof t->last_problem, "%.500s", e->msg);
    sl_mutex_unlock(&t->mu);
}

/* tr_attempt_fn for tr_reconnect. In master mode a failed attempt is
 * remembered at once: sl_trainer_next's timeout message names it. */
static sl_err_t attempt(void *ctx, int timeout_ms, bool *refused, sl_error_t *err)
{
    tr_conn_t *c = ctx;
    sl_err_t rc = tr_conn_open(c, timeout_ms, refused, err);
    if (rc != SL_OK && c->t->fleet && !stopping(c)) give_up(c, err);
    return rc;
}

static void *conn_main(void *arg)
{
    tr_conn_t *c = arg;
    /* named for profiles of a trainer process (top -H, perf) */
    pthread_setname_np(pthread_self(), "sl-t-conn");
    sl_trainer_t *t = c->t;
    sl_mutex_lock(&t->mu);
    bool up = c->connected; /* direct mode: connected by sl_trainer_connect */
    sl_mutex_unlock(&t->mu);
    bool first = !up;
    sl_error_t why = {0};
    for (;;) {
        if (!up) {
            sl_error_t e = {0};
            sl_err_t rc = tr_reconnect(t, &c->stop, c->label, first ? NULL : &why, attempt, c, &e);
            if (rc != SL_OK) {
                if (!stopping(c)) give_up(c, &e);
                break;
            }
        }
        first = false;
        atomic_fetch_add(&t->workers, 1);
        sl_error_clear(&why);
        conn_end_t end = receive(c, &why);
        atomic_fetch_sub(&t->workers, 1);
        if (stopping(c)) break;
        if (end == CONN_LOST) {
            /* Exactly once: what the dead connection delivered and nobody
             * acknowledged belongs to the worker again (it re-sends it). */
            sl_mutex_lock(&t->mu);
            int fd = detach_locked(c);
            tr_drop_unacked_locked(t, c);
            sl_mutex_unlock(&t->mu);
            if (fd >= 0) close(fd);
            up = false;
            continue;
        }
        if (end == CONN_END) {
            /* Keep the socket for the acks of batches still queued. */
            tr_pause(t, &c->stop, -1);
            break;
        }
        uninstall(c);
        sl_error_prefix(&why, "%s: ", c->label);
        give_up(c, &why);
        break;
    }
    uninstall(c);
    sl_mutex_lock(&t->mu);
    c->finished = true;
    pthread_cond_broadcast(&t->cv);
    sl_mutex_unlock(&t->mu);
    return NULL;
}

sl_err_t tr_conn_start(tr_conn_t *c, sl_error_t *err)
{
    int rc = pthread_create(&c->thread, NULL, conn_main, c);
    if (rc != 0)
        return sl_error_set(err, SL_ERR_IO, "%s: cannot start its thread: %s", c->label,
                            strerror(rc));
    c->thread_started = true;
    return SL_OK;
}

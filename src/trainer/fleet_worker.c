/* One worker connection of a client in master mode (fleet_internal.h): a
 * thread that connects (HELLO / WELCOME, credits), receives BATCH frames,
 * checks that they belong to this client's job and rank, and sends each
 * one's COMMIT to the master. It reconnects while the master names the
 * worker, for up to reconnect_ms; the batches it received stay in the
 * client either way (their commits decide). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "trainer/fleet_internal.h"

typedef enum slot_end {
    SLOT_LOST,   /* the connection broke: reconnect */
    SLOT_END,    /* END: the worker has nothing more for anyone */
    SLOT_REFUSED /* ERROR, GOODBYE, a protocol violation: give up on it */
} slot_end_t;

static void note_problem(sl_trainer_t *t, const fl_slot_t *s, const sl_error_t *e)
{
    pthread_mutex_lock(&t->mu);
    snprintf(t->fleet->last_worker_error, sizeof t->fleet->last_worker_error,
             "worker %.60s (%.100s): %.300s", s->worker_id, s->address, e->msg);
    pthread_mutex_unlock(&t->mu);
}

/* Stop sending on the slot and close its socket (slot thread only). */
static void slot_uninstall(fl_slot_t *s)
{
    sl_trainer_t *t = s->t;
    pthread_mutex_lock(&t->mu);
    s->connected = false;
    pthread_mutex_lock(&s->send_mu);
    int fd = s->fd;
    s->fd = -1;
    s->send_ready = false;
    pthread_mutex_unlock(&s->send_mu);
    pthread_mutex_unlock(&t->mu);
    if (fd >= 0) close(fd);
}

/* Connect, HELLO, WELCOME, then grant window - held credits. */
static sl_err_t slot_open(fl_slot_t *s, sl_error_t *err)
{
    sl_trainer_t *t = s->t;
    int fd;
    sl_err_t rc = sl_rpc_connect(s->address, t->connect_timeout_ms, &fd, err);
    if (rc != SL_OK) return rc;
    /* A worker that stopped reading must not hold the client's lock for
     * long: sends (acks, credits) under t->mu give up after 2 s. */
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    pthread_mutex_lock(&t->mu);
    bool stop = s->stop || t->closing;
    if (!stop) {
        pthread_mutex_lock(&s->send_mu);
        s->fd = fd; /* installed so that a stop can shut it down */
        pthread_mutex_unlock(&s->send_mu);
    }
    pthread_mutex_unlock(&t->mu);
    if (stop) {
        close(fd);
        return sl_error_set(err, SL_ERR_CLOSED, "stopped");
    }
    rc = sl_rpc_set_recv_timeout(fd, t->connect_timeout_ms, err);
    if (rc == SL_OK) rc = tr_authenticate(t, fd, t->connect_timeout_ms, err);
    Sluice__Dpp__Hello hello = SLUICE__DPP__HELLO__INIT;
    hello.protocol_version = SL_RPC_VERSION;
    hello.client_name = t->client_name;
    hello.rank = t->rank;
    hello.world_size = t->world_size;
    if (rc == SL_OK) rc = sl_rpc_send(fd, SL_RPC_HELLO, &hello.base, NULL, 0, err);
    sl_rpc_frame_t f = {0};
    if (rc == SL_OK) rc = sl_rpc_recv(fd, &t->rpc_limits, t->a, &f, err);
    uint32_t window = t->prefetch;
    if (rc == SL_OK) {
        atomic_fetch_add(&t->bytes, f.wire_bytes);
        if (f.type == SL_RPC_ERROR) {
            /* "not now" (a connection cap) is tried again, like a lost connection */
            const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
            sl_err_t code = sl_rpc_error_code(e);
            rc = sl_error_set(err, sl_rpc_error_retriable(code) ? code : SL_ERR_PROTOCOL,
                              "refused the connection: %s", e->message);
        } else if (f.type != SL_RPC_WELCOME) {
            rc = sl_error_set(err, SL_ERR_PROTOCOL, "expected a welcome frame, got %s%s",
                              sl_rpc_type_name(f.type), sl_rpc_auth_hint(f.type));
        } else {
            const Sluice__Dpp__Welcome *w = (const Sluice__Dpp__Welcome *)f.msg;
            if (w->protocol_version != SL_RPC_VERSION)
                rc = sl_error_set(err, SL_ERR_VERSION,
                                  "worker speaks trainer protocol version %u, this client %u",
                                  w->protocol_version, SL_RPC_VERSION);
            if (w->max_credits > 0 && w->max_credits < window) window = w->max_credits;
        }
    }
    sl_rpc_frame_free(&f);
    if (rc == SL_OK) rc = sl_rpc_set_recv_timeout(fd, 0, err);
    if (rc == SL_OK) {
        pthread_mutex_lock(&t->mu);
        pthread_mutex_lock(&s->send_mu);
        s->window = window;
        uint32_t grant = window > s->held ? window - s->held : 0;
        atomic_store(&s->granted, grant);
        if (grant > 0) {
            Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
            req.credits = grant;
            rc = sl_rpc_send(fd, SL_RPC_REQUEST, &req.base, NULL, 0, err);
        }
        if (rc == SL_OK) {
            s->send_ready = true;
            s->connected = true;
        }
        pthread_mutex_unlock(&s->send_mu);
        pthread_mutex_unlock(&t->mu);
    }
    if (rc != SL_OK) slot_uninstall(s);
    return rc;
}

/* One BATCH frame: checked, decoded, queued as pending, its COMMIT sent.
 * @return SL_OK, or the violation that ends the connection. */
static sl_err_t on_batch(fl_slot_t *s, sl_rpc_frame_t *f, uint64_t *received, sl_error_t *e)
{
    sl_trainer_t *t = s->t;
    tr_fleet_t *fl = t->fleet;
    const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)f->msg;
    uint64_t id = bi->delivery_id;
    if (++*received > atomic_load(&s->granted))
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "delivery %" PRIu64 ": batch %" PRIu64 " sent with only %" PRIu64
                            " credits granted",
                            id, *received, atomic_load(&s->granted));
    if (!bi->job_id || strcmp(bi->job_id, fl->job_id) != 0)
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "delivery %" PRIu64 ": batch of job '%.100s', this client reads job "
                            "'%s' (a worker under a master names its job in every batch)",
                            id, bi->job_id ? bi->job_id : "", fl->job_id);
    if (bi->from_row >= bi->to_row)
        return sl_error_set(e, SL_ERR_PROTOCOL,
                            "delivery %" PRIu64 ": split %u rows [%" PRIu64 ", %" PRIu64
                            ") is not a range",
                            id, bi->split, bi->from_row, bi->to_row);
    fl_item_t *it = sl_calloc(t->a, 1, sizeof *it);
    sl_batch_t *b = NULL;
    sl_err_t rc = it ? tr_decode_batch(t, f, &b, e) : sl_error_set(e, SL_ERR_NOMEM, "out of memory");
    if (rc != SL_OK) {
        sl_free(t->a, it, sizeof *it);
        return sl_error_prefix(e, "delivery %" PRIu64 " (split %u rows %" PRIu64 "..%" PRIu64
                                  "): ",
                               id, bi->split, bi->from_row, bi->to_row);
    }
    *it = (fl_item_t){.batch = b,
                      .slot = s,
                      .delivery_id = id,
                      .epoch = bi->epoch,
                      .split = bi->split,
                      .generation = bi->generation,
                      .from_row = bi->from_row,
                      .to_row = bi->to_row,
                      .num_samples = bi->num_samples};
    bool ours = bi->rank_plus_one == 0 || bi->rank_plus_one == t->rank + 1;
    pthread_mutex_lock(&t->mu);
    s->held++;
    if (!ours) {
        /* Static sharding: another rank's batch (a worker bug). Not
         * committed, so its rows stay todo and are leased again. */
        fl_slot_ack_locked(s, id);
        atomic_fetch_add(&fl->dropped, 1);
        fl_item_leave_locked(t, it, true);
        pthread_mutex_unlock(&t->mu);
        return SL_OK;
    }
    it->nonce = fl->next_nonce++;
    fl_list_push(&fl->pending, it);
    /* A copy: once mu is released the answer may come (if a reconnect
     * resent it) and the item leave. */
    fl_item_t copy = *it;
    pthread_mutex_unlock(&t->mu);
    fl_master_send_commit(t, &copy);
    return SL_OK;
}

/* Receive until the connection ends. */
static slot_end_t slot_receive(fl_slot_t *s)
{
    sl_trainer_t *t = s->t;
    pthread_mutex_lock(&s->send_mu);
    int fd = s->fd;
    pthread_mutex_unlock(&s->send_mu);
    uint64_t received = 0;
    for (;;) {
        sl_rpc_frame_t f;
        sl_error_t e = {0};
        sl_err_t rc = sl_rpc_recv(fd, &t->rpc_limits, t->a, &f, &e);
        if (rc != SL_OK) {
            if (rc == SL_ERR_PROTOCOL || rc == SL_ERR_VERSION || rc == SL_ERR_TOO_LARGE) {
                sl_rpc_send_error(fd, rc, e.msg);
                note_problem(t, s, &e);
                return SLOT_REFUSED;
            }
            return SLOT_LOST;
        }
        atomic_fetch_add(&t->bytes, f.wire_bytes);
        slot_end_t end = SLOT_LOST;
        bool go_on = false;
        switch (f.type) {
        case SL_RPC_BATCH:
            rc = on_batch(s, &f, &received, &e);
            if (rc == SL_OK) {
                go_on = true;
            } else {
                pthread_mutex_lock(&s->send_mu);
                sl_rpc_send_error(fd, rc, e.msg);
                pthread_mutex_unlock(&s->send_mu);
                note_problem(t, s, &e);
                end = SLOT_REFUSED;
            }
            break;
        case SL_RPC_END:
            pthread_mutex_lock(&t->mu);
            s->got_end = true;
            pthread_mutex_unlock(&t->mu);
            end = SLOT_END;
            break;
        case SL_RPC_ERROR: {
            const Sluice__Dpp__Error *m = (const Sluice__Dpp__Error *)f.msg;
            sl_error_set(&e, SL_ERR_PROTOCOL, "error %d: %s", m->code,
                         m->message ? m->message : "");
            note_problem(t, s, &e);
            end = SLOT_REFUSED;
            break;
        }
        case SL_RPC_GOODBYE:
            end = SLOT_REFUSED;
            break;
        default:
            sl_error_set(&e, SL_ERR_PROTOCOL, "unexpected %s frame from the worker",
                         sl_rpc_type_name(f.type));
            pthread_mutex_lock(&s->send_mu);
            sl_rpc_send_error(fd, SL_ERR_PROTOCOL, e.msg);
            pthread_mutex_unlock(&s->send_mu);
            note_problem(t, s, &e);
            end = SLOT_REFUSED;
        }
        sl_rpc_frame_free(&f);
        if (!go_on) return end;
    }
}

/* Sleep up to ms unless the slot stops. @return true when it stops. */
static bool slot_nap(fl_slot_t *s, int ms)
{
    sl_trainer_t *t = s->t;
    uint64_t until = sl_clock_ns() + (uint64_t)ms * 1000000ull;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    pthread_mutex_lock(&t->mu);
    while (!t->closing && !s->stop && sl_clock_ns() < until)
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    bool stop = t->closing || s->stop;
    pthread_mutex_unlock(&t->mu);
    return stop;
}

static void *slot_main(void *arg)
{
    fl_slot_t *s = arg;
    sl_trainer_t *t = s->t;
    bool ever = false;
    uint64_t deadline = 0; /* of the current run of failed attempts */
    int backoff = 50;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        bool stop = s->stop || t->closing;
        pthread_mutex_unlock(&t->mu);
        if (stop) break;
        sl_error_t e = {0};
        sl_err_t rc = slot_open(s, &e);
        if (rc == SL_OK) {
            if (ever) atomic_fetch_add(&t->reconnects, 1);
            ever = true;
            deadline = 0;
            backoff = 50;
            atomic_fetch_add(&t->fleet->workers, 1);
            slot_end_t end = slot_receive(s);
            atomic_fetch_sub(&t->fleet->workers, 1);
            slot_uninstall(s);
            if (end != SLOT_LOST) break;
            continue;
        }
        pthread_mutex_lock(&t->mu);
        stop = s->stop || t->closing;
        pthread_mutex_unlock(&t->mu);
        if (stop) break;
        note_problem(t, s, &e);
        if (rc == SL_ERR_VERSION || rc == SL_ERR_PROTOCOL) break;
        if (t->reconnect_ms < 0) break;
        uint64_t now = sl_clock_ns();
        if (deadline == 0) deadline = now + (uint64_t)t->reconnect_ms * 1000000ull;
        if (now >= deadline) break;
        if (slot_nap(s, backoff)) break;
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    pthread_mutex_lock(&t->mu);
    s->finished = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

fl_slot_t *fl_slot_start(sl_trainer_t *t, const char *worker_id, const char *address)
{
    fl_slot_t *s = sl_calloc(t->a, 1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->fd = -1;
    snprintf(s->worker_id, sizeof s->worker_id, "%s", worker_id);
    snprintf(s->address, sizeof s->address, "%s", address);
    pthread_mutex_init(&s->send_mu, NULL);
    if (pthread_create(&s->thread, NULL, slot_main, s) != 0) {
        pthread_mutex_destroy(&s->send_mu);
        sl_free(t->a, s, sizeof *s);
        return NULL;
    }
    s->thread_started = true;
    return s;
}

void fl_slot_stop_locked(fl_slot_t *s)
{
    s->stop = true;
    pthread_mutex_lock(&s->send_mu);
    if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR); /* unblocks its receive */
    pthread_mutex_unlock(&s->send_mu);
    pthread_cond_broadcast(&s->t->cv);
}

void fl_slot_free(fl_slot_t *s)
{
    if (!s) return;
    if (s->thread_started) pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->send_mu);
    sl_free(s->t->a, s, sizeof *s);
}

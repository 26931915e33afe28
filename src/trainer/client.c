/* The trainer client's public calls (include/sluice/trainer.h): connect,
 * hand out queued batches with their acknowledgement and credit, statistics
 * and close. The receive thread lives in conn.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/mem.h"
#include "trainer/fleet_internal.h"

sl_trainer_opts_t sl_trainer_opts_default(void)
{
    return (sl_trainer_opts_t){
        .address = NULL,
        .client_name = NULL,
        .prefetch = 4,
        .connect_timeout_ms = 5000,
        .reconnect_ms = 30000,
        .rank = 0,
        .world_size = 1,
        .limits = sl_wire_limits_default(),
        .allocator = NULL,
        .master = NULL,
        .job_id = NULL,
        .client_id = NULL,
        .refresh_ms = 1000,
        .cluster_secret_file = NULL,
    };
}

/* Everything but the thread and the socket; t may be half built. */
static void destroy(sl_trainer_t *t)
{
    const sl_allocator_t *a = t->a;
    tr_fleet_close(t); /* master mode: stops its threads, frees its state */
    pthread_mutex_lock(&t->mu);
    tr_drop_queue_locked(t);
    pthread_mutex_unlock(&t->mu);
    if (t->pending) sl_free(a, t->pending, (size_t)t->pending_cap * sizeof *t->pending);
    sl_strfree(a, t->address);
    sl_strfree(a, t->client_name);
    sl_rpc_secret_free(t->secret);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->send_mu);
    pthread_mutex_destroy(&t->mu);
    sl_free(a, t, sizeof *t);
}

static void fill_limits(sl_wire_limits_t *l)
{
    sl_wire_limits_t d = sl_wire_limits_default();
    if (l->max_frame_bytes == 0) l->max_frame_bytes = d.max_frame_bytes;
    if (l->max_batch_size == 0) l->max_batch_size = d.max_batch_size;
    if (l->max_keys == 0) l->max_keys = d.max_keys;
    if (l->max_groups == 0) l->max_groups = d.max_groups;
}

sl_err_t sl_trainer_connect(const sl_trainer_opts_t *opts, sl_trainer_t **out, sl_error_t *err)
{
    if (out) *out = NULL;
    bool master = opts && opts->master && opts->master[0];
    if (!opts || !out || (!master && (!opts->address || !opts->address[0])))
        return sl_error_set(err, SL_ERR_INVALID, "trainer: no worker or master address given");
    uint32_t world = opts->world_size ? opts->world_size : 1;
    if (opts->rank >= world)
        return sl_error_set(err, SL_ERR_INVALID, "trainer: rank %u is not below world size %u",
                            opts->rank, world);
    const sl_allocator_t *a = opts->allocator ? opts->allocator : sl_allocator_default();
    sl_trainer_t *t = sl_calloc(a, 1, sizeof *t);
    if (!t) return sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
    t->a = a;
    t->fd = -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->send_mu, NULL);
    sl_clock_cond_init(&t->cv);

    t->prefetch = opts->prefetch ? opts->prefetch : 4;
    t->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 5000;
    t->reconnect_ms = opts->reconnect_ms == 0 ? 30000 : opts->reconnect_ms;
    t->rank = opts->rank;
    t->world_size = world;
    t->wire_limits = opts->limits;
    fill_limits(&t->wire_limits);
    t->rpc_limits = sl_rpc_limits_default();
    t->rpc_limits.max_payload_bytes = t->wire_limits.max_frame_bytes;
    char name[64];
    if (opts->client_name)
        snprintf(name, sizeof name, "%s", opts->client_name);
    else
        snprintf(name, sizeof name, "trainer-%ld", (long)getpid());
    t->address = sl_strdup(a, master ? opts->master : opts->address);
    t->client_name = sl_strdup(a, name);
    /* At most one window per connection is handed out unacked while that
     * connection dies (tr_pending_ack_locked); twice that plus slack. */
    t->pending_cap = t->prefetch > UINT32_MAX / 4 ? UINT32_MAX / 2 : 2 * t->prefetch + 16;
    t->pending = sl_calloc(a, t->pending_cap, sizeof *t->pending);
    if (!t->address || !t->client_name || !t->pending) {
        destroy(t);
        return sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
    }
    sl_err_t src = sl_rpc_secret_load(opts->cluster_secret_file, &t->secret, err);
    if (src != SL_OK) {
        destroy(t);
        return sl_error_prefix(err, "trainer: ");
    }

    if (master) {
        sl_err_t rc = tr_fleet_connect(t, opts, err);
        if (rc != SL_OK) {
            destroy(t);
            return rc;
        }
        *out = t;
        return SL_OK;
    }
    sl_err_t rc = tr_open_connection(t, t->connect_timeout_ms, err);
    if (rc != SL_OK) {
        destroy(t);
        return rc;
    }
    int prc = pthread_create(&t->thread, NULL, tr_receive_main, t);
    if (prc != 0) {
        pthread_mutex_lock(&t->send_mu);
        int fd = t->fd;
        t->fd = -1;
        pthread_mutex_unlock(&t->send_mu);
        close(fd);
        destroy(t);
        return sl_error_set(err, SL_ERR_IO, "trainer: cannot start the receive thread: %s",
                            strerror(prc));
    }
    t->thread_started = true;
    *out = t;
    return SL_OK;
}

/* Acknowledge a handed-out batch and grant one credit in its place, at once:
 * both frames are tiny and the worker's next batch waits for the credit.
 * Application thread; takes send_mu. */
static void ack_and_request(sl_trainer_t *t, uint64_t delivery_id, uint64_t gen)
{
    pthread_mutex_lock(&t->send_mu);
    if (t->fd < 0 || !t->send_ready) {
        tr_pending_ack_locked(t, delivery_id);
        pthread_mutex_unlock(&t->send_mu);
        return;
    }
    Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
    uint64_t id = delivery_id;
    ack.n_delivery_ids = 1;
    ack.delivery_ids = &id;
    sl_err_t rc = sl_rpc_send(t->fd, SL_RPC_ACK, &ack.base, NULL, 0, NULL);
    if (rc != SL_OK) tr_pending_ack_locked(t, delivery_id);
    /* A batch of an earlier connection gets no credit back: the current
     * connection was granted a full window when it opened. */
    if (rc == SL_OK && gen == t->conn_gen) {
        Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
        req.credits = 1;
        atomic_fetch_add(&t->granted, 1);
        rc = sl_rpc_send(t->fd, SL_RPC_REQUEST, &req.base, NULL, 0, NULL);
    }
    /* A failed send leaves the stream out of step: make sure the receive
     * thread notices and reconnects rather than waiting on a dead socket. */
    if (rc != SL_OK) shutdown(t->fd, SHUT_RDWR);
    pthread_mutex_unlock(&t->send_mu);
}

sl_err_t sl_trainer_next(sl_trainer_t *t, int timeout_ms, sl_batch_t **out, sl_error_t *err)
{
    if (out) *out = NULL;
    if (!t || !out) return sl_error_set(err, SL_ERR_INVALID, "trainer next: no client or output");
    if (t->fleet) return tr_fleet_next(t, timeout_ms, out, err);
    uint64_t start = sl_clock_ns();
    uint64_t until = start + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    sl_err_t rc = SL_OK;
    pthread_mutex_lock(&t->mu);
    while (!t->head) {
        if (t->state == TR_FAILED) {
            rc = t->failure.code;
            if (err) *err = t->failure;
            break;
        }
        if (t->state == TR_ENDED) {
            rc = sl_error_set(err, SL_ERR_CLOSED,
                              "worker %s: the job has no more batches (%" PRIu64
                              " delivered by the worker)",
                              t->address, t->end_batches);
            break;
        }
        if (t->closing) {
            rc = sl_error_set(err, SL_ERR_CLOSED, "trainer client is closing");
            break;
        }
        if (timeout_ms == 0 || (timeout_ms > 0 && sl_clock_ns() >= until)) {
            rc = sl_error_set(err, SL_ERR_TIMEOUT, "worker %s: no batch within %d ms", t->address,
                              timeout_ms);
            break;
        }
        if (timeout_ms < 0)
            pthread_cond_wait(&t->cv, &t->mu);
        else
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    tq_item_t *it = NULL;
    if (rc == SL_OK) {
        it = t->head;
        t->head = it->next;
        if (!t->head) t->tail = NULL;
        atomic_fetch_sub(&t->queued, 1);
    }
    pthread_mutex_unlock(&t->mu);
    atomic_fetch_add(&t->wait_ns, sl_clock_ns() - start);
    if (!it) return rc;

    sl_batch_t *b = it->batch;
    uint64_t id = it->delivery_id, gen = it->gen;
    sl_free(t->a, it, sizeof *it);
    atomic_fetch_add(&t->batches, 1);
    atomic_fetch_add(&t->samples, b->batch_size);
    ack_and_request(t, id, gen);
    *out = b;
    return SL_OK;
}

void sl_trainer_release(sl_trainer_t *t, sl_batch_t *batch)
{
    (void)t;
    sl_batch_destroy(batch);
}

void sl_trainer_stats(const sl_trainer_t *t, sl_trainer_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!t) return;
    sl_trainer_t *m = (sl_trainer_t *)t; /* atomics only: nothing changes */
    out->batches = atomic_load(&m->batches);
    out->samples = atomic_load(&m->samples);
    out->bytes = atomic_load(&m->bytes);
    out->wait_ns = atomic_load(&m->wait_ns);
    out->reconnects = atomic_load(&m->reconnects);
    out->queued = atomic_load(&m->queued);
    if (m->fleet) {
        out->workers = atomic_load(&m->fleet->workers);
        out->committed = atomic_load(&m->fleet->committed);
        out->dropped = atomic_load(&m->fleet->dropped);
    }
}

void sl_trainer_close(sl_trainer_t *t)
{
    if (!t) return;
    if (t->fleet) {
        destroy(t); /* tr_fleet_close says goodbye and joins its threads */
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->closing = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_lock(&t->send_mu);
    if (t->fd >= 0) {
        if (t->send_ready) sl_rpc_send_goodbye(t->fd, "client closed");
        /* Unblocks the receive thread's read (or its handshake). */
        shutdown(t->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&t->send_mu);
    if (t->thread_started) pthread_join(t->thread, NULL);
    if (t->fd >= 0) close(t->fd);
    destroy(t);
}

/* The trainer client in master mode (fleet_internal.h explains the threads,
 * locks and the memory bound): set-up, handing out committed batches,
 * resume tokens and close. The master connection lives in fleet_master.c,
 * the worker connections in fleet_worker.c. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "trainer/fleet_internal.h"

void fl_list_push(fl_list_t *l, fl_item_t *it)
{
    it->next = NULL;
    it->prev = l->tail;
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->count++;
}

void fl_list_remove(fl_list_t *l, fl_item_t *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        l->head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        l->tail = it->prev;
    it->prev = it->next = NULL;
    l->count--;
}

void fl_slot_ack_locked(fl_slot_t *s, uint64_t delivery_id)
{
    pthread_mutex_lock(&s->send_mu);
    if (s->fd >= 0 && s->send_ready) {
        /* Delivery ids are unique per worker, so an ack on a newer connection
         * than the batch's still frees it if the worker holds it; an unknown
         * id is ignored (docs/PROTOCOL.md). */
        Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
        uint64_t id = delivery_id;
        ack.n_delivery_ids = 1;
        ack.delivery_ids = &id;
        if (sl_rpc_send(s->fd, SL_RPC_ACK, &ack.base, NULL, 0, NULL) != SL_OK)
            shutdown(s->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->send_mu);
}

void fl_item_leave_locked(sl_trainer_t *t, fl_item_t *it, bool free_batch)
{
    fl_slot_t *s = it->slot;
    if (free_batch) sl_batch_destroy(it->batch);
    sl_free(t->a, it, sizeof *it);
    s->held--;
    /* One credit back keeps held + in flight <= window on the current
     * connection; a connection that opens later grants window - held. */
    pthread_mutex_lock(&s->send_mu);
    if (s->fd >= 0 && s->send_ready) {
        Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
        req.credits = 1;
        atomic_fetch_add(&s->granted, 1);
        if (sl_rpc_send(s->fd, SL_RPC_REQUEST, &req.base, NULL, 0, NULL) != SL_OK)
            shutdown(s->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->send_mu);
}

/* A client id that no other client process shares: the master keeps commit
 * answers per (client_id, nonce), and nonces restart at 1 in every process. */
static void make_client_id(char *out, size_t cap, const char *name)
{
    uint64_t r = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &r, sizeof r) != (ssize_t)sizeof r) r = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^
         ((uint64_t)getpid() << 32);
    snprintf(out, cap, "%.80s-%016" PRIx64, name, r);
}

sl_err_t tr_fleet_connect(sl_trainer_t *t, const sl_trainer_opts_t *opts, sl_error_t *err)
{
    if (!opts->job_id || !opts->job_id[0])
        return sl_error_set(err, SL_ERR_INVALID, "trainer: master %s given without a job id",
                            opts->master);
    if (strlen(opts->master) >= FL_ADDR_MAX || strlen(opts->job_id) >= FL_ID_MAX ||
        (opts->client_id && strlen(opts->client_id) >= FL_ID_MAX))
        return sl_error_set(err, SL_ERR_INVALID,
                            "trainer: master address, job id or client id too long (limits %d, "
                            "%d, %d bytes)",
                            FL_ADDR_MAX - 1, FL_ID_MAX - 1, FL_ID_MAX - 1);
    tr_fleet_t *f = sl_calloc(t->a, 1, sizeof *f);
    if (!f) return sl_error_set(err, SL_ERR_NOMEM, "trainer: out of memory");
    snprintf(f->master, sizeof f->master, "%s", opts->master);
    snprintf(f->job_id, sizeof f->job_id, "%s", opts->job_id);
    if (opts->client_id && opts->client_id[0])
        snprintf(f->client_id, sizeof f->client_id, "%s", opts->client_id);
    else
        make_client_id(f->client_id, sizeof f->client_id, t->client_name);
    f->refresh_ms = opts->refresh_ms > 0 ? opts->refresh_ms : 1000;
    f->mfd = -1;
    f->next_nonce = 1;
    f->rep_at_ns = sl_clock_ns();
    pthread_mutex_init(&f->msend_mu, NULL);
    t->fleet = f;

    sl_err_t rc = fl_master_open(t, t->connect_timeout_ms, err);
    if (rc != SL_OK) return rc; /* the caller's destroy frees f */
    int prc = pthread_create(&f->mthread, NULL, fl_master_main, t);
    if (prc != 0)
        return sl_error_set(err, SL_ERR_IO, "trainer: cannot start the master thread: %s",
                            strerror(prc));
    f->mthread_started = true;
    return SL_OK;
}

sl_err_t tr_fleet_next(sl_trainer_t *t, int timeout_ms, sl_batch_t **out, sl_error_t *err)
{
    tr_fleet_t *f = t->fleet;
    uint64_t start = sl_clock_ns();
    uint64_t until = start + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    sl_err_t rc = SL_OK;
    pthread_mutex_lock(&t->mu);
    while (!f->ready.head) {
        if (t->state == TR_FAILED) {
            rc = t->failure.code;
            if (err) *err = t->failure;
            break;
        }
        /* Finished: every range is committed; answers still owed to us
         * (group commit) come first, they may be ours. */
        if (f->finished && f->pending.count == 0) {
            rc = sl_error_set(err, SL_ERR_CLOSED, "job %s: every epoch is delivered", f->job_id);
            break;
        }
        if (t->closing) {
            rc = sl_error_set(err, SL_ERR_CLOSED, "trainer client is closing");
            break;
        }
        if (timeout_ms == 0 || (timeout_ms > 0 && sl_clock_ns() >= until)) {
            rc = sl_error_set(err, SL_ERR_TIMEOUT,
                              "job %s: no batch within %d ms (%u workers connected, %u commits "
                              "unanswered%s%.300s)",
                              f->job_id, timeout_ms, atomic_load(&f->workers), f->pending.count,
                              f->last_worker_error[0] ? "; last problem: " : "",
                              f->last_worker_error);
            break;
        }
        if (timeout_ms < 0)
            pthread_cond_wait(&t->cv, &t->mu);
        else
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    if (rc == SL_OK) {
        fl_item_t *it = f->ready.head;
        fl_list_remove(&f->ready, it);
        atomic_store(&t->queued, f->ready.count);
        *out = it->batch;
        atomic_fetch_add(&t->batches, 1);
        atomic_fetch_add(&t->samples, it->batch->batch_size);
        fl_item_leave_locked(t, it, false);
    }
    pthread_mutex_unlock(&t->mu);
    atomic_fetch_add(&t->wait_ns, sl_clock_ns() - start);
    return rc;
}

/* Append one item's ref and rows to the token request (caller holds mu). */
static void add_undelivered(const tr_fleet_t *f, const fl_item_t *it,
                            Sluice__Control__SplitRef *refs, Sluice__Control__RowRange *rows,
                            Sluice__Control__SplitRef **rp, Sluice__Control__RowRange **qp,
                            size_t i)
{
    sluice__control__split_ref__init(&refs[i]);
    refs[i].job_id = (char *)f->job_id;
    refs[i].epoch = it->epoch;
    refs[i].split = it->split;
    refs[i].generation = it->generation;
    sluice__control__row_range__init(&rows[i]);
    rows[i].from_row = it->from_row;
    rows[i].to_row = it->to_row;
    rp[i] = &refs[i];
    qp[i] = &rows[i];
}

/* Send TOKEN_REQUEST naming every range committed, or maybe committed, and
 * not handed out. Taken under msend_mu, so every COMMIT already sent on
 * this connection is in the lists (commits join `pending` before they are
 * sent): the master, which reads frames in order, cannot have committed a
 * range for us that the request does not name. */
static sl_err_t send_token_request(sl_trainer_t *t, uint64_t *gen, sl_error_t *err)
{
    tr_fleet_t *f = t->fleet;
    pthread_mutex_lock(&f->msend_mu);
    if (f->mfd < 0) {
        pthread_mutex_unlock(&f->msend_mu);
        return SL_ERR_AGAIN;
    }
    pthread_mutex_lock(&t->mu);
    size_t n = (size_t)f->pending.count + f->ready.count;
    size_t bytes = n * (sizeof(Sluice__Control__SplitRef) + sizeof(Sluice__Control__RowRange) +
                        sizeof(void *) * 2);
    uint8_t *mem = n ? sl_alloc(t->a, bytes) : NULL;
    if (n && !mem) {
        pthread_mutex_unlock(&t->mu);
        pthread_mutex_unlock(&f->msend_mu);
        return sl_error_set(err, SL_ERR_NOMEM, "resume token: out of memory");
    }
    /* One block: n refs, n ranges, then the two pointer arrays (NULL when
     * n is 0: nothing to point into). */
    Sluice__Control__SplitRef *refs = (Sluice__Control__SplitRef *)mem;
    Sluice__Control__RowRange *rows = n ? (Sluice__Control__RowRange *)(refs + n) : NULL;
    Sluice__Control__SplitRef **rp = n ? (Sluice__Control__SplitRef **)(rows + n) : NULL;
    Sluice__Control__RowRange **qp = n ? (Sluice__Control__RowRange **)(rp + n) : NULL;
    size_t i = 0;
    for (const fl_item_t *it = f->ready.head; it; it = it->next)
        add_undelivered(f, it, refs, rows, rp, qp, i++);
    for (const fl_item_t *it = f->pending.head; it; it = it->next)
        add_undelivered(f, it, refs, rows, rp, qp, i++);
    f->token_wanted = true;
    f->token_ready = false;
    f->token_gen = f->mgen;
    *gen = f->mgen;
    pthread_mutex_unlock(&t->mu);
    Sluice__Control__TokenRequest req = SLUICE__CONTROL__TOKEN_REQUEST__INIT;
    req.job_id = f->job_id;
    req.client_id = f->client_id;
    req.n_undelivered_refs = n;
    req.undelivered_refs = rp;
    req.n_undelivered_rows = n;
    req.undelivered_rows = qp;
    sl_err_t rc = sl_rpc_send(f->mfd, SL_RPC_TOKEN_REQUEST, &req.base, NULL, 0, err);
    if (rc != SL_OK) shutdown(f->mfd, SHUT_RDWR); /* the master thread reconnects */
    pthread_mutex_unlock(&f->msend_mu);
    if (mem) sl_free(t->a, mem, bytes);
    return rc == SL_OK ? SL_OK : SL_ERR_AGAIN;
}

sl_err_t sl_trainer_resume_token(sl_trainer_t *t, int timeout_ms, uint8_t **token, size_t *len,
                                 sl_error_t *err)
{
    if (token) *token = NULL;
    if (len) *len = 0;
    if (!t || !token || !len)
        return sl_error_set(err, SL_ERR_INVALID, "resume token: no client or output");
    if (!t->fleet)
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "resume token: the client reads from worker %s directly; tokens "
                            "come from a master (opts.master)",
                            t->address);
    tr_fleet_t *f = t->fleet;
    uint64_t until = sl_clock_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    sl_err_t rc = SL_ERR_AGAIN;
    uint64_t gen = 0;
    for (;;) {
        if (rc == SL_ERR_AGAIN) {
            rc = send_token_request(t, &gen, err);
            if (rc != SL_OK && rc != SL_ERR_AGAIN) return rc;
        }
        pthread_mutex_lock(&t->mu);
        /* Wait for the answer, or for a new master connection to ask again
         * on (the old one's answer is lost with it). */
        while (!f->token_ready && t->state != TR_FAILED && !t->closing &&
               (rc != SL_OK || f->mgen == gen) &&
               (timeout_ms < 0 || sl_clock_ns() < until)) {
            uint64_t wake = sl_clock_ns() + 50000000ull;
            if (timeout_ms >= 0 && wake > until) wake = until;
            struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
                                  .tv_nsec = (long)(wake % 1000000000ull)};
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            /* A send that failed waits for the master thread's reconnect. */
            if (rc != SL_OK && f->mfd >= 0) break;
        }
        if (f->token_ready && !f->token) {
            f->token_ready = f->token_wanted = false;
            pthread_mutex_unlock(&t->mu);
            return sl_error_set(err, SL_ERR_PROTOCOL,
                                "resume token: master %s sent an empty token (or out of memory)",
                                f->master);
        }
        if (f->token_ready) {
            *token = f->token;
            *len = f->token_len;
            f->token = NULL;
            f->token_len = 0;
            f->token_ready = f->token_wanted = false;
            pthread_mutex_unlock(&t->mu);
            return SL_OK;
        }
        sl_err_t out = SL_OK;
        if (t->state == TR_FAILED) {
            out = t->failure.code;
            if (err) *err = t->failure;
        } else if (t->closing) {
            out = sl_error_set(err, SL_ERR_CLOSED, "resume token: the client is closing");
        } else if (timeout_ms >= 0 && sl_clock_ns() >= until) {
            out = sl_error_set(err, SL_ERR_TIMEOUT,
                               "resume token: master %s did not answer within %d ms", f->master,
                               timeout_ms);
        }
        if (out != SL_OK) f->token_wanted = false;
        bool again = rc != SL_OK || f->mgen != gen;
        pthread_mutex_unlock(&t->mu);
        if (out != SL_OK) return out;
        if (again) rc = SL_ERR_AGAIN;
    }
}

void sl_trainer_token_free(sl_trainer_t *t, uint8_t *token, size_t len)
{
    if (token) sl_free(t ? t->a : sl_allocator_default(), token, len);
}

void tr_fleet_close(sl_trainer_t *t)
{
    tr_fleet_t *f = t->fleet;
    if (!f) return;
    pthread_mutex_lock(&t->mu);
    t->closing = true;
    for (fl_slot_t *s = f->slots; s; s = s->next)
        fl_slot_stop_locked(s);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_lock(&f->msend_mu);
    if (f->mfd >= 0) {
        sl_rpc_send_goodbye(f->mfd, "client closed");
        shutdown(f->mfd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&f->msend_mu);
    if (f->mthread_started) pthread_join(f->mthread, NULL);
    if (f->mfd >= 0) close(f->mfd);
    f->mfd = -1;
    /* The master thread has ended: nobody starts slots any more. */
    for (;;) {
        pthread_mutex_lock(&t->mu);
        fl_slot_t *s = f->slots;
        if (s) f->slots = s->next;
        pthread_mutex_unlock(&t->mu);
        if (!s) break;
        /* Its items are freed below, so join without waiting for held == 0. */
        pthread_mutex_lock(&t->mu);
        s->held = 0;
        pthread_mutex_unlock(&t->mu);
        fl_slot_free(s);
    }
    fl_list_t *lists[2] = {&f->pending, &f->ready};
    for (int k = 0; k < 2; k++) {
        while (lists[k]->head) {
            fl_item_t *it = lists[k]->head;
            fl_list_remove(lists[k], it);
            sl_batch_destroy(it->batch);
            sl_free(t->a, it, sizeof *it);
        }
    }
    if (f->token) sl_free(t->a, f->token, f->token_len);
    pthread_mutex_destroy(&f->msend_mu);
    sl_free(t->a, f, sizeof *f);
    t->fleet = NULL;
}

/* One trainer client connection of the server (server.h): its receiver
 * thread (the connection's owner: handshake, HELLO, REQUEST, ACK,
 * GOODBYE) and its sender thread (BATCH, END, ERROR; one frame at a time
 * on the socket). Batches a client did not acknowledge go back to the
 * front of the ready queue when it goes. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "dpp/worker/server/server_internal.h"
#include "rpc/auth.h"
#include "rpc/port_hint.h"

static sl_err_t send_locked(client_t *c, sl_rpc_type_t type, const ProtobufCMessage *msg,
                            const void *payload, size_t len, sl_error_t *err)
{
    sl_mutex_lock(&c->wmu);
    sl_err_t rc = sl_rpc_send(c->fd, type, msg, payload, len, err);
    sl_mutex_unlock(&c->wmu);
    return rc;
}

static void send_error(client_t *c, sl_err_t code, const char *msg)
{
    sl_mutex_lock(&c->wmu);
    sl_rpc_send_error(c->fd, code, msg);
    sl_mutex_unlock(&c->wmu);
}

/* Under s->mu: the client is gone; its batches go back to the front, in
 * their original order. */
static void requeue_unacked(struct sl_worker_server *s, client_t *c) SL_REQUIRES(s->mu)
{
    for (uint32_t i = c->n_unacked; i-- > 0;) {
        sl_worker_server_item_t *it = c->unacked[i].item;
        /* Zero copy: the client may still read this block (a batch handed
         * out whose ACK did not get here); a twin keeps it under the hold,
         * and the copy sent again shares the frame. Without memory for the
         * twin the batch is not sent again (its lease is retired
         * unacknowledged: its rows are read again) and its block is never
         * reused under the reader (lost until the worker exits). */
        if (c->unacked[i].by_shm && c->holder && s->holders[c->holder - 1].open) {
            sitem_t *twin = dpp_server_item_twin(s, (sitem_t *)it);
            if (!twin) {
                s->outstanding--;
                if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
                it->accounted = 0;
                dpp_server_retire(s, it, false);
                continue;
            }
            dpp_server_hold(s, c, &twin->item, c->unacked[i].delivery_id);
        }
        sl_worker_msg_t m = {.type = 0, .ptr = it, .bytes = it->len};
        sl_worker_queue_t *q = dpp_server_item_queue(s, it, false);
        /* an ordered batch to its g's place (a re-leased split's lower g's
         * may have been queued since it was sent) */
        sl_err_t rc = !q ? SL_ERR_NOMEM
                      : it->lease.order_g_plus_one &&
                              sl_worker_queue_push_sorted(q, &m, dpp_server_g_later) == SL_OK
                          ? SL_OK
                          : sl_worker_queue_push_front(q, &m);
        if (rc != SL_OK) {
            /* Out of memory for a queue slot: the batch is lost; never
             * pretend it was delivered. */
            s->outstanding--;
            if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
            dpp_server_retire(s, it, false);
            dpp_server_item_free(s, it);
            continue;
        }
        s->st.redeliveries++;
    }
    c->n_unacked = 0;
    pthread_cond_broadcast(&s->cv);
}

/* Under s->mu (released while sending): END to c, once. */
static void send_end_locked(struct sl_worker_server *s, client_t *c, sl_error_t *err)
    SL_REQUIRES(s->mu)
{
    c->ended = true;
    Sluice__Dpp__End e = SLUICE__DPP__END__INIT;
    e.epochs = s->o.epochs;
    e.batches = s->st.batches_acked;
    e.samples = s->st.samples_acked;
    sl_mutex_unlock(&s->mu);
    send_locked(c, SL_RPC_END, &e.base, NULL, 0, err);
    sl_mutex_lock(&s->mu);
}

/* Is c asking for a batch for any rank: past its handshake, open, not
 * writing one now, with a credit and room in its window, and of this
 * worker's own job? */
static bool asking(const struct sl_worker_server *s, const client_t *c) SL_REQUIRES(s->mu)
{
    return c->hello_done && c->welcomed && !c->closed && !c->sender_done && !c->share_job[0] &&
           !c->sending && c->credits > 0 && c->n_unacked < s->o.max_credits;
}

/* Fair shares (docs/WORKER.md "Fair shares"): a batch for any rank goes
 * to the client served least among those asking, so that the clients of
 * every rank get an even share of what this worker makes (they no longer
 * race for each batch: the one whose sender thread woke first won, and
 * under dynamic sharding one rank got ten times another's batches). May c
 * take the next one? */
static bool my_turn(const struct sl_worker_server *s, const client_t *c) SL_REQUIRES(s->mu)
{
    for (const client_t *d = s->clients; d; d = d->next)
        if (d != c && d->served < c->served && asking(s, d)) return false;
    return true;
}

/* Add (sign +1) or take back (-1) one batch of len bytes in the sent
 * statistics. */
static void count_sent(struct sl_worker_server *s, size_t len, bool by_shm, int sign)
    SL_REQUIRES(s->mu)
{
    uint64_t n = sign > 0 ? 1 : (uint64_t)-1, bytes = sign > 0 ? len : (uint64_t)0 - len;
    s->st.batches_sent += n;
    s->st.bytes_sent += bytes;
    if (by_shm) {
        s->st.shm_batches += n;
        s->st.shm_bytes += bytes;
    }
}

/* May a batch popped from a client's queue go to it: an ordered job's
 * batch iff its (epoch, g) is below the client's g-window (docs/PROTOCOL.md,
 * "The deterministic order"), whatever its credits, so that the worker
 * holding a rank's next batch can always send it; any other batch on a
 * credit. The window's values are those read under s->mu (it only moves
 * forward, so they are never too wide). */
static bool may_send(const sl_worker_server_item_t *it, bool credit, uint32_t win_epoch,
                     uint64_t win_limit)
{
    if (!it->lease.order_g_plus_one) return credit;
    uint64_t g = it->lease.order_g_plus_one - 1;
    return it->origin.epoch < win_epoch || (it->origin.epoch == win_epoch && g < win_limit);
}

/* The window a sender read under s->mu, for sendable(). */
typedef struct send_check {
    bool credit;
    uint32_t win_epoch;
    uint64_t win_limit;
} send_check_t;

/* sl_worker_queue_pop_if's test: may the head go (may_send)? */
static bool sendable(const sl_worker_msg_t *head, void *ctx)
{
    const send_check_t *k = ctx;
    return may_send(head->ptr, k->credit, k->win_epoch, k->win_limit);
}

static void *sender_main(void *arg)
{
    client_t *c = arg;
    pthread_setname_np(pthread_self(), "sl-w-send");
    struct sl_worker_server *s = c->s;
    sl_error_t err = {0};
    sl_mutex_lock(&s->mu);
    /* a newcomer starts level with the least served, not below everyone */
    bool first = true;
    for (const client_t *d = s->clients; d; d = d->next)
        if (d != c && !d->closed && !d->share_job[0] && (first || d->served < c->served)) {
            c->served = d->served;
            first = false;
        }
    while (!c->closed && !s->stopping) {
        if (s->fail_code) {
            char msg[SL_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", s->fail_msg);
            sl_err_t code = s->fail_code;
            c->closed = true;
            sl_mutex_unlock(&s->mu);
            send_error(c, code, msg);
            shutdown(c->fd, SHUT_RDWR);
            sl_mutex_lock(&s->mu);
            break;
        }
        if (c->share_job[0] && !c->share_slot)
            c->share_slot = dpp_server_share_slot(s, c->share_job, false);
        /* a credit, or for an ordered job's batches its g-window */
        bool credit = c->credits > 0;
        uint32_t win_epoch = c->order_epoch;
        uint64_t win_limit = c->order_g_limit;
        bool window = win_epoch > 0 || win_limit > 0;
        bool refused = false;
        if ((credit || window) && c->n_unacked < s->o.max_credits &&
            (!c->share_job[0] || c->share_slot)) {
            sl_worker_msg_t m;
            /* this client's rank first, then batches for anyone; a client
             * of a shared job only that job's batches */
            sl_worker_queue_t *q = c->share_slot      ? s->share_ready[c->share_slot - 1]
                                   : c->rank_plus_one ? s->ready[c->rank_plus_one]
                                                      : NULL;
            sl_mutex_unlock(&s->mu);
            /* looked at and taken in one step: a head refused stays, and a
             * lower g queued meanwhile goes before it (popping it and
             * pushing it back to the front put it ahead of such a g, past
             * the window for good: the rank stalled) */
            send_check_t chk = {credit, win_epoch, win_limit};
            sl_err_t rc = q ? sl_worker_queue_pop_if(q, &m, sendable, &chk) : SL_ERR_TIMEOUT;
            /* the rank's queue is in g order: nothing behind it may go */
            refused = rc == SL_ERR_AGAIN;
            sl_mutex_lock(&s->mu);
            bool any = rc != SL_OK && credit && !c->share_slot && my_turn(s, c);
            sl_mutex_unlock(&s->mu);
            if (any) {
                q = s->ready[0];
                rc = sl_worker_queue_pop(q, &m, 0);
            }
            sl_mutex_lock(&s->mu);
            if (rc == SL_OK && any) {
                c->served++;
                pthread_cond_broadcast(&s->cv); /* the next least served may take one */
            }
            if (rc == SL_OK) {
                sl_worker_server_item_t *it = m.ptr;
                if (c->closed || s->stopping) {
                    dpp_server_put_back(q, &m);
                    break;
                }
                if (it->lease.handle && s->o.lease_live &&
                    !s->o.lease_live(s->o.lease_ctx, it->lease.handle)) {
                    dpp_server_drop_locked(s, it); /* revoked: another worker serves these rows */
                    continue;
                }
                uint64_t id = ++s->next_delivery;
                bool shm_on = c->shm_on;
                ((sitem_t *)it)->senders++;
                /* shm_on (read under the lock) is set before the
                 * connection's first credit: every batch of it goes one
                 * way, but a client holding its share of blocks gets
                 * payloads until it releases some */
                bool by_shm = it->in_shm && shm_on && dpp_server_hold_room(s, c);
                c->unacked[c->n_unacked++] = (unacked_t){it, id, by_shm};
                if (!it->lease.order_g_plus_one)
                    c->credits--; /* ordered: the window's */
                else
                    s->st.ordered_sent++;
                c->sending = true;
                size_t len = it->len;
                /* Counted before the send and taken back if it fails: the
                 * client may acknowledge the batch (and
                 * sl_worker_server_wait_done return) before this thread
                 * has the lock again, and no snapshot of the statistics
                 * may show a batch acknowledged but not sent. */
                count_sent(s, len, by_shm, +1);
                /* one batch fewer waits to be sent: a producer may go on */
                if (s->o.max_queued) pthread_cond_broadcast(&s->cv);
                sl_mutex_unlock(&s->mu);
                Sluice__Dpp__BatchInfo bi = SLUICE__DPP__BATCH_INFO__INIT;
                bi.delivery_id = id;
                bi.split_id = it->origin.split_id;
                bi.first_row = it->origin.first_row;
                bi.epoch = it->origin.epoch;
                bi.sequence = it->origin.sequence;
                bi.num_samples = it->num_samples;
                bi.n_record_time_ms = it->num_record_ms;
                bi.record_time_ms = it->record_ms;
                if (it->lease.handle) {
                    bi.job_id = it->share_slot ? s->share_job[it->share_slot - 1] : s->job_id;
                    bi.split = it->lease.split;
                    bi.generation = it->lease.generation;
                    bi.from_row = it->lease.from_row;
                    bi.to_row = it->lease.to_row;
                    bi.rank_plus_one = it->lease.rank_plus_one;
                    bi.order_g_plus_one = it->lease.order_g_plus_one;
                }
                if (by_shm) { /* a descriptor: the client reads the frame in the heap */
                    bi.shm_offset = it->shm_offset;
                    bi.shm_length = it->len;
                }
                uint64_t t0 = sl_clock_ns();
                rc = send_locked(c, SL_RPC_BATCH, &bi.base, by_shm ? NULL : it->frame,
                                 by_shm ? 0 : it->len, &err);
                uint64_t dt = sl_clock_ns() - t0;
                sl_mutex_lock(&s->mu);
                c->sending = false;
                s->st.send_ns += dt;
                sitem_t *si = (sitem_t *)it;
                si->senders--;
                if (si->acked && si->senders == 0) {
                    dpp_server_item_free(s, it);
                    it = NULL;
                }
                if (rc != SL_OK) {
                    count_sent(s, len, by_shm, -1); /* not sent after all */
                    /* the receiver sees the socket die and returns the batches */
                    shutdown(c->fd, SHUT_RDWR);
                    break;
                }
                continue;
            }
        }
        if (s->finished && s->outstanding == 0 && !c->ended) {
            send_end_locked(s, c, &err);
            continue;
        }
        /* a REQUEST that moved the window while the lock was let go woke
         * no one: look again rather than wait */
        if (refused && (c->order_epoch != win_epoch || c->order_g_limit != win_limit)) continue;
        if (refused) s->st.ordered_waits++;
        sl_clock_cond_wait_ms(&s->cv, &s->mu, 200);
    }
    /* Stopped with the job done (the worker exits when the last batch is
     * acknowledged): END may not have gone out yet. Without it the client
     * would take the close for a lost connection and try to reconnect to a
     * worker that is gone. sl_worker_server_stop waits for this. */
    if (!c->closed && s->stopping && s->finished && s->outstanding == 0 && !c->ended &&
        !s->fail_code)
        send_end_locked(s, c, &err);
    c->sender_done = true;
    pthread_cond_broadcast(&s->cv);
    s->st.cpu_ns += sl_clock_thread_cpu_ns();
    sl_mutex_unlock(&s->mu);
    return NULL;
}

/* Handle an ACK under s->mu. @return false (with msg) for an id this
 * worker never sent. */
static bool handle_ack(struct sl_worker_server *s, client_t *c, const Sluice__Dpp__Ack *ack,
                       bool wake, char *msg, size_t cap) SL_REQUIRES(s->mu)
{
    for (size_t i = 0; i < ack->n_delivery_ids; i++) {
        uint64_t id = ack->delivery_ids[i];
        uint32_t j = 0;
        while (j < c->n_unacked && c->unacked[j].delivery_id != id)
            j++;
        if (j == c->n_unacked) {
            /* An id this worker issued on another connection: a client
             * that reconnected acknowledges what it received before the
             * break. That batch went back to the ready queue when the old
             * connection closed and will be sent again (under a master its
             * commit then answers OVERLAP), so the ACK is ignored, not an
             * error that would cost the client this worker. */
            if (id != 0 && id <= s->next_delivery) {
                s->st.stale_acks++;
                continue;
            }
            snprintf(msg, cap, "ACK of delivery id %" PRIu64 ", which this worker never sent", id);
            return false;
        }
        sl_worker_server_item_t *it = c->unacked[j].item;
        bool by_shm = c->unacked[j].by_shm;
        memmove(c->unacked + j, c->unacked + j + 1, (c->n_unacked - j - 1) * sizeof *c->unacked);
        c->n_unacked--;
        s->outstanding--;
        /* zero copy: the client still reads the block until it releases it */
        dpp_server_item_consumed(s, it);
        if (!by_shm || !dpp_server_hold(s, c, it, id)) dpp_server_item_free(s, it);
    }
    if (!dpp_server_release(s, c, ack->released_ids, ack->n_released_ids, msg, cap)) return false;
    if (wake) pthread_cond_broadcast(&s->cv);
    return true;
}

void *dpp_server_client_main(void *arg)
{
    client_t *c = arg;
    pthread_setname_np(pthread_self(), "sl-w-recv");
    struct sl_worker_server *s = c->s;
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    char msg[SL_ERROR_MSG_MAX];
    /* One deadline for the whole handshake, not per read: a peer that
     * trickles bytes cannot hold the connection (and its thread) longer. */
    uint64_t deadline = c->opened_ms + (uint64_t)s->o.hello_timeout_ms;
    bool bad = false;
    sl_err_t rc = SL_OK;
    if (s->secret) {
        rc = sl_rpc_auth_server(c->fd, s->secret, deadline, &s->o.limits, &err);
        if (rc != SL_OK) {
            if (rc != SL_ERR_CLOSED) send_error(c, rc, err.msg);
            sl_mutex_lock(&s->mu);
            if (rc == SL_ERR_TIMEOUT)
                s->st.handshake_timeouts++;
            else if (rc != SL_ERR_CLOSED && !c->evicting)
                s->st.auth_failures++;
            sl_mutex_unlock(&s->mu);
            goto out;
        }
    }
    rc = sl_rpc_recv_until(c->fd, deadline, &s->o.limits, s->a, &f, &err);
    if (rc != SL_OK) {
        if (rc == SL_ERR_TIMEOUT) {
            snprintf(msg, sizeof msg, "no hello within %d ms of connecting", s->o.hello_timeout_ms);
            send_error(c, rc, msg);
            sl_mutex_lock(&s->mu);
            s->st.handshake_timeouts++;
            sl_mutex_unlock(&s->mu);
        } else if (strcmp(err.msg, SL_RPC_HTTP_REQUEST_MSG) == 0) {
            /* curl or a browser at the trainer port: answer in HTTP */
            sl_rpc_send_http_refusal(
                c->fd, "this is a sluice worker's trainer port (the binary protocol of trainer "
                       "clients), not its admin endpoint: HTTP clients use the address given "
                       "to sluice worker --admin");
            bad = true;
        } else if (rc != SL_ERR_CLOSED) {
            send_error(c, rc, err.msg);
            bad = true;
        }
        goto out;
    }
    if (f.type != SL_RPC_HELLO) {
        snprintf(msg, sizeof msg, "expected a hello frame first, got %s", sl_rpc_type_name(f.type));
        send_error(c, SL_ERR_PROTOCOL, msg);
        bad = true;
        goto out;
    }
    const Sluice__Dpp__Hello *h = (const Sluice__Dpp__Hello *)f.msg;
    if (h->protocol_version != SL_RPC_VERSION) {
        snprintf(msg, sizeof msg, "hello: protocol version %u, this worker speaks %u",
                 h->protocol_version, SL_RPC_VERSION);
        send_error(c, SL_ERR_VERSION, msg);
        bad = true;
        goto out;
    }
    uint32_t world = h->world_size ? h->world_size : 1; /* 0: a client that did not say */
    if (h->rank >= world) {
        snprintf(msg, sizeof msg, "hello: rank %u is not below world size %u", h->rank, world);
        send_error(c, SL_ERR_INVALID, msg);
        bad = true;
        goto out;
    }
    if (h->client_name && h->client_name[0]) {
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%s", h->client_name);
        snprintf(c->name + strlen(c->name), sizeof c->name - strlen(c->name), " (%s)", tmp);
    }
    c->rank_plus_one = h->rank < s->o.max_ranks ? h->rank + 1 : 0;
    sl_mutex_lock(&s->mu);
    /* a client of another job: that job's batches of shared passes only,
     * once there are some (its slot is looked up as they come) */
    if (h->job_id && h->job_id[0] && strcmp(h->job_id, s->job_id) != 0) {
        if (!s->o.lease_members || strlen(h->job_id) >= sizeof c->share_job) {
            sl_mutex_unlock(&s->mu);
            snprintf(msg, sizeof msg, "hello: this worker serves job '%s', not '%.200s'", s->job_id,
                     h->job_id);
            send_error(c, SL_ERR_NOT_FOUND, msg);
            bad = true;
            goto out;
        }
        snprintf(c->share_job, sizeof c->share_job, "%s", h->job_id);
        c->share_slot = dpp_server_share_slot(s, c->share_job, false);
    }
    /* a client that can map shared frames, on a worker that has a heap:
     * its WELCOME names the side channel and this connection's nonce */
    bool offer_shm = h->shm && s->o.shm && s->shm_lfd >= 0;
    bool h_shm_hold = h->shm_hold;
    sl_mutex_unlock(&s->mu);
    sl_rpc_frame_free(&f);
    uint8_t nonce[SL_RPC_SHM_NONCE_BYTES];
    if (offer_shm && sl_rpc_shm_nonce(nonce, &err) != SL_OK) offer_shm = false;
    sl_mutex_lock(&s->mu);
    if (offer_shm) {
        memcpy(c->shm_nonce, nonce, sizeof nonce);
        c->shm_asked = true;
        c->shm_hold_asked = h_shm_hold;
    }
    c->hello_done = true;
    c->last_rx_ms = sl_clock_ms();
    sl_mutex_unlock(&s->mu);
    Sluice__Dpp__Welcome w = SLUICE__DPP__WELCOME__INIT;
    w.protocol_version = SL_RPC_VERSION;
    w.worker_id = s->worker_id;
    w.job_id = c->share_job[0] ? c->share_job : s->job_id;
    w.max_credits = s->o.max_credits;
    if (offer_shm) {
        w.shm_socket = s->shm_name;
        w.shm_nonce.data = nonce;
        w.shm_nonce.len = sizeof nonce;
    }
    if (send_locked(c, SL_RPC_WELCOME, &w.base, NULL, 0, &err) != SL_OK) goto out;
    sl_mutex_lock(&s->mu);
    c->welcomed = true; /* from now on a stop waits for its sender (END) */
    sl_mutex_unlock(&s->mu);
    if (pthread_create(&c->send_thread, NULL, sender_main, c) != 0) {
        sl_mutex_lock(&s->mu);
        c->sender_done = true;
        sl_mutex_unlock(&s->mu);
        send_error(c, SL_ERR_NOMEM, "worker: cannot start a sender thread");
        goto out;
    }
    c->send_started = true;
    /* Buffered from here (the handshake read exact sizes, so nothing of
     * what follows was taken yet): a trainer's ACK and credit sent together
     * come out of one read. */
    sl_rpc_inbuf_t in;
    sl_rpc_inbuf_init(&in, c->fd);
    for (;;) {
        /* bytes already read may hold the next frame: poll only without */
        if (s->o.idle_timeout_ms > 0 && sl_rpc_inbuf_buffered(&in) == 0) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            int r = poll(&p, 1, s->o.idle_timeout_ms);
            if (r < 0 && errno == EINTR) continue;
            if (r == 0) {
                sl_mutex_lock(&s->mu);
                bool idle = c->n_unacked == 0;
                if (idle) s->st.idle_closed++;
                sl_mutex_unlock(&s->mu);
                /* Closed without a frame: a client that still wants
                 * batches sees a lost connection and reconnects. */
                if (idle) break;
                continue; /* the trainer is busy with batches it holds */
            }
        }
        rc = sl_rpc_recv_from(sl_rpc_inbuf_read, &in, &s->o.limits, s->a, &f, &err);
        if (rc != SL_OK) {
            sl_mutex_lock(&s->mu);
            bool quiet = c->closed || s->stopping;
            sl_mutex_unlock(&s->mu);
            if (rc != SL_ERR_CLOSED && !quiet) {
                send_error(c, rc, err.msg);
                bad = true;
            }
            break;
        }
        uint64_t now_ms = sl_clock_ms();
        if (f.type != SL_RPC_REQUEST && f.type != SL_RPC_ACK) {
            sl_mutex_lock(&s->mu);
            c->last_rx_ms = now_ms;
            sl_mutex_unlock(&s->mu);
        }
        if (f.type == SL_RPC_REQUEST) {
            const Sluice__Dpp__Request *r = (const Sluice__Dpp__Request *)f.msg;
            sl_mutex_lock(&s->mu);
            c->last_rx_ms = now_ms;
            if (r->shm_attached && !c->shm_on) {
                /* only after the side channel took this connection's nonce,
                 * and before any credit: every batch of the connection
                 * then knows its way */
                if (!c->shm_granted || c->credits > 0 || c->n_unacked > 0) {
                    sl_mutex_unlock(&s->mu);
                    snprintf(msg, sizeof msg, "request says shm_attached, but %s",
                             c->shm_granted ? "not in the connection's first request"
                                            : "no side-channel request presented this "
                                              "connection's nonce");
                    send_error(c, SL_ERR_PROTOCOL, msg);
                    bad = true;
                    break;
                }
                c->shm_on = true;
                s->st.shm_attached++;
            }
            c->credits += r->credits; /* < 2^32 per frame: cannot wrap in practice */
            if (r->order_epoch > c->order_epoch ||
                (r->order_epoch == c->order_epoch && r->order_g_limit > c->order_g_limit)) {
                c->order_epoch = r->order_epoch; /* forward only */
                c->order_g_limit = r->order_g_limit;
            }
            pthread_cond_broadcast(&s->cv);
            sl_mutex_unlock(&s->mu);
        } else if (f.type == SL_RPC_ACK) {
            /* With the next frame already here (a trainer's credit sent
             * with its ACK) the wake-up waits for it: one wake of the
             * sender for both, not one that finds no credit yet. That
             * frame's handling wakes, or the end of the connection. */
            bool wake = !sl_rpc_inbuf_frame_ready(&in);
            sl_mutex_lock(&s->mu);
            c->last_rx_ms = now_ms;
            bool ok = handle_ack(s, c, (const Sluice__Dpp__Ack *)f.msg, wake, msg, sizeof msg);
            sl_mutex_unlock(&s->mu);
            if (!ok) {
                send_error(c, SL_ERR_PROTOCOL, msg);
                bad = true;
                break;
            }
        } else if (f.type == SL_RPC_GOODBYE) {
            break;
        } else {
            snprintf(msg, sizeof msg, "unexpected %s frame from a client",
                     sl_rpc_type_name(f.type));
            send_error(c, SL_ERR_PROTOCOL, msg);
            bad = true;
            break;
        }
        sl_rpc_frame_free(&f);
    }
out:
    sl_rpc_frame_free(&f);
    sl_mutex_lock(&s->mu);
    c->closed = true;
    if (bad) s->st.bad_frames++;
    requeue_unacked(s, c);
    sl_mutex_unlock(&s->mu);
    shutdown(c->fd, SHUT_RDWR);
    if (c->send_started) pthread_join(c->send_thread, NULL);
    sl_mutex_lock(&s->mu);
    /* the sender may have taken a batch between requeue and its exit */
    requeue_unacked(s, c);
    dpp_server_hold_conn_end(s, c); /* its hold stays while its socket is open */
    s->st.clients_now--;
    s->st.cpu_ns += sl_clock_thread_cpu_ns();
    c->done = true;
    pthread_cond_broadcast(&s->cv);
    sl_mutex_unlock(&s->mu);
    return NULL;
}

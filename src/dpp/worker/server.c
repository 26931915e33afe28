/* The trainer-protocol server (server.h): an accept thread, and per client
 * a receiver thread (the connection's owner) and a sender thread. Shared
 * state (windows, unacknowledged batches, counters) is under one mutex;
 * the encoded batches wait in unbounded sl_worker_queues (the memory budget
 * bounds them), so a returned batch can go back to its front: one for
 * batches any client may take, and one per trainer rank with batches of
 * static sharding (created when the first such batch comes). */
#include "dpp/worker/server.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rpc/auth.h"

/* How long sl_worker_server_stop lets the sender threads of a finished job
 * send END before it shuts the connections down. END is one small frame
 * to a client that has read every batch: it leaves at once. */
#define END_GRACE_MS 2000

/* A queued batch. Sender threads read its frame without the lock, so an
 * ACK (or a stop) that comes while one is still writing it only marks it:
 * the last writer frees it. */
typedef struct sitem {
    sl_worker_server_item_t item; /* first: an sl_worker_server_item_t * is an sitem_t * */
    uint32_t senders;   /* threads writing the frame now (under s->mu) */
    bool acked;
} sitem_t;

typedef struct unacked {
    sl_worker_server_item_t *item;
    uint64_t delivery_id;
} unacked_t;

typedef struct client {
    struct sl_worker_server *s;
    int fd;
    char name[96];
    pthread_t recv_thread, send_thread;
    bool send_started;
    pthread_mutex_t wmu; /* one frame at a time on the socket */
    /* under s->mu */
    uint64_t credits; /* granted by REQUEST, one spent per BATCH sent */
    uint32_t n_unacked;
    unacked_t *unacked; /* [max_credits] */
    bool closed, ended, done;
    bool welcomed;    /* its sender thread runs or ran (or could not start) */
    bool sender_done; /* its sender thread has ended */
    uint32_t rank_plus_one; /* 1 + the rank of its HELLO, 0 when over max_ranks */
    bool hello_done;        /* past its handshake */
    bool evicting;          /* shut down to make room: its threads are ending */
    uint64_t opened_ms, last_rx_ms;
    struct client *next;
} client_t;

struct sl_worker_server {
    sl_worker_server_opts_t o;
    const sl_allocator_t *a;
    char worker_id[128], job_id[128];
    int lfd;
    uint16_t port;
    pthread_t accept_thread;
    sl_worker_queue_t **ready; /* [max_ranks + 1]: [0] any rank, [r + 1] rank r (NULL until used) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool finished, stopping, stopped;
    sl_err_t fail_code;
    char fail_msg[SL_ERROR_MSG_MAX];
    uint64_t outstanding; /* pushed, not yet acknowledged */
    uint64_t next_delivery;
    client_t *clients;
    uint32_t nclients; /* in the list: their threads may still run */
    char *secret;      /* the cluster secret (owned), NULL: no handshake */
    sl_worker_server_stats_t st;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void item_free(const sl_allocator_t *a, sl_worker_server_item_t *it)
{
    if (!it) return;
    sitem_t *si = (sitem_t *)it;
    if (si->senders > 0) { /* a sender is still writing it: it frees it after */
        si->acked = true;
        return;
    }
    sl_free(a, it->frame, it->len);
    sl_free(a, si, sizeof *si);
}

/* A lease's batch is gone (under s->mu). */
static void retire(struct sl_worker_server *s, const sl_worker_server_item_t *it, bool acked)
{
    if (it->lease && s->o.lease_retire) s->o.lease_retire(s->o.lease_ctx, it->lease, acked);
}

/* The queue of batches for rank_plus_one (under s->mu), created on first
 * use when create. @return NULL when out of range or memory (or absent). */
static sl_worker_queue_t *rank_queue(struct sl_worker_server *s, uint32_t rank_plus_one,
                                     bool create)
{
    if (rank_plus_one > s->o.max_ranks) return NULL;
    if (!s->ready[rank_plus_one] && create) s->ready[rank_plus_one] = sl_worker_queue_new(s->a, 0);
    return s->ready[rank_plus_one];
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

static sl_err_t send_locked(client_t *c, sl_rpc_type_t type, const ProtobufCMessage *msg,
                            const void *payload, size_t len, sl_error_t *err)
{
    pthread_mutex_lock(&c->wmu);
    sl_err_t rc = sl_rpc_send(c->fd, type, msg, payload, len, err);
    pthread_mutex_unlock(&c->wmu);
    return rc;
}

static void send_error(client_t *c, sl_err_t code, const char *msg)
{
    pthread_mutex_lock(&c->wmu);
    sl_rpc_send_error(c->fd, code, msg);
    pthread_mutex_unlock(&c->wmu);
}

/* Under s->mu: the client is gone; its batches go back to the front, in
 * their original order. */
static void requeue_unacked(struct sl_worker_server *s, client_t *c)
{
    for (uint32_t i = c->n_unacked; i-- > 0;) {
        sl_worker_server_item_t *it = c->unacked[i].item;
        sl_worker_msg_t m = {.type = 0, .ptr = it, .bytes = it->len};
        sl_worker_queue_t *q = rank_queue(s, it->rank_plus_one, false);
        if (!q || sl_worker_queue_push_front(q, &m) != SL_OK) {
            /* Out of memory for a queue slot: the batch is lost; never
             * pretend it was delivered. */
            s->outstanding--;
            if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
            retire(s, it, false);
            item_free(s->a, it);
            continue;
        }
        s->st.redeliveries++;
    }
    c->n_unacked = 0;
    pthread_cond_broadcast(&s->cv);
}

/* Under s->mu (released while sending): END to c, once. */
static void send_end_locked(struct sl_worker_server *s, client_t *c, sl_error_t *err)
{
    c->ended = true;
    Sluice__Dpp__End e = SLUICE__DPP__END__INIT;
    e.epochs = s->o.epochs;
    e.batches = s->st.batches_acked;
    e.samples = s->st.samples_acked;
    pthread_mutex_unlock(&s->mu);
    send_locked(c, SL_RPC_END, &e.base, NULL, 0, err);
    pthread_mutex_lock(&s->mu);
}

static void *sender_main(void *arg)
{
    client_t *c = arg;
    struct sl_worker_server *s = c->s;
    sl_error_t err = {0};
    pthread_mutex_lock(&s->mu);
    while (!c->closed && !s->stopping) {
        if (s->fail_code) {
            char msg[SL_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", s->fail_msg);
            sl_err_t code = s->fail_code;
            c->closed = true;
            pthread_mutex_unlock(&s->mu);
            send_error(c, code, msg);
            shutdown(c->fd, SHUT_RDWR);
            pthread_mutex_lock(&s->mu);
            break;
        }
        if (c->credits > 0 && c->n_unacked < s->o.max_credits) {
            sl_worker_msg_t m;
            /* this client's rank first, then batches for anyone */
            sl_worker_queue_t *q = c->rank_plus_one ? s->ready[c->rank_plus_one] : NULL;
            pthread_mutex_unlock(&s->mu);
            sl_err_t rc = q ? sl_worker_queue_pop(q, &m, 0) : SL_ERR_TIMEOUT;
            if (rc != SL_OK) {
                q = s->ready[0];
                rc = sl_worker_queue_pop(q, &m, 0);
            }
            pthread_mutex_lock(&s->mu);
            if (rc == SL_OK) {
                sl_worker_server_item_t *it = m.ptr;
                if (c->closed || s->stopping) {
                    sl_worker_queue_push_front(q, &m);
                    break;
                }
                if (it->lease && s->o.lease_live && !s->o.lease_live(s->o.lease_ctx, it->lease)) {
                    /* revoked: another worker serves these rows now */
                    s->outstanding--;
                    s->st.dropped++;
                    if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
                    retire(s, it, false);
                    item_free(s->a, it);
                    pthread_cond_broadcast(&s->cv);
                    continue;
                }
                uint64_t id = ++s->next_delivery;
                ((sitem_t *)it)->senders++;
                c->unacked[c->n_unacked++] = (unacked_t){it, id};
                c->credits--;
                pthread_mutex_unlock(&s->mu);
                Sluice__Dpp__BatchInfo bi = SLUICE__DPP__BATCH_INFO__INIT;
                bi.delivery_id = id;
                bi.split_id = it->origin.split_id;
                bi.first_row = it->origin.first_row;
                bi.epoch = it->origin.epoch;
                bi.sequence = it->origin.sequence;
                bi.num_samples = it->num_samples;
                if (it->lease) {
                    bi.job_id = s->job_id;
                    bi.split = it->split;
                    bi.generation = it->generation;
                    bi.from_row = it->from_row;
                    bi.to_row = it->to_row;
                    bi.rank_plus_one = it->rank_plus_one;
                }
                size_t len = it->len;
                uint64_t t0 = mono_ns();
                rc = send_locked(c, SL_RPC_BATCH, &bi.base, it->frame, it->len, &err);
                uint64_t dt = mono_ns() - t0;
                pthread_mutex_lock(&s->mu);
                s->st.send_ns += dt;
                sitem_t *si = (sitem_t *)it;
                si->senders--;
                if (si->acked && si->senders == 0) {
                    item_free(s->a, it);
                    it = NULL;
                }
                if (rc != SL_OK) {
                    /* the receiver sees the socket die and returns the batches */
                    shutdown(c->fd, SHUT_RDWR);
                    break;
                }
                s->st.batches_sent++;
                s->st.bytes_sent += len;
                continue;
            }
        }
        if (s->finished && s->outstanding == 0 && !c->ended) {
            send_end_locked(s, c, &err);
            continue;
        }
        timed_wait(&s->cv, &s->mu, 200);
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
    s->st.cpu_ns += thread_cpu_ns();
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Handle an ACK under s->mu. @return false (with msg) for an id this
 * worker never sent. */
static bool handle_ack(struct sl_worker_server *s, client_t *c, const Sluice__Dpp__Ack *ack,
                       char *msg, size_t cap)
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
        memmove(c->unacked + j, c->unacked + j + 1, (c->n_unacked - j - 1) * sizeof *c->unacked);
        c->n_unacked--;
        s->outstanding--;
        s->st.batches_acked++;
        s->st.samples_acked += it->num_samples;
        s->st.bytes_acked += it->len;
        s->st.bytes_acked_expanded += it->expanded_bytes;
        if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
        retire(s, it, true);
        item_free(s->a, it);
    }
    pthread_cond_broadcast(&s->cv);
    return true;
}

static void *client_main(void *arg)
{
    client_t *c = arg;
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
            pthread_mutex_lock(&s->mu);
            if (rc == SL_ERR_TIMEOUT) s->st.handshake_timeouts++;
            else if (rc != SL_ERR_CLOSED && !c->evicting) s->st.auth_failures++;
            pthread_mutex_unlock(&s->mu);
            goto out;
        }
    }
    rc = sl_rpc_recv_until(c->fd, deadline, &s->o.limits, s->a, &f, &err);
    if (rc != SL_OK) {
        if (rc == SL_ERR_TIMEOUT) {
            snprintf(msg, sizeof msg, "no hello within %d ms of connecting", s->o.hello_timeout_ms);
            send_error(c, rc, msg);
            pthread_mutex_lock(&s->mu);
            s->st.handshake_timeouts++;
            pthread_mutex_unlock(&s->mu);
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
    sl_rpc_frame_free(&f);
    pthread_mutex_lock(&s->mu);
    c->hello_done = true;
    c->last_rx_ms = sl_rpc_now_ms();
    pthread_mutex_unlock(&s->mu);
    Sluice__Dpp__Welcome w = SLUICE__DPP__WELCOME__INIT;
    w.protocol_version = SL_RPC_VERSION;
    w.worker_id = s->worker_id;
    w.job_id = s->job_id;
    w.max_credits = s->o.max_credits;
    if (send_locked(c, SL_RPC_WELCOME, &w.base, NULL, 0, &err) != SL_OK) goto out;
    pthread_mutex_lock(&s->mu);
    c->welcomed = true; /* from now on a stop waits for its sender (END) */
    pthread_mutex_unlock(&s->mu);
    if (pthread_create(&c->send_thread, NULL, sender_main, c) != 0) {
        pthread_mutex_lock(&s->mu);
        c->sender_done = true;
        pthread_mutex_unlock(&s->mu);
        send_error(c, SL_ERR_NOMEM, "worker: cannot start a sender thread");
        goto out;
    }
    c->send_started = true;
    for (;;) {
        if (s->o.idle_timeout_ms > 0) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            int r = poll(&p, 1, s->o.idle_timeout_ms);
            if (r < 0 && errno == EINTR) continue;
            if (r == 0) {
                pthread_mutex_lock(&s->mu);
                bool idle = c->n_unacked == 0;
                if (idle) s->st.idle_closed++;
                pthread_mutex_unlock(&s->mu);
                /* Closed without a frame: a client that still wants
                 * batches sees a lost connection and reconnects. */
                if (idle) break;
                continue; /* the trainer is busy with batches it holds */
            }
        }
        rc = sl_rpc_recv(c->fd, &s->o.limits, s->a, &f, &err);
        if (rc != SL_OK) {
            pthread_mutex_lock(&s->mu);
            bool quiet = c->closed || s->stopping;
            pthread_mutex_unlock(&s->mu);
            if (rc != SL_ERR_CLOSED && !quiet) {
                send_error(c, rc, err.msg);
                bad = true;
            }
            break;
        }
        pthread_mutex_lock(&s->mu);
        c->last_rx_ms = sl_rpc_now_ms();
        pthread_mutex_unlock(&s->mu);
        if (f.type == SL_RPC_REQUEST) {
            const Sluice__Dpp__Request *r = (const Sluice__Dpp__Request *)f.msg;
            pthread_mutex_lock(&s->mu);
            c->credits += r->credits; /* < 2^32 per frame: cannot wrap in practice */
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
        } else if (f.type == SL_RPC_ACK) {
            pthread_mutex_lock(&s->mu);
            bool ok = handle_ack(s, c, (const Sluice__Dpp__Ack *)f.msg, msg, sizeof msg);
            pthread_mutex_unlock(&s->mu);
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
    pthread_mutex_lock(&s->mu);
    c->closed = true;
    if (bad) s->st.bad_frames++;
    requeue_unacked(s, c);
    pthread_mutex_unlock(&s->mu);
    shutdown(c->fd, SHUT_RDWR);
    if (c->send_started) pthread_join(c->send_thread, NULL);
    pthread_mutex_lock(&s->mu);
    /* the sender may have taken a batch between requeue and its exit */
    requeue_unacked(s, c);
    s->st.clients_now--;
    s->st.cpu_ns += thread_cpu_ns();
    c->done = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void client_free(struct sl_worker_server *s, client_t *c)
{
    close(c->fd);
    pthread_mutex_destroy(&c->wmu);
    sl_free(s->a, c->unacked, (size_t)s->o.max_credits * sizeof *c->unacked);
    sl_free(s->a, c, sizeof *c);
}

/* Join and free the clients whose threads have finished (under s->mu). */
static void reap(struct sl_worker_server *s, bool all)
{
    client_t **pp = &s->clients;
    while (*pp) {
        client_t *c = *pp;
        if (c->done || all) {
            *pp = c->next;
            s->nclients--;
            pthread_mutex_unlock(&s->mu);
            pthread_join(c->recv_thread, NULL);
            client_free(s, c);
            pthread_mutex_lock(&s->mu);
            pp = &s->clients; /* the list may have changed while unlocked */
        } else {
            pp = &c->next;
        }
    }
}

/* The connection to close so that a new one fits under max_clients (under
 * s->mu): the oldest still in its handshake, else the one idle longest
 * that holds no batch and has been idle a second at least (so that real
 * clients over the cap do not take turns evicting each other at once).
 * NULL: none may go. */
static client_t *eviction_victim(struct sl_worker_server *s, uint64_t now_ms)
{
    client_t *pre = NULL, *idle = NULL;
    for (client_t *c = s->clients; c; c = c->next) {
        if (c->done || c->closed || c->evicting) continue;
        if (!c->hello_done) {
            if (!pre || c->opened_ms < pre->opened_ms) pre = c;
        } else if (c->n_unacked == 0 && now_ms - c->last_rx_ms >= 1000 &&
                   (!idle || c->last_rx_ms < idle->last_rx_ms)) {
            idle = c;
        }
    }
    return pre ? pre : idle;
}

/* Under s->mu, at max_clients with a connection waiting: make room.
 * @return true to accept it now, false to look again shortly (a victim's
 * threads are ending); *refuse: no room can be made, refuse it. */
static bool make_room(struct sl_worker_server *s, bool *refuse)
{
    *refuse = false;
    if (s->nclients < s->o.max_clients) return true;
    for (client_t *c = s->clients; c; c = c->next)
        if (c->evicting && !c->done) return false; /* wait until it is reaped */
    client_t *v = eviction_victim(s, sl_rpc_now_ms());
    if (!v) {
        *refuse = true;
        s->st.refused++;
        return true;
    }
    v->evicting = true;
    s->st.evicted++;
    shutdown(v->fd, SHUT_RDWR); /* its receiver ends, then its sender */
    return false;
}

static void *accept_main(void *arg)
{
    struct sl_worker_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool stop = s->stopping;
        reap(s, false);
        if (stop) s->st.cpu_ns += thread_cpu_ns();
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd p = {.fd = s->lfd, .events = POLLIN};
        int n = poll(&p, 1, 100);
        if (n <= 0) continue;
        /* At the cap a waiting connection stays in the backlog until a
         * victim's threads have ended: threads never exceed 2 x max_clients
         * + 1. */
        pthread_mutex_lock(&s->mu);
        bool refuse;
        bool now = make_room(s, &refuse);
        pthread_mutex_unlock(&s->mu);
        if (!now) {
            struct timespec ts = {0, 2 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        struct sockaddr_storage addr;
        socklen_t alen = sizeof addr;
        int fd = accept4(s->lfd, (struct sockaddr *)&addr, &alen, SOCK_CLOEXEC);
        if (fd < 0) continue;
        if (refuse) { /* a small frame on a new socket: the send cannot block */
            char msg[128];
            snprintf(msg, sizeof msg,
                     "worker: too many client connections (%u, all busy); try again later",
                     s->o.max_clients);
            sl_rpc_send_error(fd, SL_ERR_AGAIN, msg);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        client_t *c = sl_calloc(s->a, 1, sizeof *c);
        unacked_t *u = c ? sl_calloc(s->a, s->o.max_credits, sizeof *u) : NULL;
        if (!c || !u) {
            sl_rpc_send_error(fd, SL_ERR_NOMEM, "worker: out of memory for a connection");
            close(fd);
            if (c) sl_free(s->a, c, sizeof *c);
            continue;
        }
        c->s = s;
        c->fd = fd;
        c->unacked = u;
        c->opened_ms = c->last_rx_ms = sl_rpc_now_ms();
        pthread_mutex_init(&c->wmu, NULL);
        char host[64] = "?";
        if (addr.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&addr;
            uint32_t ip = ntohl(in->sin_addr.s_addr);
            snprintf(host, sizeof host, "%u.%u.%u.%u:%u", ip >> 24, (ip >> 16) & 255,
                     (ip >> 8) & 255, ip & 255, ntohs(in->sin_port));
        }
        snprintf(c->name, sizeof c->name, "%s", host);
        pthread_mutex_lock(&s->mu);
        if (s->stopping) {
            /* sl_worker_server_stop has shut the connections down already:
             * one started now would never be (its thread would read
             * forever and the stop join it forever) */
            pthread_mutex_unlock(&s->mu);
            client_free(s, c);
            break;
        }
        if (pthread_create(&c->recv_thread, NULL, client_main, c) != 0) {
            pthread_mutex_unlock(&s->mu);
            sl_rpc_send_error(fd, SL_ERR_NOMEM, "worker: cannot start a connection thread");
            client_free(s, c);
            continue;
        }
        c->next = s->clients;
        s->clients = c;
        s->nclients++;
        s->st.clients_total++;
        s->st.clients_now++;
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

sl_err_t sl_worker_server_start(const sl_worker_server_opts_t *opts, sl_worker_server_t **out,
                                sl_error_t *err)
{
    const sl_allocator_t *a = opts->allocator ? opts->allocator : sl_allocator_default();
    struct sl_worker_server *s = sl_calloc(a, 1, sizeof *s);
    if (!s) {
        if (opts->has_listen_fd) close(opts->listen_fd);
        return sl_error_set(err, SL_ERR_NOMEM, "server: out of memory");
    }
    s->a = a;
    s->o = *opts;
    s->o.allocator = a;
    if (!s->o.max_credits) s->o.max_credits = 16;
    if (!s->o.hello_timeout_ms) s->o.hello_timeout_ms = 10000;
    if (!s->o.max_clients) s->o.max_clients = 256;
    if (!s->o.idle_timeout_ms) s->o.idle_timeout_ms = 60000;
    if (opts->cluster_secret && !(s->secret = strdup(opts->cluster_secret))) {
        if (opts->has_listen_fd) close(opts->listen_fd);
        sl_free(a, s, sizeof *s);
        return sl_error_set(err, SL_ERR_NOMEM, "server: out of memory");
    }
    s->o.cluster_secret = NULL; /* s->secret is the copy */
    if (!s->o.limits.max_message_bytes) s->o.limits.max_message_bytes = 64u << 10;
    if (!s->o.max_ranks) s->o.max_ranks = 64;
    /* clients never send payloads; any declared payload is refused */
    s->o.limits.max_payload_bytes = 0;
    snprintf(s->worker_id, sizeof s->worker_id, "%s", opts->worker_id ? opts->worker_id : "worker");
    snprintf(s->job_id, sizeof s->job_id, "%s", opts->job_id ? opts->job_id : "job");
    s->o.worker_id = s->worker_id;
    s->o.job_id = s->job_id;
    s->lfd = opts->has_listen_fd ? opts->listen_fd : -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &attr);
    pthread_condattr_destroy(&attr);
    sl_err_t rc;
    s->ready = sl_calloc(a, (size_t)s->o.max_ranks + 1, sizeof *s->ready);
    if (!s->ready || !(s->ready[0] = sl_worker_queue_new(a, 0))) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "server: out of memory");
        goto fail;
    }
    /* listen names the address even when has_listen_fd (it was bound to it) */
    if (opts->listen &&
        (rc = sl_rpc_check_exposure("worker --listen", opts->listen, s->secret != NULL, err)))
        goto fail;
    if (opts->has_listen_fd) {
        s->lfd = opts->listen_fd;
        s->port = opts->listen_port;
    } else if ((rc = sl_rpc_listen(opts->listen, 64, &s->lfd, &s->port, err))) {
        goto fail;
    }
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
        rc = sl_error_set(err, SL_ERR_IO, "server: cannot start the accept thread");
        goto fail;
    }
    *out = s;
    return SL_OK;
fail:
    if (s->lfd >= 0) close(s->lfd);
    if (s->ready) {
        sl_worker_queue_destroy(s->ready[0]);
        sl_free(a, s->ready, ((size_t)s->o.max_ranks + 1) * sizeof *s->ready);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    sl_rpc_secret_free(s->secret);
    sl_free(a, s, sizeof *s);
    return rc;
}

uint16_t sl_worker_server_port(const sl_worker_server_t *s)
{
    return s->port;
}

sl_err_t sl_worker_server_push(sl_worker_server_t *s, const sl_worker_server_item_t *item,
                               sl_error_t *err)
{
    sitem_t *si = sl_calloc(s->a, 1, sizeof *si);
    sl_worker_server_item_t *it = si ? &si->item : NULL;
    if (!it) {
        if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, item->accounted);
        sl_free(s->a, item->frame, item->len);
        return sl_error_set(err, SL_ERR_NOMEM, "server: out of memory");
    }
    *it = *item;
    pthread_mutex_lock(&s->mu);
    sl_worker_queue_t *q = rank_queue(s, it->rank_plus_one, true);
    s->outstanding++;
    pthread_mutex_unlock(&s->mu);
    sl_err_t rc = SL_ERR_NOMEM;
    if (q) {
        sl_worker_msg_t m = {.type = 0, .ptr = it, .bytes = it->len};
        rc = sl_worker_queue_push(q, &m, -1);
    } else if (it->rank_plus_one > s->o.max_ranks) {
        rc = SL_ERR_INVALID;
    }
    pthread_mutex_lock(&s->mu);
    if (rc != SL_OK) {
        s->outstanding--;
        if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
        retire(s, it, false);
        item_free(s->a, it);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (rc == SL_ERR_INVALID)
        return sl_error_set(err, rc, "server: a batch for trainer rank %u (at most %u ranks)",
                            item->rank_plus_one - 1, s->o.max_ranks);
    if (rc != SL_OK)
        return sl_error_set(err, rc, "server: cannot queue a batch: %s", sl_err_str(rc));
    return SL_OK;
}

void sl_worker_server_finish(sl_worker_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->finished = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sl_worker_server_fail(sl_worker_server_t *s, sl_err_t code, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    if (!s->fail_code) {
        s->fail_code = code ? code : SL_ERR_IO;
        snprintf(s->fail_msg, sizeof s->fail_msg, "%s", msg ? msg : sl_err_str(code));
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

bool sl_worker_server_wait_done(sl_worker_server_t *s, int timeout_ms)
{
    uint64_t end = mono_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
    pthread_mutex_lock(&s->mu);
    bool done;
    while (!(done = s->finished && s->outstanding == 0) && !s->stopping) {
        if (timeout_ms >= 0 && mono_ns() >= end) break;
        timed_wait(&s->cv, &s->mu, 50);
    }
    pthread_mutex_unlock(&s->mu);
    return done;
}

void sl_worker_server_stats(sl_worker_server_t *s, sl_worker_server_stats_t *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->ready = 0;
    for (uint32_t r = 0; r <= s->o.max_ranks; r++)
        if (s->ready[r]) out->ready += sl_worker_queue_len(s->ready[r]);
    pthread_mutex_unlock(&s->mu);
}

/* Under s->mu: some welcomed client's sender has not ended yet. */
static bool senders_running(const struct sl_worker_server *s)
{
    for (const client_t *c = s->clients; c; c = c->next)
        if (c->welcomed && !c->sender_done) return true;
    return false;
}

void sl_worker_server_stop(sl_worker_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->stopped) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->stopped = true;
    s->stopping = true; /* no client is accepted from now on */
    bool done = s->finished && s->outstanding == 0 && !s->fail_code;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    shutdown(s->lfd, SHUT_RDWR); /* wakes the accept thread's poll (Linux) */
    pthread_join(s->accept_thread, NULL);
    close(s->lfd); /* a client reconnecting now is refused, not left waiting */
    s->lfd = -1;
    pthread_mutex_lock(&s->mu);
    /* The job is done: let every sender send END first (bounded; a sender
     * stuck writing to a client that stopped reading is cut off below). */
    uint64_t until = mono_ns() + (uint64_t)END_GRACE_MS * 1000000ull;
    while (done && senders_running(s) && mono_ns() < until)
        timed_wait(&s->cv, &s->mu, 20);
    for (client_t *c = s->clients; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    reap(s, true);
    pthread_mutex_unlock(&s->mu);
}

void sl_worker_server_destroy(sl_worker_server_t *s)
{
    if (!s) return;
    sl_worker_server_stop(s);
    pthread_mutex_lock(&s->mu);
    for (uint32_t r = 0; r <= s->o.max_ranks; r++) {
        if (!s->ready[r]) continue;
        sl_worker_queue_close(s->ready[r]);
        sl_worker_msg_t m;
        while (sl_worker_queue_pop(s->ready[r], &m, 0) == SL_OK) {
            sl_worker_server_item_t *it = m.ptr;
            if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
            retire(s, it, false);
            item_free(s->a, it);
        }
        sl_worker_queue_destroy(s->ready[r]);
    }
    pthread_mutex_unlock(&s->mu);
    sl_free(s->a, s->ready, ((size_t)s->o.max_ranks + 1) * sizeof *s->ready);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    sl_rpc_secret_free(s->secret);
    sl_free(s->a, s, sizeof *s);
}

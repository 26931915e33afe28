/* The trainer-protocol server (server.h): the accept thread and who may
 * connect (the client cap, eviction), the ready queues batches wait in,
 * start, stop and statistics. A connection's own threads are in
 * server_conn.c. */
#include "dpp/worker/server/server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dpp/worker/server/server_internal.h"
#include "rpc/auth.h"

/* How long sl_worker_server_stop lets the sender threads of a finished job
 * send END before it shuts the connections down. END is one small frame
 * to a client that has read every batch: it leaves at once. */
#define END_GRACE_MS 2000

void dpp_server_frame_free(struct sl_worker_server *s, void *frame, size_t len)
{
    uint64_t off;
    if (sl_shm_heap_offset(s->o.shm, frame, &off))
        sl_shm_heap_free(s->o.shm, frame);
    else
        sl_free(s->a, frame, len);
}

void dpp_server_item_free(struct sl_worker_server *s, sl_worker_server_item_t *it)
{
    if (!it) return;
    sitem_t *si = (sitem_t *)it;
    if (si->senders > 0) { /* a sender is still writing it: it frees it after */
        si->acked = true;
        return;
    }
    frame_ref_t *ref = si->ref;
    if (!ref || --ref->copies == 0) {
        /* a shared frame goes with its last copy, and its bytes with it */
        if (ref && s->o.budget) sl_worker_budget_release_pinned(s->o.budget, ref->accounted);
        dpp_server_frame_free(s, it->frame, it->len);
        if (it->record_ms)
            sl_free(s->a, it->record_ms, (size_t)it->num_record_ms * sizeof(int64_t));
        if (ref) sl_free(s->a, ref, sizeof *ref);
    }
    sl_free(s->a, si, sizeof *si);
}

uint32_t dpp_server_share_slot(struct sl_worker_server *s, const char *job_id, bool add)
{
    for (uint32_t k = 0; k < s->nshare; k++)
        if (strcmp(s->share_job[k], job_id) == 0) return k + 1;
    if (!add || s->nshare == SL_WORKER_SHARE_MAX || strlen(job_id) >= sizeof s->share_job[0])
        return 0;
    sl_worker_queue_t *q = sl_worker_queue_new(s->a, 0);
    if (!q) return 0;
    s->share_ready[s->nshare] = q;
    snprintf(s->share_job[s->nshare], sizeof s->share_job[0], "%s", job_id);
    return ++s->nshare;
}

sl_worker_queue_t *dpp_server_item_queue(struct sl_worker_server *s,
                                         const sl_worker_server_item_t *it, bool create)
{
    if (it->share_slot > 0)
        return it->share_slot <= s->nshare ? s->share_ready[it->share_slot - 1] : NULL;
    return dpp_server_rank_queue(s, it->lease.rank_plus_one, create);
}

/* Under s->mu: queue a copy of it (whose frame becomes shared) for each
 * member lease of a shared pass. A copy that cannot be made is not made:
 * that job's lease then reads those rows again later (its rows stay
 * uncommitted), never loses them. */
static void share_copies(struct sl_worker_server *s, sitem_t *si) SL_REQUIRES(s->mu)
{
    sl_worker_server_item_t *it = &si->item;
    if (!it->lease.handle || !s->o.lease_members || it->lease.rank_plus_one != 0) return;
    sl_worker_lease_member_t mem[SL_WORKER_SHARE_MAX];
    uint32_t n =
        s->o.lease_members(s->o.lease_ctx, it->lease.handle, it->len, mem, SL_WORKER_SHARE_MAX);
    if (n == 0) return;
    frame_ref_t *ref = sl_calloc(s->a, 1, sizeof *ref);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t slot = ref ? dpp_server_share_slot(s, mem[k].job_id, true) : 0;
        sitem_t *copy = slot ? sl_calloc(s->a, 1, sizeof *copy) : NULL;
        sl_worker_msg_t m = {.type = 0, .ptr = copy, .bytes = it->len};
        if (copy) {
            copy->item = *it;
            copy->item.accounted = 0; /* the frame's bytes are accounted once, in ref */
            copy->item.share_slot = slot;
            copy->item.lease.handle = mem[k].handle;
            copy->item.lease.generation = mem[k].generation;
            copy->ref = ref;
        }
        if (!copy || sl_worker_queue_push(s->share_ready[slot - 1], &m, -1) != SL_OK) {
            if (copy) sl_free(s->a, copy, sizeof *copy);
            if (s->o.lease_retire) s->o.lease_retire(s->o.lease_ctx, mem[k].handle, false);
            continue;
        }
        if (!si->ref) { /* the first copy: the frame is shared from now on */
            ref->copies = 1;
            ref->accounted = it->accounted;
            it->accounted = 0;
            si->ref = ref;
        }
        ref->copies++;
        s->outstanding++;
        s->st.shared_batches++;
        s->st.shared_bytes += it->len;
    }
    if (ref && !si->ref) sl_free(s->a, ref, sizeof *ref);
}

void dpp_server_item_consumed(struct sl_worker_server *s, sl_worker_server_item_t *it)
{
    s->st.batches_acked++;
    s->st.samples_acked += it->num_samples;
    s->st.bytes_acked += it->len;
    s->st.bytes_acked_expanded += it->expanded_bytes;
    if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
    it->accounted = 0;
    dpp_server_retire(s, it, true);
}

void dpp_server_item_acked(struct sl_worker_server *s, sl_worker_server_item_t *it)
{
    dpp_server_item_consumed(s, it);
    dpp_server_item_free(s, it);
}

sitem_t *dpp_server_item_twin(struct sl_worker_server *s, sitem_t *si)
{
    frame_ref_t *ref = si->ref ? NULL : sl_calloc(s->a, 1, sizeof *ref);
    sitem_t *twin = si->ref || ref ? sl_calloc(s->a, 1, sizeof *twin) : NULL;
    if (!twin) {
        if (ref) sl_free(s->a, ref, sizeof *ref);
        return NULL;
    }
    if (ref) { /* the frame is shared from now on; its bytes are accounted once, in ref */
        ref->copies = 1;
        ref->accounted = si->item.accounted;
        si->item.accounted = 0;
        si->ref = ref;
    }
    si->ref->copies++;
    twin->item = si->item;
    twin->item.accounted = 0;
    twin->item.lease.handle = NULL; /* the twin is never acknowledged nor retired */
    /* record_ms goes with the last copy of the frame (dpp_server_item_free) */
    twin->ref = si->ref;
    return twin;
}

void dpp_server_retire(struct sl_worker_server *s, const sl_worker_server_item_t *it, bool acked)
{
    if (it->lease.handle && s->o.lease_retire)
        s->o.lease_retire(s->o.lease_ctx, it->lease.handle, acked);
}

sl_worker_queue_t *dpp_server_rank_queue(struct sl_worker_server *s, uint32_t rank_plus_one,
                                         bool create)
{
    if (rank_plus_one > s->o.max_ranks) return NULL;
    if (!s->ready[rank_plus_one] && create) s->ready[rank_plus_one] = sl_worker_queue_new(s->a, 0);
    return s->ready[rank_plus_one];
}

static void client_free(struct sl_worker_server *s, client_t *c)
{
    close(c->fd);
    sl_mutex_destroy(&c->wmu);
    sl_free(s->a, c->unacked, (size_t)s->o.max_credits * sizeof *c->unacked);
    sl_free(s->a, c, sizeof *c);
}

/* Join and free the clients whose threads have finished (under s->mu). */
static void reap(struct sl_worker_server *s, bool all) SL_REQUIRES(s->mu)
{
    client_t **pp = &s->clients;
    while (*pp) {
        client_t *c = *pp;
        if (c->done || all) {
            *pp = c->next;
            s->nclients--;
            sl_mutex_unlock(&s->mu);
            pthread_join(c->recv_thread, NULL);
            client_free(s, c);
            sl_mutex_lock(&s->mu);
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
static client_t *eviction_victim(struct sl_worker_server *s, uint64_t now_ms) SL_REQUIRES(s->mu)
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
static bool make_room(struct sl_worker_server *s, bool *refuse) SL_REQUIRES(s->mu)
{
    *refuse = false;
    if (s->nclients < s->o.max_clients) return true;
    for (client_t *c = s->clients; c; c = c->next)
        if (c->evicting && !c->done) return false; /* wait until it is reaped */
    client_t *v = eviction_victim(s, sl_clock_ms());
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
    pthread_setname_np(pthread_self(), "sl-w-accept");
    for (;;) {
        sl_mutex_lock(&s->mu);
        bool stop = s->stopping;
        reap(s, false);
        if (stop) s->st.cpu_ns += sl_clock_thread_cpu_ns();
        sl_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd p = {.fd = s->lfd, .events = POLLIN};
        int n = poll(&p, 1, 100);
        if (n <= 0) continue;
        /* At the cap a waiting connection stays in the backlog until a
         * victim's threads have ended: threads never exceed 2 x max_clients
         * + 1. */
        sl_mutex_lock(&s->mu);
        bool refuse;
        bool now = make_room(s, &refuse);
        sl_mutex_unlock(&s->mu);
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
        c->opened_ms = c->last_rx_ms = sl_clock_ms();
        sl_mutex_init(&c->wmu);
        char host[64] = "?";
        if (addr.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&addr;
            uint32_t ip = ntohl(in->sin_addr.s_addr);
            snprintf(host, sizeof host, "%u.%u.%u.%u:%u", ip >> 24, (ip >> 16) & 255,
                     (ip >> 8) & 255, ip & 255, ntohs(in->sin_port));
        }
        snprintf(c->name, sizeof c->name, "%s", host);
        sl_mutex_lock(&s->mu);
        if (s->stopping) {
            /* sl_worker_server_stop has shut the connections down already:
             * one started now would never be (its thread would read
             * forever and the stop join it forever) */
            sl_mutex_unlock(&s->mu);
            client_free(s, c);
            break;
        }
        if (pthread_create(&c->recv_thread, NULL, dpp_server_client_main, c) != 0) {
            sl_mutex_unlock(&s->mu);
            sl_rpc_send_error(fd, SL_ERR_NOMEM, "worker: cannot start a connection thread");
            client_free(s, c);
            continue;
        }
        c->next = s->clients;
        s->clients = c;
        s->nclients++;
        s->st.clients_total++;
        s->st.clients_now++;
        sl_mutex_unlock(&s->mu);
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
    if (opts->cluster_secret && !(s->secret = sl_strdup(NULL, opts->cluster_secret))) {
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
    s->shm_lfd = -1;
    sl_mutex_init(&s->mu);
    sl_mutex_init(&s->order_mu);
    sl_clock_cond_init(&s->cv);
    sl_clock_cond_init(&s->state_cv);
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
    if (s->o.shm && (rc = sl_rpc_shm_listen(s->shm_name, &s->shm_lfd, err))) goto fail;
    if (s->o.shm) {
        /* two holds a connection: one mapping still held by batches of a
         * connection that ended, one of its successor */
        s->nholders = 2 * s->o.max_clients;
        s->holders = sl_calloc(a, s->nholders, sizeof *s->holders);
        if (!s->holders) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "server: out of memory");
            goto fail;
        }
        for (uint32_t k = 0; k < s->nholders; k++)
            s->holders[k].fd = -1;
        if (pthread_create(&s->shm_thread, NULL, dpp_server_shm_main, s) != 0) {
            rc = sl_error_set(err, SL_ERR_IO, "server: cannot start the shared-memory thread");
            goto fail;
        }
        s->shm_started = true;
    }
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
        rc = sl_error_set(err, SL_ERR_IO, "server: cannot start the accept thread");
        goto fail;
    }
    *out = s;
    return SL_OK;
fail:
    if (s->shm_started) {
        sl_mutex_lock(&s->mu);
        s->stopping = true;
        sl_mutex_unlock(&s->mu);
        pthread_join(s->shm_thread, NULL);
    }
    if (s->shm_lfd >= 0) close(s->shm_lfd);
    if (s->holders) sl_free(a, s->holders, (size_t)s->nholders * sizeof *s->holders);
    if (s->lfd >= 0) close(s->lfd);
    if (s->ready) {
        sl_worker_queue_destroy(s->ready[0]);
        sl_free(a, s->ready, ((size_t)s->o.max_ranks + 1) * sizeof *s->ready);
    }
    sl_mutex_destroy(&s->mu);
    sl_mutex_destroy(&s->order_mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->state_cv);
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
    if (item->lease.handle && item->lease.ordered)
        return dpp_server_order_put(s, item, err); /* server_order.c: in g order */
    return dpp_server_push_now(s, item, err);
}

/* A rank's queue in (epoch, g) order (the deterministic order): a split
 * leased again after its count went at cut (det28h) may bring g's below
 * those this worker queued already, and the sender sends a rank's queue
 * from its head only (server_conn.c may_send). */
bool dpp_server_g_later(const sl_worker_msg_t *queued, const sl_worker_msg_t *m)
{
    const sl_worker_server_item_t *a = queued->ptr, *b = m->ptr;
    if (!a->lease.order_g_plus_one) return false;
    return a->origin.epoch > b->origin.epoch ||
           (a->origin.epoch == b->origin.epoch &&
            a->lease.order_g_plus_one > b->lease.order_g_plus_one);
}

void dpp_server_put_back(sl_worker_queue_t *q, const sl_worker_msg_t *m)
{
    const sl_worker_server_item_t *it = m->ptr;
    if (!it->lease.order_g_plus_one ||
        sl_worker_queue_push_sorted(q, m, dpp_server_g_later) != SL_OK)
        sl_worker_queue_push_front(q, m);
}

sl_err_t dpp_server_push_now(struct sl_worker_server *s, const sl_worker_server_item_t *item,
                             sl_error_t *err)
{
    sitem_t *si = sl_calloc(s->a, 1, sizeof *si);
    sl_worker_server_item_t *it = si ? &si->item : NULL;
    if (!it) {
        if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, item->accounted);
        dpp_server_frame_free(s, item->frame, item->len);
        if (item->record_ms)
            sl_free(s->a, item->record_ms, (size_t)item->num_record_ms * sizeof(int64_t));
        return sl_error_set(err, SL_ERR_NOMEM, "server: out of memory");
    }
    *it = *item;
    it->share_slot = 0;
    it->in_shm = sl_shm_heap_offset(s->o.shm, it->frame, &it->shm_offset);
    if (s->o.discard) { /* sent and acknowledged at once, as if by a client */
        sl_mutex_lock(&s->mu);
        s->st.batches_sent++;
        s->st.bytes_sent += it->len;
        dpp_server_item_acked(s, it);
        pthread_cond_broadcast(&s->cv);
        sl_mutex_unlock(&s->mu);
        return SL_OK;
    }
    sl_mutex_lock(&s->mu);
    sl_worker_queue_t *q = dpp_server_rank_queue(s, it->lease.rank_plus_one, true);
    s->outstanding++;
    share_copies(s, si); /* also when q is NULL: the copies do not need it */
    sl_mutex_unlock(&s->mu);
    sl_err_t rc = SL_ERR_NOMEM;
    if (q) {
        sl_worker_msg_t m = {.type = 0, .ptr = it, .bytes = it->len};
        rc = it->lease.order_g_plus_one ? sl_worker_queue_push_sorted(q, &m, dpp_server_g_later)
                                        : sl_worker_queue_push(q, &m, -1);
    } else if (it->lease.rank_plus_one > s->o.max_ranks) {
        rc = SL_ERR_INVALID;
    }
    sl_mutex_lock(&s->mu);
    if (rc != SL_OK) {
        s->outstanding--;
        if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
        dpp_server_retire(s, it, false);
        dpp_server_item_free(s, it);
    }
    pthread_cond_broadcast(&s->cv);
    sl_mutex_unlock(&s->mu);
    if (rc == SL_ERR_INVALID)
        return sl_error_set(err, rc, "server: a batch for trainer rank %u (at most %u ranks)",
                            item->lease.rank_plus_one - 1, s->o.max_ranks);
    if (rc != SL_OK)
        return sl_error_set(err, rc, "server: cannot queue a batch: %s", sl_err_str(rc));
    return SL_OK;
}

static void drop_revoked_in(struct sl_worker_server *s, sl_worker_queue_t *q) SL_REQUIRES(s->mu);

sl_err_t sl_worker_server_wait_room(sl_worker_server_t *s, uint32_t rank_plus_one)
{
    /* A batch for one trainer rank (static sharding) never waits here: its
     * rank's trainer may not read yet while others do, and batches of
     * those must not stall behind it (the budget bounds them, as before). */
    if (!s->o.max_queued || rank_plus_one) return SL_OK;
    sl_mutex_lock(&s->mu);
    bool waited = false;
    /* Woken when a sender takes a batch, a revoked one is dropped, or a
     * stop; the timeout only bounds a missed wakeup. */
    while (!s->stopping && !s->waits_ended && !s->fail_code &&
           sl_worker_queue_len(s->ready[0]) >= s->o.max_queued) {
        /* A queue full of a revoked lease's batches may have no sender
         * left to pop them (its job failed and its trainers went): the
         * producer, still cutting that lease's stripe, waited for room
         * forever and its worker never exited. Swept only after a wait in
         * which no sender made room, never on the way of a moving queue. */
        if (waited && s->o.lease_live) {
            drop_revoked_in(s, s->ready[0]);
            if (sl_worker_queue_len(s->ready[0]) < s->o.max_queued) break;
        }
        sl_clock_cond_wait_ms(&s->cv, &s->mu, 200);
        waited = true;
    }
    sl_err_t rc = s->stopping || s->waits_ended || s->fail_code ? SL_ERR_CLOSED : SL_OK;
    sl_mutex_unlock(&s->mu);
    return rc;
}

void sl_worker_server_end_waits(sl_worker_server_t *s)
{
    sl_mutex_lock(&s->mu);
    s->waits_ended = true;
    pthread_cond_broadcast(&s->cv);
    sl_mutex_unlock(&s->mu);
}

void sl_worker_server_finish(sl_worker_server_t *s)
{
    sl_mutex_lock(&s->mu);
    s->finished = true;
    pthread_cond_broadcast(&s->cv);
    pthread_cond_broadcast(&s->state_cv);
    sl_mutex_unlock(&s->mu);
}

void sl_worker_server_fail(sl_worker_server_t *s, sl_err_t code, const char *msg)
{
    sl_mutex_lock(&s->mu);
    if (!s->fail_code) {
        s->fail_code = code ? code : SL_ERR_IO;
        snprintf(s->fail_msg, sizeof s->fail_msg, "%s", msg ? msg : sl_err_str(code));
    }
    pthread_cond_broadcast(&s->cv);
    sl_mutex_unlock(&s->mu);
}

void dpp_server_drop_locked(struct sl_worker_server *s, sl_worker_server_item_t *it)
{
    s->outstanding--;
    s->st.dropped++;
    if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
    dpp_server_retire(s, it, false);
    dpp_server_item_free(s, it);
    pthread_cond_broadcast(&s->cv);
}

/* Under s->mu: the batches of q whose lease the master took back, dropped
 * without waiting for a sender to pop them. Once the producer has finished,
 * a worker whose clients are gone has no sender left to pop them, and it
 * waited for them forever (a worker whose lease was taken back while the
 * master restarted never exited). The others keep their order. */
static void drop_revoked_in(struct sl_worker_server *s, sl_worker_queue_t *q) SL_REQUIRES(s->mu)
{
    uint32_t n = q ? sl_worker_queue_len(q) : 0;
    sl_worker_msg_t *keep = n ? sl_alloc(s->a, (size_t)n * sizeof *keep) : NULL;
    if (!keep) return; /* nothing queued, or no memory now: the next poll tries again */
    uint32_t k = 0;
    sl_worker_msg_t m;
    for (uint32_t i = 0; i < n && sl_worker_queue_pop(q, &m, 0) == SL_OK; i++) {
        sl_worker_server_item_t *it = m.ptr;
        if (it->lease.handle && !s->o.lease_live(s->o.lease_ctx, it->lease.handle))
            dpp_server_drop_locked(s, it);
        else
            keep[k++] = m;
    }
    /* room: they were just popped, and only s->mu holders push front; an
     * ordered batch to its g's place, as a lower g may have come meanwhile
     * (the hold releases outside s->mu) */
    while (k-- > 0)
        dpp_server_put_back(q, &keep[k]);
    sl_free(s->a, keep, (size_t)n * sizeof *keep);
}

bool sl_worker_server_wait_done(sl_worker_server_t *s, int timeout_ms)
{
    uint64_t end = sl_clock_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
    sl_mutex_lock(&s->mu);
    bool done;
    while (!(done = s->finished && s->outstanding == 0) && !s->stopping) {
        if (s->finished && s->o.lease_live) {
            for (uint32_t r = 0; r <= s->o.max_ranks; r++)
                drop_revoked_in(s, s->ready[r]);
            for (uint32_t k = 0; k < s->nshare; k++)
                drop_revoked_in(s, s->share_ready[k]);
            if ((done = s->outstanding == 0)) break;
        }
        if (timeout_ms >= 0 && sl_clock_ns() >= end) break;
        /* before the producer finishes nothing but finished or stopping
         * can end the wait: state_cv, not every batch's wake-up */
        sl_clock_cond_wait_ms(s->finished ? &s->cv : &s->state_cv, &s->mu, 50);
    }
    sl_mutex_unlock(&s->mu);
    return done;
}

void sl_worker_server_stats(sl_worker_server_t *s, sl_worker_server_stats_t *out)
{
    sl_mutex_lock(&s->mu);
    *out = s->st;
    out->ready = 0;
    for (uint32_t r = 0; r <= s->o.max_ranks; r++)
        if (s->ready[r]) out->ready += sl_worker_queue_len(s->ready[r]);
    for (uint32_t k = 0; k < s->nshare; k++)
        out->ready += sl_worker_queue_len(s->share_ready[k]);
    sl_mutex_unlock(&s->mu);
}

/* Under s->mu: some welcomed client's sender has not ended yet. */
static bool senders_running(const struct sl_worker_server *s) SL_REQUIRES(s->mu)
{
    for (const client_t *c = s->clients; c; c = c->next)
        if (c->welcomed && !c->sender_done) return true;
    return false;
}

void sl_worker_server_stop(sl_worker_server_t *s)
{
    sl_mutex_lock(&s->mu);
    if (s->stopped) {
        sl_mutex_unlock(&s->mu);
        return;
    }
    s->stopped = true;
    s->stopping = true; /* no client is accepted from now on */
    bool done = s->finished && s->outstanding == 0 && !s->fail_code;
    pthread_cond_broadcast(&s->cv);
    pthread_cond_broadcast(&s->state_cv);
    sl_mutex_unlock(&s->mu);
    shutdown(s->lfd, SHUT_RDWR); /* wakes the accept thread's poll (Linux) */
    pthread_join(s->accept_thread, NULL);
    close(s->lfd); /* a client reconnecting now is refused, not left waiting */
    s->lfd = -1;
    if (s->shm_started) { /* its poll wakes within 100 ms and sees stopping */
        pthread_join(s->shm_thread, NULL);
        s->shm_started = false;
    }
    if (s->shm_lfd >= 0) close(s->shm_lfd);
    s->shm_lfd = -1;
    sl_mutex_lock(&s->mu);
    /* The job is done: let every sender send END first (bounded; a sender
     * stuck writing to a client that stopped reading is cut off below). */
    uint64_t until = sl_clock_ns() + (uint64_t)END_GRACE_MS * 1000000ull;
    while (done && senders_running(s) && sl_clock_ns() < until)
        sl_clock_cond_wait_ms(&s->cv, &s->mu, 20);
    for (client_t *c = s->clients; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    reap(s, true);
    sl_mutex_unlock(&s->mu);
}

void sl_worker_server_destroy(sl_worker_server_t *s)
{
    if (!s) return;
    sl_worker_server_stop(s);
    dpp_server_order_free(s);
    sl_mutex_lock(&s->mu);
    if (s->holders) { /* the shm thread has ended: the blocks still held go */
        dpp_server_holds_free(s);
        sl_free(s->a, s->holders, (size_t)s->nholders * sizeof *s->holders);
        s->holders = NULL;
    }
    for (uint32_t r = 0; r <= s->o.max_ranks; r++) {
        if (!s->ready[r]) continue;
        sl_worker_queue_close(s->ready[r]);
        sl_worker_msg_t m;
        while (sl_worker_queue_pop(s->ready[r], &m, 0) == SL_OK) {
            sl_worker_server_item_t *it = m.ptr;
            if (s->o.budget) sl_worker_budget_release_pinned(s->o.budget, it->accounted);
            dpp_server_retire(s, it, false);
            dpp_server_item_free(s, it);
        }
        sl_worker_queue_destroy(s->ready[r]);
    }
    for (uint32_t k = 0; k < s->nshare; k++) {
        sl_worker_queue_close(s->share_ready[k]);
        sl_worker_msg_t m;
        while (sl_worker_queue_pop(s->share_ready[k], &m, 0) == SL_OK) {
            sl_worker_server_item_t *it = m.ptr;
            dpp_server_retire(s, it, false);
            dpp_server_item_free(s, it);
        }
        sl_worker_queue_destroy(s->share_ready[k]);
    }
    sl_mutex_unlock(&s->mu);
    sl_free(s->a, s->ready, ((size_t)s->o.max_ranks + 1) * sizeof *s->ready);
    sl_mutex_destroy(&s->mu);
    sl_mutex_destroy(&s->order_mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->state_cv);
    sl_rpc_secret_free(s->secret);
    sl_free(s->a, s, sizeof *s);
}

/* The server's side channel for the shared-memory hand-over (server.h,
 * docs/PROTOCOL.md "Shared-memory hand-over"): one thread accepts on the
 * abstract Unix socket and serves each request in turn, within a short
 * deadline, handing the heap's memfd to a peer of this uid that presents
 * the nonce of a connection whose WELCOME offered it. A slow or hostile
 * peer on the host costs the others at most that deadline each; they then
 * stay on socket payloads, which always work.
 *
 * Zero copy (a HELLO with shm_hold): the reply grants SL_RPC_SHM_HOLD when
 * a holder slot is free, and the socket stays open as the client's hold:
 * a block it was sent as a descriptor outlives the ACK until the client
 * releases it (Ack.released_ids) or the socket ends (the client unmapped
 * the heap, or its process died); then every block still held is freed.
 * The thread polls the holders' sockets with the listening one. */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/log_events.h"
#include "dpp/worker/server/server_internal.h"

/* A client under a hold drops its private copies of a block's pages when
 * it lets the block go (sl_rpc_shm_forget): blocks must own whole pages. */
_Static_assert(SL_SHM_HEAP_GRANULE % SL_RPC_SHM_BLOCK_ALIGN == 0,
               "heap blocks start and end on the hold's block boundary");

/* How long one side-channel request may take: a local peer answers at
 * once. */
#define SHM_REQUEST_MS 1000

/* What check_nonce granted: the holder slot (1 + index; 0: none) whose
 * socket the request came on. */
typedef struct serve_ctx {
    struct sl_worker_server *s;
    uint32_t holder;
} serve_ctx_t;

/* sl_rpc_shm_check_fn: a waiting connection that was given this nonce
 * (each nonce is good once); a hold for one that asked, while a slot is
 * free (else it copies, as a client that did not ask). */
static int check_nonce(void *ctx, const uint8_t nonce[SL_RPC_SHM_NONCE_BYTES])
{
    serve_ctx_t *sc = ctx;
    struct sl_worker_server *s = sc->s;
    int flags = -1;
    sl_mutex_lock(&s->mu);
    for (client_t *c = s->clients; c && flags < 0; c = c->next) {
        if (!c->shm_asked || c->shm_granted || c->closed) continue;
        if (memcmp(c->shm_nonce, nonce, SL_RPC_SHM_NONCE_BYTES) != 0) continue;
        c->shm_granted = true;
        flags = 0;
        for (uint32_t k = 0; c->shm_hold_asked && k < s->nholders && !c->holder; k++) {
            if (s->holders[k].used) continue;
            /* open from now: a block acknowledged before this thread
             * stores the socket is kept too */
            s->holders[k] = (holder_t){.used = true, .open = true, .conn = true, .fd = -1};
            c->holder = sc->holder = k + 1;
            flags = SL_RPC_SHM_HOLD;
        }
    }
    sl_mutex_unlock(&s->mu);
    return flags;
}

/* Under s->mu: free slot k once nothing refers to it. */
static void holder_maybe_free(struct sl_worker_server *s, uint32_t k) SL_REQUIRES(s->mu)
{
    holder_t *h = &s->holders[k];
    if (h->used && !h->open && !h->conn) *h = (holder_t){.fd = -1};
}

/* Under s->mu: the hold of slot k ends: every block it held is freed, its
 * socket closed. */
static void holder_end(struct sl_worker_server *s, uint32_t k) SL_REQUIRES(s->mu)
{
    holder_t *h = &s->holders[k];
    while (h->held) {
        sitem_t *si = h->held;
        h->held = si->held_next;
        s->st.shm_held_freed++;
        dpp_server_item_free(s, &si->item);
    }
    h->nheld = 0;
    if (h->fd >= 0) close(h->fd);
    h->fd = -1;
    h->open = false;
    holder_maybe_free(s, k);
}

bool dpp_server_hold_room(const struct sl_worker_server *s, const client_t *c)
{
    return !c->holder || s->holders[c->holder - 1].nheld < s->o.max_credits;
}

bool dpp_server_hold(struct sl_worker_server *s, const client_t *c, sl_worker_server_item_t *it,
                     uint64_t delivery_id)
{
    if (!c->holder || !s->holders[c->holder - 1].open) return false;
    holder_t *h = &s->holders[c->holder - 1];
    sitem_t *si = (sitem_t *)it;
    si->held_id = delivery_id;
    si->held_next = h->held;
    h->held = si;
    h->nheld++;
    s->st.shm_held++;
    return true;
}

bool dpp_server_release(struct sl_worker_server *s, const client_t *c, const uint64_t *ids,
                        size_t n, char *msg, size_t cap)
{
    holder_t *h = c->holder ? &s->holders[c->holder - 1] : NULL;
    for (size_t i = 0; i < n; i++) {
        sitem_t **pp = h ? &h->held : NULL;
        while (pp && *pp && (*pp)->held_id != ids[i])
            pp = &(*pp)->held_next;
        if (pp && *pp) {
            sitem_t *si = *pp;
            *pp = si->held_next;
            h->nheld--;
            s->st.shm_released++;
            dpp_server_item_free(s, &si->item);
            continue;
        }
        /* not held (any more): a block not acknowledged yet, or already
         * freed with an earlier hold; kept or gone as it is */
        if (ids[i] != 0 && ids[i] <= s->next_delivery) continue;
        snprintf(msg, cap, "release of delivery id %" PRIu64 ", which this worker never sent",
                 ids[i]);
        return false;
    }
    return true;
}

void dpp_server_hold_conn_end(struct sl_worker_server *s, client_t *c)
{
    if (!c->holder) return;
    uint32_t k = c->holder - 1;
    c->holder = 0;
    s->holders[k].conn = false;
    holder_maybe_free(s, k);
}

void dpp_server_holds_free(struct sl_worker_server *s)
{
    for (uint32_t k = 0; k < s->nholders; k++) {
        s->holders[k].conn = false;
        if (s->holders[k].used) holder_end(s, k);
    }
}

/* One side-channel request on fd: served, and kept as a holder when it
 * was granted one. */
static void serve(struct sl_worker_server *s, int fd)
{
    sl_error_t err = {0};
    serve_ctx_t sc = {s, 0};
    sl_err_t rc = sl_rpc_shm_serve(fd, sl_clock_ms() + SHM_REQUEST_MS, check_nonce, &sc,
                                   sl_shm_heap_fd(s->o.shm), sl_shm_heap_size(s->o.shm), &err);
    sl_mutex_lock(&s->mu);
    if (sc.holder && rc == SL_OK) {
        s->holders[sc.holder - 1].fd = fd;
        fd = -1;
    } else if (sc.holder) {
        holder_end(s, sc.holder - 1); /* the client has no mapping */
    }
    if (rc != SL_OK) s->st.shm_refused++;
    sl_mutex_unlock(&s->mu);
    if (fd >= 0) close(fd);
    if (rc != SL_OK)
        sl_log(SL_LOG_WARN, SL_EV(WORKER_SHM_REFUSED), "worker %s: shared memory @%s: %s",
               s->worker_id, s->shm_name, err.msg);
}

void *dpp_server_shm_main(void *arg)
{
    struct sl_worker_server *s = arg;
    pthread_setname_np(pthread_self(), "sl-w-shm");
    /* the listening socket, then each holder's (slot k at 1 + k) */
    struct pollfd *p = sl_calloc(s->a, (size_t)s->nholders + 1, sizeof *p);
    for (;;) {
        sl_mutex_lock(&s->mu);
        bool stop = s->stopping;
        if (stop) s->st.cpu_ns += sl_clock_thread_cpu_ns();
        uint32_t n = p ? s->nholders : 0;
        for (uint32_t k = 0; k < n; k++)
            p[1 + k] = (struct pollfd){.fd = s->holders[k].fd, .events = POLLIN};
        sl_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd only = {.fd = s->shm_lfd, .events = POLLIN};
        struct pollfd *fds = p ? p : &only;
        fds[0] = only;
        if (poll(fds, (nfds_t)n + 1, 100) <= 0) continue;
        /* a client never writes on its hold: data or an end ends it */
        for (uint32_t k = 0; k < n; k++) {
            if (fds[1 + k].fd < 0 || !fds[1 + k].revents) continue;
            sl_mutex_lock(&s->mu);
            if (s->holders[k].fd == fds[1 + k].fd) holder_end(s, k);
            sl_mutex_unlock(&s->mu);
        }
        if (!(fds[0].revents & POLLIN)) continue;
        int fd = accept4(s->shm_lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) serve(s, fd);
    }
    sl_free(s->a, p, ((size_t)s->nholders + 1) * sizeof *p);
    return NULL;
}

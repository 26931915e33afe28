/* A TCP relay between the fleet tests' workers and master (fleet_util.h)
 * that can drop one frame of a given type with its connection. */
#ifndef SLUICE_TESTS_FLEET_RELAY_H
#define SLUICE_TESTS_FLEET_RELAY_H

#include "fleet_core.h"

/* ---- a relay between workers and the master ---- */

/* Listens on its own port and relays every connection to target; in the
 * target -> peer direction it reads whole frames (src/rpc/frame.h
 * headers) and, for the drop_nth-th frame of type drop_type over all
 * connections, forwards nothing of it and breaks that connection (both
 * sides closed): a frame lost with its connection. */
typedef struct fu_proxy {
    int lfd;
    char addr[64];
    char target[64];
    uint32_t drop_type, drop_nth;
    atomic_uint seen_type; /* frames of drop_type relayed or dropped */
    atomic_uint dropped;
    atomic_bool stop;
    atomic_int live; /* relay threads running (they use p) */
    pthread_t th;
} fu_proxy_t;

typedef struct fu_pair {
    fu_proxy_t *p;
    int down, up; /* the peer's connection, the target's */
} fu_pair_t;

static bool fu_send_all(int fd, const uint8_t *b, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

FU_FN void *fu_pair_main(void *arg)
{
    fu_pair_t *pr = arg;
    fu_proxy_t *p = pr->p;
    size_t cap = 1 << 16, len = 0; /* target -> peer bytes not yet forwarded */
    uint8_t *buf = malloc(cap), tmp[1 << 14];
    bool open = true;
    while (open && !atomic_load(&p->stop)) {
        struct pollfd fds[2] = {{.fd = pr->down, .events = POLLIN},
                                {.fd = pr->up, .events = POLLIN}};
        if (poll(fds, 2, 50) <= 0) continue;
        if (fds[0].revents) { /* peer -> target: as it comes */
            ssize_t k = recv(pr->down, tmp, sizeof tmp, 0);
            open = k > 0 && fu_send_all(pr->up, tmp, (size_t)k);
        }
        if (open && fds[1].revents) { /* target -> peer: whole frames */
            if (cap - len < sizeof tmp) buf = realloc(buf, cap *= 2);
            ssize_t k = recv(pr->up, buf + len, cap - len, 0);
            open = k > 0;
            len += k > 0 ? (size_t)k : 0;
            size_t at = 0;
            while (open && len - at >= SL_RPC_HEADER_BYTES) {
                sl_rpc_header_t h;
                sl_rpc_limits_t lim = {.max_message_bytes = 64u << 20,
                                       .max_payload_bytes = 1ull << 40};
                if (sl_rpc_header_decode(buf + at, &lim, &h, NULL) != SL_OK) {
                    open = false; /* not our protocol: give up the pair */
                    break;
                }
                size_t total = SL_RPC_HEADER_BYTES + h.message_len + (size_t)h.payload_len;
                if (len - at < total) break;
                if (h.type == p->drop_type &&
                    atomic_fetch_add(&p->seen_type, 1) + 1 == p->drop_nth) {
                    atomic_fetch_add(&p->dropped, 1);
                    open = false; /* lost, and the connection with it */
                    break;
                }
                open = fu_send_all(pr->down, buf + at, total);
                at += total;
            }
            memmove(buf, buf + at, len - at);
            len -= at;
        }
    }
    close(pr->down);
    close(pr->up);
    free(buf);
    free(pr);
    atomic_fetch_sub(&p->live, 1); /* p is not touched after this */
    return NULL;
}

FU_FN void *fu_proxy_main(void *arg)
{
    fu_proxy_t *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {.fd = p->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0) continue;
        int down = accept(p->lfd, NULL, NULL);
        if (down < 0) continue;
        int up;
        if (sl_rpc_connect(p->target, 2000, &up, NULL) != SL_OK) {
            close(down); /* the master is down: the worker retries */
            continue;
        }
        fu_pair_t *pr = malloc(sizeof *pr);
        *pr = (fu_pair_t){p, down, up};
        pthread_t th;
        atomic_fetch_add(&p->live, 1);
        if (pthread_create(&th, NULL, fu_pair_main, pr) != 0) {
            atomic_fetch_sub(&p->live, 1);
            close(down);
            close(up);
            free(pr);
            continue;
        }
        pthread_detach(th); /* ends when either side closes, or at stop */
    }
    return NULL;
}

FU_FN void fu_proxy_start(fu_proxy_t *p, const char *target, uint32_t drop_type, uint32_t drop_nth)
{
    memset(p, 0, sizeof *p);
    snprintf(p->target, sizeof p->target, "%s", target);
    p->drop_type = drop_type;
    p->drop_nth = drop_nth;
    uint16_t port;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 64, &p->lfd, &port, &err), SL_OK, "%s", err.msg);
    snprintf(p->addr, sizeof p->addr, "127.0.0.1:%u", port);
    pthread_create(&p->th, NULL, fu_proxy_main, p);
}

/* Stops accepting and every relay (they end within one 50 ms poll). */
FU_FN void fu_proxy_stop(fu_proxy_t *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    close(p->lfd);
    double deadline = fu_now() + tu_timeout(10);
    while (atomic_load(&p->live) > 0) {
        cr_assert(fu_now() < deadline, "relay threads did not end");
        usleep(10 * 1000);
    }
}

#endif

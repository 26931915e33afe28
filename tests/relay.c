/* The loopback HTTP relay of relay.h: accept, read one request, ask the
 * hook, forward with "Connection: close" and relay the answer. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, strncasecmp */
#endif
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct conn {
    tu_relay_t *r;
    int fd;
} conn_t;

bool tu_relay_send_all(int fd, const void *b, size_t n)
{
    const char *p = b;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void *conn_main(void *arg)
{
    conn_t *c = arg;
    tu_relay_t *rl = c->r;
    /* Read the request: headers, then Content-Length bytes of body. */
    size_t cap = 1 << 16, len = 0;
    char *req = malloc(cap);
    size_t head = 0, body = 0;
    for (;;) {
        if (len == cap) req = realloc(req, cap *= 2);
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (poll(&pfd, 1, 10000) <= 0) goto out;
        ssize_t r = recv(c->fd, req + len, cap - len, 0);
        if (r <= 0) goto out;
        len += (size_t)r;
        if (head == 0) {
            req[len < cap ? len : cap - 1] = '\0';
            char *e = memmem(req, len, "\r\n\r\n", 4);
            if (e == NULL) continue;
            head = (size_t)(e - req) + 4;
            for (char *h = req; h < e; h = strstr(h, "\r\n") + 2)
                if (strncasecmp(h, "Content-Length:", 15) == 0) body = strtoull(h + 15, NULL, 10);
        }
        if (len >= head + body) break;
    }
    if (rl->hook && rl->hook(rl->ctx, c->fd, req, head, len) == TU_RELAY_HANDLED) goto out;
    int u = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(rl->upstream)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(u, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(u);
        goto out;
    }
    /* The headers, "Connection: close", the blank line and the body. */
    bool ok = tu_relay_send_all(u, req, head - 2) &&
              tu_relay_send_all(u, "Connection: close\r\n\r\n", 21) &&
              tu_relay_send_all(u, req + head, len - head);
    char buf[65536];
    while (ok) {
        struct pollfd pfd = {u, POLLIN, 0};
        if (poll(&pfd, 1, 30000) <= 0) break;
        ssize_t r = recv(u, buf, sizeof buf, 0);
        if (r <= 0 || !tu_relay_send_all(c->fd, buf, (size_t)r)) break;
    }
    close(u);
out:
    free(req);
    close(c->fd);
    free(c);
    return NULL;
}

static void *relay_main(void *arg)
{
    tu_relay_t *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd pfd = {r->lfd, POLLIN, 0};
        if (poll(&pfd, 1, 50) <= 0) continue;
        int fd = accept(r->lfd, NULL, NULL);
        if (fd < 0) continue;
        conn_t *c = malloc(sizeof *c);
        c->r = r;
        c->fd = fd;
        pthread_t t;
        pthread_create(&t, NULL, conn_main, c);
        pthread_detach(t);
    }
    return NULL;
}

int tu_relay_start(tu_relay_t *r, uint16_t upstream, tu_relay_fn hook, void *ctx)
{
    memset(r, 0, sizeof *r);
    r->upstream = upstream;
    r->hook = hook;
    r->ctx = ctx;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (r->lfd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(r->lfd, 256) ||
        getsockname(r->lfd, (struct sockaddr *)&sa, &sl)) {
        int e = errno;
        close(r->lfd);
        errno = e;
        return -1;
    }
    r->port = ntohs(sa.sin_port);
    int rc = pthread_create(&r->th, NULL, relay_main, r);
    if (rc != 0) {
        close(r->lfd);
        errno = rc;
        return -1;
    }
    return 0;
}

void tu_relay_stop(tu_relay_t *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->th, NULL);
    close(r->lfd);
}

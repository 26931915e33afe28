/* The admin endpoints (the master's and a worker's, src/dpp/admin/endpoint.c) under
 * hostile load: 60 unauthenticated 8 MiB bodies do not grow the process's
 * memory (the token is judged from the headers, the body never buffered);
 * /healthz keeps answering within a second while 64 idle sockets and 80
 * slowloris connections (a header byte every two seconds) are open; the
 * connection limit (past it the connection idle longest makes room; with
 * none idle a new one is refused) and the connection timeout (idle ones
 * are closed) hold. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/mem.h"
#include "dpp/master/process/admin.h"
#include "dpp/worker/admin/admin.h"
#include "testutil.h"

static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
}

TestSuite(admin_load, .init = setup);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "%s", strerror(errno));
    return fd;
}

/* Resident bytes of this process (the endpoints run in it). */
static uint64_t rss(void)
{
    unsigned long long total = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    cr_assert_eq(fscanf(f, "%llu %llu", &total, &resident), 2);
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Read what the server sends until it closes or ms pass; the status of an
 * HTTP answer in it (0: none). */
static int read_status(int fd, int ms)
{
    char buf[4096];
    size_t len = 0;
    double until = now_s() + ms / 1000.0;
    while (len < sizeof buf - 1 && now_s() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0) break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

/* An in-memory master and its admin endpoint on a free loopback port. */
static sl_admin_t *master_endpoint(const char *token, sl_master_t **m)
{
    sl_master_opts_t mo = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&mo, m, &err), SL_OK, "%s", err.msg);
    sl_admin_t *a = NULL;
    cr_assert_eq(sl_master_admin_start(*m, "127.0.0.1:0", token, &a, &err), SL_OK, "%s", err.msg);
    return a;
}

Test(admin_load, unauthenticated_bodies_cost_no_memory)
{
    sl_master_t *m;
    sl_admin_t *a = master_endpoint("the-token", &m);
    uint16_t port = sl_admin_port(a);
    enum { CONNS = 60, BODY = 8 << 20, CHUNK = 1 << 16 };
    static char chunk[CHUNK];
    memset(chunk, '{', sizeof chunk);
    uint64_t before = rss();
    int fds[CONNS];
    /* every connection announces 8 MiB (the master's body limit) without a
     * token, and pushes as much of it as the server takes */
    for (int i = 0; i < CONNS; i++) {
        fds[i] = dial(port);
        char hdr[200];
        int n = snprintf(hdr, sizeof hdr,
                         "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", BODY);
        cr_assert_eq(send(fds[i], hdr, (size_t)n, MSG_NOSIGNAL), n);
        for (uint64_t sent = 0; sent < BODY;) {
            ssize_t k = send(fds[i], chunk, CHUNK, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                sent += (uint64_t)k;
                continue;
            }
            if (k < 0 && errno != EAGAIN) break; /* refused and closed */
            struct pollfd p = {.fd = fds[i], .events = POLLOUT};
            if (poll(&p, 1, 200) <= 0) break; /* the server stopped reading */
        }
    }
    /* every one was refused from its headers */
    for (int i = 0; i < CONNS; i++)
        cr_assert_eq(read_status(fds[i], (int)(tu_timeout(5) * 1000)), 401, "connection %d", i);
    uint64_t after = rss();
    int64_t grew = (int64_t)after - (int64_t)before;
    /* 60 buffered bodies would be 480 MiB; a few MiB of slack for the
     * sockets and the allocator */
    cr_assert_lt(grew, 16 << 20, "the process grew by %lld bytes", (long long)grew);
    char *metrics = sl_master_metrics_text(m);
    cr_assert_not_null(strstr(metrics, "sluice_master_memory_bytes"));
    sl_strfree(sl_master_allocator(m), metrics);
    for (int i = 0; i < CONNS; i++)
        close(fds[i]);
    sl_admin_stop(a);
    sl_master_stop(m);
}

/* ---- idle and slowloris connections ---- */

typedef struct loris {
    uint16_t port;
    int fds[80];
    atomic_bool stop;
    atomic_int alive; /* connections the server has not closed */
} loris_t;

/* A header byte every two seconds on each connection, until stop. */
static void *loris_main(void *arg)
{
    loris_t *l = arg;
    while (!atomic_load(&l->stop)) {
        int alive = 0;
        for (int i = 0; i < 80; i++)
            if (l->fds[i] >= 0 && send(l->fds[i], "X", 1, MSG_NOSIGNAL) == 1) alive++;
        atomic_store(&l->alive, alive);
        for (int k = 0; k < 20 && !atomic_load(&l->stop); k++)
            usleep(100 * 1000);
    }
    return NULL;
}

/* GET /healthz on a fresh connection. @return the seconds it took; 200
 * asserted. */
static double healthz(uint16_t port)
{
    double t0 = now_s();
    int fd = dial(port);
    const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    cr_assert_eq(send(fd, req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
    int st = read_status(fd, (int)(tu_timeout(5) * 1000));
    close(fd);
    cr_assert_eq(st, 200);
    return now_s() - t0;
}

static void under_load(uint16_t port, const char *who)
{
    int idle[64];
    for (int i = 0; i < 64; i++)
        idle[i] = dial(port);
    loris_t l = {.port = port};
    for (int i = 0; i < 80; i++) {
        l.fds[i] = dial(port);
        const char start[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        cr_assert_eq(send(l.fds[i], start, sizeof start - 1, MSG_NOSIGNAL),
                     (ssize_t)(sizeof start - 1));
    }
    pthread_t th;
    pthread_create(&th, NULL, loris_main, &l);
    /* six seconds of probes, as a liveness check would send them */
    double worst = 0;
    for (int k = 0; k < 20; k++) {
        double took = healthz(port);
        if (took > worst) worst = took;
        usleep(300 * 1000);
    }
    atomic_store(&l.stop, true);
    pthread_join(th, NULL);
    cr_assert_lt(worst, tu_timeout(1), "%s: /healthz took %.3f s under load", who, worst);
    /* the slowloris connections were still open: the probes got in beside them */
    cr_assert_eq(atomic_load(&l.alive), 80, "%s: %d slowloris connections alive", who,
                 atomic_load(&l.alive));
    for (int i = 0; i < 64; i++)
        close(idle[i]);
    for (int i = 0; i < 80; i++)
        close(l.fds[i]);
}

Test(admin_load, healthz_answers_beside_idle_and_slowloris_connections)
{
    sl_master_t *m;
    sl_admin_t *a = master_endpoint(NULL, &m);
    sl_error_t err = {0};
    under_load(sl_admin_port(a), "master");
    sl_admin_stop(a);
    sl_master_stop(m);
    /* a worker's endpoint (waiting for its master: /healthz still answers) */
    sl_worker_admin_t *wa = NULL;
    cr_assert_eq(sl_worker_admin_start(NULL, NULL, "127.0.0.1:0", &wa, &err), SL_OK, "%s", err.msg);
    under_load(sl_worker_admin_port(wa), "worker");
    sl_worker_admin_stop(wa);
}

Test(admin_load, the_connection_limit_and_timeout_hold)
{
    sl_admin_opts_t o = {.address = "127.0.0.1:0", .max_connections = 16, .timeout_s = 1};
    sl_worker_admin_t *wa = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_admin_serve(NULL, NULL, &o, &wa, &err), SL_OK, "%s", err.msg);
    uint16_t port = sl_worker_admin_port(wa);
    int fds[16];
    for (int i = 0; i < 16; i++)
        fds[i] = dial(port);
    /* the 17th connection is answered at once: the one idle longest
     * (fds[0], the first accepted) is closed to make room... */
    int extra = dial(port);
    const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    cr_assert_eq(send(extra, req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
    double t0 = now_s();
    cr_assert_eq(read_status(extra, (int)(tu_timeout(5) * 1000)), 200);
    double took = now_s() - t0;
    cr_assert_lt(took, tu_timeout(1), "answered after %.1f s", took);
    close(extra);
    char c;
    struct pollfd q0 = {.fd = fds[0], .events = POLLIN};
    cr_assert_eq(poll(&q0, 1, (int)(tu_timeout(1) * 1000)), 1, "the oldest is still open");
    cr_assert_leq(recv(fds[0], &c, 1, 0), 0, "the oldest was not closed");
    close(fds[0]);
    /* ... and the timeout closes the other 15 */
    for (int i = 1; i < 16; i++) {
        struct pollfd q = {.fd = fds[i], .events = POLLIN};
        cr_assert_eq(poll(&q, 1, (int)(tu_timeout(5) * 1000)), 1, "connection %d still open", i);
        cr_assert_leq(recv(fds[i], &c, 1, 0), 0, "connection %d was not closed", i);
        close(fds[i]);
    }
    /* 16 connections in the middle of a request (headers in, a body
     * awaited) are not idle: a 17th is refused, closed unanswered, and
     * they stay open */
    const char busy_req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n";
    for (int i = 0; i < 16; i++) {
        fds[i] = dial(port);
        cr_assert_eq(send(fds[i], busy_req, sizeof busy_req - 1, MSG_NOSIGNAL),
                     (ssize_t)(sizeof busy_req - 1));
    }
    usleep(200 * 1000); /* their headers are in (well within the 1 s timeout) */
    extra = dial(port);
    cr_assert_eq(send(extra, req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)(sizeof req - 1));
    cr_assert_eq(read_status(extra, (int)(tu_timeout(1) * 1000)), 0, "answered past the cap");
    close(extra);
    for (int i = 0; i < 16; i++) {
        struct pollfd q = {.fd = fds[i], .events = POLLIN};
        cr_assert_eq(poll(&q, 1, 0), 0, "busy connection %d was closed", i);
        close(fds[i]);
    }
    /* once the server has seen them go (a turn of its thread: bounded
     * wait), probes are answered again */
    const char probe[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int st = 0;
    for (double until = now_s() + tu_timeout(5); st != 200 && now_s() < until;) {
        int fd = dial(port);
        cr_assert_eq(send(fd, probe, sizeof probe - 1, MSG_NOSIGNAL), (ssize_t)(sizeof probe - 1));
        st = read_status(fd, (int)(tu_timeout(1) * 1000));
        close(fd);
        if (st != 200) usleep(20 * 1000);
    }
    cr_assert_eq(st, 200, "no probe answered after the busy connections closed");
    cr_assert_lt(healthz(port), tu_timeout(1));
    sl_worker_admin_stop(wa);
}

/* The admin endpoint's built-in probes (src/dpp/admin/endpoint.c): /healthz
 * and /readyz as the ready callback says, and both answered within 100 ms
 * while 600 idle connections (more than the cap of 512) are open: the
 * server of src/httpd/server.c closes the idle longest to make room (the
 * fault campaign's finding: /readyz went unanswered for up to 10 s). */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "dpp/admin/endpoint.h"
#include "testutil.h"

#define IDLE 600

static bool ready_flag(void *ctx, char *why, size_t cap)
{
    if (*(bool *)ctx) return true;
    snprintf(why, cap, "not ready: told so by the test");
    return false;
}

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect: %s", strerror(errno));
    return fd;
}

/* GET path over a fresh connection; the status, the reply in buf. Every
 * read waits at most timeout_ms in all. */
static int probe(uint16_t port, const char *path, char *buf, size_t cap, int timeout_ms)
{
    int fd = dial(port);
    char req[128];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    cr_assert_eq(send(fd, req, (size_t)n, 0), n);
    size_t len = 0;
    uint64_t until = sl_clock_ms() + (uint64_t)timeout_ms;
    for (;;) {
        int64_t left = (int64_t)(until - sl_clock_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r <= 0) break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    close(fd);
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return 0;
    return status;
}

static sl_admin_t *start(bool *ready)
{
    sl_admin_opts_t o = {.ctx = ready, .ready = ready_flag};
    sl_admin_t *a = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_admin_start(&o, &a, &err), SL_OK, "%s", err.msg);
    return a;
}

Test(admin_probes, healthz_and_readyz_are_built_in)
{
    bool ready = false;
    sl_admin_t *a = start(&ready);
    uint16_t port = sl_admin_port(a);
    char buf[4096];
    int t = (int)(tu_timeout(5) * 1000);
    cr_assert_eq(probe(port, "/healthz", buf, sizeof buf, t), 200, "%s", buf);
    cr_assert(strstr(buf, "{\"status\":\"ok\"}"), "%s", buf);
    cr_assert_eq(probe(port, "/readyz", buf, sizeof buf, t), 503, "%s", buf);
    cr_assert(strstr(buf, "{\"error\":\"not ready: told so by the test\"}"), "%s", buf);
    ready = true;
    cr_assert_eq(probe(port, "/readyz", buf, sizeof buf, t), 200, "%s", buf);
    cr_assert(strstr(buf, "{\"status\":\"ready\"}"), "%s", buf);
    /* a method the probes do not take: 405, as for any route */
    int fd = dial(port);
    const char *post = "POST /readyz HTTP/1.0\r\nContent-Length: 0\r\n\r\n";
    cr_assert_eq(send(fd, post, strlen(post), 0), (ssize_t)strlen(post));
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    cr_assert(strncmp(buf, "HTTP/1.1 405", 12) == 0 || strncmp(buf, "HTTP/1.0 405", 12) == 0, "%s",
              buf);
    close(fd);
    sl_admin_stop(a);
}

Test(admin_probes, answered_within_100_ms_under_600_idle_connections)
{
    /* 600 of ours and 600 of the server's, in this process */
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2 * IDLE + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    cr_assert_geq(rl.rlim_cur, 2 * IDLE + 64,
                  "the test needs %d descriptors; the hard limit allows %llu", 2 * IDLE + 64,
                  (unsigned long long)rl.rlim_max);
    bool ready = true;
    sl_admin_t *a = start(&ready); /* the default cap: 512 connections */
    uint16_t port = sl_admin_port(a);
    static int idle[IDLE];
    for (int i = 0; i < IDLE; i++)
        idle[i] = dial(port);
    char buf[4096];
    /* The first probe queues behind the 600 in the listen backlog: once it
     * is answered, the server has taken every one of them. */
    cr_assert_eq(probe(port, "/readyz", buf, sizeof buf, (int)(tu_timeout(10) * 1000)), 200, "%s",
                 buf);
    /* 600 - 512 evicted by the idle ones past the cap, 1 by the first probe */
    cr_assert_eq(sl_admin_evicted(a), IDLE - 512 + 1);
    for (int k = 0; k < 3; k++) {
        const char *path = k == 1 ? "/healthz" : "/readyz";
        uint64_t t0 = sl_clock_ms();
        int status = probe(port, path, buf, sizeof buf, (int)(tu_timeout(2) * 1000));
        uint64_t took = sl_clock_ms() - t0;
        cr_assert_eq(status, 200, "%s: %s", path, buf);
        printf("admin_probes: %s answered in %llu ms with %d idle connections open\n", path,
               (unsigned long long)took, IDLE);
        cr_assert_leq((double)took, 100 * tu_timeout(1), "%s took %llu ms", path,
                      (unsigned long long)took);
    }
    /* the oldest made room: each of the first 89 sees its end of stream
     * (bounded wait), the newest 511 are still open */
    for (int i = 0; i < IDLE; i++) {
        struct pollfd p = {.fd = idle[i], .events = POLLIN};
        int timeout = i < IDLE - 512 + 1 ? (int)(tu_timeout(5) * 1000) : 0;
        int r = poll(&p, 1, timeout);
        char c;
        bool ended = r == 1 && recv(idle[i], &c, 1, MSG_DONTWAIT) <= 0;
        cr_assert_eq(ended, i < IDLE - 512 + 1, "idle connection %d: %s", i,
                     ended ? "closed" : "open");
        close(idle[i]);
    }
    sl_admin_stop(a);
}

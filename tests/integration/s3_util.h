/* What the S3 tests share: the s3proxy server of the ctest fixture s3
 * (ops/s3proxy, started once per ctest run by s3proxy_setup) and a
 * fault-injecting HTTP proxy to put between the store and it.
 *
 * SLUICE_S3_DIR names the server's directory: DIR/env holds the endpoint
 * and credentials, DIR/data/<bucket>/ the objects (the filesystem backend:
 * a folder made there is a bucket), DIR/unavailable the reason it cannot
 * run here (no Java), which makes every S3 test exit 77: SKIPPED.
 *
 * Everything is static: a test file includes this once. */
#ifndef SLUICE_TESTS_S3_UTIL_H
#define SLUICE_TESTS_S3_UTIL_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#define SU_SKIP 77
/* Every helper: a test file uses only some. */
#define SU_FN static __attribute__((unused))

typedef struct su_server {
    char dir[512];
    char endpoint[256];
    char key_id[128], secret[128];
    uint16_t port;
} su_server_t;

static su_server_t su;

/* 0: the server is there (su filled in); SU_SKIP: it cannot run here; 1:
 * it should be there and is not. Says why on stderr. */
SU_FN int su_locate(void)
{
    const char *dir = getenv("SLUICE_S3_DIR");
    if (dir == NULL) {
        fprintf(stderr, "SKIPPED: SLUICE_S3_DIR is not set; run this test through ctest "
                        "(fixture s3), or `ops/s3proxy start --dir D` and SLUICE_S3_DIR=D\n");
        return SU_SKIP;
    }
    snprintf(su.dir, sizeof su.dir, "%s", dir);
    char path[600], line[512];
    snprintf(path, sizeof path, "%s/unavailable", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = '\0';
        fclose(f);
        fprintf(stderr, "SKIPPED: no S3 server on this machine: %s", line);
        return SU_SKIP;
    }
    snprintf(path, sizeof path, "%s/env", dir);
    if ((f = fopen(path, "r")) == NULL) {
        fprintf(stderr, "no S3 server in %s (no env there): did s3proxy_setup run and pass?\n",
                dir);
        return 1;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (eq == NULL) continue;
        *eq = '\0';
        if (strcmp(line, "AWS_ENDPOINT_URL") == 0)
            snprintf(su.endpoint, sizeof su.endpoint, "%s", eq + 1);
        else if (strcmp(line, "AWS_ACCESS_KEY_ID") == 0)
            snprintf(su.key_id, sizeof su.key_id, "%s", eq + 1);
        else if (strcmp(line, "AWS_SECRET_ACCESS_KEY") == 0)
            snprintf(su.secret, sizeof su.secret, "%s", eq + 1);
    }
    fclose(f);
    const char *colon = strrchr(su.endpoint, ':');
    su.port = colon ? (uint16_t)atoi(colon + 1) : 0;
    if (!su.endpoint[0] || !su.key_id[0] || !su.secret[0] || su.port == 0) {
        fprintf(stderr, "%s/env lacks the endpoint or the credentials\n", dir);
        return 1;
    }
    return 0;
}

/* The environment of a test that talks to the server with the env
 * credentials and nothing else of the chain (each Criterion test runs in
 * a process of its own, so this stays in the test). */
SU_FN void su_env(void)
{
    /* Criterion runs each test in a fresh process: find the server again. */
    cr_assert_eq(su_locate(), 0, "no S3 server (see above)");
    setenv("AWS_ENDPOINT_URL", su.endpoint, 1);
    setenv("AWS_ACCESS_KEY_ID", su.key_id, 1);
    setenv("AWS_SECRET_ACCESS_KEY", su.secret, 1);
    setenv("AWS_REGION", "us-east-1", 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    unsetenv("AWS_CA_BUNDLE");
}

/* A fresh bucket for one test ("t-TAG-PID"): a folder of the filesystem
 * backend. Writes its name into name. */
SU_FN void su_bucket(const char *tag, char *name, size_t cap)
{
    snprintf(name, cap, "t-%s-%d", tag, (int)getpid());
    char path[800];
    snprintf(path, sizeof path, "%s/data/%s", su.dir, name);
    cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
}

/* main() of an S3 test: exit 77 (SKIPPED) when the server cannot run here,
 * fail when it should and is not there. */
SU_FN int su_main(int argc, char *argv[])
{
    int rc = su_locate();
    if (rc != 0) return rc;
    struct criterion_test_set *tests = criterion_initialize();
    rc = 0;
    if (criterion_handle_args(argc, argv, true)) rc = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return rc;
}

/* ---- the fault-injecting proxy ----
 *
 * Listens on loopback; each client connection carries one request, which
 * the proxy answers according to its plan, in this order: the next
 * `resets` requests get a TCP reset (RST) once read; the next `slowdowns`
 * a 503 SlowDown with S3's error XML (forever with `slowdown_all`); the
 * next `delays` are held delay_ms before being passed on. Any other is
 * passed to the upstream server with "Connection: close" added (not a
 * signed header, so the signature still holds) and its answer relayed
 * until the server closes. Every request is counted. A plan function,
 * when set, decides instead (under the proxy's lock, from the request's
 * head: its request line and headers): 0 pass, 1 reset, 2 SlowDown, 3
 * delay. */
typedef struct su_proxy su_proxy_t;
typedef int (*su_plan_fn)(su_proxy_t *p, const char *head, size_t len);
struct su_proxy {
    int lfd;
    uint16_t port, upstream;
    pthread_t th;
    atomic_bool stop;
    pthread_mutex_t mu;
    int resets, slowdowns, delays;
    bool slowdown_all;
    uint32_t delay_ms;
    int requests, faults;      /* seen, and answered with a fault */
    int n_resets, n_slowdowns; /* the faults by kind */
    su_plan_fn plan;
    void *plan_arg;
};

typedef struct su_conn {
    su_proxy_t *p;
    int fd;
} su_conn_t;

SU_FN bool su_write_all(int fd, const char *b, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

SU_FN void *su_conn_main(void *arg)
{
    su_conn_t *c = arg;
    su_proxy_t *p = c->p;
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
    pthread_mutex_lock(&p->mu);
    p->requests++;
    int fault = 0; /* 1 reset, 2 slowdown, 3 delay */
    if (p->plan != NULL)
        fault = p->plan(p, req, head);
    else if (p->resets > 0)
        p->resets--, fault = 1;
    else if (p->slowdown_all || p->slowdowns > 0)
        p->slowdowns -= !p->slowdown_all, fault = 2;
    else if (p->delays > 0)
        p->delays--, fault = 3;
    if (fault == 1 || fault == 2) p->faults++;
    p->n_resets += fault == 1;
    p->n_slowdowns += fault == 2;
    uint32_t delay = p->delay_ms;
    pthread_mutex_unlock(&p->mu);
    if (fault == 1) {
        struct linger lg = {1, 0}; /* close with RST */
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        goto out;
    }
    if (fault == 2) {
        static const char xml[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>"
                                  "SlowDown</Code><Message>Please reduce your request rate."
                                  "</Message></Error>";
        char hdr[256];
        int n = snprintf(hdr, sizeof hdr,
                         "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                         sizeof xml - 1);
        su_write_all(c->fd, hdr, (size_t)n);
        su_write_all(c->fd, xml, sizeof xml - 1);
        goto out;
    }
    if (fault == 3) usleep(delay * 1000u);
    int u = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(p->upstream)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(u, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(u);
        goto out;
    }
    /* The headers, "Connection: close", the blank line and the body. */
    bool ok = su_write_all(u, req, head - 2) && su_write_all(u, "Connection: close\r\n\r\n", 21) &&
              su_write_all(u, req + head, len - head);
    char buf[65536];
    while (ok) {
        struct pollfd pfd = {u, POLLIN, 0};
        if (poll(&pfd, 1, 30000) <= 0) break;
        ssize_t r = recv(u, buf, sizeof buf, 0);
        if (r <= 0 || !su_write_all(c->fd, buf, (size_t)r)) break;
    }
    close(u);
out:
    free(req);
    close(c->fd);
    free(c);
    return NULL;
}

SU_FN void *su_proxy_main(void *arg)
{
    su_proxy_t *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pfd = {p->lfd, POLLIN, 0};
        if (poll(&pfd, 1, 50) <= 0) continue;
        int fd = accept(p->lfd, NULL, NULL);
        if (fd < 0) continue;
        su_conn_t *c = malloc(sizeof *c);
        c->p = p;
        c->fd = fd;
        pthread_t t;
        pthread_create(&t, NULL, su_conn_main, c);
        pthread_detach(t);
    }
    return NULL;
}

SU_FN void su_proxy_start(su_proxy_t *p, uint16_t upstream)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->upstream = upstream;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(p->lfd, 64), 0);
    socklen_t sl = sizeof sa;
    getsockname(p->lfd, (struct sockaddr *)&sa, &sl);
    p->port = ntohs(sa.sin_port);
    pthread_create(&p->th, NULL, su_proxy_main, p);
}

SU_FN void su_proxy_stop(su_proxy_t *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    close(p->lfd);
}

SU_FN int su_proxy_count(su_proxy_t *p, int *faults)
{
    pthread_mutex_lock(&p->mu);
    int n = p->requests;
    if (faults) *faults = p->faults;
    pthread_mutex_unlock(&p->mu);
    return n;
}

#endif

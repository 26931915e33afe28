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
#include <ftw.h>
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

#include "relay.h"
#include "store/store.h"
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

/* nftw passes no context: the upload in progress (one at a time). */
SU_FN const char *su_up_root, *su_up_prefix;
SU_FN sl_store_t *su_up_store;

SU_FN int su_up_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag != FTW_F) return 0;
    char key[1024];
    snprintf(key, sizeof key, "%s/%s", su_up_prefix, path + strlen(su_up_root) + 1);
    sl_error_t err = {0};
    cr_assert_eq(sl_store_put_file(su_up_store, key, path, &err), SL_OK, "%s", err.msg);
    return 0;
}

/* Upload every file under dir to s3://bucket/prefix/ (keys relative to
 * dir), over what is there, through the endpoint AWS_ENDPOINT_URL names. */
SU_FN void su_upload_tree(const char *dir, const char *bucket, const char *prefix)
{
    char url[300];
    snprintf(url, sizeof url, "s3://%s", bucket);
    sl_error_t err = {0};
    cr_assert_eq(sl_store_open_url(url, NULL, &su_up_store, NULL, &err), SL_OK, "%s", err.msg);
    su_up_root = dir;
    su_up_prefix = prefix;
    cr_assert_eq(nftw(dir, su_up_one, 16, FTW_PHYS), 0);
    sl_store_destroy(su_up_store);
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
 * The loopback relay of relay.h in front of the server, with a hook:
 * each client connection carries one request, which the proxy answers
 * according to its plan, in this order: the next `resets` requests get a
 * TCP reset (RST) once read; the next `slowdowns` a 503 SlowDown with S3's
 * error XML (forever with `slowdown_all`); the next `delays` are held
 * delay_ms before being passed on. Any other is passed to the upstream
 * server (the relay adds "Connection: close") and its answer relayed until
 * the server closes. Every request is counted. A plan function, when set,
 * decides instead (under the proxy's lock, from the request's head: its
 * request line and headers): 0 pass, 1 reset, 2 SlowDown, 3 delay, 4 a
 * server that ignores the Range: 200 OK with more bytes (zeros) than the
 * Range asks for, as a whole object would come; 5 a server that hangs:
 * the request read and never answered, the connection held until the
 * client gives up and closes it (at most SU_HANG_MAX_MS). */
#define SU_HANG_MAX_MS 30000
typedef struct su_proxy su_proxy_t;
typedef int (*su_plan_fn)(su_proxy_t *p, const char *head, size_t len);
struct su_proxy {
    tu_relay_t relay;
    uint16_t port; /* where it listens (the relay's) */
    pthread_mutex_t mu;
    int resets, slowdowns, delays;
    bool slowdown_all;
    uint32_t delay_ms;
    int requests, faults;               /* seen, and answered with a fault */
    int n_resets, n_slowdowns, n_hangs; /* the faults by kind */
    su_plan_fn plan;
    void *plan_arg;
};

SU_FN tu_relay_verdict_t su_proxy_hook(void *ctx, int fd, const char *req, size_t head, size_t len)
{
    (void)len;
    su_proxy_t *p = ctx;
    pthread_mutex_lock(&p->mu);
    p->requests++;
    int fault = 0; /* 1 reset, 2 slowdown, 3 delay, 4 Range ignored, 5 hang */
    if (p->plan != NULL)
        fault = p->plan(p, req, head);
    else if (p->resets > 0)
        p->resets--, fault = 1;
    else if (p->slowdown_all || p->slowdowns > 0)
        p->slowdowns -= !p->slowdown_all, fault = 2;
    else if (p->delays > 0)
        p->delays--, fault = 3;
    if (fault == 1 || fault == 2 || fault == 4 || fault == 5) p->faults++;
    p->n_resets += fault == 1;
    p->n_slowdowns += fault == 2;
    p->n_hangs += fault == 5;
    uint32_t delay = p->delay_ms;
    pthread_mutex_unlock(&p->mu);
    if (fault == 1) {
        struct linger lg = {1, 0}; /* close with RST */
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        return TU_RELAY_HANDLED;
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
        tu_relay_send_all(fd, hdr, (size_t)n);
        tu_relay_send_all(fd, xml, sizeof xml - 1);
        return TU_RELAY_HANDLED;
    }
    if (fault == 3) usleep(delay * 1000u);
    if (fault == 4) {
        const char *r = memmem(req, head, "\r\nRange: bytes=", 15);
        long long a = 0, b = 0;
        if (r == NULL || sscanf(r + 15, "%lld-%lld", &a, &b) != 2 || b < a) b = a = 0;
        size_t n = (size_t)(b - a + 1) + 4096; /* more than asked: the whole object's start */
        char hdr[256];
        int hn = snprintf(hdr, sizeof hdr,
                          "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                          n);
        tu_relay_send_all(fd, hdr, (size_t)hn);
        static const char zeros[4096];
        for (size_t sent = 0; sent < n;) {
            size_t k = n - sent < sizeof zeros ? n - sent : sizeof zeros;
            if (!tu_relay_send_all(fd, zeros, k)) break; /* the client hung up: enough */
            sent += k;
        }
        return TU_RELAY_HANDLED;
    }
    if (fault == 5) {
        /* bounded: a client that never gives up is let go after the cap */
        char sink[4096];
        for (int waited = 0; waited < SU_HANG_MAX_MS; waited += 100) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            int n = poll(&pf, 1, 100);
            if (n < 0 && errno != EINTR) break;
            if (n > 0 && recv(fd, sink, sizeof sink, 0) <= 0) break; /* the client closed it */
        }
        return TU_RELAY_HANDLED;
    }
    return TU_RELAY_PASS;
}

SU_FN void su_proxy_start(su_proxy_t *p, uint16_t upstream)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    cr_assert_eq(tu_relay_start(&p->relay, upstream, su_proxy_hook, p), 0, "relay: %s",
                 strerror(errno));
    p->port = p->relay.port;
}

SU_FN void su_proxy_stop(su_proxy_t *p)
{
    tu_relay_stop(&p->relay);
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

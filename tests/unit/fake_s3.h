/* A scripted fake S3 server for the store's unit tests: it answers what a
 * test tells it to, including what a real S3 answers only under faults
 * s3proxy cannot make (a Range ignored, a listing cut without a token, a
 * CompleteMultipartUpload that fails with 200). The real server's tests
 * are tests/integration/s3_store_test.c; this one needs no Java.
 *
 * Listens on loopback; each connection carries one request (every answer
 * says "Connection: close"), read whole (headers, "Expect: 100-continue"
 * answered, Content-Length bytes of body) and handed to the test's
 * function with its sequence number (0: the first). Every request's
 * "METHOD target" is logged. Everything is static: a test file includes
 * this once. */
#ifndef SLUICE_TESTS_FAKE_S3_H
#define SLUICE_TESTS_FAKE_S3_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define FS_FN static __attribute__((unused))

typedef struct fs_req {
    int seq;
    char method[16];
    char target[4096];
    char *head; /* the header lines, NUL-ended */
    char *body;
    size_t body_len;
} fs_req_t;

typedef struct fs fs_t;
/* Answers q on fd (fs_reply and friends). Called from the connection's
 * thread, outside the server's lock. */
typedef void (*fs_fn)(fs_t *f, const fs_req_t *q, int fd);

#define FS_LOG 64
struct fs {
    int lfd;
    uint16_t port;
    pthread_t th;
    atomic_bool stop;
    atomic_int live; /* connection threads still running */
    fs_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    int requests;
    char log[FS_LOG][300];
};

typedef struct fs_conn {
    fs_t *f;
    int fd;
} fs_conn_t;

FS_FN bool fs_write(int fd, const void *b, size_t n)
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

/* An answer with body (len bytes; len may differ from the body's real
 * size only through content_length >= 0) and extra header lines. */
FS_FN void fs_reply_cl(int fd, int status, const char *headers, const void *body, size_t len,
                       long long content_length)
{
    char h[2048];
    int n = snprintf(
        h, sizeof h, "HTTP/1.1 %d Fake\r\nContent-Length: %lld\r\n%sConnection: close\r\n\r\n",
        status, content_length >= 0 ? content_length : (long long)len, headers ? headers : "");
    fs_write(fd, h, (size_t)n);
    if (len) fs_write(fd, body, len);
}

FS_FN void fs_reply(int fd, int status, const char *headers, const char *body)
{
    fs_reply_cl(fd, status, headers, body, body ? strlen(body) : 0, -1);
}

/* S3's error XML. */
FS_FN void fs_error(int fd, int status, const char *code, const char *msg)
{
    char b[4096];
    snprintf(b, sizeof b,
             "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s"
             "</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>",
             code, msg);
    fs_reply(fd, status, "Content-Type: application/xml\r\n", b);
}

/* A header's value (case-insensitive name) into buf; false when absent. */
FS_FN bool fs_header(const fs_req_t *q, const char *name, char *buf, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *l = q->head; l && *l;) {
        const char *e = strstr(l, "\r\n");
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n > nl && strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(buf, cap, "%.*s", (int)(n - (size_t)(v - l)), v);
            return true;
        }
        l = e ? e + 2 : NULL;
    }
    return false;
}

/* An object as S3 serves it: HEAD, GET, and GET with "Range: bytes=A-B". */
FS_FN void fs_object(int fd, const fs_req_t *q, const void *data, size_t len, const char *etag)
{
    char h[512], range[128];
    if (strcmp(q->method, "HEAD") == 0) {
        snprintf(h, sizeof h,
                 "ETag: %s\r\nLast-Modified: Sun, 29 Nov 2026 04:00:00 GMT\r\n"
                 "x-amz-version-id: v-42\r\n",
                 etag);
        fs_reply_cl(fd, 200, h, NULL, 0, (long long)len);
        return;
    }
    unsigned long long a, b;
    if (fs_header(q, "Range", range, sizeof range) &&
        sscanf(range, "bytes=%llu-%llu", &a, &b) == 2) {
        if (a >= len) {
            fs_error(fd, 416, "InvalidRange", "The requested range is not satisfiable");
            return;
        }
        if (b >= len) b = len - 1;
        snprintf(h, sizeof h, "ETag: %s\r\nContent-Range: bytes %llu-%llu/%zu\r\n", etag, a, b,
                 len);
        fs_reply_cl(fd, 206, h, (const char *)data + a, (size_t)(b - a + 1), -1);
        return;
    }
    snprintf(h, sizeof h, "ETag: %s\r\n", etag);
    fs_reply_cl(fd, 200, h, data, len, -1);
}

FS_FN void *fs_conn_main(void *arg)
{
    fs_conn_t *c = arg;
    fs_t *f = c->f;
    size_t cap = 1 << 16, len = 0, head = 0, body = 0;
    char *req = malloc(cap);
    bool cont = false;
    for (;;) {
        if (len + 1 >= cap) req = realloc(req, cap *= 2);
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (poll(&pfd, 1, 10000) <= 0) goto out;
        ssize_t r = recv(c->fd, req + len, cap - len - 1, 0);
        if (r <= 0) goto out;
        len += (size_t)r;
        req[len] = '\0';
        if (head == 0) {
            char *e = strstr(req, "\r\n\r\n");
            if (e == NULL) continue;
            head = (size_t)(e - req) + 4;
            for (char *h = strstr(req, "\r\n") + 2; h < e; h = strstr(h, "\r\n") + 2) {
                if (strncasecmp(h, "Content-Length:", 15) == 0) body = strtoull(h + 15, NULL, 10);
                if (strncasecmp(h, "Expect: 100-continue", 20) == 0) cont = true;
            }
            if (cont && len < head + body) fs_write(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        }
        if (len >= head + body) break;
    }
    fs_req_t q = {0};
    sscanf(req, "%15s %4095s", q.method, q.target);
    req[head - 2] = '\0';
    q.head = strstr(req, "\r\n") + 2;
    q.body = req + head;
    q.body_len = body;
    pthread_mutex_lock(&f->mu);
    q.seq = f->requests++;
    if (q.seq < FS_LOG)
        snprintf(f->log[q.seq], sizeof f->log[q.seq], "%s %.270s", q.method, q.target);
    pthread_mutex_unlock(&f->mu);
    f->fn(f, &q, c->fd);
out:
    free(req);
    close(c->fd);
    free(c);
    atomic_fetch_sub(&f->live, 1);
    return NULL;
}

FS_FN void *fs_main(void *arg)
{
    fs_t *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd pfd = {f->lfd, POLLIN, 0};
        if (poll(&pfd, 1, 50) <= 0) continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0) continue;
        fs_conn_t *c = malloc(sizeof *c);
        c->f = f;
        c->fd = fd;
        atomic_fetch_add(&f->live, 1);
        pthread_t t;
        pthread_create(&t, NULL, fs_conn_main, c);
        pthread_detach(t);
    }
    return NULL;
}

FS_FN void fs_start(fs_t *f, fs_fn fn, void *ctx)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->fn = fn;
    f->ctx = ctx;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(f->lfd, 64), 0);
    socklen_t sl = sizeof sa;
    getsockname(f->lfd, (struct sockaddr *)&sa, &sl);
    f->port = ntohs(sa.sin_port);
    pthread_create(&f->th, NULL, fs_main, f);
}

/* Stops accepting, then waits (bounded: 10 s) for the connections. */
FS_FN void fs_stop(fs_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
    for (int i = 0; i < 1000 && atomic_load(&f->live) > 0; i++)
        usleep(10000);
    cr_assert_eq(atomic_load(&f->live), 0, "fake S3: connections still open after 10 s");
}

FS_FN int fs_count(fs_t *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->requests;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Request seq's "METHOD target" (copied). */
FS_FN void fs_logged(fs_t *f, int seq, char *buf, size_t cap)
{
    pthread_mutex_lock(&f->mu);
    snprintf(buf, cap, "%s", seq < f->requests && seq < FS_LOG ? f->log[seq] : "");
    pthread_mutex_unlock(&f->mu);
}

#endif

/* A loopback HTTP relay in front of a server (no Criterion: the tests'
 * fault-injecting S3 proxy, tests/integration/s3_util.h, and the
 * recording proxy of bench/s3_job.c are both this loop with their own
 * hook). It listens on 127.0.0.1 (a port of its own); each client
 * connection carries one request, read whole (its head, then
 * Content-Length bytes of body, waiting at most 10 s for each read) on a
 * thread of its own. The hook sees it first: it may answer or drop the
 * connection itself, or let it pass. A request that passes goes to the
 * upstream server with "Connection: close" added (not a signed header, so
 * a SigV4 signature still holds), and the answer is relayed until the
 * server closes (waiting at most 30 s for each read). */
#ifndef SLUICE_TESTS_RELAY_H
#define SLUICE_TESTS_RELAY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the hook decided. */
typedef enum tu_relay_verdict {
    TU_RELAY_PASS,    /* forward it upstream and relay the answer */
    TU_RELAY_HANDLED, /* the hook answered (or set the socket to reset): close */
} tu_relay_verdict_t;

/* Called on the connection's thread with the request: req[0, head) is its
 * request line and headers (NUL-terminated at head when it fits), req[head,
 * len) its body; fd is the client's socket, for a hook that answers. */
typedef tu_relay_verdict_t (*tu_relay_fn)(void *ctx, int fd, const char *req, size_t head,
                                          size_t len);

typedef struct tu_relay {
    int lfd;
    uint16_t port;     /* where it listens */
    uint16_t upstream; /* the server's port on 127.0.0.1 */
    tu_relay_fn hook;  /* NULL: every request passes */
    void *ctx;
    pthread_t th;
    atomic_bool stop;
} tu_relay_t;

/* Listen and start accepting. @return 0, or -1 (errno says why). */
int tu_relay_start(tu_relay_t *r, uint16_t upstream, tu_relay_fn hook, void *ctx);

/* Stop accepting and close the listening socket; connections being
 * relayed end on their own (their threads are detached). */
void tu_relay_stop(tu_relay_t *r);

/* Write all of b[0, n) to fd (no SIGPIPE). @return false when the peer
 * went away. */
bool tu_relay_send_all(int fd, const void *b, size_t n);

#endif

/* A raw trainer-protocol peer of the worker's server for its unit tests
 * (server_*_test.c): a loopback connection with a bounded receive, REQUEST
 * and ACK frames. Header-only: each test program includes it once. */
#ifndef SLUICE_TESTS_SERVER_PEER_H
#define SLUICE_TESTS_SERVER_PEER_H

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "rpc/frame.h"
#include "testutil.h"

/* A connection to 127.0.0.1:port whose reads give up after 5 s (scaled). */
static inline int sp_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_set_recv_timeout(fd, (int)(tu_timeout(5) * 1000), &err), SL_OK, "%s",
                 err.msg);
    return fd;
}

/* REQUEST(n credits), saying shm_attached when attached. */
static inline void sp_request(int fd, uint32_t n, bool attached)
{
    Sluice__Dpp__Request r = SLUICE__DPP__REQUEST__INIT;
    r.credits = n;
    r.shm_attached = attached;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_REQUEST, &r.base, NULL, 0, &err), SL_OK, "%s", err.msg);
}

/* The next frame into *f, which must be a BATCH (payloads up to 1 MiB). */
static inline const Sluice__Dpp__BatchInfo *sp_recv_batch(int fd, sl_rpc_frame_t *f)
{
    sl_error_t err = {0};
    sl_rpc_limits_t lim = {.max_message_bytes = 1 << 16, .max_payload_bytes = 1 << 20};
    cr_assert_eq(sl_rpc_recv(fd, &lim, NULL, f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f->type, SL_RPC_BATCH, "got %s", sl_rpc_type_name(f->type));
    return (const Sluice__Dpp__BatchInfo *)f->msg;
}

static inline void sp_ack(int fd, uint64_t id)
{
    Sluice__Dpp__Ack a = SLUICE__DPP__ACK__INIT;
    a.n_delivery_ids = 1;
    a.delivery_ids = &id;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_ACK, &a.base, NULL, 0, &err), SL_OK, "%s", err.msg);
}

#endif

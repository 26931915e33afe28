/* Trainer protocol framing (src/rpc/frame.c): header round trip and every
 * rejection with its exact code; send/receive over a socketpair including a
 * payload of several MB and frames cut short; address handling with
 * listen/connect on loopback; the probe that tells an HTTP server from a
 * sluice binary port (port_hint.h). */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/frame.h"
#include "rpc/port_hint.h"
#include "testutil.h"

static void pair(int sv[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static void header(uint8_t out[SL_RPC_HEADER_BYTES], uint32_t type, uint32_t msg_len,
                   uint64_t payload_len)
{
    sl_rpc_header_t h = {.type = type, .message_len = msg_len, .payload_len = payload_len};
    sl_rpc_header_encode(&h, out);
}

Test(rpc_frame, header_round_trip_and_layout)
{
    uint8_t b[SL_RPC_HEADER_BYTES];
    header(b, SL_RPC_BATCH, 0x01020304u, 0x1122334455ull);
    /* The byte layout docs/PROTOCOL.md promises. */
    const uint8_t want[SL_RPC_HEADER_BYTES] = {'S',  'L',  'D',  'P',  1,    0, 4, 0,
                                               4,    3,    2,    1,    0,    0, 0, 0,
                                               0x55, 0x44, 0x33, 0x22, 0x11, 0, 0, 0};
    cr_assert_arr_eq(b, want, sizeof want);
    sl_rpc_limits_t lim = {.max_message_bytes = 0x01020304u, .max_payload_bytes = 1ull << 40};
    sl_rpc_header_t h;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_header_decode(b, &lim, &h, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(h.type, SL_RPC_BATCH);
    cr_assert_eq(h.message_len, 0x01020304u);
    cr_assert_eq(h.payload_len, 0x1122334455ull);
    for (uint32_t t = 1; t <= SL_RPC_TYPE_MAX; t++) {
        if (t > SL_RPC_AUTH_OK && t < SL_RPC_REGISTER) continue; /* 12..15 unassigned */
        header(b, t, 7, 0);
        cr_assert_eq(sl_rpc_header_decode(b, NULL, &h, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(h.type, t);
        cr_assert_neq(strcmp(sl_rpc_type_name(t), "unknown"), 0);
    }
    cr_assert_str_eq(sl_rpc_type_name(0), "unknown");
    cr_assert_str_eq(sl_rpc_type_name(99), "unknown");
}

static void expect_reject(const uint8_t *b, const sl_rpc_limits_t *lim, sl_err_t code,
                          const char *needle)
{
    sl_rpc_header_t h;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_header_decode(b, lim, &h, &err), code, "%s", err.msg);
    cr_assert(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
}

Test(rpc_frame, header_rejections)
{
    uint8_t b[SL_RPC_HEADER_BYTES];
    header(b, SL_RPC_ACK, 10, 0);
    b[0] = 'X';
    expect_reject(b, NULL, SL_ERR_PROTOCOL, "bad magic");

    header(b, SL_RPC_ACK, 10, 0);
    b[4] = 2;
    expect_reject(b, NULL, SL_ERR_VERSION, "version 2");

    header(b, 0, 10, 0);
    expect_reject(b, NULL, SL_ERR_PROTOCOL, "unknown frame type 0");
    header(b, SL_RPC_AUTH_OK + 1, 10, 0); /* a gap between trainer and control frames */
    expect_reject(b, NULL, SL_ERR_PROTOCOL, "unknown frame type 12");
    header(b, SL_RPC_TYPE_MAX + 1, 10, 0);
    expect_reject(b, NULL, SL_ERR_PROTOCOL, "unknown frame type 34");

    header(b, SL_RPC_ACK, 10, 0);
    b[13] = 1;
    expect_reject(b, NULL, SL_ERR_PROTOCOL, "reserved");

    header(b, SL_RPC_REQUEST, 2, 64);
    expect_reject(b, NULL, SL_ERR_PROTOCOL, "request frame: carries a payload");

    sl_rpc_limits_t lim = {.max_message_bytes = 100, .max_payload_bytes = 1000};
    header(b, SL_RPC_HELLO, 101, 0);
    expect_reject(b, &lim, SL_ERR_TOO_LARGE, "message of 101 bytes");
    header(b, SL_RPC_BATCH, 100, 1001);
    expect_reject(b, &lim, SL_ERR_TOO_LARGE, "payload of 1001 bytes");
    header(b, SL_RPC_BATCH, 100, 1000);
    sl_rpc_header_t h;
    cr_assert_eq(sl_rpc_header_decode(b, &lim, &h, NULL), SL_OK);
    /* Defaults: 1 MiB messages. */
    header(b, SL_RPC_HELLO, (1u << 20) + 1, 0);
    expect_reject(b, NULL, SL_ERR_TOO_LARGE, "exceeds the limit");
}

Test(rpc_frame, send_rejects_misuse)
{
    int sv[2];
    pair(sv);
    Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(sv[0], SL_RPC_HELLO, &ack.base, NULL, 0, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "hello frame") != NULL, "%s", err.msg);
    char p[8] = {0};
    cr_assert_eq(sl_rpc_send(sv[0], SL_RPC_ACK, &ack.base, p, sizeof p, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_rpc_send(sv[0], (sl_rpc_type_t)42, NULL, NULL, 0, &err), SL_ERR_INVALID);
    close(sv[0]);
    close(sv[1]);
}

Test(rpc_frame, small_frames_round_trip)
{
    int sv[2];
    pair(sv);
    sl_error_t err = {0};
    Sluice__Dpp__Hello hello = SLUICE__DPP__HELLO__INIT;
    hello.protocol_version = SL_RPC_VERSION;
    hello.client_name = "trainer-7";
    hello.rank = 3;
    hello.world_size = 8;
    cr_assert_eq(sl_rpc_send(sv[0], SL_RPC_HELLO, &hello.base, NULL, 0, &err), SL_OK, "%s",
                 err.msg);
    uint64_t ids[3] = {5, 1ull << 40, 0};
    Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
    ack.n_delivery_ids = 3;
    ack.delivery_ids = ids;
    cr_assert_eq(sl_rpc_send(sv[0], SL_RPC_ACK, &ack.base, NULL, 0, &err), SL_OK);
    cr_assert_eq(sl_rpc_send(sv[0], SL_RPC_GOODBYE, NULL, NULL, 0, &err), SL_OK);
    sl_rpc_send_error(sv[0], SL_ERR_CORRUPT, "split 4: checksum");

    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv(sv[1], NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_HELLO);
    const Sluice__Dpp__Hello *h = (const Sluice__Dpp__Hello *)f.msg;
    cr_assert_str_eq(h->client_name, "trainer-7");
    cr_assert_eq(h->rank, 3);
    cr_assert_eq(h->world_size, 8);
    cr_assert_eq(f.wire_bytes,
                 SL_RPC_HEADER_BYTES + protobuf_c_message_get_packed_size(&hello.base));
    cr_assert_null(f.payload);
    sl_rpc_frame_free(&f);

    cr_assert_eq(sl_rpc_recv(sv[1], NULL, NULL, &f, &err), SL_OK);
    cr_assert_eq(f.type, SL_RPC_ACK);
    const Sluice__Dpp__Ack *a = (const Sluice__Dpp__Ack *)f.msg;
    cr_assert_eq(a->n_delivery_ids, 3);
    cr_assert_arr_eq(a->delivery_ids, ids, sizeof ids);
    sl_rpc_frame_free(&f);

    cr_assert_eq(sl_rpc_recv(sv[1], NULL, NULL, &f, &err), SL_OK);
    cr_assert_eq(f.type, SL_RPC_GOODBYE);
    cr_assert_eq(f.wire_bytes, SL_RPC_HEADER_BYTES);
    sl_rpc_frame_free(&f);

    cr_assert_eq(sl_rpc_recv(sv[1], NULL, NULL, &f, &err), SL_OK);
    cr_assert_eq(f.type, SL_RPC_ERROR);
    const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
    cr_assert_eq(e->code, SL_ERR_CORRUPT);
    cr_assert_str_eq(e->message, "split 4: checksum");
    sl_rpc_frame_free(&f);

    close(sv[0]);
    cr_assert_eq(sl_rpc_recv(sv[1], NULL, NULL, &f, &err), SL_ERR_CLOSED);
    cr_assert_null(f.msg);
    sl_rpc_frame_free(&f); /* harmless on a cleared frame */
    sl_rpc_frame_free(NULL);
    close(sv[1]);
}

typedef struct big_send {
    int fd;
    const uint8_t *payload;
    size_t len;
    sl_err_t rc;
} big_send_t;

static void *send_big(void *arg)
{
    big_send_t *s = arg;
    Sluice__Dpp__BatchInfo bi = SLUICE__DPP__BATCH_INFO__INIT;
    bi.delivery_id = 77;
    bi.num_samples = 4096;
    s->rc = sl_rpc_send(s->fd, SL_RPC_BATCH, &bi.base, s->payload, s->len, NULL);
    return NULL;
}

Test(rpc_frame, large_payload_through_a_socketpair)
{
    uint64_t rng = tu_seed("rpc_frame.large_payload");
    int sv[2];
    pair(sv);
    size_t len = (6u << 20) + 13; /* several MB, not a multiple of anything */
    uint8_t *payload = malloc(len);
    for (size_t i = 0; i < len; i++)
        payload[i] = (uint8_t)tu_next(&rng);
    big_send_t s = {.fd = sv[0], .payload = payload, .len = len};
    pthread_t th;
    pthread_create(&th, NULL, send_big, &s);
    sl_rpc_frame_t f;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(sv[1], NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    pthread_join(th, NULL);
    cr_assert_eq(s.rc, SL_OK);
    cr_assert_eq(f.type, SL_RPC_BATCH);
    cr_assert_eq(((const Sluice__Dpp__BatchInfo *)f.msg)->delivery_id, 77);
    cr_assert_eq(f.payload_len, len);
    cr_assert_eq((uintptr_t)f.payload % SL_ALIGN, 0);
    cr_assert_eq(memcmp(f.payload, payload, len), 0);
    /* The caller may take the payload. */
    void *p = f.payload;
    f.payload = NULL;
    sl_rpc_frame_free(&f);
    sl_free(NULL, p, len);
    free(payload);
    close(sv[0]);
    close(sv[1]);
}

/* An ACK and a REQUEST in one sendmsg are the bytes of two sl_rpc_send
 * calls; a buffered reader takes both (and what follows) in one read. */
Test(rpc_frame, frames_sent_together_are_the_frames_sent_apart)
{
    int sv[2], sw[2];
    pair(sv);
    pair(sw);
    sl_error_t err = {0};
    uint64_t ids[2] = {9, 1ull << 33}, rel[1] = {4};
    Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
    ack.n_delivery_ids = 2;
    ack.delivery_ids = ids;
    ack.n_released_ids = 1;
    ack.released_ids = rel;
    Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
    req.credits = 1;
    sl_rpc_type_t types[3] = {SL_RPC_ACK, SL_RPC_REQUEST, SL_RPC_GOODBYE};
    const ProtobufCMessage *msgs[3] = {&ack.base, &req.base, NULL};
    cr_assert_eq(sl_rpc_send_frames(sv[0], 3, types, msgs, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_send(sw[0], SL_RPC_ACK, &ack.base, NULL, 0, &err), SL_OK);
    cr_assert_eq(sl_rpc_send(sw[0], SL_RPC_REQUEST, &req.base, NULL, 0, &err), SL_OK);
    cr_assert_eq(sl_rpc_send(sw[0], SL_RPC_GOODBYE, NULL, NULL, 0, &err), SL_OK);
    cr_assert_eq(sl_rpc_send_frames(sv[0], 0, types, msgs, &err), SL_OK); /* nothing */
    close(sv[0]);
    close(sw[0]);
    uint8_t together[512], apart[512];
    ssize_t n1 = recv(sv[1], together, sizeof together, MSG_PEEK | MSG_WAITALL);
    ssize_t n2 = recv(sw[1], apart, sizeof apart, MSG_PEEK | MSG_WAITALL);
    size_t want = 3 * SL_RPC_HEADER_BYTES + protobuf_c_message_get_packed_size(&ack.base) +
                  protobuf_c_message_get_packed_size(&req.base);
    cr_assert_eq(n1, (ssize_t)want);
    cr_assert_eq(n2, (ssize_t)want);
    cr_assert_eq(memcmp(together, apart, want), 0);

    sl_rpc_inbuf_t in;
    sl_rpc_inbuf_init(&in, sv[1]);
    cr_assert_eq(sl_rpc_inbuf_buffered(&in), 0);
    cr_assert_not(sl_rpc_inbuf_frame_ready(&in));
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv_from(sl_rpc_inbuf_read, &in, NULL, NULL, &f, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(f.type, SL_RPC_ACK);
    const Sluice__Dpp__Ack *a = (const Sluice__Dpp__Ack *)f.msg;
    cr_assert_eq(a->n_delivery_ids, 2);
    cr_assert_arr_eq(a->delivery_ids, ids, sizeof ids);
    cr_assert_eq(a->n_released_ids, 1);
    cr_assert_eq(a->released_ids[0], 4);
    sl_rpc_frame_free(&f);
    /* the rest came with the first read */
    cr_assert_eq(sl_rpc_inbuf_buffered(&in),
                 want - SL_RPC_HEADER_BYTES - protobuf_c_message_get_packed_size(&ack.base));
    cr_assert(sl_rpc_inbuf_frame_ready(&in));
    cr_assert_eq(sl_rpc_recv_from(sl_rpc_inbuf_read, &in, NULL, NULL, &f, &err), SL_OK);
    cr_assert_eq(f.type, SL_RPC_REQUEST);
    cr_assert_eq(((const Sluice__Dpp__Request *)f.msg)->credits, 1);
    sl_rpc_frame_free(&f);
    cr_assert_eq(sl_rpc_inbuf_buffered(&in), SL_RPC_HEADER_BYTES);
    cr_assert(sl_rpc_inbuf_frame_ready(&in));
    cr_assert_eq(sl_rpc_recv_from(sl_rpc_inbuf_read, &in, NULL, NULL, &f, &err), SL_OK);
    cr_assert_eq(f.type, SL_RPC_GOODBYE);
    sl_rpc_frame_free(&f);
    cr_assert_eq(sl_rpc_inbuf_buffered(&in), 0);
    cr_assert_eq(sl_rpc_recv_from(sl_rpc_inbuf_read, &in, NULL, NULL, &f, &err), SL_ERR_CLOSED);

    /* only message frames go together */
    sl_rpc_type_t bad[1] = {SL_RPC_BATCH};
    const ProtobufCMessage *none[1] = {NULL};
    cr_assert_eq(sl_rpc_send_frames(sw[1], 1, bad, none, &err), SL_ERR_INVALID);
    sl_rpc_type_t wrong[1] = {SL_RPC_REQUEST};
    const ProtobufCMessage *acks[1] = {&ack.base};
    cr_assert_eq(sl_rpc_send_frames(sw[1], 1, wrong, acks, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "request frame: message is a sluice.dpp.Ack");
    close(sv[1]);
    close(sw[1]);
}

/* A buffered reader hands a payload larger than its buffer over whole: the
 * buffered part, then the rest read straight to its place. */
Test(rpc_frame, buffered_reader_and_a_large_payload)
{
    uint64_t rng = tu_seed("rpc_frame.buffered_large_payload");
    int sv[2];
    pair(sv);
    size_t len = (3u << 20) + 7;
    uint8_t *payload = malloc(len);
    for (size_t i = 0; i < len; i++)
        payload[i] = (uint8_t)tu_next(&rng);
    big_send_t s = {.fd = sv[0], .payload = payload, .len = len};
    pthread_t th;
    pthread_create(&th, NULL, send_big, &s);
    sl_rpc_inbuf_t in;
    sl_rpc_inbuf_init(&in, sv[1]);
    sl_rpc_frame_t f;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv_from(sl_rpc_inbuf_read, &in, NULL, NULL, &f, &err), SL_OK, "%s",
                 err.msg);
    pthread_join(th, NULL);
    cr_assert_eq(s.rc, SL_OK);
    cr_assert_eq(f.type, SL_RPC_BATCH);
    cr_assert_eq(((const Sluice__Dpp__BatchInfo *)f.msg)->delivery_id, 77);
    cr_assert_eq(f.payload_len, len);
    cr_assert_eq(memcmp(f.payload, payload, len), 0);
    cr_assert_eq(sl_rpc_inbuf_buffered(&in), 0);
    sl_rpc_frame_free(&f);
    free(payload);
    close(sv[0]);
    close(sv[1]);
}

/* Write raw bytes then close: what the receiver sees is the whole story. */
static sl_err_t recv_raw(const void *bytes, size_t n, const sl_rpc_limits_t *lim, sl_error_t *err)
{
    int sv[2];
    pair(sv);
    cr_assert_eq(write(sv[0], bytes, n), (ssize_t)n);
    close(sv[0]);
    sl_rpc_frame_t f;
    sl_err_t rc = sl_rpc_recv(sv[1], lim, NULL, &f, err);
    if (rc == SL_OK)
        sl_rpc_frame_free(&f);
    else
        cr_assert_null(f.msg);
    close(sv[1]);
    return rc;
}

Test(rpc_frame, truncated_frames)
{
    uint8_t buf[SL_RPC_HEADER_BYTES + 64];
    sl_error_t err = {0};
    header(buf, SL_RPC_ACK, 0, 0);
    cr_assert_eq(recv_raw(buf, 10, NULL, &err), SL_ERR_TRUNCATED);
    cr_assert(strstr(err.msg, "after 10 of 24") != NULL, "%s", err.msg);

    header(buf, SL_RPC_ACK, 40, 0);
    memset(buf + SL_RPC_HEADER_BYTES, 0, 40);
    cr_assert_eq(recv_raw(buf, SL_RPC_HEADER_BYTES + 5, NULL, &err), SL_ERR_TRUNCATED);
    cr_assert(strstr(err.msg, "ack frame: message ends after 5 of 40") != NULL, "%s", err.msg);

    /* A batch whose payload stops short. */
    Sluice__Dpp__BatchInfo bi = SLUICE__DPP__BATCH_INFO__INIT;
    bi.delivery_id = 1;
    size_t ml = protobuf_c_message_get_packed_size(&bi.base);
    header(buf, SL_RPC_BATCH, (uint32_t)ml, 1000);
    protobuf_c_message_pack(&bi.base, buf + SL_RPC_HEADER_BYTES);
    memset(buf + SL_RPC_HEADER_BYTES + ml, 0xab, 30);
    cr_assert_eq(recv_raw(buf, SL_RPC_HEADER_BYTES + ml + 30, NULL, &err), SL_ERR_TRUNCATED);
    cr_assert(strstr(err.msg, "payload ends after 30 of 1000") != NULL, "%s", err.msg);

    /* Nothing at all: a clean close, not a truncation. */
    cr_assert_eq(recv_raw(buf, 0, NULL, &err), SL_ERR_CLOSED);
}

Test(rpc_frame, garbage_message_and_bad_header_over_the_socket)
{
    uint8_t buf[SL_RPC_HEADER_BYTES + 8];
    sl_error_t err = {0};
    /* 0xff...: a varint that never ends. */
    header(buf, SL_RPC_WELCOME, 8, 0);
    memset(buf + SL_RPC_HEADER_BYTES, 0xff, 8);
    cr_assert_eq(recv_raw(buf, sizeof buf, NULL, &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "welcome frame: message does not parse") != NULL, "%s", err.msg);

    header(buf, SL_RPC_BATCH, 0, 5000);
    sl_rpc_limits_t lim = {.max_message_bytes = 64, .max_payload_bytes = 4096};
    cr_assert_eq(recv_raw(buf, SL_RPC_HEADER_BYTES, &lim, &err), SL_ERR_TOO_LARGE);

    /* an HTTP server answered, or an HTTP client asked: each named */
    memcpy(buf, "HTTP/1.1 200 OK\r\n\r\n12345", SL_RPC_HEADER_BYTES);
    cr_assert_eq(recv_raw(buf, SL_RPC_HEADER_BYTES, NULL, &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "the peer answered HTTP: that is an admin endpoint") != NULL, "%s",
              err.msg);
    memcpy(buf, "GET /jobs HTTP/1.1\r\nHost: x", SL_RPC_HEADER_BYTES);
    cr_assert_eq(recv_raw(buf, SL_RPC_HEADER_BYTES, NULL, &err), SL_ERR_PROTOCOL);
    cr_assert_str_eq(err.msg, SL_RPC_HTTP_REQUEST_MSG);
    memcpy(buf, "XXXX/1.1 200 OK\r\n\r\n12345", SL_RPC_HEADER_BYTES);
    cr_assert_eq(recv_raw(buf, SL_RPC_HEADER_BYTES, NULL, &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "bad magic") != NULL, "%s", err.msg);
}

Test(rpc_frame, receive_timeout)
{
    int sv[2];
    pair(sv);
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_set_recv_timeout(sv[1], 30, &err), SL_OK);
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv(sv[1], NULL, NULL, &f, &err), SL_ERR_TIMEOUT, "%s", err.msg);
    close(sv[0]);
    close(sv[1]);
}

Test(rpc_frame, listen_connect_loopback)
{
    int lfd, cfd;
    uint16_t port = 0;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 4, &lfd, &port, &err), SL_OK, "%s", err.msg);
    cr_assert_neq(port, 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    cr_assert_eq(sl_rpc_connect(addr, 2000, &cfd, &err), SL_OK, "%s", err.msg);
    int sfd = accept(lfd, NULL, NULL);
    cr_assert_geq(sfd, 0);
    Sluice__Dpp__Request req = SLUICE__DPP__REQUEST__INIT;
    req.credits = 9;
    cr_assert_eq(sl_rpc_send(cfd, SL_RPC_REQUEST, &req.base, NULL, 0, &err), SL_OK);
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv(sfd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(((const Sluice__Dpp__Request *)f.msg)->credits, 9);
    sl_rpc_frame_free(&f);
    /* A peer that has gone: sending fails with CLOSED, without SIGPIPE. */
    close(sfd);
    sl_err_t rc = SL_OK;
    for (int i = 0; i < 100 && rc == SL_OK; i++)
        rc = sl_rpc_send(cfd, SL_RPC_REQUEST, &req.base, NULL, 0, &err);
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s", err.msg);
    close(cfd);
    close(lfd);

    /* Nobody listens there any more. */
    cr_assert_eq(sl_rpc_connect(addr, 2000, &cfd, &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, addr) != NULL, "%s", err.msg);
    cr_assert_eq(sl_rpc_connect("no-port-here", 100, &cfd, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_rpc_connect("[::1]:", 100, &cfd, &err), SL_ERR_INVALID);
}

/* One HTTP-ish peer on a listening socket: accepts one connection, reads
 * the request's head (bounded by a receive timeout), then answers with
 * answer, with the refusal of a sluice binary port (refusal), or not at
 * all (closes). */
typedef struct http_peer {
    int lfd;
    const char *answer;
    bool refusal;
} http_peer_t;

static void *http_peer_main(void *arg)
{
    http_peer_t *p = arg;
    int fd = accept(p->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    sl_error_t err = {0};
    sl_rpc_set_recv_timeout(fd, 5000, &err);
    char req[256];
    size_t have = 0;
    while (have < sizeof req - 1) {
        ssize_t n = recv(fd, req + have, sizeof req - 1 - have, 0);
        if (n <= 0) break;
        have += (size_t)n;
        req[have] = '\0';
        if (strstr(req, "\r\n\r\n")) break;
    }
    if (p->refusal)
        sl_rpc_send_http_refusal(fd, "this is a binary port");
    else if (p->answer) /* a short write shows as a probe that saw no HTTP */
        (void)!send(fd, p->answer, strlen(p->answer), MSG_NOSIGNAL);
    close(fd);
    return NULL;
}

/* Probe addr (sl_rpc_handshake_reached_http after rc) against peer p. */
static bool probe_with(http_peer_t *p, const char *addr, sl_err_t rc)
{
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, http_peer_main, p), 0);
    bool http = sl_rpc_handshake_reached_http(addr, rc);
    pthread_join(th, NULL);
    return http;
}

Test(rpc_frame, a_probe_tells_an_http_server_from_a_binary_port)
{
    int lfd;
    uint16_t port = 0;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 4, &lfd, &port, &err), SL_OK, "%s", err.msg);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);

    /* An admin endpoint: a handshake that timed out or was closed unanswered. */
    http_peer_t admin = {.lfd = lfd, .answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"};
    cr_assert(probe_with(&admin, addr, SL_ERR_TIMEOUT));
    cr_assert(probe_with(&admin, addr, SL_ERR_CLOSED));
    /* A sluice binary port answers HTTP only with its 400: not an admin endpoint. */
    http_peer_t binary = {.lfd = lfd, .refusal = true};
    cr_assert_not(probe_with(&binary, addr, SL_ERR_CLOSED));
    /* A peer that closes without a word speaks no HTTP. */
    http_peer_t silent = {.lfd = lfd};
    cr_assert_not(probe_with(&silent, addr, SL_ERR_TIMEOUT));

    /* Any other failure is a binary peer's answer: no probe at all (no
     * connection waits on the listening socket). */
    cr_assert_not(sl_rpc_handshake_reached_http(addr, SL_ERR_PROTOCOL));
    cr_assert_not(sl_rpc_handshake_reached_http(addr, SL_ERR_INVALID));
    struct pollfd pl = {.fd = lfd, .events = POLLIN};
    cr_assert_eq(poll(&pl, 1, 0), 0, "a probe connected");
    close(lfd);
}

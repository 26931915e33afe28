/* Framing of the trainer protocol (proto/dpp.proto, docs/PROTOCOL.md): a
 * 24-byte header, a protobuf message, and for BATCH frames a wire-encoded
 * batch as payload. Blocking reads and writes on a socket; every size from
 * the peer is checked against limits before anything is allocated. Used by
 * both sides, the worker (src/dpp) and the trainer client (src/trainer). */
#ifndef SLUICE_RPC_FRAME_H
#define SLUICE_RPC_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "dpp.pb-c.h"
#include "sluice/alloc.h"
#include "sluice/err.h"

#define SL_RPC_MAGIC "SLDP"
#define SL_RPC_VERSION 1
#define SL_RPC_HEADER_BYTES 24

typedef enum sl_rpc_type {
    SL_RPC_HELLO = 1,
    SL_RPC_WELCOME = 2,
    SL_RPC_REQUEST = 3,
    SL_RPC_BATCH = 4,
    SL_RPC_ACK = 5,
    SL_RPC_ERROR = 6,
    SL_RPC_GOODBYE = 7,
    SL_RPC_END = 8
} sl_rpc_type_t;
#define SL_RPC_TYPE_MAX 8

/* @return "hello", "batch", ... or "unknown" (static). */
const char *sl_rpc_type_name(uint32_t type);

typedef struct sl_rpc_limits {
    uint32_t max_message_bytes; /* default 1 MiB */
    uint64_t max_payload_bytes; /* default 1 GiB (sl_wire_limits_t default) */
} sl_rpc_limits_t;

sl_rpc_limits_t sl_rpc_limits_default(void);

typedef struct sl_rpc_header {
    uint32_t type;
    uint32_t message_len;
    uint64_t payload_len;
} sl_rpc_header_t;

/* Encode a header into 24 bytes. */
void sl_rpc_header_encode(const sl_rpc_header_t *h, uint8_t out[SL_RPC_HEADER_BYTES]);

/* Decode and check 24 header bytes: magic, version, known type, reserved 0,
 * sizes within limits (NULL: defaults), payload only on BATCH frames.
 * @return SL_ERR_PROTOCOL / SL_ERR_VERSION / SL_ERR_TOO_LARGE with a message. */
sl_err_t sl_rpc_header_decode(const uint8_t in[SL_RPC_HEADER_BYTES], const sl_rpc_limits_t *limits,
                              sl_rpc_header_t *out, sl_error_t *err);

/* Send one frame: msg (a protobuf-c message of the type's kind) and, for
 * SL_RPC_BATCH, payload_len bytes of payload. Blocks until written; retries
 * on EINTR and short writes; never raises SIGPIPE. @return SL_ERR_CLOSED when
 * the peer has gone, SL_ERR_IO on another socket error. */
sl_err_t sl_rpc_send(int fd, sl_rpc_type_t type, const ProtobufCMessage *msg, const void *payload,
                     size_t payload_len, sl_error_t *err);

/* One received frame. The message is unpacked; the payload (BATCH only) is
 * SL_ALIGN-aligned so the wire decoder can use it in place. */
typedef struct sl_rpc_frame {
    sl_rpc_type_t type;
    ProtobufCMessage *msg; /* unpacked with the frame's allocator */
    void *payload;         /* NULL when payload_len is 0 */
    size_t payload_len;
    const sl_allocator_t *allocator;
} sl_rpc_frame_t;

/* Receive one frame, blocking (the socket's SO_RCVTIMEO, if set, bounds each
 * read: SL_ERR_TIMEOUT). a NULL: default allocator. On success the caller
 * owns frame->msg and frame->payload: free with sl_rpc_frame_free, or take the
 * payload (set frame->payload to NULL, free with sl_free(a, p, payload_len)).
 * @return SL_ERR_CLOSED on a clean end of stream before a frame starts,
 * SL_ERR_TRUNCATED when it ends inside one, SL_ERR_PROTOCOL for a malformed
 * header or message. */
sl_err_t sl_rpc_recv(int fd, const sl_rpc_limits_t *limits, const sl_allocator_t *a,
                     sl_rpc_frame_t *frame, sl_error_t *err);

/* Frees frame->msg and frame->payload; frame may be NULL. */
void sl_rpc_frame_free(sl_rpc_frame_t *frame);

/* Send an ERROR frame with code and message, best effort (errors ignored). */
void sl_rpc_send_error(int fd, sl_err_t code, const char *message);

/* "host:port" (host may be a name, an IPv4 address or [IPv6]; empty host:
 * any address when listening) to a connected / listening socket.
 * sl_rpc_listen: *port_out gets the bound port (useful with port 0). */
sl_err_t sl_rpc_connect(const char *address, int timeout_ms, int *fd_out, sl_error_t *err);
sl_err_t sl_rpc_listen(const char *address, int backlog, int *fd_out, uint16_t *port_out,
                       sl_error_t *err);

#endif

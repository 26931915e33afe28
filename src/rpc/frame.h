/* Framing of the trainer protocol (proto/dpp.proto, docs/PROTOCOL.md): a
 * 24-byte header, a protobuf message, and for BATCH frames a wire-encoded
 * batch as payload. Blocking reads and writes on a socket; every size from
 * the peer is checked against limits before anything is allocated. Used by
 * both sides, the worker (src/dpp) and the trainer client (src/trainer). */
#ifndef SLUICE_RPC_FRAME_H
#define SLUICE_RPC_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#include "control.pb-c.h"
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
    SL_RPC_END = 8,
    /* the cluster-secret handshake (rpc/auth.h), before any frame above */
    SL_RPC_AUTH_CHALLENGE = 9,
    SL_RPC_AUTH_RESPONSE = 10,
    SL_RPC_AUTH_OK = 11,
    /* control frames (proto/control.proto): workers and clients with the master */
    SL_RPC_REGISTER = 16,
    SL_RPC_REGISTERED = 17,
    SL_RPC_LEASE_REQUEST = 18,
    SL_RPC_LEASE = 19,
    SL_RPC_NO_WORK = 20,
    SL_RPC_HEARTBEAT = 21,
    SL_RPC_HEARTBEAT_REPLY = 22,
    SL_RPC_SPLIT_READ = 23,
    SL_RPC_SPLIT_READ_REPLY = 24,
    SL_RPC_ATTACH = 25,
    SL_RPC_ATTACHED = 26,
    SL_RPC_COMMIT = 27,
    SL_RPC_COMMIT_REPLY = 28,
    SL_RPC_CLIENT_STATS = 29,
    SL_RPC_TOKEN_REQUEST = 30,
    SL_RPC_TOKEN = 31,
    SL_RPC_SPLIT_FAILED = 32,
    SL_RPC_SPLIT_FAILED_REPLY = 33
} sl_rpc_type_t;
#define SL_RPC_TYPE_MAX 33

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

/* Send one frame: msg (a protobuf-c message of the type's kind; NULL sends
 * an empty message) and, for SL_RPC_BATCH, payload_len bytes of payload.
 * Header, message and payload leave in one sendmsg where the kernel takes
 * them. Blocks until written; retries on EINTR and short writes; never
 * raises SIGPIPE. Not safe for two threads on one fd at once: callers
 * serialise sends. @return SL_ERR_INVALID when msg is not of the type's kind
 * or a payload is given on a non-BATCH frame, SL_ERR_CLOSED when the peer has
 * gone, SL_ERR_TIMEOUT when SO_SNDTIMEO ran out, SL_ERR_IO on another socket
 * error. After a failure mid-frame the stream is unusable. */
sl_err_t sl_rpc_send(int fd, sl_rpc_type_t type, const ProtobufCMessage *msg, const void *payload,
                     size_t payload_len, sl_error_t *err);

/* One received frame. The message is unpacked; the payload (BATCH only) is
 * SL_ALIGN-aligned so the wire decoder can use it in place. */
typedef struct sl_rpc_frame {
    sl_rpc_type_t type;
    ProtobufCMessage *msg; /* unpacked with the frame's allocator */
    void *payload;         /* NULL when payload_len is 0 */
    size_t payload_len;
    size_t wire_bytes; /* header + message + payload, for byte counters */
    const sl_allocator_t *allocator;
} sl_rpc_frame_t;

/* Receive one frame, blocking (the socket's SO_RCVTIMEO, if set, bounds each
 * read: SL_ERR_TIMEOUT). a NULL: default allocator. On success the caller
 * owns frame->msg and frame->payload: free with sl_rpc_frame_free, or take the
 * payload (set frame->payload to NULL, free with sl_free(a, p, payload_len)).
 * @return SL_ERR_CLOSED on a clean end of stream before a frame starts,
 * SL_ERR_TRUNCATED when it ends inside one, SL_ERR_PROTOCOL for a malformed
 * header or message, SL_ERR_VERSION / SL_ERR_TOO_LARGE as
 * sl_rpc_header_decode. After any error but SL_ERR_CLOSED the stream is out
 * of step and must be closed (a timeout may strike mid-frame). */
sl_err_t sl_rpc_recv(int fd, const sl_rpc_limits_t *limits, const sl_allocator_t *a,
                     sl_rpc_frame_t *frame, sl_error_t *err);

/* sl_rpc_recv with one deadline for the whole frame: deadline_ms is a
 * monotonic time in ms (sl_clock_ms, common/clock.h), so a peer that trickles bytes
 * cannot stretch a handshake past it however often it sends
 * (SO_RCVTIMEO bounds each read only). SL_ERR_TIMEOUT when it passes. */
sl_err_t sl_rpc_recv_until(int fd, uint64_t deadline_ms, const sl_rpc_limits_t *limits,
                           const sl_allocator_t *a, sl_rpc_frame_t *frame, sl_error_t *err);

/* A byte source for sl_rpc_recv_from: read up to len bytes into buf.
 * @return bytes read (> 0), 0 at end of stream, or -1 with errno set
 * (EINTR is retried; EAGAIN / EWOULDBLOCK mean a timeout). */
typedef ssize_t (*sl_rpc_read_fn)(void *ctx, void *buf, size_t len);

/* sl_rpc_recv over any byte source (tests and fuzzing read from memory). */
sl_err_t sl_rpc_recv_from(sl_rpc_read_fn read, void *ctx, const sl_rpc_limits_t *limits,
                          const sl_allocator_t *a, sl_rpc_frame_t *frame, sl_error_t *err);

/* Frees frame->msg and frame->payload; frame may be NULL. */
void sl_rpc_frame_free(sl_rpc_frame_t *frame);

/* Send n message-only frames (types[i], msgs[i]; a NULL message is empty)
 * back to back in one sendmsg where the kernel takes them: the bytes on the
 * wire are those of n sl_rpc_send calls, so a peer reads n frames; one
 * system call and one wake-up of the peer instead of n (a trainer's ACK and
 * the credit that goes with it). Same rules and errors as sl_rpc_send; no
 * BATCH frames (they carry a payload). n == 0 sends nothing. */
sl_err_t sl_rpc_send_frames(int fd, size_t n, const sl_rpc_type_t *types,
                            const ProtobufCMessage *const *msgs, sl_error_t *err);

/* A buffered byte source over a blocking socket for sl_rpc_recv_from: each
 * read(2) takes what the socket holds, up to SL_RPC_INBUF_BYTES, so the
 * small frames a peer sent together (an ACK and a REQUEST, a header and its
 * message) come out of one system call instead of one per part; a read of
 * more than the buffer holds, once the buffer is drained, goes straight to
 * the caller's memory (a batch's payload is not copied twice). The
 * socket's SO_RCVTIMEO still bounds each read(2). Not for two threads at
 * once. While sl_rpc_inbuf_buffered is not 0 a poll(2) of the socket may
 * not say that a frame is waiting: receive before polling. */
#define SL_RPC_INBUF_BYTES 4096
typedef struct sl_rpc_inbuf {
    int fd;
    uint32_t at, end; /* buffered bytes: buf[at, end) */
    uint8_t buf[SL_RPC_INBUF_BYTES];
} sl_rpc_inbuf_t;

void sl_rpc_inbuf_init(sl_rpc_inbuf_t *b, int fd);
/* An sl_rpc_read_fn; ctx is an sl_rpc_inbuf_t. */
ssize_t sl_rpc_inbuf_read(void *ctx, void *buf, size_t len);
/* Bytes read from the socket that no frame has taken yet. */
static inline size_t sl_rpc_inbuf_buffered(const sl_rpc_inbuf_t *b)
{
    return b->end - b->at;
}
/* Is a whole frame buffered, so that the next receive takes no system call
 * and cannot block? (Sizes as its header says; a malformed header is for
 * that receive to refuse.) */
bool sl_rpc_inbuf_frame_ready(const sl_rpc_inbuf_t *b);

/* Send an ERROR frame with code and message, best effort (errors ignored).
 * The sender closes the connection after it (docs/PROTOCOL.md). */
void sl_rpc_send_error(int fd, sl_err_t code, const char *message);

/* The sl_err_t of a received ERROR frame: its code when it is one of ours,
 * SL_ERR_PROTOCOL otherwise (a newer peer's code still means failure). */
sl_err_t sl_rpc_error_code(const Sluice__Dpp__Error *e);

/* May a peer that got ERROR(code) (the connection then closed) connect
 * again and retry? True for the codes that say "not now" rather than "not
 * you": SL_ERR_AGAIN (a connection cap), SL_ERR_TIMEOUT (closed idle),
 * SL_ERR_IO and SL_ERR_NOMEM (the server's trouble), SL_ERR_CLOSED. */
bool sl_rpc_error_retriable(sl_err_t code);

/* Send a GOODBYE frame with reason, best effort and bounded: sends on fd
 * time out after a second from then on, so a peer that stopped reading
 * cannot hold up the close that follows. */
void sl_rpc_send_goodbye(int fd, const char *reason);

/* Bound every later blocking receive on fd to timeout_ms (<= 0: no bound),
 * through SO_RCVTIMEO. @return SL_ERR_IO when the option cannot be set. */
sl_err_t sl_rpc_set_recv_timeout(int fd, int timeout_ms, sl_error_t *err);

/* "host:port" (host may be a name, an IPv4 address or [IPv6]; empty host:
 * any address when listening) to a connected / listening socket.
 * sl_rpc_connect: timeout_ms bounds each address tried (<= 0: the kernel's
 * own limit); the socket is blocking, TCP_NODELAY, SO_KEEPALIVE, close-on-exec.
 * Caller owns *fd_out (close it). @return SL_ERR_INVALID for a malformed or
 * unresolvable address, SL_ERR_TIMEOUT, SL_ERR_IO (refused, unreachable).
 * sl_rpc_listen: *port_out gets the bound port (useful with port 0). */
sl_err_t sl_rpc_connect(const char *address, int timeout_ms, int *fd_out, sl_error_t *err);
sl_err_t sl_rpc_listen(const char *address, int backlog, int *fd_out, uint16_t *port_out,
                       sl_error_t *err);

/* Does binding address ("host:port") reach this machine only? True when
 * every address the host resolves to is a loopback one (127.0.0.0/8, ::1);
 * false for an empty host, a wildcard (0.0.0.0, ::), any other address or
 * a name that does not resolve. */
bool sl_rpc_address_is_loopback(const char *address);

#endif

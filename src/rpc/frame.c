/* Frame encoding, blocking send/receive and socket set-up for the trainer
 * protocol (frame.h). */
#include "rpc/frame.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/time.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/mem.h"
#include "rpc/port_hint.h"

static const ProtobufCMessageDescriptor *const descriptors[SL_RPC_TYPE_MAX + 1] = {
    [SL_RPC_HELLO] = &sluice__dpp__hello__descriptor,
    [SL_RPC_WELCOME] = &sluice__dpp__welcome__descriptor,
    [SL_RPC_REQUEST] = &sluice__dpp__request__descriptor,
    [SL_RPC_BATCH] = &sluice__dpp__batch_info__descriptor,
    [SL_RPC_ACK] = &sluice__dpp__ack__descriptor,
    [SL_RPC_ERROR] = &sluice__dpp__error__descriptor,
    [SL_RPC_GOODBYE] = &sluice__dpp__goodbye__descriptor,
    [SL_RPC_END] = &sluice__dpp__end__descriptor,
    [SL_RPC_AUTH_CHALLENGE] = &sluice__dpp__auth_challenge__descriptor,
    [SL_RPC_AUTH_RESPONSE] = &sluice__dpp__auth_response__descriptor,
    [SL_RPC_AUTH_OK] = &sluice__dpp__auth_ok__descriptor,
    [SL_RPC_REGISTER] = &sluice__control__register__descriptor,
    [SL_RPC_REGISTERED] = &sluice__control__registered__descriptor,
    [SL_RPC_LEASE_REQUEST] = &sluice__control__lease_request__descriptor,
    [SL_RPC_LEASE] = &sluice__control__lease__descriptor,
    [SL_RPC_NO_WORK] = &sluice__control__no_work__descriptor,
    [SL_RPC_HEARTBEAT] = &sluice__control__heartbeat__descriptor,
    [SL_RPC_HEARTBEAT_REPLY] = &sluice__control__heartbeat_reply__descriptor,
    [SL_RPC_SPLIT_READ] = &sluice__control__split_read__descriptor,
    [SL_RPC_SPLIT_READ_REPLY] = &sluice__control__split_read_reply__descriptor,
    [SL_RPC_ATTACH] = &sluice__control__attach__descriptor,
    [SL_RPC_ATTACHED] = &sluice__control__attached__descriptor,
    [SL_RPC_COMMIT] = &sluice__control__commit__descriptor,
    [SL_RPC_COMMIT_REPLY] = &sluice__control__commit_reply__descriptor,
    [SL_RPC_CLIENT_STATS] = &sluice__control__client_stats__descriptor,
    [SL_RPC_TOKEN_REQUEST] = &sluice__control__token_request__descriptor,
    [SL_RPC_TOKEN] = &sluice__control__token__descriptor,
    [SL_RPC_SPLIT_FAILED] = &sluice__control__split_failed__descriptor,
    [SL_RPC_SPLIT_FAILED_REPLY] = &sluice__control__split_failed_reply__descriptor,
};

static const char *const type_names[SL_RPC_TYPE_MAX + 1] = {
    [0] = "unknown",
    [SL_RPC_HELLO] = "hello",
    [SL_RPC_WELCOME] = "welcome",
    [SL_RPC_REQUEST] = "request",
    [SL_RPC_BATCH] = "batch",
    [SL_RPC_ACK] = "ack",
    [SL_RPC_ERROR] = "error",
    [SL_RPC_GOODBYE] = "goodbye",
    [SL_RPC_END] = "end",
    [SL_RPC_AUTH_CHALLENGE] = "auth-challenge",
    [SL_RPC_AUTH_RESPONSE] = "auth-response",
    [SL_RPC_AUTH_OK] = "auth-ok",
    [SL_RPC_REGISTER] = "register",
    [SL_RPC_REGISTERED] = "registered",
    [SL_RPC_LEASE_REQUEST] = "lease-request",
    [SL_RPC_LEASE] = "lease",
    [SL_RPC_NO_WORK] = "no-work",
    [SL_RPC_HEARTBEAT] = "heartbeat",
    [SL_RPC_HEARTBEAT_REPLY] = "heartbeat-reply",
    [SL_RPC_SPLIT_READ] = "split-read",
    [SL_RPC_SPLIT_READ_REPLY] = "split-read-reply",
    [SL_RPC_ATTACH] = "attach",
    [SL_RPC_ATTACHED] = "attached",
    [SL_RPC_COMMIT] = "commit",
    [SL_RPC_COMMIT_REPLY] = "commit-reply",
    [SL_RPC_CLIENT_STATS] = "client-stats",
    [SL_RPC_TOKEN_REQUEST] = "token-request",
    [SL_RPC_TOKEN] = "token",
    [SL_RPC_SPLIT_FAILED] = "split-failed",
    [SL_RPC_SPLIT_FAILED_REPLY] = "split-failed-reply",
};

static bool known_type(uint32_t type)
{
    return type > 0 && type <= SL_RPC_TYPE_MAX && descriptors[type] != NULL;
}

const char *sl_rpc_type_name(uint32_t type)
{
    return known_type(type) ? type_names[type] : "unknown";
}

sl_rpc_limits_t sl_rpc_limits_default(void)
{
    return (sl_rpc_limits_t){.max_message_bytes = 1u << 20, .max_payload_bytes = 1ull << 30};
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void sl_rpc_header_encode(const sl_rpc_header_t *h, uint8_t out[SL_RPC_HEADER_BYTES])
{
    memcpy(out, SL_RPC_MAGIC, 4);
    put_u16(out + 4, SL_RPC_VERSION);
    put_u16(out + 6, (uint16_t)h->type);
    put_u32(out + 8, h->message_len);
    put_u32(out + 12, 0);
    put_u64(out + 16, h->payload_len);
}

sl_err_t sl_rpc_header_decode(const uint8_t in[SL_RPC_HEADER_BYTES], const sl_rpc_limits_t *limits,
                              sl_rpc_header_t *out, sl_error_t *err)
{
    sl_rpc_limits_t lim = limits ? *limits : sl_rpc_limits_default();
    if (memcmp(in, "HTTP/", 5) == 0)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "the peer answered HTTP: that is an admin endpoint (HTTP), not a "
                            "sluice control or trainer port");
    if (sl_rpc_looks_like_http_request(in, SL_RPC_HEADER_BYTES))
        return sl_error_set(err, SL_ERR_PROTOCOL, "%s", SL_RPC_HTTP_REQUEST_MSG);
    if (memcmp(in, SL_RPC_MAGIC, 4) != 0)
        return sl_error_set(err, SL_ERR_PROTOCOL, "frame header: bad magic (not a sluice peer?)");
    uint32_t version = (uint32_t)get_le(in + 4, 2);
    if (version != SL_RPC_VERSION)
        return sl_error_set(err, SL_ERR_VERSION,
                            "frame header: protocol version %u, this build speaks %u", version,
                            SL_RPC_VERSION);
    out->type = (uint32_t)get_le(in + 6, 2);
    out->message_len = (uint32_t)get_le(in + 8, 4);
    out->payload_len = get_le(in + 16, 8);
    if (!known_type(out->type))
        return sl_error_set(err, SL_ERR_PROTOCOL, "frame header: unknown frame type %u", out->type);
    if (get_le(in + 12, 4) != 0)
        return sl_error_set(err, SL_ERR_PROTOCOL, "frame header: reserved field is not 0");
    if (out->message_len > lim.max_message_bytes)
        return sl_error_set(err, SL_ERR_TOO_LARGE,
                            "%s frame: message of %u bytes exceeds the limit of %u",
                            sl_rpc_type_name(out->type), out->message_len, lim.max_message_bytes);
    if (out->payload_len != 0 && out->type != SL_RPC_BATCH)
        return sl_error_set(err, SL_ERR_PROTOCOL, "%s frame: carries a payload",
                            sl_rpc_type_name(out->type));
    if (out->payload_len > lim.max_payload_bytes)
        return sl_error_set(
            err, SL_ERR_TOO_LARGE, "batch frame: payload of %llu bytes exceeds the limit of %llu",
            (unsigned long long)out->payload_len, (unsigned long long)lim.max_payload_bytes);
    return SL_OK;
}

/* Write every byte of iov[0..n) (the array is consumed). */
static sl_err_t write_all(int fd, struct iovec *iov, int n, sl_error_t *err)
{
    while (n > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EPIPE || errno == ECONNRESET)
                return sl_error_set(err, SL_ERR_CLOSED, "send: peer closed the connection");
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return sl_error_set(err, SL_ERR_TIMEOUT, "send: timed out");
            return sl_error_set(err, SL_ERR_IO, "send: %s", strerror(errno));
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return SL_OK;
}

/* @return SL_OK with *got == len, or an error; *got tells how far it came. */
static sl_err_t read_all(sl_rpc_read_fn rd, void *ctx, void *buf, size_t len, size_t *got,
                         sl_error_t *err)
{
    uint8_t *p = buf;
    *got = 0;
    while (*got < len) {
        ssize_t n = rd(ctx, p + *got, len - *got);
        if (n == 0) return sl_error_set(err, SL_ERR_CLOSED, "connection closed by peer");
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return sl_error_set(err, SL_ERR_TIMEOUT, "receive: timed out");
            if (errno == ECONNRESET)
                return sl_error_set(err, SL_ERR_CLOSED, "connection reset by peer");
            return sl_error_set(err, SL_ERR_IO, "receive: %s", strerror(errno));
        }
        *got += (size_t)n;
    }
    return SL_OK;
}

/* What every frame sent passes: a known type, the message of that type
 * (or none), packed under 4 GiB. *len: the message's packed size. */
static sl_err_t check_message(sl_rpc_type_t type, const ProtobufCMessage *msg, size_t *len,
                              sl_error_t *err)
{
    if (!known_type((uint32_t)type))
        return sl_error_set(err, SL_ERR_INVALID, "send: unknown frame type %u", (unsigned)type);
    if (msg && msg->descriptor != descriptors[type])
        return sl_error_set(err, SL_ERR_INVALID, "%s frame: message is a %s",
                            sl_rpc_type_name(type), msg->descriptor->name);
    *len = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    if (*len > UINT32_MAX)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s frame: message of %zu bytes",
                            sl_rpc_type_name(type), *len);
    return SL_OK;
}

/* Header and message of a frame of msg_len (check_message) at out. */
static void pack_frame(sl_rpc_type_t type, const ProtobufCMessage *msg, size_t msg_len,
                       uint64_t payload_len, uint8_t *out)
{
    sl_rpc_header_t h = {
        .type = type, .message_len = (uint32_t)msg_len, .payload_len = payload_len};
    sl_rpc_header_encode(&h, out);
    if (msg) protobuf_c_message_pack(msg, out + SL_RPC_HEADER_BYTES);
}

sl_err_t sl_rpc_send(int fd, sl_rpc_type_t type, const ProtobufCMessage *msg, const void *payload,
                     size_t payload_len, sl_error_t *err)
{
    size_t msg_len;
    SL_FORWARD_IF_ERROR(check_message(type, msg, &msg_len, err));
    const char *name = sl_rpc_type_name(type);
    if (!payload) payload_len = 0;
    if (payload_len > 0 && type != SL_RPC_BATCH)
        return sl_error_set(err, SL_ERR_INVALID, "%s frame: only batch frames carry a payload",
                            name);
    uint8_t small[SL_RPC_HEADER_BYTES + 256];
    uint8_t *buf = small;
    if (msg_len > sizeof small - SL_RPC_HEADER_BYTES) {
        buf = sl_alloc(NULL, SL_RPC_HEADER_BYTES + msg_len);
        if (!buf) return sl_error_set(err, SL_ERR_NOMEM, "%s frame: out of memory", name);
    }
    pack_frame(type, msg, msg_len, payload_len, buf);
    struct iovec iov[2] = {{.iov_base = buf, .iov_len = SL_RPC_HEADER_BYTES + msg_len},
                           {.iov_base = (void *)payload, .iov_len = payload_len}};
    sl_err_t rc = write_all(fd, iov, payload_len > 0 ? 2 : 1, err);
    if (buf != small) sl_free(NULL, buf, SL_RPC_HEADER_BYTES + msg_len);
    if (rc != SL_OK) sl_error_prefix(err, "%s frame: ", name);
    return rc;
}

sl_err_t sl_rpc_send_frames(int fd, size_t n, const sl_rpc_type_t *types,
                            const ProtobufCMessage *const *msgs, sl_error_t *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (types[i] == SL_RPC_BATCH)
            return sl_error_set(err, SL_ERR_INVALID, "send: frame type %u cannot go with others",
                                (unsigned)types[i]);
        size_t len;
        SL_FORWARD_IF_ERROR(check_message(types[i], msgs[i], &len, err));
        if (total > SIZE_MAX / 2)
            return sl_error_set(err, SL_ERR_TOO_LARGE, "send: %zu frames of %zu bytes", n, total);
        total += SL_RPC_HEADER_BYTES + len;
    }
    if (total == 0) return SL_OK;
    uint8_t small[1024];
    uint8_t *buf = total <= sizeof small ? small : sl_alloc(NULL, total);
    if (!buf) return sl_error_set(err, SL_ERR_NOMEM, "send: out of memory for %zu bytes", total);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = msgs[i] ? protobuf_c_message_get_packed_size(msgs[i]) : 0;
        pack_frame(types[i], msgs[i], len, 0, buf + at);
        at += SL_RPC_HEADER_BYTES + len;
    }
    struct iovec iov = {.iov_base = buf, .iov_len = total};
    sl_err_t rc = write_all(fd, &iov, 1, err);
    if (buf != small) sl_free(NULL, buf, total);
    if (rc != SL_OK) sl_error_prefix(err, "%s frame: ", sl_rpc_type_name(types[0]));
    return rc;
}

void sl_rpc_inbuf_init(sl_rpc_inbuf_t *b, int fd)
{
    b->fd = fd;
    b->at = b->end = 0;
}

bool sl_rpc_inbuf_frame_ready(const sl_rpc_inbuf_t *b)
{
    uint64_t have = b->end - b->at;
    if (have < SL_RPC_HEADER_BYTES) return false;
    const uint8_t *h = b->buf + b->at;
    uint64_t need = SL_RPC_HEADER_BYTES + get_le(h + 8, 4);
    uint64_t payload = get_le(h + 16, 8);
    return payload <= have && need + payload <= have;
}

ssize_t sl_rpc_inbuf_read(void *ctx, void *buf, size_t len)
{
    sl_rpc_inbuf_t *b = ctx;
    if (b->at == b->end) {
        /* a large read (a payload) goes to its place: no second copy */
        if (len >= sizeof b->buf) return read(b->fd, buf, len);
        ssize_t got = read(b->fd, b->buf, sizeof b->buf);
        if (got <= 0) return got;
        b->at = 0;
        b->end = (uint32_t)got;
    }
    size_t k = b->end - b->at < len ? b->end - b->at : len;
    memcpy(buf, b->buf + b->at, k);
    b->at += (uint32_t)k;
    return (ssize_t)k;
}

static ssize_t read_fd(void *ctx, void *buf, size_t len)
{
    return read(*(const int *)ctx, buf, len);
}

typedef struct deadline_src {
    int fd;
    uint64_t deadline_ms;
} deadline_src;

/* A read that waits at most until the deadline (EAGAIN after it). */
static ssize_t read_until(void *ctx, void *buf, size_t len)
{
    const deadline_src *d = ctx;
    for (;;) {
        uint64_t now = sl_clock_ms();
        if (now >= d->deadline_ms) {
            errno = EAGAIN;
            return -1;
        }
        uint64_t left = d->deadline_ms - now;
        struct pollfd p = {.fd = d->fd, .events = POLLIN};
        int r = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (r < 0 && errno != EINTR) return -1;
        if (r > 0) return read(d->fd, buf, len);
    }
}

sl_err_t sl_rpc_recv_until(int fd, uint64_t deadline_ms, const sl_rpc_limits_t *limits,
                           const sl_allocator_t *a, sl_rpc_frame_t *frame, sl_error_t *err)
{
    deadline_src d = {fd, deadline_ms};
    return sl_rpc_recv_from(read_until, &d, limits, a, frame, err);
}

sl_err_t sl_rpc_recv(int fd, const sl_rpc_limits_t *limits, const sl_allocator_t *a,
                     sl_rpc_frame_t *frame, sl_error_t *err)
{
    return sl_rpc_recv_from(read_fd, &fd, limits, a, frame, err);
}

sl_err_t sl_rpc_recv_from(sl_rpc_read_fn rd, void *ctx, const sl_rpc_limits_t *limits,
                          const sl_allocator_t *a, sl_rpc_frame_t *frame, sl_error_t *err)
{
    memset(frame, 0, sizeof *frame);
    frame->allocator = a;
    uint8_t hdr[SL_RPC_HEADER_BYTES];
    size_t got;
    sl_err_t rc = read_all(rd, ctx, hdr, sizeof hdr, &got, err);
    if (rc == SL_ERR_CLOSED && got > 0)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "frame header: connection closed after %zu of %d bytes", got,
                            SL_RPC_HEADER_BYTES);
    if (rc != SL_OK) return rc;
    sl_rpc_header_t h;
    SL_FORWARD_IF_ERROR(sl_rpc_header_decode(hdr, limits, &h, err));
    const char *name = sl_rpc_type_name(h.type);
    uint8_t *msg_buf = NULL;
    if (h.message_len > 0) {
        msg_buf = sl_alloc(a, h.message_len);
        if (!msg_buf) return sl_error_set(err, SL_ERR_NOMEM, "%s frame: out of memory", name);
        rc = read_all(rd, ctx, msg_buf, h.message_len, &got, err);
        if (rc != SL_OK) {
            sl_free(a, msg_buf, h.message_len);
            if (rc == SL_ERR_CLOSED) rc = SL_ERR_TRUNCATED;
            return sl_error_set(err, rc, "%s frame: message ends after %zu of %u bytes", name, got,
                                h.message_len);
        }
    }
    sl_unsized_t u = {.a = a};
    ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
    frame->msg = protobuf_c_message_unpack(descriptors[h.type], &pa, h.message_len,
                                           msg_buf ? msg_buf : (const uint8_t *)"");
    if (msg_buf) sl_free(a, msg_buf, h.message_len);
    if (!frame->msg && u.failed)
        return sl_error_set(err, SL_ERR_NOMEM, "%s frame: out of memory (%u bytes)", name,
                            h.message_len);
    if (!frame->msg)
        return sl_error_set(err, SL_ERR_PROTOCOL, "%s frame: message does not parse (%u bytes)",
                            name, h.message_len);
    frame->type = (sl_rpc_type_t)h.type;
    if (h.payload_len > 0) {
        /* Allocated whole before reading: the limit bounds it (a peer may
         * announce max_payload_bytes and then stall or close). */
        frame->payload = sl_alloc_aligned(a, (size_t)h.payload_len, SL_ALIGN);
        if (!frame->payload) {
            sl_rpc_frame_free(frame);
            return sl_error_set(err, SL_ERR_NOMEM, "%s frame: no memory for %llu payload bytes",
                                name, (unsigned long long)h.payload_len);
        }
        frame->payload_len = (size_t)h.payload_len;
        rc = read_all(rd, ctx, frame->payload, frame->payload_len, &got, err);
        if (rc != SL_OK) {
            sl_rpc_frame_free(frame);
            if (rc == SL_ERR_CLOSED) rc = SL_ERR_TRUNCATED;
            return sl_error_set(err, rc, "%s frame: payload ends after %zu of %llu bytes", name,
                                got, (unsigned long long)h.payload_len);
        }
    }
    frame->wire_bytes = SL_RPC_HEADER_BYTES + (size_t)h.message_len + frame->payload_len;
    return SL_OK;
}

void sl_rpc_frame_free(sl_rpc_frame_t *frame)
{
    if (!frame) return;
    sl_unsized_t u = {.a = frame->allocator};
    ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
    if (frame->msg) protobuf_c_message_free_unpacked(frame->msg, &pa);
    if (frame->payload) sl_free(frame->allocator, frame->payload, frame->payload_len);
    frame->msg = NULL;
    frame->payload = NULL;
    frame->payload_len = 0;
}

sl_err_t sl_rpc_set_recv_timeout(int fd, int timeout_ms, sl_error_t *err)
{
    struct timeval tv = {0, 0};
    if (timeout_ms > 0) {
        tv.tv_sec = timeout_ms / 1000;
        tv.tv_usec = (timeout_ms % 1000) * 1000;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
        return sl_error_set(err, SL_ERR_IO, "set receive timeout: %s", strerror(errno));
    return SL_OK;
}

void sl_rpc_send_error(int fd, sl_err_t code, const char *message)
{
    Sluice__Dpp__Error e = SLUICE__DPP__ERROR__INIT;
    e.code = code;
    e.message = (char *)(message ? message : "");
    sl_rpc_send(fd, SL_RPC_ERROR, &e.base, NULL, 0, NULL);
}

sl_err_t sl_rpc_error_code(const Sluice__Dpp__Error *e)
{
    return e->code < 0 && e->code >= SL_ERR_UNSUPPORTED ? (sl_err_t)e->code : SL_ERR_PROTOCOL;
}

bool sl_rpc_error_retriable(sl_err_t code)
{
    return code == SL_ERR_AGAIN || code == SL_ERR_TIMEOUT || code == SL_ERR_IO ||
           code == SL_ERR_NOMEM || code == SL_ERR_CLOSED;
}

void sl_rpc_send_goodbye(int fd, const char *reason)
{
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    Sluice__Dpp__Goodbye bye = SLUICE__DPP__GOODBYE__INIT;
    bye.reason = (char *)(reason ? reason : "");
    sl_rpc_send(fd, SL_RPC_GOODBYE, &bye.base, NULL, 0, NULL);
}

/* Split "host:port" / "[v6]:port" into host (may be empty) and port. */
static sl_err_t split_address(const char *address, char *host, size_t host_cap, char *port,
                              size_t port_cap, sl_error_t *err)
{
    const char *colon = strrchr(address, ':');
    if (!colon || colon[1] == '\0')
        return sl_error_set(err, SL_ERR_INVALID, "address '%s': expected host:port", address);
    const char *h = address;
    size_t hlen = (size_t)(colon - address);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen >= host_cap || strlen(colon + 1) >= port_cap)
        return sl_error_set(err, SL_ERR_INVALID, "address '%s': too long", address);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    strcpy(port, colon + 1);
    return SL_OK;
}

static sl_err_t resolve(const char *address, bool passive, struct addrinfo **res, sl_error_t *err)
{
    char host[256], port[32];
    SL_FORWARD_IF_ERROR(split_address(address, host, sizeof host, port, sizeof port, err));
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, res);
    /* the resolver's words alone ("Servname not supported for ai_socktype")
     * do not say which half of HOST:PORT it refused */
    if (gai != 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "address '%s': cannot resolve host '%s' port '%s' (%s)", address, host,
                            port, gai_strerror(gai));
    return SL_OK;
}

sl_err_t sl_rpc_connect(const char *address, int timeout_ms, int *fd_out, sl_error_t *err)
{
    struct addrinfo *res;
    SL_FORWARD_IF_ERROR(resolve(address, false, &res, err));
    int last_errno = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            do {
                r = poll(&p, 1, timeout_ms <= 0 ? -1 : timeout_ms);
            } while (r < 0 && errno == EINTR);
            if (r == 0) {
                errno = ETIMEDOUT;
                r = -1;
            } else if (r > 0) {
                int so = 0;
                socklen_t len = sizeof so;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
                errno = so;
                r = so ? -1 : 0;
            }
        }
        if (r == 0) {
            int one = 1;
            /* ACK and REQUEST frames are tiny and latency-bound. */
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            /* A worker host that vanishes without a FIN is noticed eventually. */
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
            /* back to blocking: the protocol code reads and writes whole frames */
            int fl = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
            freeaddrinfo(res);
            *fd_out = fd;
            return SL_OK;
        }
        last_errno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return sl_error_set(err, last_errno == ETIMEDOUT ? SL_ERR_TIMEOUT : SL_ERR_IO,
                        "connect to %s: %s", address, strerror(last_errno));
}

sl_err_t sl_rpc_listen(const char *address, int backlog, int *fd_out, uint16_t *port_out,
                       sl_error_t *err)
{
    struct addrinfo *res;
    SL_FORWARD_IF_ERROR(resolve(address, true, &res, err));
    int last_errno = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof ss;
            uint16_t port = 0;
            if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
                if (ss.ss_family == AF_INET)
                    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
                else if (ss.ss_family == AF_INET6)
                    port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
            }
            freeaddrinfo(res);
            *fd_out = fd;
            if (port_out) *port_out = port;
            return SL_OK;
        }
        last_errno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    return sl_error_set(err, SL_ERR_IO, "listen on %s: %s", address, strerror(last_errno));
}

bool sl_rpc_address_is_loopback(const char *address)
{
    char host[256], port[32];
    if (split_address(address, host, sizeof host, port, sizeof port, NULL) != SL_OK ||
        host[0] == '\0')
        return false;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, port, &hints, &res) != 0) return false;
    bool loop = true;
    for (struct addrinfo *ai = res; ai && loop; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            uint32_t ip = ntohl(((const struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr);
            loop = ip >> 24 == 127;
        } else if (ai->ai_family == AF_INET6) {
            loop = IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
        } else {
            loop = false;
        }
    }
    freeaddrinfo(res);
    return loop;
}

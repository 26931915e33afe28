/* Port mix-ups between sluice's binary ports and its HTTP admin ports
 * (port_hint.h). */
#include "rpc/port_hint.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "rpc/frame.h"

bool sl_rpc_looks_like_http_request(const uint8_t *p, size_t len)
{
    static const char *const methods[] = {"GET /",     "POST /",      "PUT /",    "DELETE /",
                                          "HEAD /",    "PATCH /",     "OPTIONS ", "CONNECT ",
                                          "GET http:", "PRI * HTTP/2"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        size_t n = strlen(methods[i]);
        if (len >= n && memcmp(p, methods[i], n) == 0) return true;
    }
    return false;
}

void sl_rpc_send_http_refusal(int fd, const char *message)
{
    char buf[1024];
    size_t body = strlen(message) + 1;
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                     body, message);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    for (size_t at = 0; at < len;) {
        ssize_t w = send(fd, buf + at, len - at, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        at += (size_t)w;
    }
}

bool sl_rpc_address_speaks_http(const char *address, int timeout_ms)
{
    int fd;
    sl_error_t err = {0};
    if (sl_rpc_connect(address, timeout_ms, &fd, &err) != SL_OK) return false;
    static const char req[] = "GET /healthz HTTP/1.0\r\n\r\n";
    bool http = false;
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
        /* "HTTP/1.x NNN": the status line up to its code */
        char got[12];
        size_t have = 0;
        uint64_t deadline = sl_clock_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
        while (have < sizeof got) {
            uint64_t now = sl_clock_ms();
            if (now >= deadline) break;
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int r = poll(&p, 1, (int)(deadline - now));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            ssize_t n = recv(fd, got + have, sizeof got - have, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            have += (size_t)n;
        }
        /* 400 is what a sluice binary port answers (sl_rpc_send_http_refusal);
         * an admin endpoint answers /healthz with 200. */
        http = have == sizeof got && memcmp(got, "HTTP/", 5) == 0 && got[8] == ' ' &&
               memcmp(got + 9, "400", 3) != 0;
    }
    close(fd);
    return http;
}

bool sl_rpc_handshake_reached_http(const char *address, sl_err_t rc)
{
    if (rc != SL_ERR_TIMEOUT && rc != SL_ERR_CLOSED) return false;
    return sl_rpc_address_speaks_http(address, SL_RPC_PROBE_MS);
}

/* Telling the two ports of a sluice process apart when a user mixes them
 * up. A master has a control port (this binary protocol: workers and
 * trainer clients) and an admin port (HTTP: `sluice submit`, `jobs`,
 * Prometheus); a worker has a trainer port and an admin port. A frame sent
 * to an HTTP server gets no answer: either none at all (the server waits
 * for the end of a request line that never comes) or, when the frame's
 * bytes happen to hold a line end ('\n' or '\r': a length or varint byte
 * of 10 or 13, a job id of 10 characters), the connection closed at once
 * (libmicrohttpd drops a malformed request line without answering). An
 * HTTP request sent to a binary port gets a binary ERROR frame that HTTP
 * clients cannot read. These helpers let each side say which port it
 * reached and which one to use. */
#ifndef SLUICE_RPC_PORT_HINT_H
#define SLUICE_RPC_PORT_HINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/err.h"

/* Do the first len bytes received on a binary port look like the start of
 * an HTTP request ("GET /", "POST /", ...)? */
bool sl_rpc_looks_like_http_request(const uint8_t *p, size_t len);

/* The message of sl_rpc_header_decode's error for such bytes, so that a
 * server that read them through sl_rpc_recv can answer in HTTP. */
#define SL_RPC_HTTP_REQUEST_MSG "an HTTP request reached a sluice binary port"

/* Answer such a request with a plain-text "HTTP/1.0 400" whose body is
 * message, so an HTTP client (curl, `sluice submit`) shows it. Best effort:
 * the caller closes the connection afterwards. */
void sl_rpc_send_http_refusal(int fd, const char *message);

/* Does address answer an HTTP request (GET /healthz, within timeout_ms)
 * as an HTTP server does? The "HTTP/1.0 400" that a sluice binary port
 * gives an HTTP request (sl_rpc_send_http_refusal) does not count: that
 * address is a binary port. Opens and closes a connection of its own. */
bool sl_rpc_address_speaks_http(const char *address, int timeout_ms);

/* After a binary client's handshake with address (auth, REGISTER or
 * ATTACH, up to the first reply) failed with rc: was address an HTTP
 * server, i.e. the user gave an admin endpoint? Only the two ways an HTTP
 * server fails a handshake are probed (sl_rpc_address_speaks_http within
 * SL_RPC_PROBE_MS): SL_ERR_TIMEOUT (no answer) and SL_ERR_CLOSED (closed
 * without one, see above). Any other rc is a binary peer's answer (or a
 * local failure): false without a probe. */
bool sl_rpc_handshake_reached_http(const char *address, sl_err_t rc);

/* What a binary client says when sl_rpc_handshake_reached_http. */
#define SL_RPC_PROBE_MS 1000
#define SL_RPC_ADMIN_NOT_CONTROL                                                                   \
    "it answers HTTP: that is an admin endpoint, not the master's control port (use the "          \
    "address given to sluice master --listen)"

#endif

/* The cluster-secret handshake (docs/PROTOCOL.md "Authentication"): a
 * mutual HMAC-SHA256 challenge-response that a server with a cluster secret
 * (the master's control port, a worker's trainer port) runs on every new
 * connection before any other frame, so that only peers holding the
 * cluster's secret may REGISTER, ATTACH, COMMIT or HELLO, and a client
 * knows the server holds it too. The secret never crosses the wire.
 *
 *   server                                client
 *     AUTH_CHALLENGE(version 1, Ns)  ──►
 *                                    ◄──  AUTH_RESPONSE(version 1, Nc, Pc)
 *     AUTH_OK(Ps)                    ──►   (or ERROR "authentication failed: ...", close)
 *
 *   Pc = HMAC-SHA256(secret, "sluice-auth-v1" 0x00 "client" 0x00 Ns Nc)
 *   Ps = HMAC-SHA256(secret, "sluice-auth-v1" 0x00 "server" 0x00 Ns Nc)
 *
 * Ns and Nc are 32 random bytes each (getrandom), fresh for every
 * connection, so a recorded exchange is worth nothing on another one; the
 * role in each MAC keeps the server's proof from being replayed as a
 * client's. Proofs are compared in constant time. It authenticates the
 * peer at connection time only: it does not encrypt or protect the frames
 * that follow (docs/DESIGN.md "Peers").
 *
 * The secret is the first line of a token file, as the admin token
 * (sl_io_read_token); at least SL_RPC_SECRET_MIN_BYTES bytes. */
#ifndef SLUICE_RPC_AUTH_H
#define SLUICE_RPC_AUTH_H

#include <stdint.h>

#include "rpc/frame.h"

#define SL_RPC_AUTH_VERSION 1
#define SL_RPC_AUTH_CONTEXT "sluice-auth-v1"
#define SL_RPC_AUTH_NONCE_BYTES 32
#define SL_RPC_AUTH_PROOF_BYTES 32
#define SL_RPC_SECRET_MIN_BYTES 16
#define SL_RPC_SECRET_MAX_BYTES 1024
/* The environment variable naming the secret file when no option does. */
#define SL_RPC_SECRET_ENV "SLUICE_CLUSTER_SECRET_FILE"

/* Load the cluster secret from file, or when file is NULL from the file
 * named by $SLUICE_CLUSTER_SECRET_FILE (neither: *out = NULL, SL_OK: no
 * secret). Caller owns *out: free with sl_rpc_secret_free. @return SL_ERR_IO
 * (unreadable file), SL_ERR_INVALID (empty, or shorter than
 * SL_RPC_SECRET_MIN_BYTES), SL_ERR_TOO_LARGE; messages name the file, never
 * its content. */
sl_err_t sl_rpc_secret_load(const char *file, char **out, sl_error_t *err);

/* Wipe and free a secret from sl_rpc_secret_load (or any copy made with
 * sl_strdup(NULL, ...), common/mem.h); NULL is fine. */
void sl_rpc_secret_free(char *secret);

/* Server, in steps (a poll loop): draw a fresh nonce into nonce and send
 * AUTH_CHALLENGE on fd. @return the send's error. */
sl_err_t sl_rpc_auth_challenge(int fd, uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES], sl_error_t *err);

/* Server, in steps: f is the client's first frame after the challenge
 * with nonce. When it is an AUTH_RESPONSE whose proof is right, send
 * AUTH_OK with the server's proof and return SL_OK. Otherwise return
 * SL_ERR_PROTOCOL with "authentication failed: ..." in err (no secret
 * material in it) and send nothing: the caller answers ERROR with that
 * message and closes. */
sl_err_t sl_rpc_auth_answer(int fd, const char *secret,
                            const uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES], const sl_rpc_frame_t *f,
                            sl_error_t *err);

/* Server, blocking: challenge, then wait for the answer until deadline_ms
 * (sl_clock_ms time) and check it. On failure nothing more is sent: the
 * caller answers ERROR with err's message and closes. */
sl_err_t sl_rpc_auth_server(int fd, const char *secret, uint64_t deadline_ms,
                            const sl_rpc_limits_t *limits, sl_error_t *err);

/* Client, blocking, right after connecting to a server that has the
 * cluster secret: wait for the challenge, prove we hold the secret, check
 * the server's proof, all before deadline_ms. @return SL_OK; SL_ERR_PROTOCOL
 * when the server refused us ("authentication failed: ..."), did not prove
 * it holds the secret, or sent something else; SL_ERR_TIMEOUT when no
 * challenge came (a server without a cluster secret never sends one);
 * another code (SL_ERR_AGAIN: the server is at its connection cap) when the
 * server answered ERROR with it; connection errors as sl_rpc_recv. */
sl_err_t sl_rpc_auth_client(int fd, const char *secret, uint64_t deadline_ms, sl_error_t *err);

/* A server about to bind address: without a cluster secret only a
 * loopback address is allowed (sl_rpc_address_is_loopback), since any
 * process that reaches the port could otherwise register, attach, commit
 * or take batches. what names the option in the message ("master
 * --listen"). @return SL_OK or SL_ERR_INVALID saying so. */
sl_err_t sl_rpc_check_exposure(const char *what, const char *address, bool has_secret,
                               sl_error_t *err);

/* A hint for a client without a secret whose server sent type where a
 * reply was expected: for AUTH_CHALLENGE, "; the server requires the
 * cluster secret (--cluster-secret-file or $SLUICE_CLUSTER_SECRET_FILE)",
 * else "". Static. */
const char *sl_rpc_auth_hint(uint32_t type);

#endif

/* The cluster-secret handshake (auth.h): nonces and HMAC-SHA256 from
 * GnuTLS, proofs compared in constant time. */
#include "rpc/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/err.h"
#include "common/fileio.h"
#include "common/mem.h"
#include "netlib/netlib_gnutls.h"

/* Handshake frames are small and never carry a payload. */
static const sl_rpc_limits_t handshake_limits = {.max_message_bytes = 64u << 10,
                                                 .max_payload_bytes = 0};

sl_err_t sl_rpc_secret_load(const char *file, char **out, sl_error_t *err)
{
    *out = NULL;
    const char *path = file;
    if (!path) {
        path = getenv(SL_RPC_SECRET_ENV);
        if (!path || !*path) return SL_OK;
    }
    char buf[SL_RPC_SECRET_MAX_BYTES + 2];
    sl_err_t rc = sl_io_read_token(path, "cluster secret", buf, sizeof buf, err);
    if (rc != SL_OK) {
        if (!file) sl_error_prefix(err, "$%s: ", SL_RPC_SECRET_ENV);
        return rc;
    }
    size_t n = strlen(buf);
    if (n < SL_RPC_SECRET_MIN_BYTES) {
        explicit_bzero(buf, sizeof buf);
        return sl_error_set(err, SL_ERR_INVALID,
                            "cluster secret file %s: %zu bytes, at least %d are needed (for "
                            "example the output of `head -c 32 /dev/urandom | base64`)",
                            path, n, SL_RPC_SECRET_MIN_BYTES);
    }
    *out = sl_strdup(NULL, buf);
    explicit_bzero(buf, sizeof buf);
    return *out ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "cluster secret: out of memory");
}

void sl_rpc_secret_free(char *secret)
{
    if (!secret) return;
    explicit_bzero(secret, strlen(secret));
    sl_strfree(NULL, secret);
}

/* role "client" or "server": HMAC-SHA256(secret, context 0 role 0 Ns Nc). */
static sl_err_t proof(const char *secret, const char *role,
                      const uint8_t server_nonce[SL_RPC_AUTH_NONCE_BYTES],
                      const uint8_t client_nonce[SL_RPC_AUTH_NONCE_BYTES],
                      uint8_t out[SL_RPC_AUTH_PROOF_BYTES], sl_error_t *err)
{
    uint8_t msg[sizeof SL_RPC_AUTH_CONTEXT + 8 + 2 * SL_RPC_AUTH_NONCE_BYTES];
    size_t n = 0;
    memcpy(msg, SL_RPC_AUTH_CONTEXT, sizeof SL_RPC_AUTH_CONTEXT); /* with its NUL */
    n += sizeof SL_RPC_AUTH_CONTEXT;
    size_t rl = strlen(role) + 1;
    memcpy(msg + n, role, rl);
    n += rl;
    memcpy(msg + n, server_nonce, SL_RPC_AUTH_NONCE_BYTES);
    n += SL_RPC_AUTH_NONCE_BYTES;
    memcpy(msg + n, client_nonce, SL_RPC_AUTH_NONCE_BYTES);
    n += SL_RPC_AUTH_NONCE_BYTES;
    const sl_netlib_gnutls_t *gnutls = sl_netlib_gnutls(err);
    if (gnutls == NULL) return SL_ERR_UNSUPPORTED;
    if (gnutls->hmac_fast(GNUTLS_MAC_SHA256, secret, strlen(secret), msg, n, out) < 0)
        return sl_error_set(err, SL_ERR_IO, "authentication: HMAC-SHA256 failed");
    return SL_OK;
}

static sl_err_t nonce_new(uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES], sl_error_t *err)
{
    /* the kernel's CSPRNG: up to 256 bytes come whole, uninterrupted */
    if (getrandom(nonce, SL_RPC_AUTH_NONCE_BYTES, 0) != SL_RPC_AUTH_NONCE_BYTES)
        return sl_error_set(err, SL_ERR_IO, "authentication: no random bytes for a nonce");
    return SL_OK;
}

sl_err_t sl_rpc_auth_challenge(int fd, uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES], sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(nonce_new(nonce, err));
    Sluice__Dpp__AuthChallenge c = SLUICE__DPP__AUTH_CHALLENGE__INIT;
    c.version = SL_RPC_AUTH_VERSION;
    c.server_nonce.data = nonce;
    c.server_nonce.len = SL_RPC_AUTH_NONCE_BYTES;
    return sl_rpc_send(fd, SL_RPC_AUTH_CHALLENGE, &c.base, NULL, 0, err);
}

sl_err_t sl_rpc_auth_answer(int fd, const char *secret,
                            const uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES], const sl_rpc_frame_t *f,
                            sl_error_t *err)
{
    if (f->type != SL_RPC_AUTH_RESPONSE)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "authentication failed: expected an auth-response frame, got %s (this "
                            "server requires the cluster secret)",
                            sl_rpc_type_name(f->type));
    const Sluice__Dpp__AuthResponse *r = (const Sluice__Dpp__AuthResponse *)f->msg;
    if (r->version != SL_RPC_AUTH_VERSION)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "authentication failed: handshake version %u, this server speaks %u",
                            r->version, SL_RPC_AUTH_VERSION);
    if (r->client_nonce.len != SL_RPC_AUTH_NONCE_BYTES || r->proof.len != SL_RPC_AUTH_PROOF_BYTES)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "authentication failed: a nonce of %zu bytes and a proof of %zu "
                            "(%d each expected)",
                            r->client_nonce.len, r->proof.len, SL_RPC_AUTH_NONCE_BYTES);
    uint8_t want[SL_RPC_AUTH_PROOF_BYTES], mine[SL_RPC_AUTH_PROOF_BYTES];
    SL_FORWARD_IF_ERROR(proof(secret, "client", nonce, r->client_nonce.data, want, err));
    /* proof() loaded GnuTLS */
    bool ok = sl_netlib_gnutls(NULL)->memcmp_constant_time(want, r->proof.data,
                                                           SL_RPC_AUTH_PROOF_BYTES) == 0;
    explicit_bzero(want, sizeof want);
    if (!ok)
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "authentication failed: wrong proof (the peer does not hold this "
                            "cluster's secret)");
    SL_FORWARD_IF_ERROR(proof(secret, "server", nonce, r->client_nonce.data, mine, err));
    Sluice__Dpp__AuthOk ok_msg = SLUICE__DPP__AUTH_OK__INIT;
    ok_msg.proof.data = mine;
    ok_msg.proof.len = sizeof mine;
    return sl_rpc_send(fd, SL_RPC_AUTH_OK, &ok_msg.base, NULL, 0, err);
}

sl_err_t sl_rpc_auth_server(int fd, const char *secret, uint64_t deadline_ms,
                            const sl_rpc_limits_t *limits, sl_error_t *err)
{
    uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES];
    SL_FORWARD_IF_ERROR(sl_rpc_auth_challenge(fd, nonce, err));
    sl_rpc_frame_t f;
    sl_err_t rc =
        sl_rpc_recv_until(fd, deadline_ms, limits ? limits : &handshake_limits, NULL, &f, err);
    if (rc == SL_ERR_TIMEOUT)
        return sl_error_set(err, rc, "authentication failed: no answer to the challenge in time");
    if (rc != SL_OK) return sl_error_prefix(err, "authentication: ");
    rc = sl_rpc_auth_answer(fd, secret, nonce, &f, err);
    sl_rpc_frame_free(&f);
    return rc;
}

/* Receive the next handshake frame; an ERROR is the server refusing us. */
static sl_err_t recv_step(int fd, uint64_t deadline_ms, const char *waiting_for, sl_rpc_type_t want,
                          sl_rpc_frame_t *f, sl_error_t *err)
{
    sl_err_t rc = sl_rpc_recv_until(fd, deadline_ms, &handshake_limits, NULL, f, err);
    if (rc == SL_ERR_TIMEOUT && want == SL_RPC_AUTH_CHALLENGE)
        return sl_error_set(err, rc,
                            "no auth challenge from the server in time: it does not use a cluster "
                            "secret (or is not a sluice server)");
    if (rc != SL_OK) return sl_error_prefix(err, "authentication: waiting for %s: ", waiting_for);
    if (f->type == want) return SL_OK;
    if (f->type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f->msg;
        rc = sl_error_set(err, sl_rpc_error_code(e), "refused: %s",
                          e->message && e->message[0] ? e->message : "no reason given");
    } else {
        rc = sl_error_set(err, SL_ERR_PROTOCOL,
                          "authentication failed: expected %s, got a %s frame (the server does "
                          "not use a cluster secret)",
                          waiting_for, sl_rpc_type_name(f->type));
    }
    sl_rpc_frame_free(f);
    return rc;
}

sl_err_t sl_rpc_auth_client(int fd, const char *secret, uint64_t deadline_ms, sl_error_t *err)
{
    sl_rpc_frame_t f;
    SL_FORWARD_IF_ERROR(
        recv_step(fd, deadline_ms, "an auth challenge", SL_RPC_AUTH_CHALLENGE, &f, err));
    const Sluice__Dpp__AuthChallenge *c = (const Sluice__Dpp__AuthChallenge *)f.msg;
    uint8_t server_nonce[SL_RPC_AUTH_NONCE_BYTES], client_nonce[SL_RPC_AUTH_NONCE_BYTES];
    uint8_t mine[SL_RPC_AUTH_PROOF_BYTES], want[SL_RPC_AUTH_PROOF_BYTES];
    sl_err_t rc = SL_OK;
    if (c->version != SL_RPC_AUTH_VERSION || c->server_nonce.len != SL_RPC_AUTH_NONCE_BYTES)
        rc = sl_error_set(err, SL_ERR_PROTOCOL,
                          "authentication failed: a challenge of version %u with a %zu-byte "
                          "nonce (version %d, %d bytes expected)",
                          c->version, c->server_nonce.len, SL_RPC_AUTH_VERSION,
                          SL_RPC_AUTH_NONCE_BYTES);
    else
        memcpy(server_nonce, c->server_nonce.data, SL_RPC_AUTH_NONCE_BYTES);
    sl_rpc_frame_free(&f);
    if (rc == SL_OK) rc = nonce_new(client_nonce, err);
    if (rc == SL_OK) rc = proof(secret, "client", server_nonce, client_nonce, mine, err);
    if (rc == SL_OK) {
        Sluice__Dpp__AuthResponse r = SLUICE__DPP__AUTH_RESPONSE__INIT;
        r.version = SL_RPC_AUTH_VERSION;
        r.client_nonce.data = client_nonce;
        r.client_nonce.len = sizeof client_nonce;
        r.proof.data = mine;
        r.proof.len = sizeof mine;
        rc = sl_rpc_send(fd, SL_RPC_AUTH_RESPONSE, &r.base, NULL, 0, err);
    }
    if (rc == SL_OK) rc = recv_step(fd, deadline_ms, "auth-ok", SL_RPC_AUTH_OK, &f, err);
    if (rc != SL_OK) return rc;
    const Sluice__Dpp__AuthOk *ok = (const Sluice__Dpp__AuthOk *)f.msg;
    bool good = ok->proof.len == SL_RPC_AUTH_PROOF_BYTES &&
                proof(secret, "server", server_nonce, client_nonce, want, err) == SL_OK &&
                sl_netlib_gnutls(NULL)->memcmp_constant_time(want, ok->proof.data,
                                                             SL_RPC_AUTH_PROOF_BYTES) == 0;
    sl_rpc_frame_free(&f);
    explicit_bzero(want, sizeof want);
    if (!good) {
        rc = sl_error_set(err, SL_ERR_PROTOCOL,
                          "authentication failed: the server did not prove it holds the cluster "
                          "secret");
        sl_rpc_send_error(fd, rc, err->msg);
    }
    return rc;
}

const char *sl_rpc_auth_hint(uint32_t type)
{
    return type == SL_RPC_AUTH_CHALLENGE
               ? " (the server requires the cluster secret: --cluster-secret-file or "
                 "$" SL_RPC_SECRET_ENV ")"
               : "";
}

sl_err_t sl_rpc_check_exposure(const char *what, const char *address, bool has_secret,
                               sl_error_t *err)
{
    if (has_secret || sl_rpc_address_is_loopback(address)) return SL_OK;
    return sl_error_set(err, SL_ERR_INVALID,
                        "%s %s: an address other than loopback needs a cluster secret "
                        "(--cluster-secret-file, or $%s): without one any process that reaches "
                        "the port could register as a worker, commit a job's rows or take its "
                        "batches",
                        what, address, SL_RPC_SECRET_ENV);
}

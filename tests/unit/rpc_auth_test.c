/* The cluster-secret handshake (src/rpc/auth.h) over socket pairs: both
 * sides with the same secret agree, and the proof on the wire is exactly
 * the documented HMAC (docs/PROTOCOL.md "Authentication"); a client with a
 * wrong secret, or none, is refused with "authentication failed"; a client
 * detects a server that does not hold the secret (a wrong proof) and one
 * that never challenges; loading secrets from files and the environment;
 * which listen addresses count as loopback. */
#include <criterion/criterion.h>

#include <gnutls/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "rpc/auth.h"
#include "testutil.h"

#define SECRET "correct horse battery staple"

static void pair(int fds[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
}

static uint64_t in_ms(int ms)
{
    return sl_clock_ms() + (uint64_t)(tu_timeout(ms / 1000.0) * 1000);
}

typedef struct side {
    int fd;
    const char *secret;
    int timeout_ms;
    sl_err_t rc;
    sl_error_t err;
    uint64_t done_ms; /* when the call returned */
} side_t;

static void *server_main(void *arg)
{
    side_t *s = arg;
    s->rc = sl_rpc_auth_server(s->fd, s->secret, in_ms(s->timeout_ms), NULL, &s->err);
    s->done_ms = sl_clock_ms();
    /* as the servers do: a refusal is answered ERROR, then closed */
    if (s->rc != SL_OK) sl_rpc_send_error(s->fd, s->rc, s->err.msg);
    return NULL;
}

/* A server thread with secret on fd, deadline timeout_ms from now. */
static void serve_in_thread(side_t *s, int fd, const char *secret, int timeout_ms, pthread_t *th)
{
    *s = (side_t){.fd = fd, .secret = secret, .timeout_ms = timeout_ms};
    pthread_create(th, NULL, server_main, s);
}

/* Run a server with server_secret against a client with client_secret. */
static void run(const char *server_secret, const char *client_secret, side_t *srv, side_t *cli)
{
    int fds[2];
    pair(fds);
    *cli = (side_t){.fd = fds[1], .secret = client_secret};
    pthread_t th;
    serve_in_thread(srv, fds[0], server_secret, 5000, &th);
    cli->rc = sl_rpc_auth_client(cli->fd, client_secret, in_ms(5000), &cli->err);
    pthread_join(th, NULL);
    close(fds[0]);
    close(fds[1]);
}

Test(rpc_auth, same_secret_agrees)
{
    side_t s, c;
    run(SECRET, SECRET, &s, &c);
    cr_assert_eq(s.rc, SL_OK, "%s", s.err.msg);
    cr_assert_eq(c.rc, SL_OK, "%s", c.err.msg);
}

Test(rpc_auth, wrong_secret_is_refused_without_echoing_it)
{
    side_t s, c;
    run(SECRET, "a different secret of the cluster", &s, &c);
    cr_assert_eq(s.rc, SL_ERR_PROTOCOL);
    cr_assert(strstr(s.err.msg, "authentication failed: wrong proof"), "%s", s.err.msg);
    cr_assert_eq(c.rc, SL_ERR_PROTOCOL, "%s", c.err.msg);
    cr_assert(strstr(c.err.msg, "refused: authentication failed"), "%s", c.err.msg);
    /* no secret material in either message */
    cr_assert_null(strstr(s.err.msg, "horse"));
    cr_assert_null(strstr(c.err.msg, "horse"));
    cr_assert_null(strstr(c.err.msg, "different"));
}

static void *client_main(void *arg)
{
    side_t *c = arg;
    c->rc = sl_rpc_auth_client(c->fd, c->secret, in_ms(c->timeout_ms), &c->err);
    return NULL;
}

/* HMAC-SHA256(secret, "sluice-auth-v1" 0 role 0 Ns Nc), from the layout of
 * docs/PROTOCOL.md, independently of auth.c. */
static void documented_proof(const char *secret, const char *role, const uint8_t *ns,
                             const uint8_t *nc, uint8_t out[32])
{
    uint8_t msg[256];
    size_t n = 0;
    memcpy(msg, "sluice-auth-v1", 14);
    n = 14;
    msg[n++] = 0;
    memcpy(msg + n, role, strlen(role));
    n += strlen(role);
    msg[n++] = 0;
    memcpy(msg + n, ns, 32);
    n += 32;
    memcpy(msg + n, nc, 32);
    n += 32;
    cr_assert_eq(n, 14 + 1 + strlen(role) + 1 + 64);
    cr_assert_eq(gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, strlen(secret), msg, n, out), 0);
}

/* A hand-made server: challenge, read the answer, check the client's proof
 * against the documented bytes, then answer AUTH_OK with good_proof's or a
 * wrong proof. @return the client's side. */
static side_t hand_server(bool good_proof)
{
    int fds[2];
    pair(fds);
    side_t c = {.fd = fds[1], .secret = SECRET, .timeout_ms = 5000};
    pthread_t th;
    pthread_create(&th, NULL, client_main, &c);
    uint8_t ns[SL_RPC_AUTH_NONCE_BYTES];
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_auth_challenge(fds[0], ns, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv_until(fds[0], in_ms(5000), NULL, NULL, &f, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(f.type, SL_RPC_AUTH_RESPONSE, "%s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__AuthResponse *r = (const Sluice__Dpp__AuthResponse *)f.msg;
    cr_assert_eq(r->version, 1);
    cr_assert_eq(r->client_nonce.len, 32);
    cr_assert_eq(r->proof.len, 32);
    uint8_t want[32], mine[32];
    documented_proof(SECRET, "client", ns, r->client_nonce.data, want);
    cr_assert_arr_eq(r->proof.data, want, 32, "the client's proof is not the documented HMAC");
    documented_proof(SECRET, "server", ns, r->client_nonce.data, mine);
    /* the two roles never give the same MAC */
    cr_assert_neq(memcmp(mine, want, 32), 0);
    if (!good_proof) mine[7] ^= 0x40;
    sl_rpc_frame_free(&f);
    Sluice__Dpp__AuthOk ok = SLUICE__DPP__AUTH_OK__INIT;
    ok.proof.data = mine;
    ok.proof.len = 32;
    cr_assert_eq(sl_rpc_send(fds[0], SL_RPC_AUTH_OK, &ok.base, NULL, 0, &err), SL_OK);
    pthread_join(th, NULL);
    if (!good_proof) {
        /* the client says why it hangs up */
        cr_assert_eq(sl_rpc_recv_until(fds[0], in_ms(5000), NULL, NULL, &f, &err), SL_OK, "%s",
                     err.msg);
        cr_assert_eq(f.type, SL_RPC_ERROR);
        sl_rpc_frame_free(&f);
    }
    close(fds[0]);
    close(fds[1]);
    return c;
}

Test(rpc_auth, proofs_are_the_documented_hmacs)
{
    side_t c = hand_server(true);
    cr_assert_eq(c.rc, SL_OK, "%s", c.err.msg);
}

Test(rpc_auth, a_server_without_the_secret_is_detected)
{
    side_t c = hand_server(false);
    cr_assert_eq(c.rc, SL_ERR_PROTOCOL);
    cr_assert(strstr(c.err.msg, "the server did not prove it holds the cluster secret"), "%s",
              c.err.msg);
}

Test(rpc_auth, a_server_that_never_challenges)
{
    int fds[2];
    pair(fds);
    sl_error_t err = {0};
    uint64_t t0 = sl_clock_ms();
    sl_err_t rc = sl_rpc_auth_client(fds[1], SECRET, sl_clock_ms() + 300, &err);
    cr_assert_eq(rc, SL_ERR_TIMEOUT, "%s", err.msg);
    cr_assert_geq(sl_clock_ms() - t0, 300);
    cr_assert(strstr(err.msg, "does not use a cluster secret"), "%s", err.msg);
    /* a server that answers something else (a worker waiting for HELLO
     * would not, but a confused peer might) */
    Sluice__Dpp__Welcome w = SLUICE__DPP__WELCOME__INIT;
    cr_assert_eq(sl_rpc_send(fds[0], SL_RPC_WELCOME, &w.base, NULL, 0, &err), SL_OK);
    rc = sl_rpc_auth_client(fds[1], SECRET, in_ms(5000), &err);
    cr_assert_eq(rc, SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "got a welcome frame"), "%s", err.msg);
    close(fds[0]);
    close(fds[1]);
}

Test(rpc_auth, a_client_without_a_secret_is_refused)
{
    int fds[2];
    pair(fds);
    side_t s;
    pthread_t th;
    serve_in_thread(&s, fds[0], SECRET, 5000, &th);
    /* an old client: HELLO straight away; it reads the challenge */
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fds[1], SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK);
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv_until(fds[1], in_ms(5000), NULL, NULL, &f, &err), SL_OK);
    cr_assert_eq(f.type, SL_RPC_AUTH_CHALLENGE);
    cr_assert_str_eq(sl_rpc_auth_hint(f.type),
                     " (the server requires the cluster secret: --cluster-secret-file or "
                     "$SLUICE_CLUSTER_SECRET_FILE)");
    cr_assert_str_eq(sl_rpc_auth_hint(SL_RPC_WELCOME), "");
    sl_rpc_frame_free(&f);
    pthread_join(th, NULL);
    cr_assert_eq(s.rc, SL_ERR_PROTOCOL);
    cr_assert_str_eq(s.err.msg, "authentication failed: expected an auth-response frame, got "
                                "hello (this server requires the cluster secret)");
    cr_assert_eq(sl_rpc_recv_until(fds[1], in_ms(5000), NULL, NULL, &f, &err), SL_OK);
    cr_assert_eq(f.type, SL_RPC_ERROR);
    sl_rpc_frame_free(&f);
    close(fds[0]);
    close(fds[1]);
}

Test(rpc_auth, a_silent_or_trickling_client_meets_the_deadline)
{
    int fds[2];
    pair(fds);
    side_t s;
    pthread_t th;
    uint64_t t0 = sl_clock_ms();
    serve_in_thread(&s, fds[0], SECRET, 600, &th);
    /* one byte of a frame header every 100 ms: each read succeeds, the
     * deadline still holds (the server gives up at 600 ms, well before) */
    for (int i = 0; i < 12; i++) {
        if (write(fds[1], "S", 1) != 1) break;
        usleep(100 * 1000);
    }
    pthread_join(th, NULL);
    uint64_t took = s.done_ms - t0;
    cr_assert_eq(s.rc, SL_ERR_TIMEOUT, "%s", s.err.msg);
    cr_assert(strstr(s.err.msg, "authentication failed: no answer to the challenge in time"), "%s",
              s.err.msg);
    cr_assert_geq(took, 600);
    cr_assert_lt(took, 600 + 1000 * tu_timeout(1), "the handshake lasted %lu ms",
                 (unsigned long)took);
    close(fds[0]);
    close(fds[1]);
}

static char *write_secret(const char *text)
{
    char *dir = tu_mkdtemp("auth");
    char *p = tu_path(dir, "secret");
    tu_write_file(p, text, strlen(text));
    free(dir);
    return p;
}

Test(rpc_auth, secrets_from_files_and_the_environment)
{
    sl_error_t err = {0};
    char *s = NULL;
    char *good = write_secret("0123456789abcdef0123\n");
    cr_assert_eq(sl_rpc_secret_load(good, &s, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(s, "0123456789abcdef0123");
    sl_rpc_secret_free(s);

    char *shorty = write_secret("tooshort\n");
    cr_assert_eq(sl_rpc_secret_load(shorty, &s, &err), SL_ERR_INVALID);
    cr_assert_null(s);
    cr_assert(strstr(err.msg, shorty) && strstr(err.msg, "8 bytes, at least 16"), "%s", err.msg);
    cr_assert_null(strstr(err.msg, "tooshort\n"));

    char *empty = write_secret("\n\n");
    cr_assert_eq(sl_rpc_secret_load(empty, &s, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "is empty"), "%s", err.msg);

    cr_assert_eq(sl_rpc_secret_load("/nonexistent/secret", &s, &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "/nonexistent/secret") && strstr(err.msg, "No such file"), "%s",
              err.msg);

    /* no option: the file named by the environment, or none at all */
    unsetenv(SL_RPC_SECRET_ENV);
    cr_assert_eq(sl_rpc_secret_load(NULL, &s, &err), SL_OK);
    cr_assert_null(s);
    setenv(SL_RPC_SECRET_ENV, good, 1);
    cr_assert_eq(sl_rpc_secret_load(NULL, &s, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq(s, "0123456789abcdef0123");
    sl_rpc_secret_free(s);
    setenv(SL_RPC_SECRET_ENV, "/nonexistent/env-secret", 1);
    cr_assert_eq(sl_rpc_secret_load(NULL, &s, &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "$SLUICE_CLUSTER_SECRET_FILE: ") == err.msg, "%s", err.msg);
    unsetenv(SL_RPC_SECRET_ENV);
    sl_rpc_secret_free(NULL);
    for (char **p = (char *[]){good, shorty, empty, NULL}; *p; p++) {
        unlink(*p);
        free(*p);
    }
}

Test(rpc_auth, loopback_addresses)
{
    cr_assert(sl_rpc_address_is_loopback("127.0.0.1:7070"));
    cr_assert(sl_rpc_address_is_loopback("127.3.4.5:0"));
    cr_assert(sl_rpc_address_is_loopback("[::1]:7070"));
    cr_assert(sl_rpc_address_is_loopback("localhost:7070"));
    cr_assert_not(sl_rpc_address_is_loopback("0.0.0.0:7070"));
    cr_assert_not(sl_rpc_address_is_loopback("[::]:7070"));
    cr_assert_not(sl_rpc_address_is_loopback(":7070"));
    cr_assert_not(sl_rpc_address_is_loopback("10.1.2.3:7070"));
    cr_assert_not(sl_rpc_address_is_loopback("no-port"));
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_check_exposure("worker --listen", "0.0.0.0:1", false, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "worker --listen 0.0.0.0:1: an address other than loopback needs "
                              "a cluster secret"),
              "%s", err.msg);
    cr_assert_eq(sl_rpc_check_exposure("worker --listen", "0.0.0.0:1", true, &err), SL_OK);
    cr_assert_eq(sl_rpc_check_exposure("worker --listen", "127.0.0.1:1", false, &err), SL_OK);
}

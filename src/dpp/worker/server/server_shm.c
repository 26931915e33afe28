/* The server's side channel for the shared-memory hand-over (server.h,
 * docs/PROTOCOL.md "Shared-memory hand-over"): one thread accepts on the
 * abstract Unix socket and serves each request in turn, within a short
 * deadline, handing the heap's memfd to a peer of this uid that presents
 * the nonce of a connection whose WELCOME offered it. A slow or hostile
 * peer on the host costs the others at most that deadline each; they then
 * stay on socket payloads, which always work. */
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/log_events.h"
#include "dpp/worker/server/server_internal.h"

/* How long one side-channel request may take: a local peer answers at
 * once. */
#define SHM_REQUEST_MS 1000

/* sl_rpc_shm_check_fn: a waiting connection that was given this nonce
 * (each nonce is good once). */
static bool check_nonce(void *ctx, const uint8_t nonce[SL_RPC_SHM_NONCE_BYTES])
{
    struct sl_worker_server *s = ctx;
    bool ok = false;
    sl_mutex_lock(&s->mu);
    for (client_t *c = s->clients; c && !ok; c = c->next) {
        if (!c->shm_asked || c->shm_granted || c->closed) continue;
        if (memcmp(c->shm_nonce, nonce, SL_RPC_SHM_NONCE_BYTES) == 0) ok = c->shm_granted = true;
    }
    sl_mutex_unlock(&s->mu);
    return ok;
}

void *dpp_server_shm_main(void *arg)
{
    struct sl_worker_server *s = arg;
    for (;;) {
        sl_mutex_lock(&s->mu);
        bool stop = s->stopping;
        if (stop) s->st.cpu_ns += sl_clock_thread_cpu_ns();
        sl_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd p = {.fd = s->shm_lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept4(s->shm_lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        sl_error_t err = {0};
        sl_err_t rc = sl_rpc_shm_serve(fd, sl_clock_ms() + SHM_REQUEST_MS, check_nonce, s,
                                       sl_shm_heap_fd(s->o.shm), sl_shm_heap_size(s->o.shm), &err);
        close(fd);
        if (rc != SL_OK) {
            sl_mutex_lock(&s->mu);
            s->st.shm_refused++;
            sl_mutex_unlock(&s->mu);
            sl_log(SL_LOG_WARN, SL_EV(WORKER_SHM_REFUSED), "worker %s: shared memory @%s: %s",
                   s->worker_id, s->shm_name, err.msg);
        }
    }
    return NULL;
}

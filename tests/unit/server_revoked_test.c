/* The worker's server and leases the master takes back (server.h
 * lease_live): once the producer has finished, the batches of a revoked
 * lease are dropped from the ready queue without any client connected to
 * pop them (their budget released, their lease retired unacknowledged), so
 * the server is done when the rest is acknowledged; the batches of live
 * leases stay, in order, and go out as before. A worker whose lease was
 * taken back while its master restarted, after its clients had finished,
 * used to wait for those batches forever. And a producer waiting for room
 * behind a full queue of a revoked lease's batches (its job failed, its
 * trainers gone) gets it: they are dropped, not waited on forever. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "dpp/worker/server/server.h"
#include "server_peer.h"

typedef struct lease {
    atomic_bool revoked;
    atomic_uint retired, acked;
} lease_t;

static bool live(void *ctx, void *lease)
{
    (void)ctx;
    return !atomic_load(&((lease_t *)lease)->revoked);
}

static void retire(void *ctx, void *lease, bool acked)
{
    (void)ctx;
    lease_t *l = lease;
    atomic_fetch_add(&l->retired, 1);
    if (acked) atomic_fetch_add(&l->acked, 1);
}

/* A batch of lease l whose frame's first byte is tag, accounted and
 * pinned in budget as the worker does. */
static void push(sl_worker_server_t *s, sl_worker_budget_t *budget, lease_t *l, uint8_t tag)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_budget_acquire(budget, 100, 0), SL_OK);
    sl_worker_budget_pin(budget, 100);
    uint8_t *frame = sl_alloc(NULL, 100);
    memset(frame, tag, 100);
    sl_worker_server_item_t it = {.frame = frame,
                                  .len = 100,
                                  .num_samples = 1,
                                  .accounted = 100,
                                  .lease = {.handle = l, .split = tag, .generation = 1}};
    cr_assert_eq(sl_worker_server_push(s, &it, &err), SL_OK, "%s", err.msg);
}

/* HELLO, REQUEST n; then the next BATCH's first byte and delivery id. */
static void hello(int fd, uint32_t credits)
{
    sl_error_t err = {0};
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.world_size = 1;
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME, "got %s", sl_rpc_type_name(f.type));
    sl_rpc_frame_free(&f);
    sp_request(fd, credits, false);
}

static uint64_t batch(int fd, uint8_t *first)
{
    sl_rpc_frame_t f = {0};
    uint64_t id = sp_recv_batch(fd, &f)->delivery_id;
    *first = f.payload_len ? ((const uint8_t *)f.payload)[0] : 0;
    sl_rpc_frame_free(&f);
    return id;
}

Test(server_revoked, a_revoked_leases_batches_go_without_a_client_to_pop_them)
{
    lease_t gone = {0}, kept = {0};
    sl_worker_budget_t *budget = sl_worker_budget_new(NULL, 1 << 20);
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0",
                                 .job_id = "j",
                                 .budget = budget,
                                 .lease_live = live,
                                 .lease_retire = retire};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    push(s, budget, &gone, 1);
    push(s, budget, &kept, 2);
    push(s, budget, &gone, 3);
    push(s, budget, &kept, 4);
    sl_worker_server_finish(s);
    cr_assert_not(sl_worker_server_wait_done(s, 100), "four batches held, none acknowledged");

    /* the master takes one lease back; no client is connected */
    atomic_store(&gone.revoked, true);
    cr_assert_not(sl_worker_server_wait_done(s, 200), "the live lease's batches are still held");
    sl_worker_server_stats_t st;
    sl_worker_server_stats(s, &st);
    cr_assert_eq(st.dropped, 2, "dropped %llu", (unsigned long long)st.dropped);
    cr_assert_eq(st.ready, 2);
    cr_assert_eq(atomic_load(&gone.retired), 2);
    cr_assert_eq(atomic_load(&gone.acked), 0);
    cr_assert_eq(sl_worker_budget_used(budget), 200, "the dropped batches' bytes are released");

    /* the live ones go out in their order, and then the server is done */
    int fd = sp_connect(sl_worker_server_port(s));
    hello(fd, 4);
    uint8_t first;
    uint64_t a = batch(fd, &first);
    cr_assert_eq(first, 2);
    uint64_t b = batch(fd, &first);
    cr_assert_eq(first, 4);
    sp_ack(fd, a);
    sp_ack(fd, b);
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    cr_assert_eq(atomic_load(&kept.acked), 2);
    cr_assert_eq(sl_worker_budget_used(budget), 0);
    close(fd);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
    sl_worker_budget_destroy(budget);
}

typedef struct waiter {
    sl_worker_server_t *s;
    atomic_bool returned;
    sl_err_t rc;
} waiter_t;

static void *wait_room_main(void *arg)
{
    waiter_t *wt = arg;
    wt->rc = sl_worker_server_wait_room(wt->s, 0);
    atomic_store(&wt->returned, true);
    return NULL;
}

Test(server_revoked, a_producer_waiting_behind_a_revoked_leases_batches_gets_room, .timeout = 30)
{
    lease_t gone = {0}, kept = {0};
    sl_worker_budget_t *budget = sl_worker_budget_new(NULL, 1 << 20);
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0",
                                 .job_id = "j",
                                 .budget = budget,
                                 .max_queued = 3,
                                 .lease_live = live,
                                 .lease_retire = retire};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    push(s, budget, &gone, 1);
    push(s, budget, &kept, 2);
    push(s, budget, &gone, 3);
    /* full (3 of 3), no client: the master takes one lease back */
    atomic_store(&gone.revoked, true);
    cr_assert_eq(sl_worker_server_wait_room(s, 0), SL_OK); /* returned: room came from the drop */
    sl_worker_server_stats_t st;
    sl_worker_server_stats(s, &st);
    cr_assert_eq(st.dropped, 2, "dropped %llu", (unsigned long long)st.dropped);
    cr_assert_eq(st.ready, 1, "the live lease's batch stays");
    cr_assert_eq(atomic_load(&gone.retired), 2);
    cr_assert_eq(atomic_load(&gone.acked), 0);
    cr_assert_eq(sl_worker_budget_used(budget), 100);
    /* a queue full of live batches still makes the producer wait, until
     * the server stops */
    push(s, budget, &kept, 4);
    push(s, budget, &kept, 5);
    waiter_t wt = {.s = s};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, wait_room_main, &wt), 0);
    usleep(300 * 1000);
    cr_assert_not(atomic_load(&wt.returned), "room with three live batches queued");
    sl_worker_server_stop(s);
    pthread_join(th, NULL);
    cr_assert_eq(wt.rc, SL_ERR_CLOSED);
    sl_worker_server_destroy(s);
    sl_worker_budget_destroy(budget);
}

/* The worker's server in a shared pass (server.h lease_members): a batch
 * of a lease with a member lease of job "b" goes to the clients of the
 * worker's own job and, as a copy with b's job id and generation in
 * BatchInfo, to the clients whose HELLO names "b" (and only to them); the
 * frame's bytes are accounted once in the memory budget and released with
 * the last copy; each copy is retired through its own lease; a client of a
 * job this worker has no pass of gets nothing (and uses up no slot); a
 * client of a worker without shared passes naming another job is refused. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dpp/worker/server/server.h"
#include "common/mem.h"
#include "rpc/frame.h"
#include "server_peer.h"
#include "testutil.h"

TestSuite(server_share);

typedef struct hooks {
    atomic_uint retired_primary, retired_member, acked_primary, acked_member;
    bool member_on;
} hooks_t;

static int primary_lease, member_lease;

static bool live(void *ctx, void *lease)
{
    (void)ctx;
    (void)lease;
    return true;
}

static void retire(void *ctx, void *lease, bool acked)
{
    hooks_t *h = ctx;
    if (lease == &primary_lease) {
        atomic_fetch_add(&h->retired_primary, 1);
        if (acked) atomic_fetch_add(&h->acked_primary, 1);
    } else {
        atomic_fetch_add(&h->retired_member, 1);
        if (acked) atomic_fetch_add(&h->acked_member, 1);
    }
}

static uint32_t members(void *ctx, void *lease, uint64_t bytes, sl_worker_lease_member_t *out,
                        uint32_t cap)
{
    hooks_t *h = ctx;
    cr_assert_gt(bytes, 0);
    if (lease != &primary_lease || !h->member_on || cap == 0) return 0;
    out[0] = (sl_worker_lease_member_t){&member_lease, "b", 77};
    return 1;
}

/* HELLO naming job (NULL: none); the WELCOME's job id, or the ERROR's
 * message into why. @return the frame type received. */
static sl_rpc_type_t hello(int fd, const char *job, char *got, size_t cap)
{
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.world_size = 1;
    h.job_id = (char *)(job ? job : "");
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    sl_rpc_type_t t = f.type;
    if (t == SL_RPC_WELCOME)
        snprintf(got, cap, "%s", ((const Sluice__Dpp__Welcome *)f.msg)->job_id);
    else if (t == SL_RPC_ERROR)
        snprintf(got, cap, "%s", ((const Sluice__Dpp__Error *)f.msg)->message);
    sl_rpc_frame_free(&f);
    return t;
}

/* The next BATCH: its job, generation, payload (first byte) and delivery. */
static uint64_t batch(int fd, char *job, uint64_t *gen, uint8_t *first)
{
    sl_rpc_frame_t f = {0};
    const Sluice__Dpp__BatchInfo *bi = sp_recv_batch(fd, &f);
    snprintf(job, 64, "%s", bi->job_id);
    *gen = bi->generation;
    *first = f.payload_len ? ((const uint8_t *)f.payload)[0] : 0;
    uint64_t id = bi->delivery_id;
    sl_rpc_frame_free(&f);
    return id;
}

static void wait_for(atomic_uint *v, unsigned want, const char *what)
{
    double deadline = tu_timeout(5);
    for (double t = 0; atomic_load(v) != want; t += 0.002) {
        cr_assert(t < deadline, "%s: %u, want %u", what, atomic_load(v), want);
        usleep(2000);
    }
}

/* A server of job "a" with the hooks above over h and a 1 MiB budget. */
static sl_worker_server_t *start_shared(hooks_t *h, sl_worker_budget_t **budget)
{
    *budget = sl_worker_budget_new(NULL, 1 << 20);
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0",
                                 .job_id = "a",
                                 .budget = *budget,
                                 .lease_live = live,
                                 .lease_retire = retire,
                                 .lease_members = members,
                                 .lease_ctx = h};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    return s;
}

Test(server_share, a_batch_goes_to_each_job_of_the_pass_once)
{
    hooks_t h = {.member_on = true};
    sl_worker_budget_t *budget;
    sl_worker_server_t *s = start_shared(&h, &budget);
    sl_error_t err = {0};
    uint16_t port = sl_worker_server_port(s);

    /* a client of a job this worker has no pass of: welcomed, gets nothing */
    char got[256];
    int fz = sp_connect(port);
    cr_assert_eq(hello(fz, "zz", got, sizeof got), SL_RPC_WELCOME);
    cr_assert_str_eq(got, "zz");
    sp_request(fz, 4, false);

    int fa = sp_connect(port), fb = sp_connect(port);
    cr_assert_eq(hello(fa, NULL, got, sizeof got), SL_RPC_WELCOME);
    cr_assert_str_eq(got, "a");
    cr_assert_eq(hello(fb, "b", got, sizeof got), SL_RPC_WELCOME);
    cr_assert_str_eq(got, "b");

    /* one batch of 1000 bytes, accounted and pinned as the worker does */
    cr_assert_eq(sl_worker_budget_acquire(budget, 1000, 0), SL_OK);
    sl_worker_budget_pin(budget, 1000);
    uint8_t *frame = sl_alloc(NULL, 1000);
    memset(frame, 0xab, 1000);
    sl_worker_server_item_t it = {
        .frame = frame,
        .len = 1000,
        .num_samples = 10,
        .accounted = 1000,
        .lease = {
            .handle = &primary_lease, .split = 3, .generation = 11, .from_row = 0, .to_row = 10}};
    cr_assert_eq(sl_worker_server_push(s, &it, &err), SL_OK, "%s", err.msg);
    sp_request(fa, 4, false);
    sp_request(fb, 4, false);
    char job[64];
    uint64_t gen;
    uint8_t first;
    uint64_t ida = batch(fa, job, &gen, &first);
    cr_assert_str_eq(job, "a");
    cr_assert_eq(gen, 11);
    cr_assert_eq(first, 0xab);
    uint64_t idb = batch(fb, job, &gen, &first);
    cr_assert_str_eq(job, "b");
    cr_assert_eq(gen, 77);
    cr_assert_eq(first, 0xab);
    cr_assert_neq(ida, idb);
    sl_worker_server_stats_t st;
    sl_worker_server_stats(s, &st);
    cr_assert_eq(st.shared_batches, 1);
    cr_assert_eq(st.shared_bytes, 1000);

    /* the frame is held (and accounted, once) until both are acknowledged */
    sp_ack(fa, ida);
    wait_for(&h.acked_primary, 1, "primary acked");
    cr_assert_eq(sl_worker_budget_used(budget), 1000);
    cr_assert_eq(atomic_load(&h.retired_member), 0);
    sp_ack(fb, idb);
    wait_for(&h.acked_member, 1, "member acked");
    cr_assert_eq(sl_worker_budget_used(budget), 0);
    cr_assert_eq(sl_worker_budget_pinned(budget), 0);

    /* without members (the job detached): no copy */
    h.member_on = false;
    cr_assert_eq(sl_worker_budget_acquire(budget, 500, 0), SL_OK);
    sl_worker_budget_pin(budget, 500);
    it.frame = sl_alloc(NULL, 500);
    memset(it.frame, 0xcd, 500);
    it.len = 500;
    it.accounted = 500;
    cr_assert_eq(sl_worker_server_push(s, &it, &err), SL_OK, "%s", err.msg);
    ida = batch(fa, job, &gen, &first);
    cr_assert_eq(first, 0xcd);
    sp_ack(fa, ida);
    wait_for(&h.acked_primary, 2, "second primary acked");
    cr_assert_eq(sl_worker_budget_used(budget), 0);
    sl_worker_server_stats(s, &st);
    cr_assert_eq(st.shared_batches, 1);
    cr_assert_eq(st.batches_acked, 3);
    /* and the client of job zz got nothing at all */
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_set_recv_timeout(fz, 200, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_recv(fz, NULL, NULL, &f, &err), SL_ERR_TIMEOUT, "%s",
                 sl_rpc_type_name(f.type));
    close(fz);
    close(fa);
    close(fb);
    sl_worker_server_destroy(s);
    cr_assert_eq(atomic_load(&h.retired_primary), 2);
    cr_assert_eq(atomic_load(&h.retired_member), 1);
    sl_worker_budget_destroy(budget);
}

Test(server_share, a_copy_not_acknowledged_is_freed_with_the_server)
{
    hooks_t h = {.member_on = true};
    sl_worker_budget_t *budget;
    sl_worker_server_t *s = start_shared(&h, &budget);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_budget_acquire(budget, 100, 0), SL_OK);
    sl_worker_budget_pin(budget, 100);
    sl_worker_server_item_t it = {.frame = sl_alloc(NULL, 100),
                                  .len = 100,
                                  .accounted = 100,
                                  .lease = {.handle = &primary_lease, .generation = 1}};
    memset(it.frame, 0, 100);
    cr_assert_eq(sl_worker_server_push(s, &it, &err), SL_OK, "%s", err.msg);
    /* nobody takes either: both are retired, unacknowledged, at destroy,
     * and the frame's bytes go back once */
    sl_worker_server_destroy(s);
    cr_assert_eq(atomic_load(&h.retired_primary), 1);
    cr_assert_eq(atomic_load(&h.retired_member), 1);
    cr_assert_eq(atomic_load(&h.acked_primary) + atomic_load(&h.acked_member), 0);
    cr_assert_eq(sl_worker_budget_used(budget), 0);
    sl_worker_budget_destroy(budget);
}

Test(server_share, a_worker_without_shared_passes_refuses_another_job)
{
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0", .job_id = "a"};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    int fd = sp_connect(sl_worker_server_port(s));
    char got[256];
    cr_assert_eq(hello(fd, "b", got, sizeof got), SL_RPC_ERROR);
    cr_assert(strstr(got, "serves job 'a', not 'b'") != NULL, "%s", got);
    close(fd);
    sl_worker_server_destroy(s);
}

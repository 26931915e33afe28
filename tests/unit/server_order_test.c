/* The worker's server and the deterministic order: a batch whose lease
 * origin has order_g_plus_one set goes, like a static-sharding batch, only
 * to the client of its rank (rank_plus_one), and BATCH's BatchInfo carries
 * order_g_plus_one; a batch of no order carries 0 (docs/PROTOCOL.md, "The
 * deterministic order"). */
#include <criterion/criterion.h>

#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "dpp/worker/server.h"
#include "server_peer.h"

static int lease; /* a handle only: no lease hooks */

static void push(sl_worker_server_t *s, uint32_t rank_plus_one, uint64_t g_plus_one, uint8_t tag)
{
    sl_error_t err = {0};
    uint8_t *frame = sl_alloc(NULL, 64);
    memset(frame, tag, 64);
    sl_worker_server_item_t it = {.frame = frame,
                                  .len = 64,
                                  .num_samples = 1,
                                  .lease = {.handle = &lease,
                                            .split = 3,
                                            .generation = 1,
                                            .from_row = tag,
                                            .to_row = tag + 1u,
                                            .rank_plus_one = rank_plus_one,
                                            .order_g_plus_one = g_plus_one}};
    cr_assert_eq(sl_worker_server_push(s, &it, &err), SL_OK, "%s", err.msg);
}

static void hello(int fd, uint32_t rank, uint32_t world, uint32_t credits)
{
    sl_error_t err = {0};
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.rank = rank;
    h.world_size = world;
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME, "got %s", sl_rpc_type_name(f.type));
    sl_rpc_frame_free(&f);
    sp_request(fd, credits, false);
}

/* The next BATCH: its first byte, g + 1 and rank + 1; acknowledged. */
static void batch(int fd, uint8_t tag, uint64_t g_plus_one, uint32_t rank_plus_one)
{
    sl_rpc_frame_t f = {0};
    const Sluice__Dpp__BatchInfo *bi = sp_recv_batch(fd, &f);
    cr_assert_eq(((const uint8_t *)f.payload)[0], tag);
    cr_assert_eq(bi->order_g_plus_one, g_plus_one);
    cr_assert_eq(bi->rank_plus_one, rank_plus_one);
    cr_assert_eq(bi->from_row, tag);
    sp_ack(fd, bi->delivery_id);
    sl_rpc_frame_free(&f);
}

Test(server_order, a_batch_goes_to_its_ranks_client_with_its_g)
{
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0", .job_id = "j"};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    /* g 7, 8, 9, 10 of 2 ranks: 7, 9 to rank 1 and 8, 10 to rank 0; one of no order */
    push(s, 2, 8, 1);
    push(s, 1, 9, 2);
    push(s, 2, 10, 3);
    push(s, 1, 11, 4);
    push(s, 0, 0, 5);
    sl_worker_server_finish(s);
    int r1 = sp_connect(sl_worker_server_port(s));
    hello(r1, 1, 2, 2);
    batch(r1, 1, 8, 2);
    batch(r1, 3, 10, 2);
    int r0 = sp_connect(sl_worker_server_port(s));
    hello(r0, 0, 2, 3);
    batch(r0, 2, 9, 1);
    batch(r0, 4, 11, 1);
    batch(r0, 5, 0, 0);
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    close(r0);
    close(r1);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
}

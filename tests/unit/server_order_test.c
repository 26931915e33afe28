/* The worker's server and the deterministic order: a batch whose lease
 * origin has order_g_plus_one set goes, like a static-sharding batch, only
 * to the client of its rank (rank_plus_one), and BATCH's BatchInfo carries
 * order_g_plus_one; a batch of no order carries 0 (docs/PROTOCOL.md, "The
 * deterministic order"). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/mem.h"
#include "dpp/worker/server/server.h"
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

/* REQUEST moving the g-window to (epoch, limit), with no credit. */
static void window(int fd, uint32_t epoch, uint64_t limit)
{
    Sluice__Dpp__Request r = SLUICE__DPP__REQUEST__INIT;
    r.order_epoch = epoch;
    r.order_g_limit = limit;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_REQUEST, &r.base, NULL, 0, &err), SL_OK, "%s", err.msg);
}

/* Nothing arrives on fd within ms. */
static void quiet(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, ms), 0, "a frame arrived past the window");
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
    /* one REQUEST: credits and the window (every ordered batch of epoch 0
     * these tests push) together, as a client sends them */
    Sluice__Dpp__Request r = SLUICE__DPP__REQUEST__INIT;
    r.credits = credits;
    r.order_g_limit = 1000;
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_REQUEST, &r.base, NULL, 0, &err), SL_OK, "%s", err.msg);
}

/* The next BATCH: its first byte, first row, g + 1 and rank + 1; acknowledged. */
static void batch(int fd, uint8_t tag, uint64_t from_row, uint64_t g_plus_one,
                  uint32_t rank_plus_one)
{
    sl_rpc_frame_t f = {0};
    const Sluice__Dpp__BatchInfo *bi = sp_recv_batch(fd, &f);
    cr_assert_eq(((const uint8_t *)f.payload)[0], tag);
    cr_assert_eq(bi->order_g_plus_one, g_plus_one);
    cr_assert_eq(bi->rank_plus_one, rank_plus_one);
    cr_assert_eq(bi->from_row, from_row);
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
    hello(r1, 1, 2, 0); /* ordered batches go on the window: no credit needed */
    batch(r1, 1, 1, 8, 2);
    batch(r1, 3, 3, 10, 2);
    int r0 = sp_connect(sl_worker_server_port(s));
    hello(r0, 0, 2, 1); /* one credit: the batch of no order */
    batch(r0, 2, 2, 9, 1);
    batch(r0, 4, 4, 11, 1);
    batch(r0, 5, 5, 0, 0);
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    close(r0);
    close(r1);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
}

/* A batch of lease l, rows [from, to), tagged in its frame's first byte;
 * accounted and pinned in budget as the worker does. */
static void push_held(sl_worker_server_t *s, sl_worker_budget_t *budget, void *l, uint64_t from,
                      uint64_t to, uint8_t tag)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_budget_acquire(budget, 64, 0), SL_OK);
    sl_worker_budget_pin(budget, 64);
    uint8_t *frame = sl_alloc(NULL, 64);
    memset(frame, tag, 64);
    sl_worker_server_item_t it = {.frame = frame,
                                  .len = 64,
                                  .num_samples = 1,
                                  .accounted = 64,
                                  .lease = {.handle = l,
                                            .split = 3,
                                            .generation = 1,
                                            .from_row = from,
                                            .to_row = to,
                                            .ordered = true}};
    cr_assert_eq(sl_worker_server_push(s, &it, &err), SL_OK, "%s", err.msg);
}

static void cut(sl_worker_server_t *s, void *l, uint64_t from, uint64_t to, bool kept)
{
    sl_error_t err = {0};
    bool keep;
    cr_assert_eq(sl_worker_server_order_cut(s, l, from, to, &keep, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(keep, kept);
}

Test(server_order, held_until_the_base_then_each_rank_in_g_order)
{
    sl_worker_budget_t *budget = sl_worker_budget_new(NULL, 1 << 20);
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0", .job_id = "j", .budget = budget};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    int a, b, c;
    /* split a: rows [0, 40), batch [10, 20) committed earlier; split b after it */
    sl_dpp_row_range_t todo_a[] = {{0, 10}, {20, 40}}, todo_b[] = {{0, 20}};
    cr_assert_eq(sl_worker_server_order_begin(s, &a, 3, todo_a, 2, 2, 0, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_worker_server_order_begin(s, &b, 4, todo_b, 1, 2, 0, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(sl_worker_server_order_begin(s, &c, 5, todo_b, 1, 3, 0, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "for 3 ranks, after leases for 2"), "%s", err.msg);
    cut(s, &a, 0, 10, true);
    cut(s, &a, 10, 20, false);
    cut(s, &a, 20, 30, true);
    cut(s, &a, 30, 40, true);
    cut(s, &b, 0, 20, true);
    push_held(s, budget, &b, 0, 20, 4);
    push_held(s, budget, &a, 30, 40, 3);
    push_held(s, budget, &a, 0, 10, 0);
    push_held(s, budget, &a, 20, 30, 2);
    uint64_t bytes, held, n;
    sl_worker_server_order_held(s, &bytes, &held);
    cr_assert_eq(held, 4);
    cr_assert_eq(bytes, 256);
    sl_worker_server_finish(s);
    cr_assert_not(sl_worker_server_wait_done(s, 100), "held batches are outstanding");
    /* a's base 100: g 100 (rank 0), 102 (rank 0), 103 (rank 1); b waits for its base */
    cr_assert_eq(sl_worker_server_order_base(s, &a, 100, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_server_order_end(s, &a, &n, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(n, 4);
    sl_worker_server_order_held(s, &bytes, &held);
    cr_assert_eq(held, 1);
    int r0 = sp_connect(sl_worker_server_port(s)), r1 = sp_connect(sl_worker_server_port(s));
    hello(r0, 0, 2, 4);
    hello(r1, 1, 2, 4);
    sl_rpc_frame_t f = {0};
    const Sluice__Dpp__BatchInfo *bi = sp_recv_batch(r0, &f);
    cr_assert_eq(bi->order_g_plus_one, 101);
    cr_assert_eq(((const uint8_t *)f.payload)[0], 0);
    sp_ack(r0, bi->delivery_id);
    sl_rpc_frame_free(&f);
    bi = sp_recv_batch(r0, &f);
    cr_assert_eq(bi->order_g_plus_one, 103);
    cr_assert_eq(((const uint8_t *)f.payload)[0], 2);
    sp_ack(r0, bi->delivery_id);
    sl_rpc_frame_free(&f);
    batch(r1, 3, 30, 104, 2);
    /* b's base 104 (a counted 4): g 104, rank 0 */
    cr_assert_eq(sl_worker_server_order_base(s, &b, 104, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_server_order_end(s, &b, &n, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    batch(r0, 4, 0, 105, 1);
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    cr_assert_eq(sl_worker_budget_used(budget), 0);
    close(r0);
    close(r1);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
    sl_worker_budget_destroy(budget);
}

Test(server_order, a_dropped_leases_held_batches_are_freed_and_later_ones_go)
{
    sl_worker_budget_t *budget = sl_worker_budget_new(NULL, 1 << 20);
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0", .job_id = "j", .budget = budget};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    int a, b;
    sl_dpp_row_range_t todo[] = {{0, 20}};
    cr_assert_eq(sl_worker_server_order_begin(s, &a, 3, todo, 1, 1, 1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_server_order_begin(s, &b, 4, todo, 1, 1, 0, &err), SL_OK, "%s", err.msg);
    cut(s, &a, 0, 10, true);
    cut(s, &a, 10, 20, true);
    push_held(s, budget, &a, 10, 20, 1); /* batch 0 of a still encoding: held */
    cut(s, &b, 0, 20, true);
    push_held(s, budget, &b, 0, 20, 2);
    cr_assert_eq(sl_worker_budget_used(budget), 128);
    /* a revoked: its held batch freed; its late batch discarded on push */
    sl_worker_server_order_drop(s, &a);
    push_held(s, budget, &a, 0, 10, 0);
    cr_assert_eq(sl_worker_budget_used(budget), 64);
    uint64_t bytes, held, n;
    sl_worker_server_order_held(s, &bytes, &held);
    cr_assert_eq(held, 1);
    cr_assert_eq(sl_worker_server_order_base(s, &b, 7, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_server_order_end(s, &b, &n, &err), SL_OK, "%s", err.msg);
    sl_worker_server_finish(s);
    int r0 = sp_connect(sl_worker_server_port(s));
    hello(r0, 0, 1, 2);
    batch(r0, 2, 0, 8, 1); /* b's only batch, g 7 */
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    cr_assert_eq(sl_worker_budget_used(budget), 0);
    /* every lease gone: the job resumed with 3 ranks takes this worker;
     * its lease's skip rows (handed out before the resume) cut nothing
     * kept; while it is held another world size is refused */
    int c, d;
    sl_dpp_row_range_t skip[] = {{0, 10}};
    cr_assert_eq(sl_worker_server_order_begin(s, &c, 5, todo, 1, 3, 1, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_worker_server_order_skip(s, &c, skip, 1, &err), SL_OK, "%s", err.msg);
    cut(s, &c, 0, 10, false);
    cut(s, &c, 10, 20, true);
    cr_assert_eq(sl_worker_server_order_begin(s, &d, 6, todo, 1, 1, 0, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "for 1 ranks, after leases for 3"), "%s", err.msg);
    cr_assert_eq(sl_worker_server_order_end(s, &c, &n, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(n, 1, "the skipped batch is not counted");
    sl_worker_server_order_drop(s, &c);
    cr_assert_eq(sl_worker_server_order_skip(s, &d, skip, 1, &err), SL_ERR_NOT_FOUND);
    close(r0);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
    sl_worker_budget_destroy(budget);
}

/* An ordered batch of epoch e with global index g for rank 0 of 1, tagged. */
static void push_g(sl_worker_server_t *s, uint32_t e, uint64_t g, uint8_t tag)
{
    sl_error_t err = {0};
    uint8_t *frame = sl_alloc(NULL, 64);
    memset(frame, tag, 64);
    sl_worker_server_item_t it = {.frame = frame,
                                  .len = 64,
                                  .num_samples = 1,
                                  .origin = {.epoch = e},
                                  .lease = {.handle = &lease,
                                            .split = 3,
                                            .generation = 1,
                                            .from_row = tag,
                                            .to_row = tag + 1u,
                                            .rank_plus_one = 1,
                                            .order_g_plus_one = g + 1}};
    cr_assert_eq(sl_worker_server_push(s, &it, &err), SL_OK, "%s", err.msg);
}

/* The g-window (docs/PROTOCOL.md, "The deterministic order"): an ordered
 * batch goes iff its (epoch, g) is below the connection's window, with no
 * credit at all; credits do not send one; the window never moves back; a
 * batch of the next epoch waits for a window of that epoch. */
Test(server_order, an_ordered_batch_goes_on_the_g_window_not_on_credits)
{
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0", .job_id = "j", .max_credits = 16};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    for (uint8_t g = 0; g < 6; g++)
        push_g(s, 0, g, g);
    push_g(s, 1, 0, 10);
    sl_worker_server_finish(s);
    int r0 = sp_connect(sl_worker_server_port(s));
    sl_rpc_frame_t f = {0};
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.world_size = 1;
    cr_assert_eq(sl_rpc_send(r0, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_recv(r0, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME);
    sl_rpc_frame_free(&f);
    sp_request(r0, 0, false);
    quiet(r0, 200); /* no window yet: nothing, credits or not */
    window(r0, 0, 2);
    batch(r0, 0, 0, 1, 1);
    batch(r0, 1, 1, 2, 1);
    quiet(r0, 200);
    sp_request(r0, 10, false); /* credits only: (0, 0), the window stays at g 2 */
    quiet(r0, 200);
    window(r0, 0, 4);
    batch(r0, 2, 2, 3, 1);
    batch(r0, 3, 3, 4, 1);
    quiet(r0, 200);
    window(r0, 0, 3); /* lower: ignored, nor does it send anything */
    quiet(r0, 100);
    window(r0, 1, 0); /* epoch 0 is over: all of it, but nothing of epoch 1 */
    batch(r0, 4, 4, 5, 1);
    batch(r0, 5, 5, 6, 1);
    quiet(r0, 200);
    window(r0, 1, 1);
    batch(r0, 10, 10, 1, 1);
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    sl_worker_server_stats_t st;
    sl_worker_server_stats(s, &st);
    cr_assert_eq(st.ordered_sent, 7);
    cr_assert_eq(st.batches_sent, 7,
                 "batches_sent %" PRIu64 ", acked %" PRIu64 ", bytes_sent %" PRIu64
                 ", redeliveries %" PRIu64,
                 st.batches_sent, st.batches_acked, st.bytes_sent, st.redeliveries);
    cr_assert_geq(st.ordered_waits, 1);
    close(r0);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
}

/* A rank's queue stays in g order: a split leased again after its count
 * went at cut (det28h) brings g's below those queued already; they go
 * first, not behind a batch past the window. */
Test(server_order, a_lower_g_queued_later_goes_ahead_of_higher_ones)
{
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0", .job_id = "j", .max_credits = 16};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    push_g(s, 0, 10, 10);
    push_g(s, 0, 11, 11);
    push_g(s, 0, 4, 4);
    push_g(s, 0, 5, 5);
    sl_worker_server_finish(s);
    int r0 = sp_connect(sl_worker_server_port(s));
    sl_rpc_frame_t f = {0};
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.world_size = 1;
    cr_assert_eq(sl_rpc_send(r0, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_recv(r0, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME);
    sl_rpc_frame_free(&f);
    window(r0, 0, 6); /* 4 and 5 only: without the order they waited behind 10 */
    batch(r0, 4, 4, 5, 1);
    batch(r0, 5, 5, 6, 1);
    quiet(r0, 200);
    window(r0, 0, 12);
    batch(r0, 10, 10, 11, 1);
    batch(r0, 11, 11, 12, 1);
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    close(r0);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
}

/* The hold's batches and each of 2 ranks' queued ones. @return the ranks. */
static uint32_t figures(sl_worker_server_t *s, uint64_t *held, uint64_t q[2])
{
    uint64_t bytes;
    sl_worker_server_order_held(s, &bytes, held);
    return sl_worker_server_order_queued(s, q, 2);
}

static double wait_room_s(sl_worker_server_t *s)
{
    uint64_t t0 = sl_clock_ns();
    cr_assert_eq(sl_worker_server_wait_room_ordered(s), SL_OK);
    return (double)(sl_clock_ns() - t0) / 1e9;
}

/* sl_worker_server_wait_room_ordered: a worker whose rank queues are full
 * stops making batches (a bounded wait), unless a batch it makes next may
 * be a rank's next one: a rank with nothing queued here, or a lease whose
 * g's come below what is queued (a split leased again). The rank queues'
 * figures (the /metrics gauges) move with them. */
Test(server_order, full_rank_queues_make_the_producer_wait_but_never_for_a_ranks_next)
{
    sl_worker_budget_t *budget = sl_worker_budget_new(NULL, 1 << 20);
    sl_worker_server_opts_t o = {
        .listen = "127.0.0.1:0", .job_id = "j", .budget = budget, .max_queued = 3};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&o, &s, &err), SL_OK, "%s", err.msg);
    cr_assert_lt(wait_room_s(s), 0.5, "no deterministic lease: no rank queue to wait on");
    int a, c;
    sl_dpp_row_range_t todo[] = {{0, 60}};
    cr_assert_eq(sl_worker_server_order_begin(s, &a, 3, todo, 1, 2, 11, &err), SL_OK, "%s",
                 err.msg);
    uint64_t held, q[2];
    for (uint8_t k = 0; k < 4; k++) {
        cut(s, &a, 10u * k, 10u * k + 10, true);
        push_held(s, budget, &a, 10u * k, 10u * k + 10, k);
    }
    cut(s, &a, 40, 50, true); /* batch 4 cut, still being made: held back */
    cr_assert_eq(figures(s, &held, q), 2);
    cr_assert_eq(held, 0);
    cr_assert_eq(q[0], 2, "g 10 and 12");
    cr_assert_eq(q[1], 2, "g 11 and 13");
    /* 4 queued >= 3, every rank has a lower g queued than batch 4's (14):
     * the producer waits, at most a second */
    double t = wait_room_s(s);
    cr_assert(t >= 0.9 && t < 5 * tu_timeout(1), "waited %.3f s", t);
    /* a split leased again with base 2: its g's come below those queued,
     * so one of them may be a rank's next: no wait */
    cr_assert_eq(sl_worker_server_order_begin(s, &c, 2, todo, 1, 2, 3, &err), SL_OK, "%s", err.msg);
    cr_assert_lt(wait_room_s(s), 0.5);
    sl_worker_server_order_drop(s, &c);
    /* rank 1's trainer takes its batches: rank 1 has nothing queued here,
     * so what comes next may be its next batch: no wait */
    int r1 = sp_connect(sl_worker_server_port(s));
    hello(r1, 1, 2, 0);
    batch(r1, 1, 10, 12, 2);
    batch(r1, 3, 30, 14, 2);
    cr_assert_eq(figures(s, &held, q), 2);
    cr_assert_eq(q[0], 2);
    cr_assert_eq(q[1], 0);
    cr_assert_lt(wait_room_s(s), 0.5);
    /* batch 5 put before batch 4: held, and counted so */
    cut(s, &a, 50, 60, true);
    push_held(s, budget, &a, 50, 60, 5);
    cr_assert_eq(figures(s, &held, q), 2);
    cr_assert_eq(held, 1);
    push_held(s, budget, &a, 40, 50, 4);
    uint64_t n;
    cr_assert_eq(sl_worker_server_order_end(s, &a, &n, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(n, 6);
    batch(r1, 5, 50, 16, 2);
    sl_worker_server_finish(s);
    int r0 = sp_connect(sl_worker_server_port(s));
    hello(r0, 0, 2, 0);
    batch(r0, 0, 0, 11, 1);
    batch(r0, 2, 20, 13, 1);
    batch(r0, 4, 40, 15, 1);
    cr_assert(sl_worker_server_wait_done(s, (int)(tu_timeout(5) * 1000)));
    cr_assert_eq(sl_worker_budget_used(budget), 0);
    close(r0);
    close(r1);
    sl_worker_server_stop(s);
    sl_worker_server_destroy(s);
    sl_worker_budget_destroy(budget);
}

/* The worker's server and a client that holds blocks (zero copy,
 * docs/PROTOCOL.md "Shared-memory hand-over"): a block sent as a
 * descriptor to a client granted a hold outlives its ACK (the batch is
 * counted acknowledged at once) until the client releases it, or until
 * its hold socket ends, also after its TCP connection has closed; a client
 * holding its share (max_credits blocks) gets payloads, whose blocks go on
 * the ACK, until it releases some; a client holding the whole heap makes
 * the worker's frames fall back to private memory and go as payloads (the
 * heap never grows, nothing waits for ever); a release of an id the
 * worker never sent is an ERROR naming it; a block handed out whose ACK
 * never came stays under the hold when the batch is sent again. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/shm_heap.h"
#include "dpp/worker/server/server.h"
#include "rpc/frame.h"
#include "rpc/shm.h"
#include "server_peer.h"
#include "testutil.h"

TestSuite(server_shm_hold);

typedef struct rig {
    sl_shm_heap_t *heap;
    const sl_allocator_t *fa;
    sl_worker_server_t *s;
    uint16_t port;
    int fd;
    sl_rpc_shm_map_t map;
} rig_t;

/* A server with a heap of heap_bytes (max_credits as given, 0: default)
 * and one client that asked for a hold (hold) and mapped the heap. */
static void rig_start(rig_t *r, uint64_t heap_bytes, uint32_t max_credits, bool hold)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_shm_heap_new("server-shm-hold-test", heap_bytes, NULL, &r->heap, &err), SL_OK,
                 "%s", err.msg);
    r->fa = sl_shm_heap_allocator(r->heap, NULL);
    sl_worker_server_opts_t o = {
        .listen = "127.0.0.1:0", .shm = r->heap, .max_credits = max_credits};
    cr_assert_eq(sl_worker_server_start(&o, &r->s, &err), SL_OK, "%s", err.msg);
    r->port = sl_worker_server_port(r->s);
    r->fd = sp_connect(r->port);
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.world_size = 1;
    h.shm = true;
    h.shm_hold = hold;
    cr_assert_eq(sl_rpc_send(r->fd, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(r->fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__Welcome *w = (const Sluice__Dpp__Welcome *)f.msg;
    cr_assert_eq(sl_rpc_shm_attach(w->shm_socket, w->shm_nonce.data, w->shm_nonce.len,
                                   sl_clock_ms() + (uint64_t)(tu_timeout(5) * 1000), &r->map, &err),
                 SL_OK, "%s", err.msg);
    sl_rpc_frame_free(&f);
    cr_assert_eq(r->map.hold, hold, "the worker grants the hold asked for");
}

static void rig_stop(rig_t *r)
{
    if (r->fd >= 0) close(r->fd);
    sl_rpc_shm_detach(&r->map);
    sl_worker_server_destroy(r->s);
    sl_shm_heap_stats_t hs;
    sl_shm_heap_stats(r->heap, &hs);
    cr_assert_eq(hs.blocks, 0, "every block freed");
    sl_shm_heap_destroy(r->heap);
}

/* A frame of len bytes, each byte tag, made with the frame allocator. */
static void push(rig_t *r, size_t len, uint8_t tag)
{
    uint8_t *frame = sl_alloc_aligned(r->fa, len, SL_ALIGN);
    cr_assert_not_null(frame);
    memset(frame, tag, len);
    sl_worker_server_item_t it = {.frame = frame, .len = len, .num_samples = 1};
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_push(r->s, &it, &err), SL_OK, "%s", err.msg);
}

typedef struct got {
    uint64_t id;
    bool by_shm;
    const uint8_t *at; /* the descriptor's bytes in the mapping */
    size_t len;
} got_t;

/* The next BATCH, its bytes checked (len bytes of tag). */
static got_t next(rig_t *r, size_t len, uint8_t tag)
{
    sl_rpc_frame_t f = {0};
    const Sluice__Dpp__BatchInfo *bi = sp_recv_batch(r->fd, &f);
    got_t g = {.id = bi->delivery_id, .by_shm = bi->shm_length > 0};
    const uint8_t *p = f.payload;
    g.len = f.payload_len;
    if (g.by_shm) {
        cr_assert_leq(bi->shm_offset + bi->shm_length, r->map.size);
        p = g.at = r->map.base + bi->shm_offset;
        g.len = bi->shm_length;
    }
    cr_assert_eq(g.len, len);
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(p[i], tag, "delivery %llu byte %zu", (unsigned long long)g.id, i);
    sl_rpc_frame_free(&f);
    return g;
}

/* ACK of ack (0: none) with the releases rel[n]. */
static void ack(rig_t *r, uint64_t id, const uint64_t *rel, size_t n)
{
    Sluice__Dpp__Ack a = SLUICE__DPP__ACK__INIT;
    a.n_delivery_ids = id ? 1 : 0;
    a.delivery_ids = &id;
    a.n_released_ids = n;
    a.released_ids = (uint64_t *)rel;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(r->fd, SL_RPC_ACK, &a.base, NULL, 0, &err), SL_OK, "%s", err.msg);
}

static sl_worker_server_stats_t stats(rig_t *r)
{
    sl_worker_server_stats_t st;
    sl_worker_server_stats(r->s, &st);
    return st;
}

/* Wait (bounded) until the heap has want blocks and the server counts
 * acked batches acknowledged. */
static void wait_for(rig_t *r, uint64_t blocks, uint64_t acked)
{
    double deadline = tu_timeout(5);
    sl_shm_heap_stats_t hs;
    sl_worker_server_stats_t st;
    for (double t = 0;; t += 0.002) {
        sl_shm_heap_stats(r->heap, &hs);
        st = stats(r);
        if (hs.blocks == blocks && st.batches_acked == acked) return;
        cr_assert(t < deadline, "%llu heap blocks (want %llu), %llu acknowledged (want %llu)",
                  (unsigned long long)hs.blocks, (unsigned long long)blocks,
                  (unsigned long long)st.batches_acked, (unsigned long long)acked);
        usleep(2000);
    }
}

/* The heap's block count stays want for ms (nothing frees what is held). */
static void stays(rig_t *r, uint64_t want, int ms)
{
    for (int t = 0; t < ms; t += 5) {
        sl_shm_heap_stats_t hs;
        sl_shm_heap_stats(r->heap, &hs);
        cr_assert_eq(hs.blocks, want, "after %d ms", t);
        usleep(5000);
    }
}

Test(server_shm_hold, a_block_outlives_its_ack_until_released_or_the_hold_ends)
{
    rig_t r;
    rig_start(&r, 64 << 10, 0, true);
    sp_request(r.fd, 4, true);
    push(&r, 5000, 0x11);
    push(&r, 6000, 0x22);
    push(&r, 7000, 0x33);
    got_t a = next(&r, 5000, 0x11), b = next(&r, 6000, 0x22), c = next(&r, 7000, 0x33);
    cr_assert(a.by_shm && b.by_shm && c.by_shm);
    ack(&r, a.id, NULL, 0);
    ack(&r, b.id, NULL, 0);
    ack(&r, c.id, NULL, 0);
    wait_for(&r, 3, 3); /* acknowledged, and all three blocks still held */
    stays(&r, 3, 50);
    cr_assert_eq(stats(&r).shm_held, 3);
    uint64_t rel = b.id;
    ack(&r, 0, &rel, 1);
    wait_for(&r, 2, 3);
    /* the connection closes; the hold (the side channel) stays open */
    close(r.fd);
    r.fd = -1;
    stays(&r, 2, 100);
    for (size_t i = 0; i < 5000; i++)
        cr_assert_eq(a.at[i], 0x11, "byte %zu still the frame's", i);
    for (size_t i = 0; i < 7000; i++)
        cr_assert_eq(c.at[i], 0x33, "byte %zu still the frame's", i);
    sl_rpc_shm_detach(&r.map); /* the client unmaps: its hold ends */
    wait_for(&r, 0, 3);
    sl_worker_server_stats_t st = stats(&r);
    cr_assert_eq(st.shm_held, 3);
    cr_assert_eq(st.shm_released, 1);
    cr_assert_eq(st.shm_held_freed, 2);
    cr_assert_eq(st.redeliveries, 0);
    rig_stop(&r);
}

Test(server_shm_hold, a_client_holding_its_share_gets_payloads)
{
    rig_t r;
    rig_start(&r, 256 << 10, 2, true); /* max_credits 2: a share of two blocks */
    uint64_t ids[5];
    for (int i = 0; i < 5; i++) {
        /* one at a time, so that each ACK is in before the next is sent */
        sp_request(r.fd, 1, i == 0);
        push(&r, 4096, (uint8_t)(0x40 + i));
        got_t g = next(&r, 4096, (uint8_t)(0x40 + i));
        cr_assert_eq(g.by_shm, i < 2, "batch %d: %s", i, g.by_shm ? "descriptor" : "payload");
        ids[i] = g.id;
        ack(&r, g.id, NULL, 0);
        wait_for(&r, i < 2 ? (uint64_t)i + 1 : 2, (uint64_t)i + 1);
    }
    /* released: room again, the next goes as a descriptor */
    ack(&r, 0, ids, 1);
    wait_for(&r, 1, 5);
    sp_request(r.fd, 1, false);
    push(&r, 4096, 0x50);
    got_t g = next(&r, 4096, 0x50);
    cr_assert(g.by_shm);
    ack(&r, g.id, ids + 1, 1);
    wait_for(&r, 1, 6);
    sl_worker_server_stats_t st = stats(&r);
    cr_assert_eq(st.shm_batches, 3);
    cr_assert_eq(st.batches_sent, 6);
    cr_assert_eq(st.shm_held, 3);
    cr_assert_eq(st.shm_released, 2);
    rig_stop(&r);
}

Test(server_shm_hold, a_client_holding_the_whole_heap_gets_payloads_and_the_heap_never_grows)
{
    rig_t r;
    rig_start(&r, 64 << 10, 0, true); /* 4 blocks of 16 KiB */
    for (int i = 0; i < 7; i++) {
        sp_request(r.fd, 1, i == 0);
        push(&r, 16 << 10, (uint8_t)(0x60 + i)); /* the 5th on: no room, private memory */
        got_t g = next(&r, 16 << 10, (uint8_t)(0x60 + i));
        cr_assert_eq(g.by_shm, i < 4, "batch %d", i);
        ack(&r, g.id, NULL, 0);
        wait_for(&r, i < 4 ? (uint64_t)i + 1 : 4, (uint64_t)i + 1);
    }
    sl_shm_heap_stats_t hs;
    sl_shm_heap_stats(r.heap, &hs);
    cr_assert_eq(hs.used, 64 << 10, "the heap, full, and no more");
    cr_assert_eq(hs.fallbacks, 3);
    cr_assert_eq(stats(&r).shm_held, 4);
    rig_stop(&r); /* the blocks still held go with the server */
}

Test(server_shm_hold, a_client_that_did_not_ask_is_freed_on_the_ack)
{
    rig_t r;
    rig_start(&r, 64 << 10, 0, false);
    sp_request(r.fd, 1, true);
    push(&r, 5000, 0x71);
    got_t g = next(&r, 5000, 0x71);
    cr_assert(g.by_shm);
    ack(&r, g.id, NULL, 0);
    wait_for(&r, 0, 1);
    cr_assert_eq(stats(&r).shm_held, 0);
    rig_stop(&r);
}

Test(server_shm_hold, a_release_of_an_id_never_sent_is_an_error)
{
    rig_t r;
    rig_start(&r, 64 << 10, 0, true);
    uint64_t rel = 999;
    ack(&r, 0, &rel, 1);
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(r.fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_ERROR, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
    cr_assert_str_eq(e->message, "release of delivery id 999, which this worker never sent");
    sl_rpc_frame_free(&f);
    rig_stop(&r);
}

/* A batch handed out whose ACK never came (the connection died first): the
 * worker sends it again, and its block stays under the first client's
 * hold after the second client's ACK, until that hold ends. */
Test(server_shm_hold, a_redelivered_block_stays_under_the_first_hold)
{
    rig_t r;
    rig_start(&r, 64 << 10, 0, true);
    sp_request(r.fd, 1, true);
    push(&r, 5000, 0x81);
    got_t a = next(&r, 5000, 0x81);
    cr_assert(a.by_shm);
    close(r.fd); /* no ACK: the batch goes back to the queue */
    r.fd = sp_connect(r.port);
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.world_size = 1;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(r.fd, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(r.fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME);
    sl_rpc_frame_free(&f);
    sp_request(r.fd, 1, false);
    got_t b = next(&r, 5000, 0x81); /* again, as a payload to this client */
    cr_assert_not(b.by_shm);
    ack(&r, b.id, NULL, 0);
    wait_for(&r, 1, 1); /* acknowledged by the second, the block kept by the first's hold */
    stays(&r, 1, 50);
    for (size_t i = 0; i < 5000; i++)
        cr_assert_eq(a.at[i], 0x81, "byte %zu still the frame's", i);
    sl_worker_server_stats_t st = stats(&r);
    cr_assert_eq(st.redeliveries, 1);
    cr_assert_eq(st.shm_held, 1);
    sl_rpc_shm_detach(&r.map); /* the first client unmaps: the block goes */
    wait_for(&r, 0, 1);
    cr_assert_eq(stats(&r).shm_held_freed, 1);
    rig_stop(&r);
}

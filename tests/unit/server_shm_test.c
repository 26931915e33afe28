/* The worker's server with a shared-memory frame heap (server.h opts.shm,
 * docs/PROTOCOL.md "Shared-memory hand-over"): a client whose HELLO asks
 * is offered the side channel; once it mapped the heap and said so, a
 * frame in the heap reaches it as a descriptor (no payload) and any other
 * frame as a payload; a client that did not ask gets payloads; a block
 * stays until acknowledged (a client that leaves without acking has it
 * redelivered, bytes intact) and is freed on the ACK; a wrong or reused
 * nonce is refused; a client claiming to be attached without the side
 * channel gets an ERROR. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
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

TestSuite(server_shm);

typedef struct offer {
    char socket[64];
    uint8_t nonce[64];
    size_t nonce_len;
} offer_t;

/* HELLO (shm: asking for the hand-over); the WELCOME's offer. */
static void hello(int fd, bool shm, offer_t *o)
{
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.world_size = 1;
    h.shm = shm;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_HELLO, &h.base, NULL, 0, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__Welcome *w = (const Sluice__Dpp__Welcome *)f.msg;
    memset(o, 0, sizeof *o);
    snprintf(o->socket, sizeof o->socket, "%s", w->shm_socket ? w->shm_socket : "");
    cr_assert_leq(w->shm_nonce.len, sizeof o->nonce);
    if (w->shm_nonce.len) memcpy(o->nonce, w->shm_nonce.data, w->shm_nonce.len);
    o->nonce_len = w->shm_nonce.len;
    sl_rpc_frame_free(&f);
}

/* The next BATCH: its frame's bytes (from the payload, or through map for
 * a descriptor) into out (cap), *len, *by_shm. @return its delivery id. */
static uint64_t batch(int fd, const sl_rpc_shm_map_t *map, uint8_t *out, size_t cap, size_t *len,
                      bool *by_shm)
{
    sl_rpc_frame_t f = {0};
    const Sluice__Dpp__BatchInfo *bi = sp_recv_batch(fd, &f);
    *by_shm = bi->shm_length > 0;
    if (*by_shm) {
        cr_assert_eq(f.payload_len, 0, "a descriptor comes without a payload");
        cr_assert_not_null(map);
        cr_assert_leq(bi->shm_offset + bi->shm_length, map->size);
        *len = bi->shm_length;
        cr_assert_leq(*len, cap);
        memcpy(out, map->base + bi->shm_offset, *len);
    } else {
        *len = f.payload_len;
        cr_assert_leq(*len, cap);
        memcpy(out, f.payload, *len);
    }
    uint64_t id = bi->delivery_id;
    sl_rpc_frame_free(&f);
    return id;
}

typedef struct rig {
    sl_shm_heap_t *heap;
    const sl_allocator_t *fa;
    sl_worker_server_t *s;
    uint16_t port;
} rig_t;

static void rig_start(rig_t *r, uint64_t heap_bytes)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_shm_heap_new("server-shm-test", heap_bytes, NULL, &r->heap, &err), SL_OK, "%s",
                 err.msg);
    r->fa = sl_shm_heap_allocator(r->heap, NULL);
    sl_worker_server_opts_t o = {.listen = "127.0.0.1:0", .shm = r->heap};
    cr_assert_eq(sl_worker_server_start(&o, &r->s, &err), SL_OK, "%s", err.msg);
    r->port = sl_worker_server_port(r->s);
}

static void rig_stop(rig_t *r)
{
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

static void expect_bytes(const uint8_t *got, size_t len, size_t want_len, uint8_t tag)
{
    cr_assert_eq(len, want_len);
    for (size_t i = 0; i < len; i++)
        cr_assert_eq(got[i], tag, "byte %zu", i);
}

static void wait_blocks(rig_t *r, uint64_t want)
{
    double deadline = tu_timeout(5);
    sl_shm_heap_stats_t hs;
    for (double t = 0;; t += 0.002) {
        sl_shm_heap_stats(r->heap, &hs);
        if (hs.blocks == want) return;
        cr_assert(t < deadline, "%llu heap blocks, want %llu", (unsigned long long)hs.blocks,
                  (unsigned long long)want);
        usleep(2000);
    }
}

Test(server_shm, descriptors_to_the_attached_client_payloads_to_others)
{
    rig_t r;
    rig_start(&r, 64 << 10);
    sl_error_t err = {0};
    int fa = sp_connect(r.port);
    offer_t oa;
    hello(fa, true, &oa);
    cr_assert(strncmp(oa.socket, "sluice-shm-", 11) == 0, "%s", oa.socket);
    cr_assert_eq(oa.nonce_len, SL_RPC_SHM_NONCE_BYTES);
    sl_rpc_shm_map_t map;
    cr_assert_eq(sl_rpc_shm_attach(oa.socket, oa.nonce, oa.nonce_len,
                                   sl_clock_ms() + (uint64_t)(tu_timeout(5) * 1000), &map, &err),
                 SL_OK, "%s", err.msg);
    cr_assert_eq(map.size, 64 << 10);
    sp_request(fa, 4, true);

    uint8_t buf[70000];
    size_t len;
    bool by_shm;
    push(&r, 5000, 0x11); /* in the heap: a descriptor */
    uint64_t id1 = batch(fa, &map, buf, sizeof buf, &len, &by_shm);
    cr_assert(by_shm);
    expect_bytes(buf, len, 5000, 0x11);
    push(&r, 70000, 0x22); /* larger than the heap: the fallback, a payload */
    uint64_t id2 = batch(fa, &map, buf, sizeof buf, &len, &by_shm);
    cr_assert_not(by_shm);
    expect_bytes(buf, len, 70000, 0x22);
    push(&r, 3000, 0x33); /* a descriptor the client leaves with, unacknowledged */
    batch(fa, &map, buf, sizeof buf, &len, &by_shm);
    cr_assert(by_shm);
    sp_ack(fa, id1);
    sp_ack(fa, id2);
    wait_blocks(&r, 1); /* 0x11's block is free; 0x33's is held */
    close(fa);
    sl_rpc_shm_detach(&map);

    /* a client that did not ask: no offer, and the left batch as a payload */
    int fb = sp_connect(r.port);
    offer_t ob;
    hello(fb, false, &ob);
    cr_assert_str_eq(ob.socket, "");
    cr_assert_eq(ob.nonce_len, 0);
    sp_request(fb, 4, false);
    uint64_t id3 = batch(fb, NULL, buf, sizeof buf, &len, &by_shm);
    cr_assert_not(by_shm);
    expect_bytes(buf, len, 3000, 0x33);
    push(&r, 4000, 0x44);
    uint64_t id4 = batch(fb, NULL, buf, sizeof buf, &len, &by_shm);
    cr_assert_not(by_shm);
    expect_bytes(buf, len, 4000, 0x44);
    sp_ack(fb, id3);
    sp_ack(fb, id4);
    wait_blocks(&r, 0);
    sl_worker_server_stats_t st;
    sl_worker_server_stats(r.s, &st);
    cr_assert_eq(st.batches_sent, 5);
    cr_assert_eq(st.shm_batches, 2);
    cr_assert_eq(st.shm_bytes, 8000);
    cr_assert_eq(st.bytes_sent, 5000 + 70000 + 3000 + 3000 + 4000);
    cr_assert_eq(st.shm_attached, 1);
    cr_assert_eq(st.shm_refused, 0);
    cr_assert_eq(st.batches_acked, 4);
    close(fb);
    rig_stop(&r);
}

Test(server_shm, a_wrong_or_reused_nonce_is_refused)
{
    rig_t r;
    rig_start(&r, 16 << 10);
    sl_error_t err = {0};
    int fa = sp_connect(r.port);
    offer_t oa;
    hello(fa, true, &oa);
    uint64_t deadline = sl_clock_ms() + (uint64_t)(tu_timeout(5) * 1000);
    sl_rpc_shm_map_t map;
    uint8_t wrong[SL_RPC_SHM_NONCE_BYTES];
    memcpy(wrong, oa.nonce, sizeof wrong);
    wrong[7] ^= 1;
    cr_assert_eq(sl_rpc_shm_attach(oa.socket, wrong, sizeof wrong, deadline, &map, &err),
                 SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "refused"), "%s", err.msg);
    cr_assert_null(map.base);
    /* the right one still works, once */
    cr_assert_eq(sl_rpc_shm_attach(oa.socket, oa.nonce, oa.nonce_len, deadline, &map, &err), SL_OK,
                 "%s", err.msg);
    sl_rpc_shm_detach(&map);
    cr_assert_eq(sl_rpc_shm_attach(oa.socket, oa.nonce, oa.nonce_len, deadline, &map, &err),
                 SL_ERR_INVALID);
    /* no such socket (another host or network namespace) */
    cr_assert_eq(sl_rpc_shm_attach("sluice-shm-none", oa.nonce, oa.nonce_len, deadline, &map, &err),
                 SL_ERR_NOT_FOUND);
    /* counted by the side channel's thread once it has answered: wait */
    sl_worker_server_stats_t st;
    double until = tu_timeout(5);
    for (double t = 0;; t += 0.002) {
        sl_worker_server_stats(r.s, &st);
        if (st.shm_refused >= 2 || t >= until) break;
        usleep(2000);
    }
    cr_assert_eq(st.shm_refused, 2);
    close(fa);
    rig_stop(&r);
}

Test(server_shm, attached_without_the_side_channel_is_an_error)
{
    rig_t r;
    rig_start(&r, 16 << 10);
    int fa = sp_connect(r.port);
    offer_t oa;
    hello(fa, true, &oa);
    sp_request(fa, 4, true); /* never presented its nonce */
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(fa, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_ERROR, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
    cr_assert(strstr(e->message, "no side-channel request presented this connection's nonce"), "%s",
              e->message);
    sl_rpc_frame_free(&f);
    close(fa);
    rig_stop(&r);
}

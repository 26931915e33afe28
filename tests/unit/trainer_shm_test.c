/* The trainer client's side of the shared-memory hand-over (docs/PROTOCOL.md
 * "Shared-memory hand-over") against a fake worker that speaks it: the
 * client asks in HELLO, maps the heap through the side channel, says so in
 * its first REQUEST, and copies a descriptor's frame out of the mapping
 * (decoded byte for byte, counted in batches_shm); a descriptor outside the
 * heap, or on a connection that never attached (shm off in the client), is
 * a clear error naming the worker and the delivery, answered with ERROR,
 * never a crash; with shm off the client's HELLO does not ask. Granted a
 * hold, the client reads the frame in place (zero copy): the batch is
 * writable (a private mapping), byte for byte the frame, releases its delivery id when
 * destroyed, stays valid after the client closes (and the worker's heap
 * is gone) and keeps the hold socket open until then; a hostile descriptor is refused as before. */
#include <criterion/criterion.h>

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/shm_heap.h"
#include "rpc/shm.h"
#include "sluice/trainer.h"
/* for fw_random_batch: the fake worker itself is not used here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "trainer_fake_worker.h"
#pragma GCC diagnostic pop

TestSuite(trainer_shm);

typedef enum peer_mode {
    PEER_GOOD,         /* a descriptor of a valid frame in the heap */
    PEER_OUT_OF_RANGE, /* a descriptor past the heap's end */
    PEER_MISALIGNED,   /* a descriptor inside the heap, 8 bytes off its frame */
} peer_mode_t;

typedef struct peer {
    peer_mode_t mode;
    int lfd;
    uint16_t port;
    char addr[64];
    pthread_t th;
    sl_shm_heap_t *heap;
    void *frame; /* in the heap */
    size_t frame_len;
    uint32_t samples;
    bool grant_hold; /* grant a hold to a HELLO that asks (zero copy) */
    uint8_t nonce[SL_RPC_SHM_NONCE_BYTES];
    /* what the client did */
    bool hello_shm, hello_hold, attached, got_error;
    char error[512];
    bool ended;  /* END sent (after the first ACK) */
    int hold_fd; /* the side channel kept as the client's hold; -1: none */
    uint64_t released[8];
    size_t nreleased;
} peer_t;

/* A hold only when the test grants it and the client asked. */
static int nonce_ok(void *ctx, const uint8_t nonce[SL_RPC_SHM_NONCE_BYTES])
{
    const peer_t *p = ctx;
    if (memcmp(p->nonce, nonce, SL_RPC_SHM_NONCE_BYTES) != 0) return -1;
    return p->grant_hold && p->hello_hold ? (int)SL_RPC_SHM_HOLD : 0;
}

static void *peer_main(void *arg)
{
    peer_t *p = arg;
    struct pollfd pl = {.fd = p->lfd, .events = POLLIN};
    if (poll(&pl, 1, (int)(tu_timeout(10) * 1000)) <= 0) return NULL;
    int fd = accept(p->lfd, NULL, NULL);
    sl_error_t err = {0};
    sl_rpc_set_recv_timeout(fd, (int)(tu_timeout(10) * 1000), &err);
    sl_rpc_frame_t f = {0};
    if (sl_rpc_recv(fd, NULL, NULL, &f, &err) != SL_OK || f.type != SL_RPC_HELLO) goto out;
    p->hello_shm = ((const Sluice__Dpp__Hello *)f.msg)->shm;
    p->hello_hold = ((const Sluice__Dpp__Hello *)f.msg)->shm_hold;
    sl_rpc_frame_free(&f);
    char name[SL_RPC_SHM_NAME_MAX];
    int ufd = -1;
    uint8_t *nonce = p->nonce;
    Sluice__Dpp__Welcome w = SLUICE__DPP__WELCOME__INIT;
    w.protocol_version = SL_RPC_VERSION;
    w.worker_id = "fake";
    w.job_id = "job";
    w.max_credits = 4;
    if (p->hello_shm) {
        cr_assert_eq(sl_rpc_shm_listen(name, &ufd, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_rpc_shm_nonce(nonce, &err), SL_OK);
        w.shm_socket = name;
        w.shm_nonce.data = nonce;
        w.shm_nonce.len = SL_RPC_SHM_NONCE_BYTES;
    }
    sl_rpc_send(fd, SL_RPC_WELCOME, &w.base, NULL, 0, &err);
    if (p->hello_shm) {
        struct pollfd up = {.fd = ufd, .events = POLLIN};
        if (poll(&up, 1, (int)(tu_timeout(10) * 1000)) == 1) {
            int cfd = accept(ufd, NULL, NULL);
            sl_rpc_shm_serve(cfd, sl_clock_ms() + (uint64_t)(tu_timeout(10) * 1000), nonce_ok, p,
                             sl_shm_heap_fd(p->heap), sl_shm_heap_size(p->heap), &err);
            if (p->grant_hold && p->hello_hold)
                p->hold_fd = cfd; /* the client's hold: the test watches its end */
            else
                close(cfd);
        }
        close(ufd);
    }
    if (sl_rpc_recv(fd, NULL, NULL, &f, &err) != SL_OK || f.type != SL_RPC_REQUEST) goto out;
    p->attached = ((const Sluice__Dpp__Request *)f.msg)->shm_attached;
    sl_rpc_frame_free(&f);
    uint64_t off = 0;
    sl_shm_heap_offset(p->heap, p->frame, &off);
    Sluice__Dpp__BatchInfo bi = SLUICE__DPP__BATCH_INFO__INIT;
    bi.delivery_id = 41;
    bi.split_id = 7;
    bi.num_samples = p->samples;
    bi.shm_offset = p->mode == PEER_OUT_OF_RANGE ? sl_shm_heap_size(p->heap) - 100
                    : p->mode == PEER_MISALIGNED ? off + 8
                                                 : off;
    bi.shm_length = p->frame_len;
    sl_rpc_send(fd, SL_RPC_BATCH, &bi.base, NULL, 0, &err);
    /* the client's answer: an ACK when it took the batch, ERROR when not */
    while (sl_rpc_recv(fd, NULL, NULL, &f, &err) == SL_OK) {
        if (f.type == SL_RPC_ERROR) {
            p->got_error = true;
            snprintf(p->error, sizeof p->error, "%s", ((const Sluice__Dpp__Error *)f.msg)->message);
        }
        sl_rpc_type_t t = f.type;
        if (t == SL_RPC_ACK) {
            const Sluice__Dpp__Ack *a = (const Sluice__Dpp__Ack *)f.msg;
            for (size_t i = 0; i < a->n_released_ids && p->nreleased < 8; i++)
                p->released[p->nreleased++] = a->released_ids[i];
        }
        sl_rpc_frame_free(&f);
        if (t == SL_RPC_ERROR || t == SL_RPC_GOODBYE) break;
        if (t == SL_RPC_ACK && !p->ended) { /* done: the job ends */
            p->ended = true;
            Sluice__Dpp__End e = SLUICE__DPP__END__INIT;
            sl_rpc_send(fd, SL_RPC_END, &e.base, NULL, 0, &err);
        }
    }
out:
    sl_rpc_frame_free(&f);
    close(fd);
    return NULL;
}

static sl_batch_t *peer_start_hold(peer_t *p, peer_mode_t mode, bool grant_hold)
{
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->grant_hold = grant_hold;
    p->hold_fd = -1;
    sl_error_t err = {0};
    cr_assert_eq(sl_shm_heap_new("trainer-shm-test", 1 << 20, NULL, &p->heap, &err), SL_OK);
    uint64_t rng = tu_seed("trainer_shm");
    sl_batch_t *b = fw_random_batch(&rng, 8, 1);
    void *frame;
    cr_assert_eq(
        sl_wire_encode(b, sl_shm_heap_allocator(p->heap, NULL), &frame, &p->frame_len, &err), SL_OK,
        "%s", err.msg);
    uint64_t off;
    cr_assert(sl_shm_heap_offset(p->heap, frame, &off), "the frame is in the heap");
    p->frame = frame;
    p->samples = b->batch_size;
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 4, &p->lfd, &p->port, &err), SL_OK, "%s", err.msg);
    snprintf(p->addr, sizeof p->addr, "127.0.0.1:%u", p->port);
    cr_assert_eq(pthread_create(&p->th, NULL, peer_main, p), 0);
    return b;
}

static sl_batch_t *peer_start(peer_t *p, peer_mode_t mode)
{
    return peer_start_hold(p, mode, false);
}

static void peer_stop(peer_t *p)
{
    pthread_join(p->th, NULL);
    close(p->lfd);
    if (p->hold_fd >= 0) close(p->hold_fd);
    sl_shm_heap_free(p->heap, p->frame);
    sl_shm_heap_destroy(p->heap);
}

static sl_trainer_t *client_ro(const char *addr, bool no_shm, bool read_only)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.shm_read_only = read_only;
    o.address = addr;
    o.reconnect_ms = -1;
    o.no_shm = no_shm;
    o.metrics_address = "";
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    return t;
}

static sl_trainer_t *client(const char *addr, bool no_shm)
{
    return client_ro(addr, no_shm, false);
}

Test(trainer_shm, a_descriptor_is_copied_out_and_decoded)
{
    unsetenv("SLUICE_TRAINER_SHM");
    peer_t p;
    sl_batch_t *want = peer_start(&p, PEER_GOOD);
    sl_trainer_t *t = client(p.addr, false);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_OK, "%s", err.msg);
    cr_assert(p.hello_shm);
    cr_assert(p.attached);
    /* byte for byte the batch encoded into the heap */
    void *f1, *f2;
    size_t l1, l2;
    cr_assert_eq(sl_wire_encode(want, NULL, &f1, &l1, &err), SL_OK);
    cr_assert_eq(sl_wire_encode(b, NULL, &f2, &l2, &err), SL_OK);
    cr_assert_eq(l1, l2);
    cr_assert_eq(memcmp(f1, f2, l1), 0);
    sl_free(NULL, f1, l1);
    sl_free(NULL, f2, l2);
    sl_trainer_release(t, b);
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_ERR_CLOSED, "%s",
                 err.msg);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.batches_shm, 1);
    cr_assert_eq(st.batches_socket, 0);
    sl_trainer_close(t);
    peer_stop(&p);
    sl_batch_destroy(want);
}

/* A client (no_shm as given) that should fail on the peer's batch with
 * what; asked: whether its HELLO asks for shared memory. */
static void expect_failure_hold(peer_mode_t mode, bool no_shm, bool asked, bool hold,
                                const char *what)
{
    peer_t p;
    sl_batch_t *want = peer_start_hold(&p, mode, hold);
    sl_trainer_t *t = client(p.addr, no_shm);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    sl_err_t rc = sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err);
    cr_assert_eq(rc, SL_ERR_PROTOCOL, "%s: %s", sl_err_str(rc), err.msg);
    cr_assert(strstr(err.msg, p.addr), "names the worker: %s", err.msg);
    cr_assert(strstr(err.msg, "delivery 41"), "names the delivery: %s", err.msg);
    cr_assert(strstr(err.msg, what), "%s", err.msg);
    sl_trainer_close(t);
    peer_stop(&p);
    cr_assert(p.got_error, "the worker was told why");
    cr_assert(strstr(p.error, what), "%s", p.error);
    cr_assert_eq(p.hello_shm, asked);
    sl_batch_destroy(want);
}

static void expect_failure(peer_mode_t mode, bool no_shm, bool asked, const char *what)
{
    expect_failure_hold(mode, no_shm, asked, false, what);
}

Test(trainer_shm, a_descriptor_outside_the_heap_is_a_clear_error)
{
    unsetenv("SLUICE_TRAINER_SHM");
    expect_failure(PEER_OUT_OF_RANGE, false, true, "outside the 1048576-byte heap");
}

Test(trainer_shm, a_descriptor_without_attaching_is_a_clear_error)
{
    unsetenv("SLUICE_TRAINER_SHM");
    expect_failure(PEER_GOOD, true, false,
                   "shared-memory descriptor on a connection that did not attach");
}

Test(trainer_shm, the_environment_turns_it_off)
{
    setenv("SLUICE_TRAINER_SHM", "0", 1);
    expect_failure(PEER_GOOD, false, false, "did not attach");
    unsetenv("SLUICE_TRAINER_SHM");
}

/* The frame's bytes as sl_wire_encode makes them from b. */
static void expect_same_frame(const sl_batch_t *want, const sl_batch_t *b)
{
    sl_error_t err = {0};
    void *f1, *f2;
    size_t l1, l2;
    cr_assert_eq(sl_wire_encode(want, NULL, &f1, &l1, &err), SL_OK);
    cr_assert_eq(sl_wire_encode(b, NULL, &f2, &l2, &err), SL_OK);
    cr_assert_eq(l1, l2);
    cr_assert_eq(memcmp(f1, f2, l1), 0);
    sl_free(NULL, f1, l1);
    sl_free(NULL, f2, l2);
}

/* Has the hold socket ended (the client closed it) within ms? */
static bool hold_ended(int fd, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, ms) != 1) return false;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

Test(trainer_shm, a_held_descriptor_is_read_in_place_and_released)
{
    unsetenv("SLUICE_TRAINER_SHM");
    unsetenv("SLUICE_TRAINER_SHM_COPY");
    peer_t p;
    sl_batch_t *want = peer_start_hold(&p, PEER_GOOD, true);
    sl_trainer_t *t = client(p.addr, false);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_OK, "%s", err.msg);
    cr_assert(p.hello_hold);
    expect_same_frame(want, b);
    /* an in-place op on a batch read in place: a private page, no fault */
    if (b->dense.rows > 0 && b->dense.cols > 0) b->dense.data[0] = -1.0f;
    sl_trainer_release(t, b);
    /* the job ended after the ACK; the release goes with the close */
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_ERR_CLOSED, "%s",
                 err.msg);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.batches_shm, 1);
    sl_trainer_close(t);
    pthread_join(p.th, NULL);
    cr_assert_eq(p.nreleased, 1, "one release");
    cr_assert_eq(p.released[0], 41);
    cr_assert(hold_ended(p.hold_fd, (int)(tu_timeout(5) * 1000)), "the hold ends with the mapping");
    close(p.hold_fd);
    p.hold_fd = -1;
    close(p.lfd);
    sl_shm_heap_free(p.heap, p.frame);
    sl_shm_heap_destroy(p.heap);
    sl_batch_destroy(want);
}

Test(trainer_shm, a_held_batch_outlives_its_client_and_worker_and_keeps_the_hold)
{
    unsetenv("SLUICE_TRAINER_SHM");
    unsetenv("SLUICE_TRAINER_SHM_COPY");
    peer_t p;
    sl_batch_t *want = peer_start_hold(&p, PEER_GOOD, true);
    sl_trainer_t *t = client(p.addr, false);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_OK, "%s", err.msg);
    sl_trainer_close(t); /* with b still held */
    pthread_join(p.th, NULL);
    cr_assert_eq(p.nreleased, 0, "nothing released while the batch lives");
    cr_assert_not(hold_ended(p.hold_fd, 50), "the hold stays while the batch lives");
    expect_same_frame(want, b); /* still readable, the same bytes */
    /* the worker goes (its heap unmapped, its memfd closed): the client's
     * mapping keeps the pages */
    sl_shm_heap_free(p.heap, p.frame);
    sl_shm_heap_destroy(p.heap);
    expect_same_frame(want, b);
    sl_batch_destroy(b);
    cr_assert(hold_ended(p.hold_fd, (int)(tu_timeout(5) * 1000)), "the last batch ends the hold");
    close(p.hold_fd);
    p.hold_fd = -1;
    close(p.lfd);
    sl_batch_destroy(want);
}

Test(trainer_shm, a_hostile_held_descriptor_is_still_a_clear_error)
{
    unsetenv("SLUICE_TRAINER_SHM");
    unsetenv("SLUICE_TRAINER_SHM_COPY");
    expect_failure_hold(PEER_OUT_OF_RANGE, false, true, true, "outside the 1048576-byte heap");
    expect_failure_hold(PEER_MISALIGNED, false, true, true, "not 4096-byte aligned");
}

Test(trainer_shm, the_environment_makes_it_copy)
{
    unsetenv("SLUICE_TRAINER_SHM");
    setenv("SLUICE_TRAINER_SHM_COPY", "1", 1);
    peer_t p;
    sl_batch_t *want = peer_start_hold(&p, PEER_GOOD, true);
    sl_trainer_t *t = client(p.addr, false);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_OK, "%s", err.msg);
    unsetenv("SLUICE_TRAINER_SHM_COPY");
    cr_assert(p.hello_shm);
    cr_assert_not(p.hello_hold, "a copying client does not ask for a hold");
    expect_same_frame(want, b);
    sl_trainer_release(t, b);
    sl_trainer_close(t);
    peer_stop(&p);
    cr_assert_eq(p.nreleased, 0);
    sl_batch_destroy(want);
}

/* The hold's side of the side channel, served once in a thread. */
typedef struct hold_srv {
    int ufd, cfd;
    sl_shm_heap_t *heap;
    uint8_t nonce[SL_RPC_SHM_NONCE_BYTES];
} hold_srv_t;

static int hold_granted(void *ctx, const uint8_t nonce[SL_RPC_SHM_NONCE_BYTES])
{
    hold_srv_t *s = ctx;
    return memcmp(s->nonce, nonce, SL_RPC_SHM_NONCE_BYTES) == 0 ? (int)SL_RPC_SHM_HOLD : -1;
}

static void *hold_serve(void *arg)
{
    hold_srv_t *s = arg;
    struct pollfd up = {.fd = s->ufd, .events = POLLIN};
    if (poll(&up, 1, (int)(tu_timeout(10) * 1000)) != 1) return NULL;
    s->cfd = accept(s->ufd, NULL, NULL);
    sl_error_t err = {0};
    sl_rpc_shm_serve(s->cfd, sl_clock_ms() + (uint64_t)(tu_timeout(10) * 1000), hold_granted, s,
                     sl_shm_heap_fd(s->heap), sl_shm_heap_size(s->heap), &err);
    return NULL;
}

Test(trainer_shm, a_write_into_a_held_block_stays_private_until_the_block_goes_back)
{
    hold_srv_t s = {.ufd = -1, .cfd = -1};
    sl_error_t err = {0};
    cr_assert_eq(sl_shm_heap_new("cow", 64 * 1024, NULL, &s.heap, &err), SL_OK, "%s", err.msg);
    uint8_t *block = sl_shm_heap_alloc(s.heap, 2 * SL_RPC_SHM_BLOCK_ALIGN);
    cr_assert_not_null(block);
    memset(block, 'A', 2 * SL_RPC_SHM_BLOCK_ALIGN);
    uint64_t off = 0;
    cr_assert(sl_shm_heap_offset(s.heap, block, &off));
    char name[SL_RPC_SHM_NAME_MAX];
    cr_assert_eq(sl_rpc_shm_listen(name, &s.ufd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_shm_nonce(s.nonce, &err), SL_OK);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, hold_serve, &s), 0);
    sl_rpc_shm_map_t map = {0};
    cr_assert_eq(sl_rpc_shm_attach(name, s.nonce, sizeof s.nonce,
                                   sl_clock_ms() + (uint64_t)(tu_timeout(10) * 1000), &map, &err),
                 SL_OK, "%s", err.msg);
    pthread_join(th, NULL);
    cr_assert(map.hold);
    uint8_t *mine = (uint8_t *)map.base + off; /* the client's view of the block */
    cr_assert_eq(mine[0], 'A');
    mine[0] = 'X'; /* the user's in-place write: copied on write */
    cr_assert_eq(block[0], 'A', "the worker never sees a client's write");
    block[0] = 'B'; /* the worker reuses the block... */
    block[SL_RPC_SHM_BLOCK_ALIGN] = 'C';
    cr_assert_eq(mine[0], 'X', "...the written page is this process's copy");
    cr_assert_eq(mine[SL_RPC_SHM_BLOCK_ALIGN], 'C', "an unwritten page reads the heap");
    bool dropped = true;
    cr_assert_eq(sl_rpc_shm_forget(&map, off + 8, 16, &dropped, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "is not a block"), "%s", err.msg);
    cr_assert_not(dropped);
    cr_assert_eq(sl_rpc_shm_forget(&map, off, 2 * SL_RPC_SHM_BLOCK_ALIGN - 100, &dropped, &err),
                 SL_OK, "%s", err.msg);
    cr_assert(dropped, "a written page is this process's own: dropped");
    cr_assert_eq(mine[0], 'B', "after the release the block reads the heap again");
    cr_assert_eq(mine[SL_RPC_SHM_BLOCK_ALIGN], 'C');
    /* a block only read (again) has nothing of its own to drop */
    cr_assert_eq(sl_rpc_shm_forget(&map, off, 2 * SL_RPC_SHM_BLOCK_ALIGN, &dropped, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_not(dropped, "pages only read are the heap's: kept mapped");
    cr_assert_eq(mine[0], 'B');
    /* the same by the pagemap's u64s, as on a kernel without PAGEMAP_SCAN
     * (where the first half ran that way already) */
    cr_log_info("PAGEMAP_SCAN %s", map.pagemap_scan ? "used" : "not available");
    map.pagemap_scan = false;
    mine[SL_RPC_SHM_BLOCK_ALIGN] = 'Y';
    cr_assert_eq(sl_rpc_shm_forget(&map, off, 2 * SL_RPC_SHM_BLOCK_ALIGN, &dropped, &err), SL_OK,
                 "%s", err.msg);
    cr_assert(dropped, "the second page written: dropped");
    cr_assert_eq(mine[SL_RPC_SHM_BLOCK_ALIGN], 'C');
    cr_assert_eq(sl_rpc_shm_forget(&map, off, 2 * SL_RPC_SHM_BLOCK_ALIGN, &dropped, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_not(dropped);
    sl_rpc_shm_detach(&map);
    close(s.cfd);
    close(s.ufd);
    sl_shm_heap_free(s.heap, block);
    sl_shm_heap_destroy(s.heap);
}

/* shm_read_only (sluice read): a held batch is read in place from a shared
 * read-only mapping and released as any other. */
Test(trainer_shm, a_read_only_client_reads_in_place_and_releases)
{
    unsetenv("SLUICE_TRAINER_SHM");
    unsetenv("SLUICE_TRAINER_SHM_COPY");
    peer_t p;
    sl_batch_t *want = peer_start_hold(&p, PEER_GOOD, true);
    sl_trainer_t *t = client_ro(p.addr, false, true);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_OK, "%s", err.msg);
    cr_assert(p.hello_hold);
    expect_same_frame(want, b);
    sl_trainer_release(t, b);
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_ERR_CLOSED, "%s",
                 err.msg);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.batches_shm, 1);
    sl_trainer_close(t);
    pthread_join(p.th, NULL);
    cr_assert_eq(p.nreleased, 1, "one release");
    cr_assert_eq(p.released[0], 41);
    cr_assert(hold_ended(p.hold_fd, (int)(tu_timeout(5) * 1000)), "the hold ends with the mapping");
    close(p.hold_fd);
    p.hold_fd = -1;
    close(p.lfd);
    sl_shm_heap_free(p.heap, p.frame);
    sl_shm_heap_destroy(p.heap);
    sl_batch_destroy(want);
}

/* A read-only hold maps the heap shared: the worker's writes show at once,
 * a release has nothing to drop, and the hold is kept as with a private
 * mapping. */
Test(trainer_shm, a_read_only_hold_maps_the_heap_shared)
{
    hold_srv_t s = {.ufd = -1, .cfd = -1};
    sl_error_t err = {0};
    cr_assert_eq(sl_shm_heap_new("ro", 64 * 1024, NULL, &s.heap, &err), SL_OK, "%s", err.msg);
    uint8_t *block = sl_shm_heap_alloc(s.heap, 2 * SL_RPC_SHM_BLOCK_ALIGN);
    cr_assert_not_null(block);
    memset(block, 'A', 2 * SL_RPC_SHM_BLOCK_ALIGN);
    uint64_t off = 0;
    cr_assert(sl_shm_heap_offset(s.heap, block, &off));
    char name[SL_RPC_SHM_NAME_MAX];
    cr_assert_eq(sl_rpc_shm_listen(name, &s.ufd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_shm_nonce(s.nonce, &err), SL_OK);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, hold_serve, &s), 0);
    sl_rpc_shm_map_t map = {0};
    cr_assert_eq(sl_rpc_shm_attach_read(name, s.nonce, sizeof s.nonce,
                                        sl_clock_ms() + (uint64_t)(tu_timeout(10) * 1000), true,
                                        &map, &err),
                 SL_OK, "%s", err.msg);
    pthread_join(th, NULL);
    cr_assert(map.hold);
    cr_assert(map.read_only);
    cr_assert_eq(map.pagemap_fd, -1);
    const uint8_t *mine = map.base + off;
    cr_assert_eq(mine[0], 'A');
    block[0] = 'B';
    cr_assert_eq(mine[0], 'B', "a shared mapping reads the heap");
    bool dropped = true;
    cr_assert_eq(sl_rpc_shm_forget(&map, off + 8, 16, &dropped, &err), SL_ERR_INVALID);
    cr_assert_eq(sl_rpc_shm_forget(&map, off, 2 * SL_RPC_SHM_BLOCK_ALIGN, &dropped, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_not(dropped, "nothing of this process's own");
    sl_rpc_shm_detach(&map);
    close(s.cfd);
    close(s.ufd);
    sl_shm_heap_free(s.heap, block);
    sl_shm_heap_destroy(s.heap);
}

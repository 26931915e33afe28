/* A small fake DPP worker for the trainer client tests: a thread with a
 * listening socket on 127.0.0.1 that speaks the trainer protocol through
 * src/rpc, serves wire-encoded batches built by the test, and checks the
 * client's side of the protocol (credits, acks). Header-only so that every
 * test file that needs it can include it (CMake builds one executable per
 * *_test.c). */
#ifndef SLUICE_TRAINER_FAKE_WORKER_H
#define SLUICE_TRAINER_FAKE_WORKER_H

#include <poll.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc/frame.h"
#include "sluice/wire.h"
#include "testutil.h"

typedef enum fw_mode {
    FW_NORMAL,      /* serve every batch, END once all are acked */
    FW_ERROR_AFTER, /* ERROR once `after` batches are acked */
    FW_CLOSE_AFTER, /* connection 0: send a window, wait for `after` acks and
                       fw_release_close(), hang up; then serve normally */
    FW_BAD_VERSION, /* WELCOME with protocol version 2 */
    FW_BAD_PAYLOAD, /* batch `after` goes out with a corrupted payload */
    FW_SILENT       /* handshake, then never send anything */
} fw_mode_t;

#define FW_MAX_BATCHES 256

typedef struct fake_worker {
    /* set by the test before fw_start */
    fw_mode_t mode;
    uint32_t n; /* batches to serve */
    void *frames[FW_MAX_BATCHES];
    size_t lens[FW_MAX_BATCHES];
    uint32_t sizes[FW_MAX_BATCHES]; /* batch sizes, for BatchInfo */
    /* BatchInfo.record_time_ms of each batch, as sent (differences after
     * the first); NULL: none */
    int64_t *times[FW_MAX_BATCHES];
    uint32_t num_times[FW_MAX_BATCHES];
    uint32_t after;
    uint32_t window; /* the client's prefetch: the credit bound checked */
    uint32_t max_credits;
    /* connection refuse_conn - 1 answers HELLO with ERROR(refuse_code)
     * (0: none); the worker ends after it unless the code says "not now" */
    uint32_t refuse_conn;
    int32_t refuse_code;

    int lfd;
    uint16_t port;
    char addr[64];
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool go_close;

    /* results, valid after fw_join */
    uint32_t acks[FW_MAX_BATCHES]; /* acks per batch index */
    uint32_t unknown_acks;         /* ids never sent, or acked twice */
    uint32_t late_acks;            /* ids of an earlier connection */
    bool credit_violation;
    char violation[256];
    uint64_t bytes_sent; /* every frame sent */
    uint32_t connections;
    uint32_t sent_total; /* batch frames sent, redeliveries included */
    int32_t client_error;
    char client_error_msg[SL_ERROR_MSG_MAX];
    bool got_goodbye;
    char hello_name[64];
    uint32_t hello_rank, hello_world;
} fake_worker_t;

static inline uint64_t fw_id(uint32_t conn, uint32_t i)
{
    return (uint64_t)conn * 100000u + i + 1;
}

static void fw_send(fake_worker_t *w, int fd, sl_rpc_type_t type, const ProtobufCMessage *m,
                    const void *payload, size_t len)
{
    sl_error_t err = {0};
    if (sl_rpc_send(fd, type, m, payload, len, &err) == SL_OK)
        w->bytes_sent +=
            SL_RPC_HEADER_BYTES + protobuf_c_message_get_packed_size(m) + (payload ? len : 0);
}

/* Read frames until the client hangs up (recording ERROR / GOODBYE). */
static void fw_drain(fake_worker_t *w, int fd)
{
    for (;;) {
        sl_rpc_frame_t f;
        if (sl_rpc_recv(fd, NULL, NULL, &f, NULL) != SL_OK) return;
        if (f.type == SL_RPC_GOODBYE) w->got_goodbye = true;
        if (f.type == SL_RPC_ERROR) {
            const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
            w->client_error = e->code;
            snprintf(w->client_error_msg, sizeof w->client_error_msg, "%s", e->message);
        }
        sl_rpc_frame_free(&f);
    }
}

/* One connection. state[i]: 0 to send, 1 in flight on this connection, 2
 * acked. @return true when the worker is done (no more connections). */
static bool fw_serve(fake_worker_t *w, int fd, uint32_t conn, uint8_t *state)
{
    sl_rpc_frame_t f;
    if (sl_rpc_recv(fd, NULL, NULL, &f, NULL) != SL_OK) return false;
    if (f.type == SL_RPC_HELLO) {
        const Sluice__Dpp__Hello *h = (const Sluice__Dpp__Hello *)f.msg;
        snprintf(w->hello_name, sizeof w->hello_name, "%s", h->client_name);
        w->hello_rank = h->rank;
        w->hello_world = h->world_size;
    }
    sl_rpc_frame_free(&f);
    if (conn + 1 == w->refuse_conn) {
        Sluice__Dpp__Error e = SLUICE__DPP__ERROR__INIT;
        e.code = w->refuse_code;
        e.message = "refused by the test worker";
        fw_send(w, fd, SL_RPC_ERROR, &e.base, NULL, 0);
        fw_drain(w, fd);
        return !sl_rpc_error_retriable(w->refuse_code);
    }
    Sluice__Dpp__Welcome wel = SLUICE__DPP__WELCOME__INIT;
    wel.protocol_version = w->mode == FW_BAD_VERSION ? 2 : SL_RPC_VERSION;
    wel.worker_id = "fake-0";
    wel.job_id = "job-test";
    wel.max_credits = w->max_credits;
    fw_send(w, fd, SL_RPC_WELCOME, &wel.base, NULL, 0);
    if (w->mode == FW_BAD_VERSION || w->mode == FW_SILENT) {
        fw_drain(w, fd);
        return true;
    }
    uint32_t window = w->window;
    if (w->max_credits && w->max_credits < window) window = w->max_credits;
    uint64_t granted = 0, sent = 0, acked_here = 0;
    uint32_t acked_total = 0;
    for (uint32_t i = 0; i < w->n; i++)
        acked_total += state[i] == 2;
    for (;;) {
        bool closing_conn = w->mode == FW_CLOSE_AFTER && conn == 0;
        while (sent < granted && !(closing_conn && sent >= window)) {
            uint32_t i = 0;
            while (i < w->n && state[i] != 0)
                i++;
            if (i == w->n) break;
            Sluice__Dpp__BatchInfo bi = SLUICE__DPP__BATCH_INFO__INIT;
            bi.delivery_id = fw_id(conn, i);
            bi.split_id = 7;
            bi.sequence = i;
            bi.num_samples = w->sizes[i];
            bi.record_time_ms = w->times[i];
            bi.n_record_time_ms = w->num_times[i];
            uint8_t *p = w->frames[i];
            if (w->mode == FW_BAD_PAYLOAD && i == w->after) p[0] ^= 0x20; /* "sLCB" */
            fw_send(w, fd, SL_RPC_BATCH, &bi.base, p, w->lens[i]);
            if (w->mode == FW_BAD_PAYLOAD && i == w->after) p[0] ^= 0x20;
            state[i] = 1;
            sent++;
            w->sent_total++;
        }
        if (acked_total == w->n && w->mode != FW_ERROR_AFTER) {
            Sluice__Dpp__End end = SLUICE__DPP__END__INIT;
            end.epochs = 1;
            end.batches = w->n;
            fw_send(w, fd, SL_RPC_END, &end.base, NULL, 0);
            fw_drain(w, fd);
            return true;
        }
        if (w->mode == FW_ERROR_AFTER && acked_total >= w->after) {
            sl_rpc_send_error(fd, SL_ERR_CORRUPT, "split 7 stripe 3: checksum mismatch");
            fw_drain(w, fd);
            return true;
        }
        if (closing_conn && acked_here >= w->after) {
            pthread_mutex_lock(&w->mu);
            while (!w->go_close)
                pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
            return false; /* hang up with batches in flight */
        }
        if (sl_rpc_recv(fd, NULL, NULL, &f, NULL) != SL_OK) return !closing_conn;
        if (f.type == SL_RPC_REQUEST) {
            granted += ((const Sluice__Dpp__Request *)f.msg)->credits;
            if (granted - acked_here > window && !w->credit_violation) {
                w->credit_violation = true;
                snprintf(w->violation, sizeof w->violation,
                         "connection %u: %llu granted, %llu acked, window %u", conn,
                         (unsigned long long)granted, (unsigned long long)acked_here, window);
            }
        } else if (f.type == SL_RPC_ACK) {
            const Sluice__Dpp__Ack *a = (const Sluice__Dpp__Ack *)f.msg;
            for (size_t k = 0; k < a->n_delivery_ids; k++) {
                uint64_t id = a->delivery_ids[k];
                uint32_t i = (uint32_t)((id - 1) % 100000u), c = (uint32_t)((id - 1) / 100000u);
                if (id == 0 || i >= w->n || c > conn) {
                    w->unknown_acks++;
                } else if (c < conn) {
                    w->late_acks++;
                } else if (state[i] != 1) {
                    w->unknown_acks++;
                } else {
                    state[i] = 2;
                    w->acks[i]++;
                    acked_here++;
                    acked_total++;
                }
            }
        } else if (f.type == SL_RPC_GOODBYE) {
            w->got_goodbye = true;
            sl_rpc_frame_free(&f);
            return true;
        } else if (f.type == SL_RPC_ERROR) {
            const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
            w->client_error = e->code;
            snprintf(w->client_error_msg, sizeof w->client_error_msg, "%s", e->message);
            sl_rpc_frame_free(&f);
            return true;
        }
        sl_rpc_frame_free(&f);
    }
}

static void *fw_main(void *arg)
{
    fake_worker_t *w = arg;
    uint8_t state[FW_MAX_BATCHES] = {0};
    for (uint32_t conn = 0;; conn++) {
        struct pollfd p = {.fd = w->lfd, .events = POLLIN};
        /* A client that never comes back ends the worker. */
        if (poll(&p, 1, (int)(tu_timeout(10) * 1000)) <= 0) break;
        int fd = accept(w->lfd, NULL, NULL);
        if (fd < 0) break;
        w->connections++;
        bool done = fw_serve(w, fd, conn, state);
        close(fd);
        /* Whatever was in flight on this connection is sent again. */
        for (uint32_t i = 0; i < w->n; i++)
            if (state[i] == 1) state[i] = 0;
        if (done) break;
    }
    return NULL;
}

static void fw_start(fake_worker_t *w)
{
    sl_error_t err = {0};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (sl_rpc_listen("127.0.0.1:0", 4, &w->lfd, &w->port, &err) != SL_OK) {
        fprintf(stderr, "fake worker: %s\n", err.msg);
        abort();
    }
    snprintf(w->addr, sizeof w->addr, "127.0.0.1:%u", w->port);
    pthread_create(&w->th, NULL, fw_main, w);
}

static void fw_release_close(fake_worker_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->go_close = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void fw_join(fake_worker_t *w)
{
    fw_release_close(w);
    pthread_join(w->th, NULL);
    close(w->lfd);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* ---- test batches ---- */

/* A random valid batch of B rows: a plain KJT of 2 keys (one weighted), one
 * dedup group of 2 keys over U <= B unique rows, named dense [B,3], labels
 * [B,1], sample ids, origin sequence seq. */
static sl_batch_t *fw_random_batch(uint64_t *rng, uint32_t B, uint64_t seq)
{
    sl_batch_t *b = sl_batch_new(NULL);
    b->batch_size = B;
    const char *plain[2] = {"item_id", "item_tags"};
    uint64_t nv = 0;
    int32_t len[64];
    for (uint32_t r = 0; r < 2 * B; r++)
        nv += (uint64_t)(len[r] = (int32_t)tu_below(rng, 4));
    sl_kjt_init(&b->sparse, b->arena, 2, plain, B, nv, true);
    memcpy(b->sparse.lengths, len, 2 * B * sizeof(int32_t));
    for (uint64_t v = 0; v < nv; v++) {
        b->sparse.values[v] = (int64_t)tu_next(rng);
        b->sparse.weights[v] = (float)tu_below(rng, 100) / 4.0f;
    }
    b->num_groups = 1;
    b->groups = sl_arena_calloc(b->arena, 1, sizeof(sl_ikjt_t));
    sl_ikjt_t *g = &b->groups[0];
    g->name = sl_arena_strdup(b->arena, "user");
    uint32_t U = 1 + (uint32_t)tu_below(rng, B);
    const char *ukeys[2] = {"user_id", "user_history"};
    nv = 0;
    for (uint32_t r = 0; r < 2 * U; r++)
        nv += (uint64_t)(len[r] = (int32_t)tu_below(rng, 5));
    sl_kjt_init(&g->unique, b->arena, 2, ukeys, U, nv, false);
    memcpy(g->unique.lengths, len, 2 * U * sizeof(int32_t));
    for (uint64_t v = 0; v < nv; v++)
        g->unique.values[v] = (int64_t)tu_below(rng, 1000000);
    g->batch_size = B;
    g->inverse = sl_arena_alloc(b->arena, B * sizeof(int32_t));
    for (uint32_t r = 0; r < B; r++)
        g->inverse[r] = r < U ? (int32_t)r : (int32_t)tu_below(rng, U);
    const char *dn[3] = {"age", "price", "ctr"};
    sl_dense_init(&b->dense, b->arena, B, 3, dn);
    for (uint32_t k = 0; k < 3 * B; k++)
        b->dense.data[k] = (float)tu_below(rng, 1000) / 8.0f;
    const char *ln[1] = {"click"};
    sl_dense_init(&b->labels, b->arena, B, 1, ln);
    for (uint32_t r = 0; r < B; r++)
        b->labels.data[r] = (float)tu_below(rng, 2);
    b->sample_ids = sl_arena_alloc(b->arena, B * sizeof(int64_t));
    for (uint32_t r = 0; r < B; r++)
        b->sample_ids[r] = (int64_t)(seq * 1000 + r);
    b->origin = (sl_batch_origin_t){.job_id = 1, .epoch = 0, .split_id = 7, .sequence = seq};
    return b;
}

/* Fill w with n random batches (kept in originals[] when not NULL). */
static void fw_fill(fake_worker_t *w, uint64_t *rng, uint32_t n, sl_batch_t **originals)
{
    w->n = n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t B = 1 + (uint32_t)tu_below(rng, 16);
        sl_batch_t *b = fw_random_batch(rng, B, i);
        sl_error_t err = {0};
        if (sl_wire_encode(b, NULL, &w->frames[i], &w->lens[i], &err) != SL_OK) {
            fprintf(stderr, "fake worker: encode: %s\n", err.msg);
            abort();
        }
        w->sizes[i] = B;
        if (originals)
            originals[i] = b;
        else
            sl_batch_destroy(b);
    }
}

static void fw_free(fake_worker_t *w)
{
    for (uint32_t i = 0; i < w->n; i++)
        sl_free(NULL, w->frames[i], w->lens[i]);
}

#endif

/* A fake DPP master and fake workers for tests/unit/trainer_master_test.c
 * (the trainer client in master mode). The master answers ATTACH with the
 * workers the test names, commits row ranges exactly as the design says
 * (accepted iff no overlap with a committed range of the split; the same
 * (client, nonce) gets its first answer again), and builds a readable resume
 * token. A worker serves a fixed list of batches, each one row range of one
 * split, honours credits, and sends every unacknowledged batch again on a
 * new connection. Header-only, for one test file. */
#ifndef SLUICE_TRAINER_MASTER_FAKES_H
#define SLUICE_TRAINER_MASTER_FAKES_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "rpc/frame.h"
#include "sluice/wire.h"

#define FK_MAX_BATCHES 64
#define FK_MAX_SPLITS 16
#define FK_MAX_NONCES 1024
#define FK_MAX_FRAMES 256
#define FK_MAX_STATS 256

/* ---- a fake worker ---- */

typedef struct fk_batch {
    uint32_t split, rank_plus_one, epoch;
    uint64_t from, to, generation;
    uint64_t g_plus_one; /* the deterministic order: sent on the g-window, not on credits */
    void *frame;
    size_t len;
} fk_batch_t;

typedef struct fk_worker {
    /* set by the test before fk_worker_start */
    char id[32];
    const char *job;
    fk_batch_t b[FK_MAX_BATCHES];
    uint32_t n;
    uint32_t close_after; /* connection 0 hangs up after sending this many (0: never) */
    uint32_t refuse;      /* the first `refuse` connections answer HELLO with ERROR */
    int32_t refuse_code;

    int lfd;
    char addr[64];
    pthread_t th;
    atomic_bool stop;
    /* results (read after fk_worker_stop) */
    uint32_t acks[FK_MAX_BATCHES];       /* acks per batch, over all its deliveries */
    uint32_t sent[FK_MAX_BATCHES];       /* deliveries per batch */
    uint8_t acked_id[4][FK_MAX_BATCHES]; /* per connection and batch */
    uint32_t connections, bad_acks, total_sent, total_acked;
    uint32_t acked_batches; /* batches acked at least once (atomic) */
    /* every frame it read after HELLO, in order: 'R' with its credits, 'A'
     * with its ids, 'G' (GOODBYE) */
    char frame_type[FK_MAX_FRAMES];
    uint32_t frame_count[FK_MAX_FRAMES];
    uint32_t nframes;
} fk_worker_t;

static void fk_log_frame(fk_worker_t *w, char type, uint32_t count)
{
    if (w->nframes == FK_MAX_FRAMES) return;
    w->frame_type[w->nframes] = type;
    w->frame_count[w->nframes] = count;
    w->nframes++;
}

/* Sample ids are split * 1000 + row: the test checks each arrives once. */
static void fk_add(fk_worker_t *w, uint32_t split, uint64_t from, uint64_t to, uint64_t gen,
                   uint32_t rank_plus_one)
{
    uint32_t B = (uint32_t)(to - from);
    sl_batch_t *b = sl_batch_new(NULL);
    b->batch_size = B;
    const char *keys[1] = {"item"};
    sl_kjt_init(&b->sparse, b->arena, 1, keys, B, B, false);
    for (uint32_t r = 0; r < B; r++) {
        b->sparse.lengths[r] = 1;
        b->sparse.values[r] = (int64_t)(split * 1000 + from + r) * 7;
    }
    const char *ln[1] = {"click"};
    sl_dense_init(&b->labels, b->arena, B, 1, ln);
    for (uint32_t r = 0; r < B; r++)
        b->labels.data[r] = (float)(r % 2);
    b->sample_ids = sl_arena_alloc(b->arena, B * sizeof(int64_t));
    for (uint32_t r = 0; r < B; r++)
        b->sample_ids[r] = (int64_t)(split * 1000 + from + r);
    fk_batch_t *fb = &w->b[w->n++];
    *fb = (fk_batch_t){
        .split = split, .from = from, .to = to, .generation = gen, .rank_plus_one = rank_plus_one};
    sl_error_t err = {0};
    if (sl_wire_encode(b, NULL, &fb->frame, &fb->len, &err) != SL_OK) {
        fprintf(stderr, "fake worker: encode: %s\n", err.msg);
        abort();
    }
    sl_batch_destroy(b);
}

static bool fk_send_batch(fk_worker_t *w, int fd, uint32_t conn, uint32_t i)
{
    fk_batch_t *fb = &w->b[i];
    Sluice__Dpp__BatchInfo bi = SLUICE__DPP__BATCH_INFO__INIT;
    bi.delivery_id = (uint64_t)conn * 1000 + i + 1;
    bi.split_id = fb->split;
    bi.epoch = fb->epoch;
    bi.sequence = i;
    bi.num_samples = (uint32_t)(fb->to - fb->from);
    bi.job_id = (char *)w->job;
    bi.split = fb->split;
    bi.generation = fb->generation;
    bi.from_row = fb->from;
    bi.to_row = fb->to;
    bi.rank_plus_one = fb->rank_plus_one;
    bi.order_g_plus_one = fb->g_plus_one;
    __atomic_add_fetch(&w->sent[i], 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&w->total_sent, 1, __ATOMIC_SEQ_CST);
    return sl_rpc_send(fd, SL_RPC_BATCH, &bi.base, fb->frame, fb->len, NULL) == SL_OK;
}

static void fk_worker_serve(fk_worker_t *w, int fd, uint32_t conn)
{
    sl_rpc_frame_t f;
    if (sl_rpc_recv(fd, NULL, NULL, &f, NULL) != SL_OK) return;
    bool hello = f.type == SL_RPC_HELLO;
    sl_rpc_frame_free(&f);
    if (!hello) return;
    if (conn < w->refuse) {
        sl_rpc_send_error(fd, w->refuse_code, "refused by the test worker");
        return;
    }
    Sluice__Dpp__Welcome wel = SLUICE__DPP__WELCOME__INIT;
    wel.protocol_version = SL_RPC_VERSION;
    wel.worker_id = w->id;
    wel.job_id = (char *)w->job;
    if (sl_rpc_send(fd, SL_RPC_WELCOME, &wel.base, NULL, 0, NULL) != SL_OK) return;
    /* Every batch not yet acked goes out (again) on this connection. */
    bool todo[FK_MAX_BATCHES];
    for (uint32_t i = 0; i < w->n; i++)
        todo[i] = w->acks[i] == 0;
    uint64_t credits = 0, sent_here = 0, win_limit = 0;
    uint32_t next = 0, win_epoch = 0;
    /* Once stopped, what the client sent before it (its last ACKs and
     * GOODBYE, already in the socket when the test calls fk_worker_stop
     * after sl_trainer_close) is still read and logged, until 20 ms pass
     * with nothing more, for at most 1 s: stopping at once dropped a
     * GOODBYE this thread had not read yet (CI, 1 run). */
    uint64_t drain_until = 0;
    for (;;) {
        if (atomic_load(&w->stop) && drain_until == 0) drain_until = sl_clock_ms() + 1000;
        if (drain_until != 0 && sl_clock_ms() >= drain_until) return;
        while (drain_until == 0) { /* sending: not once stopped */
            while (next < w->n && !todo[next])
                next++;
            if (next >= w->n) break;
            /* in list order: an ordered batch below the window, any other
             * on a credit */
            const fk_batch_t *fb = &w->b[next];
            bool ok = fb->g_plus_one ? fb->epoch < win_epoch || (fb->epoch == win_epoch &&
                                                                 fb->g_plus_one - 1 < win_limit)
                                     : credits > 0;
            if (!ok) break;
            if (conn == 0 && w->close_after && sent_here == w->close_after) return;
            if (!fk_send_batch(w, fd, conn, next)) return;
            todo[next++] = false;
            if (!fb->g_plus_one) credits--;
            sent_here++;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) {
            if (drain_until != 0) return;
            continue;
        }
        if (sl_rpc_recv(fd, NULL, NULL, &f, NULL) != SL_OK) return;
        if (f.type == SL_RPC_REQUEST) {
            const Sluice__Dpp__Request *rq = (const Sluice__Dpp__Request *)f.msg;
            credits += rq->credits;
            fk_log_frame(w, 'R', rq->credits);
            if (rq->order_epoch > win_epoch ||
                (rq->order_epoch == win_epoch && rq->order_g_limit > win_limit)) {
                win_epoch = rq->order_epoch;
                win_limit = rq->order_g_limit;
            }
        } else if (f.type == SL_RPC_ACK) {
            Sluice__Dpp__Ack *a = (Sluice__Dpp__Ack *)f.msg;
            fk_log_frame(w, 'A', (uint32_t)a->n_delivery_ids);
            for (size_t k = 0; k < a->n_delivery_ids; k++) {
                uint64_t id = a->delivery_ids[k];
                uint32_t i = (uint32_t)((id - 1) % 1000), c = (uint32_t)((id - 1) / 1000);
                if (id == 0 || i >= w->n || c >= 4 || w->acked_id[c][i]) {
                    w->bad_acks++;
                    continue;
                }
                w->acked_id[c][i] = 1;
                if (w->acks[i]++ == 0) __atomic_add_fetch(&w->acked_batches, 1, __ATOMIC_SEQ_CST);
                __atomic_add_fetch(&w->total_acked, 1, __ATOMIC_SEQ_CST);
            }
        } else if (f.type == SL_RPC_GOODBYE) {
            fk_log_frame(w, 'G', 0);
            sl_rpc_frame_free(&f);
            return;
        }
        sl_rpc_frame_free(&f);
    }
}

static void *fk_worker_main(void *arg)
{
    fk_worker_t *w = arg;
    while (!atomic_load(&w->stop)) {
        struct pollfd p = {.fd = w->lfd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) continue;
        int fd = accept(w->lfd, NULL, NULL);
        if (fd < 0) continue;
        if (w->connections < 4) fk_worker_serve(w, fd, w->connections++);
        close(fd);
    }
    return NULL;
}

static void fk_worker_start(fk_worker_t *w)
{
    uint16_t port = 0;
    sl_error_t err = {0};
    if (sl_rpc_listen("127.0.0.1:0", 8, &w->lfd, &port, &err) != SL_OK) {
        fprintf(stderr, "fake worker: %s\n", err.msg);
        abort();
    }
    snprintf(w->addr, sizeof w->addr, "127.0.0.1:%u", port);
    atomic_store(&w->stop, false);
    pthread_create(&w->th, NULL, fk_worker_main, w);
}

/* Every batch acked: nothing more will be sent. */
static bool fk_worker_idle(fk_worker_t *w)
{
    return __atomic_load_n(&w->acked_batches, __ATOMIC_SEQ_CST) == w->n;
}

static void fk_worker_stop(fk_worker_t *w)
{
    atomic_store(&w->stop, true);
    pthread_join(w->th, NULL);
    close(w->lfd);
    for (uint32_t i = 0; i < w->n; i++)
        sl_free(NULL, w->b[i].frame, w->b[i].len);
}

/* ---- a fake master ---- */

typedef struct fk_range {
    uint64_t from, to;
} fk_range_t;

typedef struct fk_master {
    /* set by the test before fk_master_start (workers may change later, under mu) */
    const char *job;
    uint32_t splits;
    uint64_t rows_per_split;
    uint32_t drop_at_commit; /* hang up instead of answering this commit (1-based; 0 never) */
    uint32_t order_ranks;    /* ATTACHED's: the deterministic order's ranks (0: another order) */
    uint32_t epoch;          /* ATTACHED's (under mu once started) */

    pthread_mutex_t mu;
    const char *worker_ids[4];
    const char *worker_addrs[4];
    uint32_t nworkers;

    int lfd;
    char addr[64];
    pthread_t th;
    atomic_bool stop;
    /* state and results, under mu */
    fk_range_t done[FK_MAX_SPLITS][FK_MAX_BATCHES];
    uint32_t ndone[FK_MAX_SPLITS];
    uint64_t rows_done;
    int answers[FK_MAX_NONCES + 1]; /* 0 none, else result + 1 */
    char client_id[128];
    uint32_t commits, repeated_nonces, attaches, stats_msgs, connections, client_ids_seen;
    uint64_t stats_batches;
    /* the first FK_MAX_STATS CLIENT_STATS: wait, elapsed, when received (sl_clock_ns) */
    uint64_t stats_wait[FK_MAX_STATS], stats_elapsed[FK_MAX_STATS], stats_at[FK_MAX_STATS];
    bool bad_attach;
} fk_master_t;

static int fk_commit(fk_master_t *m, const Sluice__Control__Commit *c)
{
    uint32_t s = c->ref ? c->ref->split : FK_MAX_SPLITS;
    if (!c->ref || !c->rows || strcmp(c->ref->job_id, m->job) != 0)
        return SLUICE__CONTROL__COMMIT_REPLY__RESULT__UNKNOWN;
    if (s >= m->splits || c->rows->to_row > m->rows_per_split)
        return SLUICE__CONTROL__COMMIT_REPLY__RESULT__UNKNOWN;
    for (uint32_t k = 0; k < m->ndone[s]; k++)
        if (c->rows->from_row < m->done[s][k].to && m->done[s][k].from < c->rows->to_row)
            return SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP;
    m->done[s][m->ndone[s]++] = (fk_range_t){c->rows->from_row, c->rows->to_row};
    m->rows_done += c->rows->to_row - c->rows->from_row;
    return SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED;
}

/* "split:from-to," for every committed range not listed undelivered, by
 * split then from; "@step" after them when the request has a step. */
static void fk_token(fk_master_t *m, const Sluice__Control__TokenRequest *r, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (uint32_t s = 0; s < m->splits; s++) {
        fk_range_t v[FK_MAX_BATCHES];
        uint32_t n = 0;
        for (uint32_t k = 0; k < m->ndone[s]; k++) {
            bool undelivered = false;
            for (size_t u = 0; u < r->n_undelivered_refs && u < r->n_undelivered_rows; u++)
                if (r->undelivered_refs[u]->split == s &&
                    r->undelivered_rows[u]->from_row == m->done[s][k].from &&
                    r->undelivered_rows[u]->to_row == m->done[s][k].to)
                    undelivered = true;
            if (!undelivered) v[n++] = m->done[s][k];
        }
        for (uint32_t i = 1; i < n; i++)
            for (uint32_t j = i; j > 0 && v[j].from < v[j - 1].from; j--) {
                fk_range_t x = v[j];
                v[j] = v[j - 1];
                v[j - 1] = x;
            }
        for (uint32_t i = 0; i < n; i++)
            len += (size_t)snprintf(out + len, cap - len, "%u:%llu-%llu,", s,
                                    (unsigned long long)v[i].from, (unsigned long long)v[i].to);
    }
    /* the checkpoint step the trainer gave (sl_trainer_resume_token_at) */
    if (r->has_step) snprintf(out + len, cap - len, "@%llu", (unsigned long long)r->step);
}

static void fk_attached(fk_master_t *m, int fd)
{
    Sluice__Control__WorkerInfo wi[4], *wp[4];
    Sluice__Control__Attached a = SLUICE__CONTROL__ATTACHED__INIT;
    for (uint32_t i = 0; i < m->nworkers; i++) {
        sluice__control__worker_info__init(&wi[i]);
        wi[i].worker_id = (char *)m->worker_ids[i];
        wi[i].serve_address = (char *)m->worker_addrs[i];
        wp[i] = &wi[i];
    }
    a.n_workers = m->nworkers;
    a.workers = wp;
    a.finished = m->rows_done == (uint64_t)m->splits * m->rows_per_split;
    a.sharding = "dynamic";
    a.order_ranks = m->order_ranks;
    a.epoch = m->epoch;
    sl_rpc_send(fd, SL_RPC_ATTACHED, &a.base, NULL, 0, NULL);
}

/* One client connection; @return when it ends. */
static void fk_master_serve(fk_master_t *m, int fd)
{
    while (!atomic_load(&m->stop)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) continue;
        sl_rpc_frame_t f;
        if (sl_rpc_recv(fd, NULL, NULL, &f, NULL) != SL_OK) return;
        bool hang_up = false;
        pthread_mutex_lock(&m->mu);
        if (f.type == SL_RPC_ATTACH) {
            Sluice__Control__Attach *a = (Sluice__Control__Attach *)f.msg;
            m->attaches++;
            if (a->protocol_version != SL_RPC_VERSION || !a->client_id[0]) m->bad_attach = true;
            if (strcmp(a->client_id, m->client_id) != 0) {
                snprintf(m->client_id, sizeof m->client_id, "%s", a->client_id);
                m->client_ids_seen++;
            }
            if (strcmp(a->job_id, m->job) != 0) {
                sl_rpc_send_error(fd, SL_ERR_NOT_FOUND, "no job named that here");
                hang_up = true;
            } else {
                fk_attached(m, fd);
            }
        } else if (f.type == SL_RPC_COMMIT) {
            Sluice__Control__Commit *c = (Sluice__Control__Commit *)f.msg;
            m->commits++;
            int res;
            if (c->nonce == 0 || c->nonce > FK_MAX_NONCES) {
                res = SLUICE__CONTROL__COMMIT_REPLY__RESULT__UNKNOWN;
            } else if (m->answers[c->nonce]) {
                m->repeated_nonces++;
                res = m->answers[c->nonce] - 1;
            } else {
                res = fk_commit(m, c);
                m->answers[c->nonce] = res + 1;
            }
            if (m->drop_at_commit && m->commits == m->drop_at_commit) {
                hang_up = true; /* committed, but the answer is lost */
            } else {
                Sluice__Control__CommitReply r = SLUICE__CONTROL__COMMIT_REPLY__INIT;
                r.nonce = c->nonce;
                r.result = (Sluice__Control__CommitReply__Result)res;
                sl_rpc_send(fd, SL_RPC_COMMIT_REPLY, &r.base, NULL, 0, NULL);
            }
        } else if (f.type == SL_RPC_CLIENT_STATS) {
            const Sluice__Control__ClientStats *cs = (const Sluice__Control__ClientStats *)f.msg;
            if (m->stats_msgs < FK_MAX_STATS) {
                m->stats_wait[m->stats_msgs] = cs->wait_ns;
                m->stats_elapsed[m->stats_msgs] = cs->elapsed_ns;
                m->stats_at[m->stats_msgs] = sl_clock_ns();
            }
            m->stats_msgs++;
            m->stats_batches += cs->batches;
        } else if (f.type == SL_RPC_TOKEN_REQUEST) {
            char text[4096];
            fk_token(m, (Sluice__Control__TokenRequest *)f.msg, text, sizeof text);
            Sluice__Control__Token tok = SLUICE__CONTROL__TOKEN__INIT;
            tok.token.data = (uint8_t *)text;
            tok.token.len = strlen(text) + 1;
            sl_rpc_send(fd, SL_RPC_TOKEN, &tok.base, NULL, 0, NULL);
        } else if (f.type == SL_RPC_GOODBYE) {
            hang_up = true;
        }
        pthread_mutex_unlock(&m->mu);
        sl_rpc_frame_free(&f);
        if (hang_up) return;
    }
}

static void *fk_master_main(void *arg)
{
    fk_master_t *m = arg;
    while (!atomic_load(&m->stop)) {
        struct pollfd p = {.fd = m->lfd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) continue;
        int fd = accept(m->lfd, NULL, NULL);
        if (fd < 0) continue;
        pthread_mutex_lock(&m->mu);
        m->connections++;
        pthread_mutex_unlock(&m->mu);
        fk_master_serve(m, fd);
        close(fd);
    }
    return NULL;
}

static void fk_master_start(fk_master_t *m)
{
    uint16_t port = 0;
    sl_error_t err = {0};
    pthread_mutex_init(&m->mu, NULL);
    if (sl_rpc_listen("127.0.0.1:0", 8, &m->lfd, &port, &err) != SL_OK) {
        fprintf(stderr, "fake master: %s\n", err.msg);
        abort();
    }
    snprintf(m->addr, sizeof m->addr, "127.0.0.1:%u", port);
    atomic_store(&m->stop, false);
    pthread_create(&m->th, NULL, fk_master_main, m);
}

static void fk_master_add_worker(fk_master_t *m, const fk_worker_t *w)
{
    pthread_mutex_lock(&m->mu);
    m->worker_ids[m->nworkers] = w->id;
    m->worker_addrs[m->nworkers] = w->addr;
    m->nworkers++;
    pthread_mutex_unlock(&m->mu);
}

static void fk_master_stop(fk_master_t *m)
{
    atomic_store(&m->stop, true);
    pthread_join(m->th, NULL);
    close(m->lfd);
    pthread_mutex_destroy(&m->mu);
}

#endif

/* A fake DPP master and a fake trainer client for lease_client_test.c:
 * the master hands out a queue of leases (LEASE, NO_WORK, "finished"),
 * answers heartbeats (with a revocation when asked) and records the
 * SPLIT_READs, checking that every batch of the lease had been
 * acknowledged by then; the client reads batches, records them (before it
 * acknowledges them) and checks their rank. Failures in these threads are
 * recorded (TCHECK) and asserted by the test (no_thread_fails). */
#ifndef SLUICE_TEST_FAKE_MASTER_H
#define SLUICE_TEST_FAKE_MASTER_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "dpp/worker/runtime/worker.h"
#include "rpc/frame.h"
#include "sluice/wire.h"

#define MAX_LEASES 64
#define MAX_BATCHES 4096

/* ---- checks in helper threads (Criterion asserts only in the test's own) ---- */

static atomic_int thread_fails;
static char thread_fail_msg[1024];

#define TCHECK(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond) && atomic_fetch_add(&thread_fails, 1) == 0)                                    \
            snprintf(thread_fail_msg, sizeof thread_fail_msg, __VA_ARGS__);                        \
    } while (0)

static void no_thread_fails(void)
{
    cr_assert_eq(atomic_load(&thread_fails), 0, "in a helper thread: %s", thread_fail_msg);
}

/* ---- what the clients received ---- */

typedef struct got_batch {
    uint32_t split, epoch, rank_plus_one, n;
    uint64_t generation, from, to;
    uint64_t g_plus_one; /* BatchInfo.order_g_plus_one */
    int64_t ids[128];
    char job[32];
} got_batch_t;

/* ---- the fake master ---- */

typedef struct fm_lease {
    uint32_t split, epoch, rank_plus_one, ntodo;
    uint64_t generation;
    sl_dpp_row_range_t todo[4];
    /* > 0: a shared pass (Lease.shared) with a member lease of job "joby"
     * under this generation */
    uint64_t member_gen;
    /* the deterministic order: LEASE order_ranks, order_base_plus_one, and
     * 1 + the base every HEARTBEAT_REPLY gives once granted (0: none) */
    uint32_t order_ranks;
    uint64_t order_base_plus_one, hb_base_plus_one;
    /* 1 + the count a HEARTBEAT's counts gave (0: none), and whether it
     * came before the lease's SPLIT_READ */
    uint64_t hb_count_plus_one;
    bool hb_count_before_read;
    /* a resumed deterministic job: LEASE order_skip */
    uint32_t nskip;
    sl_dpp_row_range_t skip[4];
    /* a Lease.cache_local WRITE lease of this name (NULL: no cache) */
    const char *cache_name;
} fm_lease_t;

typedef struct fm_read {
    uint32_t split;
    uint64_t generation;
    uint32_t nempty;
    sl_dpp_row_range_t empty[64];
    bool all_acked; /* every batch of the lease had been acknowledged by then */
    char job[16];   /* "jobx", or "joby" for a member lease */
    bool detached;
    bool counted; /* the deterministic order's count */
    uint64_t batches;
} fm_read_t;

typedef struct fake {
    const sl_wh_splits_t *splits; /* the job's, borrowed */
    int lfd;
    uint16_t port;
    pthread_t th;
    atomic_bool stop;
    pthread_mutex_t mu;
    const char *spec;
    fm_lease_t q[MAX_LEASES];
    uint32_t nq, next;
    bool hold;            /* no leases for now (NO_WORK) */
    uint32_t lease_limit; /* > 0: no lease past the first lease_limit for now (NO_WORK) */
    bool finish;          /* NO_WORK "finished" once the queue is empty */
    int drop_after_reads; /* close the connection once after this many SPLIT_READs (0: never) */
    bool dropped;
    uint32_t registers, heartbeats, lease_requests;
    uint64_t incarnation;         /* of the first REGISTER; every later one must carry the same */
    bool unnamed_lease;           /* a REGISTER did not name a lease granted and not yet read */
    bool named_unknown;           /* a REGISTER named a lease never granted */
    uint32_t named_on_reregister; /* leases named by the last REGISTER after the first */
    uint32_t refuse_after;        /* > 0: refuse REGISTERs after this many (the id is in use) */
    uint64_t revoke_gen;          /* revoke this generation in the next heartbeat reply (0: none) */
    bool revoked_sent;
    uint64_t hb_leases_max;
    fm_read_t reads[MAX_LEASES];
    uint32_t nreads;
    /* SPLIT_FAILED: how many, and the last one's generation, code and
     * message (answered SKIPPED: the fake never leases a split again) */
    uint32_t nfailed;
    uint64_t failed_gen;
    int32_t failed_code;
    char failed_msg[256];
    /* batches the clients acknowledged (recorded before the ACK goes out) */
    got_batch_t *got;
    uint32_t ngot;
    /* Heartbeat.cache_evicted, as they came */
    uint64_t evicted_fp[16];
    uint32_t evicted_split[16], nevicted;
} fake_t;

/* The ref of lease l of job (its own generation, or its member's). */
static void fm_ref(Sluice__Control__SplitRef *r, const char *job, const fm_lease_t *l,
                   uint64_t generation)
{
    sluice__control__split_ref__init(r);
    r->job_id = (char *)job;
    r->epoch = l->epoch;
    r->split = l->split;
    r->generation = generation;
}

static void fm_send_lease(fake_t *f, int fd, const fm_lease_t *l)
{
    const sl_wh_split_t *sp = &f->splits->items[l->split];
    Sluice__Control__SplitRef ref;
    fm_ref(&ref, "jobx", l, l->generation);
    Sluice__Control__RowRange rr[4], *rp[4];
    for (uint32_t i = 0; i < l->ntodo; i++) {
        rr[i] = (Sluice__Control__RowRange)SLUICE__CONTROL__ROW_RANGE__INIT;
        rr[i].from_row = l->todo[i].from_row;
        rr[i].to_row = l->todo[i].to_row;
        rp[i] = &rr[i];
    }
    Sluice__Control__Lease m = SLUICE__CONTROL__LEASE__INIT;
    m.ref = &ref;
    m.job_spec_json = (char *)f->spec;
    m.path = (char *)sp->path;
    m.stripe_begin = sp->stripe_begin;
    m.stripe_end = sp->stripe_end;
    m.first_row = sp->first_row;
    m.num_rows = sp->num_rows;
    m.n_todo = l->ntodo;
    m.todo = rp;
    m.rank_plus_one = l->rank_plus_one;
    m.order_ranks = l->order_ranks;
    m.order_base_plus_one = l->order_base_plus_one;
    Sluice__Control__RowRange sr[4], *sp_[4];
    for (uint32_t i = 0; i < l->nskip; i++) {
        sr[i] = (Sluice__Control__RowRange)SLUICE__CONTROL__ROW_RANGE__INIT;
        sr[i].from_row = l->skip[i].from_row;
        sr[i].to_row = l->skip[i].to_row;
        sp_[i] = &sr[i];
    }
    m.n_order_skip = l->nskip;
    m.order_skip = sp_;
    m.expiry_ms = 2000;
    if (l->cache_name) {
        m.cache_file = (char *)l->cache_name;
        m.cache_mode = SLUICE__CONTROL__LEASE__CACHE_MODE__CACHE_WRITE;
        m.cache_local = true;
    }
    Sluice__Control__SplitRef member, *mp = &member;
    if (l->member_gen) {
        fm_ref(&member, "joby", l, l->member_gen);
        m.n_shared = 1;
        m.shared = &mp;
    }
    sl_rpc_send(fd, SL_RPC_LEASE, &m.base, NULL, 0, NULL);
}

/* Rows of (split, generation) the clients acknowledged, under f->mu. */
static uint64_t acked_rows(const fake_t *f, uint32_t split, uint64_t gen)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < f->ngot; i++)
        if (f->got[i].split == split && f->got[i].generation == gen)
            n += f->got[i].to - f->got[i].from;
    return n;
}

static const fm_lease_t *lease_of_gen(const fake_t *f, uint64_t gen)
{
    for (uint32_t i = 0; i < f->nq; i++)
        if (f->q[i].generation == gen || (f->q[i].member_gen && f->q[i].member_gen == gen))
            return &f->q[i];
    return NULL;
}

static void fm_serve(fake_t *f, int fd)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (atomic_load(&f->stop)) return;
        if (poll(&p, 1, 50) <= 0) continue;
        sl_rpc_frame_t fr = {0};
        if (sl_rpc_recv(fd, NULL, NULL, &fr, NULL) != SL_OK) return;
        pthread_mutex_lock(&f->mu);
        bool drop = false;
        switch (fr.type) {
        case SL_RPC_REGISTER: {
            const Sluice__Control__Register *r = (const Sluice__Control__Register *)fr.msg;
            TCHECK(strcmp(r->worker_id, "w1") == 0, "register: worker id %s", r->worker_id);
            TCHECK(strncmp(r->serve_address, "127.0.0.1:", 10) == 0, "serve address %s",
                   r->serve_address);
            f->registers++;
            TCHECK(r->incarnation != 0, "register without an incarnation");
            if (f->registers == 1) f->incarnation = r->incarnation;
            TCHECK(r->incarnation == f->incarnation, "incarnation changed across reconnects");
            /* it names every lease granted and not read, and no other */
            for (uint32_t i = 0; i < f->next; i++) {
                bool read = false, named = false;
                for (uint32_t k = 0; k < f->nreads && !read; k++)
                    read = f->reads[k].generation == f->q[i].generation;
                for (size_t k = 0; k < r->n_leases && !named; k++)
                    named = r->leases[k]->generation == f->q[i].generation &&
                            r->leases[k]->split == f->q[i].split;
                if (!read && !named) f->unnamed_lease = true;
            }
            for (size_t k = 0; k < r->n_leases; k++)
                if (lease_of_gen(f, r->leases[k]->generation) == NULL) f->named_unknown = true;
            if (f->registers > 1) f->named_on_reregister = (uint32_t)r->n_leases;
            if (f->refuse_after && f->registers > f->refuse_after) {
                sl_rpc_send_error(fd, SL_ERR_INVALID,
                                  "worker id 'w1' is in use by another live worker "
                                  "process (connected from 127.0.0.1:9, heard from 5 ms ago)");
                drop = true;
                break;
            }
            Sluice__Control__Registered g = SLUICE__CONTROL__REGISTERED__INIT;
            g.lease_timeout_ms = 2000;
            g.heartbeat_ms = 30;
            sl_rpc_send(fd, SL_RPC_REGISTERED, &g.base, NULL, 0, NULL);
            break;
        }
        case SL_RPC_LEASE_REQUEST: {
            const Sluice__Control__LeaseRequest *q = (const Sluice__Control__LeaseRequest *)fr.msg;
            f->lease_requests++;
            if (f->next > 0) /* bound after the first lease */
                TCHECK(strcmp(q->job_id, "jobx") == 0, "lease request for job '%s'", q->job_id);
            if (!f->hold && f->next < f->nq && (!f->lease_limit || f->next < f->lease_limit)) {
                fm_send_lease(f, fd, &f->q[f->next++]);
            } else {
                Sluice__Control__NoWork nw = SLUICE__CONTROL__NO_WORK__INIT;
                nw.retry_ms = 20;
                nw.reason = f->finish && f->next == f->nq ? "finished" : "no split pending";
                sl_rpc_send(fd, SL_RPC_NO_WORK, &nw.base, NULL, 0, NULL);
            }
            break;
        }
        case SL_RPC_HEARTBEAT: {
            const Sluice__Control__Heartbeat *h = (const Sluice__Control__Heartbeat *)fr.msg;
            f->heartbeats++;
            if (h->n_leases > f->hb_leases_max) f->hb_leases_max = h->n_leases;
            for (size_t k = 0; k < h->n_cache_evicted && f->nevicted < 16; k++) {
                f->evicted_fp[f->nevicted] = h->cache_evicted[k]->prefix_fingerprint;
                f->evicted_split[f->nevicted++] = h->cache_evicted[k]->split;
            }
            TCHECK(h->busy_fraction >= 0 && h->busy_fraction <= 1, "busy %g", h->busy_fraction);
            for (size_t k = 0; k < h->n_counts; k++) {
                const Sluice__Control__SplitCount *c = h->counts[k];
                TCHECK(c && c->ref, "a count without its lease");
                for (uint32_t i = 0; c && c->ref && i < f->next && i < MAX_LEASES; i++) {
                    if (f->q[i].generation != c->ref->generation) continue;
                    TCHECK(!f->q[i].hb_count_plus_one, "split %u counted twice", f->q[i].split);
                    f->q[i].hb_count_plus_one = c->batches + 1;
                    bool read = false;
                    for (uint32_t j = 0; j < f->nreads; j++)
                        read = read || f->reads[j].generation == c->ref->generation;
                    f->q[i].hb_count_before_read = !read;
                }
            }
            Sluice__Control__HeartbeatReply r = SLUICE__CONTROL__HEARTBEAT_REPLY__INIT;
            Sluice__Control__SplitRef ref = SLUICE__CONTROL__SPLIT_REF__INIT, *rp = &ref;
            if (f->revoke_gen && !f->revoked_sent) {
                fm_ref(&ref, "jobx", lease_of_gen(f, f->revoke_gen), f->revoke_gen);
                r.n_revoked = 1;
                r.revoked = &rp;
                f->revoked_sent = true;
            }
            Sluice__Control__SplitBase sb[MAX_LEASES], *sbp[MAX_LEASES];
            Sluice__Control__SplitRef sbr[MAX_LEASES];
            for (uint32_t i = 0; i < f->next && i < MAX_LEASES; i++) {
                if (!f->q[i].hb_base_plus_one) continue;
                fm_ref(&sbr[r.n_bases], "jobx", &f->q[i], f->q[i].generation);
                sb[r.n_bases] = (Sluice__Control__SplitBase)SLUICE__CONTROL__SPLIT_BASE__INIT;
                sb[r.n_bases].ref = &sbr[r.n_bases];
                sb[r.n_bases].first_g = f->q[i].hb_base_plus_one - 1;
                sbp[r.n_bases] = &sb[r.n_bases];
                r.n_bases++;
            }
            r.bases = sbp;
            sl_rpc_send(fd, SL_RPC_HEARTBEAT_REPLY, &r.base, NULL, 0, NULL);
            break;
        }
        case SL_RPC_SPLIT_READ: {
            const Sluice__Control__SplitRead *s = (const Sluice__Control__SplitRead *)fr.msg;
            TCHECK(f->nreads < MAX_LEASES && s->ref && s->n_empty <= 64, "split read");
            if (f->nreads >= MAX_LEASES || !s->ref || s->n_empty > 64) break;
            fm_read_t *rd = &f->reads[f->nreads++];
            TCHECK(strcmp(s->ref->job_id, "jobx") == 0 || strcmp(s->ref->job_id, "joby") == 0,
                   "split read of job %s", s->ref->job_id);
            snprintf(rd->job, sizeof rd->job, "%s", s->ref->job_id);
            rd->detached = s->detached;
            rd->counted = s->counted;
            rd->batches = s->batches;
            rd->split = s->ref->split;
            rd->generation = s->ref->generation;
            rd->nempty = (uint32_t)s->n_empty;
            uint64_t empty = 0;
            for (size_t i = 0; i < s->n_empty; i++) {
                rd->empty[i] = (sl_dpp_row_range_t){s->empty[i]->from_row, s->empty[i]->to_row};
                empty += s->empty[i]->to_row - s->empty[i]->from_row;
            }
            const fm_lease_t *l = lease_of_gen(f, rd->generation);
            TCHECK(l != NULL, "split read of an unknown generation");
            uint64_t todo = 0;
            for (uint32_t i = 0; l && i < l->ntodo; i++)
                todo += l->todo[i].to_row - l->todo[i].from_row;
            rd->all_acked = acked_rows(f, rd->split, rd->generation) + empty == todo;
            Sluice__Control__SplitReadReply r = SLUICE__CONTROL__SPLIT_READ_REPLY__INIT;
            r.state = SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE;
            sl_rpc_send(fd, SL_RPC_SPLIT_READ_REPLY, &r.base, NULL, 0, NULL);
            if (f->drop_after_reads && (int)f->nreads == f->drop_after_reads && !f->dropped)
                drop = f->dropped = true;
            break;
        }
        case SL_RPC_SPLIT_FAILED: {
            const Sluice__Control__SplitFailed *s = (const Sluice__Control__SplitFailed *)fr.msg;
            TCHECK(s->ref != NULL, "split failed without a reference");
            f->nfailed++;
            f->failed_gen = s->ref ? s->ref->generation : 0;
            f->failed_code = s->code;
            snprintf(f->failed_msg, sizeof f->failed_msg, "%s", s->message ? s->message : "");
            Sluice__Control__SplitFailedReply r = SLUICE__CONTROL__SPLIT_FAILED_REPLY__INIT;
            r.state = SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__SKIPPED;
            sl_rpc_send(fd, SL_RPC_SPLIT_FAILED_REPLY, &r.base, NULL, 0, NULL);
            break;
        }
        default:
            TCHECK(false, "fake master: unexpected %s frame", sl_rpc_type_name(fr.type));
        }
        pthread_mutex_unlock(&f->mu);
        sl_rpc_frame_free(&fr);
        if (drop) return;
    }
}

static void *fm_main(void *arg)
{
    fake_t *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0) continue;
        fm_serve(f, fd);
        close(fd);
    }
    return NULL;
}

static void fm_start(fake_t *f, const sl_wh_splits_t *splits, const char *spec)
{
    memset(f, 0, sizeof *f);
    f->splits = splits;
    pthread_mutex_init(&f->mu, NULL);
    f->spec = spec;
    f->got = calloc(MAX_BATCHES, sizeof *f->got);
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 8, &f->lfd, &f->port, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(pthread_create(&f->th, NULL, fm_main, f), 0);
}

static void fm_stop(fake_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
    free(f->got);
    pthread_mutex_destroy(&f->mu);
}

static inline void fm_add(fake_t *f, uint32_t split, uint64_t gen, uint32_t rank_plus_one,
                          const sl_dpp_row_range_t *todo, uint32_t ntodo)
{
    fm_lease_t *l = &f->q[f->nq++];
    *l = (fm_lease_t){
        .split = split, .generation = gen, .rank_plus_one = rank_plus_one, .ntodo = ntodo};
    if (todo)
        memcpy(l->todo, todo, ntodo * sizeof *todo);
    else
        l->todo[0] = (sl_dpp_row_range_t){0, f->splits->items[split].num_rows}, l->ntodo = 1;
}

/* ---- a fake trainer client ---- */

typedef struct client {
    fake_t *f;
    uint16_t port;
    uint32_t rank;
    const char *job; /* HELLO's job id (NULL: none, the worker's own) */
    pthread_t th;
    uint32_t batches;
    bool ended;
    uint32_t wrong_rank;
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;
    int fd;
    sl_error_t err = {0};
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", c->port);
    if (sl_rpc_connect(addr, 2000, &fd, &err) != SL_OK) {
        TCHECK(false, "client: %s", err.msg);
        return NULL;
    }
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.rank = c->rank;
    h.world_size = 2;
    h.job_id = (char *)(c->job ? c->job : "");
    sl_rpc_send(fd, SL_RPC_HELLO, &h.base, NULL, 0, &err);
    Sluice__Dpp__Request rq = SLUICE__DPP__REQUEST__INIT, one = SLUICE__DPP__REQUEST__INIT;
    rq.credits = 4;
    one.credits = 1;
    /* the deterministic order's g-window (docs/PROTOCOL.md): next + 4 x R,
     * next being this rank's first g, then the g after each one received
     * (the rank's batches come in g order) */
    rq.order_g_limit = c->rank + 4 * 2;
    sl_rpc_send(fd, SL_RPC_REQUEST, &rq.base, NULL, 0, &err);
    sl_rpc_limits_t lim = sl_rpc_limits_default();
    for (;;) {
        sl_rpc_frame_t fr = {0};
        if (sl_rpc_recv(fd, &lim, NULL, &fr, &err) != SL_OK) break;
        if (fr.type == SL_RPC_END) {
            c->ended = true;
            sl_rpc_frame_free(&fr);
            break;
        }
        if (fr.type != SL_RPC_BATCH) {
            sl_rpc_frame_free(&fr);
            continue;
        }
        const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)fr.msg;
        sl_batch_t *b = NULL;
        if (sl_wire_decode(fr.payload, fr.payload_len, NULL, NULL, &b, &err) != SL_OK ||
            b->batch_size > 128 || b->batch_size != bi->num_samples || !b->sample_ids) {
            TCHECK(false, "client: bad batch: %s", err.msg);
            sl_batch_destroy(b);
            sl_rpc_frame_free(&fr);
            break;
        }
        if (bi->rank_plus_one && bi->rank_plus_one != c->rank + 1) c->wrong_rank++;
        pthread_mutex_lock(&c->f->mu);
        TCHECK(c->f->ngot < MAX_BATCHES, "too many batches");
        if (c->f->ngot == MAX_BATCHES) c->f->ngot--;
        got_batch_t *g = &c->f->got[c->f->ngot++];
        *g = (got_batch_t){.split = bi->split,
                           .epoch = bi->epoch,
                           .rank_plus_one = bi->rank_plus_one,
                           .n = b->batch_size,
                           .generation = bi->generation,
                           .from = bi->from_row,
                           .to = bi->to_row,
                           .g_plus_one = bi->order_g_plus_one};
        snprintf(g->job, sizeof g->job, "%s", bi->job_id);
        memcpy(g->ids, b->sample_ids, b->batch_size * sizeof *b->sample_ids);
        pthread_mutex_unlock(&c->f->mu);
        c->batches++;
        Sluice__Dpp__Ack ack = SLUICE__DPP__ACK__INIT;
        uint64_t id = bi->delivery_id, g_plus_one = bi->order_g_plus_one;
        uint32_t epoch = bi->epoch;
        ack.n_delivery_ids = 1;
        ack.delivery_ids = &id;
        sl_batch_destroy(b);
        sl_rpc_frame_free(&fr);
        sl_rpc_send(fd, SL_RPC_ACK, &ack.base, NULL, 0, NULL);
        if (g_plus_one) { /* an ordered batch: the window, not the credit, moves */
            one.order_epoch = epoch;
            one.order_g_limit = g_plus_one - 1 + 2 + 4 * 2;
        }
        sl_rpc_send(fd, SL_RPC_REQUEST, &one.base, NULL, 0, NULL);
    }
    close(fd);
    return NULL;
}

static inline void client_start(client_t *c, fake_t *f, uint16_t port, uint32_t rank)
{
    *c = (client_t){.f = f, .port = port, .rank = rank};
    cr_assert_eq(pthread_create(&c->th, NULL, client_main, c), 0);
}

/* A client whose HELLO names job (rank 0 of 2). */
static inline void client_start_job(client_t *c, fake_t *f, uint16_t port, const char *job)
{
    *c = (client_t){.f = f, .port = port, .job = job};
    cr_assert_eq(pthread_create(&c->th, NULL, client_main, c), 0);
}

#endif

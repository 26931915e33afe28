/* Version-4 resume tokens (src/dpp/master/state/state_token.c, state_attr.c): a
 * simulated fleet (workers cutting leases into batches, trainer ranks that
 * commit, prefetch and hand out batches) runs a job of two epochs until its
 * ranks stop at a checkpoint (at the same step, one apart or up to a whole
 * prefetch apart, tokens taken at different moments while the others go on
 * committing), then a new master resumes the job from the tokens with
 * another number of ranks and runs it to the end. Every epoch, every row
 * that yields a sample is handed out exactly once over both runs, and none
 * of the filtered ones. Workers are killed (re-register with no lease) and
 * the masters restart from their journal (the dump before equals the dump
 * after: replay equals live, snapshot included). Also the refusals of a
 * set of tokens. Seeded: SLUICE_TEST_SEED replays a run. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/master/state/state.h"
#include "master_store_tu.h"
#include "testutil.h"

#define NSPLIT 12
#define EPOCHS 2
#define MAXR 4
#define MAXW 6
#define MAXROWS 96
#define PREFETCH 8
#define QCAP 64

static tu_alloc_t g_ta;
#define ALLOC (&g_ta.base)

static void init_alloc(void)
{
    tu_alloc_init(&g_ta);
}

TestSuite(master_token, .init = init_alloc);

static sl_wh_split_t g_splits[NSPLIT];
static char g_path[32] = "ds=2026-01-01/part-0.slc";

static void make_splits(uint64_t *seed)
{
    uint64_t first = 0;
    for (uint32_t i = 0; i < NSPLIT; i++) {
        uint64_t r = 20 + tu_below(seed, MAXROWS - 20);
        g_splits[i] = (sl_wh_split_t){.path = g_path,
                                      .partition = "ds=2026-01-01",
                                      .stripe_begin = i,
                                      .stripe_end = i + 1,
                                      .first_row = first,
                                      .num_rows = r};
        first += r;
    }
}

/* A row yields no sample (a filter) by a fixed rule, the same in both runs. */
static bool filtered(uint32_t split, uint64_t row)
{
    return (split * 31 + row * 17) % 5 == 0;
}

typedef struct batch {
    uint32_t epoch, split, worker;
    uint64_t gen, from, to;
} batch;

typedef struct queue {
    batch v[QCAP];
    uint32_t head, n;
} queue;

static void q_push(queue *q, batch b)
{
    cr_assert_lt(q->n, QCAP);
    q->v[(q->head + q->n++) % QCAP] = b;
}

static batch q_pop(queue *q)
{
    batch b = q->v[q->head];
    q->head = (q->head + 1) % QCAP;
    q->n--;
    return b;
}

typedef struct worker {
    bool has;
    sl_master_lease_t l;
    sl_dpp_row_range_t todo[MAXROWS];
    uint32_t nt, ti;
    uint64_t row;
    sl_dpp_row_range_t empty[MAXROWS];
    uint32_t ne, out; /* empties; batches sent and not acknowledged */
    char name[16];
} worker;

typedef struct client {
    char name[24];
    queue inflight, ready; /* received, not committed; committed, not handed out */
    uint64_t handed, stop_at, nonce;
    bool stopped, has_token;
    void *tok;
    size_t tlen;
} client;

typedef struct sim {
    sl_master_state_t *m;
    char *dir;
    sl_master_state_opts_t o;
    uint32_t ranks;
    bool static_sh, stopping;
    uint64_t now, seed;
    worker w[MAXW];
    client c[MAXR];
    uint8_t (*handed)[NSPLIT][MAXROWS]; /* [EPOCHS]: times each row was handed out */
} sim;

static void open_master(sim *s)
{
    sl_error_t err = {0};
    cr_assert_eq(ms_open(s->dir, &s->o, s->now, &s->m, NULL, &err), SL_OK, "%s", err.msg);
}

static char *dump_of(const sl_master_state_t *m)
{
    char *d;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_dump(m, &d, &len, &err), SL_OK, "%s", err.msg);
    char *copy = strdup(d);
    sl_free(ALLOC, d, len + 1);
    return copy;
}

/* kill -9 after a sync: the reopened master (snapshot, then journal) holds
 * exactly the state it had, attribution included. */
static void restart_master(sim *s, bool compact)
{
    sl_error_t err = {0};
    if (compact) cr_assert_eq(ms_compact(s->m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ms_sync(s->m, &err), SL_OK, "%s", err.msg);
    char *before = dump_of(s->m);
    ms_destroy(s->m);
    open_master(s);
    char *after = dump_of(s->m);
    cr_assert_str_eq(after, before, "replay differs from the live state");
    free(before);
    free(after);
}

static void sim_init(sim *s, uint32_t ranks, bool static_sh, int run, uint64_t seed)
{
    memset(s->w, 0, sizeof s->w);
    memset(s->c, 0, sizeof s->c);
    s->ranks = ranks;
    s->static_sh = static_sh;
    s->seed = seed;
    s->dir = tu_mkdtemp("master-token");
    s->o = (sl_master_state_opts_t){.lease_timeout_ms = 1u << 30, .allocator = ALLOC};
    for (int i = 0; i < MAXW; i++)
        snprintf(s->w[i].name, sizeof s->w[i].name, "w%d", i);
    for (uint32_t r = 0; r < ranks; r++)
        snprintf(s->c[r].name, sizeof s->c[r].name, "run%d-rank%u", run, r);
    open_master(s);
}

static void sim_free(sim *s)
{
    for (uint32_t r = 0; r < MAXR; r++)
        if (s->c[r].tok != NULL) sl_free(ALLOC, s->c[r].tok, s->c[r].tlen);
    ms_destroy(s->m);
    tu_rm_tree(s->dir);
    free(s->dir);
}

static bool accepting(const client *c)
{
    return c->inflight.n + c->ready.n < PREFETCH;
}

/* One worker step: lease, send a batch, report an empty range, or end the
 * lease with SPLIT_READ. @return progress was made. */
static bool worker_step(sim *s, worker *w)
{
    sl_error_t err = {0};
    if (!w->has) {
        sl_err_t rc = sl_master_state_lease_next(s->m, "j", w->name, s->now, &w->l, &err);
        if (rc == SL_ERR_AGAIN) return false;
        cr_assert_eq(rc, SL_OK, "%s", err.msg);
        cr_assert_leq(w->l.num_todo, MAXROWS);
        memcpy(w->todo, w->l.todo, w->l.num_todo * sizeof *w->todo);
        w->nt = w->l.num_todo;
        w->l.todo = NULL;
        w->ti = 0;
        w->row = w->nt > 0 ? w->todo[0].from_row : 0;
        w->ne = w->out = 0;
        w->has = true;
        return true;
    }
    if (w->ti < w->nt) {
        uint64_t end = w->todo[w->ti].to_row;
        uint64_t to = w->row + 1 + tu_below(&s->seed, 6);
        if (to > end) to = end;
        bool any = false;
        for (uint64_t r = w->row; r < to; r++)
            any = any || !filtered(w->l.split, r);
        if (any) {
            /* to its rank (static) or to a client with room */
            uint32_t r = w->l.rank_plus_one ? w->l.rank_plus_one - 1
                                            : (uint32_t)tu_below(&s->seed, s->ranks);
            cr_assert_lt(r, s->ranks);
            if (!accepting(&s->c[r])) return false;
            q_push(&s->c[r].inflight, (batch){w->l.epoch, w->l.split, (uint32_t)(w - s->w),
                                              w->l.generation, w->row, to});
            w->out++;
        } else {
            w->empty[w->ne++] = (sl_dpp_row_range_t){w->row, to};
        }
        w->row = to;
        if (to == end && ++w->ti < w->nt) w->row = w->todo[w->ti].from_row;
        return true;
    }
    if (w->out > 0) return false;
    sl_master_read_result_t rr = sl_master_state_split_read(s->m, "j", w->l.epoch, w->l.split,
                                                            w->l.generation, w->empty, w->ne, &err);
    cr_assert(rr != SL_MASTER_READ_ERROR, "%s", err.msg);
    w->has = false;
    return true;
}

static void ack(sim *s, const batch *b)
{
    worker *w = &s->w[b->worker];
    /* a batch of a lease the worker no longer holds (killed since) */
    if (w->has && w->l.generation == b->gen && w->out > 0) w->out--;
}

/* One client step: commit a received batch, or hand one out. */
static bool client_step(sim *s, uint32_t r)
{
    client *c = &s->c[r];
    sl_error_t err = {0};
    if (c->inflight.n > 0 && (c->ready.n == 0 || c->stopped || tu_below(&s->seed, 2) == 0)) {
        batch b = q_pop(&c->inflight);
        sl_master_commit_result_t res = sl_master_state_commit(
            s->m, "j", b.epoch, b.split, b.gen, b.from, b.to, c->name, ++c->nonce, &err);
        cr_assert_neq(res, SL_MASTER_COMMIT_ERROR, "%s", err.msg);
        if (res == SL_MASTER_COMMITTED) q_push(&c->ready, b);
        ack(s, &b);
        return true;
    }
    if (c->ready.n > 0 && !c->stopped) {
        batch b = q_pop(&c->ready);
        for (uint64_t x = b.from; x < b.to; x++)
            if (!filtered(b.split, x)) s->handed[b.epoch][b.split][x]++;
        c->handed++;
        if (s->stopping && c->handed >= c->stop_at) c->stopped = true;
        return true;
    }
    return false;
}

static void take_token(sim *s, uint32_t r, uint64_t step)
{
    client *c = &s->c[r];
    sl_master_token_exclude_t und[QCAP];
    uint32_t n = 0;
    for (uint32_t k = 0; k < c->ready.n; k++) {
        const batch *b = &c->ready.v[(c->ready.head + k) % QCAP];
        und[n++] = (sl_master_token_exclude_t){b->epoch, b->split, b->from, b->to, b->gen};
    }
    sl_master_token_req_t req = {.job_id = "j",
                                 .client_id = c->name,
                                 .rank = r,
                                 .world_size = s->ranks,
                                 .has_step = true,
                                 .step = step,
                                 .undelivered = und,
                                 .num_undelivered = n};
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_token_take(s->m, &req, &c->tok, &c->tlen, &err), SL_OK, "%s",
                 err.msg);
    c->has_token = true;
}

/* Random steps until done(s) says stop; workers die now and then. */
static void run(sim *s, bool (*done)(sim *), uint64_t step)
{
    uint64_t idle = 0;
    for (uint64_t it = 0; !done(s); it++) {
        cr_assert_lt(it, 2000000, "no end (seed)");
        s->now++;
        bool moved = false;
        uint64_t pick = tu_below(&s->seed, 100);
        if (pick < 45) {
            /* workers' steps are not progress: a worker may lease, be
             * killed and lease again while every rank waits */
            worker_step(s, &s->w[tu_below(&s->seed, MAXW)]);
        } else if (pick < 95) {
            moved = client_step(s, (uint32_t)tu_below(&s->seed, s->ranks));
        } else if (pick < 97) {
            /* a worker killed and restarted: its lease is revoked at its
             * REGISTER; the batches clients hold of it get STALE */
            worker *w = &s->w[tu_below(&s->seed, MAXW)];
            sl_error_t err = {0};
            cr_assert_eq(sl_master_state_register(s->m, w->name, NULL, 0, s->now, NULL, NULL, &err),
                         SL_OK, "%s", err.msg);
            w->has = false;
        } else if (s->stopping) {
            /* a stopped rank takes its token at some moment of its own */
            uint32_t r = (uint32_t)tu_below(&s->seed, s->ranks);
            if (s->c[r].stopped && !s->c[r].has_token) {
                take_token(s, r, step);
                moved = true;
            }
        }
        idle = moved ? 0 : idle + 1;
        if (idle > 5000 && s->stopping) {
            /* every worker waits on a stopped rank: the others stop here */
            for (uint32_t r = 0; r < s->ranks; r++)
                s->c[r].stopped = true;
        }
        cr_assert_lt(idle, 20000, "stuck (seed)");
    }
}

static bool all_tokens(sim *s)
{
    for (uint32_t r = 0; r < s->ranks; r++)
        if (!s->c[r].has_token) return false;
    return true;
}

static bool finished(sim *s)
{
    sl_master_state_job_status_t st;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_job_status(s->m, "j", &st, &err), SL_OK, "%s", err.msg);
    if (!st.finished) return false;
    for (uint32_t r = 0; r < s->ranks; r++)
        if (s->c[r].inflight.n + s->c[r].ready.n > 0) return false;
    return true;
}

static sl_master_state_job_spec_t spec_of(uint32_t ranks, bool static_sh)
{
    return (sl_master_state_job_spec_t){.job_id = "j",
                                        .splits = g_splits,
                                        .num_splits = NSPLIT,
                                        .epochs = EPOCHS,
                                        .seed = 7,
                                        .shuffle = true,
                                        .ranks = ranks,
                                        .static_sharding = static_sh};
}

/* R ranks stop (apart by `apart` batches at most), R2 ranks resume. */
static void resume_case(uint32_t R, uint32_t R2, bool static_sh, uint32_t apart, uint64_t *seed)
{
    make_splits(seed);
    uint64_t rows = 0;
    for (int i = 0; i < NSPLIT; i++)
        rows += g_splits[i].num_rows;
    static uint8_t handed[EPOCHS][NSPLIT][MAXROWS];
    memset(handed, 0, sizeof handed);
    sim *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    sl_error_t err = {0};
    sim_init(a, R, static_sh, 1, tu_next(seed));
    a->handed = handed;
    sl_master_state_job_spec_t spec = spec_of(R, static_sh);
    cr_assert_eq(sl_master_state_job_add(a->m, &spec, &err), SL_OK, "%s", err.msg);
    /* the checkpoint: about rows / 4 per batch... anywhere in the two epochs */
    uint64_t batches = rows * EPOCHS / 4 / R;
    uint64_t k = tu_below(seed, batches + 1);
    for (uint32_t r = 0; r < R; r++)
        a->c[r].stop_at = k + (apart ? tu_below(seed, apart + 1) : 0);
    a->stopping = true;
    for (uint32_t r = 0; r < R; r++)
        if (a->c[r].stop_at == 0) a->c[r].stopped = true;
    run(a, all_tokens, k);
    restart_master(a, tu_below(seed, 2) == 0);

    /* a new master, the job resumed with R2 ranks */
    sim_init(b, R2, static_sh, 2, tu_next(seed));
    b->handed = handed;
    const void *toks[MAXR];
    size_t lens[MAXR];
    uint32_t order[MAXR];
    for (uint32_t r = 0; r < R; r++)
        order[r] = r;
    for (uint32_t r = R; r > 1; r--) { /* tokens in any order */
        uint32_t j = (uint32_t)tu_below(seed, r), t = order[r - 1];
        order[r - 1] = order[j];
        order[j] = t;
    }
    for (uint32_t r = 0; r < R; r++) {
        toks[r] = a->c[order[r]].tok;
        lens[r] = a->c[order[r]].tlen;
    }
    sl_master_state_job_spec_t spec2 = spec_of(R2, static_sh);
    cr_assert_eq(sl_master_state_job_resume_ranks(b->m, &spec2, toks, lens, R, &err), SL_OK, "%s",
                 err.msg);
    b->stopping = false;
    /* the resumed master restarts once on the way (kill -9 after a sync) */
    uint64_t half = tu_below(seed, 200);
    for (uint64_t i = 0; i < half && !finished(b); i++) {
        b->now++;
        if (tu_below(&b->seed, 2))
            worker_step(b, &b->w[tu_below(&b->seed, MAXW)]);
        else
            client_step(b, (uint32_t)tu_below(&b->seed, R2));
    }
    restart_master(b, tu_below(seed, 2) == 0);
    run(b, finished, 0);

    for (int e = 0; e < EPOCHS; e++)
        for (int sp = 0; sp < NSPLIT; sp++)
            for (uint64_t x = 0; x < g_splits[sp].num_rows; x++)
                cr_assert_eq(handed[e][sp][x], filtered((uint32_t)sp, x) ? 0 : 1,
                             "%u -> %u ranks (%s, apart %u): epoch %d split %d row %llu handed "
                             "out %u times",
                             R, R2, static_sh ? "static" : "dynamic", apart, e, sp,
                             (unsigned long long)x, handed[e][sp][x]);
    sim_free(a);
    sim_free(b);
    free(a);
    free(b);
}

Test(master_token, resume_at_any_world_size_exactly_once, .timeout = 300)
{
    uint64_t seed = tu_seed("master_token::resume");
    static const uint32_t worlds[][2] = {{1, 1}, {1, 2}, {2, 2}, {2, 3}, {2, 1},
                                         {3, 2}, {4, 3}, {1, 4}, {3, 3}};
    static const uint32_t aparts[] = {0, 1, PREFETCH};
    for (int round = 0; round < 4; round++)
        for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++)
            for (size_t p = 0; p < 3; p++)
                for (int st = 0; st < 2; st++)
                    resume_case(worlds[w][0], worlds[w][1], st == 1, aparts[p], &seed);
    tu_alloc_assert_clean(&g_ta);
}

static void *token_of(sl_master_state_t *m, const char *job, uint32_t rank, uint32_t world,
                      bool has_step, uint64_t step, size_t *len)
{
    char name[32];
    snprintf(name, sizeof name, "c%u", rank);
    sl_master_token_req_t req = {.job_id = job,
                                 .client_id = name,
                                 .rank = rank,
                                 .world_size = world,
                                 .has_step = has_step,
                                 .step = step};
    void *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_token_take(m, &req, &t, len, &err), SL_OK, "%s", err.msg);
    return t;
}

/* resume_ranks of the given tokens on a fresh master: the result, err. */
static sl_err_t try_resume(void *const *t, const size_t *len, uint32_t n, const char *job,
                           sl_error_t *err)
{
    sl_master_state_opts_t o = {.allocator = ALLOC};
    sl_master_state_t *q;
    cr_assert_eq(sl_master_state_new(&o, &q, err), SL_OK);
    sl_master_state_job_spec_t spec = spec_of(2, false);
    spec.job_id = job;
    sl_err_t rc = sl_master_state_job_resume_ranks(q, &spec, (const void *const *)t, len, n, err);
    sl_master_state_job_status_t st;
    sl_error_t e2 = {0};
    /* a refused set starts nothing */
    if (rc != SL_OK) cr_assert_eq(sl_master_state_job_status(q, job, &st, &e2), SL_ERR_NOT_FOUND);
    ms_destroy(q);
    return rc;
}

Test(master_token, a_set_that_cannot_be_honoured_is_refused_naming_why)
{
    uint64_t seed = 5;
    make_splits(&seed);
    sl_master_state_opts_t o = {.allocator = ALLOC};
    sl_master_state_t *m, *m2;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK);
    cr_assert_eq(sl_master_state_new(&o, &m2, &err), SL_OK);
    sl_master_state_job_spec_t spec = spec_of(3, false);
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_job_add(m2, &spec, &err), SL_OK, "%s", err.msg); /* another run */
    sl_master_state_job_spec_t other = spec_of(3, false);
    other.job_id = "k";
    cr_assert_eq(sl_master_state_job_add(m, &other, &err), SL_OK, "%s", err.msg);
    void *t[4];
    size_t len[4];
    t[0] = token_of(m, "j", 0, 3, true, 10, &len[0]);
    t[1] = token_of(m, "j", 1, 3, true, 10, &len[1]);
    t[2] = token_of(m, "j", 2, 3, true, 10, &len[2]);
    cr_assert_eq(try_resume(t, len, 3, "j", &err), SL_OK, "%s", err.msg);

    /* a rank twice and one missing */
    void *d[3] = {t[0], t[1], t[1]};
    size_t dl[3] = {len[0], len[1], len[1]};
    cr_assert_eq(try_resume(d, dl, 3, "j", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "token 3 of 3: rank 1 of 3 appears twice; rank 2 missing");
    /* a rank missing */
    cr_assert_eq(try_resume(t, len, 2, "j", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "2 tokens for a world of 3 ranks: rank 2 missing (one token per "
                              "rank of the checkpoint)");
    /* another step */
    t[3] = token_of(m, "j", 2, 3, true, 11, &len[3]);
    void *s[3] = {t[0], t[1], t[3]};
    size_t sl[3] = {len[0], len[1], len[3]};
    cr_assert_eq(try_resume(s, sl, 3, "j", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 3 of 3: step 11, token 1's step 10") != NULL, "%s", err.msg);
    sl_free(ALLOC, t[3], len[3]);
    /* without steps, or some without: accepted */
    t[3] = token_of(m, "j", 2, 3, false, 0, &len[3]);
    s[2] = t[3];
    sl[2] = len[3];
    cr_assert_eq(try_resume(s, sl, 3, "j", &err), SL_OK, "%s", err.msg);
    sl_free(ALLOC, t[3], len[3]);
    /* another run of the job */
    t[3] = token_of(m2, "j", 2, 3, true, 10, &len[3]);
    s[2] = t[3];
    sl[2] = len[3];
    cr_assert_eq(try_resume(s, sl, 3, "j", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 3 of 3: taken in another run of job 'j'") != NULL, "%s",
              err.msg);
    sl_free(ALLOC, t[3], len[3]);
    /* another world size */
    t[3] = token_of(m, "j", 1, 2, true, 10, &len[3]);
    s[2] = t[3];
    sl[2] = len[3];
    cr_assert_eq(try_resume(s, sl, 3, "j", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 3 of 3: world size 2, token 1's 3") != NULL, "%s", err.msg);
    sl_free(ALLOC, t[3], len[3]);
    /* another job */
    t[3] = token_of(m, "k", 2, 3, true, 10, &len[3]);
    s[2] = t[3];
    sl[2] = len[3];
    cr_assert_eq(try_resume(s, sl, 3, "j", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 3 of 3: resume token of job 'k', not of job 'j'") != NULL,
              "%s", err.msg);
    sl_free(ALLOC, t[3], len[3]);
    /* damaged */
    uint8_t *bad = malloc(len[1]);
    memcpy(bad, t[1], len[1]);
    bad[len[1] - 1] ^= 1;
    s[1] = bad;
    s[2] = t[2];
    sl[1] = len[1];
    sl[2] = len[2];
    cr_assert_eq(try_resume(s, sl, 3, "j", &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "token 2 of 3") != NULL, "%s", err.msg);
    free(bad);
    /* version 2 tokens: one is exact, several are refused, and mixed too */
    void *v2[2];
    size_t v2l[2];
    cr_assert_eq(sl_master_state_token_encode(m, "j", NULL, 0, &v2[0], &v2l[0], &err), SL_OK);
    cr_assert_eq(sl_master_state_token_encode(m, "j", NULL, 0, &v2[1], &v2l[1], &err), SL_OK);
    cr_assert_eq(try_resume(v2, v2l, 1, "j", &err), SL_OK, "%s", err.msg);
    cr_assert_eq(try_resume(v2, v2l, 2, "j", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "2 version-2 tokens") != NULL, "%s", err.msg);
    s[1] = v2[0];
    sl[1] = v2l[0];
    cr_assert_eq(try_resume(s, sl, 3, "j", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "2 of 3 tokens are of version 4") != NULL, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        sl_free(ALLOC, v2[i], v2l[i]);
    for (int i = 0; i < 3; i++)
        sl_free(ALLOC, t[i], len[i]);
    /* a rank outside its world is not a token the master writes */
    sl_master_token_req_t req = {.job_id = "j", .client_id = "c", .rank = 3, .world_size = 3};
    void *x;
    size_t xl;
    cr_assert_eq(sl_master_state_token_take(m, &req, &x, &xl, &err), SL_ERR_INVALID);
    ms_destroy(m);
    ms_destroy(m2);
    tu_alloc_assert_clean(&g_ta);
}

/* Commit [from, to) of split as client c under the split's live lease
 * (leased to worker "w" when it has none). */
static void commit_as(sl_master_state_t *m, uint32_t epoch, uint32_t split, const char *c,
                      uint64_t from, uint64_t to, uint64_t nonce)
{
    /* the generations handed out, per master (a test has a few) */
    static struct {
        const sl_master_state_t *m;
        uint64_t gen[8];
    } tab[8];
    int k = 0;
    while (k < 7 && tab[k].m != NULL && tab[k].m != m)
        k++;
    if (tab[k].m != m) memset(&tab[k], 0, sizeof tab[k]);
    tab[k].m = m;
    uint64_t *gen = tab[k].gen;
    sl_error_t err = {0};
    if (!sl_master_state_lease_live(m, "j", epoch, split, gen[split], NULL)) {
        sl_master_lease_t l;
        cr_assert_eq(sl_master_state_lease_split(m, "j", split, "w", 0, &l, &err), SL_OK, "%s",
                     err.msg);
        gen[split] = l.generation;
    }
    cr_assert_eq(sl_master_state_commit(m, "j", epoch, split, gen[split], from, to, c, nonce, &err),
                 SL_MASTER_COMMITTED, "%s", err.msg);
}

static void *take(sl_master_state_t *m, const char *c, uint32_t rank, uint32_t world,
                  const sl_master_token_exclude_t *und, uint32_t n, size_t *len, sl_err_t want,
                  sl_error_t *err)
{
    sl_master_token_req_t req = {.job_id = "j",
                                 .client_id = c,
                                 .rank = rank,
                                 .world_size = world,
                                 .undelivered = und,
                                 .num_undelivered = n};
    void *t = NULL;
    cr_assert_eq(sl_master_state_token_take(m, &req, &t, len, err), want, "%s", err->msg);
    return t;
}

/* Tokens more than one epoch apart cannot be combined (the later one says
 * nothing of what its rank handed out two epochs back), and a client that
 * holds a batch of an epoch two back cannot take one; tokens one epoch
 * apart combine: the earlier epoch's rows a rank still held come again, in
 * the epoch they belong to, and the next epoch's handed rows are
 * committed when it begins. */
Test(master_token, epochs_apart)
{
    for (int i = 0; i < 2; i++)
        g_splits[i] = (sl_wh_split_t){.path = g_path,
                                      .partition = "p",
                                      .stripe_begin = (uint32_t)i,
                                      .stripe_end = (uint32_t)i + 1,
                                      .first_row = 10u * i,
                                      .num_rows = 10};
    sl_master_state_opts_t o = {.allocator = ALLOC};
    sl_master_state_t *m;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK);
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = 2, .epochs = 4, .ranks = 2};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    /* epoch 0: a commits split 0 [0,10) and holds [5,10); b commits split 1 */
    commit_as(m, 0, 0, "a", 0, 5, 1);
    commit_as(m, 0, 0, "a", 5, 10, 2);
    size_t la, lb, lx;
    sl_master_token_exclude_t held = {0, 0, 5, 10, 0};
    void *ta = take(m, "a", 0, 2, &held, 1, &la, SL_OK, &err);
    commit_as(m, 0, 1, "b", 0, 10, 3); /* epoch 0 done: epoch 1 */
    commit_as(m, 1, 0, "b", 0, 4, 4);  /* b hands out [0,4) of split 0 in epoch 1 */
    void *tb = take(m, "b", 1, 2, NULL, 0, &lb, SL_OK, &err);
    /* a's token (epoch 0) and b's (epoch 1): epoch 0 starts again with
     * everything but a's held [5,10) of split 0; epoch 1 keeps b's [0,4) */
    sl_master_state_t *q;
    char *dir = tu_mkdtemp("master-token-later");
    sl_master_state_opts_t qo = {.allocator = ALLOC};
    cr_assert_eq(ms_open(dir, &qo, 0, &q, NULL, &err), SL_OK);
    const void *ts[2] = {tb, ta};
    size_t ls[2] = {lb, la};
    sl_master_state_job_spec_t spec3 = spec;
    spec3.ranks = 3;
    cr_assert_eq(sl_master_state_job_resume_ranks(q, &spec3, ts, ls, 2, &err), SL_OK, "%s",
                 err.msg);
    /* the later epoch's ranges wait in the state: a snapshot keeps them */
    char *before = dump_of(q);
    cr_assert(strstr(before, " later 1:0[0,4)\n") != NULL, "%s", before);
    cr_assert_eq(ms_compact(q, &err), SL_OK, "%s", err.msg);
    ms_destroy(q);
    cr_assert_eq(ms_open(dir, &qo, 0, &q, NULL, &err), SL_OK, "%s", err.msg);
    char *after = dump_of(q);
    cr_assert_str_eq(after, before);
    free(before);
    free(after);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(q, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 0);
    const sl_dpp_row_range_t *r;
    uint32_t n;
    cr_assert_eq(sl_master_state_committed(q, "j", 0, &r, &n, &err), SL_OK);
    cr_assert_eq(n, 1);
    cr_assert(r[0].from_row == 0 && r[0].to_row == 5);
    cr_assert_eq(sl_master_state_committed(q, "j", 1, &r, &n, &err), SL_OK);
    cr_assert(n == 1 && r[0].from_row == 0 && r[0].to_row == 10);
    /* the held rows come again in epoch 0; epoch 1 then begins with [0,4) */
    commit_as(q, 0, 0, "c", 5, 10, 1);
    cr_assert_eq(sl_master_state_job_status(q, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 1);
    cr_assert_eq(sl_master_state_committed(q, "j", 0, &r, &n, &err), SL_OK);
    cr_assert(n == 1 && r[0].from_row == 0 && r[0].to_row == 4, "%u ranges", n);
    cr_assert_eq(sl_master_state_committed(q, "j", 1, &r, &n, &err), SL_OK);
    cr_assert_eq(n, 0);
    /* replay applies them at the same point */
    cr_assert_eq(ms_sync(q, &err), SL_OK, "%s", err.msg);
    before = dump_of(q);
    cr_assert(strstr(before, " later ") == NULL, "%s", before);
    ms_destroy(q);
    cr_assert_eq(ms_open(dir, &qo, 0, &q, NULL, &err), SL_OK, "%s", err.msg);
    after = dump_of(q);
    cr_assert_str_eq(after, before);
    free(before);
    free(after);
    ms_destroy(q);
    tu_rm_tree(dir);
    free(dir);

    /* two epochs further: b's token at epoch 2 and a's at 0 are refused */
    commit_as(m, 1, 0, "b", 4, 10, 5);
    commit_as(m, 1, 1, "b", 0, 10, 6); /* epoch 2 */
    sl_free(ALLOC, tb, lb);
    tb = take(m, "b", 1, 2, NULL, 0, &lb, SL_OK, &err);
    ts[0] = tb;
    ls[0] = lb;
    cr_assert_eq(sl_master_state_new(&o, &q, &err), SL_OK);
    cr_assert_eq(sl_master_state_job_resume_ranks(q, &spec, ts, ls, 2, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "tokens taken in epochs 0 and 2") != NULL, "%s", err.msg);
    ms_destroy(q);
    /* a still holds [5,10) of epoch 0: no token in epoch 2 */
    void *tx = take(m, "a", 0, 2, &held, 1, &lx, SL_ERR_INVALID, &err);
    cr_assert_null(tx);
    cr_assert(strstr(err.msg, "holds a batch of epoch 0 not handed out while the job is in "
                              "epoch 2") != NULL,
              "%s", err.msg);
    sl_free(ALLOC, ta, la);
    sl_free(ALLOC, tb, lb);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

/* Static sharding resumed with other ranks: the rows left are shared
 * evenly, and the next epoch is assigned over whole splits again. */
Test(master_token, static_resume_shares_the_rows_left)
{
    uint64_t rows[6] = {100, 100, 100, 100, 100, 100};
    for (int i = 0; i < 6; i++)
        g_splits[i] = (sl_wh_split_t){.path = g_path,
                                      .partition = "p",
                                      .stripe_begin = (uint32_t)i,
                                      .stripe_end = (uint32_t)i + 1,
                                      .first_row = 100u * i,
                                      .num_rows = rows[i]};
    sl_master_state_opts_t o = {.allocator = ALLOC};
    sl_master_state_t *m;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_new(&o, &m, &err), SL_OK);
    sl_master_state_job_spec_t spec = {
        .job_id = "j", .splits = g_splits, .num_splits = 6, .epochs = 2, .ranks = 1};
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    /* the one rank read splits 0..2 whole and 90 rows of split 3 */
    for (uint32_t s = 0; s < 3; s++)
        commit_as(m, 0, s, "a", 0, 100, s + 1);
    commit_as(m, 0, 3, "a", 0, 90, 9);
    size_t len;
    void *t = take(m, "a", 0, 1, NULL, 0, &len, SL_OK, &err);
    sl_master_state_t *q;
    cr_assert_eq(sl_master_state_new(&o, &q, &err), SL_OK);
    sl_master_state_job_spec_t s2 = spec;
    s2.ranks = 2;
    s2.static_sharding = true;
    const void *ts[1] = {t};
    cr_assert_eq(sl_master_state_job_resume_ranks(q, &s2, ts, &len, 1, &err), SL_OK, "%s", err.msg);
    /* left: split 3 (10 rows), 4 and 5 (100 each): 100 + 110 */
    uint64_t left[2] = {0, 0};
    uint64_t rest[6] = {0, 0, 0, 10, 100, 100};
    for (uint32_t s = 0; s < 6; s++) {
        uint32_t r = sl_master_state_split_rank(q, "j", s);
        cr_assert(r == 1 || r == 2);
        left[r - 1] += rest[s];
    }
    cr_assert((left[0] == 100 && left[1] == 110) || (left[0] == 110 && left[1] == 100),
              "%llu + %llu rows", (unsigned long long)left[0], (unsigned long long)left[1]);
    /* the epoch read: epoch 1 is assigned over whole splits, 3 and 3 */
    commit_as(q, 0, 3, "b", 90, 100, 1);
    commit_as(q, 0, 4, "b", 0, 100, 2);
    commit_as(q, 0, 5, "b", 0, 100, 3);
    sl_master_state_job_status_t st;
    cr_assert_eq(sl_master_state_job_status(q, "j", &st, &err), SL_OK);
    cr_assert_eq(st.epoch, 1);
    uint32_t per[2] = {0, 0};
    for (uint32_t s = 0; s < 6; s++)
        per[sl_master_state_split_rank(q, "j", s) - 1]++;
    cr_assert(per[0] == 3 && per[1] == 3, "%u + %u splits", per[0], per[1]);
    sl_free(ALLOC, t, len);
    ms_destroy(q);
    ms_destroy(m);
    tu_alloc_assert_clean(&g_ta);
}

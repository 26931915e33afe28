/* Version-4 resume tokens (src/dpp/master/state_token.c, state_attr.c): a
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

#include "dpp/master/state.h"
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
    cr_assert_eq(sl_master_state_open(&s->o, s->now, &s->m, NULL, &err), SL_OK, "%s", err.msg);
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
    if (compact) cr_assert_eq(sl_master_state_compact(s->m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_master_state_sync(s->m, &err), SL_OK, "%s", err.msg);
    char *before = dump_of(s->m);
    sl_master_state_destroy(s->m);
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
    s->o = (sl_master_state_opts_t){
        .state_dir = s->dir, .lease_timeout_ms = 1u << 30, .allocator = ALLOC};
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
    sl_master_state_destroy(s->m);
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
    sl_master_split_state_t st;
    sl_err_t rc = sl_master_state_split_read(s->m, "j", w->l.epoch, w->l.split, w->l.generation,
                                             w->empty, w->ne, &st, &err);
    cr_assert(rc == SL_OK || rc == SL_MASTER_STALE, "%s", err.msg);
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
        sl_master_commit_result_t res;
        cr_assert_eq(sl_master_state_commit(s->m, "j", b.epoch, b.split, b.gen, b.from, b.to,
                                            c->name, ++c->nonce, &res, &err),
                     SL_OK, "%s", err.msg);
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
    cr_assert_eq(sl_master_state_open(&o, 0, &q, NULL, err), SL_OK);
    sl_master_state_job_spec_t spec = spec_of(2, false);
    spec.job_id = job;
    sl_err_t rc = sl_master_state_job_resume_ranks(q, &spec, (const void *const *)t, len, n, err);
    sl_master_state_job_status_t st;
    sl_error_t e2 = {0};
    /* a refused set starts nothing */
    if (rc != SL_OK) cr_assert_eq(sl_master_state_job_status(q, job, &st, &e2), SL_ERR_NOT_FOUND);
    sl_master_state_destroy(q);
    return rc;
}

Test(master_token, a_set_that_cannot_be_honoured_is_refused_naming_why)
{
    uint64_t seed = 5;
    make_splits(&seed);
    sl_master_state_opts_t o = {.allocator = ALLOC};
    sl_master_state_t *m, *m2;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_state_open(&o, 0, &m, NULL, &err), SL_OK);
    cr_assert_eq(sl_master_state_open(&o, 0, &m2, NULL, &err), SL_OK);
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
    sl_master_state_destroy(m);
    sl_master_state_destroy(m2);
    tu_alloc_assert_clean(&g_ta);
}

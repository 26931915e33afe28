/* The property of the DPP master's state machine (src/dpp/master/state/state.h):
 * exactly-once acknowledged progress across random interleavings, duplicate
 * batches, expiries and restarts from the journal, dynamic and static
 * sharding. Each run prints its seed; replay with SLUICE_TEST_SEED. */
#include "master_state_util.h"

/* ---- property: exactly-once acknowledged progress ---------------------------------- */

typedef struct sim_batch {
    uint32_t epoch, split;
    uint64_t gen; /* the lease it was read under */
    uint64_t from, to;
    uint64_t nonce; /* given by the client that commits it, on first try */
    int client;     /* -1: not yet taken */
} sim_batch;

typedef struct sim_worker {
    bool has;
    sl_master_lease_t l;
    sl_dpp_row_range_t todo[64];
    uint32_t num_todo, at; /* next todo range, and row within it */
    uint64_t row;
    sl_dpp_row_range_t empty[64];
    uint32_t num_empty;
    char name[16];
} sim_worker;

#define QCAP 4096

/* static_sharding: over 3 ranks, each reading its share of an epoch on
 * its own (state_rank.c), its splits' batches of its own epoch. */
static void property_exactly_once(bool static_sharding, const char *seed_name)
{
    enum { N = 16, W = 4, C = 2, EPOCHS = 2 };
    uint64_t s = tu_seed(seed_name);
    uint64_t rows[N];
    for (uint32_t i = 0; i < N; i++)
        rows[i] = tu_below(&s, 60); /* empty splits too */
    make_splits(N, rows);
    char *dir = tmp_state_dir();
    sl_master_state_opts_t o = {.lease_timeout_ms = 50, .allocator = ALLOC};
    sl_master_store_opts_t so = {.compact_bytes = 2048 + tu_below(&s, 4096)};
    sl_error_t err = {0};
    sl_master_state_t *m = NULL;
    uint64_t now = 0;
    cr_assert_eq(ms_open_with(dir, &so, &o, now, &m, NULL, &err), SL_OK, "%s", err.msg);
    sl_master_state_job_spec_t spec = spec_of("p", N, EPOCHS, true, s);
    spec.ranks = static_sharding ? 3 : 1;
    spec.static_sharding = static_sharding;
    cr_assert_eq(sl_master_state_job_add(m, &spec, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(ms_sync(m, &err), SL_OK);
    /* delivered[e][split][row]: how often the row reached a trainer (a
     * COMMITTED answer, after a sync) or was committed as empty. */
    static uint8_t delivered[EPOCHS][N][64];
    memset(delivered, 0, sizeof delivered);
    static uint8_t empty_seen[EPOCHS][N][64];
    memset(empty_seen, 0, sizeof empty_seen);
    static sim_batch q[QCAP];
    uint32_t nq = 0;
    uint64_t next_nonce[C] = {1, 1};
    sim_worker w[W] = {0};
    for (int i = 0; i < W; i++)
        snprintf(w[i].name, sizeof w[i].name, "w%d", i);
    sl_master_state_job_status_t st;
    int steps = 0, restarts = 0;
    for (;;) {
        cr_assert_eq(sl_master_state_job_status(m, "p", &st, &err), SL_OK);
        if (st.finished) break;
        cr_assert_lt(++steps, 300000, "no progress");
        now += tu_below(&s, 10);
        sim_worker *x = &w[tu_below(&s, W)];
        uint64_t op = tu_below(&s, 100);
        if (op < 2) {
            /* master restart: unsynced changes are lost (their answers were
             * never sent); clients retry with the same nonces. After a
             * sync, replay must give exactly the live state (who committed
             * what included, state_attr.c). */
            char *live = NULL;
            if (tu_below(&s, 2) == 0) {
                cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
                live = dump_of(m);
            }
            ms_destroy(m);
            cr_assert_eq(ms_open_with(dir, &so, &o, now, &m, NULL, &err), SL_OK, "%s", err.msg);
            if (live != NULL) {
                char *replayed = dump_of(m);
                cr_assert_str_eq(replayed, live, "replay differs from the live state");
                free(replayed);
                free(live);
            }
            restarts++;
            /* every worker reconnects and registers, naming its lease */
            for (int i = 0; i < W; i++) {
                sl_master_lease_ref_t held = {"p", w[i].l.epoch, w[i].l.split, w[i].l.generation};
                cr_assert_eq(
                    sl_master_state_register(m, w[i].name, &held, w[i].has, now, NULL, NULL, &err),
                    SL_OK, "%s", err.msg);
            }
            continue;
        }
        if (op < 4) { /* the worker dies: its queued batches stay with the clients */
            x->has = false;
            continue;
        }
        if (op < 5) {
            /* a new process takes the worker's id: it holds nothing, so the
             * lease of the old one is revoked at once */
            x->has = false;
            cr_assert_eq(sl_master_state_register(m, x->name, NULL, 0, now, NULL, NULL, &err),
                         SL_OK, "%s", err.msg);
            continue;
        }
        if (op < 10) {
            cr_assert_eq(sl_master_state_expire(m, now, NULL, &err), SL_OK);
            continue;
        }
        if (op < 55 && nq > 0) {
            /* a client commits a queued batch (any order), or a duplicate
             * of the batch stays in the queue (retry later) */
            uint32_t k = (uint32_t)tu_below(&s, nq);
            sim_batch *b = &q[k];
            if (b->client < 0) {
                b->client = (int)tu_below(&s, C);
                b->nonce = next_nonce[b->client]++;
            }
            char cid[16];
            snprintf(cid, sizeof cid, "c%d", b->client);
            sl_master_commit_result_t res = sl_master_state_commit(
                m, "p", b->epoch, b->split, b->gen, b->from, b->to, cid, b->nonce, &err);
            cr_assert_neq(res, SL_MASTER_COMMIT_ERROR, "%s", err.msg);
            if (tu_below(&s, 4) == 0) continue; /* answer lost (connection, crash): retry */
            cr_assert_eq(ms_sync(m, &err), SL_OK, "%s", err.msg);
            if (res == SL_MASTER_COMMITTED)
                for (uint64_t r = b->from; r < b->to; r++)
                    delivered[b->epoch][b->split][r]++;
            q[k] = q[--nq];
            continue;
        }
        if (!x->has) {
            sl_err_t rc = sl_master_state_lease_next(m, "p", x->name, now, &x->l, &err);
            cr_assert(rc == SL_OK || rc == SL_ERR_AGAIN, "%s", err.msg);
            if (rc == SL_OK) {
                x->has = true;
                cr_assert_leq(x->l.num_todo, 64);
                memcpy(x->todo, x->l.todo, x->l.num_todo * sizeof *x->todo);
                x->num_todo = x->l.num_todo;
                x->at = 0;
                x->row = x->num_todo ? x->todo[0].from_row : 0;
                x->num_empty = 0;
            }
            continue;
        }
        if (op < 70) {
            sl_master_lease_ref_t held = {"p", x->l.epoch, x->l.split, x->l.generation};
            sl_master_state_renew(m, x->name, &held, 1, now, NULL, &err);
            continue;
        }
        if (x->at < x->num_todo) {
            /* next batch within the current todo range */
            uint64_t end = x->todo[x->at].to_row;
            uint64_t to = x->row + 1 + tu_below(&s, 8);
            if (to > end) to = end;
            if (tu_below(&s, 5) == 0) {
                if (x->num_empty < 64)
                    x->empty[x->num_empty++] = (sl_dpp_row_range_t){x->row, to};
                else
                    to = x->row; /* no room: do not skip rows */
            } else if (nq + 2 <= QCAP) {
                sim_batch b = {.epoch = x->l.epoch,
                               .split = x->l.split,
                               .gen = x->l.generation,
                               .from = x->row,
                               .to = to,
                               .client = -1};
                q[nq++] = b;
                if (tu_below(&s, 10) == 0) q[nq++] = b; /* a duplicate copy */
            } else {
                to = x->row;
            }
            x->row = to;
            if (x->row == end && ++x->at < x->num_todo) x->row = x->todo[x->at].from_row;
            continue;
        }
        /* all handed out: split read once every batch of the lease is
         * answered */
        bool unanswered = false;
        for (uint32_t k = 0; k < nq && !unanswered; k++)
            unanswered = q[k].gen == x->l.generation;
        if (unanswered) continue;
        sl_master_read_result_t rr = sl_master_state_split_read(
            m, "p", x->l.epoch, x->l.split, x->l.generation, x->empty, x->num_empty, &err);
        cr_assert(rr != SL_MASTER_READ_ERROR, "%d %s", rr, err.msg);
        if (rr != SL_MASTER_READ_STALE) {
            cr_assert_eq(ms_sync(m, &err), SL_OK);
            for (uint32_t k = 0; k < x->num_empty; k++)
                for (uint64_t r = x->empty[k].from_row; r < x->empty[k].to_row; r++)
                    empty_seen[x->l.epoch][x->l.split][r] = 1;
        }
        x->has = false;
    }
    /* Clients retry what they never got an answer for: committed ones get
     * COMMITTED again (nonce remembered), the rest are refused. */
    for (uint32_t k = 0; k < nq; k++) {
        sim_batch *b = &q[k];
        if (b->client < 0) b->client = 0, b->nonce = next_nonce[0]++;
        char cid[16];
        snprintf(cid, sizeof cid, "c%d", b->client);
        sl_master_commit_result_t res = sl_master_state_commit(m, "p", b->epoch, b->split, b->gen,
                                                               b->from, b->to, cid, b->nonce, &err);
        cr_assert_neq(res, SL_MASTER_COMMIT_ERROR, "%s", err.msg);
        if (res == SL_MASTER_COMMITTED)
            for (uint64_t r = b->from; r < b->to; r++)
                delivered[b->epoch][b->split][r]++;
    }
    /* Each epoch: every row delivered exactly once, except rows a live
     * lease reported as producing no sample (filtered), delivered at most
     * once. */
    uint64_t total = 0;
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t i = 0; i < N; i++)
            for (uint64_t r = 0; r < rows[i]; r++) {
                cr_assert_leq(delivered[e][i][r], 1,
                              "epoch %u split %u row %llu delivered %u times", e, i,
                              (unsigned long long)r, delivered[e][i][r]);
                cr_assert(delivered[e][i][r] == 1 || empty_seen[e][i][r],
                          "epoch %u split %u row %llu lost", e, i, (unsigned long long)r);
                total += delivered[e][i][r];
            }
    cr_assert_gt(total, 0);
    cr_assert_gt(restarts, 0);
    ms_destroy(m);
    rm_state_dir(dir);
    tu_alloc_assert_clean(&g_ta);
}

Test(master_state, property_exactly_once_across_failures_and_restarts)
{
    property_exactly_once(false, "master_state::property_exactly_once");
}

Test(master_state, property_exactly_once_static_sharding_per_rank_epochs)
{
    property_exactly_once(true, "master_state::property_exactly_once_static");
}

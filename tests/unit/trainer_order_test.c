/* The trainer client under the deterministic order (src/trainer/order.c)
 * against a fake master and fake workers (trainer_master_fakes.h) that
 * honour the g-window: batches are handed out in g order whichever worker
 * sends them first; a rank waiting for its next batch says which in its
 * timeout; a worker holding later batches cannot send past the window; the
 * next epoch's batches are not sent before the master says the epoch is
 * over, and then come in g order too; a resume token names the reorder
 * buffer's batches as not handed out. */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "sluice/trainer.h"
#include "testutil.h"
#include "trainer_master_fakes.h"

#define JOB "job-o"

static sl_trainer_t *attach(const fk_master_t *m, uint32_t prefetch)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = m->addr;
    o.job_id = JOB;
    o.client_name = "test-trainer";
    o.prefetch = prefetch;
    o.rank = 0;
    o.world_size = 1;
    o.refresh_ms = 50;
    o.reconnect_ms = 5000;
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    return t;
}

/* Split s, rows [0, 4), as batch g of epoch e. */
static void add_g(fk_worker_t *w, uint32_t s, uint32_t e, uint64_t g)
{
    fk_add(w, s, 0, 4, 1, 0);
    w->b[w->n - 1].epoch = e;
    w->b[w->n - 1].g_plus_one = g + 1;
}

/* The next batch must be split s's (sample ids s * 1000 + 0..3). */
static void expect(sl_trainer_t *t, uint32_t s)
{
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &b, &err), SL_OK, "split %u: %s",
                 s, err.msg);
    cr_assert_eq(b->batch_size, 4);
    for (uint32_t r = 0; r < 4; r++)
        cr_assert_eq(b->sample_ids[r], (int64_t)(s * 1000 + r), "split %u row %u", s, r);
    sl_trainer_release(t, b);
}

static uint32_t sent(const fk_worker_t *w, uint32_t i)
{
    return __atomic_load_n(&w->sent[i], __ATOMIC_SEQ_CST);
}

/* Epoch 0: g 0..4 are splits 0..4; worker a holds g 1, 3, 4, worker b
 * g 0, 2 and joins late. Epoch 1: g 0 (split 5) on b, g 1 (split 6) on a.
 * One rank, prefetch 2: the window is g < next + 2. */
Test(trainer_order, batches_go_out_in_g_order_on_the_g_window)
{
    fk_master_t m = {.job = JOB, .splits = 7, .rows_per_split = 4, .order_ranks = 1};
    fk_worker_t a = {.id = "wa", .job = JOB}, b = {.id = "wb", .job = JOB};
    add_g(&a, 1, 0, 1);
    add_g(&a, 3, 0, 3);
    add_g(&a, 4, 0, 4);
    add_g(&a, 6, 1, 1);
    add_g(&b, 0, 0, 0);
    add_g(&b, 2, 0, 2);
    add_g(&b, 5, 1, 0);
    fk_master_start(&m);
    fk_worker_start(&a);
    fk_worker_start(&b);
    fk_master_add_worker(&m, &a);
    sl_trainer_t *t = attach(&m, 2);

    /* only a: g 1 arrives and waits for g 0; g 3 is past the window */
    sl_error_t err = {0};
    sl_batch_t *x = NULL;
    bool named = false;
    for (int i = 0; i < 100 && !named; i++) {
        cr_assert_eq(sl_trainer_next(t, 50, &x, &err), SL_ERR_TIMEOUT, "%s", err.msg);
        named = strstr(err.msg, "rank 0 waits for batch g 0 of epoch 0 (1 later ones held)");
    }
    cr_assert(named, "%s", err.msg);
    cr_assert_eq(sent(&a, 1), 0, "g 3 sent past the window (g < 2)");

    fk_master_add_worker(&m, &b); /* b holds g 0: it may send it, whatever a sent */
    expect(t, 0);
    expect(t, 1);
    expect(t, 2);
    expect(t, 3);
    expect(t, 4);
    /* epoch 0 handed out; epoch 1's batches wait for the master's word */
    usleep(200000);
    cr_assert_eq(sent(&a, 3) + sent(&b, 2), 0, "a batch of epoch 1 before epoch 0 was over");
    pthread_mutex_lock(&m.mu);
    m.epoch = 1;
    pthread_mutex_unlock(&m.mu);
    expect(t, 5);
    expect(t, 6);
    sl_batch_t *end = NULL;
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &end, &err), SL_ERR_CLOSED, "%s",
                 err.msg);
    /* every batch acknowledged (on its commit's answer) */
    for (int i = 0; i < 500 && !(fk_worker_idle(&a) && fk_worker_idle(&b)); i++)
        usleep(10000);
    cr_assert(fk_worker_idle(&a) && fk_worker_idle(&b), "a batch never acknowledged");
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.batches, 7);
    cr_assert_eq(st.dropped, 0);
    sl_trainer_close(t);
    fk_worker_stop(&a);
    fk_worker_stop(&b);
    fk_master_stop(&m);
    for (uint32_t i = 0; i < a.n; i++)
        cr_assert_eq(a.sent[i], 1, "a's batch %u sent %u times (%u connections, acks %u)", i,
                     a.sent[i], a.connections, a.acks[i]);
    for (uint32_t i = 0; i < b.n; i++)
        cr_assert_eq(b.sent[i], 1, "b's batch %u sent %u times", i, b.sent[i]);
}

/* A world size other than the job's ranks in the order is refused. */
Test(trainer_order, a_world_size_other_than_the_orders_ranks_is_refused)
{
    fk_master_t m = {.job = JOB, .splits = 1, .rows_per_split = 4, .order_ranks = 2};
    fk_master_start(&m);
    sl_trainer_t *t = attach(&m, 2);
    sl_batch_t *x = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, (int)(tu_timeout(10) * 1000), &x, &err), SL_ERR_INVALID, "%s",
                 err.msg);
    cr_assert(strstr(err.msg, "job job-o: the job is in the deterministic order for 2 ranks; "
                              "this client's world size is 1"),
              "%s", err.msg);
    sl_trainer_close(t);
    fk_master_stop(&m);
}

/* A resume token (sl_trainer_resume_token) names the batches waiting in
 * the reorder buffer (committed, not handed out: g 1 waiting for g 0) as
 * undelivered, so a resume reads them again; once handed out they are in
 * the token. The fake master's token lists the committed ranges not named
 * undelivered. */
Test(trainer_order, a_token_names_the_reorder_buffers_batches_as_not_handed_out)
{
    fk_master_t m = {.job = JOB, .splits = 2, .rows_per_split = 4, .order_ranks = 1};
    fk_worker_t a = {.id = "wa", .job = JOB}, b = {.id = "wb", .job = JOB};
    add_g(&a, 1, 0, 1);
    add_g(&b, 0, 0, 0);
    fk_master_start(&m);
    fk_worker_start(&a);
    fk_worker_start(&b);
    fk_master_add_worker(&m, &a);
    sl_trainer_t *t = attach(&m, 2);
    sl_error_t err = {0};
    sl_batch_t *x = NULL;
    bool held = false;
    for (int i = 0; i < 100 && !held; i++) {
        cr_assert_eq(sl_trainer_next(t, 50, &x, &err), SL_ERR_TIMEOUT, "%s", err.msg);
        held = strstr(err.msg, "rank 0 waits for batch g 0 of epoch 0 (1 later ones held)");
    }
    cr_assert(held, "%s", err.msg);
    uint8_t *tok = NULL;
    size_t len = 0;
    cr_assert_eq(sl_trainer_resume_token(t, (int)(tu_timeout(10) * 1000), &tok, &len, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_str_eq((const char *)tok, "", "split 1 (g 1) is committed but not handed out");
    sl_trainer_token_free(t, tok, len);
    fk_master_add_worker(&m, &b);
    expect(t, 0);
    expect(t, 1);
    cr_assert_eq(sl_trainer_resume_token(t, (int)(tu_timeout(10) * 1000), &tok, &len, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_str_eq((const char *)tok, "0:0-4,1:0-4,");
    sl_trainer_token_free(t, tok, len);
    sl_trainer_close(t);
    fk_worker_stop(&a);
    fk_worker_stop(&b);
    fk_master_stop(&m);
}

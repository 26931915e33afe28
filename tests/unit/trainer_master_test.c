/* The trainer client in master mode (src/trainer/fleet*.c) against a fake
 * master and fake workers (trainer_master_fakes.h): a batch is handed out
 * only after its range is committed, so copies of a batch (a worker that
 * re-sends after a lost connection, a split served by two leases) are
 * delivered once; a commit whose answer was lost is retried with its nonce;
 * every delivery is acked once; the per-worker window bounds memory; other
 * ranks' batches are dropped; resume tokens name exactly what was handed
 * out; refusals come back as clear errors. */
#include <criterion/criterion.h>
#include <time.h>

#include "common/clock.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "trainer_master_fakes.h"

#define JOB "job-7"

static int wait_ms(void)
{
    return (int)(tu_timeout(10) * 1000);
}

static sl_trainer_t *attach(const fk_master_t *m, uint32_t prefetch, uint32_t rank, uint32_t world)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = m->addr;
    o.job_id = JOB;
    o.client_name = "test-trainer";
    o.prefetch = prefetch;
    o.rank = rank;
    o.world_size = world;
    o.refresh_ms = 50;
    o.reconnect_ms = 5000;
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    return t;
}

/* Read until the job ends; counts[id]++ for every sample id handed out.
 * @return batches handed out. */
static uint32_t drain(sl_trainer_t *t, uint32_t *counts, uint32_t cap)
{
    uint32_t n = 0;
    for (;;) {
        sl_batch_t *b = NULL;
        sl_error_t err = {0};
        sl_err_t rc = sl_trainer_next(t, wait_ms(), &b, &err);
        if (rc == SL_ERR_CLOSED) break;
        cr_assert_eq(rc, SL_OK, "after %u batches: %s", n, err.msg);
        for (uint32_t r = 0; r < b->batch_size; r++) {
            int64_t id = b->sample_ids[r];
            cr_assert(id >= 0 && (uint64_t)id < cap, "sample id %lld", (long long)id);
            counts[id]++;
        }
        sl_trainer_release(t, b);
        n++;
    }
    return n;
}

/* lost: acks the worker may have missed because it hung up without
 * reading them (its first connection, close_after). */
static void expect_every_delivery_acked(const fk_worker_t *w, uint32_t lost)
{
    cr_assert_eq(w->bad_acks, 0, "worker %s: acks of unknown or already acked ids", w->id);
    cr_assert(w->total_acked <= w->total_sent && w->total_acked + lost >= w->total_sent,
              "worker %s: %u deliveries, %u acked", w->id, w->total_sent, w->total_acked);
    for (uint32_t i = 0; i < w->n; i++)
        cr_assert(w->acks[i] >= 1, "worker %s batch %u never acked", w->id, i);
}

/* Worker a serves splits 0-3, worker b splits 2-5 (a second lease of 2 and
 * 3), and a hangs up after 5 batches and re-sends what was not acked: every
 * sample is still handed out exactly once. */
Test(trainer_master, copies_are_delivered_once)
{
    fk_master_t m = {.job = JOB, .splits = 6, .rows_per_split = 40};
    fk_worker_t a = {.id = "wa", .job = JOB, .close_after = 5};
    fk_worker_t b = {.id = "wb", .job = JOB};
    for (uint32_t s = 0; s < 4; s++)
        for (uint64_t r = 0; r < 40; r += 10)
            fk_add(&a, s, r, r + 10, 1, 0);
    for (uint32_t s = 2; s < 6; s++)
        for (uint64_t r = 0; r < 40; r += 10)
            fk_add(&b, s, r, r + 10, 2, 0);
    fk_worker_start(&a);
    fk_worker_start(&b);
    fk_master_start(&m);
    fk_master_add_worker(&m, &a);
    fk_master_add_worker(&m, &b);

    sl_trainer_t *t = attach(&m, 3, 0, 1);
    uint32_t counts[6000] = {0};
    uint32_t n = drain(t, counts, 6000);
    for (uint32_t s = 0; s < 6; s++)
        for (uint32_t r = 0; r < 40; r++)
            cr_assert_eq(counts[s * 1000 + r], 1, "sample %u delivered %u times", s * 1000 + r,
                         counts[s * 1000 + r]);
    cr_assert_eq(n, 24);
    /* The copies still coming are refused and acked; wait until the workers
     * are idle (and one more refresh reports the last batches). */
    for (int i = 0; i < wait_ms() / 10 && !(fk_worker_idle(&a) && fk_worker_idle(&b)); i++) {
        struct timespec tick = {0, 10 * 1000000};
        nanosleep(&tick, NULL);
    }
    cr_assert(fk_worker_idle(&a) && fk_worker_idle(&b),
              "workers still busy: a %u/%u batches acked, %u/%u deliveries; b %u/%u, %u/%u",
              a.acked_batches, a.n, a.total_acked, a.total_sent, b.acked_batches, b.n,
              b.total_acked, b.total_sent);
    struct timespec pause = {0, 150 * 1000000};
    nanosleep(&pause, NULL);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.batches, 24);
    cr_assert_eq(st.samples, 240);
    cr_assert_eq(st.committed, 24);
    /* Every copy beyond the first was refused by the master. */
    cr_assert_eq(st.dropped, (uint64_t)(a.total_sent + b.total_sent) - 24, "dropped %llu",
                 (unsigned long long)st.dropped);
    cr_assert_geq(st.dropped, 8, "splits 2 and 3 were served twice");
    cr_assert_geq(st.reconnects, 1);
    sl_trainer_close(t);
    fk_worker_stop(&a);
    fk_worker_stop(&b);
    fk_master_stop(&m);
    expect_every_delivery_acked(&a, 3);
    expect_every_delivery_acked(&b, 0);
    cr_assert_eq(a.connections, 2);
    cr_assert_eq(m.commits, a.total_sent + b.total_sent, "one commit per delivery");
    cr_assert_eq(m.repeated_nonces, 0);
    cr_assert_eq(m.client_ids_seen, 1);
    cr_assert(!m.bad_attach);
    cr_assert_geq(m.stats_msgs, 1);
    cr_assert_eq(m.stats_batches, 24, "CLIENT_STATS reported %llu batches",
                 (unsigned long long)m.stats_batches);
}

/* The master commits a range and hangs up before answering: the client
 * reconnects, sends the commit again under the same nonce, gets the first
 * answer (COMMITTED, not OVERLAP with itself) and hands the batch out once. */
Test(trainer_master, lost_commit_answer_is_retried_with_its_nonce)
{
    uint64_t seed = tu_seed("trainer_master.lost_commit_answer");
    fk_master_t m = {.job = JOB,
                     .splits = 1,
                     .rows_per_split = 60,
                     .drop_at_commit = 2 + (uint32_t)tu_below(&seed, 8)};
    fk_worker_t w = {.id = "w1", .job = JOB};
    for (uint64_t r = 0; r < 60; r += 5)
        fk_add(&w, 0, r, r + 5, 1, 0);
    fk_worker_start(&w);
    fk_master_start(&m);
    fk_master_add_worker(&m, &w);
    sl_trainer_t *t = attach(&m, 2, 0, 1);
    uint32_t counts[1000] = {0};
    cr_assert_eq(drain(t, counts, 1000), 12);
    for (uint32_t r = 0; r < 60; r++)
        cr_assert_eq(counts[r], 1, "sample %u delivered %u times", r, counts[r]);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.committed, 12);
    cr_assert_eq(st.dropped, 0);
    cr_assert_geq(st.reconnects, 1);
    sl_trainer_close(t);
    fk_worker_stop(&w);
    fk_master_stop(&m);
    cr_assert_geq(m.repeated_nonces, 1, "the lost answer's commit was sent again");
    cr_assert_eq(m.client_ids_seen, 1, "client id stable across reconnects");
    cr_assert_geq(m.connections, 2);
    expect_every_delivery_acked(&w, 0);
}

/* A trainer that does not read holds at most `prefetch` batches per
 * worker: credits come back only when a batch leaves the client. */
Test(trainer_master, window_bounds_memory_per_worker)
{
    fk_master_t m = {.job = JOB, .splits = 2, .rows_per_split = 80};
    fk_worker_t a = {.id = "wa", .job = JOB}, b = {.id = "wb", .job = JOB};
    for (uint64_t r = 0; r < 80; r += 4) {
        fk_add(&a, 0, r, r + 4, 1, 0);
        fk_add(&b, 1, r, r + 4, 1, 0);
    }
    fk_worker_start(&a);
    fk_worker_start(&b);
    fk_master_start(&m);
    fk_master_add_worker(&m, &a);
    fk_master_add_worker(&m, &b);
    sl_trainer_t *t = attach(&m, 3, 0, 1);
    struct timespec pause = {0, 300 * 1000000};
    nanosleep(&pause, NULL);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(__atomic_load_n(&a.total_sent, __ATOMIC_SEQ_CST), 3);
    cr_assert_eq(__atomic_load_n(&b.total_sent, __ATOMIC_SEQ_CST), 3);
    cr_assert_eq(st.queued, 6, "queued %u", st.queued);
    cr_assert_eq(st.workers, 2);
    uint32_t counts[2000] = {0};
    cr_assert_eq(drain(t, counts, 2000), 40);
    for (uint32_t s = 0; s < 2; s++)
        for (uint32_t r = 0; r < 80; r++)
            cr_assert_eq(counts[s * 1000 + r], 1);
    sl_trainer_close(t);
    fk_worker_stop(&a);
    fk_worker_stop(&b);
    fk_master_stop(&m);
    expect_every_delivery_acked(&a, 0);
    expect_every_delivery_acked(&b, 0);
}

/* Static sharding: batches of a lease for rank 1 are neither committed nor
 * handed out by rank 0's client, but acked (the worker frees them). */
Test(trainer_master, other_ranks_batches_are_dropped)
{
    fk_master_t m = {.job = JOB, .splits = 2, .rows_per_split = 30};
    fk_worker_t w = {.id = "w1", .job = JOB};
    for (uint64_t r = 0; r < 30; r += 6) {
        fk_add(&w, 0, r, r + 6, 1, 1); /* rank 0 */
        fk_add(&w, 1, r, r + 6, 1, 2); /* rank 1 */
    }
    fk_worker_start(&w);
    fk_master_start(&m);
    fk_master_add_worker(&m, &w);
    sl_trainer_t *t = attach(&m, 2, 0, 2);
    uint32_t got = 0;
    for (uint32_t i = 0; i < 5; i++) {
        sl_batch_t *b = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_trainer_next(t, wait_ms(), &b, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(b->sample_ids[0] / 1000, 0, "a batch of split 1 was handed out");
        got += b->batch_size;
        sl_trainer_release(t, b);
    }
    cr_assert_eq(got, 30);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, 300, &b, &err), SL_ERR_TIMEOUT, "%s", err.msg);
    cr_assert(strstr(err.msg, "no batch within 300 ms"), "%s", err.msg);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.dropped, 5);
    cr_assert_eq(st.committed, 5);
    sl_trainer_close(t);
    fk_worker_stop(&w);
    fk_master_stop(&m);
    cr_assert_eq(m.commits, 5, "only rank 0's batches are committed");
    cr_assert_eq(m.ndone[1], 0);
    expect_every_delivery_acked(&w, 0);
}

/* The token request names what was committed but not handed out, so the
 * master's token covers exactly the batches the trainer received. */
Test(trainer_master, resume_token_covers_what_was_handed_out)
{
    uint64_t seed = tu_seed("trainer_master.resume_token");
    fk_master_t m = {.job = JOB, .splits = 1, .rows_per_split = 100};
    fk_worker_t w = {.id = "w1", .job = JOB};
    for (uint64_t r = 0; r < 100; r += 10)
        fk_add(&w, 0, r, r + 10, 1, 0);
    fk_worker_start(&w);
    fk_master_start(&m);
    fk_master_add_worker(&m, &w);
    sl_trainer_t *t = attach(&m, 4, 0, 1);
    uint32_t take = 1 + (uint32_t)tu_below(&seed, 6);
    bool handed[10] = {0};
    for (uint32_t i = 0; i < take; i++) {
        sl_batch_t *b = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_trainer_next(t, wait_ms(), &b, &err), SL_OK, "%s", err.msg);
        handed[b->sample_ids[0] / 10] = true;
        sl_trainer_release(t, b);
    }
    /* Let more batches be committed and queue up behind the trainer. */
    struct timespec pause = {0, 100 * 1000000};
    nanosleep(&pause, NULL);
    uint8_t *tok = NULL;
    size_t len = 0;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_resume_token(t, wait_ms(), &tok, &len, &err), SL_OK, "%s", err.msg);
    char want[256] = "";
    size_t wl = 0;
    for (uint32_t i = 0; i < 10; i++)
        if (handed[i])
            wl += (size_t)snprintf(want + wl, sizeof want - wl, "0:%u-%u,", i * 10, i * 10 + 10);
    cr_assert_eq(len, strlen(want) + 1);
    cr_assert_str_eq((const char *)tok, want);
    sl_trainer_token_free(t, tok, len);
    uint32_t counts[1000] = {0};
    cr_assert_eq(drain(t, counts, 1000), 10 - take);
    cr_assert_eq(sl_trainer_resume_token(t, wait_ms(), &tok, &len, &err), SL_OK, "%s", err.msg);
    cr_assert_str_eq((const char *)tok, "0:0-10,0:10-20,0:20-30,0:30-40,0:40-50,0:50-60,0:60-70,"
                                        "0:70-80,0:80-90,0:90-100,");
    sl_trainer_token_free(t, tok, len);
    /* labelled with the checkpoint step: TOKEN_REQUEST carries it */
    cr_assert_eq(sl_trainer_resume_token_at(t, 42, wait_ms(), &tok, &len, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_str_eq((const char *)tok, "0:0-10,0:10-20,0:20-30,0:30-40,0:40-50,0:50-60,0:60-70,"
                                        "0:70-80,0:80-90,0:90-100,@42");
    sl_trainer_token_free(t, tok, len);
    cr_assert_eq(sl_trainer_resume_token_at(t, -1, wait_ms(), &tok, &len, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "resume token: step -1 (>= 0)");
    cr_assert_null(tok);
    sl_trainer_close(t);
    fk_worker_stop(&w);
    fk_master_stop(&m);
}

/* A worker's refusal of HELLO: "not now" (AGAIN) is tried again and the
 * worker then serves; any other (INVALID) gives that worker up, reported
 * in the timeout message, and the master's next ATTACHED tries it again. */
Test(trainer_master, worker_refusals_are_retried_or_reported)
{
    fk_master_t m = {.job = JOB, .splits = 1, .rows_per_split = 40};
    fk_worker_t a = {.id = "wa", .job = JOB, .refuse = 2, .refuse_code = SL_ERR_AGAIN};
    fk_worker_t b = {.id = "wb", .job = JOB, .refuse = 4, .refuse_code = SL_ERR_INVALID};
    for (uint64_t r = 0; r < 40; r += 10)
        fk_add(&a, 0, r, r + 10, 1, 0);
    fk_worker_start(&a);
    fk_worker_start(&b);
    fk_master_start(&m);
    fk_master_add_worker(&m, &b);
    sl_trainer_t *t = attach(&m, 2, 0, 1);
    sl_batch_t *bt = NULL;
    sl_error_t err = {0};
    /* refresh_ms 50: a new connection to wb every other ATTACHED, 3 at most */
    cr_assert_eq(sl_trainer_next(t, 250, &bt, &err), SL_ERR_TIMEOUT, "%s", err.msg);
    char want[256];
    snprintf(want, sizeof want,
             "last problem: worker wb (%s): refused the connection: refused by the test worker",
             b.addr);
    cr_assert(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
    fk_master_add_worker(&m, &a);
    uint32_t counts[1000] = {0};
    cr_assert_eq(drain(t, counts, 1000), 4);
    for (uint32_t r = 0; r < 40; r++)
        cr_assert_eq(counts[r], 1, "sample %u delivered %u times", r, counts[r]);
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    cr_assert_eq(st.committed, 4);
    cr_assert_eq(st.reconnects, 0, "first connections are not reconnects");
    sl_trainer_close(t);
    fk_worker_stop(&a);
    fk_worker_stop(&b);
    fk_master_stop(&m);
    cr_assert_eq(a.connections, 3, "two refusals, then served");
    cr_assert_geq(b.connections, 2, "tried again after a refusal");
    expect_every_delivery_acked(&a, 0);
}

Test(trainer_master, refusals_and_bad_options)
{
    fk_master_t m = {.job = "other-job", .splits = 1, .rows_per_split = 1};
    fk_master_start(&m);
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = m.addr;
    o.job_id = JOB;
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_NOT_FOUND, "%s", err.msg);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, "no job named that here") && strstr(err.msg, m.addr), "%s", err.msg);
    o.job_id = NULL;
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "without a job id"), "%s", err.msg);
    fk_master_stop(&m);
    /* Nobody listens there any more. */
    o.job_id = JOB;
    o.connect_timeout_ms = 1000;
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_IO, "%s", err.msg);
    cr_assert(strstr(err.msg, "master "), "%s", err.msg);
    cr_assert_eq(sl_trainer_resume_token(NULL, 0, NULL, NULL, &err), SL_ERR_INVALID);
}

/* ---- acks and credits withheld (docs/PROTOCOL.md "Acknowledgement and
 * redelivery") ---- */

static sl_trainer_stats_t stats_of(sl_trainer_t *t)
{
    sl_trainer_stats_t st;
    sl_trainer_stats(t, &st);
    return st;
}

/* Wait (bounded) until the client holds `queued` committed batches. */
static void wait_queued(sl_trainer_t *t, uint32_t queued)
{
    for (int i = 0; i < wait_ms() / 5 && stats_of(t).queued != queued; i++) {
        struct timespec tick = {0, 5 * 1000000};
        nanosleep(&tick, NULL);
    }
    cr_assert_eq(stats_of(t).queued, queued);
}

static void take(sl_trainer_t *t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        sl_batch_t *b = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_trainer_next(t, wait_ms(), &b, &err), SL_OK, "%s", err.msg);
        sl_trainer_release(t, b);
    }
}

/* The frames worker w read, as text: "R8 A4 ..." */
static void frames_text(const fk_worker_t *w, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < w->nframes && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%c%u", i ? " " : "", w->frame_type[i],
                              w->frame_count[i]);
}

/* A window of 8: the worker hears acks and credits 4 at a time (half the
 * window), never one frame per batch. The application takes batches in
 * steps so that what each frame carries is fixed: the first 8 commits (two
 * ACKs of 4), 4 taken (a REQUEST of 4), 4 more committed (an ACK of 4),
 * and so on; the time bound is an hour here, so only the counts send. */
Test(trainer_master, acks_and_credits_go_half_a_window_at_a_time)
{
    setenv("SLUICE_TRAINER_ACK_MS", "3600000", 1);
    fk_master_t m = {.job = JOB, .splits = 4, .rows_per_split = 40};
    fk_worker_t w = {.id = "wa", .job = JOB};
    for (uint32_t s = 0; s < 4; s++)
        for (uint64_t r = 0; r < 40; r += 10)
            fk_add(&w, s, r, r + 10, 1, 0);
    fk_worker_start(&w);
    fk_master_start(&m);
    fk_master_add_worker(&m, &w);
    sl_trainer_t *t = attach(&m, 8, 0, 1);
    wait_queued(t, 8);
    take(t, 4);
    wait_queued(t, 8);
    take(t, 4);
    wait_queued(t, 8);
    take(t, 8);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, wait_ms(), &b, &err), SL_ERR_CLOSED, "%s", err.msg);
    sl_trainer_close(t);
    fk_worker_stop(&w);
    fk_master_stop(&m);
    char got[512];
    frames_text(&w, got, sizeof got);
    cr_assert_str_eq(got, "R8 A4 A4 R4 A4 R4 A4 R4 R4 G0");
    cr_assert_eq(w.total_sent, 16);
    cr_assert_eq(w.total_acked, 16);
    expect_every_delivery_acked(&w, 0);
}

/* Fewer acks than half the window go out once the oldest waited
 * $SLUICE_TRAINER_ACK_MS (the master thread's timer: no batch is taken
 * here), and a client that closes sends what it withheld before its
 * GOODBYE. $SLUICE_TRAINER_ACK_EVERY=1 is one ACK and one REQUEST per
 * batch, as before; a value that is not a number is refused by name. */
Test(trainer_master, withheld_acks_go_after_ack_ms_and_before_goodbye)
{
    uint32_t bound_ms = (uint32_t)(tu_timeout(1) * 1000);
    char env[32];
    snprintf(env, sizeof env, "%u", bound_ms);
    setenv("SLUICE_TRAINER_ACK_MS", env, 1);
    fk_master_t m = {.job = JOB, .splits = 1, .rows_per_split = 20};
    fk_worker_t w = {.id = "wa", .job = JOB};
    fk_add(&w, 0, 0, 10, 1, 0);
    fk_add(&w, 0, 10, 20, 1, 0);
    fk_worker_start(&w);
    fk_master_start(&m);
    fk_master_add_worker(&m, &w);
    sl_trainer_t *t = attach(&m, 8, 0, 1);
    uint64_t t0 = sl_clock_ms();
    wait_queued(t, 2);
    cr_assert_eq(__atomic_load_n(&w.acked_batches, __ATOMIC_SEQ_CST), 0, "acks withheld");
    for (int i = 0; i < wait_ms() / 5 && !fk_worker_idle(&w); i++) {
        struct timespec tick = {0, 5 * 1000000};
        nanosleep(&tick, NULL);
    }
    cr_assert(fk_worker_idle(&w), "the timer sent the withheld acks");
    cr_assert_geq(sl_clock_ms() - t0, bound_ms);
    sl_trainer_close(t);
    fk_worker_stop(&w);
    char got[512];
    frames_text(&w, got, sizeof got);
    cr_assert_str_eq(got, "R8 A2 G0");

    /* closing: the acks before GOODBYE */
    setenv("SLUICE_TRAINER_ACK_MS", "3600000", 1);
    fk_worker_t w2 = {.id = "wb", .job = JOB};
    fk_add(&w2, 0, 0, 10, 1, 0);
    fk_add(&w2, 0, 10, 20, 1, 0);
    fk_worker_start(&w2);
    fk_master_stop(&m);
    fk_master_t m2 = {.job = JOB, .splits = 1, .rows_per_split = 20};
    fk_master_start(&m2);
    fk_master_add_worker(&m2, &w2);
    t = attach(&m2, 8, 0, 1);
    wait_queued(t, 2);
    sl_trainer_close(t);
    fk_worker_stop(&w2);
    frames_text(&w2, got, sizeof got);
    cr_assert_str_eq(got, "R8 A2 G0");
    expect_every_delivery_acked(&w2, 0);

    /* one of each per batch */
    setenv("SLUICE_TRAINER_ACK_EVERY", "1", 1);
    fk_worker_t w3 = {.id = "wc", .job = JOB};
    fk_add(&w3, 0, 0, 10, 1, 0);
    fk_add(&w3, 0, 10, 20, 1, 0);
    fk_worker_start(&w3);
    fk_master_stop(&m2);
    fk_master_t m3 = {.job = JOB, .splits = 1, .rows_per_split = 20};
    fk_master_start(&m3);
    fk_master_add_worker(&m3, &w3);
    t = attach(&m3, 8, 0, 1);
    wait_queued(t, 2);
    take(t, 2);
    sl_trainer_close(t);
    fk_worker_stop(&w3);
    frames_text(&w3, got, sizeof got);
    cr_assert_str_eq(got, "R8 A1 A1 R1 R1 G0");

    setenv("SLUICE_TRAINER_ACK_EVERY", "4x", 1);
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = m3.addr;
    o.job_id = JOB;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_INVALID, "%s", err.msg);
    cr_assert(strstr(err.msg, "trainer: $SLUICE_TRAINER_ACK_EVERY '4x'"), "%s", err.msg);
    fk_master_stop(&m3);
}

/* A trainer that waits longer than refresh_ms in one sl_trainer_next call
 * (no worker here: nothing comes) is seen waiting while it waits: a
 * CLIENT_STATS sent during the call reports its whole interval as wait,
 * exactly, not nothing until the call ends and then more wait than time. */
Test(trainer_master, a_long_wait_is_reported_while_it_lasts)
{
    fk_master_t m = {.job = JOB, .splits = 1, .rows_per_split = 10};
    fk_master_start(&m);
    sl_trainer_t *t = attach(&m, 2, 0, 1); /* refresh_ms 50 */
    int call_ms = (int)(tu_timeout(1) * 1000);
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    uint64_t start = sl_clock_ns();
    cr_assert_eq(sl_trainer_next(t, call_ms, &b, &err), SL_ERR_TIMEOUT, "%s", err.msg);
    uint64_t end = sl_clock_ns();
    sl_trainer_close(t);
    fk_master_stop(&m);

    uint32_t n = m.stats_msgs < FK_MAX_STATS ? m.stats_msgs : FK_MAX_STATS, whole = 0;
    uint64_t waited = 0;
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_leq(m.stats_wait[i], m.stats_elapsed[i], "report %u: waited %llu ns of %llu", i,
                      (unsigned long long)m.stats_wait[i], (unsigned long long)m.stats_elapsed[i]);
        whole += m.stats_elapsed[i] > 0 && m.stats_wait[i] == m.stats_elapsed[i];
        waited += m.stats_wait[i];
    }
    /* ~20 reports fall inside the call; under load a few at least */
    cr_assert_geq(whole, 3, "%u of %u reports of a %d ms wait say the trainer waited throughout",
                  whole, n, call_ms);
    cr_assert_leq(waited, end - start, "reported %llu ns of wait in a %llu ns call",
                  (unsigned long long)waited, (unsigned long long)(end - start));
}

/* The trainer client (src/trainer) against a fake worker
 * (trainer_fake_worker.h): every batch arrives byte for byte and is acked
 * exactly once, the credit window is never exceeded, END / ERROR / version
 * mismatch / malformed payloads / timeouts end as documented, and a lost
 * connection is re-established with the batches it had queued dropped. */
#include <criterion/criterion.h>
#include <time.h>

#include "sluice/trainer.h"
#include "testutil.h"
#include "trainer_fake_worker.h"

static int next_timeout_ms(void)
{
    return (int)(tu_timeout(10) * 1000);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static sl_trainer_t *connect_to(const fake_worker_t *w, uint32_t prefetch)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = w->addr;
    o.client_name = "test-trainer";
    o.prefetch = prefetch;
    o.rank = 2;
    o.world_size = 4;
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    cr_assert_not_null(t);
    return t;
}

/* The received batch is the one the worker encoded: same bytes when encoded
 * again (the encoding is deterministic), and equal tensors. */
static void expect_batch(const fake_worker_t *w, sl_batch_t *const *originals, uint32_t i,
                         const sl_batch_t *got)
{
    cr_assert_eq(got->batch_size, w->sizes[i], "batch %u", i);
    cr_assert_eq(got->origin.sequence, i, "expected batch %u, got %llu", i,
                 (unsigned long long)got->origin.sequence);
    cr_assert(sl_kjt_equal(&got->sparse, &originals[i]->sparse), "batch %u plain KJT", i);
    cr_assert(sl_kjt_equal(&got->groups[0].unique, &originals[i]->groups[0].unique));
    void *again = NULL;
    size_t len = 0;
    sl_error_t err = {0};
    cr_assert_eq(sl_wire_encode(got, NULL, &again, &len, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(len, w->lens[i]);
    cr_assert_eq(memcmp(again, w->frames[i], len), 0, "batch %u differs", i);
    sl_free(NULL, again, len);
}

static void free_originals(sl_batch_t **originals, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        sl_batch_destroy(originals[i]);
}

static void expect_closed(sl_trainer_t *t)
{
    sl_batch_t *b = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_ERR_CLOSED, "%s", err.msg);
    cr_assert_null(b);
    cr_assert(strstr(err.msg, "no more batches") != NULL, "%s", err.msg);
    /* and it stays so */
    cr_assert_eq(sl_trainer_next(t, 0, &b, &err), SL_ERR_CLOSED);
}

static void run_window(uint32_t n, uint32_t prefetch, uint32_t max_credits, const char *seed_name)
{
    uint64_t rng = tu_seed(seed_name);
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    sl_batch_t *originals[FW_MAX_BATCHES];
    fw_fill(&w, &rng, n, originals);
    w.window = prefetch;
    w.max_credits = max_credits;
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, prefetch);
    uint32_t window = max_credits && max_credits < prefetch ? max_credits : prefetch;
    uint64_t samples = 0;
    for (uint32_t i = 0; i < n; i++) {
        /* Now and then let the prefetch thread fill the window. */
        if (tu_below(&rng, 4) == 0) usleep(2000);
        sl_trainer_stats_t s;
        sl_trainer_stats(t, &s);
        cr_assert_leq(s.queued, window);
        sl_batch_t *b = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "batch %u: %s", i,
                     err.msg);
        expect_batch(&w, originals, i, b);
        samples += b->batch_size;
        sl_trainer_release(t, b);
    }
    expect_closed(t);
    sl_trainer_stats_t s;
    sl_trainer_stats(t, &s);
    cr_assert_eq(s.batches, n);
    cr_assert_eq(s.samples, samples);
    cr_assert_eq(s.queued, 0);
    cr_assert_eq(s.reconnects, 0);
    sl_trainer_close(t);
    fw_join(&w);
    /* every frame the worker sent (welcome, batches, end) was counted */
    cr_assert_eq(s.bytes, w.bytes_sent);
    cr_assert_not(w.credit_violation, "%s", w.violation);
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(w.acks[i], 1, "batch %u acks", i);
    cr_assert_eq(w.unknown_acks, 0);
    cr_assert_eq(w.late_acks, 0);
    cr_assert_eq(w.sent_total, n);
    cr_assert(w.got_goodbye);
    cr_assert_str_eq(w.hello_name, "test-trainer");
    cr_assert_eq(w.hello_rank, 2);
    cr_assert_eq(w.hello_world, 4);
    free_originals(originals, n);
    fw_free(&w);
}

Test(trainer_client, every_batch_once_within_the_window)
{
    run_window(60, 3, 0, "trainer_client.window");
}

Test(trainer_client, window_of_one)
{
    run_window(12, 1, 0, "trainer_client.window1");
}

Test(trainer_client, worker_max_credits_caps_the_window)
{
    run_window(20, 8, 2, "trainer_client.max_credits");
}

Test(trainer_client, end_without_batches)
{
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    w.window = 4;
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, 4);
    expect_closed(t);
    sl_trainer_close(t);
    fw_join(&w);
    cr_assert(w.got_goodbye);
}

Test(trainer_client, worker_error_is_propagated)
{
    uint64_t rng = tu_seed("trainer_client.error");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    sl_batch_t *originals[FW_MAX_BATCHES];
    fw_fill(&w, &rng, 10, originals);
    w.mode = FW_ERROR_AFTER;
    w.after = 3;
    w.window = 2;
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, 2);
    sl_batch_t *b;
    sl_error_t err = {0};
    /* The worker sends ERROR once 3 batches are acked; up to a window (2)
     * more may have arrived before it and be handed out. Batches still
     * queued when the ERROR comes are not: unacked, they belong to the
     * worker again. */
    uint32_t handed = 0;
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, next_timeout_ms(), &b, &err)) == SL_OK) {
        cr_assert_lt(handed, 5);
        expect_batch(&w, originals, handed, b);
        sl_trainer_release(t, b);
        handed++;
    }
    cr_assert_geq(handed, 3);
    cr_assert_eq(rc, SL_ERR_CORRUPT, "%s", err.msg);
    cr_assert_null(b);
    cr_assert(strstr(err.msg, "split 7 stripe 3: checksum mismatch") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, w.addr) != NULL, "%s", err.msg);
    sl_error_t again = {0};
    cr_assert_eq(sl_trainer_next(t, 0, &b, &again), SL_ERR_CORRUPT);
    cr_assert_str_eq(again.msg, err.msg);
    sl_trainer_close(t);
    fw_join(&w);
    for (uint32_t i = 0; i < 3; i++)
        cr_assert_eq(w.acks[i], 1);
    for (uint32_t i = handed; i < 10; i++)
        cr_assert_eq(w.acks[i], 0);
    free_originals(originals, 10);
    fw_free(&w);
}

Test(trainer_client, version_mismatch_in_welcome)
{
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    w.mode = FW_BAD_VERSION;
    fw_start(&w);
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = w.addr;
    sl_trainer_t *t = (sl_trainer_t *)&w; /* must be reset to NULL */
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_VERSION, "%s", err.msg);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, "version 2") != NULL, "%s", err.msg);
    fw_join(&w);
}

/* The worker hangs up with batches 1-3 queued in the client; with
 * refuse_code, it then answers the next HELLO with that ERROR (a "not now"
 * code: tried again); the connection after serves the rest. */
static void run_reconnect(const char *seed_name, int32_t refuse_code)
{
    uint64_t rng = tu_seed(seed_name);
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    sl_batch_t *originals[FW_MAX_BATCHES];
    uint32_t n = 10;
    fw_fill(&w, &rng, n, originals);
    w.mode = FW_CLOSE_AFTER;
    w.after = 1;
    w.window = 4;
    w.refuse_conn = refuse_code ? 2 : 0;
    w.refuse_code = refuse_code;
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, 4);
    sl_batch_t *b;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "%s", err.msg);
    expect_batch(&w, originals, 0, b);
    sl_trainer_release(t, b);
    /* Batches 1-3 arrive and wait in the queue; then the worker hangs up. */
    sl_trainer_stats_t s;
    uint64_t deadline = now_ms() + (uint64_t)next_timeout_ms();
    do {
        sl_trainer_stats(t, &s);
        usleep(1000);
    } while (s.queued < 3 && now_ms() < deadline);
    cr_assert_eq(s.queued, 3);
    fw_release_close(&w);
    do {
        sl_trainer_stats(t, &s);
        usleep(1000);
    } while (s.reconnects < 1 && now_ms() < deadline);
    cr_assert_eq(s.reconnects, 1);
    /* 1-3 come again over the new connection, once each, then the rest. */
    for (uint32_t i = 1; i < n; i++) {
        cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "%u: %s", i, err.msg);
        expect_batch(&w, originals, i, b);
        sl_trainer_release(t, b);
    }
    expect_closed(t);
    sl_trainer_stats(t, &s);
    cr_assert_eq(s.batches, n);
    cr_assert_eq(s.reconnects, 1);
    sl_trainer_close(t);
    fw_join(&w);
    cr_assert_eq(w.connections, refuse_code ? 3 : 2);
    cr_assert_eq(w.sent_total, n + 3);
    for (uint32_t i = 0; i < n; i++)
        cr_assert_eq(w.acks[i], 1, "batch %u", i);
    cr_assert_eq(w.unknown_acks, 0);
    cr_assert_eq(w.late_acks, 0);
    cr_assert_not(w.credit_violation, "%s", w.violation);
    free_originals(originals, n);
    fw_free(&w);
}

Test(trainer_client, reconnect_drops_what_the_dead_connection_queued)
{
    run_reconnect("trainer_client.reconnect", 0);
}

/* A reconnect that meets "not now" (ERROR AGAIN: the worker's connection
 * cap) tries again, like after a lost connection, and gets everything. */
Test(trainer_client, reconnect_retries_a_worker_that_says_not_now)
{
    run_reconnect("trainer_client.not_now", SL_ERR_AGAIN);
}

/* Start w as a worker that hangs up once batch 0 is acked (and
 * fw_release_close), connect with a window of 2 and reconnect_ms, and take
 * batch 0. */
static sl_trainer_t *start_and_take_one(fake_worker_t *w, int reconnect_ms)
{
    w->mode = FW_CLOSE_AFTER;
    w->after = 1;
    w->window = 2;
    fw_start(w);
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = w->addr;
    o.prefetch = 2;
    o.reconnect_ms = reconnect_ms;
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    sl_batch_t *b;
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "%s", err.msg);
    sl_trainer_release(t, b);
    return t;
}

/* A reconnect that meets a refusal (ERROR INVALID) fails the client at once
 * with the worker's code and message, instead of retrying for
 * reconnect_ms. */
Test(trainer_client, reconnect_stops_at_a_refusal)
{
    uint64_t rng = tu_seed("trainer_client.refusal");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    fw_fill(&w, &rng, 6, NULL);
    w.refuse_conn = 2;
    w.refuse_code = SL_ERR_INVALID;
    sl_trainer_t *t = start_and_take_one(&w, 20000);
    sl_batch_t *b;
    sl_error_t err = {0};
    uint64_t t0 = now_ms();
    fw_release_close(&w);
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, next_timeout_ms(), &b, &err)) == SL_OK)
        sl_trainer_release(t, b); /* at most the one batch queued before the hang-up */
    uint64_t took = now_ms() - t0;
    cr_assert_eq(rc, SL_ERR_INVALID, "%s: %s", sl_err_str(rc), err.msg);
    char want[128];
    snprintf(want, sizeof want, "worker %s: refused the connection: refused by the test worker",
             w.addr);
    cr_assert(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
    cr_assert_lt(took, 10000, "failed after %llu ms", (unsigned long long)took);
    sl_trainer_stats_t s;
    sl_trainer_stats(t, &s);
    cr_assert_eq(s.reconnects, 0);
    sl_trainer_close(t);
    fw_join(&w);
    cr_assert_eq(w.connections, 2);
    fw_free(&w);
}

Test(trainer_client, reconnect_gives_up_after_reconnect_ms)
{
    uint64_t rng = tu_seed("trainer_client.giveup");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    fw_fill(&w, &rng, 4, NULL);
    sl_trainer_t *t = start_and_take_one(&w, 300);
    sl_batch_t *b;
    sl_error_t err = {0};
    /* Batch 1 waits in the queue; then the worker goes away for good and
     * nobody listens on its port any more. */
    sl_trainer_stats_t s;
    uint64_t deadline = now_ms() + (uint64_t)next_timeout_ms();
    do {
        sl_trainer_stats(t, &s);
        usleep(1000);
    } while (s.queued < 1 && now_ms() < deadline);
    cr_assert_eq(s.queued, 1);
    shutdown(w.lfd, SHUT_RDWR);
    fw_release_close(&w);
    /* The queued batch is dropped with its connection, not handed out. */
    do {
        sl_trainer_stats(t, &s);
        usleep(1000);
    } while (s.queued > 0 && now_ms() < deadline);
    cr_assert_eq(s.queued, 0);
    uint64_t t0 = now_ms();
    sl_err_t rc = sl_trainer_next(t, next_timeout_ms(), &b, &err);
    uint64_t took = now_ms() - t0;
    cr_assert(rc == SL_ERR_IO || rc == SL_ERR_TIMEOUT, "%s: %s", sl_err_str(rc), err.msg);
    cr_assert(strstr(err.msg, "not re-established within 300 ms") != NULL, "%s", err.msg);
    cr_assert_geq(took, 150, "gave up after %llu ms", (unsigned long long)took);
    sl_trainer_close(t);
    fw_join(&w);
    fw_free(&w);
}

Test(trainer_client, malformed_batch_payload)
{
    uint64_t rng = tu_seed("trainer_client.malformed");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    sl_batch_t *originals[FW_MAX_BATCHES];
    fw_fill(&w, &rng, 5, originals);
    w.mode = FW_BAD_PAYLOAD;
    w.after = 2;
    w.window = 1; /* batch 2 only arrives after 0 and 1 were handed out */
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, 1);
    sl_batch_t *b;
    sl_error_t err = {0};
    for (uint32_t i = 0; i < 2; i++) {
        cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "%s", err.msg);
        expect_batch(&w, originals, i, b);
        sl_trainer_release(t, b);
    }
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_ERR_CORRUPT, "%s", err.msg);
    cr_assert(strstr(err.msg, "delivery 3 (split 7 batch 2)") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "magic") != NULL, "%s", err.msg);
    sl_trainer_close(t);
    fw_join(&w);
    /* The client told the worker why it hung up. */
    cr_assert_eq(w.client_error, SL_ERR_CORRUPT);
    cr_assert(strstr(w.client_error_msg, "magic") != NULL, "%s", w.client_error_msg);
    cr_assert_eq(w.acks[2], 0);
    free_originals(originals, 5);
    fw_free(&w);
}

Test(trainer_client, next_times_out)
{
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    w.mode = FW_SILENT;
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, 2);
    sl_batch_t *b = (sl_batch_t *)&w;
    sl_error_t err = {0};
    uint64_t t0 = now_ms();
    cr_assert_eq(sl_trainer_next(t, 60, &b, &err), SL_ERR_TIMEOUT, "%s", err.msg);
    uint64_t took = now_ms() - t0;
    cr_assert_null(b);
    cr_assert_geq(took, 60);
    cr_assert_lt(took, 60 + 2000 * tu_timeout(1));
    cr_assert(strstr(err.msg, "no batch within 60 ms") != NULL, "%s", err.msg);
    cr_assert_eq(sl_trainer_next(t, 0, &b, &err), SL_ERR_TIMEOUT);
    /* the same error for a longer wait of the caller's own (sliced waits) */
    char want[160];
    snprintf(want, sizeof want, "worker %s: no batch within 5000 ms", w.addr);
    cr_assert_eq(sl_trainer_timeout_error(t, 5000, &err), SL_ERR_TIMEOUT);
    cr_assert_eq(err.code, SL_ERR_TIMEOUT);
    cr_assert_str_eq(err.msg, want);
    sl_trainer_stats_t s;
    sl_trainer_stats(t, &s);
    cr_assert_geq(s.wait_ns, 60ull * 1000000);
    cr_assert_eq(s.batches, 0);
    sl_trainer_close(t);
    fw_join(&w);
    cr_assert(w.got_goodbye);
}

Test(trainer_client, connect_errors)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "address") != NULL, "%s", err.msg);
    o.address = "127.0.0.1:1";
    o.rank = 4;
    o.world_size = 4;
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "rank 4") != NULL, "%s", err.msg);

    /* a port nobody listens on */
    int lfd;
    uint16_t port;
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 1, &lfd, &port, &err), SL_OK);
    close(lfd);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    o = sl_trainer_opts_default();
    o.address = addr;
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_ERR_IO, "%s", err.msg);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, addr) != NULL, "%s", err.msg);
    sl_trainer_close(NULL);
    sl_trainer_release(NULL, NULL);
}

Test(trainer_client, close_with_batches_queued)
{
    uint64_t rng = tu_seed("trainer_client.close_queued");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    sl_batch_t *originals[FW_MAX_BATCHES];
    fw_fill(&w, &rng, 8, originals);
    w.window = 4;
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, 4);
    sl_batch_t *b;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "%s", err.msg);
    sl_trainer_stats_t s;
    uint64_t deadline = now_ms() + (uint64_t)next_timeout_ms();
    do {
        sl_trainer_stats(t, &s);
        usleep(1000);
    } while (s.queued < 4 && now_ms() < deadline);
    cr_assert_eq(s.queued, 4);
    sl_trainer_close(t);
    /* A handed-out batch outlives the client (ASan checks the reads). */
    expect_batch(&w, originals, 0, b);
    sl_batch_destroy(b);
    fw_join(&w);
    cr_assert(w.got_goodbye);
    cr_assert_eq(w.acks[0], 1);
    for (uint32_t i = 1; i < 8; i++)
        cr_assert_eq(w.acks[i], 0);
    free_originals(originals, 8);
    fw_free(&w);
}

/* ---- sluice read against the fake worker ---- */

#include <jansson.h>
#include <sys/wait.h>

/* Run `sluice read ARGS` (stdout captured in out); @return the exit code. */
static int run_read(const char *args, char *out, size_t cap)
{
    const char *bin = tu_binary();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' read %s", bin, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(trainer_client, sluice_read_json_lines)
{
    uint64_t rng = tu_seed("trainer_client.cli");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    sl_batch_t *originals[FW_MAX_BATCHES];
    fw_fill(&w, &rng, 5, originals);
    w.window = 2;
    fw_start(&w);
    static char out[1 << 20];
    char args[256];
    snprintf(args, sizeof args, "--worker %s --prefetch 2 --json --quiet", w.addr);
    cr_assert_eq(run_read(args, out, sizeof out), 0, "%s", out);
    fw_join(&w);
    cr_assert(w.got_goodbye);
    char *line = out;
    for (uint32_t i = 0; i < 5; i++) {
        char *nl = strchr(line, '\n');
        cr_assert_not_null(nl, "line %u missing", i);
        *nl = '\0';
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert_not_null(o, "line %u: %s", i, je.text);
        const sl_batch_t *b = originals[i];
        cr_assert_eq(json_integer_value(json_object_get(o, "batch_size")), b->batch_size);
        json_t *ids = json_object_get(o, "sample_ids");
        cr_assert_eq(json_array_size(ids), b->batch_size);
        for (uint32_t r = 0; r < b->batch_size; r++)
            cr_assert_eq(json_integer_value(json_array_get(ids, r)), b->sample_ids[r]);
        json_t *sp = json_object_get(o, "sparse");
        cr_assert_str_eq(json_string_value(json_array_get(json_object_get(sp, "keys"), 1)),
                         "item_tags");
        json_t *vals = json_object_get(sp, "values");
        cr_assert_eq(json_array_size(vals), b->sparse.num_values);
        for (uint64_t k = 0; k < b->sparse.num_values; k++)
            cr_assert_eq(json_integer_value(json_array_get(vals, k)), b->sparse.values[k]);
        json_t *g = json_array_get(json_object_get(o, "groups"), 0);
        cr_assert_str_eq(json_string_value(json_object_get(g, "name")), "user");
        json_t *inv = json_object_get(g, "inverse_indices");
        for (uint32_t r = 0; r < b->batch_size; r++)
            cr_assert_eq(json_integer_value(json_array_get(inv, r)), b->groups[0].inverse[r]);
        json_t *lab = json_object_get(o, "labels");
        cr_assert_str_eq(json_string_value(json_array_get(json_object_get(lab, "names"), 0)),
                         "click");
        cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "origin"), "sequence")),
                     i);
        json_decref(o);
        line = nl + 1;
    }
    cr_assert_str_eq(line, "");
    free_originals(originals, 5);
    fw_free(&w);
}

Test(trainer_client, sluice_read_summary_limit_and_errors)
{
    uint64_t rng = tu_seed("trainer_client.cli_limit");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    fw_fill(&w, &rng, 6, NULL);
    w.window = 4;
    fw_start(&w);
    static char out[1 << 16];
    char args[256];
    snprintf(args, sizeof args, "--worker %s --limit 2", w.addr);
    cr_assert_eq(run_read(args, out, sizeof out), 0, "%s", out);
    fw_join(&w);
    uint32_t samples = w.sizes[0] + w.sizes[1];
    char want[64];
    snprintf(want, sizeof want, "batches 2  samples %u  bytes ", samples);
    cr_assert(strstr(out, want) != NULL, "'%s' lacks '%s'", out, want);
    cr_assert(strstr(out, "samples/s") != NULL && strstr(out, "MB/s") != NULL, "%s", out);
    cr_assert(strstr(out, "trainer wait: total") != NULL, "%s", out);
    cr_assert_eq(w.acks[0] + w.acks[1], 2);
    fw_free(&w);

    cr_assert_eq(run_read("--prefetch 0 --worker 127.0.0.1:1 2>/dev/null", out, sizeof out), 2);
    cr_assert_eq(run_read("2>/dev/null", out, sizeof out), 2);
    cr_assert_eq(run_read("--help", out, sizeof out), 0);
    cr_assert(strstr(out, "--worker HOST:PORT") != NULL);
    int lfd;
    uint16_t port;
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 1, &lfd, &port, NULL), SL_OK);
    close(lfd);
    snprintf(args, sizeof args, "--worker 127.0.0.1:%u 2>/dev/null", port);
    cr_assert_eq(run_read(args, out, sizeof out), 1);
}

/* Kafka batches: BatchInfo.record_time_ms (the first CreateTime absolute,
 * then differences) becomes each sample's absolute time on the batch
 * handed out (sl_batch_t.record_ms), and each sample's age at hand-over
 * (wall clock minus CreateTime) goes into the freshness histogram; a batch
 * without times (a table's) has none and counts nothing; times that do not
 * match the samples end the connection as a protocol violation. */
Test(trainer_client, record_times_and_freshness)
{
    uint64_t rng = tu_seed("trainer_client.record_times");
    static fake_worker_t w;
    memset(&w, 0, sizeof w);
    sl_batch_t *originals[FW_MAX_BATCHES];
    fw_fill(&w, &rng, 4, originals);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* batch 0: ages 15 s (bucket (10 s, 30 s]) and 2 h (past the last bound)
     * alternately, one unknown (-1); batch 1: none (a table batch); batch 2:
     * one time too many */
    int64_t *abs0 = calloc(w.sizes[0], sizeof *abs0);
    w.times[0] = calloc(w.sizes[0], sizeof(int64_t));
    w.num_times[0] = w.sizes[0];
    uint64_t young = 0, old = 0;
    for (uint32_t i = 0; i < w.sizes[0]; i++) {
        abs0[i] = i == 1 ? -1 : i % 2 ? now - 7200000 - i : now - 15000 + i;
        if (i != 1) *(i % 2 ? &old : &young) += 1;
        w.times[0][i] = i ? abs0[i] - abs0[i - 1] : abs0[0];
    }
    w.times[2] = calloc(w.sizes[2] + 1, sizeof(int64_t));
    w.num_times[2] = w.sizes[2] + 1;
    w.window = 1;
    fw_start(&w);
    sl_trainer_t *t = connect_to(&w, 1);
    sl_batch_t *b;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "%s", err.msg);
    expect_batch(&w, originals, 0, b);
    cr_assert_not_null(b->record_ms);
    for (uint32_t i = 0; i < b->batch_size; i++)
        cr_assert_eq(b->record_ms[i], abs0[i], "sample %u", i);
    sl_trainer_release(t, b);
    sl_trainer_stats_t s;
    sl_trainer_stats(t, &s);
    cr_assert_eq(s.freshness_count, young + old);
    for (uint32_t k = 0; k < SL_TRAINER_FRESHNESS_BUCKETS; k++)
        cr_assert_eq(s.freshness_buckets[k], k == 11 ? young : k == 13 ? old : 0, "bucket %u", k);
    cr_assert_eq(sl_trainer_freshness_bounds_ms[10], 10000);
    cr_assert_eq(sl_trainer_freshness_bounds_ms[11], 30000);
    cr_assert_eq(sl_trainer_freshness_bounds_ms[12], 60000);
    uint64_t lo = 0; /* each age is at least its distance from `now` */
    for (uint32_t i = 0; i < w.sizes[0]; i++)
        if (abs0[i] >= 0) lo += (uint64_t)(now - abs0[i]);
    cr_assert_geq(s.freshness_sum_ms, lo);
    cr_assert_leq(s.freshness_sum_ms, lo + (young + old) * (uint64_t)(tu_timeout(10) * 1000));
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_OK, "%s", err.msg);
    expect_batch(&w, originals, 1, b);
    cr_assert_null(b->record_ms);
    sl_trainer_release(t, b);
    sl_trainer_stats(t, &s);
    cr_assert_eq(s.freshness_count, young + old);
    cr_assert_eq(sl_trainer_next(t, next_timeout_ms(), &b, &err), SL_ERR_PROTOCOL, "%s", err.msg);
    char want[160];
    snprintf(want, sizeof want,
             "delivery 3 (split 7 batch 2): batch info has %u record times for %u samples",
             w.sizes[2] + 1, w.sizes[2]);
    cr_assert(strstr(err.msg, want) != NULL, "%s", err.msg);
    sl_trainer_close(t);
    fw_join(&w);
    free(abs0);
    free(w.times[0]);
    free(w.times[2]);
    free_originals(originals, 4);
    fw_free(&w);
}

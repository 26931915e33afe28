/* The shared-memory hand-over end to end (docs/PROTOCOL.md "Shared-memory
 * hand-over", docs/WORKER.md "Shared memory"): a real worker and trainer
 * clients on this host. A trainer on shared memory receives exactly the
 * samples, byte for byte, that one over the socket does (per epoch, two
 * epochs, fused and transform-thread paths); clients with it on and off
 * read from one worker at once, each sample once per epoch; a heap too
 * small for the read-ahead falls back per frame and still delivers every
 * sample once per epoch. A trainer that reads frames in place (zero copy)
 * reads the same bytes as one that copies them out, and every block it
 * held is freed. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dpp/worker/admin/admin.h"
#include "worker_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-worker-shm-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    tu_rm_tree(tmpdir);
}

TestSuite(worker_shm, .init = setup, .fini = teardown);

enum { ROWS = 8192, STRIPE_ROWS = 1024, BATCH = 256, EPOCHS = 2 };

static sl_pipeline_job_t *gen_job(void)
{
    char dir[300], spec[1024];
    snprintf(dir, sizeof dir, "%s/criteo", tmpdir);
    if (access(dir, F_OK) != 0) wu_gen_criteo(dir, ROWS, STRIPE_ROWS, 5);
    sl_error_t err = {0};
    snprintf(spec, sizeof spec,
             "{\"id\":\"shm\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":%d,"
             "\"epochs\":%d}}",
             dir, BATCH, EPOCHS);
    sl_pipeline_job_t *job = NULL;
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    return job;
}

/* sl_trainer_opts_t.shm_copy of the trainers connect_trainer makes */
static bool trainer_shm_copy;

static sl_trainer_t *connect_trainer(const char *addr, bool shm)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = addr;
    o.prefetch = 4;
    o.no_shm = !shm;
    o.shm_copy = trainer_shm_copy;
    o.metrics_address = "";
    sl_trainer_t *t = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    return t;
}

/* What a trainer received: each (epoch, sample id) counted, and a digest
 * of each sample's dense row and label (the bytes, not only the ids). */
typedef struct got {
    uint8_t seen[EPOCHS * ROWS];
    uint64_t digest[EPOCHS * ROWS];
    sl_trainer_stats_t st;
} got_t;

static void read_all(sl_trainer_t *t, got_t *g)
{
    sl_batch_t *b;
    sl_err_t rc;
    sl_error_t err = {0};
    int timeout = (int)(tu_timeout(30) * 1000);
    while ((rc = sl_trainer_next(t, timeout, &b, &err)) == SL_OK) {
        cr_assert_lt(b->origin.epoch, EPOCHS);
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && id < ROWS, "sample id %lld", (long long)id);
            size_t k = (size_t)b->origin.epoch * ROWS + (size_t)id;
            g->seen[k]++;
            uint64_t h = 1469598103934665603ull;
            const uint8_t *d = (const uint8_t *)(b->dense.data + (size_t)i * b->dense.cols);
            for (size_t j = 0; j < b->dense.cols * sizeof(float); j++)
                h = (h ^ d[j]) * 1099511628211ull;
            h = (h ^ (uint64_t)(b->labels.data[i] * 1000)) * 1099511628211ull;
            g->digest[k] = h;
        }
        sl_trainer_release(t, b);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s: %s", sl_err_str(rc), err.msg);
    sl_trainer_stats(t, &g->st);
}

static void expect_once_per_epoch(const uint8_t *seen)
{
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t i = 0; i < ROWS; i++)
            cr_assert_eq(seen[e * ROWS + i], 1, "epoch %u sample %u arrived %u times", e, i,
                         seen[e * ROWS + i]);
}

/* The worker's stats once its heap is empty, or after a bounded wait: the
 * releases a trainer's close sent (and its hold's end) may still be on
 * their way when the worker counts the last ACK. */
static void settled_stats(sl_worker_t *w, sl_worker_stats_t *st)
{
    for (double s = 0, until = tu_timeout(5); s < until; s += 0.005) {
        sl_worker_stats(w, st);
        if (st->shm_used == 0) return;
        usleep(5000);
    }
    sl_worker_stats(w, st);
}

/* One worker (opts o), one trainer; what it got into g, the worker's
 * stats into st, and (shm_status not NULL) its /status "shm" object then
 * (caller owns, json_decref). */
static void run_one(const sl_pipeline_job_t *job, sl_worker_opts_t o, bool shm, got_t *g,
                    sl_worker_stats_t *st, json_t **shm_status)
{
    char addr[64];
    sl_worker_t *w = wu_start(job, &o, addr, sizeof addr);
    sl_trainer_t *t = connect_trainer(addr, shm);
    read_all(t, g);
    sl_trainer_close(t);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    settled_stats(w, st);
    if (shm_status) {
        char *text = sl_worker_admin_status_json(w, NULL);
        cr_assert_not_null(text);
        json_t *j = json_loads(text, 0, NULL);
        cr_assert_not_null(j, "%s", text);
        *shm_status = json_incref(json_object_get(j, "shm"));
        cr_assert(json_is_object(*shm_status), "no shm object in %s", text);
        json_decref(j);
        free(text);
    }
    sl_worker_destroy(w);
}

static long long shm_field(const json_t *shm, const char *name)
{
    const json_t *v = json_object_get(shm, name);
    cr_assert(json_is_integer(v), "/status shm.%s missing", name);
    return (long long)json_integer_value(v);
}

static void same_as_over_the_socket(bool no_fused)
{
    sl_pipeline_job_t *job = gen_job();
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 1;
    o.no_fused = no_fused;
    got_t *shm = calloc(1, sizeof *shm), *sock = calloc(1, sizeof *sock);
    sl_worker_stats_t ws, wsock;
    json_t *status = NULL;
    run_one(job, o, true, shm, &ws, &status);
    run_one(job, o, false, sock, &wsock, NULL);
    expect_once_per_epoch(shm->seen);
    expect_once_per_epoch(sock->seen);
    cr_assert_eq(memcmp(shm->digest, sock->digest, sizeof shm->digest), 0,
                 "every sample's bytes are the same both ways");
    const uint64_t batches = EPOCHS * ROWS / BATCH;
    /* every batch through shared memory on one, through the socket on the other */
    cr_assert_eq(shm->st.batches_shm, batches);
    cr_assert_eq(shm->st.batches_socket, 0);
    cr_assert_eq(sock->st.batches_shm, 0);
    cr_assert_eq(sock->st.batches_socket, batches);
    cr_assert_eq(ws.server.batches_sent, batches);
    cr_assert_eq(ws.server.shm_batches, batches);
    cr_assert_eq(ws.server.shm_bytes, ws.server.bytes_sent);
    cr_assert_eq(ws.server.shm_attached, 1);
    /* read in place (zero copy): every block held past its ACK, then let go */
    cr_assert_eq(ws.server.shm_held, batches);
    cr_assert_eq(ws.server.shm_released + ws.server.shm_held_freed, batches);
    /* /status shows them as the stats do */
    cr_assert_eq(shm_field(status, "held"), (long long)batches);
    cr_assert_eq(shm_field(status, "released"), (long long)ws.server.shm_released);
    cr_assert_eq(shm_field(status, "held_freed"), (long long)ws.server.shm_held_freed);
    cr_assert_eq(shm_field(status, "released") + shm_field(status, "held_freed"),
                 (long long)batches);
    cr_assert_eq(shm_field(status, "high_water"), (long long)ws.shm_high_water);
    json_decref(status);
    cr_assert_eq(ws.shm_fallbacks, 0);
    cr_assert_eq(ws.shm_used, 0, "every block freed once acknowledged");
    cr_assert_eq(ws.shm_capacity, ws.memory_limit / 2);
    cr_assert_eq(wsock.server.shm_batches, 0);
    cr_assert_eq(wsock.server.shm_attached, 0);
    cr_assert_eq(ws.batches_fused, no_fused ? 0 : batches, "the path under test made them");
    /* frame bytes received count either way (and a few more: headers) */
    cr_assert_geq(shm->st.bytes, ws.server.bytes_sent);
    cr_assert_lt(shm->st.bytes, ws.server.bytes_sent + batches * 256);
    cr_assert_eq(ws.server.bytes_sent, wsock.server.bytes_sent);
    free(shm);
    free(sock);
    sl_pipeline_job_destroy(job);
}

Test(worker_shm, fused_batches_the_same_as_over_the_socket)
{
    same_as_over_the_socket(false);
}

Test(worker_shm, transformed_batches_the_same_as_over_the_socket)
{
    same_as_over_the_socket(true);
}

/* $SLUICE_TRAINER_SHM_COPY=1: the client copies each frame out of the heap
 * (the worker frees it on the ACK) and reads the same bytes as one that
 * reads them in place. */
Test(worker_shm, read_in_place_the_same_as_copied_out)
{
    sl_pipeline_job_t *job = gen_job();
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 1;
    got_t *held = calloc(1, sizeof *held), *copied = calloc(1, sizeof *copied);
    sl_worker_stats_t wh, wc;
    run_one(job, o, true, held, &wh, NULL);
    setenv("SLUICE_TRAINER_SHM_COPY", "1", 1);
    run_one(job, o, true, copied, &wc, NULL);
    unsetenv("SLUICE_TRAINER_SHM_COPY");
    expect_once_per_epoch(held->seen);
    expect_once_per_epoch(copied->seen);
    cr_assert_eq(memcmp(held->digest, copied->digest, sizeof held->digest), 0,
                 "every sample's bytes are the same both ways");
    const uint64_t batches = EPOCHS * ROWS / BATCH;
    cr_assert_eq(held->st.batches_shm, batches);
    cr_assert_eq(copied->st.batches_shm, batches);
    cr_assert_eq(wh.server.shm_held, batches);
    cr_assert_eq(wc.server.shm_held, 0, "a copying client holds nothing");
    cr_assert_eq(wc.server.shm_released, 0);
    cr_assert_eq(wh.shm_used, 0);
    cr_assert_eq(wc.shm_used, 0);
    free(held);
    free(copied);
    sl_pipeline_job_destroy(job);
}

/* sl_trainer_opts_t.shm_copy does what $SLUICE_TRAINER_SHM_COPY=1 does:
 * every batch through shared memory, copied out (the worker holds no
 * block past its ACK), the same bytes as read in place. */
Test(worker_shm, the_shm_copy_option_copies_out_as_the_variable_does)
{
    sl_pipeline_job_t *job = gen_job();
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 1;
    got_t *held = calloc(1, sizeof *held), *copied = calloc(1, sizeof *copied);
    sl_worker_stats_t wh, wc;
    unsetenv("SLUICE_TRAINER_SHM_COPY");
    run_one(job, o, true, held, &wh, NULL);
    trainer_shm_copy = true;
    json_t *status = NULL;
    run_one(job, o, true, copied, &wc, &status);
    trainer_shm_copy = false;
    expect_once_per_epoch(held->seen);
    expect_once_per_epoch(copied->seen);
    cr_assert_eq(memcmp(held->digest, copied->digest, sizeof held->digest), 0,
                 "every sample's bytes are the same both ways");
    const uint64_t batches = EPOCHS * ROWS / BATCH;
    cr_assert_eq(copied->st.batches_shm, batches);
    cr_assert_eq(copied->st.batches_socket, 0);
    cr_assert_eq(wh.server.shm_held, batches);
    cr_assert_eq(wc.server.shm_held, 0, "a copying client holds nothing");
    cr_assert_eq(wc.server.shm_released, 0);
    cr_assert_eq(shm_field(status, "held"), 0);
    cr_assert_eq(shm_field(status, "released"), 0);
    cr_assert_eq(shm_field(status, "held_freed"), 0);
    json_decref(status);
    cr_assert_eq(wc.shm_used, 0);
    free(held);
    free(copied);
    sl_pipeline_job_destroy(job);
}

typedef struct reader {
    sl_trainer_t *t;
    got_t *g;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    read_all(r->t, r->g);
    return NULL;
}

/* Two trainers at once, one on shared memory and one not; the worker's
 * heap is heap_bytes (0: default). @return the worker's stats. */
static sl_worker_stats_t two_trainers(uint64_t heap_bytes, got_t *on, got_t *off)
{
    sl_pipeline_job_t *job = gen_job();
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 2;
    o.shm_bytes = heap_bytes;
    char addr[64];
    sl_worker_t *w = wu_start(job, &o, addr, sizeof addr);
    reader_t r[2] = {{connect_trainer(addr, true), on}, {connect_trainer(addr, false), off}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, reader_main, &r[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        sl_trainer_close(r[i].t);
    }
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    settled_stats(w, &st);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    uint8_t *seen = calloc(EPOCHS, ROWS);
    for (size_t k = 0; k < (size_t)EPOCHS * ROWS; k++)
        seen[k] = on->seen[k] + off->seen[k];
    expect_once_per_epoch(seen);
    free(seen);
    return st;
}

Test(worker_shm, clients_with_it_on_and_off_at_one_worker)
{
    got_t *on = calloc(1, sizeof *on), *off = calloc(1, sizeof *off);
    sl_worker_stats_t st = two_trainers(0, on, off);
    cr_assert_eq(on->st.batches_socket, 0);
    cr_assert_eq(off->st.batches_shm, 0);
    cr_assert_eq(st.server.shm_batches, on->st.batches_shm);
    cr_assert_eq(st.server.batches_sent, on->st.batches_shm + off->st.batches_socket);
    cr_assert_eq(st.server.shm_attached, 1);
    cr_assert_eq(st.shm_used, 0);
    free(on);
    free(off);
}

/* A heap of 256 KiB holds two or three frames of 256 rows; a trainer that
 * waits before it reads lets the worker make its read-ahead and the
 * window's (8 batches) first: the first frames are made in the heap, the
 * rest cannot be and go over the socket. */
Test(worker_shm, a_full_heap_falls_back_per_frame)
{
    sl_pipeline_job_t *job = gen_job();
    sl_worker_opts_t o = sl_worker_opts_default();
    o.threads = 2;
    o.shm_bytes = 256 << 10;
    char addr[64];
    sl_worker_t *w = wu_start(job, &o, addr, sizeof addr);
    sl_trainer_t *t = connect_trainer(addr, true);
    sl_worker_stats_t st;
    double until = tu_timeout(10);
    for (double s = 0;; s += 0.01) {
        sl_worker_stats(w, &st);
        if (st.shm_fallbacks > 0) break;
        cr_assert(s < until, "no fallback: %llu batches made", (unsigned long long)st.batches);
        usleep(10 * 1000);
    }
    got_t *g = calloc(1, sizeof *g);
    read_all(t, g);
    sl_trainer_close(t);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    settled_stats(w, &st);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    expect_once_per_epoch(g->seen);
    cr_assert_eq(st.shm_capacity, 256 << 10);
    cr_assert_gt(g->st.batches_shm, 0, "the first frames were made in the heap");
    cr_assert_gt(g->st.batches_socket, 0, "frames that did not fit came over the socket");
    cr_assert_eq(st.server.shm_batches, g->st.batches_shm);
    cr_assert_eq(st.server.batches_sent, g->st.batches_shm + g->st.batches_socket);
    cr_assert_eq(st.shm_used, 0);
    free(g);
}

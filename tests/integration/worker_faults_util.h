/* What worker_faults_test.c and worker_port_test.c share: a worker on a
 * criteo table, a raw protocol client (HELLO, REQUEST, ACK, batches,
 * expected ERRORs), and a trainer client that collects sample ids. */
#ifndef SLUICE_TESTS_WORKER_FAULTS_UTIL_H
#define SLUICE_TESTS_WORKER_FAULTS_UTIL_H

/* Every helper here: a test file uses only some. */
#define WF_FN static __attribute__((unused))

#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "dpp/pipeline/job.h"
#include "dpp/worker/server/server.h"
#include "dpp/worker/runtime/worker.h"
#include "rpc/auth.h"
#include "rpc/frame.h"
#include "sluice/trainer.h"
#include "sluice/wire.h"
#include "testutil.h"
#include "warehouse/import.h"
#include "worker_util.h"

WF_FN char tmpdir[256];

WF_FN void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-worker-faults-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    signal(SIGPIPE, SIG_IGN);
}

WF_FN void teardown(void)
{
    tu_rm_tree(tmpdir);
}

TestSuite(worker_faults, .init = setup, .fini = teardown);

WF_FN void gen_criteo(uint64_t rows, uint32_t stripe_rows, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/criteo", tmpdir);
    wu_gen_criteo(dir, rows, stripe_rows, 17);
}

WF_FN sl_pipeline_job_t *job_epochs(const char *table, uint32_t batch_size, uint32_t epochs)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"id\":\"faults\",\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":%u,"
             "\"epochs\":%u}}",
             table, batch_size, epochs);
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(spec, strlen(spec), &job, NULL, &err), SL_OK, "%s", err.msg);
    return job;
}

WF_FN sl_pipeline_job_t *job_for(const char *table, uint32_t batch_size)
{
    return job_epochs(table, batch_size, 1);
}

/* A worker with o's trainer-port options (max_clients, client_conn_idle_ms,
 * cluster_secret, listen; NULL: none). */
WF_FN sl_worker_t *start_with(const sl_pipeline_job_t *job, uint64_t memory_limit,
                              const sl_worker_opts_t *port, char *addr, size_t cap)
{
    sl_worker_opts_t o = sl_worker_opts_default();
    if (port) {
        o.max_clients = port->max_clients;
        o.client_conn_idle_ms = port->client_conn_idle_ms;
        o.cluster_secret = port->cluster_secret;
        if (port->listen) o.listen = port->listen;
        o.no_fused = port->no_fused;
    }
    o.threads = 2;
    if (memory_limit) o.memory_limit = memory_limit;
    o.max_credits = 8;
    return wu_start(job, &o, addr, cap);
}

WF_FN sl_worker_t *start(const sl_pipeline_job_t *job, uint64_t memory_limit, char *addr,
                         size_t cap)
{
    return start_with(job, memory_limit, NULL, addr, cap);
}

/* ---- a raw protocol client ---- */

WF_FN int raw_connect(const char *addr)
{
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(addr, 5000, &fd, &err), SL_OK, "%s", err.msg);
    return fd;
}

WF_FN void raw_send(int fd, sl_rpc_type_t type, const ProtobufCMessage *m)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, type, m, NULL, 0, &err), SL_OK, "%s", err.msg);
}

WF_FN void raw_hello(int fd)
{
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.client_name = "raw-test-client";
    raw_send(fd, SL_RPC_HELLO, &h.base);
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_WELCOME);
    const Sluice__Dpp__Welcome *w = (const Sluice__Dpp__Welcome *)f.msg;
    cr_assert_eq(w->protocol_version, SL_RPC_VERSION);
    cr_assert_str_eq(w->job_id, "faults");
    cr_assert_eq(w->max_credits, 8);
    sl_rpc_frame_free(&f);
}

WF_FN void raw_request(int fd, uint32_t credits)
{
    Sluice__Dpp__Request r = SLUICE__DPP__REQUEST__INIT;
    r.credits = credits;
    raw_send(fd, SL_RPC_REQUEST, &r.base);
}

WF_FN void raw_ack(int fd, uint64_t id)
{
    Sluice__Dpp__Ack a = SLUICE__DPP__ACK__INIT;
    a.n_delivery_ids = 1;
    a.delivery_ids = &id;
    raw_send(fd, SL_RPC_ACK, &a.base);
}

/* Receive one BATCH; its sample ids are appended to ids (and its epoch to
 * epochs, unless NULL). @return the delivery id. */
WF_FN uint64_t raw_batch_epochs(int fd, int64_t *ids, uint32_t *epochs, uint64_t *n)
{
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_BATCH, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__BatchInfo *bi = (const Sluice__Dpp__BatchInfo *)f.msg;
    uint64_t id = bi->delivery_id;
    sl_batch_t *b;
    cr_assert_eq(sl_wire_decode(f.payload, f.payload_len, NULL, NULL, &b, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(bi->num_samples, b->batch_size);
    cr_assert_eq(bi->epoch, b->origin.epoch);
    for (uint32_t i = 0; i < b->batch_size; i++) {
        if (epochs) epochs[*n] = b->origin.epoch;
        ids[(*n)++] = b->sample_ids[i];
    }
    sl_batch_destroy(b);
    sl_rpc_frame_free(&f);
    return id;
}

WF_FN uint64_t raw_batch(int fd, int64_t *ids, uint64_t *n)
{
    return raw_batch_epochs(fd, ids, NULL, n);
}

/* Expect an ERROR frame (code, message containing want), then the end. */
WF_FN void expect_error(int fd, sl_err_t code, const char *want)
{
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_ERROR, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
    cr_assert_eq(e->code, code, "code %d (%s): %s", e->code, sl_err_str(e->code), e->message);
    cr_assert(strstr(e->message, want) != NULL, "'%s' lacks '%s'", e->message, want);
    sl_rpc_frame_free(&f);
    /* and the worker closed the connection */
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_ERR_CLOSED);
}

/* ---- a trainer client collecting sample ids ---- */

typedef struct collector {
    const char *addr;
    const char *secret_file; /* the cluster secret, NULL: none */
    uint64_t rows;
    uint32_t epochs;   /* 0: 1 */
    atomic_uint *seen; /* [epochs * rows]: deliveries of (epoch, id) at epoch * rows + id */
    uint64_t samples;
    uint32_t delay_us; /* per batch: a slow trainer */
    int reconnect_ms;  /* 0: the default */
    sl_err_t end;
    char msg[SL_ERROR_MSG_MAX];
} collector_t;

WF_FN void *collect(void *arg)
{
    collector_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = c->addr;
    o.prefetch = 2;
    if (c->reconnect_ms) o.reconnect_ms = c->reconnect_ms;
    uint32_t epochs = c->epochs ? c->epochs : 1;
    o.cluster_secret_file = c->secret_file;
    sl_trainer_t *t;
    sl_error_t err = {0};
    if ((c->end = sl_trainer_connect(&o, &t, &err)) != SL_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", err.msg);
        return NULL;
    }
    sl_batch_t *b;
    while ((c->end = sl_trainer_next(t, 30000, &b, &err)) == SL_OK) {
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && (uint64_t)id < c->rows);
            cr_assert_lt(b->origin.epoch, epochs);
            atomic_fetch_add(&c->seen[(uint64_t)b->origin.epoch * c->rows + (uint64_t)id], 1);
        }
        c->samples += b->batch_size;
        sl_trainer_release(t, b);
        if (c->delay_us) usleep(c->delay_us);
    }
    snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    sl_trainer_close(t);
    return NULL;
}

/* The collector ended with the job, every sample received exactly once in
 * each epoch. */
WF_FN void expect_every_sample_once(const collector_t *c)
{
    cr_assert_eq(c->end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c->end), c->msg);
    uint64_t n = (uint64_t)(c->epochs ? c->epochs : 1) * c->rows;
    for (uint64_t i = 0; i < n; i++)
        cr_assert_eq(c->seen[i], 1, "epoch %lu sample %lu: %u", (unsigned long)(i / c->rows),
                     (unsigned long)(i % c->rows), c->seen[i]);
}

#endif

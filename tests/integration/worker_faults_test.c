/* The DPP worker under faults: a raw protocol client that takes batches
 * without acknowledging them and disconnects, and a `sluice read` process
 * killed with SIGKILL mid-epoch, must not lose or duplicate an acknowledged
 * batch (the next client gets the rest, exactly once in each of two
 * epochs); bad frames (garbage, wrong version, an ACK before HELLO, a huge
 * declared length, an ACK of an unknown delivery) get an ERROR naming the
 * problem and close only that connection; a slow client with a small
 * memory limit makes the pipeline wait (back-pressure) without the
 * accounted bytes ever passing the limit, also with 65,536-row stripes, and
 * a limit too small for one stripe fails the worker saying so; and the end
 * of a job (END, then the worker stops as `--exit-when-done` does) never
 * hangs either side, run a few hundred times; the trainer port's limits: a
 * cap on connections that idle and flooding sockets cannot exceed (threads
 * stay bounded) nor use to lock a real client out, idle clients closed, a
 * deadline on the handshake; and the cluster secret on the trainer port. */
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

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-worker-faults-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    signal(SIGPIPE, SIG_IGN);
}

static void teardown(void)
{
    tu_rm_tree(tmpdir);
}

TestSuite(worker_faults, .init = setup, .fini = teardown);

static void gen_criteo(uint64_t rows, uint32_t stripe_rows, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/criteo", tmpdir);
    wu_gen_criteo(dir, rows, stripe_rows, 17);
}

static sl_pipeline_job_t *job_epochs(const char *table, uint32_t batch_size, uint32_t epochs)
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

static sl_pipeline_job_t *job_for(const char *table, uint32_t batch_size)
{
    return job_epochs(table, batch_size, 1);
}

/* A worker with o's trainer-port options (max_clients, client_conn_idle_ms,
 * cluster_secret, listen; NULL: none). */
static sl_worker_t *start_with(const sl_pipeline_job_t *job, uint64_t memory_limit,
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

static sl_worker_t *start(const sl_pipeline_job_t *job, uint64_t memory_limit, char *addr,
                          size_t cap)
{
    return start_with(job, memory_limit, NULL, addr, cap);
}

/* ---- a raw protocol client ---- */

static int raw_connect(const char *addr)
{
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(addr, 5000, &fd, &err), SL_OK, "%s", err.msg);
    return fd;
}

static void raw_send(int fd, sl_rpc_type_t type, const ProtobufCMessage *m)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, type, m, NULL, 0, &err), SL_OK, "%s", err.msg);
}

static void raw_hello(int fd)
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

static void raw_request(int fd, uint32_t credits)
{
    Sluice__Dpp__Request r = SLUICE__DPP__REQUEST__INIT;
    r.credits = credits;
    raw_send(fd, SL_RPC_REQUEST, &r.base);
}

static void raw_ack(int fd, uint64_t id)
{
    Sluice__Dpp__Ack a = SLUICE__DPP__ACK__INIT;
    a.n_delivery_ids = 1;
    a.delivery_ids = &id;
    raw_send(fd, SL_RPC_ACK, &a.base);
}

/* Receive one BATCH; its sample ids are appended to ids (and its epoch to
 * epochs, unless NULL). @return the delivery id. */
static uint64_t raw_batch_epochs(int fd, int64_t *ids, uint32_t *epochs, uint64_t *n)
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

static uint64_t raw_batch(int fd, int64_t *ids, uint64_t *n)
{
    return raw_batch_epochs(fd, ids, NULL, n);
}

/* Expect an ERROR frame (code, message containing want), then the end. */
static void expect_error(int fd, sl_err_t code, const char *want)
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

static void *collect(void *arg)
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
static void expect_every_sample_once(const collector_t *c)
{
    cr_assert_eq(c->end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c->end), c->msg);
    uint64_t n = (uint64_t)(c->epochs ? c->epochs : 1) * c->rows;
    for (uint64_t i = 0; i < n; i++)
        cr_assert_eq(c->seen[i], 1, "epoch %lu sample %lu: %u", (unsigned long)(i / c->rows),
                     (unsigned long)(i % c->rows), c->seen[i]);
}

Test(worker_faults, unacked_batches_of_a_vanished_client_go_to_the_next)
{
    char table[300], addr[64];
    const uint64_t rows = 10000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 500, 2);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    int fd = raw_connect(addr);
    raw_hello(fd);
    raw_request(fd, 4);
    int64_t *ids = calloc(rows, sizeof *ids);
    uint32_t *epochs = calloc(rows, sizeof *epochs);
    uint64_t n = 0, kept_n = 0;
    uint64_t d[4];
    for (int i = 0; i < 4; i++) {
        d[i] = raw_batch_epochs(fd, ids, epochs, &n);
        if (i == 1) kept_n = n; /* the first two batches will be acknowledged */
    }
    cr_assert_eq(n, 2000);
    raw_ack(fd, d[0]);
    raw_ack(fd, d[1]);
    /* A trainer joins while the raw client still holds two batches: it gets
     * everything else, and those two once the raw client is gone. */
    atomic_uint *seen = calloc(2 * rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .epochs = 2, .seen = seen};
    pthread_t th;
    pthread_create(&th, NULL, collect, &c);
    usleep(200 * 1000);
    close(fd); /* vanishes without GOODBYE */
    pthread_join(th, NULL);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    for (uint64_t i = 0; i < kept_n; i++) {
        uint64_t k = (uint64_t)epochs[i] * rows + (uint64_t)ids[i];
        cr_assert_eq(seen[k], 0, "acked sample %ld of epoch %u delivered again", (long)ids[i],
                     epochs[i]);
        seen[k] = 1;
    }
    for (uint64_t i = 0; i < 2 * rows; i++)
        cr_assert_eq(seen[i], 1, "epoch %lu sample %lu: %u", (unsigned long)(i / rows),
                     (unsigned long)(i % rows), seen[i]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_geq(st.server.redeliveries, 2);
    cr_assert_eq(st.server.samples_acked, 2 * rows);
    cr_assert_eq(st.server.batches_acked, 40);
    free(ids);
    free(epochs);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* A client that reconnects acknowledges, on the new connection, a batch it
 * received on the old one (the trainer client does so in master mode): the
 * worker ignores that ACK instead of refusing the connection, and the batch,
 * back in the ready queue since the break, is delivered again. */
Test(worker_faults, an_ack_of_an_earlier_connection_is_ignored)
{
    char table[300], addr[64];
    const uint64_t rows = 2000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 500, 1);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    int fd = raw_connect(addr);
    raw_hello(fd);
    raw_request(fd, 1);
    int64_t *ids = calloc(rows, sizeof *ids);
    uint64_t n = 0;
    uint64_t first = raw_batch(fd, ids, &n);
    close(fd); /* the connection breaks before the ACK */
    fd = raw_connect(addr);
    raw_hello(fd);
    raw_ack(fd, first); /* sent on the new connection */
    raw_request(fd, 8);
    n = 0;
    uint64_t d[4];
    for (int i = 0; i < 4; i++) {
        d[i] = raw_batch(fd, ids, &n);
        raw_ack(fd, d[i]);
    }
    cr_assert_eq(n, rows, "every batch, the first one again included");
    uint8_t *seen = calloc(rows, 1);
    for (uint64_t i = 0; i < n; i++)
        seen[ids[i]]++;
    for (uint64_t i = 0; i < rows; i++)
        cr_assert_eq(seen[i], 1, "sample %lu: %u", (unsigned long)i, seen[i]);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.stale_acks, 1);
    cr_assert_eq(st.server.bad_frames, 0);
    cr_assert_eq(st.server.batches_acked, 4);
    close(fd);
    free(seen);
    free(ids);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

static const char *binary(void)
{
    const char *b = getenv("SLUICE_BINARY");
    cr_assert_not_null(b, "SLUICE_BINARY is not set (run through ctest)");
    return b;
}

Test(worker_faults, sluice_read_killed_mid_epoch)
{
    char table[300], addr[64], errpath[300];
    const uint64_t rows = 20000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 250, 2);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    snprintf(errpath, sizeof errpath, "%s/read.err", tmpdir);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, 2);
        close(p[0]);
        close(p[1]);
        execl(binary(), binary(), "read", "--worker", addr, "--json", "--prefetch", "4",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    /* Nobody reads the pipe yet: `sluice read` stalls writing its JSON, with
     * batches received and not handed out. Wait until it has some. */
    sl_worker_stats_t st;
    for (int i = 0; i < 500; i++) {
        sl_worker_stats(w, &st);
        if (st.server.batches_sent >= 4) break;
        usleep(10 * 1000);
    }
    cr_assert_geq(st.server.batches_sent, 4);
    usleep(100 * 1000);
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status));
    /* what it printed: batches it handed out (and so acknowledged) */
    FILE *f = fdopen(p[0], "r");
    size_t cap = 1 << 20;
    char *line = malloc(cap);
    uint8_t *printed = calloc(2 * rows, 1); /* [epoch * rows + id] */
    uint64_t printed_n = 0;
    while (fgets(line, (int)cap, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (!o) break; /* the last line may be cut short */
        json_t *sids = json_object_get(o, "sample_ids");
        json_int_t epoch =
            json_integer_value(json_object_get(json_object_get(o, "origin"), "epoch"));
        cr_assert(epoch >= 0 && epoch < 2);
        size_t i;
        json_t *v;
        json_array_foreach(sids, i, v)
        {
            json_int_t id = json_integer_value(v);
            cr_assert(id >= 0 && (uint64_t)id < rows);
            uint64_t k = (uint64_t)epoch * rows + (uint64_t)id;
            cr_assert_eq(printed[k], 0);
            printed[k] = 1;
            printed_n++;
        }
        json_decref(o);
    }
    fclose(f);
    free(line);
    atomic_uint *seen = calloc(2 * rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .epochs = 2, .seen = seen};
    collect(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    /* per epoch: nothing twice, nothing printed by the killed reader again */
    uint64_t got = 0;
    for (uint64_t i = 0; i < 2 * rows; i++) {
        cr_assert_leq(seen[i], 1, "epoch %lu sample %lu twice", (unsigned long)(i / rows),
                      (unsigned long)(i % rows));
        if (printed[i])
            cr_assert_eq(seen[i], 0, "epoch %lu sample %lu printed and redelivered",
                         (unsigned long)(i / rows), (unsigned long)(i % rows));
        got += seen[i];
    }
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    sl_worker_stats(w, &st);
    /* every batch acknowledged exactly once: by the killed reader or the trainer */
    cr_assert_eq(st.server.samples_acked, 2 * rows);
    cr_assert_eq(st.server.batches_acked, 2 * rows / 250);
    cr_assert_geq(2 * rows - got, printed_n);
    cr_assert_gt(st.server.redeliveries, 0, "the killed reader held unacknowledged batches");
    free(printed);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

static void put_header(uint8_t *h, const char *magic, uint16_t version, uint16_t type,
                       uint32_t msg_len, uint64_t payload_len)
{
    memcpy(h, magic, 4);
    h[4] = (uint8_t)version, h[5] = (uint8_t)(version >> 8);
    h[6] = (uint8_t)type, h[7] = (uint8_t)(type >> 8);
    for (int i = 0; i < 4; i++)
        h[8 + i] = (uint8_t)(msg_len >> (8 * i));
    memset(h + 12, 0, 4);
    for (int i = 0; i < 8; i++)
        h[16 + i] = (uint8_t)(payload_len >> (8 * i));
}

Test(worker_faults, bad_frames_get_an_error_and_others_keep_going)
{
    char table[300], addr[64];
    const uint64_t rows = 20000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 200, 2);
    sl_worker_t *w = start(job, 0, addr, sizeof addr);
    /* a slow trainer runs through the whole time */
    atomic_uint *seen = calloc(2 * rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .epochs = 2, .seen = seen, .delay_us = 2000};
    pthread_t th;
    pthread_create(&th, NULL, collect, &c);

    int fd = raw_connect(addr);
    const char garbage[] = "XYZW some bytes that are no frame\r\n";
    cr_assert_eq(write(fd, garbage, sizeof garbage - 1), (ssize_t)(sizeof garbage - 1));
    expect_error(fd, SL_ERR_PROTOCOL, "magic");
    close(fd);

    /* an HTTP client at the trainer port gets an HTTP answer naming the port */
    fd = raw_connect(addr);
    sl_error_t terr = {0};
    cr_assert_eq(sl_rpc_set_recv_timeout(fd, 10000, &terr), SL_OK, "%s", terr.msg);
    const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(write(fd, get, sizeof get - 1), (ssize_t)(sizeof get - 1));
    char answer[1024] = {0};
    size_t got = 0;
    for (ssize_t r;
         got < sizeof answer - 1 && (r = read(fd, answer + got, sizeof answer - 1 - got)) > 0;)
        got += (size_t)r; /* until the worker closes (the read timeout bounds it) */
    cr_assert(strncmp(answer, "HTTP/1.0 400 Bad Request\r\n", 26) == 0, "%s", answer);
    cr_assert(strstr(answer, "this is a sluice worker's trainer port") != NULL, "%s", answer);
    close(fd);

    uint8_t h[SL_RPC_HEADER_BYTES];
    fd = raw_connect(addr);
    put_header(h, "SLDP", 9, SL_RPC_HELLO, 0, 0);
    cr_assert_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    expect_error(fd, SL_ERR_VERSION, "version 9");
    close(fd);

    fd = raw_connect(addr);
    raw_ack(fd, 1);
    expect_error(fd, SL_ERR_PROTOCOL, "hello");
    close(fd);

    fd = raw_connect(addr);
    Sluice__Dpp__Hello hr = SLUICE__DPP__HELLO__INIT;
    hr.protocol_version = SL_RPC_VERSION;
    hr.rank = 3;
    hr.world_size = 2;
    raw_send(fd, SL_RPC_HELLO, &hr.base);
    expect_error(fd, SL_ERR_INVALID, "hello: rank 3 is not below world size 2");
    close(fd);

    fd = raw_connect(addr);
    put_header(h, "SLDP", SL_RPC_VERSION, SL_RPC_HELLO, 0xfffffff0u, 0);
    cr_assert_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    expect_error(fd, SL_ERR_TOO_LARGE, "exceeds the limit");
    close(fd);

    fd = raw_connect(addr);
    raw_hello(fd);
    put_header(h, "SLDP", SL_RPC_VERSION, SL_RPC_REQUEST, 0, 1ull << 40);
    cr_assert_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    expect_error(fd, SL_ERR_PROTOCOL, "payload");
    close(fd);

    fd = raw_connect(addr);
    raw_hello(fd);
    raw_ack(fd, 123456789);
    expect_error(fd, SL_ERR_PROTOCOL, "ACK of delivery id 123456789, which this worker never sent");
    close(fd);

    /* a connection that takes batches then breaks the protocol loses them
     * to the others, not to nobody */
    fd = raw_connect(addr);
    raw_hello(fd);
    raw_request(fd, 2);
    int64_t *ids = calloc(rows, sizeof *ids);
    uint64_t n = 0;
    raw_batch(fd, ids, &n);
    raw_batch(fd, ids, &n);
    Sluice__Dpp__Hello again = SLUICE__DPP__HELLO__INIT;
    again.protocol_version = SL_RPC_VERSION;
    raw_send(fd, SL_RPC_HELLO, &again.base);
    expect_error(fd, SL_ERR_PROTOCOL, "unexpected hello");
    close(fd);

    pthread_join(th, NULL);
    expect_every_sample_once(&c);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.bad_frames, 9); /* the HTTP request counts too */
    cr_assert_geq(st.server.redeliveries, 2);
    /* after the end, a new client gets WELCOME then END */
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    fd = raw_connect(addr);
    raw_hello(fd);
    sl_rpc_frame_t f = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_END, "got %s", sl_rpc_type_name(f.type));
    const Sluice__Dpp__End *e = (const Sluice__Dpp__End *)f.msg;
    cr_assert_eq(e->samples, 2 * rows);
    cr_assert_eq(e->batches, 2 * rows / 200);
    cr_assert_eq(e->epochs, 2);
    sl_rpc_frame_free(&f);
    close(fd);
    free(ids);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* 24,000 criteo rows (~9 MB decoded) to a slow client (3 ms per batch)
 * under a 4 MiB limit: every sample arrives once, more than twice the
 * limit is encoded, the peak stays under the limit, producers waited. */
static void slow_client_under_4m(bool no_fused, sl_worker_stats_t *st)
{
    char table[300], addr[64];
    const uint64_t rows = 24000;
    gen_criteo(rows, 2048, table, sizeof table);
    sl_pipeline_job_t *job = job_for(table, 256);
    const uint64_t limit = 4u << 20;
    sl_worker_t *w =
        start_with(job, limit, &(sl_worker_opts_t){.no_fused = no_fused}, addr, sizeof addr);
    atomic_uint *seen = calloc(rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .seen = seen, .delay_us = 3000};
    collect(&c);
    cr_assert_eq(c.end, SL_ERR_CLOSED, "%s: %s", sl_err_str(c.end), c.msg);
    for (uint64_t i = 0; i < rows; i++)
        cr_assert_eq(seen[i], 1);
    sl_worker_stats(w, st);
    cr_assert_gt(st->bytes_encoded, 2 * limit);
    cr_assert_leq(st->memory_peak, limit, "peak %lu > limit %lu", (unsigned long)st->memory_peak,
                  (unsigned long)limit);
    cr_assert_gt(st->backpressure_ns, 0, "producers waited");
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* The transform threads' path: batches built ahead fill the budget. */
Test(worker_faults, memory_limit_holds_with_a_slow_client)
{
    sl_worker_stats_t st;
    slow_client_under_4m(true, &st);
    cr_assert_eq(st.batches_fused, 0);
    cr_assert_gt(st.memory_peak, (4u << 20) / 2, "the limit was reached (peak %lu)",
                 (unsigned long)st.memory_peak);
}

/* The fused path (the reader makes frames straight from the stripe): the
 * read-ahead bound stops it before the budget does, and the limit holds. */
Test(worker_faults, memory_limit_holds_with_a_slow_client_fused)
{
    sl_worker_stats_t st;
    slow_client_under_4m(false, &st);
    /* stripes of 2048 rows, batches of 256: every full batch is inside one
     * stripe (the last stripe's 1,472 rows hold 5 and the epoch's short
     * last batch of 192, which the transform threads make) */
    cr_assert_eq(st.batches, 94);
    cr_assert_eq(st.batches_fused, 93);
}

/* Read every batch, sleeping delay_us after each (a slow trainer); count
 * each sample id per epoch (seen[epoch * rows + id]). */
static void read_slowly(const char *addr, uint64_t rows, uint32_t delay_us, uint32_t prefetch,
                        uint8_t *seen)
{
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = addr;
    o.prefetch = prefetch;
    sl_trainer_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    wu_read_all(t, rows, 2, delay_us, seen);
    sl_trainer_close(t);
}

/* The memory limit holds with large stripes and a slow trainer: 65,536-row
 * criteo stripes (~23 MB decoded each), a 64 MiB limit, and a trainer that
 * sleeps between batches so that encoded batches pile up waiting for
 * acknowledgements. The budget's high-water mark (memory_peak,
 * sluice_worker_memory_peak_bytes) never passes the limit, and every sample
 * arrives once in each of two epochs. */
Test(worker_faults, memory_limit_holds_with_large_stripes_and_a_slow_trainer)
{
    char table[300], addr[64];
    const uint64_t rows = 4 * 65536;
    const uint64_t limit = 64u << 20;
    gen_criteo(rows, 65536, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 4096, 2);
    sl_error_t err = {0};
    /* The transform threads' path: the reader and two transform threads
     * outpace the slow trainer even in the sanitizer build, so batches pile
     * up against the budget. (The fused path does all of a batch's work on
     * the reader thread; under ASan that alone is slower than this
     * trainer, and nothing would pile up.) */
    sl_worker_t *w =
        start_with(job, limit, &(sl_worker_opts_t){.no_fused = true}, addr, sizeof addr);
    uint8_t *seen = calloc(2 * rows, 1);
    cr_assert_not_null(seen);
    read_slowly(addr, rows, 2000, 16, seen);
    for (uint64_t e = 0; e < 2; e++)
        for (uint64_t i = 0; i < rows; i++)
            cr_assert_eq(seen[e * rows + i], 1, "epoch %llu sample %llu seen %u times",
                         (unsigned long long)e, (unsigned long long)i, seen[e * rows + i]);
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    fprintf(stderr, "memory limit %llu, peak accounted %llu (%.1f%%), back-pressure %.2f s\n",
            (unsigned long long)limit, (unsigned long long)st.memory_peak,
            100.0 * (double)st.memory_peak / (double)limit, st.backpressure_ns / 1e9);
    cr_assert_leq(st.memory_peak, limit, "peak %llu > limit %llu",
                  (unsigned long long)st.memory_peak, (unsigned long long)limit);
    cr_assert_gt(st.memory_peak, limit / 2, "the limit was reached (peak %llu)",
                 (unsigned long long)st.memory_peak);
    cr_assert_gt(st.backpressure_ns, 0, "producers waited");
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* A limit that cannot hold one stripe fails the worker with a message
 * saying so, instead of passing the limit. */
Test(worker_faults, a_memory_limit_too_small_for_a_stripe_fails_loudly)
{
    char table[300];
    const uint64_t rows = 65536;
    const uint64_t limit = 8u << 20; /* a stripe decodes to ~23 MB */
    gen_criteo(rows, 65536, table, sizeof table);
    sl_pipeline_job_t *job = job_for(table, 4096);
    sl_error_t err = {0};
    char addr[64];
    sl_worker_t *w = start(job, limit, addr, sizeof addr);
    sl_err_t rc = sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err);
    /* the worker's memory, not the data: SL_ERR_NOMEM (a split error would go to a master) */
    cr_assert_eq(rc, SL_ERR_NOMEM, "%s: %s", sl_err_str(rc), err.msg);
    cr_assert(strstr(err.msg, "worker: --memory-limit of 8388608 bytes cannot hold ") != NULL &&
                  strstr(err.msg, "stripe 0 decoded") != NULL &&
                  strstr(err.msg, "raise the limit") != NULL,
              "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_leq(st.memory_peak, limit);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* ---- the end of a job, repeated ---- */

typedef struct stopper {
    sl_worker_t *w;
    atomic_bool done;
} stopper_t;

static void *stop_main(void *arg)
{
    stopper_t *s = arg;
    sl_worker_stop(s->w);
    atomic_store(&s->done, true);
    return NULL;
}

/* Join th within seconds (scaled); false when it is still running. */
static bool join_within(pthread_t th, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = tu_timeout(seconds);
    ts.tv_sec += (time_t)t;
    ts.tv_nsec += (long)((t - (double)(time_t)t) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return pthread_timedjoin_np(th, NULL, &ts) == 0;
}

/* `sluice worker --exit-when-done` and one `sluice read --worker`, in
 * process and many times over: the worker waits for every batch to be
 * acknowledged, then stops at once (as the command does); the reader must
 * get END (not a lost connection) and both must finish, with every sample
 * of both epochs delivered once per epoch. The stop used to race the END:
 * a stop that won closed the connection without END, the reader took that
 * for a lost connection and reconnected, and a connection the accept
 * thread took after the stop had shut the others down was never shut
 * down: the worker joined its reader thread forever, the reader waited
 * for batches forever (1 run in 20 of `sluice worker` over 1M rows). Each
 * wait here is bounded: a hang fails the test. */
Test(worker_faults, end_of_job_handshake_never_hangs)
{
    char table[300], addr[64];
    const uint64_t rows = 600;
    const uint32_t epochs = 2;
    gen_criteo(rows, 200, table, sizeof table);
    sl_pipeline_job_t *job = job_epochs(table, 100, epochs);
    atomic_uint *seen = calloc(epochs * rows, sizeof *seen);
    double t0 = (double)time(NULL), budget = tu_timeout(40);
    int runs = 0;
    for (; runs < 300 && (runs < 50 || (double)time(NULL) - t0 < budget); runs++) {
        sl_worker_opts_t o = sl_worker_opts_default();
        o.threads = 1;
        o.max_credits = 4;
        sl_worker_t *w = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_worker_start(job, &o, &w, NULL, &err), SL_OK, "%s", err.msg);
        snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_port(w));
        memset(seen, 0, epochs * rows * sizeof *seen);
        collector_t c = {.addr = addr,
                         .rows = rows,
                         .epochs = epochs,
                         .seen = seen,
                         .reconnect_ms = 1000 /* a reconnect would fail, not hang */};
        pthread_t reader;
        pthread_create(&reader, NULL, collect, &c);
        cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(10) * 1000), &err), SL_OK, "run %d: %s",
                     runs, err.msg);
        stopper_t s = {.w = w};
        pthread_t stopper;
        pthread_create(&stopper, NULL, stop_main, &s);
        cr_assert(join_within(stopper, 10),
                  "run %d: the worker's stop hung (a connection thread never ended)", runs);
        cr_assert(join_within(reader, 10), "run %d: the reader hung after the worker stopped",
                  runs);
        cr_assert_eq(c.end, SL_ERR_CLOSED, "run %d: the reader ended with %s: %s", runs,
                     sl_err_str(c.end), c.msg);
        cr_assert(strstr(c.msg, "the job has no more batches") != NULL,
                  "run %d: the reader did not get END: %s", runs, c.msg);
        for (uint64_t i = 0; i < epochs * rows; i++)
            cr_assert_eq(seen[i], 1, "run %d: epoch %lu sample %lu: %u", runs,
                         (unsigned long)(i / rows), (unsigned long)(i % rows), seen[i]);
        sl_worker_destroy(w);
    }
    cr_log_info("%d end-of-job handshakes", runs);
    free(seen);
    sl_pipeline_job_destroy(job);
}

/* ---- the trainer port's limits ---- */

static unsigned threads_now(void)
{
    unsigned n = 0;
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* HELLO; the answer (WELCOME, or the ERROR of a full worker) is returned. */
static sl_rpc_type_t try_hello(int fd, sl_rpc_frame_t *f)
{
    Sluice__Dpp__Hello h = SLUICE__DPP__HELLO__INIT;
    h.protocol_version = SL_RPC_VERSION;
    h.client_name = "idle";
    raw_send(fd, SL_RPC_HELLO, &h.base);
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, f, &err), SL_OK, "%s", err.msg);
    return f->type;
}

Test(worker_faults, idle_and_flooding_connections_stay_under_the_cap)
{
    char table[300], addr[64];
    const uint64_t rows = 12000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_for(table, 200);
    const uint32_t cap = 8;
    sl_worker_opts_t port = {.max_clients = cap};
    sl_worker_t *w = start_with(job, 0, &port, addr, sizeof addr);
    usleep(200 * 1000);
    unsigned base = threads_now(), peak = base;
    /* 50 silent sockets that never say HELLO: each makes room by closing
     * the oldest connection still in its handshake */
    int silent[50];
    for (int i = 0; i < 50; i++) {
        silent[i] = raw_connect(addr);
        unsigned n = threads_now();
        if (n > peak) peak = n;
    }
    /* 100 clients that say HELLO and then nothing: the first 8 take the
     * places of the last silent ones, the other 92 are refused at once (the
     * idle clients are too fresh to make room) and cost no thread */
    int fds[100];
    for (int i = 0; i < 100; i++) {
        fds[i] = raw_connect(addr);
        sl_rpc_frame_t f = {0};
        sl_rpc_type_t t = try_hello(fds[i], &f);
        if (i < (int)cap) {
            cr_assert_eq(t, SL_RPC_WELCOME, "%d: got %s", i, sl_rpc_type_name(t));
        } else {
            cr_assert_eq(t, SL_RPC_ERROR, "%d: got %s", i, sl_rpc_type_name(t));
            const Sluice__Dpp__Error *e = (const Sluice__Dpp__Error *)f.msg;
            cr_assert_eq(e->code, SL_ERR_AGAIN);
            cr_assert(strstr(e->message, "too many client connections (8, all busy)"), "%s",
                      e->message);
        }
        sl_rpc_frame_free(&f);
        unsigned n = threads_now();
        if (n > peak) peak = n;
    }
    /* every silent one was closed without a word: it never said HELLO */
    for (int i = 0; i < 50; i++) {
        sl_rpc_frame_t f = {0};
        sl_error_t err = {0};
        cr_assert_eq(sl_rpc_set_recv_timeout(silent[i], (int)(tu_timeout(5) * 1000), &err), SL_OK);
        cr_assert_eq(sl_rpc_recv(silent[i], NULL, NULL, &f, &err), SL_ERR_CLOSED, "%d: %s", i,
                     err.msg);
    }
    /* two threads per connection plus the accept thread */
    cr_assert_leq(peak, base + 2 * cap + 1, "threads grew from %u to %u with a cap of %u", base,
                  peak, cap);
    /* the idle clients are a second old: a real client makes room and gets
     * every sample */
    usleep(1100 * 1000);
    atomic_uint *seen = calloc(rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .seen = seen};
    collect(&c);
    expect_every_sample_once(&c);
    cr_assert_leq(threads_now(), base + 2 * cap + 1);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.refused, 92);
    /* the 50 silent ones, then one idle client for the real one */
    cr_assert_eq(st.server.evicted, 51);
    cr_assert_leq(st.server.clients_now, cap);
    for (int i = 0; i < 100; i++)
        close(fds[i]);
    for (int i = 0; i < 50; i++)
        close(silent[i]);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(worker_faults, idle_clients_are_closed_unless_they_hold_batches)
{
    char table[300], addr[64];
    gen_criteo(4000, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_for(table, 200);
    sl_worker_opts_t port = {.client_conn_idle_ms = 300};
    sl_worker_t *w = start_with(job, 0, &port, addr, sizeof addr);
    int idle = raw_connect(addr), busy = raw_connect(addr);
    raw_hello(idle);
    raw_hello(busy);
    raw_request(busy, 1);
    int64_t ids[4000];
    uint64_t n = 0;
    uint64_t id = raw_batch(busy, ids, &n);
    /* both silent now; only the one holding nothing is closed, without a
     * frame (a real client just reconnects) */
    usleep(900 * 1000);
    sl_rpc_frame_t f = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_set_recv_timeout(idle, (int)(tu_timeout(5) * 1000), &err), SL_OK);
    cr_assert_eq(sl_rpc_recv(idle, NULL, NULL, &f, &err), SL_ERR_CLOSED, "%s", err.msg);
    raw_ack(busy, id);
    raw_request(busy, 1);
    raw_batch(busy, ids, &n);
    cr_assert_eq(n, 400);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.idle_closed, 1);
    cr_assert_eq(st.server.batches_acked, 1);
    close(idle);
    close(busy);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(worker_faults, a_trickled_hello_meets_its_deadline)
{
    sl_worker_server_opts_t so = {.listen = "127.0.0.1:0", .hello_timeout_ms = 500};
    sl_worker_server_t *s = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_server_start(&so, &s, &err), SL_OK, "%s", err.msg);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)sl_worker_server_port(s));
    int fd = raw_connect(addr);
    /* a header byte every 100 ms: every read succeeds, the deadline holds */
    uint64_t t0 = sl_clock_ms();
    for (int i = 0; i < 8; i++) {
        if (send(fd, &"SLDP"[i % 4], 1, MSG_NOSIGNAL) != 1) break;
        usleep(100 * 1000);
    }
    expect_error(fd, SL_ERR_TIMEOUT, "no hello within 500 ms of connecting");
    cr_assert_lt(sl_clock_ms() - t0, 500 + 1000 * tu_timeout(1));
    close(fd);
    sl_worker_server_stats_t st;
    sl_worker_server_stats(s, &st);
    cr_assert_eq(st.handshake_timeouts, 1);
    sl_worker_server_destroy(s);
}

static char *secret_file(const char *name, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    tu_write_file(path, text, strlen(text));
    return strdup(path);
}

Test(worker_faults, the_trainer_port_takes_only_holders_of_the_secret)
{
    char table[300], addr[64];
    const uint64_t rows = 6000;
    gen_criteo(rows, 4096, table, sizeof table);
    sl_pipeline_job_t *job = job_for(table, 200);
    const char *secret = "the trainer port's secret";
    char *good = secret_file("good", "the trainer port's secret\n");
    char *wrong = secret_file("wrong", "somebody else's cluster secret\n");
    /* an address other than loopback needs the secret */
    sl_worker_opts_t o = sl_worker_opts_default();
    o.listen = "0.0.0.0:0";
    sl_worker_t *w = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_start(job, &o, &w, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "worker --listen 0.0.0.0:0: an address other than loopback needs a "
                              "cluster secret"),
              "%s", err.msg);
    sl_worker_opts_t port = {.cluster_secret = secret, .listen = "0.0.0.0:0"};
    w = start_with(job, 0, &port, addr, sizeof addr);
    sl_trainer_opts_t t = sl_trainer_opts_default();
    t.address = addr;
    t.reconnect_ms = -1;
    sl_trainer_t *tr = NULL;
    /* a wrong secret, and none: refused, nothing delivered */
    t.cluster_secret_file = wrong;
    cr_assert_eq(sl_trainer_connect(&t, &tr, &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "refused: authentication failed: wrong proof"), "%s", err.msg);
    cr_assert_null(strstr(err.msg, "secret\n"));
    t.cluster_secret_file = NULL;
    unsetenv(SL_RPC_SECRET_ENV);
    cr_assert_eq(sl_trainer_connect(&t, &tr, &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "got auth-challenge (the server requires the cluster secret"), "%s",
              err.msg);
    /* the secret from the environment: every sample */
    setenv(SL_RPC_SECRET_ENV, good, 1);
    atomic_uint *seen = calloc(rows, sizeof *seen);
    collector_t c = {.addr = addr, .rows = rows, .seen = seen};
    collect(&c);
    unsetenv(SL_RPC_SECRET_ENV);
    expect_every_sample_once(&c);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.server.auth_failures, 2);
    sl_worker_destroy(w);
    /* a client with the secret meets a worker without one: it notices */
    w = start(job, 0, addr, sizeof addr);
    t.cluster_secret_file = good;
    t.connect_timeout_ms = 300;
    cr_assert_eq(sl_trainer_connect(&t, &tr, &err), SL_ERR_TIMEOUT);
    cr_assert(strstr(err.msg, "it does not use a cluster secret"), "%s", err.msg);
    sl_worker_destroy(w);
    free(seen);
    free(good);
    free(wrong);
    sl_pipeline_job_destroy(job);
}

/* The DPP worker's trainer port under faults: the end of a job (END, then
 * the worker stops as `--exit-when-done` does) never hangs either side, run
 * a few hundred times; a cap on connections that idle and flooding sockets
 * cannot exceed (threads stay bounded) nor use to lock a real client out;
 * idle clients closed; a deadline on the handshake; the cluster secret. */
#include "worker_faults_util.h"

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

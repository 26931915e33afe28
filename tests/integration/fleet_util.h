/* Helpers shared by the fleet integration tests (tests/integration/
 * fleet_*_test.c): a scratch directory, generated tables, the real
 * `sluice master` process on fixed free ports (so a restarted master is
 * found at the same addresses), workers through the local executor or as
 * single processes with a chosen worker id, a tiny HTTP client for the
 * admin endpoint, trainer clients in master mode (threads here, or a
 * `sluice read` process whose printed batches are parsed) that record
 * every sample id they deliver per epoch, and a TCP relay between workers
 * and the master that can drop one frame of a given type.
 *
 * Sample ids delivered are counted per epoch: seen[epoch * rows + id].
 *
 * Everything is static: each test file includes this once. */
#ifndef SLUICE_TESTS_FLEET_UTIL_H
#define SLUICE_TESTS_FLEET_UTIL_H

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dpp/master/executor/executor.h"
#include "rpc/frame.h"
#include "sluice/trainer.h"
#include "testutil.h"
#include "warehouse/import.h"
#include "warehouse/warehouse.h"

#define FU_TOKEN "fleet-test-token"
/* Each test file uses some of the helpers. */
#define FU_FN static __attribute__((unused))

static char fu_dir[256];

/* What a test started, so that teardown stops it even when an assertion
 * ended the test early: worker processes must not outlive a failed test
 * (they would retry their master forever). */
#define FU_MAX_OWNED 8
static sl_master_executor_t *fu_executors[FU_MAX_OWNED];
static pid_t fu_master_pids[FU_MAX_OWNED];
#define FU_MAX_CHILDREN 16
static pid_t fu_children[FU_MAX_CHILDREN]; /* worker and reader processes started here */

FU_FN int fu_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

FU_FN void fu_setup(void)
{
    snprintf(fu_dir, sizeof fu_dir, "/tmp/sluice-fleet-XXXXXX");
    cr_assert_not_null(mkdtemp(fu_dir));
    signal(SIGPIPE, SIG_IGN);
}

FU_FN void fu_teardown(void)
{
    for (int i = 0; i < FU_MAX_OWNED; i++) {
        sl_master_executor_destroy(fu_executors[i]);
        fu_executors[i] = NULL;
        if (fu_master_pids[i] > 0) {
            kill(fu_master_pids[i], SIGKILL);
            waitpid(fu_master_pids[i], NULL, 0);
            fu_master_pids[i] = 0;
        }
    }
    for (int i = 0; i < FU_MAX_CHILDREN; i++)
        if (fu_children[i] > 0) {
            kill(fu_children[i], SIGKILL);
            waitpid(fu_children[i], NULL, 0);
            fu_children[i] = 0;
        }
    if (!getenv("SLUICE_TEST_KEEP"))
        nftw(fu_dir, fu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    else /* which run's logs are which, when several run at once */
        fprintf(stderr, "SLUICE_TEST_KEEP: files kept in %s\n", fu_dir);
}

FU_FN double fu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

FU_FN const char *fu_binary(void)
{
    const char *b = getenv("SLUICE_BINARY");
    cr_assert_not_null(b, "SLUICE_BINARY is not set (run through ctest)");
    return b;
}

FU_FN void fu_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* A criteo-like table of rows rows (sample ids 0..rows-1) in files files,
 * stripe_rows per stripe: with stripes_per_split 1 each stripe is a split. */
FU_FN void fu_gen_preset(const char *preset, uint64_t rows, uint32_t stripe_rows, uint32_t files,
                         char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/table", fu_dir);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset(preset, rows, 17, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = files;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = stripe_rows;
    go.writer.no_sync = true;
    go.writer.overwrite = true; /* a test may ask for the same table twice */
    go.threads = 1;
    cr_assert_eq(sl_wh_gen_table(dir, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
}

FU_FN void fu_gen(uint64_t rows, uint32_t stripe_rows, uint32_t files, char *dir, size_t cap)
{
    fu_gen_preset("criteo", rows, stripe_rows, files, dir, cap);
}

/* A port that was free a moment ago (bind to 0, read it, close). */
FU_FN uint16_t fu_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    close(fd);
    return ntohs(sa.sin_port);
}

/* Run the sluice program with args (NULL-terminated, any number, after the
 * program's name), the environment variable env set to value (NULL: unset), and
 * wait for it (bounded: it is killed after 20 s, failing the test).
 * @return its exit status; *out (malloc'd) gets its stdout and stderr. */
FU_FN int fu_run(const char *const *args, const char *env, const char *value, char **out)
{
    char log[300];
    snprintf(log, sizeof log, "%s/run.out", fu_dir);
    /* argv made in the parent (no malloc after fork), of any length */
    size_t nargs = 0;
    while (args[nargs] != NULL)
        nargs++;
    const char **argv = calloc(nargs + 2, sizeof *argv);
    cr_assert_not_null(argv);
    argv[0] = fu_binary(); /* asserts: in the parent, not the child */
    memcpy(argv + 1, args, (nargs + 1) * sizeof *argv);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        if (value)
            setenv(env, value, 1);
        else
            unsetenv(env);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    free(argv);
    int ws = 0;
    double deadline = fu_now() + tu_timeout(20);
    while (waitpid(pid, &ws, WNOHANG) == 0) {
        if (fu_now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            cr_assert_fail("sluice %s did not exit in time; see %s", args[0], log);
        }
        usleep(20 * 1000);
    }
    FILE *f = fopen(log, "r");
    *out = calloc(1, 65536);
    if (f) {
        size_t n = fread(*out, 1, 65535, f);
        (*out)[n] = '\0';
        fclose(f);
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* ---- HTTP ---- */

/* One request on its own connection; returns the status (0: no answer)
 * and the body (malloc'd). auth: the bearer token or NULL. */
FU_FN int fu_http(const char *addr, const char *method, const char *path, const char *auth,
                  const char *body, char **reply)
{
    *reply = strdup("");
    char host[64];
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    cr_assert_not_null(colon);
    *colon = '\0';
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return 0;
    }
    size_t blen = body ? strlen(body) : 0;
    size_t cap = blen + 1024;
    char *req = malloc(cap);
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%sContent-Length: "
                     "%zu\r\n\r\n%s",
                     method, path, auth ? "Authorization: Bearer " : "", auth ? auth : "",
                     auth ? "\r\n" : "", blen, body ? body : "");
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t k = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += (size_t)k;
    }
    free(req);
    shutdown(fd, SHUT_WR);
    size_t bcap = 1 << 16, len = 0;
    char *buf = malloc(bcap);
    ssize_t k;
    while ((k = recv(fd, buf + len, bcap - len - 1, 0)) > 0) {
        len += (size_t)k;
        if (len + 1 == bcap) buf = realloc(buf, bcap *= 2);
    }
    buf[len] = '\0';
    close(fd);
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    char *b = strstr(buf, "\r\n\r\n");
    free(*reply);
    *reply = strdup(b ? b + 4 : "");
    free(buf);
    return status;
}

/* GET path, parsed as JSON (asserting 200 and an object). Caller decrefs. */
FU_FN json_t *fu_get_json(const char *admin, const char *path)
{
    char *b;
    int st = fu_http(admin, "GET", path, NULL, NULL, &b);
    cr_assert_eq(st, 200, "GET %s: %d %s", path, st, b);
    json_error_t je;
    json_t *j = json_loads(b, 0, &je);
    cr_assert(json_is_object(j), "GET %s: not a JSON object: %s (%s)", path, b, je.text);
    free(b);
    return j;
}

/* ---- the master process ---- */

typedef struct fu_master {
    pid_t pid;
    char ctl[64], admin[64]; /* "127.0.0.1:port" */
    char state[300], log[300], token_file[300];
    uint64_t lease_timeout_ms;
    const char *secret_file; /* --cluster-secret-file (also fu_executor's workers'); NULL: none */
    const char *extra[8];    /* more options for `sluice master`, NULL-terminated */
    uint64_t compact_bytes;  /* > 0: --compact-bytes */
} fu_master_t;

/* Start `sluice master` on m's addresses (picked on the first start, kept
 * for restarts) and wait until /readyz answers 200. */
FU_FN void fu_master_start(fu_master_t *m)
{
    if (!m->ctl[0]) {
        snprintf(m->ctl, sizeof m->ctl, "127.0.0.1:%u", fu_free_port());
        snprintf(m->admin, sizeof m->admin, "127.0.0.1:%u", fu_free_port());
        snprintf(m->state, sizeof m->state, "%s/state", fu_dir);
        snprintf(m->log, sizeof m->log, "%s/master.log", fu_dir);
        snprintf(m->token_file, sizeof m->token_file, "%s/admin.token", fu_dir);
        fu_write(m->token_file, FU_TOKEN "\n");
        if (!m->lease_timeout_ms) m->lease_timeout_ms = 2000;
    }
    char lease[32], compact[32];
    snprintf(lease, sizeof lease, "%llu", (unsigned long long)m->lease_timeout_ms);
    snprintf(compact, sizeof compact, "%llu", (unsigned long long)m->compact_bytes);
    const char *bin = fu_binary(); /* asserts: in the parent, not the child */
    const char *argv[32] = {bin,
                            "master",
                            "--listen",
                            m->ctl,
                            "--admin",
                            m->admin,
                            "--state",
                            m->state,
                            "--token-file",
                            m->token_file,
                            "--lease-timeout-ms",
                            lease};
    int argc = 12;
    if (m->compact_bytes) {
        argv[argc++] = "--compact-bytes";
        argv[argc++] = compact;
    }
    if (m->secret_file) {
        argv[argc++] = "--cluster-secret-file";
        argv[argc++] = m->secret_file;
    }
    for (int k = 0; k < 8 && m->extra[k]; k++)
        argv[argc++] = m->extra[k];
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(m->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setpgid(0, 0);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    m->pid = pid;
    for (int i = 0; i < FU_MAX_OWNED; i++)
        if (fu_master_pids[i] <= 0) {
            fu_master_pids[i] = pid;
            break;
        }
    double deadline = fu_now() + tu_timeout(15);
    for (;;) {
        char *b;
        int st = fu_http(m->admin, "GET", "/readyz", NULL, NULL, &b);
        free(b);
        if (st == 200) return;
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            for (int i = 0; i < FU_MAX_OWNED; i++)
                if (fu_master_pids[i] == pid) fu_master_pids[i] = 0;
            m->pid = 0;
            cr_assert_fail("sluice master exited (status %d) before it was ready; see %s", ws,
                           m->log);
        }
        cr_assert(fu_now() < deadline, "sluice master not ready in time; see %s", m->log);
        usleep(20 * 1000);
    }
}

/* Stop the master: sig (SIGTERM: cleanly, SIGKILL: a crash) and reap it. */
FU_FN void fu_master_stop(fu_master_t *m, int sig)
{
    if (m->pid <= 0) return;
    kill(m->pid, sig);
    int ws;
    waitpid(m->pid, &ws, 0);
    for (int i = 0; i < FU_MAX_OWNED; i++)
        if (fu_master_pids[i] == m->pid) fu_master_pids[i] = 0;
    m->pid = 0;
}

/* POST /jobs {"spec": spec, ...}. @return the job id (malloc'd). */
FU_FN char *fu_submit(const fu_master_t *m, const char *spec_json, uint32_t ranks,
                      const char *sharding, uint32_t min_w, uint32_t max_w, const char *token_b64)
{
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    cr_assert_not_null(spec, "bad test spec: %s", je.text);
    json_t *body =
        json_pack("{s:o, s:i, s:s, s:i, s:i}", "spec", spec, "ranks", (json_int_t)ranks, "sharding",
                  sharding, "min_workers", (json_int_t)min_w, "max_workers", (json_int_t)max_w);
    if (token_b64) json_object_set_new(body, "resume_token", json_string(token_b64));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char *b;
    int st = fu_http(m->admin, "POST", "/jobs", FU_TOKEN, text, &b);
    free(text);
    cr_assert(st == 200 || st == 201, "POST /jobs: %d %s", st, b);
    json_t *j = json_loads(b, 0, &je);
    const char *id = json_string_value(json_object_get(j, "id"));
    cr_assert_not_null(id, "POST /jobs answer without an id: %s", b);
    char *out = strdup(id);
    json_decref(j);
    free(b);
    return out;
}

/* An integer of GET /status (lease_expiries, lease_revocations,
 * compactions, ...). */
FU_FN long long fu_status_int(const fu_master_t *m, const char *key)
{
    json_t *j = fu_get_json(m->admin, "/status");
    json_t *v = json_object_get(j, key);
    cr_assert(json_is_integer(v), "GET /status has no integer \"%s\"", key);
    long long n = (long long)json_integer_value(v);
    json_decref(j);
    return n;
}

/* A job over a fresh table of rows rows (stripes of 1000 rows in 2 files,
 * one split each; batches of 250; shuffled splits) run for epochs epochs
 * by `workers` workers (min = max), on the master m, which is started
 * (set m's options, such as lease_timeout_ms, first). @return the job id
 * (malloc'd). */
FU_FN char *fu_job_up(fu_master_t *m, const char *id, uint64_t rows, uint32_t epochs,
                      uint32_t ranks, const char *sharding, uint32_t workers)
{
    char table[300], spec[1024];
    fu_gen(rows, 1000, 2, table, sizeof table);
    fu_master_start(m);
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":250,\"epochs\":%u,\"shuffle\":{\"splits\":true,\"seed\":11}}}",
             id, table, epochs);
    return fu_submit(m, spec, ranks, sharding, workers, workers, NULL);
}

/* GET /jobs/{id} "finished". */
FU_FN bool fu_job_finished(const fu_master_t *m, const char *job)
{
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m->admin, path);
    bool f = json_is_true(json_object_get(j, "finished"));
    json_decref(j);
    return f;
}

/* ---- workers through the executor ---- */

/* An executor whose workers reach the master at master_addr (the master's
 * control address, or a relay in front of it), with secret_file (NULL:
 * none) as their cluster secret. */
FU_FN sl_master_executor_t *fu_executor_via(const char *master_addr, const char *secret_file,
                                            uint32_t threads)
{
    char logs[300];
    snprintf(logs, sizeof logs, "%s/logs", fu_dir);
    mkdir(logs, 0755);
    const char *secret[] = {"--cluster-secret-file", secret_file, NULL};
    sl_master_executor_local_opts_t o = {.binary = fu_binary(),
                                         .master = master_addr,
                                         .log_dir = logs,
                                         .worker_threads = threads,
                                         .max_workers = 16,
                                         .stop_grace_ms = 3000,
                                         .extra_args = secret_file ? secret : NULL};
    sl_master_executor_t *ex = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_local_new(&o, &ex, &err), SL_OK, "%s", err.msg);
    for (int i = 0; i < FU_MAX_OWNED; i++)
        if (!fu_executors[i]) {
            fu_executors[i] = ex;
            break;
        }
    return ex;
}

FU_FN sl_master_executor_t *fu_executor(const fu_master_t *m, uint32_t threads)
{
    return fu_executor_via(m->ctl, m->secret_file, threads);
}

/* Scale job to 0 workers and wait until they have exited (not only been
 * told to), so that none of them is still connected when the test goes on. */
FU_FN void fu_executor_drain(sl_master_executor_t *ex, const char *job)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_executor_scale(ex, job, 0, NULL, NULL, &err), SL_OK, "%s", err.msg);
    double deadline = fu_now() + tu_timeout(10);
    while (sl_master_executor_list(ex, job, NULL, 0) > 0) {
        cr_assert(fu_now() < deadline, "the workers of %s did not exit after SIGTERM", job);
        usleep(10 * 1000);
    }
}

/* Stop an executor's workers and free it (instead of
 * sl_master_executor_destroy, so that teardown does not free it again). */
FU_FN void fu_executor_destroy(sl_master_executor_t *ex)
{
    for (int i = 0; i < FU_MAX_OWNED; i++)
        if (fu_executors[i] == ex) fu_executors[i] = NULL;
    sl_master_executor_destroy(ex);
}

/* ---- trainer clients in master mode ---- */

typedef struct fu_client {
    const char *master;
    const char *job;
    uint32_t rank, world_size;
    uint64_t rows;     /* sample ids are < rows */
    uint32_t epochs;   /* of the job; 0: every epoch counted together, in seen[id] */
    atomic_uint *seen; /* [epochs * rows]: seen[epoch * rows + id], shared by a test's clients */
    const char *secret_file; /* the cluster secret, NULL: none */
    uint64_t samples, batches;
    atomic_uint delay_us; /* per batch: a slow trainer (may change while it runs) */
    atomic_bool stop;     /* set: the client closes after its current batch */
    uint64_t stop_after;  /* > 0: take a resume token after this many batches and stop */
    uint8_t *token;       /* the token taken (malloc'd) */
    size_t token_len;
    int64_t *order;          /* NULL, or [rows]: sample ids in delivery order */
    uint64_t *batch_sizes;   /* NULL, or [rows]: samples per delivered batch */
    uint64_t *epoch_batches; /* NULL, or [epochs]: batches delivered per epoch */
    int refresh_ms;          /* the client's refresh_ms; 0: 200 */
    sl_trainer_stats_t stats;
    atomic_bool finished; /* the thread is done: the fields above may be read */
    sl_err_t end;
    char msg[SL_ERROR_MSG_MAX];
} fu_client_t;

FU_FN void *fu_client_run(void *arg)
{
    fu_client_t *c = arg;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = c->master;
    o.job_id = c->job;
    o.rank = c->rank;
    o.world_size = c->world_size ? c->world_size : 1;
    o.prefetch = 4;
    o.reconnect_ms = (int)tu_timeout(30) * 1000;
    o.refresh_ms = c->refresh_ms ? c->refresh_ms : 200;
    o.cluster_secret_file = c->secret_file;
    sl_trainer_t *t;
    sl_error_t err = {0};
    if ((c->end = sl_trainer_connect(&o, &t, &err)) != SL_OK) {
        snprintf(c->msg, sizeof c->msg, "%s", err.msg);
        atomic_store(&c->finished, true);
        return NULL;
    }
    sl_batch_t *b;
    int timeout = (int)(tu_timeout(30) * 1000);
    while ((c->end = sl_trainer_next(t, timeout, &b, &err)) == SL_OK) {
        if (c->batch_sizes) c->batch_sizes[c->batches] = b->batch_size;
        uint32_t epoch = c->epochs ? b->origin.epoch : 0;
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            if (id < 0 || (uint64_t)id >= c->rows || (c->epochs && epoch >= c->epochs)) {
                c->end = SL_ERR_CORRUPT;
                snprintf(c->msg, sizeof c->msg, "sample id %lld of epoch %u out of range",
                         (long long)id, b->origin.epoch);
                break;
            }
            atomic_fetch_add(&c->seen[(uint64_t)epoch * c->rows + (uint64_t)id], 1);
            if (c->order) c->order[c->samples] = id;
            c->samples++;
        }
        c->batches++;
        if (c->epoch_batches && epoch < c->epochs) c->epoch_batches[epoch]++;
        sl_trainer_release(t, b);
        if (c->end == SL_ERR_CORRUPT) break;
        uint32_t delay = atomic_load(&c->delay_us);
        if (delay) usleep(delay);
        if (atomic_load(&c->stop)) {
            c->end = SL_ERR_CLOSED;
            break;
        }
        if (c->stop_after && c->batches == c->stop_after) {
            c->end = sl_trainer_resume_token(t, timeout, &c->token, &c->token_len, &err);
            if (c->end == SL_OK) {
                uint8_t *copy = malloc(c->token_len);
                memcpy(copy, c->token, c->token_len);
                sl_trainer_token_free(t, c->token, c->token_len);
                c->token = copy;
                c->end = SL_ERR_CLOSED; /* a checkpoint, then the trainer "crashes" */
            }
            break;
        }
    }
    if (c->end != SL_ERR_CLOSED) snprintf(c->msg, sizeof c->msg, "%s", err.msg);
    sl_trainer_stats(t, &c->stats);
    sl_trainer_close(t);
    atomic_store(&c->finished, true);
    return NULL;
}

/* Start n clients made from proto (master, job, rows, epochs, seen,
 * delay_us, world_size...), client i with rank i when world_size > 1. */
FU_FN void fu_clients_start(fu_client_t *c, pthread_t *th, int n, const fu_client_t *proto)
{
    for (int i = 0; i < n; i++) {
        c[i] = *proto;
        atomic_init(&c[i].delay_us, atomic_load(&proto->delay_us));
        atomic_init(&c[i].stop, false);
        atomic_init(&c[i].finished, false);
        if (proto->world_size > 1) c[i].rank = (uint32_t)i;
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
}

/* Join n clients, each of which must have ended cleanly (the job ended). */
FU_FN void fu_clients_join(fu_client_t *c, pthread_t *th, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(c[i].end, SL_ERR_CLOSED, "client %d ended with %s: %s", i,
                     sl_err_str(c[i].end), c[i].msg);
    }
}

/* Samples delivered so far by every client sharing seen (safe to call while
 * they run). */
FU_FN uint64_t fu_seen_total(const atomic_uint *seen, uint64_t rows)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < rows; i++)
        n += atomic_load(&seen[i]);
    return n;
}

/* In each of epochs epochs, every id in [0, rows) seen exactly once
 * (seen[epoch * rows + id]); reports per epoch what was not. */
FU_FN void fu_assert_once_per_epoch(const atomic_uint *seen, uint64_t rows, uint32_t epochs)
{
    for (uint32_t e = 0; e < epochs; e++) {
        uint64_t missing = 0, extra = 0, first_bad = UINT64_MAX;
        for (uint64_t i = 0; i < rows; i++) {
            unsigned s = atomic_load(&seen[(uint64_t)e * rows + i]);
            if (s < 1) missing++;
            if (s > 1) extra += s - 1;
            if (s != 1 && first_bad == UINT64_MAX) first_bad = i;
        }
        cr_assert(missing == 0 && extra == 0,
                  "epoch %u: %llu samples missing, %llu extra deliveries (first wrong id %llu "
                  "seen %u times)",
                  e, (unsigned long long)missing, (unsigned long long)extra,
                  (unsigned long long)first_bad,
                  first_bad == UINT64_MAX ? 0 : atomic_load(&seen[(uint64_t)e * rows + first_bad]));
    }
}

/* in[0..n) as base64 (RFC 4648, padded; GnuTLS encodes). Caller frees. */
FU_FN char *fu_base64(const uint8_t *in, size_t n)
{
    gnutls_datum_t raw = {.data = (unsigned char *)in, .size = (unsigned)n}, enc = {0};
    cr_assert_eq(gnutls_base64_encode2(&raw, &enc), 0);
    char *out = strndup((const char *)enc.data, enc.size);
    cr_assert_not_null(out);
    gnutls_free(enc.data);
    return out;
}

/* ---- processes started here (workers with a chosen id, trainers) ---- */

/* fork + exec argv with stdout to out_fd (-1: the log file) and stderr to
 * log (appended); remembered so that teardown kills it. */
FU_FN pid_t fu_spawn(const char *const *argv, int out_fd, const char *log)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(out_fd >= 0 ? out_fd : fd, 1);
            dup2(fd, 2);
        }
        setpgid(0, 0);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < FU_MAX_CHILDREN; i++)
        if (fu_children[i] <= 0) {
            fu_children[i] = pid;
            break;
        }
    return pid;
}

/* Wait up to seconds (scaled) for pid to exit. @return its wait status, or
 * -1 when it is still running. */
FU_FN int fu_wait_exit(pid_t pid, double seconds)
{
    double deadline = fu_now() + tu_timeout(seconds);
    for (;;) {
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            for (int i = 0; i < FU_MAX_CHILDREN; i++)
                if (fu_children[i] == pid) fu_children[i] = 0;
            return ws;
        }
        if (fu_now() >= deadline) return -1;
        usleep(10 * 1000);
    }
}

FU_FN void fu_kill9(pid_t pid)
{
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_neq(fu_wait_exit(pid, 10), -1);
}

/* `sluice worker --master master --job-id job --worker-id id` (one
 * transform thread), stderr and stdout to log. */
FU_FN pid_t fu_worker_spawn(const char *master, const char *job, const char *id, const char *log)
{
    const char *bin = fu_binary();
    const char *argv[] = {bin,         "worker",      "--master", master,     "--job-id",
                          job,         "--worker-id", id,         "--listen", "127.0.0.1:0",
                          "--threads", "1",           NULL};
    return fu_spawn(argv, -1, log);
}

/* A `sluice read --master --job --json` process: a trainer in its own
 * process, so that it can be killed with SIGKILL. A thread here parses its
 * stdout: every batch it printed (handed out by sl_trainer_next) counts in
 * seen[epoch * rows + id]. A line cut short by a kill is not counted. */
typedef struct fu_reader {
    pid_t pid;
    int fd; /* the read end of its stdout */
    pthread_t th;
    uint64_t rows;
    uint32_t epochs;
    atomic_uint *seen;
    atomic_ullong samples, batches;
    atomic_bool bad; /* a line that parsed but made no sense */
    char bad_line[200];
} fu_reader_t;

FU_FN void *fu_reader_main(void *arg)
{
    fu_reader_t *r = arg;
    FILE *f = fdopen(r->fd, "r");
    size_t cap = 0;
    char *line = NULL;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n') break; /* cut short: not handed out whole */
        json_t *o = json_loads(line, 0, NULL);
        if (o == NULL) break;
        json_t *ids = json_object_get(o, "sample_ids");
        json_int_t epoch =
            json_integer_value(json_object_get(json_object_get(o, "origin"), "epoch"));
        size_t i;
        json_t *v;
        if (!json_is_array(ids) || epoch < 0 || (uint64_t)epoch >= r->epochs) {
            atomic_store(&r->bad, true);
            snprintf(r->bad_line, sizeof r->bad_line, "%.150s", line);
        }
        json_array_foreach(ids, i, v)
        {
            json_int_t id = json_integer_value(v);
            if (id < 0 || (uint64_t)id >= r->rows || epoch < 0 || (uint64_t)epoch >= r->epochs) {
                atomic_store(&r->bad, true);
                continue;
            }
            atomic_fetch_add(&r->seen[(uint64_t)epoch * r->rows + (uint64_t)id], 1);
            atomic_fetch_add(&r->samples, 1);
        }
        atomic_fetch_add(&r->batches, 1);
        json_decref(o);
    }
    free(line);
    fclose(f);
    return NULL;
}

/* The reader's process alone, its stdout not read yet (start the parser
 * with pthread_create(&r->th, NULL, fu_reader_main, r)): extra are more
 * options (NULL-terminated, may be NULL), pipe_bytes > 0 sizes its stdout
 * pipe (F_SETPIPE_SZ). */
FU_FN void fu_reader_spawn(fu_reader_t *r, const fu_master_t *m, const char *job, uint64_t rows,
                           uint32_t epochs, atomic_uint *seen, const char *log,
                           const char *const *extra, int pipe_bytes)
{
    memset(r, 0, sizeof *r);
    r->rows = rows;
    r->epochs = epochs;
    r->seen = seen;
    int p[2];
    cr_assert_eq(pipe(p), 0);
    if (pipe_bytes > 0) fcntl(p[1], F_SETPIPE_SZ, pipe_bytes);
    const char *argv[24] = {fu_binary(), "read",   "--master",   m->ctl, "--job",
                            job,         "--json", "--prefetch", "4"};
    int n = 9;
    for (; extra != NULL && *extra != NULL && n < 23; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    r->pid = fu_spawn(argv, p[1], log);
    close(p[1]);
    r->fd = p[0];
}

FU_FN void fu_reader_start(fu_reader_t *r, const fu_master_t *m, const char *job, uint64_t rows,
                           uint32_t epochs, atomic_uint *seen, const char *log)
{
    const char *quiet[] = {"--quiet", NULL};
    fu_reader_spawn(r, m, job, rows, epochs, seen, log, quiet, 0);
    pthread_create(&r->th, NULL, fu_reader_main, r);
}

/* Wait for the reader to exit by itself; its status. */
FU_FN int fu_reader_join(fu_reader_t *r, double seconds)
{
    int ws = fu_wait_exit(r->pid, seconds);
    cr_assert_neq(ws, -1, "sluice read did not finish in time");
    pthread_join(r->th, NULL);
    cr_assert(!atomic_load(&r->bad), "sluice read printed a batch out of range: %s", r->bad_line);
    return ws;
}

FU_FN void fu_reader_kill9(fu_reader_t *r)
{
    fu_kill9(r->pid);
    pthread_join(r->th, NULL);
    cr_assert(!atomic_load(&r->bad), "sluice read printed a batch out of range: %s", r->bad_line);
}

/* ---- a relay between workers and the master ---- */

/* Listens on its own port and relays every connection to target; in the
 * target -> peer direction it reads whole frames (src/rpc/frame.h
 * headers) and, for the drop_nth-th frame of type drop_type over all
 * connections, forwards nothing of it and breaks that connection (both
 * sides closed): a frame lost with its connection. */
typedef struct fu_proxy {
    int lfd;
    char addr[64];
    char target[64];
    uint32_t drop_type, drop_nth;
    atomic_uint seen_type; /* frames of drop_type relayed or dropped */
    atomic_uint dropped;
    atomic_bool stop;
    atomic_int live; /* relay threads running (they use p) */
    pthread_t th;
} fu_proxy_t;

typedef struct fu_pair {
    fu_proxy_t *p;
    int down, up; /* the peer's connection, the target's */
} fu_pair_t;

static bool fu_send_all(int fd, const uint8_t *b, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

FU_FN void *fu_pair_main(void *arg)
{
    fu_pair_t *pr = arg;
    fu_proxy_t *p = pr->p;
    size_t cap = 1 << 16, len = 0; /* target -> peer bytes not yet forwarded */
    uint8_t *buf = malloc(cap), tmp[1 << 14];
    bool open = true;
    while (open && !atomic_load(&p->stop)) {
        struct pollfd fds[2] = {{.fd = pr->down, .events = POLLIN},
                                {.fd = pr->up, .events = POLLIN}};
        if (poll(fds, 2, 50) <= 0) continue;
        if (fds[0].revents) { /* peer -> target: as it comes */
            ssize_t k = recv(pr->down, tmp, sizeof tmp, 0);
            open = k > 0 && fu_send_all(pr->up, tmp, (size_t)k);
        }
        if (open && fds[1].revents) { /* target -> peer: whole frames */
            if (cap - len < sizeof tmp) buf = realloc(buf, cap *= 2);
            ssize_t k = recv(pr->up, buf + len, cap - len, 0);
            open = k > 0;
            len += k > 0 ? (size_t)k : 0;
            size_t at = 0;
            while (open && len - at >= SL_RPC_HEADER_BYTES) {
                sl_rpc_header_t h;
                sl_rpc_limits_t lim = {.max_message_bytes = 64u << 20,
                                       .max_payload_bytes = 1ull << 40};
                if (sl_rpc_header_decode(buf + at, &lim, &h, NULL) != SL_OK) {
                    open = false; /* not our protocol: give up the pair */
                    break;
                }
                size_t total = SL_RPC_HEADER_BYTES + h.message_len + (size_t)h.payload_len;
                if (len - at < total) break;
                if (h.type == p->drop_type &&
                    atomic_fetch_add(&p->seen_type, 1) + 1 == p->drop_nth) {
                    atomic_fetch_add(&p->dropped, 1);
                    open = false; /* lost, and the connection with it */
                    break;
                }
                open = fu_send_all(pr->down, buf + at, total);
                at += total;
            }
            memmove(buf, buf + at, len - at);
            len -= at;
        }
    }
    close(pr->down);
    close(pr->up);
    free(buf);
    free(pr);
    atomic_fetch_sub(&p->live, 1); /* p is not touched after this */
    return NULL;
}

FU_FN void *fu_proxy_main(void *arg)
{
    fu_proxy_t *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {.fd = p->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0) continue;
        int down = accept(p->lfd, NULL, NULL);
        if (down < 0) continue;
        int up;
        if (sl_rpc_connect(p->target, 2000, &up, NULL) != SL_OK) {
            close(down); /* the master is down: the worker retries */
            continue;
        }
        fu_pair_t *pr = malloc(sizeof *pr);
        *pr = (fu_pair_t){p, down, up};
        pthread_t th;
        atomic_fetch_add(&p->live, 1);
        if (pthread_create(&th, NULL, fu_pair_main, pr) != 0) {
            atomic_fetch_sub(&p->live, 1);
            close(down);
            close(up);
            free(pr);
            continue;
        }
        pthread_detach(th); /* ends when either side closes, or at stop */
    }
    return NULL;
}

FU_FN void fu_proxy_start(fu_proxy_t *p, const char *target, uint32_t drop_type, uint32_t drop_nth)
{
    memset(p, 0, sizeof *p);
    snprintf(p->target, sizeof p->target, "%s", target);
    p->drop_type = drop_type;
    p->drop_nth = drop_nth;
    uint16_t port;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_listen("127.0.0.1:0", 64, &p->lfd, &port, &err), SL_OK, "%s", err.msg);
    snprintf(p->addr, sizeof p->addr, "127.0.0.1:%u", port);
    pthread_create(&p->th, NULL, fu_proxy_main, p);
}

/* Stops accepting and every relay (they end within one 50 ms poll). */
FU_FN void fu_proxy_stop(fu_proxy_t *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    close(p->lfd);
    double deadline = fu_now() + tu_timeout(10);
    while (atomic_load(&p->live) > 0) {
        cr_assert(fu_now() < deadline, "relay threads did not end");
        usleep(10 * 1000);
    }
}

#endif

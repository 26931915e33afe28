/* The core of the fleet tests' helpers (fleet_util.h): a scratch directory,
 * generated tables, the real `sluice master` process on fixed free ports (so
 * a restarted master is found at the same addresses), a tiny HTTP client for
 * the admin endpoint, workers through the local executor. Everything is
 * static: each test file includes it once. */
#ifndef SLUICE_TESTS_FLEET_CORE_H
#define SLUICE_TESTS_FLEET_CORE_H

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

/* The sluice program under test (testutil.h's, by the fleet's name). */
/* The last `lines` lines of a file to stderr, headed by its path: what a
 * failing test shows of a process's log, since the test's directory is
 * removed after it (SLUICE_TEST_KEEP keeps it). */
FU_FN void fu_print_tail(const char *path, int lines)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "---- %s: cannot open\n", path);
        return;
    }
    char *ring[64] = {0};
    int n = lines < 64 ? lines : 64, at = 0, seen = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        free(ring[at]);
        ring[at] = strdup(line);
        at = (at + 1) % n;
        seen++;
    }
    fclose(f);
    fprintf(stderr, "---- the last %d lines of %s\n", seen < n ? seen : n, path);
    for (int i = 0; i < n; i++) {
        char *l = ring[(at + i) % n];
        if (l) fputs(l, stderr);
        free(l);
    }
}

FU_FN const char *fu_binary(void)
{
    return tu_binary();
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

/* Whether the master's log says it could not listen on a port: a port
 * fu_free_port found free was taken meanwhile (an outgoing connection of a
 * test running beside this one may get it as its local port). */
FU_FN bool fu_master_port_taken(const fu_master_t *m)
{
    char *text = tu_read_file(m->log);
    bool taken =
        text && (strstr(text, "Address already in use") || strstr(text, "cannot listen on"));
    free(text);
    return taken;
}

FU_FN int fu_master_spawn(fu_master_t *m);

/* Start `sluice master` on m's addresses (picked on the first start, kept
 * for restarts) and wait until /readyz answers 200. On the first start a
 * port taken between its pick and the master's bind is picked again (up to
 * three times). */
FU_FN void fu_master_start(fu_master_t *m)
{
    bool picked = !m->ctl[0];
    for (int attempt = 0;; attempt++) {
        if (fu_master_spawn(m) == 0) return;
        if (!picked || attempt == 2 || !fu_master_port_taken(m)) break;
        fprintf(stderr, "fu_master_start: a port of %s / %s was taken; picking others\n", m->ctl,
                m->admin);
        snprintf(m->ctl, sizeof m->ctl, "127.0.0.1:%u", fu_free_port());
        snprintf(m->admin, sizeof m->admin, "127.0.0.1:%u", fu_free_port());
    }
    cr_assert_fail("sluice master exited before it was ready; see %s", m->log);
}

/* Spawn `sluice master` on m's addresses (picked here on the first
 * start) and wait until /readyz answers 200. @return 0 when it is ready,
 * else -1: it exited first (its status logged to stderr). */
FU_FN int fu_master_spawn(fu_master_t *m)
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
        if (st == 200) return 0;
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            for (int i = 0; i < FU_MAX_OWNED; i++)
                if (fu_master_pids[i] == pid) fu_master_pids[i] = 0;
            m->pid = 0;
            fprintf(stderr, "sluice master exited (status %d) before it was ready; see %s\n", ws,
                    m->log);
            return -1;
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

#endif

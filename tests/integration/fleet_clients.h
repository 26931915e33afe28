/* Trainers and processes of the fleet tests (fleet_util.h): trainer clients
 * in master mode (threads here, or a `sluice read` process whose printed
 * batches are parsed) that record every sample id they deliver per epoch
 * (seen[epoch * rows + id]), and worker processes with a chosen worker id. */
#ifndef SLUICE_TESTS_FLEET_CLIENTS_H
#define SLUICE_TESTS_FLEET_CLIENTS_H

#include "fleet_core.h"

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
    double wait_s;           /* the longest wait for a batch, before tu_timeout; 0: 30 s */
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
    int timeout = (int)(tu_timeout(c->wait_s > 0 ? c->wait_s : 30) * 1000);
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

#endif

/* The local executor (executor.h): worker processes spawned with
 * posix_spawn, stopped with SIGTERM, reaped by pid. Its entry points are
 * the ops of an sl_master_executor_t; executor.c forwards to them. */
#include "dpp/master/executor/executor.h"
#include "common/clock.h"
#include "common/mem.h"
#include "dpp/pipeline/job.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/lock.h"

extern char **environ;

typedef struct wrec {
    sl_master_executor_worker_t pub;
} wrec_t;

/* A job whose workers failed in a row (only those: an entry goes when its
 * count is reset). */
typedef struct backoff {
    char job_id[256];
    uint32_t failures;   /* in a row */
    uint64_t not_before; /* no spawn for the job before (CLOCK_MONOTONIC ms) */
} backoff_t;

typedef struct local {
    sl_master_executor_t base; /* first: an sl_master_executor_t * points here */
    const sl_allocator_t *alloc;
    /* base.mu guards the rest; base.stats the figures */
    char *binary, *master, *log_dir, *listen_host;
    uint32_t worker_threads, stop_grace_ms, max_workers;
    char **extra; /* NULL-terminated copies */
    uint32_t num_extra;
    wrec_t *w; /* [max_workers]; live ones are the running workers, oldest first */
    uint32_t num;
    uint32_t next_seq;
    uint32_t exited_since; /* for local_reap's return */
    uint32_t backoff_ms, max_backoff_ms, healthy_ms;
    backoff_t *bo; /* [nbo] of [cap_bo] */
    uint32_t nbo, cap_bo;
} local_t;

static const sl_master_executor_ops_t local_ops;
static void local_destroy(sl_master_executor_t *base);

sl_err_t sl_master_executor_local_check_log_dir(const char *dir, sl_error_t *err)
{
    struct stat st;
    if (dir == NULL || dir[0] == '\0')
        return sl_error_set(err, SL_ERR_INVALID, "--worker-log-dir: empty");
    if (stat(dir, &st) != 0)
        return sl_error_set(err, SL_ERR_INVALID, "--worker-log-dir %s: %s", dir,
                            errno == ENOENT ? "does not exist (create it first)" : strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sl_error_set(err, SL_ERR_INVALID, "--worker-log-dir %s: not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return sl_error_set(err, SL_ERR_INVALID, "--worker-log-dir %s: not writable: %s", dir,
                            strerror(errno));
    return SL_OK;
}

/* ---- back-off (needs ex->base.mu) ---- */

static backoff_t *backoff_find(local_t *ex, const char *job_id) SL_REQUIRES(ex->base.mu)
{
    for (uint32_t i = 0; i < ex->nbo; i++)
        if (strcmp(ex->bo[i].job_id, job_id) == 0) return &ex->bo[i];
    return NULL;
}

static void backoff_reset(local_t *ex, const char *job_id) SL_REQUIRES(ex->base.mu)
{
    backoff_t *b = backoff_find(ex, job_id);
    if (b != NULL) *b = ex->bo[--ex->nbo];
}

/* One more failure of job_id in a row: its next spawn waits. Out of memory
 * for the entry: no delay this time (the next failure tries again). */
static void backoff_failed(local_t *ex, const char *job_id) SL_REQUIRES(ex->base.mu)
{
    backoff_t *b = backoff_find(ex, job_id);
    if (b == NULL) {
        if (ex->nbo == ex->cap_bo && !SL_GROW(ex->alloc, ex->bo, ex->cap_bo, ex->nbo + 1, 8))
            return;
        b = &ex->bo[ex->nbo++];
        memset(b, 0, sizeof *b);
        snprintf(b->job_id, sizeof b->job_id, "%s", job_id);
    }
    b->failures++;
    uint64_t delay = 0;
    if (b->failures >= 2) {
        uint32_t shift = b->failures - 2 < 20 ? b->failures - 2 : 20;
        delay = (uint64_t)ex->backoff_ms << shift;
        if (delay > ex->max_backoff_ms) delay = ex->max_backoff_ms;
        ex->base.stats.delayed++;
    }
    b->not_before = sl_clock_ms() + delay;
}

/* Options the executor sets itself must not come twice from extra_args. */
static const char *const reserved_args[] = {"--master", "--job-id", "--worker-id",
                                            "--listen", "--job",    NULL};

sl_err_t sl_master_executor_local_new(const sl_master_executor_local_opts_t *opts,
                                      sl_master_executor_t **out, sl_error_t *err)
{
    *out = NULL;
    if (!opts || !opts->binary || !*opts->binary || !opts->master || !*opts->master)
        return sl_error_set(err, SL_ERR_INVALID,
                            "executor: the sluice binary and the master "
                            "address are required");
    uint32_t num_extra = 0;
    for (const char *const *a = opts->extra_args; a && *a; a++, num_extra++)
        for (const char *const *r = reserved_args; *r; r++)
            if (strncmp(*a, *r, strlen(*r)) == 0 &&
                ((*a)[strlen(*r)] == '\0' || (*a)[strlen(*r)] == '='))
                return sl_error_set(err, SL_ERR_INVALID,
                                    "executor: worker argument '%s' is set by the executor", *a);
    if (num_extra > 64)
        return sl_error_set(err, SL_ERR_INVALID, "executor: %u extra worker arguments, at most 64",
                            num_extra);
    if (opts->log_dir) {
        sl_err_t rc = sl_master_executor_local_check_log_dir(opts->log_dir, err);
        if (rc != SL_OK) return sl_error_prefix(err, "executor: ");
    }
    const sl_allocator_t *a = opts->allocator ? opts->allocator : sl_allocator_default();
    local_t *ex = sl_calloc(a, 1, sizeof *ex);
    if (!ex) return sl_error_set(err, SL_ERR_NOMEM, "executor: out of memory");
    ex->base.ops = &local_ops;
    ex->alloc = a;
    sl_mutex_init(&ex->base.mu);
    ex->max_workers = opts->max_workers ? opts->max_workers : 64;
    ex->stop_grace_ms = opts->stop_grace_ms ? opts->stop_grace_ms : 5000;
    ex->backoff_ms = opts->backoff_ms ? opts->backoff_ms : 500;
    ex->max_backoff_ms = opts->max_backoff_ms ? opts->max_backoff_ms : 30000;
    ex->healthy_ms = opts->healthy_ms ? opts->healthy_ms : 10000;
    ex->worker_threads = opts->worker_threads;
    ex->binary = sl_strdup(a, opts->binary);
    ex->master = sl_strdup(a, opts->master);
    ex->log_dir = sl_strdup(a, opts->log_dir);
    ex->listen_host = sl_strdup(a, opts->listen_host ? opts->listen_host : "127.0.0.1");
    ex->num_extra = num_extra;
    ex->extra = sl_calloc(a, num_extra + 1, sizeof *ex->extra);
    ex->w = sl_calloc(a, ex->max_workers, sizeof *ex->w);
    bool ok = ex->binary && ex->master && ex->listen_host && (ex->log_dir || !opts->log_dir) &&
              ex->extra && ex->w;
    for (uint32_t i = 0; ok && i < num_extra; i++)
        ok = (ex->extra[i] = sl_strdup(a, opts->extra_args[i])) != NULL;
    if (!ok) {
        local_destroy(&ex->base);
        return sl_error_set(err, SL_ERR_NOMEM, "executor: out of memory");
    }
    *out = &ex->base;
    return SL_OK;
}

/* Account for one reaped worker and drop it from the table. Needs ex->base.mu. */
static void forget(local_t *ex, uint32_t i, int status) SL_REQUIRES(ex->base.mu)
{
    wrec_t *r = &ex->w[i];
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    /* A worker we asked to stop and that died of that very signal stopped
     * as asked too. */
    if (!clean && r->pub.stopping && WIFSIGNALED(status) &&
        (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL))
        clean = true;
    /* An exit the executor did not ask for, soon after the start: the job's
     * workers may keep dying, so their restarts back off. */
    if (!r->pub.stopping) {
        if (sl_clock_ms() - r->pub.started_ms < ex->healthy_ms)
            backoff_failed(ex, r->pub.job_id);
        else
            backoff_reset(ex, r->pub.job_id);
    }
    if (clean) {
        ex->base.stats.exited++;
    } else {
        ex->base.stats.failed++;
        if (WIFSIGNALED(status))
            snprintf(ex->base.stats.last_failure, sizeof ex->base.stats.last_failure,
                     "worker %s (pid %d) killed by signal %d", r->pub.worker_id, (int)r->pub.pid,
                     WTERMSIG(status));
        else
            snprintf(ex->base.stats.last_failure, sizeof ex->base.stats.last_failure,
                     "worker %s (pid %d) exited with status %d", r->pub.worker_id, (int)r->pub.pid,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    ex->exited_since++;
    memmove(&ex->w[i], &ex->w[i + 1], (ex->num - i - 1) * sizeof *ex->w);
    ex->num--;
}

/* Needs ex->base.mu. */
static void reap_locked(local_t *ex) SL_REQUIRES(ex->base.mu)
{
    for (uint32_t i = 0; i < ex->num;) {
        int status = 0;
        pid_t p = waitpid(ex->w[i].pub.pid, &status, WNOHANG);
        if (p == ex->w[i].pub.pid) {
            forget(ex, i, status);
        } else if (p < 0 && errno == ECHILD) {
            /* Someone else reaped it (a SIGCHLD handler set to SIG_IGN): gone. */
            forget(ex, i, 0);
        } else {
            i++;
        }
    }
}

static void local_destroy(sl_master_executor_t *base)
{
    local_t *ex = (local_t *)base;
    if (!ex) return;
    if (ex->w) {
        sl_mutex_lock(&ex->base.mu);
        for (uint32_t i = 0; i < ex->num; i++) {
            if (!ex->w[i].pub.stopping) ex->base.stats.stopped++;
            ex->w[i].pub.stopping = true;
            kill(ex->w[i].pub.pid, SIGTERM);
        }
        uint64_t deadline = sl_clock_ms() + ex->stop_grace_ms;
        while (ex->num > 0 && sl_clock_ms() < deadline) {
            reap_locked(ex);
            if (ex->num) usleep(10 * 1000);
        }
        for (uint32_t i = 0; i < ex->num; i++) {
            kill(ex->w[i].pub.pid, SIGKILL);
            int status;
            waitpid(ex->w[i].pub.pid, &status, 0);
        }
        ex->num = 0;
        sl_mutex_unlock(&ex->base.mu);
    }
    const sl_allocator_t *a = ex->alloc;
    sl_strfree(a, ex->binary);
    sl_strfree(a, ex->master);
    sl_strfree(a, ex->log_dir);
    sl_strfree(a, ex->listen_host);
    if (ex->extra) {
        for (uint32_t i = 0; i < ex->num_extra; i++)
            sl_strfree(a, ex->extra[i]);
        sl_free(a, ex->extra, (ex->num_extra + 1) * sizeof *ex->extra);
    }
    if (ex->w) sl_free(a, ex->w, ex->max_workers * sizeof *ex->w);
    if (ex->bo) sl_free(a, ex->bo, ex->cap_bo * sizeof *ex->bo);
    sl_mutex_destroy(&ex->base.mu);
    sl_free(a, ex, sizeof *ex);
}

/* Spawn one worker of job_id. Needs ex->base.mu and a free slot. */
static sl_err_t spawn_one(local_t *ex, const char *job_id, sl_error_t *err) SL_REQUIRES(ex->base.mu)
{
    wrec_t *r = &ex->w[ex->num];
    memset(r, 0, sizeof *r);
    uint32_t seq = ++ex->next_seq;
    /* The pid makes ids unique across master restarts: workers of an earlier
     * master may still be running and registered. */
    snprintf(r->pub.worker_id, sizeof r->pub.worker_id, "%.200s-w%u.%d", job_id, seq,
             (int)getpid());
    snprintf(r->pub.job_id, sizeof r->pub.job_id, "%s", job_id);
    char listen[300], threads[16];
    snprintf(listen, sizeof listen, "%s:0", ex->listen_host);
    snprintf(threads, sizeof threads, "%u", ex->worker_threads);

    const char *argv[16 + 64];
    uint32_t n = 0;
    argv[n++] = ex->binary;
    argv[n++] = "worker";
    argv[n++] = "--master";
    argv[n++] = ex->master;
    argv[n++] = "--job-id";
    argv[n++] = job_id;
    argv[n++] = "--worker-id";
    argv[n++] = r->pub.worker_id;
    argv[n++] = "--listen";
    argv[n++] = listen;
    if (ex->worker_threads) {
        argv[n++] = "--threads";
        argv[n++] = threads;
    }
    for (uint32_t i = 0; i < ex->num_extra && n < sizeof argv / sizeof argv[0] - 1; i++)
        argv[n++] = ex->extra[i];
    argv[n] = NULL;

    int log_fd = -1;
    if (ex->log_dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.log", ex->log_dir, r->pub.worker_id);
        log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd < 0) {
            ex->base.stats.spawn_errors++;
            backoff_failed(ex, job_id);
            return sl_error_set(err, SL_ERR_IO, "executor: worker %s: open %s: %s",
                                r->pub.worker_id, path, strerror(errno));
        }
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (log_fd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
        posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    } else {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    }
    /* The master blocks SIGINT/SIGTERM in its threads; a worker must start
     * with the defaults, and in its own process group so a terminal's ^C
     * reaches the master only (which then stops its workers in order). */
    sigset_t none, defs;
    sigemptyset(&none);
    sigemptyset(&defs);
    sigaddset(&defs, SIGINT);
    sigaddset(&defs, SIGTERM);
    sigaddset(&defs, SIGPIPE);
    sigaddset(&defs, SIGCHLD);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &defs);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    pid_t pid;
    int rc = posix_spawn(&pid, ex->binary, &fa, &at, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (log_fd >= 0) close(log_fd);
    if (rc != 0) {
        ex->base.stats.spawn_errors++;
        backoff_failed(ex, job_id);
        return sl_error_set(err, SL_ERR_IO, "executor: worker %s: spawn %s: %s", r->pub.worker_id,
                            ex->binary, strerror(rc));
    }
    r->pub.pid = pid;
    r->pub.started_ms = sl_clock_ms();
    ex->num++;
    ex->base.stats.started++;
    return SL_OK;
}

static sl_err_t local_scale(sl_master_executor_t *base, const char *job_id, uint32_t workers,
                            uint32_t *started, uint32_t *stopped, sl_error_t *err)
{
    local_t *ex = (local_t *)base;
    uint32_t up = 0, down = 0;
    sl_err_t rc = SL_OK;
    /* The id names log files: one that could leave log_dir ("../x", "a/b")
     * is refused here too, whatever let it into the master (an older
     * journal). */
    char why[160];
    if (!job_id || !sl_pipeline_job_id_ok(job_id, strlen(job_id), why, sizeof why) ||
        strlen(job_id) >= sizeof ex->w[0].pub.job_id) {
        rc = sl_error_set(err, SL_ERR_INVALID, "executor: job id '%.100s': %s",
                          job_id ? job_id : "", job_id ? why : "none");
        goto out;
    }
    sl_mutex_lock(&ex->base.mu);
    reap_locked(ex);
    uint32_t running = 0;
    for (uint32_t i = 0; i < ex->num; i++)
        if (!ex->w[i].pub.stopping && strcmp(ex->w[i].pub.job_id, job_id) == 0) running++;
    const backoff_t *bo = backoff_find(ex, job_id);
    for (uint32_t i = 0; bo != NULL && i < ex->num; i++) /* a worker that lasted: healthy again */
        if (!ex->w[i].pub.stopping && strcmp(ex->w[i].pub.job_id, job_id) == 0 &&
            sl_clock_ms() - ex->w[i].pub.started_ms >= ex->healthy_ms) {
            backoff_reset(ex, job_id);
            bo = NULL;
        }
    bool wait = bo != NULL && sl_clock_ms() < bo->not_before;
    while (!wait && running + up < workers) {
        if (ex->num >= ex->max_workers) {
            rc = sl_error_set(err, SL_ERR_TOO_LARGE,
                              "executor: job %s wants %u workers, the executor runs at most %u "
                              "over every job",
                              job_id, workers, ex->max_workers);
            break;
        }
        if ((rc = spawn_one(ex, job_id, err)) != SL_OK) break;
        up++;
        /* one spawn at a time while the job has failures in a row */
        bo = backoff_find(ex, job_id);
        wait = bo != NULL && bo->failures > 0;
    }
    /* Newest first: the oldest workers have warm caches and live leases. */
    for (uint32_t i = ex->num; i-- > 0 && running - down > workers;) {
        wrec_t *r = &ex->w[i];
        if (r->pub.stopping || strcmp(r->pub.job_id, job_id) != 0) continue;
        r->pub.stopping = true;
        kill(r->pub.pid, SIGTERM);
        ex->base.stats.stopped++;
        down++;
    }
    sl_mutex_unlock(&ex->base.mu);
out:
    if (started) *started = up;
    if (stopped) *stopped = down;
    return rc;
}

static sl_err_t local_apply(sl_master_executor_t *base, const sl_master_executor_target_t *targets,
                            uint32_t n, uint32_t *started, uint32_t *stopped, sl_error_t *err)
{
    local_t *ex = (local_t *)base;
    uint32_t up = 0, down = 0;
    sl_err_t first = SL_OK;
    for (uint32_t t = 0; t < n; t++) {
        uint32_t u = 0, d = 0;
        sl_error_t e = {0};
        sl_err_t rc = local_scale(base, targets[t].job_id, targets[t].workers, &u, &d, &e);
        up += u;
        down += d;
        if (rc != SL_OK && first == SL_OK) {
            first = rc;
            if (err) *err = e;
        }
    }
    /* Workers of jobs no longer listed: stop them all. */
    sl_mutex_lock(&ex->base.mu);
    for (uint32_t i = 0; i < ex->num; i++) {
        wrec_t *r = &ex->w[i];
        if (r->pub.stopping) continue;
        bool listed = false;
        for (uint32_t t = 0; t < n && !listed; t++)
            listed = targets[t].job_id && strcmp(targets[t].job_id, r->pub.job_id) == 0;
        if (listed) continue;
        r->pub.stopping = true;
        kill(r->pub.pid, SIGTERM);
        ex->base.stats.stopped++;
        down++;
    }
    sl_mutex_unlock(&ex->base.mu);
    if (started) *started = up;
    if (stopped) *stopped = down;
    return first;
}

static uint32_t local_reap(sl_master_executor_t *base)
{
    local_t *ex = (local_t *)base;
    sl_mutex_lock(&ex->base.mu);
    reap_locked(ex);
    uint32_t n = ex->exited_since;
    ex->exited_since = 0;
    sl_mutex_unlock(&ex->base.mu);
    return n;
}

static uint32_t local_count(sl_master_executor_t *base, const char *job_id)
{
    local_t *ex = (local_t *)base;
    sl_mutex_lock(&ex->base.mu);
    reap_locked(ex);
    uint32_t n = 0;
    for (uint32_t i = 0; i < ex->num; i++)
        if (!ex->w[i].pub.stopping && (!job_id || strcmp(ex->w[i].pub.job_id, job_id) == 0)) n++;
    sl_mutex_unlock(&ex->base.mu);
    return n;
}

static uint32_t local_list(sl_master_executor_t *base, const char *job_id,
                           sl_master_executor_worker_t *out, uint32_t cap)
{
    local_t *ex = (local_t *)base;
    sl_mutex_lock(&ex->base.mu);
    reap_locked(ex);
    uint32_t n = 0;
    for (uint32_t i = 0; i < ex->num; i++) {
        if (job_id && strcmp(ex->w[i].pub.job_id, job_id) != 0) continue;
        if (n < cap) out[n] = ex->w[i].pub;
        n++;
    }
    sl_mutex_unlock(&ex->base.mu);
    return n;
}

/* The figures of now: exits reaped, and the longest back-off still to
 * wait. Under base->mu, which the analysis names through the local_t
 * (base is its first member). */
static void local_refresh(sl_master_executor_t *base, uint64_t now)
    SL_REQUIRES(((local_t *)base)->base.mu)
{
    reap_locked((local_t *)base);
    const local_t *ex = (const local_t *)base;
    base->stats.backoff_ms = 0;
    for (uint32_t i = 0; i < ex->nbo; i++)
        if (ex->bo[i].not_before > now && ex->bo[i].not_before - now > base->stats.backoff_ms)
            base->stats.backoff_ms = (uint32_t)(ex->bo[i].not_before - now);
}

static const sl_master_executor_ops_t local_ops = {
    .kind = "local",
    .scale = local_scale,
    .apply = local_apply,
    .reap = local_reap,
    .count = local_count,
    .list = local_list,
    .refresh = local_refresh,
    .destroy = local_destroy,
};

/* The snapshot of a background compaction taken by fork(), as redis
 * rewrites its AOF: the copy of the state is the child's copy-on-write
 * address space, made under the caller's lock at the cost of copying page
 * tables (a few ms for a 1 M-split state), where copying the state's
 * arrays cost 4x the pack and building plus packing the snapshot under the
 * lock cost 0.1-0.4 s (docs/BENCHMARKS.md, "Disk work outside the
 * master's lock"). The child encodes the snapshot and writes it to a pipe
 * and exits; the journal's compaction thread reads it (encode below),
 * then writes and renames it as before (journal_compact.c).
 *
 * Pipe layout (one process to its parent, never stored): u64 LE length,
 * then that many bytes of packed Snapshot; or u64 UINT64_MAX then the
 * child's error message (to the end of the pipe). libfiu point
 * sluice/journal/snapshot_process makes the child fail (the point's state
 * is the parent's, copied by fork). */
#include <errno.h>
#include <fcntl.h>
#include <fiu-local.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fileio.h"
#include "common/mem.h"
#include "dpp/master/journal/state_store.h"

typedef struct forked {
    const sl_allocator_t *a;
    pid_t pid; /* -1 once reaped */
    int fd;    /* the pipe's read end; -1 once closed */
} forked;

#define PIPE_NAME "the snapshot process's pipe"

/* The child: everything it needs is in its copy of the state. Its pipe
 * becomes descriptor 3 and every other one is closed first, so that a
 * connection the parent closes meanwhile is closed for its peer too.
 * Never returns. */
static void child(const sl_master_state_t *m, int fd)
{
    if (fd != 3 && dup2(fd, 3) != 3) _exit(1);
    fd = 3;
    if (close_range(4, ~0u, 0) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (long k = 4; k < (max > 0 && max < 65536 ? max : 65536); k++)
            close((int)k);
    }
    uint8_t head[8];
    uint8_t *buf = NULL;
    size_t len = 0;
    sl_error_t err = {0};
    sl_err_t rc = fiu_fail("sluice/journal/snapshot_process")
                      ? sl_error_set(&err, SL_ERR_NOMEM, "injected failure (libfiu)")
                      : sl_master_state_snapshot_encode(m, &buf, &len, &err);
    if (rc != SL_OK) {
        sl_le_put_u64(head, UINT64_MAX);
        if (sl_io_write_all(fd, head, sizeof head, PIPE_NAME, NULL) == SL_OK)
            (void)sl_io_write_all(fd, err.msg, strlen(err.msg), PIPE_NAME, NULL);
        _exit(1);
    }
    sl_le_put_u64(head, len);
    bool ok = sl_io_write_all(fd, head, sizeof head, PIPE_NAME, NULL) == SL_OK &&
              sl_io_write_all(fd, buf, len, PIPE_NAME, NULL) == SL_OK;
    _exit(ok ? 0 : 1);
}

/* Read n bytes; *got says how many came before the end of the pipe. */
static sl_err_t read_full(int fd, void *p, size_t n, size_t *got, sl_error_t *err)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = read(fd, (uint8_t *)p + *got, n - *got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return sl_error_set(err, SL_ERR_IO, "read %s: %s", PIPE_NAME, strerror(errno));
        if (r == 0) break;
        *got += (size_t)r;
    }
    return SL_OK;
}

/* Reap the child; SL_ERR_IO unless it exited 0. */
static sl_err_t reap(forked *f, sl_error_t *err)
{
    int status = 0;
    pid_t r;
    while ((r = waitpid(f->pid, &status, 0)) < 0 && errno == EINTR) {
    }
    f->pid = -1;
    if (r < 0)
        return sl_error_set(err, SL_ERR_IO, "snapshot process: waitpid: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return SL_OK;
    return WIFSIGNALED(status)
               ? sl_error_set(err, SL_ERR_IO, "snapshot process killed by signal %d",
                              WTERMSIG(status))
               : sl_error_set(err, SL_ERR_IO, "snapshot process exited with %d",
                              WEXITSTATUS(status));
}

/* The compaction thread's half (sl_master_journal_snapshot_src_t.encode). */
static sl_err_t forked_encode(void *ctx, uint8_t **buf, size_t *len, sl_error_t *err)
{
    forked *f = ctx;
    *buf = NULL;
    *len = 0;
    uint8_t head[8];
    size_t got;
    SL_FORWARD_IF_ERROR(read_full(f->fd, head, sizeof head, &got, err));
    if (got < sizeof head) {
        sl_err_t rc = reap(f, err);
        return rc != SL_OK ? rc : sl_error_set(err, SL_ERR_IO, "snapshot process: no snapshot");
    }
    uint64_t n = sl_le_get_u64(head);
    if (n == UINT64_MAX) {
        char msg[SL_ERROR_MSG_MAX / 2] = "";
        (void)read_full(f->fd, msg, sizeof msg - 1, &got, NULL);
        msg[got] = '\0';
        (void)reap(f, NULL);
        return sl_error_set(err, SL_ERR_NOMEM, "snapshot process: %s", msg);
    }
    uint8_t *p = n <= SIZE_MAX ? sl_alloc(f->a, (size_t)n) : NULL;
    if (p == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "snapshot of %llu bytes", (unsigned long long)n);
    sl_err_t rc = read_full(f->fd, p, (size_t)n, &got, err);
    if (rc == SL_OK && got < n)
        rc = sl_error_set(err, SL_ERR_IO, "snapshot process: %zu of %llu bytes", got,
                          (unsigned long long)n);
    if (rc == SL_OK) rc = reap(f, err);
    if (rc != SL_OK) {
        sl_free(f->a, p, (size_t)n);
        return rc;
    }
    *buf = p;
    *len = (size_t)n;
    return SL_OK;
}

static void forked_release(void *ctx)
{
    forked *f = ctx;
    if (f->fd >= 0) close(f->fd);
    if (f->pid > 0) {
        kill(f->pid, SIGKILL); /* not needed any more (or never read) */
        (void)reap(f, NULL);
    }
    sl_free(f->a, f, sizeof *f);
}

sl_err_t sl_master_store_fork_compact(const sl_master_state_t *m, sl_master_journal_t *j,
                                      const sl_allocator_t *a, sl_error_t *err)
{
    forked *f = sl_calloc(a, 1, sizeof *f);
    if (f == NULL) return sl_error_set(err, SL_ERR_NOMEM, "snapshot process");
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        sl_free(a, f, sizeof *f);
        /* as out of memory: the journal still holds everything, the next
         * sync tries again */
        return sl_error_set(err, SL_ERR_NOMEM, "snapshot process: pipe: %s", strerror(errno));
    }
    pid_t pid = fork();
    if (pid == 0) child(m, p[1]);
    int e = errno;
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        sl_free(a, f, sizeof *f);
        return sl_error_set(err, SL_ERR_NOMEM, "snapshot process: fork: %s", strerror(e));
    }
    *f = (forked){.a = a, .pid = pid, .fd = p[0]};
    sl_master_journal_snapshot_src_t src = {forked_encode, forked_release, f};
    return sl_master_journal_compact_start(j, &src, err);
}

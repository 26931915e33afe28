/* The master process (master.h) over real sockets when its journal's disk
 * fails (libfiu point sluice/journal/fdatasync, journal.c): a COMMIT whose
 * record cannot be made durable is never answered COMMITTED (the client
 * gets an ERROR and its connection closes), the master refuses every
 * change from then on and is not ready (/readyz) while the disk fails;
 * with the disk well again the running master recovers (recover.c: the
 * state directory replayed again, with backoff) as a restarted one does,
 * replaying what reached the file: the client's retry of its unanswered
 * commit is COMMITTED once, and rows it never got an answer for are not
 * lost nor doubled. */
#define FIU_ENABLE 1 /* libfiu's real calls, not fiu.h's no-op stand-ins */
#include <criterion/criterion.h>
#include <errno.h>
#include <fiu-control.h>
#include <fiu.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define _GNU_SOURCE 1 /* unshare */
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/mem.h"
#include "dpp/master/process/admin.h"
#include "rpc/frame.h"
#include "testutil.h"
#include "warehouse/import.h"

typedef struct env {
    char root[64], table[128], state[128];
    sl_master_t *m;
    sl_master_opts_t o;
} env;

static void env_start(env *e)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_master_start(&e->o, &e->m, &err), SL_OK, "%s", err.msg);
}

/* A tmpfs of size bytes on dir, in a mount namespace of this test's
 * process only (its mounts private, so nothing reaches the machine's):
 * skips the test where the process may not make one. */
static void tmpfs_on(const char *dir, size_t size)
{
    if (unshare(CLONE_NEWNS) != 0) cr_skip_test("no mount namespace: %s", strerror(errno));
    cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0, "%s", strerror(errno));
    char opts[64];
    snprintf(opts, sizeof opts, "size=%zu", size);
    if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
        cr_skip_test("cannot mount a tmpfs: %s", strerror(errno));
}

static void env_init_on(env *e, size_t tmpfs_bytes)
{
    snprintf(e->root, sizeof e->root, "/tmp/sluice-mfault-XXXXXX");
    cr_assert_not_null(mkdtemp(e->root));
    snprintf(e->table, sizeof e->table, "%s/table", e->root);
    snprintf(e->state, sizeof e->state, "%s/state", e->root);
    cr_assert_eq(mkdir(e->state, 0755), 0);
    if (tmpfs_bytes > 0) tmpfs_on(e->state, tmpfs_bytes);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", 1000, 7, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = 1;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.no_sync = true;
    go.writer.stripe_rows = 500;
    cr_assert_eq(sl_wh_gen_table(e->table, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
    e->o = (sl_master_opts_t){.state_dir = e->state, .lease_timeout_ms = 60000};
    env_start(e);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"spec\": {\"id\": \"j\", \"source\": {\"table\": \"%s\"}, \"batch\": "
             "{\"size\": 100}}}",
             e->table);
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    cr_assert_not_null(body, "%s", je.text);
    char *id = NULL;
    cr_assert_eq(sl_master_admin_job_submit(e->m, body, &id, &err), SL_OK, "%s", err.msg);
    sl_strfree(sl_master_allocator(e->m), id);
    json_decref(body);
}

static void env_init(env *e)
{
    env_init_on(e, 0);
}

static int dial(env *e)
{
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(sl_master_address(e->m), 2000, &fd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_set_recv_timeout(fd, 5000, &err), SL_OK);
    return fd;
}

/* Send one frame; the answer (ATTACHED pushes skipped) in *f. */
static void call(int fd, sl_rpc_type_t type, const ProtobufCMessage *msg, sl_rpc_frame_t *f)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, type, msg, NULL, 0, &err), SL_OK, "%s", err.msg);
    for (;;) {
        cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, f, &err), SL_OK, "%s", err.msg);
        if (f->type != SL_RPC_ATTACHED || type == SL_RPC_ATTACH) return;
        sl_rpc_frame_free(f);
    }
}

static int worker(env *e, Sluice__Control__SplitRef *ref)
{
    int fd = dial(e);
    Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
    r.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    r.worker_id = "w1";
    r.serve_address = "127.0.0.1:1";
    r.job_id = "j";
    sl_rpc_frame_t f;
    call(fd, SL_RPC_REGISTER, &r.base, &f);
    cr_assert_eq(f.type, SL_RPC_REGISTERED);
    sl_rpc_frame_free(&f);
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    q.worker_id = "w1";
    q.job_id = "j";
    call(fd, SL_RPC_LEASE_REQUEST, &q.base, &f);
    cr_assert_eq(f.type, SL_RPC_LEASE);
    const Sluice__Control__Lease *l = (const void *)f.msg;
    *ref = *l->ref;
    ref->job_id = "j";
    sl_rpc_frame_free(&f);
    return fd;
}

static int client(env *e)
{
    int fd = dial(e);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = "c1";
    a.world_size = 1;
    sl_rpc_frame_t f;
    call(fd, SL_RPC_ATTACH, &a.base, &f);
    cr_assert_eq(f.type, SL_RPC_ATTACHED);
    sl_rpc_frame_free(&f);
    return fd;
}

/* COMMIT rows [from, to): the reply's result, or -1 for an ERROR (its
 * message in why). */
static int commit(int fd, uint64_t nonce, const Sluice__Control__SplitRef *ref, uint64_t from,
                  uint64_t to, char *why, size_t cap)
{
    Sluice__Control__RowRange rows = SLUICE__CONTROL__ROW_RANGE__INIT;
    rows.from_row = from;
    rows.to_row = to;
    Sluice__Control__Commit c = SLUICE__CONTROL__COMMIT__INIT;
    c.client_id = "c1";
    c.nonce = nonce;
    c.ref = (Sluice__Control__SplitRef *)ref;
    c.rows = &rows;
    c.num_samples = (uint32_t)(to - from);
    sl_rpc_frame_t f;
    call(fd, SL_RPC_COMMIT, &c.base, &f);
    int res = -1;
    if (f.type == SL_RPC_COMMIT_REPLY)
        res = ((const Sluice__Control__CommitReply *)f.msg)->result;
    else if (f.type == SL_RPC_ERROR)
        snprintf(why, cap, "%s", ((const Sluice__Dpp__Error *)f.msg)->message);
    else
        cr_assert_fail("COMMIT answered %s", sl_rpc_type_name(f.type));
    sl_rpc_frame_free(&f);
    return res;
}

Test(master_fault, a_commit_that_cannot_reach_the_disk_is_never_answered)
{
    cr_assert_eq(fiu_init(0), 0);
    env e;
    env_init(&e);
    Sluice__Control__SplitRef ref;
    int w = worker(&e, &ref);
    int c = client(&e);
    char why[512] = "";
    cr_assert_eq(commit(c, 1, &ref, 0, 100, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert(sl_master_ready(e.m));
    /* the disk fails under the next commit's sync */
    cr_assert_eq(fiu_enable("sluice/journal/fdatasync", 1, (void *)(intptr_t)EIO, 0), 0);
    cr_assert_eq(commit(c, 2, &ref, 100, 200, why, sizeof why), -1, "answered without a sync");
    cr_assert(strstr(why, "master state failed") != NULL, "%s", why);
    cr_assert(!sl_master_ready(e.m), "/readyz stays ready with a failed journal");
    /* while the disk fails, this run promises nothing */
    c = client(&e);
    cr_assert_eq(commit(c, 3, &ref, 200, 300, why, sizeof why), -1);
    cr_assert(!sl_master_ready(e.m));
    cr_assert_eq(fiu_disable("sluice/journal/fdatasync"), 0);
    /* a new run replays the journal: the commit whose answer was lost was
     * written before its fdatasync failed, so the client's retry (same
     * nonce) is COMMITTED and its rows are not committed twice */
    sl_master_stop(e.m);
    env_start(&e);
    cr_assert(sl_master_ready(e.m));
    c = client(&e);
    cr_assert_eq(commit(c, 2, &ref, 100, 200, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "%s", why);
    cr_assert_eq(commit(c, 4, &ref, 150, 250, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP, "%s", why);
    /* the commit refused by the failed run was never made: now it is */
    cr_assert_eq(commit(c, 3, &ref, 200, 300, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "%s", why);
    (void)w;
    sl_master_stop(e.m);
    tu_rm_tree(e.root);
}

/* An admin change (a job removed) whose record cannot be made durable:
 * the call fails with the disk's error (the wait is outside the master's
 * lock, the answer after it), the master is not ready; a new run has
 * what reached the file (the removal's record was written before its
 * fdatasync failed: the job is gone). */
Test(master_fault, an_admin_change_that_cannot_reach_the_disk_fails)
{
    cr_assert_eq(fiu_init(0), 0);
    env e;
    env_init(&e);
    sl_error_t err = {0};
    cr_assert_eq(fiu_enable("sluice/journal/fdatasync", 1, (void *)(intptr_t)EIO, 0), 0);
    cr_assert_eq(sl_master_job_remove(e.m, "j", &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "fdatasync") != NULL, "%s", err.msg);
    cr_assert(!sl_master_ready(e.m));
    cr_assert_eq(sl_master_job_remove(e.m, "j", &err), SL_ERR_IO);
    cr_assert(strstr(err.msg, "master state failed") != NULL, "%s", err.msg);
    cr_assert_eq(fiu_disable("sluice/journal/fdatasync"), 0);
    sl_master_stop(e.m);
    env_start(&e);
    cr_assert(sl_master_ready(e.m));
    cr_assert_eq(sl_master_job_remove(e.m, "j", &err), SL_ERR_NOT_FOUND, "%s", err.msg);
    sl_master_stop(e.m);
    tu_rm_tree(e.root);
}

/* Wait (at most 10 s, scaled) for the master to be ready again. */
static bool ready_within(sl_master_t *m)
{
    uint64_t deadline = sl_clock_ms() + (uint64_t)(tu_timeout(10) * 1000);
    while (!sl_master_ready(m)) {
        if (sl_clock_ms() > deadline) return false;
        usleep(10 * 1000);
    }
    return true;
}

/* The value of the metric line that starts with prefix, -1 without one. */
static double metric(sl_master_t *m, const char *prefix)
{
    char *text = sl_master_metrics_text(m);
    cr_assert_not_null(text);
    double v = -1;
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, strlen(prefix)) == 0) v = strtod(p + strlen(prefix), NULL);
    sl_strfree(sl_master_allocator(m), text);
    return v;
}

/* The running master recovers when the disk does: while fdatasync fails
 * it stays failed (its tries to open the directory again fail too, with
 * backoff, counted); once the fault is off it is ready within the bound,
 * and its state is exactly the durable one: the unanswered commit (its
 * record written before the failed fdatasync) answers its retry
 * COMMITTED, an overlapping one is refused, the one refused while failed
 * is committed now; and every row of both epochs is committed once. */
Test(master_fault, the_running_master_recovers_when_the_disk_does)
{
    cr_assert_eq(fiu_init(0), 0);
    env e;
    env_init(&e);
    Sluice__Control__SplitRef ref;
    int w = worker(&e, &ref);
    int c = client(&e);
    char why[512] = "";
    cr_assert_eq(commit(c, 1, &ref, 0, 100, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(fiu_enable("sluice/journal/fdatasync", 1, (void *)(intptr_t)EIO, 0), 0);
    cr_assert_eq(commit(c, 2, &ref, 100, 200, why, sizeof why), -1, "answered without a sync");
    c = client(&e);
    cr_assert_eq(commit(c, 3, &ref, 200, 300, why, sizeof why), -1);
    /* tries while the disk fails: at 100, 300, 700 ms after the failure */
    uint64_t deadline = sl_clock_ms() + (uint64_t)(tu_timeout(10) * 1000);
    while (metric(e.m, "sluice_master_state_recoveries_total{result=\"failed\"} ") < 2) {
        cr_assert(sl_clock_ms() < deadline, "no try to recover within the bound");
        usleep(20 * 1000);
    }
    cr_assert(!sl_master_ready(e.m), "ready while the disk fails");
    cr_assert_eq(metric(e.m, "sluice_master_state_recoveries_total{result=\"ok\"} "), 0);
    cr_assert_eq(fiu_disable("sluice/journal/fdatasync"), 0);
    cr_assert(ready_within(e.m), "not ready again once the disk is well");
    cr_assert_eq(metric(e.m, "sluice_master_state_recoveries_total{result=\"ok\"} "), 1);
    /* the connections of the failed run were closed: dial again */
    c = client(&e);
    cr_assert_eq(commit(c, 2, &ref, 100, 200, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "%s", why);
    cr_assert_eq(commit(c, 4, &ref, 150, 250, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP, "%s", why);
    cr_assert_eq(commit(c, 3, &ref, 200, 300, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "%s", why);
    json_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_admin_job_json(e.m, "j", &job, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(json_integer_value(json_object_get(job, "committed_rows")), 300);
    json_decref(job);
    (void)w;
    sl_master_stop(e.m);
    tu_rm_tree(e.root);
}

/* The journal's file system full for real (a 1 MiB tmpfs, filled by a
 * file beside the journal): the first commit whose record cannot be
 * written (ENOSPC) is not answered, the master is not ready and its tries
 * to recover fail while the disk is full; once the file is removed it
 * recovers, the unanswered commit's retry is COMMITTED, and rows [0, 300)
 * are committed exactly once (an overlap refused, 300 rows in all). */
Test(master_fault, a_full_file_system_then_space_again)
{
    env e;
    env_init_on(&e, 1u << 20);
    Sluice__Control__SplitRef ref;
    int w = worker(&e, &ref);
    int c = client(&e);
    char why[512] = "";
    cr_assert_eq(commit(c, 1, &ref, 0, 100, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    char filler[200];
    snprintf(filler, sizeof filler, "%s/filler", e.state);
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    static char block[4096];
    int k = 0;
    for (; k < 1024 && write(fd, block, sizeof block) == (ssize_t)sizeof block; k++) {
    }
    cr_assert_lt(k, 1024, "the tmpfs did not fill up");
    cr_assert_eq(errno, ENOSPC, "%s", strerror(errno));
    close(fd);
    /* commits of one row each until one's record finds no room (the
     * journal's last page had some) */
    uint64_t row = 100, nonce = 10;
    int res;
    while ((res = commit(c, nonce, &ref, row, row + 1, why, sizeof why)) ==
           SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED) {
        row++;
        nonce++;
        cr_assert_lt(row, 400, "commits go on on a full disk");
    }
    cr_assert_eq(res, -1);
    cr_assert(strstr(why, "master state failed") != NULL, "%s", why);
    cr_assert(!sl_master_ready(e.m));
    uint64_t deadline = sl_clock_ms() + (uint64_t)(tu_timeout(10) * 1000);
    while (metric(e.m, "sluice_master_state_recoveries_total{result=\"failed\"} ") < 1) {
        cr_assert(sl_clock_ms() < deadline, "no try to recover within the bound");
        usleep(20 * 1000);
    }
    cr_assert(!sl_master_ready(e.m), "ready on a full disk");
    cr_assert_eq(unlink(filler), 0);
    cr_assert(ready_within(e.m), "not ready again once there is space");
    /* the unanswered commit's retry, then the rest of rows [0, 300) */
    c = client(&e);
    cr_assert_eq(commit(c, nonce, &ref, row, row + 1, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "%s", why);
    cr_assert_eq(commit(c, nonce + 1, &ref, row + 1, 300, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "%s", why);
    cr_assert_eq(commit(c, nonce + 2, &ref, 0, 300, why, sizeof why),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP, "%s", why);
    json_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_admin_job_json(e.m, "j", &job, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(json_integer_value(json_object_get(job, "committed_rows")), 300);
    json_decref(job);
    (void)w;
    sl_master_stop(e.m);
    umount(e.state);
    tu_rm_tree(e.root);
}

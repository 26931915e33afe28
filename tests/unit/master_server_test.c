/* Tests of the master process (src/dpp/master.h) over real sockets: fake
 * workers and trainer clients speak proto/control.proto to it. Covers job
 * submission (and its refusals), register / lease / heartbeat / split read,
 * attach / commit (overlap, idempotent retry, across a restart), tokens,
 * lease expiry and revocation, garbage on the control socket, the JSON
 * views and metrics, scaling and removal. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpp/master.h"
#include "rpc/frame.h"
#include "testutil.h"
#include "warehouse/import.h"

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

typedef struct env {
    char root[64];
    char table[128], state[128];
    sl_master_t *m;
    sl_master_opts_t o;
} env;

static void env_init(env *e, uint64_t lease_ms)
{
    snprintf(e->root, sizeof e->root, "/tmp/sluice-mserver-XXXXXX");
    cr_assert_not_null(mkdtemp(e->root));
    snprintf(e->table, sizeof e->table, "%s/table", e->root);
    snprintf(e->state, sizeof e->state, "%s/state", e->root);
    cr_assert_eq(mkdir(e->state, 0755), 0);
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", 4000, 7, &spec, &err), SL_OK, "%s", err.msg);
    spec.files = 2;
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.no_sync = true;
    go.writer.stripe_rows = 500;
    cr_assert_eq(sl_wh_gen_table(e->table, &spec, &go, NULL, &err), SL_OK, "%s", err.msg);
    e->o = (sl_master_opts_t){.state_dir = e->state, .lease_timeout_ms = lease_ms,
                              .autoscale_every_ms = 50};
    cr_assert_eq(sl_master_start(&e->o, &e->m, &err), SL_OK, "%s", err.msg);
}

static void env_restart(env *e)
{
    sl_master_stop(e->m);
    sl_error_t err = {0};
    e->o.state_dir = e->state;
    cr_assert_eq(sl_master_start(&e->o, &e->m, &err), SL_OK, "%s", err.msg);
}

static void env_fini(env *e)
{
    sl_master_stop(e->m);
    nftw(e->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static sl_err_t submit(env *e, const char *extra, sl_error_t *err)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"spec\": {\"id\": \"j\", \"source\": {\"table\": \"%s\"}, \"batch\": "
             "{\"size\": 100}}%s}",
             e->table,
             extra);
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    cr_assert_not_null(body, "%s", je.text);
    char *id = NULL;
    sl_err_t rc = sl_master_job_submit(e->m, body, &id, err);
    if (rc == SL_OK) cr_assert_str_eq(id, "j");
    free(id);
    json_decref(body);
    return rc;
}

static int dial(env *e)
{
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(sl_master_address(e->m), 2000, &fd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_set_recv_timeout(fd, 5000, &err), SL_OK);
    return fd;
}

/* Send one frame and receive the answer, which must be of type want. */
static ProtobufCMessage *call(int fd, sl_rpc_type_t type, const ProtobufCMessage *msg,
                              sl_rpc_type_t want)
{
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, type, msg, NULL, 0, &err), SL_OK, "%s", err.msg);
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s: %s", sl_rpc_type_name(type),
                 err.msg);
    if (f.type == SL_RPC_ERROR && want != SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const void *)f.msg;
        cr_assert_fail("%s answered ERROR: %s", sl_rpc_type_name(type), e->message);
    }
    cr_assert_eq(f.type, want, "%s answered %s", sl_rpc_type_name(type),
                 sl_rpc_type_name(f.type));
    return f.msg;
}

static void done(ProtobufCMessage *msg)
{
    sl_rpc_frame_t f = {.msg = msg, .allocator = NULL};
    sl_rpc_frame_free(&f);
}

static int worker(env *e, const char *id)
{
    int fd = dial(e);
    Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
    r.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    r.worker_id = (char *)id;
    r.serve_address = "127.0.0.1:1";
    r.job_id = "j";
    Sluice__Control__Registered *ok = (void *)call(fd, SL_RPC_REGISTER, &r.base,
                                                   SL_RPC_REGISTERED);
    cr_assert_eq(ok->lease_timeout_ms, e->o.lease_timeout_ms);
    cr_assert_gt(ok->heartbeat_ms, 0);
    done(&ok->base);
    return fd;
}

static Sluice__Control__Lease *lease(int fd, const char *id)
{
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    q.worker_id = (char *)id;
    q.job_id = "j";
    return (void *)call(fd, SL_RPC_LEASE_REQUEST, &q.base, SL_RPC_LEASE);
}

static Sluice__Control__HeartbeatReply *heartbeat(int fd, const char *id,
                                                  Sluice__Control__SplitRef **refs, size_t n)
{
    Sluice__Control__Heartbeat h = SLUICE__CONTROL__HEARTBEAT__INIT;
    h.worker_id = (char *)id;
    h.n_leases = n;
    h.leases = refs;
    h.busy_fraction = 0.9;
    return (void *)call(fd, SL_RPC_HEARTBEAT, &h.base, SL_RPC_HEARTBEAT_REPLY);
}

static int client(env *e, const char *id, uint32_t *nworkers)
{
    int fd = dial(e);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = (char *)id;
    a.world_size = 1;
    Sluice__Control__Attached *at = (void *)call(fd, SL_RPC_ATTACH, &a.base, SL_RPC_ATTACHED);
    cr_assert_str_eq(at->sharding, "dynamic");
    cr_assert(!at->finished);
    if (nworkers != NULL) *nworkers = (uint32_t)at->n_workers;
    done(&at->base);
    return fd;
}

static int commit(int fd, const char *client_id, uint64_t nonce, const Sluice__Control__SplitRef *ref,
                  uint64_t from, uint64_t to)
{
    Sluice__Control__RowRange rows = SLUICE__CONTROL__ROW_RANGE__INIT;
    rows.from_row = from;
    rows.to_row = to;
    Sluice__Control__Commit c = SLUICE__CONTROL__COMMIT__INIT;
    c.client_id = (char *)client_id;
    c.nonce = nonce;
    c.ref = (Sluice__Control__SplitRef *)ref;
    c.rows = &rows;
    c.num_samples = (uint32_t)(to - from);
    Sluice__Control__CommitReply *r = (void *)call(fd, SL_RPC_COMMIT, &c.base, SL_RPC_COMMIT_REPLY);
    cr_assert_eq(r->nonce, nonce);
    int res = r->result;
    done(&r->base);
    return res;
}

static json_t *job_json(env *e)
{
    json_t *j = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_job_json(e->m, "j", &j, &err), SL_OK, "%s", err.msg);
    return j;
}

static json_int_t jint(json_t *o, const char *k)
{
    cr_assert(json_is_integer(json_object_get(o, k)), "key %s", k);
    return json_integer_value(json_object_get(o, k));
}

Test(master_server, submit_refusals)
{
    env e;
    env_init(&e, 1000);
    sl_error_t err = {0};
    json_t *b = json_loads("[1]", 0, NULL);
    cr_assert_eq(sl_master_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    json_decref(b);
    b = json_loads("{\"ranks\": 1}", 0, NULL);
    cr_assert_eq(sl_master_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "\"spec\"") != NULL, "%s", err.msg);
    json_decref(b);
    cr_assert_eq(submit(&e, ", \"colour\": 1", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "colour") != NULL, "%s", err.msg);
    cr_assert_eq(submit(&e, ", \"sharding\": \"round\"", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"ranks\": -1", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"min_workers\": 3, \"max_workers\": 2", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"resume_token\": \"!!!\"", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"resume_token\": \"AAAA\"", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "resume_token") != NULL, "%s", err.msg);
    b = json_pack("{s:{s:s, s:{s:s}}}", "spec", "id", "j", "source", "table", "/nonexistent/table");
    cr_assert_eq(sl_master_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "/nonexistent/table") != NULL, "%s", err.msg);
    json_decref(b);
    b = json_pack("{s:{s:s, s:{s:s}, s:{s:i}}}", "spec", "id", "j", "source", "table", e.table,
                  "batch", "size", -5);
    cr_assert_eq(sl_master_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    json_decref(b);
    json_t *jobs = sl_master_jobs_json(e.m);
    cr_assert_eq(json_array_size(json_object_get(jobs, "jobs")), 0);
    json_decref(jobs);
    cr_assert_eq(submit(&e, ", \"min_workers\": 1, \"max_workers\": 3, \"workers\": 2", &err),
                 SL_OK, "%s", err.msg);
    cr_assert_eq(submit(&e, "", &err), SL_ERR_AGAIN);
    json_t *j = job_json(&e);
    cr_assert_eq(jint(j, "num_splits"), 8);
    cr_assert_eq(jint(j, "total_rows"), 4000);
    cr_assert_eq(jint(j, "desired_workers"), 2);
    json_decref(j);
    uint32_t set;
    cr_assert_eq(sl_master_job_scale(e.m, "j", 9, &set, &err), SL_OK);
    cr_assert_eq(set, 3);
    cr_assert_eq(sl_master_job_scale(e.m, "x", 9, &set, &err), SL_ERR_NOT_FOUND);
    sl_master_desired_t d[4];
    cr_assert_eq(sl_master_desired(e.m, d, 4), 1);
    cr_assert_str_eq(d[0].job_id, "j");
    cr_assert_eq(d[0].workers, 3);
    cr_assert_eq(sl_master_job_remove(e.m, "x", &err), SL_ERR_NOT_FOUND);
    cr_assert_eq(sl_master_job_remove(e.m, "j", &err), SL_OK);
    cr_assert_eq(sl_master_desired(e.m, d, 4), 0);
    env_fini(&e);
}

Test(master_server, lease_commit_split_read_token_restart)
{
    env e;
    env_init(&e, 2000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    int w = worker(&e, "w1");
    Sluice__Control__Lease *l = lease(w, "w1");
    cr_assert_str_eq(l->ref->job_id, "j");
    cr_assert_eq(l->ref->epoch, 0);
    cr_assert_eq(l->num_rows, 500);
    cr_assert_eq(l->n_todo, 1);
    cr_assert_eq(l->todo[0]->to_row, 500);
    cr_assert(strstr(l->job_spec_json, "\"size\":100") != NULL, "%s", l->job_spec_json);
    cr_assert_eq(l->rank_plus_one, 0);
    uint32_t nworkers;
    int c1 = client(&e, "c1", &nworkers);
    cr_assert_eq(nworkers, 1);
    int c2 = client(&e, "c2", NULL);
    Sluice__Control__SplitRef ref = *l->ref;
    ref.job_id = "j"; /* l (and its strings) is freed before ref's last use */
    cr_assert_eq(commit(c1, "c1", 1, &ref, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(commit(c2, "c2", 1, &ref, 50, 150), SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP);
    cr_assert_eq(commit(c1, "c1", 1, &ref, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(commit(c2, "c2", 2, &ref, 100, 200),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    Sluice__Control__SplitRef wrong = ref;
    wrong.job_id = "nope";
    cr_assert_eq(commit(c2, "c2", 3, &wrong, 0, 1), SLUICE__CONTROL__COMMIT_REPLY__RESULT__UNKNOWN);
    wrong = ref;
    wrong.epoch = 5;
    cr_assert_eq(commit(c2, "c2", 4, &wrong, 300, 301),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE);
    /* heartbeat: the live lease stays, an unknown one is revoked */
    Sluice__Control__SplitRef bogus = ref;
    bogus.generation += 1000;
    Sluice__Control__SplitRef *refs[2] = {&ref, &bogus};
    Sluice__Control__HeartbeatReply *hr = heartbeat(w, "w1", refs, 2);
    cr_assert_eq(hr->n_revoked, 1);
    cr_assert_eq(hr->revoked[0]->generation, bogus.generation);
    cr_assert(!hr->stop);
    done(&hr->base);
    /* split read: [200,500) produced nothing: the split is done */
    Sluice__Control__RowRange er = SLUICE__CONTROL__ROW_RANGE__INIT, *erp = &er;
    er.from_row = 200;
    er.to_row = 500;
    Sluice__Control__SplitRead sr = SLUICE__CONTROL__SPLIT_READ__INIT;
    sr.ref = &ref;
    sr.n_empty = 1;
    sr.empty = &erp;
    Sluice__Control__SplitReadReply *srr = (void *)call(w, SL_RPC_SPLIT_READ, &sr.base,
                                                        SL_RPC_SPLIT_READ_REPLY);
    cr_assert_eq(srr->state, SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE);
    done(&srr->base);
    srr = (void *)call(w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_SPLIT_READ_REPLY);
    cr_assert_eq(srr->state, SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__STALE);
    done(&srr->base);
    json_t *j = job_json(&e);
    cr_assert_eq(jint(j, "done"), 1);
    cr_assert_eq(jint(j, "committed_rows"), 500);
    cr_assert_eq(jint(j, "workers"), 1);
    cr_assert_eq(jint(j, "clients"), 2);
    json_decref(j);
    /* a token excluding what c2 has not handed out yet */
    Sluice__Control__RowRange und = SLUICE__CONTROL__ROW_RANGE__INIT, *undp = &und;
    und.from_row = 100;
    und.to_row = 200;
    Sluice__Control__SplitRef *urefs[1] = {&ref};
    Sluice__Control__TokenRequest tq = SLUICE__CONTROL__TOKEN_REQUEST__INIT;
    tq.job_id = "j";
    tq.client_id = "c2";
    tq.n_undelivered_refs = tq.n_undelivered_rows = 1;
    tq.undelivered_refs = urefs;
    tq.undelivered_rows = &undp;
    Sluice__Control__Token *tok = (void *)call(c2, SL_RPC_TOKEN_REQUEST, &tq.base, SL_RPC_TOKEN);
    cr_assert_gt(tok->token.len, 16);
    cr_assert_eq(memcmp(tok->token.data, "SLRT", 4), 0);
    done(&tok->base);
    ProtobufCMessage *lm = &l->base;
    done(lm);
    close(w);
    close(c1);
    close(c2);

    /* kill and restart on the same state: commits and their answers survive */
    env_restart(&e);
    j = job_json(&e);
    cr_assert_eq(jint(j, "done"), 1);
    cr_assert_eq(jint(j, "committed_rows"), 500);
    json_decref(j);
    c1 = client(&e, "c1", NULL);
    cr_assert_eq(commit(c1, "c1", 1, &ref, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(commit(c1, "c1", 9, &ref, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP);
    close(c1);
    env_fini(&e);
}

Test(master_server, expiry_revokes_and_releases)
{
    env e;
    env_init(&e, 200);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    int w1 = worker(&e, "w1");
    Sluice__Control__Lease *l = lease(w1, "w1");
    Sluice__Control__SplitRef ref = *l->ref;
    ref.job_id = "j"; /* l (and its strings) is freed before ref's last use */
    int c = client(&e, "c", NULL);
    cr_assert_eq(commit(c, "c", 1, &ref, 0, 10), SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    /* w1 goes silent; the lease expires and w2 gets the rest of the split */
    usleep(450 * 1000);
    int w2 = worker(&e, "w2");
    uint32_t seen = 0;
    Sluice__Control__Lease *l2 = NULL;
    for (int k = 0; k < 8; k++) {
        l2 = lease(w2, "w2");
        if (l2->ref->split == ref.split) break;
        done(&l2->base);
        l2 = NULL;
        seen++;
    }
    cr_assert_not_null(l2, "split %u never leased again", ref.split);
    cr_assert_gt(l2->ref->generation, ref.generation);
    cr_assert_eq(l2->n_todo, 1);
    cr_assert_eq(l2->todo[0]->from_row, 10);
    /* w1 comes back: its lease is revoked */
    Sluice__Control__SplitRef *refs[1] = {&ref};
    Sluice__Control__HeartbeatReply *hr = heartbeat(w1, "w1", refs, 1);
    cr_assert_eq(hr->n_revoked, 1);
    done(&hr->base);
    json_t *st = sl_master_status_json(e.m);
    cr_assert_geq(json_integer_value(json_object_get(st, "lease_expiries")), 1);
    cr_assert(json_is_true(json_object_get(st, "ready")));
    json_decref(st);
    /* the job is removed: workers are told to stop */
    cr_assert_eq(sl_master_job_remove(e.m, "j", &err), SL_OK);
    hr = heartbeat(w2, "w2", NULL, 0);
    cr_assert(hr->stop);
    done(&hr->base);
    done(&l->base);
    done(&l2->base);
    close(w1);
    close(w2);
    close(c);
    env_fini(&e);
}

Test(master_server, garbage_and_wrong_frames)
{
    env e;
    env_init(&e, 1000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    uint64_t s = tu_seed("master_server::garbage");
    for (int round = 0; round < 20; round++) {
        int fd = dial(&e);
        cr_assert_eq(sl_rpc_set_recv_timeout(fd, 300, &err), SL_OK);
        uint8_t junk[200];
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)tu_next(&s);
        if (round % 2 == 0) memcpy(junk, "SLDP", 4);
        ssize_t n = write(fd, junk, 1 + tu_below(&s, sizeof junk));
        cr_assert_gt(n, 0);
        sl_rpc_frame_t f;
        sl_err_t rc = sl_rpc_recv(fd, NULL, NULL, &f, &err);
        /* an ERROR frame, or the master closed the connection, or (a
         * partial header) it waits: the receive times out */
        if (rc == SL_OK) {
            cr_assert_eq(f.type, SL_RPC_ERROR);
            sl_rpc_frame_free(&f);
        }
        close(fd);
    }
    /* a commit before attach, a lease request from a client */
    int fd = dial(&e);
    Sluice__Control__Commit cm = SLUICE__CONTROL__COMMIT__INIT;
    ProtobufCMessage *em = call(fd, SL_RPC_COMMIT, &cm.base, SL_RPC_ERROR);
    done(em);
    close(fd);
    int c = client(&e, "c", NULL);
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    em = call(c, SL_RPC_LEASE_REQUEST, &q.base, SL_RPC_ERROR);
    done(em);
    close(c);
    /* still serving */
    int w = worker(&e, "w");
    Sluice__Control__Lease *l = lease(w, "w");
    done(&l->base);
    close(w);
    char *metrics = sl_master_metrics_text(e.m);
    cr_assert(strstr(metrics, "sluice_master_leases_granted_total 1") != NULL, "%s", metrics);
    cr_assert(strstr(metrics, "sluice_master_splits{job=\"j\",state=\"leased\"} 1") != NULL, "%s",
              metrics);
    free(metrics);
    json_t *ws = sl_master_workers_json(e.m);
    cr_assert_eq(json_array_size(json_object_get(ws, "workers")), 1);
    json_decref(ws);
    cr_assert(sl_master_ready(e.m));
    env_fini(&e);
}

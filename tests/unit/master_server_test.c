/* Tests of the master process (src/dpp/master/process/master.h) over real sockets: fake
 * workers and trainer clients speak proto/control.proto to it. Covers job
 * submission (and its refusals), register / lease / heartbeat / split read,
 * attach / commit (overlap, idempotent retry, across a restart), tokens,
 * lease expiry and revocation, garbage on the control socket, the JSON
 * views and metrics, the trainer wait the autoscaler reads, scaling and
 * removal. Every master runs on the
 * counting allocator of testutil.h (nothing leaks, every free has its
 * size), and one test fails each allocation of a worker's and a client's
 * session in turn. */
#include <criterion/criterion.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/mem.h"
#include "dpp/master/process/admin.h"
#include "dpp/master/process/master_internal.h" /* the state of a deterministic job (see its test) */
#include "rpc/auth.h"
#include "rpc/frame.h"
#include "testutil.h"
#include "warehouse/import.h"

typedef struct env {
    char root[64];
    char table[128], state[128];
    sl_master_t *m;
    sl_master_opts_t o;
    tu_alloc_t ta; /* the master's allocator */
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
    tu_alloc_init(&e->ta);
    e->o = (sl_master_opts_t){.state_dir = e->state,
                              .lease_timeout_ms = lease_ms,
                              .autoscale_every_ms = 50,
                              .allocator = &e->ta.base};
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
    tu_alloc_assert_clean(&e->ta);
    tu_rm_tree(e->root);
}

static sl_err_t submit(env *e, const char *extra, sl_error_t *err)
{
    char text[16384];
    snprintf(text, sizeof text,
             "{\"spec\": {\"id\": \"j\", \"source\": {\"table\": \"%s\"}, \"batch\": "
             "{\"size\": 100}}%s}",
             e->table, extra);
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    cr_assert_not_null(body, "%s", je.text);
    char *id = NULL;
    sl_err_t rc = sl_master_admin_job_submit(e->m, body, &id, err);
    if (rc == SL_OK) cr_assert_str_eq(id, "j");
    sl_strfree(sl_master_allocator(e->m), id);
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
    /* ATTACHED also comes unasked, when the job's view changes */
    do {
        cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s: %s", sl_rpc_type_name(type),
                     err.msg);
        if (f.type == SL_RPC_ATTACHED && want != SL_RPC_ATTACHED) {
            sl_rpc_frame_free(&f);
            continue;
        }
        break;
    } while (true);
    if (f.type == SL_RPC_ERROR && want != SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const void *)f.msg;
        cr_assert_fail("%s answered ERROR: %s", sl_rpc_type_name(type), e->message);
    }
    cr_assert_eq(f.type, want, "%s answered %s", sl_rpc_type_name(type), sl_rpc_type_name(f.type));
    return f.msg;
}

static void done(ProtobufCMessage *msg)
{
    sl_rpc_frame_t f = {.msg = msg, .allocator = NULL};
    sl_rpc_frame_free(&f);
}

/* REGISTER as worker id (process incarnation inc, holding leases
 * refs[0..n)) on a new connection; want REGISTERED or ERROR. @return the
 * connection (the ERROR's message in *why when want is ERROR). */
static int register_as(env *e, const char *id, uint64_t inc, Sluice__Control__SplitRef **refs,
                       size_t n, sl_rpc_type_t want, char *why, size_t cap)
{
    int fd = dial(e);
    Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
    r.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    r.worker_id = (char *)id;
    r.serve_address = "127.0.0.1:1";
    r.job_id = "j";
    r.incarnation = inc;
    r.n_leases = n;
    r.leases = refs;
    ProtobufCMessage *a = call(fd, SL_RPC_REGISTER, &r.base, want);
    if (want == SL_RPC_REGISTERED) {
        Sluice__Control__Registered *ok = (void *)a;
        cr_assert_eq(ok->lease_timeout_ms, e->o.lease_timeout_ms);
        cr_assert_gt(ok->heartbeat_ms, 0);
    } else {
        snprintf(why, cap, "%s", ((Sluice__Dpp__Error *)a)->message);
    }
    done(a);
    return fd;
}

static int worker(env *e, const char *id)
{
    return register_as(e, id, 0, NULL, 0, SL_RPC_REGISTERED, NULL, 0);
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

/* A trainer client of rank (of world ranks) attached to job "j". */
static int client_rank(env *e, const char *id, uint32_t rank, uint32_t world, const char *sharding,
                       uint32_t *nworkers)
{
    int fd = dial(e);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = (char *)id;
    a.rank = rank;
    a.world_size = world;
    Sluice__Control__Attached *at = (void *)call(fd, SL_RPC_ATTACH, &a.base, SL_RPC_ATTACHED);
    cr_assert_str_eq(at->sharding, sharding);
    cr_assert(!at->finished);
    if (nworkers != NULL) *nworkers = (uint32_t)at->n_workers;
    done(&at->base);
    return fd;
}

static int client(env *e, const char *id, uint32_t *nworkers)
{
    return client_rank(e, id, 0, 1, "dynamic", nworkers);
}

static int commit(int fd, const char *client_id, uint64_t nonce,
                  const Sluice__Control__SplitRef *ref, uint64_t from, uint64_t to)
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
    cr_assert_eq(sl_master_admin_job_json(e->m, "j", &j, &err), SL_OK, "%s", err.msg);
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
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    json_decref(b);
    b = json_loads("{\"ranks\": 1}", 0, NULL);
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "\"spec\"") != NULL, "%s", err.msg);
    json_decref(b);
    cr_assert_eq(submit(&e, ", \"colour\": 1", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "colour") != NULL, "%s", err.msg);
    cr_assert_eq(submit(&e, ", \"sharding\": \"round\"", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"ranks\": -1", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"ranks\": 0", &err), SL_ERR_INVALID); /* refused, not taken for 1 */
    cr_assert_str_eq(err.msg, "$.ranks: an integer 1..65536");
    cr_assert_eq(submit(&e, ", \"min_workers\": 3, \"max_workers\": 2", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"resume_token\": \"!!!\"", &err), SL_ERR_INVALID);
    cr_assert_eq(submit(&e, ", \"resume_token\": \"AAAA\"", &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "resume_token") != NULL, "%s", err.msg);
    b = json_pack("{s:{s:s, s:{s:s}}}", "spec", "id", "j", "source", "table", "/nonexistent/table");
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "/nonexistent/table") != NULL, "%s", err.msg);
    json_decref(b);
    /* a Kafka stream (no stop): its partitions are resolved with the brokers
     * as a bounded replay's are (unreachable here: refused naming them) */
    b = json_loads("{\"spec\": {\"id\": \"j\", \"source\": {\"kafka\": {\"brokers\": "
                   "\"127.0.0.1:9\", \"topics\": [\"t\"], \"schema\": {\"features\": "
                   "[{\"name\": \"f\", \"kind\": \"sparse\"}]}}}}}",
                   0, NULL);
    cr_assert_not_null(b);
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "$.source.kafka.brokers: kafka topic 't': metadata: ") != NULL, "%s",
              err.msg);
    json_decref(b);
    /* a bounded replay from brokers nobody answers at: refused naming them, in bounded time */
    b = json_loads("{\"spec\": {\"id\": \"j\", \"source\": {\"kafka\": {\"brokers\": "
                   "\"127.0.0.1:9\", \"topics\": [\"t\"], \"stop\": \"end\", "
                   "\"schema\": {\"features\": [{\"name\": \"f\", \"kind\": "
                   "\"sparse\"}]}}}}}",
                   0, NULL);
    cr_assert_not_null(b);
    uint64_t t0 = sl_clock_ms();
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "$.source.kafka.brokers: kafka topic 't': metadata: ") != NULL, "%s",
              err.msg);
    cr_assert_lt((double)(sl_clock_ms() - t0), 1000 * tu_timeout(10), "%s", err.msg);
    json_decref(b);
    b = json_pack("{s:{s:s, s:{s:s}, s:{s:i}}}", "spec", "id", "j", "source", "table", e.table,
                  "batch", "size", -5);
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    json_decref(b);
    /* the deterministic order: never with static sharding; a resume
     * needs good tokens (the resume itself: fleet_order_resume_test) */
    b = json_pack("{s:{s:s, s:{s:s}, s:s}, s:s}", "spec", "id", "j", "source", "table", e.table,
                  "order", "deterministic", "sharding", "static");
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "job 'j': \"order\": \"deterministic\" deals batch g to rank g "
                              "mod ranks; static sharding gives each rank its own splits instead: "
                              "submit with --sharding dynamic");
    json_decref(b);
    b = json_pack("{s:{s:s, s:{s:s}, s:s}, s:s}", "spec", "id", "j", "source", "table", e.table,
                  "order", "deterministic", "resume_token", "AAAA");
    cr_assert_eq(sl_master_admin_job_submit(e.m, b, NULL, &err), SL_ERR_INVALID, "%s", err.msg);
    cr_assert_str_eq(err.msg, "resume_token: resume token: not a sluice resume token (magic)");
    json_decref(b);
    json_t *jobs = sl_master_admin_jobs_json(e.m);
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
    cr_assert_eq(commit(c1, "c1", 1, &ref, 0, 100),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(commit(c2, "c2", 1, &ref, 50, 150),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP);
    cr_assert_eq(commit(c1, "c1", 1, &ref, 0, 100),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
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
    Sluice__Control__SplitReadReply *srr =
        (void *)call(w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_SPLIT_READ_REPLY);
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
    cr_assert_eq(jint(j, "batches"), 2); /* two accepted commits (a repeat is not a batch) */
    cr_assert_eq(jint(j, "samples"), 200);
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
    cr_assert_eq(jint(j, "batches"), 2, "the counters survive a restart (journal)");
    cr_assert_eq(jint(j, "samples"), 200);
    json_decref(j);

    c1 = client(&e, "c1", NULL);
    cr_assert_eq(commit(c1, "c1", 1, &ref, 0, 100),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(commit(c1, "c1", 9, &ref, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP);
    close(c1);
    env_fini(&e);
}

/* Static sharding is enforced by the master: a commit from a client whose
 * ATTACH rank is not the split's assigned rank is answered STALE and changes
 * nothing; the owning rank then commits the same rows. */
Test(master_server, static_sharding_refuses_other_ranks)
{
    env e;
    env_init(&e, 2000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, ", \"ranks\": 3, \"sharding\": \"static\"", &err), SL_OK, "%s",
                 err.msg);
    int w = worker(&e, "w1");
    int c[3];
    char name[3][8];
    for (uint32_t r = 0; r < 3; r++) {
        snprintf(name[r], sizeof name[r], "c%u", r);
        c[r] = client_rank(&e, name[r], r, 3, "static", NULL);
    }
    uint64_t nonce = 1;
    uint32_t seen[3] = {0};
    for (int k = 0; k < 4; k++) { /* several splits, so more than one owner is exercised */
        Sluice__Control__Lease *l = lease(w, "w1");
        cr_assert_gt(l->rank_plus_one, 0);
        uint32_t owner = l->rank_plus_one - 1;
        cr_assert_lt(owner, 3);
        seen[owner]++;
        Sluice__Control__SplitRef ref = *l->ref;
        ref.job_id = "j";
        for (uint32_t r = 0; r < 3; r++)
            if (r != owner)
                cr_assert_eq(commit(c[r], name[r], nonce++, &ref, 0, 100),
                             SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE, "rank %u split %u", r,
                             ref.split);
        json_t *j = job_json(&e);
        cr_assert_eq(jint(j, "committed_rows"), (json_int_t)k * 100, "refused rows committed");
        json_decref(j);
        cr_assert_eq(commit(c[owner], name[owner], nonce++, &ref, 0, 100),
                     SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
        done(&l->base);
    }
    cr_assert_eq(seen[0] + seen[1] + seen[2], 4);
    char *metrics = sl_master_metrics_text(e.m);
    cr_assert_not_null(metrics);
    cr_assert(strstr(metrics, "result=\"wrong_rank\"} 8") != NULL, "%s", metrics);
    sl_strfree(sl_master_allocator(e.m), metrics);
    for (uint32_t r = 0; r < 3; r++)
        close(c[r]);
    close(w);
    env_fini(&e);
}

/* ATTACH with a rank not below the world size, or a world size other than
 * the job's ranks, is refused with an ERROR saying so (a reader of world
 * size 1 on a 2-rank job used to wait forever), and the connection closes. */
static void attach_refused(env *e, uint32_t rank, uint32_t world, const char *want)
{
    int fd = dial(e);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = "c-ranks";
    a.rank = rank;
    a.world_size = world;
    Sluice__Dpp__Error *er = (void *)call(fd, SL_RPC_ATTACH, &a.base, SL_RPC_ERROR);
    cr_assert_eq(er->code, SL_ERR_INVALID);
    cr_assert_str_eq(er->message, want);
    done(&er->base);
    sl_rpc_frame_t f;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_ERR_CLOSED, "%s", err.msg);
    close(fd);
}

Test(master_server, attach_checks_rank_and_world_size)
{
    env e;
    env_init(&e, 2000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, ", \"ranks\": 2, \"sharding\": \"static\"", &err), SL_OK, "%s",
                 err.msg);
    attach_refused(&e, 0, 1,
                   "attach: job 'j' has 2 trainer ranks; this client's world size is 1 (start it "
                   "with a world size of 2)");
    attach_refused(&e, 0, 3,
                   "attach: job 'j' has 2 trainer ranks; this client's world size is 3 (start it "
                   "with a world size of 2)");
    attach_refused(&e, 2, 2, "attach: rank 2 is not below world size 2");
    attach_refused(&e, 5, 0, "attach: rank 5 is not below world size 1");
    close(client_rank(&e, "c1", 1, 2, "static", NULL));
    env_fini(&e);
}

static int split_failed(int fd, const Sluice__Control__SplitRef *ref)
{
    Sluice__Control__SplitFailed sf = SLUICE__CONTROL__SPLIT_FAILED__INIT;
    sf.ref = (Sluice__Control__SplitRef *)ref;
    sf.file = "ds=2026-01-01/part-00000.slc";
    sf.stripe = 2;
    sf.message = "ds=2026-01-01/part-00000.slc stripe 2 stream 'C1' C1: checksum mismatch";
    sf.code = SL_ERR_CORRUPT;
    Sluice__Control__SplitFailedReply *r =
        (void *)call(fd, SL_RPC_SPLIT_FAILED, &sf.base, SL_RPC_SPLIT_FAILED_REPLY);
    int state = r->state;
    done(&r->base);
    return state;
}

/* SPLIT_FAILED on the control protocol: counted only from the live lease's
 * holder; the third failure (the default --max-split-failures) fails the
 * job: its workers get NO_WORK "job failed" and stop at their heartbeat,
 * ATTACHED carries the failure, commits are refused. */
Test(master_server, split_failures_fail_the_job)
{
    env e;
    env_init(&e, 5000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    int w1 = worker(&e, "w1"), w2 = worker(&e, "w2");
    int c = client(&e, "c", NULL);
    /* failure 1, by w1; w2 cannot report w1's lease, nor w1 twice */
    Sluice__Control__Lease *l = lease(w1, "w1");
    Sluice__Control__SplitRef ref = *l->ref;
    ref.job_id = "j";
    uint32_t split = ref.split;
    cr_assert_eq(split_failed(w2, &ref), SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__STALE);
    cr_assert_eq(split_failed(w1, &ref), SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__RETRY);
    cr_assert_eq(split_failed(w1, &ref), SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__STALE);
    done(&l->base);
    /* failure 2, by w2, which gets the split next (it is pending again) */
    l = lease(w2, "w2");
    cr_assert_eq(l->ref->split, split);
    ref = *l->ref;
    ref.job_id = "j";
    cr_assert_eq(split_failed(w1, &ref), SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__STALE);
    cr_assert_eq(split_failed(w2, &ref), SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__RETRY);
    done(&l->base);
    /* failure 3, by w1 again: the job fails */
    l = lease(w1, "w1");
    cr_assert_eq(l->ref->split, split);
    ref = *l->ref;
    ref.job_id = "j";
    cr_assert_eq(split_failed(w1, &ref), SLUICE__CONTROL__SPLIT_FAILED_REPLY__STATE__JOB_FAILED);
    done(&l->base);
    json_t *j = job_json(&e);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "failed");
    json_t *f = json_object_get(j, "failure");
    cr_assert_eq(json_integer_value(json_object_get(f, "stripe")), 2);
    cr_assert_str_eq(json_string_value(json_object_get(f, "file")), "ds=2026-01-01/part-00000.slc");
    json_decref(j);
    /* workers: no more work, and stop */
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    q.worker_id = "w2";
    q.job_id = "j";
    Sluice__Control__NoWork *nw = (void *)call(w2, SL_RPC_LEASE_REQUEST, &q.base, SL_RPC_NO_WORK);
    cr_assert_str_eq(nw->reason, "job failed");
    done(&nw->base);
    Sluice__Control__HeartbeatReply *hr = heartbeat(w2, "w2", NULL, 0);
    cr_assert(hr->stop);
    done(&hr->base);
    /* clients: the failure in ATTACHED, commits refused */
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = "c";
    a.world_size = 1;
    Sluice__Control__Attached *at = (void *)call(c, SL_RPC_ATTACH, &a.base, SL_RPC_ATTACHED);
    cr_assert(at->failed);
    cr_assert_eq(at->failure_code, SL_ERR_CORRUPT);
    cr_assert(strstr(at->failure, "(file ds=2026-01-01/part-00000.slc stripe 2) failed: ") != NULL,
              "%s", at->failure);
    done(&at->base);
    cr_assert_eq(commit(c, "c", 1, &ref, 0, 10), SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE);
    close(c);
    close(w1);
    close(w2);
    env_fini(&e);
}

/* A metric's value in the master's /metrics text (a family without labels). */
static double metric(env *e, const char *name)
{
    char *text = sl_master_metrics_text(e->m);
    cr_assert_not_null(text);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(text, key);
    cr_assert_not_null(at, "no %s in %s", name, text);
    double v = strtod(at + strlen(key), NULL);
    sl_strfree(sl_master_allocator(e->m), text);
    return v;
}

/* Client records are evicted when idle: with max_clients 3, eight client
 * processes one after the other (each attaching, committing, going away)
 * are all served, because a record with no connection and no commit for
 * client_idle_ms is forgotten (journaled: a restarted master forgets it
 * too). A connected client keeps its record however idle; an evicted one's
 * retry is a new commit (OVERLAP for rows it had committed). */
Test(master_server, idle_client_records_are_evicted)
{
    env e;
    env_init(&e, 5000);
    e.o.max_clients = 3;
    e.o.client_idle_ms = 150;
    env_restart(&e);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    int w = worker(&e, "w1");
    Sluice__Control__Lease *l = lease(w, "w1");
    Sluice__Control__SplitRef ref = *l->ref;
    ref.job_id = "j";
    int keeper = client(&e, "keeper", NULL); /* connected all along */
    cr_assert_eq(commit(keeper, "keeper", 1, &ref, 0, 50),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    for (uint32_t k = 1; k <= 8; k++) {
        char id[16];
        snprintf(id, sizeof id, "c%u", k);
        int c = client(&e, id, NULL);
        cr_assert_eq(commit(c, id, 7, &ref, 50 * k, 50 * k + 50),
                     SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "client %u of 8", k);
        close(c);
        /* gone and idle: forgotten within 1.1 idle periods */
        double t0 = (double)time(NULL);
        while (metric(&e, "sluice_master_client_records") > 1 && time(NULL) - t0 < tu_timeout(5))
            usleep(20 * 1000);
        cr_assert_eq(metric(&e, "sluice_master_client_records"), 1, "client %u not evicted", k);
    }
    cr_assert_eq(metric(&e, "sluice_master_clients_evicted_total"), 8);
    /* the connected client kept its record: a retry is recognised */
    cr_assert_eq(commit(keeper, "keeper", 1, &ref, 0, 50),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    /* an evicted client retrying is new: its rows are committed, so OVERLAP */
    int c = client(&e, "c3", NULL);
    cr_assert_eq(commit(c, "c3", 7, &ref, 150, 200),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP);
    close(c);
    /* replay forgets the same clients (ClientEvicted records) */
    close(keeper);
    ProtobufCMessage *lm = &l->base;
    done(lm);
    close(w);
    e.o.client_idle_ms = 600000;
    env_restart(&e);
    cr_assert_eq(metric(&e, "sluice_master_client_records"), 1);
    keeper = client(&e, "keeper", NULL);
    cr_assert_eq(commit(keeper, "keeper", 1, &ref, 0, 50),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    c = client(&e, "c5", NULL);
    cr_assert_eq(commit(c, "c5", 7, &ref, 250, 300),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__OVERLAP);
    close(c);
    close(keeper);
    env_fini(&e);
}

static void client_stats(int fd, const char *id, uint64_t wait_ms, uint64_t elapsed_ms)
{
    Sluice__Control__ClientStats cs = SLUICE__CONTROL__CLIENT_STATS__INIT;
    cs.client_id = (char *)id;
    cs.job_id = "j";
    cs.wait_ns = wait_ms * 1000000;
    cs.elapsed_ns = elapsed_ms * 1000000;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_CLIENT_STATS, &cs.base, NULL, 0, &err), SL_OK, "%s",
                 err.msg);
}

/* The job's trainer_wait once it is want (within a bounded wait). */
static void expect_wait(env *e, double want, const char *what)
{
    double got = -1;
    for (int i = 0; i < (int)(tu_timeout(5) * 100) && got != want; i++) {
        if (i) usleep(10 * 1000);
        json_t *j = job_json(e);
        got = json_real_value(json_object_get(j, "trainer_wait"));
        json_decref(j);
    }
    cr_assert_eq(got, want, "%s: trainer_wait %g, want %g", what, got, want);
}

/* CLIENT_STATS as the autoscaler reads them (trainer_wait, observed every
 * 50 ms here): the fraction of the reports' time spent waiting; a report
 * with more wait than time is all wait (a client that counts a long wait
 * when it ends), not dropped; intervals without a report keep the last
 * measure while the job has a client; without clients nobody waits. */
Test(master_server, client_stats_feed_the_trainer_wait)
{
    env e;
    env_init(&e, 5000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    int c = client(&e, "c1", NULL);
    client_stats(c, "c1", 25, 100);
    expect_wait(&e, 0.25, "a quarter of the time");
    usleep(300 * 1000); /* six observations without a report */
    expect_wait(&e, 0.25, "no report since");
    client_stats(c, "c1", 700, 200);
    expect_wait(&e, 1.0, "a wait longer than the interval");
    close(c);
    expect_wait(&e, 0.0, "no client left");
    env_fini(&e);
}

/* p[0..n) as base64 into out (room checked by the caller; GnuTLS encodes). */
static void b64(const uint8_t *p, size_t n, char *out)
{
    gnutls_datum_t raw = {.data = (unsigned char *)p, .size = (unsigned)n}, enc = {0};
    cr_assert_eq(gnutls_base64_encode2(&raw, &enc), 0);
    memcpy(out, enc.data, enc.size);
    out[enc.size] = '\0';
    gnutls_free(enc.data);
}

/* The token of client id excluding rows [from, to) of ref's split, base64. */
static void token_b64(int fd, const char *id, const Sluice__Control__SplitRef *ref, uint64_t from,
                      uint64_t to, char *out, size_t cap)
{
    Sluice__Control__RowRange und = SLUICE__CONTROL__ROW_RANGE__INIT, *undp = &und;
    und.from_row = from;
    und.to_row = to;
    Sluice__Control__SplitRef *urefs[1] = {(Sluice__Control__SplitRef *)ref};
    Sluice__Control__TokenRequest tq = SLUICE__CONTROL__TOKEN_REQUEST__INIT;
    tq.job_id = "j";
    tq.client_id = (char *)id;
    tq.n_undelivered_refs = tq.n_undelivered_rows = 1;
    tq.undelivered_refs = urefs;
    tq.undelivered_rows = &undp;
    Sluice__Control__Token *tok = (void *)call(fd, SL_RPC_TOKEN_REQUEST, &tq.base, SL_RPC_TOKEN);
    cr_assert_lt(tok->token.len * 4 / 3 + 8, cap);
    b64(tok->token.data, tok->token.len, out);
    done(&tok->base);
}

/* POST /jobs with "resume_tokens": the job starts with what both ranks
 * delivered; a bad token is refused naming which. */
Test(master_server, resume_tokens_one_per_rank)
{
    env e;
    env_init(&e, 2000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, ", \"ranks\": 2", &err), SL_OK, "%s", err.msg);
    int w = worker(&e, "w1");
    Sluice__Control__Lease *l = lease(w, "w1");
    Sluice__Control__SplitRef ref = *l->ref;
    ref.job_id = "j";
    int c0 = client_rank(&e, "c0", 0, 2, "dynamic", NULL);
    int c1 = client_rank(&e, "c1", 1, 2, "dynamic", NULL);
    cr_assert_eq(commit(c0, "c0", 1, &ref, 0, 100),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(commit(c1, "c1", 1, &ref, 100, 200),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(commit(c0, "c0", 2, &ref, 200, 300),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    /* rank 0 has not handed out [200,300), rank 1 not [100,150) */
    static char t0[4096], t1[4096], extra[9000];
    token_b64(c0, "c0", &ref, 200, 300, t0, sizeof t0);
    token_b64(c1, "c1", &ref, 100, 150, t1, sizeof t1);
    done(&l->base);
    close(c0);
    close(c1);
    close(w);
    cr_assert_eq(sl_master_job_remove(e.m, "j", &err), SL_OK, "%s", err.msg);
    snprintf(extra, sizeof extra, ", \"resume_tokens\": [\"%s\", \"AAAA\"]", t0);
    cr_assert_eq(submit(&e, extra, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "token 2 of 2") != NULL, "%s", err.msg);
    snprintf(extra, sizeof extra, ", \"resume_tokens\": [\"%s\", 7]", t0);
    cr_assert_eq(submit(&e, extra, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "resume_tokens\"[1]") != NULL, "%s", err.msg);
    snprintf(extra, sizeof extra, ", \"resume_token\": \"%s\", \"resume_tokens\": [\"%s\"]", t0,
             t1);
    cr_assert_eq(submit(&e, extra, &err), SL_ERR_INVALID);
    snprintf(extra, sizeof extra, ", \"ranks\": 2, \"resume_tokens\": [\"%s\", \"%s\"]", t0, t1);
    cr_assert_eq(submit(&e, extra, &err), SL_OK, "%s", err.msg);
    json_t *j = job_json(&e);
    cr_assert_eq(jint(j, "committed_rows"), 100 + 50, "[0,100) and [150,200) delivered by both");
    json_decref(j);
    env_fini(&e);
}

static void share(sl_master_autoscale_share_t *s, uint32_t n, uint32_t max, const char *want)
{
    sl_master_autoscale_fair_share(s, n, max);
    char got[256] = "";
    for (uint32_t i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%u", i ? " " : "", s[i].granted);
    cr_assert_str_eq(got, want, "max %u", max);
}

Test(master_server, fair_share_of_the_fleet)
{
    sl_master_autoscale_share_t s[4] = {
        {"a", 6, 1, 0}, {"b", 3, 1, 0}, {"c", 3, 1, 0}, {"d", 0, 1, 0}};
    share(s, 4, 0, "6 3 3 0");  /* no limit */
    share(s, 4, 12, "6 3 3 0"); /* fits */
    share(s, 4, 6, "3 2 1 0");  /* 3, 1.5, 1.5: the half goes to the lower id */
    share(s, 4, 8, "4 2 2 0");
    s[2].min_workers = 3; /* c held at its minimum; a, b share the rest 6:3 */
    share(s, 4, 6, "2 1 3 0");
    share(s, 4, 2, "1 1 3 0"); /* minimums over the limit: each gets its minimum */
    sl_master_autoscale_share_t t[2] = {{"y", 5, 1, 0}, {"x", 5, 1, 0}};
    share(t, 2, 5, "2 3"); /* equal fractions: the lower id "x" wins */
    /* property: sum == limit when the minimums fit, each within [min, desired], proportional
     * (no job two or more behind another's share) */
    uint64_t seed = tu_seed("master_server.fair_share");
    for (int round = 0; round < 2000; round++) {
        sl_master_autoscale_share_t r[8];
        static const char *ids[8] = {"j0", "j1", "j2", "j3", "j4", "j5", "j6", "j7"};
        uint32_t n = 1 + (uint32_t)tu_below(&seed, 8), want = 0, mins = 0;
        for (uint32_t i = 0; i < n; i++) {
            r[i] = (sl_master_autoscale_share_t){ids[i], (uint32_t)tu_below(&seed, 20),
                                                 1 + (uint32_t)tu_below(&seed, 4), 0};
            want += r[i].desired;
            mins += r[i].min_workers < r[i].desired ? r[i].min_workers : r[i].desired;
        }
        uint32_t max = (uint32_t)tu_below(&seed, 60);
        sl_master_autoscale_fair_share(r, n, max);
        uint32_t sum = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t lo = r[i].min_workers < r[i].desired ? r[i].min_workers : r[i].desired;
            cr_assert_geq(r[i].granted, lo, "round %d", round);
            if (mins < max || max == 0)
                cr_assert_leq(r[i].granted, r[i].desired, "round %d", round);
            sum += r[i].granted;
        }
        if (max == 0 || want <= max)
            cr_assert_eq(sum, want, "round %d", round);
        else if (mins < max)
            cr_assert_eq(sum, max, "round %d: sum %u of %u", round, sum, max);
        for (uint32_t i = 0; max > 0 && want > max && mins < max && i < n; i++)
            for (uint32_t k = 0; k < n; k++)
                if (r[i].granted > r[i].min_workers && r[k].granted < r[k].desired)
                    /* i above its minimum while k is cut: shares differ by rounding only */
                    cr_assert_lt((double)(r[i].granted - 1) / r[i].desired,
                                 (double)(r[k].granted + 1) / r[k].desired, "round %d", round);
    }

    /* through the master: desired 3 of a 2-worker fleet */
    env e;
    env_init(&e, 1000);
    e.o.max_fleet_workers = 2;
    env_restart(&e);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, ", \"min_workers\": 1, \"max_workers\": 4, \"workers\": 3", &err),
                 SL_OK, "%s", err.msg);
    json_t *j = job_json(&e);
    cr_assert_eq(jint(j, "desired_workers"), 3);
    cr_assert_eq(jint(j, "granted_workers"), 2);
    json_decref(j);
    sl_master_desired_t d[2];
    cr_assert_eq(sl_master_desired(e.m, d, 2), 1);
    cr_assert_eq(d[0].workers, 3);
    cr_assert_eq(d[0].granted, 2);
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
    json_t *st = sl_master_admin_status_json(e.m);
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
    sl_strfree(sl_master_allocator(e.m), metrics);
    json_t *ws = sl_master_admin_workers_json(e.m);
    cr_assert_eq(json_array_size(json_object_get(ws, "workers")), 1);
    json_decref(ws);
    cr_assert(sl_master_ready(e.m));
    env_fini(&e);
}

/* The connection was closed by the master (after an ERROR, if any). */
static void assert_closed(int fd)
{
    sl_rpc_frame_t f;
    sl_error_t err = {0};
    sl_err_t rc;
    while ((rc = sl_rpc_recv(fd, NULL, NULL, &f, &err)) == SL_OK) {
        cr_assert_eq(f.type, SL_RPC_ERROR, "got %s", sl_rpc_type_name(f.type));
        sl_rpc_frame_free(&f);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s", err.msg);
}

static json_int_t job_int(env *e, const char *key)
{
    json_t *j = job_json(e);
    json_int_t v = jint(j, key);
    json_decref(j);
    return v;
}

/* One worker id, several processes: the same process (incarnation)
 * reconnecting replaces its connection and keeps the leases it names; a
 * second live process is refused with an error naming the id, the other
 * process's address and how long ago it was heard from; once the first
 * process's connection is closed, or silent past the lease timeout, a new
 * process takes the id, and the leases it does not name go back at once. */
Test(master_server, one_live_process_per_worker_id)
{
    env e;
    env_init(&e, 600);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    char why[SL_ERROR_MSG_MAX];
    int a1 = register_as(&e, "w1", 11, NULL, 0, SL_RPC_REGISTERED, NULL, 0);
    Sluice__Control__Lease *l = lease(a1, "w1");
    Sluice__Control__SplitRef ref = *l->ref;
    ref.job_id = "j";
    Sluice__Control__SplitRef *refs[1] = {&ref};
    /* another process, the first one live: refused, and closed */
    int b = register_as(&e, "w1", 22, NULL, 0, SL_RPC_ERROR, why, sizeof why);
    cr_assert(strstr(why, "worker id 'w1' is in use by another live worker process") != NULL, "%s",
              why);
    cr_assert(strstr(why, "connected from 127.0.0.1:") != NULL, "%s", why);
    cr_assert(strstr(why, " ms ago") != NULL, "%s", why);
    assert_closed(b);
    close(b);
    cr_assert_eq(job_int(&e, "leased"), 1, "a refused registration changes nothing");
    /* the same process reconnects (its old connection looks alive): it
     * replaces it and keeps the lease it names */
    int a2 = register_as(&e, "w1", 11, refs, 1, SL_RPC_REGISTERED, NULL, 0);
    assert_closed(a1);
    close(a1);
    Sluice__Control__HeartbeatReply *hr = heartbeat(a2, "w1", refs, 1);
    cr_assert_eq(hr->n_revoked, 0);
    done(&hr->base);
    cr_assert_eq(job_int(&e, "leased"), 1);
    /* the process exits (its connection closes) and a new one under the same
     * id starts: it holds nothing, so the lease goes back at once */
    close(a2);
    usleep(100 * 1000); /* the master sees the end of the connection */
    int c = register_as(&e, "w1", 33, NULL, 0, SL_RPC_REGISTERED, NULL, 0);
    cr_assert_eq(job_int(&e, "leased"), 0);
    cr_assert_eq(job_int(&e, "pending"), 8);
    hr = heartbeat(c, "w1", refs, 1);
    cr_assert_eq(hr->n_revoked, 1, "the old process's lease is not the new one's");
    done(&hr->base);
    /* the new process goes silent (connection open) past the lease timeout:
     * another process may take the id, and the silent one is closed */
    Sluice__Control__Lease *l2 = lease(c, "w1");
    usleep((useconds_t)(e.o.lease_timeout_ms + 200) * 1000);
    int d = register_as(&e, "w1", 44, NULL, 0, SL_RPC_REGISTERED, NULL, 0);
    assert_closed(c);
    close(c);
    char *metrics = sl_master_metrics_text(e.m);
    cr_assert(strstr(metrics, "sluice_master_worker_ids_in_use_total 1") != NULL, "%s", metrics);
    sl_strfree(sl_master_allocator(e.m), metrics);
    done(&l->base);
    done(&l2->base);
    close(d);
    env_fini(&e);
}

/* A heartbeat renews only the leases it names: a lease granted on a LEASE
 * the worker never received (it is not in its heartbeats) expires after
 * the lease timeout; the named one lives on. A commit needs the live lease
 * of its generation. */
Test(master_server, heartbeat_renews_only_named_leases)
{
    env e;
    env_init(&e, 400);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    int w = register_as(&e, "w1", 7, NULL, 0, SL_RPC_REGISTERED, NULL, 0);
    Sluice__Control__Lease *kept = lease(w, "w1");
    Sluice__Control__Lease *lost = lease(w, "w1"); /* "never received" */
    Sluice__Control__SplitRef ref = *kept->ref, lost_ref = *lost->ref;
    ref.job_id = lost_ref.job_id = "j";
    Sluice__Control__SplitRef *refs[1] = {&ref};
    int c = client(&e, "c", NULL);
    cr_assert_eq(commit(c, "c", 1, &lost_ref, 0, 100),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    for (int i = 0; i < 10; i++) { /* 1 s: 2.5 lease timeouts */
        Sluice__Control__HeartbeatReply *hr = heartbeat(w, "w1", refs, 1);
        cr_assert_eq(hr->n_revoked, 0);
        done(&hr->base);
        usleep(100 * 1000);
    }
    json_t *j = job_json(&e);
    cr_assert_eq(jint(j, "leased"), 1);
    cr_assert_eq(jint(j, "committed_rows"), 100);
    json_decref(j);
    json_t *st = sl_master_admin_status_json(e.m);
    cr_assert_eq(json_integer_value(json_object_get(st, "lease_expiries")), 1);
    json_decref(st);
    /* rows of the expired lease, of a split not leased, or of another
     * generation: STALE, nothing recorded */
    Sluice__Control__SplitRef other = ref;
    other.split = (ref.split + 3) % 8;
    other.generation = ref.generation;
    Sluice__Control__SplitRef later = ref;
    later.generation++;
    cr_assert_eq(commit(c, "c", 2, &lost_ref, 100, 200),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE);
    cr_assert_eq(commit(c, "c", 3, &other, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE);
    cr_assert_eq(commit(c, "c", 4, &later, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__STALE);
    cr_assert_eq(commit(c, "c", 1, &lost_ref, 0, 100),
                 SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "a repeat keeps its answer");
    cr_assert_eq(commit(c, "c", 5, &ref, 0, 100), SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED);
    cr_assert_eq(job_int(&e, "committed_rows"), 200);
    char *metrics = sl_master_metrics_text(e.m);
    cr_assert(strstr(metrics, "result=\"not_leased\"} 3") != NULL, "%s", metrics);
    sl_strfree(sl_master_allocator(e.m), metrics);
    done(&kept->base);
    done(&lost->base);
    close(c);
    close(w);
    env_fini(&e);
}

/* A heartbeat that reports the worker's encoded bytes and what they would
 * take without dedup. */
static void heartbeat_bytes(int fd, const char *id, uint64_t encoded, uint64_t expanded)
{
    Sluice__Control__Heartbeat h = SLUICE__CONTROL__HEARTBEAT__INIT;
    h.worker_id = (char *)id;
    h.bytes_encoded = encoded;
    h.bytes_expanded = expanded;
    done(call(fd, SL_RPC_HEARTBEAT, &h.base, SL_RPC_HEARTBEAT_REPLY));
}

Test(master_server, job_dedup_factor_from_the_workers_heartbeats)
{
    env e;
    env_init(&e, 10000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    json_t *j = job_json(&e);
    cr_assert_float_eq(json_real_value(json_object_get(j, "dedup_factor")), 1.0, 1e-12);
    cr_assert_eq(jint(j, "bytes_encoded"), 0);
    cr_assert_eq(jint(j, "bytes_saved"), 0);
    json_decref(j);
    int w1 = worker(&e, "w1"), w2 = worker(&e, "w2");
    heartbeat_bytes(w1, "w1", 1000, 3000);
    heartbeat_bytes(w2, "w2", 1000, 1000);
    j = job_json(&e);
    cr_assert_float_eq(json_real_value(json_object_get(j, "dedup_factor")), 2.0, 1e-12);
    cr_assert_eq(jint(j, "bytes_encoded"), 2000);
    cr_assert_eq(jint(j, "bytes_saved"), 2000);
    json_decref(j);
    /* a heartbeat replaces the worker's figures, never adds to them; a
     * worker gone keeps its share */
    heartbeat_bytes(w1, "w1", 2000, 8000);
    close(w2);
    j = job_json(&e);
    cr_assert_float_eq(json_real_value(json_object_get(j, "dedup_factor")), 3.0, 1e-12);
    cr_assert_eq(jint(j, "bytes_encoded"), 3000);
    cr_assert_eq(jint(j, "bytes_saved"), 6000);
    json_decref(j);
    close(w1);
    env_fini(&e);
}

/* The connection is read to its end: an ERROR frame (when want_error),
 * then the end of the stream. */
static void expect_closed(int fd, bool want_error, const char *needle)
{
    sl_rpc_frame_t f;
    sl_error_t err = {0};
    sl_err_t rc = sl_rpc_recv(fd, NULL, NULL, &f, &err);
    if (want_error) {
        cr_assert_eq(rc, SL_OK, "%s", err.msg);
        cr_assert_eq(f.type, SL_RPC_ERROR, "got %s", sl_rpc_type_name(f.type));
        const Sluice__Dpp__Error *e = (const void *)f.msg;
        cr_assert(strstr(e->message, needle), "%s", e->message);
        sl_rpc_frame_free(&f);
        rc = sl_rpc_recv(fd, NULL, NULL, &f, &err);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "the connection stays open after its ERROR (%s)", err.msg);
}

Test(master_server, an_error_closes_and_a_client_attaches_once_the_job_exists)
{
    env e;
    env_init(&e, 1000);
    int fd = dial(&e);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = "early";
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_ATTACH, &a.base, NULL, 0, &err), SL_OK);
    expect_closed(fd, true, "no job 'j'");
    close(fd);
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    fd = client(&e, "early", NULL); /* a new connection: attached */
    /* an error on a live client connection closes it too */
    Sluice__Control__Commit cm = SLUICE__CONTROL__COMMIT__INIT;
    cm.client_id = "early";
    cm.nonce = 1;
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_COMMIT, &cm.base, NULL, 0, &err), SL_OK);
    expect_closed(fd, true, "commit without ref or rows");
    close(fd);
    env_fini(&e);
}

/* A change of the job's view is pushed (ATTACHED) to every client, a
 * bounded number a poll round (MP_PUSH_PER_ROUND, 64): with more clients
 * than that, the later ones get it in the next rounds, also when no other
 * frame arrives to wake the master. */
Test(master_server, pushes_reach_every_client_past_the_round_budget)
{
    env e;
    env_init(&e, 5000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    enum { NC = 150 };
    int fds[NC];
    char id[32];
    for (int k = 0; k < NC; k++) {
        snprintf(id, sizeof id, "c%d", k);
        uint32_t nw = 99;
        fds[k] = client(&e, id, &nw);
        cr_assert_eq(nw, 0, "no worker yet");
    }
    int w = worker(&e, "w1");
    for (int k = 0; k < NC; k++) {
        /* at most a few views on the way (each within the 5 s receive
         * timeout): the last lists w1 */
        size_t nw = 0;
        for (int tries = 0; tries < 4 && nw == 0; tries++) {
            sl_rpc_frame_t f;
            cr_assert_eq(sl_rpc_recv(fds[k], NULL, NULL, &f, &err), SL_OK, "client %d: %s", k,
                         err.msg);
            cr_assert_eq(f.type, SL_RPC_ATTACHED, "client %d got %s", k, sl_rpc_type_name(f.type));
            const Sluice__Control__Attached *at = (const void *)f.msg;
            nw = at->n_workers;
            if (nw == 1) cr_assert_str_eq(at->workers[0]->worker_id, "w1");
            sl_rpc_frame_free(&f);
        }
        cr_assert_eq(nw, 1, "client %d never heard of w1", k);
    }
    for (int k = 0; k < NC; k++)
        close(fds[k]);
    close(w);
    env_fini(&e);
}

static sl_err_t prove(int fd, const char *secret, sl_error_t *err)
{
    return sl_rpc_auth_client(fd, secret, sl_clock_ms() + 5000, err);
}

Test(master_server, cluster_secret_and_connection_limits)
{
    env e;
    env_init(&e, 1000);
    const char *secret = "sixteen bytes or more of secret";
    e.o.cluster_secret = secret;
    e.o.max_connections = 16;
    e.o.handshake_timeout_ms = 600;
    e.o.client_conn_idle_ms = 400;
    env_restart(&e); /* with these options */
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    /* a peer without the secret: challenged, its ATTACH refused, closed */
    int fd = dial(&e);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = "rogue";
    cr_assert_eq(sl_rpc_send(fd, SL_RPC_ATTACH, &a.base, NULL, 0, &err), SL_OK);
    sl_rpc_frame_t f;
    cr_assert_eq(sl_rpc_recv(fd, NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(f.type, SL_RPC_AUTH_CHALLENGE);
    sl_rpc_frame_free(&f);
    expect_closed(fd, true, "authentication failed: expected an auth-response frame, got attach");
    close(fd);
    /* a wrong secret */
    fd = dial(&e);
    cr_assert_eq(prove(fd, "not the secret of this cluster", &err), SL_ERR_PROTOCOL);
    cr_assert(strstr(err.msg, "refused: authentication failed: wrong proof"), "%s", err.msg);
    close(fd);
    /* 40 silent sockets (more than the cap of 16): the oldest in their
     * handshake make room, and a worker and a client still get in */
    int silent[40];
    for (int i = 0; i < 40; i++)
        silent[i] = dial(&e);
    int w = dial(&e);
    cr_assert_eq(prove(w, secret, &err), SL_OK, "%s", err.msg);
    Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
    r.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    r.worker_id = "w";
    r.serve_address = "127.0.0.1:1";
    r.job_id = "j";
    done(call(w, SL_RPC_REGISTER, &r.base, SL_RPC_REGISTERED));
    int c = dial(&e);
    cr_assert_eq(prove(c, secret, &err), SL_OK, "%s", err.msg);
    done(call(c, SL_RPC_ATTACH, &a.base, SL_RPC_ATTACHED));
    /* the 26 oldest silent ones were evicted (24 by the other silent
     * ones, 2 by the worker and the client), the other 14 meet the
     * handshake deadline: each got its challenge, then an ERROR, the end */
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(sl_rpc_recv(silent[i], NULL, NULL, &f, &err), SL_OK, "%d: %s", i, err.msg);
        cr_assert_eq(f.type, SL_RPC_AUTH_CHALLENGE);
        sl_rpc_frame_free(&f);
        expect_closed(silent[i], true,
                      i < 26 ? "every connection slot is taken"
                             : "no authentication within 600 ms of connecting");
        close(silent[i]);
    }
    /* a silent client is closed after client_idle_ms; the worker heartbeats */
    for (int k = 0; k < 8; k++) {
        Sluice__Control__Heartbeat h = SLUICE__CONTROL__HEARTBEAT__INIT;
        h.worker_id = "w";
        done(call(w, SL_RPC_HEARTBEAT, &h.base, SL_RPC_HEARTBEAT_REPLY));
        usleep(100 * 1000);
    }
    expect_closed(c, true, "client silent for more than 400 ms");
    close(c);
    close(w);
    /* 3 that hang up on their challenge: each counts as closed */
    for (int i = 0; i < 3; i++) {
        int h = dial(&e);
        cr_assert_eq(sl_rpc_recv(h, NULL, NULL, &f, &err), SL_OK, "%d: %s", i, err.msg);
        cr_assert_eq(f.type, SL_RPC_AUTH_CHALLENGE);
        sl_rpc_frame_free(&f);
        close(h);
    }
    /* every challenged connection that never proved the secret is counted
     * once, by reason: 2 refused, 26 evicted, 14 timed out, 3 closed */
    char *m = NULL;
    uint64_t until = sl_clock_ms() + (uint64_t)(tu_timeout(5) * 1000);
    for (; sl_clock_ms() < until; usleep(20 * 1000)) {
        if (m) sl_strfree(sl_master_allocator(e.m), m);
        m = sl_master_metrics_text(e.m);
        if (strstr(m, "sluice_master_auth_failures_total{reason=\"closed\"} 3\n")) break;
    }
    cr_assert(strstr(m, "sluice_master_auth_failures_total{reason=\"closed\"} 3\n"), "%s", m);
    cr_assert(strstr(m, "sluice_master_auth_failures_total{reason=\"refused\"} 2\n"), "%s", m);
    cr_assert(strstr(m, "sluice_master_auth_failures_total{reason=\"evicted\"} 26\n"), "%s", m);
    cr_assert(strstr(m, "sluice_master_auth_failures_total{reason=\"timeout\"} 14\n"), "%s", m);
    cr_assert(strstr(m, "sluice_master_connections_closed_total{reason=\"evicted\"} 26\n"), "%s",
              m);
    cr_assert(strstr(m, "sluice_master_connections_closed_total{reason=\"idle\"} 1\n"), "%s", m);
    cr_assert(strstr(m, "sluice_master_connections_closed_total{reason=\"refused\"} 0\n"), "%s", m);
    cr_assert(
        strstr(m, "sluice_master_connections_closed_total{reason=\"handshake_timeout\"} 14\n"),
        "%s", m);
    sl_strfree(sl_master_allocator(e.m), m);
    env_fini(&e);
}

/* ---- every allocation failure of a session ------------------------------------------- */

/* A worker's and a client's session with the master, in steps that may be
 * refused for memory: the master answers ERROR SL_ERR_NOMEM (or closes the
 * connection when it had no room to read the request) and carries on. */
typedef struct session {
    env *e;
    int w, c;                      /* worker and client connections, -1: none */
    Sluice__Control__SplitRef ref; /* the worker's lease (job_id "j") */
    bool leased;
    uint64_t rows; /* of the leased split */
} session;

enum { SESSION_STEPS = 9 };

/* One request: its answer of type want, or NULL when refused for memory
 * (the connection is closed then). Any other answer fails the test. */
static ProtobufCMessage *try_call(int fd, sl_rpc_type_t type, const ProtobufCMessage *msg,
                                  sl_rpc_type_t want)
{
    sl_error_t err = {0};
    if (sl_rpc_send(fd, type, msg, NULL, 0, &err) != SL_OK) return NULL;
    sl_rpc_frame_t f;
    sl_err_t rc = sl_rpc_recv(fd, NULL, NULL, &f, &err);
    if (rc == SL_ERR_CLOSED || rc == SL_ERR_IO) return NULL; /* no room to read it */
    cr_assert_eq(rc, SL_OK, "%s: %s", sl_rpc_type_name(type), err.msg);
    if (f.type == SL_RPC_ERROR) {
        const Sluice__Dpp__Error *e = (const void *)f.msg;
        cr_assert_eq(e->code, SL_ERR_NOMEM, "%s answered ERROR %d: %s", sl_rpc_type_name(type),
                     e->code, e->message);
        cr_assert_neq(e->message[0], '\0', "%s: an ERROR without a message",
                      sl_rpc_type_name(type));
        sl_rpc_frame_free(&f);
        return NULL;
    }
    cr_assert_eq(f.type, want, "%s answered %s", sl_rpc_type_name(type), sl_rpc_type_name(f.type));
    return f.msg;
}

static bool session_register(session *s)
{
    if (s->w >= 0) close(s->w);
    s->w = dial(s->e);
    Sluice__Control__SplitRef *held = &s->ref;
    Sluice__Control__Register r = SLUICE__CONTROL__REGISTER__INIT;
    r.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    r.worker_id = "w1";
    r.serve_address = "127.0.0.1:1";
    r.job_id = "j";
    r.incarnation = 7;
    r.n_leases = s->leased ? 1 : 0;
    r.leases = &held;
    ProtobufCMessage *a = try_call(s->w, SL_RPC_REGISTER, &r.base, SL_RPC_REGISTERED);
    done(a);
    return a != NULL;
}

static bool session_attach(session *s)
{
    if (s->c >= 0) close(s->c);
    s->c = dial(s->e);
    Sluice__Control__Attach a = SLUICE__CONTROL__ATTACH__INIT;
    a.protocol_version = SL_MASTER_PROTOCOL_VERSION;
    a.job_id = "j";
    a.client_id = "c1";
    a.world_size = 1;
    ProtobufCMessage *at = try_call(s->c, SL_RPC_ATTACH, &a.base, SL_RPC_ATTACHED);
    done(at);
    return at != NULL;
}

static bool session_step(session *s, int step)
{
    env *e = s->e;
    switch (step) {
    case 0:
        return session_register(s);
    case 1: {
        Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
        q.worker_id = "w1";
        q.job_id = "j";
        Sluice__Control__Lease *l =
            (void *)try_call(s->w, SL_RPC_LEASE_REQUEST, &q.base, SL_RPC_LEASE);
        if (l == NULL) return false;
        s->ref = *l->ref;
        s->ref.job_id = "j";
        s->rows = l->num_rows;
        s->leased = true;
        done(&l->base);
        return true;
    }
    case 2: {
        Sluice__Control__SplitRef *refs[1] = {&s->ref};
        Sluice__Control__Heartbeat h = SLUICE__CONTROL__HEARTBEAT__INIT;
        h.worker_id = "w1";
        h.n_leases = 1;
        h.leases = refs;
        Sluice__Control__HeartbeatReply *r =
            (void *)try_call(s->w, SL_RPC_HEARTBEAT, &h.base, SL_RPC_HEARTBEAT_REPLY);
        if (r == NULL) return false;
        cr_assert_eq(r->n_revoked, 0);
        done(&r->base);
        return true;
    }
    case 3:
        return session_attach(s);
    case 4: {
        Sluice__Control__RowRange rows = SLUICE__CONTROL__ROW_RANGE__INIT;
        rows.to_row = 10;
        Sluice__Control__Commit c = SLUICE__CONTROL__COMMIT__INIT;
        c.client_id = "c1";
        c.nonce = 1;
        c.ref = &s->ref;
        c.rows = &rows;
        c.num_samples = 10;
        Sluice__Control__CommitReply *r =
            (void *)try_call(s->c, SL_RPC_COMMIT, &c.base, SL_RPC_COMMIT_REPLY);
        if (r == NULL) return false;
        cr_assert_eq(r->result, SLUICE__CONTROL__COMMIT_REPLY__RESULT__COMMITTED, "%s", r->message);
        done(&r->base);
        return true;
    }
    case 5: {
        Sluice__Control__TokenRequest tq = SLUICE__CONTROL__TOKEN_REQUEST__INIT;
        tq.job_id = "j";
        tq.client_id = "c1";
        Sluice__Control__Token *t =
            (void *)try_call(s->c, SL_RPC_TOKEN_REQUEST, &tq.base, SL_RPC_TOKEN);
        if (t == NULL) return false;
        cr_assert_gt(t->token.len, 16);
        done(&t->base);
        return true;
    }
    case 6: {
        Sluice__Control__RowRange er = SLUICE__CONTROL__ROW_RANGE__INIT, *erp = &er;
        er.from_row = 10;
        er.to_row = s->rows;
        Sluice__Control__SplitRead sr = SLUICE__CONTROL__SPLIT_READ__INIT;
        sr.ref = &s->ref;
        sr.n_empty = 1;
        sr.empty = &erp;
        Sluice__Control__SplitReadReply *r =
            (void *)try_call(s->w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_SPLIT_READ_REPLY);
        if (r == NULL) return false;
        cr_assert_eq(r->state, SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE);
        s->leased = false;
        done(&r->base);
        return true;
    }
    case 7: {
        /* the admin views: NULL when out of memory */
        json_t *v[3] = {sl_master_admin_status_json(e->m), sl_master_admin_jobs_json(e->m),
                        sl_master_admin_workers_json(e->m)};
        char *metrics = sl_master_metrics_text(e->m);
        bool ok = v[0] && v[1] && v[2] && metrics;
        for (int i = 0; i < 3; i++)
            json_decref(v[i]);
        sl_strfree(sl_master_allocator(e->m), metrics);
        return ok;
    }
    case 8: {
        char text[600];
        snprintf(text, sizeof text, "{\"spec\": {\"id\": \"k\", \"source\": {\"table\": \"%s\"}}}",
                 e->table);
        json_t *body = json_loads(text, 0, NULL);
        sl_error_t err = {0};
        sl_err_t rc = sl_master_admin_job_submit(e->m, body, NULL, &err);
        json_decref(body);
        if (rc == SL_ERR_NOMEM) {
            cr_assert_neq(err.msg[0], '\0', "submit: out of memory without a message");
            return false;
        }
        cr_assert_eq(rc, SL_OK, "submit: %s", err.msg);
        return true;
    }
    }
    cr_assert_fail("no step %d", step);
    return false;
}

/* After a refusal: the connection the step used is gone; a new one (the
 * worker naming its lease, the client again) before the step is retried. */
static void session_reconnect(session *s, int step)
{
    if (step >= 1 && step <= 2) cr_assert(session_register(s));
    if (step == 6) cr_assert(session_register(s));
    if (step >= 4 && step <= 5) cr_assert(session_attach(s));
}

static void session_restart(env *e)
{
    sl_master_stop(e->m);
    tu_alloc_assert_clean(&e->ta);
    tu_rm_tree(e->state);
    cr_assert_eq(mkdir(e->state, 0755), 0);
    sl_error_t err = {0};
    e->o.state_dir = e->state;
    cr_assert_eq(sl_master_start(&e->o, &e->m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(submit(e, "", &err), SL_OK, "%s", err.msg);
}

/* The job as the whole session leaves it. */
static void session_check(env *e, const session *s, const char *when)
{
    json_t *j = job_json(e);
    cr_assert_eq(jint(j, "done"), 1, "%s", when);
    cr_assert_eq(jint(j, "committed_rows"), (json_int_t)s->rows, "%s", when);
    cr_assert_eq(jint(j, "batches"), 1, "%s", when);
    cr_assert_eq(jint(j, "samples"), 10, "%s", when);
    json_decref(j);
    sl_error_t err = {0};
    json_t *k = NULL;
    cr_assert_eq(sl_master_admin_job_json(e->m, "k", &k, &err), SL_OK, "%s: %s", when, err.msg);
    json_decref(k);
    cr_assert(sl_master_ready(e->m), "%s: the master stopped taking changes", when);
}

/* Starting a master (replaying a state directory) with its k-th allocation
 * failing: SL_ERR_NOMEM saying what, no thread left behind, nothing leaked. */
Test(master_server, start_under_every_allocation_failure)
{
    env e;
    env_init(&e, 5000);
    sl_error_t err = {0};
    cr_assert_eq(submit(&e, "", &err), SL_OK, "%s", err.msg);
    sl_master_stop(e.m);
    e.m = NULL;
    /* every start appends a record: each one starts from the same journal */
    char jp[200];
    snprintf(jp, sizeof jp, "%s/journal", e.state);
    FILE *f = fopen(jp, "rb");
    cr_assert_not_null(f);
    static uint8_t journal[1 << 16];
    size_t jlen = fread(journal, 1, sizeof journal, f);
    cr_assert(jlen > 0 && feof(f));
    fclose(f);
    uint64_t k = 1;
    for (;; k++) {
        tu_write_file(jp, journal, jlen);
        tu_alloc_fail_at(&e.ta, k, false);
        e.o.state_dir = e.state;
        sl_err_t rc = sl_master_start(&e.o, &e.m, &err);
        bool failed = tu_alloc_failures(&e.ta) > 0;
        tu_alloc_fail_at(&e.ta, 0, false);
        if (!failed) {
            cr_assert_eq(rc, SL_OK, "%s", err.msg);
            break;
        }
        cr_assert_eq(rc, SL_ERR_NOMEM, "allocation %llu: %s: %s", (unsigned long long)k,
                     sl_err_str(rc), err.msg);
        cr_assert_neq(err.msg[0], '\0');
        cr_assert_null(e.m);
        char why[256];
        cr_assert(tu_alloc_clean(&e.ta, why, sizeof why), "allocation %llu: %s",
                  (unsigned long long)k, why);
    }
    cr_assert_gt(k, 5);
    json_t *j = job_json(&e);
    cr_assert_eq(jint(j, "num_splits"), 8);
    json_decref(j);
    env_fini(&e);
}

Test(master_server, every_allocation_failure_in_a_session_is_refused_cleanly)
{
    env e;
    env_init(&e, 5000);
    uint64_t walked = 0;
    for (int step = 0; step < SESSION_STEPS; step++) {
        for (uint64_t k = 1;; k++) {
            char when[64];
            snprintf(when, sizeof when, "step %d allocation %llu", step, (unsigned long long)k);
            session_restart(&e);
            session s = {.e = &e, .w = -1, .c = -1};
            for (int i = 0; i < step; i++)
                cr_assert(session_step(&s, i), "%s: step %d refused", when, i);
            tu_alloc_fail_at(&e.ta, k, false);
            bool ok = session_step(&s, step);
            bool failed = tu_alloc_failures(&e.ta) > 0;
            tu_alloc_fail_at(&e.ta, 0, false);
            cr_assert(ok || failed, "%s: refused without a failed allocation", when);
            if (!ok) {
                session_reconnect(&s, step);
                cr_assert(session_step(&s, step), "%s: refused again", when);
            }
            for (int i = step + 1; i < SESSION_STEPS; i++)
                cr_assert(session_step(&s, i), "%s: step %d refused", when, i);
            session_check(&e, &s, when);
            if (s.w >= 0) close(s.w);
            if (s.c >= 0) close(s.c);
            /* and the journal agrees */
            env_restart(&e);
            char again[80];
            snprintf(again, sizeof again, "%s, restarted", when);
            session_check(&e, &s, again);
            if (!failed) break;
            walked++;
        }
    }
    cr_log_info("allocation failures walked: %llu", (unsigned long long)walked);
    cr_assert_gt(walked, SESSION_STEPS);
    env_fini(&e);
}

/* The deterministic order on the worker wire (docs/DESIGN.md, "A
 * deterministic order"): a lease says the job's ranks and, when known,
 * the split's base; leases stay within the window; a heartbeat answers
 * the bases of the live leases it names once known; SPLIT_READ carries
 * the count, journaled before the split read; another count is an error
 * naming it. Submission refuses such jobs while the workers and clients
 * are not wired (submit_refusals), so this test adds the job to the
 * master's state itself, as a submission would. */
Test(master_server, deterministic_order_on_the_worker_wire)
{
    env e;
    env_init(&e, 100000);
    sl_error_t err = {0};
    sl_wh_table_t *t = NULL;
    sl_wh_splits_t *sp = NULL;
    cr_assert_eq(sl_wh_table_open(e.table, NULL, &t, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sp->count, 8);
    sl_master_state_job_spec_t spec = {.job_id = "j",
                                       .splits = sp->items,
                                       .num_splits = sp->count,
                                       .epochs = 1,
                                       .spec_json = "{}",
                                       .ranks = 2,
                                       .min_workers = 1,
                                       .max_workers = 1,
                                       .deterministic = true,
                                       .order_window = 2};
    sl_mutex_lock(&e.m->mu);
    sl_err_t rc = sl_master_state_job_add(e.m->st, &spec, &err);
    sl_mutex_unlock(&e.m->mu);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    int w = worker(&e, "w1");
    /* positions 0 and 1 of the window, in the epoch's order */
    Sluice__Control__Lease *l0 = lease(w, "w1"), *l1 = lease(w, "w1");
    cr_assert_eq(l0->ref->split, 0);
    cr_assert_eq(l0->order_ranks, 2);
    cr_assert_eq(l0->order_base_plus_one, 1, "split 0's base, 0, is known at once");
    cr_assert_eq(l1->ref->split, 1);
    cr_assert_eq(l1->order_ranks, 2);
    cr_assert_eq(l1->order_base_plus_one, 0, "not known before split 0 is counted");
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    q.worker_id = "w1";
    q.job_id = "j";
    Sluice__Control__NoWork *nw = (void *)call(w, SL_RPC_LEASE_REQUEST, &q.base, SL_RPC_NO_WORK);
    cr_assert_str_eq(nw->reason, "no pending split");
    done(&nw->base);
    Sluice__Control__SplitRef *refs[2] = {l0->ref, l1->ref};
    Sluice__Control__HeartbeatReply *hr = heartbeat(w, "w1", refs, 2);
    cr_assert_eq(hr->n_revoked, 0);
    cr_assert_eq(hr->n_bases, 1);
    cr_assert_eq(hr->bases[0]->ref->split, 0);
    cr_assert_eq(hr->bases[0]->first_g, 0);
    done(&hr->base);
    /* split 0 read whole, 5 batches; every row empty here (no client),
     * which the master commits: done */
    Sluice__Control__RowRange er = SLUICE__CONTROL__ROW_RANGE__INIT, *erp = &er;
    er.from_row = 0;
    er.to_row = 500;
    Sluice__Control__SplitRead sr = SLUICE__CONTROL__SPLIT_READ__INIT;
    sr.ref = l0->ref;
    sr.n_empty = 1;
    sr.empty = &erp;
    sr.counted = true;
    sr.batches = 5;
    Sluice__Control__SplitReadReply *srr =
        (void *)call(w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_SPLIT_READ_REPLY);
    cr_assert_eq(srr->state, SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE);
    done(&srr->base);
    /* split 1's base is known now */
    hr = heartbeat(w, "w1", &refs[1], 1);
    cr_assert_eq(hr->n_bases, 1);
    cr_assert_eq(hr->bases[0]->ref->split, 1);
    cr_assert_eq(hr->bases[0]->first_g, 5);
    done(&hr->base);
    sr.ref = l1->ref;
    sr.batches = 3;
    srr = (void *)call(w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_SPLIT_READ_REPLY);
    cr_assert_eq(srr->state, SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE);
    done(&srr->base);
    /* the window moved: split 2 leased with its base, 8 */
    Sluice__Control__Lease *l2 = lease(w, "w1");
    cr_assert_eq(l2->ref->split, 2);
    cr_assert_eq(l2->order_base_plus_one, 9);
    sl_master_state_job_status_t st;
    sl_mutex_lock(&e.m->mu);
    rc = sl_master_state_job_status(e.m->st, "j", &st, &err);
    sl_mutex_unlock(&e.m->mu);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    cr_assert_eq(st.done, 2);
    cr_assert(st.deterministic);
    cr_assert_eq(st.order_window, 2);
    cr_assert_eq(st.order_prefix, 2);
    /* split 0 again with another count: an error naming it, nothing changed */
    sr.ref = l0->ref;
    sr.batches = 6;
    Sluice__Dpp__Error *er2 = (void *)call(w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_ERROR);
    cr_assert_str_eq(er2->message, "batches counted: job 'j' split 0: deterministic order: split "
                                   "at position 0 counted 5 batches, now 6: its batches were cut "
                                   "differently");
    done(&er2->base);
    done(&l0->base);
    done(&l1->base);
    done(&l2->base);
    close(w);
    env_fini(&e);
}

/* A heartbeat of counts (det28h): a split's count goes as soon as it is
 * cut whole, before its SPLIT_READ; the master journals it and the same
 * reply carries the bases it made known. SPLIT_READ must agree with it;
 * a heartbeat whose count disagrees is answered ERROR naming both. */
Test(master_server, counts_at_cut_come_in_a_heartbeat)
{
    env e;
    env_init(&e, 100000);
    sl_error_t err = {0};
    sl_wh_table_t *t = NULL;
    sl_wh_splits_t *sp = NULL;
    cr_assert_eq(sl_wh_table_open(e.table, NULL, &t, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_table_splits(t, NULL, 1, &sp, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sp->count, 8);
    sl_master_state_job_spec_t spec = {.job_id = "j",
                                       .splits = sp->items,
                                       .num_splits = sp->count,
                                       .epochs = 1,
                                       .spec_json = "{}",
                                       .ranks = 2,
                                       .min_workers = 1,
                                       .max_workers = 1,
                                       .deterministic = true,
                                       .order_window = 2};
    sl_mutex_lock(&e.m->mu);
    sl_err_t rc = sl_master_state_job_add(e.m->st, &spec, &err);
    sl_mutex_unlock(&e.m->mu);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    sl_wh_splits_destroy(sp);
    sl_wh_table_close(t);
    int w = worker(&e, "w1");
    Sluice__Control__Lease *l0 = lease(w, "w1"), *l1 = lease(w, "w1");
    cr_assert_eq(l0->ref->split, 0);
    cr_assert_eq(l1->ref->split, 1);
    cr_assert_eq(l1->order_base_plus_one, 0);
    /* split 0 cut whole into 5 batches, none committed yet */
    Sluice__Control__SplitRef *refs[3] = {l0->ref, l1->ref, NULL};
    Sluice__Control__SplitCount c0 = SLUICE__CONTROL__SPLIT_COUNT__INIT, *cp = &c0;
    c0.ref = l0->ref;
    c0.batches = 5;
    Sluice__Control__Heartbeat h = SLUICE__CONTROL__HEARTBEAT__INIT;
    h.worker_id = "w1";
    h.n_leases = 2;
    h.leases = refs;
    h.n_counts = 1;
    h.counts = &cp;
    Sluice__Control__HeartbeatReply *hr =
        (void *)call(w, SL_RPC_HEARTBEAT, &h.base, SL_RPC_HEARTBEAT_REPLY);
    cr_assert_eq(hr->n_revoked, 0);
    cr_assert_eq(hr->n_bases, 2, "split 1's base is known in the same reply");
    cr_assert_eq(hr->bases[0]->ref->split, 0);
    cr_assert_eq(hr->bases[0]->first_g, 0);
    cr_assert_eq(hr->bases[1]->ref->split, 1);
    cr_assert_eq(hr->bases[1]->first_g, 5);
    done(&hr->base);
    sl_master_state_job_status_t st;
    sl_mutex_lock(&e.m->mu);
    rc = sl_master_state_job_status(e.m->st, "j", &st, &err);
    sl_mutex_unlock(&e.m->mu);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    cr_assert_eq(st.order_prefix, 1);
    cr_assert_eq(st.done, 0, "counted, its rows not committed: not done");
    /* the window moved with the count, before any commit: split 2 leased,
     * its base not known yet (split 1 is not counted) */
    Sluice__Control__Lease *l2 = lease(w, "w1");
    cr_assert_eq(l2->ref->split, 2);
    cr_assert_eq(l2->order_base_plus_one, 0);
    /* split 1's count: split 2's base, 8, in the reply; the same count of
     * split 0 again is taken as it is */
    refs[2] = l2->ref;
    Sluice__Control__SplitCount c1 = SLUICE__CONTROL__SPLIT_COUNT__INIT, *cps[2] = {&c1, &c0};
    c1.ref = l1->ref;
    c1.batches = 3;
    h.n_leases = 3;
    h.n_counts = 2;
    h.counts = cps;
    hr = (void *)call(w, SL_RPC_HEARTBEAT, &h.base, SL_RPC_HEARTBEAT_REPLY);
    cr_assert_eq(hr->n_bases, 3);
    cr_assert_eq(hr->bases[2]->ref->split, 2);
    cr_assert_eq(hr->bases[2]->first_g, 8);
    done(&hr->base);
    /* SPLIT_READ agreeing with the journaled count: done */
    Sluice__Control__RowRange er = SLUICE__CONTROL__ROW_RANGE__INIT, *erp = &er;
    er.from_row = 0;
    er.to_row = 500;
    Sluice__Control__SplitRead sr = SLUICE__CONTROL__SPLIT_READ__INIT;
    sr.ref = l0->ref;
    sr.n_empty = 1;
    sr.empty = &erp;
    sr.counted = true;
    sr.batches = 5;
    Sluice__Control__SplitReadReply *srr =
        (void *)call(w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_SPLIT_READ_REPLY);
    cr_assert_eq(srr->state, SLUICE__CONTROL__SPLIT_READ_REPLY__STATE__DONE);
    done(&srr->base);
    /* one that disagrees: an error naming both counts */
    sr.ref = l1->ref;
    sr.batches = 4;
    Sluice__Dpp__Error *er2 = (void *)call(w, SL_RPC_SPLIT_READ, &sr.base, SL_RPC_ERROR);
    cr_assert_str_eq(er2->message, "batches counted: job 'j' split 1: deterministic order: split "
                                   "at position 1 counted 3 batches, now 4: its batches were cut "
                                   "differently");
    done(&er2->base);
    close(w);
    /* a heartbeat whose count disagrees (the worker reconnected with its
     * leases): the same error */
    w = register_as(&e, "w1", 0, &refs[1], 2, SL_RPC_REGISTERED, NULL, 0);
    c1.batches = 2;
    h.n_leases = 2;
    h.leases = &refs[1];
    h.n_counts = 1;
    h.counts = cps;
    er2 = (void *)call(w, SL_RPC_HEARTBEAT, &h.base, SL_RPC_ERROR);
    cr_assert_str_eq(er2->message, "batches counted: job 'j' split 1: deterministic order: split "
                                   "at position 1 counted 3 batches, now 2: its batches were cut "
                                   "differently");
    done(&er2->base);
    done(&l0->base);
    done(&l1->base);
    done(&l2->base);
    close(w);
    env_fini(&e);
}

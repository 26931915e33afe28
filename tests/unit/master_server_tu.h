/* The fixture of the master process's tests over real sockets
 * (master_server_test.c, master_server_workers_test.c,
 * master_server_conn_test.c): a master on the counting allocator of
 * testutil.h over a generated table and a state directory, submit, and
 * fake workers and trainer clients that speak proto/control.proto to it
 * (register, lease, heartbeat, attach, commit) with the job's JSON view.
 * Each test file includes it once. */
#ifndef SLUICE_TESTS_MASTER_SERVER_TU_H
#define SLUICE_TESTS_MASTER_SERVER_TU_H

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

static inline void env_init(env *e, uint64_t lease_ms)
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

static inline void env_restart(env *e)
{
    sl_master_stop(e->m);
    sl_error_t err = {0};
    e->o.state_dir = e->state;
    cr_assert_eq(sl_master_start(&e->o, &e->m, &err), SL_OK, "%s", err.msg);
}

static inline void env_fini(env *e)
{
    sl_master_stop(e->m);
    tu_alloc_assert_clean(&e->ta);
    tu_rm_tree(e->root);
}

static inline sl_err_t submit(env *e, const char *extra, sl_error_t *err)
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

static inline int dial(env *e)
{
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(sl_master_address(e->m), 2000, &fd, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_rpc_set_recv_timeout(fd, 5000, &err), SL_OK);
    return fd;
}

/* Send one frame and receive the answer, which must be of type want. */
static inline ProtobufCMessage *call(int fd, sl_rpc_type_t type, const ProtobufCMessage *msg,
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

static inline void done(ProtobufCMessage *msg)
{
    sl_rpc_frame_t f = {.msg = msg, .allocator = NULL};
    sl_rpc_frame_free(&f);
}

/* REGISTER as worker id (process incarnation inc, holding leases
 * refs[0..n)) on a new connection; want REGISTERED or ERROR. @return the
 * connection (the ERROR's message in *why when want is ERROR). */
static inline int register_as(env *e, const char *id, uint64_t inc,
                              Sluice__Control__SplitRef **refs, size_t n, sl_rpc_type_t want,
                              char *why, size_t cap)
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

static inline int worker(env *e, const char *id)
{
    return register_as(e, id, 0, NULL, 0, SL_RPC_REGISTERED, NULL, 0);
}

static inline Sluice__Control__Lease *lease(int fd, const char *id)
{
    Sluice__Control__LeaseRequest q = SLUICE__CONTROL__LEASE_REQUEST__INIT;
    q.worker_id = (char *)id;
    q.job_id = "j";
    return (void *)call(fd, SL_RPC_LEASE_REQUEST, &q.base, SL_RPC_LEASE);
}

static inline Sluice__Control__HeartbeatReply *heartbeat(int fd, const char *id,
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
static inline int client_rank(env *e, const char *id, uint32_t rank, uint32_t world,
                              const char *sharding, uint32_t *nworkers)
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

static inline int client(env *e, const char *id, uint32_t *nworkers)
{
    return client_rank(e, id, 0, 1, "dynamic", nworkers);
}

static inline int commit(int fd, const char *client_id, uint64_t nonce,
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

static inline json_t *job_json(env *e)
{
    json_t *j = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_master_admin_job_json(e->m, "j", &j, &err), SL_OK, "%s", err.msg);
    return j;
}

static inline json_int_t jint(json_t *o, const char *k)
{
    cr_assert(json_is_integer(json_object_get(o, k)), "key %s", k);
    return json_integer_value(json_object_get(o, k));
}

#endif

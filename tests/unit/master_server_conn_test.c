/* Tests of the master process over real sockets (the fixture:
 * master_server_tu.h), its control socket under abuse: garbage and frames
 * of the wrong kind, an error closing the connection, pushes reaching
 * every client past the round budget, the cluster secret and the
 * connection limits, and every allocation failure of the master's start
 * and of a worker's and a client's session in turn (refused cleanly,
 * nothing leaks: the counting allocator of testutil.h). */
#include "master_server_tu.h"

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

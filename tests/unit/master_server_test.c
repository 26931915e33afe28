/* Tests of the master process (src/dpp/master/process/master.h) over real
 * sockets (the fixture: master_server_tu.h): fake workers and trainer
 * clients speak proto/control.proto to it. Covers job submission (and its
 * refusals), register / lease / heartbeat / split read, attach / commit
 * (overlap, idempotent retry, across a restart), static sharding and the
 * ranks a client may attach as, split failures failing the job, client
 * records evicted when idle, the trainer wait the autoscaler reads, resume
 * tokens of every rank, the fleet's fair share, and lease expiry and
 * revocation. Every master runs on the counting allocator of testutil.h
 * (nothing leaks, every free has its size). The workers' side (worker
 * ids, heartbeats, the deterministic order) is in
 * master_server_workers_test.c, the control socket under abuse and every
 * allocation failure of a session in master_server_conn_test.c. */
#include "master_server_tu.h"

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

/* Tests of the master process over real sockets (the fixture:
 * master_server_tu.h), the workers' side: one live process per worker id,
 * a heartbeat renewing only the leases it names, the job's dedup factor
 * from the workers' heartbeats, and the deterministic order on the worker
 * wire (bases, counts in SPLIT_READ and at cut in a heartbeat). Every
 * master runs on the counting allocator of testutil.h. */
#include "master_server_tu.h"

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

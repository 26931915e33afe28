/* The worker under a master (src/dpp/worker/lease/lease_client.h), its
 * connection: a lost master connection re-established, a refused
 * registration, bad leases and an unreachable master; and `sluice worker
 * --master ... --admin ...` as a process under the fake master. */
#include "lease_client_util.h"

/* A lease of every split queued at f (finish: then "finished"), f's
 * connection dropped after drop_after_reads SPLIT_READs and REGISTERs
 * refused after refuse_after (0: never); the worker and a client started. */
static sl_worker_t *start_dropping(fake_t *f, bool finish, int drop_after_reads,
                                   uint32_t refuse_after, sl_pipeline_job_t **job,
                                   sl_worker_lease_client_t **ms, client_t *c)
{
    fm_start(f, splits, spec_of(false, false));
    for (uint32_t s = 0; s < splits->count; s++)
        fm_add(f, s, 40 + s, 0, NULL, 0);
    f->finish = finish;
    f->drop_after_reads = drop_after_reads;
    f->refuse_after = refuse_after;
    sl_worker_t *w = start_worker(f, job, ms);
    client_start(c, f, sl_worker_port(w), 0);
    return w;
}

/* The master drops the connection: the worker registers again, and the
 * rest of the work is read and reported. */
Test(lease_client, reconnects_after_the_master_connection_drops)
{
    fake_t f;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    client_t c;
    sl_worker_t *w = start_dropping(&f, true, 2, 0, &job, &ms, &c);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    wait_until(&f, all_read, 10); /* reported without waiting for the stop */
    sl_worker_stop(w);
    sl_worker_lease_client_stats_t mst;
    sl_worker_lease_client_stats(ms, &mst);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.registers, 2);
    cr_assert_eq(f.nreads, f.nq);
    /* the second REGISTER, same incarnation, named every lease held */
    cr_assert(!f.unnamed_lease, "a REGISTER left out a lease the worker held");
    cr_assert(!f.named_unknown);
    check_leases(&f, false, false, 0);
    pthread_mutex_unlock(&f.mu);
    cr_assert_eq(mst.reconnects, 1);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* The master refuses a re-registration for good (another live process
 * took the worker id while the connection was down): the worker fails
 * with the master's message at once, and does not keep trying. */
Test(lease_client, refused_registration_fails_the_worker)
{
    fake_t f;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    client_t c;
    sl_worker_t *w = start_dropping(&f, false, 1, 1, &job, &ms, &c);
    sl_error_t err = {0};
    sl_err_t rc = sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err);
    cr_assert_eq(rc, SL_ERR_INVALID, "%s: %s", sl_err_str(rc), err.msg);
    cr_assert(strstr(err.msg, "worker id 'w1' is in use by another live worker process") != NULL,
              "%s", err.msg);
    usleep(300 * 1000);
    pthread_mutex_lock(&f.mu);
    cr_assert_eq(f.registers, 2, "no retry loop after a refusal for good");
    pthread_mutex_unlock(&f.mu);
    sl_worker_stop(w);
    pthread_join(c.th, NULL);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

/* A todo range past the split's rows fails the worker with a message that
 * names it; a master that cannot be reached fails start, naming it. */
Test(lease_client, bad_lease_and_unreachable_master)
{
    fake_t f;
    fm_start(&f, splits, spec_of(false, false));
    fm_add(&f, 0, 60, 0, NULL, 0);
    sl_dpp_row_range_t bad = {10, splits->items[1].num_rows + 5};
    fm_add(&f, 1, 61, 0, &bad, 1);
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c;
    client_start(&c, &f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    sl_err_t rc = sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err);
    cr_assert_eq(rc, SL_ERR_PROTOCOL, "%s", err.msg);
    cr_assert(strstr(err.msg, "todo range 0") && strstr(err.msg, "split 1"), "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);

    /* nobody listens there any more */
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%u", f.port);
    sl_worker_lease_client_opts_t mo = {.master = master,
                                        .worker_id = "w1",
                                        .serve_address = "127.0.0.1:1",
                                        .connect_timeout_ms = 500};
    sl_worker_lease_client_t *m2 = NULL;
    rc = sl_worker_lease_client_new(&mo, &m2, &err);
    cr_assert_neq(rc, SL_OK);
    cr_assert_null(m2);
    cr_assert(strstr(err.msg, master), "%s", err.msg);
}

/* ---- `sluice worker --master ... --admin ...` ---- */

/* GET path from 127.0.0.1:port; the status code, the body in buf. */
static int http_get(uint16_t port, const char *path, char *buf, size_t cap)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    int fd;
    sl_error_t err = {0};
    cr_assert_eq(sl_rpc_connect(addr, 2000, &fd, &err), SL_OK, "%s", err.msg);
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < cap && (r = read(fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(fd);
    int code = 0;
    cr_assert_eq(sscanf(buf, "HTTP/1.%*d %d", &code), 1, "%s", buf);
    return code;
}

/* Read lines from the child's stdout until one starts with prefix; the
 * port after its last ':'. */
static uint16_t port_line(FILE *out, const char *prefix)
{
    char line[512];
    while (fgets(line, sizeof line, out)) {
        if (strncmp(line, prefix, strlen(prefix)) != 0) continue;
        char *colon = strrchr(line, ':');
        cr_assert_not_null(colon, "%s", line);
        return (uint16_t)atoi(colon + 1);
    }
    cr_assert_fail("no '%s' line from sluice worker", prefix);
    return 0;
}

static bool no_leases_left(fake_t *f)
{
    return f->next == f->nq && f->nreads == f->nq;
}

Test(lease_client, cli_worker_under_a_master_with_admin)
{
    const char *bin = tu_binary();
    fake_t f;
    fm_start(&f, splits, spec_of(false, true));
    for (uint32_t s = 0; s < splits->count; s++)
        fm_add(&f, s, 80 + s, 0, NULL, 0);
    f.hold = true;
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%u", f.port);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execl(bin, bin, "worker", "--master", master, "--listen", "127.0.0.1:0", "--admin",
              "127.0.0.1:0", "--worker-id", "w1", "--threads", "2", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    FILE *out = fdopen(pfd[0], "r");
    uint16_t admin = port_line(out, "admin on ");
    uint16_t serve = port_line(out, "listening on ");
    char body[16384];
    cr_assert_eq(http_get(admin, "/healthz", body, sizeof body), 200, "%s", body);
    cr_assert_eq(http_get(admin, "/readyz", body, sizeof body), 503, "%s", body);
    cr_assert(strstr(body, "waiting"), "%s", body);

    pthread_mutex_lock(&f.mu);
    f.hold = false;
    pthread_mutex_unlock(&f.mu);
    client_t c;
    client_start(&c, &f, serve, 0);
    wait_until(&f, no_leases_left, 20);
    cr_assert_eq(http_get(admin, "/readyz", body, sizeof body), 200, "%s", body);
    cr_assert_eq(http_get(admin, "/metrics", body, sizeof body), 200, "%s", body);
    char want[128];
    snprintf(want, sizeof want, "sluice_worker_leases_total{job=\"jobx\"} %u\n", f.nq);
    cr_assert(strstr(body, want), "%s", body);
    cr_assert(strstr(body, "sluice_worker_split_reads_total"), "%s", body);
    /* every sample names the job; the start time comes first (docs/WORKER.md) */
    cr_assert(strstr(body, "sluice_worker_split_reads_total{job=\"jobx\"} "), "%s", body);
    cr_assert(strstr(body, "\nsluice_worker_start_time_seconds{job=\"jobx\"} "), "%s", body);
    cr_assert_eq(http_get(admin, "/status", body, sizeof body), 200, "%s", body);
    cr_assert(strstr(body, "\"job_id\":\"jobx\"") && strstr(body, "\"master\""), "%s", body);
    cr_assert_eq(http_get(admin, "/nope", body, sizeof body), 404, "%s", body);

    pthread_mutex_lock(&f.mu);
    f.finish = true; /* the next lease request hears "finished": the worker exits */
    pthread_mutex_unlock(&f.mu);
    int status = -1;
    for (int i = 0; i < (int)(tu_timeout(20) * 100); i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        usleep(10000);
    }
    if (!WIFEXITED(status)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("sluice worker did not exit");
    }
    cr_assert_eq(WEXITSTATUS(status), 0);
    char line[512];
    bool said = false;
    while (fgets(line, sizeof line, out))
        said |= strstr(line, "no more work from the master") != NULL;
    fclose(out);
    cr_assert(said, "the worker says why it exits");
    pthread_join(c.th, NULL);
    cr_assert(c.ended);
    pthread_mutex_lock(&f.mu);
    check_leases(&f, true, false, 0);
    pthread_mutex_unlock(&f.mu);
    fm_stop(&f);
    no_thread_fails();
}

/* A shuffle window under a master shuffles within a batch only (a batch
 * stays one row range), and a batch's order depends only on where it
 * starts: the same split leased again after other leases gives the same
 * batches in the same order. */
Test(lease_client, shuffle_window_stays_within_a_batch)
{
    fake_t f;
    fm_start(&f, splits, spec_shuffled(false, false, true));
    fm_add(&f, 0, 1, 0, NULL, 0);
    fm_add(&f, 1, 2, 0, NULL, 0);
    fm_add(&f, 0, 3, 0, NULL, 0);
    f.finish = true;
    sl_pipeline_job_t *job;
    sl_worker_lease_client_t *ms;
    sl_worker_t *w = start_worker(&f, &job, &ms);
    client_t c;
    client_start(&c, &f, sl_worker_port(w), 0);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, (int)(tu_timeout(20) * 1000), &err), SL_OK, "%s", err.msg);
    pthread_join(c.th, NULL);
    sl_worker_stop(w);
    pthread_mutex_lock(&f.mu);
    in_order = false;
    check_leases(&f, false, false, 0);
    in_order = true;
    uint32_t pairs = 0, moved = 0;
    for (uint32_t i = 0; i < f.ngot; i++) {
        const got_batch_t *a = &f.got[i];
        if (a->generation != 1) continue;
        for (uint32_t j = 0; j < f.ngot; j++) {
            const got_batch_t *b = &f.got[j];
            if (b->generation != 3 || b->from != a->from) continue;
            cr_assert_eq(b->to, a->to);
            cr_assert_eq(memcmp(a->ids, b->ids, a->n * sizeof *a->ids), 0,
                         "batch at row %lu: a different order the second time",
                         (unsigned long)a->from);
            pairs++;
        }
        for (uint32_t k = 0; k < a->n; k++)
            moved += a->ids[k] != ref[0].ids[a->from + k];
    }
    pthread_mutex_unlock(&f.mu);
    cr_assert_geq(pairs, 3);
    cr_assert_gt(moved, 0, "rows were shuffled");
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
    fm_stop(&f);
    no_thread_fails();
}

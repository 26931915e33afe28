/* The DPP worker end to end: generated tables (criteo-like and
 * sessions-like, several files and stripes) -> worker (read, filter, batch,
 * dedup, transform, encode) -> TCP -> trainer clients (sl_trainer_*).
 * Every sample id of the table arrives exactly once per epoch, with one and
 * with three clients; filters keep what they should, with weights; stored
 * dedup groups are served as stored; and the `sluice worker` program serves
 * a job, exits when done, and rejects a bad spec listing every problem by
 * JSON path (exit 2). Transforms against a reference:
 * worker_transforms_test.c. */
#include "worker_e2e_util.h"

Test(worker_e2e, criteo_two_epochs_one_client)
{
    char table[300], addr[64], spec[1024];
    const uint64_t rows = 20000;
    gen("criteo", "criteo", rows, 11, 4096, 2, table, sizeof table);
    snprintf(spec, sizeof spec,
             "{\"id\":\"e2e\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":999,\"epochs\":2}}",
             table);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, 2, addr, sizeof addr);
    uint64_t batches;
    atomic_uint *seen = run_clients(addr, 1, rows, 2, NULL, NULL, &batches);
    assert_once_per_epoch(seen, rows, 2);
    /* batches cross stripe and file boundaries, never epochs */
    cr_assert_eq(batches, 2 * 21);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert(st.finished);
    cr_assert_eq(st.samples, 2 * rows);
    cr_assert_eq(st.batches, 42);
    cr_assert_eq(st.server.batches_acked, 42);
    cr_assert_eq(st.server.samples_acked, 2 * rows);
    cr_assert_eq(st.server.redeliveries, 0);
    cr_assert_eq(st.rows_read, 2 * rows);
    cr_assert_eq(st.splits, 2 * 2 * 3, "2 files of 10000 rows, 3 stripes each, 2 epochs");
    cr_assert_leq(st.memory_peak, st.memory_limit);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

typedef struct ts_ref {
    int64_t *ts; /* by sample id */
    int64_t lo, hi;
} ts_ref_t;

static void collect_ts(void *ctx, const sl_wh_rows_t *rows)
{
    ts_ref_t *ref = ctx;
    cr_assert_not_null(rows->timestamps);
    for (uint32_t j = 0; j < rows->batch.batch_size; j++) {
        int64_t v = rows->timestamps[j];
        ref->ts[rows->batch.sample_ids[j]] = v;
        ref->lo = v < ref->lo ? v : ref->lo;
        ref->hi = v > ref->hi ? v : ref->hi;
    }
}

/* A timestamp_range filter needs the timestamps, which the worker reads
 * only for it: every row inside the range arrives once, none outside. */
Test(worker_e2e, timestamp_filter_keeps_the_rows_in_range)
{
    char table[300], addr[64], spec[1024];
    const uint64_t rows = 6000;
    gen("ts", "sessions", rows, 5, 2000, 1, table, sizeof table);
    ts_ref_t ref = {.ts = calloc(rows, sizeof *ref.ts), .lo = INT64_MAX, .hi = INT64_MIN};
    static const char *const feats[] = {"item_id"};
    read_table(table, feats, 1, collect_ts, &ref);
    int64_t *ts = ref.ts, lo = ref.lo, hi = ref.hi;
    int64_t mid = lo + (hi - lo) / 2;
    snprintf(spec, sizeof spec,
             "{\"id\":\"ts\",\"source\":{\"table\":\"%s\"},"
             "\"filters\":[{\"op\":\"timestamp_range\",\"min\":%lld,\"max\":%lld}],"
             "\"batch\":{\"size\":500}}",
             table, (long long)lo, (long long)mid);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, 2, addr, sizeof addr);
    uint64_t batches, kept = 0;
    atomic_uint *seen = run_clients(addr, 1, rows, 1, NULL, NULL, &batches);
    for (uint64_t i = 0; i < rows; i++) {
        unsigned want = ts[i] <= mid;
        cr_assert_eq(seen[i], want, "sample %lu (ts %lld) arrived %u times", (unsigned long)i,
                     (long long)ts[i], seen[i]);
        kept += want;
    }
    cr_assert(kept > 0 && kept < rows, "%lu of %lu kept", (unsigned long)kept, (unsigned long)rows);
    free(seen);
    free(ts);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* Sampling hashes sample ids, so the worker reads them for the filter even
 * when the job's batches do not carry them ("sample_ids": false). */
Test(worker_e2e, sampling_without_sample_ids_in_batches)
{
    char table[300], addr[64], spec[1024];
    const uint64_t rows = 5000;
    gen("sampled", "criteo", rows, 9, 1500, 1, table, sizeof table);
    snprintf(spec, sizeof spec,
             "{\"id\":\"sampled\",\"source\":{\"table\":\"%s\"},"
             "\"filters\":[{\"op\":\"sample\",\"rate\":0.5,\"seed\":3}],"
             "\"batch\":{\"size\":300,\"sample_ids\":false}}",
             table);
    uint64_t want = 0;
    for (int64_t id = 0; id < (int64_t)rows; id++)
        want += XXH3_64bits_withSeed(&id, sizeof id, 3) < (UINT64_C(1) << 63);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, 2, addr, sizeof addr);
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.address = addr;
    sl_trainer_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    sl_batch_t *b;
    uint64_t got = 0;
    sl_err_t rc;
    while ((rc = sl_trainer_next(t, 20000, &b, &err)) == SL_OK) {
        cr_assert_null(b->sample_ids);
        got += b->batch_size;
        sl_trainer_release(t, b);
    }
    cr_assert_eq(rc, SL_ERR_CLOSED, "%s", err.msg);
    cr_assert_eq(got, want);
    sl_trainer_close(t);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* The job specs under examples/jobs run end to end on their preset's
 * table: every transform, filter and group they name works in a worker. */
typedef struct example_check {
    const char *const *keys; /* plain keys every batch must carry */
    uint32_t num_keys;
    const char *group; /* dedup group every batch must carry, or NULL */
    atomic_uint batches;
} example_check_t;

static void check_example(void *ctx, const sl_batch_t *b)
{
    example_check_t *c = ctx;
    for (uint32_t i = 0; i < c->num_keys; i++)
        cr_assert_geq(sl_kjt_find_key(&b->sparse, c->keys[i]), 0, "no key %s", c->keys[i]);
    if (c->group != NULL) {
        cr_assert_eq(b->num_groups, 1);
        cr_assert_str_eq(b->groups[0].name, c->group);
    }
    atomic_fetch_add(&c->batches, 1);
}

static void run_example(const char *name, const char *preset, example_check_t *check,
                        bool store_user_group)
{
    char table[300], addr[64], path[1024];
    const uint64_t rows = 8000;
    snprintf(table, sizeof table, "%s/example-%s", tmpdir, preset);
    sl_wh_gen_spec_t gs;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset(preset, rows, 3, &gs, &err), SL_OK, "%s", err.msg);
    static const char *const user[] = {"user_id", "user_hist", "user_cat"};
    sl_dedup_group_spec_t group = {.name = "user", .num_features = 3, .features = user};
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 2000;
    go.writer.no_sync = true;
    go.writer.cluster_sessions = store_user_group;
    go.writer.num_dedup_groups = store_user_group ? 1 : 0;
    go.writer.dedup_groups = store_user_group ? &group : NULL;
    cr_assert_eq(sl_wh_gen_table(table, &gs, &go, NULL, &err), SL_OK, "%s", err.msg);

    const char *src = getenv("SLUICE_SOURCE_DIR");
    cr_assert_not_null(src, "SLUICE_SOURCE_DIR is not set (run through ctest)");
    snprintf(path, sizeof path, "%s/examples/jobs/%s", src, name);
    json_error_t je;
    json_t *spec = json_load_file(path, 0, &je);
    cr_assert_not_null(spec, "%s: %s", path, je.text);
    json_object_set_new(json_object_get(spec, "source"), "table", json_string(table));
    char *text = json_dumps(spec, 0);
    json_decref(spec);
    sl_pipeline_job_t *job = job_of(text);
    free(text);
    sl_worker_t *w = start(job, 2, addr, sizeof addr);
    uint64_t batches;
    atomic_uint *seen = run_clients(addr, 1, rows, job->epochs, check_example, check, &batches);
    uint64_t delivered = 0;
    for (uint64_t i = 0; i < rows * job->epochs; i++) {
        cr_assert_leq(seen[i], 1);
        delivered += seen[i];
    }
    cr_assert_gt(delivered, 0);
    cr_assert_eq(atomic_load(&check->batches), batches);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(worker_e2e, example_spec_criteo_runs)
{
    static const char *const keys[] = {"C1", "C26"};
    example_check_t c = {.keys = keys, .num_keys = 2};
    run_example("criteo.json", "criteo", &c, false);
}

Test(worker_e2e, example_spec_sessions_runs)
{
    static const char *const keys[] = {"item_x_user_cat", "position_bucket", "item_id"};
    example_check_t c = {.keys = keys, .num_keys = 3, .group = "user"};
    run_example("sessions.json", "sessions", &c, true);
}

typedef struct dedup_check {
    atomic_uint batches_with_group;
} dedup_check_t;

static void check_group(void *ctx, const sl_batch_t *b)
{
    dedup_check_t *d = ctx;
    cr_assert_eq(b->num_groups, 1);
    cr_assert_str_eq(b->groups[0].name, "user");
    cr_assert_eq(b->groups[0].unique.num_keys, 3);
    cr_assert_lt(b->groups[0].unique.stride, b->batch_size, "sessions repeat user rows");
    cr_assert_eq(sl_kjt_find_key(&b->sparse, "user_hist"), -1);
    cr_assert_geq(sl_kjt_find_key(&b->sparse, "item_id"), 0);
    atomic_fetch_add(&d->batches_with_group, 1);
}

Test(worker_e2e, sessions_dedup_two_epochs_three_clients)
{
    char table[300], addr[64], spec[1024];
    const uint64_t rows = 30000;
    gen("sessions", "sessions", rows, 5, 8192, 2, table, sizeof table);
    snprintf(spec, sizeof spec,
             "{\"id\":\"e2e-sessions\",\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":512,\"epochs\":2,\"shuffle\":{\"splits\":true,\"seed\":3},"
             "\"dedup_groups\":{\"user\":[\"user_id\",\"user_hist\",\"user_cat\"]}}}",
             table);
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, 3, addr, sizeof addr);
    dedup_check_t dc = {0};
    uint64_t batches;
    atomic_uint *seen = run_clients(addr, 3, rows, 2, check_group, &dc, &batches);
    assert_once_per_epoch(seen, rows, 2);
    cr_assert_eq(atomic_load(&dc.batches_with_group), batches);
    sl_error_t err = {0};
    cr_assert_eq(sl_worker_wait(w, 10000, &err), SL_OK, "%s", err.msg);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert_eq(st.num_groups, 1);
    cr_assert_eq(st.groups[0].rows, 2 * rows);
    cr_assert_gt(st.groups[0].factor, 4.0, "clustered sessions of ~16: factor %.2f",
                 st.groups[0].factor);
    cr_assert_lt(st.bytes_encoded * 3, st.bytes_expanded, "dedup shrinks the bytes sent");
    cr_assert_eq(st.server.samples_acked, 2 * rows);
    cr_assert_geq(st.server.clients_total, 3);
    free(seen);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

/* ---- the sluice worker program ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* Start `sluice worker ARGS...`; *out_fd reads its stdout. */
static pid_t spawn(char *const argv[], int *out_fd, const char *err_path)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(p[1], 1);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, 2);
        close(p[0]);
        close(p[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    *out_fd = p[0];
    return pid;
}

static char *read_all(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t n;
    while ((n = read(fd, buf + len, cap - 1 - len)) > 0) {
        len += (size_t)n;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    return buf;
}

Test(worker_e2e, cli_serves_and_exits_when_done)
{
    char table[300], specpath[300], errpath[300], spec[1024];
    const uint64_t rows = 10000;
    gen("criteo", "criteo", rows, 3, 4096, 1, table, sizeof table);
    snprintf(spec, sizeof spec,
             "{\"source\":{\"table\":\"%s\"},\"batch\":{\"size\":1000,\"epochs\":2}}", table);
    snprintf(specpath, sizeof specpath, "%s/job.json", tmpdir);
    snprintf(errpath, sizeof errpath, "%s/worker.err", tmpdir);
    write_file(specpath, spec);
    char *argv[] = {(char *)tu_binary(), "worker",    "--job", specpath,           "--listen",
                    "127.0.0.1:0",       "--threads", "2",     "--exit-when-done", NULL};
    int fd;
    pid_t pid = spawn(argv, &fd, errpath);
    FILE *out = fdopen(fd, "r");
    char line[256];
    cr_assert_not_null(fgets(line, sizeof line, out), "no output from sluice worker");
    unsigned port = 0;
    cr_assert_eq(sscanf(line, "listening on 127.0.0.1:%u", &port), 1, "first line: %s", line);
    cr_assert(port > 0 && port < 65536);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    uint64_t batches;
    atomic_uint *seen = run_clients(addr, 2, rows, 2, NULL, NULL, &batches);
    assert_once_per_epoch(seen, rows, 2);
    cr_assert_eq(batches, 20);
    char *rest = read_all(fd);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d, output: %s", st, rest);
    cr_assert(strstr(rest, "job finished") != NULL, "%s", rest);
    cr_assert(strstr(rest, "samples 20000") != NULL, "%s", rest);
    cr_assert(strstr(rest, "acknowledged 20 ") != NULL, "%s", rest);
    free(rest);
    free(seen);
    fclose(out);
}

Test(worker_e2e, cli_stops_on_sigterm)
{
    char table[300], specpath[300], errpath[300], spec[1024];
    gen("criteo", "criteo", 2000, 3, 4096, 1, table, sizeof table);
    snprintf(spec, sizeof spec, "{\"source\":{\"table\":\"%s\"}}", table);
    snprintf(specpath, sizeof specpath, "%s/job.json", tmpdir);
    snprintf(errpath, sizeof errpath, "%s/worker.err", tmpdir);
    write_file(specpath, spec);
    char *argv[] = {(char *)tu_binary(), "worker",      "--job", specpath,
                    "--listen",          "127.0.0.1:0", NULL};
    int fd;
    pid_t pid = spawn(argv, &fd, errpath);
    FILE *out = fdopen(fd, "r");
    char line[256];
    cr_assert_not_null(fgets(line, sizeof line, out));
    cr_assert(strncmp(line, "listening on 127.0.0.1:", 23) == 0, "%s", line);
    kill(pid, SIGTERM);
    char *rest = read_all(fd);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, rest);
    cr_assert(strstr(rest, "stopped by SIGTERM") != NULL, "%s", rest);
    cr_assert(strstr(rest, "worker summary") != NULL, "%s", rest);
    free(rest);
    fclose(out);
}

static char *run_capture(char *const argv[], int *code)
{
    char errpath[300];
    snprintf(errpath, sizeof errpath, "%s/bad.err", tmpdir);
    int fd;
    pid_t pid = spawn(argv, &fd, errpath);
    free(read_all(fd));
    close(fd);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st));
    *code = WEXITSTATUS(st);
    int e = open(errpath, O_RDONLY);
    char *text = read_all(e);
    close(e);
    return text;
}

Test(worker_e2e, cli_rejects_bad_specs_listing_every_problem)
{
    char table[300], specpath[300], spec[1024];
    gen("criteo", "criteo", 100, 3, 4096, 1, table, sizeof table);
    snprintf(specpath, sizeof specpath, "%s/bad.json", tmpdir);
    /* syntax and type problems: all listed, by JSON path */
    snprintf(spec, sizeof spec,
             "{\"bogus\":1,\"source\":{\"table\":\"%s\"},"
             "\"batch\":{\"size\":0,\"epochs\":\"two\"}}",
             table);
    write_file(specpath, spec);
    char *argv[] = {(char *)tu_binary(), "worker",      "--job", specpath,
                    "--listen",          "127.0.0.1:0", NULL};
    int code;
    char *err = run_capture(argv, &code);
    cr_assert_eq(code, 2, "%s", err);
    cr_assert(strstr(err, "$.bogus") != NULL, "%s", err);
    cr_assert(strstr(err, "$.batch.size") != NULL, "%s", err);
    cr_assert(strstr(err, "$.batch.epochs") != NULL, "%s", err);
    free(err);
    /* problems only the table's schema reveals: still exit 2, by path */
    snprintf(spec, sizeof spec,
             "{\"source\":{\"table\":\"%s\"},"
             "\"transforms\":[{\"op\":\"log1p\",\"feature\":\"nope\"},"
             "{\"op\":\"sigrid_hash\",\"feature\":\"I1\",\"table_size\":10}]}",
             table);
    write_file(specpath, spec);
    err = run_capture(argv, &code);
    cr_assert_eq(code, 2, "%s", err);
    cr_assert(strstr(err, "$.transforms[0]") != NULL, "%s", err);
    cr_assert(strstr(err, "$.transforms[1]") != NULL, "%s", err);
    free(err);
    /* usage errors */
    char *argv2[] = {(char *)tu_binary(), "worker", "--listen", "127.0.0.1:0", NULL};
    err = run_capture(argv2, &code);
    cr_assert_eq(code, 2);
    cr_assert(strstr(err, "--job") != NULL, "%s", err);
    free(err);
    char *argv3[] = {(char *)tu_binary(), "worker", "--job", specpath,
                     "--memory-limit",    "lots",   NULL};
    err = run_capture(argv3, &code);
    cr_assert_eq(code, 2);
    cr_assert(strstr(err, "--memory-limit") != NULL, "%s", err);
    free(err);
}

/* ---- a table storing the job's dedup group (RecD storage dedup) ---- */

typedef struct user_ref {
    uint64_t rows;
    int64_t *user_id;   /* by sample id */
    uint64_t *hist_sum; /* sum of user_hist ids */
    int32_t *hist_len;
    float *click;     /* the label */
    int32_t *cat_len; /* length of user_cat */
    atomic_uint batches;
} user_ref_t;

static void check_users(void *ctx, const sl_batch_t *b)
{
    user_ref_t *ref = ctx;
    cr_assert_eq(b->num_groups, 1);
    const sl_ikjt_t *ik = &b->groups[0];
    cr_assert_str_eq(ik->name, "u", "the job's name for the stored group");
    cr_assert_lt(ik->unique.stride, b->batch_size);
    const sl_kjt_t *u = &ik->unique;
    int kid = sl_kjt_find_key(u, "user_id"), kh = sl_kjt_find_key(u, "user_hist");
    cr_assert(kid >= 0 && kh >= 0);
    uint64_t *off = malloc(((size_t)u->num_keys * u->stride + 1) * sizeof *off);
    sl_kjt_offsets(u, (int64_t *)off);
    for (uint32_t i = 0; i < b->batch_size; i++) {
        int64_t id = b->sample_ids[i];
        uint32_t r = (uint32_t)ik->inverse[i];
        size_t ci = (size_t)kid * u->stride + r, hi = (size_t)kh * u->stride + r;
        cr_assert_eq(u->lengths[ci], 1);
        cr_assert_eq(u->values[off[ci]], ref->user_id[id], "sample %ld user_id", (long)id);
        cr_assert_eq(u->lengths[hi], ref->hist_len[id]);
        uint64_t sum = 0;
        for (int32_t j = 0; j < u->lengths[hi]; j++)
            sum += (uint64_t)u->values[off[hi] + j];
        cr_assert_eq(sum, ref->hist_sum[id], "sample %ld user_hist", (long)id);
    }
    free(off);
    atomic_fetch_add(&ref->batches, 1);
}

static void collect_users(void *ctx, const sl_wh_rows_t *rows)
{
    user_ref_t *ref = ctx;
    const sl_kjt_t *k = &rows->batch.sparse;
    uint32_t n = rows->batch.batch_size;
    cr_assert_str_eq(k->keys[1], "user_hist");
    cr_assert_str_eq(k->keys[2], "user_cat");
    cr_assert_eq(rows->batch.labels.cols, 1);
    uint64_t o0 = 0, o1 = 0;
    for (uint32_t i = 0; i < n; i++)
        o1 += (uint64_t)k->lengths[i];
    for (uint32_t i = 0; i < n; i++) {
        int64_t id = rows->batch.sample_ids[i];
        ref->click[id] = rows->batch.labels.data[i];
        cr_assert_eq(k->lengths[i], 1);
        ref->user_id[id] = k->values[o0++];
        ref->cat_len[id] = k->lengths[2 * n + i];
        int32_t hl = k->lengths[n + i];
        ref->hist_len[id] = hl;
        for (int32_t j = 0; j < hl; j++)
            ref->hist_sum[id] += (uint64_t)k->values[o1++];
    }
}

/* Serve a table that stores the job's dedup group; with filtered, the job
 * keeps only the rows with click == 0 that have user_cat (a feature of the
 * stored group), so batches take scattered rows of each stripe's unique
 * rows. */
static void serve_stored_groups(bool filtered)
{
    char table[300], addr[64], spec[1024];
    const uint64_t rows = 20000;
    snprintf(table, sizeof table, "%s/stored%d", tmpdir, (int)filtered);
    sl_wh_gen_spec_t gs;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("sessions", rows, 8, &gs, &err), SL_OK);
    gs.files = 2;
    gs.active_sessions = 64;
    static const char *const user[] = {"user_id", "user_hist", "user_cat"};
    sl_dedup_group_spec_t group = {.name = "user", .num_features = 3, .features = user};
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.stripe_rows = 3000;
    go.writer.no_sync = true;
    go.writer.cluster_sessions = true;
    go.writer.num_dedup_groups = 1;
    go.writer.dedup_groups = &group;
    cr_assert_eq(sl_wh_gen_table(table, &gs, &go, NULL, &err), SL_OK, "%s", err.msg);
    /* the reference, read in the expanded form */
    user_ref_t ref = {.rows = rows,
                      .user_id = calloc(rows, 8),
                      .hist_sum = calloc(rows, 8),
                      .hist_len = calloc(rows, 4),
                      .click = calloc(rows, 4),
                      .cat_len = calloc(rows, 4)};
    static const char *const feats[] = {"user_id", "user_hist", "user_cat"};
    read_table(table, feats, 3, collect_users, &ref);

    snprintf(spec, sizeof spec,
             "{\"id\":\"stored\",\"source\":{\"table\":\"%s\"},%s"
             "\"transforms\":[{\"op\":\"sigrid_hash\",\"feature\":\"item_id\",\"table_size\":99}],"
             "\"batch\":{\"size\":1000,\"epochs\":2,"
             "\"dedup_groups\":{\"u\":[\"user_cat\",\"user_hist\",\"user_id\"]}}}",
             table,
             filtered ? "\"filters\":[{\"op\":\"label_equals\",\"label\":\"click\",\"value\":0},"
                        "{\"op\":\"has_feature\",\"feature\":\"user_cat\"}],"
                      : "");
    sl_pipeline_job_t *job = job_of(spec);
    sl_worker_t *w = start(job, 2, addr, sizeof addr);
    uint64_t batches;
    atomic_uint *seen = run_clients(addr, 2, rows, 2, check_users, &ref, &batches);
    uint64_t kept = rows;
    if (filtered) {
        kept = 0;
        for (uint32_t e = 0; e < 2; e++)
            for (uint64_t i = 0; i < rows; i++) {
                unsigned want = ref.click[i] == 0.0f && ref.cat_len[i] > 0;
                cr_assert_eq(seen[e * rows + i], want, "epoch %u sample %lu arrived %u times", e,
                             (unsigned long)i, seen[e * rows + i]);
                kept += e == 0 ? want : 0;
            }
        cr_assert(kept > rows / 4 && kept < rows, "%lu of %lu rows kept", (unsigned long)kept,
                  (unsigned long)rows);
    } else {
        assert_once_per_epoch(seen, rows, 2);
    }
    uint64_t per_epoch = (kept + 999) / 1000;
    cr_assert_eq(batches, 2 * per_epoch);
    cr_assert_eq(atomic_load(&ref.batches), 2 * per_epoch);
    sl_worker_stats_t st;
    sl_worker_stats(w, &st);
    cr_assert(st.dedup_form, "the worker reads the stored groups");
    cr_assert_eq(st.rows_kept, 2 * kept);
    cr_assert_gt(st.groups[0].factor, 4.0, "factor %.2f", st.groups[0].factor);
    cr_assert_lt(st.bytes_encoded * 3, st.bytes_expanded);
    free(seen);
    free(ref.user_id), free(ref.hist_sum), free(ref.hist_len), free(ref.click), free(ref.cat_len);
    sl_worker_destroy(w);
    sl_pipeline_job_destroy(job);
}

Test(worker_e2e, stored_dedup_groups_are_served_as_stored)
{
    serve_stored_groups(false);
}

Test(worker_e2e, stored_dedup_groups_are_served_as_stored_through_filters)
{
    serve_stored_groups(true);
}

/* Kafka jobs under a DPP master (docs/KAFKA.md, docs/DESIGN.md "Kafka:
 * offsets are rows"): the real `sluice master` leases the partition
 * chunks of a bounded replay (stop "end") to two `sluice worker --master`
 * processes, and trainer clients in master mode deliver every good sample
 * id exactly once in each of two epochs, through a worker's kill -9 (its
 * chunk goes to the other worker when its lease expires), the master's
 * kill -9 and restart on its --state, and the broker's kill -9 and
 * restart; a trainer's resume token (one rank, two ranks) resumes exactly
 * after what it delivered; bad records are skipped and counted by the
 * workers; a slow trainer keeps a worker within its memory limit; JSON
 * records (source.kafka.format "json") go through a worker's kill -9 and
 * resume tokens exactly as protobuf ones. Every wait is bounded. */
#include "kafka_util.h"

#include "../kafka_records.h"
#include "fleet_util.h"

#define PARTS 3
#define N 3000 /* sample ids 0..N-1, partition = id % 3 (session id % 60) */
#define EPOCHS 2

static void suite_setup(void)
{
    ku_setup();
    fu_setup();
}

static void suite_teardown(void)
{
    fu_teardown();
}

TestSuite(kafka_fleet, .init = suite_setup, .fini = suite_teardown);

/* The records are JSON objects (source.kafka.format "json") instead of
 * Samples: set by the JSON tests before the fleet comes up. */
static bool g_json;

/* Sample id's record as a JSON object, the same values as kr_encode's. */
static size_t json_value(uint32_t id, uint64_t session, char *buf, size_t cap)
{
    char hist[96];
    size_t at = (size_t)snprintf(hist, sizeof hist, "[");
    for (uint32_t k = 0; k <= id % 3; k++)
        at += (size_t)snprintf(hist + at, sizeof hist - at, "%s%u", k ? "," : "", id + k);
    snprintf(hist + at, sizeof hist - at, "]");
    char age[32] = "";
    if (id % 5 != 0) snprintf(age, sizeof age, ", \"age\": %u", id / 2);
    return (size_t)snprintf(
        buf, cap,
        "{\"sample_id\": %u, \"session_id\": %llu, \"ts\": %u, \"click\": %u%s, "
        "\"hist\": %s, \"geo\": [[7, %u]]}",
        id, (unsigned long long)session, 1000 + id, id % 2, age, hist, id % 4);
}

#define JSON_COLUMNS                                                                               \
    "{\"sample_id\": \"sample_id\", \"session_id\": \"session_id\", \"timestamp\": \"ts\", "       \
    "\"labels\": [\"click\"], \"dense\": [\"age\"], \"sparse\": [\"hist\"], \"weighted\": "        \
    "[{\"column\": \"geo\"}]}"

static bool good_id(uint32_t id)
{
    return id % 101 != 100; /* these lack the format header: bad */
}

/* ids [0, n) to a new topic of PARTS partitions; the bad ones without
 * the format header. @return the good count. Idempotent, so that each
 * partition holds its ids in the order produced, once: a test that
 * deletes offsets counts on offset k of partition 0 being id 3k, which a
 * retried produce request (right after a broker restart) could reorder. */
static uint32_t produce_topic(const char *topic, uint32_t n)
{
    rd_kafka_t *p = kr_producer(ku_conf("linger.ms", "5", "enable.idempotence", "true", NULL));
    ku_create_topic(p, topic, PARTS, tu_timeout(30));
    uint32_t good = 0;
    for (uint32_t id = 0; id < n; id++) {
        uint64_t session = id % 60;
        int32_t part = (int32_t)(session % PARTS);
        if (g_json) {
            /* a bad one is not JSON; no header either way */
            char v[256];
            size_t len = good_id(id) ? json_value(id, session, v, sizeof v)
                                     : (size_t)snprintf(v, sizeof v, "{\"sample_id\": %u", id);
            kr_produce_raw(p, topic, part, id, session, NULL, v, len);
            good += good_id(id);
        } else if (!good_id(id)) {
            kr_produce_raw(p, topic, part, id, session, NULL, NULL, 0);
        } else {
            kr_produce(p, topic, part, id, session);
            good++;
        }
    }
    kr_flush(p, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(p);
    return good;
}

/* The replay's spec: chunks of 250 offsets, batches of 64 (or as given
 * in the slow variant); extra: more top-level keys ("" or "\"k\": v, "). */
static void job_spec_sized(char *spec, size_t cap, const char *id, const char *topic,
                           const char *extra, uint32_t chunk, uint32_t batch)
{
    snprintf(spec, cap,
             "{%s\"id\": \"%s\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], %s, \"stop\": \"end\", \"chunk\": %u, "
             "\"linger_ms\": 20}}, \"batch\": {\"size\": %u, \"epochs\": %d, "
             "\"dedup_groups\": {\"h\": [\"hist\"]}}}",
             extra, id, ku_broker.bootstrap, topic,
             g_json ? "\"format\": \"json\", \"columns\": " JSON_COLUMNS
                    : "\"schema\": " KR_SCHEMA_JSON,
             chunk, batch, EPOCHS);
}

static void job_spec(char *spec, size_t cap, const char *id, const char *topic, const char *extra)
{
    job_spec_sized(spec, cap, id, topic, extra, 250, 64);
}

/* In each epoch every good id of [0, n) seen exactly once, no bad one. */
static void assert_good_once(const atomic_uint *seen, uint32_t n)
{
    for (uint32_t e = 0; e < EPOCHS; e++) {
        uint32_t wrong = 0, first = UINT32_MAX;
        for (uint32_t id = 0; id < n; id++)
            if (atomic_load(&seen[e * n + id]) != (good_id(id) ? 1u : 0u)) {
                wrong++;
                if (first == UINT32_MAX) first = id;
            }
        cr_assert_eq(wrong, 0, "epoch %u: %u ids not delivered exactly once (first %u, seen %u)", e,
                     wrong, first, first == UINT32_MAX ? 0 : atomic_load(&seen[e * n + first]));
    }
}

/* `sluice worker --master` with a worker id and more options. */
static pid_t worker(const fu_master_t *m, const char *job, const char *id, const char *limit,
                    char *log, size_t cap)
{
    snprintf(log, cap, "%s/%s.log", fu_dir, id);
    const char *argv[] = {fu_binary(), "worker", "--master", m->ctl, "--job-id", job, "--worker-id",
                          id, "--listen", "127.0.0.1:0", "--threads", "1",
                          limit ? "--memory-limit" : NULL, limit,
                          /* with a memory limit to test, batches pile up
                           * against it, not against the read-ahead cap
                           * (which alone would keep a slow trainer's
                           * batches below the pause's high-water mark) */
                          "--max-queued", "100000", NULL};
    return fu_spawn(argv, -1, log);
}

/* The "kafka records R, bad B" and "peak accounted P" of a worker's
 * summary (printed when it exits). @return false when it has none. */
static bool worker_summary(const char *log, uint64_t *records, uint64_t *bad, uint64_t *limit,
                           uint64_t *peak)
{
    FILE *f = fopen(log, "r");
    if (!f) return false;
    char line[512];
    bool got = false;
    *records = *bad = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        if (sscanf(line, "  kafka records %llu, bad %llu", &a, &b) == 2) {
            *records = a;
            *bad = b;
        }
        if (sscanf(line, "  memory limit %llu bytes, peak accounted %llu", &a, &b) == 2) {
            *limit = a;
            *peak = b;
            got = true;
        }
    }
    fclose(f);
    return got;
}

/* A test's topic, master, job and two workers. */
typedef struct fleet {
    const char *name;
    char topic[96], spec[2048], log[2][300];
    fu_master_t m;
    char *job;
    pid_t w[2];
    uint32_t good; /* good records produced */
} fleet_t;

/* Produce ids [0, N) to a new topic, start a master and submit the job
 * (extra: more top-level keys of the spec, as job_spec). */
static void fleet_up(fleet_t *f, const char *name, const char *extra, uint32_t ranks)
{
    f->name = name;
    snprintf(f->topic, sizeof f->topic, "fleet-%s-%d", name, ku_run());
    f->good = produce_topic(f->topic, N);
    f->m = (fu_master_t){.lease_timeout_ms = 2000};
    fu_master_start(&f->m);
    job_spec(f->spec, sizeof f->spec, name, f->topic, extra);
    f->job = fu_submit(&f->m, f->spec, ranks, "dynamic", 2, 2, NULL);
}

/* Two `sluice worker --master` for the job, ids <name>-<tag>0 and 1. */
static void fleet_workers(fleet_t *f, const char *tag)
{
    for (int i = 0; i < 2; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%s%d", f->name, tag, i);
        f->w[i] = worker(&f->m, f->job, id, NULL, f->log[i], sizeof f->log[i]);
    }
}

typedef enum fault { NONE, KILL_WORKER, KILL_MASTER, KILL_BROKER } fault_t;

/* The replay by two workers to two clients, with fault injected once the
 * clients delivered about a third of epoch 0. */
static void run_replay(fault_t fault, const char *name)
{
    static fleet_t f;
    fleet_up(&f, name, "", 1);
    fleet_workers(&f, "w");
    fu_master_t *m = &f.m;
    char *job = f.job, (*log)[300] = f.log;
    pid_t *w = f.w;
    uint32_t good = f.good;
    atomic_uint *seen = calloc(EPOCHS * N, sizeof *seen);
    fu_client_t proto = {.master = m->ctl, .job = job, .rows = N, .epochs = EPOCHS, .seen = seen};
    /* slow enough that the fault lands mid-epoch */
    atomic_init(&proto.delay_us, fault == NONE ? 0 : 15000);
    /* no batch comes while the broker is down: the wait covers its restart
     * (up to 90 s below; 29 s was seen on a loaded CI machine) and 30 s more */
    if (fault == KILL_BROKER) proto.wait_s = 120;
    fu_client_t c[2];
    pthread_t th[2];
    double t0 = fu_now();
    fu_clients_start(c, th, 2, &proto);
    if (fault != NONE) {
        double deadline = fu_now() + tu_timeout(60);
        while (fu_seen_total(seen, N) < good / 3) {
            cr_assert_lt(fu_now(), deadline, "only %llu samples in time",
                         (unsigned long long)fu_seen_total(seen, N));
            usleep(10000);
        }
        cr_assert_lt(fu_seen_total(seen, N), good, "the fault came after epoch 0");
        if (fault == KILL_WORKER) {
            fu_kill9(w[0]);
            w[0] = 0;
        } else if (fault == KILL_MASTER) {
            fu_master_stop(m, SIGKILL);
            usleep(300 * 1000);
            fu_master_start(m);
        } else {
            cr_assert_eq(ku_script("kill", tu_timeout(30)), 0);
            usleep(500 * 1000);
            cr_assert_eq(ku_script("restart", tu_timeout(90)), 0);
        }
        for (int i = 0; i < 2; i++)
            atomic_store(&c[i].delay_us, 0);
    }
    fu_clients_join(c, th, 2);
    double secs = fu_now() - t0;
    assert_good_once(seen, N);
    cr_assert_eq(c[0].samples + c[1].samples, (uint64_t)EPOCHS * good);
    cr_assert(fu_job_finished(m, job));
    /* the workers leave once the master has no more work; their summaries
     * count the bad records they skipped */
    uint64_t records = 0, bad = 0;
    for (int i = 0; i < 2; i++) {
        if (!w[i]) continue;
        int ws = fu_wait_exit(w[i], 30);
        cr_assert(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                  "worker %d did not exit cleanly (%d); see %s", i, ws, log[i]);
        uint64_t r, b, limit, peak;
        cr_assert(worker_summary(log[i], &r, &b, &limit, &peak), "no summary in %s", log[i]);
        cr_assert_leq(peak, limit);
        records += r;
        bad += b;
    }
    if (fault == NONE) { /* every chunk read once an epoch: the counts are exact */
        cr_assert_eq(records, (uint64_t)EPOCHS * N);
        cr_assert_eq(bad, (uint64_t)EPOCHS * (N - good));
    } else if (fault == KILL_MASTER || fault == KILL_BROKER) {
        cr_assert_geq(bad, (uint64_t)EPOCHS * (N - good), "bad records are counted");
    }
    cr_log_info("kafka_fleet %s: %u good of %u records x %d epochs in %.2f s", name, good, N,
                EPOCHS, secs);
    fu_master_stop(m, SIGTERM);
    free(seen);
    free(job);
}

Test(kafka_fleet, bounded_replay_two_workers_two_epochs_bad_records_counted)
{
    run_replay(NONE, "replay");
}

/* JSON records (source.kafka.format "json"): the same replay, exactly
 * once through a worker's kill -9, the records that are not JSON counted. */
Test(kafka_fleet, json_records_worker_kill9_mid_epoch_exactly_once)
{
    g_json = true;
    run_replay(KILL_WORKER, "json");
    g_json = false;
}

Test(kafka_fleet, worker_kill9_mid_epoch_its_chunk_goes_to_the_other)
{
    run_replay(KILL_WORKER, "wkill");
}

Test(kafka_fleet, master_kill9_and_restart_on_its_state)
{
    run_replay(KILL_MASTER, "mkill");
}

Test(kafka_fleet, broker_kill9_and_restart_mid_epoch)
{
    run_replay(KILL_BROKER, "bkill");
}

/* Offsets retention deleted after the job was cut: the two chunks of
 * partition 0 below the new low watermark cannot be read; each lease of
 * them is reported with SPLIT_FAILED naming topic, partition and offset,
 * the workers go on, and with on_bad_split "skip" the master skips the
 * chunks (after --max-split-failures tries, each epoch) while every other
 * good id is delivered once per epoch. */
Test(kafka_fleet, deleted_offsets_fail_their_chunk_and_the_rest_goes_on)
{
    static fleet_t f;
    fleet_up(&f, "deleted", "\"on_bad_split\": \"skip\", ", 1);
    /* now retention takes offsets [0, 300) of partition 0 */
    rd_kafka_t *p = ku_client(RD_KAFKA_PRODUCER, ku_conf(NULL));
    ku_delete_records(p, f.topic, 0, 300, tu_timeout(30));
    rd_kafka_destroy(p);
    fleet_workers(&f, "w");
    fu_master_t *m = &f.m;
    char *job = f.job, *topic = f.topic, (*log)[300] = f.log;
    pid_t *w = f.w;
    atomic_uint *seen = calloc(EPOCHS * N, sizeof *seen);
    fu_client_t proto = {.master = m->ctl, .job = job, .rows = N, .epochs = EPOCHS, .seen = seen};
    fu_client_t c[2];
    pthread_t th[2];
    fu_clients_start(c, th, 2, &proto);
    fu_clients_join(c, th, 2);
    /* partition 0 holds the ids divisible by 3 in order: offset k is id 3k */
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t id = 0; id < N; id++) {
            unsigned want = good_id(id) && !(id % 3 == 0 && id / 3 < 500) ? 1u : 0u;
            cr_assert_eq(atomic_load(&seen[e * N + id]), want, "epoch %u id %u seen %u times", e,
                         id, atomic_load(&seen[e * N + id]));
        }
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m->admin, path);
    cr_assert(json_is_true(json_object_get(j, "finished")));
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_splits")), 2 * EPOCHS);
    cr_assert_eq(json_integer_value(json_object_get(j, "skipped_rows")), 500 * EPOCHS);
    json_decref(j);
    for (int i = 0; i < 2; i++) {
        int ws = fu_wait_exit(w[i], 30);
        cr_assert(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "worker %d: %d; see %s", i, ws,
                  log[i]);
    }
    fu_master_stop(m, SIGTERM);
    /* the master logged each failure with the worker's reason */
    char want[200], line[2048];
    snprintf(want, sizeof want, "(%s/0 stripe -1) failed on worker deleted-w", topic);
    char want2[200];
    snprintf(want2, sizeof want2, "kafka topic '%s' partition 0: offset 0 is gone", topic);
    FILE *lf = fopen(m->log, "r");
    cr_assert_not_null(lf);
    bool found = false;
    while (fgets(line, sizeof line, lf))
        found |= strstr(line, want) && strstr(line, want2);
    fclose(lf);
    cr_assert(found, "no split failure naming %s and '%s' in %s", want, want2, m->log);
    free(seen);
    free(job);
}

/* A slow trainer: batches wait in the worker until its budget is full;
 * the worker pauses the partition it reads (and resumes it below the
 * low-water mark) instead of fetching on, stays within --memory-limit,
 * and every good id still arrives once per epoch. */
Test(kafka_fleet, slow_trainer_pauses_the_partition_within_the_memory_limit)
{
    char topic[96], spec[2048], log[300];
    snprintf(topic, sizeof topic, "fleet-slow-%d", ku_run());
    const uint32_t n = 8 * N;
    uint32_t good = produce_topic(topic, n);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    job_spec_sized(spec, sizeof spec, "slow", topic, "", 16000, 1024);
    char *job = fu_submit(&m, spec, 1, "dynamic", 1, 1, NULL);
    /* 5 MiB: 4 of them librdkafka's prefetch, the rest for batches */
    pid_t w = worker(&m, job, "slow-w0", "5M", log, sizeof log);
    atomic_uint *seen = calloc(EPOCHS * n, sizeof *seen);
    fu_client_t proto = {.master = m.ctl, .job = job, .rows = n, .epochs = EPOCHS, .seen = seen};
    atomic_init(&proto.delay_us, 100000);
    fu_client_t c[1];
    pthread_t th[1];
    fu_clients_start(c, th, 1, &proto);
    fu_clients_join(c, th, 1);
    assert_good_once(seen, n);
    cr_assert_eq(c[0].samples, (uint64_t)EPOCHS * good);
    int ws = fu_wait_exit(w, 30);
    cr_assert(ws != -1 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "worker: %d; see %s", ws, log);
    uint64_t records, bad, limit = 0, peak = 0, pauses = 0;
    cr_assert(worker_summary(log, &records, &bad, &limit, &peak), "no summary in %s", log);
    cr_assert_eq(limit, 5u << 20);
    cr_assert_leq(peak, limit);
    FILE *f = fopen(log, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "partition paused "))
            sscanf(strstr(line, "partition paused ") + 17, "%llu", (unsigned long long *)&pauses);
    if (f) fclose(f);
    cr_assert_gt(pauses, 0, "the partition was never paused; see %s", log);
    cr_log_info("slow trainer: peak %llu of %llu bytes, %llu pauses", (unsigned long long)peak,
                (unsigned long long)limit, (unsigned long long)pauses);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

/* What the master checks with the brokers at submission: a topic that
 * does not exist is a problem naming it by its place in the spec, and a
 * bounded replay over an existing topic is cut into its chunks (1000
 * offsets per partition in chunks of 250: 12 splits). */
Test(kafka_fleet, submission_resolves_partitions_and_names_a_missing_topic)
{
    char topic[96], spec[2048], *b;
    snprintf(topic, sizeof topic, "fleet-submit-%d", ku_run());
    produce_topic(topic, N);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    snprintf(spec, sizeof spec,
             "{\"spec\": {\"id\": \"missing\", \"source\": {\"kafka\": {\"brokers\": "
             "\"%s\", \"topics\": [\"%s\", \"no-such-topic-%d\"], \"schema\": " KR_SCHEMA_JSON
             ", \"stop\": \"end\"}}}}",
             ku_broker.bootstrap, topic, ku_run());
    double t0 = fu_now();
    int st = fu_http(m.admin, "POST", "/jobs", FU_TOKEN, spec, &b);
    cr_assert_eq(st, 400, "%d %s", st, b);
    char want[160];
    snprintf(want, sizeof want, "$.spec.source.kafka.topics[1]: kafka topic 'no-such-topic-%d'",
             ku_run());
    cr_assert(strstr(b, want) != NULL, "no '%s' in %s", want, b);
    cr_assert_lt(fu_now() - t0, tu_timeout(10));
    free(b);
    job_spec(spec, sizeof spec, "cut", topic, "");
    char *job = fu_submit(&m, spec, 1, "dynamic", 1, 1, NULL);
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m.admin, path);
    cr_assert_eq(json_integer_value(json_object_get(j, "num_splits")), 12);
    cr_assert_eq(json_integer_value(json_object_get(j, "total_rows")), N);
    json_decref(j);
    fu_master_stop(&m, SIGTERM);
    free(job);
}

/* ---- resume tokens ---- */

/* A trainer rank that delivers `stop_after` batches, waits at the barrier
 * for every rank (a synchronized checkpoint: no rank delivers past it),
 * then takes its token and stops. */
typedef struct ranked {
    fu_client_t c;
    pthread_barrier_t *barrier;
} ranked_t;

static void *ranked_run(void *arg)
{
    ranked_t *r = arg;
    fu_client_t *c = &r->c;
    sl_trainer_opts_t o = sl_trainer_opts_default();
    o.master = c->master;
    o.job_id = c->job;
    o.rank = c->rank;
    o.world_size = c->world_size;
    o.prefetch = 4;
    o.reconnect_ms = (int)tu_timeout(30) * 1000;
    sl_trainer_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_trainer_connect(&o, &t, &err), SL_OK, "%s", err.msg);
    int timeout = (int)(tu_timeout(30) * 1000);
    sl_batch_t *b;
    while (c->batches < c->stop_after &&
           (c->end = sl_trainer_next(t, timeout, &b, &err)) == SL_OK) {
        for (uint32_t i = 0; i < b->batch_size; i++) {
            int64_t id = b->sample_ids[i];
            cr_assert(id >= 0 && id < N && b->origin.epoch < EPOCHS);
            atomic_fetch_add(&c->seen[(uint64_t)b->origin.epoch * N + (uint64_t)id], 1);
            c->samples++;
        }
        c->batches++;
        sl_trainer_release(t, b);
    }
    cr_assert_eq(c->batches, c->stop_after, "rank %u: %s", c->rank, err.msg);
    pthread_barrier_wait(r->barrier);
    uint8_t *tok;
    size_t len;
    cr_assert_eq(sl_trainer_resume_token(t, timeout, &tok, &len, &err), SL_OK, "%s", err.msg);
    c->token = malloc(len);
    memcpy(c->token, tok, len);
    c->token_len = len;
    sl_trainer_token_free(t, tok, len);
    sl_trainer_close(t);
    return NULL;
}

/* POST /jobs with the spec and one token per rank ("resume_tokens"). */
static void submit_tokens(const fu_master_t *m, const char *spec_json, uint32_t ranks,
                          const ranked_t *r)
{
    json_t *body =
        json_pack("{s:o, s:i, s:s, s:i, s:i}", "spec", json_loads(spec_json, 0, NULL), "ranks",
                  (json_int_t)ranks, "sharding", "dynamic", "min_workers", 2, "max_workers", 2);
    json_t *toks = json_array();
    for (uint32_t i = 0; i < ranks; i++) {
        char *b64 = fu_base64(r[i].c.token, r[i].c.token_len);
        json_array_append_new(toks, json_string(b64));
        free(b64);
    }
    json_object_set_new(body, "resume_tokens", toks);
    char *text = json_dumps(body, JSON_COMPACT), *b;
    json_decref(body);
    int st = fu_http(m->admin, "POST", "/jobs", FU_TOKEN, text, &b);
    cr_assert(st == 200 || st == 201, "POST /jobs with tokens: %d %s", st, b);
    free(text);
    free(b);
}

static void run_resume(uint32_t ranks, const char *name)
{
    static fleet_t f;
    fleet_up(&f, name, "", ranks);
    fleet_workers(&f, "a");
    fu_master_t *m = &f.m;
    char *job = f.job, *spec = f.spec;
    pid_t *w = f.w;
    uint32_t good = f.good;
    atomic_uint *before = calloc(EPOCHS * N, sizeof *before);
    atomic_uint *after = calloc(EPOCHS * N, sizeof *after);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, ranks);
    ranked_t r[2];
    pthread_t th[2];
    for (uint32_t i = 0; i < ranks; i++) {
        r[i] = (ranked_t){.c = {.master = m->ctl,
                                .job = job,
                                .rank = i,
                                .world_size = ranks,
                                .rows = N,
                                .epochs = EPOCHS,
                                .seen = before,
                                .stop_after = 9 + 4 * i},
                          .barrier = &barrier};
        pthread_create(&th[i], NULL, ranked_run, &r[i]);
    }
    for (uint32_t i = 0; i < ranks; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
    /* the trainers restart from their checkpoint: the job goes, and comes
     * back with the tokens */
    char path[300], *b;
    snprintf(path, sizeof path, "/jobs/%s", job);
    int st = fu_http(m->admin, "DELETE", path, FU_TOKEN, NULL, &b);
    cr_assert(st == 200 || st == 204, "DELETE %s: %d %s", path, st, b);
    free(b);
    for (int i = 0; i < 2; i++) { /* the fleet of the old job goes with it */
        kill(w[i], SIGTERM);
        cr_assert_neq(fu_wait_exit(w[i], 30), -1, "worker %d stays after SIGTERM", i);
    }
    submit_tokens(m, spec, ranks, r);
    fleet_workers(&f, "b");
    fu_client_t proto = {.master = m->ctl,
                         .job = job,
                         .world_size = ranks,
                         .rows = N,
                         .epochs = EPOCHS,
                         .seen = after};
    fu_client_t c[2];
    fu_clients_start(c, th, (int)ranks, &proto);
    fu_clients_join(c, th, (int)ranks);
    uint64_t before_n = 0, after_n = 0;
    for (uint32_t e = 0; e < EPOCHS; e++)
        for (uint32_t id = 0; id < N; id++) {
            unsigned x = atomic_load(&before[e * N + id]), y = atomic_load(&after[e * N + id]);
            cr_assert_eq(x + y, good_id(id) ? 1u : 0u,
                         "epoch %u id %u: %u times before the resume, %u after", e, id, x, y);
            before_n += x;
            after_n += y;
        }
    cr_assert_gt(before_n, 0);
    cr_assert_gt(after_n, 0);
    cr_assert_eq(before_n + after_n, (uint64_t)EPOCHS * good);
    cr_assert(fu_job_finished(m, job));
    for (int i = 0; i < 2; i++)
        cr_assert_neq(fu_wait_exit(w[i], 30), -1);
    for (uint32_t i = 0; i < ranks; i++)
        free(r[i].c.token);
    fu_master_stop(m, SIGTERM);
    free(before);
    free(after);
    free(job);
}

Test(kafka_fleet, resume_token_one_rank)
{
    run_resume(1, "res1");
}

Test(kafka_fleet, resume_tokens_two_ranks)
{
    run_resume(2, "res2");
}

/* JSON records resume from their tokens as protobuf records do. */
Test(kafka_fleet, json_records_resume_tokens_two_ranks)
{
    g_json = true;
    run_resume(2, "json-resume");
    g_json = false;
}

KU_TEST_MAIN

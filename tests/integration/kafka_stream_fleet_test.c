/* A Kafka stream (source.kafka without stop) under the real `sluice
 * master` with two `sluice worker --master` processes and trainer clients
 * in master mode, against the real broker (ctest fixture kafka): every id
 * produced while the job runs is delivered exactly once, through the
 * master's kill -9 and restart on its --state; a trainer's resume token
 * resumes exactly after what it delivered (before + after = produced, no
 * overlap), and so do the tokens of ranks that stopped far apart, resumed
 * with another number of ranks (version 5, combined by union). A stream never finishes and keeps
 * flowing: tail records (ids above the checked ones, each delivered at most once) are produced
 * while the checked ids are awaited, and wake the clients to stop. Every wait is bounded. */
#include "kafka_util.h"

#include "../kafka_records.h"
#include "dpp/master/state/state.h"
#include "fleet_util.h"

#define PARTS 2
#define N 2000            /* checked sample ids 0..N-1, partition id % 2 */
#define ROWS (N + 100000) /* tail ids N.. wake stopped clients */

static void suite_setup(void)
{
    ku_setup();
    fu_setup();
}

static void suite_teardown(void)
{
    fu_teardown();
}

TestSuite(kafka_stream_fleet, .init = suite_setup, .fini = suite_teardown);

typedef struct producer {
    const char *topic;
    uint64_t first, n;
    uint32_t per_second; /* 0: at once */
    pthread_t th;
} producer_t;

static void *produce_run(void *arg)
{
    producer_t *p = arg;
    rd_kafka_t *k = kr_producer(ku_conf("linger.ms", "2", NULL));
    for (uint64_t id = p->first; id < p->first + p->n; id++) {
        kr_produce(k, p->topic, (int32_t)(id % PARTS), id, (id % 40) * PARTS + id % PARTS);
        if (p->per_second && id % 50 == 49) {
            rd_kafka_poll(k, 0);
            usleep((useconds_t)(50u * 1000000u / p->per_second));
        }
    }
    kr_flush(k, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(k);
    return NULL;
}

/* Tail records (ids from next on, 20 every 100 ms) while a stream's clients
 * are awaited: a stream keeps flowing, so every chunk at its head fills up
 * and ends (a worker hands a head chunk back when another lease waits for
 * it: a_head_chunk_does_not_block_the_workers_other_partitions). */
typedef struct flow {
    const char *topic;
    uint64_t next;
    atomic_bool stop;
    pthread_t th;
} flow_t;

static void *flow_run(void *arg)
{
    flow_t *f = arg;
    while (!atomic_load(&f->stop)) {
        producer_t p = {.topic = f->topic, .first = f->next, .n = 20};
        produce_run(&p);
        f->next += 20;
        usleep(100 * 1000);
    }
    return NULL;
}

static void flow_start(flow_t *f, const char *topic)
{
    f->topic = topic;
    f->next = N;
    atomic_init(&f->stop, false);
    pthread_create(&f->th, NULL, flow_run, f);
}

static uint64_t flow_stop(flow_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    return f->next;
}

static void spec_of(char *spec, size_t cap, const char *id, const char *topic)
{
    snprintf(spec, cap,
             "{\"id\": \"%s\", \"source\": {\"kafka\": {\"brokers\": \"%s\", \"topics\": "
             "[\"%s\"], \"schema\": " KR_SCHEMA_JSON ", \"chunk\": 300, \"linger_ms\": 20}}, "
             "\"batch\": {\"size\": 32}}",
             id, ku_broker.bootstrap, topic);
}

static pid_t worker(const fu_master_t *m, const char *job, const char *id)
{
    char log[400];
    snprintf(log, sizeof log, "%s/%s.log", fu_dir, id);
    const char *argv[] = {fu_binary(), "worker",      "--master", m->ctl,     "--job-id",
                          job,         "--worker-id", id,         "--listen", "127.0.0.1:0",
                          "--threads", "1",           NULL};
    return fu_spawn(argv, -1, log);
}

static pid_t worker(const fu_master_t *m, const char *job, const char *id);

static void new_topic(const char *topic, int parts)
{
    rd_kafka_t *admin = ku_client(RD_KAFKA_PRODUCER, ku_conf(NULL));
    ku_create_topic(admin, topic, parts, tu_timeout(30));
    rd_kafka_destroy(admin);
}

/* `sluice master`, the stream job `name` of topic submitted, two workers.
 * @return the job id (malloc'd). */
static char *job_up(fu_master_t *m, const char *name, const char *topic, pid_t *w)
{
    char spec[2048];
    *m = (fu_master_t){.lease_timeout_ms = 2000};
    fu_master_start(m);
    spec_of(spec, sizeof spec, name, topic);
    char *job = fu_submit(m, spec, 1, "dynamic", 2, 2, NULL);
    for (int i = 0; i < 2; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-w%d", name, i);
        w[i] = worker(m, job, id);
    }
    return job;
}

/* The workers killed (a stream never ends them), the master stopped. */
static void job_down(fu_master_t *m, pid_t *w)
{
    for (int i = 0; i < 2; i++)
        fu_kill9(w[i]);
    fu_master_stop(m, SIGTERM);
}

static uint64_t seen_below(const atomic_uint *seen, uint64_t n)
{
    uint64_t t = 0;
    for (uint64_t i = 0; i < n; i++)
        t += atomic_load(&seen[i]) > 0;
    return t;
}

/* Wait (bounded) until every id below N was seen. */
static void await_all(const atomic_uint *seen, const char *what)
{
    double deadline = fu_now() + tu_timeout(90);
    while (seen_below(seen, N) < N) {
        cr_assert_lt(fu_now(), deadline, "%s: only %llu of %d ids delivered in time", what,
                     (unsigned long long)seen_below(seen, N), N);
        usleep(20 * 1000);
    }
}

/* Stop the clients: each closes after its next batch, which tail records
 * (ids from *tail on) bring. Their ids may arrive at most once. */
static void stop_clients(fu_client_t *c, pthread_t *th, int n, const char *topic, uint64_t *tail)
{
    for (int i = 0; i < n; i++)
        atomic_store(&c[i].stop, true);
    double deadline = fu_now() + tu_timeout(60);
    for (;;) {
        bool all = true;
        for (int i = 0; i < n; i++)
            all = all && atomic_load(&c[i].finished);
        if (all) break;
        cr_assert_lt(fu_now(), deadline, "clients did not stop");
        producer_t p = {.topic = topic, .first = *tail, .n = 20};
        produce_run(&p);
        *tail += 20;
        usleep(100 * 1000);
    }
    fu_clients_join(c, th, n);
}

static void assert_once(const atomic_uint *seen, uint64_t tail)
{
    uint32_t wrong = 0, first = UINT32_MAX;
    for (uint32_t id = 0; id < N; id++)
        if (atomic_load(&seen[id]) != 1) {
            wrong++;
            if (first == UINT32_MAX) first = id;
        }
    cr_assert_eq(wrong, 0, "%u ids not delivered exactly once (first %u: %u times)", wrong, first,
                 first == UINT32_MAX ? 0 : atomic_load(&seen[first]));
    for (uint64_t id = N; id < tail; id++)
        cr_assert_leq(atomic_load(&seen[id]), 1, "tail id %llu twice", (unsigned long long)id);
}

static void run_stream(bool kill_master, const char *name)
{
    char topic[96];
    snprintf(topic, sizeof topic, "sfleet-%s-%d", name, ku_run());
    new_topic(topic, PARTS);
    /* a first third before the job, the rest while it runs */
    producer_t before = {.topic = topic, .first = 0, .n = N / 3};
    produce_run(&before);
    fu_master_t m;
    pid_t w[2];
    char *job = job_up(&m, name, topic, w);
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_client_t proto = {.master = m.ctl, .job = job, .rows = ROWS, .epochs = 0, .seen = seen};
    fu_client_t c[2];
    pthread_t th[2];
    fu_clients_start(c, th, 2, &proto);
    producer_t during = {.topic = topic, .first = N / 3, .n = N - N / 3, .per_second = 1500};
    pthread_create(&during.th, NULL, produce_run, &during);
    if (kill_master) {
        double deadline = fu_now() + tu_timeout(60);
        while (seen_below(seen, N) < N / 2) {
            cr_assert_lt(fu_now(), deadline, "only %llu ids before the fault",
                         (unsigned long long)seen_below(seen, N));
            usleep(10 * 1000);
        }
        fu_master_stop(&m, SIGKILL);
        usleep(300 * 1000);
        fu_master_start(&m);
    }
    pthread_join(during.th, NULL);
    flow_t flow;
    flow_start(&flow, topic);
    await_all(seen, name);
    uint64_t tail = flow_stop(&flow);
    stop_clients(c, th, 2, topic, &tail);
    assert_once(seen, tail);
    /* the job is a stream: never finished; its partition positions show */
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m.admin, path);
    cr_assert(json_is_false(json_object_get(j, "finished")));
    cr_assert_eq(json_array_size(json_object_get(j, "kafka")), PARTS);
    json_decref(j);
    job_down(&m, w);
    free(seen);
    free(job);
}

Test(kafka_stream_fleet, every_id_once_while_the_producer_runs)
{
    run_stream(false, "live");
}

Test(kafka_stream_fleet, master_kill9_and_restart_mid_stream)
{
    run_stream(true, "mkill");
}

/* The topic grows a partition while the job runs: the master's watcher
 * adds it, and the ids produced into it are delivered once too.
 *
 * (It was disabled as "an open bug: the first 1000 offsets of the new
 * partition committed as empty" on a broker just started. Nothing was
 * lost by sluice: the odd ids were never written. The producer made right
 * after CreatePartitions had metadata without partition 1, every record
 * sent to it failed with "Local: Unknown partition", and rd_kafka_flush
 * does not report failed deliveries; the partition's first offsets held
 * tail ids, which were delivered. ku_add_partitions now waits until the
 * metadata lists the new partitions, and kr_producer's producers fail the
 * test on any failed delivery.) */
Test(kafka_stream_fleet, a_partition_added_while_the_job_runs_is_read)
{
    char topic[96];
    snprintf(topic, sizeof topic, "sfleet-grow-%d", ku_run());
    new_topic(topic, 1);
    /* the first half into partition 0 (id % 2 == 0 there; odd ids wait) */
    rd_kafka_t *k = kr_producer(ku_conf("linger.ms", "2", NULL));
    for (uint64_t id = 0; id < N; id += 2)
        kr_produce(k, topic, 0, id, id % 40);
    kr_flush(k, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(k);
    fu_master_t m;
    pid_t w[2];
    char *job = job_up(&m, "grow", topic, w);
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_client_t proto = {.master = m.ctl, .job = job, .rows = ROWS, .seen = seen};
    fu_client_t c[2];
    pthread_t th[2];
    fu_clients_start(c, th, 2, &proto);
    ku_add_partitions(topic, 2, tu_timeout(30));
    /* the odd ids into the new partition 1 */
    k = kr_producer(ku_conf("linger.ms", "2", NULL));
    for (uint64_t id = 1; id < N; id += 2)
        kr_produce(k, topic, 1, id, id % 40);
    kr_flush(k, (int)(tu_timeout(30) * 1000));
    rd_kafka_destroy(k);
    flow_t flow;
    flow_start(&flow, topic);
    await_all(seen, "grow");
    uint64_t tail = flow_stop(&flow);
    stop_clients(c, th, 2, topic, &tail);
    assert_once(seen, tail);
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s", job);
    json_t *j = fu_get_json(m.admin, path);
    cr_assert_eq(json_array_size(json_object_get(j, "kafka")), 2);
    json_decref(j);
    job_down(&m, w);
    free(seen);
    free(job);
}

/* One worker, two partitions, chunks larger than either partition gets:
 * both chunks stay at their partition's head. Partition 0 gets 10 records
 * and then none; partition 1 gets 10 and then a steady trickle. A worker
 * that read its leases one after the other waited forever at the head of
 * whichever it leased first; now it hands a head chunk back at the
 * partition's end once another lease waits (kafka_source.c, HEAD_MS), so
 * every record of both partitions reaches the trainer within a bound of
 * its production, each exactly once. */
Test(kafka_stream_fleet, a_head_chunk_does_not_block_the_workers_other_partitions)
{
    char topic[96];
    snprintf(topic, sizeof topic, "sfleet-heads-%d", ku_run());
    new_topic(topic, PARTS);
    producer_t first = {.topic = topic, .first = 0, .n = 20}; /* 10 in each partition */
    produce_run(&first);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    char spec[2048];
    spec_of(spec, sizeof spec, "heads", topic);
    char *job = fu_submit(&m, spec, 1, "dynamic", 1, 1, NULL);
    pid_t w = worker(&m, job, "heads-w0");
    atomic_uint *seen = calloc(ROWS, sizeof *seen);
    fu_client_t proto = {.master = m.ctl, .job = job, .rows = ROWS, .seen = seen};
    fu_client_t c;
    pthread_t th;
    fu_clients_start(&c, &th, 1, &proto);
    /* the first 20 ids: whichever chunk the worker leased first waits at
     * its head, the other partition's ids come only by a hand-back */
    double t0 = fu_now(), deadline = t0 + tu_timeout(20);
    while (seen_below(seen, 20) < 20) {
        cr_assert_lt(fu_now(), deadline,
                     "only %llu of the first 20 ids (10 per partition) in %.0f s: a head chunk "
                     "blocks the worker's other partition",
                     (unsigned long long)seen_below(seen, 20), tu_timeout(20));
        usleep(10 * 1000);
    }
    double first_s = fu_now() - t0;
    /* a trickle into partition 1 only: 100 odd ids, 10 every 50 ms; each
     * batch must arrive while partition 0 stays idle at its head */
    rd_kafka_t *k = kr_producer(ku_conf("linger.ms", "2", NULL));
    double worst = 0;
    for (uint64_t id = 21; id < 221; id += 20) {
        for (uint64_t j = id; j < id + 20; j += 2)
            kr_produce(k, topic, 1, j, (j % 40) * PARTS + 1);
        kr_flush(k, (int)(tu_timeout(30) * 1000));
        double sent = fu_now();
        deadline = sent + tu_timeout(10);
        for (;;) {
            uint32_t got = 0;
            for (uint64_t j = id; j < id + 20; j += 2)
                got += atomic_load(&seen[j]) > 0;
            if (got == 10) break;
            cr_assert_lt(fu_now(), deadline, "ids %llu..%llu of partition 1: %u of 10 in %.0f s",
                         (unsigned long long)id, (unsigned long long)id + 18, got, tu_timeout(10));
            usleep(5 * 1000);
        }
        if (fu_now() - sent > worst) worst = fu_now() - sent;
        usleep(50 * 1000);
    }
    rd_kafka_destroy(k);
    uint64_t tail = N;
    stop_clients(&c, &th, 1, topic, &tail);
    for (uint64_t id = 0; id < N; id++) {
        unsigned want = id < 20 || (id < 221 && id % 2 == 1) ? 1 : 0;
        cr_assert_eq(atomic_load(&seen[id]), want, "id %llu: %u times, want %u",
                     (unsigned long long)id, atomic_load(&seen[id]), want);
    }
    for (uint64_t id = N; id < tail; id++)
        cr_assert_leq(atomic_load(&seen[id]), 1, "tail id %llu twice", (unsigned long long)id);
    cr_log_info("heads: the first 20 ids in %.2f s; partition 1's batches of 10 at most %.3f s "
                "after they were written",
                first_s, worst);
    fu_kill9(w);
    fu_master_stop(&m, SIGTERM);
    free(seen);
    free(job);
}

/* A trainer takes a resume token after some batches and "crashes"; the job
 * is resubmitted with the token, and a new trainer gets exactly the rest. */
Test(kafka_stream_fleet, resume_from_a_token_delivers_exactly_the_rest)
{
    char topic[96];
    snprintf(topic, sizeof topic, "sfleet-resume-%d", ku_run());
    new_topic(topic, PARTS);
    producer_t all = {.topic = topic, .first = 0, .n = N};
    produce_run(&all);
    fu_master_t m;
    pid_t w[2];
    char *job = job_up(&m, "resume", topic, w);
    atomic_uint *before = calloc(ROWS, sizeof *before);
    fu_client_t proto = {
        .master = m.ctl, .job = job, .rows = ROWS, .seen = before, .stop_after = 20};
    atomic_init(&proto.delay_us, 2000);
    fu_client_t c1;
    pthread_t th1;
    fu_clients_start(&c1, &th1, 1, &proto);
    fu_clients_join(&c1, &th1, 1);
    cr_assert_not_null(c1.token);
    uint64_t got = seen_below(before, N);
    cr_assert_gt(got, 0);
    cr_assert_lt(got, N, "the token came after everything");
    /* resubmitted in place with the token */
    char *b64 = fu_base64(c1.token, c1.token_len);
    json_t *body = json_pack("{s:s}", "resume_token", b64);
    char *text = json_dumps(body, JSON_COMPACT), *answer;
    char path[300];
    snprintf(path, sizeof path, "/jobs/%s/resubmit", job);
    int st = fu_http(m.admin, "POST", path, FU_TOKEN, text, &answer);
    cr_assert(st == 200 || st == 201, "POST %s: %d %s", path, st, answer);
    free(answer);
    free(text);
    json_decref(body);
    free(b64);
    atomic_uint *after = calloc(ROWS, sizeof *after);
    proto = (fu_client_t){.master = m.ctl, .job = job, .rows = ROWS, .seen = after};
    fu_client_t c2;
    pthread_t th2;
    fu_clients_start(&c2, &th2, 1, &proto);
    flow_t flow;
    flow_start(&flow, topic);
    /* before + after = every id */
    double deadline = fu_now() + tu_timeout(90);
    for (;;) {
        uint64_t both = 0;
        for (uint32_t id = 0; id < N; id++)
            both += atomic_load(&before[id]) + atomic_load(&after[id]) > 0;
        if (both == N) break;
        cr_assert_lt(fu_now(), deadline, "only %llu of %d ids before + after",
                     (unsigned long long)both, N);
        usleep(20 * 1000);
    }
    uint64_t tail = flow_stop(&flow);
    stop_clients(&c2, &th2, 1, topic, &tail);
    for (uint32_t id = 0; id < N; id++)
        cr_assert_eq(atomic_load(&before[id]) + atomic_load(&after[id]), 1,
                     "id %u: %u times before the resume, %u after", id, atomic_load(&before[id]),
                     atomic_load(&after[id]));
    for (uint64_t id = N; id < tail; id++)
        cr_assert_leq(atomic_load(&after[id]), 1, "tail id %llu twice", (unsigned long long)id);
    cr_log_info("resume: %llu ids before the token, %llu after", (unsigned long long)got,
                (unsigned long long)seen_below(after, N));
    job_down(&m, w);
    free(c1.token);
    free(before);
    free(after);
    free(job);
}

/* ---- one token per rank (version 5) ---- */

#define M 6000 /* ids produced before the job in the ranks' tests */

/* Clients of ranks 0..n-1 of a world of n from proto; rank i takes its
 * token after stop_after[i] batches (0: reads on). */
static void ranks_start(fu_client_t *c, pthread_t *th, uint32_t n, const fu_client_t *proto,
                        const uint64_t *stop_after)
{
    for (uint32_t i = 0; i < n; i++) {
        c[i] = *proto;
        c[i].rank = i;
        c[i].world_size = n;
        c[i].stop_after = stop_after != NULL ? stop_after[i] : 0;
        atomic_init(&c[i].delay_us, atomic_load(&proto->delay_us));
        atomic_init(&c[i].stop, false);
        atomic_init(&c[i].finished, false);
        pthread_create(&th[i], NULL, fu_client_run, &c[i]);
    }
}

/* Issue 28 for Kafka streams: w1 ranks that stop far apart (rank i after
 * 6 + 12 i batches: rank 0's token is taken while the others still commit
 * and hand out batches) and a job resumed from their tokens with w2 ranks
 * and new workers. Version 3 intersected whole-job tokens: the batches
 * the later ranks committed after rank 0's token were trained twice. Each
 * id below M: before + after = 1. faults: during the resumed run, a
 * worker killed with kill -9 (and started again) and the master killed
 * with kill -9 and restarted on its --state. */
static void run_ranks(uint32_t w1, uint32_t w2, const char *name, bool faults)
{
    char topic[96];
    snprintf(topic, sizeof topic, "sfleet-%s-%d", name, ku_run());
    new_topic(topic, PARTS);
    producer_t all = {.topic = topic, .first = 0, .n = M};
    produce_run(&all);
    fu_master_t m = {.lease_timeout_ms = 2000};
    fu_master_start(&m);
    char spec[2048];
    spec_of(spec, sizeof spec, name, topic);
    char *job = fu_submit(&m, spec, w1, "dynamic", 2, 2, NULL);
    pid_t w[2];
    for (int i = 0; i < 2; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-a%d", name, i);
        w[i] = worker(&m, job, id);
    }
    atomic_uint *before = calloc(ROWS, sizeof *before), *after = calloc(ROWS, sizeof *after);
    fu_client_t proto = {.master = m.ctl, .job = job, .rows = ROWS, .seen = before};
    atomic_init(&proto.delay_us, 1000);
    fu_client_t c[4];
    pthread_t th[4];
    uint64_t stop_after[4];
    for (uint32_t i = 0; i < w1; i++)
        stop_after[i] = 6 + 12 * i;
    ranks_start(c, th, w1, &proto, stop_after);
    fu_clients_join(c, th, (int)w1);
    uint64_t got = seen_below(before, M);
    cr_assert_gt(got, 0);
    cr_assert_lt(got, M, "the tokens came after everything");
    /* the job goes with its workers; submitted again with every rank's
     * token and w2 ranks */
    char path[300], *b;
    snprintf(path, sizeof path, "/jobs/%s", job);
    int st = fu_http(m.admin, "DELETE", path, FU_TOKEN, NULL, &b);
    cr_assert(st == 200 || st == 204, "DELETE %s: %d %s", path, st, b);
    free(b);
    for (int i = 0; i < 2; i++)
        fu_kill9(w[i]);
    json_t *body =
        json_pack("{s:o, s:i, s:s, s:i, s:i}", "spec", json_loads(spec, 0, NULL), "ranks",
                  (json_int_t)w2, "sharding", "dynamic", "min_workers", 2, "max_workers", 2);
    json_t *toks = json_array();
    for (uint32_t i = 0; i < w1; i++) {
        cr_assert_not_null(c[i].token, "rank %u took no token: %s", i, c[i].msg);
        cr_assert_eq(c[i].token[4], SL_MASTER_KAFKA_RANK_TOKEN_VERSION);
        char *b64 = fu_base64(c[i].token, c[i].token_len);
        json_array_append_new(toks, json_string(b64));
        free(b64);
    }
    json_object_set_new(body, "resume_tokens", toks);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    st = fu_http(m.admin, "POST", "/jobs", FU_TOKEN, text, &b);
    cr_assert(st == 200 || st == 201, "POST /jobs with %u tokens: %d %s", w1, st, b);
    free(text);
    free(b);
    for (int i = 0; i < 2; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-b%d", name, i);
        w[i] = worker(&m, job, id);
    }
    uint8_t *tokens[4];
    for (uint32_t i = 0; i < w1; i++)
        tokens[i] = c[i].token;
    proto = (fu_client_t){.master = m.ctl, .job = job, .rows = ROWS, .seen = after};
    ranks_start(c, th, w2, &proto, NULL);
    flow_t flow = {.topic = topic, .next = M}; /* the tail: ids above the checked ones */
    atomic_init(&flow.stop, false);
    pthread_create(&flow.th, NULL, flow_run, &flow);
    if (faults) {
        uint64_t at = seen_below(before, M);
        double until = fu_now() + tu_timeout(60);
        while (seen_below(after, M) < (M - at) / 3) {
            cr_assert_lt(fu_now(), until, "only %llu ids after the resume before the faults",
                         (unsigned long long)seen_below(after, M));
            usleep(10 * 1000);
        }
        fu_kill9(w[0]);
        w[0] = worker(&m, job, "faults-w0-again");
        fu_master_stop(&m, SIGKILL);
        usleep(300 * 1000);
        fu_master_start(&m);
    }
    double deadline = fu_now() + tu_timeout(90);
    for (;;) {
        uint64_t both = 0;
        for (uint32_t id = 0; id < M; id++)
            both += atomic_load(&before[id]) + atomic_load(&after[id]) > 0;
        if (both == M) break;
        cr_assert_lt(fu_now(), deadline, "only %llu of %d ids before + after",
                     (unsigned long long)both, M);
        usleep(20 * 1000);
    }
    uint64_t tail = flow_stop(&flow);
    stop_clients(c, th, (int)w2, topic, &tail);
    uint32_t twice = 0, first = UINT32_MAX;
    for (uint32_t id = 0; id < M; id++)
        if (atomic_load(&before[id]) + atomic_load(&after[id]) != 1) {
            twice++;
            if (first == UINT32_MAX) first = id;
        }
    cr_assert_eq(twice, 0, "%u ids not delivered exactly once (first %u: %u before, %u after)",
                 twice, first, first < M ? atomic_load(&before[first]) : 0,
                 first < M ? atomic_load(&after[first]) : 0);
    for (uint64_t id = M; id < tail; id++)
        cr_assert_leq(atomic_load(&after[id]), 1, "tail id %llu twice", (unsigned long long)id);
    cr_log_info("%s: %u -> %u ranks, %llu ids before the tokens, %llu after", name, w1, w2,
                (unsigned long long)got, (unsigned long long)seen_below(after, M));
    job_down(&m, w);
    for (uint32_t i = 0; i < w1; i++)
        free(tokens[i]);
    free(before);
    free(after);
    free(job);
}

Test(kafka_stream_fleet, rank_tokens_taken_apart_resume_2_to_3_ranks)
{
    run_ranks(2, 3, "ranks23", false);
}

Test(kafka_stream_fleet, rank_tokens_taken_apart_resume_3_to_2_ranks)
{
    run_ranks(3, 2, "ranks32", false);
}

Test(kafka_stream_fleet, rank_tokens_resume_1_to_4_ranks_through_kill9s)
{
    run_ranks(1, 4, "ranks14k", true);
}

KU_TEST_MAIN

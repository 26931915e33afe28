/* The real Kafka broker the Kafka integration tests run against (ctest
 * fixture "kafka", ops/kafka-broker, docs/KAFKA.md): a topic of 3
 * partitions created through the admin API takes keyed records from an
 * idempotent producer, and a consumer that joins no group (assign()) reads
 * every record back exactly once, where the delivery report put it; a
 * consumer group's committed offsets are stored and read back. Then the
 * broker is killed with SIGKILL and restarted on the same data: the records
 * and the committed offsets are still there, and the producer that lived
 * through the crash writes new records after them. Prints the restart time
 * and the synchronous commit latency. */
#include "kafka_util.h"

#include <stdint.h>

#define PARTITIONS 3
#define SESSIONS 97
#define FIRST 3000  /* records before the kill */
#define SECOND 1000 /* records after the restart */
#define TOTAL (FIRST + SECOND)

/* Where the delivery reports put each record id. */
typedef struct {
    int32_t partition;
    int64_t offset;
    rd_kafka_resp_err_t err;
    int reports;
} placement_t;

static placement_t placed[TOTAL];

/* Runs on the thread that calls rd_kafka_poll/flush: only records, so that
 * no assertion leaves a librdkafka callback. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    uintptr_t id = (uintptr_t)m->_private;
    if (id >= TOTAL) return;
    placed[id].partition = m->partition;
    placed[id].offset = m->offset;
    placed[id].err = m->err;
    placed[id].reports++;
}

static void suite_setup(void)
{
    memset(placed, 0, sizeof placed);
    ku_setup();
}

TestSuite(kafka_broker, .init = suite_setup);

static void unique_name(char *buf, size_t cap, const char *what)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, cap, "sluice-%s-%d-%lld", what, ku_run(), (long long)ts.tv_sec);
}

static rd_kafka_t *new_producer(void)
{
    rd_kafka_conf_t *conf = ku_conf("enable.idempotence", "true", "linger.ms", "5",
                                    "message.timeout.ms", "60000", NULL);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    return ku_client(RD_KAFKA_PRODUCER, conf);
}

/* Record id's key is its session ("session-NN", so a session's records
 * stay in one partition, in order) and its value "sample-NNNNNN". */
static int key_of(unsigned id, char *buf, size_t cap)
{
    return snprintf(buf, cap, "session-%02u", id % SESSIONS);
}

static int value_of(unsigned id, char *buf, size_t cap)
{
    return snprintf(buf, cap, "sample-%06u", id);
}

/* Produce ids [from, to) and wait until every one is acknowledged. */
static void produce(rd_kafka_t *p, const char *topic, unsigned from, unsigned to)
{
    for (unsigned id = from; id < to; id++) {
        char key[32], value[32];
        int klen = key_of(id, key, sizeof key), vlen = value_of(id, value, sizeof value);
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, (size_t)klen),
            RD_KAFKA_V_VALUE(value, (size_t)vlen), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)id), RD_KAFKA_V_END);
        cr_assert_eq(e, RD_KAFKA_RESP_ERR_NO_ERROR, "produce id %u to %s: %s", id, topic,
                     rd_kafka_err2str(e));
        rd_kafka_poll(p, 0);
    }
    double timeout = tu_timeout(60);
    cr_assert_eq(rd_kafka_flush(p, (int)(timeout * 1000)), RD_KAFKA_RESP_ERR_NO_ERROR,
                 "%d records to %s not acknowledged within %.0f s", rd_kafka_outq_len(p), topic,
                 timeout);
    for (unsigned id = from; id < to; id++) {
        cr_assert_eq(placed[id].reports, 1, "id %u: %d delivery reports", id, placed[id].reports);
        cr_assert_eq(placed[id].err, RD_KAFKA_RESP_ERR_NO_ERROR, "id %u not delivered: %s", id,
                     rd_kafka_err2str(placed[id].err));
    }
}

/* Ids [0, n) as the delivery reports placed them: every session in one
 * partition in produce order, every partition used, and each partition's
 * offsets exactly 0..count-1 (an idempotent producer leaves no gap and no
 * duplicate). counts[p] gets each partition's record count. */
static void check_placement(unsigned n, int64_t counts[PARTITIONS])
{
    int32_t session_partition[SESSIONS];
    int64_t session_last[SESSIONS];
    static unsigned char offset_used[PARTITIONS][TOTAL];
    memset(offset_used, 0, sizeof offset_used);
    for (unsigned s = 0; s < SESSIONS; s++) {
        session_partition[s] = -1;
        session_last[s] = -1;
    }
    for (int p = 0; p < PARTITIONS; p++)
        counts[p] = 0;
    for (unsigned id = 0; id < n; id++) {
        unsigned s = id % SESSIONS;
        int32_t p = placed[id].partition;
        int64_t off = placed[id].offset;
        cr_assert(p >= 0 && p < PARTITIONS, "id %u in partition %d", id, p);
        cr_assert(off >= 0 && off < (int64_t)n, "id %u at offset %lld", id, (long long)off);
        if (session_partition[s] < 0) session_partition[s] = p;
        cr_assert_eq(p, session_partition[s], "session %u in partitions %d and %d", s,
                     session_partition[s], p);
        cr_assert_gt(off, session_last[s], "session %u out of order at id %u", s, id);
        session_last[s] = off;
        cr_assert_eq(offset_used[p][off], 0, "partition %d offset %lld given twice", p,
                     (long long)off);
        offset_used[p][off] = 1;
        counts[p]++;
    }
    for (int p = 0; p < PARTITIONS; p++) {
        /* 97 sessions over 3 partitions: an empty one has probability 3e-17. */
        cr_assert_gt(counts[p], 0, "partition %d got no session", p);
        for (int64_t off = 0; off < counts[p]; off++)
            cr_assert_eq(offset_used[p][off], 1, "partition %d: no record at offset %lld", p,
                         (long long)off);
    }
}

/* Read the topic from the start of each partition (ku_reader: assign(),
 * no group membership, no commits) until every partition reports its end:
 * ids [0, n) must each arrive exactly once, at the partition and offset of
 * their delivery report, with their key, and nothing else may arrive. */
static void consume_all(const char *topic, unsigned n)
{
    rd_kafka_t *c = ku_reader(topic, PARTITIONS);

    static unsigned char seen[TOTAL];
    memset(seen, 0, sizeof seen);
    int64_t next[PARTITIONS] = {0};
    bool at_end[PARTITIONS] = {false};
    unsigned got = 0, ends = 0;
    double timeout = tu_timeout(60), deadline = ku_now() + timeout;
    while (ends < PARTITIONS) {
        cr_assert_lt(ku_now(), deadline, "%s: %u of %u records within %.0f s", topic, got, n,
                     timeout);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
        if (m == NULL) continue;
        int32_t p = m->partition;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            cr_assert(p >= 0 && p < PARTITIONS);
            if (!at_end[p]) ends++;
            at_end[p] = true;
            rd_kafka_message_destroy(m);
            continue;
        }
        cr_assert_eq(m->err, RD_KAFKA_RESP_ERR_NO_ERROR, "consume %s: %s", topic,
                     rd_kafka_message_errstr(m));
        char want[32];
        cr_assert_eq(m->len, 13, "partition %d offset %lld: value of %zu bytes", p,
                     (long long)m->offset, m->len);
        unsigned id = 0;
        for (int i = 7; i < 13; i++)
            id = id * 10 + (unsigned)(((char *)m->payload)[i] - '0');
        cr_assert(id < n, "partition %d offset %lld: id %u was not produced", p,
                  (long long)m->offset, id);
        int vlen = value_of(id, want, sizeof want);
        cr_assert(m->len == (size_t)vlen && memcmp(m->payload, want, m->len) == 0,
                  "partition %d offset %lld: value %.*s", p, (long long)m->offset, (int)m->len,
                  (char *)m->payload);
        int klen = key_of(id, want, sizeof want);
        cr_assert(m->key_len == (size_t)klen && memcmp(m->key, want, m->key_len) == 0,
                  "id %u: key %.*s, want %s", id, (int)m->key_len, (char *)m->key, want);
        cr_assert_eq(p, placed[id].partition, "id %u in partition %d, reported %d", id, p,
                     placed[id].partition);
        cr_assert_eq(m->offset, placed[id].offset, "id %u at offset %lld, reported %lld", id,
                     (long long)m->offset, (long long)placed[id].offset);
        cr_assert_eq(m->offset, next[p], "partition %d: offset %lld after %lld", p,
                     (long long)m->offset, (long long)next[p] - 1);
        next[p]++;
        cr_assert_eq(seen[id], 0, "id %u arrived twice", id);
        seen[id] = 1;
        got++;
        rd_kafka_message_destroy(m);
    }
    cr_assert_eq(got, n, "%s: %u records, produced %u", topic, got, n);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
}

/* A client of consumer group `group` that only commits and reads committed
 * offsets (assign()-style: it never joins the group). */
static rd_kafka_t *new_group_client(const char *group)
{
    rd_kafka_conf_t *conf = ku_conf("group.id", group, "enable.auto.commit", "false", NULL);
    return ku_client(RD_KAFKA_CONSUMER, conf);
}

/* The group coordinator answers these while it is (re)loading
 * __consumer_offsets, typically for the first commit after a broker start. */
static bool coordinator_busy(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR_NOT_COORDINATOR ||
           e == RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS ||
           e == RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE || e == RD_KAFKA_RESP_ERR__WAIT_COORD ||
           e == RD_KAFKA_RESP_ERR__TRANSPORT || e == RD_KAFKA_RESP_ERR__TIMED_OUT ||
           e == RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT;
}

static rd_kafka_resp_err_t first_error(rd_kafka_resp_err_t e,
                                       const rd_kafka_topic_partition_list_t *l)
{
    for (int i = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && i < l->cnt; i++)
        e = l->elems[i].err;
    return e;
}

/* Commit next[p] for each partition synchronously, retried while the
 * coordinator is busy; returns the seconds the successful call took and
 * counts the retries. */
static double commit(rd_kafka_t *g, const char *topic, const int64_t next[PARTITIONS], int *retries)
{
    double timeout = tu_timeout(30), deadline = ku_now() + timeout;
    for (;;) {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(PARTITIONS);
        for (int p = 0; p < PARTITIONS; p++)
            rd_kafka_topic_partition_list_add(l, topic, p)->offset = next[p];
        double t0 = ku_now();
        rd_kafka_resp_err_t e = rd_kafka_commit(g, l, 0);
        double took = ku_now() - t0;
        e = first_error(e, l);
        rd_kafka_topic_partition_list_destroy(l);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) return took;
        cr_assert(coordinator_busy(e), "commit to %s: %s", topic, rd_kafka_err2str(e));
        cr_assert_lt(ku_now(), deadline, "commit to %s: still %s after %.0f s", topic,
                     rd_kafka_err2str(e), timeout);
        (*retries)++;
        usleep(50000);
    }
}

/* The group's committed offsets for the topic must be exactly want[p]. */
static void check_committed(rd_kafka_t *g, const char *topic, const int64_t want[PARTITIONS])
{
    double timeout = tu_timeout(30), deadline = ku_now() + timeout;
    for (;;) {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(PARTITIONS);
        for (int p = 0; p < PARTITIONS; p++)
            rd_kafka_topic_partition_list_add(l, topic, p);
        rd_kafka_resp_err_t e = first_error(rd_kafka_committed(g, l, 5000), l);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
            for (int p = 0; p < PARTITIONS; p++)
                cr_assert_eq(l->elems[p].offset, want[p],
                             "%s partition %d: committed %lld, want %lld", topic,
                             l->elems[p].partition, (long long)l->elems[p].offset,
                             (long long)want[p]);
            rd_kafka_topic_partition_list_destroy(l);
            return;
        }
        rd_kafka_topic_partition_list_destroy(l);
        cr_assert(coordinator_busy(e), "committed offsets of %s: %s", topic, rd_kafka_err2str(e));
        cr_assert_lt(ku_now(), deadline, "committed offsets of %s: still %s after %.0f s", topic,
                     rd_kafka_err2str(e), timeout);
        usleep(50000);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What both tests start with: a new topic of PARTITIONS partitions (named
 * after `what`, as is the group), ids [0, FIRST) produced to it and read
 * back, each once. Returns the producer; counts[p] gets each partition's
 * record count. */
static rd_kafka_t *first_records(const char *what, char topic[128], char group[128],
                                 int64_t counts[PARTITIONS])
{
    char group_what[64];
    unique_name(topic, 128, what);
    snprintf(group_what, sizeof group_what, "%s-group", what);
    unique_name(group, 128, group_what);
    rd_kafka_t *p = new_producer();
    ku_create_topic(p, topic, PARTITIONS, tu_timeout(30));
    produce(p, topic, 0, FIRST);
    check_placement(FIRST, counts);
    consume_all(topic, FIRST);
    return p;
}

Test(kafka_broker, each_record_once_and_commits)
{
    char topic[128], group[128];
    int64_t counts[PARTITIONS];
    rd_kafka_t *p = first_records("roundtrip", topic, group, counts);
    rd_kafka_t *g = new_group_client(group);
    int retries = 0;
    enum { COMMITS = 21 };
    double took[COMMITS];
    for (int i = 0; i < COMMITS; i++)
        took[i] = commit(g, topic, counts, &retries);
    qsort(took, COMMITS, sizeof took[0], cmp_double);
    check_committed(g, topic, counts);
    fprintf(stderr,
            "kafka_broker_test: %u records over %d partitions (%lld/%lld/%lld); synchronous "
            "commit median %.2f ms, max %.2f ms (%d retries)\n",
            FIRST, PARTITIONS, (long long)counts[0], (long long)counts[1], (long long)counts[2],
            took[COMMITS / 2] * 1e3, took[COMMITS - 1] * 1e3, retries);

    rd_kafka_destroy(g);
    rd_kafka_destroy(p);
    cr_assert_eq(rd_kafka_wait_destroyed((int)(tu_timeout(10) * 1000)), 0,
                 "librdkafka handles still alive");
}

static void restart_fini(void)
{
    /* A failure between the kill and the restart must not leave the broker
     * down for the tests after this one. */
    ku_ensure_running();
}

Test(kafka_broker, kill9_restart_keeps_records, .fini = restart_fini)
{
    char topic[128], group[128];
    int64_t before[PARTITIONS];
    rd_kafka_t *p = first_records("restart", topic, group, before);
    rd_kafka_t *g = new_group_client(group);
    int retries = 0;
    commit(g, topic, before, &retries);

    /* The producer and the group client live through the crash, as a
     * worker's would. */
    double t0 = ku_now();
    cr_assert_eq(ku_script("kill", tu_timeout(20)), 0, "kill -9 of the broker failed");
    cr_assert_eq(ku_script("status", tu_timeout(10)), 3, "the broker still runs after kill -9");
    double t_killed = ku_now();
    cr_assert_eq(ku_script("restart", tu_timeout(120)), 0, "the broker did not restart");
    double t_up = ku_now();
    produce(p, topic, FIRST, TOTAL);
    double t_acked = ku_now();

    int64_t after[PARTITIONS];
    check_placement(TOTAL, after);
    for (int i = 0; i < PARTITIONS; i++)
        cr_assert_gt(after[i], before[i], "partition %d took no record after the restart", i);
    consume_all(topic, TOTAL);
    int retries_before = retries;
    check_committed(g, topic, before);
    double took = commit(g, topic, after, &retries);
    check_committed(g, topic, after);
    fprintf(stderr,
            "kafka_broker_test: kill -9 + restart: broker answers %.1f s after the kill (the "
            "kill took %.2f s); %u new records acknowledged %.1f s after the kill; first commit "
            "after the restart %.1f ms after %d NOT_COORDINATOR-like retries\n",
            t_up - t_killed, t_killed - t0, SECOND, t_acked - t_killed, took * 1e3,
            retries - retries_before);

    rd_kafka_destroy(g);
    rd_kafka_destroy(p);
    cr_assert_eq(rd_kafka_wait_destroyed((int)(tu_timeout(10) * 1000)), 0,
                 "librdkafka handles still alive");
}

KU_TEST_MAIN

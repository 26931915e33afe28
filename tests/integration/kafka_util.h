/* Helpers shared by the integration tests that run against the real Kafka
 * broker (tests/integration/kafka_*_test.c): where the broker is, the
 * ops/kafka-broker verbs (kill -9, restart, status) with a bounded wait,
 * topic creation through librdkafka's admin API, and the main() that reports
 * SKIPPED (exit 77) when the broker cannot run on this machine.
 *
 * CMake gives every such test the ctest fixture "kafka" (one broker per
 * ctest run, started by the test kafka_broker_setup) and the environment
 *   SLUICE_KAFKA_DIR     the broker's directory: bootstrap, port, data, logs;
 *                        DIR/unavailable when it cannot run here (the reason);
 *   SLUICE_KAFKA_BROKER  the ops/kafka-broker script.
 * The tests share that one broker and hold the ctest RESOURCE_LOCK
 * kafka_broker, so a test that kills it disturbs no other. A test that kills
 * the broker must leave it running: ku_setup() (each suite's .init) and
 * ku_ensure_running() restart it when a failed test left it down.
 *
 * Everything is static: each test file includes this once and ends with
 * KU_TEST_MAIN. */
#ifndef SLUICE_TESTS_KAFKA_UTIL_H
#define SLUICE_TESTS_KAFKA_UTIL_H

#include <criterion/criterion.h>

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define KU_FN static __attribute__((unused))
/* The script's exit code for "cannot run here" (ctest SKIP_RETURN_CODE). */
#define KU_SKIP 77

extern char **environ;

typedef struct {
    char dir[512];       /* SLUICE_KAFKA_DIR */
    char script[512];    /* SLUICE_KAFKA_BROKER */
    char bootstrap[128]; /* "127.0.0.1:port", from DIR/bootstrap */
} ku_broker_t;

static ku_broker_t ku_broker;

KU_FN double ku_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A number for this test process's topic, job and transaction names: its
 * pid mixed with the time of the first call in it. A pid alone repeats on
 * a long-lived broker (a loop of runs), and a topic left by an earlier run
 * then holds two producers' records. Criterion runs each test in its own
 * process, so the value is taken again when the pid changes. */
KU_FN int ku_run(void)
{
    static pid_t pid;
    static int run;
    if (pid != getpid()) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t h =
            ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec * 1000000000ull ^ (uint64_t)ts.tv_nsec;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        pid = getpid();
        run = (int)(h & 0x7fffffff);
    }
    return run;
}

/* Header `name` of message m (it must have one), as a string in buf (cut
 * at cap - 1 bytes): what a dead letter says of its source record. */
KU_FN void ku_header(rd_kafka_message_t *m, const char *name, char *buf, size_t cap)
{
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(rd_kafka_message_headers(m, &h), RD_KAFKA_RESP_ERR_NO_ERROR, "no headers");
    const void *v;
    size_t len;
    cr_assert_eq(rd_kafka_header_get_last(h, name, &v, &len), RD_KAFKA_RESP_ERR_NO_ERROR,
                 "no header %s", name);
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
}

/* The first line of dir/name into buf (newline dropped); false when the
 * file cannot be read or is empty. */
KU_FN bool ku_read_line(const char *dir, const char *name, char *buf, size_t cap)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return false;
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf[0] != '\0';
}

/* Whether the tests can run: 0 yes (ku_broker filled in), KU_SKIP when the
 * fixture found no Java, Maven or jars here (DIR/unavailable, or no
 * SLUICE_KAFKA_DIR outside ctest), 1 when the broker should be there and is
 * not (the setup test failed or did not run). Says why on stderr. */
KU_FN int ku_locate(void)
{
    const char *dir = getenv("SLUICE_KAFKA_DIR");
    const char *script = getenv("SLUICE_KAFKA_BROKER");
    if (dir == NULL || script == NULL) {
        fprintf(stderr, "SKIPPED: SLUICE_KAFKA_DIR and SLUICE_KAFKA_BROKER are not set; run this "
                        "test through ctest (fixture kafka), or start a broker with "
                        "`ops/kafka-broker start --dir D` and set SLUICE_KAFKA_DIR=D "
                        "SLUICE_KAFKA_BROKER=ops/kafka-broker\n");
        return KU_SKIP;
    }
    snprintf(ku_broker.dir, sizeof ku_broker.dir, "%s", dir);
    snprintf(ku_broker.script, sizeof ku_broker.script, "%s", script);
    char why[512];
    if (ku_read_line(dir, "unavailable", why, sizeof why)) {
        fprintf(stderr, "SKIPPED: no Kafka broker on this machine: %s\n", why);
        return KU_SKIP;
    }
    if (!ku_read_line(dir, "bootstrap", ku_broker.bootstrap, sizeof ku_broker.bootstrap) &&
        !ku_read_line(dir, "port", ku_broker.bootstrap, sizeof ku_broker.bootstrap)) {
        fprintf(stderr,
                "no Kafka broker in %s (neither bootstrap nor unavailable there): did "
                "the test kafka_broker_setup run and pass?\n",
                dir);
        return 1;
    }
    if (strchr(ku_broker.bootstrap, ':') == NULL) { /* only DIR/port: stopped meanwhile */
        long port = strtol(ku_broker.bootstrap, NULL, 10);
        snprintf(ku_broker.bootstrap, sizeof ku_broker.bootstrap, "127.0.0.1:%ld", port);
    }
    return 0;
}

/* Run `ops/kafka-broker <verb> --dir DIR`, waiting at most timeout_s
 * seconds (the script bounds its own waits; this bounds a hung script).
 * Returns its exit code, or -1 when it had to be killed or did not start. */
KU_FN int ku_script(const char *verb, double timeout_s)
{
    char *argv[] = {ku_broker.script, (char *)verb, "--dir", ku_broker.dir, NULL};
    pid_t pid;
    if (posix_spawn(&pid, ku_broker.script, NULL, NULL, argv, environ) != 0) {
        fprintf(stderr, "cannot run %s: %s\n", ku_broker.script, strerror(errno));
        return -1;
    }
    double deadline = ku_now() + timeout_s;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (r < 0 && errno != EINTR) return -1;
        if (ku_now() > deadline) {
            fprintf(stderr, "%s %s: no answer within %.0f s; killed\n", ku_broker.script, verb,
                    timeout_s);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(10000);
    }
}

/* Restart the broker when it is not running (a test that killed it failed
 * before restarting it). */
KU_FN void ku_ensure_running(void)
{
    if (ku_script("status", tu_timeout(10)) == 0) return;
    cr_assert_eq(ku_script("restart", tu_timeout(90)), 0,
                 "the Kafka broker in %s is down and would not restart", ku_broker.dir);
}

/* A suite's .init: locate the broker and make sure it runs. */
KU_FN void ku_setup(void)
{
    cr_assert_eq(ku_locate(), 0, "no Kafka broker (see above)");
    ku_ensure_running();
}

KU_FN void ku_await_partitions(rd_kafka_t *rk, const char *topic, int total, double timeout_s);

/* Create topic with the given partitions, replication factor 1, through
 * rk's admin API (any client handle); fails the test unless the broker
 * confirms it and its metadata lists every partition with a leader within
 * timeout_s each (CreateTopics answers before that: see
 * ku_await_partitions). */
KU_FN void ku_create_topic(rd_kafka_t *rk, const char *topic, int partitions, double timeout_s)
{
    char err[256];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, 1, err, sizeof err);
    cr_assert_not_null(nt, "NewTopic %s: %s", topic, err);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opts, (int)(timeout_s * 1000), err, sizeof err);
    rd_kafka_AdminOptions_set_request_timeout(opts, (int)(timeout_s * 1000), err, sizeof err);
    rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, (int)(timeout_s * 1000) + 1000);
    cr_assert_not_null(ev, "CreateTopics %s: no answer within %.0f s", topic, timeout_s);
    cr_assert_eq(rd_kafka_event_error(ev), RD_KAFKA_RESP_ERR_NO_ERROR, "CreateTopics %s: %s", topic,
                 rd_kafka_event_error_string(ev));
    size_t n = 0;
    const rd_kafka_topic_result_t **res =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(rd_kafka_topic_result_error(res[0]), RD_KAFKA_RESP_ERR_NO_ERROR,
                 "CreateTopics %s: %s", topic, rd_kafka_topic_result_error_string(res[0]));
    rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    ku_await_partitions(rk, topic, partitions, timeout_s);
}

/* A client configuration for the broker, with the given extra properties
 * (name, value pairs, NULL-terminated); fails the test on a bad one. A
 * client that lives through a broker restart reconnects within 0.5 s: the
 * default backoff grows to 10 s while the broker is down. */
KU_FN rd_kafka_conf_t *ku_conf(const char *first, ...)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", ku_broker.bootstrap, err, sizeof err),
                 RD_KAFKA_CONF_OK, "%s", err);
    cr_assert_eq(rd_kafka_conf_set(conf, "reconnect.backoff.max.ms", "500", err, sizeof err),
                 RD_KAFKA_CONF_OK, "%s", err);
    va_list ap;
    va_start(ap, first);
    for (const char *name = first; name != NULL; name = va_arg(ap, const char *)) {
        const char *value = va_arg(ap, const char *);
        cr_assert_eq(rd_kafka_conf_set(conf, name, value, err, sizeof err), RD_KAFKA_CONF_OK,
                     "%s=%s: %s", name, value, err);
    }
    va_end(ap);
    return conf;
}

KU_FN rd_kafka_t *ku_client(rd_kafka_type_t type, rd_kafka_conf_t *conf)
{
    char err[256];
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof err);
    cr_assert_not_null(rk, "rd_kafka_new: %s", err);
    return rk;
}

/* A consumer of topic's partitions [0, partitions) from their start that
 * reports each partition's end (RD_KAFKA_RESP_ERR__PARTITION_EOF) and
 * errors on a deleted offset instead of skipping. It uses assign() and
 * never joins its group (named after the topic) nor commits: librdkafka
 * 2.0.2 refuses assign() without a group.id ("Unknown group"), but only
 * subscribe() joins the group. */
KU_FN rd_kafka_t *ku_reader(const char *topic, int partitions)
{
    char group[300];
    snprintf(group, sizeof group, "%s-reader", topic);
    rd_kafka_conf_t *conf =
        ku_conf("group.id", group, "enable.auto.commit", "false", "enable.partition.eof", "true",
                "auto.offset.reset", "error", NULL);
    rd_kafka_t *c = ku_client(RD_KAFKA_CONSUMER, conf);
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t e = rd_kafka_assign(c, parts);
    cr_assert_eq(e, RD_KAFKA_RESP_ERR_NO_ERROR, "assign %s: %s", topic, rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(parts);
    return c;
}

/* Wait (bounded) until the broker's metadata lists topic with total
 * partitions, each with a leader, and each answers ListOffsets. CreatePartitions answers before
 * that: a producer made in between does not know the new partitions, and the records it sends to
 * them fail with "Local: Unknown partition" (lost, not read: kafka_stream_fleet's partition test
 * "lost" its first records so on a broker just started). */
KU_FN void ku_await_partitions(rd_kafka_t *rk, const char *topic, int total, double timeout_s)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    cr_assert_not_null(t, "topic %s", topic);
    double deadline = ku_now() + timeout_s;
    int seen = -1, leaders = -1;
    for (;;) {
        const struct rd_kafka_metadata *md = NULL;
        if (rd_kafka_metadata(rk, 0, t, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            md->topic_cnt == 1 && !md->topics[0].err) {
            seen = md->topics[0].partition_cnt;
            leaders = 0;
            for (int i = 0; i < seen; i++)
                leaders +=
                    !md->topics[0].partitions[i].err && md->topics[0].partitions[i].leader >= 0;
        }
        if (md) rd_kafka_metadata_destroy(md);
        if (seen == total && leaders == total) break;
        cr_assert_lt(ku_now(), deadline,
                     "topic %s: the metadata lists %d partitions (%d with a leader), not %d, "
                     "after %.0f s",
                     topic, seen, leaders, total, timeout_s);
        usleep(50 * 1000);
    }
    rd_kafka_topic_destroy(t);
    /* Listed is not yet writable: until the broker answers ListOffsets for
     * a partition, an idempotent producer's first batch can be refused and
     * a later one appended before it, losing the first (KAFKA-15591;
     * src/kafka/producer.c, await_writable). */
    for (int p = 0; p < total; p++) {
        int64_t low, high;
        rd_kafka_resp_err_t e;
        while ((e = rd_kafka_query_watermark_offsets(rk, topic, p, &low, &high, 2000)) !=
               RD_KAFKA_RESP_ERR_NO_ERROR) {
            cr_assert_lt(ku_now(), deadline, "topic %s partition %d: not writable after %.0f s: %s",
                         topic, p, timeout_s, rd_kafka_err2str(e));
            usleep(50 * 1000);
        }
    }
}

/* Grow topic to total partitions (admin API, bounded by timeout_s), and
 * wait until the metadata shows them. */
KU_FN void ku_add_partitions(const char *topic, int total, double timeout_s)
{
    rd_kafka_t *rk = ku_client(RD_KAFKA_PRODUCER, ku_conf(NULL));
    char err[256];
    rd_kafka_NewPartitions_t *np =
        rd_kafka_NewPartitions_new(topic, (size_t)total, err, sizeof err);
    cr_assert_not_null(np, "%s", err);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreatePartitions(rk, &np, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, (int)(timeout_s * 1000));
    cr_assert_not_null(ev, "CreatePartitions %s: no answer", topic);
    cr_assert_eq(rd_kafka_event_error(ev), 0, "%s", rd_kafka_event_error_string(ev));
    size_t n = 0;
    const rd_kafka_topic_result_t **res =
        rd_kafka_CreatePartitions_result_topics(rd_kafka_event_CreatePartitions_result(ev), &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(rd_kafka_topic_result_error(res[0]), 0, "%s",
                 rd_kafka_topic_result_error_string(res[0]));
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewPartitions_destroy(np);
    ku_await_partitions(rk, topic, total, timeout_s);
    rd_kafka_destroy(rk);
}

/* DeleteRecords: the broker drops topic/partition's records below offset
 * (as retention would) through rk's admin API; fails the test unless it
 * confirms within timeout_s. */
KU_FN void ku_delete_records(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset,
                             double timeout_s)
{
    int tmo = (int)(timeout_s * 1000);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    rd_kafka_DeleteRecords_t *dr = rd_kafka_DeleteRecords_new(l);
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_DeleteRecords(rk, &dr, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, tmo);
    cr_assert_not_null(ev, "DeleteRecords: no answer");
    cr_assert_eq(rd_kafka_event_error(ev), 0, "DeleteRecords: %s", rd_kafka_event_error_string(ev));
    rd_kafka_event_destroy(ev);
    rd_kafka_DeleteRecords_destroy(dr);
    rd_kafka_queue_destroy(q);
}

/* main() of a kafka_*_test.c: exits KU_SKIP (ctest: SKIPPED) when the
 * broker cannot run here, fails when it should run and does not, and runs
 * the Criterion tests otherwise, one at a time (--jobs on the command line
 * still wins). */
KU_FN int ku_main(int argc, char *argv[])
{
    int rc = ku_locate();
    if (rc != 0) return rc;
    struct criterion_test_set *tests = criterion_initialize();
    /* One test at a time, even when run by hand without --jobs 1: they share
     * the broker, and one that kills it must not hit another. */
    criterion_options.jobs = 1;
    rc = 0;
    if (criterion_handle_args(argc, argv, true)) rc = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return rc;
}

#define KU_TEST_MAIN                                                                               \
    int main(int argc, char *argv[])                                                               \
    {                                                                                              \
        return ku_main(argc, argv);                                                                \
    }

#endif

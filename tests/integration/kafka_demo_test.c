/* `sluice demo --online` (src/cli/demo_online.c) against the real broker:
 * it creates the topic, produces the sessions stream at the rate while an
 * in-process worker reads it as a stream and a trainer client takes every
 * batch, and prints the figures; every sample id arrives exactly once (the
 * demo checks it and fails otherwise). Bounded in time. */
#include "kafka_util.h"

static void suite_setup(void)
{
    ku_setup();
}

TestSuite(kafka_demo, .init = suite_setup);

Test(kafka_demo, online_every_sample_once_with_its_figures)
{
    char topic[64];
    snprintf(topic, sizeof topic, "demo-online-%d", ku_run());
    char *argv[] = {(char *)tu_binary(),
                    "demo",
                    "--online",
                    "--brokers",
                    ku_broker.bootstrap,
                    "--topic",
                    topic,
                    "--rate",
                    "2000",
                    "--seconds",
                    "2",
                    "--batch-size",
                    "256",
                    "--property",
                    "linger.ms=2",
                    NULL};
    char *out = NULL, *err = NULL, *dir = tu_mkdtemp("demo-online");
    double t0 = ku_now();
    int code = tu_run(dir, argv, tu_timeout(90), &out, &err);
    cr_assert_eq(code, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", code, out, err);
    cr_assert_lt(ku_now() - t0, tu_timeout(90));
    char want[512];
    snprintf(want, sizeof want,
             "sluice demo --online: 4000 samples of the sessions stream at 2000/s for 2 s to "
             "topic %s (1 partition, created) on %s\n",
             topic, ku_broker.bootstrap);
    const char *lines[] = {want,
                           "  producer settings: sluice produce's, then compression.type=none "
                           "linger.ms=2\n",
                           "  produced      4000 samples in ",
                           ", 4000 acknowledged\n",
                           "  received      4000 samples in ",
                           " batches, every sample id exactly once: ",
                           "  dedup factor  ",
                           "(user: 4000 rows -> ",
                           "  freshness     p50 ",
                           " ms, p99 ",
                           " ms, p99.9 ",
                           "(record CreateTime to hand-over to the trainer, 4000 samples)\n",
                           "  acknowledged  p50 ",
                           "(CreateTime to the producer's delivery report, 4000 records)\n",
                           "  producer      ",
                           "  at the worker p50 <= "};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        cr_assert(strstr(out, lines[i]) != NULL, "no '%s' in\n%s\nstderr:\n%s", lines[i], out, err);
    free(out);
    free(err);
    tu_rm_tree(dir);
    free(dir);
}

/* --property is the producer's: refused without --online, and a property
 * librdkafka does not know fails the run naming it. */
Test(kafka_demo, producer_properties)
{
    char *off[] = {(char *)tu_binary(), "demo", "--property", "linger.ms=2", NULL};
    char *out = NULL, *err = NULL, *dir = tu_mkdtemp("demo-online");
    int code = tu_run(dir, off, tu_timeout(30), &out, &err);
    cr_assert_eq(code, 2, "exit %d: %s", code, err);
    cr_assert_str_eq(err, "sluice demo: --property is for the producer of --online\n");
    free(out);
    free(err);
    char *bad[] = {(char *)tu_binary(),  "demo",      "--online", "--brokers",
                   ku_broker.bootstrap,  "--seconds", "1",        "--property",
                   "no.such.property=1", NULL};
    code = tu_run(dir, bad, tu_timeout(60), &out, &err);
    cr_assert_eq(code, 1, "exit %d: %s", code, err);
    cr_assert(strstr(err, "no.such.property=1: No such configuration property") != NULL, "%s", err);
    free(out);
    free(err);
    tu_rm_tree(dir);
    free(dir);
}

Test(kafka_demo, online_needs_brokers)
{
    char *argv[] = {(char *)tu_binary(), "demo", "--online", NULL};
    char *out = NULL, *err = NULL, *dir = tu_mkdtemp("demo-online");
    int code = tu_run(dir, argv, tu_timeout(30), &out, &err);
    cr_assert_eq(code, 2, "exit %d: %s", code, err);
    cr_assert_str_eq(err, "sluice demo: --online needs --brokers HOST:PORT (ops/demo-online "
                          "starts a local broker and passes it)\n");
    free(out);
    free(err);
    tu_rm_tree(dir);
    free(dir);
}

KU_TEST_MAIN

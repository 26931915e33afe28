/* The source.kafka block of a job spec (docs/JOBS.md, docs/KAFKA.md): every
 * key parsed with its default, and every kind of problem reported by its
 * JSON path, several at once. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "dpp/pipeline/job.h"
#include "dpp/pipeline/problems.h"

#define SCHEMA                                                                                     \
    "'schema': {'features': [{'name': 'age', 'kind': 'dense'}, {'name': 'hist', 'kind': "         \
    "'sparse'}], 'labels': ['click']}"

/* Single quotes in test specs become double quotes (one spec at a time). */
static const char *dq(const char *text)
{
    static char buf[8192];
    size_t n = strlen(text);
    cr_assert_lt(n, sizeof buf);
    for (size_t i = 0; i <= n; i++) buf[i] = text[i] == '\'' ? '"' : text[i];
    return buf;
}

static sl_pipeline_job_t *parse_ok(const char *text)
{
    text = dq(text);
    sl_pipeline_job_t *job = NULL;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    sl_err_t rc = sl_pipeline_job_parse(text, strlen(text), &job, &pr, &err);
    for (uint32_t i = 0; i < pr.count; i++) fprintf(stderr, "problem: %s\n", pr.items[i]);
    cr_assert_eq(rc, SL_OK, "%s", err.msg);
    sl_pipeline_problems_free(&pr);
    return job;
}

/* Every expected problem is listed (exactly, or by prefix with a trailing
 * '*'), and there are exactly n. */
static void parse_bad(const char *text, uint32_t n, const char *const *expected)
{
    text = dq(text);
    sl_pipeline_job_t *job = (sl_pipeline_job_t *)1;
    sl_pipeline_problems_t pr = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_parse(text, strlen(text), &job, &pr, &err), SL_ERR_INVALID);
    cr_assert_null(job);
    for (uint32_t i = 0; i < pr.count; i++) fprintf(stderr, "  %s\n", pr.items[i]);
    cr_assert_eq(pr.count, n, "expected %u problems, got %u", n, pr.count);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = strlen(expected[i]);
        bool prefix = expected[i][len - 1] == '*', found = false;
        for (uint32_t j = 0; j < pr.count; j++)
            found |= prefix ? strncmp(pr.items[j], expected[i], len - 1) == 0
                            : strcmp(pr.items[j], expected[i]) == 0;
        cr_assert(found, "missing problem: %s", expected[i]);
    }
    sl_pipeline_problems_free(&pr);
}

Test(job_kafka_spec, full_block)
{
    sl_pipeline_job_t *job =
        parse_ok("{'id': 'online', 'source': {'features': ['hist'], 'kafka': {"
                 "'brokers': 'k1:9092,10.0.0.2:9093', 'topics': ['events', 'events.v2'], " SCHEMA
                 ", 'start': {'timestamp_ms': 1764000000000}, 'stop': 'end', 'linger_ms': 20,"
                 " 'chunk': 1000, 'properties': {'fetch.max.bytes': '1048576', "
                 "'client.id': 'trainer-a'}}}}");
    cr_assert(job->is_kafka);
    cr_assert_null(job->table);
    const sl_pipeline_kafka_t *k = &job->kafka;
    cr_assert_str_eq(k->brokers, "k1:9092,10.0.0.2:9093");
    cr_assert_eq(k->num_topics, 2);
    cr_assert_str_eq(k->topics[0], "events");
    cr_assert_str_eq(k->topics[1], "events.v2");
    cr_assert_eq(sl_wh_schema_num_features(k->schema), 2);
    cr_assert_eq(sl_wh_schema_num_labels(k->schema), 1);
    cr_assert_eq(sl_wh_schema_find(k->schema, "hist")->kind, SL_WH_SPARSE);
    cr_assert_eq(k->start, SL_PIPELINE_KAFKA_TIMESTAMP);
    cr_assert_eq(k->start_ms, 1764000000000);
    cr_assert_eq(k->stop, SL_PIPELINE_KAFKA_LATEST);
    cr_assert_eq(k->linger_ms, 20);
    cr_assert_eq(k->chunk, 1000);
    cr_assert_eq(k->num_props, 2);
    cr_assert_str_eq(k->props[0], "fetch.max.bytes");
    cr_assert_str_eq(k->props[1], "1048576");
    cr_assert_str_eq(k->props[2], "client.id");
    cr_assert_str_eq(k->props[3], "trainer-a");
    cr_assert_eq(job->num_features, 1);
    sl_pipeline_job_destroy(job);
}

Test(job_kafka_spec, defaults)
{
    sl_pipeline_job_t *job =
        parse_ok("{'source': {'kafka': {'brokers': 'localhost:9092', 'topics': ['t'], " SCHEMA
                 "}}}");
    const sl_pipeline_kafka_t *k = &job->kafka;
    cr_assert(job->is_kafka);
    cr_assert_eq(k->start, SL_PIPELINE_KAFKA_EARLIEST);
    cr_assert_eq(k->stop, SL_PIPELINE_KAFKA_NONE);
    cr_assert_eq(k->linger_ms, 5);
    cr_assert_eq(k->chunk, 65536);
    cr_assert_eq(k->num_props, 0);
    cr_assert_null(k->props);
    sl_pipeline_job_destroy(job);
    job = parse_ok("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
                   ", 'start': 'latest', 'stop': {'timestamp_ms': 5}}}}");
    cr_assert_eq(job->kafka.start, SL_PIPELINE_KAFKA_LATEST);
    cr_assert_eq(job->kafka.stop, SL_PIPELINE_KAFKA_TIMESTAMP);
    cr_assert_eq(job->kafka.stop_ms, 5);
    sl_pipeline_job_destroy(job);
    /* a table job is not a Kafka job */
    job = parse_ok("{'source': {'table': '/t'}}");
    cr_assert_not(job->is_kafka);
    cr_assert_null(job->kafka.brokers);
    sl_pipeline_job_destroy(job);
}

Test(job_kafka_spec, table_or_kafka)
{
    parse_bad("{'source': {'table': '/t', 'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              "}}}",
              1, (const char *[]){"$.source: give \"table\" or \"kafka\", not both"});
    parse_bad("{'source': {'partitions': 'ds=1', 'stripes_per_split': 2, 'kafka': {'brokers': "
              "'h:1', 'topics': ['t'], " SCHEMA "}}}",
              2,
              (const char *[]){"$.source.partitions: a table's key; a Kafka job (\"kafka\") has "
                               "none",
                               "$.source.stripes_per_split: a table's key; a Kafka job "
                               "(\"kafka\") has none"});
    parse_bad("{'source': {'kafka': {}}}", 3,
              (const char *[]){"$.source.kafka.brokers: missing (required)",
                               "$.source.kafka.topics: missing (required)",
                               "$.source.kafka.schema: missing (required)"});
}

Test(job_kafka_spec, every_problem_by_path)
{
    parse_bad("{'source': {'kafka': {'brokers': 'h:0,:9092,ok:1,x:12ab,nocolon', "
              "'topics': ['good', 'bad/name', 'good'], 'schema': {'features': 3}, "
              "'start': 'yesterday', 'stop': {'timestamp_ms': -1}, 'linger_ms': 60001, "
              "'chunk': 0, 'colour': 'red', 'properties': {'group.id': 'g', "
              "'fetch.max.bytes': 7, 'no.such.property': 'x', 'fetch.wait.max.ms': 'soon', "
              "'auto.offset.reset': 'earliest'}}}}",
              17,
              (const char *[]){
                  "$.source.kafka.colour: unknown key",
                  "$.source.kafka.brokers: broker 1 'h:0' is not host:port (port 1..65535)",
                  "$.source.kafka.brokers: broker 2 ':9092' is not host:port (port 1..65535)",
                  "$.source.kafka.brokers: broker 4 'x:12ab' is not host:port (port 1..65535)",
                  "$.source.kafka.brokers: broker 5 'nocolon' is not host:port (port 1..65535)",
                  "$.source.kafka.topics[1]: a topic name is 1 to 249 letters, digits, '.', "
                  "'_' or '-' (and not \".\" or \"..\")",
                  "$.source.kafka.topics[2]: 'good' is listed twice",
                  "$.source.kafka.schema: *",
                  "$.source.kafka.start: \"earliest\", \"latest\" or {\"timestamp_ms\": N}, "
                  "not \"yesterday\"",
                  "$.source.kafka.stop.timestamp_ms: must be an integer >= 0 (milliseconds "
                  "since the epoch)",
                  "$.source.kafka.linger_ms: must be an integer in [0, 60000]",
                  "$.source.kafka.chunk: must be an integer in [1, 1073741824]",
                  "$.source.kafka.properties.group.id: set by sluice (docs/KAFKA.md); it "
                  "cannot be given",
                  "$.source.kafka.properties.fetch.max.bytes: must be a string",
                  "$.source.kafka.properties.no.such.property: No such configuration property: "
                  "\"no.such.property\"",
                  "$.source.kafka.properties.fetch.wait.max.ms: *",
                  "$.source.kafka.properties.auto.offset.reset: set by sluice (docs/KAFKA.md); "
                  "it cannot be given"});
    /* the two that only make sense together */
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'start': 'latest', 'stop': 'end'}}}",
              1, (const char *[]){"$.source.kafka.stop: \"end\" with start \"latest\" reads "
                                  "nothing"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              "}}, 'batch': {'epochs': 2, 'drop_last': true}}",
              2, (const char *[]){"$.batch.epochs: a Kafka stream (no source.kafka.stop) has "
                                  "one epoch",
                                  "$.batch.drop_last: a Kafka job's batches are cut after "
                                  "source.kafka.linger_ms, short or not: none is dropped"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'start': {'timestamp_ms': 10}, 'stop': {'timestamp_ms': 10}}}}",
              1, (const char *[]){"$.source.kafka.stop.timestamp_ms: 10 is not after "
                                  "start.timestamp_ms 10: reads nothing"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': [], " SCHEMA
              ", 'start': {'at': 1}, 'properties': []}}}",
              3, (const char *[]){"$.source.kafka.topics: must be a non-empty array of names",
                                  "$.source.kafka.start: must be \"earliest\", \"latest\" or "
                                  "{\"timestamp_ms\": N}",
                                  "$.source.kafka.properties: must be an object {\"name\": "
                                  "\"value\"}"});
}

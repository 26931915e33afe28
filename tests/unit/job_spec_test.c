/* DPP job specs: parsing (every field, defaults, every kind of problem with
 * its JSON path, several problems at once); the source.kafka block (every
 * key, defaults, every problem by path), source.parquet and the order
 * block. Binding to a table schema: job_plan_test.c. */
#include "job_spec_util.h"

Test(job_spec, full_spec)
{
    sl_pipeline_job_t *job = parse_ok(full_spec);
    cr_assert_str_eq(job->id, "criteo-train");
    cr_assert_str_eq(job->table, "/data/criteo");
    cr_assert_str_eq(job->partitions, "ds>=2026-01-01");
    cr_assert_eq(job->num_features, 2);
    cr_assert_str_eq(job->features[1], "C1");
    cr_assert_eq(job->stripes_per_split, 2);
    cr_assert_eq(job->num_filters, 6);
    cr_assert_eq(job->num_transforms, 14);
    cr_assert_eq(job->batch_size, 4096);
    cr_assert_eq(job->epochs, 3);
    cr_assert_not(job->drop_last);
    cr_assert_eq(job->num_dedup_groups, 1);
    cr_assert_str_eq(job->dedup_groups[0].name, "user");
    cr_assert_eq(job->dedup_groups[0].num_features, 2);
    cr_assert_str_eq(job->dedup_groups[0].features[1], "user_hist");
    cr_assert(job->shuffle_splits);
    cr_assert_eq(job->shuffle_window, 100);
    cr_assert_eq(job->seed, 9);
    cr_assert_not(job->sample_ids);
    sl_pipeline_job_destroy(job);
    sl_pipeline_job_destroy(NULL);
}

Test(job_spec, defaults)
{
    sl_pipeline_job_t *job = parse_ok("{\"source\": {\"table\": \"t\"}}");
    cr_assert_str_eq(job->id, "job");
    cr_assert_null(job->partitions);
    cr_assert_null(job->features);
    cr_assert_eq(job->stripes_per_split, 1);
    cr_assert_eq(job->num_filters, 0);
    cr_assert_eq(job->num_transforms, 0);
    cr_assert_eq(job->batch_size, 4096);
    cr_assert_eq(job->epochs, 1);
    cr_assert_eq(job->num_dedup_groups, 0);
    cr_assert_not(job->shuffle_splits);
    cr_assert_eq(job->shuffle_window, 0);
    cr_assert_eq(job->seed, 0);
    cr_assert(job->sample_ids);
    cr_assert_null(job->base_dir);
    sl_pipeline_job_destroy(job);
}

/* Each op object is compiled once, at parse, through the op table: the
 * values given, and for the others the table's defaults (the plan reads
 * only these structs). */
Test(job_spec, ops_compiled_with_the_tables_defaults)
{
    sl_pipeline_job_t *job = parse_ok(
        "{'source': {'table': 't'},"
        " 'filters': [{'op': 'sample', 'rate': 0.5},"
        "  {'op': 'negative_downsample', 'label': 'click', 'rate': 0.25, 'seed': 3},"
        "  {'op': 'timestamp_range', 'max': 99}, {'op': 'label_range', 'label': 'c', 'min': -1}],"
        " 'transforms': [{'op': 'normalize', 'feature': 'I1'},"
        "  {'op': 'clamp', 'feature': 'I1', 'max': 5},"
        "  {'op': 'cross', 'features': ['C1', 'C2'], 'table_size': 9},"
        "  {'op': 'ngram', 'feature': 'hist', 'n': 3, 'table_size': 9},"
        "  {'op': 'bucketize', 'feature': 'I4', 'borders': [0.5, 2]},"
        "  {'op': 'map_vocab', 'feature': 'C3', 'file': 'v.txt'},"
        "  {'op': 'map_vocab', 'feature': 'C3', 'file': 'v.txt', 'default': -1},"
        "  {'op': 'sigrid_hash', 'feature': 'C2', 'table_size': 7}]}");
    cr_assert_eq(job->num_filters, 4);
    cr_assert_eq(job->num_transforms, 8);
    const sl_pipeline_op_t *f = job->filters, *t = job->transforms;
    cr_assert_eq(f[0].op, OP_SAMPLE);
    cr_assert_eq(f[0].rate, 0.5);
    cr_assert_eq(f[0].seed, 0);
    cr_assert_str_eq(f[1].label, "click");
    cr_assert_eq(f[1].seed, 3);
    cr_assert_str_eq(f[1].weight_label, "weight");
    cr_assert_eq(f[2].ts_min, INT64_MIN);
    cr_assert_eq(f[2].ts_max, 99);
    cr_assert_eq(f[3].min, -1.0);
    cr_assert(isinf(f[3].max) && f[3].max > 0);
    cr_assert_eq(t[0].mean, 0.0);
    cr_assert_eq(t[0].std, 1.0);
    cr_assert(isinf(t[1].min) && t[1].min < 0);
    cr_assert_eq(t[1].max, 5.0);
    cr_assert(sl_pipeline_op_given(&t[1], "max"));
    cr_assert_not(sl_pipeline_op_given(&t[1], "min"));
    cr_assert_str_eq(t[2].features[0], "C1");
    cr_assert_str_eq(t[2].features[1], "C2");
    cr_assert_str_eq(t[2].output, "C1_x_C2");
    cr_assert_eq(t[2].salt, 0);
    cr_assert_eq(t[2].table_size, 9);
    cr_assert_str_eq(t[3].output, "hist_3gram");
    cr_assert_eq(t[3].n, 3);
    cr_assert_str_eq(t[4].output, "I4_bucket");
    cr_assert_eq(t[4].borders.n, 2);
    cr_assert_eq(t[4].borders.v[1], 2.0);
    cr_assert_not(sl_pipeline_op_given(&t[5], "default"));
    cr_assert(sl_pipeline_op_given(&t[6], "default"));
    cr_assert_eq(t[6].vocab_default, -1);
    cr_assert_null(t[7].output);
    cr_assert_null(t[7].label);
    sl_pipeline_job_destroy(job);
}

/* A default name that outgrows a feature name, and more ops than a job may
 * have, are parse problems. */
Test(job_spec, op_limits)
{
    char name[200], spec[1024];
    memset(name, 'f', 199);
    name[199] = '\0';
    snprintf(spec, sizeof spec,
             "{'source': {'table': 't'}, 'transforms': ["
             " {'op': 'cross', 'features': ['%s', '%s'], 'table_size': 3}]}",
             name, name);
    parse_bad(spec, 1, (const char *[]){"$.transforms[0].output: name longer than 255 bytes"});
    size_t cap = 4097 * 4 + 128;
    char *big = malloc(cap);
    size_t n = (size_t)snprintf(big, cap, "{'source': {'table': 't'}, 'filters': [");
    for (int i = 0; i < 4097; i++)
        n += (size_t)snprintf(big + n, cap - n, "%s{}", i ? "," : "");
    snprintf(big + n, cap - n, "]}");
    parse_bad(big, 1,
              (const char *[]){"$.filters: 4097 filters, more than the 4096 a job may have"});
    free(big);
}

Test(job_spec, syntax_errors)
{
    parse_bad(
        "{\"source\": {\"table\": \"t\"", 1,
        (const char *[]){"$: not valid JSON: '}' expected near end of file (line 1, column 24)"});
    parse_bad("[1]", 1, (const char *[]){"$: a job spec must be a JSON object"});
    parse_bad("{}", 1, (const char *[]){"$.source: missing (required)"});
    parse_bad("{\"source\": {}}", 1, (const char *[]){"$.source.table: missing (required)"});
    parse_bad("{\"source\": {\"table\": 3}}", 1,
              (const char *[]){"$.source.table: must be a non-empty string"});
    parse_bad("{\"source\": {\"table\": \"t\", \"tabel\": 1}, \"extra\": 2}", 2,
              (const char *[]){"$.source.tabel: unknown key (did you mean 'table'?)",
                               "$.extra: unknown key"});
    parse_bad("{\"source\": {\"table\": \"t\", \"partitions\": \"ds\"}}", 1,
              (const char *[]){"$.source.partitions: *"});
}

Test(job_spec, type_and_range_errors)
{
    parse_bad("{'source': {'table': 't', 'features': [], 'stripes_per_split': 0},"
              " 'batch': {'size': 0, 'epochs': 1.5, 'drop_last': 1,"
              "  'shuffle': {'window': -1, 'seed': 'x', 'splitz': true},"
              "  'dedup_groups': {'u': ['a', 'a'], 'v': ['a', 3], 'w': []}}}",
              12,
              (const char *[]){
                  "$.batch.dedup_groups.w: must be a non-empty array of names",
                  "$.source.features: must be a non-empty array of names",
                  "$.source.stripes_per_split: must be an integer in [1, 1048576]",
                  "$.batch.size: must be an integer in [1, 1048576]",
                  "$.batch.epochs: must be an integer in [1, 1000000]",
                  "$.batch.drop_last: must be true or false",
                  "$.batch.shuffle.window: must be an integer in [0, 67108864]",
                  "$.batch.shuffle.seed: must be an integer in [0, 9223372036854775807]",
                  "$.batch.shuffle.splitz: unknown key (did you mean 'splits'?)",
                  "$.batch.dedup_groups.u[1]: 'a' is listed twice",
                  "$.batch.dedup_groups.v[1]: must be a non-empty string",
                  "$.batch.dedup_groups.v[0]: feature 'a' is already in group 'u'",
              });
    parse_bad("{'source': {'table': 't'}, 'batch': {'size': 1048577, "
              "'dedup_groups': {'w': []}}}",
              2,
              (const char *[]){"$.batch.size: must be an integer in [1, 1048576]",
                               "$.batch.dedup_groups.w: must be a non-empty array of names"});
}

Test(job_spec, op_errors)
{
    parse_bad("{'source': {'table': 't'},"
              " 'filters': [3, {'label': 'x'}, {'op': 'log1p', 'feature': 'x'},"
              "  {'op': 'sample', 'rate': 0}, {'op': 'sample', 'rate': 1.5, 'seed': -1},"
              "  {'op': 'label_range', 'label': 'c', 'min': 2, 'max': 1},"
              "  {'op': 'label_range', 'label': 'c'}],"
              " 'transforms': {}}",
              9,
              (const char *[]){
                  "$.filters[0]: must be an object with an \"op\"",
                  "$.filters[1].op: missing (required)",
                  "$.filters[2].op: unknown filter 'log1p' (it is a transform)",
                  "$.filters[3].rate: must be a number in (0, 1]",
                  "$.filters[4].rate: must be a number in (0, 1]",
                  "$.filters[4].seed: must be an integer >= 0",
                  "$.filters[5]: min must be <= max",
                  "$.filters[6]: needs min, max or both",
                  "$.transforms: must be an array",
              });
    parse_bad("{'source': {'table': 't'}, 'transforms': ["
              " {'op': 'sigrid_hash', 'feature': 'C1', 'table_size': 0},"
              " {'op': 'sigrid_hash', 'feature': 'C1'},"
              " {'op': 'ngram', 'feature': 'h', 'n': 0, 'table_size': 5, 'bogus': 1},"
              " {'op': 'normalize', 'feature': 'I', 'std': 0},"
              " {'op': 'bucketize', 'feature': 'I', 'borders': [1, 1]},"
              " {'op': 'cross', 'features': ['a'], 'table_size': 5},"
              " {'op': 'hash', 'feature': 'C1'},"
              " {'op': 'modulo', 'feature': '', 'divisor': 2.5}]}",
              10,
              (const char *[]){
                  "$.transforms[0].table_size: must be a positive integer",
                  "$.transforms[1].table_size: missing (required by transform 'sigrid_hash')",
                  "$.transforms[2].n: must be an integer in [1, 1024]",
                  "$.transforms[2].bogus: unknown key for transform 'ngram'",
                  "$.transforms[3].std: must be a number > 0",
                  "$.transforms[4].borders: must be a non-empty array of strictly increasing "
                  "finite numbers",
                  "$.transforms[5].features: must be an array of two non-empty strings",
                  "$.transforms[6].op: unknown transform 'hash'",
                  "$.transforms[7].feature: must be a non-empty string",
                  "$.transforms[7].divisor: must be a positive integer",
              });
}

/* Limits that need no schema are checked at parse, so they are listed with
 * the spec's other problems (an n-gram of n > 1024 used to be a binding
 * problem, never reached when parsing found another one). */
Test(job_spec, schema_free_limits_listed_with_other_problems)
{
    char name[300], spec[1024];
    memset(name, 'o', 299);
    name[299] = '\0';
    snprintf(spec, sizeof spec,
             "{'source': {'table': 't', 'stripes_per_split': 0},"
             " 'transforms': ["
             "  {'op': 'ngram', 'feature': 'hist', 'n': 1025, 'table_size': 10},"
             "  {'op': 'first_x', 'feature': 'hist', 'x': 2147483648},"
             "  {'op': 'bucketize', 'feature': 'I1', 'borders': [1], 'output': '%s'}],"
             " 'batch': {'size': 0}}",
             name);
    parse_bad(spec, 5,
              (const char *[]){
                  "$.source.stripes_per_split: must be an integer in [1, 1048576]",
                  "$.transforms[0].n: must be an integer in [1, 1024]",
                  "$.transforms[1].x: must be an integer in [1, 2147483647]",
                  "$.transforms[2].output: must be a non-empty string of at most 255 bytes",
                  "$.batch.size: must be an integer in [1, 1048576]",
              });
}

Test(job_spec, job_ids)
{
    const char *good[] = {"criteo-train", "a", "v1.2_rc-3", "A.b"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        cr_assert(sl_pipeline_job_id_ok(good[i], strlen(good[i]), NULL, 0), "%s", good[i]);
    char why[160];
    const char *bad[] = {"", "../x", "a/b", "..", "a..b", "x y", "é", "a%00b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert(!sl_pipeline_job_id_ok(bad[i], strlen(bad[i]), why, sizeof why), "%s", bad[i]);
    cr_assert(!sl_pipeline_job_id_ok("ab\0c", 4, why, sizeof why));
    cr_assert_str_eq(why, "a job id is 1 to 255 letters, digits, '.', '_' or '-' without \"..\" "
                          "(this one has a NUL byte)");
    char longid[257];
    memset(longid, 'a', 256);
    longid[256] = '\0';
    cr_assert(!sl_pipeline_job_id_ok(longid, 256, NULL, 0));
    cr_assert(sl_pipeline_job_id_ok(longid, 255, NULL, 0));
    parse_bad("{'id': '../../etc', 'source': {'table': 't'}}", 1,
              (const char *[]){"$.id: a job id is 1 to 255 letters, digits, '.', '_' or '-' "
                               "without \"..\" (this one has \"..\")"});
    parse_bad("{'id': 'logs/x', 'source': {'table': 't'}}", 1,
              (const char *[]){"$.id: a job id is 1 to 255 letters, digits, '.', '_' or '-' "
                               "without \"..\" (this one has '/')"});
    sl_pipeline_job_destroy(parse_ok("{'id': 'ok.job_1-a', 'source': {'table': 't'}}"));
}

Test(job_spec, load_sets_base_dir)
{
    char dir[] = "/tmp/sluice_job_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/job.json", dir);
    FILE *f = fopen(path, "w");
    fputs(dq("{'source': {'table': 't'}}"), f);
    fclose(f);
    sl_pipeline_job_t *job = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_pipeline_job_load(path, &job, NULL, &err), SL_OK, "%s", err.msg);
    char want[256];
    snprintf(want, sizeof want, "%s/", dir);
    cr_assert_str_eq(job->base_dir, want);
    sl_pipeline_job_destroy(job);
    f = fopen(path, "w");
    fputs(dq("{'source': {'table': 1}, 'x': 2}"), f);
    fclose(f);
    cr_assert_eq(sl_pipeline_job_load(path, &job, NULL, &err), SL_ERR_INVALID);
    cr_assert(strstr(err.msg, "job.json: job spec: $.x: unknown key "
                              "(and 1 more problem)") != NULL,
              "%s", err.msg);
    unlink(path);
    rmdir(dir);
    snprintf(path, sizeof path, "%s/missing.json", dir);
    cr_assert_eq(sl_pipeline_job_load(path, &job, NULL, &err), SL_ERR_NOT_FOUND);
}

/* ---- source.kafka (docs/KAFKA.md) ---- */

#define SCHEMA                                                                                     \
    "'schema': {'features': [{'name': 'age', 'kind': 'dense'}, {'name': 'hist', 'kind': "          \
    "'sparse'}], 'labels': ['click']}"

Test(job_kafka_spec, full_block)
{
    sl_pipeline_job_t *job =
        parse_ok("{'id': 'online', 'source': {'features': ['hist'], 'kafka': {"
                 "'brokers': 'k1:9092,10.0.0.2:9093', 'topics': ['events', 'events.v2'], " SCHEMA
                 ", 'start': {'timestamp_ms': 1764000000000}, 'stop': 'end', 'linger_ms': 20,"
                 " 'chunk': 1000, 'properties': {'fetch.max.bytes': '1048576', "
                 "'client.id': 'trainer-a'}, 'dead_letter_topic': 'events.bad'}}}");
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
    cr_assert_str_eq(k->dead_letter_topic, "events.bad");
    cr_assert_eq(job->num_features, 1);
    sl_pipeline_job_destroy(job);
}

Test(job_kafka_spec, defaults)
{
    sl_pipeline_job_t *job = parse_ok(
        "{'source': {'kafka': {'brokers': 'localhost:9092', 'topics': ['t'], " SCHEMA "}}}");
    const sl_pipeline_kafka_t *k = &job->kafka;
    cr_assert(job->is_kafka);
    cr_assert_eq(k->start, SL_PIPELINE_KAFKA_EARLIEST);
    cr_assert_eq(k->stop, SL_PIPELINE_KAFKA_NONE);
    cr_assert_eq(k->linger_ms, 5);
    cr_assert_eq(k->chunk, 65536);
    cr_assert_eq(k->num_props, 0);
    cr_assert_null(k->props);
    cr_assert_null(k->dead_letter_topic);
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
    parse_bad(
        "{'source': {'table': '/t', 'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA "}}}", 1,
        (const char *[]){"$.source: give one of \"table\", \"kafka\" and \"parquet\", not "
                         "more"});
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

Test(job_kafka_spec, json_records_take_their_schema_from_columns)
{
    sl_pipeline_job_t *job =
        parse_ok("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], 'format': 'json', "
                 "'columns': {'sample_id': 'id', 'labels': ['click'], 'dense': ['price'], "
                 "'sparse': ['items', {'column': 'country', 'name': 'cc', 'hash': {'seed': 7}}], "
                 "'weighted': [{'column': 'tags'}]}}}}");
    const sl_pipeline_kafka_t *k = &job->kafka;
    cr_assert_eq(k->format, SL_PIPELINE_KAFKA_JSON);
    cr_assert_not_null(k->columns);
    cr_assert_not_null(k->schema);
    cr_assert_str_eq(sl_wh_schema_column(k->schema, SL_WH_COL_SAMPLE_ID), "id");
    cr_assert_eq(sl_wh_schema_num_labels(k->schema), 1);
    cr_assert_eq(sl_wh_schema_num_features(k->schema), 4);
    cr_assert_eq(sl_wh_schema_find(k->schema, "cc")->kind, SL_WH_SPARSE);
    cr_assert_eq(sl_wh_schema_find(k->schema, "tags")->kind, SL_WH_WEIGHTED);
    cr_assert(k->columns->slots[4].hash); /* id, click, price, items, then cc */
    sl_pipeline_job_destroy(job);
    /* protobuf stays the default */
    job = parse_ok("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA "}}}");
    cr_assert_eq(job->kafka.format, SL_PIPELINE_KAFKA_PROTOBUF);
    cr_assert_null(job->kafka.columns);
    sl_pipeline_job_destroy(job);

    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], 'format': 'json', " SCHEMA
              "}}}",
              2,
              (const char *[]){"$.source.kafka.schema: JSON records take their schema from "
                               "$.source.kafka.columns; give no schema",
                               "$.source.kafka.columns: missing (required with \"format\": "
                               "\"json\")"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'columns': {'dense': ['a']}}}}",
              1,
              (const char *[]){"$.source.kafka.columns: only for JSON records (\"format\": "
                               "\"json\")"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], 'format': 'xml', " SCHEMA
              "}}}",
              1, (const char *[]){"$.source.kafka.format: *"});
    /* the mapping's problems, each by its path under columns */
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], 'format': 'json', "
              "'columns': {'dense': [1], 'sparse': [{'column': 'c', 'hash': {'seed': -2}}], "
              "'labelz': []}}}}",
              3,
              (const char *[]){"$.source.kafka.columns.labelz: unknown key (keys: sample_id, "
                               "session_id, timestamp, labels, dense, sparse, weighted, infer)",
                               "$.source.kafka.columns.dense[0]: must be a column name (a "
                               "non-empty string), got a number",
                               "$.source.kafka.columns.sparse[0].hash.seed: must be a "
                               "non-negative integer"});
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
                  "$.source.kafka.topics[2]: 'good' is listed twice", "$.source.kafka.schema: *",
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
    /* the dead-letter topic: a topic name, never one the job reads */
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t', 'u'], " SCHEMA
              ", 'dead_letter_topic': 'u'}}}",
              1,
              (const char *[]){"$.source.kafka.dead_letter_topic: 'u' is also read "
                               "($.source.kafka.topics[1]): its bad records would come back "
                               "for ever"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'dead_letter_topic': 'bad topic'}}}",
              1,
              (const char *[]){"$.source.kafka.dead_letter_topic: a topic name is 1 to 249 "
                               "letters, digits, '.', '_' or '-' (and not \".\" or \"..\")"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'dead_letter_topic': 5}}}",
              1, (const char *[]){"$.source.kafka.dead_letter_topic: must be a non-empty string"});
    /* the two that only make sense together */
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'start': 'latest', 'stop': 'end'}}}",
              1,
              (const char *[]){"$.source.kafka.stop: \"end\" with start \"latest\" reads "
                               "nothing"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              "}}, 'batch': {'epochs': 2, 'drop_last': true}}",
              2,
              (const char *[]){"$.batch.epochs: a Kafka stream (no source.kafka.stop) has "
                               "one epoch",
                               "$.batch.drop_last: a Kafka job's batches are cut after "
                               "source.kafka.linger_ms, short or not: none is dropped"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'start': {'timestamp_ms': 10}, 'stop': {'timestamp_ms': 10}}}}",
              1,
              (const char *[]){"$.source.kafka.stop.timestamp_ms: 10 is not after "
                               "start.timestamp_ms 10: reads nothing"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': [], " SCHEMA
              ", 'start': {'at': 1}, 'properties': []}}}",
              3,
              (const char *[]){"$.source.kafka.topics: must be a non-empty array of names",
                               "$.source.kafka.start: must be \"earliest\", \"latest\" or "
                               "{\"timestamp_ms\": N}",
                               "$.source.kafka.properties: must be an object {\"name\": "
                               "\"value\"}"});
}

/* source.parquet (docs/PARQUET.md, "As a job source"): a path, the column
 * mapping checked alone at parse by its JSON path, split_rows, and the
 * keys of other sources refused. */
Test(job_spec, parquet_source)
{
    sl_pipeline_job_t *job =
        parse_ok("{'source': {'parquet': '/data/clicks', 'partitions': 'ds>=2026-11-01', "
                 "'columns': {'labels': ['click'], 'dense': ['price']}, 'split_rows': 5000}, "
                 "'filters': [{'op': 'timestamp_range', 'min': 10, 'max': 20}, "
                 "{'op': 'label_range', 'label': 'click', 'min': 0.5}]}");
    cr_assert_str_eq(job->parquet, "/data/clicks");
    cr_assert_null(job->table);
    cr_assert_not(job->is_kafka);
    cr_assert_not_null(job->parquet_columns);
    cr_assert_str_eq(job->partitions, "ds>=2026-11-01");
    cr_assert_eq(job->split_rows, 5000);
    sl_pipeline_range_t r[4];
    cr_assert_eq(sl_pipeline_job_ranges(job, r, 4), 2);
    cr_assert_null(r[0].label);
    cr_assert_eq(r[0].lo, 10.0);
    cr_assert_eq(r[0].hi, 20.0);
    cr_assert_str_eq(r[1].label, "click");
    cr_assert_eq(r[1].lo, 0.5);
    cr_assert_eq(r[1].hi, INFINITY);
    sl_pipeline_job_destroy(job);
    job = parse_ok("{'source': {'parquet': 'one.parquet'}}");
    cr_assert_null(job->parquet_columns);
    cr_assert_eq(job->split_rows, 65536);
    sl_pipeline_job_destroy(job);
    parse_bad("{'source': {'parquet': 'x', 'stripes_per_split': 2, "
              "'columns': {'dense': [3], 'nosuch': 1}}}",
              3,
              (const char *[]){"$.source.stripes_per_split: a table's key; a Parquet source cuts "
                               "splits by $.source.split_rows",
                               "$.source.columns.dense[0]: *", "$.source.columns.nosuch: *"});
    parse_bad("{'source': {'table': 't', 'columns': {}, 'split_rows': 3}}", 2,
              (const char *[]){"$.source.columns: a Parquet source's key (\"parquet\")",
                               "$.source.split_rows: a Parquet source's key (\"parquet\")"});
    parse_bad("{'source': {'table': 't', 'parquet': 'p'}}", 1,
              (const char *[]){"$.source: give one of *"});
}

/* "order" (docs/JOBS.md, "Deterministic order"): dynamic by default; the
 * deterministic order refuses, by path, what would cut a split's batches
 * differently from one lease to the next, or number no fixed split list. */
Test(job_order_spec, default_and_values)
{
    sl_pipeline_job_t *job = parse_ok("{'source': {'table': 't'}}");
    cr_assert_eq(job->order, SL_PIPELINE_ORDER_DYNAMIC);
    cr_assert(job->share);
    sl_pipeline_job_destroy(job);
    job = parse_ok("{'source': {'table': 't'}, 'order': 'deterministic',"
                   " 'batch': {'size': 64, 'shuffle': {'splits': true, 'window': 64}}}");
    cr_assert_eq(job->order, SL_PIPELINE_ORDER_DETERMINISTIC);
    cr_assert_not(job->share, "a deterministic job is never shared");
    cr_assert_eq(job->shuffle_window, 64);
    sl_pipeline_job_destroy(job);
    job = parse_ok("{'source': {'table': 't'}, 'order': 'deterministic', 'share': false}");
    cr_assert_eq(job->order, SL_PIPELINE_ORDER_DETERMINISTIC);
    cr_assert_eq(job->shuffle_window, 0);
    sl_pipeline_job_destroy(job);
    job = parse_ok("{'source': {'table': 't'}, 'order': 'dynamic'}");
    cr_assert_eq(job->order, SL_PIPELINE_ORDER_DYNAMIC);
    sl_pipeline_job_destroy(job);
}

Test(job_order_spec, what_the_deterministic_order_refuses)
{
    parse_bad("{'source': {'table': 't'}, 'order': 'fixed'}", 1,
              (const char *[]){"$.order: \"dynamic\" or \"deterministic\", not \"fixed\""});
    parse_bad("{'source': {'table': 't'}, 'order': 'deterministic',"
              " 'batch': {'size': 64, 'shuffle': {'window': 100}}}",
              1,
              (const char *[]){"$.batch.shuffle.window: 100 rows with \"order\": "
                               "\"deterministic\"; only 0 or batch.size (64) cut a split's "
                               "batches the same way however it is leased"});
    parse_bad("{'source': {'table': 't'}, 'order': 'deterministic', 'share': true}", 1,
              (const char *[]){"$.share: true with \"order\": \"deterministic\"; a shared pass "
                               "follows the fastest of its jobs, not one job's order"});
    parse_bad("{'source': {'kafka': {'brokers': 'h:1', 'topics': ['t'], " SCHEMA
              ", 'stop': 'end'}}, 'order': 'deterministic'}",
              1,
              (const char *[]){"$.order: \"deterministic\" numbers a fixed list of splits; a "
                               "Kafka source has none"});
    parse_bad("{'source': {'table': 't'}, 'order': 'deterministic', 'on_bad_split': 'skip'}", 1,
              (const char *[]){"$.on_bad_split: \"skip\" with \"order\": \"deterministic\"; a "
                               "skipped split's batches would leave holes in the numbered "
                               "sequence"});
    parse_bad("{'source': {'table': 't'}, 'order': 'deterministic',"
              " 'batch': {'equal_batches_per_rank': true}}",
              1,
              (const char *[]){"$.batch.equal_batches_per_rank: true with \"order\": "
                               "\"deterministic\"; ranks of that order differ by at most one "
                               "batch an epoch, and the two holds are not built to compose"});
    /* the same window under the dynamic order is fine */
    sl_pipeline_job_t *job = parse_ok("{'source': {'table': 't'},"
                                      " 'batch': {'size': 64, 'shuffle': {'window': 100}}}");
    sl_pipeline_job_destroy(job);
}

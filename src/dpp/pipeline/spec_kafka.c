/* $.source.kafka of a job spec (docs/KAFKA.md): its keys' part of the
 * table (spec.h), and the parsers of those that need more than a type:
 * the brokers, the topics and the dead-letter topic (Kafka's rule for
 * names), the schema, the column mapping of JSON records, where each
 * partition starts and stops, and the librdkafka properties passed
 * through (each checked by librdkafka). */
#include "dpp/pipeline/spec_parse.h"

#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "common/parse.h"
#include "sluice/alloc.h"
#include "warehouse/warehouse.h"
#include "netlib/netlib_kafka.h"

/* librdkafka's functions: loaded by the check of the properties before any call here. */
static const sl_netlib_kafka_t *librdkafka(void)
{
    return sl_netlib_kafka(NULL);
}

/* "host:port[,host:port...]": each host non-empty, each port 1..65535. */
static void check_brokers(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    (void)job;
    const char *s = json_string_value(v);
    uint32_t k = 0;
    for (const char *b = s;; k++) {
        const char *e = strchr(b, ',');
        size_t n = e ? (size_t)(e - b) : strlen(b);
        const char *colon = memrchr(b, ':', n);
        char port[8] = "";
        uint32_t num = 0;
        size_t plen = colon ? (size_t)(b + n - colon - 1) : 0;
        if (plen > 0 && plen < sizeof port) memcpy(port, colon + 1, plen);
        if (colon == NULL || colon == b || plen == 0 || plen >= sizeof port ||
            sl_parse_u32(port, 1, 65535, &num, "port", NULL) != SL_OK)
            sl_pipeline_problems_add(p->problems,
                                     "%s: broker %u '%.*s' is not host:port (port 1..65535)", path,
                                     k + 1, (int)(n > 80 ? 80 : n), b);
        if (!e) break;
        b = e + 1;
    }
}

/* Kafka's own rule for topic names: 1..249 of [a-zA-Z0-9._-], not "." or "..". */
static bool topic_name_ok(const char *t)
{
    size_t n = strlen(t);
    bool ok = n <= 249 && strcmp(t, ".") != 0 && strcmp(t, "..") != 0;
    for (size_t c = 0; c < n && ok; c++)
        ok = (t[c] >= 'a' && t[c] <= 'z') || (t[c] >= 'A' && t[c] <= 'Z') ||
             (t[c] >= '0' && t[c] <= '9') || t[c] == '.' || t[c] == '_' || t[c] == '-';
    return ok;
}

#define TOPIC_RULE                                                                                 \
    "a topic name is 1 to 249 letters, digits, '.', '_' or '-' (and not \".\" or \"..\")"

static void parse_topics(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    dpp_spec_get_names(p, v, path, &job->kafka.topics, &job->kafka.num_topics);
    for (uint32_t i = 0; i < job->kafka.num_topics; i++) {
        const char *t = job->kafka.topics[i];
        if (t != NULL && !topic_name_ok(t))
            sl_pipeline_problems_add(p->problems, "%s[%u]: " TOPIC_RULE, path, i);
    }
}

static void check_dead_letter(dpp_parse_t *p, const json_t *v, const char *path,
                              sl_pipeline_job_t *job)
{
    (void)job;
    if (!topic_name_ok(json_string_value(v)))
        sl_pipeline_problems_add(p->problems, "%s: " TOPIC_RULE, path);
}

static void parse_schema(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    sl_error_t e = {0};
    sl_err_t rc = sl_wh_schema_from_json(v, NULL, &job->kafka.schema, &e);
    if (rc == SL_ERR_NOMEM)
        p->nomem = true;
    else if (rc != SL_OK)
        sl_pipeline_problems_add(p->problems, "%s: %s", path, e.msg);
}

/* The column mapping of JSON records, resolved against the keys it names
 * (its problems carry their JSON paths under $.source.kafka.columns). */
static void parse_columns(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    sl_wh_colmap_t *m = NULL;
    sl_error_t e = {0};
    sl_err_t rc = sl_wh_colmap_parse(v, path, NULL, dpp_spec_add_problem, p->problems, &m, &e);
    if (rc == SL_OK)
        rc = sl_wh_colmap_resolve_named(m, NULL, dpp_spec_add_problem, p->problems,
                                        &job->kafka.columns, &e);
    if (rc == SL_ERR_NOMEM) p->nomem = true;
    sl_wh_colmap_destroy(m);
}

/* start / stop: a word, or {"timestamp_ms": N}. */
static void parse_at(dpp_parse_t *p, const json_t *v, const char *path, bool start, uint8_t *at,
                     int64_t *ms)
{
    const char *words = start ? "\"earliest\", \"latest\" or {\"timestamp_ms\": N}"
                              : "\"end\" or {\"timestamp_ms\": N}";
    if (json_is_string(v)) {
        const char *w = json_string_value(v);
        if (start && strcmp(w, "earliest") == 0)
            *at = SL_PIPELINE_KAFKA_EARLIEST;
        else if (strcmp(w, start ? "latest" : "end") == 0)
            *at = SL_PIPELINE_KAFKA_LATEST;
        else
            sl_pipeline_problems_add(p->problems, "%s: %s, not \"%.64s\"", path, words, w);
        return;
    }
    const json_t *t = json_is_object(v) ? json_object_get(v, "timestamp_ms") : NULL;
    if (t == NULL || json_object_size(v) != 1) {
        sl_pipeline_problems_add(p->problems, "%s: must be %s", path, words);
        return;
    }
    if (!json_is_integer(t) || json_integer_value(t) < 0) {
        sl_pipeline_problems_add(p->problems,
                                 "%s.timestamp_ms: must be an integer >= 0 (milliseconds since "
                                 "the epoch)",
                                 path);
        return;
    }
    *at = SL_PIPELINE_KAFKA_TIMESTAMP;
    *ms = (int64_t)json_integer_value(t);
}

static void parse_start(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    parse_at(p, v, path, true, &job->kafka.start, &job->kafka.start_ms);
}

static void parse_stop(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    parse_at(p, v, path, false, &job->kafka.stop, &job->kafka.stop_ms);
}

/* Properties sluice sets itself: exactly once rests on them (docs/DESIGN.md,
 * "Kafka: offsets are rows"). */
static const char *const kafka_owned[] = {
    "bootstrap.servers",  "metadata.broker.list",     "group.id",
    "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
    "isolation.level",    "enable.partition.eof",     NULL};

/* librdkafka properties passed through: each checked by librdkafka itself
 * on a scratch configuration, so a misspelt name or a bad value is a
 * problem at submission, not a worker failing later. */
static void parse_props(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job)
{
    if (!json_is_object(v)) {
        sl_pipeline_problems_add(p->problems, "%s: must be an object {\"name\": \"value\"}", path);
        return;
    }
    size_t n = json_object_size(v);
    if (n == 0) return;
    if (n > 1024) {
        sl_pipeline_problems_add(p->problems, "%s: %zu properties, more than 1024", path, n);
        return;
    }
    sl_error_t lerr = {0};
    if (sl_netlib_kafka(&lerr) == NULL) {
        sl_pipeline_problems_add(p->problems, "%s: cannot be checked: %s", path, lerr.msg);
        return;
    }
    if ((job->kafka.props = sl_calloc(NULL, 2 * n, sizeof(char *))) == NULL) {
        p->nomem = true;
        return;
    }
    rd_kafka_conf_t *conf = librdkafka()->conf_new();
    if (conf == NULL) {
        p->nomem = true;
        return;
    }
    const char *name;
    const json_t *val;
    json_object_foreach((json_t *)v, name, val)
    {
        uint32_t k = job->kafka.num_props++;
        bool owned = false;
        for (uint32_t o = 0; kafka_owned[o] != NULL && !owned; o++)
            owned = strcmp(kafka_owned[o], name) == 0;
        char errstr[256];
        if (owned)
            sl_pipeline_problems_add(p->problems,
                                     "%s.%s: set by sluice (docs/KAFKA.md); it cannot be given",
                                     path, name);
        else if (!json_is_string(val))
            sl_pipeline_problems_add(p->problems, "%s.%s: must be a string", path, name);
        else if (librdkafka()->conf_set(conf, name, json_string_value(val), errstr,
                                        sizeof errstr) != RD_KAFKA_CONF_OK)
            sl_pipeline_problems_add(p->problems, "%s.%s: %s", path, name, errstr);
        job->kafka.props[2 * k] = sl_strdup(NULL, name);
        job->kafka.props[2 * k + 1] =
            sl_strdup(NULL, json_is_string(val) ? json_string_value(val) : "");
        if (!job->kafka.props[2 * k] || !job->kafka.props[2 * k + 1]) p->nomem = true;
    }
    librdkafka()->conf_destroy(conf);
}

/* ---- its keys in the table ---- */

static const char *const kafka_formats[] = {"protobuf", "json", NULL};

static const dpp_field_t kafka_fields[] = {
    {.name = "brokers",
     .type = FIELD_STRING,
     .required = true,
     AT(kafka.brokers),
     .parse = check_brokers,
     .type_doc = "`\"host:port[,host:port...]\"`",
     .doc = "bootstrap servers"},
    {.name = "topics",
     .type = FIELD_CUSTOM,
     .required = true,
     .parse = parse_topics,
     .type_doc = "non-empty array of distinct topic names",
     .doc = "topics read, every partition of each"},
    {.name = "format",
     .type = FIELD_ENUM,
     .choices = kafka_formats,
     .def.u = SL_PIPELINE_KAFKA_PROTOBUF,
     AT(kafka.format),
     .doc = "what a record's value is: a `sluice.Sample` with the `sluice-format` header "
            "(`sluice produce`), or a JSON object whose keys `columns` maps (no header needed, "
            "the key ignored)"},
    {.name = "schema",
     .type = FIELD_CUSTOM,
     .parse = parse_schema,
     .type_doc = "object, a table schema (`sluice table create --schema`)",
     .def_doc = "**required** for protobuf records; none for JSON",
     .doc = "the features and labels of the records; a record that does not fit is bad "
            "(counted, skipped). JSON records take theirs from `columns` (then `schema` is "
            "refused)"},
    {.name = "columns",
     .type = FIELD_CUSTOM,
     .parse = parse_columns,
     .type_doc = "object, a column mapping (docs/TABLES.md, \"The column mapping\")",
     .def_doc = "**required** for JSON records",
     .doc = "JSON records: which keys are the sample id, session id, timestamp, labels, "
            "dense, sparse and weighted features (strings only through a declared hash); the "
            "job's schema is the mapping's; keys it does not name are ignored"},
    CUSTOM_KEY("start", parse_start, "`\"earliest\"`, `\"latest\"` or `{\"timestamp_ms\": N}`",
               "`\"earliest\"`",
               "where each partition is read from: its first offset, its high-water mark at "
               "submission, or the first record whose CreateTime is at or after N ms"),
    CUSTOM_KEY("stop", parse_stop, "`\"end\"` or `{\"timestamp_ms\": N}`", "never (a stream)",
               "a bounded replay: up to the high-water marks at submission, or up to the "
               "first record whose CreateTime is at or after N ms; the job then finishes"),
    UINT_KEY("linger_ms", kafka.linger_ms, 0, 60000, 5,
             "a batch is cut after this long since its first record, full or not"),
    UINT_KEY("chunk", kafka.chunk, 1, 1u << 30, 65536,
             "offsets of one partition per split (the unit a worker leases)"),
    CUSTOM_KEY("properties", parse_props, "object of strings", "none",
               "librdkafka consumer properties passed through (checked by librdkafka); the "
               "ones exactly once rests on are refused"),
    {.name = "dead_letter_topic",
     .type = FIELD_STRING,
     AT(kafka.dead_letter_topic),
     .parse = check_dead_letter,
     .type_doc = "topic name (an existing topic, not one of `topics`)",
     .def_doc = "none",
     .doc = "every bad record is produced to it unchanged (key, value, headers) plus headers "
            "`sluice-error`, `sluice-source-topic`, `-partition`, `-offset` (docs/KAFKA.md); "
            "still counted and skipped"},
};
const dpp_object_t dpp_spec_kafka = {"$.source.kafka", kafka_fields, COUNT(kafka_fields)};

/* Fuzz target for the Kafka record decoder (src/kafka/record_decode.c, its
 * wire walker over sluice.Sample): any value either is refused as a bad
 * record (SL_ERR_CORRUPT, a message naming the offset, nothing added) or
 * becomes exactly one row whose id lists fit in the value's bytes; the same
 * value decoded twice gives the same answer. One decoder serves every
 * input, so name hints left by earlier inputs are exercised too; the first
 * byte picks every feature or a projection. Sanitizers catch out-of-bounds
 * reads (the value is copied to an allocation of its exact size). Seed
 * inputs are in tests/fuzz/corpus/kafka_record/. kafka_walk_test checks
 * the values themselves against protobuf-c. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kafka/record_decode.h"

#define SCHEMA_JSON                                                                                \
    "{\"features\": [{\"name\": \"age\", \"kind\": \"dense\"}, {\"name\": \"hist\", \"kind\": "    \
    "\"sparse\"}, {\"name\": \"geo\", \"kind\": \"weighted\"}], \"labels\": [\"click\"]}"

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "kafka_record_fuzz: %s: %s\n", what, msg ? msg : "");
    abort();
}

static sl_kafka_rows_t *decoder(bool projected)
{
    static sl_kafka_rows_t *r[2];
    if (r[projected]) return r[projected];
    json_error_t je;
    json_t *j = json_loads(SCHEMA_JSON, 0, &je);
    sl_wh_schema_t *s = NULL;
    sl_error_t err = {0};
    if (!j || sl_wh_schema_from_json(j, NULL, &s, &err) != SL_OK) fail("schema", err.msg);
    json_decref(j);
    const char *some[] = {"geo", "age"};
    if (sl_kafka_rows_new(s, projected ? some : NULL, projected ? 2 : 0, NULL, &r[projected],
                          &err) != SL_OK)
        fail("decoder", err.msg);
    sl_wh_schema_destroy(s); /* the decoder holds a copy */
    return r[projected];
}

static sl_err_t decode(sl_kafka_rows_t *r, const uint8_t *v, size_t n, sl_error_t *err)
{
    sl_kafka_record_t rec = {
        .value = v, .value_len = n, .format = "1", .format_len = 1, .format_headers = 1};
    return sl_kafka_rows_add(r, &rec, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    sl_kafka_rows_t *r = decoder(data[0] & 1);
    size_t n = size - 1;
    uint8_t *v = malloc(n ? n : 1);
    if (!v) return 0;
    memcpy(v, data + 1, n);
    sl_error_t err = {0}, again = {0};
    sl_err_t rc = decode(r, v, n, &err);
    if (rc != SL_OK) {
        if (rc != SL_ERR_CORRUPT) fail("not a bad record, not a row", err.msg);
        if (strncmp(err.msg, "offset 0: ", 10) != 0) fail("a reason without its offset", err.msg);
        if (sl_kafka_rows_count(r) != 0) fail("a bad record left a row", err.msg);
    } else if (sl_kafka_rows_count(r) != 1) {
        fail("a good record is not one row", NULL);
    }
    if (decode(r, v, n, &again) != rc || strcmp(err.msg, again.msg) != 0)
        fail("the same value decoded otherwise", again.msg);
    sl_kafka_stripe_t st;
    if (sl_kafka_rows_take(r, &st, &err) != SL_OK) fail("take", err.msg);
    const sl_batch_t *b = &st.rows.batch;
    if (b->batch_size != (rc == SL_OK ? 2u : 0u)) fail("rows taken", NULL);
    uint64_t ids = 0;
    for (uint32_t i = 0; i < b->sparse.num_keys * b->batch_size; i++) {
        if (b->sparse.lengths[i] < 0) fail("a negative length", NULL);
        ids += (uint64_t)b->sparse.lengths[i];
    }
    if (ids != b->sparse.num_values) fail("lengths do not add up to the values", NULL);
    if (ids > 2 * (uint64_t)n) fail("more ids than the value has bytes", NULL);
    free(v);
    return 0;
}

/* Kafka records (src/kafka/record_decode.c) decoded into columns, with
 * exact values: records of layout version 1 (every value, rows stably
 * sorted by session), bad records refused with their reason and changing
 * nothing, and a projection of the features. The chunk plan and reading
 * chunks of partitions: kafka_chunk_test.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kafka_records.h"
#include "kafka/record_decode.h"
#include "testutil.h"

/* ---- decoding ---- */

static sl_err_t add(sl_kafka_rows_t *r, const void *value, size_t len, const char *format,
                    uint32_t headers, int64_t offset, sl_error_t *err)
{
    sl_kafka_record_t rec = {.value = value,
                             .value_len = len,
                             .format = format,
                             .format_len = format ? strlen(format) : 0,
                             .format_headers = headers,
                             .offset = offset,
                             .create_ms = 5000 + offset};
    return sl_kafka_rows_add(r, &rec, err);
}

/* Check row j of a taken stripe against sample id's derived values. */
static void check_row(const sl_kafka_stripe_t *s, uint32_t j, uint64_t id, uint64_t session)
{
    const sl_batch_t *b = &s->rows.batch;
    uint32_t n = b->batch_size;
    cr_assert_eq(b->sample_ids[j], (int64_t)id);
    cr_assert_eq(s->rows.session_ids[j], (int64_t)session);
    cr_assert_eq(s->rows.timestamps[j], 1000 + (int64_t)id);
    cr_assert_eq(b->labels.cols, 1);
    cr_assert_float_eq(b->labels.data[j], (float)(id % 2), 0);
    cr_assert_eq(b->dense.cols, 1);
    if (id % 5 == 0)
        cr_assert(isnan(b->dense.data[j]), "row %u: age of sample %lu is missing", j,
                  (unsigned long)id);
    else
        cr_assert_float_eq(b->dense.data[j], (float)(id / 2), 0);
    cr_assert_eq(b->sparse.num_keys, 2);
    cr_assert_str_eq(b->sparse.keys[0], "hist");
    cr_assert_str_eq(b->sparse.keys[1], "geo");
    cr_assert_eq(b->sparse.lengths[j], (int32_t)(id % 3 + 1));
    cr_assert_eq(b->sparse.lengths[n + j], 1);
    uint64_t v = 0; /* where row j's hist starts: key-major */
    for (uint32_t k = 0; k < j; k++)
        v += (uint64_t)b->sparse.lengths[k];
    for (uint64_t k = 0; k <= id % 3; k++) {
        cr_assert_eq(b->sparse.values[v + k], (int64_t)(id + k));
        cr_assert_float_eq(b->sparse.weights[v + k], 1.0f, 0);
    }
    uint64_t g = 0;
    for (uint32_t k = 0; k < n; k++)
        g += (uint64_t)b->sparse.lengths[k];
    for (uint32_t k = 0; k < j; k++)
        g += (uint64_t)b->sparse.lengths[n + k];
    cr_assert_eq(b->sparse.values[g], 7);
    cr_assert_float_eq(b->sparse.weights[g], (float)(id % 4), 0);
}

Test(kafka_records, decode_sorted_by_session)
{
    sl_wh_schema_t *schema = kr_schema();
    sl_kafka_rows_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_rows_new(schema, NULL, 0, NULL, &r, &err), SL_OK);
    /* ids 10..19, sessions 3,1,2,3,1,2,...: stable within a session */
    uint8_t buf[512];
    for (uint64_t id = 10; id < 20; id++) {
        size_t n = kr_encode(id, (id % 3) + 1, buf, sizeof buf);
        cr_assert_eq(add(r, buf, n, "1", 1, (int64_t)id + 100, &err), SL_OK, "%s", err.msg);
    }
    cr_assert_eq(sl_kafka_rows_count(r), 10);
    sl_kafka_stripe_t s;
    cr_assert_eq(sl_kafka_rows_take(r, &s, &err), SL_OK);
    cr_assert_eq(sl_kafka_rows_count(r), 0);
    cr_assert_eq(s.rows.batch.batch_size, 10);
    const uint64_t want[] = {12, 15, 18, 10, 13, 16, 19, 11, 14, 17};
    for (uint32_t j = 0; j < 10; j++) {
        check_row(&s, j, want[j], want[j] % 3 + 1);
        cr_assert_eq(s.offsets[j], (int64_t)want[j] + 100);
        cr_assert_eq(s.create_ms[j], 5000 + (int64_t)want[j] + 100);
    }
    cr_assert_null(s.rows.batch.arena);
    cr_assert_eq(s.rows.schema != NULL, true);
    /* empty take: no rows, still a valid stripe */
    cr_assert_eq(sl_kafka_rows_take(r, &s, &err), SL_OK);
    cr_assert_eq(s.rows.batch.batch_size, 0);
    sl_kafka_rows_destroy(r);
    sl_wh_schema_destroy(schema);
}

Test(kafka_records, bad_records_say_why_and_change_nothing)
{
    sl_wh_schema_t *schema = kr_schema();
    sl_kafka_rows_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_rows_new(schema, NULL, 0, NULL, &r, &err), SL_OK);
    uint8_t buf[512];
    size_t n = kr_encode(4, 9, buf, sizeof buf);
    cr_assert_eq(add(r, buf, n, "1", 1, 0, &err), SL_OK);
    struct {
        const char *format;
        uint32_t headers;
        const void *value;
        size_t len;
        const char *why;
    } bad[] = {
        {NULL, 0, buf, n, "offset 7: no sluice-format header"},
        {"1", 2, buf, n, "offset 7: 2 sluice-format headers, want one"},
        {"2", 1, buf, n, "offset 7: sluice-format '2', this reader knows version 1"},
        {"1\n", 1, buf, n, "offset 7: sluice-format '1?', this reader knows version 1"},
        {"1", 1, "\xff\xff\xff", 3, "offset 7: the value (3 bytes) is not a sluice.Sample"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(add(r, bad[i].value, bad[i].len, bad[i].format, bad[i].headers, 7, &err),
                     SL_ERR_CORRUPT);
        cr_assert_str_eq(err.msg, bad[i].why);
    }
    /* samples that do not fit the schema */
    Sluice__Sample s = SLUICE__SAMPLE__INIT;
    Sluice__NamedValue nv = SLUICE__NAMED_VALUE__INIT, nv2 = SLUICE__NAMED_VALUE__INIT;
    Sluice__NamedValue *vals[] = {&nv, &nv2};
    Sluice__IdList il = SLUICE__ID_LIST__INIT;
    Sluice__IdList *lists[] = {&il};
    int64_t ids[2] = {1, 2};
    float w[1] = {0.5f};
    struct {
        int what; /* 0 label, 1 dense, 2 sparse */
        const char *name;
        size_t n_ids, n_weights;
        int twice;
        const char *why;
    } unfit[] = {
        {0, "like", 0, 0, 0, "offset 8: label 'like' is not in the schema"},
        {0, "click", 0, 0, 1, "offset 8: label 'click' is given twice"},
        {1, "colour", 0, 0, 0, "offset 8: feature 'colour' is not in the schema"},
        {1, "hist", 0, 0, 0, "offset 8: feature 'hist' is sparse, given as a dense value"},
        {1, "age", 0, 0, 1, "offset 8: feature 'age' is given twice"},
        {2, "age", 2, 0, 0, "offset 8: feature 'age' is dense, given as an id list"},
        {2, "geo", 2, 1, 0, "offset 8: feature 'geo' (weighted) has 2 ids and 1 weights"},
        {2, "hist", 2, 1, 0, "offset 8: feature 'hist' (sparse) has 2 ids and 1 weights"},
    };
    for (size_t i = 0; i < sizeof unfit / sizeof unfit[0]; i++) {
        s = (Sluice__Sample)SLUICE__SAMPLE__INIT;
        nv.name = nv2.name = (char *)unfit[i].name;
        il.name = (char *)unfit[i].name;
        il.n_ids = unfit[i].n_ids;
        il.ids = ids;
        il.n_weights = unfit[i].n_weights;
        il.weights = w;
        size_t k = unfit[i].twice ? 2 : 1;
        if (unfit[i].what == 0) {
            s.n_labels = k;
            s.labels = vals;
        } else if (unfit[i].what == 1) {
            s.n_dense = k;
            s.dense = vals;
        } else {
            s.n_sparse = 1;
            s.sparse = lists;
        }
        uint8_t b2[256];
        size_t len = sluice__sample__pack(&s, b2);
        cr_assert_eq(add(r, b2, len, "1", 1, 8, &err), SL_ERR_CORRUPT);
        cr_assert_str_eq(err.msg, unfit[i].why);
    }
    /* none of them left a trace: one row, sample 4, exactly */
    cr_assert_eq(sl_kafka_rows_count(r), 1);
    sl_kafka_stripe_t st;
    cr_assert_eq(sl_kafka_rows_take(r, &st, &err), SL_OK);
    cr_assert_eq(st.rows.batch.batch_size, 1);
    cr_assert_eq(st.rows.batch.sparse.num_values, 3); /* hist: 4 % 3 + 1 ids, geo: 1 */
    check_row(&st, 0, 4, 9);
    sl_kafka_rows_destroy(r);
    sl_wh_schema_destroy(schema);
}

/* A projection keeps only its features, in its order; records are still
 * checked against the whole schema. */
Test(kafka_records, projection)
{
    sl_wh_schema_t *schema = kr_schema();
    sl_kafka_rows_t *r = NULL;
    sl_error_t err = {0};
    const char *bad[] = {"geo", "colour"};
    cr_assert_eq(sl_kafka_rows_new(schema, bad, 2, NULL, &r, &err), SL_ERR_NOT_FOUND);
    cr_assert_str_eq(err.msg, "kafka records: feature 'colour' is not in the schema");
    const char *twice[] = {"geo", "geo"};
    cr_assert_eq(sl_kafka_rows_new(schema, twice, 2, NULL, &r, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "kafka records: feature 'geo' requested twice");
    const char *proj[] = {"geo", "age"};
    cr_assert_eq(sl_kafka_rows_new(schema, proj, 2, NULL, &r, &err), SL_OK, "%s", err.msg);
    uint8_t buf[512];
    for (uint64_t id = 1; id <= 2; id++) {
        size_t n = kr_encode(id, 5, buf, sizeof buf);
        cr_assert_eq(add(r, buf, n, "1", 1, (int64_t)id, &err), SL_OK, "%s", err.msg);
    }
    sl_kafka_stripe_t s;
    cr_assert_eq(sl_kafka_rows_take(r, &s, &err), SL_OK);
    const sl_batch_t *b = &s.rows.batch;
    cr_assert_eq(b->batch_size, 2);
    cr_assert_eq(b->dense.cols, 1);
    cr_assert_str_eq(b->dense.names[0], "age");
    cr_assert_float_eq(b->dense.data[0], 0.0f, 0);
    cr_assert_float_eq(b->dense.data[1], 1.0f, 0);
    cr_assert_eq(b->sparse.num_keys, 1);
    cr_assert_str_eq(b->sparse.keys[0], "geo");
    cr_assert_eq(b->sparse.num_values, 2);
    cr_assert_eq(b->sparse.values[1], 7);
    cr_assert_float_eq(b->sparse.weights[0], 1.0f, 0);
    cr_assert_float_eq(b->sparse.weights[1], 2.0f, 0);
    sl_kafka_rows_destroy(r);
    sl_wh_schema_destroy(schema);
}

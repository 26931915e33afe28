/* The record encoder's writer (src/kafka/record_encode.c) against
 * protobuf-c, the definition of sluice.Sample: for random rows of a schema
 * with every kind of feature (zero, negative and 10-byte values, -0.0 and
 * NaN floats, missing dense values, empty and long lists, weights given or
 * left to 1.0), the bytes are exactly what sluice__sample__pack writes for
 * the Sample the encoder stands for. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kafka/record.h"
#include "sluice.pb-c.h"
#include "warehouse/warehouse.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float draw_float(void)
{
    switch (next() % 6) {
    case 0:
        return 0.0f;
    case 1:
        return -0.0f;
    case 2:
        return NAN;
    default:
        return (float)((double)(int64_t)next() / 1e12);
    }
}

static int64_t draw_id(void)
{
    switch (next() % 5) {
    case 0:
        return 0;
    case 1:
        return -(int64_t)(next() % 1000); /* 10 bytes on the wire */
    case 2:
        return (int64_t)next();
    default:
        return (int64_t)(next() % (1u << (7 * (1 + next() % 4))));
    }
}

#define LABELS 2
#define DENSE 3
#define SPARSE 3

static sl_wh_schema_t *schema_of_every_kind(void)
{
    sl_error_t err = {0};
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    cr_assert_not_null(s);
    cr_assert_eq(sl_wh_schema_add_label(s, "click", &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_label(s, "a_longer_label_name", &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "age", SL_WH_DENSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "items", SL_WH_SPARSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "score", SL_WH_DENSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "tags", SL_WH_WEIGHTED, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "ctr", SL_WH_DENSE, &err), SL_OK);
    cr_assert_eq(sl_wh_schema_add_feature(s, "hist", SL_WH_SPARSE, &err), SL_OK);
    return s;
}

/* The Sample a row stands for: every label, the dense values that are not
 * NaN, every list (a weighted one with its weights, 1.0 when not given). */
static size_t reference(const sl_wh_schema_t *s, const sl_wh_row_t *row, uint8_t *out)
{
    Sluice__Sample m = SLUICE__SAMPLE__INIT;
    Sluice__NamedValue labels[LABELS], dense[DENSE], *lp[LABELS], *dp[DENSE];
    Sluice__IdList lists[SPARSE], *sp[SPARSE];
    static float ones[4096];
    for (size_t i = 0; i < 4096; i++)
        ones[i] = 1.0f;
    m.sample_id = (uint64_t)row->sample_id;
    m.session_id = (uint64_t)row->session_id;
    m.timestamp = row->timestamp;
    for (uint32_t i = 0; i < LABELS; i++) {
        sluice__named_value__init(&labels[i]);
        labels[i].name = (char *)sl_wh_schema_label(s, i);
        labels[i].value = row->labels ? row->labels[i] : 0.0f;
        lp[i] = &labels[i];
    }
    m.n_labels = LABELS;
    m.labels = lp;
    for (uint32_t i = 0; row->dense && i < DENSE; i++) {
        if (isnan(row->dense[i])) continue;
        sluice__named_value__init(&dense[m.n_dense]);
        dense[m.n_dense].name = (char *)sl_wh_schema_dense(s, i)->name;
        dense[m.n_dense].value = row->dense[i];
        dp[m.n_dense] = &dense[m.n_dense];
        m.n_dense++;
    }
    m.dense = dp;
    for (uint32_t i = 0; i < SPARSE; i++) {
        const sl_wh_feature_t *f = sl_wh_schema_sparse(s, i);
        const sl_wh_idlist_t *in = row->sparse ? &row->sparse[i] : NULL;
        sluice__id_list__init(&lists[i]);
        lists[i].name = (char *)f->name;
        lists[i].n_ids = in ? in->len : 0;
        lists[i].ids = in ? (int64_t *)in->ids : NULL;
        if (in && in->len && f->kind == SL_WH_WEIGHTED) {
            lists[i].n_weights = in->len;
            lists[i].weights = in->weights ? (float *)in->weights : ones;
        }
        sp[i] = &lists[i];
    }
    m.n_sparse = SPARSE;
    m.sparse = sp;
    return sluice__sample__pack(&m, out);
}

Test(kafka_record_encode, the_writer_writes_what_protobuf_c_packs)
{
    sl_wh_schema_t *s = schema_of_every_kind();
    sl_kafka_encoder_t *e = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_encoder_new(s, NULL, &e, &err), SL_OK, "%s", err.msg);
    static uint8_t want[1 << 20];
    for (int round = 0; round < 5000; round++) {
        float labels[LABELS], dense[DENSE], weights[SPARSE][300];
        int64_t ids[SPARSE][300];
        sl_wh_idlist_t lists[SPARSE];
        for (int i = 0; i < LABELS; i++)
            labels[i] = draw_float();
        for (int i = 0; i < DENSE; i++)
            dense[i] = draw_float();
        for (int i = 0; i < SPARSE; i++) {
            uint32_t n = next() % 4 == 0 ? 0 : (uint32_t)(next() % 300);
            for (uint32_t k = 0; k < n; k++) {
                ids[i][k] = draw_id();
                weights[i][k] = draw_float();
            }
            lists[i] = (sl_wh_idlist_t){n, ids[i], next() % 2 ? weights[i] : NULL};
        }
        sl_wh_row_t row = {.sample_id = next() % 5 ? (int64_t)next() : 0,
                           .session_id = next() % 5 ? draw_id() : 0,
                           .timestamp = next() % 5 ? draw_id() : 0,
                           .labels = next() % 8 ? labels : NULL,
                           .dense = next() % 8 ? dense : NULL,
                           .sparse = next() % 8 ? lists : NULL};
        const uint8_t *v;
        size_t len;
        cr_assert_eq(sl_kafka_encode_row(e, &row, &v, &len, &err), SL_OK, "%s", err.msg);
        size_t wlen = reference(s, &row, want);
        cr_assert_eq(len, wlen, "round %d: %zu bytes, protobuf-c packs %zu", round, len, wlen);
        cr_assert(memcmp(v, want, len) == 0, "round %d: the bytes differ from protobuf-c's", round);
    }
    sl_kafka_encoder_destroy(e);
    sl_wh_schema_destroy(s);
}

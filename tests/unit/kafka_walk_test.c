/* The Kafka record decoder's wire walker (src/kafka/record_decode.c, "the
 * wire walker") against protobuf-c, which stays the definition of
 * sluice.Sample: for random Samples (valid ones, ones that do not fit the
 * schema), encoded by protobuf-c or in the other forms the wire format
 * allows (fields in any order, ids unpacked or in several packed runs,
 * scalars and names given twice, unknown fields of every wire type,
 * overlong varints), and for random mutations of them, the walker accepts
 * exactly what sluice__sample__unpack accepts, decodes exactly the values
 * it reads, and refuses with exactly the message the reference (the
 * unpacked Sample checked against the schema, as the decoder did before
 * the walker) gives. Then malformed inputs one by one: truncated varints,
 * lengths past the end, huge lengths, wrong wire types, groups, unknown
 * fields skipped, duplicates, names with a NUL. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kafka_records.h"
#include "kafka/record_decode.h"
#include "sluice.pb-c.h"
#include "testutil.h"

#define SCHEMA_JSON                                                                                \
    "{\"features\": [{\"name\": \"age\", \"kind\": \"dense\"}, {\"name\": \"hist\", \"kind\": "    \
    "\"sparse\"}, {\"name\": \"geo\", \"kind\": \"weighted\"}, {\"name\": \"price\", \"kind\": "   \
    "\"dense\"}, {\"name\": \"cat\", \"kind\": \"sparse\"}, {\"name\": \"ctr\", \"kind\": "        \
    "\"dense\"}], \"labels\": [\"click\", \"like\"]}"

static sl_wh_schema_t *schema_new(void)
{
    return kr_schema_of(SCHEMA_JSON);
}

/* ---- the reference: protobuf-c's Sample checked against the schema ---- */

#define MAXK 8
#define MAXIDS 16384

typedef struct row {
    int64_t sample, session, ts;
    float labels[MAXK], dense[MAXK];
    uint32_t len[MAXK];
    int64_t ids[MAXK][MAXIDS];
    float w[MAXK][MAXIDS];
} row_t;

typedef struct proj {
    const char *const *names; /* NULL: every feature in schema order */
    uint32_t n;
} proj_t;

/* The output index of feature f (dense among dense, others among others)
 * under p, or -1. */
static int out_index(const sl_wh_schema_t *s, const proj_t *p, const sl_wh_feature_t *f)
{
    int k = 0;
    uint32_t n = p->names ? p->n : sl_wh_schema_num_features(s);
    for (uint32_t i = 0; i < n; i++) {
        const sl_wh_feature_t *g =
            p->names ? sl_wh_schema_find(s, p->names[i]) : sl_wh_schema_feature(s, i);
        if ((g->kind == SL_WH_DENSE) != (f->kind == SL_WH_DENSE)) continue;
        if (g == f) return k;
        k++;
    }
    return -1;
}

/* A name as the decoder shows it: at most 64 bytes, printable. */
static const char *shown(const char *name)
{
    static char buf[4][80];
    static int at;
    char *b = buf[at++ % 4];
    size_t i = 0;
    for (; name[i] && i < 64; i++)
        b[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
    b[i] = '\0';
    return b;
}

/* What decoding value must give: NULL and *want (a row), or the message. */
static const char *reference(const sl_wh_schema_t *sc, const proj_t *p, const uint8_t *v,
                             size_t len, int64_t off, row_t *want, char *msg, size_t cap)
{
    Sluice__Sample *s = sluice__sample__unpack(NULL, len, v);
    if (!s) {
        snprintf(msg, cap, "offset %" PRId64 ": the value (%zu bytes) is not a sluice.Sample", off,
                 len);
        return msg;
    }
    memset(want, 0, sizeof *want);
    for (int i = 0; i < MAXK; i++)
        want->dense[i] = NAN;
    uint8_t seen[3][MAXK] = {{0}};
    const char *bad = NULL;
    for (size_t i = 0; !bad && i < s->n_labels; i++) {
        int t = sl_wh_schema_find_label(sc, s->labels[i]->name);
        if (t < 0)
            snprintf(msg, cap, "offset %" PRId64 ": label '%s' is not in the schema", off,
                     shown(s->labels[i]->name)),
                bad = msg;
        else if (seen[0][t]++)
            snprintf(msg, cap, "offset %" PRId64 ": label '%s' is given twice", off,
                     shown(s->labels[i]->name)),
                bad = msg;
        else
            want->labels[t] = s->labels[i]->value;
    }
    for (size_t i = 0; !bad && i < s->n_dense; i++) {
        const char *name = s->dense[i]->name;
        const sl_wh_feature_t *f = sl_wh_schema_find(sc, name);
        if (!f)
            snprintf(msg, cap, "offset %" PRId64 ": feature '%s' is not in the schema", off,
                     shown(name)),
                bad = msg;
        else if (f->kind != SL_WH_DENSE)
            snprintf(msg, cap, "offset %" PRId64 ": feature '%s' is %s, given as a dense value",
                     off, shown(name), sl_wh_kind_name(f->kind)),
                bad = msg;
        else if (seen[1][f->slot]++)
            snprintf(msg, cap, "offset %" PRId64 ": feature '%s' is given twice", off, shown(name)),
                bad = msg;
        else if (out_index(sc, p, f) >= 0)
            want->dense[out_index(sc, p, f)] = s->dense[i]->value;
    }
    for (size_t i = 0; !bad && i < s->n_sparse; i++) {
        const Sluice__IdList *l = s->sparse[i];
        const sl_wh_feature_t *f = sl_wh_schema_find(sc, l->name);
        bool weighted = f && f->kind == SL_WH_WEIGHTED;
        if (!f)
            snprintf(msg, cap, "offset %" PRId64 ": feature '%s' is not in the schema", off,
                     shown(l->name)),
                bad = msg;
        else if (f->kind == SL_WH_DENSE)
            snprintf(msg, cap, "offset %" PRId64 ": feature '%s' is dense, given as an id list",
                     off, shown(l->name)),
                bad = msg;
        else if (seen[2][f->slot]++)
            snprintf(msg, cap, "offset %" PRId64 ": feature '%s' is given twice", off,
                     shown(l->name)),
                bad = msg;
        else if (weighted ? l->n_weights != l->n_ids : l->n_weights != 0)
            snprintf(msg, cap, "offset %" PRId64 ": feature '%s' (%s) has %zu ids and %zu weights",
                     off, shown(l->name), sl_wh_kind_name(f->kind), l->n_ids, l->n_weights),
                bad = msg;
        else if (out_index(sc, p, f) >= 0) {
            int k = out_index(sc, p, f);
            cr_assert_leq(l->n_ids, MAXIDS);
            want->len[k] = (uint32_t)l->n_ids;
            for (size_t j = 0; j < l->n_ids; j++) {
                want->ids[k][j] = l->ids[j];
                want->w[k][j] = weighted ? l->weights[j] : 1.0f;
            }
        }
    }
    want->sample = (int64_t)s->sample_id;
    want->session = (int64_t)s->session_id;
    want->ts = s->timestamp;
    sluice__sample__free_unpacked(s, NULL);
    return bad;
}

static bool same_float(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/* Decode v with r (of schema sc, projection p) and check it against the
 * reference. @return whether it was accepted. */
static bool check(sl_kafka_rows_t *r, const sl_wh_schema_t *sc, const proj_t *p, const uint8_t *v,
                  size_t len, int64_t off, const char *what)
{
    static row_t want;
    char msg[SL_ERROR_MSG_MAX];
    const char *why = reference(sc, p, v, len, off, &want, msg, sizeof msg);
    sl_kafka_record_t rec = {.value = len ? v : NULL,
                             .value_len = len,
                             .format = "1",
                             .format_len = 1,
                             .format_headers = 1,
                             .offset = off,
                             .create_ms = 1};
    sl_error_t err = {0};
    sl_err_t rc = sl_kafka_rows_add(r, &rec, &err);
    if (why) {
        cr_assert_eq(rc, SL_ERR_CORRUPT, "%s: accepted, protobuf-c says: %s", what, why);
        cr_assert_str_eq(err.msg, why, "%s", what);
        cr_assert_eq(sl_kafka_rows_count(r), 0);
        return false;
    }
    cr_assert_eq(rc, SL_OK, "%s: refused (%s), protobuf-c accepts it", what, err.msg);
    sl_kafka_stripe_t st;
    cr_assert_eq(sl_kafka_rows_take(r, &st, &err), SL_OK);
    const sl_batch_t *b = &st.rows.batch;
    cr_assert_eq(b->batch_size, 1);
    cr_assert_eq(b->sample_ids[0], want.sample, "%s", what);
    cr_assert_eq(st.rows.session_ids[0], want.session, "%s", what);
    cr_assert_eq(st.rows.timestamps[0], want.ts, "%s", what);
    for (uint32_t t = 0; t < b->labels.cols; t++)
        cr_assert(same_float(b->labels.data[t], want.labels[t]), "%s: label %u", what, t);
    for (uint32_t d = 0; d < b->dense.cols; d++)
        cr_assert(same_float(b->dense.data[d], want.dense[d]), "%s: dense %u: %g, want %g", what, d,
                  b->dense.data[d], want.dense[d]);
    uint64_t at = 0;
    for (uint32_t k = 0; k < b->sparse.num_keys; k++) {
        cr_assert_eq((uint32_t)b->sparse.lengths[k], want.len[k], "%s: key %u", what, k);
        for (uint32_t j = 0; j < want.len[k]; j++, at++) {
            cr_assert_eq(b->sparse.values[at], want.ids[k][j], "%s: key %u id %u", what, k, j);
            if (b->sparse.weights)
                cr_assert(same_float(b->sparse.weights[at], want.w[k][j]), "%s: key %u weight %u",
                          what, k, j);
        }
    }
    cr_assert_eq(b->sparse.num_values, at);
    return true;
}

/* ---- random Samples and the ways to write them ---- */

static const char *const label_names[] = {"click", "like", "share"}; /* share: unknown */
static const char *const dense_names[] = {"age", "price", "ctr", "hist", "colour"};
static const char *const list_names[] = {"hist", "cat", "geo", "age", "zone"};

/* An id of some size: small, negative, full width. */
static int64_t any_id(uint64_t *rng)
{
    switch (tu_below(rng, 4)) {
    case 0:
        return (int64_t)tu_below(rng, 128);
    case 1:
        return -(int64_t)tu_below(rng, 1u << 20);
    case 2:
        return (int64_t)tu_below(rng, 1ull << 35);
    default:
        return (int64_t)tu_next(rng);
    }
}

typedef struct gen {
    Sluice__Sample s;
    Sluice__NamedValue nv[16], *labels[8], *dense[8];
    Sluice__IdList il[8], *lists[8];
    int64_t ids[8][64];
    float w[8][64];
} gen_t;

/* A random Sample; one in `odd` gets a name, a kind or a weight count
 * that does not fit the schema. */
static void gen_sample(gen_t *g, uint64_t *rng, uint64_t odd)
{
    memset(g, 0, sizeof *g);
    g->s = (Sluice__Sample)SLUICE__SAMPLE__INIT;
    g->s.sample_id = tu_below(rng, 3) ? tu_below(rng, 1u << 30) : tu_next(rng);
    g->s.session_id = tu_next(rng) >> tu_below(rng, 64);
    g->s.timestamp = tu_below(rng, 2) ? (int64_t)tu_below(rng, 2000000000) : any_id(rng);
    bool unfit = tu_below(rng, odd) == 0;
    uint32_t nv = 0;
    size_t nl = tu_below(rng, 3);
    for (size_t i = 0; i < nl; i++) {
        Sluice__NamedValue *v = &g->nv[nv++];
        *v = (Sluice__NamedValue)SLUICE__NAMED_VALUE__INIT;
        v->name = (char *)label_names[unfit ? tu_below(rng, 3) : (i + tu_below(rng, 2)) % 2];
        v->value = (float)tu_below(rng, 2);
        g->labels[g->s.n_labels++] = v;
    }
    if (!unfit && nl == 2 && g->labels[0]->name == g->labels[1]->name) g->s.n_labels = 1;
    g->s.labels = g->labels;
    for (size_t i = 0; i < 3; i++) {
        if (tu_below(rng, 3) == 0) continue; /* missing: NaN */
        Sluice__NamedValue *v = &g->nv[nv++];
        *v = (Sluice__NamedValue)SLUICE__NAMED_VALUE__INIT;
        v->name = (char *)dense_names[unfit && tu_below(rng, 2) ? tu_below(rng, 5) : i];
        v->value = (float)any_id(rng) / 7.0f;
        g->dense[g->s.n_dense++] = v;
    }
    g->s.dense = g->dense;
    for (size_t i = 0; i < 3; i++) {
        Sluice__IdList *l = &g->il[g->s.n_sparse];
        *l = (Sluice__IdList)SLUICE__ID_LIST__INIT;
        size_t which = unfit && tu_below(rng, 2) ? tu_below(rng, 5) : i;
        l->name = (char *)list_names[which];
        l->n_ids = tu_below(rng, 4) == 0 ? 0 : tu_below(rng, 64);
        l->ids = g->ids[g->s.n_sparse];
        for (size_t k = 0; k < l->n_ids; k++)
            l->ids[k] = any_id(rng);
        bool weighted = which == 2;
        if (unfit && tu_below(rng, 3) == 0) weighted = !weighted;
        l->n_weights = weighted ? l->n_ids : 0;
        if (unfit && weighted && tu_below(rng, 2)) l->n_weights = tu_below(rng, l->n_ids + 1);
        l->weights = g->w[g->s.n_sparse];
        for (size_t k = 0; k < l->n_weights; k++)
            l->weights[k] = (float)tu_below(rng, 1000) / 16.0f;
        g->lists[g->s.n_sparse++] = l;
    }
    g->s.sparse = g->lists;
}

/* ---- a writer of the wire format's other forms ---- */

typedef struct out {
    uint8_t *b;
    size_t n, cap;
} out_t;

static void put(out_t *o, const void *p, size_t n)
{
    cr_assert_leq(o->n + n, o->cap);
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

/* A varint, now and then overlong (still at most 10 bytes). */
static void put_varint(out_t *o, uint64_t v, uint64_t *rng)
{
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n++] = (uint8_t)(v & 0x7f) | 0x80;
        v >>= 7;
    } while (v);
    while (n < 10 && rng && tu_below(rng, 8) == 0)
        b[n++] = 0x80; /* a zero group more */
    b[n - 1] &= 0x7f;
    put(o, b, n);
}

static void put_tag(out_t *o, uint32_t field, uint32_t type)
{
    if (field == 0) { /* protobuf-c 1.4 skips field 0 only in a tag of two bytes or more */
        uint8_t b[2] = {(uint8_t)(0x80 | type), 0};
        put(o, b, 2);
        return;
    }
    put_varint(o, (uint64_t)field << 3 | type, NULL);
}

static void put_bytes(out_t *o, uint32_t field, const void *p, size_t n)
{
    put_tag(o, field, 2);
    put_varint(o, n, NULL);
    put(o, p, n);
}

/* An unknown field of a random wire type, field numbers 7.. (or 0). */
static void put_unknown(out_t *o, uint64_t *rng)
{
    uint32_t field = tu_below(rng, 4) ? 7 + (uint32_t)tu_below(rng, 100000) : 0;
    uint64_t x = tu_next(rng);
    switch (tu_below(rng, 4)) {
    case 0:
        put_tag(o, field, 0), put_varint(o, x, rng);
        break;
    case 1:
        put_tag(o, field, 1), put(o, &x, 8);
        break;
    case 2:
        put_bytes(o, field, &x, tu_below(rng, 9));
        break;
    default:
        put_tag(o, field, 5), put(o, &x, 4);
        break;
    }
}

static void put_named(out_t *o, uint32_t field, const Sluice__NamedValue *v, uint64_t *rng)
{
    uint8_t b[256];
    out_t in = {b, 0, sizeof b};
    float decoy = -1.0f;
    bool twice = tu_below(rng, 4) == 0, value_first = tu_below(rng, 2);
    if (twice) put_bytes(&in, 1, "decoy", 5);
    if (value_first || twice) put_tag(&in, 2, 5), put(&in, twice ? &decoy : &v->value, 4);
    if (tu_below(rng, 4) == 0) put_unknown(&in, rng);
    put_bytes(&in, 1, v->name, strlen(v->name));
    if (twice || !value_first) put_tag(&in, 2, 5), put(&in, &v->value, 4);
    put_bytes(o, field, b, in.n);
}

static void put_list(out_t *o, const Sluice__IdList *l, uint64_t *rng)
{
    uint8_t b[2048];
    out_t in = {b, 0, sizeof b};
    bool name_last = tu_below(rng, 3) == 0;
    if (!name_last) put_bytes(&in, 1, l->name, strlen(l->name));
    size_t i = 0;
    while (i < l->n_ids) { /* runs, each packed or one id at a time */
        size_t run = 1 + tu_below(rng, l->n_ids - i);
        if (tu_below(rng, 3) == 0) {
            for (size_t k = 0; k < run; k++)
                put_tag(&in, 2, 0), put_varint(&in, (uint64_t)l->ids[i + k], rng);
        } else {
            uint8_t p[1024];
            out_t pk = {p, 0, sizeof p};
            for (size_t k = 0; k < run; k++)
                put_varint(&pk, (uint64_t)l->ids[i + k], rng);
            put_bytes(&in, 2, p, pk.n);
        }
        i += run;
        if (tu_below(rng, 8) == 0) put_unknown(&in, rng);
    }
    if (tu_below(rng, 8) == 0) put_bytes(&in, 2, "", 0); /* an empty packed run */
    for (size_t k = 0; k < l->n_weights;) {
        size_t run = 1 + tu_below(rng, l->n_weights - k);
        if (tu_below(rng, 2))
            put_bytes(&in, 3, &l->weights[k], run * 4);
        else
            for (size_t j = 0; j < run; j++)
                put_tag(&in, 3, 5), put(&in, &l->weights[k + j], 4);
        k += run;
    }
    if (name_last) put_bytes(&in, 1, l->name, strlen(l->name));
    put_bytes(o, 6, b, in.n);
}

/* g's Sample in another form of the wire format than protobuf-c's. */
static size_t put_sample(const gen_t *g, uint8_t *buf, size_t cap, uint64_t *rng)
{
    out_t o = {buf, 0, cap};
    const Sluice__Sample *s = &g->s;
    uint64_t scalars[3] = {s->sample_id, s->session_id, (uint64_t)s->timestamp};
    /* 3 scalars, then the lists, in a random order of kinds */
    uint32_t order[6] = {0, 1, 2, 3, 4, 5};
    for (int i = 5; i > 0; i--) {
        uint32_t j = (uint32_t)tu_below(rng, (uint64_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < 6; i++) {
        uint32_t k = order[i];
        if (k < 3) {
            if (tu_below(rng, 4) == 0) put_tag(&o, k + 1, 0), put_varint(&o, tu_next(rng), rng);
            if (scalars[k] || tu_below(rng, 2))
                put_tag(&o, k + 1, 0), put_varint(&o, scalars[k], rng);
        } else if (k == 3) {
            for (size_t j = 0; j < s->n_labels; j++)
                put_named(&o, 4, s->labels[j], rng);
        } else if (k == 4) {
            for (size_t j = 0; j < s->n_dense; j++)
                put_named(&o, 5, s->dense[j], rng);
        } else {
            for (size_t j = 0; j < s->n_sparse; j++)
                put_list(&o, s->sparse[j], rng);
        }
        if (tu_below(rng, 4) == 0) put_unknown(&o, rng);
    }
    return o.n;
}

/* A random change of v (1 to 3 of: a byte changed, the end cut, bytes
 * inserted, a piece repeated). */
static size_t mutate(uint8_t *v, size_t n, size_t cap, uint64_t *rng)
{
    for (uint64_t m = 1 + tu_below(rng, 3); m-- && n;) {
        size_t at = tu_below(rng, n);
        switch (tu_below(rng, 4)) {
        case 0:
            v[at] = (uint8_t)tu_next(rng);
            break;
        case 1:
            n = at;
            break;
        case 2: {
            size_t k = 1 + tu_below(rng, 4);
            if (n + k > cap) break;
            memmove(v + at + k, v + at, n - at);
            for (size_t i = 0; i < k; i++)
                v[at + i] = (uint8_t)tu_next(rng);
            n += k;
            break;
        }
        default: {
            size_t k = 1 + tu_below(rng, n - at);
            if (n + k > cap) break;
            memmove(v + at + k, v + at, n - at);
            n += k;
            break;
        }
        }
    }
    return n;
}

static const char *const some[] = {"geo", "age", "hist"};

Test(kafka_walk, random_samples_decode_as_protobuf_c_does)
{
    sl_wh_schema_t *sc = schema_new();
    proj_t projs[2] = {{NULL, 0}, {some, 3}};
    static gen_t g;
    static uint8_t buf[16384];
    uint64_t rng = 11;
    uint64_t accepted = 0, unfit = 0;
    for (int pi = 0; pi < 2; pi++) {
        sl_kafka_rows_t *r = NULL;
        sl_error_t err = {0};
        cr_assert_eq(sl_kafka_rows_new(sc, projs[pi].names, projs[pi].n, NULL, &r, &err), SL_OK);
        for (int i = 0; i < 3000; i++) {
            gen_sample(&g, &rng, 8);
            char what[64];
            size_t n = sluice__sample__pack(&g.s, buf);
            snprintf(what, sizeof what, "sample %d (protobuf-c)", i);
            bool ok = check(r, sc, &projs[pi], buf, n, i, what);
            n = put_sample(&g, buf, sizeof buf, &rng);
            snprintf(what, sizeof what, "sample %d (other form)", i);
            cr_assert_eq(check(r, sc, &projs[pi], buf, n, i, what), ok, "%s", what);
            accepted += ok;
            unfit += !ok;
        }
        sl_kafka_rows_destroy(r);
    }
    /* both kinds seen, plenty of each */
    cr_assert_gt(accepted, 3000);
    cr_assert_gt(unfit, 300);
    sl_wh_schema_destroy(sc);
}

Test(kafka_walk, mutated_samples_are_refused_or_read_as_protobuf_c_does)
{
    sl_wh_schema_t *sc = schema_new();
    proj_t all = {NULL, 0};
    static gen_t g;
    static uint8_t buf[16384];
    uint64_t rng = 23;
    uint64_t accepted = 0, not_sample = 0;
    sl_kafka_rows_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_rows_new(sc, NULL, 0, NULL, &r, &err), SL_OK);
    for (int i = 0; i < 20000; i++) {
        gen_sample(&g, &rng, 1000000);
        size_t n = i % 2 ? sluice__sample__pack(&g.s, buf) : put_sample(&g, buf, 8192, &rng);
        n = mutate(buf, n, sizeof buf, &rng);
        char what[64];
        snprintf(what, sizeof what, "mutation %d", i);
        Sluice__Sample *s = sluice__sample__unpack(NULL, n, buf);
        not_sample += s == NULL;
        sluice__sample__free_unpacked(s, NULL);
        accepted += check(r, sc, &all, buf, n, i, what);
    }
    sl_kafka_rows_destroy(r);
    cr_assert_gt(accepted, 1000, "%" PRIu64 " accepted", accepted);
    cr_assert_gt(not_sample, 5000, "%" PRIu64 " not a Sample", not_sample);
    sl_wh_schema_destroy(sc);
}

/* ---- malformed inputs, one by one ---- */

static sl_err_t add(sl_kafka_rows_t *r, const void *v, size_t n, sl_error_t *err)
{
    sl_kafka_record_t rec = {.value = v,
                             .value_len = n,
                             .format = "1",
                             .format_len = 1,
                             .format_headers = 1,
                             .offset = 3};
    return sl_kafka_rows_add(r, &rec, err);
}

Test(kafka_walk, malformed_values_are_not_samples)
{
    sl_wh_schema_t *sc = schema_new();
    sl_kafka_rows_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_rows_new(sc, NULL, 0, NULL, &r, &err), SL_OK);
    struct {
        const char *what;
        const char *v;
        size_t n;
        bool pbc; /* protobuf-c may be asked too (it misreads the huge lengths) */
    } bad[] = {
        {"truncated varint", "\x08\x80", 2, true},
        {"field 0 in a one-byte tag", "\x00\x01", 2, true},
        {"varint of 11 bytes", "\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12, true},
        {"truncated tag", "\x80", 1, true},
        {"tag of 6 bytes", "\x88\x80\x80\x80\x80\x00", 6, true},
        {"length past the end", "\x22\x05\x0a\x01x", 5, true},
        {"length past the end of a label", "\x22\x03\x0a\x05x", 5, true},
        {"packed ids past their end", "\x32\x04\x12\x03\x01\x02", 6, true},
        {"unterminated packed id", "\x32\x04\x12\x02\x01\x81", 6, true},
        {"weights not a multiple of 4", "\x32\x05\x1a\x03\x00\x00\x80", 7, true},
        {"huge length (2^32 - 1)", "\x22\xff\xff\xff\xff\x0f", 6, false},
        {"huge length (6 bytes)", "\x22\x80\x80\x80\x80\x80\x01", 7, false},
        {"huge length (2^31)", "\x22\x80\x80\x80\x80\x08", 6, true},
        {"sample_id as fixed32", "\x0d\x01\x02\x03\x04", 5, true},
        {"timestamp as bytes", "\x1a\x01\x00", 3, true},
        {"labels as a varint", "\x20\x01", 2, true},
        {"a label's value as a varint", "\x22\x02\x10\x01", 4, true},
        {"a label's name as fixed32", "\x22\x05\x0d\x00\x00\x00\x00", 7, true},
        {"ids as fixed64", "\x32\x09\x11\x00\x00\x00\x00\x00\x00\x00\x00", 11, true},
        {"weights as a varint", "\x32\x02\x18\x01", 4, true},
        {"a group", "\x3b\x3c", 2, true},
        {"an unknown field of wire type 6", "\x3e\x00", 2, true},
        {"an unknown fixed64 cut short", "\x39\x00\x00\x00", 4, true},
        {"an unknown fixed32 cut short", "\x3d\x00\x00", 3, true},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].pbc) {
            Sluice__Sample *s = sluice__sample__unpack(NULL, bad[i].n, (const uint8_t *)bad[i].v);
            cr_assert_null(s, "protobuf-c reads %s", bad[i].what);
        }
        cr_assert_eq(add(r, bad[i].v, bad[i].n, &err), SL_ERR_CORRUPT, "%s", bad[i].what);
        char want[128];
        snprintf(want, sizeof want, "offset 3: the value (%zu bytes) is not a sluice.Sample",
                 bad[i].n);
        cr_assert_str_eq(err.msg, want, "%s", bad[i].what);
        cr_assert_eq(sl_kafka_rows_count(r), 0);
    }
    sl_kafka_rows_destroy(r);
    sl_wh_schema_destroy(sc);
}

/* Unknown fields are skipped, a scalar or name given twice counts last,
 * runs of ids concatenate, a name ends at a NUL, an empty value is a
 * Sample of defaults: each as protobuf-c reads it, and the values
 * checked. */
Test(kafka_walk, unknown_fields_duplicates_and_names)
{
    sl_wh_schema_t *sc = schema_new();
    sl_kafka_rows_t *r = NULL;
    sl_error_t err = {0};
    proj_t all = {NULL, 0};
    cr_assert_eq(sl_kafka_rows_new(sc, NULL, 0, NULL, &r, &err), SL_OK);
    /* sample_id 5 then 9; an unknown varint, fixed64, bytes, fixed32, and
     * field 0; label "click\0zz" = 1.5; hist ids [1, 300] in a packed run
     * and [7] alone, its name after them; geo: weights before its ids */
    static const uint8_t v[] = {
        0x08, 0x05,                                        /* sample_id 5 */
        0x48, 0x96, 0x01,                                  /* field 9 varint */
        0x51, 1,    2,    3,    4,    5,    6,    7,    8, /* field 10 fixed64 */
        0x5a, 0x02, 0xaa, 0xbb,                            /* field 11 bytes */
        0x65, 1,    2,    3,    4,                         /* field 12 fixed32 */
        0x80, 0x00, 0x01,                                  /* field 0 varint, a 2-byte tag */
        0x08, 0x89, 0x80, 0x00,                            /* sample_id 9, overlong */
        0x10, 0x2a,                                        /* session 42 */
        0x22, 0x0f, 0x0a, 0x08, 'c',  'l',  'i',  'c',  'k',
        0,    'z',  'z',  0x15, 0x00, 0x00, 0xc0, 0x3f, /* label click\0zz 1.5 */
        0x32, 0x0d, 0x12, 0x03, 0x01, 0xac, 0x02,       /* hist: [1, 300] */
        0x10, 0x07,                                     /* [7] */
        0x0a, 0x04, 'h',  'i',  's',  't',              /* its name, last */
        0x32, 0x0c, 0x1d, 0x00, 0x00, 0x00, 0x40,       /* geo: weight 2.0 */
        0x10, 0x63,                                     /* id 99 */
        0x0a, 0x03, 'g',  'e',  'o',                    /* name */
        0x08, 0x07,                                     /* sample_id 7: the last counts */
    };
    cr_assert(check(r, sc, &all, v, sizeof v, 3, "unknown fields and duplicates"));
    cr_assert_eq(add(r, v, sizeof v, &err), SL_OK, "%s", err.msg);
    sl_kafka_stripe_t st;
    cr_assert_eq(sl_kafka_rows_take(r, &st, &err), SL_OK);
    const sl_batch_t *b = &st.rows.batch;
    cr_assert_eq(b->sample_ids[0], 7);
    cr_assert_eq(st.rows.session_ids[0], 42);
    cr_assert_float_eq(b->labels.data[0], 1.5f, 0);
    cr_assert_float_eq(b->labels.data[1], 0.0f, 0);
    cr_assert(isnan(b->dense.data[0]));
    cr_assert_eq(b->sparse.lengths[0], 3); /* hist */
    cr_assert_eq(b->sparse.values[0], 1);
    cr_assert_eq(b->sparse.values[1], 300);
    cr_assert_eq(b->sparse.values[2], 7);
    cr_assert_eq(b->sparse.lengths[1], 1); /* geo */
    cr_assert_eq(b->sparse.values[3], 99);
    cr_assert_float_eq(b->sparse.weights[3], 2.0f, 0);
    cr_assert_eq(b->sparse.lengths[2], 0); /* cat */
    /* the empty value: every default */
    cr_assert(check(r, sc, &all, (const uint8_t *)"", 0, 4, "empty value"));
    /* a label without a name is the label "" */
    cr_assert_eq(add(r, "\x22\x05\x15\x00\x00\x80\x3f", 7, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "offset 3: label '' is not in the schema");
    /* a wrong name shown printable, cut at its NUL */
    cr_assert_eq(add(r, "\x2a\x06\x0a\x04x\x01y\0", 8, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "offset 3: feature 'x?y' is not in the schema");
    /* labels are checked before dense values, dense values before lists,
     * whatever order they come in */
    cr_assert_eq(add(r, "\x32\x03\x0a\x01q\x2a\x03\x0a\x01p\x22\x03\x0a\x01z", 15, &err),
                 SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "offset 3: label 'z' is not in the schema");
    cr_assert_eq(add(r, "\x32\x03\x0a\x01q\x2a\x03\x0a\x01p", 10, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "offset 3: feature 'p' is not in the schema");
    /* but bytes that do not parse come first */
    cr_assert_eq(add(r, "\x22\x03\x0a\x01z\x08", 6, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "offset 3: the value (6 bytes) is not a sluice.Sample");
    cr_assert_eq(sl_kafka_rows_count(r), 0);
    sl_kafka_rows_destroy(r);
    sl_wh_schema_destroy(sc);
}

/* A taken stripe is stably sorted by session, whatever the row count
 * (the merge sort's runs of every width, a last run cut short). */
Test(kafka_walk, stripes_are_stably_sorted_by_session)
{
    sl_wh_schema_t *sc = schema_new();
    sl_kafka_rows_t *r = NULL;
    sl_error_t err = {0};
    cr_assert_eq(sl_kafka_rows_new(sc, NULL, 0, NULL, &r, &err), SL_OK);
    uint64_t rng = 5;
    const uint32_t sizes[] = {1, 2, 3, 7, 64, 1000, 1025};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        uint32_t n = sizes[t];
        uint64_t sessions = t % 2 ? 5 : 1000000; /* long runs of a session, or few ties */
        for (uint32_t i = 0; i < n; i++) {
            Sluice__Sample s = SLUICE__SAMPLE__INIT;
            s.sample_id = i;
            s.session_id = tu_below(&rng, sessions);
            if (t == 2) s.session_id = n - i; /* descending */
            uint8_t b[64];
            size_t len = sluice__sample__pack(&s, b);
            cr_assert_eq(add(r, b, len, &err), SL_OK, "%s", err.msg);
        }
        sl_kafka_stripe_t st;
        cr_assert_eq(sl_kafka_rows_take(r, &st, &err), SL_OK);
        cr_assert_eq(st.rows.batch.batch_size, n);
        uint8_t seen[1025] = {0};
        for (uint32_t j = 0; j < n; j++) {
            int64_t id = st.rows.batch.sample_ids[j];
            cr_assert(id >= 0 && id < (int64_t)n && !seen[id], "row %u: sample %ld", j, (long)id);
            seen[id] = 1;
            if (j == 0) continue;
            int64_t a = st.rows.session_ids[j - 1], b = st.rows.session_ids[j];
            cr_assert_leq(a, b, "%u rows: row %u", n, j);
            if (a == b)
                cr_assert_lt(st.rows.batch.sample_ids[j - 1], id, "%u rows: row %u unstable", n, j);
        }
    }
    sl_kafka_rows_destroy(r);
    sl_wh_schema_destroy(sc);
}

/* Warehouse rows into sluice.Sample bytes, the value of a version 1 record
 * (record.h, docs/KAFKA.md), written straight from the row's arrays
 * ("the writer" below). */
#include "common/err.h"
#include "common/mem.h"
#include "kafka/record.h"

#include <math.h>
#include <string.h>

struct sl_kafka_encoder {
    const sl_allocator_t *a;
    const sl_wh_schema_t *schema;
    uint32_t nlabels, ndense, nsparse;
    size_t lcap, dcap, scap; /* elements allocated per label / dense / sparse array (>= 1) */
    /* The names of the schema's labels, dense and sparse features, and
     * their lengths. */
    const char **label_name, **dense_name, **list_name;
    size_t *label_len, *dense_len, *list_len; /* the names' lengths */
    size_t *id_bytes, *body_bytes;            /* [nsparse]: the row's, while writing it */
    float *ones;                              /* weights of a weighted list given without them */
    size_t ones_cap;
    uint8_t *out; /* the packed Sample */
    size_t out_cap;

    /* sl_kafka_encoder_row_at: the schema's columns in the rows at hand,
     * and the row it handed out. */
    int32_t *label_col, *dense_col, *sparse_key; /* [nlabels], [ndense], [nsparse] */
    uint64_t *pos;                               /* [nsparse]: next value of each key */
    float *row_labels, *row_dense;
    sl_wh_idlist_t *row_lists;
    const sl_wh_rows_t *cur_rows; /* the stripe pos and the maps belong to */
    const int64_t *cur_values;
    const char *cur_file;
    uint32_t cur_stripe;
    uint64_t cur_first_row;
    uint32_t next_row; /* the row pos is at */
};

/* Fresh scratch of n elements (the old contents are not kept). */
static bool grow(const sl_allocator_t *a, void **buf, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap) return true;
    size_t want = sl_grow_cap(*cap, n, 64, SIZE_MAX);
    void *nb = sl_alloc(a, sl_mul_size(want, elem));
    if (nb == NULL) return false;
    sl_free(a, *buf, *cap * elem);
    *buf = nb;
    *cap = want;
    return true;
}

/* The encoder's arrays sized by the schema: where each lives, and its
 * element count and size (at least one element each: sl_calloc of 0 may
 * be NULL). */
typedef struct array {
    void **p;
    size_t n, size;
} array_t;

#define NUM_ARRAYS 15

static void arrays_of(sl_kafka_encoder_t *e, array_t out[NUM_ARRAYS])
{
    size_t L = e->lcap, D = e->dcap, S = e->scap;
#define A(field, n)                                                                                \
    {                                                                                              \
        (void **)&e->field, n, sizeof *e->field                                                    \
    }
    const array_t all[NUM_ARRAYS] = {
        A(label_name, L), A(dense_name, D), A(list_name, S),  A(label_col, L), A(dense_col, D),
        A(sparse_key, S), A(pos, S),        A(row_labels, L), A(row_dense, D), A(row_lists, S),
        A(label_len, L),  A(dense_len, D),  A(list_len, S),   A(id_bytes, S),  A(body_bytes, S),
    };
#undef A
    memcpy(out, all, sizeof all);
}

void sl_kafka_encoder_destroy(sl_kafka_encoder_t *e)
{
    if (e == NULL) return;
    array_t arrays[NUM_ARRAYS];
    arrays_of(e, arrays);
    for (int i = 0; i < NUM_ARRAYS; i++)
        sl_free(e->a, *arrays[i].p, arrays[i].n * arrays[i].size);
    sl_free(e->a, e->ones, e->ones_cap * sizeof *e->ones);
    sl_free(e->a, e->out, e->out_cap);
    sl_free(e->a, e, sizeof *e);
}

sl_err_t sl_kafka_encoder_new(const sl_wh_schema_t *schema, const sl_allocator_t *a,
                              sl_kafka_encoder_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_kafka_encoder_t *e = sl_calloc(a, 1, sizeof *e);
    if (e == NULL) return sl_error_set(err, SL_ERR_NOMEM, "kafka encoder: out of memory");
    e->a = a;
    e->schema = schema;
    e->nlabels = sl_wh_schema_num_labels(schema);
    e->ndense = sl_wh_schema_num_dense(schema);
    e->nsparse = sl_wh_schema_num_sparse(schema);
    e->lcap = e->nlabels ? e->nlabels : 1;
    e->dcap = e->ndense ? e->ndense : 1;
    e->scap = e->nsparse ? e->nsparse : 1;
    array_t arrays[NUM_ARRAYS];
    arrays_of(e, arrays);
    for (int i = 0; i < NUM_ARRAYS; i++)
        if ((*arrays[i].p = sl_calloc(a, arrays[i].n, arrays[i].size)) == NULL) {
            sl_kafka_encoder_destroy(e);
            return sl_error_set(err, SL_ERR_NOMEM, "kafka encoder: out of memory");
        }
    for (uint32_t i = 0; i < e->nlabels; i++) {
        e->label_name[i] = sl_wh_schema_label(schema, i);
        e->label_len[i] = strlen(e->label_name[i]);
    }
    for (uint32_t i = 0; i < e->ndense; i++) {
        e->dense_name[i] = sl_wh_schema_dense(schema, i)->name;
        e->dense_len[i] = strlen(e->dense_name[i]);
    }
    for (uint32_t i = 0; i < e->nsparse; i++) {
        e->list_name[i] = sl_wh_schema_sparse(schema, i)->name;
        e->list_len[i] = strlen(e->list_name[i]);
    }
    *out = e;
    return SL_OK;
}

/* ---- the writer ----
 *
 * Sample bytes written directly, as protobuf-c's sluice__sample__pack
 * writes them (kafka_record_encode_test compares the two byte for byte on
 * random rows): fields in number order, proto3's zero scalars (0, a float
 * equal to 0, an empty name) left out, ids packed, weights packed.
 * protobuf-c sized every message and then packed it, walking the ids twice
 * through its generic descriptors; here one pass sizes the ids, the other
 * writes them. */

static inline size_t varint_size(uint64_t v)
{
    return 1 + (size_t)(63 - __builtin_clzll(v | 1)) / 7;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint8_t *put_bytes(uint8_t *p, uint32_t field, const void *b, size_t n)
{
    *p++ = (uint8_t)(field << 3 | 2);
    p = put_varint(p, n);
    memcpy(p, b, n);
    return p + n;
}

static inline bool float_is_zero(float f)
{
    return f == 0.0f; /* -0.0 too, NaNs are written: as protobuf-c does */
}

/* A NamedValue's bytes without its tag and length. */
static inline size_t named_size(size_t name_len, float value)
{
    return (name_len ? 1 + varint_size(name_len) + name_len : 0) + (float_is_zero(value) ? 0 : 5);
}

static uint8_t *put_named(uint8_t *p, uint32_t field, const char *name, size_t name_len,
                          float value)
{
    *p++ = (uint8_t)(field << 3 | 2);
    p = put_varint(p, named_size(name_len, value));
    if (name_len) p = put_bytes(p, 1, name, name_len);
    if (!float_is_zero(value)) {
        *p++ = 2 << 3 | 5;
        memcpy(p, &value, 4);
        p += 4;
    }
    return p;
}

/* The weights a row gives list i of e (NULL: none written). */
static const float *list_weights(sl_kafka_encoder_t *e, uint32_t i, const sl_wh_idlist_t *in,
                                 bool *nomem)
{
    if (in == NULL || in->len == 0 || sl_wh_schema_sparse(e->schema, i)->kind != SL_WH_WEIGHTED)
        return NULL;
    if (in->weights != NULL) return in->weights;
    size_t had = e->ones_cap;
    if (!grow(e->a, (void **)&e->ones, &e->ones_cap, in->len, sizeof *e->ones)) {
        *nomem = true;
        return NULL;
    }
    if (e->ones_cap != had)
        for (size_t k = 0; k < e->ones_cap; k++)
            e->ones[k] = 1.0f;
    return e->ones;
}

sl_err_t sl_kafka_encode_row(sl_kafka_encoder_t *e, const sl_wh_row_t *row, const uint8_t **value,
                             size_t *len, sl_error_t *err)
{
    /* sizes first: the whole value, each list's ids and body */
    size_t total = 0;
    if (row->sample_id) total += 1 + varint_size((uint64_t)row->sample_id);
    if (row->session_id) total += 1 + varint_size((uint64_t)row->session_id);
    if (row->timestamp) total += 1 + varint_size((uint64_t)row->timestamp);
    for (uint32_t i = 0; i < e->nlabels; i++) {
        size_t n = named_size(e->label_len[i], row->labels != NULL ? row->labels[i] : 0.0f);
        total += 1 + varint_size(n) + n;
    }
    for (uint32_t i = 0; row->dense != NULL && i < e->ndense; i++) {
        if (isnan(row->dense[i])) continue;
        size_t n = named_size(e->dense_len[i], row->dense[i]);
        total += 1 + varint_size(n) + n;
    }
    bool nomem = false;
    for (uint32_t i = 0; i < e->nsparse; i++) {
        const sl_wh_idlist_t *in = row->sparse != NULL ? &row->sparse[i] : NULL;
        size_t ids = 0, n = e->list_len[i] ? 1 + varint_size(e->list_len[i]) + e->list_len[i] : 0;
        for (uint32_t k = 0; in != NULL && k < in->len; k++)
            ids += varint_size((uint64_t)in->ids[k]);
        if (ids) n += 1 + varint_size(ids) + ids;
        if (list_weights(e, i, in, &nomem)) n += 1 + varint_size((size_t)in->len * 4) + in->len * 4;
        if (nomem) return sl_error_set(err, SL_ERR_NOMEM, "kafka encoder: out of memory");
        e->id_bytes[i] = ids;
        e->body_bytes[i] = n;
        total += 1 + varint_size(n) + n;
    }
    if (!grow(e->a, (void **)&e->out, &e->out_cap, total ? total : 1, 1))
        return sl_error_set(err, SL_ERR_NOMEM,
                            "kafka encoder: out of memory for a sample of %zu bytes", total);
    uint8_t *p = e->out;
    if (row->sample_id) {
        *p++ = 1 << 3;
        p = put_varint(p, (uint64_t)row->sample_id);
    }
    if (row->session_id) {
        *p++ = 2 << 3;
        p = put_varint(p, (uint64_t)row->session_id);
    }
    if (row->timestamp) {
        *p++ = 3 << 3;
        p = put_varint(p, (uint64_t)row->timestamp);
    }
    for (uint32_t i = 0; i < e->nlabels; i++)
        p = put_named(p, 4, e->label_name[i], e->label_len[i],
                      row->labels != NULL ? row->labels[i] : 0.0f);
    for (uint32_t i = 0; row->dense != NULL && i < e->ndense; i++)
        if (!isnan(row->dense[i]))
            p = put_named(p, 5, e->dense_name[i], e->dense_len[i], row->dense[i]);
    for (uint32_t i = 0; i < e->nsparse; i++) {
        const sl_wh_idlist_t *in = row->sparse != NULL ? &row->sparse[i] : NULL;
        *p++ = 6 << 3 | 2;
        p = put_varint(p, e->body_bytes[i]);
        if (e->list_len[i]) p = put_bytes(p, 1, e->list_name[i], e->list_len[i]);
        if (e->id_bytes[i]) {
            *p++ = 2 << 3 | 2;
            p = put_varint(p, e->id_bytes[i]);
            for (uint32_t k = 0; k < in->len; k++)
                p = put_varint(p, (uint64_t)in->ids[k]);
        }
        const float *w = list_weights(e, i, in, &nomem); /* allocated while sizing */
        if (w) p = put_bytes(p, 3, w, (size_t)in->len * 4);
    }
    *len = (size_t)(p - e->out);
    *value = e->out;
    return SL_OK;
}

/* The column of d named name, or -1. */
static int32_t column_of(const sl_dense_t *d, const char *name)
{
    for (uint32_t c = 0; c < d->cols && d->names != NULL; c++)
        if (strcmp(d->names[c], name) == 0) return (int32_t)c;
    return -1;
}

/* Where each schema column is in rows, and each key's first value. */
static sl_err_t map_rows(sl_kafka_encoder_t *e, const sl_wh_rows_t *rows, sl_error_t *err)
{
    const sl_batch_t *b = &rows->batch;
    const char *file = rows->file != NULL ? rows->file : "rows";
    for (uint32_t i = 0; i < e->nlabels + e->ndense; i++) {
        bool label = i < e->nlabels;
        const char *name = label ? sl_wh_schema_label(e->schema, i)
                                 : sl_wh_schema_dense(e->schema, i - e->nlabels)->name;
        int32_t c = column_of(label ? &b->labels : &b->dense, name);
        if (c < 0)
            return sl_error_set(err, SL_ERR_INVALID, "%s stripe %u: no %s '%s'", file, rows->stripe,
                                label ? "label" : "dense feature", name);
        if (label)
            e->label_col[i] = c;
        else
            e->dense_col[i - e->nlabels] = c;
    }
    uint64_t start = 0;
    for (uint32_t k = 0; k < b->sparse.num_keys; k++) {
        for (uint32_t i = 0; i < e->nsparse; i++)
            if (strcmp(b->sparse.keys[k], sl_wh_schema_sparse(e->schema, i)->name) == 0)
                e->pos[i] = start;
        bool negative = false;
        start += sl_lengths_sum(b->sparse.lengths + (size_t)k * b->sparse.stride, b->sparse.stride,
                                &negative);
        if (negative)
            return sl_error_set(err, SL_ERR_INVALID, "%s stripe %u: key '%s' has a negative length",
                                file, rows->stripe, b->sparse.keys[k]);
    }
    for (uint32_t i = 0; i < e->nsparse; i++) {
        int k = sl_kjt_find_key(&b->sparse, sl_wh_schema_sparse(e->schema, i)->name);
        if (k < 0)
            return sl_error_set(err, SL_ERR_INVALID, "%s stripe %u: no sparse feature '%s'", file,
                                rows->stripe, sl_wh_schema_sparse(e->schema, i)->name);
        e->sparse_key[i] = k;
    }
    e->cur_rows = rows;
    e->cur_values = b->sparse.values;
    e->cur_file = rows->file;
    e->cur_stripe = rows->stripe;
    e->cur_first_row = rows->first_row;
    e->next_row = 0;
    return SL_OK;
}

sl_err_t sl_kafka_encoder_row_at(sl_kafka_encoder_t *e, const sl_wh_rows_t *rows, uint32_t i,
                                 sl_wh_row_t *row, sl_error_t *err)
{
    const sl_batch_t *b = &rows->batch;
    if (i >= b->batch_size)
        return sl_error_set(err, SL_ERR_INVALID, "row %u of a stripe of %u rows", i, b->batch_size);
    /* A reader hands out the same struct (and may reuse its buffers) for
     * every stripe: row 0, or anything naming another stripe, starts over. */
    if (i == 0 || rows != e->cur_rows || b->sparse.values != e->cur_values ||
        rows->file != e->cur_file || rows->stripe != e->cur_stripe ||
        rows->first_row != e->cur_first_row || i < e->next_row) {
        SL_FORWARD_IF_ERROR(map_rows(e, rows, err));
    }
    /* Skip forward to row i (each key's values are row after row). */
    for (; e->next_row < i; e->next_row++)
        for (uint32_t s = 0; s < e->nsparse; s++)
            e->pos[s] +=
                (uint64_t)
                    b->sparse.lengths[(size_t)e->sparse_key[s] * b->sparse.stride + e->next_row];
    for (uint32_t l = 0; l < e->nlabels; l++)
        e->row_labels[l] = b->labels.data[(size_t)i * b->labels.cols + (size_t)e->label_col[l]];
    for (uint32_t d = 0; d < e->ndense; d++)
        e->row_dense[d] = b->dense.data[(size_t)i * b->dense.cols + (size_t)e->dense_col[d]];
    for (uint32_t s = 0; s < e->nsparse; s++) {
        int32_t n = b->sparse.lengths[(size_t)e->sparse_key[s] * b->sparse.stride + i];
        const float *w = b->sparse.weights != NULL ? b->sparse.weights + e->pos[s] : NULL;
        e->row_lists[s] = (sl_wh_idlist_t){(uint32_t)n, b->sparse.values + e->pos[s], w};
    }
    row->sample_id = b->sample_ids != NULL ? b->sample_ids[i] : (int64_t)(rows->first_row + i);
    row->session_id = rows->session_ids != NULL ? rows->session_ids[i] : 0;
    row->timestamp = rows->timestamps != NULL ? rows->timestamps[i] : 0;
    row->labels = e->row_labels;
    row->dense = e->row_dense;
    row->sparse = e->row_lists;
    return SL_OK;
}

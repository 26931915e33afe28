/* Warehouse rows into sluice.Sample bytes, the value of a version 1 record
 * (record.h, docs/KAFKA.md). The protobuf structs point into the row's own
 * arrays and the encoder's scratch, so a row is packed without copying its
 * ids. */
#include "kafka/record.h"

#include <math.h>
#include <string.h>

#include "sluice.pb-c.h"

struct sl_kafka_encoder {
    const sl_allocator_t *a;
    const sl_wh_schema_t *schema;
    uint32_t nlabels, ndense, nsparse;
    size_t lcap, dcap, scap; /* elements allocated per label / dense / sparse array (>= 1) */
    /* The Sample's parts, one per schema label / dense / sparse feature;
     * the pointer arrays list those a row carries. */
    Sluice__NamedValue *labels, *dense;
    Sluice__NamedValue **label_ptrs, **dense_ptrs;
    Sluice__IdList *lists;
    Sluice__IdList **list_ptrs;
    float *ones; /* weights of a weighted list given without them */
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
    size_t want = *cap ? *cap : 64;
    while (want < n)
        want *= 2;
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

#define NUM_ARRAYS 13

static void arrays_of(sl_kafka_encoder_t *e, array_t out[NUM_ARRAYS])
{
    size_t L = e->lcap, D = e->dcap, S = e->scap;
#define A(field, n)                                                                                \
    {                                                                                              \
        (void **)&e->field, n, sizeof *e->field                                                    \
    }
    const array_t all[NUM_ARRAYS] = {
        A(labels, L),     A(dense, D),     A(label_ptrs, L), A(dense_ptrs, D), A(lists, S),
        A(list_ptrs, S),  A(label_col, L), A(dense_col, D),  A(sparse_key, S), A(pos, S),
        A(row_labels, L), A(row_dense, D), A(row_lists, S),
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
        sluice__named_value__init(&e->labels[i]);
        e->labels[i].name = (char *)sl_wh_schema_label(schema, i);
    }
    for (uint32_t i = 0; i < e->ndense; i++) {
        sluice__named_value__init(&e->dense[i]);
        e->dense[i].name = (char *)sl_wh_schema_dense(schema, i)->name;
    }
    for (uint32_t i = 0; i < e->nsparse; i++) {
        sluice__id_list__init(&e->lists[i]);
        e->lists[i].name = (char *)sl_wh_schema_sparse(schema, i)->name;
    }
    *out = e;
    return SL_OK;
}

sl_err_t sl_kafka_encode_row(sl_kafka_encoder_t *e, const sl_wh_row_t *row, const uint8_t **value,
                             size_t *len, sl_error_t *err)
{
    Sluice__Sample s = SLUICE__SAMPLE__INIT;
    s.sample_id = (uint64_t)row->sample_id;
    s.session_id = (uint64_t)row->session_id;
    s.timestamp = row->timestamp;
    for (uint32_t i = 0; i < e->nlabels; i++) {
        e->labels[i].value = row->labels != NULL ? row->labels[i] : 0.0f;
        e->label_ptrs[i] = &e->labels[i];
    }
    s.n_labels = e->nlabels;
    s.labels = e->label_ptrs;
    size_t nd = 0;
    for (uint32_t i = 0; row->dense != NULL && i < e->ndense; i++) {
        if (isnan(row->dense[i])) continue;
        e->dense[i].value = row->dense[i];
        e->dense_ptrs[nd++] = &e->dense[i];
    }
    s.n_dense = nd;
    s.dense = e->dense_ptrs;
    for (uint32_t i = 0; i < e->nsparse; i++) {
        Sluice__IdList *l = &e->lists[i];
        const sl_wh_idlist_t *in = row->sparse != NULL ? &row->sparse[i] : NULL;
        l->n_ids = in != NULL ? in->len : 0;
        l->ids = in != NULL ? (int64_t *)in->ids : NULL;
        l->n_weights = 0;
        l->weights = NULL;
        if (in != NULL && in->len > 0 &&
            sl_wh_schema_sparse(e->schema, i)->kind == SL_WH_WEIGHTED) {
            l->n_weights = in->len;
            if (in->weights != NULL) {
                l->weights = (float *)in->weights;
            } else {
                size_t had = e->ones_cap;
                if (!grow(e->a, (void **)&e->ones, &e->ones_cap, in->len, sizeof *e->ones))
                    return sl_error_set(err, SL_ERR_NOMEM, "kafka encoder: out of memory");
                if (e->ones_cap != had)
                    for (size_t k = 0; k < e->ones_cap; k++)
                        e->ones[k] = 1.0f;
                l->weights = e->ones;
            }
        }
        e->list_ptrs[i] = l;
    }
    s.n_sparse = e->nsparse;
    s.sparse = e->list_ptrs;
    size_t n = sluice__sample__get_packed_size(&s);
    if (!grow(e->a, (void **)&e->out, &e->out_cap, n, 1))
        return sl_error_set(err, SL_ERR_NOMEM,
                            "kafka encoder: out of memory for a sample of %zu bytes", n);
    *len = sluice__sample__pack(&s, e->out);
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
        sl_err_t rc = map_rows(e, rows, err);
        if (rc != SL_OK) return rc;
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

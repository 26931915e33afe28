/* Records of layout version 1 into rows in column form (record_decode.h). */
#include "kafka/record_decode.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.pb-c.h"

struct sl_kafka_rows {
    const sl_allocator_t *a;
    sl_wh_schema_t *schema; /* a copy */
    uint32_t T, D, S;       /* labels, projected dense features, projected sparse ones */
    uint32_t SD, SS;        /* the schema's dense and sparse slots */
    int32_t *dense_at;      /* [SD] schema dense slot -> projected index, -1: not projected */
    int32_t *sparse_at;     /* [SS] the same for sparse slots */
    bool any_weighted;
    const char **label_names, **dense_names, **sparse_names; /* into schema, output order */
    /* rows collected, row-major: */
    uint32_t n, cap;
    int64_t *sample_ids, *session_ids, *timestamps, *offsets, *create_ms; /* [cap] */
    float *labels;                                                        /* [cap * T] */
    float *dense;                                                         /* [cap * D] */
    uint64_t *starts; /* [cap * S] where a row's list starts in ids */
    uint32_t *lens;   /* [cap * S] */
    int64_t *ids;     /* [ids_cap] every list, appended */
    float *weights;   /* [ids_cap] their weights (1.0 for unweighted features) */
    uint64_t nids, ids_cap;
    uint8_t *seen;  /* [T + D + S] named in the record being decoded */
    sl_arena_t *pb; /* protobuf-c's scratch for one record */
    /* the taken stripe: */
    sl_arena_t *out;
    struct order {
        int64_t session;
        uint32_t row;
    } * order; /* [order_cap] */
    uint32_t order_cap;
};

/* ---- memory ---- */

/* Arrays *fields[i] of old elements of sizes[i] bytes each become room
 * for cap elements, contents kept: every new array is allocated before any
 * old one is freed, so on failure nothing changed. */
static bool grow_all(const sl_allocator_t *a, void **const *fields, const size_t *sizes,
                     uint32_t count, uint64_t old, uint64_t cap)
{
    void *n[16];
    for (uint32_t i = 0; i < count; i++)
        if (!(n[i] = sl_alloc(a, sl_mul_size((size_t)cap, sizes[i])))) {
            while (i--)
                sl_free(a, n[i], (size_t)cap * sizes[i]);
            return false;
        }
    for (uint32_t i = 0; i < count; i++) {
        if (old) memcpy(n[i], *fields[i], (size_t)old * sizes[i]);
        if (*fields[i]) sl_free(a, *fields[i], (size_t)old * sizes[i]);
        *fields[i] = n[i];
    }
    return true;
}

static bool reserve_rows(sl_kafka_rows_t *r)
{
    if (r->n < r->cap) return true;
    uint64_t c = r->cap ? 2 * (uint64_t)r->cap : 256;
    if (c > UINT32_MAX) return false;
    void **const fields[] = {
        (void **)&r->sample_ids, (void **)&r->session_ids, (void **)&r->timestamps,
        (void **)&r->offsets,    (void **)&r->create_ms,   (void **)&r->labels,
        (void **)&r->dense,      (void **)&r->starts,      (void **)&r->lens};
    const size_t sizes[] = {8,
                            8,
                            8,
                            8,
                            8,
                            sizeof(float) * (r->T ? r->T : 1),
                            sizeof(float) * (r->D ? r->D : 1),
                            8 * (size_t)(r->S ? r->S : 1),
                            4 * (size_t)(r->S ? r->S : 1)};
    if (!grow_all(r->a, fields, sizes, 9, r->cap, c)) return false;
    r->cap = (uint32_t)c;
    return true;
}

static bool reserve_ids(sl_kafka_rows_t *r, uint64_t more)
{
    if (r->nids + more <= r->ids_cap) return true;
    uint64_t c = r->ids_cap ? 2 * r->ids_cap : 4096;
    while (c < r->nids + more)
        c *= 2;
    void **const fields[] = {(void **)&r->ids, (void **)&r->weights};
    const size_t sizes[] = {8, 4};
    /* the old arrays hold ids_cap elements; only nids matter, but the
     * sizes freed must be what was allocated */
    if (!grow_all(r->a, fields, sizes, 2, r->ids_cap, c)) return false;
    r->ids_cap = c;
    return true;
}

/* protobuf-c allocates the unpacked Sample from the per-record arena: one
 * reset frees it, whatever the record's shape. */
static void *pb_alloc(void *ctx, size_t size)
{
    return sl_arena_alloc(ctx, size ? size : 1);
}
static void pb_free(void *ctx, void *ptr)
{
    (void)ctx;
    (void)ptr;
}

/* ---- the builder ---- */

sl_err_t sl_kafka_rows_new(const sl_wh_schema_t *schema, const char *const *features,
                           uint32_t num_features, const sl_allocator_t *a, sl_kafka_rows_t **out,
                           sl_error_t *err)
{
    *out = NULL;
    sl_kafka_rows_t *r = sl_calloc(a, 1, sizeof *r);
    if (!r) return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory");
    r->a = a;
    r->schema = sl_wh_schema_clone(schema, a);
    r->pb = sl_arena_new(a, 0);
    r->out = sl_arena_new(a, 0);
    if (!r->schema || !r->pb || !r->out) goto nomem;
    r->T = sl_wh_schema_num_labels(schema);
    r->SD = sl_wh_schema_num_dense(schema);
    r->SS = sl_wh_schema_num_sparse(schema);
    r->label_names = sl_calloc(a, r->T + 1, sizeof(char *));
    r->dense_names = sl_calloc(a, r->SD + 1, sizeof(char *));
    r->sparse_names = sl_calloc(a, r->SS + 1, sizeof(char *));
    r->dense_at = sl_calloc(a, r->SD + 1, sizeof(int32_t));
    r->sparse_at = sl_calloc(a, r->SS + 1, sizeof(int32_t));
    r->seen = sl_calloc(a, (size_t)r->T + r->SD + r->SS + 1, 1);
    if (!r->label_names || !r->dense_names || !r->sparse_names || !r->dense_at || !r->sparse_at ||
        !r->seen)
        goto nomem;
    for (uint32_t i = 0; i < r->T; i++)
        r->label_names[i] = sl_wh_schema_label(r->schema, i);
    for (uint32_t i = 0; i < r->SD; i++)
        r->dense_at[i] = -1;
    for (uint32_t i = 0; i < r->SS; i++)
        r->sparse_at[i] = -1;
    uint32_t n = features ? num_features : sl_wh_schema_num_features(schema);
    for (uint32_t i = 0; i < n; i++) {
        const sl_wh_feature_t *f = features ? sl_wh_schema_find(r->schema, features[i])
                                            : sl_wh_schema_feature(r->schema, i);
        if (!f) {
            sl_error_set(err, SL_ERR_NOT_FOUND, "kafka records: feature '%s' is not in the schema",
                         features[i] ? features[i] : "(null)");
            sl_kafka_rows_destroy(r);
            return SL_ERR_NOT_FOUND;
        }
        int32_t *at = f->kind == SL_WH_DENSE ? &r->dense_at[f->slot] : &r->sparse_at[f->slot];
        if (*at >= 0) {
            sl_error_set(err, SL_ERR_INVALID, "kafka records: feature '%s' requested twice",
                         f->name);
            sl_kafka_rows_destroy(r);
            return SL_ERR_INVALID;
        }
        if (f->kind == SL_WH_DENSE) {
            *at = (int32_t)r->D;
            r->dense_names[r->D++] = f->name;
        } else {
            *at = (int32_t)r->S;
            r->sparse_names[r->S++] = f->name;
            r->any_weighted |= f->kind == SL_WH_WEIGHTED;
        }
    }
    *out = r;
    return SL_OK;
nomem:
    sl_kafka_rows_destroy(r);
    return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory");
}

void sl_kafka_rows_destroy(sl_kafka_rows_t *r)
{
    if (!r) return;
    const sl_allocator_t *a = r->a;
    size_t c = r->cap;
    sl_free(a, r->sample_ids, c * 8);
    sl_free(a, r->session_ids, c * 8);
    sl_free(a, r->timestamps, c * 8);
    sl_free(a, r->offsets, c * 8);
    sl_free(a, r->create_ms, c * 8);
    sl_free(a, r->labels, c * sizeof(float) * (r->T ? r->T : 1));
    sl_free(a, r->dense, c * sizeof(float) * (r->D ? r->D : 1));
    sl_free(a, r->starts, c * 8 * (r->S ? r->S : 1));
    sl_free(a, r->lens, c * 4 * (r->S ? r->S : 1));
    sl_free(a, r->ids, (size_t)r->ids_cap * 8);
    sl_free(a, r->weights, (size_t)r->ids_cap * 4);
    sl_free(a, r->order, (size_t)r->order_cap * sizeof *r->order);
    if (r->label_names) sl_free(a, r->label_names, (r->T + 1) * sizeof(char *));
    if (r->dense_names) sl_free(a, r->dense_names, (r->SD + 1) * sizeof(char *));
    if (r->sparse_names) sl_free(a, r->sparse_names, (r->SS + 1) * sizeof(char *));
    if (r->dense_at) sl_free(a, r->dense_at, (r->SD + 1) * sizeof(int32_t));
    if (r->sparse_at) sl_free(a, r->sparse_at, (r->SS + 1) * sizeof(int32_t));
    if (r->seen) sl_free(a, r->seen, (size_t)r->T + r->SD + r->SS + 1);
    sl_arena_destroy(r->pb);
    sl_arena_destroy(r->out);
    sl_wh_schema_destroy(r->schema);
    sl_free(a, r, sizeof *r);
}

uint32_t sl_kafka_rows_count(const sl_kafka_rows_t *r)
{
    return r->n;
}

/* A name from a record, for a message: at most 64 bytes, printable. */
static const char *shown(const char *name, char *buf, size_t cap)
{
    size_t i = 0;
    for (; name[i] && i + 1 < cap && i < 64; i++)
        buf[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
    buf[i] = '\0';
    return buf;
}

#define BAD(...) (rc = sl_error_set(err, SL_ERR_CORRUPT, __VA_ARGS__), false)

/* The features of s into row n (defaults already in place). */
static bool fill_row(sl_kafka_rows_t *r, const Sluice__Sample *s, int64_t off, sl_error_t *err)
{
    sl_err_t rc = SL_OK;
    uint32_t n = r->n;
    char nb[80];
    memset(r->seen, 0, (size_t)r->T + r->SD + r->SS);
    for (size_t i = 0; i < s->n_labels; i++) {
        const char *name = s->labels[i]->name;
        int t = sl_wh_schema_find_label(r->schema, name);
        if (t < 0)
            return BAD("offset %" PRId64 ": label '%s' is not in the schema", off,
                       shown(name, nb, sizeof nb));
        if (r->seen[t]++)
            return BAD("offset %" PRId64 ": label '%s' is given twice", off,
                       shown(name, nb, sizeof nb));
        r->labels[(size_t)n * r->T + (uint32_t)t] = s->labels[i]->value;
    }
    for (size_t i = 0; i < s->n_dense; i++) {
        const char *name = s->dense[i]->name;
        const sl_wh_feature_t *f = sl_wh_schema_find(r->schema, name);
        if (!f)
            return BAD("offset %" PRId64 ": feature '%s' is not in the schema", off,
                       shown(name, nb, sizeof nb));
        if (f->kind != SL_WH_DENSE)
            return BAD("offset %" PRId64 ": feature '%s' is %s, given as a dense value", off,
                       shown(name, nb, sizeof nb), sl_wh_kind_name(f->kind));
        if (r->seen[r->T + f->slot]++)
            return BAD("offset %" PRId64 ": feature '%s' is given twice", off,
                       shown(name, nb, sizeof nb));
        if (r->dense_at[f->slot] >= 0)
            r->dense[(size_t)n * r->D + (uint32_t)r->dense_at[f->slot]] = s->dense[i]->value;
    }
    for (size_t i = 0; i < s->n_sparse; i++) {
        const Sluice__IdList *l = s->sparse[i];
        const sl_wh_feature_t *f = sl_wh_schema_find(r->schema, l->name);
        if (!f)
            return BAD("offset %" PRId64 ": feature '%s' is not in the schema", off,
                       shown(l->name, nb, sizeof nb));
        if (f->kind == SL_WH_DENSE)
            return BAD("offset %" PRId64 ": feature '%s' is dense, given as an id list", off,
                       shown(l->name, nb, sizeof nb));
        if (r->seen[r->T + r->SD + f->slot]++)
            return BAD("offset %" PRId64 ": feature '%s' is given twice", off,
                       shown(l->name, nb, sizeof nb));
        bool weighted = f->kind == SL_WH_WEIGHTED;
        if (weighted ? l->n_weights != l->n_ids : l->n_weights != 0)
            return BAD("offset %" PRId64 ": feature '%s' (%s) has %zu ids and %zu weights", off,
                       shown(l->name, nb, sizeof nb), sl_wh_kind_name(f->kind), l->n_ids,
                       l->n_weights);
        if (l->n_ids > INT32_MAX)
            return BAD("offset %" PRId64 ": feature '%s' has %zu ids", off,
                       shown(l->name, nb, sizeof nb), l->n_ids);
        if (r->sparse_at[f->slot] < 0) continue; /* checked, not projected */
        if (!reserve_ids(r, l->n_ids)) {
            sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory");
            return false;
        }
        size_t at = (size_t)n * r->S + (uint32_t)r->sparse_at[f->slot];
        r->starts[at] = r->nids;
        r->lens[at] = (uint32_t)l->n_ids;
        if (l->n_ids) memcpy(r->ids + r->nids, l->ids, l->n_ids * sizeof(int64_t));
        for (size_t k = 0; k < l->n_ids; k++)
            r->weights[r->nids + k] = weighted ? l->weights[k] : 1.0f;
        r->nids += l->n_ids;
    }
    (void)rc;
    return true;
}

sl_err_t sl_kafka_rows_add(sl_kafka_rows_t *r, const sl_kafka_record_t *rec, sl_error_t *err)
{
    int64_t off = rec->offset;
    if (rec->format_headers == 0 || !rec->format)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "offset %" PRId64 ": no " SL_KAFKA_FORMAT_HEADER " header", off);
    if (rec->format_headers > 1)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "offset %" PRId64 ": %u " SL_KAFKA_FORMAT_HEADER " headers, want one",
                            off, rec->format_headers);
    if (rec->format_len != sizeof SL_KAFKA_FORMAT_VERSION_TEXT - 1 ||
        memcmp(rec->format, SL_KAFKA_FORMAT_VERSION_TEXT, rec->format_len) != 0) {
        char v[17] = {0};
        size_t k = rec->format_len < 16 ? rec->format_len : 16;
        for (size_t i = 0; i < k; i++) {
            char c = ((const char *)rec->format)[i];
            v[i] = c >= 0x20 && c < 0x7f ? c : '?';
        }
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "offset %" PRId64 ": " SL_KAFKA_FORMAT_HEADER
                            " '%s%s', this reader knows version " SL_KAFKA_FORMAT_VERSION_TEXT,
                            off, v, rec->format_len > 16 ? "..." : "");
    }
    if (!reserve_rows(r)) return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory");
    sl_arena_reset(r->pb);
    ProtobufCAllocator pa = {.alloc = pb_alloc, .free = pb_free, .allocator_data = r->pb};
    Sluice__Sample *s = sluice__sample__unpack(&pa, rec->value_len, rec->value);
    if (!s)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "offset %" PRId64 ": the value (%zu bytes) is not a sluice.Sample", off,
                            rec->value_len);
    uint32_t n = r->n;
    uint64_t nids = r->nids;
    for (uint32_t t = 0; t < r->T; t++)
        r->labels[(size_t)n * r->T + t] = 0.0f;
    for (uint32_t d = 0; d < r->D; d++)
        r->dense[(size_t)n * r->D + d] = NAN;
    for (uint32_t k = 0; k < r->S; k++) {
        r->starts[(size_t)n * r->S + k] = nids;
        r->lens[(size_t)n * r->S + k] = 0;
    }
    if (!fill_row(r, s, off, err)) {
        r->nids = nids; /* the row's lists go with it */
        return err ? err->code : SL_ERR_CORRUPT;
    }
    r->sample_ids[n] = (int64_t)s->sample_id;
    r->session_ids[n] = (int64_t)s->session_id;
    r->timestamps[n] = s->timestamp;
    r->offsets[n] = off;
    r->create_ms[n] = rec->create_ms;
    r->n++;
    return SL_OK;
}

static int by_session(const void *x, const void *y)
{
    const struct order *a = x, *b = y;
    if (a->session != b->session) return a->session < b->session ? -1 : 1;
    return a->row < b->row ? -1 : a->row > b->row; /* stable: rows keep their order */
}

sl_err_t sl_kafka_rows_take(sl_kafka_rows_t *r, sl_kafka_stripe_t *out, sl_error_t *err)
{
    memset(out, 0, sizeof *out);
    sl_arena_reset(r->out);
    uint32_t n = r->n;
    if (n > r->order_cap) {
        if (r->order) sl_free(r->a, r->order, (size_t)r->order_cap * sizeof *r->order);
        r->order_cap = 0;
        if (!(r->order = sl_alloc(r->a, (size_t)n * sizeof *r->order))) goto nomem;
        r->order_cap = n;
    }
    for (uint32_t i = 0; i < n; i++)
        r->order[i] = (struct order){r->session_ids[i], i};
    if (n > 1) qsort(r->order, n, sizeof *r->order, by_session);
    sl_arena_t *ar = r->out;
    sl_batch_t *b = &out->rows.batch;
    b->batch_size = n;
    int64_t *sid = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *ses = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *ts = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *offs = sl_arena_alloc(ar, (size_t)n * 8 + 8),
            *cms = sl_arena_alloc(ar, (size_t)n * 8 + 8);
    if (!sid || !ses || !ts || !offs || !cms) goto nomem;
    if (sl_dense_init(&b->dense, ar, n, r->D, r->dense_names) != SL_OK ||
        sl_dense_init(&b->labels, ar, n, r->T, r->label_names) != SL_OK)
        goto nomem;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < r->S; k++)
            total += r->lens[(size_t)i * r->S + k];
    if (r->S &&
        sl_kjt_init(&b->sparse, ar, r->S, r->sparse_names, n, total, r->any_weighted) != SL_OK)
        goto nomem;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = r->order[j].row;
        sid[j] = r->sample_ids[i];
        ses[j] = r->session_ids[i];
        ts[j] = r->timestamps[i];
        offs[j] = r->offsets[i];
        cms[j] = r->create_ms[i];
        if (r->D) memcpy(b->dense.data + (size_t)j * r->D, r->dense + (size_t)i * r->D, r->D * 4);
        if (r->T) memcpy(b->labels.data + (size_t)j * r->T, r->labels + (size_t)i * r->T, r->T * 4);
    }
    uint64_t v = 0; /* key-major: every row of key 0, then key 1 ... */
    for (uint32_t k = 0; k < r->S; k++)
        for (uint32_t j = 0; j < n; j++) {
            size_t at = (size_t)r->order[j].row * r->S + k;
            uint32_t len = r->lens[at];
            b->sparse.lengths[(size_t)k * n + j] = (int32_t)len;
            if (len) {
                memcpy(b->sparse.values + v, r->ids + r->starts[at], (size_t)len * 8);
                if (r->any_weighted)
                    memcpy(b->sparse.weights + v, r->weights + r->starts[at], (size_t)len * 4);
            }
            v += len;
        }
    b->sample_ids = sid;
    b->record_ms = cms; /* travels with its row to the trainer (freshness) */
    out->rows.schema = r->schema;
    out->rows.session_ids = ses;
    out->rows.timestamps = ts;
    out->offsets = offs;
    out->create_ms = cms;
    r->n = 0;
    r->nids = 0;
    return SL_OK;
nomem:
    memset(out, 0, sizeof *out);
    return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory taking %u rows", n);
}

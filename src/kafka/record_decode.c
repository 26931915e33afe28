/* Records of layout version 1 into rows in column form (record_decode.h). */
#include "kafka/record_decode.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kafka/record_decode_internal.h"
#include "kafka/varint.h"
#include "common/mem.h"

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
    uint64_t c = sl_grow_cap(r->cap, (size_t)r->n + 1, 256, UINT32_MAX);
    if (c == 0) return false;
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
    uint64_t c = sl_grow_cap(r->ids_cap, r->nids + more, 4096, SIZE_MAX);
    if (c == 0) return false;
    void **const fields[] = {(void **)&r->ids, (void **)&r->weights};
    const size_t sizes[] = {8, 4};
    /* the old arrays hold ids_cap elements; only nids matter, but the
     * sizes freed must be what was allocated */
    if (!grow_all(r->a, fields, sizes, 2, r->ids_cap, c)) return false;
    r->ids_cap = c;
    return true;
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
    r->out_chunk = 64 * 1024;
    r->out = sl_arena_new(a, r->out_chunk);
    if (!r->schema || !r->out) goto nomem;
    r->T = sl_wh_schema_num_labels(schema);
    r->SD = sl_wh_schema_num_dense(schema);
    r->SS = sl_wh_schema_num_sparse(schema);
    r->label_names = sl_calloc(a, r->T + 1, sizeof(char *));
    r->dense_names = sl_calloc(a, r->SD + 1, sizeof(char *));
    r->sparse_names = sl_calloc(a, r->SS + 1, sizeof(char *));
    r->dense_at = sl_calloc(a, r->SD + 1, sizeof(int32_t));
    r->sparse_at = sl_calloc(a, r->SS + 1, sizeof(int32_t));
    r->seen = sl_calloc(a, (size_t)r->T + r->SD + r->SS + 1, 1);
    r->hints[0] = sl_calloc(a, r->T + 1, sizeof(struct hint));
    r->hints[1] = sl_calloc(a, r->SD + 1, sizeof(struct hint));
    r->hints[2] = sl_calloc(a, r->SS + 1, sizeof(struct hint));
    if (!r->label_names || !r->dense_names || !r->sparse_names || !r->dense_at || !r->sparse_at ||
        !r->seen || !r->hints[0] || !r->hints[1] || !r->hints[2])
        goto nomem;
    for (uint32_t i = 0; i < r->T; i++) {
        r->label_names[i] = sl_wh_schema_label(r->schema, i);
        size_t len = strlen(r->label_names[i]);
        if (len > r->max_name) r->max_name = (uint32_t)len;
    }
    for (uint32_t i = 0; i < sl_wh_schema_num_features(r->schema); i++) {
        size_t len = strlen(sl_wh_schema_feature(r->schema, i)->name);
        if (len > r->max_name) r->max_name = (uint32_t)len;
    }
    if (!(r->namebuf = sl_alloc(a, (size_t)r->max_name + 1))) goto nomem;
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
    sl_free(a, r->order, 2 * (size_t)r->order_cap * sizeof *r->order);
    if (r->label_names) sl_free(a, r->label_names, (r->T + 1) * sizeof(char *));
    if (r->dense_names) sl_free(a, r->dense_names, (r->SD + 1) * sizeof(char *));
    if (r->sparse_names) sl_free(a, r->sparse_names, (r->SS + 1) * sizeof(char *));
    if (r->dense_at) sl_free(a, r->dense_at, (r->SD + 1) * sizeof(int32_t));
    if (r->sparse_at) sl_free(a, r->sparse_at, (r->SS + 1) * sizeof(int32_t));
    if (r->seen) sl_free(a, r->seen, (size_t)r->T + r->SD + r->SS + 1);
    const uint32_t nh[3] = {r->T, r->SD, r->SS};
    for (int c = 0; c < 3; c++)
        if (r->hints[c]) sl_free(a, r->hints[c], (nh[c] + 1) * sizeof(struct hint));
    if (r->namebuf) sl_free(a, r->namebuf, (size_t)r->max_name + 1);
    sl_arena_destroy(r->out);
    sl_wh_schema_destroy(r->schema);
    sl_free(a, r, sizeof *r);
}

uint32_t sl_kafka_rows_count(const sl_kafka_rows_t *r)
{
    return r->n;
}

/* ---- the wire walker ----
 *
 * A record's value is read straight into row n's slots, without building
 * a protobuf-c Sluice__Sample: no allocation per record, no copy of a
 * name. protobuf-c (proto/sluice.proto) stays the definition of the
 * format; the walker accepts exactly what sluice__sample__unpack accepts
 * and reads the same values (kafka_walk_test checks it on random and
 * mutated Samples):
 *
 *   - a tag is a varint of at most 5 bytes (field number = tag >> 3, any
 *     number not of Sample, NamedValue or IdList is an unknown field and
 *     skipped; field 0 is refused in a one-byte tag and skipped in a
 *     longer one, as protobuf-c 1.4 does); wire types 3, 4, 6 and 7 are
 *     refused even in an unknown field;
 *   - a varint has at most 10 bytes (bits above 64 are dropped); a length
 *     at most 5 bytes, its low 32 bits counting (protobuf-c's uint32), and
 *     it must not run past the end;
 *   - a known field with another wire type than its own is refused;
 *     `ids` comes packed (length-delimited) or one varint at a time,
 *     `weights` packed (a multiple of 4 bytes) or one fixed32 at a time,
 *     and several occurrences concatenate; a scalar or a name given
 *     several times: the last one counts;
 *   - a name is its bytes up to the first NUL (protobuf-c makes a C string
 *     of it), a missing one is "".
 *
 * Fitting the schema is checked as the Sample would have been: labels in
 * their order, then dense values, then id lists, the first problem of the
 * first kind that has one is the reason given; a value that does not
 * parse is "not a sluice.Sample" whatever else is wrong with it. */

typedef struct walk {
    const uint8_t *p, *end;
} walk_t;

static inline bool w_varint(walk_t *w, uint64_t *v)
{
    return sl_varint_read(&w->p, w->end, v);
}

/* A tag: its field number and wire type. */
static inline bool w_tag(walk_t *w, uint32_t *field, uint32_t *type)
{
    const uint8_t *q = w->p;
    uint8_t b = *q++;
    *type = b & 7;
    uint32_t tag = (uint32_t)(b & 0x7f) >> 3;
    if (b < 8) return false; /* field 0 in one byte: protobuf-c 1.4 refuses it (not longer) */
    for (unsigned i = 1, shift = 4; b & 0x80; i++, shift += 7) {
        if (i == 5 || q == w->end) return false;
        b = *q++;
        tag |= (uint32_t)(b & 0x7f) << shift;
    }
    *field = tag;
    w->p = q;
    return true;
}

/* A length-delimited field's bytes, as *sub. */
static inline bool w_bytes(walk_t *w, walk_t *sub)
{
    const uint8_t *q = w->p;
    uint32_t len = 0;
    for (unsigned i = 0, shift = 0;; i++, shift += 7) {
        if (i == 5 || q == w->end) return false;
        uint8_t b = *q++;
        len |= (uint32_t)(b & 0x7f) << shift; /* the low 32 bits, as protobuf-c */
        if (!(b & 0x80)) break;
    }
    if (len > (size_t)(w->end - q)) return false;
    *sub = (walk_t){q, q + len};
    w->p = q + len;
    return true;
}

/* A packed run of varints, every one of them, appended to to[*n...]
 * (varint.h: the bulk of a record). */
static inline bool w_packed(walk_t *w, const uint8_t *readable, int64_t *to, uint64_t *n)
{
    if (!sl_varint_read_packed(w->p, w->end, readable, to, n)) return false;
    w->p = w->end;
    return true;
}

/* Skip a field of wire type `type`. */
static bool w_skip(walk_t *w, uint32_t type)
{
    uint64_t v;
    walk_t sub;
    switch (type) {
    case 0:
        return w_varint(w, &v);
    case 1:
    case 5: {
        size_t n = type == 1 ? 8 : 4;
        if ((size_t)(w->end - w->p) < n) return false;
        w->p += n;
        return true;
    }
    case 2:
        return w_bytes(w, &sub);
    default: /* groups and the types protobuf has not defined */
        return false;
    }
}

static inline bool w_fixed32(walk_t *w, float *f)
{
    if (w->end - w->p < 4) return false;
    memcpy(f, w->p, 4);
    w->p += 4;
    return true;
}

/* A name of the record as it came; what counts is its bytes up to the
 * first NUL (upto_nul), looked for only when the name is not the one
 * expected. */
typedef struct wname {
    const char *s;
    uint32_t len;
} wname_t;

static inline wname_t name_of(const walk_t *sub)
{
    size_t n = (size_t)(sub->end - sub->p);
    return (wname_t){(const char *)sub->p, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n};
}

static wname_t upto_nul(wname_t name)
{
    const char *nul = memchr(name.s, 0, name.len);
    if (nul) name.len = (uint32_t)(nul - name.s);
    return name;
}

/* A name from a record, for a message: at most 64 bytes, printable. */
static const char *shown(wname_t name, char *buf, size_t cap)
{
    name = upto_nul(name);
    size_t i = 0;
    for (; i < name.len && i + 1 < cap && i < 64; i++)
        buf[i] = name.s[i] >= 0x20 && name.s[i] < 0x7f ? name.s[i] : '?';
    buf[i] = '\0';
    return buf;
}

/* Whether the n bytes at a and b are equal, inline: names are a few
 * bytes, and a call of libc's memcmp for each of a record's names was 5 %
 * of the reader's CPU (bench_kafka_online profile). Loads stay within the
 * n bytes (the record's name may end its buffer): words that overlap at
 * the end. */
static inline bool same_bytes(const char *a, const char *b, uint32_t n)
{
    if (n >= 8) {
        uint64_t x, y;
        for (uint32_t i = 0; i + 8 < n; i += 8) {
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y) return false;
        }
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t x0, y0, x1, y1;
        memcpy(&x0, a, 4);
        memcpy(&y0, b, 4);
        memcpy(&x1, a + n - 4, 4);
        memcpy(&y1, b + n - 4, 4);
        return x0 == y0 && x1 == y1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* The hint of category c (0 labels, 1 dense, 2 id lists) at position k
 * of a record for name: the schema's answer, remembered. @return false
 * when the schema has no such label (c 0) or feature. */
static bool lookup(sl_kafka_rows_t *r, int c, uint32_t k, wname_t name, int32_t *label,
                   const sl_wh_feature_t **f)
{
    const uint32_t nh[3] = {r->T, r->SD, r->SS};
    struct hint *h = k < nh[c] ? &r->hints[c][k] : NULL;
    if (h && h->name && h->len == name.len && same_bytes(h->name, name.s, name.len)) {
        *label = h->label;
        *f = h->f;
        return true;
    }
    for (uint32_t i = 0; i < nh[c]; i++) { /* a value left out moves the others along */
        const struct hint *o = &r->hints[c][i];
        if (o->name && o->len == name.len && same_bytes(o->name, name.s, name.len)) {
            *label = o->label;
            *f = o->f;
            if (h) *h = *o;
            return true;
        }
    }
    name = upto_nul(name); /* a name the schema has holds no NUL: the hint saw the whole name */
    if (name.len > r->max_name) return false;
    memcpy(r->namebuf, name.s, name.len);
    r->namebuf[name.len] = '\0';
    *label = -1;
    *f = NULL;
    if (c == 0)
        *label = sl_wh_schema_find_label(r->schema, r->namebuf);
    else
        *f = sl_wh_schema_find(r->schema, r->namebuf);
    if (c == 0 ? *label < 0 : *f == NULL) return false;
    if (h) {
        h->name = c == 0 ? sl_wh_schema_label(r->schema, (uint32_t)*label) : (*f)->name;
        h->len = name.len;
        h->label = *label;
        h->f = *f;
    }
    return true;
}

/* What a walk found wrong so far: the first problem of the first kind
 * (0 labels, 1 dense, 2 id lists) that has one. */
typedef struct wstate {
    sl_kafka_rows_t *r;
    uint32_t n; /* the row */
    int64_t off;
    const uint8_t *value_end; /* the record's: packed runs may load up to it */
    int bad;                  /* the kind of the problem kept; 3: none */
    uint32_t count[3];        /* entries of each kind so far */
    char why[SL_ERROR_MSG_MAX];
} wstate_t;

#define UNFIT(c, ...)                                                                              \
    do {                                                                                           \
        if ((c) < st->bad) {                                                                       \
            st->bad = (c);                                                                         \
            snprintf(st->why, sizeof st->why, __VA_ARGS__);                                        \
        }                                                                                          \
    } while (0)

/* A NamedValue (c 0: a label, 1: a dense value) into the row. */
static bool walk_named(wstate_t *st, walk_t w, int c)
{
    sl_kafka_rows_t *r = st->r;
    wname_t name = {"", 0};
    float value = 0.0f;
    while (w.p < w.end) {
        uint32_t field, type;
        if (!w_tag(&w, &field, &type)) return false;
        walk_t sub;
        if (field == 1) {
            if (type != 2 || !w_bytes(&w, &sub)) return false;
            name = name_of(&sub);
        } else if (field == 2) {
            if (type != 5 || !w_fixed32(&w, &value)) return false;
        } else if (!w_skip(&w, type)) {
            return false;
        }
    }
    uint32_t k = st->count[c]++;
    if (st->bad <= c) return true; /* a problem of this kind or an earlier one is kept */
    int32_t label;
    const sl_wh_feature_t *f;
    char nb[80];
    bool known = lookup(r, c, k, name, &label, &f);
    if (c == 0) {
        if (!known)
            UNFIT(0, "offset %" PRId64 ": label '%s' is not in the schema", st->off,
                  shown(name, nb, sizeof nb));
        else if (r->seen[label]++)
            UNFIT(0, "offset %" PRId64 ": label '%s' is given twice", st->off,
                  shown(name, nb, sizeof nb));
        else
            r->labels[(size_t)st->n * r->T + (uint32_t)label] = value;
        return true;
    }
    if (!known)
        UNFIT(1, "offset %" PRId64 ": feature '%s' is not in the schema", st->off,
              shown(name, nb, sizeof nb));
    else if (f->kind != SL_WH_DENSE)
        UNFIT(1, "offset %" PRId64 ": feature '%s' is %s, given as a dense value", st->off,
              shown(name, nb, sizeof nb), sl_wh_kind_name(f->kind));
    else if (r->seen[r->T + f->slot]++)
        UNFIT(1, "offset %" PRId64 ": feature '%s' is given twice", st->off,
              shown(name, nb, sizeof nb));
    else if (r->dense_at[f->slot] >= 0)
        r->dense[(size_t)st->n * r->D + (uint32_t)r->dense_at[f->slot]] = value;
    return true;
}

/* An IdList into the row: its ids and weights are read to the end of the
 * ids collected (weights at the same places), and kept when the list
 * fits the schema and is projected. @return false for bytes that do not
 * parse; *nomem when room for the ids could not be had. */
static bool walk_ids(wstate_t *st, walk_t w, bool *nomem)
{
    sl_kafka_rows_t *r = st->r;
    wname_t name = {"", 0};
    uint64_t ni = 0, nw = 0; /* ids and weights read */
    while (w.p < w.end) {
        uint32_t field, type;
        if (!w_tag(&w, &field, &type)) return false;
        walk_t sub;
        if (field == 1) {
            if (type != 2 || !w_bytes(&w, &sub)) return false;
            name = name_of(&sub);
        } else if (field == 2 && (type == 0 || type == 2)) {
            walk_t ids = w;
            if (type == 2 && !w_bytes(&w, &ids)) return false;
            /* at most one id a byte (a varint's last byte) */
            uint64_t most = type == 2 ? (uint64_t)(ids.end - ids.p) : 1;
            uint64_t have = ni > nw ? ni : nw;
            if (!reserve_ids(r, have + most + SL_VARINT_SCRATCH)) return !(*nomem = true);
            int64_t *to = r->ids + r->nids;
            uint64_t v;
            if (type == 0) { /* one id */
                if (!w_varint(&w, &v)) return false;
                to[ni++] = (int64_t)v;
            }
            if (type == 2 && !w_packed(&ids, st->value_end, to, &ni)) return false;
        } else if (field == 3 && (type == 5 || type == 2)) {
            walk_t ws = w;
            if (type == 2 && (!w_bytes(&w, &ws) || (ws.end - ws.p) % 4 != 0)) return false;
            uint64_t m = type == 2 ? (uint64_t)(ws.end - ws.p) / 4 : 1;
            uint64_t have = ni > nw ? ni : nw;
            if (!reserve_ids(r, have + m)) return !(*nomem = true);
            if (type == 5 && !w_fixed32(&w, &r->weights[r->nids + nw])) return false;
            if (type == 2 && m) memcpy(&r->weights[r->nids + nw], ws.p, (size_t)m * 4);
            nw += m;
        } else if (field == 2 || field == 3 || !w_skip(&w, type)) {
            return false;
        }
    }
    uint32_t k = st->count[2]++;
    if (st->bad <= 2) return true;
    int32_t label;
    const sl_wh_feature_t *f;
    char nb[80];
    if (!lookup(r, 2, k, name, &label, &f)) {
        UNFIT(2, "offset %" PRId64 ": feature '%s' is not in the schema", st->off,
              shown(name, nb, sizeof nb));
        return true;
    }
    if (f->kind == SL_WH_DENSE) {
        UNFIT(2, "offset %" PRId64 ": feature '%s' is dense, given as an id list", st->off,
              shown(name, nb, sizeof nb));
        return true;
    }
    if (r->seen[r->T + r->SD + f->slot]++) {
        UNFIT(2, "offset %" PRId64 ": feature '%s' is given twice", st->off,
              shown(name, nb, sizeof nb));
        return true;
    }
    bool weighted = f->kind == SL_WH_WEIGHTED;
    if (weighted ? nw != ni : nw != 0) {
        UNFIT(2,
              "offset %" PRId64 ": feature '%s' (%s) has %" PRIu64 " ids and %" PRIu64 " weights",
              st->off, shown(name, nb, sizeof nb), sl_wh_kind_name(f->kind), ni, nw);
        return true;
    }
    if (ni > INT32_MAX) {
        UNFIT(2, "offset %" PRId64 ": feature '%s' has %" PRIu64 " ids", st->off,
              shown(name, nb, sizeof nb), ni);
        return true;
    }
    if (r->sparse_at[f->slot] < 0) return true; /* checked, not projected: not kept */
    size_t at = (size_t)st->n * r->S + (uint32_t)r->sparse_at[f->slot];
    r->starts[at] = r->nids;
    r->lens[at] = (uint32_t)ni;
    if (!weighted && r->any_weighted) /* weights go out only with a weighted feature */
        for (uint64_t i = 0; i < ni; i++)
            r->weights[r->nids + i] = 1.0f;
    r->nids += ni;
    return true;
}

/* The Sample of rec into row n (defaults already in place). @return
 * SL_ERR_CORRUPT (not a Sample, or one that does not fit) or
 * SL_ERR_NOMEM, err saying which. */
static sl_err_t walk_sample(sl_kafka_rows_t *r, const sl_kafka_record_t *rec, sl_error_t *err)
{
    /* Field by field, not `= {...}`: that zeroed why[] (SL_ERROR_MSG_MAX
     * bytes, a rep stos) for every record, 14 % of this function's time,
     * and why is read only after UNFIT has written it (bad < 3). */
    wstate_t st;
    st.r = r;
    st.n = r->n;
    st.off = rec->offset;
    st.value_end = NULL;
    st.bad = 3;
    st.count[0] = st.count[1] = st.count[2] = 0;
    st.why[0] = '\0';
    walk_t w = {rec->value, rec->value};
    if (rec->value) w.end += rec->value_len; /* no value: an empty Sample */
    st.value_end = w.end;
    memset(r->seen, 0, (size_t)r->T + r->SD + r->SS);
    uint64_t sample = 0, session = 0, ts = 0;
    bool ok = true, nomem = false;
    while (ok && w.p < w.end) {
        uint32_t field, type;
        walk_t sub;
        if (!w_tag(&w, &field, &type)) {
            ok = false;
        } else if (field >= 1 && field <= 3) {
            uint64_t *to = field == 1 ? &sample : field == 2 ? &session : &ts;
            ok = type == 0 && w_varint(&w, to);
        } else if (field >= 4 && field <= 6) {
            ok = type == 2 && w_bytes(&w, &sub) &&
                 (field == 6 ? walk_ids(&st, sub, &nomem) : walk_named(&st, sub, field - 4));
        } else {
            ok = w_skip(&w, type);
        }
    }
    if (nomem) return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory");
    if (!ok)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "offset %" PRId64 ": the value (%zu bytes) is not a sluice.Sample",
                            rec->offset, rec->value_len);
    if (st.bad < 3) return sl_error_set(err, SL_ERR_CORRUPT, "%s", st.why);
    r->sample_ids[st.n] = (int64_t)sample;
    r->session_ids[st.n] = (int64_t)session;
    r->timestamps[st.n] = (int64_t)ts;
    return SL_OK;
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
    sl_err_t rc = walk_sample(r, rec, err);
    if (rc) {
        r->nids = nids; /* the row's lists go with it */
        return rc;
    }
    r->offsets[n] = off;
    r->create_ms[n] = rec->create_ms;
    r->n++;
    return SL_OK;
}

sl_err_t sl_kafka_rows_add_row(sl_kafka_rows_t *r, const sl_wh_row_t *row, int64_t offset,
                               int64_t create_ms, sl_error_t *err)
{
    if (!reserve_rows(r)) return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory");
    uint32_t n = r->n;
    uint64_t more = 0;
    for (uint32_t s = 0; row->sparse != NULL && s < r->SS; s++)
        if (r->sparse_at[s] >= 0) more += row->sparse[s].len;
    if (!reserve_ids(r, more))
        return sl_error_set(err, SL_ERR_NOMEM, "kafka records: out of memory");
    for (uint32_t t = 0; t < r->T; t++)
        r->labels[(size_t)n * r->T + t] = row->labels ? row->labels[t] : 0.0f;
    for (uint32_t d = 0; d < r->SD; d++)
        if (r->dense_at[d] >= 0)
            r->dense[(size_t)n * r->D + (uint32_t)r->dense_at[d]] =
                row->dense ? row->dense[d] : NAN;
    for (uint32_t s = 0; s < r->SS; s++) {
        if (r->sparse_at[s] < 0) continue;
        size_t at = (size_t)n * r->S + (uint32_t)r->sparse_at[s];
        const sl_wh_idlist_t *l = row->sparse ? &row->sparse[s] : NULL;
        uint32_t len = l ? l->len : 0;
        r->starts[at] = r->nids;
        r->lens[at] = len;
        if (len) memcpy(r->ids + r->nids, l->ids, (size_t)len * sizeof *r->ids);
        bool weighted = sl_wh_schema_sparse(r->schema, s)->kind == SL_WH_WEIGHTED;
        if (r->any_weighted)
            for (uint32_t i = 0; i < len; i++)
                r->weights[r->nids + i] = weighted && l->weights ? l->weights[i] : 1.0f;
        r->nids += len;
    }
    r->sample_ids[n] = row->sample_id;
    r->session_ids[n] = row->session_id;
    r->timestamps[n] = row->timestamp;
    r->offsets[n] = offset;
    r->create_ms[n] = create_ms;
    r->n++;
    return SL_OK;
}

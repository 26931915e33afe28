/* The table schema: features, labels, id columns, partition keys; its
 * validation, its protobuf form (the _schema file, the copy in every data
 * file's footer) and its JSON form (--schema files, inspect). */
#include "common/err.h"
#include "common/fileio.h"
#include "wh_internal.h"

#include <string.h>
#include <xxhash.h>

#define MAX_FEATURES (1u << 20)

struct sl_wh_schema {
    const sl_allocator_t *a;
    sl_arena_t *names; /* every string of the schema */
    uint32_t nf, cap_f;
    sl_wh_feature_t *features;
    uint32_t nd, ns;
    uint32_t *dense, *sparse; /* slot -> feature index, capacity cap_f */
    uint32_t nl, cap_l;
    const char **labels;
    const char *cols[3];
    uint32_t nk, cap_k;
    const char **pkeys;
    /* name -> feature index + 1 (0 = empty), open addressing, power of two */
    uint32_t hcap;
    uint32_t *hash;
};

const char *sl_wh_kind_name(sl_wh_kind_t kind)
{
    switch (kind) {
    case SL_WH_DENSE:
        return "dense";
    case SL_WH_SPARSE:
        return "sparse";
    case SL_WH_WEIGHTED:
        return "weighted";
    }
    return "unknown";
}

static const char *const default_cols[3] = {"sample_id", "session_id", "ts"};

sl_wh_schema_t *sl_wh_schema_new(const sl_allocator_t *a)
{
    if (a == NULL) a = sl_allocator_default();
    sl_wh_schema_t *s = sl_calloc(a, 1, sizeof *s);
    if (s == NULL) return NULL;
    s->a = a;
    s->names = sl_arena_new(a, 4096);
    if (s->names == NULL) {
        sl_free(a, s, sizeof *s);
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        s->cols[i] = default_cols[i];
    return s;
}

void sl_wh_schema_destroy(sl_wh_schema_t *s)
{
    if (s == NULL) return;
    const sl_allocator_t *a = s->a;
    sl_free(a, s->features, (size_t)s->cap_f * sizeof *s->features);
    sl_free(a, s->dense, (size_t)s->cap_f * sizeof(uint32_t));
    sl_free(a, s->sparse, (size_t)s->cap_f * sizeof(uint32_t));
    sl_free(a, s->labels, (size_t)s->cap_l * sizeof(char *));
    sl_free(a, s->pkeys, (size_t)s->cap_k * sizeof(char *));
    sl_free(a, s->hash, (size_t)s->hcap * sizeof(uint32_t));
    sl_arena_destroy(s->names);
    sl_free(a, s, sizeof *s);
}

/* Grow *p (elements of size elem, capacity *cap) to hold need elements. */
static bool grow(const sl_allocator_t *a, void **p, uint32_t *cap, size_t elem, uint32_t need)
{
    if (need <= *cap) return true;
    uint32_t n = *cap < 8 ? 8 : *cap;
    while (n < need)
        n *= 2;
    void *q = sl_alloc(a, sl_mul_size(n, elem));
    if (q == NULL) return false;
    if (*cap > 0) memcpy(q, *p, (size_t)*cap * elem);
    sl_free(a, *p, (size_t)*cap * elem);
    *p = q;
    *cap = n;
    return true;
}

sl_err_t wh_check_name(const char *what, const char *name, sl_error_t *err)
{
    if (name == NULL || name[0] == '\0')
        return sl_error_set(err, SL_ERR_INVALID, "%s name is empty", what);
    size_t n = strlen(name);
    if (n > SL_WH_NAME_MAX)
        return sl_error_set(err, SL_ERR_INVALID, "%s name '%.40s...' is longer than %d bytes", what,
                            name, SL_WH_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f || c == '/')
            return sl_error_set(err, SL_ERR_INVALID,
                                "%s name '%s' holds a control character or '/' at byte %zu", what,
                                name, i);
    }
    return SL_OK;
}

static uint32_t name_hash(const char *name)
{
    return (uint32_t)XXH3_64bits(name, strlen(name));
}

static bool rehash(sl_wh_schema_t *s)
{
    uint32_t want = 16;
    while (want < 2 * s->nf + 2)
        want *= 2;
    if (want != s->hcap) {
        uint32_t *h = sl_calloc(s->a, want, sizeof(uint32_t));
        if (h == NULL) return false;
        sl_free(s->a, s->hash, (size_t)s->hcap * sizeof(uint32_t));
        s->hash = h;
        s->hcap = want;
    } else {
        memset(s->hash, 0, (size_t)want * sizeof(uint32_t));
    }
    for (uint32_t i = 0; i < s->nf; i++) {
        uint32_t at = name_hash(s->features[i].name) & (s->hcap - 1);
        while (s->hash[at] != 0)
            at = (at + 1) & (s->hcap - 1);
        s->hash[at] = i + 1;
    }
    return true;
}

int sl_wh_schema_index(const sl_wh_schema_t *s, const char *name)
{
    if (s->hcap == 0 || name == NULL) return -1;
    uint32_t at = name_hash(name) & (s->hcap - 1);
    while (s->hash[at] != 0) {
        uint32_t i = s->hash[at] - 1;
        if (strcmp(s->features[i].name, name) == 0) return (int)i;
        at = (at + 1) & (s->hcap - 1);
    }
    return -1;
}

const sl_wh_feature_t *sl_wh_schema_find(const sl_wh_schema_t *s, const char *name)
{
    int i = sl_wh_schema_index(s, name);
    return i < 0 ? NULL : &s->features[i];
}

int sl_wh_schema_find_label(const sl_wh_schema_t *s, const char *name)
{
    for (uint32_t i = 0; i < s->nl; i++)
        if (strcmp(s->labels[i], name) == 0) return (int)i;
    return -1;
}

sl_err_t sl_wh_schema_add_feature(sl_wh_schema_t *s, const char *name, sl_wh_kind_t kind,
                                  sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(wh_check_name("feature", name, err));
    if (kind != SL_WH_DENSE && kind != SL_WH_SPARSE && kind != SL_WH_WEIGHTED)
        return sl_error_set(err, SL_ERR_INVALID, "feature '%s': unknown kind %d", name, (int)kind);
    if (sl_wh_schema_index(s, name) >= 0)
        return sl_error_set(err, SL_ERR_INVALID, "feature '%s' appears twice", name);
    if (sl_wh_schema_find_label(s, name) >= 0)
        return sl_error_set(err, SL_ERR_INVALID, "feature '%s' is also a label", name);
    if (s->nf >= MAX_FEATURES)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "more than %u features", MAX_FEATURES);
    if (s->nf == s->cap_f) {
        /* features, dense and sparse share one capacity: grow all or none */
        uint32_t cap = s->cap_f < 8 ? 8 : s->cap_f * 2;
        sl_wh_feature_t *nf = sl_alloc(s->a, (size_t)cap * sizeof *nf);
        uint32_t *nd = sl_alloc(s->a, (size_t)cap * sizeof(uint32_t));
        uint32_t *ns = sl_alloc(s->a, (size_t)cap * sizeof(uint32_t));
        if (nf == NULL || nd == NULL || ns == NULL) {
            sl_free(s->a, nf, (size_t)cap * sizeof *nf);
            sl_free(s->a, nd, (size_t)cap * sizeof(uint32_t));
            sl_free(s->a, ns, (size_t)cap * sizeof(uint32_t));
            return sl_error_set(err, SL_ERR_NOMEM, "schema: add feature");
        }
        if (s->nf > 0) memcpy(nf, s->features, (size_t)s->nf * sizeof *nf);
        if (s->nd > 0) memcpy(nd, s->dense, (size_t)s->nd * sizeof(uint32_t));
        if (s->ns > 0) memcpy(ns, s->sparse, (size_t)s->ns * sizeof(uint32_t));
        sl_free(s->a, s->features, (size_t)s->cap_f * sizeof *nf);
        sl_free(s->a, s->dense, (size_t)s->cap_f * sizeof(uint32_t));
        sl_free(s->a, s->sparse, (size_t)s->cap_f * sizeof(uint32_t));
        s->features = nf;
        s->dense = nd;
        s->sparse = ns;
        s->cap_f = cap;
    }
    char *copy = sl_arena_strdup(s->names, name);
    if (copy == NULL) return sl_error_set(err, SL_ERR_NOMEM, "schema: add feature");
    sl_wh_feature_t *fe = &s->features[s->nf];
    fe->name = copy;
    fe->kind = kind;
    if (kind == SL_WH_DENSE) {
        fe->slot = s->nd;
        s->dense[s->nd++] = s->nf;
    } else {
        fe->slot = s->ns;
        s->sparse[s->ns++] = s->nf;
    }
    s->nf++;
    if (!rehash(s)) {
        s->nf--;
        if (kind == SL_WH_DENSE)
            s->nd--;
        else
            s->ns--;
        return sl_error_set(err, SL_ERR_NOMEM, "schema: add feature");
    }
    return SL_OK;
}

sl_err_t sl_wh_schema_add_label(sl_wh_schema_t *s, const char *name, sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(wh_check_name("label", name, err));
    if (sl_wh_schema_find_label(s, name) >= 0)
        return sl_error_set(err, SL_ERR_INVALID, "label '%s' appears twice", name);
    if (sl_wh_schema_index(s, name) >= 0)
        return sl_error_set(err, SL_ERR_INVALID, "label '%s' is also a feature", name);
    if (s->nl >= MAX_FEATURES)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "more than %u labels", MAX_FEATURES);
    void *p = s->labels;
    if (!grow(s->a, &p, &s->cap_l, sizeof(char *), s->nl + 1))
        return sl_error_set(err, SL_ERR_NOMEM, "schema: add label");
    s->labels = p;
    char *copy = sl_arena_strdup(s->names, name);
    if (copy == NULL) return sl_error_set(err, SL_ERR_NOMEM, "schema: add label");
    s->labels[s->nl++] = copy;
    return SL_OK;
}

sl_err_t sl_wh_schema_set_columns(sl_wh_schema_t *s, const char *sample_id, const char *session_id,
                                  const char *timestamp, sl_error_t *err)
{
    const char *in[3] = {sample_id, session_id, timestamp};
    const char *next[3];
    for (int i = 0; i < 3; i++) {
        next[i] = in[i] != NULL ? in[i] : s->cols[i];
        SL_FORWARD_IF_ERROR(wh_check_name("column", next[i], err));
    }
    if (strcmp(next[0], next[1]) == 0 || strcmp(next[0], next[2]) == 0 ||
        strcmp(next[1], next[2]) == 0)
        return sl_error_set(err, SL_ERR_INVALID, "columns '%s', '%s', '%s' are not distinct",
                            next[0], next[1], next[2]);
    for (int i = 0; i < 3; i++) {
        if (in[i] == NULL) continue;
        char *copy = sl_arena_strdup(s->names, in[i]);
        if (copy == NULL) return sl_error_set(err, SL_ERR_NOMEM, "schema: set columns");
        s->cols[i] = copy;
    }
    return SL_OK;
}

static bool is_key(const char *k)
{
    if (k == NULL || !((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
        return false;
    size_t n = 0;
    for (const char *p = k; *p; p++, n++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_' ||
              (*p >= '0' && *p <= '9')))
            return false;
    return n <= 64;
}

sl_err_t sl_wh_schema_add_partition_key(sl_wh_schema_t *s, const char *key, sl_error_t *err)
{
    if (!is_key(key))
        return sl_error_set(err, SL_ERR_INVALID,
                            "partition key '%s' is not [A-Za-z_][A-Za-z0-9_]* (64 bytes at most)",
                            key ? key : "(null)");
    for (uint32_t i = 0; i < s->nk; i++)
        if (strcmp(s->pkeys[i], key) == 0)
            return sl_error_set(err, SL_ERR_INVALID, "partition key '%s' appears twice", key);
    if (s->nk >= 64) return sl_error_set(err, SL_ERR_TOO_LARGE, "more than 64 partition keys");
    void *p = s->pkeys;
    if (!grow(s->a, &p, &s->cap_k, sizeof(char *), s->nk + 1))
        return sl_error_set(err, SL_ERR_NOMEM, "schema: add partition key");
    s->pkeys = p;
    char *copy = sl_arena_strdup(s->names, key);
    if (copy == NULL) return sl_error_set(err, SL_ERR_NOMEM, "schema: add partition key");
    s->pkeys[s->nk++] = copy;
    return SL_OK;
}

bool wh_partition_key_ok(const char *key)
{
    return is_key(key);
}

uint32_t sl_wh_schema_num_features(const sl_wh_schema_t *s)
{
    return s->nf;
}
const sl_wh_feature_t *sl_wh_schema_feature(const sl_wh_schema_t *s, uint32_t i)
{
    return i < s->nf ? &s->features[i] : NULL;
}
uint32_t sl_wh_schema_num_dense(const sl_wh_schema_t *s)
{
    return s->nd;
}
uint32_t sl_wh_schema_num_sparse(const sl_wh_schema_t *s)
{
    return s->ns;
}
const sl_wh_feature_t *sl_wh_schema_dense(const sl_wh_schema_t *s, uint32_t slot)
{
    return slot < s->nd ? &s->features[s->dense[slot]] : NULL;
}
const sl_wh_feature_t *sl_wh_schema_sparse(const sl_wh_schema_t *s, uint32_t slot)
{
    return slot < s->ns ? &s->features[s->sparse[slot]] : NULL;
}
uint32_t sl_wh_schema_num_labels(const sl_wh_schema_t *s)
{
    return s->nl;
}
const char *sl_wh_schema_label(const sl_wh_schema_t *s, uint32_t i)
{
    return i < s->nl ? s->labels[i] : NULL;
}
const char *sl_wh_schema_column(const sl_wh_schema_t *s, sl_wh_column_t column)
{
    switch (column) {
    case SL_WH_COL_SAMPLE_ID:
        return s->cols[0];
    case SL_WH_COL_SESSION_ID:
        return s->cols[1];
    case SL_WH_COL_TIMESTAMP:
        return s->cols[2];
    default:
        return NULL;
    }
}
uint32_t sl_wh_schema_num_partition_keys(const sl_wh_schema_t *s)
{
    return s->nk;
}
const char *sl_wh_schema_partition_key(const sl_wh_schema_t *s, uint32_t i)
{
    return i < s->nk ? s->pkeys[i] : NULL;
}

bool sl_wh_schema_equal(const sl_wh_schema_t *a, const sl_wh_schema_t *b)
{
    if (a->nf != b->nf || a->nl != b->nl || a->nk != b->nk) return false;
    for (uint32_t i = 0; i < a->nf; i++)
        if (a->features[i].kind != b->features[i].kind ||
            strcmp(a->features[i].name, b->features[i].name) != 0)
            return false;
    for (uint32_t i = 0; i < a->nl; i++)
        if (strcmp(a->labels[i], b->labels[i]) != 0) return false;
    for (uint32_t i = 0; i < a->nk; i++)
        if (strcmp(a->pkeys[i], b->pkeys[i]) != 0) return false;
    for (int i = 0; i < 3; i++)
        if (strcmp(a->cols[i], b->cols[i]) != 0) return false;
    return true;
}

sl_wh_schema_t *sl_wh_schema_clone(const sl_wh_schema_t *s, const sl_allocator_t *a)
{
    sl_wh_schema_t *c = sl_wh_schema_new(a);
    if (c == NULL) return NULL;
    sl_error_t e;
    bool ok = sl_wh_schema_set_columns(c, s->cols[0], s->cols[1], s->cols[2], &e) == SL_OK;
    for (uint32_t i = 0; ok && i < s->nf; i++)
        ok = sl_wh_schema_add_feature(c, s->features[i].name, s->features[i].kind, &e) == SL_OK;
    for (uint32_t i = 0; ok && i < s->nl; i++)
        ok = sl_wh_schema_add_label(c, s->labels[i], &e) == SL_OK;
    for (uint32_t i = 0; ok && i < s->nk; i++)
        ok = sl_wh_schema_add_partition_key(c, s->pkeys[i], &e) == SL_OK;
    if (!ok) {
        sl_wh_schema_destroy(c);
        return NULL;
    }
    return c;
}

/* ---- protobuf ---- */

sl_err_t wh_schema_to_pb(const sl_wh_schema_t *s, sl_arena_t *arena, Sluice__TableSchema *pb)
{
    sluice__table_schema__init(pb);
    pb->format_version = SL_WH_SCHEMA_VERSION;
    pb->n_features = s->nf;
    if (s->nf > 0) {
        pb->features = sl_arena_alloc(arena, (size_t)s->nf * sizeof(Sluice__FeatureSpec *));
        Sluice__FeatureSpec *specs = sl_arena_alloc(arena, (size_t)s->nf * sizeof *specs);
        if (pb->features == NULL || specs == NULL) return SL_ERR_NOMEM;
        for (uint32_t i = 0; i < s->nf; i++) {
            sluice__feature_spec__init(&specs[i]);
            specs[i].name = (char *)s->features[i].name;
            specs[i].kind = (Sluice__FeatureKind)s->features[i].kind;
            pb->features[i] = &specs[i];
        }
    }
    pb->n_labels = s->nl;
    pb->labels = (char **)s->labels;
    pb->sample_id_column = (char *)s->cols[0];
    pb->session_id_column = (char *)s->cols[1];
    pb->timestamp_column = (char *)s->cols[2];
    pb->n_partition_keys = s->nk;
    pb->partition_keys = (char **)s->pkeys;
    return SL_OK;
}

sl_err_t wh_schema_from_pb(const Sluice__TableSchema *pb, const sl_allocator_t *a,
                           sl_wh_schema_t **out, sl_error_t *err)
{
    *out = NULL;
    if (pb->format_version != SL_WH_SCHEMA_VERSION)
        return sl_error_set(err, SL_ERR_VERSION, "schema format version %u (this build reads %d)",
                            pb->format_version, SL_WH_SCHEMA_VERSION);
    if (pb->n_features > MAX_FEATURES || pb->n_labels > MAX_FEATURES)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "schema: %zu features, %zu labels",
                            pb->n_features, pb->n_labels);
    sl_wh_schema_t *s = sl_wh_schema_new(a);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "schema");
    sl_err_t rc = SL_OK;
    const char *cols[3] = {pb->sample_id_column, pb->session_id_column, pb->timestamp_column};
    for (int i = 0; i < 3; i++)
        if (cols[i] != NULL && cols[i][0] == '\0') cols[i] = NULL;
    rc = sl_wh_schema_set_columns(s, cols[0], cols[1], cols[2], err);
    for (size_t i = 0; rc == SL_OK && i < pb->n_features; i++) {
        const Sluice__FeatureSpec *f = pb->features[i];
        rc = sl_wh_schema_add_feature(s, f->name, (sl_wh_kind_t)f->kind, err);
    }
    for (size_t i = 0; rc == SL_OK && i < pb->n_labels; i++)
        rc = sl_wh_schema_add_label(s, pb->labels[i], err);
    for (size_t i = 0; rc == SL_OK && i < pb->n_partition_keys; i++)
        rc = sl_wh_schema_add_partition_key(s, pb->partition_keys[i], err);
    if (rc != SL_OK) {
        sl_wh_schema_destroy(s);
        /* an invalid schema read from bytes is corrupt data */
        if (rc == SL_ERR_INVALID) {
            rc = SL_ERR_CORRUPT;
            if (err != NULL) err->code = rc;
        }
        return rc;
    }
    *out = s;
    return SL_OK;
}

sl_err_t sl_wh_schema_encode(const sl_wh_schema_t *s, const sl_allocator_t *a, void **buf,
                             size_t *len, sl_error_t *err)
{
    *buf = NULL;
    *len = 0;
    sl_arena_t *arena = sl_arena_new(a, 0);
    if (arena == NULL) return sl_error_set(err, SL_ERR_NOMEM, "encode schema");
    Sluice__TableSchema pb;
    sl_err_t rc = wh_schema_to_pb(s, arena, &pb);
    if (rc != SL_OK) {
        sl_arena_destroy(arena);
        return sl_error_set(err, rc, "encode schema");
    }
    size_t n = sluice__table_schema__get_packed_size(&pb);
    if (n > UINT32_MAX) {
        sl_arena_destroy(arena);
        return sl_error_set(err, SL_ERR_TOO_LARGE, "schema of %zu bytes", n);
    }
    uint8_t *out = sl_alloc(a, WH_SCHEMA_PREFIX_BYTES + n);
    if (out == NULL) {
        sl_arena_destroy(arena);
        return sl_error_set(err, SL_ERR_NOMEM, "encode schema");
    }
    sluice__table_schema__pack(&pb, out + WH_SCHEMA_PREFIX_BYTES);
    sl_arena_destroy(arena);
    memcpy(out, SL_WH_SCHEMA_MAGIC, 4);
    sl_le_put_u32(out + 4, SL_WH_SCHEMA_VERSION);
    sl_le_put_u32(out + 8, (uint32_t)n);
    sl_le_put_u64(out + 12, XXH3_64bits(out + WH_SCHEMA_PREFIX_BYTES, n));
    *buf = out;
    *len = WH_SCHEMA_PREFIX_BYTES + n;
    return SL_OK;
}

sl_err_t sl_wh_schema_decode(const void *buf, size_t len, const sl_allocator_t *a,
                             sl_wh_schema_t **out, sl_error_t *err)
{
    *out = NULL;
    const uint8_t *p = buf;
    if (len < 4 || memcmp(p, SL_WH_SCHEMA_MAGIC, 4) != 0)
        return sl_error_set(err, len < 4 ? SL_ERR_TRUNCATED : SL_ERR_CORRUPT,
                            "not a sluice schema (magic is not \"" SL_WH_SCHEMA_MAGIC "\")");
    if (len < WH_SCHEMA_PREFIX_BYTES)
        return sl_error_set(err, SL_ERR_TRUNCATED, "schema truncated: %zu bytes", len);
    uint32_t version = sl_le_get_u32(p + 4), n = sl_le_get_u32(p + 8);
    if (version != SL_WH_SCHEMA_VERSION)
        return sl_error_set(err, SL_ERR_VERSION, "schema version %u (this build reads %d)", version,
                            SL_WH_SCHEMA_VERSION);
    if ((uint64_t)n + WH_SCHEMA_PREFIX_BYTES != len)
        return sl_error_set(
            err, n + (uint64_t)WH_SCHEMA_PREFIX_BYTES > len ? SL_ERR_TRUNCATED : SL_ERR_CORRUPT,
            "schema: prefix says %u payload bytes, file has %zu", n, len - WH_SCHEMA_PREFIX_BYTES);
    if (XXH3_64bits(p + WH_SCHEMA_PREFIX_BYTES, n) != sl_le_get_u64(p + 12))
        return sl_error_set(err, SL_ERR_CORRUPT, "schema: checksum mismatch");
    sl_unsized_t u = {.a = a};
    ProtobufCAllocator pa;
    wh_pb_allocator(&u, &pa);
    Sluice__TableSchema *pb = sluice__table_schema__unpack(&pa, n, p + WH_SCHEMA_PREFIX_BYTES);
    if (pb == NULL)
        return u.failed ? sl_error_set(err, SL_ERR_NOMEM, "schema: out of memory")
                        : sl_error_set(err, SL_ERR_CORRUPT, "schema: malformed protobuf");
    sl_err_t rc = wh_schema_from_pb(pb, a, out, err);
    sluice__table_schema__free_unpacked(pb, &pa);
    if (rc != SL_OK) sl_error_prefix(err, "schema: ");
    return rc;
}

sl_err_t sl_wh_schema_load(const char *path, const sl_allocator_t *a, sl_wh_schema_t **out,
                           sl_error_t *err)
{
    char *data;
    size_t len;
    *out = NULL;
    sl_err_t rc = sl_io_read_file(path, "schema", 64u << 20, a, &data, &len, err);
    if (rc != SL_OK) return rc;
    rc = sl_wh_schema_decode(data, len, a, out, err);
    sl_free(a, data, len + 1);
    if (rc != SL_OK) sl_error_prefix(err, "%s: ", path);
    return rc;
}

sl_err_t sl_wh_schema_save(const sl_wh_schema_t *s, const char *path, sl_error_t *err)
{
    void *data;
    size_t len;
    sl_err_t rc = sl_wh_schema_encode(s, s->a, &data, &len, err);
    if (rc != SL_OK) return rc;
    rc = wh_write_file_atomic(path, data, len, true, err);
    sl_free(s->a, data, len);
    return rc;
}

/* ---- JSON ---- */

json_t *sl_wh_schema_to_json(const sl_wh_schema_t *s)
{
    json_t *root = json_object(), *features = json_array(), *labels = json_array(),
           *cols = json_object(), *keys = json_array();
    if (root == NULL || features == NULL || labels == NULL || cols == NULL || keys == NULL) {
        json_decref(root);
        json_decref(features);
        json_decref(labels);
        json_decref(cols);
        json_decref(keys);
        return NULL;
    }
    json_object_set_new(root, "features", features);
    json_object_set_new(root, "labels", labels);
    json_object_set_new(root, "columns", cols);
    json_object_set_new(root, "partition_keys", keys);
    bool ok = true;
    for (uint32_t i = 0; i < s->nf; i++)
        ok &= json_array_append_new(features,
                                    json_pack("{s:s, s:s}", "name", s->features[i].name, "kind",
                                              sl_wh_kind_name(s->features[i].kind))) == 0;
    for (uint32_t i = 0; i < s->nl; i++)
        ok &= json_array_append_new(labels, json_string(s->labels[i])) == 0;
    ok &= json_object_set_new(cols, "sample_id", json_string(s->cols[0])) == 0;
    ok &= json_object_set_new(cols, "session_id", json_string(s->cols[1])) == 0;
    ok &= json_object_set_new(cols, "timestamp", json_string(s->cols[2])) == 0;
    for (uint32_t i = 0; i < s->nk; i++)
        ok &= json_array_append_new(keys, json_string(s->pkeys[i])) == 0;
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static sl_err_t kind_from_string(const char *k, sl_wh_kind_t *out)
{
    if (strcmp(k, "dense") == 0)
        *out = SL_WH_DENSE;
    else if (strcmp(k, "sparse") == 0)
        *out = SL_WH_SPARSE;
    else if (strcmp(k, "weighted") == 0 || strcmp(k, "weighted_sparse") == 0)
        *out = SL_WH_WEIGHTED;
    else
        return SL_ERR_INVALID;
    return SL_OK;
}

sl_err_t sl_wh_schema_from_json(const json_t *json, const sl_allocator_t *a, sl_wh_schema_t **out,
                                sl_error_t *err)
{
    *out = NULL;
    const json_t *features = json_object_get(json, "features");
    if (!json_is_object(json) || !json_is_array(features))
        return sl_error_set(err, SL_ERR_INVALID, "schema JSON: \"features\" array missing");
    sl_wh_schema_t *s = sl_wh_schema_new(a);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "schema JSON");
    sl_err_t rc = SL_OK;
    size_t i;
    const json_t *v;
    json_array_foreach(features, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *kind = json_string_value(json_object_get(v, "kind"));
        sl_wh_kind_t k;
        if (name == NULL || kind == NULL) {
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "schema JSON: features[%zu] needs string \"name\" and \"kind\"", i);
        } else if (kind_from_string(kind, &k) != SL_OK) {
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "schema JSON: feature '%s': kind '%s' is not dense, sparse or "
                              "weighted",
                              name, kind);
        } else {
            rc = sl_wh_schema_add_feature(s, name, k, err);
        }
        if (rc != SL_OK) goto fail;
    }
    const json_t *labels = json_object_get(json, "labels");
    if (labels != NULL && !json_is_array(labels)) {
        rc = sl_error_set(err, SL_ERR_INVALID, "schema JSON: \"labels\" is not an array");
        goto fail;
    }
    json_array_foreach(labels, i, v)
    {
        if (!json_is_string(v)) {
            rc = sl_error_set(err, SL_ERR_INVALID, "schema JSON: labels[%zu] is not a string", i);
            goto fail;
        }
        if ((rc = sl_wh_schema_add_label(s, json_string_value(v), err)) != SL_OK) goto fail;
    }
    const json_t *cols = json_object_get(json, "columns");
    if (cols != NULL) {
        const char *c[3] = {json_string_value(json_object_get(cols, "sample_id")),
                            json_string_value(json_object_get(cols, "session_id")),
                            json_string_value(json_object_get(cols, "timestamp"))};
        if ((rc = sl_wh_schema_set_columns(s, c[0], c[1], c[2], err)) != SL_OK) goto fail;
    }
    const json_t *keys = json_object_get(json, "partition_keys");
    json_array_foreach(keys, i, v)
    {
        if ((rc = sl_wh_schema_add_partition_key(s, json_string_value(v), err)) != SL_OK) goto fail;
    }
    *out = s;
    return SL_OK;
fail:
    sl_wh_schema_destroy(s);
    return rc;
}

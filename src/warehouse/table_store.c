/* Tables in an object store (docs/STORAGE.md, "Tables and datasets in a
 * store"): a table at s3://bucket/prefix is the same tree of keys as a
 * table directory is of files (prefix/_schema, prefix/ds=.../part-N.slc),
 * found by one paged listing of the prefix instead of a walk of
 * directories. Partitions and their files come out as table.c's scan
 * gives them for a directory, so splits, filters and fingerprints do not
 * know where the table lives. */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "wh_internal.h"

/* A schema is a few KiB; anything this large is not one. */
#define SCHEMA_MAX (64u << 20)

char *wh_table_key(const sl_wh_table_t *t, const char *rel)
{
    size_t np = strlen(t->prefix), nr = strlen(rel);
    char *k = sl_alloc(t->a, np + nr + 1);
    if (k == NULL) return NULL;
    memcpy(k, t->prefix, np);
    memcpy(k + np, rel, nr + 1);
    return k;
}

/* The prefix of a table URL's key: "" or "a/b/" (one trailing '/'). */
static char *prefix_of(const sl_allocator_t *a, const char *key)
{
    size_t n = strlen(key);
    while (n > 0 && key[n - 1] == '/')
        n--;
    char *p = sl_alloc(a, n + 2);
    if (p == NULL) return NULL;
    memcpy(p, key, n);
    if (n > 0) p[n++] = '/';
    p[n] = '\0';
    return p;
}

/* The schema object of a table, or SL_ERR_NOT_FOUND. */
static sl_err_t load_schema(sl_store_t *st, const char *key, const sl_allocator_t *a,
                            sl_wh_schema_t **out, sl_error_t *err)
{
    sl_store_info_t info;
    sl_err_t rc = sl_store_stat(st, key, &info, err);
    if (rc != SL_OK) return rc;
    if (info.size > SCHEMA_MAX)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s/%s: %llu bytes, not a schema",
                            sl_store_root(st), key, (unsigned long long)info.size);
    uint8_t *buf = sl_alloc(a, (size_t)info.size + 1);
    if (buf == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s/%s", sl_store_root(st), key);
    sl_store_range_t r = {.key = key,
                          .offset = 0,
                          .len = (size_t)info.size,
                          .buf = buf,
                          .if_match = info.etag[0] ? info.etag : NULL};
    rc = info.size ? sl_store_read_many(st, &r, 1, err) : SL_OK;
    if (rc == SL_OK) {
        rc = sl_wh_schema_decode(buf, (size_t)info.size, a, out, err);
        if (rc != SL_OK) sl_error_prefix(err, "%s/%s: ", sl_store_root(st), key);
    }
    sl_free(a, buf, (size_t)info.size + 1);
    return rc;
}

typedef struct listing {
    const sl_allocator_t *a;
    size_t skip; /* the prefix's length */
    char **keys; /* relative to the table */
    sl_store_info_t *infos;
    size_t n, cap;
} listing_t;

static sl_err_t on_key(void *ctx, const char *key, const sl_store_info_t *info)
{
    listing_t *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        char **k = sl_alloc(l->a, cap * sizeof *k);
        sl_store_info_t *in = sl_alloc(l->a, cap * sizeof *in);
        if (k == NULL || in == NULL) {
            sl_free(l->a, k, cap * sizeof *k);
            sl_free(l->a, in, cap * sizeof *in);
            return SL_ERR_NOMEM;
        }
        if (l->n) memcpy(k, l->keys, l->n * sizeof *k);
        if (l->n) memcpy(in, l->infos, l->n * sizeof *in);
        sl_free(l->a, l->keys, l->cap * sizeof *k);
        sl_free(l->a, l->infos, l->cap * sizeof *in);
        l->keys = k;
        l->infos = in;
        l->cap = cap;
    }
    if ((l->keys[l->n] = sl_strdup(l->a, key + l->skip)) == NULL) return SL_ERR_NOMEM;
    l->infos[l->n++] = *info;
    return SL_OK;
}

static void listing_free(listing_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        sl_strfree(l->a, l->keys[i]);
    sl_free(l->a, l->keys, l->cap * sizeof *l->keys);
    sl_free(l->a, l->infos, l->cap * sizeof *l->infos);
}

/* Whether some '/'-separated component of rel starts with '.' or '_' (what
 * a directory scan skips: temporary files, markers, the schema). */
static bool hidden(const char *rel)
{
    for (const char *c = rel;; c++) {
        if (*c == '.' || *c == '_') return true;
        if ((c = strchr(c, '/')) == NULL) return false;
    }
}

/* Put the data file rel (a key relative to the table) into its partition,
 * checking its directories as table.c's scan does. *last is the partition
 * the previous file went to (files of one partition mostly come together
 * in key order). */
static sl_err_t add_key(sl_wh_table_t *t, const char *rel, int64_t *last, sl_error_t *err)
{
    const char *slash = strrchr(rel, '/');
    size_t dlen = slash ? (size_t)(slash - rel) : 0;
    char dir[1024];
    if (dlen >= sizeof dir)
        return sl_error_set(err, SL_ERR_INVALID, "table %s: key '%s' is too long", t->dir, rel);
    memcpy(dir, rel, dlen);
    dir[dlen] = '\0';
    if (*last >= 0 && strcmp(t->parts[*last].p.name, dir) == 0)
        return wh_table_add_file(t, &t->parts[*last], rel, err);
    for (uint32_t i = 0; i < t->nparts; i++)
        if (strcmp(t->parts[i].p.name, dir) == 0) {
            *last = i;
            return wh_table_add_file(t, &t->parts[i], rel, err);
        }
    /* A new partition: check and split its components. */
    uint32_t nk = sl_wh_schema_num_partition_keys(t->schema), depth = 0;
    static const uint32_t KEYCAP = 80;
    char keybuf[WH_TABLE_MAX_DEPTH][80], *keys[WH_TABLE_MAX_DEPTH + 1],
        *vals[WH_TABLE_MAX_DEPTH + 1];
    char comp[sizeof dir];
    memcpy(comp, dir, dlen + 1);
    for (char *c = dlen ? comp : NULL; c != NULL;) {
        char *end = strchr(c, '/');
        if (end) *end = '\0';
        const char *val;
        size_t vlen;
        if (depth >= WH_TABLE_MAX_DEPTH)
            return sl_error_set(err, SL_ERR_INVALID, "table %s: '%s' nests too deep", t->dir, dir);
        if (!wh_table_split_kv(c, strlen(c), keybuf[depth], KEYCAP, &val, &vlen))
            return sl_error_set(err, SL_ERR_INVALID,
                                "table %s: directory '%s' of '%s' is not a KEY=VALUE partition",
                                t->dir, c, rel);
        if (nk > 0 &&
            (depth >= nk || strcmp(keybuf[depth], sl_wh_schema_partition_key(t->schema, depth))))
            return sl_error_set(err, SL_ERR_INVALID,
                                "table %s: partition '%s' does not follow the schema's "
                                "partition keys",
                                t->dir, dir);
        keys[depth] = keybuf[depth];
        vals[depth] = (char *)val;
        depth++;
        c = end ? end + 1 : NULL;
    }
    if (nk > 0 && depth != nk)
        return sl_error_set(
            err, SL_ERR_INVALID, "table %s: data file '%s' is outside a partition of keys '%s'%s",
            t->dir, rel, sl_wh_schema_partition_key(t->schema, 0), nk > 1 ? ", ..." : "");
    wh_part_t *p;
    SL_FORWARD_IF_ERROR(wh_table_add_part(t, dir, depth, keys, vals, &p, err));
    *last = (int64_t)t->nparts - 1;
    return wh_table_add_file(t, p, rel, err);
}

/* Keep what the listing said of the data file rel (in key order, so the
 * array stays sorted by rel). */
static sl_err_t keep_object(sl_wh_table_t *t, const char *rel, const sl_store_info_t *info,
                            sl_error_t *err)
{
    if (t->nobjs == t->cap_objs) {
        uint32_t cap = t->cap_objs ? 2 * t->cap_objs : 64;
        wh_table_obj_t *o =
            sl_realloc(t->a, t->objs, (size_t)t->cap_objs * sizeof *o, (size_t)cap * sizeof *o);
        if (o == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
        t->objs = o;
        t->cap_objs = cap;
    }
    const char *copy = sl_arena_strdup(t->arena, rel);
    if (copy == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    t->objs[t->nobjs++] = (wh_table_obj_t){.rel = copy, .info = *info};
    return SL_OK;
}

static int by_rel(const void *k, const void *o)
{
    return strcmp((const char *)k, ((const wh_table_obj_t *)o)->rel);
}

const sl_store_info_t *wh_table_object(const sl_wh_table_t *t, const char *rel)
{
    const wh_table_obj_t *o = t->nobjs ? bsearch(rel, t->objs, t->nobjs, sizeof *o, by_rel) : NULL;
    return o ? &o->info : NULL;
}

sl_err_t wh_table_open_store(sl_wh_table_t *t, const sl_store_opts_t *store, sl_error_t *err)
{
    sl_store_opts_t so = store ? *store : (sl_store_opts_t){0};
    so.alloc = t->a;
    char *key = NULL;
    sl_err_t rc = sl_store_open_url(t->dir, &so, &t->store, &key, err);
    if (rc != SL_OK) return rc;
    t->prefix = prefix_of(t->a, key);
    sl_strfree(t->a, key);
    if (t->prefix == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    char *skey = wh_table_key(t, SL_WH_SCHEMA_FILE);
    if (skey == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    rc = load_schema(t->store, skey, t->a, &t->schema, err);
    sl_strfree(t->a, skey);
    if (rc != SL_OK) {
        sl_error_prefix(err, "table %s: ", t->dir);
        return rc;
    }
    listing_t l = {.a = t->a, .skip = strlen(t->prefix)};
    rc = sl_store_list(t->store, t->prefix, on_key, &l, err);
    if (rc == SL_ERR_NOMEM) sl_error_set(err, rc, "table %s: listing", t->dir);
    int64_t last = -1;
    for (size_t i = 0; rc == SL_OK && i < l.n; i++) {
        const char *rel = l.keys[i];
        const char *base = strrchr(rel, '/');
        base = base ? base + 1 : rel;
        /* other objects (not *.slc) are not the table's business */
        if (hidden(rel) || !wh_table_has_ext(base)) continue;
        rc = add_key(t, rel, &last, err);
        if (rc == SL_OK) rc = keep_object(t, rel, &l.infos[i], err);
    }
    listing_free(&l);
    return rc;
}

sl_err_t wh_table_create_store(const char *url, const sl_wh_schema_t *schema, sl_error_t *err)
{
    const sl_allocator_t *a = sl_allocator_default();
    sl_store_opts_t so = {.alloc = a};
    sl_store_t *st;
    char *key;
    sl_err_t rc = sl_store_open_url(url, &so, &st, &key, err);
    if (rc != SL_OK) return rc;
    sl_wh_table_t t = {.a = a, .dir = (char *)url, .prefix = prefix_of(a, key)};
    char *skey = t.prefix ? wh_table_key(&t, SL_WH_SCHEMA_FILE) : NULL;
    if (skey == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "create table %s", url);
    } else {
        sl_wh_schema_t *old = NULL;
        sl_error_t e2 = {0};
        rc = load_schema(st, skey, a, &old, &e2);
        if (rc == SL_OK) {
            if (!sl_wh_schema_equal(old, schema))
                rc = sl_error_set(err, SL_ERR_INVALID,
                                  "create table %s: it exists with another schema", url);
        } else if (rc == SL_ERR_NOT_FOUND) {
            void *data;
            size_t len;
            rc = sl_wh_schema_encode(schema, a, &data, &len, err);
            if (rc == SL_OK) {
                rc = sl_store_put(st, skey, data, len, err);
                sl_free(a, data, len);
            }
        } else if (err != NULL) {
            *err = e2;
        }
        sl_wh_schema_destroy(old);
    }
    sl_strfree(a, skey);
    sl_strfree(a, t.prefix);
    sl_strfree(a, key);
    sl_store_destroy(st);
    return rc;
}

sl_err_t wh_table_open_files(const sl_wh_table_t *t, uint32_t n, const char *const *rels,
                             wh_file_t **out, sl_error_t *err)
{
    char **keys = sl_calloc(t->a, (size_t)n + 1, sizeof *keys);
    const sl_store_info_t **known = sl_calloc(t->a, (size_t)n + 1, sizeof *known);
    sl_err_t rc = keys && known ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    for (uint32_t i = 0; i < n && rc == SL_OK; i++) {
        keys[i] = wh_table_key(t, rels[i]);
        known[i] = wh_table_object(t, rels[i]);
        if (keys[i] == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    }
    if (rc == SL_OK)
        rc = wh_files_open_store(t->store, n, (const char *const *)keys, rels,
                                 (const sl_store_info_t *const *)known, NULL, t->a, out, err);
    for (uint32_t i = 0; keys != NULL && i < n; i++)
        sl_strfree(t->a, keys[i]);
    sl_free(t->a, keys, ((size_t)n + 1) * sizeof *keys);
    sl_free(t->a, known, ((size_t)n + 1) * sizeof *known);
    return rc;
}

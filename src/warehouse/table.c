/* Tables as directories: create (schema file), open (list Hive partitions
 * and data files), partition filters, splits (file, stripe range), and the
 * helpers that open a writer or a reader inside a table. */
#include "wh_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_DEPTH WH_TABLE_MAX_DEPTH

/* ---- partition names ---- */

static bool value_ok(const char *v, size_t n)
{
    if (n == 0 || (n == 1 && v[0] == '.') || (n == 2 && v[0] == '.' && v[1] == '.')) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c < 0x20 || c == 0x7f || c == '/') return false;
    }
    return true;
}

/* Split "k=v" (n bytes) into key/value; false when malformed. */
bool wh_table_split_kv(const char *s, size_t n, char *key, size_t keycap, const char **val,
                       size_t *vlen)
{
    const char *eq = memchr(s, '=', n);
    if (eq == NULL || (size_t)(eq - s) >= keycap) return false;
    memcpy(key, s, (size_t)(eq - s));
    key[eq - s] = '\0';
    *val = eq + 1;
    *vlen = n - (size_t)(eq - s) - 1;
    return wh_partition_key_ok(key) && value_ok(*val, *vlen);
}

sl_err_t sl_wh_partition_check(const sl_wh_schema_t *s, const char *partition, sl_error_t *err)
{
    if (partition == NULL) partition = "";
    uint32_t nk = s ? sl_wh_schema_num_partition_keys(s) : 0, depth = 0;
    const char *p = partition;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        char key[80];
        const char *val;
        size_t vlen;
        if (!wh_table_split_kv(p, n, key, sizeof key, &val, &vlen))
            return sl_error_set(
                err, SL_ERR_INVALID,
                "partition '%s': '%.*s' is not KEY=VALUE (KEY [A-Za-z_][A-Za-z0-9_]*, "
                "VALUE non-empty without '/' or control characters)",
                partition, (int)n, p);
        if (nk > 0 && (depth >= nk || strcmp(key, sl_wh_schema_partition_key(s, depth)) != 0))
            return sl_error_set(err, SL_ERR_INVALID,
                                "partition '%s': key %u is '%s', the schema's partition keys are "
                                "'%s'%s",
                                partition, depth, key, sl_wh_schema_partition_key(s, 0),
                                nk > 1 ? ", ..." : "");
        if (++depth > MAX_DEPTH)
            return sl_error_set(err, SL_ERR_INVALID, "partition '%s': too deep", partition);
        p += n;
        if (*p == '/') {
            p++;
            if (*p == '\0')
                return sl_error_set(err, SL_ERR_INVALID, "partition '%s' ends with '/'", partition);
        }
    }
    if (nk > 0 && depth != nk)
        return sl_error_set(err, SL_ERR_INVALID, "partition '%s' has %u keys, the schema has %u",
                            partition, depth, nk);
    return SL_OK;
}

/* ---- create / open ---- */

static char *join(const sl_allocator_t *a, const char *x, const char *y)
{
    size_t nx = strlen(x), ny = strlen(y);
    char *p = sl_alloc(a, nx + ny + 2);
    if (p == NULL) return NULL;
    memcpy(p, x, nx);
    size_t at = nx;
    if (nx > 0 && ny > 0 && x[nx - 1] != '/') p[at++] = '/';
    memcpy(p + at, y, ny + 1);
    return p;
}

static void join_free(const sl_allocator_t *a, char *p)
{
    sl_strfree(a, p);
}

sl_err_t sl_wh_table_create(const char *dir, const sl_wh_schema_t *schema, sl_error_t *err)
{
    if (sl_store_is_remote(dir)) return wh_table_create_store(dir, schema, err);
    const sl_allocator_t *a = sl_allocator_default();
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return sl_error_set(err, SL_ERR_IO, "create table %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sl_error_set(err, SL_ERR_INVALID, "create table %s: not a directory", dir);
    char *path = join(a, dir, SL_WH_SCHEMA_FILE);
    if (path == NULL) return sl_error_set(err, SL_ERR_NOMEM, "create table %s", dir);
    sl_err_t rc;
    if (stat(path, &st) == 0) {
        sl_wh_schema_t *old;
        rc = sl_wh_schema_load(path, a, &old, err);
        if (rc == SL_OK) {
            if (!sl_wh_schema_equal(old, schema))
                rc = sl_error_set(err, SL_ERR_INVALID,
                                  "create table %s: it exists with another schema", dir);
            sl_wh_schema_destroy(old);
        }
    } else {
        rc = sl_wh_schema_save(schema, path, err);
    }
    join_free(a, path);
    return rc;
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

sl_err_t wh_table_add_part(sl_wh_table_t *t, const char *rel, uint32_t depth, char **keys,
                           char **vals, wh_part_t **out, sl_error_t *err)
{
    if (t->nparts == t->cap_parts) {
        uint32_t cap = t->cap_parts ? t->cap_parts * 2 : 16;
        wh_part_t *p = sl_alloc(t->a, sl_mul_size(cap, sizeof *p));
        if (p == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
        if (t->nparts) memcpy(p, t->parts, (size_t)t->nparts * sizeof *p);
        sl_free(t->a, t->parts, (size_t)t->cap_parts * sizeof *p);
        t->parts = p;
        t->cap_parts = cap;
    }
    wh_part_t *p = &t->parts[t->nparts];
    memset(p, 0, sizeof *p);
    p->p.name = sl_arena_strdup(t->arena, rel);
    p->p.num_keys = depth;
    const char **k = sl_arena_alloc(t->arena, ((size_t)depth + 1) * sizeof(char *));
    const char **v = sl_arena_alloc(t->arena, ((size_t)depth + 1) * sizeof(char *));
    if (p->p.name == NULL || k == NULL || v == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    for (uint32_t i = 0; i < depth; i++) {
        k[i] = sl_arena_strdup(t->arena, keys[i]);
        v[i] = sl_arena_strdup(t->arena, vals[i]);
        if (k[i] == NULL || v[i] == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    }
    p->p.keys = k;
    p->p.values = v;
    t->nparts++;
    *out = p;
    return SL_OK;
}

sl_err_t wh_table_add_file(sl_wh_table_t *t, wh_part_t *here, const char *sub, sl_error_t *err)
{
    const char *copy = sl_arena_strdup(t->arena, sub);
    if (copy == NULL || (here->p.num_files == here->cap_files && here->cap_files >= (1u << 30)))
        return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    if (here->p.num_files == here->cap_files) {
        uint32_t c = here->cap_files ? here->cap_files * 2 : 8;
        const char **f = sl_arena_alloc(t->arena, (size_t)c * sizeof(char *));
        if (f == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
        if (here->p.num_files) memcpy(f, here->p.files, here->p.num_files * sizeof(char *));
        here->p.files = f;
        here->cap_files = c;
    }
    ((const char **)here->p.files)[here->p.num_files++] = copy;
    return SL_OK;
}

bool wh_table_has_ext(const char *name)
{
    size_t n = strlen(name), e = strlen(SL_WH_FILE_EXT);
    return n > e && strcmp(name + n - e, SL_WH_FILE_EXT) == 0;
}

/* List directory rel (relative to the table) and recurse into partitions. */
static sl_err_t scan(sl_wh_table_t *t, const char *rel, uint32_t depth, char **keys, char **vals,
                     sl_error_t *err)
{
    const sl_allocator_t *a = t->a;
    char *path = join(a, t->dir, rel);
    if (path == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    DIR *d = opendir(path);
    if (d == NULL) {
        sl_err_t rc = sl_error_set(err, errno == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO,
                                   "table %s: list %s: %s", t->dir, path, strerror(errno));
        join_free(a, path);
        return rc;
    }
    /* names, sorted, so listings are deterministic */
    uint32_t n = 0, cap = 64;
    char **names = sl_alloc(a, cap * sizeof(char *));
    sl_err_t rc = names ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
    struct dirent *e;
    while (rc == SL_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_name[0] == '_') continue;
        if (n == cap) {
            char **bigger = sl_alloc(a, (size_t)cap * 2 * sizeof(char *));
            if (bigger == NULL) {
                rc = sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
                break;
            }
            memcpy(bigger, names, (size_t)cap * sizeof(char *));
            sl_free(a, names, (size_t)cap * sizeof(char *));
            names = bigger;
            cap *= 2;
        }
        if ((names[n] = sl_strdup(a, e->d_name)) == NULL)
            rc = sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
        else
            n++;
    }
    closedir(d);
    if (rc == SL_OK) qsort(names, n, sizeof(char *), cmp_str);
    uint32_t nk = sl_wh_schema_num_partition_keys(t->schema);
    wh_part_t *here = NULL;
    uint32_t here_index = 0;
    for (uint32_t i = 0; rc == SL_OK && i < n; i++) {
        char *full = join(a, path, names[i]);
        char *sub = join(a, rel, names[i]);
        struct stat st;
        if (full == NULL || sub == NULL) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "table %s", t->dir);
        } else if (stat(full, &st) != 0) {
            rc =
                sl_error_set(err, SL_ERR_IO, "table %s: stat %s: %s", t->dir, sub, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            char key[80];
            const char *val;
            size_t vlen;
            if (!wh_table_split_kv(names[i], strlen(names[i]), key, sizeof key, &val, &vlen))
                rc = sl_error_set(err, SL_ERR_INVALID,
                                  "table %s: directory '%s' is not a KEY=VALUE partition", t->dir,
                                  sub);
            else if (depth >= MAX_DEPTH)
                rc =
                    sl_error_set(err, SL_ERR_INVALID, "table %s: '%s' nests too deep", t->dir, sub);
            else if (nk > 0 &&
                     (depth >= nk || strcmp(key, sl_wh_schema_partition_key(t->schema, depth))))
                rc = sl_error_set(err, SL_ERR_INVALID,
                                  "table %s: partition '%s' does not follow the schema's "
                                  "partition keys",
                                  t->dir, sub);
            else {
                keys[depth] = key;
                vals[depth] = (char *)val;
                rc = scan(t, sub, depth + 1, keys, vals, err);
            }
        } else if (S_ISREG(st.st_mode) && wh_table_has_ext(names[i])) {
            if (nk > 0 && depth != nk) {
                rc = sl_error_set(err, SL_ERR_INVALID,
                                  "table %s: data file '%s' is outside a partition of keys '%s'%s",
                                  t->dir, sub, sl_wh_schema_partition_key(t->schema, 0),
                                  nk > 1 ? ", ..." : "");
            } else {
                if (here == NULL) {
                    rc = wh_table_add_part(t, rel, depth, keys, vals, &here, err);
                    here_index = t->nparts - 1;
                }
                here = rc == SL_OK ? &t->parts[here_index] : NULL;
                if (here != NULL) rc = wh_table_add_file(t, here, sub, err);
            }
        }
        /* other files (not *.slc) are not the table's business */
        join_free(a, full);
        join_free(a, sub);
    }
    for (uint32_t i = 0; i < n; i++)
        sl_strfree(a, names[i]);
    sl_free(a, names, (size_t)cap * sizeof(char *));
    join_free(a, path);
    return rc;
}

static int cmp_part(const void *x, const void *y)
{
    return strcmp(((const wh_part_t *)x)->p.name, ((const wh_part_t *)y)->p.name);
}

sl_err_t sl_wh_table_open(const char *dir, const sl_allocator_t *a, sl_wh_table_t **out,
                          sl_error_t *err)
{
    return sl_wh_table_open_with(dir, NULL, a, out, err);
}

sl_err_t sl_wh_table_open_with(const char *dir, const struct sl_store_opts *store,
                               const sl_allocator_t *a, sl_wh_table_t **out, sl_error_t *err)
{
    *out = NULL;
    if (a == NULL) a = sl_allocator_default();
    sl_wh_table_t *t = sl_calloc(a, 1, sizeof *t);
    if (t == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s", dir);
    t->a = a;
    t->dir = sl_strdup(a, dir);
    t->arena = sl_arena_new(a, 0);
    sl_err_t rc = SL_OK;
    if (t->dir == NULL || t->arena == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "table %s", dir);
        goto fail;
    }
    if (sl_store_is_remote(dir)) {
        if ((rc = wh_table_open_store(t, store, err)) != SL_OK) goto fail;
        if (t->nparts > 1) qsort(t->parts, t->nparts, sizeof *t->parts, cmp_part);
        *out = t;
        return SL_OK;
    }
    char *path = join(a, dir, SL_WH_SCHEMA_FILE);
    if (path == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "table %s", dir);
        goto fail;
    }
    rc = sl_wh_schema_load(path, a, &t->schema, err);
    join_free(a, path);
    if (rc != SL_OK) {
        sl_error_prefix(err, "table %s: ", dir);
        goto fail;
    }
    char *keys[MAX_DEPTH + 1], *vals[MAX_DEPTH + 1];
    if ((rc = scan(t, "", 0, keys, vals, err)) != SL_OK) goto fail;
    if (t->nparts > 1) qsort(t->parts, t->nparts, sizeof *t->parts, cmp_part);
    *out = t;
    return SL_OK;
fail:
    sl_wh_table_close(t);
    return rc;
}

void sl_wh_table_close(sl_wh_table_t *t)
{
    if (t == NULL) return;
    sl_wh_schema_destroy(t->schema);
    sl_arena_destroy(t->arena);
    sl_free(t->a, t->parts, (size_t)t->cap_parts * sizeof *t->parts);
    sl_store_destroy(t->store);
    sl_strfree(t->a, t->prefix);
    sl_free(t->a, t->objs, (size_t)t->cap_objs * sizeof *t->objs);
    sl_strfree(t->a, t->dir);
    sl_free(t->a, t, sizeof *t);
}

const char *sl_wh_table_dir(const sl_wh_table_t *t)
{
    return t->dir;
}
sl_store_t *sl_wh_table_store(const sl_wh_table_t *t)
{
    return t->store;
}
const sl_wh_schema_t *sl_wh_table_schema(const sl_wh_table_t *t)
{
    return t->schema;
}
uint32_t sl_wh_table_num_partitions(const sl_wh_table_t *t)
{
    return t->nparts;
}
const sl_wh_partition_t *sl_wh_table_partition(const sl_wh_table_t *t, uint32_t i)
{
    return i < t->nparts ? &t->parts[i].p : NULL;
}

sl_err_t sl_wh_table_writer_open(const sl_wh_table_t *t, const char *partition,
                                 const char *file_name, const sl_wh_writer_opts_t *opts,
                                 sl_wh_writer_t **out, sl_error_t *err)
{
    *out = NULL;
    if (partition == NULL) partition = "";
    sl_err_t rc = sl_wh_partition_check(t->schema, partition, err);
    if (rc != SL_OK) return rc;
    if (file_name == NULL || strchr(file_name, '/') != NULL || file_name[0] == '.' ||
        file_name[0] == '_' || !wh_table_has_ext(file_name))
        return sl_error_set(err, SL_ERR_INVALID,
                            "data file name '%s' must end in " SL_WH_FILE_EXT
                            " and hold no '/' nor start with '.' or '_'",
                            file_name ? file_name : "(null)");
    if (t->store != NULL)
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "table %s: files are written to a table in an object store by "
                            "`sluice table import`, not in place",
                            t->dir);
    const sl_allocator_t *a = t->a;
    char *dir = join(a, t->dir, partition);
    if (dir == NULL) return sl_error_set(err, SL_ERR_NOMEM, "writer");
    /* mkdir -p, one component at a time */
    size_t base = strlen(t->dir);
    for (char *p = dir + base + 1; rc == SL_OK && *partition; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(dir, 0755) != 0 && errno != EEXIST)
                rc = sl_error_set(err, SL_ERR_IO, "mkdir %s: %s", dir, strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
    char *path = rc == SL_OK ? join(a, dir, file_name) : NULL;
    if (rc == SL_OK && path == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "writer");
    if (rc == SL_OK) rc = sl_wh_writer_open(path, t->schema, opts, out, err);
    join_free(a, path);
    join_free(a, dir);
    return rc;
}

/* ---- filters ---- */

typedef enum { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE } op_t;

typedef struct term {
    char *key, *value;
    op_t op;
} term_t;

struct sl_wh_filter {
    const sl_allocator_t *a;
    sl_arena_t *arena;
    uint32_t n;
    term_t *terms;
};

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

sl_err_t sl_wh_filter_parse(const char *text, const sl_allocator_t *a, sl_wh_filter_t **out,
                            sl_error_t *err)
{
    *out = NULL;
    if (a == NULL) a = sl_allocator_default();
    if (text == NULL) text = "";
    sl_wh_filter_t *f = sl_calloc(a, 1, sizeof *f);
    if (f == NULL || (f->arena = sl_arena_new(a, 0)) == NULL) {
        sl_free(a, f, sizeof *f);
        return sl_error_set(err, SL_ERR_NOMEM, "filter");
    }
    f->a = a;
    uint32_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    f->terms = sl_arena_calloc(f->arena, cap, sizeof *f->terms);
    if (f->terms == NULL) {
        sl_wh_filter_destroy(f);
        return sl_error_set(err, SL_ERR_NOMEM, "filter");
    }
    const char *p = text;
    bool empty = *skip_ws(p, p + strlen(p)) == '\0';
    while (!empty) {
        const char *end = strchr(p, ',');
        if (end == NULL) end = p + strlen(p);
        const char *k = skip_ws(p, end), *ke = k;
        while (ke < end && ((*ke >= 'A' && *ke <= 'Z') || (*ke >= 'a' && *ke <= 'z') ||
                            (*ke >= '0' && *ke <= '9') || *ke == '_'))
            ke++;
        const char *o = skip_ws(ke, end);
        op_t op;
        size_t oplen = 1;
        if (o + 1 < end && o[0] == '!' && o[1] == '=')
            op = OP_NE, oplen = 2;
        else if (o + 1 < end && o[0] == '<' && o[1] == '=')
            op = OP_LE, oplen = 2;
        else if (o + 1 < end && o[0] == '>' && o[1] == '=')
            op = OP_GE, oplen = 2;
        else if (o + 1 < end && o[0] == '=' && o[1] == '=')
            op = OP_EQ, oplen = 2;
        else if (o < end && o[0] == '=')
            op = OP_EQ;
        else if (o < end && o[0] == '<')
            op = OP_LT;
        else if (o < end && o[0] == '>')
            op = OP_GT;
        else
            op = (op_t)-1;
        const char *v = o + ((int)op >= 0 ? oplen : 0), *ve = end;
        v = skip_ws(v, end);
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        char key[80];
        if (ke == k || (size_t)(ke - k) >= sizeof key || (int)op < 0 || ve == v) {
            sl_error_set(err, SL_ERR_INVALID,
                         "filter '%s': '%.*s' is not KEY OP VALUE (OP one of = != < <= > >=)", text,
                         (int)(end - p), p);
            sl_wh_filter_destroy(f);
            return SL_ERR_INVALID;
        }
        memcpy(key, k, (size_t)(ke - k));
        key[ke - k] = '\0';
        if (!wh_partition_key_ok(key)) {
            sl_error_set(err, SL_ERR_INVALID, "filter '%s': bad key '%s'", text, key);
            sl_wh_filter_destroy(f);
            return SL_ERR_INVALID;
        }
        term_t *t = &f->terms[f->n++];
        t->key = sl_arena_strdup(f->arena, key);
        t->value = sl_arena_alloc(f->arena, (size_t)(ve - v) + 1);
        if (t->key == NULL || t->value == NULL) {
            sl_wh_filter_destroy(f);
            return sl_error_set(err, SL_ERR_NOMEM, "filter");
        }
        memcpy(t->value, v, (size_t)(ve - v));
        t->value[ve - v] = '\0';
        t->op = op;
        if (*end == '\0') break;
        p = end + 1;
    }
    *out = f;
    return SL_OK;
}

void sl_wh_filter_destroy(sl_wh_filter_t *f)
{
    if (f == NULL) return;
    sl_arena_destroy(f->arena);
    sl_free(f->a, f, sizeof *f);
}

static bool parse_int(const char *s, long long *out)
{
    if (*s == '\0') return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || errno != 0) return false;
    *out = v;
    return true;
}

static int compare(const char *a, const char *b)
{
    long long x, y;
    if (parse_int(a, &x) && parse_int(b, &y)) return (x > y) - (x < y);
    int c = strcmp(a, b);
    return (c > 0) - (c < 0);
}

bool sl_wh_filter_match(const sl_wh_filter_t *f, const sl_wh_partition_t *p)
{
    if (f == NULL) return true;
    for (uint32_t i = 0; i < f->n; i++) {
        const term_t *t = &f->terms[i];
        const char *v = NULL;
        for (uint32_t k = 0; k < p->num_keys && v == NULL; k++)
            if (strcmp(p->keys[k], t->key) == 0) v = p->values[k];
        if (v == NULL) return false;
        int c = compare(v, t->value);
        bool ok;
        switch (t->op) {
        case OP_EQ:
            ok = c == 0;
            break;
        case OP_NE:
            ok = c != 0;
            break;
        case OP_LT:
            ok = c < 0;
            break;
        case OP_LE:
            ok = c <= 0;
            break;
        case OP_GT:
            ok = c > 0;
            break;
        default:
            ok = c >= 0;
            break;
        }
        if (!ok) return false;
    }
    return true;
}

/* ---- splits ---- */

sl_err_t sl_wh_table_splits(const sl_wh_table_t *t, const sl_wh_filter_t *filter,
                            uint32_t stripes_per_split, sl_wh_splits_t **out, sl_error_t *err)
{
    *out = NULL;
    if (stripes_per_split == 0) stripes_per_split = 1;
    const sl_allocator_t *a = t->a;
    sl_arena_t *arena = sl_arena_new(a, 0);
    sl_wh_splits_t *res = arena ? sl_arena_calloc(arena, 1, sizeof *res) : NULL;
    if (res == NULL) {
        sl_arena_destroy(arena);
        return sl_error_set(err, SL_ERR_NOMEM, "splits");
    }
    res->arena = arena;
    uint32_t cap = 0;
    sl_err_t rc = SL_OK;
    /* A table in a store opens its files BATCH at a time, their footers
     * fetched in parallel (one round trip per batch, not per file). */
    enum { BATCH = 64 };
    wh_file_t *batch[BATCH] = {0};
    uint32_t bbase = 0, bn = 0;
    for (uint32_t pi = 0; rc == SL_OK && pi < t->nparts; pi++) {
        const sl_wh_partition_t *p = &t->parts[pi].p;
        if (!sl_wh_filter_match(filter, p)) continue;
        bbase = bn = 0;
        for (uint32_t fi = 0; rc == SL_OK && fi < p->num_files; fi++) {
            wh_file_t *f = NULL;
            if (t->store != NULL) {
                if (fi >= bbase + bn) {
                    bbase = fi;
                    bn = p->num_files - fi < BATCH ? p->num_files - fi : BATCH;
                    if ((rc = wh_table_open_files(t, bn, p->files + fi, batch, err)) != SL_OK) {
                        bn = 0;
                        break;
                    }
                }
                f = batch[fi - bbase];
                batch[fi - bbase] = NULL;
            } else {
                char *path = join(a, t->dir, p->files[fi]);
                rc = path ? wh_file_open(path, NULL, 0, p->files[fi], NULL, a, &f, err)
                          : sl_error_set(err, SL_ERR_NOMEM, "splits");
                join_free(a, path);
            }
            if (rc != SL_OK) break;
            res->files++;
            /* the strings must outlive the table: copies in the splits' arena */
            const char *fpath = sl_arena_strdup(arena, p->files[fi]);
            const char *fpart = sl_arena_strdup(arena, p->name);
            if (fpath == NULL || fpart == NULL) {
                wh_file_close(f);
                rc = sl_error_set(err, SL_ERR_NOMEM, "splits");
                break;
            }
            for (uint32_t s = 0; s < f->num_stripes; s += stripes_per_split) {
                if (res->count == cap) {
                    uint32_t ncap = cap ? cap * 2 : 64;
                    sl_wh_split_t *items = sl_arena_alloc(arena, (size_t)ncap * sizeof *items);
                    if (items == NULL) {
                        rc = sl_error_set(err, SL_ERR_NOMEM, "splits");
                        break;
                    }
                    if (res->count) memcpy(items, res->items, (size_t)res->count * sizeof *items);
                    res->items = items;
                    cap = ncap;
                }
                uint32_t e =
                    f->num_stripes - s < stripes_per_split ? f->num_stripes : s + stripes_per_split;
                sl_wh_split_t *sp = &res->items[res->count++];
                sp->path = fpath;
                sp->partition = fpart;
                sp->stripe_begin = s;
                sp->stripe_end = e;
                sp->first_row = f->stripes[s].first_row;
                sp->num_rows = 0;
                sp->bytes = 0;
                sp->footer_checksum = f->footer_checksum;
                for (uint32_t k = s; k < e; k++) {
                    sp->num_rows += f->stripes[k].rows;
                    sp->bytes += f->stripes[k].length;
                }
                res->rows += sp->num_rows;
            }
            wh_file_close(f);
        }
    }
    for (uint32_t i = 0; i < BATCH; i++) /* left by a failure */
        wh_file_close(batch[i]);
    if (rc != SL_OK) {
        sl_arena_destroy(arena);
        return rc;
    }
    *out = res;
    return SL_OK;
}

void sl_wh_splits_destroy(sl_wh_splits_t *s)
{
    if (s != NULL) sl_arena_destroy(s->arena);
}

sl_err_t wh_table_open_reader(const sl_wh_table_t *t, const char *rel,
                              const sl_wh_read_opts_t *opts, sl_wh_reader_t **out, sl_error_t *err)
{
    const sl_allocator_t *a = opts && opts->allocator ? opts->allocator : t->a;
    char *path = t->store ? wh_table_key(t, rel) : join(a, t->dir, rel);
    if (path == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: no memory for its path", rel);
    sl_err_t rc = t->store ? wh_reader_open_store(t->store, path, rel, wh_table_object(t, rel),
                                                  opts, out, err)
                           : sl_wh_reader_open(path, rel, opts, out, err);
    join_free(t->store ? t->a : a, path);
    return rc;
}

sl_err_t sl_wh_reader_open_split(const sl_wh_table_t *t, const sl_wh_split_t *split,
                                 const sl_wh_read_opts_t *opts, sl_wh_reader_t **out,
                                 sl_error_t *err)
{
    *out = NULL;
    sl_wh_reader_t *r;
    sl_err_t rc = wh_table_open_reader(t, split->path, opts, &r, err);
    if (rc != SL_OK) return rc;
    /* A file replaced since the split was planned (an object rewritten in
     * a store, a file rewritten in place) is refused, never mixed. */
    if (split->footer_checksum != 0 &&
        split->footer_checksum != wh_reader_file(r)->footer_checksum) {
        sl_wh_reader_close(r);
        return sl_error_set(err, SL_ERR_VERSION,
                            "%s%s%s: the file was replaced after the job planned its splits (its "
                            "footer checksum is not the planned %016llx)",
                            t->store ? t->dir : "", t->store ? "/" : "", split->path,
                            (unsigned long long)split->footer_checksum);
    }
    sl_wh_stripe_info_t info;
    if (split->stripe_end > sl_wh_reader_num_stripes(r) ||
        split->stripe_begin >= split->stripe_end ||
        sl_wh_reader_stripe_info(r, split->stripe_begin, &info) != SL_OK ||
        info.first_row != split->first_row) {
        sl_wh_reader_close(r);
        return sl_error_set(err, SL_ERR_INVALID,
                            "%s: split stripes [%u, %u) from row %llu do not match the file (it "
                            "changed since the split was cut?)",
                            split->path, split->stripe_begin, split->stripe_end,
                            (unsigned long long)split->first_row);
    }
    if ((rc = sl_wh_reader_set_range(r, split->stripe_begin, split->stripe_end, err)) != SL_OK) {
        sl_wh_reader_close(r);
        return rc;
    }
    *out = r;
    return SL_OK;
}

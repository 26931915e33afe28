/* The column mapping: parsing and checking the mapping object, and
 * resolving it against an input's columns into a table schema plus the
 * slot -> column table readers fill rows by (column_map.h). Every problem
 * is collected with its JSON path, so a refusal lists all there is to fix.
 * Row filling from JSON values is column_map_row.c. */
#include "warehouse/column_map.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"

#define ID_COLUMNS 3

typedef enum role { ROLE_LABEL, ROLE_DENSE, ROLE_SPARSE, ROLE_WEIGHTED } role_t;

/* One named entry of labels / dense / sparse / weighted. */
typedef struct entry {
    role_t role;
    const char *column;  /* the input column (the ids column of a pair) */
    const char *weights; /* a pair's weights column, or NULL */
    const char *name;    /* the schema name */
    bool hash;
    uint64_t seed;
    const char *path; /* "$.sparse[1]" */
} entry_t;

struct sl_wh_colmap {
    const sl_allocator_t *a;
    sl_arena_t *arena;
    const char *ids[ID_COLUMNS]; /* sample_id, session_id, timestamp columns, or NULL */
    const char *id_path[ID_COLUMNS];
    entry_t *entries;
    uint32_t num_entries, cap_entries;
    const char **named; /* every column named, once, in mapping order */
    uint32_t num_named, cap_named;
    bool infer;
};

static const char *const ID_KEYS[ID_COLUMNS] = {"sample_id", "session_id", "timestamp"};

const char *sl_wh_coltype_name(sl_wh_coltype_t t)
{
    switch (t) {
    case SL_WH_COLTYPE_ANY:
        return "any";
    case SL_WH_COLTYPE_INT:
        return "int";
    case SL_WH_COLTYPE_FLOAT:
        return "float";
    case SL_WH_COLTYPE_BOOL:
        return "bool";
    case SL_WH_COLTYPE_STRING:
        return "string";
    case SL_WH_COLTYPE_LIST_INT:
        return "list<int>";
    case SL_WH_COLTYPE_LIST_FLOAT:
        return "list<float>";
    case SL_WH_COLTYPE_LIST_STRING:
        return "list<string>";
    case SL_WH_COLTYPE_LIST_WEIGHTED:
        return "list<struct{id,weight}>";
    }
    return "?";
}

/* ---- problems ---- */

typedef struct problems {
    sl_wh_colmap_problem_fn fn;
    void *ctx;
    uint32_t count;
    char text[SL_ERROR_MSG_MAX]; /* as many as fit, "; "-separated */
    uint32_t in_text;
    bool nomem;
} problems_t;

static void problem(problems_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(problems_t *p, const char *fmt, ...)
{
    char msg[SL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->count++;
    if (p->fn != NULL) p->fn(p->ctx, msg);
    size_t used = strlen(p->text), need = strlen(msg) + (used ? 2 : 0);
    /* Room is kept for the " (and N more problems)" tail. */
    if (used + need + 32 < sizeof p->text) {
        snprintf(p->text + used, sizeof p->text - used, "%s%s", used ? "; " : "", msg);
        p->in_text++;
    }
}

static sl_err_t problems_error(const problems_t *p, sl_error_t *err)
{
    if (p->nomem) return sl_error_set(err, SL_ERR_NOMEM, "column mapping: out of memory");
    if (p->count == p->in_text)
        return sl_error_set(err, SL_ERR_INVALID, "column mapping: %s", p->text);
    return sl_error_set(err, SL_ERR_INVALID, "column mapping: %s (and %u more problems)", p->text,
                        p->count - p->in_text);
}

static const char *jtype(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* ---- parse ---- */

static const char *path_fmt(sl_wh_colmap_t *m, problems_t *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const char *path_fmt(sl_wh_colmap_t *m, problems_t *p, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *s = sl_arena_strdup(m->arena, buf);
    if (s == NULL) p->nomem = true;
    return s != NULL ? s : "$";
}

static void add_named(sl_wh_colmap_t *m, problems_t *p, const char *column)
{
    for (uint32_t i = 0; i < m->num_named; i++)
        if (strcmp(m->named[i], column) == 0) return;
    if (m->num_named == m->cap_named) {
        uint32_t cap = m->cap_named ? m->cap_named * 2 : 16;
        const char **n = sl_arena_alloc(m->arena, cap * sizeof *n);
        if (n == NULL) {
            p->nomem = true;
            return;
        }
        if (m->num_named) memcpy(n, m->named, m->num_named * sizeof *n);
        m->named = n;
        m->cap_named = cap;
    }
    m->named[m->num_named++] = column;
}

static entry_t *add_entry(sl_wh_colmap_t *m, problems_t *p)
{
    if (m->num_entries == m->cap_entries) {
        uint32_t cap = m->cap_entries ? m->cap_entries * 2 : 16;
        entry_t *e = sl_arena_calloc(m->arena, cap, sizeof *e);
        if (e == NULL) {
            p->nomem = true;
            return NULL;
        }
        if (m->num_entries) memcpy(e, m->entries, m->num_entries * sizeof *e);
        m->entries = e;
        m->cap_entries = cap;
    }
    entry_t *e = &m->entries[m->num_entries++];
    memset(e, 0, sizeof *e);
    return e;
}

/* A column name: a non-empty string. NULL (after a problem) otherwise. */
static const char *column_name(sl_wh_colmap_t *m, problems_t *p, const json_t *v, const char *path)
{
    if (!json_is_string(v) || json_string_length(v) == 0) {
        problem(p, "%s: must be a column name (a non-empty string), got %s", path,
                json_is_string(v) ? "\"\"" : jtype(v));
        return NULL;
    }
    const char *s = sl_arena_strdup(m->arena, json_string_value(v));
    if (s == NULL) p->nomem = true;
    return s;
}

static void parse_hash(problems_t *p, const json_t *h, const char *path, entry_t *e)
{
    if (!json_is_object(h)) {
        problem(p, "%s.hash: must be an object {\"seed\": N}, got %s", path, jtype(h));
        return;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)h, k, v)
    {
        if (strcmp(k, "seed") != 0) problem(p, "%s.hash.%s: unknown key (keys: seed)", path, k);
    }
    const json_t *seed = json_object_get(h, "seed");
    if (seed == NULL)
        problem(p, "%s.hash.seed: missing (the seed of the string hash, an integer >= 0)", path);
    else if (!json_is_integer(seed) || json_integer_value(seed) < 0)
        problem(p, "%s.hash.seed: must be a non-negative integer", path);
    else {
        e->hash = true;
        e->seed = (uint64_t)json_integer_value(seed);
    }
}

/* labels / dense: an array of column names. */
static void parse_names(sl_wh_colmap_t *m, problems_t *p, const json_t *arr, const char *base,
                        const char *key, role_t role)
{
    if (!json_is_array(arr)) {
        problem(p, "%s.%s: must be an array of column names, got %s", base, key, jtype(arr));
        return;
    }
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *path = path_fmt(m, p, "%s.%s[%zu]", base, key, i);
        const char *col = column_name(m, p, v, path);
        if (col == NULL) continue;
        entry_t *e = add_entry(m, p);
        if (e == NULL) return;
        *e = (entry_t){.role = role, .column = col, .name = col, .path = path};
        add_named(m, p, col);
    }
}

static void check_keys(problems_t *p, const json_t *obj, const char *path, const char *const *keys,
                       const char *list)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        bool ok = false;
        for (const char *const *q = keys; *q != NULL && !ok; q++)
            ok = strcmp(*q, k) == 0;
        if (!ok) problem(p, "%s.%s: unknown key (keys: %s)", path, k, list);
    }
}

static void parse_sparse(sl_wh_colmap_t *m, problems_t *p, const json_t *arr, const char *base)
{
    if (!json_is_array(arr)) {
        problem(p, "%s.sparse: must be an array, got %s", base, jtype(arr));
        return;
    }
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *path = path_fmt(m, p, "%s.sparse[%zu]", base, i);
        entry_t tmp = {.role = ROLE_SPARSE, .path = path};
        if (json_is_string(v)) {
            tmp.column = column_name(m, p, v, path);
        } else if (json_is_object(v)) {
            static const char *const keys[] = {"column", "name", "hash", NULL};
            check_keys(p, v, path, keys, "column, name, hash");
            const json_t *c = json_object_get(v, "column");
            if (c == NULL)
                problem(p, "%s.column: missing (the input column)", path);
            else
                tmp.column = column_name(m, p, c, path_fmt(m, p, "%s.column", path));
            const json_t *n = json_object_get(v, "name");
            if (n != NULL) tmp.name = column_name(m, p, n, path_fmt(m, p, "%s.name", path));
            const json_t *h = json_object_get(v, "hash");
            if (h != NULL) parse_hash(p, h, path, &tmp);
        } else {
            problem(p, "%s: must be a column name or {\"column\", \"name\", \"hash\"}, got %s",
                    path, jtype(v));
            continue;
        }
        if (tmp.column == NULL) continue;
        if (tmp.name == NULL) tmp.name = tmp.column;
        entry_t *e = add_entry(m, p);
        if (e == NULL) return;
        *e = tmp;
        add_named(m, p, tmp.column);
    }
}

static void parse_weighted(sl_wh_colmap_t *m, problems_t *p, const json_t *arr, const char *base)
{
    if (!json_is_array(arr)) {
        problem(p, "%s.weighted: must be an array, got %s", base, jtype(arr));
        return;
    }
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *path = path_fmt(m, p, "%s.weighted[%zu]", base, i);
        if (!json_is_object(v)) {
            problem(p, "%s: must be {\"column\": C} or {\"name\", \"ids\", \"weights\"}, got %s",
                    path, jtype(v));
            continue;
        }
        static const char *const keys[] = {"column", "name", "ids", "weights", NULL};
        check_keys(p, v, path, keys, "column, name, ids, weights");
        entry_t tmp = {.role = ROLE_WEIGHTED, .path = path};
        const json_t *c = json_object_get(v, "column"), *ids = json_object_get(v, "ids"),
                     *ws = json_object_get(v, "weights"), *n = json_object_get(v, "name");
        bool bad = false;
        if (c != NULL && (ids != NULL || ws != NULL)) {
            problem(p, "%s: give either \"column\" or \"ids\" and \"weights\", not both", path);
            bad = true;
        } else if (c == NULL && (ids == NULL || ws == NULL)) {
            problem(p,
                    "%s: needs \"column\" (a list of {id, weight}) or both \"ids\" and "
                    "\"weights\"",
                    path);
            bad = true;
        }
        if (c != NULL) tmp.column = column_name(m, p, c, path_fmt(m, p, "%s.column", path));
        if (ids != NULL) tmp.column = column_name(m, p, ids, path_fmt(m, p, "%s.ids", path));
        if (ws != NULL) {
            tmp.weights = column_name(m, p, ws, path_fmt(m, p, "%s.weights", path));
            if (tmp.weights == NULL) bad = true;
        }
        if (n != NULL) tmp.name = column_name(m, p, n, path_fmt(m, p, "%s.name", path));
        if (bad || tmp.column == NULL || (n != NULL && tmp.name == NULL)) continue;
        if (tmp.name == NULL) tmp.name = tmp.column;
        entry_t *e = add_entry(m, p);
        if (e == NULL) return;
        *e = tmp;
        add_named(m, p, tmp.column);
        if (tmp.weights != NULL) add_named(m, p, tmp.weights);
    }
}

static sl_wh_colmap_t *colmap_alloc(const sl_allocator_t *a)
{
    sl_wh_colmap_t *m = sl_calloc(a, 1, sizeof *m);
    if (m == NULL) return NULL;
    m->a = a;
    m->infer = true;
    m->arena = sl_arena_new(a, 4096);
    if (m->arena == NULL) {
        sl_free(a, m, sizeof *m);
        return NULL;
    }
    return m;
}

sl_wh_colmap_t *sl_wh_colmap_new_default(const sl_allocator_t *a)
{
    return colmap_alloc(a);
}

void sl_wh_colmap_destroy(sl_wh_colmap_t *m)
{
    if (m == NULL) return;
    sl_arena_destroy(m->arena);
    sl_free(m->a, m, sizeof *m);
}

sl_err_t sl_wh_colmap_parse(const json_t *json, const char *path, const sl_allocator_t *a,
                            sl_wh_colmap_problem_fn fn, void *ctx, sl_wh_colmap_t **out,
                            sl_error_t *err)
{
    *out = NULL;
    const char *base = path != NULL ? path : "$";
    problems_t p = {.fn = fn, .ctx = ctx};
    if (!json_is_object(json)) {
        problem(&p, "%s: must be an object, got %s", base, jtype(json));
        return problems_error(&p, err);
    }
    sl_wh_colmap_t *m = colmap_alloc(a);
    if (m == NULL) return sl_error_set(err, SL_ERR_NOMEM, "column mapping: out of memory");
    static const char *const keys[] = {"sample_id", "session_id", "timestamp", "labels", "dense",
                                       "sparse",    "weighted",   "infer",     NULL};
    check_keys(&p, json, base, keys,
               "sample_id, session_id, timestamp, labels, dense, sparse, weighted, infer");
    for (int i = 0; i < ID_COLUMNS; i++) {
        const json_t *v = json_object_get(json, ID_KEYS[i]);
        if (v == NULL) continue;
        m->id_path[i] = path_fmt(m, &p, "%s.%s", base, ID_KEYS[i]);
        m->ids[i] = column_name(m, &p, v, m->id_path[i]);
        if (m->ids[i] != NULL) add_named(m, &p, m->ids[i]);
    }
    const json_t *v;
    if ((v = json_object_get(json, "labels")) != NULL)
        parse_names(m, &p, v, base, "labels", ROLE_LABEL);
    if ((v = json_object_get(json, "dense")) != NULL)
        parse_names(m, &p, v, base, "dense", ROLE_DENSE);
    if ((v = json_object_get(json, "sparse")) != NULL) parse_sparse(m, &p, v, base);
    if ((v = json_object_get(json, "weighted")) != NULL) parse_weighted(m, &p, v, base);
    if ((v = json_object_get(json, "infer")) != NULL) {
        if (!json_is_boolean(v))
            problem(&p, "%s.infer: must be true or false, got %s", base, jtype(v));
        else
            m->infer = json_is_true(v);
    }
    if (p.count > 0 || p.nomem) {
        sl_wh_colmap_destroy(m);
        return problems_error(&p, err);
    }
    *out = m;
    return SL_OK;
}

sl_err_t sl_wh_colmap_load(const char *file, const sl_allocator_t *a, sl_wh_colmap_problem_fn fn,
                           void *ctx, sl_wh_colmap_t **out, sl_error_t *err)
{
    *out = NULL;
    json_error_t jerr;
    json_t *j = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "mapping %s line %d: %s", file, jerr.line,
                            jerr.text);
    sl_err_t rc = sl_wh_colmap_parse(j, "$", a, fn, ctx, out, err);
    json_decref(j);
    if (rc != SL_OK) sl_error_prefix(err, "%s: ", file);
    return rc;
}

bool sl_wh_colmap_infers(const sl_wh_colmap_t *m)
{
    return m->infer;
}

bool sl_wh_colmap_hashes(const sl_wh_colmap_t *m, const char *column)
{
    for (uint32_t i = 0; i < m->num_entries; i++)
        if (m->entries[i].hash && strcmp(m->entries[i].column, column) == 0) return true;
    return false;
}

uint32_t sl_wh_colmap_num_named(const sl_wh_colmap_t *m)
{
    return m->num_named;
}

const char *sl_wh_colmap_named(const sl_wh_colmap_t *m, uint32_t i)
{
    return i < m->num_named ? m->named[i] : NULL;
}

/* ---- resolve ---- */

typedef struct resolving {
    const sl_wh_colmap_t *m;
    sl_wh_colmap_resolved_t *r;
    problems_t p;
    sl_wh_colmap_slot_t *slots;
    uint32_t num_slots, cap_slots;
    uint32_t *uses;
} resolving_t;

static uint32_t find_column(const sl_wh_colmap_resolved_t *r, const char *name)
{
    for (uint32_t i = 0; i < r->num_columns; i++)
        if (strcmp(r->columns[i].name, name) == 0) return i;
    return SL_WH_COLMAP_NONE;
}

static bool is_numeric(sl_wh_coltype_t t)
{
    return t == SL_WH_COLTYPE_INT || t == SL_WH_COLTYPE_FLOAT || t == SL_WH_COLTYPE_BOOL ||
           t == SL_WH_COLTYPE_ANY;
}

/* The input column a mapping entry names, or NONE after a problem. */
static uint32_t lookup(resolving_t *rs, const char *name, const char *path)
{
    uint32_t c = find_column(rs->r, name);
    if (c == SL_WH_COLMAP_NONE) problem(&rs->p, "%s: no column '%s' in the input", path, name);
    return c;
}

static sl_wh_colmap_slot_t *add_slot(resolving_t *rs)
{
    if (rs->num_slots == rs->cap_slots) {
        uint32_t cap = rs->cap_slots ? rs->cap_slots * 2 : 32;
        sl_wh_colmap_slot_t *s = sl_arena_calloc(rs->r->arena, cap, sizeof *s);
        if (s == NULL) {
            rs->p.nomem = true;
            return NULL;
        }
        if (rs->num_slots) memcpy(s, rs->slots, rs->num_slots * sizeof *s);
        rs->slots = s;
        rs->cap_slots = cap;
    }
    sl_wh_colmap_slot_t *s = &rs->slots[rs->num_slots++];
    memset(s, 0, sizeof *s);
    s->weights_column = SL_WH_COLMAP_NONE;
    return s;
}

/* Whether an entry's column types fit its role; a problem when not. */
static bool types_fit(resolving_t *rs, const entry_t *e, uint32_t c, uint32_t w)
{
    const char *name = rs->r->columns[c].name;
    sl_wh_coltype_t t = rs->r->columns[c].type;
    const char *tn = sl_wh_coltype_name(t);
    bool any = t == SL_WH_COLTYPE_ANY;
    bool str = t == SL_WH_COLTYPE_STRING || t == SL_WH_COLTYPE_LIST_STRING;
    switch (e->role) {
    case ROLE_LABEL:
    case ROLE_DENSE:
        if (is_numeric(t)) return true;
        problem(&rs->p, "%s: column '%s' is %s; %s take a number (int, float or bool)", e->path,
                name, tn, e->role == ROLE_LABEL ? "labels" : "dense features");
        return false;
    case ROLE_SPARSE:
        if (e->hash) {
            if (any || str) return true;
            problem(&rs->p, "%s.hash: column '%s' is %s; a hash applies to string columns", e->path,
                    name, tn);
            return false;
        }
        if (any || t == SL_WH_COLTYPE_INT || t == SL_WH_COLTYPE_LIST_INT) return true;
        if (str)
            problem(&rs->p,
                    "%s: column '%s' is %s; strings become ids only by a declared hash: "
                    "{\"column\": \"%s\", \"hash\": {\"seed\": N}}",
                    e->path, name, tn, name);
        else
            problem(&rs->p, "%s: column '%s' is %s; sparse features take int or list<int>", e->path,
                    name, tn);
        return false;
    case ROLE_WEIGHTED:
        if (w == SL_WH_COLMAP_NONE) {
            if (any || t == SL_WH_COLTYPE_LIST_WEIGHTED) return true;
            problem(&rs->p, "%s: column '%s' is %s; \"column\" takes list<struct{id,weight}>",
                    e->path, name, tn);
            return false;
        }
        bool ok = true;
        if (!any && t != SL_WH_COLTYPE_LIST_INT) {
            problem(&rs->p, "%s.ids: column '%s' is %s; ids take list<int>", e->path, name, tn);
            ok = false;
        }
        sl_wh_coltype_t wt = rs->r->columns[w].type;
        if (wt != SL_WH_COLTYPE_ANY && wt != SL_WH_COLTYPE_LIST_FLOAT &&
            wt != SL_WH_COLTYPE_LIST_INT) {
            problem(&rs->p, "%s.weights: column '%s' is %s; weights take list<float>", e->path,
                    rs->r->columns[w].name, sl_wh_coltype_name(wt));
            ok = false;
        }
        return ok;
    }
    return false;
}

static sl_wh_kind_t role_kind(role_t role)
{
    return role == ROLE_DENSE ? SL_WH_DENSE : role == ROLE_SPARSE ? SL_WH_SPARSE : SL_WH_WEIGHTED;
}

/* Add e (checked) to the schema and the slots. */
static void add_entry_slot(resolving_t *rs, const entry_t *e, uint32_t c, uint32_t w)
{
    sl_wh_schema_t *schema = rs->r->schema;
    sl_error_t serr = {0};
    sl_err_t rc = e->role == ROLE_LABEL
                      ? sl_wh_schema_add_label(schema, e->name, &serr)
                      : sl_wh_schema_add_feature(schema, e->name, role_kind(e->role), &serr);
    if (rc == SL_ERR_NOMEM) rs->p.nomem = true;
    if (rc != SL_OK) {
        problem(&rs->p, "%s: %s", e->path, serr.msg);
        return;
    }
    sl_wh_colmap_slot_t *s = add_slot(rs);
    if (s == NULL) return;
    s->name = e->name;
    s->column = c;
    s->type = rs->r->columns[c].type;
    s->weights_column = w;
    if (w != SL_WH_COLMAP_NONE) {
        s->weights_type = rs->r->columns[w].type;
        rs->uses[w]++;
    }
    s->hash = e->hash;
    s->seed = e->seed;
    s->path = e->path;
    rs->uses[c]++;
    if (e->role == ROLE_LABEL) {
        s->target = SL_WH_MAP_LABEL;
        s->index = (uint32_t)sl_wh_schema_find_label(schema, e->name);
    } else {
        s->target = e->role == ROLE_DENSE    ? SL_WH_MAP_DENSE
                    : e->role == ROLE_SPARSE ? SL_WH_MAP_SPARSE
                                             : SL_WH_MAP_WEIGHTED;
        s->index = sl_wh_schema_find(schema, e->name)->slot;
    }
}

static bool named_anywhere(const sl_wh_colmap_t *m, const char *column)
{
    for (uint32_t i = 0; i < m->num_named; i++)
        if (strcmp(m->named[i], column) == 0) return true;
    return false;
}

/* Columns: copied, names checked for duplicates. */
static void copy_columns(resolving_t *rs, const sl_wh_input_column_t *cols, uint32_t n)
{
    sl_wh_colmap_resolved_t *r = rs->r;
    sl_wh_input_column_t *c = sl_arena_calloc(r->arena, n + 1, sizeof *c);
    rs->uses = sl_arena_calloc(r->arena, n + 1, sizeof *rs->uses);
    if (c == NULL || rs->uses == NULL) {
        rs->p.nomem = true;
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        c[i].type = cols[i].type;
        c[i].name = sl_arena_strdup(r->arena, cols[i].name != NULL ? cols[i].name : "");
        if (c[i].name == NULL) {
            rs->p.nomem = true;
            return;
        }
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(c[j].name, c[i].name) == 0)
                problem(&rs->p, "input: column '%s' appears twice (columns %u and %u)", c[i].name,
                        j + 1, i + 1);
    }
    r->columns = c;
    r->num_columns = n;
    r->column_uses = rs->uses;
}

static void resolve_ids(resolving_t *rs)
{
    const sl_wh_colmap_t *m = rs->m;
    sl_wh_colmap_resolved_t *r = rs->r;
    static const char *const DEFAULTS[ID_COLUMNS][2] = {
        {"sample_id", NULL}, {"session_id", NULL}, {"timestamp", "ts"}};
    const char *names[ID_COLUMNS] = {NULL, NULL, NULL};
    for (int i = 0; i < ID_COLUMNS; i++) {
        r->id_column[i] = SL_WH_COLMAP_NONE;
        uint32_t c = SL_WH_COLMAP_NONE;
        if (m->ids[i] != NULL) {
            c = lookup(rs, m->ids[i], m->id_path[i]);
            if (c != SL_WH_COLMAP_NONE && r->columns[c].type != SL_WH_COLTYPE_INT &&
                r->columns[c].type != SL_WH_COLTYPE_ANY) {
                problem(&rs->p, "%s: column '%s' is %s; the %s must be an int column",
                        m->id_path[i], m->ids[i], sl_wh_coltype_name(r->columns[c].type),
                        i == 0   ? "sample id"
                        : i == 1 ? "session id"
                                 : "timestamp");
                c = SL_WH_COLMAP_NONE;
            }
        } else if (m->infer) {
            for (int d = 0; d < 2 && c == SL_WH_COLMAP_NONE; d++) {
                if (DEFAULTS[i][d] == NULL) continue;
                uint32_t k = find_column(r, DEFAULTS[i][d]);
                if (k != SL_WH_COLMAP_NONE && r->columns[k].type == SL_WH_COLTYPE_INT &&
                    !named_anywhere(m, DEFAULTS[i][d]))
                    c = k;
            }
        }
        if (c == SL_WH_COLMAP_NONE) continue;
        r->id_column[i] = c;
        names[i] = r->columns[c].name;
        rs->uses[c]++;
    }
    sl_error_t serr = {0};
    if (sl_wh_schema_set_columns(r->schema, names[0], names[1], names[2], &serr) != SL_OK)
        problem(&rs->p, "%s: %s", m->id_path[0] ? m->id_path[0] : "$", serr.msg);
    for (int i = 0; i < ID_COLUMNS; i++) {
        if (r->id_column[i] == SL_WH_COLMAP_NONE) continue;
        sl_wh_colmap_slot_t *s = add_slot(rs);
        if (s == NULL) return;
        s->target = (sl_wh_colmap_target_t)(SL_WH_MAP_SAMPLE_ID + i);
        s->name = names[i];
        s->column = r->id_column[i];
        s->type = r->columns[s->column].type;
        s->path = m->id_path[i] != NULL ? m->id_path[i] : "(inferred)";
    }
}

static void resolve_entries(resolving_t *rs, bool labels)
{
    const sl_wh_colmap_t *m = rs->m;
    for (uint32_t i = 0; i < m->num_entries; i++) {
        const entry_t *e = &m->entries[i];
        if ((e->role == ROLE_LABEL) != labels) continue;
        uint32_t c = lookup(rs, e->column, e->path);
        uint32_t w = e->weights != NULL ? lookup(rs, e->weights, e->path) : SL_WH_COLMAP_NONE;
        if (c == SL_WH_COLMAP_NONE || (e->weights != NULL && w == SL_WH_COLMAP_NONE)) continue;
        if (types_fit(rs, e, c, w)) add_entry_slot(rs, e, c, w);
    }
}

/* With "infer": unnamed columns by type; a "label" column when no label is named. */
static void resolve_inferred(resolving_t *rs, bool labels)
{
    const sl_wh_colmap_t *m = rs->m;
    sl_wh_colmap_resolved_t *r = rs->r;
    if (!m->infer) return;
    bool named_labels = false;
    for (uint32_t i = 0; i < m->num_entries; i++)
        named_labels |= m->entries[i].role == ROLE_LABEL;
    for (uint32_t c = 0; c < r->num_columns; c++) {
        const sl_wh_input_column_t *col = &r->columns[c];
        if (rs->uses[c] > 0 || named_anywhere(m, col->name)) continue;
        entry_t e = {.column = col->name, .name = col->name, .path = "(inferred)"};
        bool label = strcmp(col->name, "label") == 0 && !named_labels;
        if (labels != label) continue;
        switch (col->type) {
        case SL_WH_COLTYPE_INT:
        case SL_WH_COLTYPE_FLOAT:
        case SL_WH_COLTYPE_BOOL:
            e.role = label ? ROLE_LABEL : ROLE_DENSE;
            break;
        case SL_WH_COLTYPE_LIST_INT:
            e.role = ROLE_SPARSE;
            break;
        case SL_WH_COLTYPE_LIST_WEIGHTED:
            e.role = ROLE_WEIGHTED;
            break;
        default:
            continue; /* strings, list<float>, unknown: listed as ignored */
        }
        if (label && e.role != ROLE_LABEL) continue;
        add_entry_slot(rs, &e, c, SL_WH_COLMAP_NONE);
    }
}

static void list_ignored(resolving_t *rs)
{
    sl_wh_colmap_resolved_t *r = rs->r;
    const char **ign = sl_arena_calloc(r->arena, r->num_columns + 1, sizeof *ign);
    if (ign == NULL) {
        rs->p.nomem = true;
        return;
    }
    uint32_t n = 0;
    for (uint32_t c = 0; c < r->num_columns; c++) {
        if (rs->uses[c] > 0) continue;
        sl_wh_coltype_t t = r->columns[c].type;
        const char *why = !rs->m->infer ? "not named, infer is false"
                          : t == SL_WH_COLTYPE_STRING || t == SL_WH_COLTYPE_LIST_STRING
                              ? "no hash declared"
                              : "no feature kind takes it";
        char buf[SL_WH_NAME_MAX + 96];
        snprintf(buf, sizeof buf, "%s (%s: %s)", r->columns[c].name, sl_wh_coltype_name(t), why);
        if ((ign[n++] = sl_arena_strdup(r->arena, buf)) == NULL) rs->p.nomem = true;
    }
    r->ignored = ign;
    r->num_ignored = n;
}

void sl_wh_colmap_resolved_destroy(sl_wh_colmap_resolved_t *r)
{
    if (r == NULL) return;
    sl_wh_schema_destroy(r->schema);
    sl_arena_t *arena = r->arena;
    sl_arena_destroy(arena); /* r itself lives in the arena */
}

sl_err_t sl_wh_colmap_resolve(const sl_wh_colmap_t *m, const sl_wh_input_column_t *columns,
                              uint32_t num_columns, const sl_allocator_t *a,
                              sl_wh_colmap_problem_fn fn, void *ctx, sl_wh_colmap_resolved_t **out,
                              sl_error_t *err)
{
    *out = NULL;
    sl_arena_t *arena = sl_arena_new(a, 16384);
    sl_wh_colmap_resolved_t *r = arena ? sl_arena_calloc(arena, 1, sizeof *r) : NULL;
    if (r == NULL) {
        sl_arena_destroy(arena);
        return sl_error_set(err, SL_ERR_NOMEM, "column mapping: out of memory");
    }
    r->arena = arena;
    r->schema = sl_wh_schema_new(a);
    resolving_t rs = {.m = m, .r = r, .p = {.fn = fn, .ctx = ctx}};
    if (r->schema == NULL) rs.p.nomem = true;
    if (!rs.p.nomem) copy_columns(&rs, columns, num_columns);
    if (!rs.p.nomem && rs.p.count == 0) {
        resolve_ids(&rs);
        resolve_entries(&rs, true);
        resolve_inferred(&rs, true);
        resolve_entries(&rs, false);
        resolve_inferred(&rs, false);
        list_ignored(&rs);
    }
    if (rs.p.count == 0 && !rs.p.nomem && sl_wh_schema_num_features(r->schema) == 0 &&
        sl_wh_schema_num_labels(r->schema) == 0)
        problem(&rs.p, "$: maps no label and no feature (columns: %u)", num_columns);
    if (rs.p.count > 0 || rs.p.nomem) {
        sl_err_t rc = problems_error(&rs.p, err);
        sl_wh_colmap_resolved_destroy(r);
        return rc;
    }
    r->slots = rs.slots;
    r->num_slots = rs.num_slots;
    *out = r;
    return SL_OK;
}

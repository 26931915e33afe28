/* Every problem of a spec in one pass: the spec less what its parse
 * problems name, bound anyway (lenient.h). */
#include "dpp/pipeline/lenient.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "dpp/pipeline/plan.h"
#include "warehouse/pq_dataset.h"

/* An array of the spec whose elements may go: the pruned array's element i
 * was the original's orig[i]. */
typedef struct kept {
    char path[160]; /* "$.transforms", "$.batch.dedup_groups.user", ... */
    uint32_t n, *orig;
    uint32_t cap; /* orig's allocated entries */
} kept_t;

#define MAX_KEPT 64
#define MAX_DEPTH 8

struct sl_pipeline_lenient {
    sl_pipeline_job_t *job;
    kept_t kept[MAX_KEPT];
    uint32_t nkept;
    /* Transforms left out: the features they would have made (their
     * "output"), and whether one of them may have made a feature it does
     * not name (an op not known, or one that makes its output's name). */
    char **made;
    uint32_t nmade;
    bool made_unnamed;
};

/* A path's steps: a key, or an index (key NULL). */
typedef struct step {
    char key[128];
    long index; /* -1: a key */
} step_t;

/* "$.a.b[2].c: message" -> its steps. @return how many, -1 when the text is
 * not a path this file can follow. */
static int path_steps(const char *problem, step_t *out, int cap)
{
    const char *end = strstr(problem, ": ");
    if (problem[0] != '$' || end == NULL) return -1;
    const char *p = problem + 1;
    int n = 0;
    while (p < end && n < cap) {
        if (*p == '.') {
            const char *q = ++p;
            while (q < end && *q != '.' && *q != '[')
                q++;
            if (q == p || (size_t)(q - p) >= sizeof out[n].key) return -1;
            memcpy(out[n].key, p, (size_t)(q - p));
            out[n].key[q - p] = '\0';
            out[n++].index = -1;
            p = q;
        } else if (*p == '[') {
            char *q;
            long i = strtol(p + 1, &q, 10);
            if (q >= end || *q != ']' || i < 0) return -1;
            out[n].key[0] = '\0';
            out[n++].index = i;
            p = q + 1;
        } else {
            return -1;
        }
    }
    return p == end ? n : -1;
}

/* The steps' JSON path as text ("$.batch.dedup_groups.user"), of the first
 * n steps. */
static void path_text(const step_t *s, int n, char *out, size_t cap)
{
    size_t at = (size_t)snprintf(out, cap, "$");
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)(s[i].index < 0 ? snprintf(out + at, cap - at, ".%s", s[i].key)
                                      : snprintf(out + at, cap - at, "[%ld]", s[i].index));
}

/* What a problem at steps s[0..n) leaves out: the element of a filter or
 * transform list whole (an op is one thing), else the deepest node the
 * path reaches. *parent and *at say where it sits (at: its steps).
 * @return false when the problem is about the spec as a whole or its
 * source's table: then nothing can be bound. */
static bool target_of(json_t *root, const step_t *s, int n, json_t **parent, int *at)
{
    if (n == 0) return false;
    if (s[0].index < 0 &&
        (strcmp(s[0].key, "filters") == 0 || strcmp(s[0].key, "transforms") == 0) && n >= 2 &&
        s[1].index >= 0) {
        *parent = json_object_get(root, s[0].key);
        *at = 1;
        return json_is_array(*parent) && (size_t)s[1].index < json_array_size(*parent);
    }
    json_t *cur = root, *up = NULL;
    int depth = 0;
    for (int i = 0; i < n; i++) {
        json_t *next = s[i].index < 0 ? json_object_get(cur, s[i].key)
                                      : json_array_get(cur, (size_t)s[i].index);
        if (next == NULL) break;
        up = cur;
        cur = next;
        depth = i + 1;
    }
    if (depth == 0) return false; /* a key the spec lacks, or "$" itself */
    /* the source and its table: nothing to bind to without them */
    if (s[0].index < 0 && strcmp(s[0].key, "source") == 0 &&
        (depth == 1 || (s[1].index < 0 && strcmp(s[1].key, "table") == 0)))
        return false;
    *parent = up;
    *at = depth - 1;
    return true;
}

static kept_t *kept_of(sl_pipeline_lenient_t *l, const char *path, uint32_t n)
{
    for (uint32_t i = 0; i < l->nkept; i++)
        if (strcmp(l->kept[i].path, path) == 0) return &l->kept[i];
    if (l->nkept == MAX_KEPT) return NULL;
    kept_t *k = &l->kept[l->nkept++];
    snprintf(k->path, sizeof k->path, "%s", path);
    k->cap = n > 0 ? n : 1;
    k->orig = sl_calloc(NULL, k->cap, sizeof *k->orig);
    if (k->orig == NULL) {
        l->nkept--;
        return NULL;
    }
    k->n = n;
    for (uint32_t i = 0; i < n; i++)
        k->orig[i] = i;
    return k;
}

/* A transform left out: what it would have made. */
static bool note_made(sl_pipeline_lenient_t *l, const json_t *op)
{
    const json_t *out = json_object_get(op, "output");
    const char *name = json_string_value(json_object_get(op, "op"));
    if (json_is_string(out)) {
        char **p = sl_realloc(NULL, l->made, l->nmade * sizeof *p, (l->nmade + 1) * sizeof *p);
        if (p == NULL) return false;
        l->made = p;
        if ((l->made[l->nmade] = sl_strdup(NULL, json_string_value(out))) == NULL) return false;
        l->nmade++;
    } else if (name == NULL || strcmp(name, "cross") == 0 || strcmp(name, "ngram") == 0) {
        /* an op not known (or one naming its output itself) may have made
         * any name: the unknown-feature problems after it say nothing */
        l->made_unnamed = true;
    }
    return true;
}

/* Mark the element idx of array (at path) to go; sets it to JSON null and
 * the map records it (elements are dropped by sweep_arrays). */
static bool mark_element(sl_pipeline_lenient_t *l, json_t *array, const char *path, size_t idx)
{
    kept_t *k = kept_of(l, path, (uint32_t)json_array_size(array));
    if (k == NULL) return false;
    if (strcmp(path, "$.transforms") == 0 && !note_made(l, json_array_get(array, idx)))
        return false;
    json_array_set_new(array, idx, json_null());
    return true;
}

/* Drop the null elements of every marked array, the maps following. */
static void sweep_arrays(sl_pipeline_lenient_t *l, json_t *root)
{
    for (uint32_t a = 0; a < l->nkept; a++) {
        kept_t *k = &l->kept[a];
        step_t s[MAX_DEPTH];
        char probe[200];
        snprintf(probe, sizeof probe, "%s: x", k->path);
        int n = path_steps(probe, s, MAX_DEPTH);
        json_t *arr = root;
        for (int i = 0; arr != NULL && i < n; i++)
            arr = s[i].index < 0 ? json_object_get(arr, s[i].key)
                                 : json_array_get(arr, (size_t)s[i].index);
        if (!json_is_array(arr)) continue;
        uint32_t w = 0;
        size_t n_el = json_array_size(arr), at = 0;
        for (size_t r = 0; r < n_el && r < k->n; r++) {
            if (json_is_null(json_array_get(arr, at))) {
                json_array_remove(arr, at);
                continue;
            }
            k->orig[w++] = k->orig[r];
            at++;
        }
        k->n = w;
    }
}

sl_pipeline_lenient_t *sl_pipeline_lenient_new(const char *text, size_t len,
                                               const sl_pipeline_problems_t *problems)
{
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(root) || problems == NULL || problems->count == 0) {
        json_decref(root);
        return NULL;
    }
    sl_pipeline_lenient_t *l = sl_calloc(NULL, 1, sizeof *l);
    bool ok = l != NULL;
    for (uint32_t i = 0; ok && i < problems->count; i++) {
        step_t s[MAX_DEPTH];
        int n = path_steps(problems->items[i], s, MAX_DEPTH);
        json_t *parent;
        int at;
        if (n < 0 || !target_of(root, s, n, &parent, &at)) {
            ok = false;
            break;
        }
        if (json_is_array(parent)) {
            char path[160];
            path_text(s, at, path, sizeof path);
            size_t idx = (size_t)s[at].index;
            if (!json_is_null(json_array_get(parent, idx))) ok = mark_element(l, parent, path, idx);
        } else {
            json_object_del(parent, s[at].key);
        }
    }
    if (ok) sweep_arrays(l, root);
    if (ok) {
        sl_pipeline_problems_t left = {0};
        sl_error_t err = {0};
        ok = sl_pipeline_job_from_json(root, &l->job, &left, &err) == SL_OK;
        sl_pipeline_problems_free(&left);
    }
    json_decref(root);
    if (!ok) {
        sl_pipeline_lenient_destroy(l);
        return NULL;
    }
    return l;
}

const sl_pipeline_job_t *sl_pipeline_lenient_job(const sl_pipeline_lenient_t *l)
{
    return l->job;
}

/* The problem with its list index mapped back to the original spec's
 * ("$.transforms[0]..." of the pruned spec may be "$.transforms[2]..."). */
static void remap(const sl_pipeline_lenient_t *l, const char *problem, char *out, size_t cap)
{
    snprintf(out, cap, "%s", problem);
    for (uint32_t i = 0; i < l->nkept; i++) {
        const kept_t *k = &l->kept[i];
        size_t n = strlen(k->path);
        if (strncmp(problem, k->path, n) != 0 || problem[n] != '[') continue;
        char *end;
        unsigned long idx = strtoul(problem + n + 1, &end, 10);
        if (*end != ']' || idx >= k->n) return;
        snprintf(out, cap, "%s[%u]%s", k->path, k->orig[idx], end + 1);
        return;
    }
}

/* Would a left-out transform explain this binding problem? */
static bool explained(const sl_pipeline_lenient_t *l, const char *problem)
{
    const char *u = strstr(problem, "unknown feature '");
    if (u == NULL) return false;
    const char *name = u + strlen("unknown feature '"), *q = strchr(name, '\'');
    if (q == NULL) return false;
    for (uint32_t i = 0; i < l->nmade; i++)
        if (strlen(l->made[i]) == (size_t)(q - name) &&
            strncmp(l->made[i], name, (size_t)(q - name)) == 0)
            return true;
    return l->made_unnamed && (strncmp(problem, "$.transforms[", 13) == 0 ||
                               strncmp(problem, "$.batch.dedup_groups.", 21) == 0);
}

void sl_pipeline_lenient_bind(const sl_pipeline_lenient_t *l, const sl_wh_schema_t *schema,
                              sl_pipeline_problems_t *out)
{
    sl_pipeline_problems_t found = {0};
    sl_error_t err = {0};
    sl_pipeline_plan_check(l->job, schema, &found, &err);
    for (uint32_t i = 0; i < found.count; i++) {
        if (explained(l, found.items[i])) continue;
        char mapped[1024];
        remap(l, found.items[i], mapped, sizeof mapped);
        sl_pipeline_problems_add(out, "%s", mapped);
    }
    sl_pipeline_problems_free(&found);
}

void sl_pipeline_lenient_destroy(sl_pipeline_lenient_t *l)
{
    if (l == NULL) return;
    sl_pipeline_job_destroy(l->job);
    for (uint32_t i = 0; i < l->nkept; i++)
        sl_free(NULL, l->kept[i].orig, l->kept[i].cap * sizeof *l->kept[i].orig);
    for (uint32_t i = 0; i < l->nmade; i++)
        sl_strfree(NULL, l->made[i]);
    sl_free(NULL, l->made, l->nmade * sizeof *l->made);
    sl_free(NULL, l, sizeof *l);
}

void sl_pipeline_bind_anyway(const char *text, size_t len, const char *base_dir,
                             const struct sl_store_opts *store, sl_pipeline_problems_t *problems)
{
    sl_pipeline_lenient_t *l = sl_pipeline_lenient_new(text, len, problems);
    if (l == NULL) return;
    if (base_dir != NULL && (l->job->base_dir = sl_strdup(NULL, base_dir)) == NULL) {
        sl_pipeline_lenient_destroy(l);
        return;
    }
    if (l->job->is_kafka) {
        sl_pipeline_lenient_bind(l, l->job->kafka.schema, problems);
    } else if (l->job->parquet != NULL) {
        sl_wh_pqds_t *ds = NULL;
        sl_error_t err = {0};
        if (sl_wh_pqds_open_with(l->job->parquet, store, l->job->parquet_columns,
                                 l->job->partitions, NULL, NULL, NULL, &ds, &err) == SL_OK)
            sl_pipeline_lenient_bind(l, sl_wh_pqds_mapping(ds)->schema, problems);
        sl_wh_pqds_destroy(ds);
    } else {
        sl_wh_table_t *t = NULL;
        sl_error_t err = {0};
        if (l->job->table != NULL &&
            sl_wh_table_open_with(l->job->table, store, NULL, &t, &err) == SL_OK)
            sl_pipeline_lenient_bind(l, sl_wh_table_schema(t), problems);
        sl_wh_table_close(t);
    }
    sl_pipeline_lenient_destroy(l);
}

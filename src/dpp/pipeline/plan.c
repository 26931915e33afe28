/* Binding a job to a table schema: every name the spec uses is looked up
 * (features, labels, features created by earlier transforms), kinds are
 * checked, vocabularies loaded, and filters and transforms compiled into
 * plain structs that the hot paths (filter.c, transform*.c) read without
 * touching JSON. Every problem is listed with its JSON path. */
#include "dpp/pipeline/plan_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- owned strings and name lists ---- */

static const char *own(sl_pipeline_plan_t *plan, const char *s)
{
    if (plan->num_strings == plan->cap_strings) {
        uint32_t cap = plan->cap_strings == 0 ? 16 : plan->cap_strings * 2;
        char **v = sl_alloc(plan->a, (size_t)cap * sizeof(char *));
        if (v == NULL) return NULL;
        if (plan->num_strings > 0) memcpy(v, plan->strings, plan->num_strings * sizeof(char *));
        if (plan->strings != NULL)
            sl_free(plan->a, plan->strings, plan->cap_strings * sizeof(char *));
        plan->strings = v;
        plan->cap_strings = cap;
    }
    size_t n = strlen(s) + 1;
    char *d = sl_alloc(plan->a, n);
    if (d == NULL) return NULL;
    memcpy(d, s, n);
    plan->strings[plan->num_strings++] = d;
    return d;
}

static int find_name(char *const *names, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return (int)i;
    return -1;
}

void sl_pipeline_plan_destroy(sl_pipeline_plan_t *plan)
{
    if (plan == NULL) return;
    const sl_allocator_t *a = plan->a;
    for (uint32_t i = 0; i < plan->num_strings; i++)
        sl_free(a, plan->strings[i], strlen(plan->strings[i]) + 1);
    if (plan->strings != NULL) sl_free(a, plan->strings, plan->cap_strings * sizeof(char *));
    for (uint32_t i = 0; i < plan->num_transforms; i++) {
        dpp_vocab_destroy(plan->transforms[i].vocab);
        if (plan->transforms[i].borders != NULL)
            sl_free(a, plan->transforms[i].borders,
                    plan->transforms[i].num_borders * sizeof(double));
    }
    if (plan->transforms != NULL)
        sl_free(a, plan->transforms, plan->num_transforms * sizeof(dpp_transform_t));
    if (plan->filters != NULL) sl_free(a, plan->filters, plan->num_filters * sizeof(dpp_filter_t));
    /* read and keep point into plan->strings. */
    if (plan->read != NULL) sl_free(a, plan->read, plan->cap_read * sizeof(char *));
    if (plan->keep != NULL) sl_free(a, plan->keep, plan->cap_read * sizeof(char *));
    if (plan->weighted != NULL) sl_free(a, plan->weighted, plan->cap_read * sizeof(char *));
    sl_free(a, plan, sizeof *plan);
}

/* ---- binding ---- */

typedef struct bind {
    sl_pipeline_plan_t *plan;
    const sl_pipeline_job_t *job;
    const sl_wh_schema_t *schema;
    sl_pipeline_problems_t *problems;
    bool nomem;
    bool check_only;   /* files are checked (sl_pipeline_plan_check), not loaded */
    uint32_t read_cap; /* room in plan->read and plan->keep */
} bind_t;

__attribute__((format(printf, 2, 3))) static void problem(bind_t *b, const char *fmt, ...)
{
    char buf[SL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!sl_pipeline_problems_add(b->problems, "%s", buf)) b->nomem = true;
}

static void add_read(bind_t *b, const char *name)
{
    sl_pipeline_plan_t *plan = b->plan;
    if (find_name(plan->read, plan->num_read, name) >= 0) return;
    if (plan->num_read == b->read_cap) { /* cannot happen: sized for every mention */
        b->nomem = true;
        return;
    }
    const char *s = own(plan, name);
    if (s == NULL) {
        b->nomem = true;
        return;
    }
    plan->read[plan->num_read++] = (char *)s;
    const sl_wh_feature_t *f = sl_wh_schema_find(b->schema, name);
    if (f != NULL && f->kind == SL_WH_WEIGHTED) plan->weighted[plan->num_weighted++] = (char *)s;
}

static const char *str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

static double num(const json_t *obj, const char *key, double def)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

static uint64_t uint_arg(const json_t *obj, const char *key, uint64_t def)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : def;
}

static void bind_filters(bind_t *b)
{
    const json_t *list = b->job->filters;
    sl_pipeline_plan_t *plan = b->plan;
    size_t n = json_array_size(list);
    if (n == 0) return;
    plan->filters = sl_calloc(plan->a, n, sizeof(dpp_filter_t));
    if (plan->filters == NULL) {
        b->nomem = true;
        return;
    }
    plan->num_filters = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(list, i);
        dpp_filter_t *f = &plan->filters[i];
        f->op = dpp_op_find(str(o, "op"), true)->op;
        f->weight = 1.0f;
        const char *label = str(o, "label"), *feature = str(o, "feature");
        if (label != NULL) {
            if (sl_wh_schema_find_label(b->schema, label) < 0)
                problem(b, "$.filters[%zu].label: unknown label '%s'", i, label);
            f->name = own(plan, label);
        }
        if (feature != NULL) {
            if (sl_wh_schema_find(b->schema, feature) == NULL)
                problem(b, "$.filters[%zu].feature: unknown feature '%s'", i, feature);
            else
                add_read(b, feature);
            f->name = own(plan, feature);
        }
        if ((label != NULL || feature != NULL) && f->name == NULL) b->nomem = true;
        switch (f->op) {
        case OP_LABEL_EQUALS: f->value = num(o, "value", 0); break;
        case OP_LABEL_RANGE:
            f->min = num(o, "min", -INFINITY);
            f->max = num(o, "max", INFINITY);
            break;
        case OP_TIMESTAMP_RANGE: {
            const json_t *lo = json_object_get(o, "min"), *hi = json_object_get(o, "max");
            f->ts_min = lo != NULL ? (int64_t)json_integer_value(lo) : INT64_MIN;
            f->ts_max = hi != NULL ? (int64_t)json_integer_value(hi) : INT64_MAX;
            break;
        }
        case OP_SAMPLE:
        case OP_NEGATIVE_DOWNSAMPLE: {
            double rate = num(o, "rate", 1);
            f->seed = uint_arg(o, "seed", 0);
            f->keep_all = rate >= 1.0;
            /* rate * 2^64, below 2^64 since rate < 1 here. */
            f->threshold = f->keep_all ? UINT64_MAX : (uint64_t)ldexp(rate, 64);
            f->weight = (float)(1.0 / rate);
            if (f->op == OP_NEGATIVE_DOWNSAMPLE) {
                const char *wl = str(o, "weight_label");
                if (wl == NULL) wl = "weight";
                if (sl_wh_schema_find_label(b->schema, wl) >= 0 ||
                    sl_wh_schema_find(b->schema, wl) != NULL)
                    problem(b, "$.filters[%zu].weight_label: '%s' is already a column of the table",
                            i, wl);
                else if (plan->weight_label != NULL && strcmp(plan->weight_label, wl) != 0)
                    problem(b, "$.filters[%zu].weight_label: '%s' differs from '%s' of an "
                               "earlier filter (one weight column per job)",
                            i, wl, plan->weight_label);
                else if (plan->weight_label == NULL &&
                         (plan->weight_label = (char *)own(plan, wl)) == NULL)
                    b->nomem = true;
            }
            break;
        }
        default: break;
        }
    }
}

/* What a transform input name stands for when transform i runs. */
typedef struct sym {
    bool found;
    sl_wh_kind_t kind;
    int created_by; /* transform index, -1 for a schema feature */
} sym_t;

static sym_t lookup(bind_t *b, const char *name, size_t before)
{
    sym_t s = {false, SL_WH_SPARSE, -1};
    for (size_t j = before; j-- > 0;) {
        const char *out = b->plan->transforms[j].out;
        if (out != NULL && strcmp(out, name) == 0) {
            s.found = true;
            s.created_by = (int)j;
            return s;
        }
    }
    const sl_wh_feature_t *f = sl_wh_schema_find(b->schema, name);
    if (f != NULL) {
        s.found = true;
        s.kind = f->kind;
    }
    return s;
}

/* Check input name of transform i (key names the JSON member) against what
 * the op accepts: 'd' dense, 's' sparse or weighted, 'w' weighted. */
static bool check_input(bind_t *b, size_t i, const char *key, const char *name, char want,
                        sym_t *out)
{
    sym_t s = lookup(b, name, i);
    *out = s;
    if (!s.found) {
        /* Created later? Then the order is the problem. */
        const json_t *list = b->job->transforms;
        for (size_t j = i + 1; j < json_array_size(list); j++) {
            const json_t *o = json_array_get(list, j);
            const char *out_name = str(o, "output");
            if (out_name != NULL && strcmp(out_name, name) == 0) {
                problem(b, "$.transforms[%zu].%s: feature '%s' is created by a later transform "
                           "($.transforms[%zu])",
                        i, key, name, j);
                return false;
            }
        }
        problem(b, "$.transforms[%zu].%s: unknown feature '%s'", i, key, name);
        return false;
    }
    const char *kind = sl_wh_kind_name(s.kind);
    bool ok = want == 'd'   ? s.kind == SL_WH_DENSE
              : want == 'w' ? s.kind == SL_WH_WEIGHTED
                            : s.kind != SL_WH_DENSE;
    if (!ok) {
        const char *need = want == 'd'   ? "a dense"
                           : want == 'w' ? "a weighted"
                                         : "a sparse or weighted";
        problem(b, "$.transforms[%zu].%s: '%s' is a %s feature; %s needs %s feature", i, key, name,
                kind, str(json_array_get(b->job->transforms, i), "op"), need);
        return false;
    }
    if (s.created_by < 0) add_read(b, name);
    return true;
}

/* The name of a created feature: "output" or the op's default. */
static const char *output_name(bind_t *b, size_t i, const json_t *o, const char *fmt,
                               const char *a, const char *c)
{
    const char *out = str(o, "output");
    char buf[2 * SL_WH_NAME_MAX + 16];
    if (out == NULL) {
        snprintf(buf, sizeof buf, fmt, a, c);
        out = buf;
    }
    /* An explicit output longer than that is a parse problem; a default
     * name is built from input names and only known here. */
    if (strlen(out) > SL_WH_NAME_MAX)
        problem(b, "$.transforms[%zu].output: name longer than %d bytes", i, SL_WH_NAME_MAX);
    if (sl_wh_schema_find(b->schema, out) != NULL)
        problem(b, "$.transforms[%zu].output: '%s' is already a feature of the table", i, out);
    else if (sl_wh_schema_find_label(b->schema, out) >= 0)
        problem(b, "$.transforms[%zu].output: '%s' is already a label of the table", i, out);
    else if (lookup(b, out, i).found)
        problem(b, "$.transforms[%zu].output: '%s' is already created by an earlier transform",
                i, out);
    const char *s = own(b->plan, out);
    if (s == NULL) b->nomem = true;
    return s;
}

static void bind_transform(bind_t *b, size_t i, const json_t *o, dpp_transform_t *t)
{
    sl_pipeline_plan_t *plan = b->plan;
    const dpp_op_spec_t *spec = dpp_op_find(str(o, "op"), false);
    t->op = spec->op;
    sym_t s0, s1;
    if (t->op == OP_CROSS) {
        const json_t *fs = json_object_get(o, "features");
        const char *a = json_string_value(json_array_get(fs, 0));
        const char *c = json_string_value(json_array_get(fs, 1));
        bool ok0 = check_input(b, i, "features[0]", a, 's', &s0);
        bool ok1 = check_input(b, i, "features[1]", c, 's', &s1);
        if (ok0 && ok1 && s0.kind != s1.kind)
            problem(b, "$.transforms[%zu].features: cannot cross '%s' (%s) with '%s' (%s): kinds "
                       "differ",
                    i, a, sl_wh_kind_name(s0.kind), c, sl_wh_kind_name(s1.kind));
        t->in[0] = own(plan, a);
        t->in[1] = own(plan, c);
        t->out = output_name(b, i, o, "%s_x_%s", a, c);
    } else {
        const char *f = str(o, "feature");
        char want = 's';
        switch (t->op) {
        case OP_FILL_MISSING:
        case OP_CLAMP:
        case OP_LOG1P:
        case OP_NORMALIZE:
        case OP_BOXCOX:
        case OP_BUCKETIZE: want = 'd'; break;
        case OP_CLAMP_WEIGHTS: want = 'w'; break;
        default: break;
        }
        check_input(b, i, "feature", f, want, &s0);
        t->in[0] = own(plan, f);
        if (t->op == OP_NGRAM) {
            char n[24];
            snprintf(n, sizeof n, "%u", (unsigned)uint_arg(o, "n", 1));
            t->out = output_name(b, i, o, "%s_%sgram", f, n);
        } else if (t->op == OP_BUCKETIZE) {
            t->out = output_name(b, i, o, "%s_bucket%s", f, "");
        }
    }
    if (t->in[0] == NULL || (t->op == OP_CROSS && t->in[1] == NULL)) b->nomem = true;
    t->salt = uint_arg(o, "salt", 0);
    t->table_size = uint_arg(o, "table_size", 1);
    t->divisor = (int64_t)uint_arg(o, "divisor", 1);
    uint64_t x = uint_arg(o, "x", 1), n = uint_arg(o, "n", 1);
    /* Both bounded by the op table at parse (dpp_arg_t.max). */
    t->x = (uint32_t)x;
    t->n = (uint32_t)n;
    t->has_min = json_object_get(o, "min") != NULL;
    t->has_max = json_object_get(o, "max") != NULL;
    t->min = (float)num(o, "min", 0);
    t->max = (float)num(o, "max", 0);
    t->value = (float)num(o, "value", 0);
    t->mean = (float)num(o, "mean", 0);
    t->std = (float)num(o, "std", 1);
    t->lambda = (float)num(o, "lambda", 0);
    if (t->op == OP_BUCKETIZE) {
        const json_t *borders = json_object_get(o, "borders");
        size_t nb = json_array_size(borders);
        t->borders = sl_alloc(plan->a, nb * sizeof(double));
        if (t->borders == NULL) {
            b->nomem = true;
            return;
        }
        t->num_borders = (uint32_t)nb;
        for (size_t k = 0; k < nb; k++)
            t->borders[k] = json_number_value(json_array_get(borders, k));
    }
    if (t->op == OP_MAP_VOCAB) {
        const char *file = str(o, "file");
        char full[4096];
        const char *dir = b->job->base_dir;
        if (file[0] != '/' && dir != NULL) {
            if ((size_t)snprintf(full, sizeof full, "%s%s", dir, file) >= sizeof full) {
                problem(b, "$.transforms[%zu].file: path too long", i);
                return;
            }
            file = full;
        }
        char path[48];
        snprintf(path, sizeof path, "$.transforms[%zu]", i);
        if (b->check_only) {
            dpp_vocab_check(file, path, b->problems);
            return;
        }
        t->vocab = dpp_vocab_load(file, plan->a, DPP_VOCAB_MAX_ENTRIES, path, b->problems);
        if (t->vocab != NULL) {
            const json_t *def = json_object_get(o, "default");
            t->vocab_default = def != NULL ? (int64_t)json_integer_value(def)
                                           : (int64_t)dpp_vocab_size(t->vocab);
        }
    }
}

static void bind_transforms(bind_t *b)
{
    const json_t *list = b->job->transforms;
    sl_pipeline_plan_t *plan = b->plan;
    size_t n = json_array_size(list);
    if (n == 0) return;
    plan->transforms = sl_calloc(plan->a, n, sizeof(dpp_transform_t));
    if (plan->transforms == NULL) {
        b->nomem = true;
        return;
    }
    plan->num_transforms = (uint32_t)n;
    for (size_t i = 0; i < n && !b->nomem; i++)
        bind_transform(b, i, json_array_get(list, i), &plan->transforms[i]);
}

static void bind_groups(bind_t *b)
{
    const sl_pipeline_job_t *job = b->job;
    for (uint32_t g = 0; g < job->num_dedup_groups; g++) {
        const sl_pipeline_dedup_group_t *grp = &job->dedup_groups[g];
        for (uint32_t k = 0; k < grp->num_features; k++) {
            const char *name = grp->features[k];
            const sl_wh_feature_t *f = sl_wh_schema_find(b->schema, name);
            if (f == NULL)
                problem(b, "$.batch.dedup_groups.%s[%u]: unknown feature '%s'", grp->name, k, name);
            else if (f->kind == SL_WH_DENSE)
                problem(b, "$.batch.dedup_groups.%s[%u]: '%s' is a dense feature; dedup groups "
                           "hold sparse or weighted features",
                        grp->name, k, name);
            else
                add_read(b, name);
        }
    }
}

/* Every name the spec mentions, bounding the read and keep lists. */
static uint32_t mentions(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema)
{
    uint64_t n = (uint64_t)sl_wh_schema_num_features(schema) + job->num_features +
                 json_array_size(job->filters) + 2 * json_array_size(job->transforms) + 1;
    for (uint32_t g = 0; g < job->num_dedup_groups; g++) n += job->dedup_groups[g].num_features;
    return n > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)n;
}

static sl_err_t plan_bind(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                          bool check_only, sl_pipeline_plan_t **out,
                          sl_pipeline_problems_t *problems, sl_error_t *err)
{
    *out = NULL;
    sl_pipeline_problems_t local = {0};
    sl_pipeline_plan_t *plan = sl_calloc(NULL, 1, sizeof *plan);
    if (plan == NULL) return sl_error_set(err, SL_ERR_NOMEM, "job plan: out of memory");
    bind_t b = {plan, job, schema, problems != NULL ? problems : &local, false, check_only, 0};
    uint32_t before = b.problems->count;
    b.read_cap = plan->cap_read = mentions(job, schema);
    plan->read = sl_calloc(NULL, plan->cap_read, sizeof(char *));
    plan->keep = sl_calloc(NULL, plan->cap_read, sizeof(char *));
    plan->weighted = sl_calloc(NULL, plan->cap_read, sizeof(char *));
    if (plan->read == NULL || plan->keep == NULL || plan->weighted == NULL) {
        sl_pipeline_plan_destroy(plan);
        return sl_error_set(err, SL_ERR_NOMEM, "job plan: out of memory");
    }

    /* The projection (or every feature) is read first, in its order. */
    if (job->num_features > 0) {
        for (uint32_t i = 0; i < job->num_features; i++) {
            if (sl_wh_schema_find(schema, job->features[i]) == NULL) {
                problem(&b, "$.source.features[%u]: unknown feature '%s'", i, job->features[i]);
                continue;
            }
            add_read(&b, job->features[i]);
        }
    } else {
        for (uint32_t i = 0; i < sl_wh_schema_num_features(schema); i++)
            add_read(&b, sl_wh_schema_feature(schema, i)->name);
    }
    memcpy(plan->keep, plan->read, plan->num_read * sizeof(char *));
    plan->num_keep = plan->num_read;
    bind_filters(&b);
    bind_transforms(&b);
    bind_groups(&b);

    sl_err_t rc = SL_OK;
    if (b.nomem) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "job plan: out of memory");
    } else if (b.problems->count > before) {
        char what[300];
        snprintf(what, sizeof what, "job '%s'", job->id);
        rc = sl_pipeline_problems_error(b.problems, before, what, err);
    }
    sl_pipeline_problems_free(&local);
    if (rc != SL_OK) {
        sl_pipeline_plan_destroy(plan);
        return rc;
    }
    *out = plan;
    return SL_OK;
}

sl_err_t sl_pipeline_plan_new(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                              sl_pipeline_plan_t **out, sl_pipeline_problems_t *problems,
                              sl_error_t *err)
{
    return plan_bind(job, schema, false, out, problems, err);
}

sl_err_t sl_pipeline_plan_check(const sl_pipeline_job_t *job, const sl_wh_schema_t *schema,
                                sl_pipeline_problems_t *problems, sl_error_t *err)
{
    sl_pipeline_plan_t *plan = NULL;
    sl_err_t rc = plan_bind(job, schema, true, &plan, problems, err);
    sl_pipeline_plan_destroy(plan);
    return rc;
}

const char *const *sl_pipeline_plan_read_features(const sl_pipeline_plan_t *plan, uint32_t *count)
{
    *count = plan->num_read;
    return (const char *const *)plan->read;
}

uint32_t sl_pipeline_plan_filter_columns(const sl_pipeline_plan_t *plan)
{
    uint32_t cols = 0;
    for (uint32_t i = 0; i < plan->num_filters; i++) {
        const dpp_filter_t *f = &plan->filters[i];
        if (f->op == OP_TIMESTAMP_RANGE) cols |= SL_WH_COL_TIMESTAMP;
        if ((f->op == OP_SAMPLE || f->op == OP_NEGATIVE_DOWNSAMPLE) && !f->keep_all)
            cols |= SL_WH_COL_SAMPLE_ID;
    }
    return cols;
}

const char *sl_pipeline_plan_weight_label(const sl_pipeline_plan_t *plan)
{
    return plan->weight_label;
}

sl_err_t sl_pipeline_plan_transform(const sl_pipeline_plan_t *plan, sl_batch_t *batch,
                                    sl_error_t *err)
{
    return dpp_transform_batch(plan, batch, err);
}

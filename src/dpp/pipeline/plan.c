/* Binding a job to a table schema: every name the job's compiled ops use
 * is looked up (features, labels, features created by earlier transforms),
 * kinds are checked, vocabularies loaded, and each op's arguments copied
 * into the structs the hot paths (filter.c, transform*.c) read. The values
 * and their defaults come from the ops as parsed (ops.c); nothing here
 * reads JSON or restates a default. Every problem is listed with its JSON
 * path. */
#include "dpp/pipeline/plan_internal.h"
#include "common/mem.h"
#include "common/suggest.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- owned strings and name lists ---- */

/* " (did you mean 'X'?)" for a feature (label: a label) the schema lacks,
 * or "". NAME_HINT gives it a buffer that lives for the full expression. */
static const char *name_hint(const sl_wh_schema_t *schema, const char *name, bool label, char *buf,
                             size_t cap)
{
    sl_suggest_t sg;
    sl_suggest_init(&sg, name, strlen(name));
    if (label)
        for (uint32_t i = 0; i < sl_wh_schema_num_labels(schema); i++)
            sl_suggest_offer_str(&sg, sl_wh_schema_label(schema, i));
    else
        for (uint32_t i = 0; i < sl_wh_schema_num_features(schema); i++)
            sl_suggest_offer_str(&sg, sl_wh_schema_feature(schema, i)->name);
    return sl_suggest_hint(&sg, "", buf, cap);
}
#define NAME_HINT(schema, name, label) name_hint(schema, name, label, (char[160]){0}, 160)

static const char *own(sl_pipeline_plan_t *plan, const char *s)
{
    if (plan->num_strings == plan->cap_strings &&
        !SL_GROW(plan->a, plan->strings, plan->cap_strings, plan->num_strings + 1, 16))
        return NULL;
    char *d = sl_strdup(plan->a, s);
    if (d == NULL) return NULL;
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
    dpp_decode_maps_free(plan);
    for (uint32_t i = 0; i < plan->num_strings; i++)
        sl_strfree(a, plan->strings[i]);
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

static void bind_filters(bind_t *b)
{
    sl_pipeline_plan_t *plan = b->plan;
    uint32_t n = b->job->num_filters;
    if (n == 0) return;
    plan->filters = sl_calloc(plan->a, n, sizeof(dpp_filter_t));
    if (plan->filters == NULL) {
        b->nomem = true;
        return;
    }
    plan->num_filters = n;
    for (uint32_t i = 0; i < n; i++) {
        const sl_pipeline_op_t *o = &b->job->filters[i];
        dpp_filter_t *f = &plan->filters[i];
        f->op = o->op;
        f->weight = 1.0f;
        if (o->label != NULL) {
            if (sl_wh_schema_find_label(b->schema, o->label) < 0)
                sl_pipeline_problems_add(b->problems, "$.filters[%u].label: unknown label '%s'%s",
                                         i, o->label, NAME_HINT(b->schema, o->label, true));
            f->name = own(plan, o->label);
        }
        if (o->feature != NULL) {
            if (sl_wh_schema_find(b->schema, o->feature) == NULL)
                sl_pipeline_problems_add(b->problems,
                                         "$.filters[%u].feature: unknown feature '%s'%s", i,
                                         o->feature, NAME_HINT(b->schema, o->feature, false));
            else
                add_read(b, o->feature);
            f->name = own(plan, o->feature);
        }
        if ((o->label != NULL || o->feature != NULL) && f->name == NULL) b->nomem = true;
        f->value = o->value;
        f->min = o->min;
        f->max = o->max;
        f->ts_min = o->ts_min;
        f->ts_max = o->ts_max;
        if (f->op == OP_SAMPLE || f->op == OP_NEGATIVE_DOWNSAMPLE) {
            f->seed = o->seed;
            f->keep_all = o->rate >= 1.0;
            /* rate * 2^64, below 2^64 since rate < 1 here. */
            f->threshold = f->keep_all ? UINT64_MAX : (uint64_t)ldexp(o->rate, 64);
            f->weight = (float)(1.0 / o->rate);
        }
        if (f->op == OP_NEGATIVE_DOWNSAMPLE) {
            const char *wl = o->weight_label;
            if (sl_wh_schema_find_label(b->schema, wl) >= 0 ||
                sl_wh_schema_find(b->schema, wl) != NULL)
                sl_pipeline_problems_add(
                    b->problems,
                    "$.filters[%u].weight_label: '%s' is already a column of the table", i, wl);
            else if (plan->weight_label != NULL && strcmp(plan->weight_label, wl) != 0)
                sl_pipeline_problems_add(b->problems,
                                         "$.filters[%u].weight_label: '%s' differs from '%s' of an "
                                         "earlier filter (one weight column per job)",
                                         i, wl, plan->weight_label);
            else if (plan->weight_label == NULL &&
                     (plan->weight_label = (char *)own(plan, wl)) == NULL)
                b->nomem = true;
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

/* Check input name of transform i (key names the JSON member) against
 * the op's input kind (ops.h). */
static bool check_input(bind_t *b, size_t i, const char *key, const char *name, sym_t *out)
{
    const sl_pipeline_op_t *op = &b->job->transforms[i];
    sym_t s = lookup(b, name, i);
    *out = s;
    if (!s.found) {
        /* Created later? Then the order is the problem. */
        for (size_t j = i + 1; j < b->job->num_transforms; j++) {
            const char *later = b->job->transforms[j].output;
            if (later != NULL && strcmp(later, name) == 0) {
                sl_pipeline_problems_add(
                    b->problems,
                    "$.transforms[%zu].%s: feature '%s' is created by a later transform "
                    "($.transforms[%zu])",
                    i, key, name, j);
                return false;
            }
        }
        sl_pipeline_problems_add(b->problems, "$.transforms[%zu].%s: unknown feature '%s'%s", i,
                                 key, name, NAME_HINT(b->schema, name, false));
        return false;
    }
    dpp_input_t want = op->spec->input;
    bool ok = want == IN_DENSE      ? s.kind == SL_WH_DENSE
              : want == IN_WEIGHTED ? s.kind == SL_WH_WEIGHTED
              : want == IN_SPARSE   ? s.kind != SL_WH_DENSE
                                    : true;
    if (!ok) {
        const char *need = want == IN_DENSE      ? "a dense"
                           : want == IN_WEIGHTED ? "a weighted"
                                                 : "a sparse or weighted";
        sl_pipeline_problems_add(b->problems,
                                 "$.transforms[%zu].%s: '%s' is a %s feature; %s needs %s feature",
                                 i, key, name, sl_wh_kind_name(s.kind), op->spec->name, need);
        return false;
    }
    if (s.created_by < 0) add_read(b, name);
    return true;
}

/* The name of the feature transform i creates (given, or the op's default
 * name: both compiled at parse), checked against the schema and the
 * features created before it. */
static const char *output_name(bind_t *b, size_t i, const char *out)
{
    if (sl_wh_schema_find(b->schema, out) != NULL)
        sl_pipeline_problems_add(b->problems,
                                 "$.transforms[%zu].output: '%s' is already a feature of the table",
                                 i, out);
    else if (sl_wh_schema_find_label(b->schema, out) >= 0)
        sl_pipeline_problems_add(
            b->problems, "$.transforms[%zu].output: '%s' is already a label of the table", i, out);
    else if (lookup(b, out, i).found)
        sl_pipeline_problems_add(
            b->problems,
            "$.transforms[%zu].output: '%s' is already created by an earlier transform", i, out);
    const char *s = own(b->plan, out);
    if (s == NULL) b->nomem = true;
    return s;
}

static void bind_transform(bind_t *b, size_t i, dpp_transform_t *t)
{
    sl_pipeline_plan_t *plan = b->plan;
    const sl_pipeline_op_t *o = &b->job->transforms[i];
    t->op = o->op;
    sym_t s0, s1;
    if (t->op == OP_CROSS) {
        const char *a = o->features[0], *c = o->features[1];
        bool ok0 = check_input(b, i, "features[0]", a, &s0);
        bool ok1 = check_input(b, i, "features[1]", c, &s1);
        if (ok0 && ok1 && s0.kind != s1.kind)
            sl_pipeline_problems_add(
                b->problems,
                "$.transforms[%zu].features: cannot cross '%s' (%s) with '%s' (%s): kinds "
                "differ",
                i, a, sl_wh_kind_name(s0.kind), c, sl_wh_kind_name(s1.kind));
        t->in[0] = own(plan, a);
        t->in[1] = own(plan, c);
    } else {
        check_input(b, i, "feature", o->feature, &s0);
        t->in[0] = own(plan, o->feature);
    }
    if (o->output != NULL) t->out = output_name(b, i, o->output);
    if (t->in[0] == NULL || (t->op == OP_CROSS && t->in[1] == NULL)) b->nomem = true;
    t->salt = o->salt;
    t->table_size = o->table_size;
    t->divisor = (int64_t)o->divisor;
    /* Both bounded by the op table at parse. */
    t->x = (uint32_t)o->x;
    t->n = (uint32_t)o->n;
    t->min = (float)o->min;
    t->max = (float)o->max;
    t->value = (float)o->value;
    t->mean = (float)o->mean;
    t->std = (float)o->std;
    t->lambda = (float)o->lambda;
    if (o->borders.n > 0) {
        t->borders = sl_alloc(plan->a, o->borders.n * sizeof(double));
        if (t->borders == NULL) {
            b->nomem = true;
            return;
        }
        t->num_borders = o->borders.n;
        memcpy(t->borders, o->borders.v, o->borders.n * sizeof(double));
    }
    if (t->op == OP_MAP_VOCAB) {
        const char *file = o->file;
        char full[4096];
        const char *dir = b->job->base_dir;
        if (file[0] != '/' && dir != NULL) {
            if ((size_t)snprintf(full, sizeof full, "%s%s", dir, file) >= sizeof full) {
                sl_pipeline_problems_add(b->problems, "$.transforms[%zu].file: path too long", i);
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
        /* The table's default of "default": the vocabulary's size. */
        if (t->vocab != NULL)
            t->vocab_default = sl_pipeline_op_given(o, "default")
                                   ? o->vocab_default
                                   : (int64_t)dpp_vocab_size(t->vocab);
    }
}

static void bind_transforms(bind_t *b)
{
    sl_pipeline_plan_t *plan = b->plan;
    uint32_t n = b->job->num_transforms;
    if (n == 0) return;
    plan->transforms = sl_calloc(plan->a, n, sizeof(dpp_transform_t));
    if (plan->transforms == NULL) {
        b->nomem = true;
        return;
    }
    plan->num_transforms = n;
    for (uint32_t i = 0; i < n && !b->nomem; i++)
        bind_transform(b, i, &plan->transforms[i]);
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
                sl_pipeline_problems_add(b->problems,
                                         "$.batch.dedup_groups.%s[%u]: unknown feature '%s'%s",
                                         grp->name, k, name, NAME_HINT(b->schema, name, false));
            else if (f->kind == SL_WH_DENSE)
                sl_pipeline_problems_add(
                    b->problems,
                    "$.batch.dedup_groups.%s[%u]: '%s' is a dense feature; dedup groups "
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
                 job->num_filters + 2 * (uint64_t)job->num_transforms + 1;
    for (uint32_t g = 0; g < job->num_dedup_groups; g++)
        n += job->dedup_groups[g].num_features;
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
                sl_pipeline_problems_add(
                    b.problems, "$.source.features[%u]: unknown feature '%s'%s", i,
                    job->features[i], NAME_HINT(schema, job->features[i], false));
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
    if (b.nomem || b.problems->nomem) {
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

/* The filter and transform ops of a job spec: one table gives each op's
 * arguments, their types, ranges and defaults, so that parsing (job.c),
 * binding (plan.c) and the reference in docs/JOBS.md agree. */
#include "dpp/pipeline/plan_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define FEATURE(doc) {"feature", ARG_STRING, true, doc}
#define LABEL(doc) {"label", ARG_STRING, true, doc}

static const dpp_op_spec_t ops[] = {
    /* ---- filters (ANDed, in spec order) ---- */
    {"label_equals",
     OP_LABEL_EQUALS,
     true,
     "keep rows whose label equals value",
     {LABEL("label column"), {"value", ARG_NUMBER, true, "value compared (as float32)"}}},
    {"label_range",
     OP_LABEL_RANGE,
     true,
     "keep rows with min <= label <= max",
     {LABEL("label column"),
      {"min", ARG_NUMBER, false, "lower bound (default -inf)"},
      {"max", ARG_NUMBER, false, "upper bound (default +inf)"}}},
    {"has_feature",
     OP_HAS_FEATURE,
     true,
     "keep rows where the feature is present: a non-empty id list, a dense value not NaN",
     {FEATURE("any feature")}},
    {"timestamp_range",
     OP_TIMESTAMP_RANGE,
     true,
     "keep rows with min <= timestamp <= max",
     {{"min", ARG_INT, false, "lower bound (default INT64_MIN)"},
      {"max", ARG_INT, false, "upper bound (default INT64_MAX)"}}},
    {"sample",
     OP_SAMPLE,
     true,
     "keep a rate fraction of rows: XXH3_64(sample id, seed) < rate * 2^64",
     {{"rate", ARG_RATE, true, "fraction kept, in (0, 1]"},
      {"seed", ARG_UINT, false, "hash seed (default 0)"}}},
    {"negative_downsample",
     OP_NEGATIVE_DOWNSAMPLE,
     true,
     "keep rows with label > 0 (weight 1) and a rate fraction of the others (weight 1/rate)",
     {LABEL("label column telling positives (> 0) from negatives"),
      {"rate", ARG_RATE, true, "fraction of negatives kept, in (0, 1]"},
      {"seed", ARG_UINT, false, "hash seed (default 0)"},
      {"weight_label", ARG_STRING, false,
       "label column added for the weights (default \"weight\")"}}},
    /* ---- transforms (in spec order) ---- */
    {"sigrid_hash",
     OP_SIGRID_HASH,
     false,
     "id -> XXH3_64(8 little-endian bytes of id, seed salt) % table_size",
     {FEATURE("sparse or weighted"),
      {"table_size", ARG_POS_INT, true, "ids land in [0, table_size)"},
      {"salt", ARG_UINT, false, "hash seed (default 0)"}}},
    {"modulo",
     OP_MODULO,
     false,
     "id -> id mod divisor, Euclidean (never negative)",
     {FEATURE("sparse or weighted"), {"divisor", ARG_POS_INT, true, "divisor"}}},
    {"first_x",
     OP_FIRST_X,
     false,
     "keep the first x ids of every list (and their weights)",
     {FEATURE("sparse or weighted"), {"x", ARG_POS_INT32, true, "ids kept"}}},
    {"dedup_ids",
     OP_DEDUP_IDS,
     false,
     "drop repeated ids within a list, keeping first occurrences in order (and their weights)",
     {FEATURE("sparse or weighted")}},
    {"cross",
     OP_CROSS,
     false,
     "new feature: every pair (a, b) of the two lists, a-major, hashed as XXH3_64(16 bytes "
     "a, b; seed salt) % table_size",
     {{"features", ARG_STRING2, true, "two features of one kind (sparse or weighted)"},
      {"table_size", ARG_POS_INT, true, "ids land in [0, table_size)"},
      {"output", ARG_NAME, false, "name of the new feature (default \"A_x_B\")"},
      {"salt", ARG_UINT, false, "hash seed (default 0)"}}},
    {"ngram",
     OP_NGRAM,
     false,
     "new feature: the len-n+1 runs of n consecutive ids, each hashed as XXH3_64(8n bytes; "
     "seed salt) % table_size",
     {FEATURE("sparse or weighted"),
      {"n", ARG_NGRAM_N, true, "ids per n-gram (at most 1024)"},
      {"table_size", ARG_POS_INT, true, "ids land in [0, table_size)"},
      {"output", ARG_NAME, false, "name of the new feature (default \"F_Ngram\")"},
      {"salt", ARG_UINT, false, "hash seed (default 0)"}}},
    {"map_vocab",
     OP_MAP_VOCAB,
     false,
     "id -> its line number (from 0) in file, or default when absent",
     {FEATURE("sparse or weighted"),
      {"file", ARG_STRING, true, "one decimal id per line; relative to the spec file's directory"},
      {"default", ARG_INT, false, "index of unknown ids (default: the vocabulary size)"}}},
    {"fill_missing",
     OP_FILL_MISSING,
     false,
     "NaN (missing) -> value",
     {FEATURE("dense"), {"value", ARG_NUMBER, true, "replacement"}}},
    {"clamp",
     OP_CLAMP,
     false,
     "x -> min(max(x, min), max); NaN stays NaN",
     {FEATURE("dense"),
      {"min", ARG_NUMBER, false, "lower bound (default none)"},
      {"max", ARG_NUMBER, false, "upper bound (default none)"}}},
    {"log1p", OP_LOG1P, false, "x -> log(1 + max(x, 0)); NaN stays NaN", {FEATURE("dense")}},
    {"normalize",
     OP_NORMALIZE,
     false,
     "x -> (x - mean) / std; NaN stays NaN",
     {FEATURE("dense"),
      {"mean", ARG_NUMBER, false, "default 0"},
      {"std", ARG_POS_NUMBER, false, "> 0, default 1"}}},
    {"boxcox",
     OP_BOXCOX,
     false,
     "x > 0 -> (x^lambda - 1) / lambda (log x when lambda = 0); x <= 0 and NaN -> NaN",
     {FEATURE("dense"), {"lambda", ARG_NUMBER, true, "the Box-Cox lambda"}}},
    {"bucketize",
     OP_BUCKETIZE,
     false,
     "new sparse feature: one id = number of borders <= x (numpy.digitize); NaN -> empty list",
     {FEATURE("dense"),
      {"borders", ARG_BORDERS, true, "strictly increasing"},
      {"output", ARG_NAME, false, "name of the new feature (default \"F_bucket\")"}}},
    {"clamp_weights",
     OP_CLAMP_WEIGHTS,
     false,
     "weight -> min(max(w, min), max) on a weighted feature",
     {FEATURE("weighted"),
      {"min", ARG_NUMBER, false, "lower bound (default none)"},
      {"max", ARG_NUMBER, false, "upper bound (default none)"}}},
};

#define NUM_OPS (sizeof ops / sizeof ops[0])

const dpp_op_spec_t *dpp_op_find(const char *name, bool filter)
{
    for (size_t i = 0; i < NUM_OPS; i++)
        if (ops[i].filter == filter && strcmp(ops[i].name, name) == 0) return &ops[i];
    return NULL;
}

const dpp_op_spec_t *dpp_ops(uint32_t *count)
{
    *count = (uint32_t)NUM_OPS;
    return ops;
}

static const char *type_text(dpp_arg_type_t t)
{
    switch (t) {
    case ARG_STRING: return "must be a non-empty string";
    case ARG_STRING2: return "must be an array of two non-empty strings";
    case ARG_NUMBER: return "must be a finite number";
    case ARG_POS_NUMBER: return "must be a number > 0";
    case ARG_RATE: return "must be a number in (0, 1]";
    case ARG_UINT: return "must be an integer >= 0";
    case ARG_POS_INT: return "must be a positive integer";
    case ARG_INT: return "must be an integer";
    case ARG_BORDERS: return "must be a non-empty array of strictly increasing finite numbers";
    case ARG_NAME: return "must be a non-empty string of at most 255 bytes";
    case ARG_POS_INT32: return "must be an integer in [1, 2147483647]";
    case ARG_NGRAM_N: return "must be an integer in [1, 1024]";
    }
    return "has a bad type";
}

static bool is_name(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) > 0;
}

/* Whether v fits type t. */
static bool arg_ok(const json_t *v, dpp_arg_type_t t)
{
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    switch (t) {
    case ARG_STRING: return is_name(v);
    case ARG_STRING2:
        return json_is_array(v) && json_array_size(v) == 2 && is_name(json_array_get(v, 0)) &&
               is_name(json_array_get(v, 1));
    case ARG_NUMBER: return isfinite(d);
    case ARG_POS_NUMBER: return isfinite(d) && d > 0;
    case ARG_RATE: return d > 0 && d <= 1;
    case ARG_UINT: return json_is_integer(v) && json_integer_value(v) >= 0;
    case ARG_POS_INT: return json_is_integer(v) && json_integer_value(v) >= 1;
    case ARG_INT: return json_is_integer(v);
    case ARG_NAME: return is_name(v) && json_string_length(v) <= SL_WH_NAME_MAX;
    case ARG_POS_INT32:
        return json_is_integer(v) && json_integer_value(v) >= 1 &&
               json_integer_value(v) <= INT32_MAX;
    case ARG_NGRAM_N:
        return json_is_integer(v) && json_integer_value(v) >= 1 &&
               json_integer_value(v) <= DPP_NGRAM_MAX;
    case ARG_BORDERS: {
        if (!json_is_array(v) || json_array_size(v) == 0) return false;
        double prev = -INFINITY;
        size_t i;
        const json_t *b;
        json_array_foreach(v, i, b)
        {
            double x = json_is_number(b) ? json_number_value(b) : NAN;
            if (!isfinite(x) || !(x > prev)) return false;
            prev = x;
        }
        return true;
    }
    }
    return false;
}

static double num(const json_t *obj, const char *key, double def)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

bool dpp_check_op(const json_t *obj, bool filter, const char *path,
                  sl_pipeline_problems_t *problems)
{
    const char *what = filter ? "filter" : "transform";
    if (!json_is_object(obj))
        return sl_pipeline_problems_add(problems, "%s: must be an object with an \"op\"", path);
    const json_t *opv = json_object_get(obj, "op");
    if (opv == NULL) return sl_pipeline_problems_add(problems, "%s.op: missing (required)", path);
    if (!json_is_string(opv))
        return sl_pipeline_problems_add(problems, "%s.op: must be a string", path);
    const dpp_op_spec_t *op = dpp_op_find(json_string_value(opv), filter);
    if (op == NULL) {
        const dpp_op_spec_t *other = dpp_op_find(json_string_value(opv), !filter);
        return sl_pipeline_problems_add(problems, "%s.op: unknown %s '%s'%s", path, what,
                                        json_string_value(opv),
                                        other != NULL ? (filter ? " (it is a transform)"
                                                           : " (it is a filter)")
                                                 : "");
    }
    bool ok = true;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (strcmp(key, "op") == 0) continue;
        const dpp_arg_t *arg = NULL;
        for (int i = 0; i < DPP_MAX_ARGS && op->args[i].name != NULL; i++)
            if (strcmp(op->args[i].name, key) == 0) arg = &op->args[i];
        if (arg == NULL)
            ok &= sl_pipeline_problems_add(problems, "%s.%s: unknown key for %s '%s'", path, key,
                                           what, op->name);
        else if (!arg_ok(v, arg->type))
            ok &= sl_pipeline_problems_add(problems, "%s.%s: %s", path, key, type_text(arg->type));

    }
    for (int i = 0; i < DPP_MAX_ARGS && op->args[i].name != NULL; i++)
        if (op->args[i].required && json_object_get(obj, op->args[i].name) == NULL)
            ok &= sl_pipeline_problems_add(problems, "%s.%s: missing (required by %s '%s')", path,
                                           op->args[i].name, what, op->name);
    /* Rules across arguments. */
    switch (op->op) {
    case OP_LABEL_RANGE:
    case OP_CLAMP:
    case OP_CLAMP_WEIGHTS:
    case OP_TIMESTAMP_RANGE: {
        const json_t *lo = json_object_get(obj, "min"), *hi = json_object_get(obj, "max");
        if (op->op != OP_TIMESTAMP_RANGE && lo == NULL && hi == NULL)
            ok &= sl_pipeline_problems_add(problems, "%s: needs min, max or both", path);
        if (json_is_integer(lo) && json_is_integer(hi)) {
            if (json_integer_value(lo) > json_integer_value(hi))
                ok &= sl_pipeline_problems_add(problems, "%s: min must be <= max", path);
        } else if (num(obj, "min", -INFINITY) > num(obj, "max", INFINITY)) {
            ok &= sl_pipeline_problems_add(problems, "%s: min must be <= max", path);
        }
        break;
    }
    default: break;
    }
    return ok;
}

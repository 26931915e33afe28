/* The filter and transform ops of a job spec: one table gives each op's
 * arguments (type, range, default, meaning), and each op object of a spec
 * is compiled through it once into an sl_pipeline_op_t. Parsing (spec.c)
 * calls the compiler, binding (plan.c) reads the compiled structs, and
 * docs/JOBS.md's op tables are printed from this table (spec_doc.c). */
#include "dpp/pipeline/ops.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "common/mem.h"
#include "common/suggest.h"
#include "sluice/alloc.h"
#include "warehouse/warehouse.h"

#define AT(field) offsetof(sl_pipeline_op_t, field)
#define REQUIRED(name, type, field, doc)                                                           \
    {                                                                                              \
        name, type, DEF_REQUIRED, {0}, AT(field), NULL, doc                                        \
    }
#define OPTIONAL(name, type, field, value, def_doc, doc)                                           \
    {                                                                                              \
        name, type, DEF_VALUE, {value}, AT(field), def_doc, doc                                    \
    }
#define FEATURE(doc) REQUIRED("feature", ARG_STRING, feature, doc)
#define LABEL(doc) REQUIRED("label", ARG_STRING, label, doc)
#define SALT OPTIONAL("salt", ARG_UINT, salt, .u = 0, NULL, "hash seed")
#define TABLE_SIZE REQUIRED("table_size", ARG_POS_INT, table_size, "ids land in [0, table_size)")
#define OUTPUT(template)                                                                           \
    {                                                                                              \
        "output", ARG_NAME, DEF_NAME, {.s = template}, AT(output), NULL, "name of the new feature" \
    }
/* min and max of a number range: no bound unless given */
#define BOUNDS(what)                                                                               \
    OPTIONAL("min", ARG_NUMBER, min, .d = -INFINITY, "no bound", "lower bound of " what),          \
        OPTIONAL("max", ARG_NUMBER, max, .d = INFINITY, "no bound", "upper bound of " what)

static const dpp_op_spec_t ops[] = {
    /* ---- filters (ANDed, in spec order) ---- */
    {"label_equals",
     OP_LABEL_EQUALS,
     true,
     IN_NONE,
     0,
     "rows whose label equals `value` (compared as float32)",
     {LABEL("label column"), REQUIRED("value", ARG_NUMBER, value, "value compared")}},
    {"label_range",
     OP_LABEL_RANGE,
     true,
     IN_NONE,
     DPP_RULE_NEEDS_BOUND | DPP_RULE_MIN_LE_MAX,
     "rows with `min <= label <= max` (inclusive; NaN fails)",
     {LABEL("label column"), BOUNDS("the label")}},
    {"has_feature",
     OP_HAS_FEATURE,
     true,
     IN_ANY,
     0,
     "rows where the feature is present: a non-empty id list, or a dense value that is not NaN",
     {FEATURE("any feature")}},
    {"timestamp_range",
     OP_TIMESTAMP_RANGE,
     true,
     IN_NONE,
     DPP_RULE_MIN_LE_MAX,
     "rows with `min <= timestamp <= max` (inclusive, int64)",
     {OPTIONAL("min", ARG_INT, ts_min, .i = INT64_MIN, "no bound", "lower bound"),
      OPTIONAL("max", ARG_INT, ts_max, .i = INT64_MAX, "no bound", "upper bound")}},
    {"sample",
     OP_SAMPLE,
     true,
     IN_NONE,
     0,
     "rows with `XXH3_64(sample id as 8 LE bytes, seed) < rate * 2^64`; `rate` 1 keeps all",
     {REQUIRED("rate", ARG_RATE, rate, "fraction of rows kept"),
      OPTIONAL("seed", ARG_UINT, seed, .u = 0, NULL, "hash seed")}},
    {"negative_downsample",
     OP_NEGATIVE_DOWNSAMPLE,
     true,
     IN_NONE,
     0,
     "every row with label > 0 (weight 1), and the others with the `sample` rule (weight "
     "`1/rate`)",
     {LABEL("label column telling positives (> 0) from negatives"),
      REQUIRED("rate", ARG_RATE, rate, "fraction of negatives kept"),
      OPTIONAL("seed", ARG_UINT, seed, .u = 0, NULL, "hash seed"),
      OPTIONAL("weight_label", ARG_STRING, weight_label, .s = "weight", NULL,
               "label column added for the weights")}},
    /* ---- transforms (in spec order) ---- */
    {"sigrid_hash",
     OP_SIGRID_HASH,
     false,
     IN_SPARSE,
     0,
     "id → XXH3_64(8 LE bytes of id, salt) % table_size",
     {FEATURE("the feature"), TABLE_SIZE, SALT}},
    {"modulo",
     OP_MODULO,
     false,
     IN_SPARSE,
     0,
     "id → Euclidean id mod divisor (never negative: -1 mod 7 = 6)",
     {FEATURE("the feature"), REQUIRED("divisor", ARG_POS_INT, divisor, "divisor")}},
    {"first_x",
     OP_FIRST_X,
     false,
     IN_SPARSE,
     0,
     "keep the first x ids of each list (and their weights)",
     {FEATURE("the feature"), REQUIRED("x", ARG_POS_INT32, x, "ids kept per list")}},
    {"dedup_ids",
     OP_DEDUP_IDS,
     false,
     IN_SPARSE,
     0,
     "drop repeated ids within a list, first occurrences kept in order, each with its weight",
     {FEATURE("the feature")}},
    {"cross",
     OP_CROSS,
     false,
     IN_SPARSE,
     0,
     "new feature: for each row every pair (a_i, b_j), a-major, hashed as XXH3_64(16 bytes a_i "
     "then b_j, salt) % table_size; empty when either list is empty; weights ignored",
     {REQUIRED("features", ARG_STRING2, features, "[a, b]: two features of one kind"), TABLE_SIZE,
      SALT, OUTPUT("{features[0]}_x_{features[1]}")}},
    {"ngram",
     OP_NGRAM,
     false,
     IN_SPARSE,
     0,
     "new feature: the len-n+1 runs of n consecutive ids, each hashed as XXH3_64(8n bytes, salt) "
     "% table_size; empty when len < n",
     {FEATURE("the feature"), REQUIRED("n", ARG_NGRAM_N, n, "ids per n-gram"), TABLE_SIZE, SALT,
      OUTPUT("{feature}_{n}gram")}},
    {"map_vocab",
     OP_MAP_VOCAB,
     false,
     IN_SPARSE,
     0,
     "id → its line number (from 0) in `file`, `default` when absent. The file holds one "
     "decimal int64 per line, no blanks, no repeats, at most 2^26 lines and 512 MiB (a larger "
     "file, or one that is not a regular file, is refused before a byte of it is read); a "
     "relative path resolves against the spec file's directory. Loaded at plan time; problems "
     "name the file and line, never quote its content.",
     {FEATURE("the feature"),
      REQUIRED("file", ARG_STRING, file, "the vocabulary"),
      {"default",
       ARG_INT,
       DEF_BOUND,
       {0},
       AT(vocab_default),
       "the vocabulary size",
       "index of ids not in the vocabulary"}}},
    {"fill_missing",
     OP_FILL_MISSING,
     false,
     IN_DENSE,
     0,
     "NaN (missing) → value",
     {FEATURE("the feature"), REQUIRED("value", ARG_NUMBER, value, "replacement")}},
    {"clamp",
     OP_CLAMP,
     false,
     IN_DENSE,
     DPP_RULE_NEEDS_BOUND | DPP_RULE_MIN_LE_MAX,
     "x → min(max(x, min), max); NaN stays NaN",
     {FEATURE("the feature"), BOUNDS("x")}},
    {"log1p",
     OP_LOG1P,
     false,
     IN_DENSE,
     0,
     "x → log1p(max(x, 0)); NaN stays NaN, -0 stays -0, +inf stays +inf. Computed in double "
     "precision (a vectorised series, not libm) and rounded to float32: within 1 ulp of "
     "`(float)log1p((double)x)` for every float x (checked exhaustively over all 2^32 inputs "
     "when written: 99.9999 % equal, the rest 1 ulp apart; `transform_test` checks random and "
     "edge inputs)",
     {FEATURE("the feature")}},
    {"normalize",
     OP_NORMALIZE,
     false,
     IN_DENSE,
     0,
     "x → (x - mean) / std in float32; NaN stays NaN",
     {FEATURE("the feature"), OPTIONAL("mean", ARG_NUMBER, mean, .d = 0, NULL, "mean"),
      OPTIONAL("std", ARG_POS_NUMBER, std, .d = 1, NULL, "standard deviation")}},
    {"boxcox",
     OP_BOXCOX,
     false,
     IN_DENSE,
     0,
     "x > 0 → (x^λ - 1)/λ, or log x when λ = 0 (float32); **x <= 0 and NaN → NaN** (Box-Cox is "
     "undefined there: clamp first, or fill_missing after)",
     {FEATURE("the feature"), REQUIRED("lambda", ARG_NUMBER, lambda, "λ")}},
    {"bucketize",
     OP_BUCKETIZE,
     false,
     IN_DENSE,
     0,
     "new sparse feature with one id per row = number of borders <= x (numpy.digitize, "
     "right=False); NaN → empty list",
     {FEATURE("the feature"), REQUIRED("borders", ARG_BORDERS, borders, "bucket borders"),
      OUTPUT("{feature}_bucket")}},
    {"clamp_weights",
     OP_CLAMP_WEIGHTS,
     false,
     IN_WEIGHTED,
     DPP_RULE_NEEDS_BOUND | DPP_RULE_MIN_LE_MAX,
     "each weight → min(max(w, min), max)",
     {FEATURE("the feature"), BOUNDS("the weights")}},
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

int dpp_op_arg(const dpp_op_spec_t *spec, const char *name)
{
    for (int i = 0; i < DPP_MAX_ARGS && spec->args[i].name != NULL; i++)
        if (strcmp(spec->args[i].name, name) == 0) return i;
    return -1;
}

bool sl_pipeline_op_given(const sl_pipeline_op_t *op, const char *name)
{
    int k = dpp_op_arg(op->spec, name);
    return k >= 0 && (op->given & (1u << k)) != 0;
}

const char *dpp_arg_type_text(dpp_arg_type_t t)
{
    switch (t) {
    case ARG_STRING:
        return "a non-empty string";
    case ARG_STRING2:
        return "an array of two non-empty strings";
    case ARG_NUMBER:
        return "a finite number";
    case ARG_POS_NUMBER:
        return "a number > 0";
    case ARG_RATE:
        return "a number in (0, 1]";
    case ARG_UINT:
        return "an integer >= 0";
    case ARG_POS_INT:
        return "a positive integer";
    case ARG_INT:
        return "an integer";
    case ARG_BORDERS:
        return "a non-empty array of strictly increasing finite numbers";
    case ARG_NAME:
        return "a non-empty string of at most 255 bytes";
    case ARG_POS_INT32:
        return "an integer in [1, 2147483647]";
    case ARG_NGRAM_N:
        return "an integer in [1, 1024]";
    }
    return "of a known type";
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
    case ARG_STRING:
        return is_name(v);
    case ARG_STRING2:
        return json_is_array(v) && json_array_size(v) == 2 && is_name(json_array_get(v, 0)) &&
               is_name(json_array_get(v, 1));
    case ARG_NUMBER:
        return isfinite(d);
    case ARG_POS_NUMBER:
        return isfinite(d) && d > 0;
    case ARG_RATE:
        return d > 0 && d <= 1;
    case ARG_UINT:
        return json_is_integer(v) && json_integer_value(v) >= 0;
    case ARG_POS_INT:
        return json_is_integer(v) && json_integer_value(v) >= 1;
    case ARG_INT:
        return json_is_integer(v);
    case ARG_NAME:
        return is_name(v) && json_string_length(v) <= SL_WH_NAME_MAX;
    case ARG_POS_INT32:
        return json_is_integer(v) && json_integer_value(v) >= 1 &&
               json_integer_value(v) <= INT32_MAX;
    case ARG_NGRAM_N:
        return json_is_integer(v) && json_integer_value(v) >= 1 &&
               json_integer_value(v) <= DPP_NGRAM_MAX;
    case ARG_BORDERS: {
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > UINT32_MAX)
            return false;
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

void sl_pipeline_op_clear(sl_pipeline_op_t *op)
{
    if (op == NULL) return;
    char *strings[] = {op->feature, op->label, op->features[0], op->features[1],
                       op->output,  op->file,  op->weight_label};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
        sl_strfree(NULL, strings[i]);
    if (op->borders.v != NULL) sl_free(NULL, op->borders.v, op->borders.n * sizeof(double));
    memset(op, 0, sizeof *op);
}

/* Store the value v (of the argument's type, already checked) or, with v
 * NULL, the argument's default value. @return false when out of memory. */
static bool store(sl_pipeline_op_t *op, const dpp_arg_t *arg, const json_t *v)
{
    void *at = (char *)op + arg->offset;
    switch (arg->type) {
    case ARG_STRING:
    case ARG_NAME: {
        const char *s = v != NULL ? json_string_value(v) : arg->def.s;
        return (*(char **)at = sl_strdup(NULL, s)) != NULL;
    }
    case ARG_STRING2: {
        char **pair = at;
        pair[0] = sl_strdup(NULL, json_string_value(json_array_get(v, 0)));
        pair[1] = sl_strdup(NULL, json_string_value(json_array_get(v, 1)));
        return pair[0] != NULL && pair[1] != NULL;
    }
    case ARG_NUMBER:
    case ARG_POS_NUMBER:
    case ARG_RATE:
        *(double *)at = v != NULL ? json_number_value(v) : arg->def.d;
        return true;
    case ARG_UINT:
    case ARG_POS_INT:
    case ARG_POS_INT32:
    case ARG_NGRAM_N:
        *(uint64_t *)at = v != NULL ? (uint64_t)json_integer_value(v) : arg->def.u;
        return true;
    case ARG_INT:
        *(int64_t *)at = v != NULL ? (int64_t)json_integer_value(v) : arg->def.i;
        return true;
    case ARG_BORDERS: {
        dpp_borders_t *b = at;
        size_t n = json_array_size(v);
        if ((b->v = sl_alloc(NULL, n * sizeof(double))) == NULL) return false;
        b->n = (uint32_t)n;
        for (size_t k = 0; k < n; k++)
            b->v[k] = json_number_value(json_array_get(v, k));
        return true;
    }
    }
    return true;
}

/* Compiling state: the problems (those of this op from before on), the
 * keys present, and memory. */
typedef struct compile {
    sl_pipeline_problems_t *problems;
    const char *path;
    uint32_t before;  /* problems->reported when this op began */
    uint32_t present; /* bit k: args[k] is a key of the object (valid or not) */
    bool nomem;
} compile_t;

/* Has this op a problem? (Counted even past the list's cap.) */
static bool bad(const compile_t *c)
{
    return c->problems->reported != c->before;
}

/* The default name of a created feature: template with every "{arg}" or
 * "{arg[i]}" replaced by that (compiled) argument. @return false when it
 * does not fit out (cap bytes with the NUL). */
static bool expand_name(const sl_pipeline_op_t *op, const char *template, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (const char *p = template; *p != '\0';) {
        char piece[32];
        const char *text = piece;
        if (*p != '{') {
            piece[0] = *p++;
            piece[1] = '\0';
        } else {
            /* the table's templates are well formed: "{name}" or "{name[i]}" */
            const char *end = strchr(p, '}');
            char name[32];
            size_t n = (size_t)(end - p - 1);
            memcpy(name, p + 1, n);
            name[n] = '\0';
            p = end + 1;
            unsigned index = 0;
            char *bracket = strchr(name, '[');
            if (bracket != NULL) {
                index = (unsigned)(bracket[1] - '0');
                *bracket = '\0';
            }
            const dpp_arg_t *arg = &op->spec->args[dpp_op_arg(op->spec, name)];
            const void *at = (const char *)op + arg->offset;
            if (arg->type == ARG_STRING2)
                text = ((char *const *)at)[index];
            else if (arg->type == ARG_STRING || arg->type == ARG_NAME)
                text = *(char *const *)at;
            else
                snprintf(piece, sizeof piece, "%llu", (unsigned long long)*(const uint64_t *)at);
        }
        size_t n = strlen(text);
        if (len + n >= cap) return false;
        memcpy(out + len, text, n + 1);
        len += n;
    }
    return true;
}

/* The rules across arguments: "needs" looks at the keys present, the
 * order at the values compiled (both given and valid). */
static void check_rules(compile_t *c, const sl_pipeline_op_t *op)
{
    int lo = dpp_op_arg(op->spec, "min"), hi = dpp_op_arg(op->spec, "max");
    if (lo < 0 || hi < 0) return;
    if ((op->spec->rules & DPP_RULE_NEEDS_BOUND) && !(c->present & ((1u << lo) | (1u << hi))))
        sl_pipeline_problems_add(c->problems, "%s: needs min, max or both", c->path);
    if ((op->spec->rules & DPP_RULE_MIN_LE_MAX) && (op->given & (1u << lo)) &&
        (op->given & (1u << hi))) {
        bool inverted =
            op->spec->args[lo].type == ARG_INT ? op->ts_min > op->ts_max : op->min > op->max;
        if (inverted) sl_pipeline_problems_add(c->problems, "%s: min must be <= max", c->path);
    }
}

bool sl_pipeline_op_compile(const json_t *obj, bool filter, const char *path, sl_pipeline_op_t *out,
                            sl_pipeline_problems_t *problems)
{
    memset(out, 0, sizeof *out);
    compile_t c = {problems, path, problems->reported, 0, false};
    const char *what = filter ? "filter" : "transform";
    const json_t *opv = json_object_get(obj, "op");
    if (!json_is_object(obj)) {
        sl_pipeline_problems_add(problems, "%s: must be an object with an \"op\"", path);
        return true;
    }
    if (opv == NULL || !json_is_string(opv)) {
        sl_pipeline_problems_add(problems, "%s.op: %s", path,
                                 opv == NULL ? "missing (required)" : "must be a string");
        return true;
    }
    const dpp_op_spec_t *spec = dpp_op_find(json_string_value(opv), filter);
    if (spec == NULL) {
        const char *name = json_string_value(opv);
        bool other = dpp_op_find(name, !filter) != NULL;
        sl_suggest_t sg;
        sl_suggest_init(&sg, name, strlen(name));
        for (size_t i = 0; i < NUM_OPS; i++)
            if (ops[i].filter == filter) sl_suggest_offer_str(&sg, ops[i].name);
        char hint[160];
        sl_pipeline_problems_add(problems, "%s.op: unknown %s '%s'%s", path, what, name,
                                 !other   ? sl_suggest_hint(&sg, "", hint, sizeof hint)
                                 : filter ? " (it is a transform)"
                                          : " (it is a filter)");
        return true;
    }
    out->spec = spec;
    out->op = spec->op;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (strcmp(key, "op") == 0) continue;
        int k = dpp_op_arg(spec, key);
        if (k < 0) {
            sl_suggest_t sg;
            sl_suggest_init(&sg, key, strlen(key));
            for (int i = 0; i < DPP_MAX_ARGS && spec->args[i].name != NULL; i++)
                sl_suggest_offer_str(&sg, spec->args[i].name);
            char hint[160];
            sl_pipeline_problems_add(problems, "%s.%s: unknown key for %s '%s'%s", path, key, what,
                                     spec->name, sl_suggest_hint(&sg, "", hint, sizeof hint));
            continue;
        }
        c.present |= 1u << k;
        if (!arg_ok(v, spec->args[k].type)) {
            sl_pipeline_problems_add(problems, "%s.%s: must be %s", path, key,
                                     dpp_arg_type_text(spec->args[k].type));
            continue;
        }
        if (!store(out, &spec->args[k], v)) c.nomem = true;
        out->given |= 1u << k;
    }
    for (int k = 0; k < DPP_MAX_ARGS && spec->args[k].name != NULL; k++) {
        const dpp_arg_t *arg = &spec->args[k];
        if (c.present & (1u << k)) continue;
        if (arg->how == DEF_REQUIRED)
            sl_pipeline_problems_add(problems, "%s.%s: missing (required by %s '%s')", path,
                                     arg->name, what, spec->name);
        else if (arg->how == DEF_VALUE && !store(out, arg, NULL))
            c.nomem = true;
    }
    check_rules(&c, out);
    /* Default names of created features, from inputs that compiled. */
    for (int k = 0; k < DPP_MAX_ARGS && spec->args[k].name != NULL && !bad(&c) && !c.nomem; k++) {
        const dpp_arg_t *arg = &spec->args[k];
        if (arg->how != DEF_NAME || (out->given & (1u << k))) continue;
        char name[SL_WH_NAME_MAX + 1];
        if (!expand_name(out, arg->def.s, name, sizeof name))
            sl_pipeline_problems_add(problems, "%s.%s: name longer than %d bytes", path, arg->name,
                                     SL_WH_NAME_MAX);
        else if ((*(char **)((char *)out + arg->offset) = sl_strdup(NULL, name)) == NULL)
            c.nomem = true;
    }
    return !c.nomem;
}

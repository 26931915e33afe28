/* Private to src/dpp/pipeline: the table of filter and transform ops and
 * the plain structs a job spec's op objects are compiled into. The table
 * is the one place an op's arguments are defined (name, type, range,
 * default, meaning): parsing (spec.c) compiles every op object through it
 * once, binding (plan.c) reads only the compiled structs, and
 * docs/JOBS.md's op tables are printed from it (spec_doc.c). */
#ifndef SLUICE_DPP_PIPELINE_OPS_H
#define SLUICE_DPP_PIPELINE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "dpp/pipeline/job.h"

typedef enum dpp_op {
    /* filters */
    OP_LABEL_EQUALS,
    OP_LABEL_RANGE,
    OP_HAS_FEATURE,
    OP_TIMESTAMP_RANGE,
    OP_SAMPLE,
    OP_NEGATIVE_DOWNSAMPLE,
    /* transforms */
    OP_SIGRID_HASH,
    OP_MODULO,
    OP_FIRST_X,
    OP_DEDUP_IDS,
    OP_CROSS,
    OP_NGRAM,
    OP_MAP_VOCAB,
    OP_FILL_MISSING,
    OP_CLAMP,
    OP_LOG1P,
    OP_NORMALIZE,
    OP_BOXCOX,
    OP_BUCKETIZE,
    OP_CLAMP_WEIGHTS
} dpp_op_t;

/* The type of an argument: what a value must be (checked at parse) and
 * where it is stored in sl_pipeline_op_t. */
typedef enum dpp_arg_type {
    ARG_STRING,     /* non-empty string -> char * */
    ARG_STRING2,    /* array of exactly two non-empty strings -> char *[2] */
    ARG_NUMBER,     /* finite number -> double */
    ARG_POS_NUMBER, /* finite number > 0 -> double */
    ARG_RATE,       /* number in (0, 1] -> double */
    ARG_UINT,       /* integer in [0, 2^63) -> uint64_t */
    ARG_POS_INT,    /* integer in [1, 2^63) -> uint64_t */
    ARG_INT,        /* any int64 -> int64_t */
    ARG_BORDERS,    /* non-empty array of finite numbers, strictly increasing -> dpp_borders_t */
    /* Bounded kinds: limits that need no schema are checked at parse, with
     * the types, so a spec with other problems still reports them. */
    ARG_NAME, /* non-empty string of at most SL_WH_NAME_MAX bytes (a created feature) -> char * */
    ARG_POS_INT32, /* integer in [1, 2^31) -> uint64_t */
    ARG_NGRAM_N    /* integer in [1, DPP_NGRAM_MAX] -> uint64_t */
} dpp_arg_type_t;

/* How an argument gets its value when the op object does not give it. */
typedef enum dpp_arg_default {
    DEF_REQUIRED, /* it must be given */
    DEF_VALUE,    /* def holds the value (of the argument's type) */
    DEF_NAME,     /* def.s is a template of a created feature's name: "{feature}_bucket",
                     "{features[0]}_x_{features[1]}"; braces name other arguments */
    DEF_BOUND     /* found when the plan binds (def_doc says how); the op's given mask tells */
} dpp_arg_default_t;

typedef struct dpp_arg {
    const char *name;
    dpp_arg_type_t type;
    dpp_arg_default_t how;
    union {
        double d;      /* ARG_NUMBER, ARG_POS_NUMBER, ARG_RATE */
        uint64_t u;    /* ARG_UINT, ARG_POS_INT, ARG_POS_INT32, ARG_NGRAM_N */
        int64_t i;     /* ARG_INT */
        const char *s; /* ARG_STRING, ARG_NAME; DEF_NAME's template */
    } def;
    size_t offset;       /* of the value in sl_pipeline_op_t */
    const char *def_doc; /* the default in words, where the value alone does not say it */
    const char *doc;     /* what the argument means */
} dpp_arg_t;

/* What a transform's input feature must be. */
typedef enum dpp_input {
    IN_NONE,    /* no feature (labels, timestamps, sample ids) */
    IN_ANY,     /* any kind */
    IN_SPARSE,  /* sparse or weighted */
    IN_DENSE,   /* dense */
    IN_WEIGHTED /* weighted */
} dpp_input_t;

/* Rules across arguments (dpp_op_spec_t.rules). */
#define DPP_RULE_NEEDS_BOUND 1u /* min, max or both */
#define DPP_RULE_MIN_LE_MAX 2u  /* min <= max when both are given */

#define DPP_MAX_ARGS 6
#define DPP_NGRAM_MAX 1024 /* ids per n-gram: bounds the hashed key of one n-gram */
/* Filters and transforms of one job, each: bounds what a spec makes the
 * parser allocate (a 16 MiB spec could otherwise list a million ops). */
#define DPP_OPS_MAX 4096

typedef struct dpp_op_spec {
    const char *name;
    dpp_op_t op;
    bool filter; /* a filter (else a transform) */
    dpp_input_t input;
    unsigned rules;               /* DPP_RULE_* */
    const char *doc;              /* what it keeps (a filter) or computes (a transform) */
    dpp_arg_t args[DPP_MAX_ARGS]; /* ends at the first name == NULL */
} dpp_op_spec_t;

typedef struct dpp_borders {
    double *v; /* [n], strictly increasing */
    uint32_t n;
} dpp_borders_t;

/* One filter or transform of a job, compiled from its JSON object by the
 * op table: every argument of the op holds the value given or the table's
 * default, and the fields of other ops stay zero. Strings and borders are
 * owned (sl_pipeline_op_clear frees them). */
struct sl_pipeline_op {
    const dpp_op_spec_t *spec; /* its row of the op table */
    dpp_op_t op;
    uint32_t given;     /* bit k: spec->args[k] was given */
    char *feature;      /* the input feature */
    char *label;        /* label filters */
    char *features[2];  /* cross */
    char *output;       /* created feature: given, or the op's default name */
    char *file;         /* map_vocab */
    char *weight_label; /* negative_downsample */
    double value;       /* label_equals, fill_missing */
    double min, max;    /* label_range, clamp, clamp_weights (default: no bound, +-inf) */
    double rate;        /* sample, negative_downsample */
    double mean, std, lambda;
    int64_t ts_min, ts_max; /* timestamp_range, inclusive */
    int64_t vocab_default;  /* map_vocab, when given */
    uint64_t seed, salt, table_size, divisor, x, n;
    dpp_borders_t borders;
};

/* @return the op named name in the filter (filter true) or transform table,
 * or NULL. */
const dpp_op_spec_t *dpp_op_find(const char *name, bool filter);
/* All ops, for documentation; *count gets their number. */
const dpp_op_spec_t *dpp_ops(uint32_t *count);
/* The index of the argument named name in spec->args, or -1. */
int dpp_op_arg(const dpp_op_spec_t *spec, const char *name);
/* Was the argument named name given in the op object? */
bool sl_pipeline_op_given(const sl_pipeline_op_t *op, const char *name);

/* What a value of type t must be, as a noun phrase ("a positive
 * integer"): the problem "must be <it>" and the type column of the docs. */
const char *dpp_arg_type_text(dpp_arg_type_t t);

/* Compile one filter or transform object against the table into *out
 * (zeroed first): types and ranges, unknown keys, missing arguments, the
 * rules across arguments (min <= max), defaults, and default names of
 * created features. Problems are prefixed with path ("$.filters[2]").
 * On problems *out may be partly filled; clear it either way.
 * @return false when out of memory. */
bool sl_pipeline_op_compile(const json_t *obj, bool filter, const char *path, sl_pipeline_op_t *out,
                            sl_pipeline_problems_t *problems);
/* Free what op owns and zero it. NULL ok. */
void sl_pipeline_op_clear(sl_pipeline_op_t *op);

#endif

/* Private to src/dpp/pipeline: the table of a job spec's keys (spec.c,
 * $.source.kafka's in spec_kafka.c), the one place each key's type, range,
 * default and meaning are defined. The parser walks it (spec_parse.c,
 * whose internals are spec_parse.h), and spec_doc.c prints docs/JOBS.md's
 * key tables from it. The ops inside "filters" and "transforms" have their own table
 * (ops.h). */
#ifndef SLUICE_DPP_PIPELINE_SPEC_H
#define SLUICE_DPP_PIPELINE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "dpp/pipeline/job.h"

typedef enum dpp_field_type {
    FIELD_STRING, /* non-empty string -> char * (owned) */
    FIELD_UINT,   /* integer in [lo, hi] -> an unsigned integer of size bytes */
    FIELD_BOOL,   /* true or false -> bool */
    FIELD_ENUM,   /* one of choices (strings) -> its index, an unsigned integer of size bytes */
    FIELD_OBJECT, /* an object with the keys of object */
    FIELD_CUSTOM  /* parsed by parse (lists, groups, ops) */
} dpp_field_type_t;

typedef struct dpp_parse dpp_parse_t; /* the parsing state (spec_parse.h) */
typedef struct dpp_object dpp_object_t;

typedef struct dpp_field {
    const char *name;
    dpp_field_type_t type;
    bool required;
    uint64_t lo, hi;            /* FIELD_UINT */
    const char *const *choices; /* FIELD_ENUM, NULL-terminated */
    union {
        uint64_t u;             /* FIELD_UINT, FIELD_BOOL, FIELD_ENUM (the index) */
        const char *s;          /* FIELD_STRING; NULL: none */
    } def;                      /* the default, applied before the spec is read */
    size_t offset, size;        /* of the value in sl_pipeline_job_t */
    const dpp_object_t *object; /* FIELD_OBJECT */
    /* FIELD_CUSTOM: parse v (present) at path into job. FIELD_STRING: a
     * further check of the value (then stored as given). */
    void (*parse)(dpp_parse_t *p, const json_t *v, const char *path, sl_pipeline_job_t *job);
    const char *type_doc; /* the type in words, where the type alone does not say */
    const char *def_doc;  /* the default in words, where the value alone does not say */
    const char *doc;      /* what the key means */
} dpp_field_t;

struct dpp_object {
    const char *path; /* "$", "$.source" ... */
    const dpp_field_t *fields;
    uint32_t count;
};

/* The spec's top-level object ($) and, through FIELD_OBJECT, the rest. */
extern const dpp_object_t dpp_spec_root;

#endif

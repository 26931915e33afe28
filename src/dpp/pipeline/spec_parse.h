/* Private to the job spec's parser: spec_parse.c walks the table of keys
 * (spec.h), spec.c and spec_kafka.c hold the table and the parsers of the
 * keys that need more than a type. Here: the parsing state, the helpers
 * those parsers share, and the macros the table is written with.
 * spec_doc.c, which only reads the table, needs none of it. */
#ifndef SLUICE_DPP_PIPELINE_SPEC_PARSE_H
#define SLUICE_DPP_PIPELINE_SPEC_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "dpp/pipeline/problems.h"
#include "dpp/pipeline/spec.h"

/* Parsing state: the problems, and whether memory ran out other than for
 * one of them (problems->nomem says that). */
struct dpp_parse {
    sl_pipeline_problems_t *problems;
    bool nomem;
};

/* A non-empty array of distinct non-empty strings at path, copied into
 * *out (*n entries, NULL where one is not a name; each problem added). */
void dpp_spec_get_names(dpp_parse_t *p, const json_t *v, const char *path, char ***out,
                        uint32_t *n);

/* The problem callback of the warehouse's parsers (column mapping): adds
 * problem to ctx, an sl_pipeline_problems_t. */
void dpp_spec_add_problem(void *ctx, const char *problem);

/* $.source.kafka (spec_kafka.c), an object of the table in spec.c. */
extern const dpp_object_t dpp_spec_kafka;

/* ---- the macros the table is written with (spec.c, spec_kafka.c) ---- */

#define AT(member)                                                                                 \
    .offset = offsetof(sl_pipeline_job_t, member), .size = sizeof(((sl_pipeline_job_t *)0)->member)
#define UINT_KEY(name_, member, lo_, hi_, def_, doc_)                                              \
    {                                                                                              \
        .name = name_, .type = FIELD_UINT, .lo = lo_, .hi = hi_, .def.u = def_, AT(member),        \
        .doc = doc_                                                                                \
    }
#define BOOL_KEY(name_, member, def_, doc_)                                                        \
    {                                                                                              \
        .name = name_, .type = FIELD_BOOL, .def.u = def_, AT(member), .doc = doc_                  \
    }
#define CUSTOM_KEY(name_, parse_, type_doc_, def_doc_, doc_)                                       \
    {                                                                                              \
        .name = name_, .type = FIELD_CUSTOM, .parse = parse_, .type_doc = type_doc_,               \
        .def_doc = def_doc_, .doc = doc_                                                           \
    }
#define OBJECT_KEY(name_, object_, required_, def_doc_, doc_)                                      \
    {                                                                                              \
        .name = name_, .type = FIELD_OBJECT, .required = required_, .object = &object_,            \
        .def_doc = def_doc_, .doc = doc_                                                           \
    }
#define COUNT(fields) (uint32_t)(sizeof fields / sizeof fields[0])

#endif

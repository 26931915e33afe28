/* The problems of a job spec, collected rather than stopping at the first,
 * so that a refusal lists everything to fix. */
#ifndef SLUICE_DPP_PIPELINE_PROBLEMS_H
#define SLUICE_DPP_PIPELINE_PROBLEMS_H

#include <stdbool.h>
#include <stdint.h>

/* Every problem of a spec, each as "<json path>: <what is wrong>", e.g.
 * "$.transforms[3].table_size: must be a positive integer". */
typedef struct sl_pipeline_problems {
    uint32_t count;
    char **items; /* [count], owned */
} sl_pipeline_problems_t;

void sl_pipeline_problems_free(sl_pipeline_problems_t *p);
/* Append a problem (printf style). Returns false when out of memory. */
bool sl_pipeline_problems_add(sl_pipeline_problems_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif

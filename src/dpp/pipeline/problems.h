/* The problems of a job spec, collected rather than stopping at the first,
 * so that a refusal lists everything to fix. */
#ifndef SLUICE_DPP_PIPELINE_PROBLEMS_H
#define SLUICE_DPP_PIPELINE_PROBLEMS_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice/err.h"

/* Every problem of a spec, each as "<json path>: <what is wrong>", e.g.
 * "$.transforms[3].table_size: must be a positive integer". */
typedef struct sl_pipeline_problems {
    uint32_t count;
    char **items;      /* [count], owned */
    uint32_t reported; /* problems added, the ones past the list's cap included */
    bool nomem;        /* a problem was lost: memory ran out */
} sl_pipeline_problems_t;

void sl_pipeline_problems_free(sl_pipeline_problems_t *p);
/* Append a problem (printf style). Returns false (and sets p->nomem) when
 * out of memory. */
bool sl_pipeline_problems_add(sl_pipeline_problems_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The error for problems p->items[first..count) (at least one): err gets
 * SL_ERR_INVALID and "<what>: <the first one>", followed by " (and N more
 * problems)" when there are more. @return SL_ERR_INVALID. */
sl_err_t sl_pipeline_problems_error(const sl_pipeline_problems_t *p, uint32_t first,
                                    const char *what, sl_error_t *err);

#endif

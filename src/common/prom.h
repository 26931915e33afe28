/* Prometheus text exposition format (version 0.0.4) for GET /metrics: a
 * growable text buffer with one call per metric family and per sample (or
 * per histogram). The admin endpoints of the master and the workers and the
 * trainer client's metrics endpoint write their text with it. */
#ifndef SLUICE_COMMON_PROM_H
#define SLUICE_COMMON_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "sluice/alloc.h"

typedef struct sl_prom {
    const sl_allocator_t *a;
    char *buf;
    size_t len, cap;
    bool failed; /* out of memory: sl_prom_finish returns NULL */
} sl_prom_t;

#define SL_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Start empty; the text grows in a (NULL: the default allocator). */
void sl_prom_init(sl_prom_t *p, const sl_allocator_t *a);

/* Count the text as failed (a figure could not be gathered): finish will
 * return NULL. */
void sl_prom_fail(sl_prom_t *p);

/* "# HELP name help" and "# TYPE name type" (counter, gauge, ...). */
void sl_prom_family(sl_prom_t *p, const char *name, const char *type, const char *help);

/* One sample line: name{labels} value. labels is NULL or already formatted
 * pairs (built with sl_prom_label), without the braces. */
void sl_prom_sample(sl_prom_t *p, const char *name, const char *labels, double value);

/* One histogram (after its family, type "histogram"): name_bucket with
 * le="<bound>" for each of the n ascending upper bounds, then le="+Inf",
 * name_sum and name_count, each with labels (as sl_prom_sample's) first.
 * counts[i] is the number of observations in (bounds[i-1], bounds[i]]
 * (not cumulative: the buckets are summed here); count is every
 * observation, those above the last bound too, and sum their total. */
void sl_prom_histogram(sl_prom_t *p, const char *name, const char *labels, const double *bounds,
                       const uint64_t *counts, size_t n, double sum, uint64_t count);

/* Format key="value" with value escaped (\\, \", \n) into out (cap bytes,
 * truncated safely). @return out. */
/* The same from a metric's entry (common/metrics.h), as every family of
 * sluice is written: the family's # HELP and # TYPE lines; a sample; a
 * histogram's part (suffix "_bucket", "_sum" or "_count"); a whole
 * histogram (as sl_prom_histogram). */
void sl_prom_family_def(sl_prom_t *p, const sl_metric_def_t *m);
void sl_prom_sample_def(sl_prom_t *p, const sl_metric_def_t *m, const char *labels, double value);
void sl_prom_sample_part(sl_prom_t *p, const sl_metric_def_t *m, const char *suffix,
                         const char *labels, double value);
void sl_prom_histogram_def(sl_prom_t *p, const sl_metric_def_t *m, const char *labels,
                           const double *bounds, const uint64_t *counts, size_t n, double sum,
                           uint64_t count);

char *sl_prom_label(char *out, size_t cap, const char *key, const char *value);

/* The text, an owned string of the allocator given to init (caller owns,
 * free with sl_strfree(a, text), common/mem.h), or NULL when out of memory.
 * Leaves p empty. */
char *sl_prom_finish(sl_prom_t *p);

#endif

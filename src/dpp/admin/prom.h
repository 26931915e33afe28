/* Prometheus text exposition format (version 0.0.4) for GET /metrics: a
 * growable text buffer with one call per metric family and per sample. */
#ifndef SLUICE_DPP_ADMIN_PROM_H
#define SLUICE_DPP_ADMIN_PROM_H

#include <stdbool.h>
#include <stddef.h>

#include "sluice/alloc.h"

typedef struct sl_admin_prom {
    const sl_allocator_t *a;
    char *buf;
    size_t len, cap;
    bool failed; /* out of memory: sl_admin_prom_finish returns NULL */
} sl_admin_prom_t;

#define SL_ADMIN_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Start empty; the text grows in a (NULL: the default allocator). */
void sl_admin_prom_init(sl_admin_prom_t *p, const sl_allocator_t *a);

/* Count the text as failed (a figure could not be gathered): finish will
 * return NULL. */
void sl_admin_prom_fail(sl_admin_prom_t *p);

/* "# HELP name help" and "# TYPE name type" (counter, gauge, ...). */
void sl_admin_prom_family(sl_admin_prom_t *p, const char *name, const char *type, const char *help);

/* One sample line: name{labels} value. labels is NULL or already formatted
 * pairs (built with sl_admin_prom_label), without the braces. */
void sl_admin_prom_sample(sl_admin_prom_t *p, const char *name, const char *labels, double value);

/* Format key="value" with value escaped (\\, \", \n) into out (cap bytes,
 * truncated safely). @return out. */
char *sl_admin_prom_label(char *out, size_t cap, const char *key, const char *value);

/* The text, an owned string of the allocator given to init (caller owns,
 * free with sl_strfree(a, text), common/mem.h), or NULL when out of memory.
 * Leaves p empty. */
char *sl_admin_prom_finish(sl_admin_prom_t *p);

#endif

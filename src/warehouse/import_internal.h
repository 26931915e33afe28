/* Private to the importers (import*.c) and the generator (gen.c): the row
 * scratch the line parsers fill, and small parsing helpers. */
#ifndef SLUICE_WH_IMPORT_INTERNAL_H
#define SLUICE_WH_IMPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "warehouse/import.h"

#define CRITEO_DENSE 13
#define CRITEO_SPARSE 26
#define CRITEO_FIELDS (1 + CRITEO_DENSE + CRITEO_SPARSE)

/* One row's worth of arrays, reused from row to row: what sl_wh_row_t
 * points into after a parse. */
struct sl_wh_row_buf {
    const sl_allocator_t *a;
    sl_wh_schema_t *schema; /* a copy, so the buffer outlives the caller's */
    uint32_t T, D, S;       /* labels, dense, sparse slots */
    float *labels;          /* [T] */
    float *dense;           /* [D] */
    sl_wh_idlist_t *lists;  /* [S] */
    int64_t **ids;          /* [S] growable id arrays */
    float **weights;        /* [S] growable weight arrays (weighted slots) */
    uint32_t *cap;          /* [S] capacity of ids[s] / weights[s] */
    bool *weighted;         /* [S] */
};

/* Make room for n ids (and weights when the slot is weighted) in slot s.
 * @return false when out of memory or n is absurd. */
bool imp_reserve(sl_wh_row_buf_t *b, uint32_t s, uint64_t n);

/* Longer input lines are bad rows, not allocations. */
#define IMP_LINE_LIMIT ((size_t)1 << 26)

/* Copy at most cap-1 bytes of text into buf for a message, replacing
 * control and non-ASCII bytes by '?' and marking a cut with "...". */
const char *imp_excerpt(const char *text, size_t len, char *buf, size_t cap);

/* Decimal int64 (optional sign, digits only). @return false when not one
 * or out of range. */
bool imp_parse_i64(const char *s, size_t len, int64_t *out);

/* Online cores (at least 1). */
uint32_t imp_cores(void);

/* mkdir -p of dir/partition (partition may be ""). */
sl_err_t imp_make_dirs(const char *dir, const char *partition, sl_error_t *err);

#endif

/* The list of problems of a job spec: every problem is kept (not just the
 * first), so a user fixes a spec in one round. Strings and the array come
 * from the default allocator (the list has no allocator of its own, and
 * sl_pipeline_problems_free takes none). */
#include "dpp/pipeline/job.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "sluice/alloc.h"

/* A spec with thousands of bad entries must not make the list (or the
 * terminal) explode: past this many, one last line says more were cut. */
#define PROBLEMS_MAX 1000

/* The array holds capacity(count) slots: 4, then the next power of two. */
static size_t capacity(uint32_t count)
{
    size_t cap = 4;
    while (cap < count)
        cap *= 2;
    return cap;
}

void sl_pipeline_problems_free(sl_pipeline_problems_t *p)
{
    if (p == NULL) return;
    for (uint32_t i = 0; i < p->count; i++)
        sl_strfree(NULL, p->items[i]);
    if (p->items != NULL) sl_free(NULL, p->items, capacity(p->count) * sizeof(char *));
    *p = (sl_pipeline_problems_t){0};
}

bool sl_pipeline_problems_add(sl_pipeline_problems_t *p, const char *fmt, ...)
{
    p->reported++;
    if (p->count > PROBLEMS_MAX) return true;
    char buf[SL_ERROR_MSG_MAX];
    if (p->count == PROBLEMS_MAX) {
        snprintf(buf, sizeof buf, "... more problems not listed");
    } else {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
    }
    char *line = sl_strdup(NULL, buf);
    if (line == NULL) return !(p->nomem = true);
    if (p->items == NULL || (p->count >= 4 && (p->count & (p->count - 1)) == 0)) {
        size_t old = p->items == NULL ? 0 : capacity(p->count);
        size_t cap = capacity(p->count + 1);
        char **items = sl_alloc(NULL, cap * sizeof *items);
        if (items == NULL) {
            sl_strfree(NULL, line);
            return !(p->nomem = true);
        }
        if (p->count > 0) memcpy(items, p->items, p->count * sizeof *items);
        if (p->items != NULL) sl_free(NULL, p->items, old * sizeof *items);
        p->items = items;
    }
    p->items[p->count++] = line;
    return true;
}

sl_err_t sl_pipeline_problems_error(const sl_pipeline_problems_t *p, uint32_t first,
                                    const char *what, sl_error_t *err)
{
    uint32_t n = p->count - first;
    if (n == 1) return sl_error_set(err, SL_ERR_INVALID, "%s: %s", what, p->items[first]);
    return sl_error_set(err, SL_ERR_INVALID, "%s: %s (and %u more problem%s)", what,
                        p->items[first], n - 1, n > 2 ? "s" : "");
}

/* Prometheus text format builder (prom.h). */
#include "common/prom.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"

void sl_prom_init(sl_prom_t *p, const sl_allocator_t *a)
{
    memset(p, 0, sizeof *p);
    p->a = a;
}

void sl_prom_fail(sl_prom_t *p)
{
    p->failed = true;
}

static void append(sl_prom_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void append(sl_prom_t *p, const char *fmt, ...)
{
    if (p->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = p->cap - p->len;
        int n = vsnprintf(p->buf ? p->buf + p->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            p->failed = true;
            return;
        }
        if ((size_t)n < room) {
            p->len += (size_t)n;
            return;
        }
        if (!SL_GROW(p->a, p->buf, p->cap, p->len + (size_t)n + 1, 4096)) {
            p->failed = true;
            return;
        }
    }
}

void sl_prom_family(sl_prom_t *p, const char *name, const char *type, const char *help)
{
    append(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* value as Prometheus writes numbers: integers exactly, NaN, +Inf, -Inf. */
static void format_value(char *num, size_t cap, double value)
{
    if (isnan(value))
        snprintf(num, cap, "NaN");
    else if (isinf(value))
        snprintf(num, cap, value > 0 ? "+Inf" : "-Inf");
    else if (value == (double)(long long)value && fabs(value) < 9e15)
        snprintf(num, cap, "%lld", (long long)value);
    else /* the shortest text that reads back as the same double: le="0.1", not 0.10000000000000001
          */
        for (int prec = 6; prec <= 17; prec++) {
            snprintf(num, cap, "%.*g", prec, value);
            if (strtod(num, NULL) == value) break;
        }
}

void sl_prom_sample(sl_prom_t *p, const char *name, const char *labels, double value)
{
    char num[64];
    format_value(num, sizeof num, value);
    if (labels && labels[0])
        append(p, "%s{%s} %s\n", name, labels, num);
    else
        append(p, "%s %s\n", name, num);
}

void sl_prom_histogram(sl_prom_t *p, const char *name, const char *labels, const double *bounds,
                       const uint64_t *counts, size_t n, double sum, uint64_t count)
{
    const char *sep = labels && labels[0] ? "," : "";
    char num[64];
    uint64_t cumulative = 0;
    for (size_t i = 0; i < n; i++) {
        cumulative += counts[i];
        format_value(num, sizeof num, bounds[i]);
        append(p, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", name, labels ? labels : "", sep, num,
               cumulative);
    }
    append(p, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels ? labels : "", sep, count);
    char suffixed[256];
    snprintf(suffixed, sizeof suffixed, "%s_sum", name);
    sl_prom_sample(p, suffixed, labels, sum);
    snprintf(suffixed, sizeof suffixed, "%s_count", name);
    sl_prom_sample(p, suffixed, labels, (double)count);
}

char *sl_prom_label(char *out, size_t cap, const char *key, const char *value)
{
    size_t n = 0;
    int k = snprintf(out, cap, "%s=\"", key);
    if (k < 0 || (size_t)k >= cap) {
        if (cap) out[0] = '\0';
        return out;
    }
    n = (size_t)k;
    for (const char *v = value; *v && n + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') {
            out[n++] = '\\';
            out[n++] = *v;
        } else if (*v == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = *v;
        }
    }
    if (n + 2 <= cap) {
        out[n++] = '"';
        out[n] = '\0';
    } else {
        out[cap - 1] = '\0';
    }
    return out;
}

char *sl_prom_finish(sl_prom_t *p)
{
    /* an owned string is exactly strlen + 1 bytes: copy it out of the
     * buffer that grew by doubling */
    char *text = p->failed ? NULL : sl_strndup(p->a, p->buf ? p->buf : "", p->len);
    sl_free(p->a, p->buf, p->cap);
    sl_prom_init(p, p->a);
    return text;
}

void sl_prom_family_def(sl_prom_t *p, const sl_metric_def_t *m)
{
    sl_prom_family(p, m->name, m->type, m->help);
}

void sl_prom_sample_def(sl_prom_t *p, const sl_metric_def_t *m, const char *labels, double value)
{
    sl_prom_sample(p, m->name, labels, value);
}

void sl_prom_sample_part(sl_prom_t *p, const sl_metric_def_t *m, const char *suffix,
                         const char *labels, double value)
{
    char name[128];
    snprintf(name, sizeof name, "%s%s", m->name, suffix);
    sl_prom_sample(p, name, labels, value);
}

void sl_prom_histogram_def(sl_prom_t *p, const sl_metric_def_t *m, const char *labels,
                           const double *bounds, const uint64_t *counts, size_t n, double sum,
                           uint64_t count)
{
    sl_prom_histogram(p, m->name, labels, bounds, counts, n, sum, count);
}

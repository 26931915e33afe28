/* Prometheus text format builder (prom.h). */
#include "dpp/admin/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"

void sl_admin_prom_init(sl_admin_prom_t *p, const sl_allocator_t *a)
{
    memset(p, 0, sizeof *p);
    p->a = a;
}

void sl_admin_prom_fail(sl_admin_prom_t *p)
{
    p->failed = true;
}

static void append(sl_admin_prom_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void append(sl_admin_prom_t *p, const char *fmt, ...)
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
        size_t cap = p->cap ? p->cap * 2 : 4096;
        while (cap - p->len <= (size_t)n)
            cap *= 2;
        char *b = sl_realloc(p->a, p->buf, p->cap, cap);
        if (!b) {
            p->failed = true;
            return;
        }
        p->buf = b;
        p->cap = cap;
    }
}

void sl_admin_prom_family(sl_admin_prom_t *p, const char *name, const char *type, const char *help)
{
    append(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void sl_admin_prom_sample(sl_admin_prom_t *p, const char *name, const char *labels, double value)
{
    char num[64];
    if (isnan(value))
        snprintf(num, sizeof num, "NaN");
    else if (isinf(value))
        snprintf(num, sizeof num, value > 0 ? "+Inf" : "-Inf");
    else if (value == (double)(long long)value && fabs(value) < 9e15)
        snprintf(num, sizeof num, "%lld", (long long)value);
    else
        snprintf(num, sizeof num, "%.17g", value);
    if (labels && labels[0])
        append(p, "%s{%s} %s\n", name, labels, num);
    else
        append(p, "%s %s\n", name, num);
}

char *sl_admin_prom_label(char *out, size_t cap, const char *key, const char *value)
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

char *sl_admin_prom_finish(sl_admin_prom_t *p)
{
    /* an owned string is exactly strlen + 1 bytes: copy it out of the
     * buffer that grew by doubling */
    char *text = p->failed ? NULL : sl_strndup(p->a, p->buf ? p->buf : "", p->len);
    sl_free(p->a, p->buf, p->cap);
    sl_admin_prom_init(p, p->a);
    return text;
}

/* Strings, resizing and the size-less adapter through sl_allocator_t
 * (mem.h). */
#include "common/mem.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

char *sl_strndup(const sl_allocator_t *a, const char *s, size_t n)
{
    if (s == NULL) return NULL;
    const char *nul = memchr(s, '\0', n);
    size_t len = nul != NULL ? (size_t)(nul - s) : n;
    if (len == SIZE_MAX) return NULL;
    char *d = sl_alloc(a, len + 1);
    if (d == NULL) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

size_t sl_grow_cap(size_t cap, size_t need, size_t first, size_t max)
{
    if (need > max) return 0;
    size_t c = cap ? cap : first ? first : 1;
    while (c < need)
        c = c > max / 2 ? max : c * 2;
    return c < max ? c : max;
}

void *sl_grow(const sl_allocator_t *a, void *p, size_t *cap, size_t need, size_t elem, size_t first,
              size_t max)
{
    if (need <= *cap && p != NULL) return p;
    size_t c = sl_grow_cap(*cap, need, first, max);
    if (c == 0) return NULL;
    void *np = sl_realloc(a, p, sl_mul_size(*cap, elem), sl_mul_size(c, elem));
    if (np == NULL) return NULL;
    *cap = c;
    return np;
}

char *sl_strdup(const sl_allocator_t *a, const char *s)
{
    return s != NULL ? sl_strndup(a, s, strlen(s)) : NULL;
}

char *sl_strfmt(const sl_allocator_t *a, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = sl_alloc(a, (size_t)n + 1);
    if (s == NULL) return NULL;
    if ((size_t)n < sizeof small) {
        memcpy(s, small, (size_t)n + 1);
    } else {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

void sl_strfree(const sl_allocator_t *a, char *s)
{
    if (s != NULL) sl_free(a, s, strlen(s) + 1);
}

void *sl_realloc(const sl_allocator_t *a, void *p, size_t old_size, size_t new_size)
{
    void *n = sl_alloc(a, new_size);
    if (n == NULL) return NULL;
    if (p != NULL) {
        memcpy(n, p, old_size < new_size ? old_size : new_size);
        sl_free(a, p, old_size);
    }
    return n;
}

#define UNSIZED_HEADER 16

void *sl_unsized_alloc(void *ctx, size_t size)
{
    sl_unsized_t *u = ctx;
    unsigned char *p = size <= SIZE_MAX - UNSIZED_HEADER
                           ? sl_alloc_aligned(u->a, size + UNSIZED_HEADER, UNSIZED_HEADER)
                           : NULL;
    if (p == NULL) {
        u->failed = true;
        return NULL;
    }
    memcpy(p, &size, sizeof size);
    return p + UNSIZED_HEADER;
}

void sl_unsized_free(void *ctx, void *ptr)
{
    const sl_unsized_t *u = ctx;
    if (ptr == NULL) return;
    unsigned char *p = (unsigned char *)ptr - UNSIZED_HEADER;
    size_t size;
    memcpy(&size, p, sizeof size);
    sl_free(u->a, p, size + UNSIZED_HEADER);
}

/* Allocator helpers every module needs, as Redis keeps zmalloc beside its
 * allocator: strings copied through an sl_allocator_t, growing a buffer,
 * and an adapter for libraries whose free takes no size (protobuf-c).
 *
 * An owned string (what sl_strdup, sl_strndup and every "caller owns a
 * string" in sluice hand out) is strlen(s) + 1 bytes of its allocator, so
 * its size is recovered from its content: free it with sl_strfree(a, s)
 * with the allocator it came from. Never shorten one in place (writing a
 * NUL into it) before freeing it; copy it with sl_strndup instead. */
#ifndef SLUICE_COMMON_MEM_H
#define SLUICE_COMMON_MEM_H

#include <stdbool.h>
#include <stddef.h>

#include "sluice/alloc.h"

/* A copy of s from a (NULL: the default allocator). @return NULL when out
 * of memory or when s is NULL. Free with sl_strfree. */
char *sl_strdup(const sl_allocator_t *a, const char *s);

/* A copy of at most n bytes of s (stopping at its NUL), NUL-terminated,
 * from a. @return NULL when out of memory or when s is NULL. Free with
 * sl_strfree. */
char *sl_strndup(const sl_allocator_t *a, const char *s, size_t n);

/* A string formatted as printf does, from a. @return NULL when out of
 * memory (or for a format error). Free with sl_strfree. */
char *sl_strfmt(const sl_allocator_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Free an owned string of a (strlen(s) + 1 bytes); s may be NULL. */
void sl_strfree(const sl_allocator_t *a, char *s);

/* Resize the block p of old_size bytes to new_size bytes (aligned to 16),
 * keeping min(old_size, new_size) bytes: a new block, a copy and a free
 * (sl_allocator_t has no realloc). p may be NULL (old_size 0); new_size
 * SIZE_MAX (an overflowed sl_mul_size) always fails. @return the
 * new block, or NULL when out of memory, with p untouched and still
 * owned by the caller. */
void *sl_realloc(const sl_allocator_t *a, void *p, size_t old_size, size_t new_size);

/* Growing by doubling, written once (an array of elements or a byte
 * buffer that is appended to):
 *
 *   if (v->n == v->cap && !SL_GROW(a, v->items, v->cap, v->n + 1, 16))
 *       return sl_error_set(err, SL_ERR_NOMEM, "...");
 *
 * The capacity doubles, from first when it is 0, until need fits; past max
 * it stops at max (so a buffer can be bounded), and a need over max fails.
 * Doubling keeps appends amortised O(1) in copies. */

/* The capacity to grow cap to so that it holds need (as above). @return
 * it (cap itself when need fits), or 0 when need > max. */
size_t sl_grow_cap(size_t cap, size_t need, size_t first, size_t max);

/* Grow the array p of *cap elements of elem bytes to sl_grow_cap(*cap,
 * need, first, max) elements, keeping its first *cap (sl_realloc). p may
 * be NULL with *cap 0. @return the array (p itself when need already fits)
 * with *cap updated, or NULL when out of memory or need > max, with p
 * untouched and still the caller's and *cap unchanged. */
void *sl_grow(const sl_allocator_t *a, void *p, size_t *cap, size_t need, size_t elem, size_t first,
              size_t max);

/* sl_grow for an lvalue array ptr (any element type) and its capacity
 * capvar (any unsigned integer type, whose largest value is the max):
 * both updated on success. ptr and capvar are evaluated more than once.
 * @return true when ptr holds need elements. */
#define SL_GROW(a, ptr, capvar, need, first)                                                       \
    __extension__({                                                                                \
        size_t sl_grow_cap_ = (capvar);                                                            \
        void *sl_grow_p_ = sl_grow((a), (ptr), &sl_grow_cap_, (need), sizeof *(ptr), (first),      \
                                   (size_t)(__typeof__(capvar))-1);                                \
        if (sl_grow_p_ != NULL) {                                                                  \
            (ptr) = sl_grow_p_;                                                                    \
            (capvar) = (__typeof__(capvar))sl_grow_cap_;                                           \
        }                                                                                          \
        sl_grow_p_ != NULL;                                                                        \
    })

/* For libraries whose free takes no size, protobuf-c's ProtobufCAllocator:
 *
 *   sl_unsized_t u = {.a = allocator};     (NULL: the default allocator)
 *   ProtobufCAllocator pa = {sl_unsized_alloc, sl_unsized_free, &u};
 *   msg = ..._unpack(&pa, len, data);
 *   if (msg == NULL) return u.failed ? SL_ERR_NOMEM : SL_ERR_CORRUPT;
 *
 * The size lives in a 16-byte header in front of each block (which keeps
 * 16-byte alignment). failed records that an allocation failed, so that a
 * NULL from the library tells running out of memory from malformed input:
 * a master short of memory must not call its state corrupt. */
typedef struct sl_unsized {
    const sl_allocator_t *a;
    bool failed;
} sl_unsized_t;

void *sl_unsized_alloc(void *ctx, size_t size);
void sl_unsized_free(void *ctx, void *ptr);

#endif

/* The default allocator (jemalloc's mallocx/dallocx, or aligned_alloc in
 * sanitizer builds) and the sl_alloc family that routes through any
 * sl_allocator_t. */
#include "sluice/alloc.h"

#include <stdlib.h>
#include <string.h>

#ifdef SLUICE_USE_JEMALLOC
#include <jemalloc/jemalloc.h>
#include <stdint.h>
#include <sys/mman.h>
#endif

#ifdef SLUICE_USE_JEMALLOC
/* Buffers of two huge pages and more (decoded stripes, batches, frames)
 * are streamed through by every stage; backing their whole 2 MiB pages with
 * huge pages where the kernel allows it (transparent huge pages in
 * "madvise" mode) saves the TLB misses of 4 KiB pages: about 5 % of a
 * worker's CPU on the criteo job. */
#define HUGE_BYTES ((size_t)2 << 20)

static void advise_huge(void *p, size_t size)
{
    uintptr_t lo = ((uintptr_t)p + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
    uintptr_t hi = ((uintptr_t)p + size) & ~(uintptr_t)(HUGE_BYTES - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: failure is fine */
}
#endif

static void *default_alloc(void *ctx, size_t size, size_t align)
{
    (void)ctx;
    if (size == 0) size = 1;
#ifdef SLUICE_USE_JEMALLOC
    void *p = mallocx(size, MALLOCX_ALIGN(align));
    if (p != NULL && size >= 2 * HUGE_BYTES) advise_huge(p, size);
    return p;
#else
    size_t rounded = (size + align - 1) & ~(align - 1);
    if (rounded < size) return NULL;
    return aligned_alloc(align, rounded);
#endif
}

static void default_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    (void)size;
    if (ptr == NULL) return;
#ifdef SLUICE_USE_JEMALLOC
    dallocx(ptr, 0);
#else
    free(ptr);
#endif
}

static const sl_allocator_t default_allocator = {default_alloc, default_free, NULL};

const sl_allocator_t *sl_allocator_default(void)
{
    return &default_allocator;
}

void *sl_alloc_aligned(const sl_allocator_t *a, size_t size, size_t align)
{
    if (a == NULL) a = &default_allocator;
    if (size == SIZE_MAX || align == 0 || (align & (align - 1)) != 0) return NULL;
    if (align < sizeof(void *)) align = sizeof(void *);
    return a->alloc(a->ctx, size, align);
}

void *sl_alloc(const sl_allocator_t *a, size_t size)
{
    return sl_alloc_aligned(a, size, 16);
}

void *sl_calloc(const sl_allocator_t *a, size_t count, size_t size)
{
    size_t total = sl_mul_size(count, size);
    void *p = sl_alloc(a, total);
    if (p != NULL) memset(p, 0, total);
    return p;
}

void sl_free(const sl_allocator_t *a, void *ptr, size_t size)
{
    if (a == NULL) a = &default_allocator;
    a->free(a->ctx, ptr, size);
}

/* The one allocator interface of sluice. Every module allocates through an
 * sl_allocator_t so that tests can inject a counting or failing allocator;
 * the default is jemalloc (plain aligned_alloc in sanitizer builds, where
 * ASan must see every allocation).
 *
 * An arena (nginx-style pool) serves per-batch scratch and batch buffers:
 * many aligned allocations released by one sl_arena_destroy. Long-lived state
 * (dedup tables, maps) must not live in an arena. */
#ifndef SLUICE_ALLOC_H
#define SLUICE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every tensor buffer starts on this boundary (cache line, AVX-512 load). */
#define SL_ALIGN 64

typedef struct sl_allocator {
    /* @return size bytes aligned to align (a power of two >= sizeof(void*)),
     * or NULL. size may be 0: return a unique non-NULL pointer or NULL. */
    void *(*alloc)(void *ctx, size_t size, size_t align);
    /* Releases what alloc returned; ptr may be NULL. size is what was asked. */
    void (*free)(void *ctx, void *ptr, size_t size);
    void *ctx;
} sl_allocator_t;

/* @return the process default allocator (static, never NULL). */
const sl_allocator_t *sl_allocator_default(void);

/* Allocate from a (NULL means the default). @return NULL on failure or when
 * size overflows. */
void *sl_alloc(const sl_allocator_t *a, size_t size);
void *sl_alloc_aligned(const sl_allocator_t *a, size_t size, size_t align);
void *sl_calloc(const sl_allocator_t *a, size_t count, size_t size);
void sl_free(const sl_allocator_t *a, void *ptr, size_t size);

/* @return count*size, or SIZE_MAX when it overflows (an allocation of
 * SIZE_MAX always fails), so that sizes from outside cannot wrap. */
static inline size_t sl_mul_size(size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) return SIZE_MAX;
    return count * size;
}

/* Round n up to a multiple of SL_ALIGN; SIZE_MAX when it would overflow. */
static inline size_t sl_align_up(size_t n)
{
    if (n > SIZE_MAX - (SL_ALIGN - 1)) return SIZE_MAX;
    return (n + (SL_ALIGN - 1)) & ~(size_t)(SL_ALIGN - 1);
}

typedef struct sl_arena sl_arena_t;

/* Create an arena whose chunks come from a (NULL: default) and hold at least
 * chunk_size bytes (0: 64 KiB). Caller owns, free with sl_arena_destroy.
 * @return NULL when out of memory. */
sl_arena_t *sl_arena_new(const sl_allocator_t *a, size_t chunk_size);

/* @return size bytes aligned to SL_ALIGN, valid until the arena is reset or
 * destroyed; NULL on failure. Large requests get a chunk of their own. */
void *sl_arena_alloc(sl_arena_t *arena, size_t size);

/* Like sl_arena_alloc, zero-filled. */
void *sl_arena_calloc(sl_arena_t *arena, size_t count, size_t size);

/* Copy a NUL-terminated string into the arena. */
char *sl_arena_strdup(sl_arena_t *arena, const char *s);

/* Bytes currently held from the allocator (for memory limits and metrics). */
size_t sl_arena_footprint(const sl_arena_t *arena);

/* Release everything but keep the first chunk for reuse. */
void sl_arena_reset(sl_arena_t *arena);

/* Release everything; arena may be NULL. */
void sl_arena_destroy(sl_arena_t *arena);

#ifdef __cplusplus
}
#endif
#endif

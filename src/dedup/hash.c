/* XXH3 of long id lists (> 240 bytes), through libxxhash's AVX2 kernel when
 * the library has one. Debian's libxxhash (0.8, x86-64) exports
 * XXH3_64bits_dispatch, which picks AVX2 at run time: about 1.5x the
 * throughput of the SSE2 code that a plain build inlines. The symbol is weak,
 * so a library without it leaves the pointer NULL and the library's
 * XXH3_64bits runs; both compute the same XXH3 value. Kept out of dedup.c,
 * which includes xxhash.h with XXH_INLINE_ALL: here XXH3_64bits is the
 * library's, and that strong reference keeps libxxhash linked under
 * --as-needed, so the weak one can resolve. */
#include "dedup/dedup_internal.h"

#include <xxhash.h>

extern XXH64_hash_t XXH3_64bits_dispatch(const void *input, size_t len) __attribute__((weak));

uint64_t dedup_xxh3_long(const void *data, size_t len)
{
    if (XXH3_64bits_dispatch != NULL) return XXH3_64bits_dispatch(data, len);
    return XXH3_64bits(data, len);
}

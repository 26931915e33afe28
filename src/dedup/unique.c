/* Which rows of a dedup group are unique: passes 1 to 3 of dedup.c.
 *
 * Pass 1 goes key by key over all rows; passes 2 and 3 go over blocks of
 * head rows, key by key inside a block. Key-major loops stream through one
 * key's lengths and values: row-major access to F arrays that lie B * 4 (or
 * B * 8) bytes apart maps them to one L1 set when B is a power of two, and
 * thrashes it. A block is small enough that its lists are still in L2 when
 * the hash matches among them are verified. */
#include "dedup/dedup_internal.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static inline bool ids_equal(const int64_t *a, const int64_t *b, size_t n)
{
    /* Short lists: calling memcmp costs more than the compare. Equal int64
     * values are equal bytes, so this is the same test as memcmp. */
    if (n <= 4) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i]) return false;
        return true;
    }
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* Lists of n > 0 values starting at a and b (weights too, bit for bit, as the
 * expand(dedup(x)) == x identity requires: 0.0 and -0.0 differ). */
static inline bool lists_equal(const sl_kjt_t *all, uint64_t a, uint64_t b, size_t n)
{
    if (!ids_equal(all->values + a, all->values + b, n)) return false;
    return all->weights == NULL ||
           memcmp(all->weights + a, all->weights + b, n * sizeof *all->weights) == 0;
}

/* ---- pass 1: offsets and adjacent duplicates ---- */

uint32_t dedup_adjacent(const gctx_t *g)
{
    const uint32_t B = g->B;
    if (B == 0) return 0;
    uint8_t *same = g->same;
    memset(same, 1, B);
    same[0] = 0;
    /* Key j only compares rows still equal on keys < j, so shuffled input
     * pays for about one key. */
    uint32_t alive = B - 1;
    for (uint32_t j = 0; j < g->n; j++) {
        const int32_t *len = g->kw[j].len;
        const uint64_t base = g->kw[j].start;
        uint32_t *o = g->off + (size_t)j * B;
        uint32_t at = 0; /* < 2^32: checked per key by dedup_group_checked */
        if (alive == 0) {
            for (uint32_t r = 0; r < B; r++) {
                o[r] = at;
                at += (uint32_t)len[r];
            }
            continue;
        }
        for (uint32_t r = 0; r < B; r++) {
            uint32_t n = (uint32_t)len[r];
            o[r] = at;
            /* Equal lengths: row r-1's list ends where row r's begins. */
            if (same[r] && (n != (uint32_t)len[r - 1] ||
                            (n > 0 && !lists_equal(g->all, base + at - n, base + at, n)))) {
                same[r] = 0;
                alive--;
            }
            at += n;
        }
    }
    uint32_t H = 0;
    for (uint32_t r = 0; r < B; r++)
        if (!same[r]) g->heads[H++] = r;
    return H;
}

/* ---- pass 2: row hashes ---- */

static inline uint64_t xxh3_list(const void *p, size_t bytes, uint64_t seed)
{
    (void)seed; /* seedless: a seeded XXH3 rebuilds its secret above 240 bytes */
    /* Short inputs inline; long ones through the fastest kernel there is. */
    return bytes <= 240 ? XXH3_64bits(p, bytes) : dedup_xxh3_long(p, bytes);
}

#define MIX_MUL 0x9e3779b97f4a7c15ull

/* The final mix of a row hash: the low bits, which index the table, depend
 * on every bit. */
static inline uint64_t row_final(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    return x ^ (x >> 32);
}

/* ---- passes 1 and 2 in one: short lists ---- */

/* The hash of key j's list of n values at v (len: any valid address, for
 * empty lists). A single id, the common case of short lists, takes a
 * multiply-xorshift mixer (~5 instructions) instead of XXH3's 8-byte path
 * (~15): collisions only cost a confirmation, equality is decided on the
 * bytes. */
static inline uint64_t short_list_hash(const int64_t *v, uint32_t n, uint32_t j, const void *len)
{
    if (n == 1) {
        uint64_t x = (uint64_t)v[0] ^ (MIX_MUL * (j + 1u));
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        return x ^ (x >> 29);
    }
    return xxh3_list(n ? (const void *)v : len, (size_t)n * sizeof *v, j);
}

/* Row r's hash over keys [0, j), for a row found to differ from the row
 * before it only at key j: its earlier lists were compared, not hashed. */
static uint64_t catch_up(const gctx_t *g, uint32_t r, uint32_t j)
{
    uint64_t x = 0;
    for (uint32_t k = 0; k < j; k++) {
        const int32_t *len = g->kw[k].len;
        uint32_t n = (uint32_t)len[r];
        const int64_t *list =
            n ? g->all->values + g->kw[k].start + g->off[(size_t)k * g->B + r] : NULL;
        x = (x + short_list_hash(list, n, k, len)) * MIX_MUL;
    }
    return x;
}

/* Pass 1 and the row hashes of pass 2 in one pass over the input, for groups
 * of short lists without weights: a list is read once, to compare it with
 * the previous row's and, for a row that differs from it (a head), to hash
 * it, where the two passes read every length, offset and list twice (for
 * 1-id lists the second read cost as much as the first). A row found to
 * differ only at a later key catches up on the keys before it. g->hash
 * ends up holding the heads' hashes, g->hashed is set. @return H. */
uint32_t dedup_adjacent_hashed(gctx_t *g)
{
    const uint32_t B = g->B;
    if (B == 0) return 0;
    uint8_t *same = g->same;
    uint64_t *h = g->hash;
    memset(same, 1, B);
    same[0] = 0;
    for (uint32_t j = 0; j < g->n; j++) {
        const int32_t *len = g->kw[j].len;
        const uint64_t base = g->kw[j].start;
        const int64_t *v = g->all->num_values > 0 ? g->all->values + base : NULL;
        uint32_t *o = g->off + (size_t)j * B;
        uint32_t at = 0;
        for (uint32_t r = 0; r < B; r++) {
            uint32_t n = (uint32_t)len[r];
            o[r] = at;
            const int64_t *list = n ? v + at : NULL;
            at += n;
            uint64_t x;
            if (!same[r]) {
                x = j ? h[r] : 0;
            } else if (n != (uint32_t)len[r - 1] || (n > 0 && !ids_equal(list - n, list, n))) {
                same[r] = 0;
                x = catch_up(g, r, j);
            } else {
                continue;
            }
            h[r] = (x + short_list_hash(list, n, j, len)) * MIX_MUL;
        }
    }
    uint32_t H = 0;
    for (uint32_t r = 0; r < B; r++)
        if (!same[r]) {
            g->heads[H] = r;
            h[H++] = row_final(h[r]); /* H <= r: in place */
        }
    g->hashed = true;
    return H;
}

/* Hash heads [i0, i1). Each list is hashed on its own and folded into its
 * row's hash by a multiply, in key order; rows are independent, so the
 * hashes of consecutive rows overlap in the pipeline. XXH3 folds each list's
 * byte length in, so [1,2],[3] and [1],[2,3] hash apart (equality is decided
 * on the bytes anyway). The final mix makes the low bits, which index the
 * table, depend on every bit. */
static inline __attribute__((always_inline)) void hash_heads(const gctx_t *g, sl_dedup_hash_fn fn,
                                                             uint32_t H, uint32_t i0, uint32_t i1)
{
    const sl_kjt_t *all = g->all;
    uint64_t *h = g->hash;
    const uint32_t *heads = g->heads;
    memset(h + i0, 0, (size_t)(i1 - i0) * sizeof *h);
    for (uint32_t j = 0; j < g->n; j++) {
        const int32_t *len = g->kw[j].len;
        const uint32_t *o = g->off + (size_t)j * g->B;
        /* An empty list hashes a valid address: values may be NULL. */
        const int64_t *v = all->num_values > 0 ? all->values + g->kw[j].start : NULL;
        const float *w = all->weights != NULL && v != NULL ? all->weights + g->kw[j].start : NULL;
        for (uint32_t i = i0; i < i1; i++) {
            uint32_t r = heads[i];
            size_t n = (size_t)len[r];
            /* Fetch the same key's list of the next block's head i: it is in
             * L2 when that block starts. Sequential streams of one block
             * and key are too short for the hardware prefetcher to ramp up. */
            if (i + (i1 - i0) < H) {
                uint32_t q = heads[i + (i1 - i0)];
                size_t bytes = (size_t)len[q] * sizeof *v;
                const char *pv = bytes ? (const char *)(v + o[q]) : NULL;
                for (size_t b = 0; b < bytes; b += 64)
                    __builtin_prefetch(pv + b);
            }
            const void *p = n ? (const void *)(v + o[r]) : (const void *)len;
            uint64_t x = h[i] + fn(p, n * sizeof *v, j);
            if (w != NULL) x = x * MIX_MUL + fn(n ? (const void *)(w + o[r]) : p, n * sizeof *w, j);
            h[i] = x * MIX_MUL;
        }
    }
    for (uint32_t i = i0; i < i1; i++)
        h[i] = row_final(h[i]);
}

/* Two instances: the default one calls XXH3 directly, with no call through a
 * pointer per list. */
static __attribute__((noinline)) void hash_heads_xxh3(const gctx_t *g, uint32_t H, uint32_t i0,
                                                      uint32_t i1)
{
    hash_heads(g, xxh3_list, H, i0, i1);
}

static __attribute__((noinline)) void hash_heads_with(const gctx_t *g, sl_dedup_hash_fn fn,
                                                      uint32_t H, uint32_t i0, uint32_t i1)
{
    hash_heads(g, fn, H, i0, i1);
}

/* Hash heads [i0, i1) of H. */
static void hash_range(const gctx_t *g, sl_dedup_hash_fn fn, uint32_t H, uint32_t i0, uint32_t i1)
{
    if (fn == NULL)
        hash_heads_xxh3(g, H, i0, i1);
    else
        hash_heads_with(g, fn, H, i0, i1);
}

/* ---- pass 3: probe the table ---- */

/* Slots are fetched this many heads ahead: the table outgrows L2 at large B. */
#define PREFETCH_AHEAD 8

/* Map head i (and the rows equal to it, up to the next head) to u. */
static inline void assign(const gctx_t *g, uint32_t H, uint32_t i, uint32_t u, int32_t *inverse)
{
    uint32_t end = i + 1 < H ? g->heads[i + 1] : g->B;
    for (uint32_t q = g->heads[i]; q < end; q++)
        inverse[q] = (int32_t)u;
}

/* Representatives' lists are fetched this many pairs ahead of their compare,
 * and their lengths and offsets twice as far ahead (the list's address
 * depends on them). */
#define VERIFY_AHEAD 4

/* @return whether every pair holds equal rows, checked key by key. The head
 * rows were just hashed and are in cache; their representatives are
 * scattered over the batch, so their lists are prefetched. */
static bool verify(const gctx_t *g, uint32_t P)
{
    const pair_t *pairs = g->pairs;
    for (uint32_t j = 0; j < g->n; j++) {
        const int32_t *len = g->kw[j].len;
        const uint32_t *o = g->off + (size_t)j * g->B;
        const uint64_t base = g->kw[j].start;
        /* values is NULL when every list is empty */
        const int64_t *v = g->all->num_values > 0 ? g->all->values + base : NULL;
        for (uint32_t m = 0; m < P; m++) {
            if (m + 2 * VERIFY_AHEAD < P) {
                uint32_t q = pairs[m + 2 * VERIFY_AHEAD].rep;
                __builtin_prefetch(&len[q]);
                __builtin_prefetch(&o[q]);
            }
            if (m + VERIFY_AHEAD < P) {
                uint32_t q = pairs[m + VERIFY_AHEAD].rep;
                size_t bytes = (size_t)len[q] * sizeof *v;
                const char *pv = bytes ? (const char *)(v + o[q]) : NULL;
                for (size_t b = 0; b < bytes; b += 64)
                    __builtin_prefetch(pv + b);
            }
            uint32_t r = pairs[m].row, p = pairs[m].rep, n = (uint32_t)len[r];
            if (n != (uint32_t)len[p] ||
                (n > 0 && !lists_equal(g->all, base + o[r], base + o[p], n)))
                return false;
        }
    }
    return true;
}

/* Rows r and p are equal: lengths of every key first, the cheap rejection
 * of most collisions. */
static bool rows_equal(const gctx_t *g, uint32_t r, uint32_t p)
{
    for (uint32_t j = 0; j < g->n; j++)
        if (g->kw[j].len[r] != g->kw[j].len[p]) return false;
    for (uint32_t j = 0; j < g->n; j++) {
        uint32_t n = (uint32_t)g->kw[j].len[r];
        const uint32_t *o = g->off + (size_t)j * g->B;
        uint64_t base = g->kw[j].start;
        if (n > 0 && !lists_equal(g->all, base + o[r], base + o[p], n)) return false;
    }
    return true;
}

/* Probe heads [i0, i1) into the table, U counting up from u0; @return U
 * after them. One loop for both passes, specialised by the constant
 * `exact` (always inlined):
 *   - optimistic (!exact): a hash match is taken at once and recorded in
 *     g->pairs (from index 0) for verify; *P gets the number of pairs;
 *   - exact: a hash match is confirmed (rows_equal) before it is taken,
 *     and on a mismatch the probe goes on. */
static inline __attribute__((always_inline)) uint32_t probe(const gctx_t *g, uint32_t H,
                                                            uint32_t i0, uint32_t i1, uint32_t u0,
                                                            int32_t *inverse, uint32_t *P,
                                                            bool exact)
{
    const uint64_t *h = g->hash;
    slot_t *table = g->table;
    const size_t mask = g->mask;
    const uint32_t gen = g->gen;
    uint32_t U = u0, npairs = 0;
    for (uint32_t i = i0; i < i1; i++) {
        if (i + PREFETCH_AHEAD < i1) __builtin_prefetch(&table[h[i + PREFETCH_AHEAD] & mask], 1);
        uint32_t u;
        size_t at = (size_t)h[i] & mask;
        for (;;) {
            slot_t *s = &table[at];
            if (s->gen != gen) {
                s->hash = h[i];
                s->unique = u = U++;
                s->gen = gen;
                g->rep[u] = g->heads[i];
                break;
            }
            if (s->hash == h[i]) {
                if (!exact) {
                    u = s->unique;
                    g->pairs[npairs++] = (pair_t){g->heads[i], g->rep[u]};
                    break;
                }
                if (rows_equal(g, g->heads[i], g->rep[s->unique])) {
                    u = s->unique;
                    break;
                }
            }
            /* Load <= 1/2, so an empty slot is always ahead. */
            at = (at + 1) & mask;
        }
        assign(g, H, i, u, inverse);
    }
    if (P) *P = npairs;
    return U;
}

static uint32_t probe_fast(const gctx_t *g, uint32_t H, uint32_t i0, uint32_t i1, uint32_t u0,
                           int32_t *inverse, uint32_t *P)
{
    return probe(g, H, i0, i1, u0, inverse, P, false);
}

static uint32_t probe_exact(const gctx_t *g, uint32_t H, int32_t *inverse)
{
    return probe(g, H, 0, H, 0, inverse, NULL, true);
}

/* Bytes of lists a block of heads should hold: well inside L2, with room
 * for the representatives they are verified against. */
#define BLOCK_BYTES (128u * 1024u)

/* Values of the unique rows [u0, u1) over all keys. Right after a block,
 * their lengths are in cache. */
static uint64_t values_of(const gctx_t *g, uint32_t u0, uint32_t u1)
{
    uint64_t total = 0;
    for (uint32_t j = 0; j < g->n; j++) {
        const int32_t *len = g->kw[j].len;
        for (uint32_t u = u0; u < u1; u++)
            total += (uint64_t)len[g->rep[u]];
    }
    return total;
}

uint32_t dedup_unique(const gctx_t *g, sl_dedup_hash_fn fn, uint32_t H, int32_t *inverse,
                      uint64_t *unique_values)
{
    *unique_values = 0;
    if (H == 0) return 0;
    uint64_t per_value = sizeof(int64_t) + (g->all->weights != NULL ? sizeof(float) : 0);
    uint64_t row_bytes = g->values * per_value / g->B + (uint64_t)g->n * sizeof(int32_t);
    uint64_t block = BLOCK_BYTES / (row_bytes ? row_bytes : 1);
    block = block < 64 ? 64 : block > 8192 ? 8192 : block;
    /* Fast path: hash a block, take hash matches, verify them while the
     * block is in cache. A failed verification means equal hashes of
     * different rows (a 64-bit collision, or a weak injected hash); the
     * group is then redone with every match confirmed as it is probed. */
    uint32_t U = 0;
    uint64_t values = 0;
    for (uint32_t i0 = 0; i0 < H; i0 += (uint32_t)block) {
        uint32_t i1 = H - i0 < block ? H : i0 + (uint32_t)block, P, u0 = U;
        if (!g->hashed) hash_range(g, fn, H, i0, i1);
        U = probe_fast(g, H, i0, i1, U, inverse, &P);
        if (!verify(g, P)) {
            /* Generation 0 is never current: zeroed slots are empty. */
            memset(g->table, 0, (g->mask + 1) * sizeof *g->table);
            hash_range(g, fn, H, 0, H);
            U = probe_exact(g, H, inverse);
            *unique_values = values_of(g, 0, U);
            if (g->redone != NULL) *g->redone = true;
            return U;
        }
        values += values_of(g, u0, U);
        if (g->on_block != NULL) g->on_block(g, i0, i1, u0, U, g->block_ctx);
    }
    *unique_values = values;
    return U;
}

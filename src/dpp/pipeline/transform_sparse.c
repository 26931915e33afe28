/* Sparse transforms: kernels over one feature's id lists (a dpp_col_t).
 * The per-id ones (sigrid_hash, modulo, map_vocab, clamp_weights) are tight
 * loops over a contiguous values array, in place; first_x and dedup_ids
 * compact a feature's lists in place; cross and ngram build a new feature
 * in the batch arena. No allocation per value or per row. */
#include "dpp/pipeline/plan_internal.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Ids of one cross or ngram output are capped so that lengths stay int32
 * and one feature cannot swallow memory: a bound per feature and batch. */
#define CREATED_VALUES_MAX (1ull << 31)

/* h % d without a division (Granlund and Montgomery, "Division by
 * invariant integers using multiplication", 1994, fig. 4.1): with
 * l = ceil(log2 d) and m = floor(2^64 (2^l - d) / d) + 1 (< 2^64),
 * t = mulhi(m, h) and q = (t + ((h - t) >> 1)) >> (l - 1) is floor(h / d),
 * exact for every 64-bit h and 2 <= d < 2^64. A 64-bit div costs 25-90
 * cycles; this is two multiplies, which matters at 26 hashes per sample.
 * Powers of two (and d = 1) take a mask instead. */
typedef unsigned __int128 u128;

typedef struct divisor {
    uint64_t d, m;
    unsigned shift; /* l - 1 */
} divisor_t;

static divisor_t divisor_of(uint64_t d) /* d >= 2, not a power of two */
{
    unsigned l = 64 - (unsigned)__builtin_clzll(d - 1);
    uint64_t pow = l == 64 ? 0 : 1ull << l; /* 2^l mod 2^64 */
    divisor_t v = {d, (uint64_t)(((u128)(pow - d) << 64) / d) + 1, l - 1};
    return v;
}

static inline uint64_t mod_by(uint64_t h, divisor_t v)
{
    uint64_t t = (uint64_t)(((u128)v.m * h) >> 64);
    uint64_t q = (t + ((h - t) >> 1)) >> v.shift;
    return h - q * v.d;
}

/* XXH3_64bits_withSeed of one 8-byte id, written out (XXH3_len_4to8_64b of
 * the frozen XXH3 spec, xxHash >= 0.8.0): the two little-endian halves of
 * the id swapped (a 32-bit rotation), xored with a key that depends only on
 * the seed, then the rrmxmx mix. The key is computed once per feature, so
 * an id costs two multiplies and a few shifts instead of a call through
 * the length dispatch. transform_test checks it against XXH3 itself. */
static inline uint64_t xxh3_8_key(uint64_t seed)
{
    seed ^= (uint64_t)XXH_swap32((uint32_t)seed) << 32;
    return (XXH_readLE64(XXH3_kSecret + 8) ^ XXH_readLE64(XXH3_kSecret + 16)) - seed;
}

static inline uint64_t xxh3_8(uint64_t id, uint64_t key)
{
    uint64_t h = ((id >> 32) | (id << 32)) ^ key;
    h ^= ((h << 49) | (h >> 15)) ^ ((h << 24) | (h >> 40));
    h *= 0x9FB21C651E98DF25ull;
    h ^= (h >> 35) + 8;
    h *= 0x9FB21C651E98DF25ull;
    return h ^ (h >> 28);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Four ids at a time with AVX2, bit-identical to xxh3_8 and mod_by: AVX2
 * has no 64-bit multiply, so products are built from 32 x 32 -> 64 ones
 * (13 per four ids, against 16 scalar 64-bit multiplies). */
__attribute__((target("avx2"))) static inline __m256i mullo64(__m256i a, __m256i b, __m256i bh)
{
    __m256i lo = _mm256_mul_epu32(a, b);
    __m256i cross =
        _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b), _mm256_mul_epu32(a, bh));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

__attribute__((target("avx2"))) static inline __m256i mulhi64(__m256i a, __m256i b, __m256i bh)
{
    const __m256i low32 = _mm256_set1_epi64x(0xffffffff);
    __m256i ah = _mm256_srli_epi64(a, 32);
    __m256i ll = _mm256_mul_epu32(a, b), lh = _mm256_mul_epu32(a, bh);
    __m256i hl = _mm256_mul_epu32(ah, b), hh = _mm256_mul_epu32(ah, bh);
    __m256i mid =
        _mm256_add_epi64(_mm256_add_epi64(_mm256_srli_epi64(ll, 32), _mm256_and_si256(lh, low32)),
                         _mm256_and_si256(hl, low32));
    __m256i hi = _mm256_add_epi64(hh, _mm256_srli_epi64(lh, 32));
    hi = _mm256_add_epi64(hi, _mm256_srli_epi64(hl, 32));
    return _mm256_add_epi64(hi, _mm256_srli_epi64(mid, 32));
}

__attribute__((target("avx2"))) static uint64_t sigrid_avx2(int64_t *dst, const int64_t *src,
                                                            uint64_t n, uint64_t key, uint64_t mask,
                                                            const divisor_t *d)
{
    const __m256i k = _mm256_set1_epi64x((long long)key);
    const __m256i p = _mm256_set1_epi64x((long long)0x9FB21C651E98DF25ull);
    const __m256i ph = _mm256_srli_epi64(p, 32), eight = _mm256_set1_epi64x(8);
    const __m256i msk = _mm256_set1_epi64x((long long)mask);
    const __m256i m = _mm256_set1_epi64x(d ? (long long)d->m : 0), mh = _mm256_srli_epi64(m, 32);
    const __m256i dv = _mm256_set1_epi64x(d ? (long long)d->d : 0), dh = _mm256_srli_epi64(dv, 32);
    const __m128i shift = _mm_cvtsi32_si128(d ? (int)d->shift : 0);
    uint64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
        h = _mm256_xor_si256(_mm256_shuffle_epi32(h, 0xb1), k); /* rotate by 32 */
        __m256i r49 = _mm256_or_si256(_mm256_slli_epi64(h, 49), _mm256_srli_epi64(h, 15));
        __m256i r24 = _mm256_or_si256(_mm256_slli_epi64(h, 24), _mm256_srli_epi64(h, 40));
        h = _mm256_xor_si256(h, _mm256_xor_si256(r49, r24));
        h = mullo64(h, p, ph);
        h = _mm256_xor_si256(h, _mm256_add_epi64(_mm256_srli_epi64(h, 35), eight));
        h = mullo64(h, p, ph);
        h = _mm256_xor_si256(h, _mm256_srli_epi64(h, 28));
        if (d == NULL) {
            h = _mm256_and_si256(h, msk);
        } else {
            __m256i t = mulhi64(h, m, mh);
            __m256i q = _mm256_add_epi64(t, _mm256_srli_epi64(_mm256_sub_epi64(h, t), 1));
            q = _mm256_srl_epi64(q, shift);
            h = _mm256_sub_epi64(h, mullo64(q, dv, dh));
        }
        _mm256_storeu_si256((__m256i *)(dst + i), h);
    }
    return i;
}
#endif

void dpp_sigrid_hash(int64_t *values, uint64_t n, uint64_t salt, uint64_t table_size)
{
    dpp_sigrid_hash_to(values, values, n, salt, table_size);
}

void dpp_sigrid_hash_to(int64_t *dst, const int64_t *src, uint64_t n, uint64_t salt,
                        uint64_t table_size)
{
    const uint64_t key = xxh3_8_key(salt);
    const bool pow2 = (table_size & (table_size - 1)) == 0;
    const uint64_t mask = table_size - 1;
    const divisor_t d = pow2 ? (divisor_t){0, 0, 0} : divisor_of(table_size);
    uint64_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) i = sigrid_avx2(dst, src, n, key, mask, pow2 ? NULL : &d);
#endif
    if (pow2) {
        /* a power of two: the remainder is a mask */
        for (; i < n; i++)
            dst[i] = (int64_t)(xxh3_8((uint64_t)src[i], key) & mask);
        return;
    }
    for (; i < n; i++)
        dst[i] = (int64_t)mod_by(xxh3_8((uint64_t)src[i], key), d);
}

void dpp_modulo(int64_t *values, uint64_t n, int64_t divisor)
{
    for (uint64_t i = 0; i < n; i++) {
        int64_t r = values[i] % divisor; /* divisor > 0: no overflow */
        values[i] = r < 0 ? r + divisor : r;
    }
}

void dpp_map_vocab(int64_t *values, uint64_t n, const dpp_vocab_t *v, int64_t def)
{
    for (uint64_t i = 0; i < n; i++)
        values[i] = dpp_vocab_lookup(v, values[i], def);
}

void dpp_clamp_weights(float *weights, uint64_t n, float min, float max)
{
    for (uint64_t i = 0; i < n; i++) {
        float w = weights[i];
        if (w < min) w = min;
        if (w > max) w = max;
        weights[i] = w;
    }
}

void dpp_first_x(dpp_col_t *col, uint32_t x)
{
    int32_t lim = (int32_t)x;
    uint64_t src = 0, dst = 0;
    bool changed = false;
    for (uint32_t r = 0; r < col->stride; r++) {
        int32_t len = col->lengths[r];
        int32_t keep = len < lim ? len : lim;
        if (changed && keep > 0) {
            memmove(col->values + dst, col->values + src, (size_t)keep * sizeof(int64_t));
            if (col->weights != NULL)
                memmove(col->weights + dst, col->weights + src, (size_t)keep * sizeof(float));
        }
        if (keep != len) {
            changed = true;
            col->lengths[r] = keep;
        }
        src += (uint64_t)len;
        dst += (uint64_t)keep;
    }
    if (changed) {
        col->num_values = dst;
        col->moved = true;
    }
}

/* A list of up to this many ids is deduplicated by comparing each id with
 * the kept ones (cheaper than a table for short lists). */
#define DEDUP_SHORT 16

sl_err_t dpp_dedup_ids(dpp_col_t *col, sl_arena_t *arena, sl_error_t *err)
{
    int32_t longest = 0;
    for (uint32_t r = 0; r < col->stride; r++)
        if (col->lengths[r] > longest) longest = col->lengths[r];
    /* Open addressing over positions of kept ids, at most half full. */
    uint32_t slots = 1;
    while (slots < 2 * (uint32_t)longest)
        slots *= 2;
    int32_t *table = NULL;
    if (longest > DEDUP_SHORT) {
        table = sl_arena_alloc(arena, (size_t)slots * sizeof(int32_t));
        if (table == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "dedup_ids '%s': out of memory", col->name);
        memset(table, 0xff, (size_t)slots * sizeof(int32_t));
    }
    uint64_t src = 0, dst = 0;
    bool changed = false;
    int64_t *v = col->values;
    float *w = col->weights;
    for (uint32_t r = 0; r < col->stride; r++) {
        int32_t len = col->lengths[r];
        uint64_t start = dst;
        if (len <= DEDUP_SHORT) {
            for (int32_t i = 0; i < len; i++) {
                int64_t id = v[src + (uint64_t)i];
                bool seen = false;
                for (uint64_t j = start; j < dst && !seen; j++)
                    seen = v[j] == id;
                if (seen) continue;
                if (w != NULL) w[dst] = w[src + (uint64_t)i];
                v[dst++] = id;
            }
        } else {
            for (int32_t i = 0; i < len; i++) {
                int64_t id = v[src + (uint64_t)i];
                uint32_t s = (uint32_t)XXH3_64bits(&id, sizeof id) & (slots - 1);
                bool seen = false;
                while (table[s] >= 0) {
                    if (v[start + (uint64_t)table[s]] == id) {
                        seen = true;
                        break;
                    }
                    s = (s + 1) & (slots - 1);
                }
                if (seen) continue;
                table[s] = (int32_t)(dst - start);
                if (w != NULL) w[dst] = w[src + (uint64_t)i];
                v[dst++] = id;
            }
            /* Clear only what this row used (a row's cost stays its length). */
            for (uint64_t j = start; j < dst; j++) {
                int64_t id = v[j];
                uint32_t s = (uint32_t)XXH3_64bits(&id, sizeof id) & (slots - 1);
                while (table[s] >= 0) {
                    table[s] = -1;
                    s = (s + 1) & (slots - 1);
                }
            }
        }
        int32_t kept = (int32_t)(dst - start);
        if (kept != len) {
            changed = true;
            col->lengths[r] = kept;
        }
        src += (uint64_t)len;
    }
    if (changed) {
        col->num_values = dst;
        col->moved = true;
    }
    return SL_OK;
}

/* offsets[stride + 1] of col, from arena. */
static uint64_t *col_offsets(const dpp_col_t *col, sl_arena_t *arena)
{
    uint64_t *off = sl_arena_alloc(arena, ((size_t)col->stride + 1) * sizeof(uint64_t));
    if (off == NULL) return NULL;
    off[0] = 0;
    for (uint32_t r = 0; r < col->stride; r++)
        off[r + 1] = off[r] + (uint64_t)col->lengths[r];
    return off;
}

static sl_err_t created_init(dpp_col_t *out, uint32_t rows, sl_arena_t *arena, const char *what,
                             sl_error_t *err)
{
    out->stride = rows;
    out->weights = NULL;
    out->num_values = 0;
    out->moved = true;
    out->lengths = sl_arena_alloc(arena, (size_t)rows * sizeof(int32_t));
    if (out->lengths == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "%s '%s': out of memory", what, out->name);
    return SL_OK;
}

sl_err_t dpp_cross(const dpp_col_t *a, const int32_t *ia, const dpp_col_t *b, const int32_t *ib,
                   uint32_t rows, uint64_t salt, uint64_t table_size, sl_arena_t *arena,
                   dpp_col_t *out, sl_error_t *err)
{
    sl_err_t rc = created_init(out, rows, arena, "cross", err);
    if (rc != SL_OK) return rc;
    uint64_t *oa = col_offsets(a, arena), *ob = col_offsets(b, arena);
    if (oa == NULL || ob == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "cross '%s': out of memory", out->name);
    uint64_t total = 0;
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t ra = ia != NULL ? (uint32_t)ia[r] : r, rb = ib != NULL ? (uint32_t)ib[r] : r;
        uint64_t n = (uint64_t)a->lengths[ra] * (uint64_t)b->lengths[rb];
        if (n > INT32_MAX || (total += n) > CREATED_VALUES_MAX)
            return sl_error_set(
                err, SL_ERR_TOO_LARGE, "cross '%s': row %u would hold more than %llu ids",
                out->name, r, (unsigned long long)(n > INT32_MAX ? INT32_MAX : CREATED_VALUES_MAX));
        out->lengths[r] = (int32_t)n;
    }
    out->values = sl_arena_alloc(arena, (size_t)total * sizeof(int64_t));
    if (total > 0 && out->values == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "cross '%s': out of memory", out->name);
    uint64_t k = 0;
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t ra = ia != NULL ? (uint32_t)ia[r] : r, rb = ib != NULL ? (uint32_t)ib[r] : r;
        for (uint64_t i = oa[ra]; i < oa[ra + 1]; i++)
            for (uint64_t j = ob[rb]; j < ob[rb + 1]; j++) {
                int64_t pair[2] = {a->values[i], b->values[j]};
                out->values[k++] =
                    (int64_t)(XXH3_64bits_withSeed(pair, sizeof pair, salt) % table_size);
            }
    }
    out->num_values = total;
    return SL_OK;
}

sl_err_t dpp_ngram(const dpp_col_t *col, uint32_t n, uint64_t salt, uint64_t table_size,
                   sl_arena_t *arena, dpp_col_t *out, sl_error_t *err)
{
    sl_err_t rc = created_init(out, col->stride, arena, "ngram", err);
    if (rc != SL_OK) return rc;
    uint64_t total = 0;
    for (uint32_t r = 0; r < col->stride; r++) {
        int32_t len = col->lengths[r];
        int32_t m = len >= (int32_t)n ? len - (int32_t)n + 1 : 0;
        out->lengths[r] = m;
        total += (uint64_t)m;
    }
    out->values = sl_arena_alloc(arena, (size_t)total * sizeof(int64_t));
    if (total > 0 && out->values == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "ngram '%s': out of memory", out->name);
    uint64_t src = 0, k = 0;
    for (uint32_t r = 0; r < col->stride; r++) {
        for (int32_t i = 0; i < out->lengths[r]; i++)
            out->values[k++] = (int64_t)(XXH3_64bits_withSeed(col->values + src + (uint64_t)i,
                                                              (size_t)n * sizeof(int64_t), salt) %
                                         table_size);
        src += (uint64_t)col->lengths[r];
    }
    out->num_values = total;
    return SL_OK;
}

/* Batch deduplication of one dedup group: find the unique rows of a KJT over
 * the group's keys and emit them as an IKJT (unique KJT + inverse indices).
 *
 * Four passes (1 to 3 in unique.c). Loops go key by key wherever they can,
 * streaming through one key's lengths and values: row-major access to F
 * arrays B * 4 bytes apart lands in one cache set when B is a power of two,
 * and thrashes L1.
 *   1. offsets of every (key, row), and which rows equal the previous row
 *      (lengths, then lists): the session-clustered case, never hashed;
 *   2. a hash of every other row (the "heads"): each list hashed with XXH3
 *      on its own, folded into the row's hash key by key;
 *   3. probe the open-addressing table with each head's hash: a new hash is
 *      a new unique row; a hash match is confirmed byte for byte against the
 *      unique row's first occurrence (so a collision never merges different
 *      rows). 2 and 3 run over cache-sized blocks of heads, so that a block
 *      is still in cache when its matches are confirmed;
 *   4. copy the unique rows key by key, one memcpy per run of consecutive
 *      input rows (contiguous in the input).
 * Unique rows keep first-occurrence order: the output is deterministic.
 *
 * sl_dedup_batch (splitting a batch into plain features and groups) lives in
 * batch.c, the seeded batch generator in synth.c. */
#include "dedup/dedup_internal.h"

#include <inttypes.h>
#include <string.h>

#include "common/err.h"

/* ---- the reusable object ---- */

sl_dedup_t *sl_dedup_new(const sl_allocator_t *a, sl_dedup_hash_fn hash)
{
    if (a == NULL) a = sl_allocator_default();
    sl_dedup_t *d = sl_calloc(a, 1, sizeof *d);
    if (d == NULL) return NULL;
    d->alloc = a;
    d->hash = hash;
    return d;
}

void sl_dedup_destroy(sl_dedup_t *d)
{
    if (d == NULL) return;
    const sl_allocator_t *a = d->alloc;
    sl_free(a, d->table, d->table_cap * sizeof *d->table);
    scratch_t *all[] = {&d->same,  &d->heads,      &d->hash_of,    &d->off,       &d->rep,
                        &d->pairs, &d->runs,       &d->keyw,       &d->names,     &d->key_start,
                        &d->owner, &d->name_slots, &d->group_keys, &d->key_values};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sl_free(a, all[i]->p, all[i]->bytes);
    sl_free(a, d, sizeof *d);
}

bool dedup_reserve(const sl_allocator_t *a, scratch_t *s, size_t count, size_t elem)
{
    size_t need = sl_mul_size(count, elem);
    if (need == SIZE_MAX) return false;
    if (need <= s->bytes && s->p != NULL) return true;
    /* Grow by half again so batches of slowly rising size do not reallocate
     * every time; the old contents are scratch and need not survive. */
    size_t want = need <= SIZE_MAX / 3 * 2 ? need + need / 2 : need;
    void *p = sl_alloc_aligned(a, want, SL_ALIGN);
    if (p == NULL) return false;
    sl_free(a, s->p, s->bytes);
    s->p = p;
    s->bytes = want;
    return true;
}

/* Empty the table: a live slot carries the current generation, so bumping
 * it is O(1). On wrap-around old slots could look live: clear them. */
static void next_generation(sl_dedup_t *d)
{
    if (++d->gen == 0) {
        memset(d->table, 0, d->table_cap * sizeof *d->table);
        d->gen = 1;
    }
}

/* Make room for a group of n keys over B rows: a table of a power of two
 * >= 2B slots (so a probe always ends, and chains stay short at load <= 1/2)
 * and the per-row and per-(key, row) scratch. */
static sl_err_t reserve_group(sl_dedup_t *d, uint32_t n, uint32_t B, sl_error_t *err)
{
    const sl_allocator_t *a = d->alloc;
    size_t slots = 16;
    while (slots < 2 * (size_t)B)
        slots *= 2;
    if (slots > d->table_cap) {
        slot_t *t = sl_calloc(a, slots, sizeof *t);
        if (t == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "dedup: hash table of %zu slots", slots);
        sl_free(a, d->table, d->table_cap * sizeof *d->table);
        d->table = t;
        d->table_cap = slots;
        d->gen = 0; /* fresh slots are all generation 0: empty */
    }
    /* A small batch after a large one uses only the front of the table, so
     * its probes stay in cache. */
    d->mask = slots - 1;
    next_generation(d);
    size_t rows = (size_t)B + 1, keys = (size_t)n + 1;
    if (!dedup_reserve(a, &d->same, rows, sizeof(uint8_t)) ||
        !dedup_reserve(a, &d->heads, rows, sizeof(uint32_t)) ||
        !dedup_reserve(a, &d->hash_of, rows, sizeof(uint64_t)) ||
        !dedup_reserve(a, &d->off, sl_mul_size(rows, keys), sizeof(uint32_t)) ||
        !dedup_reserve(a, &d->rep, rows, sizeof(uint32_t)) ||
        !dedup_reserve(a, &d->pairs, rows, sizeof(pair_t)) ||
        !dedup_reserve(a, &d->runs, rows, sizeof(uint32_t)) ||
        !dedup_reserve(a, &d->keyw, keys, sizeof(keyw_t)) ||
        !dedup_reserve(a, &d->names, keys, sizeof(const char *)))
        return sl_error_set(err, SL_ERR_NOMEM, "dedup: scratch for %u keys x %u rows", n, B);
    return SL_OK;
}

/* ---- input checks ---- */

sl_err_t dedup_key_starts(sl_dedup_t *d, const sl_kjt_t *all, sl_error_t *err)
{
    uint64_t cells = (uint64_t)all->num_keys * all->stride;
    if (cells > UINT32_MAX || (all->num_keys > 0 && all->keys == NULL) ||
        (cells > 0 && all->lengths == NULL) || (all->num_values > 0 && all->values == NULL))
        return sl_kjt_validate(all, err);
    if (!dedup_reserve(d->alloc, &d->key_start, (size_t)all->num_keys + 1, sizeof(uint64_t)))
        return sl_error_set(err, SL_ERR_NOMEM, "offsets of %u keys", all->num_keys);
    uint64_t *key_start = d->key_start.p;
    /* One pass over every length: where each key's values start, and the
     * invariants (lengths >= 0, sum == num_values) that keep every offset
     * computed later inside values. A sum of < 2^32 int32 fits int64. */
    int64_t at = 0;
    int32_t min_len = 0;
    for (uint32_t k = 0; k < all->num_keys; k++) {
        key_start[k] = (uint64_t)at;
        int64_t sum = 0;
        int32_t lo = 0;
        /* stride 0: lengths may be NULL, where even NULL + 0 is undefined. */
        const int32_t *len = all->stride ? all->lengths + (size_t)k * all->stride : NULL;
        for (uint32_t r = 0; r < all->stride; r++) {
            sum += len[r];
            lo = len[r] < lo ? len[r] : lo;
        }
        at += sum;
        min_len = lo < min_len ? lo : min_len;
    }
    key_start[all->num_keys] = (uint64_t)at;
    if (min_len < 0 || (uint64_t)at != all->num_values) {
        sl_err_t rc = sl_kjt_validate(all, err);
        return rc != SL_OK ? rc : sl_error_set(err, SL_ERR_INVALID, "lengths invalid");
    }
    for (uint32_t k = 0; k < all->num_keys; k++)
        if (all->keys[k] == NULL) return sl_error_set(err, SL_ERR_INVALID, "key %u has no name", k);
    return SL_OK;
}

sl_err_t dedup_check_group_keys(const sl_kjt_t *all, const uint32_t *key_indices, uint32_t n,
                                const char *name, sl_error_t *err)
{
    const char *gname = name != NULL ? name : "?";
    if (n > 0 && key_indices == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "dedup group '%s': %u keys, no indices", gname, n);
    /* Inverse indices are int32: every unique row index must fit. */
    if (all->stride > (uint32_t)INT32_MAX + 1u)
        return sl_error_set(err, SL_ERR_TOO_LARGE,
                            "dedup group '%s': batch of %u rows exceeds 2^31 (int32 inverse)",
                            gname, all->stride);
    /* Quadratic in the group's keys (a handful to tens): the unique KJT must
     * not hold a key twice. */
    for (uint32_t j = 0; j < n; j++) {
        if (key_indices[j] >= all->num_keys)
            return sl_error_set(err, SL_ERR_INVALID,
                                "dedup group '%s': key index %u out of range (%u keys)", gname,
                                key_indices[j], all->num_keys);
        for (uint32_t i = 0; i < j; i++)
            if (key_indices[i] == key_indices[j] ||
                strcmp(all->keys[key_indices[i]], all->keys[key_indices[j]]) == 0)
                return sl_error_set(err, SL_ERR_INVALID, "dedup group '%s': key '%s' appears twice",
                                    gname, all->keys[key_indices[j]]);
    }
    return SL_OK;
}

/* ---- pass 4: output ---- */

/* Split the unique rows into runs of consecutive input rows: runs[0..R)
 * holds the first unique row of every run, runs[R] == U. @return R. */
static uint32_t find_runs(const uint32_t *rep, uint32_t U, uint32_t *runs)
{
    uint32_t R = 0;
    for (uint32_t u = 0; u < U; u++)
        if (u == 0 || rep[u] != rep[u - 1] + 1) runs[R++] = u;
    runs[R] = U;
    return R;
}

/* A copy that grows while its next piece continues both its source and its
 * destination, so that what is contiguous across runs and keys moves in one
 * memcpy: a group without duplicates whose keys are consecutive in the input
 * is one copy per array (and a large copy gets the C library's
 * non-temporal stores, which ten key-sized ones may not). */
typedef struct span {
    const char *src;
    char *dst;
    size_t bytes;
    bool nt; /* large pieces with non-temporal stores (write in place) */
} span_t;

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
/* Copy with non-temporal stores: the output of a batch larger than the
 * cache is not read again soon, and ordinary stores would first read every
 * destination line from memory (a third pass over the bytes). The C
 * library does this for one huge memcpy, not for the block-sized pieces of
 * the in-place copy. The caller fences (_mm_sfence) before the output is
 * handed out. */
static void copy_nt(char *dst, const char *src, size_t bytes)
{
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, dst += 64, src += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + 48));
        _mm_stream_si128((__m128i *)(void *)dst, a);
        _mm_stream_si128((__m128i *)(void *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(void *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(void *)(dst + 48), d);
    }
    memcpy(dst, src, bytes);
}
static void store_fence(void)
{
    _mm_sfence();
}
#else
static void copy_nt(char *dst, const char *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}
static void store_fence(void) {}
#endif

static inline void span_flush(span_t *s)
{
    if (s->bytes == sizeof(int64_t))
        memcpy(s->dst, s->src, sizeof(int64_t)); /* single ids: inlined, no call */
    else if (s->nt && s->bytes >= 4096)
        copy_nt(s->dst, s->src, s->bytes);
    else if (s->bytes > 0)
        memcpy(s->dst, s->src, s->bytes);
    s->bytes = 0;
}

static inline void span_add(span_t *s, const void *src, void *dst, size_t bytes)
{
    if (bytes == 0) return;
    if (s->bytes > 0 && (const char *)src == s->src + s->bytes &&
        (char *)dst == s->dst + s->bytes) {
        s->bytes += bytes;
        return;
    }
    span_flush(s);
    s->src = src;
    s->dst = dst;
    s->bytes = bytes;
}

/* Runs are fetched this many runs ahead of their copy. */
#define COPY_AHEAD 8

/* Fetch the start of key j's lists of the run of unique rows [u0, u1): with
 * duplicates, runs are short and scattered, which the hardware prefetcher
 * does not foresee; a long run streams and needs only its head. */
static inline void prefetch_run(const gctx_t *g, uint32_t j, uint32_t u0, uint32_t u1)
{
    uint32_t first = g->rep[u0];
    const int32_t *len = g->kw[j].len;
    const uint32_t *o = g->off + (size_t)j * g->B;
    __builtin_prefetch(len + first);
    if (g->all->num_values == 0) return; /* values may be NULL */
    const char *v = (const char *)(g->all->values + g->kw[j].start + o[first]);
    size_t bytes = (size_t)len[first] * (u1 - u0) * sizeof(int64_t);
    if (bytes > 1024) bytes = 1024;
    for (size_t b = 0; b < bytes; b += 64)
        __builtin_prefetch(v + b);
}

/* Copy the unique rows into out (allocated for U rows), key by key: a run of
 * consecutive input rows is contiguous in the input, so one copy per run (and
 * fewer where runs and keys continue one another). */
static void copy_unique(const gctx_t *g, const uint32_t *runs, uint32_t R, uint32_t U,
                        sl_kjt_t *out)
{
    const sl_kjt_t *all = g->all;
    span_t lens = {0}, vals = {0}, wts = {0};
    uint64_t at = 0;
    for (uint32_t j = 0; j < g->n; j++) {
        const int32_t *len = g->kw[j].len;
        const uint32_t *o = g->off + (size_t)j * g->B;
        const uint64_t base = g->kw[j].start;
        int32_t *olen = out->lengths + (size_t)j * U;
        for (uint32_t i = 0; i < R; i++) {
            if (i + COPY_AHEAD < R)
                prefetch_run(g, j, runs[i + COPY_AHEAD], runs[i + COPY_AHEAD + 1]);
            uint32_t u0 = runs[i], u1 = runs[i + 1];
            uint32_t first = g->rep[u0], last = g->rep[u1 - 1];
            span_add(&lens, len + first, olen + u0, (size_t)(u1 - u0) * sizeof *olen);
            size_t cnt = (size_t)((uint64_t)o[last] + (uint64_t)len[last] - o[first]);
            if (cnt == 0) continue;
            uint64_t from = base + o[first];
            span_add(&vals, all->values + from, out->values + at, cnt * sizeof *out->values);
            if (all->weights != NULL)
                span_add(&wts, all->weights + from, out->weights + at, cnt * sizeof *out->weights);
            at += cnt;
        }
    }
    span_flush(&lens);
    span_flush(&vals);
    span_flush(&wts);
}

/* ---- write in place: large batches without duplicates ---- */

/* A group input larger than this (about the L3 cache) without adjacent
 * duplicates is copied block by block while each block of heads is still in
 * cache, straight to its final place, as long as every row so far is
 * unique: then the output is laid out exactly as the input (key j's values
 * start where they start in the input), and pass 4, which would read the
 * whole input from memory a second time, is not needed. At the first block
 * holding a duplicate the in-place copy is abandoned and pass 4 runs as
 * before (what was copied is wasted; with duplicates that is almost always
 * the first block, where nothing was copied yet). Closing up key regions
 * after duplicates instead read and wrote the unique rows a second time
 * (measured with cachegrind: as much memory traffic as pass 4). */
#define INPLACE_BYTES ((uint64_t)32 << 20)

typedef struct inplace {
    sl_kjt_t *out; /* allocated at the first block, for every row */
    sl_arena_t *arena;
    const char **names;
    uint64_t values;            /* of the group */
    uint64_t *vbase;            /* [n] where key j's values start, in the input's order */
    uint64_t *at;               /* [n] values written for key j */
    const uint64_t *key_values; /* [n] values of key j in the input */
    uint32_t *runs;
    int state; /* 0 not started, 1 copying, 2 abandoned */
} inplace_t;

static void copy_block(const gctx_t *g, uint32_t i0, uint32_t i1, uint32_t u0, uint32_t u1,
                       void *ctx)
{
    inplace_t *ip = ctx;
    const sl_kjt_t *all = g->all;
    if (ip->state == 2) return;
    if (u1 - u0 != i1 - i0) { /* a duplicate: pass 4 will copy */
        ip->state = 2;
        return;
    }
    if (ip->state == 0) {
        ip->vbase = sl_arena_alloc(ip->arena, ((size_t)g->n + 1) * sizeof *ip->vbase);
        ip->at = sl_arena_calloc(ip->arena, (size_t)g->n + 1, sizeof *ip->at);
        if (ip->vbase == NULL || ip->at == NULL ||
            sl_kjt_init(ip->out, ip->arena, g->n, ip->names, g->B, ip->values,
                        all->weights != NULL) != SL_OK) {
            ip->state = 2; /* pass 4 reports what is short */
            return;
        }
        uint64_t at = 0;
        for (uint32_t j = 0; j < g->n; j++) {
            ip->vbase[j] = at;
            at += ip->key_values[j];
        }
        ip->state = 1;
    }
    sl_kjt_t *out = ip->out;
    uint32_t R = find_runs(g->rep + u0, u1 - u0, ip->runs);
    span_t lens = {.nt = true}, vals = {.nt = true}, wts = {.nt = true};
    for (uint32_t j = 0; j < g->n; j++) {
        const int32_t *len = g->kw[j].len;
        const uint32_t *o = g->off + (size_t)j * g->B;
        const uint64_t base = g->kw[j].start;
        int32_t *olen = out->lengths + (size_t)j * g->B;
        for (uint32_t i = 0; i < R; i++) {
            uint32_t a = u0 + ip->runs[i], b = u0 + ip->runs[i + 1];
            uint32_t first = g->rep[a], last = g->rep[b - 1];
            span_add(&lens, len + first, olen + a, (size_t)(b - a) * sizeof *olen);
            size_t cnt = (size_t)((uint64_t)o[last] + (uint64_t)len[last] - o[first]);
            if (cnt == 0) continue;
            uint64_t from = base + o[first], to = ip->vbase[j] + ip->at[j];
            span_add(&vals, all->values + from, out->values + to, cnt * sizeof *out->values);
            if (all->weights != NULL)
                span_add(&wts, all->weights + from, out->weights + to, cnt * sizeof *out->weights);
            ip->at[j] += cnt;
        }
    }
    span_flush(&lens);
    span_flush(&vals);
    span_flush(&wts);
}

sl_err_t dedup_group_checked(sl_dedup_t *d, const sl_kjt_t *all, const uint32_t *key_indices,
                             uint32_t n, const char *name, sl_arena_t *arena, sl_ikjt_t *out,
                             sl_dedup_stats_t *stats, sl_error_t *err)
{
    const uint32_t B = all->stride;
    const char *gname = name != NULL ? name : "?";
    const uint64_t *key_start = d->key_start.p;
    /* Offsets inside one key are uint32: half the scratch traffic of uint64
     * for short lists. 2^32 values of one key in one batch is 32 GB. */
    for (uint32_t j = 0; j < n; j++) {
        uint32_t k = key_indices[j];
        if (key_start[k + 1] - key_start[k] > UINT32_MAX)
            return sl_error_set(err, SL_ERR_TOO_LARGE,
                                "dedup group '%s': key '%s' holds %" PRIu64
                                " values in one batch, over 2^32 - 1",
                                gname, all->keys[k], key_start[k + 1] - key_start[k]);
    }
    SL_FORWARD_IF_ERROR(reserve_group(d, n, B, err));

    keyw_t *kw = d->keyw.p;
    const char **names = d->names.p;
    uint64_t bytes_before = (uint64_t)n * B * sizeof(int32_t), values = 0;
    size_t value_bytes = sizeof(int64_t) + (all->weights != NULL ? sizeof(float) : 0);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t k = key_indices[j];
        kw[j].len = B ? all->lengths + (size_t)k * B : NULL; /* NULL + 0 is undefined */
        kw[j].start = key_start[k];
        names[j] = all->keys[k];
        values += key_start[k + 1] - key_start[k];
    }
    bytes_before += values * value_bytes;
    gctx_t g = {
        .all = all,
        .n = n,
        .B = B,
        .values = values,
        .kw = kw,
        .same = d->same.p,
        .heads = d->heads.p,
        .hash = d->hash_of.p,
        .off = d->off.p,
        .rep = d->rep.p,
        .pairs = d->pairs.p,
        .table = d->table,
        .mask = d->mask,
        .gen = d->gen,
    };

    memset(out, 0, sizeof *out);
    out->batch_size = B;
    if (name != NULL && (out->name = sl_arena_strdup(arena, name)) == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "dedup group '%s': name", gname);
    out->inverse = sl_arena_alloc(arena, (size_t)B * sizeof *out->inverse);
    if (out->inverse == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "dedup group '%s': inverse of %u rows", gname, B);

    /* Short lists (up to 2 ids on average): compare and hash in one pass. */
    bool fuse = d->hash == NULL && all->weights == NULL && values <= 2 * (uint64_t)n * B;
    uint32_t H = fuse ? dedup_adjacent_hashed(&g) : dedup_adjacent(&g);
    uint64_t uvals = 0;
    uint32_t *runs = d->runs.p;
    bool redone = false;
    inplace_t ip = {&out->unique, arena, names, values, NULL, NULL, NULL, runs, 0};
    if (bytes_before > INPLACE_BYTES && H == B &&
        dedup_reserve(d->alloc, &d->key_values, (size_t)n + 1, sizeof(uint64_t))) {
        uint64_t *key_values = d->key_values.p;
        for (uint32_t j = 0; j < n; j++)
            key_values[j] = key_start[key_indices[j] + 1] - key_start[key_indices[j]];
        ip.key_values = key_values;
        g.on_block = copy_block;
        g.block_ctx = &ip;
        g.redone = &redone;
    }
    uint32_t U = dedup_unique(&g, d->hash, H, out->inverse, &uvals);
    if (ip.state != 0) store_fence(); /* the non-temporal stores, before use */
    if (ip.state != 1 || redone || U != B) {
        uint32_t R = find_runs(g.rep, U, runs);
        sl_err_t rc = sl_kjt_init(&out->unique, arena, n, names, U, uvals, all->weights != NULL);
        if (rc != SL_OK)
            return sl_error_set(err, rc,
                                "dedup group '%s': unique KJT of %u rows, %" PRIu64 " values: %s",
                                gname, U, uvals, sl_err_str(rc));
        copy_unique(&g, runs, R, U, &out->unique);
    }

    if (stats != NULL) {
        stats->batch_size = B;
        stats->unique_rows = U;
        stats->factor = U > 0 ? (double)B / (double)U : 1.0;
        stats->bytes_before = bytes_before;
        stats->bytes_after = sl_ikjt_bytes(out);
        stats->adjacent_hits = B - H;
    }
    return SL_OK;
}

sl_err_t sl_dedup_group(sl_dedup_t *d, const sl_kjt_t *all, const uint32_t *key_indices, uint32_t n,
                        const char *name, sl_arena_t *arena, sl_ikjt_t *out,
                        sl_dedup_stats_t *stats, sl_error_t *err)
{
    if (d == NULL || all == NULL || arena == NULL || out == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "dedup group: NULL argument");
    sl_err_t rc = dedup_key_starts(d, all, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "dedup group '%s': ", name != NULL ? name : "?");
        return rc;
    }
    SL_FORWARD_IF_ERROR(dedup_check_group_keys(all, key_indices, n, name, err));
    return dedup_group_checked(d, all, key_indices, n, name, arena, out, stats, err);
}

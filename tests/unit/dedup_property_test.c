/* Randomised properties of src/dedup against reference implementations
 * (expand(dedup(x)) == x, U equals a reference count, first-occurrence
 * order) over batches of 1 to 65,536 rows, and the seeded generator. Each
 * prints its seed; replay with SLUICE_TEST_SEED. */
#include "dedup_util.h"

/* ---- references for the properties ---- */

/* Row r1 of kjt equals row r2 over keys [0, F), with offsets from
 * sl_kjt_offsets. */
static bool ref_rows_equal(const sl_kjt_t *kjt, const int64_t *off, uint32_t F, uint32_t r1,
                           uint32_t r2)
{
    uint32_t B = kjt->stride;
    for (uint32_t k = 0; k < F; k++) {
        size_t i1 = (size_t)k * B + r1, i2 = (size_t)k * B + r2;
        int32_t n = kjt->lengths[i1];
        if (n != kjt->lengths[i2]) return false;
        if (n == 0) continue;
        if (memcmp(kjt->values + off[i1], kjt->values + off[i2], (size_t)n * 8) != 0) return false;
        if (kjt->weights != NULL &&
            memcmp(kjt->weights + off[i1], kjt->weights + off[i2], (size_t)n * 4) != 0)
            return false;
    }
    return true;
}

/* O(B * U) reference: the inverse indices in first-occurrence order. */
static uint32_t ref_dedup(const sl_kjt_t *kjt, uint32_t F, int32_t *inverse)
{
    uint32_t B = kjt->stride, U = 0;
    int64_t *off = malloc(((size_t)kjt->num_keys * B + 1) * sizeof *off);
    uint32_t *rep = malloc(((size_t)B + 1) * sizeof *rep);
    sl_kjt_offsets(kjt, off);
    for (uint32_t r = 0; r < B; r++) {
        uint32_t u = 0;
        while (u < U && !ref_rows_equal(kjt, off, F, r, rep[u]))
            u++;
        if (u == U) rep[U++] = r;
        inverse[r] = (int32_t)u;
    }
    free(off);
    free(rep);
    return U;
}

/* Sort reference for large B: the number of distinct rows. */
static const sl_kjt_t *sort_kjt;
static const int64_t *sort_off;
static uint32_t sort_F;

static int cmp_rows(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb, B = sort_kjt->stride;
    for (uint32_t k = 0; k < sort_F; k++) {
        size_t ia = (size_t)k * B + a, ib = (size_t)k * B + b;
        int32_t na = sort_kjt->lengths[ia], nb = sort_kjt->lengths[ib];
        if (na != nb) return na < nb ? -1 : 1;
        int c = na ? memcmp(sort_kjt->values + sort_off[ia], sort_kjt->values + sort_off[ib],
                            (size_t)na * 8)
                   : 0;
        if (c == 0 && na && sort_kjt->weights != NULL)
            c = memcmp(sort_kjt->weights + sort_off[ia], sort_kjt->weights + sort_off[ib],
                       (size_t)na * 4);
        if (c != 0) return c;
    }
    return 0;
}

static uint32_t ref_distinct(const sl_kjt_t *kjt, uint32_t F)
{
    uint32_t B = kjt->stride;
    if (B == 0) return 0;
    int64_t *off = malloc(((size_t)kjt->num_keys * B + 1) * sizeof *off);
    uint32_t *rows = malloc((size_t)B * sizeof *rows);
    sl_kjt_offsets(kjt, off);
    for (uint32_t r = 0; r < B; r++)
        rows[r] = r;
    sort_kjt = kjt;
    sort_off = off;
    sort_F = F;
    qsort(rows, B, sizeof *rows, cmp_rows);
    uint32_t distinct = 1;
    for (uint32_t i = 1; i < B; i++)
        distinct += cmp_rows(&rows[i - 1], &rows[i]) != 0;
    free(off);
    free(rows);
    return distinct;
}

/* A copy of kjt's keys in the order given (buffers from arena). */
static sl_kjt_t reorder(sl_arena_t *arena, const sl_kjt_t *kjt, const uint32_t *order)
{
    uint32_t F = kjt->num_keys, B = kjt->stride;
    uint64_t *ko = malloc(((size_t)F + 1) * sizeof *ko);
    sl_kjt_key_offsets(kjt, ko);
    const char **names = malloc(((size_t)F + 1) * sizeof *names);
    for (uint32_t k = 0; k < F; k++)
        names[k] = kjt->keys[order[k]];
    sl_kjt_t out;
    cr_assert_eq(sl_kjt_init(&out, arena, F, names, B, kjt->num_values, kjt->weights != NULL),
                 SL_OK);
    uint64_t at = 0;
    for (uint32_t k = 0; k < F; k++) {
        sl_jt_t jt = sl_kjt_key_view(kjt, ko, order[k]);
        if (B > 0) memcpy(out.lengths + (size_t)k * B, jt.lengths, (size_t)B * 4);
        if (jt.num_values > 0) {
            memcpy(out.values + at, jt.values, jt.num_values * 8);
            if (jt.weights != NULL) memcpy(out.weights + at, jt.weights, jt.num_values * 4);
        }
        at += jt.num_values;
    }
    free(ko);
    free(names);
    return out;
}

/* Every property of one batch whose first G keys are the group ("user") and
 * the rest plain: expand(dedup(x)) == x reordered as plain then group keys,
 * U against a reference, first-occurrence order, stats, and the same result
 * with a colliding hash when given. */
static void check_batch(sl_dedup_t *d, sl_dedup_t *colliding, const sl_kjt_t *kjt, uint32_t G)
{
    uint32_t F = kjt->num_keys, B = kjt->stride;
    sl_dedup_group_spec_t group = {"user", G, kjt->keys};
    sl_batch_t *batch = sl_batch_new(NULL);
    sl_dedup_stats_t st;
    sl_error_t err = {0};
    cr_assert_eq(sl_dedup_batch(d, kjt, &group, 1, batch, &st, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_batch_validate(batch, &err), SL_OK, "%s", err.msg);
    const sl_ikjt_t *ik = &batch->groups[0];
    uint32_t U = ik->unique.stride;

    sl_arena_t *arena = sl_arena_new(NULL, 0);
    uint32_t *order = malloc(((size_t)F + 1) * sizeof *order);
    for (uint32_t k = 0; k < F; k++)
        order[k] = k < F - G ? G + k : k - (F - G);
    sl_kjt_t want = reorder(arena, kjt, order);
    sl_kjt_t got;
    cr_assert_eq(sl_batch_expand(batch, arena, &got, &err), SL_OK, "%s", err.msg);
    cr_assert(sl_kjt_equal(&got, &want), "expand(dedup(x)) != x (B=%u, U=%u)", B, U);

    /* Stable: unique row u first occurs before unique row u + 1. */
    uint32_t next = 0;
    for (uint32_t r = 0; r < B; r++) {
        cr_assert((uint32_t)ik->inverse[r] <= next, "row %u maps to %d before %u was seen", r,
                  ik->inverse[r], next);
        if ((uint32_t)ik->inverse[r] == next) next++;
    }
    cr_assert_eq(next, U);

    if (B <= 1500) {
        int32_t *inv = malloc(((size_t)B + 1) * sizeof *inv);
        cr_assert_eq(ref_dedup(kjt, G, inv), U);
        assert_ints(ik->inverse, inv, B, "inverse vs reference");
        free(inv);
    } else {
        cr_assert_eq(ref_distinct(kjt, G), U, "U=%u, distinct rows %u", U, ref_distinct(kjt, G));
    }

    /* Stats, exact. */
    uint64_t group_values = 0, unique_values = ik->unique.num_values;
    for (size_t i = 0; i < (size_t)G * B; i++)
        group_values += (uint64_t)kjt->lengths[i];
    uint64_t per_value = kjt->weights != NULL ? 12 : 8;
    cr_assert_eq(st.batch_size, B);
    cr_assert_eq(st.unique_rows, U);
    cr_assert_float_eq(st.factor, U ? (double)B / U : 1.0, 1e-12);
    cr_assert_eq(st.bytes_before, (uint64_t)G * B * 4 + group_values * per_value);
    cr_assert_eq(st.bytes_after, (uint64_t)G * U * 4 + unique_values * per_value + (uint64_t)B * 4);
    uint32_t adjacent = 0;
    if (B > 0) {
        int64_t *off = malloc(((size_t)F * B + 1) * sizeof *off);
        sl_kjt_offsets(kjt, off);
        for (uint32_t r = 1; r < B; r++)
            adjacent += ref_rows_equal(kjt, off, G, r, r - 1);
        free(off);
    }
    cr_assert_eq(st.adjacent_hits, adjacent);

    if (colliding != NULL) {
        sl_batch_t *b2 = sl_batch_new(NULL);
        sl_dedup_stats_t st2;
        cr_assert_eq(sl_dedup_batch(colliding, kjt, &group, 1, b2, &st2, &err), SL_OK, "%s",
                     err.msg);
        cr_assert(sl_kjt_equal(&b2->groups[0].unique, &ik->unique));
        cr_assert(sl_kjt_equal(&b2->sparse, &batch->sparse));
        cr_assert_eq(memcmp(b2->groups[0].inverse, ik->inverse, (size_t)B * 4), 0);
        assert_stats_eq(&st2, &st);
        sl_batch_destroy(b2);
    }
    free(order);
    sl_arena_destroy(arena);
    sl_batch_destroy(batch);
}

/* A random batch: G group keys then P plain keys. Group rows come from a pool
 * of D templates over a small alphabet (so that rows often agree on some keys
 * and lengths), placed in runs (adjacent) or at random; weights from a set
 * holding 0.0 and -0.0. */
static sl_kjt_t random_batch(sl_arena_t *arena, uint64_t *rng, uint32_t B, uint32_t G, uint32_t P,
                             bool weighted, bool adjacent)
{
    static const float wset[] = {0.0f, -0.0f, 0.5f, 1.0f};
    uint32_t F = G + P;
    uint32_t D = 1 + (uint32_t)tu_below(rng, B + 1);
    uint32_t maxlen = (uint32_t)tu_below(rng, 5); /* 0: every list empty */
    uint64_t alphabet = 1 + tu_below(rng, 4);
    /* Template lengths and an rng state per template and key. */
    int32_t *tlen = malloc(((size_t)D * G + 1) * sizeof *tlen);
    uint64_t *tstate = malloc(((size_t)D * G + 1) * sizeof *tstate);
    for (size_t i = 0; i < (size_t)D * G; i++) {
        tlen[i] = (int32_t)tu_below(rng, maxlen + 1);
        tstate[i] = tu_next(rng);
    }
    uint32_t *tmpl = malloc(((size_t)B + 1) * sizeof *tmpl);
    for (uint32_t r = 0; r < B;) {
        uint32_t t = (uint32_t)tu_below(rng, D);
        uint32_t run = adjacent ? 1 + (uint32_t)tu_below(rng, 8) : 1;
        for (uint32_t i = 0; i < run && r < B; i++)
            tmpl[r++] = t;
    }
    int32_t *len = malloc(((size_t)F * B + 1) * sizeof *len);
    uint64_t total = 0;
    for (uint32_t k = 0; k < F; k++)
        for (uint32_t r = 0; r < B; r++) {
            int32_t n = k < G ? tlen[(size_t)tmpl[r] * G + k] : (int32_t)tu_below(rng, 4);
            len[(size_t)k * B + r] = n;
            total += (uint64_t)n;
        }
    int64_t *val = malloc((total + 1) * sizeof *val);
    float *w = malloc((total + 1) * sizeof *w);
    uint64_t at = 0;
    for (uint32_t k = 0; k < F; k++)
        for (uint32_t r = 0; r < B; r++) {
            uint64_t s = k < G ? tstate[(size_t)tmpl[r] * G + k] : tu_next(rng);
            for (int32_t i = 0; i < len[(size_t)k * B + r]; i++, at++) {
                val[at] = (int64_t)tu_below(&s, alphabet);
                w[at] = wset[tu_below(&s, 4)];
            }
        }
    const char **names = malloc(((size_t)F + 1) * sizeof *names);
    char(*buf)[16] = malloc(((size_t)F + 1) * sizeof *buf);
    for (uint32_t k = 0; k < F; k++) {
        snprintf(buf[k], sizeof buf[k], k < G ? "u%u" : "p%u", k);
        names[k] = buf[k];
    }
    sl_kjt_t kjt = make_kjt(arena, F, names, B, len, val, weighted ? w : NULL);
    free(tlen);
    free(tstate);
    free(tmpl);
    free(len);
    free(val);
    free(w);
    free(names);
    free(buf);
    return kjt;
}

/* ---- properties ---- */

Test(dedup, property_random_small_batches)
{
    uint64_t rng = tu_seed("dedup::property_random_small_batches");
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    sl_dedup_t *c = sl_dedup_new(NULL, const_hash);
    for (int iter = 0; iter < 300; iter++) {
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        uint32_t B = 1 + (uint32_t)tu_below(&rng, iter < 200 ? 40 : 600);
        uint32_t G = 1 + (uint32_t)tu_below(&rng, 4), P = (uint32_t)tu_below(&rng, 3);
        bool weighted = tu_below(&rng, 2), adjacent = tu_below(&rng, 2);
        sl_kjt_t kjt = random_batch(arena, &rng, B, G, P, weighted, adjacent);
        check_batch(d, c, &kjt, G);
        sl_arena_destroy(arena);
    }
    sl_dedup_destroy(d);
    sl_dedup_destroy(c);
}

Test(dedup, property_synth_batches)
{
    uint64_t rng = tu_seed("dedup::property_synth_batches");
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    sl_dedup_t *c = sl_dedup_new(NULL, const_hash);
    /* Sizes from 1 to 65,536, the largest exactly once per run. */
    static const uint32_t sizes[] = {1, 2, 3, 17, 100, 1000, 1500, 4096, 10000, 65536};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        sl_dedup_synth_spec_t spec = {
            .batch_size = sizes[i],
            .group_features = 1 + (uint32_t)tu_below(&rng, 4),
            .plain_features = (uint32_t)tu_below(&rng, 3),
            .ids_per_list = (uint32_t)tu_below(&rng, 4),
            .vary_lengths = tu_below(&rng, 2),
            .dup_factor = 1 + (uint32_t)tu_below(&rng, 20),
            .adjacent = tu_below(&rng, 2),
            .weighted = tu_below(&rng, 2),
            .seed = tu_next(&rng),
        };
        sl_kjt_t kjt;
        sl_dedup_group_spec_t group;
        cr_assert_eq(sl_dedup_synth(&spec, arena, &kjt, &group), SL_OK);
        /* Colliding hashes make probing quadratic: small batches only. */
        check_batch(d, sizes[i] <= 1000 ? c : NULL, &kjt, spec.group_features);
        sl_arena_destroy(arena);
    }
    sl_dedup_destroy(d);
    sl_dedup_destroy(c);
}

Test(dedup, property_large_random_batch)
{
    uint64_t rng = tu_seed("dedup::property_large_random_batch");
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    for (int adjacent = 0; adjacent < 2; adjacent++) {
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        sl_kjt_t kjt = random_batch(arena, &rng, 65536, 3, 1, adjacent, adjacent);
        check_batch(d, NULL, &kjt, 3);
        sl_arena_destroy(arena);
    }
    sl_dedup_destroy(d);
}

Test(dedup, forced_collisions_match_xxh3)
{
    uint64_t rng = tu_seed("dedup::forced_collisions_match_xxh3");
    sl_dedup_t *x = sl_dedup_new(NULL, NULL);
    sl_dedup_t *c = sl_dedup_new(NULL, const_hash);
    for (int iter = 0; iter < 40; iter++) {
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        uint32_t B = 1 + (uint32_t)tu_below(&rng, 300);
        sl_kjt_t kjt = random_batch(arena, &rng, B, 2, 0, iter & 1, iter & 2);
        uint32_t idx[] = {0, 1};
        sl_ikjt_t a, b;
        sl_dedup_stats_t sa, sb;
        cr_assert_eq(sl_dedup_group(x, &kjt, idx, 2, "g", arena, &a, &sa, NULL), SL_OK);
        cr_assert_eq(sl_dedup_group(c, &kjt, idx, 2, "g", arena, &b, &sb, NULL), SL_OK);
        cr_assert_eq(a.unique.stride, b.unique.stride);
        cr_assert(sl_kjt_equal(&a.unique, &b.unique));
        cr_assert_eq(memcmp(a.inverse, b.inverse, (size_t)B * 4), 0);
        assert_stats_eq(&sa, &sb);
        sl_arena_destroy(arena);
    }
    sl_dedup_destroy(x);
    sl_dedup_destroy(c);
}

/* FNV-1a, except that every list starting with id 777 hashes to 777: rows
 * that differ only after such an id collide. */
static uint64_t planted_hash(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    if (len >= 8) {
        int64_t first;
        memcpy(&first, p, sizeof first);
        if (first == 777) return 777;
    }
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* 2 keys of 50-id lists over B rows repeating with period 97 (so that
 * blocks hold matches), except that from row `from` on, key 0's lists start
 * [777, 0..2]: rows that planted_hash makes collide. The deduplicator with
 * XXH3 (x) and the colliding one agree, with the reference too, and the
 * one that saw the collision is fine afterwards. */
static void check_planted_collision(uint64_t *rng, sl_dedup_t *x, uint32_t B, uint32_t from)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    const uint32_t L = 50;
    static const char *const keys[] = {"a", "b"};
    int32_t *len = malloc(2 * B * sizeof *len);
    int64_t *val = malloc((size_t)2 * B * L * sizeof *val);
    for (uint32_t i = 0; i < 2 * B; i++)
        len[i] = (int32_t)L;
    for (uint32_t r = 0; r < B; r++)
        for (uint32_t k = 0; k < 2; k++)
            for (uint32_t i = 0; i < L; i++) {
                int64_t v = (int64_t)((r % 97) * 1000 + k * 100 + i);
                if (r >= from && k == 0 && i == 0) v = 777;
                if (r >= from && k == 0 && i == 1) v = (int64_t)tu_below(rng, 3);
                val[((size_t)k * B + r) * L + i] = v;
            }
    sl_kjt_t kjt = make_kjt(arena, 2, keys, B, len, val, NULL);
    sl_dedup_t *c = sl_dedup_new(NULL, planted_hash);
    uint32_t idx[] = {0, 1};
    sl_ikjt_t a, b;
    sl_dedup_stats_t sa, sb;
    cr_assert_eq(sl_dedup_group(x, &kjt, idx, 2, "g", arena, &a, &sa, NULL), SL_OK);
    cr_assert_eq(sl_dedup_group(c, &kjt, idx, 2, "g", arena, &b, &sb, NULL), SL_OK);
    cr_assert(sl_kjt_equal(&a.unique, &b.unique));
    cr_assert_eq(memcmp(a.inverse, b.inverse, B * sizeof(int32_t)), 0);
    assert_stats_eq(&sa, &sb);
    int32_t *ref = malloc(B * sizeof *ref);
    cr_assert_eq(ref_dedup(&kjt, 2, ref), a.unique.stride);
    assert_ints(a.inverse, ref, B, "inverse vs reference");
    cr_assert_eq(sl_dedup_group(c, &kjt, idx, 2, "g", arena, &b, &sb, NULL), SL_OK);
    cr_assert_eq(memcmp(a.inverse, b.inverse, B * sizeof(int32_t)), 0);
    free(ref);
    free(len);
    free(val);
    sl_dedup_destroy(c);
    sl_arena_destroy(arena);
}

Test(dedup, collision_in_a_later_block_is_redone_exactly)
{
    uint64_t rng = tu_seed("dedup::collision_in_a_later_block_is_redone_exactly");
    /* 50-id lists: blocks of 64 heads, so 400 rows span several blocks. The
     * planted collisions start at row 300. */
    sl_dedup_t *x = sl_dedup_new(NULL, NULL);
    check_planted_collision(&rng, x, 400, 300);
    sl_dedup_destroy(x);
}

/* Group inputs over 32 MiB copy each block's unique rows while in cache,
 * into an output sized for every row, closed up at the end (dedup.c,
 * INPLACE_BYTES): the same properties at every factor, both layouts, with
 * weights; and a collision found in a later block, which redoes the group
 * exactly and copies the classic way. */
Test(dedup, write_in_place_large_batches)
{
    uint64_t rng = tu_seed("dedup::write_in_place_large_batches");
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    static const uint32_t factors[] = {1, 3, 40};
    for (size_t f = 0; f < 3; f++) {
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        sl_dedup_synth_spec_t spec = {
            .batch_size = 20000,
            .group_features = 4,
            .plain_features = 1,
            .ids_per_list = 60, /* 20000 x 4 x (60 x 12 + 4) bytes: ~58 MB */
            .vary_lengths = f != 2,
            .dup_factor = factors[f],
            .adjacent = f == 2,
            .weighted = true,
            .seed = tu_next(&rng),
        };
        sl_kjt_t kjt;
        sl_dedup_group_spec_t group;
        cr_assert_eq(sl_dedup_synth(&spec, arena, &kjt, &group), SL_OK);
        check_batch(d, NULL, &kjt, spec.group_features);
        /* the group's keys out of input order, and not all of them: every
         * row's lists come back from the unique rows, key by key */
        uint32_t idx[3] = {3, 0, 2};
        sl_ikjt_t ik;
        cr_assert_eq(sl_dedup_group(d, &kjt, idx, 3, "g", arena, &ik, NULL, NULL), SL_OK);
        uint64_t *off = malloc(((size_t)kjt.num_keys * kjt.stride + 1) * sizeof *off);
        uint64_t *uoff = malloc(((size_t)3 * ik.unique.stride + 1) * sizeof *uoff);
        sl_kjt_offsets(&kjt, (int64_t *)off);
        sl_kjt_offsets(&ik.unique, (int64_t *)uoff);
        for (uint32_t j = 0; j < 3; j++)
            for (uint32_t r = 0; r < kjt.stride; r++) {
                size_t in = (size_t)idx[j] * kjt.stride + r;
                size_t un = (size_t)j * ik.unique.stride + (uint32_t)ik.inverse[r];
                int32_t n = kjt.lengths[in];
                cr_assert_eq(ik.unique.lengths[un], n, "key %u row %u", j, r);
                cr_assert_eq(memcmp(ik.unique.values + uoff[un], kjt.values + off[in],
                                    (size_t)n * sizeof(int64_t)),
                             0, "key %u row %u ids", j, r);
                cr_assert_eq(memcmp(ik.unique.weights + uoff[un], kjt.weights + off[in],
                                    (size_t)n * sizeof(float)),
                             0, "key %u row %u weights", j, r);
            }
        free(off);
        free(uoff);
        sl_arena_destroy(arena);
    }
    /* a planted collision at row 30000 of 45000 (2 keys of 50 ids: 36 MB) */
    check_planted_collision(&rng, d, 45000, 30000);
    sl_dedup_destroy(d);
}

Test(dedup, reuse_across_batch_sizes)
{
    uint64_t rng = tu_seed("dedup::reuse_across_batch_sizes");
    sl_dedup_t *shared = sl_dedup_new(NULL, NULL);
    static const uint32_t sizes[] = {1000, 10, 0, 5000, 1, 300, 5000, 2};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        sl_arena_t *arena = sl_arena_new(NULL, 0);
        uint32_t G = 1 + (uint32_t)tu_below(&rng, 3);
        sl_kjt_t kjt = random_batch(arena, &rng, sizes[i], G, 0, i & 1, i & 2);
        uint32_t idx[] = {0, 1, 2};
        sl_ikjt_t a, b;
        sl_dedup_stats_t sa, sb;
        sl_dedup_t *fresh = sl_dedup_new(NULL, NULL);
        /* Twice on the shared one: the second run sees the first's table. */
        cr_assert_eq(sl_dedup_group(shared, &kjt, idx, G, "g", arena, &a, &sa, NULL), SL_OK);
        cr_assert_eq(sl_dedup_group(shared, &kjt, idx, G, "g", arena, &a, &sa, NULL), SL_OK);
        cr_assert_eq(sl_dedup_group(fresh, &kjt, idx, G, "g", arena, &b, &sb, NULL), SL_OK);
        cr_assert(sl_kjt_equal(&a.unique, &b.unique));
        cr_assert_eq(memcmp(a.inverse, b.inverse, (size_t)sizes[i] * 4), 0);
        assert_stats_eq(&sa, &sb);
        sl_dedup_destroy(fresh);
        sl_arena_destroy(arena);
    }
    sl_dedup_destroy(shared);
}

/* ---- the generator ---- */

Test(dedup, synth_is_deterministic_and_seeded)
{
    sl_arena_t *arena = sl_arena_new(NULL, 0);
    sl_dedup_synth_spec_t spec = {.batch_size = 500,
                                  .group_features = 2,
                                  .plain_features = 2,
                                  .ids_per_list = 3,
                                  .vary_lengths = true,
                                  .dup_factor = 4,
                                  .weighted = true,
                                  .seed = 99};
    sl_kjt_t a, b, c;
    sl_dedup_group_spec_t g;
    cr_assert_eq(sl_dedup_synth(&spec, arena, &a, &g), SL_OK);
    cr_assert_eq(sl_dedup_synth(&spec, arena, &b, NULL), SL_OK);
    cr_assert(sl_kjt_equal(&a, &b));
    spec.seed = 100;
    cr_assert_eq(sl_dedup_synth(&spec, arena, &c, NULL), SL_OK);
    cr_assert_not(sl_kjt_equal(&a, &c));
    cr_assert_eq(sl_kjt_validate(&a, NULL), SL_OK);
    cr_assert_eq(a.num_keys, 4);
    cr_assert_str_eq(a.keys[0], "user_0");
    cr_assert_str_eq(a.keys[1], "user_1");
    cr_assert_str_eq(a.keys[2], "item_0");
    cr_assert_str_eq(a.keys[3], "item_1");
    cr_assert_str_eq(g.name, "user");
    cr_assert_eq(g.num_features, 2);
    cr_assert_eq(g.features, (const char *const *)a.keys);
    bool saw_empty = false;
    for (size_t i = 0; i < 4 * 500; i++) {
        cr_assert(a.lengths[i] >= 0 && a.lengths[i] <= 6);
        saw_empty |= a.lengths[i] == 0;
    }
    cr_assert(saw_empty);
    for (uint64_t i = 0; i < a.num_values; i++) {
        cr_assert(a.values[i] >= 0);
        cr_assert(a.weights[i] >= 0.0f && a.weights[i] < 1.0f);
    }
    spec.dup_factor = 0;
    cr_assert_eq(sl_dedup_synth(&spec, arena, &c, NULL), SL_ERR_INVALID);
    sl_arena_destroy(arena);
}

Test(dedup, synth_duplication_follows_the_spec)
{
    sl_dedup_t *d = sl_dedup_new(NULL, NULL);
    static const uint32_t factors[] = {1, 4, 16};
    for (size_t i = 0; i < 3; i++)
        for (int adjacent = 0; adjacent < 2; adjacent++) {
            sl_arena_t *arena = sl_arena_new(NULL, 0);
            sl_dedup_synth_spec_t spec = {.batch_size = 4096,
                                          .group_features = 3,
                                          .ids_per_list = 2,
                                          .dup_factor = factors[i],
                                          .adjacent = adjacent,
                                          .seed = 1234 + i};
            sl_kjt_t kjt;
            sl_dedup_group_spec_t g;
            cr_assert_eq(sl_dedup_synth(&spec, arena, &kjt, &g), SL_OK);
            for (size_t c = 0; c < 3 * 4096; c++)
                cr_assert_eq(kjt.lengths[c], 2);
            uint32_t idx[] = {0, 1, 2};
            sl_ikjt_t out;
            sl_dedup_stats_t st;
            cr_assert_eq(sl_dedup_group(d, &kjt, idx, 3, "user", arena, &out, &st, NULL), SL_OK);
            double f = st.factor;
            cr_assert(f > factors[i] * 0.85 && f < factors[i] * 1.15,
                      "factor %.2f for dup_factor %u", f, factors[i]);
            if (adjacent) /* every repeat follows its session's previous row */
                cr_assert_eq(st.adjacent_hits, st.batch_size - st.unique_rows);
            else if (factors[i] > 1)
                cr_assert_lt(st.adjacent_hits, (st.batch_size - st.unique_rows) / 4);
            sl_arena_destroy(arena);
        }
    sl_dedup_destroy(d);
}

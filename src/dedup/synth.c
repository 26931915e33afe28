/* Seeded generator of session-like batches for tests, benchmarks and the
 * demo: the dedup group's rows come in sessions (one row repeated a random
 * number of times, dup_factor on average), adjacent or shuffled; plain
 * features are per row. Deterministic for a given spec, seed included. */
#include "dedup/dedup.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's finaliser: a bijection that mixes every bit into every bit. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* splitmix64 step. */
static inline uint64_t next64(uint64_t *state)
{
    return mix64(*state += GOLDEN);
}

/* Uniform in [0, n), n > 0; the modulo bias (< n / 2^64) does not matter here. */
static inline uint64_t below(uint64_t *state, uint64_t n)
{
    return next64(state) % n;
}

enum { DOMAIN_SESSIONS = 1, DOMAIN_GROUP = 2, DOMAIN_PLAIN = 3 };

/* The random stream of one list: of session (or row) `a`, key j. Every row of
 * a session regenerates the same list from it, so nothing is stored per
 * session. */
static inline uint64_t cell_state(uint64_t seed, uint64_t domain, uint64_t a, uint64_t j)
{
    return mix64(mix64(mix64(seed + domain * GOLDEN) ^ a) + j * GOLDEN);
}

static inline int32_t cell_length(const sl_dedup_synth_spec_t *spec, uint64_t *state)
{
    if (!spec->vary_lengths) return (int32_t)spec->ids_per_list;
    return (int32_t)below(state, 2 * (uint64_t)spec->ids_per_list + 1);
}

/* The stream of feature k's list in row r: a group feature's from the
 * row's session (the session's rows get the same list), a plain one's
 * from the row. Both passes over the lists start from it. */
static inline uint64_t list_state(const sl_dedup_synth_spec_t *spec, const uint32_t *session,
                                  uint64_t k, uint32_t r)
{
    return k < spec->group_features ? cell_state(spec->seed, DOMAIN_GROUP, session[r], k)
                                    : cell_state(spec->seed, DOMAIN_PLAIN, r, k);
}

sl_err_t sl_dedup_synth(const sl_dedup_synth_spec_t *spec, sl_arena_t *arena, sl_kjt_t *out,
                        sl_dedup_group_spec_t *group)
{
    if (spec == NULL || arena == NULL || out == NULL) return SL_ERR_INVALID;
    const uint32_t B = spec->batch_size, G = spec->group_features, P = spec->plain_features;
    const uint64_t K = (uint64_t)G + P;
    /* Lengths up to 2 * ids_per_list must fit int32; dup_factor 0 means
     * nothing. */
    if (spec->dup_factor == 0 || spec->ids_per_list > INT32_MAX / 2 || K > UINT32_MAX ||
        K * B > UINT32_MAX)
        return SL_ERR_INVALID;

    /* Session of every row: runs of length uniform in [1, 2 f - 1] (mean f),
     * then a seeded Fisher-Yates shuffle unless duplicates stay adjacent. */
    uint32_t *session = sl_arena_alloc(arena, ((size_t)B + 1) * sizeof *session);
    char *name_buf = sl_arena_alloc(arena, (size_t)(K + 1) * 24);
    const char **names = sl_arena_alloc(arena, (size_t)(K + 1) * sizeof *names);
    int32_t *lengths = sl_arena_alloc(arena, ((size_t)(K * B) + 1) * sizeof *lengths);
    if (session == NULL || name_buf == NULL || names == NULL || lengths == NULL)
        return SL_ERR_NOMEM;
    uint64_t st = mix64(spec->seed + DOMAIN_SESSIONS * GOLDEN);
    uint32_t s = 0;
    for (uint32_t r = 0; r < B; s++) {
        uint64_t len =
            spec->dup_factor == 1 ? 1 : 1 + below(&st, 2 * (uint64_t)spec->dup_factor - 1);
        for (uint64_t i = 0; i < len && r < B; i++)
            session[r++] = s;
    }
    if (!spec->adjacent)
        for (uint32_t r = B; r > 1; r--) {
            uint32_t o = (uint32_t)below(&st, r);
            uint32_t t = session[r - 1];
            session[r - 1] = session[o];
            session[o] = t;
        }

    for (uint64_t k = 0; k < K; k++) {
        names[k] = name_buf + k * 24;
        snprintf(name_buf + k * 24, 24, k < G ? "user_%u" : "item_%u",
                 (unsigned)(k < G ? k : k - G));
    }
    /* Two passes: lengths (to size values), then the lists themselves from
     * the same streams. */
    uint64_t total = 0;
    for (uint64_t k = 0; k < K; k++)
        for (uint32_t r = 0; r < B; r++) {
            uint64_t cs = list_state(spec, session, k, r);
            int32_t len = cell_length(spec, &cs);
            lengths[k * B + r] = len;
            total += (uint64_t)len;
        }
    SL_FORWARD_IF_ERROR(sl_kjt_init(out, arena, (uint32_t)K, names, B, total, spec->weighted));
    if (K * B > 0) memcpy(out->lengths, lengths, (size_t)(K * B) * sizeof *lengths);
    uint64_t at = 0;
    for (uint64_t k = 0; k < K; k++)
        for (uint32_t r = 0; r < B; r++) {
            uint64_t cs = list_state(spec, session, k, r);
            int32_t len = cell_length(spec, &cs);
            for (int32_t i = 0; i < len; i++)
                out->values[at + (uint64_t)i] = (int64_t)(next64(&cs) >> 1);
            if (spec->weighted)
                for (int32_t i = 0; i < len; i++)
                    out->weights[at + (uint64_t)i] = (float)(next64(&cs) >> 40) * 0x1p-24f;
            at += (uint64_t)len;
        }
    if (group != NULL) {
        group->name = "user";
        group->num_features = G;
        group->features = out->keys;
    }
    return SL_OK;
}

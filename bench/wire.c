/* Wire encode/decode throughput against memcpy of the same bytes, measured in
 * the same run. Encode is sl_wire_encode_into a preallocated frame (validate
 * + header + one memcpy per buffer); decode is sl_wire_decode (prefix and
 * header checks, zero-copy views, full validation). Target: encode+decode
 * at least half of memcpy speed.
 *
 * usage: bench_wire [reps] [seed]   (defaults 200, 1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "sluice/wire.h"

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void die(const char *what, const sl_error_t *err)
{
    fprintf(stderr, "bench_wire: %s: %s\n", what, err != NULL ? err->msg : "out of memory");
    exit(1);
}

/* num_keys keys named <prefix><k> over stride rows of ids_per_row ids each
 * (jittered by +-jitter), optionally weighted. */
static void fill_kjt(sl_kjt_t *kjt, sl_arena_t *arena, const char *prefix, uint32_t num_keys,
                     uint32_t stride, uint32_t ids_per_row, uint32_t jitter, int weighted,
                     uint64_t *rng)
{
    char names[64][32];
    const char *keys[64];
    for (uint32_t k = 0; k < num_keys; k++) {
        snprintf(names[k], sizeof names[k], "%s%u", prefix, k);
        keys[k] = names[k];
    }
    size_t rows = (size_t)num_keys * stride;
    int32_t *len = malloc(rows * sizeof(int32_t) + 1);
    uint64_t total = 0;
    for (size_t i = 0; i < rows; i++) {
        int32_t l = (int32_t)ids_per_row;
        if (jitter > 0) l += (int32_t)(next(rng) % (2 * jitter + 1)) - (int32_t)jitter;
        len[i] = l < 0 ? 0 : l;
        total += (uint64_t)len[i];
    }
    if (sl_kjt_init(kjt, arena, num_keys, keys, stride, total, weighted) != SL_OK)
        die("kjt_init", NULL);
    memcpy(kjt->lengths, len, rows * sizeof(int32_t));
    free(len);
    for (uint64_t i = 0; i < total; i++) {
        kjt->values[i] = (int64_t)(next(rng) >> 1);
        if (weighted) kjt->weights[i] = (float)(next(rng) % 1000) / 1000.0f;
    }
}

static void fill_dense(sl_dense_t *d, sl_arena_t *arena, uint32_t rows, uint32_t cols,
                       uint64_t *rng)
{
    if (sl_dense_init(d, arena, rows, cols, NULL) != SL_OK) die("dense_init", NULL);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        d->data[i] = (float)(next(rng) % 997);
}

typedef struct scenario {
    const char *name;
    uint32_t batch_size;
    uint32_t plain_keys, plain_ids; /* plain KJT: keys x ids per row */
    uint32_t group_keys, group_ids; /* one dedup group (0 keys: none) */
    uint32_t dup_factor;            /* B / U of the group */
    uint32_t dense_cols;
} scenario_t;

static sl_batch_t *build(const scenario_t *sc, uint64_t seed)
{
    uint64_t rng = seed;
    uint32_t B = sc->batch_size;
    sl_batch_t *b = sl_batch_new(NULL);
    if (b == NULL) die("batch_new", NULL);
    b->batch_size = B;
    uint32_t jitter = sc->plain_ids > 1 ? sc->plain_ids / 2 : 0;
    fill_kjt(&b->sparse, b->arena, "sparse_", sc->plain_keys, B, sc->plain_ids, jitter, 0, &rng);
    if (sc->group_keys > 0) {
        uint32_t U = B / sc->dup_factor;
        b->num_groups = 1;
        b->groups = sl_arena_calloc(b->arena, 1, sizeof(sl_ikjt_t));
        sl_ikjt_t *g = &b->groups[0];
        g->name = "user";
        g->batch_size = B;
        fill_kjt(&g->unique, b->arena, "user_", sc->group_keys, U, sc->group_ids, sc->group_ids / 2,
                 1, &rng);
        g->inverse = sl_arena_alloc(b->arena, (size_t)B * sizeof(int32_t));
        /* Session-clustered: dup_factor consecutive rows share a user. */
        for (uint32_t r = 0; r < B; r++)
            g->inverse[r] = (int32_t)(r / sc->dup_factor);
    }
    fill_dense(&b->dense, b->arena, B, sc->dense_cols, &rng);
    fill_dense(&b->labels, b->arena, B, 1, &rng);
    b->sample_ids = sl_arena_alloc(b->arena, (size_t)B * sizeof(int64_t));
    for (uint32_t r = 0; r < B; r++)
        b->sample_ids[r] = (int64_t)r;
    sl_error_t err = {0};
    if (sl_batch_validate(b, &err) != SL_OK) die("validate", &err);
    return b;
}

static double gbps(size_t bytes, double seconds)
{
    return seconds > 0 ? (double)bytes / seconds / 1e9 : 0;
}

static void run(const scenario_t *sc, int reps, uint64_t seed)
{
    sl_batch_t *b = build(sc, seed);
    size_t cap = sl_wire_encoded_size(b);
    void *frame = sl_alloc_aligned(NULL, cap, SL_ALIGN);
    if (frame == NULL) die("frame", NULL);
    sl_error_t err = {0};
    size_t len = 0;
    /* Warm up: touch the frame and the code paths. */
    if (sl_wire_encode_into(b, frame, cap, &len, &err) != SL_OK) die("encode", &err);

    double t_enc = 1e30, t_dec = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        sl_err_t rc = sl_wire_encode_into(b, frame, cap, &len, &err);
        double t = bench_now() - t0;
        if (rc != SL_OK) die("encode", &err);
        bench_consume(frame, len);
        if (t < t_enc) t_enc = t;
    }
    for (int r = 0; r < reps; r++) {
        sl_batch_t *d = NULL;
        double t0 = bench_now();
        sl_err_t rc = sl_wire_decode(frame, len, NULL, NULL, &d, &err);
        double t = bench_now() - t0;
        if (rc != SL_OK) die("decode", &err);
        bench_consume(&d->batch_size, sizeof d->batch_size);
        sl_batch_destroy(d);
        if (t < t_dec) t_dec = t;
    }
    double t_cpy = bench_memcpy_seconds(len, reps);
    double both = gbps(len, t_enc + t_dec), cpy = gbps(len, t_cpy);
    printf("%-26s %10zu %9.2f %9.2f %9.2f %9.2f %7.2f %s\n", sc->name, len, gbps(len, t_enc),
           gbps(len, t_dec), both, cpy, cpy > 0 ? both / cpy : 0,
           cpy > 0 && both / cpy >= 0.5 ? "ok" : "BELOW 0.5");
    sl_free(NULL, frame, cap);
    sl_batch_destroy(b);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    if (reps < 1) reps = 1;
    const scenario_t scenarios[] = {
        {"B4096 26x1 sparse +13 dense", 4096, 26, 1, 0, 0, 1, 13},
        {"B4096 10x50 sparse", 4096, 10, 50, 0, 0, 1, 0},
        {"B4096 10x1 + group 5x20/8", 4096, 10, 1, 5, 20, 8, 13},
    };
    printf("wire encode/decode, best of %d, seed %llu (GB/s = 1e9 bytes/s)\n", reps,
           (unsigned long long)seed);
    printf("%-26s %10s %9s %9s %9s %9s %7s\n", "batch", "frame B", "enc", "dec", "enc+dec",
           "memcpy", "ratio");
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        run(&scenarios[i], reps, seed);
    return 0;
}

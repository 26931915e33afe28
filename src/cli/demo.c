/* `sluice demo`: the main job on an embedded default. Generates session-like
 * batches (user features constant within a session, item features per
 * sample), deduplicates the user features into an IKJT, encodes each batch
 * for the wire both with and without dedup, decodes it back, checks that
 * expanding the IKJT gives exactly the original rows, and prints the figures. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli.h"
#include "dedup/dedup.h"
#include "sluice/wire.h"

typedef struct demo_options {
    uint32_t batches;
    uint32_t batch_size;
    uint32_t session_length;
    uint32_t history_ids;
    uint64_t seed;
} demo_options_t;

typedef struct demo_totals {
    uint64_t samples;
    uint64_t unique_rows;
    uint64_t wire_bytes_dedup;
    uint64_t wire_bytes_plain;
    double dedup_seconds;
    double wire_seconds;
} demo_totals_t;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void demo_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice demo [--batches N] [--batch-size B] [--session-length S]\n"
            "                   [--history-ids K] [--seed X]\n"
            "Generates session-like batches (4 user features of K ids, constant within a\n"
            "session of S samples; 4 item features of 1-8 ids per sample), deduplicates the\n"
            "user features, round-trips every batch through the wire encoding and checks\n"
            "expand(dedup(batch)) == batch. Defaults: 64 batches of 4096, S=16, K=100.\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0') return -1;
    *out = v;
    return 0;
}

static int parse_options(int argc, char **argv, demo_options_t *o)
{
    static const struct option longopts[] = {
        {"batches", required_argument, 0, 'n'},  {"batch-size", required_argument, 0, 'b'},
        {"session-length", required_argument, 0, 's'},
        {"history-ids", required_argument, 0, 'k'}, {"seed", required_argument, 0, 'x'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    *o = (demo_options_t){64, 4096, 16, 100, 42};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        uint64_t v = 0;
        if (c == 'h') {
            demo_usage(stdout);
            return 1;
        }
        if (c == '?' || parse_u64(optarg, &v) != 0 || (c != 'x' && (v == 0 || v > 1u << 20))) {
            if (c != '?') fprintf(stderr, "sluice demo: bad value '%s'\n", optarg);
            demo_usage(stderr);
            return 2;
        }
        switch (c) {
        case 'n': o->batches = (uint32_t)v; break;
        case 'b': o->batch_size = (uint32_t)v; break;
        case 's': o->session_length = (uint32_t)v; break;
        case 'k': o->history_ids = (uint32_t)v; break;
        case 'x': o->seed = v; break;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "sluice demo: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* Encode batch, decode the frame, and check the decoded batch expands to the
 * same rows as the original. @return the frame size, 0 on failure. */
static size_t wire_round_trip(const sl_batch_t *batch, sl_error_t *err)
{
    void *frame = NULL;
    size_t len = 0;
    if (sl_wire_encode(batch, NULL, &frame, &len, err) != SL_OK) return 0;
    sl_batch_t *decoded = NULL;
    sl_err_t rc = sl_wire_decode(frame, len, NULL, NULL, &decoded, err);
    size_t result = 0;
    if (rc == SL_OK) {
        sl_kjt_t a, b;
        sl_arena_t *scratch = sl_arena_new(NULL, 0);
        if (scratch != NULL && sl_batch_expand(batch, scratch, &a, err) == SL_OK &&
            sl_batch_expand(decoded, scratch, &b, err) == SL_OK) {
            if (sl_kjt_equal(&a, &b))
                result = len;
            else
                sl_error_set(err, SL_ERR_CORRUPT, "decoded batch differs from the original");
        }
        sl_arena_destroy(scratch);
    }
    sl_batch_destroy(decoded);
    sl_free(NULL, frame, len);
    return result;
}

static int run_batch(sl_dedup_t *dedup, const demo_options_t *o, uint32_t index,
                     demo_totals_t *t, sl_error_t *err)
{
    sl_arena_t *input = sl_arena_new(NULL, 0);
    sl_batch_t *with = sl_batch_new(NULL), *without = sl_batch_new(NULL);
    int rc = 1;
    if (input == NULL || with == NULL || without == NULL) {
        sl_error_set(err, SL_ERR_NOMEM, "demo: out of memory");
        goto out;
    }
    sl_dedup_synth_spec_t spec = {
        .batch_size = o->batch_size,
        .group_features = 4,
        .plain_features = 4,
        .ids_per_list = o->history_ids,
        .vary_lengths = true,
        .dup_factor = o->session_length,
        .adjacent = true,
        .weighted = false,
        .seed = o->seed + index,
    };
    sl_kjt_t all;
    sl_dedup_group_spec_t group;
    if (sl_dedup_synth(&spec, input, &all, &group) != SL_OK) {
        sl_error_set(err, SL_ERR_NOMEM, "demo: generating batch %u", index);
        goto out;
    }
    sl_dedup_stats_t stats;
    double t0 = now_seconds();
    if (sl_dedup_batch(dedup, &all, &group, 1, with, &stats, err) != SL_OK) goto out;
    double t1 = now_seconds();
    /* The no-dedup path: the same features, all in the plain KJT. */
    if (sl_dedup_batch(dedup, &all, NULL, 0, without, NULL, err) != SL_OK) goto out;
    size_t dedup_bytes = wire_round_trip(with, err);
    double t2 = now_seconds();
    size_t plain_bytes = dedup_bytes ? wire_round_trip(without, err) : 0;
    if (dedup_bytes == 0 || plain_bytes == 0) goto out;
    t->samples += o->batch_size;
    t->unique_rows += stats.unique_rows;
    t->wire_bytes_dedup += dedup_bytes;
    t->wire_bytes_plain += plain_bytes;
    t->dedup_seconds += t1 - t0;
    t->wire_seconds += t2 - t1;
    rc = 0;
out:
    sl_batch_destroy(with);
    sl_batch_destroy(without);
    sl_arena_destroy(input);
    return rc;
}

int sl_cli_demo(int argc, char **argv)
{
    demo_options_t o;
    int prc = parse_options(argc, argv, &o);
    if (prc != 0) return prc == 1 ? 0 : prc;
    sl_dedup_t *dedup = sl_dedup_new(NULL, NULL);
    if (dedup == NULL) {
        fprintf(stderr, "sluice demo: out of memory\n");
        return 1;
    }
    printf("sluice demo: %u batches of %u samples; sessions of %u samples; "
           "user history %u ids (mean) x 4 features\n",
           o.batches, o.batch_size, o.session_length, o.history_ids);
    demo_totals_t t = {0};
    sl_error_t err = {0};
    double start = now_seconds();
    for (uint32_t i = 0; i < o.batches; i++) {
        if (run_batch(dedup, &o, i, &t, &err) != 0) {
            fprintf(stderr, "sluice demo: batch %u: %s\n", i, err.msg);
            sl_dedup_destroy(dedup);
            return 1;
        }
    }
    double elapsed = now_seconds() - start;
    sl_dedup_destroy(dedup);
    printf("  every batch: wire round trip checked, expand(dedup(batch)) == batch\n");
    printf("  samples                 %" PRIu64 "\n", t.samples);
    printf("  dedup factor (user)     %.2f  (%" PRIu64 " rows -> %" PRIu64 " unique)\n",
           (double)t.samples / (double)(t.unique_rows ? t.unique_rows : 1), t.samples,
           t.unique_rows);
    printf("  wire bytes without dedup %.1f MB\n", (double)t.wire_bytes_plain / 1e6);
    printf("  wire bytes with dedup    %.1f MB  (%.2fx smaller)\n",
           (double)t.wire_bytes_dedup / 1e6,
           (double)t.wire_bytes_plain / (double)t.wire_bytes_dedup);
    printf("  dedup throughput        %.2f M samples/s\n",
           (double)t.samples / t.dedup_seconds / 1e6);
    printf("  encode+decode+check     %.2f M samples/s\n",
           (double)t.samples / t.wire_seconds / 1e6);
    printf("  wall time               %.2f s\n", elapsed);
    return 0;
}

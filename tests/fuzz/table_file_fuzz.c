/* Fuzz target for the warehouse data file reader: any bytes are opened as a
 * data file from memory and every stripe is read with every feature, in the
 * expanded and the dedup form, with checksums verified and (so that mutated
 * stream bytes reach the decoders) without; then verify runs over the same
 * bytes. Every read either fails with an error or yields a batch that passes
 * sl_batch_validate, and reading twice gives the same rows (determinism).
 * Sanitizers catch out-of-bounds reads; a broken invariant aborts. Seed
 * inputs are in tests/fuzz/corpus/table_file/ (written by
 * warehouse_corrupt_test's corpus test with SLUICE_WRITE_CORPUS=dir):
 * version-2 files (valid-packed stores its bit-packed, delta and dictionary
 * streams without zstd, so that mutations reach those decoders;
 * bad-packed-bits has dictionary indices and packed bits broken) and, as
 * v1-*, files of the version-1 writer. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "warehouse/table_tools.h"
#include "warehouse/warehouse.h"

static void fail(const char *what, const sl_error_t *err)
{
    fprintf(stderr, "table_file_fuzz: %s: %s\n", what, err != NULL ? err->msg : "");
    abort();
}

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    return n == 0 || p == NULL ? h : XXH3_64bits_withSeed(p, n, h);
}

static uint64_t hash_kjt(uint64_t h, const sl_kjt_t *k)
{
    h = mix(h, k->lengths, (size_t)k->num_keys * k->stride * 4);
    h = mix(h, k->values, (size_t)k->num_values * 8);
    return mix(h, k->weights, (size_t)k->num_values * 4);
}

static uint64_t hash_rows(uint64_t h, const sl_wh_rows_t *x)
{
    const sl_batch_t *b = &x->batch;
    size_t n = b->batch_size;
    h = mix(h, b->sample_ids, n * 8);
    h = mix(h, x->session_ids, n * 8);
    h = mix(h, x->timestamps, n * 8);
    h = mix(h, b->dense.data, n * b->dense.cols * 4);
    h = mix(h, b->labels.data, n * b->labels.cols * 4);
    h = hash_kjt(h, &b->sparse);
    for (uint32_t g = 0; g < b->num_groups; g++) {
        h = hash_kjt(h, &b->groups[g].unique);
        h = mix(h, b->groups[g].inverse, n * 4);
    }
    return h;
}

/* Read every stripe; @return a hash of all rows read (0 bits mixed for
 * stripes that failed). */
static uint64_t read_all(const uint8_t *data, size_t size, const sl_wh_limits_t *lim, int mode)
{
    sl_wh_read_opts_t o;
    memset(&o, 0, sizeof o);
    o.limits = *lim;
    o.dedup_form = mode & 1;
    o.skip_checksums = mode & 2;
    sl_error_t err = {0};
    sl_wh_reader_t *r;
    uint64_t h = 1;
    if (sl_wh_reader_open_mem(data, size, "fuzz.slc", &o, &r, &err) != SL_OK) return h;
    for (uint32_t s = 0; s < sl_wh_reader_num_stripes(r); s++) {
        const sl_wh_rows_t *x;
        if (sl_wh_reader_read_stripe(r, s, &x, &err) != SL_OK) {
            if (x != NULL) fail("rows handed out with an error", &err);
            h = mix(h, &s, sizeof s);
            continue;
        }
        sl_error_t verr = {0};
        if (sl_batch_validate(&x->batch, &verr) != SL_OK) fail("invalid batch", &verr);
        if (mode & 1) {
            /* the dedup form expands to a valid KJT too */
            sl_arena_t *arena = sl_arena_new(NULL, 0);
            sl_kjt_t all;
            if (arena == NULL || sl_batch_expand(&x->batch, arena, &all, &verr) != SL_OK)
                fail("expand", &verr);
            sl_arena_destroy(arena);
        }
        h = hash_rows(h, x);
    }
    sl_wh_reader_close(r);
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Small limits keep every input cheap; the checks are the same. */
    sl_wh_limits_t lim = {.max_footer_bytes = 1 << 20,
                          .max_stripe_rows = 1 << 16,
                          .max_stripes = 1 << 12,
                          .max_streams = 1 << 12,
                          .max_stripe_bytes = 64u << 20};
    /* A copy puts the end of the input at the end of an allocation, where
     * ASan sees overreads. */
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL) return 0;
    if (size) memcpy(copy, data, size);
    for (int mode = 0; mode < 4; mode++) {
        uint64_t a = read_all(copy, size, &lim, mode);
        if (mode == 2 && read_all(copy, size, &lim, mode) != a) fail("not deterministic", NULL);
    }
    sl_error_t err = {0};
    sl_wh_verify_stats_t st;
    sl_err_t rc = sl_wh_verify_mem(copy, size, "fuzz.slc", &lim, NULL, NULL, NULL, &st, &err);
    if ((rc == SL_OK) != (st.problems == 0)) fail("verify result and problem count disagree", &err);
    /* Mutations of the footer rarely keep its checksum; patch the trailer's
     * footer checksum so that they reach the footer's validation too. */
    if (size >= 24 && memcmp(copy + size - 4, "SLCT", 4) == 0) {
        uint32_t flen;
        memcpy(&flen, copy + size - 16, 4);
        if (flen <= size - 24) {
            uint64_t sum = XXH3_64bits(copy + size - 16 - flen, flen);
            memcpy(copy + size - 12, &sum, 8);
            for (int mode = 0; mode < 4; mode++)
                read_all(copy, size, &lim, mode);
            rc = sl_wh_verify_mem(copy, size, "fuzz.slc", &lim, NULL, NULL, NULL, &st, &err);
            if ((rc == SL_OK) != (st.problems == 0)) fail("verify disagrees (patched)", &err);
        }
    }
    free(copy);
    return 0;
}

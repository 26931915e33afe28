/* Fuzz target for the Parquet reader (src/parquet): any bytes are opened as
 * a Parquet file from memory (the footer decoder: magic, length, Thrift
 * compact FileMetaData, the schema tree), then every column chunk of every
 * row group is read to its end in small batches (the page decoders: page
 * headers, codecs, CRCs, levels, every value encoding). Every read either
 * fails with an error or yields batches whose offsets and validity are
 * consistent, and reading twice gives the same values (determinism).
 * Sanitizers catch out-of-bounds reads; a broken invariant aborts. Seed
 * inputs are in tests/fuzz/corpus/parquet_file/: the fixtures of
 * tests/data/parquet/ (pyarrow, DuckDB, polars and hand-made files; written
 * by tests/parquet/make_fixtures.py). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "parquet/parquet.h"

/* Rows read per column at most, so that a tiny input claiming billions of
 * values cannot hold the fuzzer up. */
#define MAX_ROWS 200000

static void check(const sl_pq_column_t *c, const sl_pq_batch_t *b)
{
    if (c->is_list) {
        if (b->list_off[0] != 0 || b->list_off[b->rows] != b->slots) abort();
        for (uint32_t r = 0; r < b->rows; r++)
            if (b->list_off[r] > b->list_off[r + 1]) abort();
    } else if (b->slots != b->rows) {
        abort();
    }
    if (b->kind == SL_PQ_KIND_BYTES)
        for (uint32_t s = 0; s < b->slots; s++)
            if (b->bytes_off[s] > b->bytes_off[s + 1]) abort();
}

static uint64_t hash_batch(uint64_t h, const sl_pq_batch_t *b)
{
    h = XXH3_64bits_withSeed(b->valid, b->slots, h ^ b->rows);
    size_t w = b->kind == SL_PQ_KIND_F32 ? 4 : 8;
    const void *v = b->kind == SL_PQ_KIND_I64   ? (const void *)b->i64
                    : b->kind == SL_PQ_KIND_F32 ? (const void *)b->f32
                    : b->kind == SL_PQ_KIND_F64 ? (const void *)b->f64
                                                : (const void *)b->bytes_off;
    if (b->slots > 0) h = XXH3_64bits_withSeed(v, b->slots * w, h);
    if (b->kind == SL_PQ_KIND_BYTES && b->slots > 0)
        h = XXH3_64bits_withSeed(b->bytes, b->bytes_off[b->slots], h);
    return h;
}

static uint64_t read_all(const uint8_t *data, size_t size)
{
    sl_pq_memory_t mem;
    sl_pq_source_t src;
    sl_pq_source_memory(&mem, data, size, &src);
    sl_error_t err = {0};
    sl_pq_file_t *f;
    if (sl_pq_file_open(&src, "fuzz", NULL, &f, &err) != SL_OK) {
        if (err.msg[0] == '\0') abort(); /* every error says what */
        return 1;
    }
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    uint64_t h = m->num_columns;
    for (uint32_t g = 0; g < m->num_row_groups; g++)
        for (uint32_t c = 0; c < m->num_columns; c++) {
            sl_pq_reader_t *r;
            if (sl_pq_reader_new(f, g, c, &r, &err) != SL_OK) {
                h = XXH3_64bits_withSeed(err.msg, strlen(err.msg), h);
                continue;
            }
            uint64_t rows = 0;
            const sl_pq_batch_t *b;
            while (rows < MAX_ROWS) {
                if (sl_pq_reader_next(r, 64, &b, &err) != SL_OK) {
                    if (err.msg[0] == '\0') abort();
                    h = XXH3_64bits_withSeed(err.msg, strlen(err.msg), h);
                    break;
                }
                if (b->rows == 0) break;
                check(&m->columns[c], b);
                h = hash_batch(h, b);
                rows += b->rows;
            }
            sl_pq_reader_destroy(r);
        }
    sl_pq_file_destroy(f);
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (read_all(data, size) != read_all(data, size)) abort();
    return 0;
}

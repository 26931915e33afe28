/* Reads the same columns of a Parquet file round after round with sluice's
 * own reader (src/parquet), on one thread: every row group, every selected
 * column decoded to its typed arrays in batches of --batch-rows rows. Prints
 * one line per round with rows, wall and CPU seconds and rows/s per core.
 * bench/parquet_read.py runs it interleaved with pyarrow.parquet on the
 * same file (docs/BENCHMARKS.md, "Parquet read"); this program prints
 * figures only, never pass or fail.
 *
 *   bench_parquet_read FILE [COLUMN,COLUMN...] [ROUNDS] [BATCH_ROWS] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "parquet/parquet.h"

static int read_once(sl_pq_file_t *f, const uint32_t *cols, uint32_t n, uint32_t batch,
                     uint64_t *rows_out, uint64_t *values_out)
{
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    sl_error_t err = {0};
    uint64_t rows = 0, values = 0;
    for (uint32_t g = 0; g < m->num_row_groups; g++) {
        for (uint32_t i = 0; i < n; i++) {
            sl_pq_reader_t *r;
            if (sl_pq_reader_new(f, g, cols[i], &r, &err) != SL_OK) {
                fprintf(stderr, "bench_parquet_read: %s\n", err.msg);
                return -1;
            }
            const sl_pq_batch_t *b;
            for (;;) {
                if (sl_pq_reader_next(r, batch, &b, &err) != SL_OK) {
                    fprintf(stderr, "bench_parquet_read: %s\n", err.msg);
                    sl_pq_reader_destroy(r);
                    return -1;
                }
                if (b->rows == 0) break;
                if (i == 0) rows += b->rows;
                values += b->slots;
                bench_consume(b->valid, b->slots);
            }
            sl_pq_reader_destroy(r);
        }
    }
    *rows_out = rows;
    *values_out = values;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_parquet_read FILE [COLUMN,COLUMN...] [ROUNDS] "
                        "[BATCH_ROWS]\n");
        return 2;
    }
    const char *path = argv[1];
    const char *list = argc > 2 && strcmp(argv[2], "all") != 0 ? argv[2] : NULL;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    uint32_t batch = argc > 4 ? (uint32_t)atoi(argv[4]) : 8192;
    sl_error_t err = {0};
    sl_pq_source_t src;
    sl_pq_file_t *f;
    if (sl_pq_source_file(path, &src, &err) != SL_OK ||
        sl_pq_file_open(&src, path, NULL, &f, &err) != SL_OK) {
        fprintf(stderr, "bench_parquet_read: %s\n", err.msg);
        return 1;
    }
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    uint32_t *cols = calloc(m->num_columns + 1, sizeof *cols), n = 0;
    if (list == NULL) {
        for (uint32_t i = 0; i < m->num_columns; i++)
            cols[n++] = i;
    } else {
        char *copy = strdup(list);
        for (char *tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ",")) {
            int64_t c = sl_pq_find_column(m, tok);
            if (c < 0 || n >= m->num_columns) {
                fprintf(stderr, "bench_parquet_read: no column '%s'\n", tok);
                return 2;
            }
            cols[n++] = (uint32_t)c;
        }
        free(copy);
    }
    for (int k = 0; k < rounds; k++) {
        uint64_t rows, values;
        double t0 = bench_now(), c0 = bench_cpu_seconds();
        if (read_once(f, cols, n, batch, &rows, &values) != 0) return 1;
        double wall = bench_now() - t0, cpu = bench_cpu_seconds() - c0;
        printf("sluice round %d: %" PRIu64 " rows, %u columns, %" PRIu64
               " values, %.3f s wall, %.3f s cpu, %.0f rows/s per core\n",
               k, rows, n, values, wall, cpu, (double)rows / (cpu > 0 ? cpu : wall));
        fflush(stdout);
    }
    free(cols);
    sl_pq_file_destroy(f);
    sl_pq_source_file_close(&src);
    return 0;
}

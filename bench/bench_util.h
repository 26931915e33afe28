/* Helpers for the benchmarks: a monotonic clock, the memcpy baseline, and
 * best-of-N timing. Benchmarks print figures; they never pass or fail. */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sluice/alloc.h"
#include "store/store.h"
#include "warehouse/warehouse.h"

double bench_now(void); /* seconds, CLOCK_MONOTONIC */

/* Best (smallest) seconds of one memcpy of n bytes between two buffers that
 * were touched beforehand, over reps repetitions. */
double bench_memcpy_seconds(size_t n, int reps);

/* Keeps the optimiser from discarding a result. */
void bench_consume(const void *p, size_t n);

/* Process CPU seconds (user + system), for per-core figures. */
double bench_cpu_seconds(void);

/* Bytes held now and at the most through an allocator from
 * bench_counting_allocator. */
typedef struct bench_counting {
    size_t now, peak;
} bench_counting_t;

/* The default allocator, counting into c (borrowed while the allocator
 * is in use): a benchmark's memory figures. */
sl_allocator_t bench_counting_allocator(bench_counting_t *c);
/* Whether anything is still held once all is freed: @return 0, or 1 with
 * "leak: N bytes" on stderr. */
int bench_counting_leaked(const bench_counting_t *c);

/* The sluice program for benchmarks that run it: $SLUICE_BINARY, else
 * `sluice` next to argv0 (the benchmark). @return 0, or -1 with a message
 * on stderr starting with who. */
int bench_sluice_binary(const char *argv0, const char *who, char *out, size_t cap);

/* A trainer client in master mode on a thread of the benchmark
 * (bench_trainer_run): set master, job, rank, world_size (0: 1), prefetch,
 * delay_us (after each batch); stop ends it after its current batch. It
 * counts samples and the times of its first and last batch; end is
 * SL_ERR_CLOSED when the job ended, else what failed (msg). */
#define BENCH_TRAINER_EPOCHS 8
typedef struct bench_trainer {
    const char *master, *job;
    uint32_t rank, world_size, prefetch, delay_us;
    _Atomic bool stop;
    uint64_t samples;
    double first, last;
    /* per epoch (the last slot: that epoch and later ones): samples, the
     * times of the first and last batch */
    uint64_t epoch_samples[BENCH_TRAINER_EPOCHS];
    double epoch_first[BENCH_TRAINER_EPOCHS], epoch_last[BENCH_TRAINER_EPOCHS];
    int end; /* sl_err_t */
    char msg[SL_ERROR_MSG_MAX];
} bench_trainer_t;
void *bench_trainer_run(void *arg);

/* A generated criteo table (sl_wh_gen_preset "criteo", seed 1) of rows rows
 * in files files, stripes of stripe_rows, at dir. @return 0, or -1 with a
 * message on stderr starting with who. */
int bench_gen_criteo(const char *dir, uint64_t rows, uint32_t files, uint32_t stripe_rows,
                     const char *who);

/* The transforms of a criteo job (JSON of a job spec's "transforms"):
 * log1p on the 13 dense features I1..I13, sigrid_hash on the 26 sparse
 * ones C1..C26 (table size 10M, salt i for Ci). Caller owns. */
json_t *bench_criteo_transforms(void);

/* One read of every data file of table t (in dir) with opts, on this
 * thread: wall and process CPU seconds, rows, decoded bytes (the output
 * tensors), file bytes read, stripes. @return 0 or -1 (message on stderr). */
typedef struct bench_read {
    double wall, cpu;
    uint64_t rows, decoded, file_bytes, stripes;
} bench_read_t;
int bench_read_table(const sl_wh_table_t *t, const char *dir, const sl_wh_read_opts_t *opts,
                     bench_read_t *r);
/* Read every stripe of rd, add its figures to r, close it. @return 0 or -1. */
int bench_drain_reader(sl_wh_reader_t *rd, bench_read_t *r);

/* The replicated real-rows shape (docs/BENCHMARKS.md): the MovieLens
 * ratings turned into samples by examples/movielens_sessions.py, copied
 * `copies` times as new users. The ratings file in ../shared/data, or NULL
 * when it is not there. */
const char *bench_movielens_default(void);
/* Write the samples as jsonl under work (path into jsonl); @return rows, 0
 * when python3 or the script failed. */
uint64_t bench_movielens_jsonl(const char *ratings, uint32_t copies, const char *work, char *jsonl,
                               size_t cap);
/* Import jsonl into table with the writer options base (NULL: defaults),
 * plus the example's --cluster --dedup-group history=user_history when
 * cluster_dedup. @return 0 or -1 (message on stderr). */
int bench_movielens_import(const char *jsonl, const char *table, bool cluster_dedup,
                           const sl_wh_writer_opts_t *base);

/* The test S3 server's endpoint and credentials from DIR/env (written by
 * `ops/s3proxy start --dir DIR`) into this process's environment, which
 * the workers it starts inherit. @return 0, or 1 with a message naming
 * who and the file. */
int bench_s3_env_load(const char *dir, const char *who);

/* Every file under root put into store as prefix/<its path below root>.
 * @return 0, or 1 with the store's message. */
int bench_s3_upload_tree(sl_store_t *store, const char *root, const char *prefix, const char *who);

#endif

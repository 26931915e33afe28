/* What the store implementations share: the base struct every store
 * starts with, its operations table and its counters. Private to
 * src/store. */
#ifndef SLUICE_STORE_INTERNAL_H
#define SLUICE_STORE_INTERNAL_H

#include <stdatomic.h>

#include "store.h"

typedef struct sl_store_ops {
    sl_err_t (*list)(sl_store_t *st, const char *prefix, sl_store_list_fn fn, void *ctx,
                     sl_error_t *err);
    sl_err_t (*stat)(sl_store_t *st, const char *key, sl_store_info_t *info, sl_error_t *err);
    sl_err_t (*read_many)(sl_store_t *st, sl_store_range_t *ranges, size_t n, sl_error_t *err);
    sl_err_t (*put)(sl_store_t *st, const char *key, const void *data, size_t len, const char *path,
                    sl_error_t *err); /* from data, or the file path */
    void (*destroy)(sl_store_t *st);
} sl_store_ops_t;

struct sl_store {
    const sl_store_ops_t *ops;
    const sl_allocator_t *a;
    sl_store_opts_t opts; /* defaults filled in; strings borrowed from the caller are not kept */
    char *root;           /* "s3://bucket" or the directory */
    _Atomic uint64_t requests, retries, failures, bytes_read, bytes_written, list_pages;
    _Atomic uint64_t by_result[SL_STORE_RESULTS];
    _Atomic uint64_t latency[SL_STORE_OPS][SL_STORE_LATENCY_BUCKETS + 1];
    _Atomic uint64_t latency_sum_us[SL_STORE_OPS];
    _Atomic uint64_t inflight_bytes;
};

/* Count one attempt of op (SL_STORE_OP_*) that ended with result after
 * seconds. */
void sl_store_observe(sl_store_t *st, int op, int result, double seconds);

/* The options with every zero field given its default. */
void sl_store_opts_fill(const sl_store_opts_t *in, sl_store_opts_t *out);

/* A key is relative and has no "." or ".." segment nor NUL; what the local
 * store needs to stay under its root, and what S3 keys here may be.
 * @return SL_ERR_INVALID naming it otherwise. */
sl_err_t sl_store_check_key(const char *root, const char *key, bool allow_empty, sl_error_t *err);

sl_err_t sl_store_local_open(const char *dir, const sl_store_opts_t *opts, sl_store_t **out,
                             sl_error_t *err);
sl_err_t sl_store_s3_open(const char *bucket, const sl_store_opts_t *opts, sl_store_t **out,
                          sl_error_t *err);

#endif

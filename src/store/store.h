/* Where bytes live (docs/STORAGE.md, docs/DESIGN.md "Where the bytes come
 * from"): one byte-range interface over a local directory (pread) and an
 * S3-compatible object store (libcurl: SigV4 signing, curl multi for
 * parallel ranged GETs over reused connections, retries with capped
 * exponential backoff and jitter). It knows nothing of formats: the
 * warehouse and Parquet readers ask it for the ranges a split needs.
 *
 *   sl_store_t *st; char *key;
 *   sl_store_open_url("s3://bucket/dir/part-0.slc", NULL, &st, &key, &err);
 *   sl_store_stat(st, key, &info, &err);             size, ETag, mtime
 *   sl_store_read(st, key, 0, 4096, buf, &err);      bytes [0, 4096)
 *   sl_store_read_many(st, ranges, n, &err);         many, in parallel
 *   sl_store_list(st, "dir/", on_object, ctx, &err); every key, paged
 *
 * A store is bound to one root: a bucket for s3://, a directory for a
 * local path; keys are relative to it ("dir/part-0.slc"). Every function
 * may be called from any thread at once: an S3 store shares its
 * connections and its credentials between threads under locks of its own.
 * Errors name the URL (bucket and key), and for S3 the HTTP status and
 * S3's error code and message; never a credential. */
#ifndef SLUICE_STORE_H
#define SLUICE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/alloc.h"
#include "sluice/err.h"

typedef struct sl_store sl_store_t;

/* How an S3 store finds and talks to its server. Zero (or NULL) fields take
 * the defaults in brackets; the environment fills the rest as AWS tools do
 * (docs/STORAGE.md). */
typedef struct sl_store_opts {
    const sl_allocator_t *alloc; /* [default allocator] */
    const char *endpoint; /* "http://127.0.0.1:9000" [AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS] */
    const char *region;   /* [AWS_REGION, AWS_DEFAULT_REGION, the profile's region, us-east-1] */
    const char *ca_bundle;    /* a PEM file of CAs to trust [AWS_CA_BUNDLE, the system's] */
    int path_style;           /* 1 path-style, 0 virtual-hosted, -1 [auto: path-style with a custom
                                 endpoint, virtual-hosted on AWS] */
    uint32_t max_attempts;    /* tries of one request, retryable failures only [5] */
    uint32_t backoff_base_ms; /* first retry's backoff cap; doubles each retry [100] */
    uint32_t backoff_max_ms;  /* the cap of any one backoff [5000] */
    uint32_t connect_timeout_ms; /* [5000] */
    uint32_t request_timeout_ms; /* one attempt, transfer included [60000] */
    uint32_t max_connections;    /* parallel requests of one sl_store_read_many [16] */
    uint64_t max_inflight_bytes; /* bytes of ranges in flight in one read_many [64 MiB] */
    uint32_t list_page_keys;     /* max-keys of one ListObjectsV2 page [1000] */
    uint64_t part_size;          /* objects larger than this are put by multipart upload [64 MiB] */
} sl_store_opts_t;

/* What sl_store_stat learns of an object. */
typedef struct sl_store_info {
    uint64_t size;
    char etag[128];    /* as the server quotes it, e.g. "\"9b2c...\"" ; local: size-mtime_ns */
    char version[128]; /* the version id where the bucket keeps versions, else "" */
    int64_t mtime_s;   /* seconds since the epoch */
} sl_store_info_t;

/* One range of sl_store_read_many. */
typedef struct sl_store_range {
    const char *key;
    uint64_t offset;
    size_t len;
    void *buf;            /* len bytes of the caller's */
    const char *if_match; /* an ETag the object must still have (NULL: any): a replaced object
                             fails with SL_ERR_VERSION naming it */
    sl_err_t result;      /* set by sl_store_read_many */
} sl_store_range_t;

/* Upper bounds (seconds) of the request latency histogram's buckets. */
#define SL_STORE_LATENCY_BUCKETS 12
extern const double sl_store_latency_bounds_s[SL_STORE_LATENCY_BUCKETS];

/* How an HTTP request (one attempt) ended. */
enum {
    SL_STORE_OK,
    SL_STORE_CLIENT_ERROR,
    SL_STORE_SERVER_ERROR,
    SL_STORE_NETWORK_ERROR,
    SL_STORE_RESULTS
};

/* What a request did, for its latency (sluice_store_request_seconds{op}):
 * a ranged or whole GET of an object, a HEAD, a page of a listing, and
 * everything that writes (a PUT, a multipart upload's POSTs and its
 * abort). */
enum { SL_STORE_OP_GET, SL_STORE_OP_HEAD, SL_STORE_OP_LIST, SL_STORE_OP_PUT, SL_STORE_OPS };

/* "get", "head", "list", "put". */
const char *sl_store_op_name(int op);

/* Counters of one store since it opened (requests by result, retries). */
typedef struct sl_store_stats {
    uint64_t requests;   /* HTTP requests sent (local: reads and writes) */
    uint64_t retries;    /* requests that were tries after a retryable failure */
    uint64_t failures;   /* operations that failed */
    uint64_t bytes_read; /* payload bytes received into callers' buffers */
    uint64_t bytes_written;
    uint64_t list_pages;
    /* S3 only: attempts by result (2xx; 4xx; 5xx and 429; no answer: a
     * reset, a timeout, a refused connection), and their latency by op
     * (SL_STORE_OP_*) */
    uint64_t by_result[SL_STORE_RESULTS];
    /* per bucket, not cumulative; last: above */
    uint64_t latency[SL_STORE_OPS][SL_STORE_LATENCY_BUCKETS + 1];
    double latency_sum_s[SL_STORE_OPS];
    uint64_t inflight_bytes; /* of ranges being fetched now */
} sl_store_stats_t;

/* Open the store that holds url and give back its key in *key (caller owns,
 * free with sl_strfree(opts->alloc, ...)); key may be NULL when not needed.
 * url: "s3://bucket[/key]", "file:///dir[/...]" or a local path. A local
 * path that names a directory is the root with key ""; one that names a
 * file (or nothing yet) has its directory as the root. opts may be NULL.
 * Caller owns *out, free with sl_store_destroy. */
sl_err_t sl_store_open_url(const char *url, const sl_store_opts_t *opts, sl_store_t **out,
                           char **key, sl_error_t *err);
void sl_store_destroy(sl_store_t *st);

/* @return true when url names an object store ("s3://..."), not a path. */
bool sl_store_is_remote(const char *url);

/* "s3://bucket" or the local root directory; borrowed until destroy. */
const char *sl_store_root(const sl_store_t *st);

/* Called once per object under a prefix, in key order. @return SL_OK to go
 * on, anything else stops the listing with that value. */
typedef sl_err_t (*sl_store_list_fn)(void *ctx, const char *key, const sl_store_info_t *info);

/* Every object whose key starts with prefix ("" : all), in key order,
 * paged (ListObjectsV2 continuation tokens; past any number of keys). The
 * info has size, etag and mtime (no version). */
sl_err_t sl_store_list(sl_store_t *st, const char *prefix, sl_store_list_fn fn, void *ctx,
                       sl_error_t *err);

/* SL_ERR_NOT_FOUND (naming the bucket and key) when there is no object. */
sl_err_t sl_store_stat(sl_store_t *st, const char *key, sl_store_info_t *info, sl_error_t *err);

/* Exactly len bytes at offset into buf: fewer (the object ends first) is
 * SL_ERR_TRUNCATED. */
sl_err_t sl_store_read(sl_store_t *st, const char *key, uint64_t offset, size_t len, void *buf,
                       sl_error_t *err);

/* Many ranges at once: at most max_connections requests and
 * max_inflight_bytes bytes in flight (one range larger than the bound goes
 * alone). Each range gets its own result; err holds the first failure's
 * message. @return SL_OK when every range was read, else the first
 * failure's code. */
sl_err_t sl_store_read_many(sl_store_t *st, sl_store_range_t *ranges, size_t n, sl_error_t *err);

/* Write a whole object from memory, or from the file at path (multipart
 * above part_size). Replaces what was there. */
sl_err_t sl_store_put(sl_store_t *st, const char *key, const void *data, size_t len,
                      sl_error_t *err);
sl_err_t sl_store_put_file(sl_store_t *st, const char *key, const char *path, sl_error_t *err);

/* One object pinned at its ETag: what a format reader holds while it reads
 * a file. Its size and read_at have the shape of a byte-range source's
 * callbacks (the Parquet reader's sl_pq_source_t: ctx, size, read_at), so
 *   sl_pq_source_t src = {obj, sl_store_object_size, sl_store_object_read_at};
 * feeds it from any store. Every read is pinned (If-Match): an object
 * replaced after sl_store_object_open fails with SL_ERR_VERSION naming it,
 * never mixing two versions. Reads may come from any thread. */
typedef struct sl_store_object sl_store_object_t;

/* Stat key and pin what was found. st must outlive the object. Caller
 * owns *out, free with sl_store_object_destroy. */
sl_err_t sl_store_object_open(sl_store_t *st, const char *key, sl_store_object_t **out,
                              sl_error_t *err);
/* The same without a request, pinned at info (size and ETag as a listing
 * gave them): a planner that listed a prefix opens its objects without a
 * HEAD each. */
sl_err_t sl_store_object_pin(sl_store_t *st, const char *key, const sl_store_info_t *info,
                             sl_store_object_t **out, sl_error_t *err);
void sl_store_object_destroy(sl_store_object_t *obj);
/* Borrowed until destroy. */
const sl_store_info_t *sl_store_object_info(const sl_store_object_t *obj);
/* ctx is the sl_store_object_t. */
sl_err_t sl_store_object_size(void *ctx, uint64_t *size, sl_error_t *err);
/* Exactly len bytes at offset into buf; past the end is SL_ERR_TRUNCATED. */
sl_err_t sl_store_object_read_at(void *ctx, uint64_t offset, size_t len, void *buf,
                                 sl_error_t *err);

/* Many ranges of the pinned object at once, as sl_store_read_many (at most
 * max_connections requests and max_inflight_bytes in flight): each range's
 * key and if_match are set here from the object (the caller fills offset,
 * len and buf). A range past the size pinned at open is refused without a
 * request (SL_ERR_TRUNCATED). */
sl_err_t sl_store_object_read_many(sl_store_object_t *obj, sl_store_range_t *ranges, size_t n,
                                   sl_error_t *err);
/* The object's key inside its store; borrowed until destroy. */
const char *sl_store_object_key(const sl_store_object_t *obj);
/* The store the object is of (borrowed: it outlives the object). */
sl_store_t *sl_store_object_store(const sl_store_object_t *obj);

/* A snapshot of the counters (thread-safe). */
void sl_store_stats(sl_store_t *st, sl_store_stats_t *out);

/* The counters as Prometheus text (common/prom.h) into p: families
 * sluice_store_requests_total{result}, _retries_total, _failures_total,
 * _bytes_read_total, _bytes_written_total, _request_seconds (histogram),
 * _inflight_bytes, each sample with labels (pairs from sl_prom_label,
 * e.g. store="s3://bucket"; NULL: none). Never a credential. */
struct sl_prom;
void sl_store_prom(sl_store_t *st, struct sl_prom *p, const char *labels);
/* The same of a snapshot (or a sum of snapshots: sl_store_stats_add), for
 * a process whose stores come and go (the master opens one per job it
 * plans). */
void sl_store_prom_stats(const sl_store_stats_t *s, struct sl_prom *p, const char *labels);
/* Add the counters of s into sum (inflight_bytes too: a sum of stores
 * still open). */
void sl_store_stats_add(sl_store_stats_t *sum, const sl_store_stats_t *s);

#endif

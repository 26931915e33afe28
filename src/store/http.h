/* The HTTP engine of the S3 store and of the credentials chain: requests
 * run on a curl multi handle, many at once, with connections reused across
 * calls and threads (a pool of multi handles, each used by one thread at a
 * time; the DNS cache in a curl share handle under locks), each request tried
 * again after a retryable failure (5xx, 429, SlowDown, a reset, a timeout)
 * with capped exponential backoff and full jitter, up to max_attempts;
 * others fail at once. Signed requests use libcurl's SigV4
 * (CURLOPT_AWS_SIGV4) with x-amz-content-sha256; nothing here writes a
 * credential anywhere but into curl's own request. */
#ifndef SLUICE_STORE_HTTP_H
#define SLUICE_STORE_HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include "creds.h"
#include "store_internal.h"

typedef struct sl_store_http sl_store_http_t;

/* A growable body, at most max bytes (more is an error). */
typedef struct sl_store_buf {
    char *data;
    size_t len, cap, max;
} sl_store_buf_t;

typedef struct sl_store_req {
    /* in */
    const char *method; /* "GET", "HEAD", "PUT", "POST", "DELETE" */
    const char *url;
    const char *what;       /* "s3://bucket/key", for messages */
    const char *headers[4]; /* extra "Name: value" lines, NULL-ended */
    bool sign;              /* SigV4 with the engine's credentials */
    bool ranged;            /* a ranged GET of [offset, offset + len) into dst */
    bool list;              /* a GET of a listing page (its latency is op "list") */
    uint64_t offset;
    size_t len;
    void *dst;
    const char *if_match;
    const void *body; /* to send: body_len bytes from body, or from fd at body_off */
    int body_fd;
    uint64_t body_off, body_len;
    char body_sha256[65]; /* hex of the payload, filled by the caller when signing a body */
    size_t max_resp;      /* bound of resp (0: 1 MiB) */
    /* out */
    long status;
    sl_store_buf_t resp; /* the body of a non-ranged answer, or of an error */
    char etag[128], version[128], upload_etag[128];
    uint64_t content_length;
    uint64_t range_first; /* of a 206's Content-Range (bytes FIRST-LAST/SIZE) */
    bool has_range;       /* the answer had a Content-Range */
    int64_t mtime_s;
    size_t got; /* bytes received into dst */
    uint32_t attempts;
    sl_err_t result;
    sl_error_t err;
    /* the engine's */
    void *easy;
    void *slist;
    uint64_t not_before_ms, sent, t0_ns;
    bool active, done;
} sl_store_req_t;

/* creds may be NULL (then no request may be signed); region is copied. */
sl_err_t sl_store_http_new(const sl_store_opts_t *opts, const char *region, sl_creds_t *creds,
                           sl_store_http_t **out, sl_error_t *err);
void sl_store_http_destroy(sl_store_http_t *h);

/* Run n requests, at most max_conns at once and, for ranged ones, at most
 * max_bytes of ranges in flight (one larger goes alone). Each request's
 * result and err say how it ended; counters (if st) are updated.
 * @return SL_OK when all succeeded, else the first failure's code. */
sl_err_t sl_store_http_run(sl_store_http_t *h, sl_store_t *st, sl_store_req_t **reqs, size_t n,
                           uint32_t max_conns, uint64_t max_bytes);
void sl_store_req_free(sl_store_http_t *h, sl_store_req_t *r);

/* Append s to b percent-encoded as SigV4 wants (RFC 3986 unreserved kept;
 * '/' kept when keep_slash). @return false when out of memory. */
bool sl_store_buf_enc(const sl_allocator_t *a, sl_store_buf_t *b, const char *s, bool keep_slash);
bool sl_store_buf_add(const sl_allocator_t *a, sl_store_buf_t *b, const char *s, size_t n);
void sl_store_buf_free(const sl_allocator_t *a, sl_store_buf_t *b);

/* S3's <Error><Code>..</Code><Message>..</Message></Error>, into code and
 * msg (empty when the body is not that). */
void sl_store_xml_error(const char *body, size_t len, char *code, size_t code_cap, char *msg,
                        size_t msg_cap);

#endif

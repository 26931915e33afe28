/* The S3 store: a bucket of an S3-compatible server (AWS, GCS's XML API,
 * Ceph RGW, MinIO, s3proxy) through the HTTP engine (http.h). Keys are
 * percent-encoded into the path and query strings are written in
 * canonical order (sorted, RFC 3986 encoded, "prefix=dir%2F"), since
 * libcurl 7.88 signs the URL as given. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mem.h"
#include "netlib/netlib_gnutls.h"
#include "creds.h"
#include "http.h"
#include "store_internal.h"
#include "xml.h"

typedef struct s3 {
    sl_store_t base;
    char *bucket;
    char *base_url; /* "https://s3.us-east-1.amazonaws.com/bucket" or "https://bucket.host" */
    sl_creds_t *creds;
    sl_store_http_t *http;
} s3_t;

static char *key_url(s3_t *s, const char *key, const char *query)
{
    const sl_allocator_t *a = s->base.a;
    sl_store_buf_t b = {0};
    bool ok = sl_store_buf_add(a, &b, s->base_url, strlen(s->base_url)) &&
              sl_store_buf_add(a, &b, "/", 1) && sl_store_buf_enc(a, &b, key, true) &&
              (query == NULL || sl_store_buf_add(a, &b, query, strlen(query)));
    if (!ok) {
        sl_store_buf_free(a, &b);
        return NULL;
    }
    char *s2 = sl_strdup(a, b.data);
    sl_store_buf_free(a, &b);
    return s2;
}

static sl_err_t run1(s3_t *s, sl_store_req_t *r, sl_error_t *err)
{
    sl_store_req_t *rs[1] = {r};
    sl_err_t rc = sl_store_http_run(s->http, &s->base, rs, 1, 1, UINT64_MAX);
    if (rc != SL_OK && err) *err = r->err;
    return rc;
}

/* ---- list ---- */

typedef struct page_ctx {
    sl_store_list_fn fn;
    void *ctx;
} page_ctx_t;

static sl_err_t s3_list(sl_store_t *st, const char *prefix, sl_store_list_fn fn, void *ctx,
                        sl_error_t *err)
{
    s3_t *s = (s3_t *)st;
    const sl_allocator_t *a = st->a;
    char *token = NULL;
    char what[1200];
    snprintf(what, sizeof what, "s3://%s/%s (list)", s->bucket, prefix);
    sl_err_t rc = SL_OK;
    do {
        /* Parameters in canonical (sorted) order, each RFC 3986 encoded. */
        sl_store_buf_t q = {0};
        char mk[32];
        snprintf(mk, sizeof mk, "max-keys=%u", st->opts.list_page_keys);
        bool ok = sl_store_buf_add(a, &q, s->base_url, strlen(s->base_url)) &&
                  sl_store_buf_add(a, &q, "/?", 2);
        if (token)
            ok = ok && sl_store_buf_add(a, &q, "continuation-token=", 19) &&
                 sl_store_buf_enc(a, &q, token, false) && sl_store_buf_add(a, &q, "&", 1);
        ok = ok && sl_store_buf_add(a, &q, "list-type=2&", 12) &&
             sl_store_buf_add(a, &q, mk, strlen(mk)) && sl_store_buf_add(a, &q, "&prefix=", 8) &&
             sl_store_buf_enc(a, &q, prefix, false);
        if (!ok) {
            sl_store_buf_free(a, &q);
            rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
            break;
        }
        sl_store_req_t r = {.method = "GET",
                            .url = q.data,
                            .what = what,
                            .sign = true,
                            .list = true,
                            .max_resp = 16u << 20};
        rc = run1(s, &r, err);
        sl_store_buf_free(a, &q);
        sl_strfree(a, token);
        token = NULL;
        if (rc == SL_OK) {
            bool truncated;
            size_t keys;
            atomic_fetch_add(&st->list_pages, 1);
            rc = sl_store_xml_list(r.resp.data, r.resp.len, what, a, fn, ctx, &truncated, &token,
                                   &keys, err);
            if (rc == SL_OK && !truncated) {
                sl_strfree(a, token);
                token = NULL;
            }
        }
        sl_store_req_free(s->http, &r);
    } while (rc == SL_OK && token != NULL);
    sl_strfree(a, token);
    return rc;
}

/* ---- stat and reads ---- */

static sl_err_t s3_stat(sl_store_t *st, const char *key, sl_store_info_t *info, sl_error_t *err)
{
    s3_t *s = (s3_t *)st;
    char *url = key_url(s, key, NULL), *what = sl_strfmt(st->a, "s3://%s/%s", s->bucket, key);
    sl_err_t rc;
    if (url == NULL || what == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "s3://%s: out of memory", s->bucket);
    } else {
        sl_store_req_t r = {.method = "HEAD", .url = url, .what = what, .sign = true};
        rc = run1(s, &r, err);
        if (rc != SL_OK && r.status >= 400 && r.status < 500) {
            /* A HEAD answer has no body, so no S3 error code (NoSuchKey or
             * NoSuchBucket? SignatureDoesNotMatch or AccessDenied?): ask for
             * one byte to hear it. */
            sl_store_req_t g = {.method = "GET",
                                .url = url,
                                .what = what,
                                .sign = true,
                                .headers = {"Range: bytes=0-0"},
                                .max_resp = 64u << 10};
            sl_error_t ge = {0};
            if (run1(s, &g, &ge) != SL_OK && g.status == r.status && err) *err = ge;
            sl_store_req_free(s->http, &g);
        }
        if (rc == SL_OK) {
            info->size = r.content_length;
            info->mtime_s = r.mtime_s;
            snprintf(info->etag, sizeof info->etag, "%s", r.etag);
            snprintf(info->version, sizeof info->version, "%s", r.version);
        }
        sl_store_req_free(s->http, &r);
    }
    sl_strfree(st->a, url);
    sl_strfree(st->a, what);
    return rc;
}

static sl_err_t s3_read_many(sl_store_t *st, sl_store_range_t *ranges, size_t n, sl_error_t *err)
{
    s3_t *s = (s3_t *)st;
    const sl_allocator_t *a = st->a;
    sl_store_req_t *reqs = sl_calloc(a, n, sizeof *reqs);
    sl_store_req_t **ptrs = sl_calloc(a, n, sizeof *ptrs);
    sl_err_t rc = SL_OK;
    size_t m = 0;
    if (reqs == NULL || ptrs == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "s3://%s: out of memory for %zu ranges", s->bucket, n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].len == 0) {
            ranges[i].result = SL_OK; /* nothing to fetch */
            continue;
        }
        sl_store_req_t *r = &reqs[i];
        r->method = "GET";
        r->url = key_url(s, ranges[i].key, NULL);
        r->what = sl_strfmt(a, "s3://%s/%s", s->bucket, ranges[i].key);
        r->sign = r->ranged = true;
        r->offset = ranges[i].offset;
        r->len = ranges[i].len;
        r->dst = ranges[i].buf;
        r->if_match = ranges[i].if_match;
        r->max_resp = 64u << 10;
        if (r->url == NULL || r->what == NULL) {
            rc = sl_error_set(err, SL_ERR_NOMEM, "s3://%s: out of memory", s->bucket);
            goto out;
        }
        ptrs[m++] = r;
    }
    sl_store_http_run(s->http, st, ptrs, m, st->opts.max_connections, st->opts.max_inflight_bytes);
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].len == 0) continue;
        ranges[i].result = reqs[i].result;
        if (reqs[i].result != SL_OK && rc == SL_OK) {
            rc = reqs[i].result;
            if (err) *err = reqs[i].err;
        }
    }
out:
    for (size_t i = 0; reqs && i < n; i++) {
        sl_strfree(a, (char *)reqs[i].url);
        sl_strfree(a, (char *)reqs[i].what);
        sl_store_req_free(s->http, &reqs[i]);
    }
    sl_free(a, reqs, sl_mul_size(n, sizeof *reqs));
    sl_free(a, ptrs, sl_mul_size(n, sizeof *ptrs));
    return rc;
}

/* ---- writes ---- */

/* The payload's SHA-256 in hex (the x-amz-content-sha256 S3 checks). */
static sl_err_t sha256_hex(const void *data, size_t len, int fd, uint64_t off, char out[65],
                           const char *what, sl_error_t *err)
{
    const sl_netlib_gnutls_t *gnutls = sl_netlib_gnutls(err);
    if (gnutls == NULL) return SL_ERR_UNSUPPORTED;
    gnutls_hash_hd_t hd;
    if (gnutls->hash_init(&hd, GNUTLS_DIG_SHA256) < 0)
        return sl_error_set(err, SL_ERR_NOMEM, "%s: cannot start SHA-256", what);
    if (data) {
        gnutls->hash(hd, data, len);
    } else {
        char buf[65536];
        for (uint64_t done = 0; done < len;) {
            size_t want = len - done < sizeof buf ? (size_t)(len - done) : sizeof buf;
            ssize_t got = pread(fd, buf, want, (off_t)(off + done));
            if (got <= 0) {
                gnutls->hash_deinit(hd, NULL);
                return sl_error_set(err, SL_ERR_IO, "%s: the source file ends or fails at %llu",
                                    what, (unsigned long long)(off + done));
            }
            gnutls->hash(hd, buf, (size_t)got);
            done += (uint64_t)got;
        }
    }
    unsigned char d[32];
    gnutls->hash_deinit(hd, d);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
    return SL_OK;
}

static sl_err_t put_part(s3_t *s, const char *url, const char *what, const void *data, int fd,
                         uint64_t off, uint64_t len, char *etag, sl_error_t *err)
{
    sl_store_req_t r = {.method = "PUT",
                        .url = url,
                        .what = what,
                        .sign = true,
                        .body = data,
                        .body_fd = fd,
                        .body_off = off,
                        .body_len = len};
    sl_err_t rc = sha256_hex(data, (size_t)len, fd, off, r.body_sha256, what, err);
    if (rc == SL_OK) rc = run1(s, &r, err);
    if (rc == SL_OK) {
        atomic_fetch_add(&s->base.bytes_written, len);
        if (etag) snprintf(etag, 128, "%s", r.etag);
    }
    sl_store_req_free(s->http, &r);
    return rc;
}

/* A multipart upload: initiate, parts of part_size, complete; aborted on
 * failure so no parts are left billed. */
static sl_err_t put_multipart(s3_t *s, const char *key, const char *what, const void *data, int fd,
                              uint64_t len, sl_error_t *err)
{
    const sl_allocator_t *a = s->base.a;
    uint64_t ps = s->base.opts.part_size, nparts = (len + ps - 1) / ps;
    if (nparts > 10000)
        return sl_error_set(
            err, SL_ERR_TOO_LARGE, "%s: %llu bytes need %llu parts of %llu (S3 allows 10000)", what,
            (unsigned long long)len, (unsigned long long)nparts, (unsigned long long)ps);
    char *url = key_url(s, key, "?uploads="), upload[1024];
    sl_store_req_t r = {.method = "POST", .url = url, .what = what, .sign = true};
    sl_err_t rc =
        url ? run1(s, &r, err) : sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
    if (rc == SL_OK &&
        !sl_store_xml_text(r.resp.data, r.resp.len, "UploadId", upload, sizeof upload))
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "%s: CreateMultipartUpload gave no UploadId", what);
    sl_store_req_free(s->http, &r);
    sl_strfree(a, url);
    if (rc != SL_OK) return rc;
    sl_store_buf_t enc = {0}, done = {0};
    if (!sl_store_buf_enc(a, &enc, upload, false) ||
        !sl_store_buf_add(a, &done, "<CompleteMultipartUpload>", 25))
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
    for (uint64_t p = 0; rc == SL_OK && p < nparts; p++) {
        uint64_t off = p * ps, n = len - off < ps ? len - off : ps;
        char q[64], etag[128];
        snprintf(q, sizeof q, "?partNumber=%llu&uploadId=", (unsigned long long)p + 1);
        char *qs = sl_strfmt(a, "%s%s", q, enc.data);
        char *purl = qs ? key_url(s, key, qs) : NULL;
        rc = purl ? put_part(s, purl, what, data ? (const char *)data + off : NULL, fd, off, n,
                             etag, err)
                  : sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
        sl_strfree(a, qs);
        sl_strfree(a, purl);
        char *part = rc == SL_OK
                         ? sl_strfmt(a, "<Part><PartNumber>%llu</PartNumber><ETag>%s</ETag></Part>",
                                     (unsigned long long)p + 1, etag)
                         : NULL;
        if (rc == SL_OK && (part == NULL || !sl_store_buf_add(a, &done, part, strlen(part))))
            rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
        sl_strfree(a, part);
    }
    char *qs = sl_strfmt(a, "?uploadId=%s", enc.data ? enc.data : "");
    char *curl_ = qs ? key_url(s, key, qs) : NULL;
    if (rc == SL_OK && curl_ && sl_store_buf_add(a, &done, "</CompleteMultipartUpload>", 26)) {
        sl_store_req_t c = {.method = "POST",
                            .url = curl_,
                            .what = what,
                            .sign = true,
                            .body = done.data,
                            .body_len = done.len};
        rc = sha256_hex(done.data, done.len, -1, 0, c.body_sha256, what, err);
        if (rc == SL_OK) rc = run1(s, &c, err);
        /* CompleteMultipartUpload may fail with 200 and an <Error> body. */
        char code[64], msg[256];
        if (rc == SL_OK) {
            sl_store_xml_error(c.resp.data, c.resp.len, code, sizeof code, msg, sizeof msg);
            if (code[0])
                rc = sl_error_set(err, SL_ERR_IO, "%s: CompleteMultipartUpload: %s: %s", what, code,
                                  msg);
        }
        sl_store_req_free(s->http, &c);
    } else if (curl_) {
        sl_store_req_t c = {.method = "DELETE", .url = curl_, .what = what, .sign = true};
        sl_error_t ignored = {0};
        run1(s, &c, &ignored);
        sl_store_req_free(s->http, &c);
    }
    if (rc == SL_OK && curl_ == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
    sl_strfree(a, qs);
    sl_strfree(a, curl_);
    sl_store_buf_free(a, &enc);
    sl_store_buf_free(a, &done);
    return rc;
}

static sl_err_t s3_put(sl_store_t *st, const char *key, const void *data, size_t len,
                       const char *path, sl_error_t *err)
{
    s3_t *s = (s3_t *)st;
    char *what = sl_strfmt(st->a, "s3://%s/%s", s->bucket, key), *url = key_url(s, key, NULL);
    int fd = -1;
    uint64_t n = len;
    sl_err_t rc = SL_OK;
    if (what == NULL || url == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "s3://%s: out of memory", s->bucket);
        goto out;
    }
    if (path) {
        struct stat sb;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &sb) != 0) {
            rc = sl_error_set(err, SL_ERR_IO, "%s: cannot read the source %s", what, path);
            goto out;
        }
        n = (uint64_t)sb.st_size;
    }
    rc = n > st->opts.part_size ? put_multipart(s, key, what, data, fd, n, err)
                                : put_part(s, url, what, data, fd, 0, n, NULL, err);
out:
    if (fd >= 0) close(fd);
    sl_strfree(st->a, what);
    sl_strfree(st->a, url);
    return rc;
}

static void s3_destroy(sl_store_t *st)
{
    s3_t *s = (s3_t *)st;
    const sl_allocator_t *a = st->a;
    sl_store_http_destroy(s->http);
    sl_creds_destroy(s->creds);
    sl_strfree(a, s->bucket);
    sl_strfree(a, s->base_url);
    sl_strfree(a, st->root);
    sl_free(a, s, sizeof *s);
}

static const sl_store_ops_t s3_ops = {s3_list, s3_stat, s3_read_many, s3_put, s3_destroy};

sl_err_t sl_store_s3_open(const char *bucket, const sl_store_opts_t *opts, sl_store_t **out,
                          sl_error_t *err)
{
    const sl_allocator_t *a = opts && opts->alloc ? opts->alloc : sl_allocator_default();
    s3_t *s = sl_calloc(a, 1, sizeof *s);
    if (s == NULL) return sl_error_set(err, SL_ERR_NOMEM, "s3://%s: out of memory", bucket);
    s->base.ops = &s3_ops;
    s->base.a = a;
    sl_store_opts_fill(opts, &s->base.opts);
    s->base.opts.alloc = a;
    sl_store_opts_t *o = &s->base.opts;
    char region[64];
    if (o->region)
        snprintf(region, sizeof region, "%s", o->region);
    else
        sl_creds_region(region, sizeof region);
    if (o->ca_bundle == NULL) o->ca_bundle = getenv("AWS_CA_BUNDLE");
    const char *ep = o->endpoint;
    if (ep == NULL) ep = getenv("AWS_ENDPOINT_URL_S3");
    if (ep == NULL || !*ep) ep = getenv("AWS_ENDPOINT_URL");
    if (ep != NULL && !*ep) ep = NULL;
    sl_err_t rc = SL_OK;
    s->bucket = sl_strdup(a, bucket);
    s->base.root = sl_strfmt(a, "s3://%s", bucket);
    if (ep) {
        if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) {
            rc = sl_error_set(err, SL_ERR_INVALID,
                              "S3 endpoint '%s' is not an http:// or https:// URL", ep);
            goto fail;
        }
        size_t n = strlen(ep);
        while (n > 0 && ep[n - 1] == '/')
            n--;
        const char *host = strstr(ep, "://") + 3;
        bool path_style = o->path_style != 0; /* a custom endpoint: path-style unless told */
        s->base_url = path_style ? sl_strfmt(a, "%.*s/%s", (int)n, ep, bucket)
                                 : sl_strfmt(a, "%.*s%s.%.*s", (int)(host - ep), ep, bucket,
                                             (int)(n - (size_t)(host - ep)), host);
    } else {
        /* AWS: virtual-hosted unless told otherwise, or the bucket has a
         * dot (its certificate would not match). */
        bool path_style = o->path_style == 1 || (o->path_style < 0 && strchr(bucket, '.'));
        s->base_url = path_style ? sl_strfmt(a, "https://s3.%s.amazonaws.com/%s", region, bucket)
                                 : sl_strfmt(a, "https://%s.s3.%s.amazonaws.com", bucket, region);
    }
    if (s->bucket == NULL || s->base.root == NULL || s->base_url == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "s3://%s: out of memory", bucket);
        goto fail;
    }
    if ((rc = sl_creds_new(o, region, &s->creds, err)) != SL_OK) goto fail;
    if ((rc = sl_store_http_new(o, region, s->creds, &s->http, err)) != SL_OK) goto fail;
    /* The caller's strings (and the environment's) were copied where kept. */
    o->endpoint = o->region = o->ca_bundle = NULL;
    *out = &s->base;
    return SL_OK;
fail:
    s3_destroy(&s->base);
    return rc;
}

/* The S3 store (src/store/s3.c, http.c, xml.c) against a scripted fake
 * server (fake_s3.h): the answers a real S3 gives rarely or only under
 * faults, each checked for its exact outcome and message: a Range ignored
 * or overrun, errors with and without a body, retries until the cap,
 * listings that are malformed or paged with a token that needs encoding,
 * multipart uploads that fail at each step (and are aborted), signing with
 * a session token, and no credentials at all. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "fake_s3.h"
#include "store/store.h"
#include "testutil.h"

#define BUCKET "fake-bucket"

/* What the fake does to the requests of one test (each Criterion test is a
 * process of its own). */
static atomic_int mode;
/* Requests still to fail in the modes that fail some, then answer. */
static atomic_int fails_left;

static void env(void)
{
    setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "fake-secret", 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_CA_BUNDLE");
    setenv("AWS_REGION", "us-east-1", 1);
}

static sl_store_t *open_fake(fs_t *f, uint32_t attempts)
{
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%u", f->port);
    sl_store_opts_t o = {.endpoint = ep,
                         .path_style = -1,
                         .max_attempts = attempts,
                         .backoff_base_ms = 5,
                         .backoff_max_ms = 20,
                         .request_timeout_ms = 5000,
                         .part_size = 5u << 20};
    sl_store_t *st = NULL;
    sl_error_t e = {0};
    cr_assert_eq(sl_store_open_url("s3://" BUCKET, &o, &st, NULL, &e), SL_OK, "%s", e.msg);
    return st;
}

/* ---- ranges ---- */

enum { IGNORE_RANGE = 1, LONG_206, SHORT_206, WRONG_RANGE };

static void ranges_fn(fs_t *f, const fs_req_t *q, int fd)
{
    (void)f;
    static const char obj[] = "0123456789";
    char range[64];
    unsigned long long a = 0, b = 0;
    if (fs_header(q, "Range", range, sizeof range)) sscanf(range, "bytes=%llu-%llu", &a, &b);
    switch (atomic_load(&mode)) {
    case IGNORE_RANGE: /* the whole object, as a server without ranges */
        fs_reply(fd, 200, "ETag: \"e\"\r\n", obj);
        return;
    case LONG_206: /* one byte more than asked */
        fs_reply_cl(fd, 206, NULL, obj + a, (size_t)(b - a + 2), -1);
        return;
    case SHORT_206: /* the asked length announced, fewer bytes sent before the close */
        fs_reply_cl(fd, 206, NULL, obj + a, 2, (long long)(b - a + 1));
        return;
    case WRONG_RANGE: /* as many bytes as asked, from byte 0 */
        snprintf(range, sizeof range, "Content-Range: bytes 0-%llu/10\r\n", b - a);
        fs_reply_cl(fd, 206, range, obj, (size_t)(b - a + 1), -1);
        return;
    default:
        fs_object(fd, q, obj, 10, "\"e\"");
    }
}

Test(store_s3, answers_that_break_the_range)
{
    env();
    fs_t f;
    fs_start(&f, ranges_fn, NULL);
    sl_store_t *st = open_fake(&f, 3);
    sl_error_t e = {0};
    char buf[16];
    atomic_store(&mode, IGNORE_RANGE);
    /* A 200 is the whole object: right when that is exactly what was asked. */
    cr_assert_eq(sl_store_read(st, "k", 0, 10, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "0123456789", 10);
    cr_assert_eq(sl_store_read(st, "k", 4, 4, buf, &e), SL_ERR_PROTOCOL);
    cr_assert_str_eq(e.msg,
                     "s3://" BUCKET "/k: GET bytes=4-7: the server ignored the Range (HTTP 200)");
    cr_assert_eq(sl_store_read(st, "k", 0, 4, buf, &e), SL_ERR_PROTOCOL);
    cr_assert_str_eq(e.msg,
                     "s3://" BUCKET "/k: GET bytes=0-3: the server sent more bytes than asked");
    atomic_store(&mode, LONG_206);
    cr_assert_eq(sl_store_read(st, "k", 2, 3, buf, &e), SL_ERR_PROTOCOL);
    cr_assert_str_eq(e.msg,
                     "s3://" BUCKET "/k: GET bytes=2-4: the server sent more bytes than asked");
    atomic_store(&mode, WRONG_RANGE);
    cr_assert_eq(sl_store_read(st, "k", 4, 4, buf, &e), SL_ERR_PROTOCOL);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/k: GET bytes=4-7: the server answered from byte 0");
    /* None of these is retried: the server would answer the same. */
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.requests, 5);
    cr_assert_eq(s.retries, 0);
    cr_assert_eq(s.failures, 4);
    cr_assert_eq(s.bytes_read, 10);
    /* A body cut short of its Content-Length: a network failure, retried. */
    uint64_t net = s.by_result[SL_STORE_NETWORK_ERROR];
    atomic_store(&mode, SHORT_206);
    cr_assert_eq(sl_store_read(st, "k", 0, 8, buf, &e), SL_ERR_IO);
    const char *cut = "after 3 attempts: s3://" BUCKET "/k: GET bytes=0-7: ";
    cr_assert(strncmp(e.msg, cut, strlen(cut)) == 0, "%s", e.msg);
    sl_store_stats(st, &s);
    cr_assert_eq(s.by_result[SL_STORE_NETWORK_ERROR] - net, 3);
    /* Past the end: S3's 416 is a truncation. */
    atomic_store(&mode, 0);
    cr_assert_eq(sl_store_read(st, "k", 12, 2, buf, &e), SL_ERR_TRUNCATED);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/k: GET bytes=12-13: HTTP 416 InvalidRange: The "
                            "requested range is not satisfiable");
    /* Zero-length ranges ask nothing of the server. */
    sl_store_range_t r[2] = {{.key = "k", .offset = 3, .len = 0, .buf = buf},
                             {.key = "k", .offset = 3, .len = 2, .buf = buf}};
    int before = fs_count(&f);
    cr_assert_eq(sl_store_read_many(st, r, 2, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(r[0].result, SL_OK);
    cr_assert_eq(r[1].result, SL_OK);
    cr_assert_arr_eq(buf, "34", 2);
    cr_assert_eq(fs_count(&f), before + 1);
    sl_store_destroy(st);
    fs_stop(&f);
}

/* ---- errors and retries ---- */

enum {
    NOBODY_500 = 1,
    TIMEOUT_THEN_OK,
    THROTTLE_THEN_OK,
    LONG_MESSAGE,
    HEAD_403_GET_403,
    HEAD_403_GET_404
};

static void errors_fn(fs_t *f, const fs_req_t *q, int fd)
{
    (void)f;
    int m = atomic_load(&mode);
    char msg[400];
    switch (m) {
    case NOBODY_500:
        fs_reply(fd, 500, NULL, NULL);
        return;
    case TIMEOUT_THEN_OK: /* S3's idle-client 400, then the object */
    case THROTTLE_THEN_OK:
        if (atomic_fetch_sub(&fails_left, 1) > 0) {
            if (m == TIMEOUT_THEN_OK)
                fs_error(fd, 400, "RequestTimeout",
                         "Your socket connection to the server was not read from or written to "
                         "within the timeout period.");
            else
                fs_reply(fd, 429, NULL, NULL);
            return;
        }
        break;
    case LONG_MESSAGE:
        memset(msg, 'x', 300);
        msg[300] = '\0';
        fs_error(fd, 403, "AccessDenied", msg);
        return;
    case HEAD_403_GET_403:
    case HEAD_403_GET_404:
        if (strcmp(q->method, "HEAD") == 0)
            fs_reply(fd, 403, NULL, NULL);
        else if (m == HEAD_403_GET_403)
            fs_error(fd, 403, "AccessDenied", "Access Denied");
        else
            fs_error(fd, 404, "NoSuchKey", "The specified key does not exist.");
        return;
    }
    fs_object(fd, q, "abcdefgh", 8, "\"e8\"");
}

Test(store_s3, errors_are_retried_or_not_and_named)
{
    env();
    fs_t f;
    fs_start(&f, errors_fn, NULL);
    sl_store_t *st = open_fake(&f, 3);
    sl_error_t e = {0};
    char buf[8];
    atomic_store(&mode, NOBODY_500);
    cr_assert_eq(sl_store_read(st, "k", 0, 8, buf, &e), SL_ERR_IO);
    cr_assert_str_eq(e.msg, "after 3 attempts: s3://" BUCKET "/k: GET bytes=0-7: HTTP 500 NoBody");
    cr_assert_eq(fs_count(&f), 3);
    sl_store_destroy(st);

    /* RequestTimeout comes with a 400, and is retried all the same. */
    st = open_fake(&f, 3);
    atomic_store(&mode, TIMEOUT_THEN_OK);
    atomic_store(&fails_left, 1);
    cr_assert_eq(sl_store_read(st, "k", 1, 3, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "bcd", 3);
    atomic_store(&mode, THROTTLE_THEN_OK);
    atomic_store(&fails_left, 1);
    cr_assert_eq(sl_store_read(st, "k", 4, 4, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "efgh", 4);
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.retries, 2);
    cr_assert_eq(s.by_result[SL_STORE_CLIENT_ERROR], 1);
    cr_assert_eq(s.by_result[SL_STORE_SERVER_ERROR], 1);
    cr_assert_eq(s.by_result[SL_STORE_OK], 2);
    cr_assert_eq(s.failures, 0);

    /* A long message is cut, not dropped. */
    atomic_store(&mode, LONG_MESSAGE);
    cr_assert_eq(sl_store_read(st, "k", 0, 1, buf, &e), SL_ERR_IO);
    char want[512], xs[256];
    memset(xs, 'x', 255);
    xs[255] = '\0';
    snprintf(want, sizeof want, "s3://" BUCKET "/k: GET bytes=0-0: HTTP 403 AccessDenied: %s", xs);
    cr_assert_str_eq(e.msg, want);

    /* A refused HEAD has no body: the stat asks a byte to hear the code. */
    atomic_store(&mode, HEAD_403_GET_403);
    sl_store_info_t info;
    cr_assert_eq(sl_store_stat(st, "k", &info, &e), SL_ERR_IO);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/k: GET: HTTP 403 AccessDenied: Access Denied");
    /* ... and keeps the HEAD's answer when the GET's status differs. */
    atomic_store(&mode, HEAD_403_GET_404);
    cr_assert_eq(sl_store_stat(st, "k", &info, &e), SL_ERR_IO);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/k: HEAD: HTTP 403 Forbidden");
    /* A HEAD that answers: size, ETag, version and time. */
    atomic_store(&mode, 0);
    cr_assert_eq(sl_store_stat(st, "k", &info, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(info.size, 8);
    cr_assert_str_eq(info.etag, "\"e8\"");
    cr_assert_str_eq(info.version, "v-42");
    cr_assert_eq(info.mtime_s, 1795924800);
    sl_store_destroy(st);
    fs_stop(&f);
}

/* ---- listings ---- */

enum { PAGED = 1, NOT_XML, NO_SIZE, BAD_SIZE, CUT_WITHOUT_TOKEN };

static void list_fn(fs_t *f, const fs_req_t *q, int fd)
{
    (void)f;
    static const char head[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
        "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>" BUCKET "</Name>";
    char b[4096];
    const char *contents = "";
    switch (atomic_load(&mode)) {
    case PAGED:
        if (strstr(q->target, "continuation-token=") == NULL) {
            snprintf(b, sizeof b,
                     "%s<IsTruncated>true</IsTruncated><Contents><Key>a/</Key><Size>0</Size>"
                     "</Contents><Contents><Key>a/1</Key><LastModified>2026-11-29T04:00:00.000Z"
                     "</LastModified><ETag>&quot;e1&quot;</ETag><Size>3</Size></Contents>"
                     "<NextContinuationToken>tok/1+=</NextContinuationToken></ListBucketResult>",
                     head);
        } else {
            snprintf(b, sizeof b,
                     "%s<IsTruncated>false</IsTruncated><Contents><Key>a/2</Key><Size>12</Size>"
                     "</Contents></ListBucketResult>",
                     head);
        }
        fs_reply(fd, 200, NULL, b);
        return;
    case NOT_XML:
        fs_reply(fd, 200, NULL, "<html>oops");
        return;
    case NO_SIZE:
        contents = "<Contents><Key>a/1</Key></Contents>";
        break;
    case BAD_SIZE:
        contents = "<Contents><Key>a/1</Key><Size>12x</Size></Contents>";
        break;
    case CUT_WITHOUT_TOKEN:
        contents = "<IsTruncated>true</IsTruncated>";
        break;
    }
    snprintf(b, sizeof b, "%s%s</ListBucketResult>", head, contents);
    fs_reply(fd, 200, NULL, b);
}

typedef struct seen {
    int n, stop_after;
    char keys[8][64];
    sl_store_info_t info[8];
} seen_t;

static sl_err_t collect(void *ctx, const char *key, const sl_store_info_t *info)
{
    seen_t *s = ctx;
    if (s->n == s->stop_after) return SL_ERR_CLOSED;
    cr_assert_lt(s->n, 8);
    snprintf(s->keys[s->n], 64, "%s", key);
    s->info[s->n++] = *info;
    return SL_OK;
}

Test(store_s3, listings_paged_and_malformed)
{
    env();
    fs_t f;
    fs_start(&f, list_fn, NULL);
    sl_store_t *st = open_fake(&f, 1);
    sl_error_t e = {0};
    atomic_store(&mode, PAGED);
    seen_t s = {.stop_after = -1};
    cr_assert_eq(sl_store_list(st, "a/", collect, &s, &e), SL_OK, "%s", e.msg);
    /* The folder marker a/ is not an object. */
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.keys[0], "a/1");
    cr_assert_eq(s.info[0].size, 3);
    cr_assert_str_eq(s.info[0].etag, "\"e1\"");
    cr_assert_eq(s.info[0].mtime_s, 1795924800);
    cr_assert_str_eq(s.keys[1], "a/2");
    cr_assert_eq(s.info[1].size, 12);
    char got[300];
    fs_logged(&f, 0, got, sizeof got);
    cr_assert_str_eq(got, "GET /" BUCKET "/?list-type=2&max-keys=1000&prefix=a%2F");
    /* The token, encoded, first: the query in canonical order. */
    fs_logged(&f, 1, got, sizeof got);
    cr_assert_str_eq(got,
                     "GET /" BUCKET
                     "/?continuation-token=tok%2F1%2B%3D&list-type=2&max-keys=1000&prefix=a%2F");
    /* The callback stops the listing with its own value, before page 2. */
    s = (seen_t){.stop_after = 0};
    cr_assert_eq(sl_store_list(st, "a/", collect, &s, &e), SL_ERR_CLOSED);
    cr_assert_eq(fs_count(&f), 3);

    struct {
        int mode;
        const char *msg;
    } bad[] = {
        {NOT_XML, "s3://" BUCKET "/a/ (list): ListObjectsV2 answered with no ListBucketResult "
                  "(10 bytes)"},
        {NO_SIZE, "s3://" BUCKET "/a/ (list): a ListObjectsV2 <Contents> without a Key or a Size"},
        {BAD_SIZE, "s3://" BUCKET "/a/ (list): key a/1: a Size of '12x'"},
        {CUT_WITHOUT_TOKEN, "s3://" BUCKET "/a/ (list): a truncated ListObjectsV2 page without "
                            "NextContinuationToken"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        atomic_store(&mode, bad[i].mode);
        s = (seen_t){.stop_after = -1};
        cr_assert_eq(sl_store_list(st, "a/", collect, &s, &e), SL_ERR_PROTOCOL, "mode %d",
                     bad[i].mode);
        cr_assert_str_eq(e.msg, bad[i].msg);
        cr_assert_eq(s.n, 0);
    }
    sl_store_stats_t ss;
    sl_store_stats(st, &ss);
    cr_assert_eq(ss.list_pages, 7);
    cr_assert_eq(ss.failures, 5);
    /* A prefix is relative to the bucket. */
    cr_assert_eq(sl_store_list(st, "/a", collect, &s, &e), SL_ERR_INVALID);
    cr_assert_str_eq(e.msg, "s3://" BUCKET ": prefix '/a' starts with '/'");
    sl_store_destroy(st);
    fs_stop(&f);
}

/* ---- multipart uploads ---- */

enum { MP_OK = 1, MP_NO_UPLOAD_ID, MP_PART2_DENIED, MP_COMPLETE_ERROR };

typedef struct mp {
    pthread_mutex_t mu;
    int bad_sha; /* parts whose x-amz-content-sha256 is not their payload's */
    char complete[1024];
} mp_t;

static void mp_fn(fs_t *f, const fs_req_t *q, int fd)
{
    mp_t *mp = f->ctx;
    int m = atomic_load(&mode);
    if (strcmp(q->method, "POST") == 0 && strstr(q->target, "?uploads=")) {
        if (m == MP_NO_UPLOAD_ID)
            fs_reply(fd, 200, NULL,
                     "<InitiateMultipartUploadResult><Bucket>" BUCKET
                     "</Bucket><Key>big</Key></InitiateMultipartUploadResult>");
        else
            fs_reply(fd, 200, NULL,
                     "<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>" BUCKET
                     "</Bucket><Key>big</Key><UploadId>up/1+x</UploadId>"
                     "</InitiateMultipartUploadResult>");
        return;
    }
    if (strcmp(q->method, "PUT") == 0) {
        int part = 0;
        const char *pn = strstr(q->target, "partNumber=");
        if (pn) part = atoi(pn + 11);
        unsigned char d[32];
        char hex[65], sent[80] = "";
        gnutls_hash_fast(GNUTLS_DIG_SHA256, q->body, q->body_len, d);
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", d[i]);
        fs_header(q, "x-amz-content-sha256", sent, sizeof sent);
        pthread_mutex_lock(&mp->mu);
        mp->bad_sha += strcmp(hex, sent) != 0;
        pthread_mutex_unlock(&mp->mu);
        if (m == MP_PART2_DENIED && part == 2) {
            fs_error(fd, 403, "AccessDenied", "Access Denied");
            return;
        }
        char h[64];
        snprintf(h, sizeof h, "ETag: \"etag%d\"\r\n", part);
        fs_reply(fd, 200, h, NULL);
        return;
    }
    if (strcmp(q->method, "POST") == 0) {
        pthread_mutex_lock(&mp->mu);
        snprintf(mp->complete, sizeof mp->complete, "%.*s", (int)q->body_len, q->body);
        pthread_mutex_unlock(&mp->mu);
        if (m == MP_COMPLETE_ERROR)
            fs_reply(fd, 200, NULL,
                     "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError"
                     "</Code><Message>We encountered an internal error. Please try again."
                     "</Message></Error>");
        else
            fs_reply(fd, 200, NULL,
                     "<CompleteMultipartUploadResult><ETag>\"mp-2\"</ETag>"
                     "</CompleteMultipartUploadResult>");
        return;
    }
    if (strcmp(q->method, "DELETE") == 0) {
        fs_reply(fd, 204, NULL, NULL);
        return;
    }
    fs_reply(fd, 400, NULL, NULL);
}

Test(store_s3, multipart_upload_steps_and_their_failures)
{
    env();
    mp_t mp = {.mu = PTHREAD_MUTEX_INITIALIZER};
    fs_t f;
    fs_start(&f, mp_fn, &mp);
    sl_store_t *st = open_fake(&f, 1);
    sl_error_t e = {0};
    size_t n = (5u << 20) + 100;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)('a' + i % 23);
    char got[300];

    atomic_store(&mode, MP_OK);
    cr_assert_eq(sl_store_put(st, "big", data, n, &e), SL_OK, "%s", e.msg);
    const char *want[] = {
        "POST /" BUCKET "/big?uploads=", "PUT /" BUCKET "/big?partNumber=1&uploadId=up%2F1%2Bx",
        "PUT /" BUCKET "/big?partNumber=2&uploadId=up%2F1%2Bx",
        "POST /" BUCKET "/big?uploadId=up%2F1%2Bx"};
    cr_assert_eq(fs_count(&f), 4);
    for (int i = 0; i < 4; i++) {
        fs_logged(&f, i, got, sizeof got);
        cr_assert_str_eq(got, want[i]);
    }
    cr_assert_str_eq(mp.complete, "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>"
                                  "<ETag>\"etag1\"</ETag></Part><Part><PartNumber>2</PartNumber>"
                                  "<ETag>\"etag2\"</ETag></Part></CompleteMultipartUpload>");
    cr_assert_eq(mp.bad_sha, 0);
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.bytes_written, n);

    /* No UploadId: nothing more is sent. */
    atomic_store(&mode, MP_NO_UPLOAD_ID);
    cr_assert_eq(sl_store_put(st, "big", data, n, &e), SL_ERR_PROTOCOL);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/big: CreateMultipartUpload gave no UploadId");
    cr_assert_eq(fs_count(&f), 5);

    /* A part refused: the upload is aborted, so no part stays billed. */
    atomic_store(&mode, MP_PART2_DENIED);
    cr_assert_eq(sl_store_put(st, "big", data, n, &e), SL_ERR_IO);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/big: PUT: HTTP 403 AccessDenied: Access Denied");
    cr_assert_eq(fs_count(&f), 9);
    fs_logged(&f, 8, got, sizeof got);
    cr_assert_str_eq(got, "DELETE /" BUCKET "/big?uploadId=up%2F1%2Bx");

    /* CompleteMultipartUpload may fail with a 200 and an <Error>. */
    atomic_store(&mode, MP_COMPLETE_ERROR);
    cr_assert_eq(sl_store_put(st, "big", data, n, &e), SL_ERR_IO);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/big: CompleteMultipartUpload: InternalError: We "
                            "encountered an internal error. Please try again.");
    cr_assert_eq(fs_count(&f), 13);
    cr_assert_eq(mp.bad_sha, 0);

    /* More than S3's 10,000 parts: refused before any request. */
    char *dir = tu_mkdtemp("store_s3");
    char *path = tu_path(dir, "sparse");
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(5ull << 20) * 10000 + 1), 0);
    close(fd);
    cr_assert_eq(sl_store_put_file(st, "huge", path, &e), SL_ERR_TOO_LARGE);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/huge: 52428800001 bytes need 10001 parts of 5242880 "
                            "(S3 allows 10000)");
    cr_assert_eq(sl_store_put_file(st, "x", "/nonexistent/file", &e), SL_ERR_IO);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/x: cannot read the source /nonexistent/file");
    cr_assert_eq(fs_count(&f), 13);
    sl_store_destroy(st);
    fs_stop(&f);
    tu_rm_tree(dir);
    free(path);
    free(dir);
    free(data);
}

/* ---- signing ---- */

typedef struct auth {
    pthread_mutex_t mu;
    char authorization[512], token[128];
} auth_t;

static void auth_fn(fs_t *f, const fs_req_t *q, int fd)
{
    auth_t *au = f->ctx;
    pthread_mutex_lock(&au->mu);
    fs_header(q, "Authorization", au->authorization, sizeof au->authorization);
    if (!fs_header(q, "x-amz-security-token", au->token, sizeof au->token)) au->token[0] = '\0';
    pthread_mutex_unlock(&au->mu);
    fs_object(fd, q, "signed", 6, "\"s\"");
}

Test(store_s3, signed_with_the_session_token_and_region)
{
    env();
    setenv("AWS_SESSION_TOKEN", "session-token-1", 1);
    auth_t au = {.mu = PTHREAD_MUTEX_INITIALIZER};
    fs_t f;
    fs_start(&f, auth_fn, &au);
    char ep[64];
    /* Trailing slashes of an endpoint are not part of the path. */
    snprintf(ep, sizeof ep, "http://127.0.0.1:%u//", f.port);
    sl_store_opts_t o = {.endpoint = ep, .path_style = -1, .region = "eu-west-3"};
    sl_store_t *st = NULL;
    sl_error_t e = {0};
    cr_assert_eq(sl_store_open_url("s3://" BUCKET, &o, &st, NULL, &e), SL_OK, "%s", e.msg);
    char buf[6];
    cr_assert_eq(sl_store_read(st, "d/k", 0, 6, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "signed", 6);
    char got[300];
    fs_logged(&f, 0, got, sizeof got);
    cr_assert_str_eq(got, "GET /" BUCKET "/d/k");
    cr_assert_str_eq(au.token, "session-token-1");
    cr_assert(strstr(au.authorization, "AWS4-HMAC-SHA256 Credential=AKIDFAKE/") &&
                  strstr(au.authorization, "/eu-west-3/s3/aws4_request"),
              "%s", au.authorization);
    cr_assert_null(strstr(au.authorization, "fake-secret"));
    sl_store_destroy(st);

    /* No credentials anywhere: the read fails saying so, and sends nothing. */
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    st = open_fake(&f, 3);
    cr_assert_eq(sl_store_read(st, "d/k", 0, 6, buf, &e), SL_ERR_NOT_FOUND);
    cr_assert_str_eq(e.msg, "no AWS credentials found: environment: AWS_ACCESS_KEY_ID is not set; "
                            "shared files: no keys for profile default in "
                            "/nonexistent/credentials or /nonexistent/config; web identity: "
                            "AWS_WEB_IDENTITY_TOKEN_FILE is not set; instance metadata: disabled "
                            "(AWS_EC2_METADATA_DISABLED=true)");
    cr_assert_eq(fs_count(&f), 1);
    sl_store_destroy(st);
    fs_stop(&f);
}

/* ---- a pinned object ---- */

static void pin_fn(fs_t *f, const fs_req_t *q, int fd)
{
    (void)f;
    fs_object(fd, q, "pinned-object", 13, "\"p1\"");
}

Test(store_s3, a_pinned_object_reads_many_ranges_without_a_head)
{
    env();
    fs_t f;
    fs_start(&f, pin_fn, NULL);
    sl_store_t *st = open_fake(&f, 1);
    sl_error_t e = {0};
    sl_store_info_t known = {.size = 13, .etag = "\"p1\""};
    sl_store_object_t *o = NULL;
    cr_assert_eq(sl_store_object_pin(st, "p/obj", &known, &o, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(fs_count(&f), 0);
    cr_assert_str_eq(sl_store_object_key(o), "p/obj");
    cr_assert_eq(sl_store_object_info(o)->size, 13);
    char a[6], b[6];
    sl_store_range_t r[2] = {{.offset = 0, .len = 6, .buf = a}, {.offset = 7, .len = 6, .buf = b}};
    cr_assert_eq(sl_store_object_read_many(o, r, 2, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(a, "pinned", 6);
    cr_assert_arr_eq(b, "object", 6);
    cr_assert_str_eq(r[1].key, "p/obj");
    cr_assert_str_eq(r[1].if_match, "\"p1\"");
    cr_assert_eq(fs_count(&f), 2);
    /* Past the pinned size: refused without a request. */
    r[1].offset = 8;
    cr_assert_eq(sl_store_object_read_many(o, r, 2, &e), SL_ERR_TRUNCATED);
    cr_assert_str_eq(e.msg, "s3://" BUCKET "/p/obj: bytes [8, 14) past its end at 13");
    cr_assert_eq(fs_count(&f), 2);
    sl_store_object_destroy(o);
    sl_store_destroy(st);
    fs_stop(&f);
}

/* ---- out of memory ---- */

static void oom_fn(fs_t *f, const fs_req_t *q, int fd)
{
    if (strcmp(q->method, "GET") == 0 && strstr(q->target, "list-type=2")) {
        fs_reply(fd, 200, NULL,
                 "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>m/k</Key>"
                 "<Size>8</Size></Contents></ListBucketResult>");
        return;
    }
    if (strcmp(q->method, "PUT") == 0 || strcmp(q->method, "POST") == 0) {
        mp_fn(f, q, fd);
        return;
    }
    fs_object(fd, q, "abcdefgh", 8, "\"e8\"");
}

static sl_err_t count_keys(void *ctx, const char *key, const sl_store_info_t *info)
{
    (void)key;
    (void)info;
    ++*(int *)ctx;
    return SL_OK;
}

/* One of the store's operations: 0 put, 1 stat, 2 two ranges, 3 list, 4 multipart. */
static sl_err_t oom_op(sl_store_t *st, int op, const char *big, size_t big_len, sl_error_t *e)
{
    sl_store_info_t info;
    char a[4], b[4];
    sl_store_range_t r[2] = {{.key = "m/k", .offset = 0, .len = 4, .buf = a},
                             {.key = "m/k", .offset = 4, .len = 4, .buf = b}};
    int n = 0;
    sl_err_t rc;
    switch (op) {
    case 0:
        return sl_store_put(st, "m/k", "abcdefgh", 8, e);
    case 1:
        rc = sl_store_stat(st, "m/k", &info, e);
        cr_assert(rc != SL_OK || (info.size == 8 && strcmp(info.etag, "\"e8\"") == 0));
        return rc;
    case 2:
        rc = sl_store_read_many(st, r, 2, e);
        cr_assert(rc != SL_OK || (memcmp(a, "abcd", 4) == 0 && memcmp(b, "efgh", 4) == 0));
        return rc;
    case 3:
        rc = sl_store_list(st, "m/", count_keys, &n, e);
        cr_assert(rc != SL_OK || n == 1);
        return rc;
    default:
        return sl_store_put(st, "m/big", big, big_len, e);
    }
}

/* Every allocation of open, put, stat, ranges, a listing and a multipart
 * upload fails in turn: each failure is an error with a message, never a
 * crash or a leak, and the same store then does the same operation. */
Test(store_s3, every_allocation_failure_is_an_error_and_leaks_nothing)
{
    env();
    mp_t mp = {.mu = PTHREAD_MUTEX_INITIALIZER};
    atomic_store(&mode, MP_OK);
    fs_t f;
    fs_start(&f, oom_fn, &mp);
    size_t big_len = (5u << 20) + 10;
    char *big = calloc(1, big_len);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%u", f.port);
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    sl_store_opts_t o = {.alloc = &ta.base,
                         .endpoint = ep,
                         .path_style = -1,
                         .max_attempts = 1,
                         .part_size = 5u << 20,
                         .ca_bundle = "/nonexistent/ca.pem"}; /* copied at open; unused by http */
    int failed_ops = 0;
    uint64_t k;
    for (k = 1; k < 100000; k++) {
        tu_alloc_fail_at(&ta, k, false);
        sl_store_t *st = NULL;
        sl_error_t e = {0};
        sl_err_t rc = sl_store_open_url("s3://" BUCKET, &o, &st, NULL, &e);
        if (rc != SL_OK) {
            cr_assert_eq(rc, SL_ERR_NOMEM, "k=%llu: %s", (unsigned long long)k, e.msg);
            cr_assert_null(st);
            tu_alloc_assert_clean(&ta);
            continue;
        }
        for (int op = 0; op < 5; op++) {
            uint64_t before = tu_alloc_failures(&ta);
            e = (sl_error_t){0};
            rc = oom_op(st, op, big, big_len, &e);
            if (tu_alloc_failures(&ta) == before) {
                cr_assert_eq(rc, SL_OK, "k=%llu op %d: %s", (unsigned long long)k, op, e.msg);
                continue;
            }
            /* The failed allocation may have been a response buffer (then
             * the transfer fails) or the store's own. */
            cr_assert(rc == SL_ERR_NOMEM || rc == SL_ERR_IO, "k=%llu op %d: %d %s",
                      (unsigned long long)k, op, rc, e.msg);
            cr_assert_neq(e.msg[0], '\0');
            failed_ops++;
            e = (sl_error_t){0};
            cr_assert_eq(oom_op(st, op, big, big_len, &e), SL_OK, "k=%llu op %d again: %s",
                         (unsigned long long)k, op, e.msg);
        }
        bool done = tu_alloc_failures(&ta) == 0;
        sl_store_destroy(st);
        tu_alloc_assert_clean(&ta);
        if (done) break;
    }
    cr_log_info("%llu allocations, %d operations failed", (unsigned long long)k, failed_ops);
    cr_assert_lt(k, 100000);
    cr_assert_gt(failed_ops, 20, "%d operations failed", failed_ops);
    cr_assert_eq(mp.bad_sha, 0);
    free(big);
    fs_stop(&f);
}

/* ---- AWS addressing ---- */

static void connect_fn(fs_t *f, const fs_req_t *q, int fd)
{
    (void)f;
    (void)q;
    fs_reply(fd, 403, NULL, NULL);
}

/* Without an endpoint the store talks to AWS: virtual-hosted, or
 * path-style when told or when the bucket has a dot (its certificate
 * would not match). The fake is the HTTPS proxy, so it hears the host
 * each request was for (and refuses to connect it). */
Test(store_s3, aws_hosts_by_addressing_style)
{
    env();
    unsetenv("NO_PROXY");
    unsetenv("no_proxy");
    fs_t f;
    fs_start(&f, connect_fn, NULL);
    char proxy[64];
    snprintf(proxy, sizeof proxy, "http://127.0.0.1:%u", f.port);
    setenv("https_proxy", proxy, 1);
    struct {
        const char *url;
        int path_style;
        const char *host;
    } cases[] = {
        {"s3://" BUCKET, -1, "CONNECT " BUCKET ".s3.eu-west-3.amazonaws.com:443"},
        {"s3://" BUCKET, 1, "CONNECT s3.eu-west-3.amazonaws.com:443"},
        {"s3://fake.dotted.bucket", -1, "CONNECT s3.eu-west-3.amazonaws.com:443"},
    };
    for (int i = 0; i < 3; i++) {
        sl_store_opts_t o = {.path_style = cases[i].path_style, .max_attempts = 1};
        sl_store_t *st = NULL;
        sl_error_t e = {0};
        setenv("AWS_REGION", "eu-west-3", 1);
        cr_assert_eq(sl_store_open_url(cases[i].url, &o, &st, NULL, &e), SL_OK, "%s", e.msg);
        char b[1];
        /* A refused CONNECT: no answer from the server, a network failure. */
        cr_assert_eq(sl_store_read(st, "k", 0, 1, b, &e), SL_ERR_IO);
        char want[200];
        snprintf(want, sizeof want, "after 1 attempts: %s/k: GET bytes=0-0: ", cases[i].url);
        cr_assert(strncmp(e.msg, want, strlen(want)) == 0, "%s", e.msg);
        char got[300];
        fs_logged(&f, i, got, sizeof got);
        cr_assert_str_eq(got, cases[i].host);
        sl_store_destroy(st);
    }
    cr_assert_eq(fs_count(&f), 3);
    fs_stop(&f);
}

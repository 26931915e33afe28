/* The S3 store (src/store) against a real S3 API server: s3proxy of the
 * ctest fixture s3 (ops/s3proxy; SKIPPED where Java is missing), with
 * SigV4 authentication on, and a fault-injecting proxy in front of it for
 * the retry tests (s3_util.h). */
#include <criterion/criterion.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "common/prom.h"
#include "s3_util.h"
#include "store/store.h"

static sl_store_t *open_store(const char *bucket, const sl_store_opts_t *o)
{
    char url[300];
    snprintf(url, sizeof url, "s3://%s", bucket);
    sl_store_t *st = NULL;
    sl_error_t e = {0};
    cr_assert_eq(sl_store_open_url(url, o, &st, NULL, &e), SL_OK, "%s", e.msg);
    return st;
}

static uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(tu_next(&seed) >> 56);
    return b;
}

/* S3's ETag of an object written in one PUT: its MD5, quoted. */
static void md5_etag(const void *data, size_t n, char out[40])
{
    unsigned char d[16];
    gnutls_hash_fast(GNUTLS_DIG_MD5, data, n, d);
    out[0] = '"';
    for (int i = 0; i < 16; i++)
        snprintf(out + 1 + 2 * i, 3, "%02x", d[i]);
    out[33] = '"';
    out[34] = '\0';
}

Test(s3, put_stat_ranges_and_parallel_reads)
{
    su_env();
    char b[64];
    su_bucket("ranges", b, sizeof b);
    uint64_t seed = tu_seed("s3_ranges");
    size_t n = 3u << 20;
    uint8_t *data = random_bytes(n, seed);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "dir/obj.bin", data, n, &e), SL_OK, "%s", e.msg);
    sl_store_info_t info;
    cr_assert_eq(sl_store_stat(st, "dir/obj.bin", &info, &e), SL_OK, "%s", e.msg);
    char etag[40];
    md5_etag(data, n, etag);
    cr_assert_eq(info.size, n);
    cr_assert_str_eq(info.etag, etag);
    cr_assert_gt(info.mtime_s, 1700000000);

    uint8_t buf[5000];
    cr_assert_eq(sl_store_read(st, "dir/obj.bin", 0, 100, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, data, 100);
    cr_assert_eq(sl_store_read(st, "dir/obj.bin", 1000, 4000, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, data + 1000, 4000);
    cr_assert_eq(sl_store_read(st, "dir/obj.bin", n - 10, 10, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, data + n - 10, 10);
    /* Past the end: fewer bytes than asked is an error naming the object. */
    cr_assert_eq(sl_store_read(st, "dir/obj.bin", n - 10, 20, buf, &e), SL_ERR_TRUNCATED);
    cr_assert(strstr(e.msg, "s3://") && strstr(e.msg, "/dir/obj.bin") &&
                  strstr(e.msg, "after 10 of the 20 bytes"),
              "%s", e.msg);
    sl_store_destroy(st);

    /* 96 ranges of 32 KiB at random offsets, 4 connections, 128 KiB in flight. */
    sl_store_opts_t o = {.path_style = -1, .max_connections = 4, .max_inflight_bytes = 128 << 10};
    st = open_store(b, &o);
    enum { R = 96, L = 32 << 10 };
    sl_store_range_t r[R];
    uint8_t *out = malloc((size_t)R * L);
    for (int i = 0; i < R; i++)
        r[i] = (sl_store_range_t){.key = "dir/obj.bin",
                                  .offset = tu_below(&seed, n - L),
                                  .len = L,
                                  .buf = out + (size_t)i * L,
                                  .if_match = etag};
    cr_assert_eq(sl_store_read_many(st, r, R, &e), SL_OK, "%s", e.msg);
    for (int i = 0; i < R; i++) {
        cr_assert_eq(r[i].result, SL_OK);
        cr_assert_arr_eq(out + (size_t)i * L, data + r[i].offset, L, "range %d", i);
    }
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.requests, R);
    cr_assert_eq(s.retries, 0);
    cr_assert_eq(s.bytes_read, (uint64_t)R * L);
    sl_store_destroy(st);
    free(out);
    free(data);
}

typedef struct reader {
    sl_store_t *st;
    const uint8_t *data;
    uint64_t seed;
    int bad;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    uint8_t buf[8192];
    for (int i = 0; i < 40; i++) {
        uint64_t off = tu_below(&r->seed, (1u << 20) - sizeof buf);
        sl_error_t e = {0};
        if (sl_store_read(r->st, "obj", off, sizeof buf, buf, &e) != SL_OK ||
            memcmp(buf, r->data + off, sizeof buf) != 0)
            r->bad++;
    }
    return NULL;
}

Test(s3, one_store_from_many_threads)
{
    su_env();
    char b[64];
    su_bucket("threads", b, sizeof b);
    uint64_t seed = tu_seed("s3_threads");
    uint8_t *data = random_bytes(1 << 20, seed);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "obj", data, 1 << 20, &e), SL_OK, "%s", e.msg);
    pthread_t th[6];
    reader_t rd[6];
    for (int i = 0; i < 6; i++) {
        rd[i] = (reader_t){st, data, seed + (uint64_t)i + 1, 0};
        pthread_create(&th[i], NULL, reader_main, &rd[i]);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(rd[i].bad, 0, "thread %d", i);
    }
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.requests, 1 + 6 * 40);
    cr_assert_eq(s.bytes_read, 6 * 40 * 8192);
    sl_store_destroy(st);
    free(data);
}

typedef struct seen {
    int n;
    char last[256];
    bool ordered;
    uint64_t bytes;
} seen_t;

static sl_err_t count_key(void *ctx, const char *key, const sl_store_info_t *info)
{
    seen_t *s = ctx;
    if (s->n > 0 && strcmp(s->last, key) >= 0) s->ordered = false;
    snprintf(s->last, sizeof s->last, "%s", key);
    s->n++;
    s->bytes += info->size;
    return SL_OK;
}

/* Latency is counted per operation: one PUT, one HEAD, a listing of one
 * page, two GETs; each in its op's histogram, as the Prometheus text. */
Test(s3, request_latency_by_operation)
{
    su_env();
    char b[64];
    su_bucket("ops", b, sizeof b);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "o/a", "0123456789", 10, &e), SL_OK, "%s", e.msg);
    sl_store_info_t info;
    cr_assert_eq(sl_store_stat(st, "o/a", &info, &e), SL_OK, "%s", e.msg);
    seen_t s = {.ordered = true};
    cr_assert_eq(sl_store_list(st, "o/", count_key, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    char buf[4];
    cr_assert_eq(sl_store_read(st, "o/a", 2, 4, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_read(st, "o/a", 6, 4, buf, &e), SL_OK, "%s", e.msg);
    sl_store_stats_t ss;
    sl_store_stats(st, &ss);
    const uint64_t want[SL_STORE_OPS] = {[SL_STORE_OP_GET] = 2,
                                         [SL_STORE_OP_HEAD] = 1,
                                         [SL_STORE_OP_LIST] = 1,
                                         [SL_STORE_OP_PUT] = 1};
    for (int o = 0; o < SL_STORE_OPS; o++) {
        uint64_t n = 0;
        for (int i = 0; i <= SL_STORE_LATENCY_BUCKETS; i++)
            n += ss.latency[o][i];
        cr_assert_eq(n, want[o], "op %s: %llu requests", sl_store_op_name(o),
                     (unsigned long long)n);
        cr_assert_eq(ss.latency_sum_s[o] > 0, want[o] > 0);
    }
    cr_assert_eq(ss.requests, 5);
    sl_prom_t pt;
    sl_prom_init(&pt, NULL);
    sl_store_prom(st, &pt, NULL);
    char *text = sl_prom_finish(&pt);
    for (int o = 0; o < SL_STORE_OPS; o++) {
        char line[200];
        snprintf(line, sizeof line, "sluice_store_request_seconds_count{op=\"%s\"} %llu\n",
                 sl_store_op_name(o), (unsigned long long)want[o]);
        cr_assert(strstr(text, line), "no %s in %s", line, text);
    }
    cr_assert(strstr(text, "sluice_store_request_seconds_bucket{op=\"list\",le=\"+Inf\"} 1\n"),
              "%s", text);
    sl_strfree(NULL, text);
    sl_store_destroy(st);
}

Test(s3, virtual_hosted_addressing)
{
    su_env();
    char b[64];
    su_bucket("vhost", b, sizeof b);
    /* BUCKET.localhost:PORT (curl resolves *.localhost to loopback). */
    sl_store_opts_t o = {.path_style = 0};
    sl_store_t *st = open_store(b, &o);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "v/k", "virtual", 7, &e), SL_OK, "%s", e.msg);
    char buf[7];
    cr_assert_eq(sl_store_read(st, "v/k", 0, 7, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "virtual", 7);
    seen_t s = {.ordered = true};
    cr_assert_eq(sl_store_list(st, "v/", count_key, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    sl_store_destroy(st);
    /* The same object path-style. */
    st = open_store(b, NULL);
    cr_assert_eq(sl_store_read(st, "v/k", 0, 7, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "virtual", 7);
    sl_store_destroy(st);
}

Test(s3, list_pages_past_1000_keys)
{
    su_env();
    char b[64];
    su_bucket("list", b, sizeof b);
    /* 1,234 objects under many/ and 3 beside it, written straight into the
     * filesystem backend (1,237 PUTs would only slow the test). */
    char path[1200];
    snprintf(path, sizeof path, "%s/data/%s/many", su.dir, b);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/data/%s/other", su.dir, b);
    mkdir(path, 0755);
    for (int i = 0; i < 1234; i++) {
        snprintf(path, sizeof path, "%s/data/%s/many/k%05d", su.dir, b, i);
        tu_write_file(path, "abc", 3);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/data/%s/other/k%d", su.dir, b, i);
        tu_write_file(path, "x", 1);
    }
    sl_store_t *st = open_store(b, NULL);
    seen_t s = {.ordered = true};
    sl_error_t e = {0};
    cr_assert_eq(sl_store_list(st, "many/", count_key, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1234);
    cr_assert(s.ordered);
    cr_assert_str_eq(s.last, "many/k01233");
    cr_assert_eq(s.bytes, 1234 * 3);
    sl_store_stats_t st_s;
    sl_store_stats(st, &st_s);
    cr_assert_eq(st_s.list_pages, 2, "1,234 keys in pages of 1,000");
    sl_store_destroy(st);

    /* Pages of 100: 13 of them; the whole bucket: 1,237 keys. */
    sl_store_opts_t o = {.path_style = -1, .list_page_keys = 100};
    st = open_store(b, &o);
    s = (seen_t){.ordered = true};
    cr_assert_eq(sl_store_list(st, "", count_key, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1237);
    cr_assert(s.ordered);
    sl_store_stats(st, &st_s);
    cr_assert_eq(st_s.list_pages, 13);
    /* A prefix with characters that need encoding, and one that matches nothing. */
    s = (seen_t){.ordered = true};
    cr_assert_eq(sl_store_list(st, "other/k1", count_key, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    s = (seen_t){.ordered = true};
    cr_assert_eq(sl_store_list(st, "no such/prefix+&=", count_key, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 0);
    sl_store_destroy(st);
}

Test(s3, keys_that_need_encoding)
{
    su_env();
    char b[64];
    su_bucket("enc", b, sizeof b);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    const char *key = "ds=2026-11-29/part 1+x&y=z~.slc";
    cr_assert_eq(sl_store_put(st, key, "hello", 5, &e), SL_OK, "%s", e.msg);
    char buf[5];
    cr_assert_eq(sl_store_read(st, key, 1, 4, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "ello", 4);
    seen_t s = {.ordered = true};
    cr_assert_eq(sl_store_list(st, "ds=2026-11-29/part 1", count_key, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.last, key);
    sl_store_destroy(st);
}

Test(s3, wrong_secret_is_signature_does_not_match)
{
    su_env();
    char b[64];
    su_bucket("auth", b, sizeof b);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "k", "v", 1, &e), SL_OK, "%s", e.msg);
    sl_store_destroy(st);
    setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-0123456789", 1);
    st = open_store(b, NULL);
    char buf[1];
    cr_assert_eq(sl_store_read(st, "k", 0, 1, buf, &e), SL_ERR_IO);
    char want[200];
    snprintf(want, sizeof want, "s3://%s/k: GET bytes=0-0: HTTP 403 SignatureDoesNotMatch", b);
    cr_assert(strstr(e.msg, want), "%s", e.msg);
    cr_assert_null(strstr(e.msg, "not-the-secret"), "a secret in: %s", e.msg);
    cr_assert_null(strstr(e.msg, su.secret));
    cr_assert_eq(sl_store_stat(st, "k", &(sl_store_info_t){0}, &e), SL_ERR_IO);
    cr_assert(strstr(e.msg, "HTTP 403 SignatureDoesNotMatch"), "%s", e.msg);
    /* Failed at once: 403 is not retried. */
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.retries, 0);
    sl_store_destroy(st);
    /* An unknown key id is named as such. */
    setenv("AWS_ACCESS_KEY_ID", "AKIDNOBODY", 1);
    st = open_store(b, NULL);
    cr_assert_eq(sl_store_read(st, "k", 0, 1, buf, &e), SL_ERR_IO);
    cr_assert(strstr(e.msg, "HTTP 403 InvalidAccessKeyId"), "%s", e.msg);
    sl_store_destroy(st);
}

Test(s3, missing_bucket_and_key_are_named)
{
    su_env();
    char b[64];
    su_bucket("missing", b, sizeof b);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    char buf[8], want[200];
    cr_assert_eq(sl_store_read(st, "no/such.key", 0, 8, buf, &e), SL_ERR_NOT_FOUND);
    snprintf(want, sizeof want, "s3://%s/no/such.key: GET bytes=0-7: HTTP 404 NoSuchKey", b);
    cr_assert(strstr(e.msg, want), "%s", e.msg);
    cr_assert_eq(sl_store_stat(st, "no/such.key", &(sl_store_info_t){0}, &e), SL_ERR_NOT_FOUND);
    snprintf(want, sizeof want, "s3://%s/no/such.key: GET: HTTP 404 NoSuchKey", b);
    cr_assert(strstr(e.msg, want), "%s", e.msg);
    sl_store_destroy(st);

    st = open_store("sluice-no-such-bucket", NULL);
    cr_assert_eq(sl_store_read(st, "k", 0, 8, buf, &e), SL_ERR_NOT_FOUND);
    cr_assert(strstr(e.msg, "s3://sluice-no-such-bucket/k: GET bytes=0-7: HTTP 404 NoSuchBucket"),
              "%s", e.msg);
    cr_assert_eq(sl_store_list(st, "", count_key, &(seen_t){0}, &e), SL_ERR_NOT_FOUND);
    cr_assert(strstr(e.msg, "s3://sluice-no-such-bucket/ (list)") &&
                  strstr(e.msg, "HTTP 404 NoSuchBucket"),
              "%s", e.msg);
    sl_store_destroy(st);
}

Test(s3, replaced_object_fails_a_pinned_read)
{
    su_env();
    char b[64];
    su_bucket("pin", b, sizeof b);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "obj", "version-1", 9, &e), SL_OK, "%s", e.msg);
    sl_store_info_t v1;
    cr_assert_eq(sl_store_stat(st, "obj", &v1, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_put(st, "obj", "version-2", 9, &e), SL_OK, "%s", e.msg);
    char buf[9];
    sl_store_range_t r = {.key = "obj", .offset = 0, .len = 9, .buf = buf, .if_match = v1.etag};
    cr_assert_eq(sl_store_read_many(st, &r, 1, &e), SL_ERR_VERSION);
    cr_assert(strstr(e.msg, "replaced since it was planned") && strstr(e.msg, v1.etag), "%s",
              e.msg);
    /* The same through a pinned object, the readers' byte source. */
    sl_store_object_t *o = NULL;
    cr_assert_eq(sl_store_object_open(st, "obj", &o, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_object_read_at(o, 8, 1, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(buf[0], '2');
    cr_assert_eq(sl_store_put(st, "obj", "version-3", 9, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_object_read_at(o, 0, 9, buf, &e), SL_ERR_VERSION);
    char want[200];
    snprintf(want, sizeof want, "s3://%s/obj: GET bytes=0-8: replaced since it was planned", b);
    cr_assert(strstr(e.msg, want), "%s", e.msg);
    sl_store_object_destroy(o);
    sl_store_destroy(st);
}

Test(s3, multipart_put_of_a_file)
{
    su_env();
    char b[64];
    su_bucket("multipart", b, sizeof b);
    size_t n = (11u << 20) + 12345;
    uint8_t *data = random_bytes(n, tu_seed("s3_multipart"));
    char *dir = tu_mkdtemp("s3mp");
    char *path = tu_path(dir, "big.bin");
    tu_write_file(path, data, n);
    sl_store_opts_t o = {.path_style = -1, .part_size = 5u << 20};
    sl_store_t *st = open_store(b, &o);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put_file(st, "big.bin", path, &e), SL_OK, "%s", e.msg);
    sl_store_info_t info;
    cr_assert_eq(sl_store_stat(st, "big.bin", &info, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(info.size, n);
    cr_assert(strstr(info.etag, "-3\""), "a multipart ETag of 3 parts: %s", info.etag);
    /* Across the first part boundary. */
    uint8_t buf[4096];
    cr_assert_eq(sl_store_read(st, "big.bin", (5u << 20) - 2048, 4096, buf, &e), SL_OK, "%s",
                 e.msg);
    cr_assert_arr_eq(buf, data + (5u << 20) - 2048, 4096);
    sl_store_destroy(st);
    tu_rm_tree(dir);
    free(path);
    free(dir);
    free(data);
}

Test(s3, credentials_from_the_shared_files)
{
    su_env();
    char b[64];
    su_bucket("files", b, sizeof b);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    char *dir = tu_mkdtemp("s3creds");
    char *cred = tu_path(dir, "credentials"), *conf = tu_path(dir, "config");
    char text[800];
    snprintf(text, sizeof text,
             "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
             "[sluice-test]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
             su.key_id, su.secret);
    tu_write_file(cred, text, strlen(text));
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_PROFILE", "sluice-test", 1);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "k", "from-credentials", 16, &e), SL_OK, "%s", e.msg);
    sl_store_destroy(st);

    /* The config file's "[profile NAME]" section, with no credentials file. */
    snprintf(text, sizeof text,
             "[profile other]\nregion = eu-west-1\n[profile sluice-test]\nregion = us-east-1\n"
             "aws_access_key_id=%s\naws_secret_access_key=%s\n",
             su.key_id, su.secret);
    tu_write_file(conf, text, strlen(text));
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
    unsetenv("AWS_REGION");
    st = open_store(b, NULL);
    char buf[16];
    cr_assert_eq(sl_store_read(st, "k", 0, 16, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "from-credentials", 16);
    sl_store_destroy(st);

    /* The default profile's wrong keys are refused by the server. */
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    unsetenv("AWS_PROFILE");
    st = open_store(b, NULL);
    cr_assert_eq(sl_store_read(st, "k", 0, 16, buf, &e), SL_ERR_IO);
    cr_assert(strstr(e.msg, "HTTP 403 InvalidAccessKeyId"), "%s", e.msg);
    sl_store_destroy(st);
    tu_rm_tree(dir);
    free(cred);
    free(conf);
    free(dir);
}

Test(s3, endpoint_from_the_environment)
{
    su_env();
    char b[64];
    su_bucket("endpoint", b, sizeof b);
    /* AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL (here a dead port). */
    setenv("AWS_ENDPOINT_URL_S3", su.endpoint, 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    sl_store_t *st = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "k", "s3-specific", 11, &e), SL_OK, "%s", e.msg);
    sl_store_destroy(st);
    /* An explicit endpoint wins over both. */
    setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1", 1);
    sl_store_opts_t o = {.endpoint = su.endpoint, .path_style = -1};
    st = open_store(b, &o);
    char buf[11];
    cr_assert_eq(sl_store_read(st, "k", 0, 11, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "s3-specific", 11);
    sl_store_destroy(st);
    /* Not a URL: refused at open, naming it. */
    setenv("AWS_ENDPOINT_URL_S3", "minio:9000", 1);
    char url[100];
    snprintf(url, sizeof url, "s3://%s/k", b);
    cr_assert_eq(sl_store_open_url(url, NULL, &st, NULL, &e), SL_ERR_INVALID);
    cr_assert_str_eq(e.msg, "S3 endpoint 'minio:9000' is not an http:// or https:// URL");
}

/* ---- through the fault proxy ---- */

static sl_store_t *via_proxy(su_proxy_t *p, const char *bucket, uint32_t attempts)
{
    char ep[64];
    /* localhost: the server's virtual host (ops/s3proxy), passed on as
     * the Host header. */
    snprintf(ep, sizeof ep, "http://localhost:%u", p->port);
    sl_store_opts_t o = {.endpoint = ep,
                         .path_style = -1,
                         .max_attempts = attempts,
                         .backoff_base_ms = 20,
                         .backoff_max_ms = 200,
                         .request_timeout_ms = 1500,
                         .connect_timeout_ms = 1000};
    return open_store(bucket, &o);
}

Test(s3, slowdown_storm_and_resets_are_retried)
{
    su_env();
    char b[64];
    su_bucket("storm", b, sizeof b);
    sl_store_t *direct = open_store(b, NULL);
    sl_error_t e = {0};
    uint8_t *data = random_bytes(1 << 20, tu_seed("s3_storm"));
    cr_assert_eq(sl_store_put(direct, "obj", data, 1 << 20, &e), SL_OK, "%s", e.msg);
    sl_store_destroy(direct);

    su_proxy_t p;
    su_proxy_start(&p, su.port);
    sl_store_t *st = via_proxy(&p, b, 5);
    /* 4 SlowDowns then the answer: within 5 attempts. */
    pthread_mutex_lock(&p.mu);
    p.slowdowns = 4;
    pthread_mutex_unlock(&p.mu);
    uint8_t buf[4096];
    cr_assert_eq(sl_store_read(st, "obj", 4096, 4096, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, data + 4096, 4096);
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.requests, 5);
    cr_assert_eq(s.retries, 4);
    cr_assert_eq(s.by_result[SL_STORE_SERVER_ERROR], 4);
    cr_assert_eq(s.by_result[SL_STORE_OK], 1);
    cr_assert_eq(s.inflight_bytes, 0);
    cr_assert_eq(su_proxy_count(&p, NULL), 5);

    /* Resets, then a stat and 16 parallel ranges through a storm of 10
     * SlowDowns and 3 resets shared among them. */
    pthread_mutex_lock(&p.mu);
    p.resets = 2;
    pthread_mutex_unlock(&p.mu);
    sl_store_info_t info;
    cr_assert_eq(sl_store_stat(st, "obj", &info, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(info.size, 1 << 20);
    pthread_mutex_lock(&p.mu);
    p.resets = 3;
    p.slowdowns = 10;
    pthread_mutex_unlock(&p.mu);
    enum { R = 16, L = 65536 };
    sl_store_range_t r[R];
    uint8_t *out = malloc(R * L);
    for (int i = 0; i < R; i++)
        r[i] = (sl_store_range_t){
            .key = "obj", .offset = (uint64_t)i * L, .len = L, .buf = out + i * L};
    sl_store_stats(st, &s);
    uint64_t before = s.retries;
    cr_assert_eq(sl_store_read_many(st, r, R, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(out, data, R * L);
    sl_store_stats(st, &s);
    cr_assert_eq(s.retries - before, 13, "every fault retried once: %llu",
                 (unsigned long long)(s.retries - before));
    /* 2 + 3 resets, 4 + 10 SlowDowns, 1 + 1 + 16 answers. */
    cr_assert_eq(s.by_result[SL_STORE_NETWORK_ERROR], 5);
    cr_assert_eq(s.by_result[SL_STORE_SERVER_ERROR], 14);
    cr_assert_eq(s.by_result[SL_STORE_OK], 18);
    cr_assert_eq(s.by_result[SL_STORE_CLIENT_ERROR], 0);
    sl_store_destroy(st);
    su_proxy_stop(&p);
    free(out);
    free(data);
}

Test(s3, permanent_slowdown_fails_after_the_cap)
{
    char url[100];
    su_env();
    char b[64];
    su_bucket("cap", b, sizeof b);
    su_proxy_t p;
    su_proxy_start(&p, su.port);
    p.slowdown_all = true;
    sl_store_t *st = via_proxy(&p, b, 4);
    sl_error_t e = {0};
    char buf[8];
    cr_assert_eq(sl_store_read(st, "obj", 0, 8, buf, &e), SL_ERR_IO);
    char want[200];
    snprintf(want, sizeof want,
             "after 4 attempts: s3://%s/obj: GET bytes=0-7: HTTP 503 SlowDown: Please reduce "
             "your request rate.",
             b);
    cr_assert_str_eq(e.msg, want);
    cr_assert_eq(su_proxy_count(&p, NULL), 4);
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.requests, 4);
    cr_assert_eq(s.retries, 3);
    cr_assert_eq(s.failures, 1);
    /* The same as Prometheus text. */
    sl_prom_t pt;
    sl_prom_init(&pt, NULL);
    char lab[128];
    snprintf(url, sizeof url, "s3://%s", b);
    sl_store_prom(st, &pt, sl_prom_label(lab, sizeof lab, "store", url));
    char *text = sl_prom_finish(&pt);
    char line[300];
    snprintf(line, sizeof line,
             "sluice_store_requests_total{store=\"s3://%s\",result=\"server_error\"} 4\n", b);
    cr_assert(strstr(text, line), "%s", text);
    snprintf(line, sizeof line, "sluice_store_retries_total{store=\"s3://%s\"} 3\n", b);
    cr_assert(strstr(text, line), "%s", text);
    snprintf(line, sizeof line,
             "sluice_store_request_seconds_count{store=\"s3://%s\",op=\"get\"} 4\n", b);
    cr_assert(strstr(text, line), "%s", text);
    cr_assert_null(strstr(text, su.secret));
    sl_strfree(NULL, text);
    sl_store_destroy(st);
    su_proxy_stop(&p);
}

Test(s3, slow_answers_time_out_and_are_retried)
{
    su_env();
    char b[64];
    su_bucket("slow", b, sizeof b);
    sl_store_t *direct = open_store(b, NULL);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(direct, "obj", "0123456789", 10, &e), SL_OK, "%s", e.msg);
    sl_store_destroy(direct);
    su_proxy_t p;
    su_proxy_start(&p, su.port);
    p.delays = 1;
    p.delay_ms = 3000; /* past the 1.5 s request timeout */
    sl_store_t *st = via_proxy(&p, b, 3);
    char buf[4];
    cr_assert_eq(sl_store_read(st, "obj", 3, 4, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "3456", 4);
    sl_store_stats_t s;
    sl_store_stats(st, &s);
    cr_assert_eq(s.retries, 1);
    sl_store_destroy(st);
    su_proxy_stop(&p);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}

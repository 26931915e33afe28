/* The local-file store (src/store/local.c) and the interface's checks:
 * URLs to roots and keys, listing in key order under a prefix, stat and
 * its ETag, exact ranges, many ranges, writes, keys that would leave the
 * root. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mem.h"
#include "store/store.h"
#include "testutil.h"

static char *root;

static void setup(void)
{
    root = tu_mkdtemp("store_local");
}

static void teardown(void)
{
    tu_rm_tree(root);
    free(root);
}

TestSuite(store_local, .init = setup, .fini = teardown);

static sl_store_t *open_root(void)
{
    sl_store_t *st = NULL;
    char *key = NULL;
    sl_error_t e = {0};
    cr_assert_eq(sl_store_open_url(root, NULL, &st, &key, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(key, "");
    cr_assert_str_eq(sl_store_root(st), root);
    sl_strfree(NULL, key);
    return st;
}

typedef struct seen {
    char keys[16][64];
    uint64_t sizes[16];
    int n;
} seen_t;

static sl_err_t collect(void *ctx, const char *key, const sl_store_info_t *info)
{
    seen_t *s = ctx;
    cr_assert_lt(s->n, 16);
    snprintf(s->keys[s->n], 64, "%s", key);
    s->sizes[s->n++] = info->size;
    return SL_OK;
}

Test(store_local, put_list_stat_read)
{
    sl_store_t *st = open_root();
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "ds=2/b.bin", "bbbb", 4, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_put(st, "ds=1/a.bin", "0123456789", 10, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_put(st, "ds=10/c.bin", "c", 1, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_put(st, "top.bin", "", 0, &e), SL_OK, "%s", e.msg);
    seen_t s = {0};
    cr_assert_eq(sl_store_list(st, "", collect, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 4);
    cr_assert_str_eq(s.keys[0], "ds=1/a.bin");
    cr_assert_str_eq(s.keys[1], "ds=10/c.bin");
    cr_assert_str_eq(s.keys[2], "ds=2/b.bin");
    cr_assert_str_eq(s.keys[3], "top.bin");
    cr_assert_eq(s.sizes[0], 10);
    s = (seen_t){0};
    cr_assert_eq(sl_store_list(st, "ds=1", collect, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 2); /* ds=1/ and ds=10/, as S3 prefixes go */
    s = (seen_t){0};
    cr_assert_eq(sl_store_list(st, "ds=1/", collect, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    s = (seen_t){0};
    cr_assert_eq(sl_store_list(st, "nothing/", collect, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 0);

    sl_store_info_t info;
    cr_assert_eq(sl_store_stat(st, "ds=1/a.bin", &info, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(info.size, 10);
    cr_assert_eq(info.etag[0], '"');
    char etag_a[128];
    snprintf(etag_a, sizeof etag_a, "%s", info.etag);
    char buf[10];
    cr_assert_eq(sl_store_read(st, "ds=1/a.bin", 3, 5, buf, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(buf, "34567", 5);
    cr_assert_eq(sl_store_read(st, "ds=1/a.bin", 8, 5, buf, &e), SL_ERR_TRUNCATED);
    char want[600];
    snprintf(want, sizeof want, "%s/ds=1/a.bin: ends at 10, inside the range [8, 13)", root);
    cr_assert_str_eq(e.msg, want);
    cr_assert_eq(sl_store_stat(st, "ds=1/none", &info, &e), SL_ERR_NOT_FOUND);
    cr_assert(strstr(e.msg, "ds=1/none"), "%s", e.msg);

    /* Many ranges: each gets its own result. */
    char b1[4], b2[4], b3[4];
    sl_store_range_t r[3] = {
        {.key = "ds=1/a.bin", .offset = 0, .len = 4, .buf = b1},
        {.key = "ds=2/b.bin", .offset = 0, .len = 4, .buf = b2, .if_match = etag_a},
        {.key = "ds=1/a.bin", .offset = 6, .len = 4, .buf = b3, .if_match = etag_a},
    };
    cr_assert_eq(sl_store_read_many(st, r, 3, &e), SL_ERR_VERSION, "b.bin's ETag is not a.bin's");
    cr_assert_eq(r[0].result, SL_OK);
    cr_assert_eq(r[1].result, SL_ERR_VERSION);
    cr_assert_eq(r[2].result, SL_OK);
    cr_assert_arr_eq(b1, "0123", 4);
    cr_assert_arr_eq(b3, "6789", 4);
    sl_store_stats_t stats;
    sl_store_stats(st, &stats);
    cr_assert_eq(stats.bytes_written, 15);
    sl_store_destroy(st);
}

Test(store_local, a_file_url_and_its_key)
{
    char *path = tu_path(root, "x.bin");
    tu_write_file(path, "xyz", 3);
    char url[600];
    snprintf(url, sizeof url, "file://%s", path);
    sl_store_t *st = NULL;
    char *key = NULL;
    sl_error_t e = {0};
    cr_assert_eq(sl_store_open_url(url, NULL, &st, &key, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(key, "x.bin");
    cr_assert_str_eq(sl_store_root(st), root);
    char b[3];
    cr_assert_eq(sl_store_read(st, key, 0, 3, b, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(b, "xyz", 3);
    cr_assert(!sl_store_is_remote(url));
    cr_assert(sl_store_is_remote("s3://bucket/key"));
    sl_strfree(NULL, key);
    sl_store_destroy(st);
    free(path);
}

Test(store_local, bad_keys_and_urls_are_refused)
{
    sl_store_t *st = open_root();
    sl_error_t e = {0};
    char b[1];
    cr_assert_eq(sl_store_read(st, "../etc/passwd", 0, 1, b, &e), SL_ERR_INVALID);
    cr_assert(strstr(e.msg, "key '../etc/passwd' has a '.' or '..' segment"), "%s", e.msg);
    cr_assert_eq(sl_store_put(st, "a/./b", "x", 1, &e), SL_ERR_INVALID);
    cr_assert_eq(sl_store_stat(st, "/abs", &(sl_store_info_t){0}, &e), SL_ERR_INVALID);
    cr_assert(strstr(e.msg, "key '/abs' starts with '/'"), "%s", e.msg);
    cr_assert_eq(sl_store_stat(st, "", &(sl_store_info_t){0}, &e), SL_ERR_INVALID);
    sl_store_destroy(st);

    sl_store_t *s2 = NULL;
    cr_assert_eq(sl_store_open_url("gs://bucket/x", NULL, &s2, NULL, &e), SL_ERR_UNSUPPORTED);
    cr_assert_str_eq(e.msg, "gs://bucket/x: an unknown URL scheme (s3://, file:// or a path)");
    cr_assert_eq(sl_store_open_url("s3://ab/x", NULL, &s2, NULL, &e), SL_ERR_INVALID);
    cr_assert_str_eq(e.msg, "s3://ab/x: a bucket name of 2 characters (3-63)");
    cr_assert_eq(sl_store_open_url("s3://a*b/x", NULL, &s2, NULL, &e), SL_ERR_INVALID);
    cr_assert_str_eq(e.msg, "s3://a*b/x: '*' in the bucket name");
    cr_assert_eq(sl_store_open_url("", NULL, &s2, NULL, &e), SL_ERR_INVALID);
    cr_assert_null(s2);
}

Test(store_local, put_file_replaces_whole)
{
    sl_store_t *st = open_root();
    char *src = tu_path(root, "src.txt");
    tu_write_file(src, "new contents", 12);
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "out/obj", "old", 3, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_put_file(st, "out/obj", src, &e), SL_OK, "%s", e.msg);
    char b[12];
    cr_assert_eq(sl_store_read(st, "out/obj", 0, 12, b, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(b, "new contents", 12);
    cr_assert_eq(sl_store_put_file(st, "out/x", "/nonexistent/file", &e), SL_ERR_NOT_FOUND);
    sl_store_destroy(st);
    free(src);
}

Test(store_local, a_pinned_object_as_a_byte_source)
{
    sl_store_t *st = open_root();
    sl_error_t e = {0};
    cr_assert_eq(sl_store_put(st, "f.bin", "abcdefgh", 8, &e), SL_OK, "%s", e.msg);
    sl_store_object_t *o = NULL;
    cr_assert_eq(sl_store_object_open(st, "f.bin", &o, &e), SL_OK, "%s", e.msg);
    uint64_t size = 0;
    cr_assert_eq(sl_store_object_size(o, &size, &e), SL_OK);
    cr_assert_eq(size, 8);
    char b[4];
    cr_assert_eq(sl_store_object_read_at(o, 4, 4, b, &e), SL_OK, "%s", e.msg);
    cr_assert_arr_eq(b, "efgh", 4);
    cr_assert_eq(sl_store_object_read_at(o, 6, 4, b, &e), SL_ERR_TRUNCATED);
    char want[600];
    snprintf(want, sizeof want, "%s/f.bin: bytes [6, 10) past its end at 8", root);
    cr_assert_str_eq(e.msg, want);
    /* Replaced (another size, so another ETag): the pinned reads fail. */
    cr_assert_eq(sl_store_put(st, "f.bin", "ABCDEFGHIJ", 10, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_object_read_at(o, 0, 4, b, &e), SL_ERR_VERSION);
    cr_assert(strstr(e.msg, "f.bin: replaced"), "%s", e.msg);
    sl_store_object_destroy(o);
    cr_assert_eq(sl_store_object_open(st, "none", &o, &e), SL_ERR_NOT_FOUND);
    cr_assert_null(o);
    sl_store_destroy(st);
}

Test(store_local, what_the_file_system_refuses_is_named)
{
    sl_store_t *st = open_root();
    sl_error_t e = {0};
    char want[1200], b[8];
    cr_assert_eq(sl_store_put(st, "f.bin", "abcdefgh", 8, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_put(st, "d/g.bin", "g", 1, &e), SL_OK, "%s", e.msg);
    /* A directory is not an object. */
    cr_assert_eq(sl_store_stat(st, "d", &(sl_store_info_t){0}, &e), SL_ERR_NOT_FOUND);
    snprintf(want, sizeof want, "%s/d: not a file", root);
    cr_assert_str_eq(e.msg, want);
    cr_assert_eq(sl_store_read(st, "d", 0, 1, b, &e), SL_ERR_IO);
    snprintf(want, sizeof want, "%s/d: read at 0: Is a directory", root);
    cr_assert_str_eq(e.msg, want);
    cr_assert_eq(sl_store_read(st, "none", 0, 1, b, &e), SL_ERR_NOT_FOUND);
    snprintf(want, sizeof want, "%s/none: No such file or directory", root);
    cr_assert_str_eq(e.msg, want);
    /* A file where a directory of the key would go. */
    cr_assert_eq(sl_store_put(st, "f.bin/y/x", "x", 1, &e), SL_ERR_IO);
    snprintf(want, sizeof want, "%s: mkdir: Not a directory", root);
    cr_assert_str_eq(e.msg, want);
    /* Keys and ranges checked before the disk is asked. */
    char key[1100];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    cr_assert_eq(sl_store_put(st, key, "x", 1, &e), SL_ERR_INVALID);
    snprintf(want, sizeof want, "%s: key of 1099 bytes (at most 1024)", root);
    cr_assert_str_eq(e.msg, want);
    cr_assert_eq(sl_store_read(st, "f.bin", UINT64_MAX - 1, 4, b, &e), SL_ERR_INVALID);
    snprintf(want, sizeof want, "%s/f.bin: range at 18446744073709551614 overflows", root);
    cr_assert_str_eq(e.msg, want);
    cr_assert_eq(sl_store_list(st, "/d", collect, &(seen_t){0}, &e), SL_ERR_INVALID);

    /* A link loop ends at the depth bound, named. */
    char *loop = tu_path(root, "d/loop");
    cr_assert_eq(symlink("..", loop), 0);
    seen_t s = {0};
    cr_assert_eq(sl_store_list(st, "d/", collect, &s, &e), SL_ERR_INVALID);
    cr_assert(strstr(e.msg, "/d/loop/d/loop/d/") &&
                  strstr(e.msg, ": directories nested over 64 deep"),
              "%s", e.msg);
    sl_store_destroy(st);
    free(loop);
}

Test(store_local, roots_that_are_not_yet_or_not_directories)
{
    /* A root that does not exist yet lists as empty, and a put makes it. */
    char *dir = tu_path(root, "later"), *url = tu_path(dir, "obj");
    sl_store_t *st = NULL;
    char *key = NULL;
    sl_error_t e = {0};
    cr_assert_eq(sl_store_open_url(url, NULL, &st, &key, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(sl_store_root(st), dir);
    cr_assert_str_eq(key, "obj");
    seen_t s = {0};
    cr_assert_eq(sl_store_list(st, "", collect, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 0);
    cr_assert_eq(sl_store_put(st, key, "now", 3, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_list(st, "", collect, &s, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.keys[0], "obj");
    sl_strfree(NULL, key);
    sl_store_destroy(st);
    /* A root that became a file: listing it is an error naming it. */
    char *gone = tu_path(root, "gone"), *in_gone = tu_path(gone, "obj");
    cr_assert_eq(sl_store_open_url(in_gone, NULL, &st, NULL, &e), SL_OK, "%s", e.msg);
    tu_write_file(gone, "a file", 6);
    cr_assert_eq(sl_store_list(st, "", collect, &s, &e), SL_ERR_IO);
    char want[700];
    snprintf(want, sizeof want, "%s/: cannot list: Not a directory", gone);
    cr_assert_str_eq(e.msg, want);
    sl_store_destroy(st);
    free(gone);
    free(in_gone);
    /* A bare name is a key in the working directory. */
    cr_assert_eq(sl_store_open_url("no-such-name.bin", NULL, &st, &key, &e), SL_OK, "%s", e.msg);
    cr_assert_str_eq(sl_store_root(st), ".");
    cr_assert_str_eq(key, "no-such-name.bin");
    sl_strfree(NULL, key);
    sl_store_destroy(st);
    free(dir);
    free(url);
}

Test(store_local, counters_add_up)
{
    sl_store_t *st = open_root();
    sl_error_t e = {0};
    char b[2];
    cr_assert_eq(sl_store_put(st, "a", "ab", 2, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_read(st, "a", 0, 2, b, &e), SL_OK, "%s", e.msg);
    cr_assert_eq(sl_store_read(st, "a", 1, 2, b, &e), SL_ERR_TRUNCATED);
    sl_store_stats_t one, sum = {0};
    sl_store_stats(st, &one);
    sl_store_stats_add(&sum, &one);
    sl_store_stats_add(&sum, &one);
    cr_assert_eq(one.requests, 3);
    cr_assert_eq(sum.requests, 6);
    cr_assert_eq(sum.bytes_written, 4);
    cr_assert_eq(sum.bytes_read, 6);
    cr_assert_eq(sum.failures, 2);
    cr_assert_eq(sum.list_pages, 0);
    cr_assert_str_eq(sl_store_op_name(SL_STORE_OP_LIST), "list");
    cr_assert_str_eq(sl_store_op_name(SL_STORE_OPS), "?");
    sl_store_destroy(st);
}

/* Every allocation of each operation fails in turn: an SL_ERR_NOMEM with a
 * message, nothing leaked, and the same store then does it. */
Test(store_local, every_allocation_failure_is_an_error_and_leaks_nothing)
{
    char *src = tu_path(root, "src.txt"), *url = tu_path(root, "data/obj");
    tu_write_file(src, "from a file", 11);
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    sl_store_opts_t o = {.alloc = &ta.base};
    int failed = 0;
    uint64_t k;
    for (k = 1; k < 10000; k++) {
        tu_alloc_fail_at(&ta, k, false);
        sl_store_t *st = NULL;
        char *key = NULL;
        sl_error_t e = {0};
        sl_err_t rc = sl_store_open_url(url, &o, &st, &key, &e);
        if (rc != SL_OK) {
            cr_assert_eq(rc, SL_ERR_NOMEM, "k=%llu: %s", (unsigned long long)k, e.msg);
            cr_assert(strstr(e.msg, "out of memory"), "%s", e.msg);
            cr_assert_null(st);
            tu_alloc_assert_clean(&ta);
            continue;
        }
        for (int op = 0; op < 6; op++) {
            for (int again = 0; again < 2; again++) {
                uint64_t before = tu_alloc_failures(&ta);
                sl_store_info_t info = {0};
                sl_store_object_t *obj = NULL;
                seen_t s = {0};
                char b[11];
                e = (sl_error_t){0};
                switch (op) {
                case 0:
                    rc = sl_store_put(st, key, "0123456789", 10, &e);
                    break;
                case 1:
                    rc = sl_store_put_file(st, "copy", src, &e);
                    break;
                case 2:
                    rc = sl_store_stat(st, key, &info, &e);
                    break;
                case 3:
                    rc = sl_store_read(st, "copy", 0, 11, b, &e);
                    break;
                case 4:
                    rc = sl_store_list(st, "", collect, &s, &e);
                    break;
                default:
                    rc = sl_store_object_open(st, key, &obj, &e);
                    if (rc == SL_OK) {
                        sl_store_object_t *pin = NULL;
                        rc = sl_store_object_pin(st, key, sl_store_object_info(obj), &pin, &e);
                        sl_store_object_destroy(pin);
                    }
                    sl_store_object_destroy(obj);
                }
                if (tu_alloc_failures(&ta) == before) {
                    cr_assert_eq(rc, SL_OK, "k=%llu op %d: %s", (unsigned long long)k, op, e.msg);
                    break;
                }
                cr_assert_eq(rc, SL_ERR_NOMEM, "k=%llu op %d: %s", (unsigned long long)k, op,
                             e.msg);
                cr_assert(strstr(e.msg, "out of memory"), "%s", e.msg);
                cr_assert_eq(again, 0);
                failed++;
            }
        }
        bool done = tu_alloc_failures(&ta) == 0;
        sl_strfree(&ta.base, key);
        sl_store_destroy(st);
        tu_alloc_assert_clean(&ta);
        if (done) break;
    }
    cr_assert_lt(k, 10000);
    cr_assert_gt(failed, 5, "%d operations failed", failed);
    free(src);
    free(url);
}

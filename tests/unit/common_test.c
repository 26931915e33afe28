/* Tests of the shared toolkit of src/common: strings and resizing through
 * an allocator (mem.h), the monotonic clock and timed waits (clock.h),
 * number and size parsers (parse.h), whole-file reads, maps and lines
 * (fileio.h), and log records, levels, formats and the handler
 * (log.h). Allocations go through the counting allocator of testutil.h. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/parse.h"
#include "common/suggest.h"
#include "testutil.h"

/* ---- mem.h ---- */

Test(mem, strings_through_the_allocator)
{
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    const sl_allocator_t *a = &ta.base;
    char *s = sl_strdup(a, "sluice");
    cr_assert_str_eq(s, "sluice");
    char *n = sl_strndup(a, "sluice", 3);
    cr_assert_str_eq(n, "slu");
    char *whole = sl_strndup(a, "ab", 10); /* stops at the NUL */
    cr_assert_str_eq(whole, "ab");
    char *f = sl_strfmt(a, "%s-%03d", "part", 7);
    cr_assert_str_eq(f, "part-007");
    char big[600];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char *g = sl_strfmt(a, "<%s>", big); /* past the stack buffer of the first pass */
    cr_assert_eq(strlen(g), sizeof big + 1);
    cr_assert_eq(g[0], '<');
    cr_assert_eq(g[sizeof big], '>');
    cr_assert_null(sl_strdup(a, NULL));
    cr_assert_null(sl_strndup(a, NULL, 3));
    /* every one freed with its size recovered from its content */
    sl_strfree(a, s);
    sl_strfree(a, n);
    sl_strfree(a, whole);
    sl_strfree(a, f);
    sl_strfree(a, g);
    sl_strfree(a, NULL);
    tu_alloc_assert_clean(&ta);
    /* out of memory: NULL, nothing held */
    tu_alloc_fail_at(&ta, 1, true);
    cr_assert_null(sl_strdup(a, "x"));
    cr_assert_null(sl_strfmt(a, "%d", 1));
    tu_alloc_fail_at(&ta, 0, false);
    tu_alloc_assert_clean(&ta);
}

Test(mem, realloc_keeps_the_prefix_and_the_block_on_failure)
{
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    const sl_allocator_t *a = &ta.base;
    char *p = sl_realloc(a, NULL, 0, 4);
    memcpy(p, "abcd", 4);
    char *q = sl_realloc(a, p, 4, 100);
    cr_assert_eq(memcmp(q, "abcd", 4), 0);
    tu_alloc_fail_at(&ta, 1, false);
    cr_assert_null(sl_realloc(a, q, 100, 200));
    tu_alloc_fail_at(&ta, 0, false);
    cr_assert_eq(memcmp(q, "abcd", 4), 0, "the old block is untouched");
    char *r = sl_realloc(a, q, 100, 2); /* shrinking keeps what fits */
    cr_assert_eq(memcmp(r, "ab", 2), 0);
    cr_assert_null(sl_realloc(a, r, 2, SIZE_MAX));
    sl_free(a, r, 2);
    tu_alloc_assert_clean(&ta);
}

Test(mem, growing_by_doubling_with_a_bound)
{
    /* the capacity: doubled from first until need fits, clamped at max */
    cr_assert_eq(sl_grow_cap(0, 1, 16, SIZE_MAX), 16);
    cr_assert_eq(sl_grow_cap(16, 17, 16, SIZE_MAX), 32);
    cr_assert_eq(sl_grow_cap(16, 100, 16, SIZE_MAX), 128);
    cr_assert_eq(sl_grow_cap(16, 16, 16, SIZE_MAX), 16);
    cr_assert_eq(sl_grow_cap(0, 3, 0, SIZE_MAX), 4); /* first 0: from 1 */
    cr_assert_eq(sl_grow_cap(64, 65, 16, 100), 100);
    cr_assert_eq(sl_grow_cap(64, 101, 16, 100), 0);
    cr_assert_eq(sl_grow_cap(SIZE_MAX / 2 + 1, SIZE_MAX, 1, SIZE_MAX), SIZE_MAX);

    tu_alloc_t ta;
    tu_alloc_init(&ta);
    const sl_allocator_t *a = &ta.base;
    /* an array of uint16_t whose capacity is a uint8_t: its largest value
     * (255) bounds it */
    uint16_t *v = NULL;
    uint8_t cap = 0;
    for (uint32_t i = 0; i < 255; i++) {
        if (i == cap) cr_assert(SL_GROW(a, v, cap, i + 1, 4), "at %u", i);
        v[i] = (uint16_t)(i * 3);
    }
    cr_assert_eq(cap, 255); /* 4, 8, ..., 128, then clamped */
    for (uint32_t i = 0; i < 255; i++)
        cr_assert_eq(v[i], i * 3, "element %u kept", i);
    cr_assert_not(SL_GROW(a, v, cap, 256, 4), "past the type's largest value");
    cr_assert_eq(cap, 255);
    /* out of memory: false, the array and its capacity untouched */
    size_t big = 255;
    tu_alloc_fail_at(&ta, 1, false);
    cr_assert_null(sl_grow(a, v, &big, 300, sizeof *v, 4, SIZE_MAX));
    tu_alloc_fail_at(&ta, 0, false);
    cr_assert_eq(big, 255);
    cr_assert_eq(v[254], 254 * 3);
    cr_assert_eq(sl_grow(a, v, &big, 200, sizeof *v, 4, SIZE_MAX), v, "fits: the same array");
    sl_free(a, v, (size_t)cap * sizeof *v);
    tu_alloc_assert_clean(&ta);
}

Test(mem, unsized_blocks_and_the_failed_flag)
{
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    sl_unsized_t u = {.a = &ta.base};
    void *p = sl_unsized_alloc(&u, 40), *z = sl_unsized_alloc(&u, 0);
    cr_assert_not_null(p);
    cr_assert_not_null(z);
    cr_assert_eq((uintptr_t)p % 16, 0);
    cr_assert(!u.failed);
    tu_alloc_fail_at(&ta, 1, false);
    cr_assert_null(sl_unsized_alloc(&u, 8));
    cr_assert(u.failed, "a failed allocation is remembered");
    cr_assert_null(sl_unsized_alloc(&u, SIZE_MAX - 8));
    tu_alloc_fail_at(&ta, 0, false);
    sl_unsized_free(&u, p);
    sl_unsized_free(&u, z);
    sl_unsized_free(&u, NULL);
    tu_alloc_assert_clean(&ta);
}

/* ---- the counting allocator itself ---- */

Test(testutil, counting_allocator_sees_leaks_and_wrong_sizes)
{
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    char why[256];
    void *p = sl_alloc_aligned(&ta.base, 10, 64);
    cr_assert_eq((uintptr_t)p % 64, 0);
    cr_assert(!tu_alloc_clean(&ta, why, sizeof why));
    cr_assert(strstr(why, "1 block(s) of 10 bytes leaked"), "%s", why);
    sl_free(&ta.base, p, 11);
    cr_assert(!tu_alloc_clean(&ta, why, sizeof why));
    cr_assert(strstr(why, "freed with size 11, allocated 10"), "%s", why);
    /* the k-th fails, and with and_after every later one */
    tu_alloc_t tb;
    tu_alloc_init(&tb);
    tu_alloc_fail_at(&tb, 2, true);
    void *a = sl_alloc(&tb.base, 1), *b = sl_alloc(&tb.base, 1), *c = sl_alloc(&tb.base, 1);
    cr_assert_not_null(a);
    cr_assert_null(b);
    cr_assert_null(c);
    cr_assert_eq(tu_alloc_calls(&tb), 3);
    cr_assert_eq(tu_alloc_failures(&tb), 2);
    sl_free(&tb.base, a, 1);
    tu_alloc_assert_clean(&tb);
}

/* ---- clock.h ---- */

Test(clock, monotonic_units_and_timed_waits)
{
    uint64_t ns = sl_clock_ns(), ms = sl_clock_ms();
    double s = sl_clock_s();
    cr_assert_leq(ms, sl_clock_ns() / 1000000u);
    cr_assert_leq(ns / 1000000u, ms);
    cr_assert(s >= (double)ns * 1e-9 - 1e-3);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    cr_assert_eq(sl_clock_cond_init(&cv), 0);
    pthread_mutex_lock(&mu);
    uint64_t t0 = sl_clock_ns();
    int rc;
    do /* spurious wake-ups wait again */
        rc = sl_clock_cond_wait_ms(&cv, &mu, 30);
    while (rc != ETIMEDOUT);
    uint64_t waited = sl_clock_ns() - t0;
    pthread_mutex_unlock(&mu);
    cr_assert_geq(waited, 29000000u, "waited %llu ns", (unsigned long long)waited);
    cr_assert_lt(waited, (uint64_t)(tu_timeout(2) * 1e9));
    struct timespec d = sl_clock_deadline_ms(1500);
    uint64_t at = (uint64_t)d.tv_sec * 1000000000ull + (uint64_t)d.tv_nsec;
    cr_assert_geq(at, t0 + 1500000000ull);
    cr_assert_lt(d.tv_nsec, 1000000000L);
    /* a deadline past what time_t holds is far away, never in the past */
    d = sl_clock_deadline_ms(UINT64_MAX);
    cr_assert_gt(d.tv_sec, (time_t)(sl_clock_ns() / 1000000000ull) + 1000000);
    cr_assert_gt(sl_clock_thread_cpu_ns(), 0);
    pthread_cond_destroy(&cv);
}

/* ---- parse.h ---- */

Test(parse, whole_numbers_in_range_with_clear_errors)
{
    uint64_t v = 99;
    sl_error_t err = {0};
    cr_assert_eq(sl_parse_u64("0", 0, 10, &v, "--n", &err), SL_OK);
    cr_assert_eq(v, 0);
    cr_assert_eq(sl_parse_u64("18446744073709551615", 0, UINT64_MAX, &v, "--n", &err), SL_OK);
    cr_assert_eq(v, UINT64_MAX);
    static const char *bad[] = {"", " 1", "1 ", "+1", "-1", "1x", "0x10", "1e3", "１"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = 7;
        cr_assert_eq(sl_parse_u64(bad[i], 0, UINT64_MAX, &v, "--n", &err), SL_ERR_INVALID, "'%s'",
                     bad[i]);
        cr_assert_eq(v, 7, "'%s' changed the output", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "--n '%s': not a whole number", bad[i]);
        cr_assert(strstr(err.msg, want) == err.msg, "%s", err.msg);
    }
    cr_assert_eq(sl_parse_u64("18446744073709551616", 0, UINT64_MAX, &v, "--n", &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "--n '18446744073709551616': out of range 0..18446744073709551615");
    cr_assert_eq(sl_parse_u64("11", 1, 10, &v, "--threads", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "--threads '11': out of range 1..10");
    cr_assert_eq(sl_parse_u64(NULL, 0, 1, &v, NULL, &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "value '(none)': not a whole number (decimal digits only)");
    cr_assert_eq(sl_parse_u64("5", 0, 9, &v, NULL, NULL), SL_OK, "err may be NULL");
    uint32_t u;
    cr_assert_eq(sl_parse_u32("4294967295", 0, UINT32_MAX, &u, "x", &err), SL_OK);
    cr_assert_eq(u, UINT32_MAX);
    cr_assert_eq(sl_parse_u32("4294967296", 0, UINT32_MAX, &u, "x", &err), SL_ERR_INVALID);
    int64_t i;
    cr_assert_eq(sl_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &i, "x", &err), SL_OK);
    cr_assert_eq(i, INT64_MIN);
    cr_assert_eq(sl_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &i, "x", &err),
                 SL_ERR_INVALID);
    cr_assert_eq(sl_parse_i64("-3", -2, 2, &i, "x", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "x '-3': out of range -2..2");
    cr_assert_eq(sl_parse_i64("-", INT64_MIN, INT64_MAX, &i, "x", &err), SL_ERR_INVALID);
}

Test(parse, sizes_with_binary_units)
{
    static const struct {
        const char *text;
        uint64_t want;
    } ok[] = {{"0", 0},
              {"4096", 4096},
              {"64K", 64ull << 10},
              {"64k", 64ull << 10},
              {"64KB", 64ull << 10},
              {"64KiB", 64ull << 10},
              {"256M", 256ull << 20},
              {"256MiB", 256ull << 20},
              {"2G", 2ull << 30},
              {"2gb", 2ull << 30},
              {"1T", 1ull << 40},
              {"7B", 7}};
    sl_error_t err = {0};
    for (size_t k = 0; k < sizeof ok / sizeof *ok; k++) {
        uint64_t v = 1;
        cr_assert_eq(sl_parse_size(ok[k].text, 0, UINT64_MAX, &v, "--memory-limit", &err), SL_OK,
                     "%s: %s", ok[k].text, err.msg);
        cr_assert_eq(v, ok[k].want, "%s", ok[k].text);
    }
    static const char *bad[] = {"", "M", "64X", "64Mi", "64 M", "-1M", "64MiBs", "1.5G"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        uint64_t v = 3;
        cr_assert_eq(sl_parse_size(bad[k], 0, UINT64_MAX, &v, "--memory-limit", &err),
                     SL_ERR_INVALID, "'%s'", bad[k]);
        cr_assert_eq(v, 3);
        cr_assert(strstr(err.msg, "not a size (bytes, or a number with K, M, G or T: 64MiB)"), "%s",
                  err.msg);
    }
    uint64_t v;
    cr_assert_eq(sl_parse_size("16777216T", 0, UINT64_MAX, &v, "--memory-limit", &err),
                 SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "--memory-limit '16777216T': past 2^64 bytes");
    cr_assert_eq(sl_parse_size("0", 1, UINT64_MAX, &v, "--memory-limit", &err), SL_ERR_INVALID);
    cr_assert_str_eq(err.msg, "--memory-limit '0': out of range 1..18446744073709551615");
}

/* ---- fileio.h ---- */

Test(fileio, whole_file_reads_and_maps)
{
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    char *dir = tu_mkdtemp("fileio");
    char *p = tu_path(dir, "f"), *empty = tu_path(dir, "empty"), *nul = tu_path(dir, "nul");
    char *missing = tu_path(dir, "missing");
    static char big[100000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)('a' + i % 26);
    tu_write_file(p, big, sizeof big);
    tu_write_file(empty, "", 0);
    tu_write_file(nul, "a\0b", 3);
    char *data;
    size_t len;
    sl_error_t err = {0};
    cr_assert_eq(sl_io_read_file(p, "spec", sizeof big, &ta.base, &data, &len, &err), SL_OK, "%s",
                 err.msg);
    cr_assert_eq(len, sizeof big);
    cr_assert_eq(memcmp(data, big, len), 0);
    cr_assert_eq(data[len], '\0');
    sl_free(&ta.base, data, len + 1);
    cr_assert_eq(sl_io_read_file(p, "spec", sizeof big - 1, &ta.base, &data, &len, &err),
                 SL_ERR_TOO_LARGE);
    cr_assert(strstr(err.msg, "spec ") && strstr(err.msg, ": over 99999 bytes"), "%s", err.msg);
    cr_assert_null(data);
    cr_assert_eq(sl_io_read_file(empty, "spec", 10, &ta.base, &data, &len, &err), SL_OK);
    cr_assert_eq(len, 0);
    cr_assert_str_eq(data, "");
    sl_free(&ta.base, data, 1);
    cr_assert_eq(sl_io_read_file(nul, NULL, 10, &ta.base, &data, &len, &err), SL_OK);
    cr_assert_eq(len, 3, "bytes as they are, NULs included");
    sl_free(&ta.base, data, len + 1);
    cr_assert_eq(sl_io_read_file(missing, "job spec", 10, &ta.base, &data, &len, &err),
                 SL_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "job spec ") && strstr(err.msg, "No such file"), "%s", err.msg);
    /* /proc files say 0 bytes and hold more: read to the end */
    cr_assert_eq(
        sl_io_read_file("/proc/self/status", "status", 1 << 20, &ta.base, &data, &len, &err), SL_OK,
        "%s", err.msg);
    cr_assert(strstr(data, "Name:") == data, "%.40s", data);
    sl_free(&ta.base, data, len + 1);
    tu_alloc_fail_at(&ta, 1, true);
    cr_assert_eq(sl_io_read_file(p, "spec", sizeof big, &ta.base, &data, &len, &err), SL_ERR_NOMEM);
    tu_alloc_fail_at(&ta, 0, false);

    sl_io_map_t m;
    cr_assert_eq(sl_io_map_file(p, "journal", &m, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(m.len, sizeof big);
    cr_assert_eq(memcmp(m.data, big, m.len), 0);
    sl_io_unmap(&m);
    cr_assert_null(m.data);
    cr_assert_eq(sl_io_map_file(empty, "journal", &m, &err), SL_OK);
    cr_assert_eq(m.len, 0);
    cr_assert_not_null(m.data);
    sl_io_unmap(&m);
    cr_assert_eq(sl_io_map_file(missing, "journal", &m, &err), SL_ERR_NOT_FOUND);
    cr_assert_null(m.data);
    sl_io_unmap(&m);
    tu_alloc_assert_clean(&ta);
    free(p);
    free(empty);
    free(nul);
    free(missing);
    tu_rm_tree(dir);
    free(dir);
}

Test(fileio, lines_through_the_allocator)
{
    tu_alloc_t ta;
    tu_alloc_init(&ta);
    char *dir = tu_mkdtemp("fileio");
    char *p = tu_path(dir, "lines");
    char text[700];
    int n = snprintf(text, sizeof text, "one\n\nthree\r\n%0300d\nlast", 7);
    tu_write_file(p, text, (size_t)n);
    FILE *f = fopen(p, "rb");
    char *line = NULL;
    size_t cap = 0, len;
    sl_error_t err = {0};
    const char *want[] = {"one", "", "three\r"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sl_io_read_line(f, "lines", 100, &ta.base, &line, &cap, &len, &err), SL_OK);
        cr_assert_str_eq(line, want[i]);
        cr_assert_eq(len, strlen(want[i]));
    }
    /* over max: consumed and refused; the next line is read as usual */
    cr_assert_eq(sl_io_read_line(f, "lines", 100, &ta.base, &line, &cap, &len, &err),
                 SL_ERR_TOO_LARGE);
    cr_assert_str_eq(err.msg, "lines: a line over 100 bytes");
    cr_assert_eq(sl_io_read_line(f, "lines", 100, &ta.base, &line, &cap, &len, &err), SL_OK);
    cr_assert_str_eq(line, "last", "the last line needs no newline");
    cr_assert_eq(sl_io_read_line(f, "lines", 100, &ta.base, &line, &cap, &len, &err),
                 SL_ERR_CLOSED);
    fclose(f);
    sl_free(&ta.base, line, cap);
    /* out of memory for the buffer */
    f = fopen(p, "rb");
    line = NULL;
    cap = 0;
    tu_alloc_fail_at(&ta, 1, false);
    cr_assert_eq(sl_io_read_line(f, "lines", 100, &ta.base, &line, &cap, &len, &err), SL_ERR_NOMEM);
    tu_alloc_fail_at(&ta, 0, false);
    fclose(f);
    cr_assert_null(line);
    tu_alloc_assert_clean(&ta);
    free(p);
    tu_rm_tree(dir);
    free(dir);
}

/* ---- log.h ---- */

typedef struct captured {
    int n;
    sl_log_level_t level;
    char event[64], text[512], logfmt[512];
} captured;

static void capture(void *ctx, const sl_log_record_t *rec)
{
    captured *c = ctx;
    c->n++;
    c->level = rec->level;
    snprintf(c->event, sizeof c->event, "%s", rec->event);
    sl_log_format(rec, SL_LOG_TEXT, c->text, sizeof c->text);
    sl_log_format(rec, SL_LOG_LOGFMT, c->logfmt, sizeof c->logfmt);
}

static int evaluated;

static const char *side_effect(void)
{
    evaluated++;
    return "x";
}

Test(log, records_levels_fields_and_formats)
{
    captured c = {0};
    sl_log_set_handler(capture, &c);
    sl_log_set_level(SL_LOG_INFO);
    sl_log(SL_LOG_WARN, "journal_tail_cut", "journal %s: cut %d bytes", "/s/journal", 21);
    cr_assert_eq(c.n, 1);
    cr_assert_eq(c.level, SL_LOG_WARN);
    cr_assert_str_eq(c.event, "journal_tail_cut");
    cr_assert_str_eq(c.text, "journal /s/journal: cut 21 bytes");
    cr_assert_str_eq(c.logfmt,
                     "level=warn event=journal_tail_cut msg=\"journal /s/journal: cut 21 bytes\"");
    sl_log_kv(SL_LOG_INFO, "lease_expired",
              (SL_KV_STR("job", "clicks"), SL_KV_U64("split", 7), SL_KV_I64("stripe", -1),
               SL_KV_F64("busy", 0.5), SL_KV_STR("why", "a \"quoted\"\nline"),
               SL_KV_STR("empty", ""), SL_KV_STR("none", NULL)),
              "job %s split %d: lease expired", "clicks", 7);
    cr_assert_eq(c.n, 2);
    cr_assert_str_eq(c.text, "job clicks split 7: lease expired");
    cr_assert_str_eq(c.logfmt, "level=info event=lease_expired msg=\"job clicks split 7: lease "
                               "expired\" job=clicks split=7 stripe=-1 busy=0.5 "
                               "why=\"a \\\"quoted\\\"\\nline\" empty=\"\" none=\"\"");
    /* a level that is off makes no record and evaluates no argument */
    evaluated = 0;
    sl_log(SL_LOG_DEBUG, "detail", "%s", side_effect());
    sl_log_kv(SL_LOG_DEBUG, "detail", (SL_KV_STR("k", side_effect())), "m");
    cr_assert_eq(c.n, 2);
    cr_assert_eq(evaluated, 0);
    cr_assert(!sl_log_enabled(SL_LOG_DEBUG));
    sl_log_set_level(SL_LOG_DEBUG);
    sl_log(SL_LOG_DEBUG, "detail", "%s", side_effect());
    cr_assert_eq(c.n, 3);
    cr_assert_eq(evaluated, 1);
    /* levels by name */
    sl_log_level_t l;
    cr_assert(sl_log_level_parse("warn", &l) && l == SL_LOG_WARN);
    cr_assert(!sl_log_level_parse("verbose", &l));
    cr_assert_str_eq(sl_log_level_name(SL_LOG_ERROR), "error");
    /* the default handler drops records */
    sl_log_set_handler(NULL, NULL);
    sl_log(SL_LOG_ERROR, "dropped", "nobody hears this");
    cr_assert_eq(c.n, 3);
}

Test(log, lines_cut_short_and_control_bytes)
{
    sl_log_kv_t kv[1] = {SL_KV_STR("k", "\x01\t")};
    sl_log_record_t rec = {SL_LOG_ERROR, "e", "0123456789", kv, 1};
    char small[12];
    size_t need = sl_log_format(&rec, SL_LOG_LOGFMT, small, sizeof small);
    cr_assert_eq(need, strlen("level=error event=e msg=0123456789 k=\"\\u0001\\t\""));
    cr_assert_str_eq(small, "level=error");
    char full[128];
    sl_log_format(&rec, SL_LOG_LOGFMT, full, sizeof full);
    cr_assert_str_eq(full, "level=error event=e msg=0123456789 k=\"\\u0001\\t\"");
    cr_assert_eq(sl_log_format(&rec, SL_LOG_TEXT, NULL, 0), 10);
    /* with no message, TEXT is the event and its fields as logfmt */
    rec.message = "";
    sl_log_format(&rec, SL_LOG_TEXT, full, sizeof full);
    cr_assert_str_eq(full, "event=e k=\"\\u0001\\t\"");
}

/* Records from many threads reach the handler one at a time. */
typedef struct counting {
    pthread_mutex_t mu;
    int inside, max_inside, n;
} counting;

static void count_record(void *ctx, const sl_log_record_t *rec)
{
    counting *c = ctx;
    (void)rec;
    int now = __atomic_add_fetch(&c->inside, 1, __ATOMIC_SEQ_CST);
    if (now > c->max_inside) c->max_inside = now;
    c->n++; /* unlocked on purpose: the handler's calls are serialised */
    __atomic_sub_fetch(&c->inside, 1, __ATOMIC_SEQ_CST);
}

static void *log_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++)
        sl_log_kv(SL_LOG_INFO, "tick", (SL_KV_U64("i", i)), "tick %d", i);
    return NULL;
}

Test(log, handler_calls_are_serialised)
{
    counting c = {.mu = PTHREAD_MUTEX_INITIALIZER};
    sl_log_set_level(SL_LOG_INFO);
    sl_log_set_handler(count_record, &c);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, log_many, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    sl_log_set_handler(NULL, NULL);
    cr_assert_eq(c.n, 8000);
    cr_assert_eq(c.max_inside, 1);
}

/* "Did you mean": optimal string alignment distance, the closeness bound
 * and the first of equals. */
Test(suggest, distance_bound_and_hint)
{
    cr_assert_eq(sl_suggest_distance("wroker", 6, "worker", 6, 3), 1); /* a transposition */
    cr_assert_eq(sl_suggest_distance("sigrid_hsh", 10, "sigrid_hash", 11, 3), 1);
    cr_assert_eq(sl_suggest_distance("kitten", 6, "sitting", 7, 5), 3);
    cr_assert_eq(sl_suggest_distance("abc", 3, "abcdefgh", 8, 2), 3); /* capped at cap + 1 */
    cr_assert_eq(sl_suggest_distance("", 0, "ab", 2, 3), 2);

    static const char *const names[] = {"job", "jobs", "listen", "worker"};
    char buf[80];
    sl_suggest_t s;
    sl_suggest_init(&s, "jbo", 3);
    for (size_t i = 0; i < 4; i++)
        sl_suggest_offer_str(&s, names[i]);
    cr_assert_str_eq(sl_suggest_hint(&s, "--", buf, sizeof buf), " (did you mean '--job'?)");

    sl_suggest_init(&s, "item_idd", 8);
    sl_suggest_offer_str(&s, "user_id");
    sl_suggest_offer_str(&s, "item_id");
    cr_assert_str_eq(sl_suggest_hint(&s, "", buf, sizeof buf), " (did you mean 'item_id'?)");

    /* nothing within max(1, len / 3) edits: no hint */
    sl_suggest_init(&s, "zzz", 3);
    for (size_t i = 0; i < 4; i++)
        sl_suggest_offer_str(&s, names[i]);
    cr_assert_str_eq(sl_suggest_hint(&s, "--", buf, sizeof buf), "");
    /* the word itself is not a suggestion */
    sl_suggest_init(&s, "jobs", 4);
    sl_suggest_offer_str(&s, "jobs");
    cr_assert_str_eq(sl_suggest_hint(&s, "", buf, sizeof buf), "");
}

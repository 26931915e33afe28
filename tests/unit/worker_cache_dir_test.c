/* A worker's own autocache directory (src/dpp/worker/runtime/cache_dir.h): the
 * master's names checked, least recently used files removed past the
 * limit and reported once, folders of ended processes cleared while a
 * live one's stay, the process's folder removed at the end. */
#define _XOPEN_SOURCE 700
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mem.h"
#include "dpp/worker/runtime/cache_dir.h"
#include "testutil.h"

static tu_alloc_t g_ta;
static char g_root[64];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void setup(void)
{
    tu_alloc_init(&g_ta);
    snprintf(g_root, sizeof g_root, "/tmp/sluice-cachedir-XXXXXX");
    cr_assert_not_null(mkdtemp(g_root));
}

static void teardown(void)
{
    nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(worker_cache_dir, .init = setup, .fini = teardown);

/* Write n bytes at the path the directory gives name; @return the path. */
static void put(dpp_cache_dir_t *d, const char *name, size_t n)
{
    char *p = dpp_cache_dir_path(d, name);
    cr_assert_not_null(p, "%s", name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    for (size_t i = 0; i < n; i++)
        fputc('x', f);
    fclose(f);
    sl_strfree(&g_ta.base, p);
}

static bool exists(dpp_cache_dir_t *d, const char *name)
{
    char *p = dpp_cache_dir_path(d, name);
    struct stat sb;
    bool e = stat(p, &sb) == 0;
    sl_strfree(&g_ta.base, p);
    return e;
}

static uint32_t count_folders(void)
{
    DIR *dir = opendir(g_root);
    uint32_t n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL)
        n += strncmp(de->d_name, "w-", 2) == 0;
    closedir(dir);
    return n;
}

Test(worker_cache_dir, names_are_checked)
{
    dpp_cache_dir_t *d;
    sl_error_t err = {0};
    cr_assert_eq(dpp_cache_dir_open(g_root, 1000, &g_ta.base, &d, &err), SL_OK, "%s", err.msg);
    const char *bad[] = {"../etc/passwd",
                         "00000000000000aa/split-1.slc/..",
                         "00000000000000AA/split-1.slc",
                         "00000000000000aa/split-.slc",
                         "00000000000000aa/split-99999999999.slc",
                         "00000000000000aa/split-1.slcx",
                         "0000000000000aa/split-1.slc",
                         ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_null(dpp_cache_dir_path(d, bad[i]), "%s accepted", bad[i]);
    char *p = dpp_cache_dir_path(d, "00000000000000aa/split-17.slc");
    cr_assert_not_null(p);
    cr_assert(strncmp(p, g_root, strlen(g_root)) == 0);
    cr_assert(strstr(p, "/00000000000000aa/split-17.slc") != NULL, "%s", p);
    sl_strfree(&g_ta.base, p);
    /* a name with no file is not held */
    cr_assert_eq(dpp_cache_dir_settle(d, "00000000000000aa/split-17.slc"), 0);
    dpp_cache_dir_destroy(d);
    cr_assert_eq(count_folders(), 0, "the process's folder outlived it");
    tu_alloc_assert_clean(&g_ta);
}

Test(worker_cache_dir, least_recently_used_go_past_the_limit_and_are_reported_once)
{
    dpp_cache_dir_t *d;
    sl_error_t err = {0};
    cr_assert_eq(dpp_cache_dir_open(g_root, 1000, &g_ta.base, &d, &err), SL_OK, "%s", err.msg);
    const char *a = "00000000000000aa/split-0.slc", *b = "00000000000000aa/split-1.slc",
               *c = "00000000000000bb/split-0.slc";
    put(d, a, 400);
    cr_assert_eq(dpp_cache_dir_settle(d, a), 400);
    put(d, b, 400);
    cr_assert_eq(dpp_cache_dir_settle(d, b), 400);
    cr_assert_eq(dpp_cache_dir_settle(d, a), 400); /* a read: a is newer than b now */
    put(d, c, 300);
    cr_assert_eq(dpp_cache_dir_settle(d, c), 300); /* 1100 > 1000: b goes */
    cr_assert(exists(d, a));
    cr_assert(!exists(d, b));
    cr_assert(exists(d, c));
    uint64_t files, bytes, evicted;
    dpp_cache_dir_stats(d, &files, &bytes, &evicted);
    cr_assert_eq(files, 2);
    cr_assert_eq(bytes, 700);
    cr_assert_eq(evicted, 1);
    dpp_cache_evicted_t gone[4];
    cr_assert_eq(dpp_cache_dir_evicted(d, gone, 4), 1);
    cr_assert_eq(gone[0].fp, 0xaa);
    cr_assert_eq(gone[0].split, 1);
    cr_assert_eq(dpp_cache_dir_evicted(d, gone, 4), 0, "reported twice");
    /* a file alone over the limit is not kept, nor reported (never held) */
    const char *big = "00000000000000cc/split-9.slc";
    put(d, big, 1001);
    cr_assert_eq(dpp_cache_dir_settle(d, big), 0);
    cr_assert(!exists(d, big));
    cr_assert_eq(dpp_cache_dir_evicted(d, gone, 4), 2, "a and c made room for it");
    /* a file that went (a failed rewrite) is no longer counted */
    put(d, a, 100);
    cr_assert_eq(dpp_cache_dir_settle(d, a), 100);
    char *p = dpp_cache_dir_path(d, a);
    unlink(p);
    sl_strfree(&g_ta.base, p);
    cr_assert_eq(dpp_cache_dir_settle(d, a), 0);
    dpp_cache_dir_stats(d, &files, &bytes, &evicted);
    cr_assert_eq(files, 0);
    cr_assert_eq(bytes, 0);
    dpp_cache_dir_destroy(d);
    tu_alloc_assert_clean(&g_ta);
}

Test(worker_cache_dir, folders_of_ended_processes_are_cleared_live_ones_kept)
{
    /* an ended process's folder (its lock free) and a live one's (locked
     * here), and a folder that is not ours */
    char ended[200], live[200], lock[300], other[200];
    snprintf(ended, sizeof ended, "%s/w-1-deadbeef", g_root);
    snprintf(live, sizeof live, "%s/w-2-cafef00d", g_root);
    snprintf(other, sizeof other, "%s/keep-me", g_root);
    cr_assert_eq(mkdir(ended, 0755), 0);
    cr_assert_eq(mkdir(live, 0755), 0);
    cr_assert_eq(mkdir(other, 0755), 0);
    snprintf(lock, sizeof lock, "%s/.lock", ended);
    close(open(lock, O_CREAT | O_WRONLY, 0644));
    snprintf(lock, sizeof lock, "%s/.lock", live);
    int fd = open(lock, O_CREAT | O_RDWR, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    dpp_cache_dir_t *d;
    sl_error_t err = {0};
    cr_assert_eq(dpp_cache_dir_open(g_root, 0, &g_ta.base, &d, &err), SL_OK, "%s", err.msg);
    struct stat sb;
    cr_assert_neq(stat(ended, &sb), 0, "an ended process's folder was kept");
    cr_assert_eq(stat(live, &sb), 0, "a live process's folder was removed");
    cr_assert_eq(stat(other, &sb), 0, "a folder not of ours was removed");
    cr_assert_eq(count_folders(), 2); /* the live one and ours */
    dpp_cache_dir_destroy(d);
    cr_assert_eq(count_folders(), 1);
    close(fd);
    tu_alloc_assert_clean(&g_ta);
}

/* A lease forgotten without a SPLIT_READ (revoked, failed): its file is
 * counted as any; no file (or one alone over the limit) is told in the
 * next cache_evicted, once; a file held again before that is not told. */
Test(worker_cache_dir, untold_leases_are_counted_or_told)
{
    dpp_cache_dir_t *d;
    sl_error_t err = {0};
    cr_assert_eq(dpp_cache_dir_open(g_root, 1000, &g_ta.base, &d, &err), SL_OK, "%s", err.msg);
    const char *a = "00000000000000aa/split-0.slc", *b = "00000000000000aa/split-1.slc",
               *big = "00000000000000aa/split-2.slc";
    put(d, a, 600);
    cr_assert_eq(dpp_cache_dir_settle_untold(d, a), 600);
    uint64_t files, bytes, evicted;
    dpp_cache_dir_stats(d, &files, &bytes, &evicted);
    cr_assert_eq(files, 1);
    cr_assert_eq(bytes, 600);
    dpp_cache_evicted_t gone[4];
    cr_assert_eq(dpp_cache_dir_evicted(d, gone, 4), 0, "a held file is not told");
    /* no file: told, once, however often settled */
    cr_assert_eq(dpp_cache_dir_settle_untold(d, b), 0);
    cr_assert_eq(dpp_cache_dir_settle_untold(d, b), 0);
    cr_assert_eq(dpp_cache_dir_evicted(d, gone, 4), 1);
    cr_assert_eq(gone[0].fp, 0xaa);
    cr_assert_eq(gone[0].split, 1);
    /* told, then written and read by a later lease before the heartbeat:
     * held, so not told */
    cr_assert_eq(dpp_cache_dir_settle_untold(d, b), 0);
    put(d, b, 300);
    cr_assert_eq(dpp_cache_dir_settle(d, b), 300);
    cr_assert_eq(dpp_cache_dir_evicted(d, gone, 4), 0);
    /* alone over the limit: removed and told, with the others it pushed
     * out on the way (a, b) */
    put(d, big, 1001);
    cr_assert_eq(dpp_cache_dir_settle_untold(d, big), 0);
    cr_assert(!exists(d, big));
    cr_assert_eq(dpp_cache_dir_evicted(d, gone, 4), 3);
    cr_assert_eq(gone[2].split, 2);
    dpp_cache_dir_stats(d, &files, &bytes, &evicted);
    cr_assert_eq(files, 0);
    cr_assert_eq(bytes, 0);
    cr_assert_eq(evicted, 3);
    dpp_cache_dir_destroy(d);
    tu_alloc_assert_clean(&g_ta);
}

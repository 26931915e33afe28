/* The SIGBUS guard of mapped file reads (src/warehouse/mapguard.c): a read
 * of a mapped page that the file lost is reported, not fatal, and a SIGBUS
 * outside any guarded range still ends the process as it would without
 * the guard. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "warehouse/wh_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* A mapped two-page file whose pages are then cut off: every access to the
 * mapping raises SIGBUS. */
static volatile uint8_t *lost_mapping(size_t *len)
{
    char path[] = "/tmp/sluice-mapguard-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    unlink(path);
    *len = 2 * (size_t)sysconf(_SC_PAGESIZE);
    cr_assert_eq(ftruncate(fd, (off_t)*len), 0);
    void *m = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    cr_assert_neq(m, MAP_FAILED);
    cr_assert_eq(ftruncate(fd, 0), 0);
    close(fd);
    return m;
}

typedef struct touch {
    volatile uint8_t *p;
    size_t len;
    unsigned sum;
} touch_t;

static sl_err_t touch_all(void *arg, sl_error_t *err)
{
    (void)err;
    touch_t *t = arg;
    for (size_t i = 0; i < t->len; i += 64)
        t->sum += t->p[i];
    return SL_OK;
}

Test(mapguard, a_lost_page_is_reported_not_fatal)
{
    size_t len;
    touch_t t = {.p = lost_mapping(&len)};
    t.len = len;
    /* twice: the first jump must leave SIGBUS unblocked and the guard armed */
    for (int round = 0; round < 2; round++) {
        bool faulted = false;
        sl_error_t err = {0};
        sl_err_t rc = wh_mapguard_run((const void *)t.p, len, touch_all, &t, &faulted, &err);
        cr_assert(faulted, "round %d", round);
        cr_assert_eq(rc, SL_ERR_IO);
    }
    /* a guarded call that does not fault returns what the call returned */
    uint8_t ok[256] = {1};
    touch_t good = {.p = ok, .len = sizeof ok};
    bool faulted = true;
    cr_assert_eq(wh_mapguard_run(ok, sizeof ok, touch_all, &good, &faulted, NULL), SL_OK);
    cr_assert_not(faulted);
    cr_assert_eq(good.sum, 1);
    munmap((void *)t.p, len);
}

Test(mapguard, a_sigbus_outside_the_guarded_range_still_ends_the_process)
{
    cr_assert(wh_mapguard_init());
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        size_t len;
        volatile uint8_t *p = lost_mapping(&len);
        /* guarded, but on another range: the fault is not the guard's */
        uint8_t other[64];
        touch_t t = {.p = p, .len = len};
        bool faulted;
        wh_mapguard_run(other, sizeof other, touch_all, &t, &faulted, NULL);
        _exit(0); /* not reached */
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    /* SIGBUS by default; under a sanitizer, its handler (the one before
     * ours) reports it and exits or aborts */
    bool died = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
#ifndef UNDER_ASAN
    died = WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#endif
    cr_assert(died, "status %#x", status);
}

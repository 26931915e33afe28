/* Test helpers: seeds that are printed and replayable, scaled timeouts,
 * scratch directories and files. */
#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

uint64_t tu_seed(const char *test_name)
{
    const char *env = getenv("SLUICE_TEST_SEED");
    uint64_t seed;
    if (env != NULL && *env != '\0') {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    fprintf(stderr, "%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", test_name,
            (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

double tu_timeout(double seconds)
{
    const char *env = getenv("SLUICE_TIMEOUT_SCALE");
    double scale = env != NULL ? atof(env) : 1.0;
    if (scale <= 0) scale = 1.0;
    return seconds * scale;
}

char *tu_mkdtemp(const char *tag)
{
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/sluice-%s-XXXXXX", tag);
    char *d = mkdtemp(tmpl);
    if (d == NULL || (d = strdup(d)) == NULL) {
        perror("tu_mkdtemp");
        abort();
    }
    return d;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_rm_tree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *tu_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p == NULL) abort();
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

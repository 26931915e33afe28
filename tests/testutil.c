/* Test helpers: seeds that are printed and replayable, scaled timeouts,
 * scratch directories and files. */
#include "testutil.h"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

char *tu_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0;
    if (f != NULL && fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL)
            len = fread(buf, 1, (size_t)n, f);
    }
    if (buf == NULL) {
        perror(path);
        abort();
    }
    buf[len] = '\0';
    fclose(f);
    return buf;
}

int tu_run(const char *dir, char *const argv[], double timeout_s, char **out, char **err)
{
    char *out_path = tu_path(dir, ".tu_run.out"), *err_path = tu_path(dir, ".tu_run.err");
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || o < 0 || e < 0 || chdir(dir) != 0) _exit(127);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 >
            tu_timeout(timeout_s)) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr, "tu_run: %s did not end within %.0f s\n", argv[0],
                    tu_timeout(timeout_s));
            abort();
        }
        usleep(5000);
    }
    *out = tu_read_file(out_path);
    *err = tu_read_file(err_path);
    unlink(out_path);
    unlink(err_path);
    free(out_path);
    free(err_path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Test helpers: seeds that are printed and replayable, scaled timeouts,
 * scratch directories and files, the counting and failing allocator. */
#include "testutil.h"

#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <ftw.h>
#include <signal.h>
#include <stdatomic.h>
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

const char *tu_binary(void)
{
    const char *b = getenv("SLUICE_BINARY");
    if (b == NULL) {
        fprintf(stderr, "SLUICE_BINARY is not set (run through ctest)\n");
        abort();
    }
    return b;
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

/* ---- counting and failing allocator ---- */

#define TU_MAGIC 0x5eed0a11c0ffee11ull
#define TU_FREED 0xdeadf7eedeadf7eeull

/* In front of every block (right before the pointer handed out). */
typedef struct tu_head {
    uint64_t magic;
    size_t size; /* as asked */
    size_t pad;  /* bytes from the parent block's start to the pointer */
    uint64_t unused;
} tu_head_t;

static void *tu_alloc_fn(void *ctx, size_t size, size_t align)
{
    tu_alloc_t *ta = ctx;
    pthread_mutex_lock(&ta->mu);
    ta->calls++;
    bool fail = ta->fail_at != 0 &&
                (ta->calls == ta->fail_at || (ta->fail_after && ta->calls > ta->fail_at));
    if (fail) ta->failures++;
    pthread_mutex_unlock(&ta->mu);
    if (fail) return NULL;
    size_t pad = align > sizeof(tu_head_t) ? align : sizeof(tu_head_t);
    if (size > SIZE_MAX - pad) return NULL;
    unsigned char *p = sl_alloc_aligned(NULL, pad + size, align);
    if (p == NULL) return NULL;
    tu_head_t h = {TU_MAGIC, size, pad, 0};
    memcpy(p + pad - sizeof h, &h, sizeof h);
    pthread_mutex_lock(&ta->mu);
    ta->live++;
    ta->total++;
    ta->live_bytes += size;
    if (ta->live_bytes > ta->peak_bytes) ta->peak_bytes = ta->live_bytes;
    pthread_mutex_unlock(&ta->mu);
    return p + pad;
}

static void tu_free_fn(void *ctx, void *ptr, size_t size)
{
    tu_alloc_t *ta = ctx;
    if (ptr == NULL) return;
    unsigned char *p = ptr;
    tu_head_t h;
    memcpy(&h, p - sizeof h, sizeof h);
    pthread_mutex_lock(&ta->mu);
    bool ok = h.magic == TU_MAGIC && h.size == size;
    if (!ok && ta->bad_frees++ == 0)
        snprintf(ta->first_bad, sizeof ta->first_bad, "%s %p: freed with size %zu, allocated %zu",
                 h.magic == TU_FREED   ? "a second free of"
                 : h.magic == TU_MAGIC ? "block"
                                       : "a foreign block",
                 ptr, size, h.magic == TU_MAGIC ? h.size : 0);
    if (h.magic == TU_MAGIC) {
        ta->live--;
        ta->live_bytes -= h.size;
    }
    pthread_mutex_unlock(&ta->mu);
    if (h.magic != TU_MAGIC) return; /* not ours (or freed): leave it alone */
    h.magic = TU_FREED;
    memcpy(p - sizeof h, &h, sizeof h);
    sl_free(NULL, p - h.pad, h.pad + h.size);
}

void tu_alloc_init(tu_alloc_t *ta)
{
    memset(ta, 0, sizeof *ta);
    ta->base = (sl_allocator_t){tu_alloc_fn, tu_free_fn, ta};
    pthread_mutex_init(&ta->mu, NULL);
}

void tu_alloc_fail_at(tu_alloc_t *ta, uint64_t k, bool and_after)
{
    pthread_mutex_lock(&ta->mu);
    ta->fail_at = k;
    ta->fail_after = and_after;
    ta->calls = ta->failures = 0;
    pthread_mutex_unlock(&ta->mu);
}

uint64_t tu_alloc_calls(tu_alloc_t *ta)
{
    pthread_mutex_lock(&ta->mu);
    uint64_t n = ta->calls;
    pthread_mutex_unlock(&ta->mu);
    return n;
}

uint64_t tu_alloc_failures(tu_alloc_t *ta)
{
    pthread_mutex_lock(&ta->mu);
    uint64_t n = ta->failures;
    pthread_mutex_unlock(&ta->mu);
    return n;
}

bool tu_alloc_clean(tu_alloc_t *ta, char *why, size_t cap)
{
    pthread_mutex_lock(&ta->mu);
    bool ok = ta->live == 0 && ta->bad_frees == 0;
    if (ta->bad_frees > 0)
        snprintf(why, cap, "%llu bad free(s), the first: %s", (unsigned long long)ta->bad_frees,
                 ta->first_bad);
    else if (ta->live > 0)
        snprintf(why, cap, "%llu block(s) of %llu bytes leaked", (unsigned long long)ta->live,
                 (unsigned long long)ta->live_bytes);
    else if (cap > 0)
        why[0] = '\0';
    pthread_mutex_unlock(&ta->mu);
    return ok;
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
    /* named by process and call: tests that run at once (ctest -j) may
     * share dir (".", the build directory) */
    static atomic_uint calls;
    char name[64];
    unsigned call = atomic_fetch_add(&calls, 1);
    snprintf(name, sizeof name, ".tu_run.%ld.%u.out", (long)getpid(), call);
    char *out_path = tu_path(dir, name);
    snprintf(name, sizeof name, ".tu_run.%ld.%u.err", (long)getpid(), call);
    char *err_path = tu_path(dir, name);
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

/* Abort the test with what failed, when a GnuTLS call returned an error. */
static void tls_check(int rc, const char *what)
{
    if (rc >= 0) return;
    fprintf(stderr, "tu_make_cert: %s: %s\n", what, gnutls_strerror(rc));
    abort();
}

static void write_datum(const char *path, gnutls_datum_t *d)
{
    if (path != NULL) tu_write_file(path, d->data, d->size);
    gnutls_free(d->data);
}

void tu_make_cert(const char *cert_path, const char *key_path, const char *cn)
{
    gnutls_x509_privkey_t key;
    gnutls_x509_crt_t crt;
    tls_check(gnutls_x509_privkey_init(&key), "privkey_init");
    tls_check(gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                           GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0),
              "privkey_generate");
    tls_check(gnutls_x509_crt_init(&crt), "crt_init");
    time_t now = time(NULL);
    unsigned char serial[8] = {1, 2, 3, 4, 5, 6, (unsigned char)cn[0], (unsigned char)now};
    unsigned char ip[4] = {127, 0, 0, 1};
    tls_check(gnutls_x509_crt_set_version(crt, 3), "set_version");
    tls_check(gnutls_x509_crt_set_serial(crt, serial, sizeof serial), "set_serial");
    tls_check(gnutls_x509_crt_set_activation_time(crt, now - 3600), "set_activation_time");
    tls_check(gnutls_x509_crt_set_expiration_time(crt, now + 3600), "set_expiration_time");
    tls_check(gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                            (unsigned)strlen(cn)),
              "set_dn");
    tls_check(gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, ip, sizeof ip,
                                                   GNUTLS_FSAN_SET),
              "set_subject_alt_name");
    tls_check(gnutls_x509_crt_set_basic_constraints(crt, 1, -1), "set_basic_constraints");
    tls_check(
        gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE | GNUTLS_KEY_KEY_CERT_SIGN),
        "set_key_usage");
    tls_check(gnutls_x509_crt_set_key(crt, key), "set_key");
    tls_check(gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0), "sign");
    gnutls_datum_t d;
    tls_check(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d), "crt_export");
    write_datum(cert_path, &d);
    tls_check(gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &d), "privkey_export");
    write_datum(key_path, &d);
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_privkey_deinit(key);
}

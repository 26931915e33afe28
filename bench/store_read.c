/* Parallel ranged GETs from an S3 server (src/store): the bytes/s of
 * sl_store_read_many over one object, against `curl --parallel` fetching
 * the same ranges from the same server in the same run (the raw transfer
 * rate: libcurl's multi interface, SigV4 by curl, output to /dev/null).
 * The server is the s3proxy of `ops/s3proxy start --dir DIR`; the object is
 * written into its filesystem backend (seeded bytes), so the figures are
 * loopback reads of the page cache through s3proxy.
 *
 * usage: bench_store_read --dir DIR [--mib N (256)] [--range-mib R (8)]
 *                         [--connections C (16)] [--reps K (3)] [--seed S (1)] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "store/store.h"

static char endpoint[256], key_id[128], secret[128];

/* The server's endpoint and credentials: into the environment, and kept
 * for the curl runs */
static void load_env(const char *dir)
{
    if (bench_s3_env_load(dir, "bench_store_read") != 0) exit(1);
    const char *v;
    if ((v = getenv("AWS_ENDPOINT_URL")) != NULL) snprintf(endpoint, sizeof endpoint, "%s", v);
    if ((v = getenv("AWS_ACCESS_KEY_ID")) != NULL) snprintf(key_id, sizeof key_id, "%s", v);
    if ((v = getenv("AWS_SECRET_ACCESS_KEY")) != NULL) snprintf(secret, sizeof secret, "%s", v);
}

static double sluice_round(sl_store_t *st, sl_store_range_t *r, size_t n)
{
    sl_error_t e = {0};
    double t0 = bench_now();
    if (sl_store_read_many(st, r, n, &e) != SL_OK) {
        fprintf(stderr, "bench_store_read: %s\n", e.msg);
        exit(1);
    }
    return bench_now() - t0;
}

static double curl_round(const char *config)
{
    double t0 = bench_now();
    pid_t pid = fork();
    if (pid == 0) {
        /* curl --parallel draws a progress meter even when silent. */
        if (freopen("/dev/null", "w", stderr) == NULL) _exit(126);
        execlp("curl", "curl", "--silent", "--show-error", "--fail", "--config", config,
               (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_store_read: curl failed (status %d)\n", status);
        exit(1);
    }
    return bench_now() - t0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    uint64_t mib = 256, range_mib = 8, conns = 16, reps = 3, seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        uint64_t v = strtoull(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--mib") == 0)
            mib = v;
        else if (strcmp(argv[i], "--range-mib") == 0)
            range_mib = v;
        else if (strcmp(argv[i], "--connections") == 0)
            conns = v;
        else if (strcmp(argv[i], "--reps") == 0)
            reps = v;
        else if (strcmp(argv[i], "--seed") == 0)
            seed = v;
    }
    if (dir == NULL || mib == 0 || range_mib == 0 || conns == 0 || reps == 0 || mib % range_mib) {
        fprintf(stderr, "usage: bench_store_read --dir DIR [--mib N] [--range-mib R (dividing N)] "
                        "[--connections C] [--reps K] [--seed S]\n");
        return 2;
    }
    load_env(dir);
    /* The object, straight into the filesystem backend. */
    char bucket[64], path[800];
    snprintf(bucket, sizeof bucket, "bench-%d", (int)getpid());
    snprintf(path, sizeof path, "%s/data/%s", dir, bucket);
    if (mkdir(path, 0755) != 0) {
        fprintf(stderr, "bench_store_read: mkdir %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t size = (size_t)mib << 20, rlen = (size_t)range_mib << 20, n = size / rlen;
    uint8_t *data = malloc(size), *out = malloc(size);
    uint64_t s = seed;
    for (size_t i = 0; i < size / 8; i++) {
        s += 0x9e3779b97f4a7c15ull;
        uint64_t z = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ull;
        memcpy(data + 8 * i, &z, 8);
    }
    snprintf(path, sizeof path, "%s/data/%s/obj.bin", dir, bucket);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        fprintf(stderr, "bench_store_read: writing %s failed\n", path);
        return 1;
    }

    /* curl's config: one group per range, all in parallel over C connections. */
    char config[800];
    snprintf(config, sizeof config, "%s/curl-%d.conf", dir, (int)getpid());
    FILE *c = fopen(config, "w");
    fchmod(fileno(c), 0600);
    fprintf(c, "silent\nshow-error\nparallel\nparallel-max = %llu\n", (unsigned long long)conns);
    for (size_t i = 0; i < n; i++) {
        if (i) fprintf(c, "next\n");
        fprintf(c,
                "url = \"%s/%s/obj.bin\"\nrange = %zu-%zu\noutput = \"/dev/null\"\n"
                "aws-sigv4 = \"aws:amz:us-east-1:s3\"\nuser = \"%s:%s\"\n"
                "header = \"x-amz-content-sha256: "
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"\n",
                endpoint, bucket, i * rlen, (i + 1) * rlen - 1, key_id, secret);
    }
    fclose(c);

    char url[128];
    snprintf(url, sizeof url, "s3://%s", bucket);
    sl_store_opts_t o = {
        .path_style = -1, .max_connections = (uint32_t)conns, .max_inflight_bytes = conns * rlen};
    sl_store_t *st = NULL;
    sl_error_t e = {0};
    if (sl_store_open_url(url, &o, &st, NULL, &e) != SL_OK) {
        fprintf(stderr, "bench_store_read: %s\n", e.msg);
        return 1;
    }
    sl_store_range_t *r = calloc(n, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = (sl_store_range_t){
            .key = "obj.bin", .offset = i * rlen, .len = rlen, .buf = out + i * rlen};
    printf("object %llu MiB, %zu ranges of %llu MiB, %llu connections, best of %llu "
           "(alternating)\n",
           (unsigned long long)mib, n, (unsigned long long)range_mib, (unsigned long long)conns,
           (unsigned long long)reps);
    /* Warm the server (JIT, page cache) with one round of each. */
    sluice_round(st, r, n);
    curl_round(config);
    double best_s = 1e30, best_c = 1e30;
    for (uint64_t k = 0; k < reps; k++) {
        double ts = sluice_round(st, r, n), tc = curl_round(config);
        if (ts < best_s) best_s = ts;
        if (tc < best_c) best_c = tc;
        printf("  rep %llu: sluice %.3f s, curl %.3f s\n", (unsigned long long)k, ts, tc);
    }
    if (memcmp(out, data, size) != 0) {
        fprintf(stderr, "bench_store_read: the bytes read differ from the object\n");
        return 1;
    }
    double mb = (double)size / (1 << 20);
    printf("sluice read_many   %8.1f MiB/s\n", mb / best_s);
    printf("curl --parallel    %8.1f MiB/s\n", mb / best_c);
    printf("sluice / curl      %8.2f\n", best_c / best_s);
    sl_store_stats_t ss;
    sl_store_stats(st, &ss);
    printf("requests %llu, retries %llu\n", (unsigned long long)ss.requests,
           (unsigned long long)ss.retries);
    sl_store_destroy(st);
    unlink(config);
    unlink(path);
    snprintf(path, sizeof path, "%s/data/%s", dir, bucket);
    rmdir(path);
    free(r);
    free(data);
    free(out);
    return 0;
}

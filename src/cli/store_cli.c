/* `sluice store ls|stat|cat|put`: a probe of the object store layer
 * (src/store, docs/STORAGE.md) for people and tests: the same code, URLs,
 * credentials chain, retries and errors the readers will use. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common/mem.h"
#include "store/store.h"

typedef struct store_args {
    sl_cli_list_t args; /* URL (put: FILE URL) */
    const char *endpoint, *region, *ca_bundle, *addressing, *range;
    uint64_t max_attempts, connections;
} store_args_t;

#define S(field) offsetof(store_args_t, field)

static const sl_cli_opt_t conn_opts[] = {
    {"endpoint", SL_CLI_STRING, "URL", NULL, "AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS", 0,
     0, 0, S(endpoint),
     "the S3 API's base URL, for S3-compatible stores (http://127.0.0.1:9000 for MinIO, "
     "https://storage.googleapis.com for GCS)"},
    {"region", SL_CLI_STRING, "NAME", NULL,
     "AWS_REGION, AWS_DEFAULT_REGION, the profile's region, us-east-1", 0, 0, 0, S(region),
     "the region requests are signed for"},
    {"ca-bundle", SL_CLI_FILE, "FILE", NULL, "AWS_CA_BUNDLE, else the system's CAs", 0, 0, 0,
     S(ca_bundle), "a PEM file of the certificate authorities to trust"},
    {"addressing", SL_CLI_ENUM, "auto|path|virtual", "auto", NULL, 0, 0, 0, S(addressing),
     "path-style (ENDPOINT/BUCKET/KEY) or virtual-hosted (BUCKET.HOST/KEY); auto: path-style "
     "with --endpoint, virtual-hosted on AWS"},
    {"max-attempts", SL_CLI_UINT, "N", "5", NULL, 1, 100, 0, S(max_attempts),
     "tries of one request that fails in a retryable way (5xx, 429, SlowDown, a reset, a "
     "timeout), with capped exponential backoff and jitter between them"},
};
static const sl_cli_opt_t cat_opts[] = {
    {"range", SL_CLI_STRING, "A-B", NULL, "the whole object", 0, 0, 0, S(range),
     "bytes A to B inclusive (as HTTP ranges), or A- for A to the end"},
};
static const sl_cli_opt_t stat_opts[] = {
    {"connections", SL_CLI_UINT, "N", "16", NULL, 1, 256, 0, S(connections),
     "parallel requests (for reads of many ranges)"},
};

const sl_cli_group_t sl_cli_store_group = {"store connection", "object store options", conn_opts,
                                           sizeof conn_opts / sizeof conn_opts[0]};
static const sl_cli_group_t cat_group = SL_CLI_OWN_GROUP(cat_opts);
static const sl_cli_group_t conn_group = SL_CLI_OWN_GROUP(stat_opts);

#define URL_ARG                                                                                    \
    .args = "URL", .args_doc = "s3://BUCKET/KEY, file:///PATH or a path", .min_args = 1,           \
    .max_args = 1, .args_offset = S(args)

const sl_cli_cmd_t sl_cli_store_ls_cmd = {
    .name = "store ls",
    .summary = "list the objects under a prefix",
    .synopsis = "sluice store ls s3://BUCKET/PREFIX [options]",
    .about = "Lists every object whose key starts with PREFIX (ListObjectsV2, paged past 1,000 "
             "keys): size in bytes, modification time (UTC), ETag and key, one a line, in key "
             "order. A local directory lists the same way.",
    URL_ARG,
    .groups = {{&sl_cli_store_group, 0}},
};
const sl_cli_cmd_t sl_cli_store_stat_cmd = {
    .name = "store stat",
    .summary = "show an object's size, ETag, version and time",
    .synopsis = "sluice store stat s3://BUCKET/KEY [options]",
    .about = "Prints an object's size, ETag, version id (where the bucket keeps versions) and "
             "modification time (HEAD), one field a line.",
    URL_ARG,
    .groups = {{&sl_cli_store_group, 0}},
};
const sl_cli_cmd_t sl_cli_store_cat_cmd = {
    .name = "store cat",
    .summary = "write an object's bytes, or a range of them, to stdout",
    .synopsis = "sluice store cat s3://BUCKET/KEY [--range A-B] [options]",
    .about = "Writes the object's bytes (or bytes A to B) to standard output, fetched by "
             "ranged GETs of 8 MiB in parallel over reused connections.",
    URL_ARG,
    .groups = {{&cat_group, 0}, {&conn_group, 0}, {&sl_cli_store_group, 0}},
};
const sl_cli_cmd_t sl_cli_store_put_cmd = {
    .name = "store put",
    .summary = "write a file as an object",
    .synopsis = "sluice store put FILE s3://BUCKET/KEY [options]",
    .about = "Writes FILE as the object at the URL (replacing it): one PUT, or a multipart "
             "upload of 64 MiB parts for a larger file.",
    .args = "FILE URL",
    .args_doc = "the file, then s3://BUCKET/KEY, file:///PATH or a path",
    .min_args = 2,
    .max_args = 2,
    .args_offset = S(args),
    .groups = {{&sl_cli_store_group, 0}},
};

static int fail(const char *verb, const sl_error_t *e)
{
    fprintf(stderr, "sluice store %s: %s\n", verb, e->msg);
    return 1;
}

static sl_err_t print_one(void *ctx, const char *key, const sl_store_info_t *info)
{
    (void)ctx;
    char when[32] = "-";
    time_t t = (time_t)info->mtime_s;
    struct tm tm;
    if (info->mtime_s > 0 && gmtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("%12llu  %s  %s  %s\n", (unsigned long long)info->size, when,
           info->etag[0] ? info->etag : "-", key);
    return ferror(stdout) ? SL_ERR_IO : SL_OK;
}

/* "A-B" or "A-" against an object of size bytes into [*off, *off + *len). */
static bool parse_range(const char *s, uint64_t size, uint64_t *off, uint64_t *len)
{
    char *end;
    errno = 0;
    unsigned long long a = strtoull(s, &end, 10);
    if (end == s || *end != '-' || errno) return false;
    const char *b = end + 1;
    unsigned long long z = size ? size - 1 : 0;
    if (*b) {
        z = strtoull(b, &end, 10);
        if (end == b || *end || errno || z < a) return false;
        if (z >= size) z = size ? size - 1 : 0;
    }
    if (a >= size) return false;
    *off = a;
    *len = z - a + 1;
    return true;
}

static int cat(sl_store_t *st, const char *key, const store_args_t *a)
{
    sl_error_t e = {0};
    sl_store_info_t info;
    if (sl_store_stat(st, key, &info, &e) != SL_OK) return fail("cat", &e);
    uint64_t off = 0, len = info.size;
    if (a->range && !parse_range(a->range, info.size, &off, &len)) {
        fprintf(stderr,
                "sluice store cat: --range '%s' is not A-B or A- with A <= B inside the %llu "
                "bytes of %s/%s\n",
                a->range, (unsigned long long)info.size, sl_store_root(st), key);
        return 2;
    }
    /* Rounds of up to 16 chunks of 8 MiB, each pinned to the ETag seen by
     * the stat: an object replaced meanwhile fails instead of mixing. */
    enum { CHUNK = 8 << 20, PER_ROUND = 16 };
    if (len == 0) return 0;
    size_t cap = len < (uint64_t)CHUNK * PER_ROUND ? (size_t)len : (size_t)CHUNK * PER_ROUND;
    char *buf = sl_alloc(NULL, cap);
    if (buf == NULL) {
        fprintf(stderr, "sluice store cat: out of memory\n");
        return 1;
    }
    int rc = 0;
    while (len > 0 && rc == 0) {
        sl_store_range_t r[PER_ROUND];
        size_t n = 0;
        uint64_t round = 0;
        for (; n < PER_ROUND && round < len; n++) {
            uint64_t l = len - round < CHUNK ? len - round : CHUNK;
            r[n] = (sl_store_range_t){.key = key,
                                      .offset = off + round,
                                      .len = (size_t)l,
                                      .buf = buf + (size_t)n * CHUNK,
                                      .if_match = info.etag[0] ? info.etag : NULL};
            round += l;
        }
        if (sl_store_read_many(st, r, n, &e) != SL_OK) {
            rc = fail("cat", &e);
            break;
        }
        for (size_t i = 0; i < n; i++)
            if (fwrite(r[i].buf, 1, r[i].len, stdout) != r[i].len) {
                fprintf(stderr, "sluice store cat: writing to stdout: %s\n", strerror(errno));
                rc = 1;
                break;
            }
        off += round;
        len -= round;
    }
    sl_free(NULL, buf, cap);
    return rc;
}

static int run(const char *verb, store_args_t *a)
{
    const char *url = a->args.items[a->args.count - 1];
    sl_store_opts_t o = {.endpoint = a->endpoint,
                         .region = a->region,
                         .ca_bundle = a->ca_bundle,
                         .path_style = strcmp(a->addressing, "path") == 0      ? 1
                                       : strcmp(a->addressing, "virtual") == 0 ? 0
                                                                               : -1,
                         .max_attempts = (uint32_t)a->max_attempts,
                         .max_connections = (uint32_t)a->connections};
    sl_store_t *st = NULL;
    char *key = NULL;
    sl_error_t e = {0};
    if (sl_store_open_url(url, &o, &st, &key, &e) != SL_OK) return fail(verb, &e);
    int rc = 0;
    if (strcmp(verb, "ls") == 0) {
        rc = sl_store_list(st, key, print_one, NULL, &e) == SL_OK ? 0 : fail(verb, &e);
    } else if (strcmp(verb, "stat") == 0) {
        sl_store_info_t info;
        if (sl_store_stat(st, key, &info, &e) != SL_OK) {
            rc = fail(verb, &e);
        } else {
            printf("url      %s/%s\nsize     %llu\netag     %s\nversion  %s\nmtime_s  %lld\n",
                   sl_store_root(st), key, (unsigned long long)info.size,
                   info.etag[0] ? info.etag : "-", info.version[0] ? info.version : "-",
                   (long long)info.mtime_s);
        }
    } else if (strcmp(verb, "cat") == 0) {
        rc = cat(st, key, a);
    } else {
        rc = sl_store_put_file(st, key, a->args.items[0], &e) == SL_OK ? 0 : fail(verb, &e);
        if (rc == 0) {
            sl_store_stats_t s;
            sl_store_stats(st, &s);
            fprintf(stderr, "sluice store put: %llu bytes to %s/%s\n",
                    (unsigned long long)s.bytes_written, sl_store_root(st), key);
        }
    }
    if (fflush(stdout) != 0 && rc == 0) rc = 1;
    sl_strfree(NULL, key);
    sl_store_destroy(st);
    return rc;
}

static const sl_cli_verb_t verbs[] = {
    {"ls", &sl_cli_store_ls_cmd},
    {"stat", &sl_cli_store_stat_cmd},
    {"cat", &sl_cli_store_cat_cmd},
    {"put", &sl_cli_store_put_cmd},
};

int sl_cli_store(int argc, char **argv)
{
    int code;
    int i = sl_cli_verb_find("store", "URL [options]", verbs, sizeof verbs / sizeof verbs[0], argc,
                             argv, &code);
    if (i < 0) return code;
    store_args_t a = {0};
    sl_cli_parsed_t parsed;
    code = sl_cli_parse(verbs[i].cmd, argc - 1, argv + 1, &a, &parsed) ? run(verbs[i].name, &a)
                                                                       : parsed.code;
    sl_cli_free(verbs[i].cmd, &a);
    return code;
}

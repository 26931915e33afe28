/* `sluice table import --table s3://bucket/prefix`: an import into a table
 * in an object store. The data files are written as for a directory, into
 * a local staging directory (under TMPDIR) that holds the table's schema
 * when it has one, numbered past the part files the partition already has
 * in the store; then each new file is uploaded (one PUT, or a multipart
 * upload above the store's part size: either way the object appears whole
 * or not at all), and for a new table its _schema last, so that a reader
 * never finds a table whose schema is missing. The staging directory is
 * removed whatever happens. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fileio.h"
#include "import_internal.h"
#include "store/store.h"
#include "wh_internal.h"

typedef struct remote {
    sl_store_t *st;
    char prefix[1024]; /* key prefix of the table, "" or ending in '/' */
    char part[2100];   /* key prefix of the partition */
    uint32_t next;     /* one past the highest part number there */
} remote_t;

static sl_err_t on_part_key(void *ctx, const char *key, const sl_store_info_t *info)
{
    (void)info;
    remote_t *r = ctx;
    const char *name = key + strlen(r->part);
    unsigned v;
    char tail[8];
    if (strchr(name, '/') == NULL && sscanf(name, "part-%u%7s", &v, tail) == 2 &&
        strcmp(tail, SL_WH_FILE_EXT) == 0 && v >= r->next && v < UINT32_MAX - (1u << 20))
        r->next = v + 1;
    return SL_OK;
}

/* Download the table's _schema into the staging directory, when there is
 * one. *had: whether there was. */
static sl_err_t fetch_schema(remote_t *r, const char *url, const char *staging, bool *had,
                             sl_error_t *err)
{
    const sl_allocator_t *a = sl_allocator_default();
    char key[1100];
    snprintf(key, sizeof key, "%s%s", r->prefix, SL_WH_SCHEMA_FILE);
    sl_store_info_t info;
    sl_error_t e2 = {0};
    sl_err_t rc = sl_store_stat(r->st, key, &info, &e2);
    *had = rc == SL_OK;
    if (rc == SL_ERR_NOT_FOUND) return SL_OK;
    if (rc != SL_OK) {
        if (err != NULL) *err = e2;
        return rc;
    }
    if (info.size > (64u << 20))
        return sl_error_set(err, SL_ERR_TOO_LARGE, "table %s: a _schema of %llu bytes", url,
                            (unsigned long long)info.size);
    uint8_t *buf = sl_alloc(a, (size_t)info.size + 1);
    if (buf == NULL) return sl_error_set(err, SL_ERR_NOMEM, "table %s: schema", url);
    rc = info.size ? sl_store_read(r->st, key, 0, (size_t)info.size, buf, err) : SL_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", staging, SL_WH_SCHEMA_FILE);
    if (rc == SL_OK) rc = wh_write_file_atomic(path, buf, (size_t)info.size, false, err);
    sl_free(a, buf, (size_t)info.size + 1);
    return rc;
}

static int cmp_name(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Upload the data files of the staging partition, in name order: every
 * *.slc there is the import's (the directory was empty before it). */
static sl_err_t upload(remote_t *r, const char *url, const char *dir, sl_error_t *err)
{
    const sl_allocator_t *a = sl_allocator_default();
    DIR *d = opendir(dir);
    if (d == NULL)
        return sl_error_set(err, SL_ERR_IO, "table %s: staging %s: %s", url, dir, strerror(errno));
    char **names = NULL;
    size_t nn = 0, cap = 0;
    sl_err_t rc = SL_OK;
    struct dirent *e;
    while (rc == SL_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_name[0] == '_' || !wh_table_has_ext(e->d_name)) continue;
        if (nn == cap) {
            size_t c = cap ? cap * 2 : 16;
            char **bigger = sl_alloc(a, c * sizeof *bigger);
            if (bigger == NULL) {
                rc = sl_error_set(err, SL_ERR_NOMEM, "table %s: upload", url);
                break;
            }
            if (nn) memcpy(bigger, names, nn * sizeof *names);
            sl_free(a, names, cap * sizeof *names);
            names = bigger;
            cap = c;
        }
        if ((names[nn] = sl_strdup(a, e->d_name)) == NULL)
            rc = sl_error_set(err, SL_ERR_NOMEM, "table %s: upload", url);
        else
            nn++;
    }
    closedir(d);
    if (rc == SL_OK && nn > 1) qsort(names, nn, sizeof *names, cmp_name);
    for (size_t i = 0; rc == SL_OK && i < nn; i++) {
        char path[4500], key[2400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if ((size_t)snprintf(key, sizeof key, "%s%s", r->part, names[i]) >= sizeof key) {
            rc = sl_error_set(err, SL_ERR_INVALID, "table %s: key too long", url);
            break;
        }
        if ((rc = sl_store_put_file(r->st, key, path, err)) != SL_OK)
            sl_error_prefix(err,
                            "table %s: upload of %s failed after %zu of the import's %zu files "
                            "were uploaded: ",
                            url, names[i], i, nn);
    }
    for (size_t i = 0; i < nn; i++)
        sl_strfree(a, names[i]);
    sl_free(a, names, cap * sizeof *names);
    return rc;
}

sl_err_t wh_import_store(const sl_wh_import_opts_t *o, sl_wh_import_summary_t *summary,
                         sl_error_t *err)
{
    const char *url = o->table_dir;
    const char *partition = o->partition ? o->partition : "";
    remote_t r = {0};
    char *key = NULL;
    sl_store_opts_t so = {.alloc = sl_allocator_default()};
    sl_err_t rc = sl_store_open_url(url, &so, &r.st, &key, err);
    if (rc != SL_OK) return rc;
    size_t n = strlen(key);
    while (n > 0 && key[n - 1] == '/')
        n--;
    if (n >= 1000 || strlen(partition) >= 1000) {
        sl_strfree(so.alloc, key);
        sl_store_destroy(r.st);
        return sl_error_set(err, SL_ERR_INVALID, "table %s: the prefix or partition is too long",
                            url);
    }
    snprintf(r.prefix, sizeof r.prefix, "%.*s%s", (int)n, key, n ? "/" : "");
    sl_strfree(so.alloc, key);
    snprintf(r.part, sizeof r.part, "%s%s%s", r.prefix, partition, *partition ? "/" : "");

    const char *tmp = getenv("TMPDIR");
    char staging[4096];
    snprintf(staging, sizeof staging, "%s/sluice-s3import-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(staging) == NULL) {
        rc = sl_error_set(err, SL_ERR_IO, "table %s: staging directory %s: %s", url, staging,
                          strerror(errno));
        sl_store_destroy(r.st);
        return rc;
    }
    bool had_schema = false;
    rc = fetch_schema(&r, url, staging, &had_schema, err);
    if (rc == SL_OK) {
        rc = sl_store_list(r.st, r.part, on_part_key, &r, err);
        if (rc != SL_OK) sl_error_prefix(err, "table %s: ", url);
    }
    if (rc == SL_OK) {
        sl_wh_import_opts_t lo = *o;
        lo.table_dir = staging;
        rc = wh_import_into(&lo, r.next, summary, err);
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s%s%s", staging, *partition ? "/" : "", partition);
    if (rc == SL_OK) rc = upload(&r, url, dir, err);
    if (rc == SL_OK && !had_schema) {
        char path[4200], skey[1100];
        snprintf(path, sizeof path, "%s/%s", staging, SL_WH_SCHEMA_FILE);
        snprintf(skey, sizeof skey, "%s%s", r.prefix, SL_WH_SCHEMA_FILE);
        rc = sl_store_put_file(r.st, skey, path, err);
        if (rc != SL_OK) sl_error_prefix(err, "table %s: the data files are uploaded, ", url);
    }
    /* What the import wrote and nothing else: the directory is ours. */
    sl_io_remove_tree(staging);
    sl_store_destroy(r.st);
    return rc;
}

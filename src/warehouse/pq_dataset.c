/* A Parquet dataset read in place (pq_dataset.h): the file list with Hive
 * partitions, the split plan from the footers with statistics skipping,
 * and the reader of a split's rows (the import's Parquet row reader,
 * import_parquet.c, restricted to the projected slots). */
#include "warehouse/pq_dataset.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "common/mem.h"
#include "import_internal.h"
#include "parquet/parquet.h"
#include "pq_internal.h"
#include "pq_store.h"

/* Sample ids a file does not give: file index x this + row number (from
 * 1), as import.c numbers a table's first import (SAMPLE_ID_STRIDE). */
#define FILE_ID_STRIDE 10000000000ll

/* Directory levels followed below the dataset's root. */
#define MAX_DEPTH 32

typedef struct ds_file {
    char *rel;       /* relative to the root ("" parts joined by '/'); the name for one file */
    char *full;      /* what is opened */
    char *partition; /* "k=v/k2=v2" of its folders, "" when none */
    uint32_t num_keys;
    const char **keys, **values;
    const char *etag; /* an object's, as the listing found it ("" for a file) */
    uint64_t sum;     /* its footer sum (footer_sum) when this dataset planned it, else 0 */
} ds_file_t;

struct sl_wh_pqds {
    const sl_allocator_t *a;
    sl_arena_t *arena;
    uint32_t num_files, cap_files;
    ds_file_t *files; /* sorted by rel */
    imp_pq_t *pq;     /* the first file's columns and the mapping */
    sl_wh_splits_t splits;
    size_t splits_cap;
    sl_store_t *store; /* the bucket of a dataset at an s3:// URL (owned), else NULL */
};

static sl_err_t add_file(sl_wh_pqds_t *ds, const char *rel, const char *full, const char *part,
                         sl_error_t *err)
{
    if (ds->num_files == ds->cap_files) {
        uint32_t nc = ds->cap_files ? 2 * ds->cap_files : 16;
        ds_file_t *n = sl_realloc(ds->a, ds->files, ds->cap_files * sizeof *n, nc * sizeof *n);
        if (n == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for the file list");
        ds->files = n;
        ds->cap_files = nc;
    }
    ds_file_t *f = &ds->files[ds->num_files];
    memset(f, 0, sizeof *f);
    f->etag = "";
    f->rel = sl_arena_strdup(ds->arena, rel);
    f->full = sl_arena_strdup(ds->arena, full);
    f->partition = sl_arena_strdup(ds->arena, part);
    if (f->rel == NULL || f->full == NULL || f->partition == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for the file list");
    /* the keys: each "k=v" folder of the partition */
    uint32_t n = 0;
    for (const char *c = part; *c; c++)
        n += *c == '=';
    f->keys = sl_arena_calloc(ds->arena, n + 1, sizeof *f->keys);
    f->values = sl_arena_calloc(ds->arena, n + 1, sizeof *f->values);
    char *copy = sl_arena_strdup(ds->arena, part);
    if (f->keys == NULL || f->values == NULL || copy == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for the file list");
    for (char *seg = copy; seg != NULL && *seg;) {
        char *slash = strchr(seg, '/');
        if (slash) *slash = '\0';
        char *eq = strchr(seg, '=');
        if (eq != NULL && f->num_keys < n) {
            *eq = '\0';
            f->keys[f->num_keys] = seg;
            f->values[f->num_keys++] = eq + 1;
        }
        seg = slash ? slash + 1 : NULL;
    }
    ds->num_files++;
    return SL_OK;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Every `.parquet` file below dir (rel: dir relative to the root; part:
 * its Hive folders). Names starting with '.' or '_' (_SUCCESS, .crc files,
 * writers' temporaries) are not data. */
static sl_err_t walk(sl_wh_pqds_t *ds, const char *dir, const char *rel, const char *part,
                     int depth, sl_error_t *err)
{
    if (depth > MAX_DEPTH)
        return sl_error_set(err, SL_ERR_INVALID, "%s: folders nested deeper than %d", dir,
                            MAX_DEPTH);
    DIR *d = opendir(dir);
    if (d == NULL)
        return sl_error_set(err, errno == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO, "%s: %s", dir,
                            strerror(errno));
    sl_err_t rc = SL_OK;
    struct dirent *e;
    while (rc == SL_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_name[0] == '_') continue;
        char full[4096], r[4096], p[4096];
        int n1 = snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        int n2 = snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        if (n1 < 0 || (size_t)n1 >= sizeof full || n2 < 0 || (size_t)n2 >= sizeof r) {
            rc = sl_error_set(err, SL_ERR_INVALID, "%s/%s: path too long", dir, e->d_name);
            break;
        }
        struct stat st;
        if (stat(full, &st) != 0) {
            rc = sl_error_set(err, SL_ERR_IO, "%s: %s", full, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            const char *sep = *part ? "/" : "";
            int n3 = strchr(e->d_name, '=') ? snprintf(p, sizeof p, "%s%s%s", part, sep, e->d_name)
                                            : snprintf(p, sizeof p, "%s", part);
            if (n3 < 0 || (size_t)n3 >= sizeof p)
                rc = sl_error_set(err, SL_ERR_INVALID, "%s: path too long", full);
            else
                rc = walk(ds, full, r, p, depth + 1, err);
        } else if (S_ISREG(st.st_mode) && ends_with(e->d_name, ".parquet")) {
            rc = add_file(ds, r, full, part, err);
        }
    }
    closedir(d);
    return rc;
}

typedef struct listing {
    sl_wh_pqds_t *ds;
    const char *url; /* the dataset's */
    size_t skip;     /* the prefix's length */
    sl_error_t *err;
} listing_t;

/* One object of a dataset's listing: a `.parquet` key whose folders are
 * not hidden, its partition the folders that are "k=v" (as walk's). */
static sl_err_t on_object(void *ctx, const char *key, const sl_store_info_t *info)
{
    listing_t *l = ctx;
    const char *rel = key + l->skip;
    if (!ends_with(rel, ".parquet")) return SL_OK;
    char part[4096] = "";
    size_t np = 0;
    for (const char *c = rel;;) {
        if (*c == '.' || *c == '_') return SL_OK;
        const char *slash = strchr(c, '/');
        if (slash == NULL) break;
        size_t n = (size_t)(slash - c);
        if (memchr(c, '=', n) != NULL) {
            if (np + n + 2 >= sizeof part)
                return sl_error_set(l->err, SL_ERR_INVALID, "%s/%s: path too long", l->url, rel);
            if (np > 0) part[np++] = '/';
            memcpy(part + np, c, n);
            part[np += n] = '\0';
        }
        c = slash + 1;
    }
    char full[4200];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", sl_store_root(l->ds->store), key) >=
        sizeof full)
        return sl_error_set(l->err, SL_ERR_INVALID, "%s/%s: path too long", l->url, rel);
    sl_err_t rc = add_file(l->ds, rel, full, part, l->err);
    if (rc == SL_OK) {
        const char *etag = sl_arena_strdup(l->ds->arena, info->etag);
        if (etag == NULL) return sl_error_set(l->err, SL_ERR_NOMEM, "no memory for the file list");
        l->ds->files[l->ds->num_files - 1].etag = etag;
    }
    return rc;
}

/* The objects of a dataset at an s3:// URL: one object ending in
 * .parquet, or every .parquet object under the prefix (one paged
 * listing, in key order), Hive folders as for a directory. */
static sl_err_t list_store(sl_wh_pqds_t *ds, const char *url, const sl_store_opts_t *store,
                           sl_error_t *err)
{
    sl_store_opts_t so = store ? *store : (sl_store_opts_t){0};
    so.alloc = ds->a;
    char *key = NULL;
    sl_err_t rc = sl_store_open_url(url, &so, &ds->store, &key, err);
    if (rc != SL_OK) return rc;
    if (ends_with(key, ".parquet")) {
        sl_store_info_t info;
        rc = sl_store_stat(ds->store, key, &info, err);
        const char *base = strrchr(key, '/');
        listing_t l = {ds, url, (size_t)(base ? base + 1 - key : 0), err};
        if (rc == SL_OK) rc = on_object(&l, key, &info);
    } else {
        char prefix[4096];
        size_t n = strlen(key);
        while (n > 0 && key[n - 1] == '/')
            n--;
        if (n + 2 > sizeof prefix) {
            rc = sl_error_set(err, SL_ERR_INVALID, "%s: path too long", url);
        } else {
            memcpy(prefix, key, n);
            if (n > 0) prefix[n++] = '/';
            prefix[n] = '\0';
            listing_t l = {ds, url, n, err};
            rc = sl_store_list(ds->store, prefix, on_object, &l, err);
        }
    }
    sl_strfree(ds->a, key);
    if (rc != SL_OK) sl_error_prefix(err, "Parquet dataset %s: ", url);
    return rc;
}

static int by_rel(const void *x, const void *y)
{
    return strcmp(((const ds_file_t *)x)->rel, ((const ds_file_t *)y)->rel);
}

/* The dataset's columns and mapping from the first file whose footer reads.
 * A file that became unreadable after the job was planned (truncated,
 * deleted, replaced, its reads failing past the store's retries) must not
 * stop a worker from serving the other files: its splits fail when they
 * are read, naming it (SPLIT_FAILED), and the master's on_bad_split
 * applies. Its error stands when no file reads, or when the mapping itself
 * is refused (SL_ERR_INVALID: the same for every file) or memory ran out. */
static sl_err_t open_columns(sl_wh_pqds_t *ds, const sl_wh_colmap_t *mapping,
                             sl_wh_colmap_problem_fn problem, void *ctx, sl_error_t *err)
{
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; i < ds->num_files; i++) {
        sl_error_t e = {0};
        sl_err_t frc = imp_pq_open_store(ds->store, ds->files[i].full, mapping, ds->a, problem, ctx,
                                         &ds->pq, i == 0 ? err : &e);
        if (frc == SL_OK) return SL_OK;
        if (i == 0) rc = frc;
        if (frc == SL_ERR_INVALID || frc == SL_ERR_NOMEM) {
            if (i > 0) *err = e;
            return frc;
        }
    }
    return rc;
}

sl_err_t sl_wh_pqds_open(const char *path, const sl_wh_colmap_t *mapping, const char *partitions,
                         const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                         sl_wh_pqds_t **out, sl_error_t *err)
{
    return sl_wh_pqds_open_with(path, NULL, mapping, partitions, a, problem, ctx, out, err);
}

sl_err_t sl_wh_pqds_open_with(const char *path, const struct sl_store_opts *store,
                              const sl_wh_colmap_t *mapping, const char *partitions,
                              const sl_allocator_t *a, sl_wh_colmap_problem_fn problem, void *ctx,
                              sl_wh_pqds_t **out, sl_error_t *err)
{
    *out = NULL;
    if (a == NULL) a = sl_allocator_default();
    sl_wh_pqds_t *ds = sl_calloc(a, 1, sizeof *ds);
    if (ds == NULL || (ds->a = a, ds->arena = sl_arena_new(a, 0)) == NULL) {
        sl_free(a, ds, sizeof *ds);
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for the Parquet dataset");
    }
    sl_wh_filter_t *filter = NULL;
    sl_err_t rc = SL_OK;
    struct stat st;
    if (sl_store_is_remote(path)) {
        rc = list_store(ds, path, store, err);
    } else if (stat(path, &st) != 0) {
        rc = sl_error_set(err, errno == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO,
                          "Parquet dataset %s: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = walk(ds, path, "", "", 0, err);
        if (rc == SL_OK && ds->num_files > 1)
            qsort(ds->files, ds->num_files, sizeof *ds->files, by_rel);
    } else {
        const char *base = strrchr(path, '/');
        rc = add_file(ds, base ? base + 1 : path, path, "", err);
    }
    if (rc == SL_OK && partitions && *partitions)
        rc = sl_wh_filter_parse(partitions, a, &filter, err);
    if (rc == SL_OK && filter != NULL) { /* keep the files whose Hive keys pass */
        uint32_t k = 0;
        for (uint32_t i = 0; i < ds->num_files; i++) {
            ds_file_t *f = &ds->files[i];
            sl_wh_partition_t p = {.name = f->partition,
                                   .num_keys = f->num_keys,
                                   .keys = f->keys,
                                   .values = f->values};
            if (sl_wh_filter_match(filter, &p)) ds->files[k++] = *f;
        }
        ds->num_files = k;
    }
    sl_wh_filter_destroy(filter);
    if (rc == SL_OK && ds->num_files == 0)
        rc = sl_error_set(err, SL_ERR_NOT_FOUND, "Parquet dataset %s: no .parquet file%s", path,
                          partitions && *partitions ? " passes the partition filter" : "");
    if (rc == SL_OK) rc = open_columns(ds, mapping, problem, ctx, err);
    if (rc != SL_OK) {
        sl_wh_pqds_destroy(ds);
        return rc;
    }
    *out = ds;
    return SL_OK;
}

void sl_wh_pqds_destroy(sl_wh_pqds_t *ds)
{
    if (ds == NULL) return;
    imp_pq_destroy(ds->pq);
    sl_store_destroy(ds->store);
    sl_free(ds->a, ds->files, ds->cap_files * sizeof *ds->files);
    sl_free(ds->a, ds->splits.items, ds->splits_cap * sizeof *ds->splits.items);
    sl_arena_destroy(ds->arena);
    sl_free(ds->a, ds, sizeof *ds);
}

const sl_wh_colmap_resolved_t *sl_wh_pqds_mapping(const sl_wh_pqds_t *ds)
{
    return imp_pq_mapping(ds->pq);
}

uint32_t sl_wh_pqds_num_files(const sl_wh_pqds_t *ds)
{
    return ds->num_files;
}

void sl_wh_pqds_set_mem(sl_wh_pqds_t *ds, const sl_wh_mem_t *mem)
{
    ds->pq->mem = mem;
}

sl_store_t *sl_wh_pqds_store(const sl_wh_pqds_t *ds)
{
    return ds->store;
}

/* ---- the plan ---- */

/* The Parquet leaf path of a range's column (the timestamp, or the label
 * named), or NULL when it is not read from one leaf. */
static const char *range_leaf(const sl_wh_pqds_t *ds, const sl_wh_pqds_range_t *r)
{
    const sl_wh_colmap_resolved_t *m = imp_pq_mapping(ds->pq);
    uint32_t col = SL_WH_COLMAP_NONE;
    if (r->label == NULL) {
        col = m->id_column[SL_WH_MAP_TIMESTAMP - 1];
    } else {
        for (uint32_t s = 0; s < m->num_slots; s++)
            if (m->slots[s].target == SL_WH_MAP_LABEL && strcmp(m->slots[s].name, r->label) == 0)
                col = m->slots[s].column;
    }
    return col == SL_WH_COLMAP_NONE ? NULL : imp_pq_leaf_path(ds->pq, col);
}

/* Do the statistics of row group g prove that no row passes range r (whose
 * column is leaf c of m)? A null becomes 0 (a label) or an unset timestamp
 * (0), so a chunk that may hold nulls is ruled out only when 0 fails the
 * range too. Values become float32 labels: the range is widened by a
 * float's rounding so that a value rounding into it is never ruled out. */
static bool range_excludes(const sl_pq_meta_t *m, int64_t c, uint32_t g,
                           const sl_wh_pqds_range_t *r)
{
    if (c < 0) return false;
    const sl_pq_chunk_t *ch = &m->row_groups[g].chunks[c];
    double lo = r->lo, hi = r->hi;
    if (r->label != NULL) {
        lo -= fabs(lo) * 1e-6 + 1e-30;
        hi += fabs(hi) * 1e-6 + 1e-30;
    }
    if (!sl_pq_chunk_excludes(&m->columns[c], ch, lo, hi)) return false;
    bool no_nulls = ch->has_stats && ch->stats.has_null_count && ch->stats.null_count == 0;
    return no_nulls || !(0 >= r->lo && 0 <= r->hi);
}

static sl_err_t push_split(sl_wh_pqds_t *ds, const sl_wh_split_t *sp, sl_error_t *err)
{
    if (ds->splits.count == ds->splits_cap) {
        size_t nc = ds->splits_cap ? 2 * ds->splits_cap : 64;
        sl_wh_split_t *n =
            sl_realloc(ds->a, ds->splits.items, ds->splits_cap * sizeof *n, nc * sizeof *n);
        if (n == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for the splits");
        ds->splits.items = n;
        ds->splits_cap = nc;
    }
    ds->splits.items[ds->splits.count++] = *sp;
    return SL_OK;
}

/* What names file f's content in its splits' footer_checksum (a plan's
 * fingerprint, a lease's pin): its path and footer, and an object's ETag,
 * so that a replaced object plans (and pins) anew. */
static sl_err_t footer_sum(const ds_file_t *f, const sl_pq_meta_t *m, uint64_t *out,
                           sl_error_t *err)
{
    XXH3_state_t *h = XXH3_createState();
    if (h == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory");
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, f->rel, strlen(f->rel) + 1);
    XXH3_64bits_update(h, &m->num_rows, sizeof m->num_rows);
    XXH3_64bits_update(h, &m->footer_len, sizeof m->footer_len);
    XXH3_64bits_update(h, &m->num_row_groups, sizeof m->num_row_groups);
    if (*f->etag) XXH3_64bits_update(h, f->etag, strlen(f->etag));
    *out = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return SL_OK;
}

/* Open file f's footer, its object pinned at the ETag of the listing.
 * Caller closes *src (also after a failure) and destroys *pf. */
static sl_err_t open_footer(const sl_wh_pqds_t *ds, const ds_file_t *f, sl_pq_source_t *src,
                            sl_pq_file_t **pf, sl_error_t *err)
{
    *pf = NULL;
    sl_err_t rc = wh_pq_source_open(ds->store, f->full, ds->a, src, err);
    if (rc == SL_OK && *f->etag && strcmp(wh_pq_source_etag(src), f->etag))
        rc = sl_error_set(err, SL_ERR_VERSION,
                          "%s: the object was replaced while the dataset was planned (ETag "
                          "%s, listed %s)",
                          f->full, wh_pq_source_etag(src), f->etag);
    if (rc == SL_OK) rc = sl_pq_file_open(src, f->full, ds->a, pf, err);
    return rc;
}

/* Cut file fi's row groups into splits. */
static sl_err_t plan_file(sl_wh_pqds_t *ds, uint32_t fi, const sl_pq_meta_t *m, uint64_t split_rows,
                          const int64_t *leaf, const sl_wh_pqds_range_t *ranges,
                          uint32_t num_ranges, sl_wh_pqds_plan_stats_t *st, sl_error_t *err)
{
    ds_file_t *f = &ds->files[fi];
    uint64_t footer;
    sl_err_t frc = footer_sum(f, m, &footer, err);
    if (frc != SL_OK) return frc;
    f->sum = footer; /* a reader of this dataset checks its splits without reading it again */
    sl_wh_split_t cur = {0};
    bool open = false;
    uint64_t row = 0;
    sl_err_t rc = SL_OK;
    for (uint32_t g = 0; rc == SL_OK && g < m->num_row_groups; g++) {
        const sl_pq_row_group_t *rg = &m->row_groups[g];
        uint64_t n = (uint64_t)rg->num_rows;
        st->row_groups++;
        bool skip = false;
        for (uint32_t r = 0; !skip && r < num_ranges; r++)
            skip = range_excludes(m, leaf[r], g, &ranges[r]);
        if (skip || n == 0 || (open && cur.num_rows + n > split_rows)) {
            if (open) rc = push_split(ds, &cur, err);
            open = false;
        }
        if (skip) {
            st->row_groups_skipped++;
            st->rows_skipped += n;
        } else if (n > 0) {
            if (!open)
                cur = (sl_wh_split_t){.path = f->rel,
                                      .partition = f->partition,
                                      .stripe_begin = g,
                                      .stripe_end = g,
                                      .first_row = row,
                                      .footer_checksum = footer};
            open = true;
            cur.stripe_end = g + 1;
            cur.num_rows += n;
            cur.bytes += rg->total_byte_size > 0 ? (uint64_t)rg->total_byte_size : 0;
        }
        row += n;
    }
    if (rc == SL_OK && open) rc = push_split(ds, &cur, err);
    return rc;
}

/* The splits planned, copied into one arena with their strings: they
 * outlive ds (the master keeps them in its state). */
static sl_err_t take_splits(sl_wh_pqds_t *ds, sl_wh_splits_t **out, sl_error_t *err)
{
    sl_arena_t *ar = sl_arena_new(ds->a, 0);
    sl_wh_splits_t *sp = ar ? sl_arena_calloc(ar, 1, sizeof *sp) : NULL;
    sl_wh_split_t *items = sp ? sl_arena_calloc(ar, ds->splits.count + 1, sizeof *items) : NULL;
    if (items == NULL) {
        sl_arena_destroy(ar);
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for the splits");
    }
    sp->arena = ar;
    sp->items = items;
    sp->count = ds->splits.count;
    sp->files = ds->num_files;
    for (uint32_t i = 0; i < sp->count; i++) {
        items[i] = ds->splits.items[i];
        items[i].path = sl_arena_strdup(ar, items[i].path);
        items[i].partition = sl_arena_strdup(ar, items[i].partition);
        if (items[i].path == NULL || items[i].partition == NULL) {
            sl_arena_destroy(ar);
            return sl_error_set(err, SL_ERR_NOMEM, "no memory for the splits");
        }
        sp->rows += items[i].num_rows;
    }
    *out = sp;
    return SL_OK;
}

sl_err_t sl_wh_pqds_plan(sl_wh_pqds_t *ds, uint64_t split_rows, const sl_wh_pqds_range_t *ranges,
                         uint32_t num_ranges, sl_wh_splits_t **out, sl_wh_pqds_plan_stats_t *stats,
                         sl_error_t *err)
{
    sl_wh_pqds_plan_stats_t st = {0};
    *out = NULL;
    ds->splits.count = 0;
    if (split_rows == 0) split_rows = 1;
    const char *paths[16];
    if (num_ranges > 16) num_ranges = 16; /* the rest still filter rows; they skip nothing */
    for (uint32_t r = 0; r < num_ranges; r++)
        paths[r] = range_leaf(ds, &ranges[r]);
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; rc == SL_OK && i < ds->num_files; i++) {
        sl_pq_source_t src;
        sl_pq_file_t *f = NULL;
        rc = open_footer(ds, &ds->files[i], &src, &f, err);
        if (rc == SL_OK) {
            const sl_pq_meta_t *m = sl_pq_file_meta(f);
            int64_t leaf[16];
            for (uint32_t r = 0; r < num_ranges; r++)
                leaf[r] = paths[r] ? sl_pq_find_column(m, paths[r]) : -1;
            rc = plan_file(ds, i, m, split_rows, leaf, ranges, num_ranges, &st, err);
        }
        sl_pq_file_destroy(f);
        wh_pq_source_close(&src); /* zeroed when it failed to open */
    }
    if (stats) *stats = st;
    if (rc == SL_OK) rc = take_splits(ds, out, err);
    return rc;
}

/* ---- reading ---- */

struct sl_wh_pqds_reader {
    const sl_wh_pqds_t *ds;
    uint8_t *slot_read; /* [num_slots] */
    uint32_t num_slots;
    sl_wh_row_buf_t *buf;
    imp_pqc_t *cols; /* the columnar path (sl_wh_pqds_read_stripes) */
    /* The last file whose footer a split's footer_checksum was checked
     * against (1 + its index; 0: none), and its sum: consecutive splits of
     * a file read its footer once for the check. */
    uint32_t summed_file;
    uint64_t summed;
};

/* Refuse split sp of file f when its footer_checksum (the plan's, a
 * lease's) is not the file's as this reader finds it: the object was
 * replaced after the job was planned, and its new version is never read. */
static sl_err_t check_pinned(sl_wh_pqds_reader_t *r, const ds_file_t *f, const sl_wh_split_t *sp,
                             sl_error_t *err)
{
    const sl_wh_pqds_t *ds = r->ds;
    uint32_t fi = (uint32_t)(f - ds->files) + 1;
    if (sp->footer_checksum == 0) return SL_OK;
    /* An object this dataset planned: its reads are pinned at the ETag its
     * sum holds, so the sum stands without reading the footer again (a
     * local file is read again: nothing pins it). */
    if (r->summed_file != fi && f->sum != 0 && *f->etag) {
        r->summed = f->sum;
        r->summed_file = fi;
    }
    if (r->summed_file != fi) {
        sl_pq_source_t src;
        sl_pq_file_t *pf = NULL;
        /* pinned at the listing's ETag as the read itself is */
        sl_err_t rc = imp_pq_source_open(ds->pq, f->full, f->etag, &src, err);
        if (rc == SL_OK) rc = sl_pq_file_open(&src, f->full, ds->a, &pf, err);
        if (rc == SL_OK) rc = footer_sum(f, sl_pq_file_meta(pf), &r->summed, err);
        sl_pq_file_destroy(pf);
        wh_pq_source_close(&src);
        if (rc != SL_OK) return rc;
        r->summed_file = fi;
    }
    if (r->summed != sp->footer_checksum)
        return sl_error_set(err, SL_ERR_VERSION,
                            "%s: the object was replaced after the job planned its splits (its "
                            "footer checksum is not the planned %016llx)",
                            f->full, (unsigned long long)sp->footer_checksum);
    return SL_OK;
}

sl_err_t sl_wh_pqds_reader_new(const sl_wh_pqds_t *ds, const char *const *features, uint32_t nf,
                               sl_wh_pqds_reader_t **out, sl_error_t *err)
{
    *out = NULL;
    const sl_wh_colmap_resolved_t *m = imp_pq_mapping(ds->pq);
    sl_wh_pqds_reader_t *r = sl_calloc(ds->a, 1, sizeof *r);
    if (r == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for a Parquet reader");
    r->ds = ds;
    r->num_slots = m->num_slots;
    r->slot_read = sl_calloc(ds->a, m->num_slots + 1, 1);
    r->buf = sl_wh_row_buf_new(m->schema, ds->a);
    if (r->slot_read == NULL || r->buf == NULL) {
        sl_wh_pqds_reader_destroy(r);
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for a Parquet reader");
    }
    for (uint32_t s = 0; s < m->num_slots; s++) {
        const sl_wh_colmap_slot_t *sl = &m->slots[s];
        bool feature = sl->target == SL_WH_MAP_DENSE || sl->target == SL_WH_MAP_SPARSE ||
                       sl->target == SL_WH_MAP_WEIGHTED;
        bool want = !feature || features == NULL;
        for (uint32_t i = 0; !want && i < nf; i++)
            want = strcmp(features[i], sl->name) == 0;
        r->slot_read[s] = want;
    }
    sl_err_t rc = imp_pqc_new(ds->pq, r->slot_read, features, nf, &r->cols, err);
    if (rc != SL_OK) {
        sl_wh_pqds_reader_destroy(r);
        return rc;
    }
    *out = r;
    return SL_OK;
}

void sl_wh_pqds_reader_set_maps(sl_wh_pqds_reader_t *r, const sl_wh_value_map_t *maps)
{
    imp_pqc_set_maps(r->cols, maps);
}

sl_err_t sl_wh_pqds_reader_set_threads(sl_wh_pqds_reader_t *r, uint32_t threads, sl_error_t *err)
{
    return imp_pqc_set_threads(r->cols, threads, err);
}

void sl_wh_pqds_reader_destroy(sl_wh_pqds_reader_t *r)
{
    if (r == NULL) return;
    imp_pqc_destroy(r->cols);
    sl_wh_row_buf_destroy(r->buf);
    sl_free(r->ds->a, r->slot_read, r->num_slots + 1);
    sl_free(r->ds->a, r, sizeof *r);
}

typedef struct read_ctx {
    const ds_file_t *file;
    int64_t id_base;
    uint64_t first_row, from, to;
    bool past;     /* the rows after `to` began: the read stopped on purpose */
    uint64_t seen; /* rows of the split the file gave so far */
    sl_wh_pqds_row_fn fn;
    void *ctx;
    sl_error_t *err;
} read_ctx_t;

static sl_err_t on_row(void *ctx, uint64_t line, sl_err_t rc, const sl_error_t *perr,
                       sl_wh_row_t *row, bool has_sid)
{
    read_ctx_t *c = ctx;
    uint64_t r = line - 1 - c->first_row; /* line counts the file's rows from 1 */
    c->seen = r + 1;
    if (r < c->from) return SL_OK;
    if (r >= c->to) {
        c->past = true;
        return SL_ERR_CLOSED;
    }
    if (rc != SL_OK)
        return sl_error_set(c->err, rc, "%s row %llu: %s", c->file->rel, (unsigned long long)line,
                            perr->msg);
    if (!has_sid) row->sample_id = c->id_base + (int64_t)line;
    return c->fn(c->ctx, r, row, c->err);
}

sl_err_t sl_wh_pqds_read(sl_wh_pqds_reader_t *r, const sl_wh_split_t *sp, uint64_t from,
                         uint64_t to, sl_wh_pqds_row_fn fn, void *ctx, sl_error_t *err)
{
    const sl_wh_pqds_t *ds = r->ds;
    ds_file_t key = {.rel = (char *)sp->path};
    const ds_file_t *f = bsearch(&key, ds->files, ds->num_files, sizeof *f, by_rel);
    if (f == NULL)
        return sl_error_set(err, SL_ERR_NOT_FOUND, "split of %s: no such file in the dataset",
                            sp->path);
    if (from >= to) return SL_OK;
    sl_err_t prc = check_pinned(r, f, sp, err);
    if (prc != SL_OK) return prc;
    read_ctx_t c = {.file = f,
                    .id_base = (int64_t)(f - ds->files) * FILE_ID_STRIDE,
                    .first_row = sp->first_row,
                    .from = from,
                    .to = to,
                    .fn = fn,
                    .ctx = ctx,
                    .err = err};
    sl_err_t rc =
        imp_pq_read_slots(ds->pq, r->slot_read, f->full, f->etag, sp->stripe_begin, sp->stripe_end,
                          sp->first_row, sp->first_row + from, r->buf, on_row, &c, err);
    if (rc == SL_ERR_CLOSED && c.past) rc = SL_OK;
    if (rc == SL_OK && !c.past && c.seen < to) /* the file ended before the split did */
        rc = sl_error_set(err, SL_ERR_CORRUPT,
                          "%s row groups [%u, %u): rows end at %llu of the split, before its row "
                          "%llu (the file changed since the splits were cut?)",
                          f->rel, sp->stripe_begin, sp->stripe_end, (unsigned long long)c.seen,
                          (unsigned long long)to);
    return rc;
}

/* ---- reading in column form ---- */

typedef struct stripe_ctx {
    sl_wh_pqds_reader_t *r;
    const ds_file_t *file;
    uint64_t first_row; /* the split's first file row */
    uint64_t first;     /* split row of the stripe being built */
    sl_wh_pqds_stripe_fn fn;
    void *ctx;
    /* a stripe taken (stripe_take) and not yet handed on (stripe_hand):
     * its rows, their arena (disowned by the builder) and its end */
    sl_wh_rows_t held;
    sl_arena_t *held_arena;
    uint64_t held_end;
} stripe_ctx_t;

/* on_take: the rows taken, their arena let go of by the builder. */
static sl_err_t stripe_take(void *ctx, uint64_t next, sl_error_t *err)
{
    stripe_ctx_t *c = ctx;
    sl_err_t rc = imp_pqc_take(c->r->cols, true, &c->held, err);
    if (rc != SL_OK) return rc;
    c->held_arena = imp_pqc_arena(c->r->cols);
    imp_pqc_disown(c->r->cols);
    c->held_end = next - c->first_row;
    return SL_OK;
}

/* on_hand, beside the helpers' next job: touches only the taken stripe
 * and the builder's spare (an arena fn does not take over goes there). */
static sl_err_t stripe_hand(void *ctx, sl_error_t *err)
{
    stripe_ctx_t *c = ctx;
    sl_arena_t *owned = c->held_arena;
    c->held_arena = NULL;
    sl_err_t rc = c->fn(c->ctx, &c->held, c->first, c->held_end, &owned, err);
    imp_pqc_give_back(c->r->cols, owned);
    c->first = c->held_end;
    return rc;
}

/* Any other stripe (imp_pqc_read_t.on_full): taken and handed on at once. */
static sl_err_t stripe_full(void *ctx, uint64_t next, sl_error_t *err)
{
    sl_err_t rc = stripe_take(ctx, next, err);
    return rc == SL_OK ? stripe_hand(ctx, err) : rc;
}

static sl_err_t stripe_bad(void *ctx, uint64_t line, const sl_error_t *why, sl_error_t *err)
{
    stripe_ctx_t *c = ctx;
    return sl_error_set(err, why->code ? why->code : SL_ERR_CORRUPT, "%s row %llu: %s",
                        c->file->rel, (unsigned long long)line, why->msg);
}

sl_err_t sl_wh_pqds_read_stripes(sl_wh_pqds_reader_t *r, const sl_wh_split_t *sp, uint64_t from,
                                 uint64_t to, uint32_t stripe_rows, sl_wh_pqds_stripe_fn fn,
                                 void *ctx, sl_error_t *err)
{
    const sl_wh_pqds_t *ds = r->ds;
    ds_file_t key = {.rel = (char *)sp->path};
    const ds_file_t *f = bsearch(&key, ds->files, ds->num_files, sizeof *f, by_rel);
    if (f == NULL)
        return sl_error_set(err, SL_ERR_NOT_FOUND, "split of %s: no such file in the dataset",
                            sp->path);
    if (from >= to) return SL_OK;
    sl_err_t prc = check_pinned(r, f, sp, err);
    if (prc != SL_OK) return prc;
    stripe_ctx_t c = {
        .r = r, .file = f, .first_row = sp->first_row, .first = from, .fn = fn, .ctx = ctx};
    imp_pqc_read_t rd = {.input = f->full,
                         .if_etag = f->etag,
                         .begin = sp->stripe_begin,
                         .end = sp->stripe_end,
                         .first_row = sp->first_row,
                         .lo = sp->first_row + from,
                         .hi = sp->first_row + to,
                         .id_base = (int64_t)(f - ds->files) * FILE_ID_STRIDE,
                         .flush_rows = stripe_rows ? stripe_rows : 1,
                         .on_full = stripe_full,
                         .on_bad = stripe_bad,
                         .on_take = stripe_take,
                         .on_hand = stripe_hand,
                         .ctx = &c};
    sl_err_t rc = imp_pqc_read(ds->pq, r->cols, &rd, err);
    sl_arena_destroy(c.held_arena);        /* NULL: every stripe taken was handed on */
    if (rc == SL_OK && rd.reached < rd.hi) /* the file ended before the split did */
        rc = sl_error_set(err, SL_ERR_CORRUPT,
                          "%s row groups [%u, %u): rows end at %llu of the split, before its row "
                          "%llu (the file changed since the splits were cut?)",
                          f->rel, sp->stripe_begin, sp->stripe_end,
                          (unsigned long long)(rd.reached - sp->first_row), (unsigned long long)to);
    if (rc == SL_OK && imp_pqc_count(r->cols) > 0) rc = stripe_full(&c, rd.hi, err);
    if (rc != SL_OK && imp_pqc_count(r->cols) > 0) { /* a failed read leaves no rows behind */
        sl_wh_rows_t drop;
        sl_error_t e2 = {0};
        imp_pqc_take(r->cols, false, &drop, &e2);
    }
    return rc;
}

/* verify (every checksum of every file, then a full decode of every stripe
 * whose checksums passed; each problem reported with file, stripe and
 * stream) and inspect (a summary of a table from its footers). */
#include "table_tools.h"
#include "wh_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- verify ---- */

typedef struct vctx {
    sl_wh_problem_fn fn;
    void *ctx;
    sl_wh_verify_stats_t *stats;
    sl_error_t *err;
    sl_err_t first;
    /* A table in an object store: its files are read through the table's
     * store (its request timeout and attempts, the listing's pins), not a
     * store of default options opened per file. NULL otherwise. */
    const sl_wh_table_t *store_table;
} vctx_t;

static void report(vctx_t *v, const char *file, int64_t stripe, const char *stream, sl_err_t code,
                   const char *msg)
{
    v->stats->problems++;
    if (v->first == SL_OK) {
        v->first = code;
        sl_error_set(v->err, code, "%s", msg);
    }
    if (v->fn != NULL) {
        sl_wh_problem_t p = {file, stripe, stream, code, msg};
        v->fn(v->ctx, &p);
    }
}

/* Verify one opened-or-not file: path (fd) or memory. */
static void verify_one(vctx_t *v, const char *path, const void *mem, size_t len, const char *name,
                       const sl_wh_limits_t *limits, const sl_allocator_t *a,
                       const sl_wh_schema_t *table_schema)
{
    sl_error_t e;
    sl_error_clear(&e);
    sl_wh_read_opts_t o;
    memset(&o, 0, sizeof o);
    o.allocator = a;
    o.skip_checksums = true; /* checked here, stream by stream, first */
    if (limits) o.limits = *limits;
    sl_wh_reader_t *r;
    sl_err_t rc;
    if (v->store_table != NULL) {
        rc = wh_table_open_reader(v->store_table, name, &o, &r, &e);
    } else {
        rc = path ? sl_wh_reader_open(path, name, &o, &r, &e)
                  : sl_wh_reader_open_mem(mem, len, name, &o, &r, &e);
    }
    v->stats->files++;
    if (rc != SL_OK) {
        v->stats->bad_files++;
        report(v, name, -1, NULL, rc, e.msg);
        return;
    }
    wh_file_t *f = wh_reader_file(r);
    bool bad = false;
    if (table_schema != NULL && !sl_wh_schema_equal(f->schema, table_schema)) {
        char msg[SL_ERROR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "%s: footer: schema differs from the table's _schema", name);
        report(v, name, -1, NULL, SL_ERR_CORRUPT, msg);
        bad = true;
    }
    wh_buf_t buf = {0};
    for (uint32_t s = 0; s < f->num_stripes; s++) {
        const wh_stripe_t *sp = &f->stripes[s];
        v->stats->stripes++;
        if (!wh_buf_reserve(&buf, f->a, (size_t)sp->length + 1)) {
            report(v, name, s, NULL, SL_ERR_NOMEM, "out of memory");
            bad = true;
            break;
        }
        rc = wh_source_read(&f->src, buf.data, (size_t)sp->length, sp->offset, &e);
        if (rc != SL_OK) {
            char msg[SL_ERROR_MSG_MAX + 64];
            snprintf(msg, sizeof msg, "stripe %u: %s", s, e.msg);
            report(v, name, s, NULL, rc, msg);
            bad = true;
            break;
        }
        bool sums_ok = true;
        for (uint32_t k = 0; k < sp->num_streams; k++) {
            const wh_stream_t *st = &f->streams[sp->first_stream + k];
            v->stats->streams++;
            v->stats->bytes += st->stored_size;
            if (wh_stream_checksum_ok(st, buf.data + (st->offset - sp->offset))) continue;
            char lb[SL_WH_NAME_MAX + 40], msg[SL_ERROR_MSG_MAX + 600], sn[SL_WH_NAME_MAX + 40];
            snprintf(sn, sizeof sn, "'%s' %s", st->name,
                     sl_wh_stream_kind_name((sl_wh_stream_kind_t)st->kind));
            snprintf(msg, sizeof msg, "%s stripe %u %s: checksum mismatch", name, s,
                     wh_stream_label(st, lb, sizeof lb));
            report(v, name, s, sn, SL_ERR_CORRUPT, msg);
            sums_ok = false;
            bad = true;
        }
        if (!sums_ok) continue;
        const sl_wh_rows_t *rows;
        rc = sl_wh_reader_read_stripe(r, s, &rows, &e);
        if (rc == SL_OK) rc = sl_batch_validate(&rows->batch, &e);
        if (rc != SL_OK) {
            report(v, name, s, NULL, rc, e.msg);
            bad = true;
            continue;
        }
        v->stats->rows += sp->rows;
    }
    wh_buf_free(&buf, f->a);
    if (bad) v->stats->bad_files++;
    sl_wh_reader_close(r);
}

static sl_err_t finish(vctx_t *v)
{
    return v->first;
}

sl_err_t sl_wh_verify_file(const char *path, const char *display_name, const sl_allocator_t *a,
                           sl_wh_problem_fn problem, void *ctx, sl_wh_verify_stats_t *stats,
                           sl_error_t *err)
{
    sl_wh_verify_stats_t local;
    if (stats == NULL) stats = &local;
    memset(stats, 0, sizeof *stats);
    vctx_t v = {problem, ctx, stats, err, SL_OK, NULL};
    verify_one(&v, path, NULL, 0, display_name ? display_name : path, NULL, a, NULL);
    return finish(&v);
}

sl_err_t sl_wh_verify_mem(const void *data, size_t len, const char *display_name,
                          const sl_wh_limits_t *limits, const sl_allocator_t *a,
                          sl_wh_problem_fn problem, void *ctx, sl_wh_verify_stats_t *stats,
                          sl_error_t *err)
{
    sl_wh_verify_stats_t local;
    if (stats == NULL) stats = &local;
    memset(stats, 0, sizeof *stats);
    vctx_t v = {problem, ctx, stats, err, SL_OK, NULL};
    verify_one(&v, NULL, data ? data : "", len, display_name ? display_name : "(memory)", limits, a,
               NULL);
    return finish(&v);
}

sl_err_t sl_wh_verify_table(const char *dir, const sl_allocator_t *a, sl_wh_problem_fn problem,
                            void *ctx, sl_wh_verify_stats_t *stats, sl_error_t *err)
{
    return sl_wh_verify_table_with(dir, NULL, a, problem, ctx, stats, err);
}

sl_err_t sl_wh_verify_table_with(const char *dir, const struct sl_store_opts *store,
                                 const sl_allocator_t *a, sl_wh_problem_fn problem, void *ctx,
                                 sl_wh_verify_stats_t *stats, sl_error_t *err)
{
    sl_wh_verify_stats_t local;
    if (stats == NULL) stats = &local;
    memset(stats, 0, sizeof *stats);
    vctx_t v = {problem, ctx, stats, err, SL_OK, NULL};
    sl_wh_table_t *t;
    sl_error_t e;
    sl_error_clear(&e);
    sl_err_t rc = sl_wh_table_open_with(dir, store, a, &t, &e);
    if (rc != SL_OK) {
        /* a bad _schema is a problem of the table; a missing directory is not */
        if (rc == SL_ERR_CORRUPT || rc == SL_ERR_TRUNCATED || rc == SL_ERR_VERSION) {
            report(&v, SL_WH_SCHEMA_FILE, -1, NULL, rc, e.msg);
            return finish(&v);
        }
        return sl_error_set(err, rc, "%s", e.msg);
    }
    v.store_table = t->store != NULL ? t : NULL;
    for (uint32_t p = 0; p < sl_wh_table_num_partitions(t); p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        for (uint32_t i = 0; i < part->num_files; i++) {
            size_t n = strlen(dir) + strlen(part->files[i]) + 2;
            char *path = sl_alloc(a, n);
            if (path == NULL) {
                sl_wh_table_close(t);
                return sl_error_set(err, SL_ERR_NOMEM, "verify %s", dir);
            }
            snprintf(path, n, "%s/%s", dir, part->files[i]);
            verify_one(&v, path, NULL, 0, part->files[i], NULL, a, sl_wh_table_schema(t));
            sl_free(a, path, n);
        }
    }
    sl_wh_table_close(t);
    return finish(&v);
}

/* ---- inspect ---- */

typedef struct colacc {
    sl_wh_column_bytes_t *cols;
    uint32_t n, cap;
} colacc_t;

static const char *column_kind(const wh_file_t *f, const wh_stream_t *st)
{
    switch (st->kind) {
    case SL_WH_STREAM_SAMPLE_ID:
    case SL_WH_STREAM_SESSION_ID:
    case SL_WH_STREAM_TIMESTAMP:
    case SL_WH_STREAM_LABEL:
    case SL_WH_STREAM_INVERSE:
        return sl_wh_stream_kind_name(st->kind);
    default: {
        const sl_wh_feature_t *fe = sl_wh_schema_find(f->schema, st->name);
        return fe ? sl_wh_kind_name(fe->kind) : "unknown";
    }
    }
}

static sl_wh_column_bytes_t *column_of(sl_wh_inspect_t *ins, colacc_t *acc, const char *name,
                                       const char *kind)
{
    for (uint32_t i = acc->n; i-- > 0;)
        if (strcmp(acc->cols[i].name, name) == 0 && strcmp(acc->cols[i].kind, kind) == 0)
            return &acc->cols[i];
    if (acc->n == acc->cap) {
        uint32_t cap = acc->cap ? acc->cap * 2 : 64;
        sl_wh_column_bytes_t *c = sl_arena_calloc(ins->arena, cap, sizeof *c);
        if (c == NULL) return NULL;
        if (acc->n) memcpy(c, acc->cols, (size_t)acc->n * sizeof *c);
        acc->cols = c;
        acc->cap = cap;
    }
    sl_wh_column_bytes_t *c = &acc->cols[acc->n];
    c->name = sl_arena_strdup(ins->arena, name);
    c->kind = kind; /* static strings */
    if (c->name == NULL) return NULL;
    acc->n++;
    return c;
}

void sl_wh_inspect_destroy(sl_wh_inspect_t *ins)
{
    if (ins == NULL) return;
    sl_wh_table_t *t = ins->table;
    sl_arena_destroy(ins->arena);
    sl_wh_table_close(t);
}

sl_err_t sl_wh_inspect_table(const char *dir, const sl_wh_filter_t *filter, const sl_allocator_t *a,
                             sl_wh_inspect_t **out, sl_error_t *err)
{
    return sl_wh_inspect_table_with(dir, NULL, filter, a, out, err);
}

sl_err_t sl_wh_inspect_table_with(const char *dir, const struct sl_store_opts *store,
                                  const sl_wh_filter_t *filter, const sl_allocator_t *a,
                                  sl_wh_inspect_t **out, sl_error_t *err)
{
    *out = NULL;
    if (a == NULL) a = sl_allocator_default();
    sl_wh_table_t *t;
    sl_err_t rc = sl_wh_table_open_with(dir, store, a, &t, err);
    if (rc != SL_OK) return rc;
    sl_arena_t *arena = sl_arena_new(a, 0);
    sl_wh_inspect_t *ins = arena ? sl_arena_calloc(arena, 1, sizeof *ins) : NULL;
    if (ins == NULL) {
        sl_arena_destroy(arena);
        sl_wh_table_close(t);
        return sl_error_set(err, SL_ERR_NOMEM, "inspect %s", dir);
    }
    ins->arena = arena;
    ins->table = t;
    ins->dir = sl_wh_table_dir(t);
    ins->schema = sl_wh_table_schema(t);
    uint32_t np = sl_wh_table_num_partitions(t), nfiles = 0;
    for (uint32_t p = 0; p < np; p++)
        nfiles += sl_wh_table_partition(t, p)->num_files;
    ins->partitions = sl_arena_calloc(arena, (size_t)np + 1, sizeof *ins->partitions);
    ins->files = sl_arena_calloc(arena, (size_t)nfiles + 1, sizeof *ins->files);
    if (ins->partitions == NULL || ins->files == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "inspect %s", dir);
        goto fail;
    }
    colacc_t acc = {0};
    sl_wh_group_summary_t *groups = NULL;
    uint32_t ngroups = 0, cap_groups = 0;
    /* the schema's columns first, in schema order, so the listing reads well */
    const sl_wh_schema_t *sc = ins->schema;
    static const char *const idk[3] = {"sample_id", "session_id", "timestamp"};
    for (uint32_t c = 0; c < 3; c++)
        if (column_of(ins, &acc, sl_wh_schema_column(sc, (sl_wh_column_t)(1u << c)), idk[c]) ==
            NULL)
            goto nomem;
    for (uint32_t i = 0; i < sl_wh_schema_num_labels(sc); i++)
        if (column_of(ins, &acc, sl_wh_schema_label(sc, i), "label") == NULL) goto nomem;
    for (uint32_t i = 0; i < sl_wh_schema_num_features(sc); i++) {
        const sl_wh_feature_t *fe = sl_wh_schema_feature(sc, i);
        if (column_of(ins, &acc, fe->name, sl_wh_kind_name(fe->kind)) == NULL) goto nomem;
    }
    for (uint32_t p = 0; p < np; p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        if (!sl_wh_filter_match(filter, part)) continue;
        sl_wh_partition_summary_t *ps = &ins->partitions[ins->num_partitions++];
        ps->partition = part;
        for (uint32_t i = 0; i < part->num_files; i++) {
            size_t n = strlen(dir) + strlen(part->files[i]) + 2;
            char *path = sl_arena_alloc(arena, n);
            if (path == NULL) goto nomem;
            snprintf(path, n, "%s/%s", dir, part->files[i]);
            wh_file_t *f;
            /* in a store: through the table's own store and its options */
            rc = t->store != NULL ? wh_table_open_files(t, 1, &part->files[i], &f, err)
                                  : wh_file_open(path, NULL, 0, part->files[i], NULL, a, &f, err);
            if (rc != SL_OK) goto fail;
            sl_wh_file_summary_t *fs = &ins->files[ins->num_files++];
            fs->path = part->files[i];
            fs->partition = part->name;
            fs->rows = f->rows;
            fs->stripes = f->num_stripes;
            fs->file_bytes = f->src.size;
            fs->footer_bytes = f->footer_bytes;
            fs->session_clustered = f->session_clustered;
            fs->stripe_rows = sl_arena_alloc(arena, ((size_t)f->num_stripes + 1) * 4);
            if (fs->stripe_rows == NULL) {
                wh_file_close(f);
                goto nomem;
            }
            ps->files++;
            ps->rows += f->rows;
            ps->bytes += f->src.size;
            ins->rows += f->rows;
            ins->stripes += f->num_stripes;
            ins->file_bytes += f->src.size;
            bool ok = true;
            /* stripes of a file list their streams in the same order: remember
             * the column of each position instead of searching per stream */
            uint32_t ncache = f->num_stripes ? f->stripes[0].num_streams : 0;
            uint32_t *cache = sl_arena_alloc(arena, ((size_t)ncache + 1) * 4);
            if (cache == NULL) {
                wh_file_close(f);
                goto nomem;
            }
            for (uint32_t k = 0; k < ncache; k++)
                cache[k] = UINT32_MAX;
            for (uint32_t s = 0; s < f->num_stripes && ok; s++) {
                const wh_stripe_t *sp = &f->stripes[s];
                fs->stripe_rows[s] = sp->rows;
                for (uint32_t k = 0; k < sp->num_streams && ok; k++) {
                    const wh_stream_t *st = &f->streams[sp->first_stream + k];
                    const char *kind = column_kind(f, st);
                    sl_wh_column_bytes_t *c = NULL;
                    if (k < ncache && cache[k] != UINT32_MAX &&
                        strcmp(acc.cols[cache[k]].name, st->name) == 0 &&
                        strcmp(acc.cols[cache[k]].kind, kind) == 0)
                        c = &acc.cols[cache[k]];
                    if (c == NULL && (c = column_of(ins, &acc, st->name, kind)) != NULL &&
                        k < ncache)
                        cache[k] = (uint32_t)(c - acc.cols);
                    if (c == NULL) {
                        ok = false;
                        break;
                    }
                    uint64_t raw = st->kind == SL_WH_STREAM_PRESENT
                                       ? st->raw_size
                                       : st->value_count * wh_kind_width(st->kind);
                    if (st->kind != SL_WH_STREAM_LENGTHS && st->kind != SL_WH_STREAM_PRESENT &&
                        st->kind != SL_WH_STREAM_WEIGHTS)
                        c->values += st->value_count;
                    c->raw_bytes += raw;
                    c->stored_bytes += st->stored_size;
                    ins->raw_bytes += raw;
                    ins->stored_bytes += st->stored_size;
                }
                for (uint32_t g = 0; g < f->num_groups && ok; g++) {
                    const char *gname = f->groups[g].spec.name;
                    uint32_t gi = 0;
                    while (gi < ngroups && strcmp(groups[gi].name, gname) != 0)
                        gi++;
                    if (gi == ngroups) {
                        if (ngroups == cap_groups) {
                            uint32_t cap = cap_groups ? cap_groups * 2 : 8;
                            sl_wh_group_summary_t *ng = sl_arena_calloc(arena, cap, sizeof *ng);
                            if (ng == NULL) {
                                ok = false;
                                break;
                            }
                            if (ngroups) memcpy(ng, groups, ngroups * sizeof *ng);
                            groups = ng;
                            cap_groups = cap;
                        }
                        groups[gi].name = sl_arena_strdup(arena, gname);
                        if (groups[gi].name == NULL) {
                            ok = false;
                            break;
                        }
                        ngroups++;
                    }
                    groups[gi].rows += sp->rows;
                    groups[gi].unique_rows += sp->unique_rows[g];
                    const wh_stream_t *inv = wh_slot_stream(f, s, wh_slot_inverse(f, g));
                    groups[gi].stored_bytes += inv->stored_size;
                    for (uint32_t k = 0; k < f->groups[g].spec.num_features; k++)
                        for (uint32_t role = 0; role < 3; role++) {
                            const wh_stream_t *x = wh_slot_stream(
                                f, s, wh_slot_feature(f, f->groups[g].features[k], role));
                            if (x != NULL) groups[gi].stored_bytes += x->stored_size;
                        }
                }
            }
            wh_file_close(f);
            if (!ok) goto nomem;
        }
    }
    ins->num_columns = acc.n;
    ins->columns = acc.cols;
    ins->num_groups = ngroups;
    ins->groups = groups;
    ins->compression_ratio =
        ins->stored_bytes ? (double)ins->raw_bytes / (double)ins->stored_bytes : 1.0;
    uint64_t gr = 0, gu = 0;
    for (uint32_t g = 0; g < ngroups; g++) {
        gr += groups[g].rows;
        gu += groups[g].unique_rows;
    }
    ins->dedup_ratio = gu ? (double)gr / (double)gu : 1.0;
    *out = ins;
    return SL_OK;
nomem:
    rc = sl_error_set(err, SL_ERR_NOMEM, "inspect %s", dir);
fail:
    sl_wh_inspect_destroy(ins);
    return rc;
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 1.0;
}

json_t *sl_wh_inspect_to_json(const sl_wh_inspect_t *ins, bool detail)
{
    json_t *root = json_object();
    json_t *parts = json_array(), *files = json_array(), *cols = json_array(),
           *groups = json_array();
    json_t *schema = sl_wh_schema_to_json(ins->schema);
    if (root == NULL || parts == NULL || files == NULL || cols == NULL || groups == NULL ||
        schema == NULL) {
        json_decref(root);
        json_decref(parts);
        json_decref(files);
        json_decref(cols);
        json_decref(groups);
        json_decref(schema);
        return NULL;
    }
    int bad = 0;
    bad |= json_object_set_new(root, "table", json_string(ins->dir));
    bad |= json_object_set_new(root, "schema", schema);
    bad |= json_object_set_new(root, "rows", json_integer((json_int_t)ins->rows));
    bad |= json_object_set_new(root, "stripes", json_integer((json_int_t)ins->stripes));
    bad |= json_object_set_new(root, "file_count", json_integer(ins->num_files));
    bad |= json_object_set_new(root, "file_bytes", json_integer((json_int_t)ins->file_bytes));
    bad |= json_object_set_new(root, "raw_bytes", json_integer((json_int_t)ins->raw_bytes));
    bad |= json_object_set_new(root, "stored_bytes", json_integer((json_int_t)ins->stored_bytes));
    bad |= json_object_set_new(root, "compression_ratio", json_real(ins->compression_ratio));
    bad |= json_object_set_new(root, "dedup_ratio", json_real(ins->dedup_ratio));
    bad |= json_object_set_new(root, "bytes_per_row", json_real(ratio(ins->file_bytes, ins->rows)));
    for (uint32_t i = 0; i < ins->num_partitions; i++) {
        const sl_wh_partition_summary_t *p = &ins->partitions[i];
        bad |= json_array_append_new(
            parts, json_pack("{s:s, s:i, s:I, s:I}", "name", p->partition->name, "files", p->files,
                             "rows", (json_int_t)p->rows, "bytes", (json_int_t)p->bytes));
    }
    bad |= json_object_set_new(root, "partitions", parts);
    for (uint32_t i = 0; i < ins->num_files; i++) {
        const sl_wh_file_summary_t *f = &ins->files[i];
        json_t *o = json_pack(
            "{s:s, s:s, s:I, s:i, s:I, s:I, s:b}", "path", f->path, "partition", f->partition,
            "rows", (json_int_t)f->rows, "stripes", f->stripes, "bytes", (json_int_t)f->file_bytes,
            "footer_bytes", (json_int_t)f->footer_bytes, "session_clustered", f->session_clustered);
        if (o != NULL && detail) {
            json_t *sr = json_array();
            for (uint32_t s = 0; sr != NULL && s < f->stripes; s++)
                bad |= json_array_append_new(sr, json_integer(f->stripe_rows[s]));
            bad |= json_object_set_new(o, "stripe_rows", sr);
        }
        bad |= json_array_append_new(files, o);
    }
    bad |= json_object_set_new(root, "files", files);
    for (uint32_t i = 0; i < ins->num_columns; i++) {
        const sl_wh_column_bytes_t *c = &ins->columns[i];
        bad |= json_array_append_new(
            cols,
            json_pack("{s:s, s:s, s:I, s:I, s:I, s:f}", "name", c->name, "kind", c->kind, "values",
                      (json_int_t)c->values, "raw_bytes", (json_int_t)c->raw_bytes, "stored_bytes",
                      (json_int_t)c->stored_bytes, "ratio", ratio(c->raw_bytes, c->stored_bytes)));
    }
    bad |= json_object_set_new(root, "columns", cols);
    for (uint32_t i = 0; i < ins->num_groups; i++) {
        const sl_wh_group_summary_t *g = &ins->groups[i];
        bad |= json_array_append_new(
            groups,
            json_pack("{s:s, s:I, s:I, s:f, s:I}", "name", g->name, "rows", (json_int_t)g->rows,
                      "unique_rows", (json_int_t)g->unique_rows, "dedup_ratio",
                      ratio(g->rows, g->unique_rows), "stored_bytes", (json_int_t)g->stored_bytes));
    }
    bad |= json_object_set_new(root, "dedup_groups", groups);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

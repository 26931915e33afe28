/* The import driver: resolves the schema and the table, runs one worker
 * thread per input file (up to opts.threads) that reads the file in large
 * chunks, cuts it into lines, parses each line (import_criteo.c,
 * import_jsonl.c) and appends the rows to a data file of its own; then
 * commits all files or none.
 *
 * Why one output file per input: the output is then a function of the
 * inputs alone (thread timing cannot reorder rows), parsing and encoding
 * scale with the cores without a hand-off queue, and a worker's memory is
 * one read chunk plus one writer stripe.
 *
 * Why staging names: a worker commits its file under a hidden name
 * (".import-PID-NNNNN.slc", ignored by readers); only when every worker
 * has finished without a fatal error (or a bad row in strict mode) are the
 * files linked under their final names "part-NNNNN.slc" (link + unlink, so
 * an existing file is never replaced). NNNNN continues after the highest
 * part number already in the partition. */
#include "common/fileio.h"
#include "import_internal.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SAMPLE_ID_STRIDE 10000000000ll /* sample id = (first part + input) * 1e10 + line */

sl_wh_import_format_t sl_wh_import_format_parse(const char *name)
{
    if (name == NULL) return 0;
    if (strcmp(name, "criteo") == 0) return SL_WH_IMPORT_CRITEO;
    if (strcmp(name, "jsonl") == 0) return SL_WH_IMPORT_JSONL;
    if (strcmp(name, "csv") == 0) return SL_WH_IMPORT_CSV;
    if (strcmp(name, "parquet") == 0) return SL_WH_IMPORT_PARQUET;
    return 0;
}

sl_wh_import_opts_t sl_wh_import_opts_default(void)
{
    sl_wh_import_opts_t o;
    memset(&o, 0, sizeof o);
    o.format = SL_WH_IMPORT_CRITEO;
    o.writer = sl_wh_writer_opts_default();
    o.max_skipped_fraction = 0.01;
    return o;
}

static void *worker(void *arg)
{
    imp_shared_t *sh = arg;
    for (;;) {
        uint32_t j = atomic_fetch_add(&sh->next, 1);
        if (j >= sh->njobs || atomic_load(&sh->stop)) break;
        imp_run_job(sh, &sh->jobs[j]);
        atomic_fetch_add(&sh->files_done, 1);
    }
    pthread_mutex_lock(&sh->lock);
    atomic_fetch_sub(&sh->running, 1);
    pthread_cond_signal(&sh->done);
    pthread_mutex_unlock(&sh->lock);
    return NULL;
}

/* The highest NNNNN of "part-NNNNN.slc" in dir, plus one (0 when none). */
static uint32_t next_part_number(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    uint32_t next = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned v;
        char tail[8];
        if (sscanf(e->d_name, "part-%u%7s", &v, tail) == 2 && strcmp(tail, SL_WH_FILE_EXT) == 0 &&
            v >= next && v < UINT32_MAX - (1u << 20))
            next = v + 1;
    }
    closedir(d);
    return next;
}

/* The schema of the import: criteo's, the given one, the table's, or one
 * inferred from the inputs. Caller owns *out. */
static sl_err_t resolve_schema(const sl_wh_import_opts_t *o, sl_wh_schema_t **out,
                               sl_wh_csv_t **csv, imp_pq_t **pq, sl_error_t *err)
{
    const sl_allocator_t *a = o->allocator;
    *out = NULL;
    if (o->format == SL_WH_IMPORT_PARQUET) {
        if (o->schema != NULL || o->schema_path != NULL)
            return sl_error_set(err, SL_ERR_INVALID,
                                "parquet takes a column mapping (--mapping), not a schema");
        sl_err_t rc = imp_pq_open(o->inputs[0], o->mapping, a, pq, err);
        if (rc != SL_OK) return rc;
        *out = sl_wh_schema_clone(imp_pq_mapping(*pq)->schema, a);
        return *out ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "no memory for the schema");
    }
    if (o->format == SL_WH_IMPORT_CSV) {
        if (o->schema != NULL || o->schema_path != NULL)
            return sl_error_set(err, SL_ERR_INVALID,
                                "csv takes a column mapping (--mapping), not a schema");
        sl_err_t rc =
            sl_wh_csv_open(o->inputs[0], o->delimiter ? o->delimiter : ',', o->infer_lines,
                           o->mapping, a, o->on_mapping_problem, o->mapping_problem_ctx, csv, err);
        if (rc != SL_OK) return rc;
        *out = sl_wh_schema_clone(sl_wh_csv_mapping(*csv)->schema, a);
        return *out ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "no memory for the schema");
    }
    if (o->format == SL_WH_IMPORT_CRITEO) {
        if (o->schema != NULL || o->schema_path != NULL)
            return sl_error_set(err, SL_ERR_INVALID,
                                "the criteo format has a fixed schema; --schema is for jsonl");
        *out = sl_wh_criteo_schema(a);
        return *out ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "no memory for the schema");
    }
    if (o->format != SL_WH_IMPORT_JSONL)
        return sl_error_set(err, SL_ERR_INVALID, "unknown import format %d", (int)o->format);
    if (o->schema != NULL) {
        *out = sl_wh_schema_clone(o->schema, a);
        return *out ? SL_OK : sl_error_set(err, SL_ERR_NOMEM, "no memory for the schema");
    }
    if (o->schema_path != NULL) {
        json_error_t jerr;
        json_t *j = json_load_file(o->schema_path, JSON_REJECT_DUPLICATES, &jerr);
        if (j == NULL)
            return sl_error_set(err, SL_ERR_INVALID, "schema %s line %d: %s", o->schema_path,
                                jerr.line, jerr.text);
        sl_err_t rc = sl_wh_schema_from_json(j, a, out, err);
        json_decref(j);
        if (rc != SL_OK) sl_error_prefix(err, "schema %s: ", o->schema_path);
        return rc;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", o->table_dir, SL_WH_SCHEMA_FILE);
    if (access(path, F_OK) == 0) return sl_wh_schema_load(path, a, out, err);
    return sl_wh_jsonl_infer_schema(o->inputs, o->num_inputs, o->infer_lines, a, out, err);
}

static sl_err_t check_opts(const sl_wh_import_opts_t *o, sl_error_t *err)
{
    if (o->table_dir == NULL || *o->table_dir == '\0')
        return sl_error_set(err, SL_ERR_INVALID, "no table directory given");
    if (o->num_inputs == 0 || o->inputs == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "no input file given");
    uint32_t stdin_uses = 0;
    for (uint32_t i = 0; i < o->num_inputs; i++) {
        if (o->inputs[i] == NULL) return sl_error_set(err, SL_ERR_INVALID, "input %u is NULL", i);
        stdin_uses += strcmp(o->inputs[i], "-") == 0;
    }
    if (stdin_uses > 1)
        return sl_error_set(err, SL_ERR_INVALID, "standard input ('-') given more than once");
    return SL_OK;
}

static void report(imp_shared_t *sh, uint64_t total, double t0)
{
    const sl_wh_import_opts_t *o = sh->o;
    if (o->on_progress == NULL) return;
    sl_wh_import_progress_t p = {
        .rows_read = atomic_load(&sh->rows_read),
        .rows_written = atomic_load(&sh->rows_written),
        .rows_skipped = atomic_load(&sh->rows_skipped),
        .bytes_in = atomic_load(&sh->bytes_in),
        .bytes_in_total = total,
        .bytes_out = atomic_load(&sh->bytes_out),
        .files_done = atomic_load(&sh->files_done),
        .files_total = sh->njobs,
        .seconds = sl_clock_s() - t0,
    };
    o->on_progress(o->progress_ctx, &p);
}

/* Run the workers; the calling thread reports progress until they end. */
static sl_err_t run_workers(imp_shared_t *sh, uint32_t threads, uint64_t total, double t0,
                            sl_error_t *err)
{
    const sl_allocator_t *a = sh->o->allocator;
    pthread_t *tids = sl_calloc(a, threads, sizeof *tids);
    if (tids == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for threads");
    sl_clock_cond_init(&sh->done);
    pthread_mutex_init(&sh->lock, NULL);

    uint32_t started = 0;
    atomic_store(&sh->running, threads);
    for (; started < threads; started++)
        if (pthread_create(&tids[started], NULL, worker, sh) != 0) break;
    if (started < threads) {
        /* The threads that did start finish the work between them. */
        pthread_mutex_lock(&sh->lock);
        atomic_fetch_sub(&sh->running, threads - started);
        pthread_mutex_unlock(&sh->lock);
        if (started == 0) {
            sl_free(a, tids, (size_t)threads * sizeof *tids);
            pthread_cond_destroy(&sh->done);
            pthread_mutex_destroy(&sh->lock);
            return sl_error_set(err, SL_ERR_IO, "cannot start an import thread");
        }
    }
    double interval = sh->o->progress_interval > 0 ? sh->o->progress_interval : 0.2;
    pthread_mutex_lock(&sh->lock);
    while (atomic_load(&sh->running) > 0) {
        struct timespec ts = sl_clock_deadline_ns((uint64_t)(interval * 1e9));
        pthread_cond_timedwait(&sh->done, &sh->lock, &ts);
        if (atomic_load(&sh->running) == 0) break;
        pthread_mutex_unlock(&sh->lock);
        report(sh, total, t0);
        pthread_mutex_lock(&sh->lock);
    }
    pthread_mutex_unlock(&sh->lock);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    sl_free(a, tids, (size_t)threads * sizeof *tids);
    report(sh, total, t0);
    pthread_cond_destroy(&sh->done);
    pthread_mutex_destroy(&sh->lock);
    return SL_OK;
}

/* Link every staged file under its final name, or remove them all. */
static sl_err_t commit(imp_shared_t *sh, bool keep, sl_error_t *err)
{
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; i < sh->njobs; i++) {
        imp_job_t *j = &sh->jobs[i];
        if (!j->written) continue;
        char stage[4200], final[4200];
        snprintf(stage, sizeof stage, "%s/%s", sh->part_dir, j->stage);
        char name[32];
        snprintf(name, sizeof name, "part-%05u%s", j->part, SL_WH_FILE_EXT);
        snprintf(final, sizeof final, "%s/%s", sh->part_dir, name);
        if (keep && rc == SL_OK) {
            /* link fails on an existing name where rename would replace it;
             * rename only serves file systems without hard links. */
            int lr = link(stage, final);
            if (lr != 0 && errno != EEXIST) lr = rename(stage, final);
            if (lr != 0)
                rc = sl_error_set(err, SL_ERR_IO, "commit %s: %s", final, strerror(errno));
            else {
                sh->linked = true;
                const char *p = sh->o->partition;
                snprintf(j->res.output, sizeof j->res.output, "%s%s%s", p ? p : "",
                         p && *p ? "/" : "", name);
            }
        }
        unlink(stage);
    }
    if (keep && rc == SL_OK && !sh->o->writer.no_sync) rc = sl_io_sync_dir(sh->part_dir, err);
    return rc;
}

/* What an import is about to create, to take back when it fails: a table
 * directory that did not exist, or the schema file of an empty directory,
 * and the partition directories below the deepest one that existed. A
 * directory that existed before is never removed, and rmdir removes only
 * empty ones. */
typedef struct created {
    char path[4096];  /* table_dir/partition */
    size_t keep;      /* length of the longest prefix of path that existed */
    size_t table_len; /* length of table_dir in path */
    bool schema;      /* the schema file is ours */
} created_t;

static sl_err_t before_create(const char *table_dir, const char *partition, created_t *c,
                              sl_error_t *err)
{
    int n =
        snprintf(c->path, sizeof c->path, "%s%s%s", table_dir, *partition ? "/" : "", partition);
    if (n < 0 || (size_t)n >= sizeof c->path)
        return sl_error_set(err, SL_ERR_INVALID, "path too long: %s/%s", table_dir, partition);
    c->table_len = strlen(table_dir);
    char schema[4200];
    snprintf(schema, sizeof schema, "%s/%s", table_dir, SL_WH_SCHEMA_FILE);
    c->schema = access(schema, F_OK) != 0;
    /* Walk down from the table directory while each level exists. */
    struct stat st;
    c->keep = 0;
    for (size_t len = c->table_len; len <= (size_t)n; len++) {
        if (len < (size_t)n && c->path[len] != '/') continue;
        char save = c->path[len];
        c->path[len] = '\0';
        bool exists = stat(c->path, &st) == 0;
        c->path[len] = save;
        if (!exists) break;
        c->keep = len;
    }
    return SL_OK;
}

static void undo_create(created_t *c)
{
    if (c->path[0] == '\0') return; /* failed before anything was created */
    if (c->schema && c->table_len < sizeof c->path - 1) {
        char schema[4200];
        snprintf(schema, sizeof schema, "%.*s/%s", (int)c->table_len, c->path, SL_WH_SCHEMA_FILE);
        unlink(schema);
    }
    size_t len = strlen(c->path);
    while (len > c->keep && len >= c->table_len) {
        c->path[len] = '\0';
        if (rmdir(c->path) != 0 || len == c->table_len) break; /* not empty: not ours alone */
        do
            len--;
        while (len > c->table_len && c->path[len] != '/');
    }
}

/* The jobs: one per input, or, for a plain CSV file when there are more
 * threads than inputs, one per byte range of it. Caller owns *jobs. */
static sl_err_t plan_jobs(const sl_wh_import_opts_t *o, uint32_t threads, uint32_t first_part,
                          imp_job_t **jobs, uint32_t *njobs, sl_error_t *err)
{
    const sl_allocator_t *a = o->allocator;
    bool pq = o->format == SL_WH_IMPORT_PARQUET;
    uint32_t per = (o->format == SL_WH_IMPORT_CSV || pq) && threads > o->num_inputs
                       ? (threads + o->num_inputs - 1) / o->num_inputs
                       : 1;
    imp_range_t *ranges = per > 1 ? sl_calloc(a, IMP_MAX_RANGES, sizeof *ranges) : NULL;
    uint32_t *counts = sl_calloc(a, o->num_inputs, sizeof *counts);
    sl_err_t rc = SL_OK;
    if ((per > 1 && ranges == NULL) || counts == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for the import's plan");
    uint64_t total = 0;
    /* First pass: how many jobs each input makes. */
    for (uint32_t i = 0; rc == SL_OK && i < o->num_inputs; i++) {
        counts[i] = 1;
        if (pq && per > 1) {
            /* a job per range of row groups */
            uint32_t groups = 0;
            uint64_t *before = NULL;
            rc = imp_pq_row_groups(o->inputs[i], a, &groups, &before, err);
            if (before != NULL) sl_free(a, before, ((size_t)groups + 1) * sizeof *before);
            counts[i] = groups < 2 ? 1 : groups < per ? groups : per;
            continue;
        }
        struct stat st;
        if (per < 2 || strcmp(o->inputs[i], "-") == 0 || stat(o->inputs[i], &st) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        uint64_t min = o->range_min_bytes ? o->range_min_bytes : (uint64_t)4 << 20;
        uint64_t want = (uint64_t)st.st_size / min;
        counts[i] = want < 2 ? 1 : want < per ? (uint32_t)want : per;
    }
    for (uint32_t i = 0; i < o->num_inputs; i++)
        total += counts != NULL ? counts[i] : 0;
    imp_job_t *js = rc == SL_OK ? sl_calloc(a, total, sizeof *js) : NULL;
    if (rc == SL_OK && js == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for %llu jobs", (unsigned long long)total);
    uint32_t n = 0;
    for (uint32_t i = 0; rc == SL_OK && i < o->num_inputs; i++) {
        uint32_t got = 0;
        if (pq && counts[i] > 1) {
            uint32_t groups = 0, c = counts[i];
            uint64_t *before = NULL;
            rc = imp_pq_row_groups(o->inputs[i], a, &groups, &before, err);
            for (uint32_t k = 0; rc == SL_OK && k < c; k++, n++) {
                js[n].input = i;
                js[n].ranged = true;
                js[n].begin = (uint64_t)k * groups / c;
                js[n].end = (uint64_t)(k + 1) * groups / c;
                js[n].first_line = before[js[n].begin];
            }
            if (before != NULL) sl_free(a, before, ((size_t)groups + 1) * sizeof *before);
            continue;
        }
        if (counts[i] > 1) {
            char delim = o->delimiter ? o->delimiter : ',';
            rc = imp_csv_plan_ranges(o->inputs[i], delim, counts[i], a, ranges, &got, err);
            if (rc != SL_OK) break;
        }
        if (got <= 1) {
            js[n].input = i;
            n++;
            continue;
        }
        for (uint32_t k = 0; k < got; k++, n++) {
            js[n].input = i;
            js[n].ranged = true;
            js[n].begin = ranges[k].begin;
            js[n].end = ranges[k].end;
            js[n].first_line = ranges[k].first_line;
        }
    }
    for (uint32_t j = 0; rc == SL_OK && j < n; j++) {
        js[j].part = first_part + j;
        js[j].id_base = ((int64_t)first_part + js[j].input) * SAMPLE_ID_STRIDE;
        js[j].res.input = o->inputs[js[j].input];
        snprintf(js[j].stage, sizeof js[j].stage, ".import-%ld-%05u%s", (long)getpid(), js[j].part,
                 SL_WH_FILE_EXT);
    }
    sl_free(a, ranges, per > 1 ? IMP_MAX_RANGES * sizeof *ranges : 0);
    sl_free(a, counts, (size_t)o->num_inputs * sizeof *counts);
    if (rc != SL_OK) {
        if (js != NULL) sl_free(a, js, (size_t)total * sizeof *js);
        return rc;
    }
    if (n < total) {
        /* An input planned for ranges was read whole (compressed, or too
         * few records): the array shrinks to the jobs made, so that its
         * size is njobs. */
        imp_job_t *fit = sl_calloc(a, n, sizeof *fit);
        if (fit == NULL) {
            sl_free(a, js, (size_t)total * sizeof *js);
            return sl_error_set(err, SL_ERR_NOMEM, "no memory for %u jobs", n);
        }
        memcpy(fit, js, (size_t)n * sizeof *fit);
        sl_free(a, js, (size_t)total * sizeof *js);
        js = fit;
    }
    *jobs = js;
    *njobs = n;
    return SL_OK;
}

/* The refusal of an import that read without a fatal error: no row
 * written, or too many skipped. */
static sl_err_t refuse(const sl_wh_import_opts_t *o, const imp_shared_t *sh, sl_error_t *err)
{
    uint64_t read = 0, written = 0, skipped = 0;
    for (uint32_t j = 0; j < sh->njobs; j++) {
        read += sh->jobs[j].res.rows_read;
        written += sh->jobs[j].res.rows_written;
        skipped += sh->jobs[j].res.rows_skipped;
    }
    if (written == 0 && read == 0)
        return sl_error_set(err, SL_ERR_INVALID, "refused: the input holds no row");
    if (written == 0)
        return sl_error_set(err, SL_ERR_INVALID,
                            "refused: no row was written (%llu read, all skipped as bad)%s",
                            (unsigned long long)read,
                            o->format == SL_WH_IMPORT_CRITEO ? "; is the input Criteo TSV?" : "");
    if ((double)skipped > o->max_skipped_fraction * (double)read)
        return sl_error_set(err, SL_ERR_INVALID,
                            "refused: %llu of %llu rows (%.2f %%) were skipped as bad, more than "
                            "the allowed fraction %g (--max-skipped-fraction)",
                            (unsigned long long)skipped, (unsigned long long)read,
                            100.0 * (double)skipped / (double)read, o->max_skipped_fraction);
    return SL_OK;
}

/* Sum the jobs' counts per input into summary. */
static void summarize(const imp_shared_t *sh, sl_err_t rc, sl_wh_import_file_t *files,
                      sl_wh_import_summary_t *summary)
{
    for (uint32_t j = 0; j < sh->njobs; j++) {
        const imp_job_t *job = &sh->jobs[j];
        sl_wh_import_file_t *f = &files[job->input];
        f->rows_read += job->res.rows_read;
        f->rows_written += job->res.rows_written;
        f->rows_skipped += job->res.rows_skipped;
        f->bytes_in += job->res.bytes_in;
        f->bytes_out += job->res.bytes_out;
        if (f->output[0] == '\0') memcpy(f->output, job->res.output, sizeof f->output);
        if (f->first_error_line == 0 && job->res.first_error_line != 0) {
            f->first_error_line = job->res.first_error_line;
            memcpy(f->first_error, job->res.first_error, sizeof f->first_error);
        }
        for (uint32_t k = 0; k < job->num_first_bad; k++)
            if (summary->num_first_bad < SL_WH_IMPORT_FIRST_BAD)
                memcpy(summary->first_bad[summary->num_first_bad++], job->first_bad[k],
                       sizeof summary->first_bad[0]);
        if (rc == SL_OK && job->res.output[0] != '\0') summary->files_written++;
    }
    for (uint32_t i = 0; i < summary->num_files; i++) {
        const sl_wh_import_file_t *f = &files[i];
        summary->rows_read += f->rows_read;
        summary->rows_written += f->rows_written;
        summary->rows_skipped += f->rows_skipped;
        summary->bytes_in += f->bytes_in;
        if (rc == SL_OK) summary->bytes_out += f->bytes_out;
    }
    if (rc != SL_OK && !sh->linked) summary->rows_written = 0; /* nothing was committed */
}

sl_err_t sl_wh_import(const sl_wh_import_opts_t *o, sl_wh_import_summary_t *summary,
                      sl_error_t *err)
{
    if (summary != NULL) memset(summary, 0, sizeof *summary); /* also when it fails early */
    if (o != NULL && o->table_dir != NULL && sl_store_is_remote(o->table_dir))
        return wh_import_store(o, summary, err);
    return wh_import_into(o, 0, summary, err);
}

sl_err_t wh_import_into(const sl_wh_import_opts_t *o, uint32_t first_part,
                        sl_wh_import_summary_t *summary, sl_error_t *err)
{
    double t0 = sl_clock_s();
    if (summary != NULL) memset(summary, 0, sizeof *summary);
    if (o == NULL) return sl_error_set(err, SL_ERR_INVALID, "no import options");
    sl_err_t rc = check_opts(o, err);
    if (rc != SL_OK) return rc;
    const char *partition = o->partition != NULL ? o->partition : "";

    sl_wh_schema_t *schema = NULL;
    sl_wh_csv_t *csv = NULL;
    imp_pq_t *pq = NULL;
    created_t made = {0};
    imp_shared_t *sh = NULL;
    sl_wh_import_file_t *files = NULL;
    if ((rc = resolve_schema(o, &schema, &csv, &pq, err)) != SL_OK) goto out;
    if ((rc = sl_wh_partition_check(schema, partition, err)) != SL_OK) goto out;
    if ((rc = before_create(o->table_dir, partition, &made, err)) != SL_OK) goto out;
    if ((rc = sl_wh_table_create(o->table_dir, schema, err)) != SL_OK) {
        sl_error_prefix(err, "table %s: ", o->table_dir);
        goto out;
    }
    if ((rc = imp_make_dirs(o->table_dir, partition, err)) != SL_OK) goto out;

    sh = sl_calloc(o->allocator, 1, sizeof *sh);
    files = sl_calloc(o->allocator, o->num_inputs, sizeof *files);
    if (sh == NULL || files == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for %u inputs", o->num_inputs);
        goto out;
    }
    sh->o = o;
    sh->schema = schema;
    sh->csv = csv;
    sh->pq = pq;
    if (csv != NULL) sh->stdin_src = imp_csv_take_stdin(csv);
    int n = snprintf(sh->part_dir, sizeof sh->part_dir, "%s%s%s", o->table_dir,
                     *partition ? "/" : "", partition);
    if (n < 0 || (size_t)n >= sizeof sh->part_dir) {
        rc = sl_error_set(err, SL_ERR_INVALID, "path too long: %s/%s", o->table_dir, partition);
        goto out;
    }
    uint32_t threads = o->threads ? o->threads : imp_cores();
    uint32_t first = next_part_number(sh->part_dir);
    if (first < first_part) first = first_part;
    if ((rc = plan_jobs(o, threads, first, &sh->jobs, &sh->njobs, err)) != SL_OK) goto out;
    uint64_t total = 0;
    for (uint32_t i = 0; i < o->num_inputs; i++) {
        files[i].input = o->inputs[i];
        struct stat st;
        if (total != UINT64_MAX && strcmp(o->inputs[i], "-") != 0 && stat(o->inputs[i], &st) == 0 &&
            S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
        else
            total = UINT64_MAX; /* unknown: a pipe or a missing file (reported by its worker) */
    }
    if (total == UINT64_MAX) total = 0;

    if (threads > sh->njobs) threads = sh->njobs;
    if ((rc = run_workers(sh, threads, total, t0, err)) != SL_OK) goto out;

    /* The error of the first job (in input order) that failed. */
    for (uint32_t i = 0; i < sh->njobs && rc == SL_OK; i++)
        if (sh->jobs[i].rc != SL_OK) {
            rc = sh->jobs[i].rc;
            if (err != NULL) *err = sh->jobs[i].err;
        }
    if (rc == SL_OK) rc = refuse(o, sh, err);
    sl_err_t crc = commit(sh, rc == SL_OK, err);
    if (rc == SL_OK) rc = crc;

out:
    /* Once a file is in the table (a later link or the directory sync
     * failed), the directories hold data: they and the schema stay. */
    if (rc != SL_OK && !(sh != NULL && sh->linked)) undo_create(&made);
    if (summary != NULL && sh != NULL && files != NULL && sh->jobs != NULL) {
        summary->allocator = o->allocator;
        summary->num_files = o->num_inputs;
        summary->files = files;
        files = NULL;
        summarize(sh, rc, summary->files, summary);
    }
    if (summary != NULL) summary->seconds = sl_clock_s() - t0;
    if (files != NULL) sl_free(o->allocator, files, (size_t)o->num_inputs * sizeof *files);
    if (sh != NULL) {
        imp_source_close(sh->stdin_src);
        if (sh->jobs != NULL) sl_free(o->allocator, sh->jobs, (size_t)sh->njobs * sizeof *sh->jobs);
    }
    sl_free(o->allocator, sh, sizeof *sh);
    sl_wh_csv_destroy(csv);
    imp_pq_destroy(pq);
    sl_wh_schema_destroy(schema);
    return rc;
}

void sl_wh_import_summary_free(sl_wh_import_summary_t *s)
{
    if (s == NULL) return;
    if (s->files != NULL) sl_free(s->allocator, s->files, (size_t)s->num_files * sizeof *s->files);
    s->files = NULL;
    s->num_files = 0;
}

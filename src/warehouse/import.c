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

#define SAMPLE_ID_STRIDE 10000000000ll /* sample id = part number * 1e10 + line */
#define COUNTER_FLUSH_ROWS 4096

sl_wh_import_format_t sl_wh_import_format_parse(const char *name)
{
    if (name == NULL) return 0;
    if (strcmp(name, "criteo") == 0) return SL_WH_IMPORT_CRITEO;
    if (strcmp(name, "jsonl") == 0) return SL_WH_IMPORT_JSONL;
    return 0;
}

sl_wh_import_opts_t sl_wh_import_opts_default(void)
{
    sl_wh_import_opts_t o;
    memset(&o, 0, sizeof o);
    o.format = SL_WH_IMPORT_CRITEO;
    o.writer = sl_wh_writer_opts_default();
    return o;
}

typedef struct job {
    uint32_t index;
    uint32_t part; /* part number of the output */
    char stage[96];
    sl_wh_import_file_t *res;
    bool written; /* a staged file exists */
    sl_err_t rc;
    sl_error_t err;
} job_t;

typedef struct shared {
    const sl_wh_import_opts_t *o;
    const sl_wh_schema_t *schema;
    char part_dir[4096];
    job_t *jobs;
    uint32_t njobs;
    atomic_uint next;
    atomic_bool stop;
    atomic_uint_fast64_t rows_read, rows_written, rows_skipped, bytes_in, bytes_out;
    atomic_uint files_done;
    atomic_uint running;
    pthread_mutex_t lock; /* bad-row callback; the done condition */
    pthread_cond_t done;
    bool linked; /* commit put a file under its final name: undo_create must not run */
} shared_t;

/* State of one input being read. */
typedef struct reading {
    shared_t *sh;
    job_t *job;
    sl_wh_row_buf_t *buf;
    sl_wh_writer_t *w;
    uint64_t line;
    uint32_t messages;
    uint64_t pend_read, pend_written, pend_skipped; /* not yet added to the shared counters */
} reading_t;

static void flush_counters(reading_t *r)
{
    atomic_fetch_add(&r->sh->rows_read, r->pend_read);
    atomic_fetch_add(&r->sh->rows_written, r->pend_written);
    atomic_fetch_add(&r->sh->rows_skipped, r->pend_skipped);
    r->pend_read = r->pend_written = r->pend_skipped = 0;
}

static sl_err_t fatal(reading_t *r, sl_err_t code)
{
    r->job->rc = code;
    atomic_store(&r->sh->stop, true);
    return code;
}

static void bad_row(reading_t *r, const char *message)
{
    const sl_wh_import_opts_t *o = r->sh->o;
    sl_wh_import_file_t *res = r->job->res;
    res->rows_skipped++;
    r->pend_skipped++;
    if (res->first_error_line == 0) {
        res->first_error_line = r->line;
        snprintf(res->first_error, sizeof res->first_error, "%s:%llu: %s", res->input,
                 (unsigned long long)r->line, message);
    }
    if (o->on_bad_row == NULL) return;
    uint32_t max = o->max_bad_row_messages ? o->max_bad_row_messages : 100;
    if (r->messages > max) return;
    pthread_mutex_lock(&r->sh->lock);
    if (r->messages++ < max)
        o->on_bad_row(o->bad_row_ctx, res->input, r->line, message);
    else
        o->on_bad_row(o->bad_row_ctx, res->input, 0,
                      "more bad rows in this file are counted but not shown");
    pthread_mutex_unlock(&r->sh->lock);
}

static sl_err_t open_writer(reading_t *r)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->sh->part_dir, r->job->stage);
    sl_wh_writer_opts_t wo = r->sh->o->writer;
    wo.overwrite = true; /* a stale staging file of a crashed import with our pid */
    if (wo.allocator == NULL) wo.allocator = r->sh->o->allocator;
    sl_err_t rc = sl_wh_writer_open(path, r->sh->schema, &wo, &r->w, &r->job->err);
    return rc == SL_OK ? SL_OK : fatal(r, rc);
}

/* One line (without '\n'). */
static sl_err_t do_line(reading_t *r, const char *line, size_t len)
{
    r->line++;
    size_t n = len;
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' '))
        n--;
    if (n == 0) return SL_OK; /* blank lines are not rows */
    r->job->res->rows_read++;
    r->pend_read++;
    if (len > IMP_LINE_LIMIT) {
        char msg[96];
        snprintf(msg, sizeof msg, "line of %zu bytes is longer than the limit of %zu", len,
                 IMP_LINE_LIMIT);
        bad_row(r, msg);
        return SL_OK;
    }
    sl_wh_row_t row;
    sl_error_t perr = {0};
    bool has_sid = false;
    sl_err_t rc = r->sh->o->format == SL_WH_IMPORT_CRITEO
                      ? sl_wh_criteo_parse_line(r->buf, line, len, &row, &perr)
                      : sl_wh_jsonl_parse_line(r->buf, line, len, &row, &has_sid, &perr);
    if (rc == SL_ERR_CORRUPT) {
        bad_row(r, perr.msg);
        if (!r->sh->o->strict) return SL_OK;
        sl_error_set(&r->job->err, SL_ERR_CORRUPT, "%s", r->job->res->first_error);
        return fatal(r, SL_ERR_CORRUPT);
    }
    if (rc != SL_OK) {
        sl_error_set(&r->job->err, rc, "%s:%llu: %s", r->job->res->input,
                     (unsigned long long)r->line, perr.msg);
        return fatal(r, rc);
    }
    if (!has_sid) row.sample_id = (int64_t)r->job->part * SAMPLE_ID_STRIDE + (int64_t)r->line;
    if (r->w == NULL && (rc = open_writer(r)) != SL_OK) return rc;
    rc = sl_wh_writer_append_row(r->w, &row, &r->job->err);
    if (rc != SL_OK) return fatal(r, rc);
    r->job->res->rows_written++;
    if (++r->pend_written >= COUNTER_FLUSH_ROWS) flush_counters(r);
    return SL_OK;
}

static sl_err_t on_line(void *ctx, const char *line, size_t len)
{
    reading_t *r = ctx;
    return do_line(r, line, len);
}

static bool on_chunk(void *ctx, uint64_t new_bytes)
{
    reading_t *r = ctx;
    atomic_fetch_add(&r->sh->bytes_in, new_bytes);
    r->job->res->bytes_in += new_bytes;
    return !atomic_load(&r->sh->stop);
}

static void run_job(shared_t *sh, job_t *job)
{
    reading_t r = {.sh = sh, .job = job};
    const char *input = job->res->input;
    imp_source_t *src = NULL;
    sl_err_t rc = imp_source_open(input, sh->o->allocator, &src, &job->err);
    if (rc != SL_OK) {
        fatal(&r, rc);
        return;
    }
    r.buf = sl_wh_row_buf_new(sh->schema, sh->o->allocator);
    if (r.buf == NULL) {
        sl_error_set(&job->err, SL_ERR_NOMEM, "%s: no memory for a row", input);
        fatal(&r, SL_ERR_NOMEM);
    } else {
        sl_error_t rerr = {0};
        rc = imp_read_lines(src, sh->o->allocator, on_line, on_chunk, &r, &rerr);
        /* A line's error is already the job's; a read error is not yet. */
        if (rc != SL_OK && job->rc == SL_OK) {
            job->err = rerr;
            fatal(&r, rc);
        }
    }
    flush_counters(&r);
    imp_source_close(src);
    sl_wh_row_buf_destroy(r.buf);
    if (r.w == NULL) return;
    if (job->rc != SL_OK || atomic_load(&sh->stop)) {
        sl_wh_writer_abort(r.w);
        return;
    }
    sl_wh_write_stats_t st;
    rc = sl_wh_writer_close(r.w, &st, &job->err);
    if (rc != SL_OK) {
        fatal(&r, rc);
        return;
    }
    job->written = true;
    job->res->bytes_out = st.file_bytes;
    atomic_fetch_add(&sh->bytes_out, st.file_bytes);
}

static void *worker(void *arg)
{
    shared_t *sh = arg;
    for (;;) {
        uint32_t j = atomic_fetch_add(&sh->next, 1);
        if (j >= sh->njobs || atomic_load(&sh->stop)) break;
        run_job(sh, &sh->jobs[j]);
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
static sl_err_t resolve_schema(const sl_wh_import_opts_t *o, sl_wh_schema_t **out, sl_error_t *err)
{
    const sl_allocator_t *a = o->allocator;
    *out = NULL;
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

static void report(shared_t *sh, uint64_t total, double t0)
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
static sl_err_t run_workers(shared_t *sh, uint32_t threads, uint64_t total, double t0,
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
static sl_err_t commit(shared_t *sh, bool keep, sl_error_t *err)
{
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; i < sh->njobs; i++) {
        job_t *j = &sh->jobs[i];
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
                snprintf(j->res->output, sizeof j->res->output, "%s%s%s", p ? p : "",
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

sl_err_t sl_wh_import(const sl_wh_import_opts_t *o, sl_wh_import_summary_t *summary,
                      sl_error_t *err)
{
    double t0 = sl_clock_s();
    if (summary != NULL) memset(summary, 0, sizeof *summary);
    if (o == NULL) return sl_error_set(err, SL_ERR_INVALID, "no import options");
    sl_err_t rc = check_opts(o, err);
    if (rc != SL_OK) return rc;
    const char *partition = o->partition != NULL ? o->partition : "";

    sl_wh_schema_t *schema = NULL;
    created_t made = {0};
    shared_t *sh = NULL;
    sl_wh_import_file_t *files = NULL;
    if ((rc = resolve_schema(o, &schema, err)) != SL_OK) goto out;
    if ((rc = sl_wh_partition_check(schema, partition, err)) != SL_OK) goto out;
    if ((rc = before_create(o->table_dir, partition, &made, err)) != SL_OK) goto out;
    if ((rc = sl_wh_table_create(o->table_dir, schema, err)) != SL_OK) {
        sl_error_prefix(err, "table %s: ", o->table_dir);
        goto out;
    }
    if ((rc = imp_make_dirs(o->table_dir, partition, err)) != SL_OK) goto out;

    sh = sl_calloc(o->allocator, 1, sizeof *sh);
    files = sl_calloc(o->allocator, o->num_inputs, sizeof *files);
    if (sh == NULL || files == NULL ||
        (sh->jobs = sl_calloc(o->allocator, o->num_inputs, sizeof *sh->jobs)) == NULL) {
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for %u inputs", o->num_inputs);
        goto out;
    }
    sh->o = o;
    sh->schema = schema;
    sh->njobs = o->num_inputs;
    int n = snprintf(sh->part_dir, sizeof sh->part_dir, "%s%s%s", o->table_dir,
                     *partition ? "/" : "", partition);
    if (n < 0 || (size_t)n >= sizeof sh->part_dir) {
        rc = sl_error_set(err, SL_ERR_INVALID, "path too long: %s/%s", o->table_dir, partition);
        goto out;
    }
    uint32_t first_part = next_part_number(sh->part_dir);
    uint64_t total = 0;
    for (uint32_t i = 0; i < o->num_inputs; i++) {
        job_t *j = &sh->jobs[i];
        j->index = i;
        j->part = first_part + i;
        j->res = &files[i];
        files[i].input = o->inputs[i];
        snprintf(j->stage, sizeof j->stage, ".import-%ld-%05u%s", (long)getpid(), j->part,
                 SL_WH_FILE_EXT);
        struct stat st;
        if (total != UINT64_MAX && strcmp(o->inputs[i], "-") != 0 && stat(o->inputs[i], &st) == 0 &&
            S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size;
        else
            total = UINT64_MAX; /* unknown: a pipe or a missing file (reported by its worker) */
    }
    if (total == UINT64_MAX) total = 0;

    uint32_t threads = o->threads ? o->threads : imp_cores();
    if (threads > o->num_inputs) threads = o->num_inputs;
    if ((rc = run_workers(sh, threads, total, t0, err)) != SL_OK) goto out;

    /* The error of the first input (in input order) that failed. */
    for (uint32_t i = 0; i < sh->njobs && rc == SL_OK; i++)
        if (sh->jobs[i].rc != SL_OK) {
            rc = sh->jobs[i].rc;
            if (err != NULL) *err = sh->jobs[i].err;
        }
    sl_err_t crc = commit(sh, rc == SL_OK, err);
    if (rc == SL_OK) rc = crc;

out:
    /* Once a file is in the table (a later link or the directory sync
     * failed), the directories hold data: they and the schema stay. */
    if (rc != SL_OK && !(sh != NULL && sh->linked)) undo_create(&made);
    if (summary != NULL && sh != NULL && files != NULL) {
        summary->allocator = o->allocator;
        summary->num_files = o->num_inputs;
        summary->files = files;
        files = NULL;
        for (uint32_t i = 0; i < summary->num_files; i++) {
            const sl_wh_import_file_t *f = &summary->files[i];
            summary->rows_read += f->rows_read;
            summary->rows_written += f->rows_written;
            summary->rows_skipped += f->rows_skipped;
            summary->bytes_in += f->bytes_in;
            if (rc == SL_OK && f->output[0] != '\0') {
                summary->bytes_out += f->bytes_out;
                summary->files_written++;
            }
        }
        if (rc != SL_OK && !sh->linked) summary->rows_written = 0; /* nothing was committed */
    }
    if (summary != NULL) summary->seconds = sl_clock_s() - t0;
    if (files != NULL) sl_free(o->allocator, files, (size_t)o->num_inputs * sizeof *files);
    if (sh != NULL) sl_free(o->allocator, sh->jobs, (size_t)o->num_inputs * sizeof *sh->jobs);
    sl_free(o->allocator, sh, sizeof *sh);
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

/* One import job on a worker thread: read an input (or a byte range of
 * one), cut it into lines (criteo, jsonl) or records (csv), parse each
 * into a row, and append the rows to the job's own staged data file. Bad
 * rows are counted, reported (the first SL_WH_IMPORT_FIRST_BAD kept for a
 * refusal) and skipped; anything else stops the whole import (import.c
 * plans the jobs and commits or removes their files). */
#include "import_internal.h"
#include "pq_internal.h"

#include <stdio.h>
#include <string.h>

#define COUNTER_FLUSH_ROWS 4096

/* State of one job being read. */
typedef struct reading {
    imp_shared_t *sh;
    imp_job_t *job;
    sl_wh_row_buf_t *buf;
    sl_wh_writer_t *w;
    uint64_t line;      /* the current row's (first) line */
    uint64_t next_line; /* csv: the line the next record starts on */
    bool header_seen;   /* csv */
    imp_pqc_t *pqc;     /* parquet: rows in column form */
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
    imp_job_t *job = r->job;
    sl_wh_import_file_t *res = &job->res;
    res->rows_skipped++;
    r->pend_skipped++;
    if (res->first_error_line == 0) {
        res->first_error_line = r->line;
        snprintf(res->first_error, sizeof res->first_error, "%s:%llu: %s", res->input,
                 (unsigned long long)r->line, message);
    }
    if (job->num_first_bad < SL_WH_IMPORT_FIRST_BAD)
        snprintf(job->first_bad[job->num_first_bad++], sizeof job->first_bad[0], "%s:%llu: %s",
                 res->input, (unsigned long long)r->line, message);
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

/* A row counted as read, too long to parse: a bad row. @return true when so. */
static bool too_long(reading_t *r, size_t len)
{
    r->job->res.rows_read++;
    r->pend_read++;
    if (len <= IMP_LINE_LIMIT) return false;
    char msg[96];
    snprintf(msg, sizeof msg, "row of %zu bytes is longer than the limit of %zu", len,
             IMP_LINE_LIMIT);
    bad_row(r, msg);
    return true;
}

/* After a parse: skip a bad row, or append the row. */
static sl_err_t take_row(reading_t *r, sl_err_t rc, const sl_error_t *perr, sl_wh_row_t *row,
                         bool has_sid)
{
    if (rc == SL_ERR_CORRUPT) {
        bad_row(r, perr->msg);
        if (!r->sh->o->strict) return SL_OK;
        sl_error_set(&r->job->err, SL_ERR_CORRUPT, "%s", r->job->res.first_error);
        return fatal(r, SL_ERR_CORRUPT);
    }
    if (rc != SL_OK) {
        sl_error_set(&r->job->err, rc, "%s:%llu: %s", r->job->res.input,
                     (unsigned long long)r->line, perr->msg);
        return fatal(r, rc);
    }
    if (!has_sid) row->sample_id = r->job->id_base + (int64_t)r->line;
    if (r->w == NULL && (rc = open_writer(r)) != SL_OK) return rc;
    rc = sl_wh_writer_append_row(r->w, row, &r->job->err);
    if (rc != SL_OK) return fatal(r, rc);
    r->job->res.rows_written++;
    if (++r->pend_written >= COUNTER_FLUSH_ROWS) flush_counters(r);
    return SL_OK;
}

/* One line (without '\n') of criteo or jsonl. */
static sl_err_t on_line(void *ctx, const char *line, size_t len)
{
    reading_t *r = ctx;
    r->line++;
    size_t n = len;
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' '))
        n--;
    if (n == 0) return SL_OK; /* blank lines are not rows */
    if (too_long(r, len)) return SL_OK;
    sl_wh_row_t row;
    sl_error_t perr = {0};
    bool has_sid = false;
    sl_err_t rc = r->sh->o->format == SL_WH_IMPORT_CRITEO
                      ? sl_wh_criteo_parse_line(r->buf, line, len, &row, &perr)
                      : sl_wh_jsonl_parse_line(r->buf, line, len, &row, &has_sid, &perr);
    return take_row(r, rc, &perr, &row, has_sid);
}

/* One CSV record: the header (first of a file), or a row. */
static sl_err_t on_record(void *ctx, const char *rec, size_t len, uint32_t inner, bool ended)
{
    reading_t *r = ctx;
    r->line = r->next_line;
    r->next_line += inner + (ended ? 1 : 0);
    bool blank = len == 0 || (len == 1 && rec[0] == '\r');
    if (!r->header_seen) {
        if (blank) return SL_OK;
        sl_error_t herr = {0};
        sl_err_t rc = len > IMP_LINE_LIMIT
                          ? sl_error_set(&herr, SL_ERR_INVALID, "header too long")
                          : imp_csv_check_header(r->sh->csv, r->buf, rec, len, &herr);
        r->header_seen = true;
        if (rc == SL_OK) return SL_OK;
        sl_error_set(&r->job->err, rc, "%s:%llu: %s", r->job->res.input,
                     (unsigned long long)r->line, herr.msg);
        return fatal(r, rc);
    }
    if (blank) return SL_OK;
    if (too_long(r, len)) return SL_OK;
    sl_wh_row_t row;
    sl_error_t perr = {0};
    bool has[3];
    sl_err_t rc = sl_wh_csv_parse_record(r->sh->csv, r->buf, rec, len, &row, has, &perr);
    return take_row(r, rc, &perr, &row, has[0]);
}

/* Parquet rows in column form (import_parquet_cols.c): the rows built,
 * appended to the writer as columns; next is the file row after them. */
static sl_err_t on_pq_full(void *ctx, uint64_t next, sl_error_t *err)
{
    reading_t *r = ctx;
    (void)err; /* the job's own error is set, as for a row */
    sl_wh_rows_t rows;
    sl_err_t rc = imp_pqc_take(r->pqc, false, &rows, &r->job->err);
    if (rc != SL_OK) return fatal(r, rc);
    uint32_t n = rows.batch.batch_size;
    r->line = next;
    r->job->res.rows_read += n;
    r->pend_read += n;
    if (n > 0) {
        if (r->w == NULL && (rc = open_writer(r)) != SL_OK) return rc;
        rc = sl_wh_writer_append(r->w, &rows, &r->job->err);
        if (rc != SL_OK) return fatal(r, rc);
        r->job->res.rows_written += n;
        r->pend_written += n;
    }
    if (r->pend_written >= COUNTER_FLUSH_ROWS) flush_counters(r);
    return atomic_load(&r->sh->stop) ? SL_ERR_CLOSED : SL_OK;
}

/* A Parquet row the mapping cannot take (line: its row of the file from 1). */
static sl_err_t on_pq_bad(void *ctx, uint64_t line, const sl_error_t *why, sl_error_t *err)
{
    reading_t *r = ctx;
    (void)err;
    r->line = line;
    r->job->res.rows_read++;
    r->pend_read++;
    sl_err_t rc = take_row(r, why->code ? why->code : SL_ERR_CORRUPT, why, NULL, false);
    if (rc == SL_OK && atomic_load(&r->sh->stop)) return SL_ERR_CLOSED;
    return rc;
}

/* A Parquet job: its row groups converted a column at a time. */
static sl_err_t read_parquet(reading_t *r, sl_error_t *err)
{
    imp_shared_t *sh = r->sh;
    imp_job_t *job = r->job;
    sl_err_t rc = imp_pqc_new(sh->pq, NULL, NULL, 0, &r->pqc, err);
    if (rc != SL_OK) return rc;
    imp_pqc_read_t rd = {.input = job->res.input,
                         .begin = job->ranged ? (uint32_t)job->begin : 0,
                         .end = job->ranged ? (uint32_t)job->end : UINT32_MAX,
                         .first_row = job->ranged ? job->first_line : 0,
                         .lo = 0,
                         .hi = UINT64_MAX,
                         .id_base = job->id_base,
                         .flush_rows = COUNTER_FLUSH_ROWS,
                         .on_full = on_pq_full,
                         .on_bad = on_pq_bad,
                         .ctx = r};
    rc = imp_pqc_read(sh->pq, r->pqc, &rd, err);
    if (rc == SL_OK && imp_pqc_count(r->pqc) > 0) rc = on_pq_full(r, rd.reached, err);
    imp_pqc_destroy(r->pqc);
    r->pqc = NULL;
    return rc;
}

static bool on_chunk(void *ctx, uint64_t new_bytes)
{
    reading_t *r = ctx;
    atomic_fetch_add(&r->sh->bytes_in, new_bytes);
    r->job->res.bytes_in += new_bytes;
    return !atomic_load(&r->sh->stop);
}

/* The job's source: a range, standard input as the CSV inference left it,
 * or the file whole. */
static sl_err_t open_source(imp_shared_t *sh, imp_job_t *job, imp_source_t **src)
{
    const char *input = job->res.input;
    if (job->ranged)
        return imp_source_open_range(input, job->begin, job->end, sh->o->allocator, src, &job->err);
    if (strcmp(input, "-") == 0 && sh->stdin_src != NULL) {
        *src = sh->stdin_src;
        sh->stdin_src = NULL; /* standard input is one job's */
        return SL_OK;
    }
    return imp_source_open(input, sh->o->allocator, src, &job->err);
}

void imp_run_job(imp_shared_t *sh, imp_job_t *job)
{
    reading_t r = {.sh = sh, .job = job};
    const char *input = job->res.input;
    imp_source_t *src = NULL;
    sl_err_t rc = sh->o->format == SL_WH_IMPORT_PARQUET ? SL_OK : open_source(sh, job, &src);
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
        if (sh->o->format == SL_WH_IMPORT_PARQUET) {
            rc = read_parquet(&r, &rerr);
            if (rc == SL_ERR_CLOSED && atomic_load(&sh->stop)) rc = SL_OK; /* another job failed */
        } else if (sh->o->format == SL_WH_IMPORT_CSV) {
            /* A range after the first starts on a record: no header, no BOM. */
            bool head = !job->ranged || job->begin == 0;
            r.header_seen = !head;
            r.next_line = job->ranged ? job->first_line : 1;
            rc = imp_read_records(src, sh->o->allocator, imp_csv_delim(sh->csv), head, on_record,
                                  on_chunk, &r, &rerr);
            if (rc != SL_OK && job->rc == SL_OK) sl_error_prefix(&rerr, "%s: ", input);
        } else
            rc = imp_read_lines(src, sh->o->allocator, on_line, on_chunk, &r, &rerr);
        /* A row's error is already the job's; a read error is not yet. */
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
    job->res.bytes_out = st.file_bytes;
    atomic_fetch_add(&sh->bytes_out, st.file_bytes);
}

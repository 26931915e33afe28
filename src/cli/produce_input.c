/* The inputs of `sluice produce` (produce_input.h): every row of a table
 * (files in table order, stripes in file order), every line of a JSONL
 * file (the form `sluice table import --format jsonl` reads), or the
 * seeded sessions stream of `sluice table gen --preset sessions`, each
 * row encoded as a version 1 record value. */
#include "produce_input.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/mem.h"
#include "kafka/record.h"
#include "kafka/record_json.h"
#include "warehouse/import.h"

/* A longer JSONL line is a bad row, not an allocation (as the importer). */
#define LINE_LIMIT ((size_t)1 << 26)

struct produce_input {
    sl_wh_schema_t *schema;
    sl_kafka_encoder_t *enc;
    bool json;      /* values as JSON objects */
    char *json_buf; /* [json_cap] the last JSON value */
    size_t json_cap;
    /* table */
    sl_wh_table_t *table;
    sl_wh_splits_t *splits;
    uint32_t split;         /* the next split to open */
    sl_wh_reader_t *reader; /* the split being read */
    const sl_wh_rows_t *rows;
    uint32_t row; /* the next row of rows */
    /* jsonl */
    FILE *file;
    const char *path;
    sl_wh_row_buf_t *row_buf;
    char *line;
    size_t line_cap;
    uint64_t line_no, bytes_read, bytes_total;
    /* sessions */
    sl_wh_gen_iter_t *gen;
};

void produce_input_close(produce_input_t *in)
{
    if (in == NULL) return;
    sl_kafka_encoder_destroy(in->enc);
    sl_free(NULL, in->json_buf, in->json_cap);
    sl_wh_reader_close(in->reader);
    sl_wh_splits_destroy(in->splits);
    sl_wh_table_close(in->table);
    if (in->file != NULL && in->file != stdin) fclose(in->file);
    sl_wh_row_buf_destroy(in->row_buf);
    sl_free(NULL, in->line, in->line_cap);
    sl_wh_gen_iter_destroy(in->gen);
    sl_wh_schema_destroy(in->schema);
    sl_free(NULL, in, sizeof *in);
}

static sl_err_t open_table(produce_input_t *in, const char *dir, sl_error_t *err)
{
    SL_FORWARD_IF_ERROR(sl_wh_table_open(dir, NULL, &in->table, err));
    in->schema = sl_wh_schema_clone(sl_wh_table_schema(in->table), NULL);
    if (in->schema == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    /* One split per file: the reader then walks the file's stripes. */
    return sl_wh_table_splits(in->table, NULL, UINT32_MAX, &in->splits, err);
}

static sl_err_t open_jsonl(produce_input_t *in, const produce_input_spec_t *s, sl_error_t *err)
{
    bool is_stdin = strcmp(s->jsonl, "-") == 0;
    sl_err_t rc;
    if (s->schema != NULL) {
        json_error_t jerr;
        json_t *j = json_load_file(s->schema, JSON_REJECT_DUPLICATES, &jerr);
        if (j == NULL)
            return sl_error_set(err, SL_ERR_INVALID, "%s line %d: %s", s->schema, jerr.line,
                                jerr.text);
        rc = sl_wh_schema_from_json(j, NULL, &in->schema, err);
        json_decref(j);
        if (rc != SL_OK) return sl_error_prefix(err, "%s: ", s->schema);
    } else if (is_stdin) {
        return sl_error_set(err, SL_ERR_INVALID,
                            "standard input: give --schema (the schema is inferred by reading "
                            "the input twice)");
    } else {
        /* Its messages name the file. */
        SL_FORWARD_IF_ERROR(sl_wh_jsonl_infer_schema(&s->jsonl, 1, 1000, NULL, &in->schema, err));
    }
    in->path = s->jsonl;
    in->file = is_stdin ? stdin : fopen(s->jsonl, "r");
    if (in->file == NULL)
        return sl_error_set(err, SL_ERR_IO, "open %s: %s", s->jsonl, strerror(errno));
    struct stat st;
    if (!is_stdin && fstat(fileno(in->file), &st) == 0 && S_ISREG(st.st_mode))
        in->bytes_total = (uint64_t)st.st_size;
    in->row_buf = sl_wh_row_buf_new(in->schema, NULL);
    if (in->row_buf == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    return SL_OK;
}

static sl_err_t open_sessions(produce_input_t *in, const produce_input_spec_t *s, sl_error_t *err)
{
    sl_wh_gen_spec_t spec;
    sl_err_t rc = sl_wh_gen_preset("sessions", s->rows, s->seed, &spec, err);
    if (rc == SL_OK) rc = sl_wh_gen_schema(&spec, NULL, &in->schema, err);
    if (rc == SL_OK) rc = sl_wh_gen_iter_new(&spec, 0, 0, NULL, &in->gen, err);
    return rc;
}

sl_err_t produce_input_open(const produce_input_spec_t *s, produce_input_t **out, sl_error_t *err)
{
    *out = NULL;
    produce_input_t *in = sl_calloc(NULL, 1, sizeof *in);
    if (in == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    in->json = s->json;
    sl_err_t rc = s->table != NULL   ? open_table(in, s->table, err)
                  : s->jsonl != NULL ? open_jsonl(in, s, err)
                                     : open_sessions(in, s, err);
    if (rc == SL_OK) rc = sl_kafka_encoder_new(in->schema, NULL, &in->enc, err);
    if (rc != SL_OK) {
        produce_input_close(in);
        return rc;
    }
    *out = in;
    return SL_OK;
}

/* The next line of the JSONL file into in->line (without its '\n'), or
 * *eof. A line over LINE_LIMIT is consumed and reported with *too_long. */
static sl_err_t read_line(produce_input_t *in, size_t *len, bool *eof, bool *too_long,
                          sl_error_t *err)
{
    size_t have = 0;
    *eof = false;
    *too_long = false;
    for (;;) {
        if (in->line_cap - have < 2) {
            if (in->line_cap >= LINE_LIMIT) {
                *too_long = true;
                have = 0; /* keep reading to the line's end, keeping nothing */
            } else if (!SL_GROW(NULL, in->line, in->line_cap, in->line_cap + 1, 4096)) {
                return sl_error_set(err, SL_ERR_NOMEM, "out of memory for a line");
            }
        }
        if (fgets(in->line + have, (int)(in->line_cap - have), in->file) == NULL) {
            if (ferror(in->file))
                return sl_error_set(err, SL_ERR_IO, "read %s: %s", in->path, strerror(errno));
            *eof = have == 0 && !*too_long;
            break;
        }
        size_t n = strlen(in->line + have);
        in->bytes_read += n;
        have += n;
        if (have > 0 && in->line[have - 1] == '\n') {
            have--;
            break;
        }
    }
    in->line[have] = '\0';
    *len = have;
    return SL_OK;
}

static sl_err_t next_jsonl(produce_input_t *in, sl_wh_row_t *row, bool *done, sl_error_t *err)
{
    for (;;) {
        size_t len = 0;
        bool eof, too_long;
        SL_FORWARD_IF_ERROR(read_line(in, &len, &eof, &too_long, err));
        if (eof) {
            *done = true;
            return SL_OK;
        }
        in->line_no++;
        if (too_long)
            return sl_error_set(err, SL_ERR_CORRUPT, "%s:%llu: line longer than %zu bytes",
                                in->path, (unsigned long long)in->line_no, LINE_LIMIT);
        size_t n = len;
        while (n > 0 && (in->line[n - 1] == '\r' || in->line[n - 1] == ' '))
            n--;
        if (n == 0) continue; /* blank lines are not rows */
        bool has_sample_id = false;
        sl_error_t perr = {0};
        sl_err_t rc =
            sl_wh_jsonl_parse_line(in->row_buf, in->line, len, row, &has_sample_id, &perr);
        if (rc != SL_OK)
            return sl_error_set(err, rc, "%s:%llu: %s", in->path, (unsigned long long)in->line_no,
                                perr.msg);
        /* As the importer numbers the rows of its first input. */
        if (!has_sample_id) row->sample_id = (int64_t)in->line_no;
        return SL_OK;
    }
}

static sl_err_t next_table(produce_input_t *in, sl_wh_row_t *row, bool *done, sl_error_t *err)
{
    while (in->rows == NULL || in->row >= in->rows->batch.batch_size) {
        if (in->reader != NULL) {
            SL_FORWARD_IF_ERROR(sl_wh_reader_next(in->reader, &in->rows, err));
            in->row = 0;
            if (in->rows != NULL) continue;
            sl_wh_reader_close(in->reader);
            in->reader = NULL;
        }
        if (in->split == in->splits->count) {
            *done = true;
            return SL_OK;
        }
        sl_wh_read_opts_t ro = {0};
        SL_FORWARD_IF_ERROR(sl_wh_reader_open_split(in->table, &in->splits->items[in->split++], &ro,
                                                    &in->reader, err));
    }
    return sl_kafka_encoder_row_at(in->enc, in->rows, in->row++, row, err);
}

sl_err_t produce_input_next(produce_input_t *in, produce_record_t *rec, bool *done, sl_error_t *err)
{
    sl_wh_row_t row;
    sl_err_t rc = SL_OK;
    *done = false;
    if (in->gen != NULL)
        *done = !sl_wh_gen_iter_next(in->gen, &row);
    else if (in->file != NULL)
        rc = next_jsonl(in, &row, done, err);
    else
        rc = next_table(in, &row, done, err);
    if (rc != SL_OK || *done) return rc;
    rec->sample_id = (uint64_t)row.sample_id;
    rec->session_id = (uint64_t)row.session_id;
    if (in->json) {
        rc = sl_kafka_json_encode(in->schema, &row, NULL, &in->json_buf, &in->json_cap, &rec->len,
                                  err);
        rec->value = (const uint8_t *)in->json_buf;
        return rc;
    }
    return sl_kafka_encode_row(in->enc, &row, &rec->value, &rec->len, err);
}

const sl_wh_schema_t *produce_input_schema(const produce_input_t *in)
{
    return in->schema;
}

void produce_input_bytes(const produce_input_t *in, uint64_t *read, uint64_t *total)
{
    *read = in->bytes_read;
    *total = in->bytes_total;
}

/* The CSV importer's header, column types, mapping and record parser.
 *
 * A CSV input has a header row naming its columns; the column mapping
 * (column_map.h; --mapping, default inferred) says what each becomes. The
 * columns' types are inferred from the first records: int, float, bool,
 * string, and lists written as JSON arrays in a cell ("[1,2,3]",
 * "[[3,0.5],[9,1]]" or "[{\"id\":3,\"weight\":0.5}]" for weighted ids).
 * An empty field is a missing value (an empty list for a sparse feature).
 * A record with another field count than the header, a quote inside an
 * unquoted field, text after a closing quote, or a value its slot cannot
 * take is a bad row, with a message naming the field and column. */
#include "common/err.h"
#include "common/mem.h"
#include "import_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_FIELDS 65536u
#define T_EMPTY_LIST 100 /* inference only: "[]", which fits every list type */

struct sl_wh_csv {
    const sl_allocator_t *a;
    char delim;
    uint32_t num_fields;
    char **names; /* [num_fields] the header */
    sl_wh_colmap_resolved_t *map;
    imp_source_t *stdin_src; /* standard input, read for inference: the import reads on */
};

/* ---- fields ---- */

static bool grow_fields(sl_wh_row_buf_t *b, uint32_t need)
{
    if (need <= b->fcap) return true;
    uint32_t cap = b->fcap ? b->fcap : 64;
    while (cap < need)
        cap *= 2;
    uint32_t *off = sl_alloc(b->a, cap * sizeof *off), *len = sl_alloc(b->a, cap * sizeof *len);
    if (off == NULL || len == NULL) {
        sl_free(b->a, off, cap * sizeof *off);
        sl_free(b->a, len, cap * sizeof *len);
        return false;
    }
    /* The fields split so far stay: growing happens in the middle of a record. */
    if (b->fcap > 0) {
        memcpy(off, b->foff, b->fcap * sizeof *off);
        memcpy(len, b->flen, b->fcap * sizeof *len);
    }
    sl_free(b->a, b->foff, b->fcap * sizeof *b->foff);
    sl_free(b->a, b->flen, b->fcap * sizeof *b->flen);
    b->foff = off;
    b->flen = len;
    b->fcap = cap;
    return true;
}

/* Split rec into fields, unquoted and NUL-terminated in b->text. */
static sl_err_t split(sl_wh_row_buf_t *b, const char *rec, size_t len, char delim, uint32_t *nf,
                      sl_error_t *err)
{
    if (len > 0 && rec[len - 1] == '\r') len--;
    if (len + 1 > b->text_cap / 2) {
        size_t cap = b->text_cap ? b->text_cap : 4096;
        while (len + 1 > cap / 2)
            cap *= 2;
        char *t = sl_alloc(b->a, cap);
        if (t == NULL) return sl_error_set(err, SL_ERR_NOMEM, "no memory for a record");
        sl_free(b->a, b->text, b->text_cap);
        b->text = t;
        b->text_cap = cap;
    }
    char *out = b->text;
    size_t o = 0, i = 0;
    uint32_t n = 0;
    for (;;) {
        if (n >= MAX_FIELDS) return imp_bad(err, "more than %u fields", MAX_FIELDS);
        if (n + 1 > b->fcap && !grow_fields(b, n + 1))
            return sl_error_set(err, SL_ERR_NOMEM, "no memory for fields");
        b->foff[n] = (uint32_t)o;
        if (i < len && rec[i] == '"') {
            i++;
            for (;;) {
                const char *q = memchr(rec + i, '"', len - i);
                if (q == NULL) return imp_bad(err, "field %u: a quote is not closed", n + 1);
                size_t k = (size_t)(q - (rec + i));
                memcpy(out + o, rec + i, k);
                o += k;
                i += k + 1;
                if (i < len && rec[i] == '"') {
                    out[o++] = '"';
                    i++;
                    continue;
                }
                break;
            }
            if (i < len && rec[i] != delim)
                return imp_bad(err, "field %u: text after the closing quote", n + 1);
        } else {
            size_t start = i;
            while (i < len && rec[i] != delim)
                i++;
            if (memchr(rec + start, '"', i - start) != NULL)
                return imp_bad(err,
                               "field %u: a quote inside an unquoted field (quote the field and "
                               "double the quote)",
                               n + 1);
            memcpy(out + o, rec + start, i - start);
            o += i - start;
        }
        b->flen[n] = (uint32_t)(o - b->foff[n]);
        out[o++] = '\0';
        n++;
        if (i >= len) break;
        i++; /* the delimiter; a trailing one makes an empty last field */
        if (i == len) {
            if (!grow_fields(b, n + 1))
                return sl_error_set(err, SL_ERR_NOMEM, "no memory for fields");
            b->foff[n] = (uint32_t)o;
            b->flen[n] = 0;
            out[o++] = '\0';
            n++;
            break;
        }
    }
    *nf = n;
    return SL_OK;
}

/* ---- values ---- */

static bool parse_bool(const char *s, float *out)
{
    if (strcasecmp(s, "true") == 0) {
        *out = 1.0f;
        return true;
    }
    if (strcasecmp(s, "false") == 0) {
        *out = 0.0f;
        return true;
    }
    return false;
}

/* A float32 from a field (int, decimal, or true/false). */
static bool parse_number(const char *s, size_t len, float *out)
{
    int64_t i;
    if (imp_parse_i64(s, len, &i)) {
        *out = (float)i;
        return true;
    }
    if (parse_bool(s, out)) return true;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end != s + len || len == 0) return false;
    float f = (float)d;
    if (isinf(f) && !isinf(d)) return false;
    *out = f;
    return true;
}

static sl_wh_coltype_t list_type(const json_t *arr)
{
    size_t i, n = json_array_size(arr);
    if (n == 0) return (sl_wh_coltype_t)T_EMPTY_LIST;
    bool ints = true, nums = true, strs = true, pairs = true;
    const json_t *v;
    json_array_foreach(arr, i, v)
    {
        ints &= json_is_integer(v);
        nums &= json_is_number(v);
        strs &= json_is_string(v);
        pairs &= (json_is_object(v) && json_object_get(v, "id") != NULL &&
                  json_object_get(v, "weight") != NULL) ||
                 (json_is_array(v) && json_array_size(v) == 2 &&
                  json_is_integer(json_array_get(v, 0)) && json_is_number(json_array_get(v, 1)));
    }
    return ints    ? SL_WH_COLTYPE_LIST_INT
           : nums  ? SL_WH_COLTYPE_LIST_FLOAT
           : strs  ? SL_WH_COLTYPE_LIST_STRING
           : pairs ? SL_WH_COLTYPE_LIST_WEIGHTED
                   : SL_WH_COLTYPE_STRING;
}

/* The type one field shows; ANY for an empty one. */
static sl_wh_coltype_t field_type(const char *s, size_t len)
{
    if (len == 0) return SL_WH_COLTYPE_ANY;
    int64_t i;
    float f;
    if (imp_parse_i64(s, len, &i)) return SL_WH_COLTYPE_INT;
    if (parse_bool(s, &f)) return SL_WH_COLTYPE_BOOL;
    if (parse_number(s, len, &f)) return SL_WH_COLTYPE_FLOAT;
    if (s[0] == '[') {
        json_t *j = json_loadb(s, len, 0, NULL);
        sl_wh_coltype_t t = json_is_array(j) ? list_type(j) : SL_WH_COLTYPE_STRING;
        json_decref(j);
        return t;
    }
    return SL_WH_COLTYPE_STRING;
}

static bool is_list(int t)
{
    return t == SL_WH_COLTYPE_LIST_INT || t == SL_WH_COLTYPE_LIST_FLOAT ||
           t == SL_WH_COLTYPE_LIST_STRING || t == SL_WH_COLTYPE_LIST_WEIGHTED || t == T_EMPTY_LIST;
}

static sl_wh_coltype_t merge(sl_wh_coltype_t a, sl_wh_coltype_t b)
{
    if (a == SL_WH_COLTYPE_ANY || a == b) return b;
    if (b == SL_WH_COLTYPE_ANY) return a;
    if ((int)a == T_EMPTY_LIST && is_list((int)b)) return b;
    if ((int)b == T_EMPTY_LIST && is_list((int)a)) return a;
    bool an = a == SL_WH_COLTYPE_INT || a == SL_WH_COLTYPE_FLOAT;
    bool bn = b == SL_WH_COLTYPE_INT || b == SL_WH_COLTYPE_FLOAT;
    if (an && bn) return SL_WH_COLTYPE_FLOAT;
    if ((a == SL_WH_COLTYPE_LIST_INT && b == SL_WH_COLTYPE_LIST_FLOAT) ||
        (b == SL_WH_COLTYPE_LIST_INT && a == SL_WH_COLTYPE_LIST_FLOAT))
        return SL_WH_COLTYPE_LIST_FLOAT;
    /* A scalar id is a list of one. */
    if (a == SL_WH_COLTYPE_INT && (b == SL_WH_COLTYPE_LIST_INT || (int)b == T_EMPTY_LIST))
        return SL_WH_COLTYPE_LIST_INT;
    if (b == SL_WH_COLTYPE_INT && (a == SL_WH_COLTYPE_LIST_INT || (int)a == T_EMPTY_LIST))
        return SL_WH_COLTYPE_LIST_INT;
    return SL_WH_COLTYPE_STRING;
}

/* ---- header and inference ---- */

typedef struct inferring {
    sl_wh_csv_t *c;
    sl_wh_row_buf_t *b;
    sl_wh_coltype_t *types;
    uint32_t records, max_records;
    bool header_done, peek_only;
    sl_error_t *err;
} inferring_t;

static sl_err_t infer_record(void *ctx, const char *rec, size_t len, uint32_t inner, bool ended)
{
    (void)inner;
    inferring_t *in = ctx;
    sl_wh_csv_t *c = in->c;
    if (len > IMP_LINE_LIMIT) return in->header_done ? SL_OK : imp_bad(in->err, "header too long");
    if (!ended && in->peek_only) return SL_ERR_CLOSED; /* may be cut by the end of the peek */
    uint32_t nf;
    sl_error_t perr = {0};
    sl_err_t rc = split(in->b, rec, len, c->delim, &nf, &perr);
    if (!in->header_done) {
        if (rc != SL_OK) return sl_error_set(in->err, rc, "header: %s", perr.msg);
        if (nf == 1 && in->b->flen[0] == 0) return SL_OK; /* blank lines before the header */
        c->names = sl_calloc(c->a, nf, sizeof *c->names);
        in->types = sl_calloc(c->a, nf, sizeof *in->types);
        if (c->names == NULL || in->types == NULL)
            return sl_error_set(in->err, SL_ERR_NOMEM, "no memory for %u columns", nf);
        c->num_fields = nf;
        for (uint32_t f = 0; f < nf; f++) {
            const char *name = in->b->text + in->b->foff[f];
            char gen[32];
            if (*name == '\0') {
                snprintf(gen, sizeof gen, "column_%u", f + 1); /* e.g. pandas' unnamed index */
                name = gen;
            }
            if ((c->names[f] = sl_strdup(c->a, name)) == NULL)
                return sl_error_set(in->err, SL_ERR_NOMEM, "no memory for the header");
        }
        in->header_done = true;
        return SL_OK;
    }
    if (in->records >= in->max_records) return SL_ERR_CLOSED;
    if (rc != SL_OK || nf != c->num_fields) return SL_OK; /* a bad row later: not evidence */
    in->records++;
    for (uint32_t f = 0; f < nf; f++)
        in->types[f] =
            merge(in->types[f], field_type(in->b->text + in->b->foff[f], in->b->flen[f]));
    return SL_OK;
}

void sl_wh_csv_destroy(sl_wh_csv_t *c)
{
    if (c == NULL) return;
    for (uint32_t f = 0; f < c->num_fields && c->names != NULL; f++)
        sl_strfree(c->a, c->names[f]);
    sl_free(c->a, c->names, c->num_fields * sizeof *c->names);
    sl_wh_colmap_resolved_destroy(c->map);
    imp_source_close(c->stdin_src);
    sl_free(c->a, c, sizeof *c);
}

sl_err_t sl_wh_csv_open(const char *input, char delim, uint32_t infer_lines,
                        const sl_wh_colmap_t *mapping, const sl_allocator_t *a,
                        sl_wh_colmap_problem_fn problem, void *ctx, sl_wh_csv_t **out,
                        sl_error_t *err)
{
    *out = NULL;
    if (delim == '"' || delim == '\n' || delim == '\r' || delim == '\0')
        return sl_error_set(err, SL_ERR_INVALID, "the delimiter cannot be a quote or a newline");
    sl_wh_csv_t *c = sl_calloc(a, 1, sizeof *c);
    sl_wh_colmap_t *own = NULL;
    sl_wh_row_buf_t *b = NULL;
    sl_wh_schema_t *empty = sl_wh_schema_new(a);
    if (c == NULL || empty == NULL) {
        sl_free(a, c, sizeof *c);
        sl_wh_schema_destroy(empty);
        return sl_error_set(err, SL_ERR_NOMEM, "no memory for the CSV reader");
    }
    c->a = a;
    c->delim = delim;
    b = sl_wh_row_buf_new(empty, a);
    sl_wh_schema_destroy(empty);
    inferring_t in = {.c = c, .b = b, .max_records = infer_lines ? infer_lines : 1000, .err = err};
    imp_source_t *src = NULL;
    sl_err_t rc = b == NULL ? sl_error_set(err, SL_ERR_NOMEM, "no memory for a record") : SL_OK;
    if (rc == SL_OK) rc = imp_source_open(input, a, &src, err);
    if (rc == SL_OK) {
        /* Standard input cannot be read twice: infer from its first 64 KiB
         * (kept decoded by the source) and hand the source on. */
        in.peek_only = strcmp(input, "-") == 0;
        if (in.peek_only) imp_source_set_peek_only(src, true);
        rc = imp_read_records(src, a, delim, true, infer_record, NULL, &in, err);
        if (rc != SL_OK) sl_error_prefix(err, "%s: ", input);
    }
    if (rc == SL_OK && !in.header_done)
        rc = sl_error_set(err, SL_ERR_INVALID, "%s: no header row (the input is empty)", input);
    if (rc == SL_OK && mapping == NULL && (own = sl_wh_colmap_new_default(a)) == NULL)
        rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for a mapping");
    if (rc == SL_OK) {
        const sl_wh_colmap_t *m = mapping != NULL ? mapping : own;
        sl_wh_input_column_t *cols = sl_calloc(a, c->num_fields, sizeof *cols);
        if (cols == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "no memory for columns");
        for (uint32_t f = 0; cols != NULL && f < c->num_fields; f++) {
            sl_wh_coltype_t t = in.types[f];
            if ((int)t == T_EMPTY_LIST) t = SL_WH_COLTYPE_LIST_INT;
            if (t == SL_WH_COLTYPE_ANY) t = SL_WH_COLTYPE_FLOAT; /* no value seen: dense */
            /* A declared hash reads the cell as text, digits or not. */
            if (sl_wh_colmap_hashes(m, c->names[f]))
                t = is_list((int)t) ? SL_WH_COLTYPE_LIST_STRING : SL_WH_COLTYPE_STRING;
            cols[f] = (sl_wh_input_column_t){c->names[f], t};
        }
        if (rc == SL_OK) {
            rc = sl_wh_colmap_resolve(m, cols, c->num_fields, a, problem, ctx, &c->map, err);
            if (rc != SL_OK) sl_error_prefix(err, "%s: ", input);
        }
        sl_free(a, cols, c->num_fields * sizeof *cols);
    }
    if (in.types != NULL) sl_free(a, in.types, c->num_fields * sizeof *in.types);
    sl_wh_colmap_destroy(own);
    sl_wh_row_buf_destroy(b);
    if (src != NULL && in.peek_only && rc == SL_OK) {
        imp_source_set_peek_only(src, false); /* rewound: the import reads it from its start */
        c->stdin_src = src;
        src = NULL;
    }
    imp_source_close(src);
    if (rc != SL_OK) {
        sl_wh_csv_destroy(c);
        return rc;
    }
    *out = c;
    return SL_OK;
}

const sl_wh_colmap_resolved_t *sl_wh_csv_mapping(const sl_wh_csv_t *c)
{
    return c->map;
}

uint32_t sl_wh_csv_num_columns(const sl_wh_csv_t *c)
{
    return c->num_fields;
}

imp_source_t *imp_csv_take_stdin(sl_wh_csv_t *c)
{
    imp_source_t *s = c->stdin_src;
    c->stdin_src = NULL;
    return s;
}

char imp_csv_delim(const sl_wh_csv_t *c)
{
    return c->delim;
}

sl_err_t imp_csv_check_header(const sl_wh_csv_t *c, sl_wh_row_buf_t *b, const char *rec, size_t len,
                              sl_error_t *err)
{
    uint32_t nf;
    sl_err_t rc = split(b, rec, len, c->delim, &nf, err);
    if (rc != SL_OK) return sl_error_set(err, SL_ERR_INVALID, "header: %s", err->msg);
    bool same = nf == c->num_fields;
    for (uint32_t f = 0; same && f < nf; f++) {
        const char *name = b->text + b->foff[f];
        char gen[32];
        if (*name == '\0') {
            snprintf(gen, sizeof gen, "column_%u", f + 1);
            name = gen;
        }
        same = strcmp(name, c->names[f]) == 0;
    }
    if (!same)
        return sl_error_set(err, SL_ERR_INVALID,
                            "its header (%u columns) differs from the first input's (%u "
                            "columns, first '%s')",
                            nf, c->num_fields, c->num_fields ? c->names[0] : "");
    return SL_OK;
}

/* ---- records ---- */

/* A cell holding a JSON list, for imp_colmap_fill. */
static sl_err_t cell_json(const char *s, size_t len, const char *col, json_t **out, sl_error_t *err)
{
    json_error_t jerr;
    *out = json_loadb(s, len, 0, &jerr);
    if (*out == NULL) return imp_bad(err, "column '%s': bad JSON list: %s", col, jerr.text);
    return SL_OK;
}

static sl_err_t fill_slot(const sl_wh_csv_t *c, sl_wh_row_buf_t *b, const sl_wh_colmap_slot_t *s,
                          sl_wh_row_t *row, bool has[3], sl_error_t *err)
{
    const sl_wh_colmap_resolved_t *r = c->map;
    const char *txt = b->text + b->foff[s->column];
    size_t len = b->flen[s->column];
    const char *col = c->names[s->column];
    char ex[48];
    bool weights_missing =
        s->weights_column == SL_WH_COLMAP_NONE || b->flen[s->weights_column] == 0;
    if (len == 0 && weights_missing) return SL_OK; /* missing */
    int64_t v;
    float f;
    switch (s->target) {
    case SL_WH_MAP_SAMPLE_ID:
    case SL_WH_MAP_SESSION_ID:
    case SL_WH_MAP_TIMESTAMP:
        if (!imp_parse_i64(txt, len, &v))
            return imp_bad(err, "field %u (%s): expected an integer, got '%s'", s->column + 1, col,
                           imp_excerpt(txt, len, ex, sizeof ex));
        if (s->target == SL_WH_MAP_SAMPLE_ID)
            row->sample_id = v;
        else if (s->target == SL_WH_MAP_SESSION_ID)
            row->session_id = v;
        else
            row->timestamp = v;
        has[s->target - SL_WH_MAP_SAMPLE_ID] = true;
        return SL_OK;
    case SL_WH_MAP_LABEL:
    case SL_WH_MAP_DENSE:
        if (!parse_number(txt, len, &f))
            return imp_bad(err, "field %u (%s): expected a number, got '%s'", s->column + 1, col,
                           imp_excerpt(txt, len, ex, sizeof ex));
        if (s->target == SL_WH_MAP_LABEL)
            b->labels[s->index] = f;
        else
            b->dense[s->index] = f;
        return SL_OK;
    case SL_WH_MAP_SPARSE:
        if (txt[0] != '[') {
            if (s->hash)
                v = sl_wh_colmap_hash(txt, len, s->seed);
            else if (!imp_parse_i64(txt, len, &v) || v < 0)
                return imp_bad(
                    err, "field %u (%s): expected an id (an integer >= 0) or a list, got '%s'",
                    s->column + 1, col, imp_excerpt(txt, len, ex, sizeof ex));
            if (!imp_reserve(b, s->index, 1))
                return sl_error_set(err, SL_ERR_NOMEM, "no memory for an id");
            b->ids[s->index][0] = v;
            b->lists[s->index].len = 1;
            b->lists[s->index].ids = b->ids[s->index];
            return SL_OK;
        }
        break;
    case SL_WH_MAP_WEIGHTED:
        break;
    }
    /* A JSON list (sparse or weighted). */
    json_t *jv = NULL, *jw = NULL;
    sl_err_t rc = len > 0 ? cell_json(txt, len, col, &jv, err) : SL_OK;
    if (rc == SL_OK && s->weights_column != SL_WH_COLMAP_NONE && !weights_missing)
        rc = cell_json(b->text + b->foff[s->weights_column], b->flen[s->weights_column],
                       c->names[s->weights_column], &jw, err);
    if (rc == SL_OK) rc = imp_colmap_fill(b, r, s, jv, jw, row, err);
    json_decref(jv);
    json_decref(jw);
    if (rc == SL_ERR_CORRUPT) sl_error_prefix(err, "field %u: ", s->column + 1);
    return rc;
}

sl_err_t sl_wh_csv_parse_record(const sl_wh_csv_t *c, sl_wh_row_buf_t *b, const char *rec,
                                size_t len, sl_wh_row_t *row, bool has[3], sl_error_t *err)
{
    imp_row_reset(b);
    *row = (sl_wh_row_t){0};
    has[0] = has[1] = has[2] = false;
    uint32_t nf;
    SL_FORWARD_IF_ERROR(split(b, rec, len, c->delim, &nf, err));
    if (nf != c->num_fields)
        return imp_bad(err, "%u field%s, the header has %u", nf, nf == 1 ? "" : "s", c->num_fields);
    for (uint32_t i = 0; i < c->map->num_slots; i++)
        SL_FORWARD_IF_ERROR(fill_slot(c, b, &c->map->slots[i], row, has, err));
    row->labels = b->labels;
    row->dense = b->dense;
    row->sparse = b->lists;
    return SL_OK;
}

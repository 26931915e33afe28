/* CSV records (RFC 4180): cutting a byte stream into records where a quoted
 * field may hold newlines, and cutting one plain file into byte ranges
 * that start on record boundaries, for parallel parsing.
 *
 * The lexer has four states; a record ends at a '\n' outside quotes:
 *   START  at a field's start: '"' opens quotes, delim ends the field
 *   UNQ    inside an unquoted field (a '"' here is a literal byte; the
 *          parser makes it a bad row, the cutter just goes on)
 *   Q      inside quotes: everything, '\n' included, is content but '"'
 *   QQ     after a '"' inside quotes: '"' is an escaped quote (back to Q),
 *          delim ends the field, '\n' ends the record, else UNQ
 * Why one lexer for both: a range boundary must be exactly where the
 * sequential reader would end a record, so the range planner runs the
 * same state machine over the bytes before it, from the file's start (a
 * boundary cannot be found from the middle of a file: a '\n' after an odd
 * number of quotes may be inside a field or not, depending on what came
 * before). */
#include "common/mem.h"
#include "import_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

enum { S_START, S_UNQ, S_Q, S_QQ };

/* Scan p[from..end) from state *st; @return the index of the '\n' that
 * ends the record, or end when the record goes on. *newlines counts every
 * '\n' passed inside quotes. */
static size_t scan(const char *p, size_t from, size_t end, char delim, int *st, uint32_t *newlines)
{
    int s = *st;
    size_t i = from;
    while (i < end) {
        if (s == S_START || s == S_UNQ) {
            /* Outside quotes only a '"' can change where the record ends:
             * without one before the next '\n', that '\n' ends it. */
            const char *nl = memchr(p + i, '\n', end - i);
            size_t stop = nl != NULL ? (size_t)(nl - p) : end;
            const char *q = memchr(p + i, '"', stop - i);
            size_t upto = q != NULL ? (size_t)(q - p) : stop;
            if (upto > i) s = p[upto - 1] == delim ? S_START : S_UNQ;
            if (q == NULL) {
                if (nl == NULL) break;
                *st = S_START;
                return stop;
            }
            s = s == S_START ? S_Q : S_UNQ; /* a quote opens only at a field's start */
            i = upto + 1;
        } else if (s == S_Q) {
            /* The common case inside quotes is a long run without '"'. */
            const char *q = memchr(p + i, '"', end - i);
            size_t stop = q != NULL ? (size_t)(q - p) : end;
            for (const char *n = p + i; (n = memchr(n, '\n', (size_t)(p + stop - n))) != NULL; n++)
                (*newlines)++;
            i = stop;
            if (q == NULL) break;
            s = S_QQ;
            i++;
        } else { /* S_QQ */
            char c = p[i];
            if (c == '\n') {
                *st = S_START;
                return i;
            }
            s = c == '"' ? S_Q : c == delim ? S_START : S_UNQ;
            i++;
        }
    }
    *st = s;
    return end;
}

/* The lexer's state between calls: where a record ends depends on all
 * the bytes before it. */
typedef struct lexer {
    char delim;
    int st;
} lexer_t;

static size_t cut_record(void *state, const char *p, size_t from, size_t end, uint32_t *inner)
{
    lexer_t *lx = state;
    return scan(p, from, end, lx->delim, &lx->st, inner);
}

sl_err_t imp_read_records(imp_source_t *src, const sl_allocator_t *a, char delim, bool strip_bom,
                          imp_record_fn on_record, imp_chunk_fn on_chunk, void *ctx,
                          sl_error_t *err)
{
    lexer_t lx = {delim, S_START};
    return imp_read_cut(src, a, "record", strip_bom, cut_record, &lx, on_record, on_chunk, ctx,
                        err);
}

/* ---- ranges ---- */

typedef struct planning {
    uint64_t offset; /* of the next record */
    uint64_t lines;  /* physical lines before it */
    uint64_t records;
    uint32_t next, n;
    uint64_t *begin, *first_line;
    uint64_t size, step;
} planning_t;

static sl_err_t plan_record(void *ctx, const char *rec, size_t len, uint32_t inner, bool ended)
{
    (void)rec;
    planning_t *p = ctx;
    p->records++;
    p->offset += len + (ended ? 1 : 0);
    p->lines += inner + (ended ? 1 : 0);
    if (p->records == 1) {
        /* The header: range 0 starts after it, the others are spread over the rest. */
        p->begin[0] = p->offset;
        p->first_line[0] = p->lines + 1;
        p->next = 1;
        p->step = p->size > p->offset ? (p->size - p->offset) / p->n : 0;
        return SL_OK;
    }
    while (p->next < p->n && p->offset >= p->begin[0] + p->step * p->next) {
        p->begin[p->next] = p->offset;
        p->first_line[p->next] = p->lines + 1;
        p->next++;
    }
    return p->next == p->n ? SL_ERR_CLOSED : SL_OK;
}

sl_err_t imp_csv_plan_ranges(const char *path, char delim, uint32_t want, const sl_allocator_t *a,
                             imp_range_t *ranges, uint32_t *count, sl_error_t *err)
{
    *count = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return sl_error_set(err, SL_ERR_IO, "stat %s: %s", path, strerror(errno));
    imp_source_t *src;
    sl_err_t rc = imp_source_open(path, a, &src, err);
    if (rc != SL_OK) return rc;
    if (!imp_source_plain(src) || want < 2) {
        imp_source_close(src);
        return SL_OK; /* read whole (a compressed file cannot be split) */
    }
    uint64_t begin[IMP_MAX_RANGES], first_line[IMP_MAX_RANGES];
    if (want > IMP_MAX_RANGES) want = IMP_MAX_RANGES;
    planning_t p = {
        .n = want, .begin = begin, .first_line = first_line, .size = (uint64_t)st.st_size};
    /* The BOM is counted in the offsets: ranges are byte positions in the file. */
    char bom[3];
    size_t bn = 0;
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
        bn = fread(bom, 1, 3, f);
        fclose(f);
    }
    if (bn == 3 && memcmp(bom, "\xef\xbb\xbf", 3) == 0) p.offset = 3;
    rc = imp_read_records(src, a, delim, true, plan_record, NULL, &p, err);
    imp_source_close(src);
    if (rc != SL_OK) return rc;
    if (p.records == 0) return SL_OK;
    uint32_t n = p.next;
    for (uint32_t i = 0; i < n; i++) {
        ranges[i].begin = begin[i];
        ranges[i].end = i + 1 < n ? begin[i + 1] : p.size;
        ranges[i].first_line = first_line[i];
    }
    /* The first range reads the header too (and checks it, as a whole file's reader does). */
    ranges[0].begin = 0;
    ranges[0].first_line = 1;
    /* Empty ranges (a file of few records) are dropped. */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (ranges[i].end > ranges[i].begin || i == 0) ranges[k++] = ranges[i];
    *count = k;
    return SL_OK;
}

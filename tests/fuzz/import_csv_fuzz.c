/* Fuzz target for the CSV importer: the input is a whole CSV file (header
 * first). Its columns' types are inferred and the default mapping
 * resolved (or refused with a message); every record is then cut by the
 * RFC 4180 lexer and parsed, each a row or SL_ERR_CORRUPT with a message,
 * never a crash, a leak or an out-of-bounds read. The range planner must
 * cut only where the sequential reader starts a record (the quote state
 * of both agree), and its ranges must tile the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "warehouse/column_map.h"
#include "warehouse/import_internal.h"

#define MAX_STARTS 4096

typedef struct walk {
    sl_wh_csv_t *csv;
    sl_wh_row_buf_t *b;
    uint64_t offset; /* of the next record */
    uint64_t starts[MAX_STARTS];
    uint32_t n;
    bool header;
} walk_t;

static sl_err_t on_record(void *ctx, const char *rec, size_t len, uint32_t inner, bool ended)
{
    (void)inner;
    walk_t *w = ctx;
    if (w->n < MAX_STARTS) w->starts[w->n++] = w->offset;
    w->offset += len + (ended ? 1 : 0);
    if (!w->header) {
        w->header = true;
        return SL_OK;
    }
    if (w->csv == NULL || len > IMP_LINE_LIMIT) return SL_OK;
    sl_wh_row_t row;
    bool has[3];
    sl_error_t e = {0};
    sl_err_t rc = sl_wh_csv_parse_record(w->csv, w->b, rec, len, &row, has, &e);
    if (rc != SL_OK && (rc != SL_ERR_CORRUPT || e.msg[0] == '\0')) abort();
    return SL_OK;
}

static bool is_start(const walk_t *w, uint64_t off)
{
    for (uint32_t i = 0; i < w->n; i++)
        if (w->starts[i] == off) return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/sluice-csv-fuzz-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) abort();
    if (size > 0 && write(fd, data, size) != (ssize_t)size) abort();
    close(fd);
    walk_t *w = calloc(1, sizeof *w);
    if (w == NULL) abort();
    sl_error_t err = {0};
    sl_err_t rc = sl_wh_csv_open(path, ',', 100, NULL, NULL, NULL, NULL, &w->csv, &err);
    if (rc != SL_OK && err.msg[0] == '\0') abort();
    if (rc == SL_OK) w->b = sl_wh_row_buf_new(sl_wh_csv_mapping(w->csv)->schema, NULL);
    /* A second mapping on the first three columns: two parallel lists as
     * one weighted feature, and a hashed string column. */
    if (rc == SL_OK && sl_wh_csv_mapping(w->csv)->num_columns >= 3) {
        const sl_wh_input_column_t *c = sl_wh_csv_mapping(w->csv)->columns;
        json_t *mj = json_pack("{s:[{s:s, s:s, s:s}], s:[{s:s, s:{s:i}}], s:b}", "weighted", "name",
                               "wf", "ids", c[0].name, "weights", c[1].name, "sparse", "column",
                               c[2].name, "hash", "seed", 1, "infer", 0);
        sl_wh_colmap_t *m = NULL;
        sl_wh_csv_t *c2 = NULL;
        if (mj != NULL && sl_wh_colmap_parse(mj, NULL, NULL, NULL, NULL, &m, &err) == SL_OK &&
            sl_wh_csv_open(path, ',', 100, m, NULL, NULL, NULL, &c2, &err) == SL_OK) {
            sl_wh_csv_destroy(w->csv);
            sl_wh_row_buf_destroy(w->b);
            w->csv = c2;
            w->b = sl_wh_row_buf_new(sl_wh_csv_mapping(c2)->schema, NULL);
        }
        json_decref(mj);
        sl_wh_colmap_destroy(m);
    }
    imp_source_t *src = NULL;
    if (imp_source_open(path, NULL, &src, &err) == SL_OK) {
        bool bom = size >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0;
        w->offset = bom ? 3 : 0;
        rc = imp_read_records(src, NULL, ',', true, on_record, NULL, w, &err);
        /* on_record takes every record: only the input itself (a corrupt
         * gzip or zstd stream) or memory may stop the read, with a message */
        if (rc != SL_OK && rc != SL_ERR_NOMEM && (rc != SL_ERR_CORRUPT || err.msg[0] == '\0'))
            abort();
        imp_source_close(src);
        imp_range_t ranges[IMP_MAX_RANGES];
        uint32_t count = 0;
        if (w->n < MAX_STARTS &&
            imp_csv_plan_ranges(path, ',', 4, NULL, ranges, &count, &err) == SL_OK && count > 0) {
            if (ranges[0].begin != 0 || ranges[count - 1].end != size) abort();
            for (uint32_t i = 1; i < count; i++)
                if (ranges[i].begin != ranges[i - 1].end || !is_start(w, ranges[i].begin)) abort();
        }
    }
    sl_wh_row_buf_destroy(w->b);
    sl_wh_csv_destroy(w->csv);
    free(w);
    unlink(path);
    return 0;
}

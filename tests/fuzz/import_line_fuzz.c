/* Fuzz target for the importers' line parsers: the first byte picks Criteo
 * TSV or jsonl (against a schema with every feature kind), the rest is cut
 * into lines and each parsed. A line is either a row or SL_ERR_CORRUPT
 * with a message; never a crash, a leak or an out-of-bounds read. Parsing
 * the same line twice gives the same row (determinism). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "warehouse/import.h"

static sl_wh_schema_t *jsonl_schema(void)
{
    sl_wh_schema_t *s = sl_wh_schema_new(NULL);
    if (s == NULL) return NULL;
    sl_wh_schema_add_label(s, "click", NULL);
    sl_wh_schema_add_feature(s, "price", SL_WH_DENSE, NULL);
    sl_wh_schema_add_feature(s, "item", SL_WH_SPARSE, NULL);
    sl_wh_schema_add_feature(s, "tags", SL_WH_WEIGHTED, NULL);
    return s;
}

static int same_row(const sl_wh_row_t *a, const sl_wh_row_t *b, uint32_t T, uint32_t D, uint32_t S)
{
    if (a->sample_id != b->sample_id || a->session_id != b->session_id ||
        a->timestamp != b->timestamp)
        return 0;
    if (memcmp(a->labels, b->labels, T * sizeof(float)) != 0) return 0;
    if (memcmp(a->dense, b->dense, D * sizeof(float)) != 0) return 0;
    for (uint32_t s = 0; s < S; s++)
        if (a->sparse[s].len != b->sparse[s].len) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    int criteo = data[0] & 1;
    sl_wh_schema_t *schema = criteo ? sl_wh_criteo_schema(NULL) : jsonl_schema();
    sl_wh_row_buf_t *b = schema ? sl_wh_row_buf_new(schema, NULL) : NULL;
    if (b == NULL) abort();
    uint32_t T = sl_wh_schema_num_labels(schema), D = sl_wh_schema_num_dense(schema),
             S = sl_wh_schema_num_sparse(schema);
    float labels[8], dense[16];
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    while (p <= end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        /* The parser reads exactly len bytes: give it a copy without slack. */
        char *line = malloc(len ? len : 1);
        if (line == NULL) abort();
        memcpy(line, p, len);
        sl_wh_row_t r1, r2;
        sl_error_t e1 = {0}, e2 = {0};
        bool sid;
        sl_err_t rc1 = criteo ? sl_wh_criteo_parse_line(b, line, len, &r1, &e1)
                              : sl_wh_jsonl_parse_line(b, line, len, &r1, &sid, &e1);
        if (rc1 != SL_OK && (rc1 != SL_ERR_CORRUPT || e1.msg[0] == '\0')) abort();
        if (rc1 == SL_OK) {
            sl_wh_row_t keep = r1;
            memcpy(labels, r1.labels, T * sizeof(float));
            memcpy(dense, r1.dense, D * sizeof(float));
            keep.labels = labels;
            keep.dense = dense;
            uint32_t lens[32];
            for (uint32_t s = 0; s < S; s++)
                lens[s] = r1.sparse[s].len;
            sl_err_t rc2 = criteo ? sl_wh_criteo_parse_line(b, line, len, &r2, &e2)
                                  : sl_wh_jsonl_parse_line(b, line, len, &r2, &sid, &e2);
            if (rc2 != SL_OK) abort();
            for (uint32_t s = 0; s < S; s++)
                if (lens[s] != r2.sparse[s].len) abort();
            keep.sparse = r2.sparse;
            if (!same_row(&keep, &r2, T, D, S)) abort();
        }
        free(line);
        if (nl == NULL) break;
        p = nl + 1;
    }
    sl_wh_row_buf_destroy(b);
    sl_wh_schema_destroy(schema);
    return 0;
}

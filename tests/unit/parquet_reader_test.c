/* The Parquet reader on whole files (src/parquet/reader.c) with exact
 * values: a ZSTD dictionary page read where it is decompressed, which row
 * groups a range excludes by their statistics, a reader renewed from chunk
 * to chunk and readers sharing a scratch reading as fresh ones, and dense
 * batches (sl_pq_reader_set_dense) against spread ones. */
#include "parquet_decode_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <zstd.h>

#include "parquet/encoding.h"
#include "parquet/parquet.h"

/* ---- a dictionary read where it is decompressed ---- */

/* A page header (v1 data page or dictionary page) of a ZSTD page. */
static void page_header(w_t *h, bool dict, size_t usize, size_t csize, uint32_t nv)
{
    fint(h, 1, SL_PQ_T_I32, dict ? 2 : 0);
    fint(h, 1, SL_PQ_T_I32, (int64_t)usize);
    fint(h, 1, SL_PQ_T_I32, (int64_t)csize);
    byte(h, (uint8_t)((dict ? 4 : 2) << 4 | SL_PQ_T_STRUCT)); /* field 7 or 5 */
    fint(h, 1, SL_PQ_T_I32, nv);
    fint(h, 1, SL_PQ_T_I32, dict ? SL_PQ_ENC_PLAIN : SL_PQ_ENC_RLE_DICTIONARY);
    if (!dict) {
        fint(h, 1, SL_PQ_T_I32, SL_PQ_ENC_RLE);
        fint(h, 1, SL_PQ_T_I32, SL_PQ_ENC_RLE);
    }
    byte(h, 0);
    byte(h, 0);
}

/* A file of one required column "x" of type (INT64 or DOUBLE), ZSTD, 8
 * rows: a dictionary page of the 3 entries dict whose header says
 * dict_says of them, and a data page of indices 0 1 2 1 0 2 2 1. */
static size_t zstd_dict_file(uint8_t *out, int type, const void *dict, uint32_t dict_says)
{
    w_t f = {0};
    put(&f, "PAR1", 4);
    uint8_t z[512];
    size_t zn = ZSTD_compress(z, sizeof z, dict, 24, 1);
    cr_assert(!ZSTD_isError(zn));
    w_t h = {0};
    page_header(&h, true, 24, zn, dict_says);
    put(&f, h.b, h.n);
    put(&f, z, zn);
    size_t data_at = f.n;
    /* bit width 2, one bit-packed group of 8: 0 1 2 1 | 0 2 2 1 */
    const uint8_t idx[] = {2, 3, 0 | 1 << 2 | 2 << 4 | 1 << 6, 0 | 2 << 2 | 2 << 4 | 1 << 6};
    zn = ZSTD_compress(z, sizeof z, idx, sizeof idx, 1);
    cr_assert(!ZSTD_isError(zn));
    h.n = 0;
    page_header(&h, false, sizeof idx, zn, 8);
    put(&f, h.b, h.n);
    put(&f, z, zn);
    size_t chunk = f.n - 4;
    w_t m = {0};
    fint(&m, 1, SL_PQ_T_I32, 1);
    byte(&m, 1 << 4 | SL_PQ_T_LIST); /* schema: 2 elements */
    byte(&m, 2 << 4 | SL_PQ_T_STRUCT);
    fbin(&m, 4, "schema");
    fint(&m, 1, SL_PQ_T_I32, 1);
    byte(&m, 0);
    fint(&m, 1, SL_PQ_T_I32, type); /* x: required */
    fint(&m, 2, SL_PQ_T_I32, 0);
    fbin(&m, 1, "x");
    byte(&m, 0);
    fint(&m, 1, SL_PQ_T_I64, 8); /* num_rows */
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_STRUCT); /* one row group */
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_STRUCT); /* one column chunk */
    byte(&m, 3 << 4 | SL_PQ_T_STRUCT); /* field 3: ColumnMetaData */
    fint(&m, 1, SL_PQ_T_I32, type);
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_I32);
    varint(&m, 0);
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_BINARY);
    varint(&m, 1);
    put(&m, "x", 1);
    fint(&m, 1, SL_PQ_T_I32, SL_PQ_ZSTD);
    fint(&m, 1, SL_PQ_T_I64, 8);
    fint(&m, 1, SL_PQ_T_I64, (int64_t)chunk);
    fint(&m, 1, SL_PQ_T_I64, (int64_t)chunk);
    fint(&m, 2, SL_PQ_T_I64, (int64_t)data_at); /* data_page_offset */
    fint(&m, 2, SL_PQ_T_I64, 4);                /* dictionary_page_offset */
    byte(&m, 0);
    byte(&m, 0);
    fint(&m, 1, SL_PQ_T_I64, (int64_t)chunk); /* total_byte_size */
    fint(&m, 1, SL_PQ_T_I64, 8);              /* num_rows */
    byte(&m, 0);
    byte(&m, 0);
    put(&f, m.b, m.n);
    uint32_t ml = (uint32_t)m.n;
    put(&f, &ml, 4);
    put(&f, "PAR1", 4);
    memcpy(out, f.b, f.n);
    return f.n;
}

Test(parquet_reader, zstd_dictionary_read_in_place)
{
    /* an INT64 and a DOUBLE dictionary in a ZSTD chunk are decompressed
     * straight into the dictionary and gathered from there; a dictionary
     * page whose header claims more entries than its bytes hold is refused
     * naming the page */
    const int64_t ids[3] = {10, -20, INT64_C(1) << 40};
    const double reals[3] = {0.5, -1.25, 1e300};
    const uint32_t want[8] = {0, 1, 2, 1, 0, 2, 2, 1};
    for (int t = 0; t < 2; t++) {
        uint8_t buf[4096];
        int type = t == 0 ? SL_PQ_INT64 : SL_PQ_DOUBLE;
        const void *dict = t == 0 ? (const void *)ids : (const void *)reals;
        size_t n = zstd_dict_file(buf, type, dict, 3);
        sl_pq_memory_t mem;
        sl_pq_source_t src;
        sl_pq_source_memory(&mem, buf, n, &src);
        sl_error_t err = {0};
        sl_pq_file_t *f;
        cr_assert_eq(sl_pq_file_open(&src, "d.parquet", NULL, &f, &err), SL_OK, "%s", err.msg);
        sl_pq_reader_t *r;
        cr_assert_eq(sl_pq_reader_new(f, 0, 0, &r, &err), SL_OK, "%s", err.msg);
        const sl_pq_batch_t *b;
        cr_assert_eq(sl_pq_reader_next(r, 100, &b, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(b->rows, 8);
        for (uint32_t i = 0; i < 8; i++) {
            cr_assert_eq(b->valid[i], 1);
            if (t == 0)
                cr_assert_eq(b->i64[i], ids[want[i]], "row %u", i);
            else
                cr_assert_eq(b->f64[i], reals[want[i]], "row %u", i);
        }
        cr_assert_eq(sl_pq_reader_next(r, 100, &b, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(b->rows, 0);
        sl_pq_reader_destroy(r);
        sl_pq_file_destroy(f);

        n = zstd_dict_file(buf, type, dict, 4);
        sl_pq_source_memory(&mem, buf, n, &src);
        cr_assert_eq(sl_pq_file_open(&src, "d.parquet", NULL, &f, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_pq_reader_new(f, 0, 0, &r, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_pq_reader_next(r, 100, &b, &err), SL_ERR_TRUNCATED);
        char msg[256];
        snprintf(msg, sizeof msg,
                 "file d.parquet row group 0 column x page 1 (offset 4): dictionary of 4 %s "
                 "values needs 32 bytes, the page has 24",
                 t == 0 ? "INT64" : "DOUBLE");
        cr_assert_str_eq(err.msg, msg);
        sl_pq_reader_destroy(r);
        sl_pq_file_destroy(f);
    }
}

/* ---- statistics: which row groups a range filter may skip ---- */

static sl_pq_file_t *fixture(const char *name, sl_pq_source_t *src)
{
    const char *root = getenv("SLUICE_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/parquet/%s", root ? root : "..", name);
    sl_error_t err = {0};
    sl_pq_file_t *f = NULL;
    cr_assert_eq(sl_pq_source_file(path, src, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_pq_file_open(src, path, NULL, &f, &err), SL_OK, "%s", err.msg);
    return f;
}

static bool excludes(const sl_pq_meta_t *m, uint32_t g, const char *col, double lo, double hi)
{
    int64_t c = sl_pq_find_column(m, col);
    cr_assert_geq(c, 0, "%s", col);
    return sl_pq_chunk_excludes(&m->columns[c], &m->row_groups[g].chunks[c], lo, hi);
}

/* ---- a reader renewed from chunk to chunk ---- */

/* FNV-1a over n bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* A digest of every batch of r's chunk (rows, slots, validity, values,
 * list offsets and validity, bytes). */
static uint64_t chunk_digest(sl_pq_reader_t *r, bool is_list)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    sl_error_t err = {0};
    for (;;) {
        const sl_pq_batch_t *b;
        cr_assert_eq(sl_pq_reader_next(r, 50, &b, &err), SL_OK, "%s", err.msg);
        if (b->rows == 0) return h;
        h = fnv(h, &b->rows, 4);
        h = fnv(h, &b->slots, 4);
        h = fnv(h, b->valid, b->slots);
        if (b->kind == SL_PQ_KIND_I64) h = fnv(h, b->i64, (size_t)b->slots * 8);
        if (b->kind == SL_PQ_KIND_F32) h = fnv(h, b->f32, (size_t)b->slots * 4);
        if (b->kind == SL_PQ_KIND_F64) h = fnv(h, b->f64, (size_t)b->slots * 8);
        if (b->kind == SL_PQ_KIND_BYTES) {
            h = fnv(h, b->bytes_off, ((size_t)b->slots + 1) * 8);
            h = fnv(h, b->bytes, b->bytes_off[b->slots]);
        }
        if (is_list) {
            h = fnv(h, b->list_off, ((size_t)b->rows + 1) * 4);
            h = fnv(h, b->list_valid, b->rows);
        }
    }
}

Test(parquet_reader, renewed_reader_reads_as_a_fresh_one)
{
    /* every chunk of two files (dictionaries, a fallback to PLAIN mid-chunk,
     * nulls, lists, strings, three codecs), read by a fresh reader each,
     * then by one reader renewed from chunk to chunk across both files, the
     * first file closed before the second is opened */
    const char *names[] = {"pyarrow-mapped-zstd.parquet", "pyarrow-dict-fallback-lz4.parquet",
                           "pyarrow-snappy-v1.parquet"};
    const char *root = getenv("SLUICE_SOURCE_DIR");
    uint64_t want[3][64][16];
    uint32_t groups[3], chunks = 0;
    sl_pq_reader_t *renewed = NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (int fi = 0; fi < 3; fi++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/tests/data/parquet/%s", root ? root : "..", names[fi]);
            sl_pq_source_t src;
            sl_pq_file_t *f;
            sl_error_t err = {0};
            cr_assert_eq(sl_pq_source_file(path, &src, &err), SL_OK, "%s", err.msg);
            cr_assert_eq(sl_pq_file_open(&src, path, NULL, &f, &err), SL_OK, "%s", err.msg);
            const sl_pq_meta_t *m = sl_pq_file_meta(f);
            cr_assert(m->num_row_groups <= 16 && m->num_columns <= 64);
            groups[fi] = m->num_row_groups;
            uint32_t read = 0;
            for (uint32_t g = 0; g < m->num_row_groups; g++)
                for (uint32_t c = 0; c < m->num_columns; c++) {
                    if (m->columns[c].unsupported) continue;
                    read++;
                    if (pass == 0) {
                        sl_pq_reader_t *r;
                        cr_assert_eq(sl_pq_reader_new(f, g, c, &r, &err), SL_OK, "%s", err.msg);
                        want[fi][c][g] = chunk_digest(r, m->columns[c].is_list);
                        sl_pq_reader_destroy(r);
                    } else {
                        cr_assert_eq(sl_pq_reader_renew(f, g, c, &renewed, &err), SL_OK, "%s",
                                     err.msg);
                        cr_assert_eq(chunk_digest(renewed, m->columns[c].is_list), want[fi][c][g],
                                     "%s row group %u column %s", names[fi], g, m->columns[c].path);
                    }
                }
            cr_assert_gt(read, 0, "%s: no chunk read", names[fi]);
            chunks += read;
            if (pass == 1 && fi == 2) {
                /* a chunk that is not there: refused, the reader still destroyable */
                cr_assert_eq(sl_pq_reader_renew(f, groups[fi], 0, &renewed, &err), SL_ERR_INVALID);
                cr_assert(strstr(err.msg, "no row group") != NULL, "%s", err.msg);
            }
            sl_pq_file_destroy(f);
            sl_pq_source_file_close(&src);
        }
    }
    cr_assert_gt(chunks, 20, "%u chunks read", chunks);
    sl_pq_reader_destroy(renewed);
}

/* Fold one batch of a reader into *h (as chunk_digest does); false at
 * the chunk's end. */
static bool digest_step(sl_pq_reader_t *r, bool is_list, uint32_t rows, uint64_t *h)
{
    const sl_pq_batch_t *b;
    sl_error_t err = {0};
    cr_assert_eq(sl_pq_reader_next(r, rows, &b, &err), SL_OK, "%s", err.msg);
    if (b->rows == 0) return false;
    *h = fnv(*h, &b->rows, 4);
    *h = fnv(*h, &b->slots, 4);
    *h = fnv(*h, b->valid, b->slots);
    if (b->kind == SL_PQ_KIND_I64) *h = fnv(*h, b->i64, (size_t)b->slots * 8);
    if (b->kind == SL_PQ_KIND_F32) *h = fnv(*h, b->f32, (size_t)b->slots * 4);
    if (b->kind == SL_PQ_KIND_F64) *h = fnv(*h, b->f64, (size_t)b->slots * 8);
    if (b->kind == SL_PQ_KIND_BYTES) {
        *h = fnv(*h, b->bytes_off, ((size_t)b->slots + 1) * 8);
        *h = fnv(*h, b->bytes, b->bytes_off[b->slots]);
    }
    if (is_list) {
        *h = fnv(*h, b->list_off, ((size_t)b->rows + 1) * 4);
        *h = fnv(*h, b->list_valid, b->rows);
    }
    return true;
}

Test(parquet_reader, readers_sharing_a_scratch_read_as_alone)
{
    /* every fixture (codecs, v1 and v2 pages, uncompressed pages, CRCs,
     * dictionaries and a fallback): all the readers of a row group open at
     * once, sharing one scratch (pages decompressed at once, the ZSTD
     * context), stepped in turn 7 rows at a time, give each column the
     * batches its reader gives alone */
    const char *names[] = {"duckdb-zstd.parquet",
                           "legacy-two-level.parquet",
                           "polars-lz4.parquet",
                           "pyarrow-delta-zstd-v2.parquet",
                           "pyarrow-dict-fallback-lz4.parquet",
                           "pyarrow-int96.parquet",
                           "pyarrow-mapped-zstd.parquet",
                           "pyarrow-noncompliant-gzip-crc.parquet",
                           "pyarrow-snappy-v1.parquet"};
    sl_pq_scratch_t *scratch = sl_pq_scratch_new(NULL);
    cr_assert_not_null(scratch);
    uint32_t compared = 0;
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++) {
        sl_pq_source_t src;
        sl_pq_file_t *f = fixture(names[fi], &src);
        const sl_pq_meta_t *m = sl_pq_file_meta(f);
        cr_assert(m->num_columns <= 64);
        sl_error_t err = {0};
        for (uint32_t g = 0; g < m->num_row_groups; g++) {
            sl_pq_reader_t *rd[64] = {0};
            uint64_t alone[64], shared[64];
            bool live[64] = {0};
            uint32_t left = 0;
            for (uint32_t c = 0; c < m->num_columns; c++) {
                if (m->columns[c].unsupported) continue;
                sl_pq_reader_t *r;
                cr_assert_eq(sl_pq_reader_new(f, g, c, &r, &err), SL_OK, "%s", err.msg);
                alone[c] = UINT64_C(0xcbf29ce484222325);
                while (digest_step(r, m->columns[c].is_list, 7, &alone[c])) {
                }
                sl_pq_reader_destroy(r);
                cr_assert_eq(sl_pq_reader_new(f, g, c, &rd[c], &err), SL_OK, "%s", err.msg);
                sl_pq_reader_set_scratch(rd[c], scratch);
                shared[c] = UINT64_C(0xcbf29ce484222325);
                live[c] = true;
                left++;
            }
            while (left > 0)
                for (uint32_t c = 0; c < m->num_columns; c++)
                    if (live[c] && !digest_step(rd[c], m->columns[c].is_list, 7, &shared[c])) {
                        live[c] = false;
                        left--;
                    }
            for (uint32_t c = 0; c < m->num_columns; c++) {
                if (rd[c] == NULL) continue;
                cr_assert_eq(shared[c], alone[c], "%s row group %u column %s", names[fi], g,
                             m->columns[c].path);
                sl_pq_reader_destroy(rd[c]);
                compared++;
            }
        }
        sl_pq_file_destroy(f);
        sl_pq_source_file_close(&src);
    }
    cr_assert_gt(compared, 40, "%u chunks compared", compared);
    sl_pq_scratch_destroy(scratch);
}

Test(parquet_stats, row_groups_a_range_cannot_match)
{
    /* pyarrow-snappy-v1.parquet (tests/parquet/make_fixtures.py): row group 0 has id in
     * [0, 118785], small in [0, 7], f64 in [-1744.36, 2126.88], u64 (unsigned) in
     * [262960739054766719, 17910496931279845811]; row group 1 id in [126704, 245489],
     * small in [0, 9] */
    sl_pq_source_t src;
    sl_pq_file_t *f = fixture("pyarrow-snappy-v1.parquet", &src);
    const sl_pq_meta_t *m = sl_pq_file_meta(f);
    cr_assert(excludes(m, 0, "id", 200000, 300000));
    cr_assert(!excludes(m, 0, "id", 100000, 130000));
    cr_assert(!excludes(m, 0, "id", 118785, 118785));
    cr_assert(excludes(m, 1, "id", 0, 100000));
    cr_assert(excludes(m, 0, "small", 8, 100));
    cr_assert(!excludes(m, 1, "small", 8, 100));
    cr_assert(excludes(m, 0, "f64", 3000, 4000));
    cr_assert(!excludes(m, 0, "f64", -2000, -1744));
    cr_assert(excludes(m, 0, "u64", 0, 1e17));
    cr_assert(excludes(m, 0, "u64", 1.8e19, 1.9e19));
    /* a list column is never skipped by its elements' statistics */
    cr_assert(!excludes(m, 0, "item_ids", -10, -1));
    double lo, hi;
    int64_t c = sl_pq_find_column(m, "id");
    cr_assert(sl_pq_stats_range(&m->columns[c], &m->row_groups[0].chunks[c], &lo, &hi));
    cr_assert(lo < 0 && lo > -1e-300 && hi > 118785 && hi < 118785.0001);
    sl_pq_file_destroy(f);
    sl_pq_source_file_close(&src);

    /* written without statistics: nothing is excluded */
    f = fixture("pyarrow-noncompliant-gzip-crc.parquet", &src);
    m = sl_pq_file_meta(f);
    cr_assert(!excludes(m, 0, "id", 1e12, 1e13));
    sl_pq_file_destroy(f);
    sl_pq_source_file_close(&src);
}

/* ---- dense batches (sl_pq_reader_set_dense) ---- */

Test(parquet_reader, dense_batches_hold_the_valid_values_in_order)
{
    /* every chunk of two files (pages of no, only, leading, trailing and
     * scattered nulls; a dictionary falling back to plain pages; every
     * numeric kind; lists and strings, which stay spread), read by a
     * spread reader and a dense one in batches of several sizes: the same
     * rows and validity, and the dense values are the valid slots' values */
    const char *names[] = {"pyarrow-scalar-nulls-zstd.parquet", "pyarrow-mapped-zstd.parquet"};
    static const uint32_t sizes[] = {1, 37, 100, 4096};
    uint32_t dense_chunks = 0;
    for (int fi = 0; fi < 2; fi++) {
        sl_pq_source_t src;
        sl_pq_file_t *f = fixture(names[fi], &src);
        const sl_pq_meta_t *m = sl_pq_file_meta(f);
        for (uint32_t g = 0; g < m->num_row_groups; g++)
            for (uint32_t c = 0; c < m->num_columns; c++)
                for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
                    const sl_pq_column_t *col = &m->columns[c];
                    sl_pq_reader_t *rs, *rd;
                    sl_error_t err = {0};
                    cr_assert_eq(sl_pq_reader_new(f, g, c, &rs, &err), SL_OK, "%s", err.msg);
                    cr_assert_eq(sl_pq_reader_new(f, g, c, &rd, &err), SL_OK, "%s", err.msg);
                    sl_pq_reader_set_dense(rd, true);
                    bool dense = !col->is_list && col->kind != SL_PQ_KIND_BYTES;
                    dense_chunks += dense && z == 0;
                    const char *what = col->path;
                    for (;;) {
                        const sl_pq_batch_t *a, *b;
                        cr_assert_eq(sl_pq_reader_next(rs, sizes[z], &a, &err), SL_OK, "%s",
                                     err.msg);
                        cr_assert_eq(sl_pq_reader_next(rd, sizes[z], &b, &err), SL_OK, "%s",
                                     err.msg);
                        cr_assert_eq(b->dense, dense, "%s", what);
                        cr_assert(!a->dense);
                        cr_assert_eq(a->rows, b->rows, "%s", what);
                        cr_assert_eq(a->slots, b->slots, "%s", what);
                        if (a->rows == 0) break;
                        cr_assert_eq(memcmp(a->valid, b->valid, a->slots), 0, "%s", what);
                        if (!dense) continue;
                        uint32_t j = 0;
                        for (uint32_t s = 0; s < a->slots; s++) {
                            if (!a->valid[s]) continue;
                            if (a->kind == SL_PQ_KIND_I64)
                                cr_assert_eq(b->i64[j], a->i64[s], "%s slot %u", what, s);
                            else if (a->kind == SL_PQ_KIND_F32)
                                cr_assert_eq(memcmp(&b->f32[j], &a->f32[s], 4), 0, "%s", what);
                            else
                                cr_assert_eq(memcmp(&b->f64[j], &a->f64[s], 8), 0, "%s", what);
                            j++;
                        }
                        cr_assert_eq(b->vals, j, "%s: %u values", what, j);
                    }
                    sl_pq_reader_destroy(rs);
                    sl_pq_reader_destroy(rd);
                }
        sl_pq_file_destroy(f);
        sl_pq_source_file_close(&src);
    }
    cr_assert_geq(dense_chunks, 2 * 8 + 3 * 10, "%u dense chunks", dense_chunks);
}

/* The version-2 encodings (BITPACK, DELTA, DICT; docs/FORMAT.md section 3):
 * each is chosen where it is the smallest and reads back exactly; the
 * boundaries (all-equal values, the full 64-bit range, negative ids, a
 * feature without ids or values in a stripe, one-row stripes); version-1
 * files, from today's writer (format_version = 1) and from the old writer
 * (a committed fixture), still read; and what the decoders check when
 * checksums are skipped (dictionary blocks, order, indices; lengths) as
 * well as the footer fields of the new encodings. White-box: reads the
 * stream layout through wh_internal.h. */
#include "warehouse_testdata.h"

#include <xxhash.h>
#include <zstd.h>

#include "warehouse/import.h"
#include "warehouse/wh_internal.h"

static char *dir;

static void setup(void)
{
    dir = td_tmpdir();
}

static void teardown(void)
{
    td_rmrf(dir);
    free(dir);
}

TestSuite(warehouse_encoding, .init = setup, .fini = teardown);

static char *path_in(const char *name)
{
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 4096, "%s/%s", dir, name);
    return p;
}

static wh_file_t *open_layout(const uint8_t *data, size_t len)
{
    wh_file_t *f;
    sl_error_t err = {0};
    cr_assert_eq(wh_file_open(NULL, data, len, "x.slc", NULL, NULL, &f, &err), SL_OK, "%s",
                 err.msg);
    return f;
}

/* The stream of (name, kind) in stripe s, or NULL. */
static const wh_stream_t *find_stream(const wh_file_t *f, uint32_t s, const char *name,
                                      uint32_t kind)
{
    const wh_stripe_t *sp = &f->stripes[s];
    for (uint32_t k = 0; k < sp->num_streams; k++) {
        const wh_stream_t *st = &f->streams[sp->first_stream + k];
        if (st->kind == kind && strcmp(st->name, name) == 0) return st;
    }
    return NULL;
}

static uint32_t count_encoding(const wh_file_t *f, uint8_t enc)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < f->num_streams; i++)
        n += f->streams[i].encoding == enc;
    return n;
}

/* Read every stripe in both forms, with checksums; compare with the model. */
static void check_both_forms(const char *path, const td_rows_t *m)
{
    cr_assert_eq(td_check_file(path, m), m->n);
    sl_wh_read_opts_t o = {0};
    o.dedup_form = true;
    sl_wh_reader_t *r;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_reader_open(path, NULL, &o, &r, &err), SL_OK, "%s", err.msg);
    const sl_wh_rows_t *rows;
    uint64_t n = 0;
    for (;;) {
        cr_assert_eq(sl_wh_reader_next(r, &rows, &err), SL_OK, "%s", err.msg);
        if (rows == NULL) break;
        cr_assert_eq(sl_batch_validate(&rows->batch, &err), SL_OK, "%s", err.msg);
        n += rows->batch.batch_size;
    }
    cr_assert_eq(n, m->n);
    sl_wh_reader_close(r);
}

Test(warehouse_encoding, each_encoding_chosen_where_smallest_and_exact)
{
    uint32_t n = 3000;
    td_spec_t spec = {n,    8,   20,
                      true, 0.2, tu_seed("each_encoding_chosen_where_smallest_and_exact")};
    td_rows_t m;
    td_generate(&spec, &m);
    /* d2 drawn from 5 values: a dictionary of floats */
    for (uint32_t i = 0; i < n; i++)
        if (m.dense[(size_t)i * TD_D + 2] == m.dense[(size_t)i * TD_D + 2])
            m.dense[(size_t)i * TD_D + 2] = (float)(i % 5) * 0.5f - 1.0f;
    sl_wh_writer_opts_t o = td_opts(1000);
    sl_wh_write_stats_t ws = td_write(path_in("a.slc"), &m, &o);
    check_both_forms(path_in("a.slc"), &m);
    size_t len;
    uint8_t *data = td_read_all(path_in("a.slc"), &len);
    uint32_t version;
    memcpy(&version, data + 4, 4);
    cr_assert_eq(version, 2);
    wh_file_t *f = open_layout(data, len);
    cr_assert_eq(f->version, 2);
    for (uint32_t s = 0; s < 3; s++) {
        /* consecutive sample ids: a delta of 1 everywhere, no bytes */
        const wh_stream_t *st = find_stream(f, s, "sample_id", SL_WH_STREAM_SAMPLE_ID);
        cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DELTA);
        cr_assert_eq(st->bit_width, 0);
        cr_assert_eq(st->delta_base, 1);
        cr_assert_eq(st->for_base, 1000 + 1000 * (int64_t)s);
        cr_assert_eq(st->stored_size, 0);
        /* a 0/1 label: a dictionary of two values, one bit per row */
        st = find_stream(f, s, "click", SL_WH_STREAM_LABEL);
        cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
        cr_assert_eq(st->dict_size, 2);
        cr_assert_eq(st->bit_width, 1); /* random bits: no whole bytes */
        cr_assert_eq(st->codec, SLUICE__CODEC__CODEC_NONE);
        cr_assert_eq(st->for_base, 0); /* the bits of 0.0f */
        /* one id per row: every length equal, no bytes */
        st = find_stream(f, s, "u_geo", SL_WH_STREAM_LENGTHS);
        cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_BITPACK);
        cr_assert_eq(st->bit_width, 0);
        cr_assert_eq(st->for_base, 1);
        cr_assert_eq(st->raw_size, 0);
        /* lengths 0..3: two bits each */
        st = find_stream(f, s, "item", SL_WH_STREAM_LENGTHS);
        cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_BITPACK);
        cr_assert_eq(st->bit_width, 2);
        cr_assert_eq(st->raw_size, 250);
        /* five floats in a period of 5 rows: a dictionary whose indices
         * are kept in whole bytes, where zstd finds the repeats that 3-bit
         * indices hide */
        st = find_stream(f, s, "d2", SL_WH_STREAM_DENSE_VALUES);
        cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
        cr_assert_eq(st->dict_size, 5);
        cr_assert_eq(st->bit_width, 8);
        cr_assert_eq(st->codec, SLUICE__CODEC__CODEC_ZSTD);
        /* 63-bit ids repeated within sessions */
        st = find_stream(f, s, "u_hist", SL_WH_STREAM_IDS);
        cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
        cr_assert_lt(st->dict_size, st->value_count);
    }
    cr_assert_gt(count_encoding(f, SLUICE__ENCODING__ENCODING_FOR) +
                     count_encoding(f, SLUICE__ENCODING__ENCODING_BITPACK),
                 0);
    cr_assert_eq(ws.file_bytes, len);
    wh_file_close(f);
    free(data);
    td_free(&m);
}

/* The byte-aligned dictionary variant: indices of d2 (5 values, period 5)
 * in whole bytes under zstd decode to the model's values; an index beyond
 * the dictionary but inside the power of two the gather masks to (6), and
 * one beyond that mask (255), are both refused. */
Test(warehouse_encoding, byte_aligned_dictionary_indices_exact_and_checked)
{
    uint32_t n = 1000;
    td_spec_t spec = {n, 8, 20, true, 0.2, tu_seed("byte_aligned_dictionary_indices")};
    td_rows_t m;
    td_generate(&spec, &m);
    float want[1000];
    uint32_t nv = 0;
    for (uint32_t i = 0; i < n; i++)
        if (m.dense[(size_t)i * TD_D + 2] == m.dense[(size_t)i * TD_D + 2]) {
            m.dense[(size_t)i * TD_D + 2] = (float)(i % 5) * 0.5f - 1.0f;
            want[nv++] = m.dense[(size_t)i * TD_D + 2];
        }
    sl_wh_writer_opts_t o = td_opts(n);
    td_write(path_in("b.slc"), &m, &o);
    check_both_forms(path_in("b.slc"), &m);
    size_t len;
    uint8_t *data = td_read_all(path_in("b.slc"), &len);
    wh_file_t *f = open_layout(data, len);
    const wh_stream_t *st = find_stream(f, 0, "d2", SL_WH_STREAM_DENSE_VALUES);
    cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
    cr_assert_eq(st->codec, SLUICE__CODEC__CODEC_ZSTD);
    cr_assert_eq(st->bit_width, 8);
    cr_assert_eq(st->value_count, nv);
    cr_assert_eq(st->raw_size, st->dict_bytes + nv);
    uint8_t *raw = malloc(st->raw_size + 8);
    cr_assert_eq(ZSTD_decompress(raw, st->raw_size, data + st->offset, st->stored_size),
                 st->raw_size);
    memset(raw + st->raw_size, 0, 8);
    wh_dec_t d = {.f = f, .a = sl_allocator_default()};
    float got[1000];
    sl_error_t err = {0};
    cr_assert_eq(wh_unpack_f32(&d, st, raw, got, NULL, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(memcmp(got, want, (size_t)nv * 4), 0);
    static const uint8_t bad[] = {6, 255};
    for (int k = 0; k < 2; k++) {
        uint8_t keep = raw[st->dict_bytes + nv / 2];
        raw[st->dict_bytes + nv / 2] = bad[k];
        cr_assert_eq(wh_unpack_f32(&d, st, raw, got, NULL, &err), SL_ERR_CORRUPT, "index %u",
                     bad[k]);
        cr_assert(strstr(err.msg, "outside the dictionary of 5") != NULL, "%s", err.msg);
        raw[st->dict_bytes + nv / 2] = keep;
    }
    wh_buf_free(&d.z0, d.a);
    wh_buf_free(&d.z1, d.a);
    wh_buf_free(&d.z2, d.a);
    wh_buf_free(&d.dict, d.a);
    free(raw);
    wh_file_close(f);
    free(data);
    td_free(&m);
}

/* Boundaries: all-equal columns; the full 64-bit range (session ids and
 * timestamps from INT64_MIN to INT64_MAX, whose neighbours' differences
 * wrap; ids at both ends); negative ids; a stripe where a feature has no
 * ids and a dense feature no value; a last stripe of one row. */
static void boundary_rows(td_rows_t *m, uint32_t n, uint32_t stripe)
{
    td_spec_t spec = {n, 4, 6, true, 0.3, tu_seed("boundary_rows")};
    td_generate(&spec, m);
    for (uint32_t i = 0; i < n; i++) {
        m->sess[i] = (i & 1) ? INT64_MIN + (int64_t)i : INT64_MAX - (int64_t)i;
        m->ts[i] = 42;                                             /* all equal */
        m->labels[(size_t)i * TD_T + 1] = 0.25f;                   /* all equal floats */
        m->dense[(size_t)i * TD_D + 0] = -3.5f;                    /* all equal, never missing */
        if (i / stripe == 1) m->dense[(size_t)i * TD_D + 1] = NAN; /* stripe 1: none */
    }
    /* u_geo: one id per row at the ends of the range and around 0 */
    static const int64_t ends[] = {INT64_MIN, INT64_MAX, -1, 0, 1, INT64_MIN + 1, INT64_MAX - 1};
    for (uint32_t i = 0; i < n; i++)
        m->ids[3][m->off[3][i]] = ends[i % 7];
    /* item: negative ids; no ids at all in stripe 1 */
    for (uint32_t i = 0; i < n; i++)
        for (uint64_t j = m->off[0][i]; j < m->off[0][i + 1]; j++)
            m->ids[0][j] = -(int64_t)(m->ids[0][j] % 1000) - 1;
    uint64_t *off = m->off[0];
    int64_t *ids = malloc((off[n] + 1) * 8);
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = i / stripe == 1 ? 0 : m->len[0][i];
        memcpy(ids + at, m->ids[0] + off[i], (size_t)len * 8);
        m->len[0][i] = len;
        off[i] = at;
        at += len;
    }
    off[n] = at;
    free(m->ids[0]);
    m->ids[0] = ids;
}

Test(warehouse_encoding, boundaries_round_trip_in_both_versions)
{
    uint32_t stripe = 64, n = 3 * 64 + 1;
    td_rows_t m;
    boundary_rows(&m, n, stripe);
    sl_dedup_group_spec_t g = {"user", 2, td_user};
    for (uint32_t version = 1; version <= 2; version++) {
        for (int dedup = 0; dedup < 2; dedup++) {
            sl_wh_writer_opts_t o = td_opts(stripe);
            o.format_version = version;
            if (dedup) {
                o.num_dedup_groups = 1;
                o.dedup_groups = &g;
            }
            char name[64];
            snprintf(name, sizeof name, "b%u%d.slc", version, dedup);
            td_write(path_in(name), &m, &o);
            check_both_forms(path_in(name), &m);
            size_t len;
            uint8_t *data = td_read_all(path_in(name), &len);
            wh_file_t *f = open_layout(data, len);
            cr_assert_eq(f->version, version);
            cr_assert_eq(f->num_stripes, 4);
            cr_assert_eq(f->stripes[3].rows, 1);
            /* stripe 1: no ids for item, no values for d1 */
            cr_assert_eq(find_stream(f, 1, "item", SL_WH_STREAM_IDS)->value_count, 0);
            cr_assert_eq(find_stream(f, 1, "d1", SL_WH_STREAM_DENSE_VALUES)->value_count, 0);
            if (version == 1) {
                cr_assert_eq(count_encoding(f, SLUICE__ENCODING__ENCODING_BITPACK) +
                                 count_encoding(f, SLUICE__ENCODING__ENCODING_DELTA) +
                                 count_encoding(f, SLUICE__ENCODING__ENCODING_DICT),
                             0);
            } else {
                for (uint32_t s = 0; s < 4; s++) {
                    /* all equal: width 0, no bytes */
                    const wh_stream_t *st = find_stream(f, s, "ts", SL_WH_STREAM_TIMESTAMP);
                    cr_assert_eq(st->raw_size, 0);
                    cr_assert_eq(st->for_base, 42);
                    st = find_stream(f, s, "like", SL_WH_STREAM_LABEL);
                    cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
                    cr_assert_eq(st->dict_size, 1);
                    cr_assert_eq(st->bit_width, 0);
                    cr_assert_eq(st->raw_size, 0);
                }
                /* the full range: a dictionary with 64-bit gaps */
                const wh_stream_t *st = find_stream(f, 0, "u_geo", SL_WH_STREAM_IDS);
                if (!dedup) {
                    cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_DICT);
                    cr_assert_eq(st->dict_size, 7);
                    cr_assert_eq(st->for_base, INT64_MIN);
                }
            }
            wh_file_close(f);
            free(data);
        }
    }
    td_free(&m);
}

Test(warehouse_encoding, writer_refuses_unknown_versions)
{
    td_rows_t m;
    td_spec_t spec = {10, 2, 2, false, 0, 1};
    td_generate(&spec, &m);
    sl_wh_schema_t *s = td_schema();
    for (uint32_t v = 3; v <= 4; v++) {
        sl_wh_writer_opts_t o = td_opts(0);
        o.format_version = v;
        sl_wh_writer_t *w;
        sl_error_t err = {0};
        cr_assert_eq(sl_wh_writer_open(path_in("v.slc"), s, &o, &w, &err), SL_ERR_INVALID);
        cr_assert(strstr(err.msg, "format version") != NULL, "%s", err.msg);
    }
    sl_wh_schema_destroy(s);
    td_free(&m);
}

/* tests/data/table_v1: written by the version-1 writer (commit 1b0a0e9) with
 *   sluice table gen --preset criteo --rows 300 --seed 5 --stripe-rows 128 \
 *       --dedup-group pair=C1,C2 --no-sync --table tests/data/table_v1
 * It reads, verifies and holds exactly the rows today's generator makes for
 * the same options (written again here as a version-2 table). */
static uint64_t hash_table(const char *table, bool dedup_form, uint32_t *version_seen)
{
    sl_wh_table_t *t;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_table_open(table, NULL, &t, &err), SL_OK, "%s", err.msg);
    uint64_t h = 0, rows = 0;
    for (uint32_t p = 0; p < sl_wh_table_num_partitions(t); p++) {
        const sl_wh_partition_t *part = sl_wh_table_partition(t, p);
        for (uint32_t fi = 0; fi < part->num_files; fi++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", table, part->files[fi]);
            size_t len;
            uint8_t *data = td_read_all(path, &len);
            memcpy(version_seen, data + 4, 4);
            free(data);
            sl_wh_read_opts_t o = {0};
            o.dedup_form = dedup_form;
            sl_wh_reader_t *r;
            cr_assert_eq(sl_wh_reader_open(path, NULL, &o, &r, &err), SL_OK, "%s", err.msg);
            const sl_wh_rows_t *x;
            for (;;) {
                cr_assert_eq(sl_wh_reader_next(r, &x, &err), SL_OK, "%s", err.msg);
                if (x == NULL) break;
                const sl_batch_t *b = &x->batch;
                size_t N = b->batch_size;
                cr_assert_eq(sl_batch_validate(b, &err), SL_OK, "%s", err.msg);
                h = XXH3_64bits_withSeed(b->sample_ids, N * 8, h);
                h = XXH3_64bits_withSeed(x->session_ids, N * 8, h);
                h = XXH3_64bits_withSeed(x->timestamps, N * 8, h);
                h = XXH3_64bits_withSeed(b->labels.data, N * b->labels.cols * 4, h);
                h = XXH3_64bits_withSeed(b->dense.data, N * b->dense.cols * 4, h);
                h = XXH3_64bits_withSeed(b->sparse.lengths, N * b->sparse.num_keys * 4, h);
                h = XXH3_64bits_withSeed(b->sparse.values, b->sparse.num_values * 8, h);
                for (uint32_t g = 0; g < b->num_groups; g++) {
                    const sl_ikjt_t *ik = &b->groups[g];
                    h = XXH3_64bits_withSeed(ik->inverse, N * 4, h);
                    h = XXH3_64bits_withSeed(
                        ik->unique.lengths, (size_t)ik->unique.stride * ik->unique.num_keys * 4, h);
                    h = XXH3_64bits_withSeed(ik->unique.values, ik->unique.num_values * 8, h);
                }
                rows += N;
            }
            sl_wh_reader_close(r);
        }
    }
    sl_wh_table_close(t);
    cr_assert_eq(rows, 300);
    return h;
}

Test(warehouse_encoding, version_1_fixture_from_the_old_writer_reads)
{
    const char *src = getenv("SLUICE_SOURCE_DIR"); /* set by ctest */
    char fixture[4200];
    snprintf(fixture, sizeof fixture, "%s/tests/data/table_v1", src ? src : ".");
    sl_wh_gen_spec_t spec;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_gen_preset("criteo", 300, 5, &spec, &err), SL_OK, "%s", err.msg);
    sl_wh_gen_opts_t go = sl_wh_gen_opts_default();
    go.writer.no_sync = true;
    go.writer.stripe_rows = 128;
    go.threads = 1;
    static const char *const pair[] = {"C1", "C2"};
    sl_dedup_group_spec_t g = {"pair", 2, pair};
    go.writer.num_dedup_groups = 1;
    go.writer.dedup_groups = &g;
    sl_wh_write_stats_t ws;
    cr_assert_eq(sl_wh_gen_table(path_in("v2"), &spec, &go, &ws, &err), SL_OK, "%s", err.msg);
    for (int form = 0; form < 2; form++) {
        uint32_t v_old = 0, v_new = 0;
        uint64_t h_old = hash_table(fixture, form, &v_old);
        uint64_t h_new = hash_table(path_in("v2"), form, &v_new);
        cr_assert_eq(v_old, 1);
        cr_assert_eq(v_new, 2);
        cr_assert_eq(h_old, h_new, "form %d: the version-1 rows differ", form);
    }
    sl_wh_verify_stats_t vs;
    cr_assert_eq(sl_wh_verify_table(fixture, NULL, NULL, NULL, &vs, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(vs.rows, 300);
    cr_assert_eq(vs.stripes, 3);
}

/* ---- corruption the decoders see (checksums skipped) ---- */

/* The first error of reading every stripe without checksums (SL_OK if none). */
static sl_err_t read_unchecked(const uint8_t *data, size_t len, sl_error_t *err)
{
    sl_wh_read_opts_t o = {0};
    o.skip_checksums = true;
    sl_wh_reader_t *r;
    sl_err_t rc = sl_wh_reader_open_mem(data, len, "bad.slc", &o, &r, err);
    if (rc != SL_OK) return rc;
    for (uint32_t s = 0; s < sl_wh_reader_num_stripes(r) && rc == SL_OK; s++) {
        const sl_wh_rows_t *x;
        rc = sl_wh_reader_read_stripe(r, s, &x, err);
        if (rc == SL_OK) {
            sl_error_t e2 = {0};
            cr_assert_eq(sl_batch_validate(&x->batch, &e2), SL_OK, "%s", e2.msg);
        }
    }
    sl_wh_reader_close(r);
    return rc;
}

/* A version-2 file whose streams are all stored (zstd never pays 99 %), so
 * that changed bytes reach the decoders. */
static uint8_t *stored_file(size_t *len, td_rows_t *m)
{
    td_spec_t spec = {900, 8, 20, true, 0.2, tu_seed("stored_file")};
    td_generate(&spec, m);
    sl_wh_writer_opts_t o = td_opts(300);
    o.zstd_min_saving = 0.99;
    td_write(path_in("st.slc"), m, &o);
    return td_read_all(path_in("st.slc"), len);
}

static void expect_error(const uint8_t *bad, size_t len, const char *what)
{
    sl_error_t err = {0};
    cr_assert_eq(read_unchecked(bad, len, &err), SL_ERR_CORRUPT, "no error for %s", what);
    cr_assert(strstr(err.msg, what) != NULL, "'%s' lacks '%s'", err.msg, what);
    cr_assert(strstr(err.msg, "bad.slc stripe ") == err.msg, "%s", err.msg);
}

Test(warehouse_encoding, decoders_catch_what_checksums_would)
{
    size_t len;
    td_rows_t m;
    uint8_t *good = stored_file(&len, &m);
    cr_assert_eq(read_unchecked(good, len, &(sl_error_t){0}), SL_OK);
    wh_file_t *f = open_layout(good, len);
    uint8_t *bad = malloc(len);
    /* u_hist ids: a dictionary of a number of values that is not a power
     * of two (so that some index is beyond it) */
    const wh_stream_t *st = NULL;
    for (uint32_t s = 0; s < f->num_stripes; s++) {
        const wh_stream_t *c = find_stream(f, s, "u_hist", SL_WH_STREAM_IDS);
        cr_assert_eq(c->encoding, SLUICE__ENCODING__ENCODING_DICT);
        cr_assert_eq(c->codec, SLUICE__CODEC__CODEC_NONE);
        if (c->dict_size & (c->dict_size - 1)) st = c;
    }
    cr_assert_not_null(st);
    /* every index bit set: the largest index is beyond the dictionary */
    memcpy(bad, good, len);
    memset(bad + st->offset + st->dict_bytes, 0xff, st->stored_size - st->dict_bytes);
    expect_error(bad, len, "outside the dictionary of");
    /* a block width beyond 64 bits */
    memcpy(bad, good, len);
    bad[st->offset] = 65;
    expect_error(bad, len, "dictionary block at byte 0: width 65");
    /* a wider first block: the dictionary overruns its bytes */
    memcpy(bad, good, len);
    bad[st->offset] = 64;
    expect_error(bad, len, "dictionary");
    /* lengths: every bit set sums to more ids than stored */
    st = find_stream(f, 2, "item", SL_WH_STREAM_LENGTHS);
    cr_assert_eq(st->encoding, SLUICE__ENCODING__ENCODING_BITPACK);
    memcpy(bad, good, len);
    memset(bad + st->offset, 0xff, st->stored_size);
    expect_error(bad, len, "the lengths sum to");
    /* the inverse of a dedup-free file is absent; a dictionary of lengths
     * (u_hist: many lengths) out of the int32 range cannot be reached
     * through bytes alone: the base is in the footer (below) */
    free(bad);
    wh_file_close(f);
    free(good);
    td_free(&m);
}

/* ---- footer fields of the new encodings ---- */

/* Rewrite the footer of data with fn applied to stream k of stripe s, and a
 * valid trailer; @return the new file (caller frees). */
typedef void (*footer_fn)(Sluice__StreamInfo *si, Sluice__FileFooter *ft);

static uint8_t *refooter(const uint8_t *data, size_t len, const char *name, uint32_t kind,
                         footer_fn fn, size_t *out_len)
{
    uint32_t flen;
    memcpy(&flen, data + len - 16, 4);
    size_t foff = len - 16 - flen;
    Sluice__FileFooter *ft = sluice__file_footer__unpack(NULL, flen, data + foff);
    cr_assert_not_null(ft);
    bool done = false;
    for (size_t k = 0; k < ft->stripes[0]->n_streams; k++) {
        Sluice__StreamInfo *si = ft->stripes[0]->streams[k];
        if (si->kind == (Sluice__StreamKind)kind && strcmp(si->name, name) == 0) {
            fn(si, ft);
            done = true;
        }
    }
    cr_assert(done, "no stream '%s'", name);
    size_t nl = sluice__file_footer__get_packed_size(ft);
    uint8_t *out = malloc(foff + nl + 16);
    memcpy(out, data, foff);
    sluice__file_footer__pack(ft, out + foff);
    uint32_t l32 = (uint32_t)nl;
    uint64_t sum = XXH3_64bits(out + foff, nl);
    memcpy(out + foff + nl, &l32, 4);
    memcpy(out + foff + nl + 4, &sum, 8);
    memcpy(out + foff + nl + 12, "SLCT", 4);
    sluice__file_footer__free_unpacked(ft, NULL);
    *out_len = foff + nl + 16;
    return out;
}

static void open_fails(const uint8_t *data, size_t len, sl_err_t code, const char *what)
{
    sl_wh_reader_t *r;
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_reader_open_mem(data, len, "bad.slc", NULL, &r, &err), code, "%s: %s", what,
                 err.msg);
    cr_assert(strstr(err.msg, what) != NULL, "'%s' lacks '%s'", err.msg, what);
}

static void dict_width_low(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->bit_width--;
}
static void dict_width_33(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->bit_width = 33;
}
static void dict_too_big(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->dict_size = si->value_count + 1;
}
static void dict_bytes_off(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->dict_bytes++;
}
static void to_bitpack(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->encoding = SLUICE__ENCODING__ENCODING_BITPACK;
}
static void to_delta(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->encoding = SLUICE__ENCODING__ENCODING_DELTA;
}
static void width_65(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->bit_width = 65;
}
static void base_negative(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)ft;
    si->for_base = -1;
}
static void as_version_1(Sluice__StreamInfo *si, Sluice__FileFooter *ft)
{
    (void)si;
    ft->format_version = 1;
}

Test(warehouse_encoding, footer_fields_checked_at_open)
{
    size_t len, bl;
    td_rows_t m;
    uint8_t *good = stored_file(&len, &m);
    struct {
        const char *name;
        uint32_t kind;
        footer_fn fn;
        const char *what;
    } cases[] = {
        {"u_hist", SL_WH_STREAM_IDS, dict_width_low, "bit width"},
        {"u_hist", SL_WH_STREAM_IDS, dict_width_33, "bit width 33"},
        {"u_hist", SL_WH_STREAM_IDS, dict_too_big, "dictionary values for"},
        {"u_hist", SL_WH_STREAM_IDS, dict_bytes_off, "raw bytes"},
        {"click", SL_WH_STREAM_LABEL, to_bitpack, "bit-packed encoding on a float stream"},
        {"item", SL_WH_STREAM_LENGTHS, to_delta, "delta encoding on a 4-byte kind"},
        {"item", SL_WH_STREAM_LENGTHS, width_65, "bit width 65"},
        {"click", SL_WH_STREAM_LABEL, base_negative, "dictionary of 32-bit values starts at -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *bad = refooter(good, len, cases[i].name, cases[i].kind, cases[i].fn, &bl);
        open_fails(bad, bl, SL_ERR_CORRUPT, cases[i].what);
        free(bad);
    }
    /* a version-2 footer behind a version-1 header, and the other way round */
    uint8_t *bad = refooter(good, len, "click", SL_WH_STREAM_LABEL, as_version_1, &bl);
    open_fails(bad, bl, SL_ERR_VERSION, "footer: format version 1, the header says 2");
    memcpy(bad + 4, &(uint32_t){1}, 4);
    open_fails(bad, bl, SL_ERR_CORRUPT, "in a version 1 file");
    memcpy(bad + 4, &(uint32_t){3}, 4);
    open_fails(bad, bl, SL_ERR_VERSION, "format version 3 (this build reads 1 to 2)");
    free(bad);
    /* an int32 stream's base out of range: found when decoding */
    bad = refooter(good, len, "item", SL_WH_STREAM_LENGTHS, base_negative, &bl);
    sl_error_t err = {0};
    cr_assert_eq(read_unchecked(bad, bl, &err), SL_ERR_CORRUPT);
    cr_assert(strstr(err.msg, "value -1 outside [0, 2147483647]") != NULL, "%s", err.msg);
    free(bad);
    free(good);
    td_free(&m);
}

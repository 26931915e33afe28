/* Warehouse corruption: copies of a good file with a byte flipped in every
 * stream, the footer, the trailer and the header; truncated at every length;
 * with two stripes swapped; foreign files. verify and the reader must report
 * each case naming file, stripe and stream, and never crash (run in the ASan
 * build too). White-box: reads the stream layout through wh_internal.h. */
#include "warehouse_testdata.h"

#include "warehouse/wh_internal.h"

static char *dir;
static td_rows_t model;
static uint8_t *good;
static size_t good_len;
static wh_file_t *layout;

#define STRIPE 200
#define ROWS 650 /* 4 stripes, the last short */

static char *path_in(const char *name)
{
    static char buf[4][4096];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 4096, "%s/%s", dir, name);
    return p;
}

static void setup(void)
{
    dir = td_tmpdir();
    td_spec_t spec = {ROWS, 8, 12, true, 0.3, tu_seed("warehouse_corrupt")};
    td_generate(&spec, &model);
    sl_wh_writer_opts_t o = td_opts(STRIPE);
    o.cluster_sessions = true;
    sl_dedup_group_spec_t g = {"user", 2, td_user};
    o.num_dedup_groups = 1;
    o.dedup_groups = &g;
    td_write(path_in("good.slc"), &model, &o);
    good = td_read_all(path_in("good.slc"), &good_len);
    sl_error_t err = {0};
    cr_assert_eq(wh_file_open(NULL, good, good_len, "good.slc", NULL, NULL, &layout, &err), SL_OK,
                 "%s", err.msg);
    cr_assert_eq(layout->num_stripes, 4);
}

static void teardown(void)
{
    wh_file_close(layout);
    free(good);
    td_free(&model);
    td_rmrf(dir);
    free(dir);
}

TestSuite(warehouse_corrupt, .init = setup, .fini = teardown);

typedef struct probs {
    int n;
    int64_t stripe[64];
    char stream[64][300];
    char msg[64][SL_ERROR_MSG_MAX];
} probs_t;

static void collect(void *ctx, const sl_wh_problem_t *p)
{
    probs_t *ps = ctx;
    if (ps->n < 64) {
        ps->stripe[ps->n] = p->stripe;
        snprintf(ps->stream[ps->n], sizeof ps->stream[0], "%s", p->stream ? p->stream : "");
        snprintf(ps->msg[ps->n], sizeof ps->msg[0], "%s", p->message);
    }
    ps->n++;
}

/* Read every stripe of data (all features, expanded and dedup form, with and
 * without checksums); @return the first error (SL_OK when every read passed). */
static sl_err_t read_modes(const uint8_t *data, size_t len, sl_error_t *first, int from)
{
    sl_err_t rc0 = SL_OK;
    for (int mode = from; mode < 4; mode++) {
        sl_wh_read_opts_t ro = {0};
        ro.dedup_form = mode & 1;
        ro.skip_checksums = mode & 2;
        sl_wh_reader_t *r;
        sl_error_t err = {0};
        sl_err_t rc = sl_wh_reader_open_mem(data, len, "bad.slc", &ro, &r, &err);
        if (rc == SL_OK) {
            for (uint32_t s = 0; s < sl_wh_reader_num_stripes(r); s++) {
                const sl_wh_rows_t *x;
                sl_err_t e = sl_wh_reader_read_stripe(r, s, &x, &err);
                if (e == SL_OK) {
                    /* whatever decoded is still a valid batch */
                    cr_assert_eq(sl_batch_validate(&x->batch, &err), SL_OK, "%s", err.msg);
                } else if (rc == SL_OK) {
                    rc = e;
                }
            }
            sl_wh_reader_close(r);
        }
        if (rc0 == SL_OK && rc != SL_OK && !(mode & 2)) {
            rc0 = rc;
            if (first) *first = err;
        }
    }
    return rc0;
}

static sl_err_t read_everything(const uint8_t *data, size_t len, sl_error_t *first)
{
    return read_modes(data, len, first, 0);
}

Test(warehouse_corrupt, good_file_reads_and_verifies)
{
    sl_error_t err = {0};
    cr_assert_eq(read_everything(good, good_len, &err), SL_OK, "%s", err.msg);
    probs_t ps = {0};
    sl_wh_verify_stats_t st;
    cr_assert_eq(sl_wh_verify_mem(good, good_len, "good.slc", NULL, NULL, collect, &ps, &st, &err),
                 SL_OK, "%s", err.msg);
    cr_assert_eq(ps.n, 0);
    cr_assert_eq(st.rows, ROWS);
    cr_assert_eq(st.stripes, 4);
    cr_assert_eq(st.streams, layout->num_streams);
}

Test(warehouse_corrupt, flip_in_every_stream)
{
    uint8_t *bad = malloc(good_len);
    int tested = 0;
    for (uint32_t s = 0; s < layout->num_stripes; s++) {
        const wh_stripe_t *sp = &layout->stripes[s];
        for (uint32_t k = 0; k < sp->num_streams; k++) {
            const wh_stream_t *st = &layout->streams[sp->first_stream + k];
            if (st->stored_size == 0) continue;
            for (int where = 0; where < 3; where++) {
                uint64_t at = st->offset + (where == 0   ? 0
                                            : where == 1 ? st->stored_size / 2
                                                         : st->stored_size - 1);
                memcpy(bad, good, good_len);
                bad[at] ^= (uint8_t)(0x01u << (at % 8));
                char want[600];
                snprintf(want, sizeof want, "bad.slc stripe %u stream '%s' %s: checksum mismatch",
                         s, st->name, sl_wh_stream_kind_name((sl_wh_stream_kind_t)st->kind));
                /* verify: exactly this problem */
                probs_t ps = {0};
                sl_error_t err = {0};
                sl_wh_verify_stats_t vs;
                cr_assert_eq(
                    sl_wh_verify_mem(bad, good_len, "bad.slc", NULL, NULL, collect, &ps, &vs, &err),
                    SL_ERR_CORRUPT);
                cr_assert_eq(ps.n, 1, "%d problems for a flip at %llu", ps.n,
                             (unsigned long long)at);
                cr_assert_eq(ps.stripe[0], s);
                char sn[300];
                snprintf(sn, sizeof sn, "'%s' %s", st->name,
                         sl_wh_stream_kind_name((sl_wh_stream_kind_t)st->kind));
                cr_assert_str_eq(ps.stream[0], sn);
                cr_assert_str_eq(ps.msg[0], want);
                cr_assert_str_eq(err.msg, want);
                cr_assert_eq(vs.bad_files, 1);
                cr_assert_eq(vs.rows, ROWS - sp->rows);
                /* reader: the same message for that stripe, the others read */
                sl_error_t first = {0};
                cr_assert_eq(read_everything(bad, good_len, &first), SL_ERR_CORRUPT);
                cr_assert_str_eq(first.msg, want);
                tested++;
            }
        }
    }
    cr_assert(tested > 4 * 15 * 3 / 2, "%d flips", tested);
    free(bad);
}

Test(warehouse_corrupt, flip_footer_trailer_header)
{
    uint8_t *bad = malloc(good_len);
    uint64_t foot = layout->footer_offset;
    for (uint64_t at = foot; at < good_len; at++) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(bad, good, good_len);
            bad[at] ^= (uint8_t)(1u << bit);
            sl_error_t err = {0};
            sl_wh_reader_t *r = NULL;
            sl_err_t rc = sl_wh_reader_open_mem(bad, good_len, "bad.slc", NULL, &r, &err);
            cr_assert_neq(rc, SL_OK, "flip at %llu accepted", (unsigned long long)at);
            cr_assert_null(r);
            cr_assert_eq(strncmp(err.msg, "bad.slc: ", 9), 0, "%s", err.msg);
            const char *want = at < good_len - 16 ? "bad.slc: footer: checksum mismatch"
                               : at >= good_len - 4
                                   ? "bad.slc: trailer: no closing magic: the file is truncated "
                                     "or was not completely written"
                                   : NULL;
            if (want) cr_assert_str_eq(err.msg, want);
            if (at >= good_len - 4)
                cr_assert_eq(rc, SL_ERR_TRUNCATED);
            else
                cr_assert(rc == SL_ERR_CORRUPT || rc == SL_ERR_TOO_LARGE, "%s", err.msg);
            probs_t ps = {0};
            cr_assert_eq(
                sl_wh_verify_mem(bad, good_len, "bad.slc", NULL, NULL, collect, &ps, NULL, &err),
                rc);
            cr_assert_eq(ps.n, 1);
            cr_assert_eq(ps.stripe[0], -1);
        }
    }
    for (uint64_t at = 0; at < 8; at++) {
        memcpy(bad, good, good_len);
        bad[at] ^= 0x10;
        sl_error_t err = {0};
        sl_wh_reader_t *r;
        sl_err_t rc = sl_wh_reader_open_mem(bad, good_len, "bad.slc", NULL, &r, &err);
        if (at < 4) {
            cr_assert_eq(rc, SL_ERR_CORRUPT);
            cr_assert_str_eq(err.msg, "bad.slc: not a sluice table file (magic is not \"SLCT\")");
        } else {
            cr_assert_eq(rc, SL_ERR_VERSION);
            cr_assert(strstr(err.msg, "bad.slc: format version") == err.msg, "%s", err.msg);
        }
    }
    free(bad);
}

Test(warehouse_corrupt, truncate_at_every_length)
{
    for (size_t n = 0; n < good_len; n++) {
        sl_error_t err = {0};
        sl_wh_reader_t *r = NULL;
        sl_err_t rc = sl_wh_reader_open_mem(good, n, "cut.slc", NULL, &r, &err);
        cr_assert(rc == SL_ERR_TRUNCATED || rc == SL_ERR_CORRUPT, "%zu bytes: %d %s", n, rc,
                  err.msg);
        cr_assert_null(r);
        cr_assert_eq(strncmp(err.msg, "cut.slc: ", 9), 0, "%s", err.msg);
    }
    /* and as a file on disk through verify_file */
    char *p = path_in("cut.slc");
    for (size_t n = 0; n < good_len; n += 97) {
        td_write_all(p, good, n);
        probs_t ps = {0};
        sl_error_t err = {0};
        cr_assert_neq(sl_wh_verify_file(p, "cut.slc", NULL, collect, &ps, NULL, &err), SL_OK);
        cr_assert_eq(ps.n, 1);
        cr_assert(strstr(ps.msg[0], "cut.slc: ") == ps.msg[0], "%s", ps.msg[0]);
    }
}

Test(warehouse_corrupt, file_truncated_after_open)
{
    /* the file shrinks under an open reader: a clear error, not a crash */
    char *p = path_in("shrink.slc");
    td_write_all(p, good, good_len);
    sl_error_t err = {0};
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open(p, "shrink.slc", NULL, &r, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(truncate(p, (off_t)layout->stripes[2].offset), 0);
    const sl_wh_rows_t *x;
    cr_assert_eq(sl_wh_reader_read_stripe(r, 1, &x, &err), SL_OK, "%s", err.msg);
    cr_assert_eq(sl_wh_reader_read_stripe(r, 2, &x, &err), SL_ERR_TRUNCATED);
    cr_assert(strstr(err.msg, "stripe 2: shrink.slc: file ends at") == err.msg, "%s", err.msg);
    sl_wh_reader_close(r);
}

Test(warehouse_corrupt, swap_two_stripes)
{
    const wh_stripe_t *a = &layout->stripes[1], *b = &layout->stripes[2];
    cr_assert_eq(a->offset + a->length, b->offset);
    uint8_t *bad = malloc(good_len);
    memcpy(bad, good, good_len);
    memcpy(bad + a->offset, good + b->offset, b->length);
    memcpy(bad + a->offset + b->length, good + a->offset, a->length);
    probs_t ps = {0};
    sl_error_t err = {0};
    cr_assert_eq(sl_wh_verify_mem(bad, good_len, "swap.slc", NULL, NULL, collect, &ps, NULL, &err),
                 SL_ERR_CORRUPT);
    cr_assert(ps.n >= 2, "%d problems", ps.n);
    bool s1 = false, s2 = false;
    for (int i = 0; i < ps.n && i < 64; i++) {
        s1 |= ps.stripe[i] == 1;
        s2 |= ps.stripe[i] == 2;
        cr_assert(ps.stripe[i] == 1 || ps.stripe[i] == 2);
        cr_assert(strstr(ps.msg[i], ": checksum mismatch") != NULL, "%s", ps.msg[i]);
        cr_assert(strlen(ps.stream[i]) > 0);
    }
    cr_assert(s1 && s2);
    const wh_stream_t *first = &layout->streams[a->first_stream];
    char want[600];
    snprintf(want, sizeof want, "swap.slc stripe 1 stream '%s' %s: checksum mismatch", first->name,
             sl_wh_stream_kind_name((sl_wh_stream_kind_t)first->kind));
    cr_assert_str_eq(ps.msg[0], want);
    sl_wh_reader_t *r;
    cr_assert_eq(sl_wh_reader_open_mem(bad, good_len, "swap.slc", NULL, &r, &err), SL_OK);
    const sl_wh_rows_t *x;
    cr_assert_eq(sl_wh_reader_read_stripe(r, 0, &x, &err), SL_OK);
    cr_assert_eq(sl_wh_reader_read_stripe(r, 1, &x, &err), SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(sl_wh_reader_read_stripe(r, 3, &x, &err), SL_OK);
    sl_wh_reader_close(r);
    read_everything(bad, good_len, NULL); /* and no crash without checksums */
    free(bad);
}

Test(warehouse_corrupt, flips_without_checksums_never_crash)
{
    /* with checksums off every flipped byte reaches the decoders: they must
     * reject or decode safely (ASan/UBSan build), and whatever they accept
     * is a valid batch */
    uint8_t *bad = malloc(good_len);
    uint64_t step = tu_seed("flips_without_checksums_never_crash") % 7 + 11, n = 0;
    for (uint64_t at = WH_HEADER_BYTES; at < layout->footer_offset; at += step, n++) {
        memcpy(bad, good, good_len);
        bad[at] ^= (uint8_t)(0x5au >> (at % 3));
        read_modes(bad, good_len, NULL, 2);
    }
    cr_assert(n > 100, "%llu flips", (unsigned long long)n);
    free(bad);
}

Test(warehouse_corrupt, foreign_files)
{
    sl_error_t err = {0};
    sl_wh_reader_t *r;
    const char *text = "label\tI1\tI2\n1\t2\t3\n";
    cr_assert_eq(sl_wh_reader_open_mem(text, strlen(text), "x.tsv", NULL, &r, &err),
                 SL_ERR_CORRUPT);
    cr_assert_str_eq(err.msg, "x.tsv: not a sluice table file (magic is not \"SLCT\")");
    cr_assert_eq(sl_wh_reader_open_mem("SLC", 3, "y", NULL, &r, &err), SL_ERR_TRUNCATED);
    cr_assert_eq(sl_wh_reader_open_mem("", 0, "y", NULL, &r, &err), SL_ERR_TRUNCATED);
    /* a _schema file is not a data file */
    sl_wh_schema_t *s = td_schema();
    void *buf;
    size_t len;
    cr_assert_eq(sl_wh_schema_encode(s, NULL, &buf, &len, &err), SL_OK);
    cr_assert_eq(sl_wh_reader_open_mem(buf, len, "_schema", NULL, &r, &err), SL_ERR_CORRUPT);
    sl_free(NULL, buf, len);
    /* a directory */
    cr_assert_eq(sl_wh_reader_open(dir, "d", NULL, &r, &err), SL_ERR_INVALID);
    /* the right magic and trailer around garbage */
    uint8_t junk[256];
    uint64_t st = 7;
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)tu_next(&st);
    memcpy(junk, "SLCT\x01\x00\x00\x00", 8);
    memcpy(junk + sizeof junk - 4, "SLCT", 4);
    cr_assert_neq(sl_wh_reader_open_mem(junk, sizeof junk, "j", NULL, &r, &err), SL_OK);
    sl_wh_schema_destroy(s);
}

Test(warehouse_corrupt, verify_table_names_relative_paths)
{
    /* a table with a good and a bad file: only the bad one is reported, with
     * its path relative to the table */
    sl_wh_schema_t *s = td_schema();
    sl_error_t err = {0};
    char *tdir = path_in("tbl");
    char t_dir[4096];
    snprintf(t_dir, sizeof t_dir, "%s", tdir);
    cr_assert_eq(sl_wh_table_create(t_dir, s, &err), SL_OK, "%s", err.msg);
    char p[4200];
    snprintf(p, sizeof p, "%s/ds=2026-11-21", t_dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/ds=2026-11-21/part-2.slc", t_dir);
    td_write_all(p, good, good_len);
    uint8_t *bad = malloc(good_len);
    memcpy(bad, good, good_len);
    const wh_stream_t *victim = NULL;
    for (uint32_t k = 0; k < layout->stripes[3].num_streams && victim == NULL; k++) {
        const wh_stream_t *st = &layout->streams[layout->stripes[3].first_stream + k];
        if (st->kind == SL_WH_STREAM_IDS && strcmp(st->name, "u_hist") == 0) victim = st;
    }
    cr_assert_not_null(victim);
    bad[victim->offset + victim->stored_size / 2] ^= 0xff;
    snprintf(p, sizeof p, "%s/ds=2026-11-21/part-3.slc", t_dir);
    td_write_all(p, bad, good_len);
    probs_t ps = {0};
    sl_wh_verify_stats_t st;
    cr_assert_eq(sl_wh_verify_table(t_dir, NULL, collect, &ps, &st, &err), SL_ERR_CORRUPT);
    cr_assert_eq(ps.n, 1);
    cr_assert_str_eq(ps.msg[0],
                     "ds=2026-11-21/part-3.slc stripe 3 stream 'u_hist' ids: checksum mismatch");
    cr_assert_str_eq(err.msg, ps.msg[0]);
    cr_assert_eq(st.files, 2);
    cr_assert_eq(st.bad_files, 1);
    cr_assert_eq(st.rows, 2 * ROWS - layout->stripes[3].rows);
    /* a file written with another schema is reported too */
    sl_wh_schema_t *other = sl_wh_schema_new(NULL);
    cr_assert_eq(sl_wh_schema_add_feature(other, "zz", SL_WH_DENSE, &err), SL_OK);
    snprintf(p, sizeof p, "%s/ds=2026-11-21/part-4.slc", t_dir);
    sl_wh_writer_t *w;
    sl_wh_writer_opts_t o = td_opts(0);
    cr_assert_eq(sl_wh_writer_open(p, other, &o, &w, &err), SL_OK);
    cr_assert_eq(sl_wh_writer_close(w, NULL, &err), SL_OK);
    ps.n = 0;
    cr_assert_eq(sl_wh_verify_table(t_dir, NULL, collect, &ps, &st, &err), SL_ERR_CORRUPT);
    cr_assert_eq(ps.n, 2);
    cr_assert_str_eq(ps.msg[1],
                     "ds=2026-11-21/part-4.slc: footer: schema differs from the table's _schema");
    /* a damaged _schema */
    snprintf(p, sizeof p, "%s/_schema", t_dir);
    size_t sl;
    uint8_t *sb = td_read_all(p, &sl);
    sb[sl - 1] ^= 1;
    td_write_all(p, sb, sl);
    free(sb);
    ps.n = 0;
    cr_assert_eq(sl_wh_verify_table(t_dir, NULL, collect, &ps, &st, &err), SL_ERR_CORRUPT);
    cr_assert_eq(ps.n, 1);
    cr_assert(strstr(ps.msg[0], "_schema: schema: checksum mismatch") != NULL, "%s", ps.msg[0]);
    free(bad);
    sl_wh_schema_destroy(other);
    sl_wh_schema_destroy(s);
}

/* With SLUICE_WRITE_CORPUS=<dir> set, write the seed corpus of the
 * table_file fuzz target into <dir>: small valid files of assorted shapes
 * and broken copies of them, each under 8 KB. */
static void corpus_file(const char *out, const char *name, const void *data, size_t len)
{
    cr_assert(len < 8192, "%s: %zu bytes", name, len);
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", out, name);
    td_write_all(p, data, len);
}

static uint8_t *corpus_make(const char *tmp, uint32_t rows, uint32_t stripe, sl_wh_codec_t codec,
                            bool dedup, size_t *len)
{
    td_spec_t spec = {rows, 4, 2, true, 0.3, 20261121 + rows};
    td_rows_t m;
    td_generate(&spec, &m);
    sl_wh_writer_opts_t o = td_opts(stripe);
    o.codec = codec;
    /* ZSTD + stripe 7: zstd is never kept, so the version-2 encodings'
     * bytes are stored as they are and mutations reach their decoders */
    if (codec == SL_WH_CODEC_ZSTD && stripe == 7) o.zstd_min_saving = 0.99;
    sl_dedup_group_spec_t g = {"user", 2, td_user};
    if (dedup) {
        o.cluster_sessions = true;
        o.num_dedup_groups = 1;
        o.dedup_groups = &g;
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/c.slc", tmp);
    unlink(p);
    td_write(p, &m, &o);
    td_free(&m);
    return td_read_all(p, len);
}

Test(corpus, write)
{
    const char *out = getenv("SLUICE_WRITE_CORPUS");
    if (out == NULL || *out == '\0') return;
    char *tmp = td_tmpdir();
    size_t n1, n2, n3, n4;
    uint8_t *tiny = corpus_make(tmp, 5, 0, SL_WH_CODEC_ZSTD, false, &n1);
    uint8_t *stripes = corpus_make(tmp, 20, 6, SL_WH_CODEC_NONE, false, &n2);
    uint8_t *dedup = corpus_make(tmp, 24, 8, SL_WH_CODEC_ZSTD, true, &n3);
    uint8_t *empty = corpus_make(tmp, 0, 0, SL_WH_CODEC_ZSTD, false, &n4);
    corpus_file(out, "valid-tiny", tiny, n1);
    corpus_file(out, "valid-stripes", stripes, n2);
    corpus_file(out, "valid-dedup", dedup, n3);
    corpus_file(out, "valid-empty", empty, n4);
    corpus_file(out, "bad-truncated", stripes, n2 - 10);
    size_t n5;
    uint8_t *packed = corpus_make(tmp, 30, 7, SL_WH_CODEC_ZSTD, true, &n5);
    corpus_file(out, "valid-packed", packed, n5);
    {
        /* a dictionary's index bits all set, a bit-packed stream's bits
         * flipped (checksums fail; the fuzz target also reads without) */
        wh_file_t *pf;
        sl_error_t perr = {0};
        cr_assert_eq(wh_file_open(NULL, packed, n5, "p", NULL, NULL, &pf, &perr), SL_OK, "%s",
                     perr.msg);
        uint8_t *pb = malloc(n5);
        memcpy(pb, packed, n5);
        int dicts = 0, packs = 0;
        for (uint32_t i = 0; i < pf->num_streams; i++) {
            const wh_stream_t *ps = &pf->streams[i];
            if (ps->codec != SLUICE__CODEC__CODEC_NONE || ps->stored_size == 0) continue;
            if (ps->encoding == SLUICE__ENCODING__ENCODING_DICT &&
                ps->stored_size > ps->dict_bytes) {
                memset(pb + ps->offset + ps->dict_bytes, 0xff, ps->stored_size - ps->dict_bytes);
                dicts++;
            } else if (ps->encoding == SLUICE__ENCODING__ENCODING_BITPACK) {
                pb[ps->offset] ^= 0x5a;
                packs++;
            }
        }
        cr_assert(dicts > 0 && packs > 0, "%d dictionaries, %d bit-packed", dicts, packs);
        corpus_file(out, "bad-packed-bits", pb, n5);
        wh_file_close(pf);
        free(pb);
    }
    free(packed);
    wh_file_t *f;
    sl_error_t err = {0};
    cr_assert_eq(wh_file_open(NULL, dedup, n3, "d", NULL, NULL, &f, &err), SL_OK, "%s", err.msg);
    uint8_t *bad = malloc(n3);
    memcpy(bad, dedup, n3);
    const wh_stream_t *st = &f->streams[f->stripes[1].first_stream + 5];
    bad[st->offset + st->stored_size / 2] ^= 0x20;
    corpus_file(out, "bad-stream-flip", bad, n3);
    memcpy(bad, dedup, n3);
    bad[f->footer_offset + 17] ^= 0x01;
    corpus_file(out, "bad-footer-flip", bad, n3);
    wh_file_close(f);
    cr_assert_eq(wh_file_open(NULL, stripes, n2, "s", NULL, NULL, &f, &err), SL_OK);
    memcpy(bad, stripes, n2);
    const wh_stripe_t *a = &f->stripes[0], *b = &f->stripes[1];
    memcpy(bad + a->offset, stripes + b->offset, b->length);
    memcpy(bad + a->offset + b->length, stripes + a->offset, a->length);
    corpus_file(out, "bad-swap", bad, n2);
    wh_file_close(f);
    free(bad);
    free(tiny);
    free(stripes);
    free(dedup);
    free(empty);
    td_rmrf(tmp);
    free(tmp);
}

/* The fast paths of the Parquet reader's levels against the general ones
 * on randomised pages (the seed is printed; SLUICE_TEST_SEED replays it):
 * levels decoded into bytes (sl_pq_rle_get_u8) against the same levels
 * decoded into uint32 (sl_pq_rle_get), and the list passes that take 64
 * levels at once (from the runs as bit masks, and from level bytes, the
 * path of required elements) against the one that takes one level at a
 * time (the reader's level_by_level), both against the rows the page was
 * made of: null lists, empty lists, null elements, long runs and
 * bit-packed groups, batches cut at every kind of place. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/column_internal.h"
#include "parquet/encoding.h"
#include "parquet/parquet.h"
#include "parquet/thrift.h"
#include "testutil.h"

/* ---- a growing byte buffer and the Thrift compact bits of a file ---- */

typedef struct w {
    uint8_t *b;
    size_t n, cap;
} w_t;

static void put(w_t *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 256;
        w->b = realloc(w->b, w->cap);
        cr_assert_not_null(w->b);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void byte(w_t *w, uint8_t x)
{
    put(w, &x, 1);
}
static void varint(w_t *w, uint64_t v)
{
    while (v >= 0x80) {
        byte(w, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    byte(w, (uint8_t)v);
}
static void fint(w_t *w, int delta, int type, int64_t v)
{
    byte(w, (uint8_t)(delta << 4 | type));
    varint(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}
static void fbin(w_t *w, int delta, const char *s)
{
    byte(w, (uint8_t)(delta << 4 | SL_PQ_T_BINARY));
    varint(w, strlen(s));
    put(w, s, strlen(s));
}

/* ---- the RLE / bit-packed hybrid, written at random ---- */

/* n values v of width bits as a random mix of repeated runs (where a value
 * repeats, of a random length) and bit-packed runs of 1 to 8 groups (the
 * last one padded with zeros). */
static void hybrid(w_t *w, const uint8_t *v, uint32_t n, unsigned width, uint64_t *rng)
{
    uint32_t i = 0;
    while (i < n) {
        uint32_t same = 1;
        while (i + same < n && v[i + same] == v[i])
            same++;
        if (same >= 2 && tu_below(rng, 4) != 0) {
            uint32_t k = 1 + (uint32_t)tu_below(rng, same);
            varint(w, (uint64_t)k << 1);
            byte(w, v[i]); /* widths here are at most 8 bits: one byte */
            i += k;
            continue;
        }
        uint32_t groups = 1 + (uint32_t)tu_below(rng, 8);
        varint(w, (uint64_t)groups << 1 | 1);
        uint8_t packed[64] = {0};
        for (uint32_t j = 0; j < groups * 8; j++) {
            uint32_t x = i + j < n ? v[i + j] : 0;
            for (unsigned b = 0; b < width; b++)
                if (x >> b & 1)
                    packed[(j * width + b) / 8] |= (uint8_t)(1u << ((j * width + b) % 8));
        }
        put(w, packed, groups * width);
        i += groups * 8;
    }
}

Test(parquet_levels_fast, bytes_decode_as_the_general_decoder)
{
    uint64_t seed = tu_seed("parquet_levels_fast::bytes_decode_as_the_general_decoder");
    uint64_t rng = seed;
    enum { N = 5000 };
    static uint8_t v[N], got8[N];
    static uint32_t got32[N];
    for (unsigned width = 1; width <= 8; width++) {
        for (unsigned rep = 0; rep < 20; rep++) {
            /* runs of equal values between random ones */
            for (uint32_t i = 0; i < N;) {
                uint32_t k = 1 + (uint32_t)tu_below(&rng, tu_below(&rng, 2) ? 40 : 3);
                uint8_t x = (uint8_t)tu_below(&rng, 1u << width);
                for (uint32_t j = 0; j < k && i < N; j++, i++)
                    v[i] = tu_below(&rng, 3) ? x : (uint8_t)tu_below(&rng, 1u << width);
            }
            w_t w = {0};
            hybrid(&w, v, N, width, &rng);
            sl_pq_rle_t a, b;
            sl_pq_rle_init(&a, w.b, w.n, width);
            sl_pq_rle_init(&b, w.b, w.n, width);
            sl_error_t err = {0};
            /* the same pieces for both: 1 to 100 values, unaligned starts */
            for (uint32_t at = 0; at < N;) {
                uint32_t k = 1 + (uint32_t)tu_below(&rng, 100);
                k = k < N - at ? k : N - at;
                cr_assert_eq(sl_pq_rle_get_u8(&a, got8 + at, k, &err), SL_OK,
                             "seed %llu width %u: %s", (unsigned long long)seed, width, err.msg);
                cr_assert_eq(sl_pq_rle_get(&b, got32 + at, k, &err), SL_OK,
                             "seed %llu width %u: %s", (unsigned long long)seed, width, err.msg);
                at += k;
            }
            for (uint32_t i = 0; i < N; i++) {
                cr_assert_eq(got8[i], v[i], "seed %llu width %u value %u: %u, want %u",
                             (unsigned long long)seed, width, i, got8[i], v[i]);
                cr_assert_eq(got32[i], v[i], "seed %llu width %u value %u",
                             (unsigned long long)seed, width, i);
            }
            /* past the end: the same error for both */
            cr_assert_eq(sl_pq_rle_get_u8(&a, got8, 100, &err),
                         sl_pq_rle_get(&b, got32, 100, &err));
            free(w.b);
        }
    }
    /* a width of more than 8 bits is refused, not truncated */
    sl_pq_rle_t r;
    uint8_t run[] = {2, 1, 1};
    sl_pq_rle_init(&r, run, sizeof run, 9);
    sl_error_t err = {0};
    cr_assert_eq(sl_pq_rle_get_u8(&r, got8, 1, &err), SL_ERR_INVALID);
}

Test(parquet_levels_fast, bit_planes_as_the_general_decoder)
{
    uint64_t seed = tu_seed("parquet_levels_fast::bit_planes_as_the_general_decoder");
    uint64_t rng = seed;
    enum { N = 5000 };
    static uint8_t v[N];
    static uint32_t got32[N];
    static uint64_t p0[N / 64 + 3], p1[N / 64 + 3];
    for (unsigned width = 1; width <= 2; width++) {
        for (unsigned rep = 0; rep < 40; rep++) {
            for (uint32_t i = 0; i < N;) {
                uint32_t k = 1 + (uint32_t)tu_below(&rng, tu_below(&rng, 2) ? 200 : 3);
                uint8_t x = (uint8_t)tu_below(&rng, 1u << width);
                for (uint32_t j = 0; j < k && i < N; j++, i++)
                    v[i] = tu_below(&rng, 3) ? x : (uint8_t)tu_below(&rng, 1u << width);
            }
            w_t w = {0};
            hybrid(&w, v, N, width, &rng);
            sl_pq_rle_t a, b;
            sl_pq_rle_init(&a, w.b, w.n, width);
            sl_pq_rle_init(&b, w.b, w.n, width);
            /* the baseline and the CPU's own instructions, each both ways */
            a.plain = rep & 1;
            b.plain = (rep >> 1) & 1;
            sl_error_t err = {0};
            memset(p0, 0, sizeof p0);
            memset(p1, 0, sizeof p1);
            /* the planes from a random first bit, in random pieces: 1 to
             * 150 values, starting anywhere in a run and in a word */
            uint32_t base = (uint32_t)tu_below(&rng, 64);
            for (uint32_t at = 0; at < N;) {
                uint32_t k = 1 + (uint32_t)tu_below(&rng, 150);
                k = k < N - at ? k : N - at;
                cr_assert_eq(sl_pq_rle_get_bits(&a, p0, p1, base + at, k, &err), SL_OK,
                             "seed %llu width %u: %s", (unsigned long long)seed, width, err.msg);
                at += k;
            }
            cr_assert_eq(sl_pq_rle_get(&b, got32, N, &err), SL_OK, "seed %llu: %s",
                         (unsigned long long)seed, err.msg);
            for (uint32_t i = 0; i < N; i++) {
                uint32_t bit = base + i;
                unsigned got =
                    (unsigned)((p0[bit / 64] >> (bit % 64)) & 1) |
                    (width == 2 ? (unsigned)((p1[bit / 64] >> (bit % 64)) & 1) << 1 : 0u);
                cr_assert_eq(got, v[i], "seed %llu width %u value %u: %u, want %u",
                             (unsigned long long)seed, width, i, got, v[i]);
                cr_assert_eq(got32[i], v[i], "seed %llu width %u value %u",
                             (unsigned long long)seed, width, i);
            }
            /* no bit outside [base, base + N) is set */
            cr_assert_eq(p0[0] & ((UINT64_C(1) << base) - 1), 0);
            cr_assert_eq(p1[0] & ((UINT64_C(1) << base) - 1), 0);
            for (uint32_t bit = base + N; bit < 64 * (N / 64 + 3); bit++) {
                cr_assert_eq((p0[bit / 64] >> (bit % 64)) & 1, 0, "bit %u", bit);
                cr_assert_eq((p1[bit / 64] >> (bit % 64)) & 1, 0, "bit %u", bit);
            }
            /* past the end: the same error as the general decoder's */
            cr_assert_eq(sl_pq_rle_get_bits(&a, p0, p1, 0, 100, &err),
                         sl_pq_rle_get(&b, got32, 100, &err));
            free(w.b);
        }
    }
    /* a bit-packed run cut short is refused, not read past its bytes */
    sl_pq_rle_t r;
    uint8_t run[] = {(2 << 1) | 1, 0xff, 0xff, 0xff}; /* 2 groups of 2 bits: 4 bytes, 3 there */
    sl_pq_rle_init(&r, run, sizeof run, 2);
    sl_error_t err = {0};
    memset(p0, 0, sizeof p0);
    memset(p1, 0, sizeof p1);
    cr_assert_eq(sl_pq_rle_get_bits(&r, p0, p1, 0, 12, &err), SL_OK);
    cr_assert_eq(p0[0], 0xfff);
    cr_assert_eq(p1[0], 0xfff);
    cr_assert_eq(sl_pq_rle_get_bits(&r, p0, p1, 12, 1, &err), SL_ERR_TRUNCATED);
    cr_assert_str_eq(err.msg, "bit-packed run runs past the end of its data");
    /* a width of 3 bits is refused */
    sl_pq_rle_init(&r, run, sizeof run, 3);
    cr_assert_eq(sl_pq_rle_get_bits(&r, p0, p1, 0, 1, &err), SL_ERR_INVALID);
}

/* ---- a list column, written at random and read both ways ---- */

typedef struct rows {
    uint32_t n, levels, nvals;
    uint8_t *rep, *def; /* [levels] */
    int64_t *vals;      /* [nvals]: the valid elements' values */
    /* the batch the rows make (one batch of all of them) */
    uint32_t *off;    /* [n + 1] */
    uint8_t *lvalid;  /* [n] */
    uint8_t *valid;   /* [slots] */
    int64_t *slotval; /* [slots]: 0 for a null element */
    uint32_t slots;
    /* the layout: optional elements (max_def 3, element at 2), required
     * ones (max_def 2: a level of 3 is checked for), or a bare repeated
     * field (the legacy two-level list: max_def 1, element at 1, no null
     * lists or elements) */
    int layout;
} rows_t;

enum { OPTIONAL_ELEMS, REQUIRED_ELEMS, BARE_REPEATED };

/* The definition level of a valid element, and its bit width. */
static uint8_t max_def(const rows_t *t)
{
    return t->layout == OPTIONAL_ELEMS ? 3 : t->layout == REQUIRED_ELEMS ? 2 : 1;
}

/* n rows of an optional list of optional int64 (max_def 3, element at
 * 2; required elements: max_def 2, never null): stretches of single elements (the reader's
 * whole-row path), of lists of 0 to 6 elements, of null or empty lists, of null elements. */
static void make_rows(rows_t *t, uint32_t n, int layout, uint64_t *rng)
{
    memset(t, 0, sizeof *t);
    size_t cap = (size_t)n * 8 + 8;
    t->rep = malloc(cap);
    t->def = malloc(cap);
    t->vals = malloc(cap * 8);
    t->off = malloc(((size_t)n + 1) * 4);
    t->lvalid = malloc(n + 1);
    t->valid = malloc(cap);
    t->slotval = malloc(cap * 8);
    cr_assert(t->rep && t->def && t->vals && t->off && t->lvalid && t->valid && t->slotval);
    t->n = n;
    t->layout = layout;
    bool required = layout != OPTIONAL_ELEMS, bare = layout == BARE_REPEATED;
    uint32_t r = 0;
    while (r < n) {
        uint32_t stretch = 1 + (uint32_t)tu_below(rng, 300), kind = (uint32_t)tu_below(rng, 5);
        for (uint32_t j = 0; j < stretch && r < n; j++, r++) {
            t->off[r] = t->slots;
            uint32_t len;
            int nulls; /* 0: no null elements, 1: some, 2: a null list */
            switch (kind) {
            case 0: /* one valid element a row */
                len = 1;
                nulls = 0;
                break;
            case 1: /* null or empty lists */
                len = 0;
                nulls = tu_below(rng, 2) ? 2 : 0;
                break;
            case 2: /* lists with some null elements */
                len = (uint32_t)tu_below(rng, 7);
                nulls = 1;
                break;
            default: /* anything */
                len = (uint32_t)tu_below(rng, 7);
                nulls = (int)tu_below(rng, 8) == 0 ? 2 : (int)tu_below(rng, 4) == 0;
                break;
            }
            if (bare && nulls == 2) nulls = 0; /* no null lists */
            if (nulls == 2) len = 0;
            t->lvalid[r] = nulls != 2;
            if (len == 0) {
                t->rep[t->levels] = 0;
                t->def[t->levels++] = nulls == 2 || bare ? 0 : 1;
                continue;
            }
            for (uint32_t e = 0; e < len; e++) {
                bool ok = required || nulls == 0 || tu_below(rng, 3) != 0;
                int64_t x = (int64_t)tu_below(rng, 1000000);
                t->rep[t->levels] = e == 0 ? 0 : 1;
                t->def[t->levels++] = ok ? max_def(t) : 2;
                t->valid[t->slots] = ok;
                t->slotval[t->slots++] = ok ? x : 0;
                if (ok) t->vals[t->nvals++] = x;
            }
        }
    }
    t->off[n] = t->slots;
}

static void free_rows(rows_t *t)
{
    free(t->rep);
    free(t->def);
    free(t->vals);
    free(t->off);
    free(t->lvalid);
    free(t->valid);
    free(t->slotval);
}

/* A file of one column "l" (optional list of optional or required int64
 * elements, or a bare repeated int64) in one row group of pages of at
 * most page_levels levels each (pages start at row starts), uncompressed
 * data pages v1 (levels with their length) or v2 (the lengths in the
 * header), PLAIN values. */
static void list_file(w_t *f, const rows_t *t, uint32_t page_levels, bool v2, uint64_t *rng)
{
    put(f, "PAR1", 4);
    uint32_t lv = 0, vi = 0;
    while (lv < t->levels) {
        uint32_t end = lv + page_levels < t->levels ? lv + page_levels : t->levels;
        while (end < t->levels && t->rep[end] != 0)
            end++;
        uint32_t nv = 0;
        for (uint32_t i = lv; i < end; i++)
            nv += t->def[i] == max_def(t);
        w_t rep = {0}, def = {0}, page = {0};
        hybrid(&rep, t->rep + lv, end - lv, 1, rng);
        hybrid(&def, t->def + lv, end - lv, t->layout == BARE_REPEATED ? 1 : 2, rng);
        uint32_t l = (uint32_t)rep.n, rows = 0;
        for (uint32_t i = lv; i < end; i++)
            rows += t->rep[i] == 0;
        if (!v2) put(&page, &l, 4);
        put(&page, rep.b, rep.n);
        l = (uint32_t)def.n;
        if (!v2) put(&page, &l, 4);
        put(&page, def.b, def.n);
        put(&page, t->vals + vi, (size_t)nv * 8);
        w_t h = {0};
        fint(&h, 1, SL_PQ_T_I32, v2 ? 3 : 0); /* DATA_PAGE_V2 or DATA_PAGE */
        fint(&h, 1, SL_PQ_T_I32, (int64_t)page.n);
        fint(&h, 1, SL_PQ_T_I32, (int64_t)page.n);
        if (v2) {
            byte(&h, 5 << 4 | SL_PQ_T_STRUCT); /* field 8: DataPageHeaderV2 */
            fint(&h, 1, SL_PQ_T_I32, end - lv);
            fint(&h, 1, SL_PQ_T_I32, end - lv - nv); /* num_nulls */
            fint(&h, 1, SL_PQ_T_I32, rows);
            fint(&h, 1, SL_PQ_T_I32, SL_PQ_ENC_PLAIN);
            fint(&h, 1, SL_PQ_T_I32, (int64_t)def.n);
            fint(&h, 1, SL_PQ_T_I32, (int64_t)rep.n);
        } else {
            byte(&h, 2 << 4 | SL_PQ_T_STRUCT); /* field 5: DataPageHeader */
            fint(&h, 1, SL_PQ_T_I32, end - lv);
            fint(&h, 1, SL_PQ_T_I32, SL_PQ_ENC_PLAIN);
            fint(&h, 1, SL_PQ_T_I32, 3);
            fint(&h, 1, SL_PQ_T_I32, 3);
        }
        byte(&h, 0);
        byte(&h, 0);
        put(f, h.b, h.n);
        put(f, page.b, page.n);
        free(rep.b);
        free(def.b);
        free(page.b);
        free(h.b);
        vi += nv;
        lv = end;
    }
    int64_t chunk = (int64_t)f->n - 4;
    w_t m = {0};
    bool bare = t->layout == BARE_REPEATED;
    fint(&m, 1, SL_PQ_T_I32, 1);
    byte(&m, 1 << 4 | SL_PQ_T_LIST); /* schema: 4 elements (2 bare) */
    byte(&m, (bare ? 2 : 4) << 4 | SL_PQ_T_STRUCT);
    fbin(&m, 4, "schema");
    fint(&m, 1, SL_PQ_T_I32, 1);
    byte(&m, 0);
    if (bare) { /* l: repeated int64 */
        fint(&m, 1, SL_PQ_T_I32, SL_PQ_INT64);
        fint(&m, 2, SL_PQ_T_I32, 2);
        fbin(&m, 1, "l");
        byte(&m, 0);
    } else {
        fint(&m, 3, SL_PQ_T_I32, 1); /* l: optional group, LIST */
        fbin(&m, 1, "l");
        fint(&m, 1, SL_PQ_T_I32, 1);
        fint(&m, 1, SL_PQ_T_I32, 3);
        byte(&m, 0);
        fint(&m, 3, SL_PQ_T_I32, 2); /* list: repeated group */
        fbin(&m, 1, "list");
        fint(&m, 1, SL_PQ_T_I32, 1);
        byte(&m, 0);
        fint(&m, 1, SL_PQ_T_I32, SL_PQ_INT64); /* element: optional (or required) int64 */
        fint(&m, 2, SL_PQ_T_I32, t->layout == REQUIRED_ELEMS ? 0 : 1);
        fbin(&m, 1, "element");
        byte(&m, 0);
    }
    fint(&m, 1, SL_PQ_T_I64, t->n); /* num_rows */
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_STRUCT); /* one row group */
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_STRUCT); /* one column chunk */
    byte(&m, 3 << 4 | SL_PQ_T_STRUCT); /* field 3: ColumnMetaData */
    fint(&m, 1, SL_PQ_T_I32, SL_PQ_INT64);
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, 1 << 4 | SL_PQ_T_I32);
    varint(&m, 0);
    byte(&m, 1 << 4 | SL_PQ_T_LIST);
    byte(&m, (bare ? 1 : 3) << 4 | SL_PQ_T_BINARY);
    const char *parts[] = {"l", "list", "element"};
    for (int i = 0; i < (bare ? 1 : 3); i++) {
        varint(&m, strlen(parts[i]));
        put(&m, parts[i], strlen(parts[i]));
    }
    fint(&m, 1, SL_PQ_T_I32, 0);
    fint(&m, 1, SL_PQ_T_I64, t->levels);
    fint(&m, 1, SL_PQ_T_I64, chunk);
    fint(&m, 1, SL_PQ_T_I64, chunk);
    fint(&m, 2, SL_PQ_T_I64, 4); /* data_page_offset */
    byte(&m, 0);
    byte(&m, 0);
    fint(&m, 1, SL_PQ_T_I64, chunk); /* total_byte_size */
    fint(&m, 1, SL_PQ_T_I64, t->n);  /* num_rows */
    byte(&m, 0);
    byte(&m, 0);
    put(f, m.b, m.n);
    uint32_t ml = (uint32_t)m.n;
    put(f, &ml, 4);
    put(f, "PAR1", 4);
    free(m.b);
}

Test(parquet_levels_fast, list_pass_of_64_levels_as_one_at_a_time)
{
    uint64_t seed = tu_seed("parquet_levels_fast::list_pass_of_64_levels_as_one_at_a_time");
    uint64_t rng = seed;
    for (unsigned round = 0; round < 12; round++) {
        rows_t t;
        make_rows(&t, 2000 + (uint32_t)tu_below(&rng, 20000), (int)(round % 3), &rng);
        w_t f = {0};
        /* pages of a few levels to more than the reader's level scratch */
        uint32_t page_levels = tu_below(&rng, 2) ? 100 + (uint32_t)tu_below(&rng, 2000) : 1u << 20;
        list_file(&f, &t, page_levels, round % 4 >= 2, &rng);
        sl_pq_memory_t mem;
        sl_pq_source_t src;
        sl_pq_source_memory(&mem, f.b, f.n, &src);
        sl_error_t err = {0};
        sl_pq_file_t *file;
        cr_assert_eq(sl_pq_file_open(&src, "mem", NULL, &file, &err), SL_OK, "seed %llu: %s",
                     (unsigned long long)seed, err.msg);
        /* the masks' pass with popcnt where the CPU has it, and without */
        sl_pq_reader_t *fast, *slow, *nopc;
        cr_assert_eq(sl_pq_reader_new(file, 0, 0, &fast, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_pq_reader_new(file, 0, 0, &slow, &err), SL_OK, "%s", err.msg);
        cr_assert_eq(sl_pq_reader_new(file, 0, 0, &nopc, &err), SL_OK, "%s", err.msg);
        slow->level_by_level = true;
        nopc->no_popcnt = true;
        uint32_t row = 0;
        for (;;) {
            /* batches of one row, a few, about 64, or many */
            static const uint32_t sizes[] = {1, 7, 63, 64, 65, 129, 1000, 4096};
            uint32_t max = sizes[tu_below(&rng, 8)];
            const sl_pq_batch_t *a, *b, *c;
            cr_assert_eq(sl_pq_reader_next(fast, max, &a, &err), SL_OK, "seed %llu: %s",
                         (unsigned long long)seed, err.msg);
            cr_assert_eq(sl_pq_reader_next(slow, max, &b, &err), SL_OK, "seed %llu: %s",
                         (unsigned long long)seed, err.msg);
            cr_assert_eq(sl_pq_reader_next(nopc, max, &c, &err), SL_OK, "seed %llu: %s",
                         (unsigned long long)seed, err.msg);
            cr_assert_eq(c->rows, b->rows, "seed %llu round %u row %u", (unsigned long long)seed,
                         round, row);
            cr_assert_eq(c->slots, b->slots, "seed %llu round %u row %u", (unsigned long long)seed,
                         round, row);
            cr_assert_arr_eq(c->list_off, b->list_off, ((size_t)c->rows + 1) * 4,
                             "seed %llu round %u row %u", (unsigned long long)seed, round, row);
            cr_assert_arr_eq(c->list_valid, b->list_valid, c->rows, "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row);
            cr_assert_arr_eq(c->valid, b->valid, c->slots, "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row);
            cr_assert_eq(a->rows, b->rows, "seed %llu round %u row %u", (unsigned long long)seed,
                         round, row);
            cr_assert_eq(a->slots, b->slots, "seed %llu round %u row %u", (unsigned long long)seed,
                         round, row);
            if (a->rows == 0) break;
            cr_assert_leq(a->rows, max);
            cr_assert_arr_eq(a->list_off, b->list_off, ((size_t)a->rows + 1) * 4,
                             "seed %llu round %u row %u", (unsigned long long)seed, round, row);
            cr_assert_arr_eq(a->list_valid, b->list_valid, a->rows, "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row);
            cr_assert_arr_eq(a->valid, b->valid, a->slots, "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row);
            cr_assert_arr_eq(a->i64, b->i64, (size_t)a->slots * 8, "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row);
            /* and both are the rows the file was made of */
            uint32_t s0 = t.off[row];
            for (uint32_t r = 0; r < a->rows; r++) {
                cr_assert_eq(a->list_off[r], t.off[row + r] - s0, "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row + r);
                cr_assert_eq(a->list_valid[r], t.lvalid[row + r], "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row + r);
            }
            cr_assert_eq(a->list_off[a->rows], t.off[row + a->rows] - s0);
            cr_assert_arr_eq(a->valid, t.valid + s0, a->slots, "seed %llu round %u row %u",
                             (unsigned long long)seed, round, row);
            cr_assert_arr_eq(a->i64, t.slotval + s0, (size_t)a->slots * 8,
                             "seed %llu round %u row %u", (unsigned long long)seed, round, row);
            row += a->rows;
        }
        cr_assert_eq(row, t.n, "seed %llu round %u", (unsigned long long)seed, round);
        sl_pq_reader_destroy(fast);
        sl_pq_reader_destroy(slow);
        sl_pq_reader_destroy(nopc);
        sl_pq_file_destroy(file);
        free(f.b);
        free_rows(&t);
    }
}

Test(parquet_levels_fast, dictionary_index_out_of_range_anywhere_in_a_group)
{
    /* a bit-packed run of 64 indices of 10 bits into a dictionary of n
     * entries: all below n gather exactly; one at n (or the largest the
     * width holds) at any of the 64 places is refused, naming it */
    static int64_t dict[1024];
    for (uint32_t i = 0; i < 1024; i++)
        dict[i] = (int64_t)i * 7 - 3;
    static const uint32_t sizes[] = {1, 5, 8, 1000, 1023};
    for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint32_t n = sizes[s];
        for (int bad_at = -1; bad_at < 64; bad_at++) {
            for (unsigned big = 0; big < 2; big++) {
                uint8_t buf[1 + 64 * 10 / 8] = {8 << 1 | 1}; /* 8 groups */
                uint32_t idx[64];
                for (uint32_t i = 0; i < 64; i++) {
                    idx[i] = (i * 37 + 11) % n;
                    if ((int)i == bad_at) idx[i] = big ? 1023 : n;
                    for (unsigned b = 0; b < 10; b++)
                        if (idx[i] >> b & 1)
                            buf[1 + (i * 10 + b) / 8] |= (uint8_t)(1u << ((i * 10 + b) % 8));
                }
                sl_pq_rle_t r;
                sl_pq_rle_init(&r, buf, sizeof buf, 10);
                int64_t out[64];
                sl_error_t err = {0};
                sl_err_t rc = sl_pq_rle_gather_i64(&r, dict, n, out, 64, &err);
                if (bad_at < 0 || idx[bad_at] < n) {
                    cr_assert_eq(rc, SL_OK, "n %u: %s", n, err.msg);
                    for (uint32_t i = 0; i < 64; i++)
                        cr_assert_eq(out[i], dict[idx[i]], "n %u index %u", n, i);
                } else {
                    char want[128];
                    snprintf(want, sizeof want,
                             "dictionary index %u out of range (dictionary of %u)", idx[bad_at], n);
                    cr_assert_eq(rc, SL_ERR_CORRUPT, "n %u bad at %d", n, bad_at);
                    cr_assert_str_eq(err.msg, want);
                }
            }
        }
    }
}

Test(parquet_levels_fast, definition_level_above_its_maximum_refused)
{
    /* required elements (maximum 2, levels of 2 bits): a level of 3 at a
     * random place is refused by the bit-plane pass with the message of
     * the byte pass */
    uint64_t seed = tu_seed("parquet_levels_fast::definition_level_above_its_maximum_refused");
    uint64_t rng = seed;
    for (unsigned round = 0; round < 6; round++) {
        rows_t t;
        make_rows(&t, 3000, REQUIRED_ELEMS, &rng);
        uint32_t at = (uint32_t)tu_below(&rng, t.levels);
        t.def[at] = 3;
        w_t f = {0};
        list_file(&f, &t, 100 + (uint32_t)tu_below(&rng, 5000), round % 2 == 1, &rng);
        sl_pq_memory_t mem;
        sl_pq_source_t src;
        sl_pq_source_memory(&mem, f.b, f.n, &src);
        sl_error_t err = {0};
        sl_pq_file_t *file;
        cr_assert_eq(sl_pq_file_open(&src, "mem", NULL, &file, &err), SL_OK, "%s", err.msg);
        char msg[2][SL_ERROR_MSG_MAX];
        for (int slow = 0; slow < 2; slow++) {
            sl_pq_reader_t *r;
            cr_assert_eq(sl_pq_reader_new(file, 0, 0, &r, &err), SL_OK, "%s", err.msg);
            r->level_by_level = slow;
            const sl_pq_batch_t *b;
            sl_err_t rc;
            while ((rc = sl_pq_reader_next(r, 4096, &b, &err)) == SL_OK && b->rows > 0)
                ;
            cr_assert_eq(rc, SL_ERR_CORRUPT, "seed %llu round %u slow %d: %s",
                         (unsigned long long)seed, round, slow, err.msg);
            snprintf(msg[slow], sizeof msg[slow], "%s", err.msg);
            sl_pq_reader_destroy(r);
        }
        cr_assert_str_eq(msg[0], msg[1], "seed %llu round %u", (unsigned long long)seed, round);
        char want[64];
        snprintf(want, sizeof want, ": level 3 of 2 (definition) or %u of 1 (repetition)",
                 t.rep[at]);
        cr_assert_not_null(strstr(msg[0], want), "seed %llu round %u: %s (want %s)",
                           (unsigned long long)seed, round, msg[0], want);
        sl_pq_file_destroy(file);
        free(f.b);
        free_rows(&t);
    }
}

/* The list pass's level work (column.c's sl_pq_reader_next calls it):
 * definition and repetition levels decoded into the masks that give a
 * batch's rows, list offsets and validity, 64 levels at a time: straight
 * from their runs as bit planes (levels of 1 and 2 bits: every usual list
 * layout), else through a byte per level. */
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string.h>

#include "column_internal.h"
#include "common/fileio.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        sl_err_t rc_ = (x);                                                                        \
        if (rc_ != SL_OK) return rc_;                                                              \
    } while (0)

/* Bit j of *s: level j of the 64 at R starts a row (repetition 0); of *e:
 * level j of D is an element (>= ed); of *v: a valid one (== md); of *l:
 * its row's list is not null (>= ed - 1). */
static void level_masks(const uint8_t *D, const uint8_t *R, uint8_t ed, uint8_t md, uint64_t *s,
                        uint64_t *e, uint64_t *v, uint64_t *l)
{
    uint64_t S = 0, E = 0, V = 0, L = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128(), ved = _mm_set1_epi8((char)ed),
                  vmd = _mm_set1_epi8((char)md), vl = _mm_set1_epi8((char)(ed - 1));
    for (unsigned q = 0; q < 4; q++) {
        __m128i d = _mm_loadu_si128((const __m128i *)(D + 16 * q));
        __m128i r = _mm_loadu_si128((const __m128i *)(R + 16 * q));
        /* unsigned d >= x: max(d, x) == d */
        S |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(r, zero)) << (16 * q);
        E |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(d, ved), d))
             << (16 * q);
        V |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(d, vmd)) << (16 * q);
        L |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(d, vl), d))
             << (16 * q);
    }
#else
    for (unsigned j = 0; j < 64; j++) {
        S |= (uint64_t)(R[j] == 0) << j;
        E |= (uint64_t)(D[j] >= ed) << j;
        V |= (uint64_t)(D[j] == md) << j;
        L |= (uint64_t)(D[j] + 1 >= ed) << j;
    }
#endif
    *s = S;
    *e = E;
    *v = V;
    *l = L;
}

/* The list pass over at most 64 levels given as masks (bit j: level j
 * starts a row in S, is an element in E, a valid one in V, its row's list
 * is not null in L; no bit past the block's levels set in S, E or V):
 * rows start at the set bits of S, a row's offset is the slots before it
 * (a running count of the element bits, kept a byte per level), the
 * validity bytes of the slots are the valid bits of the elements. The
 * caller has room for the block's rows and 64 slots (the validity bytes
 * past the block's slots may be written: the next slots overwrite them). */
static inline __attribute__((always_inline)) void
list_masks(uint64_t S, uint64_t E, uint64_t V, uint64_t L, uint32_t *rows_p, uint32_t *slots_p,
           uint32_t *nvals_p, uint32_t *loff, uint8_t *lvalid, uint8_t *valid, bool pc)
{
    uint32_t rows = *rows_p, slots = *slots_p;
    uint64_t c = 0;
    if (pc) {
        /* with a popcnt instruction (the caller is compiled for it): a
         * row's offset is the element bits below its start, counted */
        c = (uint64_t)__builtin_popcountll(E);
        if ((S & ~L) == 0) /* no null list */
            for (; S != 0; S &= S - 1) {
                loff[rows] = slots + (uint32_t)__builtin_popcountll(E & ((S & -S) - 1));
                lvalid[rows++] = 1;
            }
        for (; S != 0; S &= S - 1) {
            loff[rows] = slots + (uint32_t)__builtin_popcountll(E & ((S & -S) - 1));
            lvalid[rows++] = (uint8_t)((L >> __builtin_ctzll(S)) & 1);
        }
    }
    /* before[j]: the element levels among levels 0..j-1, 8 at a time: the
     * 8 bits spread one a byte (as rle_unpack_u8 does), their running sums
     * by one multiply (a byte holds at most 64) */
    uint8_t before[64];
    for (unsigned q = 0; q < 8 && !pc; q++) {
        const uint64_t ones = UINT64_C(0x0101010101010101);
        uint64_t x = (((E >> (8 * q)) & 0xff) * ones) & UINT64_C(0x8040201008040201);
        x = ((x + UINT64_C(0x7f7f7f7f7f7f7f7f)) >> 7) & ones;
        uint64_t incl = x * ones;
        sl_le_put_u64(before + 8 * q, incl - x + c * ones);
        c += incl >> 56;
    }
    if ((S & ~L) == 0) { /* no null list */
        for (; S != 0; S &= S - 1) {
            loff[rows] = slots + before[__builtin_ctzll(S)];
            lvalid[rows++] = 1;
        }
    }
    for (; S != 0; S &= S - 1) {
        unsigned j = (unsigned)__builtin_ctzll(S);
        loff[rows] = slots + before[j];
        lvalid[rows++] = (uint8_t)((L >> j) & 1);
    }
    if (V == E) { /* every element valid: 64 bytes stored, no call (room reserved) */
        static const uint8_t ones[64] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
        memcpy(valid + slots, ones, sizeof ones);
        *nvals_p += (uint32_t)c;
    } else {
        uint32_t k = slots, nv = 0;
        for (uint64_t m = E; m != 0; m &= m - 1) {
            uint8_t x = (uint8_t)((V >> __builtin_ctzll(m)) & 1);
            valid[k++] = x;
            nv += x;
        }
        *nvals_p += nv;
    }
    *rows_p = rows;
    *slots_p = slots + (uint32_t)c;
}

/* The list pass over 64 levels D, R at once (the caller has room for 64
 * more rows and slots). The same batch as 64 steps of the per-level pass
 * (except for the bytes past the last row and slot, which the per-level
 * pass fills with what the next row or slot overwrites). */
void sl_pq_list_block64(const uint8_t *D, const uint8_t *R, uint8_t ed, uint8_t md,
                        uint32_t *rows_p, uint32_t *slots_p, uint32_t *nvals_p, uint32_t *loff,
                        uint8_t *lvalid, uint8_t *valid)
{
    uint64_t S, E, V, L;
    level_masks(D, R, ed, md, &S, &E, &V, &L);
    list_masks(S, E, V, L, rows_p, slots_p, nvals_p, loff, lvalid, valid, false);
}

/* ---- levels as bit planes ---- */

bool sl_pq_levels_planar(const sl_pq_reader_t *r)
{
    return r->c->max_rep == 1 && r->c->max_def >= 1 && r->c->max_def <= 3 && !r->level_by_level;
}

/* 64 bits of the plane p from bit i (i < SL_PQ_LEVEL_CHUNK: p has a word
 * after the one i is in). */
static inline uint64_t bits_at(const uint64_t *p, uint32_t i)
{
    unsigned o = i & 63;
    const uint64_t *w = p + (i >> 6);
    return o ? (w[0] >> o) | (w[1] << (64 - o)) : w[0];
}

/* The next n levels of the page as masks: decoded as bit planes (the
 * definition levels' bits 0 and 1 into pl_e and pl_v, the repetition
 * levels into pl_s), then turned into the masks word by word without a
 * branch (a 2-bit level is one of four, each a mask of the two planes),
 * and checked against the maxima: only a definition level of 3 where the
 * maximum is 2 can be above it. */
static sl_err_t refill_planes(sl_pq_reader_t *r, uint32_t n, sl_error_t *err)
{
    size_t words = (size_t)(n + 63) / 64 + 1;
    memset(r->pl_s, 0, words * 8);
    memset(r->pl_e, 0, words * 8);
    memset(r->pl_v, 0, words * 8);
    TRY(sl_pq_rle_get_bits(&r->def, r->pl_e, r->pl_v, 0, n, err));
    TRY(sl_pq_rle_get_bits(&r->rep, r->pl_s, NULL, 0, n, err));
    const int ed = r->c->elem_def, md = r->c->max_def;
    /* which of the four levels (0..3) are elements, valid, of a list */
    uint64_t em[4], vm[4], lm[4];
    for (int t = 0; t < 4; t++) {
        em[t] = t >= ed ? ~UINT64_C(0) : 0;
        vm[t] = t == md ? ~UINT64_C(0) : 0;
        lm[t] = t + 1 >= ed ? ~UINT64_C(0) : 0;
    }
    for (size_t w = 0; w < words; w++) {
        uint64_t d0 = r->pl_e[w], d1 = r->pl_v[w];
        uint64_t l0 = ~(d0 | d1), l1 = d0 & ~d1, l2 = ~d0 & d1, l3 = d0 & d1;
        if (md == 2 && l3 != 0) {
            unsigned j = (unsigned)__builtin_ctzll(l3);
            return sl_error_set(
                err, SL_ERR_CORRUPT, "level %u of %u (definition) or %u of %u (repetition)", 3u,
                (unsigned)md, (unsigned)((r->pl_s[w] >> j) & 1), (unsigned)r->c->max_rep);
        }
        r->pl_e[w] = (l0 & em[0]) | (l1 & em[1]) | (l2 & em[2]) | (l3 & em[3]);
        r->pl_v[w] = (l0 & vm[0]) | (l1 & vm[1]) | (l2 & vm[2]) | (l3 & vm[3]);
        r->pl_l[w] = (l0 & lm[0]) | (l1 & lm[1]) | (l2 & lm[2]) | (l3 & lm[3]);
    }
    for (size_t w = 0; w < words; w++)
        r->pl_s[w] = ~r->pl_s[w];
    return SL_OK;
}

static inline __attribute__((always_inline)) void list_planes(sl_pq_reader_t *r, uint32_t max_rows,
                                                              uint32_t *nvals, bool *full, bool pc)
{
    sl_pq_batch_t *b = &r->b;
    uint32_t rows = b->rows, slots = b->slots, nv = 0, i = r->lv_pos;
    while (i < r->lv_len) {
        uint32_t blk = r->lv_len - i < 64 ? r->lv_len - i : 64;
        uint64_t keep = blk == 64 ? ~UINT64_C(0) : (UINT64_C(1) << blk) - 1;
        uint64_t S = bits_at(r->pl_s, i) & keep;
        uint32_t allowed = max_rows - rows;
        if (allowed < 64) {
            /* the row past max_rows, if it starts in this block: the
             * block stops before it */
            uint64_t s = S;
            for (uint32_t k = 0; k < allowed && s != 0; k++)
                s &= s - 1;
            if (s != 0) {
                blk = (uint32_t)__builtin_ctzll(s);
                keep = (UINT64_C(1) << blk) - 1; /* blk < 64 */
                S &= keep;
                *full = true;
            }
        }
        list_masks(S, bits_at(r->pl_e, i) & keep, bits_at(r->pl_v, i) & keep, bits_at(r->pl_l, i),
                   &rows, &slots, &nv, b->list_off, b->list_valid, b->valid, pc);
        i += blk;
        if (*full) break;
    }
    b->rows = rows;
    b->slots = slots;
    r->lv_pos = i;
    *nvals += nv;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The pass compiled for popcnt and BMI1 (andn, blsr, tzcnt), taken where
 * the CPU has them (the build targets the baseline x86-64, which does
 * not): a row's offset without a table of running counts on the stack. */
__attribute__((target("popcnt,bmi"))) static void
list_planes_popcnt(sl_pq_reader_t *r, uint32_t max_rows, uint32_t *nvals, bool *full)
{
    list_planes(r, max_rows, nvals, full, true);
}
#endif

void sl_pq_list_planes(sl_pq_reader_t *r, uint32_t max_rows, uint32_t *nvals, bool *full)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi") && !r->no_popcnt) {
        list_planes_popcnt(r, max_rows, nvals, full);
        return;
    }
#endif
    list_planes(r, max_rows, nvals, full, false);
}

/* A list column's levels straight from their runs, without the level
 * scratch: while the repetition levels are a repeated run of 0 (a row per
 * level: lists of at most one element, Criteo's single ids) and the
 * definition levels a repeated run of one level, *k rows (0: not such
 * runs) of one element each (valid or null) or of none (empty or null
 * lists) go into the batch at once; *nvals: the valid elements. */
sl_err_t sl_pq_whole_rows(sl_pq_reader_t *r, uint32_t max_rows, uint32_t *k, uint32_t *nvals,
                          sl_error_t *err)
{
    sl_pq_batch_t *b = &r->b;
    const uint32_t ed = (uint32_t)r->c->elem_def, md = (uint32_t)r->c->max_def;
    uint32_t rn, rv, dn, dv;
    *k = *nvals = 0;
    if (r->page_left == 0) return SL_OK;
    TRY(sl_pq_rle_repeated(&r->rep, &rn, &rv, err));
    if (rn == 0 || rv != 0) return SL_OK;
    TRY(sl_pq_rle_repeated(&r->def, &dn, &dv, err));
    if (dn == 0 || dv > md) return SL_OK; /* a level above the maximum: refill names it */
    uint32_t n = rn < dn ? rn : dn;
    n = n < r->page_left ? n : r->page_left;
    n = n < max_rows - b->rows ? n : max_rows - b->rows;
    if (n == 0) return SL_OK;
    uint32_t rows = b->rows, slots = b->slots;
    memset(b->list_valid + rows, dv + 1 >= ed, n);
    if (dv >= ed) { /* one element a row */
        TRY(sl_pq_reserve_slots(r, (size_t)slots + n, err));
        for (uint32_t i = 0; i < n; i++)
            b->list_off[rows + i] = slots + i;
        memset(b->valid + slots, dv == md, n);
        *nvals = dv == md ? n : 0;
        b->slots = slots + n;
    } else { /* empty or null lists */
        for (uint32_t i = 0; i < n; i++)
            b->list_off[rows + i] = slots;
    }
    b->rows = rows + n;
    sl_pq_rle_skip(&r->rep, n);
    sl_pq_rle_skip(&r->def, n);
    r->page_left -= n;
    *k = n;
    return SL_OK;
}

/* Decode the next SL_PQ_LEVEL_CHUNK levels of the page. */
sl_err_t sl_pq_levels_refill(sl_pq_reader_t *r, sl_error_t *err)
{
    uint32_t n = r->page_left < SL_PQ_LEVEL_CHUNK ? r->page_left : SL_PQ_LEVEL_CHUNK;
    r->planes = sl_pq_levels_planar(r);
    if (r->planes) {
        TRY(refill_planes(r, n, err));
        r->page_left -= n;
        r->lv_len = n;
        r->lv_pos = 0;
        return SL_OK;
    }
    if (r->c->max_def > 0)
        TRY(sl_pq_rle_get_u8(&r->def, r->lv_def, n, err));
    else
        memset(r->lv_def, 0, n);
    if (r->c->max_rep > 0) TRY(sl_pq_rle_get_u8(&r->rep, r->lv_rep, n, err));
    /* levels whose bit width holds no value above their maximum (the usual
     * case: maxima 1 and 3) need no check */
    unsigned dw = sl_pq_bit_width((unsigned)r->c->max_def),
             rw = sl_pq_bit_width((unsigned)r->c->max_rep);
    bool checked =
        ((1u << dw) - 1 == (unsigned)r->c->max_def) && ((1u << rw) - 1 == (unsigned)r->c->max_rep);
    for (uint32_t i = 0; i < n && !checked; i++)
        if (r->lv_def[i] > r->c->max_def || (r->c->max_rep > 0 && r->lv_rep[i] > r->c->max_rep))
            return sl_error_set(
                err, SL_ERR_CORRUPT, "level %u of %u (definition) or %u of %u (repetition)",
                r->lv_def[i], r->c->max_def, r->c->max_rep ? r->lv_rep[i] : 0, r->c->max_rep);
    r->page_left -= n;
    r->lv_len = n;
    r->lv_pos = 0;
    return SL_OK;
}

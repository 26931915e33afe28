/* The list pass's level work (column.c's sl_pq_reader_next calls it):
 * definition and repetition levels decoded into bytes, and 64 of them at
 * once into the masks that give a batch's rows, list offsets and
 * validity. */
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

/* The list pass over 64 levels D, R at once (the caller has room for 64
 * more rows and slots): rows start at the set bits of their repetition
 * mask, a row's offset is the slots before it (a running count of the
 * element bits, kept a byte per level), the validity bytes of the slots
 * are the valid bits of the elements. The same batch as 64 steps of the
 * per-level pass (except for the bytes past the last row and slot, which
 * the per-level pass fills with what the next row or slot overwrites). */
void sl_pq_list_block64(const uint8_t *D, const uint8_t *R, uint8_t ed, uint8_t md,
                        uint32_t *rows_p, uint32_t *slots_p, uint32_t *nvals_p, uint32_t *loff,
                        uint8_t *lvalid, uint8_t *valid)
{
    uint64_t S, E, V, L;
    level_masks(D, R, ed, md, &S, &E, &V, &L);
    uint32_t rows = *rows_p, slots = *slots_p;
    /* before[j]: the element levels among levels 0..j-1, 8 at a time: the
     * 8 bits spread one a byte (as rle_unpack_u8 does), their running sums
     * by one multiply (a byte holds at most 64) */
    uint8_t before[64];
    uint64_t c = 0;
    for (unsigned q = 0; q < 8; q++) {
        const uint64_t ones = UINT64_C(0x0101010101010101);
        uint64_t x = (((E >> (8 * q)) & 0xff) * ones) & UINT64_C(0x8040201008040201);
        x = ((x + UINT64_C(0x7f7f7f7f7f7f7f7f)) >> 7) & ones;
        uint64_t incl = x * ones;
        sl_le_put_u64(before + 8 * q, incl - x + c * ones);
        c += incl >> 56;
    }
    while (S != 0) {
        unsigned j = (unsigned)__builtin_ctzll(S);
        loff[rows] = slots + before[j];
        lvalid[rows] = (uint8_t)((L >> j) & 1);
        rows++;
        S &= S - 1;
    }
    if (V == E) { /* every element valid */
        memset(valid + slots, 1, (size_t)c);
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

/* Decode the next SL_PQ_LEVEL_CHUNK levels of the page. */
sl_err_t sl_pq_levels_refill(sl_pq_reader_t *r, sl_error_t *err)
{
    uint32_t n = r->page_left < SL_PQ_LEVEL_CHUNK ? r->page_left : SL_PQ_LEVEL_CHUNK;
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

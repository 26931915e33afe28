/* The DELTA_BINARY_PACKED and BYTE_STREAM_SPLIT decoders (encoding.h), moved
 * out of encoding.c (the RLE/bit-packed hybrid) as they were. */
#include <string.h>

#include "common/err.h"
#include "encoding.h"
#include "thrift.h"

sl_err_t sl_pq_delta_init(sl_pq_delta_t *d, const uint8_t *p, size_t len, sl_error_t *err)
{
    memset(d, 0, sizeof *d);
    d->p = p;
    d->end = p + len;
    uint64_t first;
    if (!sl_pq_uvarint(&d->p, d->end, &d->block_size) ||
        !sl_pq_uvarint(&d->p, d->end, &d->miniblocks) || !sl_pq_uvarint(&d->p, d->end, &d->total) ||
        !sl_pq_uvarint(&d->p, d->end, &first))
        return sl_error_set(err, SL_ERR_TRUNCATED, "DELTA_BINARY_PACKED header runs past the end");
    if (d->block_size == 0 || d->block_size % 128 != 0 || d->block_size > (1u << 20) ||
        d->miniblocks == 0 || d->block_size % d->miniblocks != 0 ||
        (d->block_size / d->miniblocks) % 32 != 0)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "DELTA_BINARY_PACKED block of %llu values in %llu miniblocks",
                            (unsigned long long)d->block_size, (unsigned long long)d->miniblocks);
    d->mb_values = d->block_size / d->miniblocks;
    d->left = d->total;
    d->last = (uint64_t)sl_pq_unzigzag(first);
    return SL_OK;
}

static sl_err_t delta_next_block(sl_pq_delta_t *d, sl_error_t *err)
{
    uint64_t md;
    if (!sl_pq_uvarint(&d->p, d->end, &md))
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "DELTA_BINARY_PACKED block header runs past "
                            "the end");
    d->min_delta = (uint64_t)sl_pq_unzigzag(md);
    if ((uint64_t)(d->end - d->p) < d->miniblocks)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "DELTA_BINARY_PACKED bit widths run past the "
                            "end");
    d->widths = d->p;
    d->p += d->miniblocks;
    d->mb_index = 0;
    d->mb_left = 0;
    d->block_left = d->block_size;
    return SL_OK;
}

static sl_err_t delta_next_miniblock(sl_pq_delta_t *d, sl_error_t *err)
{
    if (d->block_left == 0 || d->mb_index >= d->miniblocks) {
        SL_FORWARD_IF_ERROR(delta_next_block(d, err));
    }
    unsigned w = d->widths[d->mb_index];
    if (w > 64)
        return sl_error_set(err, SL_ERR_CORRUPT, "DELTA_BINARY_PACKED miniblock of %u bits", w);
    uint64_t bytes = d->mb_values * w / 8;
    if ((uint64_t)(d->end - d->p) < bytes)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "DELTA_BINARY_PACKED miniblock of %llu bytes, %zu left",
                            (unsigned long long)bytes, (size_t)(d->end - d->p));
    d->mb = d->p;
    d->mb_bytes = (size_t)bytes;
    d->p += bytes;
    d->mb_width = w;
    d->mb_pos = 0;
    d->mb_left = d->mb_values;
    d->mb_index++;
    d->block_left -= d->mb_values;
    return SL_OK;
}

sl_err_t sl_pq_delta_get(sl_pq_delta_t *d, int64_t *out, uint64_t n, sl_error_t *err)
{
    if (n > d->left)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "DELTA_BINARY_PACKED stream of %llu values asked for %llu more",
                            (unsigned long long)d->left, (unsigned long long)n);
    uint64_t i = 0;
    if (n > 0 && !d->first_out) {
        out[i++] = (int64_t)d->last;
        d->first_out = true;
        d->left--;
    }
    while (i < n) {
        if (d->mb_left == 0) {
            SL_FORWARD_IF_ERROR(delta_next_miniblock(d, err));
        }
        uint64_t k = n - i < d->mb_left ? n - i : d->mb_left;
        uint64_t bit = d->mb_pos * d->mb_width;
        for (uint64_t j = 0; j < k; j++, bit += d->mb_width) {
            d->last += d->min_delta + sl_pq_bits(d->mb, d->mb_bytes, bit, d->mb_width);
            out[i + j] = (int64_t)d->last;
        }
        d->mb_pos += k;
        d->mb_left -= k;
        d->left -= k;
        i += k;
    }
    return SL_OK;
}

const uint8_t *sl_pq_delta_end(const sl_pq_delta_t *d)
{
    return d->p;
}

void sl_pq_bss_get(const uint8_t *data, uint64_t count, unsigned width, uint64_t first, uint64_t n,
                   uint8_t *out)
{
    for (uint64_t i = 0; i < n; i++)
        for (unsigned k = 0; k < width; k++)
            out[i * width + k] = data[k * count + first + i];
}

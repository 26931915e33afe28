/* Row group skipping by column statistics (parquet.h): the numeric range a
 * column chunk's min/max statistics give, and whether they prove that no
 * value of the chunk lies in a range (a job's timestamp or label filter).
 * Conservative by construction: absent, legacy-ordered unsigned, NaN or
 * non-numeric statistics never exclude, and integers beyond 2^53 are
 * widened outward when they become doubles. */
#include <math.h>
#include <string.h>

#include "common/fileio.h"
#include "parquet.h"

/* One plain-encoded statistics value as a double; false when it is not a
 * numeric value of the column's type. */
static bool stat_value(const sl_pq_column_t *c, const uint8_t *v, uint32_t n, double *out)
{
    switch (c->type) {
    case SL_PQ_BOOLEAN:
        if (n < 1) return false;
        *out = v[0] ? 1.0 : 0.0;
        return true;
    case SL_PQ_INT32:
        if (n != 4) return false;
        *out = c->is_unsigned ? (double)sl_le_get_u32(v) : (double)(int32_t)sl_le_get_u32(v);
        return true;
    case SL_PQ_INT64:
        if (n != 8) return false;
        *out = c->is_unsigned ? (double)sl_le_get_u64(v) : (double)(int64_t)sl_le_get_u64(v);
        return true;
    case SL_PQ_FLOAT: {
        float f;
        if (n != 4) return false;
        memcpy(&f, v, 4);
        *out = f;
        return !isnan(f);
    }
    case SL_PQ_DOUBLE:
        if (n != 8) return false;
        memcpy(out, v, 8);
        return !isnan(*out);
    default:
        return false;
    }
}

bool sl_pq_stats_range(const sl_pq_column_t *c, const sl_pq_chunk_t *ch, double *min, double *max)
{
    const sl_pq_stats_t *s = &ch->stats;
    if (!ch->has_stats || !s->has_min || !s->has_max) return false;
    /* legacy min/max of unsigned columns were compared as signed */
    if (c->is_unsigned && !s->exact_order) return false;
    if (!stat_value(c, s->min, s->min_len, min) || !stat_value(c, s->max, s->max_len, max))
        return false;
    if (*min > *max) return false;
    /* an integer above 2^53 may have rounded inward: widen by one step */
    *min = nextafter(*min, -INFINITY);
    *max = nextafter(*max, INFINITY);
    return true;
}

bool sl_pq_chunk_excludes(const sl_pq_column_t *c, const sl_pq_chunk_t *ch, double lo, double hi)
{
    if (c->is_list) return false; /* a list's statistics are its elements' */
    if (ch->has_stats && ch->stats.has_null_count && ch->num_values > 0 &&
        ch->stats.null_count == ch->num_values)
        return true; /* every value null: none lies in any range */
    double min, max;
    if (!sl_pq_stats_range(c, ch, &min, &max)) return false;
    return min > hi || max < lo;
}

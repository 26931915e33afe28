/* The footer's checks (wh_internal.h), run by an open (format.c) before
 * anything uses the footer: its dedup groups against the schema, then every
 * stripe and stream against the file, the schema and the limits (offsets
 * inside the file, stripes and streams contiguous, each stream's name and
 * kind fitting a slot of the schema, value counts consistent with row
 * counts, codecs, encodings and sizes known and within the limits), leaving
 * each stripe's streams indexed by slot. */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "wh_internal.h"

sl_err_t wh_file_check_groups(wh_file_t *f, sl_error_t *err)
{
    const char *name = f->src.name;
    const Sluice__FileFooter *ft = f->footer;
    uint32_t nf = sl_wh_schema_num_features(f->schema);
    f->feature_group = sl_alloc(f->a, ((size_t)nf + 1) * sizeof(int32_t));
    f->feature_group_n = nf + 1;
    if (f->feature_group == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s", name);
    for (uint32_t i = 0; i < nf; i++)
        f->feature_group[i] = -1;
    if (ft->n_dedup_groups > nf)
        return sl_error_set(err, SL_ERR_CORRUPT, "%s: footer: %zu dedup groups for %u features",
                            name, ft->n_dedup_groups, nf);
    f->num_groups = (uint32_t)ft->n_dedup_groups;
    if (f->num_groups == 0) return SL_OK;
    f->groups = sl_calloc(f->a, f->num_groups, sizeof *f->groups);
    if (f->groups == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s", name);
    for (uint32_t g = 0; g < f->num_groups; g++) {
        const Sluice__DedupGroupInfo *gi = ft->dedup_groups[g];
        if (wh_check_name("dedup group", gi->name, err) != SL_OK) {
            sl_error_prefix(err, "%s: footer: ", name);
            if (err != NULL) err->code = SL_ERR_CORRUPT;
            return SL_ERR_CORRUPT;
        }
        for (uint32_t h = 0; h < g; h++)
            if (strcmp(f->groups[h].spec.name, gi->name) == 0)
                return sl_error_set(err, SL_ERR_CORRUPT, "%s: footer: dedup group '%s' twice", name,
                                    gi->name);
        if (gi->n_features == 0 || gi->n_features > nf)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "%s: footer: dedup group '%s' has %zu features", name, gi->name,
                                gi->n_features);
        wh_group_t *grp = &f->groups[g];
        grp->spec.name = gi->name;
        grp->features = sl_alloc(f->a, gi->n_features * sizeof(uint32_t));
        if (grp->features == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s", name);
        grp->spec.num_features = (uint32_t)gi->n_features;
        grp->spec.features = (const char *const *)gi->features;
        for (size_t k = 0; k < gi->n_features; k++) {
            int fi = sl_wh_schema_index(f->schema, gi->features[k]);
            if (fi < 0 || sl_wh_schema_feature(f->schema, (uint32_t)fi)->kind == SL_WH_DENSE)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s: footer: dedup group '%s': '%s' is not a sparse feature",
                                    name, gi->name, gi->features[k]);
            if (f->feature_group[fi] >= 0)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s: footer: feature '%s' is in two dedup groups", name,
                                    gi->features[k]);
            f->feature_group[fi] = (int32_t)g;
            grp->features[k] = (uint32_t)fi;
        }
    }
    return SL_OK;
}

/* Return SL_ERR_CORRUPT naming the stream, "<file> stripe <s> <stream>:
 * <message>", from the checker's own name, s, st, lb (room for the
 * stream's label) and err. */
#define BAD(...)                                                                                   \
    do {                                                                                           \
        char m_[SL_ERROR_MSG_MAX];                                                                 \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                                      \
        return sl_error_set(err, SL_ERR_CORRUPT, "%s stripe %u %s: %s", name, s,                   \
                            wh_stream_label(st, lb, sizeof lb), m_);                               \
    } while (0)

/* The slot of stream st, checking that its name and kind fit the schema and
 * its value count fits the stripe. */
static sl_err_t stream_slot(wh_file_t *f, uint32_t s, const wh_stripe_t *sp, const wh_stream_t *st,
                            uint32_t *slot, sl_error_t *err)
{
    char lb[SL_WH_NAME_MAX + 40];
    const char *name = f->src.name;
    uint32_t N = sp->rows;
    uint64_t expect = N;
    switch (st->kind) {
    case SL_WH_STREAM_SAMPLE_ID:
    case SL_WH_STREAM_SESSION_ID:
    case SL_WH_STREAM_TIMESTAMP: {
        uint32_t c = st->kind - SL_WH_STREAM_SAMPLE_ID;
        if (strcmp(st->name, sl_wh_schema_column(f->schema, (sl_wh_column_t)(1u << c))) != 0)
            BAD("the schema names this column '%s'",
                sl_wh_schema_column(f->schema, (sl_wh_column_t)(1u << c)));
        *slot = c;
        break;
    }
    case SL_WH_STREAM_LABEL: {
        int t = sl_wh_schema_find_label(f->schema, st->name);
        if (t < 0) BAD("not a label of the schema");
        *slot = wh_slot_label(f, (uint32_t)t);
        break;
    }
    case SL_WH_STREAM_INVERSE: {
        uint32_t g = 0;
        while (g < f->num_groups && strcmp(f->groups[g].spec.name, st->name) != 0)
            g++;
        if (g == f->num_groups) BAD("not a dedup group of the file");
        *slot = wh_slot_inverse(f, g);
        break;
    }
    default: {
        int fi = sl_wh_schema_index(f->schema, st->name);
        if (fi < 0) BAD("not a feature of the schema");
        sl_wh_kind_t fk = sl_wh_schema_feature(f->schema, (uint32_t)fi)->kind;
        uint32_t role;
        switch (st->kind) {
        case SL_WH_STREAM_DENSE_VALUES:
        case SL_WH_STREAM_PRESENT:
            if (fk != SL_WH_DENSE) BAD("the feature is %s", sl_wh_kind_name(fk));
            role = st->kind == SL_WH_STREAM_PRESENT ? WH_ROLE_PRESENT : WH_ROLE_VALUES;
            if (st->kind == SL_WH_STREAM_DENSE_VALUES) {
                if (st->value_count > N)
                    BAD("%llu values for %u rows", (unsigned long long)st->value_count, N);
                expect = st->value_count;
            }
            break;
        case SL_WH_STREAM_LENGTHS:
        case SL_WH_STREAM_IDS:
        case SL_WH_STREAM_WEIGHTS:
            if (fk == SL_WH_DENSE || (st->kind == SL_WH_STREAM_WEIGHTS && fk != SL_WH_WEIGHTED))
                BAD("the feature is %s", sl_wh_kind_name(fk));
            role = st->kind == SL_WH_STREAM_LENGTHS ? WH_ROLE_LENGTHS
                   : st->kind == SL_WH_STREAM_IDS   ? WH_ROLE_IDS
                                                    : WH_ROLE_WEIGHTS;
            if (st->kind == SL_WH_STREAM_LENGTHS && f->feature_group[fi] >= 0)
                expect = sp->unique_rows[f->feature_group[fi]];
            else if (st->kind != SL_WH_STREAM_LENGTHS)
                expect = st->value_count; /* checked against the lengths when read */
            break;
        default:
            BAD("unknown stream kind %u", st->kind);
        }
        *slot = wh_slot_feature(f, (uint32_t)fi, role);
        break;
    }
    }
    if (st->value_count != expect)
        BAD("%llu values, expected %llu", (unsigned long long)st->value_count,
            (unsigned long long)expect);
    return SL_OK;
}

/* Codec, encoding and sizes of one stream. */
static sl_err_t check_stream_sizes(wh_file_t *f, uint32_t s, const wh_stream_t *st, sl_error_t *err)
{
    char lb[SL_WH_NAME_MAX + 40];
    const char *name = f->src.name;
    if (st->kind < 1 || st->kind >= SL_WH_STREAM_KINDS) BAD("unknown stream kind %u", st->kind);
    if (st->codec != SLUICE__CODEC__CODEC_NONE && st->codec != SLUICE__CODEC__CODEC_ZSTD)
        BAD("unknown codec %u", st->codec);
    uint32_t nat = wh_kind_width(st->kind), w = nat;
    if (st->value_count > f->limits.max_stripe_bytes / 8 || st->value_count > (1ull << 40))
        BAD("%llu values exceed the limit", (unsigned long long)st->value_count);
    uint64_t n = st->value_count, raw;
    bool v2 = st->encoding == SLUICE__ENCODING__ENCODING_BITPACK ||
              st->encoding == SLUICE__ENCODING__ENCODING_DELTA ||
              st->encoding == SLUICE__ENCODING__ENCODING_DICT;
    if (v2 && f->version < 2) BAD("encoding %u in a version %u file", st->encoding, f->version);
    if (st->encoding == SLUICE__ENCODING__ENCODING_FOR) {
        if (!wh_kind_is_int(st->kind)) BAD("frame-of-reference encoding on a float stream");
        w = st->for_width;
        if (!(w == 0 || w == 1 || w == 2 || w == 4) || w > nat) BAD("delta width %u", w);
        raw = n * w;
    } else if (st->encoding == SLUICE__ENCODING__ENCODING_PLAIN) {
        raw = st->kind == SL_WH_STREAM_PRESENT ? (n + 7) / 8 : n * w;
    } else if (st->encoding == SLUICE__ENCODING__ENCODING_BITPACK) {
        if (!wh_kind_is_int(st->kind)) BAD("bit-packed encoding on a float stream");
        if (st->bit_width > 8 * nat) BAD("bit width %u", st->bit_width);
        raw = wh_packed_bytes(n, st->bit_width);
    } else if (st->encoding == SLUICE__ENCODING__ENCODING_DELTA) {
        if (!wh_kind_is_int(st->kind) || nat != 8) BAD("delta encoding on a %u-byte kind", nat);
        if (st->bit_width > 64) BAD("bit width %u", st->bit_width);
        raw = n > 0 ? wh_packed_bytes(n - 1, st->bit_width) : 0;
    } else if (st->encoding == SLUICE__ENCODING__ENCODING_DICT) {
        if (st->kind == SL_WH_STREAM_PRESENT) BAD("dictionary encoding on a bitmap");
        uint64_t K = st->dict_size;
        if (n == 0 ? (K != 0 || st->dict_bytes != 0) : (K == 0 || K > n))
            BAD("%llu dictionary values for %llu values", (unsigned long long)K,
                (unsigned long long)n);
        if (K > (1ull << 32)) BAD("dictionary of %llu values", (unsigned long long)K);
        /* the exact width, or wider (whole bytes, which zstd's matches
         * find repeats in), up to 32 */
        if (st->bit_width < (K > 1 ? wh_bits_for(K - 1) : 0) || st->bit_width > 32)
            BAD("bit width %u for a dictionary of %llu values", st->bit_width,
                (unsigned long long)K);
        /* each block: a width byte and at most WH_DICT_BLOCK 8-byte gaps */
        uint64_t blocks = K > 1 ? (K - 1 + WH_DICT_BLOCK - 1) / WH_DICT_BLOCK : 0;
        if (st->dict_bytes > blocks * (1 + 8 * WH_DICT_BLOCK))
            BAD("dictionary of %llu bytes for %llu values", (unsigned long long)st->dict_bytes,
                (unsigned long long)K);
        if (!wh_kind_is_int(st->kind) && (st->for_base < 0 || st->for_base > (int64_t)UINT32_MAX))
            BAD("dictionary of 32-bit values starts at %lld", (long long)st->for_base);
        raw = st->dict_bytes + wh_packed_bytes(n, st->bit_width);
    } else {
        BAD("unknown encoding %u", st->encoding);
    }
    if (st->raw_size != raw)
        BAD("%llu raw bytes for %llu values (encoding %u, width %u)",
            (unsigned long long)st->raw_size, (unsigned long long)n, st->encoding,
            st->encoding == SLUICE__ENCODING__ENCODING_FOR ? w : st->bit_width);
    if (st->codec == SLUICE__CODEC__CODEC_NONE && st->stored_size != st->raw_size)
        BAD("stored %llu bytes, raw %llu bytes, codec none", (unsigned long long)st->stored_size,
            (unsigned long long)st->raw_size);
    return SL_OK;
#undef BAD
}

sl_err_t wh_file_check_stripes(wh_file_t *f, sl_error_t *err)
{
    const char *name = f->src.name;
    const Sluice__FileFooter *ft = f->footer;
    const sl_wh_limits_t *lim = &f->limits;
    if (ft->n_stripes > lim->max_stripes)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s: footer: %zu stripes exceed the limit %u",
                            name, ft->n_stripes, lim->max_stripes);
    uint32_t T = sl_wh_schema_num_labels(f->schema), F = sl_wh_schema_num_features(f->schema);
    /* Every stripe holds at least the required streams of every column, so
     * the slot table is at most ~3x the number of streams in the footer. */
    uint64_t required = 3 + (uint64_t)T + F + f->num_groups;
    uint64_t total = 0;
    for (size_t s = 0; s < ft->n_stripes; s++) {
        const Sluice__StripeInfo *si = ft->stripes[s];
        if (si->n_streams > lim->max_streams)
            return sl_error_set(err, SL_ERR_TOO_LARGE,
                                "%s stripe %zu: %zu streams exceed the limit %u", name, s,
                                si->n_streams, lim->max_streams);
        if (si->n_streams < required)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "%s stripe %zu: %zu streams, the schema needs at least %llu", name,
                                s, si->n_streams, (unsigned long long)required);
        total += si->n_streams;
    }
    if (total > UINT32_MAX / 4)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "%s: %llu streams", name,
                            (unsigned long long)total);
    f->num_slots = (uint32_t)(3 + T + 3 * (uint64_t)F + f->num_groups);
    f->num_stripes = (uint32_t)ft->n_stripes;
    f->num_streams = (uint32_t)total;
    size_t nslots = (size_t)f->num_stripes * f->num_slots;
    f->stripes = sl_calloc(f->a, f->num_stripes, sizeof *f->stripes);
    f->streams = sl_calloc(f->a, total, sizeof *f->streams);
    f->slots = sl_alloc(f->a, sl_mul_size(nslots, sizeof(int32_t)));
    f->unique_rows_n = (size_t)f->num_stripes * f->num_groups + 1;
    f->unique_rows = sl_calloc(f->a, f->unique_rows_n, sizeof(uint32_t));
    if ((f->num_stripes && f->stripes == NULL) || (total && f->streams == NULL) ||
        (nslots && f->slots == NULL) || f->unique_rows == NULL)
        return sl_error_set(err, SL_ERR_NOMEM, "%s: stream index", name);
    if (nslots) memset(f->slots, 0xff, nslots * sizeof(int32_t));

    uint64_t at = WH_HEADER_BYTES, rows = 0;
    uint32_t si_at = 0;
    for (uint32_t s = 0; s < f->num_stripes; s++) {
        const Sluice__StripeInfo *si = ft->stripes[s];
        wh_stripe_t *sp = &f->stripes[s];
        if (si->row_count == 0 || si->row_count > lim->max_stripe_rows)
            return sl_error_set(err, si->row_count ? SL_ERR_TOO_LARGE : SL_ERR_CORRUPT,
                                "%s stripe %u: %u rows (limit %u)", name, s, si->row_count,
                                lim->max_stripe_rows);
        if (si->first_row != rows)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "%s stripe %u: first row %llu, the stripes before hold %llu rows",
                                name, s, (unsigned long long)si->first_row,
                                (unsigned long long)rows);
        if (si->offset != at || si->length > f->footer_offset - at)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "%s stripe %u: bytes [%llu, +%llu) are not the next ones of the "
                                "data area [%llu, %llu)",
                                name, s, (unsigned long long)si->offset,
                                (unsigned long long)si->length, (unsigned long long)at,
                                (unsigned long long)f->footer_offset);
        if (si->n_group_unique_rows != f->num_groups)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "%s stripe %u: %zu unique row counts for %u groups", name, s,
                                si->n_group_unique_rows, f->num_groups);
        sp->first_row = rows;
        sp->rows = si->row_count;
        sp->offset = si->offset;
        sp->length = si->length;
        sp->first_stream = si_at;
        sp->num_streams = (uint32_t)si->n_streams;
        sp->unique_rows = f->unique_rows + (size_t)s * f->num_groups;
        for (uint32_t g = 0; g < f->num_groups; g++) {
            uint32_t u = si->group_unique_rows[g];
            if (u == 0 || u > sp->rows)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s stripe %u: group '%s' has %u unique rows of %u", name, s,
                                    f->groups[g].spec.name, u, sp->rows);
            sp->unique_rows[g] = u;
        }
        uint64_t sat = si->offset, end = si->offset + si->length;
        int32_t *slots = f->slots + (size_t)s * f->num_slots;
        for (size_t k = 0; k < si->n_streams; k++) {
            const Sluice__StreamInfo *in = si->streams[k];
            wh_stream_t *st = &f->streams[si_at + k];
            st->kind = in->kind < 256 ? (uint8_t)in->kind : 255;
            st->codec = in->codec < 256 ? (uint8_t)in->codec : 255;
            st->encoding = in->encoding < 256 ? (uint8_t)in->encoding : 255;
            st->for_width = in->for_width < 256 ? (uint8_t)in->for_width : 255;
            st->for_base = in->for_base;
            st->bit_width = in->bit_width < 256 ? (uint8_t)in->bit_width : 255;
            st->delta_base = in->delta_base;
            st->dict_size = in->dict_size;
            st->dict_bytes = in->dict_bytes;
            st->offset = in->offset;
            st->stored_size = in->stored_size;
            st->raw_size = in->raw_size;
            st->value_count = in->value_count;
            st->checksum = in->checksum;
            st->name = in->name;
            SL_FORWARD_IF_ERROR(check_stream_sizes(f, s, st, err));
            if (st->offset != sat || st->stored_size > end - sat) {
                char lb[SL_WH_NAME_MAX + 40];
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s stripe %u %s: bytes [%llu, +%llu) are not the next ones "
                                    "of the stripe [%llu, %llu)",
                                    name, s, wh_stream_label(st, lb, sizeof lb),
                                    (unsigned long long)st->offset,
                                    (unsigned long long)st->stored_size, (unsigned long long)sat,
                                    (unsigned long long)end);
            }
            sat += st->stored_size;
            uint32_t slot = 0;
            SL_FORWARD_IF_ERROR(stream_slot(f, s, sp, st, &slot, err));
            if (slots[slot] >= 0) {
                char lb[SL_WH_NAME_MAX + 40];
                return sl_error_set(err, SL_ERR_CORRUPT, "%s stripe %u %s: appears twice", name, s,
                                    wh_stream_label(st, lb, sizeof lb));
            }
            slots[slot] = (int32_t)(si_at + k);
        }
        if (sat != end)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "%s stripe %u: streams end at %llu, the stripe at %llu", name, s,
                                (unsigned long long)sat, (unsigned long long)end);
        /* Every column the schema promises is there. */
        static const char *const colnames[3] = {"sample id", "session id", "timestamp"};
        for (uint32_t c = 0; c < 3; c++)
            if (slots[c] < 0)
                return sl_error_set(err, SL_ERR_CORRUPT, "%s stripe %u: no %s stream", name, s,
                                    colnames[c]);
        for (uint32_t t = 0; t < T; t++)
            if (slots[wh_slot_label(f, t)] < 0)
                return sl_error_set(err, SL_ERR_CORRUPT, "%s stripe %u: no stream for label '%s'",
                                    name, s, sl_wh_schema_label(f->schema, t));
        for (uint32_t fi = 0; fi < F; fi++) {
            const sl_wh_feature_t *fe = sl_wh_schema_feature(f->schema, fi);
            int32_t a0 = slots[wh_slot_feature(f, fi, 0)], a1 = slots[wh_slot_feature(f, fi, 1)],
                    a2 = slots[wh_slot_feature(f, fi, 2)];
            bool ok = fe->kind == SL_WH_DENSE ? a0 >= 0 : (a0 >= 0 && a1 >= 0);
            if (fe->kind == SL_WH_WEIGHTED) ok = ok && a2 >= 0;
            if (!ok)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s stripe %u: feature '%s' lacks a stream", name, s, fe->name);
            if (fe->kind == SL_WH_DENSE && a1 < 0 && f->streams[a0].value_count != sp->rows)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s stripe %u stream '%s' values: %llu values for %u rows and "
                                    "no present bitmap",
                                    name, s, fe->name,
                                    (unsigned long long)f->streams[a0].value_count, sp->rows);
            if (fe->kind == SL_WH_WEIGHTED &&
                f->streams[a1].value_count != f->streams[a2].value_count)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s stripe %u stream '%s' weights: %llu weights for %llu ids",
                                    name, s, fe->name,
                                    (unsigned long long)f->streams[a2].value_count,
                                    (unsigned long long)f->streams[a1].value_count);
        }
        for (uint32_t g = 0; g < f->num_groups; g++)
            if (slots[wh_slot_inverse(f, g)] < 0)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "%s stripe %u: no inverse stream for dedup group '%s'", name, s,
                                    f->groups[g].spec.name);
        at += si->length;
        rows += si->row_count;
        si_at += (uint32_t)si->n_streams;
    }
    if (at != f->footer_offset)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "%s: the stripes end at byte %llu but the footer starts at %llu", name,
                            (unsigned long long)at, (unsigned long long)f->footer_offset);
    if (rows != ft->row_count)
        return sl_error_set(err, SL_ERR_CORRUPT, "%s: footer says %llu rows, the stripes hold %llu",
                            name, (unsigned long long)ft->row_count, (unsigned long long)rows);
    f->rows = rows;
    return SL_OK;
}

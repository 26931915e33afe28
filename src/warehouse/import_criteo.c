/* The Criteo click-log TSV importer's line parser and schema.
 *
 * A line is: label, I1..I13 (integers, empty = missing), C1..C26 (hex ids of
 * at most 16 digits, empty = empty list), separated by tabs. Lines may stop
 * early (the missing trailing fields are missing / empty) but may not have
 * more than 40 fields. The parser works on the line in place: no copies, no
 * allocation, so the import is bound by reading and encoding. */
#include "import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sl_wh_schema_t *sl_wh_criteo_schema(const sl_allocator_t *a)
{
    sl_wh_schema_t *s = sl_wh_schema_new(a);
    if (s == NULL) return NULL;
    char name[8];
    sl_err_t rc = sl_wh_schema_add_label(s, "label", NULL);
    for (int i = 1; rc == SL_OK && i <= CRITEO_DENSE; i++) {
        snprintf(name, sizeof name, "I%d", i);
        rc = sl_wh_schema_add_feature(s, name, SL_WH_DENSE, NULL);
    }
    for (int i = 1; rc == SL_OK && i <= CRITEO_SPARSE; i++) {
        snprintf(name, sizeof name, "C%d", i);
        rc = sl_wh_schema_add_feature(s, name, SL_WH_SPARSE, NULL);
    }
    if (rc != SL_OK) {
        sl_wh_schema_destroy(s);
        return NULL;
    }
    return s;
}

/* "label", "I4", "C17" for field index f (0-based). */
static void field_name(uint32_t f, char *buf, size_t cap)
{
    if (f == 0)
        snprintf(buf, cap, "label");
    else if (f <= CRITEO_DENSE)
        snprintf(buf, cap, "I%u", f);
    else
        snprintf(buf, cap, "C%u", f - CRITEO_DENSE);
}

static sl_err_t field_error(sl_error_t *err, uint32_t f, const char *what, const char *text,
                            size_t len)
{
    char name[8], ex[48];
    field_name(f, name, sizeof name);
    return sl_error_set(err, SL_ERR_CORRUPT, "field %u (%s): %s '%s'", f + 1, name, what,
                        imp_excerpt(text, len, ex, sizeof ex));
}

/* The label: an integer, or a decimal number such as "0.5" (some exports
 * write probabilities). */
static bool parse_label(const char *s, size_t len, float *out)
{
    int64_t v;
    if (imp_parse_i64(s, len, &v)) {
        *out = (float)v;
        return true;
    }
    char buf[64];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    float f = strtof(buf, &end);
    if (*end != '\0' || !isfinite(f)) return false;
    *out = f;
    return true;
}

/* Hex digit values, 0x10 for anything else: a table instead of branches,
 * which random ids would mispredict (parsing ids dominated the import). */
static const uint8_t hex_value[256] = {
    ['0'] = 0,  ['1'] = 1,  ['2'] = 2,  ['3'] = 3,  ['4'] = 4,  ['5'] = 5,  ['6'] = 6,  ['7'] = 7,
    ['8'] = 8,  ['9'] = 9,  ['a'] = 10, ['b'] = 11, ['c'] = 12, ['d'] = 13, ['e'] = 14, ['f'] = 15,
    ['A'] = 10, ['B'] = 11, ['C'] = 12, ['D'] = 13, ['E'] = 14, ['F'] = 15};

static bool is_hex(unsigned char c)
{
    return hex_value[c] != 0 || c == '0';
}

/* 1..16 significant hex digits (leading zeros are free), value < 2^63 so
 * that it is a valid int64 id. @return 0 ok, -1 not hex, -2 out of range. */
static int parse_hex(const char *s, size_t len, int64_t *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len && p[i] == '0')
        i++;
    if (len - i > 16) {
        for (size_t k = i; k < len; k++)
            if (!is_hex(p[k])) return -1;
        return -2;
    }
    uint64_t v = 0;
    bool ok = true;
    for (; i < len; i++) {
        ok &= is_hex(p[i]);
        v = v << 4 | hex_value[p[i]];
    }
    if (!ok) return -1;
    if (v > (uint64_t)INT64_MAX) return -2;
    *out = (int64_t)v;
    return 0;
}

sl_err_t sl_wh_criteo_parse_line(sl_wh_row_buf_t *b, const char *line, size_t len, sl_wh_row_t *row,
                                 sl_error_t *err)
{
    if (b->T != 1 || b->D != CRITEO_DENSE || b->S != CRITEO_SPARSE)
        return sl_error_set(err, SL_ERR_INVALID,
                            "criteo parser: the buffer's schema is not the "
                            "Criteo schema");
    if (len > 0 && line[len - 1] == '\r') len--;
    for (uint32_t i = 0; i < CRITEO_DENSE; i++)
        b->dense[i] = NAN;
    for (uint32_t i = 0; i < CRITEO_SPARSE; i++)
        b->lists[i].len = 0;

    const char *p = line, *end = line + len;
    uint32_t f = 0;
    for (;; f++) {
        const char *tab = memchr(p, '\t', (size_t)(end - p));
        const char *fe = tab != NULL ? tab : end;
        size_t flen = (size_t)(fe - p);
        if (f >= CRITEO_FIELDS)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "wrong field count: more than %d tab-separated fields",
                                CRITEO_FIELDS);
        if (f == 0) {
            if (flen == 0) return sl_error_set(err, SL_ERR_CORRUPT, "field 1 (label): missing");
            if (!parse_label(p, flen, &b->labels[0]))
                return field_error(err, f, "unparsable number", p, flen);
        } else if (f <= CRITEO_DENSE) {
            if (flen > 0) {
                int64_t v;
                if (!imp_parse_i64(p, flen, &v))
                    return field_error(err, f, "unparsable number", p, flen);
                /* float32 holds integers exactly up to 2^24; Criteo's largest
                 * values (~2.3e7) round by less than one part in 1e7. */
                b->dense[f - 1] = (float)v;
            }
        } else if (flen > 0) {
            uint32_t s = f - 1 - CRITEO_DENSE;
            int rc = parse_hex(p, flen, &b->ids[s][0]);
            if (rc == -1) return field_error(err, f, "not a hexadecimal id", p, flen);
            if (rc == -2) return field_error(err, f, "id out of range (max 2^63-1)", p, flen);
            b->lists[s].len = 1;
        }
        if (tab == NULL) break;
        p = tab + 1;
    }
    row->sample_id = 0;
    row->session_id = 0;
    row->timestamp = 0;
    row->labels = b->labels;
    row->dense = b->dense;
    row->sparse = b->lists;
    return SL_OK;
}

/* The Thrift compact protocol reader (thrift.h). */
#include "thrift.h"
#include "common/err.h"

#include <string.h>

static const char *type_name(uint8_t type)
{
    static const char *const names[] = {"stop",   "bool",   "bool", "byte", "i16", "i32",   "i64",
                                        "double", "binary", "list", "set",  "map", "struct"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown type";
}

void sl_pq_thrift_init(sl_pq_thrift_t *t, const void *buf, size_t len, sl_error_t *err)
{
    t->p = buf;
    t->end = t->p + len;
    t->depth = 0;
    t->where = "struct";
    t->err = err;
}

bool sl_pq_uvarint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    const uint8_t *q = *p;
    for (int shift = 0; shift < 70; shift += 7) {
        if (q >= end) return false;
        uint8_t b = *q++;
        if (shift == 63 && b > 1) return false; /* more than 64 bits */
        x |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *p = q;
            *v = x;
            return true;
        }
    }
    return false;
}

static sl_err_t truncated(sl_pq_thrift_t *t, const char *what)
{
    return sl_error_set(t->err, SL_ERR_TRUNCATED, "thrift %s: %s runs past the end of its buffer",
                        t->where, what);
}

static sl_err_t varint(sl_pq_thrift_t *t, uint64_t *v, const char *what)
{
    if (!sl_pq_uvarint(&t->p, t->end, v)) {
        if (t->p < t->end && t->end - t->p >= 10)
            return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: %s is a varint over 64 bits",
                                t->where, what);
        return truncated(t, what);
    }
    return SL_OK;
}

sl_err_t sl_pq_thrift_struct_begin(sl_pq_thrift_t *t, uint8_t type, const char *name)
{
    if (type != SL_PQ_T_STRUCT)
        return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: %s is a %s, not a struct", t->where,
                            name, type_name(type));
    if (++t->depth > SL_PQ_THRIFT_MAX_DEPTH)
        return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: structs nested over %d deep",
                            t->where, SL_PQ_THRIFT_MAX_DEPTH);
    t->where = name;
    return SL_OK;
}

void sl_pq_thrift_struct_end(sl_pq_thrift_t *t, const char *outer)
{
    t->depth--;
    t->where = outer;
}

sl_err_t sl_pq_thrift_field(sl_pq_thrift_t *t, int16_t *last, int16_t *id, uint8_t *type)
{
    if (t->p >= t->end) return truncated(t, "a field header");
    uint8_t b = *t->p++;
    *type = b & 0x0f;
    if (*type == SL_PQ_T_STOP) {
        *id = 0;
        return SL_OK;
    }
    if (*type > SL_PQ_T_STRUCT)
        return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: field type %u after field %d",
                            t->where, *type, *last);
    uint8_t delta = b >> 4;
    if (delta != 0) {
        *id = (int16_t)(*last + delta);
    } else {
        uint64_t v;
        SL_FORWARD_IF_ERROR(varint(t, &v, "a field id"));
        int64_t s = sl_pq_unzigzag(v);
        if (s < INT16_MIN || s > INT16_MAX)
            return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: field id %lld out of range",
                                t->where, (long long)s);
        *id = (int16_t)s;
    }
    *last = *id;
    return SL_OK;
}

static sl_err_t wrong_type(sl_pq_thrift_t *t, uint8_t type, int16_t id, const char *want)
{
    return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s field %d: expected %s, found %s",
                        t->where, id, want, type_name(type));
}

sl_err_t sl_pq_thrift_i64(sl_pq_thrift_t *t, uint8_t type, int16_t id, int64_t *v)
{
    if (type == SL_PQ_T_BYTE) {
        if (t->p >= t->end) return truncated(t, "a byte");
        *v = (int8_t)*t->p++;
        return SL_OK;
    }
    if (type != SL_PQ_T_I16 && type != SL_PQ_T_I32 && type != SL_PQ_T_I64)
        return wrong_type(t, type, id, "an integer");
    uint64_t u;
    SL_FORWARD_IF_ERROR(varint(t, &u, "an integer"));
    *v = sl_pq_unzigzag(u);
    return SL_OK;
}

sl_err_t sl_pq_thrift_i32(sl_pq_thrift_t *t, uint8_t type, int16_t id, int32_t *v)
{
    int64_t x;
    SL_FORWARD_IF_ERROR(sl_pq_thrift_i64(t, type, id, &x));
    if (x < INT32_MIN || x > INT32_MAX)
        return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s field %d: %lld is not an i32",
                            t->where, id, (long long)x);
    *v = (int32_t)x;
    return SL_OK;
}

sl_err_t sl_pq_thrift_bool(sl_pq_thrift_t *t, uint8_t type, int16_t id, bool *v)
{
    if (type != SL_PQ_T_TRUE && type != SL_PQ_T_FALSE) return wrong_type(t, type, id, "a bool");
    *v = type == SL_PQ_T_TRUE;
    return SL_OK;
}

sl_err_t sl_pq_thrift_binary(sl_pq_thrift_t *t, uint8_t type, int16_t id, const uint8_t **p,
                             uint32_t *len)
{
    if (type != SL_PQ_T_BINARY) return wrong_type(t, type, id, "binary");
    uint64_t n;
    SL_FORWARD_IF_ERROR(varint(t, &n, "a binary's length"));
    if (n > (uint64_t)(t->end - t->p))
        return sl_error_set(t->err, SL_ERR_TRUNCATED,
                            "thrift %s field %d: binary of %llu bytes, %zu left", t->where, id,
                            (unsigned long long)n, (size_t)(t->end - t->p));
    *p = t->p;
    *len = (uint32_t)n;
    t->p += n;
    return SL_OK;
}

sl_err_t sl_pq_thrift_list(sl_pq_thrift_t *t, uint8_t type, int16_t id, uint8_t *elem, uint32_t *n)
{
    if (type != SL_PQ_T_LIST && type != SL_PQ_T_SET) return wrong_type(t, type, id, "a list");
    if (t->p >= t->end) return truncated(t, "a list header");
    uint8_t b = *t->p++;
    uint64_t count = b >> 4;
    *elem = b & 0x0f;
    if (count == 15) {
        SL_FORWARD_IF_ERROR(varint(t, &count, "a list's size"));
    }
    if (*elem > SL_PQ_T_STRUCT || (*elem == SL_PQ_T_STOP && count > 0))
        return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s field %d: list of type %u", t->where,
                            id, *elem);
    /* every element takes at least one byte (a struct: its stop byte) */
    if (count > (uint64_t)(t->end - t->p))
        return sl_error_set(t->err, SL_ERR_TRUNCATED,
                            "thrift %s field %d: list of %llu elements, %zu bytes left", t->where,
                            id, (unsigned long long)count, (size_t)(t->end - t->p));
    *n = (uint32_t)count;
    return SL_OK;
}

/* Skip one element of a collection: bools there are a byte each. */
static sl_err_t skip_elem(sl_pq_thrift_t *t, uint8_t type)
{
    if (type == SL_PQ_T_TRUE || type == SL_PQ_T_FALSE) {
        if (t->p >= t->end) return truncated(t, "a bool");
        t->p++;
        return SL_OK;
    }
    return sl_pq_thrift_skip(t, type);
}

sl_err_t sl_pq_thrift_skip(sl_pq_thrift_t *t, uint8_t type)
{
    uint64_t u;
    int64_t i;
    const uint8_t *p;
    uint32_t len, n;
    uint8_t elem;
    sl_err_t rc;
    switch (type) {
    case SL_PQ_T_TRUE:
    case SL_PQ_T_FALSE:
        return SL_OK;
    case SL_PQ_T_BYTE:
        return sl_pq_thrift_i64(t, type, 0, &i);
    case SL_PQ_T_I16:
    case SL_PQ_T_I32:
    case SL_PQ_T_I64:
        return varint(t, &u, "an integer");
    case SL_PQ_T_DOUBLE:
        if (t->end - t->p < 8) return truncated(t, "a double");
        t->p += 8;
        return SL_OK;
    case SL_PQ_T_BINARY:
        return sl_pq_thrift_binary(t, type, 0, &p, &len);
    case SL_PQ_T_LIST:
    case SL_PQ_T_SET:
        if ((rc = sl_pq_thrift_list(t, type, 0, &elem, &n)) != SL_OK) return rc;
        if (++t->depth > SL_PQ_THRIFT_MAX_DEPTH)
            return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: values nested over %d deep",
                                t->where, SL_PQ_THRIFT_MAX_DEPTH);
        for (uint32_t k = 0; k < n; k++)
            if ((rc = skip_elem(t, elem)) != SL_OK) return rc;
        t->depth--;
        return SL_OK;
    case SL_PQ_T_MAP: {
        if ((rc = varint(t, &u, "a map's size")) != SL_OK) return rc;
        if (u == 0) return SL_OK;
        if (t->p >= t->end) return truncated(t, "a map's types");
        uint8_t kv = *t->p++;
        if (u > (uint64_t)(t->end - t->p))
            return sl_error_set(t->err, SL_ERR_TRUNCATED, "thrift %s: map of %llu entries",
                                t->where, (unsigned long long)u);
        uint8_t kt = kv >> 4, vt = kv & 0x0f;
        if (kt == SL_PQ_T_STOP || kt > SL_PQ_T_STRUCT || vt == SL_PQ_T_STOP || vt > SL_PQ_T_STRUCT)
            return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: map of types %u/%u", t->where,
                                kt, vt);
        if (++t->depth > SL_PQ_THRIFT_MAX_DEPTH)
            return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: values nested over %d deep",
                                t->where, SL_PQ_THRIFT_MAX_DEPTH);
        for (uint64_t k = 0; k < u; k++)
            if ((rc = skip_elem(t, kt)) != SL_OK || (rc = skip_elem(t, vt)) != SL_OK) return rc;
        t->depth--;
        return SL_OK;
    }
    case SL_PQ_T_STRUCT: {
        if (++t->depth > SL_PQ_THRIFT_MAX_DEPTH)
            return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: structs nested over %d deep",
                                t->where, SL_PQ_THRIFT_MAX_DEPTH);
        int16_t last = 0, id;
        uint8_t ft;
        for (;;) {
            if ((rc = sl_pq_thrift_field(t, &last, &id, &ft)) != SL_OK) return rc;
            if (ft == SL_PQ_T_STOP) break;
            if ((rc = sl_pq_thrift_skip(t, ft)) != SL_OK) return rc;
        }
        t->depth--;
        return SL_OK;
    }
    default:
        return sl_error_set(t->err, SL_ERR_CORRUPT, "thrift %s: cannot skip type %u", t->where,
                            type);
    }
}

/* The Parquet footer (parquet.h): the magic at both ends, the footer
 * length, FileMetaData decoded from the Thrift compact protocol, and the
 * schema tree turned into leaf columns with their definition and
 * repetition levels and list layout. Everything decoded lives in one arena
 * owned by the file (its lifetime is the file's). */
#include <inttypes.h>
#include <string.h>

#include "common/fileio.h"
#include "common/mem.h"
#include "parquet.h"
#include "parquet_internal.h"
#include "thrift.h"

struct sl_pq_meta_mem {
    const sl_allocator_t *a;
    sl_arena_t *arena;
    sl_pq_meta_t meta;
};

/* Deepest schema tree accepted (the levels of one leaf fit in int16). */
#define MAX_SCHEMA_DEPTH 64

const char *sl_pq_type_name(int type)
{
    static const char *const n[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                    "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return type >= 0 && type < 8 ? n[type] : type == -1 ? "group" : "unknown type";
}

const char *sl_pq_encoding_name(int e)
{
    static const char *const n[] = {
        "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
        "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
        "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return e >= 0 && e < 10 ? n[e] : "unknown encoding";
}

const char *sl_pq_codec_name(int c)
{
    static const char *const n[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                    "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
    return c >= 0 && c < 8 ? n[c] : "unknown codec";
}

/* ---- struct decoders ---- */

typedef struct dec {
    sl_pq_thrift_t t;
    sl_arena_t *arena;
} dec_t;

#define TRY(x)                                                                                     \
    do {                                                                                           \
        sl_err_t rc_ = (x);                                                                        \
        if (rc_ != SL_OK) return rc_;                                                              \
    } while (0)

static sl_err_t nomem(dec_t *d)
{
    return sl_error_set(d->t.err, SL_ERR_NOMEM, "out of memory decoding %s", d->t.where);
}

static sl_err_t str_field(dec_t *d, uint8_t type, int16_t id, const char **out)
{
    const uint8_t *p;
    uint32_t len;
    TRY(sl_pq_thrift_binary(&d->t, type, id, &p, &len));
    char *s = sl_arena_alloc(d->arena, (size_t)len + 1);
    if (s == NULL) return nomem(d);
    memcpy(s, p, len);
    s[len] = '\0';
    *out = s;
    return SL_OK;
}

static sl_err_t bin_field(dec_t *d, uint8_t type, int16_t id, const uint8_t **out, uint32_t *len)
{
    const uint8_t *p;
    TRY(sl_pq_thrift_binary(&d->t, type, id, &p, len));
    uint8_t *s = sl_arena_alloc(d->arena, *len ? *len : 1);
    if (s == NULL) return nomem(d);
    memcpy(s, p, *len);
    *out = s;
    return SL_OK;
}

/* A list of structs: *n elements of size bytes each, zeroed, from the
 * arena; each decoded by fn. */
static sl_err_t struct_list(dec_t *d, uint8_t type, int16_t id, size_t size, void **out,
                            uint32_t *n, sl_err_t (*fn)(dec_t *, uint8_t, void *))
{
    uint8_t elem;
    TRY(sl_pq_thrift_list(&d->t, type, id, &elem, n));
    if (*n > 0 && elem != SL_PQ_T_STRUCT)
        return sl_error_set(d->t.err, SL_ERR_CORRUPT,
                            "thrift %s field %d: expected a list of structs", d->t.where, id);
    uint8_t *arr = sl_arena_calloc(d->arena, *n ? *n : 1, size);
    if (arr == NULL) return nomem(d);
    for (uint32_t i = 0; i < *n; i++)
        TRY(fn(d, elem, arr + (size_t)i * size));
    *out = arr;
    return SL_OK;
}

static sl_err_t dec_time_unit(dec_t *d, uint8_t type, int32_t *unit)
{
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "TimeUnit"));
    int16_t last = 0, id;
    uint8_t ft;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        if (id >= 1 && id <= 3) *unit = id; /* MILLIS, MICROS, NANOS */
        TRY(sl_pq_thrift_skip(&d->t, ft));
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    return SL_OK;
}

static sl_err_t dec_logical(dec_t *d, uint8_t type, sl_pq_schema_elem_t *e)
{
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "LogicalType"));
    int16_t last = 0, id;
    uint8_t ft;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        e->logical = id;
        if (id == SL_PQ_LT_TIMESTAMP || id == SL_PQ_LT_TIME || id == SL_PQ_LT_INTEGER) {
            const char *o2 = d->t.where;
            TRY(sl_pq_thrift_struct_begin(&d->t, ft,
                                          id == SL_PQ_LT_INTEGER ? "IntType" : "TimestampType"));
            int16_t l2 = 0, id2;
            uint8_t t2;
            for (;;) {
                TRY(sl_pq_thrift_field(&d->t, &l2, &id2, &t2));
                if (t2 == SL_PQ_T_STOP) break;
                if (id == SL_PQ_LT_INTEGER && id2 == 1) {
                    TRY(sl_pq_thrift_i32(&d->t, t2, id2, &e->int_bits));
                } else if (id == SL_PQ_LT_INTEGER && id2 == 2) {
                    TRY(sl_pq_thrift_bool(&d->t, t2, id2, &e->int_signed));
                } else if (id != SL_PQ_LT_INTEGER && id2 == 1) {
                    TRY(sl_pq_thrift_bool(&d->t, t2, id2, &e->utc));
                } else if (id != SL_PQ_LT_INTEGER && id2 == 2) {
                    TRY(dec_time_unit(d, t2, &e->time_unit));
                } else {
                    TRY(sl_pq_thrift_skip(&d->t, t2));
                }
            }
            sl_pq_thrift_struct_end(&d->t, o2);
        } else {
            TRY(sl_pq_thrift_skip(&d->t, ft));
        }
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    return SL_OK;
}

static sl_err_t dec_schema_elem(dec_t *d, uint8_t type, void *out)
{
    sl_pq_schema_elem_t *e = out;
    e->type = -1;
    e->converted_type = SL_PQ_CT_NONE;
    e->name = "";
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "SchemaElement"));
    int16_t last = 0, id;
    uint8_t ft;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        switch (id) {
        case 1:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &e->type));
            break;
        case 2:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &e->type_length));
            break;
        case 3:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &e->repetition));
            break;
        case 4:
            TRY(str_field(d, ft, id, &e->name));
            break;
        case 5:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &e->num_children));
            break;
        case 6:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &e->converted_type));
            break;
        case 10:
            TRY(dec_logical(d, ft, e));
            break;
        default:
            TRY(sl_pq_thrift_skip(&d->t, ft));
        }
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    return SL_OK;
}

static sl_err_t dec_stats(dec_t *d, uint8_t type, sl_pq_stats_t *s)
{
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "Statistics"));
    int16_t last = 0, id;
    uint8_t ft;
    const uint8_t *lmin = NULL, *lmax = NULL;
    uint32_t lmin_len = 0, lmax_len = 0;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        switch (id) {
        case 1:
            TRY(bin_field(d, ft, id, &lmax, &lmax_len));
            break;
        case 2:
            TRY(bin_field(d, ft, id, &lmin, &lmin_len));
            break;
        case 3:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &s->null_count));
            s->has_null_count = true;
            break;
        case 5:
            TRY(bin_field(d, ft, id, &s->max, &s->max_len));
            s->has_max = true;
            break;
        case 6:
            TRY(bin_field(d, ft, id, &s->min, &s->min_len));
            s->has_min = true;
            break;
        default:
            TRY(sl_pq_thrift_skip(&d->t, ft));
        }
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    s->exact_order = s->has_min || s->has_max;
    /* the legacy min/max (signed byte order for binaries): used only when
     * the new fields are absent */
    if (!s->has_min && !s->has_max && (lmin != NULL || lmax != NULL)) {
        s->has_min = lmin != NULL;
        s->has_max = lmax != NULL;
        s->min = lmin;
        s->min_len = lmin_len;
        s->max = lmax;
        s->max_len = lmax_len;
    }
    return SL_OK;
}

static sl_err_t dec_column_meta(dec_t *d, uint8_t type, sl_pq_chunk_t *c)
{
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "ColumnMetaData"));
    int16_t last = 0, id;
    uint8_t ft, elem;
    uint32_t n;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        switch (id) {
        case 1:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &c->type));
            break;
        case 2:
            TRY(sl_pq_thrift_list(&d->t, ft, id, &elem, &n));
            for (uint32_t i = 0; i < n; i++) {
                int32_t e;
                TRY(sl_pq_thrift_i32(&d->t, elem, id, &e));
                if (e >= 0 && e < 32) c->encodings |= 1u << e;
            }
            break;
        case 3: {
            TRY(sl_pq_thrift_list(&d->t, ft, id, &elem, &n));
            size_t cap = 1;
            const char **parts = sl_arena_calloc(d->arena, n ? n : 1, sizeof *parts);
            if (parts == NULL) return nomem(d);
            for (uint32_t i = 0; i < n; i++) {
                TRY(str_field(d, elem, id, &parts[i]));
                cap += strlen(parts[i]) + 1;
            }
            char *path = sl_arena_alloc(d->arena, cap);
            if (path == NULL) return nomem(d);
            path[0] = '\0';
            size_t at = 0;
            for (uint32_t i = 0; i < n; i++) {
                size_t l = strlen(parts[i]);
                if (i > 0) path[at++] = '.';
                memcpy(path + at, parts[i], l + 1);
                at += l;
            }
            c->path = path;
            break;
        }
        case 4:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &c->codec));
            break;
        case 5:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &c->num_values));
            break;
        case 6:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &c->total_uncompressed));
            break;
        case 7:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &c->total_compressed));
            break;
        case 9:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &c->data_page_offset));
            break;
        case 11:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &c->dictionary_page_offset));
            break;
        case 12:
            TRY(dec_stats(d, ft, &c->stats));
            c->has_stats = true;
            break;
        default:
            TRY(sl_pq_thrift_skip(&d->t, ft));
        }
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    return SL_OK;
}

static sl_err_t dec_chunk(dec_t *d, uint8_t type, void *out)
{
    sl_pq_chunk_t *c = out;
    c->dictionary_page_offset = -1;
    c->data_page_offset = -1;
    c->path = "";
    bool has_meta = false, external = false;
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "ColumnChunk"));
    int16_t last = 0, id;
    uint8_t ft;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        if (id == 3) {
            TRY(dec_column_meta(d, ft, c));
            has_meta = true;
        } else {
            if (id == 1) external = true;
            TRY(sl_pq_thrift_skip(&d->t, ft));
        }
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    if (external)
        return sl_error_set(d->t.err, SL_ERR_UNSUPPORTED,
                            "column chunk %s: its data is in another file (file_path)", c->path);
    if (!has_meta)
        return sl_error_set(d->t.err, SL_ERR_UNSUPPORTED,
                            "a column chunk without ColumnMetaData (encrypted columns are not "
                            "supported)");
    return SL_OK;
}

static sl_err_t dec_row_group(dec_t *d, uint8_t type, void *out)
{
    sl_pq_row_group_t *g = out;
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "RowGroup"));
    int16_t last = 0, id;
    uint8_t ft;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        switch (id) {
        case 1:
            TRY(struct_list(d, ft, id, sizeof(sl_pq_chunk_t), (void **)&g->chunks, &g->num_chunks,
                            dec_chunk));
            break;
        case 2:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &g->total_byte_size));
            break;
        case 3:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &g->num_rows));
            break;
        default:
            TRY(sl_pq_thrift_skip(&d->t, ft));
        }
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    return SL_OK;
}

static sl_err_t dec_kv(dec_t *d, uint8_t type, void *out)
{
    sl_pq_kv_t *kv = out;
    kv->key = "";
    const char *outer = d->t.where;
    TRY(sl_pq_thrift_struct_begin(&d->t, type, "KeyValue"));
    int16_t last = 0, id;
    uint8_t ft;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        if (id == 1)
            TRY(str_field(d, ft, id, &kv->key));
        else if (id == 2)
            TRY(str_field(d, ft, id, &kv->value));
        else
            TRY(sl_pq_thrift_skip(&d->t, ft));
    }
    sl_pq_thrift_struct_end(&d->t, outer);
    return SL_OK;
}

static sl_err_t dec_file_meta(dec_t *d, sl_pq_meta_t *m)
{
    TRY(sl_pq_thrift_struct_begin(&d->t, SL_PQ_T_STRUCT, "FileMetaData"));
    int16_t last = 0, id;
    uint8_t ft;
    bool has_schema = false;
    for (;;) {
        TRY(sl_pq_thrift_field(&d->t, &last, &id, &ft));
        if (ft == SL_PQ_T_STOP) break;
        switch (id) {
        case 1:
            TRY(sl_pq_thrift_i32(&d->t, ft, id, &m->version));
            break;
        case 2:
            TRY(struct_list(d, ft, id, sizeof(sl_pq_schema_elem_t), (void **)&m->elems,
                            &m->num_elems, dec_schema_elem));
            has_schema = true;
            break;
        case 3:
            TRY(sl_pq_thrift_i64(&d->t, ft, id, &m->num_rows));
            break;
        case 4:
            TRY(struct_list(d, ft, id, sizeof(sl_pq_row_group_t), (void **)&m->row_groups,
                            &m->num_row_groups, dec_row_group));
            break;
        case 5:
            TRY(struct_list(d, ft, id, sizeof(sl_pq_kv_t), (void **)&m->kv, &m->num_kv, dec_kv));
            break;
        case 6:
            TRY(str_field(d, ft, id, &m->created_by));
            break;
        default:
            TRY(sl_pq_thrift_skip(&d->t, ft));
        }
    }
    sl_pq_thrift_struct_end(&d->t, "FileMetaData");
    if (!has_schema || m->num_elems == 0)
        return sl_error_set(d->t.err, SL_ERR_CORRUPT, "FileMetaData has no schema");
    return SL_OK;
}

/* ---- the schema tree ---- */

static bool is_list_annotated(const sl_pq_schema_elem_t *e)
{
    return e->converted_type == SL_PQ_CT_LIST || e->converted_type == SL_PQ_CT_MAP ||
           e->converted_type == SL_PQ_CT_MAP_KEY_VALUE || e->logical == SL_PQ_LT_LIST ||
           e->logical == SL_PQ_LT_MAP;
}

/* Join the names of path[from..to] with '.' into the arena. */
static char *join(sl_arena_t *arena, const sl_pq_schema_elem_t *elems, const uint32_t *path,
                  int from, int to, const char *prefix)
{
    size_t n = prefix ? strlen(prefix) + 1 : 1;
    for (int i = from; i <= to; i++)
        n += strlen(elems[path[i]].name) + 1;
    char *s = sl_arena_alloc(arena, n);
    if (s == NULL) return NULL;
    size_t at = 0;
    if (prefix) {
        at = strlen(prefix);
        memcpy(s, prefix, at);
    }
    for (int i = from; i <= to; i++) {
        if (at > 0) s[at++] = '.';
        size_t l = strlen(elems[path[i]].name);
        memcpy(s + at, elems[path[i]].name, l);
        at += l;
    }
    s[at] = '\0';
    return s;
}

/* Levels, list layout and names of the leaf elem (docs/PARQUET.md,
 * "Lists"). */
static sl_err_t describe_leaf(sl_arena_t *arena, const sl_pq_meta_t *m, uint32_t elem,
                              sl_pq_column_t *c, sl_error_t *err)
{
    const sl_pq_schema_elem_t *el = m->elems;
    uint32_t path[MAX_SCHEMA_DEPTH];
    int depth = 0;
    for (uint32_t e = elem; e != 0; e = el[e].parent)
        depth++;
    for (uint32_t e = elem, i = (uint32_t)depth; e != 0; e = el[e].parent)
        path[--i] = e;
    int rep_at = -1;
    for (int i = 0; i < depth; i++) {
        const sl_pq_schema_elem_t *e = &el[path[i]];
        if (e->repetition != SL_PQ_REQUIRED) c->max_def++;
        if (e->repetition == SL_PQ_REPEATED) {
            c->max_rep++;
            if (rep_at < 0) {
                rep_at = i;
                c->elem_def = c->max_def;
            }
        }
    }
    const sl_pq_schema_elem_t *leaf = &el[elem];
    c->elem = elem;
    c->type = leaf->type;
    c->type_length = leaf->type_length;
    c->kind = leaf->type == SL_PQ_FLOAT    ? SL_PQ_KIND_F32
              : leaf->type == SL_PQ_DOUBLE ? SL_PQ_KIND_F64
              : leaf->type == SL_PQ_BYTE_ARRAY || leaf->type == SL_PQ_FIXED_LEN_BYTE_ARRAY
                  ? SL_PQ_KIND_BYTES
                  : SL_PQ_KIND_I64;
    c->is_string = leaf->converted_type == SL_PQ_CT_UTF8 || leaf->converted_type == 4 ||
                   leaf->converted_type == 19 || leaf->logical == SL_PQ_LT_STRING ||
                   leaf->logical == SL_PQ_LT_ENUM || leaf->logical == SL_PQ_LT_JSON;
    c->is_unsigned =
        (leaf->converted_type >= SL_PQ_CT_UINT_8 && leaf->converted_type <= SL_PQ_CT_UINT_64) ||
        (leaf->logical == SL_PQ_LT_INTEGER && !leaf->int_signed);
    c->path = join(arena, el, path, 0, depth - 1, NULL);
    if (c->path == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    if (leaf->type < 0 || leaf->type > SL_PQ_FIXED_LEN_BYTE_ARRAY)
        return sl_error_set(err, SL_ERR_CORRUPT, "column %s: physical type %d", c->path,
                            leaf->type);
    if (leaf->type == SL_PQ_FIXED_LEN_BYTE_ARRAY && leaf->type_length <= 0)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "column %s: FIXED_LEN_BYTE_ARRAY of type_length %d", c->path,
                            leaf->type_length);
    if (c->max_rep > 1) {
        c->unsupported = "nested lists (more than one level of repetition)";
        c->name = c->path;
        return SL_OK;
    }
    if (c->max_rep == 0) {
        c->name = c->path;
        return SL_OK;
    }
    /* one repeated node at rep_at: find the list node and the element */
    c->is_list = true;
    const sl_pq_schema_elem_t *rep = &el[path[rep_at]];
    int list_at = rep_at, elem_at = rep_at;
    if (rep_at > 0 && is_list_annotated(&el[path[rep_at - 1]])) {
        list_at = rep_at - 1;
        const char *lname = el[path[list_at]].name;
        bool two_level = rep->type >= 0 || rep->num_children != 1 ||
                         strcmp(rep->name, "array") == 0 ||
                         (strncmp(rep->name, lname, strlen(lname)) == 0 &&
                          strcmp(rep->name + strlen(lname), "_tuple") == 0);
        elem_at = two_level ? rep_at : rep_at + 1;
    }
    char *lname = join(arena, el, path, 0, list_at, NULL);
    if (lname == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    c->in_struct_list = elem_at < depth - 1;
    c->name = c->in_struct_list ? join(arena, el, path, elem_at + 1, depth - 1, lname) : lname;
    if (c->name == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    return SL_OK;
}

/* Parents from the flattened (depth-first) element list, then the leaves. */
static sl_err_t build_schema(sl_arena_t *arena, sl_pq_meta_t *m, sl_error_t *err)
{
    sl_pq_schema_elem_t *el = m->elems;
    uint32_t stack[MAX_SCHEMA_DEPTH];
    int64_t left[MAX_SCHEMA_DEPTH];
    int top = 0;
    if (el[0].num_children < 0)
        return sl_error_set(err, SL_ERR_CORRUPT, "schema root has %d children", el[0].num_children);
    stack[0] = 0;
    left[0] = el[0].num_children;
    uint32_t leaves = 0;
    for (uint32_t i = 1; i < m->num_elems; i++) {
        while (top >= 0 && left[top] == 0)
            top--;
        if (top < 0)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "schema has %u elements, its tree ends after %u", m->num_elems, i);
        left[top]--;
        el[i].parent = stack[top];
        bool group = el[i].num_children > 0 || el[i].type < 0;
        if (el[i].num_children < 0 || (el[i].num_children > 0 && el[i].type >= 0))
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "schema element %u (%s): %d children and type %s", i, el[i].name,
                                el[i].num_children, sl_pq_type_name(el[i].type));
        if (el[i].repetition < 0 || el[i].repetition > SL_PQ_REPEATED)
            return sl_error_set(err, SL_ERR_CORRUPT, "schema element %u (%s): repetition %d", i,
                                el[i].name, el[i].repetition);
        if (group) {
            if (el[i].num_children > (int64_t)(m->num_elems - i - 1))
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "schema element %u (%s): %d children, %u elements left", i,
                                    el[i].name, el[i].num_children, m->num_elems - i - 1);
            if (top + 1 >= MAX_SCHEMA_DEPTH)
                return sl_error_set(err, SL_ERR_UNSUPPORTED, "schema nested over %d deep",
                                    MAX_SCHEMA_DEPTH);
            stack[++top] = i;
            left[top] = el[i].num_children;
        } else {
            leaves++;
        }
    }
    while (top >= 0 && left[top] == 0)
        top--;
    if (top >= 0)
        return sl_error_set(err, SL_ERR_CORRUPT, "schema ends with %lld children of %s missing",
                            (long long)left[top], el[stack[top]].name);
    m->columns = sl_arena_calloc(arena, leaves ? leaves : 1, sizeof *m->columns);
    if (m->columns == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    for (uint32_t i = 1; i < m->num_elems; i++)
        if (!(el[i].num_children > 0 || el[i].type < 0))
            TRY(describe_leaf(arena, m, i, &m->columns[m->num_columns++], err));
    for (uint32_t g = 0; g < m->num_row_groups; g++) {
        const sl_pq_row_group_t *rg = &m->row_groups[g];
        if (rg->num_chunks != m->num_columns)
            return sl_error_set(err, SL_ERR_CORRUPT,
                                "row group %u has %u column chunks, the schema %u columns", g,
                                rg->num_chunks, m->num_columns);
        if (rg->num_rows < 0)
            return sl_error_set(err, SL_ERR_CORRUPT, "row group %u has %lld rows", g,
                                (long long)rg->num_rows);
        for (uint32_t c = 0; c < m->num_columns; c++)
            if (rg->chunks[c].type != m->columns[c].type)
                return sl_error_set(err, SL_ERR_CORRUPT,
                                    "row group %u column %s: chunk of type %s, schema says %s", g,
                                    m->columns[c].path, sl_pq_type_name(rg->chunks[c].type),
                                    sl_pq_type_name(m->columns[c].type));
    }
    return SL_OK;
}

sl_err_t sl_pq_meta_decode(const uint8_t *buf, size_t len, const sl_allocator_t *a,
                           sl_pq_meta_mem_t **out, const sl_pq_meta_t **meta, sl_error_t *err)
{
    *out = NULL;
    sl_pq_meta_mem_t *mem = sl_calloc(a, 1, sizeof *mem);
    if (mem == NULL) return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    mem->a = a;
    mem->arena = sl_arena_new(a, 0);
    if (mem->arena == NULL) {
        sl_free(a, mem, sizeof *mem);
        return sl_error_set(err, SL_ERR_NOMEM, "out of memory");
    }
    dec_t d = {.arena = mem->arena};
    sl_pq_thrift_init(&d.t, buf, len, err);
    sl_err_t rc = dec_file_meta(&d, &mem->meta);
    if (rc == SL_OK) rc = build_schema(mem->arena, &mem->meta, err);
    if (rc != SL_OK) {
        sl_arena_destroy(mem->arena);
        sl_free(a, mem, sizeof *mem);
        return rc;
    }
    mem->meta.footer_len = (uint32_t)len;
    *out = mem;
    *meta = &mem->meta;
    return SL_OK;
}

void sl_pq_meta_free(sl_pq_meta_mem_t *mem)
{
    if (mem == NULL) return;
    const sl_allocator_t *a = mem->a;
    sl_arena_destroy(mem->arena);
    sl_free(a, mem, sizeof *mem);
}

/* ---- the file ---- */

sl_err_t sl_pq_file_open(const sl_pq_source_t *src, const char *name, const sl_allocator_t *a,
                         sl_pq_file_t **out, sl_error_t *err)
{
    *out = NULL;
    uint64_t size;
    sl_err_t rc = src->size(src->ctx, &size, err);
    if (rc != SL_OK) return sl_error_prefix(err, "file %s: ", name);
    if (size < 12)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "file %s: %llu bytes, too short for Parquet (magic, footer length, "
                            "magic: 12 at least)",
                            name, (unsigned long long)size);
    uint8_t head[4], tail[8];
    if ((rc = src->read_at(src->ctx, 0, 4, head, err)) != SL_OK ||
        (rc = src->read_at(src->ctx, size - 8, 8, tail, err)) != SL_OK)
        return sl_error_prefix(err, "file %s: ", name);
    if (memcmp(tail + 4, "PARE", 4) == 0)
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "file %s: an encrypted footer (PARE) is not supported", name);
    if (memcmp(head, "PAR1", 4) != 0 || memcmp(tail + 4, "PAR1", 4) != 0)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "file %s: not Parquet (wrong magic: %02x%02x%02x%02x at the start, "
                            "%02x%02x%02x%02x at the end; PAR1 expected)",
                            name, head[0], head[1], head[2], head[3], tail[4], tail[5], tail[6],
                            tail[7]);
    uint32_t flen = sl_le_get_u32(tail);
    if ((uint64_t)flen > size - 12)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "file %s: footer length %u runs past the start of the file (%llu "
                            "bytes)",
                            name, flen, (unsigned long long)size);
    if (flen > SL_PQ_MAX_FOOTER)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "file %s: footer of %u bytes (limit %u)", name,
                            flen, SL_PQ_MAX_FOOTER);
    uint8_t *buf = sl_alloc(a, flen ? flen : 1);
    sl_pq_file_t *f = sl_calloc(a, 1, sizeof *f);
    char *nm = sl_strdup(a, name);
    if (buf == NULL || f == NULL || nm == NULL) {
        sl_free(a, buf, flen ? flen : 1);
        sl_free(a, f, sizeof *f);
        sl_strfree(a, nm);
        return sl_error_set(err, SL_ERR_NOMEM, "file %s: out of memory", name);
    }
    rc = src->read_at(src->ctx, size - 8 - flen, flen, buf, err);
    if (rc == SL_OK) rc = sl_pq_meta_decode(buf, flen, a, &f->mem, &f->meta, err);
    sl_free(a, buf, flen ? flen : 1);
    if (rc != SL_OK) {
        sl_error_prefix(err, "file %s footer: ", name);
        sl_free(a, f, sizeof *f);
        sl_strfree(a, nm);
        return rc;
    }
    f->a = a;
    f->src = *src;
    f->size = size;
    f->name = nm;
    *out = f;
    return SL_OK;
}

void sl_pq_file_destroy(sl_pq_file_t *f)
{
    if (f == NULL) return;
    sl_pq_meta_free(f->mem);
    sl_strfree(f->a, f->name);
    sl_free(f->a, f, sizeof *f);
}

const sl_pq_meta_t *sl_pq_file_meta(const sl_pq_file_t *f)
{
    return f->meta;
}

const char *sl_pq_file_name(const sl_pq_file_t *f)
{
    return f->name;
}

int64_t sl_pq_find_column(const sl_pq_meta_t *m, const char *name)
{
    for (uint32_t i = 0; i < m->num_columns; i++)
        if (strcmp(m->columns[i].name, name) == 0) return i;
    for (uint32_t i = 0; i < m->num_columns; i++)
        if (strcmp(m->columns[i].path, name) == 0) return i;
    return -1;
}

/* Opening a data file (a path, memory, an object of a store, or a twin of
 * an open one): header, trailer, footer checksum, the footer parsed, then
 * every field of it checked against the file and the schema
 * (format_check.c) before anything uses it. The result, wh_file_t, indexes
 * each stripe's streams by slot so that the reader finds a column's streams
 * in O(1). Also the format's small helpers the module shares: limits,
 * stream kinds, a stream's label and checksum. */
#include "common/err.h"
#include "wh_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

sl_wh_limits_t sl_wh_limits_default(void)
{
    sl_wh_limits_t l = {
        .max_footer_bytes = 64u << 20,
        .max_stripe_rows = 1u << 24,
        .max_stripes = 1u << 20,
        .max_streams = 1u << 20,
        .max_stripe_bytes = 8ull << 30,
    };
    return l;
}

sl_wh_limits_t wh_limits_resolve(const sl_wh_limits_t *l)
{
    sl_wh_limits_t d = sl_wh_limits_default();
    if (l == NULL) return d;
    sl_wh_limits_t r = *l;
    if (r.max_footer_bytes == 0) r.max_footer_bytes = d.max_footer_bytes;
    if (r.max_stripe_rows == 0) r.max_stripe_rows = d.max_stripe_rows;
    if (r.max_stripes == 0) r.max_stripes = d.max_stripes;
    if (r.max_streams == 0) r.max_streams = d.max_streams;
    if (r.max_stripe_bytes == 0) r.max_stripe_bytes = d.max_stripe_bytes;
    return r;
}

const char *sl_wh_stream_kind_name(sl_wh_stream_kind_t kind)
{
    switch (kind) {
    case SL_WH_STREAM_LENGTHS:
        return "lengths";
    case SL_WH_STREAM_IDS:
        return "ids";
    case SL_WH_STREAM_WEIGHTS:
        return "weights";
    case SL_WH_STREAM_DENSE_VALUES:
        return "values";
    case SL_WH_STREAM_PRESENT:
        return "present";
    case SL_WH_STREAM_INVERSE:
        return "inverse";
    case SL_WH_STREAM_SAMPLE_ID:
        return "sample_id";
    case SL_WH_STREAM_SESSION_ID:
        return "session_id";
    case SL_WH_STREAM_TIMESTAMP:
        return "timestamp";
    case SL_WH_STREAM_LABEL:
        return "label";
    }
    return "unknown";
}

uint32_t wh_kind_width(uint32_t kind)
{
    switch (kind) {
    case SL_WH_STREAM_IDS:
    case SL_WH_STREAM_SAMPLE_ID:
    case SL_WH_STREAM_SESSION_ID:
    case SL_WH_STREAM_TIMESTAMP:
        return 8;
    case SL_WH_STREAM_PRESENT:
        return 1;
    default:
        return 4;
    }
}

bool wh_kind_is_int(uint32_t kind)
{
    switch (kind) {
    case SL_WH_STREAM_LENGTHS:
    case SL_WH_STREAM_IDS:
    case SL_WH_STREAM_INVERSE:
    case SL_WH_STREAM_SAMPLE_ID:
    case SL_WH_STREAM_SESSION_ID:
    case SL_WH_STREAM_TIMESTAMP:
        return true;
    default:
        return false;
    }
}

const char *wh_stream_label(const wh_stream_t *st, char *buf, size_t cap)
{
    snprintf(buf, cap, "stream '%s' %s", st->name, sl_wh_stream_kind_name(st->kind));
    return buf;
}

bool wh_stream_checksum_ok(const wh_stream_t *st, const uint8_t *data)
{
    return XXH3_64bits(data, (size_t)st->stored_size) == st->checksum;
}

void wh_file_close(wh_file_t *f)
{
    if (f == NULL) return;
    const sl_allocator_t *a = f->a;
    wh_source_unmap(&f->src);
    if (f->src.fd >= 0) close(f->src.fd);
    sl_store_object_destroy(f->src.obj);
    sl_store_destroy(f->src.store);
    sl_free(a, f->src.head, f->src.head_len);
    sl_free(a, f->src.tail, f->src.tail_len);
    sl_strfree(a, f->src.name);
    if (f->footer != NULL) {
        sl_unsized_t u = {.a = a};
        ProtobufCAllocator pa;
        wh_pb_allocator(&u, &pa);
        sluice__file_footer__free_unpacked(f->footer, &pa);
    }
    sl_wh_schema_destroy(f->schema);
    sl_free(a, f->stripes, (size_t)f->num_stripes * sizeof *f->stripes);
    sl_free(a, f->streams, (size_t)f->num_streams * sizeof *f->streams);
    sl_free(a, f->slots, sl_mul_size((size_t)f->num_stripes * f->num_slots, sizeof(int32_t)));
    for (uint32_t g = 0; g < f->num_groups; g++)
        sl_free(a, f->groups[g].features, f->groups[g].spec.num_features * sizeof(uint32_t));
    sl_free(a, f->groups, (size_t)f->num_groups * sizeof *f->groups);
    sl_free(a, f->feature_group, (size_t)f->feature_group_n * sizeof(int32_t));
    sl_free(a, f->unique_rows, f->unique_rows_n * sizeof(uint32_t));
    sl_free(a, f, sizeof *f);
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Header and trailer; leaves the raw footer bytes in *footer. */
static sl_err_t read_frame(wh_file_t *f, uint8_t **footer, sl_error_t *err)
{
    const char *name = f->src.name;
    uint64_t size = f->src.size;
    uint8_t head[WH_HEADER_BYTES];
    if (size < 4)
        return sl_error_set(err, SL_ERR_TRUNCATED, "%s: %llu bytes, not a sluice table file", name,
                            (unsigned long long)size);
    sl_err_t rc =
        wh_source_read(&f->src, head, size < WH_HEADER_BYTES ? 4 : WH_HEADER_BYTES, 0, err);
    if (rc != SL_OK) return rc;
    if (memcmp(head, SL_WH_FILE_MAGIC, 4) != 0)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "%s: not a sluice table file (magic is not \"" SL_WH_FILE_MAGIC "\")",
                            name);
    if (size < WH_HEADER_BYTES + WH_TRAILER_BYTES)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "%s: truncated: %llu bytes, less than a header and a trailer", name,
                            (unsigned long long)size);
    uint32_t version = get_u32(head + 4);
    if (version < SL_WH_FORMAT_VERSION_MIN || version > SL_WH_FORMAT_VERSION)
        return sl_error_set(err, SL_ERR_VERSION,
                            "%s: format version %u (this build reads %d to %d)", name, version,
                            SL_WH_FORMAT_VERSION_MIN, SL_WH_FORMAT_VERSION);
    f->version = version;
    uint8_t trailer[WH_TRAILER_BYTES];
    rc = wh_source_read(&f->src, trailer, sizeof trailer, size - WH_TRAILER_BYTES, err);
    if (rc != SL_OK) return rc;
    if (memcmp(trailer + 12, SL_WH_FILE_MAGIC, 4) != 0)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "%s: trailer: no closing magic: the file is truncated or was not "
                            "completely written",
                            name);
    uint64_t footer_len = get_u32(trailer);
    uint64_t room = size - WH_HEADER_BYTES - WH_TRAILER_BYTES;
    if (footer_len > room)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "%s: trailer: footer length %llu exceeds the %llu bytes before it",
                            name, (unsigned long long)footer_len, (unsigned long long)room);
    if (footer_len > f->limits.max_footer_bytes)
        return sl_error_set(
            err, SL_ERR_TOO_LARGE, "%s: footer of %llu bytes exceeds the limit %llu", name,
            (unsigned long long)footer_len, (unsigned long long)f->limits.max_footer_bytes);
    f->footer_offset = size - WH_TRAILER_BYTES - footer_len;
    f->footer_bytes = footer_len;
    uint8_t *buf = sl_alloc(f->a, footer_len);
    if (buf == NULL) return sl_error_set(err, SL_ERR_NOMEM, "%s: footer", name);
    rc = wh_source_read(&f->src, buf, footer_len, f->footer_offset, err);
    if (rc == SL_OK && XXH3_64bits(buf, footer_len) != get_u64(trailer + 4))
        rc = sl_error_set(err, SL_ERR_CORRUPT, "%s: footer: checksum mismatch", name);
    f->footer_checksum = get_u64(trailer + 4);
    if (rc != SL_OK) {
        sl_free(f->a, buf, footer_len);
        return rc;
    }
    *footer = buf;
    return SL_OK;
}

/* Bytes an object's open fetches of its end: the trailer and, for all but
 * the largest footers, the footer (a file of 100 stripes of 40 streams has
 * a footer of about 60 KiB). */
#define TAIL_PREFETCH (256u * 1024)

/* Where an object's header and tail go (see wh_source_t): buffers made,
 * ranges into r[2] (key and pin set); @return how many (0: an empty
 * object), or -1 when out of memory. */
static int ends_plan(wh_file_t *f, sl_store_range_t *r)
{
    wh_source_t *src = &f->src;
    uint64_t size = src->size;
    src->tail_len = (size_t)(size < TAIL_PREFETCH ? size : TAIL_PREFETCH);
    src->tail_off = size - src->tail_len;
    src->head_len = src->tail_off == 0 ? 0 : WH_HEADER_BYTES;
    if (src->head_len > src->tail_off) src->head_len = (size_t)src->tail_off;
    if (src->tail_len == 0) return 0;
    src->tail = sl_alloc(f->a, src->tail_len);
    src->head = src->head_len ? sl_alloc(f->a, src->head_len) : NULL;
    if (src->tail == NULL || (src->head_len && src->head == NULL)) return -1;
    const sl_store_info_t *info = sl_store_object_info(src->obj);
    const char *key = sl_store_object_key(src->obj), *pin = info->etag[0] ? info->etag : NULL;
    r[0] = (sl_store_range_t){.key = key,
                              .offset = src->tail_off,
                              .len = src->tail_len,
                              .buf = src->tail,
                              .if_match = pin};
    r[1] = (sl_store_range_t){
        .key = key, .offset = 0, .len = src->head_len, .buf = src->head, .if_match = pin};
    return src->head_len ? 2 : 1;
}

static sl_err_t file_finish(wh_file_t *f, sl_error_t *err);

static wh_file_t *file_new(const char *name, const sl_wh_limits_t *limits, const sl_allocator_t *a)
{
    wh_file_t *f = sl_calloc(a, 1, sizeof *f);
    if (f == NULL) return NULL;
    f->a = a;
    f->src.fd = -1;
    f->limits = wh_limits_resolve(limits);
    f->src.name = sl_strdup(a, name);
    if (f->src.name == NULL) {
        sl_free(a, f, sizeof *f);
        return NULL;
    }
    return f;
}

/* A new file on key of st, pinned at known (NULL: as a HEAD finds it),
 * nothing read yet. */
static sl_err_t object_new(sl_store_t *st, const char *key, const char *name,
                           const sl_store_info_t *known, const sl_wh_limits_t *limits,
                           const sl_allocator_t *a, wh_file_t **out, sl_error_t *err)
{
    *out = file_new(name, limits, a);
    if (*out == NULL) return sl_error_set(err, SL_ERR_NOMEM, "open %s", name);
    wh_file_t *f = *out;
    sl_err_t rc = known ? sl_store_object_pin(st, key, known, &f->src.obj, err)
                        : sl_store_object_open(st, key, &f->src.obj, err);
    if (rc == SL_OK) {
        f->src.size = sl_store_object_info(f->src.obj)->size;
        f->src.tail_off = f->src.size;
    }
    return rc;
}

sl_err_t wh_files_open_store(sl_store_t *st, uint32_t n, const char *const *keys,
                             const char *const *names, const sl_store_info_t *const *known,
                             const sl_wh_limits_t *limits, const sl_allocator_t *a, wh_file_t **out,
                             sl_error_t *err)
{
    if (a == NULL) a = sl_allocator_default();
    for (uint32_t i = 0; i < n; i++)
        out[i] = NULL;
    sl_store_range_t *r = sl_calloc(a, 2 * (size_t)n + 1, sizeof *r);
    if (r == NULL) return sl_error_set(err, SL_ERR_NOMEM, "open %u files", n);
    size_t nr = 0;
    sl_err_t rc = SL_OK;
    for (uint32_t i = 0; i < n && rc == SL_OK; i++) {
        rc = object_new(st, keys[i], names ? names[i] : keys[i], known ? known[i] : NULL, limits, a,
                        &out[i], err);
        int k = rc == SL_OK ? ends_plan(out[i], r + nr) : 0;
        if (k < 0) rc = sl_error_set(err, SL_ERR_NOMEM, "open %s", keys[i]);
        if (k > 0) nr += (size_t)k;
    }
    if (rc == SL_OK && nr > 0) rc = sl_store_read_many(st, r, nr, err);
    for (uint32_t i = 0; i < n && rc == SL_OK; i++)
        rc = file_finish(out[i], err);
    sl_free(a, r, (2 * (size_t)n + 1) * sizeof *r);
    if (rc != SL_OK)
        for (uint32_t i = 0; i < n; i++) {
            wh_file_close(out[i]);
            out[i] = NULL;
        }
    return rc;
}

sl_err_t wh_file_open_store(sl_store_t *st, const char *key, const char *display_name,
                            const sl_store_info_t *known, const sl_wh_limits_t *limits,
                            const sl_allocator_t *a, wh_file_t **out, sl_error_t *err)
{
    *out = NULL;
    const char *name = display_name ? display_name : key;
    return wh_files_open_store(st, 1, &key, &name, known ? &known : NULL, limits, a, out, err);
}

sl_err_t wh_file_open(const char *path, const void *mem, size_t len, const char *display_name,
                      const sl_wh_limits_t *limits, const sl_allocator_t *a, wh_file_t **out,
                      sl_error_t *err)
{
    *out = NULL;
    if (a == NULL) a = sl_allocator_default();
    const char *name = display_name ? display_name : path ? path : "(memory)";
    if (path != NULL && sl_store_is_remote(path)) {
        sl_store_opts_t so = {.alloc = a};
        sl_store_t *st;
        char *key;
        sl_err_t rc = sl_store_open_url(path, &so, &st, &key, err);
        if (rc != SL_OK) return rc;
        rc = wh_file_open_store(st, key, name, NULL, limits, a, out, err);
        sl_strfree(a, key);
        if (rc == SL_OK)
            (*out)->src.store = st; /* the file owns the store it opened */
        else
            sl_store_destroy(st);
        return rc;
    }
    wh_file_t *f = file_new(name, limits, a);
    if (f == NULL) return sl_error_set(err, SL_ERR_NOMEM, "open %s", name);
    sl_err_t rc;
    if (path != NULL) {
        f->src.fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (f->src.fd < 0 || fstat(f->src.fd, &st) != 0) {
            rc = sl_error_set(err, errno == ENOENT ? SL_ERR_NOT_FOUND : SL_ERR_IO, "%s: open: %s",
                              name, strerror(errno));
            wh_file_close(f);
            return rc;
        }
        if (!S_ISREG(st.st_mode)) {
            wh_file_close(f);
            return sl_error_set(err, SL_ERR_INVALID, "%s: not a regular file", name);
        }
        f->src.size = (uint64_t)st.st_size;
        wh_source_map(&f->src);
    } else {
        f->src.mem = mem;
        f->src.size = len;
    }
    if ((rc = file_finish(f, err)) != SL_OK) {
        wh_file_close(f);
        return rc;
    }
    *out = f;
    return SL_OK;
}

static uint8_t *bytes_dup(const sl_allocator_t *a, const uint8_t *p, size_t n)
{
    uint8_t *d = n ? sl_alloc(a, n) : NULL;
    if (d != NULL) memcpy(d, p, n);
    return d;
}

sl_err_t wh_file_open_twin(const wh_file_t *base, wh_file_t **out, sl_error_t *err)
{
    *out = NULL;
    const wh_source_t *bs = &base->src;
    const char *name = bs->name;
    wh_file_t *f;
    sl_err_t rc;
    if (bs->obj != NULL) {
        rc = object_new(sl_store_object_store(bs->obj), sl_store_object_key(bs->obj), name,
                        sl_store_object_info(bs->obj), &base->limits, base->a, &f, err);
        if (rc != SL_OK) {
            wh_file_close(f);
            return rc;
        }
        f->src.head = bytes_dup(f->a, bs->head, bs->head_len);
        f->src.tail = bytes_dup(f->a, bs->tail, bs->tail_len);
        f->src.head_len = f->src.head ? bs->head_len : 0;
        f->src.tail_len = f->src.tail ? bs->tail_len : 0;
        if ((bs->head_len && f->src.head == NULL) || (bs->tail_len && f->src.tail == NULL)) {
            wh_file_close(f);
            return sl_error_set(err, SL_ERR_NOMEM, "open %s", name);
        }
        f->src.tail_off = bs->tail_off;
    } else {
        if ((f = file_new(name, &base->limits, base->a)) == NULL)
            return sl_error_set(err, SL_ERR_NOMEM, "open %s", name);
        f->src.size = bs->size;
        if (bs->fd >= 0) {
            if ((f->src.fd = fcntl(bs->fd, F_DUPFD_CLOEXEC, 0)) < 0) {
                rc = sl_error_set(err, SL_ERR_IO, "%s: dup: %s", name, strerror(errno));
                wh_file_close(f);
                return rc;
            }
            if (bs->map_len > 0) wh_source_map(&f->src);
        } else {
            f->src.mem = bs->mem; /* borrowed as base borrows it */
        }
    }
    if ((rc = file_finish(f, err)) != SL_OK) {
        wh_file_close(f);
        return rc;
    }
    *out = f;
    return SL_OK;
}

/* Header, trailer, footer and every check of an opened source. */
static sl_err_t file_finish(wh_file_t *f, sl_error_t *err)
{
    const char *name = f->src.name;
    const sl_allocator_t *a = f->a;
    sl_err_t rc;
    uint8_t *raw = NULL;
    if ((rc = read_frame(f, &raw, err)) != SL_OK) return rc;
    sl_unsized_t u = {.a = a};
    ProtobufCAllocator pa;
    wh_pb_allocator(&u, &pa);
    f->footer = sluice__file_footer__unpack(&pa, f->footer_bytes, raw);
    sl_free(a, raw, f->footer_bytes);
    if (f->footer == NULL) {
        rc = u.failed ? sl_error_set(err, SL_ERR_NOMEM, "%s: footer: out of memory", name)
                      : sl_error_set(err, SL_ERR_CORRUPT, "%s: footer: malformed protobuf", name);
        return rc;
    }
    if (f->footer->format_version != f->version) {
        rc = sl_error_set(err, SL_ERR_VERSION, "%s: footer: format version %u, the header says %u",
                          name, f->footer->format_version, f->version);
        return rc;
    }
    if (f->footer->schema == NULL) {
        rc = sl_error_set(err, SL_ERR_CORRUPT, "%s: footer: no schema", name);
        return rc;
    }
    if ((rc = wh_schema_from_pb(f->footer->schema, a, &f->schema, err)) != SL_OK) {
        sl_error_prefix(err, "%s: footer: schema: ", name);
        return rc;
    }
    f->session_clustered = f->footer->session_clustered;
    if ((rc = wh_file_check_groups(f, err)) != SL_OK) return rc;
    return wh_file_check_stripes(f, err);
}

/* Private to src/warehouse: the byte-level constants of the data file, the
 * byte source abstraction (file or memory), the opened-and-validated data
 * file (wh_file_t: footer parsed, every offset and size checked) that the
 * reader, verify, inspect and splits share, small growable buffers, and the
 * schema <-> protobuf conversions. */
#ifndef SLUICE_WH_INTERNAL_H
#define SLUICE_WH_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/mem.h"
#include "store/store.h"
#include "warehouse.h"
#include "warehouse.pb-c.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the warehouse format is little-endian and this code maps it directly"
#endif

#define WH_HEADER_BYTES 8   /* "SLCT" + u32 version */
#define WH_TRAILER_BYTES 16 /* u32 footer length, u64 footer XXH3, "SLCT" */
#define WH_SCHEMA_PREFIX_BYTES 20

/* ---- growable, SL_ALIGN-aligned buffer (reused across stripes) ---- */

typedef struct wh_buf {
    uint8_t *data;
    size_t cap;
} wh_buf_t;

/* Ensure cap >= size (contents are not kept). @return false when out of memory. */
bool wh_buf_reserve(wh_buf_t *b, const sl_allocator_t *a, size_t size);
/* Ensure cap >= size keeping the first keep bytes. */
bool wh_buf_grow(wh_buf_t *b, const sl_allocator_t *a, size_t size, size_t keep);
void wh_buf_free(wh_buf_t *b, const sl_allocator_t *a);

/* ---- byte source ---- */

typedef struct wh_source {
    int fd;             /* -1 for memory or an object */
    const uint8_t *mem; /* memory source, or the file mapped (map_len > 0) */
    size_t map_len;     /* bytes mapped (owned), 0 when not mapped */
    uint64_t size;
    char *name; /* display name (owned) */
    /* An object of a store (owned), pinned at its ETag, or NULL; store is
     * the store it is of when this source opened it from a URL (owned),
     * NULL when it is borrowed (a table's). */
    sl_store_object_t *obj;
    sl_store_t *store;
    /* What the open fetched of obj in one parallel request: the header
     * and the last bytes (trailer and, mostly, footer), so opening a file
     * costs one round trip, not three. */
    uint8_t *head, *tail; /* owned */
    size_t head_len, tail_len;
    uint64_t tail_off;
    uint64_t read_calls; /* statistics */
    uint64_t bytes_read;
} wh_source_t;

/* Map a file source (fd open, size known) read-only, so that the reader
 * decodes stripes in place instead of copying them out with pread. Only
 * the reader's stripe reads use the mapping, under wh_mapguard_run (a file
 * truncated under it, or a failing disk, raises SIGBUS); wh_source_read
 * keeps to pread. SLUICE_NO_MMAP=1 in the environment turns mapping off.
 * Leaves src unmapped when mmap or the SIGBUS handler is unavailable. */
void wh_source_map(wh_source_t *src);
/* Drop the mapping (the source reads with pread from then on). */
void wh_source_unmap(wh_source_t *src);

/* A call made while a SIGBUS on [lo, lo + len) is caught (mapguard.c). */
typedef sl_err_t (*wh_guarded_fn)(void *arg, sl_error_t *err);
/* Install the SIGBUS handler once. @return false when it cannot be (then
 * files must not be read through a mapping). */
bool wh_mapguard_init(void);
/* fn(arg, err), except that a SIGBUS on an address in [lo, lo + len) ends
 * it early: *faulted is set and the return is SL_ERR_IO (err untouched). */
sl_err_t wh_mapguard_run(const void *lo, size_t len, wh_guarded_fn fn, void *arg, bool *faulted,
                         sl_error_t *err);

/* Read len bytes at off. SL_ERR_TRUNCATED when the source ends first,
 * SL_ERR_IO on a failed pread (message names the file); an object's errors
 * are the store's (SL_ERR_VERSION: replaced since it was opened). */
sl_err_t wh_source_read(wh_source_t *src, void *buf, size_t len, uint64_t off, sl_error_t *err);

/* ---- the opened data file ---- */

/* Natural width in bytes of a stream kind's values (PRESENT: 1 per 8 rows). */
uint32_t wh_kind_width(uint32_t kind);
/* Whether a kind holds integers (and so may use ENCODING_FOR). */
bool wh_kind_is_int(uint32_t kind);

typedef struct wh_stream {
    uint8_t kind, codec, encoding, for_width, bit_width;
    int64_t for_base, delta_base;
    uint64_t dict_size, dict_bytes;
    uint64_t offset, stored_size, raw_size, value_count, checksum;
    const char *name; /* borrowed from the footer */
} wh_stream_t;

typedef struct wh_stripe {
    uint64_t first_row, offset, length;
    uint32_t rows;
    uint32_t first_stream, num_streams; /* into wh_file_t.streams */
    uint32_t *unique_rows;              /* [num_groups] */
} wh_stripe_t;

/* Slots: where a column's streams are found in a stripe's slot row:
 *   0 sample id, 1 session id, 2 timestamp, 3 + t label t,
 *   3 + T + 3 f + role  feature f (role: dense 0 values, 1 present;
 *                       sparse 0 lengths, 1 ids, 2 weights),
 *   3 + T + 3 F + g     group g's inverse. */
enum { WH_ROLE_VALUES = 0, WH_ROLE_PRESENT = 1 };
enum { WH_ROLE_LENGTHS = 0, WH_ROLE_IDS = 1, WH_ROLE_WEIGHTS = 2 };

typedef struct wh_group {
    sl_dedup_group_spec_t spec; /* names borrowed from the footer */
    uint32_t *features;         /* [spec.num_features] schema feature indices */
} wh_group_t;

typedef struct wh_file {
    const sl_allocator_t *a;
    wh_source_t src;
    sl_wh_limits_t limits;
    Sluice__FileFooter *footer;
    sl_wh_schema_t *schema;
    uint64_t footer_offset, footer_bytes, rows;
    uint64_t footer_checksum; /* XXH3-64 of the footer, as the trailer gives it (checked) */
    uint32_t num_stripes;
    wh_stripe_t *stripes;
    uint32_t num_streams;
    wh_stream_t *streams;
    uint32_t num_slots;
    int32_t *slots; /* [num_stripes * num_slots]: index into streams, or -1 */
    uint32_t num_groups;
    wh_group_t *groups;
    int32_t *feature_group; /* [num_features]: group index or -1 */
    uint32_t feature_group_n;
    uint32_t *unique_rows; /* [num_stripes * num_groups] */
    size_t unique_rows_n;
    bool session_clustered;
    uint32_t version; /* format version of the file (header and footer agree) */
} wh_file_t;

static inline uint32_t wh_slot_label(const wh_file_t *f, uint32_t t)
{
    (void)f;
    return 3 + t;
}
static inline uint32_t wh_slot_feature(const wh_file_t *f, uint32_t feature, uint32_t role)
{
    return 3 + sl_wh_schema_num_labels(f->schema) + 3 * feature + role;
}
static inline uint32_t wh_slot_inverse(const wh_file_t *f, uint32_t g)
{
    return 3 + sl_wh_schema_num_labels(f->schema) + 3 * sl_wh_schema_num_features(f->schema) + g;
}
/* @return the stream of slot in stripe s, or NULL when the stripe has none. */
static inline const wh_stream_t *wh_slot_stream(const wh_file_t *f, uint32_t s, uint32_t slot)
{
    int32_t i = f->slots[(size_t)s * f->num_slots + slot];
    return i < 0 ? NULL : &f->streams[i];
}

/* Open path (fd >= 0; an s3:// URL opens a store of its own) or memory
 * (mem != NULL), check header, trailer and footer, index the streams.
 * display_name names the file in messages. Caller owns *out, free with
 * wh_file_close. */
sl_err_t wh_file_open(const char *path, const void *mem, size_t len, const char *display_name,
                      const sl_wh_limits_t *limits, const sl_allocator_t *a, wh_file_t **out,
                      sl_error_t *err);
/* The same for the object key of st (borrowed: st must outlive the file),
 * pinned at known (its size and ETag from a listing) or, NULL, at what a
 * HEAD finds now: a later read of an object replaced since fails with
 * SL_ERR_VERSION naming it. Its header and last 256 KiB come in one
 * parallel request. */
sl_err_t wh_file_open_store(sl_store_t *st, const char *key, const char *display_name,
                            const sl_store_info_t *known, const sl_wh_limits_t *limits,
                            const sl_allocator_t *a, wh_file_t **out, sl_error_t *err);
/* n of them at once (names, known: NULL or [n]): every header and tail in
 * one sl_store_read_many, so planning a table of many files costs about
 * one round trip, not one per file. All or none: on failure every out[i]
 * is NULL. */
sl_err_t wh_files_open_store(sl_store_t *st, uint32_t n, const char *const *keys,
                             const char *const *names, const sl_store_info_t *const *known,
                             const sl_wh_limits_t *limits, const sl_allocator_t *a, wh_file_t **out,
                             sl_error_t *err);
void wh_file_close(wh_file_t *f);
/* A second file on base's source, read from what base's open fetched:
 * an object is pinned at base's size and ETag (no HEAD) and its footer
 * parsed from base's header and tail bytes (copied: no request, but for
 * a footer larger than that tail, fetched again as base fetched it); a local
 * file is opened again on a dup of base's descriptor (a pread of the
 * footer); memory is borrowed as base borrows it. Its own counters and
 * buffers, so that two threads read the two files at once (a worker's
 * stripe lanes: the footer fetched once per split, docs/WORKER.md). base
 * may be closed first, except a memory source's bytes. */
sl_err_t wh_file_open_twin(const wh_file_t *base, wh_file_t **out, sl_error_t *err);
/* format_check.c, for an open (format.c) once the footer and the schema
 * are parsed: the footer's dedup groups checked against the schema (sets
 * f->groups, f->feature_group), then every stripe and stream checked and
 * indexed by slot (f->stripes, f->streams, f->slots, f->rows). */
sl_err_t wh_file_check_groups(wh_file_t *f, sl_error_t *err);
sl_err_t wh_file_check_stripes(wh_file_t *f, sl_error_t *err);

/* ---- read-ahead of an object's stripes (reader_ahead.c) ---- */

/* A helper thread that fetches the next stripe's ranges while the reader
 * decodes the current one. Memory: one more stripe's projected bytes. */
typedef struct wh_ahead wh_ahead_t;
/* NULL when out of memory or threads. */
wh_ahead_t *wh_ahead_new(const sl_allocator_t *a, const sl_wh_mem_t *mem);
/* Drop the fetch queued, running (waited for) or done; its bytes given back. */
void wh_ahead_drop(wh_ahead_t *h);
/* Waits for a fetch in flight; h may be NULL. */
void wh_ahead_destroy(wh_ahead_t *h);
/* Queue the fetch of stripe's ranges rng[n] of obj, bytes in all; each
 * range's buf is its offset in the stripe's read buffer (the layout the
 * reader's fetch gives it). Waits for a fetch in flight first.
 * @return false when out of memory (nothing queued). */
bool wh_ahead_start(wh_ahead_t *h, sl_store_object_t *obj, uint32_t stripe,
                    const sl_store_range_t *rng, size_t n, uint64_t bytes);
/* When the last fetch was stripe's and succeeded: swap its buffer with
 * *rbuf, its bytes and ranges into *bytes and *reads, @return 1. Else
 * (none, another stripe, a failure: dropped) @return 0. Waits for a
 * fetch in flight; h may be NULL. */
int wh_ahead_take(wh_ahead_t *h, uint32_t stripe, wh_buf_t *rbuf, uint64_t *bytes, size_t *reads);
/* Fetches queued so far (taken or not); h may be NULL (0). */
uint64_t wh_ahead_made(wh_ahead_t *h);

/* ---- tables (table.c; their objects in a store: table_store.c) ---- */

#define WH_TABLE_MAX_DEPTH 64

typedef struct wh_part {
    sl_wh_partition_t p;
    uint32_t cap_files;
} wh_part_t;

typedef struct wh_table_obj {
    const char *rel; /* in the table's arena */
    sl_store_info_t info;
} wh_table_obj_t;

struct sl_wh_table {
    const sl_allocator_t *a;
    char *dir; /* as given: a directory or "s3://bucket/prefix" */
    sl_wh_schema_t *schema;
    sl_arena_t *arena; /* names, key/value arrays */
    wh_part_t *parts;
    uint32_t nparts, cap_parts;
    /* A table in an object store: the store (owned) and the prefix of its
     * keys ("" or "dir/sub/", ending in '/'); NULL for a directory. */
    sl_store_t *store;
    char *prefix;
    wh_table_obj_t *objs; /* the data files' objects as listed, by rel (sorted) */
    uint32_t nobjs, cap_objs;
};

/* Split "k=v" (n bytes) into key/value; false when malformed. */
bool wh_table_split_kv(const char *s, size_t n, char *key, size_t keycap, const char **val,
                       size_t *vlen);
/* Whether name ends in the data file extension. */
bool wh_table_has_ext(const char *name);
/* Append a partition (rel: its path, keys/vals: depth pairs) to t. */
sl_err_t wh_table_add_part(sl_wh_table_t *t, const char *rel, uint32_t depth, char **keys,
                           char **vals, wh_part_t **out, sl_error_t *err);
/* Append the data file sub (relative to the table) to a partition. */
sl_err_t wh_table_add_file(sl_wh_table_t *t, wh_part_t *here, const char *sub, sl_error_t *err);
/* Open t->store at the URL t->dir, load the schema and list the objects
 * into partitions (table_store.c). */
sl_err_t wh_table_open_store(sl_wh_table_t *t, const sl_store_opts_t *store, sl_error_t *err);
/* Create a table in an object store: its _schema, unless one equal to
 * schema is there already (another is SL_ERR_INVALID). */
sl_err_t wh_table_create_store(const char *url, const sl_wh_schema_t *schema, sl_error_t *err);
/* The key of the table's file rel (caller owns, sl_strfree with t->a). */
char *wh_table_key(const sl_wh_table_t *t, const char *rel);
/* The size and ETag the listing found for the data file rel, or NULL. */
const sl_store_info_t *wh_table_object(const sl_wh_table_t *t, const char *rel);
/* Open the data files rels[n] of a table in a store at once, pinned at
 * what the listing found (wh_files_open_store). */
sl_err_t wh_table_open_files(const sl_wh_table_t *t, uint32_t n, const char *const *rels,
                             wh_file_t **out, sl_error_t *err);

/* A reader of the table's data file rel: through its store (its options,
 * pinned at what the listing found) or from its directory. */
sl_err_t wh_table_open_reader(const sl_wh_table_t *t, const char *rel,
                              const sl_wh_read_opts_t *opts, sl_wh_reader_t **out, sl_error_t *err);

/* sl_wh_reader_open of the object key of st (borrowed: st must outlive the
 * reader), pinned at its ETag as wh_file_open_store. */
sl_err_t wh_reader_open_store(sl_store_t *st, const char *key, const char *display_name,
                              const sl_store_info_t *known, const sl_wh_read_opts_t *opts,
                              sl_wh_reader_t **out, sl_error_t *err);

/* ---- bit packing (version 2 encodings, docs/FORMAT.md section 3) ---- */

/* Gaps of a dictionary are packed in blocks of this many, each with its own
 * width, so that one large gap costs bits in its block only. */
#define WH_DICT_BLOCK 32

/* Bits needed for v (0 for 0). */
static inline uint32_t wh_bits_for(uint64_t v)
{
    return v == 0 ? 0 : 64 - (uint32_t)__builtin_clzll(v);
}

/* Bytes of n packed values of w bits. */
static inline uint64_t wh_packed_bytes(uint64_t n, uint32_t w)
{
    return (n * w + 7) / 8;
}

/* The w-bit value starting at bit `bit` of p (bit k is bit k % 8 of byte
 * k / 8). Loads 8 bytes at byte bit / 8 (9 when w > 56): callers keep 8
 * readable bytes past the packed values. */
static inline uint64_t wh_bits_get(const uint8_t *p, uint64_t bit, uint32_t w)
{
    uint64_t x;
    const uint8_t *q = p + (bit >> 3);
    uint32_t sh = (uint32_t)(bit & 7);
    memcpy(&x, q, 8);
    x >>= sh;
    if (w > 56 && sh) x |= (uint64_t)q[8] << (64 - sh);
    return w >= 64 ? x : x & ((1ull << w) - 1);
}

/* ---- stream decoding (decode.c, decode_packed.c) ---- */

/* Decoding the streams of one stripe: the file, where each of the stripe's
 * streams' stored bytes are (NULL: not read), reusable scratch. */
typedef struct wh_dec {
    const wh_file_t *f;
    const sl_allocator_t *a;
    void *zctx;          /* ZSTD_DCtx */
    wh_buf_t z0, z1;     /* decompression scratch */
    wh_buf_t z2, dict;   /* decoded dictionary-encoded floats; a dictionary */
    const uint8_t **ptr; /* [streams of the stripe] */
    uint32_t stripe;
} wh_dec_t;

/* "FILE stripe S stream 'name' kind: MESSAGE" into err. @return code. */
sl_err_t wh_dec_err(const wh_dec_t *d, const wh_stream_t *st, sl_error_t *err, sl_err_t code,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* An int64 stream into dst[value_count], each value through map->ids
 * when map and its ids are not NULL (a DICT stream's dictionary is mapped
 * before the gather: sl_wh_value_map_t). */
sl_err_t wh_decode_i64(wh_dec_t *d, const wh_stream_t *st, int64_t *dst,
                       const sl_wh_value_map_t *map, sl_error_t *err);
/* An int32 stream into dst[value_count]; every value must lie in [0, hi];
 * *sum (may be NULL) gets their sum. */
sl_err_t wh_decode_i32(wh_dec_t *d, const wh_stream_t *st, int32_t *dst, int64_t hi, uint64_t *sum,
                       sl_error_t *err);
/* A float32 stream into dst[value_count]. */
sl_err_t wh_decode_f32(wh_dec_t *d, const wh_stream_t *st, float *dst, sl_error_t *err);
/* The encoded bytes of st: in place (codec none) or decompressed into
 * scratch (raw_size bytes, then 8 readable bytes). */
sl_err_t wh_raw_of(wh_dec_t *d, const wh_stream_t *st, wh_buf_t *scratch, const uint8_t **out,
                   sl_error_t *err);
/* Version-2 encodings (BITPACK, DELTA, DICT) of the encoded bytes p of st,
 * as wh_decode_i64 / _i32 / _f32 do for the older ones. */
sl_err_t wh_unpack_i64(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, int64_t *dst,
                       const sl_wh_value_map_t *map, sl_error_t *err);
sl_err_t wh_unpack_i32(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, int32_t *dst,
                       int64_t hi, uint64_t *sum, sl_error_t *err);
/* map (NULL: none): the dictionary's values go through map->dense first
 * (DICT is the only version-2 encoding of floats). */
sl_err_t wh_unpack_f32(wh_dec_t *d, const wh_stream_t *st, const uint8_t *p, float *dst,
                       const sl_wh_value_map_t *map, sl_error_t *err);
/* A float column (values, and its present bitmap or NULL) into column 0 of
 * the row-major [N, cols] matrix at out; missing rows get NaN. With map
 * (NULL: none) and its dense function, every value and missing row as
 * map->dense makes it (a DICT column: its dictionary and one NaN mapped,
 * then gathered). */
/* Rows [r0, r0 + n) of D float columns, column-major with N rows each
 * (column c at cols + c * N), into the row-major rows at o ([n, D]). */
void wh_transpose_rows(float *o, const float *cols, uint32_t N, uint32_t D, uint32_t r0,
                       uint32_t n);
sl_err_t wh_decode_column(wh_dec_t *d, const wh_stream_t *vals, const wh_stream_t *present,
                          float *out, uint32_t cols, uint32_t N, const sl_wh_value_map_t *map,
                          sl_error_t *err);

/* The file under a reader (borrowed). */
wh_file_t *wh_reader_file(const sl_wh_reader_t *r);

/* "stream 'name' kind" into buf, for messages. */
const char *wh_stream_label(const wh_stream_t *st, char *buf, size_t cap);

/* Check st's stored bytes (at data) against its checksum. */
bool wh_stream_checksum_ok(const wh_stream_t *st, const uint8_t *data);

/* Limits with defaults filled in for zero fields. */
sl_wh_limits_t wh_limits_resolve(const sl_wh_limits_t *l);

/* ---- schema <-> protobuf ---- */

/* Fill pb (and arrays allocated from arena) from s; strings borrowed from s. */
sl_err_t wh_schema_to_pb(const sl_wh_schema_t *s, sl_arena_t *arena, Sluice__TableSchema *pb);
/* Build and validate a schema from pb. what names the source in messages. */
sl_err_t wh_schema_from_pb(const Sluice__TableSchema *pb, const sl_allocator_t *a,
                           sl_wh_schema_t **out, sl_error_t *err);

/* Whether key is a valid partition key ([A-Za-z_][A-Za-z0-9_]*, <= 64 bytes). */
bool wh_partition_key_ok(const char *key);

/* Check a name (feature, label, column, group). */
sl_err_t wh_check_name(const char *what, const char *name, sl_error_t *err);

/* ---- filesystem helpers ---- */

/* Write len bytes to path atomically (".NAME.tmp", fsync, rename, fsync dir). */
sl_err_t wh_write_file_atomic(const char *path, const void *data, size_t len, bool sync,
                              sl_error_t *err);
/* fsync the directory holding path. */
sl_err_t wh_sync_parent_dir(const char *path, sl_error_t *err);
/* "dir/.name.tmp" for path "dir/name". Caller owns (sl_free(a, p, strlen+1)). */
char *wh_tmp_path(const char *path, const sl_allocator_t *a);

/* protobuf-c allocator over u (common/mem.h: u->a NULL is the default;
 * u->failed tells running out of memory from a malformed message). */
static inline void wh_pb_allocator(sl_unsized_t *u, ProtobufCAllocator *out)
{
    *out = (ProtobufCAllocator){sl_unsized_alloc, sl_unsized_free, u};
}

#endif

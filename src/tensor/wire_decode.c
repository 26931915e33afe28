/* Wire decoder (layout in docs/WIRE.md): checks the prefix, unpacks the
 * protobuf header into the batch's arena, checks every buffer reference
 * against the frame and against the sizes the header declares, points the
 * tensors into the frame (no copy) and validates the result. Every value read
 * from the frame is checked before it is used as a size or an offset. */
#include "sluice/wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "sluice.pb-c.h"
#include "tensor/wire_format.h"

sl_wire_limits_t sl_wire_limits_default(void)
{
    sl_wire_limits_t l;
    l.max_frame_bytes = (uint64_t)1 << 30;
    l.max_batch_size = 1u << 20;
    l.max_keys = 65536;
    l.max_groups = 4096;
    return l;
}

sl_err_t sl_wire_peek_length(const void *prefix, size_t len, const sl_wire_limits_t *limits,
                             uint64_t *frame_len, sl_error_t *err)
{
    sl_wire_limits_t defaults = sl_wire_limits_default();
    const sl_wire_limits_t *lim = limits != NULL ? limits : &defaults;
    const uint8_t *p = prefix;
    if (frame_len != NULL) *frame_len = 0;
    if (len < SL_WIRE_PREFIX_BYTES || p == NULL)
        return sl_error_set(err, SL_ERR_TRUNCATED, "frame: %zu bytes, the prefix alone is %d",
                            p == NULL ? (size_t)0 : len, SL_WIRE_PREFIX_BYTES);
    if (memcmp(p + PREFIX_MAGIC, SL_WIRE_MAGIC, 4) != 0)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "frame: magic %02x %02x %02x %02x is not \"" SL_WIRE_MAGIC "\"", p[0],
                            p[1], p[2], p[3]);
    uint16_t version = load_u16(p + PREFIX_VERSION);
    if (version != SL_WIRE_VERSION)
        return sl_error_set(err, SL_ERR_VERSION, "frame: version %u, this build reads %d", version,
                            SL_WIRE_VERSION);
    uint16_t flags = load_u16(p + PREFIX_FLAGS);
    if (flags != 0)
        return sl_error_set(err, SL_ERR_CORRUPT, "frame: flags 0x%04x, version 1 defines none",
                            flags);
    if (load_u32(p + PREFIX_RESERVED0) != 0 || load_u64(p + PREFIX_RESERVED1) != 0)
        return sl_error_set(err, SL_ERR_CORRUPT, "frame: reserved prefix bytes are not zero");
    uint64_t n = load_u64(p + PREFIX_FRAME_LEN);
    if (n > lim->max_frame_bytes)
        return sl_error_set(err, SL_ERR_TOO_LARGE,
                            "frame: frame_len %" PRIu64 " exceeds the limit of %" PRIu64, n,
                            lim->max_frame_bytes);
    if (n < 2 * SL_WIRE_PREFIX_BYTES || n % SL_ALIGN != 0)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "frame: frame_len %" PRIu64 " is not a multiple of %d of at least %d",
                            n, SL_ALIGN, 2 * SL_WIRE_PREFIX_BYTES);
    uint32_t header_len = load_u32(p + PREFIX_HEADER_LEN);
    if (header_len > n - SL_WIRE_PREFIX_BYTES)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "frame: header_len %u runs past frame_len %" PRIu64, header_len, n);
    if (frame_len != NULL) *frame_len = n;
    return SL_OK;
}

/* protobuf-c allocates the unpacked header from the batch's arena, in
 * 16-byte steps carved from 4 KiB blocks (sl_arena_alloc alone would round
 * every key name up to 64 bytes). Nothing is freed one by one: the header,
 * and the key names the batch points at, go with the arena. */
#define PB_BLOCK 4096

typedef struct pb_arena {
    sl_arena_t *arena;
    unsigned char *at;
    size_t left;
    int failed;
} pb_arena_t;

static void *pb_alloc(void *ctx, size_t size)
{
    pb_arena_t *pa = ctx;
    size_t need = size == 0 ? 16 : (size + 15) & ~(size_t)15;
    if (need < size) return NULL;
    if (need > pa->left) {
        if (need > PB_BLOCK / 4) {
            void *p = sl_arena_alloc(pa->arena, need);
            pa->failed |= p == NULL;
            return p;
        }
        pa->at = sl_arena_alloc(pa->arena, PB_BLOCK);
        if (pa->at == NULL) {
            pa->left = 0;
            pa->failed = 1;
            return NULL;
        }
        pa->left = PB_BLOCK;
    }
    void *p = pa->at;
    pa->at += need;
    pa->left -= need;
    return p;
}

static void pb_free(void *ctx, void *ptr)
{
    (void)ctx;
    (void)ptr;
}

/* What the decoder needs while it walks the header. */
typedef struct dctx {
    const uint8_t *frame;
    uint64_t frame_len;
    uint64_t header_end; /* no buffer may start before this */
    const sl_wire_limits_t *lim;
    sl_arena_t *arena;
    sl_error_t *err;
} dctx_t;

/* Point *out at the bytes ref names, after checking that they are aligned,
 * after the header, inside the frame, and exactly count*elem long. where and
 * field name the buffer in messages ("group 2 'user' unique", "values"). An
 * absent ref is fine when optional (then *out is NULL) or when it would be
 * empty. */
static sl_err_t map_buffer(const dctx_t *c, const Sluice__BufferRef *ref, uint64_t count,
                           uint32_t elem, const char *expr, const char *where, const char *field,
                           int optional, void **out)
{
    *out = NULL;
    uint64_t expect = mul_u64(count, elem);
    if (ref == NULL) {
        if (optional || expect == 0) return SL_OK;
        return sl_error_set(c->err, SL_ERR_CORRUPT,
                            "frame: %s.%s: missing, %s = %" PRIu64 " bytes expected", where, field,
                            expr, expect);
    }
    if (ref->offset % SL_ALIGN != 0)
        return sl_error_set(c->err, SL_ERR_CORRUPT,
                            "frame: %s.%s: offset %" PRIu64 " is not a multiple of %d", where,
                            field, ref->offset, SL_ALIGN);
    if (ref->offset < c->header_end)
        return sl_error_set(c->err, SL_ERR_CORRUPT,
                            "frame: %s.%s: offset %" PRIu64
                            " is inside the header (ends at %" PRIu64 ")",
                            where, field, ref->offset, c->header_end);
    if (ref->offset > c->frame_len || ref->length > c->frame_len - ref->offset)
        return sl_error_set(c->err, SL_ERR_CORRUPT,
                            "frame: %s.%s: offset %" PRIu64 " + length %" PRIu64
                            " runs past frame_len %" PRIu64,
                            where, field, ref->offset, ref->length, c->frame_len);
    if (ref->length != expect) {
        if (expect == UINT64_MAX)
            return sl_error_set(c->err, SL_ERR_CORRUPT,
                                "frame: %s.%s: length %" PRIu64 " != %s, which overflows", where,
                                field, ref->length, expr);
        return sl_error_set(c->err, SL_ERR_CORRUPT,
                            "frame: %s.%s: length %" PRIu64 " != %s = %" PRIu64, where, field,
                            ref->length, expr, expect);
    }
    /* The casts to the element types are safe: offset is 64-aligned in a
     * 64-aligned frame. */
    *out = (void *)(c->frame + ref->offset);
    return SL_OK;
}

/* Decode one KJT description. stride_must, when non-zero, is the stride a KJT
 * with keys must have (the plain KJT's B); a group's U is left to
 * sl_ikjt_validate. */
static sl_err_t decode_kjt(const dctx_t *c, const Sluice__KjtDesc *d, sl_kjt_t *kjt,
                           const char *where, int check_stride, uint32_t stride_must)
{
    memset(kjt, 0, sizeof *kjt);
    if (d == NULL) return SL_OK;
    if (d->n_keys > c->lim->max_keys)
        return sl_error_set(c->err, SL_ERR_TOO_LARGE,
                            "frame: %s.keys: %zu keys exceed the limit of %u", where, d->n_keys,
                            c->lim->max_keys);
    if (d->stride > c->lim->max_batch_size)
        return sl_error_set(c->err, SL_ERR_TOO_LARGE,
                            "frame: %s.stride: %u exceeds the batch size limit of %u", where,
                            d->stride, c->lim->max_batch_size);
    if (check_stride && d->n_keys > 0 && d->stride != stride_must)
        return sl_error_set(c->err, SL_ERR_CORRUPT, "frame: %s.stride: %u != batch_size %u", where,
                            d->stride, stride_must);
    kjt->num_keys = (uint32_t)d->n_keys;
    kjt->stride = d->stride;
    kjt->num_values = d->num_values;
    kjt->keys = (const char **)d->keys;
    void *p;
    SL_FORWARD_IF_ERROR(map_buffer(c, d->lengths, (uint64_t)d->n_keys * d->stride, sizeof(int32_t),
                                   "num_keys*stride*4", where, "lengths", 0, &p));
    kjt->lengths = p;
    SL_FORWARD_IF_ERROR(map_buffer(c, d->values, d->num_values, sizeof(int64_t), "num_values*8",
                                   where, "values", 0, &p));
    kjt->values = p;
    SL_FORWARD_IF_ERROR(map_buffer(c, d->weights, d->num_values, sizeof(float), "num_values*4",
                                   where, "weights", 1, &p));
    kjt->weights = p;
    return SL_OK;
}

static sl_err_t decode_dense(const dctx_t *c, const Sluice__DenseDesc *d, sl_dense_t *out,
                             const char *where)
{
    memset(out, 0, sizeof *out);
    if (d == NULL) return SL_OK;
    if (d->rows > c->lim->max_batch_size)
        return sl_error_set(c->err, SL_ERR_TOO_LARGE,
                            "frame: %s.rows: %u exceeds the batch size limit of %u", where, d->rows,
                            c->lim->max_batch_size);
    if (d->n_names != 0 && d->n_names != d->cols)
        return sl_error_set(c->err, SL_ERR_CORRUPT, "frame: %s.names: %zu names for %u columns",
                            where, d->n_names, d->cols);
    out->rows = d->rows;
    out->cols = d->cols;
    out->names = d->n_names != 0 ? (const char **)d->names : NULL;
    void *p;
    sl_err_t rc = map_buffer(c, d->data, (uint64_t)d->rows * d->cols, sizeof(float), "rows*cols*4",
                             where, "data", 0, &p);
    out->data = p;
    return rc;
}

static sl_err_t decode_header(const dctx_t *c, const Sluice__BatchHeader *h, sl_batch_t *b)
{
    const sl_wire_limits_t *lim = c->lim;
    uint32_t B = h->batch_size;
    if (B > lim->max_batch_size)
        return sl_error_set(c->err, SL_ERR_TOO_LARGE,
                            "frame: batch_size %u exceeds the limit of %u", B, lim->max_batch_size);
    b->batch_size = B;
    SL_FORWARD_IF_ERROR(decode_kjt(c, h->sparse, &b->sparse, "sparse", 1, B));

    if (h->n_groups > lim->max_groups)
        return sl_error_set(c->err, SL_ERR_TOO_LARGE,
                            "frame: groups: %zu groups exceed the limit of %u", h->n_groups,
                            lim->max_groups);
    if (h->n_groups > 0) {
        b->groups = sl_arena_calloc(c->arena, h->n_groups, sizeof(sl_ikjt_t));
        if (b->groups == NULL)
            return sl_error_set(c->err, SL_ERR_NOMEM, "frame: %zu groups", h->n_groups);
    }
    b->num_groups = (uint32_t)h->n_groups;
    for (uint32_t g = 0; g < b->num_groups; g++) {
        const Sluice__IkjtDesc *gd = h->groups[g];
        sl_ikjt_t *ik = &b->groups[g];
        char where[96];
        ik->name = gd->name != NULL ? gd->name : "";
        ik->batch_size = B;
        snprintf(where, sizeof where, "group %u '%.40s' unique", g, ik->name);
        SL_FORWARD_IF_ERROR(decode_kjt(c, gd->unique, &ik->unique, where, 0, 0));
        snprintf(where, sizeof where, "group %u '%.40s'", g, ik->name);
        void *p;
        SL_FORWARD_IF_ERROR(map_buffer(c, gd->inverse_indices, B, sizeof(int32_t), "batch_size*4",
                                       where, "inverse_indices", 0, &p));
        ik->inverse = p;
    }

    SL_FORWARD_IF_ERROR(decode_dense(c, h->dense, &b->dense, "dense"));
    SL_FORWARD_IF_ERROR(decode_dense(c, h->labels, &b->labels, "labels"));
    void *p;
    SL_FORWARD_IF_ERROR(map_buffer(c, h->sample_ids, B, sizeof(int64_t), "batch_size*8", "batch",
                                   "sample_ids", 1, &p));
    b->sample_ids = p;

    if (h->origin != NULL) {
        b->origin.job_id = h->origin->job_id;
        b->origin.epoch = h->origin->epoch;
        b->origin.split_id = h->origin->split_id;
        b->origin.first_row = h->origin->first_row;
        b->origin.sequence = h->origin->sequence;
    }
    return SL_OK;
}

sl_err_t sl_wire_decode(const void *frame, size_t len, const sl_wire_limits_t *limits,
                        const sl_allocator_t *a, sl_batch_t **out, sl_error_t *err)
{
    *out = NULL;
    sl_wire_limits_t defaults = sl_wire_limits_default();
    const sl_wire_limits_t *lim = limits != NULL ? limits : &defaults;
    if (frame == NULL && len > 0)
        return sl_error_set(err, SL_ERR_INVALID, "decode: frame is NULL, len %zu", len);
    if ((uintptr_t)frame % SL_ALIGN != 0)
        return sl_error_set(err, SL_ERR_INVALID, "decode: frame %p is not %d-byte aligned", frame,
                            SL_ALIGN);
    uint64_t frame_len;
    SL_FORWARD_IF_ERROR(sl_wire_peek_length(frame, len, lim, &frame_len, err));
    if (frame_len > len)
        return sl_error_set(err, SL_ERR_TRUNCATED,
                            "frame: frame_len %" PRIu64 " but only %zu bytes received", frame_len,
                            len);
    if (frame_len < len)
        return sl_error_set(err, SL_ERR_CORRUPT,
                            "frame: frame_len %" PRIu64 " but %zu bytes given (trailing bytes)",
                            frame_len, len);
    const uint8_t *f = frame;
    uint32_t header_len = load_u32(f + PREFIX_HEADER_LEN);

    sl_batch_t *b = sl_batch_new(a);
    if (b == NULL) return sl_error_set(err, SL_ERR_NOMEM, "decode: new batch");
    pb_arena_t pa = {b->arena, NULL, 0, 0};
    ProtobufCAllocator pballoc = {pb_alloc, pb_free, &pa};
    Sluice__BatchHeader *h =
        sluice__batch_header__unpack(&pballoc, header_len, f + SL_WIRE_PREFIX_BYTES);
    sl_err_t rc;
    if (h == NULL) {
        rc = pa.failed ? sl_error_set(err, SL_ERR_NOMEM, "frame: header of %u bytes: out of memory",
                                      header_len)
                       : sl_error_set(err, SL_ERR_CORRUPT,
                                      "frame: header (%u bytes): not a valid BatchHeader message",
                                      header_len);
        sl_batch_destroy(b);
        return rc;
    }
    dctx_t c = {f, frame_len, SL_WIRE_PREFIX_BYTES + (uint64_t)header_len, lim, b->arena, err};
    rc = decode_header(&c, h, b);
    if (rc == SL_OK && (rc = sl_batch_validate(b, err)) != SL_OK) {
        /* An invariant broken by bytes from outside is a corrupt frame. */
        rc = SL_ERR_CORRUPT;
        if (err != NULL) err->code = rc;
        sl_error_prefix(err, "frame: ");
    }
    if (rc != SL_OK) {
        sl_batch_destroy(b);
        return rc;
    }
    *out = b;
    return SL_OK;
}

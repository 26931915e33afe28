/* Wire encoder of sl_batch_t (layout in docs/WIRE.md). A "plan" holds the
 * protobuf header messages on the stack, pointing at the batch's own key
 * names, and places every buffer at a 64-byte aligned offset; encoding is
 * then one protobuf pack plus one memcpy per buffer into the caller's frame.
 * The decoder is in wire_decode.c. */
#include "sluice/wire.h"

#include <inttypes.h>
#include <string.h>

#include "common/err.h"
#include "sluice.pb-c.h"
#include "tensor/tensor_internal.h"
#include "tensor/wire_format.h"

/* Groups whose header messages live on the stack; more come from the default
 * allocator. Real jobs have a handful of dedup groups. */
#define STACK_GROUPS 8

typedef struct kjt_plan {
    Sluice__KjtDesc desc;
    Sluice__BufferRef lengths, values, weights;
} kjt_plan_t;

typedef struct group_plan {
    Sluice__IkjtDesc desc;
    kjt_plan_t unique;
    Sluice__BufferRef inverse;
} group_plan_t;

typedef struct dense_plan {
    Sluice__DenseDesc desc;
    Sluice__BufferRef data;
} dense_plan_t;

typedef struct plan {
    Sluice__BatchHeader hdr;
    kjt_plan_t sparse;
    dense_plan_t dense, labels;
    Sluice__BufferRef sample_ids;
    Sluice__BatchOrigin origin;
    uint32_t num_groups;
    group_plan_t *groups;
    Sluice__IkjtDesc **group_descs;
    group_plan_t stack_groups[STACK_GROUPS];
    Sluice__IkjtDesc *stack_descs[STACK_GROUPS];
    size_t heap_bytes; /* of groups + group_descs when not on the stack */
    uint64_t header_len;
    uint64_t frame_len;
} plan_t;

/* The protobuf structs take char **; pack only reads through them. */
static void kjt_describe(kjt_plan_t *p, const sl_kjt_t *kjt)
{
    p->desc = (Sluice__KjtDesc)SLUICE__KJT_DESC__INIT;
    p->lengths = (Sluice__BufferRef)SLUICE__BUFFER_REF__INIT;
    p->values = (Sluice__BufferRef)SLUICE__BUFFER_REF__INIT;
    p->weights = (Sluice__BufferRef)SLUICE__BUFFER_REF__INIT;
    p->desc.n_keys = kjt->num_keys;
    p->desc.keys = (char **)kjt->keys;
    p->desc.stride = kjt->stride;
    p->desc.num_values = kjt->num_values;
    p->desc.lengths = &p->lengths;
    p->desc.values = &p->values;
    p->desc.weights = kjt->weights != NULL ? &p->weights : NULL;
}

static void dense_describe(dense_plan_t *p, const sl_dense_t *d)
{
    p->desc = (Sluice__DenseDesc)SLUICE__DENSE_DESC__INIT;
    p->data = (Sluice__BufferRef)SLUICE__BUFFER_REF__INIT;
    p->desc.n_names = d->names != NULL ? d->cols : 0;
    p->desc.names = (char **)d->names;
    p->desc.rows = d->rows;
    p->desc.cols = d->cols;
    p->desc.data = &p->data;
}

static void plan_release(plan_t *p)
{
    if (p->heap_bytes != 0) sl_free(NULL, p->groups, p->heap_bytes);
    p->heap_bytes = 0;
}

/* Fill the header messages (offsets still 0). Reads only the batch's sizes
 * and names, never its buffers. */
static sl_err_t plan_describe(plan_t *p, const sl_batch_t *b)
{
    p->hdr = (Sluice__BatchHeader)SLUICE__BATCH_HEADER__INIT;
    p->heap_bytes = 0;
    p->num_groups = b->num_groups;
    p->hdr.batch_size = b->batch_size;
    kjt_describe(&p->sparse, &b->sparse);
    p->hdr.sparse = &p->sparse.desc;

    p->groups = p->stack_groups;
    p->group_descs = p->stack_descs;
    if (b->num_groups > STACK_GROUPS) {
        /* One block: the group plans, then the pointer array protobuf wants. */
        size_t plans = sl_mul_size(b->num_groups, sizeof(group_plan_t));
        size_t ptrs = sl_mul_size(b->num_groups, sizeof(Sluice__IkjtDesc *));
        if (plans == SIZE_MAX || ptrs == SIZE_MAX) return SL_ERR_INVALID;
        p->groups = sl_alloc(NULL, plans + ptrs);
        if (p->groups == NULL) return SL_ERR_NOMEM;
        p->heap_bytes = plans + ptrs;
        p->group_descs = (Sluice__IkjtDesc **)((char *)p->groups + plans);
    }
    for (uint32_t g = 0; g < b->num_groups; g++) {
        const sl_ikjt_t *src = &b->groups[g];
        group_plan_t *gp = &p->groups[g];
        gp->desc = (Sluice__IkjtDesc)SLUICE__IKJT_DESC__INIT;
        gp->inverse = (Sluice__BufferRef)SLUICE__BUFFER_REF__INIT;
        gp->desc.name = (char *)(src->name != NULL ? src->name : "");
        kjt_describe(&gp->unique, &src->unique);
        gp->desc.unique = &gp->unique.desc;
        gp->desc.inverse_indices = &gp->inverse;
        p->group_descs[g] = &gp->desc;
    }
    p->hdr.n_groups = b->num_groups;
    p->hdr.groups = p->group_descs;

    /* An all-zero dense block (the default of a new batch) is left out. */
    dense_describe(&p->dense, &b->dense);
    if (b->dense.rows != 0 || b->dense.cols != 0) p->hdr.dense = &p->dense.desc;
    dense_describe(&p->labels, &b->labels);
    if (b->labels.rows != 0 || b->labels.cols != 0) p->hdr.labels = &p->labels.desc;

    p->sample_ids = (Sluice__BufferRef)SLUICE__BUFFER_REF__INIT;
    if (b->sample_ids != NULL) p->hdr.sample_ids = &p->sample_ids;

    p->origin = (Sluice__BatchOrigin)SLUICE__BATCH_ORIGIN__INIT;
    p->origin.job_id = b->origin.job_id;
    p->origin.epoch = b->origin.epoch;
    p->origin.split_id = b->origin.split_id;
    p->origin.first_row = b->origin.first_row;
    p->origin.sequence = b->origin.sequence;
    p->hdr.origin = &p->origin;
    return SL_OK;
}

/* Give ref the bytes [at, at+len) and return where the next buffer may start
 * (64-aligned), or UINT64_MAX once anything has overflowed. */
static uint64_t place(Sluice__BufferRef *ref, uint64_t at, uint64_t len)
{
    if (at == UINT64_MAX || len == UINT64_MAX || len > UINT64_MAX - at) return UINT64_MAX;
    ref->offset = at;
    ref->length = len;
    return align_up64(at + len);
}

static uint64_t place_kjt(kjt_plan_t *p, uint64_t at)
{
    const Sluice__KjtDesc *d = &p->desc;
    at = place(&p->lengths, at, mul_u64(mul_u64(d->n_keys, d->stride), sizeof(int32_t)));
    at = place(&p->values, at, mul_u64(d->num_values, sizeof(int64_t)));
    if (d->weights != NULL) at = place(&p->weights, at, mul_u64(d->num_values, sizeof(float)));
    return at;
}

/* Every buffer in one fixed order (docs/WIRE.md); returns the end. */
static uint64_t place_all(plan_t *p, uint64_t at)
{
    at = place_kjt(&p->sparse, at);
    for (uint32_t g = 0; g < p->num_groups; g++) {
        at = place_kjt(&p->groups[g].unique, at);
        at = place(&p->groups[g].inverse, at, mul_u64(p->hdr.batch_size, sizeof(int32_t)));
    }
    if (p->hdr.dense != NULL)
        at = place(&p->dense.data, at,
                   mul_u64(mul_u64(p->dense.desc.rows, p->dense.desc.cols), sizeof(float)));
    if (p->hdr.labels != NULL)
        at = place(&p->labels.data, at,
                   mul_u64(mul_u64(p->labels.desc.rows, p->labels.desc.cols), sizeof(float)));
    if (p->hdr.sample_ids != NULL)
        at = place(&p->sample_ids, at, mul_u64(p->hdr.batch_size, sizeof(int64_t)));
    return at;
}

/* The header's size depends on the offsets (varints) and the offsets on the
 * header's size. Start the buffers right after the prefix and push them back
 * until the header fits: offsets only grow, so the packed size only grows,
 * and the loop ends after a few rounds (each varint gains at most 9 bytes). */
static sl_err_t plan_layout(plan_t *p)
{
    uint64_t data_start = align_up64(SL_WIRE_PREFIX_BYTES);
    for (;;) {
        uint64_t end = place_all(p, data_start);
        if (end == UINT64_MAX || end > SIZE_MAX) return SL_ERR_TOO_LARGE;
        size_t h = protobuf_c_message_get_packed_size(&p->hdr.base);
        if (h > UINT32_MAX) return SL_ERR_TOO_LARGE;
        uint64_t need = align_up64(SL_WIRE_PREFIX_BYTES + (uint64_t)h);
        if (need <= data_start) {
            p->header_len = h;
            p->frame_len = end;
            return SL_OK;
        }
        data_start = need;
    }
}

size_t sl_wire_encoded_size(const sl_batch_t *batch)
{
    plan_t p;
    if (batch == NULL || plan_describe(&p, batch) != SL_OK) {
        if (batch != NULL) plan_release(&p);
        return 0;
    }
    sl_err_t rc = plan_layout(&p);
    plan_release(&p);
    return rc == SL_OK ? (size_t)p.frame_len : 0;
}

/* Copy n lengths to dst and return their sum, setting *negative when one is
 * below zero: the check sum(lengths) == num_values rides on the copy instead
 * of a pass of its own (the lengths of a batch of single ids are a third of
 * its bytes). Blocks of 64 with 32-bit lane sums, as in
 * sl_lengths_sum: a block with a length >= 2^16 is summed again in 64 bits. */
static uint64_t copy_lengths(int32_t *restrict dst, const int32_t *restrict src, uint64_t n,
                             bool *negative)
{
    enum { BLOCK = 64 };
    uint64_t sum = 0;
    uint32_t any = 0;
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        const int32_t *s = src + i;
        int32_t *d = dst + i;
        uint32_t block = 0, bits = 0;
        for (int j = 0; j < BLOCK; j++) {
            uint32_t v = (uint32_t)s[j];
            d[j] = s[j];
            block += v;
            bits |= v;
        }
        if (bits >> 16 != 0) {
            uint64_t wide = 0;
            for (int j = 0; j < BLOCK; j++)
                wide += (uint32_t)s[j];
            sum += wide;
        } else {
            sum += block;
        }
        any |= bits;
    }
    for (; i < n; i++) {
        uint32_t v = (uint32_t)src[i];
        dst[i] = src[i];
        sum += v;
        any |= v;
    }
    *negative = any >> 31 != 0;
    return sum;
}

/* Copy one buffer to its place, zeroing the gap before it; returns the new
 * write position. */
static uint64_t put(uint8_t *frame, uint64_t pos, const Sluice__BufferRef *ref, const void *src)
{
    memset(frame + pos, 0, (size_t)(ref->offset - pos));
    if (ref->length != 0) memcpy(frame + ref->offset, src, (size_t)ref->length);
    return ref->offset + ref->length;
}

/* Like put for every buffer of kjt; clears *ok when the lengths are not
 * non-negative and summing to num_values. */
static uint64_t put_kjt(uint8_t *frame, uint64_t pos, const kjt_plan_t *p, const sl_kjt_t *kjt,
                        bool *ok)
{
    const Sluice__BufferRef *ref = &p->lengths;
    memset(frame + pos, 0, (size_t)(ref->offset - pos));
    bool negative;
    uint64_t sum = copy_lengths((int32_t *)(frame + ref->offset), kjt->lengths,
                                ref->length / sizeof(int32_t), &negative);
    if (negative || sum != kjt->num_values) *ok = false;
    pos = ref->offset + ref->length;
    pos = put(frame, pos, &p->values, kjt->values);
    if (p->desc.weights != NULL) pos = put(frame, pos, &p->weights, kjt->weights);
    return pos;
}

static void write_prefix(uint8_t *frame, uint32_t header_len, uint64_t frame_len)
{
    memcpy(frame + PREFIX_MAGIC, SL_WIRE_MAGIC, 4);
    store_u16(frame + PREFIX_VERSION, SL_WIRE_VERSION);
    store_u16(frame + PREFIX_FLAGS, 0);
    store_u32(frame + PREFIX_HEADER_LEN, header_len);
    store_u32(frame + PREFIX_RESERVED0, 0);
    store_u64(frame + PREFIX_FRAME_LEN, frame_len);
    store_u64(frame + PREFIX_RESERVED1, 0);
}

/* Check check's shape (b's, or b's with stand-in buffers), lay out b's
 * frame in buf (cap bytes) and write its prefix and header; *pos gets
 * where the header ends. On success *p holds the plan (release it); on
 * failure it is released and err says what (messages begin with what). */
static sl_err_t frame_begin(const sl_batch_t *check, const sl_batch_t *b, void *buf, size_t cap,
                            const char *what, plan_t *p, uint64_t *pos, sl_error_t *err)
{
    sl_err_t rc = sl_batch_validate_shape(check, err);
    if (rc != SL_OK) {
        sl_error_prefix(err, "%s: ", what);
        return rc;
    }
    rc = plan_describe(p, b);
    if (rc == SL_OK) rc = plan_layout(p);
    if (rc != SL_OK) {
        plan_release(p);
        return sl_error_set(err, rc, "%s: batch of %u rows, %u groups: sizes overflow (%s)", what,
                            b->batch_size, b->num_groups, sl_err_str(rc));
    }
    if (p->frame_len > cap) {
        plan_release(p);
        return sl_error_set(err, SL_ERR_TOO_LARGE,
                            "%s: frame needs %" PRIu64 " bytes, buffer has %zu", what, p->frame_len,
                            cap);
    }
    uint8_t *frame = buf;
    write_prefix(frame, (uint32_t)p->header_len, p->frame_len);
    size_t packed = protobuf_c_message_pack(&p->hdr.base, frame + SL_WIRE_PREFIX_BYTES);
    if (packed != p->header_len) {
        plan_release(p);
        return sl_error_set(err, SL_ERR_INVALID, "%s: header packed to %zu bytes, not %" PRIu64,
                            what, packed, p->header_len);
    }
    *pos = SL_WIRE_PREFIX_BYTES + (uint64_t)packed;
    return SL_OK;
}

sl_err_t sl_wire_encode_into(const sl_batch_t *batch, void *buf, size_t cap, size_t *len,
                             sl_error_t *err)
{
    if (len != NULL) *len = 0;
    if (batch == NULL || buf == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "encode: %s is NULL",
                            batch == NULL ? "batch" : "buf");
    if ((uintptr_t)buf % SL_ALIGN != 0)
        return sl_error_set(err, SL_ERR_INVALID, "encode: buf %p is not %d-byte aligned", buf,
                            SL_ALIGN);
    /* A frame the decoder would reject must not leave. Everything but the
     * lengths is checked here; the lengths while they are copied. */
    plan_t p;
    uint64_t pos;
    SL_FORWARD_IF_ERROR(frame_begin(batch, batch, buf, cap, "encode", &p, &pos, err));
    uint8_t *frame = buf;
    bool lengths_ok = true;
    pos = put_kjt(frame, pos, &p.sparse, &batch->sparse, &lengths_ok);
    for (uint32_t g = 0; g < p.num_groups; g++) {
        pos = put_kjt(frame, pos, &p.groups[g].unique, &batch->groups[g].unique, &lengths_ok);
        pos = put(frame, pos, &p.groups[g].inverse, batch->groups[g].inverse);
    }
    if (p.hdr.dense != NULL) pos = put(frame, pos, &p.dense.data, batch->dense.data);
    if (p.hdr.labels != NULL) pos = put(frame, pos, &p.labels.data, batch->labels.data);
    if (p.hdr.sample_ids != NULL) pos = put(frame, pos, &p.sample_ids, batch->sample_ids);
    memset(frame + pos, 0, (size_t)(p.frame_len - pos));
    plan_release(&p);
    if (!lengths_ok) {
        /* Rare: let the full validation find and name the bad length. */
        sl_err_t rc = sl_batch_validate(batch, err);
        if (rc == SL_OK) rc = sl_error_set(err, SL_ERR_INVALID, "lengths changed while encoding");
        sl_error_prefix(err, "encode: ");
        return rc;
    }
    if (len != NULL) *len = (size_t)p.frame_len;
    return SL_OK;
}

/* The frame's buffers as a batch view into frame (names borrowed from the
 * shape it was laid out for). */
static void view_kjt(sl_kjt_t *v, const sl_kjt_t *shape, const kjt_plan_t *p, uint8_t *frame)
{
    *v = *shape;
    v->lengths = (int32_t *)(frame + p->lengths.offset);
    v->values = (int64_t *)(frame + p->values.offset);
    v->weights = p->desc.weights != NULL ? (float *)(frame + p->weights.offset) : NULL;
}

sl_err_t sl_wire_encode_layout(const sl_batch_t *shape, void *buf, size_t cap, size_t *len,
                               sl_batch_t *view, sl_error_t *err)
{
    if (len != NULL) *len = 0;
    if (shape == NULL || buf == NULL || view == NULL)
        return sl_error_set(err, SL_ERR_INVALID, "encode layout: %s is NULL",
                            shape == NULL ? "shape"
                            : buf == NULL ? "buf"
                                          : "view");
    if ((uintptr_t)buf % SL_ALIGN != 0)
        return sl_error_set(err, SL_ERR_INVALID, "encode layout: buf %p is not %d-byte aligned",
                            buf, SL_ALIGN);
    if (shape->num_groups != 0)
        return sl_error_set(err, SL_ERR_UNSUPPORTED,
                            "encode layout: a batch with %u dedup groups (only plain batches)",
                            shape->num_groups);
    /* The shape's invariants (keys named and distinct, rows agreeing) with
     * stand-in buffers: shape has none yet. */
    sl_batch_t check = *shape;
    check.sparse.lengths = buf;
    check.sparse.values = buf;
    check.dense.data = buf;
    check.labels.data = buf;
    plan_t p;
    uint64_t pos;
    SL_FORWARD_IF_ERROR(frame_begin(&check, shape, buf, cap, "encode layout", &p, &pos, err));
    plan_release(&p); /* no groups: nothing was allocated */
    uint8_t *frame = buf;
    /* Zero every byte that is no buffer (the gaps before the 64-byte aligned
     * offsets and the tail): the frame's bytes are then all defined once
     * the caller has filled the buffers. */
    const Sluice__BufferRef *refs[6];
    uint32_t nr = 0;
    refs[nr++] = &p.sparse.lengths;
    refs[nr++] = &p.sparse.values;
    if (p.sparse.desc.weights != NULL) refs[nr++] = &p.sparse.weights;
    if (p.hdr.dense != NULL) refs[nr++] = &p.dense.data;
    if (p.hdr.labels != NULL) refs[nr++] = &p.labels.data;
    if (p.hdr.sample_ids != NULL) refs[nr++] = &p.sample_ids;
    for (uint32_t i = 0; i < nr; i++) {
        memset(frame + pos, 0, (size_t)(refs[i]->offset - pos));
        pos = refs[i]->offset + refs[i]->length;
    }
    memset(frame + pos, 0, (size_t)(p.frame_len - pos));
    memset(view, 0, sizeof *view);
    view->batch_size = shape->batch_size;
    view_kjt(&view->sparse, &shape->sparse, &p.sparse, frame);
    view->dense = shape->dense;
    view->dense.data = p.hdr.dense != NULL ? (float *)(frame + p.dense.data.offset) : NULL;
    view->labels = shape->labels;
    view->labels.data = p.hdr.labels != NULL ? (float *)(frame + p.labels.data.offset) : NULL;
    view->sample_ids = p.hdr.sample_ids != NULL ? (int64_t *)(frame + p.sample_ids.offset) : NULL;
    view->origin = shape->origin;
    if (len != NULL) *len = (size_t)p.frame_len;
    return SL_OK;
}

sl_err_t sl_wire_encode(const sl_batch_t *batch, const sl_allocator_t *a, void **frame, size_t *len,
                        sl_error_t *err)
{
    *frame = NULL;
    *len = 0;
    if (batch == NULL) return sl_error_set(err, SL_ERR_INVALID, "encode: batch is NULL");
    return sl_wire_encode_sized(batch, sl_wire_encoded_size(batch), a, frame, len, err);
}

sl_err_t sl_wire_encode_sized(const sl_batch_t *batch, size_t size, const sl_allocator_t *a,
                              void **frame, size_t *len, sl_error_t *err)
{
    *frame = NULL;
    *len = 0;
    if (size == 0)
        return sl_error_set(err, SL_ERR_TOO_LARGE, "encode: batch of %u rows: sizes overflow",
                            batch->batch_size);
    void *buf = sl_alloc_aligned(a, size, SL_ALIGN);
    if (buf == NULL) return sl_error_set(err, SL_ERR_NOMEM, "encode: frame of %zu bytes", size);
    sl_err_t rc = sl_wire_encode_into(batch, buf, size, len, err);
    if (rc != SL_OK) {
        sl_free(a, buf, size);
        *len = 0;
        return rc;
    }
    *frame = buf;
    return SL_OK;
}

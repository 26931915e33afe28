/* Fuzz target for the wire decoder: any input either fails to decode with an
 * error or decodes to a batch that re-encodes to a frame that decodes to the
 * same batch and re-encodes to the same bytes (determinism). Sanitizers
 * catch out-of-bounds reads; a broken round trip aborts. Seed inputs are in
 * tests/fuzz/corpus/wire_decode/ (written by wire_test's corpus.write). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/wire.h"

static bool dense_equal(const sl_dense_t *a, const sl_dense_t *b)
{
    if (a->rows != b->rows || a->cols != b->cols) return false;
    size_t n = (size_t)a->rows * a->cols;
    if (n > 0 && memcmp(a->data, b->data, n * sizeof(float)) != 0) return false;
    if (a->cols == 0) return true;
    if ((a->names == NULL) != (b->names == NULL)) return false;
    for (uint32_t c = 0; a->names != NULL && c < a->cols; c++)
        if (strcmp(a->names[c], b->names[c]) != 0) return false;
    return true;
}

static bool batch_equal(const sl_batch_t *a, const sl_batch_t *b)
{
    if (a->batch_size != b->batch_size || a->num_groups != b->num_groups) return false;
    if (!sl_kjt_equal(&a->sparse, &b->sparse)) return false;
    for (uint32_t g = 0; g < a->num_groups; g++) {
        const sl_ikjt_t *x = &a->groups[g], *y = &b->groups[g];
        if (strcmp(x->name, y->name) != 0 || x->batch_size != y->batch_size) return false;
        if (!sl_kjt_equal(&x->unique, &y->unique)) return false;
        if (x->batch_size > 0 &&
            memcmp(x->inverse, y->inverse, x->batch_size * sizeof(int32_t)) != 0)
            return false;
    }
    if (!dense_equal(&a->dense, &b->dense) || !dense_equal(&a->labels, &b->labels)) return false;
    if ((a->sample_ids == NULL) != (b->sample_ids == NULL)) return false;
    if (a->sample_ids != NULL && a->batch_size > 0 &&
        memcmp(a->sample_ids, b->sample_ids, a->batch_size * sizeof(int64_t)) != 0)
        return false;
    const sl_batch_origin_t *o = &a->origin, *q = &b->origin;
    return o->job_id == q->job_id && o->epoch == q->epoch && o->split_id == q->split_id &&
           o->first_row == q->first_row && o->sequence == q->sequence;
}

static void fail(const char *what, const sl_error_t *err)
{
    fprintf(stderr, "wire_decode_fuzz: %s: %s\n", what, err != NULL ? err->msg : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Small limits keep every input cheap; the checks are the same. */
    sl_wire_limits_t lim = {
        .max_frame_bytes = 1 << 20, .max_batch_size = 4096, .max_keys = 256, .max_groups = 64};
    /* The decoder wants a 64-aligned frame; the copy also puts the end of
     * the input at the end of an allocation, where ASan sees overreads. */
    uint8_t *frame = sl_alloc_aligned(NULL, size, SL_ALIGN);
    if (frame == NULL) return 0;
    if (size > 0) memcpy(frame, data, size);

    sl_error_t err = {0};
    sl_batch_t *first = NULL;
    if (sl_wire_decode(frame, size, &lim, NULL, &first, &err) != SL_OK) {
        if (first != NULL || err.code == SL_OK || err.msg[0] == '\0')
            fail("a rejected frame must set an error and no batch", &err);
        sl_free(NULL, frame, size);
        return 0;
    }

    void *again = NULL;
    size_t again_len = 0;
    if (sl_wire_encode(first, NULL, &again, &again_len, &err) != SL_OK)
        fail("a decoded batch does not encode", &err);
    /* Buffers that overlapped in the input are laid out apart now, so the
     * new frame may outgrow the small frame limit. */
    sl_wire_limits_t relaxed = lim;
    relaxed.max_frame_bytes = sl_wire_limits_default().max_frame_bytes;
    sl_batch_t *second = NULL;
    if (sl_wire_decode(again, again_len, &relaxed, NULL, &second, &err) != SL_OK)
        fail("a re-encoded frame does not decode", &err);
    if (!batch_equal(first, second)) fail("decode(encode(decode(x))) != decode(x)", NULL);

    void *third = NULL;
    size_t third_len = 0;
    if (sl_wire_encode(second, NULL, &third, &third_len, &err) != SL_OK)
        fail("the second batch does not encode", &err);
    if (third_len != again_len || memcmp(third, again, again_len) != 0)
        fail("encoding is not deterministic", NULL);

    sl_free(NULL, third, third_len);
    sl_batch_destroy(second);
    sl_free(NULL, again, again_len);
    sl_batch_destroy(first);
    sl_free(NULL, frame, size);
    return 0;
}

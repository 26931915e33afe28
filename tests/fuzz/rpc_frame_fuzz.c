/* Fuzz target for the trainer protocol framing: the input is a byte stream
 * from a peer, read frame by frame through sl_rpc_recv_from (from memory,
 * in chunks whose sizes the input's first byte varies, as a socket would
 * deliver them); BATCH payloads go through sl_wire_decode as the trainer
 * client does, and every frame goes through the server's check of an
 * authentication answer (rpc/auth.h) as the first frame of a connection
 * would. Every frame either decodes or fails with a code and a message;
 * nothing crashes or leaks (sanitizers). Seed inputs are in
 * tests/fuzz/corpus/rpc_frame/. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/auth.h"
#include "rpc/frame.h"
#include "sluice/wire.h"

typedef struct mem_reader {
    const uint8_t *p;
    size_t left;
    size_t chunk; /* at most this many bytes per read, like a socket */
} mem_reader_t;

static ssize_t mem_read(void *ctx, void *buf, size_t len)
{
    mem_reader_t *r = ctx;
    size_t n = len < r->left ? len : r->left;
    if (n > r->chunk) n = r->chunk;
    memcpy(buf, r->p, n);
    r->p += n;
    r->left -= n;
    return (ssize_t)n;
}

static void fail(const char *what, const sl_error_t *err)
{
    fprintf(stderr, "rpc_frame_fuzz: %s: %s\n", what, err->msg);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    /* Small limits keep every input cheap; the checks are the same. */
    sl_rpc_limits_t lim = {.max_message_bytes = 1 << 16, .max_payload_bytes = 1 << 20};
    sl_wire_limits_t wl = {
        .max_frame_bytes = 1 << 20, .max_batch_size = 4096, .max_keys = 256, .max_groups = 64};
    mem_reader_t r = {.p = data + 1, .left = size - 1, .chunk = 1 + (size_t)data[0] * 7};
    for (int frames = 0; frames < 64; frames++) {
        sl_rpc_frame_t f;
        sl_error_t err = {0};
        sl_err_t rc = sl_rpc_recv_from(mem_read, &r, &lim, NULL, &f, &err);
        if (rc != SL_OK) {
            if (err.code != rc || err.msg[0] == '\0') fail("an error without a message", &err);
            if (f.msg != NULL || f.payload != NULL) fail("a failed receive left a frame", &err);
            break;
        }
        if (f.msg == NULL || f.type < SL_RPC_HELLO || f.type > SL_RPC_TYPE_MAX)
            fail("a received frame without a message", &err);
        if (f.type == SL_RPC_BATCH && f.payload != NULL) {
            if ((uintptr_t)f.payload % SL_ALIGN != 0) fail("payload not aligned", &err);
            sl_batch_t *b = NULL;
            if (sl_wire_decode(f.payload, f.payload_len, &wl, NULL, &b, &err) != SL_OK) {
                if (b != NULL || err.msg[0] == '\0') fail("decode failed without message", &err);
            } else {
                /* Use the batch as a trainer would. */
                uint64_t sum = 0;
                for (uint64_t v = 0; v < b->sparse.num_values; v++)
                    sum += (uint64_t)b->sparse.values[v];
                (void)sum;
                sl_batch_destroy(b);
            }
        }
        /* A forged answer never passes (no fd to send AUTH_OK on: a pass
         * would be SL_ERR_IO, never SL_OK) and is refused with a reason. */
        static const uint8_t nonce[SL_RPC_AUTH_NONCE_BYTES] = {1, 2, 3};
        sl_error_t aerr = {0};
        sl_err_t arc = sl_rpc_auth_answer(-1, "a secret of sixteen bytes", nonce, &f, &aerr);
        if (arc == SL_OK || aerr.msg[0] == '\0') fail("an authentication answer passed", &aerr);
        sl_rpc_frame_free(&f);
    }
    return 0;
}

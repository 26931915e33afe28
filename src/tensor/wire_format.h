/* Private to the wire encoder (wire.c) and decoder (wire_decode.c): the byte
 * positions of the 32-byte frame prefix (docs/WIRE.md) and little-endian
 * loads and stores that do not assume the frame is aligned for them. */
#ifndef SLUICE_TENSOR_WIRE_FORMAT_H
#define SLUICE_TENSOR_WIRE_FORMAT_H

#include <stdint.h>
#include <string.h>

/* Tensor buffers are handed out as views into the frame, so the frame's
 * byte order must be the host's. Every platform we build for is
 * little-endian; a big-endian port needs a byte-swapping decoder. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "sluice wire frames are little-endian");

enum {
    PREFIX_MAGIC = 0,      /* 4 bytes "SLCB" */
    PREFIX_VERSION = 4,    /* u16 */
    PREFIX_FLAGS = 6,      /* u16, 0 in version 1 */
    PREFIX_HEADER_LEN = 8, /* u32 */
    PREFIX_RESERVED0 = 12, /* u32, 0 */
    PREFIX_FRAME_LEN = 16, /* u64 */
    PREFIX_RESERVED1 = 24, /* u64, 0 */
};

static inline uint16_t load_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t load_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_u16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, sizeof v);
}

static inline void store_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

static inline void store_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}

/* Round up to a multiple of SL_ALIGN in 64 bits; UINT64_MAX on overflow. */
static inline uint64_t align_up64(uint64_t n)
{
    if (n > UINT64_MAX - 63) return UINT64_MAX;
    return (n + 63) & ~(uint64_t)63;
}

/* a*b, or UINT64_MAX when it overflows (no valid buffer is that long). */
static inline uint64_t mul_u64(uint64_t a, uint64_t b)
{
    if (b != 0 && a > UINT64_MAX / b) return UINT64_MAX;
    return a * b;
}

#endif

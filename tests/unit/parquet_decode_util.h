/* What parquet_decode_test.c and parquet_reader_test.c share: a fixed
 * byte buffer and the Thrift compact fields of a file built by hand. */
#ifndef SLUICE_TESTS_PARQUET_DECODE_UTIL_H
#define SLUICE_TESTS_PARQUET_DECODE_UTIL_H

/* Every helper here: a test file uses only some. */
#define PD_FN static __attribute__((unused))

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "parquet/thrift.h"

/* Thrift compact helpers for building a file by hand. */
typedef struct w {
    uint8_t b[4096];
    size_t n;
} w_t;

PD_FN void put(w_t *w, const void *p, size_t n)
{
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
PD_FN void byte(w_t *w, uint8_t x)
{
    w->b[w->n++] = x;
}
PD_FN void varint(w_t *w, uint64_t v)
{
    while (v >= 0x80) {
        byte(w, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    byte(w, (uint8_t)v);
}
PD_FN void fint(w_t *w, int delta, int type, int64_t v)
{
    byte(w, (uint8_t)(delta << 4 | type));
    varint(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}
PD_FN void fbin(w_t *w, int delta, const char *s)
{
    byte(w, (uint8_t)(delta << 4 | SL_PQ_T_BINARY));
    varint(w, strlen(s));
    put(w, s, strlen(s));
}

#endif

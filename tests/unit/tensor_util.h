/* What tensor_test.c and tensor_ikjt_test.c share: a counting allocator that
 * can fail its n-th call, a KJT over caller arrays, exact-array asserts. */
#ifndef SLUICE_TESTS_TENSOR_UTIL_H
#define SLUICE_TESTS_TENSOR_UTIL_H

/* Every helper here: a test file uses only some. */
#define TT_FN static __attribute__((unused))

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/tensor.h"
#include "testutil.h"

/* ---- a counting allocator that can fail its n-th call -------------------------- */

typedef struct counting {
    long live;    /* allocations not yet freed */
    long calls;   /* allocations attempted */
    long fail_at; /* the call that fails (1-based); 0: none */
} counting_t;

TT_FN void *counting_alloc(void *ctx, size_t size, size_t align)
{
    counting_t *c = ctx;
    if (++c->calls == c->fail_at) return NULL;
    void *p = sl_allocator_default()->alloc(NULL, size, align);
    if (p != NULL) c->live++;
    return p;
}

TT_FN void counting_free(void *ctx, void *ptr, size_t size)
{
    counting_t *c = ctx;
    if (ptr == NULL) return;
    c->live--;
    sl_allocator_default()->free(NULL, ptr, size);
}

/* ---- helpers ---------------------------------------------------------------------- */

/* A KJT over caller arrays (not copied). */
TT_FN sl_kjt_t kjt_of(uint32_t num_keys, const char **keys, uint32_t stride, int32_t *lengths,
                      uint64_t num_values, int64_t *values, float *weights)
{
    sl_kjt_t k = {num_keys, stride, num_values, keys, lengths, values, weights};
    return k;
}

#define ASSERT_INTS(got, n, ...)                                                                   \
    do {                                                                                           \
        const int64_t want_[] = {__VA_ARGS__};                                                     \
        cr_assert_eq((size_t)(n), sizeof want_ / sizeof want_[0], "count %zu", (size_t)(n));       \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                             \
            cr_assert_eq((int64_t)(got)[i_], want_[i_], "[%zu]: %lld != %lld", i_,                 \
                         (long long)(got)[i_], (long long)want_[i_]);                              \
    } while (0)

#define ASSERT_FLOATS(got, n, ...)                                                                 \
    do {                                                                                           \
        const float want_[] = {__VA_ARGS__};                                                       \
        cr_assert_eq((size_t)(n), sizeof want_ / sizeof want_[0]);                                 \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                             \
            cr_assert_eq((got)[i_], want_[i_], "[%zu]: %g != %g", i_, (double)(got)[i_],           \
                         (double)want_[i_]);                                                       \
    } while (0)

TT_FN void expect_err(sl_err_t rc, const sl_error_t *err, sl_err_t code, const char *msg)
{
    cr_assert_eq(rc, code, "got %s (%s)", sl_err_str(rc), err->msg);
    cr_assert_eq(err->code, code);
    cr_assert_str_eq(err->msg, msg);
}

#endif

/* Whose failure it is (dpp_worker_split_error, runtime/worker_internal.h):
 * the split's, reported to the master while the worker goes on, or the
 * worker's, which stops it. By where the failure came from: reading the
 * split's bytes through the table reader (its store) makes a timeout, a
 * server that ignored the Range or "again" the split's; the same codes from
 * the worker's own work or links (the master's) stay the worker's. */
#include <criterion/criterion.h>

#include "dpp/worker/runtime/worker_internal.h"

Test(worker_split_error, the_origin_decides_for_timeouts_and_protocol_errors)
{
    static const struct {
        sl_err_t rc;
        bool read, other; /* a split error when from the read, when not */
    } cases[] = {
        {SL_OK, false, false},          {SL_ERR_NOMEM, false, false},
        {SL_ERR_CLOSED, false, false},  {SL_ERR_TIMEOUT, true, false},
        {SL_ERR_PROTOCOL, true, false}, {SL_ERR_AGAIN, true, false},
        {SL_ERR_INVALID, true, true},   {SL_ERR_CORRUPT, true, true},
        {SL_ERR_TRUNCATED, true, true}, {SL_ERR_VERSION, true, true},
        {SL_ERR_TOO_LARGE, true, true}, {SL_ERR_IO, true, true},
        {SL_ERR_NOT_FOUND, true, true}, {SL_ERR_UNSUPPORTED, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(dpp_worker_split_error(cases[i].rc, true), cases[i].read,
                     "%s from the table reader", sl_err_str(cases[i].rc));
        cr_assert_eq(dpp_worker_split_error(cases[i].rc, false), cases[i].other,
                     "%s from elsewhere", sl_err_str(cases[i].rc));
    }
}

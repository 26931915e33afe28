/* Private to src/tensor: validation without the scan of the KJT lengths
 * (their sum and sign). The wire encoder checks the lengths while it copies
 * them into the frame, so it reads them once instead of twice; everything
 * else it checks through these. Each sl_*_validate is its _shape variant
 * plus that scan. */
#ifndef SLUICE_TENSOR_INTERNAL_H
#define SLUICE_TENSOR_INTERNAL_H

#include "sluice/tensor.h"

sl_err_t sl_kjt_validate_shape(const sl_kjt_t *kjt, sl_error_t *err);
sl_err_t sl_ikjt_validate_shape(const sl_ikjt_t *ikjt, sl_error_t *err);
sl_err_t sl_batch_validate_shape(const sl_batch_t *batch, sl_error_t *err);

#endif

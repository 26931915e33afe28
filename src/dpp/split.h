/* What a DPP master and its workers share about a split: the row range.
 * A split is a (file, stripe range) of a table (warehouse.h); its rows are
 * counted from the split's first row, filtered rows included, and both the
 * master's committed ranges and a worker's batches and leases name rows
 * that way. Both rooms include this header; neither includes the other. */
#ifndef SLUICE_DPP_SPLIT_H
#define SLUICE_DPP_SPLIT_H

#include <stdint.h>

/* Rows [from_row, to_row) of a split, counted from its first row. */
typedef struct sl_dpp_row_range {
    uint64_t from_row, to_row;
} sl_dpp_row_range_t;

#endif

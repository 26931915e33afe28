/* What meta.c and column.c share: the open file. */
#ifndef SLUICE_PARQUET_INTERNAL_H
#define SLUICE_PARQUET_INTERNAL_H

#include "parquet.h"

struct sl_pq_file {
    const sl_allocator_t *a;
    sl_pq_source_t src;
    uint64_t size;
    char *name;
    sl_pq_meta_mem_t *mem;
    const sl_pq_meta_t *meta;
};

#endif

/* What record_decode.c (the walker that adds records as rows) and
 * record_take.c (the stripe a batch of rows becomes) share: the rows
 * being collected. Private to src/kafka. */
#ifndef SLUICE_KAFKA_RECORD_DECODE_INTERNAL_H
#define SLUICE_KAFKA_RECORD_DECODE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kafka/record_decode.h"

struct sl_kafka_rows {
    const sl_allocator_t *a;
    sl_wh_schema_t *schema; /* a copy */
    uint32_t T, D, S;       /* labels, projected dense features, projected sparse ones */
    uint32_t SD, SS;        /* the schema's dense and sparse slots */
    int32_t *dense_at;      /* [SD] schema dense slot -> projected index, -1: not projected */
    int32_t *sparse_at;     /* [SS] the same for sparse slots */
    bool any_weighted;
    const char **label_names, **dense_names, **sparse_names; /* into schema, output order */
    /* rows collected, row-major: */
    uint32_t n, cap;
    int64_t *sample_ids, *session_ids, *timestamps, *offsets, *create_ms; /* [cap] */
    float *labels;                                                        /* [cap * T] */
    float *dense;                                                         /* [cap * D] */
    uint64_t *starts; /* [cap * S] where a row's list starts in ids */
    uint32_t *lens;   /* [cap * S] */
    int64_t *ids;     /* [ids_cap] every list, appended */
    float *weights;   /* [ids_cap] their weights (1.0 for unweighted features) */
    uint64_t nids, ids_cap;
    uint8_t *seen; /* [T + D + S] named in the record being decoded */
    /* Name lookups (the walker's): the k-th label, dense value and id
     * list of the last records, which a producer writes in the same order
     * every time, so a lookup is one compare (same_bytes); a miss asks the schema. */
    struct hint {
        const char *name; /* the schema's; NULL: none yet */
        uint32_t len;
        int32_t label;            /* labels: the label's index */
        const sl_wh_feature_t *f; /* features */
    } * hints[3];                 /* [T], [SD], [SS] */
    char *namebuf;                /* [max_name + 1] a record's name as a C string */
    uint32_t max_name;            /* the schema's longest name */
    /* the taken stripe: */
    sl_arena_t *out;
    size_t out_chunk, out_want; /* its arena's chunk size; what the last stripe took */
    struct order {
        int64_t session;
        uint32_t row;
    } * order; /* [2 * order_cap]: the order, then the merge sort's scratch */
    uint32_t order_cap;
};

#endif

/* What `sluice produce` reads (produce.c): a table directory, a JSONL
 * file or a generated sessions stream, handed out one encoded Sample
 * (src/kafka/record.h) at a time. */
#ifndef SLUICE_CLI_PRODUCE_INPUT_H
#define SLUICE_CLI_PRODUCE_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/err.h"
#include "warehouse/warehouse.h"

typedef struct produce_input produce_input_t;

typedef struct produce_input_spec {
    const char *table;  /* a table directory, or */
    const char *jsonl;  /* a JSONL file ('-': standard input, then schema is required), or */
    bool sessions;      /* the generator's sessions preset: rows, seed */
    const char *schema; /* jsonl: a JSON schema file; NULL: inferred from the first lines */
    uint64_t rows, seed;
    bool json; /* records as JSON objects (kafka/record_json.h), not Samples */
} produce_input_spec_t;

/* One record to send: borrowed until the next call. */
typedef struct produce_record {
    uint64_t sample_id, session_id;
    const uint8_t *value;
    size_t len;
} produce_record_t;

/* Open the input. Caller owns *out, free with produce_input_close.
 * @return an error naming the file and what is wrong. */
sl_err_t produce_input_open(const produce_input_spec_t *spec, produce_input_t **out,
                            sl_error_t *err);

/* The next record into *rec; *done at the end. @return SL_ERR_CORRUPT for
 * a bad JSONL line ("FILE:LINE: what"), after which the next call goes on
 * with the following line; another error ends the input. */
sl_err_t produce_input_next(produce_input_t *in, produce_record_t *rec, bool *done,
                            sl_error_t *err);

/* The input's schema (borrowed from in). */
const sl_wh_schema_t *produce_input_schema(const produce_input_t *in);

/* Input bytes read so far and in all (0: unknown), for the progress line. */
void produce_input_bytes(const produce_input_t *in, uint64_t *read, uint64_t *total);

/* in may be NULL. */
void produce_input_close(produce_input_t *in);

#endif

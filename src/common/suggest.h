/* "Did you mean": the closest of a set of known names to a word a person
 * typed (an option, a command, a job-spec key, an op, a feature), by
 * optimal-string-alignment distance (Levenshtein plus adjacent
 * transpositions, so "wroker" is one edit from "worker"). Candidates are
 * offered one at a time, so any table or schema can be walked without
 * building a list first. */
#ifndef SLUICE_COMMON_SUGGEST_H
#define SLUICE_COMMON_SUGGEST_H

#include <stddef.h>

typedef struct sl_suggest {
    const char *word;
    size_t word_len;
    const char *best; /* borrowed from a candidate; NULL: none close enough yet */
    size_t best_len;
    size_t best_dist;
} sl_suggest_t;

/* Start looking for names close to word[0..len) (borrowed until done). */
void sl_suggest_init(sl_suggest_t *s, const char *word, size_t len);

/* Offer candidate[0..len) (borrowed until sl_suggest_hint's result is
 * used). It is kept when it is closer than any before and within
 * max(1, strlen(word) / 3) edits, at most 3; the first of equals wins. */
void sl_suggest_offer(sl_suggest_t *s, const char *candidate, size_t len);

/* sl_suggest_offer of a NUL-terminated candidate (NULL is ignored). */
void sl_suggest_offer_str(sl_suggest_t *s, const char *candidate);

/* " (did you mean 'X'?)" with prefix before X ("--" for options), or ""
 * when nothing was close: written into buf (always terminated).
 * @return buf. */
const char *sl_suggest_hint(const sl_suggest_t *s, const char *prefix, char *buf, size_t cap);

/* The edit distance itself (exposed for tests), capped at cap + 1. */
size_t sl_suggest_distance(const char *a, size_t alen, const char *b, size_t blen, size_t cap);

#endif

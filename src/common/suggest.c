/* Closest known name to a typed word (suggest.h). */
#include "common/suggest.h"

#include <stdio.h>
#include <string.h>

/* Longer words are never typos worth suggesting for; bounds the table. */
#define MAX_WORD 64

size_t sl_suggest_distance(const char *a, size_t alen, const char *b, size_t blen, size_t cap)
{
    if (alen > MAX_WORD || blen > MAX_WORD) return cap + 1;
    size_t diff = alen > blen ? alen - blen : blen - alen;
    if (diff > cap) return cap + 1;
    /* three rows of the OSA matrix: i-2, i-1, i */
    size_t rows[3][MAX_WORD + 1];
    for (size_t j = 0; j <= blen; j++)
        rows[0][j] = j;
    for (size_t i = 1; i <= alen; i++) {
        size_t *cur = rows[i % 3], *prev = rows[(i + 2) % 3], *prev2 = rows[(i + 1) % 3];
        cur[0] = i;
        size_t row_min = cur[0];
        for (size_t j = 1; j <= blen; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t d = prev[j] + 1;
            if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
            if (prev[j - 1] + cost < d) d = prev[j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
            if (d < row_min) row_min = d;
        }
        if (row_min > cap) return cap + 1;
    }
    size_t d = rows[alen % 3][blen];
    return d > cap ? cap + 1 : d;
}

void sl_suggest_init(sl_suggest_t *s, const char *word, size_t len)
{
    size_t max = len / 3 < 1 ? 1 : len / 3 > 3 ? 3 : len / 3;
    *s = (sl_suggest_t){.word = word, .word_len = len, .best_dist = max + 1};
}

void sl_suggest_offer(sl_suggest_t *s, const char *candidate, size_t len)
{
    if (candidate == NULL || len == 0) return;
    if (len == s->word_len && memcmp(candidate, s->word, len) == 0) return; /* not a typo */
    size_t d = sl_suggest_distance(s->word, s->word_len, candidate, len, s->best_dist - 1);
    if (d < s->best_dist) {
        s->best = candidate;
        s->best_len = len;
        s->best_dist = d;
    }
}

void sl_suggest_offer_str(sl_suggest_t *s, const char *candidate)
{
    if (candidate != NULL) sl_suggest_offer(s, candidate, strlen(candidate));
}

const char *sl_suggest_hint(const sl_suggest_t *s, const char *prefix, char *buf, size_t cap)
{
    if (cap == 0) return buf;
    buf[0] = '\0';
    if (s->best != NULL)
        snprintf(buf, cap, " (did you mean '%s%.*s'?)", prefix ? prefix : "", (int)s->best_len,
                 s->best);
    return buf;
}

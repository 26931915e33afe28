/* What journal_test.c and journal_sync_test.c share: a state directory
 * made and removed, and a whole file read. */
#ifndef SLUICE_TESTS_JOURNAL_UTIL_H
#define SLUICE_TESTS_JOURNAL_UTIL_H

/* Every helper here: a test file uses only some. */
#define JU_FN static __attribute__((unused))

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

JU_FN char *tmp_dir(void)
{
    char *d = strdup("/tmp/sluice-journal-XXXXXX");
    cr_assert(mkdtemp(d) != NULL);
    return d;
}

JU_FN void path_of(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

JU_FN void rm_dir(char *d)
{
    const char *names[] = {"journal", "snapshot", "tmp", "journal.old"};
    char p[256];
    for (int i = 0; i < 4; i++) {
        path_of(p, sizeof p, d, names[i]);
        unlink(p);
    }
    rmdir(d);
    free(d);
}

JU_FN void read_file(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f != NULL, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(*buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
}

#endif

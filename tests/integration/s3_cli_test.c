/* `sluice store ls|stat|cat|put` against the s3proxy of the ctest fixture
 * s3 (s3_util.h): what people run to check a fleet's access to a bucket. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3_util.h"

static int sluice(char **out, char **err, const char *a1, const char *a2, const char *a3,
                  const char *a4, const char *a5)
{
    const char *bin = tu_binary();
    char *argv[] = {(char *)bin, "store",    (char *)a1, (char *)a2,
                    (char *)a3,  (char *)a4, (char *)a5, NULL};
    return tu_run(".", argv, 60, out, err);
}

Test(s3_cli, put_ls_stat_cat)
{
    su_env();
    char b[64], url[200], prefix[200];
    su_bucket("cli", b, sizeof b);
    char *dir = tu_mkdtemp("s3cli"), *file = tu_path(dir, "in.txt");
    tu_write_file(file, "0123456789abcdef", 16);
    snprintf(url, sizeof url, "s3://%s/d/in.txt", b);
    snprintf(prefix, sizeof prefix, "s3://%s/d/", b);
    char *out, *err;
    cr_assert_eq(sluice(&out, &err, "put", file, url, NULL, NULL), 0, "%s", err);
    char want[300];
    snprintf(want, sizeof want, "sluice store put: 16 bytes to s3://%s/d/in.txt\n", b);
    cr_assert_str_eq(err, want);
    free(out);
    free(err);

    cr_assert_eq(sluice(&out, &err, "ls", prefix, NULL, NULL, NULL), 0, "%s", err);
    /* size, time, the MD5 ETag, key */
    cr_assert(strstr(out, "          16  20") &&
                  strstr(out, "  \"4032af8d61035123906e58e067140cc5\"  d/in.txt\n"),
              "%s", out);
    free(out);
    free(err);

    cr_assert_eq(sluice(&out, &err, "stat", url, NULL, NULL, NULL), 0, "%s", err);
    cr_assert(strstr(out, "size     16\netag     \"4032af8d61035123906e58e067140cc5\"\n"), "%s",
              out);
    free(out);
    free(err);

    cr_assert_eq(sluice(&out, &err, "cat", url, "--range", "3-7", NULL), 0, "%s", err);
    cr_assert_str_eq(out, "34567");
    free(out);
    free(err);
    cr_assert_eq(sluice(&out, &err, "cat", url, NULL, NULL, NULL), 0, "%s", err);
    cr_assert_str_eq(out, "0123456789abcdef");
    free(out);
    free(err);

    /* Failures: exit 1 and the reason; a bad range is a usage error. */
    snprintf(url, sizeof url, "s3://%s/d/none", b);
    cr_assert_eq(sluice(&out, &err, "cat", url, NULL, NULL, NULL), 1);
    snprintf(want, sizeof want, "sluice store cat: s3://%s/d/none: GET: HTTP 404 NoSuchKey", b);
    cr_assert(strstr(err, want), "%s", err);
    free(out);
    free(err);
    snprintf(url, sizeof url, "s3://%s/d/in.txt", b);
    cr_assert_eq(sluice(&out, &err, "cat", url, "--range", "20-", NULL), 2);
    cr_assert(strstr(err, "--range '20-' is not A-B or A- with A <= B inside the 16 bytes"), "%s",
              err);
    free(out);
    free(err);
    tu_rm_tree(dir);
    free(file);
    free(dir);
}

int main(int argc, char *argv[])
{
    return su_main(argc, argv);
}

/* The libraries loaded on first use (src/netlib/netlib.h): each table is
 * filled and its functions work (libcurl, libxml2, libmicrohttpd,
 * GnuTLS, librdkafka), the same table comes back on every call, the program
 * maps none of them at start, and a program whose library is missing says
 * which one and why instead of failing at start or crashing. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netlib/netlib.h"
#include "netlib/netlib_curl.h"
#include "netlib/netlib_gnutls.h"
#include "netlib/netlib_kafka.h"
#include "netlib/netlib_xml.h"
#include "testutil.h"

Test(netlib, curl_table_works)
{
    sl_error_t err = {0};
    const sl_netlib_curl_t *cu = sl_netlib_curl(&err);
    cr_assert_not_null(cu, "%s", err.msg);
    cr_assert_str_eq(cu->easy_strerror(CURLE_OK), "No error");
    CURL *e = cu->easy_init();
    cr_assert_not_null(e);
    char *esc = cu->easy_escape(e, "a b/c", 0);
    cr_assert_str_eq(esc, "a%20b%2Fc");
    cu->free_string(esc);
    cu->easy_cleanup(e);
    struct curl_slist *l = cu->slist_append(NULL, "X-One: 1");
    cr_assert_str_eq(l->data, "X-One: 1");
    cu->slist_free_all(l);
    cr_assert_eq(cu->getdate("Sun, 06 Nov 1994 08:49:37 GMT", NULL), 784111777);
}

Test(netlib, xml_table_works)
{
    sl_error_t err = {0};
    const sl_netlib_xml_t *x = sl_netlib_xml(&err);
    cr_assert_not_null(x, "%s", err.msg);
    const char doc[] = "<a><b>text</b></a>";
    xmlDocPtr d = x->read_memory(doc, (int)strlen(doc), "t.xml", NULL, XML_PARSE_NONET);
    cr_assert_not_null(d);
    xmlNodePtr root = x->doc_get_root_element(d);
    cr_assert_str_eq((const char *)root->name, "a");
    xmlChar *t = x->node_get_content(root);
    cr_assert_str_eq((const char *)t, "text");
    (*x->free_string)(t);
    x->free_doc(d);
}

Test(netlib, microhttpd_table_works)
{
    sl_error_t err = {0};
    const sl_netlib_mhd_t *m = sl_netlib_mhd(&err);
    cr_assert_not_null(m, "%s", err.msg);
    char s[] = "a%20b%2fc";
    cr_assert_eq(m->http_unescape(s), 5);
    cr_assert_str_eq(s, "a b/c");
    cr_assert_eq(m->is_feature_supported(MHD_FEATURE_IPv6) == MHD_YES ||
                     m->is_feature_supported(MHD_FEATURE_IPv6) == MHD_NO,
                 true);
}

Test(netlib, gnutls_table_works)
{
    sl_error_t err = {0};
    const sl_netlib_gnutls_t *g = sl_netlib_gnutls(&err);
    cr_assert_not_null(g, "%s", err.msg);
    /* RFC 4231 test case 2 */
    uint8_t mac[32];
    cr_assert_eq(
        g->hmac_fast(GNUTLS_MAC_SHA256, "Jefe", 4, "what do ya want for nothing?", 28, mac), 0);
    const uint8_t want[4] = {0x5b, 0xdc, 0xc1, 0x46};
    cr_assert_eq(g->memcmp_constant_time(mac, want, sizeof want), 0);
    cr_assert_neq(g->memcmp_constant_time(mac + 1, want, sizeof want), 0);
    gnutls_datum_t raw = {(unsigned char *)"sluice", 6}, enc = {0}, dec = {0};
    cr_assert_eq(g->base64_encode2(&raw, &enc), 0);
    cr_assert_eq(enc.size, 8);
    cr_assert_eq(memcmp(enc.data, "c2x1aWNl", 8), 0);
    cr_assert_eq(g->base64_decode2(&enc, &dec), 0);
    cr_assert_eq(dec.size, 6);
    cr_assert_eq(memcmp(dec.data, "sluice", 6), 0);
    (*g->free_memory)(enc.data);
    (*g->free_memory)(dec.data);
    cr_assert_str_eq(g->strerror(GNUTLS_E_MEMORY_ERROR), "Internal error in memory allocation.");
}

Test(netlib, kafka_table_works)
{
    sl_error_t err = {0};
    const sl_netlib_kafka_t *k = sl_netlib_kafka(&err);
    cr_assert_not_null(k, "%s", err.msg);
    cr_assert_str_eq(k->err2name(RD_KAFKA_RESP_ERR__PARTITION_EOF), "_PARTITION_EOF");
    rd_kafka_conf_t *conf = k->conf_new();
    char why[256], v[64];
    size_t vn = sizeof v;
    cr_assert_eq(k->conf_set(conf, "fetch.wait.max.ms", "100", why, sizeof why), RD_KAFKA_CONF_OK);
    cr_assert_eq(k->conf_get(conf, "fetch.wait.max.ms", v, &vn), RD_KAFKA_CONF_OK);
    cr_assert_str_eq(v, "100");
    cr_assert_eq(k->conf_set(conf, "no.such.property", "1", why, sizeof why),
                 RD_KAFKA_CONF_UNKNOWN);
    k->conf_destroy(conf);
}

Test(netlib, same_table_every_call)
{
    cr_assert_eq(sl_netlib_curl(NULL), sl_netlib_curl(NULL));
    cr_assert_eq(sl_netlib_xml(NULL), sl_netlib_xml(NULL));
    cr_assert_eq(sl_netlib_mhd(NULL), sl_netlib_mhd(NULL));
    cr_assert_eq(sl_netlib_gnutls(NULL), sl_netlib_gnutls(NULL));
    cr_assert_eq(sl_netlib_kafka(NULL), sl_netlib_kafka(NULL));
    cr_assert_not_null(sl_netlib_mhd(NULL));
}

/* The dynamic loader's list of what the program loads at start
 * (LD_TRACE_LOADED_OBJECTS: it lists, runs nothing). */
static char *loaded_at_start(const char *program)
{
    char *out = NULL, *errs = NULL;
    setenv("LD_TRACE_LOADED_OBJECTS", "1", 1);
    char *argv[] = {(char *)program, NULL};
    int rc = tu_run("/", argv, 30, &out, &errs);
    unsetenv("LD_TRACE_LOADED_OBJECTS");
    cr_assert_eq(rc, 0, "%s", errs);
    free(errs);
    return out;
}

Test(netlib, program_loads_none_at_start)
{
    char *libs = loaded_at_start(tu_binary());
    cr_assert_not_null(strstr(libs, "libc.so"), "%s", libs);
    cr_assert_null(strstr(libs, "libcurl"), "%s", libs);
    cr_assert_null(strstr(libs, "libxml2"), "%s", libs);
    cr_assert_null(strstr(libs, "libmicrohttpd"), "%s", libs);
    cr_assert_null(strstr(libs, "libgnutls"), "%s", libs);
    cr_assert_null(strstr(libs, "librdkafka"), "%s", libs);
    free(libs);
}

/* A copy of the program alone in a directory: no libsluice_curl.so beside
 * it, none on the library path. Its start and its commands without HTTP
 * work; a command that needs libcurl fails naming it. */
Test(netlib, missing_library_named)
{
    char *dir = tu_mkdtemp("netlib");
    char *program = tu_path(dir, "sluice");
    char *cp[] = {"/bin/cp", (char *)tu_binary(), program, NULL};
    char *out = NULL, *errs = NULL;
    cr_assert_eq(tu_run(dir, cp, 30, &out, &errs), 0, "%s", errs);
    free(out);
    free(errs);
    unsetenv("LD_LIBRARY_PATH");

    char *version[] = {program, "--version", NULL};
    cr_assert_eq(tu_run(dir, version, 30, &out, &errs), 0, "%s", errs);
    cr_assert_not_null(strstr(out, "sluice "), "%s", out);
    free(out);
    free(errs);

    char *jobs[] = {program, "jobs", "list", "--admin", "127.0.0.1:9", NULL};
    cr_assert_eq(tu_run(dir, jobs, 30, &out, &errs), 1, "%s", errs);
    char want[1024];
    snprintf(want, sizeof want,
             "sluice jobs list: libcurl could not be loaded: libsluice_curl.so is in none of %s, "
             "%s/",
             dir, dir);
    cr_assert_not_null(strstr(errs, want), "%s\nwanted: %s", errs, want);
    cr_assert_not_null(strstr(errs, ", nor on the library path (libsluice_curl.so: cannot open"),
                       "%s", errs);
    free(out);
    free(errs);
    tu_rm_tree(dir);
    free(program);
    free(dir);
}

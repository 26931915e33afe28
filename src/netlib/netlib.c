/* Loading the libraries on first use (netlib.h): find our small library
 * beside the program, dlopen it, fill the table with dlsym. (In
 * libsluice_trainer.so, netlib_linked.c gives tables of the linked
 * functions instead.) */
#include "netlib/netlib.h"

#include "netlib/netlib_gnutls.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "netlib/netlib_curl.h"
#include "netlib/netlib_kafka.h"
#include "netlib/netlib_xml.h"

/* The install's library directory relative to its program directory
 * (CMakeLists.txt: ../lib, or ../lib/<multiarch> on Debian's /usr). */
#ifndef SLUICE_NETLIB_LIBDIR_FROM_BINDIR
#define SLUICE_NETLIB_LIBDIR_FROM_BINDIR "../lib"
#endif

typedef struct symbol {
    const char *name;
    size_t offset; /* of its field in the table */
} symbol_t;

/* One library: what to open, what to find in it, and, once loaded, the
 * table or why not. Written only inside its pthread_once, read after. */
typedef struct library {
    const char *file;     /* ours, which names the real one in DT_NEEDED */
    const char *upstream; /* the real one, as a user knows it */
    const symbol_t *symbols;
    size_t nsymbols;
    void *table;
    bool loaded;
    char why[768];
} library_t;

/* printf into buf after what it holds, cut short at cap (a message). */
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
}

/* dlerror()'s message (it may return NULL). */
static const char *dl_why(void)
{
    const char *e = dlerror();
    return e ? e : "unknown dlopen error";
}

/* Opens lib->file from beside the program, else from the library path.
 * A copy that is there but does not load (its real library missing) is an
 * error at once: a copy elsewhere would not be this program's. */
static void *open_ours(library_t *lib)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char tried[3 * PATH_MAX / 4] = "";
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        /* its own directory (the build tree), the install's lib/, the
         * wheel's package directory (sluice/bin/..) */
        const char *dirs[] = {"", ("/" SLUICE_NETLIB_LIBDIR_FROM_BINDIR), "/.."};
        for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
            char path[PATH_MAX + 64];
            int len = snprintf(path, sizeof path, "%s%s/%s", exe, dirs[i], lib->file);
            if (len < 0 || (size_t)len >= sizeof path) continue;
            append(tried, sizeof tried, "%s%s%s", tried[0] ? ", " : "", exe, dirs[i]);
            if (access(path, F_OK) != 0) continue;
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h == NULL)
                append(lib->why, sizeof lib->why, "%s could not be loaded (through %s): %s",
                       lib->upstream, path, dl_why());
            return h;
        }
    }
    void *h = dlopen(lib->file, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        append(lib->why, sizeof lib->why,
               "%s could not be loaded: %s is in none of %s, nor on the library path (%s)",
               lib->upstream, lib->file, tried[0] ? tried : "the program's directory", dl_why());
    return h;
}

static void load(library_t *lib)
{
    void *h = open_ours(lib);
    if (h == NULL) return;
    for (size_t i = 0; i < lib->nsymbols; i++) {
        void *sym = dlsym(h, lib->symbols[i].name);
        if (sym == NULL) {
            append(lib->why, sizeof lib->why, "%s (through %s) lacks %s: %s", lib->upstream,
                   lib->file, lib->symbols[i].name, dl_why());
            /* kept open: its constructors have run, and unloading would gain nothing */
            return;
        }
        /* POSIX: a dlsym result converts to the function pointer it names */
        memcpy((char *)lib->table + lib->symbols[i].offset, &sym, sizeof sym);
    }
    lib->loaded = true;
}

static const void *table_of(library_t *lib, sl_error_t *err)
{
    if (lib->loaded) return lib->table;
    sl_error_set(err, SL_ERR_UNSUPPORTED, "%s", lib->why);
    return NULL;
}

#define SYMBOL(type, fn, field) {#fn, offsetof(type, field)},
#define CURL_SYMBOL(fn, field) SYMBOL(sl_netlib_curl_t, fn, field)
#define XML_SYMBOL(fn, field) SYMBOL(sl_netlib_xml_t, fn, field)
#define MHD_SYMBOL(fn, field) SYMBOL(sl_netlib_mhd_t, fn, field)
#define GNUTLS_SYMBOL(fn, field) SYMBOL(sl_netlib_gnutls_t, fn, field)
#define KAFKA_SYMBOL(fn, field) SYMBOL(sl_netlib_kafka_t, fn, field)

static const symbol_t curl_symbols[] = {SL_NETLIB_CURL_FUNCS(CURL_SYMBOL)};
static const symbol_t xml_symbols[] = {SL_NETLIB_XML_FUNCS(XML_SYMBOL)};
static const symbol_t mhd_symbols[] = {SL_NETLIB_MHD_FUNCS(MHD_SYMBOL)};
static const symbol_t gnutls_symbols[] = {SL_NETLIB_GNUTLS_FUNCS(GNUTLS_SYMBOL)};
static const symbol_t kafka_symbols[] = {SL_NETLIB_KAFKA_FUNCS(KAFKA_SYMBOL)};

static sl_netlib_curl_t curl_table;
static sl_netlib_xml_t xml_table;
static sl_netlib_mhd_t mhd_table;
static sl_netlib_gnutls_t gnutls_table;
static sl_netlib_kafka_t kafka_table;

#define LIBRARY(file, upstream, symbols, table)                                                    \
    {                                                                                              \
        file, upstream, symbols, sizeof symbols / sizeof symbols[0], &table, false, ""             \
    }
static library_t curl_lib = LIBRARY("libsluice_curl.so", "libcurl", curl_symbols, curl_table);
static library_t xml_lib = LIBRARY("libsluice_xml2.so", "libxml2", xml_symbols, xml_table);
static library_t mhd_lib =
    LIBRARY("libsluice_microhttpd.so", "libmicrohttpd", mhd_symbols, mhd_table);
static library_t gnutls_lib =
    LIBRARY("libsluice_gnutls.so", "GnuTLS", gnutls_symbols, gnutls_table);
static library_t kafka_lib =
    LIBRARY("libsluice_rdkafka.so", "librdkafka", kafka_symbols, kafka_table);

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static pthread_once_t xml_once = PTHREAD_ONCE_INIT;
static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;
static pthread_once_t gnutls_once = PTHREAD_ONCE_INIT;
static pthread_once_t kafka_once = PTHREAD_ONCE_INIT;
static void load_curl(void)
{
    load(&curl_lib);
}
static void load_xml(void)
{
    load(&xml_lib);
}
static void load_mhd(void)
{
    load(&mhd_lib);
}
static void load_gnutls(void)
{
    load(&gnutls_lib);
}
static void load_kafka(void)
{
    load(&kafka_lib);
}

const sl_netlib_curl_t *sl_netlib_curl(sl_error_t *err)
{
    pthread_once(&curl_once, load_curl);
    return table_of(&curl_lib, err);
}

const sl_netlib_xml_t *sl_netlib_xml(sl_error_t *err)
{
    pthread_once(&xml_once, load_xml);
    return table_of(&xml_lib, err);
}

const sl_netlib_mhd_t *sl_netlib_mhd(sl_error_t *err)
{
    pthread_once(&mhd_once, load_mhd);
    return table_of(&mhd_lib, err);
}

const sl_netlib_gnutls_t *sl_netlib_gnutls(sl_error_t *err)
{
    pthread_once(&gnutls_once, load_gnutls);
    return table_of(&gnutls_lib, err);
}

const sl_netlib_kafka_t *sl_netlib_kafka(sl_error_t *err)
{
    pthread_once(&kafka_once, load_kafka);
    return table_of(&kafka_lib, err);
}

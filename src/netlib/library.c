/* The whole source of libsluice_curl.so, libsluice_xml2.so,
 * libsluice_microhttpd.so, libsluice_gnutls.so and libsluice_rdkafka.so
 * (netlib.h): each holds
 * no code of ours and names its real library in DT_NEEDED, so that dlopen
 * of it loads that library, found by the install's or the wheel's
 * RUNPATH. A shared library needs one object: this is it. */
int sl_netlib_library(void);
int sl_netlib_library(void)
{
    return 1;
}

/* libxml2's functions, loaded on first use (netlib.h says why and how). */
#ifndef SLUICE_NETLIB_NETLIB_XML_H
#define SLUICE_NETLIB_NETLIB_XML_H

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "netlib/netlib.h"

/* The functions of libxml2 that sluice calls. xmlFree is a variable
 * holding the deallocator: its field points at it. */
#define SL_NETLIB_XML_FUNCS(X)                                                                     \
    X(xmlReadMemory, read_memory)                                                                  \
    X(xmlDocGetRootElement, doc_get_root_element)                                                  \
    X(xmlNodeGetContent, node_get_content)                                                         \
    X(xmlFreeDoc, free_doc)                                                                        \
    X(xmlFree, free_string)

typedef struct sl_netlib_xml {
    SL_NETLIB_XML_FUNCS(SL_NETLIB_FIELD)
} sl_netlib_xml_t;

/* libxml2's functions, loaded on the first call (thread-safe); as
 * sl_netlib_mhd. Not in libsluice_trainer.so. */
const sl_netlib_xml_t *sl_netlib_xml(sl_error_t *err);

#endif

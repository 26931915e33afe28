/* S3's XML answers through libxml2 (xml.h). */
#include "xml.h"

#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "http.h"
#include "netlib/netlib_xml.h"

/* libxml2's functions: loaded by sl_store_http_new, which every answer
 * read here came through, before any call here. */
static const sl_netlib_xml_t *libxml2(void)
{
    return sl_netlib_xml(NULL);
}

static xmlDocPtr parse(const char *body, size_t len)
{
    if (body == NULL || len == 0 || len > INT32_MAX) return NULL;
    return libxml2()->read_memory(body, (int)len, "s3.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

/* The first element named name at or below n (depth first). */
static xmlNodePtr find(xmlNodePtr n, const char *name)
{
    for (; n; n = n->next) {
        if (n->type != XML_ELEMENT_NODE) continue;
        if (strcmp((const char *)n->name, name) == 0) return n;
        xmlNodePtr c = find(n->children, name);
        if (c) return c;
    }
    return NULL;
}

/* The text of the child element name of n into buf. @return false when
 * missing or longer than cap - 1. */
static bool child_text(xmlNodePtr n, const char *name, char *buf, size_t cap)
{
    xmlNodePtr c = n ? find(n->children, name) : NULL;
    buf[0] = '\0';
    if (c == NULL) return false;
    xmlChar *t = libxml2()->node_get_content(c);
    if (t == NULL) return false;
    size_t l = strlen((const char *)t);
    bool ok = l < cap;
    if (ok) memcpy(buf, t, l + 1);
    (*libxml2()->free_string)(t);
    return ok;
}

bool sl_store_xml_text(const char *body, size_t len, const char *name, char *buf, size_t cap)
{
    buf[0] = '\0';
    xmlDocPtr d = parse(body, len);
    if (d == NULL) return false;
    xmlNodePtr root = libxml2()->doc_get_root_element(d);
    bool ok = root && child_text(root, name, buf, cap);
    libxml2()->free_doc(d);
    return ok;
}

void sl_store_xml_error(const char *body, size_t len, char *code, size_t code_cap, char *msg,
                        size_t msg_cap)
{
    code[0] = msg[0] = '\0';
    xmlDocPtr d = parse(body, len);
    if (d == NULL) return;
    /* S3 answers <Error>; STS wraps it in <ErrorResponse>. */
    xmlNodePtr root = find(libxml2()->doc_get_root_element(d), "Error");
    if (root) {
        if (!child_text(root, "Code", code, code_cap)) code[0] = '\0';
        if (!child_text(root, "Message", msg, msg_cap)) {
            /* A long message is cut, not dropped. */
            xmlNodePtr m = find(root->children, "Message");
            xmlChar *t = m ? libxml2()->node_get_content(m) : NULL;
            if (t) snprintf(msg, msg_cap, "%s", (const char *)t);
            if (t) (*libxml2()->free_string)(t);
        }
    }
    libxml2()->free_doc(d);
}

sl_err_t sl_store_xml_list(const char *body, size_t len, const char *what, const sl_allocator_t *a,
                           sl_store_list_fn fn, void *ctx, bool *truncated, char **next,
                           size_t *keys, sl_error_t *err)
{
    *truncated = false;
    *next = NULL;
    *keys = 0;
    xmlDocPtr d = parse(body, len);
    xmlNodePtr root = d ? libxml2()->doc_get_root_element(d) : NULL;
    if (root == NULL || strcmp((const char *)root->name, "ListBucketResult") != 0) {
        if (d) libxml2()->free_doc(d);
        return sl_error_set(err, SL_ERR_PROTOCOL,
                            "%s: ListObjectsV2 answered with no ListBucketResult (%zu bytes)", what,
                            len);
    }
    sl_err_t rc = SL_OK;
    char buf[64];
    char key[1100];
    for (xmlNodePtr n = root->children; n && rc == SL_OK; n = n->next) {
        if (n->type != XML_ELEMENT_NODE) continue;
        const char *name = (const char *)n->name;
        if (strcmp(name, "IsTruncated") == 0) {
            *truncated =
                child_text(root, "IsTruncated", buf, sizeof buf) && strcmp(buf, "true") == 0;
        } else if (strcmp(name, "NextContinuationToken") == 0) {
            xmlChar *t = libxml2()->node_get_content(n);
            if (t) {
                sl_strfree(a, *next);
                *next = sl_strdup(a, (const char *)t);
                (*libxml2()->free_string)(t);
                if (*next == NULL) rc = sl_error_set(err, SL_ERR_NOMEM, "%s: out of memory", what);
            }
        } else if (strcmp(name, "Contents") == 0) {
            sl_store_info_t info = {0};
            if (!child_text(n, "Key", key, sizeof key) || !child_text(n, "Size", buf, sizeof buf)) {
                rc = sl_error_set(err, SL_ERR_PROTOCOL,
                                  "%s: a ListObjectsV2 <Contents> without a Key or a Size", what);
                break;
            }
            char *end = NULL;
            info.size = strtoull(buf, &end, 10);
            if (end == buf || *end != '\0') {
                rc = sl_error_set(err, SL_ERR_PROTOCOL, "%s: key %s: a Size of '%s'", what, key,
                                  buf);
                break;
            }
            child_text(n, "ETag", info.etag, sizeof info.etag);
            if (child_text(n, "LastModified", buf, sizeof buf))
                info.mtime_s = sl_creds_parse_time(buf);
            (*keys)++;
            /* Keys ending in '/' are folder markers (the S3 console's, or a
             * file system backend's directories): never data. */
            size_t kl = strlen(key);
            if (kl > 0 && key[kl - 1] != '/') rc = fn(ctx, key, &info);
        }
    }
    if (rc == SL_OK && *truncated && *next == NULL)
        rc = sl_error_set(err, SL_ERR_PROTOCOL,
                          "%s: a truncated ListObjectsV2 page without NextContinuationToken", what);
    if (rc != SL_OK) {
        sl_strfree(a, *next);
        *next = NULL;
    }
    libxml2()->free_doc(d);
    return rc;
}

sl_err_t sl_store_xml_sts(const char *body, size_t len, sl_creds_value_t *out, sl_error_t *err)
{
    xmlDocPtr d = parse(body, len);
    xmlNodePtr root = d ? libxml2()->doc_get_root_element(d) : NULL;
    xmlNodePtr c = root ? find(root, "Credentials") : NULL;
    char exp[64];
    sl_err_t rc = SL_OK;
    if (c == NULL)
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "no <Credentials> in the answer");
    else if (!child_text(c, "AccessKeyId", out->key_id, sizeof out->key_id) ||
             !child_text(c, "SecretAccessKey", out->secret, sizeof out->secret) ||
             !child_text(c, "SessionToken", out->token, sizeof out->token) ||
             !child_text(c, "Expiration", exp, sizeof exp))
        rc = sl_error_set(err, SL_ERR_PROTOCOL,
                          "<Credentials> lacks AccessKeyId, SecretAccessKey, SessionToken or "
                          "Expiration (or one is too long)");
    else if ((out->expires_s = sl_creds_parse_time(exp)) < 0)
        rc = sl_error_set(err, SL_ERR_PROTOCOL, "an Expiration of '%s'", exp);
    if (rc != SL_OK) sl_creds_wipe(out);
    if (d) libxml2()->free_doc(d);
    return rc;
}

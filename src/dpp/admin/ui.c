/* Serving the compiled-in status pages (ui.h). */
#include "dpp/admin/ui.h"

#include <string.h>

#include "dpp/admin/endpoint.h"

const sl_admin_asset_t *sl_admin_ui_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < sl_admin_ui_num_assets; i++)
        if (strcmp(sl_admin_ui_assets[i].name, name) == 0) return &sl_admin_ui_assets[i];
    return NULL;
}

void sl_admin_ui_reply(sl_admin_response_t *resp, const char *name)
{
    const sl_admin_asset_t *a = sl_admin_ui_find(name);
    if (a == NULL) {
        sl_admin_reply_error(resp, 404, "/ui/%s: no such file", name != NULL ? name : "");
        return;
    }
    sl_admin_reply_text(resp, 200, a->content_type, a->data);
}

void sl_admin_ui_page(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    (void)req;
    sl_admin_ui_reply(resp, "status.html");
}

void sl_admin_ui_handler(void *ctx, const sl_admin_request_t *req, sl_admin_response_t *resp)
{
    (void)ctx;
    /* the pages themselves are served at "/" only */
    if (strstr(req->param, ".html") != NULL) {
        sl_admin_reply_error(resp, 404, "/ui/%s: no such file (the page is at /)", req->param);
        return;
    }
    sl_admin_ui_reply(resp, req->param);
}

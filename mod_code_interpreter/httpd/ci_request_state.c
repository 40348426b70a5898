/* ci_request_state.c - an intercepted request's state, and error answers. */
#include <apr_strings.h>
#include <http_protocol.h>
#include "ci_request_state.h"
#include "ci_module.h"

ci_req_state *ci_request_state(request_rec *r)
{
    return ap_get_module_config(r->request_config, &code_interpreter_module);
}

ci_req_state *ci_request_state_create(request_rec *r)
{
    ci_req_state *st = apr_pcalloc(r->pool, sizeof(*st));
    ap_set_module_config(r->request_config, &code_interpreter_module, st);
    return st;
}

void ci_error_headers(request_rec *r, apr_table_t *headers, const ci_error *err)
{
    if (err->retry_after > 0)
        apr_table_setn(headers, "Retry-After", apr_itoa(r->pool, err->retry_after));
}

int ci_send_error(request_rec *r, const ci_error *err)
{
    apr_size_t len;
    const char *body = ci_error_body(r->pool, err, &len);
    r->status = err->status;
    r->status_line = NULL;
    ci_error_headers(r, r->err_headers_out, err);
    apr_table_unset(r->headers_out, "Content-Length");
    ap_set_content_type(r, "application/json");
    ap_set_content_length(r, (apr_off_t)len);
    ap_rwrite(body, (int)len, r);
    return DONE;
}

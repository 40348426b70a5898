/*
 * ci_containers_api_answers.c - what the Containers API's two files share
 * (ci_containers_api_internal.h): its answers, the directory's questions,
 * the paging of a list and a JSON body. Below both: neither calls back.
 */
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>
#include "ci_containers.h"
#include "ci_containers_api_internal.h"
#include "ci_dirclient.h"
#include "ci_module.h"
#include "ci_json.h"
#include "ci_request_state.h"

/* A request body the API parses (a container's create) */
#define MAX_JSON_BODY (64 * 1024)

/* ---- answers ----------------------------------------------------------------- */

int capi_send_json(request_rec *r, int status, json_object *o)
{
    apr_size_t len;
    const char *body = ci_json_text(o, &len);
    r->status = status;
    ap_set_content_type(r, "application/json");
    ap_set_content_length(r, (apr_off_t)len);
    ap_rwrite(body, (int)len, r);
    return OK;
}

int capi_fail(api_req *a)
{
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, a->r, "CI0811: containers API answers "
                  "%d: %s", a->err.status, a->err.message);
    ci_send_error(a->r, &a->err);
    return OK;
}

int capi_not_found(api_req *a)
{
    ci_error_set(&a->err, 404, CI_INVALID, NULL, "container_not_found", a->r->pool,
                 "Container with id '%s' not found.", a->id);
    return capi_fail(a);
}

int capi_bad(api_req *a, const char *param, const char *code, const char *msg)
{
    ci_error_set(&a->err, 400, CI_INVALID, param, code, a->r->pool, "%s", msg);
    return capi_fail(a);
}

int capi_unavailable(api_req *a)
{
    ci_containers_unavailable(a->r->pool, &a->err);
    return capi_fail(a);
}

/* ---- the directory ----------------------------------------------------------- */

json_object *capi_dir_request(api_req *a, const char *op)
{
    json_object *o = ci_dirclient_request(a->r->pool, op, a->owner);
    if (a->id)
        json_object_object_add(o, "id", json_object_new_string(a->id));
    return o;
}

/* REQ asked; the sandboxes its answer lets go (a deleted container's, an
 * evicted one's) are ended here. */
json_object *capi_dir_ask(api_req *a, json_object *req)
{
    return ci_dirclient_ask_and_end(a->r->server, a->r->pool, req);
}

ci_dir_status capi_status_of(json_object *ans)
{
    return ci_dirclient_status_of(ans);
}

int capi_container_of(api_req *a, json_object *ans, const char *key, ci_container *c)
{
    return ci_dirclient_container(a->r->pool, ans, key, c);
}

/* ---- lists and bodies ------------------------------------------------------------ */

/* Read the list parameters of A's query into PG: 0, or -1 with the 400
 * answer sent (its handler's status in *RC). */
int capi_read_paging(api_req *a, ci_capi_paging *pg, int *rc)
{
    if (ci_capi_paging_of(a->r->pool, a->r->args, pg, &a->err) == 0)
        return 0;
    *rc = capi_fail(a);
    return -1;
}

/* Answer DATA (an array of objects with an "id", owned by the answer) in
 * OpenAI's list envelope. */
int capi_send_list(api_req *a, json_object *data, int has_more)
{
    return capi_send_json(a->r, 200, ci_json_own(a->r->pool, ci_capi_list(data, has_more)));
}

/* The request body, parsed (at most MAX_JSON_BODY bytes). */
json_object *capi_read_json(api_req *a)
{
    char *buf = apr_palloc(a->r->pool, MAX_JSON_BODY + 1);
    apr_size_t len = 0;
    long n;
    const char *perr = NULL;
    if (ap_setup_client_block(a->r, REQUEST_CHUNKED_DECHUNK) != OK ||
        !ap_should_client_block(a->r))
        return NULL;
    while (len < MAX_JSON_BODY &&
           (n = ap_get_client_block(a->r, buf + len, MAX_JSON_BODY - len)) > 0)
        len += (apr_size_t)n;
    buf[len] = '\0';
    return ci_json_parse(a->r->pool, buf, len, &perr);
}

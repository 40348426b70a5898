/*
 * ci_containers_api_internal.h - what the Containers API's files share:
 * the request being answered, its answers, and the directory's questions
 * (ci_containers_api.c: routing and containers; ci_container_files_api.c:
 * their files; both call ci_containers_api_answers.c, which calls neither).
 */
#ifndef CI_CONTAINERS_API_INTERNAL_H
#define CI_CONTAINERS_API_INTERNAL_H

#include <httpd.h>
#include <json-c/json.h>
#include "ci_directory.h"
#include "ci_settings.h"
#include "ci_error.h"
#include "ci_capi.h"

typedef struct api_req {
    request_rec *r;
    ci_loc_conf *d;
    const char *owner;
    const char *id;              /* the {id} segment, or NULL: the collection */
    const char *file_id;         /* the {file_id} segment of a file's path */
    ci_error err;
} api_req;

/* ---- answers: each returns the handler's status ---- */
int capi_send_json(request_rec *r, int status, json_object *o);
/* A->err, sent (and logged). */
int capi_fail(api_req *a);
int capi_not_found(api_req *a);
int capi_bad(api_req *a, const char *param, const char *code, const char *msg);
int capi_unavailable(api_req *a);

/* ---- the directory ---- */
/* A request OP of the caller (about A->id when set). */
json_object *capi_dir_request(api_req *a, const char *op);
/* REQ asked; the sandboxes its answer lets go are ended. NULL: unavailable. */
json_object *capi_dir_ask(api_req *a, json_object *req);
ci_dir_status capi_status_of(json_object *ans);
/* ANS's record KEY into *C: 0, or -1. */
int capi_container_of(api_req *a, json_object *ans, const char *key, ci_container *c);

/* ---- what a request carries ---- */
/* The paging query (after, limit, order) into *PG: 0, or -1 with the answer
 * sent (*RC). */
int capi_read_paging(api_req *a, ci_capi_paging *pg, int *rc);
/* A list answer of DATA. */
int capi_send_list(api_req *a, json_object *data, int has_more);
/* The request's JSON body (at most MAX_CREATE_BODY bytes), or NULL when it
 * has none or it is not JSON. */
json_object *capi_read_json(api_req *a);

/* ---- the files endpoints (ci_container_files_api.c) ---- */
int capi_files_list(api_req *a);
int capi_file_upload(api_req *a);
int capi_file_get(api_req *a);
int capi_file_delete(api_req *a);
int capi_file_content(api_req *a);

#endif

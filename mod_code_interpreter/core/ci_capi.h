/*
 * ci_capi.h - what a Containers API request asks, read from its path, its
 * query string and its JSON body, httpd-free (the handler, ci_containers_api,
 * calls these; the fuzz target fuzz_capi calls the same). Every refusal is
 * an OpenAI-shaped error naming the parameter; nothing a client sends makes
 * it read past what it was given.
 */
#ifndef CI_CAPI_H
#define CI_CAPI_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>
#include "ci_error.h"

/* What the path names, after its last "/containers" segment. */
typedef enum {
    CI_CAPI_NONE = 0,        /* not a Containers API path */
    CI_CAPI_CONTAINERS,      /* /containers            (list, create) */
    CI_CAPI_CONTAINER,       /* /containers/{id}       (retrieve, delete) */
    CI_CAPI_FILES,           /* /containers/{id}/files (list, upload) */
    CI_CAPI_FILE,            /* .../files/{file_id}    (retrieve, delete) */
    CI_CAPI_CONTENT,         /* .../files/{file_id}/content */
    CI_CAPI_NO_SUCH_PATH     /* under /containers, but nothing the API has */
} ci_capi_kind;

typedef struct ci_capi_route {
    ci_capi_kind kind;
    const char *id;          /* the container's, when the path has one */
    const char *file_id;     /* the file's, when the path has one */
} ci_capi_route;

/* Read URI (a request's path, unescaped as httpd hands it) into OUT
 * (memory from P). */
void ci_capi_route_of(apr_pool_t *p, const char *uri, ci_capi_route *out);

/* A list's parameters: limit (1-100, default 20), order (asc|desc, NULL for
 * the default), after and name (UTF-8, NULL when absent). */
typedef struct ci_capi_paging {
    int limit;
    const char *order;
    const char *after;
    const char *name;
} ci_capi_paging;

/* QUERY (r->args: NULL or the raw query string) as a list's parameters:
 * 0, or -1 with *ERR (400) naming the parameter. */
int ci_capi_paging_of(apr_pool_t *p, const char *query, ci_capi_paging *out,
                      ci_error *err);


/* OpenAI's list envelope of DATA (an array of objects with an "id", taken
 * by the envelope): object "list", data, first_id, last_id, has_more. */
json_object *ci_capi_list(json_object *data, int has_more);

/* A create's body: a JSON object with a string "name", and of the right
 * type where present: "file_ids" (array), "memory_limit" (string),
 * "expires_after" ({"anchor": "last_active_at", "minutes": 1..MAX_MINUTES}).
 * 0 with *IDLE_SECONDS (DEFAULT_IDLE when expires_after is absent), or -1
 * with *ERR (400). The tier's value is the caller's to check. */
int ci_capi_check_create(apr_pool_t *p, json_object *body, int max_minutes,
                         int default_idle, int *idle_seconds, ci_error *err);

#endif

/*
 * ci_skill_api.h - what a Skills API request asks (its path, its upload)
 * and what OpenAI answers (its objects), httpd-free: the handler
 * (httpd/ci_skills_api.c) is the glue between these, the store
 * (ci_skill_store.h) and the records' host (ci_skill_ops.h).
 *
 * An upload is a multipart/form-data body, read as it arrives
 * (ci_multipart.h) into one bundle (ci_skill_bundle.h):
 *   - "files": one zip holding one folder;
 *   - "files[]": a folder's files, each part's filename its path with the
 *     folder ("basic_math/SKILL.md"), as OpenAI's SDKs send a directory;
 *     one "files[]" part that is a zip and whose name has no folder is the
 *     zip (the Python SDK sends a list of one file that way);
 *   - "default" (a version's create only): "true" or "false".
 * Any other part, the two kinds mixed, or a zip part twice, is refused;
 * every limit is held as the bytes arrive (a part past its cap stops the
 * reader at once: nothing past it is kept).
 */
#ifndef CI_SKILL_API_H
#define CI_SKILL_API_H

#include <apr_pools.h>
#include <json-c/json.h>
#include "ci_error.h"
#include "ci_multipart.h"
#include "ci_skill_bundle.h"

/* ---- the path: what follows its last "/skills" segment ---- */
typedef enum {
    CI_SKAPI_NONE = 0,          /* not a Skills API path */
    CI_SKAPI_SKILLS,            /* /skills                 (list, create) */
    CI_SKAPI_SKILL,             /* /skills/{id}            (retrieve, default, delete) */
    CI_SKAPI_SKILL_CONTENT,     /* /skills/{id}/content */
    CI_SKAPI_VERSIONS,          /* /skills/{id}/versions   (list, create) */
    CI_SKAPI_VERSION,           /* .../versions/{version}  (retrieve, delete) */
    CI_SKAPI_VERSION_CONTENT,   /* .../versions/{version}/content */
    CI_SKAPI_NO_SUCH_PATH       /* under /skills, but nothing the API has */
} ci_skapi_kind;

typedef struct ci_skapi_route {
    ci_skapi_kind kind;
    const char *skill_id;       /* when the path has one */
    const char *version;        /* when the path has one */
} ci_skapi_route;

/* Read URI (unescaped, as httpd hands it) into OUT (memory from P). */
void ci_skapi_route_of(apr_pool_t *p, const char *uri, ci_skapi_route *out);

/* ---- an upload ---- */
typedef struct ci_skapi_upload ci_skapi_upload;

/* A reader of a body with BOUNDARY under LIMITS (NULL: the defaults);
 * WITH_DEFAULT: the "default" field is allowed (a version's create).
 * Memory from P, which holds the files until it is destroyed. */
ci_skapi_upload *ci_skapi_upload_make(apr_pool_t *p, const char *boundary,
                                      const ci_skill_limits *limits, int with_default);

/* LEN more bytes of the body: 0 (go on), 1 (the body is complete), or -1
 * with the refusal in the reader (ci_skapi_upload_finish says it). */
int ci_skapi_upload_feed(ci_skapi_upload *u, const char *data, apr_size_t len);

/* The end of the body: 0 with *OUT (the bundle checked) and *MAKE_DEFAULT
 * (the "default" field; 0 when absent), or -1 with *ERR (400, param
 * "files" or "default"). */
int ci_skapi_upload_finish(ci_skapi_upload *u, ci_skill_bundle **out, int *make_default,
                           ci_error *err);

/* ---- the answers ---- */
/* The skill object OpenAI shows, from the records' SK (ci_skill_ops.h). */
json_object *ci_skapi_skill(json_object *sk);
/* The skill.version object, from the records' V. */
json_object *ci_skapi_version(json_object *v);
/* {id, object:"skill.deleted", deleted:true}. */
json_object *ci_skapi_skill_deleted(const char *id);
/* {id, object:"skill.version.deleted", deleted:true, version}. */
json_object *ci_skapi_version_deleted(const char *id, int version);

/* The refusal of the records' STATUS (not "ok") about skill SKILL_ID
 * (version VERSION when one was named) into ERR, from P. */
void ci_skapi_refusal(apr_pool_t *p, const char *status, const char *skill_id,
                      const char *version, ci_error *err);

#endif

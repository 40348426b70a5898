/*
 * e2b_internal.h - what the e2b provider's files share (sandbox_e2b.c: the
 * sandbox, its transport and its handle; e2b_files.c: container files
 * through envd). Not for use outside the provider.
 */
#ifndef E2B_INTERNAL_H
#define E2B_INTERNAL_H

#include <curl/curl.h>
#include <apr_hash.h>
#include <apr_pools.h>
#include "ci_curl.h"
#include "ci_sandbox.h"

/* The e2b provider's own keys of a sandbox tool (ci_sandbox_def's conf). */
typedef struct ci_e2b_conf {
    const char *api_key_spec;      /* as written: env:VAR, file:PATH or literal */
    const char *api_key;           /* resolved at configuration load; secret */
    const char *api_base;
    const char *template_id;
    int lifetime;                  /* seconds */
    const char *sandbox_url;
} ci_e2b_conf;

/* DEF's e2b keys (DEF is a tool of the e2b provider). */
#define CI_E2B(def) ((ci_e2b_conf *)(def)->conf)

/* The code-interpreter server's port (data plane: /execute, /contexts). */
#define E2B_PORT "49999"

struct ci_sandbox {
    apr_pool_t *p;
    const ci_sandbox_def *def;
    CURL *curl;               /* reused: keeps both planes' connections warm */
    char *id;                 /* the provider's sandbox id */
    char *api_key;            /* the key this sandbox was created with */
    const char *api_base;     /* without a trailing slash */
    const char *data_base;    /* without a trailing slash */
    char *envd_token;         /* X-Access-Token */
    char *traffic_token;      /* E2B-Traffic-Access-Token, or NULL */
    volatile apr_uint32_t interrupted;
    /* a container's (attach) */
    int container;
    int idle;                 /* seconds it lives unused */
    char *context_id;         /* the execution context its code runs in */
};

/* ---- sandbox_e2b.c ---- */

/* Add "NAME: VALUE" to *LIST without leaving a copy of VALUE behind ("" for
 * VALUE: libcurl sends no header of that name). 0, or -1 out of memory. */
int e2b_add_header(struct curl_slist **list, const char *name, const char *value);
/* Wipe and free a header list. */
void e2b_free_headers(struct curl_slist *list);
/* The transport of every call (T must outlive it); SB: abort when it is
 * interrupted. */
void e2b_set_transport(CURL *h, ci_curl_transport *t, long connect_ms, long total_ms,
                       ci_sandbox *sb);
void e2b_set_body(CURL *h, const char *body, apr_size_t len);
/* The headers that reach SB's server on PORT: its tokens (never the API
 * key), its id and the port (the sandbox proxy routes by them), no
 * "Expect: 100-continue". 0, or -1 out of memory. */
int e2b_sandbox_headers(ci_sandbox *sb, const char *port, struct curl_slist **hdrs);
/* The sandbox HANDLE names (a container's, from e2b_handle), reached with no
 * call made: its life is left as it is. Its pool P's cleanup wipes it. */
apr_status_t e2b_open(apr_pool_t *p, const ci_sandbox_def *def, const char *handle,
                      ci_sandbox **out, const char **err);

/* ---- e2b_files.c: container files through envd ---- */

ci_file_status e2b_files_list(apr_pool_t *p, const ci_file_target *t,
                              apr_array_header_t **files, const char **err);
ci_file_status e2b_file_get(apr_pool_t *p, const ci_file_target *t, const char *name,
                            apr_int64_t max, const ci_file_sink *sink, const char **err);
ci_file_status e2b_file_delete(apr_pool_t *p, const ci_file_target *t, const char *name,
                               const char **err);
ci_file_status e2b_file_put(apr_pool_t *p, const ci_file_target *t, const char *name,
                            const ci_file_limits *limits, const ci_file_source *src,
                            const char **err);
/* Make /mnt/data in a container's new sandbox. NULL, or why not. */
const char *e2b_files_prepare(ci_sandbox *sb, apr_pool_t *p);
/* The regular files under /mnt/data now (for e2b_files_changed), or NULL
 * when they could not be listed. */
apr_hash_t *e2b_files_snapshot(ci_sandbox *sb, apr_pool_t *p);
/* RES->files: the names of the regular files under /mnt/data that are new
 * or changed since BEFORE (nothing when BEFORE is NULL or the listing
 * fails). Memory from P. */
void e2b_files_changed(ci_sandbox *sb, apr_pool_t *p, apr_hash_t *before,
                       ci_exec_result *res);

#endif

/*
 * e2b_internal.h - what the e2b provider's files share. Not for use outside
 * the provider. Its files call only down this list, never back up:
 *
 *   sandbox_e2b.c    the provider: creating, running code, containers,
 *                    deleting and reaping, the tool's keys, its record
 *   e2b_process.c    the hosted shell through envd's process service
 *   e2b_files.c      container files through envd (and the listing of
 *                    /mnt/data every run takes)
 *   e2b_envd.c       one call to envd
 *   e2b_control.c    the control plane: one call, a sandbox's life
 *   e2b_handle.c     a sandbox's local state, a container's handle
 *   e2b_http.c       headers, transport and body of every call
 */
#ifndef E2B_INTERNAL_H
#define E2B_INTERNAL_H

#include <curl/curl.h>
#include <apr_hash.h>
#include <apr_pools.h>
#include "ci_buf.h"
#include "ci_curl.h"
#include "ci_json.h"
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
/* envd's port (files, processes). */
#define ENVD_PORT "49983"
/* The sandbox user envd acts as (files it writes, commands it runs, are the
 * code's): the query parameter of /files, the Basic credentials of its
 * Connect services, base64("user:"). Sent always: envd before 0.4 has no
 * default user. */
#define ENVD_USER "user"
#define ENVD_BASIC "Basic dXNlcjo="
#define ENVD_CONNECT_MS 10000L
/* Seconds between the keepalive events of a process stream (the SDK's). */
#define ENVD_KEEPALIVE_S "50"
#define E2B_DATA_DIR "/mnt/data"

#define MSG_STOPPED "The execution was stopped because the request ended."

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
    int data_dir;             /* /mnt/data is known to exist (a container's,
                                 or made for a shell call) */
};

/* ---- e2b_http.c: what every call shares ---- */

/* Wipe S (NULL: nothing). */
void e2b_wipe(char *s);
/* Wipe and free S; NULL. */
char *e2b_wiped_free(char *s);
/* Add "NAME: VALUE" to *LIST without leaving a copy of VALUE behind ("" for
 * VALUE: libcurl sends no header of that name). 0, or -1 out of memory. */
int e2b_add_header(struct curl_slist **list, const char *name, const char *value);
/* Wipe and free a header list. */
void e2b_free_headers(struct curl_slist *list);
/* Whether SB was interrupted. */
int e2b_interrupted(ci_sandbox *sb);
/* The transport of every call (T must outlive it); SB: abort when it is
 * interrupted. */
void e2b_set_transport(CURL *h, ci_curl_transport *t, long connect_ms, long total_ms,
                       ci_sandbox *sb);
void e2b_set_body(CURL *h, const char *body, apr_size_t len);
/* The headers that reach SB's server on PORT: its tokens (never the API
 * key), its id and the port (the sandbox proxy routes by them), no
 * "Expect: 100-continue". 0, or -1 out of memory. */
int e2b_sandbox_headers(ci_sandbox *sb, const char *port, struct curl_slist **hdrs);

/* ---- e2b_handle.c: a sandbox's local state, a container's handle ---- */

#define MAX_HANDLE_LEN 16384
#define MSG_HANDLE "the container's E2B handle is not usable"

/* Provider ids go into URL paths and host names: letters, digits, - and _. */
int e2b_valid_id(const char *s);
/* Tokens go into header values: visible ASCII only. */
int e2b_valid_token(const char *s);
/* URL without its trailing slashes, from P. */
const char *e2b_trim_slash(apr_pool_t *p, const char *url);
/* SB's local state for DEF: its cleanup (e2b_sandbox_cleanup, on P), its
 * HTTP handle, the key and the control plane it is reached with. */
apr_status_t e2b_sandbox_init(ci_sandbox *sb, apr_pool_t *p, const ci_sandbox_def *def,
                              const char **err);
/* Wipe the secrets of the sandbox DATA and close its HTTP handle. */
apr_status_t e2b_sandbox_cleanup(void *data);
/* Wipe the tokens of a parsed handle before json-c frees it. */
void e2b_wipe_handle_json(json_object *root);
/* SB's handle (the provider's handle entry): secret; NULL once released. */
const char *e2b_handle(ci_sandbox *sb, apr_pool_t *p);
/* The sandbox HANDLE names (a container's, from e2b_handle), reached with no
 * call made: its life is left as it is. Its pool P's cleanup wipes it. */
apr_status_t e2b_open(apr_pool_t *p, const ci_sandbox_def *def, const char *handle,
                      ci_sandbox **out, const char **err);

/* ---- e2b_control.c: the control plane ---- */

/* A control-plane answer: one allocation of a fixed size, never grown (not
 * a ci_buf), because it holds the sandbox's tokens and is wiped after use:
 * growing would leave copies behind in the pool. */
typedef struct e2b_answer {
    char *buf;            /* NULL: the body is read and dropped */
    apr_size_t len, cap;
    int over;
    int drop_rest;        /* past CAP: keep reading, drop the rest (OVER set) */
} e2b_answer;

/* libcurl's write callback into an e2b_answer. */
size_t e2b_on_answer(char *ptr, size_t size, size_t nmemb, void *userdata);
/* One control-plane call (METHOD is POST with BODY, or DELETE). *STATUS is
 * the HTTP status, 0 when none arrived. SB: abort when it is interrupted. */
CURLcode e2b_control_call(CURL *h, const char *method, const char *url, const char *key,
                          const char *body, e2b_answer *ans, ci_sandbox *sb, long *status);
/* The service's own message from an error body {code, message}: short,
 * printable, and never anything holding KEY. */
const char *e2b_service_message(apr_pool_t *p, const e2b_answer *a, const char *key);

typedef enum {
    TIMEOUT_SET,        /* it lives SECONDS from now */
    TIMEOUT_GONE,       /* it is gone, or past the plan's longest life */
    TIMEOUT_FAILED,     /* the service could not be asked, or refused */
    TIMEOUT_STOPPED     /* interrupted */
} e2b_timeout;

/* SB lives SECONDS from now (POST /sandboxes/{id}/timeout). ABORTABLE: stop
 * when SB is interrupted. *WHY (memory from P, no secret) unless
 * TIMEOUT_SET. */
e2b_timeout e2b_set_timeout(ci_sandbox *sb, apr_pool_t *p, int seconds, int abortable,
                            const char **why);
/* Seconds a sandbox of DEF lives after each call. */
int e2b_lifetime_of(const ci_sandbox_def *def);
/* Before anything runs in SB: CI_EXEC_COMPLETED when it may go ahead (its
 * life extended to cover it), else why not (*MSG for the model). */
ci_exec_outcome e2b_before_run(ci_sandbox *sb, apr_pool_t *p, const char **msg);

/* ---- e2b_envd.c: one call to envd ---- */

#define ENVD_CALL_MS 30000L

/* How an envd call ended. */
typedef enum {
    ENVD_OK,
    ENVD_MISSING,       /* not found (404 / not_found) */
    ENVD_EXISTS,        /* already exists (409 / already_exists) */
    ENVD_GONE,          /* the sandbox is gone (the proxy's 502) */
    ENVD_FAILED         /* anything else: *ERR says what */
} envd_rc;

/* One call to envd (fields left out are 0/NULL). */
typedef struct envd_call {
    const char *url;
    const char *rpc_body;         /* a Connect call's request */
    apr_size_t rpc_len;           /* its length (0: a string) */
    const char *rpc_type;         /* its content type (NULL: unary JSON; a
                                     stream's also asks for keepalives) */
    curl_mime *mime;              /* an upload */
    curl_write_callback on_data;  /* NULL: the answer goes to ANSWER */
    void *baton;
    ci_buf *answer;
    long total_ms;
    int abortable;                /* stopped when the sandbox is interrupted */
} envd_call;

/* envd's base URL: the data plane's host with envd's port, or the
 * sandbox_url override (a proxy that routes by E2b-Sandbox-Port). */
const char *e2b_envd_base(ci_sandbox *sb, apr_pool_t *p);
/* One call to SB's envd. *STATUS: the HTTP status, 0 when none arrived. */
CURLcode e2b_envd_perform(ci_sandbox *sb, const envd_call *c, long *status);
/* What a call that did not answer 200 means (*ERR: never a message of
 * envd's, which may quote paths). */
envd_rc e2b_envd_failure(apr_pool_t *p, CURLcode rc, long status, const ci_buf *answer,
                         const char **err);
/* A unary Connect call, POST /PROCEDURE ("process.Process/SendSignal") with
 * REQ: *OUT the answer. */
envd_rc e2b_envd_rpc(ci_sandbox *sb, apr_pool_t *p, const char *procedure, json_object *req,
                     json_object **out, const char **err);
/* A Connect error's code ("not_found"): lower-case words, else NULL. */
const char *e2b_connect_code(json_object *root);

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

/* ---- e2b_process.c: the hosted shell through envd's process service ---- */

apr_status_t e2b_run_commands(ci_sandbox *sb, apr_pool_t *p, const ci_shell_action *action,
                              ci_exec_result *res);

#endif

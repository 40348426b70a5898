/*
 * mod_code_interpreter.h - the httpd glue's shared declarations: module
 * record, configuration records and the entry points of each glue file.
 */
#ifndef MOD_CODE_INTERPRETER_H
#define MOD_CODE_INTERPRETER_H

#include <apr_hash.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include "ci_config.h"
#include "ci_loop.h"
#include "ci_request.h"
#include "ci_upstream.h"

extern module AP_MODULE_DECLARE_DATA code_interpreter_module;
#ifndef CI_MODULE_MAIN
APLOG_USE_MODULE(code_interpreter);
#endif

#define CI_DEFAULT_FUNCTION "python"
#define CI_UNSET -1

/* Server-wide settings (main server; virtual hosts inherit them). */
typedef struct ci_server_conf {
    apr_hash_t *sandboxes;   /* name -> ci_sandbox_def* */
    apr_hash_t *declared_at; /* name -> "file:line" */
    int workers;
    int queue_limit;
    int max_sandboxes;
    const char *audit_log;   /* CodeInterpreterAuditLog: a path or "|command" */
} ci_server_conf;

/* Per directory / location. */
typedef struct ci_dir_conf {
    int enabled;                 /* CI_UNSET, 0, 1 */
    const char *sandbox;         /* sandbox tool name */
    int max_loops;
    apr_off_t max_body;
    apr_interval_time_t deadline;
    const char *upstream;        /* follow-up URL override */
    const char *function_name;
    apr_interval_time_t keepalive;
    apr_interval_time_t connect_timeout;
    apr_interval_time_t upstream_timeout;
    const char *ca_file;
    const char *client_cert;
    const char *client_key;
    const char *proxy;
    int proxy_set;
} ci_dir_conf;

/* Defaults. */
#define CI_DEFAULT_MAX_LOOPS 10
#define CI_DEFAULT_MAX_BODY ((apr_off_t)32 * 1024 * 1024)
#define CI_DEFAULT_DEADLINE_S 600
#define CI_DEFAULT_KEEPALIVE_S 15
#define CI_DEFAULT_CONNECT_TIMEOUT_S 10
#define CI_DEFAULT_WORKERS 8
#define CI_DEFAULT_QUEUE_LIMIT 64
#define CI_DEFAULT_MAX_SANDBOXES 64

/* Effective values (defaults applied). */
apr_off_t ci_dir_max_body(const ci_dir_conf *d);
int ci_dir_max_loops(const ci_dir_conf *d);
apr_interval_time_t ci_dir_deadline(const ci_dir_conf *d);
apr_interval_time_t ci_dir_keepalive(const ci_dir_conf *d);
const char *ci_dir_function_name(const ci_dir_conf *d);
const ci_sandbox_def *ci_sandbox_lookup(server_rec *s, const char *name);
ci_server_conf *ci_server_config(server_rec *s);

/* State of one intercepted request, in r->request_config. */
typedef struct ci_req_state {
    ci_request *req;
    const ci_sandbox_def *sandbox;
    const char *tag;          /* server-minted key of this request's sandbox */
    const char *container_id; /* what the client sees */
    apr_time_t started;
    apr_interval_time_t module_time;   /* time spent in the module's own work */
} ci_req_state;

ci_req_state *ci_state_get(request_rec *r);

/* ci_input.c */
void ci_input_register_hooks(apr_pool_t *p);

/* ci_output.c */
void ci_output_register_hooks(apr_pool_t *p);
extern const char ci_output_filter_name[];

/* Answer R now with ERR (OpenAI shape), before any byte was sent. */
int ci_send_error(request_rec *r, const ci_error *err);

/* ci_session.c: the request's sandbox. */
typedef struct ci_session ci_session;
ci_session *ci_session_create(request_rec *r, const ci_sandbox_def *def,
                              const char *tag);
/* Run CODE; fills RES. Returns APR_SUCCESS, APR_EAGAIN (queue full: 503),
 * APR_EGENERAL with *ERR (sandbox could not start: 503). WAIT_TICK is called
 * every TICK while waiting (keepalives, abort checks); it returns non-zero
 * to give up (the execution is interrupted). */
apr_status_t ci_session_run(ci_session *s, const char *code, ci_exec_result *res,
                            apr_interval_time_t tick,
                            int (*wait_tick)(void *), void *baton,
                            ci_error *err);

/* ci_audit.c: the audit log of executions. */
const char *ci_audit_set(cmd_parms *cmd, void *dummy, const char *target);
int ci_audit_open(apr_pool_t *pconf, server_rec *s);
void ci_audit_child_init(apr_pool_t *pchild);
void ci_audit_execution(request_rec *r, const char *tool, const char *container,
                        const ci_call *call, const ci_exec_result *res);

/* Start the warm pools of this child (tools with warm=N). */
void ci_warm_start(apr_pool_t *pchild, server_rec *s);
/* Keeps the allocators of ended sessions for the next ones (child_init). */
void ci_session_child_init(apr_pool_t *pchild);

/* Sandbox lifecycle counters of this child, for logs and tests. */
void ci_session_counts(apr_uint32_t *started, apr_uint32_t *destroyed);

#endif

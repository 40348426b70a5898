/*
 * ci_audit.c - the opt-in audit log (CodeInterpreterAuditLog): one JSON line
 * per execution, through httpd's file or piped-log facilities. It holds what
 * ran and how it ended; never a key, a token or the execution's output.
 */
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <http_core.h>
#include <http_log.h>
#include "ci_audit.h"
#include "ci_settings.h"
#include "ci_json.h"
#include "ci_request_state.h"
#include "ci_module.h"

static apr_file_t *audit_file;           /* this generation's log, or NULL */
static apr_thread_mutex_t *audit_lock;   /* one line at a time per child */

const char *ci_audit_set(cmd_parms *cmd, void *dummy, const char *target)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err)
        return err;
    c->audit_log = target;
    return NULL;
}

int ci_audit_open(apr_pool_t *pconf, server_rec *s)
{
    ci_server_conf *c = ci_server_config(s);
    const char *target = c->audit_log;
    apr_status_t rv;

    audit_file = NULL;
    if (!target)
        return OK;
    if (*target == '|') {
        piped_log *pl = ap_open_piped_log_ex(pconf, target + 1, APR_SHELLCMD_ENV);
        if (!pl) {
            ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0501: CodeInterpreterAuditLog "
                         "'%s': the piped logger could not be started", target);
            return HTTP_INTERNAL_SERVER_ERROR;
        }
        audit_file = ap_piped_log_write_fd(pl);
        return OK;
    }
    rv = apr_file_open(&audit_file, ap_server_root_relative(pconf, target),
                       APR_FOPEN_WRITE | APR_FOPEN_APPEND | APR_FOPEN_CREATE |
                           APR_FOPEN_LARGEFILE, APR_FPROT_OS_DEFAULT, pconf);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s, "CI0502: CodeInterpreterAuditLog "
                     "'%s': the file cannot be opened for appending", target);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    return OK;
}

const char *ci_audit_file_path(apr_pool_t *p, server_rec *s)
{
    const char *target = ci_server_config(s)->audit_log;
    return target && *target != '|' ? ap_server_root_relative(p, target) : NULL;
}

void ci_audit_child_init(apr_pool_t *pchild)
{
    if (audit_file)
        apr_thread_mutex_create(&audit_lock, APR_THREAD_MUTEX_DEFAULT, pchild);
}

static void add_string(json_object *o, const char *key, const char *value)
{
    json_object_object_add(o, key, value ? json_object_new_string(value) : NULL);
}

static void write_line(request_rec *r, json_object *line)
{
    apr_size_t len;
    const char *text = apr_pstrcat(r->pool, ci_json_text(line, &len), "\n", NULL);
    if (audit_lock)
        apr_thread_mutex_lock(audit_lock);
    apr_file_write_full(audit_file, text, len + 1, NULL);
    if (audit_lock)
        apr_thread_mutex_unlock(audit_lock);
}

void ci_audit_admission(request_rec *r, const char *tool, const char *container,
                        const char *event, const char *reason, const char *evicted)
{
    json_object *line;
    char when[APR_RFC822_DATE_LEN];
    ci_req_state *st = ci_request_state(r);
    if (!audit_file)
        return;
    line = ci_json_own(r->pool, json_object_new_object());
    apr_rfc822_date(when, apr_time_now());
    add_string(line, "time", when);
    add_string(line, "request_id", r->log_id);
    add_string(line, "client", r->useragent_ip);
    add_string(line, "event", event);
    add_string(line, "tool", tool);
    add_string(line, "container_id", container);
    add_string(line, "owner", st ? st->owner : apr_table_get(r->notes, "ci-owner"));
    add_string(line, "reason", reason);
    add_string(line, "evicted", evicted);
    write_line(r, line);
}

void ci_audit_skills(request_rec *r, const char *container, const char *owner,
                     json_object *skills)
{
    json_object *line, *list;
    char when[APR_RFC822_DATE_LEN];
    size_t i, n = skills ? json_object_array_length(skills) : 0;
    if (!audit_file || !n)
        return;
    line = ci_json_own(r->pool, json_object_new_object());
    list = json_object_new_array();
    apr_rfc822_date(when, apr_time_now());
    add_string(line, "time", when);
    add_string(line, "request_id", r->log_id);
    add_string(line, "client", r->useragent_ip);
    add_string(line, "event", "skills");
    add_string(line, "container_id", container);
    add_string(line, "owner", owner);
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(skills, i), *o = json_object_new_object();
        json_object *version = json_object_object_get(s, "version");
        if (version) {
            add_string(o, "skill_id", ci_json_str(s, "skill_id"));
            json_object_object_add(o, "version", json_object_get(version));
        }
        else
            json_object_object_add(o, "inline", json_object_new_boolean(1));
        add_string(o, "name", ci_json_str(s, "name"));
        add_string(o, "bundle", ci_json_str(s, "digest"));
        json_object_array_add(list, o);
    }
    json_object_object_add(line, "skills", list);
    write_line(r, line);
}

/* A shell call's commands and how each that ran ended: its exit code, or
 * "timeout". */
static void add_commands(json_object *line, const ci_execution *e)
{
    json_object *cmds = json_object_new_array(), *codes = json_object_new_array();
    int i;
    for (i = 0; e->command_list && i < e->command_list->nelts; i++)
        json_object_array_add(cmds, json_object_new_string(
                                  APR_ARRAY_IDX(e->command_list, i, const char *)));
    for (i = 0; e->commands && i < e->commands->nelts; i++) {
        const ci_command_result *c = &APR_ARRAY_IDX(e->commands, i, ci_command_result);
        json_object_array_add(codes, c->timed_out ? json_object_new_string("timeout")
                                                  : json_object_new_int(c->exit_code));
    }
    add_string(line, "kind", e->kind);
    json_object_object_add(line, "commands", cmds);
    json_object_object_add(line, "exit_codes", codes);
}

/* The execution hook's first user (registered by the module): one line per
 * execution. */
int ci_audit_execution(request_rec *r, const ci_execution *e)
{
    json_object *line;
    char when[APR_RFC822_DATE_LEN];

    if (!audit_file)
        return DECLINED;
    line = ci_json_own(r->pool, json_object_new_object());
    apr_rfc822_date(when, apr_time_now());
    add_string(line, "time", when);
    add_string(line, "request_id", r->log_id);
    add_string(line, "client", r->useragent_ip);
    add_string(line, "event", "execution");
    add_string(line, "tool", e->tool);
    add_string(line, "container_id", e->container_id);
    add_string(line, "owner", e->owner);
    add_string(line, "call_id", e->call_id);
    if (e->command_list)
        add_commands(line, e);
    else
        add_string(line, "code", e->text);
    json_object_object_add(line, "output_bytes", json_object_new_int64((int64_t)e->output_bytes));
    json_object_object_add(line, "images", json_object_new_int(e->images));
    add_string(line, "status", e->failed ? "failed" : "completed");
    add_string(line, "outcome", ci_exec_outcome_name(e->outcome));
    add_string(line, "failure", e->failure);
    json_object_object_add(line, "duration_ms",
                           json_object_new_double((double)e->duration / 1000.0));
    write_line(r, line);
    return OK;
}

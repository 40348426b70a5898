/*
 * mod_code_interpreter.c - the module record and the server hooks.
 * Directives and settings live in ci_directives.c; the request side in
 * ci_input.c; the response side in ci_output.c and the loop in ci_driver.c.
 */
#define CI_MODULE_MAIN
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>
#include <ap_provider.h>
#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>
#include <ap_mpm.h>
#include <unixd.h>
#include "ci_audit.h"
#include "ci_child.h"
#include "ci_containers_api.h"
#include "ci_skills_api.h"
#include "ci_directives.h"
#include "ci_settings.h"
#include "ci_input.h"
#include "ci_log.h"
#include "ci_output.h"
#include "ci_owner.h"
#include "ci_registry.h"
#include "ci_sandbox.h"
#include "ci_session.h"
#include "ci_dirclient.h"
#include "ci_supervisor_process.h"
#include "ci_upstream.h"
#include "ci_workers.h"
#include "ci_module.h"
#include "mod_code_interpreter.h"

/* Lines from the httpd-free code (ci_log.h) go to the main server's log. */
static server_rec *log_server;

static void log_sink(ci_log_level level, const char *file, int line,
                     const char *message)
{
    ap_log_error(file, line, APLOG_MODULE_INDEX, (int)level, 0, log_server, "%s",
                 message);
}

/* ---- the public interface (mod_code_interpreter.h) ------------------------ */

/* Sandbox providers live in httpd's provider registry: the built-in ones,
 * registered below, and any another module registers. */
static const ci_provider *find_provider(const char *name)
{
    return ap_lookup_provider(CI_PROVIDER_GROUP, name, CI_PROVIDER_VERSION);
}

static int builtin_rank(const char *name)
{
    int i;
    for (i = 0; ci_builtin_providers[i]; i++)
        if (!strcmp(ci_builtin_providers[i]->name, name))
            return i;
    return i;
}

/* Built-in providers first, in their order, then the others by name. */
static int compare_provider_names(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    int rx = builtin_rank(x), ry = builtin_rank(y);
    return rx != ry ? rx - ry : strcmp(x, y);
}

static const char *provider_names(apr_pool_t *p)
{
    apr_array_header_t *listed = ap_list_provider_names(p, CI_PROVIDER_GROUP,
                                                        CI_PROVIDER_VERSION);
    apr_array_header_t *names = apr_array_make(p, listed->nelts, sizeof(const char *));
    int i;
    for (i = 0; i < listed->nelts; i++)
        *(const char **)apr_array_push(names) =
            APR_ARRAY_IDX(listed, i, ap_list_provider_names_t).provider_name;
    qsort(names->elts, names->nelts, sizeof(const char *), compare_provider_names);
    return ci_provider_list_text(p, names);
}

static void register_providers(apr_pool_t *p)
{
    int i;
    for (i = 0; ci_builtin_providers[i]; i++)
        ap_register_provider(p, CI_PROVIDER_GROUP, ci_builtin_providers[i]->name,
                             CI_PROVIDER_VERSION, ci_builtin_providers[i]);
    ci_provider_set_finder(find_provider, provider_names);
}

/* ---- server hooks ------------------------------------------------------ */

static int ci_pre_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp)
{
    ci_directives_pre_config(pconf);
    ci_skills_api_pre_config();
    return OK;
}

static int ci_check_config(apr_pool_t *pconf, apr_pool_t *plog,
                           apr_pool_t *ptemp, server_rec *s)
{
    int rv = ci_directives_check(s);
    return rv != OK ? rv : ci_supervisor_process_check_config(ptemp, s);
}

/* Start, then stop, one real sandbox of every tool a location uses whose
 * provider has a probe: a host that passes starts requests' sandboxes. */
static int probe_sandboxes(apr_pool_t *ptemp, server_rec *s)
{
    apr_array_header_t *defs = ci_sandbox_all(ptemp, s);
    int i;
    for (i = 0; i < defs->nelts; i++) {
        const ci_sandbox_def *d = APR_ARRAY_IDX(defs, i, const ci_sandbox_def *);
        const char *err = NULL;
        if (!d->provider->probe || ci_directives_used(s, d->name) != d)
            continue;
        if (d->provider->probe(ptemp, d, ap_unixd_config.user_id,
                               ap_unixd_config.group_id, &err) != APR_SUCCESS) {
            ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_CRIT, 0, s,
                         "CI0003: the %s code sandbox cannot run on this host: %s",
                         d->provider->name, err);
            return HTTP_INTERNAL_SERVER_ERROR;
        }
    }
    return OK;
}

/* The registry's segment and tools, then its generation's credentials and
 * tool table (files beside the registry, called from here so that the
 * registry calls none of them). */
static int registry_post_config(apr_pool_t *pconf, server_rec *s)
{
    int gen = 0;
    if (ci_registry_post_config(pconf, s) != OK)
        return HTTP_INTERNAL_SERVER_ERROR;
    ap_mpm_query(AP_MPMQ_GENERATION, &gen);
    ci_reg_keep_credentials(pconf, s, (apr_uint32_t)gen);
    ci_reg_publish_table(pconf, s, (apr_uint32_t)gen);
    return OK;
}

static int ci_post_config(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                          server_rec *s)
{
    log_server = s;
    /* The main server's level for this module: where the lines go. */
    ci_log_set(log_sink, ap_get_server_module_loglevel(s, APLOG_MODULE_INDEX));
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG)
        return OK;
    if (ci_upstream_global_init(pconf) != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0002: libcurl could not "
                     "be initialised");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    /* the skill store first: the owners' secret may be kept there */
    if (ci_skills_api_post_config(ptemp, s) != OK || registry_post_config(pconf, s) != OK ||
        ci_audit_open(pconf, s) != OK || ci_owner_post_config(pconf, s, ci_skills_api_secret_path(ptemp, s)) != OK)
        return HTTP_INTERNAL_SERVER_ERROR;
    if (probe_sandboxes(ptemp, s) != OK)
        return HTTP_INTERNAL_SERVER_ERROR;
    return ci_supervisor_process_post_config(pconf, ptemp, s);
}

static void ci_child_init(apr_pool_t *pchild, server_rec *s)
{
    ci_server_conf *c = ci_server_config(s);
    apr_status_t rv = ci_workers_start(pchild, ci_server_workers(c),
                                       ci_server_queue_limit(c));
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "CI0004: the code execution threads could not be started");
        return;
    }
    if ((rv = ci_upstream_child_init(pchild)) != APR_SUCCESS)
        ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s, "CI0005: follow-up "
                     "connections will not be kept (no lock)");
    ci_audit_child_init(pchild);
    ci_registry_child_init(pchild, s);
    ci_session_child_init(pchild, s);
    ci_dirclient_child_init(pchild, s);
}

static void ci_register_hooks(apr_pool_t *p)
{
    register_providers(p);
    APR_OPTIONAL_HOOK(ci, execution, ci_audit_execution, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_pre_config(ci_pre_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_check_config(ci_check_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_post_config(ci_post_config, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_child_init(ci_child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ci_child_register_hooks(p);
    ci_reg_orphans_hooks(p);
    ci_reg_reap_creds_hooks(p);
    ci_reg_status_hooks(p);
    ci_input_register_hooks(p);
    ci_output_register_hooks(p);
    ci_containers_api_register_hooks(p);
    ci_skills_api_register_hooks(p);
}

CI_DECLARE_DATA AP_DECLARE_MODULE(code_interpreter) = {
    STANDARD20_MODULE_STUFF,
    ci_create_dir_conf,
    ci_merge_dir_conf,
    ci_create_server_conf,
    ci_merge_server_conf,
    ci_directives,
    ci_register_hooks
#if defined(AP_MODULE_FLAG_ALWAYS_MERGE)
    , AP_MODULE_FLAG_NONE
#endif
};

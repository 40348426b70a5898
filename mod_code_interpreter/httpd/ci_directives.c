/*
 * ci_directives.c - the module's directives (ci_directives.h): each one
 * read into the configuration records (ci_settings.h), and the checks
 * across directives at configtest.
 */
#include <string.h>
#include <apr_strings.h>
#include <http_core.h>
#include <http_log.h>
#include "ci_audit.h"
#include "ci_owner.h"
#include "ci_directives.h"
#include "ci_settings.h"
#include "ci_skills_api.h"
#include "ci_sandbox.h"
#include "ci_module.h"

/* CodeInterpreter NAME uses seen while reading the configuration, checked
 * against the declared sandboxes in check_config (declaration order and
 * place in the files do not matter). */
typedef struct ci_use {
    const char *name, *file;
    int line;
    server_rec *server;      /* where it is used: only its sandboxes count */
} ci_use;
static apr_array_header_t *sandbox_uses;

/* ---- directives -------------------------------------------------------- */

static const char *directive_error(cmd_parms *cmd, const char *msg)
{
    return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name, msg);
}

static const char *set_sandbox(cmd_parms *cmd, void *dummy, int argc,
                               char *const argv[])
{
    ci_server_conf *c = ci_server_config(cmd->server);
    ci_sandbox_def *def;
    const char *err;

    if ((err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT)))
        return err;
    if (argc < 1)
        return directive_error(cmd, "expected a sandbox name, then key=value settings");
    err = ci_sandbox_def_parse(cmd->pool, argv[0], argc - 1,
                               (const char *const *)argv + 1, &def);
    if (!err)
        err = ci_sandbox_def_resolve(cmd->pool, def);
    if (err)
        return apr_psprintf(cmd->pool, "%s %s: %s", cmd->cmd->name, argv[0], err);
    if (apr_hash_get(c->sandboxes, def->name, APR_HASH_KEY_STRING))
        return apr_psprintf(cmd->pool, "%s %s: declared twice (first at %s): expected "
                                       "each sandbox name once", cmd->cmd->name, argv[0],
                            (const char *)apr_hash_get(c->declared_at, def->name,
                                                       APR_HASH_KEY_STRING));
    apr_hash_set(c->sandboxes, def->name, APR_HASH_KEY_STRING, def);
    apr_hash_set(c->declared_at, def->name, APR_HASH_KEY_STRING,
                 apr_psprintf(cmd->pool, "%s:%d", cmd->directive->filename,
                              cmd->directive->line_num));
    return NULL;
}

static const char *set_server_count(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    int n, *field = (int *)((char *)c + (apr_size_t)cmd->info);
    const char *err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT);
    if (err)
        return err;
    if ((err = ci_parse_count(cmd->pool, v, 100000, 0, &n)))
        return directive_error(cmd, err);
    *field = n;
    return NULL;
}

/* CodeInterpreterMaxContainersPerOwner: 0 leaves the server's cap alone. */
static const char *set_per_owner(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT);
    if (err)
        return err;
    if ((err = ci_parse_count(cmd->pool, v, 100000, 1, &c->max_per_owner)))
        return directive_error(cmd, err);
    return NULL;
}

/* CodeInterpreterDirectory redis://[user:password@]HOST:PORT[/DB]: the
 * container directory shared by several nodes. Main server only: one
 * directory per httpd. */
static const char *set_directory(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    (void)dummy;
    if (err)
        return err;
    c->directory = apr_pcalloc(cmd->pool, sizeof(*c->directory));
    if ((err = ci_redis_parse_url(cmd->pool, v, c->directory)))
        return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name, err);
    c->directory_at = apr_psprintf(cmd->pool, "%s:%d", cmd->directive->filename,
                                   cmd->directive->line_num);
    return NULL;
}

/* CodeInterpreterSkillStore: the folder of the server's skills (made at
 * start). Main server only: the records of one server are in one place. */
static const char *set_skill_store(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    (void)dummy;
    if (err)
        return err;
    if (!(c->skill_store = ap_server_root_relative(cmd->pool, v)))
        return directive_error(cmd, apr_psprintf(cmd->pool, "'%s' is not a valid path", v));
    return NULL;
}

/* CodeInterpreterEvictionGrace and CodeInterpreterCapacityWait: a duration
 * (30s, 5m), or 0. */
static const char *set_server_duration(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    int *field = (int *)((char *)c + (apr_size_t)cmd->info);
    int max = field == &c->capacity_wait ? 600 : CI_MAX_SECONDS;
    const char *err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT);
    if (err)
        return err;
    if (!strcmp(v, "0")) {
        *field = 0;
        return NULL;
    }
    if ((err = ci_parse_duration(cmd->pool, v, max, field)))
        return directive_error(cmd, err);
    return NULL;
}

/* CodeInterpreterEgressConnections / ...PerOwner N: the egress proxy's
 * pool and one owner's share of it (1..100000). */
static const char *set_egress_count(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    int *field = (int *)((char *)c + (apr_size_t)cmd->info);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err)
        return err;
    if ((err = ci_parse_count(cmd->pool, v, 100000, 0, field)))
        return directive_error(cmd, err);
    return NULL;
}

/* CodeInterpreterEgressLifetime DURATION: an egress connection is closed
 * this long after it opened (at most a day). */
static const char *set_egress_lifetime(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err)
        return err;
    if ((err = ci_parse_duration(cmd->pool, v, 86400, &c->egress_lifetime)))
        return directive_error(cmd, err);
    return NULL;
}

/* CodeInterpreterEgressProxyResolves On|Off: names that do not resolve here
 * go to the site proxy by name (On), or are refused (Off). */
static const char *set_egress_proxy_resolves(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err)
        return err;
    if ((err = ci_parse_on_off(cmd->pool, v, &c->egress_proxy_resolves)))
        return directive_error(cmd, err);
    return NULL;
}

/* CodeInterpreterSandboxCgroup auto|off|PATH: where the sandboxes' cgroups
 * v2 are made (ci_cgroup.h). auto: httpd's own service cgroup, when it is
 * delegated to httpd; PATH: a cgroup v2 directory the operator gives. */
static const char *set_sandbox_cgroup(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err)
        return err;
    if (strcasecmp(v, "auto") && strcasecmp(v, "off") && v[0] != '/')
        return directive_error(cmd, apr_psprintf(cmd->pool, "'%s' is not auto, off or "
                                                 "an absolute path", v));
    if (v[0] == '/' && (strstr(v, "/../") || !strcmp(v + strlen(v) - 3, "/..")))
        return directive_error(cmd, apr_psprintf(cmd->pool, "'%s' climbs with '..'", v));
    c->sandbox_cgroup = v[0] == '/' ? v : apr_pstrdup(cmd->pool, v);
    return NULL;
}

/* CodeInterpreterSandboxCPUs N|max: the CPU one sandbox may use at most in
 * its cgroup (cpu.max), in CPUs (0.01 to 1024; "max": no ceiling). */
static const char *set_sandbox_cpus(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    char *end;
    double cpus;
    if (err)
        return err;
    if (!strcasecmp(v, "max")) {
        c->sandbox_cpu_quota_us = 0;
        c->sandbox_cpus_set = 1;
        return NULL;
    }
    cpus = strtod(v, &end);
    if (end == v || *end || !(cpus >= 0.01 && cpus <= 1024))
        return directive_error(cmd, apr_psprintf(cmd->pool, "'%s' is not a number of "
                                                 "CPUs from 0.01 to 1024, nor max", v));
    c->sandbox_cpu_quota_us = (apr_uint64_t)(cpus * 100000 + 0.5);
    c->sandbox_cpus_set = 1;
    return NULL;
}

/* CodeInterpreterMemoryBudget SIZE: what the running containers' tiers may
 * hold on this server together. */
static const char *set_memory_budget(cmd_parms *cmd, void *dummy, const char *v)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, NOT_IN_DIR_CONTEXT);
    if (err)
        return err;
    if ((err = ci_parse_size(cmd->pool, v, (apr_uint64_t)1 << 50, &c->memory_budget)))
        return directive_error(cmd, err);
    return NULL;
}

static const char *set_containers(cmd_parms *cmd, void *conf, const char *v)
{
    ci_loc_conf *d = conf;
    const char *err = ci_parse_on_off(cmd->pool, v, &d->containers);
    return err ? directive_error(cmd, err) : NULL;
}

static const char *set_skills(cmd_parms *cmd, void *conf, const char *v)
{
    ci_loc_conf *d = conf;
    const char *err = ci_parse_on_off(cmd->pool, v, &d->skills);
    if (err)
        return directive_error(cmd, err);
    if (d->skills == 1)
        ci_skills_api_wanted();
    return NULL;
}

static const char *set_enabled(cmd_parms *cmd, void *conf, const char *v)
{
    ci_loc_conf *d = conf;
    ci_use *use;
    if (!strcasecmp(v, "off")) {
        d->enabled = 0;
        d->sandbox = NULL;
        return NULL;
    }
    if (ci_parse_function_name(cmd->pool, v))
        return directive_error(cmd, apr_psprintf(cmd->pool, "'%s' is not valid: "
                                                 "expected On, Off or a sandbox name", v));
    d->enabled = 1;
    d->sandbox = !strcasecmp(v, "on") ? CI_DEFAULT_TOOL : apr_pstrdup(cmd->pool, v);
    use = apr_array_push(sandbox_uses);
    use->name = d->sandbox;
    use->file = cmd->directive->filename;
    use->line = cmd->directive->line_num;
    use->server = cmd->server;
    return NULL;
}

static const char *set_dir_count(cmd_parms *cmd, void *conf, const char *v)
{
    int n;
    const char *err = ci_parse_count(cmd->pool, v, 1000, 0, &n);
    if (err)
        return directive_error(cmd, err);
    ((ci_loc_conf *)conf)->max_loops = n;
    return NULL;
}

static const char *set_max_body(cmd_parms *cmd, void *conf, const char *v)
{
    apr_uint64_t n;
    const char *err = ci_parse_size(cmd->pool, v, (apr_uint64_t)1 << 32, &n);
    if (err)
        return directive_error(cmd, err);
    ((ci_loc_conf *)conf)->max_body = (apr_off_t)n;
    return NULL;
}

static const char *set_dir_seconds(cmd_parms *cmd, void *conf, const char *v)
{
    apr_interval_time_t *field =
        (apr_interval_time_t *)((char *)conf + (apr_size_t)cmd->info);
    int n;
    const char *err = ci_parse_seconds(cmd->pool, v, 86400, &n);
    if (err)
        return directive_error(cmd, err);
    *field = apr_time_from_sec(n);
    return NULL;
}

static const char *set_dir_url(cmd_parms *cmd, void *conf, const char *v)
{
    const char *err = ci_parse_url(cmd->pool, v);
    if (err)
        return directive_error(cmd, err);
    *(const char **)((char *)conf + (apr_size_t)cmd->info) = v;
    return NULL;
}

static const char *set_function_name(cmd_parms *cmd, void *conf, const char *v)
{
    const char *err = ci_parse_function_name(cmd->pool, v);
    if (err)
        return directive_error(cmd, err);
    ((ci_loc_conf *)conf)->function_name = v;
    return NULL;
}

static const char *set_readable_file(cmd_parms *cmd, void *conf, const char *v)
{
    apr_finfo_t fi;
    const char *path = ap_server_root_relative(cmd->pool, v);
    if (!path || apr_stat(&fi, path, APR_FINFO_TYPE, cmd->pool) != APR_SUCCESS ||
        fi.filetype != APR_REG)
        return directive_error(cmd, apr_psprintf(cmd->pool, "'%s' is not a "
                                                 "readable file", v));
    *(const char **)((char *)conf + (apr_size_t)cmd->info) = path;
    return NULL;
}

static const char *set_client_cert(cmd_parms *cmd, void *conf, const char *cert,
                                   const char *key)
{
    ci_loc_conf *d = conf;
    const char *err;
    cmd->info = (void *)APR_OFFSETOF(ci_loc_conf, client_cert);
    if ((err = set_readable_file(cmd, conf, cert)))
        return err;
    if (key) {
        cmd->info = (void *)APR_OFFSETOF(ci_loc_conf, client_key);
        return set_readable_file(cmd, d, key);
    }
    return NULL;
}

static const char *set_proxy(cmd_parms *cmd, void *conf, const char *v)
{
    ci_loc_conf *d = conf;
    d->proxy_set = 1;
    if (!strcasecmp(v, "none")) {
        d->proxy = NULL;
        return NULL;
    }
    return set_dir_url(cmd, conf, v);
}

#define DIR_CONF (RSRC_CONF | ACCESS_CONF)
#define OFF(f) (void *)APR_OFFSETOF(ci_loc_conf, f)
#define SOFF(f) (void *)APR_OFFSETOF(ci_server_conf, f)

const command_rec ci_directives[] = {
    AP_INIT_TAKE_ARGV("CodeInterpreterSandbox", set_sandbox, NULL, RSRC_CONF,
                      "NAME provider=local|e2b [key=value ...]: declare a sandbox tool"),
    AP_INIT_TAKE1("CodeInterpreterWorkers", set_server_count, SOFF(workers), RSRC_CONF,
                  "execution threads per child process"),
    AP_INIT_TAKE1("CodeInterpreterQueueLimit", set_server_count, SOFF(queue_limit),
                  RSRC_CONF, "executions waiting per child before new ones are refused"),
    AP_INIT_TAKE1("CodeInterpreterMaxSandboxes", set_server_count, SOFF(max_sandboxes),
                  RSRC_CONF, "live sandboxes across the whole server"),
    AP_INIT_TAKE1("CodeInterpreterMaxContainersPerOwner", set_per_owner, NULL,
                  RSRC_CONF,
                  "live containers one caller may hold (0: no bound of its own)"),
    AP_INIT_TAKE1("CodeInterpreterDirectory", set_directory, NULL, RSRC_CONF,
                  "redis://[user:password@]HOST:PORT[/DB]: the container directory "
                  "several nodes share"),
    AP_INIT_TAKE1("CodeInterpreterEvictionGrace", set_server_duration,
                  SOFF(eviction_grace), RSRC_CONF,
                  "how long a used container is safe from eviction (0, 30s, 5m)"),
    AP_INIT_TAKE1("CodeInterpreterCapacityWait", set_server_duration, SOFF(capacity_wait),
                  RSRC_CONF, "how long a request waits for room at a cap (0, 5s)"),
    AP_INIT_TAKE1("CodeInterpreterMemoryBudget", set_memory_budget, NULL, RSRC_CONF,
                  "memory the running containers' tiers may hold together"),
    AP_INIT_TAKE1("CodeInterpreterEgressConnections", set_egress_count,
                  SOFF(egress_max_total), RSRC_CONF,
                  "connections the egress proxy holds open at once, all containers "
                  "together (default 512)"),
    AP_INIT_TAKE1("CodeInterpreterEgressConnectionsPerOwner", set_egress_count,
                  SOFF(egress_max_per_owner), RSRC_CONF,
                  "egress connections all containers of one owner hold open at once "
                  "(default: a quarter of CodeInterpreterEgressConnections)"),
    AP_INIT_TAKE1("CodeInterpreterEgressLifetime", set_egress_lifetime, NULL, RSRC_CONF,
                  "how long an egress connection may stay open, busy or not (10m)"),
    AP_INIT_TAKE1("CodeInterpreterEgressProxyResolves", set_egress_proxy_resolves, NULL,
                  RSRC_CONF, "On: a name that does not resolve on this server goes to "
                  "the site proxy by name (default Off: refused)"),
    AP_INIT_TAKE1("CodeInterpreterSandboxCgroup", set_sandbox_cgroup, NULL, RSRC_CONF,
                  "auto (httpd's own cgroup v2, when delegated to it), off, or the path "
                  "of a cgroup v2 directory for the sandboxes' cgroups"),
    AP_INIT_TAKE1("CodeInterpreterSandboxCPUs", set_sandbox_cpus, NULL, RSRC_CONF,
                  "the CPUs one sandbox may use at most, in its cgroup (1; max: no "
                  "ceiling)"),
    AP_INIT_TAKE1("CodeInterpreterAuditLog", ci_audit_set, NULL, RSRC_CONF,
                  "file or |command receiving one JSON line per execution"),
    AP_INIT_TAKE1("CodeInterpreterContainers", set_containers, NULL, DIR_CONF,
                  "On: serve the Containers API (/containers...) at this location"),
    AP_INIT_TAKE1("CodeInterpreterSkills", set_skills, NULL, DIR_CONF,
                  "On: serve the Skills API (/skills...) at this location"),
    AP_INIT_TAKE1("CodeInterpreterSkillStore", set_skill_store, NULL, RSRC_CONF,
                  "the folder the server's skills are kept in (default "
                  CI_DEFAULT_SKILL_STORE ")"),
    AP_INIT_TAKE1("CodeInterpreter", set_enabled, NULL, DIR_CONF,
                  "On, Off or the name of a declared sandbox tool"),
    AP_INIT_TAKE1("CodeInterpreterMaxLoops", set_dir_count, NULL, DIR_CONF,
                  "model rounds whose code is executed, per request"),
    AP_INIT_TAKE1("CodeInterpreterMaxBody", set_max_body, NULL, DIR_CONF,
                  "largest request body and upstream answer buffered"),
    AP_INIT_TAKE1("CodeInterpreterDeadline", set_dir_seconds, OFF(deadline), DIR_CONF,
                  "seconds one request's whole loop may take"),
    AP_INIT_TAKE1("CodeInterpreterKeepalive", set_dir_seconds, OFF(keepalive), DIR_CONF,
                  "seconds between SSE comments while waiting"),
    AP_INIT_TAKE1("CodeInterpreterUpstream", set_dir_url, OFF(upstream), DIR_CONF,
                  "URL follow-up calls go to (default: the URL mod_proxy used)"),
    AP_INIT_TAKE1("CodeInterpreterFunctionName", set_function_name, NULL, DIR_CONF,
                  "name of the function the model sees"),
    AP_INIT_TAKE1("CodeInterpreterConnectTimeout", set_dir_seconds,
                  OFF(connect_timeout), DIR_CONF,
                  "seconds to connect to the upstream on follow-ups"),
    AP_INIT_TAKE1("CodeInterpreterUpstreamTimeout", set_dir_seconds,
                  OFF(upstream_timeout), DIR_CONF,
                  "seconds one follow-up call may take"),
    AP_INIT_TAKE1("CodeInterpreterCAFile", set_readable_file, OFF(ca_file), DIR_CONF,
                  "CA certificates (PEM) to verify an HTTPS upstream"),
    AP_INIT_TAKE12("CodeInterpreterClientCert", set_client_cert, NULL, DIR_CONF,
                   "client certificate (PEM) and optional key for the upstream"),
    AP_INIT_TAKE1("CodeInterpreterProxy", set_proxy, OFF(proxy), DIR_CONF,
                  "outbound proxy URL for follow-ups, or none (the default)"),
    AP_INIT_TAKE1("CodeInterpreterSecret", ci_owner_set_secret, NULL, RSRC_CONF,
                  "file:PATH holding the server secret (owner hashes, sealing)"),
    AP_INIT_TAKE1("CodeInterpreterOwner", ci_owner_set_expr, NULL, DIR_CONF,
                  "expression naming a request's owner (default: its Authorization)"),
    { NULL }
};


/* ---- checks across directives -------------------------------------------- */

void ci_directives_pre_config(apr_pool_t *pconf)
{
    sandbox_uses = apr_array_make(pconf, 4, sizeof(ci_use));
}

int ci_directives_check(server_rec *s)
{
    ci_server_conf *c = ci_server_config(s);
    int i;
    if (c->directory && !c->secret) {
        /* Every node must seal and hash with the same key: a secret made
         * here would be this node's alone. */
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_CRIT, 0, s,
                     "CI0006: CodeInterpreterDirectory (%s) needs CodeInterpreterSecret: "
                     "the nodes sharing a directory must share the secret that hashes "
                     "owners and seals handles", c->directory_at);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    for (i = 0; i < sandbox_uses->nelts; i++) {
        ci_use *u = &APR_ARRAY_IDX(sandbox_uses, i, ci_use);
        /* The server's configuration is merged with the main server's by
         * now: a virtual host sees its own sandboxes and the main ones. */
        if (!ci_sandbox_lookup(u->server, u->name)) {
            ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_CRIT, 0, s,
                         "CI0001: CodeInterpreter %s (%s:%d): no sandbox of that "
                         "name is declared; expected On, Off or a name declared "
                         "with CodeInterpreterSandbox", u->name, u->file, u->line);
            return HTTP_INTERNAL_SERVER_ERROR;
        }
    }
    return OK;
}

const ci_sandbox_def *ci_directives_used(server_rec *s, const char *name)
{
    int i;
    for (i = 0; i < sandbox_uses->nelts; i++) {
        ci_use *u = &APR_ARRAY_IDX(sandbox_uses, i, ci_use);
        if (!strcmp(u->name, name))
            return ci_sandbox_lookup(s, name);
    }
    return NULL;
}

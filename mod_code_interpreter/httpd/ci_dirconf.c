/*
 * ci_dirconf.c - configuration records, directives and the effective value
 * of every setting. The defaults are here and nowhere else.
 */
#include <apr_strings.h>
#include <http_core.h>
#include <http_log.h>
#include "ci_audit.h"
#include "ci_owner.h"
#include "ci_dirconf.h"
#include "ci_sandbox.h"
#include "ci_module.h"

/* ---- the defaults ------------------------------------------------------- */

#define DEFAULT_FUNCTION "python"
#define DEFAULT_MAX_LOOPS 10
#define DEFAULT_MAX_BODY ((apr_off_t)32 * 1024 * 1024)
#define DEFAULT_DEADLINE_S 600
#define DEFAULT_KEEPALIVE_S 15
#define DEFAULT_CONNECT_TIMEOUT_S 10
#define DEFAULT_WORKERS 8
#define DEFAULT_QUEUE_LIMIT 64
#define DEFAULT_MAX_SANDBOXES 64
#define DEFAULT_EVICTION_GRACE 300        /* a container used within 5 min stays */
#define DEFAULT_CAPACITY_WAIT 5           /* a request waits 5 s for room */

/* CodeInterpreter NAME uses seen while reading the configuration, checked
 * against the declared sandboxes in check_config (declaration order and
 * place in the files do not matter). */
typedef struct ci_use {
    const char *name, *file;
    int line;
    server_rec *server;      /* where it is used: only its sandboxes count */
} ci_use;
static apr_array_header_t *sandbox_uses;

/* ---- configuration records --------------------------------------------- */

static ci_sandbox_def *builtin_local(apr_pool_t *p)
{
    return ci_sandbox_def_defaults(p, CI_DEFAULT_TOOL, ci_builtin_providers[0]);
}

/* The built-in sandbox tool: made once per configuration, here, never
 * at request time (pools are not thread-safe). */
static const ci_sandbox_def *default_local;

void *ci_create_server_conf(apr_pool_t *p, server_rec *s)
{
    ci_server_conf *c = apr_pcalloc(p, sizeof(*c));
    if (!s->is_virtual)
        default_local = builtin_local(p);
    c->sandboxes = apr_hash_make(p);
    c->declared_at = apr_hash_make(p);
    c->workers = c->queue_limit = c->max_sandboxes = c->max_per_owner = CI_UNSET;
    c->eviction_grace = c->capacity_wait = CI_UNSET;
    return c;
}

void *ci_merge_server_conf(apr_pool_t *p, void *basev, void *addv)
{
    ci_server_conf *base = basev, *add = addv, *c = apr_pcalloc(p, sizeof(*c));
    c->sandboxes = apr_hash_overlay(p, add->sandboxes, base->sandboxes);
    c->declared_at = apr_hash_overlay(p, add->declared_at, base->declared_at);
    c->workers = add->workers != CI_UNSET ? add->workers : base->workers;
    c->queue_limit = add->queue_limit != CI_UNSET ? add->queue_limit : base->queue_limit;
    c->max_sandboxes = add->max_sandboxes != CI_UNSET ? add->max_sandboxes
                                                      : base->max_sandboxes;
    c->max_per_owner = add->max_per_owner != CI_UNSET ? add->max_per_owner
                                                      : base->max_per_owner;
    c->memory_budget = add->memory_budget ? add->memory_budget : base->memory_budget;
    c->eviction_grace = add->eviction_grace != CI_UNSET ? add->eviction_grace
                                                        : base->eviction_grace;
    c->capacity_wait = add->capacity_wait != CI_UNSET ? add->capacity_wait
                                                      : base->capacity_wait;
    c->audit_log = add->audit_log ? add->audit_log : base->audit_log;
    c->secret = add->secret ? add->secret : base->secret;
    c->directory = add->directory ? add->directory : base->directory;
    c->directory_at = add->directory ? add->directory_at : base->directory_at;
    return c;
}

void *ci_create_dir_conf(apr_pool_t *p, char *dir)
{
    ci_dir_conf *d = apr_pcalloc(p, sizeof(*d));
    d->enabled = CI_UNSET;
    d->max_loops = CI_UNSET;
    d->max_body = CI_UNSET;
    d->deadline = CI_UNSET;
    d->keepalive = CI_UNSET;
    d->connect_timeout = CI_UNSET;
    d->upstream_timeout = CI_UNSET;
    d->containers = CI_UNSET;
    return d;
}

#define PICK(f) c->f = add->f != CI_UNSET ? add->f : base->f
#define PICKP(f) c->f = add->f ? add->f : base->f

void *ci_merge_dir_conf(apr_pool_t *p, void *basev, void *addv)
{
    ci_dir_conf *base = basev, *add = addv, *c = apr_pcalloc(p, sizeof(*c));
    PICK(enabled);
    c->sandbox = add->enabled != CI_UNSET ? add->sandbox : base->sandbox;
    PICK(max_loops);
    PICK(max_body);
    PICK(deadline);
    PICK(keepalive);
    PICK(connect_timeout);
    PICK(upstream_timeout);
    PICK(containers);
    PICKP(upstream);
    PICKP(function_name);
    PICKP(ca_file);
    PICKP(client_cert);
    PICKP(client_key);
    PICKP(owner);
    c->proxy_set = add->proxy_set || base->proxy_set;
    c->proxy = add->proxy_set ? add->proxy : base->proxy;
    return c;
}

ci_server_conf *ci_server_config(server_rec *s)
{
    return ap_get_module_config(s->module_config, &code_interpreter_module);
}

ci_dir_conf *ci_dir_config(request_rec *r)
{
    return ap_get_module_config(r->per_dir_config, &code_interpreter_module);
}

apr_off_t ci_dir_max_body(const ci_dir_conf *d)
{
    return d->max_body != CI_UNSET ? d->max_body : DEFAULT_MAX_BODY;
}

int ci_dir_max_loops(const ci_dir_conf *d)
{
    return d->max_loops != CI_UNSET ? d->max_loops : DEFAULT_MAX_LOOPS;
}

apr_interval_time_t ci_dir_deadline(const ci_dir_conf *d)
{
    return d->deadline != CI_UNSET ? d->deadline
                                   : apr_time_from_sec(DEFAULT_DEADLINE_S);
}

apr_interval_time_t ci_dir_keepalive(const ci_dir_conf *d)
{
    return d->keepalive != CI_UNSET ? d->keepalive
                                    : apr_time_from_sec(DEFAULT_KEEPALIVE_S);
}

apr_interval_time_t ci_dir_connect_timeout(const ci_dir_conf *d)
{
    return d->connect_timeout != CI_UNSET
               ? d->connect_timeout
               : apr_time_from_sec(DEFAULT_CONNECT_TIMEOUT_S);
}

void ci_dir_transport(const ci_dir_conf *d, ci_curl_transport *t)
{
    memset(t, 0, sizeof(*t));
    t->connect_timeout = ci_dir_connect_timeout(d);
    t->ca_file = d->ca_file;
    t->client_cert = d->client_cert;
    t->client_key = d->client_key;
    t->proxy = d->proxy;
}

apr_interval_time_t ci_dir_upstream_timeout(const ci_dir_conf *d)
{
    return d->upstream_timeout != CI_UNSET ? d->upstream_timeout : 0;
}

const char *ci_dir_function_name(const ci_dir_conf *d)
{
    return d->function_name ? d->function_name : DEFAULT_FUNCTION;
}

int ci_server_workers(const ci_server_conf *c)
{
    return c->workers != CI_UNSET ? c->workers : DEFAULT_WORKERS;
}

int ci_server_queue_limit(const ci_server_conf *c)
{
    return c->queue_limit != CI_UNSET ? c->queue_limit : DEFAULT_QUEUE_LIMIT;
}

int ci_server_max_sandboxes(const ci_server_conf *c)
{
    return c->max_sandboxes != CI_UNSET ? c->max_sandboxes : DEFAULT_MAX_SANDBOXES;
}

/* By default an owner may hold as many as the server: the per-owner cap is
 * a fairness setting for servers shared by several callers. */
int ci_server_max_per_owner(const ci_server_conf *c)
{
    return c->max_per_owner != CI_UNSET ? c->max_per_owner : ci_server_max_sandboxes(c);
}

int ci_server_eviction_grace(const ci_server_conf *c)
{
    return c->eviction_grace != CI_UNSET ? c->eviction_grace : DEFAULT_EVICTION_GRACE;
}

int ci_server_capacity_wait(const ci_server_conf *c)
{
    return c->capacity_wait != CI_UNSET ? c->capacity_wait : DEFAULT_CAPACITY_WAIT;
}

int ci_server_reserve(const ci_server_conf *c)
{
    return ci_server_max_sandboxes(c) / 8;
}

const ci_sandbox_def *ci_sandbox_lookup(server_rec *s, const char *name)
{
    ci_server_conf *c = ci_server_config(s);
    const ci_sandbox_def *def = apr_hash_get(c->sandboxes, name, APR_HASH_KEY_STRING);
    if (!def && !strcmp(name, CI_DEFAULT_TOOL))
        def = default_local;
    return def;
}

apr_array_header_t *ci_sandbox_all(apr_pool_t *p, server_rec *s)
{
    ci_server_conf *c = ci_server_config(s);
    apr_array_header_t *defs = apr_array_make(p, 4, sizeof(const ci_sandbox_def *));
    apr_hash_index_t *hi;
    if (!apr_hash_get(c->sandboxes, CI_DEFAULT_TOOL, APR_HASH_KEY_STRING))
        *(const ci_sandbox_def **)apr_array_push(defs) = default_local;
    for (hi = apr_hash_first(p, c->sandboxes); hi; hi = apr_hash_next(hi))
        *(const ci_sandbox_def **)apr_array_push(defs) = apr_hash_this_val(hi);
    return defs;
}

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
    ci_dir_conf *d = conf;
    const char *err = ci_parse_on_off(cmd->pool, v, &d->containers);
    return err ? directive_error(cmd, err) : NULL;
}

static const char *set_enabled(cmd_parms *cmd, void *conf, const char *v)
{
    ci_dir_conf *d = conf;
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
    ((ci_dir_conf *)conf)->max_loops = n;
    return NULL;
}

static const char *set_max_body(cmd_parms *cmd, void *conf, const char *v)
{
    apr_uint64_t n;
    const char *err = ci_parse_size(cmd->pool, v, (apr_uint64_t)1 << 32, &n);
    if (err)
        return directive_error(cmd, err);
    ((ci_dir_conf *)conf)->max_body = (apr_off_t)n;
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
    ((ci_dir_conf *)conf)->function_name = v;
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
    ci_dir_conf *d = conf;
    const char *err;
    cmd->info = (void *)APR_OFFSETOF(ci_dir_conf, client_cert);
    if ((err = set_readable_file(cmd, conf, cert)))
        return err;
    if (key) {
        cmd->info = (void *)APR_OFFSETOF(ci_dir_conf, client_key);
        return set_readable_file(cmd, d, key);
    }
    return NULL;
}

static const char *set_proxy(cmd_parms *cmd, void *conf, const char *v)
{
    ci_dir_conf *d = conf;
    d->proxy_set = 1;
    if (!strcasecmp(v, "none")) {
        d->proxy = NULL;
        return NULL;
    }
    return set_dir_url(cmd, conf, v);
}

#define DIR_CONF (RSRC_CONF | ACCESS_CONF)
#define OFF(f) (void *)APR_OFFSETOF(ci_dir_conf, f)
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
    AP_INIT_TAKE1("CodeInterpreterAuditLog", ci_audit_set, NULL, RSRC_CONF,
                  "file or |command receiving one JSON line per execution"),
    AP_INIT_TAKE1("CodeInterpreterContainers", set_containers, NULL, DIR_CONF,
                  "On: serve the Containers API (/containers...) at this location"),
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

void ci_dirconf_pre_config(apr_pool_t *pconf)
{
    sandbox_uses = apr_array_make(pconf, 4, sizeof(ci_use));
}

int ci_dirconf_check(server_rec *s)
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

const ci_sandbox_def *ci_dirconf_used(server_rec *s, const char *name)
{
    int i;
    for (i = 0; i < sandbox_uses->nelts; i++) {
        ci_use *u = &APR_ARRAY_IDX(sandbox_uses, i, ci_use);
        if (!strcmp(u->name, name))
            return ci_sandbox_lookup(s, name);
    }
    return NULL;
}

const char *ci_dir_upstream_url(request_rec *r, const ci_dir_conf *d)
{
    const char *fn = r->filename;
    if (d->upstream)
        return d->upstream;
    if (fn && !strncmp(fn, "proxy:", 6) &&
        (!strncasecmp(fn + 6, "http://", 7) || !strncasecmp(fn + 6, "https://", 8)))
        return fn + 6;
    return NULL;
}

const ci_redis_conf *ci_server_directory(server_rec *s)
{
    return ci_server_config(s)->directory;
}

/*
 * ci_settings.c - the configuration records (server and location), their
 * merges, and the effective value of every setting (ci_settings.h). The
 * defaults are here and nowhere else; the directives that fill the records
 * are in ci_directives.c.
 */
#include <apr_strings.h>
#include <http_core.h>
#include "ci_settings.h"
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
    c->egress_max_total = c->egress_max_per_owner = c->egress_lifetime = CI_UNSET;
    c->egress_proxy_resolves = CI_UNSET;
    return c;
}

/* The egress proxy's settings: ADD's where set, else BASE's. */
static void merge_egress(ci_server_conf *c, const ci_server_conf *base,
                         const ci_server_conf *add)
{
#define EGRESS_MERGE(f) c->f = add->f != CI_UNSET ? add->f : base->f
    EGRESS_MERGE(egress_max_total);
    EGRESS_MERGE(egress_max_per_owner);
    EGRESS_MERGE(egress_lifetime);
    EGRESS_MERGE(egress_proxy_resolves);
#undef EGRESS_MERGE
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
    c->skill_store = add->skill_store ? add->skill_store : base->skill_store;
    c->directory_at = add->directory ? add->directory_at : base->directory_at;
    merge_egress(c, base, add);
    c->sandbox_cgroup = add->sandbox_cgroup ? add->sandbox_cgroup : base->sandbox_cgroup;
    c->sandbox_cpus_set = add->sandbox_cpus_set || base->sandbox_cpus_set;
    c->sandbox_cpu_quota_us = add->sandbox_cpus_set ? add->sandbox_cpu_quota_us
                                                    : base->sandbox_cpu_quota_us;
    return c;
}

void *ci_create_dir_conf(apr_pool_t *p, char *dir)
{
    ci_loc_conf *d = apr_pcalloc(p, sizeof(*d));
    d->enabled = CI_UNSET;
    d->max_loops = CI_UNSET;
    d->max_body = CI_UNSET;
    d->deadline = CI_UNSET;
    d->keepalive = CI_UNSET;
    d->connect_timeout = CI_UNSET;
    d->upstream_timeout = CI_UNSET;
    d->containers = CI_UNSET;
    d->skills = CI_UNSET;
    return d;
}

#define PICK(f) c->f = add->f != CI_UNSET ? add->f : base->f
#define PICKP(f) c->f = add->f ? add->f : base->f

void *ci_merge_dir_conf(apr_pool_t *p, void *basev, void *addv)
{
    ci_loc_conf *base = basev, *add = addv, *c = apr_pcalloc(p, sizeof(*c));
    PICK(enabled);
    c->sandbox = add->enabled != CI_UNSET ? add->sandbox : base->sandbox;
    PICK(max_loops);
    PICK(max_body);
    PICK(deadline);
    PICK(keepalive);
    PICK(connect_timeout);
    PICK(upstream_timeout);
    PICK(containers);
    PICK(skills);
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

ci_loc_conf *ci_loc_config(request_rec *r)
{
    return ap_get_module_config(r->per_dir_config, &code_interpreter_module);
}

apr_off_t ci_loc_max_body(const ci_loc_conf *d)
{
    return d->max_body != CI_UNSET ? d->max_body : DEFAULT_MAX_BODY;
}

int ci_loc_max_loops(const ci_loc_conf *d)
{
    return d->max_loops != CI_UNSET ? d->max_loops : DEFAULT_MAX_LOOPS;
}

apr_interval_time_t ci_loc_deadline(const ci_loc_conf *d)
{
    return d->deadline != CI_UNSET ? d->deadline
                                   : apr_time_from_sec(DEFAULT_DEADLINE_S);
}

apr_interval_time_t ci_loc_keepalive(const ci_loc_conf *d)
{
    return d->keepalive != CI_UNSET ? d->keepalive
                                    : apr_time_from_sec(DEFAULT_KEEPALIVE_S);
}

static apr_interval_time_t ci_loc_connect_timeout(const ci_loc_conf *d)
{
    return d->connect_timeout != CI_UNSET
               ? d->connect_timeout
               : apr_time_from_sec(DEFAULT_CONNECT_TIMEOUT_S);
}

void ci_loc_transport(const ci_loc_conf *d, ci_curl_transport *t)
{
    memset(t, 0, sizeof(*t));
    t->connect_timeout = ci_loc_connect_timeout(d);
    t->ca_file = d->ca_file;
    t->client_cert = d->client_cert;
    t->client_key = d->client_key;
    t->proxy = d->proxy;
}

apr_interval_time_t ci_loc_upstream_timeout(const ci_loc_conf *d)
{
    return d->upstream_timeout != CI_UNSET ? d->upstream_timeout : 0;
}

const char *ci_loc_function_name(const ci_loc_conf *d)
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

/* Whether TOOL allows every domain of ALLOWLIST. */
static int allowlist_within(apr_pool_t *p, const ci_sandbox_def *tool, const char *allowlist)
{
    apr_array_header_t *domains;
    int i;
    if (!allowlist)
        return 1;
    if (!tool->egress)
        return 0;
    domains = ci_domains_split(p, allowlist);
    for (i = 0; i < domains->nelts; i++)
        if (!ci_sandbox_def_domain_allowed(p, tool, APR_ARRAY_IDX(domains, i, const char *)))
            return 0;
    return 1;
}

const ci_sandbox_def *ci_sandbox_of_container(server_rec *s, apr_pool_t *p, const char *tool,
                                              const char *provider, const char *allowlist)
{
    const ci_sandbox_def *def = tool ? ci_sandbox_lookup(s, tool) : NULL;
    if (!def || (provider && strcmp(provider, def->provider->name)) ||
        !allowlist_within(p, def, allowlist))
        return NULL;
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

const char *ci_loc_upstream_url(request_rec *r, const ci_loc_conf *d)
{
    const char *fn = r->filename;
    if (d->upstream)
        return d->upstream;
    if (fn && !strncmp(fn, "proxy:", 6) &&
        (!strncasecmp(fn + 6, "http://", 7) || !strncasecmp(fn + 6, "https://", 8)))
        return fn + 6;
    return NULL;
}

const char *ci_server_skill_store(server_rec *s)
{
    const char *store = ci_server_config(s)->skill_store;
    return store ? store : CI_DEFAULT_SKILL_STORE;
}

const ci_redis_conf *ci_server_directory(server_rec *s)
{
    return ci_server_config(s)->directory;
}

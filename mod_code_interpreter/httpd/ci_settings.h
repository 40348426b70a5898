/*
 * ci_settings.h - the module's configuration records (server and location)
 * and the effective value of every setting. Every default lives in one
 * place, ci_settings.c; nothing else compares a field with CI_UNSET. The
 * directives that fill them: ci_directives.h.
 */
#ifndef CI_SETTINGS_H
#define CI_SETTINGS_H

#include <apr_hash.h>
#include <httpd.h>
#include <http_config.h>
#include <ap_expr.h>
#include "ci_config.h"
#include "ci_crypto.h"
#include "ci_curl.h"
#include "ci_redis.h"
#include "ci_sandbox.h"

#define CI_UNSET -1

/* Server-wide settings (main server; virtual hosts inherit them). */
typedef struct ci_server_conf {
    apr_hash_t *sandboxes;   /* name -> ci_sandbox_def* */
    apr_hash_t *declared_at; /* name -> "file:line" */
    int workers;
    int queue_limit;
    int max_sandboxes;
    int max_per_owner;       /* CodeInterpreterMaxContainersPerOwner */
    apr_uint64_t memory_budget; /* CodeInterpreterMemoryBudget, 0: none */
    int eviction_grace;      /* CodeInterpreterEvictionGrace (s), CI_UNSET */
    int capacity_wait;       /* CodeInterpreterCapacityWait (s), CI_UNSET */
    const char *audit_log;   /* CodeInterpreterAuditLog: a path or "|command" */
    ci_secret *secret;         /* CodeInterpreterSecret, or NULL: one made here */
    ci_redis_conf *directory;  /* CodeInterpreterDirectory, or NULL: this node's */
    const char *directory_at;  /* where it was set ("file:line"), for messages */
    /* The egress proxy (CI_UNSET: its default, ci_egress.h) */
    int egress_max_total;      /* CodeInterpreterEgressConnections */
    int egress_max_per_owner;  /* CodeInterpreterEgressConnectionsPerOwner */
    int egress_lifetime;       /* CodeInterpreterEgressLifetime (s) */
    int egress_proxy_resolves; /* CodeInterpreterEgressProxyResolves */
    const char *sandbox_cgroup;  /* CodeInterpreterSandboxCgroup: "auto", "off"
                                    or a path; NULL: auto */
    apr_uint64_t sandbox_cpu_quota_us; /* CodeInterpreterSandboxCPUs, per
                                          100 ms; 0: no ceiling */
    int sandbox_cpus_set;        /* ... was set (else 1 CPU) */
    const char *skill_store;     /* CodeInterpreterSkillStore, NULL: the default */
} ci_server_conf;

/* Per directory / location, as written (CI_UNSET / NULL where not set). */
typedef struct ci_loc_conf {
    int enabled;                 /* CI_UNSET, 0, 1 */
    const char *sandbox;         /* sandbox tool name */
    int max_loops;
    apr_off_t max_body;
    apr_interval_time_t deadline;
    const char *upstream;        /* follow-up URL override */
    const char *function_name;
    apr_interval_time_t keepalive;
    apr_interval_time_t connect_timeout;
    apr_interval_time_t upstream_timeout;  /* CI_UNSET: the deadline's rest */
    const char *ca_file;
    const char *client_cert;
    const char *client_key;
    const char *proxy;
    int proxy_set;
    ap_expr_info_t *owner;           /* CodeInterpreterOwner, NULL: Authorization */
    int containers;                  /* CodeInterpreterContainers: CI_UNSET, 0, 1 */
    int skills;                      /* CodeInterpreterSkills: CI_UNSET, 0, 1 */
} ci_loc_conf;

void *ci_create_server_conf(apr_pool_t *p, server_rec *s);
void *ci_merge_server_conf(apr_pool_t *p, void *basev, void *addv);
void *ci_create_dir_conf(apr_pool_t *p, char *dir);
void *ci_merge_dir_conf(apr_pool_t *p, void *basev, void *addv);

ci_server_conf *ci_server_config(server_rec *s);
/* Where the server's skills are kept (CodeInterpreterSkillStore, or
 * CI_DEFAULT_SKILL_STORE), absolute. */
const char *ci_server_skill_store(server_rec *s);
ci_loc_conf *ci_loc_config(request_rec *r);

/* Effective values (defaults applied). */
apr_off_t ci_loc_max_body(const ci_loc_conf *d);
int ci_loc_max_loops(const ci_loc_conf *d);
apr_interval_time_t ci_loc_deadline(const ci_loc_conf *d);
apr_interval_time_t ci_loc_keepalive(const ci_loc_conf *d);
/* The transport of calls to D's upstream (connect timeout, TLS, proxy):
 * the caller sets the whole exchange's timeout and the abort callback. */
void ci_loc_transport(const ci_loc_conf *d, ci_curl_transport *t);
/* CodeInterpreterUpstreamTimeout, or 0: the rest of the deadline. */
apr_interval_time_t ci_loc_upstream_timeout(const ci_loc_conf *d);
const char *ci_loc_function_name(const ci_loc_conf *d);
/* The upstream's Responses URL for R: CodeInterpreterUpstream, else the URL
 * R is proxied to; NULL when neither. */
const char *ci_loc_upstream_url(request_rec *r, const ci_loc_conf *d);
/* The shared directory (CodeInterpreterDirectory), or NULL: this node's,
 * in the sandbox supervisor. */
const ci_redis_conf *ci_server_directory(server_rec *s);
int ci_server_workers(const ci_server_conf *c);
int ci_server_queue_limit(const ci_server_conf *c);
int ci_server_max_sandboxes(const ci_server_conf *c);
int ci_server_max_per_owner(const ci_server_conf *c);
/* Seconds a used container is safe from eviction; seconds a request waits
 * for room at a cap; the node's last places kept for owners that hold fewer
 * (an eighth of CodeInterpreterMaxSandboxes). */
int ci_server_eviction_grace(const ci_server_conf *c);
int ci_server_capacity_wait(const ci_server_conf *c);
int ci_server_reserve(const ci_server_conf *c);

/* The built-in sandbox tool (what "CodeInterpreter On" uses): the default
 * provider with its defaults, unless a CodeInterpreterSandbox of that name
 * declares it otherwise. */
#define CI_DEFAULT_TOOL "local"

/* The sandbox tool NAME of server S (the built-in one when not declared),
 * or NULL. */
const ci_sandbox_def *ci_sandbox_lookup(server_rec *s, const char *name);
/* The tool a container runs on: TOOL as declared now, still of PROVIDER
 * (NULL: any, an older record) and still allowing every domain of its
 * ALLOWLIST (a reload may have lowered the ceiling or turned egress off);
 * NULL when a reload removed or changed it so. */
const ci_sandbox_def *ci_sandbox_of_container(server_rec *s, apr_pool_t *p, const char *tool,
                                              const char *provider, const char *allowlist);
/* Every sandbox tool of S, the built-in one first unless declared.
 * Memory from P. */
apr_array_header_t *ci_sandbox_all(apr_pool_t *p, server_rec *s);

#endif

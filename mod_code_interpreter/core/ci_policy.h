/*
 * ci_policy.h - a container's network policy as the Responses API and the
 * Containers API give it: its allowlist (domain patterns, normalised) and
 * its domain secrets (names, values, the placeholders the sandbox sees), the
 * refusals of what is not one, and the forms it is kept and shown in. No
 * httpd here.
 */
#ifndef CI_POLICY_H
#define CI_POLICY_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>
#include "ci_error.h"

/* A domain secret of a network policy: NAME is an environment variable
 * in the sandbox holding a placeholder that the egress proxy replaces with
 * VALUE in requests to DOMAIN (a domain pattern, on the allowlist). */
typedef struct ci_domain_secret {
    const char *domain;
    const char *name;
    const char *value;
} ci_domain_secret;

#define CI_MAX_SECRETS 32

/* A network_policy at PARAM: {"type": "disabled"} (*DOMAINS = *SECRETS =
 * NULL) or {"type": "allowlist", "allowed_domains": [...],
 * "domain_secrets": [...]} (*DOMAINS: each normalised,
 * ci_parse_domain_pattern; *SECRETS: ci_domain_secret, or NULL). 0, or -1
 * with ERR (400). */
int ci_network_policy_parse(apr_pool_t *p, json_object *v, const char *param,
                            apr_array_header_t **domains, apr_array_header_t **secrets,
                            ci_error *err);
/* A secret's NAME may be a sandbox's variable (its value:
 * ci_secret_value_ok). */
int ci_secret_name_ok(const char *name);
/* SECRETS (ci_domain_secret) as a sandbox definition holds them: a JSON
 * array of {domain, name, placeholder, value}, each with a new random
 * placeholder ("CI_SECRET_" and 32 hex digits). */
const char *ci_secrets_with_placeholders(apr_pool_t *p, const apr_array_header_t *secrets);
/* TOOLS (a copy of the client's, for the answer) without the values of
 * domain secrets: an answer never carries one. */
void ci_redact_secrets(json_object *tools);
/* DOMAINS comma separated (what a sandbox definition and a container
 * record hold), or NULL when there are none. */
const char *ci_domains_join(apr_pool_t *p, const apr_array_header_t *domains);
/* The domains of LIST (comma separated) as a JSON array of strings. */
json_object *ci_domains_json(apr_pool_t *p, const char *list);
/* The network_policy object a container reports for ALLOWLIST (comma
 * separated; NULL: disabled). */
json_object *ci_network_policy_object(apr_pool_t *p, const char *allowlist);

#endif

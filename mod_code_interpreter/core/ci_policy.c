/*
 * ci_policy.c - a container's network policy: its allowlist and its domain
 * secrets parsed and refused, kept and shown (ci_policy.h).
 */
#include <string.h>
#include <apr_hash.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_id.h"
#include "ci_config.h"
#include "ci_json.h"
#include "ci_policy.h"
#include "ci_secret_value.h"


#define MAX_ALLOWED_DOMAINS 256

static int bad_domain(apr_pool_t *p, ci_error *err, const char *param, const char *value)
{
    ci_error_set(err, 400, CI_INVALID, param, "invalid_value", p,
                 "Invalid value for '%s': '%s' is not a domain name.", param, value);
    return -1;
}

static int parse_allowed_domains(apr_pool_t *p, json_object *policy, const char *param,
                                 apr_array_header_t **domains, ci_error *err)
{
    const char *at = apr_pstrcat(p, param, ".allowed_domains", NULL), *norm;
    json_object *list = ci_json_get(policy, "allowed_domains", json_type_array);
    apr_size_t i, n = list ? json_object_array_length(list) : 0;
    if (n < 1 || n > MAX_ALLOWED_DOMAINS)
        return ci_error_bad_type(p, err, at, "a non-empty array of at most 256 domain names");
    *domains = apr_array_make(p, (int)n, sizeof(const char *));
    for (i = 0; i < n; i++) {
        json_object *d = json_object_array_get_idx(list, i);
        const char *entry = apr_psprintf(p, "%s[%d]", at, (int)i);
        if (!json_object_is_type(d, json_type_string))
            return ci_error_bad_type(p, err, entry, "a string");
        if (ci_parse_domain_pattern(p, json_object_get_string(d), &norm))
            return bad_domain(p, err, entry, json_object_get_string(d));
        *(const char **)apr_array_push(*domains) = norm;
    }
    return 0;
}

/* Variables the sandbox sets or its programs heed before anything: a
 * secret may not take their names. */
static int reserved_name(const char *name)
{
    static const char *const exact[] = {
        "HOME", "PATH", "LANG", "SHELL", "PWD", "TMPDIR", "HTTP_PROXY", "HTTPS_PROXY",
        "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS", "PIP_CERT", "MPLBACKEND", "MPLCONFIGDIR",
        "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", NULL };
    static const char *const prefixes[] = { "LD_", "PYTHON", "BASH_", "OPENBLAS_", NULL };
    int i;
    for (i = 0; exact[i]; i++)
        if (!strcmp(name, exact[i]))
            return 1;
    for (i = 0; prefixes[i]; i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i])))
            return 1;
    return 0;
}

static int is_variable_name(const char *s)
{
    apr_size_t i, n = strlen(s);
    if (n < 1 || n > 128 || (!apr_isalpha(s[0]) && s[0] != '_'))
        return 0;
    for (i = 1; i < n; i++)
        if (!apr_isalnum(s[i]) && s[i] != '_')
            return 0;
    return 1;
}

static int bad_value(apr_pool_t *p, ci_error *err, const char *param, const char *why)
{
    ci_error_set(err, 400, CI_INVALID, param, "invalid_value", p,
                 "Invalid value for '%s': %s.", param, why);
    return -1;
}

/* Whether one of DOMAINS covers PATTERN. */
static int on_allowlist(const apr_array_header_t *domains, const char *pattern)
{
    int i;
    for (i = 0; i < domains->nelts; i++)
        if (ci_domain_covers(APR_ARRAY_IDX(domains, i, const char *), pattern))
            return 1;
    return 0;
}

int ci_secret_name_ok(const char *name)
{
    return is_variable_name(name) && !reserved_name(name);
}

static int parse_secrets(apr_pool_t *p, json_object *list, const char *param,
                         const apr_array_header_t *domains, apr_array_header_t **secrets,
                         ci_error *err)
{
    const char *at = apr_pstrcat(p, param, ".domain_secrets", NULL);
    apr_size_t i, n = json_object_is_type(list, json_type_array)
                      ? json_object_array_length(list) : 0;
    apr_hash_t *names = apr_hash_make(p);
    if (n < 1 || n > CI_MAX_SECRETS)
        return ci_error_bad_type(p, err, at, "a non-empty array of at most 32 secrets");
    *secrets = apr_array_make(p, (int)n, sizeof(ci_domain_secret));
    for (i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(list, i), *v;
        const char *entry = apr_psprintf(p, "%s[%d]", at, (int)i), *norm;
        ci_domain_secret *s = apr_array_push(*secrets);
        const char *domain = ci_json_str(o, "domain"), *name = ci_json_str(o, "name");
        if (!json_object_is_type(o, json_type_object) || !domain || !name ||
            !json_object_object_get_ex(o, "value", &v) ||
            !json_object_is_type(v, json_type_string))
            return ci_error_bad_type(p, err, entry,
                                     "an object with domain, name and value strings");
        if (ci_parse_domain_pattern(p, domain, &norm))
            return bad_domain(p, err, apr_pstrcat(p, entry, ".domain", NULL), domain);
        if (!on_allowlist(domains, norm))
            return bad_value(p, err, apr_pstrcat(p, entry, ".domain", NULL),
                             apr_psprintf(p, "'%s' is not on the allowlist", domain));
        if (!ci_secret_name_ok(name))
            return bad_value(p, err, apr_pstrcat(p, entry, ".name", NULL), apr_psprintf(
                                 p, "'%s' is not an environment variable name a secret "
                                    "may take", name));
        if (apr_hash_get(names, name, APR_HASH_KEY_STRING))
            return bad_value(p, err, apr_pstrcat(p, entry, ".name", NULL),
                             apr_psprintf(p, "'%s' is given twice", name));
        apr_hash_set(names, name, APR_HASH_KEY_STRING, name);
        /* never echoed: the message says what a value must be, not what it was */
        if (!ci_secret_value_ok(json_object_get_string(v),
                                (apr_size_t)json_object_get_string_len(v)))
            return bad_value(p, err, apr_pstrcat(p, entry, ".value", NULL),
                             "a secret's value must be 1 to 16384 bytes of a header "
                             "value, with no control character but tab");
        s->domain = norm;
        s->name = apr_pstrdup(p, name);
        s->value = apr_pstrmemdup(p, json_object_get_string(v),
                                  (apr_size_t)json_object_get_string_len(v));
    }
    return 0;
}

int ci_network_policy_parse(apr_pool_t *p, json_object *v, const char *param,
                            apr_array_header_t **domains, apr_array_header_t **secrets,
                            ci_error *err)
{
    json_object *list;
    *domains = NULL;
    *secrets = NULL;
    if (!json_object_is_type(v, json_type_object) ||
        (!ci_json_is_type(v, "disabled") && !ci_json_is_type(v, "allowlist")))
        return ci_error_bad_type(p, err, param,
                                 "an object of type \"disabled\" or \"allowlist\"");
    if (ci_json_is_type(v, "disabled"))
        return 0;
    if (parse_allowed_domains(p, v, param, domains, err) < 0)
        return -1;
    if (json_object_object_get_ex(v, "domain_secrets", &list) && list != NULL)
        return parse_secrets(p, list, param, *domains, secrets, err);
    return 0;
}

const char *ci_secrets_with_placeholders(apr_pool_t *p, const apr_array_header_t *secrets)
{
    json_object *a = ci_json_own(p, json_object_new_array());
    int i;
    for (i = 0; i < secrets->nelts; i++) {
        const ci_domain_secret *s = &APR_ARRAY_IDX(secrets, i, ci_domain_secret);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "domain", json_object_new_string(s->domain));
        json_object_object_add(o, "name", json_object_new_string(s->name));
        json_object_object_add(o, "placeholder",
                               json_object_new_string(ci_mint_id(p, "CI_SECRET_", 16)));
        json_object_object_add(o, "value", json_object_new_string(s->value));
        json_object_array_add(a, o);
    }
    return ci_json_pstr(p, a, NULL);
}

/* The domain_secrets of a tool's network policy at C.KEY, without values. */
static void redact_policy(json_object *tool, const char *key)
{
    json_object *c = ci_json_get(tool, key, json_type_object);
    json_object *np = c ? ci_json_get(c, "network_policy", json_type_object) : NULL;
    json_object *list = np ? ci_json_get(np, "domain_secrets", json_type_array) : NULL;
    apr_size_t i, n = list ? json_object_array_length(list) : 0;
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(list, i);
        if (json_object_is_type(s, json_type_object))
            json_object_object_del(s, "value");
    }
}

void ci_redact_secrets(json_object *tools)
{
    apr_size_t i, n = json_object_is_type(tools, json_type_array)
                      ? json_object_array_length(tools) : 0;
    for (i = 0; i < n; i++) {
        json_object *t = json_object_array_get_idx(tools, i);
        redact_policy(t, "container");
        redact_policy(t, "environment");
    }
}

const char *ci_domains_join(apr_pool_t *p, const apr_array_header_t *domains)
{
    const char *out = NULL;
    int i;
    for (i = 0; domains && i < domains->nelts; i++)
        out = out ? apr_pstrcat(p, out, ",", APR_ARRAY_IDX(domains, i, const char *), NULL)
                  : APR_ARRAY_IDX(domains, i, const char *);
    return out;
}

json_object *ci_domains_json(apr_pool_t *p, const char *list)
{
    apr_array_header_t *domains = ci_domains_split(p, list);
    json_object *a = json_object_new_array();
    int i;
    for (i = 0; i < domains->nelts; i++)
        json_object_array_add(a, json_object_new_string(APR_ARRAY_IDX(domains, i,
                                                                      const char *)));
    return a;
}

json_object *ci_network_policy_object(apr_pool_t *p, const char *allowlist)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string(allowlist ? "allowlist"
                                                                       : "disabled"));
    if (allowlist)
        json_object_object_add(o, "allowed_domains", ci_domains_json(p, allowlist));
    return o;
}


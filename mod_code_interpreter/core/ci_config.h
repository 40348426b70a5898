/*
 * ci_config.h - values of the module's directives, parsed without httpd so
 * they can be unit-tested and fuzzed. Every parser returns NULL on success or
 * an error message naming the bad value and what is expected.
 */
#ifndef CI_CONFIG_H
#define CI_CONFIG_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>

#define CI_MAX_SECONDS 86400

/* "64k", "32M", "1G", "512" (bytes). Must be > 0 and fit in MAX. */
const char *ci_parse_size(apr_pool_t *p, const char *value, apr_uint64_t max,
                          apr_uint64_t *out);
/* Whole seconds, 1..MAX, optional "s" suffix. */
const char *ci_parse_seconds(apr_pool_t *p, const char *value, int max, int *out);
/* A positive count 1..MAX (or 0..MAX when ALLOW_ZERO). */
/* "30s", "20m" or "1h" as seconds, at most MAX. */
const char *ci_parse_duration(apr_pool_t *p, const char *value, int max, int *out);
const char *ci_parse_count(apr_pool_t *p, const char *value, int max,
                           int allow_zero, int *out);
/* An absolute http:// or https:// URL with a host. */
const char *ci_parse_url(apr_pool_t *p, const char *value);
/* A function name the Responses API accepts: [A-Za-z0-9_-]{1,64}. */
const char *ci_parse_function_name(apr_pool_t *p, const char *value);
/* on or off (any case). */
const char *ci_parse_on_off(apr_pool_t *p, const char *value, int *out);
/* A domain pattern of a network allowlist: a host name (ASCII letters,
 * digits and hyphens in labels of 1 to 63, at most 253 in all; IDNA names as
 * punycode) or "*." before one (any subdomain of it, not itself). Not an IP
 * address. *OUT: lower-cased, without a trailing dot. NULL, or why not. */
const char *ci_parse_domain_pattern(apr_pool_t *p, const char *value, const char **out);
/* Whether PATTERN (as ci_parse_domain_pattern gives) covers WHAT, a domain
 * or a pattern: "a.b" covers "a.b"; "*.b" covers "a.b", "x.a.b" and "*.a.b",
 * never "b". */
int ci_domain_covers(const char *pattern, const char *what);
/* The domains of LIST, comma separated as a sandbox definition and a
 * container record hold them (ci_domains_join): const char *, from P; none
 * for NULL. */
apr_array_header_t *ci_domains_split(apr_pool_t *p, const char *list);
/* http://HOST:PORT, the form of a forward proxy's address. */
const char *ci_parse_proxy_url(apr_pool_t *p, const char *value);
/* A secret given as env:VAR, file:PATH (first line, trimmed) or literally.
 * KEY names the setting in messages; the message never holds the secret. */
const char *ci_resolve_secret(apr_pool_t *p, const char *key, const char *spec,
                              const char **out);

#endif

/*
 * ci_config.h - values of the module's directives, parsed without httpd so
 * they can be unit-tested and fuzzed. Every parser returns NULL on success or
 * an error message naming the bad value and what is expected.
 */
#ifndef CI_CONFIG_H
#define CI_CONFIG_H

#include <apr_pools.h>
#include <apr_time.h>

typedef enum { CI_PROVIDER_LOCAL = 0, CI_PROVIDER_E2B = 1 } ci_provider_kind;

/* One declared sandbox tool (CodeInterpreterSandbox NAME provider=... ...). */
typedef struct ci_sandbox_def {
    const char *name;
    ci_provider_kind provider;
    apr_interval_time_t timeout;   /* per execution */
    apr_size_t max_output;         /* bytes of output the model sees */
    /* local */
    const char *python;
    apr_uint64_t memory;           /* address space per process */
    int processes;                 /* tasks inside the sandbox */
    apr_uint64_t disk;             /* size of /mnt/data and of any one file */
    int warm;                      /* ready sandboxes per child */
    const char *preload;           /* comma-separated modules a warm sandbox imports */
    /* e2b */
    const char *api_key_spec;      /* as written: env:VAR, file:PATH or literal */
    const char *api_key;           /* resolved at configuration load; secret */
    const char *api_base;
    const char *template_id;
    int lifetime;                  /* seconds */
    int internet;
    const char *sandbox_url;
} ci_sandbox_def;

/* The defaults of a sandbox of KIND named NAME. */
ci_sandbox_def *ci_sandbox_def_defaults(apr_pool_t *p, const char *name,
                                        ci_provider_kind kind);

/* Parse "key=value" words (ARGC of them) for sandbox NAME into *OUT. Does not
 * resolve the API key (see ci_sandbox_def_resolve_key). */
const char *ci_sandbox_def_parse(apr_pool_t *p, const char *name, int argc,
                                 const char *const *argv, ci_sandbox_def **out);

/* Resolve api_key_spec into api_key: env:VAR, file:PATH (first line, trimmed)
 * or the literal. The error never contains the key. */
const char *ci_sandbox_def_resolve_key(apr_pool_t *p, ci_sandbox_def *def);

/* "64k", "32M", "1G", "512" (bytes). Must be > 0 and fit in MAX. */
const char *ci_parse_size(apr_pool_t *p, const char *value, apr_uint64_t max,
                          apr_uint64_t *out);
/* Whole seconds, 1..MAX, optional "s" suffix. */
const char *ci_parse_seconds(apr_pool_t *p, const char *value, int max, int *out);
/* A positive count 1..MAX (or 0..MAX when ALLOW_ZERO). */
const char *ci_parse_count(apr_pool_t *p, const char *value, int max,
                           int allow_zero, int *out);
/* An absolute http:// or https:// URL with a host. */
const char *ci_parse_url(apr_pool_t *p, const char *value);
/* A function name the Responses API accepts: [A-Za-z0-9_-]{1,64}. */
const char *ci_parse_function_name(apr_pool_t *p, const char *value);

#endif

/* ci_config.c - directive values, parsed and checked without httpd. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <apr_env.h>
#include <apr_file_io.h>
#include <apr_strings.h>
#include <apr_uri.h>
#include "ci_config.h"

#define MAX_TIMEOUT_S 86400
#define MAX_PROCESSES 4096
#define MAX_WARM 64

ci_sandbox_def *ci_sandbox_def_defaults(apr_pool_t *p, const char *name,
                                        ci_provider_kind kind)
{
    ci_sandbox_def *d = apr_pcalloc(p, sizeof(*d));
    d->name = apr_pstrdup(p, name);
    d->provider = kind;
    d->timeout = apr_time_from_sec(30);
    d->max_output = 64 * 1024;
    d->python = "/usr/bin/python3";
    d->memory = (apr_uint64_t)512 << 20;
    d->processes = 64;
    d->disk = (apr_uint64_t)64 << 20;
    d->warm = 0;
    d->preload = NULL;
    d->api_key_spec = "env:E2B_API_KEY";
    d->api_base = "https://api.e2b.app";
    d->template_id = "code-interpreter-v1";
    d->lifetime = 300;
    d->internet = 0;
    d->sandbox_url = NULL;
    return d;
}

const char *ci_parse_size(apr_pool_t *p, const char *value, apr_uint64_t max,
                          apr_uint64_t *out)
{
    char *end;
    unsigned long long n;
    apr_uint64_t mult = 1;

    if (!value || !isdigit((unsigned char)value[0]))
        goto bad;
    errno = 0;
    n = strtoull(value, &end, 10);
    if (errno)
        goto bad;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mult = 1024; end++; break;
    case 'M': mult = 1024 * 1024; end++; break;
    case 'G': mult = 1024ULL * 1024 * 1024; end++; break;
    default: goto bad;
    }
    if ((*end == 'B' || *end == 'b') && mult > 1)
        end++;
    if (*end || n == 0 || n > max / mult)
        goto bad;
    *out = n * mult;
    return NULL;
bad:
    return apr_psprintf(p, "'%s' is not a valid size: expected a positive "
                           "number of bytes, optionally with K, M or G, at "
                           "most %" APR_UINT64_T_FMT " bytes",
                        value ? value : "", max);
}

static const char *parse_int(const char *value, int min, int max, int *out)
{
    char *end;
    long n;
    if (!value || !isdigit((unsigned char)value[0]))
        return "bad";
    errno = 0;
    n = strtol(value, &end, 10);
    if (errno || n < min || n > max)
        return "bad";
    *out = (int)n;
    return end;
}

const char *ci_parse_seconds(apr_pool_t *p, const char *value, int max, int *out)
{
    const char *end = parse_int(value, 1, max, out);
    if (end && strcmp(end, "bad") != 0 && (*end == '\0' || strcmp(end, "s") == 0))
        return NULL;
    return apr_psprintf(p, "'%s' is not a valid duration: expected whole "
                           "seconds from 1 to %d", value ? value : "", max);
}

const char *ci_parse_count(apr_pool_t *p, const char *value, int max,
                           int allow_zero, int *out)
{
    const char *end = parse_int(value, allow_zero ? 0 : 1, max, out);
    if (end && strcmp(end, "bad") != 0 && *end == '\0')
        return NULL;
    return apr_psprintf(p, "'%s' is not a valid count: expected a whole "
                           "number from %d to %d",
                        value ? value : "", allow_zero ? 0 : 1, max);
}

const char *ci_parse_url(apr_pool_t *p, const char *value)
{
    apr_uri_t uri;
    if (value && apr_uri_parse(p, value, &uri) == APR_SUCCESS && uri.scheme &&
        (!strcasecmp(uri.scheme, "http") || !strcasecmp(uri.scheme, "https")) &&
        uri.hostname && *uri.hostname && !strpbrk(value, " \t\r\n"))
        return NULL;
    return apr_psprintf(p, "'%s' is not a valid URL: expected an absolute "
                           "http:// or https:// URL with a host",
                        value ? value : "");
}

const char *ci_parse_function_name(apr_pool_t *p, const char *value)
{
    apr_size_t n = value ? strlen(value) : 0, i;
    for (i = 0; i < n; i++)
        if (!isalnum((unsigned char)value[i]) && value[i] != '_' && value[i] != '-')
            break;
    if (n >= 1 && n <= 64 && i == n)
        return NULL;
    return apr_psprintf(p, "'%s' is not a valid function name: expected 1 to "
                           "64 letters, digits, '_' or '-'", value ? value : "");
}

static const char *parse_on_off(apr_pool_t *p, const char *value, int *out)
{
    if (!strcasecmp(value, "on")) *out = 1;
    else if (!strcasecmp(value, "off")) *out = 0;
    else
        return apr_psprintf(p, "'%s' is not valid: expected on or off", value);
    return NULL;
}

static const char *parse_preload(apr_pool_t *p, const char *value)
{
    const char *c;
    for (c = value; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("_.,", *c))
            return apr_psprintf(p, "'%s' is not a valid module list: expected "
                                   "comma-separated Python module names", value);
    return NULL;
}

static const char *parse_timeout(apr_pool_t *p, ci_sandbox_def *d, const char *v)
{
    int s;
    const char *e = ci_parse_seconds(p, v, MAX_TIMEOUT_S, &s);
    if (!e)
        d->timeout = apr_time_from_sec(s);
    return e;
}

static const char *parse_common_key(apr_pool_t *p, ci_sandbox_def *d,
                                    const char *key, const char *v, int *known)
{
    apr_uint64_t n;
    const char *e;
    *known = 1;
    if (!strcmp(key, "timeout"))
        return parse_timeout(p, d, v);
    if (!strcmp(key, "max_output")) {
        if (!(e = ci_parse_size(p, v, (apr_uint64_t)16 << 20, &n)))
            d->max_output = (apr_size_t)n;
        return e;
    }
    *known = 0;
    return NULL;
}

static const char *parse_local_key(apr_pool_t *p, ci_sandbox_def *d,
                                   const char *key, const char *v, int *known)
{
    *known = 1;
    if (!strcmp(key, "python")) {
        if (v[0] != '/')
            return apr_psprintf(p, "'%s' is not valid: expected an absolute path", v);
        d->python = v;
        return NULL;
    }
    if (!strcmp(key, "memory"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &d->memory);
    if (!strcmp(key, "disk"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &d->disk);
    if (!strcmp(key, "processes"))
        return ci_parse_count(p, v, MAX_PROCESSES, 0, &d->processes);
    if (!strcmp(key, "warm"))
        return ci_parse_count(p, v, MAX_WARM, 1, &d->warm);
    if (!strcmp(key, "preload")) {
        d->preload = v;
        return parse_preload(p, v);
    }
    *known = 0;
    return NULL;
}

static const char *parse_e2b_key(apr_pool_t *p, ci_sandbox_def *d,
                                 const char *key, const char *v, int *known)
{
    *known = 1;
    if (!strcmp(key, "api_key")) {
        if (!*v)
            return "an empty value is not valid: expected env:VAR, file:PATH or the key";
        d->api_key_spec = v;
        return NULL;
    }
    if (!strcmp(key, "api_base")) {
        d->api_base = v;
        return ci_parse_url(p, v);
    }
    if (!strcmp(key, "sandbox_url")) {
        d->sandbox_url = v;
        return ci_parse_url(p, v);
    }
    if (!strcmp(key, "template")) {
        if (!*v)
            return "an empty value is not valid: expected a template name";
        d->template_id = v;
        return NULL;
    }
    if (!strcmp(key, "lifetime"))
        return ci_parse_seconds(p, v, MAX_TIMEOUT_S, &d->lifetime);
    if (!strcmp(key, "internet"))
        return parse_on_off(p, v, &d->internet);
    *known = 0;
    return NULL;
}

static const char *find_provider(apr_pool_t *p, int argc,
                                 const char *const *argv, ci_provider_kind *kind)
{
    int i;
    *kind = CI_PROVIDER_LOCAL;
    for (i = 0; i < argc; i++) {
        if (strncmp(argv[i], "provider=", 9) != 0)
            continue;
        if (!strcmp(argv[i] + 9, "local"))
            *kind = CI_PROVIDER_LOCAL;
        else if (!strcmp(argv[i] + 9, "e2b"))
            *kind = CI_PROVIDER_E2B;
        else
            return apr_psprintf(p, "unknown provider '%s': expected local or e2b",
                                argv[i] + 9);
    }
    return NULL;
}

const char *ci_sandbox_def_parse(apr_pool_t *p, const char *name, int argc,
                                 const char *const *argv, ci_sandbox_def **out)
{
    ci_provider_kind kind;
    ci_sandbox_def *d;
    const char *e = find_provider(p, argc, argv, &kind);
    int i;

    if (e)
        return e;
    if (ci_parse_function_name(p, name))
        return apr_psprintf(p, "'%s' is not a valid sandbox name: expected 1 to "
                               "64 letters, digits, '_' or '-'", name);
    d = ci_sandbox_def_defaults(p, name, kind);
    for (i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        const char *key, *v;
        int known = 0;
        if (!eq || eq == argv[i])
            return apr_psprintf(p, "'%s' is not valid: expected key=value", argv[i]);
        key = apr_pstrmemdup(p, argv[i], eq - argv[i]);
        v = eq + 1;
        if (!strcmp(key, "provider"))
            continue;
        e = parse_common_key(p, d, key, v, &known);
        if (!known)
            e = kind == CI_PROVIDER_LOCAL ? parse_local_key(p, d, key, v, &known)
                                          : parse_e2b_key(p, d, key, v, &known);
        if (!known)
            return apr_psprintf(p, "unknown key '%s' for provider %s: expected one "
                                   "of %s", key,
                                kind == CI_PROVIDER_LOCAL ? "local" : "e2b",
                                kind == CI_PROVIDER_LOCAL
                                    ? "provider, timeout, max_output, python, memory, "
                                      "processes, disk, warm, preload"
                                    : "provider, timeout, max_output, api_key, "
                                      "api_base, template, lifetime, internet, "
                                      "sandbox_url");
        if (e)
            return apr_psprintf(p, "%s: %s", key, e);
    }
    *out = d;
    return NULL;
}

static const char *read_key_file(apr_pool_t *p, const char *path, const char **key)
{
    apr_file_t *f;
    char buf[1024];
    apr_size_t n = sizeof(buf) - 1;
    char *nl;

    if (apr_file_open(&f, path, APR_FOPEN_READ, 0, p) != APR_SUCCESS)
        return apr_psprintf(p, "api_key=file:%s: the file cannot be read", path);
    if (apr_file_read(f, buf, &n) != APR_SUCCESS)
        n = 0;
    apr_file_close(f);
    buf[n] = '\0';
    if ((nl = strpbrk(buf, "\r\n")))
        *nl = '\0';
    apr_collapse_spaces(buf, buf);
    if (!*buf)
        return apr_psprintf(p, "api_key=file:%s: the file holds no key", path);
    *key = apr_pstrdup(p, buf);
    return NULL;
}

const char *ci_sandbox_def_resolve_key(apr_pool_t *p, ci_sandbox_def *def)
{
    const char *spec = def->api_key_spec;
    char *val = NULL;

    if (def->provider != CI_PROVIDER_E2B)
        return NULL;
    if (!strncmp(spec, "env:", 4)) {
        if (apr_env_get(&val, spec + 4, p) != APR_SUCCESS || !val || !*val)
            return apr_psprintf(p, "api_key=env:%s: the environment variable is "
                                   "not set", spec + 4);
        def->api_key = val;
        return NULL;
    }
    if (!strncmp(spec, "file:", 5))
        return read_key_file(p, spec + 5, &def->api_key);
    def->api_key = spec;
    return NULL;
}

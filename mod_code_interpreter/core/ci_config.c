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

/* Parse a whole number MIN..MAX at the start of VALUE. Returns 0 with *END
 * after the digits, or -1 when there is none or it is out of range. */
static int parse_int(const char *value, int min, int max, int *out,
                     const char **end)
{
    char *stop;
    long n;
    if (!value || !isdigit((unsigned char)value[0]))
        return -1;
    errno = 0;
    n = strtol(value, &stop, 10);
    if (errno || n < min || n > max)
        return -1;
    *out = (int)n;
    *end = stop;
    return 0;
}

const char *ci_parse_seconds(apr_pool_t *p, const char *value, int max, int *out)
{
    const char *end;
    if (parse_int(value, 1, max, out, &end) == 0 &&
        (*end == '\0' || strcmp(end, "s") == 0))
        return NULL;
    return apr_psprintf(p, "'%s' is not a valid duration: expected whole "
                           "seconds from 1 to %d", value ? value : "", max);
}

const char *ci_parse_duration(apr_pool_t *p, const char *value, int max, int *out)
{
    const char *end;
    int n, unit;
    if (parse_int(value, 1, max, &n, &end) == 0) {
        unit = !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : !strcmp(end, "h") ? 3600
             : 0;
        if (unit && (apr_int64_t)n * unit <= max) {
            *out = n * unit;
            return NULL;
        }
    }
    return apr_psprintf(p, "'%s' is not a valid duration: expected a whole number "
                           "of seconds, minutes or hours (30s, 20m, 1h) up to %d s",
                        value ? value : "", max);
}

const char *ci_parse_count(apr_pool_t *p, const char *value, int max,
                           int allow_zero, int *out)
{
    const char *end;
    if (parse_int(value, allow_zero ? 0 : 1, max, out, &end) == 0 && *end == '\0')
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

/* LEN bytes at S are one label of a host name. */
static int is_label(const char *s, apr_size_t len)
{
    apr_size_t i;
    if (len < 1 || len > 63 || s[0] == '-' || s[len - 1] == '-')
        return 0;
    for (i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-')
            return 0;
    return 1;
}

/* NAME is all digits and dots: an IPv4 address in one of its forms. */
static int looks_numeric(const char *name)
{
    const char *last = strrchr(name, '.');
    last = last ? last + 1 : name;
    return strspn(last, "0123456789") == strlen(last) ||
           (last[0] == '0' && (last[1] == 'x' || last[1] == 'X'));
}

const char *ci_parse_domain_pattern(apr_pool_t *p, const char *value, const char **out)
{
    char *name = apr_pstrdup(p, value ? value : ""), *s, *dot;
    apr_size_t len;
    int wild = !strncmp(name, "*.", 2);
    for (s = name; *s; s++)
        *s = (char)tolower((unsigned char)*s);
    s = wild ? name + 2 : name;
    len = strlen(s);
    if (len && s[len - 1] == '.')
        s[--len] = '\0';
    if (len < 1 || len > 253 || looks_numeric(s))
        return apr_psprintf(p, "'%s' is not a domain name", value ? value : "");
    for (;;) {
        dot = strchr(s, '.');
        if (!is_label(s, dot ? (apr_size_t)(dot - s) : strlen(s)))
            return apr_psprintf(p, "'%s' is not a domain name", value);
        if (!dot)
            break;
        s = dot + 1;
    }
    *out = name;
    return NULL;
}

int ci_domain_covers(const char *pattern, const char *what)
{
    apr_size_t plen, wlen;
    if (!strcmp(pattern, what))
        return 1;
    if (strncmp(pattern, "*.", 2))
        return 0;                            /* an exact name covers itself */
    if (!strncmp(what, "*.", 2))             /* "*.b" covers "*.a.b" as "a.b" */
        return ci_domain_covers(pattern, what + 2);
    pattern += 1;                            /* ".suffix" */
    plen = strlen(pattern);
    wlen = strlen(what);
    return wlen > plen && !strcmp(what + wlen - plen, pattern);
}

apr_array_header_t *ci_domains_split(apr_pool_t *p, const char *list)
{
    apr_array_header_t *out = apr_array_make(p, 4, sizeof(const char *));
    char *copy = list ? apr_pstrdup(p, list) : NULL, *last, *entry;
    for (entry = copy ? apr_strtok(copy, ",", &last) : NULL; entry;
         entry = apr_strtok(NULL, ",", &last))
        *(const char **)apr_array_push(out) = entry;
    return out;
}

const char *ci_parse_proxy_url(apr_pool_t *p, const char *value)
{
    apr_uri_t uri;
    if (value && apr_uri_parse(p, value, &uri) == APR_SUCCESS && uri.scheme &&
        !strcasecmp(uri.scheme, "http") && uri.hostname && *uri.hostname &&
        uri.port_str && uri.port > 0 && (!uri.path || !strcmp(uri.path, "/") ||
        !*uri.path) && !uri.user && !uri.query && !strpbrk(value, " \t\r\n"))
        return NULL;
    return apr_psprintf(p, "'%s' is not valid: expected http://HOST:PORT", value ? value : "");
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

const char *ci_parse_on_off(apr_pool_t *p, const char *value, int *out)
{
    if (!strcasecmp(value, "on")) *out = 1;
    else if (!strcasecmp(value, "off")) *out = 0;
    else
        return apr_psprintf(p, "'%s' is not valid: expected on or off", value);
    return NULL;
}

static const char *read_key_file(apr_pool_t *p, const char *key, const char *path,
                                 const char **out)
{
    apr_file_t *f;
    char buf[1024];
    apr_size_t n = sizeof(buf) - 1;
    char *nl;

    if (apr_file_open(&f, path, APR_FOPEN_READ, 0, p) != APR_SUCCESS)
        return apr_psprintf(p, "%s=file:%s: the file cannot be read", key, path);
    if (apr_file_read(f, buf, &n) != APR_SUCCESS)
        n = 0;
    apr_file_close(f);
    buf[n] = '\0';
    if ((nl = strpbrk(buf, "\r\n")))
        *nl = '\0';
    apr_collapse_spaces(buf, buf);
    if (!*buf)
        return apr_psprintf(p, "%s=file:%s: the file holds no key", key, path);
    *out = apr_pstrdup(p, buf);
    explicit_bzero(buf, sizeof(buf));
    return NULL;
}

const char *ci_resolve_secret(apr_pool_t *p, const char *key, const char *spec,
                              const char **out)
{
    char *val = NULL;
    if (!strncmp(spec, "env:", 4)) {
        if (apr_env_get(&val, spec + 4, p) != APR_SUCCESS || !val || !*val)
            return apr_psprintf(p, "%s=env:%s: the environment variable is "
                                   "not set", key, spec + 4);
        *out = val;
        return NULL;
    }
    if (!strncmp(spec, "file:", 5))
        return read_key_file(p, key, spec + 5, out);
    *out = spec;
    return NULL;
}

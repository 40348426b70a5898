/*
 * fuzz_directives.c - the directive value parsers fed arbitrary words.
 *
 * The input is configuration text: lines of whitespace-separated words. A
 * line naming one of the module's directives has its arguments parsed as
 * httpd would (CodeInterpreterSandbox NAME key=value ... through
 * ci_sandbox_def_parse, CodeInterpreterMaxBody through ci_parse_size, ...).
 * Any other line has every word run through every parser, with several
 * limits, and the whole line through ci_sandbox_def_parse.
 *
 * Checked: no crash, leak or undefined behaviour; a parser either fails with
 * a message or succeeds with a value inside its limits; a parsed sandbox
 * holds only values inside the documented limits.
 */
#include <ctype.h>
#include <limits.h>
#include "fuzz_common.h"
#include "ci_config.h"
#include "ci_sandbox.h"
#include "e2b_internal.h"
#include "local_conf.h"

#define MAX_WORDS 64
#define MAX_LINES 64

static void check_size(apr_pool_t *p, const char *v, apr_uint64_t max)
{
    apr_uint64_t out = 0;
    const char *e = ci_parse_size(p, v, max, &out);
    if (e)
        return;
    FUZZ_CHECK(out > 0 && out <= max, "size '%s' -> %llu (max %llu)", v,
               (unsigned long long)out, (unsigned long long)max);
    FUZZ_CHECK(isdigit((unsigned char)v[0]), "size '%s' accepted", v);
}

static void check_seconds(apr_pool_t *p, const char *v, int max)
{
    int out = -1;
    const char *e = ci_parse_seconds(p, v, max, &out);
    if (!e)
        FUZZ_CHECK(out >= 1 && out <= max, "seconds '%s' -> %d (max %d)", v, out,
                   max);
}

static void check_count(apr_pool_t *p, const char *v, int max, int zero)
{
    int out = -1;
    const char *e = ci_parse_count(p, v, max, zero, &out);
    if (!e)
        FUZZ_CHECK(out >= (zero ? 0 : 1) && out <= max, "count '%s' -> %d", v, out);
}

static int is_url(const char *v)
{
    return (!strncasecmp(v, "http://", 7) && v[7]) ||
           (!strncasecmp(v, "https://", 8) && v[8]);
}

static void check_url(apr_pool_t *p, const char *v)
{
    if (!ci_parse_url(p, v))
        FUZZ_CHECK(is_url(v) && !strpbrk(v, " \t\r\n"), "URL '%s' accepted", v);
}

static int good_name(const char *v)
{
    size_t n = strlen(v);
    return n >= 1 && n <= 64 &&
           strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                     "0123456789_-") == n;
}

static void check_name(apr_pool_t *p, const char *v)
{
    const char *e = ci_parse_function_name(p, v);
    FUZZ_CHECK((e == NULL) == good_name(v), "function name '%s': %s", v, e ? e : "accepted");
}

static void check_sandbox(apr_pool_t *p, const char *name, int argc,
                          const char *const *argv)
{
    ci_sandbox_def *d = NULL;
    const char *e = ci_sandbox_def_parse(p, name, argc, argv, &d);
    if (e) {
        FUZZ_CHECK(*e, "empty error");
        return;
    }
    FUZZ_CHECK(d && d->name && !strcmp(d->name, name) && good_name(name),
               "sandbox name '%s'", name);
    FUZZ_CHECK(d->timeout >= apr_time_from_sec(1) &&
                   d->timeout <= apr_time_from_sec(86400),
               "timeout %lld", (long long)d->timeout);
    FUZZ_CHECK(d->max_output >= 1 && d->max_output <= ((apr_size_t)16 << 20),
               "max_output %zu", (size_t)d->max_output);
    FUZZ_CHECK(d->network == 0 || d->network == 1, "network %d", d->network);
    if (d->provider == ci_provider_named("local")) {
        const ci_local_conf *l = CI_LOCAL(d);
        FUZZ_CHECK(l->python && l->python[0] == '/', "python '%s'", l->python);
        FUZZ_CHECK(l->memory >= 1 && l->memory <= ((apr_uint64_t)1 << 40),
                   "memory %llu", (unsigned long long)l->memory);
        FUZZ_CHECK(l->disk >= 1 && l->disk <= ((apr_uint64_t)1 << 40), "disk");
        FUZZ_CHECK(l->processes >= 1 && l->processes <= 4096, "processes %d",
                   l->processes);
        FUZZ_CHECK(d->warm >= 0 && d->warm <= 64, "warm %d", d->warm);
        FUZZ_CHECK(!l->preload || strspn(l->preload,
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklm"
                                         "nopqrstuvwxyz0123456789_.,") ==
                                      strlen(l->preload),
                   "preload '%s'", l->preload);
    }
    else {
        const ci_e2b_conf *e = CI_E2B(d);
        FUZZ_CHECK(d->provider == ci_provider_named("e2b"), "provider %s", d->provider->name);
        FUZZ_CHECK(e->api_key_spec && *e->api_key_spec, "empty api_key");
        FUZZ_CHECK(e->template_id && *e->template_id, "empty template");
        FUZZ_CHECK(e->lifetime >= 1 && e->lifetime <= 86400, "lifetime %d",
                   e->lifetime);
        FUZZ_CHECK(!ci_parse_url(p, e->api_base), "api_base '%s'", e->api_base);
        FUZZ_CHECK(!e->sandbox_url || !ci_parse_url(p, e->sandbox_url),
                   "sandbox_url '%s'", e->sandbox_url);
        /* Keys from the environment or literal; never files (a fuzzed path
         * could name a device or a FIFO). */
        if (strncmp(e->api_key_spec, "file:", 5)) {
            const char *ke = ci_sandbox_def_resolve(p, d);
            FUZZ_CHECK(ke || (e->api_key && *e->api_key), "resolved to no key");
        }
    }
}

static void every_parser(apr_pool_t *p, const char *w)
{
    static const apr_uint64_t sizes[] = { 1, 1023, (apr_uint64_t)1 << 20,
                                          (apr_uint64_t)1 << 32, (apr_uint64_t)1 << 40,
                                          ~(apr_uint64_t)0 };
    size_t i;
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        check_size(p, w, sizes[i]);
    check_seconds(p, w, 1);
    check_seconds(p, w, 86400);
    check_seconds(p, w, INT_MAX);
    check_count(p, w, 1000, 0);
    check_count(p, w, 64, 1);
    check_count(p, w, INT_MAX, 1);
    check_url(p, w);
    check_name(p, w);
}

static void directive(apr_pool_t *p, int argc, const char *const *argv)
{
    const char *d = argv[0], *v = argc > 1 ? argv[1] : "";
    int i;
    if (!strcasecmp(d, "CodeInterpreterSandbox")) {
        check_sandbox(p, v, argc > 2 ? argc - 2 : 0, argv + (argc > 2 ? 2 : argc));
        return;
    }
    if (!strcasecmp(d, "CodeInterpreterMaxBody"))
        check_size(p, v, (apr_uint64_t)1 << 32);
    else if (!strcasecmp(d, "CodeInterpreterDeadline") ||
             !strcasecmp(d, "CodeInterpreterKeepalive") ||
             !strcasecmp(d, "CodeInterpreterConnectTimeout") ||
             !strcasecmp(d, "CodeInterpreterUpstreamTimeout"))
        check_seconds(p, v, 86400);
    else if (!strcasecmp(d, "CodeInterpreterMaxLoops"))
        check_count(p, v, 1000, 0);
    else if (!strcasecmp(d, "CodeInterpreterWorkers") ||
             !strcasecmp(d, "CodeInterpreterQueueLimit") ||
             !strcasecmp(d, "CodeInterpreterMaxSandboxes"))
        check_count(p, v, 100000, 0);
    else if (!strcasecmp(d, "CodeInterpreterUpstream") ||
             !strcasecmp(d, "CodeInterpreterProxy"))
        check_url(p, v);
    else if (!strcasecmp(d, "CodeInterpreterFunctionName") ||
             !strcasecmp(d, "CodeInterpreter"))
        check_name(p, v);
    else {
        for (i = 0; i < argc; i++)
            every_parser(p, argv[i]);
        check_sandbox(p, argv[0], argc - 1, argv + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    size_t at = 0;
    int lines = 0;

    while (at < size && lines++ < MAX_LINES) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - data) : size, i = at;
        char *words[MAX_WORDS];
        int argc = 0, k;
        while (i < end && argc < MAX_WORDS) {
            size_t s;
            while (i < end && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r'))
                i++;
            if (i >= end)
                break;
            s = i;
            while (i < end && data[i] != ' ' && data[i] != '\t' && data[i] != '\r')
                i++;
            /* Exact size, NUL-terminated: a word may hold NUL bytes, as
             * nothing in a config file stops it. */
            words[argc] = malloc(i - s + 1);
            memcpy(words[argc], data + s, i - s);
            words[argc][i - s] = '\0';
            argc++;
        }
        if (argc > 0)
            directive(p, argc, (const char *const *)words);
        for (k = 0; k < argc; k++)
            free(words[k]);
        at = end + 1;
    }
    fuzz_pool_destroy(p);
    return 0;
}

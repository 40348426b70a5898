/*
 * ci_sandbox.c - the provider table, sandbox tool definitions (the keys
 * every provider shares, then the provider's own), and the box: a sandbox
 * that restarts itself after a failed execution.
 */
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <apr_atomic.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include "ci_config.h"
#include "ci_log.h"
#include "ci_sandbox.h"

extern const ci_provider ci_provider_local;
extern const ci_provider ci_provider_e2b;

/* The providers this library carries. The first is the default of
 * CodeInterpreterSandbox. */
const ci_provider *const ci_builtin_providers[] = {
    &ci_provider_local,
    &ci_provider_e2b,
    NULL
};

#define MAX_ADDED 8
static const ci_provider *added[MAX_ADDED];
static const ci_provider *(*host_find)(const char *name);
static const char *(*host_names)(apr_pool_t *p);

void ci_provider_set_finder(const ci_provider *(*find)(const char *name),
                            const char *(*names)(apr_pool_t *p))
{
    host_find = find;
    host_names = names;
}

void ci_provider_add(const ci_provider *p)
{
    int i;
    for (i = 0; i < MAX_ADDED; i++)
        if (!added[i] || added[i] == p) {
            added[i] = p;
            return;
        }
}

static const ci_provider *builtin_named(const char *name)
{
    int i;
    for (i = 0; ci_builtin_providers[i]; i++)
        if (!strcmp(ci_builtin_providers[i]->name, name))
            return ci_builtin_providers[i];
    for (i = 0; i < MAX_ADDED && added[i]; i++)
        if (!strcmp(added[i]->name, name))
            return added[i];
    return NULL;
}

const ci_provider *ci_provider_named(const char *name)
{
    return host_find ? host_find(name) : builtin_named(name);
}

const char *ci_provider_names(apr_pool_t *p)
{
    apr_array_header_t *names = apr_array_make(p, 4, sizeof(const char *));
    int i;
    if (host_names)
        return host_names(p);
    for (i = 0; ci_builtin_providers[i]; i++)
        *(const char **)apr_array_push(names) = ci_builtin_providers[i]->name;
    for (i = 0; i < MAX_ADDED && added[i]; i++)
        *(const char **)apr_array_push(names) = added[i]->name;
    return ci_provider_list_text(p, names);
}

const char *ci_provider_list_text(apr_pool_t *p, const apr_array_header_t *names)
{
    const char *out = "";
    int i;
    for (i = 0; i < names->nelts; i++)
        out = apr_pstrcat(p, out, i == 0 ? "" : i == names->nelts - 1 ? " or " : ", ",
                          APR_ARRAY_IDX(names, i, const char *), NULL);
    return out;
}

/* ---- definitions --------------------------------------------------------- */

#define COMMON_KEYS "provider, timeout, max_output, idle, max_idle, retention, tiers, " \
                    "max_file, max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca"
#define MAX_FILES_LIMIT 10000            /* a container's listing shows as many */
#define MAX_IDLE (30 * 86400)

ci_sandbox_def *ci_sandbox_def_defaults(apr_pool_t *p, const char *name,
                                        const ci_provider *provider)
{
    ci_sandbox_def *d = apr_pcalloc(p, sizeof(*d));
    d->name = apr_pstrdup(p, name);
    d->provider = provider;
    d->timeout = apr_time_from_sec(30);
    d->max_output = 64 * 1024;
    d->idle = 20 * 60;
    d->max_idle = 24 * 3600;
    d->retention = 3600;
    d->files.max_file = (apr_uint64_t)512 << 20;     /* OpenAI's own per-file cap */
    d->files.max_files = 1000;
    d->files.max_bytes = 0;                          /* the sandbox's disk bounds it */
    if (provider->defaults)
        provider->defaults(p, d);
    return d;
}

/* allowed_domains=a.org,*.b.org: each a domain pattern, normalised. */
static const char *parse_domains(apr_pool_t *p, const char *v, const char **out)
{
    apr_array_header_t *domains = ci_domains_split(p, v);
    const char *joined = NULL, *norm, *e;
    int i;
    for (i = 0; i < domains->nelts; i++) {
        if ((e = ci_parse_domain_pattern(p, APR_ARRAY_IDX(domains, i, const char *), &norm)))
            return e;
        joined = joined ? apr_pstrcat(p, joined, ",", norm, NULL) : norm;
    }
    if (!joined)
        return "expected one or more domains, comma separated";
    *out = joined;
    return NULL;
}

static const char *parse_egress_key(apr_pool_t *p, ci_sandbox_def *d, const char *key,
                                    const char *v, int *known)
{
    const char *e;
    if (!strcmp(key, "egress")) {
        if (!strcmp(v, "off") || !strcmp(v, "allowlist")) {
            d->egress = !strcmp(v, "allowlist");
            return NULL;
        }
        return apr_psprintf(p, "'%s' is not valid: expected off or allowlist", v);
    }
    if (!strcmp(key, "allowed_domains"))
        return parse_domains(p, v, &d->allowed_domains);
    if (!strcmp(key, "egress_proxy")) {
        if (!(e = ci_parse_proxy_url(p, v)))
            d->egress_proxy = apr_pstrdup(p, v);
        return e;
    }
    if (!strcmp(key, "egress_ca")) {
        if (v[0] != '/' || access(v, R_OK) != 0)
            return apr_psprintf(p, "'%s' is not a readable file (an absolute path to "
                                   "PEM certificates)", v);
        d->egress_ca = apr_pstrdup(p, v);
        return NULL;
    }
    *known = 0;
    return NULL;
}

/* The egress keys together, once every word is in. */
static const char *check_egress(apr_pool_t *p, const ci_sandbox_def *d)
{
    if (d->egress && !(d->provider->caps & CI_CAP_EGRESS))
        return apr_psprintf(p, "egress: provider %s cannot enforce an allowlist",
                            d->provider->name);
    if (!d->egress && (d->allowed_domains || d->egress_proxy || d->egress_ca))
        return apr_psprintf(p, "%s= needs egress=allowlist",
                            d->allowed_domains ? "allowed_domains"
                            : d->egress_proxy ? "egress_proxy" : "egress_ca");
    if (d->egress_ca && !(d->provider->caps & CI_CAP_SECRETS))
        return apr_psprintf(p, "egress_ca: provider %s's sandboxes do not reach the "
                               "internet through this server", d->provider->name);
    if (d->egress_proxy && !(d->provider->caps & CI_CAP_SITE_PROXY))
        return apr_psprintf(p, "egress_proxy: provider %s's sandboxes do not reach the "
                               "internet through this server", d->provider->name);
    return NULL;
}

static const char *parse_common_key(apr_pool_t *p, ci_sandbox_def *d,
                                    const char *key, const char *v, int *known)
{
    apr_uint64_t n;
    const char *e;
    int s;
    *known = 1;
    if (!strcmp(key, "timeout")) {
        if (!(e = ci_parse_seconds(p, v, CI_MAX_SECONDS, &s)))
            d->timeout = apr_time_from_sec(s);
        return e;
    }
    if (!strcmp(key, "idle"))
        return ci_parse_duration(p, v, MAX_IDLE, &d->idle);
    if (!strcmp(key, "max_idle"))
        return ci_parse_duration(p, v, MAX_IDLE, &d->max_idle);
    if (!strcmp(key, "retention"))
        return ci_parse_duration(p, v, MAX_IDLE, &d->retention);
    if (!strcmp(key, "max_file"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &d->files.max_file);
    if (!strcmp(key, "max_bytes"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &d->files.max_bytes);
    if (!strcmp(key, "max_files")) {
        if (!(e = ci_parse_count(p, v, MAX_FILES_LIMIT, 0, &s)))
            d->files.max_files = (apr_uint64_t)s;
        return e;
    }
    if (!strcmp(key, "tiers")) {
        d->tiers = v;
        return NULL;              /* checked once the provider's keys are in */
    }
    if (!strcmp(key, "max_output")) {
        if (!(e = ci_parse_size(p, v, (apr_uint64_t)16 << 20, &n)))
            d->max_output = (apr_size_t)n;
        return e;
    }
    return parse_egress_key(p, d, key, v, known);
}

/* What each capability needs of a provider's entries, beside the ones
 * every provider has. */
#define ENTRY(f) { #f, offsetof(ci_provider, f) }
typedef struct { const char *name; size_t at; } entry_at;
static const struct {
    unsigned cap;
    const char *cap_name;
    unsigned needs;                   /* other capabilities it needs */
    entry_at entries[6];
} cap_needs[] = {
    { 0, NULL, 0, { ENTRY(defaults), ENTRY(conf_copy), ENTRY(fingerprint),
                    ENTRY(parse_key), ENTRY(start), ENTRY(run) } },
    { 0, NULL, 0, { ENTRY(interrupt), ENTRY(destroy) } },
    { CI_CAP_WARM, "CI_CAP_WARM", 0, { ENTRY(warm_take) } },
    { CI_CAP_REMOTE, "CI_CAP_REMOTE", 0, { ENTRY(remote_id), ENTRY(reap_cred),
                                           ENTRY(reap) } },
    { CI_CAP_CONTAINERS, "CI_CAP_CONTAINERS", 0, { ENTRY(attach), ENTRY(release) } },
    { CI_CAP_FILES, "CI_CAP_FILES", CI_CAP_CONTAINERS,
      { ENTRY(files_list), ENTRY(file_get), ENTRY(file_delete), ENTRY(file_put) } },
    { CI_CAP_SHELL, "CI_CAP_SHELL", 0, { ENTRY(run_commands) } },
};
#undef ENTRY

const char *ci_provider_check(apr_pool_t *p, const ci_provider *prov)
{
    size_t i, j;
    if (!prov->name || !*prov->name)
        return "a sandbox provider has no name";
    for (i = 0; i < sizeof(cap_needs) / sizeof(cap_needs[0]); i++) {
        if (cap_needs[i].cap && !(prov->caps & cap_needs[i].cap))
            continue;
        if ((prov->caps & cap_needs[i].needs) != cap_needs[i].needs)
            return apr_psprintf(p, "provider '%s' declares %s without CI_CAP_CONTAINERS",
                                prov->name, cap_needs[i].cap_name);
        for (j = 0; j < 6 && cap_needs[i].entries[j].name; j++)
            if (!*(void *const *)((const char *)prov + cap_needs[i].entries[j].at))
                return apr_psprintf(p, "provider '%s' has no %s entry%s%s", prov->name,
                                    cap_needs[i].entries[j].name,
                                    cap_needs[i].cap ? ", which " : "",
                                    cap_needs[i].cap ? apr_pstrcat(p, cap_needs[i].cap_name,
                                                                   " needs", NULL) : "");
    }
    return NULL;
}

/* The provider= word (the last one wins), or the default provider; one
 * whose entries do not match its capabilities is refused here, at the
 * configuration, rather than met with a NULL entry at a request. */
static const char *find_provider(apr_pool_t *p, int argc, const char *const *argv,
                                 const ci_provider **out)
{
    int i;
    *out = ci_provider_named(ci_builtin_providers[0]->name);
    for (i = 0; i < argc; i++) {
        if (strncmp(argv[i], "provider=", 9) != 0)
            continue;
        if (!(*out = ci_provider_named(argv[i] + 9)))
            return apr_psprintf(p, "unknown provider '%s': expected %s",
                                argv[i] + 9, ci_provider_names(p));
    }
    return ci_provider_check(p, *out);
}

static const char *parse_word(apr_pool_t *p, ci_sandbox_def *d, const char *word)
{
    const char *eq = strchr(word, '=');
    const char *key, *v, *e;
    int known = 0;
    if (!eq || eq == word)
        return apr_psprintf(p, "'%s' is not valid: expected key=value", word);
    key = apr_pstrmemdup(p, word, eq - word);
    v = eq + 1;
    if (!strcmp(key, "provider"))
        return NULL;
    e = parse_common_key(p, d, key, v, &known);
    if (!known)
        e = d->provider->parse_key(p, d, key, v, &known);
    if (!known)
        return apr_psprintf(p, "unknown key '%s' for provider %s: expected one "
                               "of " COMMON_KEYS "%s%s", key, d->provider->name,
                            *d->provider->keys ? ", " : "", d->provider->keys);
    return e ? apr_psprintf(p, "%s: %s", key, e) : NULL;
}

/* ---- memory tiers ----------------------------------------------------------- */

static const char *const tier_names[] = { "1g", "4g", "16g", "64g" };

static int is_tier_name(const char *s, apr_size_t len)
{
    unsigned i;
    for (i = 0; i < sizeof(tier_names) / sizeof(*tier_names); i++)
        if (strlen(tier_names[i]) == len && !strncmp(s, tier_names[i], len))
            return 1;
    return 0;
}

/* The value tiers= gives tier NAME (from P), or NULL. */
static const char *tier_value(apr_pool_t *p, const char *tiers, const char *name)
{
    char *list = apr_pstrdup(p, tiers), *last, *entry;
    for (entry = apr_strtok(list, ",", &last); entry; entry = apr_strtok(NULL, ",", &last)) {
        char *colon = strchr(entry, ':');
        if (colon && (apr_size_t)(colon - entry) == strlen(name) &&
            !strncmp(entry, name, strlen(name)))
            return colon + 1;
    }
    return NULL;
}

/* tiers=NAME:VALUE,...: known names, each once, values the provider takes. */
static const char *check_tiers(apr_pool_t *p, ci_sandbox_def *d)
{
    char *list = apr_pstrdup(p, d->tiers), *last, *entry;
    const char *seen = ",", *e;
    if (!d->provider->tier)
        return apr_psprintf(p, "tiers: provider %s offers only the default tier %s",
                            d->provider->name, CI_DEFAULT_TIER);
    for (entry = apr_strtok(list, ",", &last); entry; entry = apr_strtok(NULL, ",", &last)) {
        char *colon = strchr(entry, ':');
        ci_sandbox_def scratch = *d;
        if (d->provider->conf_copy)
            scratch.conf = d->provider->conf_copy(p, d->conf);
        if (!colon || !is_tier_name(entry, (apr_size_t)(colon - entry)) || !colon[1])
            return apr_psprintf(p, "tiers: '%s' is not valid: expected NAME:VALUE "
                                   "with NAME one of 1g, 4g, 16g, 64g", entry);
        *colon = '\0';
        if (strstr(seen, apr_pstrcat(p, ",", entry, ",", NULL)))
            return apr_psprintf(p, "tiers: %s is named twice", entry);
        seen = apr_pstrcat(p, seen, entry, ",", NULL);
        if ((e = d->provider->tier(p, &scratch, colon + 1)))
            return apr_psprintf(p, "tiers: %s: %s", entry, e);
    }
    return NULL;
}

static const char *ci_sandbox_def_tier_names(apr_pool_t *p, const ci_sandbox_def *def);

const char *ci_sandbox_def_tier(apr_pool_t *p, const ci_sandbox_def *def,
                                const char *name, const ci_sandbox_def **out)
{
    const char *value = def->tiers ? tier_value(p, def->tiers, name) : NULL;
    ci_sandbox_def *d;
    *out = def;
    if (!value && !strcmp(name, CI_DEFAULT_TIER) &&
        (!def->tiers || !strstr(def->tiers, CI_DEFAULT_TIER ":")))
        return NULL;              /* the tool as declared */
    if (!value)
        return apr_psprintf(p, "Invalid 'memory_limit': '%s'. This server's sandbox "
                               "tool %s offers: %s.", name, def->name,
                            ci_sandbox_def_tier_names(p, def));
    d = apr_pmemdup(p, def, sizeof(*d));
    if (def->provider->conf_copy)
        d->conf = def->provider->conf_copy(p, def->conf);
    def->provider->tier(p, d, value);
    *out = d;
    return NULL;
}

/* The tiers DEF offers, for messages ("1g, 4g"). */
static const char *ci_sandbox_def_tier_names(apr_pool_t *p, const ci_sandbox_def *def)
{
    const char *out = NULL;
    unsigned i;
    /* the default tier is always offered: the tool as declared, unless
     * tiers= says what it means */
    for (i = 0; i < sizeof(tier_names) / sizeof(*tier_names); i++)
        if (!strcmp(tier_names[i], CI_DEFAULT_TIER) ||
            (def->tiers && tier_value(p, def->tiers, tier_names[i])))
            out = out ? apr_pstrcat(p, out, ", ", tier_names[i], NULL) : tier_names[i];
    return out;
}

const char *ci_sandbox_def_parse(apr_pool_t *p, const char *name, int argc,
                                 const char *const *argv, ci_sandbox_def **out)
{
    const ci_provider *provider;
    ci_sandbox_def *d;
    const char *e = find_provider(p, argc, argv, &provider);
    int i;

    if (e)
        return e;
    if (ci_parse_function_name(p, name))
        return apr_psprintf(p, "'%s' is not a valid sandbox name: expected 1 to "
                               "64 letters, digits, '_' or '-'", name);
    d = ci_sandbox_def_defaults(p, name, provider);
    for (i = 0; i < argc; i++)
        if ((e = parse_word(p, d, argv[i])))
            return e;
    if (d->tiers && (e = check_tiers(p, d)))
        return e;
    if ((e = check_egress(p, d)))
        return e;
    if (d->idle > d->max_idle)
        return apr_psprintf(p, "idle=%d s exceeds max_idle=%d s: the default expiry "
                               "must be one a client could ask for", d->idle, d->max_idle);
    *out = d;
    return NULL;
}

/* A copy of DEF in P for one container (its provider's keys copied too). */
static ci_sandbox_def *def_for_container(apr_pool_t *p, const ci_sandbox_def *def)
{
    ci_sandbox_def *d = apr_pmemdup(p, def, sizeof(*d));
    if (def->provider->conf_copy && def->conf)
        d->conf = def->provider->conf_copy(p, def->conf);
    return d;
}

/* DEF for a container whose network policy allows ALLOWLIST (comma
 * separated, normalised; NULL or "": none): DEF itself, or a copy in P. */
static const ci_sandbox_def *ci_sandbox_def_allowlist(apr_pool_t *p,
                                                      const ci_sandbox_def *def,
                                                      const char *allowlist)
{
    ci_sandbox_def *d;
    if (!allowlist || !*allowlist)
        return def;
    d = def_for_container(p, def);
    d->allowlist = apr_pstrdup(p, allowlist);
    return d;
}

const ci_sandbox_def *ci_sandbox_def_container(apr_pool_t *p, const ci_sandbox_def *def,
                                               const char *tier, const char *allowlist,
                                               const char *secrets)
{
    ci_sandbox_def *d;
    if (tier)
        ci_sandbox_def_tier(p, def, tier, &def);
    def = ci_sandbox_def_allowlist(p, def, allowlist);
    if (!def->allowlist || !secrets)
        return def;
    d = apr_pmemdup(p, def, sizeof(*d));     /* the allowlist's copy, or a new one */
    d->secrets = apr_pstrdup(p, secrets);
    return d;
}

const ci_sandbox_def *ci_sandbox_def_with_skills(apr_pool_t *p, const ci_sandbox_def *def,
                                                 const char *skills)
{
    ci_sandbox_def *d;
    if (!skills || !*skills)
        return def;
    d = def_for_container(p, def);
    d->skills = apr_pstrdup(p, skills);
    return d;
}

int ci_sandbox_def_domain_allowed(apr_pool_t *p, const ci_sandbox_def *def,
                                  const char *domain)
{
    apr_array_header_t *ceiling;
    int i;
    if (!def->allowed_domains)
        return 1;
    ceiling = ci_domains_split(p, def->allowed_domains);
    for (i = 0; i < ceiling->nelts; i++)
        if (ci_domain_covers(APR_ARRAY_IDX(ceiling, i, const char *), domain))
            return 1;
    return 0;
}

ci_sandbox_def *ci_sandbox_def_copy(apr_pool_t *p, const ci_sandbox_def *def)
{
    ci_sandbox_def *d = apr_pmemdup(p, def, sizeof(*def));
    d->name = apr_pstrdup(p, def->name);
    d->tiers = def->tiers ? apr_pstrdup(p, def->tiers) : NULL;
    d->allowed_domains = def->allowed_domains ? apr_pstrdup(p, def->allowed_domains) : NULL;
    d->egress_proxy = def->egress_proxy ? apr_pstrdup(p, def->egress_proxy) : NULL;
    d->allowlist = def->allowlist ? apr_pstrdup(p, def->allowlist) : NULL;
    d->egress_ca = def->egress_ca ? apr_pstrdup(p, def->egress_ca) : NULL;
    d->secrets = def->secrets ? apr_pstrdup(p, def->secrets) : NULL;
    d->skills = def->skills ? apr_pstrdup(p, def->skills) : NULL;
    if (def->provider->conf_copy && def->conf)
        d->conf = def->provider->conf_copy(p, def->conf);
    return d;
}

const char *ci_sandbox_def_resolve(apr_pool_t *p, ci_sandbox_def *def)
{
    return def->provider->resolve ? def->provider->resolve(p, def) : NULL;
}

const char *ci_sandbox_def_fingerprint(apr_pool_t *p, const ci_sandbox_def *d)
{
    return apr_psprintf(p, "%s|%" APR_TIME_T_FMT "|%" APR_SIZE_T_FMT "|%d|%d|%s|%"
                        APR_UINT64_T_FMT "|%" APR_UINT64_T_FMT "|%" APR_UINT64_T_FMT "|%"
                        APR_UINT64_T_FMT "|%d|%s|%s|%s|%s",
                        d->provider->name, d->timeout, d->max_output, d->warm, d->network,
                        d->tiers ? d->tiers : "", d->rss_bound, d->files.max_file,
                        d->files.max_files, d->files.max_bytes, d->egress,
                        d->allowed_domains ? d->allowed_domains : "",
                        d->egress_proxy ? d->egress_proxy : "",
                        d->egress_ca ? d->egress_ca : "",
                        d->provider->fingerprint ? d->provider->fingerprint(p, d) : "");
}

/* ---- the box ------------------------------------------------------------- */

struct ci_box {
    apr_pool_t *p;
    const ci_sandbox_def *def;
    const char *tag;
    ci_box_listener *listener;
    void *baton;
    apr_thread_mutex_t *lock;   /* guards sb against interrupt() */
    apr_pool_t *sbpool;         /* the current sandbox's */
    ci_sandbox *sb;
    int failed;                 /* the last run lost the interpreter */
    volatile apr_uint32_t interrupted;
    /* a container's box */
    const char *container;      /* its id, or NULL: the request's own box */
    const char *handle;         /* what attach needs, or NULL */
    int idle_seconds;
};

static void set_sandbox(ci_box *b, ci_sandbox *sb, apr_pool_t *sbpool);

void ci_box_set_container(ci_box *b, const ci_sandbox_def *def,
                          const char *container_id, const char *handle, int idle_seconds)
{
    b->def = def;
    b->container = apr_pstrdup(b->p, container_id);
    b->handle = handle ? apr_pstrdup(b->p, handle) : NULL;
    b->idle_seconds = idle_seconds;
}

void ci_box_release(ci_box *b)
{
    ci_sandbox *sb = b->sb;
    apr_pool_t *sbpool = b->sbpool;
    if (!sb)
        return;
    set_sandbox(b, NULL, NULL);
    if (b->def->provider->release)
        b->def->provider->release(sb);
    apr_pool_destroy(sbpool);
}

ci_box *ci_box_create(apr_pool_t *p, const ci_sandbox_def *def, const char *tag,
                      ci_box_listener *listener, void *baton)
{
    ci_box *b = apr_pcalloc(p, sizeof(*b));
    b->p = p;
    b->def = def;
    b->tag = tag;
    b->listener = listener;
    b->baton = baton;
    apr_thread_mutex_create(&b->lock, APR_THREAD_MUTEX_DEFAULT, p);
    return b;
}

static void set_sandbox(ci_box *b, ci_sandbox *sb, apr_pool_t *sbpool)
{
    apr_thread_mutex_lock(b->lock);
    b->sb = sb;
    b->sbpool = sbpool;
    apr_thread_mutex_unlock(b->lock);
}

void ci_box_adopt(ci_box *b, ci_sandbox *sb, apr_pool_t *sbpool)
{
    set_sandbox(b, sb, sbpool);
}

void ci_box_destroy(ci_box *b, const char *why)
{
    ci_sandbox *sb = b->sb;
    apr_pool_t *sbpool = b->sbpool;
    if (!sb)
        return;
    set_sandbox(b, NULL, NULL);
    b->def->provider->destroy(sb);
    if (b->listener)
        b->listener(b->baton, CI_BOX_DESTROYED, sb, why);
    apr_pool_destroy(sbpool);
}

static apr_status_t start(ci_box *b, const char **err)
{
    apr_pool_t *sbpool;
    ci_sandbox *sb = NULL;
    apr_status_t rv;
    apr_pool_create(&sbpool, b->p);
    rv = b->container
        ? b->def->provider->attach(sbpool, b->def, b->container, b->handle,
                                   b->idle_seconds, &sb, err)
        : b->def->provider->start(sbpool, b->def, b->tag, &sb, err);
    if (rv != APR_SUCCESS) {
        /* The message lives in the pool about to go. */
        *err = *err ? apr_pstrdup(b->p, *err) : NULL;
        apr_pool_destroy(sbpool);
        return rv;
    }
    set_sandbox(b, sb, sbpool);
    if (b->listener)
        b->listener(b->baton, CI_BOX_STARTED, sb, NULL);
    return APR_SUCCESS;
}

/* Make B's sandbox ready for a run: APR_SUCCESS, APR_ECONNABORTED when
 * interrupted, or the start's status with *ERR. */
static apr_status_t ready_for_run(ci_box *b, const char **err)
{
    apr_status_t rv;
    *err = NULL;
    if (apr_atomic_read32(&b->interrupted))
        return APR_ECONNABORTED;
    if (b->sb && b->failed)
        ci_box_destroy(b, "restarted after a failed execution");
    b->failed = 0;
    if (!b->sb && (rv = start(b, err)) != APR_SUCCESS)
        return rv;
    if (apr_atomic_read32(&b->interrupted))   /* while it started */
        return APR_ECONNABORTED;
    return APR_SUCCESS;
}

/* After the provider ran something in B's sandbox (RV, RES). */
static apr_status_t after_run(ci_box *b, apr_status_t rv, const ci_exec_result *res)
{
    /* A container's sandbox is recovered by its provider, not replaced. */
    if (rv == APR_SUCCESS && ci_exec_failed(res) && !b->container)
        b->failed = 1;
    if (rv == APR_SUCCESS && b->container && b->def->provider->keep_alive) {
        const char *why = NULL;
        if (b->def->provider->keep_alive(b->sb, b->idle_seconds, &why) != APR_SUCCESS)
            ci_log(CI_LOG_WARNING, "CI0313: container %s could not be kept alive: %s",
                   b->container, why ? why : "unknown reason");
    }
    return rv;
}

apr_status_t ci_box_run(ci_box *b, apr_pool_t *p, const char *code,
                        ci_exec_result *res, const char **err)
{
    apr_status_t rv = ready_for_run(b, err);
    if (rv != APR_SUCCESS)
        return rv;
    return after_run(b, b->def->provider->run(b->sb, p, code, res), res);
}

apr_status_t ci_box_run_commands(ci_box *b, apr_pool_t *p, const ci_shell_action *action,
                                 ci_exec_result *res, const char **err)
{
    apr_status_t rv;
    if (!b->def->provider->run_commands) {
        *err = "the sandbox's provider has no shell";
        return APR_ENOTIMPL;
    }
    if ((rv = ready_for_run(b, err)) != APR_SUCCESS)
        return rv;
    return after_run(b, b->def->provider->run_commands(b->sb, p, action, res), res);
}

void ci_box_interrupt(ci_box *b)
{
    apr_atomic_set32(&b->interrupted, 1);
    apr_thread_mutex_lock(b->lock);
    if (b->sb)
        b->def->provider->interrupt(b->sb);
    apr_thread_mutex_unlock(b->lock);
}

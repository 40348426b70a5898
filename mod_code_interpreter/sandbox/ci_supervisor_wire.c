/*
 * ci_supervisor_wire.c - frames and payloads of the supervisor protocol
 * (ci_supervisor_wire.h). No httpd headers, no I/O: the callers move the bytes.
 */
#include <string.h>
#include <apr_strings.h>
#include <apr_tables.h>
#include "ci_policy.h"
#include "ci_config.h"
#include "ci_json.h"
#include "ci_request.h"
#include "ci_sandbox.h"
#include "ci_supervisor_wire.h"
#include "local_conf.h"

void ci_sup_header(unsigned char h[CI_SUP_HEADER], int type, apr_uint32_t id,
                   apr_size_t len)
{
    apr_uint32_t n = (apr_uint32_t)(len + 5);
    h[0] = (unsigned char)(n >> 24);
    h[1] = (unsigned char)(n >> 16);
    h[2] = (unsigned char)(n >> 8);
    h[3] = (unsigned char)n;
    h[4] = (unsigned char)type;
    h[5] = (unsigned char)(id >> 24);
    h[6] = (unsigned char)(id >> 16);
    h[7] = (unsigned char)(id >> 8);
    h[8] = (unsigned char)id;
}

char *ci_sup_encode(apr_pool_t *p, int type, apr_uint32_t id, const char *data,
                    apr_size_t len, apr_size_t *outlen)
{
    char *buf = apr_palloc(p, CI_SUP_HEADER + len);
    ci_sup_header((unsigned char *)buf, type, id, len);
    if (len)
        memcpy(buf + CI_SUP_HEADER, data, len);
    *outlen = CI_SUP_HEADER + len;
    return buf;
}

/* ---- the reader ----------------------------------------------------------
 * Bytes accumulate in one malloc'ed buffer (frames can be large and the
 * reader lives as long as its connection: a pool would only grow); a frame
 * handed out is copied to a second one, NUL-terminated. Both are freed by a
 * cleanup of the pool the reader was made from. */
struct ci_sup_reader {
    char *buf, *frame;
    apr_size_t used, start, cap, frame_cap;
    int broken;
};

static apr_status_t reader_free(void *data)
{
    ci_sup_reader *r = data;
    free(r->buf);
    free(r->frame);
    r->buf = r->frame = NULL;
    return APR_SUCCESS;
}

ci_sup_reader *ci_sup_reader_create(apr_pool_t *p)
{
    ci_sup_reader *r = apr_pcalloc(p, sizeof(*r));
    apr_pool_cleanup_register(p, r, reader_free, apr_pool_cleanup_null);
    return r;
}

static apr_uint32_t be32(const char *b)
{
    const unsigned char *u = (const unsigned char *)b;
    return ((apr_uint32_t)u[0] << 24) | ((apr_uint32_t)u[1] << 16) |
           ((apr_uint32_t)u[2] << 8) | u[3];
}

static int grow(char **buf, apr_size_t *cap, apr_size_t want)
{
    char *nb;
    if (want <= *cap)
        return 0;
    want = want < 4096 ? 4096 : want + want / 2;
    if (!(nb = realloc(*buf, want)))
        return -1;
    *buf = nb;
    *cap = want;
    return 0;
}

/* The length field at the front, when it is there: -1 when out of range. */
static int check_length(ci_sup_reader *r)
{
    apr_uint32_t n;
    if (r->used - r->start < 4)
        return 0;
    n = be32(r->buf + r->start);
    return (n < 5 || n > CI_SUP_MAX_FRAME) ? -1 : 0;
}

int ci_sup_reader_feed(ci_sup_reader *r, const char *data, apr_size_t len)
{
    if (r->broken)
        return -1;
    if (r->start) {                   /* drop what was consumed */
        memmove(r->buf, r->buf + r->start, r->used - r->start);
        r->used -= r->start;
        r->start = 0;
    }
    if (check_length(r) < 0 || r->used + len > CI_SUP_MAX_FRAME + 2 * CI_SUP_HEADER +
                                              (apr_size_t)1024 * 1024 ||
        grow(&r->buf, &r->cap, r->used + len) < 0)
        return r->broken = -1;
    memcpy(r->buf + r->used, data, len);
    r->used += len;
    return check_length(r) < 0 ? (r->broken = -1) : 0;
}

int ci_sup_reader_next(ci_sup_reader *r, ci_sup_frame *out)
{
    const char *f = r->buf + r->start;
    apr_uint32_t n;
    if (!r->broken && check_length(r) < 0)
        r->broken = -1;
    if (r->broken || r->used - r->start < 4)
        return 0;
    n = be32(f);
    if (r->used - r->start < 4 + (apr_size_t)n)
        return 0;
    if (grow(&r->frame, &r->frame_cap, n - 5 + 1) < 0) {
        r->broken = -1;
        return 0;
    }
    memcpy(r->frame, f + CI_SUP_HEADER, n - 5);
    r->frame[n - 5] = '\0';
    out->type = (unsigned char)f[4];
    out->id = be32(f + 5);
    out->data = r->frame;
    out->len = n - 5;
    r->start += 4 + n;
    if (r->start == r->used)
        r->start = r->used = 0;
    return 1;
}

int ci_sup_reader_broken(const ci_sup_reader *r)
{
    return r->broken != 0;
}

/* ---- payloads ------------------------------------------------------------ */

const char *ci_sup_hello(apr_pool_t *p, apr_size_t *len)
{
    const char *s = apr_psprintf(p, "{\"version\":%d}", CI_SUP_VERSION);
    *len = strlen(s);
    return s;
}

static json_object *parse_payload(apr_pool_t *p, const ci_sup_frame *f,
                                  const char **err)
{
    return ci_json_parse(p, f->data, f->len, err);
}

int ci_sup_hello_version(const ci_sup_frame *f)
{
    apr_pool_t *p;
    json_object *o, *v;
    const char *err;
    int version = -1;
    if (apr_pool_create(&p, NULL) != APR_SUCCESS)
        return -1;
    if ((o = parse_payload(p, f, &err)) &&
        (v = ci_json_get(o, "version", json_type_int)))
        version = json_object_get_int(v);
    apr_pool_destroy(p);
    return version;
}

static void add_int(json_object *o, const char *key, apr_int64_t v)
{
    json_object_object_add(o, key, json_object_new_int64(v));
}

static json_object *def_object(const ci_sandbox_def *d)
{
    json_object *o = json_object_new_object();
    /* (only local tools reach the supervisor) */
    json_object_object_add(o, "name", json_object_new_string(d->name));
    json_object_object_add(o, "provider", json_object_new_string(d->provider->name));
    add_int(o, "timeout_us", d->timeout);
    add_int(o, "max_output", (apr_int64_t)d->max_output);
    const ci_local_conf *c = CI_LOCAL(d);
    json_object_object_add(o, "python", json_object_new_string(c->python ? c->python : ""));
    add_int(o, "memory", (apr_int64_t)c->memory);
    add_int(o, "processes", c->processes);
    add_int(o, "disk", (apr_int64_t)c->disk);
    add_int(o, "rss_bound", (apr_int64_t)d->rss_bound);
    json_object_object_add(o, "preload",
                           json_object_new_string(c->preload ? c->preload : ""));
    if (d->allowlist) {
        json_object_object_add(o, "allowlist", json_object_new_string(d->allowlist));
        if (d->egress_proxy)
            json_object_object_add(o, "egress_proxy",
                                   json_object_new_string(d->egress_proxy));
        if (d->egress_ca)
            json_object_object_add(o, "egress_ca", json_object_new_string(d->egress_ca));
        if (d->secrets)
            json_object_object_add(o, "secrets", json_tokener_parse(d->secrets));
    }
    if (d->skills)
        json_object_object_add(o, "skills", json_tokener_parse(d->skills));
    return o;
}

/* One secret of a definition: every field as the child made it. */
static int secret_ok(apr_pool_t *p, json_object *s)
{
    const char *domain = ci_json_str(s, "domain"), *name = ci_json_str(s, "name");
    const char *ph = ci_json_str(s, "placeholder"), *norm;
    json_object *v = ci_json_get(s, "value", json_type_string);
    return domain && name && ph && v && !ci_parse_domain_pattern(p, domain, &norm) &&
           !strcmp(norm, domain) && ci_secret_name_ok(name) && strlen(ph) == 42 &&
           !strncmp(ph, "CI_SECRET_", 10) && strspn(ph + 10, "0123456789abcdef") == 32 &&
           ci_secret_value_ok(json_object_get_string(v),
                              (apr_size_t)json_object_get_string_len(v));
}

/* The secrets of a definition, checked: NULL, or why not. */
static const char *secrets_parse(apr_pool_t *p, json_object *o, ci_sandbox_def *d)
{
    json_object *list;
    apr_size_t i, n;
    if (!json_object_object_get_ex(o, "secrets", &list) || !list)
        return NULL;
    n = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    if (n < 1 || n > CI_MAX_SECRETS)
        return "the secrets are not valid";
    for (i = 0; i < n; i++)
        if (!secret_ok(p, json_object_array_get_idx(list, i)))
            return "the secrets are not valid";
    d->secrets = ci_json_pstr(p, list, NULL);
    return NULL;
}

/* A container's allowlist and the site's proxy, as def_object wrote them:
 * each domain checked again here. NULL, or why not. */
static const char *allowlist_parse(apr_pool_t *p, json_object *o, ci_sandbox_def *d)
{
    const char *list = ci_json_str(o, "allowlist"), *proxy = ci_json_str(o, "egress_proxy");
    const char *ca = ci_json_str(o, "egress_ca");
    const char *norm;
    apr_array_header_t *domains;
    int i;
    if (!list)
        return NULL;
    domains = ci_domains_split(p, list);
    for (i = 0; i < domains->nelts; i++) {
        const char *entry = APR_ARRAY_IDX(domains, i, const char *);
        if (ci_parse_domain_pattern(p, entry, &norm) || strcmp(norm, entry))
            return "the allowlist is not valid";
    }
    if (proxy && ci_parse_proxy_url(p, proxy))
        return "the egress proxy is not valid";
    if (ca && ca[0] != '/')
        return "the egress CA is not valid";
    d->allowlist = *list ? apr_pstrdup(p, list) : NULL;
    d->egress_proxy = proxy ? apr_pstrdup(p, proxy) : NULL;
    d->egress_ca = ca ? apr_pstrdup(p, ca) : NULL;
    return d->allowlist ? secrets_parse(p, o, d) : NULL;
}

/* A skill's folder name in a container: a name, '-', 32 hex digits. */
static int mount_ok(const char *m)
{
    apr_size_t n = m ? strlen(m) : 0;
    return n > 33 && n <= 64 + 33 && m[n - 33] == '-' &&
           strspn(m + n - 32, "0123456789abcdef") == 32 &&
           strspn(m, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

/* A path of the skill store's, as the child made it: absolute, ending in
 * "/" two hex digits "/" the digest SUFFIX ("" for the tree, ".zip"), no
 * "." or ".." segment. */
static int store_path_ok(const char *path, const char *suffix)
{
    apr_size_t n = path ? strlen(path) : 0, s = strlen(suffix);
    const char *tail;
    if (!path || path[0] != '/' || n < s + 64 + 4 || strstr(path, "/./") ||
        strstr(path, "/../") || strcmp(path + n - s, suffix))
        return 0;
    tail = path + n - s - 64 - 4;        /* "/" 2 hex "/" 64 hex */
    return tail[0] == '/' && tail[3] == '/' && !strncmp(tail + 1, tail + 4, 2) &&
           strspn(tail + 4, "0123456789abcdef") >= 64;
}

/* The skills of a definition, checked: NULL, or why not. */
static const char *skills_parse(apr_pool_t *p, json_object *o, ci_sandbox_def *d)
{
    json_object *list;
    apr_size_t i, j, n;
    if (!json_object_object_get_ex(o, "skills", &list) || !list)
        return NULL;
    n = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
    if (n < 1 || n > CI_MAX_SKILLS)
        return "the skills are not valid";
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(list, i);
        const char *mount = ci_json_str(s, "mount");
        if (!mount_ok(mount) || !store_path_ok(ci_json_str(s, "tree"), "") ||
            !store_path_ok(ci_json_str(s, "zip"), ".zip"))
            return "the skills are not valid";
        for (j = 0; j < i; j++)
            if (!strcmp(mount, ci_json_str(json_object_array_get_idx(list, j), "mount")))
                return "the skills are not valid";
    }
    d->skills = ci_json_pstr(p, list, NULL);
    return NULL;
}

const char *ci_sup_def_encode(apr_pool_t *p, const ci_sandbox_def *d)
{
    return ci_json_pstr(p, ci_json_own(p, def_object(d)), NULL);
}

/* The integer member KEY of O, at least 0: -1 when missing or negative. */
static apr_int64_t get_int(json_object *o, const char *key)
{
    json_object *v = ci_json_get(o, key, json_type_int);
    apr_int64_t n = v ? json_object_get_int64(v) : -1;
    return n < 0 ? -1 : n;
}

static const char *def_parse(apr_pool_t *p, json_object *o, ci_sandbox_def **out)
{
    const char *name = o ? ci_json_str(o, "name") : NULL;
    const char *prov = o ? ci_json_str(o, "provider") : NULL;
    const char *python = o ? ci_json_str(o, "python") : NULL;
    const char *preload = o ? ci_json_str(o, "preload") : NULL;
    /* the supervisor runs local sandboxes only, whatever a peer names */
    const ci_provider *provider = prov && !strcmp(prov, ci_provider_local.name)
                                  ? &ci_provider_local : NULL;
    apr_int64_t timeout = o ? get_int(o, "timeout_us") : -1;
    apr_int64_t max_output = o ? get_int(o, "max_output") : -1;
    apr_int64_t memory = o ? get_int(o, "memory") : -1;
    apr_int64_t processes = o ? get_int(o, "processes") : -1;
    apr_int64_t disk = o ? get_int(o, "disk") : -1;
    apr_int64_t rss_bound = o ? get_int(o, "rss_bound") : -1;
    ci_sandbox_def *d;
    ci_local_conf *c;

    if (!name || !provider || !python || python[0] != '/' || !preload ||
        timeout <= 0 || max_output < 0 || memory < 0 || processes < 0 ||
        processes > 1 << 20 || disk < 0 || rss_bound < 0)
        return "the sandbox definition is incomplete";
    d = ci_sandbox_def_defaults(p, name, provider);
    d->timeout = timeout;
    d->max_output = (apr_size_t)max_output;
    c = CI_LOCAL(d);
    c->python = apr_pstrdup(p, python);
    c->memory = (apr_uint64_t)memory;
    c->processes = (int)processes;
    c->disk = (apr_uint64_t)disk;
    d->rss_bound = (apr_uint64_t)rss_bound;
    c->preload = preload[0] ? apr_pstrdup(p, preload) : NULL;
    *out = d;
    return skills_parse(p, o, d) ? "the skills are not valid" : allowlist_parse(p, o, d);
}

const char *ci_sup_create_encode(apr_pool_t *p, const ci_sandbox_def *d,
                                 const char *tag, apr_size_t *len)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    json_object_object_add(o, "tag", json_object_new_string(tag ? tag : ""));
    json_object_object_add(o, "def", def_object(d));
    return ci_json_pstr(p, o, len);
}

const char *ci_sup_create_decode(apr_pool_t *p, const ci_sup_frame *f,
                                 ci_sandbox_def **def, const char **tag,
                                 const char **deftext)
{
    const char *err = NULL;
    json_object *o = parse_payload(p, f, &err), *d;
    if (!o)
        return err;
    *tag = ci_json_str(o, "tag");
    d = ci_json_get(o, "def", json_type_object);
    if (!*tag)
        return "the tag is missing";
    *tag = apr_pstrdup(p, *tag);
    if ((err = def_parse(p, d, def)))
        return err;
    /* Canonical: re-encoded from what was understood. */
    *deftext = ci_sup_def_encode(p, *def);
    return NULL;
}

const char *ci_sup_warm_encode(apr_pool_t *p, const ci_sandbox_def *const *defs,
                               int n, apr_size_t *len)
{
    json_object *a = ci_json_own(p, json_object_new_array());
    int i;
    for (i = 0; i < n; i++) {
        json_object *w = json_object_new_object();
        json_object_object_add(w, "def", def_object(defs[i]));
        json_object_object_add(w, "count", json_object_new_int(defs[i]->warm));
        json_object_array_add(a, w);
    }
    return ci_json_pstr(p, a, len);
}

apr_array_header_t *ci_sup_warm_decode(apr_pool_t *p, const ci_sup_frame *f,
                                       const char **err)
{
    json_object *a = parse_payload(p, f, err);
    apr_array_header_t *out;
    size_t i, n;
    if (!a)
        return NULL;
    if (!json_object_is_type(a, json_type_array)) {
        *err = "a list was expected";
        return NULL;
    }
    n = json_object_array_length(a);
    out = apr_array_make(p, (int)n + 1, sizeof(ci_sup_want));
    for (i = 0; i < n; i++) {
        json_object *w = json_object_array_get_idx(a, i);
        ci_sup_want *want = apr_array_push(out);
        apr_int64_t count = get_int(w, "count");
        if ((*err = def_parse(p, ci_json_get(w, "def", json_type_object), &want->def)))
            return NULL;
        if (count < 0 || count > 4096) {
            *err = "the count is out of range";
            return NULL;
        }
        want->count = (int)count;
        want->def->warm = (int)count;
        want->deftext = ci_sup_def_encode(p, want->def);
    }
    return out;
}

/* ---- SHELL ---------------------------------------------------------------- */

#define SHELL_MAX_TIMEOUT_MS ((apr_int64_t)CI_MAX_SECONDS * 1000)

static apr_int64_t clamp(apr_int64_t v, apr_int64_t lo, apr_int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The action's object: COMMANDS (a json array), the bounds as given. */
static json_object *shell_object(json_object *commands, apr_int64_t timeout_ms,
                                 apr_int64_t max_output)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "commands", commands);
    add_int(o, "timeout_ms", timeout_ms);
    add_int(o, "max_output", max_output);
    return o;
}

const char *ci_sup_shell_encode(apr_pool_t *p, const ci_shell_action *a, apr_size_t *len)
{
    json_object *commands = json_object_new_array();
    apr_int64_t ms = ((apr_int64_t)a->timeout + 999) / 1000;
    int i;
    for (i = 0; a->commands && i < a->commands->nelts; i++)
        json_object_array_add(commands, json_object_new_string(
                                  APR_ARRAY_IDX(a->commands, i, const char *)));
    return ci_json_pstr(p, ci_json_own(p, shell_object(
                            commands, clamp(ms, 1, SHELL_MAX_TIMEOUT_MS),
                            clamp((apr_int64_t)a->max_output, 0,
                                  (apr_int64_t)CI_HARD_OUTPUT_CAP))), len);
}

/* The commands of O, copied: a new array, or NULL when they are not 1 to
 * CI_SUP_MAX_COMMANDS strings. */
static json_object *shell_commands(json_object *o)
{
    json_object *in = ci_json_get(o, "commands", json_type_array), *out;
    size_t i, n = in ? json_object_array_length(in) : 0;
    if (n < 1 || n > CI_SUP_MAX_COMMANDS)
        return NULL;
    out = json_object_new_array();
    for (i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(in, i);
        if (!json_object_is_type(c, json_type_string)) {
            json_object_put(out);
            return NULL;
        }
        json_object_array_add(out, json_object_new_string_len(
                                  json_object_get_string(c), json_object_get_string_len(c)));
    }
    return out;
}

const char *ci_sup_shell_decode(apr_pool_t *p, const ci_sup_frame *f, const char **line,
                                apr_size_t *len)
{
    const char *err = NULL;
    json_object *o = parse_payload(p, f, &err), *commands, *req;
    apr_int64_t timeout_ms, max_output;
    if (!o)
        return err;
    if (!json_object_is_type(o, json_type_object))
        return "a shell call must be an object";
    timeout_ms = get_int(o, "timeout_ms");
    max_output = get_int(o, "max_output");
    if (timeout_ms < 1 || timeout_ms > SHELL_MAX_TIMEOUT_MS)
        return "a shell call's timeout_ms is out of range";
    if (max_output < 0 || max_output > (apr_int64_t)CI_HARD_OUTPUT_CAP)
        return "a shell call's max_output is out of range";
    if (!(commands = shell_commands(o)))
        return "a shell call's commands must be 1 to 1000 strings";
    req = ci_json_own(p, json_object_new_object());
    json_object_object_add(req, "shell", shell_object(commands, timeout_ms, max_output));
    *line = ci_json_pstr(p, req, len);
    return NULL;
}

/*
 * ci_reap_creds.c - the credentials remote sandboxes are deleted with. The
 * parent keeps every credential its providers need to delete a sandbox (the
 * provider's reap_cred: for E2B, api_base and key) in its private retained
 * memory, keyed by a digest; children inherit a copy when forked. A slot, a
 * container's record and the tool table hold only the digest. Credentials a
 * reload no longer uses are retired: kept as long as something made with
 * them may live, then forgotten. What may live: a sandbox a child of a
 * generation that used them may still make (a request accepted before the
 * reload finishes with the configuration it began with, and may create its
 * sandbox with the retired key up to its deadline), a container whose
 * record names them (the children write, in the registry, until when each
 * one they use or hold may live: ci_registry_cred_needed), and a registry
 * slot holding a remote sandbox made with them.
 */
#include <stdlib.h>
#include <string.h>
#include <apr_atomic.h>
#include <apr_strings.h>
#include <ap_mpm.h>
#include <mpm_common.h>
#include <scoreboard.h>
#include "ci_settings.h"
#include "ci_registry_internal.h"

typedef struct cred_store {
    cred *list;
} cred_store;

static cred_store *creds;

void ci_reg_digest_of(const char *provider, const ci_reap_cred *c, char *out)
{
    apr_sha1_ctx_t ctx;
    unsigned char d[APR_SHA1_DIGESTSIZE];
    int i;
    apr_sha1_init(&ctx);
    apr_sha1_update(&ctx, provider, (unsigned int)strlen(provider));
    apr_sha1_update(&ctx, "\n", 1);
    apr_sha1_update(&ctx, c->locator, (unsigned int)strlen(c->locator));
    apr_sha1_update(&ctx, "\n", 1);
    apr_sha1_update(&ctx, c->secret, (unsigned int)strlen(c->secret));
    apr_sha1_final(d, &ctx);
    for (i = 0; i < APR_SHA1_DIGESTSIZE; i++)
        apr_snprintf(out + 2 * i, 3, "%02x", d[i]);
}

cred *ci_reg_cred_find(const char *digest)
{
    cred *c;
    for (c = creds ? creds->list : NULL; c; c = c->next)
        if (!strcmp(c->digest, digest))
            return c;
    return NULL;
}

static int longest_idle_of(const ci_sandbox_def *def)
{
    return def->max_idle > def->idle ? def->max_idle : def->idle;
}

static void keep_credential(const ci_sandbox_def *def, apr_uint32_t gen)
{
    char digest[sizeof(((cred *)0)->digest)];
    ci_reap_cred rc;
    cred *c;
    if (!def->provider->reap_cred || !def->provider->reap_cred(def, &rc))
        return;
    ci_reg_digest_of(def->provider->name, &rc, digest);
    if (!(c = ci_reg_cred_find(digest)) && (c = calloc(1, sizeof(*c)))) {
        memcpy(c->digest, digest, sizeof(digest));
        apr_cpystrn(c->provider, def->provider->name, sizeof(c->provider));
        c->c.locator = strdup(rc.locator);
        c->c.secret = strdup(rc.secret);
        c->next = creds->list;
        creds->list = c;
    }
    if (!c)
        return;
    if (c->generation != gen)
        c->longest_idle = 0;
    c->generation = gen;
    c->keep_until = 0;
    if (longest_idle_of(def) > c->longest_idle)
        c->longest_idle = longest_idle_of(def);
}

/* Credentials this configuration no longer uses: kept as long as a
 * container made with them may live on unused (its tool's longest idle
 * expiry, and the claims' slack), so that its remote sandbox is deleted
 * with them whatever the configuration became. */
#define RETIRED_SLACK apr_time_from_sec(300)

static void retire_credentials(apr_uint32_t gen)
{
    cred *c;
    for (c = creds->list; c; c = c->next)
        if (c->generation != gen && !c->keep_until)
            c->keep_until = apr_time_now() + apr_time_from_sec(c->longest_idle) +
                            RETIRED_SLACK;
}

const char *ci_registry_cred_digest(apr_pool_t *p, const ci_sandbox_def *def)
{
    char digest[sizeof(((cred *)0)->digest)];
    ci_reap_cred rc;
    if (!def->provider->reap_cred || !def->provider->reap_cred(def, &rc))
        return NULL;
    ci_reg_digest_of(def->provider->name, &rc, digest);
    return apr_pstrdup(p, digest);
}

int ci_registry_remote_creds(void)
{
    return creds && creds->list;
}

int ci_registry_cred_of(const char *digest, const ci_provider **provider,
                        ci_reap_cred *out)
{
    cred *c = digest ? ci_reg_cred_find(digest) : NULL;
    if (!c || !(*provider = ci_provider_named(c->provider)))
        return 0;
    *out = c->c;
    return 1;
}

/* Parent, post_config: remember this generation's credentials. */
void ci_reg_keep_credentials(apr_pool_t *pconf, server_rec *s, apr_uint32_t gen)
{
    server_rec *v;
    if (!creds && !(creds = ap_retained_data_get("mod_code_interpreter_creds")))
        creds = ap_retained_data_create("mod_code_interpreter_creds", sizeof(*creds));
    for (v = s; v; v = v->next) {
        apr_array_header_t *defs = ci_sandbox_all(pconf, v);
        int i;
        for (i = 0; i < defs->nelts; i++)
            keep_credential(APR_ARRAY_IDX(defs, i, const ci_sandbox_def *), gen);
    }
    retire_credentials(gen);
}

/* ---- what containers still need (children write, the parent reads) ------ */

static void raise_until(reg_cred_need *n, apr_uint32_t until)
{
    for (;;) {
        apr_uint32_t was = apr_atomic_read32(&n->until);
        if (was >= until || apr_atomic_cas32(&n->until, until, was) == was)
            return;
    }
}

/* N is (still) DIGEST's entry: it was not freed and reused meanwhile. */
static int need_is(reg_cred_need *n, const char *digest)
{
    return apr_atomic_read32(&n->state) == NEED_SET && !strcmp(n->digest, digest);
}

void ci_registry_cred_needed(const char *digest, apr_time_t until)
{
    apr_uint32_t sec = (apr_uint32_t)apr_time_sec(until) + 1;
    int i, tries;
    if (!ci_reg || !digest || !*digest)
        return;
    for (tries = 0; tries < 3; tries++) {
        for (i = 0; i < REG_NEEDS; i++) {
            reg_cred_need *n = &ci_reg->needs[i];
            if (!need_is(n, digest))
                continue;
            raise_until(n, sec);
            if (need_is(n, digest))
                return;
        }
        for (i = 0; i < REG_NEEDS; i++) {
            reg_cred_need *n = &ci_reg->needs[i];
            if (apr_atomic_cas32(&n->state, NEED_WRITING, NEED_FREE) != NEED_FREE)
                continue;
            apr_cpystrn(n->digest, digest, sizeof(n->digest));
            apr_atomic_set32(&n->until, sec);
            apr_atomic_set32(&n->state, NEED_SET);
            return;
        }
    }
    /* Every entry in use (as many credentials as REG_NEEDS in use at once):
     * the retired ones are kept for their own time only. */
}

/* Parent: entries whose time (and the claims' slack after it) has passed
 * are free again. */
static void free_past_needs(apr_time_t now)
{
    apr_uint32_t sec = (apr_uint32_t)apr_time_sec(now - RETIRED_SLACK);
    int i;
    for (i = 0; ci_reg && i < REG_NEEDS; i++) {
        reg_cred_need *n = &ci_reg->needs[i];
        if (apr_atomic_read32(&n->until) >= sec ||
            apr_atomic_cas32(&n->state, NEED_WRITING, NEED_SET) != NEED_SET)
            continue;
        /* a child may have raised it before the state changed */
        if (apr_atomic_read32(&n->until) >= sec) {
            apr_atomic_set32(&n->state, NEED_SET);
            continue;
        }
        n->digest[0] = '\0';
        apr_atomic_set32(&n->state, NEED_FREE);
    }
}

/* Containers made with C may live past NOW (plus the claims' slack). */
static int needed_by_containers(const cred *c, apr_time_t now)
{
    apr_uint32_t sec = (apr_uint32_t)apr_time_sec(now - RETIRED_SLACK);
    int i;
    for (i = 0; ci_reg && i < REG_NEEDS; i++)
        if (need_is(&ci_reg->needs[i], c->digest) &&
            apr_atomic_read32(&ci_reg->needs[i].until) >= sec)
            return 1;
    return 0;
}

/* A child of a generation that used C (as current) lives: it may still
 * make a sandbox with it, for a request it accepted before the reload. */
static int needed_by_children(const cred *c)
{
    int i, limit = 0;
    if (!ap_scoreboard_image)
        return 0;
    ap_mpm_query(AP_MPMQ_HARD_LIMIT_DAEMONS, &limit);
    for (i = 0; i < limit; i++) {
        process_score *ps = ap_get_scoreboard_process(i);
        if (ps && ps->pid && (apr_uint32_t)ps->generation <= c->generation)
            return 1;
    }
    return 0;
}

/* A registry slot holds a remote sandbox made with C (a request's own,
 * or one a dead child left for the reaper). */
static int needed_by_slots(const cred *c)
{
    int i;
    for (i = 0; ci_reg && i < REG_SLOTS; i++) {
        reg_slot *sl = &ci_reg->slots[i];
        apr_uint32_t st = apr_atomic_read32(&sl->state);
        if ((st == SLOT_IN_USE || st == SLOT_ORPHANED || st == SLOT_REAPING) &&
            sl->remote_id[0] && !strcmp(sl->cred, c->digest))
            return 1;
    }
    return 0;
}

static int still_needed(const cred *c, apr_time_t now)
{
    return needed_by_containers(c, now) || needed_by_children(c) || needed_by_slots(c);
}

static void cred_free(cred *c)
{
    explicit_bzero((char *)c->c.secret, strlen(c->c.secret));
    free((char *)c->c.secret);
    free((char *)c->c.locator);
    free(c);
}

/* Parent: forget credentials that only generation GEN (or older ones)
 * used, once their containers can no longer be alive (retire_credentials). */
static void forget_retired(ap_generation_t gen)
{
    cred **at = creds ? &creds->list : NULL;
    int current = 0;
    apr_time_t now = apr_time_now();
    ap_mpm_query(AP_MPMQ_GENERATION, &current);
    free_past_needs(now);
    while (at && *at) {
        cred *c = *at;
        if (c->generation <= (apr_uint32_t)gen && c->generation != (apr_uint32_t)current &&
            c->keep_until && c->keep_until <= now && !still_needed(c, now)) {
            *at = c->next;
            cred_free(c);
        }
        else
            at = &c->next;
    }
}

/* Parent: a generation has no children left. */
static void ci_end_generation(server_rec *s, ap_generation_t gen)
{
    forget_retired(gen);
}

/* Parent, about every 10 s: retired credentials whose time is up (children
 * forked later do not need them; older ones keep their own copies). */
static int ci_monitor(apr_pool_t *p, server_rec *s)
{
    int current = 0;
    ap_mpm_query(AP_MPMQ_GENERATION, &current);
    if (current > 0)
        forget_retired((ap_generation_t)(current - 1));
    return DECLINED;
}

void ci_reg_reap_creds_hooks(apr_pool_t *p)
{
    ap_hook_end_generation(ci_end_generation, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_monitor(ci_monitor, NULL, NULL, APR_HOOK_MIDDLE);
}

/* A slot's remote sandbox, with the digest of the credentials it was made
 * with (ci_registry.h). */
void ci_registry_set_remote(int slot, const char *remote_id, const char *provider,
                            const ci_reap_cred *cred)
{
    reg_slot *sl;
    if (!ci_reg || slot < 0 || slot >= REG_SLOTS)
        return;
    sl = &ci_reg->slots[slot];
    apr_cpystrn(sl->remote_id, remote_id ? remote_id : "", sizeof(sl->remote_id));
    ci_reg_digest_of(provider, cred, sl->cred);
}

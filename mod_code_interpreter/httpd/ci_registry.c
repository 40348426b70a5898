/*
 * ci_registry.c - live sandboxes and counters in shared memory. The parent
 * creates the segment once (kept in retained data, so old and new children
 * share it across graceful restarts), writes the tool names, and marks the
 * slots of a child that died as released. Children claim and release slots
 * with compare-and-swap; the live count is a CAS-guarded counter, so the cap
 * holds across processes without a lock.
 */
#include <apr_atomic.h>
#include <apr_sha1.h>
#include <apr_shm.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <unistd.h>
#include <apr_strings.h>
#include <ap_mpm.h>
#include <http_protocol.h>
#include <mod_status.h>
#include <mpm_common.h>
#include "ci_dirconf.h"
#include "ci_json.h"
#include "ci_registry.h"
#include "ci_supervisor_client.h"
#include "ci_sandbox.h"
#include "ci_workers.h"
#include "ci_module.h"

#define REG_MAGIC 0x43495247u
#define REG_LAYOUT 5u
#define REG_SLOTS 4096
#define REG_TOOLS 64

enum { SLOT_FREE = 0, SLOT_CLAIMING = 1, SLOT_IN_USE = 2, SLOT_ORPHANED = 3,
       SLOT_REAPING = 4 };

typedef struct reg_tool {
    char name[64];
    volatile apr_uint32_t live, warm, started, executions, failures, timeouts;
    volatile apr_uint64_t exec_us;
} reg_tool;

typedef struct reg_slot {
    volatile apr_uint32_t state;
    apr_uint32_t tool;
    apr_uint32_t generation;
    pid_t pid;
    apr_time_t created;
    volatile apr_time_t last_used;
    char container[64];
    char remote_id[64];       /* the provider's id of a remote sandbox, or "" */
    apr_uint32_t reap_attempts;  /* failed deletes of it, once orphaned */
    char cred[APR_SHA1_DIGESTSIZE * 2 + 1];   /* digest of api_base + key */
} reg_slot;

/* The sandbox tools of the newest configuration: written by the parent only,
 * two copies and a sequence counter (even: stable), so a reader sees the old
 * table or the new one, never a mix. Digests only, never a credential. */
typedef struct reg_tool_entry {
    char name[64];
    char params[APR_SHA1_DIGESTSIZE * 2 + 1];   /* non-secret parameters */
    char cred[APR_SHA1_DIGESTSIZE * 2 + 1];     /* api_base + key, or "" */
} reg_tool_entry;

typedef struct reg_tool_table {
    apr_uint32_t generation;
    apr_time_t published_at;
    apr_uint32_t n;
    reg_tool_entry e[REG_TOOLS];
} reg_tool_table;

typedef struct registry {
    apr_uint32_t magic, layout;
    volatile apr_uint32_t generation;
    volatile apr_uint32_t live;
    volatile apr_uint32_t warm;     /* of the live ones: ready, not handed out */
    volatile apr_uint32_t orphans;  /* remote sandboxes of dead children */
    apr_uint32_t max_live;
    volatile apr_uint32_t table_seq;
    /* admissions of containers: requests that waited for room, refusals by
     * the limit reached, containers evicted to admit another */
    volatile apr_uint32_t admit_waits, refused_owner, refused_node, refused_budget,
                          evicted;
    reg_tool_table tables[2];
    reg_tool tools[REG_TOOLS];
    reg_slot slots[REG_SLOTS];
} registry;

typedef struct retained {
    apr_shm_t *shm;
    registry *reg;
} retained;

static registry *reg;   /* in every process, after post_config */

static void keep_credentials(apr_pool_t *pconf, server_rec *s, apr_uint32_t gen);
static void digest_of(const char *provider, const ci_reap_cred *cred, char *out);

static reg_tool *tool_named(const char *name)
{
    int i;
    for (i = 0; reg && i < REG_TOOLS && reg->tools[i].name[0]; i++)
        if (!strcmp(reg->tools[i].name, name))
            return &reg->tools[i];
    return NULL;
}

static void publish_tool(const char *name)
{
    int i;
    if (tool_named(name))
        return;
    for (i = 0; i < REG_TOOLS; i++)
        if (!reg->tools[i].name[0]) {
            apr_cpystrn(reg->tools[i].name, name, sizeof(reg->tools[i].name));
            return;
        }
}

static registry *attach(apr_pool_t *pconf, server_rec *s)
{
    retained *keep = ap_retained_data_get("mod_code_interpreter_registry");
    apr_status_t rv;
    if (keep && keep->reg && keep->reg->magic == REG_MAGIC &&
        keep->reg->layout == REG_LAYOUT)
        return keep->reg;
    if (!keep)
        keep = ap_retained_data_create("mod_code_interpreter_registry", sizeof(*keep));
    /* The process pool outlives every generation's pconf. */
    rv = apr_shm_create(&keep->shm, sizeof(registry), NULL, s->process->pool);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "CI0401: the sandbox registry's shared memory could not be created");
        return NULL;
    }
    keep->reg = apr_shm_baseaddr_get(keep->shm);
    memset(keep->reg, 0, sizeof(registry));
    keep->reg->magic = REG_MAGIC;
    keep->reg->layout = REG_LAYOUT;
    return keep->reg;
}

static void params_digest(const ci_sandbox_def *d, char *out)
{
    apr_pool_t *tmp;
    ci_reap_cred text;
    apr_pool_create(&tmp, NULL);
    text.locator = ci_sandbox_def_fingerprint(tmp, d);
    text.secret = "";
    digest_of("", &text, out);
    apr_pool_destroy(tmp);
}

static void table_entry(reg_tool_entry *e, const ci_sandbox_def *d)
{
    ci_reap_cred cred;
    memset(e, 0, sizeof(*e));
    apr_cpystrn(e->name, d->name, sizeof(e->name));
    params_digest(d, e->params);
    if (d->provider->reap_cred && d->provider->reap_cred(d, &cred))
        digest_of(d->provider->name, &cred, e->cred);
}

/* Parent: write the new tool table into the copy readers are not using,
 * then flip the sequence. */
static void publish_table(apr_pool_t *pconf, server_rec *s, apr_uint32_t gen)
{
    apr_uint32_t seq = apr_atomic_read32(&reg->table_seq);
    reg_tool_table *t = &reg->tables[((seq >> 1) + 1) & 1];
    server_rec *v;
    memset(t, 0, sizeof(*t));
    t->generation = gen;
    t->published_at = apr_time_now();
    for (v = s; v; v = v->next) {
        ci_server_conf *vc = ci_server_config(v);
        apr_hash_index_t *hi;
        const ci_sandbox_def *local = apr_hash_get(vc->sandboxes, "local",
                                                   APR_HASH_KEY_STRING);
        if (!local && v == s && t->n < REG_TOOLS)
            table_entry(&t->e[t->n++], ci_sandbox_lookup(s, "local"));
        for (hi = apr_hash_first(pconf, vc->sandboxes); hi; hi = apr_hash_next(hi)) {
            const ci_sandbox_def *d = apr_hash_this_val(hi);
            apr_uint32_t i;
            for (i = 0; i < t->n && strcmp(t->e[i].name, d->name); i++)
                ;
            if (i == t->n && t->n < REG_TOOLS)
                table_entry(&t->e[t->n++], d);
        }
    }
    apr_atomic_set32(&reg->table_seq, seq + 2);
}

/* A consistent copy of the current tool table. */
static void read_table(reg_tool_table *out)
{
    for (;;) {
        apr_uint32_t seq = apr_atomic_read32(&reg->table_seq);
        memcpy(out, &reg->tables[(seq >> 1) & 1], sizeof(*out));
        if (apr_atomic_read32(&reg->table_seq) == seq)
            return;
    }
}

int ci_registry_tool_current(const ci_sandbox_def *def, apr_time_t accepted)
{
    reg_tool_table t;
    reg_tool_entry mine;
    apr_uint32_t i;
    if (!reg || !apr_atomic_read32(&reg->table_seq))
        return 1;
    read_table(&t);
    if (accepted < t.published_at)
        return 1;      /* accepted before the reload: its own configuration */
    table_entry(&mine, def);
    for (i = 0; i < t.n; i++)
        if (!strcmp(t.e[i].name, def->name))
            return !strcmp(t.e[i].params, mine.params) &&
                   !strcmp(t.e[i].cred, mine.cred);
    return 0;
}

int ci_registry_post_config(apr_pool_t *pconf, server_rec *s)
{
    ci_server_conf *c = ci_server_config(s);
    apr_hash_index_t *hi;
    if (!(reg = attach(pconf, s)))
        return HTTP_INTERNAL_SERVER_ERROR;
    server_rec *v;
    int gen = 0;
    ap_mpm_query(AP_MPMQ_GENERATION, &gen);
    apr_atomic_inc32(&reg->generation);
    reg->max_live = (apr_uint32_t)ci_server_max_sandboxes(c);
    publish_tool("local");
    keep_credentials(pconf, s, (apr_uint32_t)gen);
    for (v = s; v; v = v->next) {
        ci_server_conf *vc = ci_server_config(v);
        for (hi = apr_hash_first(pconf, vc->sandboxes); hi; hi = apr_hash_next(hi))
            publish_tool(apr_hash_this_key(hi));
    }
    publish_table(pconf, s, (apr_uint32_t)gen);
    return OK;
}

/* Take one unit of the server-wide budget, or fail at the cap. */
static int take_budget(void)
{
    for (;;) {
        apr_uint32_t live = apr_atomic_read32(&reg->live);
        if (live >= reg->max_live)
            return -1;
        if (apr_atomic_cas32(&reg->live, live + 1, live) == live)
            return 0;
    }
}

int ci_registry_claim(const char *tool, const char *container_id)
{
    reg_tool *t;
    int i;
    if (!reg)
        return REG_SLOTS;   /* no registry: no cap (never happens once started) */
    if (take_budget())
        return -1;
    for (i = 0; i < REG_SLOTS; i++) {
        reg_slot *sl = &reg->slots[i];
        if (apr_atomic_cas32(&sl->state, SLOT_CLAIMING, SLOT_FREE) != SLOT_FREE)
            continue;
        t = tool_named(tool);
        sl->tool = t ? (apr_uint32_t)(t - reg->tools) : 0;
        sl->generation = apr_atomic_read32(&reg->generation);
        sl->pid = getpid();
        sl->created = sl->last_used = apr_time_now();
        apr_cpystrn(sl->container, container_id, sizeof(sl->container));
        sl->remote_id[0] = '\0';
        sl->reap_attempts = 0;
        sl->cred[0] = '\0';
        apr_atomic_set32(&sl->state, SLOT_IN_USE);
        if (t) {
            apr_atomic_inc32(&t->live);
            apr_atomic_inc32(&t->started);
        }
        return i;
    }
    apr_atomic_dec32(&reg->live);
    return -1;
}

static void free_slot(reg_slot *sl)
{
    reg_tool *t = &reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0];
    if (apr_atomic_cas32(&sl->state, SLOT_FREE, SLOT_IN_USE) != SLOT_IN_USE)
        return;
    apr_atomic_dec32(&t->live);
    apr_atomic_dec32(&reg->live);
}

void ci_registry_set_warm(int slot, int warm)
{
    reg_slot *sl;
    reg_tool *t;
    if (!reg || slot < 0 || slot >= REG_SLOTS)
        return;
    sl = &reg->slots[slot];
    t = &reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0];
    if (warm) {
        apr_atomic_inc32(&t->warm);
        apr_atomic_inc32(&reg->warm);
    }
    else {
        apr_atomic_dec32(&t->warm);
        apr_atomic_dec32(&reg->warm);
    }
}

void ci_registry_release(int slot)
{
    if (reg && slot >= 0 && slot < REG_SLOTS)
        free_slot(&reg->slots[slot]);
}

void ci_registry_touch(int slot)
{
    if (reg && slot >= 0 && slot < REG_SLOTS)
        reg->slots[slot].last_used = apr_time_now();
}

void ci_registry_execution(const char *tool, ci_exec_outcome outcome,
                           apr_interval_time_t duration)
{
    reg_tool *t = tool_named(tool);
    if (!t)
        return;
    apr_atomic_inc32(&t->executions);
    if (outcome >= CI_EXEC_TIMED_OUT)
        apr_atomic_inc32(&t->failures);
    if (outcome == CI_EXEC_TIMED_OUT)
        apr_atomic_inc32(&t->timeouts);
    __atomic_add_fetch(&t->exec_us, (apr_uint64_t)duration, __ATOMIC_RELAXED);
}

/* Parent: a child exited; the supervisor destroyed its local sandboxes when
 * their connections closed, so its slots are released. No process is
 * killed here. */
static void ci_child_status(server_rec *s, pid_t pid, ap_generation_t gen,
                            int slot, mpm_child_status state)
{
    int i, freed = 0;
    if (!reg || state != MPM_CHILD_EXITED)
        return;
    for (i = 0; i < REG_SLOTS; i++) {
        reg_slot *sl = &reg->slots[i];
        if (sl->state != SLOT_IN_USE || sl->pid != pid)
            continue;
        if (sl->remote_id[0] &&
            apr_atomic_cas32(&sl->state, SLOT_ORPHANED, SLOT_IN_USE) == SLOT_IN_USE)
            apr_atomic_inc32(&reg->orphans);      /* a live child deletes it */
        else
            free_slot(sl);
        freed++;
    }
    if (freed)
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                     "CI0402: child %ld exited holding %d sandbox slot(s); released",
                     (long)pid, freed);
}

/* ---- remote sandboxes a dead child left -------------------------------- *
 * The parent keeps every credential its providers need to delete a sandbox
 * (the provider's reap_cred: for E2B, api_base and key) in its private
 * retained memory, keyed by a digest; children inherit a copy when forked.
 * A slot records only the digest. When a child dies holding a remote
 * sandbox, the parent marks the slot orphaned (no network I/O in the
 * parent); a live child's reaper thread deletes the sandbox through its
 * provider with the credentials it was created with - after a key rotation
 * too. */

#define REAP_ATTEMPTS 5

typedef struct cred {
    char digest[APR_SHA1_DIGESTSIZE * 2 + 1];
    char provider[32];             /* by name: the module (and its provider
                                      table) is loaded anew at each reload */
    ci_reap_cred c;                /* malloc'd: outlives every pconf */
    apr_uint32_t generation;       /* last generation that configured it */
    int longest_idle;              /* seconds a container of a tool that used
                                      it may stay idle (idle=, max_idle=) */
    apr_time_t keep_until;         /* retired: forgotten after this (0: in use) */
    struct cred *next;
} cred;

typedef struct cred_store {
    cred *list;
} cred_store;

static cred_store *creds;

static void digest_of(const char *provider, const ci_reap_cred *c, char *out)
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

static cred *cred_find(const char *digest)
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
    digest_of(def->provider->name, &rc, digest);
    if (!(c = cred_find(digest)) && (c = calloc(1, sizeof(*c)))) {
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
    digest_of(def->provider->name, &rc, digest);
    return apr_pstrdup(p, digest);
}

int ci_registry_remote_creds(void)
{
    return creds && creds->list;
}

int ci_registry_cred_of(const char *digest, const ci_provider **provider,
                        ci_reap_cred *out)
{
    cred *c = digest ? cred_find(digest) : NULL;
    if (!c || !(*provider = ci_provider_named(c->provider)))
        return 0;
    *out = c->c;
    return 1;
}

/* Parent, post_config: remember this generation's credentials. */
static void keep_credentials(apr_pool_t *pconf, server_rec *s, apr_uint32_t gen)
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
    while (at && *at) {
        cred *c = *at;
        if (c->generation <= (apr_uint32_t)gen && c->generation != (apr_uint32_t)current &&
            c->keep_until && c->keep_until <= now) {
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

void ci_registry_set_remote(int slot, const char *remote_id, const char *provider,
                            const ci_reap_cred *cred)
{
    reg_slot *sl;
    if (!reg || slot < 0 || slot >= REG_SLOTS)
        return;
    sl = &reg->slots[slot];
    apr_cpystrn(sl->remote_id, remote_id ? remote_id : "", sizeof(sl->remote_id));
    digest_of(provider, cred, sl->cred);
}

static struct {
    apr_thread_t *thread;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *wake;
    int stop;
    server_rec *s;
} reaper;

static void slot_reaped(reg_slot *sl)
{
    sl->remote_id[0] = '\0';
    apr_atomic_dec32(&reg->orphans);
    apr_atomic_dec32(&reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0].live);
    apr_atomic_set32(&sl->state, SLOT_FREE);
    apr_atomic_dec32(&reg->live);
}

static void reap_slot(reg_slot *sl)
{
    cred *c = cred_find(sl->cred);
    const ci_provider *prov;
    const char *why = NULL;
    if (!c) {
        /* Made with credentials this child never saw: a newer one will. */
        apr_atomic_set32(&sl->state, SLOT_ORPHANED);
        return;
    }
    if (!(prov = ci_provider_named(c->provider)) || !prov->reap) {
        slot_reaped(sl);              /* nothing here can delete it */
        return;
    }
    if (prov->reap(&c->c, sl->remote_id, &why) == APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, reaper.s,
                     "CI0403: deleted remote sandbox of container %s left by dead "
                     "child %ld", sl->container, (long)sl->pid);
        slot_reaped(sl);
        return;
    }
    if (++sl->reap_attempts < REAP_ATTEMPTS) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, reaper.s,
                     "CI0405: the remote sandbox of container %s left by dead child "
                     "%ld could not be deleted (%s); trying again", sl->container,
                     (long)sl->pid, why);
        apr_atomic_set32(&sl->state, SLOT_ORPHANED);
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, reaper.s,
                 "CI0406: gave up deleting the remote sandbox of container %s left "
                 "by dead child %ld after %d attempts (%s); it ends when its "
                 "lifetime runs out", sl->container, (long)sl->pid, REAP_ATTEMPTS, why);
    slot_reaped(sl);
}

static void reap_orphans(void)
{
    int i;
    if (!apr_atomic_read32(&reg->orphans))
        return;
    for (i = 0; i < REG_SLOTS; i++)
        if (apr_atomic_cas32(&reg->slots[i].state, SLOT_REAPING, SLOT_ORPHANED) ==
            SLOT_ORPHANED)
            reap_slot(&reg->slots[i]);
}

static void *APR_THREAD_FUNC reaper_main(apr_thread_t *thd, void *data)
{
    apr_thread_mutex_lock(reaper.lock);
    while (!reaper.stop) {
        apr_thread_mutex_unlock(reaper.lock);
        reap_orphans();
        apr_thread_mutex_lock(reaper.lock);
        if (!reaper.stop)
            apr_thread_cond_timedwait(reaper.wake, reaper.lock, apr_time_from_sec(2));
    }
    apr_thread_mutex_unlock(reaper.lock);
    return NULL;
}

static apr_status_t reaper_stop(void *data)
{
    apr_status_t ignored;
    if (!reaper.thread)
        return APR_SUCCESS;
    apr_thread_mutex_lock(reaper.lock);
    reaper.stop = 1;
    apr_thread_cond_broadcast(reaper.wake);
    apr_thread_mutex_unlock(reaper.lock);
    apr_thread_join(&ignored, reaper.thread);
    reaper.thread = NULL;
    return APR_SUCCESS;
}

void ci_registry_child_init(apr_pool_t *pchild, server_rec *s)
{
    if (!reg || !creds || !creds->list)
        return;             /* no remote sandboxes configured, ever */
    reaper.s = s;
    reaper.stop = 0;
    if (apr_thread_mutex_create(&reaper.lock, APR_THREAD_MUTEX_DEFAULT, pchild) ||
        apr_thread_cond_create(&reaper.wake, pchild) ||
        apr_thread_create(&reaper.thread, NULL, reaper_main, NULL, pchild)) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "CI0404: the orphaned-sandbox "
                     "reaper could not start in this child");
        return;
    }
    apr_pool_pre_cleanup_register(pchild, NULL, reaper_stop);
}

/* ---- server-status ------------------------------------------------------ */

/* The containers, as the supervisor (which holds their directory) counts
 * them. */
void ci_registry_admission(int waited, ci_dir_status why, int evicted)
{
    if (!reg)
        return;
    if (waited)
        apr_atomic_inc32(&reg->admit_waits);
    if (evicted)
        apr_atomic_inc32(&reg->evicted);
    if (why == CI_DIR_OWNER_FULL)
        apr_atomic_inc32(&reg->refused_owner);
    else if (why == CI_DIR_NODE_FULL)
        apr_atomic_inc32(&reg->refused_node);
    else if (why == CI_DIR_BUDGET_FULL)
        apr_atomic_inc32(&reg->refused_budget);
}

/* Admissions: waits, refusals by limit, evictions (since the registry was
 * made: the server's start). */
static void admission_status(request_rec *r, int flags)
{
    unsigned w = apr_atomic_read32(&reg->admit_waits), o = apr_atomic_read32(&reg->refused_owner),
             n = apr_atomic_read32(&reg->refused_node), b = apr_atomic_read32(&reg->refused_budget),
             e = apr_atomic_read32(&reg->evicted);
    if (flags & AP_STATUS_SHORT)
        ap_rprintf(r, "CodeInterpreterAdmissions: waited=%u refused_owner_cap=%u "
                      "refused_server_cap=%u refused_memory_budget=%u evicted=%u\n",
                   w, o, n, b, e);
    else
        ap_rprintf(r, "<p>Container admissions: %u waited for room; refused at the "
                      "per-caller cap %u, the server's cap %u, the memory budget %u; %u "
                      "idle containers evicted to admit others</p>\n", w, o, n, b, e);
}

static void containers_status(request_rec *r, int flags)
{
    const char *text = NULL, *err = NULL, *perr;
    json_object *st, *cs, *tools;
    int running, executing, sandboxes, expired;
    if (ci_supervisor_status(r->pool, &text, &err) != 0 ||
        !(st = ci_json_parse(r->pool, text, strlen(text), &perr)) ||
        !(cs = ci_json_get(st, "containers", json_type_object))) {
        ap_rprintf(r, flags & AP_STATUS_SHORT ? "CodeInterpreterContainers: unknown\n"
                      : "<p>Containers: unknown (the sandbox supervisor did not "
                        "answer)</p>\n");
        return;
    }
    running = json_object_get_int(ci_json_get(cs, "running", json_type_int));
    executing = json_object_get_int(ci_json_get(cs, "executing", json_type_int));
    sandboxes = json_object_get_int(ci_json_get(cs, "local_sandboxes", json_type_int));
    expired = json_object_get_int(ci_json_get(cs, "expired", json_type_int));
    tools = ci_json_get(cs, "by_tool", json_type_object);
    if (flags & AP_STATUS_SHORT) {
        ap_rprintf(r, "CodeInterpreterContainers: running=%d executing=%d idle=%d "
                      "local_sandboxes=%d expired=%d\n", running, executing,
                   running - executing, sandboxes, expired);
        if (tools) {
            json_object_object_foreach(tools, name, n)
                ap_rprintf(r, "CodeInterpreterContainers-%s: %d\n", name,
                           json_object_get_int(n));
        }
        return;
    }
    ap_rprintf(r, "<p>Containers: %d running (%d executing, %d idle; %d local "
                  "sandboxes), %d expired kept for late references</p>\n<ul>\n",
               running, executing, running - executing, sandboxes, expired);
    if (tools) {
        json_object_object_foreach(tools, tname, tn)
            ap_rprintf(r, "<li>%s: %d</li>\n", ap_escape_html(r->pool, tname),
                       json_object_get_int(tn));
    }
    ap_rputs("</ul>\n", r);
}

static int ci_status(request_rec *r, int flags)
{
    int i;
    if (!reg)
        return OK;
    if (flags & AP_STATUS_SHORT) {
        ap_rprintf(r, "CodeInterpreterLiveSandboxes: %u\n", apr_atomic_read32(&reg->live));
        ap_rprintf(r, "CodeInterpreterWarmSandboxes: %u\n", apr_atomic_read32(&reg->warm));
        ap_rprintf(r, "CodeInterpreterOrphanedSandboxes: %u\n",
                   apr_atomic_read32(&reg->orphans));
        ap_rprintf(r, "CodeInterpreterMaxSandboxes: %u\n", reg->max_live);
        ap_rprintf(r, "CodeInterpreterQueuedInThisChild: %d\n", ci_workers_queued());
    }
    else {
        ap_rputs("<hr /><h2>Code interpreter</h2>\n", r);
        ap_rprintf(r, "<p>Live sandboxes: %u of %u (%u warm); executions queued or "
                      "running in this child: %d</p>\n", apr_atomic_read32(&reg->live),
                   reg->max_live, apr_atomic_read32(&reg->warm), ci_workers_queued());
        ap_rputs("<table border=\"1\"><tr><th>tool</th><th>live</th><th>warm</th>"
                 "<th>started</th>"
                 "<th>executions</th><th>failures</th><th>timeouts</th>"
                 "<th>mean execution ms</th></tr>\n", r);
    }
    for (i = 0; i < REG_TOOLS && reg->tools[i].name[0]; i++) {
        reg_tool *t = &reg->tools[i];
        apr_uint32_t n = apr_atomic_read32(&t->executions);
        double mean = n ? (double)t->exec_us / n / 1000.0 : 0.0;
        if (flags & AP_STATUS_SHORT)
            ap_rprintf(r, "CodeInterpreterTool-%s: live=%u warm=%u started=%u "
                          "executions=%u failures=%u timeouts=%u mean_ms=%.1f\n",
                       t->name, t->live, t->warm, t->started, n, t->failures,
                       t->timeouts, mean);
        else
            ap_rprintf(r, "<tr><td>%s</td><td>%u</td><td>%u</td><td>%u</td><td>%u</td>"
                          "<td>%u</td><td>%u</td><td>%.1f</td></tr>\n",
                       ap_escape_html(r->pool, t->name), t->live, t->warm, t->started,
                       n, t->failures, t->timeouts, mean);
    }
    if (!(flags & AP_STATUS_SHORT))
        ap_rputs("</table>\n", r);
    containers_status(r, flags);
    admission_status(r, flags);
    return OK;
}

void ci_registry_register_hooks(apr_pool_t *p)
{
    ap_hook_child_status(ci_child_status, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_end_generation(ci_end_generation, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_monitor(ci_monitor, NULL, NULL, APR_HOOK_MIDDLE);
    APR_OPTIONAL_HOOK(ap, status_hook, ci_status, NULL, NULL, APR_HOOK_MIDDLE);
}

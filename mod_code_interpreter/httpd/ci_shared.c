/*
 * ci_shared.c - the container directory shared by several nodes
 * (ci_shared.h).
 */
#include <string.h>
#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_proc.h>
#include <httpd.h>
#include <http_log.h>
#include <ap_listen.h>
#include "ci_shared.h"
#include "ci_crypto.h"
#include "ci_directory.h"
#include "ci_dirconf.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_owner.h"
#include "ci_redis.h"
#include "ci_registry.h"
#include "ci_supdir.h"
#include "ci_supervisor.h"
#include "ci_module.h"

/* A local shadow outlives its shared record by this much: the shared
 * directory's claim normally comes first (see ci_supdir's adopt). */
#define SHADOW_GRACE 600
#define CLAIM_EVERY apr_time_from_sec(1)
#define CLAIM_LIMIT 16
#define RECONCILE_EVERY 5         /* claims: the local sandboxes checked */

static const char *node_name = "";

const char *ci_shared_node(void)
{
    return node_name;
}

int ci_shared_elsewhere(request_rec *r, const ci_container *c, ci_error *err)
{
    const ci_sandbox_def *def;
    if (!ci_server_directory(r->server) || !c->node || !strcmp(c->node, node_name))
        return 0;
    def = c->tool ? ci_sandbox_lookup(r->server, c->tool) : NULL;
    if (def && (def->provider->caps & CI_CAP_REMOTE))
        return 0;                 /* a remote sandbox: any node reaches it */
    apr_table_setn(r->err_headers_out, CI_NODE_HEADER, apr_pstrdup(r->pool, c->node));
    ci_error_set(err, 409, CI_INVALID, NULL, "container_on_other_node", r->pool,
                 "Container '%s' runs on node %s of this service, not on this one: send "
                 "the requests that use it there (the %s header names it).", c->id,
                 c->node, CI_NODE_HEADER);
    return 1;
}

/* ---- sandboxes the directory no longer keeps -------------------------------- */

/* The credentials to end container C's remote sandbox with: those it was
 * made with, while this process knows them (ci_registry), else those of its
 * tool as declared now, on the same provider. */
static int reap_cred_for(server_rec *s, const ci_container *c,
                         const ci_provider **prov, ci_reap_cred *cred)
{
    const ci_sandbox_def *def;
    if (ci_registry_cred_of(c->cred, prov, cred))
        return 1;
    def = c->tool ? ci_sandbox_lookup(s, c->tool) : NULL;
    if (!def || (c->provider && strcmp(c->provider, def->provider->name)) ||
        !def->provider->reap_cred)
        return 0;
    *prov = def->provider;
    return def->provider->reap_cred(def, cred);
}

static void destroy_remote(server_rec *s, apr_pool_t *p, const ci_container *c)
{
    const char *handle = ci_unseal_for(p, ci_owner_secret(), c->handle, c->id), *err = NULL;
    const ci_provider *prov = NULL;
    ci_reap_cred cred;
    if (!handle) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "CI0834: the handle of container %s "
                     "could not be opened with this server's secret", c->id);
        return;
    }
    if (!reap_cred_for(s, c, &prov, &cred) || !prov->reap_handle) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0839: no credentials known here can "
                     "end the sandbox of container %s (tool %s): it ends at its "
                     "provider's own timeout", c->id, c->tool ? c->tool : "?");
        return;
    }
    if (prov->reap_handle(&cred, handle, &err) != APR_SUCCESS)
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0813: the sandbox of container "
                     "%s could not be deleted: %s", c->id, err ? err : "unknown reason");
    else
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "CI0840: the sandbox of container %s "
                     "was deleted at its provider", c->id);
}

/* A request OP (with ID when not NULL) for this node's supervisor (its
 * shadows: ci_supdir's adopt, drop, shadows), owned by P. */
static json_object *shadow_request(apr_pool_t *p, const char *op, const char *id)
{
    json_object *req = ci_json_own(p, json_object_new_object());
    json_object_object_add(req, "op", json_object_new_string(op));
    if (id)
        json_object_object_add(req, "id", json_object_new_string(id));
    return req;
}

/* REQ asked of this node's supervisor: its answer with status "ok", or
 * NULL with *ERR. */
static json_object *ask_supervisor(apr_pool_t *p, json_object *req, const char **err)
{
    apr_size_t len;
    const char *text = ci_json_text(req, &len), *answer = NULL, *perr = NULL;
    json_object *ans;
    if (ci_supervisor_dir(p, text, len, &answer, err) != 0)
        return NULL;
    if (!(ans = ci_json_parse(p, answer, strlen(answer), &perr)) ||
        strcmp(ci_json_str(ans, "status") ? ci_json_str(ans, "status") : "", "ok")) {
        *err = apr_psprintf(p, "it answered %s", answer);
        return NULL;
    }
    return ans;
}

/* This node's supervisor drops its shadow, and the local sandbox with it
 * (IF_IDLE: unless a request uses it right now). */
static void drop_local(server_rec *s, apr_pool_t *p, const char *id, int if_idle)
{
    const char *err = NULL;
    json_object *req = shadow_request(p, "drop", id);
    if (if_idle)
        json_object_object_add(req, "if_idle", json_object_new_boolean(1));
    if (!ask_supervisor(p, req, &err) && !strstr(err ? err : "", "not_found"))
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0836: the local sandbox of "
                     "container %s could not be ended: %s", id, err ? err : "");
}

void ci_shared_destroy(server_rec *s, apr_pool_t *p, const ci_container *c)
{
    if (c->handle)
        destroy_remote(s, p, c);
    else if (c->node && !strcmp(c->node, node_name))
        drop_local(s, p, c->id, 0);
    /* else: a local sandbox the supervisor ends itself (one node), or
     * another node's, ended by that node's claim or its shadow's expiry; or
     * a container that never had a sandbox */
}

static int was_gone(json_object *gone, const char *id)
{
    size_t i, n = ci_json_len(gone);
    for (i = 0; i < n; i++)
        if (ci_json_idx_str(gone, i) && !strcmp(ci_json_idx_str(gone, i), id))
            return 1;
    return 0;
}

/* The records ANS carries (container, evicted, containers[]) whose ids its
 * "gone" names: their sandboxes go. */
static void destroy_gone(server_rec *s, apr_pool_t *p, json_object *ans)
{
    json_object *gone = ci_json_get(ans, "gone", json_type_array);
    json_object *many = ci_json_get(ans, "containers", json_type_array);
    json_object *one[2];
    size_t i, n = many ? json_object_array_length(many) : 0;
    ci_container c;
    if (!gone || !json_object_array_length(gone))
        return;
    one[0] = ci_json_get(ans, "container", json_type_object);
    one[1] = ci_json_get(ans, "evicted", json_type_object);
    for (i = 0; i < 2 + n; i++) {
        json_object *j = i < 2 ? one[i] : json_object_array_get_idx(many, i - 2);
        if (j && !ci_supdir_container_from(p, j, &c) && was_gone(gone, c.id))
            ci_shared_destroy(s, p, &c);
    }
}

/* ---- asking ------------------------------------------------------------------ */

/* ---- records Redis keeps: authenticated -----------------------------------
 * Whoever can write to Redis could change a record's owner (handing the
 * container to another caller) or its tool or node. Each record carries an
 * HMAC, under a key derived from the server secret, of what must not
 * change; every container an answer carries is checked with the owner that
 * asked (or, for a claim, its own), and one that does not match is treated
 * as unknown. (A sealed handle is bound to its container's id already.) */

static const char *record_auth(apr_pool_t *p, const char *id, const char *owner,
                               const char *tool, const char *provider, const char *cred,
                               const char *memory_limit, const char *node)
{
    const char *fields[] = { "container-record-1", id, owner, tool, provider, cred,
                             memory_limit ? memory_limit : CI_DEFAULT_TIER, node };
    return ci_record_auth(p, ci_owner_secret(), fields,
                          (int)(sizeof(fields) / sizeof(fields[0])));
}

/* A create: its id minted here (the HMAC covers it) and the record's auth. */
static void authenticate_create(apr_pool_t *p, json_object *req)
{
    const char *id = ci_json_str(req, "id"), *auth;
    if (!id) {
        id = ci_mint_id(p, "cntr_", 24);
        json_object_object_add(req, "id", json_object_new_string(id));
    }
    auth = record_auth(p, id, ci_json_str(req, "owner"), ci_json_str(req, "tool"),
                       ci_json_str(req, "provider"), ci_json_str(req, "cred"),
                       ci_json_str(req, "memory_limit"), node_name);
    if (auth)
        json_object_object_add(req, "auth", json_object_new_string(auth));
}

static int authentic(apr_pool_t *p, json_object *j, const char *owner)
{
    const char *auth = ci_json_str(j, "auth"), *want;
    if (!owner)
        owner = ci_json_str(j, "owner");
    want = owner ? record_auth(p, ci_json_str(j, "id"), owner, ci_json_str(j, "tool"),
                               ci_json_str(j, "provider"), ci_json_str(j, "cred"),
                               ci_json_str(j, "memory_limit"), ci_json_str(j, "node"))
                 : NULL;
    return auth && want && !strcmp(auth, want);
}

static void log_forged(server_rec *s, json_object *j)
{
    const char *id = ci_json_str(j, "id");
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "CI0842: the shared directory's record of "
                 "container %s does not match its authenticator (changed in Redis?): "
                 "treated as unknown", id ? id : "?");
}

/* ANS without the containers that fail the check; a failed "container"
 * makes the answer "not_found", as for a container that does not exist. */
static void check_records(server_rec *s, apr_pool_t *p, json_object *ans,
                          const char *owner)
{
    static const char *const lists[] = { "data", "containers" };
    json_object *c = ci_json_get(ans, "container", json_type_object);
    json_object *e = ci_json_get(ans, "evicted", json_type_object);
    unsigned k;
    if (c && !authentic(p, c, owner)) {
        log_forged(s, c);
        json_object_object_del(ans, "container");
        json_object_object_add(ans, "status", json_object_new_string("not_found"));
    }
    if (e && !authentic(p, e, owner)) {
        log_forged(s, e);
        json_object_object_del(ans, "evicted");
    }
    for (k = 0; k < 2; k++) {
        json_object *list = ci_json_get(ans, lists[k], json_type_array), *kept;
        size_t i, n = list ? json_object_array_length(list) : 0;
        if (!n)
            continue;
        kept = json_object_new_array();
        for (i = 0; i < n; i++) {
            json_object *one = json_object_array_get_idx(list, i);
            if (authentic(p, one, owner))
                json_object_array_add(kept, json_object_get(one));
            else
                log_forged(s, one);
        }
        json_object_object_add(ans, lists[k], kept);
    }
}

/* REQ asked of Redis at NOW: the answer (its records checked), or NULL with
 * *ERR. */
static json_object *ask_redis(server_rec *s, apr_pool_t *p, json_object *req,
                              const char **err)
{
    const ci_redis_conf *rc = ci_server_directory(s);
    const char *text, *answer = NULL, *perr = NULL, *op = ci_json_str(req, "op");
    apr_size_t len;
    json_object *ans;
    json_object_object_add(req, "node", json_object_new_string(node_name));
    if (op && !strcmp(op, "create"))
        authenticate_create(p, req);
    text = ci_json_text(req, &len);
    if (ci_redis_dir(p, rc, text, len, apr_time_now(), &answer, err) != 0)
        return NULL;
    if (!(ans = ci_json_parse(p, answer, strlen(answer), &perr)) ||
        !json_object_is_type(ans, json_type_object)) {
        *err = "a malformed answer";
        return NULL;
    }
    check_records(s, p, ans, ci_json_str(req, "owner"));
    return ans;
}

json_object *ci_shared_ask(request_rec *r, apr_pool_t *p, json_object *req)
{
    const char *err = NULL;
    json_object *ans = ask_redis(r->server, p, req, &err);
    if (!ans) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0831: the shared container "
                      "directory could not be asked: %s", err ? err : "");
        return NULL;
    }
    destroy_gone(r->server, p, ans);
    return ans;
}

int ci_shared_adopt(request_rec *r, const char *owner, const ci_container *c,
                    const ci_sandbox_def *def)
{
    json_object *req;
    const char *err = NULL;
    int idle = c->idle_seconds > 0 ? c->idle_seconds : def->idle;
    if (!ci_server_directory(r->server) || (def->provider->caps & CI_CAP_REMOTE))
        return 0;
    req = shadow_request(r->pool, "adopt", c->id);
    json_object_object_add(req, "owner", json_object_new_string(owner));
    json_object_object_add(req, "tool", json_object_new_string(c->tool ? c->tool
                                                                       : def->name));
    if (c->memory_limit)
        json_object_object_add(req, "memory_limit",
                               json_object_new_string(c->memory_limit));
    json_object_object_add(req, "idle", json_object_new_int(idle + SHADOW_GRACE));
    if (!ask_supervisor(r->pool, req, &err)) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0837: container %s could not be "
                      "taken on by this node's sandbox supervisor: %s", c->id,
                      err ? err : "");
        return -1;
    }
    return 0;
}

void ci_shared_busy(request_rec *r, const char *owner, const char *id, int busy,
                    int lease)
{
    json_object *req;
    if (!ci_server_directory(r->server))
        return;
    req = ci_json_own(r->pool, json_object_new_object());
    json_object_object_add(req, "op", json_object_new_string("busy"));
    json_object_object_add(req, "owner", json_object_new_string(owner));
    json_object_object_add(req, "id", json_object_new_string(id));
    json_object_object_add(req, "busy", json_object_new_boolean(busy));
    json_object_object_add(req, "lease", json_object_new_int(lease));
    ci_shared_ask(r, r->pool, req);
}

/* ---- claiming due containers -------------------------------------------------- */

typedef struct claimer {
    server_rec *s;
    apr_thread_t *thread;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *wake;
    int stop;
    int failing;                 /* Redis failed last time (logged once) */
} claimer;

/* One claim: the due containers this node may end, ended. */
static void claim_once(claimer *cl, apr_pool_t *p)
{
    json_object *req = ci_json_own(p, json_object_new_object()), *ans;
    const char *err = NULL;
    json_object_object_add(req, "op", json_object_new_string("claim_due"));
    json_object_object_add(req, "limit", json_object_new_int(CLAIM_LIMIT));
    if (!(ans = ci_server_directory(cl->s) ? ask_redis(cl->s, p, req, &err)
                                           : ask_supervisor(p, req, &err))) {
        if (!cl->failing)
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, cl->s, "CI0832: due containers "
                         "could not be claimed from the container directory: %s "
                         "(retrying every second)", err ? err : "");
        cl->failing = 1;
        return;
    }
    if (cl->failing)
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, cl->s, "CI0833: the shared container "
                     "directory answers again");
    cl->failing = 0;
    destroy_gone(cl->s, p, ans);
}

/* The local sandboxes this node runs whose containers the shared
 * directory no longer has running (lost with Redis' data, say): ended now
 * rather than at their shadows' own expiry. */
static void reconcile(claimer *cl, apr_pool_t *p)
{
    json_object *req, *ans, *ids, *gone;
    const char *err = NULL;
    apr_size_t i, n;
    if (!(ans = ask_supervisor(p, shadow_request(p, "shadows", NULL), &err)) ||
        !(ids = ci_json_get(ans, "ids", json_type_array)) ||
        !json_object_array_length(ids))
        return;
    req = shadow_request(p, "which_gone", NULL);
    json_object_object_add(req, "ids", json_object_get(ids));
    if (!(ans = ask_redis(cl->s, p, req, &err)) ||
        !(gone = ci_json_get(ans, "gone", json_type_array)))
        return;
    for (i = 0, n = json_object_array_length(gone); i < n; i++) {
        const char *id = ci_json_idx_str(gone, i);
        if (!id)
            continue;
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, cl->s, "CI0838: the local sandbox of "
                     "container %s ends (once no request uses it): the shared directory "
                     "no longer has it running",
                     id);
        drop_local(cl->s, p, id, 1);
    }
}

static void *APR_THREAD_FUNC claim_loop(apr_thread_t *t, void *data)
{
    claimer *cl = data;
    apr_pool_t *p;
    unsigned rounds = 0;
    apr_pool_create(&p, NULL);
    apr_thread_mutex_lock(cl->lock);
    while (!cl->stop) {
        apr_thread_mutex_unlock(cl->lock);
        claim_once(cl, p);
        if (ci_server_directory(cl->s) && !cl->failing && ++rounds % RECONCILE_EVERY == 0)
            reconcile(cl, p);
        apr_pool_clear(p);
        apr_thread_mutex_lock(cl->lock);
        if (!cl->stop)
            apr_thread_cond_timedwait(cl->wake, cl->lock, CLAIM_EVERY);
    }
    apr_thread_mutex_unlock(cl->lock);
    apr_pool_destroy(p);
    ci_redis_close();
    apr_thread_exit(t, APR_SUCCESS);
    return NULL;
}

static apr_status_t claimer_stop(void *data)
{
    claimer *cl = data;
    apr_status_t rv;
    apr_thread_mutex_lock(cl->lock);
    cl->stop = 1;
    apr_thread_cond_signal(cl->wake);
    apr_thread_mutex_unlock(cl->lock);
    apr_thread_join(&rv, cl->thread);
    return APR_SUCCESS;
}

/* "ServerName:port" of the first listener. */
static const char *name_of_node(apr_pool_t *p, server_rec *s)
{
    apr_port_t port = ap_listeners && ap_listeners->bind_addr
                    ? ap_listeners->bind_addr->port : s->port;
    return apr_psprintf(p, "%s:%u", s->server_hostname ? s->server_hostname : "localhost",
                        (unsigned)port);
}

void ci_shared_child_init(apr_pool_t *pchild, server_rec *s)
{
    claimer *cl;
    node_name = name_of_node(pchild, s);
    /* Due containers are claimed from a shared directory; from this node's
     * supervisor, those with a remote sandbox (its clock expires them, a
     * child ends them at their provider), when any credentials for one are
     * known here. */
    if (!ci_server_directory(s) && !ci_registry_remote_creds())
        return;
    cl = apr_pcalloc(pchild, sizeof(*cl));
    cl->s = s;
    if (apr_thread_mutex_create(&cl->lock, APR_THREAD_MUTEX_DEFAULT, pchild) ||
        apr_thread_cond_create(&cl->wake, pchild) ||
        apr_thread_create(&cl->thread, NULL, claim_loop, cl, pchild)) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0830: the thread claiming due "
                     "containers could not start in this child");
        return;
    }
    apr_pool_pre_cleanup_register(pchild, cl, claimer_stop);
}

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
#include "ci_dirconf.h"
#include "ci_json.h"
#include "ci_owner.h"
#include "ci_redis.h"
#include "ci_supdir.h"
#include "ci_supervisor.h"
#include "mod_code_interpreter.h"

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
    if (def && def->provider->handle)
        return 0;                 /* a remote sandbox: any node reaches it */
    apr_table_setn(r->err_headers_out, CI_NODE_HEADER, apr_pstrdup(r->pool, c->node));
    ci_error_set(err, 409, CI_INVALID, NULL, "container_on_other_node", r->pool,
                 "Container '%s' runs on node %s of this service, not on this one: send "
                 "the requests that use it there (the %s header names it).", c->id,
                 c->node, CI_NODE_HEADER);
    return 1;
}

/* ---- sandboxes the directory no longer keeps -------------------------------- */

static void destroy_remote(server_rec *s, apr_pool_t *p, const ci_container *c,
                           const ci_sandbox_def *def)
{
    const char *handle = ci_unseal(p, ci_owner_secret(), c->handle), *err = NULL;
    ci_sandbox *sb = NULL;
    apr_pool_t *sp;
    if (!handle) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "CI0834: the handle of container %s "
                     "could not be opened with this server's secret", c->id);
        return;
    }
    apr_pool_create(&sp, p);
    if (def->provider->attach(sp, def, c->id, handle, 60, &sb, &err) == APR_SUCCESS)
        def->provider->destroy(sb);
    else
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0813: the sandbox of container "
                     "%s could not be reached to delete it: %s", c->id,
                     err ? err : "unknown reason");
    apr_pool_destroy(sp);
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

/* This node's supervisor drops its shadow, and the local sandbox with it. */
static void drop_local(server_rec *s, apr_pool_t *p, const char *id)
{
    const char *err = NULL;
    json_object *req = shadow_request(p, "drop", id);
    if (!ask_supervisor(p, req, &err) && !strstr(err ? err : "", "not_found"))
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0836: the local sandbox of "
                     "container %s could not be ended: %s", id, err ? err : "");
}

void ci_shared_destroy(server_rec *s, apr_pool_t *p, const ci_container *c)
{
    const ci_sandbox_def *def = c->tool ? ci_sandbox_lookup(s, c->tool) : NULL;
    if (def && c->memory_limit)
        ci_sandbox_def_tier(p, def, c->memory_limit, &def);
    if (c->handle && def && def->provider->attach && def->provider->handle)
        destroy_remote(s, p, c, def);
    else if (!c->handle && c->node && !strcmp(c->node, node_name))
        drop_local(s, p, c->id);
    /* else: another node's local sandbox, ended by that node's claim or
     * its shadow's expiry; or a container that never had a sandbox */
}

static int was_gone(json_object *gone, const char *id)
{
    size_t i, n = gone ? json_object_array_length(gone) : 0;
    for (i = 0; i < n; i++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(gone, i)), id))
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

/* REQ asked of Redis at NOW: the answer, or NULL with *ERR. */
static json_object *ask_redis(server_rec *s, apr_pool_t *p, json_object *req,
                              const char **err)
{
    const ci_redis_conf *rc = ci_server_directory(s);
    const char *text, *answer = NULL, *perr = NULL;
    apr_size_t len;
    json_object *ans;
    json_object_object_add(req, "node", json_object_new_string(node_name));
    text = ci_json_text(req, &len);
    if (ci_redis_dir(p, rc, text, len, apr_time_now(), &answer, err) != 0)
        return NULL;
    if (!(ans = ci_json_parse(p, answer, strlen(answer), &perr)))
        *err = "a malformed answer";
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
    if (!ci_server_directory(r->server) || def->provider->handle)
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
    if (!(ans = ask_redis(cl->s, p, req, &err))) {
        if (!cl->failing)
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, cl->s, "CI0832: due containers "
                         "could not be claimed from the shared directory: %s "
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
        const char *id = json_object_get_string(json_object_array_get_idx(gone, i));
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, cl->s, "CI0838: the local sandbox of "
                     "container %s ended: the shared directory no longer has it running",
                     id);
        drop_local(cl->s, p, id);
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
        if (!cl->failing && ++rounds % RECONCILE_EVERY == 0)
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
    if (!ci_server_directory(s))
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

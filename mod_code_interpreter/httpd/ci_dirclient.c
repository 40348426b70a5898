/*
 * ci_dirclient.c - the container directory's client (ci_dirclient.h): the
 * back end of a server, its requests and answers, the sandboxes an answer
 * says must end, and the thread claiming due containers.
 */
#include <string.h>
#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <httpd.h>
#include <http_log.h>
#include <ap_listen.h>
#include "ci_policy.h"
#include "ci_crypto.h"
#include "ci_dirclient.h"
#include "ci_settings.h"
#include "ci_json.h"
#include "ci_owner.h"
#include "ci_request.h"
#include "ci_redis.h"
#include "ci_registry.h"
#include "ci_directory_ops.h"
#include "ci_module.h"

#define CLAIM_EVERY apr_time_from_sec(1)
#define CLAIM_LIMIT 16
#define RECONCILE_EVERY 5         /* claims: the local sandboxes checked */

static const ci_dirclient_backend *backend(server_rec *s)
{
    return ci_server_directory(s) ? &ci_dirclient_redis : &ci_dirclient_supervisor;
}

/* ---- asking ------------------------------------------------------------------ */

json_object *ci_dirclient_request(apr_pool_t *p, const char *op, const char *owner)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    json_object_object_add(o, "op", json_object_new_string(op));
    json_object_object_add(o, "owner", json_object_new_string(owner));
    return o;
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
 * "gone" names. */
static apr_array_header_t *gone_records(apr_pool_t *p, json_object *ans)
{
    json_object *gone = ci_json_get(ans, "gone", json_type_array);
    json_object *many = ci_json_get(ans, "containers", json_type_array);
    json_object *one[2];
    size_t i, n = many ? json_object_array_length(many) : 0;
    apr_array_header_t *out = apr_array_make(p, 1, sizeof(ci_container));
    ci_container c;
    if (!gone || !json_object_array_length(gone))
        return out;
    one[0] = ci_json_get(ans, "container", json_type_object);
    one[1] = ci_json_get(ans, "evicted", json_type_object);
    for (i = 0; i < 2 + n; i++) {
        json_object *j = i < 2 ? one[i] : json_object_array_get_idx(many, i - 2);
        if (j && !ci_dirops_container_from(p, j, &c) && was_gone(gone, c.id))
            *(ci_container *)apr_array_push(out) = c;
    }
    return out;
}

/* ANS, the answer from BE (NULL: logged with ERR), its *GONE set. */
static json_object *answered(server_rec *s, apr_pool_t *p, const ci_dirclient_backend *be,
                             json_object *ans, const char *err, apr_array_header_t **gone)
{
    if (!ans) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "CI0801: the container directory "
                     "(%s) could not be asked: %s", be->name, err ? err : "");
        return NULL;
    }
    if (gone)
        *gone = gone_records(p, ans);
    return ans;
}

json_object *ci_dirclient_ask(server_rec *s, apr_pool_t *p, json_object *req,
                              apr_array_header_t **gone)
{
    const ci_dirclient_backend *be = backend(s);
    const char *err = NULL;
    json_object *ans = be->ask(s, p, req, &err);
    return answered(s, p, be, ans, err, gone);
}

ci_dir_sent *ci_dirclient_send(server_rec *s, apr_pool_t *p, json_object *req)
{
    const ci_dirclient_backend *be = backend(s);
    ci_dir_sent *q = apr_pcalloc(p, sizeof(*q));
    const char *err = NULL;
    q->req = req;
    if (be->send && be->send(p, q, &err) == 0)
        q->sent = 1;
    else
        q->ans = ci_dirclient_ask(s, p, req, &q->gone);
    return q;
}

int ci_dirclient_sends_ahead(server_rec *s)
{
    return backend(s)->send != NULL;
}

json_object *ci_dirclient_receive_and_end(server_rec *s, apr_pool_t *p, ci_dir_sent *q)
{
    const ci_dirclient_backend *be = backend(s);
    const char *err = NULL;
    if (q->sent) {
        q->sent = 0;
        q->ans = answered(s, p, be, be->receive(p, q, &err), err, &q->gone);
    }
    if (q->ans)
        ci_dirclient_end(s, p, q->gone);
    return q->ans;
}

json_object *ci_dirclient_ask_and_end(server_rec *s, apr_pool_t *p, json_object *req)
{
    apr_array_header_t *gone;
    json_object *ans = ci_dirclient_ask(s, p, req, &gone);
    if (ans)
        ci_dirclient_end(s, p, gone);
    return ans;
}

/* Container C was read for a use (every use reads it here): the
 * credentials its remote sandbox is deleted with are needed at least until
 * it can expire, whatever a reload retires meanwhile. */
void ci_dirclient_needs_cred(const ci_container *c, apr_time_t until)
{
    if (c->cred && c->status == CI_CNTR_RUNNING)
        ci_registry_cred_needed(c->cred, until + apr_time_from_sec(c->idle_seconds));
}

int ci_dirclient_container(apr_pool_t *p, json_object *ans, const char *key,
                           ci_container *c)
{
    int rc = ci_dirops_container_from(p, ci_json_get(ans, key, json_type_object), c);
    if (!rc)
        ci_dirclient_needs_cred(c, apr_time_now());
    return rc;
}

int ci_dirclient_status(server_rec *s, apr_pool_t *p, const char **answer,
                        const char **err)
{
    return backend(s)->status(p, answer, err);
}

int ci_dirclient_adopt(request_rec *r, const char *owner, const ci_container *c,
                       const ci_sandbox_def *def)
{
    const ci_dirclient_backend *be = backend(r->server);
    return be->adopt ? be->adopt(r, owner, c, def) : 0;
}

void ci_dirclient_busy(request_rec *r, const char *owner, const char *id, int busy,
                       int lease)
{
    json_object *req;
    if (!backend(r->server)->marks_busy)
        return;
    req = ci_dirclient_request(r->pool, "busy", owner);
    json_object_object_add(req, "id", json_object_new_string(id));
    json_object_object_add(req, "busy", json_object_new_boolean(busy));
    json_object_object_add(req, "lease", json_object_new_int(lease));
    ci_dirclient_ask_and_end(r->server, r->pool, req);
}

int ci_dirclient_elsewhere(request_rec *r, const ci_container *c, ci_error *err)
{
    const ci_sandbox_def *def;
    if (!ci_server_directory(r->server) || !c->node || !strcmp(c->node, ci_dirclient_node()))
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

/* Handles hold a provider's access tokens: the directory keeps them sealed
 * with the server secret (AES-256-GCM, bound to the container's id), opened
 * only in httpd's children. */
void ci_dirclient_record_handle(request_rec *r, apr_pool_t *p, const char *owner,
                                const char *container_id, const char *handle)
{
    json_object *req = ci_dirclient_request(p, "set_handle", owner);
    json_object_object_add(req, "id", json_object_new_string(container_id));
    json_object_object_add(req, "handle", json_object_new_string(
                               ci_seal_for(p, ci_owner_secret(), handle, container_id)));
    ci_dirclient_ask_and_end(r->server, p, req);
}

const char *ci_dirclient_unseal(request_rec *r, const ci_container *c)
{
    const char *sealed = c->handle;
    /* bound to its container: a handle copied into another record opens
     * nothing there */
    const char *plain = sealed ? ci_unseal_for(r->pool, ci_owner_secret(), sealed, c->id)
                               : NULL;
    if (sealed && !plain)
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0804: a container's handle "
                      "could not be opened with this server's secret");
    return plain;
}

const char *ci_dirclient_seal_secrets(apr_pool_t *p, const char *id,
                                      const apr_array_header_t *secrets)
{
    return ci_seal_for(p, ci_owner_secret(), ci_secrets_with_placeholders(p, secrets), id);
}

const char *ci_dirclient_unseal_secrets(request_rec *r, const ci_container *c)
{
    const char *plain = c->secrets ? ci_unseal_for(r->pool, ci_owner_secret(), c->secrets,
                                                   c->id) : NULL;
    if (c->secrets && !plain)
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0809: container %s's domain secrets "
                      "could not be opened with this server's secret: it runs without "
                      "them", c->id);
    return plain;
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

static void end_remote(server_rec *s, apr_pool_t *p, const ci_container *c)
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

/* A remote sandbox is ended at its provider from any node; a local one by
 * this node's supervisor when it runs here. Else: a local sandbox the
 * supervisor ends itself (one node), or another node's, ended by that
 * node's claim or its shadow's expiry; or a container that never had a
 * sandbox. */
static void end_one(server_rec *s, apr_pool_t *p, const ci_container *c)
{
    if (c->handle)
        end_remote(s, p, c);
    else if (c->node && !strcmp(c->node, ci_dirclient_node()))
        ci_dirclient_drop_local(s, p, c->id, 0);
}

void ci_dirclient_end(server_rec *s, apr_pool_t *p, const apr_array_header_t *gone)
{
    int i;
    for (i = 0; gone && i < gone->nelts; i++)
        end_one(s, p, &APR_ARRAY_IDX(gone, i, ci_container));
}

/* ---- claiming due containers -------------------------------------------------- */

typedef struct claimer {
    server_rec *s;
    const ci_dirclient_backend *be;
    apr_thread_t *thread;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *wake;
    int stop;
    int failing;                 /* the directory failed last time (logged once) */
} claimer;

/* One claim: the due containers this node may end, ended. */
static void claim_once(claimer *cl, apr_pool_t *p)
{
    json_object *req = ci_json_own(p, json_object_new_object()), *ans;
    const char *err = NULL;
    json_object_object_add(req, "op", json_object_new_string("claim_due"));
    json_object_object_add(req, "limit", json_object_new_int(CLAIM_LIMIT));
    if (!(ans = cl->be->ask(cl->s, p, req, &err))) {
        if (!cl->failing)
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, cl->s, "CI0832: due containers "
                         "could not be claimed from the container directory (%s): %s "
                         "(retrying every second)", cl->be->name, err ? err : "");
        cl->failing = 1;
        return;
    }
    if (cl->failing)
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, cl->s, "CI0833: the container "
                     "directory (%s) answers again", cl->be->name);
    cl->failing = 0;
    ci_dirclient_end(cl->s, p, gone_records(p, ans));
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
        /* A child of an older configuration (finishing its requests after
         * a reload) claims nothing: a due container is handed out once,
         * and one made with credentials a later configuration brought
         * would be ended here with the wrong ones, or not at all. The
         * newest configuration's children know every credential kept. */
        if (!ci_registry_superseded())
            claim_once(cl, p);
        if (cl->be->reconcile && !cl->failing && ++rounds % RECONCILE_EVERY == 0)
            cl->be->reconcile(cl->s, p);
        apr_pool_clear(p);
        apr_thread_mutex_lock(cl->lock);
        if (!cl->stop)
            apr_thread_cond_timedwait(cl->wake, cl->lock, CLAIM_EVERY);
    }
    apr_thread_mutex_unlock(cl->lock);
    apr_pool_destroy(p);
    ci_redis_close();
    /* Returned, not apr_thread_exit(): under AddressSanitizer, pthread_exit
     * from this frame leaves its stack redzones poisoned, and the thread's
     * own teardown below it then trips on them and kills the child on its
     * way out, with whatever work it still had (a sandbox's delete). */
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

/* Start this child's thread claiming due containers from the back end
 * (stopped and joined when PCHILD is cleared). */
static void ci_dirclient_claim_from(apr_pool_t *pchild, server_rec *s)
{
    claimer *cl = apr_pcalloc(pchild, sizeof(*cl));
    cl->s = s;
    cl->be = backend(s);
    if (apr_thread_mutex_create(&cl->lock, APR_THREAD_MUTEX_DEFAULT, pchild) ||
        apr_thread_cond_create(&cl->wake, pchild) ||
        apr_thread_create(&cl->thread, NULL, claim_loop, cl, pchild)) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0830: the thread claiming due "
                     "containers could not start in this child");
        return;
    }
    apr_pool_pre_cleanup_register(pchild, cl, claimer_stop);
}

void ci_dirclient_child_init(apr_pool_t *pchild, server_rec *s)
{
    ci_dirclient_set_node(pchild, s);
    if (backend(s)->claims(s))
        ci_dirclient_claim_from(pchild, s);
}

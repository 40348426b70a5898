/*
 * ci_dirclient.c - the container directory's client (ci_dirclient.h): the
 * back end of a server, its requests and answers, busy marks, the 409 for
 * another node's container. Stands on ci_dirclient_end.c (the sandboxes an
 * answer says must end) and ci_dirclient_seal.c; the claimer thread
 * (ci_dirclient_claimer.c) stands on it.
 */
#include <string.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include "ci_crypto.h"
#include "ci_dirclient.h"
#include "ci_settings.h"
#include "ci_json.h"
#include "ci_owner.h"
#include "ci_registry.h"
#include "ci_directory_ops.h"
#include "ci_module.h"

const ci_dirclient_backend *ci_dirclient_backend_of(server_rec *s)
{
    return ci_server_directory(s) ? &ci_dirclient_redis : &ci_dirclient_supervisor;
}

int ci_dirclient_shared(server_rec *s)
{
    return ci_dirclient_backend_of(s)->shared;
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
apr_array_header_t *ci_dirclient_gone_of(apr_pool_t *p, json_object *ans)
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
        *gone = ci_dirclient_gone_of(p, ans);
    return ans;
}

json_object *ci_dirclient_ask(server_rec *s, apr_pool_t *p, json_object *req,
                              apr_array_header_t **gone)
{
    const ci_dirclient_backend *be = ci_dirclient_backend_of(s);
    const char *err = NULL;
    json_object *ans = be->ask(s, p, req, &err);
    return answered(s, p, be, ans, err, gone);
}

ci_dir_sent *ci_dirclient_send(server_rec *s, apr_pool_t *p, json_object *req)
{
    const ci_dirclient_backend *be = ci_dirclient_backend_of(s);
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
    return ci_dirclient_backend_of(s)->send != NULL;
}

json_object *ci_dirclient_receive_and_end(server_rec *s, apr_pool_t *p, ci_dir_sent *q)
{
    const ci_dirclient_backend *be = ci_dirclient_backend_of(s);
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
    return ci_dirclient_backend_of(s)->status(p, answer, err);
}

int ci_dirclient_adopt(request_rec *r, const char *owner, const ci_container *c,
                       const ci_sandbox_def *def)
{
    const ci_dirclient_backend *be = ci_dirclient_backend_of(r->server);
    const char *err = NULL;
    if (!be->adopt || be->adopt(r->pool, owner, c, def, &err) == 0)
        return 0;
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0837: container %s could not be taken "
                  "on by this node's sandbox supervisor: %s", c->id, err ? err : "");
    return -1;
}

void ci_dirclient_busy(request_rec *r, const char *owner, const char *id, int busy,
                       int lease)
{
    json_object *req;
    if (!ci_dirclient_backend_of(r->server)->marks_busy)
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
    if (!ci_dirclient_shared(r->server) || !c->node || !strcmp(c->node, ci_dirclient_node()))
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

/* The handle HANDLE of container CONTAINER_ID recorded, sealed
 * (ci_dirclient_seal.c says why). */
void ci_dirclient_record_handle(request_rec *r, apr_pool_t *p, const char *owner,
                                const char *container_id, const char *handle)
{
    json_object *req = ci_dirclient_request(p, "set_handle", owner);
    json_object_object_add(req, "id", json_object_new_string(container_id));
    json_object_object_add(req, "handle", json_object_new_string(
                               ci_seal_for(p, ci_owner_secret(), handle, container_id)));
    ci_dirclient_ask_and_end(r->server, p, req);
}

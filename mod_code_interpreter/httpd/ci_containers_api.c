/*
 * ci_containers_api.c - the Containers API (ci_containers_api.h): a thin
 * handler over the directory's operations (ci_directory_ops.h); every lookup is
 * the caller's own, so another caller's container reads as unknown (404).
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_policy.h"
#include "ci_id.h"
#include "ci_containers_api.h"
#include "ci_containers_api_internal.h"
#include "ci_capi.h"
#include "ci_registry.h"
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_script.h>
#include "ci_cfiles.h"
#include "ci_containers.h"
#include "ci_settings.h"
#include "ci_skill_attach.h"
#include "ci_skills_attach.h"
#include "ci_files_in.h"
#include "ci_json.h"
#include "ci_owner.h"
#include "ci_dirclient.h"
#include "ci_request_state.h"
#include "ci_directory_ops.h"
#include "ci_module.h"

void ci_containers_api_fixups(request_rec *r)
{
    ci_owner_note(r);
}

/* The container object as OpenAI shows it. */
static json_object *resource(apr_pool_t *p, const ci_container *c)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    json_object *exp = json_object_new_object();
    static const char *const states[] = { "running", "expired", "deleted" };
    json_object_object_add(o, "id", json_object_new_string(c->id));
    json_object_object_add(o, "object", json_object_new_string("container"));
    json_object_object_add(o, "name", json_object_new_string(c->name ? c->name : ""));
    json_object_object_add(o, "created_at",
                           json_object_new_int64(apr_time_sec(c->created_at)));
    json_object_object_add(o, "status", json_object_new_string(states[c->status]));
    json_object_object_add(o, "last_active_at",
                           json_object_new_int64(apr_time_sec(c->last_active_at)));
    json_object_object_add(exp, "anchor", json_object_new_string("last_active_at"));
    json_object_object_add(exp, "minutes",
                           json_object_new_int((c->idle_seconds + 59) / 60));
    json_object_object_add(o, "expires_after", exp);
    json_object_object_add(o, "memory_limit",
                           json_object_new_string(c->memory_limit ? c->memory_limit
                                                                  : CI_DEFAULT_TIER));
    json_object_object_add(o, "network_policy", ci_network_policy_object(p, c->allowlist));
    return o;
}

/* ---- the operations ------------------------------------------------------------ */

static int get_one(api_req *a)
{
    json_object *req = capi_dir_request(a, "get"), *ans;
    ci_container c;
    json_object_object_add(req, "touch", json_object_new_boolean(1));
    if (!(ans = capi_dir_ask(a, req)))
        return capi_unavailable(a);
    if (capi_status_of(ans) == CI_DIR_NOT_FOUND || capi_container_of(a, ans, "container", &c))
        return capi_not_found(a);
    return capi_send_json(a->r, 200, resource(a->r->pool, &c));
}

/* Another node's local container is deleted there (its sandbox runs
 * there): 0, or -1 with the 409 sent (*RC). */
static int deletable_here(api_req *a, int *rc)
{
    json_object *ans;
    ci_container c;
    if (!ci_dirclient_shared(a->r->server))
        return 0;
    if (!(ans = capi_dir_ask(a, capi_dir_request(a, "get"))))
        return *rc = capi_unavailable(a), -1;
    if (capi_status_of(ans) == CI_DIR_OK && !capi_container_of(a, ans, "container", &c) &&
        ci_dirclient_elsewhere(a->r, &c, &a->err))
        return *rc = capi_fail(a), -1;
    return 0;
}

static int delete_one(api_req *a)
{
    json_object *ans, *o;
    ci_container c;
    int rc;
    if (deletable_here(a, &rc))
        return rc;
    if (!(ans = capi_dir_ask(a, capi_dir_request(a, "delete"))))
        return capi_unavailable(a);
    if (capi_status_of(ans) != CI_DIR_OK || capi_container_of(a, ans, "container", &c))
        return capi_not_found(a);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, a->r, "CI0814: container %s deleted",
                  a->id);
    o = ci_json_own(a->r->pool, json_object_new_object());
    json_object_object_add(o, "id", json_object_new_string(a->id));
    json_object_object_add(o, "object", json_object_new_string("container.deleted"));
    json_object_object_add(o, "deleted", json_object_new_boolean(1));
    return capi_send_json(a->r, 200, o);
}

static int list(api_req *a)
{
    const char *name;
    json_object *req, *ans, *data, *found;
    ci_capi_paging pg;
    int i, n, rc;
    if (capi_read_paging(a, &pg, &rc))
        return rc;
    req = capi_dir_request(a, "list");
    json_object_object_add(req, "limit", json_object_new_int(pg.limit));
    if (pg.order)
        json_object_object_add(req, "order", json_object_new_string(pg.order));
    if (pg.after)
        json_object_object_add(req, "after", json_object_new_string(pg.after));
    if ((name = pg.name))
        json_object_object_add(req, "name", json_object_new_string(name));
    if (!(ans = capi_dir_ask(a, req)))
        return capi_unavailable(a);
    if (!(found = ci_json_get(ans, "data", json_type_array))) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, a->r, "CI0841: the container directory "
                      "answered a list without data (status %s)",
                      ci_json_str(ans, "status") ? ci_json_str(ans, "status") : "none");
        return capi_unavailable(a);
    }
    data = json_object_new_array();
    n = (int)json_object_array_length(found);
    for (i = 0; i < n; i++) {
        ci_container c;
        if (!ci_dirops_container_from(a->r->pool, json_object_array_get_idx(found, i), &c))
            json_object_array_add(data, json_object_get(resource(a->r->pool, &c)));
    }
    return capi_send_list(a, data, json_object_get_boolean(
                         ci_json_get(ans, "has_more", json_type_boolean)));
}

static int check_create(api_req *a, json_object *body, const ci_sandbox_def *def,
                        int *idle, const char **allowlist, apr_array_header_t **secrets)
{
    const char *tier, *why;
    const ci_sandbox_def *tiered;
    apr_array_header_t *domains = NULL;
    json_object *policy;
    if (ci_capi_check_create(a->r->pool, body, def->max_idle / 60, def->idle, idle,
                             &a->err) != 0)
        return capi_fail(a), -1;
    if ((tier = ci_json_str(body, "memory_limit")) &&
        (why = ci_sandbox_def_tier(a->r->pool, def, tier, &tiered)))
        return capi_bad(a, "memory_limit", "invalid_value", why), -1;
    if (json_object_object_get_ex(body, "network_policy", &policy) && policy &&
        (ci_network_policy_parse(a->r->pool, policy, "network_policy", &domains, secrets,
                                 &a->err) < 0 ||
         ci_containers_check_allowlist(a->r->pool, def, domains, *secrets, "network_policy",
                                       &a->err) != OK))
        return capi_fail(a), -1;
    *allowlist = ci_domains_join(a->r->pool, domains);
    return 0;
}

/* The new container C gets FILES (the caller's, at the upstream): 0, or -1
 * with A->err set and the container deleted again (nothing half-made). */
static int provision(api_req *a, const ci_container *c, const apr_array_header_t *files)
{
    if (ci_files_provision(a->r, a->d, a->owner, c, files, NULL, &a->err) == OK)
        return 0;
    a->id = c->id;
    /* deleted: its sandbox, when it got one, ends with the answer */
    capi_dir_ask(a, capi_dir_request(a, "delete"));
    a->id = NULL;
    return -1;
}

/* A create waits for room at most CodeInterpreterCapacityWait. */
static apr_time_t capacity_deadline(api_req *a)
{
    return apr_time_now() + apr_time_from_sec(
                                ci_server_capacity_wait(ci_server_config(a->r->server)));
}

/* The body's "skills" (OpenAI's union, as on a shell's container_auto),
 * resolved for a container of DEF: 0 with *SKILLS (NULL: none), or -1
 * with the refusal in A->err. */
static int create_skills(api_req *a, json_object *body, const ci_sandbox_def *def,
                         const char **skills)
{
    apr_array_header_t *refs = NULL;
    json_object *list = NULL;
    *skills = NULL;
    if (!json_object_object_get_ex(body, "skills", &list) || !list)
        return 0;
    if (ci_skill_attach_parse(a->r->pool, list, "skills", &refs, &a->err))
        return -1;
    if (!refs->nelts)
        return 0;
    return ci_skills_attach_resolve(a->r, def, a->owner, refs, skills, &a->err) == OK
           ? 0 : -1;
}

static int create(api_req *a)
{
    const ci_sandbox_def *def = ci_sandbox_lookup(a->r->server,
                                                  a->d->sandbox ? a->d->sandbox : CI_DEFAULT_TOOL);
    json_object *body = capi_read_json(a), *req, *ans, *ids;
    apr_array_header_t *files = NULL;
    ci_container c;
    ci_dir_status why;
    int idle, waited = 0;
    const char *allowlist = NULL, *id = NULL, *skills = NULL;
    apr_array_header_t *secrets = NULL;
    if (!def) {
        ci_error_set(&a->err, 500, CI_SERVER, NULL, "server_error", a->r->pool,
                     "The code interpreter is misconfigured on this server.");
        return capi_fail(a);
    }
    if (check_create(a, body, def, &idle, &allowlist, &secrets))
        return OK;
    /* sealed for the container: its id is minted here */
    if (secrets)
        id = ci_mint_id(a->r->pool, "cntr_", 24);
    /* file_ids: each checked at the upstream before anything is made */
    if ((ids = ci_json_get(body, "file_ids", json_type_array)) &&
        json_object_array_length(ids) > 0 &&
        ci_files_check_ids(a->r, a->d, ids, "file_ids", &files, &a->err) != OK)
        return capi_fail(a);
    if (create_skills(a, body, def, &skills))
        return capi_fail(a);
    req = ci_containers_create_request(a->r, a->owner, def,
                                       ci_json_str(body, "memory_limit"), allowlist,
                                       secrets ? ci_dirclient_seal_secrets(a->r->pool, id,
                                                                           secrets) : NULL,
                                       id, ci_json_str(body, "name"), idle, 0);
    if (skills)
        json_object_object_add(req, "skills", json_object_new_string(skills));
    if (!(ans = ci_containers_create_waiting(a->r, req, capacity_deadline(a), &waited)))
        return capi_unavailable(a);
    why = capi_status_of(ans);
    ci_containers_note_admission(a->r, def->name, ci_json_str(ci_json_get(
                                     ans, "container", json_type_object), "id"),
                                 waited, ans);
    if (ci_containers_capacity(why)) {
        ci_containers_refused(a->r, why, 429, &a->err);
        return capi_fail(a);
    }
    if (why != CI_DIR_OK || capi_container_of(a, ans, "container", &c))
        return capi_unavailable(a);
    if (files && provision(a, &c, files))
        return capi_fail(a);
    ci_skills_attach_audit(a->r, c.id, a->owner, skills);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, a->r, "CI0815: container %s created "
                  "(tool %s)", c.id, def->name);
    return capi_send_json(a->r, 200, resource(a->r->pool, &c));
}

/* ---- routing -------------------------------------------------------------------- */

static int method_not_allowed(api_req *a, const char *allow)
{
    apr_table_setn(a->r->headers_out, "Allow", allow);
    ci_error_set(&a->err, 405, CI_INVALID, NULL, "method_not_allowed", a->r->pool,
                 "Method %s is not allowed here (allowed: %s).", a->r->method, allow);
    return capi_fail(a);
}

static int no_path(api_req *a)
{
    ci_error_set(&a->err, 404, CI_INVALID, NULL, "not_found", a->r->pool,
                 "No such Containers API path: %s", a->r->uri);
    return capi_fail(a);
}

static int on_containers(api_req *a)
{
    return a->r->method_number == M_GET ? list(a)
         : a->r->method_number == M_POST ? create(a)
         : method_not_allowed(a, "GET, POST");
}

static int on_container(api_req *a)
{
    return a->r->method_number == M_GET ? get_one(a)
         : a->r->method_number == M_DELETE ? delete_one(a)
         : method_not_allowed(a, "GET, DELETE");
}

static int on_files(api_req *a)
{
    return a->r->method_number == M_GET ? capi_files_list(a)
         : a->r->method_number == M_POST ? capi_file_upload(a)
         : method_not_allowed(a, "GET, POST");
}

static int on_file(api_req *a)
{
    return a->r->method_number == M_GET ? capi_file_get(a)
         : a->r->method_number == M_DELETE ? capi_file_delete(a)
         : method_not_allowed(a, "GET, DELETE");
}

static int on_content(api_req *a)
{
    return a->r->method_number == M_GET ? capi_file_content(a) : method_not_allowed(a, "GET");
}

static int api_handler(request_rec *r)
{
    ci_loc_conf *d = ci_loc_config(r);
    const char *owner = NULL;
    ci_capi_route route;
    api_req a;
    if (!d || d->containers != 1 || r->main)
        return DECLINED;
    ci_capi_route_of(r->pool, r->uri, &route);
    if (route.kind == CI_CAPI_NONE)
        return DECLINED;
    memset(&a, 0, sizeof(a));
    a.r = r;
    a.d = d;
    owner = ci_owner_noted(r);
    a.owner = owner;
    if (!a.owner || !*a.owner) {
        ci_error_set(&a.err, 401, CI_INVALID, NULL, "missing_credentials", r->pool,
                     "The Containers API needs a caller: this request carries no "
                     "credentials.");
        return capi_fail(&a);
    }
    a.id = route.id;
    a.file_id = route.file_id;
    switch (route.kind) {
    case CI_CAPI_CONTAINERS: return on_containers(&a);
    case CI_CAPI_CONTAINER:  return on_container(&a);
    case CI_CAPI_FILES:      return on_files(&a);
    case CI_CAPI_FILE:       return on_file(&a);
    case CI_CAPI_CONTENT:    return on_content(&a);
    default:                 return no_path(&a);
    }
}

void ci_containers_api_register_hooks(apr_pool_t *p)
{
    /* First: a ProxyPass covering the location would otherwise take it. */
    ap_hook_handler(api_handler, NULL, NULL, APR_HOOK_FIRST);
}

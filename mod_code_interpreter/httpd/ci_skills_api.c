/*
 * ci_skills_api.c - the Skills API (ci_skills_api.h): a thin handler over
 * the upload's reader (ci_skill_api.h), the store (ci_skill_store.h, the
 * bundles, written here) and the records, which the node's supervisor
 * hosts (DIR questions, ci_skill_ops.h). Every lookup is the caller's own:
 * another caller's skill reads as unknown (404).
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <apr_file_info.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <unixd.h>
#include "ci_capi.h"
#include "ci_owner.h"
#include "ci_json.h"
#include "ci_module.h"
#include "ci_request_state.h"
#include "ci_settings.h"
#include "ci_skill_api.h"
#include "ci_skill_store.h"
#include "ci_skills_api.h"
#include "ci_supervisor_client.h"

#define READ_CHUNK 65536
#define MAX_JSON_BODY (16 * 1024)

static int skills_wanted;          /* CodeInterpreterSkills On somewhere */

typedef struct skill_req {
    request_rec *r;
    const char *owner;
    const char *store;
    ci_skapi_route route;
    ci_error err;
} skill_req;

/* ---- answers ---------------------------------------------------------------- */

static int send_json(request_rec *r, json_object *o)
{
    apr_size_t len;
    const char *body = ci_json_text(ci_json_own(r->pool, o), &len);
    ap_set_content_type(r, "application/json");
    ap_set_content_length(r, (apr_off_t)len);
    ap_rwrite(body, (int)len, r);
    return OK;
}

static int fail(skill_req *q)
{
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "CI0843: skills API answers %d: %s",
                  q->err.status, q->err.message);
    ci_send_error(q->r, &q->err);
    return OK;
}

static int unavailable(skill_req *q, const char *why)
{
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "CI0844: the skills' records could "
                  "not be asked: %s", why);
    ci_error_set(&q->err, 503, CI_SERVER, NULL, "skills_unavailable", q->r->pool,
                 "The skills of this server are unavailable; retry shortly.");
    return fail(q);
}

static int store_failed(skill_req *q, const char *why)
{
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, q->r, "CI0845: the skill store failed: %s",
                  why);
    ci_error_set(&q->err, 500, CI_SERVER, NULL, NULL, q->r->pool,
                 "The skill could not be stored on this server.");
    return fail(q);
}

/* ---- the records ------------------------------------------------------------ */

static json_object *question(skill_req *q, const char *op)
{
    json_object *o = ci_skills_question(q->r->pool, op, q->owner, q->store);
    if (q->route.skill_id)
        json_object_object_add(o, "id", json_object_new_string(q->route.skill_id));
    if (q->route.version)
        json_object_object_add(o, "version", json_object_new_string(q->route.version));
    return o;
}

json_object *ci_skills_ask(apr_pool_t *p, json_object *req, const char **why)
{
    apr_size_t len;
    const char *text = ci_json_text(req, &len), *answer, *perr = NULL;
    json_object *ans;
    if (ci_supervisor_dir(p, text, len, &answer, why) != 0)
        return NULL;
    if (!(ans = ci_json_parse(p, answer, strlen(answer), &perr)) ||
        !ci_json_str(ans, "status")) {
        *why = "an answer that is not the records'";
        return NULL;
    }
    return ans;
}

json_object *ci_skills_question(apr_pool_t *p, const char *op, const char *owner,
                                const char *store)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    json_object_object_add(o, "op", json_object_new_string(op));
    json_object_object_add(o, "owner", json_object_new_string(owner));
    json_object_object_add(o, "store", json_object_new_string(store));
    return o;
}

/* REQ asked: the answer, or NULL with *WHY. */
static json_object *ask(skill_req *q, json_object *req, const char **why)
{
    return ci_skills_ask(q->r->pool, req, why);
}

static int status_is(json_object *ans, const char *status)
{
    return !strcmp(ci_json_str(ans, "status"), status);
}

/* ANS, which is not "ok", answered. */
static int refused(skill_req *q, json_object *ans)
{
    const char *status = ci_json_str(ans, "status");
    if (!strcmp(status, "store_error"))
        return store_failed(q, ci_json_str(ans, "message") ? ci_json_str(ans, "message")
                                                           : "(no reason)");
    ci_skapi_refusal(q->r->pool, status, q->route.skill_id, q->route.version, &q->err);
    return fail(q);
}

/* REQ asked, and answered unless "ok": the answer, or NULL (answered,
 * *RC the handler's status). */
static json_object *ask_ok(skill_req *q, json_object *req, int *rc)
{
    const char *why = NULL;
    json_object *ans = ask(q, req, &why);
    if (!ans)
        *rc = unavailable(q, why);
    else if (!status_is(ans, "ok"))
        *rc = refused(q, ans);
    else
        return ans;
    return NULL;
}

/* ---- an upload -------------------------------------------------------------- */

/* The request's body read into a bundle: 0, or -1 with the refusal sent. */
static int read_upload(skill_req *q, int with_default, ci_skill_bundle **b,
                       int *make_default, int *rc)
{
    const char *boundary = NULL;
    char *buf = apr_palloc(q->r->pool, READ_CHUNK);
    ci_skapi_upload *u;
    long n;
    int fed = 0;
    if (ci_multipart_boundary(q->r->pool, apr_table_get(q->r->headers_in, "Content-Type"),
                              &boundary, NULL) != CI_MULTIPART_OK) {
        ci_error_set(&q->err, 400, CI_INVALID, "files", NULL, q->r->pool,
                     "Upload a skill as multipart/form-data: 'files' (one zip) or "
                     "'files[]' (a folder's files).");
        *rc = fail(q);
        return -1;
    }
    u = ci_skapi_upload_make(q->r->pool, boundary, NULL, with_default);
    if (ap_setup_client_block(q->r, REQUEST_CHUNKED_DECHUNK) == OK &&
        ap_should_client_block(q->r))
        while (fed == 0 && (n = ap_get_client_block(q->r, buf, READ_CHUNK)) > 0)
            fed = ci_skapi_upload_feed(u, buf, (apr_size_t)n);
    if (ci_skapi_upload_finish(u, b, make_default, &q->err) != 0) {
        *rc = fail(q);
        return -1;
    }
    return 0;
}

/* B written into the store (once: the same bundle is there already when
 * another upload brought it): 0, or -1 with the failure sent. */
static int store_bundle(skill_req *q, const ci_skill_bundle *b, int *rc)
{
    const char *zip, *err;
    apr_size_t len;
    if (ci_skill_bundle_zip(q->r->pool, b, &zip, &len, &err) != 0 ||
        ci_skill_store_put(q->r->pool, q->store, b, zip, len, &err) != 0) {
        *rc = store_failed(q, err);
        return -1;
    }
    return 0;
}

static json_object *upload_of(const ci_skill_bundle *b)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(b->name));
    json_object_object_add(o, "description", json_object_new_string(b->description));
    json_object_object_add(o, "digest", json_object_new_string(b->digest));
    return o;
}

/* B stored and REQ (which names it) asked. A deletion may remove the
 * bundle between the two ("no_bundle"): stored again then, and asked
 * again, once. */
static json_object *store_and_ask(skill_req *q, const ci_skill_bundle *b,
                                  json_object *req, int *rc)
{
    const char *why = NULL;
    json_object *ans = NULL;
    int tries;
    json_object_object_add(req, "upload", upload_of(b));
    for (tries = 0; tries < 2; tries++) {
        if (store_bundle(q, b, rc) != 0)
            return NULL;
        if (!(ans = ask(q, req, &why))) {
            *rc = unavailable(q, why);
            return NULL;
        }
        if (!status_is(ans, "no_bundle"))
            break;
    }
    if (!status_is(ans, "ok")) {
        *rc = refused(q, ans);
        return NULL;
    }
    return ans;
}

static void audit_upload(skill_req *q, const char *what, json_object *version)
{
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "CI0846: %s: skill %s version %d "
                  "(%s), bundle %s", what, ci_json_str(version, "skill_id"),
                  json_object_get_int(json_object_object_get(version, "version")),
                  ci_json_str(version, "name"), ci_json_str(version, "digest"));
}

/* ---- the operations --------------------------------------------------------- */

static int create_skill(skill_req *q)
{
    ci_skill_bundle *b;
    json_object *ans;
    int make_default, rc = OK;
    if (read_upload(q, 0, &b, &make_default, &rc) != 0 ||
        !(ans = store_and_ask(q, b, question(q, "skill_create"), &rc)))
        return rc;
    audit_upload(q, "skill created", json_object_object_get(ans, "version"));
    return send_json(q->r, ci_skapi_skill(json_object_object_get(ans, "skill")));
}

static int create_version(skill_req *q)
{
    ci_skill_bundle *b;
    json_object *ans, *req;
    int make_default, rc = OK;
    if (read_upload(q, 1, &b, &make_default, &rc) != 0)
        return rc;
    req = question(q, "version_create");
    json_object_object_add(req, "default", json_object_new_boolean(make_default));
    if (!(ans = store_and_ask(q, b, req, &rc)))
        return rc;
    audit_upload(q, "skill version created", json_object_object_get(ans, "version"));
    return send_json(q->r, ci_skapi_version(json_object_object_get(ans, "version")));
}

/* OpenAI's list envelope of the records' DATA, each shown by SHOW. */
static int send_list(skill_req *q, json_object *ans, json_object *(*show)(json_object *))
{
    json_object *data = ci_json_get(ans, "data", json_type_array);
    json_object *shown = json_object_new_array();
    size_t i, n = data ? json_object_array_length(data) : 0;
    for (i = 0; i < n; i++)
        json_object_array_add(shown, show(json_object_array_get_idx(data, i)));
    return send_json(q->r, ci_capi_list(shown, json_object_get_boolean(
                                            json_object_object_get(ans, "has_more"))));
}

static int list_of(skill_req *q, const char *op, json_object *(*show)(json_object *))
{
    ci_capi_paging pg;
    json_object *req, *ans;
    int rc = OK;
    if (ci_capi_paging_of(q->r->pool, q->r->args, &pg, &q->err) != 0)
        return fail(q);
    req = question(q, op);
    json_object_object_add(req, "limit", json_object_new_int(pg.limit));
    if (pg.order)
        json_object_object_add(req, "order", json_object_new_string(pg.order));
    if (pg.after)
        json_object_object_add(req, "after", json_object_new_string(pg.after));
    if (!(ans = ask_ok(q, req, &rc)))
        return rc;
    return send_list(q, ans, show);
}

static int get_skill(skill_req *q)
{
    json_object *ans;
    int rc = OK;
    if (!(ans = ask_ok(q, question(q, "skill_get"), &rc)))
        return rc;
    return send_json(q->r, ci_skapi_skill(json_object_object_get(ans, "skill")));
}

/* {"default_version": N} (a number or its text). */
static int set_default(skill_req *q)
{
    char *buf = apr_palloc(q->r->pool, MAX_JSON_BODY + 1);
    apr_size_t len = 0;
    const char *perr = NULL;
    json_object *body = NULL, *v, *req, *ans;
    long n;
    int rc = OK;
    if (ap_setup_client_block(q->r, REQUEST_CHUNKED_DECHUNK) == OK &&
        ap_should_client_block(q->r))
        while (len < MAX_JSON_BODY &&
               (n = ap_get_client_block(q->r, buf + len, MAX_JSON_BODY - len)) > 0)
            len += (apr_size_t)n;
    buf[len] = '\0';
    body = ci_json_parse(q->r->pool, buf, len, &perr);
    v = body ? json_object_object_get(body, "default_version") : NULL;
    if (!v || !(json_object_is_type(v, json_type_int) ||
                json_object_is_type(v, json_type_string))) {
        ci_error_set(&q->err, 400, CI_INVALID, "default_version", NULL, q->r->pool,
                     "Missing required parameter: 'default_version' (a version number).");
        return fail(q);
    }
    q->route.version = json_object_get_string(v);
    req = question(q, "skill_default");
    json_object_object_add(req, "version", json_object_get(v));
    if (!(ans = ask_ok(q, req, &rc)))
        return rc;
    q->route.version = NULL;
    return send_json(q->r, ci_skapi_skill(json_object_object_get(ans, "skill")));
}

static int delete_skill(skill_req *q)
{
    json_object *ans;
    int rc = OK;
    if (!(ans = ask_ok(q, question(q, "skill_delete"), &rc)))
        return rc;
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "CI0847: skill %s deleted",
                  q->route.skill_id);
    return send_json(q->r, ci_skapi_skill_deleted(q->route.skill_id));
}

static int get_version(skill_req *q)
{
    json_object *ans;
    int rc = OK;
    if (!(ans = ask_ok(q, question(q, "version_get"), &rc)))
        return rc;
    return send_json(q->r, ci_skapi_version(json_object_object_get(ans, "version")));
}

static int delete_version(skill_req *q)
{
    json_object *ans, *v;
    int rc = OK;
    if (!(ans = ask_ok(q, question(q, "version_delete"), &rc)))
        return rc;
    v = json_object_object_get(ans, "version");
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, q->r, "CI0848: skill %s version %d deleted%s",
                  q->route.skill_id, json_object_get_int(json_object_object_get(v, "version")),
                  json_object_get_boolean(json_object_object_get(ans, "skill_deleted"))
                  ? ", and the skill with it (its last version)" : "");
    return send_json(q->r, ci_skapi_version_deleted(
                         ci_json_str(v, "id"),
                         json_object_get_int(json_object_object_get(v, "version"))));
}

/* The zip of the version the route names (a skill's: its default). */
static int content(skill_req *q)
{
    json_object *req, *ans;
    const char *zip, *err = NULL, *digest;
    apr_size_t len;
    int rc = OK, found;
    if (!q->route.version) {
        if (!(ans = ask_ok(q, question(q, "skill_get"), &rc)))
            return rc;
        q->route.version = json_object_get_string(
            json_object_object_get(json_object_object_get(ans, "skill"), "default_version"));
    }
    req = question(q, "version_get");
    if (!(ans = ask_ok(q, req, &rc)))
        return rc;
    digest = ci_json_str(json_object_object_get(ans, "version"), "digest");
    if (!digest || (found = ci_skill_store_read_zip(q->r->pool, q->store, digest, &zip,
                                                     &len, &err)) != 0)
        return store_failed(q, err ? err : "the version's bundle is not in the store");
    ap_set_content_type(q->r, "application/zip");
    ap_set_content_length(q->r, (apr_off_t)len);
    apr_table_setn(q->r->headers_out, "Content-Disposition",
                   apr_psprintf(q->r->pool, "attachment; filename=\"%s.zip\"",
                                q->route.skill_id));
    ap_rwrite(zip, (int)len, q->r);
    return OK;
}

/* ---- routing ---------------------------------------------------------------- */

static int method_not_allowed(skill_req *q, const char *allow)
{
    apr_table_setn(q->r->headers_out, "Allow", allow);
    ci_error_set(&q->err, 405, CI_INVALID, NULL, "method_not_allowed", q->r->pool,
                 "Method %s is not allowed here (allowed: %s).", q->r->method, allow);
    return fail(q);
}

static int route(skill_req *q)
{
    int m = q->r->method_number;
    switch (q->route.kind) {
    case CI_SKAPI_SKILLS:
        return m == M_GET ? list_of(q, "skill_list", ci_skapi_skill)
             : m == M_POST ? create_skill(q) : method_not_allowed(q, "GET, POST");
    case CI_SKAPI_SKILL:
        return m == M_GET ? get_skill(q) : m == M_POST ? set_default(q)
             : m == M_DELETE ? delete_skill(q) : method_not_allowed(q, "GET, POST, DELETE");
    case CI_SKAPI_VERSIONS:
        return m == M_GET ? list_of(q, "version_list", ci_skapi_version)
             : m == M_POST ? create_version(q) : method_not_allowed(q, "GET, POST");
    case CI_SKAPI_VERSION:
        return m == M_GET ? get_version(q) : m == M_DELETE ? delete_version(q)
             : method_not_allowed(q, "GET, DELETE");
    case CI_SKAPI_SKILL_CONTENT:
    case CI_SKAPI_VERSION_CONTENT:
        return m == M_GET ? content(q) : method_not_allowed(q, "GET");
    default:
        ci_error_set(&q->err, 404, CI_INVALID, NULL, "not_found", q->r->pool,
                     "No such Skills API path: %s", q->r->uri);
        return fail(q);
    }
}

static int skills_handler(request_rec *r)
{
    ci_loc_conf *d = ci_loc_config(r);
    skill_req q;
    if (!d || d->skills != 1 || r->main)
        return DECLINED;
    memset(&q, 0, sizeof(q));
    ci_skapi_route_of(r->pool, r->uri, &q.route);
    if (q.route.kind == CI_SKAPI_NONE)
        return DECLINED;
    q.r = r;
    q.store = ci_server_skill_store(r->server);
    q.owner = ci_owner_noted(r);
    if (!q.owner || !*q.owner) {
        ci_error_set(&q.err, 401, CI_INVALID, NULL, "missing_credentials", r->pool,
                     "The Skills API needs a caller: this request carries no "
                     "credentials.");
        return fail(&q);
    }
    return route(&q);
}

/* ---- configuration ---------------------------------------------------------- */

int ci_skills_served(void)
{
    return skills_wanted;
}

void ci_skills_api_pre_config(void)
{
    skills_wanted = 0;
}

void ci_skills_api_wanted(void)
{
    skills_wanted = 1;
}

/* The store's folder, made (with its parents) and given to the children's
 * user, mode 0700: its bundles are the server's, read by nobody else (a
 * local sandbox gets one bundle's tree, bound read-only). */
int ci_skills_api_post_config(apr_pool_t *p, server_rec *s)
{
    const char *store = ci_server_skill_store(s);
    apr_status_t rv;
    if (!skills_wanted)
        return OK;
    if (ci_server_directory(s)) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0849: CodeInterpreterSkills is "
                     "not served with a shared CodeInterpreterDirectory: the skills' "
                     "records are this node's. Serve skills from a server with its own "
                     "directory.");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    if ((rv = apr_dir_make_recursive(store, APR_FPROT_OS_DEFAULT, p)) != APR_SUCCESS ||
        chmod(store, 0700) != 0 ||
        (geteuid() == 0 &&
         chown(store, ap_unixd_config.user_id, ap_unixd_config.group_id) != 0)) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv ? rv : APR_FROM_OS_ERROR(errno), s,
                     "CI0850: the skill store %s could not be made for the server's "
                     "user (CodeInterpreterSkillStore)", store);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    return OK;
}

const char *ci_skills_api_secret_path(apr_pool_t *p, server_rec *s)
{
    return skills_wanted ? apr_pstrcat(p, ci_server_skill_store(s), "/server.secret", NULL)
                         : NULL;
}

void ci_skills_api_register_hooks(apr_pool_t *p)
{
    (void)p;
    /* First: a ProxyPass covering the location would otherwise take it. */
    ap_hook_handler(skills_handler, NULL, NULL, APR_HOOK_FIRST);
}

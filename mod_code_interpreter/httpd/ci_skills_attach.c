/*
 * ci_skills_attach.c - the skills a request asks its new container to have
 * (ci_skills_attach.h), resolved before round 1: each reference is the
 * caller's own skill at the version it names (asked of the records, as the
 * Skills API does), each inline skill is checked as an upload is and put
 * into the store, so that a container's skills are always folders of the
 * store, shown read-only.
 */
#include <string.h>
#include <httpd.h>
#include <apr_base64.h>
#include <apr_strings.h>
#include <http_log.h>
#include "ci_audit.h"
#include "ci_json.h"
#include "ci_module.h"
#include "ci_settings.h"
#include "ci_skill_attach.h"
#include "ci_skill_bundle.h"
#include "ci_skill_store.h"
#include "ci_skills_api.h"
#include "ci_skills_attach.h"

typedef struct resolving {
    request_rec *r;
    const char *owner;
    const char *store;
    json_object *skills;         /* what the container gets */
    ci_error *err;
} resolving;

static int refuse(resolving *v, int status, const char *param, const char *code,
                  const char *msg)
{
    ci_error_set(v->err, status, status == 400 ? CI_INVALID : CI_SERVER, param, code,
                 v->r->pool, "%s", msg);
    return status;
}

static int unavailable(resolving *v, const char *why)
{
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, v->r, "CI0851: a skill could not be "
                  "resolved: %s", why);
    return refuse(v, 503, NULL, "skills_unavailable",
                  "The skills of this server are unavailable; retry shortly.");
}

/* Skill S (name, description, digest, the hex of its folder's name) added
 * to the container's list; a folder given twice is refused. */
static int add_skill(resolving *v, const ci_skill_ref *ref, const char *name,
                     const char *description, const char *digest, const char *hex,
                     json_object *extra)
{
    apr_pool_t *p = v->r->pool;
    const char *mount = ci_skill_attach_mount(p, name, hex);
    json_object *s = extra ? extra : json_object_new_object();
    size_t i;
    for (i = 0; i < json_object_array_length(v->skills); i++)
        if (!strcmp(mount, ci_json_str(json_object_array_get_idx(v->skills, i), "mount"))) {
            json_object_put(s);
            return refuse(v, 400, ref->param, "duplicate_skill",
                          apr_psprintf(p, "Skill '%s' is given twice.", name));
        }
    json_object_object_add(s, "mount", json_object_new_string(mount));
    json_object_object_add(s, "tree", json_object_new_string(
                               ci_skill_store_tree(p, v->store, digest)));
    json_object_object_add(s, "zip", json_object_new_string(
                               ci_skill_store_zip(p, v->store, digest)));
    json_object_object_add(s, "name", json_object_new_string(name));
    json_object_object_add(s, "description", json_object_new_string(description));
    json_object_object_add(s, "digest", json_object_new_string(digest));
    json_object_array_add(v->skills, s);
    return OK;
}

/* ---- a reference ------------------------------------------------------------ */

/* The records' answer to OP about REF (version VERSION, or none): NULL
 * with *RC when it is not "ok". */
static json_object *ask_about(resolving *v, const ci_skill_ref *ref, const char *op,
                              json_object *version, int *rc)
{
    json_object *req = ci_skills_question(v->r->pool, op, v->owner, v->store), *ans;
    const char *why = NULL, *status;
    json_object_object_add(req, "id", json_object_new_string(ref->skill_id));
    if (version)
        json_object_object_add(req, "version", version);
    if (!(ans = ci_skills_ask(v->r->pool, req, &why))) {
        *rc = unavailable(v, why);
        return NULL;
    }
    status = ci_json_str(ans, "status");
    if (!strcmp(status, "ok"))
        return ans;
    if (!strcmp(status, "not_found"))
        *rc = refuse(v, 400, apr_pstrcat(v->r->pool, ref->param, ".skill_id", NULL),
                     "skill_not_found", apr_psprintf(v->r->pool, "Skill with id '%s' not "
                                                     "found.", ref->skill_id));
    else if (!strcmp(status, "no_version"))
        *rc = refuse(v, 400, apr_pstrcat(v->r->pool, ref->param, ".version", NULL),
                     "skill_version_not_found",
                     apr_psprintf(v->r->pool, "Skill '%s' has no version '%s'.",
                                  ref->skill_id, json_object_get_string(version)));
    else
        *rc = unavailable(v, status);
    return NULL;
}

/* The version REF names, as JSON: its number, "latest", or (the default)
 * the skill's default version's number, asked first. */
static json_object *version_named(resolving *v, const ci_skill_ref *ref, int *rc)
{
    json_object *ans;
    if (ref->version == CI_SKILL_VERSION_LATEST)
        return json_object_new_string("latest");
    if (ref->version != CI_SKILL_VERSION_DEFAULT)
        return json_object_new_int(ref->version);
    if (!(ans = ask_about(v, ref, "skill_get", NULL, rc)))
        return NULL;
    return json_object_get(json_object_object_get(json_object_object_get(ans, "skill"),
                                                  "default_version"));
}

static int resolve_reference(resolving *v, const ci_skill_ref *ref)
{
    json_object *version, *ans, *ver, *extra;
    const char *digest;
    int rc = OK;
    if (!(version = version_named(v, ref, &rc)))
        return rc;
    if (!(ans = ask_about(v, ref, "version_get", version, &rc)))
        return rc;
    ver = json_object_object_get(ans, "version");
    digest = ci_json_str(ver, "digest");
    if (!digest || !ci_skill_store_has(v->r->pool, v->store, digest))
        return unavailable(v, "a version's bundle is not in the store");
    extra = json_object_new_object();
    json_object_object_add(extra, "skill_id", json_object_new_string(ref->skill_id));
    json_object_object_add(extra, "version", json_object_get(
                               json_object_object_get(ver, "version")));
    /* the folder's hex: the skill id's (skill_ and 32 hex digits) */
    return add_skill(v, ref, ci_json_str(ver, "name"), ci_json_str(ver, "description"),
                     digest, strlen(ref->skill_id) > 32
                                 ? ref->skill_id + strlen(ref->skill_id) - 32
                                 : apr_pstrndup(v->r->pool, digest, 32), extra);
}

/* ---- an inline skill -------------------------------------------------------- */

static int resolve_inline(resolving *v, const ci_skill_ref *ref)
{
    static const ci_skill_limits limits = CI_SKILL_LIMITS_DEFAULT;
    apr_pool_t *p = v->r->pool;
    const char *param = apr_pstrcat(p, ref->param, ".source.data", NULL), *err, *zip;
    apr_size_t zip_len;
    ci_skill_bundle *b;
    char *raw;
    int n;
    if ((apr_size_t)apr_base64_decode_len(ref->data) > limits.max_zip + 3)
        return refuse(v, 400, param, NULL, apr_psprintf(p, CI_SKILL_E_ZIP_SIZE,
                                                        (unsigned long)limits.max_zip));
    raw = apr_palloc(p, (apr_size_t)apr_base64_decode_len(ref->data));
    n = apr_base64_decode_binary((unsigned char *)raw, ref->data);
    if (ci_skill_bundle_from_zip(p, raw, (apr_size_t)(n > 0 ? n : 0), &limits, &b, &err))
        return refuse(v, 400, param, NULL, err);
    if (ci_skill_bundle_zip(p, b, &zip, &zip_len, &err) ||
        ci_skill_store_put(p, v->store, b, zip, zip_len, &err)) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, v->r, "CI0852: an inline skill could not "
                      "be stored: %s", err);
        return refuse(v, 500, NULL, NULL, "The skill could not be stored on this server.");
    }
    /* the folder's name is the bundle's (its SKILL.md's), checked; the model
     * is told the name and description the request gives */
    return add_skill(v, ref, b->name, ref->description, b->digest,
                     apr_pstrndup(p, b->digest, 32), NULL);
}

/* ---- the request's skills --------------------------------------------------- */

int ci_skills_attach_resolve(request_rec *r, const ci_sandbox_def *tool, const char *owner,
                             const apr_array_header_t *refs, const char **record,
                             ci_error *err)
{
    resolving v;
    int i, rc;
    if (!(tool->provider->caps & CI_CAP_SKILLS) || !ci_skills_served()) {
        ci_error_set(err, 400, CI_INVALID, APR_ARRAY_IDX(refs, 0, ci_skill_ref).param,
                     "unsupported_parameter", r->pool, "Skills are not available here: %s.",
                     !ci_skills_served()
                         ? "this server does not serve skills (CodeInterpreterSkills)"
                         : apr_psprintf(r->pool, "the sandbox tool '%s' (provider %s) "
                                        "cannot show them", tool->name,
                                        tool->provider->name));
        return 400;
    }
    memset(&v, 0, sizeof(v));
    v.r = r;
    v.owner = owner;
    v.store = ci_server_skill_store(r->server);
    v.skills = ci_json_own(r->pool, json_object_new_array());
    v.err = err;
    for (i = 0; i < refs->nelts; i++) {
        const ci_skill_ref *ref = &APR_ARRAY_IDX(refs, i, ci_skill_ref);
        rc = ref->kind == CI_SKILL_REFERENCE ? resolve_reference(&v, ref)
                                             : resolve_inline(&v, ref);
        if (rc != OK)
            return rc;
    }
    *record = ci_json_text(v.skills, NULL);
    return OK;
}

void ci_skills_attach_audit(request_rec *r, const char *container_id, const char *owner,
                            const char *record)
{
    const char *perr = NULL, *list = "";
    json_object *skills = record ? ci_json_parse(r->pool, record, strlen(record), &perr)
                                 : NULL;
    size_t i, n = skills ? json_object_array_length(skills) : 0;
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(skills, i);
        list = apr_pstrcat(r->pool, list, i ? ", " : "",
                           ci_json_str(s, "skill_id")
                               ? apr_psprintf(r->pool, "%s version %d",
                                              ci_json_str(s, "skill_id"),
                                              json_object_get_int(
                                                  json_object_object_get(s, "version")))
                               : "inline",
                           " (", ci_json_str(s, "name"), ", bundle ",
                           ci_json_str(s, "digest"), ")", NULL);
    }
    if (n)
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "CI0853: container %s got skills: %s",
                      container_id, list);
    ci_audit_skills(r, container_id, owner, skills);
}

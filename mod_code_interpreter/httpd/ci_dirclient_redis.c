/*
 * ci_dirclient_redis.c - the "redis" back end of the container directory's
 * client (ci_dirclient.h): a directory several nodes share
 * (CodeInterpreterDirectory redis://...), each operation one atomic script
 * (core/ci_directory.lua) run with ci_redis. Its records are authenticated
 * with the server secret; a local container's sandbox is shadowed in this
 * node's supervisor (adopt), and those whose containers Redis no longer
 * has running are ended (reconcile).
 */
#include <string.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include "ci_id.h"
#include "ci_crypto.h"
#include "ci_dirclient.h"
#include "ci_settings.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_owner.h"
#include "ci_redis.h"
#include "ci_supervisor_client.h"
#include "ci_module.h"

/* A local shadow outlives its shared record by this much: the shared
 * directory's claim normally comes first (see ci_directory_ops's adopt). */
#define SHADOW_GRACE 600

/* ---- records Redis keeps: authenticated -----------------------------------
 * Whoever can write to Redis could change a record's owner (handing the
 * container to another caller) or its tool or node. Each record carries an
 * HMAC, under a key derived from the server secret, of what must not
 * change; every container an answer carries is checked with the owner that
 * asked (or, for a claim, its own), and one that does not match is treated
 * as unknown. (A sealed handle is bound to its container's id already.) */

static const char *record_auth(apr_pool_t *p, const char *id, const char *owner,
                               const char *tool, const char *provider, const char *cred,
                               const char *memory_limit, const char *node,
                               const char *allowlist)
{
    /* the allowlist only when there is one: records without keep the
     * authenticators they had */
    const char *fields[] = { "container-record-1", id, owner, tool, provider, cred,
                             memory_limit ? memory_limit : CI_DEFAULT_TIER, node,
                             allowlist };
    int n = (int)(sizeof(fields) / sizeof(fields[0]));
    return ci_record_auth(p, ci_owner_secret(), fields, allowlist ? n : n - 1);
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
                       ci_json_str(req, "memory_limit"), ci_dirclient_node(),
                       ci_json_str(req, "allowlist"));
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
                               ci_json_str(j, "memory_limit"), ci_json_str(j, "node"),
                               ci_json_str(j, "allowlist"))
                 : NULL;
    return ci_secret_equal(auth, want);
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

/* REQ asked of Redis at NOW (this node named in it): the answer, its
 * records checked, or NULL with *ERR. */
static json_object *redis_ask(server_rec *s, apr_pool_t *p, json_object *req,
                              const char **err)
{
    const ci_redis_conf *rc = ci_server_directory(s);
    const char *text, *answer = NULL, *perr = NULL, *op = ci_json_str(req, "op");
    apr_size_t len;
    json_object *ans;
    json_object_object_add(req, "node", json_object_new_string(ci_dirclient_node()));
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

static int redis_adopt(apr_pool_t *p, const char *owner, const ci_container *c,
                       const ci_sandbox_def *def, const char **err)
{
    json_object *req, *ans;
    int idle = c->idle_seconds > 0 ? c->idle_seconds : def->idle;
    if (def->provider->caps & CI_CAP_REMOTE)
        return 0;                 /* any node reaches its sandbox */
    req = ci_dirclient_shadow_request(p, "adopt", c->id);
    json_object_object_add(req, "owner", json_object_new_string(owner));
    json_object_object_add(req, "tool", json_object_new_string(c->tool ? c->tool
                                                                       : def->name));
    if (c->memory_limit)
        json_object_object_add(req, "memory_limit",
                               json_object_new_string(c->memory_limit));
    json_object_object_add(req, "idle", json_object_new_int(idle + SHADOW_GRACE));
    ans = ci_dirclient_supervisor_answer(p, req, err);
    /* dropped since the request found it (deleted on this node): not taken
     * on again; the supervisor's ATTACH then finds it gone, and the call is
     * answered so (ci_session's container_gone) */
    if (ans && ci_dirclient_status_of(ans) == CI_DIR_EXPIRED)
        return 0;
    if (!ans || ci_dirclient_status_of(ans) != CI_DIR_OK) {
        if (ans)
            *err = apr_psprintf(p, "it answered %s", ci_json_text(ans, NULL));
        return -1;
    }
    return 0;
}

/* The local sandboxes this node runs whose containers the shared
 * directory no longer has running (lost with Redis' data, say): ended now
 * rather than at their shadows' own expiry. */
static void redis_reconcile(server_rec *s, apr_pool_t *p)
{
    json_object *req, *ans, *ids, *gone;
    const char *err = NULL;
    apr_size_t i, n;
    if (!(ans = ci_dirclient_ask_supervisor(p, ci_dirclient_shadow_request(p, "shadows", NULL),
                                             &err)) ||
        !(ids = ci_json_get(ans, "ids", json_type_array)) ||
        !json_object_array_length(ids))
        return;
    req = ci_dirclient_shadow_request(p, "which_gone", NULL);
    json_object_object_add(req, "ids", json_object_get(ids));
    if (!(ans = redis_ask(s, p, req, &err)) ||
        !(gone = ci_json_get(ans, "gone", json_type_array)))
        return;
    for (i = 0, n = json_object_array_length(gone); i < n; i++) {
        const char *id = ci_json_idx_str(gone, i);
        if (!id)
            continue;
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "CI0838: the local sandbox of "
                     "container %s ends (once no request uses it): the shared directory "
                     "no longer has it running",
                     id);
        ci_dirclient_drop_local(s, p, id, 1);
    }
}

/* Every node claims from the shared directory: a container's expiry is
 * its own node's to act on, or any node's for a remote sandbox. */
static int claims_always(server_rec *s)
{
    return 1;
}

const ci_dirclient_backend ci_dirclient_redis = {
    .name = "redis",
    .ask = redis_ask,
    .claims = claims_always,
    .status = ci_supervisor_status,
    .adopt = redis_adopt,
    .reconcile = redis_reconcile,
    .marks_busy = 1,
    .shared = 1,
};

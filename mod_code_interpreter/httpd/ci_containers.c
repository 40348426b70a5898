/*
 * ci_containers.c - a request's container (ci_containers.h).
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_policy.h"
#include "ci_id.h"
#include "ci_containers.h"
#include <http_log.h>
#include "ci_settings.h"
#include "ci_skills_attach.h"
#include "ci_files_in.h"
#include "ci_citations.h"
#include "ci_crypto.h"
#include "ci_json.h"
#include "ci_owner.h"
#include "ci_registry.h"
#include "ci_audit.h"
#include "ci_dirclient.h"
#include "ci_request_state.h"
#include "ci_directory_ops.h"
#include "ci_module.h"

/* ---- the directory ---------------------------------------------------------- */

static void put_str(json_object *o, const char *key, const char *v)
{
    if (v)
        json_object_object_add(o, key, json_object_new_string(v));
}

/* REQ asked; the sandboxes its answer lets go are ended here. */
static json_object *dir_ask(request_rec *r, json_object *req)
{
    return ci_dirclient_ask_and_end(r->server, r->pool, req);
}

static json_object *dir_request(apr_pool_t *p, const char *op, const char *owner)
{
    return ci_dirclient_request(p, op, owner);
}

static ci_dir_status status_of(json_object *ans)
{
    return ci_dirclient_status_of(ans);
}

void ci_containers_unavailable(apr_pool_t *p, ci_error *err)
{
    ci_error_set(err, 503, CI_SERVER, NULL, "containers_unavailable", p,
                 "The container directory of this server is unavailable; retry "
                 "shortly.");
}

int ci_containers_capacity(ci_dir_status why)
{
    return why == CI_DIR_OWNER_FULL || why == CI_DIR_NODE_FULL || why == CI_DIR_BUDGET_FULL;
}

void ci_containers_refused(request_rec *r, ci_dir_status why, int status, ci_error *err)
{
    ci_server_conf *sc = ci_server_config(r->server);
    const char *type = status == 429 ? CI_INVALID : CI_SERVER;
    if (why == CI_DIR_OWNER_FULL)
        ci_error_set(err, status, type, NULL, "container_limit", r->pool,
                     "You hold as many containers as this server allows per caller "
                     "(CodeInterpreterMaxContainersPerOwner %d), all of them in use; "
                     "retry when one has been idle for %d s.",
                     ci_server_max_per_owner(sc), ci_server_eviction_grace(sc));
    else if (why == CI_DIR_BUDGET_FULL)
        ci_error_set(err, status, type, NULL, "memory_budget", r->pool,
                     "The containers of this server hold all the memory it allows "
                     "(CodeInterpreterMemoryBudget), all of them in use; retry shortly.");
    else
        ci_error_set(err, status, type, NULL, "sandbox_capacity", r->pool,
                     "This server runs as many containers as it allows "
                     "(CodeInterpreterMaxSandboxes %d%s), all of them in use; retry "
                     "shortly.", ci_server_max_sandboxes(sc),
                     ci_server_reserve(sc) > 0
                         ? apr_psprintf(r->pool, ", the last %d of them for callers that "
                                        "hold fewer", ci_server_reserve(sc)) : "");
    err->retry_after = CI_RETRY_AFTER_DEFAULT;
}

void ci_containers_note_admission(request_rec *r, const char *tool, const char *container,
                                  int waited, json_object *ans)
{
    ci_dir_status why = status_of(ans);
    json_object *evicted = ci_json_get(ans, "evicted", json_type_object);
    ci_registry_admission(waited, why, evicted != NULL);
    if (waited)
        ci_audit_admission(r, tool, container, "waited", NULL, NULL);
    if (evicted)
        ci_audit_admission(r, tool, container, "evicted", NULL, ci_json_str(evicted, "id"));
    if (ci_containers_capacity(why))
        ci_audit_admission(r, tool, container, "refused", ci_dirops_status_name(why), NULL);
}

/* Asked again while it is refused for room, until UNTIL: each refusal is a
 * pause of 50 ms, doubling to 400 ms. */
json_object *ci_containers_create_waiting(request_rec *r, json_object *req, apr_time_t until,
                                          int *waited)
{
    apr_interval_time_t pause = apr_time_from_msec(50);
    apr_array_header_t *evicted = NULL;
    json_object *ans;
    *waited = 0;
    while ((ans = ci_dirclient_ask(r->server, r->pool, req, &evicted)) &&
           ci_containers_capacity(status_of(ans)) && apr_time_now() + pause < until) {
        *waited = 1;
        apr_sleep(pause);
        if (pause < apr_time_from_msec(400))
            pause *= 2;
    }
    /* An idle container evicted to admit this one: its sandbox ends now,
     * not at its provider's own timeout. */
    if (ans)
        ci_dirclient_end(r->server, r->pool, evicted);
    return ans;
}

static int unavailable(request_rec *r, ci_error *err)
{
    ci_containers_unavailable(r->pool, err);
    return 503;
}

/* ---- item references ----------------------------------------------------- */

const char *ci_containers_recall(void *baton, const char *item_id,
                                 const char **container)
{
    ci_recall_baton *b = baton;
    json_object *req, *ans;
    *container = NULL;
    if (!b->owner)
        return NULL;
    req = dir_request(b->r->pool, "recall", b->owner);
    put_str(req, "item_id", item_id);
    if (!(ans = dir_ask(b->r, req))) {
        b->failed = 1;
        return NULL;
    }
    *container = ci_json_str(ans, "container_id");
    return ci_json_str(ans, "text");
}

/* ---- which container ------------------------------------------------------ */

static int not_found(request_rec *r, const char *id, const char *param, ci_error *err)
{
    ci_error_set(err, 404, CI_INVALID, param,
                 "container_not_found", r->pool,
                 "Container with id '%s' not found.", id);
    return 404;
}

static int expired(request_rec *r, const char *id, const char *param, ci_error *err)
{
    ci_error_set(err, 400, CI_INVALID, param,
                 "container_expired", r->pool,
                 "Container with id '%s' has expired and can no longer be used; "
                 "use a new container.", id);
    return 400;
}

static int hold_seconds(request_rec *r, const ci_req_state *st);
static int hold_seconds_from(request_rec *r, apr_time_t started);
static void held_by(request_rec *r, ci_req_state *st, const char *id, json_object *ans);
static ci_dir_status status_of(json_object *ans);

/* The container ID of the owner: its status, NULL answer when unreachable.
 * TOUCH: a use, and the intercepted request holds it until it is done (it
 * is then neither evicted nor expired under its feet). */
static json_object *lookup(request_rec *r, const char *owner, const char *id, int touch)
{
    json_object *req = dir_request(r->pool, "get", owner), *ans;
    ci_req_state *st = touch ? ci_request_state(r) : NULL;
    put_str(req, "id", id);
    json_object_object_add(req, "touch", json_object_new_boolean(touch));
    if (st)
        json_object_object_add(req, "hold", json_object_new_int(hold_seconds(r, st)));
    ans = dir_ask(r, req);
    if (st && ans && status_of(ans) == CI_DIR_OK)
        held_by(r, st, id, ans);
    return ans;
}

/* The container ANS names runs on another node (ci_dirclient_elsewhere). */
static int elsewhere(request_rec *r, json_object *ans, ci_error *err)
{
    ci_container c;
    return !ci_dirclient_container(r->pool, ans, "container", &c) &&
           ci_dirclient_elsewhere(r, &c, err);
}

const ci_sandbox_def *ci_containers_tool(request_rec *r, const ci_container *c)
{
    return ci_sandbox_of_container(r->server, r->pool, c->tool, c->provider, c->allowlist);
}

/* Whether the container ANS names can run here: its own tool (the one it
 * was made with, whatever this location's is) is still declared, on the
 * provider it was made with (a reload may have removed the tool, or
 * declared it again on another provider). */
static int still_served(request_rec *r, json_object *ans)
{
    ci_container c;
    return !ci_dirclient_container(r->pool, ans, "container", &c) &&
           ci_containers_tool(r, &c) != NULL;
}

static int no_longer_served(request_rec *r, const char *id, const char *param,
                            ci_error *err)
{
    ci_error_set(err, 400, CI_INVALID, param,
                 "container_unavailable", r->pool,
                 "Container with id '%s' runs on a sandbox tool this server no longer "
                 "serves (it was removed or changed); use a new container.", id);
    return 400;
}

static int resolve_explicit(request_rec *r, ci_req_state *st, ci_error *err)
{
    const char *id = st->req->container_id;
    json_object *ans;
    if (!st->owner)
        return not_found(r, id, st->req->container_param, err);
    if (!(ans = lookup(r, st->owner, id, 1)))
        return unavailable(r, err);
    switch (status_of(ans)) {
    case CI_DIR_OK:
        break;
    case CI_DIR_EXPIRED:
        return expired(r, id, st->req->container_param, err);
    default:
        return not_found(r, id, st->req->container_param, err);
    }
    if (!still_served(r, ans))
        return no_longer_served(r, id, st->req->container_param, err);
    if (elsewhere(r, ans, err))
        return 409;
    st->container_id = id;
    st->container_exists = 1;
    st->container_found = ans;
    return OK;
}

/* The container's part of a "response" or "conversation" answer with
 * touch, shaped as the answer to "get" (lookup) for it; NULL when there is
 * none. */
static json_object *chained_lookup(request_rec *r, ci_req_state *st, json_object *ans)
{
    const char *status = ci_json_str(ans, "container_status");
    json_object *container = ci_json_get(ans, "container", json_type_object);
    json_object *out;
    if (!status)
        return NULL;
    out = ci_json_own(r->pool, json_object_new_object());
    put_str(out, "status", status);
    if (container)
        json_object_object_add(out, "container", json_object_get(container));
    if (status_of(out) == CI_DIR_OK)
        held_by(r, st, ci_json_str(ans, "container_id"), out);
    return out;
}

/* ---- the chain's question, asked before the parse ------------------------- */

/* What leads a turn to the container of the turns before it: the previous
 * response (the directory's "response", by its id), or the conversation
 * ("conversation", by the owner's conversation id). A request names one at
 * most (ci_request refuses both). */
typedef struct chain_link {
    const char *op;               /* the directory's question */
    const char *field;            /* the question's member naming it */
    const char *id;               /* the response's or the conversation's id */
} chain_link;

static const chain_link by_response = { "response", "response_id", NULL };
static const chain_link by_conversation = { "conversation", "conversation", NULL };

/* REQ's link to the turns before it into *LINK: 0, or -1 when it has none. */
static int chain_of(const ci_request *req, chain_link *link)
{
    if (!req->previous_response_id && !req->conversation_id)
        return -1;
    *link = req->previous_response_id ? by_response : by_conversation;
    link->id = req->previous_response_id ? req->previous_response_id
                                         : req->conversation_id;
    return 0;
}

struct ci_early_chain {
    request_rec *r;
    const char *owner;
    chain_link link;              /* the one the body named, by the scan */
    ci_dir_sent *sent;            /* NULL once its answer was taken */
};

/* The chain's question: the container LINK led to and the outputs it is
 * owed; with TOUCH, the same question looks the container up for use and
 * holds it for HOLD seconds. */
static json_object *chain_request(apr_pool_t *p, const char *owner, const chain_link *link,
                                  int touch, int hold)
{
    json_object *req = dir_request(p, link->op, owner);
    put_str(req, link->field, link->id);
    if (touch) {
        json_object_object_add(req, "touch", json_object_new_boolean(1));
        json_object_object_add(req, "hold", json_object_new_int(hold));
    }
    return req;
}

/* Let go of the hold an early answer ANS took for a request that does not
 * go on in that container: a finish that records nothing, and no use (the
 * question was the use; this may come after the request's answer). */
static void let_go_early(request_rec *r, apr_pool_t *p, const char *owner, json_object *ans)
{
    const char *cid = ci_json_str(ans, "container_id");
    const char *status = ci_json_str(ans, "container_status");
    json_object *req;
    if (!cid || !status || ci_dirops_status_of(status) != CI_DIR_OK)
        return;
    req = dir_request(p, "finish", owner);
    put_str(req, "container_id", cid);
    json_object_object_add(req, "touch", json_object_new_boolean(0));
    ci_dirclient_ask_and_end(r->server, p, req);
}

/* The request ended without taking the early answer (refused, passed
 * through, or it named no such response after all): read it, and let go
 * of what it held. */
static apr_status_t early_left(void *data)
{
    struct ci_early_chain *e = data;
    apr_pool_t *p;
    json_object *ans;
    if (!e->sent)
        return APR_SUCCESS;
    apr_pool_create(&p, NULL);
    if ((ans = ci_dirclient_receive_and_end(e->r->server, p, e->sent)))
        let_go_early(e->r, p, e->owner, ans);
    e->sent = NULL;
    apr_pool_destroy(p);
    return APR_SUCCESS;
}

void ci_containers_chain_early_unused(ci_recall_baton *b)
{
    if (b->early)
        early_left(b->early);
}

/* The link BODY names, by a scan (no parse) of its top level, into *LINK:
 * 0, or -1 when it names none. A conversation given as {"id": ...} is not
 * seen here: its question is asked after the parse. */
static int scanned_link(apr_pool_t *p, const char *body, apr_size_t len, chain_link *link)
{
    const char *id;
    if ((id = ci_json_top_string(p, body, len, "previous_response_id")))
        *link = by_response;
    else if ((id = ci_json_top_string(p, body, len, "conversation")))
        *link = by_conversation;
    else
        return -1;
    link->id = id;
    return 0;
}

void ci_containers_ask_chain_early(ci_recall_baton *b, const char *body, apr_size_t len)
{
    request_rec *r = b->r;
    struct ci_early_chain *e;
    chain_link link;
    if (!b->owner || !ci_dirclient_sends_ahead(r->server) ||
        scanned_link(r->pool, body, len, &link))
        return;
    e = apr_pcalloc(r->pool, sizeof(*e));
    e->r = r;
    e->owner = b->owner;
    e->link = link;
    e->sent = ci_dirclient_send(r->server, r->pool,
                                chain_request(r->pool, b->owner, &link, 1,
                                              hold_seconds_from(r, apr_time_now())));
    b->early = e;
    apr_pool_pre_cleanup_register(r->pool, e, early_left);
}

/* The early answer for ST's chain, when one was asked for this very
 * LINK: taken (NULL otherwise, or when it could not be had). */
static json_object *early_answer(request_rec *r, ci_req_state *st, const chain_link *link,
                                 int *asked)
{
    struct ci_early_chain *e = st->early_chain;
    json_object *ans;
    *asked = e && e->sent && !strcmp(e->link.op, link->op) &&
             !strcmp(e->link.id, link->id);
    if (!*asked)
        return NULL;
    ans = ci_dirclient_receive_and_end(r->server, r->pool, e->sent);
    e->sent = NULL;
    return ans;
}

/* The outputs the upstream is owed for the calls of the turn before
 * (PENDING, from the chain's answer) go before the input. A conversation's
 * last container is noted: the turn's finish records that they were brought
 * even when it makes no container (ci_containers_finish). */
static void bring_owed(request_rec *r, ci_req_state *st, const chain_link *link,
                       const char *pending, const char *container)
{
    if (ci_request_prepend_input(r->pool, st->req, pending) != 0) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "CI0802: the outputs owed to "
                      "%s %s were not understood", link->op, link->id);
        return;
    }
    if (!strcmp(link->op, by_conversation.op))
        st->conversation_owed = apr_pstrdup(r->pool, container);
}

/* The container the previous response or the conversation led to, and the
 * outputs it is owed. When the turn goes on in that container (no other
 * named), the same question also looks it up for use (*FOUND, as lookup
 * answers). The question may have been sent before the parse (ci_
 * containers_ask_chain_early), always looking up for use: a turn that names
 * another container lets that hold go. */
static int follow_chain(request_rec *r, ci_req_state *st, const char **container,
                        json_object **found, ci_error *err)
{
    json_object *ans;
    const char *pending;
    int goes_on = !st->req->container_id && !st->req->context_container, early;
    chain_link link;
    *container = NULL;
    *found = NULL;
    if (chain_of(st->req, &link) || !st->owner)
        return OK;
    ans = early_answer(r, st, &link, &early);
    if (!early)
        ans = dir_ask(r, chain_request(r->pool, st->owner, &link, goes_on,
                                       hold_seconds(r, st)));
    if (!ans)
        return unavailable(r, err);
    if (early && !goes_on)
        let_go_early(r, r->pool, st->owner, ans);
    *container = ci_json_str(ans, "container_id");
    *found = *container && goes_on ? chained_lookup(r, st, ans) : NULL;
    if ((pending = ci_json_str(ans, "pending")) && *container)
        bring_owed(r, st, &link, pending, *container);
    return OK;
}

/* "auto": the context's latest container when it still runs; a new one
 * otherwise (made at the first call), the model told when the context's
 * has expired. */
static int resolve_auto(request_rec *r, ci_req_state *st, const char *chained,
                        json_object *found, ci_error *err)
{
    const char *named = st->req->context_container ? st->req->context_container
                                                   : chained;
    json_object *ans;
    st->container_id = ci_mint_id(r->pool, "cntr_", 24);
    if (!named || !st->owner)
        return OK;
    if (!(ans = named == chained && found ? found : lookup(r, st->owner, named, 1)))
        return unavailable(r, err);
    switch (status_of(ans)) {
    case CI_DIR_OK:
        if (!still_served(r, ans)) {
            /* the turn goes on in a new container, whose hold lets go of
             * this one (held_by) */
            st->container_lost = apr_pstrdup(r->pool, named);
            st->container_lost_tool = 1;
            break;
        }
        if (elsewhere(r, ans, err))
            return 409;
        st->container_id = apr_pstrdup(r->pool, named);
        st->container_exists = 1;
        st->container_found = ans;
        break;
    case CI_DIR_EXPIRED:
        st->container_lost = apr_pstrdup(r->pool, named);
        break;
    default:                      /* unknown or another's: a new one */
        break;
    }
    return OK;
}

static int check_tier(request_rec *r, ci_req_state *st, ci_error *err)
{
    const ci_sandbox_def *tiered;
    const char *why = st->req->memory_limit
        ? ci_sandbox_def_tier(r->pool, st->sandbox, st->req->memory_limit, &tiered)
        : NULL;
    if (!why)
        return OK;
    ci_error_set(err, 400, CI_INVALID,
                 apr_pstrcat(r->pool, st->req->settings_param, ".memory_limit", NULL),
                 "invalid_value", r->pool, "%s", why);
    return 400;
}

/* file_ids: each one the caller's at the upstream, before round 1 (its
 * content is fetched when the container is made). */
static int check_file_ids(request_rec *r, ci_req_state *st, ci_error *err)
{
    if (!st->owner) {
        ci_error_set(err, 400, CI_INVALID, "file_ids", "missing_credentials", r->pool,
                     "Container files need a caller: this request carries no "
                     "credentials.");
        return 400;
    }
    return ci_files_check_ids(r, ci_loc_config(r), st->req->file_ids, "file_ids",
                              &st->upstream_files, err);
}

int ci_containers_check_allowlist(apr_pool_t *p, const ci_sandbox_def *tool,
                                  const apr_array_header_t *domains,
                                  const apr_array_header_t *secrets, const char *param,
                                  ci_error *err)
{
    int i;
    if (!domains)
        return OK;
    if (secrets && tool->egress && !(tool->provider->caps & CI_CAP_SECRETS)) {
        ci_error_set(err, 400, CI_INVALID, apr_pstrcat(p, param, ".domain_secrets", NULL),
                     "unsupported_parameter", p, "Domain secrets are not supported by the "
                     "sandbox tool '%s' (provider %s): its sandboxes reach the internet "
                     "without this server's egress proxy.", tool->name,
                     tool->provider->name);
        return 400;
    }
    if (!tool->egress) {
        ci_error_set(err, 400, CI_INVALID, param, "unsupported_parameter", p,
                     "Network allowlists are not enabled for the sandbox tool '%s' on "
                     "this server (egress=off).", tool->name);
        return 400;
    }
    for (i = 0; i < domains->nelts; i++) {
        const char *d = APR_ARRAY_IDX(domains, i, const char *);
        if (ci_sandbox_def_domain_allowed(p, tool, d))
            continue;
        ci_error_set(err, 400, CI_INVALID,
                     apr_psprintf(p, "%s.allowed_domains[%d]", param, i),
                     "domain_not_allowed", p, "The domain '%s' is not allowed for the "
                     "sandbox tool '%s' on this server.", d, tool->name);
        return 400;
    }
    return OK;
}

int ci_containers_resolve(request_rec *r, ci_req_state *st, ci_error *err)
{
    const char *chained = NULL;
    json_object *found = NULL;
    int rc;
    if ((rc = check_tier(r, st, err)) != OK)
        return rc;
    if ((rc = ci_containers_check_allowlist(r->pool, st->sandbox, st->req->allowed_domains,
                                            st->req->secrets, st->req->network_param,
                                            err)) != OK)
        return rc;
    if ((rc = follow_chain(r, st, &chained, &found, err)) != OK)
        return rc;
    if (st->req->file_ids && (rc = check_file_ids(r, st, err)) != OK)
        return rc;
    if (st->req->container_id)
        return resolve_explicit(r, st, err);
    return resolve_auto(r, st, chained, found, err);
}

const char *ci_containers_lost_notice(apr_pool_t *p, const char *old_id, int tool_gone)
{
    return apr_psprintf(p, "Note: container %s of the earlier turns %s. This code runs "
                           "in a new container: variables, imports and files from before "
                           "are gone and must be recreated.", old_id,
                        tool_gone ? "runs on a sandbox tool this server no longer serves"
                                  : "has expired");
}

/* ---- the first execution ---------------------------------------------------- */

json_object *ci_containers_create_request(request_rec *r, const char *owner,
                                          const ci_sandbox_def *tool, const char *tier,
                                          const char *allowlist, const char *secrets,
                                          const char *id, const char *name, int idle,
                                          int hold)
{
    ci_server_conf *sc = ci_server_config(r->server);
    json_object *req = dir_request(r->pool, "create", owner);
    json_object *l = json_object_new_object();
    const ci_sandbox_def *tiered = tool;
    ci_sandbox_def_tier(r->pool, tool, tier ? tier : CI_DEFAULT_TIER, &tiered);
    put_str(req, "id", id);
    put_str(req, "name", name);
    put_str(req, "tool", tool->name);
    put_str(req, "provider", tool->provider->name);
    put_str(req, "cred", ci_registry_cred_digest(r->pool, tool));
    put_str(req, "memory_limit", tier);
    put_str(req, "allowlist", allowlist);
    put_str(req, "secrets", secrets);
    json_object_object_add(req, "memory_bytes",
                           json_object_new_int64((apr_int64_t)tiered->rss_bound));
    json_object_object_add(req, "idle", json_object_new_int(idle));
    json_object_object_add(l, "node", json_object_new_int(ci_server_max_sandboxes(sc)));
    json_object_object_add(l, "owner", json_object_new_int(ci_server_max_per_owner(sc)));
    json_object_object_add(l, "retention", json_object_new_int(tool->retention));
    json_object_object_add(l, "budget", json_object_new_int64(
                               (apr_int64_t)sc->memory_budget));
    json_object_object_add(l, "grace", json_object_new_int(ci_server_eviction_grace(sc)));
    json_object_object_add(l, "reserve", json_object_new_int(ci_server_reserve(sc)));
    json_object_object_add(req, "limits", l);
    if (hold > 0)
        json_object_object_add(req, "hold", json_object_new_int(hold));
    return req;
}

/* Seconds the request ST holds its container: what is left of its deadline
 * (and a minute more: its last answer is written after). */
static int hold_seconds_from(request_rec *r, apr_time_t started)
{
    apr_time_t end = started + ci_loc_deadline(ci_loc_config(r));
    apr_time_t now = apr_time_now();
    return (int)apr_time_sec(end > now ? end - now : 0) + 60;
}

static int hold_seconds(request_rec *r, const ci_req_state *st)
{
    return hold_seconds_from(r, st->started);
}

/* When a request waiting for room gives up: the capacity wait, within its
 * deadline. */
static apr_time_t wait_until(request_rec *r, const ci_req_state *st)
{
    apr_time_t end = st->started + ci_loc_deadline(ci_loc_config(r));
    apr_time_t until = apr_time_now() +
                       apr_time_from_sec(ci_server_capacity_wait(ci_server_config(r->server)));
    return until < end ? until : end;
}

/* The answer that found ST's container at resolve, when the first call may
 * use it rather than ask again: a local sandbox's. A container deleted in
 * between is then found gone where its sandbox is, since the supervisor's
 * ATTACH checks that the container still runs, and the call is answered so
 * (ci_session's container_gone). With a shared directory too: a local
 * container is deleted on its own node only (ci_containers_api), or
 * expired by that node's claim, either of which drops its shadow in this
 * node's supervisor, which does not take a dropped shadow on again
 * (ci_dirclient_adopt; a held container is neither evicted nor expired
 * meanwhile). A remote sandbox's is asked again: it may still answer
 * while its deletion is on its way. */
static json_object *found_at_resolve(request_rec *r, ci_req_state *st)
{
    json_object *ans = st->container_found;
    const ci_sandbox_def *def;
    ci_container c;
    st->container_found = NULL;
    if (!ans || ci_dirclient_container(r->pool, ans, "container", &c) ||
        !(def = ci_containers_tool(r, &c)) || (def->provider->caps & CI_CAP_REMOTE))
        return NULL;
    return ans;
}

apr_status_t ci_containers_ensure(request_rec *r, ci_req_state *st,
                                  ci_container *out, ci_error *err)
{
    json_object *req, *ans;
    ci_dir_status why;
    int waited = 0;
    apr_time_t began;
    if (st->container_exists) {
        if (!(ans = found_at_resolve(r, st)) &&
            !(ans = lookup(r, st->owner, st->container_id, 1)))
            return unavailable(r, err), APR_EGENERAL;
        if ((why = status_of(ans)) != CI_DIR_OK) {
            ci_error_set(err, 400, CI_INVALID, NULL, "container_expired", r->pool,
                         "Container with id '%s' has expired and can no longer be "
                         "used; use a new container.", st->container_id);
            return APR_EGENERAL;
        }
    }
    else {
        req = ci_containers_create_request(r, st->owner, st->sandbox,
                                           st->req->memory_limit,
                                           ci_domains_join(r->pool, st->req->allowed_domains),
                                           st->req->secrets && st->container_id
                                               ? ci_dirclient_seal_secrets(
                                                     r->pool, st->container_id,
                                                     st->req->secrets)
                                               : NULL,
                                           st->container_id, NULL, st->sandbox->idle,
                                           hold_seconds(r, st));
        put_str(req, "skills", st->skills);
        began = apr_time_now();
        ans = ci_containers_create_waiting(r, req, wait_until(r, st), &waited);
        /* for the access log: %{ci-admit-wait-us}n, the time spent waiting
         * for room (0: admitted at once) */
        apr_table_setn(r->notes, "ci-admit-wait-us", apr_psprintf(
                           r->pool, "%" APR_TIME_T_FMT, waited ? apr_time_now() - began : 0));
        if (!ans)
            return unavailable(r, err), APR_EGENERAL;
        ci_containers_note_admission(r, st->sandbox->name, st->container_id, waited, ans);
        if ((why = status_of(ans)) != CI_DIR_OK) {
            ci_containers_refused(r, why, 503, err);
            ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "CI0807: no container for this "
                          "request: %s", ci_dirops_status_name(why));
            return APR_EAGAIN;
        }
        st->container_exists = 1;
        held_by(r, st, st->container_id, ans);
        ci_skills_attach_audit(r, st->container_id, st->owner, st->skills);
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "CI0803: container %s created "
                      "(tool %s)%s%s", st->container_id, st->sandbox->name,
                      ci_json_get(ans, "evicted", json_type_object)
                          ? "; evicted the caller's least recently used " : "",
                      ci_json_get(ans, "evicted", json_type_object)
                          ? ci_json_str(ci_json_get(ans, "evicted", json_type_object), "id")
                          : "");
    }
    if (ci_dirclient_container(r->pool, ans, "container", out) != 0)
        return unavailable(r, err), APR_EGENERAL;
    return APR_SUCCESS;
}

void ci_containers_set_handle(request_rec *r, apr_pool_t *p, ci_req_state *st,
                              const char *handle)
{
    ci_dirclient_record_handle(r, p, st->owner, st->container_id, handle);
}

void ci_containers_expired(request_rec *r, ci_req_state *st)
{
    json_object *req = dir_request(r->pool, "expire", st->owner);
    put_str(req, "id", st->container_id);
    dir_ask(r, req);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "CI0805: container %s expired at its "
                  "sandbox's provider", st->container_id);
}

/* ---- what the response leaves ------------------------------------------------ */

/* Let go of the container ST holds: a finish that records nothing (it may
 * then be evicted once idle, and expires with its idle time). */
static void let_go_now(request_rec *r, apr_pool_t *p, ci_req_state *st)
{
    json_object *req = dir_request(p, "finish", st->owner);
    put_str(req, "container_id", st->container_held);
    st->container_held = NULL;
    ci_dirclient_ask_and_end(r->server, p, req);
}

/* The end of a request that held its container without finishing (an
 * error, a client gone): the hold is let go now rather than at its lease's
 * end, so that the container may be evicted once idle. */
static apr_status_t let_go(void *data)
{
    request_rec *r = data;
    ci_req_state *st = ci_request_state(r);
    apr_pool_t *p;
    if (!st || !st->container_held || !st->owner)
        return APR_SUCCESS;
    apr_pool_create(&p, NULL);
    let_go_now(r, p, st);
    apr_pool_destroy(p);
    return APR_SUCCESS;
}

/* ST holds container ID now (ANS: the answer that found or made it). A
 * request holds one container at a time: one
 * it held before and goes on without (the chain's, whose tool a reload
 * removed, when the turn moves to a new container) is let go first, else it
 * stays held for the rest of the lease (the request's deadline and a
 * minute), neither evicted nor expired, its remote sandbox running on. */
static void held_by(request_rec *r, ci_req_state *st, const char *id, json_object *ans)
{
    ci_container c;
    /* held, it lives at least until the hold ends and its idle time passes
     * after: the credentials it was made with are kept that long */
    if (!ci_dirclient_container(r->pool, ans, "container", &c))
        ci_dirclient_needs_cred(&c, apr_time_now() +
                                    apr_time_from_sec(hold_seconds(r, st)));
    if (st->container_held && strcmp(st->container_held, id))
        let_go_now(r, r->pool, st);
    else if (!st->container_held)
        apr_pool_pre_cleanup_register(r->pool, r, let_go);
    st->container_held = apr_pstrdup(r->pool, id);
}

/* A conversation's turn that made no container but brought the outputs
 * its last container was owed: that they were brought is recorded (the
 * conversation stays with that container, owed nothing), or the next turn
 * would bring them again. No use of it, nothing remembered. */
static ci_dir_sent *owed_brought(request_rec *r, ci_req_state *st)
{
    json_object *req = dir_request(r->pool, "finish", st->owner);
    put_str(req, "container_id", st->conversation_owed);
    put_str(req, "conversation", st->req->conversation_id);
    json_object_object_add(req, "touch", json_object_new_boolean(0));
    if (st->container_held && !strcmp(st->container_held, st->conversation_owed))
        st->container_held = NULL;            /* this finish lets go of its hold */
    return ci_dirclient_send(r->server, r->pool, req);
}

ci_dir_sent *ci_containers_finish(request_rec *r, ci_req_state *st, ci_loop *loop,
                                  const char *response_id)
{
    ci_dir_sent *sent;
    const char *pending = NULL;
    apr_array_header_t *mem;
    json_object *req, *items;
    int i;
    if (!st->owner)
        return NULL;
    if (!st->container_exists)
        return st->conversation_owed ? owed_brought(r, st) : NULL;
    mem = ci_loop_memory(loop, r->pool, &pending);
    req = dir_request(r->pool, "finish", st->owner);
    put_str(req, "container_id", st->container_id);
    put_str(req, "response_id", response_id);
    put_str(req, "conversation", st->req->conversation_id);
    put_str(req, "pending", pending);
    items = json_object_new_array();
    for (i = 0; i < mem->nelts; i++) {
        ci_memory *m = &APR_ARRAY_IDX(mem, i, ci_memory);
        json_object *it = json_object_new_object();
        put_str(it, "id", m->item_id);
        put_str(it, "text", m->text);
        json_object_array_add(items, it);
    }
    json_object_object_add(req, "items", items);
    sent = ci_dirclient_send(r->server, r->pool, req);
    if (st->container_held && !strcmp(st->container_held, st->container_id))
        st->container_held = NULL;
    return sent;
}

void ci_containers_finished(request_rec *r, ci_dir_sent *sent)
{
    if (sent)
        ci_dirclient_receive_and_end(r->server, r->pool, sent);
}

/* ---- files out: what the final text may cite ------------------------------ */

typedef struct cite_baton {
    request_rec *r;
    ci_req_state *st;
} cite_baton;

/* The container's files, for the citer; NULL when it has none to cite (no
 * container was made) or they cannot be read. */
static apr_array_header_t *files_to_cite(void *baton, apr_pool_t *p)
{
    cite_baton *b = baton;
    apr_array_header_t *files = NULL;
    json_object *ans;
    ci_container c;
    ci_file_target t;
    ci_error err;
    const char *why = NULL;
    if (!b->st->container_exists ||
        !(ans = lookup(b->r, b->st->owner, b->st->container_id, 0)) ||
        status_of(ans) != CI_DIR_OK ||
        ci_dirclient_container(b->r->pool, ans, "container", &c) ||
        ci_files_target(b->r, b->st->owner, &c, 0, &t, &err) != OK)
        return NULL;
    if (t.def->provider->files_list(p, &t, &files, &why) != CI_FILE_OK) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, b->r, "CI0806: the files of container "
                      "%s could not be read for citations: %s", c.id,
                      why ? why : "unknown reason");
        return NULL;
    }
    return files;
}

ci_citer *ci_containers_citer(request_rec *r, ci_req_state *st)
{
    cite_baton *b;
    if (!st->owner)
        return NULL;          /* its sandbox ends with the request: nothing to cite */
    b = apr_palloc(r->pool, sizeof(*b));
    b->r = r;
    b->st = st;
    return ci_citer_create(r->pool, st->container_id, files_to_cite, b);
}

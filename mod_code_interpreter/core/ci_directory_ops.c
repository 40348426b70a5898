/*
 * ci_directory_ops.c - the directory's operations, JSON in and out (ci_directory_ops.h).
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_crypto.h"
#include "ci_json.h"
#include "ci_directory_ops.h"

#define PENDING_PREFIX "pending:"
/* A conversation's owed outputs, remembered as an item of this name plus
 * "OWNER:CONVERSATION" (ci_directory.lua names it alike: the items' bound
 * counts the same bytes in both). */
#define CONVERSATION_PENDING_PREFIX "conversation-pending:"
#define MAX_LIST 100

static const char *const status_names[] = {
    "ok", "not_found", "expired", "owner_full", "node_full", "no_owner", "budget_full"
};

const char *ci_dirops_status_name(ci_dir_status st)
{
    return (unsigned)st < sizeof(status_names) / sizeof(*status_names)
        ? status_names[st] : "bad_request";
}

ci_dir_status ci_dirops_status_of(const char *name)
{
    unsigned i;
    for (i = 0; name && i < sizeof(status_names) / sizeof(*status_names); i++)
        if (!strcmp(name, status_names[i]))
            return (ci_dir_status)i;
    return CI_DIR_NOT_FOUND;
}

static const char *const cntr_status_names[] = { "running", "expired", "deleted" };

static void add_str(json_object *o, const char *key, const char *v)
{
    json_object_object_add(o, key, v ? json_object_new_string(v) : NULL);
}

/* A container as JSON (owned by P). */
static json_object *ci_dirops_container_json(apr_pool_t *p, const ci_container *c)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    add_str(o, "id", c->id);
    add_str(o, "name", c->name);
    add_str(o, "tool", c->tool);
    add_str(o, "memory_limit", c->memory_limit);
    add_str(o, "handle", c->handle);
    json_object_object_add(o, "created_at", json_object_new_int64(c->created_at));
    json_object_object_add(o, "last_active_at", json_object_new_int64(c->last_active_at));
    json_object_object_add(o, "idle_seconds", json_object_new_int(c->idle_seconds));
    json_object_object_add(o, "memory_bytes", json_object_new_int64(
                               (apr_int64_t)c->memory_bytes));
    add_str(o, "status", cntr_status_names[c->status]);
    if (c->node)                                  /* a shared directory's */
        add_str(o, "node", c->node);
    add_str(o, "provider", c->provider);
    add_str(o, "cred", c->cred);
    if (c->allowlist)
        add_str(o, "allowlist", c->allowlist);
    if (c->secrets)
        add_str(o, "secrets", c->secrets);
    if (c->skills)
        add_str(o, "skills", c->skills);
    return o;
}

static const char *dup_str(apr_pool_t *p, json_object *j, const char *key)
{
    const char *s = ci_json_str(j, key);
    return s ? apr_pstrdup(p, s) : NULL;
}

static apr_int64_t int_of(json_object *j, const char *key, apr_int64_t dflt)
{
    json_object *v = ci_json_get(j, key, json_type_int);
    return v ? json_object_get_int64(v) : dflt;
}

int ci_dirops_container_from(apr_pool_t *p, json_object *j, ci_container *out)
{
    const char *st = ci_json_str(j, "status");
    unsigned i;
    memset(out, 0, sizeof(*out));
    if (!json_object_is_type(j, json_type_object) || !(out->id = dup_str(p, j, "id")) ||
        !st)
        return -1;
    out->name = dup_str(p, j, "name");
    out->tool = dup_str(p, j, "tool");
    out->memory_limit = dup_str(p, j, "memory_limit");
    out->handle = dup_str(p, j, "handle");
    out->node = dup_str(p, j, "node");
    out->provider = dup_str(p, j, "provider");
    out->cred = dup_str(p, j, "cred");
    out->allowlist = dup_str(p, j, "allowlist");
    out->secrets = dup_str(p, j, "secrets");
    out->skills = dup_str(p, j, "skills");
    out->created_at = int_of(j, "created_at", 0);
    out->last_active_at = int_of(j, "last_active_at", 0);
    out->idle_seconds = (int)int_of(j, "idle_seconds", 0);
    out->memory_bytes = (apr_uint64_t)int_of(j, "memory_bytes", 0);
    for (i = 0; i < 3 && strcmp(st, cntr_status_names[i]); i++)
        ;
    if (i == 3)
        return -1;
    out->status = (ci_cntr_status)i;
    return 0;
}

/* ---- the operations ------------------------------------------------------ */

typedef struct op {
    ci_directory *d;
    apr_pool_t *p;
    json_object *req, *ans;
    const char *owner;
    apr_time_t now;
    apr_array_header_t *gone;
    int missed;                 /* a lookup of what a finish records found nothing */
} op;

static void answer_status(op *o, ci_dir_status st)
{
    add_str(o->ans, "status", ci_dirops_status_name(st));
}

static void answer_container(op *o, const char *key, const ci_container *c)
{
    json_object_object_add(o->ans, key,
                           json_object_get(ci_dirops_container_json(o->p, c)));
}

static void take_limits(op *o)
{
    json_object *l = ci_json_get(o->req, "limits", json_type_object);
    ci_directory_limits lim;
    if (!l)
        return;
    lim.max_containers = (int)int_of(l, "node", 0);
    lim.max_per_owner = (int)int_of(l, "owner", 0);
    lim.retention = apr_time_from_sec(int_of(l, "retention", 3600));
    lim.max_items_bytes = (apr_size_t)int_of(l, "items", 64 << 20);
    lim.memory_budget = (apr_uint64_t)int_of(l, "budget", 0);
    lim.grace = apr_time_from_sec(int_of(l, "grace", 0));
    lim.reserve = (int)int_of(l, "reserve", 0);
    ci_directory_set_limits(o->d, &lim);
}

/* The request asking holds C for "hold" seconds (its deadline), when it
 * says so: neither evicted nor expired before it is done. */
static void hold(op *o, ci_container *c)
{
    apr_int64_t seconds = int_of(o->req, "hold", 0);
    if (seconds > 0)
        ci_directory_hold(o->d, c, o->now + apr_time_from_sec(seconds));
}

static void op_create(op *o)
{
    ci_container *c = NULL, *evicted = NULL;
    const char *tool = ci_json_str(o->req, "tool");
    int idle = (int)int_of(o->req, "idle", 20 * 60);
    ci_dir_status st;
    if (!tool || idle < 1) {
        add_str(o->ans, "status", "bad_request");
        return;
    }
    take_limits(o);
    st = ci_directory_create_container(o->d, o->owner, ci_json_str(o->req, "id"),
                                       ci_json_str(o->req, "name"), tool,
                                       ci_json_str(o->req, "memory_limit"),
                                       (apr_uint64_t)int_of(o->req, "memory_bytes", 0), idle,
                                       o->now, &c, &evicted);
    if (c) {
        ci_directory_set_origin(o->d, c, ci_json_str(o->req, "provider"),
                                ci_json_str(o->req, "cred"));
        ci_directory_set_network(o->d, c, ci_json_str(o->req, "allowlist"),
                                 ci_json_str(o->req, "secrets"));
        ci_directory_set_skills(o->d, c, ci_json_str(o->req, "skills"));
        hold(o, c);
    }
    answer_status(o, st);
    if (c)
        answer_container(o, "container", c);
    if (evicted) {
        answer_container(o, "evicted", evicted);
        *(const char **)apr_array_push(o->gone) = apr_pstrdup(o->p, evicted->id);
    }
}

/* Container ID of the asker (another owner's reads as unknown). */
static ci_dir_status get_by_id(op *o, const char *id, ci_container **c)
{
    return ci_directory_get(o->d, id, o->owner, c);
}

static ci_dir_status get_named(op *o, ci_container **c)
{
    return get_by_id(o, ci_json_str(o->req, "id"), c);
}

/* Container ID of the asker, touched and held by the asking request when
 * it says "touch": its status, *C the record (or NULL). */
static ci_dir_status get_for_use(op *o, const char *id, ci_container **c)
{
    json_object *touch = ci_json_get(o->req, "touch", json_type_boolean);
    ci_dir_status st = get_by_id(o, id, c);
    if (st == CI_DIR_OK && touch && json_object_get_boolean(touch)) {
        ci_directory_touch(o->d, *c, o->now);
        hold(o, *c);
    }
    return st;
}

static void op_get(op *o)
{
    ci_container *c;
    ci_dir_status st = get_for_use(o, ci_json_str(o->req, "id"), &c);
    answer_status(o, st);
    if (c)
        answer_container(o, "container", c);
}

static void op_set_handle(op *o)
{
    ci_container *c;
    ci_dir_status st = get_named(o, &c);
    if (st == CI_DIR_OK)
        ci_directory_set_handle(o->d, c, ci_json_str(o->req, "handle"));
    answer_status(o, st);
}

static void op_delete(op *o)
{
    ci_container *c;
    ci_dir_status st = get_named(o, &c);
    if (c && c->status != CI_CNTR_DELETED) {
        answer_container(o, "container", c);   /* as it was: its handle */
        ci_directory_delete(o->d, c, o->now);
        *(const char **)apr_array_push(o->gone) = apr_pstrdup(o->p, c->id);
        st = CI_DIR_OK;
    }
    answer_status(o, st);
}

static void op_expire(op *o)
{
    ci_container *c;
    ci_dir_status st = get_named(o, &c);
    if (st == CI_DIR_OK) {
        ci_directory_expire_now(o->d, c, o->now);
        *(const char **)apr_array_push(o->gone) = apr_pstrdup(o->p, c->id);
    }
    answer_status(o, st);
}

static void op_list(op *o)
{
    int limit = (int)int_of(o->req, "limit", 20), has_more = 0, i;
    const char *order = ci_json_str(o->req, "order");
    apr_array_header_t *page;
    json_object *data = json_object_new_array();
    if (limit < 1 || limit > MAX_LIST)
        limit = 20;
    page = ci_directory_list(o->d, o->owner, ci_json_str(o->req, "after"), limit,
                             order && !strcmp(order, "asc"),
                             ci_json_str(o->req, "name"), &has_more, o->p);
    for (i = 0; i < page->nelts; i++)
        json_object_array_add(data, json_object_get(ci_dirops_container_json(
                                  o->p, APR_ARRAY_IDX(page, i, ci_container *))));
    answer_status(o, CI_DIR_OK);
    json_object_object_add(o->ans, "data", data);
    json_object_object_add(o->ans, "has_more", json_object_new_boolean(has_more));
}

static const char *pending_key(op *o, const char *response_id)
{
    return apr_pstrcat(o->p, PENDING_PREFIX, response_id, NULL);
}

static const char *conversation_pending_key(op *o, const char *conversation)
{
    return apr_pstrcat(o->p, CONVERSATION_PENDING_PREFIX, o->owner, ":", conversation,
                       NULL);
}

/* The answer to a question that follows the earlier turns (a response's,
 * a conversation's): container CID they led to, or none, and the outputs
 * owed to the upstream, remembered as PENDING_ITEM. */
static void answer_chain(op *o, const char *cid, const char *pending_item)
{
    answer_status(o, cid ? CI_DIR_OK : CI_DIR_NOT_FOUND);
    o->missed = !cid;
    if (!cid)
        return;
    add_str(o->ans, "container_id", cid);
    add_str(o->ans, "pending", ci_directory_recall(o->d, pending_item, o->owner));
    /* "touch": the turn goes on in that container, and this one question
     * answers what "get" would (a chained turn asks once, not twice) */
    if (ci_json_get(o->req, "touch", json_type_boolean)) {
        ci_container *c;
        ci_dir_status st = get_for_use(o, cid, &c);
        add_str(o->ans, "container_status", ci_dirops_status_name(st));
        if (c)
            answer_container(o, "container", c);
    }
}

static void op_response(op *o)
{
    const char *rid = ci_json_str(o->req, "response_id");
    answer_chain(o, rid ? ci_directory_response_container(o->d, rid, o->owner) : NULL,
                 rid ? pending_key(o, rid) : NULL);
}

/* The owner's conversation: the container its last turn used (as a
 * response's; another owner's conversation of the same id is another). */
static void op_conversation(op *o)
{
    const char *conv = ci_json_str(o->req, "conversation");
    answer_chain(o, conv ? ci_directory_conversation_container(o->d, o->owner, conv) : NULL,
                 conv ? conversation_pending_key(o, conv) : NULL);
}

/* A finish in a conversation: it goes on in container CID from now on,
 * owed PENDING (NULL: nothing, and what it was owed before was brought). */
static void finish_conversation(op *o, const char *conv, const char *cid,
                                const char *pending)
{
    const char *item = conversation_pending_key(o, conv);
    ci_directory_map_conversation(o->d, o->owner, conv, cid);
    if (pending)
        ci_directory_remember(o->d, item, o->owner, cid, pending, o->now);
    else
        ci_directory_forget_item(o->d, item, o->owner);
}

/* A finish with "touch": false lets a hold go without a use: the hold a
 * chained turn's early question took, for a request that then never went on
 * in that container. Its release can come after the request's answer was
 * sent (a pool cleanup), later than the caller's next request: counted as a
 * use, it would reorder which container is the least recently used. */
static int finish_is_no_use(json_object *req)
{
    json_object *touch;
    return json_object_object_get_ex(req, "touch", &touch) &&
           json_object_is_type(touch, json_type_boolean) && !json_object_get_boolean(touch);
}

static void op_finish(op *o)
{
    const char *cid = ci_json_str(o->req, "container_id");
    const char *rid = ci_json_str(o->req, "response_id");
    const char *pending = ci_json_str(o->req, "pending");
    const char *conv = ci_json_str(o->req, "conversation");
    json_object *items = ci_json_get(o->req, "items", json_type_array);
    ci_container *c;
    int i, n = items ? (int)json_object_array_length(items) : 0;
    ci_dir_status st = ci_directory_get(o->d, cid, o->owner, &c);
    answer_status(o, st);
    if (!c)
        return;
    /* An expired one is still what the response led to: the next turn is
     * told its state is gone rather than nothing. */
    if (st == CI_DIR_OK) {
        if (!finish_is_no_use(o->req))
            ci_directory_touch(o->d, c, o->now);
        ci_directory_hold(o->d, c, 0);           /* the request is done with it */
    }
    for (i = 0; i < n; i++) {
        json_object *it = json_object_array_get_idx(items, i);
        const char *id = ci_json_str(it, "id"), *text = ci_json_str(it, "text");
        if (text && ci_directory_our_item(id))
            ci_directory_remember(o->d, id, o->owner, cid, text, o->now);
    }
    if (rid) {
        ci_directory_map_response(o->d, rid, o->owner, cid);
        if (pending)
            ci_directory_remember(o->d, pending_key(o, rid), o->owner, cid, pending, o->now);
    }
    if (conv)
        finish_conversation(o, conv, cid, pending);
}

static void op_recall(op *o)
{
    const char *id = ci_json_str(o->req, "item_id");
    const char *text = ci_directory_our_item(id)
                           ? ci_directory_recall(o->d, id, o->owner) : NULL;
    answer_status(o, text ? CI_DIR_OK : CI_DIR_NOT_FOUND);
    o->missed = !text;
    add_str(o->ans, "text", text);
    if (text)
        add_str(o->ans, "container_id", ci_directory_item_container(o->d, id, o->owner));
}

/* A shared directory's container (CodeInterpreterDirectory) whose local
 * sandbox this node runs: the record there is the truth; here a shadow
 * keeps what ATTACH, expiry and busy marks need. Made, made running again,
 * or touched, for IDLE seconds (the child gives the shared expiry some
 * grace, so that the shared directory's claim normally comes first; the
 * shadow's own expiry is the safety net that leaves nothing running when
 * that claim never comes). Its memory is counted in the shared directory.
 * A shadow the node dropped is not made running again: the shared
 * directory deleted its container, expired it or lost it (op_drop), and a
 * request that found it before that and adopts it at its first call must
 * find it gone, as with one node's directory (ci_containers' found_at_
 * resolve does not ask the shared directory again). */
static void op_adopt(op *o)
{
    const char *id = ci_json_str(o->req, "id"), *tool = ci_json_str(o->req, "tool");
    int idle = (int)int_of(o->req, "idle", 0);
    ci_container *c = id ? ci_directory_find(o->d, id) : NULL, *evicted = NULL;
    ci_dir_status st = CI_DIR_OK;
    if (!id || !tool || idle < 1) {
        add_str(o->ans, "status", "bad_request");
        return;
    }
    if (c && !ci_secret_equal(c->owner, o->owner))
        st = CI_DIR_NOT_FOUND;
    else if (c && c->status == CI_CNTR_DELETED)
        st = CI_DIR_EXPIRED;
    else if (!c)
        st = ci_directory_create_container(o->d, o->owner, id, NULL, tool,
                                           ci_json_str(o->req, "memory_limit"), 0, idle,
                                           o->now, &c, &evicted);
    else
        ci_directory_revive(o->d, c, idle, o->now);
    answer_status(o, st);
}

/* The shared directory expired or deleted container ID: its local
 * sandbox goes (whoever asks: the peer is one of the server's processes,
 * which read the shared record). */
static void op_drop(op *o)
{
    ci_container *c = ci_directory_find(o->d, ci_json_str(o->req, "id"));
    answer_status(o, c ? CI_DIR_OK : CI_DIR_NOT_FOUND);
    if (!c)
        return;
    /* if_idle (a node's check against a directory that lost its record): a
     * request using it right now (a run, a wait, an attach) keeps it until
     * it is done, and its own expiry ends it then, never from under the
     * request's feet. (A delete or an expiry ends it at once.) */
    if (c->status == CI_CNTR_RUNNING &&
        json_object_get_boolean(ci_json_get(o->req, "if_idle", json_type_boolean)) &&
        ci_directory_busy(o->d, c))
        return;
    /* deleted even when its own expiry came first: adopt never revives it */
    if (c->status != CI_CNTR_DELETED)
        ci_directory_delete(o->d, c, o->now);
    *(const char **)apr_array_push(o->gone) = apr_pstrdup(o->p, c->id);
}

/* The running shadows (op_adopt), for the node to check against the
 * shared directory (no owner). */
static void op_shadows(op *o)
{
    apr_array_header_t *ids = ci_directory_running_ids(o->d, o->p);
    json_object *list = json_object_new_array();
    int i;
    for (i = 0; i < ids->nelts; i++)
        json_object_array_add(list, json_object_new_string(APR_ARRAY_IDX(ids, i,
                                                                         const char *)));
    answer_status(o, CI_DIR_OK);
    json_object_object_add(o->ans, "ids", list);
}

/* Remote sandboxes of containers the supervisor's clock expired, for a
 * child to end at their provider (no owner): each handed out once. */
static void op_claim_due(op *o)
{
    int limit = (int)int_of(o->req, "limit", 100);
    apr_array_header_t *due = ci_directory_claim_ends(o->d, limit > 0 ? limit : 1, o->p);
    json_object *list = json_object_new_array(), *gone = json_object_new_array();
    int i;
    for (i = 0; i < due->nelts; i++) {
        const ci_container *c = APR_ARRAY_IDX(due, i, ci_container *);
        json_object_array_add(list, json_object_get(ci_dirops_container_json(o->p, c)));
        json_object_array_add(gone, json_object_new_string(c->id));
    }
    answer_status(o, CI_DIR_OK);
    json_object_object_add(o->ans, "containers", list);
    json_object_object_add(o->ans, "gone", gone);
}

static const struct {
    const char *name;
    void (*fn)(op *o);
} ops[] = {
    { "create", op_create }, { "get", op_get }, { "set_handle", op_set_handle },
    { "delete", op_delete }, { "expire", op_expire }, { "list", op_list }, { "response", op_response },
    { "conversation", op_conversation }, { "finish", op_finish }, { "recall", op_recall },
    { "adopt", op_adopt },
};

/* The answer, with "gone": the ids whose sandboxes must go now (as the
 * shared directory's scripts answer; claim_due names its own, which the
 * supervisor does not end itself). */
static const char *answer_text(op *o)
{
    if (!ci_json_get(o->ans, "gone", json_type_array)) {
        json_object *gone = json_object_new_array();
        int i;
        for (i = 0; i < o->gone->nelts; i++)
            json_object_array_add(gone, json_object_new_string(
                                      APR_ARRAY_IDX(o->gone, i, const char *)));
        json_object_object_add(o->ans, "gone", gone);
    }
    return ci_json_text(o->ans, NULL);
}

/* Run the operation O->req names. */
static void run_op(op *o)
{
    const char *name = ci_json_str(o->req, "op");
    unsigned i;
    o->owner = ci_json_str(o->req, "owner");
    if (name && !strcmp(name, "drop")) {          /* no owner: see op_drop */
        op_drop(o);
        return;
    }
    if (name && !strcmp(name, "shadows")) {
        op_shadows(o);
        return;
    }
    if (name && !strcmp(name, "claim_due")) {     /* no owner either */
        op_claim_due(o);
        return;
    }
    for (i = 0; name && i < sizeof(ops) / sizeof(*ops); i++)
        if (!strcmp(name, ops[i].name)) {
            if (!o->owner || !*o->owner)
                answer_status(o, CI_DIR_NO_OWNER);
            else
                ops[i].fn(o);
            return;
        }
    add_str(o->ans, "status", "bad_request");
}

const char *ci_dirops_apply_lookup(ci_directory *d, apr_pool_t *p, const char *req,
                                   apr_size_t len, apr_time_t now,
                                   apr_array_header_t *gone, int *missed)
{
    const char *perr = NULL;
    op o;
    memset(&o, 0, sizeof(o));
    o.d = d;
    o.p = p;
    o.now = now;
    o.gone = gone;
    o.ans = ci_json_own(p, json_object_new_object());
    o.req = ci_json_parse(p, req, len, &perr);
    run_op(&o);
    if (missed)
        *missed = o.missed;
    return answer_text(&o);
}

const char *ci_dirops_apply(ci_directory *d, apr_pool_t *p, const char *req,
                            apr_size_t len, apr_time_t now, apr_array_header_t *gone)
{
    return ci_dirops_apply_lookup(d, p, req, len, now, gone, NULL);
}

/*
 * ci_skill_ops.c - the skills' operations, JSON in and out (ci_skill_ops.h).
 */
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>
#include "ci_json.h"
#include "ci_skill_ops.h"

#define LIST_DEFAULT 20
#define LIST_MAX 100

typedef struct op {
    ci_skills *s;
    apr_pool_t *p;
    apr_time_t now;
    json_object *req;
    json_object *ans;
    const char *owner;
} op;

static const char *const status_names[] = {
    "ok", "not_found", "no_version", "default", "no_owner"
};

static void answer(op *o, const char *status)
{
    json_object_object_add(o->ans, "status", json_object_new_string(status));
}

static void answer_status(op *o, ci_skills_status st)
{
    answer(o, status_names[st]);
}

static void add_str(json_object *j, const char *key, const char *v)
{
    json_object_object_add(j, key, v ? json_object_new_string(v) : NULL);
}

static json_object *version_json(const ci_skill_version *v)
{
    json_object *j = json_object_new_object();
    add_str(j, "id", v->id);
    add_str(j, "skill_id", v->skill_id);
    json_object_object_add(j, "version", json_object_new_int(v->version));
    add_str(j, "name", v->name);
    add_str(j, "description", v->description);
    add_str(j, "digest", v->digest);
    json_object_object_add(j, "created_at", json_object_new_int64(apr_time_sec(v->created_at)));
    return j;
}

static json_object *skill_json(const ci_skill *sk)
{
    json_object *j = json_object_new_object();
    const ci_skill_version *shown = ci_skills_shown(sk);
    add_str(j, "id", sk->id);
    json_object_object_add(j, "created_at", json_object_new_int64(apr_time_sec(sk->created_at)));
    json_object_object_add(j, "default_version", json_object_new_int(sk->default_version));
    json_object_object_add(j, "latest_version", json_object_new_int(sk->latest_version));
    add_str(j, "name", shown->name);
    add_str(j, "description", shown->description);
    return j;
}

/* The request's "upload" into *UP: 0, or -1 when it is not one. */
static int upload_of(op *o, ci_skill_upload *up)
{
    json_object *u = ci_json_get(o->req, "upload", json_type_object);
    up->name = ci_json_str(u, "name");
    up->description = ci_json_str(u, "description");
    up->digest = ci_json_str(u, "digest");
    return up->name && up->description && up->digest ? 0 : -1;
}

/* The request's "version": a number >= 1, "latest" (0) when LATEST_OK; -1
 * when it is neither. */
static int version_of(op *o, int latest_ok)
{
    json_object *v = ci_json_get(o->req, "version", json_type_int);
    const char *text = ci_json_str(o->req, "version");
    char *end;
    long n;
    if (v)
        return json_object_get_int64(v) >= 1 && json_object_get_int64(v) <= 1000000000
               ? (int)json_object_get_int64(v) : -1;
    if (!text)
        return -1;
    if (latest_ok && !strcmp(text, "latest"))
        return 0;
    n = strtol(text, &end, 10);
    return *text >= '1' && *text <= '9' && !*end && n >= 1 && n <= 1000000000 ? (int)n : -1;
}

/* The skill the request's "id" names, of its owner; NULL (answered) when
 * none. */
static ci_skill *skill_of(op *o)
{
    ci_skill *sk = NULL;
    ci_skills_status st = ci_skills_get(o->s, o->owner, ci_json_str(o->req, "id"), &sk);
    if (st != CI_SKILLS_OK) {
        answer_status(o, st);
        return NULL;
    }
    return sk;
}

/* The version of SK the request's "version" names ("latest" too when
 * LATEST_OK); NULL (answered) when it names none. */
static ci_skill_version *version_named(op *o, ci_skill *sk, int latest_ok)
{
    ci_skill_version *v;
    int number = version_of(o, latest_ok);
    if (number < (latest_ok ? 0 : 1)) {
        answer(o, "bad_request");
        return NULL;
    }
    if (!(v = ci_skills_version(sk, number)))
        answer_status(o, CI_SKILLS_NO_VERSION);
    return v;
}

static void paging(op *o, int *limit, int *ascending, const char **after)
{
    json_object *l = ci_json_get(o->req, "limit", json_type_int);
    const char *order = ci_json_str(o->req, "order");
    *limit = l ? (int)json_object_get_int64(l) : LIST_DEFAULT;
    if (*limit < 1 || *limit > LIST_MAX)
        *limit = LIST_DEFAULT;
    *ascending = order && !strcmp(order, "asc");
    *after = ci_json_str(o->req, "after");
}

static void answer_list(op *o, const apr_array_header_t *items, int versions, int has_more)
{
    json_object *data = json_object_new_array();
    int i;
    for (i = 0; i < items->nelts; i++)
        json_object_array_add(data, versions
                              ? version_json(APR_ARRAY_IDX(items, i, ci_skill_version *))
                              : skill_json(APR_ARRAY_IDX(items, i, ci_skill *)));
    json_object_object_add(o->ans, "data", data);
    json_object_object_add(o->ans, "has_more", json_object_new_boolean(has_more));
    answer(o, "ok");
}

static void answer_unnamed(op *o, const apr_array_header_t *unnamed)
{
    json_object *list = json_object_new_array();
    int i;
    for (i = 0; i < unnamed->nelts; i++)
        json_object_array_add(list, json_object_new_string(
                                  APR_ARRAY_IDX(unnamed, i, const char *)));
    json_object_object_add(o->ans, "unnamed", list);
}

static void op_skill_create(op *o)
{
    ci_skill_upload up;
    ci_skill *sk;
    ci_skills_status st;
    if (upload_of(o, &up)) {
        answer(o, "bad_request");
        return;
    }
    if ((st = ci_skills_create_skill(o->s, o->owner, &up, o->now, &sk)) != CI_SKILLS_OK) {
        answer_status(o, st);
        return;
    }
    json_object_object_add(o->ans, "skill", skill_json(sk));
    json_object_object_add(o->ans, "version", version_json(ci_skills_version(sk, 1)));
    answer(o, "ok");
}

static void op_skill_get(op *o)
{
    ci_skill *sk = skill_of(o);
    if (!sk)
        return;
    json_object_object_add(o->ans, "skill", skill_json(sk));
    answer(o, "ok");
}

static void op_skill_list(op *o)
{
    const char *after;
    int limit, ascending, more;
    apr_array_header_t *page;
    paging(o, &limit, &ascending, &after);
    page = ci_skills_list(o->s, o->owner, after, limit, ascending, &more, o->p);
    answer_list(o, page, 0, more);
}

static void op_skill_default(op *o)
{
    ci_skill *sk = skill_of(o);
    int version;
    if (!sk)
        return;
    if ((version = version_of(o, 0)) < 1) {
        answer(o, "bad_request");
        return;
    }
    if (ci_skills_set_default(sk, version) != CI_SKILLS_OK) {
        answer_status(o, CI_SKILLS_NO_VERSION);
        return;
    }
    json_object_object_add(o->ans, "skill", skill_json(sk));
    answer(o, "ok");
}

static void op_skill_delete(op *o)
{
    ci_skill *sk = skill_of(o);
    apr_array_header_t *unnamed = apr_array_make(o->p, 2, sizeof(const char *));
    if (!sk)
        return;
    json_object_object_add(o->ans, "skill", skill_json(sk));
    ci_skills_delete(o->s, sk, unnamed);
    answer_unnamed(o, unnamed);
    answer(o, "ok");
}

static void op_version_create(op *o)
{
    ci_skill *sk = skill_of(o);
    ci_skill_upload up;
    ci_skill_version *v;
    json_object *d = ci_json_get(o->req, "default", json_type_boolean);
    if (!sk)
        return;
    if (upload_of(o, &up)) {
        answer(o, "bad_request");
        return;
    }
    v = ci_skills_add_version(o->s, sk, &up, d && json_object_get_boolean(d), o->now);
    json_object_object_add(o->ans, "skill", skill_json(sk));
    json_object_object_add(o->ans, "version", version_json(v));
    answer(o, "ok");
}

static void op_version_get(op *o)
{
    ci_skill *sk = skill_of(o);
    ci_skill_version *v;
    if (!sk || !(v = version_named(o, sk, 1)))
        return;
    json_object_object_add(o->ans, "skill", skill_json(sk));
    json_object_object_add(o->ans, "version", version_json(v));
    answer(o, "ok");
}

static void op_version_list(op *o)
{
    ci_skill *sk = skill_of(o);
    const char *after;
    int limit, ascending, more;
    apr_array_header_t *page;
    if (!sk)
        return;
    paging(o, &limit, &ascending, &after);
    page = ci_skills_versions(sk, after, limit, ascending, &more, o->p);
    answer_list(o, page, 1, more);
}

static void op_version_delete(op *o)
{
    ci_skill *sk = skill_of(o);
    apr_array_header_t *unnamed = apr_array_make(o->p, 2, sizeof(const char *));
    ci_skill_version *v;
    json_object *skill, *version;
    ci_skills_status st;
    int gone;
    if (!sk || !(v = version_named(o, sk, 0)))
        return;
    skill = skill_json(sk);                    /* before: SK may go with it */
    version = version_json(v);
    if ((st = ci_skills_delete_version(o->s, sk, v->version, unnamed, &gone)) != CI_SKILLS_OK) {
        json_object_put(skill);
        json_object_put(version);
        answer_status(o, st);
        return;
    }
    json_object_object_add(o->ans, "skill", gone ? skill : skill_json(sk));
    if (!gone)
        json_object_put(skill);
    json_object_object_add(o->ans, "version", version);
    json_object_object_add(o->ans, "skill_deleted", json_object_new_boolean(gone));
    answer_unnamed(o, unnamed);
    answer(o, "ok");
}

static const struct {
    const char *name;
    void (*fn)(op *o);
} ops[] = {
    { "skill_create", op_skill_create }, { "skill_get", op_skill_get },
    { "skill_list", op_skill_list }, { "skill_default", op_skill_default },
    { "skill_delete", op_skill_delete }, { "version_create", op_version_create },
    { "version_get", op_version_get }, { "version_list", op_version_list },
    { "version_delete", op_version_delete },
};

int ci_skill_ops_is(const char *name)
{
    unsigned i;
    for (i = 0; name && i < sizeof(ops) / sizeof(*ops); i++)
        if (!strcmp(name, ops[i].name))
            return 1;
    return 0;
}

const char *ci_skill_ops_apply(ci_skills *s, apr_pool_t *p, const char *req,
                               apr_size_t len, apr_time_t now)
{
    const char *perr = NULL, *name;
    unsigned i;
    op o;
    memset(&o, 0, sizeof(o));
    o.s = s;
    o.p = p;
    o.now = now;
    o.ans = ci_json_own(p, json_object_new_object());
    o.req = ci_json_parse(p, req, len, &perr);
    o.owner = ci_json_str(o.req, "owner");
    name = ci_json_str(o.req, "op");
    for (i = 0; name && i < sizeof(ops) / sizeof(*ops); i++)
        if (!strcmp(name, ops[i].name)) {
            if (!o.owner || !*o.owner)
                answer_status(&o, CI_SKILLS_NO_OWNER);
            else
                ops[i].fn(&o);
            return ci_json_text(o.ans, NULL);
        }
    answer(&o, "bad_request");
    return ci_json_text(o.ans, NULL);
}

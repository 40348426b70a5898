/*
 * ci_skills.c - the skills of a server (ci_skills.h).
 *
 * Each skill lives in a pool of its own, destroyed with it, so a long-lived
 * host gives its memory back. The count of versions naming each digest
 * lives in the skills' pool: a few dozen bytes per bundle ever stored.
 */
#include <string.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include "ci_id.h"
#include "ci_skills.h"

#define ID_BYTES 16

struct ci_skills {
    apr_pool_t *pool;
    apr_hash_t *by_id;               /* id -> ci_skill * */
    apr_array_header_t *order;       /* ci_skill *, oldest first */
    apr_hash_t *uses;                /* digest -> int * */
};

typedef struct skill_rec {
    ci_skill pub;                    /* first: a ci_skill * is a skill_rec * */
    apr_pool_t *pool;
    int numbered;                    /* the highest number given: deleted
                                        numbers are not given again */
} skill_rec;

ci_skills *ci_skills_create(apr_pool_t *p)
{
    ci_skills *s = apr_pcalloc(p, sizeof(*s));
    s->pool = p;
    s->by_id = apr_hash_make(p);
    s->order = apr_array_make(p, 16, sizeof(ci_skill *));
    s->uses = apr_hash_make(p);
    return s;
}

static int *uses_of(const ci_skills *s, const char *digest)
{
    return apr_hash_get(s->uses, digest, APR_HASH_KEY_STRING);
}

int ci_skills_digest_uses(const ci_skills *s, const char *digest)
{
    int *n = uses_of(s, digest);
    return n ? *n : 0;
}

static void named(ci_skills *s, const char *digest)
{
    int *n = uses_of(s, digest);
    if (!n) {
        n = apr_pcalloc(s->pool, sizeof(*n));
        apr_hash_set(s->uses, apr_pstrdup(s->pool, digest), APR_HASH_KEY_STRING, n);
    }
    (*n)++;
}

/* DIGEST is named once less; to UNNAMED (in its pool) when no more. */
static void unnamed_once(ci_skills *s, const char *digest, apr_array_header_t *unnamed)
{
    int *n = uses_of(s, digest);
    if (n && --*n == 0 && unnamed)
        APR_ARRAY_PUSH(unnamed, const char *) = apr_pstrdup(unnamed->pool, digest);
}

/* Version NUMBER of R from UP at NOW, with ID (NULL: a new one), after the
 * ones R has; its digest named once more. */
static ci_skill_version *push_version(ci_skills *s, skill_rec *r, const char *id,
                                      const ci_skill_upload *up, int number, apr_time_t now)
{
    ci_skill_version *v = apr_pcalloc(r->pool, sizeof(*v));
    v->id = id ? apr_pstrdup(r->pool, id) : ci_mint_id(r->pool, "skillver_", ID_BYTES);
    v->skill_id = r->pub.id;
    v->version = number;
    v->name = apr_pstrdup(r->pool, up->name);
    v->description = apr_pstrdup(r->pool, up->description);
    v->digest = apr_pstrdup(r->pool, up->digest);
    v->created_at = now;
    APR_ARRAY_PUSH(r->pub.versions, ci_skill_version *) = v;
    named(s, v->digest);
    return v;
}

static ci_skill_version *make_version(ci_skills *s, skill_rec *r, const ci_skill_upload *up,
                                      int number, apr_time_t now)
{
    r->numbered = number;
    return push_version(s, r, NULL, up, number, now);
}

/* A skill of OWNER with ID (NULL: a new one) made at NOW, without versions
 * yet, the newest in S's order. */
static skill_rec *new_skill(ci_skills *s, const char *id, const char *owner, apr_time_t now)
{
    apr_pool_t *p;
    skill_rec *r;
    apr_pool_create(&p, s->pool);
    r = apr_pcalloc(p, sizeof(*r));
    r->pool = p;
    r->pub.id = id ? apr_pstrdup(p, id) : ci_mint_id(p, "skill_", ID_BYTES);
    r->pub.owner = apr_pstrdup(p, owner);
    r->pub.created_at = now;
    r->pub.versions = apr_array_make(p, 2, sizeof(ci_skill_version *));
    apr_hash_set(s->by_id, r->pub.id, APR_HASH_KEY_STRING, r);
    APR_ARRAY_PUSH(s->order, ci_skill *) = &r->pub;
    return r;
}

ci_skills_status ci_skills_create_skill(ci_skills *s, const char *owner,
                                        const ci_skill_upload *up, apr_time_t now,
                                        ci_skill **out)
{
    skill_rec *r;
    if (!owner || !*owner)
        return CI_SKILLS_NO_OWNER;
    r = new_skill(s, NULL, owner, now);
    make_version(s, r, up, 1, now);
    r->pub.default_version = r->pub.latest_version = 1;
    *out = &r->pub;
    return CI_SKILLS_OK;
}

ci_skills_status ci_skills_get(ci_skills *s, const char *owner, const char *id,
                               ci_skill **out)
{
    skill_rec *r = id ? apr_hash_get(s->by_id, id, APR_HASH_KEY_STRING) : NULL;
    if (!owner || !*owner)
        return CI_SKILLS_NO_OWNER;
    if (!r || strcmp(r->pub.owner, owner))
        return CI_SKILLS_NOT_FOUND;
    *out = &r->pub;
    return CI_SKILLS_OK;
}

ci_skill_version *ci_skills_version(const ci_skill *sk, int version)
{
    int i, want = version == 0 ? sk->latest_version
                : version < 0 ? sk->default_version : version;
    for (i = 0; i < sk->versions->nelts; i++) {
        ci_skill_version *v = APR_ARRAY_IDX(sk->versions, i, ci_skill_version *);
        if (v->version == want)
            return v;
    }
    return NULL;
}

const ci_skill_version *ci_skills_shown(const ci_skill *sk)
{
    return ci_skills_version(sk, -1);
}

/* Entries of ALL (pointers, oldest first) after the one whose id AFTER
 * gives (ID_OF reads it), at most LIMIT, newest first unless ASCENDING. */
static apr_array_header_t *page(const apr_array_header_t *all,
                                const char *(*id_of)(const void *), const char *after,
                                int limit, int ascending, int *has_more, apr_pool_t *p)
{
    apr_array_header_t *out = apr_array_make(p, limit > 0 ? limit : 1, sizeof(void *));
    int n = all->nelts, i, start = 0;
    *has_more = 0;
    if (after) {
        for (start = 0; start < n; start++)
            if (!strcmp(id_of(APR_ARRAY_IDX(all, ascending ? start : n - 1 - start,
                                            const void *)), after))
                break;
        if (start == n)
            return out;              /* an unknown cursor: nothing after it */
        start++;
    }
    for (i = start; i < n; i++) {
        if (out->nelts == limit) {
            *has_more = 1;
            break;
        }
        APR_ARRAY_PUSH(out, const void *) =
            APR_ARRAY_IDX(all, ascending ? i : n - 1 - i, const void *);
    }
    return out;
}

static const char *skill_id_of(const void *x)
{
    return ((const ci_skill *)x)->id;
}

static const char *version_id_of(const void *x)
{
    return ((const ci_skill_version *)x)->id;
}

apr_array_header_t *ci_skills_list(ci_skills *s, const char *owner, const char *after,
                                   int limit, int ascending, int *has_more, apr_pool_t *p)
{
    apr_array_header_t *mine = apr_array_make(p, 8, sizeof(ci_skill *));
    int i;
    for (i = 0; owner && i < s->order->nelts; i++) {
        ci_skill *sk = APR_ARRAY_IDX(s->order, i, ci_skill *);
        if (!strcmp(sk->owner, owner))
            APR_ARRAY_PUSH(mine, ci_skill *) = sk;
    }
    return page(mine, skill_id_of, after, limit, ascending, has_more, p);
}

apr_array_header_t *ci_skills_versions(const ci_skill *sk, const char *after, int limit,
                                       int ascending, int *has_more, apr_pool_t *p)
{
    return page(sk->versions, version_id_of, after, limit, ascending, has_more, p);
}

ci_skill_version *ci_skills_add_version(ci_skills *s, ci_skill *sk,
                                        const ci_skill_upload *up, int make_default,
                                        apr_time_t now)
{
    skill_rec *r = (skill_rec *)sk;
    ci_skill_version *v = make_version(s, r, up, r->numbered + 1, now);
    sk->latest_version = v->version;
    if (make_default)
        sk->default_version = v->version;
    return v;
}

ci_skills_status ci_skills_set_default(ci_skill *sk, int version)
{
    if (version <= 0 || !ci_skills_version(sk, version))
        return CI_SKILLS_NO_VERSION;
    sk->default_version = version;
    return CI_SKILLS_OK;
}

/* Entry I of A (an array of pointers) taken out, the rest kept in order. */
static void remove_at(apr_array_header_t *a, int i)
{
    memmove(a->elts + (size_t)i * sizeof(void *), a->elts + (size_t)(i + 1) * sizeof(void *),
            (size_t)(a->nelts - i - 1) * sizeof(void *));
    a->nelts--;
}

void ci_skills_delete(ci_skills *s, ci_skill *sk, apr_array_header_t *unnamed)
{
    skill_rec *r = (skill_rec *)sk;
    int i;
    for (i = 0; i < sk->versions->nelts; i++)
        unnamed_once(s, APR_ARRAY_IDX(sk->versions, i, ci_skill_version *)->digest, unnamed);
    apr_hash_set(s->by_id, sk->id, APR_HASH_KEY_STRING, NULL);
    for (i = 0; i < s->order->nelts; i++)
        if (APR_ARRAY_IDX(s->order, i, ci_skill *) == sk) {
            remove_at(s->order, i);
            break;
        }
    apr_pool_destroy(r->pool);
}

/* The newest version SK has: what latest falls back to. */
static int newest_left(const ci_skill *sk)
{
    return sk->versions->nelts
           ? APR_ARRAY_IDX(sk->versions, sk->versions->nelts - 1, ci_skill_version *)->version
           : 0;
}

ci_skills_status ci_skills_delete_version(ci_skills *s, ci_skill *sk, int version,
                                          apr_array_header_t *unnamed, int *skill_gone)
{
    int i;
    *skill_gone = 0;
    for (i = 0; i < sk->versions->nelts; i++)
        if (APR_ARRAY_IDX(sk->versions, i, ci_skill_version *)->version == version)
            break;
    if (version <= 0 || i == sk->versions->nelts)
        return CI_SKILLS_NO_VERSION;
    if (sk->versions->nelts == 1) {
        ci_skills_delete(s, sk, unnamed);
        *skill_gone = 1;
        return CI_SKILLS_OK;
    }
    if (version == sk->default_version)
        return CI_SKILLS_DEFAULT;
    unnamed_once(s, APR_ARRAY_IDX(sk->versions, i, ci_skill_version *)->digest, unnamed);
    remove_at(sk->versions, i);
    if (version == sk->latest_version)
        sk->latest_version = newest_left(sk);
    return CI_SKILLS_OK;
}

int ci_skills_count(const ci_skills *s)
{
    return s->order->nelts;
}

ci_skill *ci_skills_at(const ci_skills *s, int i)
{
    return i >= 0 && i < s->order->nelts ? APR_ARRAY_IDX(s->order, i, ci_skill *) : NULL;
}

int ci_skills_numbered(const ci_skill *sk)
{
    return ((const skill_rec *)sk)->numbered;
}

ci_skill *ci_skills_restore(ci_skills *s, const char *id, const char *owner,
                            apr_time_t created_at, int numbered)
{
    skill_rec *r;
    if (!id || !owner || !*owner || numbered < 1 ||
        apr_hash_get(s->by_id, id, APR_HASH_KEY_STRING))
        return NULL;
    r = new_skill(s, id, owner, created_at);
    r->numbered = numbered;
    return &r->pub;
}

/* Whether a version of SK has ID. (A walk: a load asks it once a version,
 * and a skill has a few.) */
static int has_version_id(const ci_skill *sk, const char *id)
{
    int i;
    for (i = 0; i < sk->versions->nelts; i++)
        if (!strcmp(APR_ARRAY_IDX(sk->versions, i, ci_skill_version *)->id, id))
            return 1;
    return 0;
}

ci_skill_version *ci_skills_restore_version(ci_skills *s, ci_skill *sk, const char *id,
                                            int version, const ci_skill_upload *up,
                                            apr_time_t created_at)
{
    skill_rec *r = (skill_rec *)sk;
    ci_skill_version *v;
    /* versions stay sorted by number, and none above the highest given:
     * the next new one is still numbered + 1 */
    if (!id || version <= sk->latest_version || version > r->numbered ||
        has_version_id(sk, id))
        return NULL;
    v = push_version(s, r, id, up, version, created_at);
    sk->latest_version = version;
    return v;
}

void ci_skills_clear(ci_skills *s)
{
    int i;
    for (i = 0; i < s->order->nelts; i++)
        apr_pool_destroy(((skill_rec *)APR_ARRAY_IDX(s->order, i, ci_skill *))->pool);
    s->order->nelts = 0;
    apr_hash_clear(s->by_id);
    apr_hash_clear(s->uses);
}

/*
 * ci_supervisor_skills.c - the node's skill records, hosted here: DIR
 * questions whose op is a skill operation (ci_skill_ops.h), answered in
 * turn with everything else the supervisor does, so that two children's
 * changes never interleave.
 *
 * Each question names its store ("store": the absolute path of the
 * server's CodeInterpreterSkillStore). The records of a store live in it
 * (skills.json, ci_skill_records.h): loaded on the first question about
 * it, saved after each change. The bundles are the children's to write
 * (they read the upload) and the supervisor's to remove: a deletion that
 * leaves a bundle unnamed removes it here, in the same turn; and a new
 * version must name a bundle the store holds now, so that an upload that
 * raced that removal is told to store its bundle again ("no_bundle")
 * instead of naming files that are gone.
 *
 * A bundle is kept while a version names it or a running container shows
 * it (a referenced skill's, or an inline one, which no version names):
 * a deletion leaves a bundle a container still shows, and the container's
 * end removes it (sup_skills_container_gone). When a store's records are
 * first read here, and every SWEEP_AGE / 10 after, its bundles that
 * nothing names and that are older than SWEEP_AGE (none is being stored
 * for a request in flight), and the leftovers of writes and removals (a
 * folder an exiting sandbox still had bound), are removed: what a crash,
 * a race or a container that ended with an earlier supervisor left.
 */
#include <string.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include "ci_json.h"
#include "ci_log.h"
#include "ci_skill_ops.h"
#include "ci_skill_records.h"
#include "ci_skill_store.h"
#include "ci_supervisor_internal.h"

typedef struct skill_host {
    const char *store;
    ci_skills *skills;
} skill_host;

static apr_hash_t *hosts;          /* store path -> skill_host */

#define SWEEP_AGE 600              /* seconds */

/* Whether a running container shows bundle DIGEST (its skills name it). */
static int shown_by_a_container(apr_pool_t *p, const char *digest)
{
    apr_array_header_t *ids = ci_directory_running_ids(sup_state.dir, p);
    int i;
    for (i = 0; i < ids->nelts; i++) {
        ci_container *c = ci_directory_find(sup_state.dir, APR_ARRAY_IDX(ids, i, const char *));
        if (c && c->skills && strstr(c->skills, digest))
            return 1;
    }
    return 0;
}

/* DIGEST removed from STORE unless a version of H or a container names it. */
static void remove_if_unnamed(apr_pool_t *p, const char *store, ci_skills *skills,
                              const char *digest)
{
    const char *err;
    if (!ci_skill_store_digest_ok(digest) || (skills && ci_skills_digest_uses(skills, digest)) ||
        shown_by_a_container(p, digest))
        return;
    if (ci_skill_store_remove(p, store, digest, &err) != 0)
        ci_log(CI_LOG_ERR, "CI0675: a skill bundle no version names could not be "
               "removed: %s", err);
}

/* Whether bundle DIGEST of the store BATON (a skill_host) is named. */
static int named(void *baton, const char *digest)
{
    const skill_host *h = baton;
    apr_pool_t *p;
    int shown;
    if (ci_skills_digest_uses(h->skills, digest))
        return 1;
    apr_pool_create(&p, sup_state.p);
    shown = shown_by_a_container(p, digest);
    apr_pool_destroy(p);
    return shown;
}

/* H's store swept (see above). */
static void sweep(apr_pool_t *p, skill_host *h)
{
    int n = ci_skill_store_clean(p, h->store, apr_time_now() - apr_time_from_sec(SWEEP_AGE),
                                 named, h);
    if (n)
        ci_log(CI_LOG_INFO, "CI0678: %d bundles and leftovers nothing names any more "
               "were removed from the skill store %s", n, h->store);
}

/* The records of STORE, loaded the first time; NULL with *ERR when they
 * cannot be read (nothing is kept: the next question tries again). */
static skill_host *host_of(const char *store, apr_pool_t *tmp, const char **err)
{
    skill_host *h;
    apr_pool_t *p;
    if (!hosts)
        hosts = apr_hash_make(sup_state.p);
    if ((h = apr_hash_get(hosts, store, APR_HASH_KEY_STRING)))
        return h;
    apr_pool_create(&p, sup_state.p);
    h = apr_pcalloc(p, sizeof(*h));
    h->store = apr_pstrdup(p, store);
    h->skills = ci_skills_create(p);
    if (ci_skill_records_load(h->skills, tmp, h->store, err) != 0) {
        apr_pool_destroy(p);
        return NULL;
    }
    apr_hash_set(hosts, h->store, APR_HASH_KEY_STRING, h);
    sweep(tmp, h);
    return h;
}

static int changes(const char *op)
{
    return strcmp(op, "skill_get") && strcmp(op, "skill_list") &&
           strcmp(op, "version_get") && strcmp(op, "version_list");
}

/* A create that names a bundle the store does not hold now. */
static int bundle_missing(apr_pool_t *p, const char *store, json_object *req)
{
    const char *digest = ci_json_str(ci_json_get(req, "upload", json_type_object), "digest");
    return digest && ci_skill_store_digest_ok(digest) &&
           !ci_skill_store_has(p, store, digest);
}

/* The bundles ANSWER says no version names any more, removed (unless a
 * container shows them). */
static void remove_unnamed(apr_pool_t *p, const char *store, json_object *answer)
{
    json_object *list = ci_json_get(answer, "unnamed", json_type_array);
    size_t i;
    for (i = 0; list && i < json_object_array_length(list); i++)
        remove_if_unnamed(p, store, NULL,
                          json_object_get_string(json_object_array_get_idx(list, i)));
}

static const char *refusal(apr_pool_t *p, const char *status, const char *message)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    json_object_object_add(o, "status", json_object_new_string(status));
    if (message)
        json_object_object_add(o, "message", json_object_new_string(message));
    return ci_json_text(o, NULL);
}

/* The answer to skill question REQ (LEN bytes, parsed as JREQ). */
static const char *answer_skill(apr_pool_t *p, const char *req, apr_size_t len,
                                json_object *jreq)
{
    const char *store = ci_json_str(jreq, "store"), *op = ci_json_str(jreq, "op");
    const char *answer, *perr = NULL, *err = NULL;
    json_object *ans;
    skill_host *h;
    if (!store || store[0] != '/')
        return refusal(p, "bad_request", NULL);
    if (!(h = host_of(store, p, &err))) {
        ci_log(CI_LOG_ERR, "CI0676: the skills' records could not be read: %s", err);
        return refusal(p, "store_error", err);
    }
    if (bundle_missing(p, store, jreq))
        return refusal(p, "no_bundle", NULL);
    answer = ci_skill_ops_apply(h->skills, p, req, len, apr_time_now());
    ans = ci_json_parse(p, answer, strlen(answer), &perr);
    if (!changes(op) || strcmp(ci_json_str(ans, "status") ? ci_json_str(ans, "status")
                                                          : "", "ok"))
        return answer;
    remove_unnamed(p, store, ans);
    if (ci_skill_records_save(h->skills, p, store, &err) != 0) {
        /* kept in memory: the next change saves it all */
        ci_log(CI_LOG_ERR, "CI0677: the skills' records could not be saved: %s", err);
        return refusal(p, "store_error", err);
    }
    return answer;
}

void sup_skills_sweep(void)
{
    static apr_time_t next;
    apr_time_t now = apr_time_now();
    apr_hash_index_t *hi;
    apr_pool_t *p;
    if (!hosts || now < next)
        return;
    next = now + apr_time_from_sec(SWEEP_AGE / 10);
    apr_pool_create(&p, sup_state.p);
    for (hi = apr_hash_first(p, hosts); hi; hi = apr_hash_next(hi))
        sweep(p, apr_hash_this_val(hi));
    apr_pool_destroy(p);
}

void sup_skills_container_gone(const char *id)
{
    ci_container *c = ci_directory_find(sup_state.dir, id);
    const char *perr = NULL;
    json_object *skills;
    apr_pool_t *p;
    size_t i;
    if (!c || !c->skills)
        return;
    apr_pool_create(&p, sup_state.p);
    skills = ci_json_parse(p, c->skills, strlen(c->skills), &perr);
    for (i = 0; skills && i < json_object_array_length(skills); i++) {
        json_object *s = json_object_array_get_idx(skills, i);
        const char *tree = ci_json_str(s, "tree"), *digest = ci_json_str(s, "digest");
        skill_host *h;
        apr_size_t n = tree ? strlen(tree) : 0;
        if (!digest || !ci_skill_store_digest_ok(digest) || n < 64 + 4 + 1 ||
            tree[0] != '/' || strcmp(tree + n - 64, digest) || tree[n - 65] != '/' ||
            strncmp(tree + n - 67, digest, 2) || tree[n - 68] != '/')
            continue;
        /* the store: the tree's path without "/" two hex "/" the digest */
        h = host_of(apr_pstrndup(p, tree, n - 64 - 4), p, &perr);
        if (h)
            remove_if_unnamed(p, h->store, h->skills, digest);
    }
    apr_pool_destroy(p);
}

int sup_handle_skill(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    const char *perr = NULL;
    json_object *req;
    apr_pool_create(&p, sup_state.p);
    req = ci_json_parse(p, f->data, f->len, &perr);
    if (!ci_skill_ops_is(ci_json_str(req, "op"))) {
        apr_pool_destroy(p);
        return 0;
    }
    sup_send_text(c, CI_SUP_DIR_ANSWER, 0, answer_skill(p, f->data, f->len, req));
    apr_pool_destroy(p);
    return 1;
}

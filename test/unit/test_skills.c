/*
 * test_skills.c - the skills of a server (core/ci_skills.c): a skill with
 * its first version, owners apart, versions numbered and never renumbered,
 * default and latest, the default kept until another is set, the last
 * version taking the skill with it, paging both ways, the bundles a
 * deletion leaves unnamed, and skills restored as a load finds them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_skills.h"
#include "unit_pool.h"

#define ME "owner-me"
#define OTHER "owner-other"

static const ci_skill_upload V1 = { "basic-math", "Adds numbers.", "d1" };
static const ci_skill_upload V2 = { "basic-math", "Adds and multiplies.", "d2" };
static const ci_skill_upload V3 = { "basic-math", "Adds, multiplies, divides.", "d3" };

static int prefixed(const char *s, const char *prefix, size_t hex)
{
    size_t n = strlen(prefix);
    return !strncmp(s, prefix, n) && strlen(s) == n + hex &&
           strspn(s + n, "0123456789abcdef") == hex;
}

static const char *joined(apr_pool_t *p, const apr_array_header_t *a)
{
    const char *out = "";
    int i;
    for (i = 0; i < a->nelts; i++)
        out = apr_pstrcat(p, out, i ? " " : "", APR_ARRAY_IDX(a, i, const char *), NULL);
    return out;
}

static void test_a_skill_is_its_owners_with_version_one(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    ci_skill *sk, *got;
    const ci_skill_version *v;
    assert_int_equal(ci_skills_create_skill(s, "", &V1, 100, &sk), CI_SKILLS_NO_OWNER);
    assert_int_equal(ci_skills_create_skill(s, ME, &V1, 100, &sk), CI_SKILLS_OK);
    assert_true(prefixed(sk->id, "skill_", 32));
    assert_int_equal(sk->default_version, 1);
    assert_int_equal(sk->latest_version, 1);
    assert_int_equal(sk->created_at, 100);
    v = ci_skills_shown(sk);
    assert_true(prefixed(v->id, "skillver_", 32));
    assert_string_equal(v->skill_id, sk->id);
    assert_string_equal(v->name, "basic-math");
    assert_string_equal(v->description, "Adds numbers.");
    assert_int_equal(ci_skills_get(s, ME, sk->id, &got), CI_SKILLS_OK);
    assert_ptr_equal(got, sk);
    assert_int_equal(ci_skills_get(s, OTHER, sk->id, &got), CI_SKILLS_NOT_FOUND);
    assert_int_equal(ci_skills_get(s, ME, "skill_unknown", &got), CI_SKILLS_NOT_FOUND);
    assert_int_equal(ci_skills_digest_uses(s, "d1"), 1);
}

static void test_versions_default_and_latest(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    apr_array_header_t *unnamed = apr_array_make(p, 2, sizeof(const char *));
    ci_skill *sk;
    ci_skill_version *v2, *v3;
    int gone;
    ci_skills_create_skill(s, ME, &V1, 100, &sk);
    v2 = ci_skills_add_version(s, sk, &V2, 0, 200);
    assert_int_equal(v2->version, 2);
    assert_int_equal(sk->latest_version, 2);
    assert_int_equal(sk->default_version, 1);         /* not asked to be the default */
    assert_string_equal(ci_skills_shown(sk)->description, "Adds numbers.");
    assert_ptr_equal(ci_skills_version(sk, 0), v2);   /* "latest" */
    v3 = ci_skills_add_version(s, sk, &V3, 1, 300);
    assert_int_equal(sk->default_version, 3);
    assert_string_equal(ci_skills_shown(sk)->description, "Adds, multiplies, divides.");
    /* the default stays while others remain */
    assert_int_equal(ci_skills_delete_version(s, sk, 3, unnamed, &gone), CI_SKILLS_DEFAULT);
    assert_int_equal(ci_skills_set_default(sk, 7), CI_SKILLS_NO_VERSION);
    assert_int_equal(ci_skills_set_default(sk, 0), CI_SKILLS_NO_VERSION);
    assert_int_equal(ci_skills_set_default(sk, 1), CI_SKILLS_OK);
    assert_int_equal(ci_skills_delete_version(s, sk, 3, unnamed, &gone), CI_SKILLS_OK);
    assert_false(gone);
    assert_string_equal(joined(p, unnamed), "d3");    /* no version names it now */
    assert_int_equal(sk->latest_version, 2);          /* the newest left */
    assert_null(ci_skills_version(sk, 3));
    assert_int_equal(ci_skills_delete_version(s, sk, 3, unnamed, &gone), CI_SKILLS_NO_VERSION);
    /* a deleted number is not given again */
    assert_int_equal(ci_skills_add_version(s, sk, &V3, 0, 400)->version, 4);
    assert_int_equal(ci_skills_digest_uses(s, "d3"), 1);   /* named again */
    (void)v3;
}

static void test_the_last_version_takes_the_skill(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    apr_array_header_t *unnamed = apr_array_make(p, 2, sizeof(const char *));
    ci_skill *sk, *got;
    const char *id;
    int gone, more;
    ci_skills_create_skill(s, ME, &V1, 100, &sk);
    ci_skills_add_version(s, sk, &V2, 1, 200);
    assert_int_equal(ci_skills_delete_version(s, sk, 1, unnamed, &gone), CI_SKILLS_OK);
    assert_string_equal(joined(p, unnamed), "d1");
    id = apr_pstrdup(p, sk->id);
    assert_int_equal(ci_skills_delete_version(s, sk, 2, unnamed, &gone), CI_SKILLS_OK);
    assert_true(gone);
    assert_string_equal(joined(p, unnamed), "d1 d2");
    assert_int_equal(ci_skills_get(s, ME, id, &got), CI_SKILLS_NOT_FOUND);
    assert_int_equal(ci_skills_list(s, ME, NULL, 10, 0, &more, p)->nelts, 0);
}

static void test_a_bundle_named_twice_goes_with_its_last_name(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    apr_array_header_t *unnamed = apr_array_make(p, 2, sizeof(const char *));
    ci_skill *mine, *theirs;
    ci_skills_create_skill(s, ME, &V1, 100, &mine);
    ci_skills_create_skill(s, OTHER, &V1, 100, &theirs);   /* the same upload */
    ci_skills_add_version(s, mine, &V2, 0, 200);
    assert_int_equal(ci_skills_digest_uses(s, "d1"), 2);
    ci_skills_delete(s, mine, unnamed);
    assert_string_equal(joined(p, unnamed), "d2");
    assert_int_equal(ci_skills_digest_uses(s, "d1"), 1);
    ci_skills_delete(s, theirs, unnamed);
    assert_string_equal(joined(p, unnamed), "d2 d1");
    assert_int_equal(ci_skills_digest_uses(s, "d1"), 0);
}

static const char *ids(apr_pool_t *p, const apr_array_header_t *a, int versions)
{
    const char *out = "";
    int i;
    for (i = 0; i < a->nelts; i++)
        out = apr_pstrcat(p, out, i ? " " : "", versions
                          ? apr_itoa(p, APR_ARRAY_IDX(a, i, ci_skill_version *)->version)
                          : APR_ARRAY_IDX(a, i, ci_skill *)->owner, NULL);
    return out;
}

static void test_paging_both_ways(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    ci_skill *sk[4], *other;
    apr_array_header_t *page;
    int more, i;
    for (i = 0; i < 4; i++)
        ci_skills_create_skill(s, ME, &V1, 100 + i, &sk[i]);
    ci_skills_create_skill(s, OTHER, &V1, 200, &other);
    page = ci_skills_list(s, ME, NULL, 3, 0, &more, p);      /* newest first */
    assert_int_equal(page->nelts, 3);
    assert_true(more);
    assert_ptr_equal(APR_ARRAY_IDX(page, 0, ci_skill *), sk[3]);
    page = ci_skills_list(s, ME, APR_ARRAY_IDX(page, 2, ci_skill *)->id, 3, 0, &more, p);
    assert_int_equal(page->nelts, 1);
    assert_false(more);
    assert_ptr_equal(APR_ARRAY_IDX(page, 0, ci_skill *), sk[0]);
    page = ci_skills_list(s, ME, sk[1]->id, 10, 1, &more, p); /* ascending */
    assert_int_equal(page->nelts, 2);
    assert_ptr_equal(APR_ARRAY_IDX(page, 0, ci_skill *), sk[2]);
    assert_string_equal(ids(p, ci_skills_list(s, OTHER, NULL, 10, 0, &more, p), 0), OTHER);
    assert_int_equal(ci_skills_list(s, ME, other->id, 10, 0, &more, p)->nelts, 0);
    assert_int_equal(ci_skills_list(s, ME, "skill_unknown", 10, 0, &more, p)->nelts, 0);
    for (i = 0; i < 3; i++)
        ci_skills_add_version(s, sk[0], &V2, 0, 300 + i);
    page = ci_skills_versions(sk[0], NULL, 2, 0, &more, p);
    assert_string_equal(ids(p, page, 1), "4 3");
    assert_true(more);
    page = ci_skills_versions(sk[0], APR_ARRAY_IDX(page, 1, ci_skill_version *)->id, 2, 0,
                              &more, p);
    assert_string_equal(ids(p, page, 1), "2 1");
    assert_false(more);
    assert_string_equal(ids(p, ci_skills_versions(sk[0], NULL, 10, 1, &more, p), 1),
                        "1 2 3 4");
}

static void test_skills_restored_as_they_were(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    ci_skill *sk, *got;
    ci_skill_version *v;
    const char *id = "skill_0123456789abcdef0123456789abcdef";
    assert_int_equal(ci_skills_count(s), 0);
    assert_null(ci_skills_at(s, 0));
    assert_null(ci_skills_restore(s, id, "", 100, 3));          /* no owner */
    assert_null(ci_skills_restore(s, id, ME, 100, 0));          /* no number given */
    assert_int_equal(ci_skills_count(s), 0);
    sk = ci_skills_restore(s, id, ME, 100, 5);
    assert_non_null(sk);
    assert_null(ci_skills_restore(s, id, OTHER, 100, 5));       /* its id taken */
    assert_int_equal(ci_skills_numbered(sk), 5);
    v = ci_skills_restore_version(s, sk, "skillver_a", 2, &V2, 200);
    assert_non_null(v);
    assert_string_equal(v->id, "skillver_a");
    assert_string_equal(v->skill_id, id);
    assert_int_equal(v->created_at, 200);
    assert_null(ci_skills_restore_version(s, sk, "skillver_b", 2, &V3, 300));  /* not above */
    assert_null(ci_skills_restore_version(s, sk, "skillver_b", 6, &V3, 300));  /* above 5 */
    assert_null(ci_skills_restore_version(s, sk, "skillver_a", 3, &V3, 300));  /* its id */
    assert_non_null(ci_skills_restore_version(s, sk, "skillver_b", 4, &V1, 300));
    assert_int_equal(sk->latest_version, 4);
    assert_int_equal(ci_skills_set_default(sk, 2), CI_SKILLS_OK);
    assert_int_equal(ci_skills_digest_uses(s, "d1"), 1);
    assert_int_equal(ci_skills_digest_uses(s, "d2"), 1);
    assert_int_equal(ci_skills_digest_uses(s, "d3"), 0);
    assert_int_equal(ci_skills_get(s, ME, id, &got), CI_SKILLS_OK);
    assert_ptr_equal(got, sk);
    /* numbering goes on from the highest number given */
    assert_int_equal(ci_skills_add_version(s, sk, &V3, 0, 400)->version, 6);
    assert_int_equal(ci_skills_numbered(sk), 6);
    assert_int_equal(ci_skills_create_skill(s, OTHER, &V1, 500, &got), CI_SKILLS_OK);
    assert_int_equal(ci_skills_count(s), 2);
    assert_ptr_equal(ci_skills_at(s, 0), sk);
    assert_ptr_equal(ci_skills_at(s, 1), got);
    assert_null(ci_skills_at(s, 2));
    assert_null(ci_skills_at(s, -1));
    /* cleared: as made, its ids free again */
    ci_skills_clear(s);
    assert_int_equal(ci_skills_count(s), 0);
    assert_int_equal(ci_skills_digest_uses(s, "d1"), 0);
    assert_int_equal(ci_skills_get(s, ME, id, &got), CI_SKILLS_NOT_FOUND);
    assert_non_null(ci_skills_restore(s, id, ME, 100, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_a_skill_is_its_owners_with_version_one),
        TEST(test_versions_default_and_latest),
        TEST(test_the_last_version_takes_the_skill),
        TEST(test_a_bundle_named_twice_goes_with_its_last_name),
        TEST(test_paging_both_ways),
        TEST(test_skills_restored_as_they_were),
    };
    apr_initialize();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

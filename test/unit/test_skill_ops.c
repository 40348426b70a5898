/*
 * test_skill_ops.c - the skills' operations, JSON in and out
 * (core/ci_skill_ops.c): every operation's answer, owners apart, versions
 * as numbers, their text and "latest", the default's refusal, the last
 * version taking the skill, the bundles left unnamed, paging, and the
 * requests that are not ones.
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

#include "ci_json.h"
#include "ci_skill_ops.h"
#include "unit_pool.h"

#define UPLOAD(n) "\"upload\":{\"name\":\"basic-math\",\"description\":\"v" #n "\"," \
                  "\"digest\":\"d" #n "\"}"

static json_object *ask(ci_skills *s, apr_pool_t *p, const char *req)
{
    const char *err = NULL;
    const char *text = ci_skill_ops_apply(s, p, req, strlen(req), apr_time_from_sec(1000));
    json_object *ans = ci_json_parse(p, text, strlen(text), &err);
    assert_non_null(ans);
    return ans;
}

static const char *status(json_object *ans)
{
    return ci_json_str(ans, "status");
}

static const char *text_of(json_object *ans, const char *key)
{
    return ci_json_text(ci_json_get(ans, key, json_type_object), NULL);
}

static const char *made(ci_skills *s, apr_pool_t *p, const char *owner)
{
    json_object *ans = ask(s, p, apr_psprintf(p, "{\"op\":\"skill_create\",\"owner\":\"%s\","
                                              UPLOAD(1) "}", owner));
    assert_string_equal(status(ans), "ok");
    return apr_pstrdup(p, ci_json_str(ci_json_get(ans, "skill", json_type_object), "id"));
}

static void test_create_get_and_owners(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    json_object *ans = ask(s, p, "{\"op\":\"skill_create\",\"owner\":\"me\"," UPLOAD(1) "}");
    json_object *skill = ci_json_get(ans, "skill", json_type_object);
    const char *id = ci_json_str(skill, "id");
    assert_string_equal(status(ans), "ok");
    assert_string_equal(text_of(ans, "skill"), apr_psprintf(p,
        "{\"id\":\"%s\",\"created_at\":1000,\"default_version\":1,\"latest_version\":1,"
        "\"name\":\"basic-math\",\"description\":\"v1\"}", id));
    assert_string_equal(text_of(ans, "version"), apr_psprintf(p,
        "{\"id\":\"%s\",\"skill_id\":\"%s\",\"version\":1,\"name\":\"basic-math\","
        "\"description\":\"v1\",\"digest\":\"d1\",\"created_at\":1000}",
        ci_json_str(ci_json_get(ans, "version", json_type_object), "id"), id));
    assert_string_equal(status(ask(s, p, apr_psprintf(p,
        "{\"op\":\"skill_get\",\"owner\":\"me\",\"id\":\"%s\"}", id))), "ok");
    assert_string_equal(status(ask(s, p, apr_psprintf(p,
        "{\"op\":\"skill_get\",\"owner\":\"them\",\"id\":\"%s\"}", id))), "not_found");
    assert_string_equal(status(ask(s, p, apr_psprintf(p,
        "{\"op\":\"skill_get\",\"id\":\"%s\"}", id))), "no_owner");
    assert_string_equal(status(ask(s, p,
        "{\"op\":\"skill_create\",\"owner\":\"me\",\"upload\":{\"name\":\"x\"}}")),
        "bad_request");
    assert_string_equal(status(ask(s, p, "{\"op\":\"skill_explode\",\"owner\":\"me\"}")),
                        "bad_request");
    assert_string_equal(status(ask(s, p, "not json")), "bad_request");
    assert_true(ci_skill_ops_is("version_delete"));
    assert_false(ci_skill_ops_is("create"));
}

static void test_versions_and_the_default(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    const char *id = made(s, p, "me");
    json_object *ans;
#define ASK(fmt, ...) ask(s, p, apr_psprintf(p, fmt, __VA_ARGS__))
    ans = ASK("{\"op\":\"version_create\",\"owner\":\"me\",\"id\":\"%s\",\"default\":true,"
              UPLOAD(2) "}", id);
    assert_string_equal(status(ans), "ok");
    assert_int_equal(json_object_get_int(json_object_object_get(
        ci_json_get(ans, "skill", json_type_object), "default_version")), 2);
    ASK("{\"op\":\"version_create\",\"owner\":\"me\",\"id\":\"%s\"," UPLOAD(3) "}", id);
    ans = ASK("{\"op\":\"version_get\",\"owner\":\"me\",\"id\":\"%s\",\"version\":\"latest\"}",
              id);
    assert_string_equal(ci_json_str(ci_json_get(ans, "version", json_type_object),
                                    "description"), "v3");
    ans = ASK("{\"op\":\"version_get\",\"owner\":\"me\",\"id\":\"%s\",\"version\":\"2\"}", id);
    assert_string_equal(ci_json_str(ci_json_get(ans, "version", json_type_object),
                                    "digest"), "d2");
    assert_string_equal(status(ASK("{\"op\":\"version_get\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":1}", id)), "ok");
    assert_string_equal(status(ASK("{\"op\":\"version_get\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":9}", id)), "no_version");
    assert_string_equal(status(ASK("{\"op\":\"version_get\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":\"02\"}", id)), "bad_request");
    assert_string_equal(status(ASK("{\"op\":\"version_get\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":0}", id)), "bad_request");
    /* the default is refused while others remain */
    assert_string_equal(status(ASK("{\"op\":\"version_delete\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":2}", id)), "default");
    assert_string_equal(status(ASK("{\"op\":\"skill_default\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":\"latest\"}", id)), "bad_request");
    assert_string_equal(status(ASK("{\"op\":\"skill_default\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":7}", id)), "no_version");
    assert_string_equal(status(ASK("{\"op\":\"skill_default\",\"owner\":\"me\",\"id\":\"%s\","
                                   "\"version\":3}", id)), "ok");
    ans = ASK("{\"op\":\"version_delete\",\"owner\":\"me\",\"id\":\"%s\",\"version\":2}", id);
    assert_string_equal(status(ans), "ok");
    assert_string_equal(ci_json_text(json_object_object_get(ans, "unnamed"), NULL), "[\"d2\"]");
    assert_false(json_object_get_boolean(json_object_object_get(ans, "skill_deleted")));
    ASK("{\"op\":\"version_delete\",\"owner\":\"me\",\"id\":\"%s\",\"version\":1}", id);
    /* the last version takes the skill */
    ans = ASK("{\"op\":\"version_delete\",\"owner\":\"me\",\"id\":\"%s\",\"version\":3}", id);
    assert_string_equal(status(ans), "ok");
    assert_true(json_object_get_boolean(json_object_object_get(ans, "skill_deleted")));
    assert_string_equal(ci_json_text(json_object_object_get(ans, "unnamed"), NULL), "[\"d3\"]");
    assert_string_equal(ci_json_str(ci_json_get(ans, "skill", json_type_object), "id"), id);
    assert_string_equal(status(ASK("{\"op\":\"skill_get\",\"owner\":\"me\",\"id\":\"%s\"}",
                                   id)), "not_found");
#undef ASK
}

static void test_delete_and_paging(void **state)
{
    apr_pool_t *p = *state;
    ci_skills *s = ci_skills_create(p);
    const char *a = made(s, p, "me"), *b = made(s, p, "me");
    json_object *ans, *data;
    made(s, p, "them");
    ans = ask(s, p, "{\"op\":\"skill_list\",\"owner\":\"me\",\"limit\":1}");
    data = json_object_object_get(ans, "data");
    assert_int_equal(json_object_array_length(data), 1);
    assert_string_equal(ci_json_str(json_object_array_get_idx(data, 0), "id"), b);
    assert_true(json_object_get_boolean(json_object_object_get(ans, "has_more")));
    ans = ask(s, p, apr_psprintf(p, "{\"op\":\"skill_list\",\"owner\":\"me\",\"limit\":1,"
                                    "\"after\":\"%s\"}", b));
    data = json_object_object_get(ans, "data");
    assert_string_equal(ci_json_str(json_object_array_get_idx(data, 0), "id"), a);
    assert_false(json_object_get_boolean(json_object_object_get(ans, "has_more")));
    ans = ask(s, p, "{\"op\":\"skill_list\",\"owner\":\"me\",\"order\":\"asc\"}");
    data = json_object_object_get(ans, "data");
    assert_string_equal(ci_json_str(json_object_array_get_idx(data, 0), "id"), a);
    ans = ask(s, p, apr_psprintf(p, "{\"op\":\"skill_delete\",\"owner\":\"me\",\"id\":\"%s\"}",
                                 a));
    assert_string_equal(status(ans), "ok");
    assert_string_equal(ci_json_text(json_object_object_get(ans, "unnamed"), NULL), "[]");
    ans = ask(s, p, "{\"op\":\"skill_list\",\"owner\":\"me\"}");
    assert_int_equal(json_object_array_length(json_object_object_get(ans, "data")), 1);
    ans = ask(s, p, apr_psprintf(p, "{\"op\":\"version_list\",\"owner\":\"me\",\"id\":\"%s\"}",
                                 b));
    assert_int_equal(json_object_array_length(json_object_object_get(ans, "data")), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_create_get_and_owners),
        TEST(test_versions_and_the_default),
        TEST(test_delete_and_paging),
    };
    apr_initialize();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

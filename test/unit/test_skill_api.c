/*
 * test_skill_api.c - a Skills API request's path and upload, and OpenAI's
 * objects (core/ci_skill_api.c): every route, a folder's files and a zip
 * read from a multipart body however it is split, the lone "files[]" zip,
 * the "default" field, and each refusal's exact words.
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
#include "ci_skill_api.h"
#include "ci_skill_attach.h"
#include "unit_pool.h"

static apr_pool_t *unit_pool;     /* the running test's */

#define BOUNDARY "xYzZy"
#define MANIFEST "---\nname: basic-math\ndescription: Adds numbers.\n---\n# Use add.py\n"

/* ---- the path ---- */

static void route_is(const char *uri, ci_skapi_kind kind, const char *id, const char *version)
{
    ci_skapi_route r;
    ci_skapi_route_of(unit_pool, uri, &r);
    assert_int_equal(r.kind, kind);
    if (id)
        assert_string_equal(r.skill_id, id);
    else
        assert_null(r.skill_id);
    if (version)
        assert_string_equal(r.version, version);
    else
        assert_null(r.version);
}

static void test_routes(void **state)
{
    unit_pool = *state;
    route_is("/v1/skills", CI_SKAPI_SKILLS, NULL, NULL);
    route_is("/v1/skills/", CI_SKAPI_SKILLS, NULL, NULL);
    route_is("/v1/skills/skill_1", CI_SKAPI_SKILL, "skill_1", NULL);
    route_is("/v1/skills/skill_1/content", CI_SKAPI_SKILL_CONTENT, "skill_1", NULL);
    route_is("/v1/skills/skill_1/versions", CI_SKAPI_VERSIONS, "skill_1", NULL);
    route_is("/v1/skills/skill_1/versions/2", CI_SKAPI_VERSION, "skill_1", "2");
    route_is("/v1/skills/skill_1/versions/latest/content", CI_SKAPI_VERSION_CONTENT,
             "skill_1", "latest");
    /* the last "/skills" segment counts: a prefix of the location's own */
    route_is("/gw/skills/v1/skills/s", CI_SKAPI_SKILL, "s", NULL);
    route_is("/v1/skillset", CI_SKAPI_NONE, NULL, NULL);
    route_is("/v1/responses", CI_SKAPI_NONE, NULL, NULL);
    route_is("/v1/skills//content", CI_SKAPI_NO_SUCH_PATH, NULL, NULL);
    route_is("/v1/skills/s/nope", CI_SKAPI_NO_SUCH_PATH, NULL, NULL);
    route_is("/v1/skills/s/content/x", CI_SKAPI_NO_SUCH_PATH, NULL, NULL);
    route_is("/v1/skills/s/versions/2/x", CI_SKAPI_NO_SUCH_PATH, NULL, NULL);
    route_is("/v1/skills/s/versions//content", CI_SKAPI_NO_SUCH_PATH, NULL, NULL);
}

/* ---- a body ---- */

typedef struct part {
    const char *name;
    const char *filename;       /* NULL: a field */
    const char *data;
    apr_size_t len;             /* 0: strlen(data) */
} part;

static const char *body_of(const part *parts, int n, apr_size_t *len)
{
    char *out = "";
    int i;
    *len = 0;
    for (i = 0; i < n; i++) {
        const char *head = parts[i].filename
            ? apr_psprintf(unit_pool, "--" BOUNDARY "\r\nContent-Disposition: form-data; "
                           "name=\"%s\"; filename=\"%s\"\r\n\r\n", parts[i].name,
                           parts[i].filename)
            : apr_psprintf(unit_pool, "--" BOUNDARY "\r\nContent-Disposition: form-data; "
                           "name=\"%s\"\r\n\r\n", parts[i].name);
        apr_size_t dl = parts[i].len ? parts[i].len : strlen(parts[i].data);
        char *next = apr_palloc(unit_pool, *len + strlen(head) + dl + 3);
        memcpy(next, out, *len);
        memcpy(next + *len, head, strlen(head));
        memcpy(next + *len + strlen(head), parts[i].data, dl);
        memcpy(next + *len + strlen(head) + dl, "\r\n", 2);
        *len += strlen(head) + dl + 2;
        out = next;
    }
    {
        static const char close[] = "--" BOUNDARY "--\r\n";
        char *whole = apr_palloc(unit_pool, *len + sizeof(close));
        memcpy(whole, out, *len);
        memcpy(whole + *len, close, sizeof(close));
        *len += sizeof(close) - 1;
        return whole;
    }
}

/* BODY fed in pieces of STEP bytes (0: whole): finish's result. */
static int upload(const char *body, apr_size_t len, apr_size_t step, int with_default,
                  ci_skill_bundle **b, int *make_default, ci_error *err)
{
    ci_skapi_upload *u = ci_skapi_upload_make(unit_pool, BOUNDARY, NULL, with_default);
    apr_size_t at = 0;
    int rc = 0;
    if (!step)
        step = len;
    while (at < len && rc == 0) {
        apr_size_t n = len - at < step ? len - at : step;
        rc = ci_skapi_upload_feed(u, body + at, n);
        at += n;
    }
    return ci_skapi_upload_finish(u, b, make_default, err);
}

static const part folder[] = {
    { "files[]", "basic_math/SKILL.md", MANIFEST, 0 },
    { "files[]", "basic_math/scripts/add.py", "print(1 + 1)\n", 0 },
};

static void test_a_folder_however_split(void **state)
{
    apr_size_t len, steps[] = { 0, 1, 7, 64 };
    const char *body = body_of(folder, 2, &len);
    unsigned i;
    unit_pool = *state;
    for (i = 0; i < sizeof(steps) / sizeof(*steps); i++) {
        ci_skill_bundle *b = NULL;
        ci_error err;
        int make_default = -1;
        assert_int_equal(upload(body, len, steps[i], 0, &b, &make_default, &err), 0);
        assert_int_equal(make_default, 0);
        assert_string_equal(b->folder, "basic_math");
        assert_string_equal(b->name, "basic-math");
        assert_string_equal(b->description, "Adds numbers.");
        assert_int_equal(b->files->nelts, 2);
        assert_string_equal(APR_ARRAY_IDX(b->files, 1, ci_skill_file).path, "scripts/add.py");
    }
    (void)len;
}

/* The folder's bundle as a zip, as ci_skill_bundle_zip writes it. */
static const char *folder_zip(apr_size_t *len, const char **digest)
{
    apr_size_t blen;
    const char *body = body_of(folder, 2, &blen), *zip, *err;
    ci_skill_bundle *b;
    ci_error e;
    int d;
    assert_int_equal(upload(body, blen, 0, 0, &b, &d, &e), 0);
    assert_int_equal(ci_skill_bundle_zip(unit_pool, b, &zip, len, &err), 0);
    *digest = b->digest;
    return zip;
}

static void test_a_zip_as_files_or_a_lone_files_part(void **state)
{
    apr_size_t zlen, len;
    const char *digest, *zip = folder_zip(&zlen, &digest);
    const char *names[] = { "files", "files[]" };
    unsigned i;
    unit_pool = *state;
    for (i = 0; i < 2; i++) {
        part p = { names[i], "basic_math.zip", zip, zlen };
        const char *body = body_of(&p, 1, &len);
        ci_skill_bundle *b = NULL;
        ci_error err;
        int d;
        assert_int_equal(upload(body, len, 5, 0, &b, &d,
                                &err), 0);
        assert_string_equal(b->digest, digest);    /* the same bundle, either way */
    }
}

static void test_the_default_field(void **state)
{
    part parts[3] = { folder[0], folder[1], { "default", NULL, "true", 0 } };
    apr_size_t len;
    const char *body = body_of(parts, 3, &len);
    ci_skill_bundle *b;
    ci_error err;
    int d = 0;
    unit_pool = *state;
    assert_int_equal(upload(body, len, 3, 1, &b, &d, &err), 0);
    assert_int_equal(d, 1);
    parts[2].data = "yes";
    body = body_of(parts, 3, &len);
    assert_int_equal(upload(body, len, 0, 1, &b, &d, &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.param, "default");
    assert_string_equal(err.message, "'default' must be true or false.");
    /* a skill's create has no such field */
    parts[2].data = "true";
    body = body_of(parts, 3, &len);
    assert_int_equal(upload(body, len, 0, 0, &b, &d, &err), -1);
    assert_string_equal(err.message, "Unexpected part 'default': a skill is uploaded as "
                                     "'files' (one zip) or 'files[]' (a folder's files).");
}

static void refused(const part *parts, int n, const char *param, const char *message)
{
    apr_size_t len;
    const char *body = body_of(parts, n, &len);
    ci_skill_bundle *b = NULL;
    ci_error err;
    int d;
    assert_int_equal(upload(body, len, 0, 1, &b, &d, &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.type, "invalid_request_error");
    assert_string_equal(err.param, param);
    assert_string_equal(err.message, message);
}

static void test_refusals(void **state)
{
    apr_size_t zlen;
    const char *digest, *zip = folder_zip(&zlen, &digest);
    part mixed[2] = { folder[0], { "files", "z.zip", zip, zlen } };
    part two_zips[2] = { { "files", "a.zip", zip, zlen }, { "files", "b.zip", zip, zlen } };
    part other[1] = { { "file", "basic_math/SKILL.md", MANIFEST, 0 } };
    part twice[3] = { folder[0], { "default", NULL, "true", 0 }, { "default", NULL, "true", 0 } };
    part lone[1] = { { "files[]", "SKILL.md", MANIFEST, 0 } };
    part leaves[2] = { folder[0], { "files[]", "basic_math/../x", "x", 0 } }; /* check-clone: a path the upload refuses */
    unit_pool = *state;
    refused(mixed, 2, "files", "Upload one zip as 'files', or a folder's files as "
                               "'files[]', not both and not two zips.");
    refused(two_zips, 2, "files", "Upload one zip as 'files', or a folder's files as "
                                  "'files[]', not both and not two zips.");
    refused(other, 1, "files", "Unexpected part 'file': a skill is uploaded as 'files' "
                               "(one zip) or 'files[]' (a folder's files), with 'default'.");
    refused(twice, 3, "default", "'default' is given twice.");
    /* a lone part that is no zip is a file: at the top level */
    refused(lone, 1, "files", "Skill file 'SKILL.md' is at the top level: the skill's "
                              "files must be inside one folder.");
    refused(leaves, 2, "files", "Skill file 'basic_math/../x' leaves the skill's folder."); /* check-clone: a path the upload refuses */
    refused(NULL, 0, "files", "The skill upload has no files.");
}

static void test_a_cut_body(void **state)
{
    apr_size_t len;
    const char *body = body_of(folder, 2, &len);
    ci_skill_bundle *b;
    ci_error err;
    int d;
    unit_pool = *state;
    assert_int_equal(upload(body, len - 20, 0, 0, &b, &d, &err), -1);
    assert_string_equal(err.param, "files");
    assert_string_equal(err.message, "The upload is not valid multipart/form-data: the "
                        "multipart body ended inside the data of a part, without its close "
                        "delimiter");
}

static void test_past_the_file_limit(void **state)
{
    ci_skill_limits lim = { 1000, 500, 100, 1000 };
    char big[200];
    part parts[2] = { folder[0], { "files[]", "basic_math/big.txt", big, sizeof(big) } };
    apr_size_t len;
    const char *body;
    ci_skapi_upload *u;
    ci_skill_bundle *b;
    ci_error err;
    int d;
    unit_pool = *state;
    memset(big, 'a', sizeof(big));
    body = body_of(parts, 2, &len);
    u = ci_skapi_upload_make(unit_pool, BOUNDARY, &lim, 0);
    assert_int_equal(ci_skapi_upload_feed(u, body, len), -1);
    assert_int_equal(ci_skapi_upload_finish(u, &b, &d, &err), -1);
    assert_string_equal(err.message, "Skill file 'basic_math/big.txt' is larger than 100 bytes.");
}

/* ---- the answers ---- */

static void test_objects(void **state)
{
    static const char sk_text[] = "{\"id\":\"skill_1\",\"created_at\":5,"
        "\"default_version\":1,\"latest_version\":2,\"name\":\"n\",\"description\":\"d\"}";
    static const char v_text[] = "{\"id\":\"skillver_1\",\"skill_id\":\"skill_1\","
        "\"version\":2,\"name\":\"n\",\"description\":\"d\",\"digest\":\"x\","
        "\"created_at\":6}";
    const char *perr = NULL;
    json_object *sk, *v;
    unit_pool = *state;
    sk = ci_json_parse(unit_pool, sk_text, strlen(sk_text), &perr);
    v = ci_json_parse(unit_pool, v_text, strlen(v_text), &perr);
    assert_non_null(sk);
    assert_non_null(v);
    assert_string_equal(ci_json_text(ci_json_own(unit_pool, ci_skapi_skill(sk)), NULL),
                        "{\"id\":\"skill_1\",\"object\":\"skill\",\"name\":\"n\",\"description\":"
                        "\"d\",\"created_at\":5,\"default_version\":\"1\",\"latest_version\":"
                        "\"2\"}");
    assert_string_equal(ci_json_text(ci_json_own(unit_pool, ci_skapi_version(v)), NULL),
                        "{\"id\":\"skillver_1\",\"object\":\"skill.version\",\"skill_id\":"
                        "\"skill_1\",\"version\":\"2\",\"created_at\":6,\"name\":\"n\","
                        "\"description\":\"d\"}");
    assert_string_equal(ci_json_text(ci_json_own(unit_pool, ci_skapi_skill_deleted("skill_1")),
                                     NULL),
                        "{\"id\":\"skill_1\",\"object\":\"skill.deleted\",\"deleted\":true}");
    assert_string_equal(ci_json_text(ci_json_own(unit_pool,
                                                 ci_skapi_version_deleted("skillver_1", 3)),
                                     NULL),
                        "{\"id\":\"skillver_1\",\"object\":\"skill.version.deleted\","
                        "\"deleted\":true,\"version\":\"3\"}");
}

static void test_refusal_words(void **state)
{
    ci_error err;
    unit_pool = *state;
    ci_skapi_refusal(unit_pool, "not_found", "skill_9", NULL, &err);
    assert_int_equal(err.status, 404);
    assert_string_equal(err.code, "skill_not_found");
    assert_string_equal(err.message, "Skill with id 'skill_9' not found.");
    ci_skapi_refusal(unit_pool, "no_version", "skill_9", "7", &err);
    assert_int_equal(err.status, 404);
    assert_string_equal(err.message, "Skill 'skill_9' has no version '7'.");
    ci_skapi_refusal(unit_pool, "default", "skill_9", "1", &err);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.message, "Version 1 is the default version of skill 'skill_9': "
                                     "set another default version before deleting it.");
    ci_skapi_refusal(unit_pool, "bad_request", "skill_9", "x", &err);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.message, "'x' is not a version: expected a version number, or "
                                     "\"latest\" to retrieve the newest.");
    ci_skapi_refusal(unit_pool, "no_owner", "skill_9", NULL, &err);
    assert_int_equal(err.status, 500);
}

/* ---- attaching ---- */

static void test_attach_entries(void **state)
{
    static const char list[] = "[{\"type\":\"skill_reference\",\"skill_id\":\"skill_a\"},"
        "{\"type\":\"skill_reference\",\"skill_id\":\"skill_b\",\"version\":3},"
        "{\"type\":\"skill_reference\",\"skill_id\":\"skill_c\",\"version\":\"4\"},"
        "{\"type\":\"skill_reference\",\"skill_id\":\"skill_d\",\"version\":\"latest\"},"
        "{\"type\":\"inline\",\"name\":\"n\",\"description\":\"d\",\"source\":"
        "{\"type\":\"base64\",\"media_type\":\"application/zip\",\"data\":\"UEsF\"}}]";
    const char *perr = NULL;
    apr_array_header_t *refs = NULL;
    ci_error err;
    const ci_skill_ref *r;
    unit_pool = *state;
    assert_int_equal(ci_skill_attach_parse(unit_pool, ci_json_parse(unit_pool, list,
                                                                    strlen(list), &perr),
                                           "skills", &refs, &err), 0);
    assert_int_equal(refs->nelts, 5);
    r = &APR_ARRAY_IDX(refs, 0, ci_skill_ref);
    assert_string_equal(r->skill_id, "skill_a");
    assert_int_equal(r->version, CI_SKILL_VERSION_DEFAULT);
    assert_string_equal(r->param, "skills[0]");
    assert_int_equal(APR_ARRAY_IDX(refs, 1, ci_skill_ref).version, 3);
    assert_int_equal(APR_ARRAY_IDX(refs, 2, ci_skill_ref).version, 4);
    assert_int_equal(APR_ARRAY_IDX(refs, 3, ci_skill_ref).version, CI_SKILL_VERSION_LATEST);
    r = &APR_ARRAY_IDX(refs, 4, ci_skill_ref);
    assert_int_equal(r->kind, CI_SKILL_INLINE);
    assert_string_equal(r->name, "n");
    assert_int_equal(r->data_len, 4);
    assert_memory_equal(r->data, "UEsF", 4);
}

static void test_attach_context(void **state)
{
    static const char skills[] = "[{\"name\":\"basic-math\",\"description\":\"Adds.\","
                                 "\"mount\":\"basic-math-0123\"}]";
    const char *perr = NULL;
    unit_pool = *state;
    assert_string_equal(ci_skill_attach_mount(unit_pool, "a-b", "ff"), "a-b-ff");
    assert_string_equal(
        ci_skill_attach_context(unit_pool, ci_json_parse(unit_pool, skills, strlen(skills),
                                                         &perr)),
        "Skills are installed in your container: each is a folder with a SKILL.md file of "
        "instructions, and often scripts. Before you use a skill, read its SKILL.md (for "
        "example with cat) and follow it; run its scripts from their folder's path, which "
        "is read-only.\n- basic-math: Adds. (/home/oai/skills/basic-math-0123/SKILL.md)"); /* check-clone: the path in a container */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_routes),
        TEST(test_a_folder_however_split),
        TEST(test_a_zip_as_files_or_a_lone_files_part),
        TEST(test_the_default_field),
        TEST(test_refusals),
        TEST(test_a_cut_body),
        TEST(test_past_the_file_limit),
        TEST(test_objects),
        TEST(test_refusal_words),
        TEST(test_attach_entries),
        TEST(test_attach_context),
    };
    apr_initialize();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

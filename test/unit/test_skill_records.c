/*
 * test_skill_records.c - a server's skill records on its disk
 * (core/ci_skill_records.c): several owners' skills with deleted versions
 * and a deleted skill saved and loaded back the same (ids, owners, times,
 * default, latest, the highest number given, the bundles' counts, the
 * listing's order), numbering going on after a load; the document as its
 * header describes it; no file: nothing; every malformed document refused
 * whole with its reason and the skills left empty, truncated and garbled
 * ones too; a save that fails leaving nothing beside the records.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_skill_records.h"
#include "ci_skills.h"
#include "unit_dir.h"
#include "unit_pool.h"

#define ME "owner-me"
#define OTHER "owner-other"
#define THIRD "owner-third"

#define D1 "1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "3333333333333333333333333333333333333333333333333333333333333333"
#define D4 "4444444444444444444444444444444444444444444444444444444444444444"
static const char *const DIGESTS[] = { D1, D2, D3, D4 };

static const ci_skill_upload V1 = { "basic-math", "Adds numbers.", D1 };
static const ci_skill_upload V2 = { "basic-math", "Adds and multiplies.", D2 };
static const ci_skill_upload V3 = { "basic-math", "Adds, multiplies, divides.", D3 };
static const ci_skill_upload V4 = { "unicode-\xc3\xa9", "Says \"hello\".\n", D4 };

static const char *records_dir(apr_pool_t *p)
{
    return unit_temp_dir(p, "test_skill_records");
}

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static const char *file_text(apr_pool_t *p, const char *path, apr_size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = apr_pcalloc(p, 1 << 16);
    assert_non_null(f);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    assert_true(*len < (1 << 16) - 1);
    fclose(f);
    return buf;
}

/* Skills of three owners, as operations leave them: a skill with its first
 * and last versions deleted (the default not the latest), a deleted skill
 * between others, a bundle named by three skills. */
static ci_skills *several(apr_pool_t *p)
{
    ci_skills *s = ci_skills_create(p);
    apr_array_header_t *unnamed = apr_array_make(p, 4, sizeof(const char *));
    ci_skill *a, *b, *c, *d;
    int gone;
    assert_int_equal(ci_skills_create_skill(s, ME, &V1, 1000001, &a), CI_SKILLS_OK);
    ci_skills_add_version(s, a, &V2, 0, 2000002);
    ci_skills_add_version(s, a, &V3, 0, 3000003);
    ci_skills_add_version(s, a, &V4, 1, 3500003);
    assert_int_equal(ci_skills_set_default(a, 2), CI_SKILLS_OK);
    assert_int_equal(ci_skills_delete_version(s, a, 4, unnamed, &gone), CI_SKILLS_OK);
    assert_int_equal(ci_skills_delete_version(s, a, 1, unnamed, &gone), CI_SKILLS_OK);
    assert_int_equal(ci_skills_create_skill(s, OTHER, &V1, 4000004, &b), CI_SKILLS_OK);
    assert_int_equal(ci_skills_create_skill(s, ME, &V4, 5000005, &c), CI_SKILLS_OK);
    assert_int_equal(ci_skills_create_skill(s, THIRD, &V1, 6000006, &d), CI_SKILLS_OK);
    ci_skills_add_version(s, d, &V4, 1, 7000007);
    ci_skills_delete(s, c, unnamed);
    assert_int_equal(ci_skills_create_skill(s, ME, &V2, 8000008, &c), CI_SKILLS_OK);
    assert_int_equal(a->default_version, 2);
    assert_int_equal(a->latest_version, 3);
    assert_int_equal(ci_skills_numbered(a), 4);
    return s;
}

static void assert_same_version(const ci_skill_version *x, const ci_skill_version *y)
{
    assert_string_equal(x->id, y->id);
    assert_string_equal(x->skill_id, y->skill_id);
    assert_int_equal(x->version, y->version);
    assert_string_equal(x->name, y->name);
    assert_string_equal(x->description, y->description);
    assert_string_equal(x->digest, y->digest);
    assert_int_equal(x->created_at, y->created_at);
}

static void assert_same_skill(const ci_skill *x, const ci_skill *y)
{
    int i;
    assert_string_equal(x->id, y->id);
    assert_string_equal(x->owner, y->owner);
    assert_int_equal(x->created_at, y->created_at);
    assert_int_equal(x->default_version, y->default_version);
    assert_int_equal(x->latest_version, y->latest_version);
    assert_int_equal(ci_skills_numbered(x), ci_skills_numbered(y));
    assert_int_equal(x->versions->nelts, y->versions->nelts);
    for (i = 0; i < x->versions->nelts; i++)
        assert_same_version(APR_ARRAY_IDX(x->versions, i, ci_skill_version *),
                            APR_ARRAY_IDX(y->versions, i, ci_skill_version *));
}

/* Whether S holds nothing: no skill, no bundle counted. */
static int empty(const ci_skills *s)
{
    unsigned i;
    for (i = 0; i < sizeof(DIGESTS) / sizeof(*DIGESTS); i++)
        if (ci_skills_digest_uses(s, DIGESTS[i]))
            return 0;
    return ci_skills_count(s) == 0 && ci_skills_at(s, 0) == NULL;
}

/* OWNER's listing of S, oldest first, as ids. */
static const char *listing(apr_pool_t *p, ci_skills *s, const char *owner)
{
    apr_array_header_t *page;
    const char *out = "";
    int more, i;
    page = ci_skills_list(s, owner, NULL, 100, 1, &more, p);
    for (i = 0; i < page->nelts; i++)
        out = apr_pstrcat(p, out, " ", APR_ARRAY_IDX(page, i, ci_skill *)->id, NULL);
    return out;
}

static void test_records_come_back_the_same(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p), *err = NULL;
    ci_skills *s = several(p), *back = ci_skills_create(p);
    ci_skill *a;
    struct stat st;
    int i;
    assert_int_equal(ci_skill_records_save(s, p, dir, &err), 0);
    assert_string_equal(unit_names_in(p, dir), "skills.json");      /* nothing beside it */
    assert_int_equal(stat(apr_pstrcat(p, dir, "/skills.json", NULL), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(ci_skill_records_load(back, p, dir, &err), 0);
    assert_int_equal(ci_skills_count(back), 4);
    for (i = 0; i < 4; i++)
        assert_same_skill(ci_skills_at(s, i), ci_skills_at(back, i));
    assert_null(ci_skills_at(back, 4));
    assert_int_equal(ci_skills_digest_uses(back, D1), 2);
    assert_int_equal(ci_skills_digest_uses(back, D2), 2);
    assert_int_equal(ci_skills_digest_uses(back, D3), 1);
    assert_int_equal(ci_skills_digest_uses(back, D4), 1);
    for (i = 0; i < 4; i++)
        assert_int_equal(ci_skills_digest_uses(back, DIGESTS[i]),
                         ci_skills_digest_uses(s, DIGESTS[i]));
    assert_string_equal(listing(p, back, ME), listing(p, s, ME));
    assert_string_equal(listing(p, back, OTHER), listing(p, s, OTHER));
    assert_string_equal(listing(p, back, THIRD), listing(p, s, THIRD));
    /* a deleted number is not given again after the reload either */
    assert_int_equal(ci_skills_get(back, ME, ci_skills_at(s, 0)->id, &a), CI_SKILLS_OK);
    assert_int_equal(ci_skills_add_version(back, a, &V1, 0, 9000009)->version, 5);
    assert_int_equal(a->latest_version, 5);
    assert_int_equal(a->default_version, 2);
    assert_int_equal(ci_skills_digest_uses(back, D1), 3);
    /* saved again over the first document, and loaded again */
    assert_int_equal(ci_skill_records_save(back, p, dir, &err), 0);
    assert_string_equal(unit_names_in(p, dir), "skills.json");
    s = ci_skills_create(p);
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), 0);
    assert_int_equal(ci_skills_numbered(ci_skills_at(s, 0)), 5);
    assert_int_equal(ci_skills_digest_uses(s, D1), 3);
    unit_remove_dir(p, dir);
}

static void test_the_document_is_as_described(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p), *err = NULL, *text;
    ci_skills *s = ci_skills_create(p);
    apr_array_header_t *unnamed = apr_array_make(p, 2, sizeof(const char *));
    ci_skill *sk;
    ci_skill_version *v1;
    apr_size_t len;
    int gone;
    assert_int_equal(ci_skill_records_save(s, p, dir, &err), 0);
    assert_string_equal(file_text(p, apr_pstrcat(p, dir, "/skills.json", NULL), &len),
                        "{\"format\":1,\"skills\":[]}");
    ci_skills_create_skill(s, ME, &V1, 1700000000123456, &sk);
    v1 = ci_skills_version(sk, 1);
    ci_skills_add_version(s, sk, &V2, 0, 1700000001000000);
    assert_int_equal(ci_skills_delete_version(s, sk, 2, unnamed, &gone), CI_SKILLS_OK);
    assert_int_equal(ci_skill_records_save(s, p, dir, &err), 0);
    text = file_text(p, apr_pstrcat(p, dir, "/skills.json", NULL), &len);
    assert_string_equal(text, apr_psprintf(
        p, "{\"format\":1,\"skills\":[{\"id\":\"%s\",\"owner\":\"owner-me\","
           "\"created_at\":1700000000123456,\"default_version\":1,\"latest_version\":1,"
           "\"numbered\":2,\"versions\":[{\"id\":\"%s\",\"version\":1,"
           "\"name\":\"basic-math\",\"description\":\"Adds numbers.\","
           "\"digest\":\"" D1 "\",\"created_at\":1700000000123456}]}]}",
        sk->id, v1->id));
    unit_remove_dir(p, dir);
}

static void test_no_file_is_no_records(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p), *err = NULL;
    ci_skills *s = ci_skills_create(p);
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), 0);
    assert_true(empty(s));
    assert_int_equal(ci_skill_records_load(s, p, apr_pstrcat(p, dir, "/none", NULL), &err), 0);
    assert_true(empty(s));
    assert_null(err);
    unit_remove_dir(p, dir);
}

#define HEX_A "0123456789abcdef0123456789abcdef"
#define HEX_B "fedcba9876543210fedcba9876543210"
#define SKILL_A "skill_" HEX_A
#define SKILL_B "skill_" HEX_B
#define VER_A "skillver_" HEX_A
#define VER_B "skillver_" HEX_B
/* A version and a skill as a document has them; the fields not given are
 * good ones. */
#define VERSION(id, n, digest) \
    "{\"id\":\"" id "\",\"version\":" #n ",\"name\":\"n\",\"description\":\"d\"," \
    "\"digest\":\"" digest "\",\"created_at\":5}"
#define SKILL(id, numbered, def, latest, versions) \
    "{\"id\":\"" id "\",\"owner\":\"o\",\"created_at\":7,\"default_version\":" #def \
    ",\"latest_version\":" #latest ",\"numbered\":" #numbered ",\"versions\":[" versions "]}"
/* a digest that would climb out of the store */
#define HOSTILE "../x"   /* check-clone: a hostile digest */
#define DOC(skills) "{\"format\":1,\"skills\":[" skills "]}"
#define GOOD_A SKILL(SKILL_A, 3, 1, 2, VERSION(VER_A, 1, D1) "," VERSION(VER_B, 2, D2))

static const struct {
    const char *doc;
    const char *why;                 /* after "the skill records in DIR/skills.json " */
} MALFORMED[] = {
    { "", "are not JSON: the JSON text ends too early" },
    { "{\"format\":1,\"skills\":[" GOOD_A, "are not JSON: the JSON text ends too early" },
    { DOC(GOOD_A) " x", "are not JSON: unexpected character at byte 530" },
    { "{\"format\":1,\"skills\":[],\"x\":\"\xc3\"}", "are not JSON: invalid UTF-8 at byte 29" },
    { "[]", "are refused: format is not 1" },
    { "{\"skills\":[]}", "are refused: format is not 1" },
    { "{\"format\":2,\"skills\":[]}", "are refused: format is not 1" },
    { "{\"format\":\"1\",\"skills\":[]}", "are refused: format is not 1" },
    { "{\"format\":1}", "are refused: skills is not a list" },
    { "{\"format\":1,\"skills\":{}}", "are refused: skills is not a list" },
    { DOC("1"), "are refused: skills[0].id is not a skill's id" },
    { DOC(SKILL("skill_" HEX_A "0", 3, 1, 2, VERSION(VER_A, 1, D1))),
      "are refused: skills[0].id is not a skill's id" },
    { DOC(SKILL("skill_0123456789ABCDEF0123456789abcdef", 1, 1, 1, VERSION(VER_A, 1, D1))),
      "are refused: skills[0].id is not a skill's id" },
    { DOC(SKILL(VER_A, 1, 1, 1, VERSION(VER_A, 1, D1))),
      "are refused: skills[0].id is not a skill's id" },
    { DOC("{\"id\":\"" SKILL_A "\",\"owner\":\"\"}"),
      "are refused: skills[0].owner is not an owner" },
    { DOC("{\"id\":\"" SKILL_A "\",\"owner\":7}"),
      "are refused: skills[0].owner is not an owner" },
    { DOC("{\"id\":\"" SKILL_A "\",\"owner\":\"o\",\"created_at\":-1}"),
      "are refused: skills[0].created_at is not a time" },
    { DOC("{\"id\":\"" SKILL_A "\",\"owner\":\"o\",\"created_at\":7.5}"),
      "are refused: skills[0].created_at is not a time" },
    { DOC(SKILL(SKILL_A, 0, 1, 1, VERSION(VER_A, 1, D1))),
      "are refused: skills[0].numbered is not a version number" },
    { DOC(SKILL(SKILL_A, 1000000001, 1, 1, VERSION(VER_A, 1, D1))),
      "are refused: skills[0].numbered is not a version number" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, "")),
      "are refused: skills[0].versions is not a list of versions" },
    { DOC("{\"id\":\"" SKILL_A "\",\"owner\":\"o\",\"created_at\":7,\"numbered\":1,"
          "\"versions\":{}}"),
      "are refused: skills[0].versions is not a list of versions" },
    { DOC(GOOD_A "," GOOD_A), "are refused: skills[1].id is there twice" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, "[]")),
      "are refused: skills[0].versions[0].id is not a version's id" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, VERSION(SKILL_A, 1, D1))),
      "are refused: skills[0].versions[0].id is not a version's id" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, VERSION(VER_A, 0, D1))),
      "are refused: skills[0].versions[0].version is not a version number" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, VERSION(VER_A, "1", D1))),
      "are refused: skills[0].versions[0].version is not a version number" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, "{\"id\":\"" VER_A "\",\"version\":1,"
                                  "\"description\":\"d\"}")),
      "are refused: skills[0].versions[0].name is not a string" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, "{\"id\":\"" VER_A "\",\"version\":1,\"name\":\"n\","
                                  "\"description\":null}")),
      "are refused: skills[0].versions[0].description is not a string" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, VERSION(VER_A, 1, "abc"))),
      "are refused: skills[0].versions[0].digest is not a digest" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, VERSION(VER_A, 1, HOSTILE))),
      "are refused: skills[0].versions[0].digest is not a digest" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, VERSION(VER_A, 1,
          "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))),
      "are refused: skills[0].versions[0].digest is not a digest" },
    { DOC(SKILL(SKILL_A, 1, 1, 1, "{\"id\":\"" VER_A "\",\"version\":1,\"name\":\"n\","
                                  "\"description\":\"d\",\"digest\":\"" D1 "\"}")),
      "are refused: skills[0].versions[0].created_at is not a time" },
    { DOC(SKILL(SKILL_A, 3, 1, 2, VERSION(VER_A, 1, D1) "," VERSION(VER_A, 2, D2))),
      "are refused: skills[0].versions[1].id is there twice" },
    /* the first skill good: it goes too */
    { DOC(GOOD_A "," SKILL(SKILL_B, 1, 1, 1, VERSION(VER_A, 1, D3 "3"))),
      "are refused: skills[1].versions[0].digest is not a digest" },
};

/* A skill of two versions whose numbers disagree (NUMBERED, DEFAULT,
 * LATEST, its versions' FIRST and SECOND), and what is wrong with it. */
static const struct {
    int numbered, def, latest, first, second;
    const char *why;
} NUMBERS[] = {
    { 3, 1, 2, 2, 1, "versions[1].version is not above the one before it" },
    { 3, 1, 2, 2, 2, "versions[1].version is not above the one before it" },
    { 2, 1, 3, 1, 3, "versions[1].version is above the skill's numbered" },
    { 3, 3, 2, 1, 2, "default_version names none of its versions" },
    { 3, 0, 2, 1, 2, "default_version names none of its versions" },
    { 3, 1, 1, 1, 2, "latest_version is not its newest version" },
    { 3, 1, 3, 1, 2, "latest_version is not its newest version" },
    { 3, 1, 2, 1, 2, NULL },         /* agreeing (the last): loaded */
};

static void test_good_documents_load(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p), *err = NULL;
    const char *path = apr_pstrcat(p, dir, "/skills.json", NULL);
    static const char two[] =
        DOC(GOOD_A "," SKILL(SKILL_B, 9, 4, 7,
                             VERSION(VER_A, 4, D3) "," VERSION(VER_B, 7, D1)));
    ci_skills *s = ci_skills_create(p);
    ci_skill *sk;
    write_file(path, two, strlen(two));
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), 0);
    assert_int_equal(ci_skills_count(s), 2);
    assert_int_equal(ci_skills_get(s, "o", SKILL_B, &sk), CI_SKILLS_OK);
    assert_int_equal(sk->default_version, 4);
    assert_int_equal(sk->latest_version, 7);
    assert_int_equal(sk->created_at, 7);
    assert_string_equal(ci_skills_version(sk, 4)->id, VER_A);   /* each skill's own ids */
    assert_string_equal(ci_skills_version(sk, 4)->skill_id, SKILL_B);
    assert_int_equal(ci_skills_version(sk, 4)->created_at, 5);
    assert_int_equal(ci_skills_add_version(s, sk, &V1, 0, 8)->version, 10);
    assert_int_equal(ci_skills_digest_uses(s, D1), 3);
    /* the skills must hold none before a load */
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), -1);
    assert_string_equal(err, "the skill records are loaded only into no skills");
    assert_int_equal(ci_skills_count(s), 2);
    unit_remove_dir(p, dir);
}

/* DOC refused from DIR's records with "the skill records in DIR/skills.json "
 * and WHY, the skills left empty. */
static void assert_refused(apr_pool_t *p, const char *dir, const char *doc, const char *why)
{
    const char *path = apr_pstrcat(p, dir, "/skills.json", NULL), *err = NULL;
    ci_skills *s = ci_skills_create(p);
    write_file(path, doc, strlen(doc));
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "the skill records in %s %s", path, why));
    assert_true(empty(s));
}

static void test_malformed_documents_are_refused_whole(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p);
    unsigned i;
    for (i = 0; i < sizeof(MALFORMED) / sizeof(*MALFORMED); i++)
        assert_refused(p, dir, MALFORMED[i].doc, MALFORMED[i].why);
    unit_remove_dir(p, dir);
}

static void test_numbers_that_disagree_are_refused(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p), *err = NULL;
    ci_skills *s = ci_skills_create(p);
    unsigned i;
    for (i = 0; i < sizeof(NUMBERS) / sizeof(*NUMBERS); i++) {
        /* (the skill's fields in the order the document has them) */
        const char *doc = apr_psprintf(
            p, DOC(SKILL(SKILL_A, %d, %d, %d,
                         VERSION(VER_A, %d, D1) "," VERSION(VER_B, %d, D2))),
            NUMBERS[i].def, NUMBERS[i].latest, NUMBERS[i].numbered, NUMBERS[i].first,
            NUMBERS[i].second);
        if (NUMBERS[i].why)
            assert_refused(p, dir, doc, apr_pstrcat(p, "are refused: skills[0].",
                                                    NUMBERS[i].why, NULL));
        else
            write_file(apr_pstrcat(p, dir, "/skills.json", NULL), doc, strlen(doc));
    }
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), 0);   /* the last: agreeing */
    assert_int_equal(ci_skills_count(s), 1);
    unit_remove_dir(p, dir);
}

/* Whether SK is one the calls of ci_skills.h expect: found by its id, with
 * versions by number, its default one of them, its latest the newest, none
 * above the highest number given, each bundle counted. */
static void assert_whole(ci_skills *s, ci_skill *sk)
{
    ci_skill *found;
    int i;
    assert_int_equal(ci_skills_get(s, sk->owner, sk->id, &found), CI_SKILLS_OK);
    assert_ptr_equal(found, sk);
    assert_true(sk->versions->nelts > 0);
    for (i = 0; i < sk->versions->nelts; i++) {
        const ci_skill_version *v = APR_ARRAY_IDX(sk->versions, i, ci_skill_version *);
        const ci_skill_version *before =
            i ? APR_ARRAY_IDX(sk->versions, i - 1, ci_skill_version *) : NULL;
        assert_true(!before || v->version > before->version);
        assert_true(ci_skills_digest_uses(s, v->digest) > 0);
        assert_string_equal(v->skill_id, sk->id);
    }
    assert_non_null(ci_skills_shown(sk));
    assert_int_equal(sk->latest_version,
                     APR_ARRAY_IDX(sk->versions, sk->versions->nelts - 1,
                                   ci_skill_version *)->version);
    assert_true(ci_skills_numbered(sk) >= sk->latest_version);
}

/* The records at DIR loaded into fresh skills (from P): -1 with the skills
 * empty, or 0 with whole ones. */
static void load_or_refuse(apr_pool_t *p, const char *dir)
{
    ci_skills *s = ci_skills_create(p);
    const char *err = NULL;
    int i;
    if (ci_skill_records_load(s, p, dir, &err) != 0) {
        assert_non_null(err);
        assert_true(empty(s));
        return;
    }
    for (i = 0; i < ci_skills_count(s); i++)
        assert_whole(s, ci_skills_at(s, i));
}

static void test_truncated_and_garbled_documents(void **state)
{
    apr_pool_t *p = *state, *each;
    const char *dir = records_dir(p), *err = NULL, *good;
    const char *path = apr_pstrcat(p, dir, "/skills.json", NULL);
    static const char bytes[] = { '9', 'F', '-', '"', '}', ',', '\xff', '\0' };
    char *garbled;
    apr_size_t len, at;
    unsigned b;
    assert_int_equal(ci_skill_records_save(several(p), p, dir, &err), 0);
    good = file_text(p, path, &len);
    garbled = apr_pmemdup(p, good, len);
    apr_pool_create(&each, p);
    for (at = 0; at < len; at++) {
        ci_skills *s = ci_skills_create(each);
        write_file(path, good, at);                 /* cut short: never JSON */
        assert_int_equal(ci_skill_records_load(s, each, dir, &err), -1);
        assert_true(empty(s));
        for (b = 0; b < sizeof(bytes); b++) {
            garbled[at] = bytes[b];
            write_file(path, garbled, len);
            load_or_refuse(each, dir);
        }
        garbled[at] = good[at];
        apr_pool_clear(each);
    }
    unit_remove_dir(p, dir);
}

static void test_a_failed_save_leaves_nothing(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p), *err = NULL;
    const char *none = apr_pstrcat(p, dir, "/none", NULL);
    ci_skills *s = several(p);
    /* no such folder */
    assert_int_equal(ci_skill_records_save(s, p, none, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "the skill store could not write %s/skills.json: "
                                             "No such file or directory", none));
    assert_string_equal(unit_names_in(p, dir), "");
    /* written beside, then not renamed (a folder stands in the way): the
     * file written is gone */
    assert_int_equal(mkdir(apr_pstrcat(p, dir, "/skills.json", NULL), 0700), 0);
    assert_int_equal(mkdir(apr_pstrcat(p, dir, "/skills.json/x", NULL), 0700), 0);
    assert_int_equal(ci_skill_records_save(s, p, dir, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "the skill store could not write %s/skills.json: "
                                             "Is a directory", dir));
    assert_string_equal(unit_names_in(p, dir), "skills.json");
    assert_string_equal(unit_names_in(p, apr_pstrcat(p, dir, "/skills.json", NULL)), "x");
    /* a folder it may not write in (root may write anywhere) */
    if (geteuid() != 0) {
        const char *locked = apr_pstrcat(p, dir, "/locked", NULL);
        assert_int_equal(mkdir(locked, 0500), 0);
        assert_int_equal(ci_skill_records_save(s, p, locked, &err), -1);
        assert_string_equal(err, apr_psprintf(p, "the skill store could not write "
                                                 "%s/skills.json: Permission denied", locked));
        assert_string_equal(unit_names_in(p, locked), "");
    }
    unit_remove_dir(p, dir);
}

static void test_what_is_not_a_document_is_not_read(void **state)
{
    apr_pool_t *p = *state;
    const char *dir = records_dir(p), *other = records_dir(p), *err = NULL;
    const char *path = apr_pstrcat(p, dir, "/skills.json", NULL);
    ci_skills *s = ci_skills_create(p);
    int fd;
    /* a link, even to good records, is not followed */
    assert_int_equal(ci_skill_records_save(several(p), p, other, &err), 0);
    assert_int_equal(symlink(apr_pstrcat(p, other, "/skills.json", NULL), path), 0);
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "the skill store could not read %s: "
                                             "Too many levels of symbolic links", path));
    assert_true(empty(s));
    assert_int_equal(unlink(path), 0);
    /* a folder */
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "the skill store's %s is not a file", path));
    assert_int_equal(rmdir(path), 0);
    /* a file above the bound (sparse: nothing is read of it) */
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)CI_SKILL_RECORDS_MAX + 1), 0);
    close(fd);
    assert_int_equal(ci_skill_records_load(s, p, dir, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "the skill store's %s is larger than "
                                             "268435456 bytes", path));
    assert_true(empty(s));
    unit_remove_dir(p, dir);
    unit_remove_dir(p, other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_records_come_back_the_same),
        TEST(test_the_document_is_as_described),
        TEST(test_no_file_is_no_records),
        TEST(test_good_documents_load),
        TEST(test_malformed_documents_are_refused_whole),
        TEST(test_numbers_that_disagree_are_refused),
        TEST(test_truncated_and_garbled_documents),
        TEST(test_a_failed_save_leaves_nothing),
        TEST(test_what_is_not_a_document_is_not_read),
    };
    apr_initialize();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_skill_store.c - skill bundles on disk (core/ci_skill_store.c): a
 * bundle stored once as its zip and its tree, read back byte for byte,
 * stored again as a no-op, by four processes at once with one result and
 * nothing left beside it, removed whole; digests that are not ours make no
 * path, and a link planted in the store is not followed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_skill_bundle.h"
#include "ci_skill_store.h"
#include "unit_dir.h"
#include "unit_pool.h"

static const char *const MANIFEST =
    "---\nname: basic-math\ndescription: Adds numbers with a script.\n---\n# Basic math\n";
/* a digest that would climb out of the store */
static const char *const HOSTILE = "../x";  /* check-clone: a hostile digest */
static const char *const SCRIPT = "import sys\nprint(sum(map(int, sys.argv[1:])))\n";

static ci_skill_bundle *bundle(apr_pool_t *p, const char **zip, apr_size_t *len)
{
    ci_skill_builder *b = ci_skill_builder_make(p, NULL);
    ci_skill_bundle *out;
    const char *err = NULL;
    assert_int_equal(ci_skill_builder_add(b, "basic_math/SKILL.md", MANIFEST,
                                          strlen(MANIFEST), &err), 0);
    assert_int_equal(ci_skill_builder_add(b, "basic_math/scripts/add.py", SCRIPT,
                                          strlen(SCRIPT), &err), 0);
    assert_int_equal(ci_skill_builder_finish(b, &out, &err), 0);
    assert_int_equal(ci_skill_bundle_zip(p, out, zip, len, &err), 0);
    return out;
}

static const char *store_dir(apr_pool_t *p)
{
    return unit_temp_dir(p, "test_skill_store");
}

static const char *file_text(apr_pool_t *p, const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = apr_pcalloc(p, 4096);
    assert_non_null(f);
    assert_true(fread(buf, 1, 4095, f) < 4095);
    fclose(f);
    return buf;
}

static void test_stored_once_read_back_removed(void **state)
{
    apr_pool_t *p = *state;
    const char *zip, *back, *err = NULL, *dir = store_dir(p), *tree;
    apr_size_t len, blen;
    ci_skill_bundle *b = bundle(p, &zip, &len);
    struct stat before, after;
    assert_false(ci_skill_store_has(p, dir, b->digest));
    assert_int_equal(ci_skill_store_read_zip(p, dir, b->digest, &back, &blen, &err), 1);
    assert_int_equal(ci_skill_store_put(p, dir, b, zip, len, &err), 0);
    assert_true(ci_skill_store_has(p, dir, b->digest));
    tree = ci_skill_store_tree(p, dir, b->digest);
    assert_string_equal(tree, apr_pstrcat(p, dir, "/", apr_pstrndup(p, b->digest, 2), "/",
                                          b->digest, NULL));
    assert_string_equal(file_text(p, apr_pstrcat(p, tree, "/SKILL.md", NULL)), MANIFEST);
    assert_string_equal(file_text(p, apr_pstrcat(p, tree, "/scripts/add.py", NULL)), SCRIPT);
    assert_string_equal(unit_names_in(p, tree), "SKILL.md scripts");
    assert_int_equal(ci_skill_store_read_zip(p, dir, b->digest, &back, &blen, &err), 0);
    assert_int_equal(blen, len);
    assert_memory_equal(back, zip, len);
    /* written once: a second put leaves the first tree as it was */
    assert_int_equal(stat(tree, &before), 0);
    assert_int_equal(ci_skill_store_put(p, dir, b, zip, len, &err), 0);
    assert_int_equal(stat(tree, &after), 0);
    assert_int_equal(before.st_ino, after.st_ino);
    assert_string_equal(unit_names_in(p, apr_pstrndup(p, tree, strlen(tree) - 65)),
                        apr_pstrcat(p, b->digest, " ", b->digest, ".zip", NULL));
    assert_int_equal(ci_skill_store_remove(p, dir, b->digest, &err), 0);
    assert_false(ci_skill_store_has(p, dir, b->digest));
    assert_int_equal(ci_skill_store_read_zip(p, dir, b->digest, &back, &blen, &err), 1);
    assert_string_equal(unit_names_in(p, apr_pstrndup(p, tree, strlen(tree) - 65)), "");
    assert_int_equal(ci_skill_store_remove(p, dir, b->digest, &err), 0);
    unit_remove_dir(p, dir);
}

static void test_four_writers_at_once_one_result(void **state)
{
    apr_pool_t *p = *state;
    const char *zip, *err = NULL, *dir = store_dir(p), *tree;
    apr_size_t len;
    ci_skill_bundle *b = bundle(p, &zip, &len);
    int go[2], i, status;
    pid_t kids[4];
    assert_int_equal(pipe(go), 0);
    for (i = 0; i < 4; i++) {
        char c;
        if ((kids[i] = fork()) == 0) {
            close(go[1]);
            _exit(read(go[0], &c, 1) == 0 &&
                  ci_skill_store_put(p, dir, b, zip, len, &err) == 0 ? 0 : 1);
        }
        assert_true(kids[i] > 0);
    }
    close(go[0]);
    close(go[1]);                    /* all four start now */
    for (i = 0; i < 4; i++) {
        assert_int_equal(waitpid(kids[i], &status, 0), kids[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    tree = ci_skill_store_tree(p, dir, b->digest);
    assert_string_equal(file_text(p, apr_pstrcat(p, tree, "/scripts/add.py", NULL)), SCRIPT);
    /* nothing of the writers that came second is left beside it */
    assert_string_equal(unit_names_in(p, apr_pstrndup(p, tree, strlen(tree) - 65)),
                        apr_pstrcat(p, b->digest, " ", b->digest, ".zip", NULL));
    unit_remove_dir(p, dir);
}

static void test_digests_that_are_not_ours_make_no_path(void **state)
{
    apr_pool_t *p = *state;
    const char *zip, *err = NULL, *dir = store_dir(p);
    apr_size_t len;
    ci_skill_bundle *b = bundle(p, &zip, &len);
    assert_true(ci_skill_store_digest_ok(b->digest));
    assert_false(ci_skill_store_digest_ok(NULL));
    assert_false(ci_skill_store_digest_ok(HOSTILE));
    assert_false(ci_skill_store_digest_ok(apr_pstrcat(p, b->digest, "0", NULL)));
    assert_false(ci_skill_store_digest_ok(apr_pstrndup(p, b->digest, 63)));
    assert_false(ci_skill_store_digest_ok(
        "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"));
    assert_false(ci_skill_store_has(p, dir, HOSTILE));
    assert_int_equal(ci_skill_store_read_zip(p, dir, HOSTILE, &zip, &len, &err), 1);
    assert_int_equal(ci_skill_store_remove(p, dir, HOSTILE, &err), 0);
    b->digest = HOSTILE;
    assert_int_equal(ci_skill_store_put(p, dir, b, zip, len, &err), -1);
    assert_string_equal(err, "the skill store was given a bundle without a digest");
    assert_string_equal(unit_names_in(p, dir), "");
    unit_remove_dir(p, dir);
}

static void test_a_link_planted_in_the_store_is_not_followed(void **state)
{
    apr_pool_t *p = *state;
    const char *zip, *err = NULL, *dir = store_dir(p), *elsewhere = store_dir(p), *shard;
    apr_size_t len;
    ci_skill_bundle *b = bundle(p, &zip, &len);
    shard = apr_pstrcat(p, dir, "/", apr_pstrndup(p, b->digest, 2), NULL);
    assert_int_equal(symlink(elsewhere, shard), 0);
    assert_int_equal(ci_skill_store_put(p, dir, b, zip, len, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "the skill store could not write %s: File exists",
                                          shard));
    assert_string_equal(unit_names_in(p, elsewhere), "");
    assert_false(ci_skill_store_has(p, dir, b->digest));
    unit_remove_dir(p, dir);
    unit_remove_dir(p, elsewhere);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_stored_once_read_back_removed),
        TEST(test_four_writers_at_once_one_result),
        TEST(test_digests_that_are_not_ours_make_no_path),
        TEST(test_a_link_planted_in_the_store_is_not_followed),
    };
    apr_initialize();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

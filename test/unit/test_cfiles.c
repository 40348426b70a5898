/*
 * test_cfiles.c - container files as the Containers API shows them
 * (mod_code_interpreter/core/ci_cfiles.c): names accepted and refused, ids
 * stable and distinct, the kernel's listing parsed (hostile entries left
 * out), order and paging.
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

#include "ci_cfiles.h"
#include "unit_pool.h"

#define CNTR "cntr_0123"

static void test_names(void **state)
{
    char longname[300];
    (void)state;
    assert_true(ci_cfile_name_ok("a.csv", 5));
    assert_true(ci_cfile_name_ok("..hidden", 8));
    assert_true(ci_cfile_name_ok("back\\slash", 10));
    assert_false(ci_cfile_name_ok("", 0));
    assert_false(ci_cfile_name_ok(NULL, 0));
    assert_false(ci_cfile_name_ok(".", 1));
    assert_false(ci_cfile_name_ok("..", 2));
    assert_false(ci_cfile_name_ok("a/b", 3));
    assert_false(ci_cfile_name_ok("../etc/passwd", 13));
    assert_false(ci_cfile_name_ok("a\nb", 3));
    assert_false(ci_cfile_name_ok("a\rb", 3));
    assert_false(ci_cfile_name_ok("a\0b", 3));
    memset(longname, 'x', sizeof(longname));
    assert_true(ci_cfile_name_ok(longname, 255));
    assert_false(ci_cfile_name_ok(longname, 256));
}

static void test_ids(void **state)
{
    apr_pool_t *p = *state;
    const char *a = ci_cfile_id(p, CNTR, "a.csv");
    /* sha256("cntr_0123\0a.csv"), its first 16 bytes */
    assert_int_equal(strlen(a), 38);
    assert_memory_equal(a, "cfile_", 6);
    assert_string_equal(a, ci_cfile_id(p, CNTR, "a.csv"));
    assert_string_not_equal(a, ci_cfile_id(p, CNTR, "b.csv"));
    assert_string_not_equal(a, ci_cfile_id(p, "cntr_0124", "a.csv"));
    /* the separator keeps ("ab", "c") and ("a", "bc") apart */
    assert_string_not_equal(ci_cfile_id(p, "ab", "c"), ci_cfile_id(p, "a", "bc"));
}

static const char LISTING[] =
    "{\"type\": \"files\", \"files\": ["
    "{\"name\": \"new.csv\", \"bytes\": 3, \"mtime\": 300},"
    "{\"name\": \"old.txt\", \"bytes\": 10, \"mtime\": 100},"
    "{\"name\": \"mid.bin\", \"bytes\": 0, \"mtime\": 200},"
    "{\"name\": \"a/b\", \"bytes\": 1, \"mtime\": 1},"
    "{\"name\": \"..\", \"bytes\": 1, \"mtime\": 1},"
    "{\"name\": \"x\\ny\", \"bytes\": 1, \"mtime\": 1},"
    "{\"name\": \"neg\", \"bytes\": -1, \"mtime\": 1},"
    "{\"name\": 7, \"bytes\": 1, \"mtime\": 1},"
    "{\"bytes\": 1, \"mtime\": 1},"
    "{\"name\": \"nosize\", \"mtime\": 1}"
    "]}";

static const char *name_at(const apr_array_header_t *a, int i)
{
    return APR_ARRAY_IDX(a, i, ci_cfile).name;
}

static void test_parse(void **state)
{
    apr_pool_t *p = *state;
    apr_array_header_t *f = ci_cfiles_parse(p, CNTR, LISTING, sizeof(LISTING) - 1);
    const ci_cfile *found;
    assert_non_null(f);
    assert_int_equal(f->nelts, 3);
    assert_string_equal(name_at(f, 0), "old.txt");
    assert_string_equal(name_at(f, 1), "mid.bin");
    assert_string_equal(name_at(f, 2), "new.csv");
    found = ci_cfiles_find(f, ci_cfile_id(p, CNTR, "mid.bin"));
    assert_non_null(found);
    assert_int_equal(found->bytes, 0);
    assert_int_equal(found->created_at, 200);
    assert_null(ci_cfiles_find(f, ci_cfile_id(p, CNTR, "a/b")));
    assert_null(ci_cfiles_find(f, "cfile_nope"));
    assert_null(ci_cfiles_find(f, NULL));
    assert_null(ci_cfiles_parse(p, CNTR, "{\"type\": \"not_found\"}", 21));
    assert_null(ci_cfiles_parse(p, CNTR, "not json", 8));
    assert_null(ci_cfiles_parse(p, CNTR, "{\"type\": \"files\"}", 17));
}

static void test_paging(void **state)
{
    apr_pool_t *p = *state;
    apr_array_header_t *f = ci_cfiles_parse(p, CNTR, LISTING, sizeof(LISTING) - 1), *pg;
    int more = -1;
    pg = ci_cfiles_page(p, f, NULL, 2, 0, &more);
    assert_int_equal(pg->nelts, 2);
    assert_int_equal(more, 1);
    assert_string_equal(name_at(pg, 0), "old.txt");
    pg = ci_cfiles_page(p, f, APR_ARRAY_IDX(pg, 1, ci_cfile).id, 2, 0, &more);
    assert_int_equal(pg->nelts, 1);
    assert_int_equal(more, 0);
    assert_string_equal(name_at(pg, 0), "new.csv");
    pg = ci_cfiles_page(p, f, NULL, 3, 1, &more);
    assert_int_equal(pg->nelts, 3);
    assert_int_equal(more, 0);
    assert_string_equal(name_at(pg, 0), "new.csv");
    assert_string_equal(name_at(pg, 2), "old.txt");
    pg = ci_cfiles_page(p, f, ci_cfile_id(p, CNTR, "new.csv"), 1, 1, &more);
    assert_int_equal(pg->nelts, 1);
    assert_int_equal(more, 1);
    assert_string_equal(name_at(pg, 0), "mid.bin");
    pg = ci_cfiles_page(p, f, "cfile_unknown", 10, 0, &more);
    assert_int_equal(pg->nelts, 0);
    assert_int_equal(more, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_names),
        TEST(test_ids),
        TEST(test_parse),
        TEST(test_paging),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("cfiles", tests, NULL, NULL);
    apr_terminate();
    return rc;
}

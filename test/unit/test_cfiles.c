/*
 * test_cfiles.c - container files as the Containers API shows them
 * (mod_code_interpreter/core/ci_cfiles.c): names accepted and refused, ids
 * stable and distinct, the kernel's listing parsed (hostile entries left
 * out), order and paging; the citations of links to them
 * (ci_citations.c) and the upstream Files API's URLs (ci_filesapi.c).
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
#include "ci_citations.h"
#include "ci_filesapi.h"
#include "ci_json.h"
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
    assert_false(ci_cfile_name_ok("../etc/passwd", 13)); /* check-clone: a hostile name */
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

static void test_source_of_a_listed_file(void **state)
{
    apr_pool_t *p = *state;
    const char *line = "{\"type\":\"files\",\"files\":["
                       "{\"name\":\"up.csv\",\"bytes\":3,\"mtime\":5,\"source\":\"user\"},"
                       "{\"name\":\"made.csv\",\"bytes\":3,\"mtime\":6},"
                       "{\"name\":\"odd.csv\",\"bytes\":3,\"mtime\":7,\"source\":\"root\"}]}";
    apr_array_header_t *f = ci_cfiles_parse(p, CNTR, line, strlen(line));
    assert_int_equal(f->nelts, 3);
    assert_int_equal(APR_ARRAY_IDX(f, 0, ci_cfile).user, 1);
    assert_int_equal(APR_ARRAY_IDX(f, 1, ci_cfile).user, 0);
    assert_int_equal(APR_ARRAY_IDX(f, 2, ci_cfile).user, 0);
}

/* ---- citations ---- */

typedef struct files_baton {
    apr_array_header_t *files;
    int asked;
} files_baton;

static apr_array_header_t *give_files(void *baton, apr_pool_t *p)
{
    files_baton *b = baton;
    (void)p;
    b->asked++;
    return b->files;
}

static files_baton *some_files(apr_pool_t *p)
{
    files_baton *b = apr_pcalloc(p, sizeof(*b));
    b->files = apr_array_make(p, 3, sizeof(ci_cfile));
    ci_cfiles_add(p, b->files, CNTR, "out.csv", 10, 1, 0);
    ci_cfiles_add(p, b->files, CNTR, "out.csv.bak", 10, 1, 0);
    ci_cfiles_add(p, b->files, CNTR, "r\xc3\xa9sum\xc3\xa9 1.txt", 10, 1, 1);
    return b;
}

/* The single annotation of TEXT, checked against its fields. */
static void assert_cited(apr_pool_t *p, ci_citer *c, const char *text, const char *name,
                         int start, int end)
{
    json_object *anns = ci_json_own(p, ci_citer_annotations(c, text));
    json_object *a = json_object_array_get_idx(anns, 0);
    assert_int_equal(json_object_array_length(anns), 1);
    assert_string_equal(ci_json_str(a, "type"), "container_file_citation");
    assert_string_equal(ci_json_str(a, "container_id"), CNTR);
    assert_string_equal(ci_json_str(a, "filename"), name);
    assert_string_equal(ci_json_str(a, "file_id"), ci_cfile_id(p, CNTR, name));
    assert_int_equal(json_object_get_int(ci_json_get(a, "start_index", json_type_int)),
                     start);
    assert_int_equal(json_object_get_int(ci_json_get(a, "end_index", json_type_int)), end);
}

static int cited(apr_pool_t *p, ci_citer *c, const char *text)
{
    return (int)json_object_array_length(ci_json_own(p, ci_citer_annotations(c, text)));
}

static void test_citations(void **state)
{
    apr_pool_t *p = *state;
    files_baton *b = some_files(p);
    ci_citer *c = ci_citer_create(p, CNTR, give_files, b);
    /* no link: the files are not even asked for */
    assert_int_equal(cited(p, c, "nothing to see"), 0);
    assert_int_equal(b->asked, 0);
    /* offsets in characters: "\xe2\x80\x99" (U+2019) is one */
    assert_cited(p, c, "It\xe2\x80\x99s [here](sandbox:/mnt/data/out.csv).", "out.csv",
                 12, 37);
    assert_int_equal(b->asked, 1);
    /* the longest name the link ends with; a sentence's period ends it */
    assert_cited(p, c, "sandbox:/mnt/data/out.csv.bak", "out.csv.bak", 0, 29);
    assert_cited(p, c, "see sandbox:/mnt/data/out.csv.", "out.csv", 4, 29);
    assert_cited(p, c, "(sandbox:/mnt/data/r\xc3\xa9sum\xc3\xa9 1.txt)",
                 "r\xc3\xa9sum\xc3\xa9 1.txt", 1, 31);
    /* not a file of the container, or not where a link ends */
    assert_int_equal(cited(p, c, "sandbox:/mnt/data/nope.txt"), 0);
    assert_int_equal(cited(p, c, "sandbox:/mnt/data/out.csvx"), 0);
    assert_int_equal(cited(p, c, "sandbox:/mnt/data/"), 0);
    assert_int_equal(cited(p, c, "sandbox:/mnt/data/sub/out.csv"), 0);
    /* two links, in order; the files asked for once */
    assert_int_equal(cited(p, c, "sandbox:/mnt/data/out.csv and "
                                 "sandbox:/mnt/data/out.csv.bak"), 2);
    assert_int_equal(b->asked, 1);
}

static void test_citations_without_files(void **state)
{
    apr_pool_t *p = *state;
    files_baton b = { NULL, 0 };
    ci_citer *c = ci_citer_create(p, CNTR, give_files, &b);
    assert_int_equal(cited(p, c, "sandbox:/mnt/data/out.csv"), 0);
    assert_int_equal(cited(p, c, "sandbox:/mnt/data/out.csv"), 0);
    assert_int_equal(b.asked, 1);
}

static void test_citations_applied_to_an_item(void **state)
{
    apr_pool_t *p = *state;
    files_baton *b = some_files(p);
    ci_citer *c = ci_citer_create(p, CNTR, give_files, b);
    const char *err = NULL, *src =
        "{\"id\":\"msg_1\",\"type\":\"message\",\"content\":["
        "{\"type\":\"output_text\",\"text\":\"a sandbox:/mnt/data/out.csv\","
        "\"annotations\":[{\"type\":\"url_citation\"}]},"
        "{\"type\":\"refusal\",\"refusal\":\"sandbox:/mnt/data/out.csv\"}]}";
    json_object *item = ci_json_parse(p, src, strlen(src), &err);
    json_object *content = ci_json_get(item, "content", json_type_array), *anns;
    ci_citer_apply_item(c, item);
    anns = ci_json_get(json_object_array_get_idx(content, 0), "annotations",
                       json_type_array);
    assert_int_equal(json_object_array_length(anns), 2);    /* the upstream's first */
    assert_string_equal(ci_json_str(json_object_array_get_idx(anns, 1), "type"),
                        "container_file_citation");
    assert_null(ci_json_get(json_object_array_get_idx(content, 1), "annotations",
                            json_type_array));
    /* known for the part: the same annotations, whatever text comes later */
    assert_int_equal(json_object_array_length(ci_citer_part(c, "msg_1", 0, NULL)), 1);
    assert_null(ci_citer_part(c, "msg_2", 0, NULL));
}

static void test_files_api_urls(void **state)
{
    apr_pool_t *p = *state;
    assert_string_equal(ci_filesapi_url(p, "https://api.openai.com/v1/responses",
                                        "file-abc", 0),
                        "https://api.openai.com/v1/files/file-abc");
    assert_string_equal(ci_filesapi_url(p, "http://h:8/x/v1/responses/?a=b", "f 1/..", 1),
                        "http://h:8/x/v1/files/f%201%2F../content");
    assert_null(ci_filesapi_url(p, "http://h/v1/chat/completions", "f", 0));
    assert_null(ci_filesapi_url(p, "http://h/responses-beta", "f", 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_names),
        TEST(test_ids),
        TEST(test_parse),
        TEST(test_paging),
        TEST(test_source_of_a_listed_file),
        TEST(test_citations),
        TEST(test_citations_without_files),
        TEST(test_citations_applied_to_an_item),
        TEST(test_files_api_urls),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("cfiles", tests, NULL, NULL);
    apr_terminate();
    return rc;
}

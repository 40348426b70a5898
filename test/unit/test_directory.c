/*
 * test_directory.c - the directory of containers on one node: owners kept
 * apart, caps with the requester's own LRU eviction, expiry with time passed
 * in, retention, listing pages, response ids and remembered items.
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

#include "ci_directory.h"
#include "unit_pool.h"

#define MIN(n) apr_time_from_sec((apr_time_t)(n) * 60)
#define T0 apr_time_from_sec(1700000000)

static ci_directory *dir(apr_pool_t *p, int max, int per_owner)
{
    ci_directory_limits lim = { max, per_owner, MIN(60), 1 << 20, 0, 0, 0 };
    return ci_directory_create(p, &lim);
}

/* The host's busy probe: the containers in the test's set are busy. */
static int in_busy_set(void *baton, const ci_container *c)
{
    return apr_hash_get(baton, c->id, APR_HASH_KEY_STRING) != NULL;
}

static apr_hash_t *busy_set(apr_pool_t *p, ci_directory *d)
{
    apr_hash_t *set = apr_hash_make(p);
    ci_directory_set_busy_probe(d, in_busy_set, set);
    return set;
}

static void set_busy(apr_hash_t *set, const ci_container *c, int busy)
{
    apr_hash_set(set, c->id, APR_HASH_KEY_STRING, busy ? c : NULL);
}

static ci_container *make(ci_directory *d, const char *owner, const char *name,
                          apr_time_t now)
{
    ci_container *c, *evicted;
    assert_int_equal(ci_directory_create_container(d, owner, NULL, name, "local", NULL, 0, 20 * 60,
                                                   now, &c, &evicted), CI_DIR_OK);
    assert_null(evicted);
    return c;
}

static void test_owners_apart(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p, 0, 0);
    ci_container *a = make(d, "own_a", "mine", T0), *got;
    assert_int_equal(strlen(a->id), 5 + 48);
    assert_memory_equal(a->id, "cntr_", 5);
    assert_string_equal(a->memory_limit, "1g");
    assert_int_equal(ci_directory_get(d, a->id, "own_a", &got), CI_DIR_OK);
    assert_ptr_equal(got, a);
    /* another owner, an unknown id, no owner: one answer */
    assert_int_equal(ci_directory_get(d, a->id, "own_b", &got), CI_DIR_NOT_FOUND);
    assert_null(got);
    assert_int_equal(ci_directory_get(d, "cntr_nope", "own_a", &got), CI_DIR_NOT_FOUND);
    assert_int_equal(ci_directory_get(d, a->id, NULL, &got), CI_DIR_NOT_FOUND);
    assert_int_not_equal(ci_directory_create_container(d, "", NULL, NULL, "local", NULL, 0, 20 * 60, T0,
                                                       &got, &got), CI_DIR_OK);
}

static void test_expiry_and_retention(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p, 0, 0);
    ci_container *a = make(d, "own_a", NULL, T0), *b = make(d, "own_a", NULL, T0), *got;
    apr_hash_t *busy = busy_set(p, d);
    apr_array_header_t *gone;
    ci_directory_touch(d, b, T0 + MIN(10));
    assert_int_equal(ci_directory_next_expiry(d), T0 + MIN(20));
    gone = ci_directory_expire(d, T0 + MIN(20) - 1, p);
    assert_int_equal(gone->nelts, 0);
    gone = ci_directory_expire(d, T0 + MIN(20), p);
    assert_int_equal(gone->nelts, 1);
    assert_ptr_equal(APR_ARRAY_IDX(gone, 0, ci_container *), a);
    assert_int_equal(a->status, CI_CNTR_EXPIRED);
    assert_int_equal(ci_directory_live(d), 1);
    /* expired: the owner is told so, within retention */
    assert_int_equal(ci_directory_get(d, a->id, "own_a", &got), CI_DIR_EXPIRED);
    assert_int_equal(ci_directory_get(d, a->id, "own_b", &got), CI_DIR_NOT_FOUND);
    /* a busy container is not expired while it runs */
    set_busy(busy, b, 1);
    assert_int_equal(ci_directory_expire(d, T0 + MIN(31), p)->nelts, 0);
    set_busy(busy, b, 0);
    assert_int_equal(ci_directory_expire(d, T0 + MIN(31), p)->nelts, 1);
    /* after retention: forgotten */
    ci_directory_expire(d, T0 + MIN(20) + MIN(60), p);
    assert_int_equal(ci_directory_get(d, a->id, "own_a", &got), CI_DIR_NOT_FOUND);
    assert_int_equal(ci_directory_get(d, b->id, "own_a", &got), CI_DIR_EXPIRED);
    assert_int_equal(ci_directory_next_expiry(d), 0);
}

static void test_caps_evict_only_the_requesters_own(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p, 3, 2);
    ci_container *a1 = make(d, "own_a", NULL, T0), *a2 = make(d, "own_a", NULL, T0 + 1);
    ci_container *b1 = make(d, "own_b", NULL, T0 + 2), *c, *evicted;
    apr_hash_t *busy = busy_set(p, d);
    ci_directory_touch(d, a1, T0 + 5);                 /* a2 is a's LRU */
    /* a at its own cap: its LRU goes */
    assert_int_equal(ci_directory_create_container(d, "own_a", NULL, NULL, "local", NULL, 0, 20 * 60,
                                                   T0 + 6, &c, &evicted), CI_DIR_OK);
    assert_ptr_equal(evicted, a2);
    assert_int_equal(a2->status, CI_CNTR_EXPIRED);
    assert_int_equal(ci_directory_live_of(d, "own_a"), 2);
    /* the node is full (3): b may only evict its own; with b1 busy, refused */
    set_busy(busy, b1, 1);
    assert_int_equal(ci_directory_create_container(d, "own_b", NULL, NULL, "local", NULL, 0, 20 * 60,
                                                   T0 + 7, &c, &evicted), CI_DIR_NODE_FULL);
    assert_null(evicted);
    assert_int_equal(a1->status, CI_CNTR_RUNNING);
    /* a new owner with nothing to give: refused, and nothing of others touched */
    assert_int_equal(ci_directory_create_container(d, "own_c", NULL, NULL, "local", NULL, 0, 20 * 60,
                                                   T0 + 8, &c, &evicted), CI_DIR_NODE_FULL);
    assert_int_equal(ci_directory_live(d), 3);
    set_busy(busy, b1, 0);
    assert_int_equal(ci_directory_create_container(d, "own_b", NULL, NULL, "local", NULL, 0, 20 * 60,
                                                   T0 + 9, &c, &evicted), CI_DIR_OK);
    assert_ptr_equal(evicted, b1);
}

static void test_list_pages(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p, 0, 0);
    ci_container *c[5];
    apr_array_header_t *page;
    int more, i;
    for (i = 0; i < 5; i++)
        c[i] = make(d, "own_a", i % 2 ? "odd" : "even", T0 + i);
    make(d, "own_b", "even", T0);
    page = ci_directory_list(d, "own_a", NULL, 2, 0, NULL, &more, p);
    assert_int_equal(page->nelts, 2);
    assert_true(more);
    assert_ptr_equal(APR_ARRAY_IDX(page, 0, ci_container *), c[4]);
    assert_ptr_equal(APR_ARRAY_IDX(page, 1, ci_container *), c[3]);
    page = ci_directory_list(d, "own_a", c[3]->id, 10, 0, NULL, &more, p);
    assert_int_equal(page->nelts, 3);
    assert_false(more);
    assert_ptr_equal(APR_ARRAY_IDX(page, 2, ci_container *), c[0]);
    page = ci_directory_list(d, "own_a", NULL, 10, 1, "even", &more, p);
    assert_int_equal(page->nelts, 3);
    assert_ptr_equal(APR_ARRAY_IDX(page, 0, ci_container *), c[0]);
    assert_ptr_equal(APR_ARRAY_IDX(page, 2, ci_container *), c[4]);
    /* another owner's id as the cursor: an empty page */
    page = ci_directory_list(d, "own_b", c[3]->id, 10, 0, NULL, &more, p);
    assert_int_equal(page->nelts, 0);
    page = ci_directory_list(d, "own_nobody", NULL, 10, 0, NULL, &more, p);
    assert_int_equal(page->nelts, 0);
}

static void test_responses_and_items(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p, 0, 0);
    ci_container *a = make(d, "own_a", NULL, T0), *got;
    ci_directory_map_response(d, "resp_1", "own_a", a->id);
    assert_string_equal(ci_directory_response_container(d, "resp_1", "own_a"), a->id);
    assert_null(ci_directory_response_container(d, "resp_1", "own_b"));
    assert_null(ci_directory_response_container(d, "resp_2", "own_a"));
    /* a foreign container is never mapped */
    ci_directory_map_response(d, "resp_3", "own_b", a->id);
    assert_null(ci_directory_response_container(d, "resp_3", "own_b"));

    ci_directory_remember(d, "ci_1", "own_a", a->id, "{\"call\":1}", T0);
    assert_string_equal(ci_directory_recall(d, "ci_1", "own_a"), "{\"call\":1}");
    assert_null(ci_directory_recall(d, "ci_1", "own_b"));
    ci_directory_remember(d, "ci_1", "own_a", a->id, "{\"call\":2}", T0);
    assert_string_equal(ci_directory_recall(d, "ci_1", "own_a"), "{\"call\":2}");
    /* they go with the container's record, after retention */
    ci_directory_expire(d, T0 + MIN(20), p);
    assert_string_equal(ci_directory_recall(d, "ci_1", "own_a"), "{\"call\":2}");
    assert_int_equal(ci_directory_get(d, a->id, "own_a", &got), CI_DIR_EXPIRED);
    ci_directory_expire(d, T0 + MIN(80), p);
    assert_null(ci_directory_recall(d, "ci_1", "own_a"));
    assert_null(ci_directory_response_container(d, "resp_1", "own_a"));
}

static void test_items_bounded_oldest_first(void **state)
{
    apr_pool_t *p = *state;
    ci_directory_limits lim = { 0, 0, MIN(60), 4096, 0, 0, 0 };
    ci_directory *d = ci_directory_create(p, &lim);
    ci_container *a = make(d, "own_a", NULL, T0);
    char text[1001];
    int i;
    memset(text, 'x', 1000);
    text[1000] = '\0';
    for (i = 0; i < 10; i++)
        ci_directory_remember(d, apr_psprintf(p, "ci_%d", i), "own_a", a->id, text, T0);
    assert_null(ci_directory_recall(d, "ci_0", "own_a"));
    assert_non_null(ci_directory_recall(d, "ci_9", "own_a"));
    assert_non_null(ci_directory_recall(d, "ci_8", "own_a"));
}

static void test_delete(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p, 0, 1);
    ci_container *a = make(d, "own_a", NULL, T0), *got;
    ci_directory_set_handle(d, a, "7");
    assert_string_equal(a->handle, "7");
    ci_directory_delete(d, a, T0 + 1);
    assert_int_equal(a->status, CI_CNTR_DELETED);
    assert_int_equal(ci_directory_live_of(d, "own_a"), 0);
    assert_int_equal(ci_directory_get(d, a->id, "own_a", &got), CI_DIR_EXPIRED);
    /* room again for the owner, nothing evicted */
    make(d, "own_a", NULL, T0 + 2);
}

static void test_memory_budget(void **state)
{
    apr_pool_t *p = *state;
    ci_directory_limits lim = { 0, 0, MIN(60), 4096, 200, 0, 0 };
    ci_directory *d = ci_directory_create(p, &lim);
    ci_container *a1, *a2, *c, *evicted;
    assert_int_equal(ci_directory_create_container(d, "own_a", NULL, NULL, "local", NULL,
                                                   96, 60, T0, &a1, &evicted), CI_DIR_OK);
    assert_int_equal(ci_directory_create_container(d, "own_a", NULL, NULL, "local", NULL,
                                                   96, 60, T0 + 1, &a2, &evicted), CI_DIR_OK);
    /* full: another owner is refused, nothing of a's touched */
    assert_int_equal(ci_directory_create_container(d, "own_b", NULL, NULL, "local", NULL,
                                                   96, 60, T0 + 2, &c, &evicted),
                     CI_DIR_BUDGET_FULL);
    assert_null(evicted);
    /* too big to fit even after one eviction: refused, nothing evicted */
    assert_int_equal(ci_directory_create_container(d, "own_a", NULL, NULL, "local", NULL,
                                                   150, 60, T0 + 3, &c, &evicted),
                     CI_DIR_BUDGET_FULL);
    assert_null(evicted);
    assert_int_equal(a1->status, CI_CNTR_RUNNING);
    /* a's own LRU makes room; a remote one (0 bytes) always fits */
    assert_int_equal(ci_directory_create_container(d, "own_a", NULL, NULL, "local", NULL,
                                                   96, 60, T0 + 4, &c, &evicted), CI_DIR_OK);
    assert_ptr_equal(evicted, a1);
    assert_int_equal(ci_directory_create_container(d, "own_b", NULL, NULL, "e2b", NULL,
                                                   0, 60, T0 + 5, &c, &evicted), CI_DIR_OK);
    assert_null(evicted);
    /* deleting frees its share */
    ci_directory_delete(d, a2, T0 + 6);
    assert_int_equal(ci_directory_create_container(d, "own_b", NULL, NULL, "local", NULL,
                                                   96, 60, T0 + 7, &c, &evicted), CI_DIR_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_owners_apart),
        TEST(test_expiry_and_retention),
        TEST(test_caps_evict_only_the_requesters_own),
        TEST(test_list_pages),
        TEST(test_responses_and_items),
        TEST(test_items_bounded_oldest_first),
        TEST(test_delete),
        TEST(test_memory_budget),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("ci_directory", tests, NULL, NULL);
    apr_terminate();
    return rc;
}

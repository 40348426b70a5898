/*
 * test_sandbox.c - the provider table and the box, driven through a
 * test-only third provider (mod_code_interpreter/sandbox/sandbox_test.c):
 * parse a tool of it, start, run, interrupt, destroy and reap through the
 * table, without knowing which provider it is.
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
#include <apr_thread_proc.h>

#include "ci_sandbox.h"
#include "sandbox_test.h"

extern const ci_provider ci_provider_test;

static apr_pool_t *pool;

static int setup(void **state)
{
    apr_pool_create(&pool, NULL);
    memset(&ci_test_provider_record, 0, sizeof(ci_test_provider_record));
    return 0;
}

static int teardown(void **state)
{
    apr_pool_destroy(pool);
    return 0;
}

static const ci_sandbox_def *test_tool(const char *api_base)
{
    const char *argv[] = { "provider=test", "timeout=5", api_base };
    ci_sandbox_def *def = NULL;
    assert_null(ci_sandbox_def_parse(pool, "t", api_base ? 3 : 2, argv, &def));
    assert_null(ci_sandbox_def_resolve(pool, def));
    return def;
}

/* What the box told its listener, in order. */
typedef struct heard {
    char text[256];
} heard;

static void heard_event(void *baton, ci_box_event ev, ci_sandbox *sb, const char *why)
{
    heard *h = baton;
    apr_cpystrn(h->text + strlen(h->text),
                ev == CI_BOX_STARTED ? "started;" : why,
                sizeof(h->text) - strlen(h->text));
    if (ev == CI_BOX_DESTROYED)
        apr_cpystrn(h->text + strlen(h->text), ";", sizeof(h->text) - strlen(h->text));
}

/* A provider's entries are checked against its capabilities when a tool
 * names it: the refusal names what is missing; the built-in ones pass. */
static void test_a_provider_lacking_an_entry_is_refused(void **state)
{
    extern const ci_provider ci_provider_test;
    ci_provider lacking = ci_provider_test;
    (void)state;
    assert_null(ci_provider_check(pool, &ci_provider_test));
    assert_null(ci_provider_check(pool, ci_builtin_providers[0]));
    assert_null(ci_provider_check(pool, ci_builtin_providers[1]));
    lacking.caps |= CI_CAP_SHELL;
    assert_string_equal(ci_provider_check(pool, &lacking), "provider 'test' has no "
                        "run_commands entry, which CI_CAP_SHELL needs");
    lacking = ci_provider_test;
    lacking.caps |= CI_CAP_FILES;
    assert_string_equal(ci_provider_check(pool, &lacking), "provider 'test' declares "
                        "CI_CAP_FILES without CI_CAP_CONTAINERS");
    lacking.caps |= CI_CAP_CONTAINERS;
    assert_string_equal(ci_provider_check(pool, &lacking), "provider 'test' has no "
                        "attach entry, which CI_CAP_CONTAINERS needs");
    lacking = ci_provider_test;
    lacking.reap = NULL;
    assert_string_equal(ci_provider_check(pool, &lacking), "provider 'test' has no "
                        "reap entry, which CI_CAP_REMOTE needs");
    lacking = ci_provider_test;
    lacking.run = NULL;
    assert_string_equal(ci_provider_check(pool, &lacking), "provider 'test' has no "
                        "run entry");
    lacking = ci_provider_test;
    lacking.name = "";
    assert_string_equal(ci_provider_check(pool, &lacking),
                        "a sandbox provider has no name");
}

static void test_table_knows_the_third_provider(void **state)
{
    const ci_sandbox_def *def = test_tool("api_base=test://here");
    ci_sandbox_def *bad = NULL;
    const char *argv[] = { "provider=nope" };
    const char *key[] = { "provider=test", "python=/usr/bin/python3" };
    assert_ptr_equal(def->provider, ci_provider_named("test"));
    assert_string_equal(ci_test_provider_api_base(def), "test://here");
    assert_int_equal(apr_time_sec(def->timeout), 5);
    assert_string_equal(ci_provider_names(pool), "local, e2b or test");
    assert_string_equal(ci_sandbox_def_parse(pool, "t", 1, argv, &bad),
                        "unknown provider 'nope': expected local, e2b or test");
    assert_string_equal(ci_sandbox_def_parse(pool, "t", 2, key, &bad),
                        "unknown key 'python' for provider test: expected one of "
                        "provider, timeout, max_output, idle, max_idle, retention, tiers, max_file, max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca, api_base");
}

static void test_box_runs_and_restarts(void **state)
{
    const ci_sandbox_def *def = test_tool(NULL);
    heard h = { "" };
    ci_box *box = ci_box_create(pool, def, "cntr_1", heard_event, &h);
    ci_exec_result res;
    const char *err;

    assert_int_equal(ci_box_run(box, pool, "print 42", &res, &err), APR_SUCCESS);
    assert_int_equal(res.outcome, CI_EXEC_COMPLETED);
    assert_string_equal(res.text, "42\n");
    assert_false(ci_exec_failed(&res));
    assert_int_equal(ci_box_run(box, pool, "raise", &res, &err), APR_SUCCESS);
    assert_int_equal(res.outcome, CI_EXEC_ERROR);
    assert_false(ci_exec_failed(&res));
    assert_int_equal(ci_test_provider_record.started, 1);   /* one sandbox so far */
    assert_int_equal(ci_box_run(box, pool, "die", &res, &err), APR_SUCCESS);
    assert_int_equal(res.outcome, CI_EXEC_LOST);
    assert_true(ci_exec_failed(&res));
    /* the next run gets a new interpreter */
    assert_int_equal(ci_box_run(box, pool, "print again", &res, &err), APR_SUCCESS);
    assert_int_equal(ci_test_provider_record.started, 2);
    assert_int_equal(ci_test_provider_record.destroyed, 1);
    ci_box_destroy(box, "done");
    ci_box_destroy(box, "twice is nothing");
    assert_int_equal(ci_test_provider_record.destroyed, 2);
    assert_string_equal(h.text, "started;restarted after a failed execution;"
                                "started;done;");
}

static void test_box_start_failure(void **state)
{
    const ci_sandbox_def *def = test_tool(NULL);
    ci_box *box = ci_box_create(pool, def, "refuse", NULL, NULL);
    ci_exec_result res;
    const char *err = NULL;
    assert_int_equal(ci_box_run(box, pool, "print x", &res, &err), APR_EGENERAL);
    assert_string_equal(err, "the test provider refuses tag 'refuse'");
    assert_int_equal(ci_test_provider_record.runs, 0);
}

typedef struct runner {
    ci_box *box;
    ci_exec_result res;
    apr_status_t rv;
} runner;

static void *APR_THREAD_FUNC run_blocking(apr_thread_t *t, void *data)
{
    runner *r = data;
    const char *err;
    r->rv = ci_box_run(r->box, pool, "block", &r->res, &err);
    return NULL;
}

static void test_box_interrupt(void **state)
{
    const ci_sandbox_def *def = test_tool(NULL);
    runner r = { ci_box_create(pool, def, "cntr_2", NULL, NULL), { 0 }, -1 };
    apr_thread_t *thread;
    apr_status_t ignored;
    const char *err;
    ci_exec_result res;

    assert_int_equal(apr_thread_create(&thread, NULL, run_blocking, &r, pool),
                     APR_SUCCESS);
    /* Wait for the condition (the run is blocked in the sandbox), not a time. */
    while (!__atomic_load_n(&ci_test_provider_record.blocked, __ATOMIC_SEQ_CST))
        apr_thread_yield();
    ci_box_interrupt(r.box);
    apr_thread_join(&ignored, thread);
    assert_int_equal(r.rv, APR_SUCCESS);
    assert_int_equal(r.res.outcome, CI_EXEC_INTERRUPTED);
    /* once interrupted, the box runs nothing more */
    assert_int_equal(ci_box_run(r.box, pool, "print no", &res, &err), APR_ECONNABORTED);
    assert_int_equal(ci_test_provider_record.runs, 1);
    ci_box_destroy(r.box, "request ended");
    assert_int_equal(ci_test_provider_record.destroyed, 1);
}

static void test_reap_through_the_table(void **state)
{
    const ci_sandbox_def *def = test_tool(NULL);
    const ci_provider *prov = def->provider;
    ci_reap_cred cred, wrong = { "test://reaper", "not-the-secret" };
    const char *err = NULL;

    assert_true(prov->reap_cred(def, &cred));
    assert_int_equal(prov->reap(&cred, "test-7", &err), APR_SUCCESS);
    assert_string_equal(ci_test_provider_record.last_reaped, "test-7");
    assert_int_equal(prov->reap(&wrong, "test-8", &err), APR_EACCES);
    assert_string_equal(err, "wrong credentials");
    assert_int_equal(ci_test_provider_record.reaped, 1);
}

static void test_fingerprint_names_parameters(void **state)
{
    const ci_sandbox_def *a = test_tool("api_base=test://a");
    const ci_sandbox_def *b = test_tool("api_base=test://b");
    assert_string_not_equal(ci_sandbox_def_fingerprint(pool, a),
                            ci_sandbox_def_fingerprint(pool, b));
    assert_null(strstr(ci_sandbox_def_fingerprint(pool, a), "secret-of-the-test"));
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_table_knows_the_third_provider),
        TEST(test_a_provider_lacking_an_entry_is_refused),
        TEST(test_box_runs_and_restarts),
        TEST(test_box_start_failure),
        TEST(test_box_interrupt),
        TEST(test_reap_through_the_table),
        TEST(test_fingerprint_names_parameters),
    };
    int rc;
    apr_initialize();
    /* added as a module adds one: the library itself is not rebuilt */
    ci_provider_add(&ci_provider_test);
    rc = cmocka_run_group_tests_name("sandbox", tests, NULL, NULL);
    apr_terminate();
    return rc;
}

/*
 * test_supervisor_wire.c - the supervisor protocol's frames and payloads
 * (mod_code_interpreter/sandbox/ci_supervisor_wire.c): round trips, frames cut
 * anywhere, malformed and oversized frames, sandbox definitions that
 * are refused, and the shell calls a SHELL carries (bounded, checked,
 * re-encoded for the kernel).
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

#include "ci_sandbox.h"
#include "ci_supervisor_wire.h"
#include "local_conf.h"

static apr_pool_t *pool;

static int setup(void **state)
{
    apr_pool_create(&pool, NULL);
    return 0;
}

static int teardown(void **state)
{
    apr_pool_destroy(pool);
    return 0;
}

static ci_sandbox_def *local_tool(const char *extra)
{
    const char *argv[] = { "provider=local", "timeout=7", "memory=300M", "processes=9",
                           "disk=5M", "max_output=3k", "python=/usr/bin/python3.11",
                           extra };
    ci_sandbox_def *def = NULL;
    assert_null(ci_sandbox_def_parse(pool, "t1", extra ? 8 : 7, argv, &def));
    return def;
}

static void expect_frame(ci_sup_reader *r, int type, apr_uint32_t id, const char *payload,
                         apr_size_t len)
{
    ci_sup_frame f;
    assert_int_equal(ci_sup_reader_next(r, &f), 1);
    assert_int_equal(f.type, type);
    assert_int_equal(f.id, id);
    assert_int_equal(f.len, len);
    assert_memory_equal(f.data, payload, len);
    assert_int_equal(f.data[len], '\0');
}

static void test_frames_round_trip_byte_by_byte(void **state)
{
    apr_size_t a_len, b_len, c_len, i;
    const char bin[] = { 'x', '\0', 'y' };
    char *a = ci_sup_encode(pool, CI_SUP_RUN, 7, "print(1)", 8, &a_len);
    char *b = ci_sup_encode(pool, CI_SUP_OUTPUT, 0xfffffffeU, bin, 3, &b_len);
    char *c = ci_sup_encode(pool, CI_SUP_INTERRUPT, 7, NULL, 0, &c_len);
    char *all;
    ci_sup_reader *r = ci_sup_reader_create(pool);
    ci_sup_frame f;

    assert_int_equal(a_len, CI_SUP_HEADER + 8);
    assert_int_equal(c_len, CI_SUP_HEADER);
    all = apr_palloc(pool, a_len + b_len + c_len);
    memcpy(all, a, a_len);
    memcpy(all + a_len, b, b_len);
    memcpy(all + a_len + b_len, c, c_len);
    for (i = 0; i < a_len + b_len + c_len; i++) {
        assert_int_equal(ci_sup_reader_feed(r, all + i, 1), 0);
        if (i + 1 == a_len)
            expect_frame(r, CI_SUP_RUN, 7, "print(1)", 8);
        else if (i + 1 == a_len + b_len)
            expect_frame(r, CI_SUP_OUTPUT, 0xfffffffeU, bin, 3);
        else if (i + 1 < a_len + b_len + c_len)
            assert_int_equal(ci_sup_reader_next(r, &f), 0);
    }
    expect_frame(r, CI_SUP_INTERRUPT, 7, "", 0);
    assert_int_equal(ci_sup_reader_next(r, &f), 0);
}

static void test_frames_in_one_read(void **state)
{
    apr_size_t a_len, b_len;
    char *a = ci_sup_encode(pool, CI_SUP_OK, 1, NULL, 0, &a_len);
    char *b = ci_sup_encode(pool, CI_SUP_END, 1, "\x03", 1, &b_len);
    char *both = apr_palloc(pool, a_len + b_len);
    ci_sup_reader *r = ci_sup_reader_create(pool);
    memcpy(both, a, a_len);
    memcpy(both + a_len, b, b_len);
    /* The second frame's first bytes arrive with the first frame. */
    assert_int_equal(ci_sup_reader_feed(r, both, a_len + 2), 0);
    expect_frame(r, CI_SUP_OK, 1, "", 0);
    assert_int_equal(ci_sup_reader_feed(r, both + a_len + 2, b_len - 2), 0);
    expect_frame(r, CI_SUP_END, 1, "\x03", 1);
}

static void test_malformed_lengths_are_refused(void **state)
{
    const char short_len[] = { 0, 0, 0, 4, 1 };
    const char huge_len[] = { 0x7f, 0, 0, 0, 1 };
    ci_sup_reader *r = ci_sup_reader_create(pool);
    ci_sup_frame f;
    assert_int_equal(ci_sup_reader_feed(r, short_len, sizeof(short_len)), -1);
    assert_int_equal(ci_sup_reader_next(r, &f), 0);
    /* Once broken, it stays broken. */
    assert_int_equal(ci_sup_reader_feed(r, "", 0), -1);
    r = ci_sup_reader_create(pool);
    assert_int_equal(ci_sup_reader_feed(r, huge_len, sizeof(huge_len)), -1);
}

static void test_a_bad_length_after_a_frame_breaks_the_stream(void **state)
{
    apr_size_t a_len;
    char *a = ci_sup_encode(pool, CI_SUP_STATUS, 0, NULL, 0, &a_len);
    char *both = apr_palloc(pool, a_len + 5);
    ci_sup_reader *r = ci_sup_reader_create(pool);
    ci_sup_frame f;
    memcpy(both, a, a_len);
    memcpy(both + a_len, "\0\0\0\1\1", 5);
    assert_int_equal(ci_sup_reader_feed(r, both, a_len + 5), 0);
    assert_int_equal(ci_sup_reader_broken(r), 0);
    expect_frame(r, CI_SUP_STATUS, 0, "", 0);
    assert_int_equal(ci_sup_reader_next(r, &f), 0);
    assert_int_equal(ci_sup_reader_broken(r), 1);
    assert_int_equal(ci_sup_reader_feed(r, "x", 1), -1);
}

static void test_hello_carries_the_version(void **state)
{
    apr_size_t len;
    const char *h = ci_sup_hello(pool, &len);
    ci_sup_frame f = { CI_SUP_HELLO, 0, h, len };
    ci_sup_frame bad = { CI_SUP_HELLO, 0, "{\"version\":\"1\"}", 15 };
    ci_sup_frame junk = { CI_SUP_HELLO, 0, "nope", 4 };
    assert_int_equal(ci_sup_hello_version(&f), CI_SUP_VERSION);
    assert_int_equal(ci_sup_hello_version(&bad), -1);
    assert_int_equal(ci_sup_hello_version(&junk), -1);
}

static void test_create_carries_the_whole_definition(void **state)
{
    ci_sandbox_def *def = local_tool("preload=json,math"), *got = NULL;
    apr_size_t len;
    const char *payload = ci_sup_create_encode(pool, def, "cntr_x", &len);
    ci_sup_frame f = { CI_SUP_CREATE, 0, payload, len };
    const char *tag = NULL, *deftext = NULL;

    assert_null(ci_sup_create_decode(pool, &f, &got, &tag, &deftext));
    assert_string_equal(tag, "cntr_x");
    assert_string_equal(got->name, "t1");
    assert_string_equal(got->provider->name, "local");
    assert_int_equal(got->timeout, apr_time_from_sec(7));
    assert_int_equal(got->max_output, 3 * 1024);
    assert_string_equal(CI_LOCAL(got)->python, "/usr/bin/python3.11");
    assert_int_equal(CI_LOCAL(got)->memory, (apr_uint64_t)300 << 20);
    assert_int_equal(CI_LOCAL(got)->processes, 9);
    assert_int_equal(CI_LOCAL(got)->disk, (apr_uint64_t)5 << 20);
    assert_string_equal(CI_LOCAL(got)->preload, "json,math");
    assert_string_equal(deftext, ci_sup_def_encode(pool, def));
}

static const char *decode_error(const char *payload)
{
    ci_sup_frame f = { CI_SUP_CREATE, 0, payload, strlen(payload) };
    ci_sandbox_def *def = NULL;
    const char *tag = NULL, *deftext = NULL;
    return ci_sup_create_decode(pool, &f, &def, &tag, &deftext);
}

static void test_incomplete_definitions_are_refused(void **state)
{
    const char *good = ci_sup_create_encode(pool, local_tool(NULL), "t", NULL);
    assert_null(decode_error(good));
    assert_string_equal(decode_error("{\"def\":{}}"), "the tag is missing");
    assert_string_equal(decode_error("{\"tag\":\"t\"}"),
                        "the sandbox definition is incomplete");
    assert_string_equal(decode_error("{\"tag\":\"t\",\"def\":{\"name\":\"t1\","
                                     "\"provider\":\"nope\"}}"),
                        "the sandbox definition is incomplete");
    /* a relative interpreter, a negative size */
    assert_string_equal(decode_error("{\"tag\":\"t\",\"def\":{\"name\":"
        "\"t1\",\"provider\":\"local\",\"timeout_us\":1,\"max_output\":1,\"python\":"
        "\"python3\",\"memory\":1,\"processes\":1,\"disk\":1,\"preload\":\"\"}}"),
        "the sandbox definition is incomplete");
    assert_string_equal(decode_error("{\"tag\":\"t\",\"def\":{\"name\":\"t1\",\"provider\":"
        "\"local\",\"timeout_us\":1,\"max_output\":1,\"python\":\"/p\",\"memory\":-1,"
        "\"processes\":1,\"disk\":1,\"preload\":\"\"}}"),
        "the sandbox definition is incomplete");
    assert_non_null(decode_error("{\"tag\":"));
}

/* A container's skills: carried whole, each folder's name and store paths
 * checked again where the sandbox is made. */
#define DIGEST "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TREE "/var/lib/s/01/" DIGEST
#define SKILL(mount, tree, zip) \
    "[{\"mount\":\"" mount "\",\"tree\":\"" tree "\",\"zip\":\"" zip "\"}]"

static const char *skills_decoded(const char *skills, ci_sandbox_def **got)
{
    ci_sandbox_def *def = local_tool(NULL);
    const char *payload, *tag = NULL, *deftext = NULL;
    apr_size_t len;
    ci_sup_frame f = { CI_SUP_CREATE, 0, NULL, 0 };
    def->skills = skills;
    payload = ci_sup_create_encode(pool, def, "t", &len);
    f.data = payload;
    f.len = len;
    return ci_sup_create_decode(pool, &f, got, &tag, &deftext);
}

static void test_skills_are_carried_and_checked(void **state)
{
    static const char *const bad[] = {
        SKILL("basic-math-0123456789abcdef0123456789abcdef", "/var/lib/s/02/" DIGEST,
              TREE ".zip"),                                   /* 02 is not 01 */
        SKILL("basic-math-0123456789abcdef0123456789abcdef", "/var/lib/../s/01/" DIGEST, /* check-clone: a path the check refuses */
              TREE ".zip"),
        SKILL("basic-math-0123456789abcdef0123456789abcdef", "var/lib/s/01/" DIGEST,
              TREE ".zip"),
        SKILL("basic-math-0123456789abcdef0123456789abcdef", TREE, TREE),
        SKILL("../x-0123456789abcdef0123456789abcdef", TREE, TREE ".zip"), /* check-clone: a name the check refuses */
        SKILL("Basic-0123456789abcdef0123456789abcdef", TREE, TREE ".zip"),
        SKILL("basic-math-0123", TREE, TREE ".zip"),
        "[]", "{}",
    };
    const char *good = SKILL("basic-math-0123456789abcdef0123456789abcdef", TREE,
                             TREE ".zip");
    ci_sandbox_def *got = NULL;
    unsigned i;
    (void)state;
    assert_null(skills_decoded(good, &got));
    assert_string_equal(got->skills, good);
    for (i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        assert_string_equal(skills_decoded(bad[i], &got), "the skills are not valid");
}

static void test_warm_set_round_trip(void **state)
{
    ci_sandbox_def *a = local_tool("warm=2"), *b = local_tool("warm=5");
    const ci_sandbox_def *defs[2];
    apr_size_t len;
    const char *payload, *err = NULL;
    apr_array_header_t *wants;
    ci_sup_frame f = { CI_SUP_WARM_SET, 0, NULL, 0 };
    b->name = "t2";
    defs[0] = a;
    defs[1] = b;
    payload = ci_sup_warm_encode(pool, defs, 2, &len);
    f.data = payload;
    f.len = len;
    wants = ci_sup_warm_decode(pool, &f, &err);
    assert_non_null(wants);
    assert_int_equal(wants->nelts, 2);
    assert_int_equal(APR_ARRAY_IDX(wants, 0, ci_sup_want).count, 2);
    assert_int_equal(APR_ARRAY_IDX(wants, 1, ci_sup_want).count, 5);
    assert_string_equal(APR_ARRAY_IDX(wants, 1, ci_sup_want).def->name, "t2");
    /* The pool of a definition is found by the text a CREATE of it has. */
    assert_string_equal(APR_ARRAY_IDX(wants, 0, ci_sup_want).deftext,
                        ci_sup_def_encode(pool, a));
    f.data = "{}";
    f.len = 2;
    assert_null(ci_sup_warm_decode(pool, &f, &err));
    assert_string_equal(err, "a list was expected");
}

/* ---- SHELL ---------------------------------------------------------------- */

static ci_shell_action shell_action(int n, const char *const *commands,
                                    apr_interval_time_t timeout, apr_size_t max_output)
{
    ci_shell_action a;
    apr_array_header_t *list = apr_array_make(pool, n, sizeof(const char *));
    int i;
    for (i = 0; i < n; i++)
        *(const char **)apr_array_push(list) = commands[i];
    a.commands = list;
    a.timeout = timeout;
    a.max_output = max_output;
    return a;
}

/* The kernel's line for PAYLOAD, or the refusal (prefixed "!"). */
static const char *shell_line(const char *payload)
{
    ci_sup_frame f = { CI_SUP_SHELL, 3, payload, strlen(payload) };
    const char *line = NULL, *err;
    apr_size_t len = 0;
    if ((err = ci_sup_shell_decode(pool, &f, &line, &len)))
        return apr_pstrcat(pool, "!", err, NULL);
    assert_int_equal(len, strlen(line));
    return line;
}

static void test_shell_round_trip(void **state)
{
    const char *const cmds[] = { "ls -l /mnt/data", "printf 'a\\nb' \"$HOME\"",
                                 "echo \xc3\xa9t\xc3\xa9 \xe2\x98\x83" };
    ci_shell_action a = shell_action(3, cmds, 1500 * 1000, 4096);
    apr_size_t len;
    const char *payload = ci_sup_shell_encode(pool, &a, &len);
    assert_int_equal(len, strlen(payload));
    assert_string_equal(payload,
        "{\"commands\":[\"ls -l /mnt/data\",\"printf 'a\\\\nb' \\\"$HOME\\\"\","
        "\"echo \xc3\xa9t\xc3\xa9 \xe2\x98\x83\"],\"timeout_ms\":1500,\"max_output\":4096}");
    assert_string_equal(shell_line(payload), apr_pstrcat(pool, "{\"shell\":", payload,
                                                         "}", NULL));
}

static void test_shell_encode_rounds_and_bounds(void **state)
{
    const char *const one[] = { "true" };
    ci_shell_action a = shell_action(1, one, 1, 0);
    assert_string_equal(ci_sup_shell_encode(pool, &a, NULL),
                        "{\"commands\":[\"true\"],\"timeout_ms\":1,\"max_output\":0}");
    a = shell_action(1, one, 0, 5);                         /* at least 1 ms */
    assert_string_equal(ci_sup_shell_encode(pool, &a, NULL),
                        "{\"commands\":[\"true\"],\"timeout_ms\":1,\"max_output\":5}");
    a = shell_action(1, one, apr_time_from_sec(10 * 86400), CI_HARD_OUTPUT_CAP + 1);
    assert_string_equal(ci_sup_shell_encode(pool, &a, NULL),
                        "{\"commands\":[\"true\"],\"timeout_ms\":86400000,"
                        "\"max_output\":33554432}");
    /* what encode bounds, decode accepts */
    assert_string_equal(shell_line(ci_sup_shell_encode(pool, &a, NULL)),
                        "{\"shell\":{\"commands\":[\"true\"],\"timeout_ms\":86400000,"
                        "\"max_output\":33554432}}");
}

static void test_shell_is_re_encoded_from_what_was_understood(void **state)
{
    /* other keys dropped, the order made canonical, a NUL kept escaped */
    assert_string_equal(shell_line("{\"max_output\":7,\"x\":{\"y\":1},\"timeout_ms\":20,"
                                   "\"commands\":[\"a\\u0000b\",\"c\"],\"shell\":1}"),
                        "{\"shell\":{\"commands\":[\"a\\u0000b\",\"c\"],\"timeout_ms\":20,"
                        "\"max_output\":7}}");
}

static void test_shell_payloads_refused(void **state)
{
    const char *commands = "!a shell call's commands must be 1 to 1000 strings";
    const char *timeout = "!a shell call's timeout_ms is out of range";
    const char *output = "!a shell call's max_output is out of range";
    const char *ok_tail = ",\"timeout_ms\":5,\"max_output\":5}";
    char *many = apr_pstrdup(pool, "{\"commands\":[");
    int i;
    assert_string_equal(shell_line("[\"ls\"]"), "!a shell call must be an object");
    assert_int_equal(shell_line("{\"commands\":")[0], '!');
    assert_string_equal(shell_line(apr_pstrcat(pool, "{\"x\":1", ok_tail, NULL)), commands);
    assert_string_equal(shell_line(apr_pstrcat(pool, "{\"commands\":[]", ok_tail, NULL)),
                        commands);
    assert_string_equal(shell_line(apr_pstrcat(pool, "{\"commands\":\"ls\"", ok_tail,
                                               NULL)), commands);
    assert_string_equal(shell_line(apr_pstrcat(pool, "{\"commands\":[\"ls\",1]", ok_tail,
                                               NULL)), commands);
    assert_string_equal(shell_line(apr_pstrcat(pool, "{\"commands\":[[\"ls\"]]", ok_tail,
                                               NULL)), commands);
    /* 1000 commands pass; 1001 do not */
    for (i = 0; i < CI_SUP_MAX_COMMANDS; i++)
        many = apr_pstrcat(pool, many, i ? "," : "", "\"true\"", NULL);
    assert_string_equal(shell_line(apr_pstrcat(pool, many, "]", ok_tail, NULL)),
                        apr_pstrcat(pool, "{\"shell\":", many, "]", ok_tail, "}", NULL));
    assert_string_equal(shell_line(apr_pstrcat(pool, many, ",\"true\"]", ok_tail, NULL)),
                        commands);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"max_output\":5}"), timeout);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":0,"
                                   "\"max_output\":5}"), timeout);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":-3,"
                                   "\"max_output\":5}"), timeout);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":86400001,"
                                   "\"max_output\":5}"), timeout);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":1.5,"
                                   "\"max_output\":5}"), timeout);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":\"5\","
                                   "\"max_output\":5}"), timeout);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":5}"), output);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":5,"
                                   "\"max_output\":-1}"), output);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":5,"
                                   "\"max_output\":33554433}"), output);
    assert_string_equal(shell_line("{\"commands\":[\"ls\"],\"timeout_ms\":86400000,"
                                   "\"max_output\":0}"),
                        "{\"shell\":{\"commands\":[\"ls\"],\"timeout_ms\":86400000,"
                        "\"max_output\":0}}");
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_frames_round_trip_byte_by_byte),
        TEST(test_frames_in_one_read),
        TEST(test_malformed_lengths_are_refused),
        TEST(test_a_bad_length_after_a_frame_breaks_the_stream),
        TEST(test_hello_carries_the_version),
        TEST(test_create_carries_the_whole_definition),
        TEST(test_incomplete_definitions_are_refused),
        TEST(test_skills_are_carried_and_checked),
        TEST(test_warm_set_round_trip),
        TEST(test_shell_round_trip),
        TEST(test_shell_encode_rounds_and_bounds),
        TEST(test_shell_is_re_encoded_from_what_was_understood),
        TEST(test_shell_payloads_refused),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("supproto", tests, NULL, NULL);
    apr_terminate();
    return rc;
}

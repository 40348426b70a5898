/*
 * test_core.c - unit tests of the httpd-free core: JSON helpers, error
 * bodies, the request rewrite, the NDJSON execution reader, the agentic
 * loop's bookkeeping and the directive value parsers.
 *
 * Every test runs with its own APR pool (per-test setup/teardown), so json-c
 * roots handed to the pool are released after each test. JSON the core
 * produces is parsed and compared field by field; raw bytes are compared only
 * where byte-exactness is the point.
 *
 * Tests marked BUG expose a defect of the core and fail until it is fixed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_hash.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <apr_file_io.h>
#include <json-c/json.h>

#include "ci_policy.h"
#include "ci_id.h"
#include "ci_config.h"
#include "ci_sandbox.h"
#include "e2b_internal.h"
#include "local_conf.h"
#include "ci_error.h"
#include "ci_exec.h"
#include "ci_ndjson.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_request.h"

/* ======================================================================== */
/* helpers                                                                  */
/* ======================================================================== */

#include "unit_core.h"

/* ---- ndjson helpers ----------------------------------------------------- */

#define BIG_CAP ((apr_size_t)1 << 20)

/* Feed the whole stream S (single quotes allowed) at once, then build. */
static void nd_run(apr_pool_t *p, const char *s_sq, apr_size_t max_output,
                   ci_exec_result *out)
{
    const char *s = J(p, s_sq);
    ci_ndjson *nd = ci_ndjson_create(p, max_output, BIG_CAP);
    assert_int_equal(ci_ndjson_feed(nd, s, strlen(s)), 0);
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, out);
}

static void same_result_(const ci_exec_result *a, const ci_exec_result *b,
                         const char *file, int line)
{
    int i;
    _assert_int_equal(a->outcome, b->outcome, file, line);
    str_eq_(a->failure, b->failure, file, line);
    _assert_int_equal(a->text_len, b->text_len, file, line);
    str_eq_(a->text, b->text, file, line);
    _assert_int_equal(a->outcome, b->outcome, file, line);
    _assert_int_equal(a->images->nelts, b->images->nelts, file, line);
    for (i = 0; i < a->images->nelts; i++)
        str_eq_(APR_ARRAY_IDX(a->images, i, const char *),
                APR_ARRAY_IDX(b->images, i, const char *), file, line);
}
#define assert_same_result(a, b) same_result_((a), (b), __FILE__, __LINE__)

static int utf8_valid(const unsigned char *s, apr_size_t n)
{
    apr_size_t i = 0;
    while (i < n) {
        int k;
        if (s[i] < 0x80)
            k = 0;
        else if ((s[i] & 0xE0) == 0xC0)
            k = 1;
        else if ((s[i] & 0xF0) == 0xE0)
            k = 2;
        else if ((s[i] & 0xF8) == 0xF0)
            k = 3;
        else
            return 0;
        if (i + k >= n)
            return 0;
        for (i++; k > 0; k--, i++)
            if ((s[i] & 0xC0) != 0x80)
                return 0;
    }
    return 1;
}

/* ======================================================================== */
/* ci_json                                                                  */
/* ======================================================================== */

static void test_json_parse_strict(void **state)
{
    apr_pool_t *p = *state;
    const char *err = NULL;
    json_object *o;

    o = ci_json_parse(p, "{\"a\":[1,\"x\"]} \r\n\t", 17, &err);
    assert_non_null(o);
    assert_json(p, o, "{'a':[1,'x']}");

    err = NULL;
    assert_null(ci_json_parse(p, "{\"a\":1,}", 8, &err));
    assert_str(err, "unexpected character at byte 7");
    err = NULL;
    assert_null(ci_json_parse(p, "{\"a\":", 5, &err));
    assert_str(err, "the JSON text ends too early");
    err = NULL;
    assert_null(ci_json_parse(p, "", 0, &err));
    assert_str(err, "the JSON text ends too early");
    err = NULL;
    assert_null(ci_json_parse(p, "{\"a\":1} x", 9, &err));
    assert_str(err, "unexpected character at byte 8");
    err = NULL;
    assert_null(ci_json_parse(p, "{\"a\":\"\xff\"}", 9, &err));
    assert_str(err, "invalid UTF-8 at byte 6");
    err = NULL;
    assert_null(ci_json_parse(p, "{a:1}", 5, &err));
    assert_str(err, "quoted object property name expected at byte 1");
    /* LEN is honoured: bytes past it are not read */
    err = NULL;
    assert_non_null(o = ci_json_parse(p, "{\"a\":1}garbage", 7, &err));
    assert_json(p, o, "{'a':1}");
}

static void test_json_parse_depth(void **state)
{
    apr_pool_t *p = *state;
    int levels;
    for (levels = 126; levels <= 130; levels++) {
        char *b = apr_palloc(p, 2 * levels + 1);
        const char *err = NULL;
        json_object *o;
        memset(b, '[', levels);
        memset(b + levels, ']', levels);
        b[2 * levels] = '\0';
        o = ci_json_parse(p, b, 2 * levels, &err);
        if (levels <= CI_JSON_MAX_DEPTH) {
            assert_non_null(o);
        }
        else {
            assert_null(o);
            assert_str(err, "JSON nesting deeper than 128 levels");
        }
    }
}

/* A thread parses with one tokener, reset after each text: what a parse
 * that stopped part way (mid-array, mid-string, past the depth) left in it
 * never leaks into the next one. */
static void test_json_parse_starts_afresh(void **state)
{
    apr_pool_t *p = *state;
    const char *stopped[] = { "[1,[2,", "{\"a\":\"unterminated", "[1,]" };
    char deep[2 * 129 + 1];
    const char *err = NULL;
    json_object *o;
    int i;
    for (i = 0; i < 3; i++) {
        assert_null(ci_json_parse(p, stopped[i], strlen(stopped[i]), &err));
        err = NULL;
        assert_non_null(o = ci_json_parse(p, "[3]", 3, &err));
        assert_json(p, o, "[3]");
    }
    memset(deep, '[', 129);
    memset(deep + 129, ']', 129);
    deep[2 * 129] = '\0';
    assert_null(ci_json_parse(p, deep, 2 * 129, &err));
    assert_str(err, "JSON nesting deeper than 128 levels");
    err = NULL;
    assert_non_null(o = ci_json_parse(p, deep + 1, 2 * 128, &err));
    assert_int_equal(json_object_array_length(o), 1);
}

/* The top-level string found without a parse: only where the parser would
 * agree, NULL wherever it might not. */
static const char *top(apr_pool_t *p, const char *body)
{
    return ci_json_top_string(p, body, strlen(body), "previous_response_id");
}

static void test_json_top_string(void **state)
{
    apr_pool_t *p = *state;
    const char *nested =
        "{\"input\":[{\"role\":\"user\",\"content\":\"say \\\"hi\\\" {[\","
        "\"previous_response_id\":\"inner\"}],\"tools\":[{\"type\":\"code_interpreter\","
        "\"container\":{\"type\":\"auto\"}}],\"previous_response_id\" : \"resp_1\"}";
    assert_str(top(p, nested), "resp_1");            /* the inner one is not top-level */
    assert_str(top(p, " {\"previous_response_id\":\"resp_2\",\"n\":[1,{}],\"b\":true} "),
               "resp_2");
    assert_null(top(p, "{\"input\":\"previous_response_id\"}"));   /* a value, not a key */
    /* escaped quotes and backslashes inside strings */
    assert_str(top(p, "{\"x\":\"a\\\\\",\"previous_response_id\":\"r\"}"), "r");
    assert_str(top(p, "{\"x\":\"a\\\",\\\"previous_response_id\\\":\\\"no\\\"\","
                      "\"previous_response_id\":\"yes\"}"), "yes");
    assert_null(top(p, "{\"x\":\"a\\\"}"));                      /* never ends */
    assert_null(top(p, "{\"previous_response_id\":null}"));
    assert_null(top(p, "{\"previous_response_id\":7}"));
    assert_null(top(p, "{\"previous_response_id\":\"\"}"));
    assert_null(top(p, "{\"previous_response_id\":\"re\\u0073p\"}"));  /* escaped value */
    assert_null(top(p, "{\"previous_response_id\":\"a\",\"previous_response_id\":\"b\"}"));
    assert_null(top(p, "{\"previous_respons\\u0065_id\":\"a\",\"x\":1}"));  /* escaped key */
    assert_null(top(p, "{\"previous_response_id\":\"a\""));          /* cut short */
    assert_null(top(p, "{\"previous_response_id\":\"a\"]"));
    assert_null(top(p, "[{\"previous_response_id\":\"a\"}]"));
    assert_null(top(p, "{}"));
    assert_null(top(p, ""));
    assert_null(top(p, "{\"a\":[}"));
}

/* The text of a top-level member and of an array's members, as the
 * client wrote them. */
static void test_json_spans(void **state)
{
    apr_pool_t *p = *state;
    const char *body = "{\"tools\":[],\"input\" :  [ {\"a\":\"x]},\\\"[\"} ,\"s\\\\\",[1,[2]] ,3 ]\n}";
    const char *at;
    apr_size_t vlen;
    ci_json_span *sp;
    assert_int_equal(ci_json_top_value(body, strlen(body), "input", &at, &vlen), 0);
    assert_int_equal(vlen, strlen("[ {\"a\":\"x]},\\\"[\"} ,\"s\\\\\",[1,[2]] ,3 ]"));
    assert_memory_equal(at, "[ {\"a\"", 6);
    assert_int_equal(ci_json_array_spans(p, at, vlen, 4, &sp), 4);
    assert_int_equal(ci_json_array_spans(p, at, vlen, -1, &sp), 4);
    assert_int_equal(sp[0].len, strlen("{\"a\":\"x]},\\\"[\"}"));
    assert_memory_equal(sp[0].at, "{\"a\":\"x]},\\\"[\"}", sp[0].len);
    assert_int_equal(sp[1].len, 5);
    assert_memory_equal(sp[1].at, "\"s\\\\\"", 5);
    assert_int_equal(sp[2].len, 7);
    assert_memory_equal(sp[2].at, "[1,[2]]", 7);
    assert_int_equal(sp[3].len, 1);
    assert_memory_equal(sp[3].at, "3", 1);
    /* a count the scan does not find is refused */
    assert_int_equal(ci_json_array_spans(p, at, vlen, 3, &sp), -1);
    assert_int_equal(ci_json_array_spans(p, at, vlen, 5, &sp), -1);
    assert_int_equal(ci_json_array_spans(p, "[ ]", 3, 0, &sp), 0);
    assert_int_equal(ci_json_array_spans(p, "[ ]", 3, -1, &sp), 0);
    assert_int_equal(ci_json_array_spans(p, "[1,]", 4, -1, &sp), -1);
    assert_int_equal(ci_json_array_spans(p, "[ ]", 3, 1, &sp), -1);
    assert_int_equal(ci_json_array_spans(p, "[1]", 3, 0, &sp), -1);
    assert_int_equal(ci_json_array_spans(p, "[1,]", 4, 1, &sp), -1);
    assert_int_equal(ci_json_array_spans(p, "[1] ", 4, 1, &sp), -1);
    assert_int_equal(ci_json_array_spans(p, "{}", 2, 0, &sp), -1);
    /* a key the scan cannot be sure of */
    assert_int_equal(ci_json_top_value("{\"input\":1,\"input\":2}", 21, "input", &at, &vlen), -1);
    assert_int_equal(ci_json_top_value("{\"inpu\\u0074\":1,\"input\":2}", 27, "input",
                                       &at, &vlen), -1);
    assert_int_equal(ci_json_top_value("{\"x\":{\"input\":1}}", 17, "input", &at, &vlen), -1);
    assert_int_equal(ci_json_top_value("{\"input\":[1}", 12, "input", &at, &vlen), -1);
}

/* The strict check accepts what the parser reads as written, and gives up
 * on the rest. */
static void test_json_strict_value(void **state)
{
    apr_pool_t *p = *state;
    static const char *const good[] = {
        "0", "-0", "1.5", "-1.5e+10", "2E-3", "123456789012345678", "true", "false",
        "null", "\"\"", "\"a \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uFFFF\"", "[]",
        "{}", "[ 1 , [2] , {\"a\" : {}} ]", "\"caf\xc3\xa9\"", "1e400",
    };
    static const char *const unsure[] = {
        "01", "-", "1.", ".5", "1e", "+1", "1234567890123456789", "tru", "True", "nul",
        "\"\\a\"", "\"\\u12G4\"", "\"\\ud800\"", "\"\\uDC00\"", "\"a\tb\"", "[1,]", "[1 2]",
        "{\"a\"}", "{\"a\":1,}", "{1:2}", "[1]]", "\"x", "\"caf\xc3\"", "[\n1]", "NaN",
        "\"\\u00e\"", "[1] ",
    };
    char deep[200];
    unsigned i;
    ci_json_span v;
    for (i = 0; i < sizeof(good) / sizeof(*good); i++) {
        const char *err = NULL;
        if (ci_json_strict_value(good[i], strlen(good[i])))
            fail_msg("refused %s", good[i]);
        assert_non_null(ci_json_parse(p, apr_pstrcat(p, "[", good[i], "]", NULL),
                                      strlen(good[i]) + 2, &err));
    }
    for (i = 0; i < sizeof(unsure) / sizeof(*unsure); i++)
        if (!ci_json_strict_value(unsure[i], strlen(unsure[i])))
            fail_msg("accepted %s", unsure[i]);
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    assert_int_equal(ci_json_strict_value(deep, 128), 0);
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    assert_int_equal(ci_json_strict_value(deep, 130), -1);
    /* an object's member, found once behind plain keys */
    assert_int_equal(ci_json_strict_object("{\"role\":\"x\",\"type\" : \"m\"}", 25, "type",
                                           &v), 0);
    assert_int_equal(v.len, 3);
    assert_memory_equal(v.at, "\"m\"", 3);
    assert_int_equal(ci_json_strict_object("{\"role\":\"x\"}", 12, "type", &v), 0);
    assert_null(v.at);
    assert_int_equal(ci_json_strict_object("{\"type\":1,\"type\":2}", 19, "type", &v), -1);
    assert_int_equal(ci_json_strict_object("{\"t\\u0079pe\":1}", 15, "type", &v), -1);
    assert_int_equal(ci_json_strict_object("[]", 2, "type", &v), -1);
    assert_int_equal(ci_json_strict_object("{}", 2, "type", &v), 0);
}

static void test_json_has_control_byte(void **state)
{
    char buf[24];
    int i;
    (void)state;
    memset(buf, 'a', sizeof(buf));
    assert_false(ci_json_has_control_byte(buf, sizeof(buf)));
    for (i = 0; i < (int)sizeof(buf); i++) {          /* in a word and in the tail */
        buf[i] = 0x1f;
        assert_true(ci_json_has_control_byte(buf, sizeof(buf) - 1) == (i < 23));
        buf[i] = '\t';
        assert_true(ci_json_has_control_byte(buf, sizeof(buf)));
        buf[i] = ' ';
        assert_false(ci_json_has_control_byte(buf, sizeof(buf)));
        buf[i] = (char)0x80;                           /* UTF-8's bytes, DEL: not control */
        assert_false(ci_json_has_control_byte(buf, sizeof(buf)));
        buf[i] = 0x7f;
        assert_false(ci_json_has_control_byte(buf, sizeof(buf)));
        buf[i] = 'a';
    }
    assert_false(ci_json_has_control_byte(buf, 0));
}

/* BUG: a NUL byte after the value passes the trailing-whitespace check,
 * because strchr(" \t\r\n", '\0') finds the terminator of the set. */
static void test_json_parse_trailing_nul_bug(void **state)
{
    apr_pool_t *p = *state;
    const char *err = NULL;
    assert_null(ci_json_parse(p, "{\"a\":1}\0", 8, &err));
    assert_str(err, "unexpected data after the JSON value at byte 7");
}

/* BUG: a JSON text that is a bare number or literal is reported as cut
 * short: json-c waits for a delimiter after "123" or "true". (A bare "null"
 * parses to NULL, which this API cannot tell from a failure.) */
static void test_json_parse_top_level_scalar_bug(void **state)
{
    apr_pool_t *p = *state;
    const char *err = NULL;
    json_object *o = ci_json_parse(p, "123", 3, &err);
    assert_str(err, NULL);
    assert_non_null(o);
    assert_int_equal(json_object_get_int(o), 123);
    err = NULL;
    o = ci_json_parse(p, "true", 4, &err);
    assert_str(err, NULL);
    assert_non_null(o);
}

/* BUG: non-RFC number syntax is accepted and then re-emitted verbatim, so a
 * body sent upstream can be invalid JSON ("NaN", "Infinity", "1."). */
static void test_json_parse_non_rfc_numbers_bug(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bad[] = {"[NaN]", "[Infinity]", "[-Infinity]", "[1.]"};
    int i;
    for (i = 0; i < 4; i++) {
        const char *err = NULL;
        json_object *o = ci_json_parse(p, bad[i], strlen(bad[i]), &err);
        if (o)
            print_error("accepted %s, serialised as %s\n", bad[i],
                        ci_json_text(o, NULL));
        assert_null(o);
        assert_non_null(err);
    }
}

static void test_json_helpers(void **state)
{
    apr_pool_t *p = *state;
    json_object *o = PARSE(p, "{'s':'a/b','n':3,'o':{'k':[1]}}"), *c;
    apr_size_t len = 0;
    const char *text;

    /* compact, no "\/" */
    text = ci_json_text(o, &len);
    assert_string_equal(text, "{\"s\":\"a/b\",\"n\":3,\"o\":{\"k\":[1]}}");
    assert_int_equal(len, strlen(text));
    text = ci_json_pstr(p, o, &len);
    assert_string_equal(text, "{\"s\":\"a/b\",\"n\":3,\"o\":{\"k\":[1]}}");
    assert_int_equal(len, strlen(text));

    assert_str(ci_json_str(o, "s"), "a/b");
    assert_null(ci_json_str(o, "n"));
    assert_null(ci_json_str(o, "missing"));
    assert_null(ci_json_str(NULL, "s"));
    assert_null(ci_json_str(ci_json_get(o, "n", json_type_int), "s"));
    assert_non_null(ci_json_get(o, "o", json_type_object));
    assert_null(ci_json_get(o, "o", json_type_array));

    assert_null(ci_json_copy(NULL));
    c = ci_json_own(p, ci_json_copy(o));
    assert_ptr_not_equal(c, o);
    assert_json_same(c, o);
    json_object_array_add(ci_json_get(ci_json_get(c, "o", json_type_object), "k",
                                      json_type_array),
                          json_object_new_int(2));
    assert_json(p, o, "{'s':'a/b','n':3,'o':{'k':[1]}}");
}

/* ======================================================================== */
/* ci_error                                                                 */
/* ======================================================================== */

static void test_error_body(void **state)
{
    apr_pool_t *p = *state;
    ci_error err;
    apr_size_t len = 0;
    const char *b;

    assert_ptr_equal(ci_error_set(&err, 400, CI_INVALID, NULL, NULL, p,
                                  "Bad %s at %d.", "thing", 7), &err);
    assert_int_equal(err.status, 400);
    assert_str(err.message, "Bad thing at 7.");
    b = ci_error_body(p, &err, &len);
    assert_string_equal(b, "{\"error\":{\"message\":\"Bad thing at 7.\","
                           "\"type\":\"invalid_request_error\",\"param\":null,"
                           "\"code\":null}}");
    assert_int_equal(len, strlen(b));

    ci_error_set(&err, 502, CI_SERVER, "tools[0]", "bad_upstream_response", p,
                 "a/b \"q\"");
    b = ci_error_body(p, &err, &len);
    assert_string_equal(b, "{\"error\":{\"message\":\"a/b \\\"q\\\"\","
                           "\"type\":\"server_error\",\"param\":\"tools[0]\","
                           "\"code\":\"bad_upstream_response\"}}");
    assert_int_equal(len, strlen(b));
}

/* ======================================================================== */
/* ci_request: pass and intercept                                           */
/* ======================================================================== */

static void test_body_mentions_tool(void **state)
{
    static const char b[] = "{\"tools\":[{\"type\":\"code_interpreter\"}]}";
    assert_true(ci_body_mentions_tool(b, sizeof(b) - 1));
    assert_true(ci_body_mentions_tool("code_interpreter", 16));
    assert_false(ci_body_mentions_tool("code_interpreter", 15));
    assert_false(ci_body_mentions_tool("code_interprete", 15));
    assert_false(ci_body_mentions_tool("Code_Interpreter", 16));
    assert_false(ci_body_mentions_tool("{\"tools\":[]}", 12));
    assert_false(ci_body_mentions_tool("", 0));
    assert_false(ci_body_mentions_tool(NULL, 0));
    /* bytes, not a C string: a NUL before the word does not hide it */
    assert_true(ci_body_mentions_tool("x\0code_interpreter", 18));
    /* an escaped letter or '_' cannot slip past the scan */
    assert_true(ci_body_mentions_tool("\"code\\u005finterpreter\"", 25));
    assert_true(ci_body_mentions_tool("\"\\u0063ode_interpreter\"", 25));
    /* what encoders really escape (non-ASCII, controls) does not count */
    assert_false(ci_body_mentions_tool("\"caf\\u00e9 \\u000a\"", 18));
}

static void test_utf8_sanitize(void **state)
{
    apr_pool_t *p = *state;
    apr_size_t n;
    const char *out;
    assert_int_equal(ci_utf8_valid_prefix("ok \xc3\xa9", 5), 5);
    assert_int_equal(ci_utf8_valid_prefix("a\xc0\x80", 3), 1);         /* overlong */
    assert_int_equal(ci_utf8_valid_prefix("a\xed\xa0\x80", 4), 1);     /* surrogate */
    assert_int_equal(ci_utf8_valid_prefix("a\xf4\x90\x80\x80", 5), 1); /* > U+10FFFF */
    out = ci_utf8_sanitize(p, "a\xff" "b\xc3", 4, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(out, "a\xef\xbf\xbd" "b\xef\xbf\xbd", 8);
    out = ci_utf8_sanitize(p, "fine", 4, &n);
    assert_int_equal(n, 4);
    assert_string_equal(out, "fine");
}

static void test_rewrite_pass(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bodies[] = {
        "{'model':'m','input':'what is a code_interpreter?'}",
        "{'model':'m','input':'x','tools':null}",
        "{'model':'m','input':'x','tools':[]}",
        "{'model':'m','tools':[" F_TOOL ",{'type':'web_search'}],"
        "'tool_choice':{'type':'code_interpreter'}}",
        /* the client's own function named like ours, without the tool */
        "{'model':'m','tools':[{'type':'function','name':'python','parameters':{}}],"
        "'tool_choice':{'type':'function','name':'python'},'stream':true}",
        /* not our tool in a usable form, and wrong types around it: the
         * upstream judges requests that are not ours */
        "{'tools':{'type':'code_interpreter'}}",
        "{'model':'m','input':'code_interpreter','tools':[],'stream':'yes'}",
    };
    assert_all_pass(p, bodies);
}

static void test_rewrite_replaces_tool(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'model':'m','input':'hi','tools':[" F_TOOL ","
                                   CI_TOOL ",{'type':'web_search'}]}");
    json_object *tools = root_tools(req), *t;

    assert_int_equal(json_object_array_length(tools), 3);
    assert_json(p, idx(tools, 0), F_TOOL);
    assert_json(p, idx(tools, 2), "{'type':'web_search'}");
    t = idx(tools, 1);
    assert_keys(t, "type", "name", "description", "parameters", "strict");
    assert_str(ci_json_str(t, "type"), "function");
    assert_str(ci_json_str(t, "name"), "python");
    assert_str(ci_json_str(t, "description"), ci_default_description());
    assert_json(p, member(t, "parameters"),
                "{'type':'object','properties':{'code':{'type':'string',"
                "'description':'The Python 3 code to run.'}},'required':['code'],"
                "'additionalProperties':false}");
    assert_json(p, member(t, "strict"), "true");
    assert_str(req->function_name, "python");

    /* the description tells the model what it is getting */
    assert_non_null(strstr(ci_default_description(), "Python 3"));
    assert_non_null(strstr(ci_default_description(), "/mnt/data"));
    assert_non_null(strstr(ci_default_description(), "no internet access"));
    assert_non_null(strstr(ci_default_description(), "persist"));

    /* the body to send is the rewritten root */
    assert_int_equal(strlen(req->body), req->body_len);
    assert_json_same(PARSE_RAW(p, req->body), root_as_sent(p, req));
    /* the whole body, the description aside (checked above) */
    {
        json_object *sent = PARSE_RAW(p, req->body);
        json_object_object_del(idx(ci_json_get(sent, "tools", json_type_array), 1),
                               "description");
        assert_json(p, sent,
                    "{'model':'m','input':[{'role':'user','content':'hi'}],"
                    "'tools':[" F_TOOL ",{'type':'function','name':'python',"
                    "'parameters':{'type':'object','properties':{'code':"
                    "{'type':'string','description':'The Python 3 code to run.'}},"
                    "'required':['code'],'additionalProperties':false},"
                    "'strict':true},{'type':'web_search'}],'stream':false}");
    }
}

static void test_rewrite_opts(void **state)
{
    apr_pool_t *p = *state;
    static const ci_rewrite_opts o = { .function_name = "run_code",
                                      .function_description = "Custom description." };
    /* with another function name, a client function "python" is no clash */
    ci_request *req = INTERCEPT_OPTS(p,
        "{'input':[{'type':'code_interpreter_call','id':'ci_1','code':'1+1',"
        "'outputs':null}],'tools':[{'type':'function','name':'python',"
        "'parameters':{}}," CI_TOOL "],'tool_choice':{'type':'code_interpreter'}}",
        &o);
    json_object *t = idx(root_tools(req), 1);
    assert_str(req->function_name, "run_code");
    assert_str(ci_json_str(t, "name"), "run_code");
    assert_str(ci_json_str(t, "description"), "Custom description.");
    assert_json(p, idx(root_tools(req), 0),
                "{'type':'function','name':'python','parameters':{}}");
    assert_json(p, member(req->root, "tool_choice"),
                "{'type':'function','name':'run_code'}");
    assert_str(ci_json_str(idx(ci_request_input(p, req), 0), "name"), "run_code");
}

static void test_rewrite_stream(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;

    req = INTERCEPT(p, "{'stream':true,'stream_options':{'include_usage':true},"
                       "'tools':[" CI_TOOL "]}");
    /* a streaming client's rounds stream too: stream and its options kept */
    assert_int_equal(req->wants_stream, 1);
    assert_json(p, member(req->root, "stream"), "true");
    assert_json(p, member(req->root, "stream_options"), "{ \"include_usage\": true }");
    assert_json(p, member(PARSE_RAW(p, req->body), "stream"), "true");

    req = INTERCEPT(p, "{'tools':[" CI_TOOL "]}");
    assert_int_equal(req->wants_stream, 0);
    assert_json(p, member(req->root, "stream"), "false");

    req = INTERCEPT(p, "{'stream':false,'stream_options':null,'tools':[" CI_TOOL "]}");
    assert_int_equal(req->wants_stream, 0);
    assert_false(has_key(req->root, "stream_options"));

    req = INTERCEPT(p, "{'stream':null,'tools':[" CI_TOOL "]}");
    assert_int_equal(req->wants_stream, 0);
    assert_json(p, member(req->root, "stream"), "false");
}

/* What the directory would answer: ci_known stands for a call and its
 * output; nothing else was returned to this caller. */
static const char *recall_known(void *baton, const char *item_id,
                                const char **container)
{
    *(int *)baton += 1;
    if (strcmp(item_id, "ci_known"))
        return NULL;
    *container = "cntr_known";
    return "[{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\","
           "\"name\":\"python\",\"arguments\":\"{\\\"code\\\":\\\"x = 1\\\"}\"},"
           "{\"type\":\"function_call_output\",\"call_id\":\"call_1\","
           "\"output\":\"(no output)\"}]";
}

static void test_rewrite_item_references(void **state)
{
    apr_pool_t *p = *state;
    int asked = 0;
    ci_rewrite_opts o = { .function_name = "python", .recall = recall_known,
                          .recall_baton = &asked };
    ci_request *req;
    ci_error err;
    const char *b;
    json_object *in;

    /* ours: replaced by what the upstream needs; others' ids pass through */
    req = INTERCEPT_OPTS(p, "{'tools':[" CI_TOOL "],'input':["
                            "{'type':'item_reference','id':'msg_1'},"
                            "{'type':'item_reference','id':'ci_known'},"
                            "{'role':'user','content':'go on'}]}", &o);
    in = ci_request_input(p, req);
    assert_int_equal(json_object_array_length(in), 4);
    assert_string_equal(ci_json_str(json_object_array_get_idx(in, 0), "id"), "msg_1");
    assert_string_equal(ci_json_str(json_object_array_get_idx(in, 1), "type"),
                        "function_call");
    assert_string_equal(ci_json_str(json_object_array_get_idx(in, 2), "type"),
                        "function_call_output");
    assert_string_equal(ci_json_str(json_object_array_get_idx(in, 3), "role"), "user");
    assert_int_equal(asked, 1);
    /* the reference names the context's container */
    assert_string_equal(req->context_container, "cntr_known");

    /* an id of ours this caller never got: OpenAI's answer */
    b = J(p, "{'tools':[" CI_TOOL "],'input':[{'type':'item_reference','id':'ci_other'}]}");
    assert_int_equal(rewrite_raw(p, b, strlen(b), &o, &req, &err), CI_REQ_ERROR);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.type, "invalid_request_error");
    assert_string_equal(err.param, "input");
    assert_null(err.code);
    assert_string_equal(err.message, "Item with id 'ci_other' not found.");

    /* without a directory, references pass through untouched */
    req = INTERCEPT(p, "{'tools':[" CI_TOOL "],'input':[{'type':'item_reference','id':'ci_x'}]}");
    assert_string_equal(ci_json_str(json_object_array_get_idx(ci_request_input(p, req), 0), "id"), "ci_x");
}

static void test_rewrite_container_context(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;
    const char *b;
    ci_error err;

    /* an explicit id; auto with a tier; neither */
    req = INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':'cntr_1'}],"
                       "'input':'hi'}");
    assert_string_equal(req->container_id, "cntr_1");
    assert_null(req->memory_limit);
    req = INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'memory_limit':'4g'}}],'input':'hi'}");
    assert_null(req->container_id);
    assert_string_equal(req->memory_limit, "4g");
    b = J(p, "{'tools':[{'type':'code_interpreter','container':''}],'input':'hi'}");
    assert_int_equal(rewrite_raw(p, b, strlen(b), NULL, &req, &err), CI_REQ_ERROR);
    assert_string_equal(err.param, "tools[0].container");

    /* the latest replayed call names the context's container; the chain */
    req = INTERCEPT(p, "{'tools':[" CI_TOOL "],'previous_response_id':'resp_9','input':["
                       "{'type':'code_interpreter_call','id':'ci_a','code':'1',"
                       "'container_id':'cntr_old','outputs':null},"
                       "{'type':'code_interpreter_call','id':'ci_b','code':'2',"
                       "'container_id':'cntr_new','outputs':null}]}");
    assert_string_equal(req->context_container, "cntr_new");
    assert_string_equal(req->previous_response_id, "resp_9");

    /* outputs owed to a chained response go first, in the body too */
    req = INTERCEPT(p, "{'tools':[" CI_TOOL "],'input':[{'role':'user','content':'go'}]}");
    assert_int_equal(ci_request_prepend_input(p, req, "[{\"type\":\"function_call_output\","
                                              "\"call_id\":\"c1\",\"output\":\"42\"}]"),
                     0);
    assert_int_equal(json_object_array_length(ci_request_input(p, req)), 2);
    assert_string_equal(ci_json_str(json_object_array_get_idx(ci_request_input(p, req), 0), "call_id"),
                        "c1");
    assert_non_null(strstr(req->body, "\"call_id\":\"c1\""));
    assert_true(strstr(req->body, "c1") < strstr(req->body, "\"go\""));
    assert_int_equal(ci_request_prepend_input(p, req, "{}"), -1);
}

static void test_rewrite_include(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;

    req = INTERCEPT(p, "{'include':['code_interpreter_call.outputs'],"
                       "'tools':[" CI_TOOL "]}");
    assert_int_equal(req->include_outputs, 1);
    assert_false(has_key(req->root, "include"));
    assert_false(has_key(PARSE_RAW(p, req->body), "include"));

    req = INTERCEPT(p, "{'include':['reasoning.encrypted_content',"
                       "'code_interpreter_call.outputs','message.output_text.logprobs'],"
                       "'tools':[" CI_TOOL "]}");
    assert_int_equal(req->include_outputs, 1);
    assert_json(p, member(req->root, "include"),
                "['reasoning.encrypted_content','message.output_text.logprobs']");

    req = INTERCEPT(p, "{'include':['reasoning.encrypted_content'],"
                       "'tools':[" CI_TOOL "]}");
    assert_int_equal(req->include_outputs, 0);
    assert_json(p, member(req->root, "include"), "['reasoning.encrypted_content']");

    req = INTERCEPT(p, "{'tools':[" CI_TOOL "]}");
    assert_int_equal(req->include_outputs, 0);
    assert_false(has_key(req->root, "include"));
}

static void test_rewrite_flags(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;

    req = INTERCEPT(p, "{'max_tool_calls':3,'tools':[" CI_TOOL "]}");
    assert_int_equal(req->max_tool_calls, 3);
    assert_json(p, member(req->root, "max_tool_calls"), "3");
    req = INTERCEPT(p, "{'max_tool_calls':null,'tools':[" CI_TOOL "]}");
    assert_int_equal(req->max_tool_calls, -1);
    req = INTERCEPT(p, "{'tools':[" CI_TOOL "]}");
    assert_int_equal(req->max_tool_calls, -1);
    assert_int_equal(req->uses_conversation, 0);
    assert_int_equal(req->forced_choice, 0);
    assert_null(req->client_tool_choice);

    assert_null(req->conversation_id);
    req = INTERCEPT(p, "{'conversation':'conv_1','tools':[" CI_TOOL "]}");
    assert_int_equal(req->uses_conversation, 1);
    assert_string_equal(req->conversation_id, "conv_1");
    assert_json(p, member(req->root, "conversation"), "'conv_1'");
    req = INTERCEPT(p, "{'conversation':{'id':'conv_1'},'tools':[" CI_TOOL "]}");
    assert_int_equal(req->uses_conversation, 1);
    assert_string_equal(req->conversation_id, "conv_1");
    assert_json(p, member(req->root, "conversation"), "{'id':'conv_1'}");
    req = INTERCEPT(p, "{'conversation':null,'tools':[" CI_TOOL "]}");
    assert_int_equal(req->uses_conversation, 0);
    assert_null(req->conversation_id);
    /* with a null previous_response_id: one route, not two */
    req = INTERCEPT(p, "{'conversation':'c','previous_response_id':null,'tools':["
                       CI_TOOL "]}");
    assert_string_equal(req->conversation_id, "c");
    assert_null(req->previous_response_id);

    /* background false is fine, the rest passes through */
    req = INTERCEPT(p, "{'background':false,'previous_response_id':'resp_0',"
                       "'store':false,'model':'gpt-x','tools':[" CI_TOOL "]}");
    assert_json(p, member(req->root, "background"), "false");
    assert_json(p, member(req->root, "previous_response_id"), "'resp_0'");
    assert_json(p, member(req->root, "store"), "false");
    assert_json(p, member(req->root, "model"), "'gpt-x'");
}

static void test_rewrite_client_tools(void **state)
{
    apr_pool_t *p = *state;
    static const char tools[] =
        "[" F_TOOL ",{'type':'code_interpreter','container':{'type':'auto',"
        "'file_ids':[],'memory_limit':null,'network_policy':{'type':'disabled'}}},"
        "{'type':'web_search','filters':{'allowed_domains':['a.example']}}]";
    ci_request *req = INTERCEPT(p, apr_pstrcat(p, "{'tools':", tools, "}", NULL));
    assert_non_null(req->client_tools);
    assert_ptr_not_equal(req->client_tools, root_tools(req));
    assert_json(p, req->client_tools, tools);
    assert_str(ci_json_str(idx(root_tools(req), 1), "type"), "function");

    /* container absent or null is "auto" */
    INTERCEPT(p, "{'tools':[{'type':'code_interpreter'}]}");
    INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':null}]}");
}

static void choice_case_(apr_pool_t *p, const char *choice_sq, const char *want_sq,
                         int forced, const char *file, int line)
{
    ci_request *req = intercept_(p, apr_psprintf(p, "{'tools':[" F_TOOL ","
                                    CI_TOOL "],'tool_choice':%s}", choice_sq),
                                 NULL, file, line);
    json_object *got = NULL;
    _assert_true(json_object_object_get_ex(req->root, "tool_choice", &got),
                 "tool_choice in root", file, line);
    json_eq_(p, got, want_sq, file, line);
    _assert_true(json_object_object_get_ex(PARSE_RAW(p, req->body), "tool_choice",
                                           &got), "tool_choice in body", file, line);
    json_eq_(p, got, want_sq, file, line);
    _assert_int_equal(req->forced_choice, forced, file, line);
    json_eq_(p, req->client_tool_choice, choice_sq, file, line);
}
#define choice_case(p, choice, want, forced) \
    choice_case_((p), (choice), (want), (forced), __FILE__, __LINE__)

static void test_rewrite_tool_choice(void **state)
{
    apr_pool_t *p = *state;
    choice_case(p, "'none'", "'none'", 0);
    choice_case(p, "'auto'", "'auto'", 0);
    choice_case(p, "'required'", "'required'", 1);
    choice_case(p, "{'type':'code_interpreter'}",
                "{'type':'function','name':'python'}", 1);
    choice_case(p, "{'type':'function','name':'f'}",
                "{'type':'function','name':'f'}", 1);
    choice_case(p, "{'type':'allowed_tools','mode':'required','tools':["
                   "{'type':'code_interpreter'},{'type':'function','name':'f'}]}",
                "{'type':'allowed_tools','mode':'required','tools':["
                "{'type':'function','name':'python'},{'type':'function','name':'f'}]}",
                1);
    choice_case(p, "{'type':'allowed_tools','mode':'auto','tools':["
                   "{'type':'function','name':'f'},{'type':'code_interpreter'}]}",
                "{'type':'allowed_tools','mode':'auto','tools':["
                "{'type':'function','name':'f'},{'type':'function','name':'python'}]}",
                0);
}

static void test_rewrite_tool_choice_absent(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'tools':[" CI_TOOL "]}");
    assert_false(has_key(req->root, "tool_choice"));
    assert_null(req->client_tool_choice);
    assert_int_equal(req->forced_choice, 0);
    req = INTERCEPT(p, "{'tool_choice':null,'tools':[" CI_TOOL "]}");
    assert_null(req->client_tool_choice);
    assert_int_equal(req->forced_choice, 0);
}

static void test_rewrite_input_string(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'input':'hello','tools':[" CI_TOOL "]}");
    assert_json(p, ci_request_input(p, req), "[{'role':'user','content':'hello'}]");
    assert_json(p, member(PARSE_RAW(p, req->body), "input"),
                "[{'role':'user','content':'hello'}]");

    req = INTERCEPT(p, "{'tools':[" CI_TOOL "]}");
    assert_json(p, ci_request_input(p, req), "[]");
    assert_json(p, member(req->root, "input"), "[]");
}

/* A function_call + function_call_output pair replaying a call. */
static void replayed_(apr_pool_t *p, json_object *call, json_object *out,
                      const char *id, const char *code, const char *output,
                      const char *file, int line)
{
    json_object *args;
    const char *a;
    const char *const call_keys[] = {"type", "call_id", "name", "arguments", NULL};
    const char *const out_keys[] = {"type", "call_id", "output", NULL};
    keys_are_(call, call_keys, file, line);
    str_eq_(ci_json_str(call, "type"), "function_call", file, line);
    str_eq_(ci_json_str(call, "call_id"), id, file, line);
    str_eq_(ci_json_str(call, "name"), "python", file, line);
    a = ci_json_str(call, "arguments");
    _assert_true(a != NULL, "arguments is a string", file, line);
    args = parse_(p, a, file, line);
    keys_are_(args, (const char *const[]){"code", NULL}, file, line);
    str_eq_(ci_json_str(args, "code"), code, file, line);
    keys_are_(out, out_keys, file, line);
    str_eq_(ci_json_str(out, "type"), "function_call_output", file, line);
    str_eq_(ci_json_str(out, "call_id"), id, file, line);
    str_eq_(ci_json_str(out, "output"), output, file, line);
}
#define assert_replayed(p, call, out, id, code, output) \
    replayed_((p), (call), (out), (id), (code), (output), __FILE__, __LINE__)

/* The items that pass unchanged reach the upstream as the client wrote
 * them (its escapes, numbers and spacing); only what the rewrite makes is
 * encoded. */
static void test_rewrite_keeps_the_clients_bytes(void **state)
{
    apr_pool_t *p = *state;
    const char *body =
        "{\"input\": [ {\"role\": \"user\", \"content\": \"caf\\u00e9 \\/ 1\"} ,"
        "{\"type\":\"code_interpreter_call\",\"id\":\"ci_a\",\"code\":\"x\","
        "\"container_id\":\"cntr_x\",\"outputs\":[]},"
        "{\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": 1.50e+1}],"
        "\"tools\":[" "{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}}" "]}";
    ci_request *req;
    ci_error err;
    assert_int_equal(rewrite_raw(p, body, strlen(body), NULL, &req, &err), CI_REQ_INTERCEPT);
    assert_string_equal(req->input_text,
        "{\"role\": \"user\", \"content\": \"caf\\u00e9 \\/ 1\"},"
        "{\"type\":\"function_call\",\"call_id\":\"ci_a\",\"name\":\"python\","
        "\"arguments\":\"{\\\"code\\\":\\\"x\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"ci_a\",\"output\":\"(no output)\"},"
        "{\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": 1.50e+1}");
    assert_int_equal(req->input_len, strlen(req->input_text));
    assert_non_null(strstr(req->body, req->input_text));
    assert_null(req->input);            /* only the code_interpreter_call was parsed */
    assert_json_same(member(PARSE_RAW(p, req->body), "input"), ci_request_input(p, req));
}

/* An input of items the rewrite leaves alone (or a string) is not parsed
 * at all: checked by a scan and sent as written. */
static void test_rewrite_passes_an_input_unparsed(void **state)
{
    apr_pool_t *p = *state;
    static const struct {
        const char *input, *input_text;
    } cases[] = {
        { "[ {\"role\": \"user\", \"content\": \"caf\\u00e9 \\/ \\\"q\\\" \\\\\"} , "
          "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
          "\"text\":\"ok\",\"annotations\":[]}],\"n\":[-0.5e+10,0,-1,123456789012345678,true,"
          "false,null,{}]}]",
          "{\"role\": \"user\", \"content\": \"caf\\u00e9 \\/ \\\"q\\\" \\\\\"},"
          "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
          "\"text\":\"ok\",\"annotations\":[]}],\"n\":[-0.5e+10,0,-1,123456789012345678,true,"
          "false,null,{}]}" },
        { "\"hi \\/\"", "{\"role\":\"user\",\"content\":\"hi \\/\"}" },
        { "[]", "" },
        { "[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"\\ud83d\"}]", NULL },
        { "[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":1234567890123456789}]",
          NULL },
        { "[{\"role\":\"user\",\"content\":\"a\"},{\"typ\\u0065\":\"code_interpreter_call\","
          "\"id\":\"ci_1\"}]", NULL },
        { "[{\"type\":\"message\",\"type\":\"code_interpreter_call\",\"id\":\"ci_1\"}]", NULL },
        { "[{\"role\":\"user\",\"content\":\"a\"}, \n {\"role\":\"user\",\"content\":\"b\"}]",
          "{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}" },
    };
    unsigned i;
    for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        const char *body = apr_pstrcat(p, "{\"input\": ", cases[i].input,
                                       " ,\"tools\":[{\"type\":\"code_interpreter\"}]}", NULL);
        ci_request *req;
        ci_error err;
        assert_int_equal(rewrite_raw(p, body, strlen(body), NULL, &req, &err),
                         CI_REQ_INTERCEPT);
        if (cases[i].input_text) {
            assert_null(req->input);                    /* nothing parsed */
            assert_string_equal(apr_pstrmemdup(p, req->input_text, req->input_len),
                                cases[i].input_text);
        }
        else
            assert_non_null(req->input);                /* parsed, as the parser reads it */
        assert_non_null(strstr(req->body, apr_pstrmemdup(p, req->input_text,
                                                          req->input_len)));
        assert_json_same(PARSE_RAW(p, req->body), root_as_sent(p, req));
        assert_false(ci_json_has_control_byte(req->body, req->body_len));
    }
}

/* An input with items the rewrite translates: only those are parsed
 * (req->input stays NULL), the others go upstream as written. A type the
 * scan reads with an escape counts as one it translates: the parser reads
 * "code_interpreter_c\u0061ll" as code_interpreter_call. */
static void test_rewrite_parses_only_the_items_it_translates(void **state)
{
    apr_pool_t *p = *state;
    const char *body =
        "{\"input\":[{\"type\":\"code_interpreter_c\\u0061ll\",\"id\":\"ci_a\","
        "\"code\":\"x\",\"container_id\":\"cntr_x\",\"outputs\":[]},"
        "{\"role\": \"user\", \"content\": \"a \\/ b\"},"
        "{\"type\":\"item_reference\", \"id\":\"msg_1\"}],"
        "\"tools\":[{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}}]}";
    ci_request *req;
    ci_error err;
    assert_int_equal(rewrite_raw(p, body, strlen(body), NULL, &req, &err), CI_REQ_INTERCEPT);
    assert_null(req->input);
    assert_string_equal(apr_pstrmemdup(p, req->input_text, req->input_len),
        "{\"type\":\"function_call\",\"call_id\":\"ci_a\",\"name\":\"python\","
        "\"arguments\":\"{\\\"code\\\":\\\"x\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"ci_a\",\"output\":\"(no output)\"},"
        "{\"role\": \"user\", \"content\": \"a \\/ b\"},"
        "{\"type\":\"item_reference\", \"id\":\"msg_1\"}");
    assert_string_equal(req->context_container, "cntr_x");
    assert_json_same(PARSE_RAW(p, req->body), root_as_sent(p, req));
    assert_json_same(member(req->root, "input"), PARSE(p, "[]"));
}

/* A body the parser refuses is refused with the parser's words, its byte
 * counted in the whole body, however plain its input. */
static void test_rewrite_passing_input_bad_body(void **state)
{
    apr_pool_t *p = *state;
    const char *body = "{\"input\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"tools\":[{\"type\":\"code_interpreter\"}],\"a\":tru}";
    const char *perr = NULL;
    assert_null(ci_json_parse(p, body, strlen(body), &perr));
    assert_rejected_raw(p, body, strlen(body), NULL, "invalid_json",
                        apr_psprintf(p, "We could not parse the JSON body of your request: "
                                        "%s.", perr));
    assert_string_equal(perr, "boolean expected at byte 86");   /* the whole body's */
    body = "{\"input\":\"caf\xc3\",\"tools\":[{\"type\":\"code_interpreter\"}]}";
    assert_rejected_raw(p, body, strlen(body), NULL, "invalid_json",
                        "We could not parse the JSON body of your request: invalid UTF-8 "
                        "at byte 13.");
}

/* What the scan cannot vouch for is encoded, as the parser read it: a raw
 * control character in a string (strict JSON has none), a duplicated or
 * escaped key, a string input. */
static void test_rewrite_encodes_what_it_cannot_keep(void **state)
{
    apr_pool_t *p = *state;
    static const struct {
        const char *body, *input_text;
    } cases[] = {
        { "{\"input\":[{\"role\":\"user\",\"content\":\"a\tb\"},{\"role\":\"user\",\"content\":\"c\"}],"
          "\"tools\":[" "{\"type\":\"code_interpreter\"}" "]}",
          "{\"role\":\"user\",\"content\":\"a\\tb\"},{\"role\":\"user\",\"content\":\"c\"}" },
        { "{\"input\":[{\"role\" : \"user\",\n\"content\":\"c\"}],"
          "\"tools\":[" "{\"type\":\"code_interpreter\"}" "]}",
          "{\"role\":\"user\",\"content\":\"c\"}" },
        { "{\"input\":[{\"role\" : \"user\",\"content\":\"a\"}],\"input\":[{\"role\" : \"user\","
          "\"content\":\"b\"}],\"tools\":[" "{\"type\":\"code_interpreter\"}" "]}",
          "{\"role\":\"user\",\"content\":\"b\"}" },
        { "{\"input\":[{\"role\" : \"user\",\"content\":\"a\"}],\"\\u0074ools\":["
          "{\"type\":\"code_interpreter\"}" "]}",
          "{\"role\":\"user\",\"content\":\"a\"}" },
    };
    unsigned i;
    for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        ci_request *req;
        ci_error err;
        assert_int_equal(rewrite_raw(p, cases[i].body, strlen(cases[i].body), NULL, &req,
                                     &err), CI_REQ_INTERCEPT);
        /* (the encoded text is the array's own, the ']' after it) */
        assert_string_equal(apr_pstrmemdup(p, req->input_text, req->input_len),
                            cases[i].input_text);
        assert_false(ci_json_has_control_byte(req->body, req->body_len));
    }
}

static void test_rewrite_input_history(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'input':["
        "{'role':'user','content':'plot it'},"
        "{'type':'reasoning','id':'rs_1','summary':[],'encrypted_content':'enc'},"
        "{'type':'code_interpreter_call','id':'ci_a','status':'completed',"
        "'container_id':'cntr_x','code':'print(1)\\nprint(2)','outputs':["
        "{'type':'logs','logs':'1'},{'type':'image','url':'data:image/png;base64,AA=='},"
        "{'type':'logs','logs':'2'}]},"
        "{'type':'code_interpreter_call','id':'ci_b','status':'completed',"
        "'container_id':'cntr_x','code':null,'outputs':null},"
        "{'type':'code_interpreter_call','id':'ci_c','status':'completed',"
        "'container_id':'cntr_x','code':'x = 1','outputs':[]},"
        "{'type':'code_interpreter_call','id':'ci_d'},"
        "{'type':'function_call','call_id':'call_9','name':'f','arguments':'{}'},"
        "{'type':'function_call_output','call_id':'call_9','output':'ok'},"
        "{'type':'message','role':'assistant','content':'done'}],"
        "'tools':[" F_TOOL "," CI_TOOL "]}");
    json_object *in = ci_request_input(p, req);

    assert_int_equal(json_object_array_length(in), 13);
    assert_json(p, idx(in, 0), "{'role':'user','content':'plot it'}");
    assert_json(p, idx(in, 1), "{'type':'reasoning','id':'rs_1','summary':[],"
                               "'encrypted_content':'enc'}");
    assert_replayed(p, idx(in, 2), idx(in, 3), "ci_a", "print(1)\nprint(2)",
                    "1\n[image/png figure]\n2");
    assert_replayed(p, idx(in, 4), idx(in, 5), "ci_b", "", CI_NO_OUTPUT_RECORDED);
    assert_string_equal(CI_NO_OUTPUT_RECORDED, "(no output recorded)");
    assert_replayed(p, idx(in, 6), idx(in, 7), "ci_c", "x = 1", "(no output)");
    assert_replayed(p, idx(in, 8), idx(in, 9), "ci_d", "", "(no output recorded)");
    assert_json(p, idx(in, 10), "{'type':'function_call','call_id':'call_9',"
                                "'name':'f','arguments':'{}'}");
    assert_json(p, idx(in, 11), "{'type':'function_call_output','call_id':'call_9',"
                                "'output':'ok'}");
    assert_json(p, idx(in, 12), "{'type':'message','role':'assistant',"
                                "'content':'done'}");
    assert_json_same(member(root_as_sent(p, req), "input"), in);
    assert_json_same(member(PARSE_RAW(p, req->body), "input"), in);
}

/* ======================================================================== */
/* ci_request: rejections                                                   */
/* ======================================================================== */

#define PARSE_ERR "We could not parse the JSON body of your request: "

static void test_reject_json(void **state)
{
    apr_pool_t *p = *state;
    static const char bad_utf8[] =
        "{\"input\":\"\xff\",\"tools\":[{\"type\":\"code_interpreter\"}]}";
    static const char bad_utf8_2[] =
        "{\"tools\":[{\"type\":\"code_interpreter\",\"x\":\"\xc3(\"}]}";
    const char *obj = "{\"tools\":[{\"type\":\"code_interpreter\"}]}";
    char *deep;
    int n;

    assert_rejected(p, "{'tools':[" CI_TOOL "]", NULL, "invalid_json",
                    PARSE_ERR "the JSON text ends too early.");
    assert_rejected(p, "{'tools':[" CI_TOOL "],}", NULL, "invalid_json",
                    PARSE_ERR "unexpected character at byte 67.");
    assert_rejected(p, "", NULL, "invalid_json",
                    PARSE_ERR "the JSON text ends too early.");
    assert_rejected(p, "[" CI_TOOL "]", NULL, "invalid_json",
                    "The request body must be a JSON object.");
    assert_rejected(p, "'code_interpreter'", NULL, "invalid_json",
                    "The request body must be a JSON object.");

    /* invalid UTF-8, at the offending byte */
    assert_rejected_raw(p, bad_utf8, sizeof(bad_utf8) - 1, NULL, "invalid_json",
                        PARSE_ERR "invalid UTF-8 at byte 10.");
    assert_rejected_raw(p, bad_utf8_2, sizeof(bad_utf8_2) - 1, NULL, "invalid_json",
                        PARSE_ERR "invalid UTF-8 at byte 42.");
    /* valid UTF-8 is fine */
    INTERCEPT(p, "{'input':'h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80',"
                 "'tools':[" CI_TOOL "]}");

    /* trailing data; trailing whitespace is fine */
    assert_rejected_raw(p, apr_pstrcat(p, obj, " x", NULL), strlen(obj) + 2, NULL,
                        "invalid_json",
                        apr_psprintf(p, PARSE_ERR "unexpected character at byte %d.",
                                     (int)strlen(obj) + 1));
    assert_rejected_raw(p, apr_pstrcat(p, obj, "{}", NULL), strlen(obj) + 2, NULL,
                        "invalid_json",
                        apr_psprintf(p, PARSE_ERR "unexpected character at byte %d.",
                                     (int)strlen(obj)));
    INTERCEPT(p, "{'tools':[" CI_TOOL "]} \r\n\t\n");

    /* nesting: 128 levels pass, 129 do not (the body object is level 1) */
    for (n = 127; n <= 128; n++) {
        const char *head = "{\"tools\":[{\"type\":\"code_interpreter\"}],\"x\":";
        apr_size_t h = strlen(head), len = h + 2 * n + 1;
        deep = apr_palloc(p, len + 1);
        memcpy(deep, head, h);
        memset(deep + h, '[', n);
        memset(deep + h + n, ']', n);
        deep[len - 1] = '}';
        deep[len] = '\0';
        if (n == 127)
            INTERCEPT(p, deep);
        else
            assert_rejected_raw(p, deep, len, NULL, "invalid_json",
                                PARSE_ERR "JSON nesting deeper than 128 levels.");
    }
}

/* BUG: see test_json_parse_trailing_nul_bug; a body with a trailing NUL byte
 * is accepted. */
static void test_reject_trailing_nul_bug(void **state)
{
    apr_pool_t *p = *state;
    static const char b[] = "{\"tools\":[{\"type\":\"code_interpreter\"}]}\0";
    assert_rejected_raw(p, b, sizeof(b) - 1, NULL, "invalid_json",
                        apr_psprintf(p, PARSE_ERR "unexpected data after the JSON value at byte %d.", (int)sizeof(b) - 2));
}

/* BUG: see test_json_parse_top_level_scalar_bug; a body that is a number is
 * complete JSON, not JSON cut short. */
static void test_reject_scalar_body_bug(void **state)
{
    apr_pool_t *p = *state;
    assert_rejected(p, "123", NULL, "invalid_json",
                    "The request body must be a JSON object.");
    assert_rejected(p, "true", NULL, "invalid_json",
                    "The request body must be a JSON object.");
}

/* BUG: see test_json_parse_non_rfc_numbers_bug; this body is forwarded with
 * "NaN" in it, which is not JSON. */
static void test_reject_non_rfc_number_bug(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;
    ci_error err;
    const char *b = J(p, "{'temperature':NaN,'tools':[" CI_TOOL "]}");
    ci_req_verdict v = rewrite_raw(p, b, strlen(b), NULL, &req, &err);
    if (v == CI_REQ_INTERCEPT)
        print_error("forwarded upstream: %s\n", req->body);
    assert_int_equal(v, CI_REQ_ERROR);
    assert_int_equal(err.status, 400);
    assert_str(err.type, "invalid_request_error");
    assert_starts_with(err.message, PARSE_ERR);
}

#define TYPE_ERR(param, what) "Invalid type for '" param "': expected " what "."

static void test_reject_tools(void **state)
{
    apr_pool_t *p = *state;
    assert_rejected(p, "{'tools':[" CI_TOOL ",'code_interpreter']}", "tools[1]",
                    "invalid_type", TYPE_ERR("tools[1]", "an object"));
    assert_rejected(p, "{'tools':[" F_TOOL "," CI_TOOL ",{'type':'code_interpreter'}]}",
                    "tools[2]", "duplicate_tool",
                    "Only one code_interpreter tool may be given.");
    assert_rejected(p, "{'tools':[" CI_TOOL ",{'type':'function','name':'python',"
                       "'parameters':{}}]}", "tools[1].name", "tool_name_clash",
                    "The function name 'python' is reserved for the code_interpreter "
                    "tool on this server; rename your function.");
    assert_rejected(p, "{'tools':[" F_TOOL ",{'type':'function','name':'python',"
                       "'parameters':{}}," CI_TOOL "]}", "tools[1].name",
                    "tool_name_clash",
                    "The function name 'python' is reserved for the code_interpreter "
                    "tool on this server; rename your function.");
}

#define CONTAINER_ERR(what, param)                                            \
    what " are not supported by this server's code_interpreter ('" param      \
    "'); use \"container\": {\"type\": \"auto\"}."

static void test_reject_container(void **state)
{
    apr_pool_t *p = *state;
    assert_rejected(p, "{'tools':[" F_TOOL ",{'type':'code_interpreter','container':7}]}",
                    "tools[1].container", "invalid_type",
                    TYPE_ERR("tools[1].container", "an object"));
    /* file_ids are checked at the upstream by the glue; their shape here */
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'file_ids':'file_1'}}]}",
                    "tools[0].container.file_ids", "invalid_type",
                    TYPE_ERR("tools[0].container.file_ids", "an array of file ids"));
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'file_ids':['file_1','']}}]}",
                    "tools[0].container.file_ids[1]", "invalid_type",
                    TYPE_ERR("tools[0].container.file_ids[1]", "a file id"));
    /* a tier is the glue's to judge against the tool; its type is ours */
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'memory_limit':4}}]}",
                    "tools[0].container.memory_limit", "invalid_type",
                    TYPE_ERR("tools[0].container.memory_limit", "a string"));
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'network_policy':'disabled'}}]}",
                    "tools[0].container.network_policy", "invalid_type",
                    TYPE_ERR("tools[0].container.network_policy",
                             "an object of type \"disabled\" or \"allowlist\""));
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'static'}}]}",
                    "tools[0].container.type", "unsupported_parameter",
                    CONTAINER_ERR("Container types other than \"auto\"",
                                  "tools[0].container.type"));
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{}}]}",
                    "tools[0].container.type", "unsupported_parameter",
                    CONTAINER_ERR("Container types other than \"auto\"",
                                  "tools[0].container.type"));
    /* what is accepted */
    INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                 "'file_ids':[],'memory_limit':null,'network_policy':{'type':'disabled'}}}]}");
    INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                 "'file_ids':null,'network_policy':null}}]}");
}

static void test_reject_flags(void **state)
{
    apr_pool_t *p = *state;
    assert_rejected(p, "{'background':true,'tools':[" CI_TOOL "]}", "background",
                    "unsupported_parameter",
                    "Background mode is not supported with the code_interpreter "
                    "tool on this server.");
    assert_rejected(p, "{'background':'yes','tools':[" CI_TOOL "]}", "background",
                    "invalid_type", TYPE_ERR("background", "a boolean"));
    assert_rejected(p, "{'stream':'true','tools':[" CI_TOOL "]}", "stream",
                    "invalid_type", TYPE_ERR("stream", "a boolean"));
    assert_rejected(p, "{'stream':1,'tools':[" CI_TOOL "]}", "stream",
                    "invalid_type", TYPE_ERR("stream", "a boolean"));
    assert_rejected(p, "{'include':'code_interpreter_call.outputs','tools':[" CI_TOOL "]}",
                    "include", "invalid_type", TYPE_ERR("include", "an array of strings"));
    assert_rejected(p, "{'max_tool_calls':'3','tools':[" CI_TOOL "]}", "max_tool_calls",
                    "invalid_type", TYPE_ERR("max_tool_calls", "an integer"));
    assert_rejected(p, "{'max_tool_calls':2.5,'tools':[" CI_TOOL "]}", "max_tool_calls",
                    "invalid_type", TYPE_ERR("max_tool_calls", "an integer"));
    assert_rejected(p, "{'max_tool_calls':0,'tools':[" CI_TOOL "]}", "max_tool_calls",
                    "invalid_value",
                    "Invalid value for 'max_tool_calls': expected an integer of at least 1.");
    assert_rejected(p, "{'max_tool_calls':-1,'tools':[" CI_TOOL "]}", "max_tool_calls",
                    "invalid_value",
                    "Invalid value for 'max_tool_calls': expected an integer of at least 1.");
    assert_rejected(p, "{'max_tool_calls':9999999999,'tools':[" CI_TOOL "]}",
                    "max_tool_calls", "invalid_value",
                    "Invalid value for 'max_tool_calls': expected an integer of at least 1.");
    assert_rejected(p, "{'input':5,'tools':[" CI_TOOL "]}", "input", "invalid_type",
                    TYPE_ERR("input", "a string or an array of items"));
    assert_rejected(p, "{'input':{'role':'user'},'tools':[" CI_TOOL "]}", "input",
                    "invalid_type", TYPE_ERR("input", "a string or an array of items"));
    assert_rejected(p, "{'conversation':5,'tools':[" CI_TOOL "]}", "conversation",
                    "invalid_type", TYPE_ERR("conversation", "a string or an object"));
}

/* A conversation id of N copies of the UTF-8 sequence CH, as a body's
 * conversation (single quotes). */
static const char *conversation_of(apr_pool_t *p, const char *ch, int n)
{
    const char *id = "";
    int i;
    for (i = 0; i < n; i++)
        id = apr_pstrcat(p, id, ch, NULL);
    return apr_pstrcat(p, "{'conversation':'", id, "','tools':[" CI_TOOL "]}", NULL);
}

#define NOT_AN_ID "a string of 1 to 128 characters"

static void test_reject_conversation(void **state)
{
    static const char *const not_ours[] = {
        "{'conversation':'c','previous_response_id':'resp_1'}",
        "{'conversation':'','tools':[" F_TOOL "]}",
    };
    static const char both[] = "Mutually exclusive parameters. Ensure you are only "
                               "providing one of: 'previous_response_id' or 'conversation'.";
    apr_pool_t *p = *state;
    assert_rejected(p, "{'conversation':'conv_1','previous_response_id':'resp_1','tools':["
                       CI_TOOL "]}", NULL, "mutually_exclusive_parameters", both);
    assert_rejected(p, "{'previous_response_id':'resp_1','conversation':{'id':'conv_1'},"
                       "'tools':[{'type':'shell','environment':{'type':'container_auto'}}]}",
                    NULL, "mutually_exclusive_parameters", both);
    /* present is enough, whatever its type (the upstream would refuse it) */
    assert_rejected(p, "{'conversation':'conv_1','previous_response_id':7,'tools':["
                       CI_TOOL "]}", NULL, "mutually_exclusive_parameters", both);
    /* not an id */
    assert_rejected(p, "{'conversation':'','tools':[" CI_TOOL "]}", "conversation",
                    "invalid_type", TYPE_ERR("conversation", NOT_AN_ID));
    assert_rejected(p, "{'conversation':'a\\u0000b','tools':[" CI_TOOL "]}", "conversation",
                    "invalid_type", TYPE_ERR("conversation", NOT_AN_ID));
    assert_rejected(p, conversation_of(p, "c", 129), "conversation", "invalid_type",
                    TYPE_ERR("conversation", NOT_AN_ID));
    assert_rejected(p, conversation_of(p, "\xc3\xa9", 129), "conversation", "invalid_type",
                    TYPE_ERR("conversation", NOT_AN_ID));
    assert_rejected(p, "{'conversation':{},'tools':[" CI_TOOL "]}", "conversation.id",
                    "invalid_type", TYPE_ERR("conversation.id", "a string"));
    assert_rejected(p, "{'conversation':{'id':null},'tools':[" CI_TOOL "]}",
                    "conversation.id", "invalid_type", TYPE_ERR("conversation.id", "a string"));
    assert_rejected(p, "{'conversation':{'id':['c']},'tools':[" CI_TOOL "]}",
                    "conversation.id", "invalid_type", TYPE_ERR("conversation.id", "a string"));
    assert_rejected(p, "{'conversation':{'id':''},'tools':[" CI_TOOL "]}",
                    "conversation.id", "invalid_type", TYPE_ERR("conversation.id", NOT_AN_ID));
    /* 128 characters are taken, counted as characters (256 bytes here) */
    assert_int_equal(strlen(INTERCEPT(p, conversation_of(p, "\xc3\xa9", 128))
                                ->conversation_id), 256);
    assert_int_equal(strlen(INTERCEPT(p, conversation_of(p, "c", 128))->conversation_id),
                     128);
    /* without our tools, the upstream's to judge */
    assert_all_pass(p, not_ours);
}

static void test_reject_tool_choice(void **state)
{
    apr_pool_t *p = *state;
    assert_rejected(p, "{'tool_choice':'always','tools':[" CI_TOOL "]}", "tool_choice",
                    "invalid_value",
                    "Invalid value for 'tool_choice': 'always'; expected 'none', "
                    "'auto', 'required' or an object.");
    assert_rejected(p, "{'tool_choice':5,'tools':[" CI_TOOL "]}", "tool_choice",
                    "invalid_type", TYPE_ERR("tool_choice", "a string or an object"));
    assert_rejected(p, "{'tool_choice':{'name':'f'},'tools':[" CI_TOOL "]}",
                    "tool_choice.type", "invalid_type",
                    TYPE_ERR("tool_choice.type", "a string"));
    assert_rejected(p, "{'tool_choice':{'type':'allowed_tools','mode':'auto'},"
                       "'tools':[" CI_TOOL "]}", "tool_choice.tools", "invalid_type",
                    TYPE_ERR("tool_choice.tools", "an array"));
    assert_rejected(p, "{'tool_choice':{'type':'allowed_tools','mode':'auto','tools':"
                       "[{'type':'code_interpreter'},'f']},'tools':[" CI_TOOL "]}",
                    "tool_choice.tools[1]", "invalid_type",
                    TYPE_ERR("tool_choice.tools[1]", "an object"));
}

static void test_reject_input_items(void **state)
{
    apr_pool_t *p = *state;
    char *long_id = apr_palloc(p, 66);
    assert_rejected(p, "{'input':[{'role':'user','content':'x'},'hi'],"
                       "'tools':[" CI_TOOL "]}", "input[1]", "invalid_type",
                    TYPE_ERR("input[1]", "an object"));
    assert_rejected(p, "{'input':[{'role':'user','content':'x'},"
                       "{'type':'code_interpreter_call','id':'ci_1','code':5}],"
                       "'tools':[" CI_TOOL "]}", "input[1].code", "invalid_type",
                    TYPE_ERR("input[1].code", "a string or null"));
    assert_rejected(p, "{'input':[{'type':'code_interpreter_call','code':'x'}],"
                       "'tools':[" CI_TOOL "]}", "input[0].id", "invalid_type",
                    TYPE_ERR("input[0].id", "a string of 1 to 64 characters"));
    assert_rejected(p, "{'input':[{'type':'code_interpreter_call','id':'','code':'x'}],"
                       "'tools':[" CI_TOOL "]}", "input[0].id", "invalid_type",
                    TYPE_ERR("input[0].id", "a string of 1 to 64 characters"));
    memset(long_id, 'a', 65);
    long_id[65] = '\0';
    assert_rejected(p, apr_psprintf(p, "{'input':[{'type':'code_interpreter_call',"
                                       "'id':'%s'}],'tools':[" CI_TOOL "]}", long_id),
                    "input[0].id", "invalid_type",
                    TYPE_ERR("input[0].id", "a string of 1 to 64 characters"));
    long_id[64] = '\0';
    INTERCEPT(p, apr_psprintf(p, "{'input':[{'type':'code_interpreter_call','id':'%s'}],"
                                 "'tools':[" CI_TOOL "]}", long_id));
}

/* ======================================================================== */
/* ci_exec: the NDJSON reader                                               */
/* ======================================================================== */

static const char STREAM[] =
    "{'type':'stdout','text':'a'}\n"
    "{'type':'keepalive'}\n"
    "{'type':'stderr','text':'warn\\n'}\n"
    "not json at all\n"
    "\n"
    "[1,2,3]\n"
    "{'text':'no type'}\n"
    "{'type':'something_new','text':'ignored'}\n"
    "{'type':'number_of_executions','execution_count':1}\r\n"
    "{'type':'stdout','text':'b\\n'}\n"
    "{'type':'result','is_main_result':true,'text':'42'}\n"
    "{'type':'result','is_main_result':false,'png':'iVBORw0KGgo=','text':'<Figure>'}\n"
    "{'type':'error','name':'ValueError','value':'bad',"
    "'traceback':'Traceback (most recent call last):\\nValueError: bad'}\n"
    "{'type':'end_of_execution'}\n";

static const char STREAM_TEXT[] =
    "awarn\nb\n42\nTraceback (most recent call last):\nValueError: bad\n";

static void test_ndjson_whole(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    nd_run(p, STREAM, 4096, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_null(r.failure);
    assert_string_equal(r.text, STREAM_TEXT);
    assert_int_equal(r.text_len, strlen(STREAM_TEXT));
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 1);
    assert_int_equal(r.images->nelts, 1);
    assert_string_equal(APR_ARRAY_IDX(r.images, 0, const char *),
                        "data:image/png;base64,iVBORw0KGgo=");
}

static void test_ndjson_every_split(void **state)
{
    apr_pool_t *p = *state;
    const char *s = J(p, STREAM);
    apr_size_t len = strlen(s), k, step;
    ci_exec_result want;
    nd_run(p, STREAM, 4096, &want);

    /* one cut at every byte boundary */
    for (k = 0; k <= len; k++) {
        apr_pool_t *sub;
        ci_ndjson *nd;
        ci_exec_result got;
        apr_pool_create(&sub, p);
        nd = ci_ndjson_create(sub, 4096, BIG_CAP);
        assert_int_equal(ci_ndjson_feed(nd, s, k), 0);
        assert_int_equal(ci_ndjson_feed(nd, s + k, len - k), 0);
        assert_true(ci_ndjson_ended(nd));
        ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &got);
        assert_same_result(&got, &want);
        apr_pool_destroy(sub);
    }
    /* byte by byte, and in odd-sized pieces */
    for (step = 1; step <= 13; step += 3) {
        apr_pool_t *sub;
        ci_ndjson *nd;
        ci_exec_result got;
        apr_pool_create(&sub, p);
        nd = ci_ndjson_create(sub, 4096, BIG_CAP);
        for (k = 0; k < len; k += step)
            assert_int_equal(ci_ndjson_feed(nd, s + k, len - k < step ? len - k : step), 0);
        ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &got);
        assert_same_result(&got, &want);
        apr_pool_destroy(sub);
    }
}

static void test_ndjson_interleaved(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    nd_run(p, "{'type':'stdout','text':'a'}\n{'type':'stderr','text':'b'}\n"
              "{'type':'stdout','text':'c\\n'}\n{'type':'stderr','text':'d\\n'}\n"
              "{'type':'stdout','text':'e'}\n{'type':'end_of_execution'}\n", 100, &r);
    assert_string_equal(r.text, "abc\nd\ne");
    assert_int_equal(r.text_len, 7);
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 0);
    assert_int_equal(r.images->nelts, 0);
}

static void test_ndjson_result_line(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    /* the last value goes on its own line */
    nd_run(p, "{'type':'stdout','text':'x'}\n"
              "{'type':'result','is_main_result':true,'text':'42'}\n"
              "{'type':'end_of_execution'}\n", 100, &r);
    assert_string_equal(r.text, "x\n42\n");
    nd_run(p, "{'type':'stdout','text':'x\\n'}\n"
              "{'type':'result','is_main_result':true,'text':'42'}\n"
              "{'type':'end_of_execution'}\n", 100, &r);
    assert_string_equal(r.text, "x\n42\n");
    nd_run(p, "{'type':'result','is_main_result':true,'text':'(1, 2)'}\n"
              "{'type':'end_of_execution'}\n", 100, &r);
    assert_string_equal(r.text, "(1, 2)\n");
    assert_int_equal(r.images->nelts, 0);
    assert_int_equal(ci_exec_failed(&r), 0);
}

static void test_ndjson_images(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    nd_run(p, "{'type':'result','png':'iVBORw0KGgo=','text':'<Figure size 640x480>'}\n"
              "{'type':'result','png':'QUJD\\nREVG'}\n"
              "{'type':'result','png':'<script>','text':'not an image'}\n"
              "{'type':'result','png':'','text':'empty png'}\n"
              "{'type':'end_of_execution'}\n", 100, &r);
    assert_int_equal(r.images->nelts, 2);
    assert_string_equal(APR_ARRAY_IDX(r.images, 0, const char *),
                        "data:image/png;base64,iVBORw0KGgo=");
    assert_string_equal(APR_ARRAY_IDX(r.images, 1, const char *),
                        "data:image/png;base64,QUJD\nREVG");
    assert_string_equal(r.text, "not an image\nempty png\n");
    assert_int_equal(ci_exec_failed(&r), 0);
}

static void test_ndjson_errors(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;

    /* an exception is still a completed execution */
    nd_run(p, "{'type':'stdout','text':'partial'}\n"
              "{'type':'error','name':'ZeroDivisionError','value':'division by zero',"
              "'traceback':'Traceback:\\n  1/0\\nZeroDivisionError: division by zero\\n'}\n"
              "{'type':'end_of_execution'}\n", 1000, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_null(r.failure);
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 1);
    assert_string_equal(r.text, "partial\nTraceback:\n  1/0\n"
                                "ZeroDivisionError: division by zero\n");

    /* no traceback: name and value */
    nd_run(p, "{'type':'error','name':'KeyError','value':'x','traceback':''}\n"
              "{'type':'end_of_execution'}\n", 1000, &r);
    assert_string_equal(r.text, "KeyError: x\n");
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 1);
    nd_run(p, "{'type':'error'}\n{'type':'end_of_execution'}\n", 1000, &r);
    assert_string_equal(r.text, "Error\n");
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 1);
    assert_int_equal(ci_exec_failed(&r), 0);

    /* the interpreter died */
    nd_run(p, "{'type':'stdout','text':'x\\n'}\n"
              "{'type':'error','name':'UnexpectedEndOfExecution','value':'killed',"
              "'traceback':''}\n{'type':'end_of_execution'}\n", 1000, &r);
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_str(r.failure, "The interpreter died during the execution.");
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.text, "x\nUnexpectedEndOfExecution: killed\n");
}

static void test_ndjson_cut_and_failure(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    ci_ndjson *nd;
    const char *s;

    /* no end_of_execution: the stream was cut */
    nd_run(p, "{'type':'stdout','text':'half'}\n", 100, &r);
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_str(r.failure, "The sandbox stopped answering: the output stream was cut.");
    assert_string_equal(r.text, "half");
    nd_run(p, "", 100, &r);
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_str(r.failure, "The sandbox stopped answering: the output stream was cut.");
    assert_string_equal(r.text, "");
    assert_int_equal(r.text_len, 0);

    /* the caller's reason wins */
    s = J(p, "{'type':'stdout','text':'x'}\n{'type':'end_of_execution'}\n");
    nd = ci_ndjson_create(p, 100, BIG_CAP);
    assert_int_equal(ci_ndjson_feed(nd, s, strlen(s)), 0);
    ci_ndjson_result(nd, CI_EXEC_TIMED_OUT, "The execution timed out after 30 seconds.", &r);
    assert_int_equal(r.outcome, CI_EXEC_TIMED_OUT);
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_str(r.failure, "The execution timed out after 30 seconds.");
    assert_string_equal(r.text, "x");
}

static void test_ndjson_last_line_without_newline(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    nd_run(p, "{'type':'stdout','text':'x'}\n{'type':'end_of_execution'}", 100, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_null(r.failure);
    assert_string_equal(r.text, "x");
    nd_run(p, "{'type':'stdout','text':'x'}\n{'type':'stdout','text':'y'}", 100, &r);
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_string_equal(r.text, "xy");
    /* lines after the end are not read */
    nd_run(p, "{'type':'stdout','text':'x'}\n{'type':'end_of_execution'}\n"
              "{'type':'stdout','text':'late'}\n{'type':'stdout','text':'later'}", 100, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "x");
}

/* One line holds at most ci_ndjson_line_cap bytes: a line that long is
 * read; one byte more stops the execution with its own message. */
static void test_ndjson_line_cap(void **state)
{
    apr_pool_t *p = *state;
    apr_size_t cap = ci_ndjson_line_cap(100, (apr_size_t)64 << 20), i;
    const char *head = "{\"type\":\"stdout\",\"text\":\"", *tail = "\"}\n";
    const char *end = "{\"type\":\"end_of_execution\"}\n";
    char *chunk = apr_palloc(p, 65536);
    ci_ndjson *nd = ci_ndjson_create(p, 100, (apr_size_t)64 << 20);
    ci_exec_result r;
    apr_size_t body = cap - strlen(head) - (strlen(tail) - 1);   /* its \n not counted */
    assert_int_equal(cap, ((apr_size_t)8 << 20) + 12 * 100);
    assert_int_equal(ci_ndjson_line_cap(100, (apr_size_t)1 << 20), (apr_size_t)1 << 20);
    memset(chunk, 'x', 65536);
    /* a line of exactly the cap is read */
    assert_int_equal(ci_ndjson_feed(nd, head, strlen(head)), 0);
    for (i = 0; i < body; i += 65536)
        assert_int_equal(ci_ndjson_feed(nd, chunk, body - i < 65536 ? body - i : 65536), 0);
    assert_int_equal(ci_ndjson_feed(nd, tail, strlen(tail)), 0);
    assert_int_equal(ci_ndjson_feed(nd, end, strlen(end)), 0);
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r);
    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_str(r.text, apr_psprintf(p, "%s\n[... %" APR_SIZE_T_FMT " more bytes of output "
                                       "were cut ...]\n", apr_pstrmemdup(p, chunk, 100),
                                    body - 100));
    /* one byte more, without a newline: stopped, and nothing more is read */
    ci_ndjson_reset(nd);
    for (i = 0; i < cap; i += 65536)
        assert_int_equal(ci_ndjson_feed(nd, chunk, cap - i < 65536 ? cap - i : 65536), 0);
    assert_int_equal(ci_ndjson_feed(nd, "x", 1), -1);
    assert_int_equal(ci_ndjson_feed(nd, end, strlen(end)), -1);
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r);
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_str(r.failure, apr_psprintf(p, "The execution wrote a line of more than %"
                                          APR_SIZE_T_FMT " bytes to the interpreter's "
                                          "output channel and was stopped.", cap));
}

static void test_ndjson_ready_and_reset(void **state)
{
    apr_pool_t *p = *state;
    ci_ndjson *nd = ci_ndjson_create(p, 100, BIG_CAP);
    ci_exec_result r, r1;
    const char *s = J(p, "{'type':'ready'}\n");
    assert_false(ci_ndjson_ready(nd));
    assert_int_equal(ci_ndjson_feed(nd, s, strlen(s)), 0);
    assert_true(ci_ndjson_ready(nd));
    assert_false(ci_ndjson_ended(nd));

    s = J(p, "{'type':'stdout','text':'one'}\n{'type':'result','png':'AAAA'}\n"
             "{'type':'error','name':'E','value':'v'}\n{'type':'end_of_execution'}\n"
             "{'type':'stdout','text':'par");
    assert_int_equal(ci_ndjson_feed(nd, s, strlen(s)), 0);
    assert_true(ci_ndjson_ended(nd));
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r1);
    assert_int_equal(ci_exec_failed(&r1), 0);
    assert_string_equal(r1.text, "one\nE: v\n");
    assert_int_equal(r1.outcome == CI_EXEC_ERROR, 1);
    assert_int_equal(r1.images->nelts, 1);

    ci_ndjson_reset(nd);
    assert_false(ci_ndjson_ended(nd));
    assert_false(ci_ndjson_ready(nd));
    s = J(p, "{'type':'stdout','text':'two'}\n{'type':'end_of_execution'}\n");
    assert_int_equal(ci_ndjson_feed(nd, s, strlen(s)), 0);
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "two");
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 0);
    assert_int_equal(r.images->nelts, 0);
    /* the first result is not disturbed */
    assert_string_equal(r1.text, "one\nE: v\n");
    assert_int_equal(r1.images->nelts, 1);
}

static void test_ndjson_hard_cap(void **state)
{
    apr_pool_t *p = *state;
    const char *line = J(p, "{'type':'stdout','text':'aaaa'}\n");
    apr_size_t l1 = strlen(line);
    ci_ndjson *nd = ci_ndjson_create(p, 100, l1 + 5);
    ci_exec_result r;
    assert_int_equal(ci_ndjson_feed(nd, line, l1), 0);
    assert_int_equal(ci_ndjson_feed(nd, "{\"typ", 5), 0);     /* exactly the cap */
    assert_int_equal(ci_ndjson_feed(nd, "e", 1), -1);         /* one past it */
    assert_int_equal(ci_ndjson_feed(nd, "\n", 1), -1);        /* and stays over */
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r);
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_str(r.failure, "The execution produced more output than the sandbox "
                          "accepts and was stopped.");
    assert_string_equal(r.text, "aaaa");

    /* a long line grows the buffer until the cap */
    nd = ci_ndjson_create(p, 100, 10000);
    {
        char chunk[1000];
        int i, rc = 0;
        memset(chunk, 'x', sizeof(chunk));
        assert_int_equal(ci_ndjson_feed(nd, "{\"type\":\"stdout\",\"text\":\"", 25), 0);
        for (i = 0; i < 20 && rc == 0; i++)
            rc = ci_ndjson_feed(nd, chunk, sizeof(chunk));
        assert_int_equal(rc, -1);
        assert_int_equal(i, 10);   /* 25 + 10 * 1000 > 10000 */
    }
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r);
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_string_equal(r.text, "");
}

static const ci_command_result *command_at(const ci_exec_result *r, int i)
{
    return &APR_ARRAY_IDX(r->commands, i, ci_command_result);
}

static void test_ndjson_commands(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    nd_run(p, "{'type':'command','stdout':'a\\n','stderr':'','exit_code':0}\n"
              "{'type':'command','stdout':'','stderr':'no\\u0000pe \xff\\n','exit_code':137}\n"
              "{'type':'command','stdout':'x','stderr':'y','timeout':true}\n"
              "{'type':'files','changed':['out.txt']}\n"
              "{'type':'end_of_execution'}\n", 100, &r);
    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_null(r.failure);
    assert_string_equal(r.text, "");
    assert_int_equal(r.commands->nelts, 3);
    assert_string_equal(command_at(&r, 0)->stdout_text, "a\n");
    assert_string_equal(command_at(&r, 0)->stderr_text, "");
    assert_int_equal(command_at(&r, 0)->exit_code, 0);
    assert_int_equal(command_at(&r, 0)->timed_out, 0);
    /* NUL and invalid UTF-8 as U+FFFD, as everywhere */
    assert_string_equal(command_at(&r, 1)->stderr_text,
                        "no\xEF\xBF\xBDpe \xEF\xBF\xBD\n");
    assert_int_equal(command_at(&r, 1)->exit_code, 137);
    assert_int_equal(command_at(&r, 1)->timed_out, 0);
    assert_string_equal(command_at(&r, 2)->stdout_text, "x");
    assert_string_equal(command_at(&r, 2)->stderr_text, "y");
    assert_int_equal(command_at(&r, 2)->timed_out, 1);
    assert_int_equal(r.files->nelts, 1);
    assert_string_equal(APR_ARRAY_IDX(r.files, 0, const char *), "out.txt");

    /* code's results have none */
    nd_run(p, "{'type':'stdout','text':'hi'}\n{'type':'end_of_execution'}\n", 100, &r);
    assert_null(r.commands);
    assert_string_equal(r.text, "hi");
}

static void test_ndjson_malformed_command_is_a_protocol_error(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bad[] = {
        "{'type':'command','stdout':'','exit_code':0}",
        "{'type':'command','stderr':'','exit_code':0}",
        "{'type':'command','stdout':1,'stderr':'','exit_code':0}",
        "{'type':'command','stdout':'','stderr':''}",
        "{'type':'command','stdout':'','stderr':'','exit_code':'0'}",
        "{'type':'command','stdout':'','stderr':'','exit_code':256}",
        "{'type':'command','stdout':'','stderr':'','exit_code':-1}",
        "{'type':'command','stdout':'','stderr':'','timeout':false}",
        "{'type':'command','stdout':'','stderr':'','timeout':1}",
        "{'type':'command','stdout':'','stderr':'','exit_code':0,'timeout':true}",
    };
    size_t i;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ci_exec_result r;
        nd_run(p, apr_pstrcat(p, "{'type':'command','stdout':'ok','stderr':'','exit_code':0}\n",
                              bad[i], "\n{'type':'end_of_execution'}\n", NULL), 100, &r);
        assert_int_equal(r.outcome, CI_EXEC_LOST);
        assert_str(r.failure, "The sandbox's answer broke its line protocol (a "
                              "malformed command result).");
        /* what came before it is still there */
        assert_int_equal(r.commands->nelts, 1);
        assert_string_equal(command_at(&r, 0)->stdout_text, "ok");
    }
}

static void test_ndjson_commands_count_against_the_hard_cap(void **state)
{
    apr_pool_t *p = *state;
    const char *line = J(p, "{'type':'command','stdout':'aaaa','stderr':'','exit_code':0}\n");
    apr_size_t l1 = strlen(line);
    ci_ndjson *nd = ci_ndjson_create(p, 100, 2 * l1 - 1);
    ci_exec_result r;
    assert_int_equal(ci_ndjson_feed(nd, line, l1), 0);
    assert_int_equal(ci_ndjson_feed(nd, line, l1), -1);      /* one byte past it */
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r);
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_str(r.failure, "The execution produced more output than the sandbox "
                          "accepts and was stopped.");
    assert_int_equal(r.commands->nelts, 1);
}

static void test_ndjson_long_line(void **state)
{
    apr_pool_t *p = *state;
    ci_ndjson *nd = ci_ndjson_create(p, 20000, BIG_CAP);
    ci_exec_result r;
    char chunk[1000];
    int i;
    memset(chunk, 'y', sizeof(chunk));
    assert_int_equal(ci_ndjson_feed(nd, "{\"type\":\"stdout\",\"text\":\"", 25), 0);
    for (i = 0; i < 10; i++)
        assert_int_equal(ci_ndjson_feed(nd, chunk, sizeof(chunk)), 0);
    assert_int_equal(ci_ndjson_feed(nd, "\"}\n{\"type\":\"end_of_execution\"}\n", 31), 0);
    ci_ndjson_result(nd, CI_EXEC_COMPLETED, NULL, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_int_equal(r.text_len, 10000);
    assert_int_equal(strspn(r.text, "y"), 10000);
}

static void test_ndjson_truncation(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;

    nd_run(p, "{'type':'stdout','text':'0123456789ABCDEF'}\n"
              "{'type':'end_of_execution'}\n", 10, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "0123456789\n[... 6 more bytes of output were cut ...]\n");
    assert_int_equal(r.text_len, strlen(r.text));

    /* across lines */
    nd_run(p, "{'type':'stdout','text':'01234'}\n{'type':'stderr','text':'56789AB'}\n"
              "{'type':'stdout','text':'CDE\\n'}\n{'type':'end_of_execution'}\n", 10, &r);
    assert_string_equal(r.text, "0123456789\n[... 6 more bytes of output were cut ...]\n");

    /* exactly full: no marker */
    nd_run(p, "{'type':'stdout','text':'0123456789'}\n{'type':'end_of_execution'}\n",
           10, &r);
    assert_string_equal(r.text, "0123456789");

    /* a cut ending in a newline gets no extra one */
    nd_run(p, "{'type':'stdout','text':'012345678\\n9'}\n{'type':'end_of_execution'}\n",
           10, &r);
    assert_string_equal(r.text, "012345678\n[... 1 more bytes of output were cut ...]\n");

    /* a cut traceback still marks the code as raised */
    nd_run(p, "{'type':'error','name':'E','value':'v','traceback':'0123456789XYZ'}\n"
              "{'type':'end_of_execution'}\n", 10, &r);
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 1);
    assert_string_equal(r.text, "0123456789\n[... 4 more bytes of output were cut ...]\n");
}

static void test_ndjson_truncation_utf8(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    /* 9 + 2 bytes: the 2-byte character does not fit whole */
    nd_run(p, "{'type':'stdout','text':'aaaaaaaaa\xc3\xa9'}\n{'type':'end_of_execution'}\n",
           10, &r);
    assert_string_equal(r.text, "aaaaaaaaa\n[... 2 more bytes of output were cut ...]\n");
    /* 7 + 4 bytes */
    nd_run(p, "{'type':'stdout','text':'aaaaaaa\xf0\x9f\x98\x80'}\n"
              "{'type':'end_of_execution'}\n", 10, &r);
    assert_string_equal(r.text, "aaaaaaa\n[... 4 more bytes of output were cut ...]\n");
    /* 8 + 3 bytes */
    nd_run(p, "{'type':'stdout','text':'aaaaaaaa\xe2\x82\xac'}\n"
              "{'type':'end_of_execution'}\n", 10, &r);
    assert_string_equal(r.text, "aaaaaaaa\n[... 3 more bytes of output were cut ...]\n");
}

/* BUG: once output was cut short of the cap at a UTF-8 boundary, later,
 * shorter text still fits in the room left and is appended after the gap: the
 * model sees "aaaaaaaaab" although "\xc3\xa9" came before "b". Everything
 * after the first cut must count as cut. */
static void test_ndjson_truncation_order_bug(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    nd_run(p, "{'type':'stdout','text':'aaaaaaaaa\xc3\xa9'}\n"
              "{'type':'stdout','text':'b'}\n{'type':'end_of_execution'}\n", 10, &r);
    assert_string_equal(r.text, "aaaaaaaaa\n[... 3 more bytes of output were cut ...]\n");
}

static void test_ndjson_dropped(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result r;
    nd_run(p, "{'type':'stdout','text':'abc'}\n{'type':'dropped','bytes':500}\n"
              "{'type':'end_of_execution'}\n", 100, &r);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "abc\n[... 500 more bytes of output were cut ...]\n");
    /* added to what the reader cut itself */
    nd_run(p, "{'type':'stdout','text':'abcdefgh'}\n{'type':'dropped','bytes':10}\n"
              "{'type':'end_of_execution'}\n", 5, &r);
    assert_string_equal(r.text, "abcde\n[... 13 more bytes of output were cut ...]\n");
    /* nonsense counts are ignored */
    nd_run(p, "{'type':'stdout','text':'abc'}\n{'type':'dropped','bytes':0}\n"
              "{'type':'dropped','bytes':-5}\n{'type':'dropped','bytes':'7'}\n"
              "{'type':'dropped'}\n{'type':'end_of_execution'}\n", 100, &r);
    assert_string_equal(r.text, "abc");
    /* nothing kept at all */
    nd_run(p, "{'type':'dropped','bytes':42}\n{'type':'end_of_execution'}\n", 100, &r);
    assert_string_equal(r.text, "[... 42 more bytes of output were cut ...]\n");
}

static void test_capped_append(void **state)
{
    static const char t[] = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac" "100 \xf0\x9f\x98\x80!";
    apr_size_t n = sizeof(t) - 1, cap;
    char buf[64];

    for (cap = 0; cap <= n + 1; cap++) {
        apr_size_t used = 0, dropped = 0, want = cap < n ? cap : n;
        while (want < n && want > 0 && ((unsigned char)t[want] & 0xC0) == 0x80)
            want--;
        memset(buf, 0, sizeof(buf));
        ci_capped_append(buf, &used, cap, t, n, &dropped);
        assert_int_equal(used, want);
        assert_int_equal(used + dropped, n);
        assert_memory_equal(buf, t, used);
        assert_true(utf8_valid((const unsigned char *)buf, used));
        assert_int_equal(buf[used], 0);   /* nothing written past USED */
    }
    /* appending to what is there, and counting on */
    {
        apr_size_t used = 0, dropped = 3;
        ci_capped_append(buf, &used, 6, "abcd", 4, &dropped);
        ci_capped_append(buf, &used, 6, "ef\xc3\xa9", 4, &dropped);
        assert_int_equal(used, 6);
        assert_int_equal(dropped, 5);
        assert_memory_equal(buf, "abcdef", 6);
    }
}

static void test_exec_model_text(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result *r;

    r = RES_OK(p, "");
    assert_string_equal(ci_exec_model_text(p, r), "(no output)");
    r->text = NULL;
    assert_string_equal(ci_exec_model_text(p, r), "(no output)");
    r = RES_OK(p, "4\n");
    assert_string_equal(ci_exec_model_text(p, r), "4\n");

    r = RES_OK(p, "");
    res_add_image(r, "data:image/png;base64,AAAA");
    assert_string_equal(ci_exec_model_text(p, r),
                        "[a PNG figure was created and is shown to the user]\n");
    r = RES_OK(p, "x\n");
    res_add_image(r, "data:image/png;base64,AAAA");
    res_add_image(r, "data:image/png;base64,BBBB");
    assert_string_equal(ci_exec_model_text(p, r),
                        "x\n[a PNG figure was created and is shown to the user]\n"
                        "[a PNG figure was created and is shown to the user]\n");

    r = res_new(p, CI_EXEC_TIMED_OUT, "partial",
                "The sandbox stopped answering: the output stream was cut.");
    assert_string_equal(ci_exec_model_text(p, r),
                        "partial\nThe sandbox stopped answering: the output stream was "
                        "cut. The interpreter was restarted: variables, imports and "
                        "files from earlier calls are gone.");
    r = res_new(p, CI_EXEC_TIMED_OUT, "", "The execution timed out after 30 seconds.");
    assert_string_equal(ci_exec_model_text(p, r),
                        "The execution timed out after 30 seconds. The interpreter was "
                        "restarted: variables, imports and files from earlier calls "
                        "are gone.");
}

/* BUG: output that does not end in a newline runs into the figure note:
 * the model reads "done[a PNG figure ...". The note belongs on its own line. */
static void test_exec_model_text_image_line_bug(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result *r = RES_OK(p, "done");
    res_add_image(r, "data:image/png;base64,AAAA");
    assert_string_equal(ci_exec_model_text(p, r),
                        "done\n[a PNG figure was created and is shown to the user]\n");
}

/* ======================================================================== */
/* ci_loop                                                                  */
/* ======================================================================== */

#define BASIC "{'model':'m','input':'hi','tools':[" CI_TOOL "]}"
#define REASONING(id) "{'type':'reasoning','id':'" id "','summary':[],'encrypted_content':'enc_" id "'}"
#define MESSAGE(id, text) "{'type':'message','id':'" id "','role':'assistant','status':'completed'," \
    "'content':[{'type':'output_text','text':'" text "','annotations':[]}]}"

static void assert_call_item_(ci_call *c, const char *status, const char *code,
                              const char *file, int line)
{
    static const char *const keys[] = {"id", "type", "status", "code",
                                       "container_id", "outputs", NULL};
    keys_are_(c->item, keys, file, line);
    str_eq_(ci_json_str(c->item, "id"), c->item_id, file, line);
    _assert_true(is_hex_id(c->item_id, "ci_", 48), "id is ci_ + 48 hex", file, line);
    str_eq_(ci_json_str(c->item, "type"), "code_interpreter_call", file, line);
    str_eq_(ci_json_str(c->item, "status"), status, file, line);
    str_eq_(ci_json_str(c->item, "code"), code, file, line);
    str_eq_(ci_json_str(c->item, "container_id"), "cntr_test", file, line);
}
#define assert_call_item(c, status, code) \
    assert_call_item_((c), (status), (code), __FILE__, __LINE__)

static json_object *outputs_of(ci_call *c)
{
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(c->item, "outputs", &v));
    return v;
}

static void test_loop_one_round(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;
    ci_loop *l = loop_for(p, BASIC, 5, &req);
    json_object *r = resp_new(p, "resp_1"), *reasoning, *fc, *body, *in;
    const apr_array_header_t *items;
    ci_exec_result *res;
    ci_call *c;
    char *text;

    reasoning = add_item(p, r, REASONING("rs_1"));
    fc = add_call(r, "call_1", "python", "print(1)");
    add_item(p, r, "'not an item'");   /* anything not an object is skipped */
    add_item(p, r, "7");
    assert_int_equal(ci_loop_rounds(l), 0);
    TAKE(l, p, r);
    assert_int_equal(ci_loop_rounds(l), 1);
    assert_int_equal(ci_loop_executions(l), 0);
    assert_false(ci_loop_round_has_client_calls(l));

    assert_int_equal(ci_loop_round_calls(l)->nelts, 1);
    c = round_call(l, 0);
    assert_str(c->call_id, "call_1");
    assert_str(c->code, "print(1)");
    assert_null(c->arguments_error);
    assert_int_equal(c->round, 1);
    assert_int_equal(c->output_index, 1);
    assert_int_equal(c->executed, 0);
    assert_null(c->result);
    assert_call_item(c, "in_progress", "print(1)");
    assert_null(outputs_of(c));

    items = ci_loop_round_items(l);
    assert_int_equal(items->nelts, 2);
    assert_null(APR_ARRAY_IDX(items, 0, ci_round_item).call);
    assert_int_equal(APR_ARRAY_IDX(items, 0, ci_round_item).output_index, 0);
    assert_json_same(APR_ARRAY_IDX(items, 0, ci_round_item).item, reasoning);
    assert_ptr_equal(APR_ARRAY_IDX(items, 1, ci_round_item).call, c);
    assert_ptr_equal(APR_ARRAY_IDX(items, 1, ci_round_item).item, c->item);
    assert_int_equal(APR_ARRAY_IDX(items, 1, ci_round_item).output_index, 1);

    /* the result is copied */
    text = apr_pstrdup(p, "1\n");
    res = RES_OK(p, text);
    assert_true(ci_loop_may_execute(l, c));
    ci_loop_record(l, c, res);
    text[0] = 'X';
    assert_int_equal(c->executed, 1);
    assert_int_equal(ci_loop_executions(l), 1);
    assert_non_null(c->result);
    assert_ptr_not_equal(c->result, res);
    assert_string_equal(c->result->text, "1\n");
    assert_call_item(c, "completed", "print(1)");
    assert_null(outputs_of(c));       /* include did not ask for them */

    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
    body = followup(l, p, CI_NEXT_FOLLOWUP);
    in = member(body, "input");
    assert_int_equal(json_object_array_length(in), 4);
    assert_json(p, idx(in, 0), "{'role':'user','content':'hi'}");
    assert_json_same(idx(in, 1), reasoning);
    assert_json_same(idx(in, 2), fc);
    assert_json(p, idx(in, 3), "{'type':'function_call_output','call_id':'call_1',"
                               "'output':'1\\n'}");
    assert_false(has_key(body, "tool_choice"));
    assert_json(p, member(body, "stream"), "false");
    assert_json(p, member(body, "model"), "'m'");
    assert_json_same(member(body, "tools"), root_tools(req));

    /* the response holds the two items */
    assert_int_equal(json_object_array_length(member(ci_loop_response(l), "output")), 2);
}

static void test_loop_outputs_included(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, "{'input':'hi','include':['code_interpreter_call.outputs'],"
                             "'tools':[" CI_TOOL "]}", 5, NULL);
    json_object *r = resp_new(p, "resp_1"), *in;
    ci_exec_result *res[6];
    int i;

    for (i = 0; i < 6; i++)
        add_call(r, apr_psprintf(p, "call_%d", i), "python", apr_psprintf(p, "c%d", i));
    TAKE(l, p, r);
    res[0] = RES_OK(p, "1\n");
    res[1] = RES_OK(p, "");
    res[2] = RES_OK(p, "");
    res_add_image(res[2], "data:image/png;base64,AAAA");
    res[3] = RES_OK(p, "fig\n");
    res_add_image(res[3], "data:image/png;base64,AAAA");
    res_add_image(res[3], "data:image/png;base64,BBBB");
    res[4] = res_new(p, CI_EXEC_TIMED_OUT, "partial", "Timed out.");
    res[5] = res_new(p, CI_EXEC_TIMED_OUT, "", "Timed out.");
    for (i = 0; i < 6; i++) {
        assert_true(ci_loop_may_execute(l, round_call(l, i)));
        ci_loop_record(l, round_call(l, i), res[i]);
    }
    assert_call_item(round_call(l, 0), "completed", "c0");
    assert_json(p, outputs_of(round_call(l, 0)), "[{'type':'logs','logs':'1\\n'}]");
    assert_json(p, outputs_of(round_call(l, 1)), "[]");
    assert_json(p, outputs_of(round_call(l, 2)),
                "[{'type':'image','url':'data:image/png;base64,AAAA'}]");
    assert_json(p, outputs_of(round_call(l, 3)),
                "[{'type':'logs','logs':'fig\\n'},"
                "{'type':'image','url':'data:image/png;base64,AAAA'},"
                "{'type':'image','url':'data:image/png;base64,BBBB'}]");
    assert_call_item(round_call(l, 4), "completed", "c4");
    assert_json(p, outputs_of(round_call(l, 4)),
                "[{'type':'logs','logs':'partial\\nTimed out.'}]");
    assert_call_item(round_call(l, 5), "completed", "c5");
    assert_json(p, outputs_of(round_call(l, 5)), "[{'type':'logs','logs':'Timed out.'}]");
    assert_int_equal(ci_loop_executions(l), 6);

    /* what the model is told */
    in = member(followup(l, p, ci_loop_next(l)), "input");
    assert_int_equal(json_object_array_length(in), 1 + 6 + 6);
    for (i = 0; i < 6; i++) {
        json_object *o = idx(in, 7 + i);
        assert_str(ci_json_str(o, "type"), "function_call_output");
        assert_str(ci_json_str(o, "call_id"), apr_psprintf(p, "call_%d", i));
        assert_str(ci_json_str(o, "output"), ci_exec_model_text(p, res[i]));
    }
}

static void followup_choice_(apr_pool_t *p, const char *choice_sq,
                             const char *want_sq, const char *file, int line)
{
    ci_request *req = intercept_(p, apr_psprintf(p, "{'input':'hi','tools':[" F_TOOL
                                    "," CI_TOOL "]%s%s}", choice_sq ? ",'tool_choice':" : "",
                                    choice_sq ? choice_sq : ""), NULL, file, line);
    ci_loop *l = ci_loop_create(p, req, 5, "cntr_test");
    json_object *r = resp_new(p, "resp_1"), *body, *got = NULL;
    const char *before = root_text(p, req);
    add_call(r, "call_1", "python", "1");
    take_(l, p, r, file, line);
    run_round(l, RES_OK(p, "1\n"));
    _assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP, file, line);
    body = followup(l, p, CI_NEXT_FOLLOWUP);
    if (!want_sq)
        _assert_true(!has_key(body, "tool_choice"), "no tool_choice", file, line);
    else {
        _assert_true(json_object_object_get_ex(body, "tool_choice", &got),
                     "tool_choice", file, line);
        json_eq_(p, got, want_sq, file, line);
    }
    str_eq_(root_text(p, req), before, file, line);
}
#define followup_choice_case(p, choice, want) \
    followup_choice_((p), (choice), (want), __FILE__, __LINE__)

static void test_loop_followup_tool_choice(void **state)
{
    apr_pool_t *p = *state;
    followup_choice_case(p, NULL, NULL);
    followup_choice_case(p, "'auto'", "'auto'");
    followup_choice_case(p, "'none'", "'none'");
    followup_choice_case(p, "'required'", "'auto'");
    followup_choice_case(p, "{'type':'code_interpreter'}", "'auto'");
    followup_choice_case(p, "{'type':'function','name':'python'}", "'auto'");
    followup_choice_case(p, "{'type':'function','name':'f'}", "'auto'");
    followup_choice_case(p, "{'type':'allowed_tools','mode':'required','tools':["
                            "{'type':'code_interpreter'},{'type':'function','name':'f'}]}",
                         "{'type':'allowed_tools','mode':'auto','tools':["
                         "{'type':'function','name':'python'},{'type':'function','name':'f'}]}");
    followup_choice_case(p, "{'type':'allowed_tools','mode':'auto','tools':["
                            "{'type':'code_interpreter'}]}",
                         "{'type':'allowed_tools','mode':'auto','tools':["
                         "{'type':'function','name':'python'}]}");
}

static void test_loop_final(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;
    ci_loop *l = loop_for(p, "{'input':'hi','tool_choice':'required','include':["
                             "'code_interpreter_call.outputs'],'tools':[" CI_TOOL "]}",
                          1, &req);
    json_object *r = resp_new(p, "resp_1"), *body, *out;
    const char *before = root_text(p, req);
    ci_call *c1, *c2;

    add_call(r, "call_1", "python", "1");
    TAKE(l, p, r);
    c1 = round_call(l, 0);
    run_round(l, RES_OK(p, "1\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FINAL);
    body = followup(l, p, CI_NEXT_FINAL);
    assert_json(p, member(body, "tool_choice"), "'none'");
    assert_json_same(member(body, "tools"), root_tools(req));
    assert_str(root_text(p, req), before);

    /* the model calls anyway: not run */
    r = resp_new(p, "resp_2");
    add_call(r, "call_2", "python", "2");
    add_item(p, r, MESSAGE("msg_1", "done"));
    TAKE(l, p, r);
    c2 = round_call(l, 0);
    assert_int_equal(c2->round, 2);
    assert_false(ci_loop_may_execute(l, c2));
    assert_int_equal(c2->executed, 0);
    assert_int_equal(ci_loop_executions(l), 1);
    assert_call_item(c2, "completed", "2");
    assert_json(p, outputs_of(c2), "[{'type':'logs','logs':'Not run: this response "
                                   "reached its limit of code executions.'}]");
    assert_int_equal(ci_loop_next(l), CI_NEXT_DONE);

    out = member(ci_loop_response(l), "output");
    assert_int_equal(json_object_array_length(out), 3);
    assert_ptr_equal(idx(out, 0), c1->item);
    assert_ptr_equal(idx(out, 1), c2->item);
    assert_str(ci_json_str(idx(out, 0), "status"), "completed");
    assert_str(ci_json_str(idx(out, 1), "status"), "completed");
    assert_json(p, idx(out, 2), MESSAGE("msg_1", "done"));
    assert_json(p, member(ci_loop_response(l), "tool_choice"), "'required'");
}

static void test_loop_final_text_only(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;
    ci_loop *l = loop_for(p, BASIC, 1, &req);
    json_object *r = resp_new(p, "resp_1");
    const char *before = root_text(p, req);
    add_call(r, "call_1", "python", "1");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "1\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FINAL);
    assert_json(p, member(followup(l, p, CI_NEXT_FINAL), "tool_choice"), "'none'");
    /* tool_choice was absent: it is absent again */
    assert_str(root_text(p, req), before);
    assert_false(has_key(req->root, "tool_choice"));
    r = resp_new(p, "resp_2");
    add_item(p, r, MESSAGE("msg_1", "the answer"));
    TAKE(l, p, r);
    assert_int_equal(ci_loop_round_calls(l)->nelts, 0);
    assert_int_equal(ci_loop_next(l), CI_NEXT_DONE);
}

static void test_loop_conversation(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, "{'input':'hi','conversation':'conv_1','tools':[" CI_TOOL "]}",
                          5, NULL);
    json_object *r = resp_new(p, "resp_1");
    add_item(p, r, REASONING("rs_1"));
    add_call(r, "call_1", "python", "1");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "one\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
    assert_json(p, member(followup(l, p, CI_NEXT_FOLLOWUP), "input"),
                "[{'type':'function_call_output','call_id':'call_1','output':'one\\n'}]");

    r = resp_new(p, "resp_2");
    add_call(r, "call_2", "python", "2");
    add_call(r, "call_3", "python", "3");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "two\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
    assert_json(p, member(followup(l, p, CI_NEXT_FOLLOWUP), "input"),
                "[{'type':'function_call_output','call_id':'call_2','output':'two\\n'},"
                "{'type':'function_call_output','call_id':'call_3','output':'two\\n'}]");
}

static void test_loop_max_rounds(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, BASIC, 3, NULL);
    int round;
    for (round = 1; round <= 3; round++) {
        json_object *r = resp_new(p, apr_psprintf(p, "resp_%d", round));
        add_call(r, apr_psprintf(p, "call_%d", round), "python", "1");
        TAKE(l, p, r);
        run_round(l, RES_OK(p, "1\n"));
        assert_int_equal(round_call(l, 0)->executed, 1);
        assert_int_equal(ci_loop_next(l), round < 3 ? CI_NEXT_FOLLOWUP : CI_NEXT_FINAL);
        followup(l, p, ci_loop_next(l));
    }
    assert_int_equal(ci_loop_rounds(l), 3);
    assert_int_equal(ci_loop_executions(l), 3);

    /* fewer than one round is one round */
    l = loop_for(p, BASIC, 0, NULL);
    {
        json_object *r = resp_new(p, "resp_1");
        add_call(r, "call_1", "python", "1");
        TAKE(l, p, r);
        run_round(l, RES_OK(p, "1\n"));
        assert_int_equal(ci_loop_next(l), CI_NEXT_FINAL);
    }
}

static void test_loop_max_tool_calls(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, "{'input':'hi','max_tool_calls':2,'include':["
                             "'code_interpreter_call.outputs'],'tools':[" CI_TOOL "]}",
                          10, NULL);
    json_object *r = resp_new(p, "resp_1"), *in;
    ci_call *c3;
    add_call(r, "call_1", "python", "1");
    add_call(r, "call_2", "python", "2");
    add_call(r, "call_3", "python", "3");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "ok\n"));
    assert_int_equal(ci_loop_executions(l), 2);
    assert_int_equal(round_call(l, 0)->executed, 1);
    assert_int_equal(round_call(l, 1)->executed, 1);
    c3 = round_call(l, 2);
    assert_int_equal(c3->executed, 0);
    assert_call_item(c3, "completed", "3");
    assert_json(p, outputs_of(c3), "[{'type':'logs','logs':'Not run: the request\\u0027s "
                                   "max_tool_calls limit was reached.'}]");
    assert_int_equal(ci_loop_next(l), CI_NEXT_FINAL);
    in = member(followup(l, p, CI_NEXT_FINAL), "input");
    assert_int_equal(json_object_array_length(in), 1 + 3 + 3);
    assert_str(ci_json_str(idx(in, 6), "call_id"), "call_3");
    assert_str(ci_json_str(idx(in, 6), "output"),
               "Not run: the request's max_tool_calls limit was reached.");

    /* the budget spans rounds */
    l = loop_for(p, "{'input':'hi','max_tool_calls':1,'tools':[" CI_TOOL "]}", 10, NULL);
    r = resp_new(p, "resp_1");
    add_call(r, "call_1", "python", "1");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "ok\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FINAL);
}

static void test_loop_invalid_arguments(void **state)
{
    apr_pool_t *p = *state;
    static const char why[] = "The arguments were not a JSON object with a string "
                              "field \"code\"; nothing was run.";
    ci_loop *l = loop_for(p, BASIC, 5, NULL);
    json_object *r = resp_new(p, "resp_1"), *in;
    int i;
    add_call_args(r, "call_1", "python", "print(1)");
    add_call_args(r, "call_2", "python", "{\"code\":5}");
    add_call_args(r, "call_3", "python", "{\"cmd\":\"ls\"}");
    add_call(r, "call_4", "python", "4");
    TAKE(l, p, r);
    for (i = 0; i < 3; i++) {
        ci_call *c = round_call(l, i);
        assert_null(c->code);
        assert_str(c->arguments_error, why);
        assert_false(ci_loop_may_execute(l, c));
        assert_int_equal(c->executed, 0);
    }
    /* the client sees what the model sent */
    assert_call_item(round_call(l, 0), "completed", "print(1)");
    assert_call_item(round_call(l, 1), "completed", "{\"code\":5}");
    assert_call_item(round_call(l, 2), "completed", "{\"cmd\":\"ls\"}");
    assert_null(outputs_of(round_call(l, 0)));
    assert_true(ci_loop_may_execute(l, round_call(l, 3)));
    ci_loop_record(l, round_call(l, 3), RES_OK(p, "4\n"));
    assert_int_equal(ci_loop_executions(l), 1);
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);

    in = member(followup(l, p, CI_NEXT_FOLLOWUP), "input");
    assert_int_equal(json_object_array_length(in), 1 + 4 + 4);
    for (i = 0; i < 3; i++) {
        assert_str(ci_json_str(idx(in, 5 + i), "call_id"), apr_psprintf(p, "call_%d", i + 1));
        assert_str(ci_json_str(idx(in, 5 + i), "output"), why);
    }
    assert_str(ci_json_str(idx(in, 8), "output"), "4\n");

    /* only refused calls: the model is told and asked again */
    l = loop_for(p, BASIC, 5, NULL);
    r = resp_new(p, "resp_1");
    add_call_args(r, "call_1", "python", "");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "never\n"));
    assert_int_equal(ci_loop_executions(l), 0);
    assert_call_item(round_call(l, 0), "completed", "");
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
}

static void test_loop_client_call(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, "{'input':'hi','tools':[" F_TOOL "," CI_TOOL "]}", 5, NULL);
    json_object *r = resp_new(p, "resp_1"), *client, *out;
    const apr_array_header_t *items;
    add_call(r, "call_1", "python", "1");
    client = add_call_args(r, "call_2", "f", "{\"x\":1}");
    TAKE(l, p, r);
    assert_true(ci_loop_round_has_client_calls(l));
    assert_int_equal(ci_loop_round_calls(l)->nelts, 1);
    items = ci_loop_round_items(l);
    assert_int_equal(items->nelts, 2);
    assert_null(APR_ARRAY_IDX(items, 1, ci_round_item).call);
    run_round(l, RES_OK(p, "1\n"));
    assert_int_equal(round_call(l, 0)->executed, 1);
    assert_call_item(round_call(l, 0), "completed", "1");
    assert_int_equal(ci_loop_next(l), CI_NEXT_DONE);

    out = member(ci_loop_response(l), "output");
    assert_int_equal(json_object_array_length(out), 2);
    assert_str(ci_json_str(idx(out, 0), "type"), "code_interpreter_call");
    assert_json_same(idx(out, 1), client);

    /* the flag is per round */
    l = loop_for(p, "{'input':'hi','tools':[" F_TOOL "," CI_TOOL "]}", 5, NULL);
    r = resp_new(p, "resp_1");
    add_call_args(r, "call_2", "f", "{}");
    TAKE(l, p, r);
    assert_true(ci_loop_round_has_client_calls(l));
    assert_int_equal(ci_loop_next(l), CI_NEXT_DONE);
    r = resp_new(p, "resp_2");
    add_call(r, "call_3", "python", "1");
    TAKE(l, p, r);
    assert_false(ci_loop_round_has_client_calls(l));
}

static void test_loop_rounds_assembled(void **state)
{
    apr_pool_t *p = *state;
    static const char tools[] = "[" F_TOOL "," CI_TOOL "]";
    ci_request *req;
    ci_loop *l = loop_for(p, apr_pstrcat(p, "{'model':'m','input':'hi','tools':", tools,
                                         ",'tool_choice':{'type':'code_interpreter'},"
                                         "'include':['code_interpreter_call.outputs']}",
                                         NULL), 5, &req);
    json_object *r1 = resp_new(p, "resp_1"), *r2 = resp_new(p, "resp_2");
    json_object *r3 = resp_new(p, "resp_3"), *body, *in, *resp, *out;
    ci_call *c1, *c2;

    add_item(p, r1, REASONING("rs_1"));
    add_call(r1, "call_1", "python", "a = 1");
    set_usage(p, r1, 10, 0, 5, 3);
    TAKE(l, p, r1);
    c1 = round_call(l, 0);
    run_round(l, RES_OK(p, "a\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
    body = followup(l, p, CI_NEXT_FOLLOWUP);
    assert_json(p, member(body, "tool_choice"), "'auto'");

    add_item(p, r2, REASONING("rs_2"));
    add_call(r2, "call_2", "python", "a + 1");
    set_usage(p, r2, 20, 8, 6, 4);
    TAKE(l, p, r2);
    c2 = round_call(l, 0);
    assert_int_equal(c2->output_index, 3);
    assert_int_equal(c2->round, 2);
    assert_string_not_equal(c1->item_id, c2->item_id);
    run_round(l, RES_OK(p, "2\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
    in = member(followup(l, p, CI_NEXT_FOLLOWUP), "input");
    assert_int_equal(json_object_array_length(in), 7);
    assert_json(p, idx(in, 0), "{'role':'user','content':'hi'}");
    assert_json(p, idx(in, 1), REASONING("rs_1"));
    assert_str(ci_json_str(idx(in, 2), "call_id"), "call_1");
    assert_json(p, idx(in, 3), "{'type':'function_call_output','call_id':'call_1','output':'a\\n'}");
    assert_json(p, idx(in, 4), REASONING("rs_2"));
    assert_str(ci_json_str(idx(in, 5), "call_id"), "call_2");
    assert_json(p, idx(in, 6), "{'type':'function_call_output','call_id':'call_2','output':'2\\n'}");

    add_item(p, r3, REASONING("rs_3"));
    add_item(p, r3, MESSAGE("msg_1", "It is 2."));
    set_usage(p, r3, 30, 16, 7, 0);
    TAKE(l, p, r3);
    assert_int_equal(ci_loop_next(l), CI_NEXT_DONE);
    assert_int_equal(ci_loop_rounds(l), 3);
    assert_int_equal(ci_loop_executions(l), 2);

    resp = ci_loop_response(l);
    assert_str(ci_json_str(resp, "id"), "resp_3");
    out = member(resp, "output");
    assert_int_equal(json_object_array_length(out), 6);
    assert_json(p, idx(out, 0), REASONING("rs_1"));
    assert_ptr_equal(idx(out, 1), c1->item);
    assert_json(p, idx(out, 2), REASONING("rs_2"));
    assert_ptr_equal(idx(out, 3), c2->item);
    assert_json(p, idx(out, 4), REASONING("rs_3"));
    assert_json(p, idx(out, 5), MESSAGE("msg_1", "It is 2."));
    assert_call_item(c1, "completed", "a = 1");
    assert_json(p, outputs_of(c1), "[{'type':'logs','logs':'a\\n'}]");
    assert_call_item(c2, "completed", "a + 1");
    assert_json(p, member(resp, "usage"),
                "{'input_tokens':60,'input_tokens_details':{'cached_tokens':24},"
                "'output_tokens':18,'output_tokens_details':{'reasoning_tokens':7},"
                "'total_tokens':78}");
    assert_json(p, member(resp, "tools"), tools);
    assert_json(p, member(resp, "tool_choice"), "{'type':'code_interpreter'}");
    assert_str(ci_json_str(resp, "object"), "response");
    assert_str(ci_json_str(resp, "model"), "m");
}

static void test_loop_usage_partial(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, BASIC, 5, NULL);
    json_object *r1 = resp_new(p, "resp_1"), *r2 = resp_new(p, "resp_2"), *resp;
    add_call(r1, "call_1", "python", "1");
    set_usage(p, r1, 10, 1, 5, 2);
    TAKE(l, p, r1);
    run_round(l, RES_OK(p, "1\n"));
    followup(l, p, ci_loop_next(l));
    add_item(p, r2, MESSAGE("msg_1", "ok"));   /* no usage reported */
    TAKE(l, p, r2);
    resp = ci_loop_response(l);
    assert_json(p, member(resp, "usage"),
                "{'input_tokens':10,'input_tokens_details':{'cached_tokens':1},"
                "'output_tokens':5,'output_tokens_details':{'reasoning_tokens':2},"
                "'total_tokens':15}");
    assert_json(p, member(resp, "tools"), "[" CI_TOOL "]");
    assert_json(p, member(resp, "tool_choice"), "'auto'");
    assert_str(ci_json_str(resp, "id"), "resp_2");
}

static void test_loop_bad_upstream(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, BASIC, 5, NULL);
    static const char *const bodies[] = {"<html>", "{\"id\":\"resp_1\"}",
                                         "{\"id\":\"resp_1\",\"output\":{}}", "[]"};
    static const char *const why[] = {": unexpected character at byte 0", "", "", ""};
    json_object *r;
    ci_error err;
    int i;

    for (i = 0; i < 4; i++) {
        memset(&err, 0, sizeof(err));
        assert_int_equal(ci_loop_take_round(l, bodies[i], strlen(bodies[i]), &err), -1);
        assert_int_equal(err.status, 502);
        assert_str(err.type, "server_error");
        assert_str(err.code, "bad_upstream_response");
        assert_null(err.param);
        assert_str(err.message, apr_psprintf(p, "The model upstream answered round 1 "
                                                "with something that is not a "
                                                "Responses API response%s.", why[i]));
        assert_int_equal(ci_loop_rounds(l), 0);
    }
    r = resp_new(p, "resp_1");
    add_call(r, "call_1", "python", "1");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "1\n"));
    assert_int_equal(ci_loop_take_round(l, "{}", 2, &err), -1);
    assert_str(err.message, "The model upstream answered round 2 with something that "
                            "is not a Responses API response.");
    assert_int_equal(ci_loop_rounds(l), 1);
}

static void test_loop_snapshot_and_failed(void **state)
{
    apr_pool_t *p = *state;
    static const char tools[] = "[" F_TOOL "," CI_TOOL "]";
    ci_loop *l = loop_for(p, apr_pstrcat(p, "{'model':'m','input':'hi','tool_choice':"
                                         "'required','tools':", tools, "}", NULL),
                          5, NULL);
    json_object *r = resp_new(p, "resp_1"), *snap, *failed, *resp, *out;
    ci_call *c;
    json_object_object_add(r, "created_at", json_object_new_int(1761853223));
    add_item(p, r, REASONING("rs_1"));
    add_call(r, "call_1", "python", "1");
    set_usage(p, r, 10, 0, 5, 3);
    TAKE(l, p, r);
    c = round_call(l, 0);

    snap = ci_loop_snapshot(l);
    assert_str(ci_json_str(snap, "id"), "resp_1");
    assert_str(ci_json_str(snap, "object"), "response");
    assert_str(ci_json_str(snap, "status"), "in_progress");
    assert_json(p, member(snap, "created_at"), "1761853223");
    assert_json(p, member(snap, "output"), "[]");
    assert_true(has_key(snap, "usage"));
    assert_null(member(snap, "usage"));
    assert_json(p, member(snap, "tools"), tools);
    assert_json(p, member(snap, "tool_choice"), "'required'");

    run_round(l, RES_OK(p, "1\n"));
    failed = ci_loop_failed_response(l, "server_error",
                                     "The sandbox service is unavailable.");
    assert_str(ci_json_str(failed, "id"), "resp_1");
    assert_str(ci_json_str(failed, "status"), "failed");
    assert_json(p, member(failed, "error"), "{'code':'server_error',"
                                            "'message':'The sandbox service is unavailable.'}");
    out = member(failed, "output");
    assert_int_equal(json_object_array_length(out), 2);
    assert_json(p, idx(out, 0), REASONING("rs_1"));
    assert_ptr_equal(idx(out, 1), c->item);
    assert_str(ci_json_str(idx(out, 1), "status"), "completed");
    assert_json(p, member(failed, "usage"),
                "{'input_tokens':10,'input_tokens_details':{'cached_tokens':0},"
                "'output_tokens':5,'output_tokens_details':{'reasoning_tokens':3},"
                "'total_tokens':15}");
    assert_json(p, member(failed, "tools"), tools);
    assert_json(p, member(failed, "tool_choice"), "'required'");

    /* neither touched the upstream's response */
    resp = ci_loop_response(l);
    assert_str(ci_json_str(resp, "status"), "completed");
    assert_null(member(resp, "error"));
    assert_int_equal(json_object_array_length(member(resp, "output")), 2);
    assert_json(p, member(snap, "output"), "[]");
}

static void test_loop_root_restored(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;
    ci_loop *l = loop_for(p, "{'model':'m','input':[{'role':'user','content':'hi'}],"
                             "'tool_choice':'required','metadata':{'k':'v'},"
                             "'tools':[" CI_TOOL "]}", 2, &req);
    const char *before = root_text(p, req), *body_before = apr_pstrdup(p, req->body);
    json_object *r = resp_new(p, "resp_1");
    add_call(r, "call_1", "python", "1");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "1\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
    followup(l, p, CI_NEXT_FOLLOWUP);
    assert_string_equal(root_text(p, req), before);
    assert_int_equal(json_object_array_length(ci_request_input(p, req)), 1);

    r = resp_new(p, "resp_2");
    add_call(r, "call_2", "python", "2");
    TAKE(l, p, r);
    run_round(l, RES_OK(p, "2\n"));
    assert_int_equal(ci_loop_next(l), CI_NEXT_FINAL);
    followup(l, p, CI_NEXT_FINAL);
    assert_string_equal(root_text(p, req), before);
    assert_string_equal(req->body, body_before);
    assert_json(p, member(req->root, "tool_choice"), "'required'");
    assert_json(p, ci_request_input(p, req), "[{'role':'user','content':'hi'}]");
}

static void test_mint_id(void **state)
{
    apr_pool_t *p = *state;
    const char *a = ci_mint_id(p, "cntr_", 16), *b = ci_mint_id(p, "cntr_", 16);
    assert_true(is_hex_id(a, "cntr_", 32));
    assert_true(is_hex_id(b, "cntr_", 32));
    assert_string_not_equal(a, b);
    assert_true(is_hex_id(ci_mint_id(p, "ci_", 24), "ci_", 48));
    assert_true(is_hex_id(ci_mint_id(p, "x", 1), "x", 2));
}

/* Ids come from a per-thread buffer of random bytes: across many refills
 * they stay distinct, and a forked process does not hand out the ids its
 * parent hands out next (the buffer is dropped in the child). */
static void test_mint_id_buffer_refills_and_forks(void **state)
{
    apr_pool_t *p = *state;
    apr_hash_t *seen = apr_hash_make(p);
    char child_id[64] = "";
    const char *parent_id;
    int fds[2], i, status;
    pid_t pid;

    for (i = 0; i < 200; i++) {          /* 200 x 24 bytes: ~19 refills */
        const char *id = ci_mint_id(p, "ci_", 24);
        assert_true(is_hex_id(id, "ci_", 48));
        assert_null(apr_hash_get(seen, id, APR_HASH_KEY_STRING));
        apr_hash_set(seen, id, APR_HASH_KEY_STRING, id);
    }
    ci_mint_id(p, "ci_", 3);              /* leave part of a buffer unused */
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        apr_pool_t *cp;
        const char *id;
        apr_pool_create(&cp, NULL);
        id = ci_mint_id(cp, "x", 16);
        (void)!write(fds[1], id, strlen(id));
        _exit(0);
    }
    close(fds[1]);
    assert_true(read(fds[0], child_id, sizeof(child_id) - 1) > 0);
    close(fds[0]);
    waitpid(pid, &status, 0);
    parent_id = ci_mint_id(p, "x", 16);
    assert_true(is_hex_id(child_id, "x", 32));
    assert_string_not_equal(child_id, parent_id);
}

/* BUG: with NBYTES 0 the hex buffer is never written, not even its
 * terminating NUL, so the id is PREFIX followed by whatever the pool held. */
static void test_mint_id_zero_bytes_bug(void **state)
{
    apr_pool_t *p = *state;
    char *junk = apr_palloc(p, 64);
    memset(junk, 'x', 64);          /* make stale pool memory visible */
    apr_pool_clear(p);
    assert_string_equal(ci_mint_id(p, "cntr_", 0), "cntr_");
}

/* ======================================================================== */
/* ci_config                                                                */
/* ======================================================================== */

static void size_ok_(apr_pool_t *p, const char *v, apr_uint64_t max,
                     apr_uint64_t want, const char *file, int line)
{
    apr_uint64_t out = 0;
    str_eq_(ci_parse_size(p, v, max, &out), NULL, file, line);
    _assert_int_equal(out, want, file, line);
}
#define size_ok(p, v, max, want) size_ok_((p), (v), (max), (want), __FILE__, __LINE__)

static void size_bad_(apr_pool_t *p, const char *v, apr_uint64_t max,
                      const char *file, int line)
{
    apr_uint64_t out = 7;
    str_eq_(ci_parse_size(p, v, max, &out),
            apr_psprintf(p, "'%s' is not a valid size: expected a positive number "
                            "of bytes, optionally with K, M or G, at most %"
                            APR_UINT64_T_FMT " bytes", v ? v : "", max),
            file, line);
    _assert_int_equal(out, 7, file, line);
}
#define size_bad(p, v, max) size_bad_((p), (v), (max), __FILE__, __LINE__)

static void test_parse_size(void **state)
{
    apr_pool_t *p = *state;
    const apr_uint64_t big = UINT64_MAX;
    size_ok(p, "64k", big, 65536);
    size_ok(p, "64K", big, 65536);
    size_ok(p, "64kb", big, 65536);
    size_ok(p, "64KB", big, 65536);
    size_ok(p, "32M", big, 33554432);
    size_ok(p, "32m", big, 33554432);
    size_ok(p, "1G", big, 1073741824);
    size_ok(p, "512", big, 512);
    size_ok(p, "16M", (apr_uint64_t)16 << 20, (apr_uint64_t)16 << 20);
    size_ok(p, "18446744073709551615", big, UINT64_MAX);
    size_ok(p, "17179869183G", big, (apr_uint64_t)17179869183ULL << 30);
    size_bad(p, "0", big);
    size_bad(p, "0k", big);
    size_bad(p, "-1", big);
    size_bad(p, "12X", big);
    size_bad(p, "12kX", big);
    size_bad(p, "2B", big);
    size_bad(p, "", big);
    size_bad(p, "k", big);
    size_bad(p, " 5", big);
    size_bad(p, "5 ", big);
    size_bad(p, "1.5M", big);
    size_bad(p, NULL, big);
    size_bad(p, "17M", (apr_uint64_t)16 << 20);
    size_bad(p, "16777217", (apr_uint64_t)16 << 20);
    size_bad(p, "18446744073709551616", big);      /* does not fit 64 bits */
    size_bad(p, "99999999999999999999999", big);
    size_bad(p, "17179869184G", big);              /* 2^64 after the multiplier */
    size_bad(p, "2048", 1024);
}

static void test_parse_seconds(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bad[] = {"0", "86401", "5m", "s", "-5", "", "1.5",
                                      "30 s", "30ss", "99999999999999999999", NULL};
    int out = 0, i;
    assert_null(ci_parse_seconds(p, "30", 86400, &out));
    assert_int_equal(out, 30);
    assert_null(ci_parse_seconds(p, "45s", 86400, &out));
    assert_int_equal(out, 45);
    assert_null(ci_parse_seconds(p, "86400", 86400, &out));
    assert_int_equal(out, 86400);
    assert_null(ci_parse_seconds(p, "1", 1, &out));
    assert_int_equal(out, 1);
    for (i = 0; bad[i]; i++)
        assert_str(ci_parse_seconds(p, bad[i], 86400, &out),
                   apr_psprintf(p, "'%s' is not a valid duration: expected whole "
                                   "seconds from 1 to 86400", bad[i]));
    assert_str(ci_parse_seconds(p, NULL, 60, &out),
               "'' is not a valid duration: expected whole seconds from 1 to 60");
}

static void test_parse_count(void **state)
{
    apr_pool_t *p = *state;
    int out = -1;
    assert_null(ci_parse_count(p, "0", 64, 1, &out));
    assert_int_equal(out, 0);
    assert_null(ci_parse_count(p, "64", 64, 0, &out));
    assert_int_equal(out, 64);
    assert_null(ci_parse_count(p, "1", 64, 0, &out));
    assert_int_equal(out, 1);
    assert_str(ci_parse_count(p, "0", 64, 0, &out),
               "'0' is not a valid count: expected a whole number from 1 to 64");
    assert_str(ci_parse_count(p, "65", 64, 1, &out),
               "'65' is not a valid count: expected a whole number from 0 to 64");
    assert_str(ci_parse_count(p, "3x", 64, 0, &out),
               "'3x' is not a valid count: expected a whole number from 1 to 64");
    assert_str(ci_parse_count(p, "3s", 64, 0, &out),
               "'3s' is not a valid count: expected a whole number from 1 to 64");
    assert_str(ci_parse_count(p, "+3", 64, 0, &out),
               "'+3' is not a valid count: expected a whole number from 1 to 64");
    assert_str(ci_parse_count(p, "-1", 64, 1, &out),
               "'-1' is not a valid count: expected a whole number from 0 to 64");
    assert_str(ci_parse_count(p, "", 64, 0, &out),
               "'' is not a valid count: expected a whole number from 1 to 64");
    assert_str(ci_parse_count(p, NULL, 64, 0, &out),
               "'' is not a valid count: expected a whole number from 1 to 64");
}

static void test_parse_url(void **state)
{
    apr_pool_t *p = *state;
    static const char *const good[] = {"http://localhost:8080/v1", "https://api.e2b.app",
                                       "HTTPS://x", "http://[::1]:80/", NULL};
    static const char *const bad[] = {"ftp://x", "api.e2b.app", "http://", "http:///path",
                                      "https://host/a b", "https://host/a\tb", "", "/v1",
                                      NULL};
    int i;
    for (i = 0; good[i]; i++)
        assert_str(ci_parse_url(p, good[i]), NULL);
    for (i = 0; bad[i]; i++)
        assert_str(ci_parse_url(p, bad[i]),
                   apr_psprintf(p, "'%s' is not a valid URL: expected an absolute "
                                   "http:// or https:// URL with a host", bad[i]));
    assert_str(ci_parse_url(p, NULL), "'' is not a valid URL: expected an absolute "
                                      "http:// or https:// URL with a host");
}

static void test_parse_function_name(void **state)
{
    apr_pool_t *p = *state;
    char n64[66];
    static const char *const bad[] = {"", "a.b", "a b", "caf\xc3\xa9", "a/b", "a:b", NULL};
    int i;
    memset(n64, 'x', 65);
    n64[64] = '\0';
    assert_null(ci_parse_function_name(p, "python"));
    assert_null(ci_parse_function_name(p, "run_Code-2"));
    assert_null(ci_parse_function_name(p, "x"));
    assert_null(ci_parse_function_name(p, n64));
    n64[64] = 'x';
    n64[65] = '\0';
    assert_str(ci_parse_function_name(p, n64),
               apr_psprintf(p, "'%s' is not a valid function name: expected 1 to 64 "
                               "letters, digits, '_' or '-'", n64));
    for (i = 0; bad[i]; i++)
        assert_str(ci_parse_function_name(p, bad[i]),
                   apr_psprintf(p, "'%s' is not a valid function name: expected 1 to "
                                   "64 letters, digits, '_' or '-'", bad[i]));
    assert_str(ci_parse_function_name(p, NULL),
               "'' is not a valid function name: expected 1 to 64 letters, digits, "
               "'_' or '-'");
}

static void assert_defaults(ci_sandbox_def *d, const char *name, const char *provider)
{
    int e2b = !strcmp(provider, "e2b");
    assert_str(d->name, name);
    assert_ptr_equal(d->provider, ci_provider_named(provider));
    assert_int_equal(d->timeout, apr_time_from_sec(30));
    assert_int_equal(d->max_output, 64 * 1024);
    if (!e2b) {
        assert_str(CI_LOCAL(d)->python, "/usr/bin/python3");
        assert_int_equal(CI_LOCAL(d)->memory, (apr_uint64_t)512 << 20);
        assert_int_equal(CI_LOCAL(d)->processes, 64);
        assert_int_equal(CI_LOCAL(d)->disk, (apr_uint64_t)64 << 20);
        assert_int_equal(d->warm, 0);
        assert_null(CI_LOCAL(d)->preload);
        return;
    }
    assert_str(CI_E2B(d)->api_key_spec, "env:E2B_API_KEY");
    assert_null(CI_E2B(d)->api_key);
    assert_str(CI_E2B(d)->api_base, "https://api.e2b.app");
    assert_str(CI_E2B(d)->template_id, "code-interpreter-v1");
    assert_int_equal(CI_E2B(d)->lifetime, 300);
    assert_int_equal(d->network, 0);
    assert_null(CI_E2B(d)->sandbox_url);
}

static ci_sandbox_def *def_ok_(apr_pool_t *p, const char *name, int argc,
                               const char *const *argv, const char *file, int line)
{
    ci_sandbox_def *d = NULL;
    str_eq_(ci_sandbox_def_parse(p, name, argc, argv, &d), NULL, file, line);
    _assert_true(d != NULL, "def", file, line);
    return d;
}
#define DEF_OK(p, name, ...)                                                  \
    def_ok_((p), (name), sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *), \
            (const char *const[]){__VA_ARGS__}, __FILE__, __LINE__)

static void def_bad_(apr_pool_t *p, const char *name, int argc,
                     const char *const *argv, const char *want, const char *file,
                     int line)
{
    ci_sandbox_def *d = NULL;
    str_eq_(ci_sandbox_def_parse(p, name, argc, argv, &d), want, file, line);
    _assert_true(d == NULL, "no def on error", file, line);
}
#define DEF_BAD(p, name, want, ...)                                           \
    def_bad_((p), (name), sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *), \
             (const char *const[]){__VA_ARGS__}, (want), __FILE__, __LINE__)

static void test_parse_domain_pattern(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bad[] = {"", "*", "*.", "a..b", "-a.org", "a-.org", "a_b.org",
                                      "10.0.0.1", "2130706433", "0x7f.1", "a.0x10", "[::1]",
                                      "a.*.org", "**.org", "a.org:80", "caf\xc3\xa9.org",
                                      "a b.org", NULL};
    const char *out = NULL;
    int i;
    assert_null(ci_parse_domain_pattern(p, "PyPI.org.", &out));
    assert_string_equal(out, "pypi.org");
    assert_null(ci_parse_domain_pattern(p, "*.Files.Test", &out));
    assert_string_equal(out, "*.files.test");
    assert_null(ci_parse_domain_pattern(p, "xn--caf-dma.org", &out));
    assert_string_equal(out, "xn--caf-dma.org");
    assert_null(ci_parse_domain_pattern(p, "localhost", &out));
    for (i = 0; bad[i]; i++)
        assert_string_equal(ci_parse_domain_pattern(p, bad[i], &out),
                            apr_psprintf(p, "'%s' is not a domain name", bad[i]));
}

static void test_domain_covers(void **state)
{
    (void)state;
    assert_true(ci_domain_covers("pypi.org", "pypi.org"));
    assert_false(ci_domain_covers("pypi.org", "x.pypi.org"));
    assert_false(ci_domain_covers("pypi.org", "*.pypi.org"));
    assert_true(ci_domain_covers("*.pypi.org", "x.pypi.org"));
    assert_true(ci_domain_covers("*.pypi.org", "a.b.pypi.org"));
    assert_false(ci_domain_covers("*.pypi.org", "pypi.org"));
    assert_false(ci_domain_covers("*.pypi.org", "evilpypi.org"));
    assert_true(ci_domain_covers("*.pypi.org", "*.pypi.org"));
    assert_true(ci_domain_covers("*.org", "*.pypi.org"));
    assert_false(ci_domain_covers("*.pypi.org", "*.org"));
}

static void test_parse_proxy_url(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bad[] = {"http://proxy", "https://proxy:3128", "proxy:3128",
                                      "http://proxy:3128/path", "http://u:p@proxy:3128",
                                      "http://proxy:3128?x", "", NULL};
    int i;
    assert_null(ci_parse_proxy_url(p, "http://proxy.corp:3128"));
    assert_null(ci_parse_proxy_url(p, "http://127.0.0.1:8080/"));
    for (i = 0; bad[i]; i++)
        assert_string_equal(ci_parse_proxy_url(p, bad[i]),
                            apr_psprintf(p, "'%s' is not valid: expected http://HOST:PORT",
                                         bad[i]));
}

static void test_sandbox_egress_keys(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *d = DEF_OK(p, "py", "egress=allowlist",
                               "allowed_domains=PyPI.org,*.pythonhosted.org",
                               "egress_proxy=http://proxy.corp:3128");
    const ci_sandbox_def *c;
    assert_int_equal(d->egress, 1);
    assert_string_equal(d->allowed_domains, "pypi.org,*.pythonhosted.org");
    assert_string_equal(d->egress_proxy, "http://proxy.corp:3128");
    assert_true(ci_sandbox_def_domain_allowed(p, d, "pypi.org"));
    assert_true(ci_sandbox_def_domain_allowed(p, d, "files.pythonhosted.org"));
    assert_true(ci_sandbox_def_domain_allowed(p, d, "*.x.pythonhosted.org"));
    assert_false(ci_sandbox_def_domain_allowed(p, d, "pythonhosted.org"));
    assert_false(ci_sandbox_def_domain_allowed(p, d, "evil.org"));
    assert_true(ci_sandbox_def_domain_allowed(p, DEF_OK(p, "py", "egress=allowlist"),
                                              "anything.org"));
    /* a container's: a copy with its allowlist; none: the tool itself */
    c = ci_sandbox_def_container(p, d, NULL, "pypi.org", NULL);
    assert_ptr_not_equal(c, d);
    assert_string_equal(c->allowlist, "pypi.org");
    assert_null(d->allowlist);
    assert_ptr_equal(ci_sandbox_def_container(p, d, NULL, NULL, NULL), d);
    DEF_BAD(p, "py", "egress: 'on' is not valid: expected off or allowlist", "egress=on");
    DEF_BAD(p, "py", "allowed_domains= needs egress=allowlist", "allowed_domains=a.org");
    DEF_BAD(p, "py", "egress_proxy= needs egress=allowlist", "egress_proxy=http://p:1");
    DEF_BAD(p, "py", "allowed_domains: '10.0.0.1' is not a domain name", "egress=allowlist",
            "allowed_domains=a.org,10.0.0.1");
    assert_true(DEF_OK(p, "cloud", "provider=e2b", "egress=allowlist",
                       "allowed_domains=pypi.org")->egress);
    DEF_BAD(p, "cloud", "egress_proxy: provider e2b's sandboxes do not reach the internet "
            "through this server", "provider=e2b", "egress=allowlist",
            "egress_proxy=http://p:3128");
}

static void test_network_policy_parse(void **state)
{
    apr_pool_t *p = *state;
    json_object *v = ci_json_own(p, json_tokener_parse(
        "{\"type\":\"allowlist\",\"allowed_domains\":[\"API.example.org\",\"*.cdn.org\"],"
        "\"domain_secrets\":[{\"domain\":\"api.example.org\",\"name\":\"TOKEN\","
        "\"value\":\"s3cret\"},{\"domain\":\"x.cdn.org\",\"name\":\"_K2\",\"value\":\"k\"}]}"));
    json_object *tools, *list;
    apr_array_header_t *domains, *secrets;
    ci_error err;
    const char *text;
    memset(&err, 0, sizeof(err));
    assert_int_equal(ci_network_policy_parse(p, v, "np", &domains, &secrets, &err), 0);
    assert_string_equal(ci_domains_join(p, domains), "api.example.org,*.cdn.org");
    /* and back, as records and definitions are read */
    assert_int_equal(ci_domains_split(p, ci_domains_join(p, domains))->nelts, 2);
    assert_string_equal(APR_ARRAY_IDX(ci_domains_split(p, "api.example.org,*.cdn.org"), 1,
                                      const char *), "*.cdn.org");
    assert_int_equal(ci_domains_split(p, NULL)->nelts, 0);
    assert_string_equal(ci_json_text(ci_json_own(p, ci_domains_json(p, "a.org,*.b.org")),
                                     NULL), "[\"a.org\",\"*.b.org\"]");
    assert_int_equal(secrets->nelts, 2);
    assert_string_equal(APR_ARRAY_IDX(secrets, 1, ci_domain_secret).domain, "x.cdn.org");
    assert_string_equal(APR_ARRAY_IDX(secrets, 0, ci_domain_secret).value, "s3cret");
    /* each secret gets a placeholder of its own */
    list = ci_json_own(p, json_tokener_parse(ci_secrets_with_placeholders(p, secrets)));
    text = ci_json_str(json_object_array_get_idx(list, 0), "placeholder");
    assert_int_equal(strlen(text), 42);
    assert_int_equal(strncmp(text, "CI_SECRET_", 10), 0);
    assert_string_not_equal(text, ci_json_str(json_object_array_get_idx(list, 1),
                                              "placeholder"));
    /* disabled: nothing */
    v = ci_json_own(p, json_tokener_parse("{\"type\":\"disabled\"}"));
    assert_int_equal(ci_network_policy_parse(p, v, "np", &domains, &secrets, &err), 0);
    assert_null(domains);
    assert_null(secrets);
    /* the answer's copy of the tools loses the values, nothing else */
    tools = ci_json_own(p, json_tokener_parse(
        "[{\"type\":\"shell\",\"environment\":{\"type\":\"container_auto\","
        "\"network_policy\":{\"type\":\"allowlist\",\"allowed_domains\":[\"a.org\"],"
        "\"domain_secrets\":[{\"domain\":\"a.org\",\"name\":\"T\",\"value\":\"v\"}]}}}]"));
    ci_redact_secrets(tools);
    assert_string_equal(json_object_to_json_string_ext(tools, JSON_C_TO_STRING_PLAIN),
                        "[{\"type\":\"shell\",\"environment\":{\"type\":\"container_auto\","
                        "\"network_policy\":{\"type\":\"allowlist\",\"allowed_domains\":"
                        "[\"a.org\"],\"domain_secrets\":[{\"domain\":\"a.org\",\"name\":\"T\"}]}}}]");
    assert_true(ci_secret_name_ok("API_TOKEN"));
    assert_false(ci_secret_name_ok("LD_PRELOAD"));
    assert_false(ci_secret_name_ok("HTTPS_PROXY"));
    assert_false(ci_secret_name_ok("1X"));
    assert_false(ci_secret_value_ok("a\nb", 3));
    assert_false(ci_secret_value_ok("a\0b", 3));
    assert_true(ci_secret_value_ok("a b", 3));
    assert_true(ci_secret_value_ok("a\tb", 3));
    assert_true(ci_secret_value_ok("\xc3\xa9", 2));
    assert_false(ci_secret_value_ok("a\x01", 2));
    assert_false(ci_secret_value_ok("a\x7f", 2));
    assert_false(ci_secret_value_ok("", 0));
}

static void test_sandbox_defaults(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *d = NULL;
    assert_null(ci_sandbox_def_parse(p, "py", 0, NULL, &d));
    assert_non_null(d);
    assert_defaults(d, "py", "local");
    assert_defaults(ci_sandbox_def_defaults(p, "other", ci_provider_named("e2b")), "other",
                    "e2b");
    assert_defaults(DEF_OK(p, "cloud", "provider=e2b"), "cloud", "e2b");
    assert_defaults(DEF_OK(p, "py", "provider=local"), "py", "local");
}

static void test_sandbox_local_keys(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *d = DEF_OK(p, "py", "provider=local", "timeout=45s", "max_output=1M",
                               "python=/opt/py/bin/python3", "memory=1G",
                               "processes=16", "disk=256M", "warm=2",
                               "preload=numpy,pandas,matplotlib.pyplot");
    assert_ptr_equal(d->provider, ci_provider_named("local"));
    assert_int_equal(d->timeout, apr_time_from_sec(45));
    assert_int_equal(d->max_output, 1 << 20);
    assert_str(CI_LOCAL(d)->python, "/opt/py/bin/python3");
    assert_int_equal(CI_LOCAL(d)->memory, (apr_uint64_t)1 << 30);
    assert_int_equal(CI_LOCAL(d)->processes, 16);
    assert_int_equal(CI_LOCAL(d)->disk, (apr_uint64_t)256 << 20);
    assert_int_equal(d->warm, 2);
    assert_str(CI_LOCAL(d)->preload, "numpy,pandas,matplotlib.pyplot");
    d = DEF_OK(p, "py", "warm=0", "timeout=86400", "max_output=16M");
    assert_int_equal(d->warm, 0);
    assert_int_equal(d->timeout, apr_time_from_sec(86400));
    assert_int_equal(d->max_output, 16 << 20);

    DEF_BAD(p, "py", "timeout: '0' is not a valid duration: expected whole seconds "
                     "from 1 to 86400", "timeout=0");
    DEF_BAD(p, "py", "max_output: '32M' is not a valid size: expected a positive "
                     "number of bytes, optionally with K, M or G, at most 16777216 "
                     "bytes", "max_output=32M");
    DEF_BAD(p, "py", "python: 'python3' is not valid: expected an absolute path",
            "python=python3");
    DEF_BAD(p, "py", "memory: '0' is not a valid size: expected a positive number of "
                     "bytes, optionally with K, M or G, at most 1099511627776 bytes",
            "memory=0");
    DEF_BAD(p, "py", "disk: '2T' is not a valid size: expected a positive number of "
                     "bytes, optionally with K, M or G, at most 1099511627776 bytes",
            "disk=2T");
    DEF_BAD(p, "py", "processes: '0' is not a valid count: expected a whole number "
                     "from 1 to 4096", "processes=0");
    DEF_BAD(p, "py", "warm: '65' is not a valid count: expected a whole number from 0 "
                     "to 64", "warm=65");
    DEF_BAD(p, "py", "preload: 'os;rm' is not a valid module list: expected "
                     "comma-separated Python module names", "preload=os;rm");
    DEF_BAD(p, "py", "unknown key 'foo' for provider local"
                     ": expected one of provider, timeout, max_output, idle, max_idle, retention, tiers, max_file, max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca, python, memory, processes, disk, warm, preload", "timeout=5", "foo=1");
    DEF_BAD(p, "py", "unknown key 'api_key' for provider local: expected one of provider, timeout, max_output, idle, max_idle, retention, tiers, max_file, max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca, python, memory, processes, disk, warm, preload", "api_key=sk-x");
    DEF_BAD(p, "py", "unknown provider 'docker': expected local or e2b", "provider=docker");
    DEF_BAD(p, "py", "'timeout' is not valid: expected key=value", "timeout");
    DEF_BAD(p, "py", "'=5' is not valid: expected key=value", "=5");
    DEF_BAD(p, "my sandbox", "'my sandbox' is not a valid sandbox name: expected 1 to "
                             "64 letters, digits, '_' or '-'", "timeout=5");
}

static void test_sandbox_e2b_keys(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *d = DEF_OK(p, "cloud", "timeout=10", "provider=e2b",
                               "api_key=file:/etc/ci/key",
                               "api_base=https://e2b.internal:8443",
                               "sandbox_url=https://sb.internal", "template=my-tpl",
                               "lifetime=600", "internet=on", "max_output=128k");
    assert_ptr_equal(d->provider, ci_provider_named("e2b"));
    assert_int_equal(d->timeout, apr_time_from_sec(10));
    assert_str(CI_E2B(d)->api_key_spec, "file:/etc/ci/key");
    assert_null(CI_E2B(d)->api_key);            /* resolved separately */
    assert_str(CI_E2B(d)->api_base, "https://e2b.internal:8443");
    assert_str(CI_E2B(d)->sandbox_url, "https://sb.internal");
    assert_str(CI_E2B(d)->template_id, "my-tpl");
    assert_int_equal(CI_E2B(d)->lifetime, 600);
    assert_int_equal(d->network, 1);
    assert_int_equal(d->max_output, 128 * 1024);
    d = DEF_OK(p, "cloud", "provider=e2b", "internet=OFF");
    assert_int_equal(d->network, 0);

    DEF_BAD(p, "cloud", "internet: 'yes' is not valid: expected on or off",
            "provider=e2b", "internet=yes");
    DEF_BAD(p, "cloud", "api_key: an empty value is not valid: expected env:VAR, "
                        "file:PATH or the key", "provider=e2b", "api_key=");
    DEF_BAD(p, "cloud", "template: an empty value is not valid: expected a template "
                        "name", "provider=e2b", "template=");
    DEF_BAD(p, "cloud", "api_base: 'ftp://x' is not a valid URL: expected an absolute "
                        "http:// or https:// URL with a host", "provider=e2b",
            "api_base=ftp://x");
    DEF_BAD(p, "cloud", "sandbox_url: 'sb' is not a valid URL: expected an absolute "
                        "http:// or https:// URL with a host", "provider=e2b",
            "sandbox_url=sb");
    DEF_BAD(p, "cloud", "lifetime: '0' is not a valid duration: expected whole seconds "
                        "from 1 to 86400", "provider=e2b", "lifetime=0");
    DEF_BAD(p, "cloud", "unknown key 'memory' for provider e2b"
                     ": expected one of provider, timeout, max_output, idle, max_idle, retention, tiers, max_file, max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca, api_key, api_base, template, lifetime, internet, sandbox_url", "provider=e2b",
            "memory=1G");
}

static void test_sandbox_errors_hide_key(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *d = NULL;
    const char *e;
    e = ci_sandbox_def_parse(p, "cloud", 3, (const char *const[]){
        "provider=e2b", "api_key=sk-SECRET-0001", "lifetime=0"}, &d);
    assert_str(e, "lifetime: '0' is not a valid duration: expected whole seconds "
                  "from 1 to 86400");
    e = ci_sandbox_def_parse(p, "cloud", 3, (const char *const[]){
        "provider=e2b", "api_key=sk-SECRET-0001", "bogus=1"}, &d);
    assert_str(e, "unknown key 'bogus' for provider e2b"
                     ": expected one of provider, timeout, max_output, idle, max_idle, retention, tiers, max_file, max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca, api_key, api_base, template, lifetime, internet, sandbox_url");
    assert_null(strstr(e, "SECRET"));
}

static const char *write_temp(apr_pool_t *p, const char *content)
{
    apr_file_t *f;
    char *path = apr_pstrdup(p, "/tmp/ci_unit_keyXXXXXX");
    apr_size_t n = strlen(content);
    assert_int_equal(apr_file_mktemp(&f, path, APR_FOPEN_CREATE | APR_FOPEN_READ |
                                     APR_FOPEN_WRITE | APR_FOPEN_EXCL, p),
                     APR_SUCCESS);
    assert_int_equal(apr_file_write_full(f, content, n, NULL), APR_SUCCESS);
    apr_file_close(f);
    return path;
}

static void test_sandbox_resolve_key(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *d;
    const char *path, *e;

    /* local sandboxes have no key */
    d = ci_sandbox_def_defaults(p, "py", ci_provider_named("local"));
    assert_null(ci_sandbox_def_resolve(p, d));

    /* env: */
    d = ci_sandbox_def_defaults(p, "cloud", ci_provider_named("e2b"));
    CI_E2B(d)->api_key_spec = "env:CI_UNIT_TEST_KEY";
    setenv("CI_UNIT_TEST_KEY", "sk-env-123", 1);
    assert_null(ci_sandbox_def_resolve(p, d));
    assert_str(CI_E2B(d)->api_key, "sk-env-123");
    CI_E2B(d)->api_key = NULL;
    unsetenv("CI_UNIT_TEST_KEY");
    assert_str(ci_sandbox_def_resolve(p, d),
               "api_key=env:CI_UNIT_TEST_KEY: the environment variable is not set");
    assert_null(CI_E2B(d)->api_key);
    setenv("CI_UNIT_TEST_KEY", "", 1);
    assert_str(ci_sandbox_def_resolve(p, d),
               "api_key=env:CI_UNIT_TEST_KEY: the environment variable is not set");
    unsetenv("CI_UNIT_TEST_KEY");

    /* file: the first line, trimmed */
    path = write_temp(p, "  sk-file-456 \r\nsecond line\n");
    CI_E2B(d)->api_key_spec = apr_pstrcat(p, "file:", path, NULL);
    assert_null(ci_sandbox_def_resolve(p, d));
    assert_str(CI_E2B(d)->api_key, "sk-file-456");
    unlink(path);
    CI_E2B(d)->api_key = NULL;
    assert_str(ci_sandbox_def_resolve(p, d),
               apr_psprintf(p, "api_key=file:%s: the file cannot be read", path));
    assert_null(CI_E2B(d)->api_key);
    CI_E2B(d)->api_key_spec = "file:/nonexistent/dir/key";
    assert_str(ci_sandbox_def_resolve(p, d),
               "api_key=file:/nonexistent/dir/key: the file cannot be read");
    /* a key not on the first line is not taken, and not shown */
    path = write_temp(p, "\nsk-secret-789\n");
    CI_E2B(d)->api_key_spec = apr_pstrcat(p, "file:", path, NULL);
    e = ci_sandbox_def_resolve(p, d);
    assert_str(e, apr_psprintf(p, "api_key=file:%s: the file holds no key", path));
    assert_null(strstr(e, "sk-secret"));
    assert_null(CI_E2B(d)->api_key);
    unlink(path);

    /* anything else is the key itself */
    CI_E2B(d)->api_key_spec = "sk-literal-000";
    assert_null(ci_sandbox_def_resolve(p, d));
    assert_str(CI_E2B(d)->api_key, "sk-literal-000");
}

/* ======================================================================== */

int main(void)
{
    const struct CMUnitTest json_tests[] = {
        TEST(test_json_parse_strict),
        TEST(test_json_parse_depth),
        TEST(test_json_parse_starts_afresh),
        TEST(test_json_top_string),
        TEST(test_json_spans),
        TEST(test_json_has_control_byte),
        TEST(test_json_strict_value),
        TEST(test_json_parse_trailing_nul_bug),
        TEST(test_json_parse_top_level_scalar_bug),
        TEST(test_json_parse_non_rfc_numbers_bug),
        TEST(test_json_helpers),
        TEST(test_error_body),
    };
    const struct CMUnitTest request_tests[] = {
        TEST(test_body_mentions_tool),
        TEST(test_utf8_sanitize),
        TEST(test_rewrite_pass),
        TEST(test_rewrite_replaces_tool),
        TEST(test_rewrite_opts),
        TEST(test_rewrite_stream),
        TEST(test_rewrite_include),
        TEST(test_rewrite_item_references),
        TEST(test_rewrite_container_context),
        TEST(test_rewrite_flags),
        TEST(test_rewrite_client_tools),
        TEST(test_rewrite_tool_choice),
        TEST(test_rewrite_tool_choice_absent),
        TEST(test_rewrite_input_string),
        TEST(test_rewrite_input_history),
        TEST(test_rewrite_keeps_the_clients_bytes),
        TEST(test_rewrite_passes_an_input_unparsed),
        TEST(test_rewrite_parses_only_the_items_it_translates),
        TEST(test_rewrite_passing_input_bad_body),
        TEST(test_rewrite_encodes_what_it_cannot_keep),
        TEST(test_reject_json),
        TEST(test_reject_trailing_nul_bug),
        TEST(test_reject_scalar_body_bug),
        TEST(test_reject_non_rfc_number_bug),
        TEST(test_reject_tools),
        TEST(test_reject_container),
        TEST(test_reject_flags),
        TEST(test_reject_conversation),
        TEST(test_reject_tool_choice),
        TEST(test_reject_input_items),
    };
    const struct CMUnitTest exec_tests[] = {
        TEST(test_ndjson_whole),
        TEST(test_ndjson_every_split),
        TEST(test_ndjson_interleaved),
        TEST(test_ndjson_result_line),
        TEST(test_ndjson_images),
        TEST(test_ndjson_errors),
        TEST(test_ndjson_cut_and_failure),
        TEST(test_ndjson_last_line_without_newline),
        TEST(test_ndjson_line_cap),
        TEST(test_ndjson_ready_and_reset),
        TEST(test_ndjson_hard_cap),
        TEST(test_ndjson_commands),
        TEST(test_ndjson_malformed_command_is_a_protocol_error),
        TEST(test_ndjson_commands_count_against_the_hard_cap),
        TEST(test_ndjson_long_line),
        TEST(test_ndjson_truncation),
        TEST(test_ndjson_truncation_utf8),
        TEST(test_ndjson_truncation_order_bug),
        TEST(test_ndjson_dropped),
        TEST(test_capped_append),
        TEST(test_exec_model_text),
        TEST(test_exec_model_text_image_line_bug),
    };
    const struct CMUnitTest loop_tests[] = {
        TEST(test_loop_one_round),
        TEST(test_loop_outputs_included),
        TEST(test_loop_followup_tool_choice),
        TEST(test_loop_final),
        TEST(test_loop_final_text_only),
        TEST(test_loop_conversation),
        TEST(test_loop_max_rounds),
        TEST(test_loop_max_tool_calls),
        TEST(test_loop_invalid_arguments),
        TEST(test_loop_client_call),
        TEST(test_loop_rounds_assembled),
        TEST(test_loop_usage_partial),
        TEST(test_loop_bad_upstream),
        TEST(test_loop_snapshot_and_failed),
        TEST(test_loop_root_restored),
        TEST(test_mint_id),
        TEST(test_mint_id_buffer_refills_and_forks),
        TEST(test_mint_id_zero_bytes_bug),
    };
    const struct CMUnitTest config_tests[] = {
        TEST(test_parse_size),
        TEST(test_parse_seconds),
        TEST(test_parse_count),
        TEST(test_parse_url),
        TEST(test_parse_domain_pattern),
        TEST(test_domain_covers),
        TEST(test_parse_proxy_url),
        TEST(test_network_policy_parse),
        TEST(test_parse_function_name),
        TEST(test_sandbox_defaults),
        TEST(test_sandbox_egress_keys),
        TEST(test_sandbox_local_keys),
        TEST(test_sandbox_e2b_keys),
        TEST(test_sandbox_errors_hide_key),
        TEST(test_sandbox_resolve_key),
    };
    int failed = 0;

    if (apr_initialize() != APR_SUCCESS)
        return 2;
    atexit(apr_terminate);
    failed += cmocka_run_group_tests_name("ci_json+ci_error", json_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("ci_request", request_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("ci_exec", exec_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("ci_config", config_tests, NULL, NULL);
    /* last: the id test marked BUG reads past its buffer until fixed */
    failed += cmocka_run_group_tests_name("ci_loop", loop_tests, NULL, NULL);
    return failed ? 1 : 0;
}

/*
 * test_scan.c - unit tests of the incremental tool scan (core/ci_scan.c):
 * fed a body in pieces, however it is cut, it answers what
 * ci_body_mentions_tool() answers for the whole body.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <apr_general.h>

#include "ci_request.h"
#include "ci_scan.h"

/* Scan BODY cut into pieces of at most PIECE bytes (0: in one piece). */
static int scan_in_pieces(const char *body, size_t len, size_t piece)
{
    ci_scan s;
    size_t at = 0;
    int found = 0;
    ci_scan_init(&s);
    if (!piece)
        piece = len ? len : 1;
    while (at < len) {
        size_t n = len - at < piece ? len - at : piece;
        found = ci_scan_feed(&s, body + at, n);
        at += n;
    }
    return found;
}

/* Scan BODY cut once at every position, and into pieces of every size up to
 * 40 bytes; each answer must be EXPECTED. (From a copy of exactly LEN bytes,
 * so that a sanitizer build sees any read past the end.) */
static void assert_every_cut(const char *text, size_t len, int expected)
{
    size_t cut, piece;
    char *body = malloc(len ? len : 1);
    assert_non_null(body);
    memcpy(body, text, len);
    for (cut = 0; cut <= len; cut++) {
        ci_scan s;
        ci_scan_init(&s);
        ci_scan_feed(&s, body, cut);
        if (ci_scan_feed(&s, body + cut, len - cut) != expected)
            fail_msg("cut at %zu of \"%.*s\": expected %d", cut, (int)len, body, expected);
    }
    for (piece = 0; piece <= 40; piece++)
        if (scan_in_pieces(body, len, piece) != expected)
            fail_msg("pieces of %zu of \"%.*s\": expected %d", piece, (int)len, body,
                     expected);
    free(body);
}

#define CUTS(lit, expected) assert_every_cut(lit, sizeof(lit) - 1, expected)

static void test_the_name(void **state)
{
    (void)state;
    CUTS("{\"tools\":[{\"type\":\"code_interpreter\"}]}", 1);
    CUTS("code_interpreter", 1);
    CUTS("code_interpretercode_interpreter", 1);
    CUTS("ccode_interpreterr", 1);
    CUTS("code_interprete", 0);
    CUTS("Code_Interpreter", 0);
    CUTS("code_interpretEr", 0);
    CUTS("{\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\"}]}", 0);
    CUTS("", 0);
    /* bytes, not a C string: a NUL before the name does not hide it */
    CUTS("x\0code_interpreter", 1);
}

/* BODY cut at every pair of positions into three pieces: each answer must
 * be EXPECTED, as the whole-body scan's is. */
static void assert_every_three_cuts(const char *text, size_t len, int expected)
{
    size_t a, b;
    char *body = malloc(len ? len : 1);
    assert_non_null(body);
    memcpy(body, text, len);
    if (ci_body_mentions_tool(body, len) != expected)
        fail_msg("the whole-body scan of \"%.*s\": expected %d", (int)len, body, expected);
    for (a = 0; a <= len; a++)
        for (b = a; b <= len; b++) {
            ci_scan s;
            ci_scan_init(&s);
            ci_scan_feed(&s, body, a);
            ci_scan_feed(&s, body + a, b - a);
            if (ci_scan_feed(&s, body + b, len - b) != expected)
                fail_msg("cut at %zu and %zu of \"%.*s\": expected %d", a, b, (int)len,
                         body, expected);
        }
    free(body);
    assert_every_cut(text, len, expected);
}

#define CUTS3(lit, expected) assert_every_three_cuts(lit, sizeof(lit) - 1, expected)

/* The hosted shell's environments make a body ours as the tool's name does. */
static void test_shell_environments(void **state)
{
    (void)state;
    CUTS3("container_auto", 1);
    CUTS3("container_reference", 1);
    CUTS3("{\"tools\":[{\"type\":\"shell\",\"environment\":{\"type\":\"container_auto\"}}]}", 1);
    CUTS3("{\"tools\":[{\"type\":\"shell\",\"environment\":{\"type\":\"container_reference\","
          "\"container_id\":\"cntr_1\"}}]}", 1);
    CUTS3("xx_container_autoxx", 1);
    CUTS3("container_container_reference", 1);
    CUTS3("container_refcontainer_auto", 1);
    CUTS3("x\0container_auto", 1);
    /* near misses */
    CUTS3("container_autx", 0);
    CUTS3("containerauto", 0);
    CUTS3("container_aut", 0);
    CUTS3("ontainer_auto", 0);
    CUTS3("Container_auto", 0);
    CUTS3("container_Auto", 0);
    CUTS3("container-auto", 0);
    CUTS3("container_referenc", 0);
    CUTS3("container_referencx", 0);
    CUTS3("containerreference", 0);
    CUTS3("container__auto", 0);
    CUTS3("container_ auto", 0);
    CUTS3("{\"tools\":[{\"type\":\"shell\",\"environment\":{\"type\":\"local\"}}],"
          "\"container_id\":\"cntr_1\"}", 0);
    CUTS3("container_aut\0o", 0);
    /* an escaped letter still counts, wherever it is */
    CUTS3("container\\u005fauto", 1);
}

/* Random bodies over the environments' letters agree with the whole-body
 * scan, however they are cut. */
static void test_shell_environments_random(void **state)
{
    static const char alphabet[] = "container_autoreferenc_x";
    static const char *const names[] = { "container_auto", "container_reference" };
    unsigned seed = 4242u;
    int round, found = 0;
    char body[64];
    (void)state;
    for (round = 0; round < 2000; round++) {
        size_t len = (size_t)(round % 64), i;
        int expected;
        for (i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            body[i] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
        }
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 2) {
            const char *n = names[(seed >> 8) % 2];
            size_t nlen = strlen(n);
            if (len >= nlen)
                memcpy(body + (seed >> 4) % (len - nlen + 1), n, nlen);
        }
        expected = ci_body_mentions_tool(body, len);
        found += expected;
        assert_every_cut(body, len, expected);
    }
    assert_true(found > 300);
    assert_true(found < 1700);
}

static void test_escaped_spellings(void **state)
{
    (void)state;
    CUTS("\"code\\u005finterpreter\"", 1);
    CUTS("\"\\u0063ode_interpreter\"", 1);
    CUTS("\"\\u0063\\u006f\\u0064\\u0065\\u005f\\u0069\"", 1);
    CUTS("x\\u005F", 1);                    /* hex digits of either case */
    CUTS("\\u0061", 1);
    CUTS("\\u007a", 1);
    CUTS("\\u007b", 0);
    CUTS("\\u0060", 0);
    CUTS("\\u005e", 0);
    /* what encoders really escape (non-ASCII, controls) does not count */
    CUTS("\"caf\\u00e9 \\u000a\"", 0);
    CUTS("\"line\\nbreak \\\"quoted\\\" tab\\t\"", 0);
    /* an escaped backslash hides what follows it */
    CUTS("\\\\u0061", 0);
    CUTS("\\\\\\u0061", 1);
    CUTS("\\\\\\\\u0061", 0);
    /* a "\u00" escape with other digits is six bytes, whatever they are */
    CUTS("\\u00zz\\u0061", 1);
    CUTS("\\u00e\\u0061", 0);
    /* an escape is judged only with its six bytes there */
    CUTS("\\u006", 0);
    CUTS("abc\\u00", 0);
    CUTS("abc\\", 0);
}

/* A small alphabet that makes names, escapes and near misses frequent. */
static char random_byte(unsigned *seed)
{
    static const char alphabet[] = "code_interprtu0\\5f6aAzx\"";
    *seed = *seed * 1103515245u + 12345u;
    return alphabet[(*seed >> 16) % (sizeof(alphabet) - 1)];
}

static void random_body(char *b, size_t len, unsigned *seed)
{
    size_t i;
    for (i = 0; i < len; i++)
        b[i] = random_byte(seed);
    /* now and then a whole name or escape, somewhere */
    *seed = *seed * 1103515245u + 12345u;
    if ((*seed >> 16) % 3 == 0 && len >= 16)
        memcpy(b + (*seed >> 8) % (len - 15), "code_interpreter", 16);
    else if ((*seed >> 16) % 3 == 1 && len >= 6)
        memcpy(b + (*seed >> 8) % (len - 5), "\\u005f", 6);
}

static void test_random_bodies_agree_with_the_whole_body_scan(void **state)
{
    unsigned seed = 20261202u;
    int round, found = 0;
    char body[96];
    (void)state;
    for (round = 0; round < 3000; round++) {
        size_t len = (size_t)(round % 96);
        int expected;
        random_body(body, len, &seed);
        expected = ci_body_mentions_tool(body, len);
        found += expected;
        assert_every_cut(body, len, expected);
    }
    /* the generator exercises both answers */
    assert_true(found > 300);
    assert_true(found < 2700);
}

/* Plain text with a few fragments that matter, often near the 64-byte
 * blocks' edges: most blocks hold nothing to look at closer. */
static void sparse_body(char *b, size_t len, unsigned *seed)
{
    static const char *const fragments[] = {
        "\\", "\\\\", "\\u", "\\u00", "\\u005f", "\\u0061", "\\u00e9", "\\n",
        "\\\\u0061", "\\u00zz", "_", "code_", "_interpreter", "code_interpreter",
        "code\\u005finterpreter", "\\u0063ode",
    };
    size_t i, n;
    for (i = 0; i < len; i++)
        b[i] = "plain text "[i % 11];
    for (n = 0; n < 1 + len / 60; n++) {
        const char *f;
        size_t flen, at;
        *seed = *seed * 1103515245u + 12345u;
        f = fragments[(*seed >> 16) % (sizeof(fragments) / sizeof(fragments[0]))];
        flen = strlen(f);
        if (flen > len)
            continue;
        *seed = *seed * 1103515245u + 12345u;
        if ((*seed >> 16) % 2)                          /* anywhere */
            at = (*seed >> 8) % (len - flen + 1);
        else                                            /* 8 bytes around an edge */
            at = ((*seed >> 20) % (len / 64 + 1)) * 64 + (*seed >> 8) % 16;
        at = at < 8 ? 0 : at - 8;
        if (at > len - flen)
            at = len - flen;
        memcpy(b + at, f, flen);
    }
}

static void test_sparse_bodies_agree_with_the_whole_body_scan(void **state)
{
    unsigned seed = 7u;
    int round, found = 0;
    char body[400];
    (void)state;
    for (round = 0; round < 1500; round++) {
        size_t len = 60 + (size_t)(round % 340);
        int expected;
        sparse_body(body, len, &seed);
        expected = ci_body_mentions_tool(body, len);
        found += expected;
        assert_every_cut(body, len, expected);
    }
    assert_true(found > 150);
    assert_true(found < 1350);
}

static void test_large_body_in_bucket_sized_pieces(void **state)
{
    static const char line[] = "the model sums each column\\n and plots it ";
    static const char *const names[] = { "code_interpreter", "container_auto",
                                         "container_reference" };
    size_t len = 1 << 20, at, where, name;
    char *body = malloc(len);
    (void)state;
    assert_non_null(body);
    for (at = 0; at + sizeof(line) - 1 <= len; at += sizeof(line) - 1)
        memcpy(body + at, line, sizeof(line) - 1);
    memset(body + at, ' ', len - at);
    assert_int_equal(scan_in_pieces(body, len, 8000), 0);
    assert_int_equal(scan_in_pieces(body, len, 0), 0);
    /* each name across the seam of two 8000-byte pieces */
    for (name = 0; name < 3; name++) {
        size_t nlen = strlen(names[name]);
        for (where = 8000 - nlen + 1; where <= 8000; where++) {
            char saved[20];
            memcpy(saved, body + where, nlen);
            memcpy(body + where, names[name], nlen);
            assert_int_equal(scan_in_pieces(body, len, 8000), 1);
            memcpy(body + where, saved, nlen);
        }
    }
    memcpy(body + len - 6, "\\u005f", 6);
    assert_int_equal(scan_in_pieces(body, len, 8000), 1);
    assert_int_equal(scan_in_pieces(body, len, 7), 1);
    free(body);
}

static void test_found_is_sticky(void **state)
{
    ci_scan s;
    (void)state;
    ci_scan_init(&s);
    assert_int_equal(ci_scan_feed(&s, "code_", 5), 0);
    assert_int_equal(ci_scan_feed(&s, "interpreter", 11), 1);
    assert_int_equal(ci_scan_feed(&s, "nothing", 7), 1);
    assert_int_equal(ci_scan_feed(&s, "", 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_name),
        cmocka_unit_test(test_escaped_spellings),
        cmocka_unit_test(test_shell_environments),
        cmocka_unit_test(test_shell_environments_random),
        cmocka_unit_test(test_random_bodies_agree_with_the_whole_body_scan),
        cmocka_unit_test(test_sparse_bodies_agree_with_the_whole_body_scan),
        cmocka_unit_test(test_large_body_in_bucket_sized_pieces),
        cmocka_unit_test(test_found_is_sticky),
    };
    apr_initialize();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

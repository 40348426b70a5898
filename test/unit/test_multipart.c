/*
 * test_multipart.c - unit tests of the multipart/form-data reader
 * (ci_multipart): the boundary of a Content-Type, the framing of bodies as
 * curl and the OpenAI Node SDK (undici's FormData) send them, part headers,
 * the bounds, and the independence from how the body is split.
 *
 * What the callbacks receive is written to a log: "{name|filename|type}"
 * when a part begins ("~" for a missing value), its data as it is, "{/}"
 * when it ends. Data is merged in the log, so bodies split differently must
 * give the same log; the pieces themselves are checked as they come (never
 * empty, never held back more than the delimiter's length - 1).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE        /* memmem */
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_buf.h"
#include "ci_multipart.h"

/* ======================================================================== */
/* helpers                                                                  */
/* ======================================================================== */

#include "unit_pool.h"

#define LEN(s) (sizeof(s) - 1)
#define NO_BOUND APR_SIZE_MAX

/* A small deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rnd_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 0x2545F4914F6CDD1DULL;
}

static const ci_multipart_limits no_limits = { NO_BOUND, NO_BOUND, NO_BOUND };

/* What the callbacks saw. */
typedef struct rec {
    ci_buf log;
    apr_size_t fed;          /* bytes fed so far, the current piece included */
    apr_size_t body_at;      /* fed when the current part began */
    apr_size_t delivered;    /* data bytes of the current part */
    apr_size_t data_calls;
    int stop_begin, stop_end;   /* stop at this part's begin / end (1-based), 0 never */
    apr_size_t stop_after;      /* stop once this many data bytes came, 0 never */
    apr_size_t total_data;
    int begins, ends;
} rec;

static void log_str(rec *c, const char *s)
{
    ci_buf_append(&c->log, s ? s : "~", strlen(s ? s : "~"));
}

static int on_begin(void *baton, const ci_multipart_part *part)
{
    rec *c = baton;
    assert_non_null(part->name);
    assert_int_equal(part->index, (apr_size_t)c->begins);
    log_str(c, "{");
    log_str(c, part->name);
    log_str(c, "|");
    log_str(c, part->filename);
    log_str(c, "|");
    log_str(c, part->content_type);
    log_str(c, "}");
    c->delivered = 0;
    c->body_at = c->fed;
    c->begins++;
    return c->stop_begin && c->begins == c->stop_begin;
}

static int on_data(void *baton, const ci_multipart_part *part, const char *data,
                   apr_size_t len)
{
    rec *c = baton;
    assert_true(len > 0);
    assert_int_equal(part->index, (apr_size_t)c->begins - 1);
    ci_buf_append(&c->log, data, len);
    c->delivered += len;
    c->data_calls++;
    c->total_data += len;
    return c->stop_after && c->total_data >= c->stop_after;
}

static int on_end(void *baton, const ci_multipart_part *part)
{
    rec *c = baton;
    assert_int_equal(part->index, (apr_size_t)c->begins - 1);
    log_str(c, "{/}");
    c->ends++;
    return c->stop_end && c->ends == c->stop_end;
}

static const ci_multipart_callbacks callbacks = { on_begin, on_data, on_end };

static rec *rec_new(apr_pool_t *p)
{
    rec *c = apr_pcalloc(p, sizeof(*c));
    ci_buf_init(&c->log, p, APR_SIZE_MAX / 2);
    return c;
}

static ci_multipart *reader(apr_pool_t *p, const char *boundary,
                            const ci_multipart_limits *lim, rec *c)
{
    return ci_multipart_create(p, boundary, lim, &callbacks, c);
}

/* Feed one piece, keeping count. */
static ci_multipart_status feed(ci_multipart *r, rec *c, const char *s, apr_size_t n)
{
    c->fed += n;
    return ci_multipart_feed(r, s, n);
}

/* Fed byte by byte, a part's body is held back by at most the delimiter's
 * length - 1 (CRLF "--" boundary, less the byte that would complete it)
 * until its delimiter is complete. Checked after each byte. */
static void check_held_back(const rec *c, const char *text, apr_size_t len,
                            const char *boundary)
{
    const char *delim = apr_pstrcat(c->log.p, "\r\n--", boundary, NULL);
    apr_size_t dlen = strlen(delim);
    const char *end = memmem(text + c->body_at, len - c->body_at, delim, dlen);
    apr_size_t delim_end = end ? (apr_size_t)(end - text) + dlen : len + 1;
    if (c->begins > c->ends && c->fed < delim_end &&
        c->fed - c->body_at - c->delivered > dlen - 1)
        fail_msg("byte by byte: %zu bytes held back after byte %zu",
                 (size_t)(c->fed - c->body_at - c->delivered), (size_t)c->fed);
}

/* Feed TEXT cut at the offsets CUTS (ascending, NCUTS of them). */
static ci_multipart_status feed_cut(ci_multipart *r, rec *c, const char *text,
                                    apr_size_t len, const apr_size_t *cuts, int ncuts)
{
    ci_multipart_status st = CI_MULTIPART_OK;
    apr_size_t at = 0;
    int i;
    for (i = 0; i <= ncuts; i++) {
        apr_size_t end = i < ncuts ? cuts[i] : len;
        st = feed(r, c, text + at, end - at);
        at = end;
    }
    return st;
}

typedef struct outcome {
    const char *log;          /* what the callbacks saw */
    apr_size_t log_len;
    ci_multipart_status feed_st, end_st;
    const char *error;
} outcome;

static outcome run_cut(apr_pool_t *p, const char *boundary, const ci_multipart_limits *lim,
                       const char *text, apr_size_t len, const apr_size_t *cuts, int ncuts)
{
    rec *c = rec_new(p);
    ci_multipart *r = reader(p, boundary, lim, c);
    outcome o;
    o.feed_st = feed_cut(r, c, text, len, cuts, ncuts);
    o.end_st = ci_multipart_end(r);
    o.log = ci_buf_str(&c->log);
    o.log_len = c->log.len;
    o.error = ci_multipart_error(r);
    return o;
}

static void expect(const outcome *o, const char *log, ci_multipart_status feed_st,
                   ci_multipart_status end_st, const char *how)
{
    if (o->log_len != strlen(log) || memcmp(o->log, log, o->log_len))
        fail_msg("%s: the callbacks saw\n  %s\nexpected\n  %s", how, o->log, log);
    if (o->feed_st != feed_st)
        fail_msg("%s: feed status %d, expected %d (%s)", how, o->feed_st, feed_st,
                 o->error ? o->error : "no error");
    if (o->end_st != end_st)
        fail_msg("%s: end status %d, expected %d (%s)", how, o->end_st, end_st,
                 o->error ? o->error : "no error");
    if ((o->error != NULL) != (end_st != CI_MULTIPART_DONE))
        fail_msg("%s: error message '%s' with end status %d", how,
                 o->error ? o->error : "(none)", end_st);
}

/* Read TEXT whole, byte by byte (checking how much is held back), cut at
 * every position, at a sample of pairs of positions (all of them for short
 * texts) and in random pieces: each time the log must be LOG, the last
 * feed's status FEED_ST and the end's END_ST. The error message must not
 * depend on the cuts either. */
static void read_every_way(apr_pool_t *p, const char *boundary,
                           const ci_multipart_limits *lim, const char *text, apr_size_t len,
                           const char *log, ci_multipart_status feed_st,
                           ci_multipart_status end_st)
{
    apr_pool_t *sub;
    apr_size_t a, b, i;
    const char *error;
    char how[96];
    outcome o;
    apr_pool_create(&sub, p);
    o = run_cut(sub, boundary, lim, text, len, NULL, 0);
    expect(&o, log, feed_st, end_st, "whole");
    error = o.error ? apr_pstrdup(p, o.error) : NULL;
    for (a = 0; a <= len; a++) {
        apr_pool_clear(sub);
        o = run_cut(sub, boundary, lim, text, len, &a, 1);
        snprintf(how, sizeof(how), "cut at %zu", (size_t)a);
        expect(&o, log, feed_st, end_st, how);
        if (error && strcmp(o.error, error))
            fail_msg("%s: error '%s', whole '%s'", how, o.error, error);
    }
    for (a = 1; a < len; a++) {
        for (b = a + 1; b < len; b++) {
            apr_size_t cuts[2] = { a, b };
            if (len > 160 && rnd() % (len / 40) != 0)
                continue;          /* a sample: about 40 pairs per position */
            apr_pool_clear(sub);
            o = run_cut(sub, boundary, lim, text, len, cuts, 2);
            snprintf(how, sizeof(how), "cut at %zu and %zu", (size_t)a, (size_t)b);
            expect(&o, log, feed_st, end_st, how);
        }
    }
    {   /* byte by byte */
        rec *c;
        ci_multipart *r;
        apr_pool_clear(sub);
        c = rec_new(sub);
        r = reader(sub, boundary, lim, c);
        for (i = 0; i < len; i++)
            if ((o.feed_st = feed(r, c, text + i, 1)) == CI_MULTIPART_OK)
                check_held_back(c, text, len, boundary);
        o.end_st = ci_multipart_end(r);
        o.log = ci_buf_str(&c->log);
        o.log_len = c->log.len;
        o.error = ci_multipart_error(r);
        expect(&o, log, feed_st, end_st, "byte by byte");
    }
    for (i = 0; i < 50; i++) {   /* random pieces */
        apr_size_t cuts[64];
        int n = 0;
        apr_size_t at = 0;
        while (n < 64 && (at += rnd() % 24 + 1) < len)
            cuts[n++] = at;
        apr_pool_clear(sub);
        o = run_cut(sub, boundary, lim, text, len, cuts, n);
        expect(&o, log, feed_st, end_st, "random pieces");
    }
    apr_pool_destroy(sub);
}

static void read_every_way_s(apr_pool_t *p, const char *boundary,
                             const ci_multipart_limits *lim, const char *text,
                             const char *log, ci_multipart_status feed_st,
                             ci_multipart_status end_st)
{
    read_every_way(p, boundary, lim, text, strlen(text), log, feed_st, end_st);
}

/* ======================================================================== */
/* bodies as clients send them                                              */
/* ======================================================================== */

/* curl -F file=@data.csv -F purpose=assistants (curl 8) */
#define CURL_B "------------------------d74496d66958873e"
static const char curl_ct[] = "multipart/form-data; boundary=" CURL_B;
static const char curl_body[] =
    "--" CURL_B "\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"data.csv\"\r\n"
    "Content-Type: text/csv\r\n"
    "\r\n"
    "id,value\n1,2.5\n2,-3\n"
    "\r\n--" CURL_B "\r\n"
    "Content-Disposition: form-data; name=\"purpose\"\r\n"
    "\r\n"
    "assistants"
    "\r\n--" CURL_B "--\r\n";
static const char curl_log[] =
    "{file|data.csv|text/csv}id,value\n1,2.5\n2,-3\n{/}"
    "{purpose|~|~}assistants{/}";

/* The OpenAI Node SDK: toFile(...) in a FormData, encoded by undici. */
#define SDK_B "----formdata-undici-0123456789"
static const char sdk_ct[] = "multipart/form-data; boundary=" SDK_B;
static const char sdk_body[] =
    "--" SDK_B "\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"report.py\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "import sys\r\nprint(\"--\" + sys.argv[0])\n"
    "\r\n--" SDK_B "--";
static const char sdk_log[] =
    "{file|report.py|application/octet-stream}import sys\r\nprint(\"--\" + sys.argv[0])\n{/}";

static void boundary_of_clients(void **state)
{
    apr_pool_t *p = *state;
    const char *b = NULL, *err = NULL;
    assert_int_equal(ci_multipart_boundary(p, curl_ct, &b, &err), CI_MULTIPART_OK);
    assert_string_equal(b, CURL_B);
    assert_int_equal(ci_multipart_boundary(p, sdk_ct, &b, &err), CI_MULTIPART_OK);
    assert_string_equal(b, SDK_B);
    /* a browser */
    assert_int_equal(ci_multipart_boundary(p, "multipart/form-data; boundary="
                                           "----WebKitFormBoundary7MA4YWxkTrZu0gW", &b,
                                           &err), CI_MULTIPART_OK);
    assert_string_equal(b, "----WebKitFormBoundary7MA4YWxkTrZu0gW");
}

static void boundary_forms(void **state)
{
    apr_pool_t *p = *state;
    static const char b70[] =
        "0123456789012345678901234567890123456789012345678901234567890123456789";
    static const struct { const char *ct, *boundary; } ok[] = {
        { "multipart/form-data; boundary=abc", "abc" },
        { "multipart/form-data; boundary=\"abc\"", "abc" },
        { "Multipart/Form-Data; BOUNDARY=abc", "abc" },
        { "MULTIPART/FORM-DATA;Boundary=\"abc\"", "abc" },
        { "  multipart/form-data ; boundary = abc ; charset=utf-8", "abc" },
        { "multipart/form-data; charset=utf-8; boundary=\"a b\"", "a b" },
        { "multipart/form-data; x=\"; boundary=no\"; boundary=yes", "yes" },
        { "multipart/form-data; boundary=\"gc0p4Jq0M2Yt08jU534c0p\"",
          "gc0p4Jq0M2Yt08jU534c0p" },
        { "multipart/form-data; boundary=----=_Part_0_1.2:3?", "----=_Part_0_1.2:3?" },
        { "multipart/form-data; boundary=\"'()+_,-./:=? x\"", "'()+_,-./:=? x" },
        { "multipart/form-data; boundary=\"a\\\"b\"", NULL },  /* see below */
        { "multipart/form-data;; boundary=a;", "a" },
        { "multipart/form-data; boundary=a\t", "a" },
        { "multipart/form-data; boundary=" "0123456789012345678901234567890123456789"
          "012345678901234567890123456789", b70 },
        { "multipart/form-data; boundary=--", "--" },
        { "multipart/form-data; boundary=1", "1" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        const char *b = NULL, *err = NULL;
        ci_multipart_status st = ci_multipart_boundary(p, ok[i].ct, &b, &err);
        if (!ok[i].boundary) {
            /* an escaped quote is a character no boundary may hold */
            assert_int_equal(st, CI_MULTIPART_BAD_BOUNDARY);
            continue;
        }
        if (st != CI_MULTIPART_OK)
            fail_msg("%s: status %d (%s)", ok[i].ct, st, err);
        assert_string_equal(b, ok[i].boundary);
    }
}

static void boundary_refused(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *ct; ci_multipart_status st; const char *msg; } bad[] = {
        { NULL, CI_MULTIPART_NOT_MULTIPART, "no Content-Type" },
        { "", CI_MULTIPART_NOT_MULTIPART, "not multipart/form-data" },
        { "application/json", CI_MULTIPART_NOT_MULTIPART, "not multipart/form-data" },
        { "multipart/mixed; boundary=abc", CI_MULTIPART_NOT_MULTIPART, "not multipart" },
        { "multipart/form-dataa; boundary=abc", CI_MULTIPART_NOT_MULTIPART, "not multi" },
        { "multipart /form-data; boundary=abc", CI_MULTIPART_NOT_MULTIPART, "not multi" },
        { "multipart/form-data", CI_MULTIPART_NO_BOUNDARY, "has no boundary" },
        { "multipart/form-data;", CI_MULTIPART_NO_BOUNDARY, "has no boundary" },
        { "multipart/form-data; charset=utf-8", CI_MULTIPART_NO_BOUNDARY, "no boundary" },
        { "multipart/form-data; boundaryx=abc", CI_MULTIPART_NO_BOUNDARY, "no boundary" },
        { "multipart/form-data; boundary=", CI_MULTIPART_BAD_BOUNDARY, "malformed" },
        { "multipart/form-data; boundary=\"\"", CI_MULTIPART_BAD_BOUNDARY, "is empty" },
        { "multipart/form-data; boundary=\"abc", CI_MULTIPART_BAD_BOUNDARY, "does not end" },
        { "multipart/form-data; boundary", CI_MULTIPART_BAD_BOUNDARY, "no '='" },
        { "multipart/form-data boundary=abc", CI_MULTIPART_BAD_BOUNDARY, "malformed" },
        { "multipart/form-data; boundary=a b", CI_MULTIPART_BAD_BOUNDARY, "malformed" },
        { "multipart/form-data; boundary=a@b", CI_MULTIPART_BAD_BOUNDARY, "does not allow" },
        { "multipart/form-data; boundary=\"a\\b\"", CI_MULTIPART_BAD_BOUNDARY, "not allow" },
        { "multipart/form-data; boundary=\"ab \"", CI_MULTIPART_BAD_BOUNDARY, "ends with a space" },
        { "multipart/form-data; boundary=\"a\rb\"", CI_MULTIPART_BAD_BOUNDARY, "not allow" },
        { "multipart/form-data; boundary=a; boundary=a", CI_MULTIPART_BAD_BOUNDARY,
          "two boundary" },
        { "multipart/form-data; boundary="
          "01234567890123456789012345678901234567890123456789012345678901234567890",
          CI_MULTIPART_BAD_BOUNDARY, "longer than 70" },
        { "multipart/form-data; boundary=\""
          "01234567890123456789012345678901234567890123456789012345678901234567890\"",
          CI_MULTIPART_BAD_BOUNDARY, "longer than 70" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *b = "?", *err = NULL;
        ci_multipart_status st = ci_multipart_boundary(p, bad[i].ct, &b, &err);
        if (st != bad[i].st)
            fail_msg("%s: status %d, expected %d (%s)", bad[i].ct ? bad[i].ct : "NULL",
                     st, bad[i].st, err ? err : "");
        assert_null(b);
        assert_non_null(err);
        if (!strstr(err, bad[i].msg))
            fail_msg("%s: message '%s' lacks '%s'", bad[i].ct ? bad[i].ct : "NULL", err,
                     bad[i].msg);
    }
    /* ERR may be NULL */
    {
        const char *b;
        assert_int_equal(ci_multipart_boundary(p, "text/plain", &b, NULL),
                         CI_MULTIPART_NOT_MULTIPART);
    }
}

static void curl_upload(void **state)
{
    apr_pool_t *p = *state;
    const char *b;
    rec *c = rec_new(p);
    ci_multipart *r;
    assert_int_equal(ci_multipart_boundary(p, curl_ct, &b, NULL), CI_MULTIPART_OK);
    r = reader(p, b, &no_limits, c);
    assert_int_equal(ci_multipart_feed(r, curl_body, LEN(curl_body)), CI_MULTIPART_DONE);
    assert_string_equal(ci_buf_str(&c->log), curl_log);
    assert_int_equal(ci_multipart_end(r), CI_MULTIPART_DONE);
    assert_null(ci_multipart_error(r));
    assert_int_equal(ci_multipart_parts(r), 2);
    /* each part's data in one call when the body comes in one piece */
    assert_int_equal(c->data_calls, 2);
    read_every_way(p, b, &no_limits, curl_body, LEN(curl_body), curl_log,
                   CI_MULTIPART_DONE, CI_MULTIPART_DONE);
}

static void sdk_upload(void **state)
{
    apr_pool_t *p = *state;
    const char *b;
    assert_int_equal(ci_multipart_boundary(p, sdk_ct, &b, NULL), CI_MULTIPART_OK);
    read_every_way(p, b, &no_limits, sdk_body, LEN(sdk_body), sdk_log,
                   CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    /* with the CRLF undici versions put after the close delimiter */
    read_every_way_s(p, b, &no_limits, apr_pstrcat(p, sdk_body, "\r\n", NULL), sdk_log,
                     CI_MULTIPART_DONE, CI_MULTIPART_DONE);
}

/* ======================================================================== */
/* framing                                                                  */
/* ======================================================================== */

static void preamble_padding_epilogue(void **state)
{
    apr_pool_t *p = *state;
    static const char text[] =
        "This is the preamble.\r\n-- not it\r\n--c not it either\r\n"
        "--b \t \r\n"
        "Content-Disposition: form-data; name=a\r\n\r\n"
        "1\r\n--b\t\r\n"
        "Content-Disposition: form-data; name=b\r\n\r\n"
        "2\r\n--b--  trailing\r\nthe epilogue: --b\r\n\0\xff";
    read_every_way(p, "b", &no_limits, text, LEN(text), "{a|~|~}1{/}{b|~|~}2{/}",
                   CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    /* a preamble ending right where the first boundary starts */
    read_every_way_s(p, "b", &no_limits, "\r\n--b\r\nContent-Disposition: form-data; "
                     "name=x\r\n\r\n\r\n--b--", "{x|~|~}{/}", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    read_every_way_s(p, "b", &no_limits, "-\r\n--b\r\nContent-Disposition: form-data; "
                     "name=x\r\n\r\n\r\n--b--", "{x|~|~}{/}", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    read_every_way_s(p, "b", &no_limits, "--\r\n--b\r\nContent-Disposition: form-data; "
                     "name=x\r\n\r\n\r\n--b--", "{x|~|~}{/}", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    /* no part at all: an empty form */
    read_every_way_s(p, "b", &no_limits, "--b--", "", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    read_every_way_s(p, "b", &no_limits, "--b--\r\n", "", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
}

/* Data that looks like a delimiter without being one. */
static void delimiter_lookalikes(void **state)
{
    apr_pool_t *p = *state;
    static const char *const data[] = {
        "--boundary",                     /* no CRLF before it */
        "x--boundary--",
        "\n--boundary\r\n",               /* LF only */
        "\r--boundary",                   /* CR only */
        "\r\n-boundary",
        "\r\n--boundar",                  /* a prefix, then the delimiter */
        "\r\n--boundarx\r\n--boundar\r\r\n-",
        "\r\r\n\r\n\r\n-\r\n--\r\n--b\r",    /* ends with a CR: the delimiter's starts again */
        "\r\n--BOUNDARY",                 /* boundaries are case-sensitive */
        "\r\n-- boundary",
    };
    apr_size_t i;
    for (i = 0; i < sizeof(data) / sizeof(data[0]); i++) {
        const char *body = apr_pstrcat(p, "--boundary\r\nContent-Disposition: form-data; "
                                       "name=\"f\"; filename=\"x.bin\"\r\n\r\n", data[i],
                                       "\r\n--boundary--", NULL);
        read_every_way_s(p, "boundary", &no_limits, body,
                         apr_pstrcat(p, "{f|x.bin|~}", data[i], "{/}", NULL),
                         CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    }
}

/* A delimiter followed by anything but padding-CRLF or "--" is refused. */
static void delimiter_in_data(void **state)
{
    apr_pool_t *p = *state;
    static const char head[] = "--ab\r\nContent-Disposition: form-data; name=f\r\n\r\n";
    static const struct { const char *rest; ci_multipart_status st; } cases[] = {
        { "data\r\n--abc and more\r\n--ab--", CI_MULTIPART_BAD_DELIMITER },  /* a prefix of the data */
        { "data\r\n--ab-x", CI_MULTIPART_BAD_DELIMITER },
        { "data\r\n--ab \tx", CI_MULTIPART_BAD_DELIMITER },
        { "data\r\n--ab\rx", CI_MULTIPART_BAD_DELIMITER },
        { "data\r\n--ab\n", CI_MULTIPART_BARE_LF },
        { "data\r\n--ab  \n", CI_MULTIPART_BARE_LF },
        { "data\r\n--ab \t-", CI_MULTIPART_BAD_DELIMITER },      /* "--" right after it only */
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *body = apr_pstrcat(p, head, cases[i].rest, NULL);
        rec *c = rec_new(p);
        ci_multipart *r = reader(p, "ab", &no_limits, c);
        read_every_way_s(p, "ab", &no_limits, body, "{f|~|~}data", cases[i].st,
                         cases[i].st);
        ci_multipart_feed(r, body, strlen(body));
        assert_non_null(ci_multipart_error(r));
        if (cases[i].st == CI_MULTIPART_BAD_DELIMITER && i == 0)
            assert_non_null(strstr(ci_multipart_error(r), "followed by neither"));
    }
    /* The same in the first boundary line. */
    read_every_way_s(p, "ab", &no_limits, "--abc\r\n", "", CI_MULTIPART_BAD_DELIMITER,
                     CI_MULTIPART_BAD_DELIMITER);
    read_every_way_s(p, "ab", &no_limits, "x\r\n--ab\n", "", CI_MULTIPART_BARE_LF,
                     CI_MULTIPART_BARE_LF);
}

/* Boundaries that overlap themselves or the delimiter's own dashes. */
static void tricky_boundaries(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *b, *data; } cases[] = {
        { "-", "\r\n-\r\n--x\r\n-- -\r\n--" },
        { "--", "\r\n---\r\n-- --\r\n---x" },
        { "aaa", "\r\n--aa\r\n--aab\r\n--a" },
        { "ab", "abab\r\n--a\r\n--aab\r\n-ab" },
        { "0123456789012345678901234567890123456789012345678901234567890123456789",
          "\r\n--012345678901234567890123456789012345678901234567890123456789012345678" },
        { "a b", "\r\n--a \r\n--a  b" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *b = cases[i].b;
        const char *body = apr_pstrcat(p, "--", b, "\r\nContent-Disposition: form-data; "
                                       "name=f\r\n\r\n", cases[i].data, "\r\n--", b,
                                       "\r\nContent-Disposition: form-data; name=g\r\n\r\n"
                                       "\r\n--", b, "--", NULL);
        read_every_way_s(p, b, &no_limits, body,
                         apr_pstrcat(p, "{f|~|~}", cases[i].data, "{/}{g|~|~}{/}", NULL),
                         CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    }
}

static void empty_parts(void **state)
{
    apr_pool_t *p = *state;
    static const char text[] =
        "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"empty.txt\"\r\n"
        "Content-Type: text/plain\r\n\r\n"
        "\r\n--b\r\nContent-Disposition: form-data; name=\"\"\r\n\r\n"
        "\r\n--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"\"\r\n"
        "Content-Type: application/octet-stream\r\n\r\n"
        "\r\n--b--";
    read_every_way(p, "b", &no_limits, text, LEN(text),
                   "{file|empty.txt|text/plain}{/}{|~|~}{/}{f||application/octet-stream}{/}",
                   CI_MULTIPART_DONE, CI_MULTIPART_DONE);
}

/* The end of the body at every byte of it: TRUNCATED until the close
 * delimiter's second '-'. */
static void truncated_bodies(void **state)
{
    apr_pool_t *p = *state;
    apr_size_t n, close_at = LEN(sdk_body);   /* the body ends with "--" SDK_B "--" */
    for (n = 0; n <= LEN(sdk_body); n++) {
        rec *c = rec_new(p);
        ci_multipart *r = reader(p, SDK_B, &no_limits, c);
        ci_multipart_status st = ci_multipart_feed(r, sdk_body, n);
        if (n < close_at) {
            assert_int_equal(st, CI_MULTIPART_OK);
            assert_int_equal(ci_multipart_end(r), CI_MULTIPART_TRUNCATED);
            assert_non_null(strstr(ci_multipart_error(r), "without its close delimiter"));
            /* it sticks */
            assert_int_equal(ci_multipart_feed(r, "x", 1), CI_MULTIPART_TRUNCATED);
            assert_int_equal(ci_multipart_end(r), CI_MULTIPART_TRUNCATED);
            /* a part cut short was begun but is never ended */
            assert_int_equal(c->ends, 0);
        }
        else {
            assert_int_equal(st, CI_MULTIPART_DONE);
            assert_int_equal(ci_multipart_end(r), CI_MULTIPART_DONE);
        }
    }
    {   /* which message for where it ended */
        static const struct { const char *text, *where; } cases[] = {
            { "", "before its first boundary" },
            { "preamble\r\n--", "before its first boundary" },
            { "--b", "inside a boundary line" },
            { "--b-", "inside a boundary line" },
            { "--b  \r", "inside a boundary line" },
            { "--b\r\nContent-Disposition: form-data; name=a\r\n", "inside the headers" },
            { "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nda", "inside the data" },
            { "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nda\r\n--b",
              "inside a boundary line" },
        };
        apr_size_t i;
        for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            ci_multipart *r = reader(p, "b", &no_limits, rec_new(p));
            ci_multipart_feed(r, cases[i].text, strlen(cases[i].text));
            assert_int_equal(ci_multipart_end(r), CI_MULTIPART_TRUNCATED);
            if (!strstr(ci_multipart_error(r), cases[i].where))
                fail_msg("'%s': '%s'", cases[i].text, ci_multipart_error(r));
        }
    }
    /* the bytes held back at the end are not data */
    read_every_way_s(p, "b", &no_limits,
                     "--b\r\nContent-Disposition: form-data; name=a\r\n\r\ndata\r\n-",
                     "{a|~|~}data", CI_MULTIPART_OK, CI_MULTIPART_TRUNCATED);
}

static void after_done(void **state)
{
    apr_pool_t *p = *state;
    rec *c = rec_new(p);
    ci_multipart *r = reader(p, "b", &no_limits, c);
    assert_int_equal(ci_multipart_feed(r, "--b--", 5), CI_MULTIPART_DONE);
    /* the epilogue, whatever it holds, is not read */
    assert_int_equal(ci_multipart_feed(r, "\r\n--b\r\n\0\n", 9), CI_MULTIPART_DONE);
    assert_int_equal(ci_multipart_end(r), CI_MULTIPART_DONE);
    assert_null(ci_multipart_error(r));
    assert_int_equal(c->log.len, 0);
}

/* ======================================================================== */
/* part headers                                                             */
/* ======================================================================== */

typedef struct hdr_case {
    const char *headers;              /* without the blank line */
    const char *name, *filename, *content_type;
} hdr_case;

static void check_section(apr_pool_t *p, const char *headers, ci_multipart_status want,
                          const char *name, const char *filename, const char *ctype,
                          const char *msg)
{
    const char *section = apr_pstrcat(p, headers, "\r\n", NULL);
    const char *err = NULL;
    ci_multipart_part part;
    ci_multipart_status st = ci_multipart_parse_headers(p, section, strlen(section), &part,
                                                        &err);
    if (st != want)
        fail_msg("%s: status %d, expected %d (%s)", headers, st, want, err ? err : "");
    if (st != CI_MULTIPART_OK) {
        assert_non_null(err);
        if (msg && !strstr(err, msg))
            fail_msg("%s: message '%s' lacks '%s'", headers, err, msg);
        assert_null(part.name);
        return;
    }
    assert_int_equal(part.index, 0);
    assert_string_equal(part.name, name);
#define SAME(got, want_) \
    do { \
        if ((got == NULL) != (want_ == NULL) || (got && strcmp(got, want_))) \
            fail_msg("%s: %s is '%s', expected '%s'", headers, #got, got ? got : "NULL", \
                     want_ ? want_ : "NULL"); \
    } while (0)
    SAME(part.filename, filename);
    SAME(part.content_type, ctype);
#undef SAME
}

static void headers_read(void **state)
{
    apr_pool_t *p = *state;
    static const hdr_case cases[] = {
        { "Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
          "Content-Type: text/plain\r\n", "file", "a.txt", "text/plain" },
        { "Content-Disposition: form-data; name=\"purpose\"\r\n", "purpose", NULL, NULL },
        { "content-disposition:form-data;name=file;filename=a.txt\r\n"
          "CONTENT-TYPE:  text/csv; charset=utf-8  \r\n", "file", "a.txt",
          "text/csv; charset=utf-8" },
        { "Content-Disposition: FORM-DATA; NAME=\"x\"; FileName=\"y\"\r\n", "x", "y", NULL },
        { "Content-Disposition: form-data ; name = \"x\" ; filename = \"y z\" ;\r\n", "x",
          "y z", NULL },
        /* quoted-string escapes: only \" and \\ */
        { "Content-Disposition: form-data; name=\"a\\\"b\"; filename=\"c\\\\d\"\r\n",
          "a\"b", "c\\d", NULL },
        { "Content-Disposition: form-data; name=f; filename=\"C:\\dir\\file.txt\"\r\n",
          "f", "C:\\dir\\file.txt", NULL },
        /* as given: HTML5 escapes, paths, UTF-8, spaces */
        { "Content-Disposition: form-data; name=f; filename=\"a%22b%0Ac.txt\"\r\n", "f",
          "a%22b%0Ac.txt", NULL },
        { "Content-Disposition: form-data; name=f; filename=\"../../etc/passwd\"\r\n", "f", /* check-clone: a hostile name */
          "../../etc/passwd", NULL }, /* check-clone: a hostile name */
        { "Content-Disposition: form-data; name=f; filename=\"r\xC3\xA9sum\xC3\xA9.pdf\"\r\n",
          "f", "r\xC3\xA9sum\xC3\xA9.pdf", NULL },
        { "Content-Disposition: form-data; name=f; filename=\"\"\r\n", "f", "", NULL },
        { "Content-Disposition: form-data; name=\"\"\r\n", "", NULL, NULL },
        { "Content-Disposition: form-data; name=f; filename=\"a;b=c\"\r\n", "f", "a;b=c",
          NULL },
        /* unknown parameters and headers are ignored */
        { "X-Note: ignored\r\nContent-Disposition: form-data; size=12; name=f\r\n"
          "Content-Length: 12\r\nContent-Transfer-Encoding: binary\r\n", "f", NULL, NULL },
        { "Content-Disposition: form-data; name=f\r\nContent-Transfer-Encoding: 8BIT\r\n",
          "f", NULL, NULL },
        { "Content-Disposition: form-data; name=f\r\nContent-Type:\r\n", "f", NULL, "" },
        /* tabs are white space */
        { "Content-Disposition:\tform-data;\tname=f\t\r\n", "f", NULL, NULL },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_section(p, cases[i].headers, CI_MULTIPART_OK, cases[i].name,
                      cases[i].filename, cases[i].content_type, NULL);
}

static void headers_filename_ext(void **state)
{
    apr_pool_t *p = *state;
    static const hdr_case cases[] = {
        { "Content-Disposition: form-data; name=f; filename*=UTF-8''%E2%82%AC%20rates.txt\r\n",
          "f", "\xE2\x82\xAC rates.txt", NULL },
        /* preferred to filename, whichever comes first */
        { "Content-Disposition: form-data; name=f; filename=\"EUR rates.txt\"; "
          "filename*=utf-8''%e2%82%ac%20rates.txt\r\n", "f", "\xE2\x82\xAC rates.txt", NULL },
        { "Content-Disposition: form-data; name=f; filename*=UTF-8''a.txt; "
          "filename=\"b.txt\"\r\n", "f", "a.txt", NULL },
        { "Content-Disposition: form-data; name=f; filename*=UTF-8'en'a%20b\r\n", "f",
          "a b", NULL },
        { "Content-Disposition: form-data; name=f; filename*=UTF-8'en-US'x\r\n", "f", "x",
          NULL },
        { "Content-Disposition: form-data; name=f; filename*=ISO-8859-1''%A3%20rates\r\n",
          "f", "\xC2\xA3 rates", NULL },
        { "Content-Disposition: form-data; name=f; filename*=iso-8859-1''%FF\r\n", "f",
          "\xC3\xBF", NULL },
        { "Content-Disposition: form-data; name=f; filename*=UTF-8''\r\n", "f", "", NULL },
        { "Content-Disposition: form-data; name=f; filename*=UTF-8''%F0%9F%98%80!#$&+-.^_`|~\r\n",
          "f", "\xF0\x9F\x98\x80!#$&+-.^_`|~", NULL },
        /* as given: %2F is a slash, the caller sanitises */
        { "Content-Disposition: form-data; name=f; filename*=UTF-8''..%2F..%2Fx\r\n", "f",
          "../../x", NULL }, /* check-clone: a hostile name */
    };
    static const struct { const char *h; const char *msg; } bad[] = {
        { "filename*=UTF-16''x", "charset" },
        { "filename*=''x", "charset" },
        { "filename*=UTF-8'x", "charset'language'value" },
        { "filename*=x", "charset'language'value" },
        { "filename*=UTF-8'e_n'x", "language tag" },
        { "filename*=UTF-8''%E2%82", "not valid UTF-8" },
        { "filename*=UTF-8''%C3%28", "not valid UTF-8" },
        { "filename*=UTF-8''%ED%A0%80", "not valid UTF-8" },
        { "filename*=UTF-8''a%00b", "NUL" },
        { "filename*=ISO-8859-1''%00", "NUL" },
        { "filename*=UTF-8''%4", "two hex digits" },
        { "filename*=UTF-8''%G0", "two hex digits" },
        { "filename*=UTF-8''a'b", "does not allow" },
        { "filename*=UTF-8''a(b", "does not allow" },
        { "filename*=UTF-8''\xC3\xA9", "does not allow" },
        { "filename*=\"UTF-8''x\"", "quoted" },
        { "filename*=UTF-8''a; filename*=UTF-8''b", "two filename*" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_section(p, cases[i].headers, CI_MULTIPART_OK, cases[i].name,
                      cases[i].filename, cases[i].content_type, NULL);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        check_section(p, apr_pstrcat(p, "Content-Disposition: form-data; name=f; ",
                                     bad[i].h, "\r\n", NULL),
                      CI_MULTIPART_BAD_HEADER, NULL, NULL, NULL, bad[i].msg);
}

static void headers_refused(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *h; ci_multipart_status st; const char *msg; } bad[] = {
        { "", CI_MULTIPART_BAD_HEADER, "no Content-Disposition" },
        { "Content-Type: text/plain\r\n", CI_MULTIPART_BAD_HEADER, "no Content-Disposition" },
        { "Content-Disposition: attachment; name=f\r\n", CI_MULTIPART_BAD_HEADER,
          "not form-data" },
        { "Content-Disposition: form-datax; name=f\r\n", CI_MULTIPART_BAD_HEADER,
          "not form-data" },
        { "Content-Disposition: form-data\r\n", CI_MULTIPART_BAD_HEADER, "has no name" },
        { "Content-Disposition: form-data; filename=a\r\n", CI_MULTIPART_BAD_HEADER,
          "has no name" },
        { "Content-Disposition: form-data; name=a; name=b\r\n", CI_MULTIPART_BAD_HEADER,
          "two name" },
        { "Content-Disposition: form-data; name=a; filename=b; filename=c\r\n",
          CI_MULTIPART_BAD_HEADER, "two filename" },
        { "Content-Disposition: form-data; name=a\r\nContent-Disposition: form-data; "
          "name=a\r\n", CI_MULTIPART_BAD_HEADER, "two Content-Disposition" },
        { "Content-Disposition: form-data; name=a\r\nContent-Type: a/b\r\n"
          "content-type: a/b\r\n", CI_MULTIPART_BAD_HEADER, "two Content-Type" },
        { "Content-Disposition: form-data; name=a\r\nContent-Transfer-Encoding: base64\r\n",
          CI_MULTIPART_BAD_HEADER, "Content-Transfer-Encoding" },
        { "Content-Disposition: form-data; name=\"a\r\n", CI_MULTIPART_BAD_HEADER,
          "does not end" },
        { "Content-Disposition: form-data; name=a b\r\n", CI_MULTIPART_BAD_HEADER,
          "not preceded by ';'" },
        { "Content-Disposition: form-data; name\r\n", CI_MULTIPART_BAD_HEADER, "no '='" },
        { "Content-Disposition: form-data; name=\r\n", CI_MULTIPART_BAD_HEADER, "no value" },
        { "Content-Disposition: form-data; =a\r\n", CI_MULTIPART_BAD_HEADER, "not a token" },
        { "Content-Disposition: form-data, name=a\r\n", CI_MULTIPART_BAD_HEADER,
          "not preceded" },
        /* folding, syntax, controls */
        { "Content-Disposition: form-data;\r\n name=a\r\n", CI_MULTIPART_BAD_HEADER,
          "folded" },
        { "Content-Disposition: form-data; name=a\r\n\tx\r\n", CI_MULTIPART_BAD_HEADER,
          "folded" },
        { "Content-Disposition form-data; name=a\r\n", CI_MULTIPART_BAD_HEADER,
          "token name, ':'" },
        { "Content-Disposition : form-data; name=a\r\n", CI_MULTIPART_BAD_HEADER,
          "token name, ':'" },
        { ": x\r\nContent-Disposition: form-data; name=a\r\n", CI_MULTIPART_BAD_HEADER,
          "no name before" },
        { "Content-Disposition: form-data; name=\"a\x01\"\r\n", CI_MULTIPART_BAD_HEADER,
          "control character" },
        { "Content-Disposition: form-data; name=a\x7F\r\n", CI_MULTIPART_BAD_HEADER,
          "control character" },
        /* bytes */
        { "Content-Disposition: form-data; name=a\n", CI_MULTIPART_BARE_LF, "bare LF" },
        { "Content-Disposition: form-data; name=a\rb\r\n", CI_MULTIPART_BAD_HEADER,
          "CR not followed by LF" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        check_section(p, bad[i].h, bad[i].st, NULL, NULL, NULL, bad[i].msg);
    {   /* a NUL, the section's own end, bytes after it */
        ci_multipart_part part;
        const char *err = NULL;
        static const char nul[] = "Content-Disposition: form-data; name=\"a\0b\"\r\n\r\n";
        assert_int_equal(ci_multipart_parse_headers(p, nul, LEN(nul), &part, &err),
                         CI_MULTIPART_BAD_HEADER);
        assert_non_null(strstr(err, "NUL"));
        assert_int_equal(ci_multipart_parse_headers(p, "Content-Disposition: form-data; "
                                                    "name=a\r\n", 40, &part, &err),
                         CI_MULTIPART_BAD_HEADER);
        assert_non_null(strstr(err, "blank line"));
        assert_int_equal(ci_multipart_parse_headers(p, "\r\n\r\n", 4, &part, &err),
                         CI_MULTIPART_BAD_HEADER);
        assert_non_null(strstr(err, "follow the blank line"));
        assert_int_equal(ci_multipart_parse_headers(p, "", 0, &part, NULL),
                         CI_MULTIPART_BAD_HEADER);
        assert_int_equal(ci_multipart_parse_headers(p, "\r", 1, &part, NULL),
                         CI_MULTIPART_BAD_HEADER);
    }
}

/* The reader refuses the same, naming the part, however it is split. */
static void headers_in_stream(void **state)
{
    apr_pool_t *p = *state;
    static const char ok_part[] = "--b\r\nContent-Disposition: form-data; name=a\r\n\r\n1"
                                  "\r\n--b\r\n";
    /* '@' stands for a NUL byte */
    static const struct { const char *second; ci_multipart_status st; const char *msg; } cases[] = {
        { "Content-Disposition: form-data; name=c\n\n", CI_MULTIPART_BARE_LF, "bare LF" },
        { "Content-Disposition: form-data; name=c\r\n\n", CI_MULTIPART_BARE_LF, "bare LF" },
        { "Content-Disposition: form-data;\r\n name=c\r\n\r\n", CI_MULTIPART_BAD_HEADER,
          "folded" },
        { "Content-Disposition: form-data; name=\"c@\"\r\n\r\n", CI_MULTIPART_BAD_HEADER,
          "NUL" },
        { "Content-Disposition: form-data; name=c\r\r\n\r\n", CI_MULTIPART_BAD_HEADER,
          "CR not followed" },
        { "Content-Disposition: form-data; name=c\r\n\rx", CI_MULTIPART_BAD_HEADER,
          "CR not followed" },
        { "\r\n", CI_MULTIPART_BAD_HEADER, "no Content-Disposition" },
        { "Content-Type: text/plain\r\n\r\n", CI_MULTIPART_BAD_HEADER,
          "no Content-Disposition" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *body = apr_pstrcat(p, ok_part, cases[i].second, "zzzz", NULL), *at;
        apr_size_t len = strlen(body);
        ci_multipart *r = reader(p, "b", &no_limits, rec_new(p));
        if ((at = strchr(body, '@')))
            *at = '\0';
        read_every_way(p, "b", &no_limits, body, len, "{a|~|~}1{/}", cases[i].st,
                       cases[i].st);
        ci_multipart_feed(r, body, len);
        if (!strstr(ci_multipart_error(r), cases[i].msg) ||
            !strstr(ci_multipart_error(r), "part 2 "))
            fail_msg("case %zu: '%s'", (size_t)i, ci_multipart_error(r));
        assert_int_equal(ci_multipart_parts(r), 1);
    }
}

/* ======================================================================== */
/* bounds                                                                   */
/* ======================================================================== */

static void bound_header(void **state)
{
    apr_pool_t *p = *state;
    static const char section[] = "Content-Disposition: form-data; name=a\r\n\r\n";
    const char *body = apr_pstrcat(p, "--b\r\n", section, "x\r\n--b\r\n", section,
                                   "y\r\n--b--", NULL);
    ci_multipart_limits lim = { LEN(section), NO_BOUND, NO_BOUND };
    read_every_way_s(p, "b", &lim, body, "{a|~|~}x{/}{a|~|~}y{/}", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    lim.max_header = LEN(section) - 1;    /* the blank line's LF is one too many */
    read_every_way_s(p, "b", &lim, body, "", CI_MULTIPART_HEADER_TOO_LARGE,
                     CI_MULTIPART_HEADER_TOO_LARGE);
    {
        ci_multipart *r = reader(p, "b", &lim, rec_new(p));
        ci_multipart_feed(r, body, strlen(body));
        assert_string_equal(ci_multipart_error(r), "part 1 of the multipart body: the "
                                                   "headers are longer than 41 bytes");
    }
    /* a section without its end is refused as soon as it passes */
    lim.max_header = 10;
    read_every_way_s(p, "b", &lim, "--b\r\nContent-Disposition", "",
                     CI_MULTIPART_HEADER_TOO_LARGE, CI_MULTIPART_HEADER_TOO_LARGE);
    read_every_way_s(p, "b", &lim, "--b\r\nContent-Di", "", CI_MULTIPART_OK,
                     CI_MULTIPART_TRUNCATED);
}

/* N bytes C. */
static char *repeat(apr_pool_t *p, char c, apr_size_t n)
{
    char *s = apr_palloc(p, n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static void bound_preamble_and_padding(void **state)
{
    apr_pool_t *p = *state;
    static const char part[] = "Content-Disposition: form-data; name=a\r\n\r\n\r\n--b--";
    ci_multipart_limits lim = { 50, NO_BOUND, NO_BOUND };
    /* 50 bytes of preamble, then the first boundary: its CRLF is not counted */
    const char *pre50 = apr_pstrcat(p, repeat(p, 'x', 49), "\r", NULL);
    const char *body = apr_pstrcat(p, pre50, "\r\n--b\r\n", part, NULL);
    read_every_way_s(p, "b", &lim, body, "{a|~|~}{/}", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    body = apr_pstrcat(p, "-", pre50, "\r\n--b\r\n", part, NULL);
    read_every_way_s(p, "b", &lim, body, "", CI_MULTIPART_HEADER_TOO_LARGE,
                     CI_MULTIPART_HEADER_TOO_LARGE);
    {
        ci_multipart *r = reader(p, "b", &lim, rec_new(p));
        ci_multipart_feed(r, body, strlen(body));
        assert_non_null(strstr(ci_multipart_error(r), "preamble"));
    }
    /* a preamble that looks like the start of a delimiter counts once it is not */
    read_every_way_s(p, "b", &lim, apr_pstrcat(p, pre50, "\n--x", NULL), "",
                     CI_MULTIPART_HEADER_TOO_LARGE, CI_MULTIPART_HEADER_TOO_LARGE);
    read_every_way_s(p, "b", &lim, apr_pstrcat(p, pre50, "\n--b", NULL), "",
                     CI_MULTIPART_OK, CI_MULTIPART_TRUNCATED);
    /* 50 bytes of padding, then 51 */
    body = apr_pstrcat(p, "--b", repeat(p, ' ', 40), repeat(p, '\t', 10), "\r\n", part,
                       NULL);
    read_every_way_s(p, "b", &lim, body, "{a|~|~}{/}", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    body = apr_pstrcat(p, "--b", repeat(p, ' ', 40), repeat(p, '\t', 10), " \r\n", part,
                       NULL);
    read_every_way_s(p, "b", &lim, body, "", CI_MULTIPART_HEADER_TOO_LARGE,
                     CI_MULTIPART_HEADER_TOO_LARGE);
}

static void bound_parts(void **state)
{
    apr_pool_t *p = *state;
    static const char body[] =
        "--b\r\nContent-Disposition: form-data; name=a\r\n\r\n1"
        "\r\n--b\r\nContent-Disposition: form-data; name=b\r\n\r\n2"
        "\r\n--b\r\nContent-Disposition: form-data; name=c\r\n\r\n3"
        "\r\n--b--";
    ci_multipart_limits lim = { NO_BOUND, 3, NO_BOUND };
    read_every_way(p, "b", &lim, body, LEN(body), "{a|~|~}1{/}{b|~|~}2{/}{c|~|~}3{/}",
                   CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    lim.max_parts = 2;
    read_every_way(p, "b", &lim, body, LEN(body), "{a|~|~}1{/}{b|~|~}2{/}",
                   CI_MULTIPART_TOO_MANY_PARTS, CI_MULTIPART_TOO_MANY_PARTS);
    {
        ci_multipart *r = reader(p, "b", &lim, rec_new(p));
        ci_multipart_feed(r, body, LEN(body));
        assert_string_equal(ci_multipart_error(r), "the multipart body has more than 2 parts");
        assert_int_equal(ci_multipart_parts(r), 2);
    }
    /* the close delimiter after the last allowed part is fine */
    lim.max_parts = 0;
    read_every_way_s(p, "b", &lim, "--b--", "", CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    read_every_way_s(p, "b", &lim, "--b\r\n", "", CI_MULTIPART_TOO_MANY_PARTS,
                     CI_MULTIPART_TOO_MANY_PARTS);
    read_every_way_s(p, "b", &lim, "--b\r", "", CI_MULTIPART_OK, CI_MULTIPART_TRUNCATED);
}

static void bound_body(void **state)
{
    apr_pool_t *p = *state;
    static const char head[] = "--b\r\nContent-Disposition: form-data; name=f; "
                               "filename=x\r\n\r\n";
    const char *body = apr_pstrcat(p, head, "0123456789\r\n--b\r\n", head + 5,
                                   "abcdefghij\r\n--b--", NULL);
    ci_multipart_limits lim = { NO_BOUND, NO_BOUND, 10 };
    read_every_way_s(p, "b", &lim, body, "{f|x|~}0123456789{/}{f|x|~}abcdefghij{/}",
                     CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    /* one byte past: the part up to its bound, then the refusal */
    lim.max_body = 9;
    read_every_way_s(p, "b", &lim, body, "{f|x|~}012345678", CI_MULTIPART_PART_TOO_LARGE,
                     CI_MULTIPART_PART_TOO_LARGE);
    {
        ci_multipart *r = reader(p, "b", &lim, rec_new(p));
        ci_multipart_feed(r, body, strlen(body));
        assert_string_equal(ci_multipart_error(r), "part 1 of the multipart body: "
                                                   "larger than 9 bytes");
    }
    /* the second part one byte larger */
    lim.max_body = 10;
    body = apr_pstrcat(p, head, "0123456789\r\n--b\r\n", head + 5, "abcdefghijk\r\n--b--",
                       NULL);
    read_every_way_s(p, "b", &lim, body, "{f|x|~}0123456789{/}{f|x|~}abcdefghij",
                     CI_MULTIPART_PART_TOO_LARGE, CI_MULTIPART_PART_TOO_LARGE);
    /* bytes held back count once they are data: "0123456\r\n-x" is 11 */
    body = apr_pstrcat(p, head, "0123456\r\n-x\r\n--b--", NULL);
    read_every_way_s(p, "b", &lim, body, "{f|x|~}0123456\r\n-", CI_MULTIPART_PART_TOO_LARGE,
                     CI_MULTIPART_PART_TOO_LARGE);
    lim.max_body = 11;
    read_every_way_s(p, "b", &lim, body, "{f|x|~}0123456\r\n-x{/}", CI_MULTIPART_DONE,
                     CI_MULTIPART_DONE);
    /* zero bytes allowed: only empty parts */
    lim.max_body = 0;
    read_every_way_s(p, "b", &lim, apr_pstrcat(p, head, "\r\n--b--", NULL), "{f|x|~}{/}",
                     CI_MULTIPART_DONE, CI_MULTIPART_DONE);
    read_every_way_s(p, "b", &lim, apr_pstrcat(p, head, "\r\r\n--b--", NULL), "{f|x|~}",
                     CI_MULTIPART_PART_TOO_LARGE, CI_MULTIPART_PART_TOO_LARGE);
}

/* ======================================================================== */
/* callbacks                                                                */
/* ======================================================================== */

static void stop_from_callbacks(void **state)
{
    apr_pool_t *p = *state;
    int which;
    for (which = 0; which < 5; which++) {
        rec *c = rec_new(p);
        ci_multipart *r = reader(p, CURL_B, &no_limits, c);
        const char *want;
        switch (which) {
        case 0: c->stop_begin = 1; want = "{file|data.csv|text/csv}"; break;
        case 1: c->stop_begin = 2; want = "{file|data.csv|text/csv}id,value\n1,2.5\n2,-3\n{/}"
                                          "{purpose|~|~}"; break;
        case 2: c->stop_end = 1; want = "{file|data.csv|text/csv}id,value\n1,2.5\n2,-3\n{/}"; break;
        case 3: c->stop_end = 2; want = curl_log; break;
        default: c->stop_after = 1; want = "{file|data.csv|text/csv}id,value\n1,2.5\n2,-3\n"; break;
        }
        assert_int_equal(ci_multipart_feed(r, curl_body, LEN(curl_body)),
                         CI_MULTIPART_STOPPED);
        assert_string_equal(ci_buf_str(&c->log), want);
        assert_string_equal(ci_multipart_error(r), "the multipart reader was stopped by "
                                                   "its caller");
        assert_int_equal(ci_multipart_feed(r, "x", 1), CI_MULTIPART_STOPPED);
        assert_int_equal(ci_multipart_end(r), CI_MULTIPART_STOPPED);
    }
    {   /* no callbacks at all */
        ci_multipart *r = ci_multipart_create(p, CURL_B, &no_limits, NULL, NULL);
        assert_int_equal(ci_multipart_feed(r, curl_body, LEN(curl_body)), CI_MULTIPART_DONE);
        assert_int_equal(ci_multipart_parts(r), 2);
    }
}

static void bad_boundary_reader(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bad[] = {
        "", "a\r", "ab ", "a@b", NULL,
        "01234567890123456789012345678901234567890123456789012345678901234567890",
    };
    apr_size_t i;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ci_multipart *r = reader(p, bad[i], &no_limits, rec_new(p));
        assert_int_equal(ci_multipart_feed(r, "--b--", 5), CI_MULTIPART_BAD_BOUNDARY);
        assert_int_equal(ci_multipart_end(r), CI_MULTIPART_BAD_BOUNDARY);
        assert_non_null(ci_multipart_error(r));
    }
}

/* ======================================================================== */
/* size                                                                     */
/* ======================================================================== */

static void many_small_parts(void **state)
{
    apr_pool_t *p = *state;
    ci_multipart_limits lim = { 256, 5000, 64 };
    rec *c = rec_new(p);
    ci_multipart *r = reader(p, SDK_B, &lim, c);
    apr_size_t fp = 0;
    char buf[256];
    int i, n;
    assert_int_equal(ci_multipart_feed(r, "--" SDK_B, LEN(SDK_B) + 2), CI_MULTIPART_OK);
    for (i = 0; i < 5000; i++) {
        n = snprintf(buf, sizeof(buf), "\r\nContent-Disposition: form-data; name=\"f%d\"%s\r\n"
                     "\r\nvalue %d\r\n--" SDK_B, i, i % 2 ? "; filename=\"x.txt\"" : "", i);
        assert_int_equal(ci_multipart_feed(r, buf, (apr_size_t)n), CI_MULTIPART_OK);
        if (i == 20)
            fp = ci_multipart_footprint(r);
        if (i % 500 == 499)
            ci_buf_clear(&c->log);
    }
    assert_int_equal(ci_multipart_feed(r, "--\r\n", 4), CI_MULTIPART_DONE);
    assert_int_equal(c->begins, 5000);
    assert_int_equal(c->ends, 5000);
    assert_int_equal(ci_multipart_parts(r), 5000);
    /* the buffers are reused: no growth after the first parts */
    assert_int_equal(ci_multipart_footprint(r), fp);
    assert_true(fp <= 2 * 256 + 93);
    /* one more part is one too many */
    r = reader(p, "b", &(ci_multipart_limits){ 256, 5000, 64 }, rec_new(p));
    ci_multipart_feed(r, "--b", 3);
    for (i = 0; i < 5000; i++)
        assert_int_equal(ci_multipart_feed(r, "\r\nContent-Disposition: form-data; name=x"
                                              "\r\n\r\n\r\n--b", 49), CI_MULTIPART_OK);
    assert_int_equal(ci_multipart_feed(r, "\r\n", 2), CI_MULTIPART_TOO_MANY_PARTS);
}

static uint64_t fnv1a(uint64_t h, const char *s, apr_size_t n)
{
    apr_size_t i;
    for (i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

typedef struct sum_rec {
    uint64_t hash;
    apr_size_t bytes, calls, biggest;
    int begins, ends;
} sum_rec;

static int sum_begin(void *baton, const ci_multipart_part *part)
{
    sum_rec *s = baton;
    assert_string_equal(part->filename, "random.bin");
    s->begins++;
    return 0;
}

static int sum_data(void *baton, const ci_multipart_part *part, const char *data,
                    apr_size_t len)
{
    sum_rec *s = baton;
    s->hash = fnv1a(s->hash, data, len);
    s->bytes += len;
    s->calls++;
    if (len > s->biggest)
        s->biggest = len;
    return 0;
}

static int sum_end(void *baton, const ci_multipart_part *part)
{
    ((sum_rec *)baton)->ends++;
    return 0;
}

/* Several MB of random bytes (with many near-delimiters mixed in), fed in
 * random pieces: the callbacks get every byte, in order. */
static void big_binary_part(void **state)
{
    apr_pool_t *p = *state;
    static const char head[] = "--" SDK_B "\r\nContent-Disposition: form-data; "
                               "name=\"file\"; filename=\"random.bin\"\r\n"
                               "Content-Type: application/octet-stream\r\n\r\n";
    static const char tail[] = "\r\n--" SDK_B "--\r\n";
    static const char delim[] = "\r\n--" SDK_B;
    const apr_size_t size = 6 * 1024 * 1024 + 7;
    ci_multipart_callbacks cb = { sum_begin, sum_data, sum_end };
    ci_multipart_limits lim = { 1024, 1, size };
    apr_size_t total = LEN(head) + size + LEN(tail), i, at;
    char *body = apr_palloc(p, total), *data = body + LEN(head);
    uint64_t want;
    sum_rec s = { 1469598103934665603ULL, 0, 0, 0, 0, 0 };
    ci_multipart *r;
    ci_multipart_status st = CI_MULTIPART_OK;
    memcpy(body, head, LEN(head));
    for (i = 0; i < size; i += 8) {
        uint64_t x = rnd();
        memcpy(data + i, &x, size - i < 8 ? size - i : 8);
    }
    /* every 4 KiB or so, a delimiter cut short and one with a wrong byte */
    for (i = 100; i + LEN(delim) < size; i += 4096 + rnd() % 512) {
        apr_size_t k = (apr_size_t)(rnd() % (LEN(delim) - 1)) + 1;
        memcpy(data + i, delim, k);
        if (rnd() % 2) {
            memcpy(data + i, delim, LEN(delim));
            data[i + 1 + rnd() % (LEN(delim) - 1)] ^= 0x20;
        }
    }
    memcpy(data + size, tail, LEN(tail));
    assert_null(memmem(data, size, delim, LEN(delim)));
    want = fnv1a(1469598103934665603ULL, data, size);
    r = ci_multipart_create(p, SDK_B, &lim, &cb, &s);
    for (at = 0; at < total;) {
        apr_size_t n = rnd() % 4 == 0 ? (apr_size_t)(rnd() % 65536) + 1
                                       : (apr_size_t)(rnd() % 300) + 1;
        if (n > total - at)
            n = total - at;
        st = ci_multipart_feed(r, body + at, n);
        at += n;
    }
    assert_int_equal(st, CI_MULTIPART_DONE);
    assert_int_equal(ci_multipart_end(r), CI_MULTIPART_DONE);
    assert_int_equal(s.begins, 1);
    assert_int_equal(s.ends, 1);
    assert_int_equal(s.bytes, size);
    assert_true(s.hash == want);
    assert_true(ci_multipart_footprint(r) <= 2 * 1024 + 93);
    print_message("%zu bytes in %zu calls (at most %zu at once), footprint %zu bytes\n",
                  (size_t)s.bytes, (size_t)s.calls, (size_t)s.biggest,
                  (size_t)ci_multipart_footprint(r));
    /* whole, in one call: one data call */
    memset(&s, 0, sizeof(s));
    s.hash = 1469598103934665603ULL;
    r = ci_multipart_create(p, SDK_B, &lim, &cb, &s);
    assert_int_equal(ci_multipart_feed(r, body, total), CI_MULTIPART_DONE);
    assert_true(s.hash == want);
    assert_int_equal(s.calls, 1);
    /* and one byte over the bound */
    lim.max_body = size - 1;
    memset(&s, 0, sizeof(s));
    r = ci_multipart_create(p, SDK_B, &lim, &cb, &s);
    assert_int_equal(ci_multipart_feed(r, body, total), CI_MULTIPART_PART_TOO_LARGE);
    assert_int_equal(s.bytes, size - 1);
}

/* ======================================================================== */

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(boundary_of_clients),
        TEST(boundary_forms),
        TEST(boundary_refused),
        TEST(curl_upload),
        TEST(sdk_upload),
        TEST(preamble_padding_epilogue),
        TEST(delimiter_lookalikes),
        TEST(delimiter_in_data),
        TEST(tricky_boundaries),
        TEST(empty_parts),
        TEST(truncated_bodies),
        TEST(after_done),
        TEST(headers_read),
        TEST(headers_filename_ext),
        TEST(headers_refused),
        TEST(headers_in_stream),
        TEST(bound_header),
        TEST(bound_preamble_and_padding),
        TEST(bound_parts),
        TEST(bound_body),
        TEST(stop_from_callbacks),
        TEST(bad_boundary_reader),
        TEST(many_small_parts),
        TEST(big_binary_part),
    };
    int failed;
    apr_initialize();
    failed = cmocka_run_group_tests_name("ci_multipart", tests, NULL, NULL);
    apr_terminate();
    return failed ? 1 : 0;
}

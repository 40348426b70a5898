/*
 * test_stream_reader.c - unit tests of the readers of the upstream model's
 * stream: the server-sent-event reader (ci_sse_reader) and the incremental
 * decoder of a function call's code (ci_code_decoder).
 *
 * Both are fed their input split every way the tests can afford (at every
 * byte position, at every pair of positions, byte by byte, in random
 * pieces), and what they produce must not depend on the split. The code
 * decoder is compared with json-c decoding the whole arguments text.
 *
 * The recorded OpenAI stream the project carries (test/spec/recorded, or
 * CI_SPEC_DIR's recorded/) is replayed; without it that test is skipped
 * (and fails under CI=true).
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
#include <apr_pools.h>
#include <apr_strings.h>
#include <apr_tables.h>
#include <json-c/json.h>

#include "ci_json.h"
#include "ci_sse_reader.h"
#include "ci_code_decoder.h"

/* ======================================================================== */
/* helpers                                                                  */
/* ======================================================================== */

#include "unit_pool.h"

/* A small deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rnd_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 0x2545F4914F6CDD1DULL;
}

static int utf8_whole(const char *s, apr_size_t n)
{
    return ci_utf8_valid_prefix(s, n) == n;
}

/* ======================================================================== */
/* SSE reader                                                               */
/* ======================================================================== */

typedef struct got_event {
    const char *event, *data, *id;
    apr_size_t data_len;
} got_event;

typedef struct collector {
    apr_pool_t *p;
    apr_array_header_t *events;   /* got_event */
    int stop_at;                  /* return 1 on this event (1-based), 0 never */
} collector;

static int collect(void *baton, const ci_sse_event *ev)
{
    collector *c = baton;
    got_event *g = apr_array_push(c->events);
    assert_int_equal(ev->event[ev->event_len], '\0');
    assert_int_equal(ev->data[ev->data_len], '\0');
    assert_true(ev->event_len > 0);
    g->event = apr_pstrmemdup(c->p, ev->event, ev->event_len);
    g->data = apr_pstrmemdup(c->p, ev->data, ev->data_len);
    g->data_len = ev->data_len;
    g->id = apr_pstrdup(c->p, ev->id);
    return c->stop_at && c->events->nelts == c->stop_at;
}

static collector *collector_new(apr_pool_t *p)
{
    collector *c = apr_pcalloc(p, sizeof(*c));
    c->p = p;
    c->events = apr_array_make(p, 8, sizeof(got_event));
    return c;
}

/* An expected event; a NULL event ends a list. */
typedef struct want_event {
    const char *event, *data, *id;
} want_event;

static void check_events(const collector *c, const want_event *want, const char *how)
{
    int i;
    for (i = 0; want[i].event; i++) {
        const got_event *g;
        if (i >= c->events->nelts)
            fail_msg("%s: %d events, expected more (next: %s)", how,
                     c->events->nelts, want[i].event);
        g = &APR_ARRAY_IDX(c->events, i, got_event);
        if (strcmp(g->event, want[i].event) || g->data_len != strlen(want[i].data) ||
            memcmp(g->data, want[i].data, g->data_len) ||
            strcmp(g->id, want[i].id ? want[i].id : ""))
            fail_msg("%s: event %d is [%s|%s|%s], expected [%s|%s|%s]", how, i,
                     g->event, g->data, g->id, want[i].event, want[i].data,
                     want[i].id ? want[i].id : "");
    }
    if (c->events->nelts != i)
        fail_msg("%s: %d events, expected %d", how, c->events->nelts, i);
}

/* Feed TEXT cut at the offsets CUTS (ascending, NCUTS of them); returns the
 * status of the last feed. */
static ci_sse_read_status feed_cut(ci_sse_reader *r, const char *text, apr_size_t len,
                                   const apr_size_t *cuts, int ncuts)
{
    ci_sse_read_status st = CI_SSE_READ_OK;
    apr_size_t at = 0;
    int i;
    for (i = 0; i <= ncuts; i++) {
        apr_size_t end = i < ncuts ? cuts[i] : len;
        st = ci_sse_reader_feed(r, text + at, end - at);
        at = end;
    }
    return st;
}

static ci_sse_read_status feed_bytes(ci_sse_reader *r, const char *text, apr_size_t len)
{
    ci_sse_read_status st = CI_SSE_READ_OK;
    apr_size_t i;
    for (i = 0; i < len; i++)
        st = ci_sse_reader_feed(r, text + i, 1);
    return st;
}

/* Read TEXT whole, byte by byte, cut at every position and at every pair of
 * positions: each time the events must be WANT, the last feed's status
 * FEED_ST and the end's status END_ST. */
static void read_every_way(apr_pool_t *p, const char *text, apr_size_t len,
                           apr_size_t max_event, apr_size_t max_round,
                           const want_event *want, ci_sse_read_status feed_st,
                           ci_sse_read_status end_st)
{
    apr_pool_t *sub;
    apr_size_t a, b;
    apr_pool_create(&sub, p);
    for (a = 0; a <= len; a++) {
        for (b = a; b <= len; b++) {
            apr_size_t cuts[2] = { a, b };
            collector *c;
            ci_sse_reader *r;
            ci_sse_read_status st;
            char how[64];
            apr_pool_clear(sub);
            c = collector_new(sub);
            r = ci_sse_reader_create(sub, max_event, max_round, collect, c);
            st = feed_cut(r, text, len, cuts, 2);
            snprintf(how, sizeof(how), "cut at %zu and %zu", (size_t)a, (size_t)b);
            check_events(c, want, how);
            if (st != feed_st)
                fail_msg("%s: status %d, expected %d", how, st, feed_st);
            assert_int_equal(ci_sse_reader_end(r), end_st);
        }
    }
    {
        collector *c = collector_new(sub);
        ci_sse_reader *r = ci_sse_reader_create(sub, max_event, max_round, collect, c);
        assert_int_equal(feed_bytes(r, text, len), feed_st);
        check_events(c, want, "byte by byte");
        assert_int_equal(ci_sse_reader_end(r), end_st);
    }
    apr_pool_destroy(sub);
}

#define LEN(s) (sizeof(s) - 1)

static void sse_basic(void **state)
{
    apr_pool_t *p = *state;
    static const char text[] =
        "event: response.created\n"
        "data: {\"type\":\"response.created\",\"sequence_number\":0}\n\n";
    static const want_event want[] = {
        { "response.created", "{\"type\":\"response.created\",\"sequence_number\":0}", NULL },
        { NULL, NULL, NULL }
    };
    collector *c = collector_new(p);
    ci_sse_reader *r = ci_sse_reader_create(p, 1024, 4096, collect, c);
    assert_int_equal(ci_sse_reader_feed(r, text, LEN(text)), CI_SSE_READ_OK);
    check_events(c, want, "whole");
    assert_int_equal(ci_sse_reader_end(r), CI_SSE_READ_OK);
    assert_int_equal(ci_sse_reader_events(r), 1);
    assert_null(ci_sse_reader_error(r));
}

/* A stream with every feature, read split at every pair of positions. */
static void sse_every_split(void **state)
{
    static const char text[] =
        "\xEF\xBB\xBF"                              /* BOM */
        ": keepalive\r\n\r\n"                       /* a comment block: no event */
        "event: response.output_text.delta\r\n"
        "data: {\"delta\":\"a\"}\r\n\r\n"
        "data: first\rdata\rdata:  two spaces\r\r"  /* CR line ends, joined data */
        "id: 42\n: mid-event comment\nevent: x\nevent: y\ndata:no-space\n\n"
        "retry: 10\nfoo: bar\ndata: é😀\n\n"       /* ignored fields, UTF-8 */
        "id\ndata: reset id\n\n"
        "event: dangling\n\n"                       /* no data: nothing */
        "data: after\n\n";
    static const want_event want[] = {
        { "response.output_text.delta", "{\"delta\":\"a\"}", NULL },
        { "message", "first\n\n two spaces", NULL },
        { "y", "no-space", "42" },
        { "message", "é😀", "42" },
        { "message", "reset id", "" },
        { "message", "after", "" },
        { NULL, NULL, NULL }
    };
    read_every_way(*state, text, LEN(text), 4096, 4096, want, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
}

static void sse_line_ends(void **state)
{
    apr_pool_t *p = *state;
    static const want_event one[] = { { "message", "a\nb", NULL }, { NULL, NULL, NULL } };
    static const want_event two[] = { { "message", "a", NULL }, { "message", "b", NULL },
                                      { NULL, NULL, NULL } };
    collector *c = collector_new(p);
    ci_sse_reader *r = ci_sse_reader_create(p, 1024, 4096, collect, c);
    /* A CR ending one chunk and an LF starting the next are one line end. */
    assert_int_equal(ci_sse_reader_feed(r, "data: a\r", 8), CI_SSE_READ_OK);
    assert_int_equal(ci_sse_reader_feed(r, "\ndata: b\r", 9), CI_SSE_READ_OK);
    assert_int_equal(c->events->nelts, 0);
    assert_int_equal(ci_sse_reader_feed(r, "\n\r", 2), CI_SSE_READ_OK);
    check_events(c, one, "CRLF across chunks");
    assert_int_equal(ci_sse_reader_feed(r, "\n", 1), CI_SSE_READ_OK);  /* the pair's LF */
    assert_int_equal(ci_sse_reader_end(r), CI_SSE_READ_OK);

    read_every_way(p, "data: a\n\ndata: b\n\n", 18, 64, 64, two, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
    read_every_way(p, "data: a\r\rdata: b\r\r", 18, 64, 64, two, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
    read_every_way(p, "data: a\r\n\r\ndata: b\r\n\r\n", 22, 64, 64, two,
                   CI_SSE_READ_OK, CI_SSE_READ_OK);
    /* LF CR is two line ends: a blank line between. */
    read_every_way(p, "data: a\n\rdata: b\r\n\n", 19, 64, 64, two, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
}

static void sse_fields(void **state)
{
    static const char text[] =
        "data\n\n"                /* a field name alone: empty data */
        "data:\n\n"
        "data:x\n\n"
        "data:  x\n\n"
        "event\ndata: e\n\n"      /* an empty event name is "message" */
        "Data: case\n\n"          /* field names are case-sensitive */
        "data : spaced\n\n"       /* "data " is not "data" */
        "datas: longer\n\n"
        "x:\n:\n\n"
        "data: a:b: c\n\n";       /* only the first colon separates */
    static const want_event want[] = {
        { "message", "", NULL },
        { "message", "", NULL },
        { "message", "x", NULL },
        { "message", " x", NULL },
        { "message", "e", NULL },
        { "message", "a:b: c", NULL },
        { NULL, NULL, NULL }
    };
    read_every_way(*state, text, LEN(text), 64, 4096, want, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
}

static void sse_event_name_is_per_event(void **state)
{
    static const char text[] = "event: a\ndata: 1\n\ndata: 2\n\nevent: b\n\ndata: 3\n\n";
    static const want_event want[] = {
        { "a", "1", NULL }, { "message", "2", NULL }, { "message", "3", NULL },
        { NULL, NULL, NULL }
    };
    read_every_way(*state, text, LEN(text), 64, 4096, want, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
}

static void sse_bom(void **state)
{
    apr_pool_t *p = *state;
    static const want_event want[] = { { "message", "x", NULL }, { NULL, NULL, NULL } };
    static const want_event none[] = { { NULL, NULL, NULL } };
    /* One BOM at the very start is skipped, however it is split. */
    read_every_way(p, "\xEF\xBB\xBF" "data: x\n\n", 12, 64, 64, want, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
    /* A second one is content: "\xEF\xBB\xBF" "data" is an unknown field. */
    read_every_way(p, "\xEF\xBB\xBF\xEF\xBB\xBF" "data: x\n\n", 15, 64, 64, none,
                   CI_SSE_READ_OK, CI_SSE_READ_OK);
    /* A BOM that breaks off is content too. */
    read_every_way(p, "\xEF\xBB" "data: x\n\ndata: x\n\n", 20, 64, 64, want,
                   CI_SSE_READ_OK, CI_SSE_READ_OK);
    /* Without a BOM nothing is skipped. */
    read_every_way(p, "data: x\n\n", 9, 64, 64, want, CI_SSE_READ_OK, CI_SSE_READ_OK);
    /* A stream that is a partial BOM only ends inside an event. */
    read_every_way(p, "\xEF\xBB", 2, 64, 64, none, CI_SSE_READ_OK,
                   CI_SSE_READ_TRUNCATED);
}

static void sse_id(void **state)
{
    static const char text[] =
        "id: 7\ndata: a\n\n"
        "data: b\n\n"                  /* the last event id stays */
        "id: x\0y\ndata: c\n\n"        /* an id holding a NUL is ignored */
        "id: 8\n\n"                    /* set even without data */
        "data: d\n\n";
    static const want_event want[] = {
        { "message", "a", "7" }, { "message", "b", "7" }, { "message", "c", "7" },
        { "message", "d", "8" }, { NULL, NULL, NULL }
    };
    read_every_way(*state, text, LEN(text), 64, 4096, want, CI_SSE_READ_OK,
                   CI_SSE_READ_OK);
}

static void sse_nul_in_data(void **state)
{
    apr_pool_t *p = *state;
    collector *c = collector_new(p);
    ci_sse_reader *r = ci_sse_reader_create(p, 64, 64, collect, c);
    const got_event *g;
    assert_int_equal(ci_sse_reader_feed(r, "data: a\0b\n\n", 11), CI_SSE_READ_OK);
    assert_int_equal(c->events->nelts, 1);
    g = &APR_ARRAY_IDX(c->events, 0, got_event);
    assert_int_equal(g->data_len, 3);
    assert_memory_equal(g->data, "a\0b", 3);
}

static void sse_done(void **state)
{
    apr_pool_t *p = *state;
    static const want_event want[] = { { "message", "a", NULL }, { NULL, NULL, NULL } };
    static const char text[] = "data: a\n\ndata: [DONE]\n\ndata: b\n\n";
    collector *c;
    ci_sse_reader *r;
    read_every_way(p, text, LEN(text), 64, 4096, want, CI_SSE_READ_DONE,
                   CI_SSE_READ_DONE);
    read_every_way(p, "data: a\n\ndata:[DONE]\r\n\r\ngarbage", 32, 64, 4096, want,
                   CI_SSE_READ_DONE, CI_SSE_READ_DONE);
    c = collector_new(p);
    r = ci_sse_reader_create(p, 64, 4096, collect, c);
    assert_int_equal(ci_sse_reader_feed(r, text, LEN(text)), CI_SSE_READ_DONE);
    assert_null(ci_sse_reader_error(r));
    assert_int_equal(ci_sse_reader_feed(r, "data: c\n\n", 9), CI_SSE_READ_DONE);
    assert_int_equal(c->events->nelts, 1);
    /* Only the exact text is the end. */
    c = collector_new(p);
    r = ci_sse_reader_create(p, 64, 4096, collect, c);
    assert_int_equal(ci_sse_reader_feed(r, "data: [DONE] \n\ndata: [DONE]x\n\n", 30),
                     CI_SSE_READ_OK);
    assert_int_equal(c->events->nelts, 2);
}

static void sse_event_bound(void **state)
{
    apr_pool_t *p = *state;
    static const want_event one[] = { { "message", "0123456789", NULL },
                                      { NULL, NULL, NULL } };
    static const want_event none[] = { { NULL, NULL, NULL } };
    collector *c;
    ci_sse_reader *r;
    const char *msg;
    /* "data: 0123456789" is 16 bytes: within a bound of 16, line ends not
     * counted; the blank line starts the count again. */
    read_every_way(p, "data: 0123456789\r\n\r\ndata: 0123456789\n\n", 38, 16, 4096,
                   (const want_event[]){ { "message", "0123456789", NULL },
                                         { "message", "0123456789", NULL },
                                         { NULL, NULL, NULL } },
                   CI_SSE_READ_OK, CI_SSE_READ_OK);
    /* One byte more is refused, wherever the chunks end. */
    read_every_way(p, "data: 0123456789\n\ndata: 01234567890\n\n", 37, 16, 4096,
                   one, CI_SSE_READ_EVENT_TOO_LARGE, CI_SSE_READ_EVENT_TOO_LARGE);
    /* All the lines of an event count, comments and unknown fields too. */
    read_every_way(p, ": 12345678\ndata: 1\n\n", 20, 16, 4096, none,
                   CI_SSE_READ_EVENT_TOO_LARGE, CI_SSE_READ_EVENT_TOO_LARGE);
    read_every_way(p, "data: 123\ndata: 45\n\n", 20, 16, 4096, none,
                   CI_SSE_READ_EVENT_TOO_LARGE, CI_SSE_READ_EVENT_TOO_LARGE);
    /* A line with no end in sight is refused as soon as it is too long:
     * memory stays bounded. */
    c = collector_new(p);
    r = ci_sse_reader_create(p, 16, APR_SIZE_MAX, collect, c);
    assert_int_equal(ci_sse_reader_feed(r, "data: 0123456789", 16), CI_SSE_READ_OK);
    assert_int_equal(ci_sse_reader_feed(r, "x", 1), CI_SSE_READ_EVENT_TOO_LARGE);
    msg = ci_sse_reader_error(r);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "16 bytes"));
    /* The status sticks. */
    assert_int_equal(ci_sse_reader_feed(r, "\n\n", 2), CI_SSE_READ_EVENT_TOO_LARGE);
    assert_int_equal(ci_sse_reader_end(r), CI_SSE_READ_EVENT_TOO_LARGE);
    assert_int_equal(c->events->nelts, 0);
    assert_true(ci_sse_reader_footprint(r) <= 4 * 64);
}

static void sse_round_bound(void **state)
{
    apr_pool_t *p = *state;
    static const char text[] = "data: a\n\ndata: b\n\n";   /* 18 bytes */
    static const want_event both[] = { { "message", "a", NULL }, { "message", "b", NULL },
                                       { NULL, NULL, NULL } };
    static const want_event first[] = { { "message", "a", NULL }, { NULL, NULL, NULL } };
    collector *c;
    ci_sse_reader *r;
    read_every_way(p, text, 18, 64, 18, both, CI_SSE_READ_OK, CI_SSE_READ_OK);
    /* 17: the second event's blank line is past the bound. */
    read_every_way(p, text, 18, 64, 17, first, CI_SSE_READ_ROUND_TOO_LARGE,
                   CI_SSE_READ_ROUND_TOO_LARGE);
    read_every_way(p, text, 18, 64, 9, first, CI_SSE_READ_ROUND_TOO_LARGE,
                   CI_SSE_READ_ROUND_TOO_LARGE);
    /* The BOM counts. */
    read_every_way(p, "\xEF\xBB\xBF" "data: a\n\n", 12, 64, 11,
                   (const want_event[]){ { NULL, NULL, NULL } },
                   CI_SSE_READ_ROUND_TOO_LARGE, CI_SSE_READ_ROUND_TOO_LARGE);
    c = collector_new(p);
    r = ci_sse_reader_create(p, 64, 17, collect, c);
    assert_int_equal(ci_sse_reader_feed(r, text, 18), CI_SSE_READ_ROUND_TOO_LARGE);
    assert_non_null(strstr(ci_sse_reader_error(r), "17 bytes"));
    assert_int_equal(ci_sse_reader_feed(r, "", 0), CI_SSE_READ_ROUND_TOO_LARGE);
    /* [DONE] within the bound ends the stream before the bound is passed. */
    read_every_way(p, "data: a\n\ndata: [DONE]\n\nxxxxxxxx", 32, 64, 24, first,
                   CI_SSE_READ_DONE, CI_SSE_READ_DONE);
}

static void sse_stop(void **state)
{
    apr_pool_t *p = *state;
    collector *c = collector_new(p);
    ci_sse_reader *r = ci_sse_reader_create(p, 64, 4096, collect, c);
    c->stop_at = 2;
    assert_int_equal(ci_sse_reader_feed(r, "data: 1\n\ndata: 2\n\ndata: 3\n\n", 27),
                     CI_SSE_READ_STOPPED);
    assert_int_equal(c->events->nelts, 2);
    assert_non_null(ci_sse_reader_error(r));
    assert_int_equal(ci_sse_reader_feed(r, "data: 4\n\n", 9), CI_SSE_READ_STOPPED);
    assert_int_equal(ci_sse_reader_end(r), CI_SSE_READ_STOPPED);
    assert_int_equal(c->events->nelts, 2);
}

static void sse_end_truncated(void **state)
{
    static const struct { const char *text; ci_sse_read_status end; } cases[] = {
        { "", CI_SSE_READ_OK },
        { "data: a\n\n", CI_SSE_READ_OK },
        { "data: a\r\n\r", CI_SSE_READ_OK },     /* (its LF would be a pair) */
        { "data: a\n", CI_SSE_READ_TRUNCATED },
        { "data: a", CI_SSE_READ_TRUNCATED },
        { "data: a\n\n:", CI_SSE_READ_TRUNCATED },
        { "data: a\n\nevent: x\n", CI_SSE_READ_TRUNCATED },
        { "\n\n\n", CI_SSE_READ_OK },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        collector *c = collector_new(*state);
        ci_sse_reader *r = ci_sse_reader_create(*state, 64, 4096, collect, c);
        ci_sse_reader_feed(r, cases[i].text, strlen(cases[i].text));
        if (ci_sse_reader_end(r) != cases[i].end)
            fail_msg("\"%s\": end %d, expected %d", cases[i].text,
                     ci_sse_reader_end(r), cases[i].end);
    }
}

/* Many events: the buffers are reused, the memory does not grow. */
static void sse_reuse_and_reset(void **state)
{
    apr_pool_t *p = *state;
    collector *c = collector_new(p);
    ci_sse_reader *r = ci_sse_reader_create(p, 256, APR_SIZE_MAX, collect, c);
    char frame[160];
    apr_size_t fp = 0;
    int i, n;
    for (i = 0; i < 20000; i++) {
        n = snprintf(frame, sizeof(frame), "event: response.output_text.delta\n"
                     "data: {\"type\":\"response.output_text.delta\",\"delta\":\"%d\"}\n\n", i);
        assert_int_equal(ci_sse_reader_feed(r, frame, (apr_size_t)n), CI_SSE_READ_OK);
        if (i == 10)
            fp = ci_sse_reader_footprint(r);
        if (i % 1000 == 999)
            apr_array_clear(c->events);
    }
    assert_int_equal(ci_sse_reader_events(r), 20000);
    assert_int_equal(ci_sse_reader_footprint(r), fp);
    assert_true(fp <= 4 * 256 * 2);
    /* After an error, a reset starts afresh. */
    assert_int_equal(ci_sse_reader_feed(r, "id: 9\ndata", 10), CI_SSE_READ_OK);
    ci_sse_reader_reset(r);
    apr_array_clear(c->events);
    assert_int_equal(ci_sse_reader_events(r), 0);
    assert_int_equal(ci_sse_reader_feed(r, ": x\n\ndata: y\n\n", 14), CI_SSE_READ_OK);
    check_events(c, (const want_event[]){ { "message", "y", NULL }, { NULL, NULL, NULL } },
                 "after reset");
    {
        char big[300];
        memset(big, 'z', sizeof(big));
        assert_int_equal(ci_sse_reader_feed(r, big, sizeof(big)),
                         CI_SSE_READ_EVENT_TOO_LARGE);
    }
    ci_sse_reader_reset(r);
    assert_null(ci_sse_reader_error(r));
    assert_int_equal(ci_sse_reader_feed(r, "data: z\n\n", 9), CI_SSE_READ_OK);
    assert_int_equal(ci_sse_reader_events(r), 1);
    /* (the id buffers came in with the first id line) */
    assert_true(ci_sse_reader_footprint(r) <= 4 * 256 * 2);
}

static void sse_event_json(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *data; ci_sse_read_status st; } cases[] = {
        { "{\"type\":\"response.created\",\"n\":1}", CI_SSE_READ_OK },
        { "{\"type\":\"response.output_text.delta\",\"delta\":\"\\u00e9\"}  ", CI_SSE_READ_OK },
        { "[DONE]", CI_SSE_READ_BAD_JSON },
        { "[1]", CI_SSE_READ_BAD_JSON },
        { "\"type\"", CI_SSE_READ_BAD_JSON },
        { "{\"type\":\"a\"", CI_SSE_READ_BAD_JSON },
        { "{\"type\":\"\xC3\x28\"}", CI_SSE_READ_BAD_JSON },
        { "{\"type\":NaN}", CI_SSE_READ_BAD_JSON },
        { "", CI_SSE_READ_BAD_JSON },
        { "{}", CI_SSE_READ_NO_TYPE },
        { "{\"type\":1}", CI_SSE_READ_NO_TYPE },
        { "{\"kind\":\"x\"}", CI_SSE_READ_NO_TYPE },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ci_sse_event ev = { "x", 1, cases[i].data, strlen(cases[i].data), "" };
        json_object *o = (json_object *)1;
        const char *type = "?", *err = NULL;
        ci_sse_read_status st = ci_sse_event_json(p, &ev, &o, &type, &err);
        if (st != cases[i].st)
            fail_msg("%s: status %d, expected %d", cases[i].data, st, cases[i].st);
        if (st == CI_SSE_READ_OK) {
            assert_non_null(o);
            assert_true(json_object_is_type(o, json_type_object));
            assert_string_equal(type, json_object_get_string(
                                          json_object_object_get(o, "type")));
        }
        else {
            assert_null(o);
            assert_null(type);
            assert_non_null(err);
            assert_non_null(strstr(err, "'x'"));
        }
    }
}

/* ---- the recorded stream ------------------------------------------------- */

/* The recorded stream's path, or NULL (the test is then skipped, or fails
 * under CI=true). */
static const char *recorded_path(apr_pool_t *p)
{
    /* CI_SPEC_DIR, else test/spec of the tree (make check runs at its top,
     * or in srcdir's build tree) */
    const char *spec = getenv("CI_SPEC_DIR"), *srcdir = getenv("srcdir");
    const char *dirs[3];
    apr_size_t i;
    dirs[0] = spec;
    dirs[1] = srcdir ? apr_pstrcat(p, srcdir, "/test/spec", NULL) : NULL;
    dirs[2] = "test/spec";
    for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        const char *f;
        FILE *fp;
        if (!dirs[i])
            continue;
        f = apr_pstrcat(p, dirs[i], "/recorded/openai-code-interpreter.stream.jsonl", NULL);
        if ((fp = fopen(f, "r"))) {
            fclose(fp);
            return f;
        }
    }
    return NULL;
}

typedef struct replay {
    apr_pool_t *p, *scratch;
    int seq;
    apr_size_t code_len, done_len;
    char *code;               /* concatenated code deltas of the current call */
    int calls;
} replay;

static int replay_event(void *baton, const ci_sse_event *ev)
{
    replay *rp = baton;
    json_object *o, *v;
    const char *type, *err;
    apr_pool_clear(rp->scratch);
    assert_int_equal(ci_sse_event_json(rp->scratch, ev, &o, &type, &err), CI_SSE_READ_OK);
    assert_string_equal(type, ev->event);
    v = ci_json_get(o, "sequence_number", json_type_int);
    assert_non_null(v);
    assert_int_equal(json_object_get_int(v), rp->seq);
    rp->seq++;
    if (!strcmp(type, "response.code_interpreter_call_code.delta")) {
        const char *d = ci_json_str(o, "delta");
        apr_size_t n = strlen(d);
        assert_true(rp->code_len + n < 65536);
        memcpy(rp->code + rp->code_len, d, n);
        rp->code_len += n;
    }
    else if (!strcmp(type, "response.code_interpreter_call_code.done")) {
        const char *code = ci_json_str(o, "code");
        assert_int_equal(strlen(code), rp->code_len);
        assert_memory_equal(code, rp->code, rp->code_len);
        rp->code_len = 0;
        rp->calls++;
    }
    return 0;
}

static void sse_recorded_stream(void **state)
{
    apr_pool_t *p = *state;
    const char *path = recorded_path(p), *ci = getenv("CI");
    char line[1 << 16];
    FILE *fp;
    apr_array_header_t *frames;
    char *stream;
    apr_size_t len = 0;
    int variant;
    if (!path) {
        if (ci && !strcmp(ci, "true"))
            fail_msg("test/spec/recorded is missing under CI=true");
        print_message("skipped: test/spec/recorded is missing: restore it with "
                      "'git checkout -- test/spec'\n");
        skip();
    }
    fp = fopen(path, "r");
    assert_non_null(fp);
    frames = apr_array_make(p, 400, sizeof(const char *));
    while (fgets(line, sizeof(line), fp)) {
        json_object *o;
        const char *err;
        apr_size_t n = strcspn(line, "\n");
        line[n] = '\0';
        o = ci_json_parse(p, line, n, &err);
        assert_non_null(o);
        /* framed as OpenAI frames it */
        APR_ARRAY_PUSH(frames, const char *) =
            apr_psprintf(p, "event: %s\ndata: %s\n\n", ci_json_str(o, "type"), line);
    }
    fclose(fp);
    assert_int_equal(frames->nelts, 393);
    stream = apr_array_pstrcat(p, frames, '\0');
    len = strlen(stream);
    for (variant = 0; variant < 3; variant++) {
        replay rp;
        ci_sse_reader *r;
        apr_size_t at = 0;
        memset(&rp, 0, sizeof(rp));
        rp.p = p;
        apr_pool_create(&rp.scratch, p);
        rp.code = apr_palloc(p, 65536);
        r = ci_sse_reader_create(p, 1 << 20, 8 << 20, replay_event, &rp);
        while (at < len) {
            /* whole, in pieces of 1..300 bytes, in pieces of 1..3 bytes */
            apr_size_t n = variant == 0 ? len : (apr_size_t)(rnd() % (variant == 1 ? 300 : 3)) + 1;
            if (n > len - at)
                n = len - at;
            assert_int_equal(ci_sse_reader_feed(r, stream + at, n), CI_SSE_READ_OK);
            at += n;
        }
        assert_int_equal(ci_sse_reader_end(r), CI_SSE_READ_OK);
        assert_int_equal(rp.seq, 393);
        assert_int_equal(rp.calls, 3);
        apr_pool_destroy(rp.scratch);
    }
}

/* ======================================================================== */
/* code decoder                                                             */
/* ======================================================================== */

/* What json-c reads as "code" from TEXT; NULL when it does not parse or has
 * no string "code". */
static const char *json_c_code(apr_pool_t *p, const char *text, apr_size_t len,
                               apr_size_t *clen)
{
    const char *err;
    json_object *o = ci_json_parse(p, text, len, &err);
    json_object *c = ci_json_get(o, "code", json_type_string);
    if (!c)
        return NULL;
    *clen = (apr_size_t)json_object_get_string_len(c);
    return json_object_get_string(c);
}

typedef struct decoded {
    ci_code_status feed_st, finish_st;
    char *code;
    apr_size_t len;
    long ended_at;     /* the offset of the byte after which ended() turned true */
} decoded;

/* Decode TEXT cut at CUTS; check that every piece of output is whole UTF-8
 * and that ended() only turns true once. */
static decoded decode_cut(apr_pool_t *p, ci_code_decoder *d, const char *text,
                          apr_size_t len, const apr_size_t *cuts, int ncuts)
{
    decoded r;
    apr_size_t at = 0, cap = len * 3 + 16;
    int i;
    memset(&r, 0, sizeof(r));
    r.code = apr_palloc(p, cap);
    r.ended_at = -1;
    ci_code_decoder_reset(d);
    for (i = 0; i <= ncuts; i++) {
        apr_size_t end = i < ncuts ? cuts[i] : len;
        const char *out;
        apr_size_t n;
        int was_ended = ci_code_decoder_ended(d);
        r.feed_st = ci_code_decoder_feed(d, text + at, end - at, &out, &n);
        assert_non_null(out);
        assert_int_equal(out[n], '\0');
        if (!utf8_whole(out, n))
            fail_msg("feed of bytes %zu..%zu returned a partial character", (size_t)at,
                     (size_t)end);
        assert_true(r.len + n <= cap);
        memcpy(r.code + r.len, out, n);
        r.len += n;
        if (!was_ended && ci_code_decoder_ended(d))
            r.ended_at = (long)end;
        if (was_ended)
            assert_true(ci_code_decoder_ended(d));
        at = end;
    }
    assert_int_equal(ci_code_decoder_length(d), r.len);
    r.finish_st = ci_code_decoder_finish(d);
    return r;
}

/* Decode TEXT cut at every position, at every pair of positions (when
 * PAIRS) and byte by byte: the status and the code must always be the same,
 * that of the whole text, and when json-c reads a code, equal to it. */
static void decode_every_way(apr_pool_t *p, const char *text, apr_size_t len,
                             int pairs, ci_code_status want)
{
    apr_pool_t *sub;
    ci_code_decoder *d;
    decoded whole;
    const char *ref;
    apr_size_t rlen = 0, a, b;
    apr_size_t *bytes;
    apr_pool_create(&sub, p);
    d = ci_code_decoder_create(p);
    whole = decode_cut(p, d, text, len, NULL, 0);
    if (whole.finish_st != want)
        fail_msg("%s: status %d (%s), expected %d", text, whole.finish_st,
                 ci_code_decoder_error(d) ? ci_code_decoder_error(d) : "-", want);
    ref = json_c_code(p, text, len, &rlen);
    if (want == CI_CODE_OK) {
        assert_non_null(ref);
        assert_int_equal(whole.len, rlen);
        assert_memory_equal(whole.code, ref, rlen);
    }
    for (a = 0; a <= len; a++) {
        for (b = pairs ? a : len; b <= len; b++) {
            apr_size_t cuts[2] = { a, b };
            decoded got;
            apr_pool_clear(sub);
            got = decode_cut(sub, d, text, len, cuts, 2);
            if (got.finish_st != whole.finish_st || got.len != whole.len ||
                memcmp(got.code, whole.code, got.len))
                fail_msg("%s cut at %zu and %zu: status %d, %zu bytes; whole: %d, %zu",
                         text, (size_t)a, (size_t)b, got.finish_st, (size_t)got.len,
                         whole.finish_st, (size_t)whole.len);
        }
    }
    bytes = apr_palloc(sub, (len + 1) * sizeof(*bytes));
    for (a = 0; a < len; a++)
        bytes[a] = a + 1;
    {
        decoded got = decode_cut(sub, d, text, len, bytes, len ? (int)len - 1 : 0);
        assert_int_equal(got.finish_st, whole.finish_st);
        assert_int_equal(got.len, whole.len);
        assert_memory_equal(got.code, whole.code, got.len);
        if (want == CI_CODE_OK) {
            /* ended() turned true on the byte that closed the code string */
            assert_true(got.ended_at > 0);
            assert_int_equal(text[got.ended_at - 1], '"');
        }
    }
    apr_pool_destroy(sub);
}

static void code_simple(void **state)
{
    apr_pool_t *p = *state;
    static const char args[] = "{\"code\":\"print(\\\"hi\\\")\\n\"}";
    ci_code_decoder *d = ci_code_decoder_create(p);
    const char *out;
    apr_size_t n;
    assert_int_equal(ci_code_decoder_feed(d, args, 9, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 0);
    assert_string_equal(out, "");
    assert_false(ci_code_decoder_ended(d));
    assert_int_equal(ci_code_decoder_feed(d, args + 9, 11, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 9);
    assert_string_equal(out, "print(\"hi");
    assert_int_equal(ci_code_decoder_feed(d, args + 20, LEN(args) - 20, &out, &n),
                     CI_CODE_OK);
    assert_string_equal(out, "\")\n");
    assert_true(ci_code_decoder_ended(d));
    assert_int_equal(ci_code_decoder_length(d), 12);
    assert_int_equal(ci_code_decoder_finish(d), CI_CODE_OK);
    assert_null(ci_code_decoder_error(d));
    decode_every_way(p, args, LEN(args), 1, CI_CODE_OK);
}

/* Escapes (surrogate pairs too) and raw UTF-8 split anywhere. */
static void code_unicode_every_split(void **state)
{
    apr_pool_t *p = *state;
    static const char *const texts[] = {
        "{\"code\":\"caf\\u00e9 \\u20AC \\ud83d\\ude00\\uD83D\\uDE00!\"}",
        "{\"code\":\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\"}",
        "{\"code\":\"\\u0041\\u00df\\u6c34\\ud834\\udd1e\\u007f\\u0080\\u07ff\\u0800\\uffff\"}",
        "{\"code\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}",
        "{\"code\":\"nul:\\u0000:end\"}",
        "{\"code\":\"raw\ttab\x01\x1f\x7f\"}",
        "{\"code\":\"\"}",
    };
    apr_size_t i;
    for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        decode_every_way(p, texts[i], strlen(texts[i]), 1, CI_CODE_OK);
}

/* "code" not first, other members of every kind, whitespace everywhere. */
static void code_among_other_members(void **state)
{
    apr_pool_t *p = *state;
    static const char *const texts[] = {
        " \r\n\t{ \"name\" : \"x\\\"y\" , \"n\": -1.5e+3, \"t\": true, \"f\": false,"
        " \"z\": null, \"o\": {\"code\": \"inner\", \"a\": [1, {\"b\": [[]]}, \"s\\\"}\"]},"
        " \"code\" : \"x = [1, 2]\\n\" , \"after\": {\"k\": [false, 0.5]} } \n",
        "{\"a\":[],\"b\":{},\"c\":\"\",\"code\":\"y\"}",
        "{\"c\\u006fde\":\"key with an escape\"}",
        "{\"code\\u0000tail\":\"json-c cuts keys at NUL\"}",
        "{\"cod\":1,\"codes\":2,\"Code\":3,\"code\":\"z\",\"xcode\":4}",
        "{\"\\ud83d\\ude00\":\"\\ud83d\",\"code\":\"k\"}",
    };
    apr_size_t i;
    for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        decode_every_way(p, texts[i], strlen(texts[i]), strlen(texts[i]) < 120,
                         CI_CODE_OK);
}

/* Lone surrogates become U+FFFD, exactly as json-c reads them. */
static void code_lone_surrogates(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *args, *code; } cases[] = {
        { "{\"code\":\"\\ud83d\"}", "\xEF\xBF\xBD" },
        { "{\"code\":\"\\ud83dA\"}", "\xEF\xBF\xBD" "A" },
        { "{\"code\":\"\\ud83d\\u0041\"}", "\xEF\xBF\xBD" "A" },
        { "{\"code\":\"\\ude00x\"}", "\xEF\xBF\xBD" "x" },
        { "{\"code\":\"\\ud83d\\ud83d\\ude00\"}", "\xEF\xBF\xBD\xF0\x9F\x98\x80" },
        { "{\"code\":\"\\ud83d\\n\"}", "\xEF\xBF\xBD\n" },
        { "{\"code\":\"\\ud83d\\\\\"}", "\xEF\xBF\xBD\\" },
        { "{\"code\":\"\\ud83d\xC3\xA9\"}", "\xEF\xBF\xBD\xC3\xA9" },
        { "{\"code\":\"\\udbff\\udfff\\udc00\\ud800\"}",
          "\xF4\x8F\xBF\xBF\xEF\xBF\xBD\xEF\xBF\xBD" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ci_code_decoder *d = ci_code_decoder_create(p);
        const char *out, *ref;
        apr_size_t n, rlen = 0;
        assert_int_equal(ci_code_decoder_feed(d, cases[i].args, strlen(cases[i].args),
                                              &out, &n), CI_CODE_OK);
        assert_int_equal(n, strlen(cases[i].code));
        assert_memory_equal(out, cases[i].code, n);
        ref = json_c_code(p, cases[i].args, strlen(cases[i].args), &rlen);
        assert_non_null(ref);
        assert_int_equal(rlen, n);
        assert_memory_equal(ref, out, n);
        decode_every_way(p, cases[i].args, strlen(cases[i].args), 1, CI_CODE_OK);
    }
}

/* json-c before 0.19 reads an escaped pair for U+xD800..U+xDFFF as U+FFFD
 * (or pairs it again with a low half that follows); later versions read the
 * character. Whichever json-c this is, the decoder reads what it reads. */
static void code_pair_quirk(void **state)
{
    apr_pool_t *p = *state;
    static const char *const texts[] = {
        "{\"code\":\"\\ud836\\udc00\"}",                 /* U+1D800 */
        "{\"code\":\"\\ud9b7\\udd76!\"}",                /* U+7DD76 */
        "{\"code\":\"\\ud875\\udc00\\udc01\\n\"}",
        "{\"code\":\"\\ud836\\udc00\\ud836\\udc00\\udc00\"}",
        "{\"code\":\"\\ud836\\udc00\\t\\ud83d\\ude00\"}",
        "{\"c\\ud836\\udc00\":1,\"code\":\"\\udbff\\udfff\"}",
    };
    const char *ref;
    apr_size_t i, rlen = 0;
    for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        decode_every_way(p, texts[i], strlen(texts[i]), 1, CI_CODE_OK);
    ref = json_c_code(p, texts[0], strlen(texts[0]), &rlen);
    assert_non_null(ref);
    print_message("json-c %s reads an escaped U+1D800 as %s\n", json_c_version(),
                  rlen == 4 ? "U+1D800" : "U+FFFD");
}

/* A high surrogate at the end of a delta waits for the next one. */
static void code_held_back(void **state)
{
    apr_pool_t *p = *state;
    ci_code_decoder *d = ci_code_decoder_create(p);
    const char *out;
    apr_size_t n;
    assert_int_equal(ci_code_decoder_feed(d, "{\"code\":\"a\\ud83d", 16, &out, &n),
                     CI_CODE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ci_code_decoder_feed(d, "\\ude0", 5, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ci_code_decoder_feed(d, "0\xE2\x82", 3, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(out, "\xF0\x9F\x98\x80", 4);
    assert_int_equal(ci_code_decoder_feed(d, "\xAC", 1, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "\xE2\x82\xAC", 3);
    assert_int_equal(ci_code_decoder_feed(d, "\"}", 2, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 0);
    assert_true(ci_code_decoder_ended(d));
    assert_int_equal(ci_code_decoder_finish(d), CI_CODE_OK);
}

static void code_errors(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *args; ci_code_status st; const char *before; } cases[] = {
        { "[\"code\"]", CI_CODE_SYNTAX, "" },
        { "\"code\"", CI_CODE_SYNTAX, "" },
        { "{\"code\" \"x\"}", CI_CODE_SYNTAX, "" },
        { "{code:\"x\"}", CI_CODE_SYNTAX, "" },
        { "{\"code\":\"x\"}x", CI_CODE_SYNTAX, "x" },
        { "{\"code\":\"x\"}{}", CI_CODE_SYNTAX, "x" },
        { "{\"code\":\"ab\\x\"}", CI_CODE_SYNTAX, "ab" },
        { "{\"code\":\"ab\\'\"}", CI_CODE_SYNTAX, "ab" },
        { "{\"code\":\"ab\\u12G4\"}", CI_CODE_SYNTAX, "ab" },
        { "{\"code\":\"x\",}", CI_CODE_SYNTAX, "x" },
        { "{\"a\":tru,\"code\":\"x\"}", CI_CODE_SYNTAX, "" },
        { "{\"a\":truex,\"code\":\"x\"}", CI_CODE_SYNTAX, "" },
        { "{\"a\":[1,],\"code\":\"x\"}", CI_CODE_SYNTAX, "" },
        { "{\"a\":[1}", CI_CODE_SYNTAX, "" },
        { "{\"a\":{\"b\"]}", CI_CODE_SYNTAX, "" },
        { "{\"a\":'x'}", CI_CODE_SYNTAX, "" },
        { "{\v\"code\":\"x\"}", CI_CODE_SYNTAX, "" },
        { "{\"code\":\"a\xC3\x28\"}", CI_CODE_BAD_UTF8, "a" },
        { "{\"code\":\"a\xED\xA0\x80\"}", CI_CODE_BAD_UTF8, "a" },
        { "{\"code\":\"a\xC0\x80\"}", CI_CODE_BAD_UTF8, "a" },
        { "{\"code\":\"a\xF4\x90\x80\x80\"}", CI_CODE_BAD_UTF8, "a" },
        { "{\"code\":\"a\xE2\x82\"}", CI_CODE_BAD_UTF8, "a" },
        { "{\"k\xFF\":1,\"code\":\"x\"}", CI_CODE_BAD_UTF8, "" },
        { "{\"code\":1}", CI_CODE_NOT_STRING, "" },
        { "{\"code\":null}", CI_CODE_NOT_STRING, "" },
        { "{\"code\":{\"code\":\"x\"}}", CI_CODE_NOT_STRING, "" },
        { "{\"code\":[\"x\"]}", CI_CODE_NOT_STRING, "" },
        { "{\"code\":\"a\",\"code\":\"b\"}", CI_CODE_DUPLICATE, "a" },
        { "{\"code\":\"a\",\"c\\u006fde\":1}", CI_CODE_DUPLICATE, "a" },
        { "{}", CI_CODE_MISSING, "" },
        { "{\"a\":{\"code\":\"x\"},\"b\":[{\"code\":\"y\"}]}", CI_CODE_MISSING, "" },
        { "{\"codex\":\"x\",\"cod\":\"y\"}", CI_CODE_MISSING, "" },
        { "", CI_CODE_TRUNCATED, "" },
        { "  ", CI_CODE_TRUNCATED, "" },
        { "{\"code\":\"abc", CI_CODE_TRUNCATED, "abc" },
        { "{\"code\":\"abc\"", CI_CODE_TRUNCATED, "abc" },
        { "{\"code\":\"abc\",\"n\":12", CI_CODE_TRUNCATED, "abc" },
        { "{\"code\":\"abc\",\"a\":[{", CI_CODE_TRUNCATED, "abc" },
    };
    apr_size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ci_code_decoder *d = ci_code_decoder_create(p);
        const char *args = cases[i].args, *out;
        apr_size_t len = strlen(args), n;
        ci_code_status st = ci_code_decoder_feed(d, args, len, &out, &n);
        /* what came before the error is returned with it */
        if (n != strlen(cases[i].before) || memcmp(out, cases[i].before, n))
            fail_msg("%s: returned '%.*s', expected '%s'", args, (int)n, out,
                     cases[i].before);
        if (st == CI_CODE_OK)
            st = ci_code_decoder_finish(d);
        if (st != cases[i].st)
            fail_msg("%s: status %d, expected %d", args, st, cases[i].st);
        assert_non_null(ci_code_decoder_error(d));
        /* errors stick */
        assert_int_equal(ci_code_decoder_feed(d, "\"}", 2, &out, &n), cases[i].st);
        assert_int_equal(n, 0);
        assert_int_equal(ci_code_decoder_finish(d), cases[i].st);
        /* and do not depend on the split */
        decode_every_way(p, args, len, 1, cases[i].st);
    }
}

static void code_error_message(void **state)
{
    ci_code_decoder *d = ci_code_decoder_create(*state);
    const char *out;
    apr_size_t n;
    assert_int_equal(ci_code_decoder_feed(d, "{\"code\" ; ", 10, &out, &n), CI_CODE_SYNTAX);
    assert_string_equal(ci_code_decoder_error(d),
                        "';' where ':' was expected at byte 8 of the function arguments");
}

static void code_depth(void **state)
{
    apr_pool_t *p = *state;
    /* CI_JSON_MAX_DEPTH containers inside the object are fine, one more is not */
    int deep;
    for (deep = CI_JSON_MAX_DEPTH; deep <= CI_JSON_MAX_DEPTH + 1; deep++) {
        char *args = apr_palloc(p, 64 + 4 * (apr_size_t)deep), *w = args;
        ci_code_decoder *d = ci_code_decoder_create(p);
        const char *out;
        apr_size_t n;
        int i;
        w += sprintf(w, "{\"a\":");
        for (i = 0; i < deep; i++) {
            *w++ = i % 2 ? '{' : '[';
            if (i % 2)
                w += sprintf(w, "\"k\":");
        }
        *w++ = '1';
        for (i = deep - 1; i >= 0; i--)
            *w++ = i % 2 ? '}' : ']';
        w += sprintf(w, ",\"code\":\"x\"}");
        ci_code_decoder_feed(d, args, (apr_size_t)(w - args), &out, &n);
        assert_int_equal(ci_code_decoder_finish(d),
                         deep > CI_JSON_MAX_DEPTH ? CI_CODE_TOO_DEEP : CI_CODE_OK);
    }
}

static void code_reset(void **state)
{
    apr_pool_t *p = *state;
    ci_code_decoder *d = ci_code_decoder_create(p);
    const char *out;
    apr_size_t n;
    assert_int_equal(ci_code_decoder_feed(d, "{\"code\":\"a\xC3", 11, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 1);
    ci_code_decoder_reset(d);
    assert_int_equal(ci_code_decoder_length(d), 0);
    assert_false(ci_code_decoder_ended(d));
    /* no byte of the old call's unfinished character is left over */
    assert_int_equal(ci_code_decoder_feed(d, "{\"code\":\"b\"}", 12, &out, &n), CI_CODE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(out, "b");
    assert_int_equal(ci_code_decoder_finish(d), CI_CODE_OK);
    ci_code_decoder_feed(d, "x", 1, &out, &n);
    ci_code_decoder_reset(d);
    assert_null(ci_code_decoder_error(d));
    assert_int_equal(ci_code_decoder_feed(d, "{\"code\":\"c\"}", 12, &out, &n), CI_CODE_OK);
    assert_string_equal(out, "c");
}

/* ---- against json-c, on generated code ----------------------------------- */

/* A random code point: mostly ASCII (quotes, backslashes and controls
 * included), some 2-, 3- and 4-byte characters. */
static unsigned random_cp(void)
{
    uint64_t r = rnd();
    switch (r % 8) {
    case 0: return "\"\\/\n\t\b\f\r"[(r >> 8) % 8];
    case 1: return (unsigned)((r >> 8) % 0x20 + 1);
    case 2: return (unsigned)((r >> 8) % 0x780 + 0x80);
    case 3: {
        unsigned cp = (unsigned)((r >> 8) % 0xF800 + 0x800);
        return cp >= 0xD800 && cp <= 0xDFFF ? 0xE000 : cp;
    }
    case 4: return (unsigned)((r >> 8) % 0x100000 + 0x10000);
    default: return (unsigned)((r >> 8) % 0x5F + 0x20);
    }
}

static apr_size_t put_utf8(char *w, unsigned cp)
{
    if (cp < 0x80) { w[0] = (char)cp; return 1; }
    if (cp < 0x800) { w[0] = (char)(0xC0 | cp >> 6); w[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        w[0] = (char)(0xE0 | cp >> 12); w[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        w[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    w[0] = (char)(0xF0 | cp >> 18); w[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    w[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); w[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Set when an escaped pair for U+xD800..U+xDFFF was written: json-c before
 * 0.19 reads those as U+FFFD (see code_pair_quirk). */
static int wrote_quirky_pair;

/* CP as JSON string text, escaped one of the ways a JSON writer may. */
static apr_size_t put_json_char(char *w, unsigned cp)
{
    const char *hex = rnd() % 2 ? "0123456789abcdef" : "0123456789ABCDEF";
    int escape = rnd() % 3 == 0;
    if (cp == '"' || cp == '\\' || cp < 0x20 || (escape && cp < 0x10000)) {
        return (apr_size_t)sprintf(w, "\\u%c%c%c%c", hex[cp >> 12], hex[(cp >> 8) & 15],
                                   hex[(cp >> 4) & 15], hex[cp & 15]);
    }
    if (escape) {   /* a surrogate pair */
        unsigned v = cp - 0x10000, hi = 0xD800 + (v >> 10), lo = 0xDC00 + (v & 0x3FF);
        if ((cp & 0xF800) == 0xD800)
            wrote_quirky_pair = 1;
        return (apr_size_t)sprintf(w, "\\u%c%c%c%c\\u%c%c%c%c", hex[hi >> 12],
                                   hex[(hi >> 8) & 15], hex[(hi >> 4) & 15], hex[hi & 15],
                                   hex[lo >> 12], hex[(lo >> 8) & 15], hex[(lo >> 4) & 15],
                                   hex[lo & 15]);
    }
    return put_utf8(w, cp);
}

static void code_generated_against_json_c(void **state)
{
    apr_pool_t *p = *state, *sub;
    ci_code_decoder *d = ci_code_decoder_create(p);
    int round;
    apr_pool_create(&sub, p);
    for (round = 0; round < 400; round++) {
        apr_size_t ncp = (apr_size_t)(rnd() % (round < 390 ? 200 : 20000)), i, alen, clen;
        char *args = apr_palloc(sub, ncp * 12 + 64), *code = apr_palloc(sub, ncp * 4 + 1);
        char *w = args;
        apr_size_t *cuts;
        int ncuts = 0;
        decoded got;
        const char *ref;
        apr_size_t rlen = 0;
        clen = 0;
        wrote_quirky_pair = 0;
        w += sprintf(w, rnd() % 2 ? "{\"code\":\"" : "{\"x\":[1,\"\\\"\"] , \"code\" : \"");
        for (i = 0; i < ncp; i++) {
            unsigned cp = random_cp();
            clen += put_utf8(code + clen, cp);
            w += put_json_char(w, cp);
        }
        w += sprintf(w, rnd() % 2 ? "\"}" : "\", \"y\": {\"code\": null}}");
        alen = (apr_size_t)(w - args);
        /* cut in random places, often close together */
        cuts = apr_palloc(sub, (alen + 1) * sizeof(*cuts));
        for (i = 1; i < alen; i += (apr_size_t)(rnd() % 7) + 1)
            cuts[ncuts++] = i;
        got = decode_cut(sub, d, args, alen, cuts, ncuts);
        assert_int_equal(got.finish_st, CI_CODE_OK);
        ref = json_c_code(sub, args, alen, &rlen);
        assert_non_null(ref);
        assert_int_equal(got.len, rlen);
        assert_memory_equal(got.code, ref, rlen);
        if (!wrote_quirky_pair) {
            assert_int_equal(got.len, clen);
            assert_memory_equal(got.code, code, clen);
        }
        /* and as json-c itself writes it */
        {
            json_object *o = json_object_new_object();
            const char *text;
            json_object_object_add(o, "code", json_object_new_string_len(code, (int)clen));
            ci_json_own(sub, o);
            text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
            got = decode_cut(sub, d, text, strlen(text), cuts,
                             ncuts && cuts[ncuts - 1] >= strlen(text) ? 0 : ncuts);
            assert_int_equal(got.finish_st, CI_CODE_OK);
            assert_int_equal(got.len, clen);
            assert_memory_equal(got.code, code, clen);
        }
        apr_pool_clear(sub);
    }
}

/* ======================================================================== */

int main(void)
{
    const struct CMUnitTest sse_tests[] = {
        TEST(sse_basic),
        TEST(sse_every_split),
        TEST(sse_line_ends),
        TEST(sse_fields),
        TEST(sse_event_name_is_per_event),
        TEST(sse_bom),
        TEST(sse_id),
        TEST(sse_nul_in_data),
        TEST(sse_done),
        TEST(sse_event_bound),
        TEST(sse_round_bound),
        TEST(sse_stop),
        TEST(sse_end_truncated),
        TEST(sse_reuse_and_reset),
        TEST(sse_event_json),
        TEST(sse_recorded_stream),
    };
    const struct CMUnitTest code_tests[] = {
        TEST(code_simple),
        TEST(code_unicode_every_split),
        TEST(code_among_other_members),
        TEST(code_lone_surrogates),
        TEST(code_pair_quirk),
        TEST(code_held_back),
        TEST(code_errors),
        TEST(code_error_message),
        TEST(code_depth),
        TEST(code_reset),
        TEST(code_generated_against_json_c),
    };
    int failed = 0;
    apr_initialize();
    failed += cmocka_run_group_tests_name("ci_sse_reader", sse_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("ci_code_decoder", code_tests, NULL, NULL);
    apr_terminate();
    return failed ? 1 : 0;
}

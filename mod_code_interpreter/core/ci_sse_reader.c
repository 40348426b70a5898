/* ci_sse_reader.c - an incremental reader of server-sent events. */
#include <string.h>
#include <apr_strings.h>
#include "ci_buf.h"
#include "ci_json.h"
#include "ci_sse_reader.h"

/* A growable byte buffer, always NUL-terminated. Its memory is reused:
 * emptying it keeps the capacity. */

/* Where the value of the current line goes. */
typedef enum { TO_DATA, TO_EVENT, TO_ID, TO_NOWHERE } sse_target;

/* Where the reader is within the current line. */
typedef enum {
    AT_LINE_START,  /* nothing of the line read yet */
    IN_FIELD,       /* reading the field name */
    AT_VALUE_START, /* just after the colon: one space is dropped */
    IN_VALUE,       /* reading the value */
    IN_COMMENT      /* a `:` line, read to its end and dropped */
} sse_line_state;

/* Longest field name the reader knows ("retry"); longer ones are unknown. */
#define FIELD_MAX 5

struct ci_sse_reader {
    apr_pool_t *pool;
    apr_size_t max_event, max_round;
    ci_sse_event_fn fn;
    void *baton;

    ci_sse_read_status status;
    const char *error;
    apr_size_t fed;          /* bytes fed this round (the BOM included) */
    apr_size_t block;        /* line bytes of the current event so far */
    apr_size_t events;
    int bom;                 /* BOM bytes matched so far; -1 once past the start */
    int after_cr;            /* the last byte was a CR: an LF now is its pair */

    sse_line_state line;
    sse_target target;
    char field[FIELD_MAX + 1];
    apr_size_t field_len;    /* FIELD_MAX + 1: longer than any known name */
    int id_has_nul;

    ci_buf data, event, id, id_new;    /* unbounded: the reader counts */
};

static const char bom_bytes[3] = { '\xEF', '\xBB', '\xBF' };

/* ---- status ----------------------------------------------------------- */

static void fail(ci_sse_reader *r, ci_sse_read_status status, const char *why)
{
    r->status = status;
    r->error = why;
}

/* ---- events ----------------------------------------------------------- */

static void dispatch(ci_sse_reader *r)
{
    ci_sse_event ev;
    if (r->data.len == 0)          /* no data line: nothing to dispatch */
        return;
    r->data.data[--r->data.len] = '\0';   /* the "\n" after the last data line */
    if (r->data.len == 6 && !memcmp(r->data.data, "[DONE]", 6)) {
        r->status = CI_SSE_READ_DONE;
        return;
    }
    ev.event = r->event.len ? r->event.data : "message";
    ev.event_len = r->event.len ? r->event.len : 7;
    ev.data = r->data.data;
    ev.data_len = r->data.len;
    ev.id = r->id.len ? r->id.data : "";
    r->events++;
    if (r->fn(r->baton, &ev) != 0)
        fail(r, CI_SSE_READ_STOPPED, "the stream reader was stopped by its caller");
}

/* A blank line: dispatch, then start the next event afresh. */
static void end_event(ci_sse_reader *r)
{
    dispatch(r);
    ci_buf_clear(&r->data);
    ci_buf_clear(&r->event);
    r->block = 0;
}

/* ---- fields ----------------------------------------------------------- */

static sse_target field_target(const ci_sse_reader *r)
{
    if (r->field_len == 4 && !memcmp(r->field, "data", 4))
        return TO_DATA;
    if (r->field_len == 5 && !memcmp(r->field, "event", 5))
        return TO_EVENT;
    if (r->field_len == 2 && !memcmp(r->field, "id", 2))
        return TO_ID;
    return TO_NOWHERE;          /* retry, and fields this reader does not know */
}

/* The field name is complete: get its value's buffer ready. */
static void begin_value(ci_sse_reader *r)
{
    r->target = field_target(r);
    if (r->target == TO_EVENT)
        ci_buf_clear(&r->event);
    else if (r->target == TO_ID) {
        ci_buf_clear(&r->id_new);
        r->id_has_nul = 0;
    }
}

static void value_bytes(ci_sse_reader *r, const char *s, apr_size_t n)
{
    switch (r->target) {
    case TO_DATA:
        ci_buf_append(&r->data, s, n);
        break;
    case TO_EVENT:
        ci_buf_append(&r->event, s, n);
        break;
    case TO_ID:
        if (memchr(s, '\0', n))
            r->id_has_nul = 1;
        ci_buf_append(&r->id_new, s, n);
        break;
    case TO_NOWHERE:
        break;
    }
}

static void end_value(ci_sse_reader *r)
{
    if (r->target == TO_DATA)
        ci_buf_append(&r->data, "\n", 1);
    else if (r->target == TO_ID && !r->id_has_nul) {
        ci_buf t = r->id;      /* the new id becomes the last event id */
        r->id = r->id_new;
        r->id_new = t;
    }
}

static void end_line(ci_sse_reader *r)
{
    switch (r->line) {
    case AT_LINE_START:
        end_event(r);
        break;
    case IN_FIELD:              /* a field name alone: its value is empty */
        begin_value(r);
        end_value(r);
        break;
    case AT_VALUE_START:
    case IN_VALUE:
        end_value(r);
        break;
    case IN_COMMENT:
        break;
    }
    r->line = AT_LINE_START;
}

/* Read S (N > 0 bytes, no line end among them) as part of the current
 * line. */
static void line_bytes(ci_sse_reader *r, const char *s, apr_size_t n)
{
    while (n) {
        switch (r->line) {
        case AT_LINE_START:
            r->line = *s == ':' ? IN_COMMENT : IN_FIELD;
            r->field_len = 0;
            continue;
        case IN_FIELD: {
            const char *colon = memchr(s, ':', n);
            apr_size_t k = colon ? (apr_size_t)(colon - s) : n;
            if (r->field_len + k <= FIELD_MAX)
                memcpy(r->field + r->field_len, s, k), r->field_len += k;
            else
                r->field_len = FIELD_MAX + 1;
            if (colon) {
                begin_value(r);
                r->line = AT_VALUE_START;
                k++;
            }
            s += k, n -= k;
            continue;
        }
        case AT_VALUE_START:
            r->line = IN_VALUE;
            if (*s == ' ')
                s++, n--;
            continue;
        case IN_VALUE:
            value_bytes(r, s, n);
            return;
        case IN_COMMENT:
            return;
        }
    }
}

/* The length of the run at S (N bytes) before the first CR or LF. One pass:
 * searching for each with memchr would rescan the rest of a large chunk on
 * every line of a stream that uses only the other. */
static apr_size_t run_length(const char *s, apr_size_t n)
{
    apr_size_t k = 0;
    while (k < n && s[k] != '\n' && s[k] != '\r')
        k++;
    return k;
}

/* Read N bytes of the stream proper (after the BOM). */
static void read_bytes(ci_sse_reader *r, const char *s, apr_size_t n)
{
    while (n && r->status == CI_SSE_READ_OK) {
        apr_size_t k;
        if (r->after_cr) {
            r->after_cr = 0;
            if (*s == '\n') {   /* the LF of a CRLF split or not by the chunks */
                s++, n--;
                continue;
            }
        }
        if (*s == '\r' || *s == '\n') {
            r->after_cr = *s == '\r';
            end_line(r);
            s++, n--;
            continue;
        }
        k = run_length(s, n);
        if (k > r->max_event - r->block) {
            fail(r, CI_SSE_READ_EVENT_TOO_LARGE,
                 apr_psprintf(r->pool, "an event of the upstream stream is larger "
                              "than %" APR_SIZE_T_FMT " bytes", r->max_event));
            return;
        }
        r->block += k;
        line_bytes(r, s, k);
        s += k, n -= k;
    }
}

/* Skip one leading BOM, which may come split across chunks. Returns the
 * bytes of BUF it took. */
static apr_size_t skip_bom(ci_sse_reader *r, const char *buf, apr_size_t len)
{
    apr_size_t used = 0;
    while (r->bom >= 0 && used < len) {
        if (buf[used] == bom_bytes[r->bom]) {
            used++;
            if (++r->bom == 3)
                r->bom = -1;
            continue;
        }
        {   /* not a BOM after all: what matched of it is content */
            int matched = r->bom;
            r->bom = -1;
            read_bytes(r, bom_bytes, (apr_size_t)matched);
        }
    }
    return used;
}

/* ---- the API ---------------------------------------------------------- */

ci_sse_reader *ci_sse_reader_create(apr_pool_t *p, apr_size_t max_event,
                                    apr_size_t max_round, ci_sse_event_fn fn,
                                    void *baton)
{
    ci_sse_reader *r = apr_pcalloc(p, sizeof(*r));
    r->pool = p;
    r->max_event = max_event;
    r->max_round = max_round;
    r->fn = fn;
    r->baton = baton;
    ci_buf_init(&r->data, p, APR_SIZE_MAX / 2);
    ci_buf_init(&r->event, p, APR_SIZE_MAX / 2);
    ci_buf_init(&r->id, p, APR_SIZE_MAX / 2);
    ci_buf_init(&r->id_new, p, APR_SIZE_MAX / 2);
    ci_sse_reader_reset(r);
    return r;
}

void ci_sse_reader_reset(ci_sse_reader *r)
{
    r->status = CI_SSE_READ_OK;
    r->error = NULL;
    r->fed = r->block = r->events = 0;
    r->bom = 0;
    r->after_cr = 0;
    r->line = AT_LINE_START;
    ci_buf_clear(&r->data);
    ci_buf_clear(&r->event);
    ci_buf_clear(&r->id);
    ci_buf_clear(&r->id_new);
}

ci_sse_read_status ci_sse_reader_feed(ci_sse_reader *r, const char *buf,
                                      apr_size_t len)
{
    apr_size_t allowed, used;
    if (r->status != CI_SSE_READ_OK)
        return r->status;
    /* Read up to the round's bound, then refuse: the events completed
     * within the bound are delivered however the stream was split. */
    allowed = r->max_round - r->fed;
    if (len > allowed) {
        r->fed = r->max_round;
        used = skip_bom(r, buf, allowed);
        read_bytes(r, buf + used, allowed - used);
        if (r->status == CI_SSE_READ_OK)
            fail(r, CI_SSE_READ_ROUND_TOO_LARGE,
                 apr_psprintf(r->pool, "the upstream stream is larger than "
                              "%" APR_SIZE_T_FMT " bytes", r->max_round));
        return r->status;
    }
    r->fed += len;
    used = skip_bom(r, buf, len);
    read_bytes(r, buf + used, len - used);
    return r->status;
}

ci_sse_read_status ci_sse_reader_end(ci_sse_reader *r)
{
    if (r->status != CI_SSE_READ_OK)
        return r->status;
    if (r->bom > 0 || r->block > 0 || r->line != AT_LINE_START)
        return CI_SSE_READ_TRUNCATED;
    return CI_SSE_READ_OK;
}

const char *ci_sse_reader_error(const ci_sse_reader *r)
{
    return r->error;
}

apr_size_t ci_sse_reader_events(const ci_sse_reader *r)
{
    return r->events;
}

apr_size_t ci_sse_reader_footprint(const ci_sse_reader *r)
{
    return r->data.alloc + r->event.alloc + r->id.alloc + r->id_new.alloc;
}

ci_sse_read_status ci_sse_event_json(apr_pool_t *p, const ci_sse_event *ev,
                                     json_object **obj, const char **type,
                                     const char **err)
{
    const char *why = NULL;
    json_object *o = ci_json_parse(p, ev->data, ev->data_len, &why);
    *obj = NULL;
    *type = NULL;
    if (!o || !json_object_is_type(o, json_type_object)) {
        if (err)
            *err = apr_psprintf(p, "the data of the upstream event '%s' is not a "
                                   "JSON object%s%s", ev->event, why ? ": " : "",
                                why ? why : "");
        return CI_SSE_READ_BAD_JSON;
    }
    if (!ci_json_str(o, "type")) {
        if (err)
            *err = apr_psprintf(p, "the upstream event '%s' has no \"type\"",
                                ev->event);
        return CI_SSE_READ_NO_TYPE;
    }
    *obj = o;
    *type = ci_json_str(o, "type");
    return CI_SSE_READ_OK;
}

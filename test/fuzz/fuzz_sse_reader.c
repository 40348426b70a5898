/*
 * fuzz_sse_reader.c - the reader of the upstream model's event stream fed
 * arbitrary bytes.
 *
 * The input is the stream. A hash of it picks the bounds (per event: 1 byte
 * to 4 KiB or none; per round: around the input's size or none), sometimes
 * an event at which the callback stops the reader, and the sizes of the
 * pieces the stream arrives in (1 to 64 bytes, now and then a large one).
 *
 * Checked against a reference reader written for clarity, not speed (the
 * whole input split into lines at once, the WHATWG rules applied line by
 * line): the same events (name, data, last event id), in the same order,
 * the same status from the feeds and from the end. Then the reader is reset
 * and fed the whole stream in one piece: the same again. Every event's
 * strings are NUL-terminated, its JSON (ci_sse_event_json) agrees with
 * ci_json_parse, and the reader's buffers stay within a few times the bound.
 */
#include "fuzz_common.h"
#include "ci_sse_reader.h"

typedef struct ev_copy {
    char *event, *data, *id;
    size_t event_len, data_len, id_len;
} ev_copy;

typedef struct ev_list {
    ev_copy *ev;
    int n, cap;
    int stop_at;          /* the callback stops at this event (1-based), 0 never */
    apr_pool_t *scratch;  /* for ci_sse_event_json, cleared per event */
} ev_list;

static char *dup_bytes(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static void list_push(ev_list *l, const char *event, size_t elen, const char *data,
                      size_t dlen, const char *id, size_t ilen)
{
    ev_copy *e;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->ev = realloc(l->ev, (size_t)l->cap * sizeof(*l->ev));
    }
    e = &l->ev[l->n++];
    e->event = dup_bytes(event, elen);
    e->event_len = elen;
    e->data = dup_bytes(data, dlen);
    e->data_len = dlen;
    e->id = dup_bytes(id, ilen);
    e->id_len = ilen;
}

static void list_free(ev_list *l)
{
    int i;
    for (i = 0; i < l->n; i++) {
        free(l->ev[i].event);
        free(l->ev[i].data);
        free(l->ev[i].id);
    }
    free(l->ev);
    memset(l, 0, sizeof(*l));
}

/* ci_sse_event_json must agree with ci_json_parse on the data. */
static void check_json(apr_pool_t *p, const ci_sse_event *ev)
{
    json_object *o, *ref;
    const char *type, *err = NULL, *rerr = NULL;
    ci_sse_read_status st;
    apr_pool_clear(p);
    st = ci_sse_event_json(p, ev, &o, &type, &err);
    ref = ci_json_parse(p, ev->data, ev->data_len, &rerr);
    if (!ref || !json_object_is_type(ref, json_type_object))
        FUZZ_CHECK(st == CI_SSE_READ_BAD_JSON && !o && !type && err, "status %d", st);
    else if (!ci_json_str(ref, "type"))
        FUZZ_CHECK(st == CI_SSE_READ_NO_TYPE && !o && !type && err, "status %d", st);
    else
        FUZZ_CHECK(st == CI_SSE_READ_OK && o && type &&
                       !strcmp(type, ci_json_str(ref, "type")),
                   "status %d", st);
}

static int on_event(void *baton, const ci_sse_event *ev)
{
    ev_list *l = baton;
    FUZZ_CHECK(ev->event && ev->data && ev->id, "NULL string in an event");
    FUZZ_CHECK(ev->event_len > 0 && ev->event[ev->event_len] == '\0',
               "event name of %zu bytes not NUL-terminated", (size_t)ev->event_len);
    FUZZ_CHECK(ev->data[ev->data_len] == '\0', "data not NUL-terminated");
    FUZZ_CHECK(!(ev->data_len == 6 && !memcmp(ev->data, "[DONE]", 6)),
               "[DONE] passed on as an event");
    list_push(l, ev->event, ev->event_len, ev->data, ev->data_len, ev->id,
              strlen(ev->id));
    check_json(l->scratch, ev);
    return l->stop_at && l->n == l->stop_at;
}

/* ---- the reference -------------------------------------------------------- */

typedef struct ref_state {
    const uint8_t *s;
    size_t max_event;
    ev_list *out;
    char *data, *event, *id;      /* malloc'd, each at most the input's size */
    size_t data_len, event_len, id_len;
    size_t block;                 /* line bytes of the current event */
    ci_sse_read_status status;
} ref_state;

static void ref_dispatch(ref_state *r)
{
    if (r->data_len) {
        r->data_len--;
        if (r->data_len == 6 && !memcmp(r->data, "[DONE]", 6))
            r->status = CI_SSE_READ_DONE;
        else {
            list_push(r->out, r->event_len ? r->event : "message",
                      r->event_len ? r->event_len : 7, r->data, r->data_len, r->id,
                      r->id_len);
            if (r->out->stop_at && r->out->n == r->out->stop_at)
                r->status = CI_SSE_READ_STOPPED;
        }
    }
    r->data_len = r->event_len = r->block = 0;
}

/* One whole line (no line end), as the specification reads it. */
static void ref_line(ref_state *r, const char *line, size_t n)
{
    const char *colon, *value;
    size_t flen, vlen;
    if (n == 0) {
        ref_dispatch(r);
        return;
    }
    if (line[0] == ':')
        return;
    colon = memchr(line, ':', n);
    flen = colon ? (size_t)(colon - line) : n;
    value = colon ? colon + 1 : line + n;
    vlen = (size_t)(line + n - value);
    if (vlen && value[0] == ' ')
        value++, vlen--;
    if (flen == 4 && !memcmp(line, "data", 4)) {
        memcpy(r->data + r->data_len, value, vlen);
        r->data_len += vlen;
        r->data[r->data_len++] = '\n';
    }
    else if (flen == 5 && !memcmp(line, "event", 5)) {
        memcpy(r->event, value, vlen);
        r->event_len = vlen;
    }
    else if (flen == 2 && !memcmp(line, "id", 2) && !memchr(value, '\0', vlen)) {
        memcpy(r->id, value, vlen);
        r->id_len = vlen;
    }
}

/* Read S[0..N) whole. Sets *END to what ci_sse_reader_end should say when
 * the input was not cut by the round's bound. */
static void ref_read(ref_state *r, const char *s, size_t n, ci_sse_read_status *end)
{
    size_t at = 0;
    *end = CI_SSE_READ_OK;
    while (at < n && r->status == CI_SSE_READ_OK) {
        size_t k = 0;
        while (at + k < n && s[at + k] != '\r' && s[at + k] != '\n')
            k++;
        if (k > r->max_event - r->block) {
            r->status = CI_SSE_READ_EVENT_TOO_LARGE;
            return;
        }
        r->block += k;
        if (at + k == n) {        /* a line without its end: cut short */
            *end = CI_SSE_READ_TRUNCATED;
            return;
        }
        ref_line(r, s + at, k);
        at += k + 1;
        if (s[at - 1] == '\r' && at < n && s[at] == '\n')
            at++;
    }
    if (r->block)
        *end = CI_SSE_READ_TRUNCATED;
}

static void reference(const uint8_t *data, size_t size, size_t max_event,
                      size_t max_round, ev_list *out, ci_sse_read_status *feed_st,
                      ci_sse_read_status *end_st)
{
    ref_state r;
    size_t n = size < max_round ? size : max_round, skip = 0;
    const char *s = (const char *)data;
    ci_sse_read_status end;
    memset(&r, 0, sizeof(r));
    r.max_event = max_event;
    r.out = out;
    r.status = CI_SSE_READ_OK;
    r.data = malloc(2 * size + 2);
    r.event = malloc(size + 1);
    r.id = malloc(size + 1);
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3))
        skip = 3;
    if (n < 3 && n > 0 && !memcmp(s, "\xEF\xBB\xBF", n) && size <= max_round) {
        /* a stream that is only the start of a BOM */
        *feed_st = CI_SSE_READ_OK;
        *end_st = CI_SSE_READ_TRUNCATED;
    }
    else {
        if (n < 3 && !memcmp(s, "\xEF\xBB\xBF", n))
            skip = n;             /* (then cut by the round's bound) */
        ref_read(&r, s + skip, n - skip, &end);
        if (r.status == CI_SSE_READ_OK && size > max_round)
            r.status = CI_SSE_READ_ROUND_TOO_LARGE;
        *feed_st = r.status;
        *end_st = r.status != CI_SSE_READ_OK ? r.status : end;
    }
    free(r.data);
    free(r.event);
    free(r.id);
}

/* ---- the target ----------------------------------------------------------- */

static void compare(const ev_list *got, const ev_list *want, const char *how)
{
    int i;
    FUZZ_CHECK(got->n == want->n, "%s: %d events, the reference %d", how, got->n,
               want->n);
    for (i = 0; i < got->n; i++) {
        const ev_copy *a = &got->ev[i], *b = &want->ev[i];
        FUZZ_CHECK(a->event_len == b->event_len && !memcmp(a->event, b->event, a->event_len),
                   "%s: event %d is named '%s', the reference '%s'", how, i, a->event,
                   b->event);
        FUZZ_CHECK(a->data_len == b->data_len && !memcmp(a->data, b->data, a->data_len),
                   "%s: event %d has data '%.*s', the reference '%.*s'", how, i,
                   (int)a->data_len, a->data, (int)b->data_len, b->data);
        FUZZ_CHECK(a->id_len == b->id_len && !memcmp(a->id, b->id, a->id_len),
                   "%s: event %d has id '%s', the reference '%s'", how, i, a->id, b->id);
    }
}

static ci_sse_read_status feed_pieces(ci_sse_reader *r, const uint8_t *data, size_t size,
                                      uint64_t *st)
{
    ci_sse_read_status s = CI_SSE_READ_OK;
    size_t at = 0;
    do {
        uint64_t x = fuzz_next(st);
        size_t n = (x & 0xF00) == 0 ? (size_t)(x % 4096) + 1 : (size_t)(x % 64) + 1;
        char *piece;
        if (n > size - at)
            n = size - at;
        piece = malloc(n ? n : 1);      /* exact size: over-reads are caught */
        memcpy(piece, data + at, n);
        s = ci_sse_reader_feed(r, piece, n);
        free(piece);
        at += n;
    } while (at < size);
    return s;
}

static const size_t event_bounds[] = { 1, 2, 7, 16, 64, 256, 4096, (size_t)-1 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t st = fuzz_hash(data, size);
    uint64_t pick = fuzz_next(&st);
    size_t max_event = event_bounds[pick % 8];
    size_t max_round;
    ev_list got, whole, want;
    ci_sse_read_status feed_st, end_st, want_feed, want_end;
    apr_pool_t *p = fuzz_pool_create(), *scratch;
    ci_sse_reader *r;
    size_t cap, limit;
    char *copy;

    switch ((pick >> 8) % 6) {
    case 0: max_round = size / 2; break;
    case 1: max_round = size ? size - 1 : 0; break;
    case 2: max_round = size; break;
    default: max_round = (size_t)-1; break;
    }
    memset(&got, 0, sizeof(got));
    memset(&whole, 0, sizeof(whole));
    memset(&want, 0, sizeof(want));
    got.stop_at = whole.stop_at = want.stop_at =
        (pick >> 16) % 8 == 0 ? (int)((pick >> 24) % 3) + 1 : 0;
    apr_pool_create(&scratch, NULL);
    got.scratch = whole.scratch = scratch;

    reference(data, size, max_event, max_round, &want, &want_feed, &want_end);

    r = ci_sse_reader_create(p, max_event, max_round, on_event, &got);
    feed_st = feed_pieces(r, data, size, &st);
    end_st = ci_sse_reader_end(r);
    compare(&got, &want, "in pieces");
    FUZZ_CHECK(feed_st == want_feed, "feed status %d, the reference %d", feed_st,
               want_feed);
    FUZZ_CHECK(end_st == want_end, "end status %d, the reference %d", end_st, want_end);
    FUZZ_CHECK((ci_sse_reader_error(r) != NULL) ==
                   (feed_st != CI_SSE_READ_OK && feed_st != CI_SSE_READ_DONE),
               "error message and status %d disagree", feed_st);
    FUZZ_CHECK(ci_sse_reader_events(r) == (apr_size_t)got.n, "event count");

    /* The buffers hold at most an event's data (with its "\n"s) each, and
     * grow by doubling from 64 bytes. */
    limit = size < max_event ? size : max_event;
    cap = 64;
    while (cap <= limit + limit / 4 + 2)
        cap *= 2;
    FUZZ_CHECK(ci_sse_reader_footprint(r) <= 4 * cap, "footprint %zu for events of "
               "%zu bytes", (size_t)ci_sse_reader_footprint(r), limit);

    /* Again, after a reset, in one piece. */
    r = ci_sse_reader_create(p, max_event, max_round, on_event, &whole);
    if (size && fuzz_next(&st) % 2) {
        ci_sse_reader_feed(r, (const char *)data, size / 2);
        ci_sse_reader_reset(r);
        list_free(&whole);
        whole.stop_at = want.stop_at;
        whole.scratch = scratch;
    }
    copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    feed_st = ci_sse_reader_feed(r, copy, size);
    free(copy);
    compare(&whole, &want, "whole");
    FUZZ_CHECK(feed_st == want_feed, "whole: feed status %d, the reference %d", feed_st,
               want_feed);
    FUZZ_CHECK(ci_sse_reader_end(r) == want_end, "whole: end status");

    list_free(&got);
    list_free(&whole);
    list_free(&want);
    apr_pool_destroy(scratch);
    fuzz_pool_destroy(p);
    return 0;
}

/*
 * fuzz_multipart.c - the multipart/form-data reader fed arbitrary bodies.
 *
 * The input is a Content-Type value, a LF, then the body. The value goes
 * through ci_multipart_boundary (its answer is checked: a valid boundary,
 * or none and a message); when it gives no boundary, a hash of the input
 * picks one of a few (one byte, self-overlapping, undici's). The hash also
 * picks the bounds (header section, parts, part size: small, at the
 * input's scale, or none), sometimes a part at whose begin or end the
 * callbacks stop the reader, and the sizes of the pieces the body arrives
 * in (1 to 64 bytes, now and then up to 4 KiB).
 *
 * Checked against a reference reader written for clarity, not speed: the
 * whole body at once, delimiters found with memmem, the held-back bytes at
 * the end worked out from the text, each part's header section handed to
 * ci_multipart_parse_headers. The same callbacks (each part's headers, its
 * data with the pieces joined, its end), in the same order, and the same
 * status from the feeds and from the end. Then once more with the body in
 * one piece. While a part's delimiter is incomplete, the data delivered
 * lags the bytes fed by at most the delimiter's length - 1; the buffers
 * stay within the documented footprint. The body is also read as one
 * part's header section by ci_multipart_parse_headers.
 */
#include "fuzz_common.h"
#include <apr_lib.h>
#include "ci_multipart.h"

/* ---- what the callbacks saw ------------------------------------------- */

typedef struct event {
    char type;                   /* 'B'egin, 'D'ata (pieces joined), 'E'nd */
    char *name, *filename, *content_type;   /* B; NULL when absent */
    char *data;                  /* D */
    size_t len;
} event;

typedef struct ev_list {
    event *ev;
    int n, cap;
    int stop_begin, stop_end;    /* stop at this part's begin / end (1-based), 0 never */
    int begins, ends;
    size_t delivered;            /* data bytes of the current part */
} ev_list;

static char *dup_str(const char *s)
{
    return s ? strdup(s) : NULL;
}

static event *push(ev_list *l, char type)
{
    event *e;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->ev = realloc(l->ev, (size_t)l->cap * sizeof(*l->ev));
    }
    e = &l->ev[l->n++];
    memset(e, 0, sizeof(*e));
    e->type = type;
    return e;
}

static void list_free(ev_list *l)
{
    int i;
    for (i = 0; i < l->n; i++) {
        free(l->ev[i].name);
        free(l->ev[i].filename);
        free(l->ev[i].content_type);
        free(l->ev[i].data);
    }
    free(l->ev);
    l->ev = NULL;
    l->n = l->cap = 0;
}

/* Returns whether to stop, as the callbacks do. */
static int saw_begin(ev_list *l, const ci_multipart_part *part)
{
    event *e = push(l, 'B');
    e->name = dup_str(part->name);
    e->filename = dup_str(part->filename);
    e->content_type = dup_str(part->content_type);
    l->begins++;
    l->delivered = 0;
    return l->stop_begin && l->begins == l->stop_begin;
}

static void saw_data(ev_list *l, const char *data, size_t len)
{
    event *e = l->n && l->ev[l->n - 1].type == 'D' ? &l->ev[l->n - 1] : push(l, 'D');
    e->data = realloc(e->data, e->len + len + 1);
    memcpy(e->data + e->len, data, len);
    e->len += len;
    l->delivered += len;
}

static int saw_end(ev_list *l)
{
    push(l, 'E');
    l->ends++;
    return l->stop_end && l->ends == l->stop_end;
}

static int on_begin(void *baton, const ci_multipart_part *part)
{
    ev_list *l = baton;
    FUZZ_CHECK(part->name != NULL, "a part without a name");
    FUZZ_CHECK(part->index == (apr_size_t)l->begins, "part index %zu, expected %d",
               (size_t)part->index, l->begins);
    return saw_begin(l, part);
}

static int on_data(void *baton, const ci_multipart_part *part, const char *data,
                   apr_size_t len)
{
    ev_list *l = baton;
    FUZZ_CHECK(len > 0, "part_data with no bytes");
    FUZZ_CHECK(l->begins > l->ends && part->index == (apr_size_t)l->begins - 1,
               "data outside a part");
    saw_data(l, data, len);
    return 0;
}

static int on_end(void *baton, const ci_multipart_part *part)
{
    ev_list *l = baton;
    FUZZ_CHECK(l->begins == l->ends + 1 && part->index == (apr_size_t)l->ends,
               "part_end without part_begin");
    return saw_end(l);
}

static const ci_multipart_callbacks callbacks = { on_begin, on_data, on_end };

/* ---- the reference ----------------------------------------------------- */

/* Where each part's body starts and its delimiter ends, for the held-back
 * check (SIZE_MAX when the part has no delimiter). */
typedef struct ref_out {
    ev_list *events;
    ci_multipart_status feed, end;
    size_t *body_start, *delim_end;
    int nparts;
    apr_pool_t *scratch;         /* for ci_multipart_parse_headers */
} ref_out;

/* The length of the longest suffix of S (N bytes) that is a proper prefix
 * of DELIM (DLEN bytes): the bytes the reader holds back at the end. */
static size_t held_suffix(const char *s, size_t n, const char *delim, size_t dlen)
{
    size_t k = n < dlen - 1 ? n : dlen - 1;
    for (; k > 0; k--)
        if (!memcmp(s + n - k, delim, k))
            return k;
    return 0;
}

static void ref_fail(ref_out *o, ci_multipart_status st)
{
    o->feed = o->end = st;
}

/* The body ran out: TRUNCATED at the end. */
static void ref_truncated(ref_out *o)
{
    o->feed = CI_MULTIPART_OK;
    o->end = CI_MULTIPART_TRUNCATED;
}

/* The preamble. Returns where the first boundary's tail starts (past the
 * delimiter, so never 0), or 0 with the outcome set. The body's start
 * stands for the delimiter's CRLF, so the search is in CRLF + body. */
static size_t ref_preamble(const char *s, size_t n, const char *delim, size_t dlen,
                           const ci_multipart_limits *lim, ref_out *o)
{
    char *v = malloc(n + 2);
    const char *found;
    size_t pre, tail = 0;
    memcpy(v, "\r\n", 2);
    memcpy(v + 2, s, n);
    found = memmem(v, n + 2, delim, dlen);
    if (found) {
        pre = found == v ? 0 : (size_t)(found - v) - 2;
        tail = (size_t)(found - v) + dlen - 2;
    }
    else {
        size_t held = held_suffix(v, n + 2, delim, dlen);
        pre = held >= n ? 0 : n - held;
    }
    free(v);
    if (pre > lim->max_header) {
        ref_fail(o, CI_MULTIPART_HEADER_TOO_LARGE);
        return 0;
    }
    if (!found)
        ref_truncated(o);
    return tail;
}

/* After a delimiter, at S[*AT]: "--", or padding and CRLF. Returns 1 when
 * a part opens (*AT past the CRLF), 0 with the outcome set (DONE or a
 * failure). */
static int ref_boundary_tail(const char *s, size_t n, size_t *at,
                             const ci_multipart_limits *lim, ref_out *o, int *parts)
{
    ev_list *l = o->events;
    size_t i = *at, pad = 0;
    int open = l->begins > l->ends;
    if (i < n && s[i] == '-') {
        if (i + 1 == n)
            return ref_truncated(o), 0;
        if (s[i + 1] != '-')
            return ref_fail(o, CI_MULTIPART_BAD_DELIMITER), 0;
        if (open && saw_end(l))
            return ref_fail(o, CI_MULTIPART_STOPPED), 0;
        o->feed = o->end = CI_MULTIPART_DONE;
        return 0;
    }
    for (; i < n && (s[i] == ' ' || s[i] == '\t'); i++, pad++)
        if (pad == lim->max_header)
            return ref_fail(o, CI_MULTIPART_HEADER_TOO_LARGE), 0;
    if (i == n || (s[i] == '\r' && i + 1 == n))
        return ref_truncated(o), 0;
    if (s[i] == '\n')
        return ref_fail(o, CI_MULTIPART_BARE_LF), 0;
    if (s[i] != '\r' || s[i + 1] != '\n')
        return ref_fail(o, CI_MULTIPART_BAD_DELIMITER), 0;
    *at = i + 2;
    if (open && saw_end(l))
        return ref_fail(o, CI_MULTIPART_STOPPED), 0;
    if ((size_t)*parts == lim->max_parts)
        return ref_fail(o, CI_MULTIPART_TOO_MANY_PARTS), 0;
    (*parts)++;
    return 1;
}

/* A part's header section from S[*AT], byte by byte as the rules say;
 * then read by ci_multipart_parse_headers. Returns 1 with *AT at the body,
 * 0 with the outcome set. */
static int ref_headers(const char *s, size_t n, size_t *at,
                       const ci_multipart_limits *lim, ref_out *o)
{
    size_t start = *at, i = start, line = start;
    ci_multipart_part part;
    ci_multipart_status st;
    for (;;) {
        if (i == n)
            return ref_truncated(o), 0;
        if (i - start == lim->max_header)
            return ref_fail(o, CI_MULTIPART_HEADER_TOO_LARGE), 0;
        if (s[i] == '\0')
            return ref_fail(o, CI_MULTIPART_BAD_HEADER), 0;
        if (s[i] == '\n')
            return ref_fail(o, CI_MULTIPART_BARE_LF), 0;
        if (s[i++] != '\r')
            continue;
        /* a CR: its LF is the next byte, which counts and is checked too */
        if (i == n)
            return ref_truncated(o), 0;
        if (i - start == lim->max_header)
            return ref_fail(o, CI_MULTIPART_HEADER_TOO_LARGE), 0;
        if (s[i] != '\n')
            return ref_fail(o, CI_MULTIPART_BAD_HEADER), 0;
        i++;
        if (i - 2 == line)
            break;              /* the blank line */
        line = i;
    }
    apr_pool_clear(o->scratch);
    st = ci_multipart_parse_headers(o->scratch, s + start, i - start, &part, NULL);
    FUZZ_CHECK(st == CI_MULTIPART_OK || st == CI_MULTIPART_BAD_HEADER,
               "a clean section read as %d", st);
    if (st != CI_MULTIPART_OK)
        return ref_fail(o, st), 0;
    *at = i;
    if (saw_begin(o->events, &part))
        return ref_fail(o, CI_MULTIPART_STOPPED), 0;
    return 1;
}

/* A part's body from S[*AT] to the next delimiter. Returns 1 with *AT past
 * the delimiter, 0 with the outcome set. */
static int ref_body(const char *s, size_t n, size_t *at, const char *delim, size_t dlen,
                    const ci_multipart_limits *lim, ref_out *o)
{
    const char *found = memmem(s + *at, n - *at, delim, dlen);
    size_t len = found ? (size_t)(found - s) - *at
                       : n - *at - held_suffix(s + *at, n - *at, delim, dlen);
    o->body_start[o->nparts] = *at;
    o->delim_end[o->nparts++] = found ? (size_t)(found - s) + dlen : SIZE_MAX;
    if (len > lim->max_body) {
        if (lim->max_body)
            saw_data(o->events, s + *at, lim->max_body);
        return ref_fail(o, CI_MULTIPART_PART_TOO_LARGE), 0;
    }
    if (len)
        saw_data(o->events, s + *at, len);
    if (!found)
        return ref_truncated(o), 0;
    *at += len + dlen;
    return 1;
}

static void reference(const char *s, size_t n, const char *boundary,
                      const ci_multipart_limits *lim, ref_out *o)
{
    char delim[80];
    size_t dlen = (size_t)snprintf(delim, sizeof(delim), "\r\n--%s", boundary);
    size_t at = ref_preamble(s, n, delim, dlen, lim, o);
    int parts = 0;
    if (!at)
        return;
    while (ref_boundary_tail(s, n, &at, lim, o, &parts) &&
           ref_headers(s, n, &at, lim, o) &&
           ref_body(s, n, &at, delim, dlen, lim, o))
        ;
}

/* ---- the target --------------------------------------------------------- */

static void compare(const ev_list *got, const ev_list *want, const char *how)
{
    int i;
    FUZZ_CHECK(got->n == want->n, "%s: %d callbacks, the reference %d", how, got->n,
               want->n);
    for (i = 0; i < got->n; i++) {
        const event *a = &got->ev[i], *b = &want->ev[i];
#define SAME_STR(x, y) ((x) == NULL ? (y) == NULL : (y) != NULL && !strcmp(x, y))
        FUZZ_CHECK(a->type == b->type, "%s: callback %d is %c, the reference %c", how, i,
                   a->type, b->type);
        FUZZ_CHECK(SAME_STR(a->name, b->name) && SAME_STR(a->filename, b->filename) &&
                       SAME_STR(a->content_type, b->content_type),
                   "%s: part headers differ at callback %d", how, i);
        FUZZ_CHECK(a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len)),
                   "%s: callback %d has %zu bytes of data, the reference %zu", how, i,
                   a->len, b->len);
#undef SAME_STR
    }
}

static void check_boundary_answer(ci_multipart_status st, const char *b, const char *err)
{
    size_t i, n;
    if (st != CI_MULTIPART_OK) {
        FUZZ_CHECK(st == CI_MULTIPART_NOT_MULTIPART || st == CI_MULTIPART_NO_BOUNDARY ||
                       st == CI_MULTIPART_BAD_BOUNDARY, "boundary status %d", st);
        FUZZ_CHECK(!b && err && *err, "a refused boundary without its message");
        return;
    }
    FUZZ_CHECK(b != NULL, "no boundary with OK");
    n = strlen(b);
    FUZZ_CHECK(n >= 1 && n <= 70 && b[n - 1] != ' ', "boundary of %zu bytes", n);
    for (i = 0; i < n; i++)
        FUZZ_CHECK(apr_isalnum(b[i]) || strchr("'()+_,-./:=? ", b[i]),
                   "boundary byte 0x%02x", (unsigned char)b[i]);
}

/* The body as a header section, whatever it holds: a part with a name, or
 * a refusal with its message. */
static void check_parse_headers(apr_pool_t *p, const char *s, size_t n)
{
    ci_multipart_part part;
    const char *err = NULL;
    char *copy = malloc(n ? n : 1);      /* exact size: over-reads are caught */
    ci_multipart_status st;
    memcpy(copy, s, n);
    apr_pool_clear(p);
    st = ci_multipart_parse_headers(p, copy, n, &part, &err);
    free(copy);
    if (st == CI_MULTIPART_OK)
        FUZZ_CHECK(part.name && !err, "a section read without a name");
    else
        FUZZ_CHECK((st == CI_MULTIPART_BAD_HEADER || st == CI_MULTIPART_BARE_LF) && err &&
                       !part.name, "section status %d", st);
}

static const char *const fallback[] = { "b", "ab", "--", "----formdata-undici-0123456789" };
static const size_t header_bounds[] = { 0, 1, 16, 48, 100, 300, 4096, (size_t)-1 };
static const size_t part_bounds[] = { 0, 1, 2, 3, 8, (size_t)-1, (size_t)-1, (size_t)-1 };
static const size_t body_bounds[] = { 0, 1, 5, 64, 1000, (size_t)-1, (size_t)-1, (size_t)-1 };

/* While a part's delimiter is incomplete, the data delivered lags the body
 * fed by at most the delimiter's length - 1: what may start a delimiter. */
static void check_held_back(const ev_list *got, size_t fed, size_t dlen,
                            const ref_out *want)
{
    int part = got->begins - 1;
    FUZZ_CHECK(part < want->nparts, "part %d unknown to the reference", part);
    if (fed < want->delim_end[part]) {
        size_t held = fed - want->body_start[part] - got->delivered;
        FUZZ_CHECK(held <= dlen - 1, "%zu bytes of part %d held back, the delimiter "
                   "has %zu", held, part, dlen);
    }
}

/* Feed the body in pieces, checking what is held back after each. */
static ci_multipart_status feed_pieces(ci_multipart *r, ev_list *got, const char *s,
                                       size_t n, size_t dlen, const ref_out *want,
                                       uint64_t *st)
{
    ci_multipart_status status = CI_MULTIPART_OK;
    size_t at = 0;
    do {
        uint64_t x = fuzz_next(st);
        size_t k = (x & 0xF00) == 0 ? (size_t)(x % 4096) + 1 : (size_t)(x % 64) + 1;
        char *piece;
        if (k > n - at)
            k = n - at;
        piece = malloc(k ? k : 1);      /* exact size: over-reads are caught */
        memcpy(piece, s + at, k);
        status = ci_multipart_feed(r, piece, k);
        free(piece);
        at += k;
        if (status == CI_MULTIPART_OK && got->begins > got->ends)
            check_held_back(got, at, dlen, want);
    } while (at < n);
    return status;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t st = fuzz_hash(data, size), pick = fuzz_next(&st);
    const uint8_t *lf = memchr(data, '\n', size);
    size_t ct_len = lf ? (size_t)(lf - data) : 0;
    const char *body = lf ? (const char *)lf + 1 : (const char *)data;
    size_t n = lf ? size - ct_len - 1 : size;
    apr_pool_t *p = fuzz_pool_create(), *scratch;
    ci_multipart_limits lim;
    const char *boundary = NULL, *err = NULL;
    ci_multipart_status bst, feed_st, end_st;
    ev_list got, whole, want_ev;
    ref_out want;
    ci_multipart *r;
    char *ct, *copy;
    size_t dlen, limit, vals_max;

    /* The Content-Type, NUL-terminated in a buffer of its exact size. */
    ct = malloc(ct_len + 1);
    memcpy(ct, data, ct_len);
    ct[ct_len] = '\0';
    bst = ci_multipart_boundary(p, lf ? ct : NULL, &boundary, &err);
    free(ct);
    check_boundary_answer(bst, boundary, err);
    if (bst != CI_MULTIPART_OK)
        boundary = fallback[(pick >> 40) % 4];
    dlen = strlen(boundary) + 4;

    lim.max_header = header_bounds[pick % 8];
    lim.max_parts = part_bounds[(pick >> 4) % 8];
    lim.max_body = body_bounds[(pick >> 8) % 8];
    if ((pick >> 12) % 4 == 0)
        lim.max_body = n / 2;           /* at the input's scale */
    memset(&got, 0, sizeof(got));
    memset(&whole, 0, sizeof(whole));
    memset(&want_ev, 0, sizeof(want_ev));
    if ((pick >> 16) % 4 == 0) {
        int k = (int)((pick >> 20) % 3) + 1;
        if ((pick >> 24) % 2)
            got.stop_begin = whole.stop_begin = want_ev.stop_begin = k;
        else
            got.stop_end = whole.stop_end = want_ev.stop_end = k;
    }

    apr_pool_create(&scratch, NULL);
    memset(&want, 0, sizeof(want));
    want.events = &want_ev;
    want.scratch = scratch;
    /* a part takes 5 bytes at least (its delimiter) */
    want.body_start = malloc((n / 5 + 2) * sizeof(size_t));
    want.delim_end = malloc((n / 5 + 2) * sizeof(size_t));
    reference(body, n, boundary, &lim, &want);

    r = ci_multipart_create(p, boundary, &lim, &callbacks, &got);
    feed_st = n ? feed_pieces(r, &got, body, n, dlen, &want, &st)
                : ci_multipart_feed(r, "", 0);
    end_st = ci_multipart_end(r);
    compare(&got, &want_ev, "in pieces");
    FUZZ_CHECK(feed_st == want.feed, "feed status %d, the reference %d (%s)", feed_st,
               want.feed, ci_multipart_error(r) ? ci_multipart_error(r) : "");
    FUZZ_CHECK(end_st == want.end, "end status %d, the reference %d", end_st, want.end);
    FUZZ_CHECK((ci_multipart_error(r) != NULL) == (end_st != CI_MULTIPART_DONE),
               "error message and status %d disagree", end_st);
    FUZZ_CHECK(ci_multipart_parts(r) == (apr_size_t)got.begins, "part count");

    /* The footprint: the section (at most max_header + 1, and twice what
     * was fed + 1), its values (at most max_header + 17, and twice the
     * section + 1), the delimiter and its NUL. */
    vals_max = lim.max_header > SIZE_MAX - 16 ? SIZE_MAX : lim.max_header + 16;
    limit = (lim.max_header < 2 * n ? lim.max_header : 2 * n) + 1;
    limit += (vals_max < 2 * n ? vals_max : 2 * n) + 1;
    FUZZ_CHECK(ci_multipart_footprint(r) <= limit + dlen + 1,
               "footprint %zu, max_header %zu, %zu bytes fed",
               (size_t)ci_multipart_footprint(r), (size_t)lim.max_header, n);

    /* Again, in one piece. */
    r = ci_multipart_create(p, boundary, &lim, &callbacks, &whole);
    copy = malloc(n ? n : 1);
    memcpy(copy, body, n);
    feed_st = ci_multipart_feed(r, copy, n);
    free(copy);
    compare(&whole, &want_ev, "whole");
    FUZZ_CHECK(feed_st == want.feed, "whole: feed status %d, the reference %d", feed_st,
               want.feed);
    FUZZ_CHECK(ci_multipart_end(r) == want.end, "whole: end status");

    check_parse_headers(scratch, body, n);

    list_free(&got);
    list_free(&whole);
    list_free(&want_ev);
    free(want.body_start);
    free(want.delim_end);
    apr_pool_destroy(scratch);
    fuzz_pool_destroy(p);
    return 0;
}

/*
 * ci_egress_scrub.c - on connections whose TLS the egress proxy terminates
 * for a domain secret (ci_egress_content.h): where the one request's body
 * ends, and the secrets' values taken out of everything the origin sends
 * back, however the reads split it. A value is overwritten with a mask of
 * the same length, so no framing (Content-Length, chunk sizes) changes.
 */
#include <string.h>
#include <strings.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_buf.h"
#include "ci_egress_content.h"

/* ---- chunked framing ------------------------------------------------------- */

enum {
    CH_SIZE = 0,        /* hex digits of a chunk size */
    CH_EXT,             /* ";ext" after the size, up to the line's end */
    CH_SIZE_LF,         /* the size line's CR seen */
    CH_DATA,
    CH_DATA_CR,         /* after the data: CRLF */
    CH_DATA_LF,
    CH_TRAILER,         /* a trailer line (or the blank line that ends all) */
    CH_TRAILER_LF,
    CH_DONE,
    CH_BAD
};

#define CHUNK_LINE_MAX 4096
#define CHUNK_DIGITS_MAX 15

static int hex_value(unsigned char c)
{
    return apr_isdigit(c) ? c - '0' : apr_isxdigit(c) ? apr_tolower(c) - 'a' + 10 : -1;
}

/* A size or trailer line's end: LF (a CR before it was taken already). */
static void line_end(ci_egress_chunks *k)
{
    if (k->state == CH_SIZE_LF || k->state == CH_SIZE || k->state == CH_EXT) {
        k->state = k->left ? CH_DATA : CH_TRAILER;
        k->line = 0;
        return;
    }
    /* A trailer line: the blank one ends the body. */
    k->state = k->line == 0 ? CH_DONE : CH_TRAILER;
    k->line = 0;
}

/* One framing byte C. */
static void chunk_byte(ci_egress_chunks *k, unsigned char c)
{
    int h;
    if (c == '\n' && k->state != CH_DATA_CR && k->state != CH_DATA_LF) {
        if (k->state == CH_SIZE && k->digits == 0)
            k->state = CH_BAD;
        else
            line_end(k);
        return;
    }
    /* A line's length, its CR not counted: a blank line has none. */
    if (c != '\r' && ++k->line > CHUNK_LINE_MAX) {
        k->state = CH_BAD;
        return;
    }
    switch (k->state) {
    case CH_SIZE:
        if ((h = hex_value(c)) >= 0 && k->digits < CHUNK_DIGITS_MAX) {
            k->left = k->left * 16 + (apr_uint64_t)h;
            k->digits++;
        }
        else if (k->digits && (c == ';' || c == ' ' || c == '\t'))
            k->state = CH_EXT;
        else if (k->digits && c == '\r')
            k->state = CH_SIZE_LF;
        else
            k->state = CH_BAD;
        return;
    case CH_EXT:
        if (c == '\r')
            k->state = CH_SIZE_LF;
        else if (c < 0x20 && c != '\t')
            k->state = CH_BAD;
        return;
    case CH_DATA_CR:
        k->state = c == '\r' ? CH_DATA_LF : c == '\n' ? CH_SIZE : CH_BAD;
        k->line = 0;
        k->digits = 0;
        k->left = 0;
        return;
    case CH_DATA_LF:
        k->state = c == '\n' ? CH_SIZE : CH_BAD;
        k->line = 0;
        return;
    case CH_TRAILER:
        if (c == '\r')
            k->state = CH_TRAILER_LF;
        return;
    default:            /* a CR not followed by LF */
        k->state = CH_BAD;
        return;
    }
}

/* Follows N bytes of IN through K; DATA (may be NULL) gets each run of
 * data bytes. How many bytes belong to the body (fewer than N once it is
 * done), or -1 (malformed). */
typedef void (*chunk_data_fn)(void *arg, const char *data, apr_size_t n);

static apr_ssize_t chunks_feed(ci_egress_chunks *k, const char *in, apr_size_t n,
                               chunk_data_fn data, void *arg)
{
    apr_size_t i = 0;
    while (i < n && k->state != CH_DONE) {
        if (k->state == CH_BAD)
            return -1;
        if (k->state == CH_DATA) {
            apr_size_t run = n - i < k->left ? n - i : (apr_size_t)k->left;
            if (data)
                data(arg, in + i, run);
            k->left -= run;
            i += run;
            if (k->left == 0)
                k->state = CH_DATA_CR;
            continue;
        }
        chunk_byte(k, (unsigned char)in[i++]);
    }
    return k->state == CH_BAD ? -1 : (apr_ssize_t)i;
}

/* ---- the request body ------------------------------------------------------ */

/* VALUE is one "chunked" (and nothing else). */
static int only_chunked(const char *value)
{
    return !strcasecmp(value, "chunked");
}

int ci_egress_body_start(const ci_egress_request *req, ci_egress_body *b)
{
    const ci_egress_header *h = (const ci_egress_header *)req->headers->elts;
    int i, lengths = 0, codings = 0;
    memset(b, 0, sizeof(*b));
    for (i = 0; i < req->headers->nelts; i++) {
        if (!strcasecmp(h[i].name, "Transfer-Encoding")) {
            if (codings++ || !only_chunked(h[i].value))
                return -1;
            b->chunked = 1;
        }
        else if (!strcasecmp(h[i].name, "Content-Length")) {
            const char *v = h[i].value;
            apr_uint64_t n = 0;
            if (lengths++ || !*v || strlen(v) > 18)
                return -1;
            for (; *v; v++) {
                if (*v < '0' || *v > '9')
                    return -1;
                n = n * 10 + (apr_uint64_t)(*v - '0');
            }
            b->left = n;
        }
    }
    if (lengths && codings)
        return -1;
    b->done = !b->chunked && b->left == 0;
    return 0;
}

apr_ssize_t ci_egress_body_take(ci_egress_body *b, const char *in, apr_size_t n)
{
    apr_ssize_t took;
    if (b->done)
        return 0;
    if (!b->chunked) {
        took = (apr_ssize_t)(n < b->left ? n : (apr_size_t)b->left);
        b->left -= (apr_uint64_t)took;
        b->done = b->left == 0;
        return took;
    }
    took = chunks_feed(&b->chunks, in, n, NULL, NULL);
    b->done = b->chunks.state == CH_DONE;
    return took;
}

void ci_egress_identity_encoding(apr_pool_t *p, ci_egress_request *req)
{
    apr_array_header_t *kept = apr_array_make(p, req->headers->nelts + 1,
                                              sizeof(ci_egress_header));
    ci_egress_header *h = (ci_egress_header *)req->headers->elts, *ae;
    int i;
    for (i = 0; i < req->headers->nelts; i++)
        if (strcasecmp(h[i].name, "Accept-Encoding"))
            *(ci_egress_header *)apr_array_push(kept) = h[i];
    ae = apr_array_push(kept);
    ae->name = "Accept-Encoding";
    ae->value = "identity";
    req->headers = kept;
}

/* ---- the scanner ----------------------------------------------------------- */

/* A buffer's bound where what it holds is bounded otherwise (a read). */
#define UNBOUNDED ((apr_size_t)-1 / 4)

struct ci_egress_scrub {
    apr_pool_t *pool;
    int nvalues;
    const char **values;
    apr_size_t *lens;
    ci_buf held;                /* bytes not released yet */
    ci_buf out;                 /* what the last call released */
    int count;
};

ci_egress_scrub *ci_egress_scrub_make(apr_pool_t *p, const apr_array_header_t *secrets)
{
    ci_egress_scrub *s = apr_pcalloc(p, sizeof(*s));
    int i, n = secrets ? secrets->nelts : 0;
    s->pool = p;
    ci_buf_init(&s->held, p, UNBOUNDED);
    ci_buf_init(&s->out, p, UNBOUNDED);
    s->values = apr_pcalloc(p, (apr_size_t)(n + 1) * sizeof(*s->values));
    s->lens = apr_pcalloc(p, (apr_size_t)(n + 1) * sizeof(*s->lens));
    for (i = 0; i < n; i++) {
        const ci_egress_secret *sec = APR_ARRAY_IDX(secrets, i, const ci_egress_secret *);
        if (!sec->value || !*sec->value)
            continue;
        s->values[s->nvalues] = sec->value;
        s->lens[s->nvalues++] = strlen(sec->value);
    }
    return s;
}

typedef enum { M_NO, M_YES, M_UNDECIDED } match_result;

/* Whether VALUE (VN bytes) starts at S (N bytes there): *SPAN its length
 * in S. ENCODED: a byte may also be %XX (either case), a space '+'.
 * AT_END: nothing follows the N bytes (a match that needs more is none). */
static match_result match_at(const char *s, apr_size_t n, const char *value,
                             apr_size_t vn, int encoded, int at_end, apr_size_t *span)
{
    apr_size_t j = 0, k = 0;
    while (j < vn) {
        unsigned char want = (unsigned char)value[j];
        if (k >= n)
            return at_end ? M_NO : M_UNDECIDED;
        if (encoded && s[k] == '%') {
            /* -2: not there yet */
            int hi = k + 1 < n ? hex_value((unsigned char)s[k + 1]) : -2;
            int lo = hi >= 0 ? (k + 2 < n ? hex_value((unsigned char)s[k + 2]) : -2) : -1;
            if (!at_end && (hi == -2 || lo == -2))
                return M_UNDECIDED;
            if (hi >= 0 && lo >= 0 && (unsigned char)(hi * 16 + lo) == want) {
                j++;
                k += 3;
                continue;
            }
        }
        if ((unsigned char)s[k] == want || (encoded && want == ' ' && s[k] == '+')) {
            j++;
            k++;
            continue;
        }
        return M_NO;
    }
    *span = k;
    return M_YES;
}

/* Whether some value starts at S (N bytes; AT_END: nothing follows): its
 * span in *SPAN. A value's encoded form is tried first, then its literal
 * form alone (a value that holds "%25" is found where it is echoed as it
 * is). */
static match_result any_value_at(const ci_egress_scrub *sc, const char *s, apr_size_t n,
                                 int at_end, apr_size_t *span)
{
    match_result r = M_NO;
    int i, encoded;
    for (i = 0; i < sc->nvalues; i++) {
        for (encoded = 1; encoded >= 0; encoded--) {
            match_result m = match_at(s, n, sc->values[i], sc->lens[i], encoded, at_end,
                                      span);
            if (m == M_YES)
                return M_YES;
            if (m == M_UNDECIDED)
                r = M_UNDECIDED;
        }
    }
    return r;
}

/* Masks what is held; how many bytes from the start are decided (no value
 * can start there any more). AT_END: nothing more comes. */
static apr_size_t scan_held(ci_egress_scrub *s, int at_end)
{
    apr_size_t i = 0, span;
    while (i < s->held.len) {
        match_result m = any_value_at(s, s->held.data + i, s->held.len - i, at_end, &span);
        if (m == M_YES) {
            memset(s->held.data + i, CI_EGRESS_MASK, span);
            s->count++;
            i += span;
        }
        else if (m == M_UNDECIDED) {
            break;
        }
        else {
            i++;
        }
    }
    return i;
}

/* The first RELEASED bytes of what is held go out (copied to the caller's
 * view), the rest stays. */
static void release(ci_egress_scrub *s, apr_size_t released, const char **out,
                    apr_size_t *out_len)
{
    ci_buf_clear(&s->out);
    if (released) {
        (void)ci_buf_append(&s->out, s->held.data, released);
        memmove(s->held.data, s->held.data + released, s->held.len - released + 1);
        s->held.len -= released;
    }
    *out = ci_buf_str(&s->out);
    *out_len = released;
}

void ci_egress_scrub_feed(ci_egress_scrub *s, const char *in, apr_size_t n,
                          const char **out, apr_size_t *out_len)
{
    if (n)
        (void)ci_buf_append(&s->held, in, n);
    release(s, scan_held(s, 0), out, out_len);
}

void ci_egress_scrub_flush(ci_egress_scrub *s, const char **out, apr_size_t *out_len)
{
    release(s, scan_held(s, 1), out, out_len);
}

int ci_egress_scrub_count(const ci_egress_scrub *s)
{
    return s->count;
}

/* ---- the origin's answer ----------------------------------------------------- */

/* An answer's head is at most this long. */
#define ANSWER_HEAD_MAX 65536

enum { A_HEAD, A_RAW, A_CHUNKED, A_FAILED };

struct ci_egress_answer_filter {
    apr_pool_t *pool;
    ci_egress_scrub *scrub;
    const char *host;
    int head_only;
    int state;
    apr_uint64_t sent;          /* bytes given to the sandbox so far */
    ci_buf head;                /* the head being read */
    ci_egress_chunks chunks;
    ci_buf data;                /* a chunked body's data of one feed */
    ci_buf out;                 /* what one feed gives the sandbox */
};

ci_egress_answer_filter *ci_egress_answer_filter_make(apr_pool_t *p,
                                                      const apr_array_header_t *secrets,
                                                      const char *host, int head_only)
{
    ci_egress_answer_filter *f = apr_pcalloc(p, sizeof(*f));
    f->pool = p;
    f->scrub = ci_egress_scrub_make(p, secrets);
    f->host = apr_pstrdup(p, host);
    f->head_only = head_only;
    f->state = A_HEAD;
    ci_buf_init(&f->head, p, ANSWER_HEAD_MAX);
    ci_buf_init(&f->data, p, UNBOUNDED);
    ci_buf_init(&f->out, p, UNBOUNDED);
    return f;
}

static void put(ci_egress_answer_filter *f, const char *s, apr_size_t n)
{
    if (n)
        (void)ci_buf_append(&f->out, s, n);
}

/* S (N bytes) scanned and given to the sandbox; FLUSH: the scanner holds
 * nothing back afterwards. */
static void put_scanned(ci_egress_answer_filter *f, const char *s, apr_size_t n, int flush)
{
    const char *o;
    apr_size_t on;
    ci_egress_scrub_feed(f->scrub, s, n, &o, &on);
    put(f, o, on);
    if (flush) {
        ci_egress_scrub_flush(f->scrub, &o, &on);
        put(f, o, on);
    }
}

/* S (N bytes of a chunked body's data) scanned and given as one chunk. */
static void put_chunk(ci_egress_answer_filter *f, const char *s, apr_size_t n, int flush)
{
    const char *o, *o2 = NULL;
    apr_size_t on, on2 = 0;
    char size[24];
    ci_egress_scrub_feed(f->scrub, s, n, &o, &on);
    if (on) {
        apr_snprintf(size, sizeof(size), "%" APR_UINT64_T_HEX_FMT "\r\n", (apr_uint64_t)on);
        put(f, size, strlen(size));
        put(f, o, on);
        put(f, "\r\n", 2);
    }
    if (!flush)
        return;
    ci_egress_scrub_flush(f->scrub, &o2, &on2);
    if (on2) {
        apr_snprintf(size, sizeof(size), "%" APR_UINT64_T_HEX_FMT "\r\n", (apr_uint64_t)on2);
        put(f, size, strlen(size));
        put(f, o2, on2);
        put(f, "\r\n", 2);
    }
}

static void collect_data(void *arg, const char *data, apr_size_t n)
{
    ci_egress_answer_filter *f = arg;
    (void)ci_buf_append(&f->data, data, n);
}

/* Where the head in BUF (LEN bytes) ends, searching from FROM: the length
 * up to and including its blank line, or 0. */
static apr_size_t head_end(const char *buf, apr_size_t len, apr_size_t from)
{
    apr_size_t i;
    for (i = from; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 < len && buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* The value of header NAME (the first) in HEAD (N bytes), or NULL; two of
 * them set *TWICE. */
static const char *header_of(apr_pool_t *p, const char *head, apr_size_t n, const char *name,
                             int *twice)
{
    apr_size_t nn = strlen(name), i = 0;
    const char *found = NULL;
    while (i < n) {
        const char *lf = memchr(head + i, '\n', n - i);
        apr_size_t end = lf ? (apr_size_t)(lf - head) : n, v, e;
        if (i > 0 && end - i > nn && !strncasecmp(head + i, name, nn) && head[i + nn] == ':') {
            for (v = i + nn + 1; v < end && (head[v] == ' ' || head[v] == '\t'); v++)
                ;
            for (e = end; e > v && (head[e - 1] == '\r' || head[e - 1] == ' ' ||
                                    head[e - 1] == '\t'); e--)
                ;
            if (found)
                *twice = 1;
            else
                found = apr_pstrmemdup(p, head + v, e - v);
        }
        i = end + 1;
    }
    return found;
}

/* The status of HEAD ("HTTP/1.x NNN ..."), or -1. */
static int status_of(const char *head, apr_size_t n)
{
    if (n < 12 || strncmp(head, "HTTP/1.", 7) || head[8] != ' ' ||
        head[9] < '1' || head[9] > '9' || head[10] < '0' || head[10] > '9' ||
        head[11] < '0' || head[11] > '9')
        return -1;
    return (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
}

/* A whole head (F->head): scanned out, and what follows it decided. 0, or
 * -1 when what follows cannot be scanned. */
static int take_answer_head(ci_egress_answer_filter *f)
{
    const char *head = f->head.data;
    apr_size_t n = f->head.len;
    int twice = 0, status = status_of(head, n);
    const char *ce = header_of(f->pool, head, n, "Content-Encoding", &twice);
    const char *te = header_of(f->pool, head, n, "Transfer-Encoding", &twice);
    if (status < 0 || twice || (ce && strcasecmp(ce, "identity")) ||
        (te && !only_chunked(te)))
        return -1;
    put_scanned(f, head, n, 1);
    ci_buf_clear(&f->head);
    if (status >= 100 && status < 200 && status != 101)
        f->state = A_HEAD;          /* an interim answer: the final one follows */
    else if (te && !f->head_only && status != 204 && status != 304)
        f->state = A_CHUNKED;
    else
        f->state = A_RAW;           /* up to the close: one answer per connection */
    return 0;
}

/* Head bytes from IN (N): how many were taken, or -1. */
static apr_ssize_t feed_head(ci_egress_answer_filter *f, const char *in, apr_size_t n)
{
    apr_size_t from = f->head.len > 2 ? f->head.len - 2 : 0, take, end;
    take = n < ANSWER_HEAD_MAX - f->head.len ? n : ANSWER_HEAD_MAX - f->head.len;
    (void)ci_buf_append(&f->head, in, take);
    end = head_end(f->head.data, f->head.len, from);
    if (!end)
        return f->head.len == ANSWER_HEAD_MAX ? -1 : (apr_ssize_t)take;
    /* What came after the blank line is fed again, to the new state. */
    take -= f->head.len - end;
    f->head.len = end;
    return take_answer_head(f) ? -1 : (apr_ssize_t)take;
}

/* Chunked bytes from IN (N): how many were taken (fewer once the body is
 * whole), or -1. */
static apr_ssize_t feed_chunked(ci_egress_answer_filter *f, const char *in, apr_size_t n)
{
    apr_ssize_t took;
    ci_buf_clear(&f->data);
    took = chunks_feed(&f->chunks, in, n, collect_data, f);
    if (took < 0)
        return -1;
    put_chunk(f, f->data.data, f->data.len, f->chunks.state == CH_DONE);
    if (f->chunks.state == CH_DONE) {
        /* Trailers are not relayed (a proxy may drop them). */
        put(f, "0\r\n\r\n", 5);
        f->state = A_RAW;
    }
    return took;
}

/* The answer's end: what is held goes. */
static void feed_eof(ci_egress_answer_filter *f)
{
    if (f->state == A_HEAD && f->head.len) {
        put_scanned(f, f->head.data, f->head.len, 1);
        ci_buf_clear(&f->head);
    }
    else if (f->state == A_CHUNKED) {
        put_chunk(f, NULL, 0, 1);
    }
    else {
        put_scanned(f, NULL, 0, 1);
    }
}

int ci_egress_answer_filter_feed(ci_egress_answer_filter *f, const char *in, apr_size_t n,
                                 int eof, const char **out, apr_size_t *out_len)
{
    apr_size_t i = 0;
    int rc = 0;
    ci_buf_clear(&f->out);
    while (rc == 0 && i < n && f->state != A_FAILED) {
        apr_ssize_t took;
        if (f->state == A_RAW) {
            put_scanned(f, in + i, n - i, 0);
            took = (apr_ssize_t)(n - i);
        }
        else {
            took = f->state == A_HEAD ? feed_head(f, in + i, n - i)
                                      : feed_chunked(f, in + i, n - i);
        }
        if (took < 0)
            rc = -1;
        else
            i += (apr_size_t)took;
    }
    if (rc == 0 && f->state != A_FAILED && eof)
        feed_eof(f);
    if (rc < 0 || f->state == A_FAILED) {
        f->state = A_FAILED;
        rc = -1;
        if (f->sent == 0 && f->out.len == 0) {
            apr_size_t len;
            const char *r = ci_egress_response(
                f->pool, CI_EGRESS_STATUS_502,
                apr_psprintf(f->pool, CI_EGRESS_TXT_COMPRESSED, f->host), &len);
            put(f, r, len);
        }
    }
    f->sent += f->out.len;
    *out = ci_buf_str(&f->out);
    *out_len = f->out.len;
    return rc;
}

int ci_egress_answer_filter_count(const ci_egress_answer_filter *f)
{
    return ci_egress_scrub_count(f->scrub);
}

/* ci_multipart.c - an incremental reader of multipart/form-data bodies. */
#include <string.h>
#include <strings.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_buf.h"
#include "ci_json.h"
#include "ci_multipart.h"

/* RFC 2046: a boundary is 1 to 70 characters. */
#define BOUNDARY_MAX 70

/* No value yet, for the offsets of decoded values. */
#define NONE APR_SIZE_MAX

/* Where the reader is. */
typedef enum {
    IN_PREAMBLE,     /* before the first boundary: bytes skipped */
    AFTER_BOUNDARY,  /* just after a boundary: "--", padding or CRLF next */
    AFTER_DASH,      /* one '-' after the boundary: the other closes the body */
    IN_PADDING,      /* transport padding after the boundary */
    AFTER_CR,        /* the CR ending a boundary line: its LF opens a part */
    IN_HEADERS,      /* a part's header section */
    IN_BODY          /* a part's body, up to the next delimiter */
} mp_state;

struct ci_multipart {
    apr_pool_t *pool;
    ci_multipart_limits lim;
    ci_multipart_callbacks cb;
    void *baton;

    ci_multipart_status status;
    const char *error;
    mp_state state;

    char *delim;             /* CRLF "--" boundary */
    apr_size_t dlen;
    apr_size_t matched;      /* bytes of delim matched: held back */
    int virtual_crlf;        /* the first 2 of them stand for the body's start */

    apr_size_t count;        /* bytes so far against the current bound: of the
                              * preamble, the padding, the headers or the body */
    apr_size_t parts;        /* parts opened by a boundary line */
    apr_size_t begun;        /* parts begun (part_begin called) */
    int in_part;             /* part_begin called, part_end not yet */
    int after_cr;            /* in headers: the last byte was a CR */
    apr_size_t line_len;     /* in headers: bytes of the current line */

    ci_buf head;             /* the current part's header section */
    ci_buf vals;             /* its decoded values, NUL-terminated */
    ci_multipart_part part;
};

/* ======================================================================== */
/* characters and small readers                                             */
/* ======================================================================== */

/* RFC 7230 tchar. */
static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* RFC 2046 bchars. */
static int is_bchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("'()+_,-./:=? ", c));
}

/* RFC 5987 attr-char. */
static int is_attr_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$&+-.^_`|~", c));
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static apr_size_t skip_ows(const char *s, apr_size_t n, apr_size_t i)
{
    while (i < n && is_ows(s[i]))
        i++;
    return i;
}

static apr_size_t token_end(const char *s, apr_size_t n, apr_size_t i)
{
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    return i;
}

/* S (N bytes) is WORD, ASCII case aside. */
static int word_is(const char *s, apr_size_t n, const char *word)
{
    return strlen(word) == n && !strncasecmp(s, word, n);
}

/* A backslash in a quoted-string escapes only `"` and `\`: browsers send
 * Windows paths (C:\dir\file) without escaping them. */
static int is_escape(const char *s, apr_size_t n, apr_size_t i)
{
    return s[i] == '\\' && i + 1 < n && (s[i + 1] == '"' || s[i + 1] == '\\');
}

/* S[0] is '"': the length of the quoted-string, quotes included, or 0 when
 * it does not end within N bytes. */
static apr_size_t quoted_len(const char *s, apr_size_t n)
{
    apr_size_t i = 1;
    while (i < n) {
        if (s[i] == '"')
            return i + 1;
        i += is_escape(s, n, i) ? 2 : 1;
    }
    return 0;
}

/* Append the inside of a quoted-string (S, N bytes, without the quotes) to
 * B, its escapes undone. */
static int unquote(ci_buf *b, const char *s, apr_size_t n)
{
    apr_size_t i = 0, run = 0;
    while (i < n) {
        if (!is_escape(s, n, i)) {
            i++;
            continue;
        }
        if (ci_buf_append(b, s + run, i - run) < 0)
            return -1;
        run = ++i;           /* the escaped byte starts the next run */
        i++;
    }
    return ci_buf_append(b, s + run, n - run);
}

/* ======================================================================== */
/* parameter lists: `*( OWS ";" OWS [ attr OWS "=" OWS value ] ) OWS`       */
/* ======================================================================== */

/* One parameter: ATTR (a token) and its value, the inside of a
 * quoted-string when QUOTED. Returns NULL, or why it is refused. */
typedef const char *(*param_fn)(void *ctx, const char *attr, apr_size_t alen,
                                const char *val, apr_size_t vlen, int quoted);

/* A value that is not quoted: a run of bytes up to `;`, a space or a quote
 * (more than a token: boundaries hold '=', '/' or ':' unquoted). */
static apr_size_t bare_value_end(const char *s, apr_size_t n, apr_size_t i)
{
    while (i < n && s[i] != ';' && s[i] != '"' && !is_ows(s[i]))
        i++;
    return i;
}

/* Read the parameter list S (N bytes), handing each parameter to FN.
 * Empty parameters (";;", a ';' at the end) are allowed. Returns NULL, or
 * why the list is refused. */
static const char *read_params(const char *s, apr_size_t n, param_fn fn, void *ctx)
{
    apr_size_t i = 0;
    for (;;) {
        apr_size_t attr, alen, val, vlen;
        int quoted = 0;
        const char *why;
        i = skip_ows(s, n, i);
        if (i == n)
            return NULL;
        if (s[i] != ';')
            return "a parameter is not preceded by ';'";
        i = skip_ows(s, n, i + 1);
        if (i == n || s[i] == ';')
            continue;
        attr = i;
        i = token_end(s, n, i);
        alen = i - attr;
        if (!alen)
            return "a parameter name is not a token";
        i = skip_ows(s, n, i);
        if (i == n || s[i] != '=')
            return "a parameter has no '='";
        i = skip_ows(s, n, i + 1);
        if (i < n && s[i] == '"') {
            apr_size_t q = quoted_len(s + i, n - i);
            if (!q)
                return "a quoted parameter value does not end";
            val = i + 1;
            vlen = q - 2;
            quoted = 1;
            i += q;
        }
        else {
            val = i;
            i = bare_value_end(s, n, i);
            vlen = i - val;
            if (!vlen)
                return "a parameter has no value";
        }
        if ((why = fn(ctx, s + attr, alen, s + val, vlen, quoted)))
            return why;
    }
}

/* ======================================================================== */
/* the boundary                                                             */
/* ======================================================================== */

/* NULL when B (N bytes) is a boundary RFC 2046 allows, else why not. */
static const char *boundary_problem(const char *b, apr_size_t n)
{
    apr_size_t i;
    if (n == 0)
        return "the multipart boundary is empty";
    if (n > BOUNDARY_MAX)
        return "the multipart boundary is longer than 70 characters";
    for (i = 0; i < n; i++)
        if (!is_bchar((unsigned char)b[i]))
            return "the multipart boundary holds a character RFC 2046 does not allow";
    if (b[n - 1] == ' ')
        return "the multipart boundary ends with a space";
    return NULL;
}

typedef struct boundary_ctx {
    ci_buf value;
    int seen;
    const char *problem;    /* with the boundary itself, not the syntax */
} boundary_ctx;

static const char *boundary_param(void *ctx, const char *attr, apr_size_t alen,
                                  const char *val, apr_size_t vlen, int quoted)
{
    boundary_ctx *c = ctx;
    if (!word_is(attr, alen, "boundary"))
        return NULL;
    if (c->seen++)
        c->problem = "the Content-Type has two boundary parameters";
    else if ((quoted ? unquote(&c->value, val, vlen)
                     : ci_buf_append(&c->value, val, vlen)) < 0)
        c->problem = "the multipart boundary is longer than 70 characters";
    return c->problem;
}

static ci_multipart_status boundary_fail(apr_pool_t *p, const char **err,
                                         ci_multipart_status st, const char *why)
{
    if (err)
        *err = apr_pstrdup(p, why);
    return st;
}

/* The media type at the start of CT (N bytes) is multipart/form-data;
 * *END is set past it. */
static int is_form_data(const char *ct, apr_size_t n, apr_size_t *end)
{
    apr_size_t i = skip_ows(ct, n, 0), type = i, slash;
    i = token_end(ct, n, i);
    if (i == n || ct[i] != '/')
        return 0;
    slash = i;
    i = token_end(ct, n, i + 1);
    *end = i;
    return word_is(ct + type, slash - type, "multipart") &&
           word_is(ct + slash + 1, i - slash - 1, "form-data");
}

ci_multipart_status ci_multipart_boundary(apr_pool_t *p, const char *content_type,
                                          const char **boundary, const char **err)
{
    boundary_ctx c;
    apr_size_t n, at;
    const char *why;
    *boundary = NULL;
    if (!content_type)
        return boundary_fail(p, err, CI_MULTIPART_NOT_MULTIPART,
                             "the request has no Content-Type: multipart/form-data expected");
    n = strlen(content_type);
    if (!is_form_data(content_type, n, &at))
        return boundary_fail(p, err, CI_MULTIPART_NOT_MULTIPART,
                             "the Content-Type is not multipart/form-data");
    memset(&c, 0, sizeof(c));
    /* BOUNDARY_MAX + 1: enough to tell a boundary too long */
    ci_buf_init(&c.value, p, BOUNDARY_MAX + 1);
    if ((why = read_params(content_type + at, n - at, boundary_param, &c))) {
        if (!c.problem)
            why = apr_pstrcat(p, "the Content-Type parameters are malformed: ", why, NULL);
        return boundary_fail(p, err, CI_MULTIPART_BAD_BOUNDARY, why);
    }
    if (!c.seen)
        return boundary_fail(p, err, CI_MULTIPART_NO_BOUNDARY,
                             "the multipart/form-data Content-Type has no boundary");
    if ((why = boundary_problem(ci_buf_str(&c.value), c.value.len)))
        return boundary_fail(p, err, CI_MULTIPART_BAD_BOUNDARY, why);
    *boundary = apr_pstrmemdup(p, c.value.data, c.value.len);
    return CI_MULTIPART_OK;
}

/* ======================================================================== */
/* a part's header section                                                  */
/* ======================================================================== */

typedef struct hdr_ctx {
    ci_buf *vals;           /* decoded values, each NUL-terminated */
    int disposition;        /* Content-Disposition seen */
    /* offsets in vals, or NONE */
    apr_size_t name, filename, filename_ext, content_type;
} hdr_ctx;

/* Append S (N bytes) to the values and a NUL; *AT is where it starts. */
static const char *store(hdr_ctx *h, const char *s, apr_size_t n, int quoted,
                         apr_size_t *at)
{
    *at = h->vals->len;
    if ((quoted ? unquote(h->vals, s, n) : ci_buf_append(h->vals, s, n)) < 0 ||
        ci_buf_append(h->vals, "", 1) < 0)
        return "the header values do not fit";    /* cannot happen: they are shorter */
    return NULL;
}

/* Append the byte C, or when LATIN1 the ISO-8859-1 character C as UTF-8. */
static int append_char(ci_buf *b, unsigned c, int latin1)
{
    char u[2];
    if (!latin1 || c < 0x80) {
        u[0] = (char)c;
        return ci_buf_append(b, u, 1);
    }
    u[0] = (char)(0xC0 | c >> 6);
    u[1] = (char)(0x80 | (c & 0x3F));
    return ci_buf_append(b, u, 2);
}

/* Decode the value-chars of an RFC 5987 ext-value (S, N bytes) to the
 * values, as UTF-8 (from ISO-8859-1 when LATIN1), NUL-terminated. */
static const char *decode_ext_chars(hdr_ctx *h, const char *s, apr_size_t n, int latin1)
{
    apr_size_t i, start = h->vals->len;
    for (i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_value(s[i + 1]) : -1;
            int lo = i + 2 < n ? hex_value(s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return "filename* has a '%' not followed by two hex digits";
            c = (unsigned)(hi * 16 + lo);
            if (!c)
                return "filename* decodes to a NUL byte";
            i += 2;
        }
        else if (!is_attr_char((unsigned char)c))
            return "filename* holds a character RFC 5987 does not allow";
        if (append_char(h->vals, c, latin1) < 0)
            return "the header values do not fit";
    }
    if (!latin1 && ci_utf8_valid_prefix(ci_buf_str(h->vals) + start,
                                        h->vals->len - start) != h->vals->len - start)
        return "filename* is not valid UTF-8";
    return ci_buf_append(h->vals, "", 1) < 0 ? "the header values do not fit" : NULL;
}

/* filename*=charset'language'value-chars (RFC 5987). */
static const char *decode_ext_value(hdr_ctx *h, const char *s, apr_size_t n)
{
    const char *q1 = memchr(s, '\'', n), *q2;
    apr_size_t i;
    int latin1;
    if (!q1 || !(q2 = memchr(q1 + 1, '\'', (apr_size_t)(s + n - q1 - 1))))
        return "filename* is not charset'language'value";
    if (word_is(s, (apr_size_t)(q1 - s), "UTF-8"))
        latin1 = 0;
    else if (word_is(s, (apr_size_t)(q1 - s), "ISO-8859-1"))
        latin1 = 1;
    else
        return "filename* has a charset other than UTF-8 or ISO-8859-1";
    for (i = 1; q1 + i < q2; i++)
        if (!apr_isalnum(q1[i]) && q1[i] != '-')
            return "filename* has a malformed language tag";
    h->filename_ext = h->vals->len;
    return decode_ext_chars(h, q2 + 1, (apr_size_t)(s + n - q2 - 1), latin1);
}

static const char *disposition_param(void *ctx, const char *attr, apr_size_t alen,
                                     const char *val, apr_size_t vlen, int quoted)
{
    hdr_ctx *h = ctx;
    if (word_is(attr, alen, "name")) {
        if (h->name != NONE)
            return "the Content-Disposition has two name parameters";
        return store(h, val, vlen, quoted, &h->name);
    }
    if (word_is(attr, alen, "filename")) {
        if (h->filename != NONE)
            return "the Content-Disposition has two filename parameters";
        return store(h, val, vlen, quoted, &h->filename);
    }
    if (word_is(attr, alen, "filename*")) {
        if (h->filename_ext != NONE)
            return "the Content-Disposition has two filename* parameters";
        if (quoted)
            return "filename* is quoted (RFC 5987 values are not)";
        return decode_ext_value(h, val, vlen);
    }
    return NULL;            /* size, creation-date, ...: not ours */
}

static const char *content_disposition(hdr_ctx *h, const char *v, apr_size_t n)
{
    apr_size_t i = token_end(v, n, 0);
    const char *why;
    if (h->disposition++)
        return "two Content-Disposition headers";
    if (!word_is(v, i, "form-data"))
        return "the Content-Disposition is not form-data";
    if ((why = read_params(v + i, n - i, disposition_param, h)))
        return why;
    if (h->name == NONE)
        return "the Content-Disposition has no name";
    return NULL;
}

/* Content-Transfer-Encoding (RFC 7578 4.7: deprecated): only identity
 * encodings are read; another would need decoding. */
static const char *transfer_encoding(const char *v, apr_size_t n)
{
    if (word_is(v, n, "binary") || word_is(v, n, "8bit") || word_is(v, n, "7bit"))
        return NULL;
    return "a Content-Transfer-Encoding other than binary, 8bit or 7bit";
}

/* One header line, LINE (N > 0 bytes, no CR, LF or NUL, not folded). */
static const char *header_line(hdr_ctx *h, const char *line, apr_size_t n)
{
    apr_size_t name_end, v, e, i;
    for (i = 0; i < n; i++)
        if (((unsigned char)line[i] < 0x20 && line[i] != '\t') || line[i] == 0x7F)
            return "a header line holds a control character";
    name_end = token_end(line, n, 0);
    if (name_end == n || line[name_end] != ':')
        return "a header line is not a token name, ':' and a value";
    if (name_end == 0)
        return "a header line has no name before ':'";
    v = skip_ows(line, n, name_end + 1);
    e = n;
    while (e > v && is_ows(line[e - 1]))
        e--;
    if (word_is(line, name_end, "Content-Disposition"))
        return content_disposition(h, line + v, e - v);
    if (word_is(line, name_end, "Content-Type")) {
        if (h->content_type != NONE)
            return "two Content-Type headers";
        return store(h, line + v, e - v, 0, &h->content_type);
    }
    if (word_is(line, name_end, "Content-Transfer-Encoding"))
        return transfer_encoding(line + v, e - v);
    return NULL;
}

/* The bytes of a section, in order: no NUL, every CR before an LF, no bare
 * LF, no line that starts with white space (folded: refused before the
 * lines are read, so a line cut by folding is reported as folded), and the
 * first blank line is its end. The reader checks the first three as the
 * bytes arrive. Sets *WHY when refusing. */
static ci_multipart_status section_bytes(const char *s, apr_size_t n, const char **why)
{
    apr_size_t i, line = 0;
    for (i = 0; i < n; i++) {
        if (i == line && is_ows(s[i]))
            return *why = "a header line is folded (starts with a space or a tab)",
                   CI_MULTIPART_BAD_HEADER;
        if (s[i] == '\0')
            return *why = "the headers hold a NUL byte", CI_MULTIPART_BAD_HEADER;
        if (s[i] == '\n')
            return *why = "a header line ends with a bare LF, not CRLF", CI_MULTIPART_BARE_LF;
        if (s[i] != '\r')
            continue;
        if (i + 1 == n || s[i + 1] != '\n')
            return *why = "the headers hold a CR not followed by LF", CI_MULTIPART_BAD_HEADER;
        if (i == line)      /* the blank line */
            return i + 2 == n ? CI_MULTIPART_OK
                              : (*why = "bytes follow the blank line ending the headers",
                                 CI_MULTIPART_BAD_HEADER);
        line = ++i + 1;
    }
    *why = "the headers do not end with a blank line";
    return CI_MULTIPART_BAD_HEADER;
}

static const char *value_at(const ci_buf *vals, apr_size_t at)
{
    return at == NONE ? NULL : vals->data + at;
}

/* Read section S (N bytes) into *PART, its values in VALS (emptied first).
 * Sets *WHY when refusing. */
static ci_multipart_status parse_section(ci_buf *vals, const char *s, apr_size_t n,
                                         ci_multipart_part *part, const char **why)
{
    hdr_ctx h;
    apr_size_t i = 0;
    ci_multipart_status st = section_bytes(s, n, why);
    if (st != CI_MULTIPART_OK)
        return st;
    ci_buf_clear(vals);
    memset(&h, 0, sizeof(h));
    h.vals = vals;
    h.name = h.filename = h.filename_ext = h.content_type = NONE;
    while (s[i] != '\r') {      /* up to the blank line */
        const char *cr = memchr(s + i, '\r', n - i);
        if ((*why = header_line(&h, s + i, (apr_size_t)(cr - s) - i)))
            return CI_MULTIPART_BAD_HEADER;
        i = (apr_size_t)(cr - s) + 2;
    }
    if (!h.disposition)
        return *why = "the part has no Content-Disposition", CI_MULTIPART_BAD_HEADER;
    part->name = value_at(vals, h.name);
    part->filename = value_at(vals, h.filename_ext != NONE ? h.filename_ext : h.filename);
    part->content_type = value_at(vals, h.content_type);
    return CI_MULTIPART_OK;
}

ci_multipart_status ci_multipart_parse_headers(apr_pool_t *p, const char *section,
                                               apr_size_t len, ci_multipart_part *part,
                                               const char **err)
{
    ci_buf vals;
    const char *why = NULL;
    ci_multipart_status st;
    ci_buf_init(&vals, p, len + 16);
    memset(part, 0, sizeof(*part));
    st = parse_section(&vals, section, len, part, &why);
    if (st != CI_MULTIPART_OK) {
        memset(part, 0, sizeof(*part));
        if (err)
            *err = apr_pstrdup(p, why);
    }
    return st;
}

/* ======================================================================== */
/* the reader                                                               */
/* ======================================================================== */

static void fail(ci_multipart *r, ci_multipart_status status, const char *why)
{
    r->status = status;
    r->error = why;
}

/* A failure in part number r->parts (counted from 1 in messages). */
static void fail_part(ci_multipart *r, ci_multipart_status status, const char *why)
{
    fail(r, status, apr_psprintf(r->pool, "part %" APR_SIZE_T_FMT " of the multipart "
                                 "body: %s", r->parts, why));
}

static void stopped(ci_multipart *r)
{
    fail(r, CI_MULTIPART_STOPPED, "the multipart reader was stopped by its caller");
}

/* ---- content: a part's body, or the preamble ---------------------------- */

static int deliver(ci_multipart *r, const char *s, apr_size_t n)
{
    if (n && r->cb.part_data && r->cb.part_data(r->baton, &r->part, s, n)) {
        stopped(r);
        return -1;
    }
    return 0;
}

/* N bytes of content: a part's data (passed on), or preamble (dropped).
 * Returns 0, or -1 when the reader failed. */
static int content(ci_multipart *r, const char *s, apr_size_t n)
{
    if (r->state == IN_PREAMBLE) {
        if (n > r->lim.max_header - r->count) {
            fail(r, CI_MULTIPART_HEADER_TOO_LARGE,
                 apr_psprintf(r->pool, "the preamble before the first multipart boundary "
                              "is longer than %" APR_SIZE_T_FMT " bytes", r->lim.max_header));
            return -1;
        }
        r->count += n;
        return 0;
    }
    if (n > r->lim.max_body - r->count) {
        /* the part up to its bound, then the refusal */
        if (deliver(r, s, r->lim.max_body - r->count) == 0)
            fail_part(r, CI_MULTIPART_PART_TOO_LARGE,
                      apr_psprintf(r->pool, "larger than %" APR_SIZE_T_FMT " bytes",
                                   r->lim.max_body));
        return -1;
    }
    r->count += n;
    return deliver(r, s, n);
}

/* The first CARRIED bytes of the delimiter, held back from earlier chunks,
 * turned out to be content (less the CRLF that only stood for the start). */
static int release_carried(ci_multipart *r, apr_size_t carried)
{
    apr_size_t skip = r->virtual_crlf ? 2 : 0;
    r->virtual_crlf = 0;
    return content(r, r->delim + skip, carried - skip);
}

/* A whole delimiter ends at S[END): the content before it in S is passed
 * on, unless the delimiter began in an earlier chunk (then S has none).
 * Returns END. */
static apr_size_t delimiter_found(ci_multipart *r, const char *s, apr_size_t end,
                                  apr_size_t carried)
{
    if (!carried && content(r, s, end - r->dlen) < 0)
        return end;
    r->matched = 0;
    r->virtual_crlf = 0;
    r->count = 0;
    r->state = AFTER_BOUNDARY;
    return end;
}

/* Read content from S (N bytes) until a delimiter completes (the boundary
 * line comes next) or S runs out, holding back the bytes that may start a
 * delimiter. Those are always a prefix of it, so they need no copy: the
 * delimiter holds a CR only first (a boundary has none), so after a
 * mismatch the match can only start again at a CR. Returns the bytes used. */
static apr_size_t scan_content(ci_multipart *r, const char *s, apr_size_t n)
{
    apr_size_t i = 0;
    apr_size_t carried = r->matched;    /* held back from earlier chunks */
    while (i < n) {
        if (r->matched == 0) {
            const char *cr = memchr(s + i, '\r', n - i);
            if (!cr)
                break;
            i = (apr_size_t)(cr - s);
        }
        if (s[i] == r->delim[r->matched]) {
            i++;
            if (++r->matched == r->dlen)
                return delimiter_found(r, s, i, carried);
            continue;
        }
        /* Not a delimiter: what was held is content, S[i] is looked at anew.
         * Content is passed on once the chunk is read, as one piece from its
         * start; what was carried in goes first. */
        if (carried && release_carried(r, carried) < 0)
            return i;
        carried = 0;
        r->matched = 0;
    }
    if (!carried)           /* else all of S is a delimiter's start so far */
        content(r, s, n - r->matched);
    return n;
}

/* ---- boundary lines ----------------------------------------------------- */

/* part_end for the part the delimiter just closed, if one is open. */
static int end_part(ci_multipart *r)
{
    if (!r->in_part)
        return 0;
    r->in_part = 0;
    if (r->cb.part_end && r->cb.part_end(r->baton, &r->part)) {
        stopped(r);
        return -1;
    }
    return 0;
}

/* "--" boundary "--": the body is complete. */
static void close_body(ci_multipart *r)
{
    if (end_part(r) == 0)
        r->status = CI_MULTIPART_DONE;
}

/* A boundary line's CRLF: a new part's headers come next. */
static void open_part(ci_multipart *r)
{
    if (end_part(r) < 0)
        return;
    if (r->parts == r->lim.max_parts) {
        fail(r, CI_MULTIPART_TOO_MANY_PARTS,
             apr_psprintf(r->pool, "the multipart body has more than %" APR_SIZE_T_FMT
                          " parts", r->lim.max_parts));
        return;
    }
    r->parts++;
    r->state = IN_HEADERS;
    r->count = 0;
    r->after_cr = 0;
    r->line_len = 0;
    ci_buf_clear(&r->head);
}

static void padding(ci_multipart *r)
{
    if (r->count == r->lim.max_header) {
        fail(r, CI_MULTIPART_HEADER_TOO_LARGE,
             apr_psprintf(r->pool, "the padding after a multipart boundary is longer "
                          "than %" APR_SIZE_T_FMT " bytes", r->lim.max_header));
        return;
    }
    r->count++;
    r->state = IN_PADDING;
}

static void bad_delimiter(ci_multipart *r, const char *why)
{
    fail(r, CI_MULTIPART_BAD_DELIMITER, why);
}

/* One byte after a boundary: "--", padding, CRLF. */
static void boundary_line_byte(ci_multipart *r, char c)
{
    switch (r->state) {
    case AFTER_DASH:
        if (c == '-')
            close_body(r);
        else
            bad_delimiter(r, "a multipart boundary is followed by a single '-'");
        return;
    case AFTER_CR:
        if (c == '\n')
            open_part(r);
        else
            bad_delimiter(r, "a multipart boundary line has a CR not followed by LF");
        return;
    default:                /* AFTER_BOUNDARY, IN_PADDING */
        break;
    }
    if (c == '-' && r->state == AFTER_BOUNDARY)
        r->state = AFTER_DASH;
    else if (is_ows(c))
        padding(r);
    else if (c == '\r')
        r->state = AFTER_CR;
    else if (c == '\n')
        fail(r, CI_MULTIPART_BARE_LF, "a multipart boundary line ends with a bare LF, "
                                      "not CRLF");
    else
        bad_delimiter(r, "the multipart delimiter (CRLF, \"--\" and the boundary) is "
                         "followed by neither CRLF nor \"--\": a part holds it, or the "
                         "boundary is wrong");
}

/* ---- headers ------------------------------------------------------------ */

/* The blank line: read the section, begin the part. */
static void end_headers(ci_multipart *r)
{
    const char *why = NULL;
    ci_multipart_status st = parse_section(&r->vals, r->head.data, r->head.len, &r->part,
                                           &why);
    if (st != CI_MULTIPART_OK) {
        fail_part(r, st, why);
        return;
    }
    r->part.index = r->parts - 1;
    r->in_part = 1;
    r->state = IN_BODY;
    r->count = 0;
    r->matched = 0;
    r->begun++;
    if (r->cb.part_begin && r->cb.part_begin(r->baton, &r->part))
        stopped(r);
}

/* Check one header byte C as it comes (the section is read whole at its
 * end, but these are refused at once). Returns 1 at the section's end, 0 to
 * go on, -1 when refused. */
static int header_byte(ci_multipart *r, char c)
{
    if (c == '\0') {
        fail_part(r, CI_MULTIPART_BAD_HEADER, "the headers hold a NUL byte");
        return -1;
    }
    if (r->after_cr) {
        r->after_cr = 0;
        if (c != '\n') {
            fail_part(r, CI_MULTIPART_BAD_HEADER, "the headers hold a CR not followed by LF");
            return -1;
        }
        if (r->line_len == 0)
            return 1;
        r->line_len = 0;
        return 0;
    }
    if (c == '\r')
        r->after_cr = 1;
    else if (c == '\n') {
        fail_part(r, CI_MULTIPART_BARE_LF, "a header line ends with a bare LF, not CRLF");
        return -1;
    }
    else
        r->line_len++;
    return 0;
}

/* Read header bytes from S (N bytes). Returns the bytes used. */
static apr_size_t header_bytes(ci_multipart *r, const char *s, apr_size_t n)
{
    apr_size_t i;
    int end = 0;
    for (i = 0; i < n && !end; i++) {
        if (r->count == r->lim.max_header) {
            fail_part(r, CI_MULTIPART_HEADER_TOO_LARGE,
                      apr_psprintf(r->pool, "the headers are longer than %" APR_SIZE_T_FMT
                                   " bytes", r->lim.max_header));
            return i;
        }
        r->count++;
        if ((end = header_byte(r, s[i])) < 0)
            return i;
    }
    /* within max_header: the append cannot fail */
    ci_buf_append(&r->head, s, i);
    if (end)
        end_headers(r);
    return i;
}

/* ---- the API ------------------------------------------------------------ */

/* A + B, or APR_SIZE_MAX when that overflows. */
static apr_size_t add_sat(apr_size_t a, apr_size_t b)
{
    return a > APR_SIZE_MAX - b ? APR_SIZE_MAX : a + b;
}

ci_multipart *ci_multipart_create(apr_pool_t *p, const char *boundary,
                                  const ci_multipart_limits *limits,
                                  const ci_multipart_callbacks *cb, void *baton)
{
    ci_multipart *r = apr_pcalloc(p, sizeof(*r));
    apr_size_t blen = boundary ? strlen(boundary) : 0;
    const char *why = boundary_problem(boundary ? boundary : "", blen);
    r->pool = p;
    r->lim = *limits;
    if (cb)
        r->cb = *cb;
    r->baton = baton;
    ci_buf_init(&r->head, p, r->lim.max_header);
    /* the values are shorter than the section: see store() */
    ci_buf_init(&r->vals, p, add_sat(r->lim.max_header, 16));
    if (why) {
        fail(r, CI_MULTIPART_BAD_BOUNDARY, why);
        return r;
    }
    r->delim = apr_pstrcat(p, "\r\n--", boundary, NULL);
    r->dlen = blen + 4;
    r->state = IN_PREAMBLE;
    /* At the very start, "--" boundary alone is the first boundary line:
     * read it as if a CRLF came before. */
    r->matched = 2;
    r->virtual_crlf = 1;
    return r;
}

ci_multipart_status ci_multipart_feed(ci_multipart *r, const char *buf, apr_size_t len)
{
    while (len && r->status == CI_MULTIPART_OK) {
        apr_size_t used;
        switch (r->state) {
        case IN_PREAMBLE:
        case IN_BODY:
            used = scan_content(r, buf, len);
            break;
        case IN_HEADERS:
            used = header_bytes(r, buf, len);
            break;
        default:
            boundary_line_byte(r, *buf);
            used = 1;
            break;
        }
        buf += used;
        len -= used;
    }
    return r->status;
}

ci_multipart_status ci_multipart_end(ci_multipart *r)
{
    const char *where;
    if (r->status != CI_MULTIPART_OK)
        return r->status;
    switch (r->state) {
    case IN_PREAMBLE:
        where = "before its first boundary";
        break;
    case IN_HEADERS:
        where = "inside the headers of a part";
        break;
    case IN_BODY:
        where = "inside the data of a part";
        break;
    default:
        where = "inside a boundary line";
        break;
    }
    fail(r, CI_MULTIPART_TRUNCATED,
         apr_pstrcat(r->pool, "the multipart body ended ", where,
                     ", without its close delimiter", NULL));
    return r->status;
}

const char *ci_multipart_error(const ci_multipart *r)
{
    return r->error;
}

apr_size_t ci_multipart_parts(const ci_multipart *r)
{
    return r->begun;
}

apr_size_t ci_multipart_footprint(const ci_multipart *r)
{
    return r->head.alloc + r->vals.alloc + (r->delim ? r->dlen + 1 : 0);
}

/* ci_code_decoder.c - the code of a call, decoded while its arguments
 * stream in. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <apr_strings.h>
#include <json-c/json.h>
#include "ci_json.h"
#include "ci_buf.h"
#include "ci_code_decoder.h"

/* Where the decoder is in the arguments text. */
typedef enum {
    P_START,        /* before the top-level '{' */
    P_FIRST_KEY,    /* after '{': a key or '}' */
    P_KEY,          /* after ',' in an object: a key */
    P_COLON,        /* after a key */
    P_VALUE,        /* after ':', or after ',' in an array */
    P_FIRST_VALUE,  /* after '[': a value or ']' */
    P_AFTER_VALUE,  /* ',' or the end of the container */
    P_STRING,       /* inside a string */
    P_ESCAPE,       /* after a backslash in a string */
    P_UNICODE,      /* inside \uXXXX */
    P_NUMBER,
    P_LITERAL,      /* true, false, null */
    P_END,          /* after the top-level '}': whitespace only */
    P_FAILED
} parse_state;

/* What the string being read is, and so where its decoded bytes go. */
typedef enum { STR_KEY, STR_CODE, STR_OTHER } string_kind;

typedef enum { CODE_NOT_SEEN, CODE_READING, CODE_ENDED } code_progress;

#define MAX_KEY 16          /* the longest key a decoder looks for */
#define WORDS (CI_JSON_MAX_DEPTH / 64 + 1)

struct ci_code_decoder {
    apr_pool_t *pool;
    parse_state state;
    ci_code_status status;
    const char *error;
    apr_size_t pos;           /* offset of the byte being read, for messages */

    /* Containers opened inside the top-level object: one bit per level
     * (1..depth), set for an object, clear for an array. */
    unsigned depth;
    uint64_t kinds[WORDS];

    string_kind str;
    unsigned hex, hex_digits;  /* the \uXXXX being read */
    unsigned high;             /* a high surrogate awaiting its low half, or 0 */
    unsigned u8_need;          /* continuation bytes the raw character still needs */
    unsigned char u8_lo, u8_hi; /* the range of the next continuation byte */

    const char *want;          /* the member decoded (CI_CODE_KEY) */
    apr_size_t want_len;
    int array;                 /* its value is an array of strings, each an
                                  element (ci_code_decoder_create_array) */
    int element;               /* the element being read or last read, -1 */
    int element_ended;         /* the last feed stopped after its end */
    char key[MAX_KEY];         /* the key's first bytes, up to a NUL */
    apr_size_t key_len;
    int key_cut, key_long;
    int value_is_code;

    char lit[5];
    apr_size_t lit_len;

    code_progress code;
    apr_size_t code_len;       /* bytes returned so far */

    /* The bytes decoded during the current feed. Those past `commit` are
     * the start of a raw UTF-8 character the delta did not finish: they are
     * kept in `tail` and returned with the next delta. */
    ci_buf out;
    apr_size_t commit;
    char tail[4];
    apr_size_t tail_len;
};

/* ---- failing ------------------------------------------------------------ */

static void fail(ci_code_decoder *d, ci_code_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(ci_code_decoder *d, ci_code_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    d->error = apr_psprintf(d->pool, "%s at byte %" APR_SIZE_T_FMT
                            " of the function arguments",
                            apr_pvsprintf(d->pool, fmt, ap), d->pos);
    va_end(ap);
    d->status = status;
    d->state = P_FAILED;
}

static int unexpected(ci_code_decoder *d, unsigned char c, const char *wanted)
{
    if (c > 0x20 && c < 0x7F)
        fail(d, CI_CODE_SYNTAX, "'%c' where %s was expected", c, wanted);
    else
        fail(d, CI_CODE_SYNTAX, "byte 0x%02X where %s was expected", c, wanted);
    return 1;
}

/* ---- output ------------------------------------------------------------- */

static void out_put(ci_code_decoder *d, const char *s, apr_size_t n)
{
    ci_buf_append(&d->out, s, n);     /* unbounded: never fails */
}

static void key_put(ci_code_decoder *d, const char *s, apr_size_t n)
{
    for (; n && !d->key_cut; s++, n--) {
        if (*s == '\0')
            d->key_cut = 1;     /* json-c ends its keys at a NUL */
        else if (d->key_len < d->want_len)
            d->key[d->key_len++] = *s;
        else
            d->key_long = 1;
    }
}

/* Bytes of the string being read, sent where its kind says. */
static void emit(ci_code_decoder *d, const char *s, apr_size_t n)
{
    if (d->str == STR_CODE)
        out_put(d, s, n);
    else if (d->str == STR_KEY)
        key_put(d, s, n);
}

/* A whole character, from an escape. */
static void emit_cp(ci_code_decoder *d, unsigned cp)
{
    char u[4];
    apr_size_t n;
    if (cp < 0x80)
        u[0] = (char)cp, n = 1;
    else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    }
    else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    emit(d, u, n);
    d->commit = d->out.len;
}

/* A high surrogate that turned out to have no low half: U+FFFD, as json-c. */
static void flush_high(ci_code_decoder *d)
{
    if (d->high) {
        d->high = 0;
        emit_cp(d, 0xFFFD);
    }
}

/* ---- containers --------------------------------------------------------- */

static int in_object(const ci_code_decoder *d)
{
    return d->depth == 0 || (d->kinds[d->depth / 64] >> (d->depth % 64) & 1);
}

static int open_container(ci_code_decoder *d, int object)
{
    uint64_t bit;
    if (d->depth >= CI_JSON_MAX_DEPTH) {
        fail(d, CI_CODE_TOO_DEEP, "nesting deeper than %d levels", CI_JSON_MAX_DEPTH);
        return 1;
    }
    d->depth++;
    bit = (uint64_t)1 << (d->depth % 64);
    if (object)
        d->kinds[d->depth / 64] |= bit;
    else
        d->kinds[d->depth / 64] &= ~bit;
    d->state = object ? P_FIRST_KEY : P_FIRST_VALUE;
    return 1;
}

static int close_container(ci_code_decoder *d)
{
    if (d->depth == 0)
        d->state = P_END;       /* the arguments object itself */
    else {
        if (d->array && d->depth == 1 && d->code == CODE_READING)
            d->code = CODE_ENDED;   /* the array of elements */
        d->depth--;
        d->state = P_AFTER_VALUE;
    }
    return 1;
}

/* ---- strings ------------------------------------------------------------ */

static void begin_string(ci_code_decoder *d, string_kind kind)
{
    d->str = kind;
    d->state = P_STRING;
    d->high = 0;
    d->u8_need = 0;
    if (kind == STR_KEY) {
        d->key_len = 0;
        d->key_cut = d->key_long = 0;
    }
}

static void end_string(ci_code_decoder *d)
{
    d->state = d->str == STR_KEY ? P_COLON : P_AFTER_VALUE;
    if (d->str == STR_CODE && d->array)
        d->element_ended = 1;   /* the feed stops here */
    else if (d->str == STR_CODE)
        d->code = CODE_ENDED;
    if (d->str != STR_KEY || d->depth != 0)
        return;
    d->value_is_code = !d->key_long && d->key_len == d->want_len &&
                       !memcmp(d->key, d->want, d->want_len);
    if (d->value_is_code && d->code != CODE_NOT_SEEN)
        fail(d, CI_CODE_DUPLICATE, "a second \"%s\" member", d->want);
}

/* The next byte of a raw multi-byte character (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF). */
static int utf8_byte(ci_code_decoder *d, unsigned char c)
{
    if (d->u8_need) {
        if (c < d->u8_lo || c > d->u8_hi)
            goto bad;
        d->u8_need--;
        d->u8_lo = 0x80;
        d->u8_hi = 0xBF;
    }
    else if (c >= 0xC2 && c <= 0xDF)
        d->u8_need = 1, d->u8_lo = 0x80, d->u8_hi = 0xBF;
    else if (c >= 0xE0 && c <= 0xEF) {
        d->u8_need = 2;
        d->u8_lo = c == 0xE0 ? 0xA0 : 0x80;
        d->u8_hi = c == 0xED ? 0x9F : 0xBF;
    }
    else if (c >= 0xF0 && c <= 0xF4) {
        d->u8_need = 3;
        d->u8_lo = c == 0xF0 ? 0x90 : 0x80;
        d->u8_hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    else
        goto bad;
    emit(d, (const char *)&c, 1);
    if (!d->u8_need)
        d->commit = d->out.len;
    return 1;
bad:
    fail(d, CI_CODE_BAD_UTF8, "invalid UTF-8 in a string");
    return 1;
}

static int on_string(ci_code_decoder *d, unsigned char c)
{
    if (d->high && c != '\\')
        flush_high(d);
    if (d->u8_need || c >= 0x80)
        return utf8_byte(d, c);
    if (c == '"')
        end_string(d);
    else if (c == '\\')
        d->state = P_ESCAPE;
    else if (c == '\0')
        fail(d, CI_CODE_SYNTAX, "a NUL byte inside a string");
    else {
        emit(d, (const char *)&c, 1);   /* (control characters pass, as in json-c) */
        d->commit = d->out.len;
    }
    return 1;
}

static int on_escape(ci_code_decoder *d, unsigned char c)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *e;
    if (c == 'u') {
        d->hex = d->hex_digits = 0;
        d->state = P_UNICODE;
        return 1;
    }
    flush_high(d);              /* this escape is not the low half */
    if (c == '\0' || !(e = strchr(from, c))) {
        fail(d, CI_CODE_SYNTAX, "an invalid escape in a string");
        return 1;
    }
    emit_cp(d, (unsigned char)to[e - from]);
    d->state = P_STRING;
    return 1;
}

/* ---- json-c's reading of surrogate pairs ---------------------------------
 * json-c before 0.19 tests whether a code point is a surrogate by its low 16
 * bits only, even after combining a pair: a pair for U+xD800..U+xDFFF
 * (x = 1..10: e.g. U+1D800, CJK at U+2D800) comes out as U+FFFD, or as a
 * "high surrogate" that pairs again with a low one that follows. The code
 * that runs is what json-c reads, so the decoder does as the json-c it is
 * linked with does, asked once. */
static int pair_quirk;

static void probe_json_c(void)
{
    json_object *o = json_tokener_parse("\"\\ud836\\udc00\"");
    pair_quirk = o && json_object_get_string_len(o) != 4;
    json_object_put(o);
}

static unsigned surrogate_bits(unsigned cp)
{
    return cp & (pair_quirk ? 0xFC00u : 0xFFFFFC00u);
}

/* A \uXXXX escape read whole (CP <= 0xFFFF). */
static void on_code_point(ci_code_decoder *d, unsigned cp)
{
    if (d->high) {
        if ((cp & 0xFC00) == 0xDC00)
            cp = 0x10000 + ((d->high & 0x3FF) << 10) + (cp & 0x3FF);
        else
            emit_cp(d, 0xFFFD);     /* a high half alone */
        d->high = 0;
    }
    if (cp >= 0x800 && surrogate_bits(cp) == 0xD800)
        d->high = cp;               /* held until the next bytes tell */
    else if (cp >= 0x800 && surrogate_bits(cp) == 0xDC00)
        emit_cp(d, 0xFFFD);         /* a low half alone */
    else
        emit_cp(d, cp);
}

static int on_unicode(ci_code_decoder *d, unsigned char c)
{
    unsigned v;
    if (c >= '0' && c <= '9')
        v = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
        v = (c | 0x20) - 'a' + 10;
    else {
        fail(d, CI_CODE_SYNTAX, "an invalid \\u escape in a string");
        return 1;
    }
    d->hex = d->hex << 4 | v;
    if (++d->hex_digits == 4) {
        d->state = P_STRING;
        on_code_point(d, d->hex);
    }
    return 1;
}

/* ---- tokens between strings --------------------------------------------- */

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int on_start(ci_code_decoder *d, unsigned char c)
{
    if (c == '{')
        d->state = P_FIRST_KEY;
    else if (!is_space(c))
        return unexpected(d, c, "the '{' of the arguments object");
    return 1;
}

static int on_key(ci_code_decoder *d, unsigned char c, int first)
{
    if (c == '"')
        begin_string(d, STR_KEY);
    else if (c == '}' && first)
        return close_container(d);
    else if (!is_space(c))
        return unexpected(d, c, "a key");
    return 1;
}

static int on_colon(ci_code_decoder *d, unsigned char c)
{
    if (c == ':')
        d->state = P_VALUE;
    else if (!is_space(c))
        return unexpected(d, c, "':'");
    return 1;
}

static int on_value(ci_code_decoder *d, unsigned char c, int first)
{
    if (is_space(c))
        return 1;
    if (first && c == ']')
        return close_container(d);
    if (d->value_is_code) {
        d->value_is_code = 0;
        if (c != (d->array ? '[' : '"')) {
            fail(d, CI_CODE_NOT_STRING, d->array ? "\"%s\" is not an array"
                                                 : "\"%s\" is not a string", d->want);
            return 1;
        }
        d->code = CODE_READING;
        if (d->array)
            return open_container(d, 0);
        begin_string(d, STR_CODE);
        return 1;
    }
    if (d->array && d->depth == 1 && d->code == CODE_READING) {
        if (c != '"') {
            fail(d, CI_CODE_NOT_STRING, "an element of \"%s\" is not a string", d->want);
            return 1;
        }
        d->element++;
        begin_string(d, STR_CODE);
        return 1;
    }
    if (c == '"')
        begin_string(d, STR_OTHER);
    else if (c == '{' || c == '[')
        return open_container(d, c == '{');
    else if (c == '-' || (c >= '0' && c <= '9'))
        d->state = P_NUMBER;
    else if (c >= 'a' && c <= 'z') {
        d->lit_len = 0;
        d->state = P_LITERAL;
        return 0;               /* read the letter there */
    }
    else
        return unexpected(d, c, "a value");
    return 1;
}

static int on_after_value(ci_code_decoder *d, unsigned char c)
{
    if (c == ',')
        d->state = in_object(d) ? P_KEY : P_VALUE;
    else if (c == (in_object(d) ? '}' : ']'))
        return close_container(d);
    else if (!is_space(c))
        return unexpected(d, c, in_object(d) ? "',' or '}'" : "',' or ']'");
    return 1;
}

/* Numbers of other members are only skipped: their exact syntax is the
 * strict parse's business. */
static int on_number(ci_code_decoder *d, unsigned char c)
{
    if ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' ||
        c == '-')
        return 1;
    d->state = P_AFTER_VALUE;
    return 0;
}

static int on_literal(ci_code_decoder *d, unsigned char c)
{
    if (c >= 'a' && c <= 'z' && d->lit_len < sizeof(d->lit)) {
        d->lit[d->lit_len++] = (char)c;
        return 1;
    }
    if ((d->lit_len == 4 && (!memcmp(d->lit, "true", 4) || !memcmp(d->lit, "null", 4))) ||
        (d->lit_len == 5 && !memcmp(d->lit, "false", 5))) {
        d->state = P_AFTER_VALUE;
        return 0;
    }
    fail(d, CI_CODE_SYNTAX, "a word that is not true, false or null");
    return 1;
}

static int on_end(ci_code_decoder *d, unsigned char c)
{
    if (!is_space(c))
        return unexpected(d, c, "nothing after the arguments object");
    return 1;
}

/* Read byte C. Returns 1 when C was used, 0 when it is to be read again in
 * the state it led to. */
static int step(ci_code_decoder *d, unsigned char c)
{
    switch (d->state) {
    case P_START:       return on_start(d, c);
    case P_FIRST_KEY:   return on_key(d, c, 1);
    case P_KEY:         return on_key(d, c, 0);
    case P_COLON:       return on_colon(d, c);
    case P_VALUE:       return on_value(d, c, 0);
    case P_FIRST_VALUE: return on_value(d, c, 1);
    case P_AFTER_VALUE: return on_after_value(d, c);
    case P_STRING:      return on_string(d, c);
    case P_ESCAPE:      return on_escape(d, c);
    case P_UNICODE:     return on_unicode(d, c);
    case P_NUMBER:      return on_number(d, c);
    case P_LITERAL:     return on_literal(d, c);
    case P_END:         return on_end(d, c);
    case P_FAILED:      break;
    }
    return 1;
}

/* The run of plain characters of the code string at S (N bytes), copied in
 * one go: the bulk of any code. Returns its length. */
static apr_size_t plain_run(ci_code_decoder *d, const char *s, apr_size_t n)
{
    apr_size_t k = 0;
    while (k < n && s[k] != '"' && s[k] != '\\' && s[k] != '\0' &&
           (unsigned char)s[k] < 0x80)
        k++;
    if (k) {
        out_put(d, s, k);
        d->commit = d->out.len;
    }
    return k;
}

/* ---- the API ------------------------------------------------------------ */

static ci_code_decoder *create(apr_pool_t *p, const char *key, int array)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    ci_code_decoder *d = apr_pcalloc(p, sizeof(*d));
    pthread_once(&once, probe_json_c);
    d->pool = p;
    d->want = key;
    d->want_len = strlen(key) < MAX_KEY ? strlen(key) : MAX_KEY;
    d->array = array;
    ci_buf_init(&d->out, p, APR_SIZE_MAX / 2);
    ci_code_decoder_reset(d);
    return d;
}

ci_code_decoder *ci_code_decoder_create(apr_pool_t *p)
{
    return create(p, CI_CODE_KEY, 0);
}

ci_code_decoder *ci_code_decoder_create_array(apr_pool_t *p, const char *key)
{
    return create(p, key, 1);
}

void ci_code_decoder_reset(ci_code_decoder *d)
{
    ci_buf out = d->out;
    apr_pool_t *p = d->pool;
    const char *want = d->want;
    apr_size_t want_len = d->want_len;
    int array = d->array;
    memset(d, 0, sizeof(*d));
    d->pool = p;
    d->out = out;
    d->want = want;
    d->want_len = want_len;
    d->array = array;
    d->element = -1;
    d->state = P_START;
    d->status = CI_CODE_OK;
}

ci_code_status ci_code_decoder_feed(ci_code_decoder *d, const char *delta,
                                    apr_size_t len, const char **out,
                                    apr_size_t *outlen)
{
    apr_size_t used;
    return ci_code_decoder_feed_some(d, delta, len, out, outlen, &used);
}

ci_code_status ci_code_decoder_feed_some(ci_code_decoder *d, const char *delta,
                                         apr_size_t len, const char **out,
                                         apr_size_t *outlen, apr_size_t *used)
{
    apr_size_t i = 0;
    *out = "";
    *outlen = 0;
    *used = len;
    if (d->status != CI_CODE_OK)
        return d->status;
    ci_buf_clear(&d->out);
    d->commit = 0;
    d->element_ended = 0;
    out_put(d, d->tail, d->tail_len);
    while (i < len && d->status == CI_CODE_OK && !d->element_ended) {
        if (d->state == P_STRING && d->str == STR_CODE && !d->high && !d->u8_need) {
            apr_size_t k = plain_run(d, delta + i, len - i);
            i += k;
            d->pos += k;
            if (i == len)
                break;
        }
        if (step(d, (unsigned char)delta[i])) {
            i++;
            d->pos++;
        }
    }
    /* What follows the last whole character waits for the next delta. */
    d->tail_len = d->out.len - d->commit;
    memcpy(d->tail, d->out.data + d->commit, d->tail_len);
    d->out.data[d->commit] = '\0';
    d->code_len += d->commit;
    *out = d->out.data;
    *outlen = d->commit;
    if (d->element_ended)
        *used = i;
    return d->status;
}

ci_code_status ci_code_decoder_finish(ci_code_decoder *d)
{
    if (d->status != CI_CODE_OK)
        return d->status;
    if (d->state != P_END) {
        d->status = CI_CODE_TRUNCATED;
        d->error = "the function arguments end before their object does";
    }
    else if (d->code != CODE_ENDED) {
        d->status = CI_CODE_MISSING;
        d->error = apr_psprintf(d->pool, "the function arguments have no \"%s\" member",
                                d->want);
    }
    return d->status;
}

int ci_code_decoder_element(const ci_code_decoder *d)
{
    return d->element;
}

int ci_code_decoder_element_ended(const ci_code_decoder *d)
{
    return d->element_ended;
}

int ci_code_decoder_ended(const ci_code_decoder *d)
{
    return d->code == CODE_ENDED;
}

apr_size_t ci_code_decoder_length(const ci_code_decoder *d)
{
    return d->code_len;
}

const char *ci_code_decoder_error(const ci_code_decoder *d)
{
    return d->error;
}

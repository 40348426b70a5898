/* ci_json.c - json-c helpers tied to APR pools. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <apr_general.h>
#include <apr_lib.h>
#include <apr_tables.h>
#include <apr_strings.h>
#include "ci_id.h"
#include "ci_json.h"

static apr_status_t json_put_cleanup(void *data)
{
    json_object_put((json_object *)data);
    return APR_SUCCESS;
}

json_object *ci_json_own(apr_pool_t *p, json_object *obj)
{
    if (obj)
        apr_pool_cleanup_register(p, obj, json_put_cleanup,
                                  apr_pool_cleanup_null);
    return obj;
}

/* json-c also accepts NaN, Infinity and "1.", and would write them back
 * out: refuse every number that is not RFC 8259 syntax. */
static int rfc_number(const char *t)
{
    if (*t == '-')
        t++;
    if (*t == '0')
        t++;
    else if (*t >= '1' && *t <= '9')
        while (*t >= '0' && *t <= '9')
            t++;
    else
        return 0;
    if (*t == '.') {
        if (!(*++t >= '0' && *t <= '9'))
            return 0;
        while (*t >= '0' && *t <= '9')
            t++;
    }
    if (*t == 'e' || *t == 'E') {
        t++;
        if (*t == '+' || *t == '-')
            t++;
        if (!(*t >= '0' && *t <= '9'))
            return 0;
        while (*t >= '0' && *t <= '9')
            t++;
    }
    return *t == '\0';
}

static const char *bad_number(json_object *o)
{
    switch (json_object_get_type(o)) {
    case json_type_double: {
        const char *t = json_object_to_json_string(o);
        return rfc_number(t) ? NULL : t;
    }
    case json_type_array: {
        size_t i, n = json_object_array_length(o);
        for (i = 0; i < n; i++) {
            const char *b = bad_number(json_object_array_get_idx(o, i));
            if (b)
                return b;
        }
        return NULL;
    }
    case json_type_object: {
        json_object_object_foreach(o, key, val) {
            const char *b = bad_number(val);
            (void)key;
            if (b)
                return b;
        }
        return NULL;
    }
    default:
        return NULL;
    }
}

static json_object *finish_parse(apr_pool_t *p, json_object *root, const char **err)
{
    const char *bad = bad_number(root);
    if (bad) {
        *err = apr_psprintf(p, "'%s' is not a JSON number", bad);
        json_object_put(root);
        return NULL;
    }
    return ci_json_own(p, root);
}

/* Bytes of the UTF-8 sequence at S (at most N available), 0 if invalid. */
static apr_size_t utf8_sequence(const unsigned char *s, apr_size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return n >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return n >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 &&
                       (s[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* Word-at-a-time scanning: the bodies are mostly long strings of ASCII
 * text, which these skip eight bytes per step. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static uint64_t load_word(const char *s)
{
    uint64_t w;
    memcpy(&w, s, sizeof(w));
    return w;
}

/* Non-zero when a byte of W equals C. */
static uint64_t has_byte(uint64_t w, unsigned char c)
{
    uint64_t x = w ^ (ONES * c);
    return (x - ONES) & ~x & HIGHS;
}

/* The offset of the first '"' or '\\' at or after I (or LEN). */
static apr_size_t next_quote_or_escape(const char *buf, apr_size_t i, apr_size_t len)
{
    while (i + 8 <= len) {
        uint64_t w = load_word(buf + i);
        if (has_byte(w, '"') | has_byte(w, '\\'))
            break;
        i += 8;
    }
    while (i < len && buf[i] != '"' && buf[i] != '\\')
        i++;
    return i;
}

/* json-c clamps integers it cannot hold (above UINT64_MAX, below
 * INT64_MIN) and would write the clamped value back out: find such a literal
 * (outside strings) so it is refused rather than silently changed. Returns
 * its offset, or -1. */
static long long out_of_range_integer(const char *buf, apr_size_t len, apr_size_t *nlen)
{
    apr_size_t i = 0;
    int in_string = 0;
    while (i < len) {
        char c = buf[i];
        if (in_string) {
            i = next_quote_or_escape(buf, i, len);
            if (i < len && buf[i] == '\\')
                i++;
            else if (i < len)
                in_string = 0;
            i++;
            continue;
        }
        if (c == '"') {
            in_string = 1;
            i++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            apr_size_t start = i, digits;
            int neg = c == '-', fraction = 0;
            const char *limit = neg ? "9223372036854775808" : "18446744073709551615";
            if (neg)
                i++;
            digits = i;
            while (i < len && buf[i] >= '0' && buf[i] <= '9')
                i++;
            while (i < len && (buf[i] == '.' || buf[i] == 'e' || buf[i] == 'E' ||
                               buf[i] == '+' || buf[i] == '-' ||
                               (buf[i] >= '0' && buf[i] <= '9'))) {
                fraction = 1;
                i++;
            }
            digits = (apr_size_t)(i - digits);
            if (!fraction) {
                const char *d = buf + start + (neg ? 1 : 0);
                apr_size_t ll = strlen(limit);
                while (digits > 1 && *d == '0')   /* (leading zeros are refused anyway) */
                    d++, digits--;
                if (digits > ll || (digits == ll && memcmp(d, limit, ll) > 0)) {
                    *nlen = i - start;
                    return (long long)start;
                }
            }
            continue;
        }
        i++;
    }
    return -1;
}

apr_size_t ci_utf8_chars(const char *s, apr_size_t len)
{
    apr_size_t i, n = 0;
    for (i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

apr_size_t ci_utf8_valid_prefix(const char *s, apr_size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    apr_size_t i = 0, k;
    while (i < n) {
        if (u[i] < 0x80) {        /* the common case: a run of ASCII */
            while (i + 8 <= n && !(load_word(s + i) & HIGHS))
                i += 8;
            while (i < n && u[i] < 0x80)
                i++;
            continue;
        }
        if (!(k = utf8_sequence(u + i, n - i)))
            break;
        i += k;
    }
    return i;
}

const char *ci_utf8_sanitize(apr_pool_t *p, const char *s, apr_size_t n,
                             apr_size_t *outlen)
{
    apr_size_t i = ci_utf8_valid_prefix(s, n), o;
    char *out;
    if (i == n) {
        *outlen = n;
        return s;
    }
    out = apr_palloc(p, n * 3 + 1);      /* each bad byte may become 3 */
    memcpy(out, s, i);
    o = i;
    while (i < n) {
        apr_size_t k = utf8_sequence((const unsigned char *)s + i, n - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        }
        else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);   /* U+FFFD */
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    *outlen = o;
    return out;
}

/* Each thread keeps one tokener, reset for every parse: a new one costs a
 * calloc of its 4 KB stack (CI_JSON_MAX_DEPTH levels), and that large
 * request makes glibc consolidate the small chunks the last tree freed. */
static pthread_key_t tokener_key;
static pthread_once_t tokener_once = PTHREAD_ONCE_INIT;
static int tokener_kept;                /* the key exists */

static void tokener_free(void *tok)
{
    json_tokener_free(tok);
}

static void tokener_key_make(void)
{
    tokener_kept = pthread_key_create(&tokener_key, tokener_free) == 0;
}

/* A tokener ready for a new text: this thread's, or (*OWN set: the caller
 * frees it) a new one when none can be kept. NULL when out of memory. */
static json_tokener *tokener_take(int *own)
{
    json_tokener *tok;
    pthread_once(&tokener_once, tokener_key_make);
    *own = 0;
    if (tokener_kept && (tok = pthread_getspecific(tokener_key)))
        return tok;
    if (!(tok = json_tokener_new_ex(CI_JSON_MAX_DEPTH)))
        return NULL;
    *own = !tokener_kept || pthread_setspecific(tokener_key, tok) != 0;
    return tok;
}

/* Done with TOK: what a failed parse left in it goes now. */
static void tokener_give(json_tokener *tok, int own)
{
    if (own)
        json_tokener_free(tok);
    else
        json_tokener_reset(tok);
}

/* BUF parsed with TOK: the tree, or NULL with *ERR. */
static json_object *parse_with(json_tokener *tok, apr_pool_t *p, const char *buf,
                               apr_size_t len, const char **err)
{
    json_object *root;
    enum json_tokener_error jerr;
    {
        /* json-c's own check lets overlong forms and surrogates through. */
        apr_size_t valid = ci_utf8_valid_prefix(buf, len);
        apr_size_t nlen = 0;
        long long big;
        if (valid < len) {
            *err = apr_psprintf(p, "invalid UTF-8 at byte %" APR_SIZE_T_FMT, valid);
            return NULL;
        }
        if ((big = out_of_range_integer(buf, len, &nlen)) >= 0) {
            *err = apr_psprintf(p, "the integer '%.*s' at byte %" APR_INT64_T_FMT
                                   " is out of the range this server keeps exactly "
                                   "(64 bits)", (int)(nlen > 40 ? 40 : nlen), buf + big,
                                (apr_int64_t)big);
            return NULL;
        }
    }
    /* (UTF-8 was checked above, more strictly than json-c's own
     * JSON_TOKENER_VALIDATE_UTF8, which would cost a fifth of the parse.) */
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    root = json_tokener_parse_ex(tok, buf, (int)len);
    jerr = json_tokener_get_error(tok);
    if (!root && jerr == json_tokener_continue) {
        /* A bare number or literal waits for a delimiter: end the input. */
        root = json_tokener_parse_ex(tok, "", 1);
        jerr = json_tokener_get_error(tok);
        if (root && jerr == json_tokener_success)
            return root;
        json_object_put(root);
        root = NULL;
        jerr = json_tokener_continue;
    }
    if (root && jerr == json_tokener_success &&
        (apr_size_t)json_tokener_get_parse_end(tok) != len) {
        /* Trailing bytes: only whitespace may follow the value. */
        apr_size_t i = json_tokener_get_parse_end(tok);
        for (; i < len && buf[i] && strchr(" \t\r\n", buf[i]); i++)
            ;
        if (i < len) {
            json_object_put(root);
            root = NULL;
            *err = apr_psprintf(p, "unexpected data after the JSON value at "
                                   "byte %" APR_SIZE_T_FMT, i);
        }
    }
    else if (!root) {
        if (jerr == json_tokener_continue)
            *err = "the JSON text ends too early";
        else if (jerr == json_tokener_error_depth)
            *err = apr_psprintf(p, "JSON nesting deeper than %d levels",
                                CI_JSON_MAX_DEPTH);
        else
            *err = apr_psprintf(p, "%s at byte %d", json_tokener_error_desc(jerr),
                                (int)json_tokener_get_parse_end(tok));
    }
    return root;
}

json_object *ci_json_parse(apr_pool_t *p, const char *buf, apr_size_t len,
                           const char **err)
{
    int own;
    json_tokener *tok = tokener_take(&own);
    json_object *root;
    if (!tok) {
        *err = "out of memory";
        return NULL;
    }
    root = parse_with(tok, p, buf, len, err);
    tokener_give(tok, own);
    return root ? finish_parse(p, root, err) : NULL;
}

const char *ci_json_text(json_object *obj, apr_size_t *len)
{
    size_t n = 0;
    const char *s = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    if (len)
        *len = n;
    return s;
}

const char *ci_json_pstr(apr_pool_t *p, json_object *obj, apr_size_t *len)
{
    apr_size_t n;
    const char *s = ci_json_text(obj, &n);
    if (len)
        *len = n;
    return apr_pstrmemdup(p, s, n);
}

const char *ci_json_str(json_object *obj, const char *key)
{
    json_object *v = ci_json_get(obj, key, json_type_string);
    return v ? json_object_get_string(v) : NULL;
}

size_t ci_json_len(json_object *arr)
{
    return json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
}

const char *ci_json_idx_str(json_object *arr, size_t i)
{
    json_object *v = i < ci_json_len(arr) ? json_object_array_get_idx(arr, i) : NULL;
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

int ci_json_is_type(json_object *obj, const char *type)
{
    const char *t = ci_json_str(obj, "type");
    return t && !strcmp(t, type);
}

json_object *ci_json_get(json_object *obj, const char *key, json_type type)
{
    json_object *v;
    if (!obj || !json_object_is_type(obj, json_type_object) ||
        !json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, type))
        return NULL;
    return v;
}

json_object *ci_json_copy(json_object *obj)
{
    json_object *copy = NULL;
    if (obj && json_object_deep_copy(obj, &copy, NULL) != 0)
        return NULL;
    return copy;
}

const char *ci_json_array_members(json_object *a, apr_size_t *len)
{
    apr_size_t n;
    const char *text = ci_json_text(a, &n);
    if (n < 2 || json_object_array_length(a) == 0) {
        *len = 0;
        return "";
    }
    *len = n - 2;
    return text + 1;       /* (not NUL-terminated at *len: the ']' follows) */
}

const char *ci_json_with_array(apr_pool_t *p, json_object *root, const char *key,
                               const char *a, apr_size_t alen,
                               const char *b, apr_size_t blen, apr_size_t *len)
{
    enum { RAW = 16 };
    char marker[2 + 2 * RAW + 8], *body, *w;
    json_object *saved = NULL;
    const char *shell, *at;
    apr_size_t shell_len, head, mlen;

    /* A random marker stands for the value: no client string can equal it. */
    memcpy(marker, "\"ci", 3);
    ci_random_hex(marker + 3, RAW);
    mlen = 3 + 2 * RAW;
    marker[mlen++] = '"';
    marker[mlen] = '\0';

    json_object_object_get_ex(root, key, &saved);
    json_object_get(saved);
    json_object_object_add(root, key, json_object_new_string_len(marker + 1, (int)mlen - 2));
    shell = ci_json_text(root, &shell_len);
    at = strstr(shell, marker);
    head = (apr_size_t)(at - shell);
    *len = head + 1 + alen + (alen && blen ? 1 : 0) + blen + 1 + (shell_len - head - mlen);
    w = body = apr_palloc(p, *len + 1);
    memcpy(w, shell, head), w += head;
    *w++ = '[';
    memcpy(w, a, alen), w += alen;
    if (alen && blen)
        *w++ = ',';
    memcpy(w, b, blen), w += blen;
    *w++ = ']';
    memcpy(w, at + mlen, shell_len - head - mlen);
    body[*len] = '\0';
    if (saved)
        json_object_object_add(root, key, saved);
    else
        json_object_object_del(root, key);
    return body;
}

/* ---- one top-level string, without a parse ------------------------------ */

typedef struct scan {
    const char *at, *end;
} scan;

static void scan_ws(scan *s)
{
    while (s->at < s->end && (*s->at == ' ' || *s->at == '\t' || *s->at == '\n' ||
                              *s->at == '\r'))
        s->at++;
}

/* Whether S is at C; past it when it is. */
static int scan_take(scan *s, char c)
{
    if (s->at >= s->end || *s->at != c)
        return 0;
    s->at++;
    return 1;
}

/* Past the string at S (at its opening quote): 0, or -1 when it does not
 * end. *ESCAPED: whether it holds a backslash. The quotes are found with
 * memchr: a conversation's text is mostly long strings. */
static int scan_string(scan *s, int *escaped)
{
    const char *open = s->at + 1, *from = open, *q, *b;
    for (;;) {
        if (!(q = memchr(from, '"', (apr_size_t)(s->end - from))))
            return -1;
        for (b = q; b > open && b[-1] == '\\'; b--)
            ;
        if (!((q - b) & 1))               /* an even run of backslashes: the end */
            break;
        from = q + 1;
    }
    *escaped = memchr(open, '\\', (apr_size_t)(q - open)) != NULL;
    s->at = q + 1;
    return 0;
}

/* To the end of the value at S (the ',' or CLOSE after it at its own
 * depth, not taken), strings and nesting skipped, nothing else checked:
 * 0, or -1. */
static int scan_value(scan *s, char close)
{
    int depth = 0, escaped;
    while (s->at < s->end) {
        char c = *s->at;
        if (c == '"') {
            if (scan_string(s, &escaped))
                return -1;
            continue;
        }
        if (!depth && (c == ',' || c == close))
            return 0;
        if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']') {
            if (!depth)
                return -1;
            depth--;
        }
        s->at++;
    }
    return -1;
}

/* The end of the value that starts at FROM and runs to TO, its trailing
 * whitespace left out. */
static const char *trimmed_end(const char *from, const char *to)
{
    while (to > from && (to[-1] == ' ' || to[-1] == '\t' || to[-1] == '\n' ||
                         to[-1] == '\r'))
        to--;
    return to;
}

/* The value of KEY in the top-level object of BODY: 1 with its span in
 * *AT and *END, when KEY is there once and no key is escaped (an escaped
 * key may spell KEY); 0 otherwise, or when the scan cannot read the text. */
static int top_member(const char *body, apr_size_t len, const char *key,
                      const char **at, const char **end)
{
    scan s = { body, body + len };
    apr_size_t klen = strlen(key);
    const char *k;
    int escaped, found = 0;
    scan_ws(&s);
    if (!scan_take(&s, '{'))
        return 0;
    scan_ws(&s);
    if (scan_take(&s, '}'))
        return 0;
    for (;;) {
        int is_key;
        scan_ws(&s);
        if (s.at >= s.end || *s.at != '"')
            return 0;
        k = s.at + 1;
        if (scan_string(&s, &escaped) || escaped)
            return 0;
        is_key = (apr_size_t)(s.at - 1 - k) == klen && !memcmp(k, key, klen);
        scan_ws(&s);
        if (!scan_take(&s, ':'))
            return 0;
        scan_ws(&s);
        if (is_key && found++)
            return 0;                /* twice: which one counts is the parser's */
        if (is_key)
            *at = s.at;
        if (scan_value(&s, '}'))
            return 0;
        if (is_key)
            *end = trimmed_end(*at, s.at);
        if (scan_take(&s, ','))
            continue;
        return scan_take(&s, '}') && found;
    }
}

const char *ci_json_top_string(apr_pool_t *p, const char *body, apr_size_t len,
                               const char *key)
{
    const char *at, *end;
    char *quoted = apr_pstrcat(p, "\"", key, "\"", NULL);
    scan s;
    int escaped;
    /* most bodies do not name KEY at all: one fast search says so */
    if (!memmem(body, len, quoted, strlen(quoted)))
        return NULL;
    if (!top_member(body, len, key, &at, &end) || *at != '"')
        return NULL;
    s.at = at;
    s.end = end;
    if (scan_string(&s, &escaped) || escaped || s.at != end || end - at == 2)
        return NULL;
    return apr_pstrmemdup(p, at + 1, (apr_size_t)(end - at - 2));
}

int ci_json_top_value(const char *body, apr_size_t len, const char *key,
                      const char **at, apr_size_t *vlen)
{
    const char *end;
    if (!top_member(body, len, key, at, &end))
        return -1;
    *vlen = (apr_size_t)(end - *at);
    return 0;
}

int ci_json_array_spans(apr_pool_t *p, const char *text, apr_size_t len,
                        int n, ci_json_span **spans)
{
    scan s = { text, text + len };
    apr_array_header_t *out = apr_array_make(p, n > 0 ? n : 4, sizeof(ci_json_span));
    if (!scan_take(&s, '['))
        return -1;
    scan_ws(&s);
    if (!scan_take(&s, ']')) {
        for (;;) {
            ci_json_span *sp;
            const char *from;
            if (n >= 0 && out->nelts == n)
                return -1;
            scan_ws(&s);
            from = s.at;
            if (scan_value(&s, ']') || s.at == from)
                return -1;
            sp = apr_array_push(out);
            sp->at = from;
            sp->len = (apr_size_t)(trimmed_end(from, s.at) - from);
            if (!scan_take(&s, ','))
                break;
        }
        if (!scan_take(&s, ']'))
            return -1;
    }
    if (s.at != s.end || (n >= 0 && out->nelts != n))
        return -1;
    *spans = (ci_json_span *)out->elts;
    return out->nelts;
}

/* ---- a strict check of one value, without a parse ----------------------
 * It accepts only what the parser accepts (ci_json_parse: json-c's strict
 * mode, RFC numbers, valid UTF-8, integers of 64 bits), and it gives up
 * (-1) on whatever it is not sure of: a raw control character (json-c lets
 * one through in a string), a lone surrogate escape (json-c makes U+FFFD of
 * it), an integer of more than 18 digits, deep nesting. */

#define CHECK_MAX_DEPTH 64        /* well within CI_JSON_MAX_DEPTH, where it sits */

static int check_value(scan *s, int depth);

static void check_ws(scan *s)
{
    while (s->at < s->end && *s->at == ' ')  /* (the other whitespace is control) */
        s->at++;
}

static int hex4(const char *h)
{
    int i;
    for (i = 0; i < 4; i++)
        if (!apr_isxdigit(h[i]))
            return 0;
    return 1;
}

/* Past the string at S (at its quote), its escapes checked: 0, or -1.
 * *ESCAPED: whether it holds one. */
static int check_string(scan *s, int *escaped)
{
    const char *at = s->at + 1, *q = NULL, *b;
    *escaped = 0;
    for (;;) {
        if (!q || q < at) {
            if (!(q = memchr(at, '"', (apr_size_t)(s->end - at))))
                return -1;
        }
        if (!(b = memchr(at, '\\', (apr_size_t)(q - at)))) {
            s->at = q + 1;
            return 0;
        }
        *escaped = 1;
        if (s->end - b < 2)
            return -1;
        if (strchr("\"\\/bfnrt", b[1]) && b[1])
            at = b + 2;
        else if (b[1] == 'u' && s->end - b >= 6 && hex4(b + 2) &&
                 !((b[2] == 'd' || b[2] == 'D') && strchr("89abcdefABCDEF", b[3])))
            at = b + 6;
        else
            return -1;
    }
}

static int digits(scan *s)
{
    const char *from = s->at;
    while (s->at < s->end && *s->at >= '0' && *s->at <= '9')
        s->at++;
    return (int)(s->at - from);
}

static int check_number(scan *s)
{
    int whole, more = 0;
    if (*s->at == '-')
        s->at++;
    if (s->at < s->end && *s->at == '0') {
        s->at++;
        whole = 1;
        if (s->at < s->end && *s->at >= '0' && *s->at <= '9')
            return -1;                       /* a leading zero */
    }
    else if (!(whole = digits(s)))
        return -1;
    if (s->at < s->end && *s->at == '.') {
        s->at++;
        if (!digits(s))
            return -1;
        more = 1;
    }
    if (s->at < s->end && (*s->at == 'e' || *s->at == 'E')) {
        s->at++;
        if (s->at < s->end && (*s->at == '+' || *s->at == '-'))
            s->at++;
        if (!digits(s))
            return -1;
        more = 1;
    }
    return more || whole <= 18 ? 0 : -1;     /* (within 64 bits for sure) */
}

static int check_word(scan *s, const char *w)
{
    apr_size_t n = strlen(w);
    if ((apr_size_t)(s->end - s->at) < n || memcmp(s->at, w, n))
        return -1;
    s->at += n;
    return 0;
}

/* What an object's check finds of one key: the text of its value. */
typedef struct key_capture {
    const char *key;
    apr_size_t klen;
    ci_json_span *value;          /* at NULL until found */
} key_capture;

/* CAP's key found again (its value the text from V to END): 0, or -1 when
 * it was found before (which one counts is the parser's). */
static int capture_value(key_capture *cap, const char *v, const char *end)
{
    if (cap->value->at)
        return -1;
    cap->value->at = v;
    cap->value->len = (apr_size_t)(end - v);
    return 0;
}

/* The members of the object or array at S, to its closing CLOSE. With CAP
 * (an object's): no key escaped (an escaped one may spell CAP's key), and
 * the value of CAP's key captured. */
static int check_members(scan *s, char close, int depth, key_capture *cap)
{
    int escaped;
    s->at++;
    check_ws(s);
    if (s->at < s->end && *s->at == close) {
        s->at++;
        return 0;
    }
    for (;;) {
        const char *k = s->at + 1, *v;
        int is_key = 0;
        if (close == '}') {
            if (s->at >= s->end || *s->at != '"' || check_string(s, &escaped) ||
                (cap && escaped))
                return -1;
            is_key = cap && (apr_size_t)(s->at - 1 - k) == cap->klen &&
                     !memcmp(k, cap->key, cap->klen);
            check_ws(s);
            if (!scan_take(s, ':'))
                return -1;
            check_ws(s);
        }
        v = s->at;
        if (check_value(s, depth) || (is_key && capture_value(cap, v, s->at)))
            return -1;
        check_ws(s);
        if (scan_take(s, ','))
            check_ws(s);
        else
            return scan_take(s, close) ? 0 : -1;
    }
}

static int check_value(scan *s, int depth)
{
    int escaped;
    if (s->at >= s->end)
        return -1;
    switch (*s->at) {
    case '{':
    case '[':
        return depth >= CHECK_MAX_DEPTH ? -1
                                        : check_members(s, *s->at == '{' ? '}' : ']',
                                                        depth + 1, NULL);
    case '"':
        return check_string(s, &escaped);
    case 't':
        return check_word(s, "true");
    case 'f':
        return check_word(s, "false");
    case 'n':
        return check_word(s, "null");
    default:
        return (*s->at == '-' || (*s->at >= '0' && *s->at <= '9')) ? check_number(s) : -1;
    }
}

/* The bytes the parser reads as they are: valid UTF-8, no control byte. */
static int plain_bytes(const char *text, apr_size_t len)
{
    return !ci_json_has_control_byte(text, len) && ci_utf8_valid_prefix(text, len) == len;
}

int ci_json_strict_value(const char *text, apr_size_t len)
{
    scan s = { text, text + len };
    return plain_bytes(text, len) && !check_value(&s, 0) && s.at == s.end ? 0 : -1;
}

int ci_json_strict_object(const char *text, apr_size_t len, const char *key,
                          ci_json_span *value)
{
    scan s = { text, text + len };
    key_capture cap = { key, strlen(key), value };
    value->at = NULL;
    value->len = 0;
    return plain_bytes(text, len) && s.at < s.end && *s.at == '{' &&
           !check_members(&s, '}', 1, &cap) && s.at == s.end ? 0 : -1;
}

int ci_json_has_control_byte(const char *s, apr_size_t n)
{
    /* eight bytes at a time: a word has a byte below 0x20 exactly when
     * (w - 0x20 in each byte) & ~w sets some byte's high bit */
    const apr_uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    for (; n >= 8; s += 8, n -= 8) {
        apr_uint64_t w;
        memcpy(&w, s, 8);
        if ((w - 0x20 * ones) & ~w & highs)
            return 1;
    }
    for (; n; s++, n--)
        if ((unsigned char)*s < 0x20)
            return 1;
    return 0;
}

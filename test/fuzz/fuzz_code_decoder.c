/*
 * fuzz_code_decoder.c - the incremental decoder of a call's code fed
 * arbitrary function arguments, split anywhere.
 *
 * The first byte of the input picks how the rest is used:
 *   even: the rest is the arguments text itself;
 *   odd:  the rest is code (made valid UTF-8 first), written into an
 *         arguments object by a writer that picks, character by character
 *         (from a hash of the input), raw UTF-8, \u escapes in either case,
 *         surrogate pairs or short escapes, with other members before and
 *         after and whitespace between the tokens. The decoded code must
 *         then be that code (unless an escaped pair json-c reads otherwise).
 * A hash of the input picks the sizes of the deltas (1 to 16 bytes, now and
 * then a large one).
 *
 * Checked: every delta's output is whole UTF-8 (never half a character) and
 * NUL-terminated; ended() never turns back; the status and the code do not
 * depend on the split (fed again in one piece, after a reset); and against
 * json-c on the whole text:
 *   - json-c reads an object with a string "code": the decoder succeeds with
 *     exactly those bytes, or reports a second "code" key;
 *   - json-c reads an object without "code": CI_CODE_MISSING; with a "code"
 *     that is not a string: CI_CODE_NOT_STRING (or the second key);
 *   - json-c reads something else than an object: CI_CODE_SYNTAX;
 *   - the decoder succeeds: json-c reads the text once every number in it is
 *     made 0 (the decoder checks only the characters of numbers), unless it
 *     nests as deep as json-c's limit.
 */
#include "fuzz_common.h"
#include "ci_code_decoder.h"

typedef struct run {
    ci_code_status feed_st, finish_st;
    char *code;           /* malloc'd */
    size_t len;
    int ended;
} run;

static void run_free(run *r)
{
    free(r->code);
    memset(r, 0, sizeof(*r));
}

/* Decode TEXT in deltas whose sizes come from *ST (one delta when ST is
 * NULL). */
static run decode(ci_code_decoder *d, const char *text, size_t len, uint64_t *st)
{
    run r;
    size_t at = 0;
    memset(&r, 0, sizeof(r));
    r.code = malloc(len * 3 + 8);
    ci_code_decoder_reset(d);
    do {
        size_t n = len - at;
        const char *out = NULL;
        apr_size_t olen = 0;
        char *piece;
        int was_ended = ci_code_decoder_ended(d);
        if (st) {
            uint64_t x = fuzz_next(st);
            size_t k = (x & 0xF00) == 0 ? (size_t)(x % 4096) + 1 : (size_t)(x % 16) + 1;
            n = k < n ? k : n;
        }
        piece = malloc(n ? n : 1);     /* exact size: over-reads are caught */
        memcpy(piece, text + at, n);
        r.feed_st = ci_code_decoder_feed(d, piece, n, &out, &olen);
        free(piece);
        FUZZ_CHECK(out != NULL && out[olen] == '\0', "output not NUL-terminated");
        FUZZ_CHECK(fuzz_utf8_valid(out, olen), "the delta at byte %zu gave %zu bytes "
                   "that are not whole UTF-8", at, (size_t)olen);
        FUZZ_CHECK(r.len + olen <= len * 3 + 8, "more code than the text can hold");
        memcpy(r.code + r.len, out, olen);
        r.len += olen;
        FUZZ_CHECK(!was_ended || ci_code_decoder_ended(d), "ended() turned back");
        at += n;
    } while (at < len);
    FUZZ_CHECK(ci_code_decoder_length(d) == r.len, "length %zu, returned %zu",
               (size_t)ci_code_decoder_length(d), r.len);
    r.finish_st = ci_code_decoder_finish(d);
    r.ended = ci_code_decoder_ended(d);
    FUZZ_CHECK((ci_code_decoder_error(d) != NULL) == (r.finish_st != CI_CODE_OK),
               "error message and status %d disagree", r.finish_st);
    FUZZ_CHECK(r.finish_st != CI_CODE_OK || r.ended, "complete but not ended");
    return r;
}

/* ---- the writer (odd first byte) ------------------------------------------ */

typedef struct writer {
    char *buf;
    size_t len;
    uint64_t *st;
    int quirky;           /* wrote an escaped pair for U+xD800..U+xDFFF */
} writer;

static void put(writer *w, const char *s, size_t n)
{
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void put_space(writer *w)
{
    static const char spaces[] = " \t\r\n";
    uint64_t x = fuzz_next(w->st);
    int n = (x & 3) == 0 ? (int)((x >> 2) % 3) : 0;
    while (n--)
        put(w, &spaces[(x >> (8 + 2 * n)) & 3], 1);
}

static void put_u(writer *w, unsigned v, int upper)
{
    char e[7];
    snprintf(e, sizeof(e), upper ? "\\u%04X" : "\\u%04x", v);
    put(w, e, 6);
}

/* One character CP (its UTF-8 at S, K bytes) as JSON string text. */
static void put_char(writer *w, unsigned cp, const char *s, size_t k)
{
    static const char shorts[] = "\"\\/\b\f\n\r\t", letters[] = "\"\\/bfnrt";
    uint64_t x = fuzz_next(w->st);
    const char *e = cp && cp < 0x80 ? strchr(shorts, (int)cp) : NULL;
    int upper = (x >> 8) & 1;
    if (e && (cp == '"' || cp == '\\' || x % 2)) {
        char two[2] = { '\\', letters[e - shorts] };
        put(w, two, 2);
    }
    else if (cp == '"' || cp == '\\' || cp == 0 || x % 3 == 0) {
        if (cp >= 0x10000) {
            put_u(w, 0xD800 + ((cp - 0x10000) >> 10), upper);
            put_u(w, 0xDC00 + ((cp - 0x10000) & 0x3FF), upper);
            if ((cp & 0xF800) == 0xD800)
                w->quirky = 1;
        }
        else
            put_u(w, cp, upper);
    }
    else
        put(w, s, k);
}

static unsigned utf8_decode(const unsigned char *s, size_t *k)
{
    if (s[0] < 0x80)
        return *k = 1, s[0];
    if (s[0] < 0xE0)
        return *k = 2, (unsigned)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    if (s[0] < 0xF0)
        return *k = 3, (unsigned)(s[0] & 0x0F) << 12 | (unsigned)(s[1] & 0x3F) << 6 |
                       (s[2] & 0x3F);
    return *k = 4, (unsigned)(s[0] & 0x07) << 18 | (unsigned)(s[1] & 0x3F) << 12 |
                   (unsigned)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

static const char *const others[] = {
    "\"name\":\"x\\\"}\"", "\"n\":-12.5e+3", "\"t\":true", "\"z\":null",
    "\"o\":{\"code\":\"no\",\"a\":[1,[],{}]}", "\"a\":[false,\"]\"]", "\"c\\u006fd\":0",
};

/* Arguments holding CODE (valid UTF-8, N bytes); W->buf must hold 12 * N
 * + 256 bytes. */
static void write_arguments(writer *w, const char *code, size_t n)
{
    uint64_t x = fuzz_next(w->st);
    size_t i = 0;
    put_space(w);
    put(w, "{", 1);
    if (x & 1) {
        const char *o = others[(x >> 1) % 7];
        put_space(w);
        put(w, o, strlen(o));
        put(w, ",", 1);
    }
    put_space(w);
    put(w, x & 16 ? "\"c\\u006Fde\"" : "\"code\"", x & 16 ? 11 : 6);
    put_space(w);
    put(w, ":", 1);
    put_space(w);
    put(w, "\"", 1);
    while (i < n) {
        size_t k;
        unsigned cp = utf8_decode((const unsigned char *)code + i, &k);
        put_char(w, cp, code + i, k);
        i += k;
    }
    put(w, "\"", 1);
    put_space(w);
    if (x & 32) {
        const char *o = others[(x >> 6) % 7];
        put(w, ",", 1);
        put_space(w);
        put(w, o, strlen(o));
    }
    put(w, "}", 1);
    put_space(w);
}

/* ---- json-c's view ---------------------------------------------------------- */

/* TEXT with every number outside strings made 0, and the deepest nesting.
 * Memory from P. */
static const char *zero_numbers(apr_pool_t *p, const char *text, size_t len,
                                size_t *olen, int *depth)
{
    char *out = apr_palloc(p, len + 1);
    size_t i = 0, o = 0;
    int in_string = 0, d = 0;
    *depth = 0;
    while (i < len) {
        char c = text[i];
        if (in_string) {
            out[o++] = c;
            if (c == '\\' && i + 1 < len)
                out[o++] = text[++i];
            else if (c == '"')
                in_string = 0;
            i++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            out[o++] = '0';
            while (i < len && strchr("0123456789.eE+-", text[i]) && text[i])
                i++;
            continue;
        }
        if (c == '"')
            in_string = 1;
        else if (c == '{' || c == '[')
            *depth = ++d > *depth ? d : *depth;
        else if (c == '}' || c == ']')
            d--;
        out[o++] = c;
        i++;
    }
    *olen = o;
    return out;
}

static void against_json_c(apr_pool_t *p, const char *text, size_t len, const run *r)
{
    const char *err = NULL;
    json_object *o = ci_json_parse(p, text, len, &err), *code = NULL;
    /* (a JSON null is a NULL json_object: has_code tells it from no key) */
    int has_code = o && json_object_is_type(o, json_type_object) &&
                   json_object_object_get_ex(o, "code", &code);
    if (has_code && json_object_is_type(code, json_type_string)) {
        size_t n = (size_t)json_object_get_string_len(code);
        FUZZ_CHECK(r->finish_st == CI_CODE_OK || r->finish_st == CI_CODE_DUPLICATE,
                   "json-c reads a code, the decoder says %d", r->finish_st);
        if (r->finish_st == CI_CODE_OK)
            FUZZ_CHECK(r->len == n && !memcmp(r->code, json_object_get_string(code), n),
                       "decoded %zu bytes '%.*s', json-c %zu '%.*s'", r->len,
                       (int)r->len, r->code, n, (int)n, json_object_get_string(code));
    }
    else if (has_code)
        FUZZ_CHECK(r->finish_st == CI_CODE_NOT_STRING || r->finish_st == CI_CODE_DUPLICATE,
                   "json-c reads a code that is not a string, the decoder says %d",
                   r->finish_st);
    else if (o && json_object_is_type(o, json_type_object))
        FUZZ_CHECK(r->finish_st == CI_CODE_MISSING,
                   "json-c reads no code, the decoder says %d", r->finish_st);
    else if (o)
        FUZZ_CHECK(r->finish_st == CI_CODE_SYNTAX,
                   "json-c reads a %s, the decoder says %d",
                   json_type_to_name(json_object_get_type(o)), r->finish_st);
    if (r->finish_st == CI_CODE_OK && !o) {
        size_t zlen;
        int depth;
        const char *z = zero_numbers(p, text, len, &zlen, &depth);
        if (depth < CI_JSON_MAX_DEPTH) {
            o = ci_json_parse(p, z, zlen, &err);
            FUZZ_CHECK(o != NULL, "the decoder accepts what json-c refuses (%s): %.*s",
                       err, (int)(len > 300 ? 300 : len), text);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t st = fuzz_hash(data, size);
    apr_pool_t *p;
    ci_code_decoder *d;
    const char *text, *code = NULL;
    size_t len, clen = 0;
    writer w;
    run pieces, whole;

    if (size < 1 || size > 65536)
        return 0;
    p = fuzz_pool_create();
    memset(&w, 0, sizeof(w));
    if (data[0] & 1) {
        apr_size_t n;
        code = ci_utf8_sanitize(p, (const char *)data + 1, size - 1, &n);
        clen = n;
        w.buf = malloc(12 * clen + 256);
        w.st = &st;
        write_arguments(&w, code, clen);
        text = w.buf;
        len = w.len;
    }
    else {
        text = (const char *)data + 1;
        len = size - 1;
    }
    d = ci_code_decoder_create(p);
    pieces = decode(d, text, len, &st);
    whole = decode(d, text, len, NULL);
    FUZZ_CHECK(pieces.finish_st == whole.finish_st, "status %d in pieces, %d whole",
               pieces.finish_st, whole.finish_st);
    FUZZ_CHECK(pieces.feed_st == whole.feed_st, "feed status %d in pieces, %d whole",
               pieces.feed_st, whole.feed_st);
    FUZZ_CHECK(pieces.len == whole.len && !memcmp(pieces.code, whole.code, whole.len),
               "%zu bytes of code in pieces, %zu whole", pieces.len, whole.len);
    FUZZ_CHECK(pieces.ended == whole.ended, "ended in pieces %d, whole %d",
               pieces.ended, whole.ended);
    if (code) {
        FUZZ_CHECK(whole.finish_st == CI_CODE_OK, "written arguments refused (%d): %s",
                   whole.finish_st, ci_code_decoder_error(d));
        if (!w.quirky)
            FUZZ_CHECK(whole.len == clen && !memcmp(whole.code, code, clen),
                       "decoded %zu bytes, wrote %zu", whole.len, clen);
    }
    against_json_c(p, text, len, &whole);
    run_free(&pieces);
    run_free(&whole);
    free(w.buf);
    fuzz_pool_destroy(p);
    return 0;
}

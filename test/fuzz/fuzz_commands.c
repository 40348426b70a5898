/*
 * fuzz_commands.c - the decoder's array mode (the hosted shell's
 * {"commands": [...]}) fed arbitrary function arguments, split anywhere, and
 * fed on as the relay feeds it: after a stop at an element's end, the rest
 * of the delta.
 *
 * Checked: every piece out is whole UTF-8 and NUL-terminated; a feed that
 * stops early stops right after a closing quote, and only at an element's
 * end; the element index never goes back and grows by one at a time; the
 * elements, each one's text and the status do not depend on the split (fed
 * again in one piece, after a reset); and against json-c on the whole text:
 * when it reads an object whose "commands" is an array of strings, the
 * decoder finds no syntax error, and when the decoder succeeds it gives
 * exactly those strings.
 */
#include "fuzz_common.h"
#include "ci_code_decoder.h"

#define MAX_ELEMENTS 4096

typedef struct run {
    ci_code_status feed_st, finish_st;
    char *text[MAX_ELEMENTS];      /* malloc'd, each element's bytes */
    size_t len[MAX_ELEMENTS];
    int elements;                  /* elements begun */
} run;

static void run_free(run *r)
{
    int i;
    for (i = 0; i < r->elements; i++)
        free(r->text[i]);
    memset(r, 0, sizeof(*r));
}

static void add_bytes(run *r, int element, const char *out, size_t n)
{
    FUZZ_CHECK(element >= 0 && element < MAX_ELEMENTS, "element %d", element);
    FUZZ_CHECK(element <= r->elements, "element %d after %d begun", element, r->elements);
    if (element == r->elements) {
        r->text[element] = calloc(1, 1);
        r->elements++;
    }
    r->text[element] = realloc(r->text[element], r->len[element] + n + 1);
    memcpy(r->text[element] + r->len[element], out, n);
    r->len[element] += n;
}

/* One delta (N bytes at PIECE), fed as the relay feeds it. */
static void feed_delta(ci_code_decoder *d, const char *piece, size_t n, run *r)
{
    while (n) {
        const char *out = NULL;
        apr_size_t olen = 0, used = 0;
        int before = ci_code_decoder_element(d), el;
        r->feed_st = ci_code_decoder_feed_some(d, piece, n, &out, &olen, &used);
        FUZZ_CHECK(out != NULL && out[olen] == '\0', "output not NUL-terminated");
        FUZZ_CHECK(fuzz_utf8_valid(out, olen), "a feed gave bytes that are not whole UTF-8");
        FUZZ_CHECK(used <= n, "used %zu of %zu", (size_t)used, n);
        el = ci_code_decoder_element(d);
        FUZZ_CHECK(el == before || el == before + 1, "element %d after %d", el, before);
        if (el >= 0 && (olen || el > before))
            add_bytes(r, el, out, olen);
        FUZZ_CHECK(olen == 0 || el >= 0, "bytes before any element");
        if (r->feed_st != CI_CODE_OK)
            return;
        if (used < n)
            FUZZ_CHECK(ci_code_decoder_element_ended(d) && used > 0 && piece[used - 1] == '"',
                       "a feed stopped at byte %zu without an element's end", (size_t)used);
        piece += used;
        n -= used;
    }
}

/* Decode TEXT in deltas whose sizes come from *ST (one delta when ST is
 * NULL). */
static void decode(ci_code_decoder *d, const char *text, size_t len, uint64_t *st, run *r)
{
    size_t at = 0;
    memset(r, 0, sizeof(*r));
    ci_code_decoder_reset(d);
    do {
        size_t n = len - at;
        char *piece;
        if (st) {
            uint64_t x = fuzz_next(st);
            size_t k = (x & 0xF00) == 0 ? (size_t)(x % 4096) + 1 : (size_t)(x % 16) + 1;
            n = k < n ? k : n;
        }
        piece = malloc(n ? n : 1);     /* exact size: over-reads are caught */
        memcpy(piece, text + at, n);
        feed_delta(d, piece, n, r);
        free(piece);
        at += n;
    } while (at < len && r->feed_st == CI_CODE_OK);
    r->finish_st = ci_code_decoder_finish(d);
    FUZZ_CHECK((ci_code_decoder_error(d) != NULL) == (r->finish_st != CI_CODE_OK),
               "error message and status %d disagree", r->finish_st);
}

static void against_json_c(apr_pool_t *p, const char *text, size_t len, const run *r)
{
    const char *err = NULL;
    json_object *o = ci_json_parse(p, text, len, &err);
    json_object *cmds = o ? ci_json_get(o, "commands", json_type_array) : NULL;
    size_t i, n = cmds ? json_object_array_length(cmds) : 0;
    if (!cmds || !json_object_is_type(o, json_type_object))
        return;
    for (i = 0; i < n; i++)
        if (!json_object_is_type(json_object_array_get_idx(cmds, i), json_type_string))
            return;
    /* What json-c reads whole is JSON the decoder reads too; where the text
     * has "commands" more than once (json-c keeps the last), the decoder may
     * stop at the first: the relay then sends the commands from the parsed
     * call once the round is in. */
    FUZZ_CHECK(r->finish_st != CI_CODE_SYNTAX && r->finish_st != CI_CODE_BAD_UTF8 &&
               r->finish_st != CI_CODE_TRUNCATED,
               "json-c reads the commands, the decoder says %d", r->finish_st);
    if (r->finish_st != CI_CODE_OK)
        return;
    FUZZ_CHECK((size_t)r->elements == n, "%d elements, json-c %zu", r->elements, n);
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(cmds, i);
        size_t k = (size_t)json_object_get_string_len(s);
        FUZZ_CHECK(r->len[i] == k && !memcmp(r->text[i], json_object_get_string(s), k),
                   "element %zu: %zu bytes, json-c %zu", i, r->len[i], k);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t st = fuzz_hash(data, size);
    apr_pool_t *p;
    ci_code_decoder *d;
    run pieces, whole;
    int i;

    if (size > 65536)
        return 0;
    p = fuzz_pool_create();
    d = ci_code_decoder_create_array(p, "commands");
    decode(d, (const char *)data, size, &st, &pieces);
    decode(d, (const char *)data, size, NULL, &whole);
    FUZZ_CHECK(pieces.finish_st == whole.finish_st, "status %d in pieces, %d whole",
               pieces.finish_st, whole.finish_st);
    FUZZ_CHECK(pieces.elements == whole.elements, "%d elements in pieces, %d whole",
               pieces.elements, whole.elements);
    for (i = 0; i < whole.elements; i++)
        FUZZ_CHECK(pieces.len[i] == whole.len[i] &&
                   !memcmp(pieces.text[i], whole.text[i], whole.len[i]),
                   "element %d differs in pieces", i);
    against_json_c(p, (const char *)data, size, &whole);
    run_free(&pieces);
    run_free(&whole);
    fuzz_pool_destroy(p);
    return 0;
}

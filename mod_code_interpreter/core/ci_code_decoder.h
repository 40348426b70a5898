/*
 * ci_code_decoder.h - the code of a call of our function, decoded while its
 * arguments stream in.
 *
 * The model sends a function call's arguments, a JSON object text such as
 *   {"code":"print(\"hi\")\n"}
 * in deltas split at any byte: inside an escape (`\u00e9`), between the two
 * halves of a surrogate pair (`\ud83d\ude00`), inside a UTF-8 character.
 * Fed those deltas in order, the decoder returns after each one the bytes of
 * the string value of the top-level "code" member that the delta completed,
 * as UTF-8: never half a character and never half an escape; what is not
 * yet complete waits for the next delta. The concatenation of everything
 * returned is, at the end, exactly what json-c (ci_json_parse) reads as
 * "code" from the whole text.
 *
 * Around the code string the decoder reads the object as JSON: "code" may
 * come anywhere among the keys, other members may hold any value (strings,
 * numbers, literals, objects, arrays, nested as deep as CI_JSON_MAX_DEPTH),
 * whitespace may surround every token, and nothing but whitespace may follow
 * the object. Keys are compared once decoded (`"c\u006fde"` is "code"), and
 * only up to a U+0000 in them, because json-c cuts its keys there. Strings
 * must be valid UTF-8 and hold no raw NUL byte; raw control characters pass,
 * as json-c lets them. Numbers of other members are checked for their
 * characters only (the loop still parses the whole text strictly).
 *
 * Lone surrogates (a `\ud800`-`\udbff` escape not followed by a
 * `\udc00`-`\udfff` one, or a low one alone) each become U+FFFD, as json-c
 * decodes them. A high surrogate at the end of a delta is held back until
 * the next delta says whether its pair follows. json-c before 0.19 also
 * turns an escaped pair for U+xD800..U+xDFFF (x = 1..10) into U+FFFD (it
 * looks at the low 16 bits of the combined code point); the decoder asks
 * json-c once which way it reads them and reads them the same way.
 *
 * Where the decoder must part from json-c it reports so: a second "code"
 * key is an error (json-c would keep the last one, but the first one's text
 * has already been sent on).
 */
#ifndef CI_CODE_DECODER_H
#define CI_CODE_DECODER_H

#include <apr_pools.h>

/* The member whose string value is decoded. */
#define CI_CODE_KEY "code"

typedef enum {
    CI_CODE_OK = 0,       /* all is well so far (or, from finish: complete) */
    CI_CODE_SYNTAX,       /* not a JSON object text */
    CI_CODE_BAD_UTF8,     /* a string holds invalid UTF-8 */
    CI_CODE_NOT_STRING,   /* "code" holds something other than a string */
    CI_CODE_DUPLICATE,    /* a second "code" member */
    CI_CODE_TOO_DEEP,     /* nesting deeper than CI_JSON_MAX_DEPTH */
    CI_CODE_MISSING,      /* (finish) the object has no "code" member */
    CI_CODE_TRUNCATED     /* (finish) the text ends before the object does */
} ci_code_status;

typedef struct ci_code_decoder ci_code_decoder;

/* A decoder for one call's arguments. Memory from P. */
ci_code_decoder *ci_code_decoder_create(apr_pool_t *p);

/* Read the next delta (LEN bytes). *OUT and *OUTLEN get the code bytes it
 * completed (possibly none; *OUT is then ""), NUL-terminated, valid until the
 * next call on D; the code may itself hold NULs, so use *OUTLEN. Returns
 * CI_CODE_OK, or an error: then *OUT holds what was decoded before the
 * offending byte, and every later call returns the same error and nothing
 * (ci_code_decoder_error says why). */
ci_code_status ci_code_decoder_feed(ci_code_decoder *d, const char *delta,
                                    apr_size_t len, const char **out,
                                    apr_size_t *outlen);

/* The arguments are complete (function_call_arguments.done). Returns the
 * error a feed returned if any; else CI_CODE_TRUNCATED when the object is
 * not closed; else CI_CODE_MISSING when it has no "code"; else CI_CODE_OK. */
ci_code_status ci_code_decoder_finish(ci_code_decoder *d);

/* True once the closing quote of the code string has been read: everything
 * of the code has been returned. */
int ci_code_decoder_ended(const ci_code_decoder *d);

/* Bytes of code returned so far. */
apr_size_t ci_code_decoder_length(const ci_code_decoder *d);

/* Why the decoder failed (English, with the byte offset), or NULL. */
const char *ci_code_decoder_error(const ci_code_decoder *d);

/* ---- array mode: a member whose value is an array of strings --------
 * The hosted shell's {"commands": ["ls", "cat x"], ...}: each string of
 * the array of KEY is an element, decoded as the code string is. */
ci_code_decoder *ci_code_decoder_create_array(apr_pool_t *p, const char *key);
/* As ci_code_decoder_feed, but a feed stops right after the closing quote
 * of an element: *USED is how many bytes of DELTA it read (the caller feeds
 * the rest next). In code mode it reads everything. */
ci_code_status ci_code_decoder_feed_some(ci_code_decoder *d, const char *delta,
                                         apr_size_t len, const char **out,
                                         apr_size_t *outlen, apr_size_t *used);
/* The element being read, or the last one read (0-based); -1 before the
 * first. */
int ci_code_decoder_element(const ci_code_decoder *d);
/* Whether the last feed stopped at the end of the element. */
int ci_code_decoder_element_ended(const ci_code_decoder *d);

/* Start on the arguments of another call, keeping the buffer. */
void ci_code_decoder_reset(ci_code_decoder *d);

#endif

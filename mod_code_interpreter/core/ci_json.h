/*
 * ci_json.h - json-c helpers tied to APR pools.
 *
 * json-c objects are reference counted, not pool allocated. Every root this
 * module creates or parses is handed to a pool cleanup (ci_json_own), so an
 * error path can never leak one.
 */
#ifndef CI_JSON_H
#define CI_JSON_H

#include <apr_pools.h>
#include <json-c/json.h>

/* Nesting accepted in client and upstream JSON. json-c's default (32) is too
 * small for real function-parameter schemas; deeper input is refused. */
#define CI_JSON_MAX_DEPTH 128

/* Parse LEN bytes strictly (RFC syntax, valid UTF-8, depth CI_JSON_MAX_DEPTH).
 * On success the root is owned by P. On failure returns NULL and sets *ERR
 * to a short English reason (allocated from P). */
json_object *ci_json_parse(apr_pool_t *p, const char *buf, apr_size_t len,
                           const char **err);

/* Hand OBJ to P: json_object_put runs when P is cleared or destroyed. */
json_object *ci_json_own(apr_pool_t *p, json_object *obj);

/* Serialise compactly, without "\/" escaping. The text belongs to OBJ. */
const char *ci_json_text(json_object *obj, apr_size_t *len);

/* Serialise into P's memory (survives OBJ). */
const char *ci_json_pstr(apr_pool_t *p, json_object *obj, apr_size_t *len);

/* The string member KEY of OBJ, or NULL when absent or not a string. */
/* The length of ARR, 0 when it is not an array (json-c asserts on one
 * that is not); its member I when that is a string, else NULL. For what a
 * directory, a provider or a peer answered. */
size_t ci_json_len(json_object *arr);
const char *ci_json_idx_str(json_object *arr, size_t i);
const char *ci_json_str(json_object *obj, const char *key);
/* Whether OBJ's "type" member is the string TYPE. */
int ci_json_is_type(json_object *obj, const char *type);

/* The member KEY of OBJ when it has type TYPE, else NULL. */
json_object *ci_json_get(json_object *obj, const char *key, json_type type);

/* A deep copy of OBJ (NULL stays NULL); the caller owns the copy. */
json_object *ci_json_copy(json_object *obj);

/* Length of the longest prefix of S (N bytes) that is valid UTF-8 (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF). */
apr_size_t ci_utf8_valid_prefix(const char *s, apr_size_t n);

/* Characters (code points) in the LEN bytes of UTF-8 at S: every byte but
 * UTF-8's continuation bytes starts one. */
apr_size_t ci_utf8_chars(const char *s, apr_size_t len);

/* S with every invalid UTF-8 sequence replaced by U+FFFD; S itself when it
 * is valid. Memory from P. */
const char *ci_utf8_sanitize(apr_pool_t *p, const char *s, apr_size_t n,
                             apr_size_t *outlen);

/* The members of array A serialised, without the brackets ("" when empty).
 * No copy: the text is A's own serialisation, valid while A lives and until
 * A itself is serialised again (serialising an object that holds A does not
 * touch it). A conversation of a megabyte is not copied once more. */
const char *ci_json_array_members(json_object *a, apr_size_t *len);

/* The value of KEY in the top-level object of the JSON text BODY (LEN
 * bytes), found without parsing it: a string without escapes, copied to P;
 * NULL when it is absent, not such a string, KEY is there more than once,
 * or the text is not an object as far as the scan reads. A hint to act on
 * early, to be checked against the parsed request: the scan does not
 * validate the text. */
const char *ci_json_top_string(apr_pool_t *p, const char *body, apr_size_t len,
                               const char *key);

/* A piece of a JSON text: LEN bytes at AT, not NUL-terminated. */
typedef struct ci_json_span {
    const char *at;
    apr_size_t len;
} ci_json_span;

/* The text of the value of KEY in the top-level object of BODY (LEN
 * bytes), found without parsing it, its surrounding whitespace left out:
 * 0 with *AT and *VLEN, or -1 when KEY is absent or there more than once,
 * a key is escaped, or the text is not an object as far as the scan reads.
 * The scan does not validate: for a text the parser has accepted, it is
 * the value the parser read. */
int ci_json_top_value(const char *body, apr_size_t len, const char *key,
                      const char **at, apr_size_t *vlen);

/* The texts of the members of the JSON array TEXT (LEN bytes, from its
 * '[' to its ']'), each without surrounding whitespace, into *SPANS (from
 * P): how many, or -1 when the scan cannot read them or, N not negative,
 * does not find exactly N. Like ci_json_top_value, it does not validate. */
int ci_json_array_spans(apr_pool_t *p, const char *text, apr_size_t len,
                        int n, ci_json_span **spans);

/* Whether the text of one value (LEN bytes at TEXT, no surrounding
 * whitespace) is JSON that ci_json_parse accepts and reads as it is
 * written: 0, or -1 when it is not or the check is not sure (a raw control
 * character, a lone surrogate escape, an integer of more than 18 digits,
 * nesting deeper than 64). Nothing is built. */
int ci_json_strict_value(const char *text, apr_size_t len);

/* The same check for an object, with the text of the value of its member
 * KEY in *VALUE (at NULL when there is none): -1 also when a key is
 * escaped or KEY is there twice. */
int ci_json_strict_object(const char *text, apr_size_t len, const char *key,
                          ci_json_span *value);

/* Whether the N bytes at S hold one below 0x20: a raw control character,
 * which strict JSON allows only as whitespace between tokens. */
int ci_json_has_control_byte(const char *s, apr_size_t n);

/* ROOT serialised with the value of KEY replaced by the array whose members
 * are the serialised texts A then B (either may be empty). Only ROOT minus
 * that value is encoded: large arrays are serialised once by the caller and
 * copied here. ROOT is left as it was. Memory from P. */
const char *ci_json_with_array(apr_pool_t *p, json_object *root, const char *key,
                               const char *a, apr_size_t alen,
                               const char *b, apr_size_t blen, apr_size_t *len);

#endif

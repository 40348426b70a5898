/*
 * ci_egress_content.h - what the egress proxy reads inside a tunnel, as
 * pure functions (no I/O, no threads): the server name a TLS ClientHello
 * asks for (a tunnel carries only its own name), and on connections whose
 * TLS it terminates for a domain secret, the request body's end (one
 * request per connection) and the removal of the secrets' values from
 * everything the origin sends back (a value never reaches the sandbox).
 * ci_egress.c does the I/O around them; the unit tests and fuzz_egress call
 * them directly.
 */
#ifndef CI_EGRESS_CONTENT_H
#define CI_EGRESS_CONTENT_H

#include <apr_pools.h>
#include <apr_tables.h>
#include "ci_egress_parse.h"

/* ---- the ClientHello's server name (ci_egress_sni.c) --------------------- */

/* At most this many bytes of TLS records are read for a ClientHello. */
#define CI_EGRESS_HELLO_MAX 20480

typedef enum {
    CI_EGRESS_HELLO_BAD = -1,   /* not a TLS ClientHello, or malformed */
    CI_EGRESS_HELLO_MORE = 0,   /* a ClientHello so far: read more */
    CI_EGRESS_HELLO_SNI = 1,    /* whole, *NAME its host_name, normalised */
    CI_EGRESS_HELLO_NO_SNI = 2  /* whole, without a host_name */
} ci_egress_hello_status;

/* The first LEN bytes a client sent in a tunnel (TLS records, the
 * ClientHello possibly over several): see the enum. A host_name that is no
 * host name (an IP literal, bytes outside LDH) is BAD; so is more than one. */
ci_egress_hello_status ci_egress_hello_sni(apr_pool_t *p, const unsigned char *buf,
                                           apr_size_t len, const char **name);

/* The same for the body of a server_name extension alone (LEN bytes), as
 * OpenSSL hands it to a ClientHello callback: SNI, NO_SNI or BAD. */
ci_egress_hello_status ci_egress_sni_extension(apr_pool_t *p, const unsigned char *ext,
                                               apr_size_t len, const char **name);

/* Why a tunnel was closed after its 200: the audit's reasons. */
#define CI_EGRESS_WHY_SNI_OTHER "the TLS ClientHello names %s, not %s"   /* SNI, HOST */
#define CI_EGRESS_WHY_SNI_NONE "the TLS ClientHello names no server (SNI), not %s"
#define CI_EGRESS_WHY_NOT_TLS "the tunnel to %s:443 did not start with a TLS ClientHello"
#define CI_EGRESS_WHY_HELLO_SLOW "no whole TLS ClientHello within %d s"

/* ---- the request: one per terminated connection (ci_egress_scrub.c) ------ */

/* A chunked body's framing, followed byte by byte. */
typedef struct ci_egress_chunks {
    int state;
    apr_uint64_t left;          /* data bytes left in this chunk */
    apr_size_t line;            /* bytes of the size or trailer line so far */
    int digits;
} ci_egress_chunks;

/* Where a request body ends: Content-Length bytes, chunked, or none. */
typedef struct ci_egress_body {
    int chunked;
    apr_uint64_t left;          /* Content-Length bytes still to come */
    int done;
    ci_egress_chunks chunks;
} ci_egress_body;

/* REQ's body framing into *B: 0, or -1 when it is ambiguous (both
 * Content-Length and Transfer-Encoding, two lengths, a coding other than
 * "chunked" alone): such a request is refused (400) rather than guessed. */
int ci_egress_body_start(const ci_egress_request *req, ci_egress_body *b);

/* How many of the N bytes at IN are still the body (the rest follows it:
 * another request, which is never relayed), or -1 (malformed chunks).
 * B->done once the body is whole. */
apr_ssize_t ci_egress_body_take(ci_egress_body *b, const char *in, apr_size_t n);

/* REQ's Accept-Encoding headers replaced by "Accept-Encoding: identity":
 * a compressed answer could not be scanned for the values. */
void ci_egress_identity_encoding(apr_pool_t *p, ci_egress_request *req);

/* ---- the answer: the values removed (ci_egress_scrub.c) ------------------ */

/* A value found in what comes back is overwritten, byte for byte, with
 * this (so Content-Length and chunk sizes stay true). */
#define CI_EGRESS_MASK '*'

/* The scanner of a stream for the values of SECRETS (as
 * ci_egress_secrets_for returns): each value found literally, or with any
 * of its bytes percent-encoded (%XX, hex digits in either case; '+' for a
 * space), is masked. Bytes are released as soon as no value can start at
 * them: a value split across any number of feeds is found. */
typedef struct ci_egress_scrub ci_egress_scrub;

ci_egress_scrub *ci_egress_scrub_make(apr_pool_t *p, const apr_array_header_t *secrets);

/* IN (N bytes) fed: *OUT / *OUT_LEN what may go on (valid until the next
 * call). */
void ci_egress_scrub_feed(ci_egress_scrub *s, const char *in, apr_size_t n,
                          const char **out, apr_size_t *out_len);

/* The end of the stream: the bytes still held. */
void ci_egress_scrub_flush(ci_egress_scrub *s, const char **out, apr_size_t *out_len);

/* How many values were masked so far. */
int ci_egress_scrub_count(const ci_egress_scrub *s);

/* The origin's answer as it goes back to the sandbox: its head and body
 * scanned (a chunked body decoded, scanned and chunked again, so that a
 * value split by the chunks is found), a compressed answer replaced by a
 * 502. HOST names the origin in that 502. HEAD_ONLY: the request was HEAD
 * (no body follows the head). */
typedef struct ci_egress_answer_filter ci_egress_answer_filter;

/* The 502 when the origin's answer cannot be scanned (HOST). */
#define CI_EGRESS_TXT_COMPRESSED \
    "egress error: %s answered with a compressed or unframed body, which cannot be " \
    "scanned for the domain's secrets\n"

ci_egress_answer_filter *ci_egress_answer_filter_make(apr_pool_t *p,
                                                      const apr_array_header_t *secrets,
                                                      const char *host, int head_only);

/* IN (N bytes; EOF: the origin is done, N may be 0) fed: *OUT / *OUT_LEN
 * what goes to the sandbox (valid until the next call). 0, or -1: nothing
 * more is relayed after *OUT (which is then the 502, when nothing was sent
 * before, or what was scanned so far). */
int ci_egress_answer_filter_feed(ci_egress_answer_filter *f, const char *in, apr_size_t n,
                                 int eof, const char **out, apr_size_t *out_len);

/* How many values were masked. */
int ci_egress_answer_filter_count(const ci_egress_answer_filter *f);

#endif

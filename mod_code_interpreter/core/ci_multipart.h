/*
 * ci_multipart.h - an incremental reader of multipart/form-data bodies
 * (RFC 7578 on RFC 2046), for uploads that are streamed on as they arrive
 * and never held whole.
 *
 * The body is fed in chunks of any size, split anywhere; the reader calls
 *   part_begin  once a part's headers are read, with what they say
 *               (Content-Disposition name, filename, Content-Type);
 *   part_data   with each piece of the part's body as it arrives: pointers
 *               into the caller's chunk, or into the reader's copy of the
 *               delimiter for bytes it held back (see below);
 *   part_end    once the delimiter after the body is read.
 * How the body was split changes only where part_data's pieces are cut:
 * the parts, their bytes, the statuses and the messages do not change
 * (unless part_data itself stops the reader: it stops after the piece it
 * was given).
 *
 * The framing, as RFC 2046 writes it:
 *   - a preamble may come before the first boundary line ("--" boundary at
 *     the very start, or CRLF "--" boundary); it is skipped;
 *   - a boundary line is "--" boundary, then transport padding (spaces and
 *     tabs), then CRLF; "--" boundary "--" closes the body, and what comes
 *     after it (the epilogue) is ignored;
 *   - a part's body ends at the delimiter CRLF "--" boundary. Once the whole
 *     delimiter is seen it is one: if padding-CRLF or "--" does not follow,
 *     the body is refused (BAD_DELIMITER). RFC 2046 forbids the delimiter
 *     inside a part, and taking it for data would mean holding back any
 *     amount of padding.
 * Only the bytes that could still be the start of a delimiter are held back
 * (at most the boundary's length + 3, always a prefix of the delimiter), so
 * the reader copies no body byte.
 *
 * Part headers are strict: every line ends with CRLF (a bare LF is refused
 * with BARE_LF, a CR not before an LF with BAD_HEADER), no folded lines, no
 * NUL or other control byte but tab, `name: value` with a token name. Each
 * part needs one `Content-Disposition: form-data` with a `name` (RFC 7578
 * 4.2); `filename` and `filename*` (RFC 5987: UTF-8 or ISO-8859-1, a
 * language tag, %-encoded bytes; decoded to UTF-8, and preferred to
 * `filename`) are read from it, other parameters ignored. A quoted-string's
 * backslash escapes only `"` and `\` and is kept before anything else, as
 * browsers send Windows paths unescaped. At most one Content-Type (kept as
 * given) and one Content-Disposition; a Content-Transfer-Encoding other than
 * 7bit, 8bit or binary is refused; other headers are ignored. Names and
 * filenames are returned as given: sanitising them is the caller's job.
 *
 * Bounds, each refused at the first byte past it (so where the body was
 * split does not matter):
 *   max_header  bytes of one part's header section, its lines and their
 *               CRLFs, the blank line included. The preamble and the
 *               transport padding of one boundary line are held to it too.
 *   max_parts   parts; the boundary line that would open one more is refused.
 *   max_body    bytes of one part's body (a per-file cap). Bytes held back
 *               count once they turn out to be data.
 * APR_SIZE_MAX means no bound.
 *
 * Memory comes from the pool given at creation and does not grow with the
 * body: the header section of one part (at most max_header + 1 bytes), its
 * decoded values (at most max_header + 17) and the delimiter (at most 75),
 * reused from part to part (ci_multipart_footprint), plus the reader itself
 * and, once, an error message.
 */
#ifndef CI_MULTIPART_H
#define CI_MULTIPART_H

#include <apr_pools.h>

typedef enum {
    CI_MULTIPART_OK = 0,           /* everything fed was read; more may come */
    CI_MULTIPART_DONE,             /* the close delimiter was read: the body is complete */
    CI_MULTIPART_NOT_MULTIPART,    /* (ci_multipart_boundary) not multipart/form-data */
    CI_MULTIPART_NO_BOUNDARY,      /* (ci_multipart_boundary) no boundary parameter */
    CI_MULTIPART_BAD_BOUNDARY,     /* a boundary that RFC 2046 does not allow */
    CI_MULTIPART_BAD_DELIMITER,    /* a boundary not followed by padding-CRLF or "--" */
    CI_MULTIPART_BARE_LF,          /* a header or boundary line ends with LF, not CRLF */
    CI_MULTIPART_BAD_HEADER,       /* a part's headers are malformed or not form-data */
    CI_MULTIPART_HEADER_TOO_LARGE, /* headers (or preamble, padding) passed max_header */
    CI_MULTIPART_TOO_MANY_PARTS,   /* one more part than max_parts */
    CI_MULTIPART_PART_TOO_LARGE,   /* a part's body passed max_body */
    CI_MULTIPART_STOPPED,          /* a callback asked to stop */
    CI_MULTIPART_TRUNCATED         /* (ci_multipart_end) the body ended before its close delimiter */
} ci_multipart_status;

/* What a part's headers say. The strings are NUL-terminated (a NUL in the
 * headers is refused) and stay valid until the part ends. */
typedef struct ci_multipart_part {
    apr_size_t index;          /* 0 for the first part */
    const char *name;          /* the Content-Disposition name ("" allowed) */
    const char *filename;      /* filename* decoded, else filename, else NULL
                                * (a form field); "" when sent empty */
    const char *content_type;  /* the Content-Type, spaces around it trimmed; NULL if none */
} ci_multipart_part;

/* The callbacks: return 0 to go on, anything else to stop the reader
 * (status CI_MULTIPART_STOPPED, the rest of the input unread). Any may be
 * NULL. part_data is never called with LEN 0. A callback must not feed the
 * reader that called it. */
typedef struct ci_multipart_callbacks {
    int (*part_begin)(void *baton, const ci_multipart_part *part);
    int (*part_data)(void *baton, const ci_multipart_part *part, const char *data,
                     apr_size_t len);
    int (*part_end)(void *baton, const ci_multipart_part *part);
} ci_multipart_callbacks;

typedef struct ci_multipart_limits {
    apr_size_t max_header;     /* bytes of one part's header section */
    apr_size_t max_parts;      /* parts in the body */
    apr_size_t max_body;       /* bytes of one part's body */
} ci_multipart_limits;

typedef struct ci_multipart ci_multipart;

/* The boundary of a Content-Type header value, `multipart/form-data;
 * boundary=...`: the media type and the parameter names are
 * case-insensitive, other parameters are ignored, the value is a
 * quoted-string or a run of bytes up to `;` or a space, and must be 1 to 70
 * of RFC 2046's characters (digits, letters, '()+_,-./:=? and space, not
 * last). Returns CI_MULTIPART_OK with *BOUNDARY (in P); else
 * CI_MULTIPART_NOT_MULTIPART (CONTENT_TYPE is NULL or another type),
 * NO_BOUNDARY or BAD_BOUNDARY (also for a malformed parameter list or two
 * boundaries), with *BOUNDARY NULL and *ERR (when ERR is not NULL) saying
 * why, in P. */
ci_multipart_status ci_multipart_boundary(apr_pool_t *p, const char *content_type,
                                          const char **boundary, const char **err);

/* A reader of a body with BOUNDARY (as ci_multipart_boundary returns it,
 * without the leading "--"), within LIMITS, calling CB with BATON. Memory
 * from P. An invalid BOUNDARY gives a reader whose every call returns
 * CI_MULTIPART_BAD_BOUNDARY. */
ci_multipart *ci_multipart_create(apr_pool_t *p, const char *boundary,
                                  const ci_multipart_limits *limits,
                                  const ci_multipart_callbacks *cb, void *baton);

/* Read LEN bytes of the body; every callback they complete is called
 * before this returns. Returns CI_MULTIPART_OK, DONE (the close delimiter
 * was read; later bytes are the epilogue, ignored) or the failure; a
 * failure sticks: every later call returns it without reading
 * (ci_multipart_error says why). */
ci_multipart_status ci_multipart_feed(ci_multipart *r, const char *buf, apr_size_t len);

/* The end of the body. Returns CI_MULTIPART_DONE when the close delimiter
 * was read, the failure when there was one, else CI_MULTIPART_TRUNCATED
 * (which then sticks, with its message). Bytes held back are dropped. */
ci_multipart_status ci_multipart_end(ci_multipart *r);

/* Why the reader failed (English, for a log or an error body), or NULL
 * while its status is OK or DONE. */
const char *ci_multipart_error(const ci_multipart *r);

/* Parts begun (part_begin called). */
apr_size_t ci_multipart_parts(const ci_multipart *r);

/* Bytes of buffer the reader holds now (see the memory note above). */
apr_size_t ci_multipart_footprint(const ci_multipart *r);

/* One part's whole header section, SECTION (LEN bytes: header lines each
 * ending with CRLF, then the blank line, nothing after), read by the
 * reader's rules into *PART (index 0; strings in P). Returns CI_MULTIPART_OK,
 * or BARE_LF or BAD_HEADER with *ERR (when ERR is not NULL) saying why, in
 * P. The reader calls the same code on each part's section; this entry is
 * for callers and tests that have a section whole. */
ci_multipart_status ci_multipart_parse_headers(apr_pool_t *p, const char *section,
                                               apr_size_t len, ci_multipart_part *part,
                                               const char **err);

#endif

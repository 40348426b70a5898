/*
 * ci_egress_parse.h - the egress proxy's decisions, as pure functions (no
 * I/O, no threads, no global state): the request head a sandbox sends, the
 * host it names, the container's allowlist, the class of an address a name
 * resolved to, the head handed on to an origin, and the exact texts of the
 * answers. ci_egress.c does the I/O around them; the unit tests and
 * fuzz_egress call them directly.
 */
#ifndef CI_EGRESS_PARSE_H
#define CI_EGRESS_PARSE_H

#include <sys/socket.h>
#include <apr_pools.h>
#include <apr_tables.h>

/* A request head is at most this long, its blank line included. */
#define CI_EGRESS_HEAD_MAX 16384
/* ... with at most this many header lines. */
#define CI_EGRESS_HEADERS_MAX 128

/* ---- the answers: their one definition (the tests compare bytes) -------- */

/* Every answer: this status line, then these headers, then one line of body
 * ending in "\n". */
#define CI_EGRESS_STATUS_400 "HTTP/1.1 400 Bad Request"
#define CI_EGRESS_STATUS_403 "HTTP/1.1 403 Forbidden"
#define CI_EGRESS_STATUS_502 "HTTP/1.1 502 Bad Gateway"
#define CI_EGRESS_STATUS_503 "HTTP/1.1 503 Service Unavailable"
#define CI_EGRESS_RESPONSE_FORMAT "%s\r\nContent-Type: text/plain; charset=utf-8\r\n" \
    "Content-Length: %lu\r\nConnection: close\r\n\r\n%s"
/* The answer to a CONNECT that is let through. */
#define CI_EGRESS_ESTABLISHED "HTTP/1.1 200 Connection established\r\n\r\n"

/* Refusals (403): what the policy does not let through. */
#define CI_EGRESS_REFUSED_PREFIX "egress refused: "
#define CI_EGRESS_TXT_NOT_ALLOWED \
    "egress refused: %s is not on this container's allowlist\n"             /* DOMAIN */
#define CI_EGRESS_TXT_PORT \
    "egress refused: %s:%d: only ports 80 and 443 are allowed\n"            /* DOMAIN, PORT */
#define CI_EGRESS_TXT_IP_LITERAL \
    "egress refused: %s is an IP address; only allowlisted domain names are reachable\n"
#define CI_EGRESS_TXT_ADDRESS \
    "egress refused: %s resolves to %s, a %s address\n"                     /* DOMAIN, ADDR, KIND */
#define CI_EGRESS_TXT_OTHER_HOST \
    "egress refused: this tunnel is for %s:%d; a request in it names another host\n"
#define CI_EGRESS_TXT_PLAIN_SECRET \
    "egress refused: %s has domain secrets; plain http to it is not allowed, use https\n"
#define CI_EGRESS_TXT_CONNECT_80 \
    "egress refused: CONNECT %s:80: plain http is sent as absolute-form requests " \
    "(http://...), not through a tunnel\n"
#define CI_EGRESS_TXT_TOO_MANY \
    "egress refused: too many connections from this container (at most %d)\n"
#define CI_EGRESS_TXT_OWNER_TOO_MANY \
    "egress refused: too many connections from this owner's containers (at most %d)\n"
#define CI_EGRESS_TXT_NOT_RESOLVED_HERE \
    "egress refused: %s does not resolve on this server, and the site proxy is not " \
    "trusted to resolve it\n"                                               /* DOMAIN */

/* Errors that are not refusals: 400, 502, and 503 for the bound on all
 * containers together (max_total), which is the site's, not the
 * container's. */
#define CI_EGRESS_ERROR_PREFIX "egress error: "
#define CI_EGRESS_TXT_MALFORMED "egress error: malformed request\n"
#define CI_EGRESS_TXT_UNRESOLVED "egress error: %s could not be resolved\n"
#define CI_EGRESS_TXT_UNREACHABLE "egress error: %s:%d could not be reached\n"
#define CI_EGRESS_TXT_PROXY_REFUSED "egress error: the site proxy refused %s:%d\n"
#define CI_EGRESS_TXT_BUSY \
    "egress error: too many connections through the egress proxy (at most %d)\n"
/* Domain secrets: an origin whose TLS certificate does not verify (502), a
 * head that would grow past CI_EGRESS_INJECT_GROWTH_MAX with the values put
 * in (400). */
#define CI_EGRESS_TXT_UNVERIFIED "egress error: %s's certificate could not be verified\n"
#define CI_EGRESS_TXT_INJECT_TOO_LONG \
    "egress error: the request head is too long once the secrets are put in\n"

/* The head that asks the site proxy for a tunnel to ADDR (an IPv4 or IPv6
 * address, the one checked here) at PORT: "CONNECT 192.0.2.1:443" or
 * "CONNECT [2001:db8::1]:443", its Host the same; or, when ADDR is NULL
 * (the operator lets the site proxy resolve), to HOST:PORT by name. NULL
 * for an address of another family. */
char *ci_egress_site_connect(apr_pool_t *p, const struct sockaddr *addr, const char *host,
                             int port);

/* The whole answer: STATUS_LINE (one of CI_EGRESS_STATUS_*), the headers,
 * BODY (one line ending in "\n"). *LEN gets its length. */
char *ci_egress_response(apr_pool_t *p, const char *status_line, const char *body,
                         apr_size_t *len);

/* The audit log's reason for BODY: without its "egress refused: " or
 * "egress error: " and without the newline. */
char *ci_egress_reason(apr_pool_t *p, const char *body);

/* ---- the request head --------------------------------------------------- */

typedef struct ci_egress_header {
    const char *name;           /* as sent */
    const char *value;          /* without the spaces around it */
} ci_egress_header;

typedef struct ci_egress_request {
    const char *method;         /* "CONNECT", "GET", ... */
    int is_connect;             /* authority form; else absolute form http:// */
    const char *version;        /* "HTTP/1.0" or "HTTP/1.1" */
    const char *host;           /* normalised name, or the IP literal as sent */
    int host_is_ip;             /* HOST is an IP literal (refused) */
    int port;                   /* 1..65535; 80 when an http:// URI has none */
    const char *path;           /* absolute form: the origin-form target */
    int https;                  /* inside a TLS tunnel: the Host header the
                                   origin gets omits port 443 (not 80) */
    apr_array_header_t *headers; /* of ci_egress_header, in order */
} ci_egress_request;

/* The length of the head at the start of BUF (LEN bytes): up to and
 * including its blank line. 0: not complete yet (read more, unless LEN is
 * already CI_EGRESS_HEAD_MAX: then it is too long). */
apr_size_t ci_egress_head_length(const char *buf, apr_size_t len);

/* Parse HEAD (exactly LEN bytes: a whole head, blank line included, at most
 * CI_EGRESS_HEAD_MAX). 0 and *REQ filled, or -1: malformed (400). Admitted:
 * "CONNECT host:port HTTP/1.x" and "METHOD http://host[:port]/path HTTP/1.x"
 * whose Host header, if any, names the URI's host and port; lines end in
 * CRLF or LF; no NUL, no obs-fold, no space before a header's colon. */
int ci_egress_parse_head(apr_pool_t *p, const char *head, apr_size_t len,
                         ci_egress_request *req);

/* A head sent inside a CONNECT tunnel to HOST:PORT (which the proxy
 * terminates): "METHOD /origin-form HTTP/1.x", any Host header naming HOST
 * (and PORT, or no port), the same rules otherwise. 0 and *REQ filled (host
 * and port those of the tunnel, HTTPS as given), -1 (malformed: 400), or
 * CI_EGRESS_OTHER_HOST: a well-formed Host that names another host or port
 * (403, CI_EGRESS_TXT_OTHER_HOST): a tunnel carries only its own name, and
 * a secret of HOST must not reach another virtual host of the same server. */
#define CI_EGRESS_OTHER_HOST (-2)
int ci_egress_parse_tunnel_head(apr_pool_t *p, const char *head, apr_size_t len,
                                const char *host, int port, int https,
                                ci_egress_request *req);

/* ---- hosts and the allowlist -------------------------------------------- */

typedef enum {
    CI_EGRESS_HOST_BAD = -1,    /* not a host name (400) */
    CI_EGRESS_HOST_NAME = 0,    /* a DNS name: *OUT is normalised */
    CI_EGRESS_HOST_IP = 1       /* an IP literal: *OUT is the text as sent */
} ci_egress_host_kind;

/* Classify and normalise HOST (LEN bytes, as in a URI's authority: a name,
 * an IPv4 literal in any form inet_aton accepts, or "[v6]"). Names: ASCII
 * (IDNA as punycode), lower-cased, one trailing dot removed, labels of
 * letters, digits and inner hyphens, 1..63 each, 253 in all. A name whose
 * last label is all digits is no domain name: it counts as an IP literal. */
ci_egress_host_kind ci_egress_host_normalise(apr_pool_t *p, const char *host,
                                             apr_size_t len, const char **out);

/* Whether the normalised name HOST is on ALLOWLIST (N entries): an entry is
 * an exact name or "*.suffix" (any subdomain of suffix at any depth, not
 * suffix itself); compared case-insensitively, trailing dots ignored. */
int ci_egress_allowed(const char *const *allowlist, int n, const char *host);

/* The site's forward proxy, "http://HOST[:PORT][/]" (port 80 when none):
 * 0 with *HOST (a name, or an IP address without brackets, ready for
 * getaddrinfo) and *PORT, or -1. */
int ci_egress_parse_proxy(apr_pool_t *p, const char *url, const char **host, int *port);

/* ---- addresses ---------------------------------------------------------- */

typedef enum {
    CI_EGRESS_PUBLIC = 0,
    CI_EGRESS_LOOPBACK,
    CI_EGRESS_PRIVATE,
    CI_EGRESS_LINK_LOCAL,
    CI_EGRESS_SHARED,
    CI_EGRESS_MULTICAST,
    CI_EGRESS_UNSPECIFIED,
    CI_EGRESS_RESERVED
} ci_egress_addr_class;

/* The class of SA (AF_INET or AF_INET6; any other family is RESERVED).
 * IPv6 forms that embed an IPv4 address (::ffff:0:0/96, 64:ff9b::/96,
 * ::/96, 6to4 2002::/16) take the class of that address. Beyond the
 * contract's list, documentation and benchmarking ranges are RESERVED, as
 * is any IPv6 address outside 2000::/3 not named otherwise. */
ci_egress_addr_class ci_egress_classify(const struct sockaddr *sa);

/* The KIND in a refusal: "loopback", "private", "link-local",
 * "shared (CGNAT)", "multicast", "unspecified", "reserved" ("public"). */
const char *ci_egress_class_name(ci_egress_addr_class c);

/* ---- the head an origin gets -------------------------------------------- */

/* REQ (absolute form) as the origin gets it: origin-form target, Host set
 * to the URI's authority, the Proxy-* and hop-by-hop headers (Connection,
 * Keep-Alive, TE, Trailer, Upgrade and the names Connection lists) removed
 * and "Connection: close" added. The names Connection lists never remove
 * Content-Length or Transfer-Encoding: the body is relayed as it comes, and
 * its framing must reach the origin. Lines end in CRLF. */
char *ci_egress_rewrite(apr_pool_t *p, const ci_egress_request *req, apr_size_t *len);

/* ---- domain secrets ---------------------------------------------------- */

/* What a container's code holds is PLACEHOLDER; the proxy puts VALUE in its
 * place in requests to DOMAIN (exact, or "*." any subdomain, matched as the
 * allowlist is). */
typedef struct ci_egress_secret {
    const char *domain;
    const char *placeholder;    /* visible ASCII, at least 1 byte */
    const char *value;          /* a header value's bytes (no CR, LF, NUL) */
} ci_egress_secret;

/* How much the values put in may grow a head, beyond what the sandbox sent
 * (at most CI_EGRESS_HEAD_MAX): past it the request is refused (400,
 * CI_EGRESS_TXT_INJECT_TOO_LONG) rather than sent. */
#define CI_EGRESS_INJECT_GROWTH_MAX 65536

/* Whether S is a secret the policy may hold: a domain the allowlist syntax
 * admits, a placeholder of visible ASCII, a value without control
 * characters other than tab. */
int ci_egress_secret_valid(const ci_egress_secret *s);

/* The secrets of ALL (N) whose domain matches HOST: an array of
 * (const ci_egress_secret *), empty when none. */
apr_array_header_t *ci_egress_secrets_for(apr_pool_t *p, const ci_egress_secret *all,
                                          int n, const char *host);

/* Replaces in REQ's header values and the query of its target (nowhere
 * else: not the path before the '?', not the body; the Host header is made
 * again by ci_egress_rewrite) every placeholder of SECRETS (as
 * ci_egress_secrets_for returns) by its value: left to right, the longest
 * placeholder at a place first, a value put in never searched again. In the
 * query a value is percent-encoded but for RFC 3986's unreserved bytes.
 * Returns how many were replaced, or -1 when the values would grow the
 * head by more than CI_EGRESS_INJECT_GROWTH_MAX (REQ is then not to be
 * sent). */
int ci_egress_inject(apr_pool_t *p, ci_egress_request *req,
                     const apr_array_header_t *secrets);

#endif

/*
 * ci_egress_parse.c - the egress proxy's pure decisions: request heads,
 * hosts, allowlists, address classes, the head an origin gets, the answers.
 * Everything the sandbox sends is hostile: every byte is checked before it
 * is used, nothing is read past a length.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <apr_strings.h>
#include "ci_egress_parse.h"
#include "ci_secret_value.h"

/* ---- answers --------------------------------------------------------------- */

char *ci_egress_response(apr_pool_t *p, const char *status_line, const char *body,
                         apr_size_t *len)
{
    char *r = apr_psprintf(p, CI_EGRESS_RESPONSE_FORMAT, status_line,
                           (unsigned long)strlen(body), body);
    *len = strlen(r);
    return r;
}

char *ci_egress_reason(apr_pool_t *p, const char *body)
{
    apr_size_t n;
    if (!strncmp(body, CI_EGRESS_REFUSED_PREFIX, sizeof(CI_EGRESS_REFUSED_PREFIX) - 1))
        body += sizeof(CI_EGRESS_REFUSED_PREFIX) - 1;
    else if (!strncmp(body, CI_EGRESS_ERROR_PREFIX, sizeof(CI_EGRESS_ERROR_PREFIX) - 1))
        body += sizeof(CI_EGRESS_ERROR_PREFIX) - 1;
    n = strlen(body);
    if (n && body[n - 1] == '\n')
        n--;
    return apr_pstrmemdup(p, body, n);
}

/* ---- characters ------------------------------------------------------------ */

/* RFC 9110 tchar: what a method and a header name are made of. */
static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int is_token(const char *s, apr_size_t n)
{
    apr_size_t i;
    if (n == 0)
        return 0;
    for (i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return 0;
    return 1;
}

/* A header value's bytes: visible ASCII, space, tab and obs-text; no other
 * control character. */
static int is_field_value(const char *s, apr_size_t n)
{
    apr_size_t i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

/* A request target's bytes: visible ASCII only. */
static int is_visible_ascii(const char *s, apr_size_t n)
{
    apr_size_t i;
    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return 0;
    return 1;
}

/* ---- hosts ----------------------------------------------------------------- */

/* A label of letters, digits and inner hyphens, 1..63 long. */
static int is_ldh_label(const char *s, apr_size_t n)
{
    apr_size_t i;
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return 0;
    }
    return 1;
}

static int all_digits(const char *s, apr_size_t n)
{
    apr_size_t i;
    for (i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return n > 0;
}

/* NAME (lower case, no trailing dot): a valid LDH name; *LAST_NUMERIC says
 * whether its last label is all digits. */
static int is_ldh_name(const char *name, apr_size_t n, int *last_numeric)
{
    apr_size_t start = 0, i;
    if (n == 0 || n > 253)
        return 0;
    for (i = 0; i <= n; i++) {
        if (i < n && name[i] != '.')
            continue;
        if (!is_ldh_label(name + start, i - start))
            return 0;
        *last_numeric = all_digits(name + start, i - start);
        start = i + 1;
    }
    return 1;
}

/* "[v6]": an IPv6 literal (no zone). */
static ci_egress_host_kind bracketed_literal(apr_pool_t *p, const char *host,
                                             apr_size_t len, const char **out)
{
    char text[INET6_ADDRSTRLEN];
    struct in6_addr a6;
    if (len < 3 || host[len - 1] != ']' || len - 2 >= sizeof(text))
        return CI_EGRESS_HOST_BAD;
    memcpy(text, host + 1, len - 2);
    text[len - 2] = '\0';
    if (memchr(text, '\0', len - 2) || inet_pton(AF_INET6, text, &a6) != 1)
        return CI_EGRESS_HOST_BAD;
    *out = apr_pstrmemdup(p, host, len);
    return CI_EGRESS_HOST_IP;
}

ci_egress_host_kind ci_egress_host_normalise(apr_pool_t *p, const char *host,
                                             apr_size_t len, const char **out)
{
    char *lower;
    apr_size_t i, n = len;
    int last_numeric = 0;
    struct in_addr a4;

    if (len == 0 || len > 254)
        return CI_EGRESS_HOST_BAD;
    if (host[0] == '[')
        return bracketed_literal(p, host, len, out);
    lower = apr_palloc(p, len + 1);
    for (i = 0; i < len; i++) {
        char c = host[i];
        /* Names only: punycode is ASCII, so anything else is refused here. */
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.'))
            return CI_EGRESS_HOST_BAD;
        lower[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    if (n > 1 && lower[n - 1] == '.')
        n--;
    lower[n] = '\0';
    /* What inet_aton reads (getaddrinfo does too) is an address, however
     * it is spelled: 2130706433, 0x7f.1, 0177.0.0.1. */
    if (inet_aton(lower, &a4)) {
        *out = apr_pstrmemdup(p, host, len);
        return CI_EGRESS_HOST_IP;
    }
    if (!is_ldh_name(lower, n, &last_numeric))
        return CI_EGRESS_HOST_BAD;
    if (last_numeric) {
        /* No top-level domain is numeric: a resolver might read it as an
         * address. */
        *out = apr_pstrmemdup(p, host, len);
        return CI_EGRESS_HOST_IP;
    }
    *out = lower;
    return CI_EGRESS_HOST_NAME;
}

/* ---- the allowlist --------------------------------------------------------- */

static apr_size_t without_trailing_dot(const char *s)
{
    apr_size_t n = strlen(s);
    return (n > 1 && s[n - 1] == '.') ? n - 1 : n;
}

static int entry_matches(const char *entry, const char *host, apr_size_t hn)
{
    apr_size_t en;
    if (entry[0] == '*' && entry[1] == '.') {
        const char *suffix = entry + 2;
        apr_size_t sn = without_trailing_dot(suffix);
        /* A subdomain: at least one label, then a dot, then the suffix. */
        return sn > 0 && suffix[0] != '.' && hn > sn + 1 && host[hn - sn - 1] == '.' &&
               strncasecmp(host + hn - sn, suffix, sn) == 0;
    }
    en = without_trailing_dot(entry);
    return en > 0 && en == hn && strncasecmp(host, entry, hn) == 0;
}

int ci_egress_allowed(const char *const *allowlist, int n, const char *host)
{
    apr_size_t hn = without_trailing_dot(host);
    int i;
    if (hn == 0)
        return 0;
    for (i = 0; i < n; i++)
        if (allowlist[i] && entry_matches(allowlist[i], host, hn))
            return 1;
    return 0;
}

/* ---- addresses ------------------------------------------------------------- */

static int in_v4(apr_uint32_t a, apr_uint32_t net, int bits)
{
    apr_uint32_t mask = bits ? 0xffffffffU << (32 - bits) : 0;
    return (a & mask) == net;
}

/* A (host order). */
static ci_egress_addr_class classify_v4(apr_uint32_t a)
{
    if (in_v4(a, 0x00000000U, 8))
        return CI_EGRESS_UNSPECIFIED;
    if (in_v4(a, 0x7f000000U, 8))
        return CI_EGRESS_LOOPBACK;
    if (in_v4(a, 0x0a000000U, 8) || in_v4(a, 0xac100000U, 12) || in_v4(a, 0xc0a80000U, 16))
        return CI_EGRESS_PRIVATE;
    if (in_v4(a, 0xa9fe0000U, 16))
        return CI_EGRESS_LINK_LOCAL;
    if (in_v4(a, 0x64400000U, 10))
        return CI_EGRESS_SHARED;
    if (in_v4(a, 0xe0000000U, 4))
        return CI_EGRESS_MULTICAST;
    if (in_v4(a, 0xf0000000U, 4))
        return CI_EGRESS_RESERVED;
    /* IETF protocol assignments, the three documentation nets, benchmarking:
     * nothing a sandbox has reason to reach. */
    if (in_v4(a, 0xc0000000U, 24) || in_v4(a, 0xc0000200U, 24) ||
        in_v4(a, 0xc6336400U, 24) || in_v4(a, 0xcb007100U, 24) ||
        in_v4(a, 0xc6120000U, 15))
        return CI_EGRESS_RESERVED;
    return CI_EGRESS_PUBLIC;
}

static apr_uint32_t v4_at(const unsigned char *b)
{
    return ((apr_uint32_t)b[0] << 24) | ((apr_uint32_t)b[1] << 16) |
           ((apr_uint32_t)b[2] << 8) | (apr_uint32_t)b[3];
}

static int zeros(const unsigned char *b, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static ci_egress_addr_class classify_v6(const unsigned char *b)
{
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
    if (zeros(b, 16))
        return CI_EGRESS_UNSPECIFIED;
    if (zeros(b, 15) && b[15] == 1)
        return CI_EGRESS_LOOPBACK;
    /* Forms that carry an IPv4 address: what they reach is that address. */
    if (zeros(b, 10) && b[10] == 0xff && b[11] == 0xff)
        return classify_v4(v4_at(b + 12));          /* ::ffff:a.b.c.d */
    if (zeros(b, 12))
        return classify_v4(v4_at(b + 12));          /* ::a.b.c.d */
    if (!memcmp(b, nat64, 12))
        return classify_v4(v4_at(b + 12));          /* 64:ff9b::a.b.c.d */
    if (b[0] == 0x20 && b[1] == 0x02)
        return classify_v4(v4_at(b + 2));           /* 6to4 */
    if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1)
        return CI_EGRESS_PRIVATE;                   /* local-use NAT64 */
    if ((b[0] & 0xfe) == 0xfc)
        return CI_EGRESS_PRIVATE;                   /* fc00::/7 */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return CI_EGRESS_LINK_LOCAL;                /* fe80::/10 */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0)
        return CI_EGRESS_PRIVATE;                   /* site-local fec0::/10 */
    if (b[0] == 0xff)
        return CI_EGRESS_MULTICAST;
    if ((b[0] & 0xe0) != 0x20)
        return CI_EGRESS_RESERVED;                  /* not global unicast */
    if (b[0] == 0x20 && b[1] == 0x01 && ((b[2] == 0x0d && b[3] == 0xb8) ||
                                         (b[2] == 0 && b[3] == 0)))
        return CI_EGRESS_RESERVED;                  /* documentation, Teredo */
    return CI_EGRESS_PUBLIC;
}

ci_egress_addr_class ci_egress_classify(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return classify_v4(ntohl(in->sin_addr.s_addr));
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return classify_v6(in6->sin6_addr.s6_addr);
    }
    return CI_EGRESS_RESERVED;
}

const char *ci_egress_class_name(ci_egress_addr_class c)
{
    switch (c) {
    case CI_EGRESS_PUBLIC: return "public";
    case CI_EGRESS_LOOPBACK: return "loopback";
    case CI_EGRESS_PRIVATE: return "private";
    case CI_EGRESS_LINK_LOCAL: return "link-local";
    case CI_EGRESS_SHARED: return "shared (CGNAT)";
    case CI_EGRESS_MULTICAST: return "multicast";
    case CI_EGRESS_UNSPECIFIED: return "unspecified";
    case CI_EGRESS_RESERVED: return "reserved";
    }
    return "reserved";
}

/* ---- the request head -------------------------------------------------------- */

apr_size_t ci_egress_head_length(const char *buf, apr_size_t len)
{
    apr_size_t i, line = 0;
    if (len > CI_EGRESS_HEAD_MAX)
        len = CI_EGRESS_HEAD_MAX;
    for (i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i == line || (i == line + 1 && buf[line] == '\r'))
            return i + 1;
        line = i + 1;
    }
    return 0;
}

typedef struct line_reader {
    const char *s;
    apr_size_t len, at;
} line_reader;

/* The next line, without its LF and a CR before it: 1, 0 at the end, -1 for
 * a line without LF or with a CR inside. */
static int next_line(line_reader *r, const char **line, apr_size_t *n)
{
    const char *lf;
    apr_size_t end;
    if (r->at >= r->len)
        return 0;
    lf = memchr(r->s + r->at, '\n', r->len - r->at);
    if (!lf)
        return -1;
    end = (apr_size_t)(lf - r->s);
    *line = r->s + r->at;
    *n = end - r->at;
    if (*n && (*line)[*n - 1] == '\r')
        (*n)--;
    r->at = end + 1;
    return memchr(*line, '\r', *n) ? -1 : 1;
}

/* "[v6]:port", "name:port", "name" (when !REQUIRE_PORT: port 80), into
 * the host's text and the port. No userinfo. */
static int split_authority(const char *s, apr_size_t n, int require_port,
                           const char **host, apr_size_t *host_len, int *port)
{
    const char *colon = NULL;
    apr_size_t i;
    long v = 0;
    if (n == 0 || memchr(s, '@', n))
        return -1;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return -1;
        if ((apr_size_t)(close - s) + 1 < n) {
            if (close[1] != ':')
                return -1;
            colon = close + 1;
        }
    }
    else {
        colon = memchr(s, ':', n);
        if (colon && memchr(colon + 1, ':', n - (apr_size_t)(colon + 1 - s)))
            return -1;
    }
    if (!colon) {
        if (require_port)
            return -1;
        *host = s;
        *host_len = n;
        *port = 80;
        return 0;
    }
    *host = s;
    *host_len = (apr_size_t)(colon - s);
    for (i = (apr_size_t)(colon + 1 - s); i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || v > 65535)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if ((apr_size_t)(colon + 1 - s) == n || v < 1 || v > 65535)
        return -1;
    *port = (int)v;
    return 0;
}

/* The host and port of an authority, into REQ. */
static int take_authority(apr_pool_t *p, const char *s, apr_size_t n, int require_port,
                          ci_egress_request *req)
{
    const char *host;
    apr_size_t host_len;
    ci_egress_host_kind kind;
    if (split_authority(s, n, require_port, &host, &host_len, &req->port))
        return -1;
    kind = ci_egress_host_normalise(p, host, host_len, &req->host);
    if (kind == CI_EGRESS_HOST_BAD)
        return -1;
    req->host_is_ip = kind == CI_EGRESS_HOST_IP;
    return 0;
}

/* "http://authority[/path][?query]" into REQ; https:// and anything else
 * are refused (https goes through CONNECT). */
static int take_absolute_uri(apr_pool_t *p, const char *t, apr_size_t n,
                             ci_egress_request *req)
{
    static const char scheme[] = "http://";
    apr_size_t a = sizeof(scheme) - 1, end;
    if (n <= a || strncasecmp(t, scheme, a) || memchr(t, '#', n))
        return -1;
    for (end = a; end < n && t[end] != '/' && t[end] != '?'; end++)
        ;
    if (take_authority(p, t + a, end - a, 0, req))
        return -1;
    if (end == n)
        req->path = "/";
    else if (t[end] == '?')
        req->path = apr_pstrcat(p, "/", apr_pstrmemdup(p, t + end, n - end), NULL);
    else
        req->path = apr_pstrmemdup(p, t + end, n - end);
    return 0;
}

int ci_egress_parse_proxy(apr_pool_t *p, const char *url, const char **host, int *port)
{
    static const char scheme[] = "http://";
    apr_size_t a = sizeof(scheme) - 1, n = strlen(url);
    ci_egress_request r;
    memset(&r, 0, sizeof(r));
    if (n <= a || strncasecmp(url, scheme, a))
        return -1;
    if (url[n - 1] == '/')
        n--;
    if (take_authority(p, url + a, n - a, 0, &r))
        return -1;
    if (r.host[0] == '[')
        r.host = apr_pstrmemdup(p, r.host + 1, strlen(r.host) - 2);
    *host = r.host;
    *port = r.port;
    return 0;
}

char *ci_egress_site_connect(apr_pool_t *p, const struct sockaddr *addr, const char *host,
                             int port)
{
    char text[INET6_ADDRSTRLEN];
    const char *authority;
    if (!addr)
        authority = apr_psprintf(p, "%s:%d", host, port);
    else if (addr->sa_family == AF_INET &&
             inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, text,
                       sizeof(text)))
        authority = apr_psprintf(p, "%s:%d", text, port);
    else if (addr->sa_family == AF_INET6 &&
             inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, text,
                       sizeof(text)))
        authority = apr_psprintf(p, "[%s]:%d", text, port);
    else
        return NULL;
    return apr_psprintf(p, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority);
}

/* "METHOD SP target SP HTTP/1.x": the method and version into REQ, the
 * target's bytes (visible ASCII, not empty) into *TARGET / *TARGET_LEN. */
static int split_request_line(apr_pool_t *p, const char *s, apr_size_t n,
                              ci_egress_request *req, const char **target,
                              apr_size_t *target_len)
{
    const char *sp1 = memchr(s, ' ', n), *sp2, *version;
    apr_size_t version_len;
    if (!sp1)
        return -1;
    sp2 = memchr(sp1 + 1, ' ', n - (apr_size_t)(sp1 + 1 - s));
    if (!sp2 || !is_token(s, (apr_size_t)(sp1 - s)))
        return -1;
    *target = sp1 + 1;
    *target_len = (apr_size_t)(sp2 - *target);
    version = sp2 + 1;
    version_len = n - (apr_size_t)(version - s);
    if (*target_len == 0 || !is_visible_ascii(*target, *target_len) || version_len != 8 ||
        strncmp(version, "HTTP/1.", 7) || version[7] < '0' || version[7] > '9')
        return -1;
    req->method = apr_pstrmemdup(p, s, (apr_size_t)(sp1 - s));
    req->version = apr_pstrmemdup(p, version, version_len);
    req->is_connect = !strcmp(req->method, "CONNECT");
    return 0;
}

/* A request line as a proxy gets it: CONNECT's authority or an absolute
 * http:// URI. */
static int take_request_line(apr_pool_t *p, const char *s, apr_size_t n,
                             ci_egress_request *req)
{
    const char *target;
    apr_size_t target_len;
    if (split_request_line(p, s, n, req, &target, &target_len))
        return -1;
    if (req->is_connect)
        return take_authority(p, target, target_len, 1, req);
    return take_absolute_uri(p, target, target_len, req);
}

/* A request line as an origin gets it: an origin-form target, no CONNECT. */
static int take_origin_request_line(apr_pool_t *p, const char *s, apr_size_t n,
                                    ci_egress_request *req)
{
    const char *target;
    apr_size_t target_len;
    if (split_request_line(p, s, n, req, &target, &target_len) || req->is_connect ||
        target[0] != '/' || memchr(target, '#', target_len))
        return -1;
    req->path = apr_pstrmemdup(p, target, target_len);
    return 0;
}

/* "name: value" (no space before the colon, no obs-fold). */
static int take_header(apr_pool_t *p, const char *s, apr_size_t n, ci_egress_request *req)
{
    const char *colon = memchr(s, ':', n);
    apr_size_t v, e;
    ci_egress_header *h;
    if (!colon || !is_token(s, (apr_size_t)(colon - s)) ||
        req->headers->nelts >= CI_EGRESS_HEADERS_MAX)
        return -1;
    v = (apr_size_t)(colon + 1 - s);
    e = n;
    while (v < e && (s[v] == ' ' || s[v] == '\t'))
        v++;
    while (e > v && (s[e - 1] == ' ' || s[e - 1] == '\t'))
        e--;
    if (!is_field_value(s + v, e - v))
        return -1;
    h = apr_array_push(req->headers);
    h->name = apr_pstrmemdup(p, s, (apr_size_t)(colon - s));
    h->value = apr_pstrmemdup(p, s + v, e - v);
    return 0;
}

/* REQ's Host headers: at most one, naming REQ's host and port (DEFAULT_PORT
 * when it names none): 0; -1 malformed or two; -2 one that names another
 * host or port. */
static int host_header_agrees(apr_pool_t *p, const ci_egress_request *req, int default_port)
{
    const ci_egress_header *h = (const ci_egress_header *)req->headers->elts;
    ci_egress_request named;
    int i, seen = 0;
    for (i = 0; i < req->headers->nelts; i++) {
        if (strcasecmp(h[i].name, "Host"))
            continue;
        memset(&named, 0, sizeof(named));
        if (seen++ || take_authority(p, h[i].value, strlen(h[i].value), 0, &named))
            return -1;
        if (!strchr(h[i].value, ':'))
            named.port = default_port;
        if (named.port != req->port || named.host_is_ip != req->host_is_ip ||
            strcasecmp(named.host, req->host))
            return -2;
    }
    return 0;
}

typedef int (*request_line_fn)(apr_pool_t *p, const char *s, apr_size_t n,
                               ci_egress_request *req);

/* HEAD's request line (by TAKE_LINE) and header lines into REQ. */
static int parse_lines(apr_pool_t *p, const char *head, apr_size_t len,
                       request_line_fn take_line, ci_egress_request *req)
{
    line_reader r = { head, len, 0 };
    const char *line;
    apr_size_t n;
    int got;

    memset(req, 0, sizeof(*req));
    if (len == 0 || len > CI_EGRESS_HEAD_MAX || memchr(head, '\0', len))
        return -1;
    req->headers = apr_array_make(p, 8, sizeof(ci_egress_header));
    if (next_line(&r, &line, &n) != 1 || take_line(p, line, n, req))
        return -1;
    while ((got = next_line(&r, &line, &n)) == 1 && n > 0) {
        if (line[0] == ' ' || line[0] == '\t' || take_header(p, line, n, req))
            return -1;
    }
    /* The blank line, and nothing after it. */
    return got == 1 && r.at == len ? 0 : -1;
}

int ci_egress_parse_head(apr_pool_t *p, const char *head, apr_size_t len,
                         ci_egress_request *req)
{
    if (parse_lines(p, head, len, take_request_line, req))
        return -1;
    if (!req->is_connect && host_header_agrees(p, req, 80) != 0)
        return -1;
    return 0;
}

int ci_egress_parse_tunnel_head(apr_pool_t *p, const char *head, apr_size_t len,
                                const char *host, int port, int https,
                                ci_egress_request *req)
{
    if (parse_lines(p, head, len, take_origin_request_line, req))
        return -1;
    req->host = apr_pstrdup(p, host);
    req->port = port;
    req->https = https;
    return host_header_agrees(p, req, port);
}

/* ---- the head an origin gets ----------------------------------------------- */

static int is_hop_by_hop(const char *name)
{
    static const char *const hop[] = { "Connection", "Keep-Alive", "TE", "Trailer",
                                       "Upgrade", "Host", NULL };
    int i;
    if (!strncasecmp(name, "Proxy-", 6))
        return 1;
    for (i = 0; hop[i]; i++)
        if (!strcasecmp(name, hop[i]))
            return 1;
    return 0;
}

/* Whether a Connection header of REQ lists NAME. */
static int listed_by_connection(const ci_egress_request *req, const char *name)
{
    const ci_egress_header *h = (const ci_egress_header *)req->headers->elts;
    apr_size_t nn = strlen(name);
    int i;
    for (i = 0; i < req->headers->nelts; i++) {
        const char *v = h[i].value;
        if (strcasecmp(h[i].name, "Connection"))
            continue;
        while (*v) {
            apr_size_t tn;
            while (*v == ' ' || *v == '\t' || *v == ',')
                v++;
            for (tn = 0; v[tn] && v[tn] != ',' && v[tn] != ' ' && v[tn] != '\t'; tn++)
                ;
            if (tn == nn && !strncasecmp(v, name, nn))
                return 1;
            v += tn;
        }
    }
    return 0;
}

static int framing_header(const char *name)
{
    return !strcasecmp(name, "Content-Length") || !strcasecmp(name, "Transfer-Encoding");
}

char *ci_egress_rewrite(apr_pool_t *p, const ci_egress_request *req, apr_size_t *len)
{
    const ci_egress_header *h = (const ci_egress_header *)req->headers->elts;
    apr_array_header_t *out = apr_array_make(p, 8 + 4 * req->headers->nelts,
                                             sizeof(const char *));
    char *head;
    int i;

#define PUT(s) (*(const char **)apr_array_push(out) = (s))
    PUT(req->method); PUT(" "); PUT(req->path); PUT(" "); PUT(req->version);
    PUT("\r\nHost: ");
    PUT(req->port == (req->https ? 443 : 80) ? req->host : apr_psprintf(p, "%s:%d", req->host, req->port));
    PUT("\r\n");
    for (i = 0; i < req->headers->nelts; i++) {
        /* "close" too: the "Connection: close" added lists it. */
        if (is_hop_by_hop(h[i].name) || !strcasecmp(h[i].name, "close") ||
            (!framing_header(h[i].name) && listed_by_connection(req, h[i].name)))
            continue;
        PUT(h[i].name); PUT(": "); PUT(h[i].value); PUT("\r\n");
    }
    PUT("Connection: close\r\n\r\n");
#undef PUT
    head = apr_array_pstrcat(p, out, 0);
    *len = strlen(head);
    return head;
}

/* ---- domain secrets -------------------------------------------------------- */

int ci_egress_secret_valid(const ci_egress_secret *s)
{
    const char *d = s->domain;
    int last_numeric = 0;
    apr_size_t n;
    if (!d || !s->placeholder || !s->value || !*s->placeholder)
        return 0;
    if (d[0] == '*' && d[1] == '.')
        d += 2;
    n = without_trailing_dot(d);
    return is_ldh_name(d, n, &last_numeric) && !last_numeric &&
           is_visible_ascii(s->placeholder, strlen(s->placeholder)) &&
           ci_secret_value_ok(s->value, strlen(s->value));
}

apr_array_header_t *ci_egress_secrets_for(apr_pool_t *p, const ci_egress_secret *all,
                                          int n, const char *host)
{
    apr_array_header_t *out = apr_array_make(p, 2, sizeof(const ci_egress_secret *));
    int i;
    for (i = 0; i < n; i++) {
        const char *domain = all[i].domain;
        if (ci_egress_allowed(&domain, 1, host))
            APR_ARRAY_PUSH(out, const ci_egress_secret *) = &all[i];
    }
    return out;
}

/* The secret of SECRETS whose placeholder is at S (N bytes left), the
 * longest, or NULL. */
static const ci_egress_secret *placeholder_at(const apr_array_header_t *secrets,
                                              const char *s, apr_size_t n)
{
    const ci_egress_secret *best = NULL;
    apr_size_t best_len = 0;
    int i;
    for (i = 0; i < secrets->nelts; i++) {
        const ci_egress_secret *c = APR_ARRAY_IDX(secrets, i, const ci_egress_secret *);
        apr_size_t pn = strlen(c->placeholder);
        if (pn <= n && pn > best_len && !memcmp(s, c->placeholder, pn)) {
            best = c;
            best_len = pn;
        }
    }
    return best;
}

static int is_unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

/* VALUE as it goes into a target: percent-encoded but for unreserved bytes. */
static const char *target_form(apr_pool_t *p, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    apr_size_t i, o = 0, n = strlen(value);
    char *out = apr_palloc(p, 3 * n + 1);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)value[i];
        if (is_unreserved(c)) {
            out[o++] = (char)c;
            continue;
        }
        out[o++] = '%';
        out[o++] = hex[c >> 4];
        out[o++] = hex[c & 15];
    }
    out[o] = '\0';
    return out;
}

typedef struct inject_state {
    const apr_array_header_t *secrets;
    int count;                      /* placeholders replaced */
    apr_size_t growth;              /* bytes the values added */
} inject_state;

/* *S with its placeholders replaced (ENCODE: in target form). 0, or -1
 * past the growth bound. *S is left alone when it holds none. */
static int inject_one(apr_pool_t *p, inject_state *st, const char **s, int encode)
{
    const char *in = *s;
    apr_size_t n = strlen(in), i = 0, from = 0;
    apr_array_header_t *parts = NULL;
    while (i < n) {
        const ci_egress_secret *hit = placeholder_at(st->secrets, in + i, n - i);
        const char *v;
        apr_size_t pn, vn;
        if (!hit) {
            i++;
            continue;
        }
        if (!parts)
            parts = apr_array_make(p, 4, sizeof(const char *));
        v = encode ? target_form(p, hit->value) : hit->value;
        pn = strlen(hit->placeholder);
        vn = strlen(v);
        st->growth += vn > pn ? vn - pn : 0;
        if (st->growth > CI_EGRESS_INJECT_GROWTH_MAX)
            return -1;
        APR_ARRAY_PUSH(parts, const char *) = apr_pstrmemdup(p, in + from, i - from);
        APR_ARRAY_PUSH(parts, const char *) = v;
        st->count++;
        i += pn;
        from = i;
    }
    if (parts) {
        APR_ARRAY_PUSH(parts, const char *) = in + from;
        *s = apr_array_pstrcat(p, parts, 0);
    }
    return 0;
}

/* *PATH's query (after its first '?') with its placeholders replaced;
 * the path before it is left as it is: an origin's error page or redirect
 * quotes a path far more often than a query. 0 or -1. */
static int inject_into_query(apr_pool_t *p, inject_state *st, const char **path)
{
    const char *mark = strchr(*path, '?'), *query;
    if (!mark)
        return 0;
    query = mark + 1;
    if (inject_one(p, st, &query, 1))
        return -1;
    if (query != mark + 1)
        *path = apr_pstrcat(p, apr_pstrmemdup(p, *path, (apr_size_t)(mark + 1 - *path)),
                            query, NULL);
    return 0;
}

int ci_egress_inject(apr_pool_t *p, ci_egress_request *req,
                     const apr_array_header_t *secrets)
{
    inject_state st = { secrets, 0, 0 };
    int i;
    if (!secrets || secrets->nelts == 0)
        return 0;
    if (req->path && inject_into_query(p, &st, &req->path))
        return -1;
    for (i = 0; i < req->headers->nelts; i++) {
        ci_egress_header *h = &APR_ARRAY_IDX(req->headers, i, ci_egress_header);
        if (inject_one(p, &st, &h->value, 0))
            return -1;
    }
    return st.count;
}

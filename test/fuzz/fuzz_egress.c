/*
 * fuzz_egress.c - the egress proxy's pure decisions fed what a sandbox
 * could send: the request head parser, the host normaliser, the allowlist
 * matcher, the rewrite for the origin, the site proxy URL and the address
 * classifier, the tunnel head parser, the secrets' matching and injection.
 *
 * The input is used several ways: whole, as a request head (up to its blank
 * line, as the proxy cuts it); whole, as a host; split at its first LF into
 * an allowlist (entries separated by commas) and a host; its first bytes as
 * an IPv4 and an IPv6 address; whole, as a head inside a terminated tunnel
 * to api.example.com; both kinds of head with domain secrets put in;
 * whole, as the first bytes of a CONNECT tunnel (a TLS ClientHello and its
 * server name); whole, as an origin's answer on a terminated connection
 * (its values taken out), fed at once and in pieces; whole, as a request
 * body after a tunnel head.
 *
 * Checked: no crash, leak or undefined behaviour; a head is never longer
 * than the bound nor than the input; a normalised name is lower-case LDH,
 * at most 253 bytes, normalises to itself, matches itself and not "*." of
 * itself, while a subdomain matches "*." of it; matching ignores case; a
 * parsed absolute-form request's rewrite is one head (its blank line at its
 * end) with one Host line, no Proxy-* or hop-by-hop line and "Connection:
 * close", and that head put back into absolute form parses again and
 * rewrites to the same bytes; addresses that embed IPv4 take its class;
 * after injection no placeholder is left in the query or a header value
 * (the values hold none), the count is at most the number of places, the
 * rewrite is one head with the values in, and a tunnel head's rewrite
 * parses again as a tunnel head to the same host.
 */
#include "fuzz_common.h"
#include <ctype.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "ci_egress_content.h"
#include "ci_egress_parse.h"

static char *exact_copy(const uint8_t *data, size_t n)
{
    char *c = malloc(n ? n : 1);
    if (n)
        memcpy(c, data, n);
    return c;
}

static void check_name(apr_pool_t *p, const char *name)
{
    size_t n = strlen(name), i;
    const char *again;
    const char *self[1], *star[1];
    FUZZ_CHECK(n > 0 && n <= 253, "name of %zu bytes", n);
    for (i = 0; i < n; i++)
        FUZZ_CHECK((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
                   name[i] == '-' || name[i] == '.', "byte %zu of a name: 0x%02x", i,
                   (unsigned char)name[i]);
    FUZZ_CHECK(ci_egress_host_normalise(p, name, n, &again) == CI_EGRESS_HOST_NAME &&
               !strcmp(again, name), "normalising twice differs");
    self[0] = name;
    star[0] = apr_pstrcat(p, "*.", name, NULL);
    FUZZ_CHECK(ci_egress_allowed(self, 1, name), "a name does not match itself");
    FUZZ_CHECK(!ci_egress_allowed(star, 1, name), "*.name matches name");
    FUZZ_CHECK(ci_egress_allowed(star, 1, apr_pstrcat(p, "x.", name, NULL)),
               "*.name does not match x.name");
}

static void check_host(apr_pool_t *p, const uint8_t *data, size_t size)
{
    char *h = exact_copy(data, size);
    const char *out = NULL;
    ci_egress_host_kind k = ci_egress_host_normalise(p, h, size, &out);
    if (k == CI_EGRESS_HOST_NAME)
        check_name(p, out);
    else if (k == CI_EGRESS_HOST_IP)
        FUZZ_CHECK(strlen(out) == size && !memcmp(out, data, size),
                   "an IP literal is not named as sent");
    free(h);
}

static void check_allowlist(apr_pool_t *p, const uint8_t *data, size_t size)
{
    const uint8_t *lf = memchr(data, '\n', size);
    char *list, *host, *upper, *tok, *save = NULL;
    const char *entries[64];
    int n = 0, a, b;
    size_t i, hn;
    if (!lf)
        return;
    list = apr_pstrmemdup(p, (const char *)data, (size_t)(lf - data));
    hn = size - (size_t)(lf + 1 - data);
    host = malloc(hn + 1);
    memcpy(host, lf + 1, hn);
    host[hn] = '\0';
    for (tok = strtok_r(list, ",", &save); tok && n < 64; tok = strtok_r(NULL, ",", &save))
        entries[n++] = tok;
    upper = apr_pstrdup(p, host);
    for (i = 0; upper[i]; i++)
        if (upper[i] >= 'a' && upper[i] <= 'z')
            upper[i] = (char)(upper[i] - 'a' + 'A');
    a = ci_egress_allowed(entries, n, host);
    b = ci_egress_allowed(entries, n, upper);
    FUZZ_CHECK(a == b, "matching depends on case");
    free(host);
}

/* How many lines of HEAD after its first start with PREFIX (any case). */
static int count_lines(const char *head, const char *prefix)
{
    const char *l = strstr(head, "\r\n");
    size_t n = strlen(prefix);
    int count = 0;
    while (l && l[2]) {
        l += 2;
        count += !strncasecmp(l, prefix, n);
        l = strstr(l, "\r\n");
    }
    return count;
}

/* The rewrite of REQ, and its absolute form parsed and rewritten again. */
static void check_rewrite(apr_pool_t *p, const ci_egress_request *req)
{
    apr_size_t len, len2;
    char *head = ci_egress_rewrite(p, req, &len), *absolute, *again;
    const char *target, *host_line;
    ci_egress_request req2;
    static const char *const banned[] = { "Proxy-", "Keep-Alive:", "TE:", "Trailer:",
                                          "Upgrade:" };
    size_t i;

    FUZZ_CHECK(len == strlen(head), "length differs");
    FUZZ_CHECK(ci_egress_head_length(head, len) == len || len > CI_EGRESS_HEAD_MAX,
               "the rewrite is not one head");
    FUZZ_CHECK(len >= 21 && !strcmp(head + len - 21, "Connection: close\r\n\r\n"),
               "no Connection: close at the end");
    FUZZ_CHECK(count_lines(head, "Connection:") == 1, "not one Connection line");
    host_line = strstr(head, "\r\nHost: ");
    FUZZ_CHECK(host_line && !strstr(host_line + 1, "\r\nHost:"), "not one Host line");
    for (i = 0; i < sizeof(banned) / sizeof(banned[0]); i++)
        FUZZ_CHECK(count_lines(head, banned[i]) == 0, "%s kept", banned[i]);
    /* Back to absolute form: the same request. */
    target = strchr(head, ' ') + 1;
    if (req->headers->nelts > CI_EGRESS_HEADERS_MAX - 2)
        return;     /* the rewrite's Host and Connection would be too many */
    absolute = apr_psprintf(p, "%s http://%s:%d%s", req->method, req->host, req->port,
                            target);
    if (strlen(absolute) > CI_EGRESS_HEAD_MAX)
        return;
    FUZZ_CHECK(ci_egress_parse_head(p, absolute, strlen(absolute), &req2) == 0,
               "the rewrite in absolute form does not parse:\n%s", absolute);
    again = ci_egress_rewrite(p, &req2, &len2);
    FUZZ_CHECK(len2 == len && !memcmp(again, head, len), "rewriting twice differs");
}

static void check_head(apr_pool_t *p, const uint8_t *data, size_t size)
{
    char *buf = exact_copy(data, size);
    apr_size_t n = ci_egress_head_length(buf, size);
    ci_egress_request req;
    FUZZ_CHECK(n <= size && n <= CI_EGRESS_HEAD_MAX, "head of %zu bytes", (size_t)n);
    if (n == 0) {
        free(buf);
        return;
    }
    if (ci_egress_parse_head(p, buf, n, &req) == 0) {
        FUZZ_CHECK(req.port >= 1 && req.port <= 65535, "port %d", req.port);
        FUZZ_CHECK(req.host && *req.host, "no host");
        if (!req.host_is_ip)
            check_name(p, req.host);
        if (!req.is_connect) {
            FUZZ_CHECK(req.path[0] == '/', "path %s", req.path);
            check_rewrite(p, &req);
        }
    }
    free(buf);
}

/* Placeholders in upper case, values without: a placeholder found after
 * injection was left, not made by a value. */
static const ci_egress_secret fuzz_secrets[] = {
    { "api.example.com", "PHA", "v a/l+u%e" },
    { "*.example.com", "PHAB", "longer value, with \t tab" },
    { "other.example.org", "PHC", "c" },
};

/* Whether S holds a placeholder of MINE (the host's secrets). */
static int holds_placeholder(const apr_array_header_t *mine, const char *s)
{
    int i;
    for (i = 0; i < mine->nelts; i++)
        if (strstr(s, APR_ARRAY_IDX(mine, i, const ci_egress_secret *)->placeholder))
            return 1;
    return 0;
}

/* REQ with its host's secrets put in: checked, and rewritten (*LEN), or
 * NULL when refused as too long. */
static char *check_inject(apr_pool_t *p, ci_egress_request *req, apr_size_t *len)
{
    apr_array_header_t *mine = ci_egress_secrets_for(
        p, fuzz_secrets, (int)(sizeof(fuzz_secrets) / sizeof(fuzz_secrets[0])), req->host);
    int n = ci_egress_inject(p, req, mine), i;
    char *head;
    FUZZ_CHECK(n >= -1, "inject returned %d", n);
    if (n < 0)
        return NULL;
    FUZZ_CHECK(mine->nelts > 0 || n == 0, "%d replaced without a secret", n);
    FUZZ_CHECK(!strchr(req->path, '?') || !holds_placeholder(mine, strchr(req->path, '?')),
               "a placeholder left in the query of %s", req->path);
    for (i = 0; i < req->headers->nelts; i++)
        FUZZ_CHECK(!holds_placeholder(mine,
                                      APR_ARRAY_IDX(req->headers, i, ci_egress_header).value),
                   "a placeholder left in a header value");
    head = ci_egress_rewrite(p, req, len);
    FUZZ_CHECK(*len == strlen(head), "length differs");
    FUZZ_CHECK(ci_egress_head_length(head, *len) == *len || *len > CI_EGRESS_HEAD_MAX,
               "the injected head is not one head");
    FUZZ_CHECK(*len <= 2 * CI_EGRESS_HEAD_MAX + CI_EGRESS_INJECT_GROWTH_MAX,
               "the injected head is %zu bytes", (size_t)*len);
    return head;
}

static void check_secrets(apr_pool_t *p, const uint8_t *data, size_t size)
{
    char *buf = exact_copy(data, size);
    apr_size_t n = ci_egress_head_length(buf, size), len;
    ci_egress_request req, again;
    char *head;
    if (n && ci_egress_parse_head(p, buf, n, &req) == 0 && !req.is_connect)
        (void)check_inject(p, &req, &len);
    if (n && ci_egress_parse_tunnel_head(p, buf, n, "api.example.com", 443, 1, &req) == 0) {
        FUZZ_CHECK(!strcmp(req.host, "api.example.com") && req.port == 443, "tunnel host");
        FUZZ_CHECK(req.path[0] == '/' && !req.is_connect, "tunnel target %s", req.path);
        head = check_inject(p, &req, &len);
        if (head && len <= CI_EGRESS_HEAD_MAX && req.headers->nelts <= CI_EGRESS_HEADERS_MAX - 2)
            FUZZ_CHECK(ci_egress_parse_tunnel_head(p, head, len, "api.example.com", 443, 1,
                                                   &again) == 0,
                       "the injected tunnel head does not parse:\n%s", head);
    }
    free(buf);
}

/* The input as a tunnel's first bytes: a ClientHello's server name is a
 * normalised name; a prefix of what is bad is never judged good. */
static void check_client_hello(apr_pool_t *p, const uint8_t *data, size_t size)
{
    const char *name = NULL;
    ci_egress_hello_status st = ci_egress_hello_sni(p, data, size, &name), half;
    FUZZ_CHECK(st >= CI_EGRESS_HELLO_BAD && st <= CI_EGRESS_HELLO_NO_SNI, "status %d", st);
    if (st == CI_EGRESS_HELLO_SNI)
        check_name(p, name);
    if (size > 1) {
        half = ci_egress_hello_sni(p, data, size / 2, &name);
        FUZZ_CHECK(!(half == CI_EGRESS_HELLO_BAD && st != CI_EGRESS_HELLO_BAD),
                   "a prefix is bad, the whole is not");
    }
}

/* What the answer filter gives for DATA, fed in pieces of at most STEP
 * bytes, into *LEN; the filter's result in *RC. */
static char *filtered(apr_pool_t *p, const uint8_t *data, size_t size, size_t step,
                      apr_size_t *len, int *rc)
{
    ci_egress_answer_filter *f = ci_egress_answer_filter_make(
        p, ci_egress_secrets_for(p, fuzz_secrets, 3, "api.example.com"), "api.example.com", 0);
    apr_size_t cap = 4 * size + 4096;
    char *all = apr_palloc(p, cap);
    size_t at = 0;
    const char *o;
    apr_size_t on;
    *len = 0;
    for (;;) {
        size_t n = size - at < step ? size - at : step;
        *rc = ci_egress_answer_filter_feed(f, size ? (const char *)data + at : "", n,
                                           at + n == size, &o, &on);
        FUZZ_CHECK(*len + on <= cap, "the answer grew to %zu", (size_t)(*len + on));
        if (on)
            memcpy(all + *len, o, on);
        *len += on;
        at += n;
        if (*rc < 0 || at == size)
            break;
    }
    return all;
}

/* The input as an origin's answer: no value of the host comes out, fed
 * whole or in pieces; both decide alike, and give the same bytes unless a
 * body is chunked (its chunks follow the pieces). */
static void check_answer(apr_pool_t *p, const uint8_t *data, size_t size)
{
    apr_size_t n1, n2;
    int rc1, rc2;
    char *a = filtered(p, data, size, size ? size : 1, &n1, &rc1);
    char *b = filtered(p, data, size, size ? 1 + data[0] % 13 : 1, &n2, &rc2);
    char *lower;
    size_t i;
    for (i = 0; i < 2; i++) {       /* the two secrets api.example.com has */
        const char *v = fuzz_secrets[i].value;
        FUZZ_CHECK(!memmem(a, n1, v, strlen(v)) && !memmem(b, n2, v, strlen(v)),
                   "a value came out");
    }
    FUZZ_CHECK(rc1 == rc2, "whole and in pieces decide differently");
    lower = apr_pmemdup(p, data, size ? size : 1);
    for (i = 0; i < size; i++)
        lower[i] = (char)tolower((unsigned char)lower[i]);
    if (rc1 == 0 && !memmem(lower, size, "chunked", 7))
        FUZZ_CHECK(n1 == n2 && !memcmp(a, b, n1), "whole and in pieces differ");
}

/* The input as a request body after a tunnel head that frames it: never
 * more taken than given. */
static void check_body(apr_pool_t *p, const uint8_t *data, size_t size)
{
    static const char *const heads[] = {
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n" };
    size_t i;
    for (i = 0; i < 2; i++) {
        ci_egress_request req;
        ci_egress_body b;
        apr_ssize_t took;
        FUZZ_CHECK(ci_egress_parse_tunnel_head(p, heads[i], strlen(heads[i]), "a.example.com",
                                               443, 1, &req) == 0 &&
                   ci_egress_body_start(&req, &b) == 0, "a framing head");
        took = ci_egress_body_take(&b, (const char *)data, size);
        FUZZ_CHECK(took >= -1 && took <= (apr_ssize_t)size, "took %ld", (long)took);
        FUZZ_CHECK(took < 0 || b.done || took == (apr_ssize_t)size,
                   "stopped before the end without being done");
    }
}

static void check_addresses(const uint8_t *data, size_t size)
{
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
    ci_egress_addr_class c4;
    if (size < 4)
        return;
    memset(&in, 0, sizeof(in));
    in.sin_family = AF_INET;
    memcpy(&in.sin_addr, data, 4);
    c4 = ci_egress_classify((struct sockaddr *)&in);
    FUZZ_CHECK(ci_egress_class_name(c4) != NULL, "no class name");
    memset(&in6, 0, sizeof(in6));
    in6.sin6_family = AF_INET6;
    in6.sin6_addr.s6_addr[10] = 0xff;
    in6.sin6_addr.s6_addr[11] = 0xff;
    memcpy(in6.sin6_addr.s6_addr + 12, data, 4);
    FUZZ_CHECK(ci_egress_classify((struct sockaddr *)&in6) == c4, "mapped class differs");
    in6.sin6_addr.s6_addr[1] = 0x64;
    in6.sin6_addr.s6_addr[2] = 0xff;
    in6.sin6_addr.s6_addr[3] = 0x9b;
    in6.sin6_addr.s6_addr[10] = 0;
    in6.sin6_addr.s6_addr[11] = 0;
    FUZZ_CHECK(ci_egress_classify((struct sockaddr *)&in6) == c4, "NAT64 class differs");
    if (size >= 16) {
        memcpy(in6.sin6_addr.s6_addr, data, 16);
        FUZZ_CHECK(ci_egress_class_name(ci_egress_classify((struct sockaddr *)&in6)) != NULL,
                   "no class name");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    const char *h = NULL;
    int port = 0;
    check_head(p, data, size);
    check_secrets(p, data, size);
    check_client_hello(p, data, size);
    check_answer(p, data, size);
    check_body(p, data, size);
    check_host(p, data, size);
    check_allowlist(p, data, size);
    check_addresses(data, size);
    if (!memchr(data, '\0', size)) {
        char *url = apr_pstrmemdup(p, (const char *)data, size);
        if (ci_egress_parse_proxy(p, url, &h, &port) == 0)
            FUZZ_CHECK(h && *h && port >= 1 && port <= 65535, "proxy %s:%d", h, port);
    }
    fuzz_pool_destroy(p);
    return 0;
}

/*
 * test_egress_parse.c - the egress proxy's pure decisions
 * (mod_code_interpreter/egress/ci_egress_parse.c): request heads admitted
 * and refused, host names and IP literals, allowlist matching, the class
 * of every kind of address, the head an origin gets, the answers' bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_egress_content.h"
#include "ci_egress_parse.h"
#include "ci_secret_value.h"
#include "unit_pool.h"

/* ---- heads ----------------------------------------------------------------- */

static int parse(apr_pool_t *p, const char *head, ci_egress_request *req)
{
    return ci_egress_parse_head(p, head, strlen(head), req);
}

static void assert_malformed(apr_pool_t *p, const char *head)
{
    ci_egress_request req;
    if (parse(p, head, &req) != -1) {
        print_error("admitted: %s\n", head);
        fail();
    }
}

static void test_connect_is_admitted(void **state)
{
    apr_pool_t *p = *state;
    ci_egress_request req;
    assert_int_equal(parse(p, "CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n"
                              "User-Agent: pip\r\n\r\n", &req), 0);
    assert_true(req.is_connect);
    assert_string_equal(req.method, "CONNECT");
    assert_string_equal(req.host, "pypi.org");
    assert_int_equal(req.port, 443);
    assert_false(req.host_is_ip);
    assert_string_equal(req.version, "HTTP/1.1");
    assert_int_equal(req.headers->nelts, 2);
    assert_string_equal(APR_ARRAY_IDX(req.headers, 1, ci_egress_header).name, "User-Agent");
    assert_string_equal(APR_ARRAY_IDX(req.headers, 1, ci_egress_header).value, "pip");
}

static void test_absolute_form_is_admitted(void **state)
{
    apr_pool_t *p = *state;
    ci_egress_request req;
    assert_int_equal(parse(p, "GET HTTP://Example.COM./a/b?c=d HTTP/1.0\n"
                              "Accept:   */*  \n\n", &req), 0);
    assert_false(req.is_connect);
    assert_string_equal(req.method, "GET");
    assert_string_equal(req.host, "example.com");
    assert_int_equal(req.port, 80);
    assert_string_equal(req.path, "/a/b?c=d");
    assert_string_equal(req.version, "HTTP/1.0");
    assert_string_equal(APR_ARRAY_IDX(req.headers, 0, ci_egress_header).value, "*/*");

    assert_int_equal(parse(p, "POST http://example.com:8080 HTTP/1.1\r\n\r\n", &req), 0);
    assert_int_equal(req.port, 8080);
    assert_string_equal(req.path, "/");
    assert_int_equal(parse(p, "GET http://example.com?q HTTP/1.1\r\n\r\n", &req), 0);
    assert_string_equal(req.path, "/?q");
    /* The Host header may name the URI's host, in any case, with the port. */
    assert_int_equal(parse(p, "GET http://example.com/ HTTP/1.1\r\nHost: EXAMPLE.com:80\r\n"
                              "\r\n", &req), 0);
    assert_int_equal(parse(p, "GET http://example.com:443/ HTTP/1.1\r\n"
                              "Host: example.com:443\r\n\r\n", &req), 0);
}

static void test_malformed_heads(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bad[] = {
        "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",            /* origin form */
        "GET https://example.com/ HTTP/1.1\r\n\r\n",              /* https absolute */
        "GET ftp://example.com/ HTTP/1.1\r\n\r\n",
        "GET example.com:80 HTTP/1.1\r\n\r\n",                    /* authority, not CONNECT */
        "CONNECT http://example.com/ HTTP/1.1\r\n\r\n",
        "CONNECT example.com HTTP/1.1\r\n\r\n",                   /* no port */
        "CONNECT example.com: HTTP/1.1\r\n\r\n",
        "CONNECT example.com:0 HTTP/1.1\r\n\r\n",
        "CONNECT example.com:65536 HTTP/1.1\r\n\r\n",
        "CONNECT example.com:44x HTTP/1.1\r\n\r\n",
        "CONNECT user@example.com:443 HTTP/1.1\r\n\r\n",
        "GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n",
        "GET http://example.com/#frag HTTP/1.1\r\n\r\n",
        "GET http:/// HTTP/1.1\r\n\r\n",
        "GET http://exa_mple.com/ HTTP/1.1\r\n\r\n",
        "GET http://-example.com/ HTTP/1.1\r\n\r\n",
        "GET http://a..b/ HTTP/1.1\r\n\r\n",
        "GET http://caf\xc3\xa9.fr/ HTTP/1.1\r\n\r\n",              /* not punycode */
        "GET http://[::1/ HTTP/1.1\r\n\r\n",
        "GET http://[fe80::1%25eth0]/ HTTP/1.1\r\n\r\n",
        "GET http://example.com/ HTTP/2.0\r\n\r\n",
        "GET http://example.com/ HTTP/1.1 \r\n\r\n",
        "GET  http://example.com/ HTTP/1.1\r\n\r\n",
        "G(T http://example.com/ HTTP/1.1\r\n\r\n",
        "GET http://example.com/a b HTTP/1.1\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nHost : example.com\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",   /* obs-fold */
        "GET http://example.com/ HTTP/1.1\r\nX-A: a\rb\r\n\r\n",           /* bare CR */
        "GET http://example.com/ HTTP/1.1\r\nX-A: a\x01\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nNoColon\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nHost: other.com\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nHost: example.com:81\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nHost: example.com\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\nHost:\r\n\r\n",
        "\r\nGET http://example.com/ HTTP/1.1\r\n\r\n",
        "GET http://example.com/ HTTP/1.1\r\n",                   /* no blank line */
        "GET http://example.com/ HTTP/1.1\r\n\r\nX",              /* more than a head */
        "",
    };
    apr_size_t i;
    ci_egress_request req;
    char *with_nul;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_malformed(p, bad[i]);
    with_nul = apr_pstrdup(p, "GET http://example.com/ HTTP/1.1\r\nX: a\r\n\r\n");
    with_nul[38] = '\0';
    assert_int_equal(ci_egress_parse_head(p, with_nul, 42, &req), -1);
}

static void test_head_length_and_bounds(void **state)
{
    apr_pool_t *p = *state;
    const char *crlf = "GET http://a.com/ HTTP/1.1\r\nA: b\r\n\r\nBODY";
    const char *lf = "GET http://a.com/ HTTP/1.1\nA: b\n\nBODY";
    char *big;
    ci_egress_request req;
    apr_size_t n;

    assert_int_equal(ci_egress_head_length(crlf, strlen(crlf)), strlen(crlf) - 4);
    assert_int_equal(ci_egress_head_length(lf, strlen(lf)), strlen(lf) - 4);
    assert_int_equal(ci_egress_head_length(crlf, 20), 0);
    assert_int_equal(ci_egress_head_length("\r\n", 2), 2);
    /* The most headers admitted, and one more. */
    big = apr_pstrdup(p, "GET http://a.com/ HTTP/1.1\r\n");
    for (n = 0; n < CI_EGRESS_HEADERS_MAX; n++)
        big = apr_pstrcat(p, big, "X: y\r\n", NULL);
    assert_int_equal(parse(p, apr_pstrcat(p, big, "\r\n", NULL), &req), 0);
    assert_malformed(p, apr_pstrcat(p, big, "X: y\r\n\r\n", NULL));
    /* Longer than 16 KiB: refused, and never a head. */
    big = apr_pstrcat(p, "GET http://a.com/ HTTP/1.1\r\nX: ",
                      apr_psprintf(p, "%0*d", CI_EGRESS_HEAD_MAX, 0), "\r\n\r\n", NULL);
    assert_int_equal(ci_egress_head_length(big, strlen(big)), 0);
    assert_int_equal(ci_egress_parse_head(p, big, strlen(big), &req), -1);
}

/* ---- hosts ----------------------------------------------------------------- */

static ci_egress_host_kind host(apr_pool_t *p, const char *in, const char **out)
{
    return ci_egress_host_normalise(p, in, strlen(in), out);
}

static void test_host_names_are_normalised(void **state)
{
    apr_pool_t *p = *state;
    const char *out;
    char label63[64], label64[65], *long_name;
    int i;

    assert_int_equal(host(p, "PyPI.Org.", &out), CI_EGRESS_HOST_NAME);
    assert_string_equal(out, "pypi.org");
    assert_int_equal(host(p, "xn--caf-dma.fr", &out), CI_EGRESS_HOST_NAME);
    assert_string_equal(out, "xn--caf-dma.fr");
    assert_int_equal(host(p, "localhost", &out), CI_EGRESS_HOST_NAME);
    assert_int_equal(host(p, "a-b.c1", &out), CI_EGRESS_HOST_NAME);
    assert_int_equal(host(p, "0x7f.example", &out), CI_EGRESS_HOST_NAME);

    memset(label63, 'a', 63);
    label63[63] = '\0';
    memset(label64, 'a', 64);
    label64[64] = '\0';
    assert_int_equal(host(p, apr_pstrcat(p, label63, ".com", NULL), &out),
                     CI_EGRESS_HOST_NAME);
    assert_int_equal(host(p, apr_pstrcat(p, label64, ".com", NULL), &out),
                     CI_EGRESS_HOST_BAD);
    /* 253 in all is the most. */
    long_name = apr_pstrcat(p, label63, ".", label63, ".", label63, ".", NULL);
    long_name = apr_pstrcat(p, long_name, apr_pstrndup(p, label63, 61), NULL);
    assert_int_equal(strlen(long_name), 253);
    assert_int_equal(host(p, long_name, &out), CI_EGRESS_HOST_NAME);
    assert_int_equal(host(p, apr_pstrcat(p, long_name, ".", NULL), &out),
                     CI_EGRESS_HOST_NAME);
    assert_int_equal(host(p, apr_pstrcat(p, long_name, "a", NULL), &out),
                     CI_EGRESS_HOST_BAD);

    {
        static const char *const bad[] = { "", ".", "a..b", ".a", "a.-b", "a-.b", "a_b.c",
                                           "caf\xc3\xa9.fr", "a b", "a\tb", "[", "[]",
                                           "[::1", "[nope]", "a.b..", "a:b", "@x" };
        for (i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++)
            if (host(p, bad[i], &out) != CI_EGRESS_HOST_BAD) {
                print_error("admitted host: %s\n", bad[i]);
                fail();
            }
    }
}

static void test_ip_literals_in_every_form(void **state)
{
    apr_pool_t *p = *state;
    static const char *const ips[] = { "127.0.0.1", "2130706433", "0x7f.1", "0x7F000001",
                                       "0177.0.0.1", "127.1", "10.0.0.1.", "169.254.169.254",
                                       "[::1]", "[::ffff:127.0.0.1]", "[2001:DB8::1]",
                                       "1.2.3.4.5", "example.123" };
    const char *out;
    int i;
    for (i = 0; i < (int)(sizeof(ips) / sizeof(ips[0])); i++) {
        if (host(p, ips[i], &out) != CI_EGRESS_HOST_IP) {
            print_error("not an IP literal: %s\n", ips[i]);
            fail();
        }
        assert_string_equal(out, ips[i]);   /* named as sent */
    }
}

/* ---- the allowlist --------------------------------------------------------- */

static void test_allowlist_matching(void **state)
{
    static const char *const list[] = { "pypi.org", "*.pythonhosted.org", "Example.COM.",
                                        "*.", "*", "" };
    int n = (int)(sizeof(list) / sizeof(list[0]));
    (void)state;
    assert_true(ci_egress_allowed(list, n, "pypi.org"));
    assert_true(ci_egress_allowed(list, n, "PyPI.org"));
    assert_true(ci_egress_allowed(list, n, "pypi.org."));
    assert_false(ci_egress_allowed(list, n, "www.pypi.org"));
    assert_false(ci_egress_allowed(list, n, "xpypi.org"));
    assert_true(ci_egress_allowed(list, n, "files.pythonhosted.org"));
    assert_true(ci_egress_allowed(list, n, "a.b.c.PythonHosted.org"));
    /* "*." is any subdomain, never the suffix itself. */
    assert_false(ci_egress_allowed(list, n, "pythonhosted.org"));
    assert_false(ci_egress_allowed(list, n, "evilpythonhosted.org"));
    assert_false(ci_egress_allowed(list, n, ".pythonhosted.org"));
    assert_true(ci_egress_allowed(list, n, "example.com"));
    assert_false(ci_egress_allowed(list, n, "other.com"));
    assert_false(ci_egress_allowed(list, n, ""));
    assert_false(ci_egress_allowed(list, 0, "pypi.org"));
}

/* ---- addresses ------------------------------------------------------------- */

static ci_egress_addr_class classify(const char *text)
{
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
    memset(&in, 0, sizeof(in));
    memset(&in6, 0, sizeof(in6));
    if (inet_pton(AF_INET, text, &in.sin_addr) == 1) {
        in.sin_family = AF_INET;
        return ci_egress_classify((struct sockaddr *)&in);
    }
    assert_int_equal(inet_pton(AF_INET6, text, &in6.sin6_addr), 1);
    in6.sin6_family = AF_INET6;
    return ci_egress_classify((struct sockaddr *)&in6);
}

static void test_address_classes(void **state)
{
    static const struct { const char *addr; const char *kind; } cases[] = {
        { "8.8.8.8", "public" }, { "151.101.0.223", "public" },
        { "127.0.0.1", "loopback" }, { "127.255.255.254", "loopback" },
        { "10.0.0.1", "private" }, { "172.16.0.1", "private" },
        { "172.31.255.255", "private" }, { "172.32.0.1", "public" },
        { "192.168.1.1", "private" },
        { "169.254.169.254", "link-local" }, { "169.254.0.1", "link-local" },
        { "100.64.0.1", "shared (CGNAT)" }, { "100.127.255.255", "shared (CGNAT)" },
        { "100.128.0.1", "public" },
        { "224.0.0.1", "multicast" }, { "239.255.255.250", "multicast" },
        { "0.0.0.0", "unspecified" }, { "0.1.2.3", "unspecified" },
        { "240.0.0.1", "reserved" }, { "255.255.255.255", "reserved" },
        { "192.0.2.1", "reserved" }, { "198.18.0.1", "reserved" },
        { "2606:4700::1111", "public" },
        { "::1", "loopback" }, { "::", "unspecified" },
        { "fc00::1", "private" }, { "fd12:3456::1", "private" },
        { "fe80::1", "link-local" }, { "febf::1", "link-local" },
        { "ff02::1", "multicast" },
        { "::ffff:127.0.0.1", "loopback" }, { "::ffff:169.254.169.254", "link-local" },
        { "::ffff:8.8.8.8", "public" },
        { "64:ff9b::a00:1", "private" }, { "64:ff9b::8.8.8.8", "public" },
        { "::10.0.0.1", "private" }, { "::127.0.0.1", "loopback" },
        { "2002:7f00:1::", "loopback" }, { "2002:808:808::1", "public" },
        { "2001:db8::1", "reserved" }, { "100::1", "reserved" },
    };
    int i;
    (void)state;
    for (i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
        const char *got = ci_egress_class_name(classify(cases[i].addr));
        if (strcmp(got, cases[i].kind)) {
            print_error("%s: %s, not %s\n", cases[i].addr, got, cases[i].kind);
            fail();
        }
    }
    {
        struct sockaddr un;
        memset(&un, 0, sizeof(un));
        un.sa_family = AF_UNIX;
        assert_int_equal(ci_egress_classify(&un), CI_EGRESS_RESERVED);
    }
}

/* ---- the head an origin gets ----------------------------------------------- */

static void test_rewrite_for_the_origin(void **state)
{
    apr_pool_t *p = *state;
    ci_egress_request req;
    apr_size_t len;
    char *out;
    assert_int_equal(parse(p, "POST http://Example.com/up?x=1 HTTP/1.1\n"
                              "Host: example.com\n"
                              "Proxy-Authorization: Basic c2VjcmV0\n"
                              "Proxy-Connection: keep-alive\n"
                              "Connection: keep-alive, X-Secret-Hop , Content-Length\n"
                              "Keep-Alive: timeout=5\n"
                              "TE: trailers\n"
                              "Trailer: X-T\n"
                              "Upgrade: websocket\n"
                              "X-Secret-Hop: 1\n"
                              "Content-Length: 3\n"
                              "Accept: */*\n\n", &req), 0);
    out = ci_egress_rewrite(p, &req, &len);
    assert_int_equal(len, strlen(out));
    assert_string_equal(out, "POST /up?x=1 HTTP/1.1\r\n"
                             "Host: example.com\r\n"
                             "Content-Length: 3\r\n"
                             "Accept: */*\r\n"
                             "Connection: close\r\n\r\n");

    assert_int_equal(parse(p, "GET http://example.com:443 HTTP/1.0\r\n\r\n", &req), 0);
    assert_string_equal(ci_egress_rewrite(p, &req, &len),
                        "GET / HTTP/1.0\r\nHost: example.com:443\r\nConnection: close\r\n\r\n");
}

/* ---- answers --------------------------------------------------------------- */

static void test_answers_and_reasons(void **state)
{
    apr_pool_t *p = *state;
    apr_size_t len;
    const char *body = apr_psprintf(p, CI_EGRESS_TXT_NOT_ALLOWED, "evil.com");
    char *r = ci_egress_response(p, CI_EGRESS_STATUS_403, body, &len);
    assert_string_equal(body, "egress refused: evil.com is not on this container's "
                              "allowlist\n");
    assert_string_equal(r, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; "
                           "charset=utf-8\r\nContent-Length: 62\r\nConnection: close\r\n"
                           "\r\negress refused: evil.com is not on this container's "
                           "allowlist\n");
    assert_int_equal(len, strlen(r));
    assert_string_equal(ci_egress_reason(p, body),
                        "evil.com is not on this container's allowlist");
    assert_string_equal(ci_egress_reason(p, CI_EGRESS_TXT_MALFORMED), "malformed request");
    assert_string_equal(apr_psprintf(p, CI_EGRESS_TXT_ADDRESS, "localhost", "127.0.0.1",
                                     "loopback"),
                        "egress refused: localhost resolves to 127.0.0.1, a loopback "
                        "address\n");
    assert_string_equal(apr_psprintf(p, CI_EGRESS_TXT_PORT, "pypi.org", 22),
                        "egress refused: pypi.org:22: only ports 80 and 443 are allowed\n");
}

static void test_site_proxy_url(void **state)
{
    apr_pool_t *p = *state;
    const char *h;
    int port;
    assert_int_equal(ci_egress_parse_proxy(p, "http://proxy.corp:3128", &h, &port), 0);
    assert_string_equal(h, "proxy.corp");
    assert_int_equal(port, 3128);
    assert_int_equal(ci_egress_parse_proxy(p, "http://127.0.0.1:8/", &h, &port), 0);
    assert_string_equal(h, "127.0.0.1");
    assert_int_equal(ci_egress_parse_proxy(p, "http://[::1]:3128", &h, &port), 0);
    assert_string_equal(h, "::1");
    assert_int_equal(ci_egress_parse_proxy(p, "HTTP://proxy", &h, &port), 0);
    assert_int_equal(port, 80);
    assert_int_equal(ci_egress_parse_proxy(p, "https://proxy:1", &h, &port), -1);
    assert_int_equal(ci_egress_parse_proxy(p, "http://proxy:1/x", &h, &port), -1);
    assert_int_equal(ci_egress_parse_proxy(p, "http://u@proxy:1", &h, &port), -1);
    assert_int_equal(ci_egress_parse_proxy(p, "http://", &h, &port), -1);
}

/* The site proxy is asked for the address checked here, by name only when
 * none was (the operator lets it resolve). */
static void test_site_proxy_connect_names_the_address(void **state)
{
    apr_pool_t *p = *state;
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
    struct sockaddr other;
    memset(&v4, 0, sizeof(v4));
    v4.sin_family = AF_INET;
    inet_pton(AF_INET, "93.184.215.14", &v4.sin_addr);
    memset(&v6, 0, sizeof(v6));
    v6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2606:2800:220:1::1", &v6.sin6_addr);
    memset(&other, 0, sizeof(other));
    other.sa_family = AF_UNIX;
    assert_string_equal(ci_egress_site_connect(p, (struct sockaddr *)&v4, "allowed.test", 443),
                        "CONNECT 93.184.215.14:443 HTTP/1.1\r\n"
                        "Host: 93.184.215.14:443\r\n\r\n");
    assert_string_equal(ci_egress_site_connect(p, (struct sockaddr *)&v6, "allowed.test", 80),
                        "CONNECT [2606:2800:220:1::1]:80 HTTP/1.1\r\n"
                        "Host: [2606:2800:220:1::1]:80\r\n\r\n");
    assert_string_equal(ci_egress_site_connect(p, NULL, "unresolvable.test", 443),
                        "CONNECT unresolvable.test:443 HTTP/1.1\r\n"
                        "Host: unresolvable.test:443\r\n\r\n");
    assert_null(ci_egress_site_connect(p, &other, "allowed.test", 443));
}

/* ---- domain secrets -------------------------------------------------------- */

static const ci_egress_secret some_secrets[] = {
    { "api.example.com", "CI_SECRET_aaa", "value-A" },
    { "*.example.org", "CI_SECRET_bbb", "value B/+" },
    { "api.example.com", "CI_SECRET_ccc", "C" },
    { "api.example.com", "CI_SECRET_cccc", "longer-match" },
};
#define NSOME ((int)(sizeof(some_secrets) / sizeof(some_secrets[0])))

static void test_secrets_for_a_host(void **state)
{
    apr_pool_t *p = *state;
    apr_array_header_t *a = ci_egress_secrets_for(p, some_secrets, NSOME, "api.example.com");
    assert_int_equal(a->nelts, 3);
    assert_ptr_equal(APR_ARRAY_IDX(a, 0, const ci_egress_secret *), &some_secrets[0]);
    a = ci_egress_secrets_for(p, some_secrets, NSOME, "deep.x.example.org");
    assert_int_equal(a->nelts, 1);
    assert_ptr_equal(APR_ARRAY_IDX(a, 0, const ci_egress_secret *), &some_secrets[1]);
    /* "*." is any subdomain, not the domain itself; nothing else matches. */
    assert_int_equal(ci_egress_secrets_for(p, some_secrets, NSOME, "example.org")->nelts, 0);
    assert_int_equal(ci_egress_secrets_for(p, some_secrets, NSOME, "x.api.example.com")
                         ->nelts, 0);
    assert_int_equal(ci_egress_secrets_for(p, some_secrets, 0, "api.example.com")->nelts, 0);
}

static void test_secret_validity(void **state)
{
    ci_egress_secret s = { "api.example.com", "CI_SECRET_1", "v" };
    (void)state;
    assert_true(ci_egress_secret_valid(&s));
    s.domain = "*.example.com";
    assert_true(ci_egress_secret_valid(&s));
    s.value = "a\tb";
    assert_true(ci_egress_secret_valid(&s));
    s.value = "a\r\nX-Injected: 1";           /* header injection */
    assert_false(ci_egress_secret_valid(&s));
    s.value = "v";
    s.placeholder = "";
    assert_false(ci_egress_secret_valid(&s));
    s.placeholder = "CI SECRET";
    assert_false(ci_egress_secret_valid(&s));
    s.placeholder = "CI_SECRET_1";
    s.domain = "10.0.0.1";
    assert_false(ci_egress_secret_valid(&s));
    s.domain = "*.";
    assert_false(ci_egress_secret_valid(&s));
    s.domain = "exa mple.com";
    assert_false(ci_egress_secret_valid(&s));
}

/* httpd's request parser and the egress proxy judge a value alike, byte by
 * byte: a value the request admits is one the proxy takes (else the
 * container would be made with no network at all). */
static void test_secret_value_judged_alike(void **state)
{
    ci_egress_secret s = { "api.example.com", "CI_SECRET_1", NULL };
    char value[4] = "a?b";
    char big[CI_MAX_SECRET_VALUE + 2];
    int c;
    (void)state;
    for (c = 1; c < 256; c++) {
        value[1] = (char)c;
        s.value = value;
        assert_int_equal(ci_secret_value_ok(value, 3), ci_egress_secret_valid(&s));
        assert_int_equal(ci_secret_value_ok(value, 3), (c >= 0x20 && c != 0x7f) || c == '\t');
    }
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    s.value = big;
    assert_false(ci_secret_value_ok(big, CI_MAX_SECRET_VALUE + 1));
    assert_false(ci_egress_secret_valid(&s));
    big[CI_MAX_SECRET_VALUE] = '\0';
    assert_true(ci_secret_value_ok(big, CI_MAX_SECRET_VALUE));
    assert_true(ci_egress_secret_valid(&s));
}

static char *inject_rewrite(apr_pool_t *p, const char *head, const char *host, int *count)
{
    ci_egress_request req;
    apr_size_t len;
    assert_int_equal(parse(p, head, &req), 0);
    *count = ci_egress_inject(p, &req, ci_egress_secrets_for(p, some_secrets, NSOME, host));
    return *count < 0 ? NULL : ci_egress_rewrite(p, &req, &len);
}

static void test_inject_replaces_in_headers_and_target(void **state)
{
    apr_pool_t *p = *state;
    int n;
    char *out = inject_rewrite(p, "POST http://api.example.com/x?k=CI_SECRET_aaa HTTP/1.1\r\n"
                                  "Authorization: Bearer CI_SECRET_aaa\r\n"
                                  "X-Two: CI_SECRET_aaa,CI_SECRET_aaaCI_SECRET_aaa\r\n"
                                  "X-Longest: CI_SECRET_cccc CI_SECRET_ccc\r\n"
                                  "X-Other-Domain: CI_SECRET_bbb\r\n"
                                  "CI_SECRET_aaa: names are not touched\r\n"
                                  "Content-Length: 13\r\n\r\n", "api.example.com", &n);
    assert_int_equal(n, 7);
    assert_string_equal(out, "POST /x?k=value-A HTTP/1.1\r\nHost: api.example.com\r\n"
                             "Authorization: Bearer value-A\r\n"
                             "X-Two: value-A,value-Avalue-A\r\n"
                             "X-Longest: longer-match C\r\n"
                             "X-Other-Domain: CI_SECRET_bbb\r\n"
                             "CI_SECRET_aaa: names are not touched\r\n"
                             "Content-Length: 13\r\nConnection: close\r\n\r\n");
    /* In the query a value is percent-encoded; in a header it is as is; the
     * path before the query keeps its placeholder (an origin quotes a path
     * in error pages and redirects). */
    out = inject_rewrite(p, "GET http://a.example.org/CI_SECRET_bbb?q=CI_SECRET_bbb HTTP/1.1\r\n"
                            "X-K: CI_SECRET_bbb\r\n\r\n", "a.example.org", &n);
    assert_int_equal(n, 2);
    assert_string_equal(out, "GET /CI_SECRET_bbb?q=value%20B%2F%2B HTTP/1.1\r\n"
                             "Host: a.example.org\r\nX-K: value B/+\r\n"
                             "Connection: close\r\n\r\n");
    /* Another host: nothing replaced. */
    out = inject_rewrite(p, "GET http://other.com/?k=CI_SECRET_aaa HTTP/1.1\r\n"
                            "X-K: CI_SECRET_aaa\r\n\r\n", "other.com", &n);
    assert_int_equal(n, 0);
    assert_string_equal(out, "GET /?k=CI_SECRET_aaa HTTP/1.1\r\nHost: other.com\r\n"
                             "X-K: CI_SECRET_aaa\r\nConnection: close\r\n\r\n");
}

/* A head may grow past CI_EGRESS_HEAD_MAX with the values in (the bound
 * is on what the sandbox sends), by at most CI_EGRESS_INJECT_GROWTH_MAX:
 * past that it is refused, not cut. */
static void test_inject_growth_is_bounded(void **state)
{
    apr_pool_t *p = *state;
    char *big = apr_palloc(p, 40001);
    ci_egress_secret s = { "api.example.com", "PH", big };
    apr_array_header_t *one;
    ci_egress_request req;
    apr_size_t len;
    memset(big, 'v', 40000);
    big[40000] = '\0';
    one = ci_egress_secrets_for(p, &s, 1, "api.example.com");
    assert_int_equal(parse(p, "GET http://api.example.com/ HTTP/1.1\r\nX-A: PH\r\n\r\n",
                           &req), 0);
    assert_int_equal(ci_egress_inject(p, &req, one), 1);
    ci_egress_rewrite(p, &req, &len);
    assert_true(len > CI_EGRESS_HEAD_MAX);
    assert_true(len < CI_EGRESS_HEAD_MAX + CI_EGRESS_INJECT_GROWTH_MAX);
    assert_int_equal(parse(p, "GET http://api.example.com/ HTTP/1.1\r\nX-A: PH\r\n"
                              "X-B: PH\r\n\r\n", &req), 0);
    assert_int_equal(ci_egress_inject(p, &req, one), -1);
}

static int tunnel(apr_pool_t *p, const char *head, const char *host, int port, int https,
                  ci_egress_request *req)
{
    return ci_egress_parse_tunnel_head(p, head, strlen(head), host, port, https, req);
}

static void test_tunnel_heads(void **state)
{
    apr_pool_t *p = *state;
    ci_egress_request req;
    apr_size_t len;
    static const char *const bad[] = {
        "GET http://api.example.com/ HTTP/1.1\r\n\r\n",          /* absolute form */
        "CONNECT api.example.com:443 HTTP/1.1\r\n\r\n",
        "GET * HTTP/1.1\r\n\r\n",
        "GET /#f HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: api.example.com\r\n\r\n",
        "GET / HTTP/1.1\r\nX-A: 1\r\n\r\nextra",
    };
    size_t i;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(ci_egress_parse_tunnel_head(p, bad[i], strlen(bad[i]),
                                                     "api.example.com", 443, 1, &req), -1);
    /* Another host or port: refused as such (403), not as malformed. */
    assert_int_equal(tunnel(p, "GET / HTTP/1.1\r\nHost: evil.com\r\n\r\n",
                            "api.example.com", 443, 1, &req), CI_EGRESS_OTHER_HOST);
    assert_int_equal(tunnel(p, "GET / HTTP/1.1\r\nHost: api.example.com:444\r\n\r\n",
                            "api.example.com", 443, 1, &req), CI_EGRESS_OTHER_HOST);
    assert_int_equal(tunnel(p, "GET / HTTP/1.1\r\nHost: api.example.com\r\nX: 1\r\n"
                            "Host: evil.com\r\n\r\n", "api.example.com", 443, 1, &req), -1);
    assert_int_equal(tunnel(p, "GET /a?b HTTP/1.1\r\nHost: API.example.com\r\nProxy-X: 1\r\n\r\n",
        "api.example.com", 443, 1, &req), 0);
    assert_string_equal(ci_egress_rewrite(p, &req, &len),
                        "GET /a?b HTTP/1.1\r\nHost: api.example.com\r\n"
                        "Connection: close\r\n\r\n");
    assert_int_equal(tunnel(p, "GET / HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n",
        "api.example.com", 443, 1, &req), 0);
    /* Plain, port 80: no port in Host either. */
    assert_int_equal(tunnel(p, "GET / HTTP/1.0\r\n\r\n",
                                                 "api.example.com", 80, 0, &req), 0);
    assert_string_equal(ci_egress_rewrite(p, &req, &len),
                        "GET / HTTP/1.0\r\nHost: api.example.com\r\n"
                        "Connection: close\r\n\r\n");
}

/* ---- the ClientHello's server name ------------------------------------------ */

/* A ClientHello (TLS 1.2 form) with EXT (EXT_LEN bytes) as its extensions
 * block body (NULL: no extensions block), in one record, into OUT: its
 * length. */
static size_t client_hello(unsigned char *out, const unsigned char *ext, size_t ext_len)
{
    unsigned char body[4096];
    size_t b = 0, n;
    body[b++] = 3;
    body[b++] = 3;
    memset(body + b, 0x11, 32);             /* random */
    b += 32;
    body[b++] = 0;                          /* session id */
    body[b++] = 0;
    body[b++] = 2;
    body[b++] = 0x13;
    body[b++] = 0x01;                       /* one suite */
    body[b++] = 1;
    body[b++] = 0;                          /* null compression */
    if (ext) {
        body[b++] = (unsigned char)(ext_len >> 8);
        body[b++] = (unsigned char)ext_len;
        memcpy(body + b, ext, ext_len);
        b += ext_len;
    }
    n = 0;
    out[n++] = 22;
    out[n++] = 3;
    out[n++] = 1;
    out[n++] = (unsigned char)((b + 4) >> 8);
    out[n++] = (unsigned char)(b + 4);
    out[n++] = 1;
    out[n++] = 0;
    out[n++] = (unsigned char)(b >> 8);
    out[n++] = (unsigned char)b;
    memcpy(out + n, body, b);
    return n + b;
}

/* A server_name extension (type, length, list) naming NAME, into OUT. */
static size_t sni_ext(unsigned char *out, const char *name)
{
    size_t nl = strlen(name), n = 0;
    out[n++] = 0;
    out[n++] = 0;
    out[n++] = (unsigned char)((nl + 5) >> 8);
    out[n++] = (unsigned char)(nl + 5);
    out[n++] = (unsigned char)((nl + 3) >> 8);
    out[n++] = (unsigned char)(nl + 3);
    out[n++] = 0;
    out[n++] = (unsigned char)(nl >> 8);
    out[n++] = (unsigned char)nl;
    memcpy(out + n, name, nl);
    return n + nl;
}

static void test_client_hello_server_name(void **state)
{
    apr_pool_t *p = *state;
    unsigned char ext[600], hello[5000], split[5100];
    const char *name = NULL;
    size_t e, n, i;
    /* another extension first (ALPN-like), then SNI */
    static const unsigned char other[] = { 0, 16, 0, 3, 0, 1, 'h' };
    memcpy(ext, other, sizeof(other));
    e = sizeof(other) + sni_ext(ext + sizeof(other), "API.Example.COM");
    n = client_hello(hello, ext, e);
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_SNI);
    assert_string_equal(name, "api.example.com");
    /* Every prefix: read more. */
    for (i = 0; i < n; i++)
        assert_int_equal(ci_egress_hello_sni(p, hello, i, &name), CI_EGRESS_HELLO_MORE);
    /* Records after it (early data) go on as they are. */
    memcpy(split, hello, n);
    memcpy(split + n, "\x17\x03\x03\x00\x01x", 6);
    assert_int_equal(ci_egress_hello_sni(p, split, n + 6, &name), CI_EGRESS_HELLO_SNI);
    /* The same ClientHello over two records, split after 10 bytes of it. */
    memcpy(split, hello, 5);
    split[3] = 0;
    split[4] = 10;
    memcpy(split + 5, hello + 5, 10);
    split[15] = 22;
    split[16] = 3;
    split[17] = 1;
    split[18] = (unsigned char)((n - 15) >> 8);
    split[19] = (unsigned char)(n - 15);
    memcpy(split + 20, hello + 15, n - 15);
    assert_int_equal(ci_egress_hello_sni(p, split, n + 5, &name), CI_EGRESS_HELLO_SNI);
    assert_string_equal(name, "api.example.com");
    assert_int_equal(ci_egress_hello_sni(p, split, 17, &name), CI_EGRESS_HELLO_MORE);
    /* No SNI: no extensions at all, or others only. */
    n = client_hello(hello, NULL, 0);
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_NO_SNI);
    n = client_hello(hello, other, sizeof(other));
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_NO_SNI);
    /* Not a name, not TLS, two SNI extensions, a length past the end. */
    n = client_hello(hello, ext, sizeof(other) + sni_ext(ext + sizeof(other), "127.0.0.1"));
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_BAD);
    n = client_hello(hello, ext, sizeof(other) + sni_ext(ext + sizeof(other), "a b"));
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_BAD);
    assert_int_equal(ci_egress_hello_sni(p, (const unsigned char *)"GET / HTTP/1.1\r\n", 16,
                                         &name), CI_EGRESS_HELLO_BAD);
    e = sni_ext(ext, "a.example.com");
    e += sni_ext(ext + e, "b.example.com");
    n = client_hello(hello, ext, e);
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_BAD);
    e = sni_ext(ext, "a.example.com");
    ext[3] += 1;                            /* the extension claims a byte more */
    n = client_hello(hello, ext, e);
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_BAD);
    /* A handshake message other than a ClientHello. */
    n = client_hello(hello, NULL, 0);
    hello[5] = 2;
    assert_int_equal(ci_egress_hello_sni(p, hello, n, &name), CI_EGRESS_HELLO_BAD);
}

/* ---- the scanner ------------------------------------------------------------ */

static const ci_egress_secret scrub_secret = { "api.example.com", "PH", "s3cr3t/Value+42" };

static apr_array_header_t *one_secret(apr_pool_t *p)
{
    apr_array_header_t *a = apr_array_make(p, 1, sizeof(const ci_egress_secret *));
    APR_ARRAY_PUSH(a, const ci_egress_secret *) = &scrub_secret;
    return a;
}

/* IN fed to a new scanner in pieces cut at CUTS (ascending, N of them);
 * what comes out, all of it; *COUNT the values masked. */
static char *scrub_in_pieces(apr_pool_t *p, const char *in, const size_t *cuts, int ncuts,
                             int *count)
{
    ci_egress_scrub *s = ci_egress_scrub_make(p, one_secret(p));
    size_t len = strlen(in), from = 0;
    char *all = apr_pcalloc(p, len + 1);
    size_t got = 0;
    const char *o;
    apr_size_t on;
    int i;
    for (i = 0; i <= ncuts; i++) {
        size_t to = i < ncuts ? cuts[i] : len;
        ci_egress_scrub_feed(s, in + from, to - from, &o, &on);
        memcpy(all + got, o, on);
        got += on;
        from = to;
    }
    ci_egress_scrub_flush(s, &o, &on);
    memcpy(all + got, o, on);
    got += on;
    assert_int_equal(got, len);         /* the same length: nothing added or lost */
    *count = ci_egress_scrub_count(s);
    return all;
}

static void test_scrub_masks_every_form_however_split(void **state)
{
    apr_pool_t *p = *state;
    static const char in[] =
        "HTTP/1.1 302 s3cr3t/Value+42\r\nLocation: /x?k=s3cr3t%2FValue%2B42&l=s3cr3t%2fValue%2b42\r\n"
        "\r\nall: %73%33%63%72%33%74%2f%56%61%6c%75%65%2b%34%32, near: s3cr3t/Value+4, "
        "spaced: s3cr3t%2FValue+42 end";
    static const char want[] =
        "HTTP/1.1 302 ***************\r\nLocation: /x?k=*******************&l=*******************\r\n"
        "\r\nall: *********************************************, near: s3cr3t/Value+4, "
        "spaced: *****************" " end";
    size_t i, j, len = strlen(in);
    int count;
    assert_string_equal(scrub_in_pieces(p, in, NULL, 0, &count), want);
    assert_int_equal(count, 5);
    /* Split at every offset, and at every pair of offsets. */
    for (i = 1; i < len; i++) {
        size_t cut[1] = { i };
        assert_string_equal(scrub_in_pieces(p, in, cut, 1, &count), want);
        assert_int_equal(count, 5);
    }
    for (i = 1; i < 60; i++)
        for (j = i; j < len; j += 7) {
            size_t cuts[2] = { i, j };
            assert_string_equal(scrub_in_pieces(p, in, cuts, 2, &count), want);
        }
}

static void test_scrub_holds_back_only_a_possible_value(void **state)
{
    apr_pool_t *p = *state;
    ci_egress_scrub *s = ci_egress_scrub_make(p, one_secret(p));
    const char *o;
    apr_size_t on;
    /* Nothing could start a value: all of it goes at once. */
    ci_egress_scrub_feed(s, "hello world", 11, &o, &on);
    assert_int_equal(on, 11);
    /* A possible start is held until it is decided. */
    ci_egress_scrub_feed(s, "abc s3cr", 8, &o, &on);
    assert_int_equal(on, 4);
    assert_memory_equal(o, "abc ", 4);
    ci_egress_scrub_feed(s, "eam", 3, &o, &on);
    assert_int_equal(on, 7);
    assert_memory_equal(o, "s3cream", 7);
    ci_egress_scrub_flush(s, &o, &on);
    assert_int_equal(on, 0);
    assert_int_equal(ci_egress_scrub_count(s), 0);
}

/* ANSWER through a new answer filter in pieces of STEP bytes: what comes
 * out, and the filter's result. */
static char *answer_through(apr_pool_t *p, const char *answer, size_t step, int head_only,
                            int *rc, int *count)
{
    ci_egress_answer_filter *f = ci_egress_answer_filter_make(p, one_secret(p),
                                                              "api.example.com", head_only);
    size_t len = strlen(answer), at = 0;
    char *all = "";
    const char *o;
    apr_size_t on;
    *rc = 0;
    while (*rc == 0 && at < len) {
        size_t n = len - at < step ? len - at : step;
        *rc = ci_egress_answer_filter_feed(f, answer + at, n, 0, &o, &on);
        all = apr_pstrcat(p, all, apr_pstrmemdup(p, o, on), NULL);
        at += n;
    }
    if (*rc == 0) {
        *rc = ci_egress_answer_filter_feed(f, NULL, 0, 1, &o, &on);
        all = apr_pstrcat(p, all, apr_pstrmemdup(p, o, on), NULL);
    }
    *count = ci_egress_answer_filter_count(f);
    return all;
}

static void test_answer_filter_rechunks_and_refuses_compression(void **state)
{
    apr_pool_t *p = *state;
    static const char chunked[] =
        "HTTP/1.1 100 Continue\r\n\r\n"
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nxx s3\r\n4;ext=1\r\ncr3t\r\n6\r\n/Value\r\n3\r\n+42\r\n0\r\nX-T: 1\r\n\r\n";
    static const char length[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\nxx s3cr3t/Value+42";
    size_t step;
    int rc, count;
    for (step = 1; step <= sizeof(chunked); step++) {
        char *got = answer_through(p, chunked, step, 0, &rc, &count);
        const char *body = strstr(got, "chunked\r\n\r\n");
        assert_int_equal(rc, 0);
        assert_int_equal(count, 1);
        assert_non_null(body);
        assert_null(strstr(got, "s3cr3t"));
        assert_memory_equal(got, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n", 42);
        /* The body's data, as the sandbox decodes it: masked, in chunks. */
        {
            const char *b = body + 11;
            char data[64] = "";
            size_t d = 0;
            for (;;) {
                char *end;
                unsigned long n = strtoul(b, &end, 16);
                assert_memory_equal(end, "\r\n", 2);
                b = end + 2;
                if (!n)
                    break;
                memcpy(data + d, b, n);
                d += n;
                b += n + 2;
            }
            assert_string_equal(data, "xx ***************");
            assert_string_equal(b, "\r\n");
        }
        got = answer_through(p, length, step, 0, &rc, &count);
        assert_string_equal(got, "HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n"
                                 "xx ***************");
    }
    /* Compressed, or a coding other than chunked: a 502 instead. */
    {
        apr_size_t n;
        const char *want = ci_egress_response(p, CI_EGRESS_STATUS_502,
            "egress error: api.example.com answered with a compressed or unframed body, "
            "which cannot be scanned for the domain's secrets\n", &n);
        assert_string_equal(answer_through(p, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
                                              "\r\nxx", 4, 0, &rc, &count), want);
        assert_int_equal(rc, -1);
        assert_string_equal(answer_through(p, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, "
                                              "chunked\r\n\r\n", 4, 0, &rc, &count), want);
        assert_string_equal(answer_through(p, "SSH-2.0-x\r\n\r\n", 4, 0, &rc, &count), want);
        /* identity is no compression */
        assert_string_equal(answer_through(p, "HTTP/1.1 200 OK\r\nContent-Encoding: identity"
                                              "\r\n\r\ns3cr3t/Value+42", 4, 0, &rc, &count),
                            "HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\n\r\n"
                            "***************");
    }
}

static void test_one_request_body_then_nothing(void **state)
{
    apr_pool_t *p = *state;
    ci_egress_request req;
    ci_egress_body b;
    static const char chunked_body[] = "3\r\nabc\r\n0\r\n\r\nGET /second HTTP/1.1\r\n";
    size_t i;
    assert_int_equal(tunnel(p, "POST / HTTP/1.1\r\nContent-Length: 3"
                                                 "\r\n\r\n", "a.example.com", 443, 1, &req), 0);
    assert_int_equal(ci_egress_body_start(&req, &b), 0);
    assert_int_equal(ci_egress_body_take(&b, "ab", 2), 2);
    assert_false(b.done);
    assert_int_equal(ci_egress_body_take(&b, "cGET /x", 7), 1);
    assert_true(b.done);
    assert_int_equal(ci_egress_body_take(&b, "GET /x", 6), 0);
    /* No body: done at once; what follows the head is another request. */
    assert_int_equal(tunnel(p, "GET / HTTP/1.1\r\n\r\n", "a.example.com", 443, 1, &req), 0);
    assert_int_equal(ci_egress_body_start(&req, &b), 0);
    assert_true(b.done);
    /* Chunked, byte by byte: its end found, the next request not taken. */
    assert_int_equal(tunnel(p, "POST / HTTP/1.1\r\nTransfer-Encoding: "
                                                 "Chunked\r\n\r\n", "a.example.com", 443, 1, &req), 0);
    assert_int_equal(ci_egress_body_start(&req, &b), 0);
    for (i = 0; i < 13; i++) {
        assert_false(b.done);
        assert_int_equal(ci_egress_body_take(&b, chunked_body + i, 1), 1);
    }
    assert_true(b.done);
    assert_int_equal(ci_egress_body_take(&b, chunked_body + 13, 5), 0);
    assert_int_equal(ci_egress_body_start(&req, &b), 0);
    assert_int_equal(ci_egress_body_take(&b, chunked_body, sizeof(chunked_body) - 1), 13);
    /* Ambiguous framing: refused. */
    assert_int_equal(tunnel(p, "POST / HTTP/1.1\r\nTransfer-Encoding: "
                                                 "chunked\r\nContent-Length: 3\r\n\r\n", "a.example.com", 443, 1, &req), 0);
    assert_int_equal(ci_egress_body_start(&req, &b), -1);
    assert_int_equal(tunnel(p, "POST / HTTP/1.1\r\nContent-Length: 3\r\n"
                                                 "Content-Length: 3\r\n\r\n", "a.example.com", 443, 1, &req), 0);
    assert_int_equal(ci_egress_body_start(&req, &b), -1);
    /* Accept-Encoding: identity, whatever was asked. */
    assert_int_equal(tunnel(p, "GET / HTTP/1.1\r\nAccept-Encoding: gzip"
                                                 "\r\nX: 1\r\n\r\n", "a.example.com", 443, 1, &req), 0);
    ci_egress_identity_encoding(p, &req);
    {
        apr_size_t len;
        assert_string_equal(ci_egress_rewrite(p, &req, &len),
                            "GET / HTTP/1.1\r\nHost: a.example.com\r\nX: 1\r\n"
                            "Accept-Encoding: identity\r\nConnection: close\r\n\r\n");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_connect_is_admitted),
        TEST(test_absolute_form_is_admitted),
        TEST(test_malformed_heads),
        TEST(test_head_length_and_bounds),
        TEST(test_host_names_are_normalised),
        TEST(test_ip_literals_in_every_form),
        TEST(test_allowlist_matching),
        TEST(test_address_classes),
        TEST(test_rewrite_for_the_origin),
        TEST(test_answers_and_reasons),
        TEST(test_site_proxy_url),
        TEST(test_site_proxy_connect_names_the_address),
        TEST(test_secrets_for_a_host),
        TEST(test_secret_validity),
        TEST(test_secret_value_judged_alike),
        TEST(test_inject_replaces_in_headers_and_target),
        TEST(test_inject_growth_is_bounded),
        TEST(test_tunnel_heads),
        TEST(test_client_hello_server_name),
        TEST(test_scrub_masks_every_form_however_split),
        TEST(test_scrub_holds_back_only_a_possible_value),
        TEST(test_answer_filter_rechunks_and_refuses_compression),
        TEST(test_one_request_body_then_nothing),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("egress_parse", tests, NULL, NULL);
    apr_terminate();
    return rc;
}

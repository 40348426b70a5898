/*
 * test_egress.c - the egress proxy process (mod_code_interpreter/sandbox/
 * ci_egress.c) as the supervisor runs it: started with ci_egress_start,
 * given real listening Unix sockets with ci_egress_add, and asked through
 * them by a client as a sandbox's relay would. Behind it, on loopback, a
 * tiny HTTP origin and a tiny CONNECT site proxy that sends every name it
 * is asked for to that origin (loopback itself is refused to the sandbox,
 * so the allowed paths go through the site proxy, as corporate networks
 * do).
 *
 * Domain secrets: a TLS origin (a certificate for *.tls.test signed by a
 * test origin CA) and an untrusted one (*.untrusted.test, signed by a CA
 * the proxy is not given) sit behind the same site proxy, which routes by
 * name. The sandbox's client trusts the proxy's CA (ci_egress_make_ca).
 *
 * Nothing waits a fixed time to assert: every wait is for a condition (an
 * EOF, lines in the audit file, a process gone) within a generous deadline.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <json-c/json.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "ci_egress.h"
#include "ci_egress_content.h"
#include "ci_egress_parse.h"
#include "ci_log.h"

#define DEADLINE_MS 20000
#define BIG_BODY 1000000
#define BUDGET 200000

/* ---- time and sockets ------------------------------------------------------ */

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Everything FD sends until EOF (or an error, or the deadline: then the
 * test fails), at most MAX bytes kept; *N the count of all. */
static char *read_to_eof(apr_pool_t *p, int fd, size_t max, size_t *n)
{
    char *buf = apr_palloc(p, max + 1);
    long long deadline = now_ms() + DEADLINE_MS;
    char scratch[65536];
    *n = 0;
    for (;;) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        ssize_t r;
        int left = (int)(deadline - now_ms());
        assert_true(left > 0);
        if (poll(&pfd, 1, left) <= 0)
            continue;
        r = recv(fd, scratch, sizeof(scratch), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (*n < max)
            memcpy(buf + *n, scratch, (size_t)r < max - *n ? (size_t)r : max - *n);
        *n += (size_t)r;
    }
    buf[*n < max ? *n : max] = '\0';
    return buf;
}

/* Exactly N bytes from FD. */
static char *read_exactly(apr_pool_t *p, int fd, size_t n)
{
    char *buf = apr_palloc(p, n + 1);
    size_t got = 0;
    long long deadline = now_ms() + DEADLINE_MS;
    while (got < n) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        ssize_t r;
        assert_true(now_ms() < deadline);
        if (poll(&pfd, 1, 200) <= 0)
            continue;
        r = recv(fd, buf + got, n - got, 0);
        assert_true(r > 0);
        got += (size_t)r;
    }
    buf[n] = '\0';
    return buf;
}

static int tcp_listener(int *port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 64), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static int tcp_connect(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((unsigned short)port);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A request head from FD into BUF (at most N - 1 bytes): its length, or -1. */
static int read_head(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n - 1) {
        ssize_t r = recv(fd, buf + got, 1, 0);   /* byte by byte: nothing past the head */
        if (r <= 0)
            return -1;
        got++;
        buf[got] = '\0';
        if (got >= 4 && !memcmp(buf + got - 4, "\r\n\r\n", 4))
            return (int)got;
    }
    return -1;
}

/* ---- the origin and the site proxy ------------------------------------------ */

typedef struct peers {
    int origin_fd, origin_port;
    int tls_fd, tls_port;           /* *.tls.test, signed by the origin CA */
    int bad_fd, bad_port;           /* *.untrusted.test, signed by another CA */
    pthread_t tls_thread, bad_thread;
    int proxy_fd, proxy_port;
    pthread_t origin_thread, proxy_thread;
    pthread_mutex_t lock;
    char origin_head[4096];         /* the last head the origin got */
    char tls_after[4096];           /* what a TLS origin got after that head */
    int tls_closed;                 /* TLS origin connections ended */
    char proxy_line[512];           /* the last CONNECT line the site proxy got */
} peers;

static peers world;

static const char hello_answer[] =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";

/* ---- certificates ------------------------------------------------------------ */

static struct pki {
    ci_egress_ca proxy_ca;          /* the proxy's (the server's) */
    ci_egress_ca origin_ca;         /* what the test's origin is signed by */
    ci_egress_ca other_ca;          /* what the untrusted origin is signed by */
    char origin_ca_file[64];
    SSL_CTX *tls_ctx, *bad_ctx;     /* the origins' servers */
    X509 *tls_leaf;
    apr_pool_t *pool;
} pki;

static X509 *x509_of(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    assert_non_null(x);
    return x;
}

static EVP_PKEY *key_of(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    BIO_free(b);
    assert_non_null(k);
    return k;
}

/* A server context with a leaf for SAN signed by CA. */
static SSL_CTX *origin_server_ctx(const ci_egress_ca *ca, const char *san, X509 **leaf_out)
{
    X509 *issuer = x509_of(ca->cert_pem), *leaf = X509_new();
    EVP_PKEY *ikey = key_of(ca->key_pem), *key = NULL;
    EVP_PKEY_CTX *kc = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, NULL);
    X509V3_CTX v3;
    X509_EXTENSION *ext;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    assert_true(EVP_PKEY_keygen_init(kc) > 0);
    assert_true(EVP_PKEY_CTX_set_ec_paramgen_curve_nid(kc, NID_X9_62_prime256v1) > 0);
    assert_true(EVP_PKEY_keygen(kc, &key) > 0);
    X509_set_version(leaf, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(leaf), 7);
    X509_gmtime_adj(X509_getm_notBefore(leaf), -3600);
    X509_gmtime_adj(X509_getm_notAfter(leaf), 86400);
    X509_set_pubkey(leaf, key);
    X509_set_issuer_name(leaf, X509_get_subject_name(issuer));
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer, leaf, NULL, NULL, 0);
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
    assert_non_null(ext);
    X509_add_ext(leaf, ext, -1);
    X509_EXTENSION_free(ext);
    assert_true(X509_sign(leaf, ikey, EVP_sha256()) > 0);
    assert_int_equal(SSL_CTX_use_certificate(ctx, leaf), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
    if (leaf_out)
        *leaf_out = leaf;
    else
        X509_free(leaf);
    X509_free(issuer);
    EVP_PKEY_free(ikey);
    EVP_PKEY_free(key);
    EVP_PKEY_CTX_free(kc);
    return ctx;
}

/* Before any fork or thread: the three CAs, the origins' certificates, the
 * origin CA's file (what the proxy's policy names as origin_ca). */
static void pki_make(void)
{
    FILE *fp;
    int fd;
    apr_pool_create(&pki.pool, NULL);
    assert_null(ci_egress_make_ca(pki.pool, &pki.proxy_ca));
    assert_null(ci_egress_make_ca(pki.pool, &pki.origin_ca));
    assert_null(ci_egress_make_ca(pki.pool, &pki.other_ca));
    strcpy(pki.origin_ca_file, "/tmp/egress-origin-ca-XXXXXX");
    fd = mkstemp(pki.origin_ca_file);
    assert_true(fd >= 0);
    fp = fdopen(fd, "w");
    fputs(pki.origin_ca.cert_pem, fp);
    fclose(fp);
    pki.tls_ctx = origin_server_ctx(&pki.origin_ca, "DNS:*.tls.test", &pki.tls_leaf);
    pki.bad_ctx = origin_server_ctx(&pki.other_ca, "DNS:*.untrusted.test", NULL);
}

static void pki_free(void)
{
    unlink(pki.origin_ca_file);
    SSL_CTX_free(pki.tls_ctx);
    SSL_CTX_free(pki.bad_ctx);
    X509_free(pki.tls_leaf);
    apr_pool_destroy(pki.pool);
}

/* A client context that trusts CA only, offering ALPN h2 and http/1.1. */
static SSL_CTX *client_ctx(const ci_egress_ca *ca)
{
    static const unsigned char alpn[] = "\x02h2\x08http/1.1";
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    X509 *x = x509_of(ca->cert_pem);
    assert_int_equal(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), x), 1);
    X509_free(x);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    assert_int_equal(SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1), 0);
    return ctx;
}

/* TLS over the established tunnel FD to HOST, verified by CTX's CAs. */
static SSL *tls_connect(SSL_CTX *ctx, int fd, const char *host)
{
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, host);
    SSL_set1_host(ssl, host);
    if (SSL_connect(ssl) != 1) {
        print_error("TLS to %s: verify %ld\n", host, SSL_get_verify_result(ssl));
        ERR_print_errors_fp(stderr);
        fail();
    }
    return ssl;
}

/* TLS over FD to HOST, asking for SNI (NULL: none): the SSL, or NULL when
 * the handshake fails (the proxy closed the tunnel). */
static SSL *tls_try(SSL_CTX *ctx, int fd, const char *sni)
{
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (sni)
        SSL_set_tlsext_host_name(ssl, sni);
    SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
    if (SSL_connect(ssl) != 1) {
        ERR_clear_error();
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

/* Everything SSL sends until its end. */
static char *tls_read_to_eof(apr_pool_t *p, SSL *ssl)
{
    char buf[16384];
    apr_size_t got = 0;
    int n;
    while (got < sizeof(buf) - 1 && (n = SSL_read(ssl, buf + got, (int)(sizeof(buf) - 1 - got))) > 0)
        got += (apr_size_t)n;
    buf[got] = '\0';
    return apr_pstrdup(p, buf);
}

static void *origin_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char head[4096];
    static const char hello[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    if (read_head(fd, head, sizeof(head)) > 0) {
        pthread_mutex_lock(&world.lock);
        strcpy(world.origin_head, head);
        pthread_mutex_unlock(&world.lock);
        if (!strncmp(head, "GET /big ", 9)) {
            static char chunk[10000];
            char top[128];
            int i, n = snprintf(top, sizeof(top), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                                "Connection: close\r\n\r\n", BIG_BODY);
            memset(chunk, 'x', sizeof(chunk));
            if (write_all(fd, top, (size_t)n) == 0)
                for (i = 0; i < BIG_BODY / (int)sizeof(chunk); i++)
                    if (write_all(fd, chunk, sizeof(chunk)))
                        break;
        }
        else {
            (void)write_all(fd, hello, sizeof(hello) - 1);
        }
    }
    close(fd);
    return NULL;
}

#define SECRET_VALUE "s3cr3t/Value+42"
#define SECRET_IN_URL "s3cr3t%2FValue%2B42"
#define SECRET_IN_URL_LOWER "s3cr3t%2fValue%2b42"
#define MASK_VALUE "***************"              /* as long as SECRET_VALUE */
#define MASK_IN_URL "*******************"         /* ... as SECRET_IN_URL */

/* A reflecting origin's answer to HEAD: the value in its status line and
 * headers (literal, percent-encoded in a Location), the head it got as its
 * body in chunks of 5 bytes (a value split across chunks). */
static char *reflection(const char *head)
{
    static char out[16384];
    size_t n = strlen(head), i;
    int o = snprintf(out, sizeof(out), "HTTP/1.1 302 %s\r\nLocation: https://api.tls.test/?k=%s"
                     "\r\nX-Echo: %s\r\nTransfer-Encoding: chunked\r\n\r\n", SECRET_VALUE,
                     SECRET_IN_URL_LOWER, SECRET_VALUE);
    for (i = 0; i < n; i += 5)
        o += snprintf(out + o, sizeof(out) - (size_t)o, "%x\r\n%.*s\r\n",
                      (unsigned)(n - i < 5 ? n - i : 5), (int)(n - i < 5 ? n - i : 5),
                      head + i);
    snprintf(out + o, sizeof(out) - (size_t)o, "0\r\n\r\n");
    return out;
}

static const char gzip_answer[] =
    "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc";

/* The TLS origins: the head recorded, "hello" answered (GET /echo: its
 * reflection; GET /gzip: a compressed answer). */
static void *tls_origin_conn(void *arg)
{
    int fd = (int)(intptr_t)arg & 0xffffff, bad = (int)((intptr_t)arg >> 24);
    SSL *ssl = SSL_new(bad ? pki.bad_ctx : pki.tls_ctx);
    char head[4096];
    size_t got = 0;
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
        while (got < sizeof(head) - 1 && SSL_read(ssl, head + got, 1) == 1) {
            head[++got] = '\0';
            if (got >= 4 && !memcmp(head + got - 4, "\r\n\r\n", 4))
                break;
        }
        head[got] = '\0';
        pthread_mutex_lock(&world.lock);
        strcpy(world.origin_head, head);
        pthread_mutex_unlock(&world.lock);
        if (!strncmp(head, "GET /echo", 9)) {
            const char *r = reflection(head);
            SSL_write(ssl, r, (int)strlen(r));
        }
        else if (!strncmp(head, "GET /gzip", 9)) {
            SSL_write(ssl, gzip_answer, sizeof(gzip_answer) - 1);
        }
        else {
            SSL_write(ssl, hello_answer, sizeof(hello_answer) - 1);
        }
        SSL_shutdown(ssl);
        /* Whatever comes after the head, up to the proxy's close. */
        {
            char after[4096];
            size_t n = 0;
            int r;
            while (n < sizeof(after) - 1 &&
                   (r = SSL_read(ssl, after + n, (int)(sizeof(after) - 1 - n))) > 0)
                n += (size_t)r;
            after[n] = '\0';
            pthread_mutex_lock(&world.lock);
            strcpy(world.tls_after, after);
            world.tls_closed++;
            pthread_mutex_unlock(&world.lock);
        }
    }
    SSL_free(ssl);
    close(fd);
    return NULL;
}

static void *tls_good_conn(void *arg)
{
    return tls_origin_conn(arg);
}

static void *tls_bad_conn(void *arg)
{
    return tls_origin_conn((void *)((intptr_t)arg | ((intptr_t)1 << 24)));
}

/* The port the site proxy sends HEAD's CONNECT to: by the name's end. */
static int route(const char *head)
{
    const char *colon = strchr(head + 8, ':');
    size_t n = colon ? (size_t)(colon - (head + 8)) : 0;
#define ENDS(s) (n > sizeof(s) - 1 && !memcmp(head + 8 + n - (sizeof(s) - 1), s, sizeof(s) - 1))
    if (ENDS(".untrusted.test"))
        return world.bad_port;
    if (ENDS(".tls.test") || ENDS(".wrongname.test"))
        return world.tls_port;
#undef ENDS
    return world.origin_port;
}

/* Both ways between A and B, half-closes passed on, until both are done. */
static void relay_pair(int a, int b)
{
    int open_a = 1, open_b = 1;
    char buf[16384];
    while (open_a || open_b) {
        struct pollfd pfd[2] = { { open_a ? a : -1, POLLIN, 0 }, { open_b ? b : -1, POLLIN, 0 } };
        int i;
        if (poll(pfd, 2, DEADLINE_MS) <= 0)
            return;
        for (i = 0; i < 2; i++) {
            int from = i ? b : a, to = i ? a : b;
            ssize_t r;
            if (!pfd[i].revents)
                continue;
            r = recv(from, buf, sizeof(buf), 0);
            if (r > 0 && write_all(to, buf, (size_t)r) == 0)
                continue;
            shutdown(to, SHUT_WR);
            if (i)
                open_b = 0;
            else
                open_a = 0;
        }
    }
}

static void *proxy_conn(void *arg)
{
    int fd = (int)(intptr_t)arg, origin;
    char head[4096];
    static const char denied[] = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (read_head(fd, head, sizeof(head)) > 0) {
        pthread_mutex_lock(&world.lock);
        snprintf(world.proxy_line, sizeof(world.proxy_line), "%.*s",
                 (int)strcspn(head, "\r"), head);
        pthread_mutex_unlock(&world.lock);
        if (!strncmp(head, "CONNECT deny.", 13) ||
            (origin = tcp_connect(route(head))) < 0) {
            (void)write_all(fd, denied, sizeof(denied) - 1);
        }
        else {
            if (write_all(fd, ok, sizeof(ok) - 1) == 0)
                relay_pair(fd, origin);
            close(origin);
        }
    }
    close(fd);
    return NULL;
}

typedef struct server {
    int fd;
    void *(*conn)(void *);
} server;

static server origin_server, proxy_server, tls_server, bad_server;

static void *accept_loop(void *arg)
{
    server *s = arg;
    for (;;) {
        pthread_t t;
        int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        if (pthread_create(&t, NULL, s->conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

static int tls_listener_start(server *s, int *port, void *(*conn)(void *), pthread_t *t)
{
    s->fd = tcp_listener(port);
    s->conn = conn;
    assert_int_equal(pthread_create(t, NULL, accept_loop, s), 0);
    return s->fd;
}

static void peers_start(void)
{
    memset(world.origin_head, 0, sizeof(world.origin_head));
    memset(world.tls_after, 0, sizeof(world.tls_after));
    world.tls_closed = 0;
    memset(world.proxy_line, 0, sizeof(world.proxy_line));
    world.origin_fd = tcp_listener(&world.origin_port);
    world.proxy_fd = tcp_listener(&world.proxy_port);
    origin_server.fd = world.origin_fd;
    origin_server.conn = origin_conn;
    proxy_server.fd = world.proxy_fd;
    proxy_server.conn = proxy_conn;
    assert_int_equal(pthread_create(&world.origin_thread, NULL, accept_loop,
                                    &origin_server), 0);
    assert_int_equal(pthread_create(&world.proxy_thread, NULL, accept_loop,
                                    &proxy_server), 0);
    world.tls_fd = tls_listener_start(&tls_server, &world.tls_port, tls_good_conn,
                                      &world.tls_thread);
    world.bad_fd = tls_listener_start(&bad_server, &world.bad_port, tls_bad_conn,
                                      &world.bad_thread);
}

/* A listening socket wakes its accept() when shut down. */
static void peers_stop(void)
{
    shutdown(world.origin_fd, SHUT_RDWR);
    shutdown(world.proxy_fd, SHUT_RDWR);
    shutdown(world.tls_fd, SHUT_RDWR);
    shutdown(world.bad_fd, SHUT_RDWR);
    pthread_join(world.origin_thread, NULL);
    pthread_join(world.proxy_thread, NULL);
    pthread_join(world.tls_thread, NULL);
    pthread_join(world.bad_thread, NULL);
    close(world.origin_fd);
    close(world.proxy_fd);
    close(world.tls_fd);
    close(world.bad_fd);
}

/* ---- the proxy under test ------------------------------------------------- */

typedef struct fixture {
    apr_pool_t *pool;
    char dir[64];
    const char *audit;
    const char *errlog;             /* the proxy's stderr */
    pid_t pid;
    int control;
} fixture;

static fixture *start_with(void **state, int max_connections, int proxy_resolves,
                           int max_per_owner)
{
    fixture *f = calloc(1, sizeof(*f));
    ci_egress_limits lim;
    int audit_fd, err_fd, saved_err;
    assert_non_null(f);
    apr_pool_create(&f->pool, NULL);
    strcpy(f->dir, "/tmp/egress-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    f->audit = apr_pstrcat(f->pool, f->dir, "/audit.log", NULL);
    ci_egress_default_limits(&lim);
    lim.max_connections = max_connections;
    lim.max_bytes = BUDGET;
    lim.idle_seconds = 30;
    lim.head_seconds = 1;
    /* The tests' names resolve nowhere: most hand them to the site proxy. */
    lim.proxy_resolves = proxy_resolves;
    lim.max_per_owner = max_per_owner;
    /* the owners' test holds connections that send nothing meanwhile */
    if (max_per_owner)
        lim.head_seconds = 30;
    /* The proxy first: it is forked before this process starts threads. */
    audit_fd = open(f->audit, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    assert_true(audit_fd >= 0);
    f->errlog = apr_pstrcat(f->pool, f->dir, "/stderr.log", NULL);
    err_fd = open(f->errlog, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    assert_true(err_fd >= 0);
    saved_err = dup(2);
    dup2(err_fd, 2);
    f->pid = ci_egress_start(f->pool, &lim, &pki.proxy_ca, audit_fd, &f->control);
    dup2(saved_err, 2);
    close(saved_err);
    close(err_fd);
    close(audit_fd);               /* the proxy has its own copy */
    assert_true(f->pid > 0);
    assert_true(f->control >= 0);
    assert_true(fcntl(f->control, F_GETFD) & FD_CLOEXEC);
    peers_start();
    *state = f;
    return f;
}

static fixture *start(void **state, int max_connections)
{
    return start_with(state, max_connections, 1, 0);
}

/* Three connections per owner; names that do not resolve here refused. */
static int setup_owners_resolving_here(void **state)
{
    start_with(state, 32, 0, 3);
    return 0;
}

static int setup(void **state)
{
    start(state, 32);
    return 0;
}

static int setup_two_connections(void **state)
{
    start(state, 2);
    return 0;
}

/* The proxy is ended by closing its control socket: it must be gone. */
static int teardown(void **state)
{
    fixture *f = *state;
    long long deadline = now_ms() + DEADLINE_MS;
    int status = 0;
    pid_t got = 0;
    if (f->control >= 0)
        close(f->control);
    while (f->pid > 0 && (got = waitpid(f->pid, &status, WNOHANG)) == 0 &&
           now_ms() < deadline)
        poll(NULL, 0, 20);
    if (f->pid > 0 && got == 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, &status, 0);
    }
    peers_stop();
    {
        char *cmd = apr_psprintf(f->pool, "rm -rf '%s'", f->dir);
        (void)!system(cmd);
    }
    apr_pool_destroy(f->pool);
    status = f->pid > 0 && got == 0 ? -1 : 0;
    free(f);
    return status;
}

static const char *policy(fixture *f, const char *container, const char *domains,
                          int with_proxy)
{
    return apr_psprintf(f->pool, "{\"container\": \"%s\", \"tool\": \"python\", "
                        "\"domains\": [%s]%s}", container, domains,
                        with_proxy ? apr_psprintf(f->pool, ", \"proxy\": "
                                                  "\"http://127.0.0.1:%d\"",
                                                  world.proxy_port) : "");
}

/* A listening socket for sandbox KEY, handed to the proxy: its path. */
static const char *add_box(fixture *f, apr_uint32_t key, const char *pol)
{
    struct sockaddr_un sa;
    const char *path = apr_psprintf(f->pool, "%s/s%u", f->dir, (unsigned)key);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 64), 0);
    assert_int_equal(ci_egress_add(f->control, key, fd, pol), 0);
    close(fd);
    return path;
}

static int connect_box(const char *path)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* REQUEST to the box at PATH; the whole answer, up to EOF. */
static char *ask(fixture *f, const char *path, const char *request, size_t *n)
{
    size_t len;
    int fd = connect_box(path);
    char *answer;
    assert_true(fd >= 0);
    assert_int_equal(write_all(fd, request, strlen(request)), 0);
    answer = read_to_eof(f->pool, fd, 2 * BIG_BODY, n ? n : &len);
    close(fd);
    return answer;
}

static void assert_answer(fixture *f, const char *path, const char *request,
                          const char *status_line, const char *body)
{
    apr_size_t want_len;
    size_t got_len;
    const char *want = ci_egress_response(f->pool, status_line, body, &want_len);
    const char *got = ask(f, path, request, &got_len);
    assert_string_equal(got, want);
    assert_int_equal(got_len, want_len);
}

/* A CONNECT tunnel to NAME:443 through the box at PATH, established. */
static int open_tunnel(fixture *f, const char *path, const char *name)
{
    const char *req = apr_psprintf(f->pool, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n",
                                   name, name);
    int fd = connect_box(path);
    assert_true(fd >= 0);
    assert_int_equal(write_all(fd, req, strlen(req)), 0);
    assert_string_equal(read_exactly(f->pool, fd, sizeof(CI_EGRESS_ESTABLISHED) - 1),
                        CI_EGRESS_ESTABLISHED);
    return fd;
}

/* REQUEST sent over TLS (verified against CA) in a tunnel to HOST:443 through
 * the box at PATH: the whole answer. */
static const char *tls_exchange(fixture *f, const char *path, const ci_egress_ca *ca,
                                const char *host, const char *request)
{
    SSL_CTX *ctx = client_ctx(ca);
    int fd = open_tunnel(f, path, host);
    SSL *ssl = tls_connect(ctx, fd, host);
    const char *answer;
    assert_int_equal(SSL_write(ssl, request, (int)strlen(request)), (int)strlen(request));
    answer = tls_read_to_eof(f->pool, ssl);
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
    return answer;
}

/* ---- the tests ---------------------------------------------------------------- */

/* A field of what the fake servers recorded, copied under their lock: an
 * assertion that fails leaves the test by longjmp, and must not leave the
 * lock held (every later test would wait on it forever). */
static const char *world_copy(const char *field)
{
    static char copies[4][4096];
    static int next;
    char *out;
    pthread_mutex_lock(&world.lock);
    out = copies[next++ % 4];
    snprintf(out, sizeof(copies[0]), "%s", field);
    pthread_mutex_unlock(&world.lock);
    return out;
}
#define WORLD(name) world_copy(world.name)

static void test_http_get_through_the_site_proxy(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 1, policy(f, "cntr_1", "\"Allowed.test\"", 1));
    const char *got = ask(f, path, "GET http://allowed.test/hello?x=1 HTTP/1.1\r\n"
                                   "Host: allowed.test\r\n"
                                   "Proxy-Authorization: Basic c2VjcmV0\r\n"
                                   "Proxy-Connection: keep-alive\r\n"
                                   "Accept: */*\r\n\r\n", NULL);
    assert_string_equal(got, hello_answer);
    /* The site proxy was asked for the name; the origin got the rewritten head. */
    assert_string_equal(WORLD(proxy_line), "CONNECT allowed.test:80 HTTP/1.1");
    assert_string_equal(WORLD(origin_head), "GET /hello?x=1 HTTP/1.1\r\nHost: allowed.test\r\n"
                                           "Accept: */*\r\nConnection: close\r\n\r\n");
}

static void test_connect_tunnel_relays_both_ways(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 2, policy(f, "cntr_2", "\"*.tls.test\"", 1));
    static const char get[] = "GET /hello HTTP/1.1\r\nHost: api.tls.test\r\n\r\n";
    assert_string_equal(tls_exchange(f, path, &pki.origin_ca, "api.tls.test", get),
                        hello_answer);
    assert_string_equal(WORLD(proxy_line), "CONNECT api.tls.test:443 HTTP/1.1");
    assert_string_equal(WORLD(origin_head), get);    /* untouched through a tunnel */
}

static void test_refusals_are_exact(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 3, policy(f, "cntr_3", "\"allowed.test\", \"*.wild.test\"",
                                            1));
    assert_answer(f, path, "GET http://evil.test/ HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: evil.test is not on this container's allowlist\n");
    /* "*.wild.test" is not wild.test itself. */
    assert_answer(f, path, "CONNECT wild.test:443 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: wild.test is not on this container's allowlist\n");
    assert_answer(f, path, "CONNECT allowed.test:22 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: allowed.test:22: only ports 80 and 443 are allowed\n");
    /* The port before the allowlist, an IP literal before the port. */
    assert_answer(f, path, "CONNECT evil.test:22 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: evil.test:22: only ports 80 and 443 are allowed\n");
    assert_answer(f, path, "CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: 127.0.0.1 is an IP address; only allowlisted domain "
                  "names are reachable\n");
    assert_answer(f, path, "GET http://2130706433/ HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: 2130706433 is an IP address; only allowlisted domain "
                  "names are reachable\n");
    assert_answer(f, path, "CONNECT [::1]:443 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: [::1] is an IP address; only allowlisted domain "
                  "names are reachable\n");
    assert_answer(f, path, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
                  CI_EGRESS_STATUS_400, "egress error: malformed request\n");
    assert_answer(f, path, "GET https://allowed.test/ HTTP/1.1\r\n\r\n",
                  CI_EGRESS_STATUS_400, "egress error: malformed request\n");
    assert_answer(f, path, "CONNECT deny.wild.test:443 HTTP/1.1\r\n\r\n",
                  CI_EGRESS_STATUS_502,
                  "egress error: the site proxy refused deny.wild.test:443\n");
}

static void test_errors_without_a_site_proxy(void **state)
{
    fixture *f = *state;
    int closed_port, fd = tcp_listener(&closed_port);
    const char *unreachable;
    const char *path = add_box(f, 4, policy(f, "cntr_4", "\"nonexistent.invalid\"", 0));
    close(fd);
    assert_answer(f, path, "CONNECT nonexistent.invalid:443 HTTP/1.1\r\n\r\n",
                  CI_EGRESS_STATUS_502,
                  "egress error: nonexistent.invalid could not be resolved\n");
    /* A site proxy that does not answer. */
    unreachable = add_box(f, 5, apr_psprintf(f->pool, "{\"container\": \"c\", \"tool\": "
                                             "\"t\", \"domains\": [\"allowed.test\"], "
                                             "\"proxy\": \"http://127.0.0.1:%d\"}",
                                             closed_port));
    assert_answer(f, unreachable, "GET http://allowed.test/ HTTP/1.1\r\n\r\n",
                  CI_EGRESS_STATUS_502, "egress error: allowed.test:80 could not be reached\n");
}

/* Containers of one owner share its connections: the owner's fourth is
 * refused, whichever container asks; another owner's goes through. A name
 * that does not resolve here never reaches the site proxy. */
static void test_owners_share_and_names_resolve_here(void **state)
{
    fixture *f = *state;
    const char *allow = "\"allowed.test\"";
    const char *a = add_box(f, 30, apr_psprintf(f->pool, "{\"container\": \"cntr_a\", "
                                                "\"tool\": \"t\", \"owner\": \"o1\", "
                                                "\"domains\": [%s]}", allow));
    const char *b = add_box(f, 31, apr_psprintf(f->pool, "{\"container\": \"cntr_b\", "
                                                "\"tool\": \"t\", \"owner\": \"o1\", "
                                                "\"domains\": [%s]}", allow));
    const char *c = add_box(f, 32, apr_psprintf(f->pool, "{\"container\": \"cntr_c\", "
                                                "\"tool\": \"t\", \"owner\": \"o2\", "
                                                "\"domains\": [%s], \"proxy\": "
                                                "\"http://127.0.0.1:%d\"}", allow,
                                                world.proxy_port));
    const char *d;
    int held[3], i;
    /* held: connections that sent nothing yet (each waits for its head) */
    held[0] = connect_box(a);
    held[1] = connect_box(a);
    held[2] = connect_box(b);
    for (i = 0; i < 3; i++)
        assert_true(held[i] >= 0);
    assert_answer(f, b, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: too many connections from this owner's containers "
                  "(at most 3)\n");
    assert_answer(f, c, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: allowed.test does not resolve on this server, and the "
                  "site proxy is not trusted to resolve it\n");
    /* A sandbox added without an owner (a warm one) claimed by the first:
     * its connections count in that owner's from then on. */
    d = add_box(f, 33, apr_psprintf(f->pool, "{\"container\": \"\", \"tool\": \"t\", "
                                    "\"domains\": [%s]}", allow));
    assert_int_equal(ci_egress_claim(f->control, 33, "cntr_d", "o1"), 0);
    assert_answer(f, d, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: too many connections from this owner's containers "
                  "(at most 3)\n");
    for (i = 0; i < 3; i++)
        close(held[i]);
    assert_string_equal(WORLD(proxy_line), "");
}

static void test_localhost_is_refused_as_loopback(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 6, policy(f, "cntr_6", "\"localhost\"", 1));
    const char *got = ask(f, path, "CONNECT localhost:443 HTTP/1.1\r\n\r\n", NULL);
    apr_size_t n;
    const char *v4 = ci_egress_response(f->pool, CI_EGRESS_STATUS_403,
                                        "egress refused: localhost resolves to 127.0.0.1, "
                                        "a loopback address\n", &n);
    const char *v6 = ci_egress_response(f->pool, CI_EGRESS_STATUS_403,
                                        "egress refused: localhost resolves to ::1, "
                                        "a loopback address\n", &n);
    if (strcmp(got, v4) && strcmp(got, v6)) {
        print_error("got: %s\n", got);
        fail();
    }
    /* Even with a site proxy: a name that resolves here is checked here. */
    assert_string_equal(WORLD(proxy_line), "");
}

static void test_connection_bound(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 7, policy(f, "cntr_7", "\"*.wild.test\"", 1));
    int a = open_tunnel(f, path, "a.wild.test");
    int b = open_tunnel(f, path, "b.wild.test");
    int c;
    assert_answer(f, path, "CONNECT c.wild.test:443 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: too many connections from this container (at most 2)\n");
    close(a);
    close(b);
    /* Once they are gone, a connection is let through again. */
    {
        long long deadline = now_ms() + DEADLINE_MS;
        for (;;) {
            const char *req = "CONNECT c.wild.test:443 HTTP/1.1\r\n\r\n";
            char *got;
            c = connect_box(path);
            assert_true(c >= 0);
            /* Refused at once while the two still count: the write may
             * find the connection closed. */
            if (write_all(c, req, strlen(req)) == 0) {
                got = read_exactly(f->pool, c, 12);
                if (!strcmp(got, "HTTP/1.1 200"))
                    break;
            }
            close(c);
            assert_true(now_ms() < deadline);
            poll(NULL, 0, 20);
        }
        close(c);
    }
}

static void test_slowloris_is_cut(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 8, policy(f, "cntr_8", "\"allowed.test\"", 1));
    int fd = connect_box(path);
    size_t n;
    assert_true(fd >= 0);
    static const char part[] = "GET http://allowed.test/ HTTP/1.1\r\nX-Slow: ";
    assert_int_equal(write_all(fd, part, sizeof(part) - 1), 0);
    read_to_eof(f->pool, fd, 4096, &n);     /* fails past the deadline */
    assert_int_equal(n, 0);
    close(fd);
}

static void test_byte_budget_cuts_and_execution_restores(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 9, policy(f, "cntr_9", "\"allowed.test\"", 1));
    size_t n;
    const char *got;

    ask(f, path, "GET http://allowed.test/big HTTP/1.1\r\n\r\n", &n);
    assert_true(n > 0);
    assert_true(n <= BUDGET);
    assert_true(n < BIG_BODY);
    /* The budget is spent: the next connection is cut before the answer. */
    got = ask(f, path, "GET http://allowed.test/hello HTTP/1.1\r\n\r\n", &n);
    assert_true(strcmp(got, hello_answer) != 0);
    /* A new execution, a new budget. */
    assert_int_equal(ci_egress_execution(f->control, 9), 0);
    got = ask(f, path, "GET http://allowed.test/hello HTTP/1.1\r\n\r\n", &n);
    assert_string_equal(got, hello_answer);
}

static void test_remove_closes_live_connections(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 10, policy(f, "cntr_10", "\"*.wild.test\"", 1));
    int fd = open_tunnel(f, path, "live.wild.test");
    long long deadline;
    size_t n;
    assert_int_equal(ci_egress_remove(f->control, 10), 0);
    read_to_eof(f->pool, fd, 4096, &n);
    assert_int_equal(n, 0);
    close(fd);
    /* And the listener is closed. */
    deadline = now_ms() + DEADLINE_MS;
    while ((fd = connect_box(path)) >= 0) {
        close(fd);
        assert_true(now_ms() < deadline);
        poll(NULL, 0, 20);
    }
    /* Commands for a key that is gone do nothing. */
    assert_int_equal(ci_egress_execution(f->control, 10), 0);
    assert_int_equal(ci_egress_remove(f->control, 10), 0);
}

/* The audit file's lines, once it has N (waiting for them). */
static json_object **audit_lines(fixture *f, int n)
{
    long long deadline = now_ms() + DEADLINE_MS;
    json_object **lines = apr_pcalloc(f->pool, (size_t)(n + 1) * sizeof(*lines));
    for (;;) {
        FILE *fp = fopen(f->audit, "r");
        char buf[4096];
        int count = 0;
        if (fp) {
            while (fgets(buf, sizeof(buf), fp) && count < n + 1)
                count++;
            fclose(fp);
        }
        if (count >= n) {
            assert_int_equal(count, n);
            break;
        }
        assert_true(now_ms() < deadline);
        poll(NULL, 0, 20);
    }
    {
        FILE *fp = fopen(f->audit, "r");
        char buf[4096];
        int i;
        for (i = 0; i < n && fgets(buf, sizeof(buf), fp); i++) {
            assert_int_equal(buf[strlen(buf) - 1], '\n');
            lines[i] = json_tokener_parse(buf);
            assert_non_null(lines[i]);
        }
        fclose(fp);
    }
    return lines;
}

static const char *field(json_object *o, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v)
        return NULL;
    return json_object_get_string(v);
}

static void test_audit_has_a_line_per_connection(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 11, policy(f, "cntr_11", "\"allowed.test\"", 1));
    json_object **lines, *allowed, *refused;
    assert_string_equal(ask(f, path, "GET http://allowed.test/hello HTTP/1.1\r\n\r\n", NULL),
                        hello_answer);
    lines = audit_lines(f, 1);
    allowed = lines[0];
    ask(f, path, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n", NULL);
    lines = audit_lines(f, 2);
    refused = lines[1];

    assert_string_equal(field(allowed, "event"), "egress");
    assert_string_equal(field(allowed, "container_id"), "cntr_11");
    assert_string_equal(field(allowed, "tool"), "python");
    assert_string_equal(field(allowed, "domain"), "allowed.test");
    assert_string_equal(field(allowed, "port"), "80");
    assert_string_equal(field(allowed, "method"), "GET");
    assert_string_equal(field(allowed, "allowed"), "true");
    assert_null(field(allowed, "reason"));
    assert_true(atoi(field(allowed, "bytes_out")) > 0);
    assert_int_equal(atoi(field(allowed, "bytes_in")), sizeof(hello_answer) - 1);
    assert_true(atoi(field(allowed, "duration_ms")) >= 0);
    assert_non_null(strstr(field(allowed, "time"), " GMT"));

    assert_string_equal(field(refused, "domain"), "evil.test");
    assert_string_equal(field(refused, "port"), "443");
    assert_string_equal(field(refused, "method"), "CONNECT");
    assert_string_equal(field(refused, "allowed"), "false");
    assert_string_equal(field(refused, "reason"),
                        "evil.test is not on this container's allowlist");
    assert_string_equal(field(refused, "bytes_out"), "0");
    assert_string_equal(field(refused, "bytes_in"), "0");
    json_object_put(lines[0]);
    json_object_put(lines[1]);
    json_object_put(allowed);
}

static void test_closing_control_ends_the_process(void **state)
{
    fixture *f = *state;
    long long deadline = now_ms() + DEADLINE_MS;
    int status = 0;
    pid_t got;
    add_box(f, 12, policy(f, "cntr_12", "\"allowed.test\"", 1));
    close(f->control);
    f->control = -1;
    while ((got = waitpid(f->pid, &status, WNOHANG)) == 0) {
        assert_true(now_ms() < deadline);
        poll(NULL, 0, 20);
    }
    assert_int_equal(got, f->pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    f->pid = 0;
}

/* ---- domain secrets ------------------------------------------------------------ */

/* A box whose secrets are for api.tls.test, *.untrusted.test,
 * *.wrongname.test and plain.test (all the same placeholder). */
static const char *secrets_box(fixture *f, apr_uint32_t key)
{
    static const char *const domains[] = { "api.tls.test", "*.untrusted.test",
                                           "*.wrongname.test", "plain.test" };
    const char *list = "";
    size_t i;
    for (i = 0; i < sizeof(domains) / sizeof(domains[0]); i++)
        list = apr_psprintf(f->pool, "%s%s{\"domain\": \"%s\", \"placeholder\": "
                            "\"CI_SECRET_abc\", \"value\": \"" SECRET_VALUE "\"}",
                            list, i ? ", " : "", domains[i]);
    return add_box(f, key, apr_psprintf(
        f->pool, "{\"container\": \"cntr_s\", \"tool\": \"python\", \"domains\": "
        "[\"*.tls.test\", \"*.untrusted.test\", \"*.wrongname.test\", \"plain.test\"], "
        "\"proxy\": \"http://127.0.0.1:%d\", \"origin_ca\": \"%s\", \"secrets\": [%s]}",
        world.proxy_port, pki.origin_ca_file, list));
}

static char *file_text(fixture *f, const char *path)
{
    FILE *fp = fopen(path, "r");
    char *buf = apr_pcalloc(f->pool, 1 << 20);
    size_t n = fp ? fread(buf, 1, (1 << 20) - 1, fp) : 0;
    if (fp)
        fclose(fp);
    buf[n] = '\0';
    return buf;
}

/* The value is nowhere in the proxy's stderr or its audit file. */
static void assert_value_not_logged(fixture *f)
{
    const char *err = file_text(f, f->errlog), *audit = file_text(f, f->audit);
    assert_null(strstr(err, SECRET_VALUE));
    assert_null(strstr(err, SECRET_IN_URL));
    assert_null(strstr(audit, SECRET_VALUE));
    assert_null(strstr(audit, SECRET_IN_URL));
}

static const char secret_request[] =
    "GET /p/CI_SECRET_abc?key=CI_SECRET_abc HTTP/1.1\r\nHost: api.tls.test\r\n"
    "Authorization: Bearer CI_SECRET_abc\r\nX-Other: CI_SECRET_abc\r\n"
    "Accept-Encoding: gzip, br\r\n\r\n";

static void test_secret_put_in_over_terminated_tls(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 20);
    SSL_CTX *ctx = client_ctx(&pki.proxy_ca);
    int fd = open_tunnel(f, path, "api.tls.test");
    SSL *ssl = tls_connect(ctx, fd, "api.tls.test");
    const unsigned char *alpn;
    unsigned alpn_len;
    json_object **lines;
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    assert_int_equal(alpn_len, 8);
    assert_memory_equal(alpn, "http/1.1", 8);
    assert_int_equal(SSL_write(ssl, secret_request, sizeof(secret_request) - 1),
                     (int)sizeof(secret_request) - 1);
    assert_string_equal(tls_read_to_eof(f->pool, ssl), hello_answer);
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
    assert_string_equal(WORLD(proxy_line), "CONNECT api.tls.test:443 HTTP/1.1");
    assert_string_equal(WORLD(origin_head),
                        "GET /p/CI_SECRET_abc?key=" SECRET_IN_URL " HTTP/1.1\r\n"
                        "Host: api.tls.test\r\n"
                        "Authorization: Bearer " SECRET_VALUE "\r\n"
                        "X-Other: " SECRET_VALUE "\r\nAccept-Encoding: identity\r\n"
                        "Connection: close\r\n\r\n");
    lines = audit_lines(f, 1);
    assert_string_equal(field(lines[0], "allowed"), "true");
    assert_string_equal(field(lines[0], "tls"), "terminated");
    assert_string_equal(field(lines[0], "injected"), "3");
    json_object_put(lines[0]);
    assert_non_null(strstr(file_text(f, f->errlog), "tls terminated, 3 injected, 0 scrubbed"));
    assert_value_not_logged(f);
}

static void test_other_host_is_tunnelled_untouched(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 21);
    /* The client trusts the origin's CA only: the proxy's would not do. */
    SSL_CTX *ctx = client_ctx(&pki.origin_ca);
    int fd = open_tunnel(f, path, "other.tls.test");
    SSL *ssl = tls_connect(ctx, fd, "other.tls.test");
    static const char req[] = "GET /?key=CI_SECRET_abc HTTP/1.1\r\nHost: other.tls.test\r\n"
                              "Authorization: Bearer CI_SECRET_abc\r\n\r\n";
    X509 *peer = SSL_get1_peer_certificate(ssl);
    json_object **lines;
    assert_int_equal(X509_cmp(peer, pki.tls_leaf), 0);
    X509_free(peer);
    assert_int_equal(SSL_write(ssl, req, sizeof(req) - 1), (int)sizeof(req) - 1);
    assert_string_equal(tls_read_to_eof(f->pool, ssl), hello_answer);
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
    assert_string_equal(WORLD(origin_head), req);
    lines = audit_lines(f, 1);
    assert_null(field(lines[0], "tls"));
    assert_string_equal(field(lines[0], "injected"), "0");
    json_object_put(lines[0]);
}

static void test_unverified_origin_is_a_502(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 22);
    json_object **lines;
    /* Signed by a CA not in origin_ca. */
    assert_answer(f, path, "CONNECT api.untrusted.test:443 HTTP/1.1\r\n\r\n",
                  CI_EGRESS_STATUS_502,
                  "egress error: api.untrusted.test's certificate could not be verified\n");
    /* Signed by the right CA, for another name. */
    assert_answer(f, path, "CONNECT api.wrongname.test:443 HTTP/1.1\r\n\r\n",
                  CI_EGRESS_STATUS_502,
                  "egress error: api.wrongname.test's certificate could not be verified\n");
    lines = audit_lines(f, 2);
    assert_string_equal(field(lines[0], "allowed"), "false");
    assert_string_equal(field(lines[0], "reason"),
                        "api.untrusted.test's certificate could not be verified");
    assert_null(field(lines[0], "tls"));
    assert_string_equal(field(lines[0], "injected"), "0");
    json_object_put(lines[0]);
    json_object_put(lines[1]);
}

/* The origin's record: no head at all. */
static void assert_origin_got_nothing(void)
{
    assert_string_equal(WORLD(origin_head), "");
}

static void test_plain_http_to_a_secret_domain_is_refused(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 23);
    assert_answer(f, path, "GET http://plain.test/p?k=CI_SECRET_abc HTTP/1.1\r\n"
                           "Authorization: Bearer CI_SECRET_abc\r\n\r\n",
                  CI_EGRESS_STATUS_403, "egress refused: plain.test has domain secrets; plain "
                                        "http to it is not allowed, use https\n");
    assert_answer(f, path, "CONNECT plain.test:80 HTTP/1.1\r\n\r\n", CI_EGRESS_STATUS_403,
                  "egress refused: CONNECT plain.test:80: plain http is sent as absolute-form "
                  "requests (http://...), not through a tunnel\n");
    assert_string_equal(WORLD(proxy_line), "");
    assert_origin_got_nothing();
    assert_value_not_logged(f);
}

/* BODY, a chunked body, decoded (the chunk sizes checked). */
static char *dechunk(apr_pool_t *p, const char *body)
{
    char *out = apr_pcalloc(p, strlen(body) + 1);
    size_t o = 0;
    for (;;) {
        char *end;
        unsigned long n = strtoul(body, &end, 16);
        assert_true(end != body && end[0] == '\r' && end[1] == '\n');
        body = end + 2;
        if (n == 0)
            break;
        assert_true(strlen(body) >= n + 2);
        memcpy(out + o, body, n);
        o += n;
        body += n;
        assert_memory_equal(body, "\r\n", 2);
        body += 2;
    }
    assert_string_equal(body, "\r\n");
    return out;
}

/* A copy of S with every FROM replaced by TO. */
static char *replaced(apr_pool_t *p, const char *s, const char *from, const char *to)
{
    const char *at;
    char *out = "";
    while ((at = strstr(s, from)) != NULL) {
        out = apr_pstrcat(p, out, apr_pstrmemdup(p, s, (apr_size_t)(at - s)), to, NULL);
        s = at + strlen(from);
    }
    return apr_pstrcat(p, out, s, NULL);
}

static void test_values_are_taken_out_of_answers(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 27);
    static const char echo[] = "GET /echo?k=CI_SECRET_abc HTTP/1.1\r\nHost: api.tls.test\r\n"
                               "X-Key: CI_SECRET_abc\r\n\r\n";
    static const char gzip[] = "GET /gzip HTTP/1.1\r\nHost: api.tls.test\r\n\r\n";
    const char *got = tls_exchange(f, path, &pki.proxy_ca, "api.tls.test", echo);
    const char *want_body, *head_end;
    json_object **lines;
    apr_size_t n;
    head_end = strstr(got, "\r\n\r\n");
    assert_non_null(head_end);
    assert_string_equal(apr_pstrmemdup(f->pool, got, (apr_size_t)(head_end + 4 - got)),
                        "HTTP/1.1 302 " MASK_VALUE "\r\n"
                        "Location: https://api.tls.test/?k=" MASK_IN_URL "\r\n"
                        "X-Echo: " MASK_VALUE "\r\nTransfer-Encoding: chunked\r\n\r\n");
    pthread_mutex_lock(&world.lock);
    want_body = replaced(f->pool, replaced(f->pool, world.origin_head, SECRET_VALUE,
                                           MASK_VALUE), SECRET_IN_URL, MASK_IN_URL);
    pthread_mutex_unlock(&world.lock);
    assert_string_equal(dechunk(f->pool, head_end + 4), want_body);
    /* A compressed answer cannot be scanned: a 502 instead. */
    assert_string_equal(tls_exchange(f, path, &pki.proxy_ca, "api.tls.test", gzip),
                        ci_egress_response(f->pool, CI_EGRESS_STATUS_502,
                                           "egress error: api.tls.test answered with a "
                                           "compressed or unframed body, which cannot be "
                                           "scanned for the domain's secrets\n", &n));
    lines = audit_lines(f, 2);
    /* status line, Location, X-Echo, and in the body: the query and X-Key */
    assert_string_equal(field(lines[0], "scrubbed"), "5");
    assert_string_equal(field(lines[1], "scrubbed"), "0");
    json_object_put(lines[0]);
    json_object_put(lines[1]);
    assert_value_not_logged(f);
}

static void test_tunnel_head_naming_another_host_is_refused(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 24);
    SSL_CTX *ctx = client_ctx(&pki.proxy_ca);
    int fd = open_tunnel(f, path, "api.tls.test");
    SSL *ssl = tls_connect(ctx, fd, "api.tls.test");
    static const char req[] = "GET / HTTP/1.1\r\nHost: evil.tls.test\r\n"
                              "Authorization: Bearer CI_SECRET_abc\r\n\r\n";
    apr_size_t n;
    assert_int_equal(SSL_write(ssl, req, sizeof(req) - 1), (int)sizeof(req) - 1);
    assert_string_equal(tls_read_to_eof(f->pool, ssl),
                        ci_egress_response(f->pool, CI_EGRESS_STATUS_403,
                                           "egress refused: this tunnel is for api.tls.test:443; "
                                           "a request in it names another host\n", &n));
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
    assert_value_not_logged(f);
}

static void test_a_tunnel_carries_only_its_own_name(void **state)
{
    fixture *f = *state;
    /* a container each: a container's refusals in one second are one line */
    const char *path = add_box(f, 25, policy(f, "cntr_n", "\"*.tls.test\"", 1));
    const char *path2 = add_box(f, 40, policy(f, "cntr_n2", "\"*.tls.test\"", 1));
    const char *path3 = add_box(f, 41, policy(f, "cntr_n3", "\"*.tls.test\"", 1));
    SSL_CTX *ctx = client_ctx(&pki.origin_ca);
    static const char plain[] = "GET / HTTP/1.1\r\nHost: other.tls.test\r\n\r\n";
    const char *why[3];
    json_object **lines;
    size_t n;
    int fd, i;
    /* Another name in the ClientHello: closed before the origin hears a byte. */
    fd = open_tunnel(f, path, "api.tls.test");
    assert_null(tls_try(ctx, fd, "other.tls.test"));
    close(fd);
    /* No name. */
    fd = open_tunnel(f, path2, "api.tls.test");
    assert_null(tls_try(ctx, fd, NULL));
    close(fd);
    /* No TLS at all. */
    fd = open_tunnel(f, path3, "api.tls.test");
    assert_int_equal(write_all(fd, plain, sizeof(plain) - 1), 0);
    assert_string_equal(read_to_eof(f->pool, fd, 4096, &n), "");
    close(fd);
    SSL_CTX_free(ctx);
    assert_origin_got_nothing();
    lines = audit_lines(f, 3);
    for (i = 0; i < 3; i++) {
        assert_string_equal(field(lines[i], "allowed"), "false");
        why[i] = apr_pstrdup(f->pool, field(lines[i], "reason"));
        json_object_put(lines[i]);
    }
    assert_string_equal(why[0], "the TLS ClientHello names other.tls.test, not api.tls.test");
    assert_string_equal(why[1], "the TLS ClientHello names no server (SNI), not api.tls.test");
    assert_string_equal(why[2], "the tunnel to api.tls.test:443 did not start with a TLS "
                                "ClientHello");
    assert_non_null(strstr(file_text(f, f->errlog), "CI0940: egress: a tunnel of container "
                                                    "cntr_n to api.tls.test:443 was closed: "
                                                    "the TLS ClientHello names other.tls.test"));
}

static void test_a_terminated_tunnel_checks_its_client_hello(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 26);
    SSL_CTX *ctx = client_ctx(&pki.proxy_ca);
    json_object **lines;
    int fd = open_tunnel(f, path, "api.tls.test");
    assert_null(tls_try(ctx, fd, "evil.tls.test"));
    close(fd);
    SSL_CTX_free(ctx);
    lines = audit_lines(f, 1);
    assert_string_equal(field(lines[0], "allowed"), "false");
    assert_string_equal(field(lines[0], "reason"),
                        "the TLS ClientHello names evil.tls.test, not api.tls.test");
    json_object_put(lines[0]);
    /* The origin's TLS was made (it is verified before the 200), no
     * request went in it. */
    assert_origin_got_nothing();
}

static int tls_origin_closed(void)
{
    int n;
    pthread_mutex_lock(&world.lock);
    n = world.tls_closed;
    pthread_mutex_unlock(&world.lock);
    return n;
}

static void test_one_request_per_terminated_connection(void **state)
{
    fixture *f = *state;
    const char *path = secrets_box(f, 28);
    static const char two[] =
        "POST /first HTTP/1.1\r\nHost: api.tls.test\r\nContent-Length: 4\r\n\r\nbody"
        "GET /second HTTP/1.1\r\nHost: evil.tls.test\r\nX-K: CI_SECRET_abc\r\n\r\n";
    long long deadline = now_ms() + DEADLINE_MS;
    /* Both requests in one write: the second never reaches the origin. */
    assert_string_equal(tls_exchange(f, path, &pki.proxy_ca, "api.tls.test", two),
                        hello_answer);
    while (tls_origin_closed() == 0 && now_ms() < deadline)
        poll(NULL, 0, 20);
    assert_int_equal(tls_origin_closed(), 1);
    assert_string_equal(WORLD(origin_head), "POST /first HTTP/1.1\r\nHost: api.tls.test\r\n"
                                           "Content-Length: 4\r\nAccept-Encoding: identity\r\n"
                                           "Connection: close\r\n\r\n");
    assert_string_equal(WORLD(tls_after), "body");
    assert_value_not_logged(f);
}

#define PROC(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        PROC(test_http_get_through_the_site_proxy),
        PROC(test_connect_tunnel_relays_both_ways),
        PROC(test_refusals_are_exact),
        PROC(test_errors_without_a_site_proxy),
        PROC(test_localhost_is_refused_as_loopback),
        cmocka_unit_test_setup_teardown(test_connection_bound, setup_two_connections,
                                        teardown),
        PROC(test_slowloris_is_cut),
        PROC(test_byte_budget_cuts_and_execution_restores),
        PROC(test_remove_closes_live_connections),
        PROC(test_audit_has_a_line_per_connection),
        PROC(test_closing_control_ends_the_process),
        PROC(test_secret_put_in_over_terminated_tls),
        PROC(test_other_host_is_tunnelled_untouched),
        PROC(test_unverified_origin_is_a_502),
        PROC(test_plain_http_to_a_secret_domain_is_refused),
        PROC(test_values_are_taken_out_of_answers),
        PROC(test_a_tunnel_carries_only_its_own_name),
        PROC(test_a_terminated_tunnel_checks_its_client_hello),
        PROC(test_one_request_per_terminated_connection),
        PROC(test_tunnel_head_naming_another_host_is_refused),
        cmocka_unit_test_setup_teardown(test_owners_share_and_names_resolve_here,
                                        setup_owners_resolving_here, teardown),
    };
    int rc;
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&world.lock, NULL);
    apr_initialize();
    /* The proxy inherits the level: its CI0901 lines go to its stderr. */
    ci_log_set(ci_log_stderr_sink, CI_LOG_INFO);
    pki_make();
    rc = cmocka_run_group_tests_name("egress", tests, NULL, NULL);
    pki_free();
    apr_terminate();
    return rc;
}

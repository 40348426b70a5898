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

#include "ci_egress.h"
#include "ci_egress_parse.h"

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
    int proxy_fd, proxy_port;
    pthread_t origin_thread, proxy_thread;
    pthread_mutex_t lock;
    char origin_head[4096];         /* the last head the origin got */
    char proxy_line[512];           /* the last CONNECT line the site proxy got */
} peers;

static peers world;

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
            (origin = tcp_connect(world.origin_port)) < 0) {
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

static server origin_server, proxy_server;

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

static void peers_start(void)
{
    memset(world.origin_head, 0, sizeof(world.origin_head));
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
}

/* A listening socket wakes its accept() when shut down. */
static void peers_stop(void)
{
    shutdown(world.origin_fd, SHUT_RDWR);
    shutdown(world.proxy_fd, SHUT_RDWR);
    pthread_join(world.origin_thread, NULL);
    pthread_join(world.proxy_thread, NULL);
    close(world.origin_fd);
    close(world.proxy_fd);
}

/* ---- the proxy under test ------------------------------------------------- */

typedef struct fixture {
    apr_pool_t *pool;
    char dir[64];
    const char *audit;
    pid_t pid;
    int control;
} fixture;

static fixture *start(void **state, int max_connections)
{
    fixture *f = calloc(1, sizeof(*f));
    ci_egress_limits lim;
    int audit_fd;
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
    /* The proxy first: it is forked before this process starts threads. */
    audit_fd = open(f->audit, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    assert_true(audit_fd >= 0);
    f->pid = ci_egress_start(f->pool, &lim, audit_fd, &f->control);
    close(audit_fd);               /* the proxy has its own copy */
    assert_true(f->pid > 0);
    assert_true(f->control >= 0);
    assert_true(fcntl(f->control, F_GETFD) & FD_CLOEXEC);
    peers_start();
    *state = f;
    return f;
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

static const char hello_answer[] =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";

/* ---- the tests ---------------------------------------------------------------- */

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
    pthread_mutex_lock(&world.lock);
    /* The site proxy was asked for the name; the origin got the rewritten head. */
    assert_string_equal(world.proxy_line, "CONNECT allowed.test:80 HTTP/1.1");
    assert_string_equal(world.origin_head, "GET /hello?x=1 HTTP/1.1\r\nHost: allowed.test\r\n"
                                           "Accept: */*\r\nConnection: close\r\n\r\n");
    pthread_mutex_unlock(&world.lock);
}

static void test_connect_tunnel_relays_both_ways(void **state)
{
    fixture *f = *state;
    const char *path = add_box(f, 2, policy(f, "cntr_2", "\"*.wild.test\"", 1));
    static const char get[] = "GET /hello HTTP/1.1\r\nHost: api.wild.test\r\n\r\n";
    size_t n;
    int fd = open_tunnel(f, path, "api.wild.test");
    assert_int_equal(write_all(fd, get, sizeof(get) - 1), 0);
    assert_string_equal(read_to_eof(f->pool, fd, 4096, &n), hello_answer);
    close(fd);
    pthread_mutex_lock(&world.lock);
    assert_string_equal(world.proxy_line, "CONNECT api.wild.test:443 HTTP/1.1");
    assert_string_equal(world.origin_head, get);    /* untouched through a tunnel */
    pthread_mutex_unlock(&world.lock);
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
    pthread_mutex_lock(&world.lock);
    assert_string_equal(world.proxy_line, "");
    pthread_mutex_unlock(&world.lock);
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
    };
    int rc;
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&world.lock, NULL);
    apr_initialize();
    rc = cmocka_run_group_tests_name("egress", tests, NULL, NULL);
    apr_terminate();
    return rc;
}

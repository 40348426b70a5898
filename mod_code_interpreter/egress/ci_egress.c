/*
 * ci_egress.c - the egress proxy process of local sandboxes (ci_egress.h).
 *
 * One process, forked by the supervisor (single-threaded, so the fork is
 * safe); it starts threads only afterwards. Its main thread polls the
 * control socket and the containers' listening sockets and does nothing
 * that blocks: it accepts, counts, and hands each connection to a thread of
 * its own (detached, small stack). That thread reads the head, decides
 * (ci_egress_parse.c), resolves the name (getaddrinfo may take seconds: never
 * in the loop), connects, and relays until either side is done.
 *
 * Over a bound, the main thread answers itself, without a thread: 403 over
 * a container's max_connections, 503 over max_total (the site's bound, not
 * the container's).
 *
 * A container (a "box") is shared by the main thread and its connections'
 * threads and freed by whoever drops the last reference: its listener holds
 * one, each open connection one. ci_egress_remove shuts down every fd of
 * its connections (under the box's lock, so no fd is shut after its thread
 * closed it and the number was reused); the threads then see EOF and end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <apr_strings.h>
#include <apr_time.h>
#include <json-c/json.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include "ci_egress.h"
#include "ci_egress_content.h"
#include "ci_egress_parse.h"
#include "ci_egress_tls.h"
#include "ci_log.h"
#include "ci_workers.h"

/* ---- the control protocol ------------------------------------------------ */

enum { CMD_ADD = 1, CMD_REMOVE = 2, CMD_EXECUTION = 3, CMD_CLAIM = 4 };

/* Every message: this header, then (ADD) the policy's JSON text, (CLAIM)
 * {"container": …, "owner": …}. */
typedef struct ctl_header {
    apr_uint32_t cmd;
    apr_uint32_t key;
} ctl_header;

#define CTL_POLICY_MAX (64 * 1024)
#define CTL_SEND_WAIT_MS 5000

#define RELAY_BUF 16384
#define THREAD_STACK (256 * 1024)     /* getaddrinfo and NSS need some */
#define ANSWER_WAIT_MS 5000           /* to write an answer to the sandbox */
#define ACCEPT_BURST 64

/* ---- time ------------------------------------------------------------------ */

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int ms_left(long long deadline)
{
    long long left = deadline - now_ms();
    return left <= 0 ? 0 : left > 0x7fffffff ? 0x7fffffff : (int)left;
}

/* FD ready for EVENTS before DEADLINE: 1, 0 (time is up), -1. */
static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        struct pollfd pfd = { fd, events, 0 };
        int rc = poll(&pfd, 1, ms_left(deadline));
        if (rc > 0)
            return 1;
        if (rc == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/* All N bytes of BUF to the non-blocking FD before DEADLINE: 0 or -1. */
static int write_all(int fd, const char *buf, apr_size_t n, long long deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w > 0) {
            buf += w;
            n -= (apr_size_t)w;
        }
        else if (w < 0 && errno == EINTR) {
            continue;
        }
        else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT, deadline) != 1)
                return -1;
        }
        else {
            return -1;
        }
    }
    return 0;
}

/* ---- the supervisor's side ------------------------------------------------- */

void ci_egress_default_limits(ci_egress_limits *lim)
{
    lim->max_connections = 32;
    lim->max_total = 512;
    lim->max_bytes = (apr_uint64_t)1 << 30;
    lim->idle_seconds = 60;
    lim->head_seconds = 10;
    lim->max_per_owner = 0;         /* a quarter of max_total */
    lim->lifetime_seconds = 600;
    lim->proxy_resolves = 0;
}

/* One message, with FD (or -1) passed along. The socket is non-blocking: a
 * full queue is waited for, a little. */
static int send_command(int control, apr_uint32_t cmd, apr_uint32_t key,
                        const char *payload, int fd)
{
    ctl_header h;
    struct iovec iov[2];
    struct msghdr msg;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    apr_size_t len = payload ? strlen(payload) : 0;
    long long deadline = now_ms() + CTL_SEND_WAIT_MS;

    if (len > CTL_POLICY_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    h.cmd = cmd;
    h.key = key;
    iov[0].iov_base = &h;
    iov[0].iov_len = sizeof(h);
    iov[1].iov_base = (void *)payload;
    iov[1].iov_len = len;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = len ? 2 : 1;
    if (fd >= 0) {
        struct cmsghdr *c;
        memset(&u, 0, sizeof(u));
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof(u.buf);
        c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    for (;;) {
        if (sendmsg(control, &msg, MSG_NOSIGNAL) >= 0)
            return 0;
        if (errno == EINTR)
            continue;
        if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
            wait_fd(control, POLLOUT, deadline) == 1)
            continue;
        return -1;
    }
}

int ci_egress_add(int control, apr_uint32_t key, int listen_fd, const char *policy)
{
    if (listen_fd < 0 || !policy) {
        errno = EINVAL;
        return -1;
    }
    return send_command(control, CMD_ADD, key, policy, listen_fd);
}

int ci_egress_remove(int control, apr_uint32_t key)
{
    return send_command(control, CMD_REMOVE, key, NULL, -1);
}

int ci_egress_execution(int control, apr_uint32_t key)
{
    return send_command(control, CMD_EXECUTION, key, NULL, -1);
}

int ci_egress_claim(int control, apr_uint32_t key, const char *container,
                    const char *owner)
{
    json_object *o = json_object_new_object();
    int rc;
    json_object_object_add(o, "container", json_object_new_string(container ? container : ""));
    json_object_object_add(o, "owner", json_object_new_string(owner ? owner : ""));
    rc = send_command(control, CMD_CLAIM, key,
                      json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), -1);
    json_object_put(o);
    return rc;
}

/* ---- the proxy's state ----------------------------------------------------- */

typedef struct egress_conn egress_conn;

/* The containers of one owner share max_per_owner: its count of open
 * connections. Kept while a box names it or a connection counts in it;
 * under owners_lock. */
#define OWNER_KEY_MAX 65
typedef struct egress_owner {
    char key[OWNER_KEY_MAX];        /* the digest the supervisor sent */
    int open;                       /* connections of its containers */
    int boxes;                      /* boxes that name it */
    struct egress_owner *next;
} egress_owner;

/* Connections not relayed (refused, or ended before they could be), noted
 * per box at a bounded rate: the first after a quiet second is a line at
 * once; those that follow within the second are counted, and the count
 * goes out with the last one's details a second after the line before
 * (REFUSAL_LOG_MS). Under its own lock: connections' threads and the main
 * thread both note and flush. */
#define REFUSAL_LOG_MS 1000
typedef struct refusal_note {
    char method[24];
    char domain[256];
    int port;
    char reason[320];
    apr_time_t started;
    long long duration_ms;
} refusal_note;

typedef struct refusal_log {
    pthread_mutex_t lock;
    long long last_line_ms;         /* when the last line went (0: never) */
    _Atomic int pending;            /* refusals counted since */
    refusal_note last;              /* the latest of them */
} refusal_log;

typedef struct egress_box {
    apr_uint32_t key;
    int listen_fd;                  /* the main thread's; -1 once removed */
    apr_pool_t *pool;               /* the policy's strings */
    const char *container;
    const char *tool;
    const char **domains;
    int ndomains;
    const char *proxy_host;         /* NULL: no site proxy */
    int proxy_port;
    ci_egress_secret *secrets;      /* domain secrets (their values: never logged) */
    int nsecrets;
    SSL_CTX *origin_ctx;            /* with secrets: verifies origins (origin_ca) */
    _Atomic apr_uint64_t used;      /* bytes of this execution, both ways */
    pthread_mutex_t lock;           /* guards what follows */
    int refs;                       /* the listener, and each open connection */
    int open;                       /* connections */
    int removed;
    egress_conn *conns;             /* the open connections */
    egress_owner *owner;            /* NULL: none known (the main thread's) */
    refusal_log refusals;
} egress_box;

struct egress_conn {
    egress_box *box;
    egress_owner *owner;            /* the owner it counts in, or NULL */
    int client;                     /* the sandbox's side */
    int origin;                     /* -1 until a connect starts; under box->lock */
    _Atomic int cut;                /* the box was removed: end now */
    egress_conn *prev, *next;
    apr_pool_t *pool;
    apr_time_t started;
    long long started_ms;
    /* What the audit line says. */
    const char *method;
    const char *domain;
    int port;
    int allowed;
    const char *reason;
    apr_uint64_t bytes_out;         /* sandbox -> origin */
    apr_uint64_t bytes_in;          /* origin -> sandbox */
    int tls_terminated;             /* the proxy was the TLS server to the sandbox */
    int injected;                   /* placeholders replaced by values */
    int outlived;                   /* closed at lifetime_seconds */
    int scrubbed;                   /* values taken out of what came back */
};

static ci_egress_limits limits;
static int audit_fd = -1;
static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;
static egress_owner *owners;
static _Atomic int total_open;
static pthread_attr_t thread_attr;

/* The main thread's registry of boxes. */
static egress_box **boxes;
static int nboxes, boxes_cap;

static egress_box *find_box(apr_uint32_t key)
{
    int i;
    for (i = 0; i < nboxes; i++)
        if (boxes[i]->key == key)
            return boxes[i];
    return NULL;
}

static void refusals_flush(egress_box *b, int force);
static void owner_detach(egress_owner *o);

static void box_free(egress_box *b)
{
    int i;
    refusals_flush(b, 1);
    pthread_mutex_destroy(&b->refusals.lock);
    owner_detach(b->owner);
    for (i = 0; i < b->nsecrets; i++)
        if (b->secrets[i].value)
            OPENSSL_cleanse((void *)b->secrets[i].value, strlen(b->secrets[i].value));
    SSL_CTX_free(b->origin_ctx);
    pthread_mutex_destroy(&b->lock);
    apr_pool_destroy(b->pool);
    free(b);
}

/* Drops one reference of B (the caller holds none of its lock). */
static void box_unref(egress_box *b)
{
    int last;
    pthread_mutex_lock(&b->lock);
    last = --b->refs == 0;
    pthread_mutex_unlock(&b->lock);
    if (last)
        box_free(b);
}

/* ---- owners ------------------------------------------------------------------ */

/* O freed once no box names it and no connection counts in it (the caller
 * holds owners_lock). */
static void owner_forget_if_unused(egress_owner *o)
{
    egress_owner **pp;
    if (o->boxes || o->open)
        return;
    for (pp = &owners; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            free(o);
            return;
        }
}

/* The owner of KEY (a digest), made if it is new, with one more box naming
 * it; NULL for none ("" or NULL), or out of memory: the box then counts
 * alone, against its own and the server's bounds. */
static egress_owner *owner_attach(const char *key)
{
    egress_owner *o;
    if (!key || !*key || strlen(key) >= OWNER_KEY_MAX)
        return NULL;
    pthread_mutex_lock(&owners_lock);
    for (o = owners; o && strcmp(o->key, key); o = o->next)
        ;
    if (!o && (o = calloc(1, sizeof(*o)))) {
        strcpy(o->key, key);
        o->next = owners;
        owners = o;
    }
    if (o)
        o->boxes++;
    pthread_mutex_unlock(&owners_lock);
    return o;
}

static void owner_detach(egress_owner *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&owners_lock);
    o->boxes--;
    owner_forget_if_unused(o);
    pthread_mutex_unlock(&owners_lock);
}

/* One more connection of O, unless its containers hold max_per_owner: 0,
 * or -1 (refused). Without an owner: 0. */
static int owner_take(egress_owner *o)
{
    int ok;
    if (!o)
        return 0;
    pthread_mutex_lock(&owners_lock);
    ok = o->open < limits.max_per_owner;
    if (ok)
        o->open++;
    pthread_mutex_unlock(&owners_lock);
    return ok ? 0 : -1;
}

static void owner_give_back(egress_owner *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&owners_lock);
    o->open--;
    owner_forget_if_unused(o);
    pthread_mutex_unlock(&owners_lock);
}

/* Up to WANT bytes of the box's budget: how many may go. */
static apr_size_t budget_take(egress_box *b, apr_size_t want)
{
    apr_uint64_t used = atomic_fetch_add(&b->used, (apr_uint64_t)want);
    if (used >= limits.max_bytes)
        return 0;
    return limits.max_bytes - used < want ? (apr_size_t)(limits.max_bytes - used) : want;
}

/* ---- logs ------------------------------------------------------------------ */

/* The supervisor's level, as far as ci_log tells it (warnings when it had
 * no sink). */
static int inherited_log_level(void)
{
    int level;
    for (level = CI_LOG_DEBUG; level >= CI_LOG_ERR; level--)
        if (ci_log_wants((ci_log_level)level))
            return level;
    return CI_LOG_WARNING;
}

static void add_string_or_null(json_object *o, const char *key, const char *value)
{
    json_object_object_add(o, key, value ? json_object_new_string(value) : NULL);
}

/* The connection's audit line: one write, so lines of threads never mix.
 * COUNT: the connections it stands for (refusals are folded, see
 * refusal_log; a relayed connection is a line of its own). */
static void write_audit(const egress_conn *c, int count)
{
    char date[APR_RFC822_DATE_LEN];
    json_object *o;
    const char *text;
    char *line;
    apr_size_t n;
    if (audit_fd < 0)
        return;
    apr_rfc822_date(date, c->started);
    o = json_object_new_object();
    json_object_object_add(o, "time", json_object_new_string(date));
    json_object_object_add(o, "event", json_object_new_string("egress"));
    add_string_or_null(o, "container_id", c->box->container);
    add_string_or_null(o, "tool", c->box->tool);
    add_string_or_null(o, "domain", c->domain);
    json_object_object_add(o, "port", c->port ? json_object_new_int(c->port) : NULL);
    add_string_or_null(o, "method", c->method);
    json_object_object_add(o, "allowed", json_object_new_boolean(c->allowed));
    add_string_or_null(o, "reason", c->allowed ? NULL : c->reason);
    json_object_object_add(o, "bytes_out", json_object_new_int64((int64_t)c->bytes_out));
    json_object_object_add(o, "bytes_in", json_object_new_int64((int64_t)c->bytes_in));
    json_object_object_add(o, "tls", c->tls_terminated ? json_object_new_string("terminated")
                                                       : NULL);
    json_object_object_add(o, "injected", json_object_new_int(c->injected));
    json_object_object_add(o, "count", json_object_new_int(count));
    json_object_object_add(o, "outlived", json_object_new_boolean(c->outlived));
    json_object_object_add(o, "scrubbed", json_object_new_int(c->scrubbed));
    json_object_object_add(o, "duration_ms",
                           json_object_new_int64(now_ms() - c->started_ms));
    text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                             JSON_C_TO_STRING_NOSLASHESCAPE);
    n = strlen(text);
    line = malloc(n + 1);
    if (line) {
        memcpy(line, text, n);
        line[n] = '\n';
        if (write(audit_fd, line, n + 1) != (ssize_t)(n + 1))
            ci_log(CI_LOG_WARNING, "CI0902: the egress audit line could not be written");
        free(line);
    }
    json_object_put(o);
}

/* The connection's log line: no header value (one may hold a secret), no
 * secret's name or value, only how many were put in. */
static void log_connection(const egress_conn *c)
{
    if (c->outlived)
        ci_log(CI_LOG_INFO, "CI0932: egress %s %s:%d for container %s: closed at its "
               "maximum lifetime (%d s)", c->method ? c->method : "-",
               c->domain ? c->domain : "-", c->port,
               *c->box->container ? c->box->container : "-", limits.lifetime_seconds);
    ci_log(CI_LOG_INFO, "CI0901: egress %s %s:%d for container %s (tool %s): %s%s%s, "
           "%" APR_UINT64_T_FMT " bytes out, %" APR_UINT64_T_FMT " in, %" APR_INT64_T_FMT " ms, "
           "tls %s, %d injected, %d scrubbed",
           c->method ? c->method : "-", c->domain ? c->domain : "-", c->port,
           *c->box->container ? c->box->container : "-",
           *c->box->tool ? c->box->tool : "-", c->allowed ? "relayed" : "not relayed",
           c->allowed ? "" : ": ", c->allowed ? "" : (c->reason ? c->reason : "?"),
           c->bytes_out, c->bytes_in, (apr_int64_t)(now_ms() - c->started_ms),
           c->tls_terminated ? "terminated" : "-", c->injected, c->scrubbed);
}

/* The line of COUNT connections not relayed, C (built from a note) the
 * last of them: one of its own when there is one, else one that says how
 * many it stands for. */
static void log_refusals(const egress_conn *c, int count)
{
    if (count == 1) {
        log_connection(c);
        return;
    }
    ci_log(CI_LOG_INFO, "CI0930: egress: %d connections of container %s (tool %s) not "
           "relayed since the line before; the last: %s %s:%d: %s",
           count, *c->box->container ? c->box->container : "-",
           *c->box->tool ? c->box->tool : "-", c->method ? c->method : "-",
           c->domain ? c->domain : "-", c->port, c->reason ? c->reason : "?");
}

/* What the lines say of C, kept in N (its strings copied: C's pool goes). */
static void refusal_note_take(refusal_note *n, const egress_conn *c)
{
    snprintf(n->method, sizeof(n->method), "%s", c->method ? c->method : "");
    snprintf(n->domain, sizeof(n->domain), "%s", c->domain ? c->domain : "");
    snprintf(n->reason, sizeof(n->reason), "%s", c->reason ? c->reason : "");
    n->port = c->port;
    n->started = c->started;
    n->duration_ms = now_ms() - c->started_ms;
}

/* The audit and error log lines of COUNT refusals of B, N the last. */
static void refusal_lines(egress_box *b, const refusal_note *n, int count)
{
    egress_conn c;
    memset(&c, 0, sizeof(c));
    c.box = b;
    c.method = *n->method ? n->method : NULL;
    c.domain = *n->domain ? n->domain : NULL;
    c.reason = *n->reason ? n->reason : NULL;
    c.port = n->port;
    c.started = n->started;
    c.started_ms = now_ms() - n->duration_ms;
    write_audit(&c, count);
    log_refusals(&c, count);
}

/* B's refusals counted since its last line, out as one line when a
 * second has passed since (FORCE: now, as the box goes). */
static void refusals_flush(egress_box *b, int force)
{
    refusal_log *r = &b->refusals;
    refusal_note n;
    int count = 0;
    long long now = now_ms();
    if (atomic_load(&r->pending) == 0)
        return;
    pthread_mutex_lock(&r->lock);
    if (force || now - r->last_line_ms >= REFUSAL_LOG_MS) {
        count = atomic_exchange(&r->pending, 0);
        n = r->last;
        r->last_line_ms = now;
    }
    pthread_mutex_unlock(&r->lock);
    if (count > 0)
        refusal_lines(b, &n, count);
}

/* C was not relayed: a line now when B had none for a second, else
 * counted into the next. */
static void refusal_count(egress_conn *c)
{
    refusal_log *r = &c->box->refusals;
    refusal_note n;
    int count = 0;
    long long now = now_ms();
    refusal_note_take(&n, c);
    pthread_mutex_lock(&r->lock);
    if (r->last_line_ms == 0 || now - r->last_line_ms >= REFUSAL_LOG_MS) {
        count = atomic_exchange(&r->pending, 0) + 1;
        r->last_line_ms = now;
    }
    else {
        atomic_fetch_add(&r->pending, 1);
        r->last = n;
    }
    pthread_mutex_unlock(&r->lock);
    if (count > 0)
        refusal_lines(c->box, &n, count);
}

/* The lines of C, as it ends: its own when it was relayed. */
static void note_outcome(egress_conn *c)
{
    if (!c->allowed) {
        refusal_count(c);
        return;
    }
    write_audit(c, 1);
    log_connection(c);
}

/* ---- a connection's fds, under its box's lock ----------------------------- */

/* FD becomes C's origin side, unless its box was removed meanwhile: 0 or -1
 * (the caller closes FD). */
static int conn_set_origin(egress_conn *c, int fd)
{
    int ok;
    pthread_mutex_lock(&c->box->lock);
    ok = !c->box->removed && !atomic_load(&c->cut);
    if (ok)
        c->origin = fd;
    pthread_mutex_unlock(&c->box->lock);
    return ok ? 0 : -1;
}

static void conn_close_origin(egress_conn *c)
{
    int fd;
    pthread_mutex_lock(&c->box->lock);
    fd = c->origin;
    c->origin = -1;
    pthread_mutex_unlock(&c->box->lock);
    if (fd >= 0)
        close(fd);
}

/* C leaves its box's list (so nothing shuts its fds any more), then its
 * fds are closed and its references dropped. */
static void conn_end(egress_conn *c)
{
    egress_box *b = c->box;
    int last;
    conn_close_origin(c);
    pthread_mutex_lock(&b->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        b->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    b->open--;
    last = --b->refs == 0;
    pthread_mutex_unlock(&b->lock);
    close(c->client);
    atomic_fetch_sub(&total_open, 1);
    owner_give_back(c->owner);
    if (c->pool)
        apr_pool_destroy(c->pool);
    free(c);
    if (last)
        box_free(b);
}

/* ---- endpoints: a socket, with or without TLS on it ----------------------- */

typedef struct endpoint {
    int fd;
    SSL *ssl;                       /* NULL: plain */
    short read_want;                /* what a TLS read that would block waits for */
    short write_want;               /* ... a TLS write */
} endpoint;

enum { IO_AGAIN = -2, IO_ERROR = -1, IO_EOF = 0 };

/* What a TLS call that returned RC needs, into *WANT: IO_AGAIN, or
 * IO_EOF (the peer's close_notify), or IO_ERROR. */
static int tls_status(SSL *ssl, int rc, short *want)
{
    switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return IO_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return IO_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return IO_EOF;
    default:
        ERR_clear_error();
        return IO_ERROR;
    }
}

/* Up to N bytes from E: how many (> 0), IO_EOF, IO_AGAIN or IO_ERROR. */
static ssize_t ep_recv(endpoint *e, char *buf, apr_size_t n)
{
    ssize_t r;
    if (e->ssl) {
        int rc = SSL_read(e->ssl, buf, (int)n);
        e->read_want = 0;
        return rc > 0 ? rc : tls_status(e->ssl, rc, &e->read_want);
    }
    r = recv(e->fd, buf, n, 0);
    if (r < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? IO_AGAIN : IO_ERROR;
    return r;
}

/* Up to N bytes to E: how many (> 0), IO_AGAIN or IO_ERROR. A TLS write
 * that would block is called again with the same bytes. */
static ssize_t ep_send(endpoint *e, const char *buf, apr_size_t n)
{
    ssize_t w;
    if (e->ssl) {
        int rc = SSL_write(e->ssl, buf, (int)(n > 0x40000000 ? 0x40000000 : n));
        e->write_want = 0;
        if (rc > 0)
            return rc;
        rc = tls_status(e->ssl, rc, &e->write_want);
        return rc == IO_AGAIN ? IO_AGAIN : IO_ERROR;
    }
    w = send(e->fd, buf, n, MSG_NOSIGNAL);
    if (w < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? IO_AGAIN : IO_ERROR;
    return w;
}

static short ep_read_events(const endpoint *e)
{
    return e->read_want ? e->read_want : POLLIN;
}

static short ep_write_events(const endpoint *e)
{
    return e->write_want ? e->write_want : POLLOUT;
}

/* Bytes TLS holds already decrypted or received: poll would not tell. */
static int ep_pending(const endpoint *e)
{
    return e->ssl && SSL_has_pending(e->ssl);
}

/* E's peer learns that nothing more comes (close_notify first with TLS). */
static void ep_shut_write(endpoint *e)
{
    if (e->ssl)
        (void)SSL_shutdown(e->ssl);
    ERR_clear_error();
    shutdown(e->fd, SHUT_WR);
}

/* All N bytes of BUF to E before DEADLINE: 0 or -1. */
static int ep_write_all(endpoint *e, const char *buf, apr_size_t n, long long deadline)
{
    while (n > 0) {
        ssize_t w = ep_send(e, buf, n);
        if (w > 0) {
            buf += w;
            n -= (apr_size_t)w;
        }
        else if (w != IO_AGAIN || wait_fd(e->fd, ep_write_events(e), deadline) != 1) {
            return -1;
        }
    }
    return 0;
}

/* ---- answers to the sandbox ---------------------------------------------- */

/* What the sandbox sent and we will not read: taken from the socket before
 * it is closed, so that the peer reads our answer rather than a reset. */
static void drain_client(int fd)
{
    char buf[4096];
    int i;
    for (i = 0; i < 64; i++)
        if (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0)
            break;
}

/* Answer STATUS_LINE with BODY on E (the sandbox's side, plain or inside
 * a terminated tunnel) and note why in the audit: the connection counts as
 * not relayed. */
static void answer_on(egress_conn *c, endpoint *e, const char *status_line,
                      const char *body)
{
    apr_size_t len;
    const char *r = ci_egress_response(c->pool, status_line, body, &len);
    c->reason = ci_egress_reason(c->pool, body);
    c->allowed = 0;
    (void)ep_write_all(e, r, len, now_ms() + ANSWER_WAIT_MS);
    ep_shut_write(e);
    drain_client(c->client);
}

static void answer(egress_conn *c, const char *status_line, const char *body)
{
    endpoint e = { c->client, NULL, 0, 0 };
    answer_on(c, &e, status_line, body);
}

static void refuse(egress_conn *c, const char *body)
{
    answer(c, CI_EGRESS_STATUS_403, body);
}

/* ---- reading the head ------------------------------------------------------ */

typedef enum { HEAD_OK, HEAD_TOO_LONG, HEAD_TIMEOUT, HEAD_CLOSED } head_status;

/* Reads from E into BUF (CI_EGRESS_HEAD_MAX bytes) until a whole head is
 * there, before DEADLINE: *GOT bytes read, *HEAD_LEN the head's length
 * (what follows is already the body or the tunnel's first bytes). */
static head_status read_head_from(egress_conn *c, endpoint *e, char *buf, apr_size_t *got,
                                  apr_size_t *head_len, long long deadline)
{
    *got = 0;
    for (;;) {
        ssize_t n;
        int ready = ep_pending(e) ? 1 : wait_fd(e->fd, ep_read_events(e), deadline);
        if (ready == 0)
            return HEAD_TIMEOUT;
        if (ready < 0 || atomic_load(&c->cut))
            return HEAD_CLOSED;
        n = ep_recv(e, buf + *got, CI_EGRESS_HEAD_MAX - *got);
        if (n == IO_AGAIN)
            continue;
        if (n <= 0)
            return HEAD_CLOSED;
        *got += (apr_size_t)n;
        if ((*head_len = ci_egress_head_length(buf, *got)) > 0)
            return HEAD_OK;
        if (*got == CI_EGRESS_HEAD_MAX)
            return HEAD_TOO_LONG;
    }
}

/* The sandbox's head, plain, within head_seconds. */
static head_status read_head(egress_conn *c, char *buf, apr_size_t *got,
                             apr_size_t *head_len)
{
    endpoint e = { c->client, NULL, 0, 0 };
    return read_head_from(c, &e, buf, got, head_len,
                          now_ms() + (long long)limits.head_seconds * 1000);
}

/* ---- the decision ---------------------------------------------------------- */

/* The policy's checks before any resolution, in the contract's order: IP
 * literal, port, allowlist. 0, or -1 after answering. */
static int check_policy(egress_conn *c, const ci_egress_request *req)
{
    egress_box *b = c->box;
    if (req->host_is_ip) {
        refuse(c, apr_psprintf(c->pool, CI_EGRESS_TXT_IP_LITERAL, req->host));
        return -1;
    }
    if (req->port != 80 && req->port != 443) {
        refuse(c, apr_psprintf(c->pool, CI_EGRESS_TXT_PORT, req->host, req->port));
        return -1;
    }
    if (!ci_egress_allowed(b->domains, b->ndomains, req->host)) {
        refuse(c, apr_psprintf(c->pool, CI_EGRESS_TXT_NOT_ALLOWED, req->host));
        return -1;
    }
    return 0;
}

/* HOST:PORT resolved here, or NULL (it does not resolve). */
static struct addrinfo *resolve(const char *host, int port)
{
    struct addrinfo hints, *res = NULL;
    char service[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(service, sizeof(service), "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0)
        return NULL;
    return res;
}

/* Every address of RES is public: 0, or -1 after refusing with the first
 * that is not (one bad address is enough: which one a client would get is
 * the resolver's choice, not ours). */
static int check_addresses(egress_conn *c, const char *host, const struct addrinfo *res)
{
    for (; res; res = res->ai_next) {
        ci_egress_addr_class k = ci_egress_classify(res->ai_addr);
        char text[INET6_ADDRSTRLEN] = "?";
        const void *a;
        if (k == CI_EGRESS_PUBLIC)
            continue;
        a = res->ai_family == AF_INET6
            ? (const void *)&((const struct sockaddr_in6 *)res->ai_addr)->sin6_addr
            : (const void *)&((const struct sockaddr_in *)res->ai_addr)->sin_addr;
        if (res->ai_family == AF_INET || res->ai_family == AF_INET6)
            inet_ntop(res->ai_family, a, text, sizeof(text));
        refuse(c, apr_psprintf(c->pool, CI_EGRESS_TXT_ADDRESS, host, text,
                               ci_egress_class_name(k)));
        return -1;
    }
    return 0;
}

/* ---- connecting ------------------------------------------------------------ */

/* A TCP connection to one address of RES, in order, before DEADLINE: the
 * fd (the connection's origin side), or -1. */
static int connect_first(egress_conn *c, const struct addrinfo *res, long long deadline)
{
    for (; res; res = res->ai_next) {
        int err = 0;
        socklen_t elen = sizeof(err);
        int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        res->ai_protocol);
        if (fd < 0)
            continue;
        if (conn_set_origin(c, fd)) {
            close(fd);
            return -1;
        }
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0)
            return fd;
        if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) == 1 &&
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0)
            return fd;
        conn_close_origin(c);
        if (atomic_load(&c->cut) || ms_left(deadline) == 0)
            return -1;
    }
    return -1;
}

typedef enum { TUNNEL_OK, TUNNEL_UNREACHABLE, TUNNEL_REFUSED } tunnel_status;

/* Whether HEAD is an HTTP/1.x answer with a 2xx status. */
static int status_is_2xx(const char *head, apr_size_t len)
{
    return len >= 12 && !strncmp(head, "HTTP/1.", 7) && head[8] == ' ' && head[9] == '2' &&
           head[10] >= '0' && head[10] <= '9' && head[11] >= '0' && head[11] <= '9';
}

/* Through the site proxy to ADDR:PORT, the address resolved and checked
 * here (NULL: HOST by name, the site proxy resolves it): *FD the tunnel,
 * *EXTRA / *EXTRA_LEN what the proxy sent after its answer (the origin's
 * first bytes). The name still travels inside: in the sandbox's TLS
 * ClientHello, in the Host of its requests. */
static tunnel_status site_proxy_tunnel(egress_conn *c, const struct sockaddr *addr,
                                       const char *host, int port, int *fd, char **extra,
                                       apr_size_t *extra_len)
{
    long long deadline = now_ms() + (long long)limits.idle_seconds * 1000;
    struct addrinfo *res = resolve(c->box->proxy_host, c->box->proxy_port);
    char *buf;
    const char *ask;
    apr_size_t got = 0, head_len = 0;

    *fd = res ? connect_first(c, res, deadline) : -1;
    if (res)
        freeaddrinfo(res);
    if (*fd < 0)
        return TUNNEL_UNREACHABLE;
    ask = ci_egress_site_connect(c->pool, addr, host, port);
    if (!ask || write_all(*fd, ask, strlen(ask), deadline))
        return TUNNEL_UNREACHABLE;
    buf = apr_palloc(c->pool, CI_EGRESS_HEAD_MAX);
    while (head_len == 0) {
        ssize_t n;
        if (got == CI_EGRESS_HEAD_MAX || wait_fd(*fd, POLLIN, deadline) != 1)
            return TUNNEL_UNREACHABLE;
        n = recv(*fd, buf + got, CI_EGRESS_HEAD_MAX - got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            return TUNNEL_UNREACHABLE;
        got += (apr_size_t)n;
        head_len = ci_egress_head_length(buf, got);
    }
    if (!status_is_2xx(buf, head_len))
        return TUNNEL_REFUSED;
    *extra = buf + head_len;
    *extra_len = got - head_len;
    return TUNNEL_OK;
}

/* ---- relaying -------------------------------------------------------------- */

/* What a direction does to the bytes it read (ci_egress_content.h): IN (N
 * bytes; EOF: FROM is done) into *OUT / *OUT_LEN. 0; 1 nothing more is
 * read from FROM (and TO is not told: the other way goes on); -1 *OUT is
 * the last that goes. */
typedef int (*relay_filter_fn)(void *arg, const char *in, apr_size_t n, int eof,
                               const char **out, apr_size_t *out_len);

typedef struct relay_dir {
    endpoint *from, *to;
    char buf[RELAY_BUF];
    const char *data;               /* what is written: BUF, or the filter's */
    apr_size_t len, off;            /* bytes in DATA still to write: [off, len) */
    relay_filter_fn filter;         /* NULL: the bytes go as they are */
    void *filter_arg;
    int last;                       /* the filter ended the relay: DATA goes, then the end */
    int eof;                        /* FROM is done */
    int shut;                       /* TO had its write side shut */
    apr_uint64_t *count;
} relay_dir;

static int dir_done(const relay_dir *d)
{
    return d->eof && d->off == d->len;
}

/* Once FROM is done and everything is written, TO learns it. */
static void dir_forward_eof(relay_dir *d)
{
    if (dir_done(d) && !d->shut) {
        ep_shut_write(d->to);
        d->shut = 1;
    }
}

/* Writes what D holds: 1 some went, 0 none (would block), -1 TO is gone. */
static int dir_write(relay_dir *d)
{
    ssize_t n;
    if (d->off == d->len)
        return 0;
    n = ep_send(d->to, (d->data ? d->data : d->buf) + d->off, d->len - d->off);
    if (n == IO_AGAIN)
        return 0;
    if (n < 0)
        return -1;
    d->off += (apr_size_t)n;
    *d->count += (apr_uint64_t)n;
    if (d->off == d->len)
        d->off = d->len = 0;
    dir_forward_eof(d);
    return 1;
}

/* D's filter applied to N bytes of its buffer (EOF: FROM is done): DATA
 * and LEN set. 0, or -1 (what it gave goes out first, then the relay
 * ends). A filter that wants nothing more from FROM counts as its EOF,
 * without TO being told. */
static int dir_filter(relay_dir *d, apr_size_t n, int eof)
{
    const char *out;
    apr_size_t out_len;
    int rc = d->filter(d->filter_arg, d->buf, n, eof, &out, &out_len);
    d->data = out;
    d->off = 0;
    d->len = out_len;
    if (rc == 1) {
        d->eof = 1;
        d->shut = 1;
    }
    if (rc < 0) {
        d->eof = 1;
        d->last = 1;
    }
    return rc < 0 ? -1 : 0;
}

/* Reads into D's empty buffer, within the box's budget: 1 bytes came, 0
 * none, -1 end the relay (an error, or the budget is spent: what was
 * granted still goes out first). */
static int dir_read(egress_conn *c, relay_dir *d)
{
    ssize_t n = ep_recv(d->from, d->buf, sizeof(d->buf));
    apr_size_t granted;
    if (n == IO_AGAIN)
        return 0;
    if (n < 0)
        return -1;
    if (n == 0) {
        if (d->filter)
            (void)dir_filter(d, 0, 1);
        d->eof = 1;
        dir_forward_eof(d);
        return 0;
    }
    granted = budget_take(c->box, (apr_size_t)n);
    if (d->filter) {
        if (dir_filter(d, granted, granted < (apr_size_t)n) < 0 || granted < (apr_size_t)n) {
            (void)ep_write_all(d->to, d->data, d->len, now_ms() + ANSWER_WAIT_MS);
            *d->count += d->len;
            d->off = d->len = 0;
            return -1;
        }
        return 1;
    }
    d->data = d->buf;
    d->off = 0;
    d->len = granted;
    if (granted < (apr_size_t)n) {
        (void)ep_write_all(d->to, d->buf, granted, now_ms() + ANSWER_WAIT_MS);
        *d->count += granted;
        d->off = d->len = 0;
        return -1;
    }
    return 1;
}

/* Sends N bytes from BUF through D before anything else, within the
 * budget: 0 or -1. */
static int dir_send_first(egress_conn *c, relay_dir *d, const char *buf, apr_size_t n)
{
    apr_size_t granted = budget_take(c->box, n);
    int rc = ep_write_all(d->to, buf, granted,
                          now_ms() + (long long)limits.idle_seconds * 1000);
    if (rc == 0)
        *d->count += granted;
    return rc == 0 && granted == n ? 0 : -1;
}

static int dir_wants_read(const relay_dir *d)
{
    return !d->eof && d->len == 0;
}

static int dir_wants_write(const relay_dir *d)
{
    return d->off < d->len;
}

/* The events E's fd is polled for: reading for IN, writing for OUT. */
static short dir_events(const endpoint *e, const relay_dir *in, const relay_dir *out)
{
    return (dir_wants_read(in) ? ep_read_events(e) : 0) |
           (dir_wants_write(out) ? ep_write_events(e) : 0);
}

/* One side's readiness applied to both directions: -1 ends the relay. */
static int dir_step(egress_conn *c, relay_dir *d, int from_ready, int to_ready, int *moved)
{
    int rc;
    if (from_ready && dir_wants_read(d)) {
        if ((rc = dir_read(c, d)) < 0)
            return -1;
        *moved |= rc;
    }
    if ((to_ready || d->len) && dir_wants_write(d)) {
        if ((rc = dir_write(d)) < 0)
            return -1;
        *moved |= rc;
    }
    return 0;
}

/* Both ways between UP (sandbox -> origin) and DOWN until both are done,
 * a side fails, idle_seconds pass without a byte, the budget is spent or
 * the box is removed. Only the fds something is expected of are polled;
 * bytes TLS already holds count as ready. */
static void relay(egress_conn *c, relay_dir *up, relay_dir *down)
{
    long long idle_ms = (long long)limits.idle_seconds * 1000;
    long long last = now_ms();
    long long end_of_life = c->started_ms + (long long)limits.lifetime_seconds * 1000;
    while (!(dir_done(up) && dir_done(down)) && !atomic_load(&c->cut)) {
        struct pollfd pfd[2];
        short ev0 = dir_events(up->from, up, down);
        short ev1 = dir_events(down->from, down, up);
        int held0 = dir_wants_read(up) && ep_pending(up->from);
        int held1 = dir_wants_read(down) && ep_pending(down->from);
        int rc, moved = 0, left = ms_left(last + idle_ms);
        const short ready = POLLIN | POLLOUT | POLLHUP | POLLERR;
        if (ms_left(end_of_life) < left)
            left = ms_left(end_of_life);
        if (ms_left(end_of_life) == 0)
            c->outlived = 1;
        if (left == 0)
            break;
        pfd[0].fd = ev0 ? up->from->fd : -1;
        pfd[0].events = ev0;
        pfd[0].revents = 0;
        pfd[1].fd = ev1 ? down->from->fd : -1;
        pfd[1].events = ev1;
        pfd[1].revents = 0;
        rc = poll(pfd, 2, held0 || held1 ? 0 : left);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc <= 0 && !held0 && !held1)
            continue;
        if (dir_step(c, up, held0 || (pfd[0].revents & ready), pfd[1].revents & ready,
                     &moved) ||
            dir_step(c, down, held1 || (pfd[1].revents & ready), pfd[0].revents & ready,
                     &moved))
            break;
        if (moved)
            last = now_ms();
    }
}

/* ---- one connection -------------------------------------------------------- */

/* Connects C to what REQ names, directly or through the site proxy: the
 * origin fd, or -1 after answering. *EXTRA: bytes for the sandbox already
 * read from the site proxy. */
static int reach_origin(egress_conn *c, const ci_egress_request *req, char **extra,
                        apr_size_t *extra_len)
{
    egress_box *b = c->box;
    struct addrinfo *res = resolve(req->host, req->port);
    int fd = -1;
    tunnel_status ts = TUNNEL_UNREACHABLE;

    *extra = NULL;
    *extra_len = 0;
    if (res && check_addresses(c, req->host, res)) {
        freeaddrinfo(res);
        return -1;
    }
    if (!res && !b->proxy_host) {
        answer(c, CI_EGRESS_STATUS_502,
               apr_psprintf(c->pool, CI_EGRESS_TXT_UNRESOLVED, req->host));
        return -1;
    }
    if (!res && !limits.proxy_resolves) {
        refuse(c, apr_psprintf(c->pool, CI_EGRESS_TXT_NOT_RESOLVED_HERE, req->host));
        return -1;
    }
    /* Never an address the sandbox named: the one resolved and checked
     * here, directly or to the site proxy; the name to the site proxy only
     * when the operator lets it resolve what does not resolve here. */
    if (b->proxy_host)
        ts = site_proxy_tunnel(c, res ? res->ai_addr : NULL, req->host, req->port, &fd,
                               extra, extra_len);
    else if ((fd = connect_first(c, res, now_ms() + (long long)limits.idle_seconds * 1000))
             >= 0)
        ts = TUNNEL_OK;
    if (res)
        freeaddrinfo(res);
    if (ts == TUNNEL_OK)
        return fd;
    conn_close_origin(c);
    answer(c, CI_EGRESS_STATUS_502,
           apr_psprintf(c->pool, ts == TUNNEL_REFUSED ? CI_EGRESS_TXT_PROXY_REFUSED
                                                      : CI_EGRESS_TXT_UNREACHABLE,
                        req->host, req->port));
    return -1;
}

/* The two directions between CLIENT (the sandbox's side) and ORIGIN. */
static void make_dirs(egress_conn *c, endpoint *client, endpoint *origin, relay_dir **up,
                      relay_dir **down)
{
    *up = apr_pcalloc(c->pool, sizeof(**up));
    *down = apr_pcalloc(c->pool, sizeof(**down));
    (*up)->from = (*down)->to = client;
    (*up)->to = (*down)->from = origin;
    (*up)->count = &c->bytes_out;
    (*down)->count = &c->bytes_in;
}

/* What a head that did not come whole means: 0 (HEAD_OK), or -1 after
 * noting why (or answering on E, when it is too long). */
static int head_outcome(egress_conn *c, endpoint *e, head_status st)
{
    switch (st) {
    case HEAD_TIMEOUT:
        c->reason = apr_psprintf(c->pool, "no whole request head within %d s",
                                 limits.head_seconds);
        return -1;
    case HEAD_CLOSED:
        c->reason = "the connection ended before a whole request head";
        return -1;
    case HEAD_TOO_LONG:
        answer_on(c, e, CI_EGRESS_STATUS_400, CI_EGRESS_TXT_MALFORMED);
        return -1;
    case HEAD_OK:
        break;
    }
    return 0;
}

/* A tunnel closed after its 200 (nothing reached the origin): WHY in the
 * audit and the log. -1. */
static int tunnel_refused(egress_conn *c, const char *why)
{
    c->allowed = 0;
    c->reason = why;
    ci_log(CI_LOG_NOTICE, "CI0940: egress: a tunnel of container %s to %s:%d was closed: %s",
           *c->box->container ? c->box->container : "-", c->domain ? c->domain : "-",
           c->port, why);
    return -1;
}

/* SECRETS put into REQ (counted in C), or -1 after answering on E that
 * the head would be too long. */
static int inject_into(egress_conn *c, endpoint *e, ci_egress_request *req,
                       const apr_array_header_t *secrets)
{
    int n = ci_egress_inject(c->pool, req, secrets);
    if (n < 0) {
        answer_on(c, e, CI_EGRESS_STATUS_400, CI_EGRESS_TXT_INJECT_TOO_LONG);
        return -1;
    }
    c->injected += n;
    return 0;
}

/* A tunnel to REQ's host (port 443) carries only that name: the sandbox's
 * first bytes are read (within head_seconds) up to a whole TLS
 * ClientHello (AFTER: what came with the CONNECT's head), whose server
 * name (SNI) must be REQ's host; then they go to the origin as they came
 * (*HELLO, *HELLO_LEN). 0, or -1 after closing
 * the tunnel with the reason in the audit: the 200 is already sent, so
 * there is no answer to give but the close. */
static int tunnel_hello(egress_conn *c, const ci_egress_request *req, const char *after,
                        apr_size_t after_len, char **hello, apr_size_t *hello_len)
{
    char *buf = apr_palloc(c->pool, CI_EGRESS_HELLO_MAX);
    long long deadline = now_ms() + (long long)limits.head_seconds * 1000;
    apr_size_t got = after_len;
    const char *name = NULL;
    ci_egress_hello_status st = CI_EGRESS_HELLO_MORE;
    /* What came with the CONNECT's head is the ClientHello's start. */
    memcpy(buf, after, after_len);
    if (got)
        st = ci_egress_hello_sni(c->pool, (const unsigned char *)buf, got, &name);
    while (st == CI_EGRESS_HELLO_MORE) {
        ssize_t n;
        int ready = wait_fd(c->client, POLLIN, deadline);
        if (ready <= 0 || atomic_load(&c->cut))
            return tunnel_refused(c, ready == 0
                                  ? apr_psprintf(c->pool, CI_EGRESS_WHY_HELLO_SLOW,
                                                 limits.head_seconds)
                                  : "the connection ended before a whole TLS ClientHello");
        n = recv(c->client, buf + got, CI_EGRESS_HELLO_MAX - got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (n <= 0)
            return tunnel_refused(c, "the connection ended before a whole TLS ClientHello");
        got += (apr_size_t)n;
        st = ci_egress_hello_sni(c->pool, (const unsigned char *)buf, got, &name);
    }
    if (st == CI_EGRESS_HELLO_BAD)
        return tunnel_refused(c, apr_psprintf(c->pool, CI_EGRESS_WHY_NOT_TLS, req->host));
    if (st == CI_EGRESS_HELLO_NO_SNI)
        return tunnel_refused(c, apr_psprintf(c->pool, CI_EGRESS_WHY_SNI_NONE, req->host));
    if (strcmp(name, req->host))
        return tunnel_refused(c, apr_psprintf(c->pool, CI_EGRESS_WHY_SNI_OTHER, name,
                                              req->host));
    *hello = buf;
    *hello_len = got;
    return 0;
}

/* The plain path: an absolute-form request (its head rewritten) or a
 * tunnel relayed untouched once its ClientHello names its host. AFTER: what the sandbox
 * sent after its head; EXTRA: what the site proxy sent after its answer. */
static void serve_plain(egress_conn *c, const ci_egress_request *req, int origin,
                        const char *after, apr_size_t after_len, const char *extra,
                        apr_size_t extra_len)
{
    endpoint *cl = apr_pcalloc(c->pool, sizeof(*cl)), *or = apr_pcalloc(c->pool, sizeof(*or));
    relay_dir *up, *down;
    cl->fd = c->client;
    or->fd = origin;
    make_dirs(c, cl, or, &up, &down);
    c->allowed = 1;
    if (req->is_connect) {
        char *hello;
        apr_size_t hello_len;
        if (write_all(c->client, CI_EGRESS_ESTABLISHED, sizeof(CI_EGRESS_ESTABLISHED) - 1,
                      now_ms() + ANSWER_WAIT_MS) ||
            tunnel_hello(c, req, after, after_len, &hello, &hello_len) ||
            dir_send_first(c, up, hello, hello_len))
            return;
        after_len = 0;      /* sent, as the ClientHello's start */
    }
    else {
        apr_size_t len;
        const char *head = ci_egress_rewrite(c->pool, req, &len);
        if (dir_send_first(c, up, head, len))
            return;
    }
    if ((after_len && dir_send_first(c, up, after, after_len)) ||
        (extra_len && dir_send_first(c, down, extra, extra_len)))
        return;
    relay(c, up, down);
}

/* SSL's handshake on FD (SERVER: as the server) before DEADLINE: 0 or -1. */
static int tls_handshake(egress_conn *c, SSL *ssl, int fd, int server, long long deadline)
{
    for (;;) {
        int rc = server ? SSL_accept(ssl) : SSL_connect(ssl);
        short want = POLLIN;
        if (rc == 1)
            return 0;
        if (tls_status(ssl, rc, &want) != IO_AGAIN || atomic_load(&c->cut) ||
            wait_fd(fd, want, deadline) != 1) {
            ERR_clear_error();
            return -1;
        }
    }
}

/* The origin's side of a terminated tunnel to REQ's host, on FD, its
 * certificate and name verified: its SSL, or NULL after answering 502. */
static SSL *origin_tls(egress_conn *c, const ci_egress_request *req, int fd)
{
    SSL *ssl = ci_egress_tls_client_ssl(c->box->origin_ctx, fd, req->host);
    int unverified;
    if (ssl && tls_handshake(c, ssl, fd, 0,
                             now_ms() + (long long)limits.idle_seconds * 1000) == 0)
        return ssl;
    unverified = ssl && SSL_get_verify_result(ssl) != X509_V_OK;
    SSL_free(ssl);
    if (unverified)
        answer(c, CI_EGRESS_STATUS_502,
               apr_psprintf(c->pool, CI_EGRESS_TXT_UNVERIFIED, req->host));
    else
        answer(c, CI_EGRESS_STATUS_502,
               apr_psprintf(c->pool, CI_EGRESS_TXT_UNREACHABLE, req->host, req->port));
    return NULL;
}

/* The filters of a terminated tunnel's two directions: the sandbox's
 * one request (its body, then nothing), the origin's answer (scanned). */
typedef struct one_request {
    egress_conn *c;
    ci_egress_body body;
    ci_egress_answer_filter *answer;
} one_request;

static int request_body_filter(void *arg, const char *in, apr_size_t n, int eof,
                               const char **out, apr_size_t *out_len)
{
    one_request *o = arg;
    apr_ssize_t took = ci_egress_body_take(&o->body, in, n);
    (void)eof;
    *out = in;
    *out_len = took > 0 ? (apr_size_t)took : 0;
    if (took < 0)
        return -1;
    /* What follows the body (another request) never goes: one request per
     * connection, the origin told "Connection: close". */
    return o->body.done ? 1 : 0;
}

static int answer_filter(void *arg, const char *in, apr_size_t n, int eof,
                         const char **out, apr_size_t *out_len)
{
    one_request *o = arg;
    int rc = ci_egress_answer_filter_feed(o->answer, in, n, eof, out, out_len);
    o->c->scrubbed = ci_egress_answer_filter_count(o->answer);
    if (rc < 0)
        ci_log(CI_LOG_NOTICE, "CI0941: egress: container %s: the answer of %s could not be "
               "scanned for its secrets (compressed, or malformed): cut",
               *o->c->box->container ? o->c->box->container : "-", o->c->domain);
    return rc;
}

/* Inside a terminated tunnel: the sandbox's one request read (its head
 * before DEADLINE), checked (its Host the tunnel's), its secrets put in,
 * identity encoding asked for, sent to the origin with its body; then the
 * answer back, the values taken out of it. */
static void relay_one_request(egress_conn *c, const ci_egress_request *tunnel,
                              const apr_array_header_t *secrets, endpoint *cl, endpoint *or,
                              long long deadline)
{
    char *buf = apr_palloc(c->pool, CI_EGRESS_HEAD_MAX);
    apr_size_t got = 0, head_len = 0, len;
    ci_egress_request req;
    relay_dir *up, *down;
    const char *head;
    one_request *o = apr_pcalloc(c->pool, sizeof(*o));
    apr_ssize_t body;
    int rc;

    if (head_outcome(c, cl, read_head_from(c, cl, buf, &got, &head_len, deadline)))
        return;
    rc = ci_egress_parse_tunnel_head(c->pool, buf, head_len, tunnel->host, tunnel->port,
                                     cl->ssl != NULL, &req);
    if (rc == CI_EGRESS_OTHER_HOST) {
        answer_on(c, cl, CI_EGRESS_STATUS_403, apr_psprintf(c->pool, CI_EGRESS_TXT_OTHER_HOST,
                                                            tunnel->host, tunnel->port));
        return;
    }
    if (rc || ci_egress_body_start(&req, &o->body)) {
        answer_on(c, cl, CI_EGRESS_STATUS_400, CI_EGRESS_TXT_MALFORMED);
        return;
    }
    if (inject_into(c, cl, &req, secrets))
        return;
    ci_egress_identity_encoding(c->pool, &req);
    head = ci_egress_rewrite(c->pool, &req, &len);
    o->c = c;
    o->answer = ci_egress_answer_filter_make(c->pool, secrets, tunnel->host,
                                             !strcmp(req.method, "HEAD"));
    make_dirs(c, cl, or, &up, &down);
    up->filter = request_body_filter;
    up->filter_arg = o;
    down->filter = answer_filter;
    down->filter_arg = o;
    body = ci_egress_body_take(&o->body, buf + head_len, got - head_len);
    if (body < 0 || dir_send_first(c, up, head, len) ||
        (body > 0 && dir_send_first(c, up, buf + head_len, (apr_size_t)body)))
        return;
    if (o->body.done) {
        up->eof = 1;
        up->shut = 1;
    }
    relay(c, up, down);
}

/* A CONNECT to port 443 of a host with secrets: TLS on both sides (the
 * origin verified before the 200, the sandbox's ClientHello naming the
 * host), one request read, checked and rewritten, its answer scanned. */
static void serve_terminated(egress_conn *c, const ci_egress_request *req,
                             const apr_array_header_t *secrets, int origin)
{
    endpoint *cl = apr_pcalloc(c->pool, sizeof(*cl)), *or = apr_pcalloc(c->pool, sizeof(*or));
    ci_egress_sni_check *check = apr_pcalloc(c->pool, sizeof(*check));
    long long deadline;
    cl->fd = c->client;
    or->fd = origin;
    if (!(or->ssl = origin_tls(c, req, origin)))
        return;
    if (write_all(c->client, CI_EGRESS_ESTABLISHED, sizeof(CI_EGRESS_ESTABLISHED) - 1,
                  now_ms() + ANSWER_WAIT_MS) == 0) {
        c->allowed = 1;
        c->tls_terminated = 1;
        deadline = now_ms() + (long long)limits.head_seconds * 1000;
        if ((cl->ssl = ci_egress_tls_server_ssl(c->client, req->host, check)) &&
            tls_handshake(c, cl->ssl, c->client, 1, deadline) == 0)
            relay_one_request(c, req, secrets, cl, or, deadline);
        else if (check->verdict == CI_EGRESS_HELLO_SNI)
            tunnel_refused(c, apr_psprintf(c->pool, CI_EGRESS_WHY_SNI_OTHER, check->name,
                                           req->host));
        else if (check->verdict == CI_EGRESS_HELLO_NO_SNI)
            tunnel_refused(c, apr_psprintf(c->pool, CI_EGRESS_WHY_SNI_NONE, req->host));
        else if (check->verdict == CI_EGRESS_HELLO_BAD)
            tunnel_refused(c, apr_psprintf(c->pool, CI_EGRESS_WHY_NOT_TLS, req->host));
    }
    SSL_free(cl->ssl);
    SSL_free(or->ssl);
}

/* What the policy refuses for domain secrets and tunnels, after the
 * allowlist: a tunnel to port 80 (plain http is sent in absolute form,
 * where every request is checked), plain http to a host with secrets (a
 * value never crosses the network in clear). 0, or -1 after answering. */
static int check_tunnels_and_secrets(egress_conn *c, const ci_egress_request *req,
                                     const apr_array_header_t *secrets)
{
    if (req->is_connect && req->port == 80) {
        refuse(c, apr_psprintf(c->pool, CI_EGRESS_TXT_CONNECT_80, req->host));
        return -1;
    }
    if (!req->is_connect && secrets->nelts > 0) {
        refuse(c, apr_psprintf(c->pool, CI_EGRESS_TXT_PLAIN_SECRET, req->host));
        return -1;
    }
    return 0;
}

/* Whether a CONNECT to REQ's host (SECRETS its secrets) is terminated
 * (port 443 only: CONNECT to 80 is refused). */
static int terminates(const egress_conn *c, const ci_egress_request *req,
                      const apr_array_header_t *secrets)
{
    if (!req->is_connect || secrets->nelts == 0)
        return 0;
    return ci_egress_tls_can_terminate() && c->box->origin_ctx;
}

static void serve_connection(egress_conn *c)
{
    char *buf = apr_palloc(c->pool, CI_EGRESS_HEAD_MAX);
    apr_size_t got = 0, head_len = 0, extra_len = 0;
    char *extra = NULL;
    ci_egress_request req;
    const apr_array_header_t *secrets;
    endpoint cl = { c->client, NULL, 0, 0 };
    int origin = -1;

    if (head_outcome(c, &cl, read_head(c, buf, &got, &head_len)))
        return;
    if (ci_egress_parse_head(c->pool, buf, head_len, &req)) {
        answer(c, CI_EGRESS_STATUS_400, CI_EGRESS_TXT_MALFORMED);
        return;
    }
    c->method = req.method;
    c->domain = req.host;
    c->port = req.port;
    if (check_policy(c, &req))
        return;
    secrets = ci_egress_secrets_for(c->pool, c->box->secrets, c->box->nsecrets, req.host);
    if (check_tunnels_and_secrets(c, &req, secrets))
        return;
    if ((origin = reach_origin(c, &req, &extra, &extra_len)) < 0)
        return;
    if (!terminates(c, &req, secrets)) {
        serve_plain(c, &req, origin, buf + head_len, got - head_len, extra, extra_len);
        return;
    }
    /* The origin speaks after the request: bytes before it are not HTTP. */
    if (extra_len)
        answer(c, CI_EGRESS_STATUS_502, apr_psprintf(c->pool, CI_EGRESS_TXT_UNREACHABLE,
                                                     req.host, req.port));
    else if (got > head_len)
        answer(c, CI_EGRESS_STATUS_400, CI_EGRESS_TXT_MALFORMED);
    else
        serve_terminated(c, &req, secrets, origin);
}

static void *connection_thread(void *arg)
{
    egress_conn *c = arg;
    if (apr_pool_create_unmanaged_ex(&c->pool, NULL, NULL) == APR_SUCCESS) {
        serve_connection(c);
        note_outcome(c);
    }
    conn_end(c);
    return NULL;
}

/* ---- the main thread: accepting -------------------------------------------- */

/* Connections answered at accept, kept open (their write side shut) until
 * the sandbox closes them or LINGER_MS pass: a client that writes its head
 * after our answer must not find the socket closed (EPIPE) and miss the
 * answer. The main thread's, polled with the listeners. */
#define LINGER_MAX 2048
#define LINGER_MS 2000
/* How many linger at most: LINGER_MAX, or less when descriptors are few
 * (fit_descriptors). Past it the oldest is closed, and its answer may be
 * lost: a burst of refusals (one owner's containers at their share at
 * once) must fit. */
static int linger_cap = LINGER_MAX;
static struct lingering {
    int fd;
    long long until;
} lingering[LINGER_MAX];
static int nlingering;

/* Kept open for answer_on_spare_fd. */
static int spare_fd = -1;

static void linger_close(int i)
{
    close(lingering[i].fd);
    lingering[i] = lingering[--nlingering];
}

static void linger_add(int fd)
{
    if (nlingering >= linger_cap)
        linger_close(0);
    lingering[nlingering].fd = fd;
    lingering[nlingering].until = now_ms() + LINGER_MS;
    nlingering++;
}

/* Reads and drops what a lingering connection sent; closes it at its EOF,
 * an error or its time. */
static void linger_service(int i, short revents)
{
    char buf[4096];
    ssize_t n = 1;
    int rounds;
    for (rounds = 0; revents && rounds < 16; rounds++)
        if ((n = recv(lingering[i].fd, buf, sizeof(buf), MSG_DONTWAIT)) <= 0)
            break;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
        now_ms() >= lingering[i].until)
        linger_close(i);
}

/* An answer written at once (a few hundred bytes always fit an empty
 * socket buffer), without a thread. */
static void answer_at_accept(egress_box *b, int fd, const char *status_line,
                             const char *body)
{
    char buf[512];
    egress_conn c;
    int n = snprintf(buf, sizeof(buf), CI_EGRESS_RESPONSE_FORMAT, status_line,
                     (unsigned long)strlen(body), body);
    char reason[256];
    apr_size_t rn = strlen(body);
    if (n > 0 && (size_t)n < sizeof(buf))
        (void)!send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    linger_add(fd);
    /* The audit's reason, without the pool ci_egress_reason wants. */
    if (!strncmp(body, CI_EGRESS_REFUSED_PREFIX, sizeof(CI_EGRESS_REFUSED_PREFIX) - 1)) {
        body += sizeof(CI_EGRESS_REFUSED_PREFIX) - 1;
        rn -= sizeof(CI_EGRESS_REFUSED_PREFIX) - 1;
    }
    else if (!strncmp(body, CI_EGRESS_ERROR_PREFIX, sizeof(CI_EGRESS_ERROR_PREFIX) - 1)) {
        body += sizeof(CI_EGRESS_ERROR_PREFIX) - 1;
        rn -= sizeof(CI_EGRESS_ERROR_PREFIX) - 1;
    }
    snprintf(reason, sizeof(reason), "%.*s", (int)(rn ? rn - 1 : 0), body);
    memset(&c, 0, sizeof(c));
    c.box = b;
    c.started = apr_time_now();
    c.started_ms = now_ms();
    c.reason = reason;
    note_outcome(&c);
}

/* C, just listed in B by admit, taken out again (its owner refused it). */
static void admit_undo(egress_box *b, egress_conn *c)
{
    pthread_mutex_lock(&b->lock);
    if (c->next)
        c->next->prev = NULL;
    b->conns = c->next;
    b->open--;
    b->refs--;
    pthread_mutex_unlock(&b->lock);
    free(c);
}

/* A new connection of B on FD: counted, listed, given a thread. */
static void admit(egress_box *b, int fd)
{
    char body[160];
    egress_conn *c;
    pthread_t t;
    int full;

    if (atomic_load(&total_open) >= limits.max_total) {
        snprintf(body, sizeof(body), CI_EGRESS_TXT_BUSY, limits.max_total);
        answer_at_accept(b, fd, CI_EGRESS_STATUS_503, body);
        return;
    }
    c = calloc(1, sizeof(*c));
    pthread_mutex_lock(&b->lock);
    full = b->open >= limits.max_connections;
    if (!full && c) {
        c->box = b;
        c->client = fd;
        c->origin = -1;
        c->started = apr_time_now();
        c->started_ms = now_ms();
        c->next = b->conns;
        if (b->conns)
            b->conns->prev = c;
        b->conns = c;
        b->open++;
        b->refs++;
    }
    pthread_mutex_unlock(&b->lock);
    if (full || !c) {
        free(c);
        snprintf(body, sizeof(body), CI_EGRESS_TXT_TOO_MANY, limits.max_connections);
        answer_at_accept(b, fd, CI_EGRESS_STATUS_403, body);
        return;
    }
    if (owner_take(b->owner)) {
        admit_undo(b, c);
        snprintf(body, sizeof(body), CI_EGRESS_TXT_OWNER_TOO_MANY, limits.max_per_owner);
        answer_at_accept(b, fd, CI_EGRESS_STATUS_403, body);
        return;
    }
    c->owner = b->owner;
    atomic_fetch_add(&total_open, 1);
    if (pthread_create(&t, &thread_attr, connection_thread, c) != 0) {
        ci_log(CI_LOG_ERR, "CI0903: the egress proxy could not start a thread");
        conn_end(c);
    }
}

/* Out of descriptors, the connection waiting first on B's listener still
 * gets an answer rather than wait unseen (the sandbox's relay would block
 * on a full backlog): the spare descriptor is let go for it, the 503
 * written, the connection closed, the spare taken again. */
static void answer_on_spare_fd(egress_box *b)
{
    char body[160];
    int fd;
    if (spare_fd < 0)
        return;
    close(spare_fd);
    fd = accept4(b->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
        snprintf(body, sizeof(body), CI_EGRESS_TXT_BUSY, limits.max_total);
        answer_at_accept(b, fd, CI_EGRESS_STATUS_503, body);
        linger_close(nlingering - 1);     /* the one just added: no fd to spare */
    }
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Accepts what is waiting on B's listener: 0, or -1 when out of fds (the
 * loop then leaves the listeners alone a moment rather than spin). */
static int accept_some(egress_box *b)
{
    int i;
    for (i = 0; i < ACCEPT_BURST; i++) {
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            admit(b, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            ci_log(CI_LOG_ERR, "CI0904: the egress proxy cannot accept: %s",
                   strerror(errno));
            if (errno == EMFILE || errno == ENFILE)
                answer_on_spare_fd(b);
            return -1;
        }
        break;
    }
    return 0;
}

/* ---- the main thread: commands --------------------------------------------- */

static const char *json_string_or(json_object *o, const char *key, const char *dflt)
{
    json_object *v;
    if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    return dflt;
}

/* The domains of POLICY into B: entries as given (the matcher ignores case
 * and a trailing dot). */
static int box_take_domains(egress_box *b, json_object *policy)
{
    json_object *list;
    apr_size_t i, n;
    if (!json_object_object_get_ex(policy, "domains", &list) ||
        !json_object_is_type(list, json_type_array))
        return -1;
    n = json_object_array_length(list);
    b->domains = apr_pcalloc(b->pool, (n + 1) * sizeof(*b->domains));
    for (i = 0; i < n; i++) {
        json_object *d = json_object_array_get_idx(list, i);
        if (!json_object_is_type(d, json_type_string))
            return -1;
        b->domains[b->ndomains++] = apr_pstrdup(b->pool, json_object_get_string(d));
    }
    return 0;
}

/* One secret of POLICY's "secrets" into S (B's pool): 0 or -1. The
 * domain lower-cased, as hosts are normalised. */
static int take_secret(egress_box *b, json_object *o, ci_egress_secret *s)
{
    char *domain;
    apr_size_t i;
    if (!json_object_is_type(o, json_type_object))
        return -1;
    domain = apr_pstrdup(b->pool, json_string_or(o, "domain", ""));
    for (i = 0; domain[i]; i++)
        if (domain[i] >= 'A' && domain[i] <= 'Z')
            domain[i] = (char)(domain[i] - 'A' + 'a');
    s->domain = domain;
    s->placeholder = apr_pstrdup(b->pool, json_string_or(o, "placeholder", ""));
    s->value = apr_pstrdup(b->pool, json_string_or(o, "value", ""));
    return ci_egress_secret_valid(s) ? 0 : -1;
}

/* POLICY's "secrets" (optional) into B, and with them the context that
 * verifies origins against "origin_ca" (optional). 0 or -1. */
static int box_take_secrets(egress_box *b, json_object *policy)
{
    json_object *list;
    apr_size_t i, n;
    if (!json_object_object_get_ex(policy, "secrets", &list))
        return 0;
    if (!json_object_is_type(list, json_type_array))
        return -1;
    n = json_object_array_length(list);
    b->secrets = apr_pcalloc(b->pool, (n + 1) * sizeof(*b->secrets));
    for (i = 0; i < n; i++) {
        if (take_secret(b, json_object_array_get_idx(list, i), &b->secrets[b->nsecrets]))
            return -1;
        b->nsecrets++;
    }
    if (n && !(b->origin_ctx = ci_egress_tls_client_ctx(json_string_or(policy, "origin_ca",
                                                                      NULL)))) {
        ci_log(CI_LOG_ERR, "CI0914: egress: sandbox %u: its origin_ca does not load",
               (unsigned)b->key);
        return -1;
    }
    return 0;
}

/* POLICY's JSON text (LEN bytes) into B: 0 or -1. */
static int box_take_policy(egress_box *b, const char *text, apr_size_t len)
{
    json_tokener *tok = json_tokener_new();
    json_object *policy = tok ? json_tokener_parse_ex(tok, text, (int)len) : NULL;
    const char *proxy;
    int rc = -1;
    if (tok)
        json_tokener_free(tok);
    if (!policy || !json_object_is_type(policy, json_type_object))
        goto done;
    b->container = apr_pstrdup(b->pool, json_string_or(policy, "container", ""));
    b->tool = apr_pstrdup(b->pool, json_string_or(policy, "tool", ""));
    b->owner = owner_attach(json_string_or(policy, "owner", NULL));
    proxy = json_string_or(policy, "proxy", NULL);
    if (box_take_domains(b, policy) || box_take_secrets(b, policy) ||
        (proxy && ci_egress_parse_proxy(b->pool, proxy, &b->proxy_host, &b->proxy_port)))
        goto done;
    rc = 0;
done:
    json_object_put(policy);
    return rc;
}

static int registry_push(egress_box *b)
{
    if (nboxes == boxes_cap) {
        int cap = boxes_cap ? boxes_cap * 2 : 16;
        egress_box **grown = realloc(boxes, (size_t)cap * sizeof(*boxes));
        if (!grown)
            return -1;
        boxes = grown;
        boxes_cap = cap;
    }
    boxes[nboxes++] = b;
    return 0;
}

static void registry_drop(egress_box *b)
{
    int i;
    for (i = 0; i < nboxes; i++)
        if (boxes[i] == b) {
            boxes[i] = boxes[--nboxes];
            return;
        }
}

/* ADD: KEY listens on FD with POLICY. FD is closed on any failure. */
static void command_add(apr_uint32_t key, int fd, const char *policy, apr_size_t len)
{
    egress_box *b;
    int accepting = 0;
    socklen_t alen = sizeof(accepting);
    if (fd < 0 || find_box(key) ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &alen) || !accepting ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)) {
        ci_log(CI_LOG_ERR, "CI0905: egress: sandbox %u was not added (no listening "
               "socket, or added twice)", (unsigned)key);
        if (fd >= 0)
            close(fd);
        return;
    }
    b = calloc(1, sizeof(*b));
    if (!b || apr_pool_create_unmanaged_ex(&b->pool, NULL, NULL) != APR_SUCCESS) {
        free(b);
        close(fd);
        ci_log(CI_LOG_ERR, "CI0906: egress: out of memory adding sandbox %u", (unsigned)key);
        return;
    }
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_init(&b->refusals.lock, NULL);
    b->key = key;
    b->listen_fd = fd;
    b->refs = 1;
    if (box_take_policy(b, policy, len) || registry_push(b)) {
        ci_log(CI_LOG_ERR, "CI0907: egress: sandbox %u has a policy that does not "
               "parse", (unsigned)key);
        close(fd);
        box_free(b);
        return;
    }
    ci_log(CI_LOG_DEBUG, "CI0908: egress: sandbox %u added (%d domains, %d secrets%s)",
           (unsigned)key, b->ndomains, b->nsecrets,
           b->proxy_host ? ", through the site proxy" : "");
}

/* REMOVE: the listener closed, every connection shut down both ways (their
 * threads see it and end). */
static void command_remove(apr_uint32_t key)
{
    egress_box *b = find_box(key);
    egress_conn *c;
    if (!b)
        return;
    registry_drop(b);
    close(b->listen_fd);
    b->listen_fd = -1;
    pthread_mutex_lock(&b->lock);
    b->removed = 1;
    for (c = b->conns; c; c = c->next) {
        atomic_store(&c->cut, 1);
        shutdown(c->client, SHUT_RDWR);
        if (c->origin >= 0)
            shutdown(c->origin, SHUT_RDWR);
    }
    pthread_mutex_unlock(&b->lock);
    box_unref(b);
}

static void command_execution(apr_uint32_t key)
{
    egress_box *b = find_box(key);
    if (b)
        atomic_store(&b->used, 0);
}

/* CLAIM: KEY's sandbox is now a container's, of an owner: its lines name
 * the container, its new connections count in the owner's (those open
 * stay counted where they were). */
static void command_claim(apr_uint32_t key, const char *text, apr_size_t len)
{
    egress_box *b = find_box(key);
    json_tokener *tok;
    json_object *o;
    if (!b)
        return;
    tok = json_tokener_new();
    o = tok ? json_tokener_parse_ex(tok, text, (int)len) : NULL;
    if (tok)
        json_tokener_free(tok);
    if (!o || !json_object_is_type(o, json_type_object)) {
        ci_log(CI_LOG_ERR, "CI0931: egress: sandbox %u: a claim that does not parse",
               (unsigned)key);
        json_object_put(o);
        return;
    }
    owner_detach(b->owner);
    b->owner = owner_attach(json_string_or(o, "owner", NULL));
    /* The container's id, for lines written from now on (a warm sandbox
     * ran no code: it has no connection to read the one before). */
    b->container = apr_pstrdup(b->pool, json_string_or(o, "container", ""));
    json_object_put(o);
}

/* The fd a message carried (the first; any other is closed), or -1. */
static int passed_fd(struct msghdr *msg)
{
    struct cmsghdr *c;
    int fd = -1;
    for (c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        apr_size_t i, n;
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (i = 0; i < n; i++) {
            int one;
            memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (fd < 0)
                fd = one;
            else
                close(one);
        }
    }
    return fd;
}

/* The waiting commands: 1 some were handled, 0 none, -1 the supervisor
 * is gone. */
static int handle_commands(int control)
{
    static char buf[sizeof(ctl_header) + CTL_POLICY_MAX + 1];
    int handled = 0;
    for (;;) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } u;
        struct iovec iov = { buf, sizeof(buf) };
        struct msghdr msg;
        ctl_header h;
        ssize_t n;
        int fd;
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof(u.buf);
        n = recvmsg(control, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n == 0)
            return -1;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? handled : -1;
        handled = 1;
        fd = passed_fd(&msg);
        if ((apr_size_t)n < sizeof(h) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
            ci_log(CI_LOG_ERR, "CI0909: egress: a control message was cut or too short");
            if (fd >= 0)
                close(fd);
            continue;
        }
        memcpy(&h, buf, sizeof(h));
        if (h.cmd == CMD_ADD) {
            buf[n] = '\0';
            command_add(h.key, fd, buf + sizeof(h), (apr_size_t)n - sizeof(h));
            /* The policy's secrets leave no copy here. */
            OPENSSL_cleanse(buf, (size_t)n);
            continue;
        }
        if (fd >= 0)
            close(fd);
        if (h.cmd == CMD_CLAIM) {
            buf[n] = '\0';
            command_claim(h.key, buf + sizeof(h), (apr_size_t)n - sizeof(h));
        }
        else if (h.cmd == CMD_REMOVE)
            command_remove(h.key);
        else if (h.cmd == CMD_EXECUTION)
            command_execution(h.key);
        else
            ci_log(CI_LOG_ERR, "CI0910: egress: unknown control command %u",
                   (unsigned)h.cmd);
    }
}

/* ---- the main loop --------------------------------------------------------- */

/* Until the control socket closes. The listeners and the lingering
 * connections are polled in the same call; after commands were handled
 * the poll starts again, so that no listener of a box just removed is
 * touched, and an EXECUTION sent before a connection is seen before it. */
static void serve(int control)
{
    struct pollfd *pfd = NULL;
    egress_box **polled = NULL;
    int cap = 0;
    long long paused_until = 0;
    for (;;) {
        int i, n = 1, first_linger, timeout = -1, listening = now_ms() >= paused_until;
        if (cap < nboxes + nlingering + 1) {
            cap = nboxes + LINGER_MAX + 16;
            pfd = realloc(pfd, (size_t)cap * sizeof(*pfd));
            polled = realloc(polled, (size_t)cap * sizeof(*polled));
            if (!pfd || !polled)
                _exit(1);
        }
        pfd[0].fd = control;
        pfd[0].events = POLLIN;
        for (i = 0; listening && i < nboxes; i++, n++) {
            pfd[n].fd = boxes[i]->listen_fd;
            pfd[n].events = POLLIN;
            polled[n] = boxes[i];
        }
        first_linger = n;
        for (i = 0; i < nlingering; i++, n++) {
            pfd[n].fd = lingering[i].fd;
            pfd[n].events = POLLIN;
            timeout = 100;      /* their time is checked every tenth of a second */
        }
        if (!listening)
            timeout = 100;
        /* Refusals counted by connections' threads go out within a second:
         * while there are boxes the loop looks at their counts four times
         * a second (a thread counting one does not wake it). */
        if (nboxes > 0 && (timeout < 0 || timeout > REFUSAL_LOG_MS / 4))
            timeout = REFUSAL_LOG_MS / 4;
        for (i = 0; i < n; i++)
            pfd[i].revents = 0;
        if (poll(pfd, (nfds_t)n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            ci_log(CI_LOG_ERR, "CI0911: egress: poll failed: %s", strerror(errno));
            _exit(1);
        }
        if (pfd[0].revents) {
            int rc = handle_commands(control);
            if (rc < 0)
                return;
            if (rc > 0)
                continue;
        }
        /* From the last, as linger_close moves the last into a freed slot. */
        for (i = n - 1; i >= first_linger; i--)
            linger_service(i - first_linger, pfd[i].revents);
        for (i = 1; i < first_linger; i++)
            if ((pfd[i].revents & POLLIN) && accept_some(polled[i]) < 0)
                paused_until = now_ms() + 100;
        for (i = 0; i < nboxes; i++)
            refusals_flush(boxes[i], 0);
    }
}

/* ---- the process ----------------------------------------------------------- */

static void close_range_or_loop(unsigned first, unsigned last)
{
    unsigned fd;
    if (first > last)
        return;
    if (syscall(SYS_close_range, first, last, 0U) == 0)
        return;
    for (fd = first; fd <= last && fd < 65536; fd++)
        close((int)fd);
}

/* FD moved to a number above 2 (0..2 are about to be /dev/null and the
 * log). */
static int above_stdio(int fd)
{
    int moved;
    if (fd < 0 || fd > 2)
        return fd;
    moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return moved;
}

/* Nothing inherited but the control socket, the audit file and the log:
 * 0 and 1 become /dev/null, every other fd is closed. */
static int keep_only(int *control, int *audit)
{
    int devnull, lo, hi;
    *control = above_stdio(*control);
    *audit = above_stdio(*audit);
    if (*control < 0)
        return -1;
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
    }
    lo = *audit >= 0 && *audit < *control ? *audit : *control;
    hi = *audit > *control ? *audit : *control;
    close_range_or_loop(3, (unsigned)lo - 1);
    if (hi != lo)
        close_range_or_loop((unsigned)lo + 1, (unsigned)hi - 1);
    close_range_or_loop((unsigned)hi + 1, ~0U);
    return 0;
}

/* Descriptors: two per connection (the sandbox's side and the origin's),
 * the lingering ones, and a reserve (listeners, the resolver's and TLS's
 * files, the log, the spare). The soft limit is raised to the hard one (a
 * service's soft limit is often 1024: 512 connections would not fit, and
 * accept and socket would fail under load); when even that is not
 * enough the pool is lowered to what fits, said once. Then the owners'
 * default share: a quarter of the pool. */
#define FD_RESERVE 256
#define LINGER_MIN 64
static void fit_descriptors(void)
{
    struct rlimit rl;
    long long room;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        /* the lingering give way first, down to a few */
        room = (long long)rl.rlim_cur - FD_RESERVE - 2LL * limits.max_total;
        if (room < linger_cap)
            linger_cap = room < LINGER_MIN ? LINGER_MIN : (int)room;
        room = ((long long)rl.rlim_cur - linger_cap - FD_RESERVE) / 2;
        if (room < limits.max_total) {
            ci_log(CI_LOG_WARNING, "CI0933: the egress proxy may open %llu files: it "
                   "allows %lld connections at once, not %d", (unsigned long long)rl.rlim_cur,
                   room < 1 ? 1 : room, limits.max_total);
            limits.max_total = room < 1 ? 1 : (int)room;
        }
    }
    if (limits.max_per_owner <= 0)
        limits.max_per_owner = limits.max_total / 4 > 0 ? limits.max_total / 4 : 1;
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void proxy_main(int control, int audit, const ci_egress_limits *lim)
{
    prctl(PR_SET_NAME, "ci-egress");
    ci_signals_default();
    /* A peer that went away is an error to handle, not a reason to die. */
    signal(SIGPIPE, SIG_IGN);
    ci_log_set(ci_log_stderr_sink, inherited_log_level());
    if (keep_only(&control, &audit))
        _exit(1);
    limits = *lim;
    audit_fd = audit;
    fit_descriptors();
    if (ci_egress_tls_init())
        ci_log(CI_LOG_ERR, "CI0915: the egress proxy has no leaf key: TLS is not "
               "terminated, no domain secret is sent");
    pthread_attr_init(&thread_attr);
    pthread_attr_setdetachstate(&thread_attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&thread_attr, THREAD_STACK);
    ci_log(CI_LOG_DEBUG, "CI0912: the egress proxy runs");
    serve(control);
    ci_log(CI_LOG_DEBUG, "CI0913: the egress proxy ends: its supervisor is gone");
    _exit(0);
}

pid_t ci_egress_start(apr_pool_t *p, const ci_egress_limits *lim,
                      const ci_egress_ca *ca, int audit_fd, int *control)
{
    int sv[2], audit = -1, err;
    pid_t pid;
    (void)p;    /* nothing of the caller's outlives the call */
    /* Parsed here, so that a CA that does not parse fails the start; the
     * child keeps the parsed copy, this process drops it. */
    if (ci_egress_tls_load_ca(ca)) {
        errno = EINVAL;
        return -1;
    }
    if (audit_fd >= 0 && (audit = fcntl(audit_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
        err = errno;
        ci_egress_tls_drop_ca();
        errno = err;
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        err = errno;
        if (audit >= 0)
            close(audit);
        ci_egress_tls_drop_ca();
        errno = err;
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        close(sv[0]);
        proxy_main(sv[1], audit, lim);
    }
    err = errno;
    ci_egress_tls_drop_ca();
    close(sv[1]);
    if (audit >= 0)
        close(audit);
    if (pid < 0) {
        close(sv[0]);
        errno = err;
        return -1;
    }
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    *control = sv[0];
    return pid;
}

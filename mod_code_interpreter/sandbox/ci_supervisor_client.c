/*
 * ci_supervisor_client.c - httpd's children talking to the local sandbox
 * supervisor (ci_supervisor_client.h): connections and HELLO, the frames,
 * the directory's questions on a connection kept per thread, status, and
 * file operations with an upload's data.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <apr_strings.h>
#include "ci_supervisor_client.h"

#define READ_CHUNK 65536

static const char *socket_path;

void ci_supervisor_set_path(const char *path)
{
    socket_path = path;
}

int ci_sup_send(int fd, int type, apr_uint32_t id, const char *data, apr_size_t len)
{
    unsigned char hdr[CI_SUP_HEADER];
    struct iovec iov[2];
    struct msghdr msg;
    ci_sup_header(hdr, type, id, len);
    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = len ? 2 : 1;
    while (msg.msg_iovlen) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        while (msg.msg_iovlen && (size_t)n >= msg.msg_iov->iov_len) {
            n -= (ssize_t)msg.msg_iov->iov_len;
            msg.msg_iov++;
            msg.msg_iovlen--;
        }
        if (msg.msg_iovlen) {
            msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + n;
            msg.msg_iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

int ci_supervisor_read_frame(int fd, ci_sup_reader *r, apr_time_t deadline, ci_sup_frame *f)
{
    char buf[READ_CHUNK];
    while (!ci_sup_reader_next(r, f)) {
        struct pollfd pfd = { fd, POLLIN, 0 };
        apr_interval_time_t left = deadline - apr_time_now();
        ssize_t n;
        int rc;
        if (left <= 0)
            return -1;
        rc = poll(&pfd, 1, (int)apr_time_as_msec(left) + 1);
        if (rc < 0 && errno != EINTR)
            return 0;
        if (rc <= 0)
            continue;
        n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || ci_sup_reader_feed(r, buf, (apr_size_t)n) < 0)
            return 0;
    }
    return 1;
}

static int send_hello(int fd, apr_pool_t *p)
{
    apr_size_t len;
    const char *h = ci_sup_hello(p, &len);
    return ci_sup_send(fd, CI_SUP_HELLO, 0, h, len);
}

/* The supervisor's HELLO, read with R: 0 when it speaks our version. */
static int check_hello(int fd, ci_sup_reader *r, apr_pool_t *p, const char **err)
{
    ci_sup_frame f;
    int version;
    if (ci_supervisor_read_frame(fd, r, apr_time_now() + CI_SUP_ANSWER_WAIT, &f) != 1 ||
        f.type != CI_SUP_HELLO) {
        *err = "the sandbox supervisor did not answer";
        return -1;
    }
    if ((version = ci_sup_hello_version(&f)) != CI_SUP_VERSION) {
        *err = apr_psprintf(p, "the sandbox supervisor speaks protocol version %d, "
                               "not %d", version, CI_SUP_VERSION);
        return -1;
    }
    return 0;
}

/* A connected socket, HELLO not yet exchanged; or -1 with *ERR. */
static int dial(apr_pool_t *p, const char **err)
{
    struct sockaddr_un sa;
    int fd;
    if (!socket_path || strlen(socket_path) >= sizeof(sa.sun_path)) {
        *err = "no sandbox supervisor runs";
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, socket_path);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
        *err = "no socket for the sandbox supervisor";
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        *err = apr_psprintf(p, "the sandbox supervisor is not reachable (%s)",
                            strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int ci_supervisor_open(apr_pool_t *p, int type, const char *req, apr_size_t len,
                       ci_sup_reader *r, const char **err)
{
    int fd = dial(p, err);
    if (fd < 0)
        return -1;
    /* HELLO and the request in one go: the supervisor answers HELLO first
     * and reads nothing further from a client whose version it refuses. */
    if (send_hello(fd, p) < 0 || ci_sup_send(fd, type, 0, req, len) < 0)
        *err = "the sandbox supervisor went away";
    else if (check_hello(fd, r, p, err) == 0)
        return fd;
    close(fd);
    return -1;
}

int ci_supervisor_connect(apr_pool_t *p, const char **err)
{
    int fd = dial(p, err);
    if (fd >= 0 && (send_hello(fd, p) < 0 ||
                    check_hello(fd, ci_sup_reader_create(p), p, err) < 0)) {
        if (!*err)
            *err = "the sandbox supervisor went away";
        close(fd);
        return -1;
    }
    return fd;
}

/* One question TYPE (payload REQ) and its answer ANSWER_TYPE, on a
 * connection of its own. */
static int ask(apr_pool_t *p, int type, const char *req, apr_size_t len,
               int answer_type, const char **answer, const char **err)
{
    ci_sup_reader *r = ci_sup_reader_create(p);
    ci_sup_frame f;
    int fd = ci_supervisor_open(p, type, req, len, r, err), rc = -1;
    if (fd < 0)
        return -1;
    if (ci_supervisor_read_frame(fd, r, apr_time_now() + CI_SUP_ANSWER_WAIT, &f) != 1 ||
        f.type != answer_type)
        *err = "the sandbox supervisor did not answer";
    else {
        *answer = apr_pstrmemdup(p, f.data, f.len);
        rc = 0;
    }
    close(fd);
    return rc;
}

/* ---- the directory, on a connection kept per thread --------------------
 * A request asks the directory a few times (which container, the first
 * call, the answer's end): a connection and a HELLO each time would cost
 * more than the question. Each thread keeps one connection (hiredis-style:
 * one per thread, never shared), made on first use and again after a
 * failure (a restarted supervisor), closed when the thread ends. */
typedef struct dir_conn {
    int fd;
    apr_pool_t *p;
    ci_sup_reader *reader;
    int owed;                 /* a question sent whose answer is not read yet */
} dir_conn;

static pthread_key_t dir_key;
static pthread_once_t dir_once = PTHREAD_ONCE_INIT;

static void dir_conn_free(void *data)
{
    dir_conn *c = data;
    if (c->fd >= 0)
        close(c->fd);
    apr_pool_destroy(c->p);
    free(c);
}

static void dir_key_make(void)
{
    pthread_key_create(&dir_key, dir_conn_free);
}

/* This thread's connection, HELLO exchanged; NULL with *ERR. */
static dir_conn *dir_connection(apr_pool_t *p, const char **err)
{
    dir_conn *c;
    pthread_once(&dir_once, dir_key_make);
    if (!(c = pthread_getspecific(dir_key))) {
        apr_allocator_t *alloc;
        if (!(c = calloc(1, sizeof(*c))) || apr_allocator_create(&alloc) != APR_SUCCESS) {
            free(c);
            *err = "out of memory";
            return NULL;
        }
        apr_pool_create_unmanaged_ex(&c->p, NULL, alloc);
        apr_allocator_owner_set(alloc, c->p);
        c->fd = -1;
        pthread_setspecific(dir_key, c);
    }
    if (c->fd >= 0)
        return c;
    c->owed = 0;
    apr_pool_clear(c->p);
    c->reader = ci_sup_reader_create(c->p);
    if ((c->fd = dial(p, err)) < 0)
        return NULL;
    if (send_hello(c->fd, p) < 0 || check_hello(c->fd, c->reader, p, err) < 0) {
        if (!*err)
            *err = "the sandbox supervisor went away";
        close(c->fd);
        c->fd = -1;
        return NULL;
    }
    return c;
}

static void dir_drop(dir_conn *c)
{
    close(c->fd);
    c->fd = -1;
    c->owed = 0;
}

/* The answer owed on C: 0 with *ANSWER (from P), or -1 (the connection is
 * dropped: the next question makes a new one). */
static int dir_read_answer(dir_conn *c, apr_pool_t *p, const char **answer)
{
    ci_sup_frame f;
    c->owed = 0;
    if (ci_supervisor_read_frame(c->fd, c->reader, apr_time_now() + CI_SUP_ANSWER_WAIT,
                                 &f) == 1 && f.type == CI_SUP_DIR_ANSWER) {
        *answer = apr_pstrmemdup(p, f.data, f.len);
        return 0;
    }
    dir_drop(c);
    return -1;
}

/* REQ sent on C, its answer then owed: 0, or -1 (the connection is
 * dropped). An answer still owed there is read first and let go. */
static int dir_send_on(dir_conn *c, apr_pool_t *p, const char *req, apr_size_t len)
{
    const char *stale;
    if (c->owed && dir_read_answer(c, p, &stale) < 0)
        return -1;
    if (ci_sup_send(c->fd, CI_SUP_DIR, 0, req, len) != 0) {
        dir_drop(c);
        return -1;
    }
    c->owed = 1;
    return 0;
}

/* One question on this thread's connection: 0, or -1 (the connection is
 * dropped). */
static int dir_exchange(dir_conn *c, apr_pool_t *p, const char *req, apr_size_t len,
                        const char **answer)
{
    if (dir_send_on(c, p, req, len) < 0)
        return -1;
    return dir_read_answer(c, p, answer);
}

int ci_supervisor_dir(apr_pool_t *p, const char *req, apr_size_t len,
                      const char **answer, const char **err)
{
    int attempt;
    /* A kept connection may have gone with a restarted supervisor: one more
     * try on a new one. */
    for (attempt = 0; attempt < 2; attempt++) {
        dir_conn *c = dir_connection(p, err);
        if (!c)
            return -1;
        if (dir_exchange(c, p, req, len, answer) == 0)
            return 0;
    }
    *err = "the sandbox supervisor did not answer";
    return -1;
}

int ci_supervisor_dir_send(apr_pool_t *p, const char *req, apr_size_t len,
                           const char **err)
{
    dir_conn *c = dir_connection(p, err);
    if (!c)
        return -1;
    if (dir_send_on(c, p, req, len) < 0) {
        *err = "the sandbox supervisor went away";
        return -1;
    }
    return 0;
}

int ci_supervisor_dir_receive(apr_pool_t *p, const char *req, apr_size_t len,
                              const char **answer, const char **err)
{
    dir_conn *c;
    pthread_once(&dir_once, dir_key_make);
    c = pthread_getspecific(dir_key);
    if (c && c->fd >= 0 && c->owed && dir_read_answer(c, p, answer) == 0)
        return 0;
    /* Not sent, or its connection failed since: asked again (every
     * operation sent this way may be applied twice). */
    return ci_supervisor_dir(p, req, len, answer, err);
}

int ci_supervisor_status(apr_pool_t *p, const char **answer, const char **err)
{
    return ask(p, CI_SUP_STATUS, NULL, 0, CI_SUP_STATUS, answer, err);
}

#define FILEOP_WAIT apr_time_from_sec(330)       /* the supervisor's 300 s without
                                                    progress, and more */
#define FILEOP_MAX_LINE ((apr_size_t)1024 * 1024)

#define UPLOAD_CHUNK ((apr_size_t)64 * 1024)

/* Drain UP's source into FILEDATA frames on FD, then FILEEND. 0, or -1 when
 * the supervisor went away. */
static int send_upload(int fd, ci_fileop_upload *up, char *buf)
{
    char commit;
    for (;;) {
        apr_ssize_t n = up->read(up->baton, buf, UPLOAD_CHUNK);
        if (n < 0) {
            up->outcome = CI_UPLOAD_SOURCE_FAILED;
            break;
        }
        if (n == 0) {
            up->outcome = CI_UPLOAD_SENT;
            break;
        }
        if (up->max >= 0 && up->sent + (apr_uint64_t)n > (apr_uint64_t)up->max) {
            up->outcome = CI_UPLOAD_TOO_LARGE;
            break;
        }
        if (ci_sup_send(fd, CI_SUP_FILEDATA, 0, buf, (apr_size_t)n) < 0)
            return -1;
        up->sent += (apr_uint64_t)n;
    }
    commit = up->outcome == CI_UPLOAD_SENT;
    return ci_sup_send(fd, CI_SUP_FILEEND, 0, &commit, 1);
}

/* Hand each whole line of BUF (LEN bytes after *HAVE kept ones) to FN; the
 * rest stays. -1 when FN stops or a line is too long; 1 when FN said the
 * kernel waits for an upload's data. */
static int fileop_lines(char *buf, apr_size_t *have, ci_fileop_line_fn fn, void *baton)
{
    apr_size_t start = 0;
    char *nl;
    int rc = 0, said;
    while ((nl = memchr(buf + start, '\n', *have - start))) {
        *nl = '\0';
        if ((said = fn(baton, buf + start, (apr_size_t)(nl - buf - start))) < 0)
            return -1;
        rc |= said == 1;
        start = (apr_size_t)(nl - buf) + 1;
    }
    memmove(buf, buf + start, *have - start);
    *have -= start;
    return *have >= FILEOP_MAX_LINE ? -1 : rc;
}

/* The answer frames of a file operation on FD, lines to FN, until END (1)
 * or NONE (0); -1 with *ERR. An upload's data goes when FN asks for it. */
static int fileop_answer(apr_pool_t *p, int fd, ci_sup_reader *r, char *buf,
                         ci_fileop_line_fn fn, void *baton, ci_fileop_upload *up,
                         const char **err)
{
    apr_time_t deadline = apr_time_now() + FILEOP_WAIT;
    apr_size_t have = 0;
    ci_sup_frame f;
    int said;
    for (;;) {
        if (ci_supervisor_read_frame(fd, r, deadline, &f) != 1)
            return *err = "the sandbox supervisor did not answer", -1;
        deadline = apr_time_now() + FILEOP_WAIT;     /* a bound on silence */
        if (f.type == CI_SUP_NONE)
            return 0;
        if (f.type == CI_SUP_END)
            return 1;
        if (f.type == CI_SUP_ERROR)
            return *err = apr_pstrmemdup(p, f.data, f.len), -1;
        if (f.type != CI_SUP_OUTPUT)
            continue;
        while (f.len) {
            apr_size_t take = f.len < 65536 ? f.len : 65536;
            memcpy(buf + have, f.data, take);
            have += take;
            f.data += take;
            f.len -= take;
            if ((said = fileop_lines(buf, &have, fn, baton)) < 0)
                return *err = "the file operation's answer was cut short", -1;
            if (said == 1 && up && up->outcome == CI_UPLOAD_NOT_STARTED) {
                if (send_upload(fd, up, buf + FILEOP_MAX_LINE + 65536) < 0)
                    return *err = "the sandbox supervisor went away", -1;
                deadline = apr_time_now() + FILEOP_WAIT;
            }
        }
    }
}

int ci_supervisor_fileop(apr_pool_t *p, const char *req, apr_size_t len,
                             ci_fileop_line_fn fn, void *baton, ci_fileop_upload *up,
                             const char **err)
{
    ci_sup_reader *r = ci_sup_reader_create(p);
    int fd, rc = -1;
    char *buf = NULL;
    *err = NULL;
    if ((fd = ci_supervisor_open(p, CI_SUP_FILEOP, req, len, r, err)) < 0)
        return -1;
    if (!(buf = malloc(FILEOP_MAX_LINE + 65536 + (up ? UPLOAD_CHUNK : 0))))
        *err = "out of memory";
    else
        rc = fileop_answer(p, fd, r, buf, fn, baton, up, err);
    free(buf);
    close(fd);
    return rc;
}

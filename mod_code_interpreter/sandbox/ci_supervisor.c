/*
 * ci_supervisor.c - the local sandbox supervisor's loop.
 *
 * One thread, one poll loop: bubblewrap's --die-with-parent fires when the
 * *thread* that forked it exits, so every sandbox is forked here, by the
 * only thread there is. Each sandbox is a direct child; only this process
 * signals it, by the pid it forked. Its output is relayed: the kernel's
 * descriptors never leave this process.
 *
 * Who owns a sandbox: the connection that created or took it (destroyed
 * when that connection closes: a child that dies leaves nothing running),
 * a warm pool (destroyed when the parent no longer wants it), or a
 * container (ATTACH): then it stays across connections until its container
 * expires or is deleted, every connection attached to it may run code, and
 * their runs take turns in arrival order. A warm sandbox holds a registry
 * slot of its own until a connection takes it; the child then claims one
 * for it. A container's sandbox keeps its slot here.
 *
 * The container directory (ci_directory, through ci_supdir) lives here too:
 * this process outlives children and graceful restarts, and being one
 * thread it serialises every change.
 *
 * Timeouts: the supervisor enforces each execution's deadline (the tool's
 * timeout carried in the definition). A request's own sandbox is killed: END
 * says timed_out and the next run starts a fresh one. A container's is
 * interrupted first, as Ctrl-C would: SIGINT to every process of the
 * sandbox but bubblewrap's own, so that Python raises KeyboardInterrupt and
 * the interpreter and its state live on (END says timed_out, kept); only
 * when the run has not ended INTERRUPT_GRACE later is the sandbox killed and
 * started again empty.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <apr_file_info.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include <apr_tables.h>
#include "ci_directory.h"
#include "ci_json.h"
#include "ci_log.h"
#include "ci_ndjson.h"
#include "ci_supdir.h"
#include "ci_supervisor.h"
#include "ci_supproto.h"
#include "ci_usage.h"
#include "ci_workers.h"

#define START_TIMEOUT apr_time_from_sec(60)
#define READ_CHUNK 65536
#define BACKLOG_MAX ((apr_size_t)1024 * 1024)   /* stop reading a sandbox past it */
#define TICK_MS 1000
#define INTERRUPT_GRACE apr_time_from_sec(2)
#define PROCS_MAX 256
/* How often the processes of a sandbox are found again by reading all of
 * /proc (a few milliseconds of this single thread on a busy host); their
 * memory is read every second. */
#define PROCS_RESCAN apr_time_from_sec(5)
#define FILEOP_TIMEOUT apr_time_from_sec(300)   /* without progress (fileop_progress) */
#define FILEOP_DRAIN apr_time_from_sec(30)   /* then, the kernel's to end it */
/* How a file operation's output ends: this exact line (the kernel's
 * json.dumps; a name inside a line is escaped, never this line). */
#define FILEOP_END "\n{\"type\": \"end_of_execution\"}\n"
#define FILEOP_END_LEN (sizeof(FILEOP_END) - 1)
#define RAW_PUT 2                               /* queued: a put (see queued) */

/* ---- an output queue ----------------------------------------------------- */

typedef struct outq {
    char *buf;
    apr_size_t start, used, cap;
} outq;

static int outq_add(outq *q, const void *data, apr_size_t len)
{
    if (q->start && q->start == q->used)
        q->start = q->used = 0;
    if (q->used + len > q->cap) {
        apr_size_t want = (q->used - q->start + len) * 2 + 4096;
        char *nb;
        if (q->start) {
            memmove(q->buf, q->buf + q->start, q->used - q->start);
            q->used -= q->start;
            q->start = 0;
        }
        if (q->used + len > q->cap) {
            if (!(nb = realloc(q->buf, want)))
                return -1;
            q->buf = nb;
            q->cap = want;
        }
    }
    memcpy(q->buf + q->used, data, len);
    q->used += len;
    return 0;
}

static apr_size_t outq_len(const outq *q)
{
    return q->used - q->start;
}

/* Write what FD takes now. -1 when the peer is gone. */
static int outq_flush(outq *q, int fd, int is_socket)
{
    while (outq_len(q)) {
        ssize_t n = is_socket
            ? send(fd, q->buf + q->start, outq_len(q), MSG_NOSIGNAL | MSG_DONTWAIT)
            : write(fd, q->buf + q->start, outq_len(q));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1;
        q->start += (apr_size_t)n;
    }
    return 0;
}

static void outq_free(outq *q)
{
    free(q->buf);
    memset(q, 0, sizeof(*q));
}

/* ---- state ----------------------------------------------------------------- */

typedef struct conn conn;
typedef struct want want;

/* A RUN waiting for a container's sandbox (malloc'd: the box lives long). */
typedef struct queued {
    conn *from;
    char *code;
    apr_size_t len;
    int raw;                    /* a FILEOP: CODE is the kernel's whole line
                                   (RAW_PUT: a put, data to follow) */
    struct queued *next;
} queued;

/* A connection waiting for an ATTACH to be answered. */
typedef struct waiter {
    conn *c;
    struct waiter *next;
} waiter;

typedef enum { BOX_STARTING, BOX_IDLE, BOX_RUNNING, BOX_DEAD } box_state;

typedef struct box {
    apr_uint32_t id;
    apr_pool_t *pool;
    ci_sandbox_def *def;
    const char *deftext;
    const char *tag;
    pid_t pid;
    int in_fd, out_fd, err_fd;
    outq input;                 /* the code line on its way to the kernel */
    ci_ndjson *nd;
    box_state state;
    apr_time_t deadline;        /* of the start or of the execution */
    conn *owner;                /* NULL: warm */
    want *warm;                 /* the pool it belongs to while warm */
    int slot;                   /* the registry slot of a warm one, -1 */
    int counted_warm;           /* the registry counts it as warm */
    const char *container;      /* the container it is the sandbox of, or NULL */
    conn *runner;               /* a container's: whose run is in progress */
    queued *runq;               /* a container's: runs waiting their turn */
    waiter *waiters;            /* a container's: ATTACHes not yet answered */
    ci_exec_outcome interrupted;/* a container's run was interrupted (SIGINT)
                                   for this reason; COMPLETED: it was not */
    pid_t procs[PROCS_MAX];     /* its processes, as last read from /proc */
    int nprocs;
    apr_time_t procs_at;        /* when (0: never) */
    int fileop;                 /* the run in progress is a file operation */
    int upload;                 /* ... a put whose data is still coming from
                                   its runner */
    apr_int64_t put_room;       /* the bytes the put may write (max_file=,
                                   and max_bytes= less the other files, as
                                   measured here); -1: no bound */
    apr_uint64_t put_sent;      /* the bytes relayed so far */
    const char *put_refusal;    /* past its room: the outcome its client
                                   gets, whatever the kernel says */
    char tail[FILEOP_END_LEN + 1];  /* a file operation's last output bytes */
    apr_size_t tail_len;
    struct box *next;
} box;

struct conn {
    int fd;
    pid_t pid;
    int helloed, is_parent, closing;
    ci_sup_reader *reader;
    apr_pool_t *pool;
    outq out;
    box *attached;              /* the container sandbox it attached to */
    struct conn *next;
};

struct want {
    apr_pool_t *pool;
    ci_sandbox_def *def;
    const char *deftext;
    int count;
    struct want *next;
};

static struct {
    apr_pool_t *p;
    const ci_sup_config *cfg;
    box *boxes;
    conn *conns;
    want *wants;
    apr_uint32_t next_id;
    int refill_due;             /* at the end of this turn of the loop, or the
                                   cap refused a warm slot: retry each tick */
    ci_directory *dir;
    apr_time_t next_expiry_check;
} sup;

/* ---- sandboxes -------------------------------------------------------------- */

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Kill the sandbox (it is our child) and let go of its descriptors. */
static void box_kill(box *b)
{
    ci_spawn_kill(&b->pid);
    close_fd(&b->in_fd);
    close_fd(&b->out_fd);
    close_fd(&b->err_fd);
    outq_free(&b->input);
    b->state = BOX_DEAD;
}

static void box_release_slot(box *b)
{
    if (b->slot < 0)
        return;
    if (b->counted_warm)
        sup.cfg->hooks->set_warm(b->slot, 0);
    b->counted_warm = 0;
    sup.cfg->hooks->release(b->slot);
    b->slot = -1;
}

static void send_text(conn *c, int type, apr_uint32_t id, const char *text);
static void send_end(conn *c, apr_uint32_t id, ci_exec_outcome outcome);

/* Who hears a sandbox's output: its connection, or its container's runner. */
static conn *client_of(const box *b)
{
    return b->container ? b->runner : b->owner;
}

/* A container's sandbox goes: everyone waiting on it is told. */
static void release_waiting(box *b, const char *why)
{
    conn *c;
    while (b->waiters) {
        waiter *w = b->waiters;
        b->waiters = w->next;
        send_text(w->c, CI_SUP_ERROR, 0, why);
        free(w);
    }
    while (b->runq) {
        queued *q = b->runq;
        b->runq = q->next;
        send_end(q->from, b->id, CI_EXEC_LOST);
        free(q->code);
        free(q);
    }
    if (b->runner)
        send_end(b->runner, b->id, CI_EXEC_LOST);
    b->runner = NULL;
    for (c = sup.conns; c; c = c->next)
        if (c->attached == b)
            c->attached = NULL;
}

static void box_free(box *b)
{
    box **pp;
    for (pp = &sup.boxes; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    if (b->container)
        release_waiting(b, "the container's sandbox was removed");
    box_release_slot(b);
    box_kill(b);
    apr_pool_destroy(b->pool);
}

static apr_uint32_t new_id(void)
{
    if (++sup.next_id == 0)
        sup.next_id = 1;
    return sup.next_id;
}

static void set_nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Fork B's sandbox (again, for a container's after a failure): STARTING
 * until its kernel says ready. -1 when it could not be forked. */
static int box_spawn(box *b)
{
    if (ci_local_spawn(b->pool, b->def, &b->pid, &b->in_fd, &b->out_fd, &b->err_fd)
        != APR_SUCCESS)
        return -1;
    set_nonblock(b->in_fd);
    set_nonblock(b->out_fd);
    set_nonblock(b->err_fd);
    ci_ndjson_reset(b->nd);
    b->state = BOX_STARTING;
    b->deadline = apr_time_now() + START_TIMEOUT;
    ci_log(CI_LOG_DEBUG, "CI0610: sandbox %u forked (pid %ld) tool=%s tag=%s",
           b->id, (long)b->pid, b->def->name, b->tag);
    return 0;
}

/* Start a sandbox of DEF (its text DEFTEXT). NULL with *ERR when it could
 * not even be forked; otherwise it is STARTING until its kernel says ready. */
static box *box_start(const ci_sandbox_def *def, const char *deftext, const char *tag,
                      const char **err)
{
    apr_pool_t *p;
    box *b;
    apr_pool_create(&p, sup.p);
    b = apr_pcalloc(p, sizeof(*b));
    b->pool = p;
    b->def = ci_sandbox_def_copy(p, def);
    b->deftext = apr_pstrdup(p, deftext);
    b->tag = apr_pstrdup(p, tag);
    b->slot = -1;
    b->in_fd = b->out_fd = b->err_fd = -1;
    b->nd = ci_ndjson_create(p, def->max_output, CI_HARD_OUTPUT_CAP);
    b->id = new_id();
    if (box_spawn(b) < 0) {
        *err = "the local sandbox could not be forked";
        apr_pool_destroy(p);
        return NULL;
    }
    b->next = sup.boxes;
    sup.boxes = b;
    return b;
}

/* ---- connections ---------------------------------------------------------- */

static void send_frame(conn *c, int type, apr_uint32_t id, const char *data,
                       apr_size_t len)
{
    unsigned char hdr[CI_SUP_HEADER];
    ci_sup_header(hdr, type, id, len);
    if (outq_add(&c->out, hdr, sizeof(hdr)) < 0 ||
        (len && outq_add(&c->out, data, len) < 0))
        c->closing = 1;
    /* Sent now when the socket takes it: a waiting child should not wait
     * for the next turn of the loop (or for a sandbox being forked). */
    else if (outq_flush(&c->out, c->fd, 1) < 0)
        c->closing = 2;
}

static void send_text(conn *c, int type, apr_uint32_t id, const char *text)
{
    send_frame(c, type, id, text, text ? strlen(text) : 0);
}

static void send_end(conn *c, apr_uint32_t id, ci_exec_outcome outcome)
{
    char o = (char)outcome;
    send_frame(c, CI_SUP_END, id, &o, 1);
}

/* The run ended with OUTCOME after an interrupt its interpreter survived. */
static void send_end_kept(conn *c, apr_uint32_t id, ci_exec_outcome outcome)
{
    char o[2] = { (char)outcome, CI_SUP_END_KEPT };
    send_frame(c, CI_SUP_END, id, o, 2);
}

/* The box with ID that C owns: nothing a client sends reaches another
 * connection's sandbox. */
static box *owned(conn *c, apr_uint32_t id)
{
    box *b;
    for (b = sup.boxes; b; b = b->next)
        if (b->id == id && (b->owner == c || (b->container && c->attached == b)))
            return b;
    return NULL;
}

static void stop_run(box *b, ci_exec_outcome outcome);
static void interrupt_kernel(box *b, ci_exec_outcome why);

/* Queue one chunk of a put's data for B's kernel (ci_kernel.py's
 * read_chunks): a length line, then the bytes. -1 when it cannot. */
static int queue_chunk(box *b, const char *data, apr_size_t len)
{
    char line[24];
    int n = snprintf(line, sizeof(line), "%" APR_SIZE_T_FMT "\n", len);
    return outq_add(&b->input, line, (apr_size_t)n) < 0 ||
           outq_add(&b->input, data, len) < 0 ? -1 : 0;
}

/* The end of B's put: committed, or abandoned (the kernel removes what it
 * wrote). Always at a chunk's boundary: chunks are queued whole. */
static void end_upload(box *b, int commit)
{
    b->upload = 0;
    if (outq_add(&b->input, commit ? "0\n" : "-1\n", commit ? 2 : 3) < 0)
        box_kill(b);
}

/* C goes: its place in its container's queue, and its run in progress. */
static void detach(conn *c)
{
    box *b = c->attached;
    queued **qp;
    waiter **wp;
    if (!b)
        return;
    c->attached = NULL;
    for (qp = &b->runq; *qp;) {
        queued *q = *qp;
        if (q->from == c) {
            *qp = q->next;
            free(q->code);
            free(q);
        }
        else
            qp = &q->next;
    }
    for (wp = &b->waiters; *wp;) {
        waiter *w = *wp;
        if (w->c == c) {
            *wp = w->next;
            free(w);
        }
        else
            wp = &w->next;
    }
    if (b->runner == c && b->upload)
        end_upload(b, 0);             /* nothing half-written */
    if (b->runner == c) {
        /* Its child left mid-run (it died, or gave up): the run is
         * interrupted as a timeout is, and the container lives on for the
         * conversation's next turn. What the run still prints goes nowhere. */
        b->runner = NULL;
        /* A file operation is left to end by itself (its deadline holds):
         * a SIGINT could reach the kernel once it is idle again. */
        if (b->state == BOX_RUNNING && !b->fileop &&
            b->interrupted == CI_EXEC_COMPLETED)
            interrupt_kernel(b, CI_EXEC_INTERRUPTED);
    }
}

static void conn_free(conn *c)
{
    conn **pp;
    box *b, *next;
    int n = 0;
    detach(c);
    for (b = sup.boxes; b; b = next) {
        next = b->next;
        if (b->owner == c) {
            box_free(b);
            n++;
        }
    }
    for (pp = &sup.conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (n)
        ci_log(CI_LOG_INFO, "CI0611: connection of process %ld closed; its %d "
               "sandbox(es) destroyed", (long)c->pid, n);
    close(c->fd);
    outq_free(&c->out);
    apr_pool_destroy(c->pool);
}

/* ---- peers ------------------------------------------------------------------ */

static pid_t parent_of(pid_t pid);

/* Field 4 of /proc/PID/stat: the parent's pid, or -1. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512], *rp;
    ssize_t n;
    int fd;
    long ppid;
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: skip to the last ')'. */
    if (!(rp = strrchr(buf, ')')) || sscanf(rp + 1, " %*c %ld", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

/* Whether PID runs bubblewrap (its command name). */
static int is_bwrap(pid_t pid)
{
    char path[64], comm[32];
    ssize_t n;
    int fd;
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 1;                 /* gone, or not ours to judge: leave it */
    n = read(fd, comm, sizeof(comm) - 1);
    close(fd);
    comm[n > 0 ? n : 0] = '\0';
    return !strcmp(comm, "bwrap\n");
}

/* A peer is httpd's parent itself, or one of its children running as the
 * children's uid: a CGI script has the same uid but another parent. */
static int peer_allowed(int fd, pid_t *pid, int *is_parent)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    *pid = cred.pid;
    *is_parent = cred.pid == sup.cfg->parent;
    if (*is_parent)
        return 1;
    return cred.uid == sup.cfg->uid && parent_of(cred.pid) == sup.cfg->parent;
}

static void accept_one(void)
{
    int fd = accept4(sup.cfg->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    apr_pool_t *p;
    conn *c;
    pid_t pid = -1;
    int is_parent = 0;
    if (fd < 0)
        return;
    if (!peer_allowed(fd, &pid, &is_parent)) {
        ci_log(CI_LOG_WARNING, "CI0612: connection refused: process %ld is not a "
               "process of this server", (long)pid);
        close(fd);
        return;
    }
    apr_pool_create(&p, sup.p);
    c = apr_pcalloc(p, sizeof(*c));
    c->pool = p;
    c->fd = fd;
    c->pid = pid;
    c->is_parent = is_parent;
    c->reader = ci_sup_reader_create(p);
    c->next = sup.conns;
    sup.conns = c;
}

/* ---- warm pools --------------------------------------------------------- */

static int warm_count(const want *w)
{
    box *b;
    int n = 0;
    for (b = sup.boxes; b; b = b->next)
        if (b->warm == w && !b->owner && !b->container && b->state != BOX_DEAD)
            n++;
    return n;
}

static void refill(void)
{
    want *w;
    sup.refill_due = 0;
    for (w = sup.wants; w; w = w->next) {
        int n = warm_count(w);
        for (; n < w->count; n++) {
            const char *err = NULL;
            int slot = sup.cfg->hooks->claim(w->def->name);
            box *b;
            if (slot < 0) {
                sup.refill_due = 1;
                return;
            }
            if (!(b = box_start(w->def, w->deftext, "warm", &err))) {
                ci_log(CI_LOG_WARNING, "CI0613: a warm sandbox of tool %s could "
                       "not start: %s", w->def->name, err);
                sup.cfg->hooks->release(slot);
                sup.refill_due = 1;
                return;
            }
            b->warm = w;
            b->slot = slot;
        }
    }
}

/* Replace the wanted pools with WANTS (an array of ci_sup_want). Pools whose
 * definition is unchanged keep their sandboxes; the others are destroyed. */
static void set_wants(apr_array_header_t *wants)
{
    want *old = sup.wants, *w, *next;
    box *b, *bn;
    int i;
    sup.wants = NULL;
    for (i = 0; i < wants->nelts; i++) {
        ci_sup_want *sw = &APR_ARRAY_IDX(wants, i, ci_sup_want);
        apr_pool_t *p;
        if (sw->count <= 0)
            continue;
        apr_pool_create(&p, sup.p);
        w = apr_pcalloc(p, sizeof(*w));
        w->pool = p;
        w->def = ci_sandbox_def_copy(p, sw->def);
        w->deftext = apr_pstrdup(p, sw->deftext);
        w->count = sw->count;
        w->next = sup.wants;
        sup.wants = w;
    }
    /* Move warm sandboxes to the new pool of the same definition. */
    for (b = sup.boxes; b; b = bn) {
        bn = b->next;
        if (!b->warm || b->owner || b->container)
            continue;
        for (w = sup.wants; w && strcmp(w->deftext, b->deftext); w = w->next)
            ;
        if (w)
            b->warm = w;
        else
            box_free(b);
    }
    for (w = old; w; w = next) {
        next = w->next;
        apr_pool_destroy(w->pool);
    }
    refill();
}

static void handle_warm_set(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    apr_array_header_t *wants;
    const char *err = NULL;
    if (!c->is_parent) {
        send_text(c, CI_SUP_ERROR, 0, "only the server's parent sets the warm pools");
        return;
    }
    apr_pool_create(&p, sup.p);
    if (!(wants = ci_sup_warm_decode(p, f, &err)))
        send_text(c, CI_SUP_ERROR, 0, err);
    else {
        set_wants(wants);
        send_frame(c, CI_SUP_OK, 0, NULL, 0);
    }
    apr_pool_destroy(p);
}

/* A ready warm sandbox of DEFTEXT, or NULL. */
static box *warm_ready(const char *deftext)
{
    box *b;
    for (b = sup.boxes; b; b = b->next)
        if (b->warm && !b->owner && !b->container && b->state == BOX_IDLE &&
            !strcmp(b->deftext, deftext))
            return b;
    return NULL;
}

/* ---- requests ------------------------------------------------------------- */

static void handle_create(conn *c, const ci_sup_frame *f, int take)
{
    apr_pool_t *p;
    ci_sandbox_def *def;
    const char *tag, *deftext, *err;
    box *b;
    apr_pool_create(&p, sup.p);
    if ((err = ci_sup_create_decode(p, f, &def, &tag, &deftext)))
        send_text(c, CI_SUP_ERROR, 0, err);
    else if (take) {
        if ((b = warm_ready(deftext))) {
            box_release_slot(b);      /* the child claims one for it */
            b->warm = NULL;
            b->owner = c;
            b->tag = apr_pstrdup(b->pool, tag);
            send_frame(c, CI_SUP_OK, b->id, NULL, 0);
            sup.refill_due = 1;       /* after the answer is out */
        }
        else
            send_frame(c, CI_SUP_NONE, 0, NULL, 0);
    }
    else if ((b = box_start(def, deftext, tag, &err)))
        b->owner = c;                 /* OK once its kernel is ready */
    else
        send_text(c, CI_SUP_ERROR, 0, err);
    apr_pool_destroy(p);
}

/* Queue CODE for B's kernel, which reads one JSON line: {"code": CODE}
 * (RAW: CODE is a file operation's line, checked by handle_fileop). */
static int queue_code(box *b, const char *code, apr_size_t len, int raw)
{
    apr_pool_t *p;
    json_object *req;
    const char *line;
    apr_size_t n;
    int rc;
    if (raw)
        return outq_add(&b->input, code, len) < 0 || outq_add(&b->input, "\n", 1) < 0
            ? -1 : 0;
    apr_pool_create(&p, b->pool);
    req = ci_json_own(p, json_object_new_object());
    json_object_object_add(req, "code", json_object_new_string_len(code, (int)len));
    line = ci_json_pstr(p, req, &n);
    rc = outq_add(&b->input, line, n) < 0 || outq_add(&b->input, "\n", 1) < 0 ? -1 : 0;
    apr_pool_destroy(p);
    return rc;
}

/* A file operation's answer of TYPE given here, not by the kernel, as the
 * kernel would have given it (its line, then the end). */
static void send_fileop_answer(box *b, conn *c, const char *type)
{
    char text[64 + FILEOP_END_LEN];
    int n = snprintf(text, sizeof(text), "{\"type\": \"%s\"}" FILEOP_END, type);
    send_frame(c, CI_SUP_OUTPUT, b->id, text, (apr_size_t)n);
}

/* ... and the run over. */
static void answer_fileop(box *b, conn *c, const char *type)
{
    send_fileop_answer(b, c, type);
    send_end(c, b->id, CI_EXEC_COMPLETED);
}

static apr_int64_t op_int(json_object *op, const char *key)
{
    json_object *v = ci_json_get(op, key, json_type_int);
    return v && json_object_get_int64(v) > 0 ? json_object_get_int64(v) : 0;
}

/* A put's limits, checked against /mnt/data as measured from outside
 * (ci_usage.h), since the kernel that checks them too shares its process
 * with the user's code: NULL with B's room set, or the refusal to answer
 * ("too_many", "no_space"). */
static const char *put_limits(box *b, const char *line, apr_size_t len)
{
    apr_pool_t *p;
    json_object *op;
    const char *err = NULL, *refusal = NULL;
    apr_int64_t max_file, max_files, max_bytes, room = -1;
    ci_data_usage u;
    apr_pool_create(&p, b->pool);
    op = ci_json_parse(p, line, len, &err);
    max_file = op_int(op, "max_file");
    max_files = op_int(op, "max_files");
    max_bytes = op_int(op, "max_bytes");
    if ((max_files || max_bytes) &&
        ci_usage_measure(b->pid, ci_json_str(op, "name"), &u) != 0)
        refusal = "no_space";         /* not measurable: not a limit to lift */
    else if (max_files && !u.has_name && (u.truncated || u.files + 1 > (apr_uint64_t)max_files))
        refusal = "too_many";
    else if (max_bytes && u.truncated)
        refusal = "no_space";
    else {
        if (max_bytes) {
            apr_uint64_t others = u.bytes - u.name_bytes;
            room = others >= (apr_uint64_t)max_bytes ? 0 : max_bytes - (apr_int64_t)others;
        }
        if (max_file && (room < 0 || max_file < room))
            room = max_file;
    }
    b->put_room = room;
    b->put_sent = 0;
    b->put_refusal = NULL;
    apr_pool_destroy(p);
    return refusal;
}

/* Hand CODE to B's idle kernel for C. */
static void begin_run(box *b, conn *c, const char *code, apr_size_t len, int raw)
{
    const char *refusal;
    if (raw == RAW_PUT && (refusal = put_limits(b, code, len))) {
        answer_fileop(b, c, refusal);
        return;
    }
    if (queue_code(b, code, len, raw) < 0) {
        box_kill(b);
        send_end(c, b->id, CI_EXEC_LOST);
        return;
    }
    ci_ndjson_reset(b->nd);
    b->state = BOX_RUNNING;
    b->deadline = apr_time_now() + (raw ? FILEOP_TIMEOUT : b->def->timeout);
    b->interrupted = CI_EXEC_COMPLETED;
    b->fileop = raw != 0;
    b->upload = raw == RAW_PUT;
    /* The line before the first one is as good as a newline. */
    b->tail[0] = '\n';
    b->tail_len = 1;
    if (b->container)
        b->runner = c;
}

/* Every process of the host with its parent, read from /proc (from P). */
typedef struct proc_pair { pid_t pid, ppid; } proc_pair;

static apr_array_header_t *proc_parents(apr_pool_t *p)
{
    apr_array_header_t *all = apr_array_make(p, 256, sizeof(proc_pair));
    apr_dir_t *dir;
    apr_finfo_t fi;
    if (apr_dir_open(&dir, "/proc", p) != APR_SUCCESS)
        return all;
    while (apr_dir_read(&fi, APR_FINFO_NAME, dir) == APR_SUCCESS) {
        pid_t pid = (pid_t)atol(fi.name);
        proc_pair *pp;
        if (pid <= 0)
            continue;
        pp = apr_array_push(all);
        pp->pid = pid;
        pp->ppid = parent_of(pid);
    }
    apr_dir_close(dir);
    return all;
}

/* ROOT and every process under it in ALL, into OUT (at most MAX); their
 * number. */
static int descendants(const apr_array_header_t *all, pid_t root, pid_t *out, int max)
{
    int n = 0, grew = 1, i, k;
    out[n++] = root;
    while (grew && n < max) {
        grew = 0;
        for (i = 0; i < all->nelts && n < max; i++) {
            const proc_pair *pp = &APR_ARRAY_IDX(all, i, proc_pair);
            int known = 0, under = 0;
            for (k = 0; k < n; k++) {
                known |= out[k] == pp->pid;
                under |= out[k] == pp->ppid;
            }
            if (under && !known) {
                out[n++] = pp->pid;
                grew = 1;
            }
        }
    }
    return n;
}

/* Ctrl-C for B's code: SIGINT to the processes of the sandbox that are not
 * bubblewrap's (its monitor and the namespace's init stay untouched). */
static void interrupt_kernel(box *b, ci_exec_outcome why)
{
    pid_t pids[256];
    apr_pool_t *p;
    int i, n;
    apr_pool_create(&p, sup.p);
    n = b->pid > 0 ? descendants(proc_parents(p), b->pid, pids, 256) : 0;
    apr_pool_destroy(p);
    for (i = 1; i < n; i++)
        if (!is_bwrap(pids[i]))
            kill(pids[i], SIGINT);
    b->interrupted = why;
    b->deadline = apr_time_now() + INTERRUPT_GRACE;
    ci_log(CI_LOG_INFO, "CI0619: sandbox %u of container %s interrupted (%s)", b->id,
           b->container, ci_exec_outcome_name(why));
}

static void touch_container(box *b)
{
    if (b->container)
        ci_directory_touch_id(sup.dir, b->container, apr_time_now());
}

/* A container's sandbox is free: the next queued run starts, on a fresh
 * sandbox when the last one was lost. */
static void next_run(box *b)
{
    queued *q;
    /* (a run answered at once, a refused put, lets the next one go) */
    while ((q = b->runq) && !b->runner && b->state != BOX_STARTING &&
           b->state != BOX_RUNNING) {
        if (b->state == BOX_DEAD) {
            if (box_spawn(b) < 0)
                release_waiting(b, "the local sandbox could not be forked");
            return;
        }
        b->runq = q->next;
        begin_run(b, q->from, q->code, q->len, q->raw);
        free(q->code);
        free(q);
    }
}

static int enqueue(box *b, conn *c, const char *code, apr_size_t len, int raw)
{
    queued *q = calloc(1, sizeof(*q)), **at;
    if (!q || !(q->code = malloc(len ? len : 1))) {
        free(q);
        return -1;
    }
    memcpy(q->code, code, len);
    q->len = len;
    q->raw = raw;
    q->from = c;
    for (at = &b->runq; *at; at = &(*at)->next)
        ;
    *at = q;
    return 0;
}

/* C's run waiting in B's queue, removed: 1, or 0 when it had none. */
static int dequeue(box *b, conn *c)
{
    queued **qp;
    for (qp = &b->runq; *qp; qp = &(*qp)->next)
        if ((*qp)->from == c) {
            queued *q = *qp;
            *qp = q->next;
            free(q->code);
            free(q);
            return 1;
        }
    return 0;
}

static void handle_run(conn *c, const ci_sup_frame *f)
{
    box *b = owned(c, f->id);
    if (b && b->container && f->len <= INT_MAX) {
        touch_container(b);
        if (enqueue(b, c, f->data, f->len, 0) < 0)
            send_end(c, f->id, CI_EXEC_LOST);
        next_run(b);
        return;
    }
    if (!b || b->state != BOX_IDLE || f->len > INT_MAX) {
        send_end(c, f->id, CI_EXEC_LOST);
        return;
    }
    begin_run(b, c, f->data, f->len, 0);
}

static box *container_box(const char *id);

/* A file operation of container ID's sandbox: NONE when it has none (no
 * code ever ran there, or it was lost: no files), else queued behind the
 * container's runs; the kernel's answer is relayed like a run's output. The
 * peer is one of the server's processes, which checked the owner. */
static void handle_fileop(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    json_object *req, *op;
    const char *id, *kind, *line, *err = NULL;
    apr_size_t len;
    box *b = NULL;
    apr_pool_create(&p, sup.p);
    req = ci_json_parse(p, f->data, f->len, &err);
    id = ci_json_str(req, "container");
    op = ci_json_get(req, "op", json_type_object);
    kind = ci_json_str(op, "op");
    if (!id || !kind || (strcmp(kind, "list") && strcmp(kind, "get") &&
                         strcmp(kind, "delete") && strcmp(kind, "put")))
        send_text(c, CI_SUP_ERROR, 0, "a file operation not understood");
    else if (!(b = container_box(id)) || b->state == BOX_DEAD)
        send_frame(c, CI_SUP_NONE, 0, NULL, 0);
    else {
        detach(c);
        c->attached = b;
        line = ci_json_pstr(p, op, &len);   /* one line: json-c escapes newlines */
        if (enqueue(b, c, line, len, strcmp(kind, "put") ? 1 : RAW_PUT) < 0)
            send_end(c, b->id, CI_EXEC_LOST);
        next_run(b);
    }
    apr_pool_destroy(p);
}

/* A file operation moved bytes (a chunk of a put came, a piece of a get
 * went out): its deadline counts from now, so that a large file at a slow
 * but steady client is not cut, and a stalled one is. */
static void fileop_progress(box *b)
{
    if (b->runner)            /* not once its client is dropped (draining) */
        b->deadline = apr_time_now() + FILEOP_TIMEOUT;
}

/* A put's data from C, or its end: relayed while C's put is the run in
 * progress and its data still open; anything else is a broken client. */
static void handle_filedata(conn *c, const ci_sup_frame *f)
{
    box *b = c->attached;
    if (!b || b->runner != c || !b->upload || b->state != BOX_RUNNING ||
        (f->type == CI_SUP_FILEDATA && !f->len) ||
        (f->type == CI_SUP_FILEEND && f->len != 1)) {
        c->closing = 2;               /* detach abandons any put of C's */
        return;
    }
    if (f->type == CI_SUP_FILEEND) {
        if (b->put_refusal)
            b->upload = 0;            /* abandoned already */
        else
            end_upload(b, f->data[0] == 1);
        return;
    }
    fileop_progress(b);
    if (b->put_refusal)
        return;                       /* past its room: read and dropped */
    if (b->put_room >= 0 && b->put_sent + f->len > (apr_uint64_t)b->put_room) {
        /* The kernel removes what it wrote; its answer is replaced. */
        b->put_refusal = "no_space";
        if (outq_add(&b->input, "-1\n", 3) < 0)
            box_kill(b);
        return;
    }
    b->put_sent += f->len;
    if (queue_chunk(b, f->data, f->len) < 0)
        box_kill(b);
}

/* Stop B's execution with OUTCOME: the sandbox is killed. A request's next
 * run starts a fresh one, as it always did; a container's sandbox is
 * started again for the next run in its queue (the interpreter's state is
 * gone, and the run's failure text says so). */
static void stop_run(box *b, ci_exec_outcome outcome)
{
    int was_running = b->state == BOX_RUNNING;
    conn *to = client_of(b);
    b->interrupted = CI_EXEC_COMPLETED;
    box_kill(b);
    if (was_running && to)
        send_end(to, b->id, outcome);
    if (b->container) {
        b->runner = NULL;
        next_run(b);
    }
}

/* ---- containers ------------------------------------------------------------ */

static box *container_box(const char *id)
{
    box *b;
    for (b = sup.boxes; b; b = b->next)
        if (b->container && !strcmp(b->container, id))
            return b;
    return NULL;
}

/* A sandbox for container ID: a warm one, or a new one (with a slot). */
static box *container_start(const ci_sandbox_def *def, const char *deftext,
                            const char *id, const char **err)
{
    box *b = warm_ready(deftext);
    int slot;
    if (b) {
        b->warm = NULL;               /* it keeps its slot, now as live */
        if (b->counted_warm)
            sup.cfg->hooks->set_warm(b->slot, 0);
        b->counted_warm = 0;
        sup.refill_due = 1;
        ci_log(CI_LOG_DEBUG, "CI0620: warm sandbox %u became container %s's", b->id,
               id);
    }
    else {
        if ((slot = sup.cfg->hooks->claim(def->name)) < 0) {
            *err = "this server is running as many code sandboxes as it allows";
            return NULL;
        }
        if (!(b = box_start(def, deftext, id, err))) {
            sup.cfg->hooks->release(slot);
            return NULL;
        }
        b->slot = slot;
    }
    b->container = b->tag = apr_pstrdup(b->pool, id);
    return b;
}

static void handle_attach(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    ci_sandbox_def *def;
    const char *id, *deftext, *err = NULL;
    ci_container *rec;
    box *b;
    waiter *w;
    apr_pool_create(&p, sup.p);
    detach(c);
    if ((err = ci_sup_create_decode(p, f, &def, &id, &deftext)))
        ;
    else if (!(rec = ci_directory_find(sup.dir, id)) || rec->status != CI_CNTR_RUNNING)
        err = "the container is not running";
    else if (!(b = container_box(id)))
        b = container_start(def, deftext, id, &err);
    if (err) {
        send_text(c, CI_SUP_ERROR, 0, err);
        apr_pool_destroy(p);
        return;
    }
    apr_pool_destroy(p);
    c->attached = b;
    if (b->state == BOX_IDLE || b->state == BOX_RUNNING) {
        send_frame(c, CI_SUP_OK, b->id, NULL, 0);
        return;
    }
    if (b->state == BOX_DEAD && box_spawn(b) < 0) {
        c->attached = NULL;
        send_text(c, CI_SUP_ERROR, 0, "the local sandbox could not be forked");
        return;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        c->closing = 1;
        return;
    }
    w->c = c;
    w->next = b->waiters;
    b->waiters = w;
}

static void kill_container(const char *id, const char *why)
{
    box *b = container_box(id);
    if (!b)
        return;
    ci_log(CI_LOG_INFO, "CI0618: sandbox %u of container %s destroyed (%s)", b->id, id,
           why);
    box_free(b);
}

/* Containers whose sandbox runs or awaits code are busy: neither expired
 * nor evicted while they are. */
static void mark_busy(void)
{
    box *b;
    for (b = sup.boxes; b; b = b->next) {
        ci_container *rec = b->container ? ci_directory_find(sup.dir, b->container)
                                         : NULL;
        if (rec)
            rec->busy = b->runner || b->runq || b->waiters || b->state == BOX_STARTING;
    }
}

static void handle_dir(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    apr_array_header_t *gone;
    const char *answer;
    int i;
    mark_busy();
    apr_pool_create(&p, sup.p);
    gone = apr_array_make(p, 2, sizeof(const char *));
    answer = ci_supdir_apply(sup.dir, p, f->data, f->len, apr_time_now(), gone);
    send_text(c, CI_SUP_DIR_ANSWER, 0, answer);
    for (i = 0; i < gone->nelts; i++)
        kill_container(APR_ARRAY_IDX(gone, i, const char *), "deleted or evicted");
    apr_pool_destroy(p);
}

/* Resident bytes of the processes of PIDS (/proc/PID/statm). */
static apr_uint64_t resident(const pid_t *pids, int n)
{
    apr_uint64_t total = 0, page = (apr_uint64_t)sysconf(_SC_PAGESIZE);
    int i;
    for (i = 0; i < n; i++) {
        char path[64], buf[128];
        unsigned long size, rss;
        ssize_t got;
        int fd;
        snprintf(path, sizeof(path), "/proc/%ld/statm", (long)pids[i]);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            continue;
        got = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        buf[got > 0 ? got : 0] = '\0';
        if (sscanf(buf, "%lu %lu", &size, &rss) == 2)
            total += (apr_uint64_t)rss * page;
    }
    return total;
}

/* Once a second: a sandbox holding more resident memory than its tier
 * allows (rss_bound, the whole sandbox) is killed, as the kernel's OOM
 * killer would: its run ends lost, a container's starts again empty. */
static void enforce_memory(void)
{
    apr_array_header_t *all = NULL;
    apr_time_t now = apr_time_now();
    apr_pool_t *p;
    box *b, *next;
    apr_pool_create(&p, sup.p);
    for (b = sup.boxes; b; b = next) {
        apr_uint64_t rss;
        next = b->next;
        if (!b->def->rss_bound || b->pid <= 0 ||
            (b->state != BOX_IDLE && b->state != BOX_RUNNING))
            continue;
        /* an idle sandbox starts nothing; a running one may */
        if (!b->procs_at || (b->state == BOX_RUNNING && now - b->procs_at >= PROCS_RESCAN) ||
            b->procs[0] != b->pid) {
            if (!all)
                all = proc_parents(p);
            b->nprocs = descendants(all, b->pid, b->procs, PROCS_MAX);
            b->procs_at = now;
        }
        if ((rss = resident(b->procs + 1, b->nprocs - 1)) <= b->def->rss_bound)
            continue;
        ci_log(CI_LOG_WARNING, "CI0621: sandbox %u of tool %s holds %" APR_UINT64_T_FMT
               " bytes, over its bound of %" APR_UINT64_T_FMT ": killed", b->id,
               b->def->name, rss, b->def->rss_bound);
        if (b->state == BOX_RUNNING)
            stop_run(b, CI_EXEC_LOST);
        else if (!b->owner && !b->container) {
            box_free(b);                  /* a warm one: the pool makes another */
            sup.refill_due = 1;
        }
        else
            box_kill(b);
    }
    apr_pool_destroy(p);
}

/* Once a second: containers in use are alive; the idle past their expiry
 * lose their sandboxes. */
static void expire_containers(void)
{
    apr_time_t now = apr_time_now();
    apr_array_header_t *expired;
    apr_pool_t *p;
    box *b;
    int i;
    if (now < sup.next_expiry_check)
        return;
    sup.next_expiry_check = now + apr_time_from_msec(TICK_MS);
    enforce_memory();
    for (b = sup.boxes; b; b = b->next)
        if (b->container && (b->runner || b->runq || b->state == BOX_STARTING))
            touch_container(b);
    mark_busy();
    apr_pool_create(&p, sup.p);
    expired = ci_directory_expire(sup.dir, now, p);
    for (i = 0; i < expired->nelts; i++)
        kill_container(APR_ARRAY_IDX(expired, i, ci_container *)->id, "expired");
    apr_pool_destroy(p);
}

/* What the supervisor holds, as JSON: sandboxes, and containers (running
 * per tool, executing, idle, expired records kept). */
static void handle_status(conn *c)
{
    apr_pool_t *p;
    json_object *o, *cs, *tools;
    apr_hash_t *by_tool;
    apr_hash_index_t *hi;
    box *b;
    conn *k;
    int n = 0, warm = 0, conns = 0, boxes = 0, executing = 0, retained = 0;
    apr_pool_create(&p, sup.p);
    for (b = sup.boxes; b; b = b->next) {
        n++;
        warm += b->warm && !b->owner && !b->container && b->state == BOX_IDLE;
        boxes += b->container != NULL;
        executing += b->container && (b->runner || b->runq);
    }
    for (k = sup.conns; k; k = k->next)
        conns++;
    by_tool = ci_directory_tally(sup.dir, p, &retained);
    o = ci_json_own(p, json_object_new_object());
    json_object_object_add(o, "version", json_object_new_int(CI_SUP_VERSION));
    json_object_object_add(o, "pid", json_object_new_int64(getpid()));
    json_object_object_add(o, "sandboxes", json_object_new_int(n));
    json_object_object_add(o, "warm", json_object_new_int(warm));
    json_object_object_add(o, "connections", json_object_new_int(conns));
    cs = json_object_new_object();
    json_object_object_add(cs, "running", json_object_new_int(ci_directory_live(sup.dir)));
    json_object_object_add(cs, "executing", json_object_new_int(executing));
    json_object_object_add(cs, "local_sandboxes", json_object_new_int(boxes));
    json_object_object_add(cs, "expired", json_object_new_int(retained));
    tools = json_object_new_object();
    for (hi = apr_hash_first(p, by_tool); hi; hi = apr_hash_next(hi))
        json_object_object_add(tools, apr_hash_this_key(hi),
                               json_object_new_int(*(int *)apr_hash_this_val(hi)));
    json_object_object_add(cs, "by_tool", tools);
    json_object_object_add(o, "containers", cs);
    send_text(c, CI_SUP_STATUS, 0, ci_json_text(o, NULL));
    apr_pool_destroy(p);
}

static void handle_frame(conn *c, const ci_sup_frame *f)
{
    box *b;
    if (!c->helloed) {
        int version = f->type == CI_SUP_HELLO ? ci_sup_hello_version(f) : -1;
        apr_size_t len;
        const char *hello = ci_sup_hello(c->pool, &len);
        send_frame(c, CI_SUP_HELLO, 0, hello, len);
        if (version != CI_SUP_VERSION) {
            ci_log(CI_LOG_WARNING, "CI0614: process %ld speaks protocol version %d, "
                   "this supervisor %d: connection closed", (long)c->pid, version,
                   CI_SUP_VERSION);
            c->closing = 1;
        }
        c->helloed = 1;
        return;
    }
    switch (f->type) {
    case CI_SUP_CREATE:    handle_create(c, f, 0); break;
    case CI_SUP_WARM_TAKE: handle_create(c, f, 1); break;
    case CI_SUP_WARM_SET:  handle_warm_set(c, f); break;
    case CI_SUP_RUN:       handle_run(c, f); break;
    case CI_SUP_STATUS:    handle_status(c); break;
    case CI_SUP_ATTACH:    handle_attach(c, f); break;
    case CI_SUP_DIR:       handle_dir(c, f); break;
    case CI_SUP_FILEOP:    handle_fileop(c, f); break;
    case CI_SUP_FILEDATA:
    case CI_SUP_FILEEND:   handle_filedata(c, f); break;
    case CI_SUP_INTERRUPT:
        if ((b = owned(c, f->id)) && b->container) {
            if (b->runner == c && b->state == BOX_RUNNING &&
                b->interrupted == CI_EXEC_COMPLETED)
                interrupt_kernel(b, CI_EXEC_INTERRUPTED);
            else if (b->runner != c && dequeue(b, c))
                send_end(c, b->id, CI_EXEC_INTERRUPTED);   /* it never ran */
        }
        else if (b)
            stop_run(b, CI_EXEC_INTERRUPTED);
        break;
    case CI_SUP_DESTROY:
        if ((b = owned(c, f->id)) && b->container)
            detach(c);                /* a container's stays */
        else if (b)
            box_free(b);
        send_frame(c, CI_SUP_OK, f->id, NULL, 0);
        break;
    default:
        c->closing = 1;
    }
}

static void conn_readable(conn *c)
{
    char buf[READ_CHUNK];
    ci_sup_frame f;
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0 || ci_sup_reader_feed(c->reader, buf, (apr_size_t)n) < 0) {
        c->closing = 2;               /* gone: no answer can reach it */
        return;
    }
    while (!c->closing && ci_sup_reader_next(c->reader, &f))
        handle_frame(c, &f);
    if (ci_sup_reader_broken(c->reader))
        c->closing = 2;
}

/* ---- sandbox output --------------------------------------------------------- */

static void start_failed(box *b, const char *why)
{
    char buf[512];
    ssize_t n = b->err_fd >= 0 ? read(b->err_fd, buf, sizeof(buf) - 1) : -1;
    const char *msg;
    buf[n > 0 ? n : 0] = '\0';
    if (strchr(buf, '\n'))
        *strchr(buf, '\n') = '\0';
    msg = apr_psprintf(b->pool, "the local sandbox did not start (%s)%s%s", why,
                       n > 0 ? ": " : "", n > 0 ? buf : "");
    ci_log(CI_LOG_WARNING, "CI0615: sandbox %u of tool %s: %s", b->id, b->def->name, msg);
    if (b->owner)
        send_text(b->owner, CI_SUP_ERROR, 0, msg);
    if (b->container)
        release_waiting(b, msg);
    box_free(b);
}

static void became_ready(box *b)
{
    b->state = BOX_IDLE;
    if (b->container) {
        while (b->waiters) {
            waiter *w = b->waiters;
            b->waiters = w->next;
            send_frame(w->c, CI_SUP_OK, b->id, NULL, 0);
            free(w);
        }
        next_run(b);
    }
    else if (b->owner)
        send_frame(b->owner, CI_SUP_OK, b->id, NULL, 0);
    else if (b->slot >= 0) {
        sup.cfg->hooks->set_warm(b->slot, 1);
        b->counted_warm = 1;
    }
}

static void fileop_output(box *b, const char *buf, apr_size_t n);

static void box_readable(box *b)
{
    char buf[READ_CHUNK];
    ssize_t n = read(b->out_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {                       /* the kernel is gone */
        if (b->state == BOX_STARTING)
            start_failed(b, "eof");
        else if (!b->owner && !b->container) {
            box_free(b);                /* a warm one: the pool makes another */
            sup.refill_due = 1;
        }
        else
            stop_run(b, CI_EXEC_LOST);
        return;
    }
    if (b->state == BOX_RUNNING && client_of(b) && !(b->fileop && b->put_refusal))
        send_frame(client_of(b), CI_SUP_OUTPUT, b->id, buf, (apr_size_t)n);
    if (b->state == BOX_RUNNING && b->fileop) {
        fileop_output(b, buf, (apr_size_t)n);
        return;
    }
    if (ci_ndjson_feed(b->nd, buf, (apr_size_t)n) < 0) {
        stop_run(b, CI_EXEC_LOST);      /* past the hard cap */
        return;
    }
    if (b->state == BOX_STARTING && ci_ndjson_ready(b->nd))
        became_ready(b);
    else if (b->state == BOX_RUNNING && ci_ndjson_ended(b->nd)) {
        conn *to = client_of(b);
        ci_exec_outcome why = b->interrupted;
        b->state = BOX_IDLE;
        b->interrupted = CI_EXEC_COMPLETED;
        if (to && why != CI_EXEC_COMPLETED)
            send_end_kept(to, b->id, why);
        else if (to)
            send_end(to, b->id, CI_EXEC_COMPLETED);
        if (b->container) {
            b->runner = NULL;
            touch_container(b);
            next_run(b);
        }
    }
}

/* A file operation's output: relayed as it comes (the client's back-pressure
 * bounds what waits here), not parsed; it ends with FILEOP_END. */
static void fileop_output(box *b, const char *buf, apr_size_t n)
{
    conn *to = client_of(b);
    ci_exec_outcome why = b->interrupted;
    fileop_progress(b);
    if (n >= FILEOP_END_LEN) {
        memcpy(b->tail, buf + n - FILEOP_END_LEN, FILEOP_END_LEN);
        b->tail_len = FILEOP_END_LEN;
    }
    else {
        apr_size_t keep = b->tail_len + n > FILEOP_END_LEN ? FILEOP_END_LEN - n
                                                           : b->tail_len;
        memmove(b->tail, b->tail + b->tail_len - keep, keep);
        memcpy(b->tail + keep, buf, n);
        b->tail_len = keep + n;
    }
    if (b->tail_len != FILEOP_END_LEN || memcmp(b->tail, FILEOP_END, FILEOP_END_LEN))
        return;
    if (b->put_refusal && to)         /* what the kernel said was not relayed */
        send_fileop_answer(b, to, b->put_refusal);
    b->put_refusal = NULL;
    b->state = BOX_IDLE;
    b->fileop = 0;
    b->interrupted = CI_EXEC_COMPLETED;
    if (to && why != CI_EXEC_COMPLETED)
        send_end_kept(to, b->id, why);
    else if (to)
        send_end(to, b->id, CI_EXEC_COMPLETED);
    b->runner = NULL;
    next_run(b);
}

static void check_deadlines(void)
{
    apr_time_t now = apr_time_now();
    box *b, *next;
    for (b = sup.boxes; b; b = next) {
        next = b->next;
        if (b->state == BOX_STARTING && now >= b->deadline)
            start_failed(b, "timeout");
        else if (b->state == BOX_RUNNING && now >= b->deadline && b->fileop &&
                 b->runner) {
            /* A file operation past its time: its client is too slow (the
             * kernel waits on the relay's back-pressure). The client is
             * dropped, not the kernel interrupted: what is left is read and
             * discarded, and the container keeps its state. */
            ci_log(CI_LOG_INFO, "CI0623: file operation on container %s took too "
                   "long: its connection closed", b->container);
            b->runner->closing = 2;
            b->deadline = now + FILEOP_DRAIN;
        }
        else if (b->state == BOX_RUNNING && now >= b->deadline && b->container &&
                 b->interrupted == CI_EXEC_COMPLETED)
            interrupt_kernel(b, CI_EXEC_TIMED_OUT);
        else if (b->state == BOX_RUNNING && now >= b->deadline)
            stop_run(b, b->interrupted != CI_EXEC_COMPLETED ? b->interrupted
                                                             : CI_EXEC_TIMED_OUT);
    }
}

/* Reap anything that died without our noticing its output's end. */
static void reap_strays(void)
{
    int status;
    pid_t pid;
    box *b;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (b = sup.boxes; b; b = b->next)
            if (b->pid == pid) {
                b->pid = -1;          /* the output's EOF tells the rest */
                break;
            }
}

/* ---- the loop --------------------------------------------------------------- */

typedef struct slot_ref {
    enum { REF_LISTEN, REF_CONN, REF_OUT, REF_IN } kind;
    void *ptr;
} slot_ref;

static int poll_timeout(void)
{
    apr_time_t now = apr_time_now(), next = now + apr_time_from_msec(TICK_MS);
    box *b;
    for (b = sup.boxes; b; b = b->next)
        if ((b->state == BOX_STARTING || b->state == BOX_RUNNING) && b->deadline < next)
            next = b->deadline;
    return next <= now ? 0 : (int)apr_time_as_msec(next - now) + 1;
}

/* C is sending a put's data faster than the kernel takes it: C is not read
 * until the kernel catches up (the socket's buffer then holds C back). */
static int uploading_ahead(const conn *c)
{
    const box *b = c->attached;
    return b && b->upload && b->runner == c && outq_len(&b->input) >= BACKLOG_MAX;
}

static int build_pollset(apr_array_header_t *pfds, apr_array_header_t *refs)
{
    conn *c;
    box *b;
#define ADD(fd_, ev_, kind_, ptr_) do { \
        struct pollfd *pf = apr_array_push(pfds); slot_ref *r = apr_array_push(refs); \
        pf->fd = (fd_); pf->events = (ev_); pf->revents = 0; \
        r->kind = (kind_); r->ptr = (ptr_); } while (0)
    pfds->nelts = refs->nelts = 0;
    ADD(sup.cfg->listen_fd, POLLIN, REF_LISTEN, NULL);
    for (c = sup.conns; c; c = c->next)
        ADD(c->fd, (uploading_ahead(c) ? 0 : POLLIN) | (outq_len(&c->out) ? POLLOUT : 0),
            REF_CONN, c);
    for (b = sup.boxes; b; b = b->next) {
        /* Back-pressure: a slow reader stops the sandbox's output. */
        if (b->out_fd >= 0 && (!client_of(b) || outq_len(&client_of(b)->out) < BACKLOG_MAX))
            ADD(b->out_fd, POLLIN, REF_OUT, b);
        if (b->in_fd >= 0 && outq_len(&b->input))
            ADD(b->in_fd, POLLOUT, REF_IN, b);
    }
#undef ADD
    return pfds->nelts;
}

/* Whether B is still in the list (an earlier event may have freed it). */
static int box_alive(const box *b)
{
    const box *x;
    for (x = sup.boxes; x; x = x->next)
        if (x == b)
            return 1;
    return 0;
}

static int conn_alive(const conn *c)
{
    const conn *x;
    for (x = sup.conns; x; x = x->next)
        if (x == c)
            return 1;
    return 0;
}

static void dispatch(struct pollfd *pf, slot_ref *r)
{
    if (!pf->revents)
        return;
    if (r->kind == REF_LISTEN)
        accept_one();
    else if (r->kind == REF_CONN && conn_alive(r->ptr)) {
        conn *c = r->ptr;
        if (pf->revents & POLLOUT && outq_flush(&c->out, c->fd, 1) < 0)
            c->closing = 2;
        if (pf->revents & (POLLIN | POLLHUP | POLLERR) && !c->closing)
            conn_readable(c);
    }
    else if (r->kind == REF_OUT && box_alive(r->ptr) && ((box *)r->ptr)->out_fd == pf->fd)
        box_readable(r->ptr);
    else if (r->kind == REF_IN && box_alive(r->ptr) && ((box *)r->ptr)->in_fd == pf->fd) {
        box *b = r->ptr;
        if (outq_flush(&b->input, b->in_fd, 0) < 0)
            stop_run(b, CI_EXEC_LOST);
    }
}

/* Drop connections that are done: after flushing what they are owed. */
static void sweep_conns(void)
{
    conn *c, *next;
    for (c = sup.conns; c; c = next) {
        next = c->next;
        if (c->closing == 1)
            outq_flush(&c->out, c->fd, 1);
        if (c->closing)
            conn_free(c);
    }
}

static void start_wants(apr_pool_t *p)
{
    ci_sup_frame f;
    apr_array_header_t *wants;
    const char *err = NULL;
    if (!sup.cfg->wants)
        return;
    f.type = CI_SUP_WARM_SET;
    f.id = 0;
    f.data = sup.cfg->wants;
    f.len = sup.cfg->wants_len;
    if ((wants = ci_sup_warm_decode(p, &f, &err)))
        set_wants(wants);
    else
        ci_log(CI_LOG_ERR, "CI0616: warm pools not understood: %s", err);
}

void ci_supervisor_run(apr_pool_t *p, const ci_sup_config *cfg)
{
    apr_array_header_t *pfds = apr_array_make(p, 64, sizeof(struct pollfd));
    apr_array_header_t *refs = apr_array_make(p, 64, sizeof(slot_ref));
    ci_directory_limits lim = { 0, 0, apr_time_from_sec(3600), (apr_size_t)64 << 20, 0, 0, 0 };
    memset(&sup, 0, sizeof(sup));
    sup.p = p;
    sup.cfg = cfg;
    sup.dir = ci_directory_create(p, &lim);
    start_wants(p);
    ci_log(CI_LOG_NOTICE, "CI0617: sandbox supervisor %ld serving (protocol %d)",
           (long)getpid(), CI_SUP_VERSION);
    for (;;) {
        int i, n = build_pollset(pfds, refs);
        int rc = poll((struct pollfd *)pfds->elts, (nfds_t)n, poll_timeout());
        if (rc < 0 && errno != EINTR)
            return;
        for (i = 0; rc > 0 && i < n; i++)
            dispatch(&APR_ARRAY_IDX(pfds, i, struct pollfd),
                     &APR_ARRAY_IDX(refs, i, slot_ref));
        sweep_conns();
        check_deadlines();
        expire_containers();
        reap_strays();
        if (sup.refill_due)
            refill();
        if (getppid() != cfg->parent)
            return;                   /* httpd's parent is gone */
    }
}

/*
 * ci_supervisor.c - the local sandbox supervisor's loop.
 *
 * One thread, one poll loop: bubblewrap's --die-with-parent fires when the
 * *thread* that forked it exits, so every sandbox is forked here, by the
 * only thread there is. Each sandbox is a direct child; only this process
 * signals it, by the pid it forked. Its output is relayed: the kernel's
 * descriptors never leave this process.
 *
 * This file, the top of the supervisor: the daemon's entry
 * (ci_supervisor_run), the loop, connections and the frames they send, peer
 * checks and status. Its state and the frames it sends, its sandboxes, their
 * runs, containers, warm pools, file operations and processes each have a
 * file of their own below this one (ci_supervisor_internal.h lists them,
 * from the bottom up; none calls up into a file above it).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <apr_allocator.h>
#include <apr_hash.h>
#include <apr_tables.h>
#include "ci_directory.h"
#include "ci_json.h"
#include "ci_log.h"
#include "ci_supervisor_internal.h"

/* ---- connections -------------------------------------------------------- */

static void conn_free(conn *c)
{
    conn **pp;
    box *b, *next;
    int n = 0;
    sup_detach(c);
    for (b = sup_state.boxes; b; b = next) {
        next = b->next;
        if (b->owner == c) {
            sup_box_free(b);
            n++;
        }
    }
    for (pp = &sup_state.conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (n)
        ci_log(CI_LOG_INFO, "CI0611: connection of process %ld closed; its %d "
               "sandbox(es) destroyed", (long)c->pid, n);
    close(c->fd);
    sup_outq_free(&c->out);
    apr_pool_destroy(c->pool);
}

/* ---- peers -------------------------------------------------------------- */

/* A peer is httpd's parent itself, or one of its children running as the
 * children's uid: a CGI script has the same uid but another parent. */
static int peer_allowed(int fd, pid_t *pid, int *is_parent)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    *pid = cred.pid;
    *is_parent = cred.pid == sup_state.cfg->parent;
    if (*is_parent)
        return 1;
    return cred.uid == sup_state.cfg->uid &&
           sup_parent_of(cred.pid) == sup_state.cfg->parent;
}

static void accept_one(void)
{
    int fd = accept4(sup_state.cfg->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
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
    apr_pool_create(&p, sup_state.p);
    c = apr_pcalloc(p, sizeof(*c));
    c->pool = p;
    c->fd = fd;
    c->pid = pid;
    c->is_parent = is_parent;
    c->reader = ci_sup_reader_create(p);
    c->next = sup_state.conns;
    sup_state.conns = c;
}

/* ---- status ------------------------------------------------------------- */

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
    apr_pool_create(&p, sup_state.p);
    for (b = sup_state.boxes; b; b = b->next) {
        n++;
        warm += b->warm && !b->owner && !b->container && b->state == BOX_IDLE;
        boxes += b->container != NULL;
        executing += b->container && (b->runner || b->runq);
    }
    for (k = sup_state.conns; k; k = k->next)
        conns++;
    by_tool = ci_directory_tally(sup_state.dir, p, &retained);
    o = ci_json_own(p, json_object_new_object());
    json_object_object_add(o, "version", json_object_new_int(CI_SUP_VERSION));
    json_object_object_add(o, "pid", json_object_new_int64(getpid()));
    json_object_object_add(o, "sandboxes", json_object_new_int(n));
    json_object_object_add(o, "warm", json_object_new_int(warm));
    json_object_object_add(o, "connections", json_object_new_int(conns));
    json_object_object_add(o, "cpu", json_object_new_string(sup_cpu_mode()));
    json_object_object_add(o, "cgroup", json_object_new_string(sup_cgroup_text(p)));
    cs = json_object_new_object();
    json_object_object_add(cs, "running",
                           json_object_new_int(ci_directory_live(sup_state.dir)));
    json_object_object_add(cs, "executing", json_object_new_int(executing));
    json_object_object_add(cs, "local_sandboxes", json_object_new_int(boxes));
    json_object_object_add(cs, "expired", json_object_new_int(retained));
    tools = json_object_new_object();
    for (hi = apr_hash_first(p, by_tool); hi; hi = apr_hash_next(hi))
        json_object_object_add(tools, apr_hash_this_key(hi),
                               json_object_new_int(*(int *)apr_hash_this_val(hi)));
    json_object_object_add(cs, "by_tool", tools);
    json_object_object_add(o, "containers", cs);
    sup_send_text(c, CI_SUP_STATUS, 0, ci_json_text(o, NULL));
    apr_pool_destroy(p);
}

/* ---- frames ------------------------------------------------------------- */

static void read_others(void);

static void handle_frame(conn *c, const ci_sup_frame *f)
{
    if (!c->helloed) {
        int version = f->type == CI_SUP_HELLO ? ci_sup_hello_version(f) : -1;
        apr_size_t len;
        const char *hello = ci_sup_hello(c->pool, &len);
        sup_send_frame(c, CI_SUP_HELLO, 0, hello, len);
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
    case CI_SUP_CREATE:    sup_handle_create(c, f, 0); break;
    case CI_SUP_WARM_TAKE: sup_handle_create(c, f, 1); break;
    case CI_SUP_WARM_SET:  sup_handle_warm_set(c, f); break;
    case CI_SUP_RUN:       sup_handle_run(c, f); break;
    case CI_SUP_SHELL:     sup_handle_shell(c, f); break;
    case CI_SUP_STATUS:    handle_status(c); break;
    case CI_SUP_ATTACH:    sup_handle_attach(c, f); break;
    case CI_SUP_DIR:       sup_handle_dir(c, f, read_others); break;
    case CI_SUP_FILEOP:    sup_handle_fileop(c, f); break;
    case CI_SUP_FILEDATA:
    case CI_SUP_FILEEND:   sup_handle_filedata(c, f); break;
    case CI_SUP_INTERRUPT: sup_handle_interrupt(c, f); break;
    case CI_SUP_DESTROY:   sup_handle_destroy(c, f); break;
    default:
        c->closing = 1;
    }
}

/* Read what C holds (one chunk) and handle its frames: the bytes read, 0
 * when there was nothing (or C is gone). The buffer is not on the stack:
 * handling a frame may read other connections in turn (read_others),
 * and each level has fed its reader before it handles anything. */
static ssize_t conn_readable(conn *c)
{
    static char buf[READ_CHUNK];
    ci_sup_frame f;
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n <= 0 || ci_sup_reader_feed(c->reader, buf, (apr_size_t)n) < 0) {
        c->closing = 2;               /* gone: no answer can reach it */
        return 0;
    }
    c->handling = 1;
    while (!c->closing && ci_sup_reader_next(c->reader, &f))
        handle_frame(c, &f);
    c->handling = 0;
    if (ci_sup_reader_broken(c->reader))
        c->closing = 2;
    return n;
}

/* Whether C may be read by read_others. */
static int readable_now(const conn *c)
{
    return !c->handling && !c->closing && !sup_uploading_ahead(c);
}

/* Read and handle what the other connections hold already: those whose
 * frames are not being handled now (a lookup that missed, on one of them,
 * may ask this again, for the rest: sup_handle_dir). */
static void read_others(void)
{
    apr_pool_t *p;
    struct pollfd *pfds;
    conn *c, **which;
    int n = 0, i;
    for (c = sup_state.conns; c; c = c->next)
        n += readable_now(c);
    if (!n)
        return;
    apr_pool_create(&p, sup_state.p);
    pfds = apr_palloc(p, n * sizeof(*pfds));
    which = apr_palloc(p, n * sizeof(*which));
    for (n = 0, c = sup_state.conns; c; c = c->next)
        if (readable_now(c)) {
            pfds[n].fd = c->fd;
            pfds[n].events = POLLIN;
            pfds[n].revents = 0;
            which[n++] = c;
        }
    /* one system call for all; only those with something are read */
    if (poll(pfds, (nfds_t)n, 0) > 0)
        for (i = 0; i < n; i++)
            while ((pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                   readable_now(which[i]) && conn_readable(which[i]) == READ_CHUNK)
                ;                     /* a full chunk: there may be more */
    apr_pool_destroy(p);
}

/* ---- the loop ----------------------------------------------------------- */

typedef struct slot_ref {
    enum { REF_LISTEN, REF_CONN, REF_OUT, REF_IN } kind;
    void *ptr;
} slot_ref;

static int poll_timeout(void)
{
    apr_time_t now = apr_time_now(), next = now + apr_time_from_msec(TICK_MS);
    box *b;
    for (b = sup_state.boxes; b; b = b->next)
        if ((b->state == BOX_STARTING || b->state == BOX_RUNNING) && b->deadline < next)
            next = b->deadline;
    return next <= now ? 0 : (int)apr_time_as_msec(next - now) + 1;
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
    ADD(sup_state.cfg->listen_fd, POLLIN, REF_LISTEN, NULL);
    for (c = sup_state.conns; c; c = c->next)
        ADD(c->fd,
            (sup_uploading_ahead(c) ? 0 : POLLIN) | (sup_outq_len(&c->out) ? POLLOUT : 0),
            REF_CONN, c);
    for (b = sup_state.boxes; b; b = b->next) {
        /* Back-pressure: a slow reader stops the sandbox's output. */
        if (b->out_fd >= 0 &&
            (!sup_client_of(b) || sup_outq_len(&sup_client_of(b)->out) < BACKLOG_MAX))
            ADD(b->out_fd, POLLIN, REF_OUT, b);
        if (b->in_fd >= 0 && sup_outq_len(&b->input))
            ADD(b->in_fd, POLLOUT, REF_IN, b);
    }
#undef ADD
    return pfds->nelts;
}

/* Whether B is still in the list (an earlier event may have freed it). */
static int box_alive(const box *b)
{
    const box *x;
    for (x = sup_state.boxes; x; x = x->next)
        if (x == b)
            return 1;
    return 0;
}

static int conn_alive(const conn *c)
{
    const conn *x;
    for (x = sup_state.conns; x; x = x->next)
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
        if (pf->revents & POLLOUT && sup_outq_flush(&c->out, c->fd, 1) < 0)
            c->closing = 2;
        if (pf->revents & (POLLIN | POLLHUP | POLLERR) && !c->closing)
            conn_readable(c);
    }
    else if (r->kind == REF_OUT && box_alive(r->ptr) && ((box *)r->ptr)->out_fd == pf->fd)
        sup_box_readable(r->ptr);
    else if (r->kind == REF_IN && box_alive(r->ptr) && ((box *)r->ptr)->in_fd == pf->fd) {
        box *b = r->ptr;
        if (sup_outq_flush(&b->input, b->in_fd, 0) < 0)
            sup_stop_run(b, CI_EXEC_LOST);
    }
}

/* Drop connections that are done: after flushing what they are owed. */
static void sweep_conns(void)
{
    conn *c, *next;
    for (c = sup_state.conns; c; c = next) {
        next = c->next;
        if (c->closing == 1)
            sup_outq_flush(&c->out, c->fd, 1);
        if (c->closing)
            conn_free(c);
    }
}

/* What a sandbox's output made this process hold goes back to the system
 * when it is freed: glibc's threshold for mapping a block on its own would
 * otherwise rise with every large block freed (a long line, an image), and
 * the next ones would come from the heap, which is seldom given back; and
 * APR's allocator would keep every block it was ever given. */
#define SUP_MMAP_THRESHOLD (256 * 1024)
#define SUP_POOL_MAX_FREE ((apr_size_t)2 * 1024 * 1024)

static void give_memory_back(apr_pool_t *p)
{
    mallopt(M_MMAP_THRESHOLD, SUP_MMAP_THRESHOLD);
    apr_allocator_max_free_set(apr_pool_allocator_get(p), SUP_POOL_MAX_FREE);
}

void ci_supervisor_run(apr_pool_t *p, const ci_sup_config *cfg)
{
    apr_array_header_t *pfds = apr_array_make(p, 64, sizeof(struct pollfd));
    apr_array_header_t *refs = apr_array_make(p, 64, sizeof(slot_ref));
    ci_directory_limits lim = { 0, 0, apr_time_from_sec(3600), (apr_size_t)64 << 20, 0, 0, 0 };
    memset(&sup_state, 0, sizeof(sup_state));
    give_memory_back(p);
    sup_state.p = p;
    sup_state.cfg = cfg;
    sup_state.dir = ci_directory_create(p, &lim);
    sup_start_containers(p);
    sup_start_wants(p);
    ci_log(CI_LOG_NOTICE, "CI0617: sandbox supervisor %ld serving (protocol %d)",
           (long)getpid(), CI_SUP_VERSION);
    ci_log(CI_LOG_NOTICE, "CI0670: sandboxes' CPU: %s", sup_cpu_mode_text(p));
    sup_state.cgroup_sweep_due = 1;   /* what an earlier one left, still exiting */
    for (;;) {
        int i, n = build_pollset(pfds, refs);
        int rc = poll((struct pollfd *)pfds->elts, (nfds_t)n, poll_timeout());
        if (rc < 0 && errno != EINTR)
            return;
        for (i = 0; rc > 0 && i < n; i++)
            dispatch(&APR_ARRAY_IDX(pfds, i, struct pollfd),
                     &APR_ARRAY_IDX(refs, i, slot_ref));
        sweep_conns();
        sup_check_deadlines();
        sup_expire_containers();
        sup_reap_strays();
        if (sup_state.refill_due)
            sup_refill();
        if (getppid() != cfg->parent)
            return;                   /* httpd's parent is gone */
    }
}

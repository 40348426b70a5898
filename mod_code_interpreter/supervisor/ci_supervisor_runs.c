/*
 * ci_supervisor_runs.c - what runs in the supervisor's sandboxes: the
 * requests on them (CREATE and WARM_TAKE, RUN, SHELL, FILEOP, INTERRUPT,
 * DESTROY), a run handed to the kernel, a container's run queue (its runs
 * and file operations take turns in arrival order), the kernel's output
 * relayed to whoever's run it is, and deadlines and interrupts. It stands on
 * the sandboxes' life (ci_supervisor_boxes.c), the warm pools and the file
 * operations' kernel side (ci_supervisor_files.c): when one of those ends a
 * run, it says so, and this file moves the queue on.
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
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <apr_strings.h>
#include "ci_json.h"
#include "ci_log.h"
#include "ci_supervisor_internal.h"

#define INTERRUPT_GRACE apr_time_from_sec(2)

/* ---- requests ----------------------------------------------------------- */

void sup_handle_create(conn *c, const ci_sup_frame *f, int take)
{
    apr_pool_t *p;
    ci_sandbox_def *def;
    const char *tag, *deftext, *err;
    box *b;
    apr_pool_create(&p, sup_state.p);
    if ((err = ci_sup_create_decode(p, f, &def, &tag, &deftext)))
        sup_send_text(c, CI_SUP_ERROR, 0, err);
    else if (take) {
        if ((b = sup_warm_ready(deftext))) {
            sup_box_release_slot(b);  /* the child claims one for it */
            b->warm = NULL;
            b->owner = c;
            b->tag = apr_pstrdup(b->pool, tag);
            sup_send_frame(c, CI_SUP_OK, b->id, NULL, 0);
            sup_state.refill_due = 1; /* after the answer is out */
        }
        else
            sup_send_frame(c, CI_SUP_NONE, 0, NULL, 0);
    }
    else if ((b = sup_box_start(def, deftext, tag, &err)))
        b->owner = c;                 /* OK once its kernel is ready */
    else
        sup_send_text(c, CI_SUP_ERROR, 0, err);
    apr_pool_destroy(p);
}

/* Queue CODE for B's kernel, which reads one JSON line: {"code": CODE}
 * (RAW other than RAW_CODE: CODE is the whole line, made here by
 * sup_handle_fileop or sup_handle_shell). */
static int queue_code(box *b, const char *code, apr_size_t len, int raw)
{
    apr_pool_t *p;
    json_object *req;
    const char *line;
    apr_size_t n;
    int rc;
    if (raw != RAW_CODE)
        return sup_outq_add(&b->input, code, len) < 0 ||
               sup_outq_add(&b->input, "\n", 1) < 0 ? -1 : 0;
    apr_pool_create(&p, b->pool);
    req = ci_json_own(p, json_object_new_object());
    json_object_object_add(req, "code", json_object_new_string_len(code, (int)len));
    line = ci_json_pstr(p, req, &n);
    rc = sup_outq_add(&b->input, line, n) < 0 ||
         sup_outq_add(&b->input, "\n", 1) < 0 ? -1 : 0;
    apr_pool_destroy(p);
    return rc;
}

/* Hand CODE to B's idle kernel for C. */
static void begin_run(box *b, conn *c, const char *code, apr_size_t len, int raw)
{
    const char *refusal;
    if (raw == RAW_PUT && (refusal = sup_put_limits(b, code, len))) {
        sup_answer_fileop(b, c, refusal);
        return;
    }
    if (queue_code(b, code, len, raw) < 0) {
        sup_box_kill(b);
        sup_send_end(c, b->id, CI_EXEC_LOST);
        return;
    }
    sup_fresh_reader(b);
    b->state = BOX_RUNNING;
    b->ran_since_scan = 1;            /* what it starts: SCHED_IDLE within a second */
    /* A shell call is an execution: the tool's timeout bounds it whole. */
    b->fileop = raw == RAW_FILEOP || raw == RAW_PUT;
    b->deadline = apr_time_now() + (b->fileop ? FILEOP_TIMEOUT : b->def->timeout);
    b->interrupted = CI_EXEC_COMPLETED;
    b->upload = raw == RAW_PUT;
    if (!b->fileop)
        sup_egress_execution(b);
    /* The line before the first one is as good as a newline. */
    b->tail[0] = '\n';
    b->tail_len = 1;
    if (b->container)
        b->runner = c;
}

/* Ctrl-C for B's code: SIGINT to the processes of the sandbox that are not
 * bubblewrap's (its monitor and the namespace's init stay untouched). */
static void interrupt_kernel(box *b, ci_exec_outcome why)
{
    pid_t pids[256];
    apr_pool_t *p;
    int i, n;
    apr_pool_create(&p, sup_state.p);
    n = b->pid > 0 ? sup_descendants(sup_proc_parents(p), b->pid, pids, 256) : 0;
    apr_pool_destroy(p);
    for (i = 1; i < n; i++)
        if (!sup_is_bwrap(pids[i]))
            kill(pids[i], SIGINT);
    b->interrupted = why;
    b->deadline = apr_time_now() + INTERRUPT_GRACE;
    ci_log(CI_LOG_INFO, "CI0619: sandbox %u of container %s interrupted (%s)", b->id,
           b->container, ci_exec_outcome_name(why));
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
            if (sup_box_spawn(b) < 0)
                sup_release_waiting(b, "the local sandbox could not be forked");
            return;
        }
        b->runq = q->next;
        begin_run(b, q->from, q->code, q->len, q->raw);
        free(q->code);
        free(q);
    }
}

/* Queue C's run of CODE (RAW: what it is, RAW_*) behind B's. 0, or -1. */
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

/* C's run of CODE (RAW_CODE or RAW_SHELL) on its sandbox ID: a
 * container's takes its turn in the queue, a request's begins at once. */
static void request_run(conn *c, apr_uint32_t id, const char *code, apr_size_t len,
                        int raw)
{
    box *b = sup_owned(c, id);
    if (b && b->container && len <= INT_MAX) {
        sup_touch_container(b);
        if (enqueue(b, c, code, len, raw) < 0)
            sup_send_end(c, id, CI_EXEC_LOST);
        next_run(b);
        return;
    }
    if (!b || b->state != BOX_IDLE || len > INT_MAX) {
        sup_send_end(c, id, CI_EXEC_LOST);
        return;
    }
    begin_run(b, c, code, len, raw);
}

void sup_handle_run(conn *c, const ci_sup_frame *f)
{
    request_run(c, f->id, f->data, f->len, RAW_CODE);
}

/* SHELL: the kernel gets the action as understood here, re-encoded, never
 * the peer's bytes; one not understood is not run. */
void sup_handle_shell(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    const char *line, *err;
    apr_size_t len;
    apr_pool_create(&p, sup_state.p);
    if ((err = ci_sup_shell_decode(p, f, &line, &len))) {
        ci_log(CI_LOG_INFO, "CI0624: shell call of process %ld on sandbox %u not "
               "run: %s", (long)c->pid, f->id, err);
        sup_send_end(c, f->id, CI_EXEC_NOT_RUN);
    }
    else
        request_run(c, f->id, line, len, RAW_SHELL);
    apr_pool_destroy(p);
}

/* A file operation of container ID's sandbox: NONE when it has none (no
 * code ever ran there, or it was lost: no files), else queued behind the
 * container's runs; the kernel's answer is relayed like a run's output. The
 * peer is one of the server's processes, which checked the owner. */
void sup_handle_fileop(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    json_object *req, *op;
    const char *id, *kind, *line, *err = NULL;
    apr_size_t len;
    box *b = NULL;
    apr_pool_create(&p, sup_state.p);
    req = ci_json_parse(p, f->data, f->len, &err);
    id = ci_json_str(req, "container");
    op = ci_json_get(req, "op", json_type_object);
    kind = ci_json_str(op, "op");
    if (!id || !kind || (strcmp(kind, "list") && strcmp(kind, "get") &&
                         strcmp(kind, "delete") && strcmp(kind, "put")))
        sup_send_text(c, CI_SUP_ERROR, 0, "a file operation not understood");
    else if (!(b = sup_container_box(id)) || b->state == BOX_DEAD)
        sup_send_frame(c, CI_SUP_NONE, 0, NULL, 0);
    else {
        sup_detach(c);
        c->attached = b;
        line = ci_json_pstr(p, op, &len);   /* one line: json-c escapes newlines */
        if (enqueue(b, c, line, len, strcmp(kind, "put") ? RAW_FILEOP : RAW_PUT) < 0)
            sup_send_end(c, b->id, CI_EXEC_LOST);
        next_run(b);
    }
    apr_pool_destroy(p);
}

/* Stop B's execution with OUTCOME: the sandbox is killed. A request's next
 * run starts a fresh one, as it always did; a container's sandbox is
 * started again for the next run in its queue (the interpreter's state is
 * gone, and the run's failure text says so). */
void sup_stop_run(box *b, ci_exec_outcome outcome)
{
    int was_running = b->state == BOX_RUNNING;
    conn *to = sup_client_of(b);
    b->interrupted = CI_EXEC_COMPLETED;
    sup_box_kill(b);
    if (was_running && to)
        sup_send_end(to, b->id, outcome);
    if (b->container) {
        b->runner = NULL;
        next_run(b);
    }
}

/* C goes: its place in its container's queue, and its run in progress. */
void sup_detach(conn *c)
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
        sup_end_upload(b, 0);         /* nothing half-written */
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

/* INTERRUPT: a container's run in progress is interrupted as Ctrl-C would
 * (one still waiting leaves the queue); a request's run is stopped. */
void sup_handle_interrupt(conn *c, const ci_sup_frame *f)
{
    box *b;
    if ((b = sup_owned(c, f->id)) && b->container) {
        if (b->runner == c && b->state == BOX_RUNNING &&
            b->interrupted == CI_EXEC_COMPLETED)
            interrupt_kernel(b, CI_EXEC_INTERRUPTED);
        else if (b->runner != c && dequeue(b, c))
            sup_send_end(c, b->id, CI_EXEC_INTERRUPTED);   /* it never ran */
    }
    else if (b)
        sup_stop_run(b, CI_EXEC_INTERRUPTED);
}

/* DESTROY: a request's sandbox goes; a container's stays, C detached. */
void sup_handle_destroy(conn *c, const ci_sup_frame *f)
{
    box *b;
    if ((b = sup_owned(c, f->id)) && b->container)
        sup_detach(c);                /* a container's stays */
    else if (b)
        sup_box_free(b);
    sup_send_frame(c, CI_SUP_OK, f->id, NULL, 0);
}

/* ---- sandbox output ----------------------------------------------------- */

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
        sup_send_text(b->owner, CI_SUP_ERROR, 0, msg);
    if (b->container)
        sup_release_waiting(b, msg);
    sup_box_free(b);
}

static void became_ready(box *b)
{
    b->state = BOX_IDLE;
    if (b->container) {
        while (b->waiters) {
            waiter *w = b->waiters;
            b->waiters = w->next;
            sup_send_frame(w->c, CI_SUP_OK, b->id, NULL, 0);
            free(w);
        }
        next_run(b);
    }
    else if (b->owner)
        sup_send_frame(b->owner, CI_SUP_OK, b->id, NULL, 0);
    else if (b->slot >= 0) {
        sup_state.cfg->hooks->set_warm(b->slot, 1);
        b->counted_warm = 1;
    }
}

void sup_box_readable(box *b)
{
    char buf[READ_CHUNK];
    ssize_t n = read(b->out_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {                       /* the kernel is gone */
        if (b->state == BOX_STARTING)
            start_failed(b, "eof");
        else if (!b->owner && !b->container) {
            sup_box_free(b);            /* a warm one: the pool makes another */
            sup_state.refill_due = 1;
        }
        else
            sup_stop_run(b, CI_EXEC_LOST);
        return;
    }
    if (b->state == BOX_RUNNING && sup_client_of(b) && !(b->fileop && b->put_refusal))
        sup_send_frame(sup_client_of(b), CI_SUP_OUTPUT, b->id, buf, (apr_size_t)n);
    if (b->state == BOX_RUNNING && b->fileop) {
        if (sup_fileop_output(b, buf, (apr_size_t)n))
            next_run(b);                /* it ended: the queue moves on */
        return;
    }
    if (ci_ndjson_feed(b->nd, buf, (apr_size_t)n) < 0) {
        sup_stop_run(b, CI_EXEC_LOST);  /* past the hard cap */
        return;
    }
    if (b->state == BOX_STARTING && ci_ndjson_ready(b->nd))
        became_ready(b);
    else if (b->state == BOX_RUNNING && ci_ndjson_ended(b->nd)) {
        conn *to = sup_client_of(b);
        ci_exec_outcome why = b->interrupted;
        b->state = BOX_IDLE;
        b->interrupted = CI_EXEC_COMPLETED;
        if (to && why != CI_EXEC_COMPLETED)
            sup_send_end_kept(to, b->id, why);
        else if (to)
            sup_send_end(to, b->id, CI_EXEC_COMPLETED);
        if (b->container) {
            b->runner = NULL;
            sup_touch_container(b);
            next_run(b);
        }
    }
}

void sup_check_deadlines(void)
{
    apr_time_t now = apr_time_now();
    box *b, *next;
    for (b = sup_state.boxes; b; b = next) {
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
            sup_stop_run(b, b->interrupted != CI_EXEC_COMPLETED ? b->interrupted
                                                                 : CI_EXEC_TIMED_OUT);
    }
}


/*
 * ci_supervisor_boxes.c - the supervisor's sandboxes ("boxes"), by id: their
 * life (forked, started, killed, freed), their registry slot, who hears
 * them, a container's found by its id, and children reaped. What runs in
 * them is ci_supervisor_runs.c's, which stands on this file: nothing here
 * calls up into runs, containers, warm pools or file operations.
 *
 * Who owns a sandbox: the connection that created or took it (destroyed
 * when that connection closes: a child that dies leaves nothing running),
 * a warm pool (destroyed when the parent no longer wants it), or a
 * container (ATTACH): then it stays across connections until its container
 * expires or is deleted, every connection attached to it may run code, and
 * their runs take turns in arrival order. A warm sandbox holds a registry
 * slot of its own until a connection takes it; the child then claims one
 * for it. A container's sandbox keeps its slot here.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include "ci_log.h"
#include "ci_supervisor_internal.h"
#include "ci_workers.h"

#define START_TIMEOUT apr_time_from_sec(60)

/* ---- sandboxes ---------------------------------------------------------- */

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* B's output reader goes, with whatever its last run left in it (a line
 * cut off, images): a killed sandbox's may have been filled on purpose,
 * and a container's is not started again until its next run. */
static void drop_reader(box *b)
{
    if (b->nd_pool)
        apr_pool_destroy(b->nd_pool);
    b->nd_pool = NULL;
    b->nd = NULL;
}

/* Kill the sandbox (it is our child) and let go of its descriptors and of
 * its output's reader (a fresh one with its next start). */
void sup_box_kill(box *b)
{
    ci_spawn_kill(&b->pid);
    sup_cgroup_end(b);              /* what outlived bubblewrap's init too */
    close_fd(&b->in_fd);
    close_fd(&b->out_fd);
    close_fd(&b->err_fd);
    sup_outq_free(&b->input);
    drop_reader(b);
    b->state = BOX_DEAD;
}

void sup_box_release_slot(box *b)
{
    if (b->slot < 0)
        return;
    if (b->counted_warm)
        sup_state.cfg->hooks->set_warm(b->slot, 0);
    b->counted_warm = 0;
    sup_state.cfg->hooks->release(b->slot);
    b->slot = -1;
}

/* Who hears a sandbox's output: its connection, or its container's runner. */
conn *sup_client_of(const box *b)
{
    return b->container ? b->runner : b->owner;
}

/* A container's sandbox goes: everyone waiting on it is told. */
void sup_release_waiting(box *b, const char *why)
{
    conn *c;
    while (b->waiters) {
        waiter *w = b->waiters;
        b->waiters = w->next;
        sup_send_text(w->c, CI_SUP_ERROR, 0, why);
        free(w);
    }
    while (b->runq) {
        queued *q = b->runq;
        b->runq = q->next;
        sup_send_end(q->from, b->id, CI_EXEC_LOST);
        free(q->code);
        free(q);
    }
    if (b->runner)
        sup_send_end(b->runner, b->id, CI_EXEC_LOST);
    b->runner = NULL;
    for (c = sup_state.conns; c; c = c->next)
        if (c->attached == b)
            c->attached = NULL;
}

void sup_box_free(box *b)
{
    box **pp;
    for (pp = &sup_state.boxes; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    if (b->container) {
        sup_release_waiting(b, "the container's sandbox was removed");
        apr_hash_set(sup_state.by_container, b->container, APR_HASH_KEY_STRING, NULL);
    }
    sup_box_release_slot(b);
    sup_box_kill(b);
    sup_egress_close(b);
    apr_pool_destroy(b->pool);
}

static apr_uint32_t new_id(void)
{
    if (++sup_state.next_id == 0)
        sup_state.next_id = 1;
    return sup_state.next_id;
}

static void set_nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* A new reader of B's output for its start or its next run; the last
 * one's memory goes (images, commands: a container's runs are many). */
void sup_fresh_reader(box *b)
{
    if (b->nd_pool)
        apr_pool_clear(b->nd_pool);
    else
        apr_pool_create(&b->nd_pool, b->pool);
    b->nd = ci_ndjson_create(b->nd_pool, b->def->max_output, CI_HARD_OUTPUT_CAP);
}

/* Fork B's sandbox (again, for a container's after a failure): STARTING
 * until its kernel says ready. -1 when it could not be forked. */
int sup_box_spawn(box *b)
{
    apr_status_t rv;
    int cgroup_fd;
    /* an allowlist's socket is made once: a sandbox forked again finds it */
    if (b->def->allowlist && !b->egress_dir && sup_egress_open(b) < 0)
        return -1;
    if ((cgroup_fd = sup_cgroup_open(b)) == -2)
        return -1;
    rv = ci_local_spawn(b->pool, b->def, b->egress_dir, cgroup_fd, &b->pid, &b->in_fd,
                        &b->out_fd, &b->err_fd);
    if (cgroup_fd >= 0)
        close(cgroup_fd);
    if (rv != APR_SUCCESS) {
        sup_cgroup_end(b);
        return -1;
    }
    set_nonblock(b->in_fd);
    set_nonblock(b->out_fd);
    set_nonblock(b->err_fd);
    sup_fresh_reader(b);
    b->kernel_pid = 0;                /* found again among the new processes */
    b->state = BOX_STARTING;
    b->deadline = apr_time_now() + START_TIMEOUT;
    ci_log(CI_LOG_DEBUG, "CI0610: sandbox %u forked (pid %ld) tool=%s tag=%s",
           b->id, (long)b->pid, b->def->name, b->tag);
    return 0;
}

/* Start a sandbox of DEF (its text DEFTEXT). NULL with *ERR when it could
 * not even be forked; otherwise it is STARTING until its kernel says ready. */
box *sup_box_start(const ci_sandbox_def *def, const char *deftext, const char *tag,
                   const char **err)
{
    apr_pool_t *p;
    box *b;
    apr_pool_create(&p, sup_state.p);
    b = apr_pcalloc(p, sizeof(*b));
    b->pool = p;
    b->def = ci_sandbox_def_copy(p, def);
    b->deftext = apr_pstrdup(p, deftext);
    b->tag = apr_pstrdup(p, tag);
    b->slot = -1;
    b->in_fd = b->out_fd = b->err_fd = -1;
    b->id = new_id();
    if (sup_box_spawn(b) < 0) {
        *err = "the local sandbox could not be forked";
        apr_pool_destroy(p);
        return NULL;
    }
    b->next = sup_state.boxes;
    sup_state.boxes = b;
    return b;
}

/* The box with ID that C owns: nothing a client sends reaches another
 * connection's sandbox. */
box *sup_owned(conn *c, apr_uint32_t id)
{
    box *b;
    for (b = sup_state.boxes; b; b = b->next)
        if (b->id == id && (b->owner == c || (b->container && c->attached == b)))
            return b;
    return NULL;
}

/* ---- a container's sandbox --------------------------------------------- */

box *sup_container_box(const char *id)
{
    return apr_hash_get(sup_state.by_container, id, APR_HASH_KEY_STRING);
}

void sup_touch_container(box *b)
{
    if (b->container)
        ci_directory_touch_id(sup_state.dir, b->container, apr_time_now());
}

/* ---- children ---------------------------------------------------------- */

/* Reap anything that died without our noticing its output's end. */
void sup_reap_strays(void)
{
    int status;
    pid_t pid;
    box *b;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (b = sup_egress_reaped(pid) ? NULL : sup_state.boxes; b; b = b->next)
            if (b->pid == pid) {
                b->pid = -1;          /* the output's EOF tells the rest */
                break;
            }
}

/*
 * ci_supervisor_containers.c - containers in the supervisor: the container
 * directory served here (DIR), and each container's sandbox: started (or
 * taken warm) at the first ATTACH, marked busy while it runs or awaits
 * code, destroyed when its container expires, is deleted or is evicted.
 *
 * The container directory (ci_directory, through ci_directory_ops) lives in the
 * supervisor: this process outlives children and graceful restarts, and
 * being one thread it serialises every change.
 */
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>
#include "ci_directory.h"
#include "ci_log.h"
#include "ci_directory_ops.h"
#include "ci_supervisor_internal.h"

/* The directory's busy probe: C's sandbox runs code, has runs queued, or
 * is starting with someone waiting for it. Neither expired nor evicted
 * while it is. */
static int container_busy(void *baton, const ci_container *c)
{
    box *b = sup_container_box(c->id);
    (void)baton;
    return b && (b->runner || b->runq || b->waiters || b->state == BOX_STARTING);
}

void sup_start_containers(apr_pool_t *p)
{
    sup_state.by_container = apr_hash_make(p);
    ci_directory_set_busy_probe(sup_state.dir, container_busy, NULL);
}

/* A sandbox for container ID: a warm one, or a new one (with a slot). */
static box *container_start(const ci_sandbox_def *def, const char *deftext,
                            const char *id, const char **err)
{
    box *b = sup_warm_ready(deftext);
    int slot;
    if (b) {
        b->warm = NULL;               /* it keeps its slot, now as live */
        if (b->counted_warm)
            sup_state.cfg->hooks->set_warm(b->slot, 0);
        b->counted_warm = 0;
        sup_state.refill_due = 1;
        ci_log(CI_LOG_DEBUG, "CI0620: warm sandbox %u became container %s's", b->id,
               id);
    }
    else {
        if ((slot = sup_state.cfg->hooks->claim(def->name)) < 0) {
            *err = "this server is running as many code sandboxes as it allows";
            return NULL;
        }
        if (!(b = sup_box_start(def, deftext, id, err))) {
            sup_state.cfg->hooks->release(slot);
            return NULL;
        }
        b->slot = slot;
    }
    b->container = b->tag = apr_pstrdup(b->pool, id);
    apr_hash_set(sup_state.by_container, b->container, APR_HASH_KEY_STRING, b);
    sup_egress_claim(b);
    return b;
}

void sup_handle_attach(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    ci_sandbox_def *def;
    const char *id, *deftext, *err = NULL;
    ci_container *rec;
    box *b;
    waiter *w;
    apr_pool_create(&p, sup_state.p);
    sup_detach(c);
    if ((err = ci_sup_create_decode(p, f, &def, &id, &deftext)))
        ;
    else if (!(rec = ci_directory_find(sup_state.dir, id)) ||
             rec->status != CI_CNTR_RUNNING)
        err = CI_SUP_NOT_RUNNING;
    else if (!(b = sup_container_box(id)))
        b = container_start(def, deftext, id, &err);
    if (err) {
        sup_send_text(c, CI_SUP_ERROR, 0, err);
        apr_pool_destroy(p);
        return;
    }
    apr_pool_destroy(p);
    c->attached = b;
    if (b->state == BOX_IDLE || b->state == BOX_RUNNING) {
        sup_send_frame(c, CI_SUP_OK, b->id, NULL, 0);
        return;
    }
    if (b->state == BOX_DEAD && sup_box_spawn(b) < 0) {
        c->attached = NULL;
        sup_send_text(c, CI_SUP_ERROR, 0, "the local sandbox could not be forked");
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
    box *b = sup_container_box(id);
    if (b) {
        ci_log(CI_LOG_INFO, "CI0618: sandbox %u of container %s destroyed (%s)", b->id, id,
               why);
        sup_box_free(b);
    }
    /* after its sandbox: a folder it binds is not removed while it runs */
    sup_skills_container_gone(id);
}

/* A DIR question. A request sends its "finish" without waiting for the
 * answer, and its client may then start the next turn on another
 * connection at once: a lookup of what a finish records ("response",
 * "conversation", "recall") that finds nothing first lets every other connection's waiting
 * frames be handled (READ_OTHERS: the loop's, in ci_supervisor.c above this
 * file, handed down with the question), then looks again. What the client saw was sent after
 * its finish was written, so that finish is in its socket by now, even when
 * this loop met the two connections in the other order. A connection has
 * one question at a time waiting for its answer (its client reads each
 * answer before it asks again), so no finish waits behind a lookup on the
 * connection being handled. */
void sup_handle_dir(conn *c, const ci_sup_frame *f, void (*read_others)(void))
{
    apr_pool_t *p;
    apr_array_header_t *gone;
    const char *answer;
    int i, missed = 0;
    if (sup_handle_skill(c, f))
        return;
    apr_pool_create(&p, sup_state.p);
    gone = apr_array_make(p, 2, sizeof(const char *));
    answer = ci_dirops_apply_lookup(sup_state.dir, p, f->data, f->len, apr_time_now(), gone,
                                    &missed);
    if (missed) {
        /* Another lookup among those read may miss in turn: it reads the
         * rest likewise. C's frames are being handled, so it is not read
         * again; each level adds one such connection, so this ends. */
        read_others();
        answer = ci_dirops_apply(sup_state.dir, p, f->data, f->len, apr_time_now(), gone);
    }
    sup_send_text(c, CI_SUP_DIR_ANSWER, 0, answer);
    for (i = 0; i < gone->nelts; i++)
        kill_container(APR_ARRAY_IDX(gone, i, const char *), "deleted or evicted");
    apr_pool_destroy(p);
}

/* Once a second: containers in use are alive; the idle past their expiry
 * lose their sandboxes. */
void sup_expire_containers(void)
{
    apr_time_t now = apr_time_now();
    apr_array_header_t *expired;
    apr_pool_t *p;
    box *b;
    int i;
    if (now < sup_state.next_expiry_check)
        return;
    sup_state.next_expiry_check = now + apr_time_from_msec(TICK_MS);
    sup_watch_processes();
    for (b = sup_state.boxes; b; b = b->next)
        if (b->container && (b->runner || b->runq || b->state == BOX_STARTING))
            sup_touch_container(b);
    apr_pool_create(&p, sup_state.p);
    expired = ci_directory_expire(sup_state.dir, now, p);
    for (i = 0; i < expired->nelts; i++)
        kill_container(APR_ARRAY_IDX(expired, i, ci_container *)->id, "expired");
    apr_pool_destroy(p);
    sup_skills_sweep();
}

/*
 * ci_session.c - the sandbox of one intercepted request: a box started on
 * first use, reused for every call of the request, restarted after a
 * failure and destroyed by a request-pool cleanup on every path. A caller
 * with an owner uses a container instead: its record is made (or found) at
 * the first call, its sandbox attached then and let go, still running, at
 * the end.
 *
 * Memory: the sandbox and its results live in a pool with its own allocator,
 * used by one thread at a time (the worker while a job runs, the request
 * thread after it), never in the request pool.
 */
#include <string.h>
#include <apr_atomic.h>
#include <apr_strings.h>
#include <http_request.h>
#include "ci_policy.h"
#include "ci_containers.h"
#include "ci_settings.h"
#include "ci_idle.h"
#include "ci_registry.h"
#include "ci_sandbox.h"
#include "ci_session.h"
#include "ci_files_in.h"
#include "ci_dirclient.h"
#include "ci_request_state.h"
#include "ci_workers.h"
#include "ci_module.h"

struct ci_session {
    request_rec *r;
    ci_req_state *st;
    const ci_sandbox_def *def;
    const char *container_id;
    int container;           /* a container's sandbox (the caller has an owner) */
    int attached;            /* its record is known and the box set up */
    int has_handle;          /* the directory holds its handle */
    apr_pool_t *root;        /* own allocator */
    ci_box *box;
    int slot;                /* in the server-wide registry, -1: none */
    ci_job *job;             /* in flight, or NULL */
    /* the job's input and output */
    const char *code;               /* what the job runs: code, or NULL and */
    ci_shell_action action;         /* the shell's commands */
    ci_exec_result res;
    apr_status_t rv;
    const char *err;
    apr_time_t start_began;
};

/* A remote container's sandbox was made now: how to reach it again goes to
 * the directory. */
static void record_handle(ci_session *s, ci_sandbox *sb)
{
    const ci_provider *prov = s->def->provider;
    const char *handle;
    if (s->has_handle || !prov->handle || !(handle = prov->handle(sb, s->root)))
        return;
    ci_containers_set_handle(s->r, s->root, s->st, handle);
    s->has_handle = 1;
}

/* The box's starts and destroys: counted, logged, and a remote sandbox
 * recorded in the registry so that a live child can delete it if this one
 * dies. */
static void box_event(void *baton, ci_box_event ev, ci_sandbox *sb, const char *why)
{
    ci_session *s = baton;
    const ci_provider *prov = s->def->provider;
    ci_reap_cred cred;
    if (s->container) {
        /* A container's sandbox is attached and let go, not started and
         * destroyed: the supervisor or the provider keeps it. One made now
         * is recorded before any code runs in it, so that it is found even
         * if this child dies during the run. (The worker thread: the
         * session's pool, not the request's.) */
        if (ev == CI_BOX_STARTED) {
            record_handle(s, sb);
            ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r, "CI0305: container %s "
                          "attached (tool %s) in %" APR_TIME_T_FMT " us", s->container_id,
                          s->def->name, apr_time_now() - s->start_began);
        }
        else
            ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r, "CI0305: container %s "
                          "released (tool %s)", s->container_id, s->def->name);
        return;
    }
    if (ev == CI_BOX_DESTROYED) {
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r,
                      "CI0301: sandbox destroyed (%s) tool=%s container=%s", why,
                      s->def->name, s->container_id);
        return;
    }
    /* A container's remote sandbox is not this child's to reap: it expires
     * at the provider when its container does. */
    if (!s->container && prov->remote_id && prov->reap_cred &&
        prov->reap_cred(s->def, &cred))
        ci_registry_set_remote(s->slot, prov->remote_id(sb), prov->name, &cred);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r,
                  "CI0302: sandbox started tool=%s provider=%s container=%s in "
                  "%" APR_TIME_T_FMT " us", s->def->name, prov->name, s->container_id,
                  apr_time_now() - s->start_began);
}

/* ---- warm sandboxes ------------------------------------------------------
 * Tools with warm=N keep N sandboxes started in advance (namespaces set up,
 * interpreter running, preload= imported) in the local sandbox supervisor:
 * one pool for the whole server, configured by the parent. There each holds
 * a registry slot of its own, so warm sandboxes count toward
 * CodeInterpreterMaxSandboxes; the request that takes one claims a slot for
 * it here (the supervisor has released its own). A warm sandbox is handed to
 * one request only. */

static apr_pool_t *own_pool(void)
{
    apr_allocator_t *alloc;
    apr_pool_t *p;
    apr_allocator_create(&alloc);
    apr_pool_create_ex(&p, NULL, NULL, alloc);
    apr_allocator_owner_set(alloc, p);
    return p;
}

/* Adopt a warm sandbox into S (a slot is claimed for it first). */
static int adopt_warm(ci_session *s)
{
    apr_time_t t0 = apr_time_now();
    apr_pool_t *p;
    ci_sandbox *sb = NULL;
    if (s->def->warm <= 0 ||
        (s->slot = ci_registry_claim(s->def->name, s->container_id)) < 0)
        return 0;
    p = own_pool();
    if (!s->def->provider->warm_take ||
        !s->def->provider->warm_take(p, s->def, s->container_id, &sb)) {
        apr_pool_destroy(p);
        return 1;                 /* the slot is claimed: start one */
    }
    ci_box_adopt(s->box, sb, p);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r,
                  "CI0307: sandbox started tool=%s provider=%s container=%s "
                  "(warm, acquired in %" APR_TIME_T_FMT " us)", s->def->name,
                  s->def->provider->name, s->container_id, apr_time_now() - t0);
    return 1;
}

/* Worker thread: run the code in the box (which starts or restarts its
 * sandbox as needed). */
static void run_job(void *baton)
{
    ci_session *s = baton;
    s->start_began = apr_time_now();
    s->rv = s->code ? ci_box_run(s->box, s->root, s->code, &s->res, &s->err)
                    : ci_box_run_commands(s->box, s->root, &s->action, &s->res, &s->err);
}

/* ACTION in the session's memory, for the worker. */
static void keep_action(ci_session *s, const ci_shell_action *action)
{
    apr_array_header_t *cmds = apr_array_make(s->root, action->commands->nelts,
                                              sizeof(const char *));
    int i;
    for (i = 0; i < action->commands->nelts; i++)
        *(const char **)apr_array_push(cmds) =
            apr_pstrdup(s->root, APR_ARRAY_IDX(action->commands, i, const char *));
    s->action = *action;
    s->action.commands = cmds;
}

/* ---- session pools --------------------------------------------------------
 * A session's memory is used by two threads in turn (the worker while a job
 * runs, the request thread after it), so it has an allocator of its own
 * rather than the request's. Making one per request cost a mapping and
 * fresh pages every time (Debian's APR maps each block of a pool); the
 * allocators of ended sessions are kept for the next ones instead, each
 * keeping at most KEPT_FREE bytes of free blocks. */
#define KEPT_ALLOCATORS 64
#define KEPT_FREE (256 * 1024)

static ci_idle *kept_allocators;    /* NULL before child_init: none kept */

static void destroy_allocator(void *alloc)
{
    apr_allocator_destroy(alloc);
}

void ci_session_child_init(apr_pool_t *pchild, server_rec *s)
{
    kept_allocators = ci_idle_create(pchild, KEPT_ALLOCATORS, destroy_allocator);
}

static apr_pool_t *session_pool(void)
{
    apr_allocator_t *alloc = ci_idle_take(kept_allocators);
    apr_pool_t *p;
    if (!alloc) {
        apr_allocator_create(&alloc);
        apr_allocator_max_free_set(alloc, KEPT_FREE);
    }
    apr_pool_create_unmanaged_ex(&p, NULL, alloc);
    return p;
}

static void session_pool_destroy(apr_pool_t *p)
{
    apr_allocator_t *alloc = apr_pool_allocator_get(p);
    apr_pool_destroy(p);
    ci_idle_give(kept_allocators, alloc, destroy_allocator);
}

/* Pre-cleanup of the request pool: stop what runs, destroy the sandbox. */
static apr_status_t session_cleanup(void *data)
{
    ci_session *s = data;
    if (s->job) {
        while (ci_job_wait(s->job, apr_time_from_msec(50)) == APR_TIMEUP)
            ci_box_interrupt(s->box);
        s->job = NULL;
    }
    if (s->container)
        ci_box_release(s->box);
    else
        ci_box_destroy(s->box, "request ended");
    ci_registry_release(s->slot);
    session_pool_destroy(s->root);
    return APR_SUCCESS;
}

ci_session *ci_session_create(request_rec *r, ci_req_state *st)
{
    ci_session *s = apr_pcalloc(r->pool, sizeof(*s));
    const ci_sandbox_def *def = st->sandbox;
    const char *container_id = st->container_id;
    s->r = r;
    s->st = st;
    s->container_id = container_id;
    s->container = st->owner && (def->provider->caps & CI_CAP_CONTAINERS);
    s->slot = -1;
    s->root = session_pool();
    /* a sandbox of the request's own has the request's allowlist (a
     * container's comes from its record, when it is attached) */
    if (!s->container)
        def = ci_sandbox_def_container(
            s->root, def, NULL, ci_domains_join(s->root, st->req->allowed_domains),
            st->req->secrets ? ci_secrets_with_placeholders(s->root, st->req->secrets) : NULL);
    s->def = def;
    s->box = ci_box_create(s->root, def, container_id, box_event, s);
    apr_pool_pre_cleanup_register(r->pool, s, session_cleanup);
    return s;
}

/* The new container C gets the request's file_ids: its sandbox started,
 * the files put there; *HANDLE is the sandbox's handle when it got one. */
static apr_status_t provision(ci_session *s, ci_container *c, const char **handle,
                              ci_error *err)
{
    return ci_files_provision(s->r, ci_loc_config(s->r), s->st->owner, c,
                              s->st->upstream_files, handle, err) == OK
         ? APR_SUCCESS : APR_EGENERAL;
}

/* The first call of a container's session: its record (made now when the
 * container is new), and the box pointed at its sandbox. */
static apr_status_t attach_container(ci_session *s, ci_error *err)
{
    ci_container c;
    const ci_sandbox_def *tiered;
    int made_now = !s->st->container_exists;
    apr_status_t rv = ci_containers_ensure(s->r, s->st, &c, err);
    const char *handle;
    if (rv != APR_SUCCESS)
        return rv;
    /* its own tool, which may not be this location's (resolve checked that
     * it is still served; a reload since is a 400 like an expiry) */
    if (!(tiered = ci_containers_tool(s->r, &c))) {
        ci_error_set(err, 400, CI_INVALID, NULL, "container_unavailable", s->r->pool,
                     "Container with id '%s' runs on a sandbox tool this server no "
                     "longer serves (it was removed or changed); use a new container.",
                     c.id);
        return APR_EGENERAL;
    }
    s->def = tiered;
    handle = ci_dirclient_unseal(s->r, &c);
    /* file_ids: put into the container this request makes (a container a
     * chain reuses has them already, and later changes stand) */
    if (made_now && s->st->upstream_files &&
        (rv = provision(s, &c, &handle, err)) != APR_SUCCESS)
        return rv;
    /* the container's tier and allowlist (checked when it was asked for) */
    s->def = tiered = ci_sandbox_def_container(s->root, s->def, c.memory_limit,
                                               c.allowlist,
                                               ci_dirclient_unseal_secrets(s->r, &c));
    s->def = tiered = ci_sandbox_def_with_skills(s->root, tiered, c.skills);
    if (ci_dirclient_adopt(s->r, s->st->owner, &c, tiered) < 0) {
        ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_unavailable", s->r->pool,
                     "The code sandbox could not be started; retry shortly.");
        return APR_EGENERAL;
    }
    ci_box_set_container(s->box, tiered, s->container_id, handle,
                         c.idle_seconds > 0 ? c.idle_seconds : tiered->idle);
    s->has_handle = handle != NULL;
    s->attached = 1;
    return APR_SUCCESS;
}

/* The container's sandbox is gone: at its provider (E2B ends a sandbox at
 * its plan's lifetime cap whatever its timeout), where the container
 * expires now; or, a local one, the container was deleted (or expired)
 * after this request found it (ci_containers_ensure did not ask again).
 * The call is answered, not the request failed: the model is told, and
 * the conversation's next turn gets a new container (and is told so too). */
static apr_status_t container_gone(ci_session *s, ci_exec_result *res)
{
    int remote = (s->def->provider->caps & CI_CAP_REMOTE) != 0;
    if (remote)
        ci_containers_expired(s->r, s->st);
    memset(res, 0, sizeof(*res));
    res->outcome = CI_EXEC_NOT_RUN;
    res->text = "";
    res->failure = remote
        ? "Not run: this container expired at the sandbox service (its lifetime ran "
          "out); its variables and files are gone. The next turn of the conversation "
          "gets a new container."
        : "Not run: this container no longer runs (it was deleted, or it expired); its "
          "variables and files are gone. The next turn of the conversation gets a new "
          "container.";
    res->failure_says_all = 1;
    return APR_SUCCESS;
}

/* The registry slot a request's own sandbox holds (a container's sandbox
 * is counted where it lives). */
static apr_status_t claim_slot(ci_session *s, ci_error *err)
{
    if (s->container || s->slot >= 0 || adopt_warm(s) ||
        (s->slot = ci_registry_claim(s->def->name, s->container_id)) >= 0)
        return APR_SUCCESS;
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, s->r, "CI0304: sandbox refused: "
                  "CodeInterpreterMaxSandboxes reached");
    ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_capacity", s->r->pool,
                 "This server is running as many code sandboxes as it allows; "
                 "retry shortly.");
    return APR_EAGAIN;
}

/* How long a run may hold its container busy in a shared directory: its
 * timeout, the interrupt's grace, and a margin. */
static int busy_lease(const ci_session *s)
{
    return (int)apr_time_sec(s->def->timeout) + 60;
}

/* Whether a run marks its container busy in the directory: not when the
 * request holds it (it asked so when it found or made it), since a hold
 * keeps it from eviction and expiry as a busy mark does, for the request's
 * whole deadline: two questions fewer per execution. */
static int marks_busy(const ci_session *s)
{
    const char *held = s->st->container_held;
    return s->container && !(held && !strcmp(held, s->container_id));
}

apr_status_t ci_session_run(ci_session *s, const char *code,
                            const ci_shell_action *action, ci_exec_result *res,
                            apr_interval_time_t tick, int (*wait_tick)(void *),
                            void *baton, ci_error *err)
{
    apr_status_t rv;
    int busy;
    if (s->container && !s->attached && (rv = attach_container(s, err)) != APR_SUCCESS)
        return rv;
    if ((rv = claim_slot(s, err)) != APR_SUCCESS)
        return rv;
    s->code = code ? apr_pstrdup(s->root, code) : NULL;
    if (!code)
        keep_action(s, action);
    s->err = NULL;
    if ((busy = marks_busy(s)))
        ci_dirclient_busy(s->r, s->st->owner, s->container_id, 1, busy_lease(s));
    rv = ci_job_submit(s->r->pool, run_job, s, &s->job);
    if (rv != APR_SUCCESS) {
        if (busy)
            ci_dirclient_busy(s->r, s->st->owner, s->container_id, 0, 0);
        s->job = NULL;
        ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_busy", s->r->pool,
                     "All code execution slots of this server are busy; retry "
                     "shortly.");
        return APR_EAGAIN;
    }
    while (ci_job_wait(s->job, tick) == APR_TIMEUP)
        if (wait_tick && wait_tick(baton))
            ci_box_interrupt(s->box);
    s->job = NULL;
    if (busy)
        ci_dirclient_busy(s->r, s->st->owner, s->container_id, 0, 0);
    if (s->rv == APR_ECONNABORTED) {
        ci_error_set(err, 499, CI_SERVER, NULL, NULL, s->r->pool,
                     "The execution was interrupted.");
        return APR_ECONNABORTED;
    }
    if (s->rv == APR_NOTFOUND && s->container)
        return container_gone(s, res);
    if (s->rv != APR_SUCCESS) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, s->rv, s->r,
                      "CI0303: sandbox of tool %s could not start: %s",
                      s->def->name, s->err ? s->err : "unknown reason");
        if (s->rv == APR_EAGAIN)      /* the provider has no room (E2B's 429) */
            ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_capacity", s->r->pool,
                         "The sandbox service has no room for another sandbox now "
                         "(its concurrency limit); retry shortly.");
        else
            ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_unavailable", s->r->pool,
                         "The code sandbox could not be started; retry shortly.");
        return APR_EGENERAL;
    }
    *res = s->res;
    /* A request's own sandbox ends with it: its files are not the model's
     * to link to (only a container's are cited). */
    if (!s->container)
        res->files = NULL;
    ci_registry_touch(s->slot);
    ci_registry_execution(s->def->name, res->outcome, res->duration);
    return APR_SUCCESS;
}

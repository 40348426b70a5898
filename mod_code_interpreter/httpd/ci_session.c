/*
 * ci_session.c - the sandbox of one intercepted request: a box started on
 * first use, reused for every call of the request, restarted after a
 * failure and destroyed by a request-pool cleanup on every path.
 *
 * Memory: the sandbox and its results live in a pool with its own allocator,
 * used by one thread at a time (the worker while a job runs, the request
 * thread after it), never in the request pool.
 */
#include <string.h>
#include <apr_atomic.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <http_request.h>
#include "ci_dirconf.h"
#include "ci_idle.h"
#include "ci_registry.h"
#include "ci_sandbox.h"
#include "ci_session.h"
#include "ci_workers.h"
#include "mod_code_interpreter.h"

struct ci_session {
    request_rec *r;
    const ci_sandbox_def *def;
    const char *container_id;
    apr_pool_t *root;        /* own allocator */
    ci_box *box;
    int slot;                /* in the server-wide registry, -1: none */
    ci_job *job;             /* in flight, or NULL */
    /* the job's input and output */
    const char *code;
    ci_exec_result res;
    apr_status_t rv;
    const char *err;
    apr_time_t start_began;
};

static volatile apr_uint32_t started_count, destroyed_count;

void ci_session_counts(apr_uint32_t *started, apr_uint32_t *destroyed)
{
    *started = apr_atomic_read32(&started_count);
    *destroyed = apr_atomic_read32(&destroyed_count);
}

/* The box's starts and destroys: counted, logged, and a remote sandbox
 * recorded in the registry so that a live child can delete it if this one
 * dies. */
static void box_event(void *baton, ci_box_event ev, ci_sandbox *sb, const char *why)
{
    ci_session *s = baton;
    const ci_provider *prov = s->def->provider;
    ci_reap_cred cred;
    if (ev == CI_BOX_DESTROYED) {
        apr_atomic_inc32(&destroyed_count);
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r,
                      "CI0301: sandbox destroyed (%s) tool=%s container=%s", why,
                      s->def->name, s->container_id);
        return;
    }
    if (prov->remote_id && prov->reap_cred && prov->reap_cred(s->def, &cred))
        ci_registry_set_remote(s->slot, prov->remote_id(sb), prov->name, &cred);
    apr_atomic_inc32(&started_count);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r,
                  "CI0302: sandbox started tool=%s provider=%s container=%s in "
                  "%" APR_TIME_T_FMT " us", s->def->name, prov->name, s->container_id,
                  apr_time_now() - s->start_began);
}

/* ---- the warm pool ------------------------------------------------------
 * Per child and per local sandbox tool with warm=N: N sandboxes already
 * started (namespaces set up, interpreter running, preload= imported),
 * refilled in the background. Each holds its own registry slot, so warm
 * sandboxes count toward CodeInterpreterMaxSandboxes; a request that takes
 * one takes over its slot. A warm sandbox is handed to one request only. */

typedef struct warm_sb {
    apr_pool_t *pool;          /* own allocator: made on a worker thread */
    ci_sandbox *sb;
    int slot;
    struct warm_sb *next;
} warm_sb;

typedef struct warm_list {
    const ci_sandbox_def *def;
    server_rec *s;
    apr_thread_mutex_t *lock;
    warm_sb *ready;
    int closing;
    struct warm_list *next;
} warm_list;

static warm_list *warm_lists;

static apr_pool_t *own_pool(void)
{
    apr_allocator_t *alloc;
    apr_pool_t *p;
    apr_allocator_create(&alloc);
    apr_pool_create_ex(&p, NULL, NULL, alloc);
    apr_allocator_owner_set(alloc, p);
    return p;
}

/* Worker thread: start one warm sandbox and add it to the list. */
static void warm_fill(void *baton)
{
    warm_list *wl = baton;
    apr_pool_t *p = own_pool();
    warm_sb *w = apr_pcalloc(p, sizeof(*w));
    const char *err = NULL;
    const ci_provider *prov = wl->def->provider;

    w->pool = p;
    if ((w->slot = ci_registry_claim(wl->def->name, "warm")) < 0) {
        apr_pool_destroy(p);
        return;
    }
    if (prov->start(p, wl->def, "warm", &w->sb, &err) != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, wl->s, "CI0305: a warm sandbox "
                     "of tool %s could not start: %s", wl->def->name, err);
        ci_registry_release(w->slot);
        apr_pool_destroy(p);
        return;
    }
    apr_thread_mutex_lock(wl->lock);
    if (!wl->closing) {
        w->next = wl->ready;
        wl->ready = w;
        ci_registry_set_warm(w->slot, 1);
        w = NULL;
    }
    apr_thread_mutex_unlock(wl->lock);
    if (w) {                       /* the child is exiting */
        prov->destroy(w->sb);
        ci_registry_release(w->slot);
        apr_pool_destroy(p);
    }
}

static warm_list *warm_list_for(const ci_sandbox_def *def)
{
    warm_list *wl;
    for (wl = warm_lists; wl; wl = wl->next)
        if (wl->def == def)
            return wl;
    return NULL;
}

/* Take a ready sandbox for DEF, or NULL. A refill is queued. */
static warm_sb *warm_take(const ci_sandbox_def *def)
{
    warm_list *wl = warm_list_for(def);
    warm_sb *w = NULL;
    if (!wl)
        return NULL;
    apr_thread_mutex_lock(wl->lock);
    if ((w = wl->ready)) {
        wl->ready = w->next;
        ci_registry_set_warm(w->slot, 0);
    }
    apr_thread_mutex_unlock(wl->lock);
    if (ci_job_fire(warm_fill, wl) != APR_SUCCESS)
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, wl->s,
                     "CI0306: warm pool of tool %s not refilled: queue full",
                     def->name);
    return w;
}

static apr_status_t warm_cleanup(void *data)
{
    warm_list *wl;
    for (wl = warm_lists; wl; wl = wl->next) {
        warm_sb *w, *next;
        const ci_provider *prov = wl->def->provider;
        apr_thread_mutex_lock(wl->lock);
        wl->closing = 1;
        w = wl->ready;
        wl->ready = NULL;
        apr_thread_mutex_unlock(wl->lock);
        for (; w; w = next) {
            next = w->next;
            ci_registry_set_warm(w->slot, 0);
            prov->destroy(w->sb);
            ci_registry_release(w->slot);
            apr_pool_destroy(w->pool);
        }
    }
    warm_lists = NULL;
    return APR_SUCCESS;
}

static void warm_start(apr_pool_t *pchild, server_rec *s)
{
    apr_array_header_t *defs = ci_sandbox_all(pchild, s);
    int i, k;

    for (i = 0; i < defs->nelts; i++) {
        const ci_sandbox_def *def = APR_ARRAY_IDX(defs, i, const ci_sandbox_def *);
        warm_list *wl;
        if (!def->provider->warmable || def->warm <= 0)
            continue;
        wl = apr_pcalloc(pchild, sizeof(*wl));
        wl->def = def;
        wl->s = s;
        apr_thread_mutex_create(&wl->lock, APR_THREAD_MUTEX_DEFAULT, pchild);
        wl->next = warm_lists;
        warm_lists = wl;
        for (k = 0; k < def->warm; k++)
            ci_job_fire(warm_fill, wl);
    }
    if (warm_lists)
        apr_pool_pre_cleanup_register(pchild, NULL, warm_cleanup);
}

/* Adopt a warm sandbox into S. */
static int adopt_warm(ci_session *s)
{
    apr_time_t t0 = apr_time_now();
    warm_sb *w = warm_take(s->def);
    if (!w)
        return 0;
    ci_box_adopt(s->box, w->sb, w->pool);
    s->slot = w->slot;
    apr_atomic_inc32(&started_count);
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
    s->rv = ci_box_run(s->box, s->root, s->code, &s->res, &s->err);
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
    warm_start(pchild, s);
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
    ci_box_destroy(s->box, "request ended");
    ci_registry_release(s->slot);
    session_pool_destroy(s->root);
    return APR_SUCCESS;
}

ci_session *ci_session_create(request_rec *r, const ci_sandbox_def *def,
                              const char *container_id)
{
    ci_session *s = apr_pcalloc(r->pool, sizeof(*s));
    s->r = r;
    s->def = def;
    s->container_id = container_id;
    s->slot = -1;
    s->root = session_pool();
    s->box = ci_box_create(s->root, def, container_id, box_event, s);
    apr_pool_pre_cleanup_register(r->pool, s, session_cleanup);
    return s;
}

apr_status_t ci_session_run(ci_session *s, const char *code, ci_exec_result *res,
                            apr_interval_time_t tick, int (*wait_tick)(void *),
                            void *baton, ci_error *err)
{
    apr_status_t rv;
    if (s->slot < 0 && !adopt_warm(s) &&
        (s->slot = ci_registry_claim(s->def->name, s->container_id)) < 0) {
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, s->r, "CI0304: sandbox refused: "
                      "CodeInterpreterMaxSandboxes reached");
        ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_capacity", s->r->pool,
                     "This server is running as many code sandboxes as it allows; "
                     "retry shortly.");
        return APR_EAGAIN;
    }
    s->code = apr_pstrdup(s->root, code);
    s->err = NULL;
    rv = ci_job_submit(s->r->pool, run_job, s, &s->job);
    if (rv != APR_SUCCESS) {
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
    if (s->rv == APR_ECONNABORTED) {
        ci_error_set(err, 499, CI_SERVER, NULL, NULL, s->r->pool,
                     "The execution was interrupted.");
        return APR_ECONNABORTED;
    }
    if (s->rv != APR_SUCCESS) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, s->rv, s->r,
                      "CI0303: sandbox of tool %s could not start: %s",
                      s->def->name, s->err ? s->err : "unknown reason");
        ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_unavailable", s->r->pool,
                     "The code sandbox could not be started; retry shortly.");
        return APR_EGENERAL;
    }
    *res = s->res;
    ci_registry_touch(s->slot);
    ci_registry_execution(s->def->name, res->outcome, res->duration);
    return APR_SUCCESS;
}

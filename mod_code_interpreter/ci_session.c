/*
 * ci_session.c - the sandbox of one intercepted request: started on first
 * use, reused for every call of the request, restarted after a failure and
 * destroyed by a request-pool cleanup on every path.
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
#include "ci_registry.h"
#include "ci_sandbox.h"
#include "ci_workers.h"
#include "mod_code_interpreter.h"

struct ci_session {
    request_rec *r;
    const ci_sandbox_def *def;
    const ci_provider *prov;
    const char *tag;
    apr_pool_t *root;        /* own allocator */
    apr_pool_t *sbpool;      /* the current sandbox */
    ci_sandbox *sb;
    apr_thread_mutex_t *lock;  /* guards sb against interrupt() */
    int sb_failed;           /* the last execution killed it */
    int slot;                /* in the server-wide registry, -1: none */
    ci_job *job;             /* in flight, or NULL */
    /* the job's input and output */
    const char *code;
    ci_exec_result res;
    apr_status_t rv;
    const char *err;
    volatile apr_uint32_t interrupted;
};

static volatile apr_uint32_t started_count, destroyed_count;

void ci_session_counts(apr_uint32_t *started, apr_uint32_t *destroyed)
{
    *started = apr_atomic_read32(&started_count);
    *destroyed = apr_atomic_read32(&destroyed_count);
}

const ci_provider *ci_provider_for(ci_provider_kind kind)
{
    switch (kind) {
    case CI_PROVIDER_LOCAL: return &ci_provider_local;
    case CI_PROVIDER_E2B: return &ci_provider_e2b;
    default: return NULL;
    }
}

static void destroy_sandbox(ci_session *s, const char *why)
{
    ci_sandbox *sb;
    apr_thread_mutex_lock(s->lock);
    sb = s->sb;
    s->sb = NULL;
    apr_thread_mutex_unlock(s->lock);
    if (!sb)
        return;
    s->prov->destroy(sb);
    apr_pool_destroy(s->sbpool);
    s->sbpool = NULL;
    apr_atomic_inc32(&destroyed_count);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r,
                  "CI0301: sandbox destroyed (%s) tool=%s container=%s", why,
                  s->def->name, s->tag);
}

static apr_status_t start_sandbox(ci_session *s)
{
    apr_time_t t0 = apr_time_now();
    ci_sandbox *sb = NULL;
    apr_status_t rv;
    apr_pool_create(&s->sbpool, s->root);
    rv = s->prov->start(s->sbpool, s->def, s->tag, &sb, &s->err);
    if (rv != APR_SUCCESS) {
        /* The message lives in the pool about to go. */
        s->err = s->err ? apr_pstrdup(s->root, s->err) : NULL;
        apr_pool_destroy(s->sbpool);
        s->sbpool = NULL;
        return rv;
    }
    apr_thread_mutex_lock(s->lock);
    s->sb = sb;
    apr_thread_mutex_unlock(s->lock);
    apr_atomic_inc32(&started_count);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, s->r,
                  "CI0302: sandbox started tool=%s provider=%s container=%s in "
                  "%" APR_TIME_T_FMT " us", s->def->name, s->prov->name, s->tag,
                  apr_time_now() - t0);
    return APR_SUCCESS;
}

/* Worker thread: (re)start the sandbox if needed, then run the code. */
static void run_job(void *baton)
{
    ci_session *s = baton;
    s->rv = APR_SUCCESS;
    if (s->sb && s->sb_failed)
        destroy_sandbox(s, "restarted after a failed execution");
    s->sb_failed = 0;
    if (!s->sb && (s->rv = start_sandbox(s)) != APR_SUCCESS)
        return;
    if (apr_atomic_read32(&s->interrupted)) {
        s->rv = APR_ECONNABORTED;
        return;
    }
    s->rv = s->prov->run(s->sb, s->root, s->code, &s->res);
    if (s->rv == APR_SUCCESS && s->res.status == CI_EXEC_FAILED)
        s->sb_failed = 1;
}

static void interrupt_sandbox(ci_session *s)
{
    apr_atomic_set32(&s->interrupted, 1);
    apr_thread_mutex_lock(s->lock);
    if (s->sb)
        s->prov->interrupt(s->sb);
    apr_thread_mutex_unlock(s->lock);
}

/* Pre-cleanup of the request pool: stop what runs, destroy the sandbox. */
static apr_status_t session_cleanup(void *data)
{
    ci_session *s = data;
    if (s->job) {
        while (ci_job_wait(s->job, apr_time_from_msec(50)) == APR_TIMEUP)
            interrupt_sandbox(s);
        s->job = NULL;
    }
    destroy_sandbox(s, "request ended");
    ci_registry_release(s->slot);
    apr_pool_destroy(s->root);
    return APR_SUCCESS;
}

ci_session *ci_session_create(request_rec *r, const ci_sandbox_def *def,
                              const char *tag)
{
    ci_session *s = apr_pcalloc(r->pool, sizeof(*s));
    apr_allocator_t *alloc;
    s->r = r;
    s->def = def;
    s->tag = tag;
    s->prov = ci_provider_for(def->provider);
    s->slot = -1;
    apr_allocator_create(&alloc);
    apr_pool_create_ex(&s->root, NULL, NULL, alloc);
    apr_allocator_owner_set(alloc, s->root);
    apr_thread_mutex_create(&s->lock, APR_THREAD_MUTEX_DEFAULT, r->pool);
    apr_pool_pre_cleanup_register(r->pool, s, session_cleanup);
    return s;
}

apr_status_t ci_session_run(ci_session *s, const char *code, ci_exec_result *res,
                            apr_interval_time_t tick, int (*wait_tick)(void *),
                            void *baton, ci_error *err)
{
    apr_status_t rv;
    if (!s->prov) {
        ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_unavailable", s->r->pool,
                     "The sandbox provider of tool '%s' is not available in "
                     "this build.", s->def->name);
        return APR_ENOTIMPL;
    }
    if (s->slot < 0 && (s->slot = ci_registry_claim(s->def->name, s->tag)) < 0) {
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
            interrupt_sandbox(s);
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
    ci_registry_execution(s->def->name, res->status == CI_EXEC_FAILED,
                          res->failure && strstr(res->failure, "timed out") != NULL,
                          res->duration);
    return APR_SUCCESS;
}

/*
 * ci_dirclient_claimer.c - each child's thread claiming due containers
 * from the directory's back end and ending their sandboxes, once a second
 * (and, every few claims, the back end's reconcile); started at child init
 * (ci_dirclient_child_init) where the back end says its node claims.
 */
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <httpd.h>
#include <http_log.h>
#include "ci_dirclient.h"
#include "ci_json.h"
#include "ci_redis.h"
#include "ci_registry.h"
#include "ci_module.h"

#define CLAIM_EVERY apr_time_from_sec(1)
#define CLAIM_LIMIT 16
#define RECONCILE_EVERY 5         /* claims: the local sandboxes checked */

typedef struct claimer {
    server_rec *s;
    const ci_dirclient_backend *be;
    apr_thread_t *thread;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *wake;
    int stop;
    int failing;                 /* the directory failed last time (logged once) */
} claimer;

/* One claim: the due containers this node may end, ended. */
static void claim_once(claimer *cl, apr_pool_t *p)
{
    json_object *req = ci_json_own(p, json_object_new_object()), *ans;
    const char *err = NULL;
    json_object_object_add(req, "op", json_object_new_string("claim_due"));
    json_object_object_add(req, "limit", json_object_new_int(CLAIM_LIMIT));
    if (!(ans = cl->be->ask(cl->s, p, req, &err))) {
        if (!cl->failing)
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, cl->s, "CI0832: due containers "
                         "could not be claimed from the container directory (%s): %s "
                         "(retrying every second)", cl->be->name, err ? err : "");
        cl->failing = 1;
        return;
    }
    if (cl->failing)
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, cl->s, "CI0833: the container "
                     "directory (%s) answers again", cl->be->name);
    cl->failing = 0;
    ci_dirclient_end(cl->s, p, ci_dirclient_gone_of(p, ans));
}

static void *APR_THREAD_FUNC claim_loop(apr_thread_t *t, void *data)
{
    claimer *cl = data;
    apr_pool_t *p;
    unsigned rounds = 0;
    apr_pool_create(&p, NULL);
    apr_thread_mutex_lock(cl->lock);
    while (!cl->stop) {
        apr_thread_mutex_unlock(cl->lock);
        /* A child of an older configuration (finishing its requests after
         * a reload) claims nothing: a due container is handed out once,
         * and one made with credentials a later configuration brought
         * would be ended here with the wrong ones, or not at all. The
         * newest configuration's children know every credential kept. */
        if (!ci_registry_superseded())
            claim_once(cl, p);
        if (cl->be->reconcile && !cl->failing && ++rounds % RECONCILE_EVERY == 0)
            cl->be->reconcile(cl->s, p);
        apr_pool_clear(p);
        apr_thread_mutex_lock(cl->lock);
        if (!cl->stop)
            apr_thread_cond_timedwait(cl->wake, cl->lock, CLAIM_EVERY);
    }
    apr_thread_mutex_unlock(cl->lock);
    apr_pool_destroy(p);
    ci_redis_close();
    /* Returned, not apr_thread_exit(): under AddressSanitizer, pthread_exit
     * from this frame leaves its stack redzones poisoned, and the thread's
     * own teardown below it then trips on them and kills the child on its
     * way out, with whatever work it still had (a sandbox's delete). */
    return NULL;
}

static apr_status_t claimer_stop(void *data)
{
    claimer *cl = data;
    apr_status_t rv;
    apr_thread_mutex_lock(cl->lock);
    cl->stop = 1;
    apr_thread_cond_signal(cl->wake);
    apr_thread_mutex_unlock(cl->lock);
    apr_thread_join(&rv, cl->thread);
    return APR_SUCCESS;
}

/* Start this child's thread claiming due containers from the back end
 * (stopped and joined when PCHILD is cleared). */
static void ci_dirclient_claim_from(apr_pool_t *pchild, server_rec *s)
{
    claimer *cl = apr_pcalloc(pchild, sizeof(*cl));
    cl->s = s;
    cl->be = ci_dirclient_backend_of(s);
    if (apr_thread_mutex_create(&cl->lock, APR_THREAD_MUTEX_DEFAULT, pchild) ||
        apr_thread_cond_create(&cl->wake, pchild) ||
        apr_thread_create(&cl->thread, NULL, claim_loop, cl, pchild)) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0830: the thread claiming due "
                     "containers could not start in this child");
        return;
    }
    apr_pool_pre_cleanup_register(pchild, cl, claimer_stop);
}

void ci_dirclient_child_init(apr_pool_t *pchild, server_rec *s)
{
    ci_dirclient_set_node(pchild, s);
    if (ci_dirclient_backend_of(s)->claims(s))
        ci_dirclient_claim_from(pchild, s);
}

/* ci_idle.c - a bounded, mutex-guarded stack of idle objects. */
#include <apr_thread_mutex.h>
#include "ci_idle.h"

struct ci_idle {
    apr_thread_mutex_t *lock;
    void (*destroy)(void *obj);
    void **objs;
    int n, max;
    int closed;                 /* the pool is going: nothing more is kept */
};

static apr_status_t close_idle(void *data)
{
    ci_idle *idle = data;
    int i, n;
    apr_thread_mutex_lock(idle->lock);
    n = idle->n;
    idle->n = 0;
    idle->closed = 1;
    apr_thread_mutex_unlock(idle->lock);
    for (i = 0; i < n; i++)
        idle->destroy(idle->objs[i]);
    return APR_SUCCESS;
}

ci_idle *ci_idle_create(apr_pool_t *p, int max, void (*destroy)(void *obj))
{
    ci_idle *idle = apr_pcalloc(p, sizeof(*idle));
    if (apr_thread_mutex_create(&idle->lock, APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS)
        return NULL;
    idle->destroy = destroy;
    idle->max = max;
    idle->objs = apr_pcalloc(p, sizeof(void *) * (apr_size_t)max);
    /* Registered after the mutex's own cleanup: runs before it. */
    apr_pool_cleanup_register(p, idle, close_idle, apr_pool_cleanup_null);
    return idle;
}

void *ci_idle_take(ci_idle *idle)
{
    void *obj = NULL;
    if (!idle)
        return NULL;
    apr_thread_mutex_lock(idle->lock);
    if (idle->n > 0)
        obj = idle->objs[--idle->n];
    apr_thread_mutex_unlock(idle->lock);
    return obj;
}

void ci_idle_give(ci_idle *idle, void *obj, void (*destroy)(void *obj))
{
    if (idle) {
        apr_thread_mutex_lock(idle->lock);
        if (!idle->closed && idle->n < idle->max) {
            idle->objs[idle->n++] = obj;
            obj = NULL;
        }
        apr_thread_mutex_unlock(idle->lock);
    }
    if (obj)
        destroy(obj);
}

/*
 * ci_idle.h - a bounded stack of idle objects shared by the threads of a
 * process (curl handles, allocators): the most recently given back is taken
 * first; what does not fit, or comes back after the owning pool is gone, is
 * destroyed. No httpd here.
 */
#ifndef CI_IDLE_H
#define CI_IDLE_H

#include <apr_pools.h>

typedef struct ci_idle ci_idle;

/* At most MAX objects kept. A cleanup on P destroys the kept ones (with
 * DESTROY) and makes every later give-back destroy its object. NULL when the
 * lock cannot be made: then nothing is kept. */
ci_idle *ci_idle_create(apr_pool_t *p, int max, void (*destroy)(void *obj));

/* A kept object, or NULL (none kept, or IDLE is NULL). */
void *ci_idle_take(ci_idle *idle);

/* Keep OBJ for a later take, or destroy it (full, closed, or IDLE NULL:
 * then DESTROY is the caller's, given here). */
void ci_idle_give(ci_idle *idle, void *obj, void (*destroy)(void *obj));

#endif

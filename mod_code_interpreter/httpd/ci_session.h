/*
 * ci_session.h - the sandbox of one intercepted request: a box (ci_sandbox.h)
 * run on the worker pool, holding a slot of the server-wide registry,
 * adopted from the supervisor's warm pool when one is ready, and destroyed by a
 * request-pool cleanup on every path.
 */
#ifndef CI_SESSION_H
#define CI_SESSION_H

#include <httpd.h>
#include "ci_error.h"
#include "ci_sandbox.h"

typedef struct ci_session ci_session;

struct ci_req_state;

/* The session of R's sandbox tool and container (ST). */
ci_session *ci_session_create(request_rec *r, struct ci_req_state *st);
/* Run CODE, or the shell's ACTION when CODE is NULL; fills RES. Returns APR_SUCCESS, APR_EAGAIN (capacity or queue
 * full: 503), APR_EGENERAL with ERR (sandbox could not start: 503) or
 * APR_ECONNABORTED (interrupted). WAIT_TICK is called every TICK while
 * waiting (keepalives, abort checks); it returns non-zero to give up (the
 * execution is interrupted). */
apr_status_t ci_session_run(ci_session *s, const char *code,
                            const ci_shell_action *action, ci_exec_result *res,
                            apr_interval_time_t tick,
                            int (*wait_tick)(void *), void *baton,
                            ci_error *err);

/* child_init: keep the allocators of ended sessions for the next ones. */
void ci_session_child_init(apr_pool_t *pchild, server_rec *s);

#endif

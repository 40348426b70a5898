/*
 * ci_sandbox.h - the sandbox provider interface. A provider starts a
 * sandbox holding one stateful Python interpreter, runs code in it and
 * destroys it. "local" (bubblewrap) and "e2b" implement it; a third provider
 * is one new file and one line in ci_provider_for().
 *
 * Threads: start/run/destroy are called from worker threads, one at a time
 * per sandbox; interrupt may be called from any thread while run is blocked.
 * All memory comes from the pool handed to start, which belongs to the
 * sandbox alone (its own allocator), never to a request pool.
 */
#ifndef CI_SANDBOX_H
#define CI_SANDBOX_H

#include <sys/types.h>
#include <apr_pools.h>
#include "ci_config.h"
#include "ci_exec.h"

typedef struct ci_sandbox ci_sandbox;

typedef struct ci_provider {
    const char *name;
    /* Start a sandbox for DEF. TAG is the request's minted key (for metadata
     * and logs; never a secret). On failure *ERR says why, without secrets. */
    apr_status_t (*start)(apr_pool_t *p, const ci_sandbox_def *def,
                          const char *tag, ci_sandbox **out, const char **err);
    /* Run CODE to completion or timeout; RES memory from P. A FAILED result
     * means the interpreter is gone: the caller destroys the sandbox. */
    apr_status_t (*run)(ci_sandbox *sb, apr_pool_t *p, const char *code,
                        ci_exec_result *res);
    /* Make a blocked run return now (client gone, deadline). */
    void (*interrupt)(ci_sandbox *sb);
    /* Release the sandbox. Must not fail the request; logs what it could not do. */
    void (*destroy)(ci_sandbox *sb);
    /* The provider's own id of a remote sandbox (kept in the server's
     * registry so a dead child's sandbox can be found), NULL for local. */
    const char *(*remote_id)(ci_sandbox *sb);
} ci_provider;

const ci_provider *ci_provider_for(ci_provider_kind kind);

extern const ci_provider ci_provider_local;
extern const ci_provider ci_provider_e2b;

/* Check, as UID/GID (when running as root), that bubblewrap can create its
 * namespaces and start PYTHON. *ERR says what to fix. */
apr_status_t ci_local_probe(apr_pool_t *p, uid_t uid, gid_t gid,
                            const char *python, const char **err);

/* Delete remote E2B sandbox ID with KEY at API_BASE (what a dead child
 * left); 204/404 are success, one retry otherwise. Blocking. */
void ci_e2b_delete_by_id(const char *api_base, const char *key, const char *id);

/* Output read from a provider is refused past this many bytes per execution,
 * whatever max_output says (images travel in it too). */
#define CI_HARD_OUTPUT_CAP ((apr_size_t)32 * 1024 * 1024)

#endif

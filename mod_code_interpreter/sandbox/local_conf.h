/*
 * local_conf.h - the local provider's own keys of a sandbox tool
 * (ci_sandbox_def's conf), for the files of the local provider: the
 * provider, its supervisor, and the supervisor's protocol that carries a
 * definition whole; and what the supervisor asks of the provider (the
 * sandbox's fork) and shares with it (the egress files' names).
 */
#ifndef CI_LOCAL_CONF_H
#define CI_LOCAL_CONF_H

#include <apr.h>
#include <sys/types.h>
#include "ci_cgroup.h"
#include "ci_sandbox.h"

typedef struct ci_local_conf {
    const char *python;            /* the interpreter (an absolute path) */
    apr_uint64_t memory;           /* address space per process */
    int processes;                 /* tasks inside the sandbox */
    apr_uint64_t disk;             /* size of /mnt/data and of any one file */
    const char *preload;           /* comma-separated modules a warm sandbox imports */
} ci_local_conf;

/* DEF's local keys (DEF is a tool of the local provider). */
#define CI_LOCAL(def) ((ci_local_conf *)(def)->conf)

/* The provider (sandbox_local.c). */
extern const ci_provider ci_provider_local;


/* ---- for the supervisor (supervisor/), from the local provider ---------- */

/* The egress proxy's socket in the directory a sandbox with an allowlist
 * gets (ci_egress.h). */
#define CI_EGRESS_SOCKET_NAME "proxy.sock"
/* With domain secrets: the proxy's CA, and the system's bundle with it. */
#define CI_EGRESS_CA_NAME "ca.pem"
#define CI_EGRESS_BUNDLE_NAME "ca-bundle.pem"

/* Fork the bubblewrap process of DEF (the supervisor's main thread).
 * EGRESS_DIR: for a sandbox with an allowlist, the directory of its egress
 * socket, mounted inside; NULL: no way out. CGROUP_FD: the cgroup.procs of
 * the cgroup it starts in (ci_cgroup_make), or -1. */
apr_status_t ci_local_spawn(apr_pool_t *p, const ci_sandbox_def *def,
                            const char *egress_dir, int cgroup_fd, pid_t *pid,
                            int *in_fd, int *out_fd, int *err_fd);

/* DEF's bounds on the whole sandbox for its cgroup: its process count
 * (processes=) and its resident memory (its tier); the CPU is the
 * supervisor's to set. */
void ci_local_cgroup_limits(const ci_sandbox_def *def, ci_cgroup_limits *lim);

#endif

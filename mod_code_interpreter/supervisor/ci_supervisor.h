/*
 * ci_supervisor.h - the local sandbox supervisor: one process per server,
 * forked by httpd's parent, that owns every local sandbox as its direct
 * child and serves httpd's children over a Unix socket (ci_supervisor_wire.h).
 * httpd-free: the glue (httpd/ci_supervisor_process.c) forks it, drops its privileges and
 * hands it the registry's slot functions. Its clients talk to it through
 * ci_supervisor_client.h.
 */
#ifndef CI_SUPERVISOR_H
#define CI_SUPERVISOR_H

#include <sys/types.h>
#include <apr_pools.h>
#include "ci_sandbox.h"
#include "ci_cgroup.h"
#include "local_conf.h"

/* What the supervisor needs from the server: the registry's slots, so that
 * warm sandboxes count toward CodeInterpreterMaxSandboxes. */
typedef struct ci_sup_hooks {
    int (*claim)(const char *tool);          /* a slot, or -1 at the cap */
    void (*set_warm)(int slot, int warm);
    void (*release)(int slot);
} ci_sup_hooks;

typedef struct ci_sup_config {
    int listen_fd;           /* listening, O_CLOEXEC */
    pid_t parent;            /* httpd's parent: peers must be its children */
    uid_t uid;               /* children's uid */
    const ci_sup_hooks *hooks;
    const char *wants;       /* a WARM_SET payload to start with, or NULL */
    apr_size_t wants_len;
    const char *egress_dir;  /* where sandboxes' egress sockets are made (a
                                directory of their own each) */
    int audit_fd;            /* the audit log file egress lines go to, or -1 */
    /* The egress proxy's bounds (ci_egress_limits; 0: its default). */
    int egress_max_total;        /* CodeInterpreterEgressConnections */
    int egress_max_per_owner;    /* CodeInterpreterEgressConnectionsPerOwner */
    int egress_lifetime;         /* CodeInterpreterEgressLifetime (s) */
    int egress_proxy_resolves;   /* CodeInterpreterEgressProxyResolves On */
    /* Sandboxes in cgroup v2 (CodeInterpreterSandboxCgroup): the delegated
     * directory the supervisor is in (under "supervisor") and makes each
     * sandbox's cgroup in; NULL: none, for the reason CGROUP_WHY. */
    const char *cgroup_dir;
    const char *cgroup_enabled;  /* the controllers its children have */
    const char *cgroup_why;
    apr_uint64_t cgroup_cpu_quota_us; /* CodeInterpreterSandboxCPUs: cpu.max per
                                         100 ms period; 0: no ceiling */
} ci_sup_config;

/* The supervisor's loop. Returns only when the listening socket fails. */
void ci_supervisor_run(apr_pool_t *p, const ci_sup_config *cfg);

#endif

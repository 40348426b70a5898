/*
 * ci_egress.h - the egress proxy of local sandboxes: a process of its own,
 * forked by the container supervisor, the only way out of a sandbox whose
 * container has an allowlist (network_policy). Each such sandbox gets a
 * listening Unix socket that the supervisor makes and hands over here; a
 * relay inside the sandbox (the kernel) connects to it for every
 * connection the sandbox's code opens through HTTP_PROXY/HTTPS_PROXY.
 *
 * The proxy admits HTTP requests (absolute-form) and CONNECT, to ports 80
 * and 443 only, to hosts on the container's allowlist; it resolves names
 * itself (in the connection's thread, never in the accepting loop), refuses
 * IP literals and names that resolve to non-public addresses, and connects
 * to the address it resolved (or, with egress_proxy, asks the site's
 * forward proxy for the name). A refusal is an HTTP 403 whose body says
 * which domain was refused and why. Connections, bytes and idle time are
 * bounded; every connection is one audit line.
 *
 * The supervisor talks to it over a SOCK_SEQPACKET socketpair: one message
 * per command, a listening socket passed with SCM_RIGHTS.
 */
#ifndef CI_EGRESS_H
#define CI_EGRESS_H

#include <sys/types.h>
#include <apr_pools.h>

typedef struct ci_egress_limits {
    int max_connections;          /* open at once, per container (over it:
                                     403, "too many connections from this
                                     container (at most N)") */
    int max_total;                /* open at once, all containers (over it:
                                     503, the site's bound, not the
                                     container's); both answered without a
                                     thread */
    apr_uint64_t max_bytes;       /* per execution of a container, both ways
                                     (ci_egress_execution starts a new one) */
    int idle_seconds;             /* a connection with no byte either way */
    int head_seconds;             /* to send a whole request head */
} ci_egress_limits;

/* The defaults: 32 per container, 512 in all, 1 GiB per execution, 60 s
 * idle, 10 s for a head. */
void ci_egress_default_limits(ci_egress_limits *lim);

/* Fork the proxy. AUDIT_FD: a file open for appending, one JSON line per
 * connection (-1: none; the error log has a line per connection either
 * way); the proxy takes a copy. The supervisor opens it before it gives
 * up root, as the file is root's.
 * Returns its pid (or -1 with errno) and *CONTROL, the supervisor's end
 * (non-blocking, close-on-exec). The proxy ends when CONTROL is closed. */
pid_t ci_egress_start(apr_pool_t *p, const ci_egress_limits *lim,
                      int audit_fd, int *control);

/* The container of KEY (the supervisor's sandbox id) listens on LISTEN_FD
 * (passed; the caller closes its own copy afterwards) with POLICY, a JSON
 * object:
 *   {"container": "cntr_…" (or ""), "tool": "python",
 *    "domains": ["pypi.org", "*.pythonhosted.org"],
 *    "proxy": "http://HOST:PORT"      (optional: the site's forward proxy)}
 * Returns 0, or -1 (the proxy is gone or the message could not be sent). */
int ci_egress_add(int control, apr_uint32_t key, int listen_fd, const char *policy);

/* KEY's listener and every connection of it are closed. 0 or -1. */
int ci_egress_remove(int control, apr_uint32_t key);

/* An execution starts in KEY's sandbox: its byte budget starts again. */
int ci_egress_execution(int control, apr_uint32_t key);

#endif

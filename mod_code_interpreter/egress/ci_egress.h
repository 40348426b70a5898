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
 * to the address it resolved (with egress_proxy, it asks the site's
 * forward proxy for that address: CONNECT ip:port, never the name, unless
 * the operator lets the site proxy resolve). A refusal is an HTTP 403 whose body says
 * which domain was refused and why. Connections, bytes and idle time are
 * bounded; every connection is one audit line.
 *
 * A tunnel carries only its own name: CONNECT is admitted to port 443 only
 * (plain http goes in absolute form, each head checked), and the sandbox's
 * TLS ClientHello must name the CONNECT's host (SNI) before a byte reaches
 * the origin; otherwise the tunnel is closed and the audit says why.
 *
 * Domain secrets: a container's policy may name secrets, each a domain, a
 * placeholder (what the sandbox holds) and a value. For a host a secret's
 * domain matches, plain http is refused, and a CONNECT to port 443 has TLS
 * terminated: the proxy verifies the origin first (against the policy's
 * origin_ca, or the system's CAs; the name too), then answers 200 and is
 * the TLS server to the sandbox with a certificate for the host signed by
 * the server's CA. It reads one request (its Host the tunnel's), puts the
 * value in place of the placeholder in its header values and its query
 * (percent-encoded there; never its path before the query, never its
 * body), asks for identity encoding and "Connection: close", relays the
 * request's body and nothing after it, and takes every value out of the
 * answer (ci_egress_content.h) before the sandbox sees it. Hosts no secret
 * matches are tunnelled untouched. A value is never logged.
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
    int max_per_owner;            /* open at once, all containers of one
                                     owner (over it: 403, "too many
                                     connections from this owner (at most
                                     N)"); 0: a quarter of max_total */
    int lifetime_seconds;         /* a connection is closed this long after
                                     it was accepted, busy or not */
    int proxy_resolves;           /* with a site proxy: a name that does not
                                     resolve here goes to it by name (else
                                     refused) */
} ci_egress_limits;

/* The server's CA, in memory (PEM texts), which signs the certificates the
 * proxy presents to sandboxes for the hosts it terminates TLS for. */
typedef struct ci_egress_ca {
    const char *cert_pem;
    const char *key_pem;
} ci_egress_ca;

/* A new CA in P: EC P-256 key, self-signed, CN "mod_code_interpreter
 * egress CA", basicConstraints CA:TRUE (critical), keyUsage keyCertSign and
 * cRLSign, valid from an hour ago for two years. NULL, or why not. Its key
 * is never written to disk: the caller keeps it for its life. */
const char *ci_egress_make_ca(apr_pool_t *p, ci_egress_ca *out);

/* The defaults: 32 per container, 512 in all, a quarter of them per
 * owner, 1 GiB per execution, 60 s idle, 10 s for a head, 10 min in all,
 * names the site proxy would have to resolve refused. */
void ci_egress_default_limits(ci_egress_limits *lim);

/* Fork the proxy. CA: the server's CA (NULL: no TLS is terminated; secrets
 * are then never sent). AUDIT_FD: a file open for appending, one JSON line per
 * connection (-1: none; the error log has a line per connection either
 * way); the proxy takes a copy. The supervisor opens it before it gives
 * up root, as the file is root's.
 * Returns its pid (or -1 with errno; EINVAL: CA does not parse) and *CONTROL, the supervisor's end
 * (non-blocking, close-on-exec). The proxy ends when CONTROL is closed. */
pid_t ci_egress_start(apr_pool_t *p, const ci_egress_limits *lim,
                      const ci_egress_ca *ca, int audit_fd, int *control);

/* The container of KEY (the supervisor's sandbox id) listens on LISTEN_FD
 * (passed; the caller closes its own copy afterwards) with POLICY, a JSON
 * object:
 *   {"container": "cntr_…" (or ""), "tool": "python",
 *    "owner": "…"  (optional: a digest of the container's owner, never a
 *                   secret; containers of one owner share max_per_owner),
 *    "domains": ["pypi.org", "*.pythonhosted.org"],
 *    "proxy": "http://HOST:PORT"      (optional: the site's forward proxy),
 *    "secrets": [{"domain": "api.example.com" (or "*.example.com"),
 *                 "placeholder": "CI_SECRET_<hex>", "value": "..."}]
 *                                     (optional: domain secrets),
 *    "origin_ca": "/path/bundle.pem"  (optional: the CAs origins are
 *                                      verified against when TLS is
 *                                      terminated; default the system's)}
 * A secret's value may hold no control character but tab; a policy with
 * one, or an origin_ca that does not load, is not added.
 * Returns 0, or -1 (the proxy is gone or the message could not be sent). */
int ci_egress_add(int control, apr_uint32_t key, int listen_fd, const char *policy);

/* KEY's listener and every connection of it are closed. 0 or -1. */
int ci_egress_remove(int control, apr_uint32_t key);

/* An execution starts in KEY's sandbox: its byte budget starts again. */
int ci_egress_execution(int control, apr_uint32_t key);

/* KEY's sandbox (a warm one, added without them) now is CONTAINER's, of
 * OWNER (a digest, as in the policy; "" for none). 0 or -1. */
int ci_egress_claim(int control, apr_uint32_t key, const char *container,
                    const char *owner);

#endif

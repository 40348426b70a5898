/*
 * ci_egress_tls.h - the egress proxy's TLS (libssl, libcrypto): the
 * server's CA that signs a leaf certificate per host the proxy terminates
 * TLS for (domain secrets), the contexts of both sides of a terminated
 * tunnel. Internal to ci_egress.c; ci_egress_make_ca (ci_egress.h) is
 * defined here too.
 */
#ifndef CI_EGRESS_TLS_H
#define CI_EGRESS_TLS_H

#include <openssl/ssl.h>
#include "ci_egress.h"

/* In the supervisor, before the fork: CA's PEM texts parsed into this
 * process's state (the child keeps them, the parent drops them with
 * ci_egress_tls_drop_ca). CA NULL: none. 0, or -1 (they do not parse, or
 * the key is not the certificate's). */
int ci_egress_tls_load_ca(const ci_egress_ca *ca);
void ci_egress_tls_drop_ca(void);

/* In the proxy, before any thread: the leaf key (EC P-256, one per
 * process), when there is a CA. 0, or -1 (the CA is then dropped: no
 * termination). */
int ci_egress_tls_init(void);

/* Whether the proxy can terminate TLS (it has a CA and a leaf key). */
int ci_egress_tls_can_terminate(void);

/* The context of the proxy as a client of origins: TLS 1.2 or later, the
 * peer verified against the CAs in ORIGIN_CA (a PEM file; NULL: the
 * system's default paths), ALPN http/1.1. NULL when the file does not
 * load. The host is set per connection (ci_egress_tls_client_ssl). */
SSL_CTX *ci_egress_tls_client_ctx(const char *origin_ca);

/* A client SSL of CTX on FD for HOST: SNI and the verified name. NULL on
 * failure. */
SSL *ci_egress_tls_client_ssl(SSL_CTX *ctx, int fd, const char *host);

/* What the sandbox's ClientHello named, on a tunnel the proxy terminates:
 * its handshake fails unless the server name (SNI) is the tunnel's HOST. */
typedef struct ci_egress_sni_check {
    const char *host;           /* the CONNECT's name, normalised */
    int verdict;                /* 0: agreed; else a ci_egress_hello_status:
                                   SNI (another, in NAME), NO_SNI, BAD */
    char name[256];
} ci_egress_sni_check;

/* A server SSL on FD that presents a certificate for HOST (a normalised
 * name) signed by the CA: certificates are made once per host and kept
 * for the process's life (at most a bound of hosts; past it one is made
 * per connection). CHECK (its host HOST) gets the ClientHello's verdict;
 * it must outlive the handshake. NULL on failure. */
SSL *ci_egress_tls_server_ssl(int fd, const char *host, ci_egress_sni_check *check);

#endif

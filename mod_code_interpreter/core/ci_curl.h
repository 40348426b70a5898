/*
 * ci_curl.h - the transport settings every outgoing call shares (follow-ups
 * to the model upstream, the E2B control and data planes): HTTP(S) only, no
 * redirects, no signals, proxies only when configured (environment variables
 * ignored), bounded connect and total time, an abort callback.
 */
#ifndef CI_CURL_H
#define CI_CURL_H

#include <curl/curl.h>
#include <apr_time.h>

typedef struct ci_curl_transport {
    apr_interval_time_t connect_timeout;  /* capped at TIMEOUT */
    apr_interval_time_t timeout;          /* whole exchange; at least 1 ms */
    const char *proxy;                    /* NULL: never a proxy */
    const char *ca_file;                  /* NULL: the system store */
    const char *client_cert;              /* PEM, NULL: none */
    const char *client_key;               /* PEM, NULL: in client_cert or none */
    /* Called while the transfer runs (about once a second, and on every
     * progress); non-zero aborts it with CURLE_ABORTED_BY_CALLBACK. */
    int (*abort)(void *baton);
    void *abort_baton;
} ci_curl_transport;

/* Apply T to H. T must outlive the transfer (the callback reads it). */
void ci_curl_set_transport(CURL *h, const ci_curl_transport *t);

#endif

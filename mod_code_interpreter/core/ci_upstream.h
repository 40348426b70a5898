/*
 * ci_upstream.h - follow-up calls to the model upstream, with libcurl.
 * No httpd here: headers come in as an apr_table_t already filtered.
 */
#ifndef CI_UPSTREAM_H
#define CI_UPSTREAM_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>
#include "ci_curl.h"

typedef struct ci_upstream_opts {
    /* Timeouts, TLS, proxy; its abort callback is called about once a
     * second while waiting (keepalives, client checks): non-zero aborts the
     * call (APR_ECONNABORTED). */
    ci_curl_transport transport;
    apr_size_t max_body;           /* answer bytes accepted */
    /* When set, a 200 answer of type text/event-stream is handed to SINK as
     * it arrives instead of being kept; non-zero stops the call
     * (APR_EOF). Any other answer is kept as without it. */
    int (*sink)(void *baton, const char *data, apr_size_t len);
    void *sink_baton;
    int sink_any;                  /* a 200 answer of any type goes to SINK */
} ci_upstream_opts;

typedef struct ci_upstream_answer {
    int status;
    const char *body;
    apr_size_t len;
    const char *content_type;  /* NULL when absent */
    const char *retry_after;   /* NULL when absent */
    int streamed;              /* the body went to the sink (body is empty);
                                  set when the call failed mid-stream too */
} ci_upstream_answer;

/* One-time libcurl set-up (parent, real post_config). */
apr_status_t ci_upstream_global_init(apr_pool_t *pconf);

/* The pool of kept connections of this process (child_init; its cleanup on
 * PCHILD closes them). Without it every call connects afresh. */
apr_status_t ci_upstream_child_init(apr_pool_t *pchild);

/* POST BODY to URL with HEADERS. APR_SUCCESS: ANS holds whatever status came
 * back. Otherwise *ERR says what failed (no secrets) and the status tells the
 * class: APR_TIMEUP (timed out), APR_ENOSPC (answer too large), APR_ECONNABORTED (progress
 * said stop), APR_EOF (the sink said stop), anything else
 * (unreachable). */
apr_status_t ci_upstream_post(apr_pool_t *p, const char *url,
                              const apr_table_t *headers, const char *body,
                              apr_size_t len, const ci_upstream_opts *opts,
                              ci_upstream_answer *ans, const char **err);

/* GET URL with HEADERS, as ci_upstream_post. */
apr_status_t ci_upstream_get(apr_pool_t *p, const char *url, const apr_table_t *headers,
                             const ci_upstream_opts *opts, ci_upstream_answer *ans,
                             const char **err);

#endif

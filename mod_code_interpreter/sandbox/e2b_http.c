/*
 * e2b_http.c - what every call of the e2b provider shares, to the control
 * plane, the code-interpreter server or envd: header lists that leave no
 * copy of a secret behind, the transport (aborted when the sandbox is
 * interrupted), a POST body, and the headers that reach a sandbox's own
 * servers (its tokens, never the API key).
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include <apr_atomic.h>
#include <apr_strings.h>
#include "ci_curl.h"
#include "e2b_internal.h"

/* ---- secrets ------------------------------------------------------------ */

void e2b_wipe(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
}

char *e2b_wiped_free(char *s)
{
    e2b_wipe(s);
    free(s);
    return NULL;
}

/* Add "NAME: VALUE" to *LIST without leaving a copy of VALUE behind. An
 * empty VALUE ("NAME:") stops libcurl from sending a header of its own. */
int e2b_add_header(struct curl_slist **list, const char *name, const char *value)
{
    apr_size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    struct curl_slist *next;
    if (!line)
        return -1;
    apr_snprintf(line, n, *value ? "%s: %s" : "%s:", name, value);
    next = curl_slist_append(*list, line);
    e2b_wiped_free(line);
    if (!next)
        return -1;
    *list = next;
    return 0;
}

void e2b_free_headers(struct curl_slist *list)
{
    struct curl_slist *h;
    for (h = list; h; h = h->next)
        e2b_wipe(h->data);
    curl_slist_free_all(list);
}

/* ---- transport ---------------------------------------------------------- */

int e2b_interrupted(ci_sandbox *sb)
{
    return apr_atomic_read32(&sb->interrupted) != 0;
}

static int interrupted_cb(void *sb)
{
    return e2b_interrupted(sb);
}

/* Transport options of every call. SB: abort when it is interrupted. T must
 * outlive the call. */
void e2b_set_transport(CURL *h, ci_curl_transport *t, long connect_ms, long total_ms,
                       ci_sandbox *sb)
{
    memset(t, 0, sizeof(*t));
    t->connect_timeout = apr_time_from_msec(connect_ms);
    t->timeout = apr_time_from_msec(total_ms);
    if (sb) {
        t->abort = interrupted_cb;
        t->abort_baton = sb;
    }
    ci_curl_set_transport(h, t);
}

void e2b_set_body(CURL *h, const char *body, apr_size_t len)
{
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
}

int e2b_sandbox_headers(ci_sandbox *sb, const char *port, struct curl_slist **hdrs)
{
    return e2b_add_header(hdrs, "Expect", "") ||
           e2b_add_header(hdrs, "X-Access-Token", sb->envd_token) ||
           (sb->traffic_token &&
            e2b_add_header(hdrs, "E2B-Traffic-Access-Token", sb->traffic_token)) ||
           e2b_add_header(hdrs, "E2b-Sandbox-Id", sb->id) ||
           e2b_add_header(hdrs, "E2b-Sandbox-Port", port);
}

/*
 * e2b_control.c - the e2b provider's control plane (api_base, authenticated
 * by X-API-Key; never the sandbox's tokens): one call and its answer, read
 * into a fixed buffer that is wiped after use; a sandbox's life (POST
 * /sandboxes/{id}/timeout), extended before anything runs in it.
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <string.h>
#include <curl/curl.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_curl.h"
#include "ci_json.h"
#include "e2b_internal.h"

#define CONTROL_CONNECT_MS 10000L
#define CONTROL_TOTAL_MS 30000L
/* A sandbox must outlive the longest execution by this much. */
#define LIFETIME_MARGIN_S 30

#define MSG_EXPIRED "The sandbox expired (its lifetime ran out) and was " \
                    "discarded."

/* ---- calls -------------------------------------------------------------- */

size_t e2b_on_answer(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    e2b_answer *a = userdata;
    size_t n = size * nmemb;
    if (!a->buf)
        return n;
    if (a->len + n > a->cap) {
        a->over = 1;
        return a->drop_rest ? n : 0;
    }
    memcpy(a->buf + a->len, ptr, n);
    a->len += n;
    return n;
}

/* One control-plane call (METHOD is POST with BODY, or DELETE). *STATUS is
 * the HTTP status, 0 when none arrived. SB: abort when it is interrupted. */
CURLcode e2b_control_call(CURL *h, const char *method, const char *url, const char *key,
                          const char *body, e2b_answer *ans, ci_sandbox *sb, long *status)
{
    struct curl_slist *hdrs = NULL;
    e2b_answer drop = { NULL, 0, 0, 0, 0 };
    ci_curl_transport t;
    CURLcode rc = CURLE_OUT_OF_MEMORY;

    *status = 0;
    curl_easy_reset(h);
    if (e2b_add_header(&hdrs, "X-API-Key", key) ||
        e2b_add_header(&hdrs, "Accept", "application/json") ||
        e2b_add_header(&hdrs, "Expect", "") ||
        (body && e2b_add_header(&hdrs, "Content-Type", "application/json")))
        goto leave;
    e2b_set_transport(h, &t, CONTROL_CONNECT_MS, CONTROL_TOTAL_MS, sb);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (body)
        e2b_set_body(h, body, strlen(body));
    else
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, e2b_on_answer);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, ans ? ans : &drop);
    rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
leave:
    /* The handle keeps pointers to the list: drop them before freeing it. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    e2b_free_headers(hdrs);
    return rc;
}

/* The service's own message from an error body {code, message}: short,
 * printable, and never anything holding KEY. */
const char *e2b_service_message(apr_pool_t *p, const e2b_answer *a, const char *key)
{
    const char *err, *msg;
    json_object *root;
    char *out, *c;

    if (!a->len || a->over || !(root = ci_json_parse(p, a->buf, a->len, &err)))
        return NULL;
    if (!(msg = ci_json_str(root, "message")) || !*msg || strstr(msg, key))
        return NULL;
    out = apr_pstrndup(p, msg, 200);
    for (c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    return out;
}

/* ---- the sandbox's lifetime ---------------------------------------------- */

/* Seconds the sandbox lives after each call: the configured lifetime, but
 * never less than one execution needs. */
int e2b_lifetime_of(const ci_sandbox_def *def)
{
    int need = (int)apr_time_sec(def->timeout) + LIFETIME_MARGIN_S;
    return CI_E2B(def)->lifetime > need ? CI_E2B(def)->lifetime : need;
}

/* Whether S holds WORDS (lower case), whatever the case in S. */
static int contains_nocase(apr_pool_t *p, const char *s, const char *words)
{
    char *low = apr_pstrdup(p, s), *c;
    for (c = low; *c; c++)
        *c = (char)apr_tolower(*c);
    return strstr(low, words) != NULL;
}

/* POST /sandboxes/{id}/timeout {"timeout": SECONDS}: the sandbox then ends
 * SECONDS after this call (shorter or longer than before), never past the
 * plan's longest life counted from its start (the service shortens it
 * silently). 204; 404 when it is gone; 400 "Max instance length exceeded"
 * once it has lived that long (it ends any moment). ABORTABLE: stop when SB
 * is interrupted. *WHY (memory from P, no secret) unless TIMEOUT_SET. */
e2b_timeout e2b_set_timeout(ci_sandbox *sb, apr_pool_t *p, int seconds, int abortable,
                            const char **why)
{
    char buf[4096];
    e2b_answer ans = { buf, 0, sizeof(buf), 0, 1 };
    const char *url = apr_pstrcat(p, sb->api_base, "/sandboxes/", sb->id,
                                  "/timeout", NULL);
    const char *body = apr_psprintf(p, "{\"timeout\":%d}", seconds);
    const char *msg;
    long status;
    CURLcode rc = e2b_control_call(sb->curl, "POST", url, sb->api_key, body, &ans,
                                   abortable ? sb : NULL, &status);

    if (abortable && (rc == CURLE_ABORTED_BY_CALLBACK || e2b_interrupted(sb))) {
        *why = MSG_STOPPED;
        return TIMEOUT_STOPPED;
    }
    if (rc == CURLE_OK && status == 404) {
        *why = "the E2B sandbox no longer exists (HTTP 404)";
        return TIMEOUT_GONE;
    }
    if (rc != CURLE_OK) {
        *why = apr_psprintf(p, "the E2B sandbox service could not be reached (%s)",
                            curl_easy_strerror(rc));
        return TIMEOUT_FAILED;
    }
    if (status == 204 || status == 200)
        return TIMEOUT_SET;
    msg = e2b_service_message(p, &ans, sb->api_key);
    if (status == 400 && msg && contains_nocase(p, msg, "max instance length")) {
        *why = apr_psprintf(p, "the E2B sandbox has lived as long as the E2B plan "
                               "allows (HTTP 400: %s)", msg);
        return TIMEOUT_GONE;
    }
    *why = apr_psprintf(p, "the E2B sandbox service refused to extend the sandbox's "
                           "life (HTTP %ld%s%s)", status, msg ? ": " : "",
                        msg ? msg : "");
    return TIMEOUT_FAILED;
}

/* ---- before a run ------------------------------------------------------- */

/* Extend the lifetime before an execution: the tool's lifetime, or a
 * container's idle expiry, never less than the execution needs. Only "the
 * sandbox is gone" (404, or past the plan's longest life) and an interrupt
 * matter; any other failure is ignored. CI_EXEC_COMPLETED when the
 * execution may go ahead, else why not (*MSG for the model). */
static ci_exec_outcome extend_lifetime(ci_sandbox *sb, apr_pool_t *p, const char **msg)
{
    int need = (int)apr_time_sec(sb->def->timeout) + LIFETIME_MARGIN_S;
    int seconds = !sb->container ? e2b_lifetime_of(sb->def)
                                 : sb->idle > need ? sb->idle : need;
    const char *why;
    switch (e2b_set_timeout(sb, p, seconds, 1, &why)) {
    case TIMEOUT_STOPPED:
        *msg = MSG_STOPPED;
        return CI_EXEC_INTERRUPTED;
    case TIMEOUT_GONE:
        *msg = MSG_EXPIRED;
        return CI_EXEC_LOST;
    default:
        return CI_EXEC_COMPLETED;
    }
}

ci_exec_outcome e2b_before_run(ci_sandbox *sb, apr_pool_t *p, const char **msg)
{
    if (!sb->id) {
        *msg = "The sandbox was let go before the execution.";
        return CI_EXEC_LOST;
    }
    if (e2b_interrupted(sb)) {
        *msg = MSG_STOPPED;
        return CI_EXEC_INTERRUPTED;
    }
    return extend_lifetime(sb, p, msg);
}

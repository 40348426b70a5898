/*
 * e2b_envd.c - one call to envd, the agent every E2B sandbox runs on its
 * own port (49983) beside the code-interpreter server, as every envd user
 * makes it (container files, shell commands): its base URL, the sandbox's
 * headers and a Connect call's, the transport; what a call that did not
 * answer 200 means; a unary Connect call with a JSON answer.
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <string.h>
#include <curl/curl.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_buf.h"
#include "ci_json.h"
#include "e2b_internal.h"

/* A unary call's answer (a listing of CI_CFILE_MAX_LISTED files is a few MB
 * of JSON). */
#define MAX_LISTING ((apr_size_t)16 * 1024 * 1024)

/* ---- calls ---------------------------------------------------------------- */

const char *e2b_envd_base(ci_sandbox *sb, apr_pool_t *p)
{
    static const char data_host[] = "https://" E2B_PORT "-";
    if (!strncmp(sb->data_base, data_host, sizeof(data_host) - 1))
        return apr_pstrcat(p, "https://" ENVD_PORT "-",
                           sb->data_base + sizeof(data_host) - 1, NULL);
    return sb->data_base;
}

static size_t on_collect(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    size_t n = size * nmemb;
    return ci_buf_append(userdata, ptr, n) ? 0 : n;
}

/* A Connect call's headers: its content type (unary JSON unless told),
 * the protocol's version, the sandbox user; a stream's keepalive interval. */
static int rpc_headers(const envd_call *c, struct curl_slist **hdrs)
{
    return e2b_add_header(hdrs, "Content-Type", c->rpc_type ? c->rpc_type
                                                            : "application/json") ||
           e2b_add_header(hdrs, "Connect-Protocol-Version", "1") ||
           e2b_add_header(hdrs, "Authorization", ENVD_BASIC) ||
           (c->rpc_type && e2b_add_header(hdrs, "Keepalive-Ping-Interval",
                                          ENVD_KEEPALIVE_S));
}

CURLcode e2b_envd_perform(ci_sandbox *sb, const envd_call *c, long *status)
{
    struct curl_slist *hdrs = NULL;
    ci_curl_transport t;
    CURLcode rc = CURLE_OUT_OF_MEMORY;

    *status = 0;
    curl_easy_reset(sb->curl);
    if (e2b_sandbox_headers(sb, ENVD_PORT, &hdrs) || (c->rpc_body && rpc_headers(c, &hdrs)))
        goto leave;
    e2b_set_transport(sb->curl, &t, ENVD_CONNECT_MS, c->total_ms, c->abortable ? sb : NULL);
    curl_easy_setopt(sb->curl, CURLOPT_URL, c->url);
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, hdrs);
    if (c->rpc_body)
        e2b_set_body(sb->curl, c->rpc_body, c->rpc_len ? c->rpc_len : strlen(c->rpc_body));
    if (c->mime)
        curl_easy_setopt(sb->curl, CURLOPT_MIMEPOST, c->mime);
    curl_easy_setopt(sb->curl, CURLOPT_WRITEFUNCTION, c->on_data ? c->on_data : on_collect);
    curl_easy_setopt(sb->curl, CURLOPT_WRITEDATA, c->on_data ? c->baton : c->answer);
    rc = curl_easy_perform(sb->curl);
    curl_easy_getinfo(sb->curl, CURLINFO_RESPONSE_CODE, status);
leave:
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(sb->curl, CURLOPT_MIMEPOST, NULL);
    e2b_free_headers(hdrs);
    return rc;
}

const char *e2b_connect_code(json_object *root)
{
    const char *code = root ? ci_json_str(root, "code") : NULL, *c;
    for (c = code; c && *c; c++)
        if (!apr_islower(*c) && *c != '_')
            return NULL;
    return code && *code && strlen(code) <= 32 ? code : NULL;
}

/* What a call that did not answer 200 means. ANSWER: its body (a Connect
 * error {"code": "not_found", "message"} or /files' {"code": 404,
 * "message"}); only the code goes into *ERR (a message may quote paths). */
envd_rc e2b_envd_failure(apr_pool_t *p, CURLcode rc, long status, const ci_buf *answer,
                         const char **err)
{
    json_object *root = NULL;
    const char *code, *perr;

    if (rc != CURLE_OK && (!status || status == 200)) {
        *err = apr_psprintf(p, "envd in the E2B sandbox could not be reached (%s)",
                            curl_easy_strerror(rc));
        return ENVD_FAILED;
    }
    if (status == 502) {
        *err = "the E2B sandbox no longer exists (HTTP 502)";
        return ENVD_GONE;
    }
    if (answer && answer->len)
        root = ci_json_parse(p, answer->data, answer->len, &perr);
    code = e2b_connect_code(root);
    if (status == 404)
        return ENVD_MISSING;
    if (status == 409 && code && !strcmp(code, "already_exists"))
        return ENVD_EXISTS;
    *err = apr_psprintf(p, "envd in the E2B sandbox answered HTTP %ld%s%s%s", status,
                        code ? " (" : "", code ? code : "", code ? ")" : "");
    return ENVD_FAILED;
}

envd_rc e2b_envd_rpc(ci_sandbox *sb, apr_pool_t *p, const char *procedure, json_object *req,
                     json_object **out, const char **err)
{
    ci_buf answer;
    envd_call c = { .answer = &answer, .total_ms = ENVD_CALL_MS };
    const char *perr;
    long status;
    CURLcode rc;

    ci_buf_init(&answer, p, MAX_LISTING);
    c.url = apr_pstrcat(p, e2b_envd_base(sb, p), "/", procedure, NULL);
    c.rpc_body = ci_json_pstr(p, req, NULL);
    rc = e2b_envd_perform(sb, &c, &status);
    if (rc != CURLE_OK || status != 200)
        return e2b_envd_failure(p, rc, status, &answer, err);
    if (!(*out = ci_json_parse(p, answer.data ? answer.data : "", answer.len, &perr)) ||
        !json_object_is_type(*out, json_type_object)) {
        *err = apr_pstrcat(p, "envd in the E2B sandbox answered ", procedure,
                           " with an unreadable body", NULL);
        return ENVD_FAILED;
    }
    return ENVD_OK;
}

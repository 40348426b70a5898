/*
 * sandbox_e2b.c - the "e2b" provider: one E2B cloud sandbox (a microVM
 * running the code-interpreter server, one stateful Python kernel) per
 * ci_sandbox.
 *
 * Control plane (api_base, authenticated by X-API-Key): create the sandbox,
 * extend its lifetime before every execution, delete it. Data plane
 * (sandbox_url, else https://49999-<id>.<domain>, authenticated by the
 * sandbox's own access tokens): POST /execute, whose NDJSON answer is read
 * while it streams in. The API key never goes to the data plane, the sandbox
 * tokens never to the control plane, and the provider's sandbox id and
 * tokens never leave this file except in those calls and in a container's
 * handle (secret; the caller keeps it).
 *
 * Containers (attach/handle/keep_alive/release): the sandbox outlives the
 * process. Its E2B timeout is the container's idle expiry, set again on each
 * use (POST /sandboxes/{id}/timeout, counted from the call). It runs its code
 * in an execution context of its own (POST /contexts at creation, its id in
 * every /execute), because the server has no interrupt: after a run that
 * failed (timed out, interrupted, cut...) the kernel may still be busy with
 * it, so that context is restarted (POST /contexts/{id}/restart) and the
 * next run finds an empty interpreter instead of waiting behind the old one.
 *
 * Below it, each a file of its own (e2b_internal.h): a container's files
 * and the hosted shell through envd (e2b_files.c, e2b_process.c), one envd
 * call (e2b_envd.c), the control plane and a sandbox's life before a run
 * (e2b_control.c), a sandbox's local state and a container's handle
 * (e2b_handle.c), what every call shares (e2b_http.c).
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <curl/curl.h>
#include <apr_atomic.h>
#include <apr_lib.h>
#include <apr_network_io.h>
#include <apr_strings.h>
#include <apr_uri.h>
#include "ci_policy.h"
#include "ci_request.h"
#include "ci_config.h"
#include "ci_curl.h"
#include "ci_json.h"
#include "ci_log.h"
#include "ci_sandbox.h"
#include "ci_ndjson.h"
#include "ci_workers.h"
#include "e2b_internal.h"

#define E2B_DEFAULT_DOMAIN "e2b.app"
#define DATA_CONNECT_MS 10000L
#define CONTROL_MAX_ANSWER ((apr_size_t)64 * 1024)
#define DELETE_RETRY_DELAY apr_time_from_msec(500)
/* Context calls (create, restart: a kernel restart takes a few seconds). */
#define CONTEXT_TOTAL_MS 30000L
#define CONTEXT_CWD "/home/user"

#define MSG_RESTARTED " The container's interpreter was restarted: its " \
                      "variables and imports are gone (its files are kept)."

/* ---- what the service returns ------------------------------------------ */

static int valid_domain(const char *s)
{
    apr_size_t n = 0;
    if (*s == '.' || *s == '-')
        return 0;
    for (; s[n]; n++)
        if (!apr_isalnum(s[n]) && s[n] != '-' && s[n] != '.')
            return 0;
    return n > 0 && n <= 253;
}

/* The domain of sandbox hosts when the service names none: that of the API
 * host (api.<domain>), else the public service's. */
static const char *default_domain(apr_pool_t *p, const char *api_base)
{
    apr_uri_t uri;
    if (apr_uri_parse(p, api_base, &uri) == APR_SUCCESS && uri.hostname &&
        !strncasecmp(uri.hostname, "api.", 4) && valid_domain(uri.hostname + 4))
        return uri.hostname + 4;
    return E2B_DEFAULT_DOMAIN;
}

/* ---- the data plane ----------------------------------------------------- */

/* The headers of every call to the code-interpreter server. */
static int data_headers(ci_sandbox *sb, struct curl_slist **hdrs)
{
    return e2b_add_header(hdrs, "Content-Type", "application/json") ||
           e2b_sandbox_headers(sb, E2B_PORT, hdrs);
}

/* ---- deleting ----------------------------------------------------------- */

/* What a delete needs, owned by the job (malloc'd: it outlives the sandbox
 * and its pool). */
typedef struct e2b_delete {
    CURL *h;
    char *url;
    char *key;
} e2b_delete;

static void delete_free(e2b_delete *d)
{
    if (d->h)
        curl_easy_cleanup(d->h);
    free(d->url);
    e2b_wiped_free(d->key);
    free(d);
}

/* 204 and 404 both mean the sandbox is gone; anything else is tried once
 * more. APR_SUCCESS when it is gone; otherwise *WHY says what the service
 * did (the sandbox then ends with its lifetime). */
static apr_status_t delete_run_status(e2b_delete *d, const char **why)
{
    static __thread char msg[160];
    int attempt;

    if (!d->h)
        d->h = curl_easy_init();
    *why = "could not create an HTTP client handle";
    for (attempt = 0; d->h && attempt < 2; attempt++) {
        long status;
        CURLcode rc = e2b_control_call(d->h, "DELETE", d->url, d->key, NULL, NULL,
                                       NULL, &status);
        if (rc == CURLE_OK && (status == 204 || status == 404 || status == 200))
            return APR_SUCCESS;
        if (rc != CURLE_OK)
            apr_snprintf(msg, sizeof(msg), "the E2B sandbox service could not be "
                         "reached (%s)", curl_easy_strerror(rc));
        else
            apr_snprintf(msg, sizeof(msg), "the E2B sandbox service answered "
                         "HTTP %ld", status);
        *why = msg;
        if (attempt == 0)
            apr_sleep(DELETE_RETRY_DELAY);
    }
    return APR_EGENERAL;
}

/* The job of a sandbox's own delete: a failure is logged, never silent. */
static void delete_run(void *baton)
{
    e2b_delete *d = baton;
    const char *why;
    if (delete_run_status(d, &why) != APR_SUCCESS)
        ci_log(CI_LOG_WARNING, "CI0311: an E2B sandbox could not be deleted (%s); "
               "it ends when its lifetime runs out", why);
    delete_free(d);
}

/* Delete SB's provider sandbox off the request path (inline when no worker
 * takes the job). The job takes SB's handle and its warm connection. */
static void delete_sandbox(ci_sandbox *sb)
{
    e2b_delete *d = calloc(1, sizeof(*d));
    apr_size_t n;

    if (!d)
        return;
    n = strlen(sb->api_base) + strlen(sb->id) + sizeof("/sandboxes/");
    d->url = malloc(n);
    d->key = strdup(sb->api_key);
    if (!d->url || !d->key) {
        delete_free(d);
        return;
    }
    apr_snprintf(d->url, n, "%s/sandboxes/%s", sb->api_base, sb->id);
    d->h = sb->curl;
    sb->curl = NULL;
    if (ci_job_fire(delete_run, d) != APR_SUCCESS)
        delete_run(d);
}

/* ---- starting ----------------------------------------------------------- */

/* A container's allowlist as E2B's network settings: the domains (E2B
 * takes "*." subdomain patterns too) allowed out, everything else denied.
 * E2B filters domains on ports 80 (Host) and 443 (SNI) only; other ports
 * fall to the IP rules, which deny them. */
static json_object *network_of(apr_pool_t *p, const char *allowlist)
{
    json_object *net = json_object_new_object(), *allow = ci_domains_json(p, allowlist);
    json_object *deny = json_object_new_array();
    json_object_array_add(deny, json_object_new_string("0.0.0.0/0"));
    json_object_object_add(net, "allowOut", allow);
    json_object_object_add(net, "denyOut", deny);
    return net;
}

/* The create call's body: TIMEOUT seconds of life; CONTAINER: TAG is a
 * container's id (it says so in the metadata, so that a sweep for leftovers
 * can tell a container's sandbox from a request's). */
static const char *create_body(apr_pool_t *p, const ci_sandbox_def *def,
                               const char *tag, int container, int timeout)
{
    json_object *body = ci_json_own(p, json_object_new_object());
    json_object *meta = json_object_new_object();
    char host[APRMAXHOSTLEN + 1];

    if (apr_gethostname(host, sizeof(host), p) != APR_SUCCESS)
        apr_cpystrn(host, "unknown", sizeof(host));
    json_object_object_add(meta, "mod_code_interpreter", json_object_new_string("1"));
    json_object_object_add(meta, "server", json_object_new_string(host));
    json_object_object_add(meta, "request", json_object_new_string(tag ? tag : ""));
    if (container)
        json_object_object_add(meta, "container", json_object_new_string(tag ? tag : ""));
    json_object_object_add(body, "templateID",
                           json_object_new_string(CI_E2B(def)->template_id));
    json_object_object_add(body, "timeout", json_object_new_int(timeout));
    json_object_object_add(body, "secure", json_object_new_boolean(1));
    json_object_object_add(body, "allow_internet_access",
                           json_object_new_boolean(def->network || def->allowlist ? 1 : 0));
    if (def->allowlist)
        json_object_object_add(body, "network", network_of(p, def->allowlist));
    json_object_object_add(body, "metadata", meta);
    return ci_json_pstr(p, body, NULL);
}

static const char *refused(apr_pool_t *p, long status, const e2b_answer *a,
                           const char *key)
{
    const char *msg = e2b_service_message(p, a, key);
    return apr_psprintf(p, "the E2B sandbox service refused to create a sandbox "
                           "(HTTP %ld%s%s)", status, msg ? ": " : "",
                        msg ? msg : "");
}

static const char *unreachable(apr_pool_t *p, CURLcode rc, const e2b_answer *a)
{
    if (a->over)
        return "the E2B sandbox service answered with an oversized body";
    return apr_psprintf(p, "the E2B sandbox service could not be reached (%s)",
                        curl_easy_strerror(rc));
}

/* Copy what a 201 answer says into SB. NULL, or why it is not usable (SB->id
 * is set when a sandbox exists all the same). */
static const char *take_created(ci_sandbox *sb, apr_pool_t *tmp, const e2b_answer *a)
{
    json_object *root;
    const char *err, *id, *envd, *traffic, *domain, *why = NULL;

    if (a->over || !(root = ci_json_parse(tmp, a->buf, a->len, &err)))
        return "the E2B sandbox service answered with an unreadable body";
    id = ci_json_str(root, "sandboxID");
    envd = ci_json_str(root, "envdAccessToken");
    traffic = ci_json_str(root, "trafficAccessToken");
    domain = ci_json_str(root, "domain");
    if (!id || !e2b_valid_id(id))
        why = "the E2B sandbox service answered without a usable sandbox id";
    else {
        sb->id = apr_pstrdup(sb->p, id);
        if (!envd || !e2b_valid_token(envd))
            why = "the E2B sandbox service created a sandbox without an access "
                  "token (the data plane cannot be secured)";
        else if (traffic && *traffic && !e2b_valid_token(traffic))
            why = "the E2B sandbox service answered with an unusable traffic "
                  "token";
        else if (domain && *domain && !valid_domain(domain))
            why = "the E2B sandbox service answered with an unusable domain";
    }
    if (!why) {
        sb->envd_token = apr_pstrdup(sb->p, envd);
        sb->traffic_token = traffic && *traffic ? apr_pstrdup(sb->p, traffic) : NULL;
        if (CI_E2B(sb->def)->sandbox_url)
            sb->data_base = e2b_trim_slash(sb->p, CI_E2B(sb->def)->sandbox_url);
        else
            sb->data_base = apr_pstrcat(sb->p, "https://" E2B_PORT "-", sb->id, ".",
                                        domain && *domain ? domain
                                            : default_domain(sb->p, sb->api_base),
                                        NULL);
    }
    return why;
}

/* Create a sandbox living TIMEOUT seconds (see create_body). */
/* Answers a create is tried again after: the service busy (429: the
 * account's concurrent sandboxes, or its rate) or failing (5xx), or not
 * reached at all. */
static int create_retryable(CURLcode rc, long status)
{
    if (rc == CURLE_COULDNT_CONNECT)
        return 1;
    return rc == CURLE_OK && (status == 429 || status == 500 || status == 502 ||
                              status == 503 || status == 504);
}

static apr_status_t e2b_reap(const ci_reap_cred *cred, const char *id, const char **err);

/* A create that timed out here may have succeeded at E2B: the sandboxes its
 * metadata names (request = TAG) are deleted, as a dead child's are. */
static void sweep_created(ci_sandbox *sb, apr_pool_t *tmp, const char *tag)
{
    e2b_answer ans = { NULL, 0, CONTROL_MAX_ANSWER, 0, 0 };
    char *q = curl_easy_escape(sb->curl, apr_pstrcat(tmp, "request=", tag, NULL), 0);
    json_object *list;
    const char *perr;
    ci_reap_cred cred = { sb->api_base, sb->api_key };
    long status;
    size_t i;
    if (!q)
        return;
    ans.buf = apr_palloc(tmp, ans.cap);
    if (e2b_control_call(sb->curl, "GET",
                         apr_pstrcat(tmp, sb->api_base, "/v2/sandboxes?metadata=", q, NULL),
                         sb->api_key, NULL, &ans, NULL, &status) == CURLE_OK && status == 200 &&
        (list = ci_json_parse(tmp, ans.buf, ans.len, &perr)))
        for (i = 0; i < ci_json_len(list); i++) {
            const char *id = ci_json_str(json_object_array_get_idx(list, i), "sandboxID"),
                       *why = NULL;
            if (id && e2b_reap(&cred, id, &why) == APR_SUCCESS)
                ci_log(CI_LOG_NOTICE, "CI0315: an E2B sandbox made by a create that timed "
                       "out here was deleted");
        }
    curl_free(q);
}

/* The time a create keeps trying while the service is busy or failing. */
#define CREATE_RETRY_FOR apr_time_from_sec(10)

static apr_status_t new_sandbox(apr_pool_t *p, const ci_sandbox_def *def,
                                const char *tag, int container, int timeout,
                                ci_sandbox **out, const char **err)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    e2b_answer ans = { NULL, 0, CONTROL_MAX_ANSWER, 0, 0 };
    apr_time_t give_up = apr_time_now() + CREATE_RETRY_FOR;
    apr_interval_time_t pause = apr_time_from_msec(250);
    apr_status_t rv;
    apr_pool_t *tmp;
    const char *body;
    CURLcode rc;
    long status;

    if ((rv = e2b_sandbox_init(sb, p, def, err)) != APR_SUCCESS)
        return rv;
    rv = APR_EGENERAL;
    /* The request and the answer (tokens in it) live only until here. */
    apr_pool_create(&tmp, p);
    ans.buf = apr_palloc(tmp, ans.cap);
    body = create_body(tmp, def, tag, container, timeout);
    while ((rc = e2b_control_call(sb->curl, "POST",
                                  apr_pstrcat(tmp, sb->api_base, "/sandboxes", NULL),
                                  sb->api_key, body, &ans, NULL, &status),
            create_retryable(rc, status)) && apr_time_now() + pause < give_up) {
        explicit_bzero(ans.buf, ans.len);
        ans.len = 0;
        ans.over = ans.drop_rest = 0;
        apr_sleep(pause);             /* backing off: 0.25 s, doubling to 2 s */
        if (pause < apr_time_from_sec(2))
            pause *= 2;
    }
    if (rc != CURLE_OK) {
        *err = unreachable(p, rc, &ans);
        rv = rc == CURLE_OPERATION_TIMEDOUT ? APR_TIMEUP : APR_ECONNREFUSED;
        if (rc == CURLE_OPERATION_TIMEDOUT)
            sweep_created(sb, tmp, tag ? tag : "");
    }
    else if (status != 201) {
        *err = refused(p, status, &ans, sb->api_key);
        rv = status == 429 ? APR_EAGAIN : APR_EGENERAL;
    }
    else if ((*err = take_created(sb, tmp, &ans)) != NULL) {
        if (sb->id)
            delete_sandbox(sb);   /* it exists all the same */
    }
    else {
        *out = sb;
        rv = APR_SUCCESS;
    }
    explicit_bzero(ans.buf, ans.len);
    apr_pool_destroy(tmp);
    return rv;
}

static apr_status_t e2b_start(apr_pool_t *p, const ci_sandbox_def *def,
                              const char *tag, ci_sandbox **out, const char **err)
{
    return new_sandbox(p, def, tag, 0, e2b_lifetime_of(def), out, err);
}

/* ---- execution contexts (containers) ------------------------------------- */

/* POST PATH with BODY (JSON, "" for none) on the sandbox's code-interpreter
 * server, with the data plane's headers. Not stopped by an interrupt: a
 * container recovers through it after one. *STATUS as e2b_control_call's. */
static CURLcode data_call(ci_sandbox *sb, apr_pool_t *p, const char *path,
                          const char *body, e2b_answer *ans, long *status)
{
    struct curl_slist *hdrs = NULL;
    e2b_answer drop = { NULL, 0, 0, 0, 0 };
    ci_curl_transport t;
    CURLcode rc = CURLE_OUT_OF_MEMORY;

    *status = 0;
    curl_easy_reset(sb->curl);
    if (data_headers(sb, &hdrs) || e2b_add_header(&hdrs, "Accept", "application/json"))
        goto leave;
    e2b_set_transport(sb->curl, &t, DATA_CONNECT_MS, CONTEXT_TOTAL_MS, NULL);
    curl_easy_setopt(sb->curl, CURLOPT_URL, apr_pstrcat(p, sb->data_base, path, NULL));
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, hdrs);
    e2b_set_body(sb->curl, body, strlen(body));
    curl_easy_setopt(sb->curl, CURLOPT_WRITEFUNCTION, e2b_on_answer);
    curl_easy_setopt(sb->curl, CURLOPT_WRITEDATA, ans ? ans : &drop);
    rc = curl_easy_perform(sb->curl);
    curl_easy_getinfo(sb->curl, CURLINFO_RESPONSE_CODE, status);
leave:
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, NULL);
    e2b_free_headers(hdrs);
    return rc;
}

static const char *data_failure(apr_pool_t *p, CURLcode rc, long status)
{
    if (rc != CURLE_OK)
        return apr_psprintf(p, "its code interpreter could not be reached (%s)",
                            curl_easy_strerror(rc));
    return apr_psprintf(p, "its code interpreter answered HTTP %ld", status);
}

/* A Python context of its own for a container: POST /contexts
 * {"language": "python", "cwd": "/home/user"} -> 200 {id, language, cwd}.
 * Why not the default context every sandbox has: the server never tells a
 * client that context's id (GET /contexts lists it among the others), and
 * restarting it by id leaves the server's "default" alias on the closed
 * connection to the old kernel. An explicit context is named in every
 * /execute (context_id) and restarted by its id. NULL, or why not. */
static const char *create_context(ci_sandbox *sb, apr_pool_t *tmp)
{
    char *buf = apr_palloc(tmp, CONTROL_MAX_ANSWER);
    e2b_answer ans = { buf, 0, CONTROL_MAX_ANSWER, 0, 0 };
    json_object *root;
    const char *id, *err;
    long status;
    CURLcode rc = data_call(sb, tmp, "/contexts",
                            "{\"language\":\"python\",\"cwd\":\"" CONTEXT_CWD "\"}",
                            &ans, &status);

    if (rc != CURLE_OK || status != 200)
        return apr_pstrcat(tmp, "the E2B sandbox could not get an execution context (",
                           data_failure(tmp, rc, status), ")", NULL);
    if (!(root = ci_json_parse(tmp, ans.buf, ans.len, &err)) ||
        !(id = ci_json_str(root, "id")) || !e2b_valid_id(id))
        return "the E2B sandbox answered the creation of an execution context "
               "without a usable id";
    sb->context_id = apr_pstrdup(sb->p, id);
    return NULL;
}

/* POST /contexts/{id}/restart (no body) -> 200: the context's kernel is
 * restarted, empty; an execution still streaming from it ends with an
 * UnexpectedEndOfExecution error. NULL, or why not. */
static const char *restart_context(ci_sandbox *sb, apr_pool_t *p)
{
    long status;
    CURLcode rc = data_call(sb, p, apr_pstrcat(p, "/contexts/", sb->context_id,
                                               "/restart", NULL), "", NULL, &status);
    if (rc == CURLE_OK && status >= 200 && status < 300)
        return NULL;
    return data_failure(p, rc, status);
}

/* ---- running ------------------------------------------------------------ */

typedef struct stream {
    CURL *h;
    ci_ndjson *nd;
    long status;
    apr_size_t other;     /* bytes of a non-200 body, dropped */
} stream;

static size_t on_stream(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    stream *st = userdata;
    size_t n = size * nmemb;
    if (!st->status)
        curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, &st->status);
    if (st->status != 200) {
        st->other += n;
        return st->other > CONTROL_MAX_ANSWER ? 0 : n;
    }
    return ci_ndjson_feed(st->nd, ptr, n) < 0 ? 0 : n;
}

static const char *status_failure(apr_pool_t *p, long status)
{
    if (status == 502)
        return "The sandbox did not answer (HTTP 502): it has timed out or was "
               "stopped.";
    return apr_psprintf(p, "The sandbox refused the execution (HTTP %ld).", status);
}

/* How the execution ended, from how the transfer ended (*MSG for the
 * model); CI_EXEC_COMPLETED lets the reader decide (completed, error, cut or
 * too much output). */
static ci_exec_outcome stream_failure(ci_sandbox *sb, apr_pool_t *p, const stream *st,
                                      CURLcode rc, apr_interval_time_t took,
                                      const char **msg)
{
    if (ci_ndjson_ended(st->nd))
        return CI_EXEC_COMPLETED;
    if (rc == CURLE_ABORTED_BY_CALLBACK || e2b_interrupted(sb)) {
        *msg = MSG_STOPPED;
        return CI_EXEC_INTERRUPTED;
    }
    if (st->status && st->status != 200) {
        *msg = status_failure(p, st->status);
        return CI_EXEC_LOST;
    }
    if (rc == CURLE_OPERATION_TIMEDOUT && (st->status || took >= sb->def->timeout)) {
        *msg = apr_psprintf(p, "The execution timed out after %d s and was "
                               "stopped.", (int)apr_time_sec(sb->def->timeout));
        return CI_EXEC_TIMED_OUT;
    }
    if (rc != CURLE_OK && !st->status) {
        /* The model is told what happened; the operator, where. */
        *msg = apr_psprintf(p, "The sandbox could not be reached (%s).",
                            curl_easy_strerror(rc));
        ci_log(CI_LOG_WARNING, "CI0312: the E2B sandbox at %s could not be reached (%s)",
               sb->data_base, curl_easy_strerror(rc));
        return CI_EXEC_LOST;
    }
    return CI_EXEC_COMPLETED;
}

static ci_exec_outcome execute(ci_sandbox *sb, apr_pool_t *p, const char *code,
                               ci_ndjson *nd, const char **msg)
{
    json_object *req = ci_json_own(p, json_object_new_object());
    struct curl_slist *hdrs = NULL;
    stream st = { sb->curl, nd, 0, 0 };
    long total_ms = (long)apr_time_as_msec(sb->def->timeout);
    apr_time_t began = apr_time_now();
    ci_curl_transport t;
    const char *body;
    apr_size_t len;
    CURLcode rc;

    json_object_object_add(req, "code", json_object_new_string(code));
    if (sb->context_id)
        json_object_object_add(req, "context_id", json_object_new_string(sb->context_id));
    body = ci_json_pstr(p, req, &len);
    curl_easy_reset(sb->curl);
    if (data_headers(sb, &hdrs)) {
        e2b_free_headers(hdrs);
        *msg = "The sandbox request could not be prepared (out of memory).";
        return CI_EXEC_LOST;
    }
    e2b_set_transport(sb->curl, &t, DATA_CONNECT_MS, total_ms > 0 ? total_ms : 1L, sb);
    curl_easy_setopt(sb->curl, CURLOPT_URL,
                     apr_pstrcat(p, sb->data_base, "/execute", NULL));
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, hdrs);
    e2b_set_body(sb->curl, body, len);
    curl_easy_setopt(sb->curl, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(sb->curl, CURLOPT_WRITEDATA, &st);
    rc = curl_easy_perform(sb->curl);
    if (!st.status)
        curl_easy_getinfo(sb->curl, CURLINFO_RESPONSE_CODE, &st.status);
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, NULL);
    e2b_free_headers(hdrs);
    return stream_failure(sb, p, &st, rc, apr_time_now() - began, msg);
}

/* A container's run failed after its code was sent: the kernel may still
 * be busy with it (the server has no interrupt, and a client that went away
 * does not reliably stop it), so its context is restarted and the model is
 * told that the state is gone. FAILURE + what was done, from P. */
static const char *recover(ci_sandbox *sb, apr_pool_t *p, apr_pool_t *tmp,
                           const char *failure)
{
    const char *why = restart_context(sb, tmp);
    if (!failure)
        failure = "The execution failed.";
    if (!why)
        return apr_pstrcat(p, failure, MSG_RESTARTED, NULL);
    ci_log(CI_LOG_WARNING, "CI0314: the execution context of an E2B container's "
           "sandbox could not be restarted (%s)", why);
    return apr_psprintf(p, "%s The container's interpreter could not be restarted "
                           "(%s): its variables may be gone.", failure, why);
}

static apr_status_t e2b_run(ci_sandbox *sb, apr_pool_t *p, const char *code,
                            ci_exec_result *res)
{
    apr_time_t began = apr_time_now();
    ci_exec_result got;
    ci_exec_outcome why;
    const char *msg = NULL;
    int sent = 0;
    apr_pool_t *tmp;
    ci_ndjson *nd;
    apr_hash_t *files = NULL;

    /* The reader and its line buffer live only as long as this execution. */
    apr_pool_create(&tmp, p);
    nd = ci_ndjson_create(tmp, sb->def->max_output, CI_HARD_OUTPUT_CAP);
    if ((why = e2b_before_run(sb, tmp, &msg)) == CI_EXEC_COMPLETED) {
        sent = 1;
        /* a container's files before, to tell which ones the run changed */
        if (sb->container)
            files = e2b_files_snapshot(sb, tmp);
        why = execute(sb, tmp, code, nd, &msg);
    }
    ci_ndjson_result(nd, why, why == CI_EXEC_COMPLETED ? NULL : msg, &got);
    *res = *ci_exec_result_copy(p, &got);
    if (files)
        e2b_files_changed(sb, p, files, res);
    if (sb->container && sent && ci_exec_failed(res)) {
        res->failure = recover(sb, p, tmp, res->failure);
        res->failure_says_all = 1;     /* it says what became of the state */
    }
    res->duration = apr_time_now() - began;
    apr_pool_destroy(tmp);
    return APR_SUCCESS;
}

static void e2b_interrupt(ci_sandbox *sb)
{
    apr_atomic_set32(&sb->interrupted, 1);
}

static void e2b_destroy(ci_sandbox *sb)
{
    if (sb->id)
        delete_sandbox(sb);
    e2b_sandbox_cleanup(sb);
}

static const char *e2b_remote_id(ci_sandbox *sb)
{
    return sb->id;
}

/* ---- containers ---------------------------------------------------------- */

/* A container's sandbox. Without HANDLE: a new sandbox living IDLE_SECONDS
 * unused, with an execution context of its own and /mnt/data. With HANDLE: the sandbox it
 * names, whose life is set to IDLE_SECONDS from now (the one call made;
 * APR_NOTFOUND when the service says it is gone). */
static apr_status_t e2b_attach(apr_pool_t *p, const ci_sandbox_def *def,
                               const char *container_id, const char *handle,
                               int idle_seconds, ci_sandbox **out, const char **err)
{
    ci_sandbox *sb;
    apr_status_t rv;
    apr_pool_t *tmp;
    const char *why;

    if (idle_seconds <= 0) {
        *err = "a container's idle expiry must be at least one second";
        return APR_EINVAL;
    }
    if (!handle) {
        if ((rv = new_sandbox(p, def, container_id, 1, idle_seconds, &sb, err)) !=
            APR_SUCCESS)
            return rv;
        sb->container = 1;
        sb->data_dir = 1;
        sb->idle = idle_seconds;
        apr_pool_create(&tmp, p);
        why = create_context(sb, tmp);
        if (!why)
            why = e2b_files_prepare(sb, tmp);
        if (why) {
            *err = apr_pstrdup(p, why);
            delete_sandbox(sb);
            e2b_sandbox_cleanup(sb);
            sb->id = NULL;
            rv = APR_EGENERAL;
        }
        else
            *out = sb;
        apr_pool_destroy(tmp);
        return rv;
    }

    if ((rv = e2b_open(p, def, handle, &sb, err)) != APR_SUCCESS)
        return rv;
    sb->idle = idle_seconds;
    apr_pool_create(&tmp, p);
    switch (e2b_set_timeout(sb, tmp, idle_seconds, 0, &why)) {
    case TIMEOUT_SET:
        *out = sb;
        break;
    case TIMEOUT_GONE:
        rv = APR_NOTFOUND;
        break;
    default:
        rv = APR_EGENERAL;
    }
    if (rv != APR_SUCCESS) {
        *err = apr_pstrdup(p, why);
        e2b_sandbox_cleanup(sb);
        sb->id = NULL;
    }
    apr_pool_destroy(tmp);
    return rv;
}

/* It was used: it lives IDLE_SECONDS from now. Not stopped by an
 * interrupt (it follows the run an interrupt ended). */
static apr_status_t e2b_keep_alive(ci_sandbox *sb, int idle_seconds, const char **err)
{
    apr_status_t rv = APR_EGENERAL;
    apr_pool_t *tmp;
    const char *why;

    if (!sb->id) {
        *err = "the sandbox was let go";
        return APR_EINVAL;
    }
    if (idle_seconds <= 0) {
        *err = "a container's idle expiry must be at least one second";
        return APR_EINVAL;
    }
    apr_pool_create(&tmp, sb->p);
    switch (e2b_set_timeout(sb, tmp, idle_seconds, 0, &why)) {
    case TIMEOUT_SET:
        sb->idle = idle_seconds;
        rv = APR_SUCCESS;
        break;
    case TIMEOUT_GONE:
        rv = APR_NOTFOUND;
        break;
    default:
        break;
    }
    if (rv != APR_SUCCESS)
        *err = apr_pstrdup(sb->p, why);
    apr_pool_destroy(tmp);
    return rv;
}

/* Let SB go: its connections closed, its secrets wiped; the sandbox itself
 * keeps running at E2B for the next attach (destroy after this does not
 * delete it). */
static void e2b_release(ci_sandbox *sb)
{
    e2b_sandbox_cleanup(sb);
    sb->id = NULL;
}

/* ---- what a dead process left ------------------------------------------ */

static int e2b_reap_cred(const ci_sandbox_def *d, ci_reap_cred *out)
{
    if (!CI_E2B(d)->api_key)
        return 0;
    out->locator = CI_E2B(d)->api_base;
    out->secret = CI_E2B(d)->api_key;
    return 1;
}

static apr_status_t e2b_reap(const ci_reap_cred *cred, const char *id, const char **err)
{
    e2b_delete *d;
    apr_size_t n;
    apr_status_t rv;
    if (!e2b_valid_id(id)) {
        *err = "the sandbox id is not one the service makes";
        return APR_EINVAL;
    }
    if (!(d = calloc(1, sizeof(*d)))) {
        *err = "out of memory";
        return APR_ENOMEM;
    }
    n = strlen(cred->locator) + strlen(id) + sizeof("/sandboxes/");
    d->url = malloc(n);
    d->key = strdup(cred->secret);
    if (!d->url || !d->key) {
        delete_free(d);
        *err = "out of memory";
        return APR_ENOMEM;
    }
    apr_snprintf(d->url, n, "%s/sandboxes/%s", cred->locator, id);
    {
        /* api_base may end with '/': "x//sandboxes" -> "x/sandboxes" */
        char *dbl = strstr(d->url, "//sandboxes/");
        if (dbl)
            memmove(dbl, dbl + 1, strlen(dbl));
    }
    rv = delete_run_status(d, err);
    delete_free(d);
    return rv;
}

/* The sandbox a container's handle names, deleted with CRED. */
static apr_status_t e2b_reap_handle(const ci_reap_cred *cred, const char *handle,
                                    const char **err)
{
    apr_pool_t *tmp;
    json_object *root;
    const char *perr, *id;
    apr_status_t rv;
    apr_size_t n = strlen(handle);
    apr_pool_create(&tmp, NULL);
    root = n <= MAX_HANDLE_LEN ? ci_json_parse(tmp, handle, n, &perr) : NULL;
    id = root ? ci_json_str(root, "sandbox_id") : NULL;
    if (!id) {
        *err = MSG_HANDLE;
        rv = APR_EINVAL;
    }
    else
        rv = e2b_reap(cred, id, err);
    if (root)
        e2b_wipe_handle_json(root);
    apr_pool_destroy(tmp);
    return rv;
}

/* ---- the tool's keys ----------------------------------------------------- */

static void e2b_defaults(apr_pool_t *p, ci_sandbox_def *d)
{
    ci_e2b_conf *c = apr_pcalloc(p, sizeof(*c));
    c->api_key_spec = "env:E2B_API_KEY";
    c->api_base = "https://api.e2b.app";
    c->template_id = "code-interpreter-v1";
    c->lifetime = 300;
    c->sandbox_url = NULL;
    d->conf = c;
}

static void *e2b_conf_copy(apr_pool_t *p, const void *conf)
{
    return apr_pmemdup(p, conf, sizeof(ci_e2b_conf));
}

/* Not the key: only its spec (a rotated key is told apart by the registry's
 * digest of the credentials). */
static const char *e2b_fingerprint(apr_pool_t *p, const ci_sandbox_def *d)
{
    const ci_e2b_conf *c = CI_E2B(d);
    return apr_psprintf(p, "%s|%s|%d|%s", c->api_base ? c->api_base : "",
                        c->template_id ? c->template_id : "", c->lifetime,
                        c->sandbox_url ? c->sandbox_url : "");
}

static const char *e2b_parse_key(apr_pool_t *p, ci_sandbox_def *d, const char *key,
                                 const char *v, int *known)
{
    *known = 1;
    if (!strcmp(key, "api_key")) {
        if (!*v)
            return "an empty value is not valid: expected env:VAR, file:PATH or the key";
        CI_E2B(d)->api_key_spec = v;
        return NULL;
    }
    if (!strcmp(key, "api_base")) {
        CI_E2B(d)->api_base = v;
        return ci_parse_url(p, v);
    }
    if (!strcmp(key, "sandbox_url")) {
        CI_E2B(d)->sandbox_url = v;
        return ci_parse_url(p, v);
    }
    if (!strcmp(key, "template")) {
        if (!*v)
            return "an empty value is not valid: expected a template name";
        CI_E2B(d)->template_id = v;
        return NULL;
    }
    if (!strcmp(key, "lifetime"))
        return ci_parse_seconds(p, v, CI_MAX_SECONDS, &CI_E2B(d)->lifetime);
    if (!strcmp(key, "internet"))
        return ci_parse_on_off(p, v, &d->network);
    *known = 0;
    return NULL;
}

static const char *e2b_resolve(apr_pool_t *p, ci_sandbox_def *d)
{
    return ci_resolve_secret(p, "api_key", CI_E2B(d)->api_key_spec, &CI_E2B(d)->api_key);
}

/* A memory tier is a template (E2B's memory comes with the template). */
static const char *e2b_tier(apr_pool_t *p, ci_sandbox_def *d, const char *value)
{
    const char *c;
    for (c = value; *c; c++)
        if (!apr_isalnum(*c) && !strchr("_-.", *c))
            return apr_psprintf(p, "'%s' is not a valid template id", value);
    CI_E2B(d)->template_id = value;
    return NULL;
}

const ci_provider ci_provider_e2b = {
    .name = "e2b",
    .caps = CI_CAP_REMOTE | CI_CAP_CONTAINERS | CI_CAP_FILES | CI_CAP_SHELL | CI_CAP_EGRESS,
    .keys = "api_key, api_base, template, lifetime, internet, sandbox_url",
    .defaults = e2b_defaults,
    .conf_copy = e2b_conf_copy,
    .fingerprint = e2b_fingerprint,
    .parse_key = e2b_parse_key,
    .resolve = e2b_resolve,
    .start = e2b_start,
    .run = e2b_run,
    .run_commands = e2b_run_commands,
    .interrupt = e2b_interrupt,
    .destroy = e2b_destroy,
    .remote_id = e2b_remote_id,
    .reap_cred = e2b_reap_cred,
    .reap = e2b_reap,
    .reap_handle = e2b_reap_handle,
    .attach = e2b_attach,
    .handle = e2b_handle,
    .keep_alive = e2b_keep_alive,
    .release = e2b_release,
    .tier = e2b_tier,
    .files_list = e2b_files_list,
    .file_get = e2b_file_get,
    .file_delete = e2b_file_delete,
    .file_put = e2b_file_put,
};
